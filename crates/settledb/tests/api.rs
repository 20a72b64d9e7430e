//! The public API end to end on real files: DDL, row operations, restart, crash recovery.

use settledb::{Column, Config, Database, Schema, TableOptions, Type, Value};

fn accounts_schema() -> Schema {
    let col = |n: &str, ty| Column { name: n.into(), ty, nullable: false };
    Schema {
        columns: vec![
            col("aid", Type::Int4),
            col("bid", Type::Int4),
            col("abalance", Type::Int4),
            col("filler", Type::Text),
        ],
    }
}

fn row(aid: i32, bal: i32) -> Vec<Value> {
    vec![Value::Int4(aid), Value::Int4(1), Value::Int4(bal), Value::Text(" ".repeat(84))]
}

fn balances(db: &Database) -> Vec<(i32, i32)> {
    let t = db.table("accounts").unwrap();
    let mut tx = db.begin().unwrap();
    let mut v: Vec<(i32, i32)> = tx
        .scan(&t)
        .unwrap()
        .map(|r| {
            let (_, vals) = r.unwrap();
            match (&vals[0], &vals[2]) {
                (Value::Int4(a), Value::Int4(b)) => (*a, *b),
                other => panic!("unexpected row {other:?}"),
            }
        })
        .collect();
    v.sort();
    v
}

#[test]
fn rows_survive_clean_restart_and_crash() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let t = db.create_table("accounts", accounts_schema(), TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    let mut tids = Vec::new();
    for i in 0..1000 {
        tids.push(tx.insert(&t, &row(i, 0)).unwrap());
    }
    tx.commit().unwrap();
    // 61 rows of 121 bytes fit a page, as in PostgreSQL.
    assert_eq!(db.table_pages(&t).unwrap(), 1000u32.div_ceil(61));

    let mut tx = db.begin().unwrap();
    for (i, tid) in tids.iter().enumerate().take(100) {
        let new = tx
            .update_with(&t, *tid, |r| {
                let mut r = r.to_vec();
                r[2] = Value::Int4(i as i32 + 1);
                Ok(r)
            })
            .unwrap();
        assert!(new.is_some());
    }
    assert!(tx.delete(&t, tids[999]).unwrap());
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(5000, 1)).unwrap();
    tx.rollback().unwrap();

    let expected: Vec<(i32, i32)> = (0..999).map(|i| (i, if i < 100 { i + 1 } else { 0 })).collect();
    assert_eq!(balances(&db), expected);
    db.close().unwrap();

    let db = Database::open(dir.path(), Config::default()).unwrap();
    assert_eq!(balances(&db), expected, "after a clean restart");
    let t = db.table("accounts").unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(7000, 7)).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(8000, 8)).unwrap();
    drop(tx); // rolled back
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(9000, 9)).unwrap();
    std::mem::forget(tx); // in progress at the crash
    db.abandon();

    let db = Database::open(dir.path(), Config::default()).unwrap();
    assert!(db.recovery_report().records_replayed > 0);
    let mut expected = expected;
    expected.push((7000, 7));
    assert_eq!(balances(&db), expected, "after crash recovery");
    let report = settledb::check::check_database(&db).unwrap();
    assert!(report.is_clean(), "check after recovery:\n{report}");
    db.close().unwrap();
}
