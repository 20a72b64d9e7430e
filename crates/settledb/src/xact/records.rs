//! The main data of the transaction records: `XACT COMMIT` / `ABORT` and their PREPARED
//! forms (the PREPARE record carries a [`super::twophase::TwoPhaseState`]).
//!
//! ```text
//!   time_us i64                      commit / abort time, µs since the Unix epoch
//!   [nsubxacts u32, subxid u32 * n]  only when the transaction has subtransactions to list
//! ```
//!
//! A record without subtransactions is the 8-byte form older WAL holds too. Each listed XID
//! must follow the record's XID (a child is assigned after its parent), which redo checks.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::types::Xid;
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

/// A decoded commit or abort record's main data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndRecord {
    pub time_us: i64,
    pub subxids: Vec<Xid>,
}

/// Decodes `end_record`'s main data; an error naming the record's LSN when malformed.
pub fn decode_end_record(rec: &DecodedRecord) -> Result<EndRecord> {
    let d = &rec.main_data;
    let bad = |what: &str| Error::corrupt_wal(rec.lsn, format!("XACT record: {what}"));
    let time = d.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()).ok_or_else(|| bad("too short for its time"))?;
    let time_us = i64::from_le_bytes(time);
    if d.len() == 8 {
        return Ok(EndRecord { time_us, subxids: Vec::new() });
    }
    let n = d.get(8..12).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(u32::from_le_bytes);
    let n = n.ok_or_else(|| bad("truncated subtransaction count"))? as usize;
    if n == 0 || Some(d.len()) != n.checked_mul(4).and_then(|b| b.checked_add(12)) {
        return Err(bad(&format!("{} bytes do not hold {n} subtransaction XIDs", d.len())));
    }
    let mut subxids = Vec::with_capacity(n);
    for c in d[12..].chunks_exact(4) {
        let x = Xid(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        if !x.is_normal() || !rec.xid.precedes(x) {
            return Err(bad(&format!("subtransaction XID {x} is not after XID {}", rec.xid)));
        }
        subxids.push(x);
    }
    Ok(EndRecord { time_us, subxids })
}

/// Microseconds since the Unix epoch (the commit timestamp).
pub(crate) fn now_micros() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
