//! `settle tpcc`: TPC-C-like under autovacuum with scaled XID ages, freeze policies side by
//! side (the main job).
//!
//! # What a run does
//!
//! 1. The population (`--warehouses W`, seeded) is loaded once into `DIR/template` with its
//!    keys and indexes (reused by later runs with the same warehouses and seed).
//! 2. For each policy of `--compare` (or the one `--policy`): the template is copied to
//!    `DIR/<policy>`, opened with `vacuum_freeze_policy = <policy>`, the aging profile's XID ages
//!    (`--aging 1:N`, see [`workload::aging`]) and the seed's autovacuum cadence
//!    ([`workload::aging::SEED_CADENCE`]), autovacuum on with a 1 s naptime and every
//!    autovacuum logged, then every table is vacuumed once (BenchmarkSQL's build ends with
//!    `vacuum analyze`), and the same seeded workload runs (`--transactions` or `--duration`)
//!    at a fixed rate (`--rate`, see [`workload::tpcc::run`]), so that the XIDs consumed per
//!    autovacuum cycle do not depend on the machine.
//!    While it runs, a progress line shows the rate, XIDs consumed, the oldest relfrozenxid
//!    age and the autovacuums running, and each autovacuum's log heading is printed as it
//!    happens; a sample of every table's figures is taken each second for the charts.
//! 3. At the end: the consistency conditions of the specification, then the database is closed,
//!    reopened with autovacuum off and verified by `settledb::check`.
//! 4. With `--peer` (a throwaway PostgreSQL 15) or `--target URL`, the same seeded workload
//!    runs on PostgreSQL through the same driver trait, and its statistics views and server
//!    log fill one more column, "postgres" (PostgreSQL 15 behaves as `lazy` would, with
//!    PostgreSQL's own VACUUM).
//! 5. The report: per table and policy, per database, per half of the run (seed 000's two
//!    days), per transaction type, and the targets of seed 000 (eager against lazy, and the
//!    adaptive policy against both) stated as met, missed or not applicable; as text, as JSON
//!    (`--json` on stdout), and as `DIR/report.json` and a self-contained `DIR/report.html`
//!    with SVG charts.

pub mod charts;
pub mod html;
mod targets;
mod text;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use settledb::{Database, FreezePolicy, VacuumParams};
use workload::aging::{Aging, SEED_CADENCE};
use workload::observe::{observe_embedded, DbCounters, Observation};
use workload::tpcc::run::Mix;
use workload::tpcc::{self, embedded, Facts, RunConfig, RunProgress, RunResult, TpccConn, TpccTarget};
use workload::vacuum_log::parse_log_entry;

use crate::bench::{machine, Machine};
use targets::targets;
pub use text::{groups, render};

#[derive(Args, Debug)]
pub struct TpccArgs {
    /// Directory for the template and one data directory per policy (default: a temporary
    /// directory, removed at the end unless --keep).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Warehouses. One keeps the orders tables small enough that autovacuum visits them
    /// several times per freeze cycle at the strongest aging (as the seed's did); more add
    /// remote-warehouse payments and supply.
    #[arg(long, default_value_t = 1)]
    pub warehouses: i32,
    #[arg(long, default_value_t = 4)]
    pub terminals: usize,
    /// Terminal transactions per policy (shared evenly by the terminals, so every policy runs
    /// the same requests); the default unless --duration is given.
    #[arg(long, conflicts_with = "duration")]
    pub transactions: Option<u64>,
    /// Seconds per policy instead of a number of transactions. Every policy still runs the
    /// same requests: under a rate limit the count is rate x seconds; unthrottled, the first
    /// policy runs for this long and the others run as many transactions as it did.
    #[arg(long)]
    pub duration: Option<u64>,
    /// Terminal transactions per second, all terminals together (BenchmarkSQL's
    /// limitTxnsPerMin / 60), so that the XIDs consumed per autovacuum cycle are a property of
    /// the workload and not of the machine's speed; 0 runs the terminals unthrottled.
    #[arg(long, default_value_t = DEFAULT_RATE)]
    pub rate: f64,
    /// The one freeze policy to run (lazy, pg16, eager, adaptive) when --compare is not given.
    #[arg(long, default_value = "eager")]
    pub policy: String,
    /// Freeze policies to run one after the other on the same seeded workload.
    #[arg(long, value_delimiter = ',')]
    pub compare: Vec<String>,
    /// One XID here stands for N in PostgreSQL's default ages (1:1 to 1:2000).
    #[arg(long, default_value = "1:2000")]
    pub aging: Aging,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// New-Order/Payment/Order-Status/Delivery/Stock-Level percentages.
    #[arg(long, default_value = "45/43/4/4/4")]
    pub mix: Mix,
    /// Background workers processing queued Deliveries.
    #[arg(long, default_value_t = 1)]
    pub delivery_workers: usize,
    /// More settledb parameters, `name=value` (after the run's own); `shared_buffers` is also
    /// given to the PostgreSQL column.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Print the report as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Keep the data directories of a temporary --dir.
    #[arg(long)]
    pub keep: bool,
    /// No progress line and no autovacuum log lines while running.
    #[arg(long)]
    pub quiet: bool,
    /// Also run on the PostgreSQL server at this URL (one more column, "postgres"): its
    /// bmsql_* tables are replaced, the aging profile is applied per table and by ALTER SYSTEM.
    #[arg(long, conflicts_with = "peer")]
    pub target: Option<String>,
    /// Also run on a throwaway PostgreSQL 15 started on a loopback port for this run (the
    /// aging profile and the run's settings passed at server start), stopped at the end.
    #[arg(long)]
    pub peer: bool,
    #[arg(long, default_value_t = 54337)]
    pub peer_port: u16,
}

/// Terminal transactions per policy when neither --transactions nor --duration is given.
const DEFAULT_TRANSACTIONS: u64 = 300_000;

/// The default rate limit, terminal transactions per second.
const DEFAULT_RATE: f64 = 2000.0;

/// A rate-limited run kept its rate when no terminal fell further behind its schedule than
/// this (one `autovacuum_naptime`): past it, the XIDs per autovacuum cycle start to depend on
/// the machine.
const LATE_MAX_SECONDS: f64 = 1.0;

/// Seconds between samples.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The tables the seed's targets name.
const INSERT_HEAVY: [&str; 4] = ["bmsql_oorder", "bmsql_order_line", "bmsql_new_order", "bmsql_history"];
const ORDERS_TABLES: [&str; 2] = ["bmsql_oorder", "bmsql_order_line"];

/// One sample of a run, for the charts.
#[derive(Serialize, Clone, Debug)]
pub struct Sample {
    pub seconds: f64,
    pub xids: u64,
    pub wal_bytes: u64,
    pub transactions: u64,
    pub autovacuums_running: u32,
    /// relfrozenxid age and heap pages per table, in `ColumnResult::table_names` order.
    pub ages: Vec<u64>,
    pub heap_pages: Vec<u64>,
}

/// One autovacuum, from its log entry, placed in the run by the terminal transactions done
/// and XIDs consumed when its entry was read (within one sampling interval of its end).
#[derive(Serialize, Clone, Debug)]
pub struct VacuumEvent {
    pub seconds: f64,
    pub transactions: u64,
    pub xids: u64,
    /// 0 in the first half of the run, 1 in the second.
    pub half: usize,
    pub table: String,
    pub wraparound: bool,
    pub aggressive: bool,
    pub removable_cutoff: Option<u32>,
    pub new_relfrozenxid: Option<u32>,
    pub pages_scanned: u64,
    pub pages_frozen: u64,
    pub wal_bytes: u64,
    pub wal_fpi: u64,
    pub elapsed_seconds: f64,
}

/// One half of a run (seed 000 compared two 24-hour runs): where it ends and what it cost.
#[derive(Serialize, Clone, Debug, Default)]
pub struct HalfResult {
    /// Terminal transactions done, XIDs consumed and WAL written at the end of the half
    /// (cumulative from the run's start; the first half's end is interpolated between
    /// samples).
    pub transactions_at_end: u64,
    pub xids_at_end: u64,
    pub wal_bytes_at_end: u64,
    /// During the half.
    pub xids: u64,
    pub wal_bytes: u64,
    pub autovacuums: u64,
    pub anti_wraparound_autovacuums: u64,
    /// Anti-wraparound autovacuums per table, tables with none left out.
    pub anti_wraparound_by_table: BTreeMap<String, u64>,
    pub autovacuum_pages_frozen: u64,
    pub autovacuum_wal_bytes: u64,
}

#[derive(Serialize, Clone, Debug)]
pub struct TableResult {
    pub name: String,
    pub autovacuums: u64,
    pub anti_wraparound_autovacuums: u64,
    /// Aggressive autovacuums (anti-wraparound ones included): the freezing cliffs, each
    /// scanning every page not all-frozen and freezing every XID older than FreezeLimit.
    pub aggressive_autovacuums: u64,
    pub max_relfrozenxid_age: u64,
    pub relfrozenxid_age_at_end: u64,
    /// Mean XIDs between two autovacuums of the table (from their removable cutoffs)…
    pub xids_between_autovacuums: Option<u64>,
    /// … and the longest such interval.
    pub xids_between_autovacuums_max: Option<u64>,
    /// `autovacuum_freeze_max_age` over the mean interval (seed 000: 5.06 on oorder).
    pub autovacuums_per_freeze_max_age: Option<f64>,
    /// Autovacuums whose new relfrozenxid reached the previous autovacuum's removable cutoff,
    /// of those that had a previous one (seed 000's pattern).
    pub relfrozenxid_reached_previous_cutoff: (u64, u64),
    pub pages_frozen: Option<u64>,
    pub frozen_pages_modified: Option<u64>,
    /// Frozen pages modified again / pages frozen, percent: freezing that did not stick.
    pub wasted_freeze_percent: Option<f64>,
    pub vm_bits_cleared: Option<u64>,
    pub heap_blks_accessed: u64,
    pub heap_pages: u64,
    pub index_pages: u64,
}

/// One column of the report: a policy on the embedded engine, or PostgreSQL.
#[derive(Serialize, Clone, Debug)]
pub struct ColumnResult {
    pub name: String,
    pub settings: Vec<String>,
    pub setup_vacuum_seconds: f64,
    pub run: RunResult,
    pub xids_consumed: u64,
    /// Differences over the run.
    pub db: DbCounters,
    pub tables: Vec<TableResult>,
    pub table_names: Vec<String>,
    pub samples: Vec<Sample>,
    pub vacuums: Vec<VacuumEvent>,
    pub halves: [HalfResult; 2],
    pub consistency_violations: Vec<String>,
    pub check: String,
    pub check_problems: Vec<String>,
    pub other_log_entries: Vec<String>,
}

#[derive(Serialize, Clone, Debug)]
pub struct Target {
    pub name: String,
    pub value: String,
    pub goal: String,
    pub met: bool,
    /// False when the run is not one the target speaks of (shown as n/a, neither met nor
    /// missed): heap accesses with the data in cache, the rate limit on an unthrottled run.
    pub applies: bool,
    /// An account beside the targets (the cadence achieved), shown as info.
    pub informational: bool,
}

impl Target {
    fn new(name: impl Into<String>, value: impl Into<String>, goal: impl Into<String>, met: bool) -> Target {
        Target { name: name.into(), value: value.into(), goal: goal.into(), met, applies: true, informational: false }
    }

    /// MET, MISSED, n/a or info.
    pub fn verdict(&self) -> &'static str {
        match (self.informational, self.applies, self.met) {
            (true, _, _) => "info",
            (_, false, _) => "n/a",
            (_, true, true) => "MET",
            (_, true, false) => "MISSED",
        }
    }
}

#[derive(Serialize)]
pub struct TpccReport {
    pub benchmark: &'static str,
    pub machine: Machine,
    pub warehouses: i32,
    pub terminals: usize,
    pub seed: u64,
    pub aging: String,
    pub mix: Mix,
    pub nurand: workload::rng::NurandConstants,
    pub load_seconds: Option<f64>,
    pub columns: Vec<ColumnResult>,
    pub targets: Vec<Target>,
    pub errors: Vec<(String, String)>,
}

/// The settings a policy's run uses, in order (later ones win).
fn settings(a: &TpccArgs, policy: FreezePolicy) -> Vec<String> {
    let mut s: Vec<String> = vec![
        "fsync=off".into(),
        "autovacuum=on".into(),
        "autovacuum_naptime=1s".into(),
        "log_autovacuum_min_duration=0".into(),
        "max_wal_size=128MB".into(),
        format!("vacuum_freeze_policy={}", policy.name()),
    ];
    s.extend(a.aging.settings().into_iter().map(|(k, v)| format!("{k}={v}")));
    s.extend(SEED_CADENCE.iter().map(|(k, v)| format!("{k}={v}")));
    s.extend(a.set.iter().cloned());
    s
}

/// The PostgreSQL settings of a run: the same as settledb's where PostgreSQL has them, the
/// aging profile (with its MultiXact ages), and `shared_buffers` like settledb's default.
fn postgres_settings(a: &TpccArgs) -> Vec<(String, String)> {
    let mut s: Vec<(String, String)> = [
        ("fsync", "off"),
        ("autovacuum", "on"),
        ("autovacuum_naptime", "1s"),
        ("log_autovacuum_min_duration", "0"),
        ("max_wal_size", "128MB"),
        ("shared_buffers", "128MB"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in a.aging.settings().into_iter().chain(a.aging.multixact_settings()) {
        s.push((k.to_string(), v));
    }
    s.extend(SEED_CADENCE.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    // The working set against shared buffers is part of the experiment (the larger-scale run
    // shrinks them): a `--set shared_buffers` applies to both engines.
    for v in a.set.iter().filter_map(|kv| kv.strip_prefix("shared_buffers=")) {
        s.push(("shared_buffers".into(), v.trim().to_string()));
    }
    s
}

/// Runs the workload on PostgreSQL at `url`: schema, load, settings, VACUUM, run.
fn run_postgres(a: &TpccArgs, url: &str, ui: &Ui, transactions: Option<u64>) -> Result<ColumnResult> {
    use workload::observe::{Observer, PgObserver};
    use workload::tpcc::postgres;
    let name = "postgres";
    ui.status(name, format!("loading {} warehouses into {url}", a.warehouses));
    postgres::create_schema(url)?;
    postgres::load(url, a.warehouses, a.seed)?;
    let settings = postgres_settings(a);
    // On a server we did not start, the ages go per table and by ALTER SYSTEM; settings that
    // need a restart are the operator's.
    if a.target.is_some() {
        let runtime: Vec<(String, String)> = settings
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "fsync" | "shared_buffers" | "max_wal_size"))
            .cloned()
            .collect();
        postgres::apply_settings(url, &runtime)?;
    }
    ui.status(name, "VACUUM (ANALYZE) of every table (as BenchmarkSQL's build)".into());
    let started = Instant::now();
    postgres::vacuum_all(url)?;
    let setup_vacuum_seconds = started.elapsed().as_secs_f64();
    let target = postgres::PgTarget::new(url)?;
    let mut observer = PgObserver::new(url)?;
    let _ = observer.take_log()?;
    let mut probe = || -> Result<(Observation, Vec<String>)> {
        let o = observer.observe()?;
        Ok((o, observer.take_log()?))
    };
    let mut column = measure(a, name, &target, &mut probe, ui, transactions)?;
    column.setup_vacuum_seconds = setup_vacuum_seconds;
    column.settings = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    column.consistency_violations = target.connect()?.consistency_facts()?.violations();
    column.check = "not run (settledb's verifier reads settledb's files)".into();
    Ok(column)
}

/// The template's description; a template is reused only when it matches.
#[derive(Serialize, serde::Deserialize, PartialEq, Debug)]
struct TemplateInfo {
    warehouses: i32,
    seed: u64,
    format: u32,
}

const TEMPLATE_FORMAT: u32 = 1;

/// Loads the population into `dir/template` unless a matching one is there; the seconds the
/// load took, if it ran.
fn ensure_template(a: &TpccArgs, dir: &Path, ui: &Ui) -> Result<Option<f64>> {
    let t = dir.join("template");
    let info_path = dir.join("template.json");
    let want = TemplateInfo { warehouses: a.warehouses, seed: a.seed, format: TEMPLATE_FORMAT };
    if let Ok(bytes) = std::fs::read(&info_path) {
        if serde_json::from_slice::<TemplateInfo>(&bytes).ok().as_ref() == Some(&want) && t.is_dir() {
            ui.note(&format!("reusing the population in {}", t.display()));
            return Ok(None);
        }
    }
    let _ = std::fs::remove_file(&info_path);
    let _ = std::fs::remove_dir_all(&t);
    ui.note(&format!("loading {} warehouses into {} ...", a.warehouses, t.display()));
    let started = Instant::now();
    let db = Database::open(&t, crate::config_from(&["fsync=off".into(), "autovacuum=off".into()])?)?;
    embedded::create_schema(&db)?;
    embedded::load(&db, a.warehouses, a.seed)?;
    db.checkpoint()?;
    db.close()?;
    let secs = started.elapsed().as_secs_f64();
    std::fs::write(&info_path, serde_json::to_vec(&want)?)?;
    ui.note(&format!("loaded in {secs:.1} s"));
    Ok(Some(secs))
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), &target).with_context(|| format!("copying {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// Progress output on stderr (hidden with --quiet or --json).
struct Ui {
    bar: Option<ProgressBar>,
}

impl Ui {
    fn new(quiet: bool) -> Ui {
        if quiet {
            return Ui { bar: None };
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(ProgressStyle::with_template("{spinner} {prefix:>6} {elapsed:>4} {wide_msg}").expect("template"));
        bar.enable_steady_tick(Duration::from_millis(200));
        Ui { bar: Some(bar) }
    }

    fn note(&self, line: &str) {
        if let Some(b) = &self.bar {
            b.suspend(|| eprintln!("{line}"));
        }
    }

    fn status(&self, prefix: &str, msg: String) {
        if let Some(b) = &self.bar {
            b.set_prefix(prefix.to_string());
            b.set_message(msg);
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Runs one policy in `dir` (a fresh copy of the template).
fn run_policy(
    a: &TpccArgs,
    policy: FreezePolicy,
    base: &Path,
    ui: &Ui,
    transactions: Option<u64>,
) -> Result<ColumnResult> {
    let dir = base.join(policy.name());
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&base.join("template"), &dir)?;
    let set = settings(a, policy);
    let db = Database::open(&dir, crate::config_from(&set)?)?;
    let name = policy.name().to_string();
    ui.status(&name, "VACUUM of every table (as BenchmarkSQL's build)".into());
    let started = Instant::now();
    db.vacuum(None, &VacuumParams::default())?;
    let setup_vacuum_seconds = started.elapsed().as_secs_f64();
    let _ = db.take_log();
    let target = embedded::Embedded::new(&db)?;
    let mut probe = || -> Result<(Observation, Vec<String>)> { Ok((observe_embedded(&db)?, db.take_log())) };
    let mut column = measure(a, &name, &target, &mut probe, ui, transactions)?;
    column.setup_vacuum_seconds = setup_vacuum_seconds;
    column.settings = set.clone();
    let facts: Facts = target.connect()?.consistency_facts()?;
    column.consistency_violations = facts.violations();
    ui.status(&name, "closing and checking".into());
    let report = crate::bench::aging::close_and_check(db, &dir, &set)?;
    column.check = report.to_string();
    column.check_problems = report.problems.iter().take(20).map(|p| p.to_string()).collect();
    Ok(column)
}

/// The terminal transactions every column runs, when they are known before the first run:
/// `--transactions`, or `--duration` times the rate limit, or the default; `None` for an
/// unthrottled `--duration`, where the first column's count fixes the others'.
fn planned_transactions(a: &TpccArgs) -> Option<u64> {
    match (a.transactions, a.duration) {
        (Some(n), _) => Some(n),
        (None, Some(secs)) if a.rate > 0.0 => Some((a.rate * secs as f64).round() as u64),
        (None, Some(_)) => None,
        (None, None) => Some(DEFAULT_TRANSACTIONS),
    }
}

/// Runs the workload on `target` while sampling it each second through `probe`:
/// `transactions` of them, or for `--duration` seconds when that is `None`.
fn measure<T: TpccTarget>(
    a: &TpccArgs,
    name: &str,
    target: &T,
    probe: &mut dyn FnMut() -> Result<(Observation, Vec<String>)>,
    ui: &Ui,
    transactions: Option<u64>,
) -> Result<ColumnResult> {
    let cfg = RunConfig {
        warehouses: a.warehouses,
        terminals: a.terminals,
        transactions,
        duration: a.duration.map(Duration::from_secs),
        seed: a.seed,
        mix: a.mix,
        delivery_workers: a.delivery_workers,
        rate: (a.rate > 0.0).then_some(a.rate),
    };
    let progress = RunProgress::default();
    let (first, _) = probe()?;
    let table_names: Vec<String> = first.tables.iter().map(|t| t.name.clone()).collect();
    let mut samples: Vec<Sample> = Vec::new();
    let mut vacuums: Vec<VacuumEvent> = Vec::new();
    let mut other_log_entries = Vec::new();
    let mut max_age: BTreeMap<String, u64> = BTreeMap::new();
    let started = Instant::now();
    let mut last: Observation = first.clone();
    let run = std::thread::scope(|s| -> Result<RunResult> {
        let handle = s.spawn(|| tpcc::run(target, &cfg, &progress));
        let mut record = |obs: &Observation, log: Vec<String>| {
            let seconds = started.elapsed().as_secs_f64();
            for t in &obs.tables {
                let m = max_age.entry(t.name.clone()).or_default();
                *m = (*m).max(t.relfrozenxid_age);
            }
            let by_name: BTreeMap<&str, &workload::observe::TableObs> =
                obs.tables.iter().map(|t| (t.name.as_str(), t)).collect();
            samples.push(Sample {
                seconds,
                xids: obs.next_xid.saturating_sub(first.next_xid),
                wal_bytes: obs.db.wal_bytes.saturating_sub(first.db.wal_bytes),
                transactions: progress.done.load(std::sync::atomic::Ordering::Relaxed),
                autovacuums_running: obs.autovacuums_running,
                ages: table_names.iter().map(|n| by_name.get(n.as_str()).map_or(0, |t| t.relfrozenxid_age)).collect(),
                heap_pages: table_names.iter().map(|n| by_name.get(n.as_str()).map_or(0, |t| t.heap_pages)).collect(),
            });
            let sample = samples.last().expect("a sample was just pushed");
            let (transactions, xids) = (sample.transactions, sample.xids);
            for entry in log {
                match parse_log_entry(&entry) {
                    Some(e) => {
                        ui.note(&format!("[{name}] {}", entry.lines().next().unwrap_or_default()));
                        vacuums.push(VacuumEvent {
                            seconds,
                            transactions,
                            xids,
                            half: 0,
                            table: e.table,
                            wraparound: e.wraparound,
                            aggressive: e.aggressive,
                            removable_cutoff: e.removable_cutoff,
                            new_relfrozenxid: e.new_relfrozenxid,
                            pages_scanned: e.pages_scanned,
                            pages_frozen: e.pages_frozen,
                            wal_bytes: e.wal_bytes,
                            wal_fpi: e.wal_fpi,
                            elapsed_seconds: e.elapsed_seconds,
                        });
                    }
                    None => {
                        ui.note(&format!("[{name}] {}", entry.trim_end()));
                        other_log_entries.push(entry.trim_end().to_string());
                    }
                }
            }
        };
        let mut next = Instant::now() + SAMPLE_EVERY;
        while !handle.is_finished() {
            std::thread::sleep(Duration::from_millis(50));
            if Instant::now() < next {
                continue;
            }
            next += SAMPLE_EVERY;
            let (obs, log) = probe()?;
            let secs = started.elapsed().as_secs_f64();
            let done = progress.done.load(std::sync::atomic::Ordering::Relaxed);
            ui.status(
                name,
                format!(
                    "{:>8} tx  {:>6.0} tps  {:>9} XIDs  oldest relfrozenxid age {:>8}  autovacuums running {}",
                    done,
                    done as f64 / secs.max(1e-9),
                    obs.next_xid.saturating_sub(first.next_xid),
                    obs.max_relfrozenxid_age(),
                    obs.autovacuums_running
                ),
            );
            record(&obs, log);
            last = obs;
        }
        let r = handle.join().map_err(|_| anyhow::anyhow!("the run panicked"))??;
        let (obs, log) = probe()?;
        record(&obs, log);
        last = obs;
        Ok(r)
    })?;
    let tables = table_names
        .iter()
        .map(|n| {
            let (t0, t1) = (first.table(n).cloned().unwrap_or_default(), last.table(n).cloned().unwrap_or_default());
            let diff = |f: fn(&workload::observe::TableObs) -> Option<u64>| Some(f(&t1)?.saturating_sub(f(&t0)?));
            let mine: Vec<&VacuumEvent> = vacuums.iter().filter(|v| &v.table == n).collect();
            let cutoffs: Vec<u32> = mine.iter().filter_map(|v| v.removable_cutoff).collect();
            let gaps: Vec<u64> = cutoffs.windows(2).map(|w| u64::from(w[1].wrapping_sub(w[0]))).collect();
            let reached = mine
                .windows(2)
                .filter(|w| w[0].removable_cutoff.is_some())
                .map(|w| match (w[0].removable_cutoff, w[1].new_relfrozenxid) {
                    (Some(c), Some(r)) => (r.wrapping_sub(c) as i32) >= 0,
                    _ => false,
                })
                .fold((0, 0), |(k, n), ok| (k + u64::from(ok), n + 1));
            let mean_gap = (!gaps.is_empty()).then(|| gaps.iter().sum::<u64>() / gaps.len() as u64);
            TableResult {
                name: n.clone(),
                autovacuums: t1.autovacuum_count.saturating_sub(t0.autovacuum_count),
                anti_wraparound_autovacuums: t1.anti_wraparound_count.saturating_sub(t0.anti_wraparound_count),
                aggressive_autovacuums: mine.iter().filter(|v| v.aggressive || v.wraparound).count() as u64,
                max_relfrozenxid_age: max_age.get(n).copied().unwrap_or(0).max(t0.relfrozenxid_age),
                relfrozenxid_age_at_end: t1.relfrozenxid_age,
                xids_between_autovacuums: mean_gap,
                xids_between_autovacuums_max: gaps.iter().copied().max(),
                autovacuums_per_freeze_max_age: mean_gap
                    .filter(|&g| g > 0)
                    .map(|g| freeze_max_age(&a.aging, &a.set) as f64 / g as f64),
                relfrozenxid_reached_previous_cutoff: reached,
                pages_frozen: diff(|t| t.pages_frozen),
                frozen_pages_modified: diff(|t| t.frozen_pages_modified),
                wasted_freeze_percent: match (diff(|t| t.pages_frozen), diff(|t| t.frozen_pages_modified)) {
                    (Some(f), Some(m)) if f > 0 => Some(100.0 * m as f64 / f as f64),
                    _ => None,
                },
                vm_bits_cleared: diff(|t| t.vm_bits_cleared),
                heap_blks_accessed: (t1.heap_blks_hit + t1.heap_blks_read)
                    .saturating_sub(t0.heap_blks_hit + t0.heap_blks_read),
                heap_pages: t1.heap_pages,
                index_pages: t1.index_pages,
            }
        })
        .collect();
    let halves = split_halves(run.transactions, &samples, &mut vacuums);
    Ok(ColumnResult {
        name: name.to_string(),
        settings: Vec::new(),
        setup_vacuum_seconds: 0.0,
        xids_consumed: last.next_xid.saturating_sub(first.next_xid),
        run,
        db: last.db.since(&first.db),
        tables,
        table_names,
        samples,
        vacuums,
        halves,
        consistency_violations: Vec::new(),
        check: String::new(),
        check_problems: Vec::new(),
        other_log_entries,
    })
}

/// Cuts a run at half its terminal transactions: marks each autovacuum with its half and sums
/// each half's XIDs, WAL and autovacuums.
fn split_halves(transactions: u64, samples: &[Sample], vacuums: &mut [VacuumEvent]) -> [HalfResult; 2] {
    let mid = transactions / 2;
    // XIDs and WAL at the midpoint, interpolated between the samples around it.
    let at = |f: fn(&Sample) -> u64| -> u64 {
        let i = samples.partition_point(|s| s.transactions < mid);
        match (i.checked_sub(1).and_then(|j| samples.get(j)), samples.get(i)) {
            (Some(a), Some(b)) if b.transactions > a.transactions => {
                let t = (mid - a.transactions) as f64 / (b.transactions - a.transactions) as f64;
                f(a) + ((f(b).saturating_sub(f(a))) as f64 * t) as u64
            }
            (_, Some(b)) => f(b),
            (Some(a), None) => f(a),
            (None, None) => 0,
        }
    };
    let end = samples.last();
    let mut halves = [HalfResult::default(), HalfResult::default()];
    halves[0].transactions_at_end = mid;
    halves[0].xids_at_end = at(|s| s.xids);
    halves[0].wal_bytes_at_end = at(|s| s.wal_bytes);
    halves[1].transactions_at_end = end.map_or(0, |s| s.transactions);
    halves[1].xids_at_end = end.map_or(0, |s| s.xids);
    halves[1].wal_bytes_at_end = end.map_or(0, |s| s.wal_bytes);
    halves[0].xids = halves[0].xids_at_end;
    halves[0].wal_bytes = halves[0].wal_bytes_at_end;
    halves[1].xids = halves[1].xids_at_end.saturating_sub(halves[0].xids_at_end);
    halves[1].wal_bytes = halves[1].wal_bytes_at_end.saturating_sub(halves[0].wal_bytes_at_end);
    for v in vacuums.iter_mut() {
        v.half = usize::from(v.transactions > mid);
        let h = &mut halves[v.half];
        h.autovacuums += 1;
        h.autovacuum_pages_frozen += v.pages_frozen;
        h.autovacuum_wal_bytes += v.wal_bytes;
        if v.wraparound {
            h.anti_wraparound_autovacuums += 1;
            *h.anti_wraparound_by_table.entry(v.table.clone()).or_default() += 1;
        }
    }
    halves
}

/// The run's `autovacuum_freeze_max_age`: the aging profile's, or a `--set` over it.
fn freeze_max_age(aging: &Aging, set: &[String]) -> u64 {
    set.iter()
        .rev()
        .filter_map(|s| s.strip_prefix("autovacuum_freeze_max_age="))
        .find_map(|v| v.trim().parse().ok())
        .unwrap_or_else(|| aging.freeze_max_age())
}

fn policies(a: &TpccArgs) -> Result<Vec<FreezePolicy>> {
    let names = if a.compare.is_empty() { vec![a.policy.clone()] } else { a.compare.clone() };
    let mut out = Vec::new();
    for n in names {
        let p = FreezePolicy::parse(n.trim())
            .with_context(|| format!("unknown freeze policy {n:?} (expected lazy, pg16, eager or adaptive)"))?;
        if out.contains(&p) {
            bail!("policy {n} is listed twice");
        }
        out.push(p);
    }
    Ok(out)
}

pub fn run(a: TpccArgs) -> Result<ExitCode> {
    if a.warehouses < 1 || a.terminals < 1 {
        bail!("--warehouses and --terminals must be at least 1");
    }
    if !(a.rate.is_finite() && a.rate >= 0.0) {
        bail!("--rate {}: expected terminal transactions per second, or 0 for unthrottled", a.rate);
    }
    let policies = policies(&a)?;
    let (base, temporary) = match &a.dir {
        Some(d) => (d.clone(), false),
        None => (std::env::temp_dir().join(format!("settle-tpcc-{}", std::process::id())), true),
    };
    std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    let ui = Ui::new(a.quiet || a.json);
    let load_seconds = ensure_template(&a, &base, &ui)?;
    let mut columns = Vec::new();
    let mut errors = Vec::new();
    // Equal work: every column runs the same seeded requests.
    let mut transactions = planned_transactions(&a);
    for p in &policies {
        match run_policy(&a, *p, &base, &ui, transactions) {
            Ok(c) => {
                transactions.get_or_insert(c.run.transactions);
                columns.push(c);
            }
            Err(e) => errors.push((p.name().to_string(), format!("{e:#}"))),
        }
    }
    let peer = if a.peer {
        ui.status("postgres", format!("starting PostgreSQL 15 on port {}", a.peer_port));
        match crate::peer::Postgres::start(a.peer_port, &postgres_settings(&a)) {
            Ok(pg) => Some(pg),
            Err(e) => {
                errors.push(("postgres".into(), format!("{e:#}")));
                None
            }
        }
    } else {
        None
    };
    if let Some(url) = a.target.clone().or_else(|| peer.as_ref().map(|p| p.url())) {
        match run_postgres(&a, &url, &ui, transactions) {
            Ok(c) => columns.push(c),
            Err(e) => errors.push(("postgres".into(), format!("{e:#}"))),
        }
    }
    drop(peer);
    ui.finish();
    let report = TpccReport {
        benchmark: "tpcc",
        machine: machine(),
        warehouses: a.warehouses,
        terminals: a.terminals,
        seed: a.seed,
        aging: a.aging.to_string(),
        mix: a.mix,
        nurand: workload::rng::NurandConstants::from_seed(a.seed),
        load_seconds,
        targets: targets(&columns),
        columns,
        errors,
    };
    let json = serde_json::to_string_pretty(&report)?;
    let report_dir = if temporary && !a.keep { std::env::current_dir()?.join("tpcc-report") } else { base.clone() };
    std::fs::create_dir_all(&report_dir)?;
    std::fs::write(report_dir.join("report.json"), &json)?;
    std::fs::write(report_dir.join("report.html"), crate::tpcc::html::render(&report))?;
    if a.json {
        println!("{json}");
    } else {
        print!("{}", render(&report));
        println!("\nreport: {} and report.json", report_dir.join("report.html").display());
    }
    if temporary && !a.keep {
        let _ = std::fs::remove_dir_all(&base);
    }
    let bad = report.columns.iter().any(|c| !c.consistency_violations.is_empty() || !c.check_problems.is_empty());
    Ok(if !report.errors.is_empty() {
        ExitCode::from(2)
    } else if bad {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
