//! How the heap honours the visibility map and the free space map:
//!
//! * every way a page gets a new or a changed tuple (insert, multi-insert, update on the same
//!   page, update to another page, both its pages, delete) clears the page's map bits and
//!   `PD_ALL_VISIBLE`, and crash recovery replays the same result (the heap records' redo
//!   clears the flag, VM_CLEAR the bits);
//! * an index-only scan skips the heap for entries on all-visible pages and visits it again once
//!   a change clears the bit;
//! * inserts go where the free space map says: a page with room recorded as full is left
//!   alone, the same page recorded with its real free space is used, and a page the map
//!   over-promised is corrected when an insert finds it full.
//! * opportunistic pruning records the room it made; the pruning VACUUM does records nothing
//!   (VACUUM records the page's free space itself).
//! * the hint bits VACUUM's prune pass holds back and writes later are the ones it would have
//!   written at once.
//!
//! Bits are set here directly with [`crate::vm::VisibilityMap::set`], as VACUUM does, on pages
//! whose tuples are all committed and older than every snapshot.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::*;
use crate::check::check_database;
use crate::db::{Database, Table};
use crate::io::fault::{CrashMode, FaultFs};
use crate::{Column, Config, KeyBound, ScanDirection, TableOptions, Type};

fn config() -> Config {
    // Only the tests' own checkpoints run, and no autovacuum sets bits behind their back.
    Config::from_pairs(vec![
        ("checkpoint_timeout", "1d"),
        ("max_wal_size", "1TB"),
        ("wal_writer_delay", "10s"),
        ("autovacuum", "off"),
    ])
    .unwrap()
}

fn open(fs: &Arc<FaultFs>) -> Database {
    Database::open_with_fs(fs.clone(), Path::new("/db"), config()).unwrap()
}

fn make_table(db: &Database, name: &str) -> Table {
    let schema = Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "pad".into(), ty: Type::Text, nullable: false },
        ],
    };
    db.create_table(name, schema, TableOptions::default()).unwrap()
}

fn row(id: i32, pad_bytes: usize) -> Vec<Value> {
    vec![Value::Int4(id), Value::Text("p".repeat(pad_bytes))]
}

/// Sets the page's map bits (and `PD_ALL_VISIBLE`) the way VACUUM does, under its lock.
fn set_bits(db: &Database, t: &Table, block: u32, bits: VmBits) {
    let env = db.inner().env();
    let rel = &t.entry.rel;
    let buf = read_page(&env, rel, BlockNumber(block), None).unwrap();
    let mut g = buf.write();
    rel.vm.set(env.maps(), &buf, &mut g.0, bits).unwrap();
}

/// The page's map bits and whether it carries `PD_ALL_VISIBLE`.
fn visibility(db: &Database, t: &Table, block: u32) -> (VmBits, bool) {
    let env = db.inner().env();
    let rel = &t.entry.rel;
    let bits = rel.vm.get(env.pool, BlockNumber(block)).unwrap();
    let buf = read_page(&env, rel, BlockNumber(block), None).unwrap();
    let flag = page::flags(&buf.read().0) & page::PD_ALL_VISIBLE != 0;
    (bits, flag)
}

fn heap_free(db: &Database, t: &Table, block: u32) -> usize {
    let env = db.inner().env();
    let buf = read_page(&env, &t.entry.rel, BlockNumber(block), None).unwrap();
    let free = page::heap_free_space(&buf.read().0);
    free
}

fn assert_clean(db: &Database) {
    let report = check_database(db).unwrap();
    assert!(report.is_clean(), "{report}");
}

#[test]
fn every_heap_change_clears_the_map_and_redo_agrees() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = make_table(&db, "t");
    // Rows of ~1.5 kB: five fill a page (pages 0..=5) and leave ~470 bytes; page 6 has one.
    let mut tx = db.begin().unwrap();
    let tids: Vec<Tid> = (0..31).map(|i| tx.insert(&t, &row(i, 1500)).unwrap()).collect();
    tx.commit().unwrap();
    for (i, tid) in tids.iter().enumerate() {
        assert_eq!(tid.block.0, i as u32 / 5, "row {i}");
    }
    db.checkpoint().unwrap();
    for b in 0..7 {
        set_bits(&db, &t, b, VmBits::ALL_VISIBLE);
    }
    assert_clean(&db);

    let rel = &t.entry.rel;
    let mut tx = db.begin().unwrap();
    // Page 0: a single insert (the target block points there; the small row fits).
    rel.target_block.store(0, Ordering::Relaxed);
    assert_eq!(tx.insert(&t, &row(100, 10)).unwrap().block.0, 0);
    // Pages 1 and 6: an update whose new version does not fit on its page.
    rel.target_block.store(6, Ordering::Relaxed);
    let moved = tx.update(&t, tids[5], &row(5, 1400)).unwrap().unwrap();
    assert_eq!(moved.block.0, 6);
    // Page 2: a delete.
    assert!(tx.delete(&t, tids[10]).unwrap());
    // Page 3: a multi-insert.
    rel.target_block.store(3, Ordering::Relaxed);
    let many = tx.insert_many(&t, &[row(101, 10), row(102, 10)]).unwrap();
    assert!(many.iter().all(|tid| tid.block.0 == 3), "{many:?}");
    // Page 4: an update that stays on its page (HOT: the table has no index).
    assert_eq!(tx.update(&t, tids[20], &row(20, 10)).unwrap().unwrap().block.0, 4);
    tx.commit().unwrap();

    // Page 5 was not touched: it keeps its bits, which shows the others lost theirs for a reason.
    let expect = |db: &Database| {
        for b in 0..7 {
            let want = if b == 5 { (VmBits::ALL_VISIBLE, true) } else { (VmBits::NONE, false) };
            assert_eq!(visibility(db, &t, b), want, "heap block {b}");
        }
    };
    expect(&db);
    assert_clean(&db);

    // Everything since the checkpoint is replayed: the VISIBLE records (carrying the heap
    // pages' images), then each heap change without an image, then VM_CLEAR.
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    let db = open(&crashed);
    assert!(db.recovery_report().records_replayed > 0);
    let t = db.table("t").unwrap();
    expect(&db);
    assert_clean(&db);
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.scan(&t).unwrap().count(), 31 + 1 + 2 - 1);
}

#[test]
fn index_only_scan_trusts_the_map_until_a_change_clears_it() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = make_table(&db, "t");
    let by_id = db.create_index("t_id", "t", &["id"], false).unwrap();
    let mut tx = db.begin().unwrap();
    let tids: Vec<Tid> = (0..200).map(|i| tx.insert(&t, &row(i, 100)).unwrap()).collect();
    tx.commit().unwrap();
    let nblocks = db.table_pages(&t).unwrap();
    assert!(nblocks >= 3, "{nblocks} pages");

    // (keys returned, heap fetches, heap fetches avoided) of a full index-only scan.
    let scan = |db: &Database| {
        let before = db.stats();
        let mut tx = db.begin().unwrap();
        let keys =
            tx.index_only(&by_id, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward, None).unwrap();
        tx.commit().unwrap();
        let after = db.stats();
        (keys.len(), after.heap_fetches - before.heap_fetches, after.heap_fetches_avoided - before.heap_fetches_avoided)
    };
    assert_eq!(scan(&db), (200, 200, 0), "no bit set: every entry visits the heap");
    for b in 0..nblocks {
        set_bits(&db, &t, b, VmBits::ALL_VISIBLE);
    }
    assert_eq!(scan(&db), (200, 0, 200), "every page all-visible: no entry visits the heap");

    // A delete on page 0 clears its bit: its entries visit the heap again, the others do not.
    let mut tx = db.begin().unwrap();
    assert!(tx.delete(&t, tids[0]).unwrap());
    tx.commit().unwrap();
    let on_page_0 = tids.iter().filter(|tid| tid.block.0 == 0).count() as u64;
    assert_eq!(visibility(&db, &t, 0), (VmBits::NONE, false));
    assert_eq!(scan(&db), (199, on_page_0, 200 - on_page_0));
    assert_clean(&db);
}

#[test]
fn inserts_go_where_the_free_space_map_says() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = make_table(&db, "t");
    // 58 rows of 140 bytes (with their line pointers) fill a page: three full pages.
    let mut tx = db.begin().unwrap();
    let tids: Vec<Tid> = (0..174).map(|i| tx.insert(&t, &row(i, 100)).unwrap()).collect();
    tx.commit().unwrap();
    assert_eq!(db.table_pages(&t).unwrap(), 3);
    assert!(heap_free(&db, &t, 2) < 140, "the last page is full");

    // Empty page 0; pruning records its new free space in the map.
    let mut tx = db.begin().unwrap();
    for tid in tids.iter().filter(|tid| tid.block.0 == 0) {
        assert!(tx.delete(&t, *tid).unwrap());
    }
    tx.commit().unwrap();
    assert!(db.prune_page(&t, 0).unwrap());
    let room = heap_free(&db, &t, 0);
    assert!(room > 4000, "{room} bytes free after pruning");
    let pool = &db.inner().pool;
    assert_eq!(t.entry.rel.fsm.get(pool, BlockNumber(0)).unwrap(), fsm::avail_to_category(room));

    // Recorded as full (as VACUUM records a settled page): a new row extends the table instead.
    t.entry.rel.fsm.record(pool, BlockNumber(0), 0).unwrap();
    db.close().unwrap();
    let db = open(&fs);
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.insert(&t, &row(1000, 100)).unwrap().block.0, 3);
    tx.commit().unwrap();

    // Recorded with its real free space: the next insert of a freshly opened table goes there.
    let pool = &db.inner().pool;
    t.entry.rel.fsm.record(pool, BlockNumber(0), room).unwrap();
    db.close().unwrap();
    let db = open(&fs);
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.insert(&t, &row(1001, 100)).unwrap().block.0, 0);
    tx.commit().unwrap();

    // Page 1 recorded with room it does not have, page 3 with the room it has: the insert tries
    // page 1 first (lowest block first), finds it full, corrects the map and asks again.
    let pool = &db.inner().pool;
    let rel = &t.entry.rel;
    rel.fsm.record(pool, BlockNumber(0), 0).unwrap();
    rel.fsm.record(pool, BlockNumber(1), 8000).unwrap();
    rel.fsm.record(pool, BlockNumber(3), heap_free(&db, &t, 3)).unwrap();
    let full = heap_free(&db, &t, 1);
    db.close().unwrap();
    let db = open(&fs);
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.insert(&t, &row(1002, 100)).unwrap().block.0, 3);
    tx.commit().unwrap();
    let pool = &db.inner().pool;
    assert_eq!(t.entry.rel.fsm.get(pool, BlockNumber(1)).unwrap(), fsm::avail_to_category(full));
    assert_clean(&db);
}

/// VACUUM prunes through `prune_locked` and records the page's free space itself, by its own
/// rule, after freezing it and setting its bits: pruning must not advertise the room first (an
/// inserter would take it in between and undo the settling).
#[test]
fn pruning_records_free_space_only_when_opportunistic() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = make_table(&db, "t");
    let mut tx = db.begin().unwrap();
    let tids: Vec<Tid> = (0..174).map(|i| tx.insert(&t, &row(i, 100)).unwrap()).collect();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    for tid in tids.iter().filter(|tid| tid.block.0 < 2) {
        assert!(tx.delete(&t, *tid).unwrap());
    }
    tx.commit().unwrap();
    let inner = db.inner();
    let env = inner.env();
    let rel = &t.entry.rel;
    let horizon = inner.xact.oldest_xmin();
    // What the inserts recorded when they found page 0 full.
    let before = rel.fsm.get(env.pool, BlockNumber(0)).unwrap();
    assert!(before < 2, "{before}");
    {
        let buf = read_page(&env, rel, BlockNumber(0), None).unwrap();
        let mut g = buf.try_cleanup_lock().unwrap();
        assert!(prune_locked(&env, rel, &buf, &mut g.0, horizon).unwrap());
    }
    assert!(heap_free(&db, &t, 0) > 4000);
    assert_eq!(rel.fsm.get(env.pool, BlockNumber(0)).unwrap(), before, "prune_locked records nothing");
    assert!(db.prune_page(&t, 1).unwrap());
    assert_eq!(rel.fsm.get(env.pool, BlockNumber(1)).unwrap(), fsm::avail_to_category(heap_free(&db, &t, 1)));
}

/// A page added by extension is reachable before its extender locks it: a table with no
/// target block tries its last page, and the relation's size already counts the new one. The
/// extender, coming second, must leave the page it finds initialized and holding a row alone.
/// This replays that interleaving step by step: the extender's `extend`, another backend's
/// whole insert into the new page, then the rest of the extender's path. Initializing the page
/// again there lost a committed row (`settle torture --workload tpcc`: a district vanished).
#[test]
fn an_extended_page_someone_else_filled_first_keeps_its_row() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = make_table(&db, "t");
    let env = db.inner().env();
    let rel = &t.entry.rel;
    assert_eq!(rel.target_block.load(Ordering::Relaxed), u32::MAX, "a new table has no target block");

    // The extender: the block is handed out and its zeroed buffer pinned, not yet locked.
    let extended = env.pool.extend(rel.relfilenode, Fork::Main, None).unwrap();
    assert_eq!(extended.block().0, 0);

    // Another backend inserts meanwhile, into the last page, which is the new one.
    let mut tx = db.begin().unwrap();
    let tid = tx.insert(&t, &row(1, 10)).unwrap();
    tx.commit().unwrap();
    assert_eq!(tid.block, extended.block());

    // The extender goes on.
    init_if_new(&extended);
    drop(extended);

    let mut tx = db.begin().unwrap();
    let rows: Vec<Vec<Value>> = tx.scan(&t).unwrap().map(|r| r.unwrap().1).collect();
    tx.commit().unwrap();
    assert_eq!(rows, vec![row(1, 10)], "the row inserted into the new page survives its extender");
    assert_clean(&db);
}

/// VACUUM's prune pass earns hint bits on a page it may log without an image, and so holds
/// them back (`write_hints` false) until it knows a record with an image follows; written then
/// with `write_pending_hints`, they must be exactly the bits a pass allowed to write them sets.
#[test]
fn pending_hints_written_later_are_the_hints_written_at_once() {
    use super::prune::{scan_page as prune_scan, PageScan, XidMemo};
    use crate::types::Lsn;
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = make_table(&db, "t");
    // Committed inserts, then an aborted insert, a committed delete, an aborted delete and
    // an insert still running: every hint a scan can earn (xmin committed or invalid, xmax
    // committed or invalid) and tuples that earn none.
    let mut tx = db.begin().unwrap();
    let tids: Vec<Tid> = (0..40).map(|i| tx.insert(&t, &row(i, 60)).unwrap()).collect();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    for i in 40..45 {
        tx.insert(&t, &row(i, 60)).unwrap();
    }
    tx.rollback().unwrap();
    let mut tx = db.begin().unwrap();
    for &tid in &tids[..10] {
        assert!(tx.delete(&t, tid).unwrap());
    }
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    for &tid in &tids[10..15] {
        assert!(tx.delete(&t, tid).unwrap());
    }
    tx.rollback().unwrap();
    let mut running = db.begin().unwrap();
    running.insert(&t, &row(99, 60)).unwrap();

    let env = db.inner().env();
    let rel = &t.entry.rel;
    let oldest = env.xact.oldest_xmin();
    let mut pending_seen = 0;
    for b in 0..db.table_pages(&t).unwrap() {
        let before = read_page(&env, rel, BlockNumber(b), None).unwrap().read().0.to_vec();
        let (mut at_once, mut later) = (before.clone(), before.clone());
        let (mut s1, mut s2) = (Box::<PageScan>::default(), Box::<PageScan>::default());
        prune_scan(&mut at_once, oldest, env.xact, Lsn(u64::MAX), true, &mut XidMemo::default(), &mut s1).unwrap();
        prune_scan(&mut later, oldest, env.xact, Lsn(u64::MAX), false, &mut XidMemo::default(), &mut s2).unwrap();
        assert_eq!(later, before, "block {b}: a scan told not to write hints wrote some");
        pending_seen += usize::from(s2.hints_pending);
        s2.write_pending_hints(&mut later);
        assert_ne!(at_once, before, "block {b}: no hint earned");
        assert_eq!(later, at_once, "block {b}");
        assert!(s2.hints_changed && !s2.hints_pending);
        for o in 0..=s1.max {
            assert_eq!(s1.status(o), s2.status(o), "block {b} offset {o}");
        }
    }
    assert!(pending_seen > 0);
    running.rollback().unwrap();
}
