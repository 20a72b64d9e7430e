//! `settle torture --wraparound`, the CI-sized soak: XIDs burned past 2^32 under autovacuum
//! with every row kept, and, with autovacuum off, the stop limit refusing writes until a
//! VACUUM restores service, again with every row kept. Both hold a prepared transaction open
//! for a span of the burn: under autovacuum it holds relfrozenxid back until it commits; at
//! the stop limit the warnings and the error name it, and VACUUM restores service only once it
//! is rolled back.

use std::path::Path;
use std::process::Command;

fn soak(dir: &Path, args: &[&str]) -> (bool, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["torture", "--wraparound", "--json", "--accounts", "2000", "--dir"])
        .arg(dir)
        .args(args)
        .output()
        .expect("run settle");
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); stdout {:?}, stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), report)
}

fn assert_nothing_lost(r: &serde_json::Value) {
    assert_eq!(r["anomalies"], serde_json::json!([]), "{r:#}");
    assert_eq!(r["rows_lost"], 0);
    assert_eq!(r["rows_extra"], 0);
    assert_eq!(r["rows_changed"], 0);
    assert_eq!(r["check_clean"], true);
    assert_eq!(r["verified_after_restart"], true);
    // 2,000 accounts, 2,000 cold rows and the workers' live history rows.
    assert!(r["rows_verified"].as_u64().unwrap() > 4000, "{r:#}");
    assert!(r["transactions_committed"].as_u64().unwrap() > 0, "the workers committed nothing");
}

#[test]
fn autovacuum_carries_every_row_past_the_first_wraparound() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, r) =
        soak(tmp.path(), &["--xids", "5000000000", "--freeze-max-age", "1000000000", "--xid-step", "250000000"]);
    assert!(ok, "{r:#}");
    assert_nothing_lost(&r);
    assert!(r["xids_consumed"].as_u64().unwrap() >= 5_000_000_000);
    assert_eq!(r["epoch_end"], 1, "the XID counter must have wrapped once");
    assert!(r["anti_wraparound_autovacuums"].as_u64().unwrap() >= 4, "{r:#}");
    // Outside the hold, autovacuum keeps up.
    assert!(r["max_relfrozenxid_age"].as_u64().unwrap() <= 1_250_000_000, "{r:#}");
    // The prepared transaction, open for twice the freeze max age, held relfrozenxid back that
    // far (no VACUUM can freeze past it); once committed, autovacuum brought it back.
    let p = &r["prepared"];
    assert_eq!(p["gid"], "soak-held", "{r:#}");
    assert_eq!(p["outcome"], "committed");
    assert!(p["xids_consumed_while_open"].as_u64().unwrap() >= 1_900_000_000, "{r:#}");
    assert!(p["max_relfrozenxid_age_while_open"].as_u64().unwrap() >= 1_900_000_000, "{r:#}");
    assert!(p["relfrozenxid_age_after"].as_u64().unwrap() <= 1_000_000_000, "{r:#}");
    // The lagging slot held the catalog back from the same XID, and was advanced past it.
    let s = &p["slot"];
    assert_eq!(s["catalog_xmin"], p["xid"], "{r:#}");
    assert!(s["catalog_xmin_after"].as_u64().unwrap() > s["catalog_xmin"].as_u64().unwrap(), "{r:#}");
    assert!(s["max_wal_kept_bytes"].as_u64().unwrap() > 0, "{r:#}");
}

#[test]
fn stop_limit_refuses_writes_and_vacuum_restores_service() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, r) = soak(tmp.path(), &["--autovacuum", "off", "--xid-step", "100000000"]);
    assert!(ok, "{r:#}");
    assert_nothing_lost(&r);
    assert_eq!(r["mode"], "stop limit");
    assert!(r["writes_refused"].as_u64().unwrap() >= 1, "{r:#}");
    assert!(r["xid_warnings"].as_u64().unwrap() >= 1, "{r:#}");
    assert_eq!(r["service_restored_by_vacuum"], true);
    // The stop limit is 3,000,000 XIDs short of the wraparound point, 2^31 from the oldest XID.
    assert!(r["max_relfrozenxid_age"].as_u64().unwrap() > 2_000_000_000, "{r:#}");
    // The prepared transaction, open from the start, is named (GID and XID, after
    // PostgreSQL's hint) by the warnings and by the stop error; VACUUM cannot restore service
    // while it is open, and does once it is rolled back.
    let p = &r["prepared"];
    assert_eq!(p["warnings_named_it"], true, "{r:#}");
    assert_eq!(p["stop_error_named_it"], true, "{r:#}");
    let stop = p["stop_error"].as_str().unwrap();
    assert!(stop.contains("You might also need to commit or roll back old prepared transactions"), "{stop}");
    assert_eq!(p["vacuum_restored_service_while_open"], false, "{r:#}");
    assert_eq!(p["outcome"], "rolled back");
    assert!(p["max_relfrozenxid_age_while_open"].as_u64().unwrap() > 2_000_000_000, "{r:#}");
    assert!(p["relfrozenxid_age_after"].as_u64().unwrap() < 100_000_000, "{r:#}");
    // The lagging replication slot is named too ("or drop stale replication slots").
    let s = &p["slot"];
    assert_eq!(s["warnings_named_it"], true, "{r:#}");
    assert!(stop.contains("drop stale replication slots") && stop.contains("\"soak_lagging\""), "{stop}");
}
