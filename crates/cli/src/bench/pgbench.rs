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
//!
//! With `--peer`, both databases are loaded first and the run is cut into five slices that
//! alternate between the engines, each engine's figures summing its slices (see [`SLICES`]).

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

impl PgbenchFigures {
    /// An engine's figures once its database is loaded, before any slice has run.
    fn before_run(engine: &str, scale: u32, clients: usize, select: bool, pages: u64, pkey_pages: u64) -> Self {
        PgbenchFigures {
            engine: engine.into(),
            scale,
            clients,
            seconds: 0.0,
            transactions: 0,
            tps: 0.0,
            retries: 0,
            select_only: select,
            accounts_pages: pages,
            accounts_pkey_pages: pkey_pages,
            buffer_hits_per_tx: None,
            buffer_reads_per_tx: None,
        }
    }
}

/// The run is cut into this many slices, alternating between the engines (settledb's slice
/// 1, PostgreSQL's slice 1, settledb's slice 2, …), so that a slow spell of this shared machine
/// falls on both instead of on whichever ran at that moment. Each engine's figures sum its
/// slices; both databases are loaded before the first slice and kept until the last.
const SLICES: u32 = 5;

/// A loaded settledb database, run slice by slice.
struct Ours {
    dir: std::path::PathBuf,
    db: Database,
    figures: PgbenchFigures,
    before: settledb::buffer::BufferUsage,
}

impl Ours {
    fn load(scale: u32, clients: usize, select: bool, set: &[String]) -> Result<Ours> {
        let dir = std::env::temp_dir().join(format!("settle-bench-pgbench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let db = match Database::open(&dir, crate::config_from(set)?)
            .map_err(anyhow::Error::from)
            .and_then(|db| pgbench::Embedded::new(&db).init(scale).map(|_| db))
        {
            Ok(db) => db,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let accounts_pages = u64::from(db.table_pages(&db.table("pgbench_accounts")?)?);
        let accounts_pkey_pages = u64::from(db.index_pages(&db.index("pgbench_accounts_pkey")?)?);
        let before = db.stats().buffers;
        let figures =
            PgbenchFigures::before_run("settledb", scale, clients, select, accounts_pages, accounts_pkey_pages);
        Ok(Ours { dir, db, figures, before })
    }

    fn slice(&mut self, seconds: f64, i: u32) -> Result<()> {
        let f = &mut self.figures;
        let cfg = pgbench::RunConfig {
            clients: f.clients,
            transactions_per_client: None,
            duration: Some(Duration::from_secs_f64(seconds)),
            script: if f.select_only { Script::SelectOnly } else { Script::TpcbLike },
            seed: 0x5e771e + u64::from(i),
        };
        let report = pgbench::run(&pgbench::Embedded::new(&self.db), &cfg)?;
        f.seconds += report.seconds;
        f.transactions += report.transactions;
        f.retries += report.retries;
        Ok(())
    }

    /// Checks pgbench's invariant (a difference means a lost or doubled update, and the run
    /// fails), closes and removes the database, and returns the summed figures.
    fn finish(mut self) -> Result<PgbenchFigures> {
        let used = self.db.stats().buffers.since(self.before);
        let r = pgbench::Embedded::new(&self.db).check_balances();
        let closed = self.db.close();
        r?;
        closed?;
        let f = &mut self.figures;
        let per_tx = |n: u64| (f.transactions > 0).then(|| n as f64 / f.transactions as f64);
        f.buffer_hits_per_tx = per_tx(used.hits);
        f.buffer_reads_per_tx = per_tx(used.reads);
        f.tps = f.transactions as f64 / f.seconds.max(f64::MIN_POSITIVE);
        Ok(self.figures)
    }
}

/// Parses `tps = 4066.123 (without initial connection time)` from pgbench's output.
fn parse_tps(out: &str) -> Option<f64> {
    out.lines().find(|l| l.starts_with("tps = "))?.split_whitespace().nth(2)?.parse().ok()
}

/// Parses `number of transactions actually processed: 2000/2000` from pgbench's output.
pub fn parse_transactions(out: &str) -> Option<u64> {
    out.lines()
        .find(|l| l.starts_with("number of transactions actually processed"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().split('/').next())
        .and_then(|v| v.trim().parse().ok())
}

/// A loaded PostgreSQL 15 (stopped when dropped), run slice by slice with the real pgbench.
struct Peer {
    pg: Postgres,
    figures: PgbenchFigures,
}

impl Peer {
    fn load(scale: u32, clients: usize, select: bool, port: u16, set: &[String]) -> Result<Peer> {
        let settings: Vec<(String, String)> = set
            .iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
            .collect();
        let pg = Postgres::start(port, &settings)?;
        let s = scale.to_string();
        pg.pgbench(&["-i", "-q", "-s", &s])?;
        let accounts_pages: u64 = pg.query("select pg_relation_size('pgbench_accounts') / 8192")?.parse()?;
        let accounts_pkey_pages: u64 = pg.query("select pg_relation_size('pgbench_accounts_pkey') / 8192")?.parse()?;
        let figures =
            PgbenchFigures::before_run("postgres", scale, clients, select, accounts_pages, accounts_pkey_pages);
        Ok(Peer { pg, figures })
    }

    /// One `pgbench -M prepared -T seconds` (whole seconds); its time is the transactions over
    /// its reported tps, which leaves out connection set-up as pgbench's own figure does.
    fn slice(&mut self, seconds: u64) -> Result<()> {
        let f = &mut self.figures;
        let c = f.clients.to_string();
        let t = seconds.max(1).to_string();
        let mut args = vec!["-M", "prepared", "-c", &c, "-j", &c, "-T", &t];
        if f.select_only {
            args.push("-S");
        }
        let (out, err) = self.pg.pgbench(&args)?;
        let tps = parse_tps(&out).with_context(|| format!("unexpected pgbench output: {out}{err}"))?;
        let transactions =
            parse_transactions(&out).with_context(|| format!("unexpected pgbench output: {out}{err}"))?;
        f.transactions += transactions;
        f.seconds += if tps > 0.0 { transactions as f64 / tps } else { seconds as f64 };
        Ok(())
    }

    fn finish(mut self) -> PgbenchFigures {
        let f = &mut self.figures;
        f.tps = f.transactions as f64 / f.seconds.max(f64::MIN_POSITIVE);
        self.figures
    }
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
    let mut ours = Ours::load(scale, clients, select, set)?;
    let dir = ours.dir.clone();
    let measured = (|| {
        let mut peer = if peer { Some(Peer::load(scale, clients, select, port, set)?) } else { None };
        // PostgreSQL's pgbench takes whole seconds: slices of at least one second each.
        let slices = if peer.is_some() { SLICES.min((seconds.round() as u32).max(1)) } else { 1 };
        let slice = seconds / f64::from(slices);
        for i in 0..slices {
            ours.slice(slice, i)?;
            if let Some(p) = peer.as_mut() {
                p.slice(slice.round() as u64)?;
            }
        }
        anyhow::Ok((ours.finish()?, peer.map(Peer::finish)))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let (ours, pg) = measured?;
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
