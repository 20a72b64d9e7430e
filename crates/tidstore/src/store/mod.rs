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
//! * **Block index** ([`index`]) — finds a block's group: the last group starting at or before the
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
//!   without a search or a sum. Where one group ends and the next begins is decided page by
//!   page as pages arrive ([`planning`]).
//! * **Container** ([`container`]) — each page's offsets as the shortest of a `u`-bit bitmap, a
//!   single run, 1–6 offsets packed verbatim, or an Elias–Fano code (bucketed when no two
//!   offsets of any page in the group share a bucket), bit-packed back to back.
//! * **Presence filter** ([`index`]) — for a sparse set (its blocks span 8 to 1,024 times
//!   its pages), one bit per bucket of `2^s` blocks, at most 8 bits per page, so most buckets
//!   are empty and most probes (index entries whose heap page has no dead tuple) end on one
//!   bit. Room for it is kept while pages are added; [`DeadTids::freeze`] fills it.
//!
//! # Costs
//!
//! Shuffled single probes (index vacuuming) miss the cache once each, and what bounds them is
//! how many probes the CPU overlaps. That is limited by the instructions each probe keeps in
//! flight, above all those that wait for its miss, and by mispredicted branches on loaded
//! data, which throw the overlap away, far more than by the number of misses; so the lookup
//! is shaped to run few and to branch on little it waits for:
//!
//! * a contiguous uniform group (every dense set) is found by one interpolation guess and
//!   needs nothing but its entry to locate the container: the fast path in
//!   [`TidStore::contains`] saves no registers and sends everything else out of line;
//! * every other group is found by the block index and one branch-free step, and locates its
//!   page's slot by arithmetic (STRIDE), a popcount (MASK, WIDE) or a lane-wise compare of
//!   its delta list (LIST: three to eight deltas per 64-bit word, the "has a zero lane"
//!   test; a branch-free binary search for deltas over 18 bits), never a search that
//!   branches on the arena;
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
//! TID per 100 pages: about 5 bytes per TID, one of them the filter's (the benchmark's sparse
//! case: 4.7 bytes per TID at 1.5 TIDs per page). Never more than the 6-byte array plus a
//! small constant (tests/properties.rs checks it).
//!
//! # Budget
//!
//! [`TidStore::memory_bytes`] is exactly the heap capacity the store holds. The arena,
//! directory and block index always have room for the group being filled, and the filter for
//! the pages added, so [`DeadTids::freeze`] never grows anything, and `add_page` returns
//! [`Full`] — changing nothing — if the page would need more capacity than the budget allows.
//! Growth doubles, capped at the budget; `freeze` returns the unused capacity. (Like
//! PostgreSQL's `repalloc`, a growth step briefly holds the old and the new buffer; the
//! budget bounds what the store keeps, not that transient.)
//!
//! # Not done
//!
//! Removing single TIDs; inserting out of block order; offsets above [`MAX_OFFSET`].

mod bits;
mod container;
mod group;
mod index;
mod planning;

use bits::PAD;
use group::{Entry, GroupPlan, PageSummary, GROUP_PAGES_CONTIG};
use index::{top_cap, NO_FILTER};
use planning::slot_estimate;

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
    /// Can every staged page be written in the bucketed form at the group's universe,
    /// `staged_u` ([`container::bucketable`])?
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

    /// `(n - 1) / (last first block - first first block)` in 32.32 fixed point (0 for one
    /// group): the interpolation slope of the fast path of [`TidStore::contains`]. At most
    /// `1 << 32`, as the first blocks are distinct, so the product with a 32-bit block delta
    /// fits 64 bits.
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
            e.deltas(a).enumerate().map(move |(r, d)| {
                let (code, bit) = e.container(a, r);
                let mut offsets = Vec::new();
                container::decode(a, bit, code, e.bucketed(), e.u(), &mut offsets);
                (e.first + d, OffsetSet { offsets })
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

    fn staged_slice(&self, i: usize) -> &[u16] {
        let start: usize = self.staged[..i].iter().map(|p| usize::from(p.k)).sum();
        &self.staged_offsets[start..start + usize::from(self.staged[i].k)]
    }

    /// Can every staged page still be written bucketed when the group's universe becomes `u`
    /// (at least the staged pages' largest offset)? Rescans their offsets only when `u` grows.
    fn staged_bucketable_at(&self, u: u32) -> bool {
        if !self.staged_bucketable || u == self.staged_u {
            return self.staged_bucketable;
        }
        let mut at = 0;
        self.staged[..self.staged_n].iter().all(|p| {
            let k = usize::from(p.k);
            let ok = container::bucketable(&self.staged_offsets[at..at + k], u);
            at += k;
            ok
        })
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
        let flush = self.must_flush(summary, est);
        // Whether the open group (this page, with the staged pages unless they are flushed
        // first) can be written bucketed: at the group's universe, for every page of it.
        let u = if flush { u32::from(summary.max) } else { self.staged_u.max(u32::from(summary.max)) };
        let bucketable =
            self.shape_cache.1 && container::bucketable(offsets, u) && (flush || self.staged_bucketable_at(u));
        let (arena_cap, dir_cap, staged_cap, filter_cap) = self.plan_capacity(summary, bucketable, flush)?;
        if self.filter_shift != NO_FILTER {
            // Added after freeze: the filter no longer covers every page.
            self.filter_shift = NO_FILTER;
            self.filter.clear();
        }
        reserve_to(&mut self.filter, filter_cap);
        reserve_to(&mut self.arena, arena_cap);
        reserve_to(&mut self.dir, dir_cap);
        reserve_to(&mut self.top, top_cap(dir_cap));
        if flush {
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
        self.staged_bucketable = bucketable;
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
            for (r, d) in e.deltas(a).enumerate() {
                let (code, bit) = e.container(a, r);
                container::decode(a, bit, code, e.bucketed(), e.u(), &mut buf);
                f(e.first + d, &buf);
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
