//! MVCC snapshots: which transactions a reader must treat as still running.
//!
//! A snapshot is taken from the proc array ([`super::TransactionManager::get_snapshot`]):
//!
//! ```text
//!   xmin ─────────── xip (running when taken) ─────────── xmax = next XID
//!    │  < xmin: finished before   │ in xip: running │ not in xip: finished │ >= xmax: not yet
//!    │  the snapshot (not         │ (invisible)     │ before the snapshot  │ started (invisible)
//! ```
//!
//! [`Snapshot::is_in_progress`] is PostgreSQL's `XidInMVCCSnapshot`
//! (`heapam_visibility.c`): an XID at or after `xmax` is treated as in progress, one before
//! `xmin` is not, and in between the answer is membership in `xip`. "Not in progress" does
//! not mean committed: the caller then asks the CLOG. The snapshot owner's own XID is never
//! in progress to itself; the heap tells its own changes apart by command ID.

use crate::types::Xid;

/// A point-in-time view of the running transactions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Every XID before this had finished when the snapshot was taken.
    pub xmin: Xid,
    /// The next XID to be assigned when the snapshot was taken: it and later XIDs are invisible.
    pub xmax: Xid,
    /// Top-level XIDs running when the snapshot was taken (excluding `my_xid`), sorted by
    /// numeric value for binary search.
    pub xip: Vec<Xid>,
    /// The XID of the transaction that owns the snapshot, if it has one.
    pub my_xid: Option<Xid>,
}

impl Snapshot {
    /// Whether `xid` must be treated as still running by this snapshot (`XidInMVCCSnapshot`).
    /// Hot path: no allocation; a binary search over `xip` at worst.
    pub fn is_in_progress(&self, xid: Xid) -> bool {
        if !xid.is_normal() || Some(xid) == self.my_xid {
            return false;
        }
        if xid.precedes(self.xmin) {
            return false;
        }
        if xid.follows_or_equals(self.xmax) {
            return true;
        }
        self.xip.binary_search_by_key(&xid.0, |x| x.0).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_in_mvcc_snapshot_rules() {
        let s = Snapshot { xmin: Xid(10), xmax: Xid(20), xip: vec![Xid(10), Xid(15)], my_xid: Some(Xid(12)) };
        assert!(!s.is_in_progress(Xid(9)), "before xmin: finished");
        assert!(s.is_in_progress(Xid(10)));
        assert!(!s.is_in_progress(Xid(11)), "between, not in xip: finished");
        assert!(!s.is_in_progress(Xid(12)), "own XID is never in progress");
        assert!(s.is_in_progress(Xid(15)));
        assert!(s.is_in_progress(Xid(20)), "xmax itself: not yet started");
        assert!(s.is_in_progress(Xid(1000)));
        assert!(!s.is_in_progress(Xid::FROZEN));
    }

    #[test]
    fn comparisons_wrap_around() {
        let xmin = Xid(u32::MAX - 5);
        let s = Snapshot { xmin, xmax: Xid(10), xip: vec![Xid(4), Xid(u32::MAX - 5)], my_xid: None };
        assert!(s.is_in_progress(Xid(u32::MAX - 5)));
        assert!(!s.is_in_progress(Xid(u32::MAX - 1)));
        assert!(s.is_in_progress(Xid(4)));
        assert!(!s.is_in_progress(Xid(5)));
        assert!(!s.is_in_progress(Xid(u32::MAX - 6)));
        assert!(s.is_in_progress(Xid(10)));
    }
}
