//! Table locks through the engine's API (see `settledb::lmgr`): who takes what, how long they
//! last, and that a wait which can never end is an error rather than a hang (issue 22, item 3).
//!
//! * `create_index_beside_a_row_waiter_completes`: the hang the issue names. T1 holds a row,
//!   W waits for it while writing the table, CREATE INDEX waits for both, then T1 writes the
//!   table again and commits: everyone finishes (T1 already holds the table, so it is not
//!   queued behind the CREATE INDEX).
//! * `three_party_cycle_through_ddl_and_rows`: CREATE INDEX waits for T1's table lock, T1
//!   waits for T2's row, T2 asks for the table behind the CREATE INDEX: T2 gets 40P01's
//!   error, the others complete.
//! * `lock_timeout_*`, `released_*`, `savepoint_*`, `prepared_*`, `autovacuum_skips_*`,
//!   `ddl_with_own_transaction_open_*`: as named.
//!
//! Steps that must block are detected through `Database::locks` (a waiter appears), as
//! PostgreSQL's isolation tester polls `pg_locks`; no timing is asserted.

use std::time::{Duration, Instant};

use settledb::lmgr::{LockInfo, LockMode};
use settledb::{Column, Config, Database, Error, Schema, Table, TableOptions, Type, Value};

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

fn table(db: &Database, name: &str, rows: i32) -> Table {
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table(name, schema(), opts).unwrap();
    let mut tx = db.begin().unwrap();
    for id in 1..=rows {
        tx.insert(&t, &[Value::Int4(id), Value::Int8(0)]).unwrap();
    }
    tx.commit().unwrap();
    t
}

fn bump(row: &[Value]) -> settledb::Result<Vec<Value>> {
    match row {
        [id, Value::Int8(v)] => Ok(vec![id.clone(), Value::Int8(v + 1)]),
        other => panic!("unexpected row {other:?}"),
    }
}

fn update(tx: &mut settledb::Transaction<'_>, db: &Database, table: &str, id: i32) -> settledb::Result<()> {
    let ix = db.index(&format!("{table}_pkey"))?;
    tx.update_by_key(&ix, &[Value::Int4(id)], bump)?.expect("row exists");
    Ok(())
}

fn value(db: &Database, table: &str, id: i32) -> i64 {
    let ix = db.index(&format!("{table}_pkey")).unwrap();
    let mut tx = db.begin().unwrap();
    let row = tx.get(&ix, &[Value::Int4(id)]).unwrap().expect("row").1;
    match row[1] {
        Value::Int8(v) => v,
        ref other => panic!("{other:?}"),
    }
}

/// Waits until `pred` holds of the lock table (a step blocked); panics after a minute, which
/// only a hang can take.
fn until(db: &Database, what: &str, pred: impl Fn(&[LockInfo]) -> bool) {
    let start = Instant::now();
    while !pred(&db.locks()) {
        assert!(start.elapsed() < Duration::from_secs(60), "never saw: {what}; locks: {:#?}", db.locks());
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn waiting(l: &[LockInfo]) -> usize {
    l.iter().filter(|x| !x.granted).count()
}

fn open() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    (dir, db)
}

#[test]
fn create_index_beside_a_row_waiter_completes() {
    let (_d, db) = open();
    table(&db, "t", 10);
    let db = &db;
    std::thread::scope(|s| {
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let t1 = s.spawn(move || {
            let mut tx = db.begin().unwrap();
            update(&mut tx, db, "t", 1).unwrap();
            go_rx.recv().unwrap();
            // The table again, with a waiter for it queued: must not wait.
            update(&mut tx, db, "t", 2).unwrap();
            tx.commit().unwrap();
        });
        until(db, "T1 holds t", |l| l.iter().any(|x| x.mode == LockMode::RowExclusive));
        let w = s.spawn(|| {
            let mut tx = db.begin().unwrap();
            update(&mut tx, db, "t", 1).unwrap();
            tx.commit().unwrap();
        });
        until(db, "W waits for T1's row", |l| waiting(l) == 1);
        let ddl = s.spawn(|| db.create_index("t_v", "t", &["v"], false).unwrap());
        until(db, "CREATE INDEX waits", |l| waiting(l) == 2);
        go_tx.send(()).unwrap();
        t1.join().unwrap();
        w.join().unwrap();
        ddl.join().unwrap();
    });
    assert_eq!(value(db, "t", 1), 2);
    assert!(db.locks().is_empty(), "{:?}", db.locks());
    assert!(settledb::check::check_database(db).unwrap().is_clean());
}

#[test]
fn three_party_cycle_through_ddl_and_rows() {
    let (_d, db) = open();
    table(&db, "t", 10);
    table(&db, "u", 10);
    let db = &db;
    std::thread::scope(|s| {
        let (t2_go, t2_rx) = std::sync::mpsc::channel::<()>();
        let (t2_done, t2_done_rx) = std::sync::mpsc::channel::<()>();
        let t2 = s.spawn(move || {
            let mut tx = db.begin().unwrap();
            update(&mut tx, db, "u", 1).unwrap();
            t2_rx.recv().unwrap();
            // Behind the CREATE INDEX, which waits for T1, which waits for this transaction.
            let e = update(&mut tx, db, "t", 5).unwrap_err();
            assert!(matches!(e, Error::Deadlock { .. }), "{e}");
            assert!(tx.is_failed());
            tx.rollback().unwrap();
            t2_done.send(()).unwrap();
            e.to_string()
        });
        let t1 = s.spawn(|| {
            let mut tx = db.begin().unwrap();
            update(&mut tx, db, "t", 1).unwrap();
            // Wait until the CREATE INDEX is queued, then for T2's row.
            until(db, "CREATE INDEX queued", |l| l.iter().any(|x| !x.granted && x.mode == LockMode::Share));
            update(&mut tx, db, "u", 1).unwrap();
            tx.commit().unwrap();
        });
        until(db, "T1 and T2 hold their tables", |l| {
            l.iter().filter(|x| x.mode == LockMode::RowExclusive && x.granted).count() == 2
        });
        let ddl = s.spawn(|| db.create_index("t_v", "t", &["v"], false).unwrap());
        until(db, "T1 waits for T2's row", |l| l.iter().any(|x| x.locktype == "transactionid" && !x.granted));
        t2_go.send(()).unwrap();
        t2_done_rx.recv().unwrap();
        let msg = t2.join().unwrap();
        assert!(msg.starts_with("deadlock detected: transaction"), "{msg}");
        t1.join().unwrap();
        ddl.join().unwrap();
    });
    assert_eq!((value(db, "t", 1), value(db, "t", 5), value(db, "u", 1)), (1, 0, 1));
    assert_eq!(db.lock_failures().0, 1);
    assert!(db.locks().is_empty(), "{:?}", db.locks());
    assert!(settledb::check::check_database(db).unwrap().is_clean());
}

#[test]
fn lock_timeout_ends_table_and_row_waits() {
    let (_d, db) = open();
    let t = table(&db, "t", 3);
    let db = &db;
    let mut holder = db.begin().unwrap();
    holder.lock_table(&t, LockMode::AccessExclusive).unwrap();
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            let mut tx = db.begin().unwrap();
            tx.set_lock_timeout(Some(Duration::from_millis(20)));
            let e = tx.scan(&t).map(|_| ()).unwrap_err();
            assert!(tx.is_failed(), "a lock timeout aborts the transaction");
            e
        })
        .join()
        .unwrap()
    });
    assert!(matches!(e, Error::LockNotAvailable(_)));
    assert_eq!(e.to_string(), "canceling statement due to lock timeout");
    holder.commit().unwrap();

    let mut holder = db.begin().unwrap();
    update(&mut holder, db, "t", 1).unwrap();
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            let mut tx = db.begin().unwrap();
            tx.set_lock_timeout(Some(Duration::from_millis(20)));
            update(&mut tx, db, "t", 1).unwrap_err()
        })
        .join()
        .unwrap()
    });
    assert_eq!(e.to_string(), "canceling statement due to lock timeout");
    holder.commit().unwrap();
    assert_eq!(db.lock_failures().1, 2);
    assert!(db.locks().is_empty(), "{:?}", db.locks());
}

/// An interrupt check that says stop once `flag` is raised, with the error a server would
/// send.
fn interrupt_on(flag: &std::sync::Arc<std::sync::atomic::AtomicBool>) -> settledb::Interrupt {
    let flag = flag.clone();
    settledb::Interrupt::new(move || {
        if flag.load(std::sync::atomic::Ordering::SeqCst) {
            Err("canceling statement due to user request".into())
        } else {
            Ok(())
        }
    })
}

#[test]
fn an_interrupt_ends_table_and_row_waits() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (_d, db) = open();
    let t = table(&db, "t", 3);
    let db = &db;
    for row_wait in [false, true] {
        let mut holder = db.begin().unwrap();
        if row_wait {
            update(&mut holder, db, "t", 1).unwrap();
        } else {
            holder.lock_table(&t, LockMode::AccessExclusive).unwrap();
        }
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let e = std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                let mut tx = db.begin().unwrap();
                tx.set_interrupt(Some(interrupt_on(&stop)));
                let e = if row_wait {
                    update(&mut tx, db, "t", 1).unwrap_err()
                } else {
                    tx.scan(&t).map(|_| ()).unwrap_err()
                };
                assert!(tx.is_failed(), "an interrupted wait aborts the transaction");
                e
            });
            // Raised once the waiter is seen waiting (no lock timeout: without the check it
            // would wait for the holder, which commits only after it returns).
            until(db, "the waiter queued", |l| l.iter().any(|x| !x.granted));
            stop.store(true, Ordering::SeqCst);
            waiter.join().unwrap()
        });
        assert!(matches!(e, Error::Interrupted(_)), "{e:?}");
        assert_eq!(e.to_string(), "canceling statement due to user request");
        holder.commit().unwrap();
        assert!(db.locks().is_empty(), "{:?}", db.locks());
    }
    assert_eq!(db.lock_failures(), (0, 0), "neither a deadlock nor a lock timeout");
}

/// An interrupt stops CREATE INDEX while it waits for the table and while it reads it, and
/// leaves no index behind: the same name can be built afterwards.
#[test]
fn an_interrupt_stops_create_index_and_leaves_nothing() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    let (_d, db) = open();
    let t = table(&db, "t", 5_000);
    let db = &db;
    // Reading: stopped at the heap's third page.
    let checks = std::sync::Arc::new(AtomicU32::new(0));
    let seen = checks.clone();
    let third = settledb::Interrupt::new(move || {
        if seen.fetch_add(1, Ordering::SeqCst) >= 2 {
            Err("canceling statement due to user request".into())
        } else {
            Ok(())
        }
    });
    let e = db.create_index_with("t_v", "t", &["v"], false, Some(&third)).err().expect("stopped");
    assert!(matches!(e, Error::Interrupted(_)), "{e:?}");
    assert!(db.index("t_v").is_err(), "no index is left");
    // Waiting: a writer holds RowExclusive, which CREATE INDEX's Share lock waits for.
    let mut writer = db.begin().unwrap();
    update(&mut writer, db, "t", 1).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let e = std::thread::scope(|s| {
        let build = s.spawn(|| db.create_index_with("t_v", "t", &["v"], true, Some(&interrupt_on(&stop))).err());
        until(db, "CREATE INDEX queued", |l| l.iter().any(|x| !x.granted && x.mode == LockMode::Share));
        stop.store(true, Ordering::SeqCst);
        build.join().unwrap().expect("stopped")
    });
    assert!(matches!(e, Error::Interrupted(_)), "{e:?}");
    writer.commit().unwrap();
    let e = db.create_index_with("t_v", "t", &["v"], false, Some(&interrupt_on(&stop))).err().expect("stopped");
    assert!(matches!(e, Error::Interrupted(_)), "a raised interrupt stops it at once: {e:?}");
    let ix = db.create_index("t_v", "t", &["v"], false).unwrap();
    let mut tx = db.begin().unwrap();
    let zero = settledb::KeyBound::Included(vec![Value::Int8(0)]);
    let rows = tx.range(&ix, zero.clone(), zero, settledb::ScanDirection::Forward, None).unwrap();
    assert_eq!(rows.len(), 4_999, "every row but the one updated to 1");
    tx.commit().unwrap();
    assert!(db.locks().is_empty(), "{:?}", db.locks());
    assert!(settledb::check::check_database(db).unwrap().is_clean());
    drop(t);
}

fn relation_modes(db: &Database, t: &Table) -> Vec<&'static str> {
    db.locks().iter().filter(|l| l.relation == Some(t.oid())).map(|l| l.mode.name()).collect()
}

#[test]
fn released_at_commit_and_abort_not_before() {
    let (_d, db) = open();
    let t = table(&db, "t", 3);
    let mut tx = db.begin().unwrap();
    tx.scan(&t).unwrap().for_each(drop);
    update(&mut tx, &db, "t", 1).unwrap();
    assert_eq!(relation_modes(&db, &t), ["AccessShareLock", "RowExclusiveLock"]);
    let xid = tx.xid().unwrap();
    let l = db.locks();
    let tl = l.iter().find(|l| l.locktype == "transactionid").unwrap();
    assert_eq!((tl.transactionid, tl.mode.name(), tl.granted), (Some(xid), "ExclusiveLock", true));
    tx.commit().unwrap();
    assert!(db.locks().is_empty());
    let mut tx = db.begin().unwrap();
    tx.lock_table(&t, LockMode::Exclusive).unwrap();
    assert_eq!(relation_modes(&db, &t), ["ExclusiveLock"]);
    drop(tx);
    assert!(db.locks().is_empty());
}

/// PostgreSQL releases the locks a rolled-back subtransaction took; RELEASE hands them to
/// the parent; locks taken before the savepoint stay.
#[test]
fn savepoint_rollback_releases_its_locks_only() {
    let (_d, db) = open();
    let t = table(&db, "t", 3);
    let u = table(&db, "u", 3);
    let mut tx = db.begin().unwrap();
    tx.lock_table(&t, LockMode::Share).unwrap();
    tx.savepoint("a").unwrap();
    tx.lock_table(&t, LockMode::AccessShare).unwrap();
    tx.lock_table(&u, LockMode::Exclusive).unwrap();
    tx.rollback_to("a").unwrap();
    assert_eq!(relation_modes(&db, &t), ["ShareLock"]);
    assert!(relation_modes(&db, &u).is_empty());
    tx.lock_table(&u, LockMode::Exclusive).unwrap();
    tx.savepoint("b").unwrap();
    tx.lock_table(&u, LockMode::AccessExclusive).unwrap();
    tx.release("b").unwrap();
    tx.savepoint("c").unwrap();
    tx.rollback_to("c").unwrap();
    assert_eq!(relation_modes(&db, &u), ["ExclusiveLock", "AccessExclusiveLock"]);
    tx.commit().unwrap();
    assert!(db.locks().is_empty());
}

#[test]
fn prepared_transaction_keeps_its_locks_until_commit_prepared() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config { max_prepared_transactions: 2, ..config() }).unwrap();
    let t = table(&db, "t", 3);
    let mut tx = db.begin().unwrap();
    update(&mut tx, &db, "t", 1).unwrap();
    tx.lock_table(&t, LockMode::Exclusive).unwrap();
    tx.prepare("p1").unwrap();
    drop(tx);
    assert_eq!(relation_modes(&db, &t), ["RowExclusiveLock", "ExclusiveLock"]);
    let db = &db;
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            let mut tx = db.begin().unwrap();
            tx.set_lock_timeout(Some(Duration::from_millis(20)));
            update(&mut tx, db, "t", 2).unwrap_err()
        })
        .join()
        .unwrap()
    });
    assert!(matches!(e, Error::LockNotAvailable(_)), "{e}");
    db.commit_prepared("p1").unwrap();
    assert!(db.locks().is_empty());
    let mut tx = db.begin().unwrap();
    update(&mut tx, db, "t", 2).unwrap();
    tx.commit().unwrap();
}

/// A prepared transaction's table locks come back after a restart, from its state file
/// (written by the shutdown checkpoint) and after a crash from its PREPARE record alone: a
/// writer and DDL still wait for it, and COMMIT PREPARED frees them.
#[test]
fn prepared_transaction_locks_survive_restart_and_crash() {
    use settledb::io::fault::{CrashMode, FaultFs};
    let cfg = Config { max_prepared_transactions: 2, ..config() };
    let dir = std::path::Path::new("/db");
    let fs = FaultFs::new();
    let db = Database::open_with_fs(fs.clone(), dir, cfg.clone()).unwrap();
    let t = table(&db, "t", 3);
    let u = table(&db, "u", 3);
    let (t_oid, u_oid) = (t.oid(), u.oid());
    let mut tx = db.begin().unwrap();
    update(&mut tx, &db, "t", 1).unwrap();
    tx.lock_table(&u, LockMode::AccessExclusive).unwrap();
    tx.prepare("before-restart").unwrap();
    drop(tx);
    db.close().unwrap();

    let expect_held = |db: &Database, what: &str| {
        let mut held: Vec<(u32, &str, bool)> = db
            .locks()
            .iter()
            .filter(|l| l.locktype == "relation")
            .map(|l| (l.relation.unwrap().0, l.mode.name(), l.granted))
            .collect();
        held.sort();
        let mut want = vec![(t_oid.0, "RowExclusiveLock", true), (u_oid.0, "AccessExclusiveLock", true)];
        want.sort();
        assert_eq!(held, want, "{what}");
        std::thread::scope(|s| {
            s.spawn(|| {
                let u = db.table("u").unwrap();
                let mut tx = db.begin().unwrap();
                tx.set_lock_timeout(Some(Duration::from_millis(20)));
                let e = tx.scan(&u).map(|_| ()).unwrap_err();
                assert!(matches!(e, Error::LockNotAvailable(_)), "{what}: reading u: {e}");
                let t = db.table("t").unwrap();
                let mut tx = db.begin().unwrap();
                tx.set_lock_timeout(Some(Duration::from_millis(20)));
                let e = tx.lock_table(&t, LockMode::Share).unwrap_err();
                assert!(matches!(e, Error::LockNotAvailable(_)), "{what}: Share on t: {e}");
            });
        });
    };

    // Clean restart: the shutdown checkpoint wrote the state file.
    let db = Database::open_with_fs(fs.clone(), dir, cfg.clone()).unwrap();
    expect_held(&db, "after a clean restart");
    db.commit_prepared("before-restart").unwrap();
    assert!(db.locks().is_empty(), "{:?}", db.locks());
    assert_eq!(value(&db, "t", 1), 1);

    // Crash with the PREPARE only in WAL (no checkpoint after it).
    let mut tx = db.begin().unwrap();
    update(&mut tx, &db, "t", 1).unwrap();
    let u = db.table("u").unwrap();
    tx.lock_table(&u, LockMode::AccessExclusive).unwrap();
    tx.prepare("before-crash").unwrap();
    drop(tx);
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    let db = Database::open_with_fs(crashed, dir, cfg).unwrap();
    assert!(db.recovery_report().performed);
    expect_held(&db, "after a crash");
    db.rollback_prepared("before-crash").unwrap();
    assert!(db.locks().is_empty(), "{:?}", db.locks());
    let mut tx = db.begin().unwrap();
    tx.lock_table(&db.table("u").unwrap(), LockMode::AccessExclusive).unwrap();
    tx.commit().unwrap();
    assert_eq!(value(&db, "t", 1), 1);
}

/// `pg_stat_database.deadlocks` counts each deadlock once and keeps the count across a clean
/// restart, as PostgreSQL's cumulative statistics do.
#[test]
fn deadlocks_are_counted_and_kept_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    table(&db, "t", 2);
    let dbr = &db;
    let errors: Vec<String> = std::thread::scope(|s| {
        let (go, rx) = std::sync::mpsc::channel::<()>();
        let a = s.spawn(move || {
            let mut tx = dbr.begin().unwrap();
            update(&mut tx, dbr, "t", 1).unwrap();
            rx.recv().unwrap();
            let r = update(&mut tx, dbr, "t", 2);
            drop(tx);
            r.err().map(|e| e.to_string())
        });
        let mut tx = dbr.begin().unwrap();
        update(&mut tx, dbr, "t", 2).unwrap();
        until(dbr, "A holds row 1", |l| l.iter().filter(|x| x.mode == LockMode::RowExclusive).count() == 2);
        go.send(()).unwrap();
        until(dbr, "A waits for row 2", |l| l.iter().any(|x| x.locktype == "transactionid" && !x.granted));
        let r = update(&mut tx, dbr, "t", 1);
        drop(tx);
        [r.err().map(|e| e.to_string()), a.join().unwrap()].into_iter().flatten().collect()
    });
    assert_eq!(errors.len(), 1, "one victim: {errors:?}");
    assert!(errors[0].starts_with("deadlock detected"), "{errors:?}");
    assert_eq!(db.stats().deadlocks, 1);
    db.close().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    assert_eq!(db.stats().deadlocks, 1, "kept across a clean restart");
    assert_eq!(db.lock_failures().0, 0, "lock_failures counts this run only");
}

#[test]
fn autovacuum_skips_a_locked_table_and_vacuums_it_later() {
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        Config { autovacuum: true, autovacuum_vacuum_threshold: 1, autovacuum_vacuum_scale_factor: 0.0, ..config() };
    let db = Database::open(dir.path(), cfg).unwrap();
    let t = table(&db, "t", 50);
    for id in 1..=50 {
        let mut tx = db.begin().unwrap();
        update(&mut tx, &db, "t", id).unwrap();
        tx.commit().unwrap();
    }
    let mut holder = db.begin().unwrap();
    holder.lock_table(&t, LockMode::AccessExclusive).unwrap();
    let start = Instant::now();
    while db.autovacuum_stats().skipped_locked == 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "autovacuum never tried the table");
        db.autovacuum_kick();
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(db.autovacuum_stats().vacuums, 0, "nothing vacuumed behind the lock");
    holder.commit().unwrap();
    let start = Instant::now();
    while db.table_stats(&t).autovacuum_count == 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "autovacuum never came back");
        db.autovacuum_kick();
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Embedded DDL runs in a transaction of its own: called while this thread's own transaction
/// holds the table, it would wait for that transaction forever. It is a deadlock instead.
#[test]
fn ddl_with_own_transaction_open_is_a_deadlock_not_a_hang() {
    let (_d, db) = open();
    table(&db, "t", 3);
    let mut tx = db.begin().unwrap();
    update(&mut tx, &db, "t", 1).unwrap();
    let e = db.create_index("t_v", "t", &["v"], false).err().expect("refused");
    assert!(matches!(e, Error::Deadlock { .. }), "{e}");
    tx.commit().unwrap();
    db.create_index("t_v", "t", &["v"], false).unwrap();
    assert!(db.locks().is_empty());
}
