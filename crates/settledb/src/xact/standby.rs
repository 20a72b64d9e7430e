//! The running-transactions record (PostgreSQL's `XLOG_RUNNING_XACTS`, `standby.c`): a list of
//! the transactions in progress at one point of the WAL. A logical decoder starting at some
//! position cannot know which transactions began before it; it waits for one of these records
//! and for every transaction it lists to finish before it trusts its picture of the catalog
//! (the "consistent point" of `snapbuild.c`).
//!
//! ```text
//!   next_xid u32, oldest_running u32, nxids u32, nsubxids u32, overflowed u8,
//!   xids u32 * nxids (top-level, prepared ones included), subxids u32 * nsubxids
//! ```
//!
//! Logged at every checkpoint (after its redo pointer is chosen, as PostgreSQL does) and when
//! a logical slot is created. The list is taken under the proc-array lock, but a transaction
//! may commit between that and the record's insertion; a decoder must allow for a listed
//! transaction whose commit precedes the record, as `snapbuild.c` does.

use crate::error::{Error, Result};
use crate::types::{Lsn, Xid};
use crate::wal::{DecodedRecord, RecordBuilder, Rmgr};

use super::{TransactionManager, XactLog};

/// `Standby` info of the running-transactions record (PostgreSQL's value).
pub const XLOG_RUNNING_XACTS: u8 = 0x10;

/// The transactions in progress at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunningXacts {
    pub next_xid: Xid,
    /// The oldest XID still running, or `next_xid` when none is.
    pub oldest_running: Xid,
    /// Running top-level transactions, prepared ones included, ascending.
    pub xids: Vec<Xid>,
    /// Their running subtransactions (all known ones; see `overflowed`).
    pub subxids: Vec<Xid>,
    /// Some transaction had more subtransactions than a snapshot caches: `subxids` is still
    /// complete here, the flag only says a snapshot would have overflowed.
    pub overflowed: bool,
}

impl RunningXacts {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(17 + 4 * (self.xids.len() + self.subxids.len()));
        v.extend_from_slice(&self.next_xid.0.to_le_bytes());
        v.extend_from_slice(&self.oldest_running.0.to_le_bytes());
        v.extend_from_slice(&(self.xids.len() as u32).to_le_bytes());
        v.extend_from_slice(&(self.subxids.len() as u32).to_le_bytes());
        v.push(u8::from(self.overflowed));
        for x in self.xids.iter().chain(&self.subxids) {
            v.extend_from_slice(&x.0.to_le_bytes());
        }
        v
    }

    /// Decodes a record's main data; an error naming `lsn` when malformed.
    pub fn decode(d: &[u8], lsn: Lsn) -> Result<RunningXacts> {
        let bad = |what: String| Error::corrupt_wal(lsn, format!("RUNNING_XACTS record: {what}"));
        let u32_at = |at: usize| d.get(at..at + 4).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(u32::from_le_bytes);
        let (Some(next), Some(oldest), Some(n), Some(ns), Some(&ov)) =
            (u32_at(0), u32_at(4), u32_at(8), u32_at(12), d.get(16))
        else {
            return Err(bad(format!("{} bytes are too short for its header", d.len())));
        };
        let (n, ns) = (n as usize, ns as usize);
        if Some(d.len()) != n.checked_add(ns).and_then(|c| c.checked_mul(4)).and_then(|b| b.checked_add(17)) {
            return Err(bad(format!("{} bytes do not hold {n} XIDs and {ns} subtransaction XIDs", d.len())));
        }
        if ov > 1 {
            return Err(bad(format!("invalid overflow flag {ov}")));
        }
        let xid_at = |i: usize| Xid(u32_at(17 + 4 * i).unwrap_or(0));
        Ok(RunningXacts {
            next_xid: Xid(next),
            oldest_running: Xid(oldest),
            xids: (0..n).map(xid_at).collect(),
            subxids: (n..n + ns).map(xid_at).collect(),
            overflowed: ov == 1,
        })
    }

    pub fn describe(&self) -> String {
        let list = |xs: &[Xid]| xs.iter().map(|x| x.0.to_string()).collect::<Vec<_>>().join(" ");
        let mut s = format!(
            "RUNNING_XACTS nextXid {} oldestRunningXid {}; {} xacts: {}",
            self.next_xid,
            self.oldest_running,
            self.xids.len(),
            list(&self.xids)
        );
        if !self.subxids.is_empty() {
            s.push_str(&format!("; {} subxacts: {}", self.subxids.len(), list(&self.subxids)));
        }
        if self.overflowed {
            s.push_str("; subxid overflowed");
        }
        s
    }
}

impl TransactionManager {
    /// The transactions in progress now (`GetRunningTransactionData`).
    pub fn running_xacts(&self) -> RunningXacts {
        running_xacts_of(&self.procs.lock())
    }

    /// Logs the running transactions (`LogStandbySnapshot`); returns the record's end.
    ///
    /// The proc-array lock is held until the record is inserted, as PostgreSQL does under
    /// `wal_level = logical`: no transaction can be assigned an XID (and so write a record)
    /// between the list and the record, so every transaction with a record before it is
    /// either listed or finished before the list was taken. A replication slot relies on this
    /// to move its `restart_lsn` to such a record. (Lock order: proc array, then WAL insert,
    /// as XID assignment already does.)
    pub fn log_running_xacts(&self, log: &dyn XactLog) -> Result<Lsn> {
        self.log_running_xacts_listing(log).map(|(end, _)| end)
    }

    /// [`Self::log_running_xacts`], also returning what the record lists.
    pub fn log_running_xacts_listing(&self, log: &dyn XactLog) -> Result<(Lsn, RunningXacts)> {
        let procs = self.procs.lock();
        let r = running_xacts_of(&procs);
        let end = log.log(&RecordBuilder {
            toplevel_xid: Xid::INVALID,
            rmgr: Rmgr::Standby,
            info: XLOG_RUNNING_XACTS,
            xid: Xid::INVALID,
            blocks: vec![],
            main_data: r.encode(),
        })?;
        Ok((end, r))
    }
}

fn running_xacts_of(procs: &super::procarray::ProcArray) -> RunningXacts {
    let mut xids: Vec<Xid> = procs.running.keys().chain(procs.prepared.keys()).map(|x| x.xid()).collect();
    xids.sort_by_key(|x| procs.next.widen(*x));
    let mut subxids: Vec<Xid> = procs.subs.keys().map(|x| x.xid()).collect();
    subxids.sort_by_key(|x| procs.next.widen(*x));
    let overflowed = procs.running.values().any(|r| r.subxids.len() > super::MAX_CACHED_SUBXIDS);
    RunningXacts { next_xid: procs.next.xid(), oldest_running: procs.oldest_running().xid(), xids, subxids, overflowed }
}

/// `settle waldump`'s text for a `Standby` record.
pub fn describe(rec: &DecodedRecord) -> String {
    match rec.info {
        XLOG_RUNNING_XACTS => match RunningXacts::decode(&rec.main_data, rec.lsn) {
            Ok(r) => r.describe(),
            Err(e) => format!("RUNNING_XACTS (malformed: {e})"),
        },
        i => format!("Standby unknown info {i:#04x}"),
    }
}
