//! Bit-level reading and writing over the store's byte arena, least significant bit first.
//!
//! Invariant the reader relies on: the arena always ends with [`PAD`] zero bytes after the
//! last encoded group, so an unaligned 16-byte load at any bit position inside a group is in
//! bounds.

/// Zero bytes kept at the end of the arena so that [`read_bits`] can load 8 bytes anywhere
/// and a bucketed container's lookup can load 16 bytes at its first byte.
pub const PAD: usize = 16;

/// `LANE_ONES[w]`: a one in the lowest bit of each of the `56 / w` lanes of `w` bits that
/// fit one [`read_bits`] (0 for `w = 0`).
pub static LANE_ONES: [u64; 33] = {
    let mut t = [0u64; 33];
    let mut w = 1;
    while w <= 32 {
        let mut i = 0;
        while i < 56 / w {
            t[w] |= 1 << (i * w);
            i += 1;
        }
        w += 1;
    }
    t
};

/// The 8 bytes at byte `byte` of `a`, little-endian.
#[inline(always)]
pub fn read_u64(a: &[u8], byte: usize) -> u64 {
    u64::from_le_bytes(a[byte..byte + 8].try_into().expect("8 bytes"))
}

/// Reads `w <= 56` bits starting at bit `pos` of `a`.
#[inline(always)]
pub fn read_bits(a: &[u8], pos: usize, w: u32) -> u64 {
    debug_assert!(w <= 56);
    let byte = pos >> 3;
    let word = u64::from_le_bytes(a[byte..byte + 8].try_into().expect("8 bytes"));
    (word >> (pos & 7)) & ((1u64 << w) - 1)
}

/// Reads 56 bits starting at bit `pos` (no masking beyond the shift).
#[inline(always)]
pub fn read56(a: &[u8], pos: usize) -> u64 {
    let byte = pos >> 3;
    let word = u64::from_le_bytes(a[byte..byte + 8].try_into().expect("8 bytes"));
    (word >> (pos & 7)) & ((1u64 << 56) - 1)
}

/// Appends bits to a byte vector.
pub struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    nacc: u32,
}

impl<'a> BitWriter<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        BitWriter { out, acc: 0, nacc: 0 }
    }

    /// Appends the low `w <= 32` bits of `v`.
    pub fn put(&mut self, v: u64, w: u32) {
        debug_assert!(w <= 32 && (w == 32 || v >> w == 0));
        self.acc |= v << self.nacc;
        self.nacc += w;
        if self.nacc >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.nacc -= 32;
        }
    }

    /// Appends `n` zero bits.
    pub fn zeros(&mut self, mut n: u32) {
        while n > 0 {
            let w = n.min(32);
            self.put(0, w);
            n -= w;
        }
    }

    /// Pads to a byte boundary with zero bits.
    pub fn finish(mut self) {
        while self.nacc > 0 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.nacc = self.nacc.saturating_sub(8);
        }
    }
}
