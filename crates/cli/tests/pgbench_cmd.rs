//! `settle pgbench` on the embedded engine: `-i` builds pgbench's tables, a `-t` run processes
//! exactly clients × transactions and reports them in pgbench's words, the database it leaves
//! keeps pgbench's balance invariant, and contradictory flags are refused with a message.

mod common;

use common::settle;
use settledb::{Config, Database};
use workload::pgbench::{Embedded, PgbenchTarget};

#[test]
fn pgbench_initializes_runs_and_reports_like_pgbench() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    let d = dir.to_str().expect("utf-8 path");
    let (ok, _, err) = settle(&["pgbench", "--dir", d, "-i", "-s", "1", "--set", "autovacuum=off"]);
    assert!(ok, "pgbench -i failed: {err}");
    assert!(err.contains("done in"), "{err}");

    let (ok, out, err) = settle(&["pgbench", "--dir", d, "-c", "2", "-j", "2", "-t", "20", "--seed", "5"]);
    assert!(ok, "pgbench run failed: {err}");
    for line in [
        "transaction type: <builtin: TPC-B (sort of)>",
        "scaling factor: 1",
        "query mode: embedded",
        "number of clients: 2",
        "number of threads: 2",
        "number of transactions per client: 20",
        "number of transactions actually processed: 40/40",
    ] {
        assert!(out.lines().any(|l| l == line), "missing {line:?} in:\n{out}");
    }
    assert!(out.lines().any(|l| l.starts_with("tps = ") && l.ends_with(" (without initial connection time)")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("latency average = ") && l.ends_with(" ms")), "{out}");

    let (ok, out, err) = settle(&["pgbench", "--dir", d, "-S", "-c", "1", "-t", "7", "--json"]);
    assert!(ok, "select-only failed: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json report");
    assert_eq!(v["script"], "select-only");
    assert_eq!(v["transactions"], 7);

    // The database the runs left: 40 history rows whose deltas the balances match.
    let db = Database::open(&dir, Config::default()).expect("open");
    let target = Embedded::new(&db);
    assert_eq!(target.scale().expect("scale"), 1);
    target.check_balances().expect("balances");
    let history = db.table("pgbench_history").expect("history");
    let mut tx = db.begin().expect("begin");
    assert_eq!(tx.scan(&history).expect("scan").count(), 40);
    tx.commit().expect("commit");
    db.close().expect("close");
}

#[test]
fn pgbench_refuses_contradictory_flags() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path().join("db");
    let d = d.to_str().expect("utf-8 path");
    let cases: [(&[&str], &str); 6] = [
        (&["pgbench", "-t", "5"], "--dir"),
        (&["pgbench", "--dir", d, "-t", "5"], "not a settledb data directory"),
        (&["pgbench", "--dir", d, "--target", "postgres://x@127.0.0.1:1/x", "-t", "1"], "not both"),
        (&["pgbench", "--dir", d, "-t", "5", "-T", "5"], "not both"),
        (&["pgbench", "--dir", d, "-S", "-b", "append-only"], "contradict"),
        (&["pgbench", "--dir", d, "-b", "simple-update"], "unknown script"),
    ];
    for (args, want) in cases {
        let (ok, _, err) = settle(args);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err}");
    }
}
