//! `settle bench reorder [--cases …] [--index heap,scan,adaptive] [--json]`: the reorder
//! buffer alone (`settledb::decode::reorderbuffer`), fed synthetic changes in the shapes of
//! `../shared/research/logical-decoding.md` §4 (PostgreSQL 15's worst cases on this machine
//! kind are quoted there), with a null sink: the cost of queuing, evicting, spilling,
//! streaming and replaying, without WAL reading or output.
//!
//! Each case runs once per victim index (`heap`: the indexed max-heap; `scan`: a scan of
//! every transaction per pick, PostgreSQL 13–16's way; `adaptive`: a scan until 1,024
//! transactions are open, the heap beyond, the seed's proposal), on the calling thread, whose
//! CPU time (`CLOCK_THREAD_CPUTIME_ID`) is the figure. A change is a one-`int4`-row insert
//! (a 28-byte tuple, PostgreSQL's W-cases' row) unless the case says otherwise.
//!
//! The cases (research §4.4's names):
//! - `B1-large`: one transaction of 8,000,000 changes, at 64 MB and without a limit.
//! - `B2-subxacts`: one transaction of 100,000 released savepoints of one change each, at 64 kB.
//! - `B3-rollbacks`: one transaction of 1,000 savepoints × 1,000 changes, every other one rolled
//!   back, at 1 MB: memory must stay within the limit through the commit's replay.
//! - `B4-open`: 100,000 transactions open at once with one change each, then committed, at
//!   64 kB, spilling and streaming.
//! - `B5-small`: 200,000 one-change transactions, one after another, at 64 MB.
//! - `B6-concurrent`: 2,000 transactions of 1,000 changes, 16 at a time interleaved, at 64 kB.
//! - `B8-roundrobin`: 100,000 open transactions receiving 10 changes each round-robin, at
//!   64 kB and without a limit (ns per change of index upkeep).
//! - `B9-aborted`: 8,000,000 changes of a transaction the CLOG already says rolled back, at 64 MB.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use serde::Serialize;
use settledb::decode::reorderbuffer::{
    Change, ChangeKind, ReorderBuffer, ReorderBufferConfig, ReorderStats, StreamSink, VictimIndex, XidStatus,
};
use settledb::io::RealFs;
use settledb::{Lsn, Oid, Xid};

use crate::bench::{machine, Machine};

#[derive(clap::Args)]
pub struct ReorderArgs {
    /// Cases to run (B1-large, B2-subxacts, B3-rollbacks, B4-open, B5-small, B6-concurrent,
    /// B8-roundrobin, B9-aborted); all by default.
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// Victim indexes to compare: heap, scan, adaptive.
    #[arg(long, value_delimiter = ',', default_value = "heap,scan,adaptive")]
    index: Vec<String>,
    /// Divide every case's size by this (a quick run).
    #[arg(long, default_value_t = 1)]
    shrink: u64,
    #[arg(long)]
    json: bool,
}

const CASES: [&str; 8] =
    ["B1-large", "B2-subxacts", "B3-rollbacks", "B4-open", "B5-small", "B6-concurrent", "B8-roundrobin", "B9-aborted"];

#[derive(Serialize)]
struct Row {
    case: String,
    limit: String,
    mode: &'static str,
    index: String,
    changes: u64,
    cpu_seconds: f64,
    wall_seconds: f64,
    ns_per_change: f64,
    changes_emitted: u64,
    evictions: u64,
    spill_txns: u64,
    spill_count: u64,
    spill_bytes: u64,
    spill_files: u64,
    stream_count: u64,
    stream_bytes: u64,
    peak_memory: u64,
    limit_bytes: Option<u64>,
}

#[derive(Serialize)]
struct Report {
    benchmark: &'static str,
    machine: Machine,
    rows: Vec<Row>,
}

/// CPU time of the calling thread, in seconds (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Counts what is streamed.
#[derive(Default)]
struct Counter {
    changes: u64,
}

impl StreamSink for Counter {
    fn stream_start(&mut self, _: Xid, _: Lsn) -> settledb::Result<()> {
        Ok(())
    }
    fn stream_change(&mut self, _: Xid, _: &Change<'_>) -> settledb::Result<()> {
        self.changes += 1;
        Ok(())
    }
    fn stream_stop(&mut self, _: Xid) -> settledb::Result<()> {
        Ok(())
    }
    fn stream_abort(&mut self, _: Xid, _: Xid) -> settledb::Result<()> {
        Ok(())
    }
}

/// Everything below `FIRST_ABORTED` is committed, at and above it aborted (B9).
struct AbortedFrom(u32);

impl XidStatus for AbortedFrom {
    fn is_aborted(&self, xid: Xid) -> bool {
        xid.0 >= self.0
    }
}

/// One case's driver: the buffer, the LSN clock, the sink, the emitted count.
struct Feed {
    rb: ReorderBuffer,
    lsn: u64,
    sink: Counter,
    emitted: u64,
    queued: u64,
    row: [u8; 28],
}

impl Feed {
    fn change(&mut self, top: u32, xid: u32) -> Result<()> {
        self.lsn += 64;
        self.row[..4].copy_from_slice(&(self.lsn as u32).to_le_bytes());
        let c = Change {
            lsn: Lsn(self.lsn),
            xid: Xid(xid),
            kind: ChangeKind::Insert,
            rel: Oid(16384),
            old: &[],
            new: &self.row,
        };
        self.rb.queue_change(Xid(top), &c, &mut self.sink)?;
        self.queued += 1;
        Ok(())
    }

    fn commit(&mut self, top: u32) -> Result<()> {
        let mut n = 0;
        self.rb.commit(Xid(top), &mut |_| {
            n += 1;
            Ok(())
        })?;
        self.emitted += n;
        Ok(())
    }

    fn rollback_to(&mut self, top: u32, sub: u32, at: u64) -> Result<()> {
        self.rb.abort_subxacts(Xid(top), &[Xid(sub)], Some(Lsn(at)), &mut self.sink)?;
        Ok(())
    }
}

fn run_case(case: &str, limit: Option<usize>, streaming: bool, index: VictimIndex, shrink: u64) -> Result<Row> {
    let dir = tempfile::tempdir()?;
    let memory_limit = limit.unwrap_or(usize::MAX / 4);
    let cfg = ReorderBufferConfig { memory_limit, victim_index: index, ..ReorderBufferConfig::default() };
    let mut rb = ReorderBuffer::new(cfg, Arc::new(RealFs), dir.path())?;
    rb.set_streaming(streaming);
    if case == "B9-aborted" {
        rb.set_xid_status(Arc::new(AbortedFrom(1_000)));
    }
    let mut f = Feed { rb, lsn: 1 << 24, sink: Counter::default(), emitted: 0, queued: 0, row: [7; 28] };
    let n = |v: u64| (v / shrink).max(1);
    let (t0, c0) = (Instant::now(), thread_cpu());
    match case {
        "B1-large" => {
            for _ in 0..n(8_000_000) {
                f.change(100, 100)?;
            }
            f.commit(100)?;
        }
        "B2-subxacts" => {
            for s in 0..n(100_000) as u32 {
                f.change(100, 101 + s)?;
            }
            f.commit(100)?;
        }
        "B3-rollbacks" => {
            for s in 0..n(1_000) as u32 {
                let at = f.lsn + 1;
                for _ in 0..1_000 {
                    f.change(100, 101 + s)?;
                }
                if s % 2 == 1 {
                    f.rollback_to(100, 101 + s, at)?;
                }
            }
            f.commit(100)?;
        }
        "B4-open" => {
            let k = n(100_000) as u32;
            for t in 0..k {
                f.change(100 + t, 100 + t)?;
            }
            for t in 0..k {
                f.commit(100 + t)?;
            }
        }
        "B5-small" => {
            for t in 0..n(200_000) as u32 {
                f.change(100 + t, 100 + t)?;
                f.commit(100 + t)?;
            }
        }
        "B6-concurrent" => {
            let total = n(2_000) as u32;
            let mut next = 0u32;
            let mut open: Vec<(u32, u32)> = Vec::new();
            while next < total || !open.is_empty() {
                while open.len() < 16 && next < total {
                    open.push((100 + next, 0));
                    next += 1;
                }
                for o in &mut open {
                    for _ in 0..10 {
                        f.change(o.0, o.0)?;
                    }
                    o.1 += 10;
                }
                let done: Vec<u32> = open.iter().filter(|o| o.1 >= 1_000).map(|o| o.0).collect();
                open.retain(|o| o.1 < 1_000);
                for t in done {
                    f.commit(t)?;
                }
            }
        }
        "B8-roundrobin" => {
            let k = n(100_000) as u32;
            for _ in 0..10 {
                for t in 0..k {
                    f.change(100 + t, 100 + t)?;
                }
            }
            for t in 0..k {
                f.commit(100 + t)?;
            }
        }
        "B9-aborted" => {
            for _ in 0..n(8_000_000) {
                f.change(5_000, 5_000)?;
            }
            f.rb.abort(Xid(5_000))?;
        }
        other => anyhow::bail!("unknown case {other:?} ({})", CASES.join(", ")),
    }
    let (cpu, wall) = (thread_cpu() - c0, t0.elapsed().as_secs_f64());
    let s: ReorderStats = f.rb.stats();
    Ok(Row {
        case: case.to_string(),
        limit: limit.map_or("none".into(), human),
        mode: if streaming { "stream" } else { "spill" },
        index: format!("{index:?}"),
        changes: f.queued,
        cpu_seconds: cpu,
        wall_seconds: wall,
        ns_per_change: cpu * 1e9 / f.queued.max(1) as f64,
        changes_emitted: f.emitted + f.sink.changes,
        evictions: s.evictions,
        spill_txns: s.spill_txns,
        spill_count: s.spill_count,
        spill_bytes: s.spill_bytes,
        spill_files: s.spill_files,
        stream_count: s.stream_count,
        stream_bytes: s.stream_bytes,
        peak_memory: s.peak_memory,
        limit_bytes: limit.map(|l| l as u64),
    })
}

fn human(b: usize) -> String {
    if b >= 1 << 20 {
        format!("{}MB", b >> 20)
    } else {
        format!("{}kB", b >> 10)
    }
}

/// Each case's runs: (limit, streaming).
fn settings(case: &str) -> Vec<(Option<usize>, bool)> {
    match case {
        "B1-large" => vec![(Some(64 << 20), false), (None, false), (Some(64 << 20), true)],
        "B2-subxacts" => vec![(Some(64 << 10), false), (Some(64 << 20), false), (Some(64 << 10), true)],
        "B3-rollbacks" => vec![(Some(1 << 20), false), (Some(64 << 20), false)],
        "B4-open" => vec![(Some(64 << 10), false), (Some(64 << 10), true), (Some(64 << 20), false)],
        "B5-small" => vec![(Some(64 << 20), false)],
        "B6-concurrent" => vec![(Some(64 << 10), false), (Some(1 << 20), false), (Some(64 << 10), true)],
        "B8-roundrobin" => vec![(Some(64 << 10), false), (None, false)],
        _ => vec![(Some(64 << 20), false)],
    }
}

pub fn run(a: ReorderArgs) -> Result<ExitCode> {
    let cases: Vec<String> = if a.cases.is_empty() { CASES.iter().map(|s| s.to_string()).collect() } else { a.cases };
    let mut indexes = Vec::new();
    for i in &a.index {
        indexes.push(match i.as_str() {
            "heap" => VictimIndex::Heap,
            "scan" => VictimIndex::Scan,
            "adaptive" => VictimIndex::Adaptive { threshold: 1024 },
            other => anyhow::bail!("unknown victim index {other:?} (heap, scan, adaptive)"),
        });
    }
    anyhow::ensure!(a.shrink >= 1, "--shrink must be at least 1");
    let mut rows = Vec::new();
    for case in &cases {
        anyhow::ensure!(CASES.contains(&case.as_str()), "unknown case {case:?} ({})", CASES.join(", "));
        for (limit, streaming) in settings(case) {
            for &index in &indexes {
                let row = run_case(case, limit, streaming, index, a.shrink)?;
                if !a.json {
                    eprintln!("{} {} {} {}: {:.3} s", row.case, row.limit, row.mode, row.index, row.cpu_seconds);
                }
                rows.push(row);
            }
        }
    }
    let report = Report { benchmark: "reorder", machine: machine(), rows };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let m = &report.machine;
    println!("machine: {} CPUs ({}), {} GiB, {}", m.cpus, m.cpu_model, m.memory_gib, m.os);
    println!(
        "{:<14} {:>6} {:>6} {:<22} {:>10} {:>8} {:>7} {:>9} {:>8} {:>11} {:>6} {:>8} {:>11}",
        "case",
        "limit",
        "mode",
        "index",
        "changes",
        "cpu s",
        "ns/chg",
        "evictions",
        "spills",
        "spill bytes",
        "files",
        "streams",
        "peak memory"
    );
    for r in &report.rows {
        println!(
            "{:<14} {:>6} {:>6} {:<22} {:>10} {:>8.3} {:>7.0} {:>9} {:>8} {:>11} {:>6} {:>8} {:>11}",
            r.case,
            r.limit,
            r.mode,
            r.index,
            r.changes,
            r.cpu_seconds,
            r.ns_per_change,
            r.evictions,
            r.spill_count,
            r.spill_bytes,
            r.spill_files,
            r.stream_count,
            r.peak_memory
        );
    }
    Ok(ExitCode::SUCCESS)
}
