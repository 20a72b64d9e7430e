//! `settle pgbench`: pgbench's command line over [`workload::pgbench`], on the embedded engine
//! (`--dir DIR`) or on a PostgreSQL server (`--target postgres://…`).
//!
//! `-i -s S` initializes (drop, create, generate, vacuum, primary keys, like `pgbench -i`);
//! otherwise it runs `-c` clients for `-T` seconds or `-t` transactions each (10 when neither
//! is given, as pgbench) of the built-in script chosen by `-b` (`tpcb-like`, `select-only`,
//! `append-only`) or `-S`, and prints pgbench's report: transaction type, scaling factor, query
//! mode, clients, threads, duration or transactions per client, transactions processed,
//! latency average, initial connection time and tps without it. The scale comes from the
//! tables, as pgbench reads it from pgbench_branches. Differences from pgbench: each client
//! is its own thread (`-j` is accepted and reported as the client count), no VACUUM or history
//! truncation precedes a run (pgbench `-n`), and a serialization failure or deadlock is
//! retried rather than counted as failed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use settledb::Database;
use workload::pgbench::{self, PgbenchTarget, Report, RunConfig, Script};

#[derive(Args)]
pub struct PgbenchArgs {
    /// Initialize the tables (drop, create, generate, vacuum, primary keys) and exit.
    #[arg(short = 'i', long = "initialize")]
    init: bool,
    /// Scale factor for -i: 100,000 accounts per unit.
    #[arg(short = 's', long = "scale", default_value_t = 1)]
    scale: u32,
    /// Concurrent clients.
    #[arg(short = 'c', long = "client", default_value_t = 1)]
    clients: usize,
    /// Threads (accepted for pgbench compatibility; every client is its own thread).
    #[arg(short = 'j', long = "jobs", default_value_t = 1)]
    jobs: usize,
    /// Run for this many seconds.
    #[arg(short = 'T', long = "time")]
    time: Option<u64>,
    /// Transactions per client (10 when neither -t nor -T is given).
    #[arg(short = 't', long = "transactions")]
    transactions: Option<u64>,
    /// The select-only script (same as -b select-only).
    #[arg(short = 'S', long = "select-only")]
    select_only: bool,
    /// Built-in script: tpcb-like, select-only or append-only.
    #[arg(short = 'b', long = "builtin")]
    builtin: Option<String>,
    /// The embedded engine's data directory (created if missing).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// A PostgreSQL server instead, by URL (postgres://user@host:port/db).
    #[arg(long)]
    target: Option<String>,
    /// Seed of the clients' random inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Configuration parameters of the embedded engine, `name=value`.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
}

impl PgbenchArgs {
    fn script(&self) -> Result<Script> {
        let chosen = self.builtin.as_deref().map(str::parse::<Script>).transpose().map_err(anyhow::Error::msg)?;
        match (chosen, self.select_only) {
            (Some(s), true) if s != Script::SelectOnly => bail!("-S and -b {} contradict each other", s.name()),
            (_, true) => Ok(Script::SelectOnly),
            (Some(s), false) => Ok(s),
            (None, false) => Ok(Script::TpcbLike),
        }
    }

    fn run_config(&self) -> Result<RunConfig> {
        if self.clients == 0 || self.jobs == 0 {
            bail!("-c and -j must be at least 1");
        }
        let transactions = match (self.transactions, self.time) {
            (Some(_), Some(_)) => bail!("specify either a number of transactions (-t) or a duration (-T), not both"),
            (None, None) => Some(10),
            (t, _) => t,
        };
        Ok(RunConfig {
            clients: self.clients,
            transactions_per_client: transactions,
            duration: self.time.map(Duration::from_secs),
            script: self.script()?,
            seed: self.seed,
        })
    }
}

pub fn run(a: PgbenchArgs) -> Result<ExitCode> {
    // The flags are checked before anything is opened or connected to.
    let cfg = if a.init { None } else { Some(a.run_config()?) };
    match (&a.target, &a.dir) {
        (Some(_), Some(_)) => bail!("give --dir DIR (embedded) or --target URL (PostgreSQL), not both"),
        (Some(url), None) => run_on(&pgbench::PgTarget::new(url), &a, cfg),
        (None, Some(dir)) => {
            if !a.init {
                // A run needs tables; only -i may create the data directory.
                crate::require_data_dir(dir)?;
            }
            let db = Database::open(dir, crate::config_from(&a.set)?)?;
            let r = run_on(&pgbench::Embedded::new(&db), &a, cfg);
            db.close()?;
            r
        }
        (None, None) => bail!("give --dir DIR (the embedded engine) or --target URL (PostgreSQL)"),
    }
}

/// Initializes (`cfg` None) or runs `cfg`.
fn run_on<T: PgbenchTarget>(target: &T, a: &PgbenchArgs, cfg: Option<RunConfig>) -> Result<ExitCode> {
    let Some(cfg) = cfg else {
        let start = Instant::now();
        target.init(a.scale)?;
        let secs = start.elapsed().as_secs_f64();
        if a.json {
            println!("{}", serde_json::json!({ "initialized": true, "scale": a.scale, "seconds": secs }));
        } else {
            eprintln!("done in {secs:.2} s (drop tables, create tables, client-side generate, vacuum, primary keys).");
        }
        return Ok(ExitCode::SUCCESS);
    };
    let report = pgbench::run(target, &cfg)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// pgbench's report.
fn render(r: &Report) -> String {
    let label = r.script.parse::<Script>().map(Script::label).unwrap_or(r.script);
    let mut out = format!(
        "transaction type: {label}\nscaling factor: {}\nquery mode: {}\nnumber of clients: {}\nnumber of threads: {}\n",
        r.scale, r.query_mode, r.clients, r.clients
    );
    match (r.transactions_per_client, r.duration_s) {
        (Some(t), _) => {
            out.push_str(&format!("number of transactions per client: {t}\n"));
            let expected = t * r.clients as u64;
            out.push_str(&format!("number of transactions actually processed: {}/{expected}\n", r.transactions));
        }
        (None, d) => {
            out.push_str(&format!("duration: {} s\n", d.unwrap_or(r.seconds).round()));
            out.push_str(&format!("number of transactions actually processed: {}\n", r.transactions));
        }
    }
    let pct = if r.transactions > 0 { 100.0 * r.retries as f64 / r.transactions as f64 } else { 0.0 };
    out.push_str(&format!("number of transactions retried: {} ({pct:.3}%)\n", r.retries));
    out.push_str(&format!("latency average = {:.3} ms\n", r.latency_avg_ms));
    out.push_str(&format!("initial connection time = {:.3} ms\n", r.initial_connection_ms));
    out.push_str(&format!("tps = {:.6} (without initial connection time)\n", r.tps));
    out
}
