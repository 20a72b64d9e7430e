//! Records that carry a whole page built from nothing (PostgreSQL's `log_newpage`): the
//! B-tree's bulk-built pages (`XLOG_BTREE_NEWPAGES`) and the pages of a table rewritten by
//! VACUUM FULL (`XLOG FPI`, [`log_new_page`]).
//!
//! Such a page is logged as block data, not as a full-page image: the block reference is
//! `will_init`, and its data is the page without the unused hole between `pd_lower` and
//! `pd_upper`, behind two `u16`s giving where the hole starts and how long it is. So the
//! image is in the record whatever `full_page_writes` says, and redo ([`restore_image`])
//! writes the page back byte for byte.

use super::{BlockRef, Cursor, DecodedRecord, RecordBuilder, Rmgr, Wal};
use crate::error::{Error, Result};
use crate::page::{self, BLCKSZ};
use crate::types::{BufferTag, Lsn, Xid};

/// `XLOG FPI`: one page image and nothing else (PostgreSQL's `XLOG_FPI`).
pub const XLOG_FPI: u8 = 0xB0;

/// The block data of a `will_init` page image: hole start, hole length, the page without it.
/// A page whose `pd_lower`/`pd_upper` do not describe a hole is stored whole.
pub fn image_data(page: &[u8]) -> Vec<u8> {
    let (lower, upper) = (page::lower(page) as usize, page::upper(page) as usize);
    let (lower, upper) = if lower <= upper && upper <= BLCKSZ { (lower, upper) } else { (BLCKSZ, BLCKSZ) };
    let mut v = Vec::with_capacity(4 + BLCKSZ - (upper - lower));
    v.extend_from_slice(&(lower as u16).to_le_bytes());
    v.extend_from_slice(&((upper - lower) as u16).to_le_bytes());
    v.extend_from_slice(&page[..lower]);
    v.extend_from_slice(&page[upper..]);
    v
}

/// Writes the page [`image_data`] made back into `page` (redo).
pub fn restore_image(rec: &DecodedRecord, data: &[u8], page: &mut [u8]) -> Result<()> {
    let mut c = Cursor::new(data, rec.lsn);
    let lower = c.u16()? as usize;
    let hole = c.u16()? as usize;
    let rest = c.rest();
    if lower + hole > BLCKSZ || rest.len() + hole != BLCKSZ || page.len() != BLCKSZ {
        return Err(Error::corrupt_wal(rec.lsn, "page image has the wrong length"));
    }
    page[..lower].copy_from_slice(&rest[..lower]);
    page[lower..lower + hole].fill(0);
    page[lower + hole..].copy_from_slice(&rest[lower..]);
    Ok(())
}

/// Logs `page`, the new contents of block `tag`, as an `XLOG FPI` record; the record's end
/// LSN, which the caller stamps on the page before it marks the buffer dirty.
pub fn log_new_page(wal: &Wal, tag: BufferTag, page: &[u8]) -> Result<Lsn> {
    wal.insert(&RecordBuilder {
        toplevel_xid: Xid::INVALID,
        rmgr: Rmgr::Xlog,
        info: XLOG_FPI,
        xid: Xid::INVALID,
        blocks: vec![BlockRef { id: 0, tag, will_init: true, page: None, data: image_data(page), keep_data: false }],
        main_data: vec![],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{BlockNumber, Fork, Oid};

    fn record(data: Vec<u8>) -> DecodedRecord {
        DecodedRecord {
            lsn: Lsn(1 << 24),
            end_lsn: Lsn((1 << 24) + 100),
            prev: Lsn(0),
            xid: Xid::INVALID,
            toplevel_xid: Xid::INVALID,
            rmgr: Rmgr::Xlog,
            info: XLOG_FPI,
            blocks: vec![super::super::DecodedBlock {
                id: 0,
                tag: BufferTag { rel: Oid(16384), fork: Fork::Main, block: BlockNumber(3) },
                will_init: true,
                image: None,
                data,
            }],
            main_data: vec![],
        }
    }

    #[test]
    fn an_image_comes_back_byte_for_byte() {
        let mut p = vec![0u8; BLCKSZ];
        page::init(&mut p, 0);
        assert!(page::add_item(&mut p, &[7u8; 100], None, true).is_some());
        p[BLCKSZ - 1] = 0x5A;
        let data = image_data(&p);
        assert!(data.len() < BLCKSZ / 2, "the hole is left out: {} bytes", data.len());
        let rec = record(data.clone());
        let mut back = vec![0xFFu8; BLCKSZ];
        restore_image(&rec, &data, &mut back).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn a_short_image_is_an_error() {
        let mut p = vec![0u8; BLCKSZ];
        page::init(&mut p, 0);
        let mut data = image_data(&p);
        data.pop();
        let rec = record(data.clone());
        let err = restore_image(&rec, &data, &mut vec![0u8; BLCKSZ]).unwrap_err();
        assert!(err.to_string().contains("wrong length"), "{err}");
    }
}
