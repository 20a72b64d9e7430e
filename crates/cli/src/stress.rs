//! `settle stress`: every concurrent activity the engine has, at once, on pgbench's tables,
//! with the balance invariant checked in every reader's snapshot.
//!
//! # What runs
//!
//! ```text
//!   transfer × --threads   pgbench's TPC-B-like transaction (accounts, tellers, branches
//!                          += delta, history insert); a serialization failure or deadlock
//!                          is rolled back and retried with the same inputs, as pgbench does
//!   reader × --readers     REPEATABLE READ transactions that sum the balances, alternately
//!                          by sequential scans and by index scans (the primary keys, and the
//!                          churned indexes below while they exist)
//!   vacuum                 manual VACUUM of each table in turn: plain, FREEZE,
//!                          DISABLE_PAGE_SKIPPING (aggressive), and PARALLEL 2 (two workers
//!                          sharing the heap phases and the index bulk deletes)
//!   checkpoint             CHECKPOINT in a loop
//!   ddl                    CREATE INDEX on pgbench_history(aid) and pgbench_accounts(bid) on
//!                          the busy tables, then DROP INDEX, over and over
//!   autovacuum             on, with a 1 s naptime (the least allowed) and low thresholds
//! ```
//!
//! # The invariant
//!
//! Every transfer adds the same delta to one account, one teller and one branch and records
//! it in history, in one transaction. So in every snapshot
//!
//! ```text
//!   sum(abalance) = sum(tbalance) = sum(bbalance) = sum(history.delta)
//! ```
//!
//! and a sum read through an index equals the same sum read by a sequential scan in the same
//! snapshot. A reader that sees otherwise counts a *violation* (a lost or torn update, a
//! snapshot that sees half a transaction, an index missing or duplicating a row). At the end
//! the invariant is checked once more and `settledb::check::check_database` verifies every
//! page, the visibility map and every index against its heap.
//!
//! The command exits 0 only when there was no violation, no unexpected error in any thread,
//! the check is clean, and every activity ran at least once.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use rand::SeedableRng;
use serde::Serialize;
use settledb::{Database, Error, Index, IsolationLevel, KeyBound, ScanDirection, Transaction, VacuumParams, Value};
use workload::pgbench::{Draw, Embedded, PgbenchConn, PgbenchTarget, Script};
use workload::tpcc::Outcome;

mod ddl_churn;

#[derive(Args)]
pub struct StressArgs {
    /// Data directory (created; pgbench's tables in it are dropped and recreated).
    #[arg(long)]
    dir: PathBuf,
    /// How long the concurrent phase runs.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Transfer threads.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Invariant-checking reader threads.
    #[arg(long, default_value_t = 2)]
    readers: usize,
    /// pgbench scale: 100,000 accounts, 10 tellers and 1 branch per unit.
    #[arg(long, default_value_t = 1)]
    scale: u32,
    /// Seed of the transfers' inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Engine settings over the stress defaults (NAME=VALUE).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Instead: churn DDL (CREATE/DROP INDEX, ALTER TABLE SET, VACUUM) against row-locking
    /// writers, with a watchdog and a lost-update check (see `stress/ddl_churn.rs`).
    #[arg(long)]
    ddl_churn: bool,
    /// --ddl-churn: fail when a thread makes no progress for this long.
    #[arg(long, default_value_t = 60)]
    stall_seconds: u64,
}

/// Settings that make every background activity happen often: autovacuum with a short
/// naptime and low thresholds, a small buffer pool (evictions), short checkpoints.
const STRESS_SETTINGS: &[(&str, &str)] = &[
    ("shared_buffers", "8MB"),
    ("autovacuum", "on"),
    ("autovacuum_naptime", "1s"),
    ("autovacuum_vacuum_threshold", "50"),
    ("autovacuum_vacuum_scale_factor", "0.01"),
    ("autovacuum_vacuum_insert_threshold", "100"),
    ("autovacuum_vacuum_insert_scale_factor", "0.01"),
    ("autovacuum_vacuum_cost_delay", "0"),
    ("checkpoint_timeout", "30s"),
];

/// The churned indexes: (name, table, column).
const CHURNED: [(&str, &str, &str); 2] =
    [("stress_history_aid", "pgbench_history", "aid"), ("stress_accounts_bid", "pgbench_accounts", "bid")];

/// The balanced tables and the position of the summed column: (table, column, primary key).
const SUMMED: [(&str, usize, Option<&str>); 4] = [
    ("pgbench_accounts", 2, Some("pgbench_accounts_pkey")),
    ("pgbench_tellers", 2, Some("pgbench_tellers_pkey")),
    ("pgbench_branches", 1, Some("pgbench_branches_pkey")),
    ("pgbench_history", 3, None),
];

/// What happened, counted by every thread.
#[derive(Default)]
struct Counters {
    committed: AtomicU64,
    retries: AtomicU64,
    vacuums: AtomicU64,
    vacuums_freeze: AtomicU64,
    vacuums_aggressive: AtomicU64,
    vacuums_parallel: AtomicU64,
    checkpoints: AtomicU64,
    index_builds: AtomicU64,
    index_drops: AtomicU64,
    checks_seqscan: AtomicU64,
    checks_index: AtomicU64,
    checks_churned_index: AtomicU64,
    violations: AtomicU64,
}

struct Shared<'db> {
    db: &'db Database,
    stop: AtomicBool,
    counters: Counters,
    /// Violations and unexpected errors, in words (the first few are reported).
    problems: Mutex<Vec<String>>,
    errors: AtomicU64,
}

impl Shared<'_> {
    fn problem(&self, what: String) {
        let mut p = self.problems.lock().unwrap_or_else(|e| e.into_inner());
        if p.len() < 20 {
            p.push(what);
        }
    }

    fn error(&self, thread: &str, e: anyhow::Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.problem(format!("{thread}: {e:#}"));
    }

    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    /// Sleeps up to `d`, waking early when the run ends.
    fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        while self.running() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5).min(d));
        }
    }
}

/// The figures a run prints.
#[derive(Serialize, Debug)]
pub struct StressReport {
    pub seconds: f64,
    pub threads: usize,
    pub readers: usize,
    pub scale: u32,
    pub seed: u64,
    pub transactions: u64,
    pub retries: u64,
    pub vacuums: u64,
    pub vacuums_freeze: u64,
    pub vacuums_aggressive: u64,
    pub vacuums_parallel: u64,
    pub autovacuums: u64,
    pub checkpoints: u64,
    pub index_builds: u64,
    pub index_drops: u64,
    pub invariant_checks: u64,
    pub invariant_checks_seqscan: u64,
    pub invariant_checks_index: u64,
    pub invariant_checks_churned_index: u64,
    pub violations: u64,
    pub errors: u64,
    pub final_balance: i64,
    pub check_clean: bool,
    pub check_problems: usize,
    pub problems: Vec<String>,
    /// Activities that never ran (each must run at least once).
    pub missing: Vec<String>,
}

impl StressReport {
    pub fn ok(&self) -> bool {
        self.violations == 0 && self.errors == 0 && self.check_clean && self.missing.is_empty()
    }
}

pub fn run(a: StressArgs) -> Result<ExitCode> {
    anyhow::ensure!(a.threads >= 1 && a.readers >= 1, "--threads and --readers must be at least 1");
    if a.ddl_churn {
        return ddl_churn::run(&a);
    }
    let mut set: Vec<String> = STRESS_SETTINGS.iter().map(|(k, v)| format!("{k}={v}")).collect();
    set.extend(a.set.iter().cloned());
    let config = crate::config_from(&set)?;
    let db = Database::open(&a.dir, config).with_context(|| format!("opening {}", a.dir.display()))?;
    let target = Embedded::new(&db);
    if !a.json {
        eprintln!("initializing pgbench tables at scale {}", a.scale);
    }
    target.init(a.scale)?;
    let report = stress(&db, &target, &a)?;
    db.close()?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(if report.ok() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn stress(db: &Database, target: &Embedded<'_>, a: &StressArgs) -> Result<StressReport> {
    let shared = Shared {
        db,
        stop: AtomicBool::new(false),
        counters: Counters::default(),
        problems: Mutex::new(Vec::new()),
        errors: AtomicU64::new(0),
    };
    let autovacuums_before = db.autovacuum_stats().vacuums;
    let start = Instant::now();
    std::thread::scope(|s| {
        for i in 0..a.threads {
            let (shared, seed) = (&shared, a.seed.wrapping_mul(1000).wrapping_add(i as u64));
            s.spawn(move || transfers(shared, target, seed, a.scale));
        }
        for i in 0..a.readers {
            let shared = &shared;
            s.spawn(move || reader(shared, i));
        }
        s.spawn(|| vacuums(&shared));
        s.spawn(|| checkpoints(&shared));
        s.spawn(|| index_churn(&shared));
        std::thread::sleep(Duration::from_secs(a.seconds));
        shared.stop.store(true, Ordering::Relaxed);
    });
    let seconds = start.elapsed().as_secs_f64();
    let final_balance = match check_snapshot(&shared) {
        Ok(total) => total,
        Err(e) if e.downcast_ref::<Violation>().is_some() => {
            shared.counters.violations.fetch_add(1, Ordering::Relaxed);
            shared.problem(format!("violation at the end: {e}"));
            0
        }
        Err(e) => {
            shared.error("final check", e);
            0
        }
    };
    let check = settledb::check::check_database(db)?;
    for p in check.problems.iter().take(10) {
        shared.problem(format!("check: {p}"));
    }
    let c = &shared.counters;
    let get = |x: &AtomicU64| x.load(Ordering::Relaxed);
    let mut report = StressReport {
        seconds,
        threads: a.threads,
        readers: a.readers,
        scale: a.scale,
        seed: a.seed,
        transactions: get(&c.committed),
        retries: get(&c.retries),
        vacuums: get(&c.vacuums),
        vacuums_freeze: get(&c.vacuums_freeze),
        vacuums_aggressive: get(&c.vacuums_aggressive),
        vacuums_parallel: get(&c.vacuums_parallel),
        autovacuums: db.autovacuum_stats().vacuums - autovacuums_before,
        checkpoints: get(&c.checkpoints),
        index_builds: get(&c.index_builds),
        index_drops: get(&c.index_drops),
        invariant_checks: get(&c.checks_seqscan) + get(&c.checks_index),
        invariant_checks_seqscan: get(&c.checks_seqscan),
        invariant_checks_index: get(&c.checks_index),
        invariant_checks_churned_index: get(&c.checks_churned_index),
        violations: get(&c.violations),
        errors: get(&shared.errors),
        final_balance,
        check_clean: check.is_clean(),
        check_problems: check.problems.len(),
        problems: shared.problems.into_inner().unwrap_or_else(|e| e.into_inner()),
        missing: Vec::new(),
    };
    report.missing = missing_activities(&report);
    Ok(report)
}

/// The activities that never happened in the run (the test requires each at least once).
fn missing_activities(r: &StressReport) -> Vec<String> {
    let counts = [
        ("transactions", r.transactions),
        ("vacuums", r.vacuums),
        ("vacuums_freeze", r.vacuums_freeze),
        ("vacuums_aggressive", r.vacuums_aggressive),
        ("vacuums_parallel", r.vacuums_parallel),
        ("checkpoints", r.checkpoints),
        ("index_builds", r.index_builds),
        ("index_drops", r.index_drops),
        ("invariant_checks_seqscan", r.invariant_checks_seqscan),
        ("invariant_checks_index", r.invariant_checks_index),
    ];
    counts.iter().filter(|(_, n)| *n == 0).map(|(name, _)| name.to_string()).collect()
}

fn print_report(r: &StressReport) {
    println!(
        "settle stress: {:.1} s, {} transfer threads, {} readers, scale {}, seed {}",
        r.seconds, r.threads, r.readers, r.scale, r.seed
    );
    println!(
        "transactions committed: {} ({:.0} per second), retries: {}",
        r.transactions,
        r.transactions as f64 / r.seconds,
        r.retries
    );
    println!(
        "vacuums: {} (freeze {}, aggressive {}, parallel {}), autovacuums: {}, checkpoints: {}",
        r.vacuums, r.vacuums_freeze, r.vacuums_aggressive, r.vacuums_parallel, r.autovacuums, r.checkpoints
    );
    println!("index builds: {}, index drops: {}", r.index_builds, r.index_drops);
    println!(
        "invariant checks: {} (sequential scans {}, index scans {}; sums through a churned index {})",
        r.invariant_checks, r.invariant_checks_seqscan, r.invariant_checks_index, r.invariant_checks_churned_index
    );
    println!("violations: {}, errors: {}", r.violations, r.errors);
    println!("final balance (every table): {}", r.final_balance);
    println!("check: {}", if r.check_clean { "clean".to_string() } else { format!("{} problems", r.check_problems) });
    for p in &r.problems {
        println!("problem: {p}");
    }
    if !r.missing.is_empty() {
        println!("never happened: {}", r.missing.join(", "));
    }
    println!("{}", if r.ok() { "OK" } else { "FAILED" });
}

// ---------------------------------------------------------------------------------------------
// The threads.

fn transfers(shared: &Shared<'_>, target: &Embedded<'_>, seed: u64, scale: u32) {
    let mut conn = match target.connect() {
        Ok(c) => c,
        Err(e) => return shared.error("transfer connect", e),
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let c = &shared.counters;
    while shared.running() {
        let d = Draw::new(&mut rng, scale);
        loop {
            match conn.transaction(Script::TpcbLike, &d) {
                Ok(Outcome::Committed) => {
                    c.committed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(_) => {
                    c.retries.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    shared.error("transfer", e);
                    return;
                }
            }
        }
    }
}

fn vacuums(shared: &Shared<'_>) {
    let c = &shared.counters;
    let mut round = 0usize;
    while shared.running() {
        let (table, _, _) = SUMMED[round % SUMMED.len()];
        let kind = round % 4;
        let params = VacuumParams {
            freeze: kind == 1,
            disable_page_skipping: kind == 2,
            parallel: (kind == 3).then_some(2),
            ..Default::default()
        };
        match shared.db.vacuum(Some(table), &params) {
            Ok(_) => {
                c.vacuums.fetch_add(1, Ordering::Relaxed);
                match kind {
                    1 => c.vacuums_freeze.fetch_add(1, Ordering::Relaxed),
                    2 => c.vacuums_aggressive.fetch_add(1, Ordering::Relaxed),
                    3 => c.vacuums_parallel.fetch_add(1, Ordering::Relaxed),
                    _ => 0,
                };
            }
            Err(e) => return shared.error(&format!("VACUUM {table}"), e.into()),
        }
        round += 1;
        shared.pause(Duration::from_millis(20));
    }
}

fn checkpoints(shared: &Shared<'_>) {
    while shared.running() {
        if let Err(e) = shared.db.checkpoint() {
            return shared.error("CHECKPOINT", e.into());
        }
        shared.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        shared.pause(Duration::from_millis(100));
    }
}

/// CREATE INDEX and DROP INDEX of the churned indexes, alternately, on the busy tables.
fn index_churn(shared: &Shared<'_>) {
    let c = &shared.counters;
    let mut round = 0usize;
    while shared.running() {
        let (name, table, column) = CHURNED[round % CHURNED.len()];
        let r = if shared.db.index(name).is_ok() {
            shared.db.drop_index(name).map(|()| &c.index_drops)
        } else {
            shared.db.create_index(name, table, &[column], false).map(|_| &c.index_builds)
        };
        match r {
            Ok(n) => {
                n.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => return shared.error(&format!("DDL on {name}"), e.into()),
        }
        round += 1;
        shared.pause(Duration::from_millis(150));
    }
}

fn reader(shared: &Shared<'_>, n: usize) {
    let c = &shared.counters;
    let mut round = n;
    while shared.running() {
        let by_index = round % 2 == 1;
        let r = if by_index { check_by_index(shared) } else { check_snapshot(shared).map(|_| ()) };
        match r {
            Ok(()) => {
                let counter = if by_index { &c.checks_index } else { &c.checks_seqscan };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.downcast_ref::<Violation>().is_some() => {
                c.violations.fetch_add(1, Ordering::Relaxed);
                shared.problem(format!("violation: {e}"));
            }
            Err(e) => return shared.error("reader", e),
        }
        round += 1;
    }
}

/// A broken invariant (as opposed to an error from the engine).
#[derive(Debug)]
struct Violation(String);

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Violation {}

fn violation(what: String) -> anyhow::Error {
    anyhow::Error::new(Violation(what))
}

/// Sums column `col` of `rows`.
fn sum_of<'a>(rows: impl IntoIterator<Item = &'a Vec<Value>>, col: usize) -> i64 {
    rows.into_iter()
        .map(|r| match r.get(col) {
            Some(Value::Int4(v)) => i64::from(*v),
            _ => 0,
        })
        .sum()
}

/// The four sums by sequential scans in one REPEATABLE READ snapshot; they must agree.
fn check_snapshot(shared: &Shared<'_>) -> Result<i64> {
    let db = shared.db;
    let mut tx = db.begin_with(IsolationLevel::RepeatableRead)?;
    let sums = seqscan_sums(db, &mut tx)?;
    tx.commit()?;
    if sums.iter().any(|&s| s != sums[0]) {
        return Err(violation(format!(
            "sequential-scan sums disagree: accounts, tellers, branches, history = {sums:?}"
        )));
    }
    Ok(sums[0])
}

fn seqscan_sums(db: &Database, tx: &mut Transaction<'_>) -> Result<Vec<i64>> {
    let mut sums = Vec::with_capacity(SUMMED.len());
    for (table, col, _) in SUMMED {
        let t = db.table(table)?;
        let mut rows = Vec::new();
        for row in tx.scan(&t)? {
            rows.push(row?.1);
        }
        sums.push(sum_of(&rows, col));
    }
    Ok(sums)
}

/// Every row of `index`, in one command of `tx`.
fn all_rows(tx: &mut Transaction<'_>, index: &Index) -> settledb::Result<Vec<Vec<Value>>> {
    let rows = tx.range(index, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward, None)?;
    Ok(rows.into_iter().map(|(_, v)| v).collect())
}

/// In one snapshot: the balanced tables' sums through their primary keys, history's and each
/// churned index's sums through the churned indexes while they exist, all equal to the
/// sequential-scan sums.
fn check_by_index(shared: &Shared<'_>) -> Result<()> {
    let db = shared.db;
    let mut tx = db.begin_with(IsolationLevel::RepeatableRead)?;
    let seq = seqscan_sums(db, &mut tx)?;
    for (i, (table, col, pkey)) in SUMMED.iter().enumerate() {
        let Some(pkey) = pkey else { continue };
        let rows = all_rows(&mut tx, &db.index(pkey)?)?;
        let by_index = sum_of(&rows, *col);
        if by_index != seq[0] || seq[i] != seq[0] {
            return Err(violation(format!(
                "{table}: sum through {pkey} {by_index}, by sequential scan {}; sequential-scan sums of \
                 accounts, tellers, branches, history = {seq:?}",
                seq[i]
            )));
        }
    }
    for (name, table, _) in CHURNED {
        let Ok(index) = db.index(name) else { continue };
        let rows = match all_rows(&mut tx, &index) {
            Ok(rows) => rows,
            // Dropped between the lookup and the scan.
            Err(Error::NotFound(_)) => continue,
            Err(e) => return Err(anyhow::Error::new(e).context(format!("scanning {name}"))),
        };
        let (i, (_, col, _)) = SUMMED.iter().enumerate().find(|(_, s)| s.0 == table).context("summed table")?;
        let by_index = sum_of(&rows, *col);
        if by_index != seq[i] {
            return Err(violation(format!("{table}: sum through {name} {by_index}, by sequential scan {}", seq[i])));
        }
        shared.counters.checks_churned_index.fetch_add(1, Ordering::Relaxed);
    }
    tx.commit()?;
    Ok(())
}
