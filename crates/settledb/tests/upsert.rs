//! `Transaction::insert_or_conflict`, the engine half of `INSERT ... ON CONFLICT` (see
//! `db/transaction/upsert.rs`; its unit test covers a lost race deterministically).
//!
//! * `inserts_or_names_the_conflicting_row`: a free key is inserted, a taken one named (the
//!   live version, after an update too), a NULL key never conflicts, the transaction's own
//!   rows conflict, a non-unique or foreign arbiter is refused without failing the
//!   transaction, and a conflict on a unique index that is not an arbiter is the usual error.
//! * `waits_for_a_running_inserter`: T1's uncommitted row holds up T2's call (seen as a lock
//!   waiter, no timing asserted); T1 commits -> Conflict, T1 rolls back -> Inserted.
//! * `repeatable_read_refuses_a_row_its_snapshot_cannot_see`: 40001's error.
//! * `threads_upserting_the_same_keys_lose_nothing`: the upsert loop a SQL layer runs (insert
//!   or update the named row, again if it moved), from several threads on the same keys: every
//!   increment lands, one row per key, `check` clean before and after VACUUM.

use std::time::{Duration, Instant};

use settledb::lmgr::LockInfo;
use settledb::{
    Column, Config, Database, Error, Index, InsertOrConflict, IsolationLevel, Schema, Table, TableOptions, Transaction,
    Type, Value,
};

fn open() -> (tempfile::TempDir, Database, Table, Index) {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        shared_buffers_bytes: 8 << 20,
        fsync: false,
        autovacuum: false,
        deadlock_timeout_ms: 50,
        ..Config::default()
    };
    let db = Database::open(dir.path(), config).unwrap();
    let schema = Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: true },
            Column { name: "n".into(), ty: Type::Int8, nullable: false },
            Column { name: "code".into(), ty: Type::Text, nullable: true },
        ],
    };
    let t = db.create_table("t", schema, TableOptions::default()).unwrap();
    db.create_index("t_id_key", "t", &["id"], true).unwrap();
    db.create_index("t_code_key", "t", &["code"], true).unwrap();
    db.create_index("t_n", "t", &["n"], false).unwrap();
    let ix = db.index("t_id_key").unwrap();
    (dir, db, t, ix)
}

fn row(id: i32, n: i64) -> Vec<Value> {
    vec![Value::Int4(id), Value::Int8(n), Value::Null]
}

fn until(db: &Database, what: &str, pred: impl Fn(&[LockInfo]) -> bool) {
    let start = Instant::now();
    while !pred(&db.locks()) {
        assert!(start.elapsed() < Duration::from_secs(60), "never saw: {what}; locks: {:#?}", db.locks());
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn assert_check_clean(db: &Database) {
    let report = settledb::check::check_database(db).unwrap();
    assert!(report.is_clean(), "check found problems:\n{report}");
}

#[test]
fn inserts_or_names_the_conflicting_row() {
    let (_d, db, t, ix) = open();
    let arb = [ix.clone()];
    let mut tx = db.begin().unwrap();
    let InsertOrConflict::Inserted(a) = tx.insert_or_conflict(&t, &row(1, 10), &arb).unwrap() else {
        panic!("a free key is inserted")
    };
    // The transaction's own row conflicts.
    assert_eq!(tx.insert_or_conflict(&t, &row(1, 0), &arb).unwrap(), InsertOrConflict::Conflict { arbiter: 0, tid: a });
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    let b = tx.update(&t, a, &row(1, 11)).unwrap().unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    // The live version is named, not the one the index entry points to.
    assert_eq!(tx.insert_or_conflict(&t, &row(1, 0), &arb).unwrap(), InsertOrConflict::Conflict { arbiter: 0, tid: b });
    // NULL keys conflict with nothing.
    let nulls = vec![Value::Null, Value::Int8(0), Value::Null];
    assert!(matches!(tx.insert_or_conflict(&t, &nulls, &arb).unwrap(), InsertOrConflict::Inserted(_)));
    assert!(matches!(tx.insert_or_conflict(&t, &nulls, &arb).unwrap(), InsertOrConflict::Inserted(_)));
    // Arbiters must be unique indexes of the table: refused, the transaction goes on.
    let e = tx.insert_or_conflict(&t, &row(2, 0), &[db.index("t_n").unwrap()]).unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e}");
    assert!(matches!(tx.insert_or_conflict(&t, &row(2, 0), &[]), Err(Error::InvalidInput(_))));
    // A conflict on a unique index that is not an arbiter is the unique violation, and the
    // row's subtransaction is rolled back.
    let coded = |id: i32, code: &str| vec![Value::Int4(id), Value::Int8(0), Value::Text(code.into())];
    assert!(matches!(tx.insert_or_conflict(&t, &coded(3, "x"), &arb).unwrap(), InsertOrConflict::Inserted(_)));
    let e = tx.insert_or_conflict(&t, &coded(4, "x"), &arb).unwrap_err();
    assert!(matches!(&e, Error::UniqueViolation { index, .. } if index == "t_code_key"), "{e}");
    assert!(tx.savepoints().is_empty());
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&ix, &[Value::Int4(4)]).unwrap(), None, "the refused row is gone");
    assert_eq!(tx.scan(&t).unwrap().count(), 4);
    tx.commit().unwrap();
    assert_check_clean(&db);
}

#[test]
fn waits_for_a_running_inserter() {
    let (_d, db, t, ix) = open();
    for commit in [true, false] {
        let mut t1 = db.begin().unwrap();
        let mine = t1.insert(&t, &row(7, 1)).unwrap();
        let outcome = std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let mut t2 = db.begin().unwrap();
                let r = t2.insert_or_conflict(&t, &row(7, 2), std::slice::from_ref(&ix)).unwrap();
                t2.commit().unwrap();
                r
            });
            until(&db, "T2 waiting for T1", |l| l.iter().any(|x| !x.granted));
            if commit {
                t1.commit().unwrap();
            } else {
                t1.rollback().unwrap();
            }
            waiter.join().unwrap()
        });
        if commit {
            assert_eq!(outcome, InsertOrConflict::Conflict { arbiter: 0, tid: mine });
        } else {
            assert!(matches!(outcome, InsertOrConflict::Inserted(_)), "{outcome:?}");
        }
        let mut tx = db.begin().unwrap();
        let (tid, v) = tx.get(&ix, &[Value::Int4(7)]).unwrap().unwrap();
        assert_eq!(v[1], Value::Int8(if commit { 1 } else { 2 }));
        tx.delete(&t, tid).unwrap();
        tx.commit().unwrap();
    }
    assert_check_clean(&db);
}

#[test]
fn repeatable_read_refuses_a_row_its_snapshot_cannot_see() {
    let (_d, db, t, ix) = open();
    let mut rr = db.begin_with(IsolationLevel::RepeatableRead).unwrap();
    assert_eq!(rr.scan(&t).unwrap().count(), 0); // takes the snapshot
    let mut other = db.begin().unwrap();
    other.insert(&t, &row(1, 1)).unwrap();
    other.commit().unwrap();
    let e = rr.insert_or_conflict(&t, &row(1, 2), std::slice::from_ref(&ix)).unwrap_err();
    assert!(matches!(e, Error::SerializationFailure), "{e}");
    drop(rr);
    // A row the snapshot sees is an ordinary conflict.
    let mut rr = db.begin_with(IsolationLevel::RepeatableRead).unwrap();
    assert!(matches!(
        rr.insert_or_conflict(&t, &row(1, 2), std::slice::from_ref(&ix)).unwrap(),
        InsertOrConflict::Conflict { .. }
    ));
    rr.commit().unwrap();
}

/// The loop `INSERT ... ON CONFLICT (id) DO UPDATE SET n = t.n + 1` runs.
fn upsert_increment(tx: &mut Transaction<'_>, t: &Table, ix: &Index, id: i32) -> settledb::Result<()> {
    loop {
        let tid = match tx.insert_or_conflict(t, &row(id, 1), std::slice::from_ref(ix))? {
            InsertOrConflict::Inserted(_) => return Ok(()),
            InsertOrConflict::Conflict { tid, .. } => tid,
        };
        let r = tx.update_with(t, tid, |old| match old {
            [Value::Int4(k), Value::Int8(n), c] if *k == id => Ok(vec![Value::Int4(*k), Value::Int8(n + 1), c.clone()]),
            _ => Err(Error::NotFound("moved".into())),
        });
        match r {
            Ok(Some(_)) => return Ok(()),
            Ok(None) | Err(Error::NotFound(_)) => continue,
            Err(e) => return Err(e),
        }
    }
}

#[test]
fn threads_upserting_the_same_keys_lose_nothing() {
    let (_d, db, t, ix) = open();
    let (threads, rounds, keys) = (4, 100, 3);
    std::thread::scope(|s| {
        for th in 0..threads {
            let (db, t, ix) = (&db, &t, &ix);
            s.spawn(move || {
                for i in 0..rounds {
                    let mut tx = db.begin().unwrap();
                    upsert_increment(&mut tx, t, ix, (i + th) % keys).unwrap();
                    tx.commit().unwrap();
                }
            });
        }
    });
    let mut tx = db.begin().unwrap();
    let rows: Vec<Vec<Value>> = tx.scan(&t).unwrap().map(|r| r.unwrap().1).collect();
    tx.commit().unwrap();
    assert_eq!(rows.len(), keys as usize, "{rows:?}");
    let total: i64 = rows.iter().map(|r| if let Value::Int8(n) = r[1] { n } else { 0 }).sum();
    assert_eq!(total, i64::from(threads * rounds));
    assert_check_clean(&db);
    db.vacuum(Some("t"), &settledb::VacuumParams::default()).unwrap();
    assert_check_clean(&db);
}
