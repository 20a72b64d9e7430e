//! Crash safety through [`FaultFs`] (DESIGN.md §4 invariant 6: a committed transaction
//! survives any crash per `synchronous_commit`; an aborted or in-progress one is never
//! visible after recovery).
//!
//! Every test runs a deterministic workload against a trivially correct oracle (a `BTreeMap`
//! of the rows each acknowledged commit left behind, TIDs included), takes the file system a
//! power loss would leave at chosen points, runs crash recovery on it and compares:
//!
//! * `every_commit_survives_a_crash_after_it`: a crash after every commit, checkpoints in
//!   the middle, small `shared_buffers` (16 pages) so that eviction writes dirty pages,
//!   rollbacks, and a crash in the middle of a transaction; each recovered database then
//!   takes new work and survives a second crash.
//! * `random_crashes_with_torn_writes`: `CrashMode::Random` (unsynced writes kept, lost or
//!   torn to whole sectors) at many seeds and crash points.
//! * `full_page_image_repairs_torn_page` / `torn_page_without_full_page_writes_is_reported`:
//!   a page torn deterministically (new first half, old second half) after a checkpoint is
//!   repaired from the full-page image; with `full_page_writes = off` recovery stops with an
//!   error naming the relation and block instead.
//! * `uncommitted_pages_on_disk_stay_invisible`: an open transaction's pages written by
//!   eviction and by a checkpoint are on disk at the crash and stay invisible.
//! * `asynchronous_commit_loses_only_a_suffix`: with `synchronous_commit = off` the commits
//!   that survive are a prefix of the acknowledged ones, each whole.
//! * `crashes_around_recycled_wal_segments_lose_nothing`: checkpoints recycle WAL segments
//!   (renamed to future segment numbers, stale bytes and all); crashes right after a checkpoint
//!   (renames not yet durable), after commits that overwrote recycled files, and torn random
//!   crashes each recover every commit.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use settledb::io::fault::{CrashMode, FaultFs};
use settledb::io::FileSystem;
use settledb::page::{self, BLCKSZ};
use settledb::{BlockNumber, Column, Config, Database, Error, Schema, Table, TableOptions, Tid, Type, Value};

const DIR: &str = "/data";

/// id -> (tid, val, note): the committed rows as the oracle knows them.
type Rows = BTreeMap<i32, (Tid, i32, Option<String>)>;

fn config(extra: &[(&'static str, &'static str)]) -> Config {
    // No background checkpoint may interfere: only the tests' own checkpoints run.
    let mut pairs = vec![
        ("wal_segment_size", "1MB"),
        ("checkpoint_timeout", "1d"),
        ("max_wal_size", "1TB"),
        ("wal_writer_delay", "10s"),
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

fn values(id: i32, val: i32, note: &Option<String>) -> Vec<Value> {
    vec![Value::Int4(id), Value::Int4(val), note.clone().map_or(Value::Null, Value::Text)]
}

fn open(fs: &Arc<FaultFs>, cfg: &Config) -> settledb::Result<Database> {
    Database::open_with_fs(fs.clone(), Path::new(DIR), cfg.clone())
}

/// Runs the verifier; any problem fails the test with the full report.
fn assert_check_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap_or_else(|e| panic!("{what}: check failed to run: {e}"));
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

/// Every visible row of `t`, by id.
fn read_rows(db: &Database, name: &str) -> Rows {
    let t = db.table(name).unwrap();
    let mut tx = db.begin().unwrap();
    let mut rows = Rows::new();
    for r in tx.scan(&t).unwrap() {
        let (tid, v) = r.unwrap();
        let (Value::Int4(id), Value::Int4(val)) = (&v[0], &v[1]) else { panic!("bad row {v:?}") };
        let note = match &v[2] {
            Value::Text(s) => Some(s.clone()),
            Value::Null => None,
            other => panic!("bad note {other:?}"),
        };
        assert!(rows.insert(*id, (tid, *val, note)).is_none(), "id {id} visible twice");
    }
    rows
}

fn note_for(rng: &mut StdRng) -> Option<String> {
    match rng.gen_range(0..4) {
        0 => None,
        1 => Some("x".repeat(rng.gen_range(0..20))),
        _ => Some("y".repeat(rng.gen_range(50..400))),
    }
}

/// One random operation of a transaction on the working copy `rows`.
fn random_op(rng: &mut StdRng, tx: &mut settledb::Transaction<'_>, t: &Table, rows: &mut Rows, next_id: &mut i32) {
    let ids: Vec<i32> = rows.keys().copied().collect();
    let choice = if ids.is_empty() { 0 } else { rng.gen_range(0..10) };
    if choice < 4 {
        let (id, val, note) = (*next_id, rng.gen_range(0..1000), note_for(rng));
        *next_id += 1;
        let tid = tx.insert(t, &values(id, val, &note)).unwrap();
        rows.insert(id, (tid, val, note));
    } else if choice < 8 {
        let id = ids[rng.gen_range(0..ids.len())];
        let (tid, _, _) = rows[&id].clone();
        let (val, note) = (rng.gen_range(0..1000), note_for(rng));
        let new = tx.update(t, tid, &values(id, val, &note)).unwrap().expect("row exists");
        rows.insert(id, (new, val, note));
    } else {
        let id = ids[rng.gen_range(0..ids.len())];
        assert!(tx.delete(t, rows[&id].0).unwrap());
        rows.remove(&id);
    }
}

/// Asserts `actual == expected`, naming the first few rows that differ.
fn assert_rows(actual: &Rows, expected: &Rows, what: &str) {
    let short = |r: Option<&(Tid, i32, Option<String>)>| {
        r.map(|(t, v, n)| format!("{t:?} val {v} note {:?}", n.as_ref().map(String::len)))
    };
    let diffs: Vec<String> = expected
        .keys()
        .chain(actual.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|id| expected.get(id) != actual.get(id))
        .map(|id| format!("id {id}: expected {:?}, found {:?}", short(expected.get(id)), short(actual.get(id))))
        .collect();
    assert!(diffs.is_empty(), "{what}: {} rows differ, first: {:#?}", diffs.len(), &diffs[..diffs.len().min(8)]);
}

/// Runs crash recovery on `fs`, checks the rows against `expected`, then commits one more row,
/// crashes again and checks that the row and everything before it survived the second crash.
fn recover_and_check(fs: &Arc<FaultFs>, cfg: &Config, expected: &Rows, what: &str) {
    let db = open(fs, cfg).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    assert!(db.recovery_report().performed, "{what}: the crash needed recovery");
    assert_rows(&read_rows(&db, "t"), expected, &format!("{what}: rows after recovery"));
    assert_check_clean(&db, what);
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    let note = Some("after recovery".to_string());
    let tid = tx.insert(&t, &values(-1, 7, &note)).unwrap();
    tx.commit().unwrap();
    let mut expected = expected.clone();
    expected.insert(-1, (tid, 7, note));
    let fs2 = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    let db = open(&fs2, cfg).unwrap_or_else(|e| panic!("{what}: second recovery failed: {e}"));
    assert_rows(&read_rows(&db, "t"), &expected, &format!("{what}: rows after the second crash"));
    assert_check_clean(&db, &format!("{what}, second crash"));
    db.abandon();
}

/// Creates table `t` with `n` committed rows; returns the oracle and the next id.
fn setup(db: &Database, n: i32, rng: &mut StdRng) -> (Table, Rows, i32) {
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let mut rows = Rows::new();
    let mut tx = db.begin().unwrap();
    for id in 0..n {
        let (val, note) = (rng.gen_range(0..1000), note_for(rng));
        let tid = tx.insert(&t, &values(id, val, &note)).unwrap();
        rows.insert(id, (tid, val, note));
    }
    tx.commit().unwrap();
    (t, rows, n)
}

#[test]
fn every_commit_survives_a_crash_after_it() {
    let cfg = config(&[("shared_buffers", "128kB")]);
    let fs = FaultFs::new();
    let db = open(&fs, &cfg).unwrap();
    let mut rng = StdRng::seed_from_u64(1);
    let (t, mut committed, mut next_id) = setup(&db, 300, &mut rng);
    recover_and_check(&fs.crash(CrashMode::LoseUnsynced), &cfg, &committed, "after the initial load");
    let mut commits = 0;
    for k in 0..60 {
        let mut work = committed.clone();
        let mut tx = db.begin().unwrap();
        for _ in 0..rng.gen_range(1..8) {
            random_op(&mut rng, &mut tx, &t, &mut work, &mut next_id);
        }
        if k % 7 == 3 {
            // A crash in the middle of a transaction: none of it may show.
            recover_and_check(&fs.crash(CrashMode::LoseUnsynced), &cfg, &committed, &format!("inside txn {k}"));
        }
        if k % 10 == 9 {
            tx.rollback().unwrap();
        } else {
            tx.commit().unwrap();
            committed = work;
            commits += 1;
        }
        if k % 15 == 14 {
            db.checkpoint().unwrap();
        }
        recover_and_check(&fs.crash(CrashMode::LoseUnsynced), &cfg, &committed, &format!("after txn {k}"));
    }
    assert!(commits >= 50);
    assert!(db.stats().buffers.written > 0, "evictions wrote pages between checkpoints");
    db.abandon();
}

#[test]
fn random_crashes_with_torn_writes() {
    let cfg = config(&[("shared_buffers", "128kB")]);
    for seed in 0..24u64 {
        let fs = FaultFs::new();
        let db = open(&fs, &cfg).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let (t, mut committed, mut next_id) = setup(&db, 200, &mut rng);
        db.checkpoint().unwrap();
        let crash_after = rng.gen_range(1..25);
        for k in 0..crash_after {
            let mut work = committed.clone();
            let mut tx = db.begin().unwrap();
            for _ in 0..rng.gen_range(1..8) {
                random_op(&mut rng, &mut tx, &t, &mut work, &mut next_id);
            }
            tx.commit().unwrap();
            committed = work;
            if k == crash_after / 2 && seed % 2 == 0 {
                db.checkpoint().unwrap();
            }
        }
        // Half of the crashes hit while a transaction is open.
        let open_tx = if seed % 3 == 0 {
            let mut work = committed.clone();
            let mut tx = db.begin().unwrap();
            for _ in 0..10 {
                random_op(&mut rng, &mut tx, &t, &mut work, &mut next_id);
            }
            Some(tx)
        } else {
            None
        };
        let crashed = fs.crash(CrashMode::Random { seed });
        drop(open_tx);
        db.abandon();
        recover_and_check(&crashed, &cfg, &committed, &format!("seed {seed}"));
    }
}

fn heap_path(t: &Table) -> std::path::PathBuf {
    Path::new(DIR).join("base").join(t.oid().0.to_string())
}

fn read_block(fs: &FaultFs, t: &Table, block: u32) -> Vec<u8> {
    let f = fs.open(&heap_path(t), false).unwrap();
    let mut buf = vec![0u8; BLCKSZ];
    f.read_exact_at(&mut buf, u64::from(block) * BLCKSZ as u64).unwrap();
    buf
}

/// Checkpoint, then update every row of block 0 (first change after the checkpoint: a
/// full-page image is logged when `full_page_writes` is on), commit, and let eviction write
/// the page without an fsync. Returns a crashed file system whose block 0 is torn (new first
/// half, old second half), the table, and the committed rows.
fn torn_page_scenario(full_page_writes: &'static str) -> (Arc<FaultFs>, Config, Table, Rows) {
    let cfg = config(&[("shared_buffers", "128kB"), ("full_page_writes", full_page_writes)]);
    let fs = FaultFs::new();
    let db = open(&fs, &cfg).unwrap();
    let mut rng = StdRng::seed_from_u64(99);
    let (t, mut rows, _) = setup(&db, 100, &mut rng);
    db.checkpoint().unwrap();
    let old = read_block(&fs, &t, 0);
    let mut tx = db.begin().unwrap();
    let on_block0: Vec<i32> = rows.iter().filter(|(_, r)| r.0.block == BlockNumber(0)).map(|(&id, _)| id).collect();
    assert!(on_block0.len() > 5);
    for id in on_block0 {
        let (tid, val, note) = rows[&id].clone();
        let new = tx.update(&t, tid, &values(id, val + 1, &note)).unwrap().unwrap();
        rows.insert(id, (new, val + 1, note));
    }
    tx.commit().unwrap();
    // Fill the 16-page buffer pool with another table until block 0 has been evicted.
    let filler = db.create_table("filler", schema(), TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    for i in 0..3000 {
        tx.insert(&filler, &values(i, i, &Some("f".repeat(200)))).unwrap();
        if i % 100 == 0 && read_block(&fs, &t, 0) != old {
            break;
        }
    }
    tx.commit().unwrap();
    let new = read_block(&fs, &t, 0);
    assert_ne!(new, old, "eviction wrote block 0 (not yet fsynced)");
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    assert_eq!(read_block(&crashed, &t, 0), old, "the unsynced write was lost");
    let mut torn = old.clone();
    torn[..BLCKSZ / 2].copy_from_slice(&new[..BLCKSZ / 2]);
    assert!(page::verify(&torn, t.oid(), BlockNumber(0)).is_err(), "the torn page fails its checksum");
    let f = crashed.open(&heap_path(&t), false).unwrap();
    f.write_at(&torn, 0).unwrap();
    f.sync().unwrap();
    (crashed, cfg, t, rows)
}

#[test]
fn full_page_image_repairs_torn_page() {
    let (fs, cfg, t, rows) = torn_page_scenario("on");
    let db = open(&fs, &cfg).unwrap();
    assert_rows(&read_rows(&db, "t"), &rows, "torn page repaired");
    db.checkpoint().unwrap();
    db.abandon();
    let block0 = read_block(&fs, &t, 0);
    page::verify(&block0, t.oid(), BlockNumber(0)).expect("recovery rewrote block 0 whole");
}

#[test]
fn torn_page_without_full_page_writes_is_reported() {
    let (fs, cfg, t, _) = torn_page_scenario("off");
    match open(&fs, &cfg) {
        Err(Error::Corrupted { rel, block, detail }) => {
            assert_eq!((rel, block), (t.oid(), BlockNumber(0)));
            assert!(detail.contains("checksum"), "{detail}");
        }
        Err(e) => panic!("expected a checksum failure naming the page, got {e}"),
        Ok(_) => panic!("a torn page without a full-page image cannot be recovered silently"),
    }
}

#[test]
fn uncommitted_pages_on_disk_stay_invisible() {
    let cfg = config(&[("shared_buffers", "128kB")]);
    let fs = FaultFs::new();
    let db = open(&fs, &cfg).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let (t, committed, mut next_id) = setup(&db, 300, &mut rng);
    let pages_before = db.table_pages(&t).unwrap();
    let written_before = db.stats().buffers.written;
    let mut work = committed.clone();
    let mut tx = db.begin().unwrap();
    for _ in 0..1500 {
        random_op(&mut rng, &mut tx, &t, &mut work, &mut next_id);
    }
    let pages_after = db.table_pages(&t).unwrap();
    assert!(pages_after > pages_before + 16, "the transaction outgrew shared_buffers: {pages_before} -> {pages_after}");
    assert!(db.stats().buffers.written > written_before, "eviction wrote uncommitted pages");
    recover_and_check(&fs.crash(CrashMode::LoseUnsynced), &cfg, &committed, "open txn, evicted pages");
    for seed in 0..4 {
        recover_and_check(&fs.crash(CrashMode::Random { seed }), &cfg, &committed, "open txn, random crash");
    }
    // A checkpoint makes the uncommitted pages durable; they must still not show.
    db.checkpoint().unwrap();
    recover_and_check(&fs.crash(CrashMode::LoseUnsynced), &cfg, &committed, "open txn after a checkpoint");
    tx.commit().unwrap();
    recover_and_check(&fs.crash(CrashMode::LoseUnsynced), &cfg, &work, "after its commit");
    db.abandon();
}

#[test]
fn asynchronous_commit_loses_only_a_suffix() {
    let cfg = config(&[("synchronous_commit", "off"), ("shared_buffers", "128kB")]);
    for seed in 0..12u64 {
        let fs = FaultFs::new();
        let db = open(&fs, &cfg).unwrap();
        let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
        // Row 0 is a counter every transaction bumps; transaction i also inserts row i.
        let mut tx = db.begin().unwrap();
        let mut counter = tx.insert(&t, &values(0, 0, &None)).unwrap();
        tx.commit().unwrap();
        db.checkpoint().unwrap();
        let n = 30 + seed as i32 * 5;
        let mut snapshots = Vec::new();
        for i in 1..=n {
            let mut tx = db.begin().unwrap();
            tx.insert(&t, &values(i, i * 10, &Some(format!("row {i} {}", "z".repeat(i as usize * 7))))).unwrap();
            counter = tx.update(&t, counter, &values(0, i, &None)).unwrap().unwrap();
            tx.commit().unwrap();
            if i % 10 == 0 {
                snapshots.push((i, fs.crash(CrashMode::Random { seed: seed * 100 + i as u64 })));
            }
        }
        snapshots.push((n, fs.crash(CrashMode::LoseUnsynced)));
        db.abandon();
        for (acked, crashed) in snapshots {
            let db = open(&crashed, &cfg).unwrap();
            let rows = read_rows(&db, "t");
            let survived = rows[&0].1;
            assert!(survived <= acked, "seed {seed}: commit {survived} survived but only {acked} were made");
            let ids: Vec<i32> = rows.keys().copied().collect();
            assert_eq!(ids, (0..=survived).collect::<Vec<_>>(), "seed {seed}: commits 1..={survived} and no others");
            for (&id, (_, val, note)) in rows.iter().skip(1) {
                assert_eq!(*val, id * 10);
                assert_eq!(note.as_deref(), Some(format!("row {id} {}", "z".repeat(id as usize * 7)).as_str()));
            }
            db.abandon();
        }
    }
}

/// WAL segment numbers present in the data directory.
fn wal_segments(fs: &FaultFs) -> Vec<u64> {
    let names = fs.list(&Path::new(DIR).join("pg_wal")).unwrap();
    names.iter().filter_map(|n| settledb::wal::segment::parse_segment_file_name(n, 1 << 20)).collect()
}

/// Commits transactions of random operations until `bytes` of WAL were written.
fn commit_wal(db: &Database, t: &Table, rng: &mut StdRng, rows: &mut Rows, next_id: &mut i32, bytes: u64) {
    let start = db.stats().wal.bytes;
    while db.stats().wal.bytes - start < bytes {
        let mut work = rows.clone();
        let mut tx = db.begin().unwrap();
        for _ in 0..20 {
            random_op(rng, &mut tx, t, &mut work, next_id);
        }
        tx.commit().unwrap();
        *rows = work;
    }
}

#[test]
fn crashes_around_recycled_wal_segments_lose_nothing() {
    let cfg = config(&[("shared_buffers", "1MB")]);
    let fs = FaultFs::new();
    let db = open(&fs, &cfg).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    let (t, mut committed, mut next_id) = setup(&db, 300, &mut rng);
    let mut recycled_seen = false;
    for round in 0..5u64 {
        commit_wal(&db, &t, &mut rng, &mut committed, &mut next_id, 1_500_000);
        db.checkpoint().unwrap();
        // 1 MB segments and min_wal_size 80MB: every segment before the redo pointer is kept
        // as a future one.
        let insert_seg = (db.stats().wal.bytes + (1 << 20)) >> 20;
        let segs = wal_segments(&fs);
        recycled_seen |= segs.iter().any(|&s| s > insert_seg);
        assert!(segs.iter().all(|&s| s + 2 >= insert_seg || round == 0), "round {round}: old segment left in {segs:?}");
        recover_and_check(
            &fs.crash(CrashMode::LoseUnsynced),
            &cfg,
            &committed,
            &format!("right after checkpoint {round}"),
        );
        commit_wal(&db, &t, &mut rng, &mut committed, &mut next_id, 700_000);
        recover_and_check(&fs.crash(CrashMode::LoseUnsynced), &cfg, &committed, &format!("into recycled WAL, {round}"));
        let seed = 100 + round;
        recover_and_check(&fs.crash(CrashMode::Random { seed }), &cfg, &committed, &format!("torn, {round}"));
    }
    assert!(recycled_seen, "no checkpoint recycled a segment: {:?}", wal_segments(&fs));
    db.abandon();
}
