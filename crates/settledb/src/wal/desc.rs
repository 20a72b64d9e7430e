//! The human rendering of a WAL record, as `settle waldump` prints it (modelled on
//! PostgreSQL's `pg_waldump` output and the `rmgrdesc` split: this file renders the framing,
//! each resource manager supplies the text after `desc:`).
//!
//! ```text
//! rmgr: Heap        len (rec/tot):     59/      59, tx:        735, lsn: 0/0150B2F8, prev 0/0150B2C0, desc: INSERT off: 3, blkref #0: rel 16384 fork main blk 0
//! ```
//!
//! `rec` is the record length without its full-page images, `tot` the length with them; a
//! block reference carrying an image ends in `FPW`, and one that also kept its data
//! (`wal_level = logical`) in `FPW+data`. A subtransaction's record that names its top-level
//! transaction shows it after the XID: `tx: 740 (top 735)`.

use std::fmt::Write as _;

use crate::types::{Fork, Lsn};

use super::record::stored_image_len;
use super::DecodedRecord;

/// An LSN as `pg_waldump` prints it: `X/XXXXXXXX` (low half zero-padded to 8 digits).
pub fn lsn_padded(lsn: Lsn) -> String {
    format!("{:X}/{:08X}", lsn.0 >> 32, lsn.0 as u32)
}

/// The fork's name as PostgreSQL spells it.
pub fn fork_name(fork: Fork) -> &'static str {
    match fork {
        Fork::Main => "main",
        Fork::Fsm => "fsm",
        Fork::Vm => "vm",
    }
}

/// One line describing `rec`; `rmgr_desc` renders the resource-manager-specific part.
pub fn describe(rec: &DecodedRecord, rmgr_desc: &dyn Fn(&DecodedRecord) -> String) -> String {
    let tot = rec.end_lsn.0.saturating_sub(rec.lsn.0);
    let fpi: u64 = rec.blocks.iter().filter_map(|b| b.image.as_deref()).map(|img| stored_image_len(img) as u64).sum();
    let tx = if rec.toplevel_xid.is_valid() {
        format!("{:>10} (top {})", rec.xid.0, rec.toplevel_xid.0)
    } else {
        format!("{:>10}", rec.xid.0)
    };
    let mut s = format!(
        "rmgr: {:<11} len (rec/tot): {:>6}/{:>8}, tx: {tx}, lsn: {}, prev {}, desc: {}",
        rec.rmgr.name(),
        tot.saturating_sub(fpi),
        tot,
        lsn_padded(rec.lsn),
        lsn_padded(rec.prev),
        rmgr_desc(rec)
    );
    for b in &rec.blocks {
        let _ = write!(s, ", blkref #{}: rel {} fork {} blk {}", b.id, b.tag.rel, fork_name(b.tag.fork), b.tag.block);
        match (b.image.is_some(), b.data.is_empty()) {
            (true, false) => s.push_str(" FPW+data"),
            (true, true) => s.push_str(" FPW"),
            _ => {}
        }
    }
    s
}
