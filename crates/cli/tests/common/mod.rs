//! Helpers shared by the integration tests that include this module.

#![allow(dead_code)] // each test binary uses some of these

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the `settle` binary; (success, stdout, stderr).
pub fn settle(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_settle")).args(args).output().expect("run settle");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub const PG15: &str = "/usr/lib/postgresql/15/bin/postgres";

/// Whether PostgreSQL 15 is here to test against; says why the test is skipped when not.
pub fn pg15_installed() -> bool {
    let here = Path::new(PG15).exists();
    if !here {
        eprintln!("skipped: PostgreSQL 15 is not installed ({PG15} is missing)");
    }
    here
}

/// A free loopback port (the OS picks one; there is a small window before the server binds
/// it, which is all a test needs).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// A server started by `settle peer start`, stopped by `settle peer stop` even when the test
/// fails.
pub struct Peer {
    pub port: String,
    dir: String,
}

impl Peer {
    pub fn start(dir: &Path, settings: &[&str]) -> (Peer, String) {
        let port = free_port().to_string();
        let dir = dir.to_string_lossy().into_owned();
        let mut args = vec!["peer", "start", "--port", &port, "--dir", &dir];
        for s in settings {
            args.extend(["--set", s]);
        }
        let (ok, out, err) = settle(&args);
        assert!(ok, "settle peer start failed: {err}");
        let url = out
            .lines()
            .find_map(|l| l.strip_prefix("PostgreSQL 15 running at "))
            .unwrap_or_else(|| panic!("no URL in {out}"))
            .to_string();
        assert!(out.contains(&format!("settle peer stop --port {port}")), "no stop command in {out}");
        (Peer { port, dir }, url)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let (ok, _, err) = settle(&["peer", "stop", "--port", &self.port, "--dir", &self.dir]);
        if !ok {
            eprintln!("settle peer stop failed: {err}");
        }
    }
}

/// PostgreSQL 15's psql.
pub const PSQL: &str = "/usr/lib/postgresql/15/bin/psql";

/// psql -At -c SQL on the loopback server at `port`: its output, or its error text.
pub fn psql(port: &str, sql: &str) -> Result<String, String> {
    let o = Command::new(PSQL)
        .args(["-X", "-At", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", "postgres", "-c", sql])
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .map_err(|e| e.to_string())?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

/// `settle serve` with `wal_level=logical` and trust, on `dir` and `port`, once it answers.
pub fn serve(dir: &Path, port: &str) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["serve", "--port", port, "--trust", "--set", "wal_level=logical", "--dir"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start settle serve");
    let deadline = Instant::now() + Duration::from_secs(60);
    while psql(port, "SELECT 1").is_err() {
        assert!(Instant::now() < deadline, "settle serve did not come up on port {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}
