//! Groups: up to [`GROUP_PAGES`] consecutive non-empty pages encoded together.
//!
//! ```text
//! byte 0        n-1 (bits 0-3) | block-set kind (bits 4-5) | uniform (bit 6) | u is 2 bytes (bit 7)
//! u             1 or 2 bytes: the largest offset in the group (every container's universe)
//! block set     kind 0 CONTIG  nothing: blocks first, first+1, …, first+n-1
//!               kind 1 MASK    1 byte L, then L bytes: bit d set iff block first+d is present
//!               kind 2 LIST    1 byte w, then the n-1 deltas block-first of pages 1.., w bits each
//! codes         1 byte if uniform (every page has the same code), else n bytes
//! containers    bit string: page 0's container, page 1's, … (lengths from code and u),
//!               padded to a byte
//! ```
//!
//! A page's container starts at `sum(code_bits(code_j, u) for j < rank)`: `rank * bits` when
//! the group is uniform (the usual case: VACUUM sees runs of similar pages), else a short sum
//! over at most 15 code bytes that sit in the same cache line as the header.
//!
//! The plan ([`GroupPlan::new`]) is a pure function of the pages' summaries, so the store can
//! know a group's exact size before writing it (the budget check) and write it later.

use super::bits::{read_bits, BitWriter};
use super::container::{self, bitlen, code_bits};

/// Pages per group: 16 keeps a group's header, codes and most containers within two cache
/// lines while the directory costs 8 bytes per 16 pages.
pub const GROUP_PAGES: usize = 16;

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
        } else {
            let w = bitlen(span);
            let list = 1 + ((n - 1) * w as usize).div_ceil(8);
            let mask = 1 + (span as usize + 1).div_ceil(8);
            if span < 64 && mask <= list {
                (KIND_MASK, mask as u8 - 1, mask)
            } else {
                (KIND_LIST, w as u8, list)
            }
        };
        let mut codes = [0u8; GROUP_PAGES];
        let mut payload_bits = 0usize;
        for (c, p) in codes.iter_mut().zip(pages) {
            *c = container::choose_code(usize::from(p.k), p.min, p.max, u);
            payload_bits += code_bits(*c, u) as usize;
        }
        let uniform = codes[..n].iter().all(|&c| c == codes[0]);
        let header_bytes = 1 + if u > 255 { 2 } else { 1 } + set_bytes + if uniform { 1 } else { n };
        GroupPlan { n, u, kind, param, uniform, codes, header_bytes, payload_bits }
    }

    /// The group's exact encoded size in bytes.
    pub fn bytes(&self) -> usize {
        self.header_bytes + self.payload_bits.div_ceil(8)
    }

    /// Appends the group; `offsets(i)` gives page `i`'s offsets.
    pub fn encode<'o>(&self, pages: &[PageSummary], offsets: impl Fn(usize) -> &'o [u16], out: &mut Vec<u8>) {
        let start = out.len();
        let wide = self.u > 255;
        out.push((self.n - 1) as u8 | self.kind << 4 | u8::from(self.uniform) << 6 | u8::from(wide) << 7);
        if wide {
            out.extend_from_slice(&(self.u as u16).to_le_bytes());
        } else {
            out.push(self.u as u8);
        }
        let first = pages[0].block;
        match self.kind {
            KIND_MASK => {
                let mut mask = 0u64;
                for p in pages {
                    mask |= 1 << (p.block - first);
                }
                out.push(self.param);
                out.extend_from_slice(&mask.to_le_bytes()[..usize::from(self.param)]);
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
        if self.uniform {
            out.push(self.codes[0]);
        } else {
            out.extend_from_slice(&self.codes[..self.n]);
        }
        let mut w = BitWriter::new(out);
        for (i, &c) in self.codes[..self.n].iter().enumerate() {
            container::encode(&mut w, c, self.u, offsets(i));
        }
        w.finish();
        debug_assert_eq!(out.len() - start, self.bytes());
    }
}

/// A parsed group header. Parsing touches only the first bytes of the group.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub n: usize,
    pub u: u32,
    kind: u8,
    param: u8,
    uniform: bool,
    set_pos: usize,
    codes_pos: usize,
    /// Bit position of page 0's container.
    payload_bit: usize,
}

impl Header {
    #[inline(always)]
    pub fn parse(a: &[u8], pos: usize) -> Header {
        let b0 = a[pos];
        let n = usize::from(b0 & 15) + 1;
        let kind = (b0 >> 4) & 3;
        let uniform = b0 & 64 != 0;
        let (u, mut p) = if b0 & 128 != 0 {
            (u32::from(u16::from_le_bytes([a[pos + 1], a[pos + 2]])), pos + 3)
        } else {
            (u32::from(a[pos + 1]), pos + 2)
        };
        let (param, set_pos) = match kind {
            KIND_CONTIG => (0, p),
            KIND_MASK => {
                let l = a[p];
                p += 1 + usize::from(l);
                (l, p - usize::from(l))
            }
            _ => {
                let w = a[p];
                p += 1 + ((n - 1) * usize::from(w)).div_ceil(8);
                (w, p - ((n - 1) * usize::from(w)).div_ceil(8))
            }
        };
        let codes_pos = p;
        let payload_bit = (p + if uniform { 1 } else { n }) * 8;
        Header { n, u, kind, param, uniform, set_pos, codes_pos, payload_bit }
    }

    /// The rank of block `first + d` within the group, if present.
    #[inline(always)]
    pub fn rank(&self, a: &[u8], d: u32) -> Option<usize> {
        match self.kind {
            KIND_CONTIG => ((d as usize) < self.n).then_some(d as usize),
            KIND_MASK => {
                if d >= u32::from(self.param) * 8 {
                    return None;
                }
                let mask = self.mask(a);
                if mask >> d & 1 == 0 {
                    return None;
                }
                Some((mask & ((1u64 << d) - 1)).count_ones() as usize)
            }
            _ => {
                if d == 0 {
                    return Some(0);
                }
                let w = u32::from(self.param);
                let base = self.set_pos * 8;
                // At most 15 deltas, ascending: a linear scan is as fast as a binary search.
                for i in 0..self.n - 1 {
                    let v = read_bits(a, base + i * w as usize, w) as u32;
                    if v >= d {
                        return (v == d).then_some(i + 1);
                    }
                }
                None
            }
        }
    }

    #[inline(always)]
    fn mask(&self, a: &[u8]) -> u64 {
        let word = u64::from_le_bytes(a[self.set_pos..self.set_pos + 8].try_into().expect("8 bytes"));
        let bits = u32::from(self.param) * 8;
        if bits == 64 {
            word
        } else {
            word & ((1u64 << bits) - 1)
        }
    }

    /// The block delta (from the group's first block) of the page of rank `r`.
    pub fn delta(&self, a: &[u8], r: usize) -> u32 {
        match self.kind {
            KIND_CONTIG => r as u32,
            KIND_MASK => {
                let mut m = self.mask(a);
                for _ in 0..r {
                    m &= m - 1;
                }
                m.trailing_zeros()
            }
            _ if r == 0 => 0,
            _ => {
                let w = u32::from(self.param);
                read_bits(a, self.set_pos * 8 + (r - 1) * w as usize, w) as u32
            }
        }
    }

    /// The code and absolute bit position of the container of the page of rank `r`.
    #[inline(always)]
    pub fn container(&self, a: &[u8], r: usize) -> (u8, usize) {
        if self.uniform {
            let c = a[self.codes_pos];
            (c, self.payload_bit + r * code_bits(c, self.u) as usize)
        } else {
            let codes = &a[self.codes_pos..self.codes_pos + self.n];
            let mut bit = self.payload_bit;
            for &c in &codes[..r] {
                bit += code_bits(c, self.u) as usize;
            }
            (codes[r], bit)
        }
    }
}
