//! A throwaway PostgreSQL 15 to run the same work side by side.
//!
//! [`Postgres::start`] creates a cluster in a fresh temporary directory with `initdb`, starts it
//! listening only on 127.0.0.1 (and a Unix socket in that directory) at the given port, and
//! [`Drop`] stops it and removes the directory. When this process runs as root, PostgreSQL's
//! programs run as the `postgres` user through `runuser`, since PostgreSQL refuses to run as
//! root. Installing it: `apt-get install postgresql-15` (Debian), which also ships pgbench.

use std::path::PathBuf;
use std::process::{Command, Output};

use anyhow::{bail, Context, Result};

pub struct Postgres {
    bindir: PathBuf,
    dir: PathBuf,
    pub port: u16,
    as_postgres: bool,
}

/// Where PostgreSQL 15's programs are, if installed.
pub fn find_bindir() -> Option<PathBuf> {
    let candidates = ["/usr/lib/postgresql/15/bin"];
    candidates.iter().map(PathBuf::from).find(|p| p.join("postgres").exists() && p.join("initdb").exists())
}

fn is_root() -> bool {
    std::env::var("USER").map(|u| u == "root").unwrap_or(false)
        || Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false)
}

impl Postgres {
    /// Starts a cluster with `settings` (`name=value`, as `postgres -c`).
    pub fn start(port: u16, settings: &[(String, String)]) -> Result<Postgres> {
        Postgres::start_with(port, settings, &[])
    }

    /// [`Postgres::start`], passing `initdb_args` to initdb as well (e.g. `--data-checksums`).
    pub fn start_with(port: u16, settings: &[(String, String)], initdb_args: &[&str]) -> Result<Postgres> {
        let bindir = find_bindir().context("PostgreSQL 15 is not installed (apt-get install postgresql-15)")?;
        let dir = std::env::temp_dir().join(format!("settle-peer-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let as_postgres = is_root();
        let pg = Postgres { bindir, dir, port, as_postgres };
        if as_postgres {
            let st = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&pg.dir).status()?;
            if !st.success() {
                bail!("could not chown {} to postgres", pg.dir.display());
            }
        }
        let data = pg.data_dir();
        let data_arg = data.to_string_lossy();
        let mut args = vec!["-D", &data_arg, "-A", "trust", "-U", "postgres", "--no-sync"];
        args.extend_from_slice(initdb_args);
        let out = pg.run("initdb", &args)?;
        if !out.status.success() {
            bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let mut opts =
            format!("-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={}", pg.dir.display());
        for (k, v) in settings {
            opts.push_str(&format!(" -c {k}={v}"));
        }
        let log = pg.dir.join("server.log");
        let out = pg.run(
            "pg_ctl",
            &["-D", &data.to_string_lossy(), "-l", &log.to_string_lossy(), "-o", &opts, "-w", "start"],
        )?;
        if !out.status.success() {
            bail!(
                "pg_ctl start failed: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        Ok(pg)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Runs one of PostgreSQL's programs (as `postgres` when we are root).
    pub fn run(&self, program: &str, args: &[&str]) -> Result<Output> {
        let path = self.bindir.join(program);
        let out = if self.as_postgres {
            Command::new("runuser").args(["-u", "postgres", "--"]).arg(&path).args(args).output()
        } else {
            Command::new(&path).args(args).output()
        };
        out.with_context(|| format!("could not run {}", path.display()))
    }

    /// Runs a query with psql and returns its unaligned, tuples-only output.
    pub fn query(&self, sql: &str) -> Result<String> {
        let port = self.port.to_string();
        let out = self.run(
            "psql",
            &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-d", "postgres", "-X", "-A", "-t", "-c", sql],
        )?;
        if !out.status.success() {
            bail!("psql failed on {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Runs several commands in one psql session (one `-c` each, so backslash commands such as
    /// `\timing on` work), stopping at the first error; returns (stdout, stderr). Notices and
    /// INFO messages (VACUUM VERBOSE's report) arrive on stderr.
    pub fn psql(&self, commands: &[&str]) -> Result<(String, String)> {
        let port = self.port.to_string();
        let mut args = vec!["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-d", "postgres", "-X", "-A", "-t"];
        args.extend(["-v", "ON_ERROR_STOP=1"]);
        for c in commands {
            args.extend(["-c", c]);
        }
        let out = self.run("psql", &args)?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            bail!("psql failed on {commands:?}: {stderr}");
        }
        Ok((String::from_utf8_lossy(&out.stdout).into_owned(), stderr))
    }

    /// Runs pgbench with `args` against this server; returns (stdout, stderr).
    pub fn pgbench(&self, args: &[&str]) -> Result<(String, String)> {
        let port = self.port.to_string();
        let mut all = vec!["-h", "127.0.0.1", "-p", &port, "-U", "postgres"];
        all.extend_from_slice(args);
        all.push("postgres");
        let out = self.run("pgbench", &all)?;
        if !out.status.success() {
            bail!("pgbench failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok((String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned()))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data_dir();
        let _ = self.run("pg_ctl", &["-D", &data.to_string_lossy(), "-m", "fast", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
