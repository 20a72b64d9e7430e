//! Helpers shared by the integration tests that include this module.

#![allow(dead_code)] // each test binary uses some of these

use std::path::Path;
use std::process::Command;

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
