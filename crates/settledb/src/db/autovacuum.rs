//! Autovacuum (PostgreSQL's `autovacuum.c`, rewritten): a launcher thread and
//! `autovacuum_max_workers` worker threads.
//!
//! ```text
//!   launcher, every autovacuum_naptime (and at once when the XID vacuum limit is passed):
//!       tables whose statistics or options changed -> re-rank in the need queue
//!       anti-wraparound candidates (catalog's relfrozenxid deadline heap) + the need queue's
//!           tables over a threshold -> queue (anti-wraparound first, then most dead tuples)
//!   worker i:  take a table -> recheck -> VACUUM (is_autovacuum, cost limit / active workers)
//!              -> log it when it took at least log_autovacuum_min_duration
//! ```
//!
//! # Scheduling without rescanning every table
//!
//! PostgreSQL's `do_autovacuum` reads every `pg_class` row and its statistics each naptime, so
//! an idle database with a million tables pays for a million tables per cycle. Here the
//! launcher keeps what it knows between cycles and only looks at what changed:
//!
//! * A table's dead-tuple and insert thresholds can only be crossed when its statistics change
//!   (a transaction ends, VACUUM reports, stats are restored at startup) or its options do
//!   (ALTER TABLE SET). Each of those marks the table changed, once ([`note_changed`]: an
//!   atomic flag, and the OID pushed on a list the first time), and the launcher re-evaluates
//!   only those tables, keeping the ones over a threshold in an indexed max-heap (the *need
//!   queue*, [`pqueue::IndexedHeap`]) ordered by dead tuples, then inserts.
//! * Age crosses `autovacuum_freeze_max_age` without any statistic changing, as XIDs are
//!   consumed elsewhere: the catalog keeps every table in a min-heap by the XID at which it
//!   becomes due (relfrozenxid + its freeze_max_age), and the launcher visits only the tables
//!   whose deadline has passed.
//!
//! So a cycle costs O((changed + due + over threshold) · log n), not O(n); an idle database
//! costs a few lock acquisitions per naptime. [`AutovacuumStats`] counts the cycles, the tables
//! each looked at and the launcher's thread CPU time.
//!
//! A table needs vacuuming (`relation_needs_vacanalyze`) when
//! * its relfrozenxid is older than `autovacuum_freeze_max_age`: a forced, aggressive
//!   anti-wraparound vacuum, even when autovacuum is disabled for the table;
//! * `n_dead_tup > autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor * reltuples`;
//! * `n_ins_since_vacuum > autovacuum_vacuum_insert_threshold +
//!   autovacuum_vacuum_insert_scale_factor * reltuples` (unless the insert threshold is -1),
//!   so insert-only tables get frozen and their pages set all-visible.
//!
//! Table storage options override each parameter. Workers share the cost limit: each one
//! running gets `limit / running` (PostgreSQL's `autovac_balance_cost`). Log entries go to
//! `log/settledb.log` in the data directory and to an in-memory list that
//! [`Database::take_log`] drains (`settle tpcc` prints them as they happen).

use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Condvar, Mutex};
use pqueue::{Handle, IndexedHeap};
use rustc_hash::{FxHashMap, FxHashSet};

use super::{Database, Inner};
use crate::catalog::TableEntry;
use crate::error::Error;
use crate::types::{Oid, Xid};
use crate::vacuum::{self, VacuumParams};

/// Work shared by the launcher and the workers.
#[derive(Default)]
pub(crate) struct AutovacuumState {
    /// Tables to vacuum, in order, and the set of them (no table is queued twice).
    queue: Mutex<(WorkQueue, FxHashSet<Oid>)>,
    pub(crate) wake: Condvar,
    /// Tables being vacuumed by a worker now.
    busy: Mutex<Vec<Oid>>,
    /// Tables whose statistics or options changed since the launcher last looked.
    changed: Mutex<Vec<Oid>>,
    /// Tables over a dead-tuple or insert threshold, most dead tuples first (the launcher's).
    need: Mutex<NeedQueue>,
    pub(crate) running: AtomicU32,
    pub(crate) vacuums: AtomicU64,
    pub(crate) wraparound_vacuums: AtomicU64,
    /// Tables skipped because their lock was taken (a user's LOCK TABLE, DDL, a manual VACUUM).
    pub(crate) skipped_locked: AtomicU64,
    cycles: AtomicU64,
    cycle_cpu_ns: AtomicU64,
    last_cycle_cpu_ns: AtomicU64,
    last_cycle_tables: AtomicU64,
    cycle_tables: AtomicU64,
    log: Mutex<Vec<String>>,
}

/// Tables for the workers, in order: `(table, anti-wraparound)`.
type WorkQueue = VecDeque<(Oid, bool)>;

/// The need queue: `(n_dead_tup, n_ins_since_vacuum)` of each table over a threshold.
struct NeedQueue {
    heap: IndexedHeap<(u64, u64), Oid>,
    handles: FxHashMap<Oid, Handle>,
}

impl Default for NeedQueue {
    fn default() -> NeedQueue {
        NeedQueue { heap: IndexedHeap::new_max(), handles: FxHashMap::default() }
    }
}

impl NeedQueue {
    /// Puts a table in (or re-ranks it), or takes it out when `key` is `None`.
    fn set(&mut self, oid: Oid, key: Option<(u64, u64)>) {
        match (self.handles.get(&oid).copied(), key) {
            (Some(h), Some(k)) => {
                self.heap.update(h, k);
            }
            (None, Some(k)) => {
                let h = self.heap.push(k, oid);
                self.handles.insert(oid, h);
            }
            (Some(h), None) => {
                self.heap.remove(h);
                self.handles.remove(&oid);
            }
            (None, None) => {}
        }
    }
}

/// Marks a table's statistics or options changed, for the launcher's next cycle. Hot path
/// (every transaction end, per table it wrote): one relaxed load when already marked.
pub(crate) fn note_changed(inner: &Inner, e: &TableEntry) {
    if !e.stats_changed.load(Ordering::Relaxed) && !e.stats_changed.swap(true, Ordering::AcqRel) {
        inner.autovacuum.changed.lock().push(e.rel.oid);
    }
}

/// Marks a dropped table, so that the launcher forgets it.
pub(crate) fn note_dropped(inner: &Inner, oid: Oid) {
    inner.autovacuum.changed.lock().push(oid);
}

/// Why a table needs an autovacuum, if it does: `Some(wraparound)`.
pub(crate) fn needs_vacuum(inner: &Inner, e: &TableEntry) -> Option<bool> {
    if needs_wraparound_vacuum(inner, e) {
        return Some(true);
    }
    over_threshold(inner, e).map(|_| false)
}

/// Whether the table's relfrozenxid is older than its `autovacuum_freeze_max_age`.
fn needs_wraparound_vacuum(inner: &Inner, e: &TableEntry) -> bool {
    let o = e.options.read();
    let next = inner.xact.next_full_xid().xid();
    let freeze_max_age = o.autovacuum_freeze_max_age.unwrap_or(inner.config.get().autovacuum_freeze_max_age);
    let force_limit = Xid(next.0.wrapping_sub(freeze_max_age));
    let rfx = e.relfrozenxid();
    rfx.is_normal() && force_limit.is_normal() && rfx.precedes(force_limit)
}

/// The table's `(n_dead_tup, n_ins_since_vacuum)` when one of them is over its threshold (and
/// autovacuum is enabled for the table).
fn over_threshold(inner: &Inner, e: &TableEntry) -> Option<(u64, u64)> {
    let c = inner.config.get();
    let o = &e.options();
    // `autovacuum = off` after a reload: as in PostgreSQL, only anti-wraparound vacuums remain.
    if !c.autovacuum || !o.autovacuum_enabled.unwrap_or(true) {
        return None;
    }
    let reltuples = e.reltuples.lock().max(0.0);
    let st = e.stats.snapshot();
    let vac_thresh = o.autovacuum_vacuum_threshold.unwrap_or(c.autovacuum_vacuum_threshold) as f64
        + o.autovacuum_vacuum_scale_factor.unwrap_or(c.autovacuum_vacuum_scale_factor) * reltuples;
    let key = (st.n_dead_tup, st.n_ins_since_vacuum);
    if st.n_dead_tup as f64 > vac_thresh {
        return Some(key);
    }
    let ins_base = o.autovacuum_vacuum_insert_threshold.unwrap_or(c.autovacuum_vacuum_insert_threshold);
    if ins_base >= 0 {
        let ins_thresh = ins_base as f64
            + o.autovacuum_vacuum_insert_scale_factor.unwrap_or(c.autovacuum_vacuum_insert_scale_factor) * reltuples;
        if st.n_ins_since_vacuum as f64 > ins_thresh {
            return Some(key);
        }
    }
    None
}

impl Inner {
    /// One launcher round: re-ranks the tables that changed, then queues every table that
    /// needs a vacuum and no worker has (see the module doc for its cost).
    fn autovacuum_plan(&self) {
        let cpu0 = thread_cpu_ns();
        let av = &self.autovacuum;
        let mut looked_at = 0u64;
        let mut wanted: Vec<(Oid, bool, u64)> = Vec::new();
        {
            let changed = std::mem::take(&mut *av.changed.lock());
            let mut need = av.need.lock();
            for oid in changed {
                looked_at += 1;
                let key = self.catalog.get_by_oid(oid).and_then(|e| {
                    // Cleared before reading the statistics: a change after the read marks the
                    // table again for the next cycle.
                    e.stats_changed.store(false, Ordering::Release);
                    over_threshold(self, &e)
                });
                need.set(oid, key);
            }
            need.heap.for_each_top(|_| true, |_, &(dead, _), &oid| wanted.push((oid, false, dead)));
        }
        looked_at += wanted.len() as u64;
        for oid in self.catalog.due_for_wraparound(self.xact.next_full_xid()) {
            looked_at += 1;
            let Some(e) = self.catalog.get_by_oid(oid) else { continue };
            if needs_wraparound_vacuum(self, &e) {
                wanted.push((oid, true, e.stats.snapshot().n_dead_tup));
            }
        }
        // Anti-wraparound first, then most dead tuples; a table both due and over a threshold
        // keeps its anti-wraparound entry.
        wanted.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)));
        let busy = av.busy.lock().clone();
        {
            let mut q = av.queue.lock();
            let (list, queued) = &mut *q;
            for (oid, wrap, _) in wanted {
                if !busy.contains(&oid) && queued.insert(oid) {
                    list.push_back((oid, wrap));
                }
            }
            if !list.is_empty() {
                av.wake.notify_all();
            }
        }
        let cpu = thread_cpu_ns().saturating_sub(cpu0);
        av.cycles.fetch_add(1, Ordering::Relaxed);
        av.cycle_cpu_ns.fetch_add(cpu, Ordering::Relaxed);
        av.last_cycle_cpu_ns.store(cpu, Ordering::Relaxed);
        av.last_cycle_tables.store(looked_at, Ordering::Relaxed);
        av.cycle_tables.fetch_add(looked_at, Ordering::Relaxed);
    }

    pub(crate) fn autovacuum_launcher_loop(self: Arc<Inner>) {
        let naptime = || Duration::from_millis(self.config.get().autovacuum_naptime_ms);
        let mut last = Instant::now();
        // Wake often enough to react when the XID vacuum limit is passed (PostgreSQL signals
        // the launcher then), otherwise plan once per naptime (reread each time: a reload may
        // change it).
        while self.nap(naptime().min(Duration::from_millis(250))) {
            if last.elapsed() >= naptime() || self.xact.vacuum_limit_reached() {
                self.autovacuum_plan();
                last = Instant::now();
            }
        }
        self.autovacuum.wake.notify_all();
    }

    pub(crate) fn autovacuum_worker_loop(self: Arc<Inner>) {
        let av = &self.autovacuum;
        loop {
            let job = {
                let mut q = av.queue.lock();
                loop {
                    if self.shutdown.load(Ordering::Acquire) {
                        return;
                    }
                    if let Some(j) = q.0.pop_front() {
                        q.1.remove(&j.0);
                        break j;
                    }
                    av.wake.wait_for(&mut q, Duration::from_millis(500));
                }
            };
            let (oid, _) = job;
            {
                let mut busy = av.busy.lock();
                if busy.contains(&oid) {
                    continue;
                }
                busy.push(oid);
            }
            self.autovacuum_one(oid);
            av.busy.lock().retain(|o| *o != oid);
        }
    }

    fn autovacuum_one(&self, oid: Oid) {
        let av = &self.autovacuum;
        let Some(entry) = self.catalog.get_by_oid(oid) else { return };
        // Recheck: another vacuum may have done the work since the launcher looked.
        let Some(wraparound) = needs_vacuum(self, &entry) else { return };
        let running = av.running.fetch_add(1, Ordering::AcqRel) + 1;
        let opts = entry.options();
        let limit = opts.autovacuum_vacuum_cost_limit.unwrap_or_else(|| self.config.get().autovacuum_cost_limit());
        let params = VacuumParams {
            is_autovacuum: true,
            is_wraparound: wraparound,
            cost_limit: Some((limit / running).max(1)),
            ..Default::default()
        };
        let res = vacuum::vacuum_rel(self.vacuum_env(), &entry, &params);
        av.running.fetch_sub(1, Ordering::AcqRel);
        match res {
            Ok(r) => {
                av.vacuums.fetch_add(1, Ordering::Relaxed);
                if wraparound {
                    av.wraparound_vacuums.fetch_add(1, Ordering::Relaxed);
                }
                let min_ms =
                    opts.log_autovacuum_min_duration_ms.unwrap_or(self.config.get().log_autovacuum_min_duration_ms);
                if min_ms >= 0 && r.elapsed.as_millis() as i64 >= min_ms {
                    self.log_line(&r.log_text());
                }
            }
            Err(Error::NotFound(_)) => {} // dropped meanwhile
            // Someone holds a conflicting lock: skip the table, the launcher will queue it again
            // (PostgreSQL's autovacuum takes its lock conditionally too, and says nothing).
            Err(Error::LockNotAvailable(_)) => {
                av.skipped_locked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if self.shutdown.load(Ordering::Acquire) => drop(e),
            Err(e) => self.log_line(&format!(
                "ERROR:  autovacuum of table \"{}.public.{}\" failed: {e}\n",
                vacuum::DATABASE_NAME,
                entry.rel.name
            )),
        }
    }

    /// Appends a server-log entry (timestamped like PostgreSQL's default `log_line_prefix`).
    pub(crate) fn log_line(&self, text: &str) {
        let secs = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
        let stamped = format!("{} [{}] {}", format_utc(secs), std::process::id(), text);
        let path = self.dir.join("log");
        if std::fs::create_dir_all(&path).is_ok() {
            if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path.join("settledb.log")) {
                let _ = f.write_all(stamped.as_bytes());
            }
        }
        self.autovacuum.log.lock().push(stamped);
    }
}

/// `YYYY-MM-DD HH:MM:SS.mmm UTC` from seconds since the epoch.
fn format_utc(secs: f64) -> String {
    let total = secs.max(0.0) as u64;
    let ms = ((secs - total as f64) * 1000.0) as u64;
    let (days, rem) = (total / 86_400, total % 86_400);
    let (y, m, d) = crate::stats::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{ms:03} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// This thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own and has no other effect.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec.max(0) as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec.max(0) as u64)
}

/// Counters of the autovacuum daemon.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AutovacuumStats {
    /// Workers vacuuming now.
    pub running: u32,
    /// Autovacuums finished, and how many of them were anti-wraparound.
    pub vacuums: u64,
    pub wraparound_vacuums: u64,
    /// Tables skipped because a conflicting lock was held.
    pub skipped_locked: u64,
    /// Launcher cycles run (each naptime, each kick), their total thread CPU time and tables
    /// looked at, and the last cycle's CPU time and number of tables it looked at.
    pub launcher_cycles: u64,
    pub launcher_cpu_ns: u64,
    pub launcher_tables: u64,
    pub last_cycle_cpu_ns: u64,
    pub last_cycle_tables: u64,
}

impl Database {
    /// Server-log entries written since the last call (autovacuum reports and errors).
    pub fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut *self.inner().autovacuum.log.lock())
    }

    pub fn autovacuum_stats(&self) -> AutovacuumStats {
        let av = &self.inner().autovacuum;
        AutovacuumStats {
            running: av.running.load(Ordering::Relaxed),
            vacuums: av.vacuums.load(Ordering::Relaxed),
            wraparound_vacuums: av.wraparound_vacuums.load(Ordering::Relaxed),
            skipped_locked: av.skipped_locked.load(Ordering::Relaxed),
            launcher_cycles: av.cycles.load(Ordering::Relaxed),
            launcher_cpu_ns: av.cycle_cpu_ns.load(Ordering::Relaxed),
            launcher_tables: av.cycle_tables.load(Ordering::Relaxed),
            last_cycle_cpu_ns: av.last_cycle_cpu_ns.load(Ordering::Relaxed),
            last_cycle_tables: av.last_cycle_tables.load(Ordering::Relaxed),
        }
    }

    /// Runs one launcher round now (tests and tools; the launcher does it every naptime).
    pub fn autovacuum_kick(&self) {
        self.inner().autovacuum_plan();
    }
}

#[cfg(test)]
mod tests {
    use super::format_utc;

    #[test]
    fn formats_utc_timestamps() {
        assert_eq!(format_utc(0.0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(format_utc(1_795_000_000.5), "2026-11-18 11:06:40.500 UTC");
    }
}
