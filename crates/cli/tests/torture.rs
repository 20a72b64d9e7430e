//! `settle torture`: short runs survive their kills with no anomaly, savepoints and prepared
//! transactions included, and the verifier catches an acknowledged commit that the database
//! lost, a released savepoint's write lost, a COMMIT PREPARED lost and a prepared transaction
//! nobody prepared.

use std::path::Path;
use std::process::Command;

use settledb::{Config, Database, Value};

/// Runs `settle torture --json` with `args`; (exit success, the report).
fn torture(dir: &Path, args: &[&str]) -> (bool, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["torture", "--json", "--dir"])
        .arg(dir)
        .args(args)
        .output()
        .expect("run settle");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("no JSON report ({e}); stdout {:?}, stderr {stderr}", String::from_utf8_lossy(&out.stdout))
    });
    (out.status.success(), report)
}

fn assert_survived(r: &serde_json::Value, kills: u64) {
    assert_eq!(r["anomaly_count"], 0, "{:#}", r["anomalies"]);
    assert_eq!(r["kills"], kills);
    let by_kind: u64 = r["kills_by_kind"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(by_kind, kills);
    assert_eq!(r["verifications"], kills + 1, "one verification before the first kill, one after each");
    assert!(r["acknowledged_commits_total"].as_u64().unwrap() > 0, "the children committed nothing");
    assert!(r["recovery_ms_max"].as_f64().unwrap() > 0.0, "no crash recovery was timed");
}

/// The savepoint and prepared-transaction figures of a run that had both.
fn assert_savepoints_and_prepared_transactions_checked(r: &serde_json::Value) {
    let acked = |k: &str| r["acknowledged_commits"][k].as_u64().unwrap_or(0);
    assert!(acked("savepoint write") > 0, "no released savepoint write was checked present: {r:#}");
    assert!(r["savepoint_writes_absent"].as_u64().unwrap() > 0, "no rolled-back savepoint write checked: {r:#}");
    assert!(acked("prepared transaction") > 0, "no COMMIT PREPARED was checked: {r:#}");
    assert!(r["prepared_rolled_back_absent"].as_u64().unwrap() > 0, "no ROLLBACK PREPARED was checked: {r:#}");
    assert!(r["prepared_savepoint_writes_absent"].as_u64().unwrap() > 0, "no ROLLBACK TO before PREPARE: {r:#}");
    assert!(r["prepared_finished_after_kill"].as_u64().unwrap() > 0, "no prepared transaction crossed a kill: {r:#}");
}

/// The first logged key of `op kind` lines.
fn first_key(acklog: &str, op_kind: &str) -> i64 {
    acklog
        .lines()
        .find_map(|l| l.strip_prefix(op_kind))
        .unwrap_or_else(|| panic!("no {op_kind:?} line"))
        .parse()
        .unwrap()
}

#[test]
fn pgbench_survives_kills_and_a_lost_commit_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let (ok, r) = torture(&dir, &["--kills", "6", "--workload", "pgbench"]);
    assert!(ok, "{r:#}");
    assert_survived(&r, 6);
    assert_savepoints_and_prepared_transactions_checked(&r);
    // The kinds are taken in turn; a targeted kill whose marker never came counts as random.
    let targeted: u64 = ["vacuum", "parallel vacuum", "checkpoint", "extension", "2pc"]
        .iter()
        .map(|k| r["kills_by_kind"][k].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(targeted + r["markers_missed"].as_u64().unwrap(), 5, "{r:#}");
    // The replication slot was decoded as the workload ran, survived every kill at or past
    // what the child acknowledged, and what a peek decodes after recovery is committed.
    assert!(r["slot_confirmed_lsn"].as_u64().unwrap() > 0, "{r:#}");
    assert!(r["slot_decoded_rows_checked"].as_u64().unwrap() > 0, "{r:#}");

    // Behind the verifier's back: lose one acknowledged commit (delete its history row), one
    // released savepoint's write of an acknowledged commit (its history row: its balances
    // keep the delta too), the rows of one acknowledged COMMIT PREPARED, and prepare a
    // transaction the log never began.
    let acklog = std::fs::read_to_string(dir.join("acklog")).unwrap();
    let hid = first_key(&acklog, "C h ");
    let leg = first_key(&acklog, "C s ");
    let committed_prepared = first_key(&acklog, "C p ");
    let mut config = Config::default();
    config.set("autovacuum", "off").unwrap();
    config.set("max_prepared_transactions", "8").unwrap();
    config.set("wal_level", "logical").unwrap(); // the torture's replication slot needs it
    let db = Database::open(dir.join("data"), config).unwrap();
    let pkey = db.index("pgbench_history_pkey").unwrap();
    let mut tx = db.begin().unwrap();
    assert!(tx.delete_by_key(&pkey, &[Value::Int8(hid)]).unwrap());
    assert!(tx.delete_by_key(&pkey, &[Value::Int8(leg)]).unwrap());
    let twopc = db.index("torture_2pc_id").unwrap();
    while tx.delete_by_key(&twopc, &[Value::Int8(committed_prepared)]).unwrap() {}
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&db.table("torture_2pc").unwrap(), &[Value::Int8(999), Value::Int4(0), Value::Null]).unwrap();
    tx.prepare("torture-999").unwrap();
    drop(tx);
    db.close().unwrap();

    let (ok, r) = torture(&dir, &["--kills", "0"]);
    assert!(!ok, "the run must fail: {r:#}");
    let anomalies: Vec<&str> = r["anomalies"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(
        anomalies.contains(&format!("pgbench transaction {hid}: acknowledged commit missing").as_str()),
        "{anomalies:?}"
    );
    for expected in [
        format!("savepoint write {leg}: acknowledged commit missing"),
        format!("prepared transaction {committed_prepared}: acknowledged COMMIT PREPARED missing"),
        "prepared transaction 999: listed by prepared_xacts, but never attempted".to_string(),
    ] {
        assert!(anomalies.contains(&expected.as_str()), "{expected:?} not in {anomalies:?}");
    }
    // Its account, teller and branch kept the delta the lost row accounted for.
    assert!(
        anomalies.iter().any(|a| a.starts_with("pgbench_accounts ") && a.contains("history deltas sum")),
        "{anomalies:?}"
    );
}

#[test]
fn tpcc_survives_kills() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, r) = torture(tmp.path(), &["--kills", "2", "--workload", "tpcc", "--clients", "2"]);
    assert!(ok, "{r:#}");
    assert_survived(&r, 2);
    assert!(r["acknowledged_commits"]["new order"].as_u64().unwrap() > 0, "{r:#}");
    // TPC-C has no savepoint legs; the prepared transactions run beside it.
    assert!(r["acknowledged_commits"]["prepared transaction"].as_u64().unwrap_or(0) > 0, "{r:#}");
}

/// `--power-loss`: cuts aimed at each phase in turn, each one keeping, losing or tearing the
/// unsynced writes, and nothing acknowledged is lost; the same run on a disk whose fsync lies
/// must fail, or the test could not tell.
#[test]
fn power_loss_keeps_every_acknowledged_commit_and_a_lying_fsync_is_caught() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, r) = torture(&tmp.path().join("a"), &["--power-loss", "--kills", "4", "--seed", "7"]);
    assert!(ok, "{r:#}");
    assert_survived(&r, 4);
    assert_eq!(r["mode"], "power-loss");
    let inside: u64 = r["kills_inside_phase"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert!(inside >= 1, "no cut landed inside the phase it aimed at: {r:#}");

    let (ok, r) = torture(&tmp.path().join("b"), &["--power-loss", "--lying-fsync", "--kills", "3", "--seed", "7"]);
    assert!(!ok, "a disk that ignores fsync must lose something: {r:#}");
    assert!(r["anomaly_count"].as_u64().unwrap() > 0, "{r:#}");
}
