//! Regression tests for engine bugs found by the integration tests; each says what found it.

use settledb::{Column, Config, Database, Schema, TableOptions, Type, Value};

/// Found by `crash.rs` (`uncommitted_pages_on_disk_stay_invisible`, which hung): an update
/// whose new version does not fit on the old version's page asked for another page with room
/// for the *old* version plus 64 bytes. When the target page had that much room but not
/// enough for the (much larger) new version, the update asked again for the same page,
/// forever.
#[test]
fn update_to_a_much_larger_row_moves_it_to_a_page_with_room() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let schema = Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "note".into(), ty: Type::Text, nullable: false },
        ],
    };
    let t = db.create_table("t", schema, TableOptions::default()).unwrap();
    let row = |id: i32, len: usize| vec![Value::Int4(id), Value::Text("n".repeat(len))];
    // Fill block 0 and most of block 1 with small rows (about 140 bytes each with the line
    // pointer), leaving block 1 with a few hundred bytes free: room for a small version, not
    // for a 2000-byte one.
    let mut tx = db.begin().unwrap();
    let mut tids = Vec::new();
    let mut id = 0;
    loop {
        let tid = tx.insert(&t, &row(id, 100)).unwrap();
        id += 1;
        if tid.block.0 == 1 && tid.offset.0 >= 55 {
            break;
        }
        tids.push(tid);
    }
    tx.commit().unwrap();
    assert_eq!(db.table_pages(&t).unwrap(), 2);
    let victim = tids[0];
    assert_eq!(victim.block.0, 0);

    let mut tx = db.begin().unwrap();
    let new = tx.update(&t, victim, &row(0, 2000)).unwrap().expect("the row exists");
    tx.commit().unwrap();
    assert_eq!(new.block.0, 2, "neither block 0 nor block 1 has room for 2000 bytes");
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.fetch(&t, new).unwrap(), Some(row(0, 2000)));
    assert_eq!(tx.fetch(&t, victim).unwrap(), None);
    drop(tx);
    db.close().unwrap();
}

/// Found by `crash.rs` (`uncommitted_pages_on_disk_stay_invisible`: committed rows vanished
/// after recovery). Pruning walked a HOT chain past a live root into the heap-only version an
/// aborted update had left, found that version DEAD (its inserter aborted), and removed the
/// chain "up to the last dead member": the root, which is the row's only live version, became
/// LP_DEAD. PostgreSQL's `heap_prune_chain` stops walking at a LIVE (or in-progress) member.
/// No crash is needed: a rolled-back HOT update followed by pruning is enough.
#[test]
fn pruning_after_an_aborted_hot_update_keeps_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let schema = Schema { columns: vec![Column { name: "id".into(), ty: Type::Int4, nullable: false }] };
    let t = db.create_table("t", schema, TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    let tid = tx.insert(&t, &[Value::Int4(1)]).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    let new = tx.update(&t, tid, &[Value::Int4(2)]).unwrap().unwrap();
    assert_eq!(new.block, tid.block, "a HOT update on the same page");
    tx.rollback().unwrap();

    db.prune_page(&t, tid.block.0).unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.fetch(&t, tid).unwrap(), Some(vec![Value::Int4(1)]), "the committed version survives pruning");
    let rows: Vec<_> = tx.scan(&t).unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(rows, vec![(tid, vec![Value::Int4(1)])]);
    drop(tx);
    db.close().unwrap();
}

/// Found by `settle stress`: DROP INDEX took neither the table's maintenance lock nor its
/// write lock, and did not wait for scans, so a VACUUM bulk-deleting from the index, a writer
/// adding an entry to it, or a reader scanning it could find its file gone ("could not open
/// file … relation file does not exist"). Writers, scans and VACUUM run beside CREATE/DROP
/// INDEX here; none may fail, and a scan through a dropped index's handle says the index is
/// gone.
#[test]
fn drop_index_waits_for_writers_scans_and_vacuum() {
    use settledb::{Error, KeyBound, ScanDirection, VacuumParams};
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let schema = Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "v".into(), ty: Type::Int4, nullable: false },
        ],
    };
    let t = db.create_table("t", schema, TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    let rows: Vec<Vec<Value>> = (0..2000).map(|i| vec![Value::Int4(i), Value::Int4(0)]).collect();
    tx.insert_many(&t, &rows).unwrap();
    tx.commit().unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut tx = db.begin().unwrap();
                tx.insert(&t, &[Value::Int4(10_000 + i), Value::Int4(i)]).unwrap();
                tx.commit().unwrap();
                i += 1;
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                db.vacuum(Some("t"), &VacuumParams::default()).unwrap();
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let Ok(ix) = db.index("t_v") else { continue };
                let mut tx = db.begin().unwrap();
                match tx.range(&ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward, None) {
                    Ok(_) | Err(Error::NotFound(_)) => {}
                    Err(e) => panic!("scan beside DROP INDEX: {e}"),
                }
            }
        });
        let ddl = (|| -> settledb::Result<()> {
            for _ in 0..30 {
                db.create_index("t_v", "t", &["v"], false)?;
                std::thread::sleep(std::time::Duration::from_millis(5));
                db.drop_index("t_v")?;
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        ddl.expect("CREATE/DROP INDEX beside writers, scans and VACUUM");
    });
    assert!(settledb::check::check_database(&db).unwrap().is_clean());
    db.close().unwrap();
}

/// Found by `decoding_model.rs` (its `check` after a round): CREATE TABLE set the new table's
/// relfrozenxid to the creating transaction's XID, but a transaction already running (an
/// older XID) may write into the table once it exists, leaving a tuple whose xmin precedes
/// relfrozenxid (invariant 5; a later CLOG truncation could lose its status). It is now the
/// oldest running XID, as PostgreSQL's RecentXmin.
#[test]
fn a_table_created_while_a_transaction_runs_takes_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config::default()).unwrap();
    let schema = || Schema { columns: vec![Column { name: "id".into(), ty: Type::Int4, nullable: false }] };
    let before = db.create_table("before", schema(), TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&before, &[Value::Int4(1)]).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    assert!(t.relfrozenxid().precedes_or_equals(tx.xid().unwrap()), "relfrozenxid {:?}", t.relfrozenxid());
    tx.insert(&t, &[Value::Int4(1)]).unwrap();
    tx.commit().unwrap();
    let report = settledb::check::check_database(&db).unwrap();
    assert!(report.is_clean(), "{report}");
    db.close().unwrap();
}

/// Found writing `decoding_model.rs` (whose DROP TABLEs had to avoid it): a table created
/// before a slot's restart point, written, then dropped before the slot was read, stopped
/// decoding for good ("relation with OID … is not known"): the decoder learned relations only
/// from `pg_class` rows in the WAL it read and from the current catalog. The dropped table's
/// `pg_class` row is still in `pg_class` (the slot's `catalog_xmin` keeps it from VACUUM), and
/// a relation's name and columns never change under its OID, so the decoder reads it there.
#[test]
fn a_table_dropped_before_decoding_reached_its_changes_is_still_decoded() {
    use settledb::db::DecodeLimits;
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config { wal_level: settledb::WalLevel::Logical, autovacuum: false, ..Config::default() };
    let db = Database::open(dir.path(), cfg.clone()).unwrap();
    let schema = Schema { columns: vec![Column { name: "id".into(), ty: Type::Int4, nullable: false }] };
    let t = db.create_table("old", schema, TableOptions::default()).unwrap();
    db.checkpoint().unwrap();
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(7)]).unwrap();
    tx.commit().unwrap();
    db.drop_table("old").unwrap();
    // Also after a restart, and after VACUUM of pg_class (the slot holds its rows back).
    db.close().unwrap();
    let db = Database::open(dir.path(), cfg).unwrap();
    db.vacuum(Some("pg_class"), &settledb::VacuumParams::default()).unwrap();
    let opts = vec![("include-xids".to_string(), Some("0".to_string()))];
    let rows = db.logical_slot_get_changes("s", DecodeLimits::default(), &opts).unwrap().rows;
    let lines: Vec<String> = rows.into_iter().map(|r| String::from_utf8(r.data).unwrap()).collect();
    assert!(lines.contains(&"table public.old: INSERT: id[integer]:7".to_string()), "{lines:?}");
    db.close().unwrap();
}

/// A statistics file of the current version whose counters are fewer than today's (written
/// before some were added) is read, and the fuzz target expects it back in the current
/// layout rather than byte for byte. Found by `cargo fuzz run stats_file` in `.ci/run`: the
/// target asserted an exact round trip for every file of the current version.
#[test]
fn a_statistics_file_with_fewer_counters_is_read_in_the_current_layout() {
    let hex: String = [
        "0153445354030000001700000014000000030000000a00000000000000820000000000000000010000000000002d0000",
        "0000000000c800000000000000160000040000000000000000000000000000000000000000000000000000000000a3a3",
        "a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a3a300002400000000",
        "00000000000000002805000000000000060000000000000026b6030000000000123ddc67466106000000000000000000",
        "000000000000000019000000000000002c19000000",
    ]
    .concat();
    let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    settledb::fuzzing::stats_file(&bytes);
}
