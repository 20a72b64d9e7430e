//! The visibility map (PostgreSQL's `visibilitymap.c`): two bits per heap page, kept in the
//! relation's `_vm` fork, telling VACUUM which pages it may skip and index-only scans which
//! heap pages they need not visit.
//!
//! # What the bits mean
//!
//! * `ALL_VISIBLE` (0x01): every tuple on the heap page is visible to every current and future
//!   snapshot. VACUUM's phase I skips such pages (a non-aggressive vacuum has nothing to prune
//!   there); index-only scans trust the index entry without fetching the heap tuple.
//! * `ALL_FROZEN` (0x02): additionally every tuple is frozen, so even an aggressive
//!   (anti-wraparound) vacuum may skip the page. It is never set without `ALL_VISIBLE`.
//!
//! A bit may be clear although the page would qualify (the map is conservative); a set bit
//! must be true. That is DESIGN.md §4 invariant 4: *the map never claims more than the heap page
//! holds*, and the heap page's own `PD_ALL_VISIBLE` flag agrees with `ALL_VISIBLE`.
//!
//! # Layout
//!
//! Map pages are standard 8 KB pages: the 24-byte page header, then the bitmap to the end of
//! the page (`pd_lower = pd_upper = pd_special = 8192`, so a full-page image has no "hole" and
//! keeps the whole bitmap). Heap block `b` lives in
//!
//! ```text
//!   map block  = b / HEAPBLOCKS_PER_PAGE          (HEAPBLOCKS_PER_PAGE = 8168 * 4 = 32672)
//!   byte       = 24 + (b % HEAPBLOCKS_PER_PAGE) / 4
//!   bits       = 2 * (b % 4) .. 2 * (b % 4) + 2    ALL_VISIBLE is the low bit of the pair
//!
//!   byte 24 of map block 0:  | b3 F V | b2 F V | b1 F V | b0 F V |   (bit 7 .. bit 0)
//! ```
//!
//! A missing fork, a map block past the fork's end and an all-zero (never initialized) map page
//! all read as "no bits set".
//!
//! # Interface
//!
//! [`VisibilityMap`] is the map of one heap relation (one per relation: it owns the lock that
//! serializes extending the fork). [`VisibilityMap::get`] reads a page's bits,
//! [`VisibilityMap::set`] sets them together with `PD_ALL_VISIBLE`, [`VisibilityMap::clear`]
//! clears them, [`VisibilityMap::count`] counts set bits (`settle inspect`, the `visibility
//! map:` line of VACUUM VERBOSE, pg_visibility's `pg_visibility_map_summary`), and
//! [`VisibilityMap::truncate`] forgets heap pages past a new end (VACUUM's truncation).
//!
//! # Locking
//!
//! `set` runs with the heap page exclusively locked (the caller holds the lock and passes the
//! page bytes); it then takes the map page's exclusive lock: heap page before map page, as in
//! PostgreSQL. Map pages are locked only briefly and never while waiting for anything else.
//! `clear` is called by the code that changes the heap page, with that page still locked and
//! before changing it, so no reader can see the changed heap page and a still-set bit. Index-only
//! scans read the map without the heap lock; a scan that still sees the bit set before a
//! writer clears it has a snapshot that cannot see the writer's change, which has not
//! committed yet (and the writer's index entries come after the clear).
//! PostgreSQL pins the map page before locking the heap page so that no I/O happens under
//! the heap lock (`visibilitymap_pin`); here the map page is read while the heap page is locked,
//! which is correct, only slower when the map page is not cached.
//!
//! # WAL
//!
//! * `set` logs one `Heap2 VISIBLE` record: block 0 is the map page, block 1 the heap page
//!   (so the heap page gets a full-page image when it is its first change since the checkpoint's
//!   redo pointer: `PD_ALL_VISIBLE` is not a hint, and a torn heap page must be repairable), and
//!   both pages get the record's end LSN. A map page created by the record (it was all zeros)
//!   is initialized by its redo (`FLAG_INIT_PAGE`, `will_init`), so extending the fork needs no
//!   record of its own; the zero pages an extension leaves in between are read as empty.
//! * VACUUM sets the bits of the page it prunes and freezes (phase I, PRUNE_FREEZE) or whose
//!   LP_DEAD items it frees (phase III, VACUUM) in that same record, through
//!   [`VisibilityMap::lock_and_set`]: block 0 is the heap page, block 1 the map page (with
//!   `will_init` when the record initializes it), both stamped with the record's LSN. Those
//!   records are VACUUM's: `crate::vacuum::wal` redoes both of their blocks, the map page's
//!   with this module's [`apply_set`] from the record's flags and bits only.
//! * `clear` logs a `Heap2 VM_CLEAR` record (block 0: the map page; main data: first heap
//!   block, count, bits). PostgreSQL instead clears the bits in the redo of the heap record
//!   that made the page not all-visible; a standalone record keeps this module independent of
//!   every heap record format, at the cost of one small record per clear. Its redo only clears
//!   bits, so applying it twice is harmless. Clearing `ALL_VISIBLE` also clears `ALL_FROZEN`.
//! * `truncate` clears the tail of the last remaining map page with VM_CLEAR and shortens the
//!   fork with a `Storage TRUNCATE` record, flushed before the file is cut.
//!
//! The caller of `clear` clears `PD_ALL_VISIBLE` itself as part of its own logged heap change,
//! and the heap change's redo clears it again (`heap::wal::apply_insert`, `apply_xmax`).
//! Order: under the heap page's exclusive lock, `clear` first (its VM_CLEAR record goes to WAL
//! before the heap record), then the page change and its record. WAL therefore never holds the
//! heap change without the clear: a crash between the two records leaves the bit clear on a
//! page that still carries `PD_ALL_VISIBLE` and is unchanged, which is allowed (the map may say
//! less than the page, never more).
//!
//! # Who uses it
//!
//! * Inserts, multi-inserts, updates (the old page and the new one) and deletes call `clear`
//!   (through `heap::clear_all_visible`) when they change a page with `PD_ALL_VISIBLE`: the
//!   flag is the cheap test, read under the lock they hold anyway; the map is touched only
//!   then, so a bulk load into new pages never reads it.
//! * Index-only scans (`Transaction::index_only`) call `get` for each entry's heap page and
//!   skip the heap when ALL_VISIBLE is set (`heap_fetches_avoided`).
//! * `check` compares every bit with its heap page: ALL_VISIBLE needs `PD_ALL_VISIBLE` and only
//!   tuples visible to everyone, ALL_FROZEN needs every tuple frozen ([`flags_disagreement`]
//!   and the tuple checks in `check`).
//! * VACUUM's part: phase I reads the map to skip all-visible pages (all-frozen ones in an
//!   aggressive run), through a [`MapPin`] per worker, and after pruning and freezing a page
//!   whose tuples are all visible (and frozen) calls `set` under the page's exclusive lock;
//!   after truncating empty tail pages it calls `truncate`. VACUUM VERBOSE's `visibility map:`
//!   line and `settle inspect` report `count`.

use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::{Mutex, RwLock};

use crate::buffer::{Buffer, BufferPool};
use crate::error::{Error, Result};
use crate::page::{self, BLCKSZ, PAGE_HEADER_SIZE, PD_ALL_VISIBLE};
use crate::types::{BlockNumber, BufferTag, Fork, Lsn, Oid, Xid};
use crate::wal::record::FLAG_INIT_PAGE;
use crate::wal::{BlockRef, Cursor, DecodedRecord, RecordBuilder, Rmgr, Wal};

/// Heap2 record: set visibility-map bits and `PD_ALL_VISIBLE`.
pub const XLOG_HEAP2_VISIBLE: u8 = 0x40;
/// Heap2 record: clear visibility-map bits of a range of heap blocks on one map page.
pub const XLOG_HEAP2_VM_CLEAR: u8 = 0x80;

/// What the map's logged changes need of the engine: the buffer pool and the WAL
/// (`heap::HeapEnv::maps` gives it to the heap and VACUUM).
#[derive(Clone, Copy)]
pub struct MapEnv<'a> {
    pub pool: &'a BufferPool,
    pub wal: &'a Wal,
}

/// Bytes of bitmap on one map page.
pub const MAPSIZE: usize = BLCKSZ - PAGE_HEADER_SIZE;
/// Heap pages described by one bitmap byte.
pub const HEAPBLOCKS_PER_BYTE: u32 = 4;
/// Heap pages described by one map page (32672).
pub const HEAPBLOCKS_PER_PAGE: u32 = MAPSIZE as u32 * HEAPBLOCKS_PER_BYTE;

const _: () = assert!(MAPSIZE == 8168 && HEAPBLOCKS_PER_PAGE == 32672);

/// The two bits of one heap page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct VmBits(pub u8);

impl VmBits {
    pub const NONE: VmBits = VmBits(0);
    pub const ALL_VISIBLE: VmBits = VmBits(0x01);
    pub const ALL_FROZEN: VmBits = VmBits(0x02);
    pub const VALID: VmBits = VmBits(0x03);

    pub fn all_visible(self) -> bool {
        self.0 & Self::ALL_VISIBLE.0 != 0
    }

    pub fn all_frozen(self) -> bool {
        self.0 & Self::ALL_FROZEN.0 != 0
    }

    pub fn contains(self, other: VmBits) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for VmBits {
    type Output = VmBits;
    fn bitor(self, o: VmBits) -> VmBits {
        VmBits(self.0 | o.0)
    }
}

impl std::fmt::Display for VmBits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = [(self.all_visible(), "ALL_VISIBLE"), (self.all_frozen(), "ALL_FROZEN")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|&(_, n)| n)
            .collect();
        if names.is_empty() {
            f.write_str("0")
        } else {
            f.write_str(&names.join("|"))
        }
    }
}

/// Where a heap block's bits live: map block, byte offset within the page, bit shift.
pub fn location(heap_block: BlockNumber) -> (BlockNumber, usize, u32) {
    let map_block = heap_block.0 / HEAPBLOCKS_PER_PAGE;
    let within = heap_block.0 % HEAPBLOCKS_PER_PAGE;
    let byte = PAGE_HEADER_SIZE + (within / HEAPBLOCKS_PER_BYTE) as usize;
    (BlockNumber(map_block), byte, 2 * (within % HEAPBLOCKS_PER_BYTE))
}

/// Number of map pages needed to describe `heap_nblocks` heap pages.
pub fn map_pages_for(heap_nblocks: u32) -> u32 {
    heap_nblocks.div_ceil(HEAPBLOCKS_PER_PAGE)
}

/// Initializes an empty map page: a standard header whose content area is the whole page.
pub fn init_page(p: &mut [u8]) {
    page::init(p, 0);
    page::set_lower(p, BLCKSZ as u16);
}

fn bits_at(p: &[u8], heap_block: BlockNumber) -> VmBits {
    if page::is_new(p) {
        return VmBits::NONE;
    }
    let (_, byte, shift) = location(heap_block);
    VmBits((p[byte] >> shift) & VmBits::VALID.0)
}

/// Sets bits on a map page (live path and redo).
pub fn apply_set(p: &mut [u8], heap_block: BlockNumber, bits: VmBits) {
    let (_, byte, shift) = location(heap_block);
    p[byte] |= (bits.0 & VmBits::VALID.0) << shift;
}

/// Clears `bits` for `count` heap blocks from `first` (all on one map page). Clearing
/// ALL_VISIBLE clears ALL_FROZEN too. Returns whether any bit changed (live path and redo).
pub fn apply_clear(p: &mut [u8], first: BlockNumber, count: u32, bits: VmBits) -> bool {
    let mask = effective_clear_mask(bits);
    let mut changed = false;
    for b in first.0..first.0.saturating_add(count) {
        let (_, byte, shift) = location(BlockNumber(b));
        let m = mask << shift;
        changed |= p[byte] & m != 0;
        p[byte] &= !m;
    }
    changed
}

fn effective_clear_mask(bits: VmBits) -> u8 {
    if bits.all_visible() {
        VmBits::VALID.0
    } else {
        bits.0 & VmBits::VALID.0
    }
}

/// The visibility map page a scan in block order is on, kept pinned between calls
/// ([`VisibilityMap::get_pinned`], [`VisibilityMap::lock_and_set`]), or the knowledge that
/// the map page is not there (the fork is missing or shorter).
///
/// A missing map page is remembered as missing, bits clear, until the holder sets bits
/// under it ([`VisibilityMap::lock_and_set`] pins the page it creates) or moves on to another
/// map page. Asking again would find out the same thing at the price of the storage
/// manager's locks for every heap page: a first VACUUM of a table, before its map exists,
/// spent 4% of its workers' CPU doing so, the two contending for those locks. It can go
/// stale only when another thread extends the fork meanwhile, which VACUUM's parallel
/// workers do for their own heap pages, never for another worker's (a heap page's bits are
/// set only by the worker that processes it); and a page read as clear is only a page the
/// scan does not skip.
#[derive(Default)]
pub struct MapPin<'p> {
    buf: Option<Buffer<'p>>,
    missing: Option<BlockNumber>,
}

impl<'p> MapPin<'p> {
    /// Drops the pin and forgets a missing page.
    pub fn clear(&mut self) {
        *self = MapPin::default();
    }

    /// The pinned map page, if any.
    pub fn buffer(&self) -> Option<&Buffer<'p>> {
        self.buf.as_ref()
    }

    fn block(&self) -> Option<BlockNumber> {
        self.buf.as_ref().map(|b| b.block())
    }
}

/// The visibility map of one heap relation.
pub struct VisibilityMap {
    /// The heap relation's file node (the map is its `_vm` fork).
    rel: Oid,
    /// Serializes extending the fork (PostgreSQL's relation extension lock).
    extend_lock: Mutex<()>,
}

impl VisibilityMap {
    pub fn new(rel: Oid) -> VisibilityMap {
        VisibilityMap { rel, extend_lock: Mutex::new(()) }
    }

    pub fn rel(&self) -> Oid {
        self.rel
    }

    fn tag(&self, map_block: BlockNumber) -> BufferTag {
        BufferTag { rel: self.rel, fork: Fork::Vm, block: map_block }
    }

    /// Pins an existing map page, or `None` when the fork does not reach it.
    fn existing<'p>(&self, pool: &'p BufferPool, map_block: BlockNumber) -> Result<Option<Buffer<'p>>> {
        if map_block.0 >= pool.smgr().nblocks(self.rel, Fork::Vm)? {
            return Ok(None);
        }
        Ok(Some(pool.read(self.tag(map_block), None)?))
    }

    /// Pins a map page, extending the fork with zero pages up to it first.
    fn pin_or_extend<'p>(&self, pool: &'p BufferPool, map_block: BlockNumber) -> Result<Buffer<'p>> {
        if map_block.0 >= pool.smgr().nblocks(self.rel, Fork::Vm)? {
            let _ext = self.extend_lock.lock();
            while map_block.0 >= pool.smgr().nblocks(self.rel, Fork::Vm)? {
                drop(pool.extend(self.rel, Fork::Vm, None)?);
            }
        }
        pool.read(self.tag(map_block), None)
    }

    /// Like [`Self::get`], keeping the map page pinned in `pin` for the next call
    /// (PostgreSQL's `vmbuffer`): one map page covers 32,672 heap pages, so a scan in block
    /// order looks the map page up once instead of once per heap page. A map page that is not
    /// there is remembered too (see [`MapPin`]).
    pub fn get_pinned<'p>(
        &self,
        pool: &'p BufferPool,
        heap_block: BlockNumber,
        pin: &mut MapPin<'p>,
    ) -> Result<VmBits> {
        let (map_block, _, _) = location(heap_block);
        if pin.missing == Some(map_block) {
            return Ok(VmBits::NONE);
        }
        if pin.block() != Some(map_block) {
            pin.clear();
            pin.buf = self.existing(pool, map_block)?;
            if pin.buf.is_none() {
                pin.missing = Some(map_block);
            }
        }
        Ok(match &pin.buf {
            Some(b) => bits_at(&b.read().0, heap_block),
            None => VmBits::NONE,
        })
    }

    /// The bits of `heap_block` (0 when the fork or the map page does not exist).
    pub fn get(&self, pool: &BufferPool, heap_block: BlockNumber) -> Result<VmBits> {
        let (map_block, _, _) = location(heap_block);
        let Some(buf) = self.existing(pool, map_block)? else { return Ok(VmBits::NONE) };
        let g = buf.read();
        Ok(bits_at(&g.0, heap_block))
    }

    /// Sets `bits` for the heap page in `heap_buf` and `PD_ALL_VISIBLE` on the page itself.
    /// The caller holds the heap page's exclusive lock; `heap_page` is its bytes. Returns the
    /// record's end LSN, or `None` when everything was already set (nothing logged).
    ///
    /// The caller guarantees the claim is true (every tuple visible to all, and frozen for
    /// ALL_FROZEN). ALL_FROZEN is refused without ALL_VISIBLE in the result.
    pub fn set(
        &self,
        env: MapEnv<'_>,
        heap_buf: &Buffer<'_>,
        heap_page: &mut [u8],
        bits: VmBits,
    ) -> Result<Option<Lsn>> {
        self.set_pinned(env, heap_buf, heap_page, bits, &mut None)
    }

    /// [`Self::set`], taking the map page from `pin` when it holds the right one and leaving
    /// it pinned there (see [`Self::get_pinned`]).
    pub fn set_pinned<'p>(
        &self,
        env: MapEnv<'p>,
        heap_buf: &Buffer<'_>,
        heap_page: &mut [u8],
        bits: VmBits,
        pin: &mut Option<Buffer<'p>>,
    ) -> Result<Option<Lsn>> {
        let heap_tag = heap_buf.tag();
        let heap_block = heap_tag.block;
        if heap_tag.rel != self.rel || heap_tag.fork != Fork::Main {
            return Err(Error::invalid(format!("visibility map of {} asked to set bits for {:?}", self.rel, heap_tag)));
        }
        if bits.0 & !VmBits::VALID.0 != 0 || bits == VmBits::NONE {
            return Err(Error::invalid(format!("invalid visibility map bits 0x{:02X}", bits.0)));
        }
        if page::is_new(heap_page) {
            return Err(Error::invalid(format!("heap block {heap_block} of {} is not initialized", self.rel)));
        }
        let (map_block, _, _) = location(heap_block);
        if pin.as_ref().map(|b| b.block()) != Some(map_block) {
            *pin = None;
            *pin = Some(self.pin_or_extend(env.pool, map_block)?);
        }
        let map_buf = pin.as_ref().ok_or_else(|| Error::invalid("visibility map page not pinned"))?;
        let mut g = map_buf.write();
        let old = bits_at(&g.0, heap_block);
        if !(old | bits).all_visible() {
            return Err(Error::invalid("ALL_FROZEN cannot be set without ALL_VISIBLE"));
        }
        let flag_set = page::flags(heap_page) & PD_ALL_VISIBLE != 0;
        if old.contains(bits) && flag_set {
            return Ok(None);
        }
        let init = page::is_new(&g.0);
        if init {
            init_page(&mut g.0);
        }
        apply_set(&mut g.0, heap_block, bits);
        page::set_flags(heap_page, page::flags(heap_page) | PD_ALL_VISIBLE);
        let mut main = heap_block.0.to_le_bytes().to_vec();
        main.push(bits.0);
        main.push(if init { FLAG_INIT_PAGE } else { 0 });
        let lsn = env.wal.insert(&RecordBuilder {
            toplevel_xid: crate::types::Xid::INVALID,
            rmgr: Rmgr::Heap2,
            info: XLOG_HEAP2_VISIBLE,
            xid: Xid::INVALID,
            blocks: vec![
                BlockRef {
                    keep_data: false,
                    id: 0,
                    tag: self.tag(map_block),
                    will_init: init,
                    page: Some(&g.0),
                    data: vec![],
                },
                BlockRef {
                    keep_data: false,
                    id: 1,
                    tag: heap_tag,
                    will_init: false,
                    page: Some(heap_page),
                    data: vec![],
                },
            ],
            main_data: main,
        })?;
        page::set_lsn(&mut g.0, lsn);
        page::set_lsn(heap_page, lsn);
        map_buf.mark_dirty();
        heap_buf.mark_dirty();
        Ok(Some(lsn))
    }

    /// For a heap record that sets the map bits of the page it changes (VACUUM's PRUNE_FREEZE
    /// and VACUUM records, [`crate::vacuum::wal`]): makes `pin` hold the map page of
    /// `heap_block` (extending the fork to it), locks it exclusively and sets `bits`. Returns
    /// the locked map page and whether this initialized it, or `None` when the bits were set
    /// already. The caller holds the heap page exclusively, sets `PD_ALL_VISIBLE` on it, logs
    /// its record with the map page as block 1 while holding both locks, and stamps both
    /// pages with the record's LSN.
    pub fn lock_and_set<'p>(
        &self,
        pool: &'p BufferPool,
        heap_block: BlockNumber,
        bits: VmBits,
        pin: &mut MapPin<'p>,
    ) -> Result<Option<(crate::sync::RwLockWriteGuard<'p, page::PageBuf>, bool)>> {
        if bits.0 & !VmBits::VALID.0 != 0 || !bits.all_visible() {
            return Err(Error::invalid(format!("invalid visibility map bits 0x{:02X} to set", bits.0)));
        }
        let (map_block, _, _) = location(heap_block);
        if pin.block() != Some(map_block) {
            pin.clear();
            pin.buf = Some(self.pin_or_extend(pool, map_block)?);
        }
        let map_buf = pin.buf.as_ref().ok_or_else(|| Error::invalid("visibility map page not pinned"))?;
        let mut g = map_buf.write();
        if bits_at(&g.0, heap_block).contains(bits) {
            return Ok(None);
        }
        let init = page::is_new(&g.0);
        if init {
            init_page(&mut g.0);
        }
        apply_set(&mut g.0, heap_block, bits);
        Ok(Some((g, init)))
    }

    /// The tag of the map page holding `heap_block`'s bits.
    pub fn tag_for(&self, heap_block: BlockNumber) -> BufferTag {
        self.tag(location(heap_block).0)
    }

    /// Clears `bits` of `heap_block` (ALL_VISIBLE takes ALL_FROZEN with it). Called with the
    /// heap page exclusively locked by the code that changes it, which clears `PD_ALL_VISIBLE`
    /// in its own logged change. Returns the record's end LSN, or `None` when nothing was set.
    pub fn clear(&self, env: MapEnv<'_>, heap_block: BlockNumber, bits: VmBits) -> Result<Option<Lsn>> {
        Ok(self.clear_noting(env, heap_block, bits)?.map(|(lsn, _)| lsn))
    }

    /// As [`VisibilityMap::clear`], also returning the bits the page had before.
    pub fn clear_noting(
        &self,
        env: MapEnv<'_>,
        heap_block: BlockNumber,
        bits: VmBits,
    ) -> Result<Option<(Lsn, VmBits)>> {
        self.clear_range(env, heap_block, 1, bits)
    }

    /// Clears bits for `count` heap blocks from `first`, all on one map page; the record's end
    /// LSN and the bits `first` had, or `None` when nothing was set.
    fn clear_range(
        &self,
        env: MapEnv<'_>,
        first: BlockNumber,
        count: u32,
        bits: VmBits,
    ) -> Result<Option<(Lsn, VmBits)>> {
        let (map_block, _, _) = location(first);
        debug_assert!(count >= 1 && location(BlockNumber(first.0 + count - 1)).0 == map_block);
        let Some(buf) = self.existing(env.pool, map_block)? else { return Ok(None) };
        let mut g = buf.write();
        let was = bits_at(&g.0, first);
        if page::is_new(&g.0) || !apply_clear(&mut g.0, first, count, bits) {
            return Ok(None);
        }
        let mut main = first.0.to_le_bytes().to_vec();
        main.extend_from_slice(&count.to_le_bytes());
        main.push(bits.0);
        let lsn = env.wal.insert(&RecordBuilder {
            toplevel_xid: crate::types::Xid::INVALID,
            rmgr: Rmgr::Heap2,
            info: XLOG_HEAP2_VM_CLEAR,
            xid: Xid::INVALID,
            blocks: vec![BlockRef {
                keep_data: false,
                id: 0,
                tag: self.tag(map_block),
                will_init: false,
                page: Some(&g.0),
                data: vec![],
            }],
            main_data: main,
        })?;
        page::set_lsn(&mut g.0, lsn);
        buf.mark_dirty();
        Ok(Some((lsn, was)))
    }

    /// `(all_visible_pages, all_frozen_pages)` over the whole map.
    pub fn count(&self, pool: &BufferPool) -> Result<(u64, u64)> {
        let (mut visible, mut frozen) = (0u64, 0u64);
        for b in 0..pool.smgr().nblocks(self.rel, Fork::Vm)? {
            let buf = pool.read(self.tag(BlockNumber(b)), None)?;
            let g = buf.read();
            if page::is_new(&g.0) {
                continue;
            }
            for &byte in &g.0[PAGE_HEADER_SIZE..] {
                visible += u64::from((byte & 0b0101_0101).count_ones());
                frozen += u64::from((byte & 0b1010_1010).count_ones());
            }
        }
        Ok((visible, frozen))
    }

    /// The all-visible bits set among the first `heap_nblocks` heap pages, counted per range
    /// of `range_pages` pages (a multiple of [`HEAPBLOCKS_PER_BYTE`]): one read of each map
    /// page.
    pub fn count_visible_by_range(&self, pool: &BufferPool, heap_nblocks: u32, range_pages: u32) -> Result<Vec<u32>> {
        assert!(range_pages > 0 && range_pages.is_multiple_of(HEAPBLOCKS_PER_BYTE));
        let mut out = vec![0u32; heap_nblocks.div_ceil(range_pages) as usize];
        let map_pages = map_pages_for(heap_nblocks).min(pool.smgr().nblocks(self.rel, Fork::Vm)?);
        for m in 0..map_pages {
            let buf = pool.read(self.tag(BlockNumber(m)), None)?;
            let g = buf.read();
            if page::is_new(&g.0) {
                continue;
            }
            let first = m * HEAPBLOCKS_PER_PAGE;
            let bytes = (heap_nblocks - first).min(HEAPBLOCKS_PER_PAGE).div_ceil(HEAPBLOCKS_PER_BYTE) as usize;
            for (i, &byte) in g.0[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + bytes].iter().enumerate() {
                let block = first + i as u32 * HEAPBLOCKS_PER_BYTE;
                out[(block / range_pages) as usize] += (byte & 0b0101_0101).count_ones();
            }
        }
        Ok(out)
    }

    /// Forgets every heap page at or past `new_heap_nblocks` (after the heap was truncated to
    /// that size): clears their bits on the last remaining map page and cuts the fork after it.
    /// Both steps are WAL-logged.
    pub fn truncate(&self, env: MapEnv<'_>, new_heap_nblocks: u32) -> Result<()> {
        let _ext = self.extend_lock.lock();
        let old_map_pages = env.pool.smgr().nblocks(self.rel, Fork::Vm)?;
        let keep = map_pages_for(new_heap_nblocks);
        let tail = new_heap_nblocks % HEAPBLOCKS_PER_PAGE;
        if tail != 0 && keep <= old_map_pages {
            let count = HEAPBLOCKS_PER_PAGE - tail;
            self.clear_range(env, BlockNumber(new_heap_nblocks), count, VmBits::VALID)?;
        }
        if keep < old_map_pages {
            let lsn = env.wal.insert(&RecordBuilder {
                toplevel_xid: crate::types::Xid::INVALID,
                rmgr: Rmgr::Storage,
                info: crate::wal::STORAGE_TRUNCATE,
                xid: Xid::INVALID,
                blocks: vec![],
                main_data: crate::wal::storage_main_data(self.rel, Fork::Vm, Some(keep)),
            })?;
            env.wal.flush(lsn)?;
            env.pool.drop_relation_buffers(self.rel, Some(Fork::Vm), BlockNumber(keep))?;
            env.pool
                .smgr()
                .truncate(self.rel, Fork::Vm, keep)
                .map_err(|e| env.wal.poison_after("truncating a visibility map", e))?;
        }
        Ok(())
    }

    /// Heap pages whose map bits disagree with the page's flags ([`flags_disagreement`]).
    /// `heap_flags` reads one heap page's `pd_flags`. Tests use it; `check` asks
    /// [`flags_disagreement`] page by page, together with its tuple-level checks.
    pub fn violations(
        &self,
        pool: &BufferPool,
        heap_nblocks: u32,
        mut heap_flags: impl FnMut(BlockNumber) -> Result<u16>,
    ) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for b in 0..heap_nblocks {
            let block = BlockNumber(b);
            let bits = self.get(pool, block)?;
            if bits == VmBits::NONE {
                continue;
            }
            if let Some(p) = flags_disagreement(bits, heap_flags(block)?) {
                out.push(format!("heap block {block}: {p}"));
            }
        }
        Ok(out)
    }
}

/// What is wrong with a heap page's map `bits` given the page's own `pd_flags`, if anything:
/// ALL_FROZEN without ALL_VISIBLE, or ALL_VISIBLE on a page without `PD_ALL_VISIBLE` (the map
/// claiming more than the page, DESIGN.md §4 invariant 4). The reverse, `PD_ALL_VISIBLE` with
/// the bits clear, is allowed: the map may say less than the page (VACUUM sets the bit again).
pub fn flags_disagreement(bits: VmBits, heap_flags: u16) -> Option<String> {
    if bits.all_frozen() && !bits.all_visible() {
        return Some("visibility map says ALL_FROZEN without ALL_VISIBLE".to_string());
    }
    if bits.all_visible() && heap_flags & PD_ALL_VISIBLE == 0 {
        return Some(format!("visibility map says {bits} but the page lacks PD_ALL_VISIBLE"));
    }
    None
}

/// Whether a record belongs to the visibility map (the recovery driver routes it here).
pub fn is_vm_record(rec: &DecodedRecord) -> bool {
    rec.rmgr == Rmgr::Heap2 && matches!(rec.info & 0xF0, XLOG_HEAP2_VISIBLE | XLOG_HEAP2_VM_CLEAR)
}

/// Applies one block of a VISIBLE or VM_CLEAR record (the caller restored images, skipped
/// pages already covering the record, and stamps the LSN).
pub fn redo_block(rec: &DecodedRecord, block_id: u8, block: BlockNumber, p: &mut [u8]) -> Result<()> {
    let mut m = Cursor::new(&rec.main_data, rec.lsn);
    match rec.info & 0xF0 {
        XLOG_HEAP2_VISIBLE => {
            let heap_block = BlockNumber(m.u32()?);
            let bits = VmBits(m.u8()?);
            let flags = m.u8()?;
            match block_id {
                0 => {
                    covers(rec, block, heap_block, "VISIBLE")?;
                    if flags & FLAG_INIT_PAGE != 0 {
                        init_page(p);
                    } else if page::is_new(p) {
                        return Err(Error::corrupt_wal(
                            rec.lsn,
                            format!("VISIBLE names map block {block}, which is empty"),
                        ));
                    }
                    apply_set(p, heap_block, bits);
                }
                _ => {
                    if page::is_new(p) {
                        return Err(Error::corrupt_wal(
                            rec.lsn,
                            format!("VISIBLE names heap block {block}, which is empty"),
                        ));
                    }
                    page::set_flags(p, page::flags(p) | PD_ALL_VISIBLE);
                }
            }
        }
        XLOG_HEAP2_VM_CLEAR => {
            let first = BlockNumber(m.u32()?);
            let count = m.u32()?;
            let bits = VmBits(m.u8()?);
            if count == 0 || location(BlockNumber(first.0.saturating_add(count - 1))).0 != location(first).0 {
                return Err(Error::corrupt_wal(rec.lsn, "VM_CLEAR range spans map pages"));
            }
            covers(rec, block, first, "VM_CLEAR")?;
            if !page::is_new(p) {
                apply_clear(p, first, count, bits);
            }
        }
        other => return Err(Error::corrupt_wal(rec.lsn, format!("not a visibility map record: 0x{other:02X}"))),
    }
    Ok(())
}

/// A map record's heap block must lie on the map page its block reference names; otherwise
/// redo would set or clear the bits of some other heap page (noticed while writing fuzz target
/// `wal_record`: nothing tied the two, so a record whose CRC matched changed the wrong page).
pub fn covers(rec: &DecodedRecord, map_block: BlockNumber, heap_block: BlockNumber, what: &str) -> Result<()> {
    let (on, _, _) = location(heap_block);
    if on != map_block {
        return Err(Error::corrupt_wal(
            rec.lsn,
            format!("{what} names heap block {heap_block} on map block {map_block}, but map block {on} covers it"),
        ));
    }
    Ok(())
}

/// One-line description for `settle waldump`.
pub fn describe(rec: &DecodedRecord) -> String {
    let mut m = Cursor::new(&rec.main_data, rec.lsn);
    let r: Result<String> = (|| {
        Ok(match rec.info & 0xF0 {
            XLOG_HEAP2_VISIBLE => {
                let heap_block = m.u32()?;
                let bits = VmBits(m.u8()?);
                let flags = m.u8()?;
                let init = if flags & FLAG_INIT_PAGE != 0 { ", init map page" } else { "" };
                format!("VISIBLE heap block: {heap_block}, flags: {bits}{init}")
            }
            XLOG_HEAP2_VM_CLEAR => {
                let first = m.u32()?;
                let count = m.u32()?;
                format!(
                    "VM_CLEAR heap blocks: {first}..{}, flags: {}",
                    u64::from(first) + u64::from(count),
                    VmBits(m.u8()?)
                )
            }
            _ => format!("UNKNOWN info 0x{:02X}", rec.info),
        })
    })();
    r.unwrap_or_else(|e| format!("(undecodable: {e})"))
}

/// Human rendering of one map page (`settle inspect`): the heap blocks with bits set.
pub fn describe_page(p: &[u8], map_block: BlockNumber) -> String {
    if page::is_new(p) {
        return format!("visibility map block {map_block}: new (no bits set)");
    }
    let base = map_block.0 * HEAPBLOCKS_PER_PAGE;
    let mut lines = vec![format!("visibility map block {map_block}: lsn {}", page::lsn(p))];
    for i in 0..HEAPBLOCKS_PER_PAGE {
        let b = BlockNumber(base + i);
        let bits = bits_at(p, b);
        if bits != VmBits::NONE {
            lines.push(format!("  heap block {b}: {bits}"));
        }
    }
    lines.join("\n")
}

/// Heap pages per range of [`ClearCounts`] and of VACUUM's per-range judgements (256 KB of
/// heap; a multiple of the map's pages per byte, so [`VisibilityMap::count_visible_by_range`]
/// counts whole bytes).
pub const RANGE_PAGES: u32 = 32;
const _: () = assert!(RANGE_PAGES.is_multiple_of(HEAPBLOCKS_PER_BYTE));

/// How many all-visible bits modifications cleared, per range of [`RANGE_PAGES`] heap pages,
/// since a VACUUM last took the counts: the evidence VACUUM's `adaptive` freeze policy judges
/// where freezing sticks by. Hot path (every clear): one shared lock, contended only by
/// [`ClearCounts::take`] growing the table, and one relaxed increment.
#[derive(Default)]
pub struct ClearCounts {
    counts: RwLock<Vec<AtomicU32>>,
}

impl ClearCounts {
    /// A modification cleared `block`'s all-visible bit. A block past the ranges the last
    /// [`ClearCounts::take`] covered is not counted: no VACUUM since the database was opened
    /// has left it all-visible (the table grew since, or its bit is older than the process).
    pub fn note_clear(&self, block: BlockNumber) {
        if let Some(c) = self.counts.read().get((block.0 / RANGE_PAGES) as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts since the last call, which it resets, over at least `ranges` ranges (the
    /// table now; ranges past its end that earlier calls covered are kept, counting zero
    /// until the table grows back), and from now on clears in all of them are counted.
    pub fn take(&self, ranges: usize) -> Vec<u32> {
        if self.counts.read().len() < ranges {
            let mut counts = self.counts.write();
            while counts.len() < ranges {
                counts.push(AtomicU32::new(0));
            }
        }
        self.counts.read().iter().map(|c| c.swap(0, Ordering::Relaxed)).collect()
    }
}

#[cfg(test)]
mod tests;
