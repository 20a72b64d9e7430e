//! XID wraparound with VACUUM (DESIGN.md §3 and §4 invariant 5; seed 000's anti-wraparound
//! vacuums):
//!
//! * `autovacuum_keeps_relfrozenxid_within_freeze_max_age_past_two_epochs`: with autovacuum on
//!   and a scaled-down `autovacuum_freeze_max_age`, XIDs are burned in steps while a small
//!   workload keeps changing rows, past 2 × 2^32 (into the third epoch). Anti-wraparound
//!   autovacuums keep every table's relfrozenxid age within `autovacuum_freeze_max_age` plus
//!   one step (the XIDs consumed while one vacuum is due); no row is lost or changed; CLOG is
//!   truncated as the database frozen XID advances; `check` is clean at the end.
//! * `manual_vacuum_restores_service_after_the_stop_limit`: with autovacuum off, XIDs run up to
//!   the stop limit, where a writing transaction is refused with a clear error; a database-wide
//!   VACUUM freezes the old rows, advances the frozen XID and writes work again.

use std::time::{Duration, Instant};

use settledb::{Column, Config, Database, Error, Schema, TableOptions, Type, VacuumParams, Value};

fn schema() -> Schema {
    let col = |n: &str, ty| Column { name: n.into(), ty, nullable: false };
    Schema { columns: vec![col("id", Type::Int4), col("val", Type::Int8)] }
}

fn sum(db: &Database) -> (usize, i64) {
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    let mut n = 0;
    let mut s = 0;
    for r in tx.scan(&t).unwrap() {
        let (_, v) = r.unwrap();
        n += 1;
        if let Value::Int8(x) = v[1] {
            s += x;
        }
    }
    (n, s)
}

fn max_age(db: &Database) -> u64 {
    let next = db.next_xid().xid().0;
    db.tables().iter().map(|t| u64::from(next.wrapping_sub(t.relfrozenxid().0))).max().unwrap_or(0)
}

#[test]
fn autovacuum_keeps_relfrozenxid_within_freeze_max_age_past_two_epochs() {
    const FREEZE_MAX_AGE: u64 = 1_000_000_000;
    const STEP: u64 = 500_000_000;
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_pairs([
        ("autovacuum", "on"),
        ("autovacuum_naptime", "1s"),
        ("autovacuum_freeze_max_age", "1000000000"),
        ("vacuum_freeze_min_age", "100000"),
        ("vacuum_freeze_table_age", "500000000"),
        ("fsync", "off"),
        ("log_autovacuum_min_duration", "0"),
    ])
    .unwrap();
    let db = Database::open(dir.path(), config).unwrap();
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", schema(), opts).unwrap();
    let mut tx = db.begin().unwrap();
    for i in 0..500 {
        tx.insert(&t, &[Value::Int4(i), Value::Int8(0)]).unwrap();
    }
    tx.commit().unwrap();
    let pk = db.index("t_pkey").unwrap();
    let mut expected_sum = 0i64;
    let mut worst = 0u64;
    let target = 2 * (1u64 << 32) + STEP;
    let mut step = 0i32;
    while db.next_xid().0 < target {
        db.consume_xids(STEP).unwrap();
        worst = worst.max(max_age(&db));
        // A little work in the new XID range: update ten rows, insert one.
        let mut tx = db.begin().unwrap();
        for k in 0..10 {
            let id = (step * 10 + k) % 500;
            tx.update_by_key(&pk, &[Value::Int4(id)], |r| {
                let mut r = r.to_vec();
                r[1] = Value::Int8(match r[1] {
                    Value::Int8(x) => x + 1,
                    _ => 0,
                });
                Ok(r)
            })
            .unwrap();
            expected_sum += 1;
        }
        tx.commit().unwrap();
        // Autovacuum must bring every table back under autovacuum_freeze_max_age.
        let deadline = Instant::now() + Duration::from_secs(60);
        while max_age(&db) > FREEZE_MAX_AGE {
            assert!(Instant::now() < deadline, "step {step}: no anti-wraparound vacuum; ages {}", max_age(&db));
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(sum(&db), (500, expected_sum), "step {step}");
        step += 1;
    }
    assert!(db.next_xid().epoch() >= 2, "the test must reach the third epoch");
    assert!(worst <= FREEZE_MAX_AGE + STEP, "relfrozenxid age reached {worst}");
    let stats = db.autovacuum_stats();
    // Each table needs one anti-wraparound vacuum every other step.
    assert!(stats.wraparound_vacuums >= u64::from(step as u32) / 2, "{stats:?}");
    let log = db.take_log().join("");
    assert!(log.contains("automatic aggressive vacuum to prevent wraparound of table \"settledb.public.t\""), "{log}");
    let report = settledb::check::check_database(&db).unwrap();
    assert!(report.is_clean(), "{report}");
    // CLOG keeps only what the frozen XID still needs: a few segments, not 2^33 XIDs' worth.
    let clog_files = std::fs::read_dir(dir.path().join("pg_xact")).map(|d| d.count()).unwrap_or(0);
    assert!(clog_files <= 300, "{clog_files} CLOG segments left");
    db.close().unwrap();
}

#[test]
fn manual_vacuum_restores_service_after_the_stop_limit() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_pairs([("autovacuum", "off"), ("fsync", "off")]).unwrap();
    let db = Database::open(dir.path(), config).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    for i in 0..100 {
        tx.insert(&t, &[Value::Int4(i), Value::Int8(1)]).unwrap();
    }
    tx.commit().unwrap();
    // Burn XIDs until the stop limit refuses more.
    loop {
        match db.consume_xids(100_000_000) {
            Ok(_) => {}
            Err(Error::WraparoundStop { .. }) => break,
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    let mut tx = db.begin().unwrap();
    let e = tx.insert(&t, &[Value::Int4(1000), Value::Int8(1)]).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::WraparoundStop { .. }), "{msg}");
    assert!(msg.contains("VACUUM"), "the error must tell the user what to do: {msg}");
    drop(tx);
    assert_eq!(sum(&db), (100, 100), "reads keep working");
    // VACUUM needs no XID: run it database-wide, as the error says.
    let reports = db.vacuum(None, &VacuumParams::default()).unwrap();
    assert!(reports.iter().all(|r| r.aggressive), "old tables are vacuumed aggressively");
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(1000), Value::Int8(1)]).unwrap();
    tx.commit().unwrap();
    assert_eq!(sum(&db), (101, 101));
    let report = settledb::check::check_database(&db).unwrap();
    assert!(report.is_clean(), "{report}");
}

/// Regression (found by `settle bench aging`): once VACUUM truncated the CLOG segment holding
/// the XID that created an index, the index was judged not yet visible (CLOG read "aborted")
/// and every keyed access silently became a sequential scan.
#[test]
fn index_stays_usable_after_clog_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let db =
        Database::open(dir.path(), Config::from_pairs([("autovacuum", "off"), ("fsync", "off")]).unwrap()).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(1), Value::Int8(1)]).unwrap();
    tx.commit().unwrap();
    let ix = db.create_index("t_id", "t", &["id"], true).unwrap();
    let lookup = |db: &Database| {
        let before = db.table_stats(&t);
        let mut tx = db.begin().unwrap();
        let found = tx.get(&ix, &[Value::Int4(1)]).unwrap().is_some();
        tx.commit().unwrap();
        let after = db.table_stats(&t);
        (found, after.idx_scan - before.idx_scan, after.seq_scan - before.seq_scan)
    };
    assert_eq!(lookup(&db), (true, 1, 0));
    db.consume_xids(3_000_000).unwrap();
    db.checkpoint().unwrap();
    db.vacuum(None, &VacuumParams { freeze: true, ..Default::default() }).unwrap();
    let clog_segments = std::fs::read_dir(dir.path().join("pg_xact")).unwrap().count();
    assert!(clog_segments < 3, "CLOG should have been truncated ({clog_segments} segments)");
    assert_eq!(lookup(&db), (true, 1, 0), "the index must still be used");
}
