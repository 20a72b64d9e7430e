//! Groups: up to [`GROUP_PAGES`] consecutive non-empty pages encoded together, described by
//! one 16-byte directory [`Entry`] so that a lookup reads the entry and then goes straight to
//! the page's container.
//!
//! ```text
//! Entry (16 bytes, 4 per cache line)
//!   first   u32  the group's first block
//!   pos     u32  arena byte where the group's bytes start
//!   meta    u32  n-1 (bits 0-6) | block-set kind (7-8) | uniform (9) | code if uniform (10-17)
//!                | u, the largest offset in the group (18-29)
//!   mask    u32  MASK kind: bit d set iff block first+d holds dead TIDs
//!
//! arena bytes at pos
//!   LIST kind only   1 byte w, then the n-1 deltas block-first of pages 1.., w bits each
//!   not uniform only n code bytes
//!   containers       page 0's container, page 1's, … as one bit string, padded to a byte
//! ```
//!
//! Block-set kinds: CONTIG (blocks first..first+n-1: the dense case costs nothing), MASK (span
//! under 32 blocks), LIST (anything else; 11 bits per page for a page every 100 blocks, 32 at
//! worst). A page's container starts `rank * code_bits(code, u)` bits in when the group is
//! uniform (the usual case: VACUUM sees runs of similar pages), so a dense or regular set
//! needs no arena byte but the container's own; otherwise a short sum over the code bytes.
//!
//! Encoding a uniform group whose pages all repeat page 0's offsets (a regular workload)
//! encodes page 0's container once and replicates its bits.
//!
//! The plan ([`GroupPlan::new`]) is a pure function of the pages' summaries, so the store
//! knows a group's exact size before writing it (the budget check) and writes it later.

use super::bits::{read_bits, BitWriter};
use super::container::{self, bitlen, code_bits};

/// Most pages in a group whose pages all have the same shape (same count, first and last
/// offset, hence one code): the 16-byte entry then costs 1/8 byte per page, and a directory
/// for ten million pages is 1.25 MB, small enough to stay in cache.
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
    codes: [u8; GROUP_PAGES],
    header_bytes: usize,
    payload_bits: usize,
}

impl GroupPlan {
    pub fn new(pages: &[PageSummary]) -> GroupPlan {
        let n = pages.len();
        assert!((1..=GROUP_PAGES).contains(&n));
        let u = u32::from(pages.iter().map(|p| p.max).max().expect("non-empty"));
        let first = pages[0].block;
        let span = pages[n - 1].block - first;
        let (kind, param, set_bytes) = if span as usize == n - 1 {
            (KIND_CONTIG, 0, 0)
        } else if span < 32 {
            (KIND_MASK, 0, 0)
        } else {
            let w = bitlen(span);
            (KIND_LIST, w as u8, 1 + ((n - 1) * w as usize).div_ceil(8))
        };
        let mut codes = [0u8; GROUP_PAGES];
        let mut payload_bits = 0usize;
        for (c, p) in codes.iter_mut().zip(pages) {
            *c = container::choose_code(usize::from(p.k), p.min, p.max, u);
            payload_bits += code_bits(*c, u) as usize;
        }
        let uniform = codes[..n].iter().all(|&c| c == codes[0]);
        let header_bytes = set_bytes + if uniform { 0 } else { n };
        GroupPlan { n, u, kind, param, uniform, codes, header_bytes, payload_bits }
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
            out.extend_from_slice(&self.codes[..self.n]);
        }
        // Fast path (attach): a uniform group whose pages repeat page 0's offsets, as a
        // regular workload gives, encodes page 0 once and replicates its bits.
        let bits = code_bits(self.codes[0], self.u);
        if self.uniform && bits <= 64 && (1..self.n).all(|i| offsets(i) == offsets(0)) {
            let mut one = Vec::with_capacity(16);
            let mut w = BitWriter::new(&mut one);
            container::encode(&mut w, self.codes[0], self.u, offsets(0));
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
            for (i, &c) in self.codes[..self.n].iter().enumerate() {
                container::encode(&mut w, c, self.u, offsets(i));
            }
            w.finish();
        }
        debug_assert_eq!(out.len() - start, self.bytes());
        debug_assert!(self.u < 4096);
        let meta = (self.n - 1) as u32
            | u32::from(self.kind) << 7
            | u32::from(self.uniform) << 9
            | if self.uniform { u32::from(self.codes[0]) << 10 } else { 0 }
            | self.u << 18;
        Entry { first, pos: u32::try_from(start).expect("arena below 4 GiB"), meta, mask }
    }
}

/// A group's directory entry; see the module documentation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct Entry {
    pub first: u32,
    pub pos: u32,
    meta: u32,
    mask: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 16);

impl Entry {
    #[inline(always)]
    pub fn n(&self) -> usize {
        (self.meta & 127) as usize + 1
    }

    #[inline(always)]
    fn kind(&self) -> u8 {
        ((self.meta >> 7) & 3) as u8
    }

    #[inline(always)]
    fn uniform(&self) -> bool {
        self.meta & (1 << 9) != 0
    }

    #[inline(always)]
    pub fn u(&self) -> u32 {
        self.meta >> 18
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
                if d >= 32 || self.mask >> d & 1 == 0 {
                    return None;
                }
                Some((self.mask & ((1u32 << d) - 1)).count_ones() as usize)
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
                let mut m = self.mask;
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
            let c = (self.meta >> 10) as u8;
            (c, p * 8 + r * code_bits(c, u) as usize)
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
            KIND_MASK if d < 32 => (self.mask & ((1u32 << d) - 1)).count_ones(),
            _ => 0,
        };
        if self.uniform() && self.kind() != KIND_LIST {
            let c = (self.meta >> 10) as u8;
            self.pos as usize + (r as usize * code_bits(c, self.u()) as usize) / 8
        } else {
            self.pos as usize
        }
    }
}
