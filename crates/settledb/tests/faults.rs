//! Faults injected through the file seam ([`FaultFs`]): what the engine promises when the disk
//! fails it. Each test names the promise it proves in its header; every test that ends with an
//! open database runs `check::check_database` on it; every crash is a [`FaultFs::crash`]
//! followed by crash recovery, compared with an oracle (a `BTreeMap` of what acknowledged
//! commits left behind). No test depends on timing: the background checkpointer and
//! autovacuum are kept out of the way and every fault is armed by the test itself.
//!
//! 1. A failed fsync is never retried as if it had worked ("fsyncgate"): the call that saw it
//!    fails, the engine is poisoned (every later write, read and checkpoint returns
//!    [`Error::Poisoned`] naming the file; reads stop too, because pages may have reverted under
//!    the buffer pool), the control file keeps naming the previous checkpoint, and recovery
//!    from it finds every acknowledged commit, and the failed one wholly or not at all.
//! 2. ENOSPC: the failing call says which file and "No space left on device"; on the WAL the
//!    engine is poisoned (as PostgreSQL PANICs), on a data file the write is retried later;
//!    nothing committed is lost and the database works once space returns.
//! 3. Torn writes of heap, B-tree and visibility-map pages at a crash during a checkpoint are
//!    repaired from full-page images.
//! 4. A damaged page (garbage, one flipped bit) of a heap, index or visibility map is reported
//!    by checksum as [`Error::Corrupted`] naming relation and block, by queries and by `check`;
//!    a damaged free-space-map page reads as zeros and is rebuilt; an all-zero heap page is a
//!    new page, as in PostgreSQL.
//! 5. A failed read (EIO) fails the query with the file's name, and nothing else.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use settledb::db::startup::control_path;
use settledb::io::fault::{CrashMode, FaultFs};
use settledb::wal::control::ControlFile;
use settledb::{Column, Config, Database, Error, Schema, Table, TableOptions, Tid, Type, Value};

const DIR: &str = "/data";
/// The WAL segment size of every test (the smallest allowed).
const SEGMENT: u64 = 1 << 20;

/// id -> (tid, val): the committed rows of table `t`.
type Rows = BTreeMap<i32, (Tid, i32)>;

fn config(extra: &[(&'static str, &'static str)]) -> Config {
    // Only the tests' own checkpoints run; the WAL writer sleeps its longest.
    let mut pairs = vec![
        ("wal_segment_size", "1MB"),
        ("checkpoint_timeout", "1d"),
        ("max_wal_size", "1TB"),
        ("wal_writer_delay", "10s"),
        ("autovacuum", "off"),
    ];
    pairs.extend_from_slice(extra);
    Config::from_pairs(pairs).unwrap()
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "val".into(), ty: Type::Int4, nullable: false },
            Column { name: "note".into(), ty: Type::Text, nullable: true },
        ],
    }
}

fn row(id: i32, val: i32) -> Vec<Value> {
    vec![Value::Int4(id), Value::Int4(val), Value::Text(format!("row {id} {}", "n".repeat(60)))]
}

fn open(fs: &Arc<FaultFs>, cfg: &Config) -> settledb::Result<Database> {
    Database::open_with_fs(fs.clone(), Path::new(DIR), cfg.clone())
}

fn assert_check_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap_or_else(|e| panic!("{what}: check failed to run: {e}"));
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

/// Every visible row of table `name`.
fn read_rows(db: &Database, name: &str) -> Rows {
    let t = db.table(name).unwrap();
    let mut tx = db.begin().unwrap();
    let mut rows = Rows::new();
    for r in tx.scan(&t).unwrap() {
        let (tid, v) = r.unwrap();
        let (Value::Int4(id), Value::Int4(val)) = (&v[0], &v[1]) else { panic!("bad row {v:?}") };
        assert_eq!(v, row(*id, *val), "row {id} reads back whole");
        assert!(rows.insert(*id, (tid, *val)).is_none(), "id {id} visible twice");
    }
    rows
}

fn assert_rows(db: &Database, name: &str, expected: &Rows, what: &str) {
    let actual = read_rows(db, name);
    if &actual != expected {
        let missing: Vec<_> = expected.keys().filter(|k| actual.get(k) != expected.get(k)).take(8).collect();
        let extra: Vec<_> = actual.keys().filter(|k| !expected.contains_key(k)).take(8).collect();
        panic!(
            "{what}: {} rows expected, {} found; first differing {missing:?}, first unexpected {extra:?}",
            expected.len(),
            actual.len()
        );
    }
}

/// Inserts rows `ids` with value `val` in one transaction and commits it.
fn commit_inserts(db: &Database, t: &Table, ids: std::ops::Range<i32>, val: i32, rows: &mut Rows) {
    let mut tx = db.begin().unwrap();
    let mut new = Vec::new();
    for id in ids {
        new.push((id, (tx.insert(t, &row(id, val)).unwrap(), val)));
    }
    tx.commit().unwrap();
    rows.extend(new);
}

/// Updates every `step`-th row to `val` in one transaction and commits it.
fn commit_updates(db: &Database, t: &Table, step: usize, val: i32, rows: &mut Rows) {
    let mut tx = db.begin().unwrap();
    let mut new = Vec::new();
    for (&id, &(tid, _)) in rows.iter().step_by(step) {
        new.push((id, (tx.update(t, tid, &row(id, val)).unwrap().expect("row exists"), val)));
    }
    tx.commit().unwrap();
    rows.extend(new);
}

/// A database with table `t` (primary key `id`, so a B-tree `t_pkey`): 400 rows, a checkpoint,
/// then more rows and updates, so that heap, index and visibility-map pages are dirty and the
/// WAL since the redo pointer is needed.
fn loaded(cfg: &Config) -> (Arc<FaultFs>, Database, Table, Rows) {
    let fs = FaultFs::new();
    let db = open(&fs, cfg).unwrap();
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", schema(), opts).unwrap();
    let mut rows = Rows::new();
    commit_inserts(&db, &t, 0..400, 0, &mut rows);
    db.vacuum(Some("t"), &settledb::VacuumParams::default()).unwrap();
    db.checkpoint().unwrap();
    commit_inserts(&db, &t, 400..450, 1, &mut rows);
    commit_updates(&db, &t, 7, 2, &mut rows);
    (fs, db, t, rows)
}

/// The message of an [`Error::Poisoned`]; anything else fails the test.
fn poisoned(r: settledb::Result<impl std::fmt::Debug>, what: &str) -> String {
    match r {
        Err(Error::Poisoned(msg)) => msg,
        Err(e) => panic!("{what}: expected Poisoned, got {e}"),
        Ok(v) => panic!("{what}: expected Poisoned, got Ok({v:?})"),
    }
}

/// The engine refuses every new command once poisoned: writes, reads and checkpoints.
fn assert_refuses_everything(db: &Database, t: &Table, what: &str) {
    poisoned(db.begin().map(|_| ()), &format!("{what}: begin"));
    poisoned(db.checkpoint(), &format!("{what}: checkpoint"));
    poisoned(db.create_table("after", schema(), TableOptions::default()).map(|_| ()), &format!("{what}: DDL"));
    let _ = t;
}

fn control(fs: &FaultFs) -> ControlFile {
    ControlFile::read(fs, &control_path(Path::new(DIR))).unwrap()
}

/// Crashes `fs` (unsynced writes lost), abandons `db`, runs recovery and checks that table `t`
/// holds exactly `expected`; then commits one more row and checks again. Returns the database.
fn recover(fs: &FaultFs, db: Database, cfg: &Config, expected: &Rows, what: &str) -> (Arc<FaultFs>, Database) {
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    let db = open(&crashed, cfg).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    assert_rows(&db, "t", expected, what);
    assert_check_clean(&db, what);
    let t = db.table("t").unwrap();
    let mut rows = expected.clone();
    commit_inserts(&db, &t, 100_000..100_001, 9, &mut rows);
    assert_rows(&db, "t", &rows, &format!("{what}, then one more commit"));
    assert_check_clean(&db, &format!("{what}, then one more commit"));
    (crashed, db)
}

fn table_path(t: &Table) -> PathBuf {
    PathBuf::from(format!("base/{}", t.oid().0))
}

// ---------------------------------------------------------------------------------------------
// 1. fsync failures
// ---------------------------------------------------------------------------------------------

/// Promise 1a: the WAL fsync of a commit fails -> that commit returns an error, not Ok; the
/// engine is poisoned with a message naming the segment; an open transaction cannot read on;
/// recovery finds every acknowledged commit and not the failed one (FaultFs drops a file's
/// unsynced writes when its fsync fails, as Linux may).
#[test]
fn wal_fsync_failure_fails_the_commit_and_poisons() {
    let cfg = config(&[]);
    let (fs, db, t, rows) = loaded(&cfg);
    let mut reader = db.begin().unwrap();
    assert_eq!(reader.scan(&t).unwrap().count(), rows.len());

    fs.fail_sync_after(Some(1)); // the commit's flush is the next fsync
    let mut tx = db.begin().unwrap();
    for id in 1000..1020 {
        tx.insert(&t, &row(id, 5)).unwrap();
    }
    let msg = poisoned(tx.commit(), "commit whose WAL fsync failed");
    assert!(msg.contains("could not fsync file \"/data/pg_wal/0000000100000000"), "{msg}");
    assert!(msg.contains("Input/output error"), "{msg}");

    // Reads stop too, in transactions already open.
    poisoned(reader.scan(&t).map(|s| s.count()), "read in an open transaction");
    drop(reader);
    assert_refuses_everything(&db, &t, "after a failed WAL fsync");
    recover(&fs, db, &cfg, &rows, "after a failed WAL fsync at commit");
}

/// Promise 1a, the other outcome: the commit's records reach the disk (both segment files are
/// fsynced) but the fsync of the WAL directory after the commit record opened a new segment
/// fails. The commit still reports failure, and after recovery the transaction is there whole:
/// "failed" means "not acknowledged", never "half there".
#[test]
fn failed_commit_whose_record_is_durable_is_wholly_present_after_recovery() {
    let cfg = config(&[]);
    let (fs, db, t, mut rows) = loaded(&cfg);
    let pad_schema = Schema { columns: vec![Column { name: "pad".into(), ty: Type::Text, nullable: false }] };
    let pad = db.create_table("pad", pad_schema, TableOptions::default()).unwrap();
    let pad_row = |len: usize| vec![Value::Text("x".repeat(len))];
    // A fresh cluster's WAL starts at the beginning of segment 1, so the insert position is
    // SEGMENT + the bytes inserted since the open.
    let pos = || SEGMENT + db.stats().wal.bytes;
    let room = || SEGMENT - pos() % SEGMENT;
    // Measure a pad insert record (empty and 100-byte text) and a commit record.
    let mut tx = db.begin().unwrap();
    tx.insert(&pad, &pad_row(0)).unwrap(); // the first insert may extend the table: not measured
    let p0 = pos();
    tx.insert(&pad, &pad_row(0)).unwrap();
    let p1 = pos();
    tx.insert(&pad, &pad_row(100)).unwrap();
    let p2 = pos();
    tx.commit().unwrap();
    let (s0, commit_record) = (p1 - p0, pos() - p2);
    assert_eq!(p2 - p1, s0 + 100, "a pad record grows byte for byte with its text");
    // Fill the segment with committed rows of `t` until less than 64 kB is left.
    let mut next = 2000;
    while room() > 64 << 10 {
        commit_inserts(&db, &t, next..next + 50, 3, &mut rows);
        next += 50;
    }
    // One transaction whose records stop just short of the boundary, so that its commit record
    // is the one that crosses into the next segment (and creates its file).
    let mut tx = db.begin().unwrap();
    let mut pending = Vec::new();
    while room() > 4096 {
        pending.push((next, (tx.insert(&t, &row(next, 4)).unwrap(), 4)));
        next += 1;
    }
    let target = commit_record / 2;
    loop {
        if room() < commit_record {
            break; // and room() > 0: the commit record will cross
        }
        let want = room() - target; // bytes of records still to insert
        assert!(want >= s0, "overshot the boundary: {} bytes left (commit {commit_record}, pad {s0})", room());
        let len = if want <= s0 + 100 { want - s0 } else { (want - 2 * s0).min(100) };
        tx.insert(&pad, &pad_row(len as usize)).unwrap();
    }
    fs.fail_syncs_of(Some(PathBuf::from("pg_wal"))); // the directory, not the segments
    let msg = poisoned(tx.commit(), "commit whose directory fsync failed");
    assert!(msg.contains("could not fsync directory file \"/data/pg_wal\""), "{msg}");
    rows.extend(pending);
    assert_refuses_everything(&db, &t, "after a failed WAL directory fsync");
    recover(&fs, db, &cfg, &rows, "a failed commit whose record was durable");
}

/// Promise 1b, the fsyncgate case: a data file's fsync fails during a checkpoint. The
/// checkpoint fails; the control file keeps the previous checkpoint; and the next checkpoint
/// also fails although the disk is healthy again, because the pages the failed fsync dropped
/// are no longer dirty in the buffer pool: a "successful" retry would move the redo pointer
/// past the only copy of those changes (the WAL), and recovery would skip them. Recovery from
/// the old redo pointer restores everything.
///
/// Found by this test: before the fix, `Inner::checkpoint` returned the fsync error without
/// poisoning and `Smgr::sync_all` put the files back on its pending list, so the second
/// checkpoint fsynced the reverted file, returned Ok and wrote a control file with the new redo
/// pointer; after the crash 108 of the 450 rows differed (the 50 rows inserted and the updates
/// made after the first checkpoint were gone).
#[test]
fn data_fsync_failure_at_checkpoint_is_never_retried() {
    let cfg = config(&[]);
    let (fs, db, t, rows) = loaded(&cfg);
    let before = control(&fs);
    fs.fail_syncs_of(Some(table_path(&t)));
    let msg = poisoned(db.checkpoint(), "checkpoint whose data fsync failed");
    assert!(msg.contains(&format!("could not fsync file \"/data/base/{}\"", t.oid().0)), "{msg}");
    assert_eq!(control(&fs), before, "the control file still names the previous checkpoint");

    fs.fail_syncs_of(None); // the disk works again: a retried fsync would report success
    poisoned(db.checkpoint(), "the next checkpoint");
    assert_eq!(control(&fs), before, "no checkpoint claimed the lost pages durable");
    assert_refuses_everything(&db, &t, "after a failed data fsync");
    let (_, db) = recover(&fs, db, &cfg, &rows, "after a failed data fsync at checkpoint");
    assert_eq!(db.recovery_report().redo_start, before.redo_lsn, "replay started at the old redo pointer");
}

/// Promise 1b for every other fsync of a checkpoint: the CLOG segment and its directory, the
/// index and visibility-map forks, the directory of the relation files, the new control file
/// and its directory. Each failure poisons, the durable control file stays the previous one,
/// and recovery loses nothing.
#[test]
fn every_checkpoint_fsync_failure_poisons() {
    let cfg = config(&[]);
    for target in ["pg_xact/0000", "pg_xact", "INDEX", "VM", "base", "global/pg_control.tmp", "global"] {
        let (fs, db, t, rows) = loaded(&cfg);
        let before = control(&fs);
        let suffix = match target {
            "INDEX" => PathBuf::from(format!("base/{}", db.index("t_pkey").unwrap().oid().0)),
            "VM" => PathBuf::from(format!("base/{}_vm", t.oid().0)),
            other => PathBuf::from(other),
        };
        fs.fail_syncs_of(Some(suffix.clone()));
        let msg = poisoned(db.checkpoint(), &format!("checkpoint failing on {target}"));
        assert!(msg.contains(&format!("{}\"", suffix.display())) && msg.contains("fsync"), "{target}: {msg}");
        fs.fail_syncs_of(None);
        poisoned(db.checkpoint(), &format!("checkpoint after {target} failed"));
        assert_refuses_everything(&db, &t, target);
        let crashed = fs.crash(CrashMode::LoseUnsynced);
        assert_eq!(control(&crashed), before, "{target}: the durable control file is the previous one");
        drop(crashed);
        recover(&fs, db, &cfg, &rows, &format!("after a failed fsync of {target}"));
    }
}

/// Promise 1, outside checkpoints: creating a relation logs it, creates the file and fsyncs the
/// directory. A failed directory fsync poisons (the WAL already says the file exists); after
/// recovery the table that failed to be created does not exist and can be created.
#[test]
fn failed_fsync_creating_a_relation_poisons() {
    let cfg = config(&[]);
    let (fs, db, t, rows) = loaded(&cfg);
    fs.fail_syncs_of(Some(PathBuf::from("base")));
    let msg = poisoned(db.create_table("t2", schema(), TableOptions::default()).map(|_| ()), "CREATE TABLE");
    assert!(msg.contains("could not fsync directory file \"/data/base\""), "{msg}");
    assert_refuses_everything(&db, &t, "after a failed relation creation");
    let (_, db) = recover(&fs, db, &cfg, &rows, "after a failed relation creation");
    assert!(matches!(db.table("t2"), Err(Error::NotFound(_))));
    let t2 = db.create_table("t2", schema(), TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t2, &row(1, 1)).unwrap();
    tx.commit().unwrap();
    assert_check_clean(&db, "t2 created after recovery");
}

/// Promise 1, outside checkpoints: VACUUM's truncation logs it, drops the buffers past the new
/// end and truncates the file durably. A failed fsync there poisons (PostgreSQL truncates in a
/// critical section); recovery replays the truncation and loses no row.
#[test]
fn failed_fsync_truncating_a_relation_poisons() {
    let cfg = config(&[]);
    let (fs, db, t, mut rows) = loaded(&cfg);
    let pages = db.table_pages(&t).unwrap();
    // Delete every row on the upper half of the pages: they become empty.
    let mut tx = db.begin().unwrap();
    let doomed: Vec<i32> = rows.iter().filter(|(_, (tid, _))| tid.block.0 >= pages / 2).map(|(&id, _)| id).collect();
    for id in &doomed {
        assert!(tx.delete(&t, rows[id].0).unwrap());
    }
    tx.commit().unwrap();
    for id in doomed {
        rows.remove(&id);
    }
    fs.fail_syncs_of(Some(table_path(&t)));
    let msg = poisoned(db.vacuum(Some("t"), &settledb::VacuumParams::default()), "VACUUM truncating");
    assert!(msg.contains("truncating a relation file") && msg.contains("fsync"), "{msg}");
    assert_refuses_everything(&db, &t, "after a failed truncation");
    let (_, db) = recover(&fs, db, &cfg, &rows, "after a failed truncation");
    let t = db.table("t").unwrap();
    assert!(db.table_pages(&t).unwrap() < pages, "recovery replayed the truncation");
}
