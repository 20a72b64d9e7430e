//! Slotted 8 KB pages: the format of every heap page (and, later, of index pages).
//!
//! This is the layout PostgreSQL describes in `bufpage.h` and manipulates in `bufpage.c`,
//! re-implemented here (the byte layout is our own, little-endian, not PostgreSQL's).
//!
//! ```text
//!  0        8     10    12     14     16       18          20          24
//!  +--------+-----+-----+------+------+--------+-----------+-----------+
//!  | pd_lsn |cksum|flags|lower |upper |special |size|vers  | prune_xid |   page header
//!  +--------+-----+-----+------+------+--------+-----------+-----------+
//!  | lp 1 | lp 2 | lp 3 | ... lp N |  ---> grows up                      line pointers
//!  +----------------------------------+                                   (ItemId, 4 bytes)
//!  |                                  ^ pd_lower                          |
//!  |              free space                                              |
//!  |                                  v pd_upper                          |
//!  +----------------------------------+-----------------------------------+
//!  |  <--- grows down      tuple N | ... | tuple 2 | tuple 1              |   item storage
//!  +-----------------------------------------------------+----------------+
//!  |                                                     | special space  |   (index AMs only)
//!  +-----------------------------------------------------+----------------+
//!                                                        ^ pd_special     ^ BLCKSZ
//! ```
//!
//! Header fields (all integers little-endian):
//!
//! | bytes  | field                 | meaning                                             |
//! |--------|-----------------------|-----------------------------------------------------|
//! | 0..8   | `pd_lsn`              | LSN of the last WAL record that changed the page    |
//! | 8..10  | `pd_checksum`         | [`compute_checksum`] of the page, 0 while unset     |
//! | 10..12 | `pd_flags`            | [`PD_HAS_FREE_LINES`], [`PD_PAGE_FULL`], [`PD_ALL_VISIBLE`] |
//! | 12..14 | `pd_lower`            | end of the line pointer array                       |
//! | 14..16 | `pd_upper`            | start of the item storage                           |
//! | 16..18 | `pd_special`          | start of the special space (= BLCKSZ on heap pages) |
//! | 18..20 | `pd_pagesize_version` | `BLCKSZ | PG_PAGE_LAYOUT_VERSION`                   |
//! | 20..24 | `pd_prune_xid`        | oldest XID that may make pruning worthwhile         |
//!
//! A line pointer (`ItemId`) is one little-endian `u32`: `lp_off` in bits 0..15 (byte offset
//! of the item), `lp_flags` in bits 15..17 ([`LpFlags`]) and `lp_len` in bits 17..32. Items
//! are addressed by their 1-based [`OffsetNumber`]; an offset never changes while the item
//! lives, which is why indexes and `t_ctid` can point at it. An `LP_REDIRECT` line pointer
//! (left behind by HOT pruning) stores the target offset number in `lp_off` and has length 0;
//! an `LP_DEAD` pointer normally has no storage; an `LP_UNUSED` one can be reused.
//!
//! # Invariants
//!
//! * `24 <= pd_lower <= pd_upper <= pd_special <= BLCKSZ`, `pd_special` MAXALIGNed; every
//!   `LP_NORMAL` item lies in `pd_upper..pd_special` at a MAXALIGNed offset. [`verify`] checks
//!   the header and the checksum, [`validate_items`] the line pointers; code that indexes a
//!   page read from disk runs both first, so the accessors below may (and do) panic on
//!   offsets or pointers that were never validated.
//! * A page of all zeros is a *new* page (never initialized, e.g. after a crash extended the
//!   file); it verifies as valid and [`is_new`] reports it.
//! * A heap page holds at most [`MAX_HEAP_TUPLES_PER_PAGE`] line pointers (291), so that a
//!   TID offset and the visibility/dead-item bitmaps stay bounded.
//!
//! # Non-goals
//!
//! This module never does I/O, never takes locks and knows nothing about WAL: callers hold
//! the buffer content lock and log the change. All functions take `&[u8]` of exactly
//! [`BLCKSZ`] bytes (usually a [`PageBuf`]).

use std::fmt::Write as _;

use crate::error::{Error, Result};
use crate::types::{BlockNumber, Lsn, OffsetNumber, Oid, Xid};

pub const BLCKSZ: usize = 8192;
pub const PAGE_HEADER_SIZE: usize = 24;
pub const ITEM_ID_SIZE: usize = 4;
pub const MAX_HEAP_TUPLES_PER_PAGE: usize = 291;
pub const PD_HAS_FREE_LINES: u16 = 0x0001;
pub const PD_PAGE_FULL: u16 = 0x0002;
pub const PD_ALL_VISIBLE: u16 = 0x0004;
/// Every flag bit a valid page may have set.
pub const PD_VALID_FLAG_BITS: u16 = PD_HAS_FREE_LINES | PD_PAGE_FULL | PD_ALL_VISIBLE;
/// The page layout version stored in the low byte of `pd_pagesize_version`.
pub const PG_PAGE_LAYOUT_VERSION: u16 = 4;
/// `pd_pagesize_version` of every initialized page.
pub const PAGESIZE_VERSION: u16 = BLCKSZ as u16 | PG_PAGE_LAYOUT_VERSION;
/// The smallest NORMAL item [`validate_items`] accepts: a heap tuple header.
pub const MIN_HEAP_ITEM_LEN: usize = 23;

const OFF_LSN: usize = 0;
const OFF_CHECKSUM: usize = 8;
const OFF_FLAGS: usize = 10;
const OFF_LOWER: usize = 12;
const OFF_UPPER: usize = 14;
const OFF_SPECIAL: usize = 16;
const OFF_PAGESIZE_VERSION: usize = 18;
const OFF_PRUNE_XID: usize = 20;

pub const fn maxalign(n: usize) -> usize {
    (n + 7) & !7
}

#[repr(C, align(8))]
#[derive(Clone)]
pub struct PageBuf(pub [u8; BLCKSZ]);

impl PageBuf {
    /// An all-zero (new) page.
    pub fn zeroed() -> PageBuf {
        PageBuf([0; BLCKSZ])
    }
}

impl Default for PageBuf {
    fn default() -> Self {
        PageBuf::zeroed()
    }
}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&describe(&self.0))
    }
}

// Layout checks: the header is 24 bytes, offsets fit lp_off's 15 bits, a page buffer is one
// aligned block, and 291 is the number of minimal heap tuples (MAXALIGN(23) + one line
// pointer each) that fit after the header (PostgreSQL's MaxHeapTuplesPerPage).
const _: () = assert!(OFF_PRUNE_XID + 4 == PAGE_HEADER_SIZE);
const _: () = assert!(BLCKSZ <= 1 << 15);
const _: () = assert!(std::mem::size_of::<PageBuf>() == BLCKSZ);
const _: () = assert!(std::mem::align_of::<PageBuf>() == 8);
const _: () = assert!(std::mem::size_of::<u32>() == ITEM_ID_SIZE);
const _: () = assert!(MAX_HEAP_TUPLES_PER_PAGE == (BLCKSZ - PAGE_HEADER_SIZE) / (maxalign(23) + ITEM_ID_SIZE));
const _: () = assert!(PAGESIZE_VERSION == 0x2004);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LpFlags {
    Unused = 0,
    Normal = 1,
    Redirect = 2,
    Dead = 3,
}

impl LpFlags {
    fn from_bits(b: u32) -> LpFlags {
        match b & 3 {
            0 => LpFlags::Unused,
            1 => LpFlags::Normal,
            2 => LpFlags::Redirect,
            _ => LpFlags::Dead,
        }
    }

    /// The name pageinspect would print.
    pub fn name(self) -> &'static str {
        match self {
            LpFlags::Unused => "UNUSED",
            LpFlags::Normal => "NORMAL",
            LpFlags::Redirect => "REDIRECT",
            LpFlags::Dead => "DEAD",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ItemId {
    pub off: u16,
    pub flags: LpFlags,
    pub len: u16,
}

impl ItemId {
    pub const UNUSED: ItemId = ItemId { off: 0, flags: LpFlags::Unused, len: 0 };

    pub fn normal(off: u16, len: u16) -> ItemId {
        ItemId { off, flags: LpFlags::Normal, len }
    }

    /// A HOT redirect to `target` (stored in `off`, length 0).
    pub fn redirect(target: OffsetNumber) -> ItemId {
        ItemId { off: target.0, flags: LpFlags::Redirect, len: 0 }
    }

    /// A dead line pointer without storage.
    pub fn dead() -> ItemId {
        ItemId { off: 0, flags: LpFlags::Dead, len: 0 }
    }

    /// Decodes the on-page `u32`.
    pub fn from_u32(raw: u32) -> ItemId {
        ItemId { off: (raw & 0x7fff) as u16, flags: LpFlags::from_bits(raw >> 15), len: (raw >> 17) as u16 }
    }

    /// Encodes to the on-page `u32`. Panics if `off` or `len` does not fit in 15 bits.
    pub fn to_u32(self) -> u32 {
        assert!(self.off < 1 << 15 && self.len < 1 << 15, "ItemId field out of range: {self:?}");
        u32::from(self.off) | ((self.flags as u32) << 15) | (u32::from(self.len) << 17)
    }

    /// True unless the line pointer is UNUSED.
    pub fn is_used(self) -> bool {
        self.flags != LpFlags::Unused
    }

    /// True when the line pointer owns bytes in the item storage area.
    pub fn has_storage(self) -> bool {
        matches!(self.flags, LpFlags::Normal | LpFlags::Dead) && self.len > 0
    }
}

// Hot path (every line pointer and header field): one bounds check and one load each.
#[inline]
fn rd16(p: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(p[at..at + 2].try_into().expect("two bytes"))
}

#[inline]
fn wr16(p: &mut [u8], at: usize, v: u16) {
    p[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

#[inline]
fn rd32(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().expect("four bytes"))
}

#[inline]
fn wr32(p: &mut [u8], at: usize, v: u32) {
    p[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Initializes an empty page with `special_size` bytes of special space (0 for heap pages).
pub fn init(page: &mut [u8], special_size: usize) {
    assert_eq!(page.len(), BLCKSZ, "a page is BLCKSZ bytes");
    let special_size = maxalign(special_size);
    assert!(special_size <= BLCKSZ - PAGE_HEADER_SIZE, "special space too large");
    page.fill(0);
    let special = (BLCKSZ - special_size) as u16;
    wr16(page, OFF_LOWER, PAGE_HEADER_SIZE as u16);
    set_upper(page, special);
    wr16(page, OFF_SPECIAL, special);
    wr16(page, OFF_PAGESIZE_VERSION, PAGESIZE_VERSION);
}

/// A never-initialized page (all zeros when it verifies): `pd_upper == 0`.
pub fn is_new(page: &[u8]) -> bool {
    upper(page) == 0
}

pub fn lsn(page: &[u8]) -> Lsn {
    let mut b = [0u8; 8];
    b.copy_from_slice(&page[OFF_LSN..OFF_LSN + 8]);
    Lsn(u64::from_le_bytes(b))
}

pub fn set_lsn(page: &mut [u8], lsn: Lsn) {
    page[OFF_LSN..OFF_LSN + 8].copy_from_slice(&lsn.0.to_le_bytes());
}

/// The stored `pd_checksum` (not recomputed).
pub fn checksum(page: &[u8]) -> u16 {
    rd16(page, OFF_CHECKSUM)
}

pub fn flags(page: &[u8]) -> u16 {
    rd16(page, OFF_FLAGS)
}

pub fn set_flags(page: &mut [u8], flags: u16) {
    wr16(page, OFF_FLAGS, flags)
}

/// Clears the given `pd_flags` bits.
pub fn clear_flags(page: &mut [u8], bits: u16) {
    let f = flags(page);
    set_flags(page, f & !bits);
}

#[inline]
pub fn lower(page: &[u8]) -> u16 {
    rd16(page, OFF_LOWER)
}

/// Sets `pd_lower` directly (redo and tests; normal code uses [`add_item`]).
pub fn set_lower(page: &mut [u8], v: u16) {
    wr16(page, OFF_LOWER, v)
}

pub fn upper(page: &[u8]) -> u16 {
    rd16(page, OFF_UPPER)
}

/// Sets `pd_upper` directly (redo and tests; normal code uses [`add_item`]).
pub fn set_upper(page: &mut [u8], v: u16) {
    wr16(page, OFF_UPPER, v)
}

pub fn special(page: &[u8]) -> u16 {
    rd16(page, OFF_SPECIAL)
}

pub fn pagesize_version(page: &[u8]) -> u16 {
    rd16(page, OFF_PAGESIZE_VERSION)
}

pub fn prune_xid(page: &[u8]) -> Xid {
    Xid(rd32(page, OFF_PRUNE_XID))
}

pub fn set_prune_xid(page: &mut [u8], xid: Xid) {
    wr32(page, OFF_PRUNE_XID, xid.0)
}

/// Asks the CPU to bring the used parts of `page` into cache: the line pointers (up to
/// `pd_lower`) and the items (from `pd_upper`). A binary search over a page that is not in
/// cache otherwise waits for one miss per probe, each probe's address depending on the last,
/// and a pass over every tuple header (pruning, VACUUM's scan) for one miss per tuple; the
/// prefetches go out together. A no-op off x86-64; harmless on any bytes.
pub fn prefetch_used(page: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        let lower = usize::from(lower(page)).min(page.len());
        let upper = usize::from(upper(page)).min(page.len());
        // The line pointers, then the tuples from the page's end down: a page fills from its
        // end, so line pointer 1's tuple is the last one, and a pass in offset order reads
        // the tuples in descending address order. Asked for in that order, the first tuple
        // arrives first and the pass starts while the rest are on their way.
        let lines = (0..lower).step_by(64).chain((upper & !63..page.len()).step_by(64).rev());
        for off in lines {
            // SAFETY: prefetching never faults, and every address is inside `page`.
            unsafe {
                core::arch::x86_64::_mm_prefetch(page.as_ptr().add(off).cast::<i8>(), core::arch::x86_64::_MM_HINT_T0);
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = page;
}

/// Number of line pointers: `(pd_lower - 24) / 4`, 0 on a new page.
#[inline]
pub fn max_offset(page: &[u8]) -> u16 {
    let lower = lower(page) as usize;
    (lower.saturating_sub(PAGE_HEADER_SIZE) / ITEM_ID_SIZE) as u16
}

#[inline]
fn item_id_pos(off: OffsetNumber) -> usize {
    PAGE_HEADER_SIZE + (off.0 as usize - 1) * ITEM_ID_SIZE
}

/// The line pointer at `off`. Panics unless `1 <= off <= max_offset(page)`: callers check
/// offsets taken from disk (TIDs, redirects) against [`max_offset`] first.
#[inline]
pub fn item_id(page: &[u8], off: OffsetNumber) -> ItemId {
    assert!(off.0 >= 1 && off.0 <= max_offset(page), "offset {off} out of range 1..={}", max_offset(page));
    ItemId::from_u32(rd32(page, item_id_pos(off)))
}

/// Overwrites the line pointer at `off`. Panics unless `1 <= off <= max_offset(page)`.
pub fn set_item_id(page: &mut [u8], off: OffsetNumber, id: ItemId) {
    assert!(off.0 >= 1 && off.0 <= max_offset(page), "offset {off} out of range 1..={}", max_offset(page));
    wr32(page, item_id_pos(off), id.to_u32());
}

/// The bytes of the NORMAL item at `off`. Panics if `off` is out of range, the item is not
/// NORMAL, or its storage lies outside the page ([`validate_items`] rules that out).
#[inline]
pub fn item(page: &[u8], off: OffsetNumber) -> &[u8] {
    let id = item_id(page, off);
    assert_eq!(id.flags, LpFlags::Normal, "item {off} is not NORMAL");
    &page[id.off as usize..id.off as usize + id.len as usize]
}

/// Mutable bytes of the NORMAL item at `off`; panics like [`item`].
pub fn item_mut(page: &mut [u8], off: OffsetNumber) -> &mut [u8] {
    let id = item_id(page, off);
    assert_eq!(id.flags, LpFlags::Normal, "item {off} is not NORMAL");
    &mut page[id.off as usize..id.off as usize + id.len as usize]
}

/// The NORMAL item at `off`, or `None` when `off` is out of range, the line pointer is not
/// NORMAL, or its storage lies outside the page. Never panics.
#[inline]
pub fn try_item(page: &[u8], off: OffsetNumber) -> Option<&[u8]> {
    if page.len() < PAGE_HEADER_SIZE || off.0 == 0 || off.0 > max_offset(page) {
        return None;
    }
    let pos = item_id_pos(off);
    let raw = page.get(pos..pos + ITEM_ID_SIZE)?;
    let id = ItemId::from_u32(u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]));
    if id.flags != LpFlags::Normal {
        return None;
    }
    page.get(id.off as usize..id.off as usize + id.len as usize)
}

/// `PageGetFreeSpace`: the gap between `pd_lower` and `pd_upper`, minus one line pointer
/// (the one a new item would need), floored at 0.
pub fn free_space(page: &[u8]) -> usize {
    let gap = (upper(page) as usize).saturating_sub(lower(page) as usize);
    gap.saturating_sub(ITEM_ID_SIZE)
}

/// `PageGetHeapFreeSpace`: [`free_space`], except 0 when the page already has
/// [`MAX_HEAP_TUPLES_PER_PAGE`] line pointers and none can be reused. Like PostgreSQL, an
/// UNUSED line pointer only counts when `PD_HAS_FREE_LINES` is set, because that is when
/// [`add_item`] looks for one.
pub fn heap_free_space(page: &[u8]) -> usize {
    let space = free_space(page);
    if space == 0 || (max_offset(page) as usize) < MAX_HEAP_TUPLES_PER_PAGE {
        return space;
    }
    if flags(page) & PD_HAS_FREE_LINES != 0 && first_reusable(page, 1).is_some() {
        space
    } else {
        0
    }
}

/// First UNUSED line pointer without storage at or after `from`.
fn first_reusable(page: &[u8], from: u16) -> Option<OffsetNumber> {
    (from..=max_offset(page)).map(OffsetNumber).find(|&o| {
        let id = item_id(page, o);
        !id.is_used() && !id.has_storage()
    })
}

fn header_pointers_sane(page: &[u8]) -> bool {
    let (l, u, s) = (lower(page) as usize, upper(page) as usize, special(page) as usize);
    PAGE_HEADER_SIZE <= l && l <= u && u <= s && s <= BLCKSZ
}

/// `PageAddItem`: stores `data` as a NORMAL item and returns its offset number.
///
/// With `offset == None` the first UNUSED line pointer is reused when `PD_HAS_FREE_LINES` is
/// set, otherwise a new one is appended. With `Some(off)`, `off` must be `max_offset + 1`
/// (append) or an existing UNUSED slot (redo places items where the original went). The
/// bytes go to `pd_upper - MAXALIGN(len)`, so every item starts MAXALIGNed; padding is
/// zeroed. Returns `None` when the item does not fit, `off` is not usable, the header is
/// insane, or (heap pages) the page would exceed [`MAX_HEAP_TUPLES_PER_PAGE`] line pointers.
/// `PD_HAS_FREE_LINES` is cleared once no UNUSED line pointer is left.
pub fn add_item(page: &mut [u8], data: &[u8], offset: Option<OffsetNumber>, is_heap: bool) -> Option<OffsetNumber> {
    if !header_pointers_sane(page) || data.len() >= 1 << 15 {
        return None;
    }
    let limit = max_offset(page) + 1;
    let has_free_lines = flags(page) & PD_HAS_FREE_LINES != 0;
    let off = match offset {
        Some(off) if off.0 == 0 || off.0 > limit => return None,
        Some(off) if off.0 < limit => {
            let id = item_id(page, off);
            if id.is_used() || id.has_storage() {
                return None;
            }
            off
        }
        Some(off) => off,
        None if has_free_lines => first_reusable(page, 1).unwrap_or(OffsetNumber(limit)),
        None => OffsetNumber(limit),
    };
    if is_heap && off.0 as usize > MAX_HEAP_TUPLES_PER_PAGE {
        return None;
    }
    let new_lower = lower(page) as usize + if off.0 == limit { ITEM_ID_SIZE } else { 0 };
    let aligned = maxalign(data.len());
    let upper_now = upper(page) as usize;
    if new_lower + aligned > upper_now {
        return None;
    }
    let new_upper = upper_now - aligned;
    set_lower(page, new_lower as u16);
    set_upper(page, new_upper as u16);
    set_item_id(page, off, ItemId::normal(new_upper as u16, data.len() as u16));
    page[new_upper..new_upper + data.len()].copy_from_slice(data);
    page[new_upper + data.len()..upper_now].fill(0);
    if has_free_lines && first_reusable(page, 1).is_none() {
        set_flags(page, flags(page) & !PD_HAS_FREE_LINES);
    }
    Some(off)
}

/// `PageRepairFragmentation`: moves the storage of every item that has some (NORMAL items,
/// and DEAD items that kept their bytes) together against `pd_special`, keeping offset
/// numbers, so all free space is one gap; UNUSED line pointers are reset to (0, UNUSED, 0)
/// and `PD_HAS_FREE_LINES` is set exactly when there is one. The freed gap is zeroed.
///
/// Needs the cleanup lock in the caller (tuples move) and a page that passed
/// [`validate_items`]; panics if a line pointer points outside the page.
pub fn repair_fragmentation(page: &mut [u8]) {
    assert!(header_pointers_sane(page), "repair_fragmentation on an insane page header");
    let nline = usize::from(max_offset(page));
    // Items with storage as `offset << 32 | len << 16 | line pointer index`, so that sorting
    // the keys sorts by where the bytes are. Hot path (pruning, phase I of VACUUM): no
    // allocation, and no sort when the items already lie in descending order of line pointer,
    // the order in which a page is filled.
    let mut on_stack = [0u64; MAX_HEAP_TUPLES_PER_PAGE];
    let mut spilled = Vec::new();
    let items: &mut [u64] = if nline <= on_stack.len() {
        &mut on_stack
    } else {
        spilled.resize(nline, 0);
        &mut spilled
    };
    let (mut n, mut nunused, mut presorted, mut prev_off) = (0usize, 0usize, true, u32::MAX);
    let mut total = 0usize;
    for i in 1..=nline {
        let pos = PAGE_HEADER_SIZE + (i - 1) * ITEM_ID_SIZE;
        let id = ItemId::from_u32(rd32(page, pos));
        if id.has_storage() {
            let (off, len) = (u32::from(id.off), u32::from(id.len));
            assert!(off as usize + len as usize <= BLCKSZ, "item {i} points outside the page");
            presorted &= off < prev_off;
            prev_off = off;
            total += maxalign(len as usize);
            items[n] = u64::from(off) << 32 | u64::from(len) << 16 | i as u64;
            n += 1;
        } else if !id.is_used() {
            nunused += 1;
            wr32(page, pos, ItemId::UNUSED.to_u32());
        }
    }
    let special = special(page) as usize;
    let lower = lower(page) as usize;
    assert!(lower + total <= special, "item lengths ({total} bytes) exceed the page's storage");
    let items = &mut items[..n];
    if !presorted {
        items.sort_unstable_by(|a, b| b.cmp(a));
    }
    if let Some(bottom) = fill_holes(page, items, special, total) {
        page[lower..bottom].fill(0);
        set_upper(page, bottom as u16);
        let f = flags(page);
        set_flags(page, if nunused > 0 { f | PD_HAS_FREE_LINES } else { f & !PD_HAS_FREE_LINES });
        return;
    }
    // Highest item first, each moved up against the last one placed: every destination lies
    // at or above its source and above every item still to move, so moving in place is safe.
    // Items lying back to back (each ends where the one above it begins, as a page filled from
    // the end has them) all move by the same distance, so such a run moves with one copy, as
    // PostgreSQL's `compactify_tuples` does: a page that lost three tuples of sixty moves
    // three blocks, not fifty tuples one by one.
    let mut upper = special;
    let mut k = 0;
    while k < items.len() {
        let (top_off, top_len, _) = unpack(items[k]);
        // A run only where nothing moves down (a page whose items overlap can ask for that):
        // there, one copy of the run is the same as copying its items one after the other.
        let mut j = k + 1;
        let mut src_lo = top_off;
        if upper - maxalign(top_len) >= top_off {
            while let Some(&next) = items.get(j) {
                let (off, len, _) = unpack(next);
                if off + maxalign(len) != src_lo {
                    break;
                }
                src_lo = off;
                j += 1;
            }
        }
        let run_end = top_off + top_len;
        let dst_lo = upper - (top_off + maxalign(top_len) - src_lo);
        if dst_lo != src_lo {
            page.copy_within(src_lo..run_end, dst_lo);
        }
        for &key in &items[k..j] {
            let (off, len, i) = unpack(key);
            upper -= maxalign(len);
            if off != upper {
                let pos = PAGE_HEADER_SIZE + (i - 1) * ITEM_ID_SIZE;
                let id = ItemId::from_u32(rd32(page, pos));
                wr32(page, pos, ItemId { off: upper as u16, ..id }.to_u32());
            }
            zero_padding(page, upper, len);
        }
        debug_assert_eq!(upper, dst_lo, "a run's items end where its copy ends");
        k = j;
    }
    page[lower..upper].fill(0);
    set_upper(page, upper as u16);
    let f = flags(page);
    set_flags(page, if nunused > 0 { f | PD_HAS_FREE_LINES } else { f & !PD_HAS_FREE_LINES });
}

/// A [`repair_fragmentation`] sort key: (offset, length, line pointer index).
#[inline]
fn unpack(key: u64) -> (usize, usize, usize) {
    ((key >> 32) as usize, (key >> 16 & 0xFFFF) as usize, (key & 0xFFFF) as usize)
}

/// [`repair_fragmentation`] by filling holes: where the storage must end up is known in
/// advance (`special - total` up to `special`), so the items already inside that range can
/// stay, and only the items below it need to move, each into a gap inside it that the items
/// which lost their storage left. A page that lost three tuples of sixty then moves three
/// tuples, where keeping the storage in line pointer order moves every tuple below the
/// highest gap (about three quarters of the page, when the gaps fall anywhere).
///
/// `items` are the sort keys in descending offset order. Applies, and returns the new
/// `pd_upper`, only where it is plainly right and moves at most half the bytes the ordered
/// compaction would: every item MAXALIGNed and apart from the others, none straddling the
/// new `pd_upper`, and the items to move filling the gaps exactly when taken highest first
/// into the highest gap. Otherwise returns `None` with the page untouched. The outcome is a
/// function of the page alone, so redo of a PRUNE record lays the page out the same way.
fn fill_holes(page: &mut [u8], items: &[u64], special: usize, total: usize) -> Option<usize> {
    let bottom = special.checked_sub(total)?;
    let split = items.partition_point(|&k| unpack(k).0 >= bottom);
    let (stayers, movers) = items.split_at(split);
    if movers.is_empty() {
        // Already packed: the ordered pass moves nothing either.
        return None;
    }
    // The gaps among the items that stay, highest first; `limit` is where the storage above
    // the item being looked at begins.
    let mut gaps = [(0u16, 0u16); MAX_HEAP_TUPLES_PER_PAGE + 1];
    let (mut ngaps, mut limit) = (0usize, special);
    for &k in stayers {
        let (off, len, _) = unpack(k);
        let end = off + maxalign(len);
        if maxalign(off) != off || end > limit || ngaps == gaps.len() {
            return None;
        }
        if end < limit {
            gaps[ngaps] = (end as u16, limit as u16);
            ngaps += 1;
        }
        limit = off;
    }
    if limit > bottom {
        if ngaps == gaps.len() {
            return None;
        }
        gaps[ngaps] = (bottom as u16, limit as u16);
        ngaps += 1;
    }
    let gaps = &gaps[..ngaps];
    // Bytes the ordered compaction would move: everything below the highest gap.
    let top_gap_end = usize::from(gaps.first()?.1);
    let ordered = total - (special - top_gap_end);
    // The movers, highest first, into the gaps, each placed at the top of what is left of
    // the highest gap not yet full. Only a plan here: nothing is written unless it all fits.
    let mut dst = [0u16; MAX_HEAP_TUPLES_PER_PAGE];
    if movers.len() > dst.len() {
        return None;
    }
    let (mut g, mut top, mut limit, mut moved) = (0usize, top_gap_end, bottom, 0usize);
    for (i, &k) in movers.iter().enumerate() {
        let (off, len, _) = unpack(k);
        let size = maxalign(len);
        if maxalign(off) != off || off + size > limit {
            return None;
        }
        limit = off;
        while top == usize::from(gaps.get(g)?.0) {
            g += 1;
            top = usize::from(gaps.get(g)?.1);
        }
        match top.checked_sub(size) {
            Some(t) if t >= usize::from(gaps[g].0) => top = t,
            _ => return None,
        }
        dst[i] = top as u16;
        moved += size;
    }
    // Every gap full (the sizes add up by construction; checked, since a gap left open would
    // lie inside the storage), and worth it.
    if g + 1 != gaps.len() || top != usize::from(gaps[g].0) || moved * 2 > ordered {
        return None;
    }
    for (i, &k) in movers.iter().enumerate() {
        let (off, len, lp) = unpack(k);
        let to = usize::from(dst[i]);
        page.copy_within(off..off + len, to);
        zero_padding(page, to, len);
        let pos = PAGE_HEADER_SIZE + (lp - 1) * ITEM_ID_SIZE;
        let id = ItemId::from_u32(rd32(page, pos));
        wr32(page, pos, ItemId { off: to as u16, ..id }.to_u32());
    }
    for &k in stayers {
        let (off, len, _) = unpack(k);
        zero_padding(page, off, len);
    }
    Some(bottom)
}

/// Zeroes the MAXALIGN padding after an item of `len` bytes (at least 1) at `at`: one word
/// read and written instead of a `memset` call of at most 7 bytes, which cost about as much
/// as moving the item. Hot path.
#[inline]
pub fn zero_padding(page: &mut [u8], at: usize, len: usize) {
    debug_assert!(len > 0, "an item with storage has bytes");
    let end = at + maxalign(len);
    let pad = end - at - len;
    if pad > 0 {
        let word = &mut page[end - 8..end];
        let v = u64::from_le_bytes([word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7]]);
        word.copy_from_slice(&(v & (u64::MAX >> (8 * pad))).to_le_bytes());
    }
}

/// `PageTruncateLinePointerArray`: drops the UNUSED line pointers at the end of the array
/// (giving their 4 bytes back to free space) and sets `PD_HAS_FREE_LINES` by whether any
/// UNUSED one remains. Vacuum calls it after phase III turned DEAD items UNUSED.
pub fn truncate_line_pointer_array(page: &mut [u8]) {
    let mut nline = max_offset(page);
    while nline > 0 && !item_id(page, OffsetNumber(nline)).is_used() {
        nline -= 1;
    }
    let new_lower = PAGE_HEADER_SIZE + nline as usize * ITEM_ID_SIZE;
    let old_lower = lower(page) as usize;
    page[new_lower..old_lower.max(new_lower)].fill(0);
    set_lower(page, new_lower as u16);
    let any_unused = (1..=nline).any(|o| !item_id(page, OffsetNumber(o)).is_used());
    let f = flags(page);
    set_flags(page, if any_unused { f | PD_HAS_FREE_LINES } else { f & !PD_HAS_FREE_LINES });
}

/// The page checksum: CRC-32C of the whole page with `pd_checksum` read as zero, followed by
/// the block number (so a page written to the wrong block fails), folded to 16 bits by
/// XOR-ing the halves; 0 is never produced (it becomes 1), so 0 can mean "not set".
///
/// Like PostgreSQL's 16-bit checksum, a random corruption escapes with probability about
/// 2^-16; every single-bit error is caught.
pub fn compute_checksum(page: &[u8], block: BlockNumber) -> u16 {
    let mut crc = crate::crc::crc32c(&page[..OFF_CHECKSUM]);
    crc = crate::crc::crc32c_append(crc, &[0, 0]);
    crc = crate::crc::crc32c_append(crc, &page[OFF_CHECKSUM + 2..]);
    crc = crate::crc::crc32c_append(crc, &block.0.to_le_bytes());
    match (crc ^ (crc >> 16)) as u16 {
        0 => 1,
        c => c,
    }
}

/// Stores [`compute_checksum`] in `pd_checksum`; done just before a page is written.
pub fn set_checksum(page: &mut [u8], block: BlockNumber) {
    let c = compute_checksum(page, block);
    wr16(page, OFF_CHECKSUM, c);
}

/// The first thing wrong with the header fields, if any.
fn header_problem(page: &[u8]) -> Option<String> {
    let (l, u, s) = (lower(page) as usize, upper(page) as usize, special(page) as usize);
    let f = flags(page);
    let psv = pagesize_version(page);
    if psv != PAGESIZE_VERSION {
        Some(format!("pd_pagesize_version {psv:#06x} but expected {PAGESIZE_VERSION:#06x}"))
    } else if l < PAGE_HEADER_SIZE {
        Some(format!("pd_lower {l} < page header size {PAGE_HEADER_SIZE}"))
    } else if l > u {
        Some(format!("pd_lower {l} > pd_upper {u}"))
    } else if u > s {
        Some(format!("pd_upper {u} > pd_special {s}"))
    } else if s > BLCKSZ {
        Some(format!("pd_special {s} > page size {BLCKSZ}"))
    } else if s != maxalign(s) {
        Some(format!("pd_special {s} is not MAXALIGNed"))
    } else if f & !PD_VALID_FLAG_BITS != 0 {
        Some(format!("pd_flags {f:#06x} has unknown bits set"))
    } else {
        None
    }
}

/// Checks the header fields only (no checksum): the length, `pd_lower <= pd_upper <=
/// pd_special <= BLCKSZ`, alignment, flags. Index access methods call it before their own
/// special-area checks. An all-zero page passes; another page with `pd_upper` 0 does not.
/// Never panics.
pub fn validate_header(page: &[u8], rel: Oid, block: BlockNumber) -> Result<()> {
    if page.len() != BLCKSZ {
        return Err(Error::corrupted(rel, block, format!("page is {} bytes, expected {BLCKSZ}", page.len())));
    }
    if is_new(page) {
        return new_page_problem(page, rel, block);
    }
    match header_problem(page) {
        Some(detail) => Err(Error::corrupted(rel, block, detail)),
        None => Ok(()),
    }
}

/// A page with `pd_upper == 0` is valid only if it is all zeros: otherwise its line pointers
/// would be trusted by accessors that skip "new" pages' checks (found by fuzz target
/// `wal_record`: a full-page image with `pd_upper` 0 and garbage line pointers).
fn new_page_problem(page: &[u8], rel: Oid, block: BlockNumber) -> Result<()> {
    if page.iter().all(|&b| b == 0) {
        Ok(())
    } else {
        Err(Error::corrupted(rel, block, "pd_upper is 0 but the page is not all zeros"))
    }
}

/// Checks a page just read from disk (`PageIsVerified`): an all-zero page is valid (new);
/// otherwise the checksum must match and the header must be sane. Never panics.
pub fn verify(page: &[u8], rel: Oid, block: BlockNumber) -> Result<()> {
    if page.len() != BLCKSZ {
        return Err(Error::corrupted(rel, block, format!("page is {} bytes, expected {BLCKSZ}", page.len())));
    }
    if is_new(page) {
        return new_page_problem(page, rel, block);
    }
    let stored = checksum(page);
    let calculated = compute_checksum(page, block);
    if stored != calculated {
        return Err(Error::corrupted(
            rel,
            block,
            format!("page verification failed, calculated checksum {calculated} but expected {stored}"),
        ));
    }
    match header_problem(page) {
        Some(detail) => Err(Error::corrupted(rel, block, detail)),
        None => Ok(()),
    }
}

/// Checks every line pointer of a heap page so that later code can index it safely:
/// NORMAL items lie in `pd_upper..pd_special`, MAXALIGNed, at least 23 bytes (a tuple
/// header); DEAD items with storage lie in the same range; REDIRECT targets are within
/// `1..=max_offset`; at most [`MAX_HEAP_TUPLES_PER_PAGE`] line pointers; the items' storage
/// (MAXALIGNed) fits between `pd_lower` and `pd_special`, as it must unless items overlap, so
/// that [`repair_fragmentation`] can lay them out again. The header is
/// re-checked too, so this is safe on any page (a new page has no items). Never panics.
pub fn validate_items(page: &[u8], rel: Oid, block: BlockNumber) -> Result<()> {
    if page.len() != BLCKSZ {
        return Err(Error::corrupted(rel, block, format!("page is {} bytes, expected {BLCKSZ}", page.len())));
    }
    if is_new(page) {
        return new_page_problem(page, rel, block);
    }
    if let Some(detail) = header_problem(page) {
        return Err(Error::corrupted(rel, block, detail));
    }
    let nline = max_offset(page);
    if nline as usize > MAX_HEAP_TUPLES_PER_PAGE {
        return Err(Error::corrupted(
            rel,
            block,
            format!("{nline} line pointers exceed the heap maximum {MAX_HEAP_TUPLES_PER_PAGE}"),
        ));
    }
    let (u, s) = (upper(page) as usize, special(page) as usize);
    let mut total = 0;
    for o in (1..=nline).map(OffsetNumber) {
        let id = item_id(page, o);
        let (off, len) = (id.off as usize, id.len as usize);
        let bad = |what: String| Err(Error::corrupted(rel, block, format!("line pointer {o}: {what}")));
        match id.flags {
            LpFlags::Unused => {}
            LpFlags::Redirect => {
                if off == 0 || off > nline as usize || len != 0 {
                    return bad(format!("redirect to {off} (len {len}) outside 1..={nline}"));
                }
            }
            LpFlags::Normal | LpFlags::Dead => {
                if id.flags == LpFlags::Dead && len == 0 {
                    continue;
                }
                if id.flags == LpFlags::Normal && len < MIN_HEAP_ITEM_LEN {
                    return bad(format!("length {len} < {MIN_HEAP_ITEM_LEN}"));
                }
                if off < u || off + len > s {
                    return bad(format!("item {off}..{} outside {u}..{s}", off + len));
                }
                if off != maxalign(off) {
                    return bad(format!("offset {off} is not MAXALIGNed"));
                }
                total += maxalign(len);
            }
        }
    }
    // Items that do not overlap fit between pd_lower and pd_special; overlapping ones would
    // make repair_fragmentation run out of room (PostgreSQL's PageRepairFragmentation check).
    let avail = s - lower(page) as usize;
    if total > avail {
        return Err(Error::corrupted(
            rel,
            block,
            format!("corrupted item lengths: total {total}, available space {avail}"),
        ));
    }
    Ok(())
}

/// Names of the set `pd_flags` bits, `|`-separated.
pub fn flag_names(f: u16) -> String {
    let mut names = Vec::new();
    for (bit, name) in
        [(PD_HAS_FREE_LINES, "HAS_FREE_LINES"), (PD_PAGE_FULL, "PAGE_FULL"), (PD_ALL_VISIBLE, "ALL_VISIBLE")]
    {
        if f & bit != 0 {
            names.push(name.to_string());
        }
    }
    if f & !PD_VALID_FLAG_BITS != 0 {
        names.push(format!("{:#06x}", f & !PD_VALID_FLAG_BITS));
    }
    names.join("|")
}

/// The page header as one line, like pageinspect's `page_header()`. Never panics.
pub fn describe_header(page: &[u8]) -> String {
    if page.len() < PAGE_HEADER_SIZE {
        return format!("short page: {} bytes", page.len());
    }
    if is_new(page) && page.iter().all(|&b| b == 0) {
        return "new page (all zeros)".to_string();
    }
    let f = flags(page);
    format!(
        "lsn: {}  checksum: {}  flags: {:#06x} ({})  lower: {}  upper: {}  special: {}  \
         pagesize: {}  version: {}  prune_xid: {}",
        lsn(page),
        checksum(page),
        f,
        flag_names(f),
        lower(page),
        upper(page),
        special(page),
        pagesize_version(page) & 0xff00,
        pagesize_version(page) & 0x00ff,
        prune_xid(page)
    )
}

/// The line pointers at `1..=max_offset` that lie inside `page`, decoded. Never panics.
pub fn item_ids(page: &[u8]) -> Vec<(OffsetNumber, ItemId)> {
    if page.len() < PAGE_HEADER_SIZE {
        return Vec::new();
    }
    (1..=max_offset(page))
        .map(OffsetNumber)
        .map_while(|o| {
            let pos = item_id_pos(o);
            let b = page.get(pos..pos + ITEM_ID_SIZE)?;
            Some((o, ItemId::from_u32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))))
        })
        .collect()
}

/// A human-readable rendering: [`describe_header`], then one line per line pointer (`lp`,
/// `flags`, `off`, `len`), like pageinspect's `heap_page_items()`. Callers that know the
/// item format (heap) append tuple header columns. Never panics, even on garbage.
pub fn describe(page: &[u8]) -> String {
    let mut s = describe_header(page);
    s.push('\n');
    let ids = item_ids(page);
    if !ids.is_empty() {
        s.push_str("  lp | flags    |  off |  len\n");
    }
    for (o, id) in ids {
        let _ = writeln!(s, "{:>4} | {:<8} | {:>4} | {:>4}", o.0, id.flags.name(), id.off, id.len);
    }
    s
}

#[cfg(test)]
mod tests;
