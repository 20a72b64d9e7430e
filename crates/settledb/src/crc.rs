//! CRC-32C (Castagnoli), the checksum of everything the engine writes and reads back: WAL
//! records (the polynomial PostgreSQL's WAL uses), page checksums, and the state files (control
//! file, slots, two-phase state, statistics, relation sizes, spilled changes).
//!
//! Two implementations, chosen once per process by what the CPU has:
//!
//! - With AVX-512 and VPCLMULQDQ, `crc-fast`, which folds long inputs with 512-bit carry-less
//!   multiplication: on a 2-core Xeon with AVX-512 it took 104 ns for an 8 KB page against the
//!   `crc32c` crate's 501 ns.
//! - Otherwise, with SSE 4.2 and PCLMULQDQ, our own three-lane fold (below): the CRC32
//!   instruction takes three cycles to give its result but starts one each cycle, so three
//!   independent lanes keep it busy, and one carry-less multiply per lane shifts the lanes'
//!   registers into place. On the 2-core AMD EPYC (Zen 3, no AVX-512) this project runs on
//!   now, a full-page image's two pieces (300 and 7,412 bytes, appended to a record's CRC)
//!   took 382-394 ns, against 567-623 ns for `crc-fast` (whose path there folds 128-bit
//!   registers) and 461 ns for the `crc32c` crate. A VACUUM that images every page computes
//!   one such CRC per page: in `perf` profiles of the first VACUUM of `settle bench vacuum
//!   --scale 50 --policy lazy`, the CRC had 171 samples against 246-261 with `crc-fast` (of
//!   some 3,100-3,700).
//!
//! `crc-fast` also serves every other CPU.

use crc_fast::{CrcAlgorithm, Digest};

/// The CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if lanes::available() {
        // SAFETY: the CPU has SSE 4.2 and PCLMULQDQ (`available`).
        return !unsafe { lanes::fold(!0, data) };
    }
    crc_fast::crc32_iscsi(data)
}

/// Appended inputs up to this long go through the CRC32 instruction directly. A WAL record's
/// 20-byte header, a page checksum's block number and zeroed field are such appends, and a
/// `crc-fast` digest costs more to set up than they take to fold.
const SHORT_APPEND: usize = 64;

/// The CRC-32C of the bytes `crc` was computed over followed by `data`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if lanes::available() {
            // SAFETY: the CPU has SSE 4.2 and PCLMULQDQ (`available`). The register
            // continues from the final value with its output inversion undone.
            return !unsafe { lanes::fold(!crc, data) };
        }
        if data.len() <= SHORT_APPEND && std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE 4.2, checked just above.
            return !unsafe { lanes::one(!crc, data) };
        }
    }
    // The register continues from the final value with its output inversion undone.
    let mut d = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    d.update(data);
    d.finalize() as u32
}

/// The three-lane fold with the CRC32 instruction (see the module doc).
///
/// The register `r` is the CRC's raw state (no inversions): feeding bytes maps it linearly,
/// and feeding `n` zero bytes multiplies it by x^(8n) modulo the polynomial. So for a block cut
/// into lanes A, B, C of `L` bytes each, `state(r, A B C) = r_A * x^(16L) + r_B * x^(8L) + r_C`,
/// where `r_A` is the state after A from `r`, and `r_B`, `r_C` the states after B and C from
/// zero: the three run side by side, and two carry-less multiplications by constants
/// computed at compile time put `r_A` and `r_B` in place.
#[cfg(target_arch = "x86_64")]
mod lanes {
    use std::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_crc32_u64, _mm_crc32_u8, _mm_cvtsi128_si64, _mm_cvtsi32_si128, _mm_cvtsi64_si128,
    };

    /// Lane length of the long blocks (3 KiB a block), then of the short ones (384 bytes);
    /// what is left after them goes through one lane. Chosen by timing the image CRC above
    /// with lanes of 512/64, 680/80, 1024/64, 1024/128 and 2048/128 bytes.
    pub(super) const LONG: usize = 1024;
    pub(super) const SHORT: usize = 128;

    /// CRC-32C's polynomial, bit-reflected.
    const POLY: u32 = 0x82F6_3B78;

    /// `a * b` modulo the polynomial, both bit-reflected (the coefficient of x^0 in bit 31).
    const fn mul_mod(a: u32, mut b: u32) -> u32 {
        let mut p = 0u32;
        let mut m = 1u32 << 31;
        while m != 0 {
            if a & m != 0 {
                p ^= b;
            }
            b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
            m >>= 1;
        }
        p
    }

    /// x^n modulo the polynomial, bit-reflected.
    const fn x_pow(mut n: u64) -> u32 {
        let (mut r, mut sq) = (1u32 << 31, 1u32 << 30); // 1 and x
        while n > 0 {
            if n & 1 == 1 {
                r = mul_mod(r, sq);
            }
            sq = mul_mod(sq, sq);
            n >>= 1;
        }
        r
    }

    /// The multiplier that [`shift`] turns into "feed `n` zero bytes". The CRC32 instruction
    /// that reduces the product multiplies by x^32, and the 64-bit reflected product of two
    /// 32-bit reflected values stands one place off; hence x^(8n - 32) and the shift by one.
    const fn shifter(n: usize) -> u64 {
        (x_pow(8 * n as u64 - 32) as u64) << 1
    }

    const K_LONG: u64 = shifter(LONG);
    const K_LONG2: u64 = shifter(2 * LONG);
    const K_SHORT: u64 = shifter(SHORT);
    const K_SHORT2: u64 = shifter(2 * SHORT);

    /// Whether the CPU can run [`fold`], and [`fold`] is the faster choice on it (see the
    /// module doc): `std` caches the answers, so this is a few loads.
    #[inline]
    pub(super) fn available() -> bool {
        std::arch::is_x86_feature_detected!("sse4.2")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && !(std::arch::is_x86_feature_detected!("avx512vl") && std::arch::is_x86_feature_detected!("vpclmulqdq"))
    }

    /// The raw state `r` advanced over `n` zero bytes, `k` being `shifter(n)`.
    #[inline]
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    fn shift(r: u32, k: u64) -> u32 {
        let p = _mm_clmulepi64_si128(_mm_cvtsi32_si128(r as i32), _mm_cvtsi64_si128(k as i64), 0);
        _mm_crc32_u64(0, _mm_cvtsi128_si64(p) as u64) as u32
    }

    /// The little-endian word in `w`, eight bytes.
    #[inline(always)]
    fn word(w: &[u8]) -> u64 {
        u64::from_le_bytes(w.try_into().unwrap_or_default())
    }

    /// The raw state `r` advanced over one block of three `lane`-byte lanes.
    #[inline]
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    fn block(r: u32, b: &[u8], lane: usize, k: u64, k2: u64) -> u32 {
        let (x, rest) = b.split_at(lane);
        let (y, z) = rest.split_at(lane);
        let (mut a, mut m, mut c) = (u64::from(r), 0u64, 0u64);
        for ((p, q), s) in x.chunks_exact(8).zip(y.chunks_exact(8)).zip(z.chunks_exact(8)) {
            a = _mm_crc32_u64(a, word(p));
            m = _mm_crc32_u64(m, word(q));
            c = _mm_crc32_u64(c, word(s));
        }
        shift(a as u32, k2) ^ shift(m as u32, k) ^ c as u32
    }

    /// The raw state `r` advanced over `data`.
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    pub(super) fn fold(mut r: u32, mut data: &[u8]) -> u32 {
        while data.len() >= 3 * LONG {
            r = block(r, &data[..3 * LONG], LONG, K_LONG, K_LONG2);
            data = &data[3 * LONG..];
        }
        while data.len() >= 3 * SHORT {
            r = block(r, &data[..3 * SHORT], SHORT, K_SHORT, K_SHORT2);
            data = &data[3 * SHORT..];
        }
        one(r, data)
    }

    /// The raw state `r` advanced over `data` in one lane: eight bytes at a time, then byte by
    /// byte.
    #[target_feature(enable = "sse4.2")]
    pub(super) fn one(r: u32, data: &[u8]) -> u32 {
        let mut words = data.chunks_exact(8);
        let mut r = u64::from(r);
        for w in &mut words {
            r = _mm_crc32_u64(r, word(w));
        }
        // The instruction leaves the 32-bit register in the low half.
        let mut r = r as u32;
        for &b in words.remainder() {
            r = _mm_crc32_u8(r, b);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn castagnoli_check_value() {
        // The catalogue's check value of CRC-32C (CRC-32/ISCSI).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn appending_is_the_crc_of_the_whole() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for (a, b) in [(0, 0), (0, 1), (3, 200), (17, 8192 + 17), (0, 19_999), (5, 5)] {
            let whole = crc32c(&data[a..]);
            assert_eq!(crc32c_append(crc32c(&data[a..b]), &data[b..]), whole, "{a}..{b}");
        }
        // In pieces, as a WAL record's payloads are summed.
        let pieces = data.chunks(777).fold(0, crc32c_append);
        assert_eq!(pieces, crc32c(&data));
        // Short appends (the CRC32 instruction's path) of every length up to past its limit,
        // after every length of prefix up to a word and more.
        for a in 0..20 {
            for n in 0..=SHORT_APPEND + 9 {
                let whole = crc32c(&data[..a + n]);
                assert_eq!(crc32c_append(crc32c(&data[..a]), &data[a..a + n]), whole, "{a}+{n}");
            }
        }
        let bytes = data[..SHORT_APPEND].chunks(3).fold(0, crc32c_append);
        assert_eq!(bytes, crc32c(&data[..SHORT_APPEND]));
    }

    /// CRC-32C one bit at a time, from its definition: the model the fast paths must match.
    fn bitwise(crc: u32, data: &[u8]) -> u32 {
        let mut r = !crc;
        for &b in data {
            r ^= u32::from(b);
            for _ in 0..8 {
                r = if r & 1 != 0 { (r >> 1) ^ 0x82F6_3B78 } else { r >> 1 };
            }
        }
        !r
    }

    #[test]
    fn every_path_matches_the_bitwise_model() {
        // Every length through the single lane and the short blocks, and the lengths around
        // each boundary of the long blocks, and a full-page image's pieces.
        #[cfg(target_arch = "x86_64")]
        let (long, short) = (lanes::LONG, lanes::SHORT);
        #[cfg(not(target_arch = "x86_64"))]
        let (long, short) = (1024, 128);
        let mut lengths: Vec<usize> = (0..=3 * short * 2 + 9).collect();
        for edge in [3 * long, 2 * 3 * long, 2 * 3 * long + 3 * short, 3 * 3 * long] {
            lengths.extend(edge - 9..=edge + 9);
        }
        lengths.extend([7412, 8192, 11_000]);
        let end = lengths.iter().max().copied().unwrap_or(0) + 8;
        let data: Vec<u8> = (0..end as u32).map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8).collect();
        for &n in &lengths {
            for (at, init) in [(0, 0), (1, 0x1234_5678), (5, 0xffff_ffff)] {
                let d = &data[at..at + n];
                let want = bitwise(init, d);
                assert_eq!(crc32c_append(init, d), want, "append {n} bytes at {at}");
                let mut g = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(!init));
                g.update(d);
                assert_eq!(g.finalize() as u32, want, "crc-fast {n} bytes at {at}");
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("sse4.2") && std::arch::is_x86_feature_detected!("pclmulqdq") {
                    // SAFETY: checked just above; run whether or not `crc32c` would choose it.
                    assert_eq!(!unsafe { lanes::fold(!init, d) }, want, "lanes {n} bytes at {at}");
                }
            }
            assert_eq!(crc32c(&data[..n]), bitwise(0, &data[..n]), "{n} bytes");
        }
    }
}
