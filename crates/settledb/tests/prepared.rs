//! Prepared transactions across crashes (through [`FaultFs`]: only what was fsynced survives,
//! or a random part of the rest, torn), and many prepared transactions at once.
//!
//! `crash_at_every_step_of_two_phase_commit` runs one scenario and crashes it after each of
//! its steps: PREPARE (state only in WAL), a checkpoint (state file written), more work,
//! COMMIT PREPARED, a checkpoint after it. After every crash the recovered database must hold
//! exactly the rows the steps acknowledged so far, list the prepared transaction exactly when
//! it was prepared and not yet finished, accept COMMIT PREPARED for it then, and pass `check`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use settledb::io::fault::{CrashMode, FaultFs};
use settledb::{Column, Config, Database, Schema, Table, TableOptions, Type, Value};

const DIR: &str = "/data";

fn config() -> Config {
    Config::from_pairs([
        ("wal_segment_size", "1MB"),
        ("checkpoint_timeout", "1d"),
        ("max_wal_size", "1TB"),
        ("wal_writer_delay", "10s"),
        ("autovacuum", "off"),
        ("max_prepared_transactions", "200000"),
    ])
    .unwrap()
}

fn open(fs: &Arc<FaultFs>) -> Database {
    Database::open_with_fs(fs.clone(), Path::new(DIR), config()).unwrap()
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "val".into(), ty: Type::Int4, nullable: false },
        ],
    }
}

fn rows(db: &Database) -> BTreeMap<i32, i32> {
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    let r = tx
        .scan(&t)
        .unwrap()
        .map(|r| match r.unwrap().1.as_slice() {
            [Value::Int4(id), Value::Int4(v)] => (*id, *v),
            other => panic!("unexpected row {other:?}"),
        })
        .collect();
    tx.commit().unwrap();
    r
}

fn insert(db: &Database, t: &Table, id: i32, val: i32) {
    let mut tx = db.begin().unwrap();
    tx.insert(t, &[Value::Int4(id), Value::Int4(val)]).unwrap();
    tx.commit().unwrap();
}

fn assert_check_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap();
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

/// What the steps acknowledged so far.
#[derive(Clone, Default)]
struct Expect {
    rows: BTreeMap<i32, i32>,
    /// The rows the prepared transaction adds when committed.
    pending: Option<BTreeMap<i32, i32>>,
}

fn run_steps(fs: &Arc<FaultFs>, crash_after: usize, mode: CrashMode) -> (Arc<FaultFs>, Expect) {
    let db = open(fs);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    insert(&db, &t, 1, 10);
    db.checkpoint().unwrap();
    let mut e = Expect { rows: BTreeMap::from([(1, 10)]), pending: None };
    let mut step = 0;
    let mut after = |e: &Expect| {
        step += 1;
        (step == crash_after).then(|| (fs.crash(mode), e.clone()))
    };
    // 1. PREPARE: a savepoint released, one rolled back.
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(2), Value::Int4(20)]).unwrap();
    tx.savepoint("a").unwrap();
    tx.insert(&t, &[Value::Int4(3), Value::Int4(30)]).unwrap();
    tx.release("a").unwrap();
    tx.savepoint("b").unwrap();
    tx.insert(&t, &[Value::Int4(4), Value::Int4(40)]).unwrap();
    tx.rollback_to("b").unwrap();
    tx.prepare("tp").unwrap();
    drop(tx);
    e.pending = Some(BTreeMap::from([(2, 20), (3, 30)]));
    if let Some(r) = after(&e) {
        db.abandon();
        return r;
    }
    // 2. A checkpoint writes its state file.
    db.checkpoint().unwrap();
    if let Some(r) = after(&e) {
        db.abandon();
        return r;
    }
    // 3. Other work commits meanwhile.
    insert(&db, &t, 5, 50);
    e.rows.insert(5, 50);
    if let Some(r) = after(&e) {
        db.abandon();
        return r;
    }
    // 4. COMMIT PREPARED.
    db.commit_prepared("tp").unwrap();
    let pending = e.pending.take().unwrap_or_default();
    e.rows.extend(pending);
    if let Some(r) = after(&e) {
        db.abandon();
        return r;
    }
    // 5. A checkpoint after it (the state file is gone).
    db.checkpoint().unwrap();
    let r = (fs.crash(mode), e);
    db.abandon();
    r
}

#[test]
fn crash_at_every_step_of_two_phase_commit() {
    for crash_after in 1..=5 {
        for mode in [CrashMode::LoseUnsynced, CrashMode::Random { seed: crash_after as u64 * 77 }] {
            let what = format!("crash after step {crash_after} ({mode:?})");
            let fs = FaultFs::new();
            let (crashed, e) = run_steps(&fs, crash_after, mode);
            let db = open(&crashed);
            assert_eq!(rows(&db), e.rows, "{what}: rows after recovery");
            let prepared: Vec<String> = db.prepared_xacts().into_iter().map(|p| p.gid).collect();
            assert_eq!(prepared.len(), usize::from(e.pending.is_some()), "{what}: prepared {prepared:?}");
            assert_check_clean(&db, &what);
            let mut expect = e.rows.clone();
            if let Some(p) = &e.pending {
                db.commit_prepared("tp").unwrap();
                expect.extend(p.clone());
            } else {
                assert!(db.commit_prepared("tp").is_err(), "{what}: finished already");
            }
            assert_eq!(rows(&db), expect, "{what}: after COMMIT PREPARED");
            // And once more across a crash, now that it is committed.
            let again = crashed.crash(CrashMode::LoseUnsynced);
            db.abandon();
            let db = open(&again);
            assert_eq!(rows(&db), expect, "{what}: after a second crash");
            assert!(db.prepared_xacts().is_empty(), "{what}");
            assert_check_clean(&db, &format!("{what}, second crash"));
            db.abandon();
        }
    }
}

/// Thousands of prepared transactions at once (`max_prepared_transactions` = 200,000), each
/// holding a row lock, alongside ordinary transactions; they survive a clean restart and a
/// crash, and are then finished in turn.
#[test]
fn thousands_of_prepared_transactions() {
    const N: i32 = 3000;
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    for i in 0..N {
        let mut tx = db.begin().unwrap();
        tx.insert(&t, &[Value::Int4(i), Value::Int4(i)]).unwrap();
        tx.prepare(&format!("p{i}")).unwrap();
        if i % 500 == 0 {
            insert(&db, &t, -i - 1, 0);
        }
    }
    assert_eq!(db.prepared_xacts().len(), N as usize);
    assert_eq!(rows(&db).len(), 6, "only the ordinary commits are visible");
    db.checkpoint().unwrap();
    for i in (0..N).step_by(2) {
        db.commit_prepared(&format!("p{i}")).unwrap();
    }
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    let db = open(&crashed);
    assert_eq!(db.prepared_xacts().len(), N as usize / 2);
    for i in (1..N).step_by(2) {
        db.rollback_prepared(&format!("p{i}")).unwrap();
    }
    let r = rows(&db);
    assert_eq!(r.len(), N as usize / 2 + 6);
    assert!(r.keys().filter(|&&k| k >= 0).all(|k| k % 2 == 0));
    assert_check_clean(&db, "after finishing all");
    db.abandon();
}

/// A prepared transaction holds back the relfrozenxid VACUUM can reach, across a clean
/// restart too: VACUUM FREEZE cannot freeze its row, nor rows inserted after it began (the
/// removable cutoff stops at its XID), so relfrozenxid stays at or before its XID; after
/// COMMIT PREPARED the next VACUUM FREEZE moves relfrozenxid past it.
#[test]
fn a_prepared_transaction_holds_back_relfrozenxid() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    insert(&db, &t, 1, 1);
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(2), Value::Int4(2)]).unwrap();
    let prepared_xid = tx.xid().unwrap();
    tx.prepare("hold").unwrap();
    drop(tx);
    insert(&db, &t, 3, 3);
    db.close().unwrap();

    let db = open(&fs);
    let freeze = settledb::VacuumParams { freeze: true, verbose: true, ..Default::default() };
    let report = db.vacuum(Some("t"), &freeze).unwrap().remove(0);
    let t = db.table("t").unwrap();
    assert!(!prepared_xid.precedes(report.oldest_xmin), "cutoff {} passed {prepared_xid}", report.oldest_xmin);
    assert!(!prepared_xid.precedes(t.relfrozenxid()), "relfrozenxid {} passed {prepared_xid}", t.relfrozenxid());
    assert!(
        report
            .verbose_text()
            .contains(&format!("removable cutoff held back by prepared transaction \"hold\" (xid {prepared_xid})")),
        "{}",
        report.verbose_text()
    );
    db.commit_prepared("hold").unwrap();
    let report = db.vacuum(Some("t"), &freeze).unwrap().remove(0);
    let t = db.table("t").unwrap();
    assert!(prepared_xid.precedes(t.relfrozenxid()), "relfrozenxid {} after COMMIT PREPARED", t.relfrozenxid());
    assert!(!report.verbose_text().contains("held back"), "{}", report.verbose_text());
    assert_eq!(rows(&db), BTreeMap::from([(1, 1), (2, 2), (3, 3)]));
    assert_check_clean(&db, "after COMMIT PREPARED and VACUUM FREEZE");
    db.close().unwrap();
}
