//! Lazy VACUUM (PostgreSQL's `vacuumlazy.c`, rewritten; DESIGN.md §5).
//!
//! ```text
//!  cutoffs: OldestXmin, FreezeLimit, aggressive?       (relfrozenxid older than freeze_table_age)
//!     |
//!  phase I   scan heap pages the VM cannot skip ------> prune, freeze (policy), set VM, FSM
//!     |          LP_DEAD TIDs -> dead-item store (tidstore, maintenance_work_mem)
//!     |   store full?  ----------------------------+
//!  phase II  bulk-delete every index (store answers "is this TID dead?")
//!  phase III LP_DEAD -> LP_UNUSED, set VM, FSM      |  then back to phase I
//!     |  <-----------------------------------------+
//!  index cleanup, truncate empty tail pages (table lock, giving way after 20 ms)
//!  pg_class: relpages, reltuples, relfrozenxid (in place, WAL-logged)
//!  database frozen XID -> XID limits, CLOG truncation
//! ```
//!
//! # Skipping
//!
//! A run of at least 32 pages the visibility map calls all-visible is skipped (all-frozen in an
//! aggressive vacuum); shorter runs are read, since sequential reads are cheap and skipping
//! them would stop relfrozenxid from advancing. The last page is always read (truncation needs
//! to know whether it is empty). When a non-aggressive vacuum skips an all-visible page that is
//! not all-frozen, it cannot know that page's oldest XID and leaves relfrozenxid alone.
//!
//! # Settled pages
//!
//! A page read in phase I whose every tuple carries the hints "inserter committed, no deleter"
//! cannot have anything to prune: VACUUM skips pruning it and only analyzes it (freezing,
//! visibility map, free space). That is most of an aggressive or `DISABLE_PAGE_SKIPPING` scan
//! of a clean table.
//!
//! # Cleanup locks
//!
//! Pruning moves tuples, so it needs the cleanup lock (exclusive lock and the only pin). When a
//! page's cleanup lock is not free (after a few microseconds' grace for a background
//! writer's pin), the page is processed read-only (PostgreSQL's
//! `lazy_scan_noprune`): its existing LP_DEAD items are still collected, dead tuples are
//! counted as missed, and its unfrozen XIDs still bound the new relfrozenxid. Only an
//! aggressive vacuum that finds an XID older than FreezeLimit there waits for the lock.
//!
//! # relfrozenxid
//!
//! The new relfrozenxid starts at OldestXmin and is lowered to every unfrozen XID left behind
//! on every page read ([`freeze::decide`]'s `oldest_left`, the no-prune path's XIDs). It is
//! written only when it moves forward.
//!
//! # Crash safety
//!
//! Every page change is its own WAL record (PRUNE, FREEZE_PAGE, VISIBLE, VACUUM, VM_CLEAR,
//! Storage TRUNCATE, and the in-place pg_class update), so a crash anywhere leaves each page as
//! one of its logged states: LP_DEAD items become LP_UNUSED only after every index lost its
//! entries for them (DESIGN.md invariant 3), and a VM bit is set by the same record that sets
//! `PD_ALL_VISIBLE` after the page's tuples are visible to all (invariant 4). The FSM is a hint
//! and may lose its latest values.

pub mod dbstats;
pub mod freeze;
pub mod report;
pub mod wal;

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tidstore::{DeadTids, TidStore};

use crate::buffer::{self, Buffer, Ring};
use crate::catalog::{ClassRow, TableEntry, PG_CLASS_OID};
use crate::config::FreezePolicy;
use crate::db::{Database, Inner};
use crate::error::{Error, Result};
use crate::fsm;
use crate::heap::tuple::{self, TupleHeader};
use crate::heap::{self, HeapEnv, Relation};
use crate::index::{BulkDeleteStats, IndexAm};
use crate::page::{self, LpFlags, BLCKSZ, PD_ALL_VISIBLE};
use crate::types::{BlockNumber, Fork, OffsetNumber, Tid, Xid};
use crate::vm::VmBits;
use crate::wal::{BlockRef, RecordBuilder, Rmgr};
use freeze::Cutoffs;
pub use report::{VacuumReport, DATABASE_NAME};

/// Runs of all-visible pages shorter than this are read anyway (`SKIP_PAGES_THRESHOLD`).
const SKIP_PAGES_THRESHOLD: u32 = 32;
/// The failsafe is rechecked every 4 GB of heap (`FAILSAFE_EVERY_PAGES`).
const FAILSAFE_EVERY_PAGES: u32 = ((4u64 << 30) / BLCKSZ as u64) as u32;
/// Index vacuuming is bypassed when fewer than 2% of pages have LP_DEAD items.
const BYPASS_THRESHOLD_PAGES: f64 = 0.02;
/// ... and the dead items take less than this.
const BYPASS_MAX_BYTES: usize = 32 << 20;
/// Truncation is attempted when at least this many tail pages, or 1/16 of the table, are free.
const REL_TRUNCATE_MINIMUM: u32 = 1000;
const REL_TRUNCATE_FRACTION: u32 = 16;
/// Truncation waits for the table lock this long, retrying every 50 ms, then gives up.
const TRUNCATE_LOCK_TIMEOUT: Duration = Duration::from_secs(5);
/// ... and holds it at most this long before giving way to writers.
const TRUNCATE_LOCK_HOLD: Duration = Duration::from_millis(20);
/// Extra attempts at a page's cleanup lock before the no-prune path.
const CLEANUP_LOCK_RETRIES: usize = 5;
/// Pages between FSM flushes in phase I.
const FSM_BATCH: usize = 1024;

/// `INDEX_CLEANUP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IndexCleanup {
    /// Vacuum indexes unless few pages have dead items (the bypass optimization).
    #[default]
    Auto,
    On,
    Off,
}

impl IndexCleanup {
    pub fn parse(v: &str) -> Option<IndexCleanup> {
        match v.to_ascii_lowercase().as_str() {
            "auto" => Some(IndexCleanup::Auto),
            "on" | "true" => Some(IndexCleanup::On),
            "off" | "false" => Some(IndexCleanup::Off),
            _ => None,
        }
    }
}

/// The options of one VACUUM (PostgreSQL's `VacuumParams` and the command's options).
#[derive(Clone, Debug, Default)]
pub struct VacuumParams {
    pub verbose: bool,
    /// `FREEZE`: `vacuum_freeze_min_age` and `vacuum_freeze_table_age` of 0.
    pub freeze: bool,
    /// `DISABLE_PAGE_SKIPPING`: read every page (and be aggressive).
    pub disable_page_skipping: bool,
    pub index_cleanup: IndexCleanup,
    /// `TRUNCATE`; `None` follows `vacuum_truncate`.
    pub truncate: Option<bool>,
    /// Run by autovacuum (cost limits and log wording follow).
    pub is_autovacuum: bool,
    /// An anti-wraparound autovacuum.
    pub is_wraparound: bool,
    /// Overrides the table's and the database's `vacuum_freeze_policy`.
    pub policy: Option<FreezePolicy>,
    /// Overrides the cost delay (milliseconds) and limit; `None` takes `vacuum_cost_delay`
    /// and `vacuum_cost_limit` (or the autovacuum ones).
    pub cost_delay_ms: Option<f64>,
    pub cost_limit: Option<u32>,
}

/// Phases of `pg_stat_progress_vacuum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum VacuumPhase {
    Initializing = 0,
    ScanningHeap = 1,
    VacuumingIndexes = 2,
    VacuumingHeap = 3,
    CleaningUpIndexes = 4,
    TruncatingHeap = 5,
    FinalCleanup = 6,
}

impl VacuumPhase {
    pub fn name(self) -> &'static str {
        match self {
            VacuumPhase::Initializing => "initializing",
            VacuumPhase::ScanningHeap => "scanning heap",
            VacuumPhase::VacuumingIndexes => "vacuuming indexes",
            VacuumPhase::VacuumingHeap => "vacuuming heap",
            VacuumPhase::CleaningUpIndexes => "cleaning up indexes",
            VacuumPhase::TruncatingHeap => "truncating heap",
            VacuumPhase::FinalCleanup => "performing final cleanup",
        }
    }

    fn from_u8(v: u8) -> VacuumPhase {
        match v {
            1 => VacuumPhase::ScanningHeap,
            2 => VacuumPhase::VacuumingIndexes,
            3 => VacuumPhase::VacuumingHeap,
            4 => VacuumPhase::CleaningUpIndexes,
            5 => VacuumPhase::TruncatingHeap,
            6 => VacuumPhase::FinalCleanup,
            _ => VacuumPhase::Initializing,
        }
    }
}

/// Live progress of one running VACUUM (`pg_stat_progress_vacuum`).
#[derive(Debug, Default)]
pub struct VacuumProgress {
    pub relid: AtomicU32,
    phase: AtomicU8,
    pub heap_blks_total: AtomicU32,
    pub heap_blks_scanned: AtomicU32,
    pub heap_blks_vacuumed: AtomicU32,
    pub index_vacuum_count: AtomicU32,
    pub max_dead_tuple_bytes: AtomicU64,
    pub dead_tuple_bytes: AtomicU64,
    pub num_dead_item_ids: AtomicU64,
    pub indexes_total: AtomicU32,
    pub indexes_processed: AtomicU32,
    pub autovacuum: std::sync::atomic::AtomicBool,
}

/// A copy of one row of `pg_stat_progress_vacuum`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgressRow {
    pub relname: String,
    pub phase: &'static str,
    pub heap_blks_total: u32,
    pub heap_blks_scanned: u32,
    pub heap_blks_vacuumed: u32,
    pub index_vacuum_count: u32,
    pub max_dead_tuple_bytes: u64,
    pub dead_tuple_bytes: u64,
    pub num_dead_item_ids: u64,
    pub indexes_total: u32,
    pub indexes_processed: u32,
    pub autovacuum: bool,
}

impl VacuumProgress {
    fn set_phase(&self, p: VacuumPhase) {
        self.phase.store(p as u8, Ordering::Relaxed);
    }

    pub fn phase(&self) -> VacuumPhase {
        VacuumPhase::from_u8(self.phase.load(Ordering::Relaxed))
    }
}

impl Database {
    /// `VACUUM [table]`: vacuums one table, or every table (the catalog included) when `table`
    /// is `None`. Returns one report per table; `params.verbose` only decides what callers
    /// print (see [`VacuumReport::verbose_text`]).
    pub fn vacuum(&self, table: Option<&str>, params: &VacuumParams) -> Result<Vec<VacuumReport>> {
        let inner = self.inner();
        let entries = match table {
            Some(name) => vec![inner
                .catalog
                .get(name)
                .ok_or_else(|| Error::NotFound(format!("relation \"{name}\" does not exist")))?],
            None => inner.catalog.tables(),
        };
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            out.push(vacuum_rel(inner, &e, params)?);
        }
        Ok(out)
    }

    /// The visibility map bits of every page of a table (`pg_visibility_map`):
    /// `(all_visible, all_frozen)` per block.
    pub fn visibility_map(&self, table: &crate::db::Table) -> Result<Vec<(bool, bool)>> {
        let inner = self.inner();
        let rel = &table.entry.rel;
        let n = inner.pool.smgr().nblocks(rel.relfilenode, Fork::Main)?;
        (0..n).map(|b| rel.vm.get(&inner.pool, BlockNumber(b)).map(|v| (v.all_visible(), v.all_frozen()))).collect()
    }

    /// The free space map category (free bytes / 32) of every page of a table
    /// (`pg_freespace`).
    pub fn free_space_map(&self, table: &crate::db::Table) -> Result<Vec<u8>> {
        let inner = self.inner();
        let rel = &table.entry.rel;
        let n = inner.pool.smgr().nblocks(rel.relfilenode, Fork::Main)?;
        (0..n).map(|b| rel.fsm.get(&inner.pool, BlockNumber(b))).collect()
    }

    /// Pins a heap page until the returned guard is dropped, as a cursor parked on the page
    /// does: VACUUM cannot get that page's cleanup lock meanwhile (tests and tools).
    pub fn pin_page(&self, table: &crate::db::Table, block: u32) -> Result<PagePin<'_>> {
        let inner = self.inner();
        let n = inner.pool.smgr().nblocks(table.entry.rel.relfilenode, Fork::Main)?;
        if block >= n {
            return Err(Error::NotFound(format!("block {block} of \"{}\" does not exist", table.name())));
        }
        Ok(PagePin { _buf: heap::read_page(&inner.env(), &table.entry.rel, BlockNumber(block), None)? })
    }

    /// `pg_stat_progress_vacuum`: one row per VACUUM running now.
    pub fn vacuum_progress(&self) -> Vec<ProgressRow> {
        let inner = self.inner();
        let list = inner.vacuum_progress.lock().clone();
        list.iter()
            .map(|p| {
                let oid = crate::types::Oid(p.relid.load(Ordering::Relaxed));
                ProgressRow {
                    relname: inner.catalog.get_by_oid(oid).map(|e| e.rel.name.clone()).unwrap_or_default(),
                    phase: p.phase().name(),
                    heap_blks_total: p.heap_blks_total.load(Ordering::Relaxed),
                    heap_blks_scanned: p.heap_blks_scanned.load(Ordering::Relaxed),
                    heap_blks_vacuumed: p.heap_blks_vacuumed.load(Ordering::Relaxed),
                    index_vacuum_count: p.index_vacuum_count.load(Ordering::Relaxed),
                    max_dead_tuple_bytes: p.max_dead_tuple_bytes.load(Ordering::Relaxed),
                    dead_tuple_bytes: p.dead_tuple_bytes.load(Ordering::Relaxed),
                    num_dead_item_ids: p.num_dead_item_ids.load(Ordering::Relaxed),
                    indexes_total: p.indexes_total.load(Ordering::Relaxed),
                    indexes_processed: p.indexes_processed.load(Ordering::Relaxed),
                    autovacuum: p.autovacuum.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

/// A pinned heap page (see [`Database::pin_page`]).
pub struct PagePin<'a> {
    _buf: Buffer<'a>,
}

/// Cost-based vacuum delay (`vacuum_delay_point`): page hits, misses and dirtyings cost
/// points; past the limit the vacuum sleeps `delay * balance / limit` (at most 4 × delay).
struct CostDelay {
    delay_ms: f64,
    limit: u32,
    hit: u64,
    miss: u64,
    dirty: u64,
    last: buffer::BufferUsage,
    balance: u64,
    slept: Duration,
}

impl CostDelay {
    fn point(&mut self) {
        if self.delay_ms <= 0.0 {
            return;
        }
        let now = buffer::my_usage();
        let d = now.since(self.last);
        self.last = now;
        self.balance += d.hits * self.hit + d.reads * self.miss + d.dirtied * self.dirty;
        if self.balance >= u64::from(self.limit) {
            let ms = (self.delay_ms * self.balance as f64 / f64::from(self.limit)).min(self.delay_ms * 4.0);
            let t = Duration::from_secs_f64(ms / 1000.0);
            std::thread::sleep(t);
            self.slept += t;
            self.balance = 0;
        }
    }
}

/// Registers a progress row for the duration of a vacuum.
struct ProgressGuard<'a> {
    inner: &'a Inner,
    p: Arc<VacuumProgress>,
}

impl Drop for ProgressGuard<'_> {
    fn drop(&mut self) {
        self.inner.vacuum_progress.lock().retain(|x| !Arc::ptr_eq(x, &self.p));
    }
}

/// The state of one lazy vacuum of one table (PostgreSQL's `LVRelState`).
struct LazyVacuum<'a> {
    inner: &'a Inner,
    env: HeapEnv<'a>,
    entry: &'a TableEntry,
    rel: &'a Relation,
    indexes: Vec<Arc<crate::catalog::IndexDef>>,
    cutoffs: Cutoffs,
    policy: FreezePolicy,
    fsm_settled: bool,
    aggressive: bool,
    skip_with_vm: bool,
    do_index_vacuuming: bool,
    do_index_cleanup: bool,
    consider_bypass: bool,
    failsafe: bool,
    failsafe_age: u32,
    dead: TidStore,
    dead_budget: usize,
    new_relfrozenxid: Xid,
    skipped_allvis: bool,
    nonempty_pages: u32,
    fsm_pending: Vec<(BlockNumber, u8)>,
    index_stats: Vec<BulkDeleteStats>,
    cost: CostDelay,
    progress: Arc<VacuumProgress>,
    r: VacuumReport,
    ring: Ring,
    /// The visibility map page of the pages being processed, kept pinned (`vmbuffer`).
    vm_pin: Option<Buffer<'a>>,
    /// For each page in the dead-item store, what phase I learned: its LSN when phase I let
    /// go of it, whether it will be all-visible once its LP_DEAD items are gone, and whether
    /// it is then all-frozen. Phase III trusts it when the page's LSN has not moved (no logged
    /// change since), instead of examining every tuple again.
    phase1: Vec<(u32, crate::types::Lsn, bool, bool)>,
}

/// Vacuums one table.
pub(crate) fn vacuum_rel(inner: &Inner, entry: &Arc<TableEntry>, params: &VacuumParams) -> Result<VacuumReport> {
    let start = Instant::now();
    let (cpu_u0, cpu_s0) = report::thread_cpu();
    let buf0 = buffer::my_usage();
    let wal0 = crate::wal::my_wal_usage();
    // One VACUUM per table at a time; DROP TABLE and CREATE INDEX wait for it (PostgreSQL's
    // ShareUpdateExclusiveLock).
    let _maint = entry.maintenance_lock.lock();
    if inner.catalog.get_by_oid(entry.rel.oid).is_none() {
        return Err(Error::NotFound(format!("relation \"{}\" was dropped", entry.rel.name)));
    }
    let config = &inner.config;
    let rel = &*entry.rel;
    let opts = &entry.options();
    let policy = params.policy.or(opts.vacuum_freeze_policy).unwrap_or(config.vacuum_freeze_policy);
    let fsm_settled = opts.vacuum_fsm_settled.or(config.vacuum_fsm_settled).unwrap_or(policy == FreezePolicy::Eager);

    // Cutoffs (PostgreSQL's vacuum_get_cutoffs).
    let oldest_xmin = inner.xact.oldest_xmin();
    let next_xid = inner.xact.next_full_xid().xid();
    // The table's autovacuum_freeze_* options apply to autovacuum only, as in PostgreSQL.
    let auto = |o: Option<u32>| if params.is_autovacuum { o } else { None };
    let freeze_max_age = auto(opts.autovacuum_freeze_max_age).unwrap_or(config.autovacuum_freeze_max_age);
    let freeze_min_age = if params.freeze {
        0
    } else {
        auto(opts.autovacuum_freeze_min_age).unwrap_or(config.vacuum_freeze_min_age).min(freeze_max_age / 2)
    };
    let freeze_table_age = if params.freeze {
        0
    } else {
        let t = auto(opts.autovacuum_freeze_table_age).unwrap_or(config.vacuum_freeze_table_age);
        t.min((f64::from(freeze_max_age) * 0.95) as u32)
    };
    let freeze_limit = normal_or_first(Xid(oldest_xmin.0.wrapping_sub(freeze_min_age)), oldest_xmin);
    let aggressive_limit = normal_or_first(Xid(next_xid.0.wrapping_sub(freeze_table_age)), next_xid);
    let relfrozenxid = entry.relfrozenxid();
    let aggressive = params.disable_page_skipping
        || params.is_wraparound
        || !relfrozenxid.is_normal()
        || relfrozenxid.precedes_or_equals(aggressive_limit);

    let (delay_ms, limit) = if params.is_autovacuum {
        (
            params
                .cost_delay_ms
                .or(opts.autovacuum_vacuum_cost_delay_ms)
                .unwrap_or(config.autovacuum_vacuum_cost_delay_ms),
            params.cost_limit.or(opts.autovacuum_vacuum_cost_limit).unwrap_or_else(|| config.autovacuum_cost_limit()),
        )
    } else {
        (
            params.cost_delay_ms.unwrap_or(config.vacuum_cost_delay_ms),
            params.cost_limit.unwrap_or(config.vacuum_cost_limit),
        )
    };
    let progress = Arc::new(VacuumProgress::default());
    progress.relid.store(rel.oid.0, Ordering::Relaxed);
    progress.autovacuum.store(params.is_autovacuum, Ordering::Relaxed);
    inner.vacuum_progress.lock().push(progress.clone());
    let _pg = ProgressGuard { inner, p: progress.clone() };
    let dead_budget = config.maintenance_work_mem_bytes;
    let indexes = entry.indexes.read().clone();
    let mut lv = LazyVacuum {
        inner,
        env: inner.env(),
        entry,
        rel,
        cutoffs: Cutoffs { oldest_xmin, freeze_limit },
        policy,
        fsm_settled,
        aggressive,
        skip_with_vm: !params.disable_page_skipping,
        do_index_vacuuming: params.index_cleanup != IndexCleanup::Off && !indexes.is_empty(),
        do_index_cleanup: params.index_cleanup != IndexCleanup::Off && !indexes.is_empty(),
        consider_bypass: params.index_cleanup == IndexCleanup::Auto,
        failsafe: false,
        failsafe_age: config.vacuum_failsafe_age.max((f64::from(freeze_max_age) * 1.05) as u32),
        index_stats: vec![BulkDeleteStats::default(); indexes.len()],
        indexes,
        dead: TidStore::new(dead_budget),
        dead_budget,
        new_relfrozenxid: oldest_xmin,
        skipped_allvis: false,
        nonempty_pages: 0,
        fsm_pending: Vec::new(),
        cost: CostDelay {
            delay_ms,
            limit: limit.max(1),
            hit: u64::from(config.vacuum_cost_page_hit),
            miss: u64::from(config.vacuum_cost_page_miss),
            dirty: u64::from(config.vacuum_cost_page_dirty),
            last: buf0,
            balance: 0,
            slept: Duration::ZERO,
        },
        progress,
        r: VacuumReport {
            table: rel.name.clone(),
            autovacuum: params.is_autovacuum,
            wraparound: params.is_wraparound,
            aggressive,
            policy: policy.name().to_string(),
            oldest_xmin,
            old_relfrozenxid: relfrozenxid,
            dead_items_limit: dead_budget as u64,
            index_vacuuming_skipped: params.index_cleanup == IndexCleanup::Off,
            ..Default::default()
        },
        ring: Ring::new(256 << 10),
        vm_pin: None,
        phase1: Vec::new(),
    };
    lv.check_failsafe();
    let orig_pages = inner.pool.smgr().nblocks(rel.relfilenode, Fork::Main)?;
    lv.r.orig_pages = orig_pages;
    lv.scan_heap(orig_pages)?;

    // Index cleanup and truncation.
    // An index has figures to report if it was bulk-deleted or its cleanup scanned it.
    let bulk_deleted = lv.r.num_index_scans > 0;
    let mut reported = vec![bulk_deleted; lv.indexes.len()];
    if lv.do_index_cleanup {
        lv.progress.set_phase(VacuumPhase::CleaningUpIndexes);
        for (i, ix) in lv.indexes.iter().enumerate() {
            reported[i] |= ix.btree.cleanup(&lv.env, &mut lv.index_stats[i], bulk_deleted)?;
        }
    }
    lv.r.indexes = lv
        .indexes
        .iter()
        .zip(&lv.index_stats)
        .zip(&reported)
        .filter(|(_, &r)| r)
        .map(|((d, s), _)| (d.name.clone(), *s))
        .collect();
    // Truncation drops the map's buffers past the new end: no pin may be held on them.
    lv.vm_pin = None;
    let truncate = params.truncate.or(opts.vacuum_truncate).unwrap_or(config.vacuum_truncate);
    let mut new_pages = orig_pages;
    if truncate && !lv.failsafe {
        new_pages = lv.truncate_heap(orig_pages)?;
    }
    lv.r.new_pages = new_pages;
    lv.r.removed_pages = orig_pages - new_pages;
    lv.progress.set_phase(VacuumPhase::FinalCleanup);

    // pg_class: relpages, reltuples, relfrozenxid.
    let scanned_all = lv.r.scanned_pages >= orig_pages;
    let reltuples = if scanned_all || orig_pages == 0 {
        lv.r.new_live_tuples as f64
    } else {
        estimate_reltuples(entry, orig_pages, lv.r.scanned_pages, lv.r.new_live_tuples)
    };
    lv.r.new_live_tuples = reltuples.round().max(0.0) as u64;
    let can_advance = lv.aggressive || !lv.skipped_allvis;
    let new_frozen = lv.new_relfrozenxid;
    let advance = can_advance
        && new_frozen.is_normal()
        && new_frozen != relfrozenxid
        && (!relfrozenxid.is_normal()
            || relfrozenxid.precedes(new_frozen)
            || inner.xact.next_full_xid().xid().precedes(relfrozenxid));
    let frozen_to_store = if advance { new_frozen } else { relfrozenxid };
    // Like vac_update_relstats, write only when something changed.
    let unchanged = entry.relpages.load(Ordering::Acquire) == new_pages
        && *entry.reltuples.lock() == reltuples
        && relfrozenxid == frozen_to_store;
    if !unchanged {
        update_pg_class(inner, entry, new_pages, reltuples, frozen_to_store)?;
    }
    if advance {
        lv.r.new_relfrozenxid = Some(new_frozen);
        update_database_frozen_xid(inner)?;
    }
    let end_next = inner.xact.next_full_xid().xid();
    lv.r.oldest_xmin_age_at_end = i64::from(end_next.0.wrapping_sub(oldest_xmin.0) as i32);
    lv.r.buffers = buffer::my_usage().since(buf0);
    let w = crate::wal::my_wal_usage();
    lv.r.wal =
        crate::wal::WalStats { records: w.records - wal0.records, fpi: w.fpi - wal0.fpi, bytes: w.bytes - wal0.bytes };
    let (cpu_u, cpu_s) = report::thread_cpu();
    lv.r.user_cpu = cpu_u.saturating_sub(cpu_u0);
    lv.r.system_cpu = cpu_s.saturating_sub(cpu_s0);
    lv.r.elapsed = start.elapsed();
    lv.r.delay_time = lv.cost.slept;
    lv.r.failsafe = lv.failsafe;
    entry.stats.report_vacuum(
        params.is_autovacuum,
        params.is_wraparound,
        lv.r.new_live_tuples,
        lv.r.recently_dead_tuples + lv.r.missed_dead_tuples,
        u64::from(lv.r.frozen_pages),
    );
    crate::db::autovacuum::note_changed(inner, entry);
    Ok(lv.r)
}

/// `x` if it is a normal XID not after `cap`, else FirstNormalTransactionId.
fn normal_or_first(x: Xid, cap: Xid) -> Xid {
    if !x.is_normal() || x.follows(cap) {
        Xid::FIRST_NORMAL
    } else {
        x
    }
}

/// `vac_estimate_reltuples`: scanned pages count exactly; the others keep the old density.
fn estimate_reltuples(entry: &TableEntry, total: u32, scanned: u32, scanned_tuples: u64) -> f64 {
    let old_pages = entry.relpages.load(Ordering::Acquire);
    let old_tuples = *entry.reltuples.lock();
    if old_tuples < 0.0 || old_pages == 0 {
        return scanned_tuples as f64 * f64::from(total) / f64::from(scanned.max(1));
    }
    let density = old_tuples / f64::from(old_pages);
    (density * f64::from(total - scanned.min(total)) + scanned_tuples as f64).floor()
}

impl LazyVacuum<'_> {
    fn check_failsafe(&mut self) -> bool {
        if self.failsafe {
            return true;
        }
        let next = self.inner.xact.next_full_xid().xid();
        let limit = Xid(next.0.wrapping_sub(self.failsafe_age));
        let rfx = self.entry.relfrozenxid();
        if limit.is_normal() && rfx.is_normal() && rfx.precedes(limit) {
            self.failsafe = true;
            self.do_index_vacuuming = false;
            self.do_index_cleanup = false;
            self.cost.delay_ms = 0.0;
            self.r.index_vacuuming_skipped = !self.indexes.is_empty();
        }
        self.failsafe
    }

    /// Phase I, with phases II and III whenever the dead-item store fills.
    fn scan_heap(&mut self, rel_pages: u32) -> Result<()> {
        self.progress.set_phase(VacuumPhase::ScanningHeap);
        self.progress.heap_blks_total.store(rel_pages, Ordering::Relaxed);
        self.progress.max_dead_tuple_bytes.store(self.dead_budget as u64, Ordering::Relaxed);
        let mut blk = 0u32;
        while blk < rel_pages {
            let mut end = blk + 1;
            if self.skip_with_vm {
                let (run, allvis_only) = self.skippable_run(blk, rel_pages)?;
                if run >= SKIP_PAGES_THRESHOLD {
                    self.skipped_allvis |= allvis_only;
                    blk += run;
                    continue;
                }
                // A short run is read, with the unskippable page after it.
                end = blk + run + 1;
            }
            while blk < end.min(rel_pages) {
                self.cost.point();
                if self.r.autovacuum && self.inner.shutdown.load(Ordering::Acquire) {
                    return Err(Error::invalid("canceling autovacuum task: the database is shutting down"));
                }
                if self.r.scanned_pages > 0 && self.r.scanned_pages.is_multiple_of(FAILSAFE_EVERY_PAGES) {
                    self.check_failsafe();
                }
                self.scan_page(BlockNumber(blk))?;
                self.r.scanned_pages += 1;
                self.progress.heap_blks_scanned.store(blk + 1, Ordering::Relaxed);
                blk += 1;
            }
            if self.fsm_pending.len() >= FSM_BATCH {
                self.flush_fsm()?;
            }
        }
        self.flush_fsm()?;
        // The last round of index and heap vacuuming.
        if self.dead.num_tids() > 0 {
            let bypass = self.consider_bypass
                && self.r.num_index_scans == 0
                && f64::from(self.r.lpdead_item_pages) < f64::from(rel_pages) * BYPASS_THRESHOLD_PAGES
                && self.dead.memory_bytes() < BYPASS_MAX_BYTES;
            if bypass {
                self.do_index_vacuuming = false;
                self.r.index_vacuuming_skipped = true;
                self.r.dead_items_bytes_total += self.dead.memory_bytes() as u64;
            } else {
                self.vacuum_cycle()?;
            }
        }
        Ok(())
    }

    /// The length of the run of skippable pages starting at `blk` (the last page of the
    /// table is never skippable), and whether any of them is all-visible but not all-frozen.
    fn skippable_run(&mut self, blk: u32, rel_pages: u32) -> Result<(u32, bool)> {
        let mut n = 0;
        let mut allvis_only = false;
        let mut b = blk;
        while b + 1 < rel_pages {
            let bits = self.rel.vm.get_pinned(&self.inner.pool, BlockNumber(b), &mut self.vm_pin)?;
            let skippable = if self.aggressive { bits.all_frozen() } else { bits.all_visible() };
            if !skippable {
                break;
            }
            allvis_only |= !bits.all_frozen();
            n += 1;
            b += 1;
        }
        Ok((n, allvis_only))
    }

    fn fsm_category(&self, free: usize, all_visible: bool) -> u8 {
        if self.fsm_settled && all_visible && free <= BLCKSZ / 2 {
            0
        } else {
            fsm::avail_to_category(free)
        }
    }

    fn flush_fsm(&mut self) -> Result<()> {
        if !self.fsm_pending.is_empty() {
            self.rel.fsm.set_many(&self.inner.pool, &self.fsm_pending)?;
            self.fsm_pending.clear();
        }
        Ok(())
    }

    /// Phase I on one page.
    fn scan_page(&mut self, block: BlockNumber) -> Result<()> {
        let env = &self.inner.env();
        let buf = heap::read_page(env, self.rel, block, Some(&mut self.ring))?;
        // Our background writer pins pages for a moment while it writes them; give such a
        // pin a few microseconds to go away before settling for the no-prune path (PostgreSQL
        // tries once).
        let mut first = buf.try_cleanup_lock();
        for _ in 0..CLEANUP_LOCK_RETRIES {
            if first.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_micros(20));
            first = buf.try_cleanup_lock();
        }
        let cleanup = match first {
            Some(g) => Some(g),
            None => {
                // No cleanup lock: process the page read-only, unless an aggressive vacuum
                // finds XIDs it must freeze here.
                let g = buf.read();
                if page::is_new(&g.0) || page::max_offset(&g.0) == 0 {
                    drop(g);
                    Some(buf.cleanup_lock())
                } else {
                    match self.scan_noprune(block, &g.0)? {
                        Some(lpdead) => {
                            drop(g);
                            return self.remember_dead(block, lpdead);
                        }
                        None => {
                            drop(g);
                            Some(buf.cleanup_lock())
                        }
                    }
                }
            }
        };
        let Some(mut g) = cleanup else { return Ok(()) };
        let p = &mut g.0;
        if page::is_new(p) {
            // An extended page nobody initialized: all of it is free.
            self.fsm_pending.push((block, fsm::avail_to_category(BLCKSZ - page::PAGE_HEADER_SIZE)));
            return Ok(());
        }
        if page::max_offset(p) == 0 {
            // An empty page: all-visible and all-frozen, unless it is already.
            let bits = self.rel.vm.get_pinned(&self.inner.pool, block, &mut self.vm_pin)?;
            if !bits.all_frozen() || page::flags(p) & PD_ALL_VISIBLE == 0 {
                self.rel.vm.set_pinned(env, &buf, p, VmBits::VALID, &mut self.vm_pin)?;
                if !bits.all_visible() {
                    self.r.vm_new_visible_pages += 1;
                    self.r.vm_new_visible_frozen_pages += 1;
                } else {
                    self.r.vm_new_frozen_pages += 1;
                }
            }
            let cat = self.fsm_category(page::heap_free_space(p), true);
            self.fsm_pending.push((block, cat));
            return Ok(());
        }

        // Prune, unless the hint bits prove there is nothing to prune: a settled page (every
        // tuple's inserter known committed, no deleter) is only analyzed.
        let mut pruning_wrote_fpi = false;
        if may_need_pruning(p) {
            let fpi_before = crate::wal::my_wal_usage().fpi;
            let pruned = heap::prune_page(env, self.rel, &buf, p, self.cutoffs.oldest_xmin)?;
            pruning_wrote_fpi = crate::wal::my_wal_usage().fpi > fpi_before;
            self.r.tuples_deleted += u64::from(pruned.tuples_removed);
        }

        let mut scan = freeze::analyze_page(p, &self.cutoffs, &self.inner.xact)?;
        // Without indexes nothing points at LP_DEAD items: make them unused right away
        // (PostgreSQL's one-pass strategy).
        if self.indexes.is_empty() && !scan.lpdead.is_empty() {
            let offs: Vec<OffsetNumber> = scan.lpdead.iter().map(|&o| OffsetNumber(o)).collect();
            log_unused(env, self.rel, &buf, p, &offs)?;
            self.r.lpdead_item_pages += 1;
            self.r.lpdead_items += offs.len() as u64;
            scan.lpdead.clear();
        }
        let decision = freeze::decide(&scan, self.policy, scan.all_visible, pruning_wrote_fpi);
        if !decision.changes.is_empty() {
            let plans = wal::plans_from(&decision.changes);
            let main = wal::encode_freeze_for(&plans, p);
            wal::apply_freeze(p, &plans, crate::types::Lsn(0))?;
            let lsn = log_page_record(env, self.rel, block, p, wal_info::FREEZE_PAGE, main)?;
            page::set_lsn(p, lsn);
            buf.mark_dirty();
            if decision.tuples_frozen > 0 {
                self.r.frozen_pages += 1;
                self.r.tuples_frozen += decision.tuples_frozen;
            }
        }
        if let Some(x) = decision.oldest_left {
            if x.precedes(self.new_relfrozenxid) {
                self.new_relfrozenxid = x;
            }
        }
        self.r.new_live_tuples += scan.live;
        self.r.recently_dead_tuples += scan.recently_dead;
        if scan.hastup {
            self.nonempty_pages = block.0 + 1;
        }
        let has_lpdead = !scan.lpdead.is_empty();
        if has_lpdead {
            self.r.lpdead_item_pages += 1;
            self.r.lpdead_items += scan.lpdead.len() as u64;
        }
        let all_visible = scan.all_visible && !has_lpdead;
        self.update_vm(&buf, p, all_visible, all_visible && decision.all_frozen, has_lpdead)?;
        if !has_lpdead {
            let cat = self.fsm_category(page::heap_free_space(p), all_visible);
            self.fsm_pending.push((block, cat));
        }
        let seen = (block.0, page::lsn(p), scan.all_visible, decision.all_frozen);
        drop(g);
        drop(buf);
        if has_lpdead {
            self.remember_dead(block, scan.lpdead)?;
            self.phase1.push(seen);
        }
        Ok(())
    }

    /// Sets (or repairs) the page's visibility map bits after phase I or III.
    fn update_vm(
        &mut self,
        buf: &Buffer<'_>,
        p: &mut [u8],
        all_visible: bool,
        all_frozen: bool,
        has_lpdead: bool,
    ) -> Result<()> {
        let block = buf.block();
        let bits = self.rel.vm.get_pinned(&self.inner.pool, block, &mut self.vm_pin)?;
        let flag = page::flags(p) & PD_ALL_VISIBLE != 0;
        if all_visible {
            let want = if all_frozen { VmBits::VALID } else { VmBits::ALL_VISIBLE };
            if !bits.contains(want) || !flag {
                let env = self.inner.env();
                self.rel.vm.set_pinned(&env, buf, p, want, &mut self.vm_pin)?;
                if !bits.all_visible() {
                    self.r.vm_new_visible_pages += 1;
                    if all_frozen {
                        self.r.vm_new_visible_frozen_pages += 1;
                    }
                } else if all_frozen && !bits.all_frozen() {
                    self.r.vm_new_frozen_pages += 1;
                }
            }
        } else if (bits.all_visible() && !flag) || (flag && has_lpdead) || (bits.all_visible() && has_lpdead) {
            // The map (or the page flag) claims more than the page holds: repair it, as
            // PostgreSQL does with a warning.
            page::clear_flags(p, PD_ALL_VISIBLE);
            buf.mark_dirty();
            self.rel.vm.clear(&self.env, block, VmBits::VALID)?;
        }
        Ok(())
    }

    /// `lazy_scan_noprune`: a page whose cleanup lock is taken. Returns its LP_DEAD offsets,
    /// or `None` when an aggressive vacuum must wait for the lock and freeze.
    fn scan_noprune(&mut self, block: BlockNumber, p: &[u8]) -> Result<Option<Vec<u16>>> {
        use crate::heap::visibility::{satisfies_vacuum, VacuumStatus};
        let mut lpdead = Vec::new();
        let mut oldest: Option<Xid> = None;
        let (mut live, mut recently_dead, mut missed, mut hastup) = (0u64, 0u64, 0u64, false);
        for o in 1..=page::max_offset(p) {
            let off = OffsetNumber(o);
            match page::item_id(p, off).flags {
                LpFlags::Unused => continue,
                LpFlags::Redirect => {
                    hastup = true;
                    continue;
                }
                LpFlags::Dead => {
                    lpdead.push(o);
                    continue;
                }
                LpFlags::Normal => {}
            }
            hastup = true;
            let Some(h) = page::try_item(p, off).and_then(TupleHeader::parse) else { continue };
            if freeze::oldest_unfrozen(&h, &mut oldest, self.cutoffs.freeze_limit) && self.aggressive {
                return Ok(None);
            }
            match satisfies_vacuum(&h, self.cutoffs.oldest_xmin, &self.inner.xact)? {
                VacuumStatus::Dead => missed += 1,
                VacuumStatus::RecentlyDead => recently_dead += 1,
                VacuumStatus::Live | VacuumStatus::DeleteInProgress => live += 1,
                VacuumStatus::InsertInProgress => {}
            }
        }
        if let Some(x) = oldest {
            if x.precedes(self.new_relfrozenxid) {
                self.new_relfrozenxid = x;
            }
        }
        if self.indexes.is_empty() && !lpdead.is_empty() {
            // One-pass strategy without a cleanup lock: count them as missed.
            missed += lpdead.len() as u64;
            lpdead.clear();
        }
        self.r.new_live_tuples += live;
        self.r.recently_dead_tuples += recently_dead;
        if missed > 0 {
            self.r.missed_dead_tuples += missed;
            self.r.missed_dead_pages += 1;
        }
        if hastup {
            self.nonempty_pages = block.0 + 1;
        }
        if !lpdead.is_empty() {
            self.r.lpdead_item_pages += 1;
            self.r.lpdead_items += lpdead.len() as u64;
        } else {
            self.fsm_pending.push((block, fsm::avail_to_category(page::heap_free_space(p))));
        }
        Ok(Some(lpdead))
    }

    /// Adds one page's LP_DEAD offsets to the store, running phases II and III first when it
    /// is full.
    fn remember_dead(&mut self, block: BlockNumber, lpdead: Vec<u16>) -> Result<()> {
        if lpdead.is_empty() {
            return Ok(());
        }
        if self.dead.add_page(block.0, &lpdead).is_err() {
            self.flush_fsm()?;
            self.vacuum_cycle()?;
            self.progress.set_phase(VacuumPhase::ScanningHeap);
            if self.dead.add_page(block.0, &lpdead).is_err() {
                return Err(Error::invalid(format!(
                    "maintenance_work_mem ({} bytes) cannot hold the dead items of one heap page",
                    self.dead_budget
                )));
            }
        }
        self.progress.dead_tuple_bytes.store(self.dead.memory_bytes() as u64, Ordering::Relaxed);
        self.progress.num_dead_item_ids.store(self.dead.num_tids(), Ordering::Relaxed);
        Ok(())
    }

    /// Phases II and III for what the store holds, then resets it.
    fn vacuum_cycle(&mut self) -> Result<()> {
        self.dead.freeze();
        self.r.dead_items_bytes_total += self.dead.memory_bytes() as u64;
        self.r.dead_items_resets += 1;
        if self.do_index_vacuuming && !self.check_failsafe() {
            self.vacuum_indexes()?;
            self.vacuum_heap()?;
        }
        self.phase1.clear();
        self.dead.reset();
        self.progress.dead_tuple_bytes.store(0, Ordering::Relaxed);
        self.progress.num_dead_item_ids.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Phase II: every index loses its entries for the stored TIDs.
    fn vacuum_indexes(&mut self) -> Result<()> {
        self.progress.set_phase(VacuumPhase::VacuumingIndexes);
        self.progress.indexes_total.store(self.indexes.len() as u32, Ordering::Relaxed);
        self.progress.indexes_processed.store(0, Ordering::Relaxed);
        let mut bits = Vec::new();
        let mut probe = Vec::new();
        for (i, ix) in self.indexes.iter().enumerate() {
            let dead = &self.dead;
            let cost = &mut self.cost;
            let mut is_dead = |tids: &[Tid], out: &mut [bool]| {
                probe.clear();
                probe.extend(tids.iter().map(|t| tidstore::Tid::new(t.block.0, t.offset.0)));
                bits.clear();
                bits.resize(tids.len().div_ceil(64), 0u64);
                dead.contains_many(&probe, &mut bits);
                for (j, o) in out.iter_mut().enumerate() {
                    *o = bits[j / 64] >> (j % 64) & 1 == 1;
                }
                cost.point();
            };
            ix.btree.bulk_delete(&self.env, &mut is_dead, &mut self.index_stats[i])?;
            self.progress.indexes_processed.store(i as u32 + 1, Ordering::Relaxed);
        }
        self.r.num_index_scans += 1;
        self.progress.index_vacuum_count.store(self.r.num_index_scans, Ordering::Relaxed);
        Ok(())
    }

    /// Phase III: LP_DEAD -> LP_UNUSED on every page in the store, then VM and FSM.
    fn vacuum_heap(&mut self) -> Result<()> {
        self.progress.set_phase(VacuumPhase::VacuumingHeap);
        let mut pages: Vec<(u32, Vec<u16>)> = Vec::new();
        self.dead.for_each_page(&mut |b, offs| pages.push((b, offs.to_vec())));
        for (b, offs) in pages {
            self.cost.point();
            let block = BlockNumber(b);
            let env = self.inner.env();
            let buf = heap::read_page(&env, self.rel, block, Some(&mut self.ring))?;
            let mut g = buf.write();
            let p = &mut g.0;
            let offs: Vec<OffsetNumber> = offs.into_iter().map(OffsetNumber).collect();
            let unchanged = self
                .phase1
                .binary_search_by_key(&b, |e| e.0)
                .ok()
                .map(|i| self.phase1[i])
                .filter(|e| e.1 == page::lsn(p));
            log_unused(&env, self.rel, &buf, p, &offs)?;
            let (all_visible, all_frozen, has_lpdead) = match unchanged {
                Some((_, _, visible, frozen)) => (visible, visible && frozen, false),
                None => {
                    let scan = freeze::analyze_page(p, &self.cutoffs, &self.inner.xact)?;
                    let visible = scan.all_visible && scan.lpdead.is_empty();
                    (visible, visible && scan.is_fully_frozen(), !scan.lpdead.is_empty())
                }
            };
            self.update_vm(&buf, p, all_visible, all_frozen, has_lpdead)?;
            let cat = self.fsm_category(page::heap_free_space(p), all_visible);
            self.fsm_pending.push((block, cat));
            drop(g);
            self.progress.heap_blks_vacuumed.fetch_add(1, Ordering::Relaxed);
        }
        self.flush_fsm()
    }

    /// Truncates empty pages at the end of the table; returns the new page count.
    fn truncate_heap(&mut self, rel_pages: u32) -> Result<u32> {
        let freeable = rel_pages.saturating_sub(self.nonempty_pages);
        if freeable == 0 || (freeable < REL_TRUNCATE_MINIMUM && freeable < rel_pages / REL_TRUNCATE_FRACTION) {
            return Ok(rel_pages);
        }
        self.progress.set_phase(VacuumPhase::TruncatingHeap);
        let mut current = rel_pages;
        loop {
            let deadline = Instant::now() + TRUNCATE_LOCK_TIMEOUT;
            let lock = loop {
                if let Some(l) = self.rel.write_lock.try_write() {
                    break Some(l);
                }
                if Instant::now() >= deadline {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let Some(_lock) = lock else { return Ok(current) };
            let env = &self.inner.env();
            let nblocks = env.pool.smgr().nblocks(self.rel.relfilenode, Fork::Main)?;
            if nblocks != current {
                // The table grew meanwhile: its new pages are not empty.
                return Ok(current);
            }
            // Walk back over empty pages while no one needs the lock for long.
            let started = Instant::now();
            let mut new_end = current;
            let mut gave_way = false;
            while new_end > self.nonempty_pages {
                if (current - new_end).is_multiple_of(32) && started.elapsed() > TRUNCATE_LOCK_HOLD {
                    gave_way = true;
                    break;
                }
                let b = BlockNumber(new_end - 1);
                let buf = heap::read_page(env, self.rel, b, Some(&mut self.ring))?;
                let g = buf.read();
                let empty =
                    page::is_new(&g.0) || page::item_ids(&g.0).iter().all(|(_, id)| id.flags == LpFlags::Unused);
                if !empty {
                    self.nonempty_pages = new_end;
                    break;
                }
                new_end -= 1;
            }
            if new_end < current {
                // The maps first: their bits for the removed pages are cleared by records that
                // precede the heap's truncation record, so no crash can leave a map claiming
                // pages past the heap's end (a re-extended page would inherit the bits).
                self.rel.vm.truncate(env, new_end)?;
                self.rel.fsm.truncate(&self.inner.pool, new_end)?;
                let lsn = env.wal.insert(&RecordBuilder {
                    rmgr: Rmgr::Storage,
                    info: crate::wal::STORAGE_TRUNCATE,
                    xid: Xid::INVALID,
                    blocks: vec![],
                    main_data: crate::wal::storage_main_data(self.rel.relfilenode, Fork::Main, Some(new_end)),
                })?;
                env.wal.flush(lsn)?;
                env.pool.drop_relation_buffers(self.rel.relfilenode, Some(Fork::Main), BlockNumber(new_end))?;
                // Logged and its buffers dropped: a truncation that may not be durable stops
                // the engine (PostgreSQL truncates in a critical section).
                env.pool
                    .smgr()
                    .truncate(self.rel.relfilenode, Fork::Main, new_end)
                    .map_err(|e| env.wal.poison_after("truncating a relation file", e))?;
                self.r.truncated = Some((self.r.truncated.map_or(current, |t| t.0), new_end));
                current = new_end;
            }
            if !gave_way || current <= self.nonempty_pages {
                return Ok(current);
            }
        }
    }
}

/// Whether pruning could remove anything: some tuple lacks the hints that prove it live to
/// everyone who could look (its inserter committed, no deleter). A tuple without them may be
/// dead (aborted inserter, committed deleter), or part of a HOT chain that is.
fn may_need_pruning(p: &[u8]) -> bool {
    use crate::heap::tuple::{HEAP_XMAX_INVALID, HEAP_XMIN_COMMITTED};
    let hinted = HEAP_XMIN_COMMITTED | HEAP_XMAX_INVALID;
    (1..=page::max_offset(p)).map(OffsetNumber).any(|o| {
        page::item_id(p, o).flags == LpFlags::Normal
            && page::try_item(p, o).and_then(TupleHeader::parse).is_none_or(|h| h.infomask() & hinted != hinted)
    })
}

/// Record kinds VACUUM writes (info bits of rmgr Heap2).
pub mod wal_info {
    pub const VACUUM: u8 = crate::heap::wal::XLOG_HEAP2_VACUUM;
    pub const FREEZE_PAGE: u8 = crate::heap::wal::XLOG_HEAP2_FREEZE_PAGE;
}

fn log_page_record(
    env: &HeapEnv<'_>,
    rel: &Relation,
    block: BlockNumber,
    p: &[u8],
    info: u8,
    main: Vec<u8>,
) -> Result<crate::types::Lsn> {
    env.wal.insert(&RecordBuilder {
        rmgr: Rmgr::Heap2,
        info,
        xid: Xid::INVALID,
        blocks: vec![BlockRef { id: 0, tag: rel.tag(block), will_init: false, page: Some(p), data: vec![] }],
        main_data: main,
    })
}

/// Phase III on one locked page: LP_DEAD -> LP_UNUSED, logged.
fn log_unused(env: &HeapEnv<'_>, rel: &Relation, buf: &Buffer<'_>, p: &mut [u8], offs: &[OffsetNumber]) -> Result<()> {
    wal::apply_unused(p, offs, crate::types::Lsn(0))?;
    let lsn = log_page_record(env, rel, buf.block(), p, wal_info::VACUUM, wal::encode_unused(offs))?;
    page::set_lsn(p, lsn);
    buf.mark_dirty();
    Ok(())
}

/// Writes relpages, reltuples and relfrozenxid into the table's `pg_class` row in place
/// (PostgreSQL's `vac_update_relstats`, a non-transactional update): the row keeps its TID
/// and size, and the change is one Heap INPLACE record.
pub(crate) fn update_pg_class(
    inner: &Inner,
    entry: &Arc<TableEntry>,
    relpages: u32,
    reltuples: f64,
    relfrozenxid: Xid,
) -> Result<()> {
    let pgc = inner.catalog.get_by_oid(PG_CLASS_OID).ok_or_else(|| Error::invalid("pg_class is not loaded"))?;
    let env = inner.env();
    let tid = *entry.row.lock();
    let buf = heap::read_page(&env, &pgc.rel, tid.block, None)?;
    let mut g = buf.write();
    let p = &mut g.0;
    let bad = || {
        Error::corrupted(
            PG_CLASS_OID,
            tid.block,
            format!("pg_class row {tid} of \"{}\" is not a tuple", entry.rel.name),
        )
    };
    if tid.offset.0 == 0 || tid.offset.0 > page::max_offset(p) || page::item_id(p, tid.offset).flags != LpFlags::Normal
    {
        return Err(bad());
    }
    let old = page::item(p, tid.offset);
    let h = TupleHeader::parse(old).ok_or_else(bad)?;
    let hoff = usize::from(h.hoff());
    let vals = tuple::deform_tuple(&pgc.rel.schema, old).map_err(|e| Error::corrupted(PG_CLASS_OID, tid.block, e))?;
    let mut row = ClassRow::from_values(&vals, tid)?;
    row.relpages = relpages.min(i32::MAX as u32) as i32;
    row.reltuples = reltuples;
    row.relfrozenxid = relfrozenxid;
    let new = tuple::form_tuple(&pgc.rel.schema, &row.to_values())?;
    let new_hoff = usize::from(TupleHeader::parse(&new).ok_or_else(bad)?.hoff());
    if new.len() - new_hoff != old.len() - hoff {
        return Err(Error::invalid("pg_class row changed size in an in-place update"));
    }
    let body = new[new_hoff..].to_vec();
    page::item_mut(p, tid.offset)[hoff..].copy_from_slice(&body);
    let lsn = env.wal.insert(&RecordBuilder {
        rmgr: Rmgr::Heap,
        info: crate::heap::wal::XLOG_HEAP_INPLACE,
        xid: Xid::INVALID,
        blocks: vec![BlockRef { id: 0, tag: pgc.rel.tag(tid.block), will_init: false, page: Some(p), data: body }],
        main_data: tid.offset.0.to_le_bytes().to_vec(),
    })?;
    page::set_lsn(p, lsn);
    buf.mark_dirty();
    drop(g);
    entry.relpages.store(relpages, Ordering::Release);
    *entry.reltuples.lock() = reltuples;
    inner.catalog.set_relfrozenxid(entry, relfrozenxid, inner.xact.next_full_xid());
    Ok(())
}

/// `vac_update_datfrozenxid` + `vac_truncate_clog`: the database frozen XID is the oldest
/// relfrozenxid, read in O(1) from the catalog's ordered index (no scan of `pg_class`; see
/// [`dbstats`] for the scan); the XID limits follow it and CLOG below it is removed.
pub(crate) fn update_database_frozen_xid(inner: &Inner) -> Result<()> {
    let Some(oldest) = inner.catalog.database_frozen_xid() else { return Ok(()) };
    apply_database_frozen_xid(inner, oldest)
}

/// Moves the XID limits to a new database frozen XID and truncates CLOG below it (the
/// truncation is WAL-logged; the value reaches the control file at the next checkpoint).
pub(crate) fn apply_database_frozen_xid(inner: &Inner, oldest: Xid) -> Result<()> {
    inner.xact.set_oldest_xid(oldest, inner.config.autovacuum_freeze_max_age);
    inner.xact.truncate_clog(oldest, &*inner.wal)?;
    Ok(())
}
