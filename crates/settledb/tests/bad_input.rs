//! Bad input and damaged files: each case must end in a clear error naming what is wrong and
//! where (relation and block, file, column, parameter), never a panic, and must lose nothing
//! that was committed.

use std::path::{Path, PathBuf};

use settledb::page::BLCKSZ;
use settledb::{BlockNumber, Column, Config, Database, Error, Schema, Table, TableOptions, Tid, Type, Value};

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "note".into(), ty: Type::Text, nullable: true },
        ],
    }
}

fn row(i: i32) -> Vec<Value> {
    vec![Value::Int4(i), Value::Text(format!("row {i} {}", "p".repeat(100)))]
}

/// A cleanly closed database with table `t` of `n` rows (about 60 per page); returns the
/// directory, the table's OID and the rows' TIDs.
fn closed_db(n: i32) -> (tempfile::TempDir, settledb::Oid, Vec<Tid>) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    let tids = (0..n).map(|i| tx.insert(&t, &row(i)).unwrap()).collect();
    tx.commit().unwrap();
    let oid = t.oid();
    db.close().unwrap();
    (dir, oid, tids)
}

fn heap_file(dir: &Path, oid: settledb::Oid) -> PathBuf {
    dir.join("base").join(oid.0.to_string())
}

fn scan_all(db: &Database, t: &Table) -> Vec<settledb::Result<(Tid, Vec<Value>)>> {
    let mut tx = db.begin().unwrap();
    let v = tx.scan(t).unwrap().collect();
    tx.commit().unwrap();
    v
}

#[test]
fn corrupt_heap_page_names_relation_and_block() {
    let (dir, oid, tids) = closed_db(150);
    let path = heap_file(dir.path(), oid);
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() >= 3 * BLCKSZ);
    bytes[BLCKSZ + 5000] ^= 0xFF; // inside a tuple of block 1
    std::fs::write(&path, &bytes).unwrap();

    let db = Database::open(dir.path(), Config::default()).unwrap();
    let t = db.table("t").unwrap();
    let results = scan_all(&db, &t);
    let ok = results.iter().take_while(|r| r.is_ok()).count();
    assert_eq!(ok, tids.iter().filter(|t| t.block == BlockNumber(0)).count(), "block 0 reads fine");
    let e = results.into_iter().find_map(|r| r.err()).expect("the scan reports block 1");
    let msg = e.to_string();
    match e {
        Error::Corrupted { rel, block, .. } => assert_eq!((rel, block), (oid, BlockNumber(1))),
        other => panic!("expected Corrupted, got {other}"),
    }
    assert!(msg.contains("block 1") && msg.contains(&oid.0.to_string()) && msg.contains("checksum"), "{msg}");
    // Other pages stay readable by TID; the damaged one keeps failing the same way.
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.fetch(&t, tids[0]).unwrap(), Some(row(0)));
    let last = *tids.last().unwrap();
    assert_eq!(last.block, BlockNumber(2));
    assert_eq!(tx.fetch(&t, last).unwrap(), Some(row(149)));
    let on_1 = tids.iter().find(|t| t.block == BlockNumber(1)).unwrap();
    assert!(matches!(tx.fetch(&t, *on_1), Err(Error::Corrupted { block: BlockNumber(1), .. })));
    assert!(matches!(tx.delete(&t, *on_1), Err(Error::Corrupted { block: BlockNumber(1), .. })));
    drop(tx);
    db.close().unwrap();
}

#[test]
fn corrupt_wal_record_ends_recovery_at_the_last_valid_record() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let marker = |i: i32| vec![Value::Int4(i), Value::Text(format!("MARKER-{i}-{}", "m".repeat(40)))];
    for i in 1..=4 {
        let mut tx = db.begin().unwrap();
        tx.insert(&t, &marker(i)).unwrap();
        tx.commit().unwrap();
    }
    db.abandon(); // a crash: no checkpoint after the four commits
                  // Corrupt one byte of transaction 3's insert record, in the middle of the WAL.
    let wal = dir.path().join("pg_wal");
    let seg = std::fs::read_dir(&wal).unwrap().map(|e| e.unwrap().path()).max().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let needle = b"MARKER-3-";
    let at = bytes.windows(needle.len()).position(|w| w == needle).expect("record 3 in the WAL");
    bytes[at + 3] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();

    let db = Database::open(dir.path(), Config::default()).unwrap();
    let report = db.recovery_report().clone();
    let reason = report.stop_reason.clone().unwrap_or_default();
    assert!(reason.to_lowercase().contains("checksum") || reason.contains("CRC"), "stop reason: {reason}");
    let t = db.table("t").unwrap();
    let got: Vec<Vec<Value>> = scan_all(&db, &t).into_iter().map(|r| r.unwrap().1).collect();
    assert_eq!(got, vec![marker(1), marker(2)], "commits before the bad record survive; none after it replays");
    // The database continues from there and keeps new work.
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &marker(5)).unwrap();
    tx.commit().unwrap();
    db.close().unwrap();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let t = db.table("t").unwrap();
    let got: Vec<Vec<Value>> = scan_all(&db, &t).into_iter().map(|r| r.unwrap().1).collect();
    assert_eq!(got, vec![marker(1), marker(2), marker(5)]);
    db.close().unwrap();
}

#[test]
fn truncated_relation_file_is_reported() {
    let (dir, oid, tids) = closed_db(150);
    let path = heap_file(dir.path(), oid);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len((BLCKSZ + BLCKSZ / 2) as u64).unwrap(); // block 1 cut in half, block 2 gone
    drop(f);
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let t = db.table("t").unwrap();
    let results = scan_all(&db, &t);
    let e = results.into_iter().find_map(|r| r.err()).expect("a scan must not silently skip the cut block");
    match &e {
        Error::Corrupted { rel, block, .. } => assert_eq!((*rel, *block), (oid, BlockNumber(1)), "{e}"),
        other => panic!("expected Corrupted naming block 1, got {other}"),
    }
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.fetch(&t, tids[0]).unwrap(), Some(row(0)), "block 0 is intact");
    drop(tx);
    db.close().unwrap();
}

#[test]
fn control_file_of_another_version_or_garbage() {
    let (dir, _, _) = closed_db(1);
    let control = dir.path().join("global").join("pg_control");
    let good = std::fs::read(&control).unwrap();
    let mut other = good.clone();
    other[4..8].copy_from_slice(&99u32.to_le_bytes()); // format version; CRC not recomputed
    std::fs::write(&control, &other).unwrap();
    match Database::open(dir.path(), Config::default()) {
        Err(Error::VersionMismatch { path, found, expected }) => {
            assert_eq!((path, found, expected), (control.clone(), 99, 1));
        }
        Err(e) => panic!("expected VersionMismatch, got {e}"),
        Ok(_) => panic!("opened a data directory of another version"),
    }
    std::fs::write(&control, b"this is not a control file, just some garbage bytes of text").unwrap();
    match Database::open(dir.path(), Config::default()) {
        Err(e @ Error::CorruptFile { .. }) => assert!(e.to_string().contains("pg_control"), "{e}"),
        Err(e) => panic!("expected CorruptFile, got {e}"),
        Ok(_) => panic!("opened with a garbage control file"),
    }
    let mut flipped = good.clone();
    flipped[30] ^= 0x10; // checkpoint LSN: CRC mismatch
    std::fs::write(&control, &flipped).unwrap();
    assert!(matches!(Database::open(dir.path(), Config::default()), Err(Error::CorruptFile { .. })));
    // Restored, the directory opens with its data.
    std::fs::write(&control, &good).unwrap();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(scan_all(&db, &t).len(), 1);
    db.close().unwrap();
}

#[test]
fn bad_rows_are_rejected_naming_the_column() {
    let (dir, _, tids) = closed_db(3);
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let t = db.table("t").unwrap();
    let invalid = |r: settledb::Result<Tid>| match r {
        Err(Error::InvalidInput(m)) => m,
        Err(e) => panic!("expected InvalidInput, got {e}"),
        Ok(tid) => panic!("accepted a bad row at {tid:?}"),
    };
    let mut tx = db.begin().unwrap();
    let m = invalid(tx.insert(&t, &[Value::Text("one".into()), Value::Null]));
    assert_eq!(m, "column \"id\" is of type int4 but the value is text");
    let m = invalid(tx.insert(&t, &[Value::Null, Value::Null]));
    assert_eq!(m, "null value in column \"id\" violates not-null constraint");
    let m = invalid(tx.insert(&t, &[Value::Int4(1)]));
    assert_eq!(m, "row has 1 values but the table has 2 columns");
    let m = invalid(tx.insert(&t, &[Value::Int4(1), Value::Text("x".repeat(9000))]));
    assert!(m.starts_with("row is too big: size ") && m.ends_with("maximum size 8160"), "{m}");
    let e = tx.update(&t, tids[0], &[Value::Int4(0), Value::Int4(5)]).unwrap_err();
    assert!(matches!(&e, Error::InvalidInput(m) if m.contains("column \"note\"")), "{e}");
    // The transaction is still usable and the committed rows are intact.
    tx.insert(&t, &row(10)).unwrap();
    tx.commit().unwrap();
    let got: Vec<Vec<Value>> = scan_all(&db, &t).into_iter().map(|r| r.unwrap().1).collect();
    assert_eq!(got, vec![row(0), row(1), row(2), row(10)]);
    db.close().unwrap();
}

#[test]
fn bad_configuration_is_rejected() {
    let e = Config::from_pairs([("shared_bufers", "1GB")]).unwrap_err();
    assert_eq!(e.to_string(), "invalid configuration: unrecognized configuration parameter \"shared_bufers\"");
    for (name, value) in [
        ("shared_buffers", "64kB"),
        ("shared_buffers", "lots"),
        ("synchronous_commit", "maybe"),
        ("checkpoint_timeout", "5 fortnights"),
        ("wal_segment_size", "3MB"),
        ("autovacuum_freeze_max_age", "-1"),
    ] {
        match Config::from_pairs([(name, value)]) {
            Err(e @ Error::Config(_)) => {
                let m = e.to_string();
                assert!(m.contains(name) && m.contains(value), "{m}");
            }
            Err(e) => panic!("{name}={value}: expected Error::Config, got {e}"),
            Ok(_) => panic!("{name}={value} was accepted"),
        }
    }
}

#[test]
fn bad_table_names() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    for name in ["", "1abc", "has space", "semi;colon", &"x".repeat(64)] {
        match db.create_table(name, schema(), TableOptions::default()) {
            Err(Error::InvalidInput(m)) => assert!(m.contains("invalid table name"), "{m}"),
            Err(e) => panic!("{name:?}: expected InvalidInput, got {e}"),
            Ok(_) => panic!("table name {name:?} accepted"),
        }
    }
    db.create_table("t", schema(), TableOptions::default()).unwrap();
    match db.create_table("t", schema(), TableOptions::default()) {
        Err(e @ Error::AlreadyExists(_)) => assert_eq!(e.to_string(), "relation \"t\" already exists"),
        Err(e) => panic!("expected AlreadyExists, got {e}"),
        Ok(_) => panic!("duplicate table created"),
    }
    match db.table("nope") {
        Err(e @ Error::NotFound(_)) => assert_eq!(e.to_string(), "relation \"nope\" does not exist"),
        Err(e) => panic!("expected NotFound, got {e}"),
        Ok(_) => panic!("unknown table found"),
    }
    assert!(matches!(db.drop_table("nope"), Err(Error::NotFound(_))));
    db.close().unwrap();
}

#[test]
fn tids_out_of_range_find_nothing() {
    let (dir, _, tids) = closed_db(3);
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    for tid in [Tid::new(1, 1), Tid::new(u32::MAX - 1, 1), Tid::new(0, 0), Tid::new(0, 4), Tid::new(0, u16::MAX)] {
        assert_eq!(tx.fetch(&t, tid).unwrap(), None, "fetch {tid:?}");
        assert_eq!(tx.update(&t, tid, &row(9)).unwrap(), None, "update {tid:?}");
        assert!(!tx.delete(&t, tid).unwrap(), "delete {tid:?}");
    }
    tx.commit().unwrap();
    let got: Vec<Tid> = scan_all(&db, &t).into_iter().map(|r| r.unwrap().0).collect();
    assert_eq!(got, tids, "nothing was changed");
    db.close().unwrap();
}

#[test]
fn non_empty_directory_that_is_not_a_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"my files").unwrap();
    match Database::open(dir.path(), Config::default()) {
        Err(Error::InvalidInput(m)) => {
            assert!(m.contains(&dir.path().display().to_string()) && m.contains("not a settledb data directory"), "{m}")
        }
        Err(e) => panic!("expected InvalidInput, got {e}"),
        Ok(_) => panic!("opened a directory holding other files"),
    }
    assert_eq!(std::fs::read(dir.path().join("notes.txt")).unwrap(), b"my files", "nothing touched");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "nothing created");
}
