//! B-tree WAL records and their redo (PostgreSQL's `nbtxlog.h`, our own layout).
//!
//! | info | record      | blocks                                   | block data                        |
//! |------|-------------|------------------------------------------|-----------------------------------|
//! | 0x00 | INSERT_LEAF | the leaf (full-page image when needed)   | offset u16, index tuple           |
//! | 0x10 | SPLIT       | every page an insert changed, will_init  | page image                        |
//! | 0x20 | NEWROOT     | as SPLIT, including new root and meta    | page image                        |
//! | 0x30 | NEWPAGES    | metapage creation, bulk-build pages      | page image                        |
//! | 0x40 | VACUUM      | the leaf (full-page image when needed)   | count u16, offsets u16 × count    |
//! | 0x50 | DELETE_PAGE | left sibling, page, right sibling, parent| page image                        |
//! | 0x60 | DELETE      | the leaf (full-page image when needed)   | count u16, offsets u16 × count    |
//!
//! DELETE is simple deletion (PostgreSQL's `XLOG_BTREE_DELETE`): an insert that found its leaf
//! full removed the leaf's LP_DEAD entries before trying again. Its redo is VACUUM's, except
//! that VACUUM also clears the page's vacuum cycle ID (the bulk delete has now processed the
//! page; see [`super::cycle`]) and simple deletion leaves it. The LP_DEAD hints themselves are
//! never logged; redo removes the logged offsets whether or not the page it starts from carries
//! the hints.
//!
//! The cycle ID and the SPLIT_END flag a split sets travel in the SPLIT and NEWROOT page images,
//! so redo restores them as they were (PostgreSQL's split record does not carry the cycle ID and
//! its redo zeroes it, since no VACUUM survives a crash; restoring it is harmless for the same
//! reason, and keeps redo byte-exact).
//!
//! A page image in block data is `pd_lower u16, hole length u16`, then the page without the
//! hole between `pd_lower` and `pd_upper`. The deltas are applied by the same functions that
//! made the change ([`super::page::insert_item`], [`apply_vacuum`]), so redo produces the same
//! bytes as the original operation.

use crate::error::{Error, Result};
use crate::types::{BlockNumber, OffsetNumber};
use crate::wal::Cursor;
use crate::wal::DecodedRecord;

use super::page as bp;

pub const XLOG_BTREE_INSERT_LEAF: u8 = 0x00;
pub const XLOG_BTREE_SPLIT: u8 = 0x10;
pub const XLOG_BTREE_NEWROOT: u8 = 0x20;
pub const XLOG_BTREE_NEWPAGES: u8 = 0x30;
pub const XLOG_BTREE_VACUUM: u8 = 0x40;
pub const XLOG_BTREE_DELETE_PAGE: u8 = 0x50;
pub const XLOG_BTREE_DELETE: u8 = 0x60;

pub use crate::wal::newpage::{image_data, restore_image};

/// Removes the items at `offsets` (ascending) from a leaf, compacting the rest in order (VACUUM
/// and simple deletion, and their redo); `info` VACUUM also clears the page's vacuum cycle ID.
/// False, with the page unchanged, when the offsets do not apply.
pub fn apply_vacuum(page: &mut [u8], info: u8, offsets: &[u16]) -> bool {
    let n = bp::max_offset(page);
    if offsets.iter().any(|&o| o == 0 || o > n) || offsets.windows(2).any(|w| w[0] >= w[1]) {
        return false;
    }
    if !bp::delete_items(page, offsets) {
        return false;
    }
    if info == XLOG_BTREE_VACUUM {
        bp::set_cycle_id(page, 0);
    }
    true
}

/// The block data of a VACUUM or DELETE record, written into `v` (cleared first).
pub fn vacuum_data(offsets: &[u16], v: &mut Vec<u8>) {
    v.clear();
    v.reserve(2 + 2 * offsets.len());
    v.extend_from_slice(&(offsets.len() as u16).to_le_bytes());
    for o in offsets {
        v.extend_from_slice(&o.to_le_bytes());
    }
}

/// Applies one block of a B-tree record to `page` (the generic redo driver has already
/// restored full-page images and skipped pages whose LSN covers the record).
pub fn redo_block(rec: &DecodedRecord, block_id: u8, block: BlockNumber, data: &[u8], page: &mut [u8]) -> Result<()> {
    let rel = rec.blocks.iter().find(|b| b.id == block_id).map_or(crate::types::Oid(0), |b| b.tag.rel);
    match rec.info {
        XLOG_BTREE_SPLIT | XLOG_BTREE_NEWROOT | XLOG_BTREE_NEWPAGES | XLOG_BTREE_DELETE_PAGE => {
            restore_image(rec, data, page)
        }
        XLOG_BTREE_INSERT_LEAF => {
            bp::validate(page, rel, block)?;
            let mut c = Cursor::new(data, rec.lsn);
            let off = OffsetNumber(c.u16()?);
            let tup = c.rest();
            if tup.len() < bp::TUPLE_HEADER_SIZE || !bp::insert_item(page, off, tup) {
                return Err(Error::corrupt_wal(
                    rec.lsn,
                    format!("B-tree insert at {off} does not apply to block {block}"),
                ));
            }
            Ok(())
        }
        XLOG_BTREE_VACUUM | XLOG_BTREE_DELETE => {
            bp::validate(page, rel, block)?;
            let mut c = Cursor::new(data, rec.lsn);
            let n = c.u16()?;
            let offsets = (0..n).map(|_| c.u16()).collect::<Result<Vec<u16>>>()?;
            if !apply_vacuum(page, rec.info, &offsets) {
                return Err(Error::corrupt_wal(rec.lsn, format!("B-tree vacuum does not apply to block {block}")));
            }
            Ok(())
        }
        other => Err(Error::corrupt_wal(rec.lsn, format!("unknown B-tree record info 0x{other:02X}"))),
    }
}

fn name(info: u8) -> &'static str {
    match info {
        XLOG_BTREE_INSERT_LEAF => "INSERT_LEAF",
        XLOG_BTREE_SPLIT => "SPLIT",
        XLOG_BTREE_NEWROOT => "NEWROOT",
        XLOG_BTREE_NEWPAGES => "NEWPAGES",
        XLOG_BTREE_VACUUM => "VACUUM",
        XLOG_BTREE_DELETE_PAGE => "DELETE_PAGE",
        XLOG_BTREE_DELETE => "DELETE",
        _ => "UNKNOWN",
    }
}

/// One line for `settle waldump`.
pub fn describe(rec: &DecodedRecord) -> String {
    let blocks: Vec<String> = rec.blocks.iter().map(|b| b.tag.block.0.to_string()).collect();
    let detail = match rec.info {
        XLOG_BTREE_INSERT_LEAF => rec
            .blocks
            .first()
            .filter(|b| b.data.len() >= 2)
            .map(|b| format!("off {}", u16::from_le_bytes([b.data[0], b.data[1]])))
            .unwrap_or_else(|| "image".into()),
        XLOG_BTREE_VACUUM | XLOG_BTREE_DELETE => rec
            .blocks
            .first()
            .filter(|b| b.data.len() >= 2)
            .map(|b| format!("ndeleted {}", u16::from_le_bytes([b.data[0], b.data[1]])))
            .unwrap_or_else(|| "image".into()),
        _ => format!("{} pages", rec.blocks.len()),
    };
    format!("{} {detail}; blocks {}", name(rec.info), blocks.join(","))
}
