//! Tuple visibility (PostgreSQL's `heapam_visibility.c`, rewritten).
//!
//! Three questions are asked of a tuple version, each from its header's `xmin`/`xmax` and
//! hint bits, the transaction status in CLOG, and the set of transactions still running:
//!
//! * [`satisfies_mvcc`]: does this snapshot see it? (reads)
//! * [`satisfies_update`]: may this transaction update/delete it now, must it wait, or did
//!   someone else get there first? (writes)
//! * [`satisfies_vacuum`]: is it dead to every snapshot, given the `OldestXmin` horizon?
//!   (pruning, VACUUM, `check`)
//!
//! ```text
//!   xmin state            xmax state                      mvcc    vacuum
//!   aborted               -                               no      DEAD
//!   running (not mine)    -                               no      INSERT_IN_PROGRESS
//!   committed, in snap.   -                               no      (as committed)
//!   committed             invalid / aborted / lock-only   yes     LIVE
//!   committed             running or in snapshot          yes     DELETE_IN_PROGRESS
//!   committed             committed, older than horizon   no      DEAD
//!   committed             committed, newer than horizon   no      RECENTLY_DEAD
//! ```
//!
//! A lock-only xmax (`HEAP_XMAX_LOCK_ONLY`, `SELECT ... FOR UPDATE`, see [`super::lock`])
//! never deletes: readers and VACUUM treat the tuple as if xmax were invalid. Only
//! [`satisfies_update`] looks at it: a running locker other than the writer itself makes the
//! writer wait; an ended one (committed or aborted) is ignored.
//!
//! "Own" means written by the snapshot owner's top-level XID or by one of its current
//! subtransactions ([`Snapshot::is_current`], `TransactionIdIsCurrentTransactionId`); a
//! subtransaction rolled back to its savepoint is aborted in the CLOG at once and is then
//! judged like any aborted transaction, by its owner too. Own changes are judged by command ID: a tuple this transaction inserted is visible to a
//! command that started after the insert (`cmin < curcid`), and one it deleted stays visible to
//! commands that started before the delete. There are no combo command IDs: when a transaction
//! deletes a tuple it inserted itself, `t_cid` keeps only the deleting command, so a scan that
//! began between the two commands would see the row. The embedded API never runs such a scan
//! concurrently with its own writes, but the limitation is stated here.
//!
//! Hint bits are only *read* here; they are set by callers holding the page's exclusive lock
//! (see `heap::hint`).

use super::tuple::{
    TupleHeader, HEAP_XMAX_COMMITTED, HEAP_XMAX_INVALID, HEAP_XMAX_LOCK_ONLY, HEAP_XMIN_COMMITTED, HEAP_XMIN_FROZEN,
    HEAP_XMIN_INVALID,
};
use crate::error::Result;
use crate::types::{Tid, Xid};
use crate::xact::{Snapshot, TransactionManager, XidStatus};

/// What [`satisfies_vacuum`] says of a tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VacuumStatus {
    Dead,
    RecentlyDead,
    Live,
    InsertInProgress,
    DeleteInProgress,
}

/// What [`satisfies_update`] says of a tuple a writer wants to change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateStatus {
    /// The writer may change it.
    Ok,
    /// The writer cannot see it at all.
    Invisible,
    /// This transaction already updated or deleted it.
    SelfUpdated,
    /// Another transaction that is still running updated, deleted or locked it: wait for this
    /// XID.
    BeingUpdated(Xid),
    /// A committed transaction updated it; the newer version is at `ctid` (equal to the
    /// tuple's own TID when it was deleted).
    Updated { ctid: Tid, xmax: Xid },
}

/// Status of a transaction as the heap needs it: frozen and bootstrap XIDs are committed.
pub fn xid_status(xact: &TransactionManager, xid: Xid) -> Result<XidStatus> {
    xact.status(xid)
}

fn xmin_committed(h: &TupleHeader<'_>, xact: &TransactionManager) -> Result<Option<bool>> {
    let m = h.infomask();
    if m & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN || m & HEAP_XMIN_COMMITTED != 0 {
        return Ok(Some(true));
    }
    if m & HEAP_XMIN_INVALID != 0 {
        return Ok(Some(false));
    }
    Ok(match xid_status(xact, h.xmin())? {
        XidStatus::Committed => Some(true),
        XidStatus::Aborted => Some(false),
        _ => None,
    })
}

fn xmax_is_irrelevant(h: &TupleHeader<'_>) -> bool {
    let m = h.infomask();
    m & HEAP_XMAX_INVALID != 0 || !h.xmax().is_valid() || m & HEAP_XMAX_LOCK_ONLY != 0
}

/// Is the tuple visible to `snap`, as seen by command `curcid` of the snapshot's transaction?
pub fn satisfies_mvcc(h: &TupleHeader<'_>, snap: &Snapshot, curcid: u32, xact: &TransactionManager) -> Result<bool> {
    let xmin = h.xmin();
    let m = h.infomask();
    // Only a frozen xmin is visible to every snapshot; a committed hint says the inserter
    // committed, not that it did so before this snapshot was taken.
    if m & HEAP_XMIN_FROZEN != HEAP_XMIN_FROZEN {
        if m & HEAP_XMIN_INVALID != 0 {
            return Ok(false);
        }
        if snap.is_current(xmin) {
            // Our own insert (by the top-level transaction or a current subtransaction).
            // t_cid is cmin, or cmax when we deleted it too (no combo CIDs).
            if !xmax_is_irrelevant(h) && snap.is_current(h.xmax()) {
                return Ok(h.cid() >= curcid);
            }
            // Not deleted, or deleted by a subtransaction since rolled back; in the latter
            // case t_cid is that delete's cmax, which is after cmin.
            return Ok(h.cid() < curcid);
        }
        if snap.is_in_progress(xmin) {
            return Ok(false);
        }
        if m & HEAP_XMIN_COMMITTED == 0 && xid_status(xact, xmin)? != XidStatus::Committed {
            return Ok(false);
        }
    }
    // xmin is committed and visible to the snapshot.
    if xmax_is_irrelevant(h) {
        return Ok(true);
    }
    let xmax = h.xmax();
    if snap.is_current(xmax) {
        return Ok(h.cid() >= curcid);
    }
    if m & HEAP_XMAX_COMMITTED == 0 {
        if snap.is_in_progress(xmax) {
            return Ok(true);
        }
        if xid_status(xact, xmax)? != XidStatus::Committed {
            return Ok(true);
        }
    } else if snap.is_in_progress(xmax) {
        return Ok(true);
    }
    Ok(false)
}

/// May the transaction owning `snap` (its top-level XID and current subtransactions,
/// [`Snapshot::is_current`]) update or delete the tuple now?
pub fn satisfies_update(
    h: &TupleHeader<'_>,
    self_tid: Tid,
    snap: &Snapshot,
    xact: &TransactionManager,
) -> Result<UpdateStatus> {
    let xmin = h.xmin();
    if !snap.is_current(xmin) {
        match xmin_committed(h, xact)? {
            Some(true) => {}
            // Aborted, or inserted by a transaction still running: not ours to change.
            Some(false) | None => return Ok(UpdateStatus::Invisible),
        }
    }
    let m = h.infomask();
    if m & HEAP_XMAX_INVALID != 0 || !h.xmax().is_valid() {
        return Ok(UpdateStatus::Ok);
    }
    let xmax = h.xmax();
    if m & HEAP_XMAX_LOCK_ONLY != 0 {
        // A row lock ([`super::lock`]): our own, or one whose locker has ended (committed or
        // aborted alike), is no obstacle; a running locker's makes the writer wait for it, as a
        // running updater's does (PostgreSQL's `TM_BeingModified`).
        if snap.is_current(xmax) || !xact.is_running(xmax) {
            return Ok(UpdateStatus::Ok);
        }
        return Ok(UpdateStatus::BeingUpdated(xmax));
    }
    if snap.is_current(xmax) {
        return Ok(UpdateStatus::SelfUpdated);
    }
    let committed = if h.infomask() & HEAP_XMAX_COMMITTED != 0 {
        true
    } else if xact.is_running(xmax) {
        return Ok(UpdateStatus::BeingUpdated(xmax));
    } else {
        xid_status(xact, xmax)? == XidStatus::Committed
    };
    Ok(if committed {
        UpdateStatus::Updated { ctid: if h.ctid() == self_tid { self_tid } else { h.ctid() }, xmax }
    } else {
        UpdateStatus::Ok // the deleter aborted
    })
}

/// Is the tuple dead to every transaction, given that no snapshot older than `oldest_xmin`
/// exists?
pub fn satisfies_vacuum(h: &TupleHeader<'_>, oldest_xmin: Xid, xact: &TransactionManager) -> Result<VacuumStatus> {
    match xmin_committed(h, xact)? {
        Some(true) => {}
        Some(false) => return Ok(VacuumStatus::Dead),
        None => {
            if xact.is_running(h.xmin()) {
                return Ok(VacuumStatus::InsertInProgress);
            }
            // The inserter may have committed between the status question above and this
            // one (CLOG is set before the XID leaves the running set): ask CLOG again, as
            // PostgreSQL asks TransactionIdIsInProgress before TransactionIdDidCommit. Found by
            // tests/model.rs (live rows pruned to LP_DEAD under concurrent commits).
            if xid_status(xact, h.xmin())? != XidStatus::Committed {
                return Ok(VacuumStatus::Dead); // aborted or crashed inserter
            }
        }
    }
    if xmax_is_irrelevant(h) {
        return Ok(VacuumStatus::Live);
    }
    let xmax = h.xmax();
    if h.infomask() & HEAP_XMAX_COMMITTED == 0 {
        if xact.is_running(xmax) {
            return Ok(VacuumStatus::DeleteInProgress);
        }
        if xid_status(xact, xmax)? != XidStatus::Committed {
            return Ok(VacuumStatus::Live);
        }
    }
    Ok(if xmax.precedes(oldest_xmin) { VacuumStatus::Dead } else { VacuumStatus::RecentlyDead })
}
