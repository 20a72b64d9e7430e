//! Crash tests for indexes: a workload whose inserts keep splitting B-tree pages (wide keys)
//! runs on the fault-injecting file system; after every commit, and at random points with
//! torn and lost unsynced writes, the surviving image is recovered and compared with the
//! acknowledged commits *through the indexes* (forward and backward), and `check` verifies
//! the trees and their agreement with the heap. A split is one WAL record, so a crash in the
//! middle of one leaves either the old pages or the new ones after redo, never a mix.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use settledb::io::fault::{CrashMode, FaultFs};
use settledb::{Column, Config, Database, KeyBound, ScanDirection, Schema, TableOptions, Type, Value};

const DIR: &str = "/db";

type State = BTreeMap<i32, String>;

fn config() -> Config {
    Config::from_pairs([("shared_buffers", "256kB")]).unwrap()
}

fn open(fs: &Arc<FaultFs>) -> Database {
    Database::open_with_fs(fs.clone(), Path::new(DIR), config()).unwrap_or_else(|e| panic!("recovery failed: {e}"))
}

/// A label wide enough that an index on it splits every few inserts.
fn label(rng: &mut StdRng, id: i32) -> String {
    format!("{:05}-{id:05}-{}", rng.gen_range(0..100_000), "w".repeat(rng.gen_range(300..900)))
}

fn setup(db: &Database) {
    let col = |n: &str, ty| Column { name: n.into(), ty, nullable: false };
    let schema = Schema { columns: vec![col("id", Type::Int4), col("label", Type::Text)] };
    db.create_table("t", schema, TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() })
        .unwrap();
    db.create_index("t_label", "t", &["label"], false).unwrap();
}

/// Runs one transaction of random changes; returns the state it commits.
fn step(db: &Database, rng: &mut StdRng, state: &State, next: &mut i32) -> State {
    let pk = db.index("t_pkey").unwrap();
    let t = db.table("t").unwrap();
    let mut s = state.clone();
    let mut tx = db.begin().unwrap();
    for _ in 0..rng.gen_range(1..6) {
        let existing: Vec<i32> = s.keys().copied().collect();
        match rng.gen_range(0..10) {
            0..=5 => {
                let id = *next;
                *next += 1;
                let l = label(rng, id);
                tx.insert(&t, &[Value::Int4(id), Value::Text(l.clone())]).unwrap();
                s.insert(id, l);
            }
            6..=7 if !existing.is_empty() => {
                let id = existing[rng.gen_range(0..existing.len())];
                let l = label(rng, id);
                let ll = l.clone();
                tx.update_by_key(&pk, &[Value::Int4(id)], |_| Ok(vec![Value::Int4(id), Value::Text(ll.clone())]))
                    .unwrap()
                    .unwrap();
                s.insert(id, l);
            }
            8 if !existing.is_empty() => {
                let id = existing[rng.gen_range(0..existing.len())];
                assert!(tx.delete_by_key(&pk, &[Value::Int4(id)]).unwrap());
                s.remove(&id);
            }
            _ => {}
        }
    }
    tx.commit().unwrap();
    s
}

fn assert_state(db: &Database, expected: &State, what: &str) {
    let pk = db.index("t_pkey").unwrap();
    let by_label = db.index("t_label").unwrap();
    let mut tx = db.begin().unwrap();
    let all = |tx: &mut settledb::Transaction<'_>, ix, dir| {
        tx.range(ix, KeyBound::Unbounded, KeyBound::Unbounded, dir, None).unwrap()
    };
    let got: State = all(&mut tx, &pk, ScanDirection::Forward)
        .into_iter()
        .map(|(_, v)| match (&v[0], &v[1]) {
            (Value::Int4(i), Value::Text(l)) => (*i, l.clone()),
            other => panic!("{what}: unexpected row {other:?}"),
        })
        .collect();
    assert_eq!(got.len(), expected.len(), "{what}: row count through the primary key");
    assert!(got == *expected, "{what}: rows through the primary key differ from the acknowledged commits");
    let mut labels: Vec<String> = expected.values().cloned().collect();
    labels.sort();
    let by_l: Vec<String> = all(&mut tx, &by_label, ScanDirection::Forward)
        .into_iter()
        .map(|(_, v)| match &v[1] {
            Value::Text(l) => l.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(by_l == labels, "{what}: rows through the label index differ");
    let back = all(&mut tx, &by_label, ScanDirection::Backward).len();
    assert_eq!(back, labels.len(), "{what}: backward scan of the label index");
    tx.commit().unwrap();
    let report = settledb::check::check_database(db).unwrap();
    assert!(report.is_clean(), "{what}: {report}");
}

#[test]
fn index_splits_survive_crashes_at_every_commit() {
    let fs = FaultFs::new();
    let db = open(&fs);
    setup(&db);
    let mut rng = StdRng::seed_from_u64(11);
    let (mut state, mut next) = (State::new(), 0);
    for i in 0..40 {
        state = step(&db, &mut rng, &state, &mut next);
        if i == 20 {
            db.checkpoint().unwrap();
        }
        let crashed = fs.crash(CrashMode::LoseUnsynced);
        let rdb = open(&crashed);
        assert_state(&rdb, &state, &format!("after commit {i}"));
        rdb.abandon();
    }
    // The workload did split the label index many times (several pages per level).
    let pages = db.index_pages(&db.index("t_label").unwrap()).unwrap();
    assert!(pages >= 8, "the label index should have split often: {pages} pages, {} rows", state.len());
    db.abandon();
}

#[test]
fn index_splits_survive_torn_writes() {
    for seed in 0..12u64 {
        let fs = FaultFs::new();
        let db = open(&fs);
        setup(&db);
        let mut rng = StdRng::seed_from_u64(100 + seed);
        let (mut state, mut next) = (State::new(), 0);
        let n = rng.gen_range(5..35);
        for i in 0..n {
            state = step(&db, &mut rng, &state, &mut next);
            if i == n / 2 && seed % 2 == 0 {
                db.checkpoint().unwrap();
            }
        }
        let crashed = fs.crash(CrashMode::Random { seed });
        let rdb = open(&crashed);
        assert_state(&rdb, &state, &format!("seed {seed}"));
        // The recovered database takes more splits and survives another crash.
        let mut next2 = next;
        let state2 = step(&rdb, &mut rng, &state, &mut next2);
        let again = crashed.crash(CrashMode::LoseUnsynced);
        rdb.abandon();
        let rdb = open(&again);
        assert_state(&rdb, &state2, &format!("seed {seed}, second crash"));
        rdb.abandon();
        db.abandon();
    }
}
