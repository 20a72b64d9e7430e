//! The `settle` binary end to end: a small load, then check, waldump and inspect on its
//! data directory, and the errors a user gets for a wrong directory or flag.

use std::process::Command;

fn settle(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_settle")).args(args).output().expect("run settle");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn load_then_check_waldump_inspect() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = dir.to_str().unwrap();
    let (ok, out, err) = settle(&["bench", "load", "--rows", "20000", "--dir", d, "--json"]);
    assert!(ok, "bench load failed: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["settledb"]["rows"], 20000);
    assert_eq!(v["settledb"]["heap_pages"], 20000u64.div_ceil(61), "61 pgbench rows per page");
    assert!(v["settledb"]["wal_bytes"].as_u64().unwrap() > 20000 * 100);

    let (ok, out, err) = settle(&["check", d]);
    assert!(ok, "check failed: {out}{err}");
    assert!(out.contains("no problems"), "{out}");

    let (ok, out, _) = settle(&["waldump", d, "--limit", "50"]);
    assert!(ok);
    assert!(out.contains("MULTI_INSERT"), "{out}");
    assert!(out.lines().count() <= 50);
    let (ok, out, _) = settle(&["waldump", d, "--stats"]);
    assert!(ok);
    assert!(out.contains("Heap2"), "{out}");

    let (ok, out, _) = settle(&["inspect", d, "page", "pgbench_accounts", "0"]);
    assert!(ok);
    assert_eq!(out.matches("NORMAL").count(), 61, "{out}");
    // No VACUUM has run: the visibility map fork does not exist yet, and says so.
    let (ok, out, err) = settle(&["inspect", d, "vm", "pgbench_accounts", "0"]);
    assert!(ok, "{err}");
    assert!(out.contains("has no block"), "{out}");
    let (ok, _, err) = settle(&["inspect", d, "index", "no_such_index", "0"]);
    assert!(!ok);
    assert!(err.contains("index \"no_such_index\" does not exist"), "{err}");
    let (ok, _, err) = settle(&["inspect", d, "toast", "pgbench_accounts", "0"]);
    assert!(!ok);
    assert!(err.contains("unknown object"), "{err}");
}

#[test]
fn errors_name_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, _, err) = settle(&["check", tmp.path().to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("not a settledb data directory"), "{err}");
    let (ok, _, err) = settle(&["bench", "load", "--rows", "10", "--set", "shared_bufers=1MB"]);
    assert!(!ok);
    assert!(err.contains("unrecognized configuration parameter \"shared_bufers\""), "{err}");
}

/// pgbench's transaction from two threads for two seconds; the benchmark itself fails when the
/// balances of accounts, tellers and branches do not each equal the history's deltas.
/// Regression: at scale 1 (one branch row) this found lost updates when `update_by_key` looked
/// the row up and updated it in two commands, so the version found could be pruned between them.
#[test]
fn pgbench_keeps_its_balance_invariant() {
    let (ok, out, err) = settle(&["bench", "pgbench", "-s", "1", "-c", "2", "-T", "2", "--json"]);
    assert!(ok, "pgbench run failed: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["settledb"]["transactions"].as_u64().unwrap() > 0, "{out}");
    assert_eq!(v["settledb"]["accounts_pages"], 100_000u64.div_ceil(61));
}

/// The tidstore benchmark measures each structure with the counting allocator (which every
/// other command leaves off): its byte count must be there and agree with the structure's own.
/// Regression: gating the allocator left it off for this command too.
#[test]
fn tidstore_bench_measures_with_the_counting_allocator() {
    let (ok, out, err) = settle(&[
        "bench",
        "tidstore",
        "--scale",
        "1",
        "--only",
        "seed3",
        "--probes",
        "20000",
        "--structures",
        "tidstore",
        "--json",
    ]);
    assert!(ok, "{err}");
    assert!(!err.contains("not installed"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let row = &v["cases"][0]["rows"][0];
    assert_eq!(row["matched_ok"], true, "{row}");
    let (bytes, reported) = (row["bytes"].as_f64().unwrap(), row["reported_bytes"].as_f64().unwrap());
    assert!((bytes - reported).abs() <= reported * 0.05, "allocator {bytes} vs own {reported}");
}
