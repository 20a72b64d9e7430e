//! Deletion of an empty leaf (PostgreSQL's `_bt_pagedel` for a leaf, with its two stages
//! `_bt_mark_page_halfdead` and `_bt_unlink_halfdead_page` done in one WAL record).
//!
//! A leaf a bulk delete left empty that is neither the root nor the rightmost child of its
//! parent is unlinked: its left sibling, itself, its right sibling and its parent are locked in
//! that order (left to right, then up, the order every writer follows) and changed together —
//! the parent's downlink to the page is redirected to the right sibling, whose own downlink goes
//! (the right sibling takes over the key range), the siblings are linked to each other, and the
//! page is marked DELETED with the next full XID as its *safe XID*. The four pages are logged as
//! images in one DELETE_PAGE record. The deleted page keeps its `next` link, so a searcher that
//! was on its way moves right; it is reused only once no scan can still hold its block number
//! ([`super::vacuum::is_recyclable`]).
//!
//! Entries never move: only an empty page is deleted, and its key range passes to the right
//! sibling. A page that stopped qualifying meanwhile (an insert arrived, a split or another
//! deletion changed its neighbours) is left for a later VACUUM, except that a left sibling that
//! changed (a concurrent deletion of the page to the left, by another worker of a parallel bulk
//! delete) is looked up again a few times.

use crate::error::Result;
use crate::heap::HeapEnv;
use crate::types::{FullXid, OffsetNumber};

use super::page::{self as bp, BTP_DELETED, BTP_ROOT, P_NONE};
use super::search::{hikey_bound, Target};
use super::wal::XLOG_BTREE_DELETE_PAGE;
use super::{BtreeIndex, WPage};

/// Attempts per page when its left sibling changes under us.
const LEFT_SIBLING_RETRIES: usize = 3;

enum Attempt {
    Deleted(FullXid),
    Kept,
    LeftMoved,
}

/// Deletes the empty leaf `block` if it still is empty and is not the rightmost child of its
/// parent (nor the root). Returns the deleted page's safe XID, `None` when it was kept. The
/// caller holds no page lock.
pub(crate) fn delete_page(ix: &BtreeIndex, env: &HeapEnv<'_>, block: u32) -> Result<Option<FullXid>> {
    for _ in 0..LEFT_SIBLING_RETRIES {
        match try_delete(ix, env, block)? {
            Attempt::Deleted(x) => return Ok(Some(x)),
            Attempt::Kept => return Ok(None),
            Attempt::LeftMoved => {}
        }
    }
    Ok(None)
}

fn still_deletable(p: &[u8]) -> bool {
    !bp::is_ignored(p)
        && bp::is_leaf(p)
        && !bp::is_rightmost(p)
        && bp::flags(p) & BTP_ROOT == 0
        && bp::first_data_offset(p).0 > bp::max_offset(p)
}

fn try_delete(ix: &BtreeIndex, env: &HeapEnv<'_>, block: u32) -> Result<Attempt> {
    // Find the parent level page first (shared locks only, no leaf locked).
    let (hk, left) = {
        let r = ix.read_page(env, block)?;
        let p = &r.g.0;
        if !still_deletable(p) {
            return Ok(Attempt::Kept);
        }
        (hikey_bound(p), bp::prev(p))
    };
    let target = Target::from_bound(&hk.0, hk.1);
    let Some(d) = ix.find_leaf(env, &target, false)? else { return Ok(Attempt::Kept) };
    let Some(&parent0) = d.stack.last() else { return Ok(Attempt::Kept) };

    let mut lw = if left != P_NONE { Some(ix.write_page(env, left)?) } else { None };
    let mut tw = ix.write_page(env, block)?;
    let tp = &tw.g.0;
    if !still_deletable(tp) {
        return Ok(Attempt::Kept);
    }
    if bp::prev(tp) != left || lw.as_ref().is_some_and(|l| bp::next(&l.g.0) != block) {
        return Ok(Attempt::LeftMoved);
    }
    let right = bp::next(tp);
    let mut rw = ix.write_page(env, right)?;
    let Some((mut pw, toff)) = find_downlink(ix, env, parent0, block)? else { return Ok(Attempt::Kept) };
    let pp = &pw.g.0;
    let roff = OffsetNumber(toff.0 + 1);
    if roff.0 > bp::max_offset(pp) || bp::child(bp::item(pp, roff)) != right {
        return Ok(Attempt::Kept); // rightmost child of its parent: keep it
    }
    // Parent: the page's downlink now leads to the right sibling, whose own one goes.
    let mut items = bp::items(pp);
    bp::set_child(&mut items[toff.0 as usize - 1], right);
    items.remove(roff.0 as usize - 1);
    if !bp::rebuild(&mut pw.g.0, &items) {
        return Err(ix.corrupt(pw.buf.block().0, "could not remove a downlink"));
    }
    if let Some(l) = lw.as_mut() {
        bp::set_next(&mut l.g.0, right);
    }
    bp::set_prev(&mut rw.g.0, left);
    let safe = env.xact.next_full_xid();
    mark_deleted(&mut tw.g.0, safe);
    let mut pages: Vec<&mut WPage<'_>> = Vec::with_capacity(4);
    if let Some(l) = lw.as_mut() {
        pages.push(l);
    }
    pages.push(&mut tw);
    pages.push(&mut rw);
    pages.push(&mut pw);
    ix.log_images(env, XLOG_BTREE_DELETE_PAGE, &mut pages)?;
    Ok(Attempt::Deleted(safe))
}

/// Turns a page into a deleted page that keeps its sibling links (so searches move right)
/// and stores `safe` as its only item. Flags other than DELETED, and the cycle ID, go.
fn mark_deleted(p: &mut [u8], safe: FullXid) {
    let (prev, next, level) = (bp::prev(p), bp::next(p), bp::level(p));
    bp::init(p, level, BTP_DELETED);
    bp::set_prev(p, prev);
    bp::set_next(p, next);
    bp::insert_item(p, OffsetNumber(1), &safe.0.to_le_bytes());
}

/// Exclusively locks the level-1 page holding the downlink to `child`, starting at `start`
/// and moving right. `None` when it is not found.
fn find_downlink<'a>(
    ix: &BtreeIndex,
    env: &HeapEnv<'a>,
    start: u32,
    child: u32,
) -> Result<Option<(WPage<'a>, OffsetNumber)>> {
    let mut p = ix.write_page(env, start)?;
    loop {
        let first = bp::first_data_offset(&p.g.0).0;
        let found = (first..=bp::max_offset(&p.g.0)).find(|&o| bp::child(bp::item(&p.g.0, OffsetNumber(o))) == child);
        if let Some(o) = found {
            return Ok(Some((p, OffsetNumber(o))));
        }
        match bp::next(&p.g.0) {
            P_NONE => return Ok(None),
            n => p = ix.write_page(env, n)?,
        }
    }
}
