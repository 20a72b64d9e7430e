//! The heap access method: tuple versions on slotted pages (PostgreSQL's `heapam.c`,
//! `hio.c`, `README.HOT`).
//!
//! Every row version is a tuple with an `xmin` (the inserting transaction) and an `xmax` (the
//! deleting or updating one). An update never overwrites: it stamps `xmax` on the old version
//! and writes a new one, linked from the old by `t_ctid`. Which versions a transaction sees is
//! decided by [`visibility`]; dead versions are removed by [`prune`] (opportunistically, when a
//! page is read and short of space) and later by VACUUM.
//!
//! ```text
//!  t_ctid chain of one row updated twice (the last update HOT, on the same page):
//!
//!   (0,1) xmin 100 xmax 105 ctid (7,3)   --non-HOT update-->  (7,3) xmin 105 xmax 110 ctid (7,4) HOT_UPDATED
//!                                                                      |
//!                                         (7,4) xmin 110 xmax 0 ctid (7,4) HEAP_ONLY  <-----+
//! ```
//!
//! # Operations and their locks
//!
//! * insert: find a page with room (the relation's target block, then a page the free space
//!   map offers, else extend; see `find_target`), exclusive-lock it, add the tuple, WAL-log
//!   INSERT, stamp the page LSN.
//! * update/delete: exclusive-lock the old tuple's page; ask [`visibility::satisfies_update`];
//!   if another running transaction holds the row, unlock, wait for it, and retry; if a
//!   committed one changed it, READ COMMITTED follows `t_ctid` to the newest version and
//!   re-applies the change there (PostgreSQL's EvalPlanQual), REPEATABLE READ fails with a
//!   serialization error. A new version that fits on the same page and changes no indexed
//!   column is a HOT update; otherwise it goes to another page, and both pages are locked in
//!   block order so two updaters cannot deadlock on page locks.
//! * fetch/scan: shared lock, visibility test, copy out the values, unlock.
//!
//! # WAL
//!
//! Every page change is logged (see [`wal`]) while the exclusive lock is held, and the page
//! LSN is set to the record's end before the lock is released, so the buffer pool's
//! WAL-before-data rule holds.
//!
//! # The visibility map and the free space map
//!
//! A change to a page marked `PD_ALL_VISIBLE` (insert, multi-insert, either page of an update,
//! delete) first clears the page's bits in the relation's [`crate::vm`] (a VM_CLEAR record)
//! and the flag, under the page's exclusive lock: heap page first, map page second, never
//! the reverse. Redo of the heap records clears the flag too (`wal::apply_insert`,
//! `wal::apply_xmax`). Inserts find room through the relation's [`crate::fsm`]
//! (`find_target`), and opportunistic pruning records the room it made there
//! ([`prune_and_record`]; VACUUM records its pages' room itself).
//!
//! # Hint bits
//!
//! `XMIN_COMMITTED`/`XMAX_COMMITTED` hints are set only by code holding the exclusive lock
//! (updates, deletes, pruning) and only when the deciding commit record is flushed (asynchronous
//! commit), never by readers under a shared lock. Readers consult CLOG, which is cheap here.

pub mod hint;
pub mod hot;
pub mod lock;
mod modify;
pub mod prune;
pub mod rewrite;
pub mod truncate;
pub mod tuple;
pub mod usage;
pub mod visibility;
pub mod wal;

pub use lock::{lock_tuple, LockResult, RowLockMode, RowLockWait};
pub use modify::{delete, update};
pub use usage::{my_heap_usage, HeapUsage};

use std::sync::atomic::{AtomicU32, Ordering};

use crate::buffer::{Buffer, BufferPool, Ring};
use crate::error::{Error, Result};
use crate::fsm;
use crate::page::{self, LpFlags, PageBuf, BLCKSZ};
use crate::types::{BlockNumber, BufferTag, Fork, OffsetNumber, Oid, Tid, Xid};
use crate::vm::VmBits;
use crate::wal::{BlockRef, RecordBuilder, Rmgr, Wal};
use crate::xact::{Snapshot, TransactionManager};
use tuple::{Schema, TupleHeader, Value, HEAP_ONLY_TUPLE, HEAP_UPDATED, HEAP_XMAX_INVALID};
use visibility::UpdateStatus;
use wal::{
    FLAG_INIT_PAGE, XLOG_HEAP2_MULTI_INSERT, XLOG_HEAP_DELETE, XLOG_HEAP_HOT_UPDATE, XLOG_HEAP_INSERT, XLOG_HEAP_UPDATE,
};

/// `REPLICA IDENTITY`: what an update or delete logs of the old row under
/// `wal_level = logical` (PostgreSQL's `pg_class.relreplident`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReplicaIdentity {
    /// The primary key's columns, when the table has one (`d`).
    #[default]
    Default,
    /// The whole old row (`f`).
    Full,
    /// Nothing (`n`).
    Nothing,
}

impl ReplicaIdentity {
    /// `relreplident`'s letter.
    pub fn code(self) -> char {
        match self {
            ReplicaIdentity::Default => 'd',
            ReplicaIdentity::Full => 'f',
            ReplicaIdentity::Nothing => 'n',
        }
    }

    pub fn from_code(c: char) -> Option<ReplicaIdentity> {
        match c {
            'd' => Some(ReplicaIdentity::Default),
            'f' => Some(ReplicaIdentity::Full),
            'n' => Some(ReplicaIdentity::Nothing),
            _ => None,
        }
    }

    /// `ALTER TABLE ... REPLICA IDENTITY` spelling: `DEFAULT`, `FULL`, `NOTHING`.
    pub fn parse(v: &str) -> Option<ReplicaIdentity> {
        match v.to_ascii_lowercase().as_str() {
            "default" => Some(ReplicaIdentity::Default),
            "full" => Some(ReplicaIdentity::Full),
            "nothing" => Some(ReplicaIdentity::Nothing),
            _ => None,
        }
    }
}

/// An open heap relation: what the heap needs to know about a table.
pub struct Relation {
    pub oid: Oid,
    pub name: String,
    /// The file node its forks are stored under.
    pub relfilenode: Oid,
    pub schema: Schema,
    /// `fillfactor` (10..=100): inserts leave `100 - fillfactor` percent of each page free for
    /// updates.
    pub fillfactor: u8,
    /// Columns some index covers: an update changing one of them cannot be HOT.
    pub indexed_columns: parking_lot::RwLock<Vec<bool>>,
    /// What updates and deletes log of the old row under `wal_level = logical`, and the
    /// primary key's columns `Default` logs (empty: no primary key, nothing logged).
    pub replica_identity: parking_lot::RwLock<(ReplicaIdentity, Vec<u16>)>,
    /// Writers (insert, update, delete, the catalog's own included) hold it shared for one
    /// change; VACUUM's truncation takes it exclusively, conditionally, beside its
    /// AccessExclusive table lock, because the catalog's writers take no table lock. It is
    /// never waited for while a transaction waits for another (DDL relies on table locks,
    /// [`crate::lmgr`]).
    pub write_lock: parking_lot::RwLock<()>,
    /// The block the last insert went to (`rd_targblock`).
    target_block: AtomicU32,
    /// Its visibility map (`_vm` fork).
    pub vm: crate::vm::VisibilityMap,
    /// Its free space map (`_fsm` fork): where inserts look for room.
    pub fsm: crate::fsm::FreeSpaceMap,
    /// Pages whose visibility-map bits a change cleared since the statistics last collected
    /// them (`pg_stat_user_tables`' `vm_bits_cleared`), and of those, pages that were
    /// all-frozen.
    pub vm_clears: std::sync::atomic::AtomicU64,
    pub vm_frozen_clears: std::sync::atomic::AtomicU64,
    /// The same clears per range of pages, until VACUUM takes them: its `adaptive` freeze
    /// policy's evidence of where freezing would not stick.
    pub vm_clears_by_range: crate::vm::ClearCounts,
    /// What VACUUM keeps about the relation from one run to the next (the `adaptive`
    /// policy's learning): opaque here, as PostgreSQL's `rd_amcache` is to the relcache;
    /// VACUUM fills it on first use and alone reads it.
    pub vacuum_memory: std::sync::OnceLock<Box<dyn std::any::Any + Send + Sync>>,
    /// Heap pages read from disk and found in shared buffers, since the last collection.
    pub blks_read: std::sync::atomic::AtomicU64,
    pub blks_hit: std::sync::atomic::AtomicU64,
    /// The columns' missing values (`pg_class.relmissing`, PostgreSQL's `attmissingval`):
    /// what a row written before `ALTER TABLE ... ADD COLUMN ... DEFAULT` reads for the
    /// column (see [`Relation::deform`]); empty or NULL where a column has none.
    pub missing: Vec<Value>,
}

impl Relation {
    pub fn new(oid: Oid, name: &str, relfilenode: Oid, schema: Schema, fillfactor: u8) -> Relation {
        let n = schema.columns.len();
        Relation {
            oid,
            name: name.to_string(),
            relfilenode,
            schema,
            fillfactor,
            indexed_columns: parking_lot::RwLock::new(vec![false; n]),
            replica_identity: parking_lot::RwLock::new((ReplicaIdentity::Default, Vec::new())),
            write_lock: parking_lot::RwLock::new(()),
            target_block: AtomicU32::new(u32::MAX),
            vm: crate::vm::VisibilityMap::new(relfilenode),
            fsm: crate::fsm::FreeSpaceMap::new(relfilenode),
            vm_clears: std::sync::atomic::AtomicU64::new(0),
            vm_frozen_clears: std::sync::atomic::AtomicU64::new(0),
            vm_clears_by_range: Default::default(),
            vacuum_memory: std::sync::OnceLock::new(),
            blks_read: std::sync::atomic::AtomicU64::new(0),
            blks_hit: std::sync::atomic::AtomicU64::new(0),
            missing: Vec::new(),
        }
    }

    /// [`Relation::new`] whose rows written before some columns were added read those
    /// columns' `missing` values.
    pub fn with_missing(mut self, missing: Vec<Value>) -> Relation {
        self.missing = if missing.iter().all(|v| matches!(v, Value::Null)) { Vec::new() } else { missing };
        self
    }

    /// A stored tuple's values by the relation's schema and missing values
    /// ([`tuple::deform_tuple_with`]).
    #[inline]
    pub fn deform(&self, t: &[u8]) -> std::result::Result<Vec<Value>, String> {
        tuple::deform_tuple_with(&self.schema, &self.missing, t)
    }

    /// Takes the counts kept since the last call (for the statistics collector).
    pub fn take_counts(&self) -> crate::stats::HeapCounts {
        crate::stats::HeapCounts {
            vm_cleared: self.vm_clears.swap(0, Ordering::Relaxed),
            frozen_cleared: self.vm_frozen_clears.swap(0, Ordering::Relaxed),
            blks_read: self.blks_read.swap(0, Ordering::Relaxed),
            blks_hit: self.blks_hit.swap(0, Ordering::Relaxed),
        }
    }

    pub fn tag(&self, block: BlockNumber) -> BufferTag {
        BufferTag { rel: self.relfilenode, fork: Fork::Main, block }
    }

    /// Bytes an insert must leave free on a page (fillfactor).
    fn reserved_bytes(&self) -> usize {
        BLCKSZ * (100 - usize::from(self.fillfactor)) / 100
    }
}

/// What the heap needs from the engine around it.
#[derive(Clone, Copy)]
pub struct HeapEnv<'a> {
    pub pool: &'a BufferPool,
    pub wal: &'a Wal,
    pub xact: &'a TransactionManager,
}

impl<'a> HeapEnv<'a> {
    /// The part the visibility map's logged changes need.
    pub fn maps(&self) -> crate::vm::MapEnv<'a> {
        crate::vm::MapEnv { pool: self.pool, wal: self.wal }
    }
}

/// The transaction doing a heap operation.
pub struct TxContext<'a> {
    /// The XID rows are written with: the innermost subtransaction's, or the top-level one.
    pub xid: Xid,
    /// The top-level transaction's XID (equal to `xid` outside subtransactions).
    pub top_xid: Xid,
    pub cid: u32,
    pub snapshot: &'a Snapshot,
    /// REPEATABLE READ: a row changed by a concurrent committed transaction is an error.
    pub serializable_updates: bool,
    /// The oldest XID any snapshot may still need, as of the start of the command: versions
    /// deleted before it may be pruned.
    pub horizon: Xid,
}

/// Result of an update or delete.
#[derive(Debug, Clone, PartialEq)]
pub enum ModifyResult {
    /// Deleted (the TID of the version deleted).
    Done(Tid),
    /// Updated: the new version's TID, whether it is a heap-only tuple (then no index needs a
    /// new entry), and its values (from which the indexes take their keys otherwise).
    Updated { tid: Tid, hot: bool, values: Vec<Value> },
    /// The row no longer exists (deleted, or already changed by this transaction).
    Gone,
}

pub(crate) fn corrupt_tuple(rel: &Relation, tid: Tid, what: &str) -> Error {
    Error::corrupted(rel.oid, tid.block, format!("line pointer {} of relation \"{}\": {what}", tid.offset, rel.name))
}

/// Validates `off` on a page and returns its NORMAL tuple bytes, or None for other states.
fn normal_item<'p>(rel: &Relation, page: &'p [u8], tid: Tid) -> Result<Option<&'p [u8]>> {
    if tid.offset.0 == 0 || tid.offset.0 > page::max_offset(page) {
        return Ok(None);
    }
    let lp = page::item_id(page, tid.offset);
    if lp.flags != LpFlags::Normal {
        return Ok(None);
    }
    let t = page::item(page, tid.offset);
    if TupleHeader::parse(t).is_none() {
        return Err(corrupt_tuple(rel, tid, "invalid tuple header"));
    }
    Ok(Some(t))
}

/// Pins a heap page; a page read from disk has its line pointers and tuple headers validated
/// (so later code may index them), a cached one was validated when it came in.
pub fn read_page<'a>(
    env: &HeapEnv<'a>,
    rel: &Relation,
    block: BlockNumber,
    ring: Option<&mut Ring>,
) -> Result<Buffer<'a>> {
    // Line pointers are checked once, when the page comes in from disk. Whether it came from
    // disk is seen in this thread's buffer usage.
    let reads_before = crate::buffer::my_usage().reads;
    let buf = env.pool.read_validated(rel.tag(block), ring, page::validate_items)?;
    let read = crate::buffer::my_usage().reads != reads_before;
    let counter = if read { &rel.blks_read } else { &rel.blks_hit };
    counter.fetch_add(1, Ordering::Relaxed);
    usage::count(|u| if read { u.blks_read += 1 } else { u.blks_hit += 1 });
    Ok(buf)
}

/// Pins the heap page a TID from an index names, or `None` when the block is past the table's
/// end. VACUUM may truncate the table's empty tail at any moment (it excludes writers, not
/// readers), so a check of the size before the read is not enough: the truncation can land
/// between the check and the read, and the read then fails with "beyond the end of the
/// relation". That failure sends it back to the size check, which then answers `None` (the
/// pages VACUUM removed held no tuples, so the TID named nothing any snapshot could see). Found by
/// `settle torture --wraparound`: a worker's index scan failed with "could not read block 51
/// in file base/16387" (soak_history's heap) while autovacuum truncated it.
pub fn read_page_if_exists<'a>(env: &HeapEnv<'a>, rel: &Relation, block: BlockNumber) -> Result<Option<Buffer<'a>>> {
    // A failed read is retried when the table is long enough again: inserts may have
    // re-extended it past `block` between the truncation and the second look at its size.
    let mut tries = 0;
    loop {
        if block.0 >= env.pool.smgr().nblocks(rel.relfilenode, Fork::Main)? {
            return Ok(None);
        }
        match read_page(env, rel, block, None) {
            Ok(buf) => return Ok(Some(buf)),
            Err(Error::NotFound(_)) if tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Logs a record (of `tx`'s, if a transaction makes it) that changes one page (the caller holds its exclusive lock and
/// stamps the returned end LSN on it). Under `wal_level = logical` the block keeps its data
/// (the tuple) beside a page image and a subtransaction's record names its top-level XID.
#[expect(clippy::too_many_arguments, reason = "the fields of one WAL record")]
fn log_one_block(
    env: &HeapEnv<'_>,
    rmgr: Rmgr,
    info: u8,
    tx: Option<&TxContext<'_>>,
    tag: BufferTag,
    will_init: bool,
    page_bytes: &[u8],
    data: Vec<u8>,
    main_data: Vec<u8>,
) -> Result<crate::types::Lsn> {
    let keep_data = env.wal.logical() && !data.is_empty();
    env.wal.insert(&RecordBuilder {
        toplevel_xid: tx.map_or(Xid::INVALID, |tx| logged_toplevel_xid(env, tx)),
        rmgr,
        info,
        xid: tx.map_or(Xid::INVALID, |tx| tx.xid),
        blocks: vec![BlockRef { keep_data, id: 0, tag, will_init, page: Some(page_bytes), data }],
        main_data,
    })
}

/// The top-level XID a record of `tx`'s names: under `wal_level = logical`, a
/// subtransaction's records carry it so that the decoder files their changes with the right
/// transaction before it sees the commit.
fn logged_toplevel_xid(env: &HeapEnv<'_>, tx: &TxContext<'_>) -> Xid {
    if env.wal.logical() && tx.top_xid != tx.xid {
        tx.top_xid
    } else {
        Xid::INVALID
    }
}

/// Kind byte of a logged old row: its replica-identity key columns only.
pub const OLD_KEY: u8 = b'k';
/// Kind byte of a logged old row: the whole row (`REPLICA IDENTITY FULL`).
pub const OLD_TUPLE: u8 = b'f';

/// Appends the old-row part of an UPDATE or DELETE record's main data: `len u16`, then when
/// `len > 0` a kind byte ([`OLD_KEY`] or [`OLD_TUPLE`]) and `len` bytes of logged tuple.
/// Something is logged only under `wal_level = logical`: the whole row with `REPLICA IDENTITY
/// FULL`, the primary key's columns (others null) with `DEFAULT` when it has one and, for an
/// update, only when one of them changed (PostgreSQL's `ExtractReplicaIdentity`).
fn push_old_row(
    env: &HeapEnv<'_>,
    rel: &Relation,
    main: &mut Vec<u8>,
    old: &[u8],
    new_vals: Option<&[Value]>,
) -> Result<()> {
    let logged = if env.wal.logical() { old_row_for_wal(rel, old, new_vals)? } else { None };
    match logged {
        Some((kind, bytes)) => {
            let len = u16::try_from(bytes.len())
                .map_err(|_| Error::invalid(format!("old row of {} bytes is too long to log", bytes.len())))?;
            main.extend_from_slice(&len.to_le_bytes());
            main.push(kind);
            main.extend_from_slice(&bytes);
        }
        None => main.extend_from_slice(&0u16.to_le_bytes()),
    }
    Ok(())
}

fn old_row_for_wal(rel: &Relation, old: &[u8], new_vals: Option<&[Value]>) -> Result<Option<(u8, Vec<u8>)>> {
    let (identity, key) = rel.replica_identity.read().clone();
    let mut out = Vec::new();
    match identity {
        ReplicaIdentity::Nothing => Ok(None),
        ReplicaIdentity::Full => {
            wal::encode_tuple(&mut out, old);
            Ok(Some((OLD_TUPLE, out)))
        }
        ReplicaIdentity::Default if key.is_empty() => Ok(None),
        ReplicaIdentity::Default => {
            let old_vals = rel.deform(old).map_err(|e| Error::invalid(e.to_string()))?;
            if let Some(new_vals) = new_vals {
                let changed = key.iter().any(|&c| old_vals.get(usize::from(c)) != new_vals.get(usize::from(c)));
                if !changed {
                    return Ok(None);
                }
            }
            let keyed: Vec<Value> = old_vals
                .into_iter()
                .enumerate()
                .map(|(i, v)| if key.contains(&(i as u16)) { v } else { Value::Null })
                .collect();
            let t = tuple::build_tuple(&keyed)?;
            wal::encode_tuple(&mut out, &t);
            Ok(Some((OLD_KEY, out)))
        }
    }
}

/// Prepares a tuple for insertion by `tx`: xmin, cid, xmax invalid.
fn stamp_new_tuple(t: &mut [u8], tx: &TxContext<'_>, extra_infomask: u16, extra_infomask2: u16) {
    tuple::set_xmin(t, tx.xid);
    tuple::set_xmax(t, Xid::INVALID);
    tuple::set_cid(t, tx.cid);
    let h = TupleHeader::parse(t).expect("tuple built by form_tuple");
    let (m, m2) = (h.infomask(), h.infomask2());
    tuple::set_infomask(t, (m & !0xFF00 & !0x0080) | HEAP_XMAX_INVALID | extra_infomask);
    tuple::set_infomask2(t, (m2 & tuple::HEAP_NATTS_MASK) | extra_infomask2);
}

fn page_has_room(page: &[u8], need: usize, reserve: usize) -> bool {
    if page::is_new(page) {
        return true;
    }
    let free = page::heap_free_space(page);
    free >= need + reserve
}

/// Returns a pinned page with room for a tuple of `need` bytes (MAXALIGNed) plus the fillfactor
/// reserve, initialized if it was new (PostgreSQL's `RelationGetBufferForTuple`, without the
/// relation extension lock's bulk extension).
///
/// The candidates, in order: the relation's target block (where the last insert went); else a
/// page the free space map offers; else, for a table whose map knows nothing, its last page.
/// A candidate without room has its real free space recorded in the map (so the map stops
/// offering it for this size), and the map is asked again (`RecordAndGetPageWithFreeSpace`).
/// When the map has nothing more to offer, the relation is extended by one page. Nothing else
/// decides where a tuple goes: VACUUM records 0 for a page it wants left alone (DESIGN.md §5),
/// and inserts honour that.
///
/// Only the candidate page is locked, never two at once, and never the map while a heap page is
/// locked here (the record happens after the heap page's lock is released).
///
/// `just_filled` is a page the caller has just found too full for the row and recorded in the
/// map: when it is the first candidate it is not read again, the map is asked straight away. (A
/// bulk load that pinned its full page once more per page raised the page's usage count, so its
/// ring never found its own frames reusable and walked the whole buffer pool instead.)
fn find_target<'a>(
    env: &HeapEnv<'a>,
    rel: &Relation,
    need: usize,
    mut ring: Option<&mut Ring>,
    just_filled: Option<BlockNumber>,
) -> Result<Buffer<'a>> {
    let reserve = rel.reserved_bytes();
    let min_category = fsm::needed_to_category(need + reserve);
    let nblocks = env.pool.smgr().nblocks(rel.relfilenode, Fork::Main)?;
    let t = rel.target_block.load(Ordering::Relaxed);
    let mut candidate = if t != u32::MAX && t < nblocks {
        Some(BlockNumber(t))
    } else {
        // No target yet (a table just opened): the map, then the last page before extending.
        rel.fsm.search(env.pool, min_category)?.or(nblocks.checked_sub(1).map(BlockNumber))
    };
    if just_filled.is_some() && candidate == just_filled {
        candidate = rel.fsm.search(env.pool, min_category)?;
    }
    while let Some(b) = candidate {
        let buf = read_page(env, rel, b, ring.as_deref_mut())?;
        let short_of_room = {
            let mut g = buf.write();
            if page::is_new(&g.0) {
                page::init(&mut g.0, 0);
            }
            (!page_has_room(&g.0, need, reserve)).then(|| page::heap_free_space(&g.0))
        };
        let Some(free) = short_of_room else {
            rel.target_block.store(b.0, Ordering::Relaxed);
            return Ok(buf);
        };
        drop(buf);
        rel.fsm.record(env.pool, b, free)?;
        if fsm::avail_to_category(free) >= min_category {
            // A request beyond what a category can express (a large tuple and a low
            // fillfactor): the map cannot tell this page from one with room, so asking again
            // would offer it again. Only a new page will do.
            break;
        }
        candidate = rel.fsm.search(env.pool, min_category)?;
    }
    let buf = env.pool.extend(rel.relfilenode, Fork::Main, ring)?;
    init_if_new(&buf);
    rel.target_block.store(buf.block().0, Ordering::Relaxed);
    Ok(buf)
}

/// Makes a page just added by extension an empty heap page, unless someone got there first.
///
/// From the moment the relation is extended its size counts the new block, so another backend
/// looking for room (a table with no target block tries the last page) can read the page,
/// initialize it and put a tuple on it before the extender takes the page's lock. The page must
/// then be left as it is: initializing it again wiped that tuple, whose record was already in
/// the WAL. Found by `settle torture --workload tpcc`: a district's new version, moved there by
/// a committed non-HOT update, vanished, and its updates with it (W_YTD != sum(D_YTD)).
fn init_if_new(buf: &Buffer<'_>) {
    let mut g = buf.write();
    if page::is_new(&g.0) {
        page::init(&mut g.0, 0);
    }
}

/// Called by every change that adds or stamps a tuple on a page, with the page exclusively
/// locked and before the page is changed: if the page is marked all-visible, clears its
/// visibility-map bits (logging VM_CLEAR) and its `PD_ALL_VISIBLE` flag. The map is cleared
/// before the heap change is logged, so WAL never holds the heap change without the clear:
/// a crash between the two leaves a page that is still all-visible with its bit clear, which
/// the map allows (see [`crate::vm`], "WAL"). Redo of the heap record clears the flag again
/// (the `apply_*` helpers in [`wal`]).
///
/// A bit cleared is also counted for the page's range (one more atomic increment: the
/// `adaptive` freeze policy's evidence, [`crate::vm::ClearCounts`]).
fn clear_all_visible(env: &HeapEnv<'_>, rel: &Relation, block: BlockNumber, page_bytes: &mut [u8]) -> Result<()> {
    if page::flags(page_bytes) & page::PD_ALL_VISIBLE != 0 {
        if let Some((_, was)) = rel.vm.clear_noting(env.maps(), block, VmBits::VALID)? {
            rel.vm_clears.fetch_add(1, Ordering::Relaxed);
            rel.vm_clears_by_range.note_clear(block);
            if was.all_frozen() {
                rel.vm_frozen_clears.fetch_add(1, Ordering::Relaxed);
            }
        }
        page::clear_flags(page_bytes, page::PD_ALL_VISIBLE);
    }
    Ok(())
}

/// Inserts one row; returns its TID.
pub fn insert(env: &HeapEnv<'_>, rel: &Relation, tx: &TxContext<'_>, values: &[Value]) -> Result<Tid> {
    let mut t = tuple::form_tuple(&rel.schema, values)?;
    stamp_new_tuple(&mut t, tx, 0, 0);
    insert_tuple(env, rel, tx, &mut t)
}

fn insert_tuple(env: &HeapEnv<'_>, rel: &Relation, tx: &TxContext<'_>, t: &mut [u8]) -> Result<Tid> {
    let need = page::maxalign(t.len());
    loop {
        let target_buf = find_target(env, rel, need, None, None)?;
        let block = target_buf.block();
        let mut g = target_buf.write();
        // An empty page is logged as initialized by this record, so redo never depends on an
        // in-memory initialization that was not logged.
        let fresh = page::max_offset(&g.0) == 0;
        let off = OffsetNumber(page::max_offset(&g.0) + 1);
        let off = first_free_offset(&g.0).unwrap_or(off);
        tuple::set_ctid(t, Tid { block, offset: off });
        clear_all_visible(env, rel, block, &mut g.0)?;
        if !wal::apply_insert(&mut g.0, off, t) {
            // The page had room by its free space but refused the tuple: never offer it again
            // for this size (it is rechecked whenever its entry is rewritten).
            drop(g);
            rel.fsm.record(env.pool, block, 0)?;
            rel.target_block.store(u32::MAX, Ordering::Relaxed);
            continue;
        }
        let mut main = Vec::with_capacity(3);
        main.extend_from_slice(&off.0.to_le_bytes());
        main.push(if fresh { FLAG_INIT_PAGE } else { 0 });
        let mut data = Vec::with_capacity(t.len());
        wal::encode_tuple(&mut data, t);
        let lsn = log_one_block(env, Rmgr::Heap, XLOG_HEAP_INSERT, Some(tx), rel.tag(block), fresh, &g.0, data, main)?;
        page::set_lsn(&mut g.0, lsn);
        target_buf.mark_dirty();
        return Ok(Tid { block, offset: off });
    }
}

/// The first reusable line pointer, if the page says it has one.
fn first_free_offset(page: &[u8]) -> Option<OffsetNumber> {
    if page::flags(page) & page::PD_HAS_FREE_LINES == 0 {
        return None;
    }
    (1..=page::max_offset(page)).map(OffsetNumber).find(|&o| page::item_id(page, o).flags == LpFlags::Unused)
}

/// What a run of [`multi_insert`]s keeps from one batch to the next (PostgreSQL's
/// `BulkInsertState`): the bulk-write ring of buffers, and the buffer each batch's tuples are
/// formed in, kept so that a load does not allocate (and fault in) a fresh one per batch.
pub struct BulkInsert {
    ring: Ring,
    /// The batch's tuples, formed one after another; `spans` holds each one's place.
    arena: Vec<u8>,
    spans: Vec<std::ops::Range<usize>>,
}

impl BulkInsert {
    pub fn new() -> BulkInsert {
        BulkInsert { ring: Ring::new(16 << 20), arena: Vec::new(), spans: Vec::new() }
    }
}

impl Default for BulkInsert {
    fn default() -> Self {
        Self::new()
    }
}

/// Inserts many rows, filling each page before logging it as one MULTI_INSERT record
/// (PostgreSQL's `heap_multi_insert`, used by COPY), through `bulk`'s ring of buffers.
pub fn multi_insert(
    env: &HeapEnv<'_>,
    rel: &Relation,
    tx: &TxContext<'_>,
    rows: &[Vec<Value>],
    bulk: &mut BulkInsert,
) -> Result<Vec<Tid>> {
    let BulkInsert { ring, arena, spans } = bulk;
    arena.clear();
    spans.clear();
    for r in rows {
        let start = tuple::form_tuple_into(&rel.schema, r, arena)?;
        stamp_new_tuple(&mut arena[start..], tx, 0, 0);
        spans.push(start..arena.len());
    }
    let mut tids = Vec::with_capacity(spans.len());
    let reserve = rel.reserved_bytes();
    let mut i = 0;
    let mut just_filled = None;
    while i < spans.len() {
        let target_buf = find_target(env, rel, page::maxalign(spans[i].len()), Some(ring), just_filled.take())?;
        let block = target_buf.block();
        let mut g = target_buf.write();
        let fresh = page::max_offset(&g.0) == 0;
        clear_all_visible(env, rel, block, &mut g.0)?;
        let mut main = Vec::with_capacity(3 + 2 * 64);
        main.push(if fresh { FLAG_INIT_PAGE } else { 0 });
        main.extend_from_slice(&[0, 0]);
        let mut data = Vec::with_capacity(BLCKSZ);
        let mut n: u16 = 0;
        while i < spans.len() {
            let t = &mut arena[spans[i].clone()];
            let need = page::maxalign(t.len());
            // The first tuple on a fresh page always goes in, whatever the fillfactor.
            if !(n == 0 && fresh) && page::heap_free_space(&g.0) < need + reserve {
                break;
            }
            let off = OffsetNumber(page::max_offset(&g.0) + 1);
            tuple::set_ctid(t, Tid { block, offset: off });
            if !wal::apply_insert(&mut g.0, off, t) {
                break;
            }
            main.extend_from_slice(&off.0.to_le_bytes());
            let body_len = (t.len() - tuple::HEAP_TUPLE_HEADER_SIZE) as u16;
            data.extend_from_slice(&body_len.to_le_bytes());
            wal::encode_tuple(&mut data, t);
            tids.push(Tid { block, offset: off });
            n += 1;
            i += 1;
        }
        if n == 0 {
            drop(g);
            rel.fsm.record(env.pool, block, 0)?;
            rel.target_block.store(u32::MAX, Ordering::Relaxed);
            continue;
        }
        let page_full = i < spans.len();
        main[1..3].copy_from_slice(&n.to_le_bytes());
        let lsn = log_one_block(
            env,
            Rmgr::Heap2,
            XLOG_HEAP2_MULTI_INSERT,
            Some(tx),
            rel.tag(block),
            fresh,
            &g.0,
            data,
            main,
        )?;
        page::set_lsn(&mut g.0, lsn);
        target_buf.mark_dirty();
        if page_full {
            let free = page::heap_free_space(&g.0);
            drop(g);
            drop(target_buf);
            // This load will not come back to the page: let the background writer write it,
            // and tell the map (and the next search) it is full, as `find_target` would.
            env.pool.queue_write_behind(rel.tag(block));
            rel.fsm.record(env.pool, block, free)?;
            just_filled = Some(block);
        }
    }
    // A batch of very wide rows does not leave its buffer's size behind for the transaction.
    if arena.capacity() > BULK_ARENA_KEPT {
        *arena = Vec::new();
    }
    Ok(tids)
}

/// The largest tuple buffer a [`BulkInsert`] keeps between batches.
const BULK_ARENA_KEPT: usize = 16 << 20;

/// Reads the values of the version at `tid` if `tx`'s snapshot sees it.
pub fn fetch(env: &HeapEnv<'_>, rel: &Relation, snap: &Snapshot, curcid: u32, tid: Tid) -> Result<Option<Vec<Value>>> {
    let Some(buf) = read_page_if_exists(env, rel, tid.block)? else { return Ok(None) };
    let g = buf.read();
    if page::is_new(&g.0) {
        return Ok(None);
    }
    let Some(t) = normal_item(rel, &g.0, tid)? else { return Ok(None) };
    let h = TupleHeader::parse(t).ok_or_else(|| corrupt_tuple(rel, tid, "invalid tuple header"))?;
    if !visibility::satisfies_mvcc(&h, snap, curcid, env.xact)? {
        return Ok(None);
    }
    rel.deform(t).map(Some).map_err(|e| corrupt_tuple(rel, tid, &e))
}

/// Sequential-scan one page: the visible tuples of `block` with their values. Prunes the page
/// first when that is worthwhile and the cleanup lock is free.
pub fn scan_page(
    env: &HeapEnv<'_>,
    rel: &Relation,
    snap: &Snapshot,
    curcid: u32,
    block: BlockNumber,
    oldest_xmin: Xid,
    ring: &mut Ring,
) -> Result<Vec<(Tid, Vec<Value>)>> {
    let buf = read_page(env, rel, block, Some(ring))?;
    if !maybe_prune(env, rel, &buf, oldest_xmin)? {
        if let Some(mut w) = buf.try_write() {
            set_hints_locked(env, &buf, &mut w.0)?;
        }
    }
    let g = buf.read();
    let mut out = Vec::new();
    if page::is_new(&g.0) {
        return Ok(out);
    }
    for o in 1..=page::max_offset(&g.0) {
        let tid = Tid { block, offset: OffsetNumber(o) };
        let Some(t) = normal_item(rel, &g.0, tid)? else { continue };
        let h = TupleHeader::parse(t).ok_or_else(|| corrupt_tuple(rel, tid, "invalid tuple header"))?;
        if visibility::satisfies_mvcc(&h, snap, curcid, env.xact)? {
            let vals = rel.deform(t).map_err(|e| corrupt_tuple(rel, tid, &e))?;
            out.push((tid, vals));
        }
    }
    Ok(out)
}

/// Every tuple version on `block`, visible or not (PostgreSQL's `SnapshotAny`), with its
/// values: for readers of history that the catalog's snapshot rules keep on disk (the logical
/// decoder's lookup of a dropped table's `pg_class` row). Neither prunes nor sets hints.
pub fn scan_page_any(env: &HeapEnv<'_>, rel: &Relation, block: BlockNumber) -> Result<Vec<(Tid, Vec<Value>)>> {
    let buf = read_page(env, rel, block, None)?;
    let g = buf.read();
    let mut out = Vec::new();
    if page::is_new(&g.0) {
        return Ok(out);
    }
    for o in 1..=page::max_offset(&g.0) {
        let tid = Tid { block, offset: OffsetNumber(o) };
        let Some(t) = normal_item(rel, &g.0, tid)? else { continue };
        let vals = rel.deform(t).map_err(|e| corrupt_tuple(rel, tid, &e))?;
        out.push((tid, vals));
    }
    Ok(out)
}

/// Sets what hint bits can be set on a page the caller holds exclusively (see [`hint`]).
fn set_hints_locked(env: &HeapEnv<'_>, buf: &Buffer<'_>, page_bytes: &mut [u8]) -> Result<()> {
    if page::is_new(page_bytes) {
        return Ok(());
    }
    let (lsn, redo) = (page::lsn(page_bytes), env.wal.redo_ptr());
    if buf.may_add_hints(lsn, redo) && hint::set_page_hints(page_bytes, env.xact, env.wal.flushed_lsn())? {
        buf.hints_added(lsn, redo);
    }
    Ok(())
}

/// Opportunistic pruning (`heap_page_prune_opt`): only with the cleanup lock, never waiting.
pub fn maybe_prune(env: &HeapEnv<'_>, rel: &Relation, buf: &Buffer<'_>, oldest_xmin: Xid) -> Result<bool> {
    {
        let g = buf.read();
        if page::is_new(&g.0) || !prune::worth_pruning(&g.0, oldest_xmin, rel.fillfactor) {
            return Ok(false);
        }
    }
    let Some(mut g) = buf.try_cleanup_lock() else { return Ok(false) };
    prune_and_record(env, rel, buf, &mut g.0, oldest_xmin)
}

/// Opportunistic pruning of a page the caller holds the cleanup lock on: [`prune_locked`], then
/// the room it made is recorded in the free space map (under the cleanup lock still: heap page,
/// then map page), so that inserts find it.
pub fn prune_and_record(
    env: &HeapEnv<'_>,
    rel: &Relation,
    buf: &Buffer<'_>,
    page_bytes: &mut [u8],
    oldest_xmin: Xid,
) -> Result<bool> {
    if !prune_locked(env, rel, buf, page_bytes, oldest_xmin)? {
        return Ok(false);
    }
    rel.fsm.record(env.pool, buf.block(), page::heap_free_space(page_bytes))?;
    Ok(true)
}

/// Prunes a page the caller holds the cleanup lock on; WAL-logged. Returns whether it changed.
/// Records nothing in the free space map: VACUUM calls this and records each page's free space
/// itself, by its own rule (a settled page records 0, DESIGN.md §5), once it has also frozen
/// the page and set its visibility-map bits; opportunistic pruning goes through
/// [`prune_and_record`].
pub fn prune_locked(
    env: &HeapEnv<'_>,
    rel: &Relation,
    buf: &Buffer<'_>,
    page_bytes: &mut [u8],
    oldest_xmin: Xid,
) -> Result<bool> {
    Ok(prune_page(env, rel, buf, page_bytes, oldest_xmin)?.changed)
}

/// What one pruning of a page did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// The page changed (and a PRUNE record was logged).
    pub changed: bool,
    /// Tuples whose storage pruning freed (VACUUM's `tuples: N removed`).
    pub tuples_removed: u32,
}

/// [`prune_locked`], also saying how many tuples it removed.
pub fn prune_page(
    env: &HeapEnv<'_>,
    rel: &Relation,
    buf: &Buffer<'_>,
    page_bytes: &mut [u8],
    oldest_xmin: Xid,
) -> Result<Pruned> {
    // A catalog relation keeps what replication slots' `catalog_xmin` needs.
    let oldest_xmin = env.xact.relation_horizon(rel.oid, oldest_xmin);
    let block = buf.block();
    if page::is_new(page_bytes) {
        return Ok(Pruned::default());
    }
    let mut scan = Box::<prune::PageScan>::default();
    let mut plan = wal::PrunePlan::default();
    let (lsn, redo) = (page::lsn(page_bytes), env.wal.redo_ptr());
    prune::scan_page(
        page_bytes,
        oldest_xmin,
        env.xact,
        env.wal.flushed_lsn(),
        buf.may_add_hints(lsn, redo),
        &mut prune::XidMemo::default(),
        &mut scan,
    )?;
    if scan.hints_changed {
        buf.hints_added(lsn, redo);
    }
    prune::plan_from_scan(page_bytes, block, &scan, &mut plan);
    if plan.is_empty() {
        if page::prune_xid(page_bytes) != plan.new_prune_xid {
            // Nothing removable yet: remember the new horizon need without dirtying for it.
            page::set_prune_xid(page_bytes, plan.new_prune_xid);
        }
        return Ok(Pruned::default());
    }
    let tuples_removed = prune::tuples_removed(page_bytes, &plan);
    wal::apply_prune(page_bytes, &plan);
    let lsn = log_one_block(
        env,
        Rmgr::Heap2,
        wal::XLOG_HEAP2_PRUNE,
        None,
        rel.tag(block),
        false,
        page_bytes,
        Vec::new(),
        plan.encode(),
    )?;
    page::set_lsn(page_bytes, lsn);
    buf.mark_dirty();
    Ok(Pruned { changed: true, tuples_removed })
}

/// A pageinspect-style rendering of a heap page: the header, then one line per line pointer
/// with the tuple header and, given a schema, the values. `with_lsn: false` leaves out the page
/// LSN and checksum so that golden outputs do not depend on WAL positions.
pub fn describe_page(page_bytes: &[u8], schema: Option<&Schema>, with_lsn: bool) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if page::is_new(page_bytes) {
        return "new (all-zero) page\n".to_string();
    }
    if with_lsn {
        let _ = write!(s, "lsn: {}  ", page::lsn(page_bytes));
    }
    let _ = writeln!(
        s,
        "lower: {}  upper: {}  special: {}  flags: {}  prune_xid: {}  free: {}",
        page::lower(page_bytes),
        page::upper(page_bytes),
        page::special(page_bytes),
        page::flag_names(page::flags(page_bytes)),
        page::prune_xid(page_bytes),
        page::free_space(page_bytes)
    );
    for (off, id) in page::item_ids(page_bytes) {
        let _ = write!(s, "  lp {:>3}: ", off.0);
        match id.flags {
            LpFlags::Unused => s.push_str("UNUSED"),
            LpFlags::Dead => s.push_str("DEAD"),
            LpFlags::Redirect => {
                let _ = write!(s, "REDIRECT -> {}", id.off);
            }
            LpFlags::Normal => {
                let t = page::try_item(page_bytes, off).unwrap_or(&[]);
                let _ = write!(s, "NORMAL len {}  {}", id.len, tuple::describe_header(t));
                if let Some(schema) = schema {
                    match tuple::deform_tuple(schema, t) {
                        Ok(vals) => {
                            let _ = write!(s, "  {}", render_values(&vals));
                        }
                        Err(e) => {
                            let _ = write!(s, "  (undecodable: {e})");
                        }
                    }
                }
            }
        }
        s.push('\n');
    }
    s
}

/// Renders values as a tuple literal, abbreviating long text.
pub fn render_values(vals: &[Value]) -> String {
    let parts: Vec<String> = vals
        .iter()
        .map(|v| match v {
            Value::Null => "NULL".to_string(),
            Value::Int4(x) => x.to_string(),
            Value::Int8(x) => x.to_string(),
            Value::Float8(x) => x.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Timestamp(t) => format!("ts:{t}"),
            Value::Text(t) if t.len() > 16 => {
                format!("'{}…'({})", &t[..t.char_indices().nth(12).map_or(t.len(), |c| c.0)], t.len())
            }
            Value::Text(t) => format!("'{t}'"),
            Value::Bytea(b) => format!("\\x({} bytes)", b.len()),
        })
        .collect();
    format!("({})", parts.join(", "))
}

/// Scratch page for tests and tools.
pub fn empty_page() -> PageBuf {
    let mut p = PageBuf([0; BLCKSZ]);
    page::init(&mut p.0, 0);
    p
}

#[cfg(test)]
mod tests;
