//! The `settle` binary end to end: a small load, then check, waldump, inspect and stats on its
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

/// `settle stats` after a load: the table's counters as the load left them, the same in text
/// and JSON, and kept from one run to the next (each run's clean close saves them).
#[test]
fn stats_shows_the_views_and_keeps_them_across_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = dir.to_str().unwrap();
    let (ok, _, err) = settle(&["bench", "load", "--rows", "3000", "--dir", d, "--json"]);
    assert!(ok, "bench load failed: {err}");

    let (ok, out, err) = settle(&["stats", d]);
    assert!(ok, "stats failed: {err}");
    for header in ["pg_stat_user_tables", "pg_stat_database", "pg_stat_wal", "relfrozenxid", "n_dead_tup", "blks_hit"] {
        assert!(out.contains(header), "{header} missing from:\n{out}");
    }
    let row = out.lines().find(|l| l.starts_with(" pgbench_accounts ") && l.contains("3000")).expect("table row");
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    assert_eq!(cells.len(), 18, "{row}");
    assert_eq!((cells[3], cells[7], cells[8], cells[11]), ("3000", "3000", "0", ""), "ins, live, dead, last_vacuum");

    let json = |out: &str| -> serde_json::Value { serde_json::from_str(out).unwrap() };
    let (ok, out, err) = settle(&["stats", d, "--json"]);
    assert!(ok, "stats --json failed: {err}");
    let v = json(&out);
    let t = &v["pg_stat_user_tables"][0];
    assert_eq!(t["relname"], "pgbench_accounts");
    assert_eq!((t["n_tup_ins"].as_u64(), t["n_live_tup"].as_u64()), (Some(3000), Some(3000)));
    assert_eq!((t["n_ins_since_vacuum"].as_u64(), t["n_tup_upd"].as_u64()), (Some(3000), Some(0)));
    assert!(t["last_vacuum"].is_null());
    let db = &v["pg_stat_database"];
    assert_eq!(db["tup_inserted"], 3000);
    assert!(db["xact_commit"].as_u64().unwrap() >= 2, "{db}");
    assert!(db["stats_reset"].is_string());
    assert!(v["pg_stat_wal"]["wal_bytes"].as_u64().unwrap() > 3000 * 100);
    let next_xid = v["next_xid"].as_u64().unwrap();
    let frozen = v["relfrozenxid"].as_array().unwrap();
    assert_eq!(frozen.len(), 2, "pg_class and the table");
    for f in frozen {
        assert_eq!(f["age"].as_u64().unwrap(), next_xid - f["relfrozenxid"].as_u64().unwrap(), "{f}");
    }

    // The next run starts from what this one saved: `settle stats` commits nothing itself.
    let (ok, out, err) = settle(&["stats", d, "--json"]);
    assert!(ok, "{err}");
    let again = json(&out);
    assert_eq!(again["pg_stat_user_tables"], v["pg_stat_user_tables"]);
    assert_eq!(again["pg_stat_database"]["xact_commit"], db["xact_commit"]);
    assert_eq!(again["pg_stat_database"]["stats_reset"], db["stats_reset"]);
    assert!(again["pg_stat_database"]["blks_read"].as_u64() > db["blks_read"].as_u64(), "each open reads pg_class");

    let (ok, _, err) = settle(&["stats", tmp.path().to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("not a settledb data directory"), "{err}");
}

/// `settle bench aging` on a tiny configuration: one run per policy asked for, every metric
/// group in the text, the same figures as JSON, and a clean check after each run. Only the
/// shape and the workload's own arithmetic are asserted: how many autovacuums run depends on
/// timing.
#[test]
fn bench_aging_reports_every_policy_and_metric_group() {
    let args = [
        "bench",
        "aging",
        "--policy",
        "lazy,eager",
        "--transactions",
        "3000",
        "--xids-per-tx",
        "40",
        "--freeze-max-age",
        "100000",
    ];
    let (ok, out, err) = settle(&[&args[..], &["--json"]].concat());
    assert!(ok, "bench aging failed: {err}\n{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["benchmark"], "aging");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.iter().map(|r| r["policy"].as_str().unwrap()).collect::<Vec<_>>(), ["lazy", "eager"]);
    for r in runs {
        assert_eq!(r["transactions"], 3000);
        assert!(r["xids_consumed"].as_u64().unwrap() >= 3000 * 40, "{r}");
        assert!(r["check"].as_str().unwrap().ends_with("no problems"), "{r}");
        let tables: Vec<&str> = r["tables"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(tables, ["pgbench_accounts", "pgbench_history"]);
        assert!(r["tables"][0]["heap_pages_end"].as_u64().unwrap() >= 100_000u64.div_ceil(61), "{r}");
        for kind in ["anti_wraparound", "normal"] {
            assert!(r["autovacuum_log"][kind]["pages_scanned"].is_u64(), "{r}");
        }
        assert_eq!(r["autovacuum_log"]["other_entries"].as_array().map(Vec::len), Some(0), "{r}");
    }

    let (ok, out, err) = settle(&args);
    assert!(ok, "bench aging failed: {err}\n{out}");
    for group in [
        "run ",
        "pgbench_accounts ",
        "pgbench_history ",
        "WAL (transaction phase) ",
        "autovacuum log: anti-wraparound ",
        "autovacuum log: other ",
    ] {
        let header = out.lines().find(|l| l.starts_with(group)).unwrap_or_else(|| panic!("{group} missing:\n{out}"));
        assert!(header.trim_end().ends_with("lazy       eager"), "{header}");
    }
    assert!(out.lines().any(|l| l.starts_with("anti-wraparound autovacuums ")), "{out}");
    assert_eq!(out.matches(": check: checked 3 tables").count(), 2, "{out}");
}

/// Wrong flags are errors that name what is wrong, before any work.
#[test]
fn bench_aging_rejects_bad_flags() {
    let (ok, _, err) = settle(&["bench", "aging", "--policy", "lazy,sometimes"]);
    assert!(!ok);
    assert!(err.contains("unknown freeze policy \"sometimes\""), "{err}");
    let (ok, _, err) = settle(&["bench", "aging", "--xids-per-tx", "0"]);
    assert!(!ok);
    assert!(err.contains("--xids-per-tx must be at least 1"), "{err}");
    let (ok, _, err) = settle(&["bench", "aging", "--set", "vacuum_freeze_min_age=-5"]);
    assert!(!ok);
    assert!(err.contains("vacuum_freeze_min_age"), "{err}");
}
