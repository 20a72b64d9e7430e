//! A throwaway PostgreSQL 15 to run the same work side by side.
//!
//! [`Postgres::start`] creates a cluster in a fresh temporary directory with `initdb`, starts it
//! listening only on 127.0.0.1 (and a Unix socket in that directory) at the given port, and
//! [`Drop`] stops it and removes the directory. [`Postgres::start_in`] does the same in a named
//! directory, and [`Postgres::keep`] leaves the server running past this process (`settle peer
//! start`); [`Postgres::attach`] and [`Postgres::stop`] find and stop it later. When this
//! process runs as root, PostgreSQL's programs run as the `postgres` user through `runuser`,
//! since PostgreSQL refuses to run as root. Installing it: `apt-get install postgresql-15`
//! (Debian), which also ships pgbench.
//!
//! Every cluster started here logs the way [`workload::observe::PgObserver`] reads it: the
//! logging collector on (files under `data/log/`, readable with `pg_read_file`), one line prefix
//! `%m [%p] ` (a timestamp starts each entry), untranslated messages (`lc_messages = C`), and
//! every autovacuum logged (`log_autovacuum_min_duration = 0`), so anti-wraparound vacuums can
//! be counted. These go into `postgresql.conf` before the caller's settings, which override
//! them.

pub mod command;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, Context, Result};

pub struct Postgres {
    bindir: PathBuf,
    dir: PathBuf,
    pub port: u16,
    as_postgres: bool,
    /// Leave the server running and its directory in place when dropped.
    kept: bool,
}

/// What every cluster started here sets before the caller's settings (see the module doc).
const LOGGING: [(&str, &str); 5] = [
    ("logging_collector", "on"),
    ("log_destination", "stderr"),
    ("log_autovacuum_min_duration", "0"),
    ("log_line_prefix", "%m [%p] "),
    ("lc_messages", "C"),
];

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
        let dir = std::env::temp_dir().join(format!("settle-peer-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Postgres::start_in(&dir, port, settings, initdb_args)
    }

    /// Creates a cluster under `dir` (which must not exist yet, or be empty) and starts it.
    pub fn start_in(dir: &Path, port: u16, settings: &[(String, String)], initdb_args: &[&str]) -> Result<Postgres> {
        let bindir = find_bindir().context("PostgreSQL 15 is not installed (apt-get install postgresql-15)")?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let as_postgres = is_root();
        let pg = Postgres { bindir, dir: dir.to_path_buf(), port, as_postgres, kept: false };
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
        pg.write_settings(settings)?;
        let opts =
            format!("-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={}", pg.dir.display());
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

    /// Appends the logging settings, then the caller's, to `postgresql.conf` (quoted, so values
    /// may hold spaces; a later line overrides an earlier one).
    fn write_settings(&self, settings: &[(String, String)]) -> Result<()> {
        use std::io::Write;
        let path = self.data_dir().join("postgresql.conf");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        let mut text = String::from("\n# settle peer\n");
        let ours = LOGGING.iter().map(|&(k, v)| (k, v));
        for (k, v) in ours.chain(settings.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
            text.push_str(&format!("{k} = '{}'\n", v.replace('\'', "''")));
        }
        f.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))
    }

    /// A server started earlier under `dir` (by `settle peer start`), to stop it.
    pub fn attach(dir: &Path, port: u16) -> Result<Postgres> {
        let bindir = find_bindir().context("PostgreSQL 15 is not installed (apt-get install postgresql-15)")?;
        if !dir.join("data").join("PG_VERSION").exists() {
            bail!("no PostgreSQL cluster under {} (was it started with settle peer start?)", dir.display());
        }
        Ok(Postgres { bindir, dir: dir.to_path_buf(), port, as_postgres: is_root(), kept: false })
    }

    /// Leaves the server running and its directory in place after this handle is gone.
    pub fn keep(mut self) -> PathBuf {
        self.kept = true;
        self.dir.clone()
    }

    /// Stops the server (fast shutdown) and removes its directory.
    pub fn stop(mut self) -> Result<()> {
        self.kept = true;
        let data = self.data_dir();
        let out = self.run("pg_ctl", &["-D", &data.to_string_lossy(), "-m", "fast", "-w", "stop"])?;
        if !out.status.success() {
            bail!("pg_ctl stop failed for {}: {}", data.display(), String::from_utf8_lossy(&out.stderr).trim());
        }
        std::fs::remove_dir_all(&self.dir).with_context(|| format!("removing {}", self.dir.display()))
    }

    /// The connection URL of the `postgres` database as the `postgres` user.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn data_dir(&self) -> PathBuf {
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

    /// A command running one of PostgreSQL's programs (as `postgres` when we are root), with
    /// `env` set for it, to be spawned by the caller (`settle bench decode` samples what it
    /// starts). Files it writes must be in a directory `postgres` may write, e.g. [`Self::dir`].
    pub fn command(&self, program: &str, env: &[(&str, &str)]) -> Command {
        let path = self.bindir.join(program);
        let c = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "env"]);
            c.args(env.iter().map(|(k, v)| format!("{k}={v}")));
            c.arg(&path);
            c
        } else {
            let mut c = Command::new(&path);
            c.envs(env.iter().copied());
            c
        };
        c
    }

    /// The server's directory (its data directory is `data/` inside); owned by the server's user.
    pub fn dir(&self) -> &Path {
        &self.dir
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
        if self.kept {
            return;
        }
        let data = self.data_dir();
        let _ = self.run("pg_ctl", &["-D", &data.to_string_lossy(), "-m", "fast", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
