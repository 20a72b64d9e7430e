//! XID assignment, the set of running transactions ("proc array"), commit and abort, and
//! the horizons derived from them (PostgreSQL's `varsup.c`, `procarray.c`, `xact.c`).
//!
//! # Locking
//!
//! One `parking_lot::Mutex` guards the proc array: the next XID, the limits, the running
//! set and the backends' registered snapshot xmins. Assignment, snapshots and transaction
//! end take it briefly; XID assignment also zeroes a CLOG page under it once per 32768 XIDs
//! (as `ExtendCLOG` runs under `XidGenLock`). Two atomics mirror the next XID and the oldest
//! running XID so that [`TransactionManager::status`], called for every tuple without hint
//! bits, usually decides "not running" without taking the lock.
//!
//! # Commit order
//!
//! WAL commit record (flushed when `synchronous_commit`) → CLOG committed → removal from the
//! running set → waiters woken. A snapshot taken in between still lists the XID as running,
//! so it keeps seeing the old row versions; a reader that finds the XID gone from the
//! running set is guaranteed to find its final status in the CLOG.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};

use super::clog::{self, Clog, CLOG_XACTS_PER_PAGE};
use super::snapshot::Snapshot;
use super::varsup::{self, XidLimits, DEFAULT_AUTOVACUUM_FREEZE_MAX_AGE};
use super::{XactLog, XidStatus, INFO_XACT_ABORT, INFO_XACT_COMMIT};
use crate::error::{Error, Result};
use crate::io::FileSystem;
use crate::types::{FullXid, Lsn, Xid};
use crate::wal::{DecodedRecord, RecordBuilder, Rmgr};

/// Where the XID counter and the limits start (from the control file after the first run).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XactOptions {
    pub next_full_xid: FullXid,
    /// The database's oldest frozen XID.
    pub oldest_xid: Xid,
    pub autovacuum_freeze_max_age: u32,
}

impl Default for XactOptions {
    /// A new cluster: next XID 3 in epoch 0, oldest frozen XID 3, PostgreSQL's defaults.
    fn default() -> XactOptions {
        XactOptions {
            next_full_xid: FullXid::new(0, Xid::FIRST_NORMAL),
            oldest_xid: Xid::FIRST_NORMAL,
            autovacuum_freeze_max_age: DEFAULT_AUTOVACUUM_FREEZE_MAX_AGE,
        }
    }
}

/// A registered backend (session): owner of at most one advertised snapshot xmin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackendId(pub u32);

struct ProcArray {
    next: FullXid,
    limits: XidLimits,
    running: BTreeSet<FullXid>,
    /// Per backend, the xmin of its oldest live snapshot (`PGPROC.xmin`).
    backends: HashMap<BackendId, Option<FullXid>>,
}

impl ProcArray {
    fn oldest_running(&self) -> FullXid {
        self.running.first().copied().unwrap_or(self.next)
    }
}

/// The transaction manager: XID counter, proc array and CLOG.
pub struct TransactionManager {
    clog: Clog,
    procs: Mutex<ProcArray>,
    /// Signalled whenever a transaction leaves the running set.
    finished: Condvar,
    /// Mirror of `procs.next` (a `FullXid`), for lock-free reads.
    next_full: AtomicU64,
    /// Mirror of the oldest running XID (or `next` when none runs).
    oldest_running: AtomicU64,
    latest_async_commit_lsn: AtomicU64,
    /// Source of backend ids.
    backend_ids: std::sync::atomic::AtomicU32,
    warnings: AtomicU64,
    last_warning: Mutex<Option<String>>,
    /// Held shared by a committer from before its commit record is inserted until the CLOG
    /// says committed; a checkpoint takes it exclusively once its redo pointer is chosen
    /// ([`Self::wait_for_commits_in_flight`]). PostgreSQL's `DELAY_CHKPT_START`.
    commits_in_flight: parking_lot::RwLock<()>,
}

impl TransactionManager {
    /// Opens the CLOG under `data_dir` and starts the counter at `opts.next_full_xid`.
    pub fn open(fs: Arc<dyn FileSystem>, data_dir: &Path, opts: XactOptions) -> Result<TransactionManager> {
        let clog = Clog::open(fs, data_dir)?;
        clog.set_latest_xid(opts.next_full_xid.xid());
        let procs = ProcArray {
            next: opts.next_full_xid,
            limits: XidLimits::compute(opts.oldest_xid, opts.autovacuum_freeze_max_age),
            running: BTreeSet::new(),
            backends: HashMap::new(),
        };
        Ok(TransactionManager {
            clog,
            procs: Mutex::new(procs),
            finished: Condvar::new(),
            next_full: AtomicU64::new(opts.next_full_xid.0),
            oldest_running: AtomicU64::new(opts.next_full_xid.0),
            latest_async_commit_lsn: AtomicU64::new(0),
            backend_ids: std::sync::atomic::AtomicU32::new(1),
            warnings: AtomicU64::new(0),
            last_warning: Mutex::new(None),
            commits_in_flight: parking_lot::RwLock::new(()),
        })
    }

    /// The commit log (for checkpoints and `check`).
    pub fn clog(&self) -> &Clog {
        &self.clog
    }

    fn publish(&self, procs: &ProcArray) {
        self.next_full.store(procs.next.0, Ordering::Release);
        self.oldest_running.store(procs.oldest_running().0, Ordering::Release);
    }

    /// Assigns a new top-level XID (`GetNewTransactionId`): refuses at the stop limit, warns
    /// past the warn limit, extends the CLOG and adds the XID to the running set.
    pub fn assign_xid(&self, log: &dyn XactLog) -> Result<FullXid> {
        let mut procs = self.procs.lock();
        let full = procs.next;
        let xid = full.xid();
        let limits = procs.limits;
        if xid.follows_or_equals(limits.stop_limit) {
            return Err(Error::WraparoundStop { next_xid: xid, oldest_xid: limits.oldest_xid });
        }
        if xid.follows_or_equals(limits.warn_limit) {
            self.warn(limits.warning(xid));
        }
        self.clog.extend(xid, log)?;
        procs.next = full.next();
        procs.running.insert(full);
        self.publish(&procs);
        Ok(full)
    }

    fn warn(&self, message: String) {
        self.warnings.fetch_add(1, Ordering::Relaxed);
        *self.last_warning.lock() = Some(message);
    }

    /// Burns `n` XIDs without creating transactions (test-only, like PostgreSQL's
    /// `consume_xids`). Whole CLOG pages are skipped; the page the counter lands on is zeroed
    /// when its first XID was skipped. Stops at the stop limit with
    /// [`Error::WraparoundStop`]. Returns the new next XID.
    pub fn consume_xids(&self, n: u64, log: &dyn XactLog) -> Result<FullXid> {
        let mut procs = self.procs.lock();
        let old = procs.next;
        let limits = procs.limits;
        let stop_err = Error::WraparoundStop { next_xid: limits.stop_limit, oldest_xid: limits.oldest_xid };
        if old.xid().follows_or_equals(limits.stop_limit) {
            return Err(stop_err);
        }
        let stop_full = old.widen(limits.stop_limit);
        let mut target = varsup::advance(old, n);
        let stopped = target > stop_full;
        if stopped {
            target = stop_full;
        }
        let first_full = first_of_page(target);
        if target != first_full && old <= first_full {
            self.clog.zero_page(clog::page_of(target.xid()), log)?;
        }
        procs.next = target;
        self.publish(&procs);
        if target.xid().follows_or_equals(limits.warn_limit) {
            self.warn(limits.warning(target.xid()));
        }
        if stopped {
            return Err(stop_err);
        }
        Ok(target)
    }

    /// The next XID to be assigned.
    pub fn next_full_xid(&self) -> FullXid {
        FullXid(self.next_full.load(Ordering::Acquire))
    }

    /// Sets the next XID (recovery: from the checkpoint record or control file).
    pub fn set_next_full_xid(&self, next: FullXid) {
        let mut procs = self.procs.lock();
        procs.next = next;
        self.clog.set_latest_xid(next.xid());
        self.publish(&procs);
    }

    /// Recomputes the wraparound limits from the database's oldest frozen XID.
    pub fn set_oldest_xid(&self, oldest_xid: Xid, autovacuum_freeze_max_age: u32) {
        self.procs.lock().limits = XidLimits::compute(oldest_xid, autovacuum_freeze_max_age);
    }

    pub fn limits(&self) -> XidLimits {
        self.procs.lock().limits
    }

    /// Whether the next XID has reached the autovacuum limit (anti-wraparound vacuum due).
    pub fn vacuum_limit_reached(&self) -> bool {
        let procs = self.procs.lock();
        procs.next.xid().follows_or_equals(procs.limits.vac_limit)
    }

    /// How many wraparound warnings were issued so far.
    pub fn warnings_issued(&self) -> u64 {
        self.warnings.load(Ordering::Relaxed)
    }

    pub fn last_warning(&self) -> Option<String> {
        self.last_warning.lock().clone()
    }

    /// The newest asynchronous commit's record LSN. The heap sets a commit hint bit only when
    /// WAL is flushed past it (otherwise the hint could reach disk before the commit record).
    pub fn latest_async_commit_lsn(&self) -> Lsn {
        Lsn(self.latest_async_commit_lsn.load(Ordering::Acquire))
    }

    /// The LSN WAL must be flushed past before a commit hint bit for `xid` may be set: the
    /// newest asynchronous commit on `xid`'s CLOG page (finer than
    /// [`Self::latest_async_commit_lsn`]); `Lsn::INVALID` when nothing needs flushing.
    pub fn commit_lsn_bound(&self, xid: Xid) -> Lsn {
        if !xid.is_normal() {
            return Lsn::INVALID;
        }
        self.clog.async_commit_lsn(xid)
    }

    /// Commits `xid`: logs `XACT COMMIT` (flushed when `synchronous_commit`), marks the CLOG,
    /// then leaves the running set and wakes waiters. Returns the commit record's end LSN.
    ///
    /// When the record cannot be logged or flushed (the WAL is then poisoned) the transaction
    /// leaves the running set with its CLOG status unset, so no waiter blocks on it forever; its
    /// fate is settled by recovery, which finds the commit record durable or not.
    ///
    /// From the commit record's insertion to the CLOG update the commit holds off checkpoints
    /// ([`Self::wait_for_commits_in_flight`]): a checkpoint whose redo pointer passed the
    /// record must not write the CLOG before it says committed, or recovery, starting at
    /// that redo pointer, would never replay the commit.
    pub fn commit(&self, xid: FullXid, log: &dyn XactLog, synchronous_commit: bool) -> Result<Lsn> {
        self.check_running(xid)?;
        let lsn = {
            let _delay_checkpoint = self.commits_in_flight.read();
            let logged = log.log(&end_record(INFO_XACT_COMMIT, xid.xid()));
            let lsn =
                match logged.and_then(|lsn| if synchronous_commit { log.flush(lsn).map(|()| lsn) } else { Ok(lsn) }) {
                    Ok(lsn) => lsn,
                    Err(e) => {
                        drop(_delay_checkpoint);
                        self.end(xid);
                        return Err(e);
                    }
                };
            if synchronous_commit {
                self.clog.set_status(xid.xid(), XidStatus::Committed)?;
            } else {
                self.clog.set_status_lsn(xid.xid(), XidStatus::Committed, lsn)?;
                self.latest_async_commit_lsn.fetch_max(lsn.0, Ordering::AcqRel);
            }
            lsn
        };
        self.end(xid);
        Ok(lsn)
    }

    /// Waits until every commit that has inserted its commit record has also marked the CLOG.
    /// A checkpoint calls it after choosing its redo pointer and before writing the CLOG
    /// (`CreateCheckPoint` waiting on `GetVirtualXIDsDelayingChkpt(DELAY_CHKPT_START)`):
    /// commit records before the redo pointer are then in the CLOG it writes, and those after
    /// it are replayed. Commits that begin meanwhile wait for the checkpoint's turn to pass.
    pub fn wait_for_commits_in_flight(&self) {
        drop(self.commits_in_flight.write());
    }

    /// Aborts `xid`: logs `XACT ABORT` (not flushed: a crash makes it aborted anyway), marks
    /// the CLOG, leaves the running set and wakes waiters. The transaction ends even when the
    /// record cannot be written; that error is returned afterwards.
    pub fn abort(&self, xid: FullXid, log: &dyn XactLog) -> Result<Lsn> {
        self.check_running(xid)?;
        let logged = log.log(&end_record(INFO_XACT_ABORT, xid.xid()));
        let marked = self.clog.set_status(xid.xid(), XidStatus::Aborted);
        self.end(xid);
        marked?;
        logged
    }

    fn check_running(&self, xid: FullXid) -> Result<()> {
        if self.procs.lock().running.contains(&xid) {
            Ok(())
        } else {
            Err(Error::invalid(format!("transaction {xid:?} is not running")))
        }
    }

    fn end(&self, xid: FullXid) {
        let mut procs = self.procs.lock();
        procs.running.remove(&xid);
        self.publish(&procs);
        drop(procs);
        self.finished.notify_all();
    }

    /// Replays an `XACT` or `CLOG` record: commit and abort set the CLOG status and move the
    /// next XID past the record's XID.
    pub fn redo(&self, rec: &DecodedRecord) -> Result<()> {
        match rec.rmgr {
            Rmgr::Clog => self.clog.redo(rec),
            Rmgr::Xact => {
                let status = match rec.info {
                    INFO_XACT_COMMIT => XidStatus::Committed,
                    INFO_XACT_ABORT => XidStatus::Aborted,
                    other => return Err(Error::corrupt_wal(rec.lsn, format!("unknown XACT record info {other:#04x}"))),
                };
                if !rec.xid.is_normal() {
                    return Err(Error::corrupt_wal(rec.lsn, format!("XACT record for special XID {}", rec.xid)));
                }
                self.clog.set_status(rec.xid, status)?;
                let mut procs = self.procs.lock();
                let full = procs.next.widen(rec.xid);
                if full >= procs.next {
                    procs.next = full.next();
                    self.publish(&procs);
                }
                Ok(())
            }
            other => Err(Error::corrupt_wal(rec.lsn, format!("{} record sent to xact redo", other.name()))),
        }
    }

    /// The status of `xid` for visibility checks. Frozen and bootstrap XIDs are committed,
    /// the invalid XID is aborted, a running XID is in progress, otherwise the CLOG decides;
    /// an XID the CLOG calls in progress that no longer runs crashed: aborted.
    /// Hot path: lock-free unless `xid` may still be running.
    pub fn status(&self, xid: Xid) -> Result<XidStatus> {
        if !xid.is_normal() {
            return Ok(if xid.is_valid() { XidStatus::Committed } else { XidStatus::Aborted });
        }
        let next = FullXid(self.next_full.load(Ordering::Acquire));
        let full = next.widen(xid);
        if full >= next {
            return Ok(XidStatus::InProgress);
        }
        if self.may_run(full) && self.procs.lock().running.contains(&full) {
            return Ok(XidStatus::InProgress);
        }
        Ok(match self.clog.status(xid)? {
            XidStatus::Committed => XidStatus::Committed,
            // Not running and never committed: aborted, crashed, or a burned XID. Without
            // subtransactions a sub-committed XID whose parent is gone never committed.
            XidStatus::Aborted | XidStatus::InProgress | XidStatus::SubCommitted => XidStatus::Aborted,
        })
    }

    fn may_run(&self, full: FullXid) -> bool {
        full.0 >= self.oldest_running.load(Ordering::Acquire)
    }

    /// Whether `xid` is a running top-level transaction (`TransactionIdIsInProgress`).
    pub fn is_running(&self, xid: Xid) -> bool {
        if !xid.is_normal() {
            return false;
        }
        let procs = self.procs.lock();
        procs.running.contains(&procs.next.widen(xid))
    }

    /// Blocks until `xid` is no longer running (`XactLockTableWait`).
    pub fn wait_for(&self, xid: Xid) {
        if !xid.is_normal() {
            return;
        }
        let mut procs = self.procs.lock();
        let full = procs.next.widen(xid);
        while procs.running.contains(&full) {
            self.finished.wait(&mut procs);
        }
    }

    /// Takes a snapshot (`GetSnapshotData`). `my_xid` is left out of `xip` and `xmin`.
    pub fn get_snapshot(&self, my_xid: Option<Xid>) -> Snapshot {
        let procs = self.procs.lock();
        snapshot_of(&procs, my_xid)
    }

    /// Takes a snapshot and, if `backend` advertises no xmin yet, advertises this snapshot's
    /// xmin under the same lock, so no horizon computed in between can miss it.
    pub fn get_registered_snapshot(&self, backend: BackendId, my_xid: Option<Xid>) -> Result<Snapshot> {
        let mut procs = self.procs.lock();
        let snap = snapshot_of(&procs, my_xid);
        let xmin = procs.next.widen(snap.xmin);
        let slot = procs.backends.get_mut(&backend).ok_or_else(|| unknown_backend(backend))?;
        if slot.is_none() {
            *slot = Some(xmin);
        }
        Ok(snap)
    }

    /// Registers a backend slot for advertising snapshot xmins.
    pub fn register_backend(&self) -> BackendId {
        let mut procs = self.procs.lock();
        let id = BackendId(self.backend_ids.fetch_add(1, Ordering::Relaxed));
        procs.backends.insert(id, None);
        id
    }

    /// A backend id without taking the proc-array lock; its slot is created by the first
    /// [`Self::command_snapshot`]. Hot path: a transaction begins with this.
    pub fn new_backend_id(&self) -> BackendId {
        BackendId(self.backend_ids.fetch_add(1, Ordering::Relaxed))
    }

    pub fn unregister_backend(&self, backend: BackendId) {
        self.procs.lock().backends.remove(&backend);
    }

    /// Takes a snapshot for a command and, under the same lock, advertises its xmin as the
    /// backend's (replacing the previous command's: a newer snapshot's xmin is never older) and
    /// computes the horizon (`oldest_xmin`) pruning may use during the command. One lock
    /// acquisition instead of three. Hot path.
    pub fn command_snapshot(&self, backend: BackendId, my_xid: Option<Xid>) -> (Snapshot, Xid) {
        let mut procs = self.procs.lock();
        let snap = snapshot_of(&procs, my_xid);
        let xmin = procs.next.widen(snap.xmin);
        procs.backends.insert(backend, Some(xmin));
        let horizon = procs.backends.values().flatten().copied().fold(procs.oldest_running(), FullXid::min);
        (snap, horizon.xid())
    }

    /// Advertises `xmin` (the xmin of the backend's oldest live snapshot) for the horizon.
    /// The caller must hold a snapshot with this xmin taken after the backend's previous
    /// advertisement, or use [`Self::get_registered_snapshot`], so the xmin never goes back
    /// past what vacuum may already have removed.
    pub fn register_snapshot_xmin(&self, backend: BackendId, xmin: Xid) -> Result<()> {
        let mut procs = self.procs.lock();
        let full = procs.next.widen(xmin);
        let slot = procs.backends.get_mut(&backend).ok_or_else(|| unknown_backend(backend))?;
        *slot = Some(full);
        Ok(())
    }

    /// Withdraws the backend's advertised xmin (its last snapshot is gone).
    pub fn release_snapshot_xmin(&self, backend: BackendId) {
        if let Some(slot) = self.procs.lock().backends.get_mut(&backend) {
            *slot = None;
        }
    }

    /// The oldest XID some transaction may still need to see as running
    /// (`GetOldestNonRemovableTransactionId`): the minimum of the running XIDs, the
    /// advertised snapshot xmins and the next XID. Row versions deleted by committed XIDs
    /// before it are dead to everyone.
    pub fn oldest_xmin(&self) -> Xid {
        self.oldest_xmin_full().xid()
    }

    pub fn oldest_xmin_full(&self) -> FullXid {
        let procs = self.procs.lock();
        let xmins = procs.backends.values().flatten().copied();
        xmins.fold(procs.oldest_running(), FullXid::min)
    }

    /// Truncates the CLOG below `oldest_xid`, which must not be newer than the database's
    /// oldest frozen XID given to [`Self::set_oldest_xid`].
    pub fn truncate_clog(&self, oldest_xid: Xid, log: &dyn XactLog) -> Result<usize> {
        let frozen = self.procs.lock().limits.oldest_xid;
        if oldest_xid.follows(frozen) {
            return Err(Error::invalid(format!(
                "cannot truncate CLOG at {oldest_xid}: the database frozen XID is {frozen}"
            )));
        }
        self.clog.truncate(oldest_xid, log)
    }
}

fn snapshot_of(procs: &ProcArray, my_xid: Option<Xid>) -> Snapshot {
    let mut xmin = procs.next;
    let mut xip = Vec::with_capacity(procs.running.len());
    for &full in &procs.running {
        if Some(full.xid()) == my_xid {
            continue;
        }
        xmin = xmin.min(full);
        xip.push(full.xid());
    }
    xip.sort_unstable_by_key(|x| x.0);
    Snapshot { xmin: xmin.xid(), xmax: procs.next.xid(), xip, my_xid }
}

fn unknown_backend(backend: BackendId) -> Error {
    Error::invalid(format!("backend {} is not registered", backend.0))
}

/// The first assignable XID of `full`'s CLOG page, in 64-bit form.
fn first_of_page(full: FullXid) -> FullXid {
    let first = FullXid(full.0 - u64::from(full.xid().0 % CLOG_XACTS_PER_PAGE));
    if first.xid().is_normal() {
        first
    } else {
        FullXid::new(first.epoch(), Xid::FIRST_NORMAL)
    }
}

fn end_record(info: u8, xid: Xid) -> RecordBuilder<'static> {
    RecordBuilder { rmgr: Rmgr::Xact, info, xid, blocks: Vec::new(), main_data: now_micros().to_le_bytes().to_vec() }
}

/// Microseconds since the Unix epoch (the commit timestamp).
fn now_micros() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
