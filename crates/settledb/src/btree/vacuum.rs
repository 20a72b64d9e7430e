//! VACUUM of a B-tree: bulk delete and cleanup (PostgreSQL's `btbulkdelete`, `btvacuumcleanup`,
//! `btvacuumscan` and `btvacuumpage` in `nbtree.c`), with a bulk delete that several threads
//! can run at once.
//!
//! # One physical scan
//!
//! A bulk delete reads every block of the index once, in block order (sequential I/O, and no
//! tree walk): on each leaf it collects the heap TIDs, asks the dead-TID callback about all of
//! them in one call, and removes the dead entries and the LP_DEAD ones by one compaction of the
//! page and one VACUUM record. A leaf left empty is deleted on the spot ([`super::pagedel`]).
//! Deleted pages met on the way are counted, and those no scan can still reach
//! ([`is_recyclable`]) go on the free list. So the scan gathers everything `cleanup` needs:
//! after a bulk delete, [`cleanup`] does no I/O and returns the bulk delete's figures, as
//! PostgreSQL's `btvacuumcleanup` does. Without a bulk delete, `cleanup` runs the same scan
//! without a callback, and only when PostgreSQL's `_bt_vacuum_needs_cleanup` rule asks for it.
//!
//! ```text
//!   blocks:   1    2    3    4    5    6    7    8 ...        scan order: 1, 2, 3, ...
//!   leaves:  [a-c][d-f][x-z][g-i][j-l][deleted][m-o][p-r]      (key order is 1,2,4,5,7,8,3)
//! ```
//!
//! # Concurrent splits: cycle IDs and backtracking
//!
//! Inserts go on during the scan. A split moves the upper half of a page to a new right
//! sibling, which may be a recycled block *before* the scan position: its entries would be
//! missed. The bulk delete therefore runs under a vacuum cycle ID ([`super::cycle`]) that every
//! split meanwhile stamps on both halves, the right one marked `SPLIT_END` when it ends the chain
//! of pages split off one page. On a leaf carrying our ID and not marked `SPLIT_END`, whose right
//! sibling was already visited, the scan *backtracks*: after finishing the leaf it follows the
//! right link and processes the sibling, and so on along the chain, stopping after a page marked
//! `SPLIT_END` or at a page that is not a live leaf with our ID (one a previous visit of this scan
//! cleared, say). Pages reached by backtracking are never deleted, and a page whose entries were
//! all processed gets its ID cleared (by its VACUUM record, or as an unlogged hint when nothing
//! was removed), so a later visit does not follow its chain again.
//!
//! # Parallel bulk delete
//!
//! [`BulkDelete`] is shared by any number of threads calling [`BulkDelete::work`]. Blocks are
//! handed out in chunks of [`CHUNK_BLOCKS`] from one counter under a mutex, which also holds each
//! worker's position: the block it is visiting and the end of its chunk. When the counter
//! reaches the index's size the size is read again, so blocks added by splits during the scan
//! are handed out too; a worker stops when none are left, and each one asks again after its
//! last chunk, so the last to ask has seen every extension made before all chunks were done
//! (a later split only moves entries already processed).
//!
//! "Already visited", which decides backtracking, becomes: handed out, and not among the blocks
//! some worker (this one included) has yet to reach in its chunk. It is answered under the
//! mutex while the leaf is exclusively locked. Why nothing is missed: the split that stamped the
//! leaf is complete (we hold the leaf the split also held), so its right sibling already holds
//! the moved entries. If that sibling counts as not visited, its visit as a scan block starts
//! only later (the block was not handed out, or its worker's position was still before it, and
//! a worker publishes its position before it locks the block), and that visit sees the entries,
//! or, if they moved on by a further split, the sibling carries our ID and its own visit follows
//! the chain from there. If it counts as visited, we go there ourselves. Each block is handed out
//! exactly once, so it is visited once as a scan block; a page can in addition be reached by
//! backtracking while its worker is on it or has passed it.
//!
//! What a page visited twice does to the figures: nothing to `tuples_removed` (an entry is
//! removed, and counted, once; the second visit finds it gone) nor to the page counts (pages are
//! counted, deleted and freed only on their visit as scan block); `num_index_tuples` counts the
//! page's remaining entries twice. PostgreSQL has the same overcount for the same reason (and
//! clamps the figure to the heap's tuple count). It needs a split into a recycled block during
//! the scan, so it is rare and small.
//!
//! Page deletion by two workers at once is safe: each locks left sibling, page, right sibling,
//! parent in that order, and a deletion that finds its left sibling changed by the other looks it
//! up again ([`super::pagedel`]).
//!
//! # Locking and WAL
//!
//! Every page is visited under its exclusive lock, one at a time (and never with another page
//! locked, but for the claim mutex, taken under a leaf lock and never held while locking a
//! page). The dead-TID callback is called with the leaf locked: it must not touch this index. The
//! VACUUM record is inserted under the lock and its LSN stamped on the page before the lock is
//! released (WAL before data); its redo is the same compaction ([`super::wal::apply_vacuum`]).
//! A crash in the middle leaves some leaves vacuumed and some not, every one of them consistent;
//! the next VACUUM removes the rest.
//!
//! # Per leaf
//!
//! Each worker keeps its vectors (TIDs, verdicts, offsets, record data) across leaves, so a leaf
//! costs no allocation but the WAL record's one-block list; it reads the TIDs and the LP_DEAD
//! marks in one pass over the line pointers, calls the callback once, removes the items by one
//! compaction of the page ([`super::page::delete_items`]), and pins the next block of its chunk
//! and prefetches the used parts of its page while working on the current one.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::buffer::Buffer;
use crate::error::Result;
use crate::heap::HeapEnv;
use crate::index::{BulkDeleteStats, IndexBulkDelete};
use crate::page::{self as pg};
use crate::types::{FullXid, OffsetNumber, Tid, Xid};
use crate::wal::{BlockRef, RecordBuilder, Rmgr};

use super::cycle::{self, CycleGuard};
use super::page::{self as bp, BTP_DELETED, BTP_HALF_DEAD, BTP_LEAF, BTP_META, BTP_ROOT, BTP_SPLIT_END, P_NONE};
use super::pagedel::delete_page;
use super::wal::{apply_vacuum, vacuum_data, XLOG_BTREE_VACUUM};
use super::{BtreeIndex, WPage};

/// Blocks handed to a worker at a time.
pub const CHUNK_BLOCKS: u32 = 128;

/// The dead-TID callback: fills `dead[i]` for `tids[i]`.
pub type IsDead<'a> = &'a mut dyn FnMut(&[Tid], &mut [bool]);

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

/// A worker's position: the block it is visiting and the end of its chunk (exclusive). The
/// blocks strictly between the two are handed out but not yet visited.
#[derive(Default)]
struct Position {
    cur: AtomicU32,
    end: AtomicU32,
}

/// The block counter and the workers' positions.
struct Claims {
    next: u32,
    nblocks: u32,
    workers: Vec<Arc<Position>>,
}

/// What the workers found, merged as each finishes.
#[derive(Default)]
struct Found {
    stats: BulkDeleteStats,
    /// Deleted pages found safe to reuse.
    free: Vec<u32>,
    /// Pages this scan deleted, with their safe XIDs.
    deleted: Vec<(u32, FullXid)>,
}

/// One worker's state: its figures and the buffers it reuses from leaf to leaf.
#[derive(Default)]
struct Worker {
    found: Found,
    tids: Vec<Tid>,
    lp_dead: Vec<u16>,
    dead: Vec<bool>,
    offsets: Vec<u16>,
    data: Vec<u8>,
}

/// One bulk delete (or cleanup scan) of one index, shared by the threads working on it.
///
/// Start it with [`BtreeIndex::begin_bulk_delete`], call [`BulkDelete::work`] from one or
/// several threads at once, and after every call has returned, [`BulkDelete::finish`]. If a
/// `work` call fails, the others stop early: drop the scan instead of finishing it.
pub struct BulkDelete<'ix> {
    ix: &'ix BtreeIndex,
    /// Held for the scan's duration; `None` for a cleanup scan, which removes no entries.
    _cycle: Option<CycleGuard<'ix>>,
    cycle_id: u16,
    /// Deleted pages whose safe XID precedes this may be reused.
    horizon: FullXid,
    claims: Mutex<Claims>,
    failed: AtomicBool,
    found: Mutex<Found>,
}

impl<'ix> BulkDelete<'ix> {
    /// A scan of `ix`; with `cycle`, a bulk delete under that vacuum cycle.
    fn new(ix: &'ix BtreeIndex, env: &HeapEnv<'_>, cycle: Option<CycleGuard<'ix>>) -> Result<BulkDelete<'ix>> {
        let cycle_id = cycle.as_ref().map_or(0, CycleGuard::id);
        Ok(BulkDelete {
            ix,
            _cycle: cycle,
            cycle_id,
            horizon: env.xact.oldest_xmin_full(),
            claims: Mutex::new(Claims { next: 1, nblocks: ix.num_pages(env)?, workers: Vec::new() }),
            failed: AtomicBool::new(false),
            found: Mutex::new(Found::default()),
        })
    }

    /// Starts a bulk delete: takes the index's vacuum cycle ID (an error if another bulk delete
    /// of it is running).
    pub(crate) fn begin(ix: &'ix BtreeIndex, env: &HeapEnv<'_>) -> Result<BulkDelete<'ix>> {
        let cycle = cycle::start(ix)?;
        BulkDelete::new(ix, env, Some(cycle))
    }

    /// Visits chunks of blocks until none are left, removing the entries whose heap TIDs
    /// `is_dead` reports (it gets one leaf's TIDs per call, with the leaf locked). Any number of
    /// threads may call this at once, each with its own callback.
    pub fn work(&self, env: &HeapEnv<'_>, is_dead: IsDead<'_>) -> Result<()> {
        self.run(env, Some(is_dead))
    }

    /// Ends the scan once every [`BulkDelete::work`] call has returned: puts on the free list the
    /// deleted pages found reusable, and those the scan deleted that already are (PostgreSQL's
    /// `_bt_pendingfsm_finalize`), then fills `stats` as PostgreSQL's `btvacuumscan` does: the
    /// figures about the whole index (`num_pages`, `num_index_tuples`, `pages_deleted`,
    /// `pages_free`) are replaced, those about this VACUUM (`tuples_removed`,
    /// `pages_newly_deleted`) added to, so that a VACUUM with several index passes adds up.
    pub fn finish(self, env: &HeapEnv<'_>, stats: &mut BulkDeleteStats) -> Result<()> {
        let mut found = self.found.into_inner();
        if !found.deleted.is_empty() {
            let horizon = env.xact.oldest_xmin_full();
            for &(block, safe) in &found.deleted {
                if safe < horizon {
                    found.free.push(block);
                    found.stats.pages_free += 1;
                }
            }
        }
        self.ix.add_free_pages(found.free);
        let s = found.stats;
        stats.num_pages = self.ix.num_pages(env)?;
        stats.num_index_tuples = s.num_index_tuples;
        stats.pages_deleted = s.pages_deleted;
        stats.pages_free = s.pages_free;
        stats.tuples_removed += s.tuples_removed;
        stats.pages_newly_deleted += s.pages_newly_deleted;
        Ok(())
    }

    fn run(&self, env: &HeapEnv<'_>, mut is_dead: Option<IsDead<'_>>) -> Result<()> {
        let me = Arc::new(Position::default());
        self.claims.lock().workers.push(me.clone());
        let mut w = Worker::default();
        let r = self.run_chunks(env, &me, &mut w, &mut is_dead);
        self.claims.lock().workers.retain(|p| !Arc::ptr_eq(p, &me));
        if r.is_err() {
            self.failed.store(true, Ordering::Relaxed);
        }
        let mut found = self.found.lock();
        let s = &w.found.stats;
        found.stats.num_index_tuples += s.num_index_tuples;
        found.stats.tuples_removed += s.tuples_removed;
        found.stats.pages_newly_deleted += s.pages_newly_deleted;
        found.stats.pages_deleted += s.pages_deleted;
        found.stats.pages_free += s.pages_free;
        found.free.append(&mut w.found.free);
        found.deleted.append(&mut w.found.deleted);
        r
    }

    fn run_chunks(
        &self,
        env: &HeapEnv<'_>,
        me: &Position,
        w: &mut Worker,
        is_dead: &mut Option<IsDead<'_>>,
    ) -> Result<()> {
        while let Some((start, end)) = self.claim(env, me)? {
            let mut next: Option<Buffer<'_>> = None;
            for block in start..end {
                if self.failed.load(Ordering::Relaxed) {
                    return Ok(());
                }
                // Published before the block is locked: see "Parallel bulk delete".
                me.cur.store(block, Ordering::SeqCst);
                let buf = match next.take() {
                    Some(b) => b,
                    None => self.pin(env, block)?,
                };
                if block + 1 < end {
                    let b = self.pin(env, block + 1)?;
                    pg::prefetch_used(&b.read().0);
                    next = Some(b);
                }
                self.visit_scan_block(env, w, is_dead, block, buf)?;
            }
        }
        Ok(())
    }

    /// The next chunk for worker `me`, or `None` when every block has been handed out (the
    /// index's size is read again first, to catch blocks added meanwhile).
    fn claim(&self, env: &HeapEnv<'_>, me: &Position) -> Result<Option<(u32, u32)>> {
        let mut c = self.claims.lock();
        if c.next >= c.nblocks {
            c.nblocks = self.ix.num_pages(env)?;
        }
        if c.next >= c.nblocks || self.failed.load(Ordering::Relaxed) {
            me.end.store(0, Ordering::SeqCst);
            return Ok(None);
        }
        let start = c.next;
        let end = start.saturating_add(CHUNK_BLOCKS).min(c.nblocks);
        c.next = end;
        me.cur.store(start, Ordering::SeqCst);
        me.end.store(end, Ordering::SeqCst);
        Ok(Some((start, end)))
    }

    /// Whether `block`'s visit as a scan block may have begun: it was handed out, and no worker
    /// has it still ahead of its position.
    fn visited(&self, block: u32) -> bool {
        let c = self.claims.lock();
        block < c.next
            && !c.workers.iter().any(|p| p.cur.load(Ordering::SeqCst) < block && block < p.end.load(Ordering::SeqCst))
    }

    fn pin<'a>(&self, env: &HeapEnv<'a>, block: u32) -> Result<Buffer<'a>> {
        env.pool.read_validated(self.ix.tag(block), None, bp::validate_or_new)
    }

    /// Visits scan block `block`, then the pages a concurrent split moved its entries to.
    fn visit_scan_block(
        &self,
        env: &HeapEnv<'_>,
        w: &mut Worker,
        is_dead: &mut Option<IsDead<'_>>,
        block: u32,
        buf: Buffer<'_>,
    ) -> Result<()> {
        let mut at = self.visit(env, w, is_dead, block, block, buf)?;
        let mut steps = 0u32;
        while let Some(b) = at {
            // A chain longer than the index means right links that loop: corruption.
            steps += 1;
            if steps > self.claims.lock().nblocks {
                return Err(self.ix.corrupt(b, "right links from a page split during VACUUM form a cycle"));
            }
            let buf = self.pin(env, b)?;
            at = self.visit(env, w, is_dead, block, b, buf)?;
        }
        Ok(())
    }

    /// Visits page `block` (the scan block `scan`, or a page backtracking reached); returns the
    /// page to backtrack to next, if any.
    fn visit(
        &self,
        env: &HeapEnv<'_>,
        w: &mut Worker,
        is_dead: &mut Option<IsDead<'_>>,
        scan: u32,
        block: u32,
        buf: Buffer<'_>,
    ) -> Result<Option<u32>> {
        let g = buf.write();
        let p = &g.0;
        if pg::is_new(p) {
            return Ok(None); // never written: a split still holding it, or a crash
        }
        let flags = bp::flags(p);
        if block != scan
            && (flags & (BTP_DELETED | BTP_HALF_DEAD) != 0 || flags & BTP_LEAF == 0 || bp::cycle_id(p) != self.cycle_id)
        {
            return Ok(None); // not a page split off during this scan, or already processed
        }
        if flags & BTP_DELETED != 0 {
            w.found.stats.pages_deleted += 1;
            if is_recyclable(p, self.horizon) {
                w.found.free.push(block);
                w.found.stats.pages_free += 1;
            }
            return Ok(None);
        }
        if flags & (BTP_META | BTP_HALF_DEAD) != 0 || flags & BTP_LEAF == 0 {
            return Ok(None);
        }
        // Decide before the visit clears the cycle ID.
        let next = bp::next(p);
        let backtrack = (self.cycle_id != 0
            && bp::cycle_id(p) == self.cycle_id
            && flags & BTP_SPLIT_END == 0
            && next != P_NONE
            && self.visited(next))
        .then_some(next);
        let mut page = WPage { g, buf };
        let empty = self.vacuum_leaf(env, w, is_dead, &mut page)?;
        drop(page);
        if empty && block == scan {
            if let Some(safe) = delete_page(self.ix, env, block)? {
                w.found.stats.pages_newly_deleted += 1;
                w.found.stats.pages_deleted += 1;
                w.found.deleted.push((block, safe));
            }
        }
        Ok(backtrack)
    }

    /// Removes the dead entries of the locked leaf (with a callback; a cleanup scan only counts)
    /// and counts what is left. Returns whether the leaf is now empty and a candidate for
    /// deletion (not rightmost, not the root).
    fn vacuum_leaf(
        &self,
        env: &HeapEnv<'_>,
        w: &mut Worker,
        is_dead: &mut Option<IsDead<'_>>,
        page: &mut WPage<'_>,
    ) -> Result<bool> {
        let p = &page.g.0;
        let first = bp::first_data_offset(p).0;
        let count = (bp::max_offset(p) + 1).saturating_sub(first);
        w.offsets.clear();
        if let Some(is_dead) = is_dead.as_mut() {
            w.tids.clear();
            w.lp_dead.clear();
            bp::leaf_tids(p, &mut w.tids, &mut w.lp_dead);
            w.dead.clear();
            w.dead.resize(w.tids.len(), false);
            if !w.tids.is_empty() {
                is_dead(&w.tids, &mut w.dead);
            }
            // LP_DEAD entries (killed by scans) go too: their heap chains are dead to everyone.
            for &o in &w.lp_dead {
                w.dead[usize::from(o - first)] = true;
            }
            w.offsets.extend((first..).zip(&w.dead).filter(|(_, &d)| d).map(|(o, _)| o));
        }
        let removed = w.offsets.len() as u64;
        w.found.stats.tuples_removed += removed;
        w.found.stats.num_index_tuples += u64::from(count) - removed;
        if removed > 0 {
            remove_items(
                self.ix,
                env,
                page,
                XLOG_BTREE_VACUUM,
                &w.offsets,
                &mut w.data,
                "could not remove index entries",
            )?;
        } else if self.cycle_id != 0 && bp::cycle_id(&page.g.0) == self.cycle_id {
            // Processed: a later visit need not follow this page's chain again. A hint, not
            // logged (PostgreSQL's MarkBufferDirtyHint of the cleared btpo_cycleid).
            bp::set_cycle_id(&mut page.g.0, 0);
            page.buf.hints_added(pg::lsn(&page.g.0), env.wal.redo_ptr());
        }
        let p = &page.g.0;
        Ok(first > bp::max_offset(p) && !bp::is_rightmost(p) && bp::flags(p) & BTP_ROOT == 0)
    }
}

impl IndexBulkDelete for BulkDelete<'_> {
    fn work(&self, env: &HeapEnv<'_>, is_dead: &mut dyn FnMut(&[Tid], &mut [bool])) -> Result<()> {
        BulkDelete::work(self, env, is_dead)
    }

    fn finish(self: Box<Self>, env: &HeapEnv<'_>, stats: &mut BulkDeleteStats) -> Result<()> {
        BulkDelete::finish(*self, env, stats)
    }
}

/// Single-threaded bulk delete: [`BulkDelete::work`] on this thread alone.
pub fn bulk_delete(ix: &BtreeIndex, env: &HeapEnv<'_>, is_dead: IsDead<'_>, stats: &mut BulkDeleteStats) -> Result<()> {
    let scan = BulkDelete::begin(ix, env)?;
    scan.work(env, is_dead)?;
    scan.finish(env, stats)
}

/// Bulk delete by `workers` threads (this one and `workers - 1` more), all asking `is_dead`.
pub fn bulk_delete_parallel(
    ix: &BtreeIndex,
    env: &HeapEnv<'_>,
    is_dead: &(dyn Fn(&[Tid], &mut [bool]) + Sync),
    workers: usize,
    stats: &mut BulkDeleteStats,
) -> Result<()> {
    let scan = BulkDelete::begin(ix, env)?;
    let scan_ref = &scan;
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let others: Vec<_> = (1..workers.max(1))
            .map(|_| s.spawn(move || scan_ref.work(env, &mut |t: &[Tid], d: &mut [bool]| is_dead(t, d))))
            .collect();
        let mine = scan_ref.work(env, &mut |t: &[Tid], d: &mut [bool]| is_dead(t, d));
        let mut all = vec![mine];
        for h in others {
            all.push(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        all
    });
    results.into_iter().collect::<Result<()>>()?;
    scan.finish(env, stats)
}

/// Counts pages and entries, deletes empty leaves and puts deleted pages that are safe to reuse
/// on the free list; records how many deleted pages are left waiting, for the next VACUUM's
/// decision.
///
/// After a bulk delete in this VACUUM (`bulk_deleted`), its scan already did all this and
/// `stats` holds its figures: nothing is read. Otherwise the scan (a [`BulkDelete`] without
/// callback or cycle ID) runs only if the last one left deleted pages that were not yet reusable
/// amounting to more than 5% of the index, PostgreSQL's `_bt_vacuum_needs_cleanup` rule, so a
/// VACUUM of a clean table does not read its indexes; the count lives in memory, so the first
/// VACUUM after the index is opened scans. Returns whether `stats` holds figures.
pub fn cleanup(ix: &BtreeIndex, env: &HeapEnv<'_>, stats: &mut BulkDeleteStats, bulk_deleted: bool) -> Result<bool> {
    if !bulk_deleted {
        let n = ix.num_pages(env)?;
        let pending = ix.deleted_at_cleanup.load(Ordering::Acquire);
        if pending != u32::MAX && (pending == 0 || pending <= n / 20) {
            return Ok(false);
        }
        let scan = BulkDelete::new(ix, env, None)?;
        scan.run(env, None)?;
        scan.finish(env, stats)?;
    }
    ix.deleted_at_cleanup.store(stats.pages_deleted.saturating_sub(stats.pages_free), Ordering::Release);
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
        toplevel_xid: crate::types::Xid::INVALID,
        rmgr: Rmgr::Btree,
        info,
        xid: Xid::INVALID,
        blocks: vec![BlockRef {
            keep_data: false,
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
