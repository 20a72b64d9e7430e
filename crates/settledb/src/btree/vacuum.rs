//! VACUUM support (PostgreSQL's `nbtree.c` `btbulkdelete`/`btvacuumcleanup` and `nbtpage.c`
//! page deletion), simplified as the module doc of [`super`] describes.
//!
//! The leaf walk goes left to right through `next` links, locking one leaf exclusively at a
//! time and reading its `next` link under that lock. Entries only ever move right (splits), so
//! everything a later split moves off a page we already processed has already been judged;
//! nothing is missed even though the walk releases each page before the next.

use crate::error::Result;
use crate::heap::HeapEnv;
use crate::index::BulkDeleteStats;
use crate::page::{self as pg};
use crate::types::{BlockNumber, FullXid, OffsetNumber, Tid};
use crate::wal::{BlockRef, RecordBuilder, Rmgr};

use super::cycle;
use super::insert::leftmost_at_level;
use super::page::{self as bp, BTP_DELETED, BTP_ROOT, P_NONE};
use super::search::{hikey_bound, Target};
use super::wal::{apply_vacuum, vacuum_data, XLOG_BTREE_DELETE_PAGE, XLOG_BTREE_VACUUM};
use super::{BtreeIndex, WPage};

/// The safe XID of a deleted page (stored as its only item).
pub fn safe_xid(p: &[u8]) -> Option<FullXid> {
    if bp::flags(p) & BTP_DELETED == 0 || bp::max_offset(p) != 1 {
        return None;
    }
    let it = bp::item(p, OffsetNumber(1));
    let b: [u8; 8] = it.get(..8)?.try_into().ok()?;
    Some(FullXid(u64::from_le_bytes(b)))
}

/// A deleted page no scan can still reach: its safe XID precedes the oldest xmin.
pub fn is_recyclable(p: &[u8], oldest_xmin: FullXid) -> bool {
    safe_xid(p).is_some_and(|x| x < oldest_xmin)
}

/// Removes the entries whose TIDs `is_dead` reports, deleting leaves left empty.
pub fn bulk_delete(
    ix: &BtreeIndex,
    env: &HeapEnv<'_>,
    is_dead: &mut dyn FnMut(&[Tid], &mut [bool]),
    stats: &mut BulkDeleteStats,
) -> Result<()> {
    // Splits meanwhile stamp this bulk delete's cycle ID (the key-order walk does not need it).
    let cycle = cycle::start(ix)?;
    debug_assert_ne!(cycle.id(), 0);
    let meta = ix.meta(env)?;
    if meta.root != P_NONE {
        let mut block = leftmost_at_level(ix, env, 0)?;
        loop {
            let (next, empty) = vacuum_leaf(ix, env, block, is_dead, stats)?;
            if empty && delete_page(ix, env, block)? {
                stats.pages_newly_deleted += 1;
            }
            if next == P_NONE {
                break;
            }
            block = next;
        }
    }
    stats.num_pages = ix.num_pages(env)?;
    Ok(())
}

/// Processes one leaf under its exclusive lock; returns its `next` link and whether it is now
/// an empty, deletable-looking page (not rightmost, not root).
fn vacuum_leaf(
    ix: &BtreeIndex,
    env: &HeapEnv<'_>,
    block: u32,
    is_dead: &mut dyn FnMut(&[Tid], &mut [bool]),
    stats: &mut BulkDeleteStats,
) -> Result<(u32, bool)> {
    let mut w = ix.write_page(env, block)?;
    let p = &w.g.0;
    let next = bp::next(p);
    if bp::is_ignored(p) {
        return Ok((next, false));
    }
    if !bp::is_leaf(p) {
        return Err(ix.corrupt(block, "leaf walk reached a non-leaf page"));
    }
    let first = bp::first_data_offset(p).0;
    let n = bp::max_offset(p);
    let tids: Vec<Tid> = (first..=n).map(|o| bp::leaf_key(bp::item(p, OffsetNumber(o))).1).collect();
    let mut dead = vec![false; tids.len()];
    if !tids.is_empty() {
        is_dead(&tids, &mut dead);
    }
    // LP_DEAD entries (killed by scans) go too: their heap chains are dead to everyone.
    let offsets: Vec<u16> =
        (first..=n).zip(&dead).filter(|(o, &d)| d || bp::is_dead(p, OffsetNumber(*o))).map(|(o, _)| o).collect();
    stats.tuples_removed += offsets.len() as u64;
    stats.num_index_tuples += (tids.len() - offsets.len()) as u64;
    if !offsets.is_empty() {
        let what = "could not remove index entries";
        remove_items(ix, env, &mut w, XLOG_BTREE_VACUUM, &offsets, &mut Vec::new(), what)?;
    }
    let p = &w.g.0;
    let empty = first > bp::max_offset(p) && !bp::is_rightmost(p) && bp::flags(p) & BTP_ROOT == 0;
    Ok((next, empty))
}

/// Deletes the empty leaf `block` if it still is empty and is not the rightmost child of its
/// parent. Locks left sibling, page, right sibling, parent (left to right, then up) and logs
/// all four as images in one record. Returns whether the page was deleted.
fn delete_page(ix: &BtreeIndex, env: &HeapEnv<'_>, block: u32) -> Result<bool> {
    // Find the parent level page first (shared locks only, no leaf locked).
    let (hk, left) = {
        let r = ix.read_page(env, block)?;
        let p = &r.g.0;
        if bp::is_ignored(p) || bp::is_rightmost(p) || bp::first_data_offset(p).0 <= bp::max_offset(p) {
            return Ok(false);
        }
        (hikey_bound(p), bp::prev(p))
    };
    let target = Target::from_bound(&hk.0, hk.1);
    let Some(d) = ix.find_leaf(env, &target, false)? else { return Ok(false) };
    let Some(&parent0) = d.stack.last() else { return Ok(false) };

    let mut lw = if left != P_NONE { Some(ix.write_page(env, left)?) } else { None };
    let mut tw = ix.write_page(env, block)?;
    let tp = &tw.g.0;
    if bp::is_ignored(tp)
        || bp::is_rightmost(tp)
        || bp::prev(tp) != left
        || bp::first_data_offset(tp).0 <= bp::max_offset(tp)
        || bp::flags(tp) & BTP_ROOT != 0
        || lw.as_ref().is_some_and(|l| bp::next(&l.g.0) != block)
    {
        return Ok(false); // changed meanwhile; a later VACUUM will try again
    }
    let right = bp::next(tp);
    let mut rw = ix.write_page(env, right)?;
    let Some((mut pw, toff)) = find_downlink(ix, env, parent0, block)? else { return Ok(false) };
    let pp = &pw.g.0;
    let roff = OffsetNumber(toff.0 + 1);
    if roff.0 > bp::max_offset(pp) || bp::child(bp::item(pp, roff)) != right {
        return Ok(false); // rightmost child of its parent: keep it
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
    mark_deleted(&mut tw.g.0, env.xact.next_full_xid());
    let mut pages: Vec<&mut WPage<'_>> = Vec::with_capacity(4);
    if let Some(l) = lw.as_mut() {
        pages.push(l);
    }
    pages.push(&mut tw);
    pages.push(&mut rw);
    pages.push(&mut pw);
    ix.log_images(env, XLOG_BTREE_DELETE_PAGE, &mut pages)?;
    Ok(true)
}

/// Turns a page into a deleted page that keeps its sibling links (so searches move right)
/// and stores `safe` as its only item.
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

/// Counts pages and entries, and puts deleted pages that are safe to reuse on the free list.
///
/// Without a bulk delete in this VACUUM, the scan is skipped (returning `false`) unless the
/// last one left deleted pages that were not yet reusable amounting to more than 5% of the
/// index, PostgreSQL's `_bt_vacuum_needs_cleanup` rule: a VACUUM of a clean table does not read
/// its indexes. The count lives in memory, so the first VACUUM after the index is opened
/// scans. After a bulk delete the scan always runs (PostgreSQL's bulk delete scans every page
/// in physical order and gathers these figures itself; ours walks the leaf level, which does
/// not reach deleted pages).
pub fn cleanup(ix: &BtreeIndex, env: &HeapEnv<'_>, stats: &mut BulkDeleteStats, bulk_deleted: bool) -> Result<bool> {
    let n = ix.num_pages(env)?;
    let pending = ix.deleted_at_cleanup.load(std::sync::atomic::Ordering::Acquire);
    if !bulk_deleted && pending != u32::MAX && (pending == 0 || pending <= n / 20) {
        return Ok(false);
    }
    let horizon = env.xact.oldest_xmin_full();
    let (mut deleted, mut free, mut entries) = (0u32, Vec::new(), 0u64);
    for block in 1..n {
        let buf = env.pool.read(ix.tag(block), None)?;
        let g = buf.read();
        if pg::is_new(&g.0) {
            continue; // extended but never written (a crash, or a split in progress)
        }
        bp::validate(&g.0, ix.relfilenode, BlockNumber(block))?;
        let p = &g.0;
        if bp::flags(p) & BTP_DELETED != 0 {
            deleted += 1;
            if is_recyclable(p, horizon) {
                free.push(block);
            }
        } else if bp::is_leaf(p) {
            entries += u64::from((bp::max_offset(p) + 1).saturating_sub(bp::first_data_offset(p).0));
        }
    }
    stats.num_pages = n;
    stats.pages_deleted = deleted;
    stats.pages_free = free.len() as u32;
    stats.num_index_tuples = entries;
    ix.deleted_at_cleanup.store(deleted - free.len() as u32, std::sync::atomic::Ordering::Release);
    let mut list = ix.free_pages.lock();
    free.retain(|b| !list.contains(b));
    list.extend(free);
    Ok(true)
}

/// Removes the entries at `offsets` from the exclusively locked page `w` and logs it as one
/// record (`info`: VACUUM for bulk delete, DELETE for simple deletion; both redo the same way),
/// stamping the record's LSN on the page. `data` is scratch space for the record's block data.
pub(crate) fn remove_items(
    ix: &BtreeIndex,
    env: &HeapEnv<'_>,
    w: &mut WPage<'_>,
    info: u8,
    offsets: &[u16],
    data: &mut Vec<u8>,
    what: &str,
) -> Result<()> {
    let block = w.buf.block().0;
    if !apply_vacuum(&mut w.g.0, info, offsets) {
        return Err(ix.corrupt(block, what));
    }
    vacuum_data(offsets, data);
    let mut rec = RecordBuilder {
        rmgr: Rmgr::Btree,
        info,
        xid: crate::types::Xid::INVALID,
        blocks: vec![BlockRef {
            id: 0,
            tag: ix.tag(block),
            will_init: false,
            page: Some(&w.g.0),
            data: std::mem::take(data),
        }],
        main_data: vec![],
    };
    let lsn = env.wal.insert(&rec);
    *data = std::mem::take(&mut rec.blocks[0].data);
    drop(rec);
    pg::set_lsn(&mut w.g.0, lsn?);
    w.buf.mark_dirty();
    Ok(())
}
