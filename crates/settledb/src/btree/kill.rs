//! LP_DEAD hints and simple deletion (PostgreSQL's `_bt_killitems` and `_bt_delitems_delete`).
//!
//! * **Killing.** A scan whose caller found an entry's whole heap chain dead to every snapshot
//!   hands the entry to [`kill_entries`], which finds it again by (key, heap TID) — a descent,
//!   then right links, since a split may have moved it right after the scan copied it — and
//!   sets LP_DEAD on its line pointer (storage kept) under the leaf's exclusive lock, one lock
//!   per leaf for all of that leaf's entries. Entries no longer there are skipped. Scans and
//!   unique checks then pass over the entry without visiting the heap.
//! * **Hints are not logged.** Like heap hint bits ([`crate::heap::hint`]), the page is marked
//!   dirty for a kill only when its LSN is after the checkpoint's redo pointer: a page that has
//!   no full-page image since then must not be written for a hint alone, because a torn write
//!   could not be repaired. Otherwise the hint lives in memory and reaches disk with the page's
//!   next logged change (whose full-page image, if any, carries it), or is lost, harmlessly.
//! * **Rechecking.** Between the scan's verdict and the kill, a VACUUM could remove the entry,
//!   free the heap slot, and a new row with the same key could take the slot and get an entry
//!   with the same (key, TID). PostgreSQL rules this out by keeping the leaf pinned (VACUUM
//!   waits for a cleanup lock) or by comparing the page LSN; we instead ask `recheck` about each
//!   entry while the leaf is exclusively locked, which no inserter of that entry can get past.
//! * **Simple deletion.** An insert that finds its leaf full first removes the leaf's LP_DEAD
//!   entries (`delete_dead_items`, one DELETE record with their offsets) and tries again on
//!   the same page; only if that made no room does it split. The heap TIDs removed are dead to
//!   everyone, so a later VACUUM's bulk delete simply does not find them.

use super::page::{self as bp};
use super::search::{cmp_off, leaf_lower_bound, must_move_right, Target, TidPos};
use super::wal::XLOG_BTREE_DELETE;
use super::{keys, BtreeIndex, WPage};
use crate::error::Result;
use crate::heap::HeapEnv;
use crate::index::IndexEntry;
use crate::page::{self as pg};
use crate::types::Tid;

/// Marks the leaf entries `dead` LP_DEAD (see the module doc); with `recheck`, only those for
/// which it still answers true under the leaf's lock. Returns how many were marked.
pub fn kill_entries(
    ix: &BtreeIndex,
    env: &HeapEnv<'_>,
    dead: &[IndexEntry],
    mut recheck: Option<&mut dyn FnMut(Tid) -> Result<bool>>,
) -> Result<usize> {
    let mut targets: Vec<(Vec<u8>, Tid)> =
        dead.iter().filter_map(|e| keys::encode(&ix.key_types, &e.key).ok().map(|k| (k, e.tid))).collect();
    targets.sort();
    targets.dedup();
    let mut killed = 0;
    let mut cur: Option<(WPage<'_>, bool)> = None;
    for (key, tid) in targets {
        let t = Target::new(key, TidPos::At(tid));
        // Sorted targets: the next one belongs on the locked leaf unless it is past its high key.
        if cur.as_ref().is_some_and(|(w, _)| must_move_right(&w.g.0, &t, false)) {
            release(env, cur.take());
        }
        if cur.is_none() {
            let Some(d) = ix.find_leaf(env, &t, false)? else { return Ok(killed) };
            cur = Some((ix.lock_leaf_write(env, d.leaf, &t)?, false));
        }
        let Some((w, changed)) = cur.as_mut() else { continue };
        let p = &w.g.0;
        let off = leaf_lower_bound(p, &t);
        if off.0 > bp::max_offset(p) || cmp_off(p, off, &t) != std::cmp::Ordering::Equal || bp::is_dead(p, off) {
            continue; // gone (vacuumed), or already killed
        }
        if let Some(r) = recheck.as_mut() {
            if !r(tid)? {
                continue;
            }
        }
        bp::mark_dead(&mut w.g.0, off);
        *changed = true;
        killed += 1;
    }
    release(env, cur);
    Ok(killed)
}

/// Unlocks a leaf after kills, marking it dirty when the hint rule allows.
fn release(env: &HeapEnv<'_>, cur: Option<(WPage<'_>, bool)>) {
    if let Some((w, true)) = cur {
        w.buf.hints_added(pg::lsn(&w.g.0), env.wal.redo_ptr());
    }
}

/// Simple deletion: removes every LP_DEAD entry of the exclusively locked leaf `w`, logged as
/// one DELETE record. Returns whether anything was removed.
pub(crate) fn delete_dead_items(ix: &BtreeIndex, env: &HeapEnv<'_>, w: &mut WPage<'_>) -> Result<bool> {
    let offsets = bp::dead_offsets(&w.g.0);
    if offsets.is_empty() {
        return Ok(false);
    }
    let what = "could not remove LP_DEAD index entries";
    super::vacuum::remove_items(ix, env, w, XLOG_BTREE_DELETE, &offsets, &mut Vec::new(), what)?;
    Ok(true)
}
