//! VACUUM FULL through the engine's API (`Database::vacuum_full`, see
//! `db::transaction::vacuum_full` and `heap::rewrite`): what the copy keeps, what it frees,
//! and what a crash on either side of its commit leaves.
//!
//! * `snapshots_see_the_same_rows_after_the_rewrite`: with a REPEATABLE READ snapshot taken
//!   before deletes and updates, VACUUM FULL keeps the versions it still sees (reported as
//!   dead rows that cannot be removed yet), links each old version to its successor's new
//!   place, and the old snapshot reads exactly what it read before, by a scan and through both
//!   indexes; new snapshots read the new rows. Once the snapshot ends, a second VACUUM FULL
//!   removes them: fewer pages, new file nodes, old files gone, `check` clean, relfrozenxid
//!   advanced, a restart keeps it all, and the unique index still refuses duplicates.
//! * `a_successor_copied_before_its_predecessor_is_linked`: the other order of an update
//!   chain in the copy.
//! * `freeze_freezes_every_copied_row`: VACUUM (FULL, FREEZE) leaves no unfrozen xmin, and a
//!   later VACUUM finds every page all-frozen.
//! * `crash_before_and_after_the_commit`: with `FaultFs`, a crash inside the rewriting
//!   transaction recovers the old storage, one after its commit the new one (its pages
//!   restored from their `XLOG FPI` records).
//! * `a_crash_right_after_the_commit_replays_the_new_pages`: nothing of the new storage
//!   reached the disk but the WAL, and recovery rebuilds it.
//! * `a_slot_decodes_across_the_rewrite`: a logical slot's changes on either side of it.
//! * `an_interrupted_rewrite_leaves_the_table_as_it_was`: stopped in the copy or in an index
//!   build, no new file stays and the rows are untouched.
//! * `a_catalog_or_a_missing_table_is_refused`.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use settledb::io::fault::{CrashMode, FaultFs};
use settledb::io::FileSystem;
use settledb::{Column, Config, Database, Error, Schema, TableOptions, Type, VacuumFullParams, Value};

fn config() -> Config {
    Config { shared_buffers_bytes: 8 << 20, fsync: false, autovacuum: false, ..Config::default() }
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "v".into(), ty: Type::Text, nullable: false },
        ],
    }
}

fn v_of(id: i32, gen: u32) -> String {
    format!("row {id} gen {gen} {}", "x".repeat(60))
}

/// Table `t` (primary key on `id`, index `t_v` on `v`) with ids `0..n` at generation 0, and
/// an unrelated table `u` with one row.
fn setup(db: &Database, n: i32) {
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", schema(), opts).unwrap();
    db.create_index("t_v", "t", &["v"], false).unwrap();
    let u = db.create_table("u", schema(), TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    for id in 0..n {
        tx.insert(&t, &[Value::Int4(id), Value::Text(v_of(id, 0))]).unwrap();
    }
    tx.insert(&u, &[Value::Int4(0), Value::Text("u".into())]).unwrap();
    tx.commit().unwrap();
}

/// Deletes every even id below `n / 2` and moves ids `n / 2 .. 3n / 4` to generation 1.
fn churn(db: &Database, n: i32) {
    let t = db.table("t").unwrap();
    let pk = db.index("t_pkey").unwrap();
    let mut tx = db.begin().unwrap();
    for id in (0..n / 2).step_by(2) {
        let (tid, _) = tx.get(&pk, &[Value::Int4(id)]).unwrap().unwrap();
        tx.delete(&t, tid).unwrap();
    }
    for id in n / 2..3 * n / 4 {
        let (tid, _) = tx.get(&pk, &[Value::Int4(id)]).unwrap().unwrap();
        tx.update(&t, tid, &[Value::Int4(id), Value::Text(v_of(id, 1))]).unwrap();
    }
    tx.commit().unwrap();
}

/// What `n` rows look like after [`churn`] (or before it, `churned` false).
fn expected(n: i32, churned: bool) -> Vec<(i32, String)> {
    (0..n)
        .filter(|&id| !churned || id >= n / 2 || id % 2 == 1)
        .map(|id| (id, v_of(id, u32::from(churned && id >= n / 2 && id < 3 * n / 4))))
        .collect()
}

fn rows_of(rows: impl Iterator<Item = Vec<Value>>) -> Vec<(i32, String)> {
    let mut v: Vec<(i32, String)> = rows
        .map(|r| match (&r[0], &r[1]) {
            (Value::Int4(i), Value::Text(s)) => (*i, s.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    v.sort();
    v
}

/// The rows `tx` sees: by a scan, through the primary key (probing `0..n`), and through `t_v`
/// (probing each value `expected` names).
fn seen(db: &Database, tx: &mut settledb::Transaction<'_>, n: i32, want: &[(i32, String)]) -> [Vec<(i32, String)>; 3] {
    let t = db.table("t").unwrap();
    let (pk, by_v) = (db.index("t_pkey").unwrap(), db.index("t_v").unwrap());
    let scan = rows_of(tx.scan(&t).unwrap().map(|r| r.unwrap().1));
    let by_pk = rows_of((0..n).filter_map(|id| tx.get(&pk, &[Value::Int4(id)]).unwrap().map(|(_, r)| r)));
    let by_value =
        rows_of(want.iter().filter_map(|(_, v)| tx.get(&by_v, &[Value::Text(v.clone())]).unwrap().map(|(_, r)| r)));
    [scan, by_pk, by_value]
}

fn assert_sees(db: &Database, tx: &mut settledb::Transaction<'_>, n: i32, want: &[(i32, String)], what: &str) {
    for (how, got) in ["scan", "primary key", "t_v"].iter().zip(seen(db, tx, n, want)) {
        assert_eq!(got, want, "{what}: rows by {how}");
    }
}

fn files(fs: &dyn FileSystem, dir: &Path) -> BTreeSet<String> {
    fs.list(&dir.join("base"))
        .unwrap()
        .into_iter()
        .filter(|f| f.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .collect()
}

fn assert_check_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap_or_else(|e| panic!("{what}: check failed to run: {e}"));
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

/// One heap tuple as `describe_page` prints it: (offset, xmin, xmax, ctid, infomask names).
type Item = (u16, u32, u32, String, String);

fn tuples(db: &Database, block: u32) -> Vec<Item> {
    let t = db.table("t").unwrap();
    let text = db.describe_page(&t, block, false).unwrap();
    text.lines()
        .filter(|l| l.contains("NORMAL"))
        .map(|l| {
            let field = |name: &str| {
                let at = l.find(&format!("{name}: ")).unwrap_or_else(|| panic!("no {name} in {l}")) + name.len() + 2;
                l[at..].split("  ").next().unwrap().to_string()
            };
            let off =
                l.trim_start().trim_start_matches("lp").trim_start().split(':').next().unwrap().trim().parse().unwrap();
            (off, field("xmin").parse().unwrap(), field("xmax").parse().unwrap(), field("ctid"), field("infomask"))
        })
        .collect()
}

/// Checks every tuple of `t` for HOT flags (none after a rewrite) and every updated version
/// for a link to its successor (the tuple its deleter inserted); the number of links.
fn update_links(db: &Database) -> usize {
    let all: Vec<(u32, Item)> = (0..pages(db)).flat_map(|b| tuples(db, b).into_iter().map(move |t| (b, t))).collect();
    let mut linked = 0;
    for (b, (off, xmin, xmax, ctid, mask)) in &all {
        assert!(!mask.contains("HOT") && !mask.contains("HEAP_ONLY"), "no HOT flags after a rewrite: {mask}");
        if *xmax != 0 && *ctid != format!("({b},{off})") {
            let succ = all.iter().find(|(sb, (so, ..))| format!("({sb},{so})") == *ctid);
            let (_, (_, sxmin, ..)) =
                succ.unwrap_or_else(|| panic!("({b},{off}) xmin {xmin} points at {ctid}, which is not there"));
            assert_eq!(sxmin, xmax, "({b},{off})'s successor {ctid} was inserted by its deleter");
            linked += 1;
        }
    }
    linked
}

fn pages(db: &Database) -> u32 {
    let t = db.table("t").unwrap();
    (0..).take_while(|&b| db.describe_page(&t, b, false).is_ok()).count() as u32
}

#[test]
fn snapshots_see_the_same_rows_after_the_rewrite() {
    let n = 2000;
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(settledb::io::RealFs);
    let db = Database::open(dir.path(), config()).unwrap();
    setup(&db, n);
    let (before, t_oid) = (files(&*fs, dir.path()), db.table("t").unwrap().oid());
    let frozen_before = db.table("t").unwrap().relfrozenxid();
    // A snapshot taken before the churn, through a table VACUUM FULL does not lock.
    let mut old = db.begin_with(settledb::IsolationLevel::RepeatableRead).unwrap();
    let u = db.table("u").unwrap();
    assert_eq!(old.scan(&u).unwrap().count(), 1);
    churn(&db, n);
    let pages_before = pages(&db);

    let r = db.vacuum_full("t", &VacuumFullParams::default()).unwrap();
    let deleted = (n / 4) as u64;
    let updated = (n / 4) as u64;
    assert_eq!(r.counts.removed, 0, "{r:?}");
    assert_eq!(r.counts.recently_dead, deleted + updated, "{r:?}");
    assert_eq!(r.counts.kept, n as u64 + updated, "{r:?}");
    assert_eq!(r.counts.old_pages, pages_before);
    let msgs = r.verbose_messages();
    assert_eq!(msgs[0].0, "vacuuming \"public.t\"");
    assert_eq!(
        msgs[1].0,
        format!("\"public.t\": found 0 removable, {} nonremovable row versions in {pages_before} pages", r.counts.kept)
    );
    assert!(msgs[1]
        .1
        .as_ref()
        .unwrap()
        .starts_with(&format!("{} dead row versions cannot be removed yet.\nCPU: user: ", deleted + updated)));

    // Every updated version kept points at its successor's new place.
    assert_eq!(update_links(&db), updated as usize, "each updated version is linked");

    // The old snapshot reads what it read before; a new one reads the new rows.
    assert_sees(&db, &mut old, n, &expected(n, false), "the old snapshot after VACUUM FULL");
    let mut now = db.begin().unwrap();
    assert_sees(&db, &mut now, n, &expected(n, true), "a new snapshot after VACUUM FULL");
    now.commit().unwrap();
    old.commit().unwrap();
    assert_check_clean(&db, "after the first VACUUM FULL");

    // Nothing holds the old versions back now.
    let r = db.vacuum_full("t", &VacuumFullParams::default()).unwrap();
    assert_eq!((r.counts.removed, r.counts.recently_dead), (deleted + updated, 0), "{r:?}");
    assert_eq!(r.counts.kept, n as u64 - deleted);
    assert!(r.counts.new_pages < pages_before, "{} pages from {pages_before}", r.counts.new_pages);
    assert_eq!(pages(&db), r.counts.new_pages);
    let t = db.table("t").unwrap();
    assert_eq!(t.oid(), t_oid, "same table");
    assert!(
        !t.relfrozenxid().precedes(frozen_before),
        "relfrozenxid never goes back: {} from {frozen_before}",
        t.relfrozenxid()
    );
    let after = files(&*fs, dir.path());
    let node = |f: &String| f.split('_').next().unwrap().parse::<u32>().unwrap();
    let user = |s: &BTreeSet<String>| s.iter().map(node).filter(|&n| n >= 16384).collect::<BTreeSet<u32>>();
    let (old_nodes, new_nodes) = (user(&before), user(&after));
    assert_eq!(old_nodes.len(), new_nodes.len(), "two tables and two indexes, before and after: {before:?} {after:?}");
    assert_eq!(old_nodes.intersection(&new_nodes).count(), 1, "only u keeps its files: {before:?} {after:?}");
    assert_check_clean(&db, "after the second VACUUM FULL");

    // The unique index holds and writes go on.
    let mut tx = db.begin().unwrap();
    let dup = tx.insert(&t, &[Value::Int4(1), Value::Text("dup".into())]).unwrap_err();
    assert!(matches!(dup, Error::UniqueViolation { .. }), "{dup:?}");
    tx.rollback().unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(0), Value::Text(v_of(0, 0))]).unwrap();
    tx.commit().unwrap();
    db.vacuum(Some("t"), &Default::default()).unwrap();
    assert_check_clean(&db, "after an insert and a VACUUM");
    let mut want = expected(n, true);
    want.insert(0, (0, v_of(0, 0)));
    db.close().unwrap();

    let db = Database::open(dir.path(), config()).unwrap();
    let mut tx = db.begin().unwrap();
    assert_sees(&db, &mut tx, n, &want, "after a restart");
    tx.commit().unwrap();
    assert_eq!(user(&files(&*fs, dir.path())), new_nodes);
    assert_check_clean(&db, "after a restart");
}

/// Successors before their predecessors: updates of the last rows land in room a VACUUM
/// freed on the first pages, so the copy meets each new version first and must remember
/// where it put it until the old version comes.
#[test]
fn a_successor_copied_before_its_predecessor_is_linked() {
    let n = 400;
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    setup(&db, n);
    let (t, pk) = (db.table("t").unwrap(), db.index("t_pkey").unwrap());
    let mut tx = db.begin().unwrap();
    for id in 0..100 {
        let (tid, _) = tx.get(&pk, &[Value::Int4(id)]).unwrap().unwrap();
        tx.delete(&t, tid).unwrap();
    }
    tx.commit().unwrap();
    db.vacuum(Some("t"), &Default::default()).unwrap();
    // Reopened, the table has no insert target yet: the free space map picks the first page.
    db.close().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    let (t, pk) = (db.table("t").unwrap(), db.index("t_pkey").unwrap());
    let mut old = db.begin_with(settledb::IsolationLevel::RepeatableRead).unwrap();
    assert_eq!(old.scan(&db.table("u").unwrap()).unwrap().count(), 1);
    let mut tx = db.begin().unwrap();
    let mut moved = 0;
    for id in n - 50..n {
        let (tid, _) = tx.get(&pk, &[Value::Int4(id)]).unwrap().unwrap();
        let new = tx.update(&t, tid, &[Value::Int4(id), Value::Text(v_of(id, 1))]).unwrap().unwrap();
        moved += u32::from(new.block < tid.block);
    }
    tx.commit().unwrap();
    assert!(moved >= 10, "new versions went to earlier pages: {moved} of 50");

    let r = db.vacuum_full("t", &VacuumFullParams::default()).unwrap();
    assert_eq!(r.counts.recently_dead, 50, "{r:?}");
    assert_eq!(update_links(&db), 50);
    let want_old: Vec<(i32, String)> = (100..n).map(|id| (id, v_of(id, 0))).collect();
    assert_sees(&db, &mut old, n, &want_old, "the old snapshot");
    old.commit().unwrap();
    let want_new: Vec<(i32, String)> = (100..n).map(|id| (id, v_of(id, u32::from(id >= n - 50)))).collect();
    let mut now = db.begin().unwrap();
    assert_sees(&db, &mut now, n, &want_new, "a new snapshot");
    now.commit().unwrap();
    assert_check_clean(&db, "after VACUUM FULL");
}

#[test]
fn freeze_freezes_every_copied_row() {
    let n = 500;
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    setup(&db, n);
    churn(&db, n);
    let frozen_before = db.table("t").unwrap().relfrozenxid();
    let r = db.vacuum_full("t", &VacuumFullParams { freeze: true, ..Default::default() }).unwrap();
    assert_eq!(r.counts.frozen, r.counts.kept, "{r:?}");
    let t = db.table("t").unwrap();
    assert!(
        frozen_before.precedes(t.relfrozenxid()),
        "relfrozenxid advanced: {} from {frozen_before}",
        t.relfrozenxid()
    );
    assert_eq!(t.relfrozenxid(), r.relfrozenxid);
    for b in 0..pages(&db) {
        for (off, xmin, _, _, mask) in tuples(&db, b) {
            assert!(mask.contains("XMIN_FROZEN"), "({b},{off}) xmin {xmin}: {mask}");
        }
    }
    let v = db.vacuum(Some("t"), &Default::default()).unwrap();
    assert!(v[0].verbose_text().contains("pages set all-frozen"), "{}", v[0].verbose_text());
    let map = db.visibility_map(&t).unwrap();
    assert!(!map.is_empty() && map.iter().all(|&(v, f)| v && f), "{map:?}");
    assert_check_clean(&db, "after VACUUM (FULL, FREEZE) and VACUUM");
}

fn crash_config() -> Config {
    Config::from_pairs(vec![("checkpoint_timeout", "1d"), ("max_wal_size", "1TB"), ("wal_writer_delay", "10s")])
        .unwrap()
}

/// A FaultFs database with `t` churned (`n` rows) and checkpointed.
fn churned_on_fault_fs(n: i32) -> (Arc<FaultFs>, Database) {
    let fs = FaultFs::new();
    let db = Database::open_with_fs(fs.clone(), Path::new("/data"), crash_config()).unwrap();
    setup(&db, n);
    churn(&db, n);
    db.checkpoint().unwrap();
    (fs, db)
}

/// Crashes `fs` in `mode` and checks that recovery shows the churned rows, by a scan and both
/// indexes, with exactly the files `files_want` and a clean `check`.
fn assert_recovers(fs: &FaultFs, mode: CrashMode, n: i32, files_want: &BTreeSet<String>, what: &str) {
    let dir = Path::new("/data");
    let crashed = fs.crash(mode);
    let db = Database::open_with_fs(crashed.clone(), dir, crash_config()).unwrap();
    let mut tx = db.begin().unwrap();
    assert_sees(&db, &mut tx, n, &expected(n, true), &format!("{mode:?}: {what}"));
    tx.commit().unwrap();
    assert_eq!(&files(&*crashed, dir), files_want, "{mode:?}: {what}: the files");
    assert_check_clean(&db, what);
    db.abandon();
}

#[test]
fn crash_before_and_after_the_commit() {
    let n = 600;
    let (fs, db) = churned_on_fault_fs(n);
    let before = files(&*fs, Path::new("/data"));
    let mut tx = db.begin().unwrap();
    let r = tx.vacuum_full("t", &VacuumFullParams::default()).unwrap();
    assert_eq!(r.counts.removed, (n / 2) as u64);
    db.checkpoint().unwrap(); // the new files' pages reach the disk before the crash
    for mode in [CrashMode::LoseUnsynced, CrashMode::Random { seed: 11 }] {
        assert_recovers(&fs, mode, n, &before, "crash before the commit: only the old files remain");
    }
    tx.commit().unwrap();
    let after = files(&*fs, Path::new("/data"));
    assert_ne!(after, before);
    for mode in [CrashMode::LoseUnsynced, CrashMode::Random { seed: 11 }] {
        assert_recovers(&fs, mode, n, &after, "crash after the commit: only the new files remain");
    }
    db.abandon();
}

/// No checkpoint after the rewrite: the new heap and indexes exist only as WAL, so recovery
/// rebuilds them from the `XLOG FPI` and B-tree NEWPAGES records.
#[test]
fn a_crash_right_after_the_commit_replays_the_new_pages() {
    let n = 600;
    let (fs, db) = churned_on_fault_fs(n);
    let r = db.vacuum_full("t", &VacuumFullParams::default()).unwrap();
    assert!(r.counts.new_pages > 1, "{r:?}");
    let after = files(&*fs, Path::new("/data"));
    assert_recovers(&fs, CrashMode::LoseUnsynced, n, &after, "a crash right after the commit");
    db.abandon();
}

/// Under `wal_level = logical` a slot decodes the rows written before a VACUUM FULL, nothing of
/// the rewrite itself (its page images are no changes), and the rows written to the new file
/// nodes afterwards as the table's, before and after a restart.
#[test]
fn a_slot_decodes_across_the_rewrite() {
    use settledb::db::DecodeLimits;
    let dir = tempfile::tempdir().unwrap();
    let cfg = || Config { wal_level: settledb::WalLevel::Logical, ..config() };
    let db = Database::open(dir.path(), cfg()).unwrap();
    setup(&db, 0);
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    let (t, pk) = (db.table("t").unwrap(), db.index("t_pkey").unwrap());
    let mut tx = db.begin().unwrap();
    for id in 0..300 {
        tx.insert(&t, &[Value::Int4(id), Value::Text(v_of(id, 0))]).unwrap();
    }
    tx.commit().unwrap();
    churn(&db, 300);
    db.vacuum_full("t", &VacuumFullParams::default()).unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(1000), Value::Text("after".into())]).unwrap();
    let (tid, _) = tx.get(&pk, &[Value::Int4(299)]).unwrap().unwrap();
    tx.update(&t, tid, &[Value::Int4(299), Value::Text("updated after".into())]).unwrap();
    tx.commit().unwrap();
    db.close().unwrap();

    let db = Database::open(dir.path(), cfg()).unwrap();
    let opts = vec![("include-xids".to_string(), Some("0".to_string()))];
    let r = db.logical_slot_get_changes("s", DecodeLimits::default(), &opts).unwrap();
    let lines: Vec<String> = r.rows.into_iter().map(|r| String::from_utf8(r.data).unwrap()).collect();
    let count = |what: &str| lines.iter().filter(|l| l.starts_with(&format!("table public.t: {what}: "))).count();
    assert_eq!((count("INSERT"), count("DELETE"), count("UPDATE")), (301, 75, 76), "{lines:#?}");
    let n = lines.len();
    assert!(lines[n - 3].starts_with("table public.t: INSERT: id[integer]:1000 v[text]:'after'"), "{lines:#?}");
    assert!(lines[n - 2].starts_with("table public.t: UPDATE: id[integer]:299 v[text]:'updated after'"), "{lines:#?}");
    assert_eq!(lines.iter().filter(|l| *l == "BEGIN").count(), 4, "the load, the churn, the rewrite, the last");
}

/// An interrupt (a cancel, a statement timeout) during the copy or during an index build
/// stops the rewrite: the table keeps its rows and its files, no new file is left behind,
/// and the next VACUUM FULL runs to its end.
#[test]
fn an_interrupted_rewrite_leaves_the_table_as_it_was() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let n = 1000;
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(settledb::io::RealFs);
    let db = Database::open(dir.path(), config()).unwrap();
    setup(&db, n);
    churn(&db, n);
    let before = files(&*fs, dir.path());
    let old_pages = pages(&db) as usize;
    // Checks: one before the lock, one per old page the copy reads, then one per new page each
    // index build reads. Stop in the middle of the copy, then in the second index's build.
    for stop_at in [old_pages / 2, old_pages + old_pages / 2 + 3] {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let interrupt = settledb::Interrupt::new(move || {
            if c.fetch_add(1, Ordering::Relaxed) >= stop_at {
                Err("canceling statement due to user request".into())
            } else {
                Ok(())
            }
        });
        let e =
            db.vacuum_full("t", &VacuumFullParams { interrupt: Some(interrupt), ..Default::default() }).unwrap_err();
        assert!(matches!(e, Error::Interrupted(_)), "{e:?}");
        assert!(calls.load(Ordering::Relaxed) > stop_at, "it was checked past {stop_at}");
        assert_eq!(files(&*fs, dir.path()), before, "stopped at check {stop_at}: the old files only");
        let mut tx = db.begin().unwrap();
        assert_sees(&db, &mut tx, n, &expected(n, true), &format!("stopped at check {stop_at}"));
        tx.commit().unwrap();
        assert_check_clean(&db, "after an interrupted VACUUM FULL");
    }
    // (The reads above pruned some pages: fewer dead rows are left to count as removed.)
    let r = db.vacuum_full("t", &VacuumFullParams::default()).unwrap();
    assert_eq!((r.counts.kept, r.counts.recently_dead), ((n - n / 4) as u64, 0), "{r:?}");
    assert_ne!(files(&*fs, dir.path()), before);
    let mut tx = db.begin().unwrap();
    assert_sees(&db, &mut tx, n, &expected(n, true), "after the VACUUM FULL that ran to its end");
    tx.commit().unwrap();
}

#[test]
fn a_catalog_or_a_missing_table_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    let e = db.vacuum_full("pg_class", &VacuumFullParams::default()).unwrap_err();
    assert!(e.to_string().contains("system catalog \"pg_class\""), "{e}");
    let e = db.vacuum_full("nope", &VacuumFullParams::default()).unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e:?}");
}
