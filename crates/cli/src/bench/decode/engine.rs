//! The engine's side of `settle bench decode`: each workload built through the Rust API in a
//! fresh data directory (not measured), then decoded by a separate `settle decode` process per
//! run, sampled from `/proc` as PostgreSQL's walsender is.
//!
//! Building is made fast the way a benchmark may: `fsync=off`, `synchronous_commit=off`,
//! autovacuum off, rows in batches through `insert_many`. Two slots are created before the
//! workload, `src_td` (test_decoding) and `src_null` (the null plugin); each run decodes a
//! copy of one (`copy_logical_replication_slot`) up to the end of the workload
//! (`--endpos`), so every run decodes exactly the same WAL.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use settledb::{Column, Database, Lsn, Schema, Table, TableOptions, Type, Value};

use super::sample::{sample_until, Sampled};
use super::{RunFigures, SinkKind, Workload, WorkloadKind};
use crate::decode::FollowStats;

/// The copied slot each run decodes.
const TMP_SLOT: &str = "bench_tmp";

/// A workload built in `dir`, to be decoded up to `endpos`.
pub struct Built {
    pub dir: PathBuf,
    pub endpos: Lsn,
    pub build_seconds: f64,
    max_prepared: u64,
}

fn settings(max_prepared: u64) -> Vec<String> {
    [
        "wal_level=logical",
        "fsync=off",
        "synchronous_commit=off",
        "autovacuum=off",
        "max_wal_size=64GB",
        "checkpoint_timeout=1d",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(std::iter::once(format!("max_prepared_transactions={}", max_prepared.max(1))))
    .collect()
}

fn open(dir: &Path, max_prepared: u64) -> Result<Database> {
    Ok(Database::open(dir, crate::config_from(&settings(max_prepared))?)?)
}

fn int_columns(names: &[&str]) -> Schema {
    Schema { columns: names.iter().map(|n| Column { name: n.to_string(), ty: Type::Int4, nullable: true }).collect() }
}

/// Builds workload `w` in a fresh directory `dir`.
pub fn build(w: &Workload, dir: &Path) -> Result<Built> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    let max_prepared = if let WorkloadKind::W4 { txns } = w.kind { txns } else { 1 };
    let db = open(dir, max_prepared)?;
    let schema = match w.kind {
        WorkloadKind::W5 { .. } | WorkloadKind::W6 { .. } => int_columns(&["a", "b"]),
        WorkloadKind::W7 { .. } => Schema {
            columns: vec![
                Column { name: "a".into(), ty: Type::Int4, nullable: true },
                Column { name: "b".into(), ty: Type::Text, nullable: true },
            ],
        },
        _ => int_columns(&["a"]),
    };
    let t = db.create_table(&w.table(), schema, TableOptions::default())?;
    db.create_logical_replication_slot("src_td", "test_decoding", false)?;
    db.create_logical_replication_slot("src_null", "null", false)?;
    let start = Instant::now();
    run_workload(&db, &t, w.kind)?;
    let build_seconds = start.elapsed().as_secs_f64();
    db.checkpoint()?;
    let endpos = db.current_wal_insert_lsn();
    db.close()?;
    Ok(Built { dir: dir.to_path_buf(), endpos, build_seconds, max_prepared })
}

fn ints(range: std::ops::Range<i64>) -> Vec<Vec<Value>> {
    range.map(|i| vec![Value::Int4(i as i32)]).collect()
}

/// One transaction of `rows` one-int rows, committed or rolled back (W1, W9).
fn big_insert(db: &Database, t: &Table, rows: u64, commit: bool) -> Result<()> {
    let mut tx = db.begin()?;
    let mut at = 1i64;
    while at <= rows as i64 {
        let end = (at + 10_000).min(rows as i64 + 1);
        tx.insert_many(t, &ints(at..end))?;
        at = end;
    }
    if commit {
        tx.commit()?
    } else {
        tx.rollback()?
    }
    Ok(())
}

fn run_workload(db: &Database, t: &Table, kind: WorkloadKind) -> Result<()> {
    match kind {
        WorkloadKind::W1 { rows } => big_insert(db, t, rows, true)?,
        WorkloadKind::W9 { rows } => big_insert(db, t, rows, false)?,
        WorkloadKind::W2 { subxacts } => {
            let mut tx = db.begin()?;
            for i in 0..subxacts {
                tx.savepoint("s")?;
                tx.insert(t, &[Value::Int4(i as i32 + 1)])?;
                tx.release("s")?;
            }
            tx.commit()?;
        }
        WorkloadKind::W3 { subxacts, rows } => {
            let mut tx = db.begin()?;
            let batch = ints(1..rows as i64 + 1);
            for _ in 0..subxacts {
                tx.savepoint("s")?;
                tx.insert_many(t, &batch)?;
                tx.release("s")?;
            }
            tx.commit()?;
        }
        WorkloadKind::W4 { txns } => {
            for i in 0..txns {
                let mut tx = db.begin()?;
                tx.insert(t, &[Value::Int4(i as i32 + 1)])?;
                tx.prepare(&format!("g_{i}"))?;
            }
            for i in 0..txns {
                db.commit_prepared(&format!("g_{i}"))?;
            }
        }
        WorkloadKind::W5 { txns, clients } => {
            std::thread::scope(|s| -> Result<()> {
                let handles: Vec<_> = (0..clients)
                    .map(|c| {
                        let per = txns / clients; // as pgbench's -t
                        s.spawn(move || -> Result<()> {
                            for _ in 0..per {
                                let mut tx = db.begin()?;
                                tx.insert(t, &[Value::Int4(c as i32), Value::Int4(1)])?;
                                tx.commit()?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                for h in handles {
                    h.join().map_err(|_| anyhow::anyhow!("a W5 client panicked"))??;
                }
                Ok(())
            })?;
        }
        WorkloadKind::W6 { txns, clients } => w6(db, t, txns, clients)?,
        WorkloadKind::W7 { rows, width } => {
            let mut rng = 0x9E37_79B9_7F4A_7C15u64;
            let mut tx = db.begin()?;
            let mut at = 1u64;
            while at <= rows {
                let end = (at + 100).min(rows + 1);
                let batch: Vec<Vec<Value>> =
                    (at..end).map(|g| vec![Value::Int4(g as i32), Value::Text(hex_text(&mut rng, width))]).collect();
                tx.insert_many(t, &batch)?;
                at = end;
            }
            tx.commit()?;
        }
    }
    Ok(())
}

/// `width` pseudo-random hexadecimal characters (md5 text's alphabet: incompressible enough
/// that PostgreSQL stores it out of line).
fn hex_text(state: &mut u64, width: usize) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = Vec::with_capacity(width);
    while s.len() < width {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        let mut x = *state;
        for _ in 0..16 {
            if s.len() == width {
                break;
            }
            s.push(HEX[(x & 15) as usize]);
            x >>= 4;
        }
    }
    String::from_utf8(s).expect("hex is ASCII")
}

/// W6: `txns` transactions of 10 statements × 100 rows from `clients` sessions, interleaved
/// statement by statement on one thread (session k starts k % 10 statements late, so that
/// commits are staggered as pgbench's clients drift apart).
fn w6(db: &Database, t: &Table, txns: u64, clients: u64) -> Result<()> {
    let clients = clients.min(txns).max(1) as usize;
    // As pgbench's `-t txns/clients`: every client runs the same number.
    let mut left: Vec<u64> = vec![txns / clients as u64; clients];
    let mut delay: Vec<u64> = (0..clients as u64).map(|k| k % 10).collect();
    let mut open: Vec<Option<(settledb::Transaction<'_>, u32)>> = (0..clients).map(|_| None).collect();
    let batch =
        |k: usize| -> Vec<Vec<Value>> { (1..=100).map(|g| vec![Value::Int4(k as i32), Value::Int4(g)]).collect() };
    while left.iter().any(|&l| l > 0) || open.iter().any(Option::is_some) {
        for k in 0..clients {
            if delay[k] > 0 {
                delay[k] -= 1;
                continue;
            }
            if open[k].is_none() {
                if left[k] == 0 {
                    continue;
                }
                left[k] -= 1;
                open[k] = Some((db.begin()?, 0));
            }
            let (tx, n) = open[k].as_mut().expect("opened above");
            tx.insert_many(t, &batch(k))?;
            *n += 1;
            if *n == 10 {
                open[k].take().expect("open").0.commit()?;
            }
        }
    }
    Ok(())
}

/// Decodes a copy of the workload's slot for `sink` once, in a `settle decode` process, under
/// `logical_decoding_work_mem = limit`; rows go to `file` (or `/dev/null`).
pub fn decode_run(b: &Built, limit: &str, sink: SinkKind, file: Option<&Path>) -> Result<RunFigures> {
    let src = if sink == SinkKind::Null { "src_null" } else { "src_td" };
    let db = open(&b.dir, b.max_prepared)?;
    db.copy_logical_replication_slot(src, TMP_SLOT)?;
    db.close()?;
    let exe = std::env::current_exe().context("the settle binary")?;
    let mut cmd = Command::new(exe);
    let out = file.map_or_else(|| "/dev/null".to_string(), |f| f.display().to_string());
    cmd.arg("decode").arg(&b.dir).args(["--slot", TMP_SLOT, "--start", "--stats", "-f", &out]);
    cmd.args(["--endpos", &b.endpos.to_string()]);
    if sink == SinkKind::TdStream {
        cmd.args(["-o", "stream-changes=1"]);
    }
    for s in settings(b.max_prepared) {
        cmd.args(["--set", &s]);
    }
    // Decoding reads the WAL, not the buffer pool, which is the process's own anonymous
    // memory (PostgreSQL's walsender maps shared buffers, not counted in its RssAnon): a small
    // pool keeps it out of the decoder's RssAnon.
    cmd.args(["--set", "shared_buffers=1MB"]);
    cmd.args(["--set", &format!("logical_decoding_work_mem={limit}")]);
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().context("starting settle decode")?;
    let pid = child.id();
    let mut exit: Option<(i32, f64)> = None;
    let (mut sampled, _) = sample_until(pid, start, None, || {
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: pid is our child; status and ru are valid for writing.
        let r = unsafe { libc::wait4(pid as i32, &mut status, libc::WNOHANG, &mut ru) };
        if r == pid as i32 {
            let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            exit = Some((status, tv(ru.ru_utime) + tv(ru.ru_stime)));
            return true;
        }
        false
    });
    let (status, cpu) = match exit {
        Some(e) => e,
        None => {
            // Gone from /proc before we reaped it: cannot be (a zombie stays), but wait anyway.
            let st = child.wait()?;
            (if st.success() { 0 } else { 1 }, sampled.cpu_seconds)
        }
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        e.read_to_string(&mut stderr)?;
    }
    if status != 0 {
        bail!("settle decode failed (status {status}): {stderr}");
    }
    sampled.cpu_seconds = sampled.cpu_seconds.max(cpu);
    let stats: FollowStats = stderr
        .lines()
        .find_map(|l| l.strip_prefix("settle decode stats: "))
        .context("settle decode printed no stats")
        .and_then(|j| Ok(serde_json::from_str(j)?))?;
    let db = open(&b.dir, b.max_prepared)?;
    db.drop_replication_slot(TMP_SLOT)?;
    db.close()?;
    Ok(figures(sampled, &stats))
}

fn figures(s: Sampled, st: &FollowStats) -> RunFigures {
    RunFigures {
        cpu_seconds: s.cpu_seconds,
        wall_seconds: s.wall_seconds,
        peak_rss_anon_kb: s.peak_rss_anon_kb,
        rss_anon_after_open_kb: Some(st.rss_anon_after_open_kb),
        spill_txns: st.spill_txns,
        spill_count: st.spill_count,
        spill_bytes: st.spill_bytes,
        spill_files: Some(st.spill_files),
        stream_txns: st.stream_txns,
        stream_count: st.stream_count,
        stream_bytes: st.stream_bytes,
        // One eviction spills or streams many transactions down to the low-water mark.
        eviction_events: st.evictions,
        buffer_evictions: Some(st.evictions),
        peak_accounted_bytes: Some(st.peak_memory),
        transactions: st.total_txns,
        rows_written: Some(st.rows),
        samples: s.samples,
        capped: false,
    }
}
