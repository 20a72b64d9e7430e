//! B-tree indexes against an oracle: threads insert, update (key and non-key columns), delete
//! and range-scan through a unique and a secondary index while a `BTreeMap` of committed state
//! is kept beside them. Each thread owns a disjoint key range (so the oracle needs no locking
//! order) but all share the same index pages, so splits, page locks and unique checks are
//! exercised concurrently. After the run, a restart and a crash, every index range equals the
//! oracle and `check` (index ↔ heap agreement included) is clean.

use std::collections::BTreeMap;
use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use settledb::{Column, Config, Database, KeyBound, ScanDirection, Schema, TableOptions, Type, Value};

const THREADS: i32 = 4;
const KEYS_PER_THREAD: i32 = 400;
const TXNS_PER_THREAD: usize = 300;

type Oracle = BTreeMap<i32, (i32, String)>;

fn schema() -> Schema {
    let col = |n: &str, ty| Column { name: n.into(), ty, nullable: false };
    Schema { columns: vec![col("k", Type::Int4), col("grp", Type::Int4), col("note", Type::Text)] }
}

fn config() -> Config {
    Config::from_pairs([("shared_buffers", "512kB"), ("fsync", "off")]).unwrap()
}

fn note(rng: &mut StdRng) -> String {
    // Wide enough that the indexes split often.
    let n = rng.gen_range(0..1000);
    format!("note-{n:04}-{}", "x".repeat(rng.gen_range(0..40)))
}

fn row(k: i32, grp: i32, note: &str) -> Vec<Value> {
    vec![Value::Int4(k), Value::Int4(grp), Value::Text(note.to_string())]
}

fn int(v: &Value) -> i32 {
    match v {
        Value::Int4(x) => *x,
        other => panic!("expected int4, got {other:?}"),
    }
}

/// Everything visible through the primary key, and through the secondary index, as oracles.
fn contents(db: &Database) -> (Oracle, Vec<(i32, i32)>) {
    let pk = db.index("t_pkey").unwrap();
    let by_grp = db.index("t_grp").unwrap();
    let mut tx = db.begin().unwrap();
    let rows = tx.range(&pk, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward, None).unwrap();
    let mut m = Oracle::new();
    let mut last = i32::MIN;
    for (_, v) in rows {
        let k = int(&v[0]);
        assert!(k > last, "primary key scan out of order: {k} after {last}");
        last = k;
        let Value::Text(n) = &v[2] else { panic!("note") };
        m.insert(k, (int(&v[1]), n.clone()));
    }
    let back = tx.range(&pk, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Backward, None).unwrap();
    let back_keys: Vec<i32> = back.iter().map(|(_, v)| int(&v[0])).collect();
    let mut fwd_keys: Vec<i32> = m.keys().copied().collect();
    fwd_keys.reverse();
    assert_eq!(back_keys, fwd_keys, "backward scan is the forward scan reversed");
    let grp = tx.index_only(&by_grp, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward, None).unwrap();
    let grp: Vec<(i32, i32)> = grp.iter().map(|k| (int(&k[0]), int(&k[1]))).collect();
    tx.commit().unwrap();
    (m, grp)
}

fn expected_grp(m: &Oracle) -> Vec<(i32, i32)> {
    let mut v: Vec<(i32, i32)> = m.iter().map(|(k, (g, _))| (*g, *k)).collect();
    v.sort();
    v
}

fn worker(db: &Database, oracle: &Mutex<Oracle>, t: i32) {
    let pk = db.index("t_pkey").unwrap();
    let table = db.table("t").unwrap();
    let mut rng = StdRng::seed_from_u64(0xb7ee + t as u64);
    let base = t * KEYS_PER_THREAD;
    let mut mine: Oracle = Oracle::new();
    for _ in 0..TXNS_PER_THREAD {
        let mut tx = db.begin().unwrap();
        let mut staged = mine.clone();
        for _ in 0..rng.gen_range(1..5) {
            let k = base + rng.gen_range(0..KEYS_PER_THREAD);
            let action = rng.gen_range(0..10);
            match (action, staged.contains_key(&k)) {
                (0..=3, false) => {
                    let (g, n) = (rng.gen_range(0..20), note(&mut rng));
                    tx.insert(&table, &row(k, g, &n)).unwrap();
                    staged.insert(k, (g, n));
                }
                (0..=3, true) => {
                    // A duplicate: the unique index refuses it and the transaction fails.
                    let e = tx.insert(&table, &row(k, 0, "dup")).unwrap_err();
                    assert!(e.to_string().contains("duplicate key value"), "{e}");
                    staged = mine.clone();
                    break;
                }
                (4..=6, true) => {
                    let (g, n) = (rng.gen_range(0..20), note(&mut rng));
                    let nn = n.clone();
                    let r = tx.update_by_key(&pk, &[Value::Int4(k)], |_| Ok(row(k, g, &nn))).unwrap();
                    assert!(r.is_some(), "update of key {k} found no row");
                    staged.insert(k, (g, n));
                }
                (7, true) => {
                    // Move the row to a free key of ours (an indexed-column update: not HOT).
                    let nk = base + rng.gen_range(0..KEYS_PER_THREAD);
                    if staged.contains_key(&nk) {
                        continue;
                    }
                    let (g, n) = staged.remove(&k).unwrap();
                    let nn = n.clone();
                    tx.update_by_key(&pk, &[Value::Int4(k)], |_| Ok(row(nk, g, &nn))).unwrap().unwrap();
                    staged.insert(nk, (g, n));
                }
                (8..=9, true) => {
                    assert!(tx.delete_by_key(&pk, &[Value::Int4(k)]).unwrap());
                    staged.remove(&k);
                }
                _ => {
                    let got = tx.get(&pk, &[Value::Int4(k)]).unwrap();
                    assert!(got.is_none(), "key {k} should be absent");
                }
            }
        }
        // Our own rows, seen through the index inside the transaction.
        let lo = KeyBound::Included(vec![Value::Int4(base)]);
        let hi = KeyBound::Excluded(vec![Value::Int4(base + KEYS_PER_THREAD)]);
        if !tx.is_failed() {
            let seen: Vec<i32> =
                tx.range(&pk, lo, hi, ScanDirection::Forward, None).unwrap().iter().map(|(_, v)| int(&v[0])).collect();
            assert_eq!(seen, staged.keys().copied().collect::<Vec<_>>(), "thread {t} sees its own changes");
        }
        if rng.gen_bool(0.15) || tx.is_failed() {
            let _ = tx.rollback();
            continue;
        }
        tx.commit().unwrap();
        mine = staged;
        let mut o = oracle.lock().unwrap();
        o.retain(|k, _| *k < base || *k >= base + KEYS_PER_THREAD);
        o.extend(mine.iter().map(|(k, v)| (*k, v.clone())));
    }
}

fn assert_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap();
    assert!(report.is_clean(), "{what}: {report}");
}

#[test]
fn concurrent_index_changes_match_the_oracle_across_restart_and_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Database::open(&path, config()).unwrap();
    let options = TableOptions { primary_key: Some(vec!["k".into()]), ..TableOptions::default() };
    db.create_table("t", schema(), options).unwrap();
    db.create_index("t_grp", "t", &["grp", "k"], false).unwrap();
    let oracle = Mutex::new(Oracle::new());
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (db, oracle) = (&db, &oracle);
            s.spawn(move || worker(db, oracle, t));
        }
    });
    let expected = oracle.into_inner().unwrap();
    assert!(expected.len() > 100, "the workload left rows: {}", expected.len());
    let (got, grp) = contents(&db);
    assert_eq!(got, expected, "after the workload");
    assert_eq!(grp, expected_grp(&expected), "secondary index after the workload");
    assert_clean(&db, "after the workload");

    db.close().unwrap();
    let db = Database::open(&path, config()).unwrap();
    let (got, grp) = contents(&db);
    assert_eq!(got, expected, "after a restart");
    assert_eq!(grp, expected_grp(&expected), "secondary index after a restart");

    // More changes, then a crash: recovery replays the index pages (splits included).
    let pk = db.index("t_pkey").unwrap();
    let table = db.table("t").unwrap();
    let mut expected = expected;
    let mut tx = db.begin().unwrap();
    for k in 10_000..10_300 {
        tx.insert(&table, &row(k, k % 20, &format!("late-{k}"))).unwrap();
        expected.insert(k, (k % 20, format!("late-{k}")));
    }
    tx.commit().unwrap();
    let mut open = db.begin().unwrap();
    open.insert(&table, &row(20_000, 1, "in progress at the crash")).unwrap();
    open.update_by_key(&pk, &[Value::Int4(10_000)], |_| Ok(row(10_000, 3, "never committed"))).unwrap();
    std::mem::forget(open);
    db.abandon();
    let db = Database::open(&path, config()).unwrap();
    let (got, grp) = contents(&db);
    assert_eq!(got, expected, "after a crash");
    assert_eq!(grp, expected_grp(&expected), "secondary index after a crash");
    assert_clean(&db, "after a crash");
    // The key the crashed transaction held is free.
    let mut tx = db.begin().unwrap();
    tx.insert(&db.table("t").unwrap(), &row(20_000, 1, "now")).unwrap();
    tx.commit().unwrap();
    db.close().unwrap();
}
