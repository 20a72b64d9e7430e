//! `settle bench wal-level [--workloads pgbench,tpcc] [--scale S] [--warehouses W]
//! [--pgbench-transactions N] [--tpcc-transactions N] [--peer] [--json]`: what `wal_level =
//! logical` costs in WAL against `replica` (issue 18, item 3), on settledb and, with `--peer`,
//! on PostgreSQL 15 in the same run.
//!
//! For each workload and each level, each engine gets a fresh database at that level: loaded,
//! vacuumed, checkpointed, then the same fixed number of transactions from one client (the
//! same seed on settledb's two runs; pgbench's own random stream on PostgreSQL). The WAL of
//! the measured transactions is read from `pg_stat_wal` (records, full-page images, bytes) on
//! both engines. A fixed count of transactions rather than a fixed time keeps the figures
//! independent of the machine's speed: what differs between the levels is only what the
//! records carry. Autovacuum is off on both so that its WAL does not land in one run and not
//! the other; a checkpoint before the measured window makes the first change of every page
//! take a full-page image, which is where `logical` differs most (the tuple is kept beside
//! the image).
//!
//! The workloads: pgbench's TPC-B-like transaction (embedded through [`workload::pgbench`],
//! the real `pgbench -M prepared` binary on PostgreSQL), and the TPC-C-like mix of
//! [`workload::tpcc`] (the same Rust workload against both engines).

use std::process::ExitCode;

use anyhow::{Context, Result};
use serde::Serialize;
use settledb::{Database, VacuumParams};
use workload::pgbench::{self as pgb, PgbenchTarget, Script};
use workload::tpcc;

use crate::bench::{machine, Machine};
use crate::peer::Postgres;

/// The command's flags, as parsed by clap.
#[derive(clap::Args)]
pub struct WalLevelArgs {
    /// Workloads to run, comma-separated: pgbench, tpcc.
    #[arg(long, value_delimiter = ',', default_value = "pgbench,tpcc")]
    workloads: Vec<String>,
    /// pgbench scale factor.
    #[arg(long, short = 's', default_value_t = 1)]
    scale: u32,
    /// TPC-C warehouses.
    #[arg(long, default_value_t = 1)]
    warehouses: i32,
    /// pgbench transactions measured per run.
    #[arg(long, default_value_t = 20_000)]
    pgbench_transactions: u64,
    /// TPC-C transactions measured per run.
    #[arg(long, default_value_t = 5_000)]
    tpcc_transactions: u64,
    /// Also run PostgreSQL 15 at both levels.
    #[arg(long)]
    peer: bool,
    #[arg(long, default_value_t = 54333)]
    peer_port: u16,
    #[arg(long)]
    json: bool,
}

const LEVELS: [&str; 2] = ["replica", "logical"];
const SEED: u64 = 0x3a1_1e7e1;

/// The WAL of one measured window.
#[derive(Serialize, Clone, Copy, Default)]
struct Wal {
    transactions: u64,
    records: u64,
    fpi: u64,
    bytes: u64,
}

impl Wal {
    fn per_tx(&self) -> f64 {
        self.bytes as f64 / self.transactions.max(1) as f64
    }
}

/// One engine on one workload: the WAL at each level and logical's bytes over replica's.
#[derive(Serialize)]
struct EngineRow {
    engine: &'static str,
    workload: String,
    replica: Wal,
    logical: Wal,
    /// logical bytes per transaction / replica bytes per transaction.
    ratio: f64,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    machine: Machine,
    scale: u32,
    warehouses: i32,
    rows: Vec<EngineRow>,
}

pub fn run(a: WalLevelArgs) -> Result<ExitCode> {
    for w in &a.workloads {
        anyhow::ensure!(matches!(w.as_str(), "pgbench" | "tpcc"), "unknown workload {w:?} (pgbench, tpcc)");
    }
    anyhow::ensure!(a.scale >= 1 && a.warehouses >= 1, "--scale and --warehouses must be positive");
    let mut rows = Vec::new();
    for w in &a.workloads {
        let mut ours = [Wal::default(); 2];
        let mut theirs = [Wal::default(); 2];
        // The levels alternate between the engines run by run, as the other benchmarks do.
        for (i, level) in LEVELS.iter().enumerate() {
            ours[i] = match w.as_str() {
                "pgbench" => ours_pgbench(&a, level)?,
                _ => ours_tpcc(&a, level)?,
            };
            if a.peer {
                theirs[i] = match w.as_str() {
                    "pgbench" => peer_pgbench(&a, level)?,
                    _ => peer_tpcc(&a, level)?,
                };
            }
        }
        let row = |engine, [r, l]: [Wal; 2]| EngineRow {
            engine,
            workload: w.clone(),
            replica: r,
            logical: l,
            ratio: l.per_tx() / r.per_tx().max(f64::MIN_POSITIVE),
        };
        rows.push(row("settledb", ours));
        if a.peer {
            rows.push(row("postgres", theirs));
        }
    }
    let report = Report { benchmark: "wal-level", machine: machine(), scale: a.scale, warehouses: a.warehouses, rows };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let m = &report.machine;
    println!("machine: {} CPUs ({}), {} GiB, {}", m.cpus, m.cpu_model, m.memory_gib, m.os);
    println!("WAL of wal_level=logical against replica (pgbench scale {}, TPC-C {} warehouses)", a.scale, a.warehouses);
    println!(
        "{:<9} {:<8} {:>7} {:>10} {:>8} {:>10} {:>10} {:>8} {:>10} {:>7}",
        "engine", "workload", "tx", "records", "fpi", "B/tx", "records", "fpi", "B/tx", "ratio"
    );
    println!("{:<27}{:-^30} {:-^30}", "", " replica ", " logical ");
    for r in &report.rows {
        println!(
            "{:<9} {:<8} {:>7} {:>10} {:>8} {:>10.0} {:>10} {:>8} {:>10.0} {:>6.3}x",
            r.engine,
            r.workload,
            r.replica.transactions,
            r.replica.records,
            r.replica.fpi,
            r.replica.per_tx(),
            r.logical.records,
            r.logical.fpi,
            r.logical.per_tx(),
            r.ratio
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A fresh settledb database at `level` in a temporary directory, removed when dropped.
struct Scratch {
    dir: std::path::PathBuf,
    db: Option<Database>,
}

impl Scratch {
    fn open(workload: &str, level: &str) -> Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("settle-bench-wal-{workload}-{level}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let set = [format!("wal_level={level}"), "autovacuum=off".into(), "fsync=off".into()];
        let db = Database::open(&dir, crate::config_from(&set)?)?;
        Ok(Scratch { dir, db: Some(db) })
    }

    fn db(&self) -> &Database {
        self.db.as_ref().expect("open until dropped")
    }

    /// VACUUM of everything, then a checkpoint: the state both engines start the window in.
    fn settle(&self) -> Result<()> {
        self.db().vacuum(None, &VacuumParams::default())?;
        self.db().checkpoint()?;
        Ok(())
    }

    fn wal(&self) -> settledb::wal::WalStats {
        self.db().stats().wal
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(db) = self.db.take() {
            let _ = db.close();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn window(before: settledb::wal::WalStats, after: settledb::wal::WalStats, transactions: u64) -> Wal {
    Wal {
        transactions,
        records: after.records - before.records,
        fpi: after.fpi - before.fpi,
        bytes: after.bytes - before.bytes,
    }
}

fn ours_pgbench(a: &WalLevelArgs, level: &str) -> Result<Wal> {
    let s = Scratch::open("pgbench", level)?;
    let target = pgb::Embedded::new(s.db());
    target.init(a.scale)?;
    s.settle()?;
    let before = s.wal();
    let cfg = pgb::RunConfig {
        clients: 1,
        transactions_per_client: Some(a.pgbench_transactions),
        duration: None,
        script: Script::TpcbLike,
        seed: SEED,
    };
    let report = pgb::run(&target, &cfg)?;
    let w = window(before, s.wal(), report.transactions);
    target.check_balances()?;
    Ok(w)
}

fn ours_tpcc(a: &WalLevelArgs, level: &str) -> Result<Wal> {
    let s = Scratch::open("tpcc", level)?;
    tpcc::embedded::create_schema(s.db())?;
    tpcc::embedded::load(s.db(), a.warehouses, SEED)?;
    s.settle()?;
    let target = tpcc::embedded::Embedded::new(s.db())?;
    let before = s.wal();
    let result = tpcc::run(&target, &tpcc_config(a), &tpcc::RunProgress::default())?;
    Ok(window(before, s.wal(), result.transactions))
}

fn tpcc_config(a: &WalLevelArgs) -> tpcc::RunConfig {
    tpcc::RunConfig {
        warehouses: a.warehouses,
        terminals: 1,
        transactions: Some(a.tpcc_transactions),
        duration: None,
        seed: SEED,
        mix: tpcc::run::Mix::default(),
        delivery_workers: 1,
        rate: None,
    }
}

/// A throwaway PostgreSQL 15 at `level`, with autovacuum off and fsync off (neither changes
/// what a record carries).
fn peer_start(a: &WalLevelArgs, level: &str) -> Result<Postgres> {
    let settings: Vec<(String, String)> = [("wal_level", level), ("autovacuum", "off"), ("fsync", "off")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Postgres::start(a.peer_port, &settings)
}

/// Checkpoints and zeroes `pg_stat_wal`: the start of a window.
fn peer_window_start(pg: &Postgres) -> Result<()> {
    pg.query("checkpoint")?;
    pg.query("select pg_stat_reset_shared('wal')")?;
    Ok(())
}

fn peer_wal(pg: &Postgres, transactions: u64) -> Result<Wal> {
    let out = pg.query("select wal_records || ' ' || wal_fpi || ' ' || wal_bytes from pg_stat_wal")?;
    let f: Vec<u64> = out.split_whitespace().map(str::parse).collect::<Result<_, _>>().context("pg_stat_wal")?;
    anyhow::ensure!(f.len() == 3, "unexpected pg_stat_wal row: {out}");
    Ok(Wal { transactions, records: f[0], fpi: f[1], bytes: f[2] })
}

fn peer_pgbench(a: &WalLevelArgs, level: &str) -> Result<Wal> {
    let pg = peer_start(a, level)?;
    let s = a.scale.to_string();
    pg.pgbench(&["-i", "-q", "-s", &s])?;
    peer_window_start(&pg)?;
    let t = a.pgbench_transactions.to_string();
    let (out, err) = pg.pgbench(&["-n", "-M", "prepared", "-c", "1", "-t", &t])?;
    let done = crate::bench::pgbench::parse_transactions(&out)
        .with_context(|| format!("unexpected pgbench output: {out}{err}"))?;
    let w = peer_wal(&pg, done)?;
    pg.stop()?;
    Ok(w)
}

fn peer_tpcc(a: &WalLevelArgs, level: &str) -> Result<Wal> {
    let pg = peer_start(a, level)?;
    let url = pg.url();
    tpcc::postgres::create_schema(&url)?;
    tpcc::postgres::load(&url, a.warehouses, SEED)?;
    tpcc::postgres::vacuum_all(&url)?;
    peer_window_start(&pg)?;
    let target = tpcc::postgres::PgTarget::new(&url)?;
    let result = tpcc::run(&target, &tpcc_config(a), &tpcc::RunProgress::default())?;
    let w = peer_wal(&pg, result.transactions)?;
    drop(target);
    pg.stop()?;
    Ok(w)
}
