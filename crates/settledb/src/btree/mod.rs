//! The B-tree index access method: PostgreSQL's nbtree (`src/backend/access/nbtree/README`),
//! that is a Lehman & Yao B-link tree with heap TIDs as the final key column (PostgreSQL 12's
//! "heapkeyspace"), rebuilt over settledb's pages, buffer pool and WAL.
//!
//! # Shape
//!
//! ```text
//!   block 0: metapage (root block, root level)
//!
//!   level 2                      [ -inf | k40 ]                      <- root
//!                               /             \
//!   level 1        [ -inf | k10 | k20 ]  ->  [ hk: -  | -inf | k50 ]
//!                  /      |      \              ...
//!   level 0   [hk k10| a..]<->[hk k20| k10..]<->[hk k40| k20..]<-> ... <->[ k90.. ]  leaves
//! ```
//!
//! Every page but the rightmost of its level starts with a *high key* (item 1): every key on
//! the page is `<` it, and it equals the separator that points to the right sibling in the
//! parent. Pages of one level are doubly linked (`prev`, `next` in the 16-byte special area).
//! An internal page's first item is "minus infinity": its child holds everything below the
//! second item's separator. Entries are unique by (key, heap TID): the TID is the tiebreaker,
//! so duplicates of a key are ordered by TID and an entry is found exactly by both.
//!
//! Keys are stored in an order-preserving encoding ([`keys`]): comparisons are `memcmp`, and
//! index-only scans decode the values back.
//!
//! # The Lehman & Yao invariant and locking
//!
//! A page's key range can only move *right*: a split moves the upper half of a page into a
//! new right sibling, and the high key tells a searcher that arrived late (it read the parent
//! before the split) to follow the right link. So:
//!
//! * readers hold one shared lock at a time: lock, copy what they need, release, lock the
//!   next page. A descent that finds its key `>=` a page's high key moves right.
//! * writers lock bottom-up and left-to-right: the leaf, its new right sibling, the old right
//!   sibling (to fix its `prev` link), then the parent, found again from the descent stack and
//!   searched for the downlink to the split page, moving right if the parent split too. Since
//!   readers never wait while holding a lock, and writers only ever wait for pages above or to
//!   the right of those they hold, there is no deadlock.
//! * a scan remembers where it is by key: forward scans copy one leaf's matching entries
//!   under its lock together with its `next` link (entries that a later split moves right have
//!   already been copied); backward scans search again for the predecessor of the lowest key
//!   range they have covered. Either way a concurrent split never makes an entry disappear or
//!   repeat.
//!
//! # A leaf split
//!
//! ```text
//!  before:   P: [ ... | sepL->L | sepS->S | ... ]
//!            L: [hk sepS | a b c d e f]  <->  S
//!  insert x, L is full:
//!  after:    P: [ ... | sepL->L | sepR->R | sepS->S | ... ]     sepR = first key of R,
//!            L: [hk sepR | a b c]  <->  R: [hk sepS | d x e f]  <->  S    truncated
//! ```
//!
//! The separator is made from the first right key, without its heap TID when the keys alone
//! tell the halves apart (PostgreSQL's suffix truncation, restricted to the TID). A split of
//! the root makes a new root with two downlinks and updates the metapage. A split of the
//! rightmost leaf caused by an insert at its end leaves the left page 90% full (fillfactor),
//! as PostgreSQL does, so ascending inserts leave well-filled pages.
//!
//! # WAL
//!
//! One record per insert, covering every page it changed ([`wal`]): a plain leaf insert is a
//! small delta (offset + tuple, full-page image if the page's first change since the
//! checkpoint); an insert that split pages logs every changed page (left, right, the old right
//! sibling, each parent level, a new root, the metapage) as a `will_init` image. All changed
//! pages stay locked until the record is inserted and its end LSN stamped on them, so no
//! reader sees a half-done split and redo never needs PostgreSQL's incomplete-split repair.
//! Bulk delete and simple deletion log the offsets removed; page deletion and index build log
//! images. LP_DEAD hints are not logged (below).
//!
//! # LP_DEAD hints and simple deletion
//!
//! An index scan's caller that finds an entry's whole HOT chain dead to every snapshot (the
//! row API does, through `heap::hot::chain_dead_to_all`) hands it back at the end of the scan
//! to [`BtreeIndex::kill_entries`], PostgreSQL's `_bt_killitems`: the entry is found again by
//! (key, heap TID), moving right if a split moved it, and its line pointer is marked LP_DEAD,
//! storage kept, under the leaf's exclusive lock (one lock per leaf for all its entries;
//! entries no longer there are skipped). Scans in both directions and unique checks skip
//! LP_DEAD entries; searches still compare them, since they stay in key order.
//!
//! The mark is a *hint*: never WAL-logged, and the page is marked dirty for it only when the
//! page's LSN is after the checkpoint's redo pointer (the heap's hint-bit rule): a page with no
//! full-page image since then must not be written for a hint alone, since a torn write could
//! not be repaired. A hint may therefore be lost, never wrongly gained: replay and crashes only
//! ever drop hints.
//!
//! An insert that finds its leaf full first removes the leaf's LP_DEAD entries (*simple
//! deletion*, `_bt_delitems_delete`; a DELETE record with their offsets, replayed exactly as
//! VACUUM's) and retries on the same page; it splits only when that freed too little. The
//! removed heap TIDs are dead to everyone, so VACUUM's bulk delete merely never finds them;
//! bulk delete itself removes LP_DEAD entries like any dead entry. [`check`] checks the order
//! of LP_DEAD entries but leaves them out of the entries it returns. See [`kill`].
//!
//! # Deletion (VACUUM)
//!
//! [`IndexAm::bulk_delete`] reads every block of the index once, in physical order
//! ([`vacuum`], PostgreSQL's `btvacuumscan`), each leaf under its exclusive lock: it asks the
//! callback about all of a leaf's TIDs at once and removes the dead entries by one compaction
//! of the page. A split during the scan may move entries to a block already passed; the scan's
//! *vacuum cycle ID*, stamped by such splits, tells it to follow those right links
//! ([`cycle`]). Several threads can share one bulk delete, each taking chunks of blocks
//! ([`BtreeIndex::begin_bulk_delete`], [`BtreeIndex::bulk_delete_parallel`]).
//!
//! A leaf left empty that is neither the root nor the rightmost child of its parent is deleted
//! ([`pagedel`]): its left sibling, itself, its right sibling and its parent are locked in that
//! order (left-to-right, then up) and changed in one record — the parent's downlink to the page
//! is redirected to the right sibling, whose own downlink is removed (the right sibling takes
//! over the key range), the siblings are linked to each other, and the page is marked DELETED
//! with the next full XID as its *safe XID*. It keeps its `next` link, so a searcher that was
//! on its way moves right. Once the safe XID precedes `oldest_xmin_full()` no scan can still
//! hold its block number, and the next scan that meets it (or the bulk delete that deleted it,
//! at its end) puts it on the in-memory free list that splits take pages from.
//!
//! The same scan counts pages, entries, deleted and reusable pages, so [`IndexAm::cleanup`]
//! after a bulk delete reads nothing. As in PostgreSQL, a VACUUM that deleted nothing from the
//! index skips the cleanup scan too, unless the last one left more than 5% of the index deleted
//! but not yet reusable (the count is kept in memory, not in the metapage, so the first VACUUM
//! after opening the database scans).
//!
//! # Not implemented (simplified versus PostgreSQL)
//!
//! * Internal pages are never deleted (multi-level deletion), and HALF_DEAD never persists:
//!   the two stages of PostgreSQL's page deletion happen in one record.
//! * No fast root, no deduplication (posting lists), no suffix truncation of key columns
//!   (only of the heap TID), no free space map (the free list is in memory and rebuilt by
//!   VACUUM's scans), no parallel build. Blocks extended but never written (a crash before the
//!   split's record) are skipped by VACUUM, not recycled: the free list cannot tell them from a
//!   block another split has just extended and not yet locked. Simple deletion removes only
//!   entries already marked LP_DEAD (no bottom-up deletion, no heap visit to find more),
//!   unique checks do not set LP_DEAD, and a split does not carry LP_DEAD marks (it runs only
//!   after simple deletion removed them).
//! * Recycling is protected by the XID horizon, so scans must run under a registered
//!   snapshot or inside a transaction, as in PostgreSQL.
//! * `check` expects a quiescent index.

#[doc(hidden)]
pub mod build;
pub mod check;
pub mod cycle;
pub mod insert;
pub mod keys;
pub mod kill;
pub mod page;
pub mod pagedel;
pub mod scan;
pub(crate) mod search;
pub mod vacuum;
pub mod wal;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod vacuum_tests;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::sync::{RwLockReadGuard, RwLockWriteGuard};

use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::heap::tuple::{Type, Value};
use crate::heap::HeapEnv;
use crate::index::{BulkDeleteStats, IndexAm, IndexBulkDelete, IndexEntry, KeyBound, ScanDirection, UniqueCheck};
use crate::page::{self as pg, PageBuf};
use crate::types::{BlockNumber, BufferTag, Fork, OffsetNumber, Oid, Tid, Xid};
use crate::wal::{BlockRef, RecordBuilder, Rmgr};
use page::{self as bp, BTP_META, P_NONE};

pub use scan::BtreeScan;

/// `BTREE_MAGIC`, as PostgreSQL's metapage carries it.
pub const BTREE_MAGIC: u32 = 0x053162;
pub const BTREE_VERSION: u32 = 4;
/// Leaf fillfactor of a bulk build and of rightmost splits (PostgreSQL's default 90).
pub const LEAF_FILLFACTOR: usize = 90;
/// Internal-page fillfactor of a bulk build (`BTREE_NONLEAF_FILLFACTOR`).
pub const NONLEAF_FILLFACTOR: usize = 70;

/// A share-locked, pinned page. The guard is declared first so it is released before the pin.
pub(crate) struct RPage<'a> {
    pub g: RwLockReadGuard<'a, PageBuf>,
    pub buf: Buffer<'a>,
}

/// An exclusively locked, pinned page.
pub(crate) struct WPage<'a> {
    pub g: RwLockWriteGuard<'a, PageBuf>,
    pub buf: Buffer<'a>,
}

/// The metapage's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub root: u32,
    pub level: u32,
}

/// A B-tree index: one relation fork of B-tree pages.
pub struct BtreeIndex {
    oid: Oid,
    name: String,
    relfilenode: Oid,
    key_types: Vec<Type>,
    unique: bool,
    column_names: Vec<String>,
    /// Deleted pages known to be safe to reuse (filled by `cleanup`).
    free_pages: Mutex<Vec<u32>>,
    /// Deleted pages that were not yet safe to reuse at the last cleanup scan, or `u32::MAX`
    /// when no cleanup scan has run since the index was opened (PostgreSQL keeps this count,
    /// `btm_last_cleanup_num_delpages`, in the metapage; see [`vacuum::cleanup`]).
    deleted_at_cleanup: AtomicU32,
    /// The vacuum cycle ID of the bulk delete running on the index, 0 when none (see [`cycle`]).
    vacuum_cycle: AtomicU16,
    /// Bumped whenever the metapage is locked for writing (see [`BtreeIndex::meta`]).
    meta_version: AtomicU64,
    /// The metapage as last read: `(version & 0xFF_FFFF) << 40 | level << 32 | root`, or
    /// `u64::MAX` when nothing is cached.
    meta_cache: AtomicU64,
}

impl BtreeIndex {
    pub fn new(oid: Oid, name: &str, relfilenode: Oid, key_types: Vec<Type>, unique: bool) -> BtreeIndex {
        let column_names = (1..=key_types.len()).map(|i| format!("key{i}")).collect();
        BtreeIndex {
            oid,
            name: name.to_string(),
            relfilenode,
            key_types,
            unique,
            column_names,
            free_pages: Mutex::new(Vec::new()),
            deleted_at_cleanup: AtomicU32::new(u32::MAX),
            vacuum_cycle: AtomicU16::new(0),
            meta_version: AtomicU64::new(0),
            meta_cache: AtomicU64::new(u64::MAX),
        }
    }

    /// Names the key columns for error messages (`Key (aid)=(5) already exists.`).
    pub fn with_column_names(mut self, names: Vec<String>) -> BtreeIndex {
        if names.len() == self.key_types.len() {
            self.column_names = names;
        }
        self
    }

    pub fn oid(&self) -> Oid {
        self.oid
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn relfilenode(&self) -> Oid {
        self.relfilenode
    }
    pub fn is_unique(&self) -> bool {
        self.unique
    }
    pub fn key_types(&self) -> &[Type] {
        &self.key_types
    }

    pub(crate) fn tag(&self, block: u32) -> BufferTag {
        BufferTag { rel: self.relfilenode, fork: Fork::Main, block: BlockNumber(block) }
    }

    pub(crate) fn corrupt(&self, block: u32, detail: impl Into<String>) -> Error {
        Error::corrupted(self.relfilenode, BlockNumber(block), detail)
    }

    /// Share-locks a page. Its structure was validated when it came in from disk (pages changed
    /// in memory are trusted); a never-written page is not a B-tree page. Hot path.
    pub(crate) fn read_page<'a>(&self, env: &HeapEnv<'a>, block: u32) -> Result<RPage<'a>> {
        let buf = env.pool.read_validated(self.tag(block), None, bp::validate)?;
        let g = buf.read();
        if pg::is_new(&g.0) {
            return Err(self.corrupt(block, "page is empty (never written) but is linked into the index"));
        }
        Ok(RPage { g, buf })
    }

    /// Exclusively locks a page (validated as for [`BtreeIndex::read_page`]).
    pub(crate) fn write_page<'a>(&self, env: &HeapEnv<'a>, block: u32) -> Result<WPage<'a>> {
        let buf = env.pool.read_validated(self.tag(block), None, bp::validate)?;
        let g = buf.write();
        if block == 0 {
            // Whatever is cached of the metapage may be about to change.
            self.meta_version.fetch_add(1, Ordering::AcqRel);
        }
        if pg::is_new(&g.0) {
            return Err(self.corrupt(block, "page is empty (never written) but is linked into the index"));
        }
        Ok(WPage { g, buf })
    }

    /// The metapage (root block and level). Cached in memory as PostgreSQL caches it in the
    /// relcache: the cached copy is used only while no writer has locked the metapage since it
    /// was read (it is read under the page's shared lock, and writers bump the version under
    /// the exclusive lock). A root split changes the metapage; a descent that started from
    /// the old root just before is still correct (Lehman & Yao: the old root is the leftmost
    /// page of its level, and moving right reaches every key). Hot path: one atomic load.
    pub fn meta(&self, env: &HeapEnv<'_>) -> Result<Meta> {
        let v = self.meta_version.load(Ordering::Acquire) & 0xFF_FFFF;
        let c = self.meta_cache.load(Ordering::Acquire);
        if c != u64::MAX && c >> 40 == v {
            return Ok(Meta { root: c as u32, level: ((c >> 32) & 0xFF) as u32 });
        }
        let pg = self.read_page(env, 0)?;
        let v = self.meta_version.load(Ordering::Acquire) & 0xFF_FFFF;
        let m = self.decode_meta(&pg.g.0)?;
        if m.level < 256 {
            self.meta_cache.store(v << 40 | u64::from(m.level) << 32 | u64::from(m.root), Ordering::Release);
        }
        Ok(m)
    }

    pub(crate) fn decode_meta(&self, p: &[u8]) -> Result<Meta> {
        decode_meta(p).map_err(|d| self.corrupt(0, d))
    }

    /// Creates the metapage (block 0) in an existing empty fork file, WAL-logged.
    pub fn create_empty(&self, env: &HeapEnv<'_>) -> Result<()> {
        let n = env.pool.smgr().nblocks(self.relfilenode, Fork::Main)?;
        if n != 0 {
            return Err(Error::invalid(format!("index \"{}\" is not empty ({n} blocks)", self.name)));
        }
        let buf = env.pool.extend(self.relfilenode, Fork::Main, None)?;
        if buf.block().0 != 0 {
            return Err(Error::invalid(format!(
                "index \"{}\" metapage would land in block {}",
                self.name,
                buf.block()
            )));
        }
        let mut w = WPage { g: buf.write(), buf };
        self.meta_version.fetch_add(1, Ordering::AcqRel);
        init_meta(&mut w.g.0, Meta { root: P_NONE, level: 0 });
        self.log_images(env, wal::XLOG_BTREE_NEWPAGES, &mut [&mut w])
    }

    /// Number of pages in the index.
    pub fn num_pages(&self, env: &HeapEnv<'_>) -> Result<u32> {
        env.pool.smgr().nblocks(self.relfilenode, Fork::Main)
    }

    /// Bulk build from unsorted (key, tid) entries into an empty index; see [`build`].
    pub fn build(&self, env: &HeapEnv<'_>, entries: Vec<(Vec<Value>, Tid)>) -> Result<()> {
        build::build(self, env, entries, true)
    }

    /// An empty gathering of entries for [`BtreeIndex::build_from`]: the cheap way to bulk
    /// build from millions of rows.
    pub fn new_build_keys(&self) -> build::BuildKeys {
        build::BuildKeys::new(&self.key_types)
    }

    /// [`BtreeIndex::build`] from entries gathered as [`build::BuildKeys`].
    pub fn build_from(&self, env: &HeapEnv<'_>, keys: build::BuildKeys) -> Result<()> {
        build::build_keys(self, env, keys, true)
    }

    /// [`BtreeIndex::build_from`] of a unique index without the duplicate check: the entries
    /// of a table VACUUM FULL rewrote, which index every version some snapshot may still see,
    /// so one key may have several versions (all but one dead to the newest snapshots). The
    /// old index held the table unique; inserts check uniqueness against the heap as always.
    pub fn rebuild_from(&self, env: &HeapEnv<'_>, keys: build::BuildKeys) -> Result<()> {
        build::build_keys(self, env, keys, false)
    }

    /// Inserts one entry; see [`insert`].
    pub fn insert(&self, env: &HeapEnv<'_>, key: &[Value], tid: Tid, unique: Option<&dyn UniqueCheck>) -> Result<()> {
        insert::insert(self, env, key, tid, unique)
    }

    /// Range scan over `lo <= key <= hi` on the key prefix each bound names; see [`scan`].
    pub fn scan<'a>(
        &'a self,
        env: &HeapEnv<'a>,
        lo: KeyBound,
        hi: KeyBound,
        dir: ScanDirection,
    ) -> Result<BtreeScan<'a>> {
        BtreeScan::new(self, env, lo, hi, dir)
    }

    /// Marks the leaf entries `dead` LP_DEAD, a hint that their heap chains are dead to every
    /// snapshot, so scans skip them and a full leaf reclaims them before it splits; see [`kill`].
    /// Entries no longer in the index are skipped. Returns how many were marked.
    pub fn kill_entries(&self, env: &HeapEnv<'_>, dead: &[IndexEntry]) -> Result<usize> {
        kill::kill_entries(self, env, dead, None)
    }

    /// [`BtreeIndex::kill_entries`], marking only the entries for whose heap TID `still_dead`
    /// answers true; it is asked under the leaf's exclusive lock (it may read the heap, not this
    /// index), which rules out a slot reused since the caller's verdict.
    pub fn kill_entries_checked(
        &self,
        env: &HeapEnv<'_>,
        dead: &[IndexEntry],
        still_dead: &mut dyn FnMut(Tid) -> Result<bool>,
    ) -> Result<usize> {
        kill::kill_entries(self, env, dead, Some(still_dead))
    }

    /// Verifies the structure; see [`check`].
    pub fn check(&self, env: &HeapEnv<'_>) -> Result<(Vec<String>, Vec<IndexEntry>)> {
        check::check(self, env)
    }

    /// Logs every page in `pages` as a `will_init` image in one record, then stamps the
    /// record's end LSN on them and marks them dirty. The caller holds their exclusive locks.
    pub(crate) fn log_images(&self, env: &HeapEnv<'_>, info: u8, pages: &mut [&mut WPage<'_>]) -> Result<()> {
        let blocks = pages
            .iter()
            .enumerate()
            .map(|(i, w)| BlockRef {
                keep_data: false,
                id: i as u8,
                tag: self.tag(w.buf.block().0),
                will_init: true,
                page: None,
                data: wal::image_data(&w.g.0),
            })
            .collect();
        let lsn = env.wal.insert(&RecordBuilder {
            toplevel_xid: crate::types::Xid::INVALID,
            rmgr: Rmgr::Btree,
            info,
            xid: Xid::INVALID,
            blocks,
            main_data: vec![],
        })?;
        for w in pages.iter_mut() {
            pg::set_lsn(&mut w.g.0, lsn);
            w.buf.mark_dirty();
        }
        Ok(())
    }

    /// A page for a split: a recycled deleted page if one is safe, else a new block.
    ///
    /// A block on the free list may have been reused since it was put there (VACUUM adds the
    /// reusable pages its scan met when the scan ends, and a split may have taken one of them
    /// meanwhile), so it may be a live page another writer holds, perhaps waiting for a page
    /// this split holds: its lock is only tried, as PostgreSQL's `_bt_allocbuf` does, and a
    /// block that is locked or no longer reusable is dropped from the list.
    pub(crate) fn alloc_page<'a>(&self, env: &HeapEnv<'a>) -> Result<WPage<'a>> {
        loop {
            let Some(b) = self.free_pages.lock().pop() else { break };
            let buf = env.pool.read_validated(self.tag(b), None, bp::validate)?;
            let Some(g) = buf.try_write() else { continue };
            if vacuum::is_recyclable(&g.0, env.xact.oldest_xmin_full()) {
                return Ok(WPage { g, buf });
            }
        }
        let buf = env.pool.extend(self.relfilenode, Fork::Main, None)?;
        let g = buf.write();
        Ok(WPage { g, buf })
    }

    /// How many recycled pages are waiting on the free list (tests, stats).
    pub fn free_list_len(&self) -> usize {
        self.free_pages.lock().len()
    }

    /// Adds reusable deleted pages to the free list, once each; splits take the lowest first.
    pub(crate) fn add_free_pages(&self, pages: Vec<u32>) {
        if pages.is_empty() {
            return;
        }
        let mut list = self.free_pages.lock();
        list.extend(pages);
        list.sort_unstable_by(|a, b| b.cmp(a));
        list.dedup();
    }

    /// Starts a bulk delete that one or several threads work on ([`vacuum::BulkDelete`]):
    /// `work` from each, then `finish`. Takes the index's vacuum cycle ID until it is dropped.
    pub fn begin_bulk_delete(&self, env: &HeapEnv<'_>) -> Result<vacuum::BulkDelete<'_>> {
        vacuum::BulkDelete::begin(self, env)
    }

    /// [`IndexAm::bulk_delete`] by `workers` threads (this one and `workers - 1` spawned ones)
    /// sharing one scan of the index, each calling `is_dead`.
    pub fn bulk_delete_parallel(
        &self,
        env: &HeapEnv<'_>,
        is_dead: &(dyn Fn(&[Tid], &mut [bool]) + Sync),
        workers: usize,
        stats: &mut BulkDeleteStats,
    ) -> Result<()> {
        vacuum::bulk_delete_parallel(self, env, is_dead, workers, stats)
    }

    /// Renders a key of this index as PostgreSQL's unique-violation detail does: `aid)=(5`.
    pub(crate) fn render_key(&self, key: &[Value]) -> String {
        format!("{})=({}", self.column_names.join(", "), keys::render_values(key))
    }
}

/// Lays out a metapage: flags META, one item with magic, version, root, level, fast root,
/// fast level (all u32).
pub fn init_meta(p: &mut [u8], m: Meta) {
    bp::init(p, 0, BTP_META);
    let mut item = Vec::with_capacity(24);
    for v in [BTREE_MAGIC, BTREE_VERSION, m.root, m.level, m.root, m.level] {
        item.extend_from_slice(&v.to_le_bytes());
    }
    bp::insert_item(p, OffsetNumber(1), &item);
}

/// Decodes a validated metapage.
pub fn decode_meta(p: &[u8]) -> std::result::Result<Meta, String> {
    if bp::flags(p) & BTP_META == 0 || bp::max_offset(p) != 1 {
        return Err("block 0 is not a B-tree metapage".into());
    }
    let it = bp::item(p, OffsetNumber(1));
    if it.len() < 16 {
        return Err("metapage item too short".into());
    }
    let rd = |i: usize| u32::from_le_bytes([it[i], it[i + 1], it[i + 2], it[i + 3]]);
    if rd(0) != BTREE_MAGIC || rd(4) != BTREE_VERSION {
        return Err(format!("metapage magic {:#x} version {}", rd(0), rd(4)));
    }
    Ok(Meta { root: rd(8), level: rd(12) })
}

impl IndexAm for BtreeIndex {
    fn bulk_delete(
        &self,
        env: &HeapEnv<'_>,
        is_dead: &mut dyn FnMut(&[Tid], &mut [bool]),
        stats: &mut BulkDeleteStats,
    ) -> Result<()> {
        vacuum::bulk_delete(self, env, is_dead, stats)
    }

    fn begin_bulk_delete<'a>(&'a self, env: &HeapEnv<'_>) -> Result<Box<dyn IndexBulkDelete + 'a>> {
        Ok(Box::new(vacuum::BulkDelete::begin(self, env)?))
    }

    fn cleanup(&self, env: &HeapEnv<'_>, stats: &mut BulkDeleteStats, bulk_deleted: bool) -> Result<bool> {
        vacuum::cleanup(self, env, stats, bulk_deleted)
    }
}

/// Names of the set B-tree page flags.
fn flag_names(f: u16) -> String {
    let names = [
        (bp::BTP_LEAF, "LEAF"),
        (bp::BTP_ROOT, "ROOT"),
        (bp::BTP_DELETED, "DELETED"),
        (bp::BTP_META, "META"),
        (bp::BTP_HALF_DEAD, "HALF_DEAD"),
        (bp::BTP_SPLIT_END, "SPLIT_END"),
        (bp::BTP_INCOMPLETE_SPLIT, "INCOMPLETE_SPLIT"),
    ];
    names.iter().filter(|(b, _)| f & b != 0).map(|(_, n)| *n).collect::<Vec<_>>().join("|")
}

/// A page rendered like pageinspect's `bt_page_stats` + `bt_page_items`: the header, the
/// special area, then one line per item (offset, ctid or downlink, length, key bytes in hex).
/// Never panics, even on garbage.
pub fn describe_page(page: &[u8]) -> String {
    let mut s = pg::describe_header(page);
    s.push('\n');
    if let Err(e) = bp::validate(page, Oid(0), BlockNumber(0)) {
        let _ = writeln!(s, "not a valid B-tree page: {e}");
        return s;
    }
    let f = bp::flags(page);
    let _ = writeln!(
        s,
        "btpo_prev: {}  btpo_next: {}  btpo_level: {}  btpo_flags: {f:#06x} ({})  btpo_cycleid: {}",
        bp::prev(page),
        bp::next(page),
        bp::level(page),
        flag_names(f),
        bp::cycle_id(page)
    );
    if f & BTP_META != 0 {
        match decode_meta(page) {
            Ok(m) => {
                let _ = writeln!(
                    s,
                    "meta: magic {BTREE_MAGIC:#x} version {BTREE_VERSION} root {} level {}",
                    m.root, m.level
                );
            }
            Err(e) => {
                let _ = writeln!(s, "meta: {e}");
            }
        }
        return s;
    }
    if f & bp::BTP_DELETED != 0 {
        let _ = writeln!(s, "deleted, safe xid: {}", vacuum::safe_xid(page).map_or("?".into(), |x| x.0.to_string()));
        return s;
    }
    s.push_str(" itemoffset | ctid / downlink      | itemlen | data\n");
    for o in 1..=bp::max_offset(page) {
        let off = OffsetNumber(o);
        let t = bp::item(page, off);
        let is_pivot = !bp::is_leaf(page) || (off == bp::P_HIKEY && !bp::is_rightmost(page));
        let (what, key, tid) = if is_pivot {
            let (k, tid) = bp::pivot_key(t);
            let what = if off == bp::P_HIKEY && !bp::is_rightmost(page) {
                "high key".to_string()
            } else {
                format!("-> block {}", bp::child(t))
            };
            (what, k, tid)
        } else {
            let (k, tid) = bp::leaf_key(t);
            let dead = if bp::is_dead(page, off) { " DEAD" } else { "" };
            (format!("{tid}{dead}"), k, None)
        };
        let mut hex = String::with_capacity(key.len() * 3);
        for b in key {
            let _ = write!(hex, "{b:02x} ");
        }
        let tid = tid.map_or(String::new(), |t| format!(" tid {t}"));
        let _ = writeln!(s, "{o:>11} | {what:<20} | {:>7} | {}{tid}", t.len(), hex.trim_end());
    }
    s
}
