//! B-tree page layout: the special area, index tuples, and the page edits that both normal
//! operation and WAL redo apply (PostgreSQL's `nbtree.h` `BTPageOpaqueData`, `itup.h`).
//!
//! ```text
//!  special area (16 bytes, the last bytes of the page)
//!   0 prev u32 | 4 next u32 | 8 level u32 | 12 flags u16 | 14 cycle_id u16
//!  prev/next = 0 means "none" (block 0 is the metapage and is nobody's sibling)
//!  cycle_id: the vacuum cycle ID of the bulk delete that was running when the page was last
//!  split (0: none); see [`super::cycle`]
//!
//!  index tuple (MAXALIGNed on the page)
//!   0 block u32 | 4 offset u16 | 6 info u16 | 8 key bytes ... [heap TID 6 bytes]
//!   leaf entry:  (block, offset) = heap TID; key = encoded key values
//!   pivot tuple: block = child (downlink) or 0 in a high key; offset = 0xFFFF;
//!                info bit PIVOT_HAS_TID: the key is followed by the heap TID tiebreaker
//!   info: bits 0..13 = tuple size in bytes, 0x2000 PIVOT_HAS_TID, 0x8000 HAS_NULLS
//! ```
//!
//! Line pointers are NORMAL, except that a leaf *data* item may be LP_DEAD with its storage
//! kept (PostgreSQL's `ItemIdMarkDead`): a hint that the entry's heap chain is dead to every
//! snapshot ([`super::kill`]). A dead item stays in key order, is still compared by searches,
//! and is skipped by scans and unique checks; [`item`] reads its bytes like any other.
//!
//! On a page that is not the rightmost of its level, item 1 is the *high key*: an upper bound
//! (exclusive) of every key on the page and equal to the separator of the right sibling in the
//! parent. Data items start at [`first_data_offset`]. On an internal page the first data
//! item's key is "minus infinity" (its key bytes are empty and never compared).

use crate::error::{Error, Result};
use crate::page::{self, maxalign, PageBuf, BLCKSZ, ITEM_ID_SIZE, PAGE_HEADER_SIZE};
use crate::types::{BlockNumber, OffsetNumber, Oid, Tid};

pub const SPECIAL_SIZE: usize = 16;
pub const SPECIAL_OFF: usize = BLCKSZ - SPECIAL_SIZE;
/// Bytes available for items and line pointers on a B-tree page.
pub const USABLE: usize = BLCKSZ - PAGE_HEADER_SIZE - SPECIAL_SIZE;
pub const P_NONE: u32 = 0;
pub const P_HIKEY: OffsetNumber = OffsetNumber(1);
pub const TUPLE_HEADER_SIZE: usize = 8;
pub const TID_SIZE: usize = 6;

pub const BTP_LEAF: u16 = 0x0001;
pub const BTP_ROOT: u16 = 0x0002;
pub const BTP_DELETED: u16 = 0x0004;
pub const BTP_META: u16 = 0x0008;
pub const BTP_HALF_DEAD: u16 = 0x0010;
/// The page is the right half of a split whose old right sibling carried another vacuum cycle
/// ID (PostgreSQL's `BTP_SPLIT_END`): the last of the pages split off one page during a bulk
/// delete, where that bulk delete's backtracking stops ([`super::cycle`]).
pub const BTP_SPLIT_END: u16 = 0x0020;
pub const BTP_INCOMPLETE_SPLIT: u16 = 0x0080;
const BTP_KNOWN: u16 =
    BTP_LEAF | BTP_ROOT | BTP_DELETED | BTP_META | BTP_HALF_DEAD | BTP_SPLIT_END | BTP_INCOMPLETE_SPLIT;

pub const INFO_SIZE_MASK: u16 = 0x1FFF;
pub const INFO_PIVOT_HAS_TID: u16 = 0x2000;
pub const INFO_HAS_NULLS: u16 = 0x8000;
const PIVOT_OFFSET: u16 = 0xFFFF;

/// Largest leaf entry accepted (PostgreSQL's `BTMaxItemSize`: three items and a high key with
/// a heap TID must fit a page).
pub const MAX_ITEM_SIZE: usize = (USABLE / 3 / 8) * 8 - ITEM_ID_SIZE - 8;

const _: () = assert!(SPECIAL_SIZE == maxalign(SPECIAL_SIZE));
const _: () = assert!(MAX_ITEM_SIZE < INFO_SIZE_MASK as usize);

fn rd16(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([p[at], p[at + 1]])
}
fn rd32(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]])
}
fn wr16(p: &mut [u8], at: usize, v: u16) {
    p[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn wr32(p: &mut [u8], at: usize, v: u32) {
    p[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn prev(p: &[u8]) -> u32 {
    rd32(p, SPECIAL_OFF)
}
pub fn next(p: &[u8]) -> u32 {
    rd32(p, SPECIAL_OFF + 4)
}
pub fn level(p: &[u8]) -> u32 {
    rd32(p, SPECIAL_OFF + 8)
}
pub fn flags(p: &[u8]) -> u16 {
    rd16(p, SPECIAL_OFF + 12)
}
/// The vacuum cycle ID stamped by the page's last split (`btpo_cycleid`), 0 for none.
pub fn cycle_id(p: &[u8]) -> u16 {
    rd16(p, SPECIAL_OFF + 14)
}
pub fn set_prev(p: &mut [u8], v: u32) {
    wr32(p, SPECIAL_OFF, v)
}
pub fn set_next(p: &mut [u8], v: u32) {
    wr32(p, SPECIAL_OFF + 4, v)
}
pub fn set_level(p: &mut [u8], v: u32) {
    wr32(p, SPECIAL_OFF + 8, v)
}
pub fn set_flags(p: &mut [u8], v: u16) {
    wr16(p, SPECIAL_OFF + 12, v)
}
pub fn set_cycle_id(p: &mut [u8], v: u16) {
    wr16(p, SPECIAL_OFF + 14, v)
}
pub fn is_leaf(p: &[u8]) -> bool {
    flags(p) & BTP_LEAF != 0
}
pub fn is_rightmost(p: &[u8]) -> bool {
    next(p) == P_NONE
}
/// Deleted or half-dead: a search that lands here moves right.
pub fn is_ignored(p: &[u8]) -> bool {
    flags(p) & (BTP_DELETED | BTP_HALF_DEAD) != 0
}

/// Initializes an empty B-tree page.
pub fn init(p: &mut [u8], level: u32, flags: u16) {
    page::init(p, SPECIAL_SIZE);
    set_level(p, level);
    set_flags(p, flags);
}

/// Offset of the first data item: 2 when a high key occupies offset 1, else 1.
pub fn first_data_offset(p: &[u8]) -> OffsetNumber {
    if is_rightmost(p) {
        OffsetNumber(1)
    } else {
        OffsetNumber(2)
    }
}

pub fn max_offset(p: &[u8]) -> u16 {
    page::max_offset(p)
}

/// The bytes of item `off`, NORMAL or LP_DEAD (the page was validated by [`validate`]).
pub fn item(p: &[u8], off: OffsetNumber) -> &[u8] {
    let id = page::item_id(p, off);
    &p[id.off as usize..id.off as usize + id.len as usize]
}

/// Whether item `off` carries the LP_DEAD hint.
pub fn is_dead(p: &[u8], off: OffsetNumber) -> bool {
    page::item_id(p, off).flags == page::LpFlags::Dead
}

/// Sets the LP_DEAD hint on item `off`, keeping its storage. Leaf data items only.
pub fn mark_dead(p: &mut [u8], off: OffsetNumber) {
    let id = page::item_id(p, off);
    page::set_item_id(p, off, page::ItemId { off: id.off, flags: page::LpFlags::Dead, len: id.len });
}

/// Offsets of the LP_DEAD data items of a leaf, ascending.
pub fn dead_offsets(p: &[u8]) -> Vec<u16> {
    if !is_leaf(p) {
        return Vec::new();
    }
    (first_data_offset(p).0..=max_offset(p)).filter(|&o| is_dead(p, OffsetNumber(o))).collect()
}

/// A leaf entry: header with the heap TID, then the key.
pub fn make_leaf_tuple(key: &[u8], tid: Tid, has_nulls: bool) -> Vec<u8> {
    let mut t = Vec::with_capacity(TUPLE_HEADER_SIZE + key.len());
    t.extend_from_slice(&tid.to_bytes());
    let size = (TUPLE_HEADER_SIZE + key.len()) as u16;
    t.extend_from_slice(&(size | if has_nulls { INFO_HAS_NULLS } else { 0 }).to_le_bytes());
    t.extend_from_slice(key);
    t
}

/// A pivot tuple (downlink or high key): key, optional heap-TID tiebreaker, child block.
pub fn make_pivot(key: &[u8], heap_tid: Option<Tid>, child: u32) -> Vec<u8> {
    let mut t = Vec::with_capacity(TUPLE_HEADER_SIZE + key.len() + TID_SIZE);
    t.extend_from_slice(&child.to_le_bytes());
    t.extend_from_slice(&PIVOT_OFFSET.to_le_bytes());
    let size = TUPLE_HEADER_SIZE + key.len() + if heap_tid.is_some() { TID_SIZE } else { 0 };
    let info = size as u16 | if heap_tid.is_some() { INFO_PIVOT_HAS_TID } else { 0 };
    t.extend_from_slice(&info.to_le_bytes());
    t.extend_from_slice(key);
    if let Some(tid) = heap_tid {
        t.extend_from_slice(&tid.to_bytes());
    }
    t
}

fn header_tid(t: &[u8]) -> Tid {
    let mut b = [0u8; 6];
    b.copy_from_slice(&t[..6]);
    Tid::from_bytes(b)
}

/// The key bytes and heap TID of a leaf entry.
pub fn leaf_key(t: &[u8]) -> (&[u8], Tid) {
    (&t[TUPLE_HEADER_SIZE..], header_tid(t))
}

/// Appends the heap TIDs of a leaf's data items, in offset order, to `tids`, and the offsets of
/// those marked LP_DEAD to `lp_dead`, in one pass over the line pointers. The page was
/// validated. Hot path (VACUUM reads every TID of every leaf): the line pointers are read as
/// words, without the per-item range checks of [`page::item_id`].
pub fn leaf_tids(p: &[u8], tids: &mut Vec<Tid>, lp_dead: &mut Vec<u16>) {
    let (first, n) = (first_data_offset(p).0, max_offset(p));
    if first > n {
        return;
    }
    let lps = &p[lp_pos(first)..lp_pos(n) + ITEM_ID_SIZE];
    tids.reserve(lps.len() / ITEM_ID_SIZE);
    for (o, lp) in (first..).zip(lps.chunks_exact(ITEM_ID_SIZE)) {
        let id = page::ItemId::from_u32(u32::from_le_bytes([lp[0], lp[1], lp[2], lp[3]]));
        if id.flags == page::LpFlags::Dead {
            lp_dead.push(o);
        }
        let h = &p[id.off as usize..id.off as usize + TID_SIZE];
        tids.push(Tid::from_bytes([h[0], h[1], h[2], h[3], h[4], h[5]]));
    }
}

/// Where line pointer `off` (1-based) sits.
fn lp_pos(off: u16) -> usize {
    PAGE_HEADER_SIZE + (usize::from(off) - 1) * ITEM_ID_SIZE
}

/// The key bytes and (optional) heap TID of a pivot tuple.
pub fn pivot_key(t: &[u8]) -> (&[u8], Option<Tid>) {
    if rd16(t, 6) & INFO_PIVOT_HAS_TID != 0 {
        let end = t.len() - TID_SIZE;
        let mut b = [0u8; 6];
        b.copy_from_slice(&t[end..]);
        (&t[TUPLE_HEADER_SIZE..end], Some(Tid::from_bytes(b)))
    } else {
        (&t[TUPLE_HEADER_SIZE..], None)
    }
}

/// The key and TID of item `off` whatever its kind: leaf data items carry a TID, pivots
/// (high keys, internal items) may not.
pub fn item_key(p: &[u8], off: OffsetNumber) -> (&[u8], Option<Tid>) {
    let t = item(p, off);
    if is_leaf(p) && (off != P_HIKEY || is_rightmost(p)) {
        let (k, tid) = leaf_key(t);
        (k, Some(tid))
    } else {
        pivot_key(t)
    }
}

/// The downlink of a pivot tuple.
pub fn child(t: &[u8]) -> u32 {
    rd32(t, 0)
}

pub fn set_child(t: &mut [u8], child: u32) {
    wr32(t, 0, child)
}

/// Space an item takes on a page: MAXALIGNed bytes plus its line pointer.
pub fn item_space(len: usize) -> usize {
    maxalign(len) + ITEM_ID_SIZE
}

/// Free bytes for new items (`pd_upper - pd_lower`).
pub fn free_bytes(p: &[u8]) -> usize {
    (page::upper(p) as usize).saturating_sub(page::lower(p) as usize)
}

/// `PageAddItem` with shifting: stores `t` at `off` (1..=max+1), moving the line pointers at
/// and after `off` up by one. Returns false when it does not fit or `off` is out of range.
/// Used by inserts and by their redo, so both produce the same bytes.
pub fn insert_item(p: &mut [u8], off: OffsetNumber, t: &[u8]) -> bool {
    let n = max_offset(p);
    if off.0 == 0 || off.0 > n + 1 || t.len() >= 1 << 13 || free_bytes(p) < item_space(t.len()) {
        return false;
    }
    let lower = page::lower(p) as usize;
    let upper = page::upper(p) as usize - maxalign(t.len());
    p[upper..upper + t.len()].copy_from_slice(t);
    p[upper + t.len()..upper + maxalign(t.len())].fill(0);
    let at = PAGE_HEADER_SIZE + (off.0 as usize - 1) * ITEM_ID_SIZE;
    p.copy_within(at..lower, at + ITEM_ID_SIZE);
    page::set_lower(p, (lower + ITEM_ID_SIZE) as u16);
    page::set_upper(p, upper as u16);
    page::set_item_id(p, off, page::ItemId::normal(upper as u16, t.len() as u16));
    true
}

/// Rebuilds the page with `items` (in offset order), keeping the header's LSN and the special
/// area: the deterministic way to remove items (vacuum) and to lay out split halves. Every
/// line pointer comes out NORMAL: callers remove LP_DEAD items first (vacuum and simple
/// deletion remove all of a leaf's dead items, and an insert runs simple deletion before it
/// splits), so no hint is lost that matters.
pub fn rebuild(p: &mut [u8], items: &[Vec<u8>]) -> bool {
    let mut fresh = PageBuf::zeroed();
    page::init(&mut fresh.0, SPECIAL_SIZE);
    fresh.0[SPECIAL_OFF..].copy_from_slice(&p[SPECIAL_OFF..]);
    page::set_lsn(&mut fresh.0, page::lsn(p));
    for (i, t) in items.iter().enumerate() {
        if !insert_item(&mut fresh.0, OffsetNumber(i as u16 + 1), t) {
            return false;
        }
    }
    p.copy_from_slice(&fresh.0);
    true
}

/// Removes the items at `remove` (ascending offsets, each in range) in one pass, as
/// PostgreSQL's `PageIndexMultiDelete`: the page comes out exactly as [`rebuild`] would lay out
/// the remaining items (header reset but for the LSN, line pointers NORMAL and in offset order,
/// tuples packed down from the special area in that order, zeros elsewhere), without building
/// them as vectors. Returns false, leaving the page unchanged, when the kept items would not fit
/// (only possible when line pointers overlap, which [`validate`] does not rule out). VACUUM's
/// per-leaf step and its redo: no allocation. Hot path.
pub fn delete_items(p: &mut [u8], remove: &[u16]) -> bool {
    debug_assert!(remove.windows(2).all(|w| w[0] < w[1]));
    let Ok(old) = <&[u8; BLCKSZ]>::try_from(&*p) else { return false };
    let old = PageBuf(*old);
    let n = max_offset(&old.0);
    let lp = |o: u16| {
        let at = lp_pos(o);
        page::ItemId::from_u32(u32::from_le_bytes([old.0[at], old.0[at + 1], old.0[at + 2], old.0[at + 3]]))
    };
    // Check the fit first so that a failure leaves the page as it was.
    let (mut need, mut r) = (0usize, 0usize);
    for o in 1..=n {
        if remove.get(r) == Some(&o) {
            r += 1;
        } else {
            need += item_space(lp(o).len as usize);
        }
    }
    if need > USABLE {
        return false;
    }
    page::init(p, SPECIAL_SIZE);
    p[SPECIAL_OFF..].copy_from_slice(&old.0[SPECIAL_OFF..]);
    page::set_lsn(p, page::lsn(&old.0));
    let (mut lower, mut upper, mut r) = (PAGE_HEADER_SIZE, SPECIAL_OFF, 0usize);
    for o in 1..=n {
        if remove.get(r) == Some(&o) {
            r += 1;
            continue;
        }
        let id = lp(o);
        let (off, len) = (id.off as usize, id.len as usize);
        upper -= maxalign(len);
        p[upper..upper + len].copy_from_slice(&old.0[off..off + len]);
        let new = page::ItemId::normal(upper as u16, len as u16).to_u32();
        p[lower..lower + ITEM_ID_SIZE].copy_from_slice(&new.to_le_bytes());
        lower += ITEM_ID_SIZE;
    }
    page::set_lower(p, lower as u16);
    page::set_upper(p, upper as u16);
    true
}

/// Copies of every item on the page.
pub fn items(p: &[u8]) -> Vec<Vec<u8>> {
    (1..=max_offset(p)).map(|o| item(p, OffsetNumber(o)).to_vec()).collect()
}

/// [`validate`], except that a new (all-zero) page passes: the check for reads that visit every
/// block, such as VACUUM's scan, which meets blocks extended but never written (a crash between
/// the extension and the split's WAL record, or a split still holding the page).
pub fn validate_or_new(p: &[u8], rel: Oid, block: BlockNumber) -> Result<()> {
    if page::is_new(p) {
        return Ok(()); // page::verify, run before us, accepts pd_upper 0 only on an all-zero page
    }
    validate(p, rel, block)
}

/// Checks a B-tree page so the accessors above cannot panic on it: the special area, the flags,
/// every line pointer (NORMAL, or LP_DEAD on a leaf data item; inside the item area,
/// MAXALIGNed) and every tuple's size field.
/// Never panics. A new (all-zero) page is rejected: callers that may meet one check first.
pub fn validate(p: &[u8], rel: Oid, block: BlockNumber) -> Result<()> {
    let bad = |d: String| Err(Error::corrupted(rel, block, d));
    page::validate_header(p, rel, block)?;
    if page::is_new(p) {
        return bad("unexpected new (all-zero) page in index".into());
    }
    if page::special(p) as usize != SPECIAL_OFF {
        return bad(format!("B-tree special area at {} but expected {SPECIAL_OFF}", page::special(p)));
    }
    let f = flags(p);
    if f & !BTP_KNOWN != 0 {
        return bad(format!("unknown B-tree page flags {f:#06x}"));
    }
    if f & BTP_META == 0 && f & BTP_DELETED == 0 && ((level(p) == 0) != (f & BTP_LEAF != 0)) {
        return bad(format!("level {} disagrees with flags {f:#06x}", level(p)));
    }
    let n = max_offset(p);
    if f & (BTP_META | BTP_DELETED) == 0 {
        if !is_rightmost(p) && n < 1 {
            return bad("non-rightmost page without a high key".into());
        }
        if level(p) > 0 && n < first_data_offset(p).0 {
            return bad("internal page without downlinks".into());
        }
    }
    if n as usize > USABLE / (TUPLE_HEADER_SIZE + ITEM_ID_SIZE) {
        return bad(format!("{n} line pointers cannot fit a page"));
    }
    let (u, s) = (page::upper(p) as usize, page::special(p) as usize);
    for o in 1..=n {
        let id = page::item_id(p, OffsetNumber(o));
        let (off, len) = (id.off as usize, id.len as usize);
        let dead_ok = id.flags == page::LpFlags::Dead
            && f & (BTP_LEAF | BTP_META | BTP_DELETED) == BTP_LEAF
            && o >= first_data_offset(p).0;
        if id.flags != page::LpFlags::Normal && !dead_ok {
            return bad(format!("line pointer {o} is {}", id.flags.name()));
        }
        if off < u || off + len > s || off != maxalign(off) {
            return bad(format!("item {o} at {off}..{} outside {u}..{s} or misaligned", off + len));
        }
        if f & (BTP_META | BTP_DELETED) != 0 {
            continue;
        }
        if len < TUPLE_HEADER_SIZE {
            return bad(format!("item {o} is {len} bytes, shorter than a tuple header"));
        }
        let info = rd16(p, off + 6);
        if (info & INFO_SIZE_MASK) as usize != len {
            return bad(format!("item {o} size field {} but line pointer length {len}", info & INFO_SIZE_MASK));
        }
        if info & INFO_PIVOT_HAS_TID != 0 && len < TUPLE_HEADER_SIZE + TID_SIZE {
            return bad(format!("pivot item {o} too short for its heap TID"));
        }
    }
    Ok(())
}
