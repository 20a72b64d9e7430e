//! The database frozen XID, maintained incrementally (PostgreSQL recomputes it by scanning all
//! of `pg_class` after every VACUUM, in `vac_update_datfrozenxid`; with 200,000 tables that
//! scan costs milliseconds per VACUUM, and the launcher repeats it every naptime).
//!
//! Every table's relfrozenxid sits in an indexed min-heap ([`pqueue::IndexedHeap`]); the
//! database frozen XID is the heap's top, read in O(1). The heap changes exactly where
//! relfrozenxid does, under one lock with the catalog cache's copy:
//!
//! ```text
//!   CREATE TABLE  (publish)          push          O(log n)
//!   DROP TABLE    (unpublish)        remove        O(log n)
//!   VACUUM, in-place pg_class update update key    O(log n)
//!   ALTER TABLE SET autovacuum_freeze_max_age      update deadline key
//!   startup / after a crash          one push per pg_class row (rebuilt from the catalog)
//! ```
//!
//! A second min-heap orders the same tables by the XID at which they become due for an
//! anti-wraparound autovacuum (relfrozenxid + the table's `autovacuum_freeze_max_age`), so the
//! autovacuum launcher finds them without visiting every table.
//!
//! Keys are 64-bit [`FullXid`]s: a 32-bit relfrozenxid is widened against the next XID when it
//! enters the heap. Every relfrozenxid lies within 2^31 before the next XID (the wraparound
//! stop limit sees to it), so widening is exact, and unlike the modulo-2^31 comparison of
//! 32-bit XIDs the order of 64-bit keys is a total order that never changes as XIDs advance.
//!
//! The reference computation, a full scan of `pg_class` on disk, is
//! [`crate::db::Database::vacuum_database_stats`] (`VACUUM (ONLY_DATABASE_STATS)`); `check`
//! runs it and reports any difference from the heap.
//!
//! MultiXact IDs do not exist yet, so relminmxid (always 1) has no heap of its own; when they
//! do, relminmxid gets one the same way.

use pqueue::{Handle, IndexedHeap};
use rustc_hash::FxHashMap;

use crate::types::{FullXid, Oid, Xid};

/// The two heaps and where each table's entries are.
pub(crate) struct FrozenXidIndex {
    by_relfrozenxid: IndexedHeap<FullXid, Oid>,
    by_deadline: IndexedHeap<FullXid, Oid>,
    handles: FxHashMap<Oid, (Handle, Handle)>,
}

impl FrozenXidIndex {
    pub(crate) fn new() -> FrozenXidIndex {
        FrozenXidIndex {
            by_relfrozenxid: IndexedHeap::new_min(),
            by_deadline: IndexedHeap::new_min(),
            handles: FxHashMap::default(),
        }
    }

    /// Adds a table, or re-keys it when it is already there. A relfrozenxid that is not a
    /// normal XID (none is, for tables) is left out, as the full scan leaves it out.
    pub(crate) fn set(&mut self, oid: Oid, relfrozenxid: Xid, freeze_max_age: u32, next: FullXid) {
        if !relfrozenxid.is_normal() {
            self.remove(oid);
            return;
        }
        let key = next.widen(relfrozenxid);
        let deadline = FullXid(key.0 + u64::from(freeze_max_age));
        match self.handles.get(&oid) {
            Some(&(a, b)) => {
                self.by_relfrozenxid.update(a, key);
                self.by_deadline.update(b, deadline);
            }
            None => {
                let a = self.by_relfrozenxid.push(key, oid);
                let b = self.by_deadline.push(deadline, oid);
                self.handles.insert(oid, (a, b));
            }
        }
    }

    pub(crate) fn remove(&mut self, oid: Oid) {
        if let Some((a, b)) = self.handles.remove(&oid) {
            self.by_relfrozenxid.remove(a);
            self.by_deadline.remove(b);
        }
    }

    /// The oldest relfrozenxid (the database frozen XID); O(1).
    pub(crate) fn oldest(&self) -> Option<Xid> {
        self.by_relfrozenxid.peek().map(|(_, k, _)| k.xid())
    }

    /// Tables whose anti-wraparound deadline is at or before `next`: O(k) for k such tables.
    pub(crate) fn due_for_wraparound(&self, next: FullXid) -> Vec<Oid> {
        let mut out = Vec::new();
        self.by_deadline.for_each_top(|k| *k <= next, |_, _, oid| out.push(*oid));
        out
    }

    pub(crate) fn len(&self) -> usize {
        self.handles.len()
    }

    /// Bytes of the two heaps and the handle map.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.by_relfrozenxid.allocated_bytes()
            + self.by_deadline.allocated_bytes()
            + self.handles.capacity() * (std::mem::size_of::<(Oid, (Handle, Handle))>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_follows_sets_and_removes_across_wraparound() {
        let mut ix = FrozenXidIndex::new();
        // Next XID just past a wraparound of the 32-bit counter: 4_000_000_000 is older than 100.
        let next = FullXid((1u64 << 32) + 1_000);
        ix.set(Oid(1), Xid(100), 1_000, next);
        ix.set(Oid(2), Xid(4_000_000_000), 1_000, next);
        assert_eq!(ix.oldest(), Some(Xid(4_000_000_000)));
        ix.set(Oid(2), Xid(500), 1_000, next);
        assert_eq!(ix.oldest(), Some(Xid(100)));
        ix.remove(Oid(1));
        assert_eq!(ix.oldest(), Some(Xid(500)));
        ix.set(Oid(3), Xid::INVALID, 1_000, next);
        assert_eq!(ix.len(), 1, "a table without a normal relfrozenxid is not tracked");
        ix.remove(Oid(2));
        assert_eq!(ix.oldest(), None);
    }

    #[test]
    fn due_for_wraparound_uses_each_tables_own_age() {
        let mut ix = FrozenXidIndex::new();
        let next = FullXid(10_000);
        ix.set(Oid(1), Xid(1_000), 5_000, next); // due at 6_000
        ix.set(Oid(2), Xid(1_000), 50_000, next); // due at 51_000
        ix.set(Oid(3), Xid(9_000), 500, next); // due at 9_500
        let mut due = ix.due_for_wraparound(next);
        due.sort();
        assert_eq!(due, vec![Oid(1), Oid(3)]);
    }
}
