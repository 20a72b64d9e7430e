//! Prepared transactions in the proc array: PREPARE, COMMIT/ROLLBACK PREPARED, their redo,
//! state files at checkpoints and their recovery (the algorithm is described in
//! [`super::twophase`]).
//!
//! # Locking
//!
//! The proc-array mutex guards the prepared entries and the identifiers in use; it is never
//! held across I/O. `twophase_io` serializes writing state files (a checkpoint) against
//! removing them (a finished prepared transaction), so a checkpoint never writes the file of
//! a transaction that has just been finished and unlinked. Lock order: `twophase_io`, then
//! the proc array. PREPARE and COMMIT/ROLLBACK PREPARED hold off checkpoints from their
//! record to the state change it stands for (`commits_in_flight`), as a commit does, so a
//! checkpoint whose redo pointer passed a PREPARE record finds the transaction prepared and
//! writes its state file.

use super::procarray::{PreparedEntry, ProcArray};
use super::records::{self, now_micros};
use super::twophase::{self, TwoPhaseState};
use super::{TransactionManager, XactLog, XidStatus};
use super::{INFO_XACT_ABORT_PREPARED, INFO_XACT_COMMIT_PREPARED, INFO_XACT_PREPARE};
use crate::error::{Error, Result};
use crate::types::{FullXid, Lsn, Oid, Xid};
use crate::wal::{DecodedRecord, RecordBuilder, Rmgr};

/// One prepared transaction as `pg_prepared_xacts` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedXact {
    pub xid: FullXid,
    pub gid: String,
    /// Microseconds since the Unix epoch.
    pub prepared_at_us: i64,
    /// Its committed subtransactions.
    pub subxacts: usize,
}

fn install(procs: &mut ProcArray, state: TwoPhaseState, prepare_lsn: Lsn, on_disk: bool) {
    let xid = state.xid;
    let mut all = Vec::with_capacity(state.subxids.len() + 1);
    all.push(xid.xid());
    for &s in &state.subxids {
        procs.subs.insert(xid.widen(s), xid);
        all.push(s);
    }
    procs.prepared_xids.add(&all);
    procs.gids.insert(state.gid.clone(), xid);
    procs.prepared.insert(xid, PreparedEntry { state, prepare_lsn, on_disk, busy: false });
}

/// Removes a prepared transaction; whether its state file exists.
fn uninstall(procs: &mut ProcArray, xid: FullXid) -> Option<bool> {
    let e = procs.prepared.remove(&xid)?;
    procs.gids.remove(&e.state.gid);
    let mut all = Vec::with_capacity(e.state.subxids.len() + 1);
    all.push(xid.xid());
    for &s in &e.state.subxids {
        procs.subs.remove(&xid.widen(s));
        all.push(s);
    }
    procs.prepared_xids.remove(&all);
    Some(e.on_disk)
}

/// The relation files a prepared transaction removes when it finishes: at its commit, the
/// storage its TRUNCATEs replaced; at its rollback, the storage they made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PreparedDrops {
    pub at_commit: Vec<Oid>,
    pub at_abort: Vec<Oid>,
}

impl TransactionManager {
    /// PREPARE TRANSACTION `gid` for running top-level `top` (with every running
    /// subtransaction: open savepoints are released first, as PostgreSQL does). Logs and
    /// flushes `XACT PREPARE`; the transaction then leaves its session and stays in the proc
    /// array as prepared. Errors, with nothing changed: prepared transactions disabled
    /// (`max_prepared == 0`), an identifier too long or in use, `max_prepared` reached.
    /// `locks` are its table locks, kept in the state so recovery can take them again;
    /// `drops` the relation files to remove at its commit and at its rollback.
    pub fn prepare(
        &self,
        top: FullXid,
        gid: &str,
        locks: Vec<(crate::types::Oid, u16)>,
        drops: PreparedDrops,
        max_prepared: u32,
        log: &dyn XactLog,
    ) -> Result<Lsn> {
        twophase::validate_gid(gid)?;
        let subxids = {
            let mut procs = self.procs.lock();
            if max_prepared == 0 {
                return Err(Error::invalid(
                    "prepared transactions are disabled; HINT: set max_prepared_transactions to a nonzero value",
                ));
            }
            if procs.gids.contains_key(gid) {
                return Err(Error::AlreadyExists(format!("transaction identifier \"{gid}\" is already in use")));
            }
            if procs.gids.len() >= max_prepared as usize {
                return Err(Error::invalid(format!(
                    "maximum number of prepared transactions reached; HINT: increase max_prepared_transactions \
                     (currently {max_prepared})"
                )));
            }
            let Some(r) = procs.running.get(&top) else {
                return Err(Error::invalid(format!("transaction {top:?} is not running")));
            };
            let subxids: Vec<Xid> = r.subxids.iter().map(|s| s.xid()).collect();
            procs.gids.insert(gid.to_string(), top);
            subxids
        };
        let state = TwoPhaseState {
            xid: top,
            gid: gid.to_string(),
            prepared_at_us: now_micros(),
            subxids,
            locks,
            commit_drops: drops.at_commit,
            abort_drops: drops.at_abort,
        };
        let _delay_checkpoint = self.commits_in_flight.read();
        let rec = RecordBuilder {
            toplevel_xid: crate::types::Xid::INVALID,
            rmgr: Rmgr::Xact,
            info: INFO_XACT_PREPARE,
            xid: top.xid(),
            blocks: vec![],
            main_data: state.encode(),
        };
        let end = match log.log(&rec).and_then(|end| log.flush(end).map(|()| end)) {
            Ok(end) => end,
            Err(e) => {
                self.procs.lock().gids.remove(gid);
                return Err(e);
            }
        };
        let mut procs = self.procs.lock();
        procs.remove_running_keep_subxids(top);
        procs.gids.remove(gid);
        install(&mut procs, state, end, false);
        self.publish(&procs);
        Ok(end)
    }

    /// COMMIT PREPARED (`commit`) or ROLLBACK PREPARED `gid`: logs and flushes
    /// `XACT COMMIT_PREPARED` / `XACT ABORT_PREPARED` listing the subtransactions, sets the
    /// CLOG as a commit or abort does, then the transaction leaves the proc array, its
    /// waiters wake, and its state file (if a checkpoint wrote one) is removed. Returns the
    /// transaction's XID and its state's files to remove for this outcome (the caller removes
    /// them; a crash first leaves them to recovery, as no committed catalog row names them).
    pub fn finish_prepared(&self, gid: &str, commit: bool, log: &dyn XactLog) -> Result<(FullXid, Vec<Oid>)> {
        let (xid, subxids, drops) = {
            let mut procs = self.procs.lock();
            let Some(&xid) = procs.gids.get(gid) else {
                return Err(Error::NotFound(format!("prepared transaction with identifier \"{gid}\" does not exist")));
            };
            match procs.prepared.get_mut(&xid) {
                Some(e) if !e.busy => {
                    e.busy = true;
                    let drops = if commit { &e.state.commit_drops } else { &e.state.abort_drops };
                    (xid, e.state.subxids.clone(), drops.clone())
                }
                _ => return Err(Error::invalid(format!("prepared transaction with identifier \"{gid}\" is busy"))),
            }
        };
        let (info, status) = if commit {
            (INFO_XACT_COMMIT_PREPARED, XidStatus::Committed)
        } else {
            (INFO_XACT_ABORT_PREPARED, XidStatus::Aborted)
        };
        let done = {
            let _delay_checkpoint = self.commits_in_flight.read();
            log.log(&records::end_record(info, xid.xid(), &subxids))
                .and_then(|end| log.flush(end))
                .and_then(|()| self.clog.set_tree_status(xid.xid(), &subxids, status, Lsn::INVALID))
        };
        if let Err(e) = done {
            if let Some(e) = self.procs.lock().prepared.get_mut(&xid) {
                e.busy = false;
            }
            return Err(e);
        }
        let _io = self.twophase_io.lock();
        let on_disk = {
            let mut procs = self.procs.lock();
            let on_disk = uninstall(&mut procs, xid);
            self.publish(&procs);
            on_disk
        };
        self.finished.notify_all();
        if on_disk == Some(true) {
            // The outcome is durable in WAL and CLOG; a file left behind by a failed unlink is
            // recognised as stale by the next recovery and removed then.
            let _ = self.fs.remove(&twophase::state_file_path(&self.twophase_dir, xid));
        }
        Ok((xid, drops))
    }

    /// The relation files prepared transactions will remove at their commit or rollback:
    /// recovery keeps them, though no committed catalog row may name them.
    pub fn prepared_drops(&self) -> Vec<Oid> {
        let procs = self.procs.lock();
        procs.prepared.values().flat_map(|e| e.state.commit_drops.iter().chain(&e.state.abort_drops)).copied().collect()
    }

    /// Replays `XACT PREPARE`, `XACT COMMIT_PREPARED` and `XACT ABORT_PREPARED`.
    pub(super) fn redo_twophase(&self, rec: &DecodedRecord) -> Result<()> {
        match rec.info {
            INFO_XACT_PREPARE => {
                let state = TwoPhaseState::decode(&rec.main_data)
                    .map_err(|d| Error::corrupt_wal(rec.lsn, format!("PREPARE record: {d}")))?;
                self.advance_past(rec.xid, &state.subxids);
                if self.next_full_xid().widen(rec.xid) != state.xid {
                    return Err(Error::corrupt_wal(
                        rec.lsn,
                        format!("PREPARE record of XID {} carries the state of XID {:?}", rec.xid, state.xid),
                    ));
                }
                let mut procs = self.procs.lock();
                if !procs.prepared.contains_key(&state.xid) && !procs.gids.contains_key(&state.gid) {
                    install(&mut procs, state, rec.end_lsn, false);
                }
                self.publish(&procs);
                Ok(())
            }
            INFO_XACT_COMMIT_PREPARED | INFO_XACT_ABORT_PREPARED => {
                let end = records::decode_end_record(rec)?;
                let status =
                    if rec.info == INFO_XACT_COMMIT_PREPARED { XidStatus::Committed } else { XidStatus::Aborted };
                self.clog.set_tree_status(rec.xid, &end.subxids, status, Lsn::INVALID)?;
                self.advance_past(rec.xid, &end.subxids);
                let (full, on_disk) = {
                    let mut procs = self.procs.lock();
                    let full = procs.next.widen(rec.xid);
                    let on_disk = uninstall(&mut procs, full);
                    self.publish(&procs);
                    (full, on_disk)
                };
                if on_disk == Some(true) {
                    self.fs.remove(&twophase::state_file_path(&self.twophase_dir, full))?;
                }
                Ok(())
            }
            other => Err(Error::corrupt_wal(rec.lsn, format!("unknown XACT record info {other:#04x}"))),
        }
    }

    /// Recovery, before replay: loads the state files written by checkpoints. Returns how many
    /// were read.
    ///
    /// A file may be ahead of the next XID replay starts from: a checkpoint writes its state
    /// files (for PREPAREs before its redo pointer) before its own record, and a crash between
    /// the two leaves recovery to start from the previous checkpoint, whose next XID may not
    /// yet cover the file's XID. Such a file is set aside; its PREPARE record lies between the
    /// two redo pointers and is replayed, and [`Self::finish_twophase_recovery`] checks the
    /// file against the next XID replay reached. (PostgreSQL's `restoreTwoPhaseData` removes
    /// such a "future two-phase state file" and relies on the replay alone; keeping it until
    /// replay has vouched for it loses nothing if the WAL does not carry the PREPARE.)
    pub fn load_twophase_files(&self) -> Result<usize> {
        let states = twophase::read_state_files(&*self.fs, &self.twophase_dir)?;
        let n = states.len();
        for state in states {
            let mut procs = self.procs.lock();
            let xids = std::iter::once(state.xid.xid()).chain(state.subxids.iter().copied());
            if xids.map(|x| procs.next.widen(x)).any(|full| full >= procs.next) {
                self.twophase_ahead.lock().push(state);
                continue;
            }
            self.install_state_file(&mut procs, state)?;
        }
        Ok(n)
    }

    /// Installs one state file's transaction (`on_disk`), or, when replay already installed
    /// the same transaction from its PREPARE record, marks that one as having its file.
    /// Refuses a file whose XIDs are not before the next XID (or outside its 2^31 window, so
    /// that 32-bit XIDs in tuples would not widen back to them) or whose GID another holds.
    fn install_state_file(&self, procs: &mut ProcArray, state: TwoPhaseState) -> Result<()> {
        let path = || twophase::state_file_path(&self.twophase_dir, state.xid);
        for x in std::iter::once(state.xid.xid()).chain(state.subxids.iter().copied()) {
            let full = procs.next.widen(x);
            if full >= procs.next || (x == state.xid.xid() && full != state.xid) {
                return Err(Error::CorruptFile {
                    path: path(),
                    detail: format!("XID {:016X} is not before the next XID {:016X}", full.0, procs.next.0),
                });
            }
        }
        if let Some(e) = procs.prepared.get_mut(&state.xid) {
            if e.state.gid == state.gid {
                e.on_disk = true;
                return Ok(());
            }
        }
        if let Some(&other) = procs.gids.get(&state.gid) {
            return Err(Error::CorruptFile {
                path: path(),
                detail: format!("transaction identifier \"{}\" is also that of XID {other:?}", state.gid),
            });
        }
        install(procs, state, Lsn::INVALID, true);
        self.publish(procs);
        Ok(())
    }

    /// The table locks of every prepared transaction, as their states record them.
    pub fn prepared_table_locks(&self) -> Vec<(FullXid, Vec<(crate::types::Oid, u16)>)> {
        let procs = self.procs.lock();
        procs.prepared.iter().map(|(&x, e)| (x, e.state.locks.clone())).collect()
    }

    /// Recovery, after replay: the state files set aside as ahead of the start's next XID are
    /// installed now (an error if still not before the next XID); then a prepared
    /// transaction the CLOG calls committed or aborted was finished after its state file was
    /// written (the file is stale: removed); the others run again, with their
    /// subtransactions' parent links restored. Returns how many remain.
    pub fn finish_twophase_recovery(&self) -> Result<usize> {
        for state in std::mem::take(&mut *self.twophase_ahead.lock()) {
            let mut procs = self.procs.lock();
            self.install_state_file(&mut procs, state)?;
        }
        let entries: Vec<(FullXid, Vec<Xid>, bool)> = {
            let procs = self.procs.lock();
            procs.prepared.iter().map(|(&x, e)| (x, e.state.subxids.clone(), e.on_disk)).collect()
        };
        let mut left = 0;
        for (xid, subxids, on_disk) in entries {
            match self.clog.status(xid.xid())? {
                XidStatus::Committed | XidStatus::Aborted => {
                    let mut procs = self.procs.lock();
                    uninstall(&mut procs, xid);
                    self.publish(&procs);
                    drop(procs);
                    if on_disk {
                        self.fs.remove(&twophase::state_file_path(&self.twophase_dir, xid))?;
                    }
                }
                XidStatus::InProgress | XidStatus::SubCommitted => {
                    for s in subxids {
                        self.subtrans.set_parent(s, xid.xid());
                    }
                    left += 1;
                }
            }
        }
        Ok(left)
    }

    /// Checkpoint step: writes and fsyncs the state file of every prepared transaction whose
    /// PREPARE record ends at or before `redo` (replay from `redo` would not see it), then
    /// fsyncs the directory (`CheckPointTwoPhase`). Returns how many files were written.
    pub fn checkpoint_twophase(&self, redo: Lsn) -> Result<usize> {
        let _io = self.twophase_io.lock();
        let todo: Vec<TwoPhaseState> = {
            let procs = self.procs.lock();
            procs.prepared.values().filter(|e| !e.on_disk && e.prepare_lsn <= redo).map(|e| e.state.clone()).collect()
        };
        if todo.is_empty() {
            return Ok(0);
        }
        for state in &todo {
            twophase::write_state_file(&*self.fs, &self.twophase_dir, state)?;
        }
        self.fs.sync_dir(&self.twophase_dir)?;
        let mut procs = self.procs.lock();
        for state in &todo {
            if let Some(e) = procs.prepared.get_mut(&state.xid) {
                e.on_disk = true;
            }
        }
        Ok(todo.len())
    }

    /// The prepared transactions, by XID (`pg_prepared_xacts`).
    pub fn prepared_xacts(&self) -> Vec<PreparedXact> {
        let procs = self.procs.lock();
        procs
            .prepared
            .values()
            .map(|e| PreparedXact {
                xid: e.state.xid,
                gid: e.state.gid.clone(),
                prepared_at_us: e.state.prepared_at_us,
                subxacts: e.state.subxids.len(),
            })
            .collect()
    }
}
