//! Dead-TID stores for VACUUM.
//!
//! VACUUM's phase I (PostgreSQL `vacuumlazy.c`) scans the heap in ascending block order and
//! remembers every dead line pointer it finds, page by page, until `maintenance_work_mem` is
//! used up. Phase II then scans every index and asks, for each index entry in index order
//! (random relative to the heap), "is this TID dead?". Phase III walks the dead TIDs again in
//! block order to mark the line pointers unused. Lookups dominate: an index of N entries costs
//! N lookups against a store that was written once, in order.
//!
//! This crate holds that store and the structures it is measured against, all behind one
//! trait, [`DeadTids`], so one benchmark run compares them on the same sets:
//!
//! | structure | module | design |
//! |-----------|--------|--------|
//! | [`TidStore`] | [`store`] | settledb's store: groups of up to 1,024 pages in one byte arena, entropy-sized offset containers, a short lookup path |
//! | [`Array6`] | [`array6`] | PostgreSQL <= 16: sorted 6-byte `ItemPointerData` + binary search |
//! | [`RoaringRef`] | [`roaring_ref`] | `roaring::RoaringTreemap` keyed `block << 9 \| offset`, after `optimize()` |
//! | [`PgRadix`] | [`pgradix`] | PostgreSQL 17 `tidstore.c` over `radixtree.h`: adaptive radix tree, node kinds 4/16/48/256 |
//!
//! The benchmark, `settle bench tidstore`, lives in [`bench`] (the bdbench workload of the
//! pgsql-hackers thread "[PoC] Improve dead tuple storage for lazy vacuum").
//!
//! Non-goals: concurrent insertion (VACUUM's phase I is single-threaded here), deletion of
//! single TIDs, and persistence.

pub mod array6;
pub mod bench;
pub mod pgradix;
pub mod roaring_ref;
pub mod store;

pub use array6::Array6;
pub use pgradix::PgRadix;
pub use roaring_ref::RoaringRef;
pub use store::{Layout, TidStore};

/// The largest line-pointer number on a heap page (PostgreSQL `MaxOffsetNumber` for 8 KB pages:
/// `BLCKSZ / sizeof(ItemIdData)`). 8 KB heap pages hold at most 291 tuples
/// (`MaxHeapTuplesPerPage`), which is what the benchmark uses.
pub const MAX_OFFSET: u16 = 2048;

/// `MaxHeapTuplesPerPage` for 8 KB pages: the offset universe of the information-theoretic bound.
pub const MAX_HEAP_TUPLES_PER_PAGE: u16 = 291;

/// A heap tuple identifier, PostgreSQL's `ItemPointerData`: a block number and a 1-based
/// line-pointer offset. Orders as heap order (block, then offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tid {
    pub block: u32,
    pub offset: u16,
}

impl Tid {
    pub const fn new(block: u32, offset: u16) -> Self {
        Tid { block, offset }
    }
}

impl std::fmt::Display for Tid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({},{})", self.block, self.offset)
    }
}

/// The store cannot take this page without exceeding its byte budget. The store is unchanged:
/// it still holds exactly the pages added before, and VACUUM should now run its index and heap
/// passes, [`DeadTids::reset`], and add the page again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dead-TID store is full (its byte budget would be exceeded)")
    }
}

impl std::error::Error for Full {}

/// What VACUUM needs from a dead-TID store. Every structure in this crate implements it.
///
/// Caller contract (checked with `assert!`): pages are added in strictly ascending block order,
/// each page's offsets strictly ascending and within `1..=MAX_OFFSET`.
pub trait DeadTids {
    /// A short name for tables ("tidstore", "array6", ...).
    fn name(&self) -> &'static str;

    /// Adds one page's dead offsets. Returns [`Full`] (and leaves the store unchanged) if the
    /// page does not fit in the byte budget. An empty `offsets` is a no-op.
    fn add_page(&mut self, block: u32, offsets: &[u16]) -> Result<(), Full>;

    /// Ends the insertion phase: flushes buffered pages and returns unused capacity to the
    /// allocator. Lookups are correct without it; memory is tight only after it.
    fn freeze(&mut self) {}

    /// Is `tid` in the store?
    fn contains(&self, tid: Tid) -> bool;

    /// Batched lookup: sets bit `i` of `out` (bit `i % 64` of word `i / 64`) iff `tids[i]` is in
    /// the store, clearing the others. `out` must hold at least `tids.len().div_ceil(64)` words.
    /// Implementations may overlap the memory latency of consecutive probes.
    fn contains_many(&self, tids: &[Tid], out: &mut [u64]) {
        assert!(out.len() * 64 >= tids.len(), "contains_many: output bitmap too short");
        for (w, chunk) in out.iter_mut().zip(tids.chunks(64)) {
            let mut word = 0u64;
            for (i, &t) in chunk.iter().enumerate() {
                word |= (self.contains(t) as u64) << i;
            }
            *w = word;
        }
    }

    /// The dead offsets of one page: `out` is emptied, then filled (ascending); returns
    /// whether the page has any. For a caller that asks about many offsets of few pages
    /// (index vacuuming, whose leaves point at a handful of heap pages each), one lookup per
    /// page instead of one per offset.
    ///
    /// The default asks [`DeadTids::contains`] for every offset up to [`MAX_OFFSET`]: right for
    /// a structure whose `contains` is right for all of them.
    fn page_offsets(&self, block: u32, out: &mut Vec<u16>) -> bool {
        out.clear();
        out.extend((1..=MAX_OFFSET).filter(|&o| self.contains(Tid::new(block, o))));
        !out.is_empty()
    }

    /// Calls `f(block, offsets)` for every page, in ascending block order, offsets ascending.
    fn for_each_page(&self, f: &mut dyn FnMut(u32, &[u16]));

    /// Bytes of heap memory the structure holds (exact for all but [`RoaringRef`], whose
    /// figure is computed from its container statistics).
    fn memory_bytes(&self) -> usize;

    /// Number of TIDs stored.
    fn num_tids(&self) -> u64;

    /// Forgets every TID and frees the memory; the budget stays.
    fn reset(&mut self);
}

/// Checks the caller contract of [`DeadTids::add_page`].
pub(crate) fn check_page(last_block: Option<u32>, block: u32, offsets: &[u16]) {
    if let Some(last) = last_block {
        assert!(block > last, "add_page: block {block} after block {last}: blocks must ascend");
    }
    let mut prev = 0u16;
    for &o in offsets {
        assert!(o > prev && o <= MAX_OFFSET, "add_page: block {block}: offsets must ascend within 1..={MAX_OFFSET}");
        prev = o;
    }
}

/// The capacity a `Vec` grows to when `add` more elements must fit: doubling, at least `min`.
/// Every structure grows through this rule so that its budget check can predict its memory.
pub(crate) fn grown_capacity(len: usize, cap: usize, add: usize, min: usize) -> usize {
    let need = len + add;
    if need <= cap {
        cap
    } else {
        need.max(cap * 2).max(min)
    }
}

/// Reserves `v` to exactly `new_cap` elements if it is smaller.
pub(crate) fn reserve_to<T>(v: &mut Vec<T>, new_cap: usize) {
    if new_cap > v.capacity() {
        v.reserve_exact(new_cap - v.len());
    }
}
