//! The main data of the transaction records: `XACT COMMIT` / `ABORT` and their PREPARED
//! forms (the PREPARE record carries a [`super::twophase::TwoPhaseState`]).
//!
//! ```text
//!   time_us i64                      commit / abort time, µs since the Unix epoch
//!   [nsubxacts u32, subxid u32 * n]  only when there are subtransactions to list or an LSN
//!                                    follows (bit 31 of the count: then n may be 0)
//!   [savepoint LSN u64]              ROLLBACK TO under wal_level = logical: where the
//!                                    rolled-back level began (see below)
//! ```
//!
//! A record without subtransactions is the 8-byte form older WAL holds too. Each listed XID
//! must follow the record's XID (a child is assigned after its parent), which redo checks.
//!
//! The savepoint LSN is the WAL insert position when the savepoint was set (or reopened by an
//! earlier ROLLBACK TO): every record of the transaction from there on belongs to the level
//! rolled back or to one inside it, and none before does. A logical decoder cuts the
//! transaction's queued changes there, keeping nothing per subtransaction (PostgreSQL keeps
//! a change list per subtransaction instead).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::types::{Lsn, Xid};
use crate::wal::{DecodedRecord, RecordBuilder, Rmgr};

/// `XACT COMMIT` / `XACT ABORT` (and their PREPARED forms): main data = time (µs, i64 LE),
/// then, when there are subtransactions, their count (u32 LE) and XIDs (u32 LE each).
pub(crate) fn end_record(info: u8, xid: Xid, subxids: &[Xid]) -> RecordBuilder<'static> {
    let mut main = now_micros().to_le_bytes().to_vec();
    if !subxids.is_empty() {
        main.extend_from_slice(&(subxids.len() as u32).to_le_bytes());
        for s in subxids {
            main.extend_from_slice(&s.0.to_le_bytes());
        }
    }
    RecordBuilder {
        toplevel_xid: crate::types::Xid::INVALID,
        rmgr: Rmgr::Xact,
        info,
        xid,
        blocks: Vec::new(),
        main_data: main,
    }
}

/// Bit 31 of the subtransaction count: a savepoint LSN follows the XIDs.
const HAS_SAVEPOINT_LSN: u32 = 1 << 31;

/// Adds the savepoint LSN to a ROLLBACK TO's abort record built by [`end_record`].
pub(crate) fn with_savepoint_lsn(mut rec: RecordBuilder<'static>, lsn: Lsn) -> RecordBuilder<'static> {
    let main = &mut rec.main_data;
    if main.len() == 8 {
        main.extend_from_slice(&HAS_SAVEPOINT_LSN.to_le_bytes());
    } else {
        let n = u32::from_le_bytes(main[8..12].try_into().expect("a count")) | HAS_SAVEPOINT_LSN;
        main[8..12].copy_from_slice(&n.to_le_bytes());
    }
    main.extend_from_slice(&lsn.0.to_le_bytes());
    rec
}

/// A decoded commit or abort record's main data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndRecord {
    pub time_us: i64,
    pub subxids: Vec<Xid>,
    /// A ROLLBACK TO's savepoint LSN (logged under `wal_level = logical`).
    pub savepoint_lsn: Option<Lsn>,
}

/// Decodes `end_record`'s main data; an error naming the record's LSN when malformed.
pub fn decode_end_record(rec: &DecodedRecord) -> Result<EndRecord> {
    let d = &rec.main_data;
    let bad = |what: &str| Error::corrupt_wal(rec.lsn, format!("XACT record: {what}"));
    let time = d.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()).ok_or_else(|| bad("too short for its time"))?;
    let time_us = i64::from_le_bytes(time);
    if d.len() == 8 {
        return Ok(EndRecord { time_us, subxids: Vec::new(), savepoint_lsn: None });
    }
    let n = d.get(8..12).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(u32::from_le_bytes);
    let n = n.ok_or_else(|| bad("truncated subtransaction count"))?;
    let has_lsn = n & HAS_SAVEPOINT_LSN != 0;
    let n = (n & !HAS_SAVEPOINT_LSN) as usize;
    let tail = if has_lsn { 8 } else { 0 };
    if (n == 0 && !has_lsn) || Some(d.len()) != n.checked_mul(4).and_then(|b| b.checked_add(12 + tail)) {
        return Err(bad(&format!("{} bytes do not hold {n} subtransaction XIDs", d.len())));
    }
    let savepoint_lsn =
        has_lsn.then(|| Lsn(u64::from_le_bytes(d[d.len() - 8..].try_into().expect("8 bytes checked above"))));
    let mut subxids = Vec::with_capacity(n);
    for c in d[12..12 + 4 * n].chunks_exact(4) {
        let x = Xid(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        if !x.is_normal() || !rec.xid.precedes(x) {
            return Err(bad(&format!("subtransaction XID {x} is not after XID {}", rec.xid)));
        }
        subxids.push(x);
    }
    Ok(EndRecord { time_us, subxids, savepoint_lsn })
}

/// Microseconds since the Unix epoch (the commit timestamp).
pub(crate) fn now_micros() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
