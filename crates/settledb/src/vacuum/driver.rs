//! VACUUM of one table, phase by phase (PostgreSQL's `heap_vacuum_rel`).
//!
//! [`vacuum_rel`] reads as the order things happen in:
//!
//! 1. take the table's ShareUpdateExclusive lock (or skip it, for autovacuum), and find the
//!    table again in case it was dropped or truncated meanwhile;
//! 2. resolve the settings this run goes by ([`Settings`]: the command's options over the
//!    table's storage parameters over the configuration) and its cutoffs (OldestXmin,
//!    FreezeLimit, whether it is aggressive);
//! 3. scan the heap (phase I), vacuuming indexes and heap (phases II and III) whenever the
//!    dead-item store fills and once at the end;
//! 4. clean up the indexes;
//! 5. truncate empty pages off the end;
//! 6. store relpages, reltuples and relfrozenxid in `pg_class`, and the database's frozen XID;
//! 7. total what the leader and the parallel workers used into the report.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tidstore::TidStore;

use super::*;
use crate::catalog::RelOptions;
use crate::config::Config;
use crate::xact::horizon::HorizonHolder;

/// A VACUUM's lock owner; dropping it releases its locks.
struct VacuumLock<'a> {
    db: VacuumEnv<'a>,
    owner: LockOwner,
}

impl Drop for VacuumLock<'_> {
    fn drop(&mut self) {
        self.db.lmgr.release_all(&self.owner);
    }
}

/// What one VACUUM goes by, resolved from its command, the table's storage parameters and the
/// configuration, in that order of precedence.
struct Settings {
    policy: FreezePolicy,
    fsm_settled: bool,
    freeze_max_age: u32,
    freeze_min_age: u32,
    freeze_table_age: u32,
    cost_delay_ms: f64,
    cost_limit: u32,
    truncate: bool,
    max_eager_freeze_failure_rate: f64,
}

impl Settings {
    fn resolve(config: &Config, opts: &RelOptions, params: &VacuumParams) -> Settings {
        let policy = params.policy.or(opts.vacuum_freeze_policy).unwrap_or(config.vacuum_freeze_policy);
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
        let (cost_delay_ms, cost_limit) = if params.is_autovacuum {
            (
                params
                    .cost_delay_ms
                    .or(opts.autovacuum_vacuum_cost_delay_ms)
                    .unwrap_or(config.autovacuum_vacuum_cost_delay_ms),
                params
                    .cost_limit
                    .or(opts.autovacuum_vacuum_cost_limit)
                    .unwrap_or_else(|| config.autovacuum_cost_limit()),
            )
        } else {
            (
                params.cost_delay_ms.unwrap_or(config.vacuum_cost_delay_ms),
                params.cost_limit.unwrap_or(config.vacuum_cost_limit),
            )
        };
        Settings {
            policy,
            fsm_settled: opts
                .vacuum_fsm_settled
                .or(config.vacuum_fsm_settled)
                .unwrap_or(policy.fsm_settled_by_default()),
            freeze_max_age,
            freeze_min_age,
            freeze_table_age,
            cost_delay_ms,
            cost_limit,
            truncate: params.truncate.or(opts.vacuum_truncate).unwrap_or(config.vacuum_truncate),
            max_eager_freeze_failure_rate: opts
                .vacuum_max_eager_freeze_failure_rate
                .unwrap_or(config.vacuum_max_eager_freeze_failure_rate),
        }
    }
}

/// Where this VACUUM stands in XID time (PostgreSQL's `vacuum_get_cutoffs`).
struct Start {
    oldest_xmin: Xid,
    /// Who holds OldestXmin back, for the report.
    holder: Option<HorizonHolder>,
    next_xid: Xid,
    freeze_limit: Xid,
    relfrozenxid: Xid,
    aggressive: bool,
}

impl Start {
    fn now(db: VacuumEnv<'_>, entry: &TableEntry, params: &VacuumParams, s: &Settings) -> Start {
        let is_catalog = crate::xact::horizon::is_catalog_relation(entry.rel.oid);
        let (oldest_xmin, holder) = db.xact.oldest_xmin_with_holder(is_catalog);
        let next_xid = db.xact.next_full_xid().xid();
        let freeze_limit = normal_or_first(Xid(oldest_xmin.0.wrapping_sub(s.freeze_min_age)), oldest_xmin);
        let aggressive_limit = normal_or_first(Xid(next_xid.0.wrapping_sub(s.freeze_table_age)), next_xid);
        let relfrozenxid = entry.relfrozenxid();
        let aggressive = params.disable_page_skipping
            || params.is_wraparound
            || !relfrozenxid.is_normal()
            || relfrozenxid.precedes_or_equals(aggressive_limit);
        Start { oldest_xmin, holder, next_xid, freeze_limit, relfrozenxid, aggressive }
    }
}

/// Vacuums one table.
pub(crate) fn vacuum_rel(db: VacuumEnv<'_>, entry: &Arc<TableEntry>, params: &VacuumParams) -> Result<VacuumReport> {
    let began = Instant::now();
    let usage0 = Usage::now();
    let (locks, current) = lock_table(db, entry, params)?;
    let entry = &current;
    let _maint = entry.maintenance_lock.lock();
    let config = db.config.get();
    let settings = Settings::resolve(&config, &entry.options(), params);
    let start = Start::now(db, entry, params, &settings);

    let progress = Arc::new(VacuumProgress::default());
    progress.relid.store(entry.rel.oid.0, Ordering::Relaxed);
    progress.autovacuum.store(params.is_autovacuum, Ordering::Relaxed);
    db.progress.lock().push(progress.clone());
    let _pg = ProgressGuard { db, p: progress.clone() };

    let mut lv = LazyVacuum::new(db, &locks.owner, entry, &config, params, &settings, &start, progress, &usage0);
    let orig_pages = lv.scan(&config, params, &settings, &start)?;
    lv.cleanup_indexes()?;
    // Truncation drops the map's buffers past the new end: no pin may be held on them.
    lv.leader.vm_pin.clear();
    let new_pages = if settings.truncate && !lv.failsafe { lv.truncate_heap(orig_pages)? } else { orig_pages };
    lv.r.new_pages = new_pages;
    lv.r.removed_pages = orig_pages - new_pages;
    lv.progress.set_phase(VacuumPhase::FinalCleanup);
    lv.update_relstats(entry, orig_pages, new_pages)?;
    lv.total_usage(&usage0, began);
    entry.stats.report_vacuum(
        params.is_autovacuum,
        params.is_wraparound,
        lv.r.new_live_tuples,
        lv.r.recently_dead_tuples + lv.r.missed_dead_tuples,
        u64::from(lv.r.frozen_pages),
    );
    db.changed.table_changed(entry);
    Ok(lv.r)
}

/// Takes the table's ShareUpdateExclusive lock, held to the end: one VACUUM per table at a
/// time, and DROP TABLE, ALTER TABLE and CREATE INDEX wait for it. Autovacuum (and `SKIP_LOCKED`)
/// takes it only if it is free now, and otherwise skips the table (PostgreSQL's autovacuum does
/// not wait behind a user's lock). Returns the lock and the table's current entry: it may have
/// been dropped, or TRUNCATEd (new storage, a new entry), while we waited.
fn lock_table<'a>(
    db: VacuumEnv<'a>,
    entry: &TableEntry,
    params: &VacuumParams,
) -> Result<(VacuumLock<'a>, Arc<TableEntry>)> {
    let mut owner = db.lmgr.new_owner(if params.is_autovacuum { "autovacuum" } else { "vacuum" });
    owner.set_interrupt(params.interrupt.clone());
    let locks = VacuumLock { db, owner };
    let wait = if params.is_autovacuum || params.skip_locked { WaitPolicy::NoWait } else { WaitPolicy::Wait };
    db.lmgr.lock(&locks.owner, entry.rel.oid, LockMode::ShareUpdateExclusive, wait, db.config.lock_timeout())?;
    let Some(current) = db.catalog.get_by_oid(entry.rel.oid) else {
        return Err(Error::NotFound(format!("relation \"{}\" was dropped", entry.rel.name)));
    };
    Ok((locks, current))
}

impl<'a> LazyVacuum<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        db: VacuumEnv<'a>,
        locks: &'a LockOwner,
        entry: &'a TableEntry,
        config: &Config,
        params: &VacuumParams,
        s: &Settings,
        start: &Start,
        progress: Arc<VacuumProgress>,
        usage0: &Usage,
    ) -> LazyVacuum<'a> {
        let rel = &*entry.rel;
        let dead_budget = config.maintenance_work_mem_bytes;
        let indexes = entry.indexes.read().clone();
        let cleanup = params.index_cleanup != IndexCleanup::Off && !indexes.is_empty();
        LazyVacuum {
            db,
            locks,
            env: db.heap(),
            entry,
            rel,
            cutoffs: Cutoffs { oldest_xmin: start.oldest_xmin, freeze_limit: start.freeze_limit },
            policy: s.policy,
            verdicts: None,
            deferred_freeze_limits: None,
            fsm_settled: s.fsm_settled,
            aggressive: start.aggressive,
            skip_with_vm: !params.disable_page_skipping,
            do_index_vacuuming: cleanup,
            do_index_cleanup: cleanup,
            consider_bypass: params.index_cleanup == IndexCleanup::Auto,
            failsafe: false,
            failsafe_age: config.vacuum_failsafe_age.max((f64::from(s.freeze_max_age) * 1.05) as u32),
            index_stats: vec![BulkDeleteStats::default(); indexes.len()],
            indexes,
            dead: TidStore::new(dead_budget),
            dead_budget,
            leader: Worker::new(
                db,
                CostDelay {
                    delay_ms: s.cost_delay_ms,
                    limit: s.cost_limit.max(1),
                    hit: u64::from(config.vacuum_cost_page_hit),
                    miss: u64::from(config.vacuum_cost_page_miss),
                    dirty: u64::from(config.vacuum_cost_page_dirty),
                    last: usage0.buffers,
                    balance: 0,
                    slept: Duration::ZERO,
                    interrupt: params.interrupt.clone(),
                },
            ),
            counts: ScanCounts::default(),
            helpers: Usage::default(),
            helpers_slept: Duration::ZERO,
            nworkers: 0,
            min_parallel_index_pages: (config.min_parallel_index_scan_size_bytes / crate::page::BLCKSZ as u64)
                .min(u64::from(u32::MAX)) as u32,
            progress,
            r: VacuumReport {
                table: rel.name.clone(),
                autovacuum: params.is_autovacuum,
                wraparound: params.is_wraparound,
                aggressive: start.aggressive,
                policy: s.policy.name().to_string(),
                oldest_xmin: start.oldest_xmin,
                oldest_xmin_holder: start.holder.clone(),
                old_relfrozenxid: start.relfrozenxid,
                dead_items_limit: dead_budget as u64,
                index_vacuuming_skipped: params.index_cleanup == IndexCleanup::Off,
                ..Default::default()
            },
            phase1: Vec::new(),
        }
    }

    /// Phases I to III over the table's pages as they are now; returns how many there were.
    fn scan(&mut self, config: &Config, params: &VacuumParams, s: &Settings, start: &Start) -> Result<u32> {
        self.check_failsafe();
        let orig_pages = self.db.pool.smgr().nblocks(self.rel.relfilenode, Fork::Main)?;
        self.r.orig_pages = orig_pages;
        self.learn_freeze_history(
            orig_pages,
            start.next_xid,
            s.max_eager_freeze_failure_rate,
            (s.freeze_table_age, s.freeze_min_age),
            !params.is_wraparound && !params.disable_page_skipping,
        )?;
        self.nworkers = parallel::heap_workers(config, params, orig_pages);
        self.r.parallel_workers = self.nworkers as u32;
        self.scan_heap(orig_pages)?;
        self.take_counts();
        Ok(orig_pages)
    }

    /// Index cleanup (`amvacuumcleanup`), and the figures of every index that has some to
    /// report: it was bulk-deleted, or its cleanup scanned it.
    fn cleanup_indexes(&mut self) -> Result<()> {
        let bulk_deleted = self.r.num_index_scans > 0;
        let mut reported = vec![bulk_deleted; self.indexes.len()];
        if self.do_index_cleanup {
            self.progress.set_phase(VacuumPhase::CleaningUpIndexes);
            for (i, ix) in self.indexes.iter().enumerate() {
                self.leader.cost.point()?;
                reported[i] |= ix.btree.cleanup(&self.env, &mut self.index_stats[i], bulk_deleted)?;
            }
        }
        self.r.indexes = self
            .indexes
            .iter()
            .zip(&self.index_stats)
            .zip(&reported)
            .filter(|(_, &r)| r)
            .map(|((d, s), _)| (d.name.clone(), *s))
            .collect();
        Ok(())
    }

    /// `pg_class`: relpages, reltuples and, when this VACUUM may advance it, relfrozenxid (and
    /// then the database's frozen XID); written only when something changed, as
    /// `vac_update_relstats` does.
    fn update_relstats(&mut self, entry: &Arc<TableEntry>, orig_pages: u32, new_pages: u32) -> Result<()> {
        let db = self.db;
        let oldest_xmin = self.cutoffs.oldest_xmin;
        let relfrozenxid = self.r.old_relfrozenxid;
        let scanned_all = self.r.scanned_pages >= orig_pages;
        let reltuples = if scanned_all || orig_pages == 0 {
            self.r.new_live_tuples as f64
        } else {
            estimate_reltuples(entry, orig_pages, self.r.scanned_pages, self.r.new_live_tuples)
        };
        self.r.new_live_tuples = reltuples.round().max(0.0) as u64;
        let can_advance = self.aggressive || !self.counts.skipped_allvis;
        let new_frozen = match self.counts.oldest_left {
            Some(x) if x.precedes(oldest_xmin) => x,
            _ => oldest_xmin,
        };
        let advance = can_advance
            && new_frozen.is_normal()
            && new_frozen != relfrozenxid
            && (!relfrozenxid.is_normal()
                || relfrozenxid.precedes(new_frozen)
                || db.xact.next_full_xid().xid().precedes(relfrozenxid));
        let frozen_to_store = if advance { new_frozen } else { relfrozenxid };
        let unchanged = entry.relpages.load(Ordering::Acquire) == new_pages
            && *entry.reltuples.lock() == reltuples
            && relfrozenxid == frozen_to_store;
        if !unchanged {
            update_pg_class(db, entry, new_pages, reltuples, frozen_to_store)?;
        }
        if advance {
            self.r.new_relfrozenxid = Some(new_frozen);
            update_database_frozen_xid(db)?;
        }
        let end_next = db.xact.next_full_xid().xid();
        self.r.oldest_xmin_age_at_end = i64::from(end_next.0.wrapping_sub(oldest_xmin.0) as i32);
        Ok(())
    }

    /// Adds the leader's buffers, WAL and CPU since `usage0` to the parallel workers', with
    /// the elapsed time since `began` and the time the cost delay slept, into the report.
    fn total_usage(&mut self, usage0: &Usage, began: Instant) {
        let mine = Worker::usage_since(usage0);
        let h = &self.helpers;
        self.r.buffers = mine.buffers.plus(h.buffers);
        self.r.wal = crate::wal::WalStats {
            records: mine.wal.records + h.wal.records,
            fpi: mine.wal.fpi + h.wal.fpi,
            bytes: mine.wal.bytes + h.wal.bytes,
        };
        self.r.wal_buffers_full = mine.wal_buffers_full + h.wal_buffers_full;
        self.r.user_cpu = mine.user_cpu + h.user_cpu;
        self.r.system_cpu = mine.system_cpu + h.system_cpu;
        self.r.elapsed = began.elapsed();
        self.r.delay_time = self.leader.cost.slept + self.helpers_slept;
        self.r.failsafe = self.failsafe;
    }
}
