//! The random functions of the TPC-C specification (clause 2.1.6 and 4.3.2), over one seeded
//! generator.
//!
//! Every terminal, loader and delivery worker owns one [`TpccRng`], seeded from the run's seed
//! and its own number, so a run's requests depend only on the seed and the configuration, not on
//! scheduling (the interleaving of terminals, and so the database's final state, still does).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// The constants C of NURand (clause 2.1.6): one per field kind, drawn once per run.
///
/// The C used for customer last names while running must differ from the one used to load by
/// an amount in [65, 119], other than 96 and 112 (clause 2.1.6.1), so that the names looked up
/// are not exactly the names loaded most often.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct NurandConstants {
    pub c_last_load: u32,
    pub c_last_run: u32,
    pub c_id: u32,
    pub ol_i_id: u32,
}

impl NurandConstants {
    /// Draws the constants from `seed`, the run's value of C_LAST satisfying clause 2.1.6.1.
    pub fn from_seed(seed: u64) -> NurandConstants {
        let mut r = StdRng::seed_from_u64(seed ^ 0x4e55_5241_4e44);
        let c_last_load = r.gen_range(0..=255);
        let c_last_run = loop {
            let c = r.gen_range(0..=255u32);
            let delta = c.abs_diff(c_last_load);
            if (65..=119).contains(&delta) && delta != 96 && delta != 112 {
                break c;
            }
        };
        NurandConstants { c_last_load, c_last_run, c_id: r.gen_range(0..=1023), ol_i_id: r.gen_range(0..=8191) }
    }
}

const SYLLABLES: [&str; 10] = ["BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"];

/// A customer last name from a number in 0..=999 (clause 4.3.2.3): three syllables, one per
/// decimal digit.
pub fn last_name(n: u32) -> String {
    let mut s = String::with_capacity(16);
    for d in [n / 100, (n / 10) % 10, n % 10] {
        s.push_str(SYLLABLES[d as usize]);
    }
    s
}

/// One seeded generator with the specification's random functions.
pub struct TpccRng {
    rng: StdRng,
    pub c: NurandConstants,
}

impl TpccRng {
    /// The generator of stream `stream` (a terminal, a loader, a worker) of the run `seed`.
    pub fn new(seed: u64, stream: u64, c: NurandConstants) -> TpccRng {
        let mixed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ stream.wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
        TpccRng { rng: StdRng::seed_from_u64(mixed), c }
    }

    /// Uniform in `[lo, hi]`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        self.rng.gen_range(lo..=hi)
    }

    /// Uniform in `[lo, hi]`, for the i32 fields.
    pub fn int32(&mut self, lo: i32, hi: i32) -> i32 {
        self.rng.gen_range(lo..=hi)
    }

    /// NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x.
    pub fn nurand(&mut self, a: u32, x: u32, y: u32, c: u32) -> u32 {
        let r = (self.rng.gen_range(0..=a) | self.rng.gen_range(x..=y)) + c;
        r % (y - x + 1) + x
    }

    /// A customer ID for a transaction: NURand(1023, 1, 3000).
    pub fn customer_id(&mut self) -> i32 {
        self.nurand(1023, 1, 3000, self.c.c_id) as i32
    }

    /// An item ID for a transaction: NURand(8191, 1, 100000).
    pub fn item_id(&mut self) -> i32 {
        self.nurand(8191, 1, 100_000, self.c.ol_i_id) as i32
    }

    /// A customer last name to look up while running: NURand(255, 0, 999) with C_LAST run.
    pub fn run_last_name(&mut self) -> String {
        last_name(self.nurand(255, 0, 999, self.c.c_last_run))
    }

    /// A customer last name to load (customers 1001..3000 of a district).
    pub fn load_last_name(&mut self) -> String {
        last_name(self.nurand(255, 0, 999, self.c.c_last_load))
    }

    /// A random alphanumeric string of `lo..=hi` characters ("a-string", clause 4.3.2.2).
    pub fn astring(&mut self, lo: usize, hi: usize) -> String {
        const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let n = self.rng.gen_range(lo..=hi);
        (0..n).map(|_| CHARS[self.rng.gen_range(0..CHARS.len())] as char).collect()
    }

    /// A random numeric string of `lo..=hi` digits ("n-string").
    pub fn nstring(&mut self, lo: usize, hi: usize) -> String {
        let n = self.rng.gen_range(lo..=hi);
        (0..n).map(|_| (b'0' + self.rng.gen_range(0..10u8)) as char).collect()
    }

    /// A zip code: four random digits and "11111" (clause 4.3.2.7).
    pub fn zip(&mut self) -> String {
        let mut s = self.nstring(4, 4);
        s.push_str("11111");
        s
    }

    /// An a-string of `lo..=hi` characters that contains "ORIGINAL" at a random place in 10%
    /// of the cases (i_data, s_data; clause 4.3.3.1).
    pub fn data_with_original(&mut self, lo: usize, hi: usize) -> String {
        let mut s = self.astring(lo, hi);
        if self.rng.gen_ratio(1, 10) {
            let at = self.rng.gen_range(0..=s.len() - 8);
            s.replace_range(at..at + 8, "ORIGINAL");
        }
        s
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u32) -> bool {
        self.rng.gen_range(0..100) < percent
    }

    /// A random permutation of 1..=n (the customers of a district's initial orders).
    pub fn permutation(&mut self, n: i32) -> Vec<i32> {
        let mut v: Vec<i32> = (1..=n).collect();
        for i in (1..v.len()).rev() {
            let j = self.rng.gen_range(0..=i);
            v.swap(i, j);
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_constant_keeps_the_distance_the_spec_requires() {
        for seed in 0..500 {
            let c = NurandConstants::from_seed(seed);
            let d = c.c_last_run.abs_diff(c.c_last_load);
            assert!((65..=119).contains(&d) && d != 96 && d != 112, "seed {seed}: {c:?}");
        }
    }

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let c = NurandConstants::from_seed(7);
        let mut r = TpccRng::new(7, 1, c);
        let mut counts = vec![0u32; 3001];
        for _ in 0..300_000 {
            let id = r.customer_id();
            assert!((1..=3000).contains(&id));
            counts[id as usize] += 1;
        }
        // Non-uniform: the most frequent customer is drawn far more often than the mean (100).
        assert!(*counts.iter().max().unwrap() > 300);
    }

    #[test]
    fn last_names_follow_the_syllables() {
        assert_eq!(last_name(0), "BARBARBAR");
        assert_eq!(last_name(371), "PRICALLYOUGHT");
        assert_eq!(last_name(999), "EINGEINGEING");
    }

    #[test]
    fn same_seed_same_stream() {
        let c = NurandConstants::from_seed(1);
        let a: Vec<i64> = (0..10)
            .map({
                let mut r = TpccRng::new(1, 3, c);
                move |_| r.int(0, 1 << 40)
            })
            .collect();
        let b: Vec<i64> = (0..10)
            .map({
                let mut r = TpccRng::new(1, 3, c);
                move |_| r.int(0, 1 << 40)
            })
            .collect();
        assert_eq!(a, b);
        let mut other = TpccRng::new(1, 4, c);
        assert_ne!(a[0], other.int(0, 1 << 40));
    }
}
