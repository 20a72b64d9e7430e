//! `TidStore`: settledb's dead-TID store.
//!
//! # The workload it is shaped for
//!
//! Written once, in ascending block order, a page at a time; then read many times by random
//! point lookups (index vacuuming), once in order (heap vacuuming), and thrown away. So the
//! layout is built append-only into one contiguous byte arena with no per-allocation overhead,
//! and every lookup is two or three dependent memory accesses.
//!
//! # Layout
//!
//! ```text
//!  block index: Vec<u32>, at most 2 per group: top[b] = last group starting at or before
//!  ┌────┬────┬────┬─────       block dir[0].first + (b << top_shift)
//!  │ 0  │ 0  │ 1  │ …
//!  └────┴────┴──┬─┴─────
//!               ▼
//!  directory: Vec<Entry>, 16 bytes per group, sorted by first block
//!  ┌──────────────────────────────┬───────────────────────────────┬─────
//!  │ first=0   pos=0  meta  aux   │ first=1024 pos=…  meta  aux   │ …
//!  └──────────────┬───────────────┴───────────────────────────────┴─────
//!                 │ meta: pages n, kind, uniform?, bucketed?, u (largest offset)
//!                 │ aux: code, slot bits, Elias–Fano width, stride; or a block mask
//!  arena (bytes)  ▼
//!  ┌───────────────┬───────────────────────────────────────┬─────────┬─ ─ ─┬───────┐
//!  │ block set?    │ slots: page0 | page1 | … | pageN       │ group 2 │ …    │ 16× 0 │
//!  └───────────────┴───────────────────────────────────────┴─────────┴─ ─ ─┴───────┘
//!   a delta list     a container each (after a code byte and       PAD
//!   (LIST), a mask   and offsets if the pages differ in shape)
//!   and offsets (WIDE)
//!
//!  presence filter (sparse sets, built by freeze): one bit per 2^s blocks, at most 8 per page
//! ```
//!
//! * **Block index** — finds a block's group: the last group starting at or before the
//!   block's bucket and the next bucket's, and between them (most buckets hold at most one
//!   group start) one branch-free step, else a binary search. Its buckets are as small as
//!   two entries per group allow (`top_shift` grows as the set spreads), so no distribution
//!   sends it far: the old interpolation guess went wrong on uneven spans (a hot spot at the
//!   end of a table, sparse stretches) and fell back to a search over the directory.
//! * **Directory** ([`group::Entry`]) — per group: first block, arena position, and the
//!   group's header: page count, how its blocks are known (contiguous, every `s`-th block, a
//!   24-bit mask in the entry, a 128-bit mask in the arena, or a delta list), whether every
//!   page has the same code (and which, with its container length and Elias–Fano width),
//!   and the universe `u`. A dense set's lookup still tries the global interpolation guess
//!   first (a multiply and a shift): it is exact on a dense set.
//! * **Group** ([`group`]) — up to 1,024 evenly spaced pages of one shape, up to 64 evenly
//!   spaced mixed pages, a dense stretch of under 128 blocks, or up to 16 pages of a sparse
//!   stretch; each page's slot is found from the entry (and the group's mask and offsets)
//!   without a search or a sum.
//! * **Container** ([`container`]) — each page's offsets as the shortest of a `u`-bit bitmap, a
//!   single run, 1–6 offsets packed verbatim, or an Elias–Fano code (bucketed when no two
//!   offsets of any page in the group share a bucket), bit-packed back to back.
//! * **Presence filter** — for a sparse set (its blocks span 8 to 1,024 times its pages), one
//!   bit per bucket of `2^s` blocks, at most 8 bits per page, so most buckets are empty and
//!   most probes (index entries whose heap page has no dead tuple) end on one bit. Room for it
//!   is kept while pages are added; [`DeadTids::freeze`] fills it.
//!
//! # Costs
//!
//! Shuffled single probes (index vacuuming) miss the cache once each, and what bounds them is
//! how many probes the CPU overlaps. That is limited by the instructions each probe keeps in
//! flight, above all those that wait for its miss, and by mispredicted branches on loaded
//! data, which throw the overlap away, far more than by the number of misses; so the lookup
//! is shaped to run few and to branch on nothing it waits for:
//!
//! * a contiguous uniform group (every dense set) is found by one interpolation guess and
//!   needs nothing but its entry to locate the container: the fast path in
//!   [`TidStore::contains`] saves no registers and sends everything else out of line;
//! * every other group is found by the block index and one branch-free step, and locates its
//!   page's slot by arithmetic (STRIDE), a popcount (MASK, WIDE) or a lane-wise compare of
//!   its delta list (LIST: three to eight deltas per 64-bit word, the "has a zero lane"
//!   test), never a search that branches on the arena;
//! * the directory of ten million dense pages is 156 KB, inside the L2 cache;
//! * after the container's miss: one bit (bitmap), two compares (run), a five-instruction
//!   "zero lane" test (1–6 packed offsets), or a bit test, a `popcnt` and one low part read
//!   from the same 16 bytes (bucketed Elias–Fano); only the unary Elias–Fano form needs a
//!   select (branch-free broadword, about forty instructions); a mixed group's pages of up to
//!   six offsets are all packed, so the test does not branch on their code;
//! * on x86-64 with POPCNT, LZCNT, BMI1 and BMI2 a copy of the lookup compiled for them runs
//!   (one-instruction popcount and variable shifts), its out-of-line parts too; other CPUs
//!   run the portable copy;
//! * on a sparse set, a probe of a page with no dead tuple (most of them) ends at the
//!   presence filter.
//!
//! [`TidStore::contains_many`] overlaps misses across a window of probes with prefetches.
//! (Huge pages for the arena were tried: no gain on the benchmark machine, whose kernel gave
//! none.) `settle bench tidstore` measures every case against PostgreSQL 17's radix tree.
//!
//! Memory, for the bdbench set of 10 offsets every 20th line pointer on every page: 53 bits
//! of bucketed container and 1/64 byte of directory per page, under the information-theoretic
//! bound for 10 offsets among 291 (the bound does not know that the offsets stop at 200).
//! Mixed pages pay a code byte, and a WIDE group's an offset of about 10 bits and the mask's
//! 128 bits; the block index 8 bytes per group; the filter at most a byte per page. One dead
//! TID per 100 pages over 2^32 blocks: about 3.5 bytes per TID. Never more than the 6-byte
//! array plus a small constant (tests/properties.rs checks it).
//!
//! # Budget
//!
//! [`TidStore::memory_bytes`] is exactly the heap capacity the store holds. The arena,
//! directory and block index always have room for the group being filled, and the filter for
//! the pages added, so [`DeadTids::freeze`] never grows anything, and `add_page` returns
//! [`Full`] — changing nothing — if the page would need more capacity than the budget allows.
//! Growth doubles, capped at the budget; `freeze` returns the unused capacity. (Like PostgreSQL's `repalloc`, a growth step briefly holds the old and the
//! new buffer; the budget bounds what the store keeps, not that transient.)
//!
//! # Not done
//!
//! Removing single TIDs; inserting out of block order; offsets above [`MAX_OFFSET`].

mod bits;
mod container;
mod group;

use bits::PAD;
use group::{
    Entry, GroupPlan, PageSummary, DENSE_SPAN, GROUP_PAGES_CONTIG, GROUP_PAGES_LIST, GROUP_PAGES_MIXED, LIST_DENSE_MIN,
    STRIDE_MAX, WIDE_SPAN,
};

use crate::{check_page, grown_capacity, reserve_to, DeadTids, Full, Tid, MAX_OFFSET};

/// Probes in flight in [`TidStore::contains_many`].
const WINDOW: usize = 16;

/// settledb's dead-TID store. See the module documentation for the layout.
#[derive(Debug)]
pub struct TidStore {
    budget_bytes: usize,
    /// Does the CPU have the instructions of [`TidStore::contains_bit_isa`]?
    bit_isa: bool,
    /// One entry per encoded group, by first block.
    dir: Vec<Entry>,
    /// [`TidStore::slope`] of `dir`.
    dir_mult: u64,
    /// The block index: `top[b]` is the last group whose first block is at or before block
    /// `dir[0].first + (b << top_shift)`, for every such block up to the last group's first.
    /// At most [`top_cap`]`(dir.len())` entries (`top_shift` grows to keep it so).
    top: Vec<u32>,
    top_shift: u32,
    /// The presence filter of a sparse set, built by [`DeadTids::freeze`]: bit `i` is set iff
    /// some page lies in blocks `filter_base + (i << filter_shift)` onwards, `1 << filter_shift`
    /// of them. `filter_shift` is [`NO_FILTER`] when there is none. While pages are added its
    /// capacity is kept at [`filter_words`] so that `freeze` has room to build it.
    filter: Vec<u64>,
    filter_base: u32,
    filter_shift: u32,
    num_pages: usize,
    first_block: u32,
    /// Encoded groups, then [`PAD`] zero bytes (once anything is stored).
    arena: Vec<u8>,
    /// The group being filled: its pages' summaries and offsets, not yet encoded.
    staged: [PageSummary; GROUP_PAGES_CONTIG],
    staged_n: usize,
    /// Do the staged pages differ in shape (count, first or last offset)?
    staged_mixed: bool,
    /// The block step between the staged pages if they are evenly spaced (from two pages on;
    /// 0 once the steps differ).
    staged_stride: u32,
    /// Sum and largest of the staged pages' [`slot_estimate`]s (the padding rule of mixed
    /// groups, whose pages all take the longest page's slot).
    staged_est_sum: u32,
    staged_est_max: u32,
    /// Can every staged page be written in the bucketed form ([`container::bucketable`])?
    staged_bucketable: bool,
    /// The largest offset among the staged pages.
    /// (A `u32`, not a `u16`: a 2-byte store followed by this field's wider reload defeated
    /// store-to-load forwarding and cost a quarter of `add_page`.)
    staged_u: u32,
    staged_offsets: Vec<u16>,
    num_tids: u64,
    last_block: Option<u32>,
    /// The last page shape (count, first, last offset) seen by `add_page`, whether pages
    /// of that shape have a bucketed form, and their [`slot_estimate`].
    shape_cache: ((u16, u16, u16), bool, u32),
}

impl TidStore {
    /// An empty store that will hold at most `budget_bytes` bytes of heap memory.
    pub fn new(budget_bytes: usize) -> TidStore {
        TidStore {
            budget_bytes,
            bit_isa: bit_isa(),
            dir: Vec::new(),
            dir_mult: 0,
            top: Vec::new(),
            top_shift: 0,
            filter: Vec::new(),
            filter_base: 0,
            filter_shift: NO_FILTER,
            num_pages: 0,
            first_block: 0,
            arena: Vec::new(),
            staged: [PageSummary::default(); GROUP_PAGES_CONTIG],
            staged_n: 0,
            staged_mixed: false,
            staged_stride: 0,
            staged_est_sum: 0,
            staged_est_max: 0,
            staged_bucketable: true,
            staged_u: 0,
            staged_offsets: Vec::new(),
            num_tids: 0,
            last_block: None,
            shape_cache: ((0, 0, 0), false, 0),
        }
    }

    /// The same store, but its lookups use only the portable code path, never the one compiled
    /// for POPCNT/LZCNT/BMI1/BMI2 (for tests, and to measure what those instructions buy).
    pub fn portable(mut self) -> TidStore {
        self.bit_isa = false;
        self
    }

    /// How the encoded groups are laid out (staged pages not counted).
    pub fn layout(&self) -> Layout {
        let mut l = Layout { groups: self.dir.len(), filtered: self.filter_shift != NO_FILTER, ..Layout::default() };
        for e in &self.dir {
            l.pages += e.n();
            l.uniform_groups += usize::from(e.uniform());
            l.contiguous_uniform_groups += usize::from(e.contiguous_uniform());
            l.bucketed_groups += usize::from(e.bucketed());
            l.wide_groups += usize::from(e.wide());
            l.list_groups += usize::from(e.list());
        }
        l
    }

    pub fn budget_bytes(&self) -> usize {
        self.budget_bytes
    }

    /// Exact heap bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.arena.capacity()
            + self.dir.capacity() * 16
            + self.top.capacity() * 4
            + self.filter.capacity() * 8
            + self.staged_offsets.capacity() * 2
    }

    /// Is `tid` in the store? Hot path: one directory probe, then one group.
    #[inline]
    pub fn contains(&self, tid: Tid) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.bit_isa {
            // SAFETY: `bit_isa` is set only when the CPU has the features `contains_bit_isa`
            // is compiled for.
            return unsafe { self.contains_bit_isa(tid) };
        }
        self.contains_inline::<false>(tid)
    }

    /// [`TidStore::contains`] compiled for CPUs with POPCNT, LZCNT, BMI1 and BMI2 (x86-64-v3
    /// has them all): the rank of a bucketed container is one `popcnt`, and variable shifts
    /// and masks are single instructions that leave `cl` alone. Every instruction a probe
    /// runs after its cache miss counts: they decide how many probes the CPU overlaps.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt,lzcnt,bmi1,bmi2")]
    unsafe fn contains_bit_isa(&self, tid: Tid) -> bool {
        self.contains_inline::<true>(tid)
    }

    /// The lookup; `ISA` says that it runs inside a function compiled for the CPUs of
    /// [`TidStore::contains_bit_isa`], so its out-of-line parts must be too.
    #[inline(always)]
    fn contains_inline<const ISA: bool>(&self, tid: Tid) -> bool {
        // Fast path: the interpolation guess lands on a contiguous uniform group holding the
        // block (every probe of a dense set). Everything about the container is then in the
        // entry; anything else goes out of line, so this path saves no registers.
        let dir = &self.dir[..];
        if self.staged_n == 0 && !dir.is_empty() {
            let g = ((u64::from(tid.block.wrapping_sub(dir[0].first)) * self.dir_mult) >> 32) as usize;
            let e = &dir[g.min(dir.len() - 1)];
            let d = tid.block.wrapping_sub(e.first);
            if e.contiguous_uniform() && (d as usize) < e.n() {
                return self.contiguous_contains(e, d, tid.offset);
            }
        }
        #[cfg(target_arch = "x86_64")]
        if ISA {
            // SAFETY: `ISA` is true only inside `contains_bit_isa` and `contains_many_bit_isa`,
            // which run only when the CPU has the features.
            return unsafe { self.contains_general_bit_isa(tid) };
        }
        self.contains_general(tid)
    }

    /// Is `offset` dead on block `e.first + d` of the [`Entry::contiguous_uniform`] group `e`,
    /// which holds that block (`d < e.n()`)?
    #[inline(always)]
    fn contiguous_contains(&self, e: &Entry, d: u32, offset: u16) -> bool {
        let q = e.pos as usize * 8 + d as usize * e.contiguous_bits() as usize;
        let (code, bucketed, l, u) = (e.uniform_code(), e.bucketed(), e.contiguous_l(), e.u());
        container::contains_with(&self.arena, q, code, bucketed, l, u, u32::from(offset))
    }

    /// Is `tid` in group `g`, which is the last group starting at or before its block?
    #[inline(always)]
    fn group_contains_fast<const ISA: bool>(&self, g: usize, tid: Tid) -> bool {
        let e = &self.dir[g];
        if e.contiguous_uniform() {
            let d = tid.block - e.first;
            return (d as usize) < e.n() && self.contiguous_contains(e, d, tid.offset);
        }
        #[cfg(target_arch = "x86_64")]
        if ISA {
            // SAFETY: as in `contains_inline`.
            return unsafe { self.group_contains_bit_isa(g, tid) };
        }
        self.group_contains_outlined(g, tid)
    }

    #[inline(never)]
    fn group_contains_outlined(&self, g: usize, tid: Tid) -> bool {
        self.group_contains(g, tid)
    }

    /// [`TidStore::group_contains_outlined`] for the CPUs of [`TidStore::contains_bit_isa`].
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "popcnt,lzcnt,bmi1,bmi2")]
    unsafe fn group_contains_bit_isa(&self, g: usize, tid: Tid) -> bool {
        self.group_contains(g, tid)
    }

    /// [`TidStore::contains_general`] for the CPUs of [`TidStore::contains_bit_isa`].
    #[cfg(target_arch = "x86_64")]
    #[inline(never)]
    #[target_feature(enable = "popcnt,lzcnt,bmi1,bmi2")]
    unsafe fn contains_general_bit_isa(&self, tid: Tid) -> bool {
        self.contains_general_inline(tid)
    }

    /// [`TidStore::contains`] off the fast path.
    #[inline(never)]
    fn contains_general(&self, tid: Tid) -> bool {
        self.contains_general_inline(tid)
    }

    #[inline(always)]
    fn contains_general_inline(&self, tid: Tid) -> bool {
        if self.staged_n > 0 {
            return self.contains_staging(tid);
        }
        if self.filter_shift != NO_FILTER {
            // A sparse set: most probes fall on a stretch without pages, one bit says so.
            let x = u64::from(tid.block.wrapping_sub(self.filter_base)) >> self.filter_shift;
            if let Some(w) = self.filter.get((x >> 6) as usize) {
                if w >> (x & 63) & 1 == 0 {
                    return false;
                }
            }
        }
        match self.find_group(tid.block) {
            Some(g) => self.group_contains(g, tid),
            None => false,
        }
    }

    /// [`TidStore::contains`] while pages are staged (before [`DeadTids::freeze`]).
    #[cold]
    #[inline(never)]
    fn contains_staging(&self, tid: Tid) -> bool {
        if tid.block >= self.staged[0].block {
            return self.staged_contains(tid);
        }
        match self.find_group(tid.block) {
            Some(g) => self.group_contains(g, tid),
            None => false,
        }
    }

    /// The last group whose first block is `<= block`: the block index gives the groups
    /// starting at or before the block's bucket and the next bucket, and a binary search
    /// between them (most buckets hold one or two group starts) finishes. Whatever the
    /// distribution, no interpolation guess to go wrong.
    #[inline(always)]
    fn find_group(&self, block: u32) -> Option<usize> {
        let dir = &self.dir[..];
        let n = dir.len();
        if n == 0 || block < dir[0].first {
            return None;
        }
        let b = (u64::from(block - dir[0].first) >> self.top_shift) as usize;
        let top = &self.top[..];
        if b >= top.len() {
            return Some(n - 1);
        }
        let lo = top[b] as usize;
        let hi = if b + 1 < top.len() { top[b + 1] as usize } else { n - 1 };
        if hi <= lo + 1 {
            // The usual case: at most one group starts inside the bucket; no branch on it.
            let next = dir[hi].first;
            return Some(lo + usize::from((hi > lo) & (next <= block)));
        }
        Some(lo + dir[lo + 1..=hi].partition_point(|e| e.first <= block))
    }

    /// Where [`TidStore::find_group`] starts its search for `block` (for prefetching).
    #[inline(always)]
    fn top_guess(&self, block: u32) -> usize {
        let b = (u64::from(block.saturating_sub(self.dir[0].first)) >> self.top_shift) as usize;
        self.top.get(b).map_or(self.dir.len() - 1, |&g| g as usize)
    }

    /// Adds the last group of `dir` to the block index, coarsening the buckets first if the
    /// index would outgrow [`top_cap`] (whose capacity `add_page` has reserved).
    fn index_last_group(&mut self) {
        let g = self.dir.len() - 1;
        let (base, f) = (self.dir[0].first, self.dir[g].first);
        let limit = top_cap(self.dir.len());
        while ((u64::from(f - base) >> self.top_shift) as usize) >= limit {
            self.top_shift += 1;
            let len = self.top.len().div_ceil(2);
            for b in 0..len {
                self.top[b] = self.top[2 * b];
            }
            self.top.truncate(len);
        }
        let last = (u64::from(f - base) >> self.top_shift) as usize;
        debug_assert!(last < self.top.capacity(), "block index capacity reserved");
        for b in self.top.len()..=last {
            let start = u64::from(base) + ((b as u64) << self.top_shift);
            self.top.push(if start == u64::from(f) { g as u32 } else { g as u32 - 1 });
        }
    }

    /// `(n - 1) / (last first block - first first block)` in 32.32 fixed point (0 for one
    /// group): the interpolation slope of [`TidStore::find_group`]. At most `1 << 32`, as the
    /// first blocks are distinct, so the product with a 32-bit block delta fits 64 bits.
    fn slope(dir: &[Entry]) -> u64 {
        match dir {
            [] | [_] => 0,
            [first, .., last] => (((dir.len() - 1) as u64) << 32) / u64::from(last.first - first.first),
        }
    }

    #[inline(always)]
    fn group_contains(&self, g: usize, tid: Tid) -> bool {
        let e = &self.dir[g];
        let a = &self.arena[..];
        let Some(r) = e.rank(a, tid.block - e.first) else {
            return false;
        };
        let (code, bit) = e.container(a, r);
        if e.uniform() {
            container::contains_with(a, bit, code, e.bucketed(), e.uniform_l(), e.u(), u32::from(tid.offset))
        } else {
            container::contains(a, bit, code, e.u(), u32::from(tid.offset))
        }
    }

    fn staged_contains(&self, tid: Tid) -> bool {
        let mut start = 0usize;
        for p in &self.staged[..self.staged_n] {
            let end = start + usize::from(p.k);
            if p.block == tid.block {
                return self.staged_offsets[start..end].binary_search(&tid.offset).is_ok();
            }
            start = end;
        }
        false
    }

    /// Batched lookup with a software pipeline: at step `i`, probe `i - 2W` is resolved (its
    /// group is in cache by now), probe `i - W` is located in the directory and its group's
    /// first two cache lines prefetched, and probe `i` has its directory slot prefetched, so
    /// up to `2W` cache misses are in flight at once. Hot path.
    pub fn contains_many(&self, tids: &[Tid], out: &mut [u64]) {
        #[cfg(target_arch = "x86_64")]
        if self.bit_isa {
            // SAFETY: as in `contains`.
            return unsafe { self.contains_many_bit_isa(tids, out) };
        }
        self.contains_many_inline::<false>(tids, out)
    }

    /// [`TidStore::contains_many`] for the CPUs of [`TidStore::contains_bit_isa`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt,lzcnt,bmi1,bmi2")]
    unsafe fn contains_many_bit_isa(&self, tids: &[Tid], out: &mut [u64]) {
        self.contains_many_inline::<true>(tids, out)
    }

    #[inline(always)]
    fn contains_many_inline<const ISA: bool>(&self, tids: &[Tid], out: &mut [u64]) {
        assert!(out.len() * 64 >= tids.len(), "contains_many: output bitmap too short");
        out.iter_mut().for_each(|w| *w = 0);
        let n = tids.len();
        let dir = &self.dir[..];
        if dir.is_empty() || self.staged_n > 0 {
            for (i, &t) in tids.iter().enumerate() {
                out[i / 64] |= u64::from(self.contains(t)) << (i % 64);
            }
            return;
        }
        let mut ring = [usize::MAX; WINDOW];
        for i in 0..n + 2 * WINDOW {
            if i >= 2 * WINDOW {
                let j = i - 2 * WINDOW;
                let g = ring[j % WINDOW];
                if g != usize::MAX && self.group_contains_fast::<ISA>(g, tids[j]) {
                    out[j / 64] |= 1 << (j % 64);
                }
            }
            if i < n {
                prefetch(dir.as_ptr().wrapping_add(self.top_guess(tids[i].block)).cast());
            }
            if i >= WINDOW && i - WINDOW < n {
                let j = i - WINDOW;
                let g = self.find_group(tids[j].block).unwrap_or(usize::MAX);
                ring[j % WINDOW] = g;
                if g != usize::MAX {
                    let e = &dir[g];
                    let p = self.arena.as_ptr().wrapping_add(e.prefetch_byte(tids[j].block.wrapping_sub(e.first)));
                    prefetch(p);
                    prefetch(p.wrapping_add(64));
                }
            }
        }
    }

    /// [`DeadTids::page_offsets`]: one directory probe and one container decode.
    pub fn page_offsets(&self, block: u32, out: &mut Vec<u16>) -> bool {
        out.clear();
        if self.staged_n > 0 && block >= self.staged[0].block {
            let mut start = 0usize;
            for p in &self.staged[..self.staged_n] {
                let end = start + usize::from(p.k);
                if p.block == block {
                    out.extend_from_slice(&self.staged_offsets[start..end]);
                    return !out.is_empty();
                }
                start = end;
            }
            return false;
        }
        let Some(g) = self.find_group(block) else { return false };
        let e = &self.dir[g];
        let a = &self.arena[..];
        let Some(r) = e.rank(a, block - e.first) else { return false };
        let (code, bit) = e.container(a, r);
        container::decode(a, bit, code, e.bucketed(), e.u(), out);
        !out.is_empty()
    }

    /// Pages in ascending block order, each with its offsets.
    pub fn iter(&self) -> impl Iterator<Item = (u32, OffsetSet)> + '_ {
        let groups = (0..self.dir.len()).flat_map(move |g| {
            let e = self.dir[g];
            let a = &self.arena[..];
            (0..e.n()).map(move |r| {
                let (code, bit) = e.container(a, r);
                let mut offsets = Vec::new();
                container::decode(a, bit, code, e.bucketed(), e.u(), &mut offsets);
                (e.first + e.delta(a, r), OffsetSet { offsets })
            })
        });
        let mut start = 0usize;
        let staged = self.staged[..self.staged_n].iter().map(move |p| {
            let end = start + usize::from(p.k);
            let offsets = self.staged_offsets[start..end].to_vec();
            start = end;
            (p.block, OffsetSet { offsets })
        });
        groups.chain(staged)
    }

    /// Builds the presence filter of a sparse set in the capacity kept for it (freeing it
    /// for a dense one): buckets of the fewest blocks (a power of two) whose bits fit.
    fn build_filter(&mut self) {
        let Some(last) = self.last_block.filter(|_| self.staged_n == 0 && self.filter_shift == NO_FILTER) else {
            return;
        };
        let span = last - self.first_block;
        let bits = (self.filter.capacity() * 64).min(FILTER_SPARSE * self.num_pages);
        if filter_words(self.num_pages, span) == 0 || bits == 0 {
            self.filter = Vec::new();
            return;
        }
        let mut shift = 0;
        while (u64::from(span) >> shift) + 1 > bits as u64 {
            shift += 1;
        }
        let words = ((u64::from(span) >> shift) as usize + 1).div_ceil(64);
        debug_assert!(words <= self.filter.capacity());
        self.filter.clear();
        self.filter.resize(words, 0);
        let a = &self.arena[..];
        for e in &self.dir {
            for r in 0..e.n() {
                let x = (e.first + e.delta(a, r) - self.first_block) >> shift;
                self.filter[x as usize / 64] |= 1 << (x % 64);
            }
        }
        self.filter.shrink_to_fit();
        self.filter_base = self.first_block;
        self.filter_shift = shift;
    }

    fn staged_slice(&self, i: usize) -> &[u16] {
        let start: usize = self.staged[..i].iter().map(|p| usize::from(p.k)).sum();
        &self.staged_offsets[start..start + usize::from(self.staged[i].k)]
    }

    /// Encodes the staged pages as a group. Capacity was reserved by `add_page`.
    fn flush(&mut self) {
        if self.staged_n == 0 {
            return;
        }
        let pages = &self.staged[..self.staged_n];
        let plan = GroupPlan::new(pages, self.staged_bucketable);
        debug_assert!(self.arena.capacity() >= self.arena.len() + plan.bytes());
        let pos = self.arena.len() - PAD;
        self.arena.truncate(pos);
        let mut arena = std::mem::take(&mut self.arena);
        let mut starts = [0usize; GROUP_PAGES_CONTIG + 1];
        for (i, p) in pages.iter().enumerate() {
            starts[i + 1] = starts[i] + usize::from(p.k);
        }
        let offsets = &self.staged_offsets;
        let entry = plan.encode(pages, |i| &offsets[starts[i]..starts[i + 1]], &mut arena);
        arena.resize(arena.len() + PAD, 0);
        self.arena = arena;
        self.dir.push(entry);
        self.dir_mult = Self::slope(&self.dir);
        self.index_last_group();
        self.staged_n = 0;
        self.staged_mixed = false;
        self.staged_stride = 0;
        self.staged_est_sum = 0;
        self.staged_est_max = 0;
        self.staged_bucketable = true;
        self.staged_u = 0;
        self.staged_offsets.clear();
    }

    /// Does the staged group end before this page `p`? A group stays one whose lookup finds
    /// the page's slot without a search while it can: evenly spaced blocks of one shape (up to
    /// [`GROUP_PAGES_CONTIG`] pages), or any dense stretch within a WIDE group's
    /// [`WIDE_SPAN`] blocks (dense: under [`DENSE_SPAN`] blocks so far, or at least
    /// [`LIST_DENSE_MIN`] pages). A group that would leave those forms ends there, unless it is
    /// a sparse one, which goes on as a LIST group up to [`GROUP_PAGES_LIST`] pages, or mixed
    /// and evenly spaced (up to [`GROUP_PAGES_MIXED`]). Those two pad every page's slot to the
    /// longest page's, so a mixed one also ends where that would cost more than twice its
    /// pages' own estimate.
    fn must_flush(&self, p: PageSummary, est: u32) -> bool {
        let n = self.staged_n;
        if n == 0 {
            return false;
        }
        if n == GROUP_PAGES_CONTIG {
            return true;
        }
        let (first, last) = (self.staged[0], self.staged[n - 1]);
        let same = !self.staged_mixed && (p.k, p.min, p.max) == (first.k, first.min, first.max);
        let step = p.block - last.block;
        let even = |stride: u32| (1..=STRIDE_MAX).contains(&stride);
        let stays_even = (n == 1 || self.staged_stride == step) && even(step);
        if same && stays_even {
            return false;
        }
        let span = p.block - first.block;
        let cur_span = last.block - first.block;
        if span < WIDE_SPAN && (span < DENSE_SPAN || n >= LIST_DENSE_MIN) {
            return false;
        }
        if !same {
            let max = u64::from(self.staged_est_max.max(est));
            let sum = u64::from(self.staged_est_sum) + u64::from(est);
            if (n as u64 + 1) * max > 2 * sum + 256 {
                return true;
            }
        }
        if stays_even {
            return n >= GROUP_PAGES_MIXED;
        }
        let list = n >= 2
            && !even(self.staged_stride)
            && !(cur_span < WIDE_SPAN && (cur_span < DENSE_SPAN || n >= LIST_DENSE_MIN));
        n >= if list { GROUP_PAGES_LIST } else { LIST_DENSE_MIN }
    }

    /// Capacities after adding a page: (arena, dir, staged offsets), or `Full`.
    fn plan_capacity(&self, summary: PageSummary, bucketable: bool, est: u32) -> Result<Caps, Full> {
        let flush = self.must_flush(summary, est);
        let first = if self.num_pages == 0 { summary.block } else { self.first_block };
        let filter_need = filter_words(self.num_pages + 1, summary.block - first);
        let filter_cap = self.filter.capacity();
        let filter_grown = if filter_cap >= filter_need { filter_cap } else { filter_need.max(2 * filter_cap) };
        // Fast path: the current capacity holds even a loose upper bound of what is needed.
        let staged_u = self.staged_u;
        let (closed_upper, open_upper, staged_after) = if flush {
            (upper_bytes(self.staged_n, staged_u), upper_bytes(1, u32::from(summary.max)), usize::from(summary.k))
        } else {
            (
                0,
                upper_bytes(self.staged_n + 1, staged_u.max(u32::from(summary.max))),
                self.staged_offsets.len() + usize::from(summary.k),
            )
        };
        if self.arena.capacity() >= self.arena.len().max(PAD) + closed_upper + open_upper
            && self.dir.capacity() >= self.dir.len() + 2
            && self.top.capacity() >= top_cap(self.dir.capacity())
            && self.staged_offsets.capacity() >= staged_after
            && filter_cap >= filter_need
        {
            return Ok((self.arena.capacity(), self.dir.capacity(), self.staged_offsets.capacity(), filter_cap));
        }
        let top = self.top.capacity();
        let total = |a: usize, d: usize, s: usize, f: usize| a + d * 16 + top_cap(d).max(top) * 4 + s * 2 + f * 8;
        // Grow to cover the loose bound while the budget allows, so that the following pages
        // take the fast path again instead of planning their group exactly, page after page.
        let loose = self.arena.len().max(PAD) + closed_upper + open_upper;
        let loose_caps = (
            grown_capacity(self.arena.len(), self.arena.capacity(), loose - self.arena.len(), 4096),
            grown_capacity(self.dir.len(), self.dir.capacity(), 2, 64),
            if self.staged_offsets.capacity() >= staged_after {
                self.staged_offsets.capacity()
            } else {
                staged_after.max(self.staged_offsets.capacity() * 2).max(64)
            },
            filter_grown,
        );
        if total(loose_caps.0, loose_caps.1, loose_caps.2, loose_caps.3) <= self.budget_bytes {
            return Ok(loose_caps);
        }
        let (arena_len, dir_len, staged_len, open) = if flush {
            let closed = GroupPlan::new(&self.staged[..self.staged_n], self.staged_bucketable).bytes();
            let open = GroupPlan::new(&[summary], bucketable).bytes();
            (self.arena.len().max(PAD) + closed, self.dir.len() + 1, 0, open)
        } else {
            let mut pages = self.staged[..self.staged_n].to_vec();
            pages.push(summary);
            let open = GroupPlan::new(&pages, self.staged_bucketable && bucketable).bytes();
            (self.arena.len().max(PAD), self.dir.len(), self.staged_offsets.len(), open)
        };
        // Room for the open group to be encoded without growing: arena, its PAD, a dir slot.
        let arena_need = arena_len + open;
        let arena_cap = grown_capacity(self.arena.len(), self.arena.capacity(), arena_need - self.arena.len(), 4096);
        let dir_cap = grown_capacity(self.dir.len(), self.dir.capacity(), dir_len + 1 - self.dir.len(), 64);
        let staged_cap = grown_capacity(staged_len, self.staged_offsets.capacity(), usize::from(summary.k), 64);
        if total(arena_cap, dir_cap, staged_cap, filter_grown) <= self.budget_bytes {
            return Ok((arena_cap, dir_cap, staged_cap, filter_grown));
        }
        // Doubling overshoots: grow only as far as needed.
        let exact = (
            arena_need.max(self.arena.capacity()),
            (dir_len + 1).max(self.dir.capacity()),
            (staged_len + usize::from(summary.k)).max(self.staged_offsets.capacity()),
            filter_need.max(filter_cap),
        );
        let room = self.budget_bytes.saturating_sub(total(exact.0, exact.1, exact.2, exact.3));
        if total(exact.0, exact.1, exact.2, exact.3) > self.budget_bytes {
            return Err(Full);
        }
        // Spend what is left of the budget on the arena, which grows fastest.
        let arena_cap = exact.0 + room.min(arena_cap - exact.0);
        Ok((arena_cap, exact.1, exact.2, exact.3))
    }
}

/// Capacities: (arena bytes, directory entries, staged offsets, filter words).
type Caps = (usize, usize, usize, usize);

/// [`TidStore::filter_shift`] when there is no presence filter.
const NO_FILTER: u32 = u32::MAX;

/// A set is sparse, and gets a presence filter, when its blocks span at least this many
/// times its pages; the filter then has at most this many bits per page (buckets of
/// `1 << filter_shift` blocks, a power of two), so that most buckets are empty.
const FILTER_SPARSE: usize = 8;

/// ... but not when they span this many times its pages or more: a page every thousand
/// blocks already costs nearly the 6 bytes of a TID when it has one, and the store promises
/// never to take more.
const FILTER_GAP_MAX: usize = 1024;

/// The filter words to keep room for: [`FILTER_SPARSE`] bits per page if `pages` pages span
/// `span` blocks past the first sparsely (see [`FILTER_GAP_MAX`]), else none.
fn filter_words(pages: usize, span: u32) -> usize {
    if (FILTER_SPARSE * pages..FILTER_GAP_MAX * pages).contains(&(span as usize)) {
        (FILTER_SPARSE * pages).div_ceil(64)
    } else {
        0
    }
}

/// The most block-index entries for `groups` directory entries: 8 bytes per group and a
/// constant, half the directory's own 16.
fn top_cap(groups: usize) -> usize {
    2 * groups + 2
}

/// An estimate of a page's slot in a mixed group, in bits: its code byte and its container in
/// its own universe `u` (the group's may be larger). Only for the padding rule of
/// `must_flush`.
fn slot_estimate(code: u8, u: u32) -> u32 {
    8 + container::code_bits(code, u)
}

/// An upper bound of the arena bytes of a group of `n` pages whose largest offset is `u`:
/// block list (32 bits per page at most), code bytes, and containers no longer than bitmaps.
fn upper_bytes(n: usize, u: u32) -> usize {
    2 + n * ((u as usize).div_ceil(8) + 1 + 4)
}

/// Does this CPU have POPCNT, LZCNT, BMI1 and BMI2?
fn bit_isa() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("popcnt")
            && std::arch::is_x86_feature_detected!("lzcnt")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("bmi2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Prefetches the cache line at `p` into all cache levels; a no-op off x86-64.
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p.cast::<i8>(), core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// What [`TidStore::layout`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub groups: usize,
    pub pages: usize,
    /// Groups whose pages share one code.
    pub uniform_groups: usize,
    /// Uniform groups of consecutive blocks (the lookup's fast path).
    pub contiguous_uniform_groups: usize,
    /// Uniform Elias–Fano groups in the bucketed form.
    pub bucketed_groups: usize,
    /// Groups with a block mask in the arena (dense stretches that are not evenly spaced).
    pub wide_groups: usize,
    /// Groups whose blocks are a delta list (sparse stretches).
    pub list_groups: usize,
    /// Has the store a presence filter (a sparse set, after `freeze`)?
    pub filtered: bool,
}

/// One page's dead offsets, ascending.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffsetSet {
    offsets: Vec<u16>,
}

impl OffsetSet {
    pub fn as_slice(&self) -> &[u16] {
        &self.offsets
    }
    pub fn len(&self) -> usize {
        self.offsets.len()
    }
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }
    pub fn contains(&self, offset: u16) -> bool {
        self.offsets.binary_search(&offset).is_ok()
    }
}

impl DeadTids for TidStore {
    fn name(&self) -> &'static str {
        "tidstore"
    }

    fn add_page(&mut self, block: u32, offsets: &[u16]) -> Result<(), Full> {
        check_page(self.last_block, block, offsets);
        if offsets.is_empty() {
            return Ok(());
        }
        let summary = PageSummary { block, k: offsets.len() as u16, min: offsets[0], max: offsets[offsets.len() - 1] };
        debug_assert!(summary.max <= MAX_OFFSET);
        // Only an Elias–Fano page with a bucketed form can use it; skip the scan otherwise.
        let shape = (summary.k, summary.min, summary.max);
        if self.shape_cache.0 != shape {
            let u = u32::from(summary.max);
            let code = container::choose_code(offsets.len(), summary.min, summary.max, u);
            self.shape_cache = (shape, container::bucket_bits(code, u).is_some(), slot_estimate(code, u));
        }
        let est = self.shape_cache.2;
        let bucketable = self.shape_cache.1 && container::bucketable(offsets);
        let (arena_cap, dir_cap, staged_cap, filter_cap) = self.plan_capacity(summary, bucketable, est)?;
        if self.filter_shift != NO_FILTER {
            // Added after freeze: the filter no longer covers every page.
            self.filter_shift = NO_FILTER;
            self.filter.clear();
        }
        reserve_to(&mut self.filter, filter_cap);
        reserve_to(&mut self.arena, arena_cap);
        reserve_to(&mut self.dir, dir_cap);
        reserve_to(&mut self.top, top_cap(dir_cap));
        if self.must_flush(summary, est) {
            self.flush();
        }
        reserve_to(&mut self.staged_offsets, staged_cap);
        if self.arena.is_empty() {
            self.arena.resize(PAD, 0);
        }
        if self.staged_n > 0 {
            let s = self.staged[0];
            self.staged_mixed |= (summary.k, summary.min, summary.max) != (s.k, s.min, s.max);
            let step = block - self.staged[self.staged_n - 1].block;
            if self.staged_n == 1 {
                self.staged_stride = step;
            } else if self.staged_stride != step {
                self.staged_stride = 0;
            }
        }
        self.staged_est_sum += est;
        self.staged_est_max = self.staged_est_max.max(est);
        self.staged_bucketable &= bucketable;
        self.staged[self.staged_n] = summary;
        self.staged_n += 1;
        self.staged_u = self.staged_u.max(u32::from(summary.max));
        self.staged_offsets.extend_from_slice(offsets);
        self.num_tids += offsets.len() as u64;
        if self.num_pages == 0 {
            self.first_block = block;
        }
        self.num_pages += 1;
        self.last_block = Some(block);
        debug_assert!(self.memory_bytes() <= self.budget_bytes);
        Ok(())
    }

    fn freeze(&mut self) {
        self.flush();
        self.staged_offsets = Vec::new();
        self.arena.shrink_to_fit();
        self.dir.shrink_to_fit();
        self.top.shrink_to_fit();
        self.build_filter();
    }

    fn contains(&self, tid: Tid) -> bool {
        TidStore::contains(self, tid)
    }

    fn contains_many(&self, tids: &[Tid], out: &mut [u64]) {
        TidStore::contains_many(self, tids, out)
    }

    fn page_offsets(&self, block: u32, out: &mut Vec<u16>) -> bool {
        TidStore::page_offsets(self, block, out)
    }

    fn for_each_page(&self, f: &mut dyn FnMut(u32, &[u16])) {
        let a = &self.arena[..];
        let mut buf = Vec::with_capacity(usize::from(MAX_OFFSET));
        for e in &self.dir {
            for r in 0..e.n() {
                let (code, bit) = e.container(a, r);
                container::decode(a, bit, code, e.bucketed(), e.u(), &mut buf);
                f(e.first + e.delta(a, r), &buf);
            }
        }
        for i in 0..self.staged_n {
            f(self.staged[i].block, self.staged_slice(i));
        }
    }

    fn memory_bytes(&self) -> usize {
        TidStore::memory_bytes(self)
    }

    fn num_tids(&self) -> u64 {
        self.num_tids
    }

    fn reset(&mut self) {
        let bit_isa = self.bit_isa;
        *self = TidStore::new(self.budget_bytes);
        self.bit_isa = bit_isa;
    }
}
