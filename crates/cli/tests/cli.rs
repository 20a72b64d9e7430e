//! The `settle` binary end to end: a small load, then check, waldump, inspect and stats on its
//! data directory, and the errors a user gets for a wrong directory or flag.

mod common;

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

/// A reader that stops early (`settle waldump DIR | head`) ends the command by SIGPIPE, as it
/// ends any Unix filter. Regression: Rust ignores SIGPIPE, so the next write failed and
/// `println!` panicked ("failed printing to stdout: Broken pipe").
#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = dir.to_str().unwrap();
    // About 1,600 heap pages: far more WAL description than a pipe holds.
    let (ok, _, err) = settle(&["bench", "load", "--rows", "100000", "--dir", d, "--json"]);
    assert!(ok, "bench load failed: {err}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["waldump", d])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(!first.is_empty());
    // The reader is gone (dropped above); waldump has more to say.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
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

/// A data directory with table `t` (2,000 rows, primary key `id`) whose every tenth row was
/// deleted by a committed transaction, and nothing has read the table since: VACUUM has exactly
/// 200 dead tuples to remove.
fn table_with_dead_rows(dir: &std::path::Path) {
    use settledb::{Column, Config, Database, Schema, TableOptions, Type, Value};
    // No autovacuum: the dead rows must still be there for `settle vacuum`.
    let db = Database::open(dir, Config::from_pairs([("autovacuum", "off")]).unwrap()).unwrap();
    let col = |n: &str, ty| Column { name: n.into(), ty, nullable: false };
    let schema = Schema { columns: vec![col("id", Type::Int4), col("body", Type::Text)] };
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", schema, opts).unwrap();
    let rows: Vec<Vec<Value>> = (0..2000).map(|i| vec![Value::Int4(i), Value::Text("x".repeat(100))]).collect();
    let mut tx = db.begin().unwrap();
    tx.insert_many(&t, &rows).unwrap();
    tx.commit().unwrap();
    let pk = db.index("t_pkey").unwrap();
    let mut tx = db.begin().unwrap();
    for i in (0..2000).step_by(10) {
        assert!(tx.delete_by_key(&pk, &[Value::Int4(i)]).unwrap());
    }
    tx.commit().unwrap();
    db.close().unwrap();
}

/// A data directory that last ran at `wal_level = logical` and holds a logical slot: the
/// engine refuses to open it below `logical` (as PostgreSQL's server refuses to start), so the
/// tools that open a directory take its level from pg_control rather than fail with a flag
/// some of them do not even have (`settle inspect` on a `settle torture` directory did).
#[test]
fn tools_open_a_directory_that_holds_a_logical_slot() {
    use settledb::{Column, Config, Database, Schema, TableOptions, Type, Value};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    {
        let c = Config::from_pairs([("autovacuum", "off"), ("wal_level", "logical")]).unwrap();
        let db = Database::open(&dir, c).unwrap();
        let schema = Schema { columns: vec![Column { name: "id".into(), ty: Type::Int4, nullable: false }] };
        let t = db.create_table("t", schema, TableOptions::default()).unwrap();
        let mut tx = db.begin().unwrap();
        tx.insert(&t, &[Value::Int4(7)]).unwrap();
        tx.commit().unwrap();
        db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
        db.close().unwrap();
    }
    let d = dir.to_str().unwrap();
    let (ok, out, err) = settle(&["inspect", d, "page", "t", "0"]);
    assert!(ok, "{err}");
    assert_eq!(out.matches("NORMAL").count(), 1, "{out}");
    let (ok, out, err) = settle(&["stats", d]);
    assert!(ok, "{err}");
    assert!(out.contains("pg_stat_user_tables"), "{out}");
    let (ok, out, err) = settle(&["check", d]);
    assert!(ok, "{out}{err}");
    let (ok, _, err) = settle(&["vacuum", d, "t"]);
    assert!(ok, "{err}");
    // Asked for explicitly, a lower level still meets the engine's refusal.
    let (ok, _, err) = settle(&["check", d, "--set", "wal_level=replica"]);
    assert!(!ok);
    assert!(err.contains("wal_level < logical"), "{err}");
}

#[test]
fn vacuum_verbose_reports_then_maps_summarize() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    table_with_dead_rows(&dir);
    let d = dir.to_str().unwrap();

    let (ok, out, err) = settle(&["vacuum", d, "t", "--verbose"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "INFO:  vacuuming \"settledb.public.t\"", "{out}");
    assert_eq!(lines[1], "INFO:  finished vacuuming \"settledb.public.t\": index scans: 1", "{out}");
    let pages = lines[2].strip_prefix("pages: 0 removed, ").and_then(|r| r.split(' ').next()).unwrap();
    let pages: u64 = pages.parse().unwrap();
    assert!(lines[2].contains(&format!("{pages} scanned (100.00% of total)")), "{out}");
    assert!(lines.contains(&"tuples: 200 removed, 1800 remain, 0 are dead but not yet removable"), "{out}");
    let needed = lines.iter().find(|l| l.starts_with("index scan needed: ")).expect(&out);
    assert!(needed.ends_with("had 200 dead item identifiers removed"), "{out}");
    assert!(lines.iter().any(|l| l.starts_with("index \"t_pkey\": pages: ")), "{out}");
    assert!(lines.iter().any(|l| l.starts_with("WAL usage: ")), "{out}");
    assert!(lines.last().unwrap().starts_with("system usage: CPU: "), "{out}");

    // Every page is all-visible now, and the deleted rows' room is in the free space map.
    let (ok, out, err) = settle(&["inspect", d, "vm", "t"]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("all_visible: {pages} (100.00%)")), "{out}");
    let (ok, out, err) = settle(&["inspect", d, "fsm", "t"]);
    assert!(ok, "{err}");
    assert_eq!(out.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).count() as u64, pages);
    assert!(!out.contains(" 0 bytes free recorded"), "{out}");

    // Without --verbose: one line per table, the catalog included; nothing left to remove.
    let (ok, out, err) = settle(&["vacuum", d]);
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l.starts_with("vacuumed \"pg_class\": ")), "{out}");
    let t = out.lines().find(|l| l.starts_with("vacuumed \"t\": ")).expect(&out);
    assert!(t.contains(", 0 dead tuples removed, "), "{out}");
    let (ok, out, err) = settle(&["check", d]);
    assert!(ok && out.contains("no problems"), "{out}{err}");
}

/// `settle vacuum --full` rewrites the table: PostgreSQL's VACUUM FULL lines with
/// `--verbose`, a smaller table, a clean `check`; `--full` refuses the options it cannot take.
#[test]
fn vacuum_full_rewrites_the_table() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    table_with_dead_rows(&dir);
    let d = dir.to_str().unwrap();
    let (ok, out, err) = settle(&["vacuum", d, "t", "--full", "--verbose"]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "INFO:  vacuuming \"public.t\"", "{out}");
    assert!(
        lines[1].starts_with("INFO:  \"public.t\": found 200 removable, 1800 nonremovable row versions in "),
        "{out}"
    );
    assert_eq!(lines[2], "DETAIL:  0 dead row versions cannot be removed yet.", "{out}");
    assert!(lines[3].starts_with("CPU: user: "), "{out}");
    let before: u32 = lines[1].rsplit(' ').nth(1).and_then(|n| n.parse().ok()).expect(&out);
    // Nothing is left to remove, and the table is smaller than it was before the first.
    let (ok, out, err) = settle(&["vacuum", d, "--full", "--freeze"]);
    assert!(ok, "{err}");
    let t = out.lines().find(|l| l.starts_with("rewrote \"t\": ")).expect(&out);
    let (from, to) = t["rewrote \"t\": ".len()..].split_once(" pages into ").expect(t);
    let (from, to): (u32, u32) = (from.parse().expect(t), to.split(',').next().unwrap().parse().expect(t));
    assert!(from == to && to < before, "{before} pages before the first rewrite: {t}");
    assert!(t.contains(" 0 row versions removed, 1800 kept (0 dead but not yet removable, 1800 frozen)"), "{t}");
    assert!(!out.contains("pg_class"), "the catalogs are not rewritten: {out}");
    let (ok, out, err) = settle(&["check", d]);
    assert!(ok && out.contains("no problems"), "{out}{err}");
    let (ok, _, err) = settle(&["vacuum", d, "--full", "--parallel", "2"]);
    assert!(!ok && err.contains("cannot be used with"), "{err}");
}

#[test]
fn vacuum_and_inspect_reject_bad_input_without_panicking() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    table_with_dead_rows(&dir);
    let d = dir.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["vacuum", d, "--index-cleanup", "maybe"], "invalid value 'maybe' for '--index-cleanup"),
        (&["vacuum", d, "--truncate", "perhaps"], "expected on or off"),
        (&["vacuum", d, "--policy", "fast"], "expected lazy, pg16, eager or adaptive"),
        (&["vacuum", d, "--bogus"], "unexpected argument '--bogus'"),
        (&["vacuum", d, "--set", "vacuum_freeze_policy=fast"], "vacuum_freeze_policy"),
        (&["vacuum", d, "no_such_table"], "relation \"no_such_table\" does not exist"),
        (&["vacuum", tmp.path().to_str().unwrap()], "not a settledb data directory"),
        // `inspect page TABLE` without a block shows every page (60c4e3e); an index page still
        // needs its block.
        (&["inspect", d, "index", "t_pkey"], "needs a BLOCK number"),
        (&["inspect", d, "fsm", "no_such_table"], "relation \"no_such_table\" does not exist"),
        (&["bench", "vacuum", "--policy", "fast"], "--policy"),
        (&["bench", "vacuum", "--full-scans", "0"], "--full-scans must be at least 1"),
    ];
    for (args, want) in cases {
        let (ok, _, err) = settle(args);
        assert!(!ok, "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // The directory is still clean after the failed commands.
    let (ok, out, err) = settle(&["check", d]);
    assert!(ok && out.contains("no problems"), "{out}{err}");
}

/// The VACUUM benchmark at scale 1 with the verifier on: the first VACUUM removes the 5,000
/// updated rows' old versions and, in one index scan, their index entries; the full scans
/// (two, with `--full-scans 2`) read every page and change nothing, and their summary row is
/// the median of both.
#[test]
fn vacuum_bench_runs_both_vacuums() {
    let (ok, out, err) = settle(&["bench", "vacuum", "--scale", "1", "--full-scans", "2", "--check", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["prep"][0]["updated_rows"], 5000);
    let (first, second) = (&v["vacuums"][0], &v["vacuums"][1]);
    assert_eq!(first["phase"], "vacuum");
    assert_eq!(first["index_scans"], 1);
    assert_eq!(v["prep"][0]["hot_updates"], 0, "updates to full pages are not HOT");
    assert_eq!(first["tuples_removed"], 5000);
    assert_eq!(first["dead_items_removed"], 5000);
    assert_eq!(first["scanned_pages"], first["pages"]);
    assert_eq!(second["phase"], "full-scan");
    assert_eq!(second["tuples_removed"], 0);
    assert_eq!(second["full_page_images"], 0);
    assert_eq!(second["scanned_pages"], second["pages"]);
    assert!(first["verbose"].as_str().unwrap().contains("INFO:  finished vacuuming"), "{first}");
    // The hypervisor's steal around each VACUUM, from /proc/stat (zero on bare metal).
    assert!(first["steal_seconds"].as_f64().is_some_and(|s| s >= 0.0), "{first}");
    let third = &v["vacuums"][2];
    assert_eq!((&third["phase"], &third["wal_bytes"]), (&serde_json::json!("full-scan"), &serde_json::json!(0)));
    assert_eq!(v["vacuums"].as_array().unwrap().len(), 3);
    assert_eq!(v["full_scans_per_run"], 2);
    let row = v["summary"].as_array().unwrap().iter().find(|r| r["phase"] == "full-scan").unwrap();
    assert_eq!(row["runs"], 2, "{row}");
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
    for header in [
        "pg_stat_user_tables",
        "pg_stat_database",
        "pg_stat_wal",
        "relfrozenxid",
        "n_dead_tup",
        "blks_hit",
        "pg_replication_slots",
        "confirmed_flush_lsn",
        "pg_locks",
        "deadlocks",
    ] {
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
    assert_eq!(v["pg_replication_slots"], serde_json::json!([]), "no slots");
    assert_eq!(v["pg_locks"], serde_json::json!([]), "no prepared transaction holds a lock");
    assert_eq!(db["deadlocks"], 0);
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

/// `settle tpcc` refuses a rate that is not a number of transactions per second, before any
/// work.
#[test]
fn tpcc_rejects_a_bad_rate() {
    let (ok, _, err) = settle(&["tpcc", "--rate=-5", "--transactions", "10"]);
    assert!(!ok);
    assert!(err.contains("--rate -5"), "{err}");
}

/// `bench wal-level` runs the same seeded single-client pgbench at both levels: the same
/// records, and logical's never fewer bytes (it adds to records, never removes).
#[test]
fn wal_level_bench_compares_the_same_work() {
    let (ok, out, err) =
        settle(&["bench", "wal-level", "--workloads", "pgbench", "--pgbench-transactions", "300", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "settledb only without --peer: {out}");
    let (r, l) = (&rows[0]["replica"], &rows[0]["logical"]);
    assert_eq!(r["transactions"], 300);
    assert_eq!(l["transactions"], 300);
    assert_eq!(r["records"], l["records"], "one client, one seed: the same records: {out}");
    assert!(l["bytes"].as_u64().unwrap() >= r["bytes"].as_u64().unwrap(), "{out}");
    assert!(r["bytes"].as_u64().unwrap() > 300 * 100, "{out}");
}

/// `bench reorder` hands back every committed change and none rolled back, and B3 (a large
/// transaction spilled under 1 MB, half its savepoints rolled back) stays within the limit.
#[test]
fn reorder_bench_emits_what_committed_within_the_limit() {
    let (ok, out, err) =
        settle(&["bench", "reorder", "--cases", "B3-rollbacks,B4-open", "--index", "heap", "--shrink", "10", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.len() >= 4, "{out}");
    for r in rows {
        let (changes, emitted) = (r["changes"].as_u64().unwrap(), r["changes_emitted"].as_u64().unwrap());
        match r["case"].as_str().unwrap() {
            "B3-rollbacks" => assert_eq!(emitted, changes / 2, "every other savepoint rolled back: {r}"),
            _ => assert_eq!(emitted, changes, "{r}"),
        }
        if r["case"] == "B3-rollbacks" && r["limit"] == "1MB" {
            assert!(r["spill_count"].as_u64().unwrap() > 0, "{r}");
            assert!(r["peak_memory"].as_u64().unwrap() <= 1 << 20, "{r}");
        }
    }
}

/// `settle serve` authenticates by default (issue 20): with no password stored or given and no
/// `--trust` it does not start, says what to give, and creates nothing; a reserved slot count
/// not below `max_connections` is refused as PostgreSQL refuses it; `--password-file` stores
/// `postgres`'s password, so a later start needs no flag and still demands it.
#[test]
fn serve_needs_a_password_or_trust() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = dir.to_str().unwrap();
    let (ok, _, err) = settle(&["serve", "--dir", d, "--port", "0"]);
    assert!(!ok);
    assert!(err.contains("no role of") && err.contains("--password-file FILE") && err.contains("--trust"), "{err}");
    assert!(!dir.exists(), "nothing is created");
    let (ok, _, err) = settle(&["serve", "--dir", d, "--port", "0", "--trust", "--set", "max_connections=3"]);
    assert!(!ok);
    assert!(err.contains("superuser_reserved_connections (3) must be less than max_connections (3)"), "{err}");

    if !std::path::Path::new(common::PSQL).exists() {
        eprintln!("skipped the login half: {} is missing", common::PSQL);
        return;
    }
    let pwfile = tmp.path().join("pw");
    std::fs::write(&pwfile, "s3cret\n").unwrap();
    let login = |port: &str, password: &str| {
        Command::new(common::PSQL)
            .args(["-X", "-At", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "-d", "postgres", "-c", "select 1"])
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "5")
            .output()
            .unwrap()
    };
    for pw_flag in [Some(pwfile.to_str().unwrap()), None] {
        let port = common::free_port().to_string();
        let mut args = vec!["serve", "--dir", d, "--port", &port];
        if let Some(f) = pw_flag {
            args.extend(["--password-file", f]);
        }
        let mut child = Command::new(env!("CARGO_BIN_EXE_settle"))
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !login(&port, "s3cret").status.success() {
            assert!(std::time::Instant::now() < deadline, "no login with the stored password on {port}");
            assert!(child.try_wait().unwrap().is_none(), "settle serve {args:?} exited");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let wrong = login(&port, "wrong");
        let err = String::from_utf8_lossy(&wrong.stderr);
        assert!(!wrong.status.success() && err.contains("password authentication failed"), "{err}");
        let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
        assert!(child.wait().unwrap().success());
    }
}
