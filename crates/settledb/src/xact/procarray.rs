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
//!
//! # Subtransactions in the proc array
//!
//! Each running top-level transaction lists its subtransaction XIDs for snapshots, at most
//! [`MAX_CACHED_SUBXIDS`] (PostgreSQL's `PGPROC_MAX_CACHED_SUBXIDS`); one more marks it
//! overflowed, and while any transaction is overflowed every snapshot is marked
//! `suboverflowed` and maps XIDs to their top-level XID through `pg_subtrans`
//! ([`super::subtrans`]) instead of reading its incomplete `subxip`. Separately, and
//! complete, the manager keeps every running subtransaction XID with its top-level XID
//! (`subs`): [`TransactionManager::is_running`] and [`TransactionManager::status`] answer
//! from it exactly, without the parent map. A subtransaction's XID runs from its assignment
//! until its rollback ([`TransactionManager::abort_subxacts`]) or its top-level
//! transaction's end; a released (sub-committed) one keeps running with its parent, as in
//! PostgreSQL, and becomes committed in the CLOG with it:
//!
//! ```text
//!   commit of top T with subxacts S1 (other CLOG page) and S2 (T's page):
//!     WAL COMMIT T [S1 S2] ─► S1 := sub-committed ─► T, S2 := committed (one page, atomic)
//!       ─► S1 := committed ─► T, S1, S2 leave the running set ─► waiters woken
//! ```
//!
//! (`TransactionIdSetTreeStatus`). A reader asking for a status meanwhile finds the XIDs
//! still running; only the CLOG file can hold the intermediate state, and a crash there is
//! repaired by replaying the commit record, which lists the subtransactions.
//!
//! Prepared transactions (see [`super::twophase`]) stay in the proc array without a
//! session: their XIDs are running, count for `xmin` and the horizons, and are handed to
//! snapshots as a shared [`PreparedXids`] rather than copied into `xip`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use rustc_hash::FxHashMap;

use super::clog::{self, Clog, CLOG_XACTS_PER_PAGE};
use super::records::{decode_end_record, end_record};
use super::snapshot::{PreparedXids, Snapshot, SubTransRef, MAX_CACHED_SUBXIDS};
use super::subtrans::SubTrans;
use super::twophase::{TwoPhaseState, TWOPHASE_DIR};
use super::varsup::{self, XidLimits, DEFAULT_AUTOVACUUM_FREEZE_MAX_AGE};
use super::{XactLog, XidStatus, INFO_XACT_ABORT, INFO_XACT_COMMIT};
use crate::error::{Error, Result};
use crate::io::FileSystem;
use crate::types::{FullXid, Lsn, Xid};
use crate::wal::{DecodedRecord, Rmgr};

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

/// A running top-level transaction's entry (its `PGPROC`'s XID part).
#[derive(Default)]
pub(super) struct RunningXact {
    /// Its running subtransaction XIDs, all of them, in assignment order.
    pub(super) subxids: Vec<FullXid>,
    /// The first [`MAX_CACHED_SUBXIDS`] of them still running, for snapshots (`subxids`
    /// of `PGPROC`).
    cached: Vec<Xid>,
    /// More were assigned than could be cached (`PGPROC.subxidStatus.overflowed`); stays set
    /// until the transaction ends, as in PostgreSQL.
    overflowed: bool,
}

/// A prepared transaction's entry.
pub(super) struct PreparedEntry {
    pub(super) state: TwoPhaseState,
    /// End of its PREPARE record (`Lsn::INVALID` when loaded from a state file): a checkpoint
    /// whose redo pointer is at or after it writes the state file.
    pub(super) prepare_lsn: Lsn,
    /// Whether its state file exists.
    pub(super) on_disk: bool,
    /// A COMMIT/ROLLBACK PREPARED of it is under way.
    pub(super) busy: bool,
}

pub(super) struct ProcArray {
    pub(super) next: FullXid,
    pub(super) limits: XidLimits,
    /// Running top-level transactions that belong to a session.
    pub(super) running: BTreeMap<FullXid, RunningXact>,
    /// Every running subtransaction XID (of a session's or a prepared transaction) with its
    /// top-level XID.
    pub(super) subs: FxHashMap<FullXid, FullXid>,
    /// How many entries of `running` are overflowed.
    overflowed: usize,
    /// Prepared transactions, by XID.
    pub(super) prepared: BTreeMap<FullXid, PreparedEntry>,
    /// Transaction identifiers in use: of prepared transactions and of ones being prepared.
    pub(super) gids: HashMap<String, FullXid>,
    /// The XIDs of `prepared` and their subtransactions, as snapshots get them.
    pub(super) prepared_xids: PreparedXids,
    /// Per backend, the xmin of its oldest live snapshot (`PGPROC.xmin`).
    backends: HashMap<BackendId, Option<FullXid>>,
    /// What the replication slots hold back (`procArray->replication_slot_xmin` and
    /// `replication_slot_catalog_xmin`), pushed down by their owner (see [`super::horizon`]).
    pub(super) slot_xmins: super::horizon::SlotXmins,
}

impl ProcArray {
    pub(super) fn oldest_running(&self) -> FullXid {
        let active = self.running.keys().next().copied().unwrap_or(self.next);
        let prepared = self.prepared.keys().next().copied().unwrap_or(self.next);
        active.min(prepared)
    }

    /// Whether `full` is a running (or prepared) transaction or subtransaction.
    pub(super) fn is_running(&self, full: FullXid) -> bool {
        self.running.contains_key(&full) || self.subs.contains_key(&full) || self.prepared.contains_key(&full)
    }

    /// Hands out the next XID (`GetNewTransactionId`): refuses at the stop limit, warns past
    /// the warn limit, extends the CLOG and `pg_subtrans`.
    fn take_next(&mut self, tm: &TransactionManager, log: &dyn XactLog) -> Result<FullXid> {
        let full = self.next;
        let xid = full.xid();
        let limits = self.limits;
        if xid.follows_or_equals(limits.stop_limit) {
            let prepared_hint = self.prepared_hint();
            return Err(Error::WraparoundStop { next_xid: xid, oldest_xid: limits.oldest_xid, prepared_hint });
        }
        if xid.follows_or_equals(limits.warn_limit) {
            tm.warn(limits.warning(xid) + &self.prepared_hint());
        }
        tm.clog.extend(xid, log)?;
        tm.subtrans.extend(xid);
        self.next = full.next();
        Ok(full)
    }

    /// What the wraparound warnings and the stop error add to PostgreSQL's hint (which always
    /// says "You might also need to commit or roll back old prepared transactions, or drop
    /// stale replication slots"): the oldest prepared transaction by name and XID, and whether
    /// it is what holds back VACUUM's removable cutoff (as the VACUUM report says), and the
    /// replication slot with the oldest xmin or catalog_xmin; empty when there are neither.
    pub(super) fn prepared_hint(&self) -> String {
        let mut hint = String::new();
        if let Some(e) = self.prepared.values().next() {
            let active = self.running.keys().next().copied().unwrap_or(self.next);
            let holds = if e.state.xid <= active { ", and it holds back VACUUM's removable cutoff" } else { "" };
            hint = format!(
                "\nThe oldest prepared transaction is \"{}\" (xid {}, one of {} prepared){holds}.",
                e.state.gid,
                e.state.xid.xid(),
                self.prepared.len()
            );
        }
        let slots = [("xmin", &self.slot_xmins.xmin), ("catalog_xmin", &self.slot_xmins.catalog_xmin)];
        let oldest = slots.iter().filter_map(|(what, s)| s.as_ref().map(|(x, n)| (*x, n, *what))).min_by_key(|s| s.0);
        if let Some((x, name, what)) = oldest {
            hint.push_str(&format!("\nThe replication slot \"{name}\" holds {what} {}.", x.xid()));
        }
        hint
    }

    /// Forgets the subtransaction XIDs `xids` of running top-level `top`.
    /// Usually the newest ones (a rolled-back savepoint's): then a truncation.
    fn drop_subxids(&mut self, top: FullXid, xids: &[FullXid]) {
        for x in xids {
            self.subs.remove(x);
        }
        if let Some(r) = self.running.get_mut(&top) {
            let gone: rustc_hash::FxHashSet<FullXid> = xids.iter().copied().collect();
            let mut removed = 0;
            while r.subxids.last().is_some_and(|x| gone.contains(x)) {
                r.subxids.pop();
                removed += 1;
            }
            if removed < gone.len() {
                r.subxids.retain(|s| !gone.contains(s));
            }
            r.cached.retain(|s| !xids.iter().any(|x| x.xid() == *s));
        }
    }

    /// Removes running top-level `top` from the sessions' entries, leaving its
    /// subtransactions running (PREPARE hands them to the prepared entry).
    pub(super) fn remove_running_keep_subxids(&mut self, top: FullXid) {
        if let Some(r) = self.running.remove(&top) {
            if r.overflowed {
                self.overflowed -= 1;
            }
        }
    }

    /// The oldest XID still needed as running by anyone: running and prepared XIDs and the
    /// advertised snapshot xmins (`GetOldestNonRemovableTransactionId`).
    /// A replication slot's `xmin` counts too (it holds back every relation); its
    /// `catalog_xmin` only [`Self::catalog_horizon`].
    pub(super) fn horizon(&self) -> FullXid {
        let h = self.horizon_without_slots();
        self.slot_xmins.xmin.as_ref().map_or(h, |(x, _)| h.min(*x))
    }

    /// Running and prepared XIDs and the advertised snapshot xmins only.
    pub(super) fn horizon_without_slots(&self) -> FullXid {
        self.backends.values().flatten().copied().fold(self.oldest_running(), FullXid::min)
    }

    /// The horizon for catalog relations: [`Self::horizon`] and the slots' `catalog_xmin`.
    pub(super) fn catalog_horizon(&self) -> FullXid {
        let h = self.horizon();
        self.slot_xmins.catalog_xmin.as_ref().map_or(h, |(x, _)| h.min(*x))
    }

    /// Removes running top-level `top` and all its subtransactions.
    fn remove_running(&mut self, top: FullXid) {
        if let Some(r) = self.running.remove(&top) {
            if r.overflowed {
                self.overflowed -= 1;
            }
            for s in &r.subxids {
                self.subs.remove(s);
            }
        }
    }
}

/// The transaction manager: XID counter, proc array and CLOG.
pub struct TransactionManager {
    pub(super) clog: Clog,
    pub(super) subtrans: Arc<SubTrans>,
    pub(super) procs: Mutex<ProcArray>,
    pub(super) fs: Arc<dyn FileSystem>,
    /// `pg_twophase` under the data directory.
    pub(super) twophase_dir: PathBuf,
    /// Serializes writing and removing state files (a checkpoint against COMMIT PREPARED).
    pub(super) twophase_io: Mutex<()>,
    /// Recovery: state files ahead of the next XID replay started from, checked after replay
    /// (`load_twophase_files`).
    pub(super) twophase_ahead: Mutex<Vec<crate::xact::twophase::TwoPhaseState>>,
    /// Signalled whenever a transaction leaves the running set.
    pub(super) finished: Condvar,
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
    pub(super) commits_in_flight: parking_lot::RwLock<()>,
}

impl TransactionManager {
    /// Opens the CLOG under `data_dir` and starts the counter at `opts.next_full_xid`.
    pub fn open(fs: Arc<dyn FileSystem>, data_dir: &Path, opts: XactOptions) -> Result<TransactionManager> {
        let clog = Clog::open(fs.clone(), data_dir)?;
        clog.set_latest_xid(opts.next_full_xid.xid());
        let twophase_dir = data_dir.join(TWOPHASE_DIR);
        if !fs.exists(&twophase_dir) {
            // A data directory from before prepared transactions: the new directory's entry
            // must be durable before a state file in it is relied on.
            fs.create_dir_all(&twophase_dir)?;
            fs.sync_dir(data_dir)?;
        }
        let procs = ProcArray {
            next: opts.next_full_xid,
            limits: XidLimits::compute(opts.oldest_xid, opts.autovacuum_freeze_max_age),
            running: BTreeMap::new(),
            subs: FxHashMap::default(),
            overflowed: 0,
            prepared: BTreeMap::new(),
            gids: HashMap::new(),
            prepared_xids: PreparedXids::default(),
            backends: HashMap::new(),
            slot_xmins: Default::default(),
        };
        Ok(TransactionManager {
            clog,
            subtrans: Arc::new(SubTrans::new()),
            procs: Mutex::new(procs),
            fs,
            twophase_dir,
            twophase_io: Mutex::new(()),
            twophase_ahead: Mutex::new(Vec::new()),
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

    /// The subtransaction parent map.
    pub fn subtrans(&self) -> &SubTrans {
        &self.subtrans
    }

    pub(super) fn publish(&self, procs: &ProcArray) {
        self.next_full.store(procs.next.0, Ordering::Release);
        self.oldest_running.store(procs.oldest_running().0, Ordering::Release);
    }

    /// Assigns a new top-level XID (`GetNewTransactionId`): refuses at the stop limit, warns
    /// past the warn limit, extends the CLOG and adds the XID to the running set.
    pub fn assign_xid(&self, log: &dyn XactLog) -> Result<FullXid> {
        let mut procs = self.procs.lock();
        let full = procs.take_next(self, log)?;
        procs.running.insert(full, RunningXact::default());
        self.publish(&procs);
        Ok(full)
    }

    /// Assigns an XID to a subtransaction of running top-level `top` whose parent (sub)
    /// transaction has XID `parent` (`AssignTransactionId` for a subtransaction): the parent
    /// must have its XID already, so the child's is greater. Records the parent in
    /// `pg_subtrans` before the XID becomes visible to anyone, and lists the XID in the
    /// top-level transaction's cache, or marks the cache overflowed.
    pub fn assign_subxid(&self, top: FullXid, parent: FullXid, log: &dyn XactLog) -> Result<FullXid> {
        let mut procs = self.procs.lock();
        if !procs.running.contains_key(&top) {
            return Err(Error::invalid(format!("transaction {top:?} is not running")));
        }
        if parent != top && procs.subs.get(&parent) != Some(&top) {
            return Err(Error::invalid(format!("{parent:?} is not a running subtransaction of {top:?}")));
        }
        let full = procs.take_next(self, log)?;
        self.subtrans.set_parent(full.xid(), parent.xid());
        procs.subs.insert(full, top);
        let mut overflowed_now = false;
        if let Some(r) = procs.running.get_mut(&top) {
            r.subxids.push(full);
            if r.cached.len() < MAX_CACHED_SUBXIDS && !r.overflowed {
                r.cached.push(full.xid());
            } else if !r.overflowed {
                r.overflowed = true;
                overflowed_now = true;
            }
        }
        if overflowed_now {
            procs.overflowed += 1;
        }
        self.publish(&procs);
        Ok(full)
    }

    /// The running subtransaction XIDs of `top`, in assignment order.
    pub fn running_subxids(&self, top: FullXid) -> Vec<FullXid> {
        self.procs.lock().running.get(&top).map(|r| r.subxids.clone()).unwrap_or_default()
    }

    /// The top-level transaction of a running (or prepared) XID; `xid` itself otherwise.
    pub fn top_level_of(&self, xid: Xid) -> Xid {
        if !xid.is_normal() {
            return xid;
        }
        let procs = self.procs.lock();
        let full = procs.next.widen(xid);
        procs.subs.get(&full).map_or(xid, |t| t.xid())
    }

    pub(super) fn warn(&self, message: String) {
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
        let stop_err = Error::WraparoundStop {
            next_xid: limits.stop_limit,
            oldest_xid: limits.oldest_xid,
            prepared_hint: procs.prepared_hint(),
        };
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
        self.subtrans.keep_window(procs.horizon().xid(), target.xid());
        self.publish(&procs);
        if target.xid().follows_or_equals(limits.warn_limit) {
            self.warn(limits.warning(target.xid()) + &procs.prepared_hint());
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

    /// Commits `xid` and its running subtransactions: logs `XACT COMMIT` listing them
    /// (flushed when `synchronous_commit`), marks the CLOG in `TransactionIdSetTreeStatus`
    /// order ([`Clog::set_tree_status`]), then leaves the running set and wakes waiters.
    /// Returns the commit record's end LSN.
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
        let subxids: Vec<Xid> = self.running_subxids(xid).iter().map(|s| s.xid()).collect();
        let lsn = {
            let _delay_checkpoint = self.commits_in_flight.read();
            let logged = log.log(&end_record(INFO_XACT_COMMIT, xid.xid(), &subxids));
            let lsn =
                match logged.and_then(|lsn| if synchronous_commit { log.flush(lsn).map(|()| lsn) } else { Ok(lsn) }) {
                    Ok(lsn) => lsn,
                    Err(e) => {
                        drop(_delay_checkpoint);
                        self.end(xid);
                        return Err(e);
                    }
                };
            let async_lsn = if synchronous_commit { Lsn::INVALID } else { lsn };
            self.clog.set_tree_status(xid.xid(), &subxids, XidStatus::Committed, async_lsn)?;
            if !synchronous_commit {
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

    /// Aborts `xid` and its running subtransactions: logs `XACT ABORT` listing them (not
    /// flushed: a crash makes them aborted anyway), marks the CLOG, leaves the running set and
    /// wakes waiters. The transaction ends even when the record cannot be written; that error
    /// is returned afterwards.
    pub fn abort(&self, xid: FullXid, log: &dyn XactLog) -> Result<Lsn> {
        self.check_running(xid)?;
        let subxids: Vec<Xid> = self.running_subxids(xid).iter().map(|s| s.xid()).collect();
        let logged = log.log(&end_record(INFO_XACT_ABORT, xid.xid(), &subxids));
        let marked = self.clog.set_tree_status(xid.xid(), &subxids, XidStatus::Aborted, Lsn::INVALID);
        self.end(xid);
        marked?;
        logged
    }

    /// Rolls back subtransactions of running top-level `top` (ROLLBACK TO SAVEPOINT): `xids`
    /// are one subtransaction's XID followed by its committed children's. Logs `XACT ABORT`
    /// for the first listing the rest (PostgreSQL's `RecordTransactionAbort` of a
    /// subtransaction), marks all aborted in the CLOG, then they leave the running set and
    /// waiters on them are woken: the rows they wrote are dead to everyone, and the row
    /// locks they took are free.
    ///
    /// `savepoint_lsn` is where the rolled-back level began; it goes into the record when the
    /// WAL is logical (see [`super::records`]).
    pub fn abort_subxacts(&self, top: FullXid, xids: &[FullXid], savepoint_lsn: Lsn, log: &dyn XactLog) -> Result<Lsn> {
        let Some((first, rest)) = xids.split_first() else {
            return Ok(Lsn::INVALID);
        };
        {
            let procs = self.procs.lock();
            if let Some(x) = xids.iter().find(|x| procs.subs.get(x) != Some(&top)) {
                return Err(Error::invalid(format!("{x:?} is not a running subtransaction of {top:?}")));
            }
        }
        let rest32: Vec<Xid> = rest.iter().map(|s| s.xid()).collect();
        let mut rec = end_record(INFO_XACT_ABORT, first.xid(), &rest32);
        if log.logical() {
            rec = super::records::with_savepoint_lsn(rec, savepoint_lsn);
            rec.toplevel_xid = top.xid();
        }
        let logged = log.log(&rec);
        let marked = self.clog.set_tree_status(first.xid(), &rest32, XidStatus::Aborted, Lsn::INVALID);
        {
            let mut procs = self.procs.lock();
            procs.drop_subxids(top, xids);
            self.publish(&procs);
        }
        self.finished.notify_all();
        marked?;
        logged
    }

    fn check_running(&self, xid: FullXid) -> Result<()> {
        if self.procs.lock().running.contains_key(&xid) {
            Ok(())
        } else {
            Err(Error::invalid(format!("transaction {xid:?} is not running")))
        }
    }

    fn end(&self, xid: FullXid) {
        let mut procs = self.procs.lock();
        procs.remove_running(xid);
        self.publish(&procs);
        drop(procs);
        self.finished.notify_all();
    }

    /// Replays an `XACT` or `CLOG` record: commit and abort set the CLOG status of the
    /// record's XID and of the subtransactions it lists, and move the next XID past them;
    /// the two-phase records are replayed by `redo_twophase` (`xact::prepared`).
    pub fn redo(&self, rec: &DecodedRecord) -> Result<()> {
        match rec.rmgr {
            Rmgr::Clog => self.clog.redo(rec),
            Rmgr::Xact => {
                if !rec.xid.is_normal() {
                    return Err(Error::corrupt_wal(rec.lsn, format!("XACT record for special XID {}", rec.xid)));
                }
                let status = match rec.info {
                    INFO_XACT_COMMIT => XidStatus::Committed,
                    INFO_XACT_ABORT => XidStatus::Aborted,
                    _ => return self.redo_twophase(rec),
                };
                let end = decode_end_record(rec)?;
                self.clog.set_tree_status(rec.xid, &end.subxids, status, Lsn::INVALID)?;
                self.advance_past(rec.xid, &end.subxids);
                Ok(())
            }
            other => Err(Error::corrupt_wal(rec.lsn, format!("{} record sent to xact redo", other.name()))),
        }
    }

    /// Moves the next XID past `xid` and `subxids` (recovery).
    pub(super) fn advance_past(&self, xid: Xid, subxids: &[Xid]) {
        let mut procs = self.procs.lock();
        for &x in std::iter::once(&xid).chain(subxids) {
            let full = procs.next.widen(x);
            if full >= procs.next {
                procs.next = full.next();
            }
        }
        self.clog.set_latest_xid(procs.next.xid());
        self.publish(&procs);
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
        if self.may_run(full) && self.procs.lock().is_running(full) {
            return Ok(XidStatus::InProgress);
        }
        Ok(match self.clog.status(xid)? {
            XidStatus::Committed => XidStatus::Committed,
            // Not running and never committed: aborted, crashed, or a burned XID.
            XidStatus::Aborted | XidStatus::InProgress => XidStatus::Aborted,
            // A commit writes sub-committed marks only while its XIDs still run, and resolves
            // them before they leave the running set; one left behind is a commit cut short
            // by a crash whose record recovery did not find (TransactionIdDidCommit asks the
            // parent, which is then never committed either).
            XidStatus::SubCommitted => match self.subtrans.parent(xid) {
                p if p.is_normal() && p.precedes(xid) && self.clog.status(p)? == XidStatus::Committed => {
                    XidStatus::Committed
                }
                _ => XidStatus::Aborted,
            },
        })
    }

    fn may_run(&self, full: FullXid) -> bool {
        full.0 >= self.oldest_running.load(Ordering::Acquire)
    }

    /// Whether `xid` is a running transaction or subtransaction, prepared ones included
    /// (`TransactionIdIsInProgress`).
    pub fn is_running(&self, xid: Xid) -> bool {
        if !xid.is_normal() {
            return false;
        }
        let procs = self.procs.lock();
        procs.is_running(procs.next.widen(xid))
    }

    /// Blocks until `xid` is no longer running (`XactLockTableWait`).
    pub fn wait_for(&self, xid: Xid) {
        if !xid.is_normal() {
            return;
        }
        let mut procs = self.procs.lock();
        let full = procs.next.widen(xid);
        while procs.is_running(full) {
            self.finished.wait(&mut procs);
        }
    }

    /// [`Self::wait_for`], but for at most `d`: whether `xid` is no longer running.
    pub fn wait_for_timeout(&self, xid: Xid, d: std::time::Duration) -> bool {
        if !xid.is_normal() {
            return true;
        }
        let deadline = std::time::Instant::now() + d;
        let mut procs = self.procs.lock();
        let full = procs.next.widen(xid);
        while procs.is_running(full) {
            if self.finished.wait_until(&mut procs, deadline).timed_out() {
                return !procs.is_running(full);
            }
        }
        true
    }

    /// Takes a snapshot (`GetSnapshotData`). `my_xid` is left out of `xip` and `xmin`.
    pub fn get_snapshot(&self, my_xid: Option<Xid>) -> Snapshot {
        let procs = self.procs.lock();
        self.snapshot_of(&procs, my_xid)
    }

    /// Takes a snapshot and, if `backend` advertises no xmin yet, advertises this snapshot's
    /// xmin under the same lock, so no horizon computed in between can miss it.
    pub fn get_registered_snapshot(&self, backend: BackendId, my_xid: Option<Xid>) -> Result<Snapshot> {
        let mut procs = self.procs.lock();
        let snap = self.snapshot_of(&procs, my_xid);
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
        let snap = self.snapshot_of(&procs, my_xid);
        let xmin = procs.next.widen(snap.xmin);
        procs.backends.insert(backend, Some(xmin));
        (snap, procs.horizon().xid())
    }

    /// A command snapshot (advertised as [`Self::command_snapshot`]'s) that sees exactly the
    /// transactions whose commit record precedes the LSN `position` returns, taken at a moment
    /// no commit is between its record and its CLOG update: commits are held off meanwhile
    /// ([`Self::wait_for_commits_in_flight`]'s lock). A transaction may have marked the CLOG
    /// and not yet left the running set (or the prepared set, for COMMIT PREPARED); its commit
    /// record precedes the position, so it is taken out of the snapshot's running lists, and
    /// waited for before this returns (until it leaves, visibility checks still find it
    /// running). A logical slot created with `SNAPSHOT 'use'` starts decoding at that
    /// position, and the snapshot reads the data the decoder will not send (PostgreSQL builds
    /// that snapshot from the WAL in its snapshot builder; here the CLOG, at a point no commit
    /// straddles, says the same). Returns the snapshot, the pruning horizon, and the position.
    pub fn snapshot_at_commit_boundary(
        &self,
        backend: BackendId,
        my_xid: Option<Xid>,
        position: impl FnOnce() -> Result<Lsn>,
    ) -> Result<(Snapshot, Xid, Lsn)> {
        let committed = |x: &Xid| matches!(self.clog.status(*x), Ok(XidStatus::Committed));
        // The CLOG is read under the lock too: a transaction that commits once it is
        // released has its record after the position and must stay running here.
        let (snap, horizon, lsn, finished) = {
            let _no_commits = self.commits_in_flight.write();
            let lsn = position()?;
            let (mut snap, horizon) = self.command_snapshot(backend, my_xid);
            let mut finished: Vec<Xid> = snap.xip.iter().copied().filter(committed).collect();
            snap.xip.retain(|x| !finished.contains(x));
            snap.subxip.retain(|x| !committed(x));
            let prepared: Vec<Xid> = snap.prepared.iter().filter(committed).collect();
            if !prepared.is_empty() {
                snap.prepared.remove(&prepared);
                finished.extend(prepared);
            }
            (snap, horizon, lsn, finished)
        };
        for x in finished {
            self.wait_for(x);
        }
        Ok((snap, horizon, lsn))
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

    /// Advertises the xmin of a snapshot `backend` imported (PostgreSQL's
    /// `ProcArrayInstallImportedXmin`) and returns the pruning horizon. The caller guarantees
    /// that the snapshot's exporter still advertises an xmin no newer, so nothing the snapshot
    /// needs has been removed.
    pub fn install_imported_xmin(&self, backend: BackendId, xmin: Xid) -> Xid {
        let mut procs = self.procs.lock();
        let full = procs.next.widen(xmin);
        procs.backends.insert(backend, Some(full));
        procs.horizon().xid()
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
        self.procs.lock().horizon()
    }

    /// Drops the `pg_subtrans` pages no one can ask about any more: those before the horizon
    /// (which includes snapshot xmins, as `GetOldestTransactionIdConsideredRunning`). Called
    /// by checkpoints and CLOG truncation. Returns the pages dropped.
    pub fn truncate_subtrans(&self) -> usize {
        let oldest = self.oldest_xmin();
        self.subtrans.truncate(oldest)
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
        let removed = self.clog.truncate(oldest_xid, log)?;
        self.truncate_subtrans();
        Ok(removed)
    }
}

impl TransactionManager {
    /// `GetSnapshotData`: `xip` = running top-level XIDs but the taker's, `subxip` = their
    /// cached subtransaction XIDs (unless some cache overflowed: then the snapshot carries the
    /// parent map instead), prepared XIDs shared, `xmin` = the oldest of all.
    /// Hot path: O(running sessions' XIDs), independent of the number of prepared ones.
    fn snapshot_of(&self, procs: &ProcArray, my_xid: Option<Xid>) -> Snapshot {
        let mut xmin = procs.prepared.keys().next().copied().unwrap_or(procs.next);
        let mut xip = Vec::with_capacity(procs.running.len());
        let overflowed = procs.overflowed > 0;
        let mut subxip = Vec::new();
        for (&full, r) in &procs.running {
            if !overflowed {
                subxip.extend_from_slice(&r.cached);
            }
            if Some(full.xid()) == my_xid {
                continue;
            }
            xmin = xmin.min(full);
            xip.push(full.xid());
        }
        xip.sort_unstable_by_key(|x| x.0);
        subxip.sort_unstable_by_key(|x| x.0);
        Snapshot {
            xmin: xmin.xid(),
            xmax: procs.next.xid(),
            xip,
            subxip,
            suboverflowed: overflowed.then(|| SubTransRef(self.subtrans.clone())),
            prepared: procs.prepared_xids.clone(),
            my_xid,
            my_subxids: Arc::default(),
        }
    }
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
