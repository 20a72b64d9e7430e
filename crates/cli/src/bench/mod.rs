//! `settle bench …`: benchmark programs. Each prints the machine it ran on and its figures,
//! as a table or, with `--json`, as one JSON object; with `--peer`, PostgreSQL 15 does the same
//! work on the same machine in the same run so that the two can be compared as a ratio.

pub mod aging;
pub mod decode;
pub mod floor;
pub mod pgbench;
pub mod relations;
pub mod reorder;
pub mod replicate;
pub mod vacuum;
pub mod wal_level;
pub mod wire;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Subcommand;
use serde::Serialize;
use settledb::{Column, Database, Schema, Table, TableOptions, Type, Value};

use crate::peer::Postgres;

#[derive(Subcommand)]
pub enum BenchCmd {
    /// pgbench's TPC-B-like (or select-only) transactions through the embedded API.
    Pgbench {
        /// Scale factor: 100,000 accounts per unit.
        #[arg(long, short = 's', default_value_t = 1)]
        scale: u32,
        /// Client threads.
        #[arg(long, short = 'c', default_value_t = 1)]
        clients: usize,
        /// Duration in seconds.
        #[arg(long, short = 'T', default_value_t = 10.0)]
        seconds: f64,
        /// Only the SELECT of the TPC-B-like transaction (pgbench -S).
        #[arg(long, short = 'S')]
        select_only: bool,
        /// Configuration parameters for both engines, `name=value`.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Also run PostgreSQL 15 with pgbench -M prepared on the same scale, clients and time.
        #[arg(long)]
        peer: bool,
        #[arg(long, default_value_t = 54329)]
        peer_port: u16,
        #[arg(long)]
        json: bool,
    },
    /// Bulk-load pgbench_accounts-shaped rows (int4 aid, int4 bid, int4 abalance, 84-char filler).
    Load {
        /// Rows to load (pgbench scale 1 = 100,000).
        #[arg(long, default_value_t = 5_000_000)]
        rows: u64,
        /// Data directory to create (default: a fresh one under the temporary directory,
        /// removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Configuration parameters for both engines, `name=value`.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Also run PostgreSQL 15 (`pgbench -i -I dtg`, client-side generate) on the same rows.
        #[arg(long)]
        peer: bool,
        /// Port for the PostgreSQL peer.
        #[arg(long, default_value_t = 54329)]
        peer_port: u16,
        /// Repeat the load (alternating with the peer) and compare the medians.
        #[arg(long, default_value_t = 1)]
        runs: usize,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// VACUUM after updating 5% of a pgbench_accounts table through its primary key, then
    /// VACUUM (DISABLE_PAGE_SKIPPING) of the clean table; `--peer` runs PostgreSQL 15 on the same.
    Vacuum(crate::bench::vacuum::VacuumBenchArgs),
    /// Dead-TID stores for VACUUM (settledb's TidStore, array6, roaring, pgradix) on the
    /// bdbench sets of the pgsql-hackers "dead tuple storage" thread.
    Tidstore {
        /// Multiply every case's number of blocks (1 or 10).
        #[arg(long, default_value_t = 1)]
        scale: u32,
        /// At most this many shuffled probes per case (a fixed seeded sample of the index
        /// when it holds more).
        #[arg(long, default_value_t = 10_000_000)]
        probes: usize,
        /// Run only the cases whose name contains this.
        #[arg(long)]
        only: Option<String>,
        /// The structures to run, in this order.
        #[arg(long, value_delimiter = ',', default_value = "tidstore,pgradix,roaring,array6")]
        structures: Vec<String>,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Freeze policies compared while XIDs age: a pgbench-like workload under autovacuum with
    /// freeze ages scaled down, several anti-wraparound cycles per run.
    Aging(crate::bench::aging::AgingArgs),
    /// Many relations: creating them, VACUUM of one empty table among them, the full
    /// recomputation of the database frozen XID, the autovacuum launcher's idle CPU.
    Relations(crate::bench::relations::RelationsArgs),
    /// The real pgbench against `settle serve` (and, with --peer, PostgreSQL 15): tps side by
    /// side, TPC-B-like and select-only slices alternating.
    Wire(crate::bench::wire::WireArgs),
    /// A PostgreSQL 15 subscriber fed by settle serve and (with --peer) by PostgreSQL 15:
    /// publisher CPU per change and replication lag.
    Replicate(crate::bench::replicate::ReplicateArgs),
    /// The WAL that wal_level=logical adds to replica on pgbench and TPC-C; `--peer` measures
    /// PostgreSQL 15 at the same two levels.
    WalLevel(crate::bench::wal_level::WalLevelArgs),
    /// The logical-decoding reorder buffer alone on synthetic changes (PostgreSQL's worst
    /// cases' shapes), each victim index side by side.
    Reorder(crate::bench::reorder::ReorderArgs),
    /// Logical decoding end to end (WAL to output) on the engine and, with --peer, on
    /// PostgreSQL 15's walsender: the same workloads, decoder processes sampled alike.
    Decode(crate::bench::decode::DecodeBenchArgs),
}

#[derive(Serialize, Default, Clone)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub os: String,
}

pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: f64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        memory_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
    }
}

#[derive(Serialize, Default, Clone)]
pub struct LoadFigures {
    pub engine: String,
    pub rows: u64,
    pub seconds: f64,
    pub rows_per_second: f64,
    pub heap_pages: u64,
    pub wal_bytes: u64,
    pub wal_records: Option<u64>,
    pub full_page_images: u64,
}

#[derive(Serialize)]
struct LoadReport {
    benchmark: &'static str,
    machine: Machine,
    settings: Vec<String>,
    /// The run with settledb's median rate.
    settledb: LoadFigures,
    /// The run with PostgreSQL's median rate.
    postgres: Option<LoadFigures>,
    /// Every run, in the order they ran (settledb and the peer alternate).
    runs: Vec<LoadFigures>,
    /// settledb's median rate / PostgreSQL's median rate.
    rate_ratio: Option<f64>,
    /// settledb's pages / PostgreSQL's pages.
    pages_ratio: Option<f64>,
}

pub fn run(cmd: BenchCmd) -> Result<ExitCode> {
    match cmd {
        BenchCmd::Pgbench { scale, clients, seconds, select_only, set, peer, peer_port, json } => {
            crate::bench::pgbench::run(scale, clients, seconds, select_only, &set, peer, peer_port, json)
        }
        BenchCmd::Load { rows, dir, set, peer, peer_port, runs, json } => {
            load(rows, dir, &set, peer, peer_port, runs.max(1), json)
        }
        BenchCmd::Vacuum(a) => crate::bench::vacuum::run(a),
        BenchCmd::Tidstore { scale, probes, only, structures, json } => {
            tidstore(scale, probes, only.as_deref(), &structures, json)
        }
        BenchCmd::Aging(args) => crate::bench::aging::run(args),
        BenchCmd::Relations(args) => crate::bench::relations::run(args),
        BenchCmd::Wire(args) => crate::bench::wire::run(args),
        BenchCmd::Replicate(args) => crate::bench::replicate::run(args),
        BenchCmd::WalLevel(args) => crate::bench::wal_level::run(args),
        BenchCmd::Reorder(args) => crate::bench::reorder::run(args),
        BenchCmd::Decode(args) => crate::bench::decode::run(args),
    }
}

/// `settle bench tidstore`: prints each case's table as it finishes, then the targets.
fn tidstore(scale: u32, probes: usize, only: Option<&str>, structures: &[String], json: bool) -> Result<ExitCode> {
    anyhow::ensure!(scale >= 1, "--scale must be at least 1");
    let names: Vec<&str> = structures.iter().map(String::as_str).collect();
    for n in &names {
        anyhow::ensure!(tidstore::bench::STRUCTURES.contains(n), "unknown structure {n}");
    }
    // Allocation counting is off in every other command; this benchmark measures with it.
    tidstore::bench::enable_counting();
    if tidstore::bench::allocated_bytes().is_none() {
        eprintln!("warning: the counting allocator is not installed; memory figures are self-reported");
    }
    if !json {
        println!("tidstore benchmark, scale {scale}, at most {probes} shuffled probes per case");
    }
    let report = tidstore::bench::run(scale, probes, only, &names, |c| {
        if !json {
            print!("{}", tidstore::bench::render_case(c));
        }
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("\nmachine: {}\ntargets:", report.machine);
        for t in &report.targets {
            println!("  [{}] {} ({})", if t.holds { "ok" } else { "MISS" }, t.what, t.detail);
        }
    }
    if report.failed {
        eprintln!("FAILED: a structure matched the wrong number of dead TIDs");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// pgbench_accounts's columns: aid int4, bid int4, abalance int4, filler (84 characters).
pub fn accounts_schema() -> Schema {
    let col = |n: &str, ty| Column { name: n.into(), ty, nullable: false };
    Schema {
        columns: vec![
            col("aid", Type::Int4),
            col("bid", Type::Int4),
            col("abalance", Type::Int4),
            col("filler", Type::Text),
        ],
    }
}

/// A directory removed on drop when its flag is set.
pub struct TempDir(pub PathBuf, pub bool);

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.1 {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Inserts accounts 1..=rows (`bid` = one per 100,000, balance 0, filler of spaces) in one
/// transaction, 10,000 rows per `insert_many`, as pgbench -i generates them. The batch's rows
/// are made once and only their numbers rewritten, as pgbench reuses its line buffer: the
/// figure is the engine's ingest, not the allocator's.
pub fn load_accounts(db: &Database, t: &Table, rows: u64) -> Result<()> {
    const BATCH: u64 = 10_000;
    let filler = " ".repeat(84);
    let mut batch: Vec<Vec<Value>> = (0..BATCH.min(rows))
        .map(|_| vec![Value::Int4(0), Value::Int4(0), Value::Int4(0), Value::Text(filler.clone())])
        .collect();
    let mut tx = db.begin()?;
    let mut aid = 1u64;
    while aid <= rows {
        let end = (aid + BATCH).min(rows + 1);
        batch.truncate((end - aid) as usize);
        for (row, a) in batch.iter_mut().zip(aid..end) {
            row[0] = Value::Int4(a as i32);
            row[1] = Value::Int4(((a - 1) / 100_000 + 1) as i32);
        }
        tx.insert_many(t, &batch)?;
        aid = end;
    }
    tx.commit()?;
    Ok(())
}

fn load_settledb(rows: u64, dir: &std::path::Path, set: &[String]) -> Result<LoadFigures> {
    let config = crate::config_from(set)?;
    let db = Database::open(dir, config)?;
    let t = db.create_table("pgbench_accounts", accounts_schema(), TableOptions::default())?;
    let before = db.stats();
    let start = Instant::now();
    load_accounts(&db, &t, rows)?;
    let seconds = start.elapsed().as_secs_f64();
    let after = db.stats();
    let pages = db.table_pages(&t)?;
    db.close()?;
    Ok(LoadFigures {
        engine: "settledb".into(),
        rows,
        seconds,
        rows_per_second: rows as f64 / seconds,
        heap_pages: u64::from(pages),
        wal_bytes: after.wal.bytes - before.wal.bytes,
        wal_records: Some(after.wal.records - before.wal.records),
        full_page_images: after.wal.fpi - before.wal.fpi,
    })
}

/// Parses `client-side generate 3.51 s` out of pgbench -i's last line.
fn parse_generate_seconds(stderr: &str) -> Option<f64> {
    let i = stderr.find("client-side generate ")?;
    let rest = &stderr[i + "client-side generate ".len()..];
    rest.split_whitespace().next()?.parse().ok()
}

fn load_postgres(rows: u64, port: u16, set: &[String]) -> Result<LoadFigures> {
    let scale = rows / 100_000;
    anyhow::ensure!(
        scale >= 1 && rows.is_multiple_of(100_000),
        "the PostgreSQL peer needs --rows to be a multiple of 100000"
    );
    let settings: Vec<(String, String)> = set
        .iter()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
        .collect();
    let pg = Postgres::start(port, &settings)?;
    let lsn0 = pg.query("select pg_current_wal_lsn()")?;
    let fpi0: u64 = pg.query("select wal_fpi from pg_stat_wal")?.parse()?;
    let scale_s = scale.to_string();
    let (_, stderr) = pg.pgbench(&["-i", "-s", &scale_s, "-I", "dtg"])?;
    let seconds = parse_generate_seconds(&stderr).with_context(|| format!("unexpected pgbench output: {stderr}"))?;
    let wal_bytes: u64 = pg.query(&format!("select pg_current_wal_lsn() - '{lsn0}'::pg_lsn"))?.parse::<f64>()? as u64;
    let fpi1: u64 = pg.query("select wal_fpi from pg_stat_wal")?.parse()?;
    let pages: u64 = pg.query("select pg_relation_size('pgbench_accounts') / 8192")?.parse()?;
    Ok(LoadFigures {
        engine: "postgres".into(),
        rows,
        seconds,
        rows_per_second: rows as f64 / seconds,
        heap_pages: pages,
        wal_bytes,
        wal_records: None,
        full_page_images: fpi1.saturating_sub(fpi0),
    })
}

/// The run with the median rate.
fn median(mut runs: Vec<LoadFigures>) -> Option<LoadFigures> {
    runs.sort_by(|a, b| a.rows_per_second.total_cmp(&b.rows_per_second));
    let mid = runs.len() / 2;
    runs.into_iter().nth(mid)
}

fn load(
    rows: u64,
    dir: Option<PathBuf>,
    set: &[String],
    peer: bool,
    port: u16,
    runs: usize,
    json: bool,
) -> Result<ExitCode> {
    let mut all = Vec::new();
    for _ in 0..runs {
        let (path, remove) = match &dir {
            Some(d) => (d.clone(), false),
            None => (std::env::temp_dir().join(format!("settle-bench-load-{}", std::process::id())), true),
        };
        if runs > 1 && path.exists() {
            std::fs::remove_dir_all(&path).with_context(|| format!("removing {}", path.display()))?;
        }
        let guard = TempDir(path.clone(), remove);
        all.push(load_settledb(rows, &path, set)?);
        drop(guard);
        if peer {
            all.push(load_postgres(rows, port, set)?);
        }
    }
    let ours = median(all.iter().filter(|f| f.engine == "settledb").cloned().collect()).context("no run")?;
    let pg = median(all.iter().filter(|f| f.engine == "postgres").cloned().collect());
    let report = LoadReport {
        benchmark: "load",
        machine: machine(),
        settings: set.to_vec(),
        rate_ratio: pg.as_ref().map(|p| ours.rows_per_second / p.rows_per_second),
        pages_ratio: pg.as_ref().map(|p| ours.heap_pages as f64 / p.heap_pages as f64),
        settledb: ours,
        postgres: pg,
        runs: all,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let m = &report.machine;
    println!("machine: {} CPUs ({}), {} GiB, {}", m.cpus, m.cpu_model, m.memory_gib, m.os);
    if !report.settings.is_empty() {
        println!("settings: {}", report.settings.join(" "));
    }
    println!(
        "{:<10} {:>10} {:>9} {:>12} {:>11} {:>14} {:>8}",
        "engine", "rows", "seconds", "rows/s", "heap pages", "WAL bytes", "FPIs"
    );
    let shown: Vec<&LoadFigures> = if report.runs.len() > 2 {
        report.runs.iter().collect()
    } else {
        std::iter::once(&report.settledb).chain(report.postgres.as_ref()).collect()
    };
    for f in shown {
        println!(
            "{:<10} {:>10} {:>9.2} {:>12.0} {:>11} {:>14} {:>8}",
            f.engine, f.rows, f.seconds, f.rows_per_second, f.heap_pages, f.wal_bytes, f.full_page_images
        );
    }
    if let (Some(r), Some(p)) = (report.rate_ratio, report.pages_ratio) {
        let of = if report.runs.len() > 2 { "median " } else { "" };
        println!("settledb/postgres: {of}load rate {r:.2}x, heap pages {p:.4}x");
    }
    Ok(ExitCode::SUCCESS)
}
