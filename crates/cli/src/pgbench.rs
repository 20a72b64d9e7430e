//! `settle bench pgbench`: pgbench's built-in transactions through the embedded API, and the
//! same run on PostgreSQL 15 with the real pgbench.
//!
//! The database is pgbench's (`pgbench -i -s S`): `pgbench_branches` (S rows),
//! `pgbench_tellers` (10·S), `pgbench_accounts` (100,000·S, 84-character filler),
//! `pgbench_history` (empty, no key), each of the first three with its primary key, loaded
//! first and keyed after, as `pgbench -i` does. The TPC-B-like transaction is pgbench's:
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
//! a transaction that fails with a serialization failure or deadlock is retried.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use settledb::{Column, Database, Error, Schema, TableOptions, Type, Value};

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

fn col(n: &str, ty: Type, nullable: bool) -> Column {
    Column { name: n.into(), ty, nullable }
}

/// Creates and loads pgbench's tables at `scale` (tables first, keys after, like pgbench -i).
pub fn init(db: &Database, scale: u32) -> Result<()> {
    let branches = db.create_table(
        "pgbench_branches",
        Schema {
            columns: vec![
                col("bid", Type::Int4, false),
                col("bbalance", Type::Int4, true),
                col("filler", Type::Text, true),
            ],
        },
        TableOptions::default(),
    )?;
    let tellers = db.create_table(
        "pgbench_tellers",
        Schema {
            columns: vec![
                col("tid", Type::Int4, false),
                col("bid", Type::Int4, true),
                col("tbalance", Type::Int4, true),
                col("filler", Type::Text, true),
            ],
        },
        TableOptions::default(),
    )?;
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
        TableOptions::default(),
    )?;
    db.create_table(
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
    let mut tx = db.begin()?;
    let rows: Vec<Vec<Value>> = (1..=scale as i32).map(|b| vec![Value::Int4(b), Value::Int4(0), Value::Null]).collect();
    tx.insert_many(&branches, &rows)?;
    let rows: Vec<Vec<Value>> = (1..=10 * scale as i32)
        .map(|t| vec![Value::Int4(t), Value::Int4((t - 1) / 10 + 1), Value::Int4(0), Value::Null])
        .collect();
    tx.insert_many(&tellers, &rows)?;
    let filler = " ".repeat(84);
    let total = 100_000 * scale as i32;
    let mut aid = 1;
    while aid <= total {
        let end = (aid + 10_000).min(total + 1);
        let rows: Vec<Vec<Value>> = (aid..end)
            .map(|a| {
                vec![Value::Int4(a), Value::Int4((a - 1) / 100_000 + 1), Value::Int4(0), Value::Text(filler.clone())]
            })
            .collect();
        tx.insert_many(&accounts, &rows)?;
        aid = end;
    }
    tx.commit()?;
    db.create_index("pgbench_branches_pkey", "pgbench_branches", &["bid"], true)?;
    db.create_index("pgbench_tellers_pkey", "pgbench_tellers", &["tid"], true)?;
    db.create_index("pgbench_accounts_pkey", "pgbench_accounts", &["aid"], true)?;
    db.checkpoint()?;
    Ok(())
}

fn add(delta: i32, col: usize) -> impl FnMut(&[Value]) -> settledb::Result<Vec<Value>> {
    move |row: &[Value]| {
        let mut r = row.to_vec();
        if let Value::Int4(b) = r[col] {
            r[col] = Value::Int4(b.wrapping_add(delta));
        }
        Ok(r)
    }
}

/// One TPC-B-like transaction; Ok(false) when it must be retried.
fn tpcb(db: &Database, h: &Handles, rng: &mut rand::rngs::StdRng, scale: u32) -> Result<bool> {
    let aid = rng.gen_range(1..=100_000 * scale as i32);
    let tid = rng.gen_range(1..=10 * scale as i32);
    let bid = rng.gen_range(1..=scale as i32);
    let delta = rng.gen_range(-5000..=5000);
    let mut tx = db.begin()?;
    let r = (|| -> settledb::Result<()> {
        tx.update_by_key(&h.accounts_pkey, &[Value::Int4(aid)], add(delta, 2))?;
        let _bal = tx.get(&h.accounts_pkey, &[Value::Int4(aid)])?;
        tx.update_by_key(&h.tellers_pkey, &[Value::Int4(tid)], add(delta, 2))?;
        tx.update_by_key(&h.branches_pkey, &[Value::Int4(bid)], add(delta, 1))?;
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64);
        tx.insert(
            &h.history,
            &[
                Value::Int4(tid),
                Value::Int4(bid),
                Value::Int4(aid),
                Value::Int4(delta),
                Value::Timestamp(now),
                Value::Null,
            ],
        )?;
        Ok(())
    })();
    match r {
        Ok(()) => {
            tx.commit()?;
            Ok(true)
        }
        Err(Error::SerializationFailure | Error::Deadlock { .. }) => {
            tx.rollback().ok();
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

fn select_only(db: &Database, h: &Handles, rng: &mut rand::rngs::StdRng, scale: u32) -> Result<bool> {
    let aid = rng.gen_range(1..=100_000 * scale as i32);
    let mut tx = db.begin()?;
    let row = tx.get(&h.accounts_pkey, &[Value::Int4(aid)])?;
    anyhow::ensure!(row.is_some(), "account {aid} not found");
    tx.commit()?;
    Ok(true)
}

struct Handles {
    accounts_pkey: settledb::Index,
    tellers_pkey: settledb::Index,
    branches_pkey: settledb::Index,
    history: settledb::Table,
}

/// Runs `clients` threads for `seconds`; returns (transactions, retries, elapsed seconds).
pub fn run_clients(db: &Database, scale: u32, clients: usize, seconds: f64, select: bool) -> Result<(u64, u64, f64)> {
    let h = Handles {
        accounts_pkey: db.index("pgbench_accounts_pkey")?,
        tellers_pkey: db.index("pgbench_tellers_pkey")?,
        branches_pkey: db.index("pgbench_branches_pkey")?,
        history: db.table("pgbench_history")?,
    };
    let done = AtomicU64::new(0);
    let retries = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let mut handles = Vec::new();
        for c in 0..clients {
            let (h, done, retries, stop) = (&h, &done, &retries, &stop);
            handles.push(s.spawn(move || -> Result<()> {
                let mut rng = rand::rngs::StdRng::seed_from_u64(0x5e771e + c as u64);
                while !stop.load(Ordering::Relaxed) {
                    let ok = if select { select_only(db, h, &mut rng, scale)? } else { tpcb(db, h, &mut rng, scale)? };
                    if ok {
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        retries.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(())
            }));
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        stop.store(true, Ordering::Relaxed);
        for t in handles {
            t.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        }
        Ok(())
    })?;
    Ok((done.load(Ordering::Relaxed), retries.load(Ordering::Relaxed), start.elapsed().as_secs_f64()))
}

fn settledb_run(scale: u32, clients: usize, seconds: f64, select: bool, set: &[String]) -> Result<PgbenchFigures> {
    let dir = std::env::temp_dir().join(format!("settle-bench-pgbench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let r = (|| {
        let db = Database::open(&dir, crate::config_from(set)?)?;
        init(&db, scale)?;
        let accounts_pages = u64::from(db.table_pages(&db.table("pgbench_accounts")?)?);
        let accounts_pkey_pages = u64::from(db.index_pages(&db.index("pgbench_accounts_pkey")?)?);
        let before = db.stats().buffers;
        let (transactions, retries, elapsed) = run_clients(&db, scale, clients, seconds, select)?;
        let used = db.stats().buffers.since(before);
        let per_tx = |n: u64| (transactions > 0).then(|| n as f64 / transactions as f64);
        verify_balances(&db)?;
        db.close()?;
        Ok(PgbenchFigures {
            engine: "settledb".into(),
            scale,
            clients,
            seconds: elapsed,
            transactions,
            tps: transactions as f64 / elapsed,
            retries,
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

/// pgbench's invariant: the balances of accounts, tellers and branches each sum to the sum of
/// the deltas recorded in history. A difference means a lost or doubled update: the run fails.
pub fn verify_balances(db: &Database) -> Result<()> {
    let sum = |table: &str, col: usize| -> Result<i64> {
        let t = db.table(table)?;
        let mut tx = db.begin()?;
        let mut total = 0i64;
        for row in tx.scan(&t)? {
            if let Value::Int4(v) = row?.1[col] {
                total += i64::from(v);
            }
        }
        tx.commit()?;
        Ok(total)
    };
    let history = sum("pgbench_history", 3)?;
    for (table, col) in [("pgbench_accounts", 2), ("pgbench_tellers", 2), ("pgbench_branches", 1)] {
        let s = sum(table, col)?;
        anyhow::ensure!(s == history, "balance check failed: sum over {table} is {s}, history deltas sum to {history}");
    }
    Ok(())
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
