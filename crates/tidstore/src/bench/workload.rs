//! The bdbench workload, the information-theoretic bound, and the counting allocator.
//!
//! bdbench (Masahiko Sawada's `pgtools/bdbench`, used throughout the pgsql-hackers thread
//! "[PoC] Improve dead tuple storage for lazy vacuum") builds its sets with
//! `prepare(maxblk, dead_per_page, interval_in_page, page_interval)`: every page with
//! `blk % page_interval == 0` has the dead offsets `iv, 2·iv, …, k·iv`, and the index holds
//! every TID `(blk, 1..=k·iv)` of every page `0..maxblk`. The random case and the real-table
//! shapes ([`Shape::HotSpot`], [`Shape::Runs`]) draw each page's dead offsets from a seeded
//! hash of its block, so any TID's deadness can be recomputed without the set.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;

use crate::MAX_HEAP_TUPLES_PER_PAGE;

/// Heap bytes allocated minus bytes freed through [`CountingAlloc`] since counting was
/// enabled (wrapping: only differences between two readings mean anything).
pub static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// Counting is off until [`enable_counting`]: the `settle` binary installs the allocator for
/// every command, and only the tidstore benchmark pays for the shared counter (two threads
/// bumping one cache line cost a few percent of an OLTP benchmark's time).
static COUNTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Starts counting allocations (once on, it stays on).
pub fn enable_counting() {
    COUNTING.store(true, Ordering::Relaxed);
}

#[inline]
fn counting() -> bool {
    COUNTING.load(Ordering::Relaxed)
}

/// A global allocator that counts live heap bytes: one relaxed atomic add per allocation and
/// one subtract per free, on top of the system allocator. The library never installs it; the
/// `settle` binary does (`#[global_allocator]`), so `settle bench tidstore` can measure every
/// structure's memory exactly, including allocations it cannot see itself (roaring's).
pub struct CountingAlloc;

// SAFETY: every method forwards to `System` with the same arguments and only adds bookkeeping.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && counting() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() && counting() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        if counting() {
            ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && counting() {
            ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
            ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

/// Live heap bytes, if the counting allocator is installed.
pub fn allocated_bytes() -> Option<usize> {
    let before = ALLOCATED.load(Ordering::Relaxed);
    let probe = std::hint::black_box(vec![0u8; 4096]);
    let during = ALLOCATED.load(Ordering::Relaxed);
    drop(probe);
    (during.wrapping_sub(before) >= 4096).then(|| ALLOCATED.load(Ordering::Relaxed))
}

/// How a case chooses its dead TIDs.
#[derive(Clone, Copy, Debug, Serialize)]
pub enum Shape {
    /// bdbench `prepare(maxblk, dead_per_page, interval, page_interval)`.
    Bdbench { dead_per_page: u16, interval: u16, page_interval: u32 },
    /// `percent` of pages dead, each with 1..=`max_k` distinct offsets among 1..=`max_offset`.
    Random { seed: u64, percent: u32, max_k: u16, max_offset: u16 },
    /// Updates concentrated on recently inserted rows: in the last `hot_percent` of the table,
    /// `percent` of pages dead with `min_k..=max_k` offsets each; elsewhere `cold_permille` ‰
    /// of pages with 1–3 (old rows touched now and then). Offsets among 1..=`max_offset`.
    HotSpot { seed: u64, hot_percent: u32, percent: u32, min_k: u16, max_k: u16, cold_permille: u32, max_offset: u16 },
    /// Bulk `DELETE`s of key ranges on a table in insertion order: in `run_percent` of the
    /// [`RUN_STRETCH`]-block stretches, one run of up to `max_run` consecutive pages with every
    /// line pointer dead (`1..=max_offset`); elsewhere `percent` of pages with 1..=`max_k`
    /// scattered offsets.
    Runs { seed: u64, run_percent: u32, max_run: u32, percent: u32, max_k: u16, max_offset: u16 },
}

/// The stretch of blocks of [`Shape::Runs`] that holds at most one bulk-deleted run.
pub const RUN_STRETCH: u32 = 16384;

#[derive(Clone, Debug, Serialize)]
pub struct Case {
    pub name: String,
    pub maxblk: u32,
    pub shape: Shape,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The seeded hash of one block, from which its page is drawn.
fn hash(seed: u64, blk: u32) -> u64 {
    splitmix(seed ^ u64::from(blk).wrapping_mul(0xA24B_AED4_963E_E407))
}

/// `min_k..=max_k` distinct offsets among `1..=max_offset` drawn from `h`, ascending, into `out`.
fn random_offsets(mut h: u64, min_k: u16, max_k: u16, max_offset: u16, out: &mut Vec<u16>) {
    h = splitmix(h);
    let k = usize::from(min_k) + (h % u64::from(max_k - min_k + 1)) as usize;
    let mut bits = [0u64; 32];
    let mut n = 0;
    while n < k {
        h = splitmix(h);
        let o = 1 + (h % u64::from(max_offset)) as usize;
        if bits[o / 64] >> (o % 64) & 1 == 0 {
            bits[o / 64] |= 1 << (o % 64);
            n += 1;
        }
    }
    for (w, &word) in bits.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            out.push((w * 64) as u16 + word.trailing_zeros() as u16);
            word &= word - 1;
        }
    }
}

impl Case {
    /// Index entries per page: the index holds `(blk, 1..=m)` for every block.
    pub fn index_per_page(&self) -> u16 {
        match self.shape {
            Shape::Bdbench { dead_per_page, interval, .. } => dead_per_page * interval,
            Shape::Random { max_offset, .. } | Shape::HotSpot { max_offset, .. } | Shape::Runs { max_offset, .. } => {
                max_offset
            }
        }
    }

    pub fn index_tids(&self) -> u64 {
        u64::from(self.maxblk) * u64::from(self.index_per_page())
    }

    /// The dead offsets of `blk` into `out` (cleared first; empty if the page has none).
    pub fn page(&self, blk: u32, out: &mut Vec<u16>) {
        out.clear();
        match self.shape {
            Shape::Bdbench { dead_per_page, interval, page_interval } => {
                if blk.is_multiple_of(page_interval) {
                    out.extend((1..=dead_per_page).map(|i| i * interval));
                }
            }
            Shape::Random { seed, percent, max_k, max_offset } => {
                let h = hash(seed, blk);
                if h % 100 < u64::from(percent) {
                    random_offsets(h, 1, max_k, max_offset, out);
                }
            }
            Shape::HotSpot { seed, hot_percent, percent, min_k, max_k, cold_permille, max_offset } => {
                let h = hash(seed, blk);
                let hot_from = (u64::from(self.maxblk) * u64::from(100 - hot_percent) / 100) as u32;
                if blk >= hot_from {
                    if h % 100 < u64::from(percent) {
                        random_offsets(h, min_k, max_k, max_offset, out);
                    }
                } else if h % 1000 < u64::from(cold_permille) {
                    random_offsets(h, 1, 3, max_offset, out);
                }
            }
            Shape::Runs { seed, run_percent, max_run, percent, max_k, max_offset } => {
                let stretch = blk / RUN_STRETCH;
                let r = hash(seed ^ 0x7275_6e73, stretch);
                let start = (r >> 8) as u32 % RUN_STRETCH;
                let len = 1 + (r >> 40) as u32 % max_run;
                let d = blk % RUN_STRETCH;
                if r % 100 < u64::from(run_percent) && d >= start && d - start < len {
                    out.extend(1..=max_offset);
                    return;
                }
                let h = hash(seed, blk);
                if h % 100 < u64::from(percent) {
                    random_offsets(h, 1, max_k, max_offset, out);
                }
            }
        }
    }

    /// Is `(blk, off)` dead? Agrees with [`Case::page`].
    pub fn is_dead(&self, blk: u32, off: u16, buf: &mut Vec<u16>) -> bool {
        match self.shape {
            Shape::Bdbench { dead_per_page, interval, page_interval } => {
                blk.is_multiple_of(page_interval)
                    && off.is_multiple_of(interval)
                    && off / interval >= 1
                    && off / interval <= dead_per_page
            }
            Shape::Random { .. } | Shape::HotSpot { .. } | Shape::Runs { .. } => {
                self.page(blk, buf);
                buf.binary_search(&off).is_ok()
            }
        }
    }
}

/// `ln n!`: exact below 256, Stirling's series above (error far below a bit for our sizes).
fn ln_factorial(n: u64) -> f64 {
    if n < 256 {
        return (2..=n).map(|i| (i as f64).ln()).sum();
    }
    let x = n as f64;
    x * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI * x).ln() + 1.0 / (12.0 * x) - 1.0 / (360.0 * x * x * x)
}

/// `log2 C(n, k)`.
pub fn log2_binomial(n: u64, k: u64) -> f64 {
    if k > n {
        return 0.0;
    }
    (ln_factorial(n) - ln_factorial(k) - ln_factorial(n - k)) / std::f64::consts::LN_2
}

/// The information-theoretic bound in bits: `log2 C(pages, P) + Σ log2 C(291, k_i)` over the
/// `P` dead pages with `k_i` dead offsets each.
pub struct Bound {
    per_k: Vec<f64>,
    pub pages_dead: u64,
    pub offset_bits: f64,
}

impl Bound {
    pub fn new() -> Bound {
        let u = u64::from(MAX_HEAP_TUPLES_PER_PAGE);
        Bound { per_k: (0..=u).map(|k| log2_binomial(u, k)).collect(), pages_dead: 0, offset_bits: 0.0 }
    }

    pub fn add_page(&mut self, k: usize) {
        self.pages_dead += 1;
        self.offset_bits += self.per_k[k.min(self.per_k.len() - 1)];
    }

    pub fn bytes(&self, pages: u64) -> f64 {
        (log2_binomial(pages, self.pages_dead) + self.offset_bits) / 8.0
    }
}

impl Default for Bound {
    fn default() -> Self {
        Bound::new()
    }
}
