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
//!  index cleanup, truncate empty tail pages (conditional AccessExclusive, giving way to waiters)
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
//! # One pass and one record per page
//!
//! Phase I reads each page once ([`scan`]): one pass classifies every tuple and sets its hint
//! bits, the prune plan comes from that (a page without HOT chains needs no chain walk), the
//! freeze decision is taken on the pruned page from the same classification ([`freeze`]),
//! and pruning, freezing and the visibility map bits go to WAL as one PRUNE_FREEZE record
//! ([`wal`]); a page that needs none of them (a settled page an aggressive or
//! `DISABLE_PAGE_SKIPPING` scan reads again) logs nothing. Such a page, all-visible and
//! holding only tuples hinted committed and never deleted, is not classified at all: one
//! walk summarizes it for the freeze decision ([`freeze::summarize_plain`]), and the prune
//! pass runs only when that walk meets anything else. Phase III ([`reap`]) logs one
//! VACUUM record per page that also sets the map bits. PostgreSQL 17 merged pruning and
//! freezing the same way, PostgreSQL 19 the map bits.
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
//! # What VACUUM borrows of the database
//!
//! The pool, WAL, transaction manager, catalog, lock manager and settings come in a
//! [`VacuumEnv`], which `db` builds for each run, with the progress registry, the shutdown
//! flag, and a [`TableChanged`] to tell autovacuum which tables' statistics moved. VACUUM
//! imports nothing of `db`; the `Database` methods that run it live there.
//!
//! # Crash safety
//!
//! Every page change is WAL-logged (PRUNE_FREEZE, VACUUM, VISIBLE for empty pages, VM_CLEAR,
//! Storage TRUNCATE, and the in-place pg_class update), so a crash anywhere leaves each page as
//! one of its logged states: LP_DEAD items become LP_UNUSED only after every index lost its
//! entries for them (DESIGN.md invariant 3), and a VM bit is set by the same record that sets
//! `PD_ALL_VISIBLE` after the page's tuples are visible to all (invariant 4); the record names
//! the heap page as block 0 and the map page as block 1, locked in that order and stamped
//! with the same LSN. The FSM is a hint and may lose its latest values.

pub mod adaptive;
pub mod dbstats;
mod driver;
pub mod freeze;
mod parallel;
mod reap;
pub mod report;
mod scan;
mod truncate;
pub mod wal;

pub(crate) use driver::vacuum_rel;

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tidstore::{DeadTids, TidStore};

use crate::buffer;
use crate::catalog::{ClassRow, TableEntry, PG_CLASS_OID};
use crate::config::FreezePolicy;
use crate::error::{Error, Result};
use crate::heap::tuple::{self, TupleHeader};
use crate::heap::{self, HeapEnv, Relation};
use crate::index::{BulkDeleteStats, IndexAm};
use crate::lmgr::{LockMode, LockOwner, WaitPolicy};
use crate::page::{self, LpFlags, BLCKSZ};
use crate::types::{Fork, Xid};
use crate::wal::{BlockRef, RecordBuilder, Rmgr};
use freeze::Cutoffs;
use reap::Seen;
pub use report::{VacuumReport, DATABASE_NAME};
use scan::{Ctx, DeadPage, DeferredLimits, ScanCounts, SkipRule, Usage, Worker};

/// What VACUUM needs of the database it runs in, borrowed from it. `db` builds one for each
/// VACUUM (`Inner::vacuum_env`) and answers [`TableChanged`]; VACUUM imports nothing of `db`.
#[derive(Clone, Copy)]
pub(crate) struct VacuumEnv<'a> {
    pub pool: &'a buffer::BufferPool,
    pub wal: &'a crate::wal::Wal,
    pub xact: &'a crate::xact::TransactionManager,
    pub catalog: &'a crate::catalog::Catalog,
    pub lmgr: &'a crate::lmgr::LockManager,
    pub config: &'a crate::config::LiveConfig,
    /// The VACUUMs running now (`pg_stat_progress_vacuum`).
    pub progress: &'a parking_lot::Mutex<Vec<Arc<VacuumProgress>>>,
    /// The database is closing: an autovacuum stops where it is.
    pub shutdown: &'a std::sync::atomic::AtomicBool,
    pub changed: &'a dyn TableChanged,
}

impl<'a> VacuumEnv<'a> {
    /// The parts the heap's functions take.
    pub fn heap(&self) -> HeapEnv<'a> {
        HeapEnv { pool: self.pool, wal: self.wal, xact: self.xact }
    }
}

/// Told of every table whose statistics a VACUUM changed (autovacuum reconsiders it).
pub(crate) trait TableChanged: Sync {
    fn table_changed(&self, entry: &TableEntry);
}

/// The failsafe is rechecked every 4 GB of heap (`FAILSAFE_EVERY_PAGES`).
const FAILSAFE_EVERY_PAGES: u32 = ((4u64 << 30) / BLCKSZ as u64) as u32;
/// Index vacuuming is bypassed when fewer than 2% of pages have LP_DEAD items.
const BYPASS_THRESHOLD_PAGES: f64 = 0.02;
/// ... and the dead items take less than this.
const BYPASS_MAX_BYTES: usize = 32 << 20;
/// Phase I hands out the table in chunks of this many pages: to parallel workers, and (for
/// the leader alone too) the unit after which its pages' dead items enter the store.
const CHUNK_PAGES: u32 = 256;

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
    /// `PARALLEL n`: at most `n` worker threads beside the leader for the heap's phases I and
    /// III; `Some(0)` runs without; `None` sizes by the table (see [`parallel`]).
    pub parallel: Option<u32>,
    /// Overrides the cost delay (milliseconds) and limit; `None` takes `vacuum_cost_delay`
    /// and `vacuum_cost_limit` (or the autovacuum ones).
    pub cost_delay_ms: Option<f64>,
    pub cost_limit: Option<u32>,
    /// `SKIP_LOCKED`: do not wait for the table's lock; a table whose lock is held is
    /// [`Error::LockNotAvailable`] (as autovacuum always does).
    pub skip_locked: bool,
    /// Checked while waiting for the table's lock, before each heap page phases I and III
    /// read, and before each index's bulk deletion and cleanup (one index's pass runs to its
    /// end): when it says stop, the VACUUM ends with [`Error::Interrupted`]. What it did so
    /// far stays (pages pruned, frozen or marked all-visible, index entries removed); the
    /// table's statistics and `relfrozenxid` are left as they were.
    pub interrupt: Option<crate::error::Interrupt>,
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

/// Cost-based vacuum delay (`vacuum_delay_point`): page hits, misses and dirtyings cost
/// points; past the limit the vacuum sleeps `delay * balance / limit` (at most 4 × delay).
#[derive(Clone)]
struct CostDelay {
    delay_ms: f64,
    limit: u32,
    hit: u64,
    miss: u64,
    dirty: u64,
    last: buffer::BufferUsage,
    balance: u64,
    slept: Duration,
    /// The VACUUM's [`VacuumParams::interrupt`].
    interrupt: Option<crate::error::Interrupt>,
}

impl CostDelay {
    /// The delay one of `threads` threads sharing this one's limit applies (each counts
    /// against `limit / threads`), starting from the calling thread's buffer usage.
    fn share(&self, threads: usize) -> CostDelay {
        CostDelay {
            limit: (self.limit / threads.max(1) as u32).max(1),
            balance: 0,
            slept: Duration::ZERO,
            last: buffer::BufferUsage::default(),
            ..self.clone()
        }
    }

    /// `vacuum_delay_point`: the interrupt check, then the delay.
    fn point(&mut self) -> Result<()> {
        if let Some(i) = &self.interrupt {
            i.check()?;
        }
        self.delay();
        Ok(())
    }

    /// The delay alone, where an error cannot be returned (inside an index's bulk deletion).
    fn delay(&mut self) {
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
    db: VacuumEnv<'a>,
    p: Arc<VacuumProgress>,
}

impl Drop for ProgressGuard<'_> {
    fn drop(&mut self) {
        self.db.progress.lock().retain(|x| !Arc::ptr_eq(x, &self.p));
    }
}

/// The state of one lazy vacuum of one table (PostgreSQL's `LVRelState`).
struct LazyVacuum<'a> {
    db: VacuumEnv<'a>,
    /// This VACUUM's lock owner (ShareUpdateExclusive; truncation adds AccessExclusive).
    locks: &'a LockOwner,
    env: HeapEnv<'a>,
    entry: &'a TableEntry,
    rel: &'a Relation,
    indexes: Vec<Arc<crate::catalog::IndexDef>>,
    cutoffs: Cutoffs,
    policy: FreezePolicy,
    /// `adaptive`: what VACUUM freezes in each range of pages, judged when it starts, and the
    /// deferred FreezeLimits for pages where freezing does not stick.
    verdicts: Option<Arc<adaptive::Verdicts>>,
    deferred_freeze_limits: Option<DeferredLimits>,
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
    index_stats: Vec<BulkDeleteStats>,
    progress: Arc<VacuumProgress>,
    r: VacuumReport,
    /// The leader's own tools and counters (phases I and III run on it).
    leader: Worker<'a>,
    /// Phase I's counts from every worker that has finished, the leader's not yet included.
    counts: ScanCounts,
    /// For each page in the dead-item store, what phase I learned of it (sorted by block).
    phase1: Vec<Seen>,
    /// Buffers, WAL and CPU used by parallel workers, and the time their cost delay slept.
    helpers: Usage,
    helpers_slept: Duration,
    /// Worker threads beside the leader for phases I, II and III.
    nworkers: usize,
    /// Phase II splits an index among the threads only from this many pages on
    /// (`min_parallel_index_scan_size`).
    min_parallel_index_pages: u32,
}

/// `x` if it is a normal XID not after `cap`, else FirstNormalTransactionId.
pub(crate) fn normal_or_first(x: Xid, cap: Xid) -> Xid {
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

impl<'a> LazyVacuum<'a> {
    fn check_failsafe(&mut self) -> bool {
        if self.failsafe {
            return true;
        }
        let next = self.db.xact.next_full_xid().xid();
        let limit = Xid(next.0.wrapping_sub(self.failsafe_age));
        let rfx = self.entry.relfrozenxid();
        if limit.is_normal() && rfx.is_normal() && rfx.precedes(limit) {
            self.failsafe = true;
            self.do_index_vacuuming = false;
            self.do_index_cleanup = false;
            self.leader.cost.delay_ms = 0.0;
            self.r.index_vacuuming_skipped = !self.indexes.is_empty();
        }
        self.failsafe
    }

    /// What every worker reads (the progress row is passed in so that `self` stays free).
    fn ctx<'c>(&self, progress: &'c VacuumProgress) -> Ctx<'c>
    where
        'a: 'c,
    {
        Ctx {
            db: self.db,
            rel: self.rel,
            cutoffs: self.cutoffs,
            policy: self.policy,
            verdicts: self.verdicts.clone(),
            deferred_freeze_limits: self.deferred_freeze_limits,
            fsm_settled: self.fsm_settled,
            aggressive: self.aggressive,
            has_indexes: !self.indexes.is_empty(),
            progress,
        }
    }

    /// Learns what the table's modifications taught since its last VACUUM (every VACUUM does,
    /// whatever its policy, so that switching to `adaptive` finds the history warm) and, under
    /// `adaptive`, takes the verdict per range and the deferred FreezeLimits
    /// (`ages` = (freeze_table_age, freeze_min_age)).
    ///
    /// An aggressive VACUUM takes the deferred FreezeLimits too when only its table's age
    /// made it aggressive (`defer_when_aggressive`), not an anti-wraparound one or
    /// DISABLE_PAGE_SKIPPING (see [`freeze`]).
    fn learn_freeze_history(
        &mut self,
        orig_pages: u32,
        next_xid: Xid,
        max_failure_rate: f64,
        ages: (u32, u32),
        defer_when_aggressive: bool,
    ) -> Result<()> {
        let visible = self.rel.vm.count_visible_by_range(self.db.pool, orig_pages, adaptive::RANGE_PAGES)?;
        let cleared = self.rel.vm_clears_by_range.take(visible.len());
        let verdicts = adaptive::history(self.rel).begin_vacuum(&visible, &cleared, max_failure_rate, next_xid);
        if self.policy == FreezePolicy::Adaptive {
            if !self.aggressive || defer_when_aggressive {
                // Counted back from the next XID, as the age that makes a VACUUM aggressive
                // is: counted from OldestXmin, a long transaction running at this VACUUM ate
                // into the margin (its XIDs behind the next one), and made the next VACUUM
                // aggressive. Never later than FreezeLimit.
                let freeze_limit = self.cutoffs.freeze_limit;
                let limit = |age: u32| {
                    let x = normal_or_first(Xid(next_xid.0.wrapping_sub(age)), next_xid);
                    if x.follows(freeze_limit) {
                        freeze_limit
                    } else {
                        x
                    }
                };
                self.deferred_freeze_limits = verdicts.interval_xids.map(|i| DeferredLimits {
                    untouched: limit(adaptive::deferred_freeze_age(ages.0, ages.1, i)),
                    modified: limit(adaptive::deferred_freeze_age_modified(ages.0, ages.1, i)),
                });
            }
            self.verdicts = Some(Arc::new(verdicts));
        }
        Ok(())
    }

    /// Which pages phase I may skip. `adaptive` reads the all-visible pages it left unfrozen,
    /// as an aggressive VACUUM does, so that they do not keep relfrozenxid back (see
    /// [`freeze`]).
    fn skip_rule(&self) -> Option<SkipRule> {
        let reads_all_visible = self.aggressive || self.policy == FreezePolicy::Adaptive;
        match (self.skip_with_vm, reads_all_visible) {
            (false, _) => None,
            (true, true) => Some(SkipRule::AllFrozen),
            (true, false) => Some(SkipRule::AllVisible),
        }
    }

    /// Phase I, with phases II and III whenever the dead-item store fills.
    fn scan_heap(&mut self, rel_pages: u32) -> Result<()> {
        self.progress.set_phase(VacuumPhase::ScanningHeap);
        self.progress.heap_blks_total.store(rel_pages, Ordering::Relaxed);
        self.progress.max_dead_tuple_bytes.store(self.dead_budget as u64, Ordering::Relaxed);
        if self.nworkers > 0 {
            self.scan_heap_parallel(rel_pages, self.nworkers)?;
        } else {
            self.scan_heap_serial(rel_pages)?;
        }
        // The last round of index and heap vacuuming.
        if self.dead.num_tids() > 0 {
            let bypass = self.consider_bypass
                && self.r.num_index_scans == 0
                && f64::from(self.leader.c.lpdead_item_pages + self.counts.lpdead_item_pages)
                    < f64::from(rel_pages) * BYPASS_THRESHOLD_PAGES
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

    /// Phase I by the leader alone, chunk after chunk.
    fn scan_heap_serial(&mut self, rel_pages: u32) -> Result<()> {
        let progress = self.progress.clone();
        let skip = self.skip_rule();
        let mut found = Vec::new();
        let mut start = 0;
        while start < rel_pages {
            let end = start.saturating_add(CHUNK_PAGES).min(rel_pages);
            let since = self.leader.c.scanned_pages;
            if since / FAILSAFE_EVERY_PAGES != (since + (end - start)) / FAILSAFE_EVERY_PAGES {
                self.check_failsafe();
            }
            let ctx = self.ctx(&progress);
            self.leader.scan_range(&ctx, skip, start, end, rel_pages, &mut |_, d| {
                found.push(d);
                Ok(())
            })?;
            self.absorb(&mut found)?;
            start = end;
        }
        let ctx = self.ctx(&progress);
        self.leader.flush_fsm(&ctx)
    }

    /// Shows the store's size in the progress row.
    fn publish_store_size(&self) {
        self.progress.dead_tuple_bytes.store(self.dead.memory_bytes() as u64, Ordering::Relaxed);
        self.progress.num_dead_item_ids.store(self.dead.num_tids(), Ordering::Relaxed);
    }

    /// Adds the dead items of pages phase I finished (in block order) to the store, running
    /// phases II and III first whenever it is full; `pages` is left empty.
    fn absorb(&mut self, pages: &mut Vec<DeadPage>) -> Result<()> {
        for d in pages.drain(..) {
            if self.dead.add_page(d.block, &d.offsets).is_err() {
                let progress = self.progress.clone();
                self.leader.flush_fsm(&self.ctx(&progress))?;
                self.vacuum_cycle()?;
                self.progress.set_phase(VacuumPhase::ScanningHeap);
                if self.dead.add_page(d.block, &d.offsets).is_err() {
                    return Err(Error::invalid(format!(
                        "maintenance_work_mem ({} bytes) cannot hold the dead items of one heap page",
                        self.dead_budget
                    )));
                }
            }
            self.phase1.push(Seen { block: d.block, lsn: d.lsn, visible: d.visible, frozen: d.frozen });
        }
        self.publish_store_size();
        Ok(())
    }

    /// Folds the leader's counts into the totals and the report.
    fn take_counts(&mut self) {
        let mine = std::mem::take(&mut self.leader.c);
        self.counts.merge(&mine);
        let c = &self.counts;
        let r = &mut self.r;
        r.scanned_pages = c.scanned_pages;
        r.tuples_deleted = c.tuples_deleted;
        r.new_live_tuples = c.new_live_tuples;
        r.recently_dead_tuples = c.recently_dead_tuples;
        r.missed_dead_tuples = c.missed_dead_tuples;
        r.missed_dead_pages = c.missed_dead_pages;
        r.frozen_pages = c.frozen_pages;
        r.tuples_frozen = c.tuples_frozen;
        r.vm_new_visible_pages = c.vm_new_visible_pages;
        r.vm_new_visible_frozen_pages = c.vm_new_visible_frozen_pages;
        r.vm_new_frozen_pages = c.vm_new_frozen_pages;
        r.lpdead_item_pages = c.lpdead_item_pages;
        r.lpdead_items = c.lpdead_items;
    }
}

/// Writes relpages, reltuples and relfrozenxid into the table's `pg_class` row in place
/// (PostgreSQL's `vac_update_relstats`, a non-transactional update): the row keeps its TID
/// and size, and the change is one Heap INPLACE record.
pub(crate) fn update_pg_class(
    db: VacuumEnv<'_>,
    entry: &Arc<TableEntry>,
    relpages: u32,
    reltuples: f64,
    relfrozenxid: Xid,
) -> Result<()> {
    let pgc = db.catalog.get_by_oid(PG_CLASS_OID).ok_or_else(|| Error::invalid("pg_class is not loaded"))?;
    let env = db.heap();
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
        toplevel_xid: crate::types::Xid::INVALID,
        rmgr: Rmgr::Heap,
        info: crate::heap::wal::XLOG_HEAP_INPLACE,
        xid: Xid::INVALID,
        blocks: vec![BlockRef {
            keep_data: false,
            id: 0,
            tag: pgc.rel.tag(tid.block),
            will_init: false,
            page: Some(p),
            data: body,
        }],
        main_data: tid.offset.0.to_le_bytes().to_vec(),
    })?;
    page::set_lsn(p, lsn);
    buf.mark_dirty();
    drop(g);
    entry.relpages.store(relpages, Ordering::Release);
    *entry.reltuples.lock() = reltuples;
    db.catalog.set_relfrozenxid(entry, relfrozenxid, db.xact.next_full_xid());
    Ok(())
}

/// `vac_update_datfrozenxid` + `vac_truncate_clog`: the database frozen XID is the oldest
/// relfrozenxid, read in O(1) from the catalog's ordered index (no scan of `pg_class`; see
/// [`dbstats`] for the scan); the XID limits follow it and CLOG below it is removed.
pub(crate) fn update_database_frozen_xid(db: VacuumEnv<'_>) -> Result<()> {
    apply_database_frozen_xid(db, |incremental| incremental)
}

/// Moves the XID limits to a new database frozen XID, `pick`ed from the catalog's (None:
/// leave them), and truncates CLOG below it (the truncation is WAL-logged; the value reaches
/// the control file at the next checkpoint). Concurrent callers take turns, so the limits
/// only ever follow the latest reading.
pub(crate) fn apply_database_frozen_xid(
    db: VacuumEnv<'_>,
    pick: impl FnOnce(Option<Xid>) -> Option<Xid>,
) -> Result<()> {
    let _one_at_a_time = db.catalog.frozen_ids_lock.lock();
    let Some(oldest) = pick(db.catalog.database_frozen_xid()) else { return Ok(()) };
    db.xact.set_oldest_xid(oldest, db.config.get().autovacuum_freeze_max_age);
    db.xact.truncate_clog(oldest, db.wal)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::config::Config;
    use crate::heap::tuple::{Column, Schema, Type};
    use crate::{Database, TableOptions, VacuumParams};

    /// A VACUUM that read the database frozen XID before another VACUUM moved it must not
    /// apply its older reading after the other applied the newer one: the limits would go
    /// back and stay there (nothing left to vacuum), and the other's CLOG truncation, above
    /// them, would fail. The reading is held open while the other VACUUM runs; the other must
    /// wait for it, and the limits end at the newest value.
    #[test]
    fn a_stale_reading_of_the_frozen_xid_never_moves_the_limits_back() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::from_pairs([("autovacuum", "off"), ("fsync", "off")]).unwrap();
        let db = Database::open(dir.path(), config).unwrap();
        let schema = Schema { columns: vec![Column { name: "a".into(), ty: Type::Int4, nullable: false }] };
        db.create_table("old", schema.clone(), TableOptions::default()).unwrap();
        db.create_table("young", schema, TableOptions::default()).unwrap();
        db.consume_xids(1000).unwrap();
        for t in ["pg_class", "young"] {
            db.vacuum(Some(t), &VacuumParams::default()).unwrap();
        }
        let stale = db.table("old").unwrap().relfrozenxid();
        assert_eq!(db.datfrozenxid(), stale, "\"old\" holds the database frozen XID back");

        let (done_tx, done_rx) = mpsc::channel();
        std::thread::scope(|s| {
            apply_database_frozen_xid(db.inner().vacuum_env(), |read| {
                assert_eq!(read, Some(stale));
                let db = &db;
                let done_tx = done_tx.clone();
                s.spawn(move || {
                    db.vacuum(Some("old"), &VacuumParams::default()).unwrap();
                    done_tx.send(()).unwrap();
                });
                // Give the other VACUUM every chance to finish first (it must not).
                let finished = done_rx.recv_timeout(Duration::from_millis(200)).is_ok();
                assert!(!finished, "a VACUUM moved the frozen XID while another held a reading of it");
                read
            })
            .unwrap();
        });
        let newest = db.datfrozenxid();
        assert!(stale.precedes(newest), "vacuuming \"old\" moved the database frozen XID");
        assert_eq!(db.xid_limits().oldest_xid, newest, "the limits follow the newest reading");
        db.close().unwrap();
    }
}
