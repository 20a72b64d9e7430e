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
//!    engine is poisoned (as PostgreSQL PANICs); on a data file the insert that extends it
//!    fails (its space is reserved at extension) and nothing is poisoned; nothing committed
//!    is lost and the database works once space returns.
//! 3. Torn writes of heap, B-tree and visibility-map pages at a crash during a checkpoint are
//!    repaired from full-page images.
//! 4. A damaged page (garbage, one flipped bit) of a heap, index or visibility map is reported
//!    by checksum as [`Error::Corrupted`] naming relation and block, by queries and by `check`;
//!    a damaged free-space-map page reads as zeros and is rebuilt; an all-zero heap page is a
//!    new page, as in PostgreSQL.
//! 5. A failed read (EIO) fails the query with the file's name, and nothing else.
//! 6. A relation file cut short behind the engine's back is reported at open and by `check`
//!    with the missing blocks, and reading them fails; the engine's own truncation is not one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use settledb::db::startup::control_path;
use settledb::io::fault::{CrashMode, FaultFs};
use settledb::io::FileSystem;
use settledb::page::{self, BLCKSZ};
use settledb::wal::control::ControlFile;
use settledb::{
    BlockNumber, Column, Config, Database, Error, KeyBound, Oid, ScanDirection, Schema, Table, TableOptions, Tid, Type,
    Value,
};

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
    loaded_with(cfg, 100, 400, 7)
}

/// `loaded` with a fillfactor, `n` rows before the checkpoint and every `step`-th row updated
/// after it.
fn loaded_with(cfg: &Config, fillfactor: u8, n: i32, step: usize) -> (Arc<FaultFs>, Database, Table, Rows) {
    loaded_on(FaultFs::new(), cfg, fillfactor, n, step)
}

/// `loaded_with` on a given file system.
fn loaded_on(
    fs: Arc<FaultFs>,
    cfg: &Config,
    fillfactor: u8,
    n: i32,
    step: usize,
) -> (Arc<FaultFs>, Database, Table, Rows) {
    let db = open(&fs, cfg).unwrap();
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), fillfactor, ..TableOptions::default() };
    let t = db.create_table("t", schema(), opts).unwrap();
    let mut rows = Rows::new();
    commit_inserts(&db, &t, 0..n, 0, &mut rows);
    db.vacuum(Some("t"), &settledb::VacuumParams::default()).unwrap();
    db.checkpoint().unwrap();
    commit_inserts(&db, &t, n..n + 50, 1, &mut rows);
    commit_updates(&db, &t, step, 2, &mut rows);
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

// ---------------------------------------------------------------------------------------------
// 2. ENOSPC
// ---------------------------------------------------------------------------------------------

/// The WAL insert position of a database created fresh in this run (see `SEGMENT`).
fn wal_pos(db: &Database) -> u64 {
    SEGMENT + db.stats().wal.bytes
}

/// Commits transactions of 50 new rows of `t` until a statement or a commit fails; returns that
/// error. Acknowledged commits go to `rows`.
fn commit_until_error(db: &Database, t: &Table, rows: &mut Rows) -> Error {
    let mut next = 10_000;
    for _ in 0..10_000 {
        let mut tx = db.begin().unwrap();
        let mut new = Vec::new();
        for id in next..next + 50 {
            match tx.insert(t, &row(id, 6)) {
                Ok(tid) => new.push((id, (tid, 6))),
                Err(e) => return e,
            }
        }
        next += 50;
        match tx.commit() {
            Ok(()) => rows.extend(new),
            Err(e) => return e,
        }
    }
    panic!("no statement ran out of space");
}

/// Promise 2, WAL segment creation: the next segment's space is reserved when it is created
/// (`fallocate` of the whole segment, as PostgreSQL zero-fills a new segment). When that
/// fails, the commit fails naming the segment and "No space left on device", the engine is
/// poisoned (PostgreSQL PANICs when it cannot write WAL), and after space returns, recovery
/// finds every acknowledged commit and the database works.
#[test]
fn enospc_creating_a_wal_segment_poisons_and_loses_nothing() {
    let cfg = config(&[]);
    let (fs, db, t, mut rows) = loaded(&cfg);
    let next = settledb::wal::segment::segment_file_name(wal_pos(&db) / SEGMENT + 1, SEGMENT);
    // The rest of this segment is reserved already; 256 kB more is never a whole new segment.
    fs.set_space_limit(Some(fs.total_bytes() + (256 << 10)));
    let before = rows.len();
    let e = commit_until_error(&db, &t, &mut rows);
    assert!(rows.len() > before, "commits went on until the segment was full");
    let msg = poisoned(Err::<(), _>(e), "commit that needed a new segment");
    assert!(msg.contains(&format!("could not allocate space in file \"/data/pg_wal/{next}\"")), "{msg}");
    assert!(msg.contains("No space left on device"), "{msg}");
    assert_refuses_everything(&db, &t, "WAL out of space");
    // The crash lifts the limit: space has returned.
    recover(&fs, db, &cfg, &rows, "after ENOSPC creating a WAL segment");
}

/// Promise 2, WAL extension on a file system without `fallocate` (where nothing is reserved):
/// a write inside the current segment fails with ENOSPC; same outcome, the error naming the
/// current segment.
#[test]
fn enospc_writing_a_wal_segment_poisons_and_loses_nothing() {
    let cfg = config(&[]);
    let fs = FaultFs::new();
    fs.set_allocate_unsupported(true);
    let (fs, db, t, mut rows) = loaded_on(fs, &cfg, 100, 400, 7);
    let room = SEGMENT - wal_pos(&db) % SEGMENT;
    assert!(room > 256 << 10, "the current segment has room ({room} bytes)");
    let current = settledb::wal::segment::segment_file_name(wal_pos(&db) / SEGMENT, SEGMENT);
    fs.set_space_limit(Some(fs.total_bytes() + (64 << 10)));
    let e = commit_until_error(&db, &t, &mut rows);
    let msg = poisoned(Err::<(), _>(e), "commit that extended the segment");
    assert!(msg.contains(&format!("could not write file \"/data/pg_wal/{current}\"")), "{msg}");
    assert!(msg.contains("No space left on device"), "{msg}");
    assert_refuses_everything(&db, &t, "WAL out of space");
    recover(&fs, db, &cfg, &rows, "after ENOSPC extending a WAL segment");
}

/// Promise 2, heap relation extension: a table's disk space is reserved when it is extended (a
/// megabyte or more at a time), before the new page exists anywhere but in memory. When that
/// fails, the insert that extends fails naming the file and "No space left on device" (as
/// PostgreSQL's "could not extend file"), not a later write-back of the page; the transaction
/// rolls back; the database is not poisoned: transactions still start and a checkpoint writes
/// every dirty page (each inside its reservation). Nothing committed is lost, whether the crash
/// comes while the disk is full or after.
#[test]
fn enospc_extending_a_relation_fails_the_statement_not_the_database() {
    let cfg = config(&[("shared_buffers", "128kB")]);
    let (fs, db, _, rows) = loaded(&cfg);
    let u = db.create_table("u", schema(), TableOptions::default()).unwrap();
    db.checkpoint().unwrap();
    assert!(SEGMENT - wal_pos(&db) % SEGMENT > 512 << 10, "the WAL has room in its segment");
    fs.set_space_limit(Some(fs.total_bytes() + (256 << 10)));
    let mut u_rows = Rows::new();
    let e = commit_until_error(&db, &u, &mut u_rows);
    let u_committed = u_rows.clone();
    let msg = e.to_string();
    assert!(matches!(e, Error::Io { .. }), "{msg}");
    assert!(msg.contains(&format!("could not extend file \"/data/base/{}\"", u.oid().0)), "{msg}");
    assert!(msg.contains("No space left on device"), "{msg}");

    // Not poisoned: new transactions start, and the pages already extended were written
    // inside their reservation by the checkpoint, with the disk still full.
    drop(db.begin().unwrap());
    db.checkpoint().expect("a checkpoint with the disk full: every page has its space");
    let full = fs.crash(CrashMode::LoseUnsynced);

    fs.set_space_limit(None);
    commit_inserts(&db, &u, 0..500, 7, &mut u_rows);
    assert_rows(&db, "u", &u_rows, "u after space returned");
    assert_check_clean(&db, "after space returned");
    let (_, db2) = recover(&fs, db, &cfg, &rows, "after ENOSPC on a relation, space back");
    assert_rows(&db2, "u", &u_rows, "u after recovery");

    // The crash taken while the disk was full.
    let db = open(&full, &cfg).unwrap();
    assert_rows(&db, "t", &rows, "crash while the disk was full");
    assert_rows(&db, "u", &u_committed, "u: the commits before the disk filled");
    assert_check_clean(&db, "crash while the disk was full");
}

// ---------------------------------------------------------------------------------------------
// 3. Torn writes
// ---------------------------------------------------------------------------------------------

/// Blocks of the file at `path` on `fs` that hold a page failing its checksum (not all zeros).
fn damaged_blocks(fs: &FaultFs, path: &Path) -> usize {
    let Ok(f) = fs.open(path, false) else { return 0 };
    let len = f.len().unwrap();
    let mut n = 0;
    for b in 0..len.div_ceil(BLCKSZ as u64) {
        let mut buf = vec![0u8; BLCKSZ];
        let got = f.read_at(&mut buf, b * BLCKSZ as u64).unwrap();
        if got == BLCKSZ && page::verify(&buf, Oid(0), BlockNumber(b as u32)).is_err() {
            n += 1;
        }
    }
    n
}

/// Promise 3: torn writes of heap, B-tree and visibility-map pages at a crash during a
/// checkpoint are repaired from full-page images. The table has 2,300 pages (fillfactor 10), so
/// that its visibility-map page changes in more than one 512-byte sector and can tear. After
/// the checkpoint's writes, the first data-file fsync (`pg_class`, dirtied on purpose, the
/// lowest file node) fails, so every page the checkpoint wrote is unsynced; `CrashMode::Random`
/// keeps, loses or tears each write. Each was logged with a full-page image at its first change
/// after the previous checkpoint, so recovery restores it: the rows equal the oracle and `check`
/// is clean. The test counts the torn heap and B-tree pages, so it cannot pass without tearing
/// some; the map page (a random tear of it is rare, see below) is torn by hand.
#[test]
fn torn_writes_at_a_checkpoint_are_repaired_by_full_page_images() {
    let cfg = config(&[]);
    let (fs, db, t, rows) = loaded_with(&cfg, 10, 16_000, 40);
    assert!(db.table_pages(&t).unwrap() > 2100);
    let index = db.index("t_pkey").unwrap();
    db.create_table("pad", schema(), TableOptions::default()).unwrap();
    fs.fail_syncs_of(Some(PathBuf::from("base/1259")));
    poisoned(db.checkpoint(), "checkpoint failing at the first data-file fsync");
    let mut torn = BTreeMap::<&str, usize>::new();
    let base = Path::new(DIR).join("base");
    for seed in 0..6 {
        let crashed = fs.crash(CrashMode::Random { seed });
        for (kind, file) in [("heap", t.oid().0.to_string()), ("btree", index.oid().0.to_string())] {
            *torn.entry(kind).or_default() += damaged_blocks(&crashed, &base.join(file));
        }
        let what = format!("torn checkpoint writes, seed {seed}");
        let db = open(&crashed, &cfg).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
        assert_rows(&db, "t", &rows, &what);
        assert_check_clean(&db, &what);
        db.abandon();
    }
    for kind in ["heap", "btree"] {
        assert!(torn.get(kind).copied().unwrap_or(0) > 0, "no torn {kind} page was produced: {torn:?}");
    }

    // The map page changes in its first two sectors only (two bits per heap page), so a random
    // tear rarely splits it: tear it by hand, new first sector over the old rest.
    let vm = base.join(format!("{}_vm", t.oid().0));
    let new = read_page(&fs, &vm, 0);
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    let old = read_page(&crashed, &vm, 0);
    assert_ne!(new[512..1024], old[512..1024], "the map page changed in its second sector");
    let mut torn = old.clone();
    torn[..512].copy_from_slice(&new[..512]);
    assert!(page::verify(&torn, t.oid(), BlockNumber(0)).is_err(), "the torn map page fails its checksum");
    let f = crashed.open(&vm, false).unwrap();
    f.write_at(&torn, 0).unwrap();
    f.sync().unwrap();
    let db = open(&crashed, &cfg).unwrap();
    assert_rows(&db, "t", &rows, "torn visibility map page");
    assert_check_clean(&db, "torn visibility map page");
    db.checkpoint().unwrap();
    page::verify(&read_page(&crashed, &vm, 0), t.oid(), BlockNumber(0)).expect("recovery rewrote the map page");
    db.abandon();
}

fn read_page(fs: &FaultFs, path: &Path, block: u32) -> Vec<u8> {
    let mut buf = vec![0u8; BLCKSZ];
    fs.open(path, false).unwrap().read_exact_at(&mut buf, u64::from(block) * BLCKSZ as u64).unwrap();
    buf
}

/// Promise 3, every crash point of a checkpoint: the n-th fsync of the checkpoint fails (for
/// every n), then a random crash; recovery always restores the oracle.
#[test]
fn crash_at_every_fsync_of_a_checkpoint_loses_nothing() {
    let cfg = config(&[]);
    let syncs = {
        let (fs, db, _, _) = loaded(&cfg);
        let s0 = fs.syncs();
        db.checkpoint().unwrap();
        let n = fs.syncs() - s0;
        db.abandon();
        n
    };
    assert!(syncs >= 6, "a checkpoint fsyncs WAL, CLOG, data files and the control file ({syncs})");
    for n in 1..=syncs {
        let (fs, db, _, rows) = loaded(&cfg);
        fs.fail_sync_after(Some(n));
        poisoned(db.checkpoint(), &format!("checkpoint failing at fsync {n}"));
        for seed in 0..2 {
            let what = format!("crash at fsync {n} of a checkpoint, seed {seed}");
            let crashed = fs.crash(CrashMode::Random { seed: n * 10 + seed });
            let db = open(&crashed, &cfg).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
            assert_rows(&db, "t", &rows, &what);
            assert_check_clean(&db, &what);
            db.abandon();
        }
        db.abandon();
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Damaged pages
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Damage {
    Zeros,
    Garbage,
    FlippedBit,
}

/// Damages one block of `file` (relative to `base/`) on a closed database, durably.
fn damage(fs: &FaultFs, file: &str, block: u32, how: Damage) {
    let f = fs.open(&Path::new(DIR).join("base").join(file), false).unwrap();
    let mut buf = vec![0u8; BLCKSZ];
    let off = u64::from(block) * BLCKSZ as u64;
    f.read_exact_at(&mut buf, off).unwrap();
    match how {
        Damage::Zeros => buf.fill(0),
        Damage::Garbage => {
            let mut x = 0x2545_F491_4F6C_DD1Du64 ^ u64::from(block);
            for b in buf.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        }
        Damage::FlippedBit => buf[5000] ^= 0x10,
    }
    f.write_at(&buf, off).unwrap();
    f.sync().unwrap();
}

/// `loaded`, vacuumed (visibility map and free space map written) and closed cleanly.
fn closed(cfg: &Config) -> (Arc<FaultFs>, Oid, Oid, Rows) {
    let (fs, db, t, rows) = loaded(cfg);
    db.vacuum(Some("t"), &settledb::VacuumParams::default()).unwrap();
    let index = db.index("t_pkey").unwrap().oid();
    db.close().unwrap();
    (fs, t.oid(), index, rows)
}

/// Every result of a sequential scan of `t`.
fn scan_results(db: &Database) -> Vec<settledb::Result<(Tid, Vec<Value>)>> {
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    let v = tx.scan(&t).unwrap().collect();
    drop(tx);
    v
}

/// The first error of `results`, which must be `Corrupted` naming `rel` and `block`.
fn assert_corrupted(e: Option<Error>, rel: Oid, block: u32, what: &str) {
    match e {
        Some(Error::Corrupted { rel: r, block: b, ref detail }) => {
            assert_eq!((r, b), (rel, BlockNumber(block)), "{what}: {detail}");
            let msg = e.as_ref().unwrap().to_string();
            assert!(msg.contains(&format!("block {block} of relation {}", rel.0)), "{what}: {msg}");
        }
        Some(other) => panic!("{what}: expected Corrupted, got {other}"),
        None => panic!("{what}: the damage went unnoticed"),
    }
}

/// `check` reports the damage naming the block and the relation as one of its problems, and
/// goes on past it (like `pg_amcheck`), so one damaged page does not hide others.
fn assert_check_reports(db: &Database, rel: Oid, block: u32, what: &str) {
    let needle = format!("block {block} of relation {}", rel.0);
    let report = settledb::check::check_database(db).unwrap_or_else(|e| panic!("{what}: check stopped at {e}"));
    assert!(report.problems.iter().any(|p| p.contains(&needle)), "{what}: check missed {needle}:\n{report}");
}

/// Promise 4, heap: garbage or one flipped bit in a heap page fails its checksum; a scan
/// returns the rows before it, then `Corrupted` naming relation and block; `check` reports it.
#[test]
fn damaged_heap_page_is_reported_with_relation_and_block() {
    let cfg = config(&[]);
    for how in [Damage::Garbage, Damage::FlippedBit] {
        let (fs, t, _, _) = closed(&cfg);
        damage(&fs, &t.0.to_string(), 1, how);
        let db = open(&fs, &cfg).unwrap();
        let e = scan_results(&db).into_iter().find_map(|r| r.err());
        assert_corrupted(e, t, 1, &format!("heap {how:?}"));
        assert_check_reports(&db, t, 1, &format!("heap {how:?}"));
    }
}

/// Promise 4, an all-zero heap page. PostgreSQL accepts an all-zero page as new and empty
/// (`PageIsNew` in `PageIsVerified`): a relation extended just before a crash has such pages,
/// so they cannot be errors. The engine does the same, so the rows that were on a page zeroed
/// by the disk vanish from sequential scans without an error: that loss is silent to readers.
/// `check` catches it here twice: the visibility map still marks the page all-visible (a new
/// page cannot be), and index entries point at line pointers that no longer exist. A table
/// with no index whose page was not all-visible would show nothing, as in PostgreSQL.
#[test]
fn zeroed_heap_page_reads_as_empty_and_check_flags_it() {
    let cfg = config(&[]);
    let (fs, t, _, rows) = closed(&cfg);
    damage(&fs, &t.0.to_string(), 1, Damage::Zeros);
    let db = open(&fs, &cfg).unwrap();
    let read = read_rows(&db, "t");
    let lost: Vec<i32> = rows.iter().filter(|(_, (tid, _))| tid.block.0 == 1).map(|(&id, _)| id).collect();
    assert!(!lost.is_empty());
    assert_eq!(read.len(), rows.len() - lost.len(), "the rows of block 1 are gone, no error");
    let report = settledb::check::check_database(&db).unwrap();
    let said = |needle: &str| report.problems.iter().any(|p| p.contains(needle));
    assert!(said("relation \"t\" block 1: visibility map says ALL_VISIBLE"), "{report}");
    assert!(said("points to heap tuple (1,"), "{report}");
}

/// Promise 4, B-tree: a damaged index page fails the lookups that reach it with `Corrupted`
/// naming the index and block; `check` reports it.
#[test]
fn damaged_index_page_is_reported_with_relation_and_block() {
    let cfg = config(&[]);
    for how in [Damage::Garbage, Damage::FlippedBit, Damage::Zeros] {
        let (fs, t, index, rows) = closed(&cfg);
        let blocks = fs.open(&Path::new(DIR).join("base").join(index.0.to_string()), false).unwrap().len().unwrap()
            / BLCKSZ as u64;
        let block = (blocks - 1) as u32;
        damage(&fs, &index.0.to_string(), block, how);
        let db = open(&fs, &cfg).unwrap();
        let idx = db.index("t_pkey").unwrap();
        let mut tx = db.begin().unwrap();
        let e = rows.keys().find_map(|&id| tx.get(&idx, &[Value::Int4(id)]).err());
        drop(tx);
        assert_corrupted(e, index, block, &format!("index {how:?}"));
        assert_check_reports(&db, index, block, &format!("index {how:?}"));
        let _ = t;
    }
}

/// Promise 4, visibility map: a damaged map page fails index-only scans (which read it) with
/// `Corrupted` naming the table's relation and the map block, and `check` reports it. An
/// all-zero map page claims nothing, which is always safe: everything reads and checks fine.
#[test]
fn damaged_visibility_map_page_is_reported() {
    let cfg = config(&[]);
    for how in [Damage::Garbage, Damage::FlippedBit, Damage::Zeros] {
        let (fs, t, _, rows) = closed(&cfg);
        damage(&fs, &format!("{}_vm", t.0), 0, how);
        let db = open(&fs, &cfg).unwrap();
        let idx = db.index("t_pkey").unwrap();
        let mut tx = db.begin().unwrap();
        let r = tx.index_only(&idx, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward, None);
        drop(tx);
        match how {
            Damage::Zeros => {
                assert_eq!(r.unwrap().len(), rows.len());
                assert_check_clean(&db, "zeroed visibility map page");
            }
            _ => {
                assert_corrupted(r.err(), t, 0, &format!("vm {how:?}"));
                assert_check_reports(&db, t, 0, &format!("vm {how:?}"));
            }
        }
    }
}

/// Promise 4, free space map: as in PostgreSQL, a damaged FSM page is not an error (the map is
/// a hint, not WAL-logged): it reads as zeros, inserts still work, `check` is clean, and the
/// next VACUUM rewrites the page, which a checkpoint makes valid on disk again.
#[test]
fn damaged_free_space_map_page_reads_as_zeros_and_is_rebuilt() {
    let cfg = config(&[]);
    for how in [Damage::Garbage, Damage::FlippedBit, Damage::Zeros] {
        let (fs, t, _, mut rows) = closed(&cfg);
        let fsm = format!("{}_fsm", t.0);
        damage(&fs, &fsm, 0, how);
        let db = open(&fs, &cfg).unwrap();
        let table = db.table("t").unwrap();
        commit_inserts(&db, &table, 3000..3100, 8, &mut rows);
        assert_rows(&db, "t", &rows, &format!("fsm {how:?}"));
        assert_check_clean(&db, &format!("fsm {how:?}"));
        db.vacuum(Some("t"), &settledb::VacuumParams::default()).unwrap();
        db.checkpoint().unwrap();
        let f = fs.open(&Path::new(DIR).join("base").join(&fsm), false).unwrap();
        let mut buf = vec![0u8; BLCKSZ];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert!(!page::is_new(&buf), "fsm {how:?}: VACUUM rewrote the page");
        page::verify(&buf, t, BlockNumber(0)).unwrap_or_else(|e| panic!("fsm {how:?}: rebuilt page: {e}"));
        assert_check_clean(&db, &format!("fsm {how:?}, rebuilt"));
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Failed reads
// ---------------------------------------------------------------------------------------------

/// Promise 5: reads of a table's file, of its index and of the WAL during recovery fail with
/// EIO. Each query (or the open) fails with `Io` naming the file, nothing panics, nothing is
/// poisoned, and once the fault is gone the same queries succeed and `check` is clean.
#[test]
fn failed_reads_fail_the_query_naming_the_file() {
    let cfg = config(&[]);
    let (fs, t, index, rows) = closed(&cfg);
    let mut db = open(&fs, &cfg).unwrap();
    for (file, what) in [(index.0.to_string(), "index"), (t.0.to_string(), "heap")] {
        // A fresh open, so that no page of the file is in the buffer pool.
        db.close().unwrap();
        db = open(&fs, &cfg).unwrap();
        let idx = db.index("t_pkey").unwrap();
        fs.fail_reads_of(Some(format!("base/{file}")));
        let mut tx = db.begin().unwrap();
        let e = match what {
            "index" => tx.get(&idx, &[Value::Int4(7)]).unwrap_err(),
            _ => tx.scan(&db.table("t").unwrap()).unwrap().find_map(|r| r.err()).expect("the scan fails"),
        };
        drop(tx);
        let msg = e.to_string();
        assert!(matches!(e, Error::Io { .. }), "{what}: {msg}");
        assert!(msg.contains(&format!("could not read file \"/data/base/{file}\"")), "{what}: {msg}");
        fs.fail_reads_of(None);
        assert_rows(&db, "t", &rows, &format!("after the {what} read fault"));
        let mut tx = db.begin().unwrap();
        assert_eq!(tx.get(&idx, &[Value::Int4(7)]).unwrap().map(|r| r.1), Some(row(7, rows[&7].1)));
        drop(tx);
        assert_check_clean(&db, &format!("after the {what} read fault"));
    }
    // WAL read during crash recovery.
    let table = db.table("t").unwrap();
    let mut rows = rows;
    commit_inserts(&db, &table, 5000..5050, 9, &mut rows);
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    crashed.fail_reads_of(Some("pg_wal".into()));
    let msg = open(&crashed, &cfg).err().expect("recovery cannot read the WAL").to_string();
    assert!(msg.contains("could not read file \"/data/pg_wal/"), "{msg}");
    crashed.fail_reads_of(None);
    let db = open(&crashed, &cfg).unwrap();
    assert_rows(&db, "t", &rows, "recovery after the WAL read fault");
    assert_check_clean(&db, "recovery after the WAL read fault");
}

// ---------------------------------------------------------------------------------------------
// 6. Files cut short
// ---------------------------------------------------------------------------------------------

/// Promise 6: a relation file cut short on a block boundary behind the engine's back (its tail
/// lost after a checkpoint made it durable) is found at open and by `check`, naming the
/// relation and the missing blocks, and a scan that reaches them fails naming them instead of
/// returning fewer rows. Once the file is whole again, everything reads back.
#[test]
fn a_relation_file_cut_short_is_reported_with_its_missing_blocks() {
    let cfg = config(&[]);
    let (fs, t, _, rows) = closed(&cfg);
    let path = PathBuf::from(format!("{DIR}/base/{}", t.0));
    let f = fs.open(&path, false).unwrap();
    let whole = {
        let mut v = vec![0u8; f.len().unwrap() as usize];
        f.read_exact_at(&mut v, 0).unwrap();
        v
    };
    let blocks = (whole.len() / BLCKSZ) as u32;
    assert!(blocks >= 4, "the table has {blocks} blocks");
    let keep = blocks / 2;
    f.set_len(u64::from(keep) * BLCKSZ as u64).unwrap();
    f.sync().unwrap();

    let db = open(&fs, &cfg).unwrap();
    let want = format!(
        "file \"{}\" is cut short: it has {keep} blocks, but {blocks} were durable at the last checkpoint (blocks {keep} to {} are missing)",
        path.display(),
        blocks - 1
    );
    let log = db.take_log().join("");
    assert!(log.contains(&format!("WARNING:  relation \"t\": {want}")), "{log}");
    let report = settledb::check::check_database(&db).unwrap();
    assert!(report.problems.iter().any(|p| p.contains(&want)), "{report}");
    let e = scan_results(&db).into_iter().find_map(|r| r.err());
    assert_corrupted(e, t, keep, "a scan reaching the missing blocks");
    db.abandon();

    // The file restored: nothing is missing.
    f.write_at(&whole, 0).unwrap();
    f.sync().unwrap();
    let db = open(&fs, &cfg).unwrap();
    assert!(!db.take_log().join("").contains("cut short"));
    assert_rows(&db, "t", &rows, "the file restored");
    assert_check_clean(&db, "the file restored");
}

/// Promise 6, the other way: the engine's own truncation (VACUUM's, logged before the file
/// shrinks) is never taken for a file cut short, whether a checkpoint recorded it or a crash
/// came first and recovery replayed it; a damaged size map is reported at open and costs
/// nothing else.
#[test]
fn vacuum_truncation_is_not_a_file_cut_short() {
    let cfg = config(&[]);
    let fs = FaultFs::new();
    let db = open(&fs, &cfg).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let mut rows = Rows::new();
    commit_inserts(&db, &t, 0..400, 0, &mut rows);
    db.checkpoint().unwrap();
    let before = db.table_pages(&t).unwrap();
    let mut tx = db.begin().unwrap();
    for (_, &(tid, _)) in rows.range(50..) {
        tx.delete(&t, tid).unwrap();
    }
    tx.commit().unwrap();
    rows.retain(|&id, _| id < 50);
    db.vacuum(Some("t"), &settledb::VacuumParams::default()).unwrap();
    let after = db.table_pages(&t).unwrap();
    assert!(after < before, "VACUUM truncated the table ({before} -> {after} pages)");
    // A crash before any checkpoint: the size map still says `before`; the truncation's
    // record says otherwise.
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    let db2 = open(&crashed, &cfg).unwrap();
    assert!(!db2.take_log().join("").contains("cut short"), "a logged truncation is not a cut");
    assert_rows(&db2, "t", &rows, "after the truncation and a crash");
    assert_check_clean(&db2, "after the truncation and a crash");
    db2.close().unwrap();
    db.close().unwrap();

    // A damaged map: a warning at open, nothing else.
    let map = PathBuf::from(format!("{DIR}/global/pg_relsize"));
    fs.open(&map, false).unwrap().write_at(b"junk", 0).unwrap();
    let db = open(&fs, &cfg).unwrap();
    let log = db.take_log().join("");
    assert!(log.contains("WARNING:  ") && log.contains("pg_relsize"), "{log}");
    assert_rows(&db, "t", &rows, "with a damaged size map");
    assert_check_clean(&db, "with a damaged size map");
}
