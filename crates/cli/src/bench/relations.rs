//! `settle bench relations --relations N [--json] [--peer]`: what many relations cost.
//!
//! PostgreSQL recomputes the database frozen XID after every VACUUM by scanning all of
//! `pg_class` (seed 001, `vac_update_datfrozenxid`), and its autovacuum rescans the catalog every
//! naptime, so both grow with the number of tables. settledb keeps the frozen XID in an indexed
//! min-heap and schedules autovacuum from what changed. This benchmark measures, on two
//! settledb databases side by side (one with 10 relations, one with N):
//!
//! * the time to create the N relations (`CREATE TABLE t<i>(a int4)`, one transaction each),
//!   overall and per relation in the first and last tenth, and to drop some of them;
//! * `VACUUM` of one empty table (an XID is consumed before each run, so relfrozenxid advances
//!   and the database frozen XID is recomputed every time), alternating between the two
//!   databases so that load on the machine hits both alike; the median of the runs;
//! * the full recomputation by a scan of `pg_class` (`VACUUM (ONLY_DATABASE_STATS)`);
//! * the autovacuum launcher's thread CPU time per naptime (1 s) with every table idle;
//! * `pg_class` bytes on disk, and heap bytes in memory, per relation.
//!
//! With `--peer`, PostgreSQL 15 does the same: tables created in transactions of 1,000,
//! `VACUUM t0` timed by psql's `\timing` with 10 relations and then with N, catalog growth per
//! relation, and the whole server's CPU per naptime while idle (autovacuum's launcher and
//! workers are most of it; PostgreSQL 15 has no `ONLY_DATABASE_STATS`). Both run with
//! `fsync=off`, so the figures measure CPU work, not the disk's flush latency.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use settledb::{Column, Config, Database, Schema, TableOptions, Type, VacuumParams};

use crate::bench::{machine, Machine, TempDir};
use crate::peer::Postgres;

/// The command's flags.
#[derive(clap::Args)]
pub struct RelationsArgs {
    /// Relations to create.
    #[arg(long, default_value_t = 200_000)]
    relations: usize,
    /// Timed VACUUMs of one empty table per database (settledb; PostgreSQL runs a tenth).
    #[arg(long, default_value_t = 400)]
    vacuum_runs: usize,
    /// Full recomputations timed.
    #[arg(long, default_value_t = 5)]
    scan_runs: usize,
    /// Idle launcher cycles (naptimes of 1 s) to observe.
    #[arg(long, default_value_t = 5)]
    naptimes: u32,
    /// Also run PostgreSQL 15 on the same work.
    #[arg(long)]
    peer: bool,
    #[arg(long, default_value_t = 54329)]
    peer_port: u16,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// One engine's figures.
#[derive(Serialize, Default, Clone)]
pub struct RelationsFigures {
    pub engine: String,
    pub relations: usize,
    pub create_seconds: f64,
    pub create_us_per_relation_first_tenth: f64,
    pub create_us_per_relation_last_tenth: f64,
    /// Median VACUUM of one empty table with 10 relations, and with `relations`.
    pub vacuum_empty_ms_at_10: f64,
    pub vacuum_empty_ms: f64,
    pub vacuum_runs: usize,
    /// Median full recomputation of the database frozen XID by a scan of `pg_class`.
    pub full_recompute_ms: Option<f64>,
    /// CPU per naptime while idle: settledb's launcher thread; PostgreSQL's whole server.
    pub idle_cpu_ms_per_naptime: Option<f64>,
    pub launcher_tables_per_cycle: Option<f64>,
    pub catalog_bytes_per_relation: f64,
    pub memory_bytes_per_relation: Option<f64>,
    pub drop_us_per_relation: Option<f64>,
}

#[derive(Serialize)]
struct Target {
    what: String,
    holds: bool,
    detail: String,
}

#[derive(Serialize)]
struct RelationsReport {
    benchmark: &'static str,
    machine: Machine,
    settledb: RelationsFigures,
    postgres: Option<RelationsFigures>,
    targets: Vec<Target>,
}

const NAPTIME: Duration = Duration::from_secs(1);

pub fn run(a: RelationsArgs) -> Result<ExitCode> {
    anyhow::ensure!(a.relations >= 10, "--relations must be at least 10");
    anyhow::ensure!(a.vacuum_runs >= 1 && a.scan_runs >= 1, "--vacuum-runs and --scan-runs must be at least 1");
    tidstore::bench::enable_counting();
    let settledb = run_settledb(&a)?;
    let postgres = if a.peer { Some(run_postgres(&a)?) } else { None };
    let targets = targets(&settledb, postgres.as_ref());
    let report = RelationsReport { benchmark: "relations", machine: machine(), settledb, postgres, targets };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn schema() -> Schema {
    Schema { columns: vec![Column { name: "a".into(), ty: Type::Int4, nullable: true }] }
}

fn open(dir: &Path) -> Result<Database> {
    let config = Config::from_pairs([("fsync", "off"), ("autovacuum", "on"), ("autovacuum_naptime", "1s")])?;
    Ok(Database::open(dir, config)?)
}

fn temp_dir(tag: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("settle-relations-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    TempDir(d, true)
}

/// Creates `t<from>..t<to>`; returns the seconds each tenth of them took.
fn create_tables(db: &Database, from: usize, to: usize, progress: bool) -> Result<Vec<f64>> {
    let tenth = ((to - from) / 10).max(1);
    let mut tenths = Vec::new();
    let mut start = Instant::now();
    for i in from..to {
        db.create_table(&format!("t{i}"), schema(), TableOptions::default())?;
        if (i - from + 1).is_multiple_of(tenth) || i + 1 == to {
            tenths.push(start.elapsed().as_secs_f64());
            start = Instant::now();
            if progress {
                eprint!("\rcreated {} of {to} relations", i + 1);
            }
        }
    }
    if progress {
        eprintln!();
    }
    Ok(tenths)
}

fn median_ms(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

/// Times `runs` VACUUMs of `t0` in each database, alternating, an XID consumed before each.
fn time_vacuums(small: &Database, big: &Database, runs: usize) -> Result<(f64, f64)> {
    let (mut s, mut b) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        for (db, out) in [(small, &mut s), (big, &mut b)] {
            db.consume_xids(1)?;
            let start = Instant::now();
            db.vacuum(Some("t0"), &VacuumParams::default())?;
            out.push(start.elapsed());
        }
    }
    Ok((median_ms(s), median_ms(b)))
}

fn run_settledb(a: &RelationsArgs) -> Result<RelationsFigures> {
    let (small_dir, big_dir) = (temp_dir("small"), temp_dir("big"));
    let small = open(&small_dir.0)?;
    create_tables(&small, 0, 10, false)?;
    let big = open(&big_dir.0)?;
    let mem1 = tidstore::bench::allocated_bytes();
    let tenths = create_tables(&big, 0, a.relations, !a.json)?;
    let mem2 = tidstore::bench::allocated_bytes();
    let per_tenth = (a.relations / 10).max(1) as f64;
    let (vacuum_empty_ms_at_10, vacuum_empty_ms) = time_vacuums(&small, &big, a.vacuum_runs)?;
    let mut scans = Vec::new();
    for _ in 0..a.scan_runs {
        let r = big.vacuum_database_stats()?;
        anyhow::ensure!(r.agrees(), "incremental and full computations differ: {r:?}");
        scans.push(r.scan_elapsed);
    }
    let (cpu_ms, tables_per_cycle) = launcher_idle_cpu(&big, a.naptimes)?;
    let pg_class = big.table("pg_class")?;
    let catalog_bytes = f64::from(big.table_pages(&pg_class)?) * 8192.0;
    let drop_us = drop_some(&big, a.relations)?;
    small.close()?;
    big.close()?;
    Ok(RelationsFigures {
        engine: "settledb".into(),
        relations: a.relations,
        create_seconds: tenths.iter().sum(),
        create_us_per_relation_first_tenth: tenths[0] / per_tenth * 1e6,
        create_us_per_relation_last_tenth: tenths[tenths.len() - 1] / per_tenth * 1e6,
        vacuum_empty_ms_at_10,
        vacuum_empty_ms,
        vacuum_runs: a.vacuum_runs,
        full_recompute_ms: Some(median_ms(scans)),
        idle_cpu_ms_per_naptime: Some(cpu_ms),
        launcher_tables_per_cycle: Some(tables_per_cycle),
        catalog_bytes_per_relation: catalog_bytes / a.relations as f64,
        memory_bytes_per_relation: mem1.zip(mem2).map(|(m1, m2)| m2.saturating_sub(m1) as f64 / a.relations as f64),
        drop_us_per_relation: drop_us,
    })
}

/// The launcher's thread CPU per cycle and tables looked at per cycle, over `naptimes` idle
/// naptimes (after one cycle to take in what the vacuums changed).
fn launcher_idle_cpu(db: &Database, naptimes: u32) -> Result<(f64, f64)> {
    let wait_cycles = |n: u64| -> Result<settledb::db::autovacuum::AutovacuumStats> {
        let target = db.autovacuum_stats().launcher_cycles + n;
        let start = Instant::now();
        while db.autovacuum_stats().launcher_cycles < target {
            anyhow::ensure!(start.elapsed() < NAPTIME * (n as u32 + 5), "the autovacuum launcher is not running");
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(db.autovacuum_stats())
    };
    let s0 = wait_cycles(1)?;
    let s1 = wait_cycles(u64::from(naptimes.max(1)))?;
    let cycles = (s1.launcher_cycles - s0.launcher_cycles) as f64;
    let cpu_ms = (s1.launcher_cpu_ns - s0.launcher_cpu_ns) as f64 / 1e6 / cycles;
    Ok((cpu_ms, (s1.launcher_tables - s0.launcher_tables) as f64 / cycles))
}

/// Drops the last tenth of the tables (at most 1,000); microseconds per drop.
fn drop_some(db: &Database, relations: usize) -> Result<Option<f64>> {
    let n = (relations / 10).min(1000);
    if n == 0 {
        return Ok(None);
    }
    let start = Instant::now();
    for i in relations - n..relations {
        db.drop_table(&format!("t{i}"))?;
    }
    Ok(Some(start.elapsed().as_secs_f64() * 1e6 / n as f64))
}

/// PostgreSQL 15 on the same work.
fn run_postgres(a: &RelationsArgs) -> Result<RelationsFigures> {
    let settings = [("fsync", "off"), ("autovacuum_naptime", "1s"), ("max_locks_per_transaction", "256")];
    let settings: Vec<(String, String)> = settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let pg = Postgres::start(a.peer_port, &settings)?;
    let catalog_size = || -> Result<f64> {
        let q = "select sum(pg_total_relation_size(c.oid)) from pg_class c join pg_namespace n \
                 on n.oid = c.relnamespace where n.nspname = 'pg_catalog' and c.relkind in ('r', 't', 'm')";
        Ok(pg.query(q)?.parse::<f64>()?)
    };
    let runs = (a.vacuum_runs / 10).max(5);
    let sql_dir = temp_dir("pgsql");
    std::fs::create_dir_all(&sql_dir.0)?;
    let size0 = catalog_size()?;
    let first = pg_create(&pg, &sql_dir.0, 0, 10)?;
    let at_10 = pg_time_vacuums(&pg, runs)?;
    // The creation figures are those of the relations past the first 10, when there are any.
    let (tenths, created) =
        if a.relations > 10 { (pg_create(&pg, &sql_dir.0, 10, a.relations)?, a.relations - 10) } else { (first, 10) };
    let size1 = catalog_size()?;
    let at_n = pg_time_vacuums(&pg, runs)?;
    let idle = pg_idle_cpu(&pg, a.naptimes)?;
    let n = (a.relations / 10).min(1000);
    let drops: Vec<String> = (a.relations - n..a.relations).map(|i| format!("DROP TABLE t{i};")).collect();
    let start = Instant::now();
    pg_script(&pg, &sql_dir.0, "drop.sql", &drops.join("\n"))?;
    let drop_us = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    let per_tenth = (created / 10).max(1) as f64;
    Ok(RelationsFigures {
        engine: "postgres".into(),
        relations: a.relations,
        create_seconds: tenths.iter().sum(),
        create_us_per_relation_first_tenth: tenths[0] / per_tenth * 1e6,
        create_us_per_relation_last_tenth: tenths[tenths.len() - 1] / per_tenth * 1e6,
        vacuum_empty_ms_at_10: at_10,
        vacuum_empty_ms: at_n,
        vacuum_runs: runs,
        full_recompute_ms: None,
        idle_cpu_ms_per_naptime: idle,
        launcher_tables_per_cycle: None,
        catalog_bytes_per_relation: (size1 - size0) / a.relations as f64,
        memory_bytes_per_relation: None,
        drop_us_per_relation: Some(drop_us),
    })
}

/// Runs a SQL script file with psql (one session), stopping at the first error.
fn pg_script(pg: &Postgres, dir: &Path, name: &str, sql: &str) -> Result<()> {
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, sql)?;
    let port = pg.port.to_string();
    let p = path.to_string_lossy();
    let args = ["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-d", "postgres", "-X", "-q"];
    let out = pg.run("psql", &[&args[..], &["-v", "ON_ERROR_STOP=1", "-f", &p]].concat())?;
    anyhow::ensure!(out.status.success(), "psql -f {name} failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

/// Creates `t<from>..t<to>` in transactions of 1,000; seconds per tenth.
fn pg_create(pg: &Postgres, dir: &Path, from: usize, to: usize) -> Result<Vec<f64>> {
    let tenth = ((to - from) / 10).max(1);
    let mut tenths = Vec::new();
    let mut i = from;
    while i < to {
        let end = (i + tenth).min(to);
        let mut sql = String::new();
        for chunk_start in (i..end).step_by(1000) {
            sql.push_str("BEGIN;\n");
            for j in chunk_start..(chunk_start + 1000).min(end) {
                sql.push_str(&format!("CREATE TABLE t{j}(a int);\n"));
            }
            sql.push_str("COMMIT;\n");
        }
        let start = Instant::now();
        pg_script(pg, dir, "create.sql", &sql)?;
        tenths.push(start.elapsed().as_secs_f64());
        i = end;
    }
    Ok(tenths)
}

/// Median of `runs` `VACUUM t0` as psql's `\timing` reports them, in one session.
fn pg_time_vacuums(pg: &Postgres, runs: usize) -> Result<f64> {
    let mut cmds = vec!["\\timing on"];
    cmds.extend(std::iter::repeat_n("VACUUM t0", runs));
    let (out, _) = pg.psql(&cmds)?;
    let mut ms: Vec<f64> = out
        .lines()
        .filter_map(|l| l.strip_prefix("Time: "))
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect();
    anyhow::ensure!(ms.len() == runs, "expected {runs} timings from psql, got {}:\n{out}", ms.len());
    ms.sort_by(f64::total_cmp);
    Ok(ms[ms.len() / 2])
}

/// The whole server's CPU (postmaster, its children, the children it reaped) per naptime over
/// `naptimes` idle naptimes.
fn pg_idle_cpu(pg: &Postgres, naptimes: u32) -> Result<Option<f64>> {
    let data = pg.query("show data_directory")?;
    let Ok(postmaster) = crate::procstat::postmaster_pid(Path::new(&data)) else { return Ok(None) };
    let ticks = crate::procstat::clock_ticks();
    let server_cpu = || crate::procstat::server_cpu(postmaster, ticks);
    std::thread::sleep(NAPTIME * 2);
    let c0 = server_cpu();
    std::thread::sleep(NAPTIME * naptimes.max(1));
    let c1 = server_cpu();
    Ok(Some((c1 - c0).max(0.0) * 1e3 / f64::from(naptimes.max(1))))
}

fn targets(s: &RelationsFigures, pg: Option<&RelationsFigures>) -> Vec<Target> {
    let ratio = s.vacuum_empty_ms / s.vacuum_empty_ms_at_10;
    let mut t = vec![Target {
        what: format!("VACUUM of one empty table with {} relations within 1.2x of 10 relations", s.relations),
        holds: ratio <= 1.2,
        detail: format!("{:.3} ms vs {:.3} ms: {ratio:.2}x", s.vacuum_empty_ms, s.vacuum_empty_ms_at_10),
    }];
    if let Some(pg) = pg {
        let x = pg.vacuum_empty_ms / s.vacuum_empty_ms;
        t.push(Target {
            what: format!(
                "VACUUM of one empty table with {} relations at least 50x faster than PostgreSQL's",
                s.relations
            ),
            holds: x >= 50.0,
            detail: format!("{:.3} ms vs {:.3} ms: {x:.0}x", s.vacuum_empty_ms, pg.vacuum_empty_ms),
        });
    }
    if let Some(cpu) = s.idle_cpu_ms_per_naptime {
        t.push(Target {
            what: format!("autovacuum launcher CPU per naptime, {} idle relations, under 1 ms", s.relations),
            holds: cpu < 1.0,
            detail: format!("{cpu:.4} ms"),
        });
    }
    t
}

fn render(r: &RelationsReport) -> String {
    let s = &r.settledb;
    let pg = r.postgres.as_ref();
    let opt = |v: Option<f64>, prec: usize| v.map_or("n/a".to_string(), |v| format!("{v:.prec$}"));
    let mut out = format!(
        "settle bench relations: {} relations (fsync=off, autovacuum_naptime=1s)\nmachine: {} CPUs, {}, {} GiB, {}\n\n",
        s.relations, r.machine.cpus, r.machine.cpu_model, r.machine.memory_gib, r.machine.os
    );
    out.push_str(&format!("{:<58} {:>14} {:>14}\n", "", "settledb", "PostgreSQL 15"));
    let mut row = |what: &str, a: String, b: Option<String>| {
        out.push_str(&format!("{what:<58} {a:>14} {:>14}\n", b.unwrap_or_else(|| "-".into())));
    };
    row("create relations (s)", format!("{:.2}", s.create_seconds), pg.map(|p| format!("{:.2}", p.create_seconds)));
    row(
        "  us per relation, first tenth",
        format!("{:.1}", s.create_us_per_relation_first_tenth),
        pg.map(|p| format!("{:.1}", p.create_us_per_relation_first_tenth)),
    );
    row(
        "  us per relation, last tenth",
        format!("{:.1}", s.create_us_per_relation_last_tenth),
        pg.map(|p| format!("{:.1}", p.create_us_per_relation_last_tenth)),
    );
    row(
        "VACUUM of one empty table, 10 relations (ms, median)",
        format!("{:.4}", s.vacuum_empty_ms_at_10),
        pg.map(|p| format!("{:.3}", p.vacuum_empty_ms_at_10)),
    );
    row(
        &format!("VACUUM of one empty table, {} relations (ms, median)", s.relations),
        format!("{:.4}", s.vacuum_empty_ms),
        pg.map(|p| format!("{:.3}", p.vacuum_empty_ms)),
    );
    row("  runs", s.vacuum_runs.to_string(), pg.map(|p| p.vacuum_runs.to_string()));
    row(
        "full recomputation, scan of pg_class (ms, median)",
        opt(s.full_recompute_ms, 3),
        pg.map(|_| "in VACUUM".into()),
    );
    row(
        "idle CPU per naptime (ms; settledb launcher, PG server)",
        opt(s.idle_cpu_ms_per_naptime, 4),
        pg.map(|p| opt(p.idle_cpu_ms_per_naptime, 2)),
    );
    row("  tables the launcher looked at per cycle", opt(s.launcher_tables_per_cycle, 1), pg.map(|_| "all".into()));
    row(
        "catalog bytes per relation (on disk)",
        format!("{:.0}", s.catalog_bytes_per_relation),
        pg.map(|p| format!("{:.0}", p.catalog_bytes_per_relation)),
    );
    row("memory bytes per relation (heap)", opt(s.memory_bytes_per_relation, 0), None);
    row("DROP TABLE (us per relation)", opt(s.drop_us_per_relation, 1), pg.map(|p| opt(p.drop_us_per_relation, 1)));
    out.push_str("\ntargets:\n");
    for t in &r.targets {
        out.push_str(&format!("  [{}] {} ({})\n", if t.holds { "ok" } else { "MISS" }, t.what, t.detail));
    }
    out
}
