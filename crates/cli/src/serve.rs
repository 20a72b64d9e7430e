//! `settle serve --dir DIR [--port P] [--listen ADDR] [--password-file F | --trust] [--set
//! NAME=VALUE]...`: serves a data directory over PostgreSQL's wire protocol (see the
//! `settledb-server` crate and docs/server.md), so that `psql`, `pgbench` and drivers connect.
//!
//! The directory is created when it does not exist. The server listens on 127.0.0.1:5432 by
//! default and writes its log in PostgreSQL's format to stderr and `DIR/log/settledb.log`.
//! SIGINT or SIGTERM stops it: sessions are ended (open transactions roll back) and the
//! database is closed with a shutdown checkpoint, so the next start needs no recovery.
//!
//! Authentication: without `--password-file` the server trusts every connection, and then
//! refuses to listen on anything but a loopback address unless `--trust` says so. With it,
//! every client must prove it knows the file's first line by SCRAM-SHA-256 (the password never
//! crosses the connection).
//!
//! TLS: with `--ssl-cert-file F --ssl-key-file K` (PEM, PostgreSQL's `ssl_cert_file` and
//! `ssl_key_file`) a client that asks for TLS (`sslmode=require`, or libpq's default `prefer`)
//! gets it; one that does not stays in plain text.
//!
//! `--set max_connections=N` (default 100) is the server's, not the engine's: connection
//! N + 1 is refused with FATAL 53300 `sorry, too many clients already`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use settledb_server::{ServeOptions, Server};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The data directory (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// TCP port.
    #[arg(long, default_value_t = 5432)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    listen: String,
    /// A file whose first line is the password every client must prove by SCRAM-SHA-256.
    #[arg(long, value_name = "FILE", conflicts_with = "trust")]
    password_file: Option<PathBuf>,
    /// Accept every connection without a password, even on a non-loopback address.
    #[arg(long)]
    trust: bool,
    /// Configuration parameters, `name=value` (PostgreSQL names and units).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// The server's certificate chain (PEM): TLS for clients that ask for it.
    #[arg(long, value_name = "FILE", requires = "ssl_key_file")]
    ssl_cert_file: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "ssl_cert_file")]
    ssl_key_file: Option<PathBuf>,
}

pub fn run(a: ServeArgs) -> Result<ExitCode> {
    // max_connections belongs to the server; every other parameter to the engine.
    let (limit, engine): (Vec<String>, Vec<String>) =
        a.set.iter().cloned().partition(|kv| kv.split_once('=').is_some_and(|(k, _)| k.trim() == "max_connections"));
    let config = crate::config_from(&engine)?;
    let command_line = engine
        .iter()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
        .collect();
    let mut max_connections = 100;
    for kv in &limit {
        let v = kv.split_once('=').map_or("", |(_, v)| v.trim());
        max_connections = match v.parse::<usize>() {
            Ok(n) if (1..=262_143).contains(&n) => n,
            _ => bail!("max_connections must be an integer from 1 to 262143, got {v:?}"),
        };
    }
    let password = match &a.password_file {
        Some(p) => {
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let pw = text.lines().next().unwrap_or("").to_string();
            if pw.is_empty() {
                bail!("{} holds no password on its first line", p.display());
            }
            Some(pw)
        }
        None => None,
    };
    let loopback = a.listen.parse::<std::net::IpAddr>().map(|ip| ip.is_loopback()).unwrap_or(a.listen == "localhost");
    if password.is_none() && !loopback && !a.trust {
        bail!(
            "refusing to accept connections on {} without a password: give --password-file FILE, or --trust",
            a.listen
        );
    }
    let opts = ServeOptions {
        dir: a.dir,
        listen: if a.listen == "localhost" { "127.0.0.1".into() } else { a.listen },
        port: a.port,
        config,
        command_line,
        password,
        log_to_stderr: true,
        max_connections,
        tls_files: a.ssl_cert_file.zip(a.ssl_key_file),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let server = Server::bind(opts).await?;
        server.run(settledb_server::shutdown_signal()).await
    })?;
    Ok(ExitCode::SUCCESS)
}
