//! Specification tests of the transaction manager: assignment and limits, snapshots and
//! horizons, commit/abort ordering, waiting, the XID burner and redo.

use std::sync::Arc;
use std::time::Duration;

use super::clog::{page_of, CLOG_XACTS_PER_PAGE, INFO_ZEROPAGE};
use super::test_log::RecordingLog;
use super::varsup::{STOP_MARGIN, WARN_MARGIN, WRAP_DISTANCE};
use super::*;
use crate::error::{Error, Result};
use crate::io::{FileSystem, RealFs};
use crate::types::{FullXid, Lsn, Xid};
use crate::wal::Rmgr;

struct Fixture {
    _dir: tempfile::TempDir,
    tm: TransactionManager,
    log: RecordingLog,
}

fn fixture(opts: XactOptions) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let tm = TransactionManager::open(Arc::new(RealFs), dir.path(), opts).expect("open");
    Fixture { _dir: dir, tm, log: RecordingLog::default() }
}

fn new_cluster() -> Fixture {
    fixture(XactOptions::default())
}

#[test]
fn new_cluster_assigns_from_3_and_zeroes_page_0() -> Result<()> {
    let f = new_cluster();
    assert_eq!(f.tm.assign_xid(&f.log)?, FullXid::new(0, Xid(3)));
    assert_eq!(f.tm.assign_xid(&f.log)?, FullXid::new(0, Xid(4)));
    let recs = f.log.records();
    assert_eq!(recs.len(), 1, "one ZEROPAGE for page 0");
    assert_eq!((recs[0].rmgr, recs[0].info), (Rmgr::Clog, INFO_ZEROPAGE));
    assert_eq!(f.tm.next_full_xid(), FullXid::new(0, Xid(5)));
    Ok(())
}

#[test]
fn snapshot_lists_concurrent_running_xids() -> Result<()> {
    let f = new_cluster();
    let t1 = f.tm.assign_xid(&f.log)?; // 3
    let t2 = f.tm.assign_xid(&f.log)?; // 4
    let t3 = f.tm.assign_xid(&f.log)?; // 5
    f.tm.commit(t2, &f.log, true)?;

    let s = f.tm.get_snapshot(Some(t3.xid()));
    assert_eq!(s.xmax, Xid(6));
    assert_eq!(s.xip, vec![t1.xid()], "own XID and committed XIDs are not listed");
    assert_eq!(s.xmin, t1.xid());
    assert!(s.is_in_progress(t1.xid()));
    assert!(!s.is_in_progress(t2.xid()));
    assert!(!s.is_in_progress(t3.xid()));

    let t4 = f.tm.assign_xid(&f.log)?; // 6, after the snapshot
    assert!(s.is_in_progress(t4.xid()), "XIDs from xmax on are invisible");
    f.tm.commit(t1, &f.log, true)?;
    assert!(s.is_in_progress(t1.xid()), "a snapshot does not change when t1 commits");

    let s2 = f.tm.get_snapshot(None);
    assert_eq!((s2.xmin, s2.xmax), (t3.xid(), Xid(7)));
    assert_eq!(s2.xip, vec![t3.xid(), t4.xid()]);
    f.tm.abort(t3, &f.log)?;
    f.tm.commit(t4, &f.log, true)?;
    let s3 = f.tm.get_snapshot(None);
    assert_eq!((s3.xmin, s3.xmax, s3.xip.len()), (Xid(7), Xid(7), 0));
    Ok(())
}

#[test]
fn oldest_xmin_follows_registered_snapshot_xmins() -> Result<()> {
    let f = new_cluster();
    let b1 = f.tm.register_backend();
    let b2 = f.tm.register_backend();
    assert_eq!(f.tm.oldest_xmin(), Xid(3), "nothing running: the next XID");
    let t1 = f.tm.assign_xid(&f.log)?; // 3
    let s = f.tm.get_registered_snapshot(b1, None)?;
    assert_eq!(s.xmin, t1.xid());
    f.tm.commit(t1, &f.log, true)?;
    assert_eq!(f.tm.oldest_xmin(), Xid(3), "b1's snapshot still sees 3 as running");

    for _ in 0..3 {
        let t = f.tm.assign_xid(&f.log)?;
        f.tm.commit(t, &f.log, true)?;
    }
    f.tm.register_snapshot_xmin(b2, Xid(5))?;
    f.tm.release_snapshot_xmin(b1);
    assert_eq!(f.tm.oldest_xmin(), Xid(5));
    let running = f.tm.assign_xid(&f.log)?; // 7
    f.tm.unregister_backend(b2);
    assert_eq!(f.tm.oldest_xmin(), running.xid(), "running XIDs hold the horizon");
    f.tm.commit(running, &f.log, true)?;
    assert_eq!(f.tm.oldest_xmin(), Xid(8));
    assert!(matches!(f.tm.register_snapshot_xmin(b2, Xid(8)), Err(Error::InvalidInput(_))));
    Ok(())
}

#[test]
fn commit_logs_flushes_then_marks_clog() -> Result<()> {
    let f = new_cluster();
    let t = f.tm.assign_xid(&f.log)?;
    assert_eq!(f.tm.status(t.xid())?, XidStatus::InProgress);
    let lsn = f.tm.commit(t, &f.log, true)?;
    let rec = f.log.records().pop().expect("commit record");
    assert_eq!((rec.rmgr, rec.info, rec.xid), (Rmgr::Xact, INFO_XACT_COMMIT, t.xid()));
    assert_eq!(rec.main_data.len(), 8, "commit timestamp, i64 LE");
    assert_eq!(rec.end, lsn);
    assert_eq!(f.log.flushed(), lsn, "synchronous commit flushes");
    assert_eq!(f.tm.status(t.xid())?, XidStatus::Committed);
    assert!(!f.tm.is_running(t.xid()));
    assert_eq!(f.tm.latest_async_commit_lsn(), Lsn::INVALID);
    assert!(matches!(f.tm.commit(t, &f.log, true), Err(Error::InvalidInput(_))), "double commit");

    let a = f.tm.assign_xid(&f.log)?;
    let async_lsn = f.tm.commit(a, &f.log, false)?;
    assert_eq!(f.log.flushed(), lsn, "asynchronous commit does not flush");
    assert_eq!(f.tm.latest_async_commit_lsn(), async_lsn);
    assert_eq!(f.tm.commit_lsn_bound(a.xid()), async_lsn);
    // The CLOG write-out flushes WAL past the asynchronous commit first.
    f.tm.clog().checkpoint(&f.log)?;
    assert_eq!(f.log.flushed(), async_lsn);

    let b = f.tm.assign_xid(&f.log)?;
    f.tm.abort(b, &f.log)?;
    let rec = f.log.records().pop().expect("abort record");
    assert_eq!((rec.rmgr, rec.info, rec.xid), (Rmgr::Xact, INFO_XACT_ABORT, b.xid()));
    assert_eq!(f.tm.status(b.xid())?, XidStatus::Aborted);
    Ok(())
}

#[test]
fn status_of_special_future_and_crashed_xids() -> Result<()> {
    let f = new_cluster();
    assert_eq!(f.tm.status(Xid::FROZEN)?, XidStatus::Committed);
    assert_eq!(f.tm.status(Xid::BOOTSTRAP)?, XidStatus::Committed);
    assert_eq!(f.tm.status(Xid::INVALID)?, XidStatus::Aborted);
    let t = f.tm.assign_xid(&f.log)?;
    assert_eq!(f.tm.status(Xid(t.xid().0 + 1))?, XidStatus::InProgress, "not assigned yet");
    // Simulate a crash: a new manager over the same CLOG, next XID past t, t not running.
    let crashed = TransactionManager::open(
        Arc::new(RealFs),
        f._dir.path(),
        XactOptions { next_full_xid: f.tm.next_full_xid(), ..XactOptions::default() },
    )?;
    assert_eq!(crashed.status(t.xid())?, XidStatus::Aborted, "in progress in CLOG, not running: crashed");
    Ok(())
}

#[test]
fn wait_for_unblocks_when_another_thread_commits() -> Result<()> {
    let f = Arc::new(new_cluster());
    let t = f.tm.assign_xid(&f.log)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let f = Arc::clone(&f);
        std::thread::spawn(move || {
            f.tm.wait_for(t.xid());
            let status = f.tm.status(t.xid());
            tx.send(()).expect("send");
            status
        })
    };
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "waiter must block while t runs");
    f.tm.commit(t, &f.log, true)?;
    rx.recv_timeout(Duration::from_secs(10)).expect("waiter woke up");
    let seen = waiter.join().expect("join")?;
    assert_eq!(seen, XidStatus::Committed, "after waking, the CLOG already says committed");
    f.tm.wait_for(t.xid()); // not running: returns at once
    Ok(())
}

fn near_stop(oldest: Xid, before_stop: u32) -> Fixture {
    let limits = XidLimits::compute(oldest, 200_000_000);
    let next = Xid(limits.stop_limit.0 - before_stop);
    fixture(XactOptions {
        next_full_xid: FullXid::new(0, next),
        oldest_xid: oldest,
        autovacuum_freeze_max_age: 200_000_000,
    })
}

#[test]
fn stop_limit_refuses_exactly_at_the_limit() -> Result<()> {
    let f = near_stop(Xid(1000), 2);
    let stop = f.tm.limits().stop_limit;
    assert_eq!(stop, Xid(1000 + WRAP_DISTANCE - STOP_MARGIN));
    let old = f.tm.assign_xid(&f.log)?;
    assert_eq!(old.xid(), Xid(stop.0 - 2));
    f.tm.prepare(old, "forgotten", vec![], Default::default(), 1, &f.log)?;
    assert_eq!(f.tm.assign_xid(&f.log)?.xid(), Xid(stop.0 - 1), "the last XID before the limit is granted");
    let warning = f.tm.last_warning().expect("past the warn limit");
    assert!(
        warning.contains("The oldest prepared transaction is \"forgotten\""),
        "the warning names the prepared transaction: {warning}"
    );
    assert!(warning.contains(varsup::WARNING_HINT), "PostgreSQL's hint, word for word: {warning}");
    match f.tm.assign_xid(&f.log) {
        Err(e @ Error::WraparoundStop { .. }) => {
            let Error::WraparoundStop { next_xid, oldest_xid, .. } = &e else { unreachable!() };
            assert_eq!((*next_xid, *oldest_xid), (stop, Xid(1000)));
            let msg = e.to_string();
            assert!(msg.contains("to avoid wraparound") && msg.contains("VACUUM"), "{msg}");
            assert!(
                msg.contains(&format!(
                    "{}\nThe oldest prepared transaction is \"forgotten\" (xid {}, one of 1 prepared), and it holds \
                     back VACUUM's removable cutoff.",
                    varsup::STOP_HINT,
                    old.xid()
                )),
                "{msg}"
            );
        }
        other => panic!("expected WraparoundStop, got {other:?}"),
    }
    assert_eq!(f.tm.next_full_xid().xid(), stop, "a refusal does not consume an XID");
    // Vacuum advanced the frozen XID: assignment resumes.
    f.tm.set_oldest_xid(Xid(500_000_000), 200_000_000);
    assert_eq!(f.tm.assign_xid(&f.log)?.xid(), stop);
    Ok(())
}

#[test]
fn warn_limit_warns_with_remaining_count() -> Result<()> {
    let oldest = Xid(1000);
    let warn = XidLimits::compute(oldest, 200_000_000).warn_limit;
    let f = fixture(XactOptions {
        next_full_xid: FullXid::new(0, Xid(warn.0 - 1)),
        oldest_xid: oldest,
        autovacuum_freeze_max_age: 200_000_000,
    });
    assert!(f.tm.vacuum_limit_reached());
    f.tm.assign_xid(&f.log)?;
    assert_eq!(f.tm.warnings_issued(), 0, "before the warn limit: silent");
    f.tm.assign_xid(&f.log)?;
    assert_eq!(f.tm.warnings_issued(), 1);
    let msg = f.tm.last_warning().expect("warning");
    assert!(msg.contains(&format!("must be vacuumed within {} transactions", WARN_MARGIN)), "{msg}");
    Ok(())
}

#[test]
fn consume_xids_crosses_2_pow_32() -> Result<()> {
    // Oldest frozen XID high enough that the stop limit lies past the wrap.
    let oldest = Xid(3_000_000_000);
    let f = fixture(XactOptions {
        next_full_xid: FullXid::new(0, oldest),
        oldest_xid: oldest,
        autovacuum_freeze_max_age: 200_000_000,
    });
    let t = f.tm.assign_xid(&f.log)?;
    f.tm.commit(t, &f.log, true)?;
    let remaining_in_epoch = u64::from(u32::MAX - f.tm.next_full_xid().xid().0) + 1;
    let next = f.tm.consume_xids(remaining_in_epoch + 10, &f.log)?;
    assert_eq!(next, FullXid::new(1, Xid(13)), "epoch increments, 0..=2 skipped");
    let u = f.tm.assign_xid(&f.log)?;
    assert_eq!(u, FullXid::new(1, Xid(13)));
    f.tm.commit(u, &f.log, true)?;
    assert_eq!(f.tm.status(u.xid())?, XidStatus::Committed);
    assert_eq!(f.tm.status(t.xid())?, XidStatus::Committed, "old epoch statuses survive");
    assert_eq!(f.tm.status(Xid(5))?, XidStatus::Aborted, "burned XIDs never committed");
    // Landing page 0 was zeroed and logged.
    assert!(f
        .log
        .records()
        .iter()
        .any(|r| r.info == INFO_ZEROPAGE && r.rmgr == Rmgr::Clog && r.main_data == 0u32.to_le_bytes().to_vec()));
    Ok(())
}

#[test]
fn consume_xids_two_billion_is_fast_and_stops_at_the_limit() -> Result<()> {
    let f = new_cluster();
    let started = std::time::Instant::now();
    let stop = f.tm.limits().stop_limit;
    let err = f.tm.consume_xids(1 << 31, &f.log);
    assert!(started.elapsed() < Duration::from_millis(500), "took {:?}", started.elapsed());
    assert!(matches!(err, Err(Error::WraparoundStop { .. })), "{err:?}");
    assert_eq!(f.tm.next_full_xid(), FullXid::new(0, stop), "stops exactly at the limit");
    assert!(f.tm.assign_xid(&f.log).is_err());

    // With the frozen XID moving along, 2^31 XIDs at a time wrap the counter twice.
    let f = new_cluster();
    let started = std::time::Instant::now();
    for _ in 0..4 {
        let next = f.tm.next_full_xid();
        f.tm.set_oldest_xid(next.xid(), 200_000_000);
        f.tm.consume_xids((1 << 31) - 10_000_000, &f.log)?;
    }
    assert!(started.elapsed() < Duration::from_millis(500), "took {:?}", started.elapsed());
    let next = f.tm.next_full_xid();
    assert_eq!(next.epoch(), 1, "{next:?}");
    let (cached, _) = f.tm.clog().cached_pages();
    assert!(cached <= 8, "skipped pages are not materialized: {cached}");
    Ok(())
}

#[test]
fn redo_sets_statuses_and_advances_next_xid() -> Result<()> {
    let f = new_cluster();
    let t1 = f.tm.assign_xid(&f.log)?;
    let t2 = f.tm.assign_xid(&f.log)?;
    let t3 = f.tm.assign_xid(&f.log)?;
    f.tm.commit(t1, &f.log, false)?;
    f.tm.abort(t2, &f.log)?;
    f.tm.commit(t3, &f.log, true)?;

    // Recovery: a fresh directory (nothing checkpointed), next XID from an old checkpoint.
    let r = new_cluster();
    for rec in f.log.decoded() {
        r.tm.redo(&rec)?;
    }
    assert_eq!(r.tm.status(t1.xid())?, XidStatus::Committed);
    assert_eq!(r.tm.status(t2.xid())?, XidStatus::Aborted);
    assert_eq!(r.tm.status(t3.xid())?, XidStatus::Committed);
    assert_eq!(r.tm.next_full_xid(), t3.next(), "next XID moves past replayed XIDs");
    assert_eq!(r.tm.assign_xid(&r.log)?, t3.next());

    let mut bad = test_log::decoded(Rmgr::Xact, 0x70, t1.xid(), Vec::new());
    assert!(matches!(r.tm.redo(&bad), Err(Error::CorruptWal { .. })));
    bad.info = INFO_XACT_COMMIT;
    bad.xid = Xid::FROZEN;
    assert!(matches!(r.tm.redo(&bad), Err(Error::CorruptWal { .. })));
    Ok(())
}

#[test]
fn clog_survives_checkpoint_and_reopen_through_the_manager() -> Result<()> {
    let f = new_cluster();
    let mut committed = Vec::new();
    for i in 0..40u32 {
        let t = f.tm.assign_xid(&f.log)?;
        if i % 3 == 0 {
            f.tm.abort(t, &f.log)?;
        } else {
            f.tm.commit(t, &f.log, true)?;
            committed.push(t.xid());
        }
        // Spread the XIDs over several pages and segments.
        f.tm.consume_xids(u64::from(CLOG_XACTS_PER_PAGE) * 7 + 11, &f.log)?;
    }
    f.tm.clog().checkpoint(&f.log)?;
    let reopened = TransactionManager::open(
        Arc::new(RealFs),
        f._dir.path(),
        XactOptions { next_full_xid: f.tm.next_full_xid(), ..XactOptions::default() },
    )?;
    for x in &committed {
        assert_eq!(reopened.status(*x)?, XidStatus::Committed, "xid {x} (page {})", page_of(*x));
    }
    assert!(RealFs.list(&f._dir.path().join(clog::CLOG_DIR))?.len() >= 2);
    Ok(())
}

#[test]
fn truncate_clog_refuses_above_the_frozen_xid() -> Result<()> {
    let f = new_cluster();
    let first = f.tm.assign_xid(&f.log)?; // page 0, segment 0000
    f.tm.commit(first, &f.log, true)?;
    f.tm.consume_xids(u64::from(CLOG_XACTS_PER_PAGE) * 70, &f.log)?; // segment 0002
    let t = f.tm.assign_xid(&f.log)?;
    f.tm.commit(t, &f.log, true)?;
    f.tm.clog().checkpoint(&f.log)?;
    assert!(matches!(f.tm.truncate_clog(t.xid(), &f.log), Err(Error::InvalidInput(_))));
    f.tm.set_oldest_xid(t.xid(), 200_000_000);
    assert_eq!(f.tm.truncate_clog(t.xid(), &f.log)?, 1, "segment 0000 (page 0) goes");
    assert_eq!(f.tm.status(t.xid())?, XidStatus::Committed);
    Ok(())
}

#[test]
fn records_render_for_waldump() -> Result<()> {
    let f = new_cluster();
    let t = f.tm.assign_xid(&f.log)?;
    f.tm.commit(t, &f.log, true)?;
    let lines: Vec<String> = f.log.decoded().iter().map(describe).collect();
    assert_eq!(lines[0], "ZEROPAGE page 0");
    assert!(lines[1].starts_with("COMMIT xid 3 time_us "), "{}", lines[1]);
    let short = test_log::decoded(Rmgr::Clog, clog::INFO_TRUNCATE, Xid::INVALID, vec![1, 2]);
    assert_eq!(describe(&short), "TRUNCATE (malformed)");

    // Subtransactions in commit and abort records, and the two-phase records.
    let top = f.tm.assign_xid(&f.log)?; // 4
    let s1 = f.tm.assign_subxid(top, top, &f.log)?; // 5
    let s2 = f.tm.assign_subxid(top, s1, &f.log)?; // 6
    let s3 = f.tm.assign_subxid(top, top, &f.log)?; // 7
    f.tm.abort_subxacts(top, &[s3], Lsn::INVALID, &f.log)?;
    f.tm.prepare(top, "g", vec![], Default::default(), 1, &f.log)?;
    f.tm.finish_prepared("g", true, &f.log)?;
    let lines: Vec<String> = f.log.decoded().iter().skip(2).map(describe).collect();
    assert!(lines[0].starts_with("ABORT xid 7 time_us "), "{}", lines[0]);
    assert!(!lines[0].contains("subxacts"), "{}", lines[0]);
    assert!(lines[1].starts_with("PREPARE gid \"g\" xid 4 prepared_at_us "), "{}", lines[1]);
    assert!(lines[1].ends_with(" subxacts [5 6]"), "{}", lines[1]);
    assert!(
        lines[2].starts_with("COMMIT_PREPARED xid 4 time_us ") && lines[2].ends_with("; subxacts: 5 6"),
        "{}",
        lines[2]
    );
    let _ = s2;
    let mut bad = test_log::decoded(Rmgr::Xact, INFO_XACT_COMMIT, Xid(4), vec![0; 13]);
    assert_eq!(describe(&bad), "COMMIT xid 4 time_us 0 (malformed subtransaction list)");
    bad.info = INFO_XACT_PREPARE;
    assert!(describe(&bad).starts_with("PREPARE (malformed: "), "{}", describe(&bad));
    Ok(())
}

/// A WAL whose flush announces itself and then takes a while, like an `fsync`.
struct SlowFlushLog {
    inner: RecordingLog,
    in_flush: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
}

impl XactLog for SlowFlushLog {
    fn log(&self, rec: &crate::wal::RecordBuilder<'_>) -> Result<Lsn> {
        self.inner.log(rec)
    }

    fn flush(&self, upto: Lsn) -> Result<()> {
        if let Some(tx) = self.in_flush.lock().expect("lock").take() {
            let _ = tx.send(());
            std::thread::sleep(Duration::from_millis(200));
        }
        self.inner.flush(upto)
    }
}

/// Found by `settle torture` (an acknowledged pgbench commit lost after a SIGKILL: its history
/// row and account update were invisible, its teller and branch deltas carried on by later
/// transactions): a checkpoint chose its redo pointer after a commit record while the committer
/// was still in its WAL flush, wrote the CLOG page without the commit, and recovery, starting
/// at that redo pointer, never replayed the record. A checkpoint now waits, between choosing
/// its redo pointer and writing the CLOG, for the commits in that window.
#[test]
fn checkpoint_waits_for_a_commit_between_its_record_and_the_clog() -> Result<()> {
    let f = new_cluster();
    let x = f.tm.assign_xid(&f.log)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let slow = SlowFlushLog { inner: RecordingLog::default(), in_flush: std::sync::Mutex::new(Some(tx)) };
    std::thread::scope(|s| -> Result<()> {
        let committer = s.spawn(|| f.tm.commit(x, &slow, true));
        rx.recv().expect("the commit reaches its flush");
        // The commit record is logged, the CLOG not yet marked: the checkpoint's redo pointer
        // would be past the record here.
        assert_eq!(f.tm.clog().status(x.xid())?, XidStatus::InProgress);
        f.tm.wait_for_commits_in_flight();
        assert_eq!(f.tm.clog().status(x.xid())?, XidStatus::Committed, "the wait outlasts the commit's flush");
        f.tm.clog().checkpoint(&f.log)?;
        committer.join().expect("committer")?;
        Ok(())
    })?;
    // What the checkpoint wrote says committed (a crash now replays nothing before redo).
    let on_disk = super::clog::Clog::open(Arc::new(RealFs), f._dir.path())?;
    assert_eq!(on_disk.status(x.xid())?, XidStatus::Committed);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Subtransactions

#[test]
fn subxids_follow_their_parent_and_appear_in_snapshots() -> Result<()> {
    let f = new_cluster();
    let top = f.tm.assign_xid(&f.log)?;
    let s1 = f.tm.assign_subxid(top, top, &f.log)?;
    let s2 = f.tm.assign_subxid(top, s1, &f.log)?;
    assert!(top < s1 && s1 < s2, "a child's XID is greater than its parent's");
    assert_eq!(f.tm.subtrans().parent(s2.xid()), s1.xid());
    assert_eq!(f.tm.subtrans().topmost(s2.xid()), top.xid());
    assert_eq!(f.tm.top_level_of(s2.xid()), top.xid());
    assert!(f.tm.is_running(s2.xid()));
    assert_eq!(f.tm.status(s1.xid())?, XidStatus::InProgress);

    let s = f.tm.get_snapshot(None);
    assert_eq!((s.xip.clone(), s.subxip.clone()), (vec![top.xid()], vec![s1.xid(), s2.xid()]));
    assert!(s.suboverflowed.is_none());
    assert!(s.is_in_progress(s2.xid()));

    // A subtransaction can only hang under a running parent of the same transaction.
    let other = f.tm.assign_xid(&f.log)?;
    assert!(f.tm.assign_subxid(other, s1, &f.log).is_err());
    f.tm.commit(top, &f.log, true)?;
    for x in [top, s1, s2] {
        assert_eq!(f.tm.status(x.xid())?, XidStatus::Committed);
        assert!(!f.tm.is_running(x.xid()));
    }
    assert!(s.is_in_progress(s2.xid()), "the old snapshot still sees them running");
    Ok(())
}

#[test]
fn more_than_64_subxids_overflow_snapshots_into_the_parent_map() -> Result<()> {
    let f = new_cluster();
    let top = f.tm.assign_xid(&f.log)?;
    let mut parent = top;
    let mut subs = Vec::new();
    for _ in 0..MAX_CACHED_SUBXIDS + 6 {
        parent = f.tm.assign_subxid(top, parent, &f.log)?;
        subs.push(parent);
    }
    let s = f.tm.get_snapshot(None);
    assert!(s.suboverflowed.is_some(), "70 subtransactions overflow the cache of 64");
    assert!(s.subxip.is_empty(), "an overflowed snapshot does not trust subxip");
    for x in &subs {
        assert!(s.is_in_progress(x.xid()), "subxid {x:?} maps to its running top");
    }
    // Roll back the newest ten: they leave the running set, the snapshot still says running.
    let doomed: Vec<FullXid> = subs[subs.len() - 10..].to_vec();
    f.tm.abort_subxacts(top, &doomed, Lsn::INVALID, &f.log)?;
    for x in &doomed {
        assert_eq!(f.tm.status(x.xid())?, XidStatus::Aborted);
    }
    let last = f.log.records().pop().expect("an abort record");
    assert_eq!((last.info, last.xid), (INFO_XACT_ABORT, doomed[0].xid()));
    f.tm.commit(top, &f.log, true)?;
    let commit = f.log.decoded().pop().expect("a commit record");
    let listed = records::decode_end_record(&commit)?.subxids;
    assert_eq!(listed.len(), subs.len() - 10, "the commit record lists the surviving subtransactions");
    assert!(f.tm.get_snapshot(None).suboverflowed.is_none(), "the overflow ends with its transaction");
    for x in &subs[..subs.len() - 10] {
        assert_eq!(f.tm.status(x.xid())?, XidStatus::Committed);
    }
    Ok(())
}

#[test]
fn commit_across_clog_pages_replays_and_leaves_nothing_sub_committed() -> Result<()> {
    let start = FullXid::new(0, Xid(CLOG_XACTS_PER_PAGE - 2));
    let f = fixture(XactOptions { next_full_xid: start, ..XactOptions::default() });
    let top = f.tm.assign_xid(&f.log)?;
    let s1 = f.tm.assign_subxid(top, top, &f.log)?; // the last XID of page 0
    let s2 = f.tm.assign_subxid(top, s1, &f.log)?; // the first of page 1
    assert_ne!(page_of(s1.xid()), page_of(s2.xid()));
    f.tm.commit(top, &f.log, true)?;
    for x in [top, s1, s2] {
        assert_eq!(f.tm.clog().status(x.xid())?, XidStatus::Committed, "{x:?} resolved");
    }
    let r = fixture(XactOptions { next_full_xid: start, ..XactOptions::default() });
    for rec in f.log.decoded() {
        r.tm.redo(&rec)?;
    }
    for x in [top, s1, s2] {
        assert_eq!(r.tm.clog().status(x.xid())?, XidStatus::Committed, "{x:?} after redo");
    }
    assert_eq!(r.tm.next_full_xid(), s2.next());
    Ok(())
}

#[test]
fn a_sub_committed_xid_left_behind_follows_its_parent() -> Result<()> {
    let f = new_cluster();
    let top = f.tm.assign_xid(&f.log)?;
    let sub = f.tm.assign_subxid(top, top, &f.log)?;
    f.tm.abort(top, &f.log)?;
    // As if a crash had cut a commit short after the sub-committed mark reached the file.
    f.tm.clog().set_status(sub.xid(), XidStatus::SubCommitted)?;
    assert_eq!(f.tm.status(sub.xid())?, XidStatus::Aborted, "its parent never committed");
    f.tm.clog().set_status(top.xid(), XidStatus::Committed)?;
    assert_eq!(f.tm.status(sub.xid())?, XidStatus::Committed, "its parent committed");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Prepared transactions

#[test]
fn a_prepared_transaction_keeps_running_and_holds_the_horizon() -> Result<()> {
    let f = new_cluster();
    let top = f.tm.assign_xid(&f.log)?;
    let sub = f.tm.assign_subxid(top, top, &f.log)?;
    let e = f.tm.prepare(top, "g1", vec![], Default::default(), 0, &f.log).unwrap_err();
    assert!(e.to_string().contains("prepared transactions are disabled"), "{e}");
    f.tm.prepare(top, "g1", vec![], Default::default(), 2, &f.log)?;
    assert_eq!(f.log.flushed(), f.log.records().last().expect("record").end, "PREPARE is flushed");
    assert!(f.tm.is_running(top.xid()) && f.tm.is_running(sub.xid()));
    let later = f.tm.assign_xid(&f.log)?;
    f.tm.commit(later, &f.log, true)?;
    let (horizon, holder) = f.tm.oldest_xmin_with_holder(false);
    assert_eq!(horizon, top.xid());
    assert_eq!(holder, Some(HorizonHolder::PreparedXact { gid: "g1".into(), xid: top.xid() }));
    let s = f.tm.get_snapshot(None);
    assert!(s.xip.is_empty(), "prepared XIDs are shared, not copied into xip");
    assert!(s.is_in_progress(top.xid()) && s.is_in_progress(sub.xid()));
    assert_eq!(s.xmin, top.xid());

    let other = f.tm.assign_xid(&f.log)?;
    let e = f.tm.prepare(other, "g1", vec![], Default::default(), 2, &f.log).unwrap_err();
    assert!(e.to_string().contains("transaction identifier \"g1\" is already in use"), "{e}");
    f.tm.prepare(other, "g2", vec![], Default::default(), 2, &f.log)?;
    let third = f.tm.assign_xid(&f.log)?;
    let e = f.tm.prepare(third, "g3", vec![], Default::default(), 2, &f.log).unwrap_err();
    assert!(e.to_string().contains("maximum number of prepared transactions reached"), "{e}");
    assert!(f.tm.is_running(third.xid()), "a refused PREPARE leaves the transaction running");

    let listed: Vec<(String, usize)> = f.tm.prepared_xacts().into_iter().map(|p| (p.gid, p.subxacts)).collect();
    assert_eq!(listed, vec![("g1".to_string(), 1), ("g2".to_string(), 0)]);
    f.tm.finish_prepared("g1", true, &f.log)?;
    assert_eq!(f.tm.status(top.xid())?, XidStatus::Committed);
    assert_eq!(f.tm.status(sub.xid())?, XidStatus::Committed);
    f.tm.finish_prepared("g2", false, &f.log)?;
    assert_eq!(f.tm.status(other.xid())?, XidStatus::Aborted);
    let e = f.tm.finish_prepared("g2", true, &f.log).unwrap_err();
    assert!(e.to_string().contains("prepared transaction with identifier \"g2\" does not exist"), "{e}");
    assert!(f.tm.prepared_xacts().is_empty());
    Ok(())
}

#[test]
fn prepared_state_survives_through_wal_or_state_files() -> Result<()> {
    let f = new_cluster();
    let a = f.tm.assign_xid(&f.log)?;
    let a_sub = f.tm.assign_subxid(a, a, &f.log)?;
    f.tm.prepare(a, "in-file", vec![], Default::default(), 10, &f.log)?;
    let redo = f.log.records().last().expect("record").end;
    assert_eq!(f.tm.checkpoint_twophase(redo)?, 1, "its PREPARE is before the redo pointer");
    assert_eq!(f.tm.checkpoint_twophase(redo)?, 0, "written once");
    let b = f.tm.assign_xid(&f.log)?;
    f.tm.prepare(b, "in-wal", vec![], Default::default(), 10, &f.log)?;
    let c = f.tm.assign_xid(&f.log)?;
    f.tm.prepare(c, "finished", vec![], Default::default(), 10, &f.log)?;
    f.tm.finish_prepared("finished", true, &f.log)?;

    // Recovery in the same directory: the state file, then the WAL after the redo pointer.
    let at_checkpoint = XactOptions { next_full_xid: b, ..XactOptions::default() };
    let r = TransactionManager::open(Arc::new(RealFs), f._dir.path(), at_checkpoint)?;
    assert_eq!(r.load_twophase_files()?, 1);
    for rec in f.log.decoded().into_iter().filter(|rec| rec.lsn >= redo) {
        r.redo(&rec)?;
    }
    assert_eq!(r.finish_twophase_recovery()?, 2);
    let gids: Vec<String> = r.prepared_xacts().into_iter().map(|p| p.gid).collect();
    assert_eq!(gids, vec!["in-file".to_string(), "in-wal".to_string()]);
    assert_eq!(r.status(c.xid())?, XidStatus::Committed);
    assert_eq!(r.subtrans().parent(a_sub.xid()), a.xid(), "parent links restored");
    assert!(r.is_running(a_sub.xid()));
    r.finish_prepared("in-file", true, &r_log())?;
    let left = RealFs.list(&f._dir.path().join(twophase::TWOPHASE_DIR))?;
    assert!(left.is_empty(), "state file removed: {left:?} (a = {a:?})");
    // A state file from the future (beyond the next XID even after replay) is refused, naming
    // the file.
    let early = TransactionManager::open(Arc::new(RealFs), f._dir.path(), XactOptions::default())?;
    let state = TwoPhaseState {
        xid: b,
        gid: "x".into(),
        prepared_at_us: 0,
        subxids: vec![],
        locks: vec![],
        commit_drops: vec![],
        abort_drops: vec![],
    };
    twophase::write_state_file(&RealFs, &f._dir.path().join(twophase::TWOPHASE_DIR), &state)?;
    assert_eq!(early.load_twophase_files()?, 1, "set aside until replay has run");
    let e = early.finish_twophase_recovery().unwrap_err();
    assert!(e.to_string().contains("is not before the next XID"), "{e}");
    Ok(())
}

/// Found by `settle torture` (a kill aimed at a checkpoint, issue 18): a checkpoint writes the
/// state files of PREPAREs before its redo pointer, then is killed before its own record, so
/// recovery starts from the previous checkpoint, whose next XID is older than the files'. The
/// files are set aside until replay (which meets their PREPARE records) has passed them.
#[test]
fn state_files_ahead_of_the_previous_checkpoint_are_recovered() -> Result<()> {
    let f = new_cluster();
    let previous_checkpoint_next = f.tm.next_full_xid();
    let a = f.tm.assign_xid(&f.log)?;
    let a_sub = f.tm.assign_subxid(a, a, &f.log)?;
    f.tm.prepare(a, "ahead", vec![], Default::default(), 10, &f.log)?;
    let b = f.tm.assign_xid(&f.log)?;
    f.tm.prepare(b, "ahead-then-committed", vec![], Default::default(), 10, &f.log)?;
    let redo = f.log.records().last().expect("record").end;
    assert_eq!(f.tm.checkpoint_twophase(redo)?, 2);
    // COMMIT PREPARED, and a kill before its state file was removed.
    let b_state = TwoPhaseState {
        xid: b,
        gid: "ahead-then-committed".into(),
        prepared_at_us: 0,
        subxids: vec![],
        locks: vec![],
        commit_drops: vec![],
        abort_drops: vec![],
    };
    f.tm.finish_prepared("ahead-then-committed", true, &f.log)?;
    let dir = f._dir.path().join(twophase::TWOPHASE_DIR);
    twophase::write_state_file(&RealFs, &dir, &b_state)?;
    // The checkpoint's record never made it: recovery from the previous one replays it all.
    let at_previous = XactOptions { next_full_xid: previous_checkpoint_next, ..XactOptions::default() };
    let r = TransactionManager::open(Arc::new(RealFs), f._dir.path(), at_previous)?;
    assert_eq!(r.load_twophase_files()?, 2);
    for rec in f.log.decoded().into_iter().filter(|rec| rec.rmgr == Rmgr::Xact) {
        r.redo(&rec)?;
    }
    assert_eq!(r.finish_twophase_recovery()?, 1);
    let gids: Vec<String> = r.prepared_xacts().into_iter().map(|p| p.gid).collect();
    assert_eq!(gids, ["ahead"]);
    assert!(r.is_running(a_sub.xid()));
    assert_eq!(r.status(b.xid())?, XidStatus::Committed);
    assert_eq!(RealFs.list(&dir)?.len(), 1, "the committed one's stale file is removed, the other's kept");
    r.finish_prepared("ahead", false, &r_log())?;
    assert!(RealFs.list(&dir)?.is_empty(), "the kept file is known to be on disk: removed with its transaction");
    Ok(())
}

fn r_log() -> RecordingLog {
    RecordingLog::default()
}

#[test]
fn a_stale_state_file_is_removed_by_recovery() -> Result<()> {
    let f = new_cluster();
    let a = f.tm.assign_xid(&f.log)?;
    f.tm.prepare(a, "g", vec![], Default::default(), 10, &f.log)?;
    let state = TwoPhaseState {
        xid: a,
        gid: "g".into(),
        prepared_at_us: 0,
        subxids: vec![],
        locks: vec![],
        commit_drops: vec![],
        abort_drops: vec![],
    };
    f.tm.finish_prepared("g", false, &f.log)?;
    // A checkpoint wrote the file just as the ROLLBACK PREPARED finished.
    twophase::write_state_file(&RealFs, &f._dir.path().join(twophase::TWOPHASE_DIR), &state)?;
    f.tm.clog().checkpoint(&f.log)?;
    let next = XactOptions { next_full_xid: f.tm.next_full_xid(), ..XactOptions::default() };
    let r = TransactionManager::open(Arc::new(RealFs), f._dir.path(), next)?;
    assert_eq!(r.load_twophase_files()?, 1);
    assert_eq!(r.finish_twophase_recovery()?, 0);
    assert!(r.prepared_xacts().is_empty());
    assert!(RealFs.list(&f._dir.path().join(twophase::TWOPHASE_DIR))?.is_empty());
    Ok(())
}

#[test]
fn replication_slot_xmins_hold_the_horizons_they_should() -> Result<()> {
    let f = new_cluster();
    let old = f.tm.assign_xid(&f.log)?;
    // A logical slot created while `old` runs keeps the catalog as of `old`.
    assert_eq!(f.tm.reserve_slot_catalog_xmin("s1"), old.xid());
    f.tm.commit(old, &f.log, true)?;
    let later = f.tm.assign_xid(&f.log)?;
    f.tm.commit(later, &f.log, true)?;
    let now = f.tm.oldest_xmin();
    assert!(old.xid().precedes(now), "user relations are not held back by catalog_xmin");
    assert_eq!(f.tm.catalog_oldest_xmin(), old.xid());
    assert_eq!(f.tm.relation_horizon(crate::types::Oid(1259), now), old.xid());
    assert_eq!(f.tm.relation_horizon(crate::types::Oid(16384), now), now);
    let (h, holder) = f.tm.oldest_xmin_with_holder(true);
    assert_eq!(h, old.xid());
    assert_eq!(holder, Some(HorizonHolder::ReplicationSlot { name: "s1".into(), xid: old.xid(), catalog: true }));
    assert_eq!(
        holder.map(|h| h.to_string()).as_deref(),
        Some(format!("replication slot \"s1\" (catalog_xmin {})", old.xid()).as_str())
    );
    assert_eq!(f.tm.oldest_xmin_with_holder(false), (now, None));
    // A slot's xmin holds back every relation.
    assert_eq!(
        f.tm.procs.lock().prepared_hint(),
        format!("\nThe replication slot \"s1\" holds catalog_xmin {}.", old.xid())
    );
    f.tm.set_replication_slot_xmin(Some((old.xid(), "phys".into())), None);
    assert_eq!(f.tm.oldest_xmin(), old.xid());
    assert_eq!(f.tm.catalog_oldest_xmin(), old.xid());
    f.tm.set_replication_slot_xmin(None, None);
    assert_eq!(f.tm.oldest_xmin(), now);
    assert_eq!(f.tm.catalog_oldest_xmin(), now);
    Ok(())
}
