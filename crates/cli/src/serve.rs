//! `settle serve --dir DIR [--port P] [--listen ADDR] [--password-file F] [--trust] [--set
//! NAME=VALUE]...`: serves a data directory over PostgreSQL's wire protocol (see the
//! `settledb-server` crate and docs/server.md), so that `psql`, `pgbench` and drivers connect.
//!
//! The directory is created when it does not exist. The server listens on 127.0.0.1:5432 by
//! default and writes its log in PostgreSQL's format to stderr and `DIR/log/settledb.log`.
//! SIGINT or SIGTERM stops it: sessions are ended (open transactions roll back) and the
//! database is closed with a shutdown checkpoint, so the next start needs no recovery.
//!
//! Authentication is SCRAM-SHA-256 against the login role's stored password (the password
//! never crosses the connection, and the server keeps only its verifier), as a PostgreSQL
//! cluster initialized with `initdb -A scram-sha-256` does. Roles live in `DIR/server_roles`;
//! `CREATE ROLE`, `ALTER ROLE` (psql's `\password`) and `DROP ROLE` change them. The
//! bootstrap superuser is `postgres`:
//!
//! * `--password-file F`: F's first line becomes `postgres`'s password when it has none (at
//!   initialization, like `initdb --pwfile`; it is stored, so later starts need not repeat
//!   it); when it has one, the file must hold it.
//! * `--trust`: every connection is accepted without a password, whatever the address.
//! * Neither, and no role has a password: the server refuses to start, naming both options.
//!
//! TLS: with `--ssl-cert-file F --ssl-key-file K` (PEM, PostgreSQL's `ssl_cert_file` and
//! `ssl_key_file`) a client that asks for TLS (`sslmode=require`, or libpq's default `prefer`)
//! gets it; one that does not stays in plain text.
//!
//! `--set max_connections=N` (default 100) and `--set superuser_reserved_connections=R`
//! (default 3, less than N) are the server's, not the engine's: connection N + 1 is refused
//! with FATAL 53300 `sorry, too many clients already`, and once N - R connections are in, a
//! role that is not a superuser gets FATAL 53300 `remaining connection slots are reserved for
//! non-replication superuser connections` after it authenticates.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use settledb_server::{ServeError, ServeOptions, Server};

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
    /// A file whose first line becomes role postgres's password (stored as a SCRAM-SHA-256
    /// verifier, once: later starts need not give it again).
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
    /// Accept every connection without a password.
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
    // The connection limits belong to the server; every other parameter to the engine.
    let server_param = |kv: &String| {
        kv.split_once('=')
            .is_some_and(|(k, _)| matches!(k.trim(), "max_connections" | "superuser_reserved_connections"))
    };
    let (limits, engine): (Vec<String>, Vec<String>) = a.set.iter().cloned().partition(server_param);
    let config = crate::config_from(&engine)?;
    let command_line = engine
        .iter()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
        .collect();
    let (mut max_connections, mut superuser_reserved_connections) = (100, 3);
    for kv in &limits {
        let (k, v) = kv.split_once('=').map_or(("", ""), |(k, v)| (k.trim(), v.trim()));
        let (slot, min) = match k {
            "max_connections" => (&mut max_connections, 1),
            _ => (&mut superuser_reserved_connections, 0),
        };
        *slot = match v.parse::<usize>() {
            Ok(n) if (min..=262_143).contains(&n) => n,
            _ => bail!("{k} must be an integer from {min} to 262143, got {v:?}"),
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
    let opts = ServeOptions {
        dir: a.dir,
        listen: if a.listen == "localhost" { "127.0.0.1".into() } else { a.listen },
        port: a.port,
        config,
        command_line,
        password,
        trust: a.trust,
        log_to_stderr: true,
        max_connections,
        superuser_reserved_connections,
        tls_files: a.ssl_cert_file.zip(a.ssl_key_file),
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let dir = opts.dir.clone();
    rt.block_on(async move {
        let server = Server::bind(opts).await?;
        server.run(settledb_server::shutdown_signal()).await
    })
    .map_err(|e| match e {
        ServeError::NoPassword { .. } => anyhow::anyhow!(
            "no role of {} has a password, so no client could log in: give --password-file FILE (its first line \
             becomes role \"postgres\"'s password; it is stored, so give it once), or --trust to accept every \
             connection without a password",
            dir.display()
        ),
        e => e.into(),
    })?;
    Ok(ExitCode::SUCCESS)
}
