//! The free space map (PostgreSQL's `freespace.c` and `fsmpage.c`, simplified): how much room
//! each heap page has, one byte per page, in the relation's `_fsm` fork, so an insert finds a
//! page with room without reading the heap.
//!
//! # Categories
//!
//! A page's free space is stored as a *category*, `free bytes / 32` (PostgreSQL's
//! `FSM_CAT_STEP`), capped at 254; 255 means "at least `MAX_REQUEST_BYTES`" (a whole empty
//! page). A request for `n` bytes needs category `ceil(n / 32)` (at least 1), so a page whose
//! category satisfies the request really had room when the entry was written. Category 0 means
//! "full or unknown".
//!
//! # Layout
//!
//! A flat array, unlike PostgreSQL's tree of binary-tree pages: each FSM page is a standard
//! 8 KB page (24-byte header, `pd_lower = pd_upper = pd_special = 8192`) followed by
//! [`SLOTS_PER_PAGE`] (8168) category bytes, one per heap page:
//!
//! ```text
//!   heap block b  ->  FSM block b / 8168, byte 24 + b % 8168
//! ```
//!
//! To keep [`FreeSpaceMap::search`] from reading the whole fork of a large table, each
//! [`FreeSpaceMap`] keeps in memory, per FSM page, an *upper bound* of the largest category on
//! it (unknown until the page is first read). A search skips pages whose bound is below the
//! request, reads the others, and replaces their bound with the exact maximum it saw; a write
//! raises the bound when it raises a slot above it, and leaves it alone otherwise (a stale high
//! bound costs one page read, after which it is exact again). Bounds are updated under the FSM
//! page's content lock, so a search and a concurrent write cannot leave a bound below a slot.
//! A 1 GB table (131072 heap pages) has 17 FSM pages; the summary is 17 bytes.
//!
//! # Not WAL-logged, never trusted
//!
//! The map is a hint. Writes are not WAL-logged and FSM pages carry no LSN; a write always
//! marks the page dirty (unlike heap hint bits, which may not dirty a page without a full-page
//! image to repair a torn write), because a torn FSM page is harmless: its checksum fails when
//! it is read back, and a page that fails its checksum or header check is treated as all zeros
//! (no free space known) and rewritten from scratch by the next write to it. A page lost in a
//! crash reads as zeros. An entry may be stale in both directions: callers re-check the heap
//! page under its lock before using it (`heap::find_target` does, and corrects a wrong entry),
//! and
//! [`FreeSpaceMap::search`] never returns a block at or past the heap's current end (entries
//! there can survive a crash after a truncation, which is not logged). Only real I/O errors
//! are returned; corruption never stops an insert.
//!
//! # Who uses it
//!
//! * Inserts (`heap::find_target`, PostgreSQL's `RelationGetBufferForTuple`): after the
//!   relation's target block, they take the page [`FreeSpaceMap::search`] offers for the
//!   tuple's size plus the fillfactor reserve; a page that turns out to lack room gets its real
//!   free space written with [`FreeSpaceMap::record`] before the map is asked again
//!   (`RecordAndGetPageWithFreeSpace`). A table whose map knows nothing tries its last page,
//!   then extends. Nothing else steers inserts, so a page recorded as 0 receives new rows only
//!   as the target block of the inserter that was already filling it, or as the last page of a
//!   table with nothing recorded (both as in PostgreSQL).
//! * Opportunistic pruning (`heap::prune_and_record`, from readers and updaters) records the
//!   page's free space after pruning. VACUUM's own pruning (`heap::prune_locked`) does not.
//! * VACUUM's part: phase III (and phase I for pages without dead items) records each page's free
//!   space with [`FreeSpaceMap::set_many`] (one page lock per FSM page, not per heap page); with
//!   the `eager` policy a page set all-visible records 0 unless its free space exceeds
//!   BLCKSZ/2 (DESIGN.md §5), which keeps new rows away from settled pages. After truncating the
//!   heap, VACUUM calls [`FreeSpaceMap::truncate`].
//!
//! Lock order: a heap page's lock may be held while an FSM page is locked (pruning), never the
//! reverse; inserts release the heap page before recording its free space.

use parking_lot::Mutex;

use crate::buffer::{Buffer, BufferPool};
use crate::error::{Error, Result};
use crate::page::{self, BLCKSZ, PAGE_HEADER_SIZE};
use crate::types::{BlockNumber, BufferTag, Fork, Oid};

/// Category bytes on one FSM page.
pub const SLOTS_PER_PAGE: u32 = (BLCKSZ - PAGE_HEADER_SIZE) as u32;
/// Bytes per category step.
pub const CAT_STEP: usize = 32;
/// The largest request the map is asked about (a heap tuple filling an empty page:
/// PostgreSQL's `MaxFSMRequestSize` = `MaxHeapTupleSize`).
pub const MAX_REQUEST_BYTES: usize = BLCKSZ - PAGE_HEADER_SIZE - 8;

const _: () = assert!(SLOTS_PER_PAGE == 8168);

/// The category recorded for a page with `free_bytes` free (`fsm_space_avail_to_cat`).
pub fn avail_to_category(free_bytes: usize) -> u8 {
    if free_bytes >= MAX_REQUEST_BYTES {
        return 255;
    }
    (free_bytes / CAT_STEP).min(254) as u8
}

/// The least category a page must have to hold `need_bytes` (`fsm_space_needed_to_cat`).
pub fn needed_to_category(need_bytes: usize) -> u8 {
    if need_bytes > MAX_REQUEST_BYTES {
        return 255;
    }
    need_bytes.div_ceil(CAT_STEP).clamp(1, 255) as u8
}

/// Where a heap block's byte lives: FSM block and byte offset within the page.
pub fn location(heap_block: BlockNumber) -> (BlockNumber, usize) {
    (BlockNumber(heap_block.0 / SLOTS_PER_PAGE), PAGE_HEADER_SIZE + (heap_block.0 % SLOTS_PER_PAGE) as usize)
}

/// Initializes an empty FSM page (every category 0).
pub fn init_page(p: &mut [u8]) {
    page::init(p, 0);
    page::set_lower(p, BLCKSZ as u16);
}

/// Whether a page read from disk (checksum already verified) is a usable FSM page.
fn is_fsm_page(p: &[u8]) -> bool {
    usize::from(page::lower(p)) == BLCKSZ && usize::from(page::upper(p)) == BLCKSZ
}

/// The free space map of one heap relation (one per relation: it owns the summary).
pub struct FreeSpaceMap {
    /// The heap relation's file node (the map is its `_fsm` fork).
    rel: Oid,
    /// Serializes extending the fork.
    extend_lock: Mutex<()>,
    /// Per FSM page, an upper bound of its largest category; `None` until read.
    summary: Mutex<Vec<Option<u8>>>,
}

impl FreeSpaceMap {
    pub fn new(rel: Oid) -> FreeSpaceMap {
        FreeSpaceMap { rel, extend_lock: Mutex::new(()), summary: Mutex::new(Vec::new()) }
    }

    fn tag(&self, fsm_block: BlockNumber) -> BufferTag {
        BufferTag { rel: self.rel, fork: Fork::Fsm, block: fsm_block }
    }

    /// Pins an existing FSM page for reading; `None` when the fork does not reach it or the
    /// page is corrupt (treated as all zeros).
    fn read_page<'p>(&self, pool: &'p BufferPool, fsm_block: BlockNumber) -> Result<Option<Buffer<'p>>> {
        if fsm_block.0 >= pool.smgr().nblocks(self.rel, Fork::Fsm)? {
            return Ok(None);
        }
        match pool.read(self.tag(fsm_block), None) {
            Ok(b) => Ok(Some(b)),
            Err(Error::Corrupted { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Pins an FSM page for writing: extends the fork up to it, and replaces a corrupt page
    /// with a zeroed one (initialized by the caller under the lock).
    fn write_page<'p>(&self, pool: &'p BufferPool, fsm_block: BlockNumber) -> Result<Buffer<'p>> {
        if fsm_block.0 >= pool.smgr().nblocks(self.rel, Fork::Fsm)? {
            let _ext = self.extend_lock.lock();
            while fsm_block.0 >= pool.smgr().nblocks(self.rel, Fork::Fsm)? {
                drop(pool.extend(self.rel, Fork::Fsm, None)?);
            }
        }
        match pool.read(self.tag(fsm_block), None) {
            Ok(b) => Ok(b),
            Err(Error::Corrupted { .. }) => pool.new_page(self.tag(fsm_block), None),
            Err(e) => Err(e),
        }
    }

    /// The category recorded for `heap_block` (0 when unknown).
    pub fn get(&self, pool: &BufferPool, heap_block: BlockNumber) -> Result<u8> {
        let (fsm_block, byte) = location(heap_block);
        let Some(buf) = self.read_page(pool, fsm_block)? else { return Ok(0) };
        let g = buf.read();
        Ok(if is_fsm_page(&g.0) { g.0[byte] } else { 0 })
    }

    /// Records that `heap_block` has `free_bytes` free.
    pub fn record(&self, pool: &BufferPool, heap_block: BlockNumber, free_bytes: usize) -> Result<()> {
        self.set_many(pool, &[(heap_block, avail_to_category(free_bytes))])
    }

    /// Sets the categories of many heap pages (VACUUM, rebuilds), locking each FSM page once.
    /// Entries are `(heap block, category)`, in any order.
    pub fn set_many(&self, pool: &BufferPool, entries: &[(BlockNumber, u8)]) -> Result<()> {
        let mut sorted = entries.to_vec();
        sorted.sort_by_key(|&(b, _)| b);
        for group in sorted.chunk_by(|a, b| location(a.0).0 == location(b.0).0) {
            let (fsm_block, _) = location(group[0].0);
            let buf = self.write_page(pool, fsm_block)?;
            let mut g = buf.write();
            if page::is_new(&g.0) || !is_fsm_page(&g.0) {
                init_page(&mut g.0);
            }
            let mut max_written = 0u8;
            for &(b, cat) in group {
                g.0[location(b).1] = cat;
                max_written = max_written.max(cat);
            }
            buf.mark_dirty();
            let mut s = self.summary.lock();
            if let Some(Some(bound)) = s.get_mut(fsm_block.0 as usize) {
                *bound = (*bound).max(max_written);
            }
        }
        Ok(())
    }

    /// A heap page whose recorded category is at least `min_category`, lowest block first;
    /// `None` when the map knows of none. Never returns a block at or past the heap's end.
    pub fn search(&self, pool: &BufferPool, min_category: u8) -> Result<Option<BlockNumber>> {
        let heap_nblocks = pool.smgr().nblocks(self.rel, Fork::Main)?;
        let fsm_pages = pool.smgr().nblocks(self.rel, Fork::Fsm)?;
        for p in 0..fsm_pages.min(heap_nblocks.div_ceil(SLOTS_PER_PAGE)) {
            let bound = self.summary.lock().get(p as usize).copied().flatten();
            if bound.is_some_and(|m| m < min_category) {
                continue;
            }
            // A corrupt page counts as zeros; its bound stays unknown until it is rewritten.
            let Some(buf) = self.read_page(pool, BlockNumber(p))? else { continue };
            let g = buf.read();
            if page::is_new(&g.0) || !is_fsm_page(&g.0) {
                self.set_bound(p, 0);
                continue;
            }
            let base = p * SLOTS_PER_PAGE;
            let live = (heap_nblocks - base).min(SLOTS_PER_PAGE) as usize;
            let slots = &g.0[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + live];
            self.set_bound(p, slots.iter().copied().max().unwrap_or(0));
            if let Some(i) = slots.iter().position(|&c| c >= min_category) {
                return Ok(Some(BlockNumber(base + i as u32)));
            }
        }
        Ok(None)
    }

    /// Records the exact maximum of FSM page `p` (called under its content lock).
    fn set_bound(&self, p: u32, max: u8) {
        let mut s = self.summary.lock();
        let i = p as usize;
        if s.len() <= i {
            s.resize(i + 1, None);
        }
        s[i] = Some(max);
    }

    /// Forgets heap pages at or past `new_heap_nblocks`: zeroes their slots on the last
    /// remaining FSM page and cuts the fork after it. Not WAL-logged (see the module doc).
    pub fn truncate(&self, pool: &BufferPool, new_heap_nblocks: u32) -> Result<()> {
        let _ext = self.extend_lock.lock();
        let old_pages = pool.smgr().nblocks(self.rel, Fork::Fsm)?;
        let keep = new_heap_nblocks.div_ceil(SLOTS_PER_PAGE);
        let tail = new_heap_nblocks % SLOTS_PER_PAGE;
        if tail != 0 && keep <= old_pages {
            if let Some(buf) = self.read_page(pool, BlockNumber(keep - 1))? {
                let mut g = buf.write();
                if is_fsm_page(&g.0) {
                    g.0[PAGE_HEADER_SIZE + tail as usize..].fill(0);
                    buf.mark_dirty();
                }
            }
        }
        if keep < old_pages {
            pool.drop_relation_buffers(self.rel, Some(Fork::Fsm), BlockNumber(keep))?;
            pool.smgr().truncate(self.rel, Fork::Fsm, keep)?;
        }
        self.summary.lock().truncate(keep as usize);
        Ok(())
    }

    /// Human rendering of one FSM page (`settle inspect`): the heap blocks with a category.
    pub fn describe_page(p: &[u8], fsm_block: BlockNumber) -> String {
        if page::is_new(p) || !is_fsm_page(p) {
            return format!("free space map block {fsm_block}: new or unusable (all zero)");
        }
        let base = fsm_block.0 * SLOTS_PER_PAGE;
        let mut lines = vec![format!("free space map block {fsm_block}")];
        for (i, &c) in p[PAGE_HEADER_SIZE..].iter().enumerate() {
            if c != 0 {
                lines.push(format!(
                    "  heap block {}: category {c} (>= {} bytes)",
                    base + i as u32,
                    usize::from(c) * CAT_STEP
                ));
            }
        }
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests;
