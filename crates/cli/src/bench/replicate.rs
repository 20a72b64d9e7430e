//! `settle bench replicate [--transactions N] [--lag-seconds S] [--rate R] [--peer] [--json]`:
//! a PostgreSQL 15 subscriber fed by `settle serve` and (with `--peer`) by a PostgreSQL 15
//! publisher, the same subscriber cluster and settings for both, one publisher after the
//! other.
//!
//! # The work
//!
//! TPC-C: BenchmarkSQL's tables with one warehouse, created and loaded through the workload
//! crate's PostgreSQL target (what `settle tpcc --target` sends) on the publisher and, with the
//! same seed and so the same rows, on the subscriber; a publication of all tables and a
//! subscription with `copy_data = false` (the rows are there already), connected through a
//! loopback relay in this process that counts the bytes the publisher sends.
//!
//! 1. **Lag**: four terminals run TPC-C at R transactions per second for S seconds while a
//!    probe inserts a row `(i, now())` into table `lag` every 100 ms; the subscriber's copy of
//!    `lag` has a third column `arrived default clock_timestamp()`, which its apply worker
//!    fills as it applies the insert. Lag is `arrived - t`: from the probe's statement on the
//!    publisher to the row on the subscriber, on one machine's clock. p50 and p99 over the
//!    probes.
//! 2. **Publisher CPU and bytes per change**: the subscription is disabled, four terminals
//!    run N transactions unthrottled, the subscription is enabled, and the publisher's CPU is
//!    read from when it is enabled until the subscriber holds every change (its districts'
//!    order counters, history and new-order rows equal the publisher's): settle serve runs in
//!    this process, and its WAL sender's CPU is that of the threads doing a WAL sender's job,
//!    the decoder thread (`walsender-<slot>`) and the connection's session threads
//!    (`settle-session-*`; the terminals' are idle then), not the engine's background threads
//!    (a checkpoint of the run's WAL may fall in the window, which PostgreSQL's checkpointer
//!    would do) or this benchmark's (its polling, the byte-counting relay); PostgreSQL's is
//!    its WAL sender process's (from `pg_stat_replication`), which starts with the
//!    subscription. Both to the nanosecond (`/proc/.../schedstat`), as the catch-up takes a
//!    fraction of a second. settledb's is also printed split: its decoder thread's share, the
//!    rest being the session threads' (the connection's, writing the batches out). The
//!    changes are the rows the run inserted, updated and deleted (`pg_stat_user_tables`, on
//!    each publisher); the bytes are those the relay carried from the publisher to the
//!    subscriber meanwhile.
//!    Catch-up seconds include the subscriber starting its worker (within 100 ms). The
//!    subscriber is polled for the end of the catch-up every 50 ms over one connection kept
//!    open (a `psql` each time would start a process and a backend twenty times a second on
//!    the cores the publisher shares).
//!
//! Targets (issue 21): publisher CPU per change at most 0.3x PostgreSQL 15's WAL sender; p99
//! lag no worse than PostgreSQL's.
//!
//! `--runs N` repeats both publishers N times, alternating (settledb, PostgreSQL, settledb,
//! ...), each round from fresh servers against the same subscriber, and prints every row. The
//! machine is shared, and one publisher's CPU per change moves by half from one run to the
//! next, so with more than one round the targets are judged on medians: the CPU target on the
//! median of the rounds' ratios (each of two publishers measured a minute apart), the lag
//! target on the median p99 of each publisher.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;

use crate::bench::wire::InProcess;
use crate::peer::Postgres;
use crate::procstat;
use workload::tpcc::postgres::{self as pgtpcc, PgTarget};
use workload::tpcc::{run as run_tpcc, RunConfig, RunProgress};

/// The population's seed, the same on both sides.
const SEED: u64 = 42;

#[derive(clap::Args)]
pub struct ReplicateArgs {
    /// TPC-C transactions in the CPU phase.
    #[arg(long, default_value_t = 10_000)]
    transactions: u32,
    /// Seconds of the lag phase.
    #[arg(long, default_value_t = 10)]
    lag_seconds: u32,
    /// TPC-C transactions per second in the lag phase.
    #[arg(long, default_value_t = 50)]
    rate: u32,
    /// Also run PostgreSQL 15 as the publisher.
    #[arg(long)]
    peer: bool,
    /// Rounds of both publishers, alternating; with more than one, the targets are judged on
    /// the medians (the CPU ratio on the median of each round's ratio).
    #[arg(long, default_value_t = 1)]
    runs: usize,
    #[arg(long, default_value_t = 54341)]
    peer_port: u16,
    #[arg(long, default_value_t = 54342)]
    subscriber_port: u16,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Figures {
    run: usize,
    publisher: &'static str,
    changes: u64,
    publisher_cpu_seconds: f64,
    /// Of `publisher_cpu_seconds`, the decoder thread's (settledb only; the rest is the
    /// session threads', the connection's writing the batches out).
    decoder_cpu_seconds: Option<f64>,
    cpu_us_per_change: f64,
    catch_up_seconds: f64,
    bytes_sent: u64,
    bytes_per_change: f64,
    lag_probes: usize,
    lag_p50_ms: f64,
    lag_p99_ms: f64,
}

/// psql -At against a port and database; the output, trimmed.
fn psql(port: u16, db: &str, sql: &str) -> Result<String> {
    let bin = crate::peer::find_bindir().context("PostgreSQL 15 is not installed")?.join("psql");
    let out = Command::new(bin)
        .args(["-X", "-At", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-d", db, "-c", sql])
        .output()?;
    if !out.status.success() {
        bail!("psql on port {port} failed on {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A loopback TCP relay to `target` that counts the bytes coming back from it (publisher to
/// subscriber), for as long as this process runs.
struct Relay {
    port: u16,
    down: Arc<AtomicU64>,
}

impl Relay {
    fn start(target: u16) -> Result<Relay> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let down = Arc::new(AtomicU64::new(0));
        let counted = down.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else { continue };
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else { continue };
                let counted = counted.clone();
                std::thread::spawn(move || pump(client, server, None));
                std::thread::spawn(move || pump(s2, c2, Some(counted)));
            }
        });
        Ok(Relay { port, down })
    }

    fn bytes_down(&self) -> u64 {
        self.down.load(Ordering::Relaxed)
    }
}

/// Copies `from` to `to` until either closes, counting into `count`.
fn pump(mut from: TcpStream, mut to: TcpStream, count: Option<Arc<AtomicU64>>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        if let Some(c) = &count {
            c.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// Rows inserted, updated and deleted in the bmsql tables so far, once the figure has
/// settled (PostgreSQL's backends report theirs when they end).
fn published_changes(port: u16) -> Result<u64> {
    let read = || -> Result<u64> {
        let v = psql(
            port,
            "postgres",
            "SELECT sum(n_tup_ins + n_tup_upd + n_tup_del) FROM pg_stat_user_tables WHERE relname LIKE 'bmsql%'",
        )?;
        Ok(v.parse::<f64>().map(|x| x as u64).unwrap_or(0))
    };
    let mut last = read()?;
    loop {
        std::thread::sleep(Duration::from_millis(700));
        let now = read()?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
}

/// What must be equal on both sides once the subscriber has every change.
const CAUGHT_UP: &str = "SELECT (SELECT sum(d_next_o_id) FROM bmsql_district), (SELECT count(*) FROM bmsql_history), \
                         (SELECT count(*) FROM bmsql_new_order)";

/// One connection to the subscriber, open across the catch-up, that polls [`CAUGHT_UP`]. A
/// `psql` every 50 ms would start a process here and a backend on the subscriber each time,
/// on the two cores the measured publisher shares.
struct Poller(postgres::Client);

impl Poller {
    fn connect(sub: u16) -> Result<Poller> {
        let conn = format!("host=127.0.0.1 port={sub} user=postgres dbname=postgres");
        Ok(Poller(postgres::Client::connect(&conn, postgres::NoTls).context("connecting to the subscriber")?))
    }

    /// [`CAUGHT_UP`]'s row as `psql -At` prints it (`a|b|c`; NULL as nothing).
    fn caught_up(&mut self) -> Result<String> {
        let row = self.0.query_one(CAUGHT_UP, &[])?;
        let mut cols = Vec::with_capacity(row.len());
        for i in 0..row.len() {
            let v: Option<i64> = row.try_get(i).context("reading the subscriber's catch-up row")?;
            cols.push(v.map(|v| v.to_string()).unwrap_or_default());
        }
        Ok(cols.join("|"))
    }
}

fn tpcc_config(transactions: Option<u64>, duration: Option<Duration>, rate: Option<f64>, seed: u64) -> RunConfig {
    RunConfig {
        warehouses: 1,
        terminals: 4,
        transactions,
        duration,
        seed,
        mix: Default::default(),
        delivery_workers: 1,
        rate,
    }
}

/// Polls `check` every 50 ms until it holds, for at most `limit`.
fn wait_for(what: &str, limit: Duration, mut check: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !check()? {
        ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// What a publisher's CPU reading gives: its WAL sender's seconds since the first reading,
/// and of those the decoder thread's, where it has one (settledb).
type CpuReading = (f64, Option<f64>);

/// One publisher's run against the subscriber on `sub`. `cpu` reads the publisher's CPU
/// seconds (settledb: its WAL sender's threads, and of those its decoder thread's;
/// PostgreSQL: its WAL sender process).
fn run_one(
    run: usize,
    publisher: &'static str,
    port: u16,
    sub: u16,
    a: &ReplicateArgs,
    cpu: &dyn Fn() -> Result<CpuReading>,
) -> Result<Figures> {
    eprintln!("{publisher}: loading one TPC-C warehouse on both sides ...");
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let sub_url = format!("postgres://postgres@127.0.0.1:{sub}/postgres");
    for u in [&url, &sub_url] {
        pgtpcc::create_schema(u)?;
        pgtpcc::load(u, 1, SEED)?;
    }
    psql(port, "postgres", "CREATE TABLE lag (id int PRIMARY KEY, t timestamp)")?;
    psql(sub, "postgres", "DROP TABLE IF EXISTS lag")?;
    psql(
        sub,
        "postgres",
        "CREATE TABLE lag (id int PRIMARY KEY, t timestamp, arrived timestamp DEFAULT clock_timestamp())",
    )?;
    psql(port, "postgres", "CREATE PUBLICATION bench FOR ALL TABLES")?;
    let relay = Relay::start(port)?;
    psql(
        sub,
        "postgres",
        &format!(
            "CREATE SUBSCRIPTION bench CONNECTION 'host=127.0.0.1 port={} user=postgres dbname=postgres' \
             PUBLICATION bench WITH (copy_data = false)",
            relay.port
        ),
    )?;

    // The apply worker starts when the subscriber's launcher next looks (every
    // wal_retrieve_retry_interval): measure from when it streams.
    let streaming = || Ok(psql(port, "postgres", "SELECT count(*) FROM pg_stat_replication")? == "1");
    wait_for("the subscription to stream", Duration::from_secs(60), streaming)?;
    let target = PgTarget::new(&url)?;

    // 1. Lag under a steady rate.
    eprintln!("{publisher}: lag phase, {} s at {} TPC-C transactions/s ...", a.lag_seconds, a.rate);
    let seconds = Duration::from_secs(u64::from(a.lag_seconds));
    let mut probes = 0;
    let cfg = tpcc_config(None, Some(seconds), Some(f64::from(a.rate)), 1);
    std::thread::scope(|scope| -> Result<()> {
        let load = scope.spawn(|| run_tpcc(&target, &cfg, &RunProgress::default()));
        let started = Instant::now();
        while started.elapsed() < seconds {
            psql(port, "postgres", &format!("INSERT INTO lag VALUES ({probes}, now())"))?;
            probes += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        load.join().map_err(|_| anyhow::anyhow!("the TPC-C terminals panicked"))??;
        Ok(())
    })?;
    wait_for("the probes on the subscriber", Duration::from_secs(120), || {
        Ok(psql(sub, "postgres", "SELECT count(*) FROM lag")? == probes.to_string())
    })?;
    let lags = psql(sub, "postgres", "SELECT extract(epoch FROM arrived - t) * 1000 FROM lag")?;
    let mut lags: Vec<f64> = lags.lines().filter_map(|l| l.trim().parse().ok()).collect();
    lags.sort_by(f64::total_cmp);

    // 2. Publisher CPU and bytes per change while the subscriber catches up.
    eprintln!("{publisher}: CPU phase, {} TPC-C transactions while the subscription is disabled ...", a.transactions);
    psql(sub, "postgres", "ALTER SUBSCRIPTION bench DISABLE")?;
    wait_for("the WAL sender to stop", Duration::from_secs(60), || {
        Ok(psql(port, "postgres", "SELECT count(*) FROM pg_stat_replication")? == "0")
    })?;
    let changes_before = published_changes(port)?;
    run_tpcc(&target, &tpcc_config(Some(u64::from(a.transactions)), None, None, 2), &RunProgress::default())?;
    let changes = published_changes(port)? - changes_before;
    let want = psql(port, "postgres", CAUGHT_UP)?;
    let mut poll = Poller::connect(sub)?;
    let ((before, decoder_before), bytes_before) = (cpu()?, relay.bytes_down());
    let t0 = Instant::now();
    psql(sub, "postgres", "ALTER SUBSCRIPTION bench ENABLE")?;
    wait_for("the subscriber to catch up", Duration::from_secs(900), || Ok(poll.caught_up()? == want))?;
    let catch_up_seconds = t0.elapsed().as_secs_f64();
    let (after, decoder_after) = cpu()?;
    let used = after - before;
    let decoder = decoder_after.zip(decoder_before).map(|(a, b)| a - b);
    let bytes_sent = relay.bytes_down() - bytes_before;
    psql(sub, "postgres", "DROP SUBSCRIPTION bench")?;
    Ok(Figures {
        run,
        publisher,
        changes,
        publisher_cpu_seconds: used,
        decoder_cpu_seconds: decoder,
        cpu_us_per_change: used * 1e6 / changes.max(1) as f64,
        catch_up_seconds,
        bytes_sent,
        bytes_per_change: bytes_sent as f64 / changes.max(1) as f64,
        lag_probes: lags.len(),
        lag_p50_ms: percentile(&lags, 0.5),
        lag_p99_ms: percentile(&lags, 0.99),
    })
}

/// Round `run` of `settle serve` as the publisher, in this process, started afresh.
fn settledb_run(a: &ReplicateArgs, run: usize) -> Result<Figures> {
    let mut config = settledb::Config::default();
    config.set("wal_level", "logical")?;
    config.set("fsync", "off")?;
    // Nothing but the WAL sender may use this process's CPU while it is measured.
    config.set("autovacuum", "off")?;
    let server = InProcess::start(config, 100)?;
    // The WAL sender's work is its decoder thread's and its connection's session thread's;
    // the engine's background threads (checkpoints of the TPC-C run's WAL), the benchmark's
    // own threads (polling, the relay) and the idle terminals' are not. The first reading is
    // the baseline; the second sums each such thread's CPU since (a thread that ended
    // meanwhile drops out instead of taking its whole past with it).
    let base = std::cell::RefCell::new(None);
    let cpu = || -> Result<CpuReading> {
        const DECODER: usize = 0;
        let now = procstat::threads_cpu(&["walsender-", "settle-session"]);
        let mut b = base.borrow_mut();
        let Some(then) = b.as_ref() else {
            *b = Some(now);
            return Ok((0.0, Some(0.0)));
        };
        let since = |(tid, (which, s)): (&u32, &(usize, f64))| (*which, s - then.get(tid).map_or(0.0, |t| t.1));
        let (mut all, mut decoder) = (0.0, 0.0);
        for (which, s) in now.iter().map(since) {
            all += s;
            if which == DECODER {
                decoder += s;
            }
        }
        Ok((all, Some(decoder)))
    };
    run_one(run, "settledb", server.port, a.subscriber_port, a, &cpu)
}

/// Round `run` of a PostgreSQL 15 publisher, started afresh (the subscriber's tables start
/// again from the load).
fn postgres_run(a: &ReplicateArgs, run: usize) -> Result<Figures> {
    let settings: Vec<(String, String)> = [("wal_level", "logical"), ("timezone", "UTC"), ("fsync", "off")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let _pg = Postgres::start_with(a.peer_port, &settings, &[])?;
    let port = a.peer_port;
    // The WAL sender is a new process each time the subscription connects: read the one
    // streaming now (0 before it exists: it starts after the first reading).
    let cpu = || -> Result<CpuReading> {
        let pid = psql(port, "postgres", "SELECT pid FROM pg_stat_replication LIMIT 1")?;
        Ok((pid.parse::<u32>().ok().and_then(procstat::cpu_precise).unwrap_or(0.0), None))
    };
    run_one(run, "postgres", a.peer_port, a.subscriber_port, a, &cpu)
}

pub fn run(a: ReplicateArgs) -> Result<ExitCode> {
    ensure!(a.transactions >= 2 && a.lag_seconds >= 1 && a.rate >= 1 && a.runs >= 1, "arguments must be positive");
    let sub_settings: Vec<(String, String)> = [
        ("max_logical_replication_workers", "4"),
        ("wal_receiver_status_interval", "1s"),
        // The launcher starts an enabled subscription's worker within this.
        ("wal_retrieve_retry_interval", "100ms"),
        ("timezone", "UTC"),
        ("fsync", "off"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let sub = Postgres::start_with(a.subscriber_port, &sub_settings, &[])?;
    let mut rows = Vec::new();
    for run in 1..=a.runs {
        rows.push(settledb_run(&a, run)?);
        if a.peer {
            rows.push(postgres_run(&a, run)?);
        }
    }
    drop(sub);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        percentile(&v, 0.5)
    };
    let of = |p: &'static str| rows.iter().filter(move |r| r.publisher == p);
    // Each round's ratio is of two publishers measured minutes apart on the same machine.
    let ratios: Vec<f64> =
        of("settledb").zip(of("postgres")).map(|(ours, pg)| ours.cpu_us_per_change / pg.cpu_us_per_change).collect();
    let mut targets = Vec::new();
    if !ratios.is_empty() {
        let ratio = median(ratios.clone());
        let p99 = |p: &'static str| median(of(p).map(|r| r.lag_p99_ms).collect());
        let (ours, pg) = (p99("settledb"), p99("postgres"));
        let (of_what, lag_what) = if ratios.len() > 1 {
            let each = ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", ");
            (format!("median of {each}: {ratio:.2}x"), "medians ")
        } else {
            (format!("{ratio:.2}x"), "")
        };
        targets
            .push((format!("publisher CPU per change <= 0.3x PostgreSQL 15's WAL sender ({of_what})"), ratio <= 0.3));
        targets.push((format!("p99 lag <= PostgreSQL's ({lag_what}{ours:.1} ms vs {pg:.1} ms)"), ours <= pg));
    }
    if a.json {
        let t: Vec<serde_json::Value> =
            targets.iter().map(|(w, ok)| serde_json::json!({ "what": w, "met": ok })).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "benchmark": "replicate", "rows": rows, "targets": t }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:>3} {:<10} {:>9} {:>9} {:>10} {:>10} {:>9} {:>10} {:>7} {:>9} {:>9}",
        "run",
        "publisher",
        "changes",
        "CPU s",
        "us/change",
        "MB sent",
        "B/change",
        "catch-up s",
        "probes",
        "lag p50",
        "lag p99"
    );
    for r in &rows {
        println!(
            "{:>3} {:<10} {:>9} {:>9.3} {:>10.2} {:>10.1} {:>9.1} {:>10.2} {:>7} {:>6.1} ms {:>6.1} ms",
            r.run,
            r.publisher,
            r.changes,
            r.publisher_cpu_seconds,
            r.cpu_us_per_change,
            r.bytes_sent as f64 / 1e6,
            r.bytes_per_change,
            r.catch_up_seconds,
            r.lag_probes,
            r.lag_p50_ms,
            r.lag_p99_ms
        );
    }
    for r in &rows {
        if let Some(d) = r.decoder_cpu_seconds {
            println!(
                "  run {} {}: decoder thread {:.3} s of the {:.3} s, the session threads the rest",
                r.run, r.publisher, d, r.publisher_cpu_seconds
            );
        }
    }
    for (what, ok) in &targets {
        println!("  [{}] {what}", if *ok { "met" } else { "MISSED" });
    }
    Ok(ExitCode::SUCCESS)
}
