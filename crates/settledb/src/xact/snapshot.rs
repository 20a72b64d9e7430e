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
//! `xmin` is not, and in between the answer is membership in `xip`, in `subxip` (the
//! subtransaction XIDs of those transactions) or among the prepared transactions' XIDs.
//! "Not in progress" does not mean committed: the caller then asks the CLOG. The snapshot
//! owner's current XIDs ([`Snapshot::is_current`]: its top-level XID and its subtransactions
//! not rolled back) are never in progress to it; the heap tells its own changes apart by
//! command ID.
//!
//! # The overflow rule (`PGPROC_MAX_CACHED_SUBXIDS`)
//!
//! Each running transaction lists at most [`MAX_CACHED_SUBXIDS`] subtransaction XIDs for
//! snapshots. When any transaction has more, `subxip` would be incomplete, so the snapshot is
//! marked `suboverflowed` and carries the parent map instead: an XID in `[xmin, xmax)` is
//! mapped to its top-level XID ([`SubTrans::topmost`]) and that is searched in `xip`. The map
//! holds every XID a live snapshot can ask about (it is truncated only below the horizon,
//! which counts every advertised snapshot xmin).
//!
//! # Prepared transactions
//!
//! Their XIDs (and their subtransactions') are not copied into each snapshot: a snapshot
//! shares the proc array's [`PreparedXids`], an immutable sorted base plus short lists of
//! changes, so taking a snapshot costs the same with 200,000 prepared transactions as with
//! none.

use std::sync::Arc;

use super::subtrans::SubTrans;
use crate::types::Xid;

/// Most subtransaction XIDs one transaction lists in the proc array for snapshots
/// (`PGPROC_MAX_CACHED_SUBXIDS`); past it, its snapshots are marked overflowed.
pub const MAX_CACHED_SUBXIDS: usize = 64;

/// A point-in-time view of the running transactions.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Every XID before this had finished when the snapshot was taken.
    pub xmin: Xid,
    /// The next XID to be assigned when the snapshot was taken: it and later XIDs are invisible.
    pub xmax: Xid,
    /// Top-level XIDs running (not prepared) when the snapshot was taken (excluding `my_xid`),
    /// sorted by numeric value for binary search.
    pub xip: Vec<Xid>,
    /// Subtransaction XIDs of those transactions, at most [`MAX_CACHED_SUBXIDS`] each, sorted.
    /// Complete only when `suboverflowed` is `None`.
    pub subxip: Vec<Xid>,
    /// Set when some running transaction had more subtransaction XIDs than it could list:
    /// an XID in `[xmin, xmax)` is then mapped to its top-level XID through the parent map
    /// held here before `xip` is searched (`XidInMVCCSnapshot`'s suboverflowed branch).
    pub suboverflowed: Option<SubTransRef>,
    /// Prepared transactions (and their subtransactions) at the time of the snapshot, shared.
    pub prepared: PreparedXids,
    /// The top-level XID of the transaction that owns the snapshot, if it has one.
    pub my_xid: Option<Xid>,
    /// The owner's current subtransaction XIDs (not rolled back), sorted; shared with the
    /// owner's transaction.
    pub my_subxids: Arc<Vec<Xid>>,
}

/// A shared handle on the parent map, compared by identity (for `Snapshot: Eq`).
#[derive(Clone)]
pub struct SubTransRef(pub Arc<SubTrans>);

impl std::fmt::Debug for SubTransRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubTrans")
    }
}

impl PartialEq for SubTransRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SubTransRef {}

impl Snapshot {
    /// A snapshot with no subtransactions and no prepared transactions.
    pub fn simple(xmin: Xid, xmax: Xid, xip: Vec<Xid>, my_xid: Option<Xid>) -> Snapshot {
        Snapshot { xmin, xmax, xip, my_xid, ..Snapshot::default() }
    }

    /// Whether `xid` is the owner's top-level XID or one of its current subtransactions'
    /// (`TransactionIdIsCurrentTransactionId`). Hot path: no allocation.
    pub fn is_current(&self, xid: Xid) -> bool {
        Some(xid) == self.my_xid || (!self.my_subxids.is_empty() && find(&self.my_subxids, xid).is_ok())
    }

    /// Whether `xid` must be treated as still running by this snapshot (`XidInMVCCSnapshot`).
    /// Hot path: no allocation; binary searches, and a parent-map walk when overflowed.
    pub fn is_in_progress(&self, xid: Xid) -> bool {
        if !xid.is_normal() || self.is_current(xid) {
            return false;
        }
        if xid.precedes(self.xmin) {
            return false;
        }
        if xid.follows_or_equals(self.xmax) {
            return true;
        }
        if self.prepared.contains(xid) {
            return true;
        }
        let top = match &self.suboverflowed {
            None => {
                if find(&self.subxip, xid).is_ok() {
                    return true;
                }
                xid
            }
            Some(st) => {
                let top = st.0.topmost(xid);
                if top.precedes(self.xmin) {
                    return false;
                }
                if top != xid && self.prepared.contains(top) {
                    return true;
                }
                top
            }
        };
        find(&self.xip, top).is_ok()
    }
}

/// Binary search of a list sorted by numeric XID value.
fn find(sorted: &[Xid], xid: Xid) -> Result<usize, usize> {
    sorted.binary_search_by_key(&xid.0, |x| x.0)
}

/// The XIDs of prepared transactions and of their subtransactions, as a snapshot sees them:
/// a sorted shared base plus small sorted lists of additions and removals since it was built.
/// Copying it into a snapshot costs O(changes since the last rebuild), not O(prepared), and
/// the owner rebuilds the base once the changes outnumber its square root (see
/// [`PreparedXids::add`]), so neither snapshots nor PREPARE / COMMIT PREPARED grow linearly
/// with `max_prepared_transactions`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PreparedXids {
    base: Arc<Vec<Xid>>,
    added: Vec<Xid>,
    removed: Vec<Xid>,
}

impl PreparedXids {
    /// Membership. Hot path: at most three binary searches.
    pub fn contains(&self, xid: Xid) -> bool {
        if self.base.is_empty() && self.added.is_empty() {
            return false;
        }
        if find(&self.added, xid).is_ok() {
            return true;
        }
        find(&self.base, xid).is_ok() && find(&self.removed, xid).is_err()
    }

    /// How many XIDs it holds.
    pub fn len(&self) -> usize {
        self.base.len() + self.added.len() - self.removed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The XIDs held, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = Xid> + '_ {
        self.base.iter().copied().filter(|x| find(&self.removed, *x).is_err()).chain(self.added.iter().copied())
    }

    /// Adds XIDs (not present yet).
    pub fn add(&mut self, xids: &[Xid]) {
        for &x in xids {
            if let Err(i) = find(&self.added, x) {
                self.added.insert(i, x);
            }
        }
        self.maybe_rebuild();
    }

    /// Removes XIDs (present).
    pub fn remove(&mut self, xids: &[Xid]) {
        for &x in xids {
            if let Ok(i) = find(&self.added, x) {
                self.added.remove(i);
            } else if find(&self.base, x).is_ok() {
                if let Err(i) = find(&self.removed, x) {
                    self.removed.insert(i, x);
                }
            }
        }
        self.maybe_rebuild();
    }

    fn maybe_rebuild(&mut self) {
        let changes = self.added.len() + self.removed.len();
        let limit = 64usize.max(self.base.len().isqrt());
        if changes <= limit {
            return;
        }
        let mut all: Vec<Xid> = Vec::with_capacity(self.len());
        all.extend(self.base.iter().copied().filter(|x| find(&self.removed, *x).is_err()));
        all.extend_from_slice(&self.added);
        all.sort_unstable_by_key(|x| x.0);
        self.base = Arc::new(all);
        self.added.clear();
        self.removed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_in_mvcc_snapshot_rules() {
        let s = Snapshot::simple(Xid(10), Xid(20), vec![Xid(10), Xid(15)], Some(Xid(12)));
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
        let s = Snapshot::simple(xmin, Xid(10), vec![Xid(4), Xid(u32::MAX - 5)], None);
        assert!(s.is_in_progress(Xid(u32::MAX - 5)));
        assert!(!s.is_in_progress(Xid(u32::MAX - 1)));
        assert!(s.is_in_progress(Xid(4)));
        assert!(!s.is_in_progress(Xid(5)));
        assert!(!s.is_in_progress(Xid(u32::MAX - 6)));
        assert!(s.is_in_progress(Xid(10)));
    }
}

#[cfg(test)]
mod prepared_xids_tests {
    use super::*;

    #[test]
    fn membership_survives_rebuilds() {
        let mut p = PreparedXids::default();
        let mut model = std::collections::BTreeSet::new();
        let mut x = 1000u32;
        for round in 0..3000u32 {
            if round % 3 == 2 {
                if let Some(&v) = model.iter().nth((round as usize * 7) % model.len().max(1)) {
                    model.remove(&v);
                    p.remove(&[Xid(v)]);
                }
            } else {
                model.insert(x);
                p.add(&[Xid(x)]);
                x += 1;
            }
        }
        assert_eq!(p.len(), model.len());
        for v in 1000..x {
            assert_eq!(p.contains(Xid(v)), model.contains(&v), "xid {v}");
        }
        assert!(p.added.len() + p.removed.len() <= 64.max(p.base.len().isqrt()), "changes stay bounded");
    }
}
