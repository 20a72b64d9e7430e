//! TRUNCATE through the engine's API (`Transaction::truncate`, see `db::transaction::truncate`):
//! what it empties, what a rollback brings back, which files exist afterwards, and what a
//! crash at either side of the commit record leaves.
//!
//! * `commit_empties_and_frees_the_old_files`: every row and index entry goes, the table and
//!   each index get new files and the old ones (heap with its VM and FSM forks, indexes) are
//!   removed; the unique index holds on the empty table; VACUUM and `check` are clean;
//!   statistics start again (relpages 0, live tuples 0); a restart keeps it all.
//! * `rollback_restores_every_row_and_index_entry`: rows inserted after the TRUNCATE are seen
//!   by the transaction; ROLLBACK brings back the old rows and index entries, removes the new
//!   files.
//! * `rollback_to_a_savepoint_before_the_truncate_restores_the_rows`, and RELEASE keeps it.
//! * `crash_before_and_after_the_commit_record`: with `FaultFs`, a crash inside the
//!   transaction recovers the old rows and files only; one after its commit, the new.
//! * `a_prepared_truncate_commits_or_rolls_back_in_the_same_run` and
//!   `a_prepared_truncate_survives_a_restart_and_a_crash`: PREPARE after a TRUNCATE keeps both
//!   sets of files and the lock (across a clean restart or a crash too); COMMIT PREPARED leaves
//!   the new rows and files, ROLLBACK PREPARED the old, and the table takes writes after.
//! * `a_second_session_waits_for_the_lock`: TRUNCATE waits for a reader's lock (seen in
//!   `Database::locks`, no timing), and fails with 55P03 under `lock_timeout`; a reader
//!   waits for the TRUNCATE and then reads the new, empty table.
//! * `catalog_generation_moves_with_every_definition_change`: TRUNCATE (and its rollback),
//!   CREATE/DROP INDEX, ALTER TABLE and DROP TABLE each move `Database::catalog_generation`;
//!   rows and VACUUM do not.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use settledb::db::AlterTable;
use settledb::io::fault::{CrashMode, FaultFs};
use settledb::io::FileSystem;
use settledb::lmgr::LockMode;
use settledb::{Column, Config, Database, Error, Schema, TableOptions, TruncateOptions, Type, Value};

fn config() -> Config {
    Config {
        shared_buffers_bytes: 8 << 20,
        fsync: false,
        autovacuum: false,
        deadlock_timeout_ms: 50,
        ..Config::default()
    }
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "v".into(), ty: Type::Text, nullable: false },
        ],
    }
}

fn row(id: i32) -> Vec<Value> {
    vec![Value::Int4(id), Value::Text(format!("row {id} {}", "x".repeat(40)))]
}

/// Table `t` with a primary key, an index on `v`, and ids `0..n` committed.
fn setup(db: &Database, n: i32) {
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", schema(), opts).unwrap();
    db.create_index("t_v", "t", &["v"], false).unwrap();
    let mut tx = db.begin().unwrap();
    for id in 0..n {
        tx.insert(&t, &row(id)).unwrap();
    }
    tx.commit().unwrap();
    db.checkpoint().unwrap();
}

fn ids(db: &Database) -> Vec<i32> {
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    let mut v: Vec<i32> = tx
        .scan(&t)
        .unwrap()
        .map(|r| match r.unwrap().1[0] {
            Value::Int4(i) => i,
            ref other => panic!("{other:?}"),
        })
        .collect();
    v.sort();
    v
}

/// Every id found through the primary key and through `t_v`, probing `0..n`.
fn ids_by_index(db: &Database, n: i32) -> (Vec<i32>, Vec<i32>) {
    let pk = db.index("t_pkey").unwrap();
    let by_v = db.index("t_v").unwrap();
    let mut tx = db.begin().unwrap();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for id in 0..n {
        if tx.get(&pk, &[Value::Int4(id)]).unwrap().is_some() {
            a.push(id);
        }
        if tx.get(&by_v, &[row(id)[1].clone()]).unwrap().is_some() {
            b.push(id);
        }
    }
    (a, b)
}

/// The relation files under `base/`.
fn files(fs: &dyn FileSystem, dir: &Path) -> BTreeSet<String> {
    fs.list(&dir.join("base"))
        .unwrap()
        .into_iter()
        .filter(|f| f.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .collect()
}

/// The user relations' file nodes, by the files they own (`16384`, `16384_vm`, ...).
fn nodes(files: &BTreeSet<String>) -> BTreeSet<u32> {
    files.iter().filter_map(|f| f.split('_').next()?.parse().ok()).filter(|&n| n >= 16384).collect()
}

fn assert_check_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap_or_else(|e| panic!("{what}: check failed to run: {e}"));
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

#[test]
fn commit_empties_and_frees_the_old_files() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(settledb::io::RealFs);
    let db = Database::open(dir.path(), config()).unwrap();
    setup(&db, 400);
    let t = db.table("t").unwrap();
    {
        let mut tx = db.begin().unwrap();
        tx.scan(&t).unwrap().for_each(drop);
        tx.commit().unwrap();
    }
    assert_eq!(db.table_stats(&t).n_live_tup, 400);
    let before = files(&*fs, dir.path());
    let old_heap = format!("{}", t.oid().0);
    assert!(before.contains(&old_heap) && before.len() >= 3, "{before:?}");
    db.vacuum(Some("t"), &Default::default()).unwrap();
    let before = files(&*fs, dir.path());
    assert!(before.contains(&format!("{old_heap}_vm")), "VACUUM made a VM fork: {before:?}");

    db.truncate(&["t"], TruncateOptions::default()).unwrap();
    assert_eq!(ids(&db), Vec::<i32>::new());
    assert_eq!(ids_by_index(&db, 400), (vec![], vec![]));
    let after = files(&*fs, dir.path());
    let (old_nodes, new_nodes) = (nodes(&before), nodes(&after));
    assert_eq!(old_nodes.len(), new_nodes.len(), "one heap and two indexes before and after");
    assert!(old_nodes.iter().all(|n| !new_nodes.contains(n)), "old {old_nodes:?} new {new_nodes:?}");
    assert!(before.iter().filter(|f| f.starts_with(&old_heap)).count() >= 2);
    assert_eq!(db.table_stats(&t).n_live_tup, 0, "live tuples start again from zero");
    assert_check_clean(&db, "after the truncate");

    // The indexes work on the new storage, the unique one included, through an old handle.
    let mut tx = db.begin().unwrap();
    for id in 0..10 {
        tx.insert(&t, &row(id)).unwrap();
    }
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    let dup = tx.insert(&t, &row(3)).unwrap_err();
    assert!(matches!(dup, Error::UniqueViolation { .. }), "{dup:?}");
    tx.rollback().unwrap();
    assert_eq!(ids(&db), (0..10).collect::<Vec<_>>());
    assert_eq!(ids_by_index(&db, 400), ((0..10).collect(), (0..10).collect()));
    db.vacuum(Some("t"), &Default::default()).unwrap();
    assert_check_clean(&db, "after inserts and VACUUM");
    db.close().unwrap();

    let db = Database::open(dir.path(), config()).unwrap();
    assert_eq!(ids(&db), (0..10).collect::<Vec<_>>());
    assert_eq!(ids_by_index(&db, 400), ((0..10).collect(), (0..10).collect()));
    assert_eq!(nodes(&files(&*fs, dir.path())), new_nodes);
    assert_check_clean(&db, "after a restart");
}

#[test]
fn rollback_restores_every_row_and_index_entry() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(settledb::io::RealFs);
    let db = Database::open(dir.path(), config()).unwrap();
    setup(&db, 300);
    let t = db.table("t").unwrap();
    let before = files(&*fs, dir.path());
    let mut tx = db.begin().unwrap();
    tx.truncate(&["t"], TruncateOptions { restart_seqs: true, cascade: true }).unwrap();
    tx.insert(&t, &row(1000)).unwrap();
    tx.insert(&t, &row(5)).unwrap();
    let seen: Vec<i32> =
        tx.scan(&t).unwrap().map(|r| if let Value::Int4(i) = r.unwrap().1[0] { i } else { -1 }).collect();
    assert_eq!(seen, vec![1000, 5], "the transaction sees only what it wrote after the TRUNCATE");
    let pk = db.index("t_pkey").unwrap();
    assert!(tx.get(&pk, &[Value::Int4(5)]).unwrap().is_some());
    assert!(tx.get(&pk, &[Value::Int4(6)]).unwrap().is_none());
    tx.rollback().unwrap();
    assert_eq!(ids(&db), (0..300).collect::<Vec<_>>());
    assert_eq!(ids_by_index(&db, 1001), ((0..300).collect(), (0..300).collect()));
    assert_eq!(files(&*fs, dir.path()), before, "the new files went with the rollback");
    assert_check_clean(&db, "after the rollback");
    // A transaction dropped without commit rolls back the same way.
    {
        let mut tx = db.begin().unwrap();
        tx.truncate(&["t"], TruncateOptions::default()).unwrap();
    }
    assert_eq!(ids(&db), (0..300).collect::<Vec<_>>());
    assert_eq!(files(&*fs, dir.path()), before);
}

#[test]
fn rollback_to_a_savepoint_before_the_truncate_restores_the_rows() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    setup(&db, 100);
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(500)).unwrap();
    tx.savepoint("s").unwrap();
    tx.truncate(&["t"], TruncateOptions::default()).unwrap();
    tx.insert(&t, &row(600)).unwrap();
    tx.savepoint("inner").unwrap();
    tx.truncate(&["t", "t"], TruncateOptions::default()).unwrap();
    assert_eq!(tx.scan(&t).unwrap().count(), 0);
    tx.rollback_to("inner").unwrap();
    assert_eq!(tx.scan(&t).unwrap().count(), 1, "row 600 is back");
    tx.rollback_to("s").unwrap();
    assert_eq!(tx.scan(&t).unwrap().count(), 101, "the old rows and this transaction's own are back");
    tx.insert(&t, &row(700)).unwrap();
    tx.commit().unwrap();
    let mut want: Vec<i32> = (0..100).collect();
    want.extend([500, 700]);
    assert_eq!(ids(&db), want);
    assert_check_clean(&db, "after ROLLBACK TO");

    // RELEASE keeps the truncate; it commits with the transaction.
    let mut tx = db.begin().unwrap();
    tx.savepoint("s").unwrap();
    tx.truncate(&["t"], TruncateOptions::default()).unwrap();
    tx.release("s").unwrap();
    tx.insert(&t, &row(1)).unwrap();
    let e = tx.prepare("gid").unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e:?}");
    tx.commit().unwrap();
    assert_eq!(ids(&db), vec![1]);
    assert_check_clean(&db, "after RELEASE");
}

#[test]
fn crash_before_and_after_the_commit_record() {
    let dir = Path::new("/data");
    let cfg =
        Config::from_pairs(vec![("checkpoint_timeout", "1d"), ("max_wal_size", "1TB"), ("wal_writer_delay", "10s")])
            .unwrap();
    let fs = FaultFs::new();
    let db = Database::open_with_fs(fs.clone(), dir, cfg.clone()).unwrap();
    setup(&db, 200);
    let before = files(&*fs, dir);
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    tx.truncate(&["t"], TruncateOptions::default()).unwrap();
    for id in 0..50 {
        tx.insert(&t, &row(id)).unwrap();
    }
    db.checkpoint().unwrap(); // the new files' pages reach the disk before the crash
    for mode in [CrashMode::LoseUnsynced, CrashMode::Random { seed: 7 }] {
        let crashed = fs.crash(mode);
        let db2 = Database::open_with_fs(crashed.clone(), dir, cfg.clone()).unwrap();
        assert_eq!(ids(&db2), (0..200).collect::<Vec<_>>(), "{mode:?}: the uncommitted TRUNCATE is undone");
        assert_eq!(ids_by_index(&db2, 200).0, (0..200).collect::<Vec<_>>());
        assert_eq!(files(&*crashed, dir), before, "{mode:?}: only the old files remain");
        assert_check_clean(&db2, "crash before the commit");
        db2.abandon();
    }
    tx.commit().unwrap();
    let after = files(&*fs, dir);
    for mode in [CrashMode::LoseUnsynced, CrashMode::Random { seed: 7 }] {
        let crashed = fs.crash(mode);
        let db2 = Database::open_with_fs(crashed.clone(), dir, cfg.clone()).unwrap();
        assert_eq!(ids(&db2), (0..50).collect::<Vec<_>>(), "{mode:?}: the committed TRUNCATE stands");
        assert_eq!(ids_by_index(&db2, 200), ((0..50).collect(), (0..50).collect()));
        assert_eq!(files(&*crashed, dir), after, "{mode:?}: only the new files remain");
        assert_check_clean(&db2, "crash after the commit");
        db2.abandon();
    }
    db.abandon();
}

fn prepared_config() -> Config {
    Config { max_prepared_transactions: 4, ..config() }
}

/// TRUNCATE `t`, insert ids 1000..1010, PREPARE as `gid`; the files before and after.
fn prepare_a_truncate(
    db: &Database,
    fs: &dyn FileSystem,
    dir: &Path,
    gid: &str,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let before = files(fs, dir);
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    tx.truncate(&["t"], TruncateOptions::default()).unwrap();
    for id in 1000..1010 {
        tx.insert(&t, &row(id)).unwrap();
    }
    tx.prepare(gid).unwrap();
    drop(tx);
    let during = files(fs, dir);
    assert!(nodes(&during).is_superset(&nodes(&before)), "both sets while prepared");
    assert_eq!(nodes(&during).len(), 2 * nodes(&before).len(), "{during:?}");
    (before, during)
}

#[test]
fn a_prepared_truncate_commits_or_rolls_back_in_the_same_run() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(settledb::io::RealFs);
    let db = Database::open(dir.path(), prepared_config()).unwrap();
    setup(&db, 300);
    // ROLLBACK PREPARED: every old row and index entry back, the new files gone.
    let (before, _) = prepare_a_truncate(&db, &*fs, dir.path(), "undo");
    assert!(db.locks().iter().any(|l| l.mode == LockMode::AccessExclusive), "the prepared truncate keeps its lock");
    db.rollback_prepared("undo").unwrap();
    assert_eq!(ids(&db), (0..300).collect::<Vec<_>>());
    assert_eq!(ids_by_index(&db, 1010), ((0..300).collect(), (0..300).collect()));
    assert_eq!(files(&*fs, dir.path()), before);
    assert_check_clean(&db, "after ROLLBACK PREPARED");
    // COMMIT PREPARED: only the rows written after the truncate, the old files gone.
    let (before, during) = prepare_a_truncate(&db, &*fs, dir.path(), "keep");
    db.commit_prepared("keep").unwrap();
    let want: Vec<i32> = (1000..1010).collect();
    assert_eq!(ids(&db), want);
    assert_eq!(ids_by_index(&db, 1010), (want.clone(), want.clone()));
    let after = nodes(&files(&*fs, dir.path()));
    assert_eq!(after, nodes(&during).difference(&nodes(&before)).copied().collect::<BTreeSet<u32>>());
    assert!(db.locks().is_empty(), "{:?}", db.locks());
    assert_check_clean(&db, "after COMMIT PREPARED");
    db.close().unwrap();
    let db = Database::open(dir.path(), prepared_config()).unwrap();
    assert_eq!(ids(&db), want);
    assert_check_clean(&db, "after a restart");
}

#[test]
fn a_prepared_truncate_survives_a_restart_and_a_crash() {
    for crash in [false, true] {
        for commit in [false, true] {
            let what = format!("crash {crash}, commit {commit}");
            let dir = tempfile::tempdir().unwrap();
            let fs: Arc<dyn FileSystem> = Arc::new(settledb::io::RealFs);
            let db = Database::open(dir.path(), prepared_config()).unwrap();
            setup(&db, 200);
            let (before, during) = prepare_a_truncate(&db, &*fs, dir.path(), "g");
            if crash {
                db.abandon();
            } else {
                db.close().unwrap();
            }
            let db = Database::open(dir.path(), prepared_config()).unwrap();
            // Still prepared: both sets of files kept, the old rows visible to others, the
            // table locked against writers.
            assert_eq!(files(&*fs, dir.path()), during, "{what}: recovery keeps both sets");
            assert_eq!(db.prepared_xacts().len(), 1, "{what}");
            assert!(db.locks().iter().any(|l| l.mode == LockMode::AccessExclusive), "{what}");
            if commit {
                db.commit_prepared("g").unwrap();
            } else {
                db.rollback_prepared("g").unwrap();
            }
            let (want, gone): (Vec<i32>, _) =
                if commit { ((1000..1010).collect(), &before) } else { ((0..200).collect(), &during) };
            assert_eq!(ids(&db), want, "{what}");
            assert_eq!(ids_by_index(&db, 1010), (want.clone(), want.clone()), "{what}");
            let left = nodes(&files(&*fs, dir.path()));
            let expect: BTreeSet<u32> =
                if commit { nodes(&during).difference(&nodes(gone)).copied().collect() } else { nodes(&before) };
            assert_eq!(left, expect, "{what}: the other set removed");
            // The table takes writes on whichever storage it kept, its unique index included.
            let t = db.table("t").unwrap();
            let mut tx = db.begin().unwrap();
            tx.insert(&t, &row(5000)).unwrap();
            let dup = tx.insert(&t, &row(want[0])).unwrap_err();
            assert!(matches!(dup, Error::UniqueViolation { .. }), "{what}: {dup:?}");
            tx.rollback().unwrap();
            assert_check_clean(&db, &what);
            db.close().unwrap();
            let db = Database::open(dir.path(), prepared_config()).unwrap();
            assert_eq!(ids(&db), want, "{what}: after another restart");
            assert_eq!(nodes(&files(&*fs, dir.path())), expect, "{what}: after another restart");
            db.close().unwrap();
        }
    }
}

fn until(db: &Database, what: &str, pred: impl Fn(&[settledb::lmgr::LockInfo]) -> bool) {
    let start = Instant::now();
    while !pred(&db.locks()) {
        assert!(start.elapsed() < Duration::from_secs(60), "never saw: {what}; locks: {:#?}", db.locks());
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_second_session_waits_for_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    setup(&db, 20);
    let t = db.table("t").unwrap();
    let db = &db;
    // A reader holds AccessShare: TRUNCATE waits for it.
    let mut reader = db.begin().unwrap();
    assert_eq!(reader.scan(&t).unwrap().count(), 20);
    std::thread::scope(|s| {
        let h = s.spawn(|| db.truncate(&["t"], TruncateOptions::default()));
        until(db, "TRUNCATE waiting for AccessExclusive", |l| {
            l.iter().any(|x| !x.granted && x.mode == LockMode::AccessExclusive)
        });
        assert_eq!(reader.scan(&t).unwrap().count(), 20, "the reader still sees its rows");
        reader.commit().unwrap();
        h.join().unwrap().unwrap();
    });
    assert_eq!(ids(db), Vec::<i32>::new());

    // Under lock_timeout the wait ends with 55P03's error and fails the transaction.
    let mut holder = db.begin().unwrap();
    holder.lock_table(&t, LockMode::AccessShare).unwrap();
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            let mut tx = db.begin().unwrap();
            tx.set_lock_timeout(Some(Duration::from_millis(20)));
            let e = tx.truncate(&["t"], TruncateOptions::default()).unwrap_err();
            assert!(tx.is_failed());
            e
        })
        .join()
        .unwrap()
    });
    assert!(matches!(e, Error::LockNotAvailable(_)), "{e:?}");
    holder.commit().unwrap();

    // A writer waits for an open TRUNCATE, then writes into the new storage.
    let mut tr = db.begin().unwrap();
    tr.truncate(&["t"], TruncateOptions::default()).unwrap();
    tr.insert(&t, &row(1)).unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let mut tx = db.begin().unwrap();
            tx.insert(&t, &row(2))?;
            tx.commit()
        });
        until(db, "the insert waiting for the TRUNCATE", |l| l.iter().any(|x| !x.granted));
        tr.commit().unwrap();
        h.join().unwrap().unwrap();
    });
    assert_eq!(ids(db), vec![1, 2]);
    assert_check_clean(db, "after the waits");
}

/// test_decoding's lines of a spilled transaction (no streaming, `logical_decoding_work_mem`
/// 64kB) that truncates between its inserts, decoded after a restart and two more truncates:
/// the TRUNCATE line sits between the rows before and after it, and rows written to each new
/// file node decode as the table's.
#[test]
fn truncate_decodes_in_place_through_a_spill_and_a_restart() {
    use settledb::db::DecodeLimits;
    let dir = tempfile::tempdir().unwrap();
    let cfg =
        || Config { wal_level: settledb::WalLevel::Logical, logical_decoding_work_mem_bytes: 64 << 10, ..config() };
    let db = Database::open(dir.path(), cfg()).unwrap();
    setup(&db, 0);
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    for id in 0..2000 {
        tx.insert(&t, &row(id)).unwrap();
    }
    tx.truncate(&["t"], TruncateOptions::default()).unwrap();
    tx.insert(&t, &row(-1)).unwrap();
    tx.commit().unwrap();
    db.truncate(&["t"], TruncateOptions { restart_seqs: true, cascade: false }).unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(-2)).unwrap();
    tx.commit().unwrap();
    db.truncate(&["t"], TruncateOptions::default()).unwrap();
    db.close().unwrap();

    let db = Database::open(dir.path(), cfg()).unwrap();
    let opts = vec![("include-xids".to_string(), Some("0".to_string()))];
    let r = db.logical_slot_get_changes("s", DecodeLimits::default(), &opts).unwrap();
    assert!(r.stats.spill_txns > 0, "the big transaction was spilled: {:?}", r.stats);
    let lines: Vec<String> = r.rows.into_iter().map(|r| String::from_utf8(r.data).unwrap()).collect();
    let truncates: Vec<(usize, &String)> = lines.iter().enumerate().filter(|(_, l)| l.contains("TRUNCATE")).collect();
    let at: Vec<usize> = truncates.iter().map(|(i, _)| *i).collect();
    assert_eq!(at, vec![2001, 2005, 2011], "{truncates:?}");
    assert_eq!(truncates[0].1, "table public.t: TRUNCATE: (no-flags)");
    assert_eq!(truncates[1].1, "table public.t: TRUNCATE: restart_seqs");
    assert!(lines[2000].starts_with("table public.t: INSERT: id[integer]:1999 "), "{}", lines[2000]);
    assert!(lines[2002].starts_with("table public.t: INSERT: id[integer]:-1 "), "{}", lines[2002]);
    assert!(lines[2008].starts_with("table public.t: INSERT: id[integer]:-2 "), "{}", lines[2008]);
    assert_eq!(lines.len(), 2013, "{:#?}", &lines[2000..]);
}

/// `Database::catalog_generation`, which the server's relation cache and kept plans trust,
/// moves at every change of what the catalog publishes (TRUNCATE, and its rollback, among
/// them) and at nothing else: reads, writes and VACUUM leave it where it is.
#[test]
fn catalog_generation_moves_with_every_definition_change() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    let mut seen = db.catalog_generation();
    let mut moved = |db: &Database, what: &str| {
        let now = db.catalog_generation();
        assert!(now > seen, "{what} did not move the generation ({seen} -> {now})");
        seen = now;
    };
    setup(&db, 50);
    moved(&db, "CREATE TABLE and CREATE INDEX");
    let still = db.catalog_generation();
    let t = db.table("t").unwrap();
    {
        let mut tx = db.begin().unwrap();
        tx.insert(&t, &row(1000)).unwrap();
        tx.scan(&t).unwrap().for_each(drop);
        tx.commit().unwrap();
    }
    db.vacuum(Some("t"), &Default::default()).unwrap();
    assert_eq!(db.catalog_generation(), still, "rows and VACUUM change no definition");

    db.truncate(&["t"], TruncateOptions::default()).unwrap();
    moved(&db, "TRUNCATE");
    {
        let mut tx = db.begin().unwrap();
        tx.truncate(&["t"], TruncateOptions::default()).unwrap();
        moved(&db, "TRUNCATE in a transaction");
        tx.rollback().unwrap();
    }
    moved(&db, "the rollback of a TRUNCATE");
    db.create_index("t_v2", "t", &["v", "id"], false).unwrap();
    moved(&db, "CREATE INDEX");
    db.drop_index("t_v2").unwrap();
    moved(&db, "DROP INDEX");
    db.alter_table_set("t", &[("autovacuum_vacuum_scale_factor", "0.05")]).unwrap();
    moved(&db, "ALTER TABLE SET");
    let extra = Column { name: "w".into(), ty: Type::Int4, nullable: true };
    db.alter_table("t", &AlterTable::AddColumn { column: extra, missing: Value::Null, if_not_exists: false }).unwrap();
    moved(&db, "ADD COLUMN");
    db.alter_table("t", &AlterTable::RenameTable { to: "u".into() }).unwrap();
    moved(&db, "RENAME TO");
    db.drop_table("u").unwrap();
    moved(&db, "DROP TABLE");
}
