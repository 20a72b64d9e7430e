//! The lock manager alone: the conflict table, the fast path's hand-over to a strong locker,
//! FIFO fairness, deadlocks through table locks and XID waits, lock_timeout, NOWAIT, release.

use std::sync::Arc;
use std::time::Duration;

use super::*;

const T: Oid = Oid(16384);

fn lm() -> Arc<LockManager> {
    Arc::new(LockManager::new(Duration::from_millis(20)))
}

/// PostgreSQL's table (`lock.c`, `LockConflicts`), written out as the documentation's grid.
#[test]
fn conflict_table_is_postgresqls() {
    use LockMode::*;
    let grid = [
        (AccessShare, "       #"),
        (RowShare, "      ##"),
        (RowExclusive, "    ####"),
        (ShareUpdateExclusive, "   #####"),
        (Share, "  ## ###"),
        (ShareRowExclusive, "  ######"),
        (Exclusive, " #######"),
        (AccessExclusive, "########"),
    ];
    for (a, row) in grid {
        for (b, c) in LockMode::ALL.into_iter().zip(row.chars()) {
            assert_eq!(a.conflicts_with(b), c == '#', "{a:?} vs {b:?}");
            assert_eq!(a.conflicts_with(b), b.conflicts_with(a), "symmetric: {a:?} vs {b:?}");
        }
    }
    assert_eq!(LockMode::parse("access exclusive"), Some(AccessExclusive));
    assert_eq!(LockMode::parse("ROW EXCLUSIVE"), Some(RowExclusive));
    assert_eq!(LockMode::parse("ShareLock"), Some(Share));
    assert_eq!(LockMode::parse("shared"), None);
}

/// Every pair of modes taken by two owners: granted at once exactly when they do not conflict.
#[test]
fn conditional_requests_follow_the_table() -> Result<()> {
    let lm = lm();
    for a in LockMode::ALL {
        for b in LockMode::ALL {
            let (o1, o2) = (lm.new_owner("transaction"), lm.new_owner("transaction"));
            lm.lock(&o1, T, a, WaitPolicy::Wait, None)?;
            let r = lm.lock(&o2, T, b, WaitPolicy::NoWait, None);
            assert_eq!(r.is_err(), a.conflicts_with(b), "{a:?} held, {b:?} asked: {r:?}");
            if let Err(e) = r {
                assert!(matches!(e, Error::LockNotAvailable(_)), "{e}");
            }
            lm.release_all(&o1);
            lm.release_all(&o2);
            assert!(lm.locks().is_empty(), "all released: {:?}", lm.locks());
        }
    }
    Ok(())
}

/// A weak lock taken by the fast path is seen by a strong locker (moved to the shared table),
/// and the view shows it.
#[test]
fn strong_locker_sees_fast_path_holders() -> Result<()> {
    let lm = lm();
    let w = lm.new_owner("transaction");
    lm.lock(&w, T, LockMode::RowExclusive, WaitPolicy::Wait, None)?;
    let v = lm.locks();
    assert_eq!(v.len(), 1);
    assert!(v[0].fastpath && v[0].granted && v[0].mode == LockMode::RowExclusive);
    let ddl = lm.new_owner("ddl");
    let e = lm.lock(&ddl, T, LockMode::Share, WaitPolicy::NoWait, None).unwrap_err();
    assert!(matches!(e, Error::LockNotAvailable(_)));
    // The counter went back down: the fast path is open again.
    lm.release_all(&w);
    lm.lock(&ddl, T, LockMode::Share, WaitPolicy::NoWait, None)?;
    let w2 = lm.new_owner("transaction");
    assert!(lm.lock(&w2, T, LockMode::RowExclusive, WaitPolicy::NoWait, None).is_err());
    lm.lock(&w2, T, LockMode::AccessShare, WaitPolicy::NoWait, None)?;
    lm.release_all(&ddl);
    lm.release_all(&w2);
    assert!(lm.locks().is_empty());
    Ok(())
}

/// A waiter is granted when the holder releases; a request behind a conflicting waiter waits
/// too (no starvation), unless its owner already holds the table.
#[test]
fn fifo_and_holders_go_first() -> Result<()> {
    let lm = lm();
    let reader = lm.new_owner("transaction");
    lm.lock(&reader, T, LockMode::AccessShare, WaitPolicy::Wait, None)?;
    let ddl = lm.new_owner("ddl");
    std::thread::scope(|s| -> Result<()> {
        let h = s.spawn(|| lm.lock(&ddl, T, LockMode::AccessExclusive, WaitPolicy::Wait, None));
        while lm.lock_waiters().is_empty() {
            std::thread::yield_now();
        }
        // A new reader queues behind the waiting DROP ...
        let other = lm.new_owner("transaction");
        assert!(lm.lock(&other, T, LockMode::AccessShare, WaitPolicy::NoWait, None).is_err());
        // ... but the holder may take more (it would otherwise wait for a waiter that waits for it).
        lm.lock(&reader, T, LockMode::RowExclusive, WaitPolicy::NoWait, None)?;
        lm.release_all(&reader);
        h.join().expect("ddl thread")?;
        lm.release_all(&ddl);
        Ok(())
    })?;
    assert!(lm.locks().is_empty());
    Ok(())
}

/// lock_timeout bounds a wait; the failed waiter leaves no trace.
#[test]
fn lock_timeout_cancels_the_wait() -> Result<()> {
    let lm = lm();
    let a = lm.new_owner("transaction");
    lm.lock(&a, T, LockMode::AccessExclusive, WaitPolicy::Wait, None)?;
    let b = lm.new_owner("transaction");
    // From another thread: waiting for an owner this thread last used would be a deadlock.
    let e = std::thread::scope(|s| {
        s.spawn(|| lm.lock(&b, T, LockMode::AccessShare, WaitPolicy::Wait, Some(Duration::from_millis(30))))
            .join()
            .expect("waiter")
    })
    .unwrap_err();
    assert_eq!(e.to_string(), "canceling statement due to lock timeout");
    assert!(lm.lock_waiters().is_empty());
    lm.release_all(&a);
    lm.lock(&b, T, LockMode::AccessShare, WaitPolicy::NoWait, None)?;
    lm.release_all(&b);
    Ok(())
}

/// Three owners: a DDL waits for a writer holding the table, the writer waits for a second
/// transaction's XID (a row), and that transaction then asks for the table behind the DDL.
/// The third wait closes the cycle and fails; the others go on.
#[test]
fn three_party_cycle_through_a_table_and_a_row() -> Result<()> {
    let lm = lm();
    let (w1, w2, ddl) = (lm.new_owner("transaction"), lm.new_owner("transaction"), lm.new_owner("ddl"));
    lm.set_xid(&w1, Xid(100));
    lm.set_xid(&w2, Xid(101));
    lm.lock(&w1, T, LockMode::RowExclusive, WaitPolicy::Wait, None)?;
    let w2_done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| -> Result<()> {
        let d = s.spawn(|| lm.lock(&ddl, T, LockMode::Share, WaitPolicy::Wait, None));
        while lm.lock_waiters().is_empty() {
            std::thread::yield_now();
        }
        let row = s.spawn(|| {
            lm.wait_for_xid(&w1, Xid(100), Xid(101), None, &|d| {
                std::thread::sleep(d.min(Duration::from_millis(1)));
                w2_done.load(Ordering::SeqCst)
            })
        });
        while lm.xid_waits().is_empty() {
            std::thread::yield_now();
        }
        let e = lm.lock(&w2, T, LockMode::RowExclusive, WaitPolicy::Wait, None).unwrap_err();
        assert!(matches!(e, Error::Deadlock { .. }), "{e}");
        assert!(e.to_string().starts_with("deadlock detected: transaction"), "{e}");
        // The victim rolls back: its XID ends, the row wait ends, the writer commits.
        lm.release_all(&w2);
        w2_done.store(true, Ordering::SeqCst);
        row.join().expect("row waiter")?;
        lm.release_all(&w1);
        d.join().expect("ddl")?;
        lm.release_all(&ddl);
        Ok(())
    })?;
    assert_eq!(lm.deadlocks.load(Ordering::Relaxed), 1);
    assert!(lm.locks().is_empty());
    Ok(())
}

/// A thread whose own open owner holds the table and which waits for it through another owner
/// (embedded DDL called with a transaction open) is told so instead of hanging.
#[test]
fn waiting_for_an_owner_of_this_very_thread_is_a_deadlock() -> Result<()> {
    let lm = lm();
    let tx = lm.new_owner("transaction");
    lm.lock(&tx, T, LockMode::RowExclusive, WaitPolicy::Wait, None)?;
    let ddl = lm.new_owner("ddl");
    let e = lm.lock(&ddl, T, LockMode::Share, WaitPolicy::Wait, None).unwrap_err();
    assert!(matches!(e, Error::Deadlock { .. }), "{e}");
    lm.release_all(&tx);
    lm.release_all(&ddl);
    Ok(())
}

/// Releasing one mode keeps the others; the view lists transactionid locks of owners with XIDs.
#[test]
fn release_one_mode_and_the_view() -> Result<()> {
    let lm = lm();
    let a = lm.new_owner("vacuum");
    lm.lock(&a, T, LockMode::ShareUpdateExclusive, WaitPolicy::Wait, None)?;
    lm.lock(&a, T, LockMode::AccessExclusive, WaitPolicy::NoWait, None)?;
    lm.release(&a, T, LockMode::AccessExclusive);
    let b = lm.new_owner("transaction");
    lm.set_xid(&b, Xid(7));
    lm.lock(&b, T, LockMode::RowExclusive, WaitPolicy::NoWait, None)?;
    let v = lm.locks();
    let modes: Vec<(&str, &str, bool)> = v.iter().map(|r| (r.locktype, r.mode.name(), r.granted)).collect();
    assert_eq!(
        modes,
        [
            ("relation", "ShareUpdateExclusiveLock", true),
            ("relation", "RowExclusiveLock", true),
            ("transactionid", "ExclusiveLock", true)
        ]
    );
    lm.release_all(&a);
    lm.release_all(&b);
    assert!(lm.locks().is_empty());
    Ok(())
}
