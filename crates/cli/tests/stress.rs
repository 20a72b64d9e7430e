//! `settle stress` for a few seconds: transfers, readers checking the balance invariant in
//! every snapshot, VACUUM (plain, FREEZE, aggressive, parallel), autovacuum, checkpoints and CREATE/DROP
//! INDEX all ran at least once, side by side, with no violation, no error, and a clean check.

mod common;

use common::settle;

#[test]
fn stress_runs_every_activity_at_once_without_a_violation() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    let d = dir.to_str().expect("utf-8 path");
    let args =
        ["stress", "--dir", d, "--seconds", "4", "--threads", "4", "--seed", "7", "--json", "--set", "fsync=off"];
    let (ok, out, err) = settle(&args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("json report ({e}): {out}\n{err}"));
    assert!(ok, "settle stress failed:\n{out}\n{err}");
    assert_eq!(v["violations"], 0, "{out}");
    assert_eq!(v["errors"], 0, "{out}");
    assert_eq!(v["check_clean"], true, "{out}");
    for activity in [
        "transactions",
        "vacuums",
        "vacuums_freeze",
        "vacuums_aggressive",
        "vacuums_parallel",
        "autovacuums",
        "checkpoints",
        "index_builds",
        "index_drops",
        "invariant_checks_seqscan",
        "invariant_checks_index",
    ] {
        assert!(v[activity].as_u64().is_some_and(|n| n > 0), "{activity} never happened:\n{out}");
    }
}

/// `settle stress --ddl-churn` for a few seconds: CREATE/DROP INDEX, ALTER TABLE SET and
/// VACUUM against row-locking writers; deadlocks and lock timeouts are retried, no thread
/// stalls (the watchdog would exit 2), no increment is lost, check is clean.
#[test]
fn ddl_churn_has_no_hang_and_no_lost_update() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    let d = dir.to_str().expect("utf-8 path");
    let args = [
        "stress",
        "--ddl-churn",
        "--dir",
        d,
        "--seconds",
        "3",
        "--threads",
        "4",
        "--seed",
        "3",
        "--json",
        "--set",
        "fsync=off",
    ];
    let (ok, out, err) = settle(&args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("json report ({e}): {out}\n{err}"));
    assert!(ok, "settle stress --ddl-churn failed:\n{out}\n{err}");
    assert_eq!(v["lost_updates"], 0, "{out}");
    assert_eq!(v["check_clean"], true, "{out}");
    assert_eq!(v["errors"].as_array().map(Vec::len), Some(0), "{out}");
    for activity in ["commits", "create_index", "drop_index", "alter_table", "vacuum"] {
        assert!(v[activity].as_u64().is_some_and(|n| n > 0), "{activity} never happened:\n{out}");
    }
}
