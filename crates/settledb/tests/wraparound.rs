//! XID wraparound protection before VACUUM exists (DESIGN.md §3: xidWarnLimit /
//! xidStopLimit as in PostgreSQL).
//!
//! Rows are written, then XIDs are burned with `Database::consume_xids` toward 2^31 past the
//! database's oldest frozen XID. Past the warn limit every XID assignment warns; at the stop
//! limit a writing transaction is refused with `Error::WraparoundStop` telling the user to
//! VACUUM, while read-only transactions (which take no XID) keep working and every row written
//! before reads back unchanged. The refusal survives a restart, because the limits are
//! recomputed from the catalog's relfrozenxid values, not remembered.
//!
//! Going *through* the stop limit and across 2^32 (into later epochs) needs VACUUM to freeze
//! the old rows and advance relfrozenxid: `tests/vacuum_wraparound.rs` does that, with
//! autovacuum and with a manual VACUUM after the stop limit.

use settledb::{Column, Config, Database, Error, Schema, TableOptions, Type, Value};

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "note".into(), ty: Type::Text, nullable: true },
        ],
    }
}

/// This file tests the limits themselves: no autovacuum may rescue the database here.
fn no_autovacuum() -> Config {
    Config { autovacuum: false, ..Config::default() }
}

fn rows(db: &Database) -> Vec<Vec<Value>> {
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    let mut v: Vec<Vec<Value>> = tx.scan(&t).unwrap().map(|r| r.unwrap().1).collect();
    assert_eq!(tx.xid(), None, "a scan takes no XID");
    v.sort_by_key(|r| match r[0] {
        Value::Int4(i) => i,
        _ => panic!("bad row {r:?}"),
    });
    tx.commit().unwrap();
    v
}

fn assert_refused(e: Error, what: &str) {
    match &e {
        Error::WraparoundStop { .. } => {
            let msg = e.to_string();
            assert!(msg.contains("to avoid wraparound data loss"), "{what}: {msg}");
            assert!(msg.contains("VACUUM"), "{what}: the message tells the user to VACUUM: {msg}");
        }
        other => panic!("{what}: expected WraparoundStop, got {other}"),
    }
}

#[test]
fn stop_limit_refuses_writes_keeps_reads_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), no_autovacuum()).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    let mut tids = Vec::new();
    for i in 0..200 {
        tids.push(tx.insert(&t, &[Value::Int4(i), Value::Text(format!("row {i}"))]).unwrap());
    }
    tx.commit().unwrap();
    // An update and a delete, so that old xmax values must keep reading correctly too.
    let mut tx = db.begin().unwrap();
    tx.update(&t, tids[0], &[Value::Int4(0), Value::Text("updated".into())]).unwrap().unwrap();
    assert!(tx.delete(&t, tids[199]).unwrap());
    tx.commit().unwrap();
    let before = rows(&db);
    assert_eq!(before.len(), 199);

    let limits = db.xid_limits();
    let oldest = limits.oldest_xid.0;
    assert_eq!(limits.wrap_limit.0, oldest + (1 << 31) - 1, "wrap limit is 2^31 - 1 past the oldest frozen XID");
    assert_eq!(limits.stop_limit.0, limits.wrap_limit.0 - 3_000_000);
    assert_eq!(limits.warn_limit.0, limits.wrap_limit.0 - 40_000_000);

    // Just below the warn limit: no warning yet.
    let next = db.next_xid().xid().0;
    db.consume_xids(u64::from(limits.warn_limit.0 - next - 1)).unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(1000), Value::Text("last quiet write".into())]).unwrap();
    tx.commit().unwrap();
    assert_eq!(db.xid_warnings(), 0, "the XID just below the warn limit does not warn");

    // At the warn limit each XID assignment warns, and writes still work.
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(1001), Value::Text("warned write".into())]).unwrap();
    tx.commit().unwrap();
    assert_eq!(db.xid_warnings(), 1);
    let w = db.last_xid_warning().expect("a warning was recorded");
    assert!(w.contains("database must be vacuumed within") && w.contains("VACUUM"), "{w}");

    // Burn to the stop limit: consume_xids itself stops there.
    let e = db.consume_xids(u64::MAX / 2).unwrap_err();
    assert_refused(e, "consume_xids past the stop limit");
    assert_eq!(db.next_xid().xid(), limits.stop_limit);
    assert!(db.xid_warnings() > 1);

    let mut tx = db.begin().unwrap();
    let e = tx.insert(&t, &[Value::Int4(2000), Value::Text("refused".into())]).unwrap_err();
    assert_refused(e, "insert at the stop limit");
    drop(tx);
    let mut tx = db.begin().unwrap();
    assert_refused(tx.delete(&t, tids[1]).unwrap_err(), "delete at the stop limit");
    drop(tx);
    match db.create_table("u", schema(), TableOptions::default()) {
        Err(e) => assert_refused(e, "CREATE TABLE at the stop limit"),
        Ok(_) => panic!("CREATE TABLE needs an XID and must be refused at the stop limit"),
    }
    assert!(db.table("u").is_err(), "the refused CREATE TABLE left no table behind");

    // Reads still work and see every row written before, unchanged.
    let mut expected = before.clone();
    expected.push(vec![Value::Int4(1000), Value::Text("last quiet write".into())]);
    expected.push(vec![Value::Int4(1001), Value::Text("warned write".into())]);
    assert_eq!(rows(&db), expected);
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.fetch(&t, tids[5]).unwrap(), Some(vec![Value::Int4(5), Value::Text("row 5".into())]));
    assert_eq!(tx.fetch(&t, tids[199]).unwrap(), None, "the deleted row stays deleted");
    tx.commit().unwrap();
    db.close().unwrap();

    // After a restart the limits are recomputed from the catalog: still refused.
    let db = Database::open(dir.path(), no_autovacuum()).unwrap();
    assert_eq!(db.xid_limits(), limits, "limits recomputed from relfrozenxid");
    assert_eq!(db.next_xid().xid(), limits.stop_limit);
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    assert_refused(tx.insert(&t, &[Value::Int4(3000), Value::Null]).unwrap_err(), "insert after restart");
    drop(tx);
    assert_eq!(rows(&db), expected, "rows after restart");
    db.abandon();

    // And after a crash (recovery replays nothing that moves the limits).
    let db = Database::open(dir.path(), no_autovacuum()).unwrap();
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    assert_refused(tx.insert(&t, &[Value::Int4(3000), Value::Null]).unwrap_err(), "insert after crash");
    drop(tx);
    assert_eq!(rows(&db), expected, "rows after crash recovery");
    let report = settledb::check::check_database(&db).unwrap();
    assert!(report.is_clean(), "check after the stop limit:\n{report}");
    db.close().unwrap();
}
