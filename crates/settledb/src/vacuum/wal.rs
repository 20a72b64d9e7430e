//! The two heap records VACUUM adds to pruning's: FREEZE_PAGE (phase I freezes tuples) and
//! VACUUM (phase III turns LP_DEAD line pointers into LP_UNUSED).
//!
//! ```text
//!  FREEZE_PAGE  block 0: the heap page
//!    main data: u16 nplans, then per plan:
//!               u16 infomask bits to set, u16 infomask bits to clear, u16 infomask2 bits
//!               to clear, u8 flags (1: xmax := 0),
//!               u16 ntuples, ntuples x u16 offsets (ascending)
//!  VACUUM       block 0: the heap page
//!    main data: u16 nunused, nunused x u16 offsets (ascending)
//! ```
//!
//! Freeze plans are shared by every tuple that changes the same way (PostgreSQL 16's
//! deduplicated `xl_heap_freeze_plan`), so freezing a page of like tuples costs one plan and
//! two bytes per tuple. Both records are applied by the same functions live and in redo, and
//! both validate the offsets they name against the page before touching it.

use crate::error::{Error, Result};
use crate::heap::tuple::{self, TupleHeader};
use crate::heap::wal::Cursor;
use crate::page::{self, ItemId, LpFlags};
use crate::types::{Lsn, OffsetNumber, Xid};

/// Flag of a freeze plan: set xmax to InvalidTransactionId.
pub const FREEZE_CLEAR_XMAX: u8 = 0x01;

/// One way of changing a tuple header, and the tuples changed that way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreezePlan {
    pub set: u16,
    pub clear: u16,
    pub clear2: u16,
    pub flags: u8,
    pub offsets: Vec<OffsetNumber>,
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

/// Groups per-tuple changes into plans, in offset order within each plan.
pub fn plans_from(changes: &[(OffsetNumber, TupleFreeze)]) -> Vec<FreezePlan> {
    let mut plans: Vec<FreezePlan> = Vec::new();
    for &(off, f) in changes {
        match plans
            .iter_mut()
            .find(|p| p.set == f.set && p.clear == f.clear && p.clear2 == f.clear2 && p.flags == f.flags)
        {
            Some(p) => p.offsets.push(off),
            None => plans.push(FreezePlan {
                set: f.set,
                clear: f.clear,
                clear2: f.clear2,
                flags: f.flags,
                offsets: vec![off],
            }),
        }
    }
    plans
}

/// `ntuples` of a plan that applies to every NORMAL tuple of the page.
const ALL_NORMAL: u16 = 0xFFFF;

/// Encodes plans for `page` (the page as it is before they are applied): a single plan that
/// covers every NORMAL tuple is written without its offsets.
pub fn encode_freeze_for(plans: &[FreezePlan], page: &[u8]) -> Vec<u8> {
    if let [only] = plans {
        let normal =
            (1..=page::max_offset(page)).map(OffsetNumber).filter(|&o| page::item_id(page, o).flags == LpFlags::Normal);
        if normal.eq(only.offsets.iter().copied()) {
            let mut out = Vec::with_capacity(11);
            out.extend_from_slice(&1u16.to_le_bytes());
            out.extend_from_slice(&only.set.to_le_bytes());
            out.extend_from_slice(&only.clear.to_le_bytes());
            out.extend_from_slice(&only.clear2.to_le_bytes());
            out.push(only.flags);
            out.extend_from_slice(&ALL_NORMAL.to_le_bytes());
            return out;
        }
    }
    encode_freeze(plans)
}

pub fn encode_freeze(plans: &[FreezePlan]) -> Vec<u8> {
    let n: usize = plans.iter().map(|p| 9 + 2 * p.offsets.len()).sum();
    let mut out = Vec::with_capacity(2 + n);
    out.extend_from_slice(&(plans.len() as u16).to_le_bytes());
    for p in plans {
        out.extend_from_slice(&p.set.to_le_bytes());
        out.extend_from_slice(&p.clear.to_le_bytes());
        out.extend_from_slice(&p.clear2.to_le_bytes());
        out.push(p.flags);
        out.extend_from_slice(&(p.offsets.len() as u16).to_le_bytes());
        for o in &p.offsets {
            out.extend_from_slice(&o.0.to_le_bytes());
        }
    }
    out
}

/// Decodes plans; a plan written as "every NORMAL tuple" is expanded against `page` (the page
/// the record applies to, before it is applied).
pub fn decode_freeze(main: &[u8], lsn: Lsn, page: &[u8]) -> Result<Vec<FreezePlan>> {
    let mut c = Cursor::new(main, lsn);
    let n = c.u16()?;
    let mut plans = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let (set, clear, clear2, flags) = (c.u16()?, c.u16()?, c.u16()?, c.u8()?);
        let k = c.u16()?;
        let offsets = if k == ALL_NORMAL {
            (1..=page::max_offset(page))
                .map(OffsetNumber)
                .filter(|&o| page::item_id(page, o).flags == LpFlags::Normal)
                .collect()
        } else {
            let mut offsets = Vec::with_capacity(usize::from(k));
            for _ in 0..k {
                offsets.push(OffsetNumber(c.u16()?));
            }
            offsets
        };
        plans.push(FreezePlan { set, clear, clear2, flags, offsets });
    }
    Ok(plans)
}

/// Applies freeze plans to a page. Every named offset must be a NORMAL tuple with a parseable
/// header; otherwise nothing is changed and an error names the offset.
pub fn apply_freeze(p: &mut [u8], plans: &[FreezePlan], lsn: Lsn) -> Result<usize> {
    let max = page::max_offset(p);
    for off in plans.iter().flat_map(|pl| &pl.offsets) {
        let ok = off.0 >= 1
            && off.0 <= max
            && page::item_id(p, *off).flags == LpFlags::Normal
            && page::try_item(p, *off).and_then(TupleHeader::parse).is_some();
        if !ok {
            return Err(Error::corrupt_wal(lsn, format!("freeze plan names offset {off}, not a tuple on the page")));
        }
    }
    let mut n = 0;
    for pl in plans {
        for &off in &pl.offsets {
            let t = page::item_mut(p, off);
            let (m, m2) = TupleHeader::parse(t).map(|h| (h.infomask(), h.infomask2())).unwrap_or((0, 0));
            tuple::set_infomask(t, (m & !pl.clear) | pl.set);
            tuple::set_infomask2(t, m2 & !pl.clear2);
            if pl.flags & FREEZE_CLEAR_XMAX != 0 {
                tuple::set_xmax(t, Xid::INVALID);
            }
            n += 1;
        }
    }
    Ok(n)
}

pub fn encode_unused(offsets: &[OffsetNumber]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + 2 * offsets.len());
    out.extend_from_slice(&(offsets.len() as u16).to_le_bytes());
    for o in offsets {
        out.extend_from_slice(&o.0.to_le_bytes());
    }
    out
}

pub fn decode_unused(main: &[u8], lsn: Lsn) -> Result<Vec<OffsetNumber>> {
    let mut c = Cursor::new(main, lsn);
    let n = c.u16()?;
    (0..n).map(|_| Ok(OffsetNumber(c.u16()?))).collect()
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

pub fn describe_freeze(main: &[u8], lsn: Lsn) -> Result<String> {
    // Without the page, a whole-page plan cannot be expanded: say so.
    let mut c = Cursor::new(main, lsn);
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
    Ok(format!("FREEZE_PAGE nplans: {n}, ntuples: {tuples}"))
}

pub fn describe_unused(main: &[u8], lsn: Lsn) -> Result<String> {
    Ok(format!("VACUUM nunused: {}", decode_unused(main, lsn)?.len()))
}
