//! Vacuum cycle IDs (PostgreSQL's `_bt_start_vacuum`, `_bt_vacuum_cycleid`, `_bt_end_vacuum`
//! in `nbtutils.c`, and the `btpo_cycleid` page field).
//!
//! A bulk delete reads the index in physical block order, not in key order, so a page split
//! during the scan can move entries from a page the scan has not reached yet to a block it has
//! already passed (a recycled page taken from the free list). To notice, the bulk delete takes a
//! *cycle ID* for the index before it reads any page, and every split that runs meanwhile
//! stamps that ID on both of its halves (`btpo_cycleid` in the special area). The right half is
//! also marked `SPLIT_END` when its right sibling (the split page's old one) carries another ID:
//!
//! ```text
//!   before:            A ──> D              (D: another ID)
//!   A splits:          A ──> B ──> D        B: our ID, SPLIT_END
//!   A splits again:    A ──> C ──> B ──> D  C: our ID, not SPLIT_END (B has our ID)
//! ```
//!
//! Entries A held when the scan began may now be on A, C or B, never on D. When the scan reaches
//! a leaf carrying its own ID whose right sibling lies at a block already passed, it follows the
//! right links through the pages split off it, up to the one marked `SPLIT_END`
//! ([`super::vacuum`] has the details and the parallel case).
//!
//! # The table
//!
//! PostgreSQL keeps the (index, cycle ID) pairs of running vacuums in shared memory. We are one
//! process, so each [`BtreeIndex`] holds the ID of the bulk delete running on it (0 when none),
//! and IDs come from one process-wide counter that skips 0 and wraps. A second bulk delete of
//! the same index while one runs is refused, as PostgreSQL refuses it ("multiple active vacuums
//! for index"); VACUUM's per-table lock normally rules it out anyway.
//!
//! # Why a split cannot miss the ID
//!
//! A split reads the index's current ID (SeqCst) only once it holds the exclusive locks of the
//! page it splits *and* of the new right page. The bulk delete stores its ID (SeqCst) before it
//! locks any page. So if a split read 0 while a scan was running, the split held its new right
//! page's lock before the scan locked that page, and the scan finds the moved entries there.
//!
//! # Stale IDs
//!
//! IDs stay on pages after their VACUUM ends (a bulk delete clears the ID of the pages it
//! changes, or as a hint of those it only read), and a crash leaves them too. A later bulk delete
//! can meet an old ID equal to its own only after the counter wrapped: it then follows right
//! links it did not need to and processes some pages twice, which costs time and may count
//! their entries twice in `num_index_tuples`, but removes nothing wrongly and misses nothing.

use std::sync::atomic::{AtomicU16, Ordering};

use super::BtreeIndex;
use crate::error::{Error, Result};

/// The next cycle ID to hand out (process-wide, as PostgreSQL's is cluster-wide).
static NEXT_CYCLE_ID: AtomicU16 = AtomicU16::new(1);

/// The running bulk delete's hold on its index's cycle ID; dropping it ends the cycle.
pub(crate) struct CycleGuard<'a> {
    ix: &'a BtreeIndex,
    id: u16,
}

impl CycleGuard<'_> {
    pub fn id(&self) -> u16 {
        self.id
    }
}

impl Drop for CycleGuard<'_> {
    fn drop(&mut self) {
        let _ = self.ix.vacuum_cycle.compare_exchange(self.id, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// Starts a vacuum cycle on `ix`: a fresh nonzero ID, published before the caller reads a page.
pub(crate) fn start(ix: &BtreeIndex) -> Result<CycleGuard<'_>> {
    let id = loop {
        let id = NEXT_CYCLE_ID.fetch_add(1, Ordering::Relaxed);
        if id != 0 {
            break id;
        }
    };
    match ix.vacuum_cycle.compare_exchange(0, id, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => Ok(CycleGuard { ix, id }),
        Err(_) => {
            Err(Error::invalid(format!("index \"{}\" is already being vacuumed (multiple active vacuums)", ix.name)))
        }
    }
}

/// The ID a split must stamp on its halves: the running bulk delete's, or 0. Read it while
/// holding the exclusive locks of the page being split and of its new right sibling.
pub(crate) fn current(ix: &BtreeIndex) -> u16 {
    ix.vacuum_cycle.load(Ordering::SeqCst)
}
