//! Transactions: XID assignment and wraparound limits, the commit log, the proc array,
//! snapshots and the horizons vacuum relies on.
//!
//! Modelled on PostgreSQL's `access/transam` (`varsup.c`, `clog.c`, `transam.c`, `xact.c`),
//! `storage/ipc/procarray.c` and `heapam_visibility.c`'s `XidInMVCCSnapshot`.
//!
//! | file | what |
//! |---|---|
//! | [`clog`] | `pg_xact`: 2 status bits per XID, page cache, segments, truncation |
//! | [`varsup`] | wraparound limits and 64-bit XID arithmetic |
//! | [`procarray`] | [`TransactionManager`]: assignment, running set, commit/abort, status, horizons |
//! | [`snapshot`] | [`Snapshot`] and its in-progress test (`subxip`, overflow, prepared XIDs) |
//! | [`subtrans`] | `pg_subtrans`: each subtransaction's parent (in memory) |
//! | [`twophase`] | prepared transactions' state: format, `pg_twophase` files |
//! | [`prepared`] | PREPARE / COMMIT PREPARED in the proc array, redo, checkpoint, recovery |
//! | `verify` | `check`'s view of `pg_subtrans` and prepared transactions against the CLOG |
//!
//! # XID lifecycle
//!
//! ```text
//!  assign_xid ──► running ──► commit: WAL COMMIT (+flush) ─► CLOG=committed ─► leave running
//!      │                  └─► abort:  WAL ABORT           ─► CLOG=aborted   ─► leave running
//!      └ CLOG page zeroed (CLOG ZEROPAGE) when the XID is the first of its page
//!  crash while running ──► CLOG still 0 ("in progress") but not running ──► reported aborted
//!  vacuum freezes old rows ──► database frozen XID advances ──► CLOG truncated below it
//! ```
//!
//! A transaction gets an XID only when it first writes. [`TransactionManager::assign_xid`]
//! hands out the next [`FullXid`](crate::types::FullXid) (epoch + 32-bit XID); tuples store only the 32-bit
//! [`Xid`](crate::types::Xid), which is why wraparound matters at all.
//!
//! # Modulo-2^31 comparison and `FullXid`
//!
//! 32-bit XIDs are compared on a circle ([`Xid::precedes`](crate::types::Xid::precedes)): of two normal XIDs, the one up
//! to 2^31 - 1 steps behind is older. This is only meaningful while every XID still in a
//! tuple is within 2^31 of the newest one; vacuum keeps it so by freezing old XIDs (replacing
//! them by the always-visible `FrozenXid`, 2). In memory, [`FullXid`](crate::types::FullXid) carries the epoch so
//! counters and horizons compare as plain integers; [`FullXid::widen`](crate::types::FullXid::widen) recovers the 64-bit
//! form of an on-disk XID relative to the next XID.
//!
//! # CLOG layout and truncation
//!
//! Two bits per XID (0 in progress, 1 committed, 2 aborted, 3 sub-committed), 32768 XIDs per
//! 8 KB page, 32 pages per segment file `pg_xact/%04X`. Page numbers come from the 32-bit
//! XID, so pages are reused after a wrap. A segment may be removed only when all its XIDs
//! precede the database's oldest frozen XID (the minimum relfrozenxid): no tuple refers to
//! them any more. Comparing pages on the circle (`CLOGPagePrecedes`) makes the rule hold
//! across the 2^32 wrap: right after a wrap, segment `0FFF` is older than segment `0000`.
//!
//! # Commit ordering, and why
//!
//! 1. **WAL first** (flushed under `synchronous_commit`): once the CLOG says committed,
//!    other transactions may act on it (see the changes, set hint bits); a crash must not
//!    then forget the commit.
//! 2. **CLOG before leaving the running set**: a reader that sees the XID is no longer
//!    running must find its final status in the CLOG, never a stale 0 that would read as
//!    "crashed, hence aborted".
//! 3. **Leave the running set last**, then wake [`TransactionManager::wait_for`] waiters.
//!    Snapshots taken before this point list the XID in `xip` and keep ignoring its changes,
//!    which is what MVCC promises them.
//!
//! # Snapshots
//!
//! `xmax` = the next XID; `xip` = running top-level XIDs other than the taker's own; `subxip`
//! = their subtransactions' XIDs, up to 64 per transaction (past that the snapshot is
//! overflowed and maps an XID to its top-level one through `pg_subtrans` first); prepared
//! transactions' XIDs are shared rather than copied; `xmin` = the oldest of all (or `xmax`).
//! An XID is in progress for the snapshot when it is `>= xmax` or listed;
//! below `xmin` it is finished and the CLOG decides committed or aborted. The taker's
//! current XIDs (top-level and subtransactions not rolled back) are never "in progress" to
//! itself (the heap uses command IDs for its own changes).
//! A backend advertises the xmin of its oldest snapshot in the proc array; the horizon
//! [`TransactionManager::oldest_xmin`] (`GetOldestNonRemovableTransactionId`) is the minimum
//! of running XIDs, advertised xmins and the next XID. Vacuum removes only versions deleted
//! by transactions committed before it.
//!
//! # Wraparound limits (`SetTransactionIdLimit`, PostgreSQL 15)
//!
//! With `oldest` = the database's oldest frozen XID, all modulo 2^32 skipping 0..=2:
//!
//! ```text
//!   wrap_limit = oldest + 2^31 - 1
//!   stop_limit = wrap_limit - 3,000,000    assign_xid fails with Error::WraparoundStop
//!   warn_limit = wrap_limit - 40,000,000   "database must be vacuumed within N transactions"
//!   vac_limit  = oldest + autovacuum_freeze_max_age   anti-wraparound autovacuum is due
//! ```
//!
//! # Hint bits and asynchronous commit
//!
//! A hint bit (XMIN_COMMITTED …) caches a CLOG lookup in the tuple and may reach disk
//! without WAL. After an asynchronous commit, the commit record may not be flushed yet; a
//! hint bit written before it could survive a crash that loses the commit. So the heap sets
//! a commit hint only when WAL is flushed past
//! [`TransactionManager::latest_async_commit_lsn`], and the CLOG itself flushes WAL past the
//! asynchronous commits on a page before writing that page.
//!
//! # Subtransactions and prepared transactions
//!
//! A subtransaction's XID is assigned after its parent's, recorded in [`subtrans`], runs in
//! the proc array beside its top-level transaction, and is committed with it or aborted on its
//! own (ROLLBACK TO); see [`procarray`] ("Subtransactions in the proc array"). Horizons need
//! nothing more: a running subtransaction's XID is greater than its top-level XID, which the
//! horizon ([`TransactionManager::oldest_xmin`]) already counts. A prepared transaction
//! ([`twophase`], [`prepared`]) keeps its XIDs running with no session, so it holds the
//! horizon, and with it the freeze cutoffs and the relfrozenxid VACUUM can reach, until it is
//! committed or rolled back.
//!
//! # Non-goals (for now)
//!
//! Commit timestamps as a queryable feature, multixacts, XLOG_XACT_ASSIGNMENT records.
//! PostgreSQL writes those for a hot standby (whose KnownAssignedXids would otherwise
//! overflow), which settledb has not; its own recovery learns a transaction's subtransactions
//! from the commit and abort records, and the logical decoder planned for `wal_level =
//! logical` will learn the top-level XID from each record written in a subtransaction, as
//! PostgreSQL 14+ does under that level.

pub mod clog;
pub mod horizon;
pub mod prepared;
pub mod procarray;
pub mod records;
pub mod snapshot;
pub mod standby;
pub mod subtrans;
pub mod twophase;
pub mod varsup;
mod verify;

#[cfg(test)]
mod tests;

pub use clog::Clog;
pub use horizon::HorizonHolder;
pub use prepared::PreparedXact;
pub use procarray::{BackendId, TransactionManager, XactOptions};
pub use snapshot::{PreparedXids, Snapshot, MAX_CACHED_SUBXIDS};
pub use subtrans::SubTrans;
pub use twophase::TwoPhaseState;
pub use varsup::XidLimits;

use crate::error::Result;
use crate::types::Lsn;
use crate::wal::{DecodedRecord, RecordBuilder, Rmgr, Wal};

/// `XACT COMMIT`: record XID = the committing top-level XID, main data = commit time (µs
/// since the Unix epoch, i64 LE), then, if it has committed subtransactions, their count
/// (u32 LE) and XIDs (u32 LE each).
pub const INFO_XACT_COMMIT: u8 = 0x00;
/// `XACT PREPARE`: record XID = the prepared XID, main data = its
/// [`twophase::TwoPhaseState`].
pub const INFO_XACT_PREPARE: u8 = 0x10;
/// `XACT ABORT`: record XID = the aborting XID (top-level, or a subtransaction rolled back
/// to its savepoint), main data = abort time (µs, i64 LE), then the count and XIDs of the
/// subtransactions aborted with it, as for `COMMIT`.
pub const INFO_XACT_ABORT: u8 = 0x20;
/// `XACT COMMIT_PREPARED`: record XID = the prepared XID, main data as for `COMMIT`.
pub const INFO_XACT_COMMIT_PREPARED: u8 = 0x30;
/// `XACT ABORT_PREPARED`: record XID = the prepared XID, main data as for `ABORT`.
pub const INFO_XACT_ABORT_PREPARED: u8 = 0x40;

/// A transaction's status as the CLOG stores it (2 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum XidStatus {
    InProgress = 0,
    Committed = 1,
    Aborted = 2,
    SubCommitted = 3,
}

impl XidStatus {
    /// Decodes the two low bits of `bits`.
    pub fn from_bits(bits: u8) -> XidStatus {
        match bits & 0b11 {
            0 => XidStatus::InProgress,
            1 => XidStatus::Committed,
            2 => XidStatus::Aborted,
            _ => XidStatus::SubCommitted,
        }
    }
}

/// One line describing an `XACT` or `CLOG` record, for `settle waldump` (`rmgrdesc`).
/// Malformed main data is described, never a panic.
pub fn describe(rec: &DecodedRecord) -> String {
    let u32_at =
        |at: usize| rec.main_data.get(at..at + 4).and_then(|s| <[u8; 4]>::try_from(s).ok()).map(u32::from_le_bytes);
    let time = || {
        rec.main_data
            .get(..8)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map_or_else(|| "?".to_string(), |b| i64::from_le_bytes(b).to_string())
    };
    let subxacts = || match records::decode_end_record(rec) {
        Ok(e) => {
            let mut s = String::new();
            if !e.subxids.is_empty() {
                let list: Vec<String> = e.subxids.iter().map(|x| x.0.to_string()).collect();
                s = format!("; subxacts: {}", list.join(" "));
            }
            if let Some(lsn) = e.savepoint_lsn {
                s.push_str(&format!("; savepoint at {lsn}"));
            }
            s
        }
        Err(_) => " (malformed subtransaction list)".to_string(),
    };
    match (rec.rmgr, rec.info) {
        (Rmgr::Xact, INFO_XACT_COMMIT) => format!("COMMIT xid {} time_us {}{}", rec.xid, time(), subxacts()),
        (Rmgr::Xact, INFO_XACT_ABORT) => format!("ABORT xid {} time_us {}{}", rec.xid, time(), subxacts()),
        (Rmgr::Xact, INFO_XACT_COMMIT_PREPARED) => {
            format!("COMMIT_PREPARED xid {} time_us {}{}", rec.xid, time(), subxacts())
        }
        (Rmgr::Xact, INFO_XACT_ABORT_PREPARED) => {
            format!("ABORT_PREPARED xid {} time_us {}{}", rec.xid, time(), subxacts())
        }
        (Rmgr::Xact, INFO_XACT_PREPARE) => match twophase::TwoPhaseState::decode(&rec.main_data) {
            Ok(s) => format!("PREPARE {}", twophase::describe(&s)),
            Err(e) => format!("PREPARE (malformed: {e})"),
        },
        (Rmgr::Clog, clog::INFO_ZEROPAGE) => match u32_at(0) {
            Some(page) => format!("ZEROPAGE page {page}"),
            None => "ZEROPAGE (malformed)".to_string(),
        },
        (Rmgr::Clog, clog::INFO_TRUNCATE) => match (u32_at(0), u32_at(4)) {
            (Some(page), Some(oldest)) => format!("TRUNCATE page {page} oldest xid {oldest}"),
            _ => "TRUNCATE (malformed)".to_string(),
        },
        (rmgr, info) => format!("{} unknown info {info:#04x}", rmgr.name()),
    }
}

/// What the transaction layer needs from the WAL: append a record, flush up to a position.
/// [`Wal`] implements it; tests use a recording fake.
pub trait XactLog: Send + Sync {
    /// Appends `rec`; returns its end LSN.
    fn log(&self, rec: &RecordBuilder<'_>) -> Result<Lsn>;
    /// Makes WAL durable up to `upto`.
    fn flush(&self, upto: Lsn) -> Result<()>;
    /// Whether `wal_level = logical` (a subtransaction's abort record then names its
    /// top-level transaction).
    fn logical(&self) -> bool {
        false
    }
}

impl XactLog for Wal {
    fn log(&self, rec: &RecordBuilder<'_>) -> Result<Lsn> {
        self.insert(rec)
    }

    fn flush(&self, upto: Lsn) -> Result<()> {
        Wal::flush(self, upto)
    }

    fn logical(&self) -> bool {
        Wal::logical(self)
    }
}

// Shared between threads by the database and its sessions.
const _: () = {
    const fn is_send_sync<T: Send + Sync>() {}
    is_send_sync::<TransactionManager>();
};

#[cfg(test)]
pub(crate) mod test_log {
    //! A recording stand-in for the WAL.

    use parking_lot::Mutex;

    use super::XactLog;
    use crate::error::Result;
    use crate::types::{Lsn, Xid};
    use crate::wal::{DecodedRecord, RecordBuilder, Rmgr};

    /// One record as logged.
    #[derive(Clone, Debug)]
    pub struct Logged {
        pub rmgr: Rmgr,
        pub info: u8,
        pub xid: Xid,
        pub main_data: Vec<u8>,
        pub lsn: Lsn,
        pub end: Lsn,
    }

    #[derive(Default)]
    pub struct RecordingLog {
        records: Mutex<Vec<Logged>>,
        flushed: Mutex<Lsn>,
    }

    impl RecordingLog {
        pub fn records(&self) -> Vec<Logged> {
            self.records.lock().clone()
        }

        pub fn flushed(&self) -> Lsn {
            *self.flushed.lock()
        }

        /// The records as the WAL reader would return them, for redo tests.
        pub fn decoded(&self) -> Vec<DecodedRecord> {
            self.records()
                .into_iter()
                .map(|r| DecodedRecord { lsn: r.lsn, end_lsn: r.end, ..decoded(r.rmgr, r.info, r.xid, r.main_data) })
                .collect()
        }
    }

    impl XactLog for RecordingLog {
        fn log(&self, rec: &RecordBuilder<'_>) -> Result<Lsn> {
            let mut records = self.records.lock();
            let lsn = records.last().map_or(Lsn(0x100), |r| r.end);
            let end = Lsn(lsn.0 + 24 + rec.main_data.len() as u64);
            records.push(Logged {
                rmgr: rec.rmgr,
                info: rec.info,
                xid: rec.xid,
                main_data: rec.main_data.clone(),
                lsn,
                end,
            });
            Ok(end)
        }

        fn flush(&self, upto: Lsn) -> Result<()> {
            let mut f = self.flushed.lock();
            *f = (*f).max(upto);
            Ok(())
        }
    }

    pub fn decoded(rmgr: Rmgr, info: u8, xid: Xid, main_data: Vec<u8>) -> DecodedRecord {
        DecodedRecord {
            toplevel_xid: Xid::INVALID,
            lsn: Lsn(0x100),
            end_lsn: Lsn(0x200),
            prev: Lsn::INVALID,
            xid,
            rmgr,
            info,
            blocks: Vec::new(),
            main_data,
        }
    }
}
