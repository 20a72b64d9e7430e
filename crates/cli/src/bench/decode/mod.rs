//! `settle bench decode [--cases W1,…] [--runs N] [--shrink K] [--peer] [--peer-timeout S]
//! [--check] [--json]`: logical decoding end to end, WAL to output, on the engine and on
//! PostgreSQL 15 (issue 19, item 5), by `../shared/research/logical-decoding.md` §4's method.
//!
//! Each workload is built once per engine (not measured): on the engine through the Rust API
//! ([`engine`]), on PostgreSQL in SQL and pgbench ([`peer`]). Then each of its settings
//! (memory limit, sink) is decoded `--runs` times, the engines alternating run by run, each run
//! by a separate decoder process reading a fresh copy of a slot made before the workload, up
//! to the workload's end: the engine's `settle decode … --endpos` and PostgreSQL's walsender
//! serving `pg_recvlogical … --endpos`, both sampled from `/proc` every 20 ms ([`sample`]).
//! The figure of a setting is the run with the median CPU time.
//!
//! Sinks: `null` (the engine's null plugin, PostgreSQL's pgoutput with the empty publication
//! `pub_none`), `td` (test_decoding, lines to `/dev/null`, or to files compared between the
//! engines with `--check` and in every `--shrink`ed run), `td+stream` (`stream-changes=1`).
//!
//! Workloads (research §4.2; `--shrink K` divides every count by K):
//! - W1: one 8,000,000-row insert of one int4 column; 64MB and 4GB null, 64MB td.
//! - W2: one transaction of 100,000 subtransactions of one row; 64kB null. W2-25k, W2-50k and
//!   W2-200k are the same at other sizes, for the scaling curve (engine only).
//! - W3: one transaction of 1,000 subtransactions × 1,000 rows; 1MB null and td+stream.
//! - W4: 100,000 prepared transactions of one row, all open, then committed; 64kB null
//!   (spilling) and td+stream (streaming).
//! - W5: 200,000 one-row transactions from 8 clients; 64MB null and td.
//! - W6: 2,000 transactions of 10 × 100-row inserts, 16 clients interleaved; 64kB and 1MB null.
//! - W7: 20,000 rows of 8,000 characters (the largest row the engine's heap holds: it has no
//!   TOAST; PostgreSQL stores them TOASTed); 64MB td+stream.
//! - W9: an 8,000,000-row insert rolled back; 64MB null.
//!
//! With `--shrink K` (K > 1), W2, W3, W4 and W6 also get a `td` setting at their first limit,
//! so that the small versions of W1-W6 all have their test_decoding lines compared.
//!
//! PostgreSQL runs longer than `--peer-timeout` are stopped and recorded as "> N s
//! (capped)", and that setting's later PostgreSQL runs are skipped: its targets are absolute.

mod engine;
mod peer;
pub mod sample;
mod targets;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;

use crate::bench::{machine, Machine, TempDir};

#[derive(clap::Args)]
pub struct DecodeBenchArgs {
    /// Workloads to run (W1, W2, W2-25k, W2-50k, W2-200k, W3, W4, W5, W6, W7, W9); all by
    /// default.
    #[arg(long, value_delimiter = ',')]
    pub cases: Vec<String>,
    /// Runs per setting and engine (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Divide every workload's size by this (quick runs; the output check is always on).
    #[arg(long, default_value_t = 1)]
    pub shrink: u64,
    /// Also run PostgreSQL 15 on the same workloads.
    #[arg(long)]
    pub peer: bool,
    #[arg(long, default_value_t = 54337)]
    pub peer_port: u16,
    /// Stop a PostgreSQL decoding run after this many seconds (a lower bound is recorded).
    #[arg(long, default_value_t = 60)]
    pub peer_timeout: u64,
    /// Compare the engines' test_decoding output (W1 and W5 td) on the first run.
    #[arg(long)]
    pub check: bool,
    /// Where the engine's workload directories go (default: the temporary directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file (the table still goes to standard output).
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<PathBuf>,
}

/// What a run's decoded output goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum SinkKind {
    #[serde(rename = "null")]
    Null,
    #[serde(rename = "td")]
    Td,
    #[serde(rename = "td+stream")]
    TdStream,
}

impl SinkKind {
    fn name(self) -> &'static str {
        match self {
            SinkKind::Null => "null",
            SinkKind::Td => "td",
            SinkKind::TdStream => "td+stream",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub enum WorkloadKind {
    W1 { rows: u64 },
    W2 { subxacts: u64 },
    W3 { subxacts: u64, rows: u64 },
    W4 { txns: u64 },
    W5 { txns: u64, clients: u64 },
    W6 { txns: u64, clients: u64 },
    W7 { rows: u64, width: usize },
    W9 { rows: u64 },
}

/// A workload and the settings it is decoded with.
pub struct Workload {
    pub id: String,
    pub kind: WorkloadKind,
    pub settings: Vec<(&'static str, SinkKind)>,
    /// Whether PostgreSQL runs it too.
    pub peer: bool,
}

impl Workload {
    /// Its table's name: `w1`, `w2_25k`, ….
    pub fn table(&self) -> String {
        self.id.to_lowercase().replace('-', "_")
    }

    /// Row changes its WAL holds (decoded, or for W9 read and dropped).
    pub fn changes(&self) -> u64 {
        match self.kind {
            WorkloadKind::W1 { rows } | WorkloadKind::W9 { rows } | WorkloadKind::W7 { rows, .. } => rows,
            WorkloadKind::W2 { subxacts } => subxacts,
            WorkloadKind::W3 { subxacts, rows } => subxacts * rows,
            WorkloadKind::W4 { txns } => txns,
            WorkloadKind::W5 { txns, clients } => per_client(txns, clients),
            WorkloadKind::W6 { txns, clients } => per_client(txns, clients) * 1000,
        }
    }

    /// Transactions handed to the output plugin.
    pub fn transactions(&self) -> u64 {
        match self.kind {
            WorkloadKind::W1 { .. } | WorkloadKind::W2 { .. } | WorkloadKind::W3 { .. } | WorkloadKind::W7 { .. } => 1,
            WorkloadKind::W4 { txns } => txns,
            WorkloadKind::W5 { txns, clients } | WorkloadKind::W6 { txns, clients } => per_client(txns, clients),
            WorkloadKind::W9 { .. } => 0,
        }
    }
}

/// Transactions `clients` sessions run in all when each runs `txns / clients` (pgbench's `-t`).
fn per_client(txns: u64, clients: u64) -> u64 {
    let c = clients.min(txns).max(1);
    (txns / c) * c
}

pub const ALL: [&str; 11] = ["W1", "W2", "W2-25k", "W2-50k", "W2-200k", "W3", "W4", "W5", "W6", "W7", "W9"];

/// The workloads at `1/shrink` of their size.
pub fn workload(id: &str, shrink: u64) -> Option<Workload> {
    use SinkKind::*;
    let n = |v: u64| (v / shrink).max(1);
    let (kind, settings, peer): (WorkloadKind, Vec<(&'static str, SinkKind)>, bool) = match id {
        "W1" => (WorkloadKind::W1 { rows: n(8_000_000) }, vec![("64MB", Null), ("4GB", Null), ("64MB", Td)], true),
        "W2" => (WorkloadKind::W2 { subxacts: n(100_000) }, vec![("64kB", Null)], true),
        "W2-25k" => (WorkloadKind::W2 { subxacts: n(25_000) }, vec![("64kB", Null)], false),
        "W2-50k" => (WorkloadKind::W2 { subxacts: n(50_000) }, vec![("64kB", Null)], false),
        "W2-200k" => (WorkloadKind::W2 { subxacts: n(200_000) }, vec![("64kB", Null)], false),
        "W3" => (WorkloadKind::W3 { subxacts: n(1_000), rows: 1_000 }, vec![("1MB", Null), ("1MB", TdStream)], true),
        "W4" => (WorkloadKind::W4 { txns: n(100_000) }, vec![("64kB", Null), ("64kB", TdStream)], true),
        "W5" => (WorkloadKind::W5 { txns: n(200_000), clients: 8 }, vec![("64MB", Null), ("64MB", Td)], true),
        "W6" => (WorkloadKind::W6 { txns: n(2_000), clients: 16 }, vec![("64kB", Null), ("1MB", Null)], true),
        "W7" => (WorkloadKind::W7 { rows: n(20_000), width: 8_000 }, vec![("64MB", TdStream)], true),
        "W9" => (WorkloadKind::W9 { rows: n(8_000_000) }, vec![("64MB", Null)], true),
        _ => return None,
    };
    let mut settings = settings;
    // The small versions also compare W2, W3, W4 and W6's test_decoding lines between the
    // engines (the output check covers W1-W6); at full size PostgreSQL would take
    // minutes to hours on W2 and W4 with a second sink.
    if shrink > 1 && peer && matches!(id, "W2" | "W3" | "W4" | "W6") {
        settings.push((settings[0].0, Td));
    }
    Some(Workload { id: id.to_string(), kind, settings, peer })
}

/// One decoding run's figures (either engine).
#[derive(Serialize, Clone, Debug, Default)]
pub struct RunFigures {
    /// Decoder process CPU (utime + stime), seconds.
    pub cpu_seconds: f64,
    pub wall_seconds: f64,
    /// Highest `RssAnon` sampled, kB.
    pub peak_rss_anon_kb: u64,
    /// The engine's decoder `RssAnon` right after opening the directory, kB.
    pub rss_anon_after_open_kb: Option<u64>,
    pub spill_txns: u64,
    pub spill_count: u64,
    pub spill_bytes: u64,
    /// Spill files created (the engine's count; PostgreSQL's is not reported).
    pub spill_files: Option<u64>,
    pub stream_txns: u64,
    pub stream_count: u64,
    pub stream_bytes: u64,
    /// Times the decoder stopped to free memory (the research's "spill+stream invocations"):
    /// the engine's evictions, each spilling or streaming transactions down to the low-water
    /// mark; PostgreSQL's spill_count + stream_count, as PostgreSQL 15 serializes or streams
    /// one transaction per invocation.
    pub eviction_events: u64,
    /// The engine's reorder-buffer evictions (each frees memory to its low-water mark).
    pub buffer_evictions: Option<u64>,
    /// The engine's peak accounted reorder-buffer memory, bytes.
    pub peak_accounted_bytes: Option<u64>,
    /// Transactions decoded (`total_txns`).
    pub transactions: u64,
    pub rows_written: Option<u64>,
    pub samples: u64,
    /// Stopped at the peer timeout: CPU and wall are lower bounds.
    pub capped: bool,
}

/// A setting's figures on one engine: the median run, and all runs.
#[derive(Serialize, Clone, Debug)]
pub struct EngineResult {
    pub median: RunFigures,
    pub changes_per_second: f64,
    pub transactions_per_second: f64,
    /// Median run's peak RSS minus RSS after open (engine only), kB.
    pub peak_rss_over_open_kb: Option<u64>,
    pub runs: Vec<RunFigures>,
}

#[derive(Serialize, Clone, Debug)]
pub struct Target {
    pub what: String,
    /// `None`: not evaluated (a figure it needs is missing, e.g. PostgreSQL's without --peer).
    pub met: Option<bool>,
    pub detail: String,
}

#[derive(Serialize, Clone, Debug)]
pub struct OutputCheck {
    pub engine: sample::Digest,
    pub postgres: Option<sample::Digest>,
    pub ordered: bool,
    pub equal: Option<bool>,
}

#[derive(Serialize, Clone, Debug)]
pub struct CaseResult {
    pub case: String,
    pub limit: String,
    pub sink: SinkKind,
    pub changes: u64,
    pub expected_transactions: u64,
    pub engine: EngineResult,
    pub postgres: Option<EngineResult>,
    /// Why PostgreSQL has no figure, when it has none.
    pub postgres_note: Option<String>,
    pub check: Option<OutputCheck>,
    pub targets: Vec<Target>,
}

#[derive(Serialize, Clone, Debug)]
pub struct BuildTime {
    pub case: String,
    pub engine_seconds: f64,
    pub postgres_seconds: Option<f64>,
}

#[derive(Serialize)]
pub struct Report {
    pub benchmark: &'static str,
    pub machine: Machine,
    pub command: String,
    pub runs: usize,
    pub shrink: u64,
    pub peer: bool,
    pub peer_timeout_seconds: u64,
    pub cases: Vec<CaseResult>,
    pub builds: Vec<BuildTime>,
    pub targets: Vec<Target>,
    pub total_seconds: f64,
}

fn summarize(runs: Vec<RunFigures>, changes: u64) -> EngineResult {
    let mut sorted = runs.clone();
    sorted.sort_by(|a, b| a.cpu_seconds.total_cmp(&b.cpu_seconds));
    let median = sorted[sorted.len() / 2].clone();
    let cpu = median.cpu_seconds.max(1e-9);
    EngineResult {
        changes_per_second: changes as f64 / cpu,
        transactions_per_second: median.transactions as f64 / cpu,
        peak_rss_over_open_kb: median.rss_anon_after_open_kb.map(|o| median.peak_rss_anon_kb.saturating_sub(o)),
        median,
        runs,
    }
}

pub fn run(a: DecodeBenchArgs) -> Result<ExitCode> {
    anyhow::ensure!(a.shrink >= 1 && a.runs >= 1, "--shrink and --runs must be at least 1");
    let ids: Vec<String> =
        if a.cases.is_empty() { ALL.iter().map(|s| s.to_string()).collect() } else { a.cases.clone() };
    let mut workloads = Vec::new();
    for id in &ids {
        workloads
            .push(workload(id, a.shrink).ok_or_else(|| anyhow::anyhow!("unknown case {id:?} ({})", ALL.join(", ")))?);
    }
    let t0 = Instant::now();
    let root = a
        .dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("settle-bench-decode-{}", std::process::id())));
    std::fs::create_dir_all(&root)?;
    let _cleanup = TempDir(root.clone(), a.dir.is_none());
    let max_prepared =
        workloads.iter().map(|w| if let WorkloadKind::W4 { txns } = w.kind { txns } else { 0 }).max().unwrap_or(0);
    let pg = if a.peer {
        eprintln!("starting PostgreSQL 15 on port {}", a.peer_port);
        Some(peer::start(a.peer_port, max_prepared)?)
    } else {
        None
    };
    let check = a.check || a.shrink > 1;
    let mut cases = Vec::new();
    let mut builds = Vec::new();
    let mut tag = 0usize;
    for w in &workloads {
        eprintln!("{}: building on settledb", w.id);
        let dir = root.join(w.table());
        let eb = engine::build(w, &dir)?;
        eprintln!("{}: built on settledb in {:.1} s", w.id, eb.build_seconds);
        let pb = match (&pg, w.peer) {
            (Some(pg), true) => {
                eprintln!("{}: building on PostgreSQL", w.id);
                let b = peer::build(pg, w)?;
                eprintln!("{}: built on PostgreSQL in {:.1} s", w.id, b.build_seconds);
                Some(b)
            }
            _ => None,
        };
        builds.push(BuildTime {
            case: w.id.clone(),
            engine_seconds: eb.build_seconds,
            postgres_seconds: pb.as_ref().map(|b| b.build_seconds),
        });
        for &(limit, sink) in &w.settings {
            let label = format!("{} {limit} {}", w.id, sink.name());
            let do_check = check && sink == SinkKind::Td;
            let mut ours = Vec::new();
            let mut theirs = Vec::new();
            let mut capped = false;
            let mut digest = None;
            for r in 0..a.runs {
                let efile = (do_check && r == 0).then(|| root.join(format!("{}-engine.td", w.table())));
                let f = engine::decode_run(&eb, limit, sink, efile.as_deref())?;
                eprintln!("{label} run {}: settledb {:.3} s CPU, {:.3} s wall", r + 1, f.cpu_seconds, f.wall_seconds);
                ours.push(f);
                let mut pfile = None;
                if let (Some(pg), Some(pb)) = (&pg, &pb) {
                    if !capped {
                        tag += 1;
                        pfile = (do_check && r == 0).then(|| pg.dir().join(format!("{}-pg.td", w.table())));
                        let ps = pfile.as_ref().map(|p| p.to_string_lossy().into_owned());
                        let cap = Duration::from_secs(a.peer_timeout);
                        let f = peer::decode_run(pg, pb, limit, sink, ps.as_deref(), cap, tag)?;
                        let c = if f.capped { " (capped)" } else { "" };
                        eprintln!(
                            "{label} run {}: postgres {:.3} s CPU{c}, {:.3} s wall",
                            r + 1,
                            f.cpu_seconds,
                            f.wall_seconds
                        );
                        capped = f.capped;
                        theirs.push(f);
                    }
                }
                if let Some(ef) = &efile {
                    digest = Some(compare(ef, pfile.as_deref(), w)?);
                    let _ = std::fs::remove_file(ef);
                    if let Some(p) = &pfile {
                        let _ = std::fs::remove_file(p);
                    }
                }
            }
            let changes = w.changes();
            let postgres_note = match (&pg, w.peer, capped) {
                (None, _, _) => Some("not run (no --peer)".to_string()),
                (Some(_), false, _) => Some("not run (engine-only scaling point)".to_string()),
                (Some(_), true, true) => Some(format!("> {} s (capped)", a.peer_timeout)),
                _ => None,
            };
            cases.push(CaseResult {
                case: w.id.clone(),
                limit: limit.to_string(),
                sink,
                changes,
                expected_transactions: w.transactions(),
                engine: summarize(ours, changes),
                postgres: (!theirs.is_empty()).then(|| summarize(theirs, changes)),
                postgres_note,
                check: digest,
                targets: Vec::new(),
            });
        }
        if let (Some(pg), true) = (&pg, w.peer) {
            peer::cleanup(pg, w)?;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    let summary = targets::evaluate(&mut cases, a.shrink);
    if let Some(pg) = pg {
        pg.stop()?;
    }
    let report = Report {
        benchmark: "decode",
        machine: machine(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        runs: a.runs,
        shrink: a.shrink,
        peer: a.peer,
        peer_timeout_seconds: a.peer_timeout,
        cases,
        builds,
        targets: summary,
        total_seconds: t0.elapsed().as_secs_f64(),
    };
    if let Some(path) = &a.json_out {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", targets::render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// Digests the engine's test_decoding file and PostgreSQL's (if any) and compares them.
fn compare(engine_file: &Path, pg_file: Option<&Path>, w: &Workload) -> Result<OutputCheck> {
    let ordered = !matches!(w.kind, WorkloadKind::W5 { .. } | WorkloadKind::W6 { .. });
    let e = sample::digest(engine_file, !ordered)?;
    let p = pg_file.map(|p| sample::digest(p, !ordered)).transpose()?;
    let equal = p.as_ref().map(|p| *p == e);
    Ok(OutputCheck { engine: e, postgres: p, ordered, equal })
}
