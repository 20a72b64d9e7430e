//! Cumulative statistics end to end (`settledb::stats`): what each kind of change adds to a
//! table's counters once its transaction ends, that a clean shutdown keeps them, and that a
//! crash or a damaged `pg_stat/stats.bin` resets them without stopping the database opening.
//!
//! The workload every test starts from, on `t (id int4 primary key, val int4)`:
//!
//! ```text
//!   T1: insert ids 0..10                          commit
//!   T2: update id 0, 1 (val only: HOT),
//!       update id 2 (id 2 -> 102: new index entry) commit
//!   T3: delete ids 3, 4                           commit
//!   T4: insert id 50                              rollback
//! ```
//!
//! so that `t` has 8 live rows and 6 dead versions (3 old update versions, 2 deleted rows, the
//! rolled-back insert).

use std::path::Path;
use std::sync::Arc;

use settledb::io::fault::{CrashMode, FaultFs};
use settledb::io::FileSystem;
use settledb::{
    Column, Config, Database, Error, Schema, TableOptions, TableStatsSnapshot, Tid, Type, VacuumParams, Value,
};

const DIR: &str = "/data";

fn config() -> Config {
    Config::from_pairs([("checkpoint_timeout", "1d"), ("max_wal_size", "1TB"), ("wal_writer_delay", "10s")]).unwrap()
}

fn open(fs: &Arc<FaultFs>) -> Database {
    Database::open_with_fs(fs.clone(), Path::new(DIR), config()).unwrap()
}

fn stats_file() -> std::path::PathBuf {
    Path::new(DIR).join("pg_stat").join("stats.bin")
}

fn row(id: i32, val: i32) -> Vec<Value> {
    vec![Value::Int4(id), Value::Int4(val)]
}

/// Runs the workload of the module doc; returns the table's counters afterwards.
/// A table's counters without the heap block reads and hits, which depend on what the buffer
/// pool held (they are checked on their own below).
fn stats_of(db: &Database, t: &settledb::Table) -> TableStatsSnapshot {
    TableStatsSnapshot { heap_blks_read: 0, heap_blks_hit: 0, ..db.table_stats(t) }
}

fn workload(db: &Database) -> TableStatsSnapshot {
    let col = |n: &str| Column { name: n.into(), ty: Type::Int4, nullable: false };
    let options = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", Schema { columns: vec![col("id"), col("val")] }, options).unwrap();

    let mut tx = db.begin().unwrap();
    let tids: Vec<Tid> = (0..10).map(|id| tx.insert(&t, &row(id, 0)).unwrap()).collect();
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    tx.update(&t, tids[0], &row(0, 1)).unwrap().unwrap();
    tx.update(&t, tids[1], &row(1, 1)).unwrap().unwrap();
    tx.update(&t, tids[2], &row(102, 1)).unwrap().unwrap();
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    assert!(tx.delete(&t, tids[3]).unwrap());
    assert!(tx.delete(&t, tids[4]).unwrap());
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(50, 0)).unwrap();
    tx.rollback().unwrap();
    stats_of(db, &t)
}

fn expected_after_workload() -> TableStatsSnapshot {
    TableStatsSnapshot {
        n_tup_ins: 11,
        n_tup_upd: 3,
        n_tup_hot_upd: 2,
        n_tup_del: 2,
        n_live_tup: 8,
        n_dead_tup: 6,
        n_mod_since_analyze: 15,
        n_ins_since_vacuum: 10,
        ..TableStatsSnapshot::default()
    }
}

#[test]
fn each_change_counts_once_its_transaction_ends() {
    let fs = FaultFs::new();
    let db = open(&fs);
    assert_eq!(workload(&db), expected_after_workload());
    let t = db.table("t").unwrap();
    // pg_statio_user_tables: every heap page the workload touched was read or found cached.
    let io = db.table_stats(&t);
    assert!(io.heap_blks_hit + io.heap_blks_read > 0, "{io:?}");

    // Counts wait for the end of the transaction.
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(60, 0)).unwrap();
    assert_eq!(stats_of(&db, &t), expected_after_workload(), "nothing applied before commit");
    // A scan and an index lookup; a transaction dropped without commit rolls back.
    assert_eq!(tx.scan(&t).unwrap().count(), 9);
    let pkey = db.index("t_pkey").unwrap();
    assert!(tx.get(&pkey, &[Value::Int4(102)]).unwrap().is_some());
    drop(tx);
    let s = stats_of(&db, &t);
    assert_eq!((s.seq_scan, s.idx_scan), (1, 1));
    assert_eq!((s.n_tup_ins, s.n_live_tup, s.n_dead_tup, s.n_ins_since_vacuum), (12, 8, 7, 10));

    // A unique violation after the heap insert: the version exists and dies with the abort.
    let mut tx = db.begin().unwrap();
    assert!(matches!(tx.insert(&t, &row(0, 9)), Err(Error::UniqueViolation { .. })));
    assert!(tx.commit().is_err(), "the failed command aborted the transaction");
    let s = stats_of(&db, &t);
    assert_eq!((s.n_tup_ins, s.n_live_tup, s.n_dead_tup), (13, 8, 8));

    // By key: an index scan each, and the same counts as by TID.
    let mut tx = db.begin().unwrap();
    assert!(tx.update_by_key(&pkey, &[Value::Int4(5)], |r| Ok(vec![r[0].clone(), Value::Int4(7)])).unwrap().is_some());
    assert!(tx.delete_by_key(&pkey, &[Value::Int4(6)]).unwrap());
    tx.commit().unwrap();
    let s = stats_of(&db, &t);
    assert_eq!((s.idx_scan, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del), (3, 4, 3, 3));
    assert_eq!((s.n_live_tup, s.n_dead_tup, s.n_mod_since_analyze), (7, 10, 17));

    // DDL writes pg_class rows: not a user table, and not counted.
    let pg_class = db.table("pg_class").unwrap();
    assert_eq!(stats_of(&db, &pg_class), TableStatsSnapshot::default());
    let all = db.all_table_stats();
    assert_eq!(all.len(), 1, "user tables only");
    assert_eq!((all[0].0.as_str(), TableStatsSnapshot { heap_blks_read: 0, heap_blks_hit: 0, ..all[0].1 }), ("t", s));
    db.close().unwrap();
}

#[test]
fn clean_shutdown_keeps_counters_and_a_crash_resets_them() {
    let fs = FaultFs::new();
    let db = open(&fs);
    workload(&db);
    // VACUUM's report, timestamp included, is kept too.
    db.vacuum(Some("t"), &VacuumParams::default()).unwrap();
    let expected = stats_of(&db, &db.table("t").unwrap());
    assert_eq!((expected.vacuum_count, expected.n_ins_since_vacuum, expected.n_live_tup), (1, 0, 8));
    assert!(expected.last_vacuum > 0 && expected.last_autovacuum == 0);
    let before = db.stats();
    assert_eq!((before.xact_rollback, before.tup_inserted), (1, 11));
    assert!(before.blks_hit > 0 && before.wal_records > 0 && before.wal_bytes > 0);
    assert_eq!(before.blks_hit, before.buffers.hits, "since open, the totals are this run's");
    db.close().unwrap();
    assert!(fs.exists(&stats_file()), "close saves the statistics");

    let db = open(&fs);
    assert!(!fs.exists(&stats_file()), "open takes the file");
    let t = db.table("t").unwrap();
    assert_eq!(stats_of(&db, &t), expected);
    let after = db.stats();
    assert_eq!(
        (after.xact_commit, after.xact_rollback, after.tup_inserted, after.tup_updated, after.tup_deleted),
        (before.xact_commit, before.xact_rollback, before.tup_inserted, before.tup_updated, before.tup_deleted)
    );
    assert!(after.blks_hit >= before.blks_hit && after.blks_read >= before.blks_read);
    assert!(after.wal_records > before.wal_records, "the shutdown checkpoint and this open's are added");
    assert!(after.buffers.hits < after.blks_hit, "buffers count this open only");
    assert_eq!(after.stats_reset, before.stats_reset, "not reset by a clean restart");
    // Counting goes on from the restored values, and survives a second restart.
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(70, 0)).unwrap();
    tx.commit().unwrap();
    let expected = TableStatsSnapshot {
        n_tup_ins: expected.n_tup_ins + 1,
        n_live_tup: expected.n_live_tup + 1,
        n_mod_since_analyze: expected.n_mod_since_analyze + 1,
        n_ins_since_vacuum: 1,
        // The insert went to a page the VACUUM had set all-visible and (eager) all-frozen.
        vm_bits_cleared: expected.vm_bits_cleared + 1,
        frozen_bits_cleared: expected.frozen_bits_cleared + 1,
        ..expected
    };
    assert_eq!(stats_of(&db, &t), expected);
    db.close().unwrap();
    let db = open(&fs);
    assert_eq!(stats_of(&db, &db.table("t").unwrap()), expected);

    // A crash: the file this open took is gone, and whatever the crash left is not trusted.
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    let db = open(&crashed);
    assert!(db.recovery_report().performed);
    assert_eq!(stats_of(&db, &db.table("t").unwrap()), TableStatsSnapshot::default());
    let s = db.stats();
    assert_eq!((s.xact_commit, s.xact_rollback, s.tup_inserted), (0, 0, 0));
    assert_eq!(s.blks_read, s.buffers.reads);
    assert!(s.stats_reset > before.stats_reset, "stats_reset says when the crash reset them");
    db.close().unwrap();
}

/// A crash resets the counters whether or not a clean shutdown ever saved them. The open that
/// took the file removed it without making the removal durable, so the crash brings it back:
/// the control file (this open's checkpoint says "in production") is what keeps it unread.
#[test]
fn crash_resets_counters_even_if_it_brings_the_file_back() {
    let fs = FaultFs::new();
    let db = open(&fs);
    workload(&db);
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    let db = open(&crashed);
    let t = db.table("t").unwrap();
    assert_eq!(stats_of(&db, &t), TableStatsSnapshot::default(), "never saved");
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(80, 0)).unwrap();
    tx.commit().unwrap();
    db.close().unwrap();

    let fs = crashed;
    let db = open(&fs);
    let t = db.table("t").unwrap();
    assert_eq!(stats_of(&db, &t).n_tup_ins, 1, "saved by the clean close");
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(81, 0)).unwrap();
    tx.commit().unwrap();
    assert_eq!(stats_of(&db, &t).n_tup_ins, 2);
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    assert!(crashed.exists(&stats_file()), "the crash undid the file's removal");
    let db = open(&crashed);
    assert!(!crashed.exists(&stats_file()), "a file found after a crash is removed unread");
    assert_eq!(stats_of(&db, &db.table("t").unwrap()), TableStatsSnapshot::default());
    db.abandon();
}

#[test]
fn damaged_stats_file_is_ignored() {
    let fs = FaultFs::new();
    let db = open(&fs);
    workload(&db);
    db.close().unwrap();
    let good = read_file(&fs);
    let mut flipped = good.clone();
    flipped[40] ^= 1;
    let damaged: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("short", good[..good.len() / 2].to_vec()),
        ("one byte flipped", flipped),
        ("garbage", vec![0xFF; 4096]),
    ];
    for (what, bytes) in damaged {
        write_file(&fs, &bytes);
        let db = open(&fs);
        assert_eq!(stats_of(&db, &db.table("t").unwrap()), TableStatsSnapshot::default(), "{what}");
        assert_eq!(db.stats().xact_commit, 0, "{what}");
        assert!(!fs.exists(&stats_file()), "{what}: removed");
        db.close().unwrap();
        // The close saved zeros: put the good file back for the next case.
        write_file(&fs, &good);
        let db = open(&fs);
        assert_eq!(stats_of(&db, &db.table("t").unwrap()), expected_after_workload(), "{what}: good file again");
        db.close().unwrap();
    }
}

fn read_file(fs: &Arc<FaultFs>) -> Vec<u8> {
    let f = fs.open(&stats_file(), false).unwrap();
    let mut b = vec![0u8; f.len().unwrap() as usize];
    f.read_exact_at(&mut b, 0).unwrap();
    b
}

fn write_file(fs: &Arc<FaultFs>, bytes: &[u8]) {
    let f = fs.open(&stats_file(), true).unwrap();
    f.set_len(0).unwrap();
    f.write_at(bytes, 0).unwrap();
    f.sync().unwrap();
}

/// ANALYZE: counts live and dead tuples in the pages it reads (all of a small table), writes
/// relpages and reltuples, replaces the live and dead estimates, starts the changes since the
/// last ANALYZE from zero, and its two counters survive a clean restart.
#[test]
fn analyze_counts_live_and_dead_rows_and_resets_the_changes() {
    let fs = FaultFs::new();
    let db = open(&fs);
    workload(&db);
    let t = db.table("t").unwrap();
    // An insert in progress is neither live nor dead.
    let mut open_tx = db.begin().unwrap();
    open_tx.insert(&t, &row(70, 0)).unwrap();
    let r = db.analyze(&t).unwrap();
    assert_eq!((r.pages, r.scanned_pages, r.live_rows, r.dead_rows, r.sample_rows), (1, 1, 8, 6, 0), "{r:?}");
    assert_eq!((r.estimated_rows, r.estimated_dead_rows), (8.0, 6.0));
    assert_eq!(db.table("t").unwrap().size_estimates(), (1, 8.0));
    let s = stats_of(&db, &t);
    assert_eq!((s.n_live_tup, s.n_dead_tup, s.n_mod_since_analyze, s.analyze_count), (8, 6, 0, 1));
    assert!(s.last_analyze > 0);
    assert_eq!(s.vacuum_count, 0, "ANALYZE is not VACUUM");
    open_tx.rollback().unwrap();
    // After VACUUM the dead versions are gone; ANALYZE sees what is left.
    db.vacuum(Some("t"), &VacuumParams::default()).unwrap();
    let r = db.analyze(&t).unwrap();
    assert_eq!((r.live_rows, r.dead_rows), (8, 0), "{r:?}");
    let before = stats_of(&db, &t);
    assert_eq!(before.analyze_count, 2);
    db.close().unwrap();
    let db = open(&fs);
    let t = db.table("t").unwrap();
    let after = stats_of(&db, &t);
    assert_eq!((after.analyze_count, after.last_analyze), (before.analyze_count, before.last_analyze));
    assert_eq!(t.size_estimates(), (1, 8.0), "pg_class kept them");
    db.close().unwrap();
}
