//! `settle bench pgbench`: pgbench's built-in transactions through the embedded API
//! ([`workload::pgbench`]), and the same run on PostgreSQL 15 with the real pgbench.
//!
//! The database is pgbench's (`pgbench -i -s S`): `pgbench_branches` (S rows),
//! `pgbench_tellers` (10·S), `pgbench_accounts` (100,000·S, 84-character filler),
//! `pgbench_history` (empty, no key), each of the first three with its primary key, loaded
//! first, vacuumed and keyed after, as `pgbench -i` does. The TPC-B-like transaction is pgbench's:
//!
//! ```text
//! UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
//! SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
//! UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
//! UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
//! INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (...);
//! ```
//!
//! with `aid`, `tid`, `bid` uniform over their tables and `delta` uniform in [-5000, 5000];
//! select-only (`-S`) is the SELECT alone. Each client is a thread with its own seeded RNG;
//! a transaction that fails with a serialization failure or deadlock is retried. After the
//! run the balances must agree with history's deltas, or the benchmark fails.

use std::time::Duration;

use anyhow::{Context, Result};
use serde::Serialize;
use settledb::Database;
use workload::pgbench::{self, PgbenchTarget, Script};

use crate::bench::{machine, Machine};
use crate::peer::Postgres;

#[derive(Serialize, Clone)]
pub struct PgbenchFigures {
    pub engine: String,
    pub scale: u32,
    pub clients: usize,
    pub seconds: f64,
    pub transactions: u64,
    pub tps: f64,
    pub retries: u64,
    pub select_only: bool,
    /// Pages of pgbench_accounts and of its primary key after the load.
    pub accounts_pages: u64,
    pub accounts_pkey_pages: u64,
    /// Shared-buffer hits and reads (misses) per transaction during the run (settledb only).
    pub buffer_hits_per_tx: Option<f64>,
    pub buffer_reads_per_tx: Option<f64>,
}

#[derive(Serialize)]
struct PgbenchReport {
    benchmark: &'static str,
    machine: Machine,
    settings: Vec<String>,
    settledb: PgbenchFigures,
    postgres: Option<PgbenchFigures>,
    /// settledb's tps / PostgreSQL's tps.
    tps_ratio: Option<f64>,
}

fn settledb_run(scale: u32, clients: usize, seconds: f64, select: bool, set: &[String]) -> Result<PgbenchFigures> {
    let dir = std::env::temp_dir().join(format!("settle-bench-pgbench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let r = (|| {
        let db = Database::open(&dir, crate::config_from(set)?)?;
        let target = pgbench::Embedded::new(&db);
        target.init(scale)?;
        let accounts_pages = u64::from(db.table_pages(&db.table("pgbench_accounts")?)?);
        let accounts_pkey_pages = u64::from(db.index_pages(&db.index("pgbench_accounts_pkey")?)?);
        let before = db.stats().buffers;
        let cfg = pgbench::RunConfig {
            clients,
            transactions_per_client: None,
            duration: Some(Duration::from_secs_f64(seconds)),
            script: if select { Script::SelectOnly } else { Script::TpcbLike },
            seed: 0x5e771e,
        };
        let report = pgbench::run(&target, &cfg)?;
        let used = db.stats().buffers.since(before);
        let per_tx = |n: u64| (report.transactions > 0).then(|| n as f64 / report.transactions as f64);
        // pgbench's invariant: a difference means a lost or doubled update, and the run fails.
        target.check_balances()?;
        db.close()?;
        Ok(PgbenchFigures {
            engine: "settledb".into(),
            scale,
            clients,
            seconds: report.seconds,
            transactions: report.transactions,
            tps: report.tps,
            retries: report.retries,
            select_only: select,
            accounts_pages,
            accounts_pkey_pages,
            buffer_hits_per_tx: per_tx(used.hits),
            buffer_reads_per_tx: per_tx(used.reads),
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// Parses `tps = 4066.123 (without initial connection time)` from pgbench's output.
fn parse_tps(out: &str) -> Option<f64> {
    out.lines().find(|l| l.starts_with("tps = "))?.split_whitespace().nth(2)?.parse().ok()
}

fn postgres_run(
    scale: u32,
    clients: usize,
    seconds: f64,
    select: bool,
    port: u16,
    set: &[String],
) -> Result<PgbenchFigures> {
    let settings: Vec<(String, String)> = set
        .iter()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
        .collect();
    let pg = Postgres::start(port, &settings)?;
    let s = scale.to_string();
    pg.pgbench(&["-i", "-q", "-s", &s])?;
    let accounts_pages: u64 = pg.query("select pg_relation_size('pgbench_accounts') / 8192")?.parse()?;
    let accounts_pkey_pages: u64 = pg.query("select pg_relation_size('pgbench_accounts_pkey') / 8192")?.parse()?;
    let c = clients.to_string();
    let t = (seconds.round() as u64).max(1).to_string();
    let mut args = vec!["-M", "prepared", "-c", &c, "-j", &c, "-T", &t];
    if select {
        args.push("-S");
    }
    let (out, err) = pg.pgbench(&args)?;
    let tps = parse_tps(&out).with_context(|| format!("unexpected pgbench output: {out}{err}"))?;
    let transactions = out
        .lines()
        .find(|l| l.starts_with("number of transactions actually processed"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().split('/').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Ok(PgbenchFigures {
        engine: "postgres".into(),
        scale,
        clients,
        seconds: t.parse().unwrap_or(seconds),
        transactions,
        tps,
        retries: 0,
        select_only: select,
        accounts_pages,
        accounts_pkey_pages,
        buffer_hits_per_tx: None,
        buffer_reads_per_tx: None,
    })
}

#[expect(clippy::too_many_arguments, reason = "the benchmark's flags")]
pub fn run(
    scale: u32,
    clients: usize,
    seconds: f64,
    select: bool,
    set: &[String],
    peer: bool,
    port: u16,
    json: bool,
) -> Result<std::process::ExitCode> {
    anyhow::ensure!(scale >= 1 && clients >= 1 && seconds > 0.0, "scale, clients and seconds must be positive");
    let ours = settledb_run(scale, clients, seconds, select, set)?;
    let pg = if peer { Some(postgres_run(scale, clients, seconds, select, port, set)?) } else { None };
    let report = PgbenchReport {
        benchmark: if select { "pgbench select-only" } else { "pgbench tpcb-like" },
        machine: machine(),
        settings: set.to_vec(),
        tps_ratio: pg.as_ref().map(|p| ours.tps / p.tps),
        settledb: ours,
        postgres: pg,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let m = &report.machine;
    println!("machine: {} CPUs ({}), {} GiB, {}", m.cpus, m.cpu_model, m.memory_gib, m.os);
    println!("{} at scale {}, {} clients", report.benchmark, report.settledb.scale, report.settledb.clients);
    if !report.settings.is_empty() {
        println!("settings: {}", report.settings.join(" "));
    }
    println!(
        "{:<10} {:>9} {:>13} {:>12} {:>8} {:>15} {:>15}",
        "engine", "seconds", "transactions", "tps", "retries", "accounts pages", "pkey pages"
    );
    for f in std::iter::once(&report.settledb).chain(report.postgres.as_ref()) {
        println!(
            "{:<10} {:>9.1} {:>13} {:>12.0} {:>8} {:>15} {:>15}",
            f.engine, f.seconds, f.transactions, f.tps, f.retries, f.accounts_pages, f.accounts_pkey_pages
        );
    }
    if let (Some(h), Some(r)) = (report.settledb.buffer_hits_per_tx, report.settledb.buffer_reads_per_tx) {
        println!("settledb shared buffers per transaction: {h:.2} hits, {r:.2} reads");
    }
    if let Some(r) = report.tps_ratio {
        println!("settledb/postgres: {r:.2}x");
    }
    Ok(std::process::ExitCode::SUCCESS)
}
