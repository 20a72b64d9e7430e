//! Bulk delete under concurrent splits, by one and by several threads, and crashed half way.
//! Every test compares the index with an oracle of the entries it must hold and ends with
//! `check()` clean.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering as AtOrd};
use std::sync::{Arc, Mutex as StdMutex};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::page::{self as bp};
use super::tests::{assert_clean, assert_redo_matches, bulk_delete_where, new_index, open_db};
use super::*;
use crate::db::Database;
use crate::index::IndexAm;
use crate::io::fault::{CrashMode, FaultFs};
use crate::{Column, Config, Schema, TableOptions};

type Entry = (i32, Tid);

fn entries_of(db: &Database, ix: &BtreeIndex) -> BTreeSet<Entry> {
    assert_clean(db, ix)
        .into_iter()
        .map(|e| match e.key[..] {
            [Value::Int4(k)] => (k, e.tid),
            _ => panic!("unexpected key {:?}", e.key),
        })
        .collect()
}

/// The index holds exactly `want`; on failure, names the first differences.
fn assert_entries(db: &Database, ix: &BtreeIndex, want: &BTreeSet<Entry>, what: &str) {
    let got = entries_of(db, ix);
    let left: Vec<_> = got.difference(want).take(10).collect();
    let missing: Vec<_> = want.difference(&got).take(10).collect();
    assert!(left.is_empty() && missing.is_empty(), "{what}: left behind {left:?}, missing {missing:?}");
}

fn insert_all(db: &Database, ix: &BtreeIndex, entries: &[Entry]) {
    let env = db.inner().env();
    for &(k, t) in entries {
        ix.insert(&env, &[Value::Int4(k)], t, None).unwrap();
    }
}

/// Deletes every entry of the keys in `gone` (whole leaves empty out and are deleted), then
/// lets the XID horizon pass so that a cleanup puts the deleted pages on the free list: the
/// blocks that splits will take next.
fn make_free_pages(db: &Database, ix: &BtreeIndex, gone: &dyn Fn(i32) -> bool) -> u32 {
    let env = db.inner().env();
    let stats = bulk_delete_where(&env, ix, &|t| t.offset.0 == 1 && gone(t.block.0 as i32));
    assert!(stats.pages_newly_deleted >= 3, "{stats:?}");
    db.consume_xids(1).unwrap();
    let mut cs = BulkDeleteStats::default();
    assert!(ix.cleanup(&env, &mut cs, false).unwrap());
    assert_eq!(cs.pages_free, stats.pages_newly_deleted, "{cs:?}");
    stats.pages_newly_deleted
}

#[test]
fn a_split_into_a_block_already_scanned_is_followed_and_its_dead_entries_removed() {
    let db = open_db();
    let env = db.inner().env();
    let ix = new_index(&db, 91001, vec![Type::Int4], false);
    // Ascending keys: leaves lie in key order, so keys below 4,000 occupy the first blocks.
    // An original entry of key k points to (k, 1).
    let n = 20_000;
    let original: Vec<Entry> = (0..n).map(|k| (k, Tid::new(k as u32, 1))).collect();
    insert_all(&db, &ix, &original);
    let freed = make_free_pages(&db, &ix, &|k| k < 4000);
    let free_before = ix.free_list_len();
    assert_eq!(free_before, freed as usize);

    // The bulk delete removes every third original entry from 4,000 on. When it calls back for
    // the first time, a burst of inserts of key 18,000 splits the leaf holding 18,000 (near the
    // end of the file, not scanned yet) several times; the right halves take the recycled
    // blocks, all before the scan position, and carry dead entries with them.
    let dead = |t: Tid| t.offset.0 == 1 && t.block.0 >= 4000 && t.block.0.is_multiple_of(3);
    let burst: Vec<Entry> = (0..1500).map(|i| (18_000, Tid::new(1_000_000 + i, 2))).collect();
    let free_blocks: Vec<u32> = ix.free_pages.lock().clone();
    let first_live = super::insert::leftmost_at_level(&ix, &env, 0).unwrap();
    assert!(free_blocks.iter().all(|&b| b < first_live), "{free_blocks:?} should lie before block {first_live}");
    let mut first_call = true;
    let (mut first_key_at_burst, mut free_after_burst) = (0, usize::MAX);
    let mut stats = BulkDeleteStats::default();
    ix.bulk_delete(
        &env,
        &mut |tids, out| {
            if std::mem::take(&mut first_call) {
                first_key_at_burst = tids[0].block.0;
                insert_all(&db, &ix, &burst);
                free_after_burst = ix.free_list_len();
            }
            for (t, d) in tids.iter().zip(out.iter_mut()) {
                *d = dead(*t);
            }
        },
        &mut stats,
    )
    .unwrap();
    assert!(free_after_burst + 3 <= free_before, "the burst's splits took recycled blocks");
    assert!(first_key_at_burst >= 3900, "the burst came on the first live leaf, after the recycled blocks");

    let want: BTreeSet<Entry> =
        original.iter().chain(&burst).filter(|(k, t)| *k >= 4000 && !dead(*t)).copied().collect();
    let removed = original.iter().filter(|(k, t)| *k >= 4000 && dead(*t)).count() as u64;
    assert_entries(&db, &ix, &want, "exactly the dead entries are gone");
    assert_eq!(stats.tuples_removed, removed);
    assert_eq!(stats.num_index_tuples, want.len() as u64, "no page was visited twice here");
}

#[test]
fn splits_during_a_bulk_delete_carry_its_cycle_id_which_its_vacuum_records_clear() {
    let db = open_db();
    let env = db.inner().env();
    let start = env.wal.insert_lsn();
    let ix = new_index(&db, 91030, vec![Type::Int4], false);
    insert_all(&db, &ix, &(0..3000).map(|k| (k, Tid::new(k as u32, 1))).collect::<Vec<_>>());
    let stamped = |id: u16| -> Vec<u32> {
        (1..ix.num_pages(&env).unwrap()).filter(|&b| bp::cycle_id(&ix.read_page(&env, b).unwrap().g.0) == id).collect()
    };
    assert!(stamped(0).len() as u32 == ix.num_pages(&env).unwrap() - 1, "no bulk delete ran: no stamps");

    let guard = cycle::start(&ix).unwrap();
    let id = guard.id();
    assert_ne!(id, 0);
    assert!(cycle::start(&ix).is_err(), "one bulk delete per index at a time");
    // A burst of equal keys in the middle splits one leaf again and again: A -> C -> B -> D.
    insert_all(&db, &ix, &(0..1200).map(|i| (1500, Tid::new(100_000 + i, 2))).collect::<Vec<_>>());
    let chain = stamped(id);
    assert!(chain.len() >= 3, "both halves of every split are stamped: {chain:?}");
    // Exactly one page of the chain ends it: SPLIT_END, and its right sibling has another ID.
    let ends: Vec<u32> = chain
        .iter()
        .copied()
        .filter(|&b| bp::flags(&ix.read_page(&env, b).unwrap().g.0) & bp::BTP_SPLIT_END != 0)
        .collect();
    assert_eq!(ends.len(), 1, "{chain:?}");
    let end = ix.read_page(&env, ends[0]).unwrap();
    assert_ne!(bp::cycle_id(&ix.read_page(&env, bp::next(&end.g.0)).unwrap().g.0), id);
    drop(end);
    for &b in &chain {
        let r = ix.read_page(&env, b).unwrap();
        let p = &r.g.0;
        let last = bp::flags(p) & bp::BTP_SPLIT_END != 0;
        assert!(last || chain.contains(&bp::next(p)), "block {b}: the chain continues to the right");
    }
    drop(guard);
    assert_eq!(cycle::current(&ix), 0, "the cycle ends with its guard");

    // A VACUUM record clears the ID of its page, a DELETE (simple deletion) record does not.
    for (info, cleared) in [(wal::XLOG_BTREE_DELETE, false), (wal::XLOG_BTREE_VACUUM, true)] {
        let mut w = ix.write_page(&env, chain[0]).unwrap();
        let off = bp::first_data_offset(&w.g.0).0;
        vacuum::remove_items(&ix, &env, &mut w, info, &[off], &mut Vec::new(), "test").unwrap();
        assert_eq!(bp::cycle_id(&w.g.0) == 0, cleared, "info {info:#x}");
    }
    assert_clean(&db, &ix);
    // Redo restores the stamps and the clearing byte for byte.
    assert_redo_matches(&db, start, &[91030]);
}

/// `workers` threads bulk-delete while a thread inserts keys all over the index; the index
/// starts with recycled pages on its free list, so some splits put entries behind the scan.
fn parallel_bulk_delete_under_inserts(workers: usize, seed: u64) {
    let db = open_db();
    let env = db.inner().env();
    let ix = new_index(&db, 91010 + workers as u32, vec![Type::Int4], false);
    let mut rng = StdRng::seed_from_u64(seed);
    let n = 30_000;
    let mut original: Vec<Entry> = (0..n).map(|k| (k, Tid::new(k as u32, 1))).collect();
    for i in (1..original.len()).rev() {
        original.swap(i, rng.gen_range(0..=i));
    }
    insert_all(&db, &ix, &original);
    let hole = |k: i32| k % 5000 < 1200;
    make_free_pages(&db, &ix, &hole);

    // Dead: every fourth original entry, and all of 20,000..24,000 (whole leaves empty out
    // beside each other, and different workers delete neighbours).
    let dead = |t: Tid| t.offset.0 == 1 && (t.block.0.is_multiple_of(4) || (20_000..24_000).contains(&t.block.0));
    let stop = AtomicBool::new(false);
    let inserted = StdMutex::new(Vec::new());
    let calls = AtomicU32::new(0);
    let mut stats = BulkDeleteStats::default();
    std::thread::scope(|s| {
        s.spawn(|| {
            let env = db.inner().env();
            let mut rng = StdRng::seed_from_u64(seed + 1);
            let mut i = 0u32;
            while !stop.load(AtOrd::Relaxed) || i < 200 {
                // Not into the range the bulk delete empties.
                let k = rng.gen_range(0..n - 4000);
                let e = (if k < 20_000 { k } else { k + 4000 }, Tid::new(2_000_000 + i, 2));
                ix.insert(&env, &[Value::Int4(e.0)], e.1, None).unwrap();
                inserted.lock().unwrap().push(e);
                i += 1;
            }
        });
        let is_dead = |tids: &[Tid], out: &mut [bool]| {
            calls.fetch_add(1, AtOrd::Relaxed);
            for (t, d) in tids.iter().zip(out.iter_mut()) {
                *d = dead(*t);
            }
        };
        let r = ix.bulk_delete_parallel(&env, &is_dead, workers, &mut stats);
        stop.store(true, AtOrd::Relaxed);
        r.unwrap();
    });
    assert!(calls.load(AtOrd::Relaxed) > 20);
    let inserted = inserted.into_inner().unwrap();
    let kept = |e: &&Entry| !hole(e.0) && !dead(e.1);
    let want: BTreeSet<Entry> = original.iter().filter(kept).chain(&inserted).copied().collect();
    assert_entries(&db, &ix, &want, &format!("{workers} workers: exactly the dead entries are gone"));
    let removed = original.iter().filter(|e| !hole(e.0) && dead(e.1)).count() as u64;
    assert_eq!(stats.tuples_removed, removed, "{workers} workers: each dead entry removed once");
    assert!(stats.num_index_tuples >= (want.len() - inserted.len()) as u64, "{stats:?}");
    assert!(stats.pages_newly_deleted > 0, "{stats:?}");
    assert_eq!(stats.num_pages, ix.num_pages(&env).unwrap());
}

#[test]
fn parallel_bulk_delete_by_2_3_and_4_threads_under_concurrent_splits_removes_exactly_the_dead() {
    for workers in 2..=4 {
        parallel_bulk_delete_under_inserts(workers, 40 + workers as u64);
    }
}

#[test]
fn a_second_bulk_delete_of_the_same_index_is_refused_while_one_runs() {
    let db = open_db();
    let env = db.inner().env();
    let ix = new_index(&db, 91020, vec![Type::Int4], false);
    insert_all(&db, &ix, &[(1, Tid::new(1, 1))]);
    let scan = ix.begin_bulk_delete(&env).unwrap();
    assert!(ix.begin_bulk_delete(&env).is_err(), "multiple active vacuums for one index");
    scan.work(&env, &mut |_, _| {}).unwrap();
    let mut stats = BulkDeleteStats::default();
    scan.finish(&env, &mut stats).unwrap();
    assert_eq!(stats.num_index_tuples, 1);
    // Dropped, even without finishing, the scan frees the index for the next one.
    drop(ix.begin_bulk_delete(&env).unwrap());
    ix.bulk_delete(&env, &mut |_, _| {}, &mut stats).unwrap();
}

/// Regression (found by review of the physical-order scan): the pages a bulk delete finds
/// reusable go on the free list when it ends, and a split may have taken one of them meanwhile.
/// A split popping such a stale entry must neither reuse the live page nor wait for its lock,
/// which the page's holder may keep while it waits for the split's own pages.
#[test]
fn a_split_skips_a_free_list_entry_that_is_live_or_locked() {
    let db = open_db();
    let env = db.inner().env();
    let ix = new_index(&db, 91040, vec![Type::Int4], false);
    let first: Vec<Entry> = (0..3000).map(|k| (k, Tid::new(k as u32, 1))).collect();
    insert_all(&db, &ix, &first);
    let leftmost = super::insert::leftmost_at_level(&ix, &env, 0).unwrap();
    let second =
        super::insert::leftmost_at_level(&ix, &env, 0).and_then(|b| Ok(bp::next(&ix.read_page(&env, b)?.g.0))).unwrap();
    // Both are live leaves; the second one stays share-locked by this thread throughout.
    let held = ix.read_page(&env, second).unwrap();
    ix.add_free_pages(vec![leftmost, second]);
    // Ascending inserts split the rightmost leaf, far from both.
    let more: Vec<Entry> = (3000..6000).map(|k| (k, Tid::new(k as u32, 1))).collect();
    insert_all(&db, &ix, &more);
    assert_eq!(ix.free_list_len(), 0, "both stale entries were dropped");
    drop(held);
    let want: BTreeSet<Entry> = first.iter().chain(&more).copied().collect();
    assert_entries(&db, &ix, &want, "no live page was taken for a split");
}

// ---------------------------------------------------------------------------------------------
// Crash

fn crash_config() -> Config {
    Config::from_pairs([
        ("shared_buffers", "128kB"),
        ("checkpoint_timeout", "1d"),
        ("max_wal_size", "1TB"),
        ("wal_writer_delay", "10s"),
        ("autovacuum", "off"),
    ])
    .unwrap()
}

fn rows(db: &Database) -> BTreeSet<i32> {
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    tx.scan(&t).unwrap().map(|r| r.unwrap().1[0].clone()).map(|v| if let Value::Int4(k) = v { k } else { 0 }).collect()
}

/// A table with a primary key whose rows were partly deleted (a whole key range, so leaves
/// empty out, and every third row elsewhere); returns the data directory after a clean
/// shutdown, the remaining keys and the deleted rows' TIDs.
fn prepare_crash() -> (Arc<FaultFs>, BTreeSet<i32>, HashSet<Tid>) {
    let fs = FaultFs::new();
    let db = Database::open_with_fs(fs.clone(), Path::new("/db"), crash_config()).unwrap();
    let col = |n: &str, ty| Column { name: n.into(), ty, nullable: false };
    let schema = Schema { columns: vec![col("id", Type::Int4), col("pad", Type::Text)] };
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", schema, opts).unwrap();
    let mut tx = db.begin().unwrap();
    let new_rows: Vec<Vec<Value>> = (0..12_000).map(|i| vec![Value::Int4(i), Value::Text("x".repeat(40))]).collect();
    tx.insert_many(&t, &new_rows).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    let doomed: Vec<(Tid, i32)> = tx
        .scan(&t)
        .unwrap()
        .map(|r| r.unwrap())
        .filter_map(|(tid, v)| match v[0] {
            Value::Int4(k) if (3000..7500).contains(&k) || k % 3 == 0 => Some((tid, k)),
            _ => None,
        })
        .collect();
    for &(tid, _) in &doomed {
        assert!(tx.delete(&t, tid).unwrap());
    }
    tx.commit().unwrap();
    db.checkpoint().unwrap();
    let expected = rows(&db);
    db.close().unwrap();
    (fs.crash(CrashMode::LoseUnsynced), expected, doomed.into_iter().map(|(t, _)| t).collect())
}

#[test]
fn a_crash_at_any_sync_of_a_parallel_bulk_delete_recovers_to_a_consistent_index() {
    let (base, expected, dead) = prepare_crash();
    let is_dead = |tids: &[Tid], out: &mut [bool]| {
        for (t, d) in tids.iter().zip(out.iter_mut()) {
            *d = dead.contains(t);
        }
    };
    let mut n = 1u64;
    loop {
        let fs = base.crash(CrashMode::LoseUnsynced);
        let db = Database::open_with_fs(fs.clone(), Path::new("/db"), crash_config()).unwrap();
        let pk = db.index("t_pkey").unwrap();
        let syncs_before = fs.syncs();
        fs.fail_sync_after(Some(n));
        let env = db.inner().env();
        let mut stats = BulkDeleteStats::default();
        let outcome = pk.def.btree.bulk_delete_parallel(&env, &is_dead, 2, &mut stats);
        let reached = fs.syncs() - syncs_before >= n;
        fs.fail_sync_after(None);
        drop(pk);
        db.abandon();
        if !reached {
            outcome.expect("a bulk delete without a failed sync succeeds");
            assert_eq!(stats.tuples_removed, dead.len() as u64);
            assert!(stats.pages_newly_deleted > 0, "{stats:?}");
            break;
        }
        for mode in [CrashMode::LoseUnsynced, CrashMode::Random { seed: n }] {
            let what = format!("crash at sync {n} of a bulk delete ({mode:?})");
            let crashed = fs.crash(mode);
            let db = Database::open_with_fs(crashed, Path::new("/db"), crash_config())
                .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
            let report = crate::check::check_database(&db).unwrap();
            assert!(report.is_clean(), "{what}: check found problems:\n{report}");
            assert_eq!(rows(&db), expected, "{what}: rows differ");
            // What the crash left is finished by the next bulk delete.
            let pk = db.index("t_pkey").unwrap();
            let env = db.inner().env();
            let mut stats = BulkDeleteStats::default();
            pk.def.btree.bulk_delete_parallel(&env, &is_dead, 2, &mut stats).unwrap();
            let (problems, entries) = pk.def.btree.check(&env).unwrap();
            assert!(problems.is_empty(), "{what}: {problems:?}");
            assert!(entries.iter().all(|e| !dead.contains(&e.tid)), "{what}: dead entries left");
            assert_eq!(entries.len(), expected.len(), "{what}");
            drop(pk);
            db.abandon();
        }
        n += 1;
        assert!(n < 10_000, "the bulk delete keeps syncing");
    }
    assert!(n > 3, "the bulk delete should sync several times in this setup (got {n})");
}
