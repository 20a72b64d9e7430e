//! `settle`: the settledb command-line tool.
//!
//! * `settle check DIR`: opens the data directory (running crash recovery if needed) and
//!   verifies every invariant `settledb::check` knows; exits 1 naming each problem.
//! * `settle waldump DIR`: prints WAL records one per line, like `pg_waldump`.
//! * `settle vacuum DIR [TABLE] [--verbose] …`: VACUUM with PostgreSQL's options (autovacuum
//!   off), printing the `VACUUM (VERBOSE)` report or one line per table.
//! * `settle inspect DIR page|index|vm|fsm NAME BLOCK`: a heap page with its line pointers and
//!   tuple headers, a B-tree page, or the visibility-map / free-space-map page of a heap block;
//!   `vm|fsm TABLE` without a block summarizes the whole map (all-visible / all-frozen counts,
//!   free space per page or as a histogram).
//! * `settle stats DIR [--json]`: the cumulative statistics views (`pg_stat_user_tables`,
//!   `pg_stat_database`, `pg_stat_wal`) and every table's relfrozenxid age.
//! * `settle bench load --rows N`: bulk-loads pgbench_accounts-shaped rows and reports the rate,
//!   pages, WAL and full-page images, optionally next to PostgreSQL 15 doing the same.
//! * `settle bench pgbench -s S -c C -T T [-S]`: pgbench's transactions through the embedded API,
//!   optionally next to PostgreSQL 15 running the real pgbench.
//! * `settle bench vacuum --scale S [--peer]`: VACUUM after 5% of a pgbench_accounts table was
//!   updated, then again over the clean table, next to PostgreSQL 15 doing the same.
//! * `settle bench tidstore [--scale 1|10] [--json]`: VACUUM's dead-TID stores compared
//!   (memory, attach, shuffled/ordered/batched lookups, iteration).
//! * `settle tpcc [--warehouses W] [--compare lazy,pg16,eager] [--aging 1:N] [--duration S]`:
//!   the main job: TPC-C-like under autovacuum with scaled XID ages, freeze policies side by
//!   side, with a text, JSON and HTML report.
//! * `settle bench aging [--policy lazy,pg16,eager] [--transactions N] [--scale S]
//!   [--xids-per-tx K] [--json]`: the freeze policies compared under autovacuum while XIDs age.
//! * `settle bench relations --relations N [--peer] [--json]`: creating N relations, VACUUM of
//!   one empty table among them (incremental database frozen XID) and the full recomputation,
//!   the autovacuum launcher's idle CPU per naptime, catalog bytes per relation.
//! * `settle bench wire [--scale S] [--clients C] [--peer] [--json]`: the real pgbench against
//!   `settle serve` (and PostgreSQL 15 with `--peer`), tps side by side (see `bench/wire.rs`).
//! * `settle peer start [--port P] [--set NAME=VALUE]...` / `settle peer stop --port P`: a
//!   PostgreSQL 15 that outlives the command, for `--target URL`.
//! * `settle pgbench (--dir DIR | --target URL) [-i -s S] [-c C] [-T secs | -t n] [-S | -b
//!   tpcb-like|select-only|append-only] [--json]`: pgbench's workloads, printing pgbench's report.
//! * `settle stress --dir DIR [--seconds S] [--threads N] [--json]`: transfers, VACUUM, checkpoints,
//!   CREATE/DROP INDEX and invariant-checking readers all at once (see `stress.rs`).
//! * `settle torture --dir DIR [--kills N] [--seconds S] [--workload pgbench|tpcc] [--seed X]
//!   [--json]`: SIGKILL a child running the workload, recover, verify every acknowledged commit
//!   against its ack log and run `check`; exits 1 on any anomaly (see `torture`).
//!   `--wraparound [--xids N] [--autovacuum off]`: the XID wraparound soak instead (see `soak`).
//! * `settle serve --dir DIR [--port P] [--listen ADDR] [--password-file F] [--trust]`:
//!   PostgreSQL's wire protocol over a data directory, for psql, pgbench and drivers; SCRAM
//!   against the roles' stored passwords unless `--trust` (see `serve.rs` and the
//!   `settledb-server` crate).
//! * `settle decode DIR --slot S [--create-slot [--plugin P]] [--drop-slot] [--start [-f FILE]
//!   [--endpos LSN] [-o NAME[=VALUE]]...]`: `pg_recvlogical` on the directory, opened by this
//!   process (see `decode.rs`).
//!
//! The binary installs `tidstore::bench::CountingAlloc` as its global allocator so that the
//! tidstore benchmark can measure each structure's heap bytes exactly. It costs one relaxed
//! atomic add per allocation and one subtract per free on top of the system allocator, which
//! is noise next to what the other commands do per allocation.

mod bench;
mod decode;
mod inspect;
mod peer;
mod pgbench;
mod procstat;
mod serve;
mod stats;
mod stress;
mod torture;
mod tpcc;
mod vacuum;

#[global_allocator]
static ALLOC: tidstore::bench::CountingAlloc = tidstore::bench::CountingAlloc;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use settledb::io::{FileSystem, RealFs};
use settledb::wal::control::ControlFile;
use settledb::wal::{segment, WalReader};
use settledb::{Config, Database, WalLevel};

#[derive(Parser)]
#[command(name = "settle", version, about = "settledb: an MVCC storage engine with the best VACUUM there is")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Verify a data directory's invariants (runs crash recovery first if needed).
    Check {
        dir: PathBuf,
        /// Configuration parameters, `name=value` (PostgreSQL names and units).
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
    },
    /// Print WAL records, one per line (like pg_waldump).
    Waldump {
        dir: PathBuf,
        /// Print at most this many records.
        #[arg(long)]
        limit: Option<u64>,
        /// Print only the per-resource-manager totals (like pg_waldump --stats).
        #[arg(long)]
        stats: bool,
        /// Start at this LSN (`X/Y`, like pg_waldump -s). By default: the oldest segment's
        /// start, or the last checkpoint's redo pointer when that segment opens inside a
        /// record continued from a removed one.
        #[arg(long, value_name = "LSN")]
        start: Option<String>,
    },
    /// VACUUM one table or all (autovacuum is off while it runs).
    Vacuum(vacuum::VacuumArgs),
    /// Show a page: `page TABLE BLOCK` (heap page: line pointers, tuple headers, values, like
    /// pageinspect), `index NAME BLOCK` (B-tree page, like bt_page_items), `vm TABLE BLOCK` or
    /// `fsm TABLE BLOCK` (the visibility-map or free-space-map page covering heap block BLOCK);
    /// `vm TABLE` and `fsm TABLE` without a block summarize the whole map (like
    /// pg_visibility_map_summary and pg_freespace).
    Inspect {
        dir: PathBuf,
        /// `page`, `index`, `vm` or `fsm`.
        what: String,
        /// The table (or, for `index`, the index).
        name: String,
        /// The block (required for `page` and `index`).
        block: Option<u32>,
    },
    /// Print the statistics views (pg_stat_user_tables, pg_stat_database, pg_stat_wal) and
    /// every table's relfrozenxid age (runs crash recovery first if needed).
    Stats {
        dir: PathBuf,
        /// Print one JSON object instead of tables.
        #[arg(long)]
        json: bool,
        /// Configuration parameters, `name=value` (PostgreSQL names and units); autovacuum is
        /// off unless set here.
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
    },
    /// TPC-C-like under autovacuum with scaled XID ages: freeze policies side by side.
    Tpcc(tpcc::TpccArgs),
    /// Benchmarks (programs that print figures).
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// A PostgreSQL 15 that outlives the command: `start [--port P] [--set NAME=VALUE]...`,
    /// `stop --port P`.
    #[command(subcommand)]
    Peer(peer::command::PeerCmd),
    /// pgbench's workloads and report on the embedded engine (--dir DIR) or PostgreSQL
    /// (--target URL): -i -s S to initialize, then -c C -T secs | -t n [-S | -b SCRIPT].
    Pgbench(pgbench::PgbenchArgs),
    /// Transfers, invariant-checking readers, VACUUM, autovacuum, checkpoints and CREATE/DROP
    /// INDEX all at once; the balance invariant and `check` must hold.
    Stress(stress::StressArgs),
    /// SIGKILL a child process running a workload (pgbench or TPC-C) again and again at random
    /// moments and inside VACUUM, checkpoints and relation extension; after each kill recover,
    /// check every acknowledged commit against the child's ack log, and run `check`.
    Torture(torture::TortureArgs),
    /// Serve a data directory over PostgreSQL's wire protocol (psql, pgbench, drivers).
    Serve(serve::ServeArgs),
    /// Logical decoding from a replication slot, like pg_recvlogical: --create-slot, --start
    /// (rows to -f FILE until Ctrl-C or --endpos), --drop-slot. Opens the directory itself.
    Decode(decode::DecodeArgs),
    /// The child process of `settle torture` (not for direct use).
    #[command(hide = true)]
    TortureChild(torture::child::ChildArgs),
}

/// Parses repeated `--set name=value` into a configuration.
pub fn config_from(set: &[String]) -> Result<Config> {
    let mut c = Config::default();
    for kv in set {
        let (k, v) = kv.split_once('=').with_context(|| format!("--set takes NAME=VALUE, got {kv:?}"))?;
        c.set(k.trim(), v.trim())?;
    }
    Ok(c)
}

/// The configuration a tool opens an existing data directory with: the defaults, then the
/// `wal_level` the directory last ran at (pg_control's; a directory holding a logical slot
/// refuses to open below `logical`, as PostgreSQL's server does), then `set`.
pub fn config_for_dir(dir: &std::path::Path, set: &[String]) -> Result<Config> {
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let control = ControlFile::read(&*fs, &dir.join("global").join("pg_control"));
    let last_level = match control {
        Ok(c) if WalLevel::from_u8(c.wal_level) == Some(WalLevel::Logical) => Some("wal_level=logical".to_string()),
        _ => None,
    };
    config_from(&last_level.into_iter().chain(set.iter().cloned()).collect::<Vec<_>>())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Cmd::Serve(_)) {
        die_of_sigpipe();
    }
    let r = match cli.command {
        Cmd::Check { dir, set } => check(dir, &set),
        Cmd::Waldump { dir, limit, stats, start } => waldump(dir, limit, stats, start),
        Cmd::Vacuum(a) => vacuum::run(a),
        Cmd::Inspect { dir, what, name, block } => inspect::run(dir, &what, &name, block),
        Cmd::Stats { dir, json, set } => {
            // An inspection tool starts no maintenance of its own unless asked to.
            let set: Vec<String> = std::iter::once("autovacuum=off".to_string()).chain(set).collect();
            config_for_dir(&dir, &set).and_then(|c| stats::run(dir, json, c))
        }
        Cmd::Tpcc(a) => tpcc::run(a),
        Cmd::Bench(b) => bench::run(b),
        Cmd::Peer(p) => peer::command::run(p),
        Cmd::Pgbench(a) => pgbench::run(a),
        Cmd::Stress(a) => stress::run(a),
        Cmd::Torture(a) => torture::run(a),
        Cmd::TortureChild(a) => torture::child::run(a),
        Cmd::Serve(a) => serve::run(a),
        Cmd::Decode(a) => decode::run(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("settle: error: {}", error_chain(&e));
            ExitCode::from(2)
        }
    }
}

/// Lets SIGPIPE end the process, as it ends any Unix filter whose reader has gone
/// (`settle waldump … | head`). Rust starts programs ignoring it, which turns that ordinary
/// end into a write error, and `println!` into a panic ("failed printing to stdout: Broken
/// pipe"). The only other pipe written is stdout too: `torture-child`'s acknowledgements to
/// its parent, which it should not outlive. The engine writes files, and every socket (the
/// in-process server of the wire benches, the clients of `tpcc --target`, PostgreSQL peers)
/// is a TCP socket, which the standard library and tokio write with `MSG_NOSIGNAL`, so a
/// peer that goes away is still an error, never a signal. `settle serve` keeps ignoring
/// it: a server outlives whoever reads its log (its log writes ignore errors).
fn die_of_sigpipe() {
    // SAFETY: setting a signal's disposition to the default, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// An error and its causes, `: `-separated, as anyhow's `{:#}` prints them, leaving out a
/// cause the message before it already says (the engine's I/O errors name their OS error
/// in their own text: "could not extend file …: No space left on device").
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.ends_with(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}

pub fn require_data_dir(dir: &std::path::Path) -> Result<()> {
    if !dir.join("global").join("pg_control").exists() {
        bail!("\"{}\" is not a settledb data directory (no global/pg_control)", dir.display());
    }
    Ok(())
}

fn check(dir: PathBuf, set: &[String]) -> Result<ExitCode> {
    require_data_dir(&dir)?;
    let db = Database::open(&dir, config_for_dir(&dir, set)?)?;
    let r = db.recovery_report();
    if r.records_replayed > 0 {
        println!("recovery: replayed {} records from {} to {}", r.records_replayed, r.redo_start, r.end_lsn);
    }
    let report = settledb::check::check_database(&db)?;
    println!("{report}");
    db.close()?;
    Ok(if report.is_clean() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn waldump(dir: PathBuf, limit: Option<u64>, stats: bool, start: Option<String>) -> Result<ExitCode> {
    require_data_dir(&dir)?;
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let control = ControlFile::read(&*fs, &dir.join("global").join("pg_control"))?;
    let wal_dir = dir.join("pg_wal");
    let first = fs
        .list(&wal_dir)?
        .iter()
        .filter_map(|n| segment::parse_segment_file_name(n, control.wal_segment_size))
        .min()
        .context("no WAL segments")?;
    let oldest =
        settledb::Lsn(first * control.wal_segment_size).max(settledb::wal::first_lsn(control.wal_segment_size));
    let start = match start {
        Some(s) => decode::parse_lsn(&s)?,
        // The stream has no page headers to resynchronize on: when the oldest segment begins
        // with the tail of a record from a removed segment, no record starts there.
        None => match WalReader::new(fs.clone(), &wal_dir, oldest, control.wal_segment_size).next()? {
            Some(_) => oldest,
            None => {
                eprintln!(
                    "settle waldump: no record starts at {oldest} (the oldest segment opens inside a record); starting at the checkpoint's redo pointer {}",
                    control.redo_lsn
                );
                control.redo_lsn
            }
        },
    };
    let mut reader = WalReader::new(fs, &wal_dir, start, control.wal_segment_size);
    let mut totals: std::collections::BTreeMap<&'static str, (u64, u64, u64)> = Default::default();
    let mut n = 0u64;
    while let Some(rec) = reader.next()? {
        if stats {
            let e = totals.entry(rec.rmgr.name()).or_default();
            e.0 += 1;
            e.1 += rec.end_lsn.0 - rec.lsn.0;
            e.2 += rec.blocks.iter().filter(|b| b.image.is_some()).count() as u64;
        } else {
            println!("{}", settledb::wal::desc::describe(&rec, &settledb::db::startup::describe_record));
        }
        n += 1;
        if limit.is_some_and(|l| n >= l) {
            break;
        }
    }
    if stats {
        println!("{:<12} {:>10} {:>14} {:>8}", "Type", "N", "Bytes", "FPI");
        for (k, (c, b, f)) in totals {
            println!("{k:<12} {c:>10} {b:>14} {f:>8}");
        }
    }
    if let Some(why) = reader.stop_reason() {
        eprintln!("settle waldump: end of WAL at {}: {why}", reader.end_lsn());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod error_tests {
    use super::error_chain;

    #[test]
    fn an_os_error_the_message_already_names_is_printed_once() {
        let os = std::io::Error::from_raw_os_error(28);
        let e = anyhow::Error::from(settledb::Error::io("extend", "/d/base/16385", os));
        let text = error_chain(&e);
        assert_eq!(text.matches("No space left on device").count(), 1, "{text}");
        assert!(text.starts_with("could not extend file \"/d/base/16385\": No space left on device"), "{text}");
        let wrapped = e.context("loading pgbench_accounts");
        assert_eq!(error_chain(&wrapped), format!("loading pgbench_accounts: {text}"));
    }
}
