//! The calling thread's heap accesses (PostgreSQL's per-backend counters behind
//! `pg_statio_*` and EXPLAIN's `Heap Fetches`), so that a caller can attribute them to the
//! work it did: `settle tpcc` charges each transaction type with the heap pages it touched and
//! the heap visits its index-only scans made or avoided.
//!
//! Counted where the shared counters are counted: [`super::read_page`] (a heap page hit or
//! read) and the index-only scan (an entry whose heap page the visibility map vouched for, or
//! one it had to check in the heap). Thread-local, like [`crate::buffer::my_usage`]: a
//! transaction runs on one thread, so the difference across it is its own.

/// Heap accesses of one thread so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapUsage {
    /// Heap pages found in shared buffers / read in.
    pub blks_hit: u64,
    pub blks_read: u64,
    /// Index-only scan entries checked in the heap / answered from the index alone.
    pub index_only_heap_fetches: u64,
    pub index_only_fetches_avoided: u64,
}

impl HeapUsage {
    pub fn since(self, earlier: HeapUsage) -> HeapUsage {
        HeapUsage {
            blks_hit: self.blks_hit.saturating_sub(earlier.blks_hit),
            blks_read: self.blks_read.saturating_sub(earlier.blks_read),
            index_only_heap_fetches: self.index_only_heap_fetches.saturating_sub(earlier.index_only_heap_fetches),
            index_only_fetches_avoided: self
                .index_only_fetches_avoided
                .saturating_sub(earlier.index_only_fetches_avoided),
        }
    }
}

crate::sync::thread_local! {
    static MY_HEAP_USAGE: std::cell::Cell<HeapUsage> = const {
        std::cell::Cell::new(HeapUsage {
            blks_hit: 0,
            blks_read: 0,
            index_only_heap_fetches: 0,
            index_only_fetches_avoided: 0,
        })
    };
}

/// The heap accesses of the calling thread so far.
pub fn my_heap_usage() -> HeapUsage {
    MY_HEAP_USAGE.with(|c| c.get())
}

/// Adds to the calling thread's heap accesses.
pub(crate) fn count(f: impl FnOnce(&mut HeapUsage)) {
    MY_HEAP_USAGE.with(|c| {
        let mut u = c.get();
        f(&mut u);
        c.set(u);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_thread_and_subtracts() {
        let before = my_heap_usage();
        count(|u| {
            u.blks_hit += 2;
            u.index_only_fetches_avoided += 1;
        });
        let d = my_heap_usage().since(before);
        assert_eq!(
            d,
            HeapUsage { blks_hit: 2, blks_read: 0, index_only_heap_fetches: 0, index_only_fetches_avoided: 1 }
        );
        // Another thread starts from zero and does not see this one's.
        let other = std::thread::spawn(my_heap_usage).join().unwrap();
        assert_eq!(other, HeapUsage::default());
    }
}
