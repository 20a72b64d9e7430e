//! Row locks through the engine's API ([`settledb::Transaction::lock_row`], `heap::lock`):
//! `SELECT ... FOR UPDATE/SHARE`'s engine half.
//!
//! * a locked row makes an updater and a deleter wait until the locker commits or aborts;
//! * NOWAIT fails with PostgreSQL's message, SKIP LOCKED gives the row up, and every lock is
//!   exclusive (two FOR SHARE lockers exclude each other: no MultiXacts);
//! * the locker itself updates, deletes and locks again without waiting;
//! * ROLLBACK TO releases a lock taken in the savepoint, RELEASE keeps it;
//! * READ COMMITTED follows a committed update to the newest version; REPEATABLE READ fails
//!   with a serialization error there, but not over a lock that committed;
//! * lock_timeout and the interrupt end a wait;
//! * VACUUM (FREEZE) and `check` are clean with rows locked by running and ended lockers, and
//!   relfrozenxid stays at or below a running locker's XID;
//! * a crash after a lock recovers the row live and unlocked;
//! * logical decoding of a transaction that only locks yields no change.
//!
//! Blocking is detected through `Database::locks` (a waiter appears); no timing is asserted.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use settledb::db::DecodeLimits;
use settledb::io::fault::{CrashMode, FaultFs};
use settledb::lmgr::LockInfo;
use settledb::{
    Column, Config, Database, Error, LockResult, RowLockMode, RowLockWait, Schema, Table, TableOptions, Tid, Type,
    VacuumParams, Value, WalLevel,
};

fn config() -> Config {
    Config {
        shared_buffers_bytes: 8 << 20,
        fsync: false,
        autovacuum: false,
        deadlock_timeout_ms: 50,
        ..Config::default()
    }
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "v".into(), ty: Type::Int8, nullable: false },
        ],
    }
}

/// Table `name` with rows (1, 0) .. (n, 0); their TIDs.
fn table(db: &Database, name: &str, rows: i32) -> (Table, Vec<Tid>) {
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table(name, schema(), opts).unwrap();
    let mut tx = db.begin().unwrap();
    let tids = (1..=rows).map(|id| tx.insert(&t, &[Value::Int4(id), Value::Int8(0)]).unwrap()).collect();
    tx.commit().unwrap();
    (t, tids)
}

fn open() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    (dir, db)
}

fn bump(row: &[Value]) -> settledb::Result<Vec<Value>> {
    match row {
        [id, Value::Int8(v)] => Ok(vec![id.clone(), Value::Int8(v + 1)]),
        other => panic!("unexpected row {other:?}"),
    }
}

/// The committed rows of `t`: (id, v), by id.
fn rows(db: &Database, t: &Table) -> Vec<(i32, i64)> {
    let mut tx = db.begin().unwrap();
    let mut out: Vec<(i32, i64)> = tx
        .scan(t)
        .unwrap()
        .map(|r| match r.unwrap().1.as_slice() {
            [Value::Int4(id), Value::Int8(v)] => (*id, *v),
            other => panic!("{other:?}"),
        })
        .collect();
    out.sort();
    out
}

/// Waits until someone waits for a lock (a step blocked); panics after a minute, which only a
/// hang can take.
fn until_waiting(db: &Database, n: usize) {
    let start = Instant::now();
    let waiting = |l: &[LockInfo]| l.iter().filter(|x| !x.granted).count();
    while waiting(&db.locks()) < n {
        assert!(start.elapsed() < Duration::from_secs(60), "never saw {n} waiters; locks: {:#?}", db.locks());
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn locked(r: LockResult) -> (Tid, Vec<Value>, bool) {
    match r {
        LockResult::Locked { tid, values, followed } => (tid, values, followed),
        other => panic!("expected a lock, got {other:?}"),
    }
}

fn assert_clean(db: &Database) {
    let report = settledb::check::check_database(db).unwrap();
    assert!(report.is_clean(), "check found problems:\n{report}");
}

/// Whether another transaction can lock the row now (NOWAIT), rolled back at once.
fn free(db: &Database, t: &Table, tid: Tid) -> bool {
    let mut tx = db.begin().unwrap();
    match tx.lock_row(t, tid, RowLockMode::Update, RowLockWait::NoWait) {
        Ok(LockResult::Locked { .. }) => true,
        Err(Error::LockNotAvailable(m)) => {
            assert_eq!(m, "could not obtain lock on row in relation \"t\"");
            false
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_locked_row_blocks_an_updater_until_the_locker_commits() {
    let (_d, db) = open();
    let (t, tids) = table(&db, "t", 3);
    let (db, t, tids) = (&db, &t, &tids[..]);
    let mut locker = db.begin().unwrap();
    let (tid, vals, followed) = locked(locker.lock_row(t, tids[0], RowLockMode::Update, RowLockWait::Block).unwrap());
    assert_eq!((tid, followed), (tids[0], false));
    assert_eq!(vals, vec![Value::Int4(1), Value::Int8(0)]);
    // Readers are not blocked, and see the row unchanged.
    assert_eq!(rows(db, t), vec![(1, 0), (2, 0), (3, 0)]);
    std::thread::scope(|s| {
        let w = s.spawn(move || {
            let mut tx = db.begin().unwrap();
            let r = tx.update_with(t, tids[0], bump).unwrap();
            tx.commit().unwrap();
            r
        });
        until_waiting(db, 1);
        // The locker itself changes its locked row without waiting.
        locker.update_with(t, tids[0], bump).unwrap().unwrap();
        locker.commit().unwrap();
        // The waiter follows the locker's committed update (READ COMMITTED) and adds to it.
        assert!(w.join().unwrap().is_some());
    });
    assert_eq!(rows(db, t), vec![(1, 2), (2, 0), (3, 0)]);
    assert_clean(db);
}

#[test]
fn a_locked_row_blocks_a_deleter_until_the_locker_aborts() {
    let (_d, db) = open();
    let (t, tids) = table(&db, "t", 3);
    let db = &db;
    let t = &t;
    let mut locker = db.begin().unwrap();
    locked(locker.lock_row(t, tids[1], RowLockMode::Share, RowLockWait::Block).unwrap());
    std::thread::scope(|s| {
        let w = s.spawn(move || {
            let mut tx = db.begin().unwrap();
            let r = tx.delete(t, tids[1]).unwrap();
            tx.commit().unwrap();
            r
        });
        until_waiting(db, 1);
        locker.rollback().unwrap();
        assert!(w.join().unwrap(), "the deleter deletes once the locker is gone");
    });
    assert_eq!(rows(db, t), vec![(1, 0), (3, 0)]);
    assert_clean(db);
}

#[test]
fn nowait_skip_locked_and_every_lock_exclusive() {
    let (_d, db) = open();
    let (t, tids) = table(&db, "t", 3);
    let mut a = db.begin().unwrap();
    locked(a.lock_row(&t, tids[0], RowLockMode::KeyShare, RowLockWait::Block).unwrap());
    // Locking again (any mode) is a no-op for the holder.
    locked(a.lock_row(&t, tids[0], RowLockMode::Update, RowLockWait::NoWait).unwrap());

    let mut b = db.begin().unwrap();
    assert_eq!(b.lock_row(&t, tids[0], RowLockMode::KeyShare, RowLockWait::SkipLocked).unwrap(), LockResult::Skipped);
    locked(b.lock_row(&t, tids[1], RowLockMode::Share, RowLockWait::SkipLocked).unwrap());
    match b.lock_row(&t, tids[0], RowLockMode::Share, RowLockWait::NoWait) {
        Err(Error::LockNotAvailable(m)) => assert_eq!(m, "could not obtain lock on row in relation \"t\""),
        other => panic!("{other:?}"),
    }
    // NOWAIT's failure fails the transaction, as in PostgreSQL.
    assert!(b.is_failed());
    b.rollback().unwrap();
    // An updater that is still running blocks a locker too.
    let mut c = db.begin().unwrap();
    c.update_with(&t, tids[2], bump).unwrap().unwrap();
    let mut d = db.begin().unwrap();
    assert_eq!(d.lock_row(&t, tids[2], RowLockMode::Update, RowLockWait::SkipLocked).unwrap(), LockResult::Skipped);
    c.rollback().unwrap();
    locked(d.lock_row(&t, tids[2], RowLockMode::Update, RowLockWait::NoWait).unwrap());
    d.commit().unwrap();
    a.commit().unwrap();
    assert!(free(&db, &t, tids[0]));
    assert_clean(&db);
}

#[test]
fn rollback_to_savepoint_releases_a_lock_and_release_keeps_it() {
    let (_d, db) = open();
    let (t, tids) = table(&db, "t", 3);
    let mut tx = db.begin().unwrap();
    tx.savepoint("a").unwrap();
    locked(tx.lock_row(&t, tids[0], RowLockMode::Update, RowLockWait::Block).unwrap());
    assert!(!free(&db, &t, tids[0]));
    tx.rollback_to("a").unwrap();
    assert!(free(&db, &t, tids[0]), "ROLLBACK TO released the lock");

    tx.savepoint("b").unwrap();
    locked(tx.lock_row(&t, tids[1], RowLockMode::Update, RowLockWait::Block).unwrap());
    tx.release("b").unwrap();
    tx.savepoint("c").unwrap();
    // Held by a current XID: nothing to do inside the new savepoint, and its rollback keeps it.
    locked(tx.lock_row(&t, tids[1], RowLockMode::Update, RowLockWait::NoWait).unwrap());
    tx.rollback_to("c").unwrap();
    assert!(!free(&db, &t, tids[1]), "RELEASE handed the lock to the transaction");
    tx.commit().unwrap();
    assert!(free(&db, &t, tids[1]));
    assert_clean(&db);
}

#[test]
fn read_committed_locks_the_newest_version_of_an_updated_row() {
    let (_d, db) = open();
    let (t, tids) = table(&db, "t", 2);
    let (db, t, tids) = (&db, &t, &tids[..]);
    let mut updater = db.begin().unwrap();
    let new_tid = updater.update_with(t, tids[0], bump).unwrap().unwrap();
    std::thread::scope(|s| {
        let w = s.spawn(move || {
            let mut tx = db.begin().unwrap();
            let r = tx.lock_row(t, tids[0], RowLockMode::NoKeyUpdate, RowLockWait::Block).unwrap();
            (tx, r)
        });
        until_waiting(db, 1);
        updater.commit().unwrap();
        let (tx, r) = w.join().unwrap();
        let (tid, vals, followed) = locked(r);
        assert_eq!((tid, followed), (new_tid, true));
        assert_eq!(vals, vec![Value::Int4(1), Value::Int8(1)]);
        assert!(!free(db, t, new_tid), "the newest version is the one locked");
        tx.commit().unwrap();
    });
    // A deleted row is gone.
    let mut del = db.begin().unwrap();
    assert!(del.delete(t, tids[1]).unwrap());
    del.commit().unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.lock_row(t, tids[1], RowLockMode::Update, RowLockWait::Block).unwrap(), LockResult::Gone);
    tx.commit().unwrap();
    assert_clean(db);
}

#[test]
fn repeatable_read_fails_on_a_concurrent_update_but_not_on_a_finished_lock() {
    let (_d, db) = open();
    let (t, tids) = table(&db, "t", 2);
    let mut rr = db.begin_with(settledb::IsolationLevel::RepeatableRead).unwrap();
    assert_eq!(rr.scan(&t).unwrap().count(), 2); // the snapshot is taken
    let mut other = db.begin().unwrap();
    other.update_with(&t, tids[0], bump).unwrap().unwrap();
    locked(other.lock_row(&t, tids[1], RowLockMode::Update, RowLockWait::Block).unwrap());
    other.commit().unwrap();
    // Row 2 was only locked by a transaction that has committed since: no conflict.
    locked(rr.lock_row(&t, tids[1], RowLockMode::Update, RowLockWait::Block).unwrap());
    match rr.lock_row(&t, tids[0], RowLockMode::Share, RowLockWait::Block) {
        Err(e @ Error::SerializationFailure) => {
            assert_eq!(e.to_string(), "could not serialize access due to concurrent update")
        }
        other => panic!("{other:?}"),
    }
    rr.rollback().unwrap();
    assert_clean(&db);
}

#[test]
fn lock_timeout_and_interrupt_end_a_wait() {
    let (_d, db) = open();
    let (t, tids) = table(&db, "t", 1);
    let mut holder = db.begin().unwrap();
    locked(holder.lock_row(&t, tids[0], RowLockMode::Update, RowLockWait::Block).unwrap());
    // The waits run on another thread: one on the holder's own thread could never end, and
    // the deadlock detector says so.
    let (db, t, tid) = (&db, &t, tids[0]);
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut tx = db.begin().unwrap();
            tx.set_lock_timeout(Some(Duration::from_millis(10)));
            match tx.lock_row(t, tid, RowLockMode::Update, RowLockWait::Block) {
                Err(Error::LockNotAvailable(m)) => assert_eq!(m, "canceling statement due to lock timeout"),
                other => panic!("{other:?}"),
            }
            tx.rollback().unwrap();
            let mut tx = db.begin().unwrap();
            let stop = settledb::Interrupt::new(|| Err("canceling statement due to user request".into()));
            tx.set_interrupt(Some(stop));
            match tx.lock_row(t, tid, RowLockMode::Update, RowLockWait::Block) {
                Err(Error::Interrupted(e)) => assert_eq!(e.to_string(), "canceling statement due to user request"),
                other => panic!("{other:?}"),
            }
            tx.rollback().unwrap();
        })
        .join()
        .unwrap();
    });
    holder.commit().unwrap();
}

#[test]
fn vacuum_freeze_and_check_are_clean_with_locked_rows() {
    let (_d, db) = open();
    let (t, tids) = table(&db, "t", 50);
    let freeze = VacuumParams { freeze: true, ..VacuumParams::default() };
    // Ended lockers: one committed, one aborted.
    let mut a = db.begin().unwrap();
    locked(a.lock_row(&t, tids[0], RowLockMode::Update, RowLockWait::Block).unwrap());
    a.commit().unwrap();
    let mut b = db.begin().unwrap();
    locked(b.lock_row(&t, tids[1], RowLockMode::KeyShare, RowLockWait::Block).unwrap());
    b.rollback().unwrap();
    // A running locker.
    let mut c = db.begin().unwrap();
    locked(c.lock_row(&t, tids[2], RowLockMode::Share, RowLockWait::Block).unwrap());
    let running = c.xid().unwrap();
    db.vacuum(Some("t"), &freeze).unwrap();
    assert_clean(&db);
    let rfx = db.table("t").unwrap().relfrozenxid();
    assert!(rfx.0 <= running.0, "relfrozenxid {rfx} passed the running locker {running}");
    assert!(!free(&db, &t, tids[2]), "VACUUM kept the running locker's lock");
    assert_eq!(rows(&db, &t).len(), 50);
    c.commit().unwrap();
    db.vacuum(Some("t"), &freeze).unwrap();
    assert_clean(&db);
    let rfx = db.table("t").unwrap().relfrozenxid();
    assert!(rfx.0 > running.0, "the finished locker's xmax was frozen away (relfrozenxid {rfx})");
    assert!(free(&db, &t, tids[2]));
    assert_eq!(rows(&db, &t).len(), 50);
    assert_clean(&db);
}

#[test]
fn crash_after_a_lock_recovers_the_row_live_and_unlocked() {
    const DIR: &str = "/data";
    let cfg = Config { fsync: true, ..config() };
    let fs = FaultFs::new();
    let db = Database::open_with_fs(fs.clone(), Path::new(DIR), cfg.clone()).unwrap();
    let (t, tids) = table(&db, "t", 20);
    db.checkpoint().unwrap();
    let mut locker = db.begin().unwrap();
    // The first lock logs the page's image, the second (same page) only its change: redo
    // applies both ways.
    locked(locker.lock_row(&t, tids[3], RowLockMode::Update, RowLockWait::Block).unwrap());
    locked(locker.lock_row(&t, tids[6], RowLockMode::KeyShare, RowLockWait::Block).unwrap());
    assert_eq!(tids[3].block, tids[6].block);
    // A later commit makes the lock record durable.
    let mut tx = db.begin().unwrap();
    tx.update_with(&t, tids[4], bump).unwrap().unwrap();
    tx.commit().unwrap();
    let crashed: Arc<FaultFs> = fs.crash(CrashMode::LoseUnsynced);
    std::mem::forget(locker);
    db.abandon();
    let db = Database::open_with_fs(crashed, Path::new(DIR), cfg).unwrap();
    assert!(db.recovery_report().performed);
    let t = db.table("t").unwrap();
    assert_clean(&db);
    assert!(free(&db, &t, tids[3]), "the crashed locker holds nothing");
    assert!(free(&db, &t, tids[6]));
    let mut tx = db.begin().unwrap();
    tx.update_with(&t, tids[3], bump).unwrap().unwrap();
    tx.commit().unwrap();
    let r = rows(&db, &t);
    assert_eq!(r[3], (4, 1));
    assert_eq!(r[4], (5, 1));
    assert_eq!(r.len(), 20);
    db.vacuum(Some("t"), &VacuumParams { freeze: true, ..VacuumParams::default() }).unwrap();
    assert_clean(&db);
}

#[test]
fn decoding_a_transaction_that_only_locks_yields_no_change() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config { wal_level: WalLevel::Logical, ..config() }).unwrap();
    let (t, tids) = table(&db, "t", 3);
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    let mut tx = db.begin().unwrap();
    for &tid in &tids {
        locked(tx.lock_row(&t, tid, RowLockMode::Update, RowLockWait::Block).unwrap());
    }
    tx.savepoint("a").unwrap();
    locked(tx.lock_row(&t, tids[0], RowLockMode::Update, RowLockWait::Block).unwrap());
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    locked(tx.lock_row(&t, tids[1], RowLockMode::Share, RowLockWait::Block).unwrap());
    tx.insert(&t, &[Value::Int4(9), Value::Int8(9)]).unwrap();
    let x = tx.xid().unwrap();
    tx.commit().unwrap();
    let opts = vec![("skip-empty-xacts".to_string(), Some("1".to_string()))];
    let got: Vec<String> = db
        .logical_slot_get_changes("s", DecodeLimits::default(), &opts)
        .unwrap()
        .rows
        .into_iter()
        .map(|r| String::from_utf8(r.data).unwrap())
        .collect();
    assert_eq!(
        got,
        vec![
            format!("BEGIN {x}"),
            "table public.t: INSERT: id[integer]:9 v[bigint]:9".to_string(),
            format!("COMMIT {x}"),
        ]
    );
}
