//! Statistics counters that every thread bumps on every buffer access or transaction
//! (pg_stat_database's `xact_commit`, `tup_fetched`, …; the buffer pool's hits).
//!
//! One shared atomic per counter makes its cache line travel between the cores on every
//! increment; with the counters of a database packed together, two threads running
//! read-only transactions spent a measurable share of their time waiting for those lines.
//! PostgreSQL keeps such counts per backend and sums them when they are read; a
//! [`StripedCounter`] does the same with a fixed number of cache-line-sized stripes, each
//! thread adding to its own: increments stay relaxed atomic adds, and a read sums the
//! stripes (exact once the writers are quiet, as a relaxed counter always was).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Stripes per counter: more than the threads that usually run at once, so that two
/// threads rarely share one.
const STRIPES: usize = 16;

/// One stripe on a cache line (and its adjacent-line prefetch partner) of its own.
#[derive(Default)]
#[repr(align(128))]
struct Stripe(AtomicU64);

/// A monotonic counter added to from many threads; see the module documentation.
#[derive(Default)]
pub struct StripedCounter {
    stripes: [Stripe; STRIPES],
}

/// Hands each thread its stripe, round-robin in the order threads first count.
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    static MY_STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
}

impl StripedCounter {
    /// A counter that starts at `n` (restored statistics).
    pub fn new(n: u64) -> StripedCounter {
        let c = StripedCounter::default();
        c.stripes[0].0.store(n, Ordering::Relaxed);
        c
    }

    /// Adds `n` to this thread's stripe.
    #[inline]
    pub fn add(&self, n: u64) {
        let i = MY_STRIPE.with(|s| *s);
        self.stripes[i].0.fetch_add(n, Ordering::Relaxed);
    }

    /// The sum of all stripes.
    pub fn get(&self) -> u64 {
        self.stripes.iter().map(|s| s.0.load(Ordering::Relaxed)).fold(0, u64::wrapping_add)
    }
}

impl std::fmt::Debug for StripedCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_add_up() {
        let c = StripedCounter::default();
        std::thread::scope(|s| {
            for t in 0..20u64 {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..1000 {
                        c.add(t + 1);
                    }
                });
            }
        });
        assert_eq!(c.get(), 1000 * (1..=20).sum::<u64>());
    }
}
