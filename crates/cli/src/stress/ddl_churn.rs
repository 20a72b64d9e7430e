//! `settle stress --ddl-churn`: DDL churned against row-locking writers (issue 22, item 3:
//! "no hang without an error").
//!
//! # What runs
//!
//! ```text
//!   writer × --threads   READ COMMITTED transactions that each add 1 to the counters of 1-4
//!                        random rows of random tables (row locks taken in random order, so
//!                        writers deadlock with one another), sometimes after reading the table
//!                        through a churned index or a sequential scan; a deadlock (40P01) or
//!                        lock timeout (55P03) rolls back and retries the same rows
//!   ddl × 2              CREATE INDEX, DROP INDEX, ALTER TABLE SET (autovacuum_*),
//!                        VACUUM, in random order on random tables (so Share,
//!                        AccessExclusive and ShareUpdateExclusive requests queue behind and
//!                        in front of the writers' RowExclusive and their row waits)
//!   autovacuum           on, 1 s naptime, low thresholds (it must skip locked tables)
//!   watchdog             fails the run (exit 2) when any thread makes no progress for
//!                        --stall-seconds, printing every thread's current step and pg_locks
//! ```
//!
//! # The checks
//!
//! Every committed increment is counted by its writer after the commit returns; at the end
//! the sum of all counters must equal that count (no lost or doubled update), every thread
//! must have made progress within the stall limit (no hang), `check` must be clean, and no
//! thread may have met an error other than a deadlock or lock timeout (retried and counted).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use settledb::{
    Column, Database, Error, KeyBound, ScanDirection, Schema, TableOptions, Transaction, Type, VacuumParams, Value,
};

use super::StressArgs;

const TABLES: usize = 3;
const ROWS: i32 = 200;

/// Settings for the run (before the user's `--set`): autovacuum often, and a lock timeout so
/// that a long queue is also exercised as 55P03.
const CHURN_SETTINGS: &[(&str, &str)] = &[
    ("shared_buffers", "16MB"),
    ("autovacuum", "on"),
    ("autovacuum_naptime", "1s"),
    ("autovacuum_vacuum_threshold", "50"),
    ("autovacuum_vacuum_scale_factor", "0.01"),
    ("autovacuum_vacuum_cost_delay", "0"),
    ("lock_timeout", "2s"),
    ("deadlock_timeout", "100ms"),
    ("max_prepared_transactions", "0"),
];

fn table_name(i: usize) -> String {
    format!("churn_{i}")
}

fn index_name(i: usize) -> String {
    format!("churn_{i}_n")
}

/// One worker thread's progress, seen by the watchdog.
struct Worker {
    name: String,
    progress: AtomicU64,
    step: Mutex<String>,
}

impl Worker {
    fn step(&self, what: impl Into<String>) {
        *self.step.lock().unwrap_or_else(|e| e.into_inner()) = what.into();
    }

    fn progressed(&self) {
        self.progress.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Default)]
struct Counts {
    commits: AtomicU64,
    increments: AtomicU64,
    deadlocks: AtomicU64,
    lock_timeouts: AtomicU64,
    reads: AtomicU64,
    create_index: AtomicU64,
    drop_index: AtomicU64,
    alter_table: AtomicU64,
    vacuum: AtomicU64,
    ddl_deadlocks: AtomicU64,
    ddl_lock_timeouts: AtomicU64,
    ddl_races: AtomicU64,
}

struct Shared<'db> {
    db: &'db Database,
    stop: AtomicBool,
    counts: Counts,
    errors: Mutex<Vec<String>>,
}

impl Shared<'_> {
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    fn error(&self, who: &str, e: impl std::fmt::Display) {
        let mut v = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if v.len() < 20 {
            v.push(format!("{who}: {e}"));
        }
    }
}

/// The figures a run prints.
#[derive(Serialize, Debug)]
pub struct ChurnReport {
    pub seconds: f64,
    pub writers: usize,
    pub seed: u64,
    pub commits: u64,
    pub increments_committed: u64,
    pub counter_sum: i64,
    pub lost_updates: i64,
    pub writer_deadlocks_retried: u64,
    pub writer_lock_timeouts_retried: u64,
    pub reads: u64,
    pub create_index: u64,
    pub drop_index: u64,
    pub alter_table: u64,
    pub vacuum: u64,
    pub ddl_deadlocks_retried: u64,
    pub ddl_lock_timeouts_retried: u64,
    pub ddl_races: u64,
    pub autovacuums: u64,
    pub autovacuum_skipped_locked: u64,
    pub engine_deadlocks: u64,
    pub engine_lock_timeouts: u64,
    /// The longest any thread went without progress, seconds.
    pub longest_stall_seconds: f64,
    pub stall_limit_seconds: u64,
    pub check_clean: bool,
    pub errors: Vec<String>,
}

impl ChurnReport {
    pub fn ok(&self) -> bool {
        self.lost_updates == 0
            && self.check_clean
            && self.errors.is_empty()
            && self.commits > 0
            && self.create_index > 0
            && self.drop_index > 0
            && self.alter_table > 0
            && self.vacuum > 0
    }
}

pub fn run(a: &StressArgs) -> Result<std::process::ExitCode> {
    let mut set: Vec<String> = CHURN_SETTINGS.iter().map(|(k, v)| format!("{k}={v}")).collect();
    set.extend(a.set.iter().cloned());
    let config = crate::config_from(&set)?;
    let db = Database::open(&a.dir, config).with_context(|| format!("opening {}", a.dir.display()))?;
    setup(&db)?;
    let report = churn(&db, a)?;
    db.close()?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(if report.ok() { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::from(1) })
}

fn setup(db: &Database) -> Result<()> {
    let schema = || Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "n".into(), ty: Type::Int8, nullable: false },
        ],
    };
    for i in 0..TABLES {
        let name = table_name(i);
        if db.table(&name).is_ok() {
            db.drop_table(&name)?;
        }
        let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
        let t = db.create_table(&name, schema(), opts)?;
        let mut tx = db.begin()?;
        let rows: Vec<Vec<Value>> = (1..=ROWS).map(|id| vec![Value::Int4(id), Value::Int8(0)]).collect();
        tx.insert_many(&t, &rows)?;
        tx.commit()?;
    }
    Ok(())
}

fn churn(db: &Database, a: &StressArgs) -> Result<ChurnReport> {
    let shared = Shared { db, stop: AtomicBool::new(false), counts: Counts::default(), errors: Mutex::new(Vec::new()) };
    let mut workers: Vec<Worker> = (0..a.threads).map(|i| worker(format!("writer {i}"))).collect();
    workers.push(worker("ddl 0".into()));
    workers.push(worker("ddl 1".into()));
    let stall = Duration::from_secs(a.stall_seconds);
    let av0 = db.autovacuum_stats();
    let (dl0, lt0) = db.lock_failures();
    let start = Instant::now();
    let mut longest = Duration::ZERO;
    std::thread::scope(|s| {
        for (i, w) in workers.iter().enumerate() {
            let (shared, seed) = (&shared, a.seed.wrapping_mul(1000).wrapping_add(i as u64));
            if i < a.threads {
                s.spawn(move || writer(shared, w, seed));
            } else {
                s.spawn(move || ddl(shared, w, seed));
            }
        }
        longest = watchdog(&shared, &workers, Duration::from_secs(a.seconds), stall);
        shared.stop.store(true, Ordering::Relaxed);
    });
    let seconds = start.elapsed().as_secs_f64();
    let c = &shared.counts;
    let get = |x: &AtomicU64| x.load(Ordering::Relaxed);
    let counter_sum = counter_sum(db)?;
    let check = settledb::check::check_database(db)?;
    for p in check.problems.iter().take(10) {
        shared.error("check", p);
    }
    let av = db.autovacuum_stats();
    let (dl, lt) = db.lock_failures();
    Ok(ChurnReport {
        seconds,
        writers: a.threads,
        seed: a.seed,
        commits: get(&c.commits),
        increments_committed: get(&c.increments),
        counter_sum,
        lost_updates: get(&c.increments) as i64 - counter_sum,
        writer_deadlocks_retried: get(&c.deadlocks),
        writer_lock_timeouts_retried: get(&c.lock_timeouts),
        reads: get(&c.reads),
        create_index: get(&c.create_index),
        drop_index: get(&c.drop_index),
        alter_table: get(&c.alter_table),
        vacuum: get(&c.vacuum),
        ddl_deadlocks_retried: get(&c.ddl_deadlocks),
        ddl_lock_timeouts_retried: get(&c.ddl_lock_timeouts),
        ddl_races: get(&c.ddl_races),
        autovacuums: av.vacuums - av0.vacuums,
        autovacuum_skipped_locked: av.skipped_locked - av0.skipped_locked,
        engine_deadlocks: dl - dl0,
        engine_lock_timeouts: lt - lt0,
        longest_stall_seconds: longest.as_secs_f64(),
        stall_limit_seconds: a.stall_seconds,
        check_clean: check.is_clean(),
        errors: shared.errors.into_inner().unwrap_or_else(|e| e.into_inner()),
    })
}

fn worker(name: String) -> Worker {
    Worker { name, progress: AtomicU64::new(0), step: Mutex::new("starting".into()) }
}

/// Runs for `duration`, checking every thread's progress each 100 ms; returns the longest
/// stall seen. A stall past `limit` prints every thread's step and the lock table, and exits.
fn watchdog(shared: &Shared<'_>, workers: &[Worker], duration: Duration, limit: Duration) -> Duration {
    let start = Instant::now();
    let mut last: Vec<(u64, Instant)> = workers.iter().map(|w| (w.progress.load(Ordering::Relaxed), start)).collect();
    let mut longest = Duration::ZERO;
    let mut next_line = start + Duration::from_secs(30);
    while start.elapsed() < duration {
        std::thread::sleep(Duration::from_millis(100));
        let now = Instant::now();
        for (w, l) in workers.iter().zip(last.iter_mut()) {
            let p = w.progress.load(Ordering::Relaxed);
            if p != l.0 {
                *l = (p, now);
            }
            let stalled = now - l.1;
            longest = longest.max(stalled);
            if stalled > limit {
                eprintln!("HANG: {} made no progress for {:.0?}", w.name, stalled);
                for w in workers {
                    eprintln!("  {}: {}", w.name, w.step.lock().unwrap_or_else(|e| e.into_inner()));
                }
                eprintln!("pg_locks:");
                for l in shared.db.locks() {
                    eprintln!("  {l:?}");
                }
                std::process::exit(2);
            }
        }
        if now >= next_line {
            next_line += Duration::from_secs(30);
            let c = &shared.counts;
            eprintln!(
                "{:>5.0}s  commits {}  deadlocks {}  lock timeouts {}  ddl {}  longest stall {:.1?}",
                start.elapsed().as_secs_f64(),
                c.commits.load(Ordering::Relaxed),
                c.deadlocks.load(Ordering::Relaxed),
                c.lock_timeouts.load(Ordering::Relaxed),
                c.create_index.load(Ordering::Relaxed)
                    + c.drop_index.load(Ordering::Relaxed)
                    + c.alter_table.load(Ordering::Relaxed)
                    + c.vacuum.load(Ordering::Relaxed),
                longest
            );
        }
    }
    longest
}

/// Whether `e` is a lock failure to retry; counts it.
fn retryable(e: &Error, deadlocks: &AtomicU64, timeouts: &AtomicU64) -> bool {
    let counter = match e {
        Error::Deadlock { .. } => deadlocks,
        Error::LockNotAvailable(_) => timeouts,
        _ => return false,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    true
}

fn writer(shared: &Shared<'_>, w: &Worker, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let c = &shared.counts;
    while shared.running() {
        let n = rng.gen_range(1..=4);
        let rows: Vec<(usize, i32)> = (0..n).map(|_| (rng.gen_range(0..TABLES), rng.gen_range(1..=ROWS))).collect();
        let read = rng.gen_range(0..4) == 0;
        loop {
            w.step(format!("transaction on rows {rows:?}"));
            match increment(shared, &rows, read) {
                Ok(()) => {
                    c.commits.fetch_add(1, Ordering::Relaxed);
                    c.increments.fetch_add(rows.len() as u64, Ordering::Relaxed);
                    w.progressed();
                    break;
                }
                Err(e) if retryable(&e, &c.deadlocks, &c.lock_timeouts) => {
                    w.progressed();
                    if !shared.running() {
                        break;
                    }
                }
                Err(e) => {
                    shared.error(&w.name, e);
                    w.progressed();
                    break;
                }
            }
        }
    }
    w.step("done");
}

/// One transaction: optionally reads a table, then adds 1 to each row's counter.
fn increment(shared: &Shared<'_>, rows: &[(usize, i32)], read: bool) -> settledb::Result<()> {
    let db = shared.db;
    let mut tx = db.begin()?;
    if read {
        read_some(shared, &mut tx, rows[0].0)?;
    }
    for &(t, id) in rows {
        let ix = db.index(&format!("{}_pkey", table_name(t)))?;
        let done = tx.update_by_key(&ix, &[Value::Int4(id)], |row| match row {
            [id, Value::Int8(n)] => Ok(vec![id.clone(), Value::Int8(n + 1)]),
            other => Err(Error::invalid(format!("unexpected row {other:?}"))),
        })?;
        if done.is_none() {
            return Err(Error::invalid(format!("row {id} of {} not found", table_name(t))));
        }
    }
    tx.commit()
}

/// Reads through the churned index when it exists (it may be dropped meanwhile), else scans.
fn read_some(shared: &Shared<'_>, tx: &mut Transaction<'_>, t: usize) -> settledb::Result<()> {
    shared.counts.reads.fetch_add(1, Ordering::Relaxed);
    match shared.db.index(&index_name(t)) {
        Ok(ix) => match tx.range(&ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward, Some(10)) {
            Ok(_) | Err(Error::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        },
        Err(_) => {
            let table = shared.db.table(&table_name(t))?;
            tx.scan(&table)?.take(10).try_for_each(|r| r.map(drop))
        }
    }
}

fn ddl(shared: &Shared<'_>, w: &Worker, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let db = shared.db;
    let c = &shared.counts;
    while shared.running() {
        let t = rng.gen_range(0..TABLES);
        let (table, index) = (table_name(t), index_name(t));
        let op = rng.gen_range(0..4);
        w.step(format!("ddl {op} on {table}"));
        let r = match op {
            0 => db.create_index(&index, &table, &["n"], false).map(|_| &c.create_index),
            1 => db.drop_index(&index).map(|_| &c.drop_index),
            2 => {
                let v = rng.gen_range(20..200).to_string();
                db.alter_table_set(&table, &[("autovacuum_vacuum_threshold", &v)]).map(|_| &c.alter_table)
            }
            _ => db.vacuum(Some(&table), &VacuumParams::default()).map(|_| &c.vacuum),
        };
        match r {
            Ok(counter) => {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            // The other DDL thread created or dropped the index first.
            Err(Error::AlreadyExists(_) | Error::NotFound(_)) => {
                c.ddl_races.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if retryable(&e, &c.ddl_deadlocks, &c.ddl_lock_timeouts) => {}
            Err(e) => shared.error(&w.name, e),
        }
        w.progressed();
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..5)));
    }
    w.step("done");
}

fn counter_sum(db: &Database) -> Result<i64> {
    let mut tx = db.begin()?;
    let mut sum = 0;
    for i in 0..TABLES {
        let t = db.table(&table_name(i))?;
        for r in tx.scan(&t)? {
            if let [_, Value::Int8(n)] = r?.1.as_slice() {
                sum += n;
            }
        }
    }
    tx.commit()?;
    Ok(sum)
}

fn print_report(r: &ChurnReport) {
    println!("settle stress --ddl-churn: {:.0} s, {} writers, seed {}", r.seconds, r.writers, r.seed);
    println!(
        "  writers:    {} commits, {} increments; retried {} deadlocks (40P01), {} lock timeouts (55P03); {} reads",
        r.commits, r.increments_committed, r.writer_deadlocks_retried, r.writer_lock_timeouts_retried, r.reads
    );
    println!(
        "  ddl:        {} CREATE INDEX, {} DROP INDEX, {} ALTER TABLE SET, {} VACUUM; retried {} deadlocks, {} lock \
         timeouts; {} lost races (index already there / gone)",
        r.create_index,
        r.drop_index,
        r.alter_table,
        r.vacuum,
        r.ddl_deadlocks_retried,
        r.ddl_lock_timeouts_retried,
        r.ddl_races
    );
    println!("  autovacuum: {} vacuums, {} skipped (table locked)", r.autovacuums, r.autovacuum_skipped_locked);
    println!("  engine:     {} deadlocks reported, {} lock timeouts", r.engine_deadlocks, r.engine_lock_timeouts);
    println!(
        "  no hang:    longest time any thread made no progress {:.2} s (limit {} s)",
        r.longest_stall_seconds, r.stall_limit_seconds
    );
    println!(
        "  no lost update: sum of counters {} = committed increments {} ({})",
        r.counter_sum,
        r.increments_committed,
        if r.lost_updates == 0 { "ok" } else { "LOST" }
    );
    println!("  check:      {}", if r.check_clean { "clean" } else { "PROBLEMS" });
    for e in &r.errors {
        println!("  error: {e}");
    }
    println!("{}", if r.ok() { "OK" } else { "FAILED" });
}
