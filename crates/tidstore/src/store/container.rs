//! Offset containers: one page's dead offsets as a bit string whose length depends only on a
//! one-byte *code* and the group's offset universe `u` (the largest offset in the group).
//!
//! | code | form | bits | lookup |
//! |------|------|------|--------|
//! | `0` | bitmap: bit `o - 1` set for each offset `o` | `u` | one bit test |
//! | `255` | one run `lo..=hi` (a full page, `1..=k`) | `2 * bitlen(u)` | two compares |
//! | `248 + k`, `k` in `1..=6`, `k * bitlen(u) <= 56` | packed: the `k` offsets, `bitlen(u)` bits each | `k * bitlen(u)` | `k` compares at once, no branch |
//! | `k` in `1..=248` | Elias–Fano of the `k` values `o - 1` in `[0, u)` | `k*l + k + ((u-1) >> l)` | decode up to the probe |
//!
//! Elias–Fano (Elias 1974, Fano 1971; Vigna, "Quasi-succinct indices", WSDM 2013) with
//! `l = floor(log2(u / k))` stores the low `l` bits of each value verbatim (the *lower* part,
//! `k*l` bits) and the high bits `x >> l` in unary: value `i` sets bit `(x_i >> l) + i` of the
//! *upper* part (`k + ((u-1) >> l)` bits). That is within 2 bits per value of
//! `log2 C(u, k)`, the information-theoretic minimum for a k-subset of `u` offsets: the
//! bdbench page of 10 offsets 20, 40, …, 200 takes 62 bits, against log2 C(200, 10) = 54.3
//! for its own universe and log2 C(291, 10) = 59.8 for a whole 8 KB page's.
//!
//! **Bucketed** Elias–Fano: when no two of a page's values share a high part (`x >> l`),
//! which regular or well-spread offsets give, the upper part is written as a bitmap of the
//! `nb = ((u-1) >> l) + 1` buckets followed by the low parts, `nb + k*l` bits (`k - 1` fewer
//! than Elias–Fano). Membership is then a bit test, a popcount for the rank, and one low part
//! extracted from the 16 bytes loaded at the container's start: about a dozen instructions
//! that wait for the container's cache miss, where the select of the unary form needs forty.
//! Shuffled probes are bound by how many misses the CPU overlaps, which those waiting
//! instructions limit. Only uniform groups use it ([`super::group`]), for the group's code.
//!
//! The encoder picks the shortest of the four forms ([`choose_code`]); ties go to the bitmap,
//! then the run, then the packed form, which are faster to test. The packed form exists for
//! speed: a page of one to three offsets (bdbench's seed 4 has two per page) is no longer
//! packed than as Elias–Fano, and its test is a few instructions that depend on the loaded
//! word, so consecutive random probes overlap their cache misses better. In a group of mixed
//! pages, pages of up to six offsets are packed even where Elias–Fano is up to two bits per
//! offset shorter ([`mixed_code`]), so that the test does not branch on their code.

use super::bits::{read56, read_bits, read_u64, BitWriter, LANE_ONES};

pub const CODE_BITMAP: u8 = 0;
pub const CODE_RUN: u8 = 255;
/// The largest `k` an Elias–Fano code can name; larger non-run pages use the bitmap.
pub const EF_MAX_K: usize = 248;
/// Packed pages hold at most this many offsets (and at most 56 bits); code `EF_MAX_K + k`.
pub const PACKED_MAX_K: usize = 6;

/// Bits needed to write `x`.
#[inline(always)]
pub fn bitlen(x: u32) -> u32 {
    32 - x.leading_zeros()
}

/// The Elias–Fano lower-bit width: the largest `l` with `k << l <= u`.
#[inline(always)]
pub fn ef_l(k: u32, u: u32) -> u32 {
    debug_assert!(k >= 1 && k <= u);
    let l0 = u.ilog2() - k.ilog2();
    if (k << l0) > u {
        l0 - 1
    } else {
        l0
    }
}

#[inline(always)]
pub fn ef_bits(k: u32, u: u32) -> u32 {
    let l = ef_l(k, u);
    k * l + k + ((u - 1) >> l)
}

/// The container length in bits for `code` in universe `u`.
#[inline(always)]
pub fn code_bits(code: u8, u: u32) -> u32 {
    match code {
        CODE_BITMAP => u,
        CODE_RUN => 2 * bitlen(u),
        c if usize::from(c) > EF_MAX_K => (u32::from(c) - EF_MAX_K as u32) * bitlen(u),
        k => ef_bits(k as u32, u),
    }
}

/// The shortest form for a page of `k` offsets between `min` and `max` in universe `u`.
pub fn choose_code(k: usize, min: u16, max: u16, u: u32) -> u8 {
    let mut best = (u, CODE_BITMAP);
    if usize::from(max - min) + 1 == k && 2 * bitlen(u) < best.0 {
        best = (2 * bitlen(u), CODE_RUN);
    }
    let packed = k as u32 * bitlen(u);
    if k <= PACKED_MAX_K && packed <= 56 && packed < best.0 {
        best = (packed, (EF_MAX_K + k) as u8);
    }
    if k <= EF_MAX_K {
        let e = ef_bits(k as u32, u);
        if e < best.0 {
            best = (e, k as u8);
        }
    }
    best.1
}

/// The code a page of a *mixed* group takes instead of `code`: the packed form rather than
/// an Elias–Fano code of up to six offsets that saves at most two bits per offset. Pages of
/// up to six offsets then share one branch-free test: in a group of mixed pages, a test that
/// depends on the page's code mispredicts, and the CPU overlaps fewer lookups.
pub fn mixed_code(code: u8, u: u32) -> u8 {
    let k = u32::from(code);
    let packed = k * bitlen(u);
    if (1..=PACKED_MAX_K as u32).contains(&k) && packed <= 56 && packed <= ef_bits(k, u) + 2 * k {
        (EF_MAX_K as u32 + k) as u8
    } else {
        code
    }
}

/// The most buckets of a bucketed container (its bitmap is read as one word).
const BUCKETS_MAX: u32 = 56;
/// The longest bucketed container: with up to 7 bits of byte offset it fits the 16 bytes
/// a lookup loads.
const BUCKET_BITS_MAX: u32 = 120;

/// The length of code `code`'s container in the bucketed form, if that form exists for it
/// (an Elias–Fano code whose bucket bitmap fits a word and whose container fits 16 bytes).
#[inline(always)]
pub fn bucket_bits(code: u8, u: u32) -> Option<u32> {
    let k = u32::from(code);
    if !(1..=EF_MAX_K as u32).contains(&k) || k > u {
        return None;
    }
    let l = ef_l(k, u);
    let nb = ((u - 1) >> l) + 1;
    let bits = nb + k * l;
    (nb <= BUCKETS_MAX && bits <= BUCKET_BITS_MAX).then_some(bits)
}

/// Can `offsets` (ascending, non-empty, all `<= u`) be written bucketed in a group whose
/// universe is `u`? True iff no two share a high part at the Elias–Fano width for their count
/// and `u`. The width grows with `u`: offsets apart at their own largest offset can share a
/// bucket in a group whose universe is larger, so the answer is only good for that `u`.
pub fn bucketable(offsets: &[u16], u: u32) -> bool {
    let k = offsets.len() as u32;
    debug_assert!(u32::from(offsets[offsets.len() - 1]) <= u);
    if !(1..=EF_MAX_K as u32).contains(&k) || k > u {
        return false;
    }
    let l = ef_l(k, u);
    offsets.windows(2).all(|w| (u32::from(w[0]) - 1) >> l != (u32::from(w[1]) - 1) >> l)
}

/// Appends the container for `offsets` (ascending, all `<= u`); `bucketed` selects the bucketed
/// form of an Elias–Fano code.
pub fn encode(w: &mut BitWriter<'_>, code: u8, bucketed: bool, u: u32, offsets: &[u16]) {
    if bucketed {
        let k = u32::from(code);
        debug_assert_eq!(k as usize, offsets.len());
        let l = ef_l(k, u);
        let nb = ((u - 1) >> l) + 1;
        let mut buckets = 0u64;
        for &o in offsets {
            buckets |= 1 << ((u32::from(o) - 1) >> l);
        }
        debug_assert_eq!(buckets.count_ones(), k, "offsets share a bucket");
        w.put(buckets & 0xffff_ffff, nb.min(32));
        if nb > 32 {
            w.put(buckets >> 32, nb - 32);
        }
        let mask = (1u32 << l) - 1;
        for &o in offsets {
            w.put(u64::from((u32::from(o) - 1) & mask), l);
        }
        return;
    }
    match code {
        CODE_BITMAP => {
            let mut next = 1u32;
            for &o in offsets {
                let o = u32::from(o);
                w.zeros(o - next);
                w.put(1, 1);
                next = o + 1;
            }
            w.zeros(u + 1 - next);
        }
        CODE_RUN => {
            let b = bitlen(u);
            w.put(u64::from(offsets[0]), b);
            w.put(u64::from(offsets[offsets.len() - 1]), b);
        }
        c if usize::from(c) > EF_MAX_K => {
            debug_assert_eq!(usize::from(c) - EF_MAX_K, offsets.len());
            for &o in offsets {
                w.put(u64::from(o), bitlen(u));
            }
        }
        k => {
            debug_assert_eq!(usize::from(k), offsets.len());
            let l = ef_l(k as u32, u);
            let mask = (1u32 << l) - 1;
            for &o in offsets {
                w.put(u64::from((u32::from(o) - 1) & mask), l);
            }
            let mut high = 0u32;
            for &o in offsets {
                let h = (u32::from(o) - 1) >> l;
                w.zeros(h - high);
                w.put(1, 1);
                high = h;
            }
            w.zeros(((u - 1) >> l) - high);
        }
    }
}

/// Is offset `o` in the container at bit `q` of `a`? The container is in the plain (not
/// bucketed) form of `code`. Hot path: the last step of a lookup in a mixed group.
#[inline(always)]
pub fn contains(a: &[u8], q: usize, code: u8, u: u32, o: u32) -> bool {
    let l = match code {
        c if (1..=EF_MAX_K as u8).contains(&c) => ef_l(u32::from(c), u),
        _ => 0,
    };
    contains_with(a, q, code, false, l, u, o)
}

/// [`contains`] with the Elias–Fano width `l` of an Elias–Fano code already known, and
/// `bucketed` naming the form of such a code: the last step of every lookup in a uniform
/// group, whose directory entry carries both. Hot path: the short tests inline, Elias–Fano's
/// select out of line, so that the caller stays small (few registers to save, few
/// instructions in flight per probe).
#[inline(always)]
pub fn contains_with(a: &[u8], q: usize, code: u8, bucketed: bool, l: u32, u: u32, o: u32) -> bool {
    if o == 0 || o > u {
        return false;
    }
    match code {
        CODE_BITMAP => read_bits(a, q + (o - 1) as usize, 1) != 0,
        CODE_RUN => {
            let b = bitlen(u);
            let v = read_bits(a, q, 2 * b);
            (v & ((1 << b) - 1)) as u32 <= o && o <= (v >> b) as u32
        }
        c if usize::from(c) > EF_MAX_K => packed_contains(a, q, u32::from(c) - EF_MAX_K as u32, bitlen(u), o),
        _ if bucketed => bucket_contains(a, q, l, u, o - 1),
        k => ef_contains_outlined(a, q, u32::from(k), l, u, o - 1),
    }
}

#[inline(never)]
fn ef_contains_outlined(a: &[u8], q: usize, k: u32, l: u32, u: u32, x: u32) -> bool {
    ef_contains(a, q, k, l, u, x)
}

/// Membership of `o` among `k <= 6` packed `b`-bit offsets (`k * b <= 56`), by the "has a
/// zero lane" test on the XOR with `o` in every lane: five instructions after the load, no
/// branch. Exact: a borrow only reaches a lane above a lane that is zero.
#[inline(always)]
fn packed_contains(a: &[u8], q: usize, k: u32, b: u32, o: u32) -> bool {
    let ones = LANE_ONES[b as usize] & ((1u64 << (k * b)) - 1);
    let highs = ones << (b - 1);
    // Only the low `k * b` bits matter (`highs` masks the rest), so no 56-bit mask.
    let t = (read_u64(a, q >> 3) >> (q & 7)) ^ (u64::from(o) * ones);
    t.wrapping_sub(ones) & !t & highs != 0
}

/// Bucketed Elias–Fano membership of `x` (see the module documentation): the bucket bitmap
/// and the low parts both come from the 16 bytes at the container's first byte.
#[inline(always)]
fn bucket_contains(a: &[u8], q: usize, l: u32, u: u32, x: u32) -> bool {
    let nb = ((u - 1) >> l) + 1;
    let h = x >> l;
    let lo = u64::from(x & ((1 << l) - 1));
    let byte = q >> 3;
    let sh = (q & 7) as u32;
    let w0 = read_u64(a, byte);
    let w1 = read_u64(a, byte + 8);
    let present = (w0 >> (sh + h)) & 1;
    let rank = (w0 & (((1u64 << h) - 1) << sh)).count_ones();
    let p = sh + nb + rank * l;
    let v = ((u128::from(w1) << 64 | u128::from(w0)) >> p) as u64 & ((1u64 << l) - 1);
    (present != 0) & (v == lo)
}

/// `SELECT_IN_BYTE[r << 8 | b]`: the position of the set bit of rank `r` in byte `b` (8 if none).
static SELECT_IN_BYTE: [u8; 2048] = {
    let mut t = [8u8; 2048];
    let mut b = 0;
    while b < 256 {
        let (mut r, mut i) = (0, 0);
        while i < 8 {
            if b >> i & 1 != 0 {
                t[r << 8 | b] = i as u8;
                r += 1;
            }
            i += 1;
        }
        b += 1;
    }
    t
};

/// Position of the set bit of rank `r` (0-based) in `w`; `w` must have more than `r` set bits.
/// Branch-free broadword select (Vigna, "Broadword implementation of rank/select queries",
/// 2008): byte popcounts, their prefix sums by one multiply, the byte by a SWAR compare, the bit
/// by a table. Portable; BMI2 `pdep` was tried and made shuffled probes 60% slower on the
/// benchmark machine (microcoded `pdep`, as on AMD before Zen 3).
#[inline(always)]
fn select1(w: u64, r: u32) -> u32 {
    const L8: u64 = 0x0101_0101_0101_0101;
    const H8: u64 = 0x8080_8080_8080_8080;
    let mut s = w - ((w >> 1) & 0x5555_5555_5555_5555);
    s = (s & 0x3333_3333_3333_3333) + ((s >> 2) & 0x3333_3333_3333_3333);
    s = (s + (s >> 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    let sums = s.wrapping_mul(L8);
    // High bit of byte i set iff the bytes up to i hold at most r set bits.
    let le = (((u64::from(r) * L8) | H8) - sums) & H8;
    let place = (((le >> 7).wrapping_mul(L8) >> 56) * 8) as u32;
    let before = ((sums << 8) >> place) & 0xff;
    let rank = u64::from(r) - before;
    let byte = (w >> place) & 0xff;
    place + u32::from(SELECT_IN_BYTE[(rank << 8 | byte) as usize])
}

/// Elias–Fano membership of `x`. When the upper part fits one 56-bit word (every page of
/// up to about 25 offsets), branch-free: the bucket of `x >> l` starts just after the
/// `h`-th zero of the upper part (one select), its length is the run of ones there, and the
/// first two low parts of the bucket are compared at once; longer buckets fall back to a loop.
/// Otherwise [`ef_contains_long`].
#[inline(always)]
fn ef_contains(a: &[u8], q: usize, k: u32, l: u32, u: u32, x: u32) -> bool {
    debug_assert_eq!(l, ef_l(k, u));
    let ulen = k + ((u - 1) >> l);
    if ulen > 56 {
        return ef_contains_long(a, q, k, u, x);
    }
    let h = x >> l;
    let lo = u64::from(x & ((1 << l) - 1));
    let up = q + (k * l) as usize;
    let upper = read56(a, up) & ((1u64 << ulen) - 1);
    // A virtual zero at position -1: bucket h starts at the h-th zero (0-based) of `inv`.
    let inv = (!upper << 1 | 1) & ((1u64 << (ulen + 1)) - 1);
    let p = select1(inv, h);
    let i0 = p - h;
    let cnt = (!(upper >> p)).trailing_zeros();
    let lmask = (1u64 << l) - 1;
    let lows = read56(a, q + (i0 * l) as usize);
    let hit = (cnt >= 1) & (lows & lmask == lo) | (cnt >= 2) & ((lows >> l) & lmask == lo);
    if cnt <= 2 || hit {
        return hit;
    }
    (2..cnt).any(|j| read_bits(a, q + ((i0 + j) * l) as usize, l) == lo)
}

/// Elias–Fano membership of `x` for long upper parts: skip the values whose high part is
/// below `x >> l` by counting zeros of the upper part word by word, then compare low parts in
/// that bucket.
#[inline(never)]
fn ef_contains_long(a: &[u8], q: usize, k: u32, u: u32, x: u32) -> bool {
    let l = ef_l(k, u);
    let h = x >> l;
    let lo = u64::from(x & ((1 << l) - 1));
    let up = q + (k * l) as usize;
    // Find the start of bucket h: the position just after the h-th zero of the upper part.
    let mut pos = 0usize; // bit position within the upper part
    let mut zeros_left = h; // zeros still to skip
    let mut i = 0u32; // index of the value at `pos`
    while zeros_left > 0 {
        let word = read56(a, up + pos);
        let z = 56 - word.count_ones();
        if z < zeros_left {
            zeros_left -= z;
            i += word.count_ones();
            pos += 56;
            continue;
        }
        // The zeros_left-th zero of this word: clear the lowest zeros_left - 1 zeros of !word.
        let mut inv = !word & ((1u64 << 56) - 1);
        for _ in 1..zeros_left {
            inv &= inv - 1;
        }
        let zpos = inv.trailing_zeros();
        i += (word & ((1u64 << zpos) - 1)).count_ones();
        pos += zpos as usize + 1;
        zeros_left = 0;
    }
    // Values in bucket h are the ones before the next zero.
    loop {
        if i >= k || read_bits(a, up + pos, 1) == 0 {
            return false;
        }
        let v = read_bits(a, q + (i * l) as usize, l);
        if v >= lo {
            return v == lo;
        }
        i += 1;
        pos += 1;
    }
}

/// Decodes the container into `out` (cleared first).
pub fn decode(a: &[u8], q: usize, code: u8, bucketed: bool, u: u32, out: &mut Vec<u16>) {
    out.clear();
    if bucketed {
        let l = ef_l(u32::from(code), u);
        let nb = ((u - 1) >> l) + 1;
        let mut buckets = read_bits(a, q, nb.min(56));
        let mut low = q + nb as usize;
        while buckets != 0 {
            let h = buckets.trailing_zeros();
            let x = (h << l) | read_bits(a, low, l) as u32;
            out.push((x + 1) as u16);
            low += l as usize;
            buckets &= buckets - 1;
        }
        return;
    }
    match code {
        CODE_BITMAP => {
            let mut base = 0u32;
            while base < u {
                let w = (u - base).min(56);
                let mut word = read_bits(a, q + base as usize, w);
                while word != 0 {
                    out.push((base + word.trailing_zeros() + 1) as u16);
                    word &= word - 1;
                }
                base += w;
            }
        }
        CODE_RUN => {
            let b = bitlen(u);
            let lo = read_bits(a, q, b) as u16;
            let hi = read_bits(a, q + b as usize, b) as u16;
            out.extend(lo..=hi);
        }
        c if usize::from(c) > EF_MAX_K => {
            let b = bitlen(u);
            for i in 0..u32::from(c) - EF_MAX_K as u32 {
                out.push(read_bits(a, q + (i * b) as usize, b) as u16);
            }
        }
        k => {
            let k = u32::from(k);
            let l = ef_l(k, u);
            let up = q + (k * l) as usize;
            let mut pos = 0usize;
            for i in 0..k {
                loop {
                    let word = read56(a, up + pos);
                    if word != 0 {
                        pos += word.trailing_zeros() as usize;
                        break;
                    }
                    pos += 56;
                }
                let high = pos as u32 - i;
                let low = read_bits(a, q + (i * l) as usize, l) as u32;
                out.push(((high << l) + low + 1) as u16);
                pos += 1;
            }
        }
    }
}
