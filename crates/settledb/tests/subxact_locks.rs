//! Row locks held by subtransactions, seen by a READ COMMITTED updater that waits on them
//! (the `settle torture` failure "savepoint transaction: branch 1": `update_by_key` on a row
//! that always exists returned `None` under heavy contention with savepoints).
//!
//! * `waiter_on_savepoint_row_lock_*`: T1 changes the row inside a savepoint, T2 (READ
//!   COMMITTED) updates it by key and blocks on T1; T1 then rolls back to the savepoint,
//!   releases it and commits, releases it and aborts, or rolls back and updates again outside
//!   it. T2 must always update the row (never `None`) and the final balance must be the sum of
//!   the committed deltas. The main thread gives T2 a moment to block, but the tests are
//!   correct whether or not it did (no timing is asserted).
//! * `savepoint_updates_of_one_row_under_contention_lose_nothing`: several threads run
//!   pgbench-like transactions on one branch row (one in two with the torture child's nested
//!   savepoint shape), with VACUUM running beside them; no update may find the row gone and
//!   the balance must equal the sum of the committed deltas.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use settledb::{
    Column, Config, Database, Error, Index, Schema, Table, TableOptions, Transaction, Type, VacuumParams, Value,
};

fn config() -> Config {
    Config { shared_buffers_bytes: 8 << 20, fsync: false, autovacuum: false, ..Config::default() }
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "bal".into(), ty: Type::Int8, nullable: false },
        ],
    }
}

/// A table `t` of `rows` rows (ids 1..=rows, balance 0) and its primary key index.
fn open(dir: &std::path::Path, rows: i32) -> (Database, Table, Index) {
    let db = Database::open(dir, config()).unwrap();
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", schema(), opts).unwrap();
    let mut tx = db.begin().unwrap();
    for id in 1..=rows {
        tx.insert(&t, &[Value::Int4(id), Value::Int8(0)]).unwrap();
    }
    tx.commit().unwrap();
    let ix = db.index("t_pkey").unwrap();
    (db, t, ix)
}

fn add(delta: i64) -> impl FnMut(&[Value]) -> settledb::Result<Vec<Value>> {
    move |row: &[Value]| match row {
        [id, Value::Int8(b)] => Ok(vec![id.clone(), Value::Int8(b + delta)]),
        other => panic!("unexpected row {other:?}"),
    }
}

fn balance(db: &Database, ix: &Index, id: i32) -> i64 {
    let mut tx = db.begin().unwrap();
    let (_, row) = tx.get(ix, &[Value::Int4(id)]).unwrap().expect("the row exists");
    tx.commit().unwrap();
    match row.as_slice() {
        [_, Value::Int8(b)] => *b,
        other => panic!("unexpected row {other:?}"),
    }
}

fn assert_check_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap();
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

/// What T1 does once T2 is (probably) waiting on its row lock.
#[derive(Clone, Copy, Debug)]
enum Ending {
    /// ROLLBACK TO a; COMMIT.
    RollbackToThenCommit,
    /// RELEASE a; COMMIT.
    ReleaseThenCommit,
    /// RELEASE a; ROLLBACK.
    ReleaseThenAbort,
    /// ROLLBACK TO a; update again (+1000) outside any savepoint... after RELEASE a; COMMIT.
    RollbackToThenUpdateAgain,
    /// ROLLBACK TO a; ROLLBACK.
    RollbackToThenAbort,
}

/// T1 (optionally having updated the row at top level first, like the torture child's leg 0)
/// updates the row by +100 inside SAVEPOINT a (and, with `nested`, by +10 more inside
/// SAVEPOINT b, released), T2 updates it by +1 and blocks, then T1 ends as `ending` says.
/// `t2_in_savepoint`: T2 runs its update inside a savepoint of its own.
fn run_waiter_case(ending: Ending, top_first: bool, nested: bool, t2_in_savepoint: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (db, _t, ix) = open(dir.path(), 1);
    let key = [Value::Int4(1)];
    let mut t1 = db.begin().unwrap();
    let mut expected = 0i64;
    let mut t1_committed = 0i64;
    if top_first {
        assert!(t1.update_by_key(&ix, &key, add(7)).unwrap().is_some());
        t1_committed += 7;
    }
    t1.savepoint("a").unwrap();
    assert!(t1.update_by_key(&ix, &key, add(100)).unwrap().is_some());
    let mut in_a = 100;
    if nested {
        t1.savepoint("b").unwrap();
        assert!(t1.update_by_key(&ix, &key, add(10)).unwrap().is_some());
        t1.release("b").unwrap();
        in_a += 10;
    }
    let ready = Barrier::new(2);
    let t2 = {
        let (db, ix, ready) = (&db, &ix, &ready);
        std::thread::scope(|s| {
            let h = s.spawn(move || {
                let mut t2 = db.begin().unwrap();
                if t2_in_savepoint {
                    t2.savepoint("x").unwrap();
                }
                ready.wait();
                let r = t2.update_by_key(ix, &[Value::Int4(1)], add(1));
                let r = r.map(|o| o.is_some());
                if t2_in_savepoint && r.is_ok() {
                    t2.release("x").unwrap();
                }
                t2.commit().unwrap();
                r
            });
            ready.wait();
            // Give T2 time to reach the row lock and wait (correct either way).
            std::thread::sleep(Duration::from_millis(100));
            match ending {
                Ending::RollbackToThenCommit => {
                    t1.rollback_to("a").unwrap();
                    t1.commit().unwrap();
                }
                Ending::ReleaseThenCommit => {
                    t1.release("a").unwrap();
                    t1_committed += in_a;
                    t1.commit().unwrap();
                }
                Ending::ReleaseThenAbort => {
                    t1.release("a").unwrap();
                    t1.rollback().unwrap();
                    t1_committed = 0;
                }
                Ending::RollbackToThenUpdateAgain => {
                    t1.rollback_to("a").unwrap();
                    t1.release("a").unwrap();
                    assert!(t1.update_by_key(ix, &key, add(1000)).unwrap().is_some());
                    t1_committed += 1000;
                    t1.commit().unwrap();
                }
                Ending::RollbackToThenAbort => {
                    t1.rollback_to("a").unwrap();
                    t1.rollback().unwrap();
                    t1_committed = 0;
                }
            }
            h.join().unwrap()
        })
    };
    let what = format!("{ending:?} top_first={top_first} nested={nested} t2_in_savepoint={t2_in_savepoint}");
    match t2 {
        Ok(found) => {
            assert!(found, "{what}: T2's update_by_key found no row");
            expected += 1;
        }
        Err(e) => panic!("{what}: T2's update failed: {e}"),
    }
    expected += t1_committed;
    assert_eq!(balance(&db, &ix, 1), expected, "{what}: balance");
    assert_check_clean(&db, &what);
}

fn all_shapes(ending: Ending) {
    for top_first in [false, true] {
        for nested in [false, true] {
            for t2_in_savepoint in [false, true] {
                run_waiter_case(ending, top_first, nested, t2_in_savepoint);
            }
        }
    }
}

#[test]
fn waiter_on_savepoint_row_lock_after_rollback_to() {
    all_shapes(Ending::RollbackToThenCommit);
}

#[test]
fn waiter_on_savepoint_row_lock_after_release_and_commit() {
    all_shapes(Ending::ReleaseThenCommit);
}

#[test]
fn waiter_on_savepoint_row_lock_after_release_and_abort() {
    all_shapes(Ending::ReleaseThenAbort);
}

#[test]
fn waiter_on_savepoint_row_lock_after_rollback_to_and_update_again() {
    all_shapes(Ending::RollbackToThenUpdateAgain);
}

#[test]
fn waiter_on_savepoint_row_lock_after_rollback_to_and_abort() {
    all_shapes(Ending::RollbackToThenAbort);
}

/// One pgbench-like leg: account `aid` (of 2..=rows) then the branch (row 1), both by `delta`.
fn leg(tx: &mut Transaction<'_>, ix: &Index, aid: i32, delta: i64) -> settledb::Result<()> {
    for (what, id) in [("account", aid), ("branch", 1)] {
        if tx.update_by_key(ix, &[Value::Int4(id)], add(delta))?.is_none() {
            panic!("{what} {id}: update_by_key found no row");
        }
    }
    Ok(())
}

fn retryable(e: &Error) -> bool {
    matches!(e, Error::SerializationFailure | Error::Deadlock { .. })
}

/// The torture child's savepoint shape: leg 0; SAVEPOINT a; leg 1; SAVEPOINT b; leg 2;
/// ROLLBACK TO b | RELEASE b; ROLLBACK TO a | RELEASE a; SAVEPOINT c; leg 3; ROLLBACK TO c |
/// RELEASE c; COMMIT. Returns the sum of the deltas of the legs that survive.
fn savepoint_body(tx: &mut Transaction<'_>, ix: &Index, rng: &mut StdRng, rows: i32) -> settledb::Result<i64> {
    let legs: Vec<(i32, i64)> = (0..4).map(|_| (rng.gen_range(2..=rows), rng.gen_range(-5000..=5000))).collect();
    let (roll_b, roll_a, roll_c) = (rng.gen_bool(0.5), rng.gen_bool(0.4), rng.gen_bool(0.5));
    let mut kept = [true; 4];
    leg(tx, ix, legs[0].0, legs[0].1)?;
    tx.savepoint("a")?;
    leg(tx, ix, legs[1].0, legs[1].1)?;
    tx.savepoint("b")?;
    leg(tx, ix, legs[2].0, legs[2].1)?;
    if roll_b {
        tx.rollback_to("b")?;
        kept[2] = false;
    } else {
        tx.release("b")?;
    }
    if roll_a {
        tx.rollback_to("a")?;
        kept[1] = false;
        kept[2] = false;
    } else {
        tx.release("a")?;
    }
    tx.savepoint("c")?;
    leg(tx, ix, legs[3].0, legs[3].1)?;
    if roll_c {
        tx.rollback_to("c")?;
        kept[3] = false;
    } else {
        tx.release("c")?;
    }
    Ok(legs.iter().zip(kept).filter(|(_, k)| *k).map(|((_, d), _)| d).sum())
}

#[test]
fn savepoint_updates_of_one_row_under_contention_lose_nothing() {
    contention_run(false);
}

/// The same with the pruning horizon held back by an old snapshot (in the torture run,
/// prepared transactions held it): nothing but aborted versions can be pruned, so the branch
/// row's versions fill a page every couple hundred updates and the row moves on to pages the
/// table is extended by, and waiters follow `t_ctid` across pages.
#[test]
fn savepoint_updates_of_one_row_with_the_horizon_held_back() {
    contention_run(true);
}

fn contention_run(hold_horizon: bool) {
    const THREADS: u64 = 4;
    // SUBXACT_LOCKS_TXNS=N runs longer (a soak); the default keeps the test a few seconds.
    let txns: u32 = std::env::var("SUBXACT_LOCKS_TXNS").ok().and_then(|v| v.parse().ok()).unwrap_or(600);
    const ROWS: i32 = 11;
    let dir = tempfile::tempdir().unwrap();
    let (db, t, ix) = open(dir.path(), ROWS);
    let mut holder = db.begin_with(settledb::IsolationLevel::RepeatableRead).unwrap();
    if hold_horizon {
        holder.get(&ix, &[Value::Int4(1)]).unwrap();
    }
    let committed = AtomicI64::new(0);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (db, ix, committed, done, t, txns) = (&db, &ix, &committed, &done, &t, txns);
        let vacuum = s.spawn(move || {
            while !done.load(Ordering::Relaxed) {
                db.vacuum(Some(t.name()), &VacuumParams::default()).unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|n| {
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(0x5eed ^ n);
                    for _ in 0..txns {
                        let mut tx = db.begin().unwrap();
                        let r = if rng.gen_bool(0.5) {
                            savepoint_body(&mut tx, ix, &mut rng, ROWS)
                        } else {
                            let (aid, d) = (rng.gen_range(2..=ROWS), rng.gen_range(-5000..=5000));
                            leg(&mut tx, ix, aid, d).map(|()| d)
                        };
                        match r {
                            Ok(d) => {
                                tx.commit().unwrap();
                                committed.fetch_add(d, Ordering::Relaxed);
                            }
                            Err(e) if retryable(&e) => drop(tx),
                            Err(e) => panic!("unexpected error: {e}"),
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        vacuum.join().unwrap();
    });
    holder.commit().unwrap();
    let total = committed.load(Ordering::Relaxed);
    assert_eq!(balance(&db, &ix, 1), total, "branch balance = sum of committed deltas");
    let accounts: i64 = (2..=ROWS).map(|id| balance(&db, &ix, id)).sum();
    assert_eq!(accounts, total, "account balances = sum of committed deltas");
    assert_check_clean(&db, "after the run");
}

/// Hypothesis 4 of the torture failure: after a crash, a transaction that was inside
/// savepoints (one released, one rolled back, one open) is aborted as a whole, and the row it
/// held is found and updated by the next transaction, with or without savepoints of its own.
/// Its WAL is made durable by another session's commit (on another row) before the crash.
#[test]
fn row_held_by_subtransactions_at_a_crash_is_updatable_after_recovery() {
    use settledb::io::fault::{CrashMode, FaultFs};
    let cfg = Config::from_pairs([("wal_segment_size", "1MB"), ("checkpoint_timeout", "1d")]).unwrap();
    let dir = std::path::Path::new("/data");
    for open_at_crash in 0..3 {
        let fs = FaultFs::new();
        let db = Database::open_with_fs(fs.clone(), dir, cfg.clone()).unwrap();
        let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
        let t = db.create_table("t", schema(), opts).unwrap();
        let mut tx = db.begin().unwrap();
        for id in 1..=2 {
            tx.insert(&t, &[Value::Int4(id), Value::Int8(0)]).unwrap();
        }
        tx.commit().unwrap();
        let ix = db.index("t_pkey").unwrap();
        let key = [Value::Int4(1)];
        // Committed history with savepoints: +1 kept, +2 rolled back, +4 kept.
        let mut tx = db.begin().unwrap();
        tx.update_by_key(&ix, &key, add(1)).unwrap().unwrap();
        tx.savepoint("a").unwrap();
        tx.update_by_key(&ix, &key, add(2)).unwrap().unwrap();
        tx.rollback_to("a").unwrap();
        tx.update_by_key(&ix, &key, add(4)).unwrap().unwrap();
        tx.release("a").unwrap();
        tx.commit().unwrap();
        // The transaction the crash interrupts.
        let mut open = db.begin().unwrap();
        open.update_by_key(&ix, &key, add(100)).unwrap().unwrap();
        open.savepoint("a").unwrap();
        open.update_by_key(&ix, &key, add(1000)).unwrap().unwrap();
        open.savepoint("b").unwrap();
        open.update_by_key(&ix, &key, add(10_000)).unwrap().unwrap();
        match open_at_crash {
            0 => open.release("b").unwrap(),
            1 => open.rollback_to("b").unwrap(),
            _ => {
                open.rollback_to("a").unwrap();
                open.savepoint("c").unwrap();
                open.update_by_key(&ix, &key, add(100_000)).unwrap().unwrap();
            }
        }
        // Another session's commit makes the open transaction's records durable.
        let mut other = db.begin().unwrap();
        other.update_by_key(&ix, &[Value::Int4(2)], add(5)).unwrap().unwrap();
        other.commit().unwrap();
        let crashed = fs.crash(CrashMode::LoseUnsynced);
        std::mem::forget(open);
        std::mem::forget(db);
        let db = Database::open_with_fs(crashed, dir, cfg.clone()).unwrap();
        let what = format!("open_at_crash={open_at_crash}");
        let ix = db.index("t_pkey").unwrap();
        assert_eq!(balance(&db, &ix, 1), 5, "{what}: committed balance after recovery");
        assert_eq!(balance(&db, &ix, 2), 5, "{what}: the other row");
        // The row is free and found, by a plain update and by one inside savepoints.
        let mut tx = db.begin().unwrap();
        assert!(tx.update_by_key(&ix, &key, add(7)).unwrap().is_some(), "{what}: plain update");
        tx.savepoint("a").unwrap();
        assert!(tx.update_by_key(&ix, &key, add(20)).unwrap().is_some(), "{what}: update in a savepoint");
        tx.rollback_to("a").unwrap();
        assert!(tx.update_by_key(&ix, &key, add(30)).unwrap().is_some(), "{what}: update after ROLLBACK TO");
        tx.commit().unwrap();
        assert_eq!(balance(&db, &ix, 1), 5 + 7 + 30, "{what}: balance after the new work");
        assert_check_clean(&db, &what);
    }
}
