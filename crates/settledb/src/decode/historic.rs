//! Historic catalog snapshots (PostgreSQL's `snapbuild.c`, for the one kind of catalog row that
//! changes under a fixed identity here: publications).
//!
//! Relations do change their columns under an OID (ALTER TABLE ADD COLUMN, RENAME), but only
//! by rewriting their `pg_class` row, which is in the WAL: the decoder follows those rows in
//! WAL order and needs no historic snapshot to decode rows (see [`super::logical`]).
//! Publications do change under their
//! name (ALTER PUBLICATION … ADD TABLE, SET (publish = …), DROP and CREATE again), and
//! `pgoutput` must filter a change with the publications as they stood *at that change's LSN*,
//! as PostgreSQL's pgoutput reads `pg_publication` through the historic snapshot of the
//! change. [`CatalogHistory`] is what the decoder knows to build such a snapshot:
//!
//! ```text
//!   restart point (RUNNING_XACTS)          catalog commit C1       change L       C2
//!   ──────┬────────────────────────────────────┬────────────────────────┬──────────┬────▶ WAL
//!         next_xid N, running {r1, r2}          xids {x}                 │          xids {y}
//!   a change at L sees: every XID before N that is not running and committed (CLOG),
//!                       plus the XIDs of C1 (committed before L), not those of C2.
//! ```
//!
//! As an MVCC [`Snapshot`]: `xmax` is one past the newest XID seen committed before `L`
//! (at least `N`), and `xip` lists every XID in `[N, xmax)` not committed before `L` together
//! with the running XIDs of the start point not committed before `L`; everything else is
//! decided by CLOG like any snapshot. That is exact for the XIDs that matter: the writers of
//! catalog rows other than `pg_class` (the decoder notes each from the WAL and reports its
//! commit), and the transactions running at the start point (whose catalog writes may lie
//! before it; their commits are reported too). XIDs in `[N, xmax)` that wrote no such row are
//! put in `xip` whether or not they committed: no row's visibility depends on them.
//!
//! The dead row versions such a snapshot may still see are kept by the slot's `catalog_xmin`,
//! which is never newer than its restart point's oldest running XID.
//!
//! Cost: the snapshot's `xip` grows with the XIDs consumed between the restart point and the
//! newest catalog commit before the change; it is built only when that commit changes
//! ([`CatalogHistory::epoch`]).

use crate::types::{Lsn, Xid};
use crate::xact::standby::RunningXacts;
use crate::xact::Snapshot;

/// The start point and the catalog commits a decoding session has read.
#[derive(Clone, Debug, Default)]
pub struct CatalogHistory {
    start: Option<StartPoint>,
    /// Commits of catalog-writing transactions, and of those running at the start point, in
    /// WAL order: the commit record's LSN and the XIDs that committed (top and subtransactions).
    commits: Vec<(Lsn, Vec<Xid>)>,
}

#[derive(Clone, Debug)]
struct StartPoint {
    next_xid: Xid,
    oldest_running: Xid,
    /// Running top-level transactions and their subtransactions.
    running: Vec<Xid>,
}

impl CatalogHistory {
    /// Whether the start point was read (before it, no snapshot can be built).
    pub fn started(&self) -> bool {
        self.start.is_some()
    }

    /// The start point: the first RUNNING_XACTS record the session reads.
    pub fn start(&mut self, rx: &RunningXacts) {
        let mut running: Vec<Xid> = rx.xids.iter().chain(&rx.subxids).copied().collect();
        running.sort_by_key(|x| x.0);
        self.start = Some(StartPoint { next_xid: rx.next_xid, oldest_running: rx.oldest_running, running });
    }

    /// A catalog-writing (or start-point-running) transaction committed at `lsn` (its commit
    /// record's start) with these XIDs.
    pub fn commit(&mut self, lsn: Lsn, xids: Vec<Xid>) {
        debug_assert!(self.commits.last().is_none_or(|(l, _)| *l <= lsn), "commits come in WAL order");
        self.commits.push((lsn, xids));
    }

    /// How many reported commits precede `lsn`: two changes with the same epoch see the same
    /// catalog.
    pub fn epoch(&self, lsn: Lsn) -> usize {
        self.commits.partition_point(|(l, _)| *l < lsn)
    }

    /// The snapshot a change at `lsn` reads catalog rows with, or `None` before the start point.
    pub fn snapshot_at(&self, lsn: Lsn) -> Option<Snapshot> {
        let start = self.start.as_ref()?;
        let mut visible: Vec<Xid> =
            self.commits[..self.epoch(lsn)].iter().flat_map(|(_, x)| x.iter().copied()).collect();
        visible.sort_by_key(|x| x.0);
        let is_visible = |x: Xid| visible.binary_search_by_key(&x.0, |v| v.0).is_ok();
        let mut xmax = start.next_xid;
        for &x in &visible {
            if x.follows_or_equals(xmax) {
                xmax = x.next_normal();
            }
        }
        let mut xip: Vec<Xid> = start.running.iter().copied().filter(|&x| !is_visible(x)).collect();
        let mut x = start.next_xid;
        while x.precedes(xmax) {
            if !is_visible(x) {
                xip.push(x);
            }
            x = x.next_normal();
        }
        xip.sort_by_key(|x| x.0);
        xip.dedup();
        let xmin = xip.iter().copied().fold(start.oldest_running, |m, x| if x.precedes(m) { x } else { m });
        Some(Snapshot::simple(xmin, xmax, xip, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(next: u32, running: &[u32]) -> RunningXacts {
        RunningXacts {
            next_xid: Xid(next),
            oldest_running: Xid(running.iter().copied().min().unwrap_or(next)),
            xids: running.iter().map(|&x| Xid(x)).collect(),
            subxids: vec![],
            overflowed: false,
        }
    }

    #[test]
    fn a_change_sees_the_commits_before_it_and_not_after() {
        let mut h = CatalogHistory::default();
        assert!(h.snapshot_at(Lsn(10)).is_none());
        h.start(&rx(100, &[95]));
        h.commit(Lsn(200), vec![Xid(103)]);
        h.commit(Lsn(300), vec![Xid(95)]);
        h.commit(Lsn(400), vec![Xid(101), Xid(102)]);
        // Before any commit: N = 100 and later are invisible, 95 runs.
        let s = h.snapshot_at(Lsn(150)).unwrap();
        assert!(s.is_in_progress(Xid(95)) && s.is_in_progress(Xid(100)) && s.is_in_progress(Xid(103)));
        assert!(!s.is_in_progress(Xid(90)), "finished before the start point: CLOG decides");
        // After C1: 103 committed, 100..=102 not (xip), 95 still running.
        let s = h.snapshot_at(Lsn(250)).unwrap();
        assert!(!s.is_in_progress(Xid(103)));
        assert!(s.is_in_progress(Xid(100)) && s.is_in_progress(Xid(102)) && s.is_in_progress(Xid(95)));
        assert!(s.is_in_progress(Xid(104)));
        // After C2 and C3.
        let s = h.snapshot_at(Lsn(401)).unwrap();
        assert!(!s.is_in_progress(Xid(95)) && !s.is_in_progress(Xid(101)) && !s.is_in_progress(Xid(102)));
        assert!(s.is_in_progress(Xid(100)));
        assert_eq!((h.epoch(Lsn(200)), h.epoch(Lsn(201)), h.epoch(Lsn(401))), (0, 1, 3));
    }
}
