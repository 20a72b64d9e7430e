//! The two heap records VACUUM writes: PRUNE_FREEZE (phase I: prune, freeze and set the
//! visibility map of one page, in one record) and VACUUM (phase III: LP_DEAD line pointers
//! become LP_UNUSED, and the page may be set all-visible in the same record).
//!
//! ```text
//!  PRUNE_FREEZE  block 0: the heap page; block 1 (only with VM): the visibility map page
//!    main data: u8 flags (1 PRUNE, 2 FREEZE, 4 VM, 8 VM_INIT: the map page is initialized),
//!               [VM]     u8 map bits to set for block 0 (the heap page gets PD_ALL_VISIBLE)
//!               [PRUNE]  the PRUNE record's main data (new prune XID, redirects, dead, unused)
//!               [FREEZE] u16 nplans, then per plan:
//!                        u16 infomask bits to set, u16 infomask bits to clear, u16 infomask2
//!                        bits to clear, u8 flags (1: xmax := 0),
//!                        u16 ntuples (0xFFFF: every NORMAL tuple left after the prune part),
//!                        ntuples x u16 offsets (ascending)
//!  VACUUM        block 0: the heap page; block 1 (only with VM): the visibility map page
//!    main data: u8 flags (4 VM, 8 VM_INIT), [VM] u8 map bits,
//!               u16 nunused, nunused x u16 offsets (ascending)
//! ```
//!
//! One record per page and phase, as PostgreSQL 17 folds pruning and freezing into
//! `XLOG_HEAP2_PRUNE_VACUUM_SCAN` and PostgreSQL 19 adds the visibility map to it: a page
//! that phase I prunes, freezes whole and sets all-frozen costs one record header, one block
//! reference and one full-page image at most, instead of three records. The map bits come
//! first in the main data so that the map page's redo ([`redo_map_block`]) reads two bytes and
//! nothing else. This module redoes and describes both blocks of both records; the recovery
//! driver and `settle waldump` route them here ([`is_vacuum_record`]). Freeze plans are shared by every tuple that changes the same way
//! (PostgreSQL 16's deduplicated `xl_heap_freeze_plan`), so freezing a page of like tuples
//! costs one plan and no offsets. The parts are applied by the same functions live and in
//! redo ([`apply_prune`], [`apply_freeze`], [`apply_unused`]), in the record's order, and
//! each validates the offsets it names against the page before touching it.
//!
//! Order within the live path and redo: prune (tuples move), then freeze (offsets are those of
//! the pruned page, which keeps every offset), then `PD_ALL_VISIBLE`. The map page is locked
//! after the heap page and both get the record's end LSN.

use crate::error::{Error, Result};
use crate::heap::tuple;
use crate::heap::wal::{apply_prune, PrunePlan, XLOG_HEAP2_PRUNE_FREEZE, XLOG_HEAP2_VACUUM};
use crate::page::{self, ItemId, LpFlags};
use crate::types::{BlockNumber, Fork, Lsn, OffsetNumber};
use crate::vm::{self, VmBits};
use crate::wal::{Cursor, DecodedRecord, Rmgr};

/// Flag of a freeze plan: set xmax to InvalidTransactionId.
pub const FREEZE_CLEAR_XMAX: u8 = 0x01;

/// One way of changing a tuple header, and the tuples changed that way: the ones at
/// `offsets`, or (`all_normal`) every NORMAL tuple of the page, with no offsets written or
/// kept, as whole-page freezing mostly is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreezePlan {
    pub set: u16,
    pub clear: u16,
    pub clear2: u16,
    pub flags: u8,
    pub offsets: Vec<OffsetNumber>,
    pub all_normal: bool,
}

/// How one tuple's header changes when it is frozen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TupleFreeze {
    pub set: u16,
    pub clear: u16,
    pub clear2: u16,
    pub flags: u8,
}

impl TupleFreeze {
    pub fn is_empty(&self) -> bool {
        self.set == 0 && self.clear == 0 && self.clear2 == 0 && self.flags == 0
    }
}

impl FreezePlan {
    /// A plan changing tuples as `f` does; no tuples yet.
    pub fn new(f: TupleFreeze) -> FreezePlan {
        FreezePlan {
            set: f.set,
            clear: f.clear,
            clear2: f.clear2,
            flags: f.flags,
            offsets: Vec::new(),
            all_normal: false,
        }
    }
}

/// `ntuples` of a plan that applies to every NORMAL tuple of the page.
const ALL_NORMAL: u16 = 0xFFFF;

/// Appends the encoding of `plans` for `page` (the page as it is before they are applied): a
/// plan for every NORMAL tuple is written without offsets (also one that lists them all).
pub fn encode_freeze_for(out: &mut Vec<u8>, plans: &[FreezePlan], page: &[u8]) {
    if let [only] = plans {
        let normal =
            (1..=page::max_offset(page)).map(OffsetNumber).filter(|&o| page::item_id(page, o).flags == LpFlags::Normal);
        if only.all_normal || normal.eq(only.offsets.iter().copied()) {
            out.extend_from_slice(&1u16.to_le_bytes());
            encode_plan_head(out, only);
            out.extend_from_slice(&ALL_NORMAL.to_le_bytes());
            return;
        }
    }
    encode_freeze(out, plans);
}

fn encode_plan_head(out: &mut Vec<u8>, p: &FreezePlan) {
    out.extend_from_slice(&p.set.to_le_bytes());
    out.extend_from_slice(&p.clear.to_le_bytes());
    out.extend_from_slice(&p.clear2.to_le_bytes());
    out.push(p.flags);
}

pub fn encode_freeze(out: &mut Vec<u8>, plans: &[FreezePlan]) {
    out.extend_from_slice(&(plans.len() as u16).to_le_bytes());
    for p in plans {
        encode_plan_head(out, p);
        if p.all_normal {
            out.extend_from_slice(&ALL_NORMAL.to_le_bytes());
            continue;
        }
        out.extend_from_slice(&(p.offsets.len() as u16).to_le_bytes());
        for o in &p.offsets {
            out.extend_from_slice(&o.0.to_le_bytes());
        }
    }
}

/// Decodes plans from `c`.
pub fn decode_freeze(c: &mut Cursor<'_>) -> Result<Vec<FreezePlan>> {
    let n = c.u16()?;
    let mut plans = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let (set, clear, clear2, flags) = (c.u16()?, c.u16()?, c.u16()?, c.u8()?);
        let mut plan = FreezePlan::new(TupleFreeze { set, clear, clear2, flags });
        let k = c.u16()?;
        if k == ALL_NORMAL {
            plan.all_normal = true;
        } else {
            plan.offsets.reserve(usize::from(k));
            for _ in 0..k {
                plan.offsets.push(OffsetNumber(c.u16()?));
            }
        }
        plans.push(plan);
    }
    Ok(plans)
}

/// Applies freeze plans to a page. Every tuple a plan names (every NORMAL one, for a plan on
/// all of them) must be a NORMAL tuple with a valid header; otherwise nothing is changed and
/// an error names the offset. Returns how many tuple headers changed.
///
/// Redo's path: one pass checks the plans against the page, one changes it.
pub fn apply_freeze(p: &mut [u8], plans: &[FreezePlan], lsn: Lsn) -> Result<usize> {
    check_freeze(p, plans, lsn)?;
    Ok(freeze_checked(p, plans))
}

/// [`apply_freeze`] for plans made from this page under the lock still held (VACUUM's phase I):
/// every tuple they name was read by the scan that planned them, so the check pass is left out
/// (debug builds still make it).
pub fn apply_planned_freeze(p: &mut [u8], plans: &[FreezePlan]) -> usize {
    debug_assert!(check_freeze(p, plans, Lsn(0)).is_ok(), "plans made from this page fit it");
    freeze_checked(p, plans)
}

/// Whether every tuple `plans` name is a NORMAL tuple with a valid header on `p`; the error
/// names the first that is not.
fn check_freeze(p: &[u8], plans: &[FreezePlan], lsn: Lsn) -> Result<()> {
    let max = usize::from(page::max_offset(p));
    let bad = |off: usize| Error::corrupt_wal(lsn, format!("freeze plan names offset {off}, not a tuple on the page"));
    // Where the valid NORMAL tuple at `off` lies, if it is one.
    let tuple_at = |p: &[u8], off: usize| -> Option<(usize, usize)> {
        let id = crate::heap::prune::lp(p, off);
        let (start, end) = (usize::from(id.off), usize::from(id.off) + usize::from(id.len));
        (id.flags == LpFlags::Normal && p.get(start..end).and_then(tuple::header_fields).is_some())
            .then_some((start, end))
    };
    for pl in plans {
        if pl.all_normal {
            for off in 1..=max {
                if crate::heap::prune::lp(p, off).flags == LpFlags::Normal && tuple_at(p, off).is_none() {
                    return Err(bad(off));
                }
            }
        }
        for &off in &pl.offsets {
            let off = usize::from(off.0);
            if off == 0 || off > max || tuple_at(p, off).is_none() {
                return Err(bad(off));
            }
        }
    }
    Ok(())
}

/// Changes the headers `plans` name, which [`check_freeze`] accepted; returns how many.
fn freeze_checked(p: &mut [u8], plans: &[FreezePlan]) -> usize {
    let max = usize::from(page::max_offset(p));
    let mut n = 0;
    for pl in plans {
        let clear_xmax = pl.flags & FREEZE_CLEAR_XMAX != 0;
        let mut change = |p: &mut [u8], off: usize| {
            // Checked already (or planned from this page); still, an offset off the page or
            // bytes too few for a header (24, what change_masks rewrites) are skipped rather
            // than trusted, so that no page can make this panic.
            if off == 0 || off > max {
                return;
            }
            let id = crate::heap::prune::lp(p, off);
            let start = usize::from(id.off);
            let t = p.get_mut(start..start + usize::from(id.len)).filter(|t| t.len() >= 24);
            if let (LpFlags::Normal, Some(t)) = (id.flags, t) {
                tuple::change_masks(t, pl.set, pl.clear, pl.clear2, clear_xmax);
                n += 1;
            }
        };
        if pl.all_normal {
            for off in 1..=max {
                change(p, off);
            }
        }
        for &off in &pl.offsets {
            change(p, usize::from(off.0));
        }
    }
    n
}

/// Flags of the PRUNE_FREEZE and VACUUM records.
pub const PF_PRUNE: u8 = 0x01;
pub const PF_FREEZE: u8 = 0x02;
/// The record sets visibility-map bits (block 1 is the map page) and `PD_ALL_VISIBLE`.
pub const PF_VM: u8 = 0x04;
/// ... and initializes the map page, which was all zeros.
pub const PF_VM_INIT: u8 = 0x08;
/// PRUNE_FREEZE only: the heap page's one change is `PD_ALL_VISIBLE`, in its first sector, on
/// a page that matched its file; block 0 has no image and the page keeps its LSN, live and in
/// redo (see `buffer`, "Changes kept out of the file"). Only with `PF_VM`, never with
/// `PF_PRUNE` or `PF_FREEZE`.
pub const PF_IMAGELESS: u8 = 0x10;
const PRUNE_FREEZE_FLAGS: u8 = PF_PRUNE | PF_FREEZE | PF_VM | PF_VM_INIT | PF_IMAGELESS;
const VACUUM_FLAGS: u8 = PF_VM | PF_VM_INIT;

/// The map bits a record sets: `(bits, map page initialized)`.
pub type VmSet = Option<(u8, bool)>;

fn vm_flags(vm: VmSet) -> u8 {
    match vm {
        Some((_, true)) => PF_VM | PF_VM_INIT,
        Some((_, false)) => PF_VM,
        None => 0,
    }
}

/// Encodes a PRUNE_FREEZE record's main data into `out` (emptied first). `page_after_prune`
/// is the page with the prune part applied and the freeze part not yet, against which a
/// whole-page plan is recognized.
pub fn encode_prune_freeze(
    out: &mut Vec<u8>,
    prune: Option<&PrunePlan>,
    freeze: &[FreezePlan],
    page_after_prune: &[u8],
    vm: VmSet,
) {
    out.clear();
    let mut flags = vm_flags(vm);
    if prune.is_some() {
        flags |= PF_PRUNE;
    }
    if !freeze.is_empty() {
        flags |= PF_FREEZE;
    }
    out.push(flags);
    if let Some((bits, _)) = vm {
        out.push(bits);
    }
    if let Some(p) = prune {
        p.encode_into(out);
    }
    if !freeze.is_empty() {
        encode_freeze_for(out, freeze, page_after_prune);
    }
}

/// The flags and map bits at the start of a PRUNE_FREEZE or VACUUM record; refuses unknown
/// flag bits.
pub fn decode_flags(c: &mut Cursor<'_>, lsn: Lsn, vacuum: bool) -> Result<(u8, VmSet)> {
    let flags = c.u8()?;
    let known = if vacuum { VACUUM_FLAGS } else { PRUNE_FREEZE_FLAGS };
    if flags & !known != 0 || (flags & PF_VM_INIT != 0 && flags & PF_VM == 0) {
        return Err(Error::corrupt_wal(lsn, format!("unknown flags 0x{flags:02X} in a vacuum record")));
    }
    if flags & PF_IMAGELESS != 0 && (flags & PF_VM == 0 || flags & (PF_PRUNE | PF_FREEZE) != 0) {
        return Err(Error::corrupt_wal(
            lsn,
            format!("flags 0x{flags:02X}: an imageless PRUNE_FREEZE record may only set the visibility map"),
        ));
    }
    let vm = if flags & PF_VM != 0 { Some((c.u8()?, flags & PF_VM_INIT != 0)) } else { None };
    Ok((flags, vm))
}

/// Redo of block 0 (the heap page) of a PRUNE_FREEZE record: the same steps as phase I, in
/// the same order.
pub fn redo_prune_freeze(main: &[u8], lsn: Lsn, p: &mut [u8]) -> Result<()> {
    let mut c = Cursor::new(main, lsn);
    let (flags, vm) = decode_flags(&mut c, lsn, false)?;
    if flags & PF_PRUNE != 0 {
        let plan = PrunePlan::decode(&mut c)?;
        if !plan.fits(p) {
            return Err(Error::corrupt_wal(lsn, "PRUNE_FREEZE names line pointers the page does not have"));
        }
        apply_prune(p, &plan);
    }
    if flags & PF_FREEZE != 0 {
        let plans = decode_freeze(&mut c)?;
        apply_freeze(p, &plans, lsn)?;
    }
    if vm.is_some() {
        page::set_flags(p, page::flags(p) | page::PD_ALL_VISIBLE);
    }
    Ok(())
}

/// Whether `rec` is one of VACUUM's own records (PRUNE_FREEZE, VACUUM), which this module
/// redoes and describes (the recovery driver and `settle waldump` route them here). Either may
/// set the map bits of its heap page: block 1, the map page, is redone by [`redo_map_block`].
pub fn is_vacuum_record(rec: &DecodedRecord) -> bool {
    rec.rmgr == Rmgr::Heap2 && matches!(rec.info & 0xF0, XLOG_HEAP2_PRUNE_FREEZE | XLOG_HEAP2_VACUUM)
}

/// Redoes the heap page (block 0, `block`, bytes `p`) of a PRUNE_FREEZE or VACUUM record (the
/// caller restored images, skipped a page already covering the record, and stamps the LSN).
pub fn redo_heap_block(rec: &DecodedRecord, block_id: u8, block: BlockNumber, p: &mut [u8]) -> Result<()> {
    let name = if rec.info & 0xF0 == XLOG_HEAP2_VACUUM { "VACUUM" } else { "PRUNE_FREEZE" };
    if block_id != 0 {
        return Err(Error::corrupt_wal(rec.lsn, format!("{name} changes heap block {block} as block {block_id}")));
    }
    // The page helpers would work on an insane header on a new (all-zero) page.
    if page::is_new(p) {
        return Err(Error::corrupt_wal(rec.lsn, format!("{name} names block {block}, which is empty")));
    }
    if rec.info & 0xF0 == XLOG_HEAP2_VACUUM {
        redo_unused(&rec.main_data, rec.lsn, p)
    } else {
        redo_prune_freeze(&rec.main_data, rec.lsn, p)
    }
}

/// One-line description of a PRUNE_FREEZE or VACUUM record for `settle waldump`.
pub fn describe(rec: &DecodedRecord) -> String {
    let r = if rec.info & 0xF0 == XLOG_HEAP2_VACUUM {
        describe_unused(&rec.main_data, rec.lsn)
    } else {
        describe_prune_freeze(&rec.main_data, rec.lsn)
    };
    r.unwrap_or_else(|e| format!("(undecodable: {e})"))
}

/// Redoes block `block_id` (the map page `block`, bytes `p`) of a PRUNE_FREEZE or VACUUM
/// record: the map bits of the heap page in block 0 (the caller restored images, skipped a
/// page already covering the record, and stamps the LSN).
pub fn redo_map_block(rec: &DecodedRecord, block_id: u8, block: BlockNumber, p: &mut [u8]) -> Result<()> {
    let heap = rec
        .blocks
        .iter()
        .find(|b| b.id == 0 && b.tag.fork == Fork::Main)
        .ok_or_else(|| Error::corrupt_wal(rec.lsn, "a vacuum record's map block has no heap block beside it"))?;
    let vacuum = rec.info & 0xF0 == XLOG_HEAP2_VACUUM;
    let (_, set) = decode_flags(&mut Cursor::new(&rec.main_data, rec.lsn), rec.lsn, vacuum)?;
    let Some((bits, init)) = set else {
        return Err(Error::corrupt_wal(rec.lsn, "a vacuum record names a map block but sets no bits"));
    };
    let bits = VmBits(bits);
    if block_id != 1 || bits.0 & !VmBits::VALID.0 != 0 || !bits.all_visible() {
        return Err(Error::corrupt_wal(rec.lsn, format!("invalid map bits {bits} in block {block_id}")));
    }
    vm::covers(rec, block, heap.tag.block, "vacuum record")?;
    if init {
        vm::init_page(p);
    } else if page::is_new(p) {
        return Err(Error::corrupt_wal(rec.lsn, format!("vacuum record names map block {block}, which is empty")));
    }
    vm::apply_set(p, heap.tag.block, bits);
    Ok(())
}

/// Whether block `block_id` of `rec` is a heap page that the record changes without raising its
/// LSN (block 0 of an imageless PRUNE_FREEZE record): redo leaves the page's LSN as it was, and
/// the page must not take hint bits until it is written.
pub fn keeps_page_lsn(rec: &DecodedRecord, block_id: u8) -> bool {
    block_id == 0
        && rec.rmgr == Rmgr::Heap2
        && rec.info & 0xF0 == XLOG_HEAP2_PRUNE_FREEZE
        && rec.main_data.first().is_some_and(|f| f & PF_IMAGELESS != 0)
}

/// Encodes a VACUUM record's main data into `out` (emptied first).
pub fn encode_unused(out: &mut Vec<u8>, offsets: &[OffsetNumber], vm: VmSet) {
    out.clear();
    out.push(vm_flags(vm));
    if let Some((bits, _)) = vm {
        out.push(bits);
    }
    out.extend_from_slice(&(offsets.len() as u16).to_le_bytes());
    for o in offsets {
        out.extend_from_slice(&o.0.to_le_bytes());
    }
}

/// A VACUUM record's offsets and map bits.
pub fn decode_unused(main: &[u8], lsn: Lsn) -> Result<(Vec<OffsetNumber>, VmSet)> {
    let mut c = Cursor::new(main, lsn);
    let (_, vm) = decode_flags(&mut c, lsn, true)?;
    let n = c.u16()?;
    let offs = (0..n).map(|_| Ok(OffsetNumber(c.u16()?))).collect::<Result<Vec<_>>>()?;
    Ok((offs, vm))
}

/// Redo of block 0 (the heap page) of a VACUUM record.
pub fn redo_unused(main: &[u8], lsn: Lsn, p: &mut [u8]) -> Result<()> {
    let (offs, vm) = decode_unused(main, lsn)?;
    apply_unused(p, &offs, lsn)?;
    if vm.is_some() {
        page::set_flags(p, page::flags(p) | page::PD_ALL_VISIBLE);
    }
    Ok(())
}

/// Phase III on one page: the LP_DEAD line pointers at `offsets` become LP_UNUSED, trailing
/// unused line pointers are cut off, and the page says it has free line pointers. An offset
/// that is not LP_DEAD (or already unused, when redo runs twice) is an error that changes
/// nothing, since an index entry may still point at it.
pub fn apply_unused(p: &mut [u8], offsets: &[OffsetNumber], lsn: Lsn) -> Result<()> {
    let max = page::max_offset(p);
    for &o in offsets {
        let ok = o.0 >= 1 && o.0 <= max && matches!(page::item_id(p, o).flags, LpFlags::Dead | LpFlags::Unused);
        if !ok {
            return Err(Error::corrupt_wal(lsn, format!("vacuum names offset {o}, which is not an LP_DEAD item")));
        }
    }
    for &o in offsets {
        page::set_item_id(p, o, ItemId { off: 0, flags: LpFlags::Unused, len: 0 });
    }
    page::truncate_line_pointer_array(p);
    Ok(())
}

fn describe_vm(vm: VmSet) -> String {
    match vm {
        Some((bits, init)) => format!(", vm: 0x{bits:02X}{}", if init { " (init map page)" } else { "" }),
        None => String::new(),
    }
}

pub fn describe_prune_freeze(main: &[u8], lsn: Lsn) -> Result<String> {
    let mut c = Cursor::new(main, lsn);
    let (flags, vm) = decode_flags(&mut c, lsn, false)?;
    let mut s = String::from(if flags & PF_IMAGELESS != 0 { "PRUNE_FREEZE imageless" } else { "PRUNE_FREEZE" });
    if flags & PF_PRUNE != 0 {
        let p = PrunePlan::decode(&mut c)?;
        s += &format!(" nredirected: {}, ndead: {}, nunused: {}", p.redirected.len(), p.dead.len(), p.unused.len());
    }
    if flags & PF_FREEZE != 0 {
        // Without the page, a whole-page plan cannot be expanded: say so.
        let n = c.u16()?;
        let mut tuples = String::new();
        for i in 0..n {
            let _ = (c.u16()?, c.u16()?, c.u16()?, c.u8()?);
            let k = c.u16()?;
            if k == ALL_NORMAL {
                tuples.push_str("all");
            } else {
                c.bytes(2 * usize::from(k))?;
                tuples.push_str(&k.to_string());
            }
            if i + 1 < n {
                tuples.push('+');
            }
        }
        s += &format!("{}nplans: {n}, nfrozen: {tuples}", if flags & PF_PRUNE != 0 { ", " } else { " " });
    }
    s += &describe_vm(vm);
    Ok(s)
}

pub fn describe_unused(main: &[u8], lsn: Lsn) -> Result<String> {
    let (offs, vm) = decode_unused(main, lsn)?;
    Ok(format!("VACUUM nunused: {}{}", offs.len(), describe_vm(vm)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What phase I's unchecked freeze meets on a page whose bytes do not hold what a plan
    /// names (only corruption could make that): offsets off the page and a NORMAL item too
    /// short for a header are skipped, never a panic; redo's `apply_freeze` refuses both.
    #[test]
    fn unchecked_freeze_skips_what_holds_no_header() {
        let mut p = crate::page::PageBuf::zeroed();
        crate::page::init(&mut p.0, 0);
        let short = crate::page::add_item(&mut p.0, &[0u8; 10], None, true).unwrap();
        let f = TupleFreeze { set: tuple::HEAP_XMIN_FROZEN, ..TupleFreeze::default() };
        let mut all = FreezePlan::new(f);
        all.all_normal = true;
        let mut listed = FreezePlan::new(f);
        listed.offsets = vec![short, OffsetNumber(0), OffsetNumber(7), OffsetNumber(u16::MAX)];
        let before = p.clone();
        for plan in [all, listed] {
            let plans = [plan];
            assert!(apply_freeze(&mut p.0, &plans, Lsn(1)).is_err());
            assert_eq!(freeze_checked(&mut p.0, &plans), 0);
            assert!(p.0 == before.0, "nothing changed");
        }
    }
}
