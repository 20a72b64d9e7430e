//! Groups: up to [`GROUP_PAGES`] consecutive non-empty pages encoded together, described by
//! one 16-byte directory [`Entry`] so that a lookup reads the entry and then goes straight to
//! the page's container.
//!
//! ```text
//! Entry (16 bytes, 4 per cache line)
//!   first   u32  the group's first block
//!   pos     u32  arena byte where the group's bytes start
//!   meta    u32  n-1 (bits 0-11) | block-set kind (12-13) | uniform (14) | bucketed (15)
//!                | u, the largest offset in the group (16-27)
//!   aux     u32  code if uniform (bits 0-7), then
//!                MASK kind: bit 8+d set iff block first+d holds dead TIDs (d < 24)
//!                otherwise: container bits if uniform (8-19) | Elias–Fano width l (20-23)
//!
//! arena bytes at pos
//!   LIST kind only   1 byte w, then the n-1 deltas block-first of pages 1.., w bits each
//!   not uniform only n code bytes
//!   containers       page 0's container, page 1's, … as one bit string, padded to a byte
//! ```
//!
//! Block-set kinds: CONTIG (blocks first..first+n-1: the dense case costs nothing), MASK (span
//! under 24 blocks), LIST (anything else; 11 bits per page for a page every 100 blocks, 32 at
//! worst). A page's container starts `rank * code_bits(code, u)` bits in when the group is
//! uniform (the usual case: VACUUM sees runs of similar pages), so a dense or regular set
//! needs no arena byte but the container's own; otherwise a short sum over the code bytes.
//! The entry of a uniform group carries the container length and the Elias–Fano width ready
//! for use, so a lookup does no arithmetic on the code before it can issue the container's
//! load.
//!
//! A contiguous uniform group holds up to [`GROUP_PAGES_CONTIG`] pages (its rank is the block
//! delta, so size costs the lookup nothing), other uniform groups up to [`GROUP_PAGES`] (a LIST
//! group's rank is a binary search of its delta list), mixed groups up to
//! [`GROUP_PAGES_MIXED`]. With 1,024-page groups the directory of ten million dense pages is
//! 156 KB and stays in the L2 cache, so a lookup's only likely miss is the container's.
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

use super::bits::{read_bits, BitWriter};
use super::container::{self, bitlen, code_bits};

/// Most pages in a contiguous group whose pages all have the same shape (same count, first and
/// last offset, hence one code): the 16-byte entry then costs 1/64 byte per page.
pub const GROUP_PAGES_CONTIG: usize = 1024;

/// Most pages in a non-contiguous group whose pages all have the same shape.
pub const GROUP_PAGES: usize = 128;

/// Most pages in a group of mixed shapes, whose lookups sum code lengths up to the page.
pub const GROUP_PAGES_MIXED: usize = 32;

const KIND_CONTIG: u8 = 0;
const KIND_MASK: u8 = 1;
const KIND_LIST: u8 = 2;

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
    /// Mask bytes (MASK) or delta width in bits (LIST).
    param: u8,
    uniform: bool,
    /// Uniform Elias–Fano pages written in the bucketed form.
    bucketed: bool,
    codes: Vec<u8>,
    header_bytes: usize,
    payload_bits: usize,
}

/// The largest block span of a MASK group (its mask shares a word with the code).
const MASK_SPAN: u32 = 24;

impl GroupPlan {
    /// The plan for `pages`; `bucketable` says that every page's offsets fall into distinct
    /// Elias–Fano buckets (see [`container::bucketable`]), which only a uniform group uses.
    pub fn new(pages: &[PageSummary], bucketable: bool) -> GroupPlan {
        let n = pages.len();
        assert!((1..=GROUP_PAGES_CONTIG).contains(&n));
        let u = u32::from(pages.iter().map(|p| p.max).max().expect("non-empty"));
        let first = pages[0].block;
        let span = pages[n - 1].block - first;
        let (kind, param, set_bytes) = if span as usize == n - 1 {
            (KIND_CONTIG, 0, 0)
        } else if span < MASK_SPAN {
            (KIND_MASK, 0, 0)
        } else {
            let w = bitlen(span);
            (KIND_LIST, w as u8, 1 + ((n - 1) * w as usize).div_ceil(8))
        };
        assert!(kind == KIND_CONTIG || n <= GROUP_PAGES, "only a contiguous group holds over {GROUP_PAGES} pages");
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
        let bucketed = uniform && bucketable && container::bucket_bits(codes[0], u).is_some();
        let payload_bits = if bucketed {
            n * container::bucket_bits(codes[0], u).expect("checked") as usize
        } else {
            codes.iter().map(|&c| code_bits(c, u) as usize).sum()
        };
        let header_bytes = set_bytes + if uniform { 0 } else { n };
        GroupPlan { n, u, kind, param, uniform, bucketed, codes, header_bytes, payload_bits }
    }

    /// The group's exact size in arena bytes (its directory entry aside).
    pub fn bytes(&self) -> usize {
        self.header_bytes + self.payload_bits.div_ceil(8)
    }

    /// Appends the group to `out`; `offsets(i)` gives page `i`'s offsets. Returns its entry.
    pub fn encode<'o>(&self, pages: &[PageSummary], offsets: impl Fn(usize) -> &'o [u16], out: &mut Vec<u8>) -> Entry {
        let start = out.len();
        let first = pages[0].block;
        let mut mask = 0u32;
        match self.kind {
            KIND_MASK => {
                for p in pages {
                    mask |= 1 << (p.block - first);
                }
            }
            KIND_LIST => {
                out.push(self.param);
                let mut w = BitWriter::new(out);
                for p in &pages[1..] {
                    w.put(u64::from(p.block - first), u32::from(self.param));
                }
                w.finish();
            }
            _ => {}
        }
        if !self.uniform {
            out.extend_from_slice(&self.codes);
        }
        // Fast path (attach): a uniform group whose pages repeat page 0's offsets, as a
        // regular workload gives, encodes page 0 once and replicates its bits.
        let bits = self.container_bits();
        if self.uniform && bits <= 64 && (1..self.n).all(|i| offsets(i) == offsets(0)) {
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
        debug_assert!(self.u < 4096);
        let meta = (self.n - 1) as u32
            | u32::from(self.kind) << 12
            | u32::from(self.uniform) << 14
            | u32::from(self.bucketed) << 15
            | self.u << 16;
        let code = if self.uniform { u32::from(self.codes[0]) } else { 0 };
        let aux = if self.kind == KIND_MASK {
            code | mask << 8
        } else if self.uniform {
            let code_l = match self.codes[0] {
                c if (1..=container::EF_MAX_K as u8).contains(&c) => container::ef_l(u32::from(c), self.u),
                _ => 0,
            };
            debug_assert!(bits < 4096 && code_l < 16);
            code | bits << 8 | code_l << 20
        } else {
            0
        };
        Entry { first, pos: u32::try_from(start).expect("arena below 4 GiB"), meta, aux }
    }

    /// The length in bits of each container of a uniform group.
    fn container_bits(&self) -> u32 {
        if self.bucketed {
            container::bucket_bits(self.codes[0], self.u).expect("bucketed")
        } else {
            code_bits(self.codes[0], self.u)
        }
    }
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

    #[inline(always)]
    fn kind(&self) -> u8 {
        ((self.meta >> 12) & 3) as u8
    }

    #[inline(always)]
    pub fn uniform(&self) -> bool {
        self.meta & (1 << 14) != 0
    }

    /// Are the containers in the bucketed Elias–Fano form?
    #[inline(always)]
    pub fn bucketed(&self) -> bool {
        self.meta & (1 << 15) != 0
    }

    #[inline(always)]
    pub fn u(&self) -> u32 {
        self.meta >> 16
    }

    /// Is this a uniform group of consecutive blocks (the lookup's fast path)?
    #[inline(always)]
    pub fn contiguous_uniform(&self) -> bool {
        self.meta & (7 << 12) == 1 << 14
    }

    /// [`Entry::uniform_bits`] of a [`Entry::contiguous_uniform`] group.
    #[inline(always)]
    pub fn contiguous_bits(&self) -> u32 {
        (self.aux >> 8) & 4095
    }

    /// [`Entry::uniform_l`] of a [`Entry::contiguous_uniform`] group.
    #[inline(always)]
    pub fn contiguous_l(&self) -> u32 {
        self.aux >> 20
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

    /// The container length in bits of a uniform group's pages.
    #[inline(always)]
    fn uniform_bits(&self) -> u32 {
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

    /// The Elias–Fano width `l` of a uniform group's pages (0 for other codes).
    #[inline(always)]
    pub fn uniform_l(&self) -> u32 {
        if self.kind() == KIND_MASK {
            match self.uniform_code() {
                c if (1..=container::EF_MAX_K as u8).contains(&c) => container::ef_l(u32::from(c), self.u()),
                _ => 0,
            }
        } else {
            self.aux >> 20
        }
    }

    /// Byte where the code bytes (or, if uniform, the containers) start.
    #[inline(always)]
    fn codes_pos(&self, a: &[u8]) -> usize {
        let p = self.pos as usize;
        if self.kind() == KIND_LIST {
            p + 1 + ((self.n() - 1) * usize::from(a[p])).div_ceil(8)
        } else {
            p
        }
    }

    /// The rank of block `first + d` within the group, if present.
    #[inline(always)]
    pub fn rank(&self, a: &[u8], d: u32) -> Option<usize> {
        match self.kind() {
            KIND_CONTIG => ((d as usize) < self.n()).then_some(d as usize),
            KIND_MASK => {
                let mask = self.mask();
                if d >= MASK_SPAN || mask >> d & 1 == 0 {
                    return None;
                }
                Some((mask & ((1u32 << d) - 1)).count_ones() as usize)
            }
            _ => {
                if d == 0 {
                    return Some(0);
                }
                let p = self.pos as usize;
                let w = u32::from(a[p]);
                let base = (p + 1) * 8;
                // Binary search over the n-1 ascending deltas.
                let (mut lo, mut hi) = (0usize, self.n() - 1);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if (read_bits(a, base + mid * w as usize, w) as u32) < d {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                (lo < self.n() - 1 && read_bits(a, base + lo * w as usize, w) as u32 == d).then_some(lo + 1)
            }
        }
    }

    /// The block delta (from `first`) of the page of rank `r`.
    pub fn delta(&self, a: &[u8], r: usize) -> u32 {
        match self.kind() {
            KIND_CONTIG => r as u32,
            KIND_MASK => {
                let mut m = self.mask();
                for _ in 0..r {
                    m &= m - 1;
                }
                m.trailing_zeros()
            }
            _ if r == 0 => 0,
            _ => {
                let p = self.pos as usize;
                let w = u32::from(a[p]);
                read_bits(a, (p + 1) * 8 + (r - 1) * w as usize, w) as u32
            }
        }
    }

    /// The code and absolute bit position of the container of the page of rank `r`.
    #[inline(always)]
    pub fn container(&self, a: &[u8], r: usize) -> (u8, usize) {
        let u = self.u();
        let p = self.codes_pos(a);
        if self.uniform() {
            (self.uniform_code(), p * 8 + r * self.uniform_bits() as usize)
        } else {
            let n = self.n();
            let codes = &a[p..p + n];
            let mut bit = (p + n) * 8;
            for &c in &codes[..r] {
                bit += code_bits(c, u) as usize;
            }
            (codes[r], bit)
        }
    }

    /// Where a prefetch should go before [`Entry::container`]: the container itself when the
    /// entry alone locates it, else the group's first byte.
    #[inline(always)]
    pub fn prefetch_byte(&self, d: u32) -> usize {
        let r = match self.kind() {
            KIND_CONTIG => d,
            KIND_MASK if d < MASK_SPAN => (self.mask() & ((1u32 << d) - 1)).count_ones(),
            _ => 0,
        };
        if self.uniform() && self.kind() != KIND_LIST {
            self.pos as usize + (r as usize * self.uniform_bits() as usize) / 8
        } else {
            self.pos as usize
        }
    }
}
