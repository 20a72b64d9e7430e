//! `settle peer start|stop`: a PostgreSQL 15 that outlives the command, for running the same
//! workloads against it by URL (`settle tpcc --target URL`, `settle pgbench --target URL`).
//!
//! `start` creates a cluster under `--dir` (default `$TMPDIR/settle-peer-PORT`, which must be
//! new or empty: stopping removes it) with the logging [`crate::peer`] always sets plus any
//! `--set NAME=VALUE`, starts it on 127.0.0.1:PORT and prints its URL and the command that
//! stops it. `stop --port P` stops the server that `start --port P` left (fast shutdown) and
//! removes its directory.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Subcommand;

use crate::peer::Postgres;

#[derive(Subcommand)]
pub enum PeerCmd {
    /// Start a PostgreSQL 15 that keeps running after this command; prints its URL.
    Start {
        #[arg(long, default_value_t = 54330)]
        port: u16,
        /// Server settings, `name=value` (written to postgresql.conf).
        #[arg(long = "set", value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// Where the cluster lives (default: $TMPDIR/settle-peer-PORT).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Stop the server `settle peer start` left on PORT and remove its directory.
    Stop {
        #[arg(long)]
        port: u16,
        /// The directory given to `start --dir`, if any.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn default_dir(port: u16) -> PathBuf {
    std::env::temp_dir().join(format!("settle-peer-{port}"))
}

/// Parses `name=value` pairs.
pub fn parse_settings(set: &[String]) -> Result<Vec<(String, String)>> {
    set.iter()
        .map(|kv| {
            let (k, v) = kv.split_once('=').with_context(|| format!("--set takes NAME=VALUE, got {kv:?}"))?;
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

pub fn run(cmd: PeerCmd) -> Result<ExitCode> {
    match cmd {
        PeerCmd::Start { port, set, dir } => {
            let dir = dir.unwrap_or_else(|| default_dir(port));
            if dir.join("data").exists() {
                bail!(
                    "{} already holds a cluster; stop it first with: settle peer stop --port {port}{}",
                    dir.display(),
                    dir_flag(&dir, port)
                );
            }
            // The directory is the server's alone: stop (or a failed start) removes all of it.
            if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
                bail!("{} is not empty; give a new or empty directory (--dir)", dir.display());
            }
            let pg = Postgres::start_in(&dir, port, &parse_settings(&set)?, &[])?;
            let url = pg.url();
            let data = pg.data_dir();
            pg.keep();
            println!("PostgreSQL 15 running at {url}");
            println!("data directory: {} (server log under {}/log)", data.display(), data.display());
            println!("stop it with: settle peer stop --port {port}{}", dir_flag(&dir, port));
        }
        PeerCmd::Stop { port, dir } => {
            let dir = dir.unwrap_or_else(|| default_dir(port));
            Postgres::attach(&dir, port)?.stop()?;
            println!("stopped the server on port {port} and removed {}", dir.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// ` --dir DIR` when `dir` is not the default for `port`.
fn dir_flag(dir: &std::path::Path, port: u16) -> String {
    if dir == default_dir(port) {
        String::new()
    } else {
        format!(" --dir {}", dir.display())
    }
}
