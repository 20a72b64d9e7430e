//! Groups: runs of non-empty pages encoded together, described by one 16-byte directory
//! [`Entry`], shaped so that a lookup finds its page's container from the entry and at most
//! the group's first bytes, with no search and no sum, and, but for whether the page is
//! there at all, no branch on data it has to wait for (a mispredicted branch after a cache
//! miss keeps the CPU from overlapping the next probes' misses).
//!
//! ```text
//! Entry (16 bytes, 4 per cache line)
//!   first   u32  the group's first block
//!   pos     u32  arena byte where the group's bytes start
//!   meta    u32  n-1 (bits 0-11) | kind (12-13) | uniform (14) | bucketed (15)
//!                | u, the largest offset in the group (16-27) | WIDE (28, with kind MASK)
//!   aux     u32  MASK: code (bits 0-7) | bit 8+d set iff block first+d is in the group (d < 24)
//!                mixed WIDE: slot offset width
//!                otherwise: code if uniform (0-7) | slot bits (8-19)
//!                | Elias–Fano width l if uniform (20-23) | STRIDE step or LIST delta width (24-31)
//!
//! arena bytes at pos
//!   LIST         the n-1 deltas block-first of pages 1.., w bits each
//!   WIDE         16 bytes: bit d set iff block first+d is in the group (d < 128);
//!                if mixed, the n-1 offsets of slots 1.. from slot 0, w bits each
//!   slots        page 0's, page 1's, … as one bit string, padded to a byte:
//!                uniform: the container, `slot bits` long
//!                mixed:   the page's code byte and container, zero-padded to `slot bits`
//!                         (WIDE: not padded; its offsets locate it)
//! ```
//!
//! Kinds, by how a lookup finds the rank of block `first + d`:
//!
//! | kind | blocks | rank | made for |
//! |------|--------|------|----------|
//! | CONTIG | `first..first+n` | `d` | dense sets |
//! | STRIDE | every `s`-th block, `s <= 255` | `d / s` (a multiply by a reciprocal) | regular sets (every 20th page) |
//! | MASK | span under 24, uniform | popcount below `d` in the entry's mask | short stretches |
//! | WIDE | span under 128, at least 4 pages | popcount in the arena's 128-bit mask | dense stretches of any spacing |
//! | LIST | anything else, up to 16 pages | compare `d` with the deltas, several at once | sparse stretches |
//!
//! A uniform group (every page the same code: VACUUM sees runs of similar pages) puts page
//! `r`'s container `r * slot bits` in, and its entry carries the container length and the
//! Elias–Fano width ready for use, so the lookup does no arithmetic on the code before it
//! issues the container's load. A mixed group pads every page's slot to the longest when
//! that costs little (at most an eighth; or, past a WIDE group's span, at most twice the
//! pages' own length); a mixed WIDE group instead stores each slot's offset, so pages of very
//! different lengths (1 to 60 dead tuples) cost what they need. In a mixed group, pages of up
//! to six offsets take the packed form even where Elias–Fano is a little shorter
//! ([`container::mixed_code`]): one branch-free test for all of them.
//!
//! Evenly spaced groups of one shape hold up to [`GROUP_PAGES_CONTIG`] pages (their rank is
//! arithmetic, so size costs the lookup nothing), mixed ones up to [`GROUP_PAGES_MIXED`],
//! LIST groups up to [`GROUP_PAGES_LIST`]. With 1,024-page groups the directory of ten
//! million dense pages is 156 KB and stays in the L2 cache, so a lookup's only likely miss is
//! the container's. Which kind a run of pages becomes is decided as pages arrive
//! (`TidStore::must_flush`): a stretch that stops being evenly spaced becomes a WIDE group if
//! it is dense (at least [`LIST_DENSE_MIN`] pages once it spans [`DENSE_SPAN`] blocks), else
//! a LIST group.
//!
//! A uniform Elias–Fano group is *bucketed* when on every page no two offsets share a high
//! part (`(o - 1) >> l`): the upper part is then a plain bitmap of the occupied buckets, one
//! bit per bucket instead of one per bucket and one per offset (see [`container`]).
//!
//! Encoding a uniform group whose pages all repeat page 0's offsets (a regular workload)
//! encodes page 0's container once and replicates its bits.
//!
//! The plan ([`GroupPlan::new`]) is a pure function of the pages' summaries, so the store
//! knows a group's exact size before writing it (the budget check) and writes it later.

use super::bits::{read_bits, read_u64, BitWriter, LANE_ONES};
use super::container::{self, bitlen, code_bits};

/// Most pages in a group whose blocks are evenly spaced (consecutive, or every `s`-th block
/// for `s <= STRIDE_MAX`) and whose pages all have the same shape (same count, first and last
/// offset, hence one code): the 16-byte entry then costs 1/64 byte per page.
pub const GROUP_PAGES_CONTIG: usize = 1024;

/// Most pages in an evenly spaced group of mixed codes past a WIDE group's span.
pub const GROUP_PAGES_MIXED: usize = 64;

/// Most pages in a LIST group (a sparse stretch: blocks neither evenly spaced nor dense within
/// a WIDE group's span), whose lookup compares its delta list with the block.
pub const GROUP_PAGES_LIST: usize = 16;

/// The span of a WIDE group's block mask.
pub const WIDE_SPAN: u32 = 128;

/// A group spanning [`DENSE_SPAN`] blocks or more is dense, and may grow into a WIDE group,
/// if it holds at least this many pages; else it is a sparse LIST group.
pub const LIST_DENSE_MIN: usize = 4;

/// See [`LIST_DENSE_MIN`].
pub const DENSE_SPAN: u32 = 32;

/// The largest block step of a STRIDE group.
pub const STRIDE_MAX: u32 = 255;

const KIND_CONTIG: u8 = 0;
const KIND_MASK: u8 = 1;
const KIND_LIST: u8 = 2;
const KIND_STRIDE: u8 = 3;
/// Written as MASK with the wide bit (28) of `meta` set.
const KIND_WIDE: u8 = 5;

/// What the plan needs to know about a page.
#[derive(Clone, Copy, Debug, Default)]
pub struct PageSummary {
    pub block: u32,
    pub k: u16,
    pub min: u16,
    pub max: u16,
}

/// How a group will be encoded, and its exact size.
#[derive(Clone, Debug)]
pub struct GroupPlan {
    n: usize,
    u: u32,
    kind: u8,
    /// Delta width in bits (LIST), block step (STRIDE), or slot offset width (mixed WIDE).
    param: u32,
    uniform: bool,
    /// Uniform Elias–Fano pages written in the bucketed form.
    bucketed: bool,
    codes: Vec<u8>,
    header_bytes: usize,
    /// Bits per page: the container (uniform), or a code byte and the longest container
    /// (mixed, but for WIDE groups, whose slots are not padded).
    slot_bits: u32,
    payload_bits: usize,
}

/// The largest block span of a MASK group (its mask shares a word with the code).
const MASK_SPAN: u32 = 24;

/// `STRIDE_RECIP[s] = ceil(2^40 / s)`: `d / s` is `d * STRIDE_RECIP[s] >> 40`, exactly for
/// every `d < 2^40 / s^2` (over 2^24 for `s <= 255`; a STRIDE group spans under 2^18 blocks).
static STRIDE_RECIP: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut s = 1;
    while s < 256 {
        t[s] = (1u64 << 40).div_ceil(s as u64);
        s += 1;
    }
    t
};

impl GroupPlan {
    /// The plan for `pages`; `bucketable` says that every page's offsets fall into distinct
    /// Elias–Fano buckets (see [`container::bucketable`]), which only a uniform group uses.
    pub fn new(pages: &[PageSummary], bucketable: bool) -> GroupPlan {
        let n = pages.len();
        assert!((1..=GROUP_PAGES_CONTIG).contains(&n));
        let u = u32::from(pages.iter().map(|p| p.max).max().expect("non-empty"));
        let first = pages[0].block;
        let span = pages[n - 1].block - first;
        let step = if n >= 2 { pages[1].block - first } else { 0 };
        let even = n >= 2 && step <= STRIDE_MAX && pages.windows(2).all(|w| w[1].block - w[0].block == step);
        // Pages of page 0's shape share its code (the code depends on the shape and `u`).
        let c0 = container::choose_code(usize::from(pages[0].k), pages[0].min, pages[0].max, u);
        let shape0 = (pages[0].k, pages[0].min, pages[0].max);
        let codes: Vec<u8> = pages
            .iter()
            .map(|p| {
                if (p.k, p.min, p.max) == shape0 {
                    c0
                } else {
                    container::choose_code(usize::from(p.k), p.min, p.max, u)
                }
            })
            .collect();
        let uniform = codes.iter().all(|&c| c == codes[0]);
        let codes: Vec<u8> = if uniform { codes } else { codes.iter().map(|&c| container::mixed_code(c, u)).collect() };
        let sum: usize = codes.iter().map(|&c| 8 + code_bits(c, u) as usize).sum();
        let longest = 8 + codes.iter().map(|&c| code_bits(c, u)).max().expect("non-empty");
        // Padding every slot to the longest costs at most an eighth more (and 64 bits).
        let tight = uniform || n * longest as usize * 8 <= sum * 9 + 512;
        let kind = if span as usize == n - 1 && tight {
            KIND_CONTIG
        } else if even && tight {
            KIND_STRIDE
        } else if uniform && span < MASK_SPAN {
            KIND_MASK
        } else if span < WIDE_SPAN && n >= LIST_DENSE_MIN && (!uniform || n > GROUP_PAGES_LIST) {
            KIND_WIDE
        } else if span as usize == n - 1 {
            KIND_CONTIG
        } else if even {
            KIND_STRIDE
        } else {
            KIND_LIST
        };
        let bucketed = uniform && bucketable && container::bucket_bits(codes[0], u).is_some();
        let slot_bits = if bucketed {
            container::bucket_bits(codes[0], u).expect("checked")
        } else if uniform {
            code_bits(codes[0], u)
        } else {
            longest
        };
        let (param, header_bytes, payload_bits) = match kind {
            KIND_STRIDE => (step, 0, n * slot_bits as usize),
            KIND_LIST => {
                let w = bitlen(span);
                (w, ((n - 1) * w as usize).div_ceil(8), n * slot_bits as usize)
            }
            KIND_WIDE if !uniform => {
                // The offsets of slots 1..n from slot 0, then the unpadded slots.
                let last = sum - (8 + code_bits(codes[n - 1], u) as usize);
                let w = bitlen(last as u32);
                (w, 16, (n - 1) * w as usize + sum)
            }
            KIND_WIDE => (0, 16, n * slot_bits as usize),
            _ => (0, 0, n * slot_bits as usize),
        };
        GroupPlan { n, u, kind, param, uniform, bucketed, codes, header_bytes, slot_bits, payload_bits }
    }

    /// The group's exact size in arena bytes (its directory entry aside).
    pub fn bytes(&self) -> usize {
        self.header_bytes + self.payload_bits.div_ceil(8)
    }

    /// Appends the group to `out`; `offsets(i)` gives page `i`'s offsets. Returns its entry.
    pub fn encode<'o>(&self, pages: &[PageSummary], offsets: impl Fn(usize) -> &'o [u16], out: &mut Vec<u8>) -> Entry {
        let start = out.len();
        let first = pages[0].block;
        let mut mask = 0u128;
        match self.kind {
            KIND_MASK | KIND_WIDE => {
                for p in pages {
                    mask |= 1 << (p.block - first);
                }
                if self.kind == KIND_WIDE {
                    out.extend_from_slice(&mask.to_le_bytes());
                }
            }
            KIND_LIST => {
                let mut w = BitWriter::new(out);
                for p in &pages[1..] {
                    w.put(u64::from(p.block - first), self.param);
                }
                w.finish();
            }
            _ => {}
        }
        let bits = self.slot_bits;
        if !self.uniform && self.kind == KIND_WIDE {
            // Mixed WIDE: slot offsets, then each page's code byte and container.
            let mut w = BitWriter::new(out);
            let mut at = 0u32;
            for &c in &self.codes[..self.n - 1] {
                at += 8 + code_bits(c, self.u);
                w.put(u64::from(at), self.param);
            }
            for (i, &c) in self.codes.iter().enumerate() {
                w.put(u64::from(c), 8);
                container::encode(&mut w, c, false, self.u, offsets(i));
            }
            w.finish();
        } else if !self.uniform {
            // Mixed: each slot is the page's code byte, its container, zeros to `slot_bits`.
            let mut w = BitWriter::new(out);
            for (i, &c) in self.codes.iter().enumerate() {
                w.put(u64::from(c), 8);
                container::encode(&mut w, c, false, self.u, offsets(i));
                w.zeros(bits - 8 - code_bits(c, self.u));
            }
            w.finish();
        } else if bits <= 64 && (1..self.n).all(|i| offsets(i) == offsets(0)) {
            // Fast path (attach): a uniform group whose pages repeat page 0's offsets, as a
            // regular workload gives, encodes page 0 once and replicates its bits.
            let mut one = Vec::with_capacity(16);
            let mut w = BitWriter::new(&mut one);
            container::encode(&mut w, self.codes[0], self.bucketed, self.u, offsets(0));
            w.finish();
            one.resize(16, 0);
            let v = u64::from_le_bytes(one[..8].try_into().expect("8 bytes"));
            let (lo, hi) = (v & 0xffff_ffff, v >> 32);
            let (wlo, whi) = (bits.min(32), bits.saturating_sub(32));
            let mut w = BitWriter::new(out);
            for _ in 0..self.n {
                w.put(lo & ((1u64 << wlo) - 1), wlo);
                if whi > 0 {
                    w.put(hi & ((1u64 << whi) - 1), whi);
                }
            }
            w.finish();
        } else {
            let mut w = BitWriter::new(out);
            for (i, &c) in self.codes.iter().enumerate() {
                container::encode(&mut w, c, self.bucketed, self.u, offsets(i));
            }
            w.finish();
        }
        debug_assert_eq!(out.len() - start, self.bytes());
        debug_assert!(self.u < 4096 && bits < 4096);
        let meta = (self.n - 1) as u32
            | u32::from(self.kind & 3) << 12
            | u32::from(self.uniform) << 14
            | u32::from(self.bucketed) << 15
            | self.u << 16
            | u32::from(self.kind >> 2) << 28;
        let code = if self.uniform { u32::from(self.codes[0]) } else { 0 };
        let aux = if self.kind == KIND_MASK {
            code | (mask as u32) << 8
        } else if self.kind == KIND_WIDE && !self.uniform {
            self.param
        } else {
            let code_l = match self.codes[0] {
                c if self.uniform && (1..=container::EF_MAX_K as u8).contains(&c) => {
                    container::ef_l(u32::from(c), self.u)
                }
                _ => 0,
            };
            debug_assert!(code_l < 16);
            // The STRIDE kind's step or the LIST kind's delta width.
            let param = if self.kind == KIND_WIDE { 0 } else { self.param };
            code | bits << 8 | code_l << 20 | param << 24
        };
        Entry { first, pos: u32::try_from(start).expect("arena below 4 GiB"), meta, aux }
    }
}

/// The rank (from 1) of the page whose block delta is `d > 0` among the `m` ascending
/// `w`-bit deltas at bit `base` of a LIST group, if there is one. Hot path: its steps wait
/// for the header's cache miss, and a mispredicted branch there would stop the CPU from
/// overlapping the next probes' misses, so it is branch-free.
///
/// Deltas of up to 18 bits are compared with `d` three or more at a time: a [`read_bits`]
/// of `56 / w` lanes, XOR with `d` in every lane, and the "has a zero lane" test, whose
/// lowest hit is exact (deltas are distinct, so at most one lane matches; lanes past the
/// `m`-th read as zero, and `d > 0`); the rank is the lanes below the hit. Wider deltas (very
/// sparse groups) are binary-searched.
#[inline(always)]
fn list_rank(a: &[u8], base: usize, w: u32, m: usize, d: u32) -> Option<usize> {
    if !(1..=32).contains(&w) {
        return None;
    }
    // A block past the group's span: no branch (it is common, and unpredictable).
    let in_span = u64::from(d) >> w == 0;
    if w <= 18 {
        let ones = LANE_ONES[w as usize];
        let lanes = ones.count_ones() as usize;
        let highs = ones << (w - 1);
        let dd = (u64::from(d) & ((1 << w) - 1)) * ones;
        let (mut rank, mut found) = (0usize, false);
        let mut start = 0;
        while start < m {
            let cnt = (m - start).min(lanes);
            let t = read_bits(a, base + start * w as usize, cnt as u32 * w) ^ dd;
            let z = t.wrapping_sub(ones) & !t & highs;
            let below = (highs & (z & z.wrapping_neg()).wrapping_sub(1)).count_ones() as usize;
            rank += usize::from(z != 0) * (start + below);
            found |= z != 0;
            start += lanes;
        }
        return (found & in_span).then_some(rank + 1);
    }
    if !in_span {
        return None;
    }
    let delta = |i: usize| read_bits(a, base + i * w as usize, w) as u32;
    let (mut lo, mut size) = (0usize, m);
    while size > 1 {
        let half = size / 2;
        let mid = lo + half;
        lo = if delta(mid) < d { mid } else { lo };
        size -= half;
    }
    let i = lo + usize::from(m > 0 && delta(lo) < d);
    (i < m && delta(i) == d).then_some(i + 1)
}

/// A group's directory entry; see the module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct Entry {
    pub first: u32,
    pub pos: u32,
    meta: u32,
    aux: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 16);

impl Entry {
    #[inline(always)]
    pub fn n(&self) -> usize {
        (self.meta & 4095) as usize + 1
    }

    /// CONTIG, MASK, LIST, STRIDE (`meta` bits 12-13), or WIDE (MASK with bit 28).
    #[inline(always)]
    fn kind(&self) -> u8 {
        (((self.meta >> 12) & 3) | ((self.meta >> 26) & 4)) as u8
    }

    #[inline(always)]
    pub fn uniform(&self) -> bool {
        self.meta & (1 << 14) != 0
    }

    /// Is this a WIDE group (block mask in the arena)?
    #[inline(always)]
    pub fn wide(&self) -> bool {
        self.kind() == KIND_WIDE
    }

    /// Is this a LIST group?
    #[inline(always)]
    pub fn list(&self) -> bool {
        self.kind() == KIND_LIST
    }

    /// Are the containers in the bucketed Elias–Fano form?
    #[inline(always)]
    pub fn bucketed(&self) -> bool {
        self.meta & (1 << 15) != 0
    }

    #[inline(always)]
    pub fn u(&self) -> u32 {
        (self.meta >> 16) & 4095
    }

    /// Is this a uniform group of consecutive blocks (the lookup's fast path)?
    #[inline(always)]
    pub fn contiguous_uniform(&self) -> bool {
        self.meta & (7 << 12) == 1 << 14
    }

    /// [`Entry::slot_bits`] of a [`Entry::contiguous_uniform`] group.
    #[inline(always)]
    pub fn contiguous_bits(&self) -> u32 {
        (self.aux >> 8) & 4095
    }

    /// [`Entry::uniform_l`] of a [`Entry::contiguous_uniform`] group.
    #[inline(always)]
    pub fn contiguous_l(&self) -> u32 {
        (self.aux >> 20) & 15
    }

    /// The MASK kind's block mask: bit `d` set iff block `first + d` is in the group.
    #[inline(always)]
    fn mask(&self) -> u32 {
        self.aux >> 8
    }

    /// The code of a uniform group's pages.
    #[inline(always)]
    pub fn uniform_code(&self) -> u8 {
        self.aux as u8
    }

    /// Bits per page: the container of a uniform group's pages; a code byte and the longest
    /// container of a mixed fixed-slot group's.
    #[inline(always)]
    fn slot_bits(&self) -> u32 {
        if self.kind() == KIND_MASK {
            if self.bucketed() {
                container::bucket_bits(self.uniform_code(), self.u()).unwrap_or(0)
            } else {
                code_bits(self.uniform_code(), self.u())
            }
        } else {
            (self.aux >> 8) & 4095
        }
    }

    /// The block step of a STRIDE group; the delta width of a LIST group.
    #[inline(always)]
    fn stride(&self) -> u32 {
        self.aux >> 24
    }

    /// The Elias–Fano width `l` of a uniform group's pages (0 for other codes).
    #[inline(always)]
    pub fn uniform_l(&self) -> u32 {
        if self.kind() == KIND_MASK {
            match self.uniform_code() {
                c if (1..=container::EF_MAX_K as u8).contains(&c) => container::ef_l(u32::from(c), self.u()),
                _ => 0,
            }
        } else {
            (self.aux >> 20) & 15
        }
    }

    /// Byte where the slots (or a mixed WIDE group's slot offsets) start.
    #[inline(always)]
    fn slots_pos(&self) -> usize {
        let p = self.pos as usize;
        match self.kind() {
            KIND_LIST => p + ((self.n() - 1) * self.stride() as usize).div_ceil(8),
            KIND_WIDE => p + 16,
            _ => p,
        }
    }

    /// The rank of block `first + d` within the group, if present.
    #[inline(always)]
    pub fn rank(&self, a: &[u8], d: u32) -> Option<usize> {
        match self.kind() {
            KIND_CONTIG => ((d as usize) < self.n()).then_some(d as usize),
            KIND_STRIDE => {
                let s = self.stride();
                if d as usize >= self.n() * s as usize {
                    return None;
                }
                let r = (u64::from(d) * STRIDE_RECIP[s as usize]) >> 40;
                (r as u32 * s == d).then_some(r as usize)
            }
            KIND_MASK => {
                let mask = self.mask();
                if d >= MASK_SPAN || mask >> d & 1 == 0 {
                    return None;
                }
                Some((mask & ((1u32 << d) - 1)).count_ones() as usize)
            }
            KIND_WIDE => {
                if d >= WIDE_SPAN {
                    return None;
                }
                let p = self.pos as usize;
                let (lo, hi) = (read_u64(a, p), read_u64(a, p + 8));
                let (word, before) = if d < 64 { (lo, 0) } else { (hi, lo.count_ones()) };
                let bit = d & 63;
                if word >> bit & 1 == 0 {
                    return None;
                }
                Some((before + (word & ((1u64 << bit) - 1)).count_ones()) as usize)
            }
            _ => {
                if d == 0 {
                    return Some(0);
                }
                list_rank(a, self.pos as usize * 8, self.stride(), self.n() - 1, d)
            }
        }
    }

    /// The block delta (from `first`) of the page of rank `r`.
    pub fn delta(&self, a: &[u8], r: usize) -> u32 {
        match self.kind() {
            KIND_CONTIG => r as u32,
            KIND_STRIDE => r as u32 * self.stride(),
            KIND_MASK | KIND_WIDE => {
                let mut m = if self.kind() == KIND_MASK {
                    u128::from(self.mask())
                } else {
                    let p = self.pos as usize;
                    u128::from(read_u64(a, p)) | u128::from(read_u64(a, p + 8)) << 64
                };
                for _ in 0..r {
                    m &= m - 1;
                }
                m.trailing_zeros()
            }
            _ if r == 0 => 0,
            _ => {
                let w = self.stride();
                read_bits(a, self.pos as usize * 8 + (r - 1) * w as usize, w) as u32
            }
        }
    }

    /// The block deltas of the group's pages in rank order ([`Entry::delta`] of each rank, a
    /// mask walked once rather than once per page).
    pub fn deltas<'a>(&self, a: &'a [u8]) -> impl Iterator<Item = u32> + 'a {
        let e = *self;
        let masked = matches!(e.kind(), KIND_MASK | KIND_WIDE);
        let mut m = match e.kind() {
            KIND_MASK => u128::from(e.mask()),
            KIND_WIDE => u128::from(read_u64(a, e.pos as usize)) | u128::from(read_u64(a, e.pos as usize + 8)) << 64,
            _ => 0,
        };
        (0..e.n()).map(move |r| {
            if masked {
                let d = m.trailing_zeros();
                m &= m.wrapping_sub(1);
                d
            } else {
                e.delta(a, r)
            }
        })
    }

    /// The code and absolute bit position of the container of the page of rank `r`.
    #[inline(always)]
    pub fn container(&self, a: &[u8], r: usize) -> (u8, usize) {
        let base = self.slots_pos() * 8;
        if self.uniform() {
            return (self.uniform_code(), base + r * self.slot_bits() as usize);
        }
        let q = if self.kind() == KIND_WIDE {
            // Slot 0 follows the n - 1 offsets of slots 1..n; no branch on r.
            let w = self.aux & 63;
            let offsets = (self.n() - 1) * w as usize;
            let off = read_bits(a, base + r.saturating_sub(1) * w as usize, w) as usize;
            base + offsets + if r == 0 { 0 } else { off }
        } else {
            base + r * self.slot_bits() as usize
        };
        (read_bits(a, q, 8) as u8, q + 8)
    }

    /// Where a prefetch should go before [`Entry::container`]: the page's slot when the entry
    /// alone locates it, else the group's first byte.
    #[inline(always)]
    pub fn prefetch_byte(&self, d: u32) -> usize {
        let r = match self.kind() {
            KIND_CONTIG => u64::from(d),
            KIND_STRIDE => u64::from(d).wrapping_mul(STRIDE_RECIP[self.stride() as usize]) >> 40,
            KIND_MASK if d < MASK_SPAN => u64::from((self.mask() & ((1u32 << d) - 1)).count_ones()),
            _ => return self.pos as usize,
        };
        self.pos as usize + (r as usize).wrapping_mul(self.slot_bits() as usize) / 8
    }
}
