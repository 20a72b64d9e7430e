//! PostgreSQL 15's side of `settle bench decode`, as `../shared/research/logical-decoding.md`
//! §4.1 and its appendix do it: per workload a `test_decoding` slot (`src_td`) and a
//! `pgoutput` slot (`src_po`) created before it, the workload in SQL (pgbench for the
//! concurrent ones), `CHECKPOINT`, `end = pg_current_wal_insert_lsn()`; per run
//! `pg_copy_logical_replication_slot(src, bench_tmp)` and `pg_stat_reset_replication_slot`,
//! then `PGOPTIONS='-c logical_decoding_work_mem=X' PGAPPNAME=ldbench_N pg_recvlogical --slot
//! bench_tmp --start --endpos end --no-loop -f FILE`, the walsender found by its
//! `application_name` in `pg_stat_replication` and sampled every 20 ms, then
//! `pg_stat_replication_slots` read and the copy dropped.
//!
//! The null sink is `pgoutput` with the empty publication `pub_none`. With it the walsender
//! learns about `--endpos` only from keepalives, so it decodes past it: each workload is
//! decoded right after it was built, and nothing is written after `end` but the walsender's
//! own bookkeeping.
//!
//! A run longer than the cap is stopped (`pg_terminate_backend` of the walsender, SIGTERM to
//! the client) and recorded as capped: the figure is a lower bound.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::sample::{sample_until, Sampled};
use super::{RunFigures, SinkKind, Workload, WorkloadKind};
use crate::peer::Postgres;

const TMP_SLOT: &str = "bench_tmp";

/// The server settings of research §4.1 step 6 (shared_buffers smaller: the machine is
/// shared).
pub fn server_settings(max_prepared: u64) -> Vec<(String, String)> {
    [
        ("wal_level", "logical".to_string()),
        ("fsync", "off".into()),
        ("synchronous_commit", "off".into()),
        ("full_page_writes", "on".into()),
        ("shared_buffers", "1GB".into()),
        ("max_prepared_transactions", max_prepared.max(10).to_string()),
        ("max_locks_per_transaction", "64".into()),
        ("max_wal_senders", "10".into()),
        ("max_replication_slots", "10".into()),
        ("max_wal_size", "64GB".into()),
        ("checkpoint_timeout", "1h".into()),
        ("autovacuum", "off".into()),
        ("wal_sender_timeout", "0".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Starts the peer and creates the empty publication.
pub fn start(port: u16, max_prepared: u64) -> Result<Postgres> {
    let pg = Postgres::start(port, &server_settings(max_prepared))?;
    pg.query("create publication pub_none")?;
    Ok(pg)
}

/// A workload built on the peer: decode up to `endpos`.
pub struct Built {
    pub endpos: String,
    pub build_seconds: f64,
}

/// Runs a SQL file through psql (for workloads of many statements).
fn psql_file(pg: &Postgres, name: &str, sql: &str) -> Result<()> {
    let path = pg.dir().join(name);
    std::fs::write(&path, sql)?;
    let port = pg.port.to_string();
    let p = path.to_string_lossy();
    let args = ["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-d", "postgres", "-X", "-q"];
    let out = pg.run("psql", &[&args[..], &["-v", "ON_ERROR_STOP=1", "-f", &p]].concat())?;
    let _ = std::fs::remove_file(&path);
    if !out.status.success() {
        bail!("psql -f {name} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// pgbench with a custom script, `clients` clients, `txns` transactions in all.
fn pgbench_script(pg: &Postgres, name: &str, script: &str, clients: u64, txns: u64) -> Result<()> {
    let path = pg.dir().join(name);
    std::fs::write(&path, script)?;
    let c = clients.min(txns).max(1);
    let (cs, ts) = (c.to_string(), (txns / c).to_string());
    pg.pgbench(&["-n", "-c", &cs, "-j", "2", "-t", &ts, "-f", &path.to_string_lossy()])?;
    let _ = std::fs::remove_file(&path);
    Ok(())
}

pub fn build(pg: &Postgres, w: &Workload) -> Result<Built> {
    let t = w.table();
    let columns = match w.kind {
        WorkloadKind::W5 { .. } | WorkloadKind::W6 { .. } => "a int, b int",
        WorkloadKind::W7 { .. } => "a int, b text",
        _ => "a int",
    };
    pg.query(&format!("drop table if exists {t}; create table {t}({columns})"))?;
    pg.query("select pg_create_logical_replication_slot('src_td', 'test_decoding')")?;
    pg.query("select pg_create_logical_replication_slot('src_po', 'pgoutput')")?;
    let start = Instant::now();
    match w.kind {
        WorkloadKind::W1 { rows } => {
            pg.query(&format!("insert into {t} select generate_series(1, {rows})"))?;
        }
        WorkloadKind::W9 { rows } => {
            pg.psql(&["begin", &format!("insert into {t} select generate_series(1, {rows})"), "rollback"])?;
        }
        WorkloadKind::W2 { subxacts } => {
            pg.query(&format!(
                "do $$ begin for i in 1..{subxacts} loop begin insert into {t} values (i); exception when others then \
                 raise; end; end loop; end $$"
            ))?;
        }
        WorkloadKind::W3 { subxacts, rows } => {
            pg.query(&format!(
                "do $$ begin for i in 1..{subxacts} loop begin insert into {t} select generate_series(1, {rows}); \
                 exception when others then raise; end; end loop; end $$"
            ))?;
        }
        WorkloadKind::W4 { txns } => {
            let mut sql = String::with_capacity(txns as usize * 80);
            for i in 0..txns {
                sql.push_str(&format!("begin; insert into {t} values ({}); prepare transaction 'g_{i}';\n", i + 1));
            }
            for i in 0..txns {
                sql.push_str(&format!("commit prepared 'g_{i}';\n"));
            }
            psql_file(pg, "w4.sql", &sql)?;
        }
        WorkloadKind::W5 { txns, clients } => {
            pgbench_script(pg, "w5.sql", &format!("insert into {t} values (:client_id, 1);\n"), clients, txns)?;
        }
        WorkloadKind::W6 { txns, clients } => {
            let mut script = String::from("begin;\n");
            for _ in 0..10 {
                script.push_str(&format!("insert into {t} select :client_id, g from generate_series(1, 100) g;\n"));
            }
            script.push_str("commit;\n");
            pgbench_script(pg, "w6.sql", &script, clients, txns)?;
        }
        WorkloadKind::W7 { rows, width } => {
            pg.query(&format!(
                "insert into {t} select g, (select string_agg(md5(random()::text || g || x), '') from \
                 generate_series(1, {}) x) from generate_series(1, {rows}) g",
                width / 32
            ))?;
        }
    }
    let build_seconds = start.elapsed().as_secs_f64();
    pg.query("checkpoint")?;
    let endpos = pg.query("select pg_current_wal_insert_lsn()")?;
    Ok(Built { endpos, build_seconds })
}

/// Drops the workload's slots and table.
pub fn cleanup(pg: &Postgres, w: &Workload) -> Result<()> {
    for s in ["src_td", "src_po"] {
        pg.query(&format!("select pg_drop_replication_slot('{s}')"))?;
    }
    pg.query(&format!("drop table if exists {}", w.table()))?;
    pg.query("checkpoint")?;
    Ok(())
}

/// One decoding run of the workload's slot copy for `sink` under `limit`, capped at `cap`.
pub fn decode_run(
    pg: &Postgres,
    b: &Built,
    limit: &str,
    sink: SinkKind,
    file: Option<&str>,
    cap: Duration,
    tag: usize,
) -> Result<RunFigures> {
    let src = if sink == SinkKind::Null { "src_po" } else { "src_td" };
    pg.query(&format!("select pg_copy_logical_replication_slot('{src}', '{TMP_SLOT}')"))?;
    pg.query(&format!("select pg_stat_reset_replication_slot('{TMP_SLOT}')"))?;
    let app = format!("ldbench_{tag}");
    let pgoptions = format!("-c logical_decoding_work_mem={limit}");
    let mut cmd = pg.command("pg_recvlogical", &[("PGOPTIONS", &pgoptions), ("PGAPPNAME", &app)]);
    let port = pg.port.to_string();
    let out = file.unwrap_or("/dev/null");
    cmd.args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-d", "postgres", "--slot", TMP_SLOT, "--start"]);
    cmd.args(["--no-loop", "--endpos", &b.endpos, "-f", out]);
    match sink {
        SinkKind::Null => cmd.args(["-o", "proto_version=1", "-o", "publication_names=pub_none"]),
        SinkKind::Td => &mut cmd,
        SinkKind::TdStream => cmd.args(["-o", "stream-changes=1"]),
    };
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).process_group(0);
    let start = Instant::now();
    let mut child = cmd.spawn().context("starting pg_recvlogical")?;
    let walsender = find_walsender(pg, &app, &mut child)?;
    let (sampled, capped) = match walsender {
        Some(pid) => sample_until(pid, start, Some(cap), || false),
        None => (Sampled::default(), false),
    };
    if capped {
        if let Some(pid) = walsender {
            let _ = pg.query(&format!("select pg_terminate_backend({pid})"));
        }
        // SAFETY: signals the process group we created for the client.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
    }
    let status = child.wait()?;
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut stderr)?;
    }
    if !capped && !status.success() {
        bail!("pg_recvlogical failed: {stderr}");
    }
    if let Some(pid) = walsender {
        let gone = Instant::now();
        while super::sample::sample(pid).is_some() && gone.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let mut sampled = sampled;
    if !capped {
        sampled.wall_seconds = start.elapsed().as_secs_f64();
    }
    let stats = pg.query(&format!(
        "select spill_txns, spill_count, spill_bytes, stream_txns, stream_count, stream_bytes, total_txns from \
         pg_stat_replication_slots where slot_name = '{TMP_SLOT}'"
    ))?;
    let f: Vec<u64> = stats.split('|').map(|v| v.trim().parse().unwrap_or(0)).collect();
    anyhow::ensure!(f.len() == 7, "unexpected pg_stat_replication_slots row: {stats:?}");
    drop_tmp(pg)?;
    Ok(RunFigures {
        cpu_seconds: sampled.cpu_seconds,
        wall_seconds: sampled.wall_seconds,
        peak_rss_anon_kb: sampled.peak_rss_anon_kb,
        rss_anon_after_open_kb: None,
        spill_txns: f[0],
        spill_count: f[1],
        spill_bytes: f[2],
        spill_files: None,
        stream_txns: f[3],
        stream_count: f[4],
        stream_bytes: f[5],
        eviction_events: f[1] + f[4],
        buffer_evictions: None,
        peak_accounted_bytes: None,
        transactions: f[6],
        rows_written: None,
        samples: sampled.samples,
        capped,
    })
}

/// The walsender serving `app`, once it appears in `pg_stat_replication` (`None` if the
/// client ended first).
fn find_walsender(pg: &Postgres, app: &str, child: &mut std::process::Child) -> Result<Option<u32>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pid = pg.query(&format!("select pid from pg_stat_replication where application_name = '{app}'"))?;
        if let Ok(pid) = pid.trim().parse::<u32>() {
            return Ok(Some(pid));
        }
        if child.try_wait()?.is_some() || Instant::now() > deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Drops the copied slot, waiting for its walsender to let it go.
fn drop_tmp(pg: &Postgres) -> Result<()> {
    let mut last = None;
    for _ in 0..100 {
        match pg.query(&format!("select pg_drop_replication_slot('{TMP_SLOT}')")) {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(last.expect("tried"))
}
