//! `settle bench wire [--scale S] [--clients C] [--slices N] [--slice-seconds T] [--peer]
//! [--json]`: the real `pgbench` binary against `settle serve`'s server (started in this
//! process on a free loopback port, over a fresh data directory) and, with `--peer`, against a
//! throwaway PostgreSQL 15 with the same settings: the fair comparison, since both sides face
//! the same client binary and protocol.
//!
//! Both databases are initialized with `pgbench -i -s S` first. Then time is cut into slices
//! that alternate between the engines and between the two workloads, TPC-B-like and
//! select-only (`-S`), each slice `pgbench -n -c C -j C -M prepared -T T`; an engine's tps for
//! a workload is its transactions over its seconds, summed over its slices, so a disturbance
//! of the machine falls on both engines alike. pgbench shares the machine with the server, so
//! the figures are those of client and server together.
//!
//! Beside the tps, each engine's server CPU per transaction: settledb's is this process's own
//! CPU time over the slice (the server runs in it; pgbench is a child, not counted),
//! PostgreSQL's that of its postmaster and every process it started, from `/proc`. pgbench
//! shares the two cores, so server CPU per transaction is the figure that says what each
//! server costs.
//!
//! Then `--idle-connections` connections (200 by default) are opened to each server and held
//! for `--idle-seconds` with a trickle of queries (one `SELECT 1` every 50 ms, round robin):
//! errors are counted, and the server's proportional memory (`Pss`, so PostgreSQL's shared
//! buffers are counted once across its backends) before and with them open gives the memory
//! per idle connection.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use serde::Serialize;

/// The command's flags, as parsed by clap.
#[derive(clap::Args)]
pub struct WireArgs {
    /// pgbench scale factor (100,000 accounts per unit).
    #[arg(long, short = 's', default_value_t = 50)]
    scale: u32,
    /// pgbench clients (and threads, -j).
    #[arg(long, short = 'c', default_value_t = 2)]
    clients: u32,
    /// Slices per engine and workload.
    #[arg(long, default_value_t = 3)]
    slices: u32,
    /// Seconds per slice.
    #[arg(long, default_value_t = 5)]
    slice_seconds: u32,
    /// Also run PostgreSQL 15 with the same settings.
    #[arg(long)]
    peer: bool,
    #[arg(long, default_value_t = 54331)]
    peer_port: u16,
    /// Connections held open in the idle-connections run (0: skip it).
    #[arg(long, default_value_t = 200)]
    idle_connections: u32,
    /// How long they are held.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u32,
    /// Configuration parameters for both engines, `name=value`.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize, Default, Clone, Copy)]
struct Totals {
    transactions: u64,
    seconds: f64,
    failed: u64,
    /// The server's CPU seconds over the slices.
    server_cpu: f64,
}

impl Totals {
    fn tps(&self) -> f64 {
        if self.seconds > 0.0 {
            self.transactions as f64 / self.seconds
        } else {
            0.0
        }
    }

    fn cpu_us_per_txn(&self) -> f64 {
        if self.transactions > 0 {
            self.server_cpu * 1e6 / self.transactions as f64
        } else {
            0.0
        }
    }
}

/// The idle-connections run on one server.
#[derive(Serialize)]
struct IdleFigures {
    engine: &'static str,
    connections: u32,
    seconds: u32,
    queries: u64,
    errors: u64,
    pss_before_kb: u64,
    pss_open_kb: u64,
    kb_per_connection: f64,
}

/// Opens `n` connections to `url`, holds them `seconds` with one `SELECT 1` every 50 ms
/// (round robin), and measures `pss` (the server's memory, kB) before and while they are open.
fn idle_run(engine: &'static str, url: &str, n: u32, seconds: u32, pss: &dyn Fn() -> u64) -> IdleFigures {
    let pss_before_kb = pss();
    let mut errors = 0u64;
    let mut clients = Vec::new();
    for _ in 0..n {
        match workload::pg::connect(url) {
            Ok(c) => clients.push(c),
            Err(e) => {
                errors += 1;
                eprintln!("{engine}: connection {} failed: {e:#}", clients.len() + 1);
            }
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(u64::from(seconds));
    let mut queries = 0u64;
    let mut pss_open_kb = pss();
    let mut next = 0usize;
    while std::time::Instant::now() < deadline && !clients.is_empty() {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let k = next % clients.len();
        match clients[k].simple_query("SELECT 1") {
            Ok(_) => queries += 1,
            Err(e) => {
                errors += 1;
                eprintln!("{engine}: a query on an idle connection failed: {e}");
            }
        }
        next += 1;
        if next.is_multiple_of(100) {
            pss_open_kb = pss_open_kb.max(pss());
        }
    }
    pss_open_kb = pss_open_kb.max(pss());
    let opened = clients.len().max(1) as f64;
    drop(clients);
    IdleFigures {
        engine,
        connections: n,
        seconds,
        queries,
        errors,
        pss_before_kb,
        pss_open_kb,
        kb_per_connection: pss_open_kb.saturating_sub(pss_before_kb) as f64 / opened,
    }
}

#[derive(Serialize)]
struct Row {
    engine: &'static str,
    workload: &'static str,
    tps: f64,
    transactions: u64,
    seconds: f64,
    failed: u64,
    server_cpu_us_per_txn: f64,
}

/// A `settle serve` server on its own runtime thread; dropping it shuts it down.
pub(crate) struct InProcess {
    pub(crate) port: u16,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
    _dir: tempfile::TempDir,
}

impl InProcess {
    pub(crate) fn start(config: settledb::Config, max_connections: usize) -> Result<InProcess> {
        let dir = tempfile::tempdir()?;
        let mut opts = settledb_server::ServeOptions::new(dir.path().join("data"));
        opts.port = 0;
        opts.config = config;
        opts.log_to_stderr = false;
        opts.max_connections = max_connections;
        // A throwaway server on loopback for the benchmark's own clients.
        opts.trust = true;
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            rt.block_on(async move {
                let server = settledb_server::Server::bind(opts).await?;
                let _ = addr_tx.send(server.local_addr().port());
                server
                    .run(async move {
                        let _ = stop_rx.await;
                    })
                    .await?;
                Ok(())
            })
        });
        let port = match addr_rx.recv() {
            Ok(p) => p,
            Err(_) => {
                let r = thread.join().map_err(|_| anyhow::anyhow!("server thread panicked"))?;
                r?;
                bail!("the server stopped before listening");
            }
        };
        Ok(InProcess { port, stop: Some(stop_tx), thread: Some(thread), _dir: dir })
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn pgbench_bin() -> Result<PathBuf> {
    let p = crate::peer::find_bindir()
        .map(|d| d.join("pgbench"))
        .filter(|p| p.exists())
        .context("pgbench (PostgreSQL 15) is not installed (apt-get install postgresql-15)")?;
    Ok(p)
}

/// Runs pgbench against settle serve's port.
fn pgbench_settle(bin: &PathBuf, port: u16, args: &[&str]) -> Result<String> {
    let port = port.to_string();
    let out = Command::new(bin)
        .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres"])
        .args(args)
        .arg("postgres")
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!("pgbench {args:?} against settle serve failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Transactions and failures from pgbench's report.
fn parse_report(out: &str) -> Result<(u64, u64)> {
    let field = |prefix: &str| -> Option<u64> {
        let line = out.lines().find(|l| l.starts_with(prefix))?;
        line[prefix.len()..].split(['/', ' ']).find(|s| !s.is_empty())?.parse().ok()
    };
    let done =
        field("number of transactions actually processed: ").context("no transaction count in pgbench output")?;
    Ok((done, field("number of failed transactions: ").unwrap_or(0)))
}

pub fn run(a: WireArgs) -> Result<ExitCode> {
    anyhow::ensure!(
        a.scale >= 1 && a.clients >= 1 && a.slices >= 1 && a.slice_seconds >= 1,
        "arguments must be positive"
    );
    let bin = pgbench_bin()?;
    let config = crate::config_from(&a.set)?;
    let settings: Vec<(String, String)> = a
        .set
        .iter()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
        .collect();
    let scale = a.scale.to_string();
    eprintln!("settle serve: pgbench -i -s {scale} ...");
    // Room for the idle-connections run, as PostgreSQL gets below.
    let server = InProcess::start(config, (a.idle_connections as usize + 20).max(100))?;
    pgbench_settle(&bin, server.port, &["-i", "-q", "-s", &scale])?;
    let peer = if a.peer {
        eprintln!("PostgreSQL 15: pgbench -i -s {scale} ...");
        // Room for the idle-connections run (PostgreSQL's default is 100).
        let mut pg_settings = settings.clone();
        if !pg_settings.iter().any(|(k, _)| k == "max_connections") {
            pg_settings.push(("max_connections".into(), (a.idle_connections + 20).max(100).to_string()));
        }
        let pg = crate::peer::Postgres::start(a.peer_port, &pg_settings)?;
        pg.pgbench(&["-i", "-q", "-s", &scale])?;
        Some(pg)
    } else {
        None
    };
    let c = a.clients.to_string();
    let t = a.slice_seconds.to_string();
    let workloads: [(&'static str, bool); 2] = [("tpcb-like", false), ("select-only", true)];
    let mut totals = [[Totals::default(); 2]; 2]; // [engine][workload]
    let ticks = crate::procstat::clock_ticks();
    let postmaster = match &peer {
        Some(pg) => Some(crate::procstat::postmaster_pid(&pg.data_dir())?),
        None => None,
    };
    let server_cpu = |e: usize| match (e, postmaster) {
        (0, _) => crate::procstat::self_cpu(ticks),
        (_, Some(pm)) => crate::procstat::server_cpu(pm, ticks),
        (_, None) => 0.0,
    };
    for slice in 0..a.slices {
        for (w, (name, select_only)) in workloads.iter().enumerate() {
            let mut args = vec!["-n", "-M", "prepared", "-c", &c, "-j", &c, "-T", &t];
            if *select_only {
                args.push("-S");
            }
            // Alternate which engine goes first, so neither always runs on a warmer machine.
            let order: Vec<usize> = if slice % 2 == 0 { vec![0, 1] } else { vec![1, 0] };
            for e in order {
                let children = postmaster.map(crate::procstat::server_children);
                let cpu0 = server_cpu(e);
                let out = match (e, &peer) {
                    (0, _) => pgbench_settle(&bin, server.port, &args)?,
                    (_, Some(pg)) => pg.pgbench(&args)?.0,
                    (_, None) => continue,
                };
                if let (1, Some(pm), Some(n)) = (e, postmaster, children) {
                    // The run's backends count once the postmaster has reaped them.
                    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
                    while crate::procstat::server_children(pm) > n && std::time::Instant::now() < until {
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                }
                let cpu = server_cpu(e) - cpu0;
                let (done, failed) = parse_report(&out)?;
                let tot = &mut totals[e][w];
                tot.server_cpu += cpu;
                tot.transactions += done;
                tot.failed += failed;
                tot.seconds += f64::from(a.slice_seconds);
                eprintln!(
                    "slice {}/{}: {name} on {}: {done} transactions",
                    slice + 1,
                    a.slices,
                    ["settle serve", "PostgreSQL 15"][e]
                );
            }
        }
    }
    let mut rows = Vec::new();
    for (e, engine) in ["settle serve", "PostgreSQL 15"].into_iter().enumerate() {
        if e == 1 && peer.is_none() {
            continue;
        }
        for (w, (workload, _)) in workloads.iter().enumerate() {
            let t = totals[e][w];
            rows.push(Row {
                engine,
                workload,
                tps: t.tps(),
                transactions: t.transactions,
                seconds: t.seconds,
                failed: t.failed,
                server_cpu_us_per_txn: t.cpu_us_per_txn(),
            });
        }
    }
    let mut idle = Vec::new();
    if a.idle_connections > 0 {
        let (n, secs) = (a.idle_connections, a.idle_seconds);
        eprintln!("settle serve: {n} connections held for {secs} s ...");
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", server.port);
        idle.push(idle_run("settle serve", &url, n, secs, &|| crate::procstat::pss_kb("self").unwrap_or(0)));
        if let (Some(pg), Some(pm)) = (&peer, postmaster) {
            eprintln!("PostgreSQL 15: {n} connections held for {secs} s ...");
            idle.push(idle_run("PostgreSQL 15", &pg.url(), n, secs, &|| crate::procstat::server_pss_kb(pm)));
        }
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "scale": a.scale, "clients": a.clients, "mode": "prepared", "slices": a.slices,
                "slice_seconds": a.slice_seconds, "rows": rows, "idle_connections": idle,
            }))?
        );
    } else {
        println!(
            "pgbench -M prepared -c {c} -j {c}, scale {}, {} slices of {t} s per engine and workload (alternating)",
            a.scale, a.slices
        );
        println!(
            "{:<16} {:<12} {:>10} {:>14} {:>8} {:>18}",
            "engine", "workload", "tps", "transactions", "failed", "server CPU us/txn"
        );
        for r in &rows {
            println!(
                "{:<16} {:<12} {:>10.1} {:>14} {:>8} {:>18.1}",
                r.engine, r.workload, r.tps, r.transactions, r.failed, r.server_cpu_us_per_txn
            );
        }
        if peer.is_some() {
            for (w, (workload, _)) in workloads.iter().enumerate() {
                let (s, p) = (&totals[0][w], &totals[1][w]);
                if p.tps() > 0.0 && s.cpu_us_per_txn() > 0.0 {
                    println!(
                        "{workload}: settle serve / PostgreSQL 15 = {:.2}x tps (target >= 1.5x: {}); server CPU per \
                         transaction {:.2}x PostgreSQL's",
                        s.tps() / p.tps(),
                        if s.tps() / p.tps() >= 1.5 { "met" } else { "MISSED" },
                        s.cpu_us_per_txn() / p.cpu_us_per_txn()
                    );
                }
            }
        }
        for f in &idle {
            println!(
                "{}: {} connections held {} s, {} queries, {} errors; server memory (Pss) {} kB -> {} kB, {:.0} kB per connection",
                f.engine, f.connections, f.seconds, f.queries, f.errors, f.pss_before_kb, f.pss_open_kb, f.kb_per_connection
            );
        }
    }
    drop(peer);
    drop(server);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_pgbench_report() {
        let out = "number of transactions actually processed: 1234/1234\nnumber of failed transactions: 2 (0.1%)\n";
        assert_eq!(super::parse_report(out).unwrap(), (1234, 2));
        let out = "number of transactions actually processed: 99\n";
        assert_eq!(super::parse_report(out).unwrap(), (99, 0));
    }
}
