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

/// Index entries whose rows are dead to everyone are killed (LP_DEAD) by the first lookup that
/// finds them so, and later lookups skip them without visiting the heap.
#[test]
fn lookups_kill_dead_index_entries_so_later_lookups_read_few() {
    use settledb::{KeyBound, ScanDirection};
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let col = |n: &str| Column { name: n.into(), ty: Type::Int4, nullable: false };
    let t = db.create_table("t", Schema { columns: vec![col("id"), col("v")] }, TableOptions::default()).unwrap();
    let pk = db.create_index("t_pkey", "t", &["id"], true).unwrap();
    let by_v = db.create_index("t_v", "t", &["v"], false).unwrap();
    let mut tx = db.begin().unwrap();
    let mut tid = tx.insert(&t, &[Value::Int4(1), Value::Int4(0)]).unwrap();
    tx.insert(&t, &[Value::Int4(2), Value::Int4(7)]).unwrap();
    tx.commit().unwrap();
    // 2,000 non-HOT updates (v is indexed): 2,000 dead entries for id 1, 1,000 for each v.
    let mut tx = db.begin().unwrap();
    for i in 1..=2000 {
        tid = tx.update(&t, tid, &[Value::Int4(1), Value::Int4(i % 2)]).unwrap().unwrap();
    }
    tx.commit().unwrap();
    let one = || KeyBound::Included(vec![Value::Int4(1)]);
    let lookup = |db: &Database| {
        let before = db.stats().idx_tup_read;
        let mut tx = db.begin().unwrap();
        let rows = tx.range(&pk, one(), one(), ScanDirection::Forward, None).unwrap();
        assert_eq!(rows, vec![(tid, vec![Value::Int4(1), Value::Int4(0)])]);
        tx.commit().unwrap();
        db.stats().idx_tup_read - before
    };
    let first = lookup(&db);
    assert!(first > 2000, "the first lookup wades through every version: {first}");
    let second = lookup(&db);
    assert!(second < 10, "the first lookup killed the dead entries: {second}");
    // Index-only scans kill too, in both directions.
    let index_only = |db: &Database, dir| {
        let before = db.stats().idx_tup_read;
        let mut tx = db.begin().unwrap();
        let keys = tx.index_only(&by_v, KeyBound::Unbounded, KeyBound::Unbounded, dir, None).unwrap();
        assert_eq!(
            keys,
            if dir == ScanDirection::Forward {
                vec![vec![Value::Int4(0)], vec![Value::Int4(7)]]
            } else {
                vec![vec![Value::Int4(7)], vec![Value::Int4(0)]]
            }
        );
        tx.commit().unwrap();
        db.stats().idx_tup_read - before
    };
    assert!(index_only(&db, ScanDirection::Backward) > 2000);
    assert!(index_only(&db, ScanDirection::Forward) < 10);
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&pk, &[Value::Int4(2)]).unwrap().map(|r| r.1), Some(vec![Value::Int4(2), Value::Int4(7)]));
    tx.commit().unwrap();
    let report = settledb::check::check_database(&db).unwrap();
    assert!(report.is_clean(), "check after kills:\n{report}");

    // The hints reach disk with the pages (a checkpoint, then a crash): still valid pages, and
    // the rows are still found.
    db.checkpoint().unwrap();
    db.abandon();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let pk = db.index("t_pkey").unwrap();
    let before = db.stats().idx_tup_read;
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.get(&pk, &[Value::Int4(1)]).unwrap().map(|r| r.1), Some(vec![Value::Int4(1), Value::Int4(0)]));
    tx.commit().unwrap();
    assert!(db.stats().idx_tup_read - before < 10);
    let report = settledb::check::check_database(&db).unwrap();
    assert!(report.is_clean(), "check after recovery:\n{report}");
    db.close().unwrap();
}

/// `wal_keep_size` keeps that much WAL behind the insert position through checkpoints, where
/// without it the segments before the redo pointer go (min_wal_size small: removed, not
/// recycled).
#[test]
fn wal_keep_size_keeps_old_segments_through_checkpoints() {
    let first_segment_kept = |keep: &str| -> bool {
        let dir = tempfile::tempdir().unwrap();
        let pairs = [
            ("wal_segment_size", "1MB"),
            ("min_wal_size", "2MB"),
            ("max_wal_size", "64MB"),
            ("wal_keep_size", keep),
            ("autovacuum", "off"),
        ];
        let db = Database::open(dir.path(), Config::from_pairs(pairs).unwrap()).unwrap();
        let t = db.create_table("accounts", accounts_schema(), TableOptions::default()).unwrap();
        let first: Vec<String> = {
            let mut v: Vec<String> = std::fs::read_dir(dir.path().join("pg_wal"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v.truncate(1);
            v
        };
        // About 8 MB of WAL, with checkpoints along the way.
        for round in 0..8 {
            let mut tx = db.begin().unwrap();
            for i in 0..6000 {
                tx.insert(&t, &row(round * 6000 + i, 0)).unwrap();
            }
            tx.commit().unwrap();
            db.checkpoint().unwrap();
        }
        let kept = dir.path().join("pg_wal").join(&first[0]).exists();
        db.close().unwrap();
        kept
    };
    assert!(!first_segment_kept("0"), "without wal_keep_size the first segment goes");
    assert!(first_segment_kept("64MB"), "wal_keep_size=64MB keeps it");
}

/// A data directory the engine creates is its owner's alone (0700), as `initdb` makes it:
/// the server keeps its roles' password verifiers there.
#[cfg(unix)]
#[test]
fn a_new_data_directory_is_the_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    let db = Database::open(&dir, Config::default()).unwrap();
    drop(db);
    for d in [dir.clone(), dir.join("pg_wal"), dir.join("base")] {
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
}

/// READ COMMITTED: the commands of one statement ([`settledb::Transaction::begin_statement`])
/// read with one snapshot, so a commit between two lookups of one statement is not half seen;
/// the statement sees its own writes, an update still follows a newer committed version of
/// its row, and the snapshot stops holding back the horizon when the statement ends. Outside
/// a statement each command takes a new snapshot, as before.
#[test]
fn a_read_committed_statement_reads_with_one_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config { fsync: false, autovacuum: false, ..Config::default() }).unwrap();
    let opts = TableOptions { primary_key: Some(vec!["aid".into()]), ..TableOptions::default() };
    let t = db.create_table("accounts", accounts_schema(), opts).unwrap();
    let pk = db.index("accounts_pkey").unwrap();
    let mut setup = db.begin().unwrap();
    setup.insert_many(&t, &[row(1, 10), row(2, 10)]).unwrap();
    setup.commit().unwrap();
    let balance = |tx: &mut settledb::Transaction<'_>, aid: i32| match tx.get(&pk, &[Value::Int4(aid)]).unwrap() {
        Some((_, v)) => v[2].clone(),
        None => Value::Null,
    };
    let transfer = |from_bal: i32, to_bal: i32| {
        let mut b = db.begin_with(settledb::IsolationLevel::ReadCommitted).unwrap();
        b.update_by_key(&pk, &[Value::Int4(1)], |_| Ok(row(1, from_bal))).unwrap();
        b.update_by_key(&pk, &[Value::Int4(2)], |_| Ok(row(2, to_bal))).unwrap();
        b.commit().unwrap();
    };

    let mut a = db.begin_with(settledb::IsolationLevel::ReadCommitted).unwrap();
    a.begin_statement();
    assert_eq!(balance(&mut a, 1), Value::Int4(10));
    let held = db.oldest_xmin();
    transfer(5, 15);
    assert_eq!(balance(&mut a, 2), Value::Int4(10), "the statement's snapshot predates the transfer");
    a.insert(&t, &row(3, 1)).unwrap();
    assert_eq!(balance(&mut a, 3), Value::Int4(1), "a statement sees its own earlier writes");
    assert_eq!(db.oldest_xmin(), held, "the statement's snapshot holds the horizon");
    a.end_statement();
    assert_eq!(balance(&mut a, 2), Value::Int4(15), "outside a statement each command reads anew");

    // An update inside a statement still lands on the newest committed version.
    a.begin_statement();
    let (tid, _) = a.get(&pk, &[Value::Int4(1)]).unwrap().unwrap();
    transfer(7, 13);
    let bump = |v: &[Value]| match v[2] {
        Value::Int4(b) => Ok(row(1, b + 100)),
        _ => unreachable!(),
    };
    a.update_with(&t, tid, bump).unwrap().expect("the row is still there");
    a.end_statement();
    a.commit().unwrap();
    assert_ne!(db.oldest_xmin(), held, "nothing holds the horizon once the statements ended");
    assert_eq!(balances(&db), vec![(1, 107), (2, 13), (3, 1)]);
}
