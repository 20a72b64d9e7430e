//! `settle tpcc --target` against `settle serve`, exactly as against PostgreSQL: the driver
//! creates and loads BenchmarkSQL's tables over the wire, applies the aging profile with
//! `ALTER TABLE ... SET` and `ALTER SYSTEM` plus `pg_reload_conf()`, and its observer follows
//! the server log (`pg_read_binary_file(pg_current_logfile())`), `pg_stat_activity` and
//! `txid_current_snapshot()`. The report's "postgres" column then carries the server's
//! figures, and TPC-C's consistency conditions hold on it. Needs no PostgreSQL installation.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn tpcc_target_runs_against_settle_serve() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let child = Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["serve", "--trust", "--port", &port, "--set", "fsync=off", "--dir"])
        .arg(dir.path().join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start settle serve");
    let _serve = Serve(child);
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let deadline = Instant::now() + Duration::from_secs(60);
    while postgres::Client::connect(&url, postgres::NoTls).is_err() {
        assert!(Instant::now() < deadline, "settle serve did not come up on port {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["tpcc", "--warehouses", "1", "--terminals", "2", "--transactions", "400", "--rate", "400"])
        .args(["--policy", "eager", "--quiet", "--json", "--target", &url, "--dir"])
        .arg(dir.path().join("runs"))
        .output()
        .expect("run settle tpcc");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    let columns = r["columns"].as_array().unwrap();
    let names: Vec<&str> = columns.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["eager", "postgres"]);
    let pg = &columns[1];
    assert_eq!(pg["run"]["transactions"], 400);
    assert!(pg["consistency_violations"].as_array().unwrap().is_empty(), "{}", pg["consistency_violations"]);
    assert!(pg["xids_consumed"].as_u64().unwrap() > 300, "{}", pg["xids_consumed"]);
    assert!(pg["db"]["xact_commit"].as_u64().unwrap() >= 390, "{}", pg["db"]);
    let tables = pg["tables"].as_array().unwrap();
    assert!(tables.iter().any(|t| t["name"] == "bmsql_order_line"), "{tables:?}");
    // The aging profile reached the server through ALTER SYSTEM and a reload.
    let auto = std::fs::read_to_string(dir.path().join("data/postgresql.auto.conf")).unwrap();
    assert!(auto.contains("vacuum_freeze_min_age = '25000'"), "{auto}");
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let naptime: String = c.query_one("show autovacuum_naptime", &[]).unwrap().get(0);
    assert_eq!(naptime, "1s");
}
