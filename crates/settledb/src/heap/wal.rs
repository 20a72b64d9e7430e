//! Heap WAL records and their redo (PostgreSQL's `heapam_xlog.h` records, our own layout).
//!
//! | rmgr  | info | record        | block 0          | block 1   | main data                          |
//! |-------|------|---------------|------------------|-----------|------------------------------------|
//! | Heap  | 0x00 | INSERT        | target (+tuple)  |           | offnum, flags, old key             |
//! | Heap  | 0x10 | DELETE        | target           |           | offnum, xmax, masks, old key       |
//! | Heap  | 0x20 | UPDATE        | new page (+tuple)| old page  | old offnum, xmax, masks, new offnum|
//! | Heap  | 0x40 | HOT_UPDATE    | page (+tuple)    |           | as UPDATE                          |
//! | Heap  | 0x60 | LOCK          | target           |           | offnum, locker XID, masks          |
//! | Heap  | 0x70 | INPLACE       | target (+data)   |           | offnum                             |
//! | Heap2 | 0x10 | PRUNE         | target           |           | prune_xid, redirects, dead, unused |
//! | Heap2 | 0x20 | VACUUM        | target           | [VM page] | flags, [VM bits], unused offsets   |
//! | Heap2 | 0x30 | PRUNE_FREEZE  | target           | [VM page] | flags, [VM bits], [prune], [freeze]|
//! | Heap2 | 0x40 | VISIBLE       | VM page          | heap page | heap block, VM bits, flags         |
//! | Heap2 | 0x50 | MULTI_INSERT  | target (+tuples) |           | flags, offsets                     |
//! | Heap2 | 0x80 | VM_CLEAR      | VM page          |           | first heap block, count, VM bits   |
//!
//! VISIBLE and VM_CLEAR belong to the visibility map; their encoding, redo and description
//! live in [`crate::vm`], and the recovery driver routes them there. (PostgreSQL has no
//! VM_CLEAR: it clears VM bits as part of the heap change's own record. 0x80 is not a Heap2
//! operation code in PostgreSQL, so it cannot collide with one we adopt later.)
//!
//! A logged tuple is its header's `t_infomask2`, `t_infomask`, `t_hoff` and every byte after
//! the fixed 23-byte header (null bitmap, padding, data): redo rebuilds `t_xmin` from the
//! record's XID, `t_ctid` from the block and offset, and `t_cid` as 0. With the relation (in the
//! block reference) this is the full new tuple that logical decoding needs; DELETE and UPDATE
//! also carry the old key (empty until a table has a replica-identity key).
//!
//! Redo is per block: the recovery driver restores a full-page image when one is attached,
//! skips a block whose page LSN already covers the record, and otherwise calls
//! [`redo_block`], which applies the same page changes the original operation made through the
//! same helpers (`apply_*`), then stamps the page LSN.

use super::tuple::{
    self, HEAP_HOT_UPDATED, HEAP_ONLY_TUPLE, HEAP_TUPLE_HEADER_SIZE, HEAP_XMAX_COMMITTED, HEAP_XMAX_EXCL_LOCK,
    HEAP_XMAX_INVALID, HEAP_XMAX_KEYSHR_LOCK, HEAP_XMAX_LOCK_ONLY,
};
use crate::error::{Error, Result};
use crate::page::{self, ItemId, LpFlags};
use crate::types::{BlockNumber, OffsetNumber, Oid, Tid, Xid};
use crate::wal::{DecodedBlock, DecodedRecord, Rmgr};

pub const XLOG_HEAP_INSERT: u8 = 0x00;
pub const XLOG_HEAP_DELETE: u8 = 0x10;
pub const XLOG_HEAP_UPDATE: u8 = 0x20;
pub const XLOG_HEAP_HOT_UPDATE: u8 = 0x40;
/// A row lock (`SELECT ... FOR UPDATE/SHARE`, [`super::lock`]): PostgreSQL's `XLOG_HEAP_LOCK`.
pub const XLOG_HEAP_LOCK: u8 = 0x60;
pub const XLOG_HEAP_INPLACE: u8 = 0x70;
pub const XLOG_HEAP2_PRUNE: u8 = 0x10;
pub const XLOG_HEAP2_VACUUM: u8 = 0x20;
/// VACUUM's phase I: prune, freeze and set the visibility map of one page ([`crate::vacuum::wal`]).
pub const XLOG_HEAP2_PRUNE_FREEZE: u8 = 0x30;
pub const XLOG_HEAP2_MULTI_INSERT: u8 = 0x50;
/// The map's records, under the same resource manager ([`crate::vm`]).
pub use crate::vm::{XLOG_HEAP2_VISIBLE, XLOG_HEAP2_VM_CLEAR};
pub use crate::wal::record::FLAG_INIT_PAGE;
use crate::wal::Cursor;

/// Appends a tuple in its logged form (masks, hoff, bytes after the fixed header).
pub fn encode_tuple(out: &mut Vec<u8>, t: &[u8]) {
    let h = tuple::TupleHeader::parse(t).expect("tuples built by this process are well formed");
    out.extend_from_slice(&h.infomask2().to_le_bytes());
    out.extend_from_slice(&h.infomask().to_le_bytes());
    out.push(h.hoff());
    out.extend_from_slice(&t[HEAP_TUPLE_HEADER_SIZE..]);
}

/// Rebuilds a tuple from its logged form.
pub fn decode_tuple(c: &mut Cursor<'_>, len: Option<usize>, xmin: Xid, tid: Tid) -> Result<Vec<u8>> {
    let infomask2 = c.u16()?;
    let infomask = c.u16()?;
    let hoff = c.u8()?;
    let body = match len {
        Some(n) => c.bytes(n)?,
        None => c.rest(),
    };
    let mut t = Vec::with_capacity(HEAP_TUPLE_HEADER_SIZE + body.len());
    t.resize(HEAP_TUPLE_HEADER_SIZE, 0);
    t.extend_from_slice(body);
    t[22] = hoff;
    tuple::set_xmin(&mut t, xmin);
    tuple::set_xmax(&mut t, Xid::INVALID);
    tuple::set_cid(&mut t, 0);
    tuple::set_ctid(&mut t, tid);
    tuple::set_infomask2(&mut t, infomask2);
    tuple::set_infomask(&mut t, infomask);
    if tuple::TupleHeader::parse(&t).is_none() {
        return Err(Error::corrupt_wal(c.lsn(), format!("logged tuple for {tid} has an invalid header")));
    }
    Ok(t)
}

/// Places a tuple at `off` (the page's next or a free slot), as insert, multi-insert and the new
/// side of an update do, and their redo. A page holding a new tuple is no longer all-visible:
/// `PD_ALL_VISIBLE` is cleared (the live path cleared the visibility-map bits before, with its
/// own VM_CLEAR record). Returns false, changing nothing, when the page refuses the tuple.
pub fn apply_insert(page: &mut [u8], off: OffsetNumber, t: &[u8]) -> bool {
    if page::add_item(page, t, Some(off), true) != Some(off) {
        return false;
    }
    page::clear_flags(page, page::PD_ALL_VISIBLE);
    true
}

/// Stamps the xmax side of a delete or update on the old tuple, and clears the page's
/// `PD_ALL_VISIBLE` (live path and redo alike).
pub fn apply_xmax(page: &mut [u8], off: OffsetNumber, xmax: Xid, cid: u32, infomask: u16, infomask2: u16, ctid: Tid) {
    let t = page::item_mut(page, off);
    tuple::set_xmax(t, xmax);
    tuple::set_cid(t, cid);
    tuple::set_infomask(t, infomask);
    tuple::set_infomask2(t, infomask2);
    tuple::set_ctid(t, ctid);
    let prune = page::prune_xid(page);
    if !prune.is_valid() || xmax.precedes(prune) {
        page::set_prune_xid(page, xmax);
    }
    page::clear_flags(page, page::PD_ALL_VISIBLE);
}

/// Every infomask bit that describes xmax: a new xmax (delete, update, lock) replaces them all.
pub const XMAX_BITS: u16 =
    HEAP_XMAX_COMMITTED | HEAP_XMAX_INVALID | HEAP_XMAX_LOCK_ONLY | HEAP_XMAX_EXCL_LOCK | HEAP_XMAX_KEYSHR_LOCK;

/// Stamps a row lock: `xmax` := the locker with `infomask`/`infomask2` (which carry
/// `HEAP_XMAX_LOCK_ONLY` and the lock's strength), and `t_ctid` pointing at the tuple itself
/// (a lock is no link to a newer version). `t_cid` is left alone: it may be the cmin this
/// transaction's own insert needs. The tuple stays live, but the page is no longer all-visible
/// as far as the flag goes (the live path cleared the map with its own VM_CLEAR record, as a
/// delete does). Live path and redo alike.
pub fn apply_lock(page: &mut [u8], off: OffsetNumber, block: BlockNumber, xmax: Xid, infomask: u16, infomask2: u16) {
    let t = page::item_mut(page, off);
    tuple::set_xmax(t, xmax);
    tuple::set_infomask(t, infomask);
    tuple::set_infomask2(t, infomask2);
    tuple::set_ctid(t, Tid { block, offset: off });
    page::clear_flags(page, page::PD_ALL_VISIBLE);
}

/// Masks an old tuple gets when `xmax` deletes or updates it.
pub fn xmax_masks(old_infomask: u16, old_infomask2: u16, hot: bool) -> (u16, u16) {
    let m = old_infomask & !XMAX_BITS;
    // KEYS_UPDATED is set only by a FOR UPDATE lock, which this xmax replaces.
    let mut m2 = old_infomask2 & !(HEAP_HOT_UPDATED | tuple::HEAP_KEYS_UPDATED);
    if hot {
        m2 |= HEAP_HOT_UPDATED;
    }
    (m, m2)
}

/// What a prune (or, later, vacuum) does to a page's line pointers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PrunePlan {
    pub redirected: Vec<(OffsetNumber, OffsetNumber)>,
    pub dead: Vec<OffsetNumber>,
    pub unused: Vec<OffsetNumber>,
    pub new_prune_xid: Xid,
}

impl PrunePlan {
    pub fn is_empty(&self) -> bool {
        self.redirected.is_empty() && self.dead.is_empty() && self.unused.is_empty()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(10 + 4 * self.redirected.len() + 2 * (self.dead.len() + self.unused.len()));
        self.encode_into(&mut out);
        out
    }

    /// Appends the encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.new_prune_xid.0.to_le_bytes());
        out.extend_from_slice(&(self.redirected.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.dead.len() as u16).to_le_bytes());
        out.extend_from_slice(&(self.unused.len() as u16).to_le_bytes());
        for (a, b) in &self.redirected {
            out.extend_from_slice(&a.0.to_le_bytes());
            out.extend_from_slice(&b.0.to_le_bytes());
        }
        for o in self.dead.iter().chain(&self.unused) {
            out.extend_from_slice(&o.0.to_le_bytes());
        }
    }

    pub fn decode(c: &mut Cursor<'_>) -> Result<PrunePlan> {
        let new_prune_xid = Xid(c.u32()?);
        let (nr, nd, nu) = (c.u16()?, c.u16()?, c.u16()?);
        let mut p = PrunePlan { new_prune_xid, ..Default::default() };
        for _ in 0..nr {
            p.redirected.push((OffsetNumber(c.u16()?), OffsetNumber(c.u16()?)));
        }
        for _ in 0..nd {
            p.dead.push(OffsetNumber(c.u16()?));
        }
        for _ in 0..nu {
            p.unused.push(OffsetNumber(c.u16()?));
        }
        Ok(p)
    }

    /// Offsets named by the plan must exist on the page (checked before applying in redo).
    pub fn fits(&self, page: &[u8]) -> bool {
        let max = page::max_offset(page);
        let ok = |o: &OffsetNumber| o.0 >= 1 && o.0 <= max;
        self.redirected.iter().all(|(a, b)| ok(a) && ok(b)) && self.dead.iter().all(ok) && self.unused.iter().all(ok)
    }
}

/// Applies a prune plan: the live path and redo both call this.
pub fn apply_prune(page: &mut [u8], plan: &PrunePlan) {
    for &(from, to) in &plan.redirected {
        page::set_item_id(page, from, ItemId { off: to.0, flags: LpFlags::Redirect, len: 0 });
    }
    for &o in &plan.dead {
        page::set_item_id(page, o, ItemId { off: 0, flags: LpFlags::Dead, len: 0 });
    }
    for &o in &plan.unused {
        page::set_item_id(page, o, ItemId { off: 0, flags: LpFlags::Unused, len: 0 });
    }
    page::repair_fragmentation(page);
    page::set_prune_xid(page, plan.new_prune_xid);
    page::clear_flags(page, page::PD_PAGE_FULL);
}

fn check_off(rec: &DecodedRecord, page: &[u8], off: OffsetNumber, normal: bool) -> Result<()> {
    let max = page::max_offset(page);
    if off.0 == 0 || off.0 > max || (normal && page::item_id(page, off).flags != LpFlags::Normal) {
        return Err(Error::corrupt_wal(
            rec.lsn,
            format!("record names offset {off} but the page has {max} line pointers"),
        ));
    }
    Ok(())
}

/// Applies one block of a heap record to its page (the caller stamps the LSN).
pub fn redo_block(rec: &DecodedRecord, block_id: u8, block: BlockNumber, data: &[u8], page: &mut [u8]) -> Result<()> {
    let mut m = Cursor::new(&rec.main_data, rec.lsn);
    let mut d = Cursor::new(data, rec.lsn);
    let fail = || Error::corrupt_wal(rec.lsn, format!("could not apply {} to block {block}", describe(rec)));
    // Pruning changes a page that exists; on a new (all-zero) page the page helpers would work
    // on an insane header. (VACUUM's own records are redone by `crate::vacuum::wal`.)
    let maintenance = rec.rmgr == Rmgr::Heap2 && rec.info & 0xF0 == XLOG_HEAP2_PRUNE;
    if maintenance && block_id != 0 {
        return Err(Error::corrupt_wal(
            rec.lsn,
            format!("{} changes heap block {block} as block {block_id}", describe(rec)),
        ));
    }
    if maintenance && page::is_new(page) {
        return Err(Error::corrupt_wal(rec.lsn, format!("{} names block {block}, which is empty", describe(rec))));
    }
    match (rec.rmgr, rec.info & 0xF0) {
        (Rmgr::Heap, XLOG_HEAP_INSERT) => {
            let off = OffsetNumber(m.u16()?);
            if m.u8()? & FLAG_INIT_PAGE != 0 {
                page::init(page, 0);
            }
            let t = decode_tuple(&mut d, None, rec.xid, Tid { block, offset: off })?;
            if !apply_insert(page, off, &t) {
                return Err(fail());
            }
        }
        (Rmgr::Heap, XLOG_HEAP_DELETE) => {
            let off = OffsetNumber(m.u16()?);
            let xmax = Xid(m.u32()?);
            let (im, im2) = (m.u16()?, m.u16()?);
            check_off(rec, page, off, true)?;
            apply_xmax(page, off, xmax, 0, im, im2, Tid { block, offset: off });
        }
        (Rmgr::Heap, XLOG_HEAP_UPDATE) | (Rmgr::Heap, XLOG_HEAP_HOT_UPDATE) => {
            let old_off = OffsetNumber(m.u16()?);
            let xmax = Xid(m.u32()?);
            let (im, im2) = (m.u16()?, m.u16()?);
            let new_off = OffsetNumber(m.u16()?);
            let flags = m.u8()?;
            let new_block = rec.blocks.iter().find(|b| b.id == 0).map(|b| b.tag.block).ok_or_else(fail)?;
            let same_page = rec.blocks.iter().all(|b| b.id != 1);
            if block_id == 1 || same_page {
                check_off(rec, page, old_off, true)?;
                apply_xmax(page, old_off, xmax, 0, im, im2, Tid { block: new_block, offset: new_off });
            }
            if block_id == 0 {
                if flags & FLAG_INIT_PAGE != 0 {
                    page::init(page, 0);
                }
                let t = decode_tuple(&mut d, None, xmax, Tid { block, offset: new_off })?;
                if !apply_insert(page, new_off, &t) {
                    return Err(fail());
                }
            }
        }
        (Rmgr::Heap, XLOG_HEAP_LOCK) => {
            let off = OffsetNumber(m.u16()?);
            let xmax = Xid(m.u32()?);
            let (im, im2) = (m.u16()?, m.u16()?);
            check_off(rec, page, off, true)?;
            let sane = im & HEAP_XMAX_LOCK_ONLY != 0 && im & (HEAP_XMAX_COMMITTED | HEAP_XMAX_INVALID) == 0;
            // The tuple must be one (redo writes its header fields).
            let ok_item = tuple::TupleHeader::parse(page::item(page, off)).is_some();
            if !sane || !ok_item || !xmax.is_normal() {
                return Err(fail());
            }
            apply_lock(page, off, block, xmax, im, im2);
        }
        (Rmgr::Heap, XLOG_HEAP_INPLACE) => {
            let off = OffsetNumber(m.u16()?);
            check_off(rec, page, off, true)?;
            let item = page::item_mut(page, off);
            let hoff = usize::from(item.get(22).copied().unwrap_or(0));
            if hoff < HEAP_TUPLE_HEADER_SIZE || item.len() != hoff + data.len() {
                return Err(fail());
            }
            item[hoff..].copy_from_slice(data);
        }
        (Rmgr::Heap2, XLOG_HEAP2_PRUNE) => {
            let plan = PrunePlan::decode(&mut m)?;
            if !plan.fits(page) {
                return Err(fail());
            }
            apply_prune(page, &plan);
        }
        (Rmgr::Heap2, XLOG_HEAP2_MULTI_INSERT) => {
            let flags = m.u8()?;
            let n = m.u16()?;
            if flags & FLAG_INIT_PAGE != 0 {
                page::init(page, 0);
            }
            for _ in 0..n {
                let off = OffsetNumber(m.u16()?);
                let len = usize::from(d.u16()?);
                let t = decode_tuple(&mut d, Some(len), rec.xid, Tid { block, offset: off })?;
                if !apply_insert(page, off, &t) {
                    return Err(fail());
                }
            }
        }
        _ => return Err(Error::corrupt_wal(rec.lsn, format!("unknown heap record info 0x{:02X}", rec.info))),
    }
    Ok(())
}

/// Whether a heap-only tuple flag is set in a logged or on-page infomask2.
pub fn is_heap_only(infomask2: u16) -> bool {
    infomask2 & HEAP_ONLY_TUPLE != 0
}

/// The old row an UPDATE or DELETE record carries (`wal_level = logical`), for `describe`.
fn describe_old_row(m: &mut Cursor<'_>) -> Result<String> {
    let len = m.u16()?;
    if len == 0 {
        return Ok(String::new());
    }
    let kind = m.u8()?;
    let _ = m.bytes(usize::from(len))?;
    Ok(match kind {
        super::OLD_KEY => format!(", old key: {len} bytes"),
        super::OLD_TUPLE => format!(", old tuple: {len} bytes"),
        k => format!(", old row of unknown kind 0x{k:02X}: {len} bytes"),
    })
}

/// Decodes the old row of an UPDATE or DELETE record (what [`describe_old_row`] skips): its
/// kind ([`super::OLD_KEY`] or [`super::OLD_TUPLE`]) and the rebuilt tuple, or `None` when the
/// record carries none. `main_data` is the record's whole main data.
pub fn decode_old_row(rec: &DecodedRecord) -> Result<Option<(u8, Vec<u8>)>> {
    let Some(logged) = old_row_logged(rec)? else { return Ok(None) };
    let t = decode_tuple(&mut Cursor::new(&logged[1..], rec.lsn), None, Xid::INVALID, Tid::default())?;
    Ok(Some((logged[0], t)))
}

/// The old row or key a DELETE or UPDATE record logged, as its kind byte followed by the
/// tuple in its logged form (a slice of the record), or `None` when none was logged.
fn old_row_logged(rec: &DecodedRecord) -> Result<Option<&[u8]>> {
    let mut m = Cursor::new(&rec.main_data, rec.lsn);
    match (rec.rmgr, rec.info & 0xF0) {
        (Rmgr::Heap, XLOG_HEAP_DELETE) => {
            let _ = m.bytes(2 + 4 + 2 + 2)?;
        }
        (Rmgr::Heap, XLOG_HEAP_UPDATE | XLOG_HEAP_HOT_UPDATE) => {
            let _ = m.bytes(2 + 4 + 2 + 2 + 2 + 1)?;
        }
        _ => return Ok(None),
    }
    let len = usize::from(m.u16()?);
    if len == 0 {
        return Ok(None);
    }
    let logged = m.bytes(1 + len)?;
    let kind = logged[0];
    if kind != super::OLD_KEY && kind != super::OLD_TUPLE {
        return Err(Error::corrupt_wal(rec.lsn, format!("unknown old-row kind 0x{kind:02X}")));
    }
    if len < tuple::LOGGED_TUPLE_HEADER {
        return Err(Error::corrupt_wal(rec.lsn, format!("{}: an old row of {len} bytes", describe(rec))));
    }
    Ok(Some(logged))
}

/// An UPDATE's, HOT_UPDATE's or DELETE's rows in their logged form, borrowed from the record
/// (what [`decode_row_change`] gives as whole tuples): logical decoding's path for a user
/// table's rows, which copies and allocates nothing per row. The tuples' headers are checked
/// when they are deformed, as [`for_each_inserted_tuple`]'s are.
pub struct LoggedRowChange<'a> {
    pub rel: Oid,
    /// The old row or key after its kind byte ([`super::OLD_KEY`], [`super::OLD_TUPLE`]);
    /// empty when none was logged.
    pub old: &'a [u8],
    /// The new tuple (updates only).
    pub new: Option<&'a [u8]>,
}

/// The block a heap row record changes (its block 0).
fn block0(rec: &DecodedRecord) -> Result<&DecodedBlock> {
    rec.blocks
        .iter()
        .find(|b| b.id == 0)
        .ok_or_else(|| Error::corrupt_wal(rec.lsn, format!("{} has no block 0", describe(rec))))
}

/// [`LoggedRowChange`] of an update or delete record; `None` for any other record.
pub fn logged_row_change(rec: &DecodedRecord) -> Result<Option<LoggedRowChange<'_>>> {
    let update = match (rec.rmgr, rec.info & 0xF0) {
        (Rmgr::Heap, XLOG_HEAP_DELETE) => false,
        (Rmgr::Heap, XLOG_HEAP_UPDATE | XLOG_HEAP_HOT_UPDATE) => true,
        _ => return Ok(None),
    };
    let block = block0(rec)?;
    let new = if update {
        if block.data.len() < tuple::LOGGED_TUPLE_HEADER {
            return Err(Error::corrupt_wal(
                rec.lsn,
                format!("{}: a new tuple of {} bytes (written at wal_level replica?)", describe(rec), block.data.len()),
            ));
        }
        Some(&block.data[..])
    } else {
        None
    };
    Ok(Some(LoggedRowChange { rel: block.tag.rel, old: old_row_logged(rec)?.unwrap_or_default(), new }))
}

/// One-line description of a heap record for `settle waldump`.
pub fn describe(rec: &DecodedRecord) -> String {
    let mut m = Cursor::new(&rec.main_data, rec.lsn);
    let r: Result<String> = (|| {
        Ok(match (rec.rmgr, rec.info & 0xF0) {
            (Rmgr::Heap, XLOG_HEAP_INSERT) => {
                let off = m.u16()?;
                let flags = m.u8()?;
                format!("INSERT off: {off}, flags: 0x{flags:02X}")
            }
            (Rmgr::Heap, XLOG_HEAP_DELETE) => {
                let off = m.u16()?;
                let xmax = m.u32()?;
                let _ = (m.u16()?, m.u16()?);
                format!("DELETE xmax: {xmax}, off: {off}{}", describe_old_row(&mut m)?)
            }
            (Rmgr::Heap, i @ (XLOG_HEAP_UPDATE | XLOG_HEAP_HOT_UPDATE)) => {
                let old = m.u16()?;
                let xmax = m.u32()?;
                let _ = (m.u16()?, m.u16()?);
                let new = m.u16()?;
                let _flags = m.u8()?;
                let name = if i == XLOG_HEAP_HOT_UPDATE { "HOT_UPDATE" } else { "UPDATE" };
                format!("{name} old_xmax: {xmax}, old_off: {old}, new_off: {new}{}", describe_old_row(&mut m)?)
            }
            (Rmgr::Heap, XLOG_HEAP_LOCK) => {
                let off = m.u16()?;
                let xmax = m.u32()?;
                let (im, im2) = (m.u16()?, m.u16()?);
                format!("LOCK xmax: {xmax}, off: {off}, infobits: {}", tuple::infomask_names(im, im2))
            }
            (Rmgr::Heap, XLOG_HEAP_INPLACE) => format!("INPLACE off: {}", m.u16()?),
            (Rmgr::Heap, super::truncate::XLOG_HEAP_TRUNCATE) => {
                super::truncate::TruncateRecord::decode(&rec.main_data, rec.lsn)?.describe()
            }
            (Rmgr::Heap2, XLOG_HEAP2_PRUNE) => {
                let p = PrunePlan::decode(&mut m)?;
                format!(
                    "PRUNE nredirected: {}, ndead: {}, nunused: {}",
                    p.redirected.len(),
                    p.dead.len(),
                    p.unused.len()
                )
            }
            (Rmgr::Heap2, XLOG_HEAP2_MULTI_INSERT) => {
                let flags = m.u8()?;
                format!("MULTI_INSERT ntuples: {}, flags: 0x{flags:02X}", m.u16()?)
            }
            _ => format!("UNKNOWN info 0x{:02X}", rec.info),
        })
    })();
    r.unwrap_or_else(|e| format!("(undecodable: {e})"))
}

/// A row change as logical decoding reads it from a heap record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowChange {
    /// INSERT (one tuple) or MULTI_INSERT (several).
    Insert {
        rel: Oid,
        tuples: Vec<Vec<u8>>,
    },
    /// UPDATE / HOT_UPDATE: the old key or row when one was logged, and the new tuple.
    Update {
        rel: Oid,
        old: Option<(u8, Vec<u8>)>,
        new: Vec<u8>,
    },
    Delete {
        rel: Oid,
        old: Option<(u8, Vec<u8>)>,
    },
}

/// The row change a heap record makes, or `None` for records that change no row (pruning,
/// freezing, vacuuming, the map, in-place updates of the catalog). The tuples come from the
/// block data, which `wal_level = logical` keeps beside a full-page image; a record whose data
/// went with its image (written under `replica`) is an error naming its LSN.
/// The relation of a heap INSERT or MULTI_INSERT record (block 0's), or `None` for any other
/// record: what logical decoding looks at before [`for_each_inserted_tuple`].
pub fn insert_rel(rec: &DecodedRecord) -> Option<Oid> {
    let insert =
        matches!((rec.rmgr, rec.info & 0xF0), (Rmgr::Heap, XLOG_HEAP_INSERT) | (Rmgr::Heap2, XLOG_HEAP2_MULTI_INSERT));
    insert.then(|| rec.blocks.iter().find(|b| b.id == 0).map(|b| b.tag.rel)).flatten()
}

/// Hands `f` each tuple a heap INSERT or MULTI_INSERT record inserts, in its logged form
/// ([`encode_tuple`]): slices of the record itself, so nothing is copied or
/// allocated per tuple (a hot path of logical decoding: once per row inserted). The tuples'
/// headers are checked when they are deformed (`tuple::deform_logged_tuple`). Other records
/// are an error.
pub fn for_each_inserted_tuple(rec: &DecodedRecord, f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
    let multi = match (rec.rmgr, rec.info & 0xF0) {
        (Rmgr::Heap, XLOG_HEAP_INSERT) => false,
        (Rmgr::Heap2, XLOG_HEAP2_MULTI_INSERT) => true,
        _ => return Err(Error::corrupt_wal(rec.lsn, format!("{} is not an insert", describe(rec)))),
    };
    let block = block0(rec)?;
    if block.data.is_empty() {
        return Err(Error::corrupt_wal(
            rec.lsn,
            format!("{} carries no tuple data (written at wal_level replica?)", describe(rec)),
        ));
    }
    if !multi {
        if block.data.len() < tuple::LOGGED_TUPLE_HEADER {
            return Err(Error::corrupt_wal(
                rec.lsn,
                format!("{}: a tuple of {} bytes", describe(rec), block.data.len()),
            ));
        }
        return f(&block.data);
    }
    let mut d = Cursor::new(&block.data, rec.lsn);
    let mut m = Cursor::new(&rec.main_data, rec.lsn);
    let _flags = m.u8()?;
    for _ in 0..m.u16()? {
        let len = usize::from(d.u16()?);
        f(d.bytes(tuple::LOGGED_TUPLE_HEADER + len)?)?;
    }
    Ok(())
}

pub fn decode_row_change(rec: &DecodedRecord) -> Result<Option<RowChange>> {
    let op = match (rec.rmgr, rec.info & 0xF0) {
        (Rmgr::Heap, i @ (XLOG_HEAP_INSERT | XLOG_HEAP_DELETE | XLOG_HEAP_UPDATE | XLOG_HEAP_HOT_UPDATE)) => i,
        (Rmgr::Heap2, XLOG_HEAP2_MULTI_INSERT) => XLOG_HEAP2_MULTI_INSERT,
        _ => return Ok(None),
    };
    let block = block0(rec)?;
    let rel = block.tag.rel;
    let data = || -> Result<Cursor<'_>> {
        if block.data.is_empty() {
            return Err(Error::corrupt_wal(
                rec.lsn,
                format!("{} carries no tuple data (written at wal_level replica?)", describe(rec)),
            ));
        }
        Ok(Cursor::new(&block.data, rec.lsn))
    };
    let tid = Tid::default();
    Ok(Some(match op {
        XLOG_HEAP_INSERT => RowChange::Insert { rel, tuples: vec![decode_tuple(&mut data()?, None, rec.xid, tid)?] },
        XLOG_HEAP_DELETE => RowChange::Delete { rel, old: decode_old_row(rec)? },
        XLOG_HEAP2_MULTI_INSERT => {
            let mut m = Cursor::new(&rec.main_data, rec.lsn);
            let _flags = m.u8()?;
            let n = m.u16()?;
            let mut d = data()?;
            let mut tuples = Vec::with_capacity(usize::from(n));
            for _ in 0..n {
                let len = usize::from(d.u16()?);
                tuples.push(decode_tuple(&mut d, Some(len), rec.xid, tid)?);
            }
            RowChange::Insert { rel, tuples }
        }
        _ => RowChange::Update { rel, old: decode_old_row(rec)?, new: decode_tuple(&mut data()?, None, rec.xid, tid)? },
    }))
}
