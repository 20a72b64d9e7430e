//! `settle bench aging`: what each freeze policy does, and what it costs, while XIDs age.
//!
//! # The question
//!
//! On one seeded workload, with autovacuum on and the XID ages scaled down so that several
//! anti-wraparound cycles fit in a minute, how do `vacuum_freeze_policy = lazy | pg16 | eager`
//! compare? Seed 000 (Peter Geoghegan, pgsql-hackers, January 2022) predicts that freezing a
//! page as soon as VACUUM sets it all-visible avoids the anti-wraparound "freezing cliff" (a
//! large aggressive VACUUM that must read and freeze every page skipped so far), at the price
//! of some freezing wasted on pages that are modified again. This benchmark measures both
//! sides: the cliff in the autovacuum log, the waste in the pages frozen and the WAL.
//!
//! # Workload
//!
//! Per policy, a fresh data directory under the temporary directory, then:
//!
//! ```text
//! pgbench_accounts  S x 100,000 rows (aid int4, bid int4, abalance int4, filler 84 chars),
//!                   fillfactor 100, loaded in one transaction, primary key built after
//! pgbench_history   append-only (tid, bid, aid, delta, mtime, filler), no index
//!
//! N times, one thread, RNG seeded with --seed:
//!     UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid
//!     INSERT INTO pgbench_history VALUES (:tid, :bid, :aid, :delta, :mtime, NULL)
//!     COMMIT
//! after every BURN_EVERY transactions: consume_xids(BURN_EVERY x (K - 1))
//! ```
//!
//! so that the run consumes about N x K XIDs, and `aid`, `tid` and `delta` are uniform as in
//! pgbench. The load is not measured and not vacuumed by hand (`pgbench -i` would VACUUM):
//! every VACUUM in the measured phase is an autovacuum, including the first one of the loaded
//! table, so each policy pays for freezing the load in its own way.
//!
//! The UPDATE finds its row through the primary key (`update_by_key`, `--lookup key`), or, with
//! `--lookup tid`, through the row's current TID, which the benchmark tracks (`update_with`);
//! the key is maintained and vacuumed either way. Keyed lookups that fall back to sequential
//! scans (the index unusable to the snapshot) stop the run with an error, since every
//! transaction would then read the whole table and the run would measure that instead.
//!
//! # Settings
//!
//! `fsync = off`, `autovacuum = on`, `autovacuum_naptime = 1s`,
//! `log_autovacuum_min_duration = 0`, `max_wal_size = 128MB`, and the freeze ages in
//! PostgreSQL's default proportions (200M / 50M / 150M): `autovacuum_freeze_max_age = A`
//! (`--freeze-max-age`, default 2M), `vacuum_freeze_min_age = A/4`,
//! `vacuum_freeze_table_age = 3A/4`. The small `max_wal_size` makes a checkpoint every few
//! seconds, so that freezing a page pays a full-page image when it is the page's first change
//! since a checkpoint, as in production (without checkpoints freezing would look nearly free).
//! Every other parameter keeps its default (the cost-based delay included); `--set NAME=VALUE`
//! overrides any of them.
//!
//! Scaling the ages down does not scale everything. What decides the outcome is how many
//! ordinary (dead-tuple or insert-triggered) autovacuums of a table fall in one freeze cycle:
//! here autovacuum visits a busy table about once per naptime, and a cycle of A XIDs lasts
//! A / (K x tps) seconds, some 6 to 8 with the defaults, so a handful of visits; a production
//! system with the real 200M sees hundreds. Fewer ordinary vacuums per cycle leave the lazy
//! policies fewer chances to advance relfrozenxid, so these settings favour the cliff.
//!
//! # Figures
//!
//! Per policy: wall time and rate of the transaction phase, per-transaction latency, XIDs
//! consumed. Per table: autovacuums and anti-wraparound autovacuums, pages frozen and VM bits
//! cleared by DML (`pg_stat_user_tables`); the pages whose all-frozen bit was set at one
//! visibility-map sample and clear at the next (frozen, then modified: wasted freezing,
//! sampled every VM_SAMPLE_EVERY, so a lower bound) and the all-frozen pages at the end; the
//! largest relfrozenxid age sampled during the run, the age and the heap size at the end. WAL
//! written during the run. And, parsed from the autovacuum log entries (PostgreSQL's format,
//! `settledb::vacuum::report`), the pages scanned, elapsed time, pages frozen and WAL of the
//! anti-wraparound and of the other autovacuums of every table (`pg_class` included), summed
//! and at their largest. At the end the database is closed, reopened with autovacuum off, and
//! `settledb::check` verifies it; problems are printed (the first CHECK_PROBLEMS_SHOWN) and the
//! command exits 1. A run that stops with an error is reported after the figures of the others,
//! and the command exits 2.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use settledb::{Column, Database, FreezePolicy, Index, Schema, Table, TableOptions, Tid, Type, Value};

use crate::bench::{machine, Machine};
use workload::vacuum_log::{LogSplit, LogSums, LogTotals};

/// XIDs are burned, and relfrozenxid ages sampled, after every this many transactions.
const BURN_EVERY: u64 = 100;
/// The visibility maps are sampled at most this often (reading them costs a little).
const VM_SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// Problems of `settledb::check` kept in the report (the first ones; all are counted).
const CHECK_PROBLEMS_SHOWN: usize = 20;
/// How long the end of the run waits for autovacuum workers still running.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Args, Debug)]
pub struct AgingArgs {
    /// Freeze policies to run, in this order, each on a fresh data directory.
    #[arg(long, value_delimiter = ',', default_value = "lazy,pg16,eager")]
    policy: Vec<String>,
    /// TPC-B-like transactions per policy.
    #[arg(long, default_value_t = 1_200_000)]
    transactions: u64,
    /// Scale factor: 100,000 accounts per unit.
    #[arg(long, short = 's', default_value_t = 1)]
    scale: u32,
    /// XIDs consumed per transaction on average, its own included (the rest are burned with
    /// consume_xids every 100 transactions).
    #[arg(long, default_value_t = 7)]
    xids_per_tx: u64,
    /// autovacuum_freeze_max_age; vacuum_freeze_min_age and vacuum_freeze_table_age are set
    /// to 1/4 and 3/4 of it, PostgreSQL's default proportions.
    #[arg(long, default_value_t = 2_000_000)]
    freeze_max_age: u32,
    /// How a transaction finds its account: `key` (update_by_key through the primary key, as
    /// pgbench does) or `tid` (update_with on the row's current TID, which the benchmark
    /// tracks; the primary key is still maintained and vacuumed, only never searched).
    #[arg(long, value_enum, default_value_t = Lookup::Key)]
    lookup: Lookup,
    /// Seed of the workload's random numbers.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Configuration parameters applied after the benchmark's own, `name=value`.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Keep each policy's data directory (its path is printed) instead of removing it.
    #[arg(long)]
    keep: bool,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// How a transaction finds the account it updates.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lookup {
    Key,
    Tid,
}

impl Lookup {
    fn name(self) -> &'static str {
        match self {
            Lookup::Key => "key",
            Lookup::Tid => "tid",
        }
    }
}

/// One table's figures at the end of a run.
#[derive(Serialize, Debug)]
pub struct TableFigures {
    pub name: String,
    pub autovacuums: u64,
    pub anti_wraparound_autovacuums: u64,
    pub pages_frozen: u64,
    /// `pg_stat_user_tables.vm_bits_cleared`: VM bits cleared by inserts, updates, deletes.
    pub vm_bits_cleared: u64,
    /// Pages whose all-frozen bit was set at one visibility-map sample and clear at the next
    /// (frozen, then modified; a lower bound, samples are VM_SAMPLE_EVERY apart).
    pub all_frozen_lost_sampled: u64,
    pub all_frozen_pages_end: u64,
    pub relfrozenxid_age_max: u64,
    pub relfrozenxid_age_end: u64,
    pub heap_pages_end: u64,
}

/// One policy's run.
#[derive(Serialize, Debug)]
pub struct PolicyRun {
    pub policy: String,
    pub load_seconds: f64,
    /// The transaction phase.
    pub seconds: f64,
    pub transactions: u64,
    pub tps: f64,
    pub latency_ms_p50: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_max: f64,
    pub xids_consumed: u64,
    /// XIDs consumed / autovacuum_freeze_max_age.
    pub freeze_cycles: f64,
    /// Waiting at the end for autovacuums still running.
    pub settle_seconds: f64,
    pub tables: Vec<TableFigures>,
    pub wal_records: u64,
    pub wal_bytes: u64,
    pub wal_fpi: u64,
    pub autovacuum_log: LogTotals,
    pub check: String,
    /// The first CHECK_PROBLEMS_SHOWN problems `settledb::check` found (the count is in `check`).
    pub check_problems: Vec<String>,
    pub data_dir: Option<PathBuf>,
}

#[derive(Serialize)]
struct AgingReport {
    benchmark: &'static str,
    machine: Machine,
    scale: u32,
    transactions: u64,
    xids_per_tx: u64,
    lookup: Lookup,
    seed: u64,
    settings: Vec<String>,
    runs: Vec<PolicyRun>,
    /// Runs that stopped with an error (they have no figures).
    errors: Vec<PolicyError>,
}

#[derive(Serialize)]
struct PolicyError {
    policy: String,
    error: String,
}

/// The relfrozenxid age as PostgreSQL's `age()` computes it.
fn xid_age(db: &Database, t: &Table) -> u64 {
    let x = t.relfrozenxid();
    if x.is_normal() {
        u64::from(db.next_xid().xid().0.wrapping_sub(x.0))
    } else {
        i32::MAX as u64
    }
}

fn col(n: &str, ty: Type, nullable: bool) -> Column {
    Column { name: n.into(), ty, nullable }
}

/// The tables and what a transaction needs to find its account.
struct Workload {
    accounts: Table,
    pkey: Index,
    history: Table,
    /// The current TID of every account (`aid - 1`), for `--lookup tid`.
    account_tids: Vec<Tid>,
    scale: u32,
    lookup: Lookup,
}

/// Creates and loads the two tables (accounts loaded in one transaction, key built after).
fn init(db: &Database, scale: u32, lookup: Lookup) -> Result<Workload> {
    let accounts = db.create_table(
        "pgbench_accounts",
        Schema {
            columns: vec![
                col("aid", Type::Int4, false),
                col("bid", Type::Int4, true),
                col("abalance", Type::Int4, true),
                col("filler", Type::Text, true),
            ],
        },
        TableOptions { fillfactor: 100, ..TableOptions::default() },
    )?;
    let history = db.create_table(
        "pgbench_history",
        Schema {
            columns: vec![
                col("tid", Type::Int4, true),
                col("bid", Type::Int4, true),
                col("aid", Type::Int4, true),
                col("delta", Type::Int4, true),
                col("mtime", Type::Timestamp, true),
                col("filler", Type::Text, true),
            ],
        },
        TableOptions::default(),
    )?;
    let filler = " ".repeat(84);
    let total = 100_000 * scale as i32;
    let mut account_tids = Vec::with_capacity(total as usize);
    let mut tx = db.begin()?;
    let mut aid = 1;
    while aid <= total {
        let end = (aid + 10_000).min(total + 1);
        let rows: Vec<Vec<Value>> = (aid..end)
            .map(|a| {
                vec![Value::Int4(a), Value::Int4((a - 1) / 100_000 + 1), Value::Int4(0), Value::Text(filler.clone())]
            })
            .collect();
        account_tids.extend(tx.insert_many(&accounts, &rows)?);
        aid = end;
    }
    tx.commit()?;
    let pkey = db.create_index("pgbench_accounts_pkey", "pgbench_accounts", &["aid"], true)?;
    db.checkpoint()?;
    Ok(Workload { accounts, pkey, history, account_tids, scale, lookup })
}

/// `abalance = abalance + delta`.
fn add_to_balance(delta: i32) -> impl FnMut(&[Value]) -> settledb::Result<Vec<Value>> {
    move |row: &[Value]| {
        let mut r = row.to_vec();
        if let Some(Value::Int4(b)) = r.get_mut(2) {
            *b = b.wrapping_add(delta);
        }
        Ok(r)
    }
}

/// One TPC-B-like transaction (the accounts update and the history insert); `n` numbers it.
fn transaction(db: &Database, w: &mut Workload, rng: &mut StdRng, n: u64) -> Result<()> {
    let aid = rng.gen_range(1..=100_000 * w.scale as i32);
    let tid = rng.gen_range(1..=10 * w.scale as i32);
    let delta = rng.gen_range(-5000..=5000);
    let mut tx = db.begin()?;
    let updated = match w.lookup {
        Lookup::Key => tx.update_by_key(&w.pkey, &[Value::Int4(aid)], add_to_balance(delta))?,
        Lookup::Tid => {
            let slot = w.account_tids.get_mut(aid as usize - 1).context("account out of range")?;
            let new = tx.update_with(&w.accounts, *slot, add_to_balance(delta))?;
            if let Some(t) = new {
                *slot = t;
            }
            new
        }
    };
    anyhow::ensure!(updated.is_some(), "account {aid} not found");
    // A synthetic, deterministic mtime: one microsecond per transaction from 2025-01-01.
    let mtime = 1_735_689_600_000_000 + n as i64;
    let row = [
        Value::Int4(tid),
        Value::Int4((tid - 1) / 10 + 1),
        Value::Int4(aid),
        Value::Int4(delta),
        Value::Timestamp(mtime),
        Value::Null,
    ];
    tx.insert(&w.history, &row)?;
    tx.commit()?;
    Ok(())
}

/// What is sampled during the run, per table: the largest relfrozenxid age, and the pages
/// whose all-frozen bit was set at one visibility-map sample and clear at the next.
struct Sampler {
    tables: Vec<Table>,
    age_max: Vec<u64>,
    frozen: Vec<Vec<bool>>,
    frozen_lost: Vec<u64>,
    last_vm: Instant,
}

impl Sampler {
    fn new(tables: Vec<Table>) -> Sampler {
        let n = tables.len();
        Sampler {
            tables,
            age_max: vec![0; n],
            frozen: vec![Vec::new(); n],
            frozen_lost: vec![0; n],
            last_vm: Instant::now(),
        }
    }

    fn ages(&mut self, db: &Database) {
        for (i, t) in self.tables.iter().enumerate() {
            self.age_max[i] = self.age_max[i].max(xid_age(db, t));
        }
    }

    /// Samples the visibility maps when VM_SAMPLE_EVERY has passed (or `now`).
    fn vm(&mut self, db: &Database, now: bool) -> Result<()> {
        if !now && self.last_vm.elapsed() < VM_SAMPLE_EVERY {
            return Ok(());
        }
        for (i, t) in self.tables.iter().enumerate() {
            let bits: Vec<bool> = db.visibility_map(t)?.into_iter().map(|(_, frozen)| frozen).collect();
            let lost = self.frozen[i].iter().zip(&bits).filter(|&(&was, &is)| was && !is).count();
            self.frozen_lost[i] += lost as u64;
            self.frozen[i] = bits;
        }
        self.last_vm = Instant::now();
        Ok(())
    }
}

/// What the transaction phase measured.
struct Phase {
    seconds: f64,
    latencies_us: Vec<u32>,
    xids_consumed: u64,
    sampler: Sampler,
    log: LogTotals,
}

/// Fails when keyed lookups stopped using the primary key (they fall back to sequential
/// scans when the index is not usable by the snapshot), which would measure something else.
fn ensure_index_scans(db: &Database, w: &Workload, seq_scan0: u64, n: u64) -> Result<()> {
    let seq = db.table_stats(&w.accounts).seq_scan;
    anyhow::ensure!(
        w.lookup != Lookup::Key || seq == seq_scan0,
        "after transaction {n} (next XID {}), update_by_key on pgbench_accounts_pkey fell back to \
         sequential scans ({} so far): the index is no longer usable, an engine bug; \
         --lookup tid avoids index lookups",
        db.next_xid(),
        seq - seq_scan0
    );
    Ok(())
}

/// The transaction phase: N transactions, XIDs burned and ages sampled every BURN_EVERY.
fn run_transactions(db: &Database, a: &AgingArgs, w: &mut Workload) -> Result<Phase> {
    let mut rng = StdRng::seed_from_u64(a.seed);
    let xid0 = db.next_xid().0;
    let seq_scan0 = db.table_stats(&w.accounts).seq_scan;
    let mut p = Phase {
        seconds: 0.0,
        latencies_us: Vec::with_capacity(a.transactions as usize),
        xids_consumed: 0,
        sampler: Sampler::new(vec![w.accounts.clone(), w.history.clone()]),
        log: LogTotals::default(),
    };
    let start = Instant::now();
    for n in 0..a.transactions {
        let t0 = Instant::now();
        transaction(db, w, &mut rng, n).with_context(|| format!("transaction {n}"))?;
        p.latencies_us.push(u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX));
        if (n + 1) % BURN_EVERY == 0 || n + 1 == a.transactions {
            let burn = BURN_EVERY * (a.xids_per_tx - 1);
            if burn > 0 {
                db.consume_xids(burn).with_context(|| format!("consume_xids({burn}) after transaction {n}"))?;
            }
            p.sampler.ages(db);
            p.sampler.vm(db, false)?;
            ensure_index_scans(db, w, seq_scan0, n)?;
            for e in db.take_log() {
                p.log.add(&e);
            }
        }
    }
    p.seconds = start.elapsed().as_secs_f64();
    p.xids_consumed = db.next_xid().0 - xid0;
    Ok(p)
}

/// Waits (up to SETTLE_TIMEOUT) for the autovacuum workers to finish what they are doing.
fn settle(db: &Database) -> f64 {
    let start = Instant::now();
    while db.autovacuum_stats().running > 0 && start.elapsed() < SETTLE_TIMEOUT {
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed().as_secs_f64()
}

/// The value below which `q` of the sorted values lie, in milliseconds.
fn percentile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() - 1) as f64 * q).round() as usize;
    f64::from(sorted_us[i.min(sorted_us.len() - 1)]) / 1000.0
}

/// The benchmark's own settings for one policy, then the user's.
fn settings(a: &AgingArgs, policy: FreezePolicy) -> Vec<String> {
    let age = a.freeze_max_age;
    let mut s = vec![
        "fsync=off".to_string(),
        "autovacuum=on".into(),
        "autovacuum_naptime=1s".into(),
        format!("autovacuum_freeze_max_age={age}"),
        format!("vacuum_freeze_min_age={}", age / 4),
        format!("vacuum_freeze_table_age={}", (u64::from(age) * 3 / 4)),
        "log_autovacuum_min_duration=0".into(),
        "max_wal_size=128MB".into(),
        format!("vacuum_freeze_policy={policy}"),
    ];
    s.extend(a.set.iter().cloned());
    s
}

/// Closes the database, reopens it with autovacuum off and verifies it.
pub(crate) fn close_and_check(db: Database, dir: &Path, set: &[String]) -> Result<settledb::check::CheckReport> {
    db.close().context("closing the database")?;
    let mut set = set.to_vec();
    set.push("autovacuum=off".into());
    let db = Database::open(dir, crate::config_from(&set)?).context("reopening for the check")?;
    let report = settledb::check::check_database(&db)?;
    db.close()?;
    Ok(report)
}

/// Each table's figures at the end of the run.
fn table_figures(db: &Database, sampler: &mut Sampler) -> Result<Vec<TableFigures>> {
    sampler.ages(db);
    sampler.vm(db, true)?;
    let mut out = Vec::new();
    for (i, t) in sampler.tables.iter().enumerate() {
        let s = db.table_stats(t);
        out.push(TableFigures {
            name: t.name().to_string(),
            autovacuums: s.autovacuum_count,
            anti_wraparound_autovacuums: s.anti_wraparound_count,
            pages_frozen: s.pages_frozen,
            vm_bits_cleared: s.vm_bits_cleared,
            all_frozen_lost_sampled: sampler.frozen_lost[i],
            all_frozen_pages_end: sampler.frozen[i].iter().filter(|&&f| f).count() as u64,
            relfrozenxid_age_max: sampler.age_max[i],
            relfrozenxid_age_end: xid_age(db, t),
            heap_pages_end: u64::from(db.table_pages(t)?),
        });
    }
    Ok(out)
}

/// One policy on a fresh data directory.
fn run_policy(a: &AgingArgs, policy: FreezePolicy, dir: &Path) -> Result<PolicyRun> {
    let set = settings(a, policy);
    let db = Database::open(dir, crate::config_from(&set)?)?;
    let t0 = Instant::now();
    let mut w = init(&db, a.scale, a.lookup)?;
    let load_seconds = t0.elapsed().as_secs_f64();
    let wal0 = db.stats().wal;
    let mut phase = run_transactions(&db, a, &mut w)?;
    let settle_seconds = settle(&db);
    for e in db.take_log() {
        phase.log.add(&e);
    }
    let wal = db.stats().wal;
    let tables = table_figures(&db, &mut phase.sampler)?;
    let check = close_and_check(db, dir, &set)?;
    let mut lat = std::mem::take(&mut phase.latencies_us);
    lat.sort_unstable();
    Ok(PolicyRun {
        policy: policy.to_string(),
        load_seconds,
        seconds: phase.seconds,
        transactions: a.transactions,
        tps: a.transactions as f64 / phase.seconds.max(1e-9),
        latency_ms_p50: percentile_ms(&lat, 0.5),
        latency_ms_p99: percentile_ms(&lat, 0.99),
        latency_ms_max: percentile_ms(&lat, 1.0),
        xids_consumed: phase.xids_consumed,
        freeze_cycles: phase.xids_consumed as f64 / f64::from(a.freeze_max_age),
        settle_seconds,
        tables,
        wal_records: wal.records - wal0.records,
        wal_bytes: wal.bytes - wal0.bytes,
        wal_fpi: wal.fpi - wal0.fpi,
        autovacuum_log: phase.log,
        check: check.to_string().lines().last().unwrap_or_default().to_string(),
        check_problems: check.problems.into_iter().take(CHECK_PROBLEMS_SHOWN).collect(),
        data_dir: a.keep.then(|| dir.to_path_buf()),
    })
}

/// Removes a data directory when dropped, unless it is to be kept.
struct DirGuard(PathBuf, bool);

impl Drop for DirGuard {
    fn drop(&mut self) {
        if !self.1 {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn validate(a: &AgingArgs) -> Result<Vec<FreezePolicy>> {
    anyhow::ensure!(a.transactions >= 1, "--transactions must be at least 1");
    anyhow::ensure!(a.xids_per_tx >= 1, "--xids-per-tx must be at least 1 (a transaction's own XID)");
    anyhow::ensure!((1..=1000).contains(&a.scale), "--scale must be between 1 and 1000");
    anyhow::ensure!(!a.policy.is_empty(), "--policy needs at least one policy");
    a.policy
        .iter()
        .map(|p| {
            FreezePolicy::parse(p.trim())
                .with_context(|| format!("unknown freeze policy {p:?} (expected lazy, pg16, eager or adaptive)"))
        })
        .collect()
}

pub fn run(a: AgingArgs) -> Result<ExitCode> {
    let policies = validate(&a)?;
    // Reject a bad --set before any work.
    crate::config_from(&settings(&a, policies[0]))?;
    let (mut runs, mut errors) = (Vec::new(), Vec::new());
    for &policy in &policies {
        let dir = std::env::temp_dir().join(format!("settle-bench-aging-{}-{policy}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        let _guard = DirGuard(dir.clone(), a.keep);
        if !a.json {
            eprintln!("aging: running vacuum_freeze_policy={policy} in {}", dir.display());
        }
        // A failed run does not hide the others: it is reported with them.
        match run_policy(&a, policy, &dir) {
            Ok(r) => runs.push(r),
            Err(e) => errors.push(PolicyError { policy: policy.to_string(), error: format!("{e:#}") }),
        }
    }
    let check_failed = runs.iter().any(|r| !r.check_problems.is_empty());
    let report = AgingReport {
        benchmark: "aging",
        machine: machine(),
        scale: a.scale,
        transactions: a.transactions,
        xids_per_tx: a.xids_per_tx,
        lookup: a.lookup,
        seed: a.seed,
        settings: settings(&a, policies[0]).into_iter().filter(|s| !s.starts_with("vacuum_freeze_policy=")).collect(),
        runs,
        errors,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    if !report.errors.is_empty() {
        eprintln!("FAILED: {} of {} runs stopped with an error", report.errors.len(), policies.len());
        return Ok(ExitCode::from(2));
    }
    if check_failed {
        eprintln!("FAILED: settledb::check found problems after a run");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// One metric group: a title and rows of (label, one value per policy).
struct Group {
    title: String,
    rows: Vec<(String, Vec<String>)>,
}

impl Group {
    fn new(title: impl Into<String>) -> Group {
        Group { title: title.into(), rows: Vec::new() }
    }

    fn row(&mut self, label: &str, values: impl IntoIterator<Item = String>) {
        self.rows.push((label.to_string(), values.into_iter().collect()));
    }

    fn render(&self, policies: &[String]) -> String {
        let label_w = self.rows.iter().map(|(l, _)| l.len()).chain([self.title.len()]).max().unwrap_or(0);
        let col_w = |i: usize| {
            self.rows.iter().filter_map(|(_, v)| v.get(i)).map(String::len).chain([policies[i].len(), 10]).max()
        };
        let widths: Vec<usize> = (0..policies.len()).map(|i| col_w(i).unwrap_or(10)).collect();
        let mut out = format!("{:<label_w$}", self.title);
        for (p, w) in policies.iter().zip(&widths) {
            let _ = write!(out, "  {p:>w$}");
        }
        out.push('\n');
        for (label, values) in &self.rows {
            let _ = write!(out, "{label:<label_w$}");
            for (v, w) in values.iter().zip(&widths) {
                let _ = write!(out, "  {v:>w$}");
            }
            out.push('\n');
        }
        out
    }
}

fn render(r: &AgingReport) -> String {
    let m = &r.machine;
    let mut out = format!("machine: {} CPUs ({}), {} GiB, {}\n", m.cpus, m.cpu_model, m.memory_gib, m.os);
    let _ = writeln!(
        out,
        "workload: scale {} ({} accounts), {} transactions, {} XIDs per transaction, lookup by {}, seed {}",
        r.scale,
        100_000 * u64::from(r.scale),
        r.transactions,
        r.xids_per_tx,
        r.lookup.name(),
        r.seed
    );
    let _ = writeln!(out, "settings: {}\n", r.settings.join(" "));
    if !r.runs.is_empty() {
        let policies: Vec<String> = r.runs.iter().map(|p| p.policy.clone()).collect();
        let text: Vec<String> = groups(&r.runs).iter().map(|g| g.render(&policies)).collect();
        out.push_str(&text.join("\n"));
    }
    for p in &r.runs {
        let _ = writeln!(out, "\n{}: check: {}", p.policy, p.check);
        for problem in &p.check_problems {
            let _ = writeln!(out, "  {problem}");
        }
        for e in &p.autovacuum_log.other_entries {
            let _ = writeln!(out, "  log: {}", e.lines().next().unwrap_or_default());
        }
        if let Some(d) = &p.data_dir {
            let _ = writeln!(out, "  data directory kept: {}", d.display());
        }
    }
    for e in &r.errors {
        let _ = writeln!(out, "\n{}: error: {}", e.policy, e.error);
    }
    out
}

fn int(v: u64) -> String {
    v.to_string()
}

fn secs(v: f64) -> String {
    format!("{v:.2}")
}

/// The metric groups, policies as columns.
fn groups(runs: &[PolicyRun]) -> Vec<Group> {
    let each = |f: &dyn Fn(&PolicyRun) -> String| -> Vec<String> { runs.iter().map(f).collect() };
    let mut run = Group::new("run");
    run.row("seconds", each(&|p| secs(p.seconds)));
    run.row("transactions", each(&|p| int(p.transactions)));
    run.row("tps", each(&|p| format!("{:.0}", p.tps)));
    run.row("latency p50 ms", each(&|p| format!("{:.3}", p.latency_ms_p50)));
    run.row("latency p99 ms", each(&|p| format!("{:.3}", p.latency_ms_p99)));
    run.row("latency max ms", each(&|p| format!("{:.1}", p.latency_ms_max)));
    run.row("XIDs consumed", each(&|p| int(p.xids_consumed)));
    run.row("freeze_max_age cycles", each(&|p| format!("{:.1}", p.freeze_cycles)));
    run.row("settle seconds", each(&|p| secs(p.settle_seconds)));
    let mut out = vec![run];
    let names: Vec<String> =
        runs.first().map(|p| p.tables.iter().map(|t| t.name.clone()).collect()).unwrap_or_default();
    for (i, name) in names.iter().enumerate() {
        let mut g = Group::new(name.as_str());
        let t = |f: &dyn Fn(&TableFigures) -> u64| -> Vec<String> {
            runs.iter().map(|p| p.tables.get(i).map_or_else(String::new, |t| int(f(t)))).collect()
        };
        g.row("autovacuums", t(&|t| t.autovacuums));
        g.row("anti-wraparound autovacuums", t(&|t| t.anti_wraparound_autovacuums));
        g.row("pages frozen", t(&|t| t.pages_frozen));
        g.row("VM bits cleared (stats)", t(&|t| t.vm_bits_cleared));
        g.row("all-frozen bits lost (sampled)", t(&|t| t.all_frozen_lost_sampled));
        g.row("end all-frozen pages", t(&|t| t.all_frozen_pages_end));
        g.row("max relfrozenxid age", t(&|t| t.relfrozenxid_age_max));
        g.row("end relfrozenxid age", t(&|t| t.relfrozenxid_age_end));
        g.row("end heap pages", t(&|t| t.heap_pages_end));
        out.push(g);
    }
    let mut wal = Group::new("WAL (transaction phase)");
    wal.row("records", each(&|p| int(p.wal_records)));
    wal.row("bytes", each(&|p| int(p.wal_bytes)));
    wal.row("full-page images", each(&|p| int(p.wal_fpi)));
    out.push(wal);
    let mut logged: Vec<&String> = runs.iter().flat_map(|p| p.autovacuum_log.tables.keys()).collect();
    logged.sort();
    logged.dedup();
    for (title, wraparound) in [("autovacuum log: anti-wraparound", true), ("autovacuum log: other", false)] {
        let pick = |l: &LogSplit| if wraparound { l.anti_wraparound } else { l.normal };
        let mut g = Group::new(title);
        let totals = |l: &LogTotals| LogSplit { anti_wraparound: l.anti_wraparound, normal: l.normal };
        let s = |f: &dyn Fn(&LogSums) -> String| -> Vec<String> {
            runs.iter().map(|p| f(&pick(&totals(&p.autovacuum_log)))).collect()
        };
        g.row("vacuums", s(&|l| int(l.vacuums)));
        for name in &logged {
            let of = |p: &PolicyRun| p.autovacuum_log.tables.get(*name).map_or(0, |t| pick(t).vacuums);
            g.row(&format!("  of {name}"), runs.iter().map(|p| int(of(p))));
        }
        g.row("pages scanned", s(&|l| int(l.pages_scanned)));
        g.row("largest pages scanned", s(&|l| int(l.pages_scanned_max)));
        g.row("elapsed s", s(&|l| secs(l.elapsed_seconds)));
        g.row("longest elapsed s", s(&|l| secs(l.elapsed_seconds_max)));
        g.row("pages frozen", s(&|l| int(l.pages_frozen)));
        g.row("WAL bytes", s(&|l| int(l.wal_bytes)));
        g.row("WAL full-page images", s(&|l| int(l.wal_fpi)));
        out.push(g);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_put_policies_in_columns() {
        let g = Group { title: "run".into(), rows: vec![("seconds".into(), vec!["1.00".into(), "22.50".into()])] };
        let text = g.render(&["lazy".into(), "eager".into()]);
        assert_eq!(text, "run            lazy       eager\nseconds        1.00       22.50\n");
    }

    #[test]
    fn percentiles_pick_from_sorted_values() {
        let v: Vec<u32> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(percentile_ms(&v, 0.5), 51.0);
        assert_eq!(percentile_ms(&v, 1.0), 100.0);
        assert_eq!(percentile_ms(&[], 0.99), 0.0);
    }
}
