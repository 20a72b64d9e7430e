//! Following HOT chains from an index entry (PostgreSQL's `heap_hot_search_buffer`).
//!
//! An index entry points at the *root* line pointer of a HOT chain: the version that was
//! indexed, or, after pruning, a REDIRECT to the chain's first surviving member. The versions
//! of one row reachable from the root are linked by `t_ctid` on the same page, each successor
//! being a heap-only tuple whose `xmin` is its predecessor's `xmax`:
//!
//! ```text
//!   index entry -> lp 1 REDIRECT -> lp 4 (HOT_UPDATED, xmax 12) -> lp 6 (HEAP_ONLY, xmin 12)
//! ```
//!
//! [`hot_search`] returns the one member a snapshot sees; [`unique_state`] tells a unique index
//! whether the chain still holds a version that conflicts with a new key; [`chain_dead_to_all`]
//! tells an index scan whether the entry can be killed (marked LP_DEAD, [`crate::btree::kill`]).

use super::tuple::{TupleHeader, Value, HEAP_HOT_UPDATED, HEAP_ONLY_TUPLE, HEAP_XMAX_INVALID, HEAP_XMAX_LOCK_ONLY};
use super::visibility::{satisfies_mvcc, satisfies_vacuum, xid_status, VacuumStatus};
use super::{corrupt_tuple, read_page_if_exists, HeapEnv, Relation};
use crate::error::Result;
use crate::page::{self, LpFlags};
use crate::types::{OffsetNumber, Tid, Xid};
use crate::xact::{Snapshot, XidStatus};

/// The members of the HOT chain rooted at `root`, in order (empty if the root is unused,
/// dead, or out of range).
pub fn chain(page_bytes: &[u8], root: OffsetNumber) -> Vec<OffsetNumber> {
    let max = page::max_offset(page_bytes);
    let mut out = Vec::new();
    if root.0 == 0 || root.0 > max {
        return out;
    }
    let mut cur = root;
    let lp = page::item_id(page_bytes, root);
    if lp.flags == LpFlags::Redirect {
        cur = OffsetNumber(lp.off);
    }
    let mut prior_xmax: Option<Xid> = None;
    while cur.0 >= 1 && cur.0 <= max && out.len() <= usize::from(max) {
        if page::item_id(page_bytes, cur).flags != LpFlags::Normal {
            break;
        }
        let Some(h) = TupleHeader::parse(page::item(page_bytes, cur)) else { break };
        let heap_only = h.infomask2() & HEAP_ONLY_TUPLE != 0;
        // The root itself is not heap-only; every later member must be, and must continue
        // the chain (a reused slot would have another xmin).
        if (cur != root && !heap_only) || (cur == root && heap_only) || prior_xmax.is_some_and(|x| x != h.xmin()) {
            break;
        }
        out.push(cur);
        if h.infomask2() & HEAP_HOT_UPDATED == 0 {
            break;
        }
        prior_xmax = Some(h.xmax());
        cur = h.ctid().offset;
    }
    out
}

/// The version of the row rooted at `root` that `snap` sees, with its values. Like an index
/// fetch in PostgreSQL, it first prunes the page when that is worthwhile given `horizon` (the
/// oldest XID any snapshot may need) and the cleanup lock is free, so HOT chains of hot rows
/// stay short without VACUUM.
pub fn hot_search(
    env: &HeapEnv<'_>,
    rel: &Relation,
    snap: &Snapshot,
    curcid: u32,
    root: Tid,
    horizon: Xid,
) -> Result<Option<(Tid, Vec<Value>)>> {
    let Some(buf) = read_page_if_exists(env, rel, root.block)? else { return Ok(None) };
    super::maybe_prune(env, rel, &buf, horizon)?;
    let g = buf.read();
    if page::is_new(&g.0) {
        return Ok(None);
    }
    for off in chain(&g.0, root.offset) {
        let tid = Tid { block: root.block, offset: off };
        let t = page::item(&g.0, off);
        let h = TupleHeader::parse(t).ok_or_else(|| corrupt_tuple(rel, tid, "invalid tuple header"))?;
        if satisfies_mvcc(&h, snap, curcid, env.xact)? {
            let vals = rel.deform(t).map_err(|e| corrupt_tuple(rel, tid, &e))?;
            return Ok(Some((tid, vals)));
        }
    }
    Ok(None)
}

/// Whether no snapshot can see any version of the row rooted at `root` (PostgreSQL's
/// `all_dead` from `heap_hot_search_buffer`): the root line pointer is LP_DEAD or LP_UNUSED
/// (or past the end of the line pointer array), or every chain member is
/// [`VacuumStatus::Dead`] with respect to `horizon`. A chain with any member that is not dead
/// to everyone — recently dead, in progress, or live, whatever its key — is not dead. Unsure
/// cases (a block past the end, a new page, a chain that cannot be followed) answer false.
pub fn chain_dead_to_all(env: &HeapEnv<'_>, rel: &Relation, root: Tid, horizon: Xid) -> Result<bool> {
    if root.offset.0 == 0 {
        return Ok(false);
    }
    let Some(buf) = read_page_if_exists(env, rel, root.block)? else { return Ok(false) };
    let g = buf.read();
    if page::is_new(&g.0) {
        return Ok(false);
    }
    if root.offset.0 > page::max_offset(&g.0) {
        return Ok(true);
    }
    match page::item_id(&g.0, root.offset).flags {
        LpFlags::Dead | LpFlags::Unused => return Ok(true),
        LpFlags::Normal | LpFlags::Redirect => {}
    }
    let members = chain(&g.0, root.offset);
    if members.is_empty() {
        return Ok(false);
    }
    for off in members {
        let tid = Tid { block: root.block, offset: off };
        let h =
            TupleHeader::parse(page::item(&g.0, off)).ok_or_else(|| corrupt_tuple(rel, tid, "invalid tuple header"))?;
        if satisfies_vacuum(&h, horizon, env.xact)? != VacuumStatus::Dead {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What the heap says about the tuple an existing index entry points to, for a uniqueness
/// check (PostgreSQL's `SnapshotDirty` test in `_bt_check_unique`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapTupleState {
    /// Dead, or deleted by a committed transaction: no conflict.
    Dead,
    /// Live (committed, not deleted), or inserted/deleted by the inserting transaction itself
    /// in a way that leaves it live: a conflict.
    Live,
    /// Inserted or deleted by another transaction still running: wait for it, then ask again.
    InProgress(Xid),
}

/// For a unique check by the transaction owning `me` (its top-level XID and current
/// subtransactions, [`Snapshot::is_current`]): does the chain rooted at `root` hold a version that
/// is live, or being inserted or deleted by another running transaction (PostgreSQL's
/// `SnapshotDirty`)? Returns the values of a live version too, so the caller can compare keys.
pub fn unique_state(
    env: &HeapEnv<'_>,
    rel: &Relation,
    root: Tid,
    me: &Snapshot,
) -> Result<(HeapTupleState, Option<Vec<Value>>)> {
    let (state, live) = unique_version(env, rel, root, me)?;
    Ok((state, live.map(|(_, v)| v)))
}

/// A live version of a row: its TID and values.
pub type LiveVersion = (Tid, Vec<Value>);

/// [`unique_state`], naming the live version too: `INSERT ... ON CONFLICT` locks and updates
/// the version that conflicts (`db/transaction/upsert.rs`).
pub fn unique_version(
    env: &HeapEnv<'_>,
    rel: &Relation,
    root: Tid,
    me: &Snapshot,
) -> Result<(HeapTupleState, Option<LiveVersion>)> {
    let Some(buf) = read_page_if_exists(env, rel, root.block)? else { return Ok((HeapTupleState::Dead, None)) };
    let g = buf.read();
    if page::is_new(&g.0) {
        return Ok((HeapTupleState::Dead, None));
    }
    for off in chain(&g.0, root.offset) {
        let tid = Tid { block: root.block, offset: off };
        let t = page::item(&g.0, off);
        let h = TupleHeader::parse(t).ok_or_else(|| corrupt_tuple(rel, tid, "invalid tuple header"))?;
        let xmin = h.xmin();
        let inserted = if me.is_current(xmin) {
            true
        } else {
            match xid_status(env.xact, xmin)? {
                XidStatus::Committed => true,
                XidStatus::Aborted => continue,
                _ if env.xact.is_running(xmin) => return Ok((HeapTupleState::InProgress(xmin), None)),
                _ => continue,
            }
        };
        debug_assert!(inserted);
        let m = h.infomask();
        let xmax = h.xmax();
        let deleted = if m & (HEAP_XMAX_INVALID | HEAP_XMAX_LOCK_ONLY) != 0 || !xmax.is_valid() {
            false
        } else if me.is_current(xmax) {
            true
        } else {
            match xid_status(env.xact, xmax)? {
                XidStatus::Committed => true,
                _ if env.xact.is_running(xmax) => return Ok((HeapTupleState::InProgress(xmax), None)),
                _ => false,
            }
        };
        if !deleted {
            let vals = rel.deform(t).map_err(|e| corrupt_tuple(rel, tid, &e))?;
            return Ok((HeapTupleState::Live, Some((tid, vals))));
        }
    }
    Ok((HeapTupleState::Dead, None))
}
