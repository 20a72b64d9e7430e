//! A crash in every phase of VACUUM (DESIGN.md §4 invariants 3, 4 and 6): recovery leaves the
//! heap, the index, the visibility map and the free space map consistent, and no committed
//! row is lost or resurrected.
//!
//! Each sync the engine makes is a point where a power loss may strike. The test prepares a
//! table with dead tuples (non-HOT updates), every row of its last third deleted (so truncation runs) and a
//! primary key, with a dead-item budget small enough for several index passes and 16 pages of
//! shared buffers (so phases I and III evict dirty pages, and each eviction syncs WAL first).
//! Then, for n = 1, 2, ...: the n-th sync fails (the engine stops writing, as after EIO), the
//! file system a power loss would leave is taken (only synced data, or each unsynced write
//! kept, lost or torn), recovery runs, `check` must be clean, the rows must equal the oracle,
//! and a second VACUUM must finish and leave `check` clean. The loop ends with the first n
//! that VACUUM completes before reaching.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use settledb::io::fault::{CrashMode, FaultFs};
use settledb::{Column, Config, Database, Schema, TableOptions, Type, VacuumParams, Value};

const DIR: &str = "/data";

fn config() -> Config {
    Config::from_pairs([
        ("shared_buffers", "128kB"),
        ("wal_segment_size", "1MB"),
        ("checkpoint_timeout", "1d"),
        ("max_wal_size", "1TB"),
        ("wal_writer_delay", "10s"),
        ("autovacuum", "off"),
        ("maintenance_work_mem", "1kB"),
    ])
    .unwrap()
}

fn open(fs: &Arc<FaultFs>) -> settledb::Result<Database> {
    Database::open_with_fs(fs.clone(), Path::new(DIR), config())
}

fn rows(db: &Database) -> BTreeMap<i32, i32> {
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    tx.scan(&t)
        .unwrap()
        .map(|r| {
            let (_, v) = r.unwrap();
            match (&v[0], &v[1]) {
                (Value::Int4(a), Value::Int4(b)) => (*a, *b),
                other => panic!("unexpected row {other:?}"),
            }
        })
        .collect()
}

fn assert_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap_or_else(|e| panic!("{what}: check failed to run: {e}"));
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

/// Creates table `t` (id primary key, val, pad) and loads 3,000 rows in one transaction, each
/// padded with 60 of `pad`.
fn load_t(db: &Database, pad: char) -> settledb::Table {
    let col = |n: &str, ty| Column { name: n.into(), ty, nullable: false };
    let schema = Schema { columns: vec![col("id", Type::Int4), col("val", Type::Int4), col("pad", Type::Text)] };
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", schema, opts).unwrap();
    let mut tx = db.begin().unwrap();
    let new_rows: Vec<Vec<Value>> =
        (0..3000).map(|i| vec![Value::Int4(i), Value::Int4(0), Value::Text(pad.to_string().repeat(60))]).collect();
    tx.insert_many(&t, &new_rows).unwrap();
    tx.commit().unwrap();
    t
}

fn prepare() -> (Arc<FaultFs>, BTreeMap<i32, i32>) {
    let fs = FaultFs::new();
    let db = open(&fs).unwrap();
    let t = load_t(&db, 'x');
    let pk = db.index("t_pkey").unwrap();
    let mut tx = db.begin().unwrap();
    for i in (0..2000).step_by(7) {
        tx.update_by_key(&pk, &[Value::Int4(i)], |r| {
            let mut r = r.to_vec();
            r[1] = Value::Int4(i);
            Ok(r)
        })
        .unwrap();
    }
    tx.commit().unwrap();
    // Delete every row on the last third of the pages (the updated versions are there too).
    let tail = db.table_pages(&t).unwrap() * 2 / 3;
    let mut tx = db.begin().unwrap();
    let doomed: Vec<settledb::Tid> =
        tx.scan(&t).unwrap().map(|r| r.unwrap().0).filter(|tid| tid.block.0 >= tail).collect();
    for tid in doomed {
        assert!(tx.delete(&t, tid).unwrap());
    }
    tx.commit().unwrap();
    db.checkpoint().unwrap();
    let expected = rows(&db);
    db.close().unwrap();
    (fs.crash(CrashMode::LoseUnsynced), expected)
}

#[test]
fn crash_at_every_sync_of_vacuum_recovers_consistently() {
    let (base, expected) = prepare();
    let mut n = 1u64;
    loop {
        let fs = base.crash(CrashMode::LoseUnsynced);
        let db = open(&fs).unwrap();
        let syncs_before = fs.syncs();
        fs.fail_sync_after(Some(n));
        let outcome = db.vacuum(Some("t"), &VacuumParams::default());
        let reached = fs.syncs() - syncs_before >= n;
        fs.fail_sync_after(None);
        db.abandon();
        if !reached {
            let r = outcome.expect("vacuum without a failed sync succeeds").remove(0);
            assert!(r.num_index_scans > 1, "the budget should force several index passes");
            assert!(r.removed_pages > 0, "the empty tail should be truncated");
            break;
        }
        for mode in [CrashMode::LoseUnsynced, CrashMode::Random { seed: n }] {
            let crashed = fs.crash(mode);
            let db = open(&crashed).unwrap_or_else(|e| panic!("sync {n}, {mode:?}: recovery failed: {e}"));
            let what = format!("crash at sync {n} of VACUUM ({mode:?})");
            assert_clean(&db, &what);
            assert_eq!(rows(&db), expected, "{what}: rows differ from the oracle");
            db.vacuum(Some("t"), &VacuumParams::default()).unwrap_or_else(|e| panic!("{what}: second vacuum: {e}"));
            assert_clean(&db, &format!("{what}, after a second vacuum"));
            assert_eq!(rows(&db), expected, "{what}: rows differ after a second vacuum");
            db.abandon();
        }
        n += 1;
        assert!(n < 10_000, "vacuum keeps syncing");
    }
    println!("VACUUM synced {} times; a crash was taken at each", n - 1);
    assert!(n > 3, "VACUUM should sync several times in this setup (got {n})");
}

/// What a crash must not change: every heap page and the visibility map page, rendered as
/// pageinspect does, LSNs included, less what WAL never carries: commit hint bits (set without
/// logging) and `t_cid` (which redo rebuilds as 0).
fn snapshot(db: &Database) -> Vec<String> {
    let t = db.table("t").unwrap();
    let unlogged = |page: String| -> String {
        let mut out = Vec::new();
        let mut words = page.split(' ');
        while let Some(w) = words.next() {
            match w {
                "cid:" => {
                    words.next();
                    out.push("cid: -".to_string());
                }
                "infomask:" => {
                    let flags = words.next().unwrap_or_default();
                    let kept: Vec<&str> =
                        flags.split('|').filter(|f| !matches!(*f, "XMIN_COMMITTED" | "XMAX_COMMITTED")).collect();
                    out.push(format!("infomask: {}", kept.join("|")));
                }
                w => out.push(w.to_string()),
            }
        }
        out.join(" ")
    };
    let mut pages: Vec<String> =
        (0..db.table_pages(&t).unwrap()).map(|b| unlogged(db.describe_page(&t, b, true).unwrap())).collect();
    pages.push(db.describe_map_page(&t, settledb::types::Fork::Vm, 0).unwrap());
    pages
}

/// Redo of VACUUM's own records (PRUNE_FREEZE in phase I, VACUUM in phase III, each also
/// setting the visibility map) rebuilds exactly the pages VACUUM left, not merely consistent
/// ones: "WAL replay works the same as the normal case". After a checkpoint every page is
/// changed once by a HOT or non-HOT update, so that VACUUM's records carry no full-page image
/// of the heap pages and their redo has to prune, freeze and set the flag itself; the map
/// fork does not exist yet, so the records create its page (PF_VM_INIT). Then the power goes
/// out with nothing but WAL synced, recovery replays everything from the checkpoint, and every
/// heap page and the map page must read exactly as they did, under each freeze policy.
#[test]
fn redo_of_vacuum_records_rebuilds_the_pages_vacuum_left() {
    use settledb::FreezePolicy::{Adaptive, Eager, Lazy, Pg16};
    for policy in [Lazy, Pg16, Eager, Adaptive] {
        let fs = FaultFs::new();
        let db = open(&fs).unwrap();
        let col = |n: &str, ty| Column { name: n.into(), ty, nullable: false };
        let schema = Schema { columns: vec![col("id", Type::Int4), col("val", Type::Int4), col("pad", Type::Text)] };
        let mut opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
        opts.fillfactor = 90;
        let t = db.create_table("t", schema, opts).unwrap();
        let mut tx = db.begin().unwrap();
        for i in 0..1500 {
            tx.insert(&t, &[Value::Int4(i), Value::Int4(0), Value::Text("y".repeat(40))]).unwrap();
        }
        tx.commit().unwrap();
        db.checkpoint().unwrap();
        // One change to every page after the checkpoint (its full-page image goes with it),
        // some HOT (room left by the fillfactor), some deletes.
        let pk = db.index("t_pkey").unwrap();
        let mut tx = db.begin().unwrap();
        for i in (0..1500).step_by(9) {
            tx.update_by_key(&pk, &[Value::Int4(i)], |r| {
                let mut r = r.to_vec();
                r[1] = Value::Int4(i);
                Ok(r)
            })
            .unwrap();
        }
        let victims: Vec<settledb::Tid> = tx.scan(&t).unwrap().map(|r| r.unwrap().0).step_by(13).collect();
        for tid in victims {
            tx.delete(&t, tid).unwrap();
        }
        tx.commit().unwrap();
        let params = VacuumParams { policy: Some(policy), ..VacuumParams::default() };
        let r = db.vacuum(Some("t"), &params).unwrap().remove(0);
        assert!(r.tuples_deleted > 0 && r.vm_new_visible_pages > 0, "{policy:?}: vacuum did nothing to redo");
        // A commit flushes the WAL up to it, VACUUM's records included.
        let mut tx = db.begin().unwrap();
        tx.insert(&t, &[Value::Int4(-1), Value::Int4(0), Value::Text(String::new())]).unwrap();
        tx.commit().unwrap();
        let before = snapshot(&db);
        db.abandon();
        let crashed = fs.crash(CrashMode::LoseUnsynced);
        let db = open(&crashed).unwrap();
        assert!(db.recovery_report().performed, "{policy:?}: the crash needed recovery");
        let after = snapshot(&db);
        assert_eq!(before.len(), after.len(), "{policy:?}: page count");
        for (b, (x, y)) in before.iter().zip(&after).enumerate() {
            assert_eq!(x, y, "{policy:?}: page {b} differs after redo");
        }
        assert_clean(&db, &format!("{policy:?}: after redo"));
        db.abandon();
    }
}

/// VACUUM logs a page whose only change is becoming all-visible without a full-page image when
/// the page matches its file (the flag and checksum lie in its first sector, which a device
/// writes whole), and leaves the page's LSN alone. That is sound only if nothing else reaches
/// the page before it is written: readers must not put hint bits into it meanwhile, and the
/// WAL must be flushed to the record before the page goes out. A table is loaded and
/// checkpointed (its pages match their files, no hints on them), a third of its pages are
/// changed after the checkpoint (they have images), then VACUUM: only the changed pages may
/// cost images. Scans then run over the table while its pages wait in the buffer pool, which
/// would hint every tuple; another table's inserts then push them out of the pool unsynced, and
/// the power fails with each unsynced write kept or lost at random and torn to whole sectors.
/// Recovery must read every page (a hint in a torn page would fail its checksum), find the
/// rows, and `check` must be clean.
#[test]
fn imageless_all_visible_pages_survive_torn_writes() {
    let mut cfg = config();
    cfg.set("shared_buffers", "2MB").unwrap();
    let open_big = |fs: &Arc<FaultFs>| Database::open_with_fs(fs.clone(), Path::new(DIR), cfg.clone());
    let fs = FaultFs::new();
    let db = open_big(&fs).unwrap();
    let t = load_t(&db, 'z');
    db.checkpoint().unwrap();
    let pages = db.table_pages(&t).unwrap();
    // Through the key, so that no scan hints the other pages in memory (a page holding hints
    // its file lacks cannot be logged without an image).
    let changed = pages / 3;
    let pk = db.index("t_pkey").unwrap();
    let mut tx = db.begin().unwrap();
    for k in 0..changed {
        assert!(tx.delete_by_key(&pk, &[Value::Int4((k * 3000 / pages) as i32)]).unwrap());
    }
    tx.commit().unwrap();
    let params = VacuumParams { policy: Some(settledb::FreezePolicy::Lazy), ..VacuumParams::default() };
    let r = db.vacuum(Some("t"), &params).unwrap().remove(0);
    assert_eq!(r.vm_new_visible_pages, pages, "every page should become all-visible");
    // The changed heap pages were imaged by the deletes already; the map page and the index
    // leaves VACUUM changes may be; the unchanged heap pages must not be.
    let index_pages = db.index_pages(&db.index("t_pkey").unwrap()).unwrap();
    assert!(pages - changed > 1 + index_pages, "too few unchanged pages for the test to tell");
    assert!(
        r.wal.fpi <= u64::from(1 + index_pages),
        "{} full-page images for {pages} heap pages ({changed} changed) and {index_pages} index pages",
        r.wal.fpi
    );
    let mut expected = rows(&db);
    for _ in 0..2 {
        assert_eq!(rows(&db), expected);
    }
    // A commit flushes the WAL (VACUUM's records included) but syncs no data file.
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(-1), Value::Int4(0), Value::Text(String::new())]).unwrap();
    tx.commit().unwrap();
    expected.insert(-1, 0);
    // Another table, written row by row, takes every frame of the pool in turn: the dirty
    // pages are written out (unsynced) as they are evicted.
    let pad = Column { name: "pad".into(), ty: Type::Text, nullable: false };
    let filler = db.create_table("filler", Schema { columns: vec![pad] }, TableOptions::default()).unwrap();
    let written = fs.bytes_written();
    let mut tx = db.begin().unwrap();
    for _ in 0..3000 {
        tx.insert(&filler, &[Value::Text("f".repeat(1000))]).unwrap();
    }
    tx.commit().unwrap();
    assert!(fs.bytes_written() - written > 3 << 20, "the pool should have been cycled through");
    db.abandon();
    for seed in 0..32 {
        let crashed = fs.crash(CrashMode::Random { seed });
        let db = open_big(&crashed).unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e}"));
        assert_eq!(rows(&db), expected, "seed {seed}: rows after recovery");
        let t = db.table("t").unwrap();
        let (visible, _) = db.vm_summary(&t).unwrap();
        assert!(visible >= u64::from(pages - changed), "seed {seed}: {visible} pages all-visible");
        assert_clean(&db, &format!("seed {seed}: after recovery"));
        db.abandon();
    }
}
