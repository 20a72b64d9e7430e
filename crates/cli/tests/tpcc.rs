//! `settle tpcc --compare`: a short smoke run, and the report's JSON schema.

use std::process::Command;

fn keys(v: &serde_json::Value) -> Vec<&str> {
    v.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default()
}

#[test]
fn compare_smoke_run_reports_every_policy_in_the_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["tpcc", "--warehouses", "1", "--terminals", "2", "--transactions", "1500", "--compare", "lazy,eager"])
        .args(["--aging", "1:2000", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run settle");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    for k in ["benchmark", "machine", "warehouses", "terminals", "seed", "aging", "mix", "nurand", "columns", "targets"]
    {
        assert!(r.get(k).is_some(), "report lacks {k}: {:?}", keys(&r));
    }
    assert_eq!(r["aging"], "1:2000");
    let columns = r["columns"].as_array().unwrap();
    assert_eq!(columns.iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), ["lazy", "eager"]);
    for c in columns {
        assert_eq!(c["run"]["transactions"], 1500, "every policy runs the same requests");
        assert!(c["consistency_violations"].as_array().unwrap().is_empty(), "{}", c["consistency_violations"]);
        assert!(c["check_problems"].as_array().unwrap().is_empty(), "{}", c["check_problems"]);
        assert!(c["xids_consumed"].as_u64().unwrap() > 1000);
        // Every terminal transaction ends once (New-Order's 1% roll back; Deliveries commit in
        // the background workers).
        let ended = c["db"]["xact_commit"].as_u64().unwrap() + c["db"]["xact_rollback"].as_u64().unwrap();
        assert!(ended >= 1450, "{ended} transactions ended");
        assert!(c["db"]["wal_bytes"].as_u64().unwrap() > 0);
        let tables = c["tables"].as_array().unwrap();
        let names: Vec<&str> = tables.iter().map(|t| t["name"].as_str().unwrap()).collect();
        for t in ["bmsql_oorder", "bmsql_order_line", "bmsql_new_order", "bmsql_history", "bmsql_stock"] {
            assert!(names.contains(&t), "{t} missing from {names:?}");
        }
        for t in tables {
            for k in
                ["autovacuums", "anti_wraparound_autovacuums", "max_relfrozenxid_age", "pages_frozen", "heap_pages"]
            {
                assert!(t.get(k).is_some(), "table figures lack {k}");
            }
        }
        let kinds: Vec<&str> =
            c["run"]["kinds"].as_array().unwrap().iter().map(|k| k["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["NEW_ORDER", "PAYMENT", "ORDER_STATUS", "STOCK_LEVEL", "DELIVERY", "DELIVERY_BG"]);
        assert!(!c["samples"].as_array().unwrap().is_empty());
        // Rate-limited by default, and reported in two halves of the same request count.
        assert_eq!(c["run"]["rate_limit"], 2000.0);
        let halves = c["halves"].as_array().unwrap();
        assert_eq!(halves.len(), 2);
        assert_eq!(halves[0]["transactions_at_end"], 750);
        assert_eq!(halves[1]["transactions_at_end"], 1500);
        for k in c["run"]["kinds"].as_array().unwrap() {
            let h = k["halves"].as_array().unwrap();
            assert_eq!(h[0]["count"].as_u64().unwrap() + h[1]["count"].as_u64().unwrap(), k["count"].as_u64().unwrap());
        }
    }
    // Both lazy and eager ran, so the seed's targets are evaluated (met or not).
    assert!(r["targets"].as_array().unwrap().len() >= 4);
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("relfrozenxid age") && !html.contains("<script"));
    // The population is kept and reused by the next run with the same warehouses and seed.
    assert!(dir.path().join("template").is_dir());
}

/// `--duration` compares equal work: unthrottled, the first policy runs for the time given and
/// the next one runs as many transactions; under a rate limit, every policy runs rate x seconds.
#[test]
fn duration_runs_the_same_requests_for_every_policy() {
    let dir = tempfile::tempdir().unwrap();
    let run = |rate: &str| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_settle"))
            .args(["tpcc", "--terminals", "2", "--duration", "2", "--rate", rate, "--compare", "lazy,eager", "--json"])
            .arg("--dir")
            .arg(dir.path())
            .output()
            .expect("run settle");
        assert!(out.status.success(), "exit {:?}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
    };
    let counts = |r: &serde_json::Value| -> Vec<u64> {
        r["columns"].as_array().unwrap().iter().map(|c| c["run"]["transactions"].as_u64().unwrap()).collect()
    };
    let free = counts(&run("0"));
    assert!(free[0] > 0 && free[0] == free[1], "unthrottled: {free:?}");
    assert_eq!(counts(&run("400")), [800, 800]);
}

/// The same smoke run with PostgreSQL 15 as one more column (skipped, saying why, when
/// PostgreSQL 15 is not installed).
#[test]
fn peer_column_runs_the_same_requests_on_postgres() {
    if !std::path::Path::new("/usr/lib/postgresql/15/bin/postgres").exists() {
        eprintln!("skipped: PostgreSQL 15 is not installed (apt-get install postgresql-15)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["tpcc", "--warehouses", "1", "--terminals", "2", "--transactions", "600", "--policy", "eager"])
        .args(["--peer", "--peer-port", "54338", "--json", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run settle");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    let columns = r["columns"].as_array().unwrap();
    assert_eq!(columns.iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), ["eager", "postgres"]);
    let pg = &columns[1];
    assert_eq!(pg["run"]["transactions"], 600);
    assert!(pg["consistency_violations"].as_array().unwrap().is_empty(), "{}", pg["consistency_violations"]);
    assert!(pg["xids_consumed"].as_u64().unwrap() > 300, "PostgreSQL's XIDs are read without assigning one");
    assert!(pg["db"]["wal_bytes"].as_u64().unwrap() > 0);
    let names: Vec<&str> = pg["tables"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"bmsql_order_line"), "{names:?}");
    // PostgreSQL 15 counts no frozen pages: reported as absent, not as zero.
    assert!(pg["tables"][0]["pages_frozen"].is_null());
}
