//! The TRUNCATE record (PostgreSQL's `XLOG_HEAP_TRUNCATE`, `heapam_xlog.h`): which tables one
//! TRUNCATE statement emptied, and how (CASCADE, RESTART IDENTITY), for logical decoding.
//!
//! TRUNCATE itself (`db::truncate`) gives each table and its indexes new storage: the new
//! files are created by STORAGE CREATE records, the index metapages by B-tree NEWPAGES
//! records, the `pg_class` rows are new MVCC versions written by the truncating transaction,
//! and the old files go at commit (or, after a crash, as orphans at the next startup). So this
//! record changes no page and its redo does nothing, as in PostgreSQL; it is written only
//! under `wal_level = logical`, after the catalog rows, so a decoder meets it in its place among
//! the transaction's changes.
//!
//! Main data, little-endian:
//!
//! ```text
//!   flags u8 (TRUNCATE_CASCADE 0x01, TRUNCATE_RESTART_SEQS 0x02) | nrelids u32 | relid u32 × nrelids
//! ```
//!
//! The relation OIDs are the tables' OIDs (not their file nodes, which the statement changed).

use crate::error::{Error, Result};
use crate::types::{Lsn, Oid};
use crate::wal::Cursor;

/// Heap rmgr info of the TRUNCATE record (PostgreSQL's value).
pub const XLOG_HEAP_TRUNCATE: u8 = 0x30;
/// `TRUNCATE ... CASCADE` (`XLH_TRUNCATE_CASCADE`).
pub const TRUNCATE_CASCADE: u8 = 0x01;
/// `TRUNCATE ... RESTART IDENTITY` (`XLH_TRUNCATE_RESTART_SEQS`).
pub const TRUNCATE_RESTART_SEQS: u8 = 0x02;

/// A decoded TRUNCATE record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruncateRecord {
    pub flags: u8,
    pub rels: Vec<Oid>,
}

impl TruncateRecord {
    pub fn cascade(&self) -> bool {
        self.flags & TRUNCATE_CASCADE != 0
    }

    pub fn restart_seqs(&self) -> bool {
        self.flags & TRUNCATE_RESTART_SEQS != 0
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(5 + 4 * self.rels.len());
        out.push(self.flags);
        out.extend_from_slice(&(self.rels.len() as u32).to_le_bytes());
        for r in &self.rels {
            out.extend_from_slice(&r.0.to_le_bytes());
        }
        out
    }

    /// Decodes main data; bytes left over or a count beyond the data are a WAL error.
    pub fn decode(data: &[u8], lsn: Lsn) -> Result<TruncateRecord> {
        let mut c = Cursor::new(data, lsn);
        let flags = c.u8()?;
        if flags & !(TRUNCATE_CASCADE | TRUNCATE_RESTART_SEQS) != 0 {
            return Err(Error::corrupt_wal(lsn, format!("TRUNCATE record has unknown flags 0x{flags:02X}")));
        }
        let n = c.u32()? as usize;
        if n == 0 || n > data.len() / 4 {
            return Err(Error::corrupt_wal(lsn, format!("TRUNCATE record names {n} relations")));
        }
        let mut rels = Vec::with_capacity(n);
        for _ in 0..n {
            rels.push(Oid(c.u32()?));
        }
        if !c.rest().is_empty() {
            return Err(Error::corrupt_wal(lsn, "TRUNCATE record has trailing bytes"));
        }
        Ok(TruncateRecord { flags, rels })
    }

    /// `settle waldump`'s line (after PostgreSQL's `heap_desc`).
    pub fn describe(&self) -> String {
        let mut flags = Vec::new();
        if self.cascade() {
            flags.push("CASCADE");
        }
        if self.restart_seqs() {
            flags.push("RESTART_SEQS");
        }
        let rels: Vec<String> = self.rels.iter().map(|r| r.0.to_string()).collect();
        format!("TRUNCATE flags: [{}], nrelids: {}, relids: {}", flags.join(", "), self.rels.len(), rels.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_bad_bytes() {
        let r = TruncateRecord { flags: TRUNCATE_CASCADE | TRUNCATE_RESTART_SEQS, rels: vec![Oid(16384), Oid(16390)] };
        let bytes = r.encode();
        assert_eq!(TruncateRecord::decode(&bytes, Lsn(1)).unwrap(), r);
        assert_eq!(r.describe(), "TRUNCATE flags: [CASCADE, RESTART_SEQS], nrelids: 2, relids: 16384 16390");
        for n in 0..bytes.len() {
            assert!(TruncateRecord::decode(&bytes[..n], Lsn(1)).is_err(), "{n} bytes decoded");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(TruncateRecord::decode(&extra, Lsn(1)).is_err());
        let mut huge = bytes;
        huge[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(TruncateRecord::decode(&huge, Lsn(1)).is_err());
        assert!(TruncateRecord::decode(&[0x80, 1, 0, 0, 0, 0, 0, 0, 0], Lsn(1)).is_err());
    }
}
