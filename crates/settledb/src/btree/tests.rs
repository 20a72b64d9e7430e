//! B-tree specification tests. Every test ends with `check()` clean.

use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering as AtOrd};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::page::{self as bp};
use super::*;
use crate::buffer::BufferPool;
use crate::db::Database;
use crate::index::{HeapTupleState, IndexAm, KeyBound, ScanDirection, UniqueCheck};
use crate::io::fault::FaultFs;
use crate::io::FileSystem;
use crate::smgr::Smgr;
use crate::types::{Fork, Lsn};
use crate::wal::WalReader;
use crate::Config;

pub(super) fn open_db() -> Database {
    let fs = FaultFs::new();
    Database::open_with_fs(fs, Path::new("/db"), Config::default()).unwrap()
}

/// Creates the fork and the metapage of a new index with relfilenode `rel`.
pub(super) fn new_index(db: &Database, rel: u32, types: Vec<Type>, unique: bool) -> BtreeIndex {
    let env = db.inner().env();
    env.pool.smgr().create(Oid(rel), Fork::Main).unwrap();
    let ix = BtreeIndex::new(Oid(rel), "ix", Oid(rel), types, unique);
    ix.create_empty(&env).unwrap();
    ix
}

fn scan_all(db: &Database, ix: &BtreeIndex, lo: KeyBound, hi: KeyBound, dir: ScanDirection) -> Vec<(Vec<Value>, Tid)> {
    let env = db.inner().env();
    ix.scan(&env, lo, hi, dir).unwrap().map(|e| e.map(|e| (e.key, e.tid))).collect::<Result<Vec<_>>>().unwrap()
}

pub(super) fn assert_clean(db: &Database, ix: &BtreeIndex) -> Vec<IndexEntry> {
    let env = db.inner().env();
    let (problems, entries) = ix.check(&env).unwrap();
    assert!(problems.is_empty(), "check found problems:\n{}", problems.join("\n"));
    entries
}

fn tid(i: u32) -> Tid {
    Tid::new(i / 100, (i % 100 + 1) as u16)
}

// ---------------------------------------------------------------------------------------------
// Key encoding

fn random_value(rng: &mut StdRng, ty: Type) -> Value {
    if rng.gen_ratio(1, 20) {
        return Value::Null;
    }
    let small = rng.gen_bool(0.3);
    match ty {
        Type::Int4 => Value::Int4(if small { rng.gen_range(-3..3) } else { rng.gen() }),
        Type::Int8 => Value::Int8(if small { rng.gen_range(-3..3) } else { rng.gen() }),
        Type::Timestamp => Value::Timestamp(rng.gen()),
        Type::Float8 => Value::Float8(match rng.gen_range(0..6) {
            0 => f64::INFINITY,
            1 => f64::NEG_INFINITY,
            2 => 0.0,
            3 => rng.gen_range(-1e-300..1e-300),
            _ => f64::from_bits(rng.gen::<u64>() & !(0x7FF << 52) | (u64::from(rng.gen_range(1u32..0x7FE)) << 52)),
        }),
        Type::Bool => Value::Bool(rng.gen()),
        Type::Text => {
            let n = rng.gen_range(0..6);
            Value::Text((0..n).map(|_| ['\0', 'a', 'b', 'é', '\u{1}'][rng.gen_range(0..5)]).collect())
        }
        Type::Bytea => {
            let n = rng.gen_range(0..6);
            Value::Bytea((0..n).map(|_| [0u8, 1, 0xFF, 7][rng.gen_range(0..4)]).collect())
        }
    }
}

/// The SQL order of two values of one type, NULLS LAST.
fn value_cmp(a: &Value, b: &Value) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    match (a, b) {
        (Value::Null, Value::Null) => Equal,
        (Value::Null, _) => Greater,
        (_, Value::Null) => Less,
        (Value::Int4(x), Value::Int4(y)) => x.cmp(y),
        (Value::Int8(x), Value::Int8(y)) | (Value::Timestamp(x), Value::Timestamp(y)) => x.cmp(y),
        (Value::Float8(x), Value::Float8(y)) => x.partial_cmp(y).unwrap(),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Text(x), Value::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bytea(x), Value::Bytea(y)) => x.cmp(y),
        _ => panic!("mixed types"),
    }
}

#[test]
fn key_encoding_preserves_order_and_round_trips_for_every_type() {
    let mut rng = StdRng::seed_from_u64(7);
    for ty in Type::ALL {
        for _ in 0..3000 {
            let types = [ty, Type::Int4];
            let a = vec![random_value(&mut rng, ty), random_value(&mut rng, Type::Int4)];
            let b = vec![random_value(&mut rng, ty), random_value(&mut rng, Type::Int4)];
            let (ea, eb) = (keys::encode(&types, &a).unwrap(), keys::encode(&types, &b).unwrap());
            let want = value_cmp(&a[0], &b[0]).then(value_cmp(&a[1], &b[1]));
            assert_eq!(ea.cmp(&eb), want, "{ty:?}: {a:?} vs {b:?}");
            assert_eq!(keys::decode(&types, &ea).unwrap(), a);
            // A one-column prefix is a byte prefix.
            assert!(ea.starts_with(&keys::encode(&types, &a[..1]).unwrap()));
        }
    }
    assert!(keys::decode(&[Type::Text], &[0, b'a', 0]).is_err(), "unterminated text");
    assert!(keys::decode(&[Type::Bool], &[0, 7]).is_err(), "bad bool");
}

// ---------------------------------------------------------------------------------------------
// Inserts and scans

#[test]
fn inserts_of_100k_random_int4_keys_scan_sorted_and_complete_both_ways() {
    let db = open_db();
    let ix = new_index(&db, 90001, vec![Type::Int4], false);
    let env = db.inner().env();
    let mut rng = StdRng::seed_from_u64(1);
    let mut model = Vec::new();
    for i in 0..100_000u32 {
        let k = rng.gen_range(-50_000..50_000);
        ix.insert(&env, &[Value::Int4(k)], tid(i), None).unwrap();
        model.push((vec![Value::Int4(k)], tid(i)));
    }
    model.sort_by(|a, b| value_cmp(&a.0[0], &b.0[0]).then(a.1.cmp(&b.1)));
    let fwd = scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward);
    assert_eq!(fwd, model);
    let mut bwd = scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Backward);
    bwd.reverse();
    assert_eq!(bwd, model);
    assert!(ix.meta(&env).unwrap().level >= 1);
    let entries = assert_clean(&db, &ix);
    assert_eq!(entries.len(), model.len());
    assert_eq!(db.inner().pool.pinned_frames(), 0);
}

#[test]
fn range_scans_with_inclusive_exclusive_and_prefix_bounds() {
    let db = open_db();
    let ix = new_index(&db, 90002, vec![Type::Int4, Type::Text], false);
    let env = db.inner().env();
    let mut model = Vec::new();
    let mut n = 0;
    for a in 0..60 {
        for b in ["", "a", "b", "bb", "c"] {
            let key = vec![Value::Int4(a), Value::Text(b.into())];
            ix.insert(&env, &key, tid(n), None).unwrap();
            model.push((key, tid(n)));
            n += 1;
        }
    }
    model.sort_by(|x, y| value_cmp(&x.0[0], &y.0[0]).then(value_cmp(&x.0[1], &y.0[1])).then(x.1.cmp(&y.1)));
    let i4 = |a| Value::Int4(a);
    let tx = |s: &str| Value::Text(s.into());
    let in_lo = |k: &[Value], b: &KeyBound| match b {
        KeyBound::Unbounded => true,
        KeyBound::Included(p) => {
            (0..p.len()).map(|i| value_cmp(&k[i], &p[i])).find(|o| o.is_ne()).is_none_or(|o| o.is_gt())
        }
        KeyBound::Excluded(p) => {
            (0..p.len()).map(|i| value_cmp(&k[i], &p[i])).find(|o| o.is_ne()).is_some_and(|o| o.is_gt())
        }
    };
    let in_hi = |k: &[Value], b: &KeyBound| match b {
        KeyBound::Unbounded => true,
        KeyBound::Included(p) => {
            (0..p.len()).map(|i| value_cmp(&k[i], &p[i])).find(|o| o.is_ne()).is_none_or(|o| o.is_lt())
        }
        KeyBound::Excluded(p) => {
            (0..p.len()).map(|i| value_cmp(&k[i], &p[i])).find(|o| o.is_ne()).is_some_and(|o| o.is_lt())
        }
    };
    let cases = vec![
        (KeyBound::Included(vec![i4(10)]), KeyBound::Included(vec![i4(12)])),
        (KeyBound::Excluded(vec![i4(10)]), KeyBound::Excluded(vec![i4(12)])),
        (KeyBound::Included(vec![i4(10), tx("b")]), KeyBound::Excluded(vec![i4(11), tx("b")])),
        (KeyBound::Excluded(vec![i4(10), tx("b")]), KeyBound::Included(vec![i4(10), tx("c")])),
        (KeyBound::Unbounded, KeyBound::Excluded(vec![i4(3)])),
        (KeyBound::Excluded(vec![i4(57)]), KeyBound::Unbounded),
        (KeyBound::Included(vec![i4(20)]), KeyBound::Included(vec![i4(20)])),
        (KeyBound::Included(vec![i4(30)]), KeyBound::Excluded(vec![i4(30)])),
        (KeyBound::Included(vec![i4(100)]), KeyBound::Unbounded),
    ];
    for (lo, hi) in cases {
        let want: Vec<_> = model.iter().filter(|(k, _)| in_lo(k, &lo) && in_hi(k, &hi)).cloned().collect();
        let got = scan_all(&db, &ix, lo.clone(), hi.clone(), ScanDirection::Forward);
        assert_eq!(got, want, "forward {lo:?} .. {hi:?}");
        let mut back = scan_all(&db, &ix, lo.clone(), hi.clone(), ScanDirection::Backward);
        back.reverse();
        assert_eq!(back, want, "backward {lo:?} .. {hi:?}");
    }
    assert_clean(&db, &ix);
}

#[test]
fn wide_keys_split_up_to_three_levels() {
    let db = open_db();
    let ix = new_index(&db, 90003, vec![Type::Text], false);
    let env = db.inner().env();
    let mut rng = StdRng::seed_from_u64(3);
    let mut model = Vec::new();
    for i in 0..700u32 {
        let s = format!("{:06}{}", rng.gen_range(0..1_000_000), "x".repeat(1000));
        ix.insert(&env, &[Value::Text(s.clone())], tid(i), None).unwrap();
        model.push((vec![Value::Text(s)], tid(i)));
    }
    assert!(ix.meta(&env).unwrap().level >= 2, "three levels expected, root level {}", ix.meta(&env).unwrap().level);
    model.sort_by(|a, b| value_cmp(&a.0[0], &b.0[0]).then(a.1.cmp(&b.1)));
    assert_eq!(scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward), model);
    let mut back = scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Backward);
    back.reverse();
    assert_eq!(back, model);
    assert_clean(&db, &ix);
    let root = ix.meta(&env).unwrap().root;
    let page = env.pool.read(ix.tag(root), None).unwrap();
    let text = describe_page(&page.read().0);
    assert!(text.contains("ROOT") && text.contains("-> block"), "{text}");
}

#[test]
fn concurrent_inserts_and_scans_see_every_earlier_key_exactly_once() {
    let db = open_db();
    let ix = new_index(&db, 90004, vec![Type::Int4], false);
    const THREADS: usize = 4;
    const PER: usize = 6000;
    let progress: Vec<AtomicUsize> = (0..THREADS).map(|_| AtomicUsize::new(0)).collect();
    let order: Vec<Vec<i32>> = (0..THREADS)
        .map(|t| {
            let mut rng = StdRng::seed_from_u64(t as u64);
            let mut v: Vec<i32> = (0..PER as i32).map(|i| i * THREADS as i32 + t as i32).collect();
            for i in (1..v.len()).rev() {
                v.swap(i, rng.gen_range(0..=i));
            }
            v
        })
        .collect();
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (ix, db, order, progress, done) = (&ix, &db, &order, &progress, &done);
            s.spawn(move || {
                let env = db.inner().env();
                for (i, &k) in order[t].iter().enumerate() {
                    ix.insert(&env, &[Value::Int4(k)], tid(k as u32), None).unwrap();
                    progress[t].store(i + 1, AtOrd::Release);
                }
                done.fetch_add(1, AtOrd::AcqRel);
            });
        }
        let (ix, db, order, progress, done) = (&ix, &db, &order, &progress, &done);
        s.spawn(move || {
            let mut round = 0;
            while done.load(AtOrd::Acquire) < THREADS || round < 2 {
                let before: Vec<i32> =
                    (0..THREADS).flat_map(|t| order[t][..progress[t].load(AtOrd::Acquire)].to_vec()).collect();
                let dir = if round % 2 == 0 { ScanDirection::Forward } else { ScanDirection::Backward };
                let got = scan_all(db, ix, KeyBound::Unbounded, KeyBound::Unbounded, dir);
                let keys: Vec<i32> = got
                    .iter()
                    .map(|(k, _)| match k[0] {
                        Value::Int4(x) => x,
                        _ => unreachable!(),
                    })
                    .collect();
                let sorted =
                    keys.windows(2).all(|w| if dir == ScanDirection::Forward { w[0] < w[1] } else { w[0] > w[1] });
                assert!(sorted, "scan {round} ({dir:?}) out of order or repeated");
                let seen: HashSet<i32> = keys.into_iter().collect();
                for k in before {
                    assert!(seen.contains(&k), "scan {round} ({dir:?}) missed key {k} inserted before it started");
                }
                round += 1;
            }
        });
    });
    let all = scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward);
    assert_eq!(all.len(), THREADS * PER);
    assert_clean(&db, &ix);
}

// ---------------------------------------------------------------------------------------------
// Uniqueness

/// A heap stand-in: each TID answers from a script, one answer per question (the last repeats).
struct FakeHeap {
    answers: std::sync::Mutex<BTreeMap<Tid, Vec<HeapTupleState>>>,
    waits: Cell<u32>,
}

impl UniqueCheck for FakeHeap {
    fn state(&self, tid: Tid) -> Result<HeapTupleState> {
        let mut a = self.answers.lock().unwrap();
        let list = a.get_mut(&tid).expect("asked about an unknown TID");
        Ok(if list.len() > 1 { list.remove(0) } else { list[0] })
    }
    fn wait(&self, _xid: Xid) -> Result<()> {
        self.waits.set(self.waits.get() + 1);
        Ok(())
    }
}

#[test]
fn unique_index_rejects_live_duplicates_waits_for_in_progress_and_ignores_dead_and_null() {
    let db = open_db();
    let ix = new_index(&db, 90005, vec![Type::Int4], true).with_column_names(vec!["aid".into()]);
    let env = db.inner().env();
    let (a, b, c, d) = (Tid::new(1, 1), Tid::new(1, 2), Tid::new(1, 3), Tid::new(1, 4));
    let heap = FakeHeap {
        answers: std::sync::Mutex::new(BTreeMap::from([
            (a, vec![HeapTupleState::Live]),
            (b, vec![HeapTupleState::InProgress(Xid(700)), HeapTupleState::Dead]),
        ])),
        waits: Cell::new(0),
    };
    // Fill so that key 5's duplicates straddle pages.
    for i in 0..2000 {
        ix.insert(&env, &[Value::Int4(10 + i)], Tid::new(100 + i as u32, 1), Some(&heap)).unwrap();
    }
    ix.insert(&env, &[Value::Int4(5)], a, Some(&heap)).unwrap();
    let err = ix.insert(&env, &[Value::Int4(5)], c, Some(&heap)).unwrap_err();
    assert!(matches!(&err, Error::UniqueViolation { index, key } if index == "ix" && key == "aid)=(5"), "{err:?}");
    assert!(err.to_string().contains("Key (aid)=(5) already exists."), "{err}");

    // In progress -> wait -> retry -> now dead: the insert goes in.
    ix.insert(&env, &[Value::Int4(6)], b, None).unwrap();
    ix.insert(&env, &[Value::Int4(6)], c, Some(&heap)).unwrap();
    assert_eq!(heap.waits.get(), 1);
    // NULLs never conflict.
    ix.insert(&env, &[Value::Null], d, Some(&heap)).unwrap();
    ix.insert(&env, &[Value::Null], Tid::new(1, 5), Some(&heap)).unwrap();
    let six = scan_all(
        &db,
        &ix,
        KeyBound::Included(vec![Value::Int4(6)]),
        KeyBound::Included(vec![Value::Int4(6)]),
        ScanDirection::Forward,
    );
    assert_eq!(six.iter().map(|e| e.1).collect::<Vec<_>>(), vec![b, c]);
    let nulls = scan_all(&db, &ix, KeyBound::Included(vec![Value::Null]), KeyBound::Unbounded, ScanDirection::Forward);
    assert_eq!(nulls.len(), 2, "NULLS LAST");
    // Bulk build finds duplicates too.
    let ix2 = new_index(&db, 90006, vec![Type::Int4], true).with_column_names(vec!["aid".into()]);
    let err = ix2.build(&env, vec![(vec![Value::Int4(1)], a), (vec![Value::Int4(1)], b)]).unwrap_err();
    assert!(matches!(err, Error::UniqueViolation { .. }));
    assert_clean(&db, &ix);
}

// ---------------------------------------------------------------------------------------------
// VACUUM

#[test]
fn bulk_delete_of_90_percent_leaves_exactly_the_rest_and_deleted_pages_are_reused() {
    let db = open_db();
    let ix = new_index(&db, 90007, vec![Type::Int4], false);
    let env = db.inner().env();
    let n = 30_000u32;
    // 90% scattered over every page, and a whole key range so that leaves empty out.
    let gone = |k: u32| !k.is_multiple_of(10) || (10_000..20_000).contains(&k);
    let kept = (0..n).filter(|&k| !gone(k)).count() as u64;
    let mut rng = StdRng::seed_from_u64(9);
    let mut keys: Vec<u32> = (0..n).collect();
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.gen_range(0..=i));
    }
    for &k in &keys {
        ix.insert(&env, &[Value::Int4(k as i32)], Tid::new(k, 1), None).unwrap();
    }
    let pages_before = ix.num_pages(&env).unwrap();
    let mut stats = BulkDeleteStats::default();
    let mut calls = 0;
    ix.bulk_delete(
        &env,
        &mut |tids, dead| {
            calls += 1;
            for (t, d) in tids.iter().zip(dead.iter_mut()) {
                *d = gone(t.block.0);
            }
        },
        &mut stats,
    )
    .unwrap();
    assert_eq!(stats.tuples_removed, u64::from(n) - kept);
    assert_eq!(stats.num_index_tuples, kept);
    assert!(calls > 10, "one callback per leaf");
    assert!(stats.pages_newly_deleted > 0, "{stats:?}");
    let rest = scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward);
    let want: Vec<_> = (0..n).filter(|&k| !gone(k)).map(|k| (vec![Value::Int4(k as i32)], Tid::new(k, 1))).collect();
    assert_eq!(rest, want);
    let mut back = scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Backward);
    back.reverse();
    assert_eq!(back, want);
    assert_clean(&db, &ix);

    // The bulk delete counted the whole index; not reusable until the XID horizon passes the
    // deletion.
    assert_eq!(stats.num_pages, pages_before);
    assert_eq!(stats.pages_deleted, stats.pages_newly_deleted);
    assert_eq!(stats.pages_free, 0, "{stats:?}");
    // So the cleanup that follows it reads nothing and keeps its figures.
    let before = (crate::buffer::my_usage(), stats);
    assert!(ix.cleanup(&env, &mut stats, true).unwrap(), "after a bulk delete cleanup reports");
    assert_eq!((crate::buffer::my_usage(), stats), before, "cleanup after a bulk delete does no I/O");
    db.consume_xids(1).unwrap();
    // No bulk delete this time, but the deleted pages left pending are over 5% of the index.
    let mut cs = BulkDeleteStats::default();
    assert!(ix.cleanup(&env, &mut cs, false).unwrap(), "pending deleted pages make the cleanup scan run");
    assert_eq!(cs.pages_free, cs.pages_deleted);
    assert_eq!(cs.num_index_tuples, kept);
    let free = ix.free_list_len();
    assert!(free > 0);

    // Refill: splits take the recycled pages before extending the file.
    for k in 0..n {
        if gone(k) {
            ix.insert(&env, &[Value::Int4(k as i32)], Tid::new(k, 2), None).unwrap();
        }
        if ix.free_list_len() > 0 {
            assert_eq!(ix.num_pages(&env).unwrap(), pages_before, "extended while recycled pages were free");
        }
    }
    assert!(ix.free_list_len() < free);
    assert_eq!(assert_clean(&db, &ix).len(), n as usize);
}

// ---------------------------------------------------------------------------------------------
// Build

#[test]
fn build_of_200k_entries_equals_inserting_them_one_by_one() {
    let db = open_db();
    let env = db.inner().env();
    let built = new_index(&db, 90008, vec![Type::Int4, Type::Int8], false);
    let inserted = new_index(&db, 90009, vec![Type::Int4, Type::Int8], false);
    let mut rng = StdRng::seed_from_u64(11);
    let entries: Vec<(Vec<Value>, Tid)> = (0..200_000u32)
        .map(|i| (vec![Value::Int4(rng.gen_range(0..5000)), Value::Int8(rng.gen_range(-3..3))], tid(i)))
        .collect();
    built.build(&env, entries.clone()).unwrap();
    for (k, t) in &entries {
        inserted.insert(&env, k, *t, None).unwrap();
    }
    let a = scan_all(&db, &built, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward);
    let b = scan_all(&db, &inserted, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward);
    assert_eq!(a.len(), entries.len());
    assert_eq!(a, b);
    let lo = KeyBound::Included(vec![Value::Int4(100)]);
    let hi = KeyBound::Excluded(vec![Value::Int4(200), Value::Int8(0)]);
    assert_eq!(
        scan_all(&db, &built, lo.clone(), hi.clone(), ScanDirection::Backward),
        scan_all(&db, &inserted, lo, hi, ScanDirection::Backward)
    );
    assert!(built.num_pages(&env).unwrap() < inserted.num_pages(&env).unwrap(), "a build packs pages at 90%");
    assert_clean(&db, &built);
    assert_clean(&db, &inserted);
    // And the built index takes inserts afterwards.
    built.insert(&env, &[Value::Int4(-1), Value::Int8(0)], tid(999_999), None).unwrap();
    assert_clean(&db, &built);
}

// ---------------------------------------------------------------------------------------------
// WAL

/// Replays every B-tree record of `rels` from `start` onto an empty buffer pool and compares
/// each page with the live one (the checksum field aside).
/// Bulk-deletes from `ix` every entry whose heap TID `gone` names; returns the pass's figures.
pub(super) fn bulk_delete_where(env: &HeapEnv<'_>, ix: &BtreeIndex, gone: &dyn Fn(Tid) -> bool) -> BulkDeleteStats {
    let mut stats = BulkDeleteStats::default();
    ix.bulk_delete(
        env,
        &mut |tids, dead| {
            for (t, d) in tids.iter().zip(dead.iter_mut()) {
                *d = gone(*t);
            }
        },
        &mut stats,
    )
    .unwrap();
    stats
}

pub(super) fn assert_redo_matches(db: &Database, start: Lsn, rels: &[u32]) {
    let inner = db.inner();
    let env = inner.env();
    env.wal.flush(env.wal.insert_lsn()).unwrap();
    let blank: Arc<dyn FileSystem> = FaultFs::new();
    blank.create_dir_all(Path::new("/r")).unwrap();
    let smgr = Arc::new(Smgr::new(blank, Path::new("/r")).unwrap());
    let pool = BufferPool::new(4096, smgr);
    for &r in rels {
        pool.smgr().create(Oid(r), Fork::Main).unwrap();
    }
    let mut reader =
        WalReader::new(inner.fs.clone(), &crate::db::startup::wal_dir(&inner.dir), start, env.wal.segment_size());
    let mut n = 0;
    while let Some(rec) = reader.next().unwrap() {
        if rec.rmgr == Rmgr::Btree && rec.blocks.iter().all(|b| rels.contains(&b.tag.rel.0)) {
            assert!(!wal::describe(&rec).is_empty());
            crate::db::startup::redo_blocks(&rec, &pool).unwrap();
            n += 1;
        }
    }
    assert!(n > 0);
    for &r in rels {
        let nblocks = env.pool.smgr().nblocks(Oid(r), Fork::Main).unwrap();
        assert_eq!(pool.smgr().nblocks(Oid(r), Fork::Main).unwrap(), nblocks, "rel {r} size after redo");
        for b in 0..nblocks {
            let tag = BufferTag { rel: Oid(r), fork: Fork::Main, block: BlockNumber(b) };
            let live = env.pool.read(tag, None).unwrap();
            let redone = pool.read(tag, None).unwrap();
            let (mut x, mut y) = (live.read().clone(), redone.read().clone());
            x.0[8..10].fill(0);
            y.0[8..10].fill(0);
            assert!(
                x.0 == y.0,
                "rel {r} block {b} differs after redo:\nlive:\n{}\nredo:\n{}",
                describe_page(&x.0),
                describe_page(&y.0)
            );
        }
    }
}

#[test]
fn redo_of_every_record_rebuilds_the_same_pages() {
    let db = open_db();
    let env = db.inner().env();
    let start = env.wal.insert_lsn();
    let ix = new_index(&db, 90011, vec![Type::Text], false);
    let mut rng = StdRng::seed_from_u64(5);
    for i in 0..3000u32 {
        let s = format!("{:08}{}", rng.gen_range(0..100_000_000), "k".repeat(rng.gen_range(0..300)));
        ix.insert(&env, &[Value::Text(s)], tid(i), None).unwrap();
    }
    let stats = bulk_delete_where(&env, &ix, &|t| t.block.0 < 25 || !t.block.0.is_multiple_of(5));
    assert!(stats.pages_newly_deleted > 0);
    let built = new_index(&db, 90012, vec![Type::Int4], false);
    built.build(&env, (0..20_000).map(|i| (vec![Value::Int4(i)], tid(i as u32))).collect()).unwrap();
    for i in 0..2000 {
        built.insert(&env, &[Value::Int4(i * 7 % 20_000)], tid(50_000 + i as u32), None).unwrap();
    }
    assert_clean(&db, &ix);
    assert_clean(&db, &built);
    assert_redo_matches(&db, start, &[90011, 90012]);
}

// ---------------------------------------------------------------------------------------------
// Corruption

#[test]
fn check_reports_misordered_keys_and_corrupt_pages_are_errors_not_panics() {
    let db = open_db();
    let ix = new_index(&db, 90013, vec![Type::Int4], false);
    let env = db.inner().env();
    for i in 0..2000 {
        ix.insert(&env, &[Value::Int4(i)], tid(i as u32), None).unwrap();
    }
    assert_clean(&db, &ix);
    let leaf = super::insert::leftmost_at_level(&ix, &env, 0).unwrap();
    {
        // Swap the keys of two neighbouring entries in place.
        let w = ix.write_page(&env, leaf).unwrap();
        let mut g = w.g;
        let first = bp::first_data_offset(&g.0);
        let (a, b) = (first, OffsetNumber(first.0 + 1));
        let ka = bp::item(&g.0, a)[8..].to_vec();
        let kb = bp::item(&g.0, b)[8..].to_vec();
        pg::item_mut(&mut g.0, a)[8..].copy_from_slice(&kb);
        pg::item_mut(&mut g.0, b)[8..].copy_from_slice(&ka);
    }
    let (problems, _) = ix.check(&env).unwrap();
    assert!(problems.iter().any(|p| p.contains("not above")), "{problems:?}");
    {
        // Garbage in the special area: every reader gets Corrupted naming the block.
        let w = ix.write_page(&env, leaf).unwrap();
        let mut g = w.g;
        let at = bp::SPECIAL_OFF + 12;
        g.0[at..at + 2].copy_from_slice(&0x4000u16.to_le_bytes());
    }
    let err =
        ix.scan(&env, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward).unwrap().find_map(|r| r.err());
    assert!(
        matches!(err, Some(Error::Corrupted { rel, block, .. }) if rel == Oid(90013) && block == BlockNumber(leaf)),
        "{err:?}"
    );
    assert!(ix.insert(&env, &[Value::Int4(-5)], tid(1), None).is_err());
    assert!(describe_page(&env.pool.read(ix.tag(leaf), None).unwrap().read().0).contains("not a valid B-tree page"));
    // Mangled item lengths are caught by validation too.
    let mut junk = PageBuf::zeroed();
    bp::init(&mut junk.0, 0, bp::BTP_LEAF);
    bp::insert_item(&mut junk.0, OffsetNumber(1), &bp::make_leaf_tuple(&[0, 0, 0, 0, 1], tid(1), false));
    junk.0[bp::SPECIAL_OFF - 16 + 6] = 0xFF; // size field of the tuple
    assert!(bp::validate(&junk.0, Oid(1), BlockNumber(1)).is_err());
    let _ = describe_page(&junk.0);
}

// ---------------------------------------------------------------------------------------------
// LP_DEAD hints and simple deletion

fn k32(key: &[Value]) -> i32 {
    match key.first() {
        Some(Value::Int4(x)) => *x,
        other => panic!("not an int4 key: {other:?}"),
    }
}

fn entry(k: i32, t: Tid) -> IndexEntry {
    IndexEntry { key: vec![Value::Int4(k)], tid: t }
}

#[test]
fn killed_entries_are_skipped_by_scans_both_ways_and_left_out_of_check() {
    let db = open_db();
    let ix = new_index(&db, 90020, vec![Type::Int4], false);
    let env = db.inner().env();
    // Three entries per key so that duplicates straddle leaves.
    for i in 0..3000u32 {
        ix.insert(&env, &[Value::Int4((i % 1000) as i32)], tid(i), None).unwrap();
    }
    let all = scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward);
    let doomed = |k: i32, t: Tid| k % 3 == 0 || t.block.0.is_multiple_of(7);
    let dead: Vec<IndexEntry> =
        all.iter().filter(|(k, t)| doomed(k32(k), *t)).map(|(k, t)| IndexEntry { key: k.clone(), tid: *t }).collect();
    assert_eq!(ix.kill_entries(&env, &dead).unwrap(), dead.len());
    assert_eq!(ix.kill_entries(&env, &dead).unwrap(), 0, "already dead");
    assert_eq!(ix.kill_entries(&env, &[entry(5, Tid::new(9999, 1)), entry(50_000, tid(1))]).unwrap(), 0, "absent");
    let want: Vec<_> = all.iter().filter(|(k, t)| !doomed(k32(k), *t)).cloned().collect();
    assert!(want.len() < all.len() && !want.is_empty());
    assert_eq!(scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward), want);
    let mut back = scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Backward);
    back.reverse();
    assert_eq!(back, want);
    let (lo, hi) = (KeyBound::Included(vec![Value::Int4(300)]), KeyBound::Excluded(vec![Value::Int4(600)]));
    let part: Vec<_> = want.iter().filter(|(k, _)| (300..600).contains(&k32(k))).cloned().collect();
    assert_eq!(scan_all(&db, &ix, lo.clone(), hi.clone(), ScanDirection::Forward), part);
    let mut back = scan_all(&db, &ix, lo, hi, ScanDirection::Backward);
    back.reverse();
    assert_eq!(back, part);
    assert!(describe_page(
        &env.pool.read(ix.tag(super::insert::leftmost_at_level(&ix, &env, 0).unwrap()), None).unwrap().read().0
    )
    .contains("DEAD"));
    let entries = assert_clean(&db, &ix);
    assert_eq!(entries.len(), want.len(), "check() leaves out LP_DEAD entries");
    // Bulk delete removes killed entries whatever the callback says.
    let mut stats = BulkDeleteStats::default();
    ix.bulk_delete(&env, &mut |_, _| {}, &mut stats).unwrap();
    assert_eq!(stats.tuples_removed, dead.len() as u64);
    assert_eq!(scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward), want);
    assert_clean(&db, &ix);
}

#[test]
fn kill_finds_entries_that_a_split_moved_right() {
    let db = open_db();
    let ix = new_index(&db, 90021, vec![Type::Int4], false);
    let env = db.inner().env();
    for i in 0..200 {
        ix.insert(&env, &[Value::Int4(i * 10)], tid(i as u32), None).unwrap();
    }
    assert_eq!(ix.meta(&env).unwrap().level, 0, "one leaf");
    let root = ix.meta(&env).unwrap().root;
    let seen = scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward);
    // Fill the gaps: the leaf splits many times and the upper entries move to new pages.
    for i in 0..2000 {
        ix.insert(&env, &[Value::Int4(i)], tid(10_000 + i as u32), None).unwrap();
    }
    assert!(ix.meta(&env).unwrap().level > 0);
    let upper: Vec<IndexEntry> =
        seen.iter().filter(|(k, _)| k32(k) >= 1000).map(|(k, t)| IndexEntry { key: k.clone(), tid: *t }).collect();
    assert!(upper.len() >= 100);
    {
        // They are no longer on the page the scan found them on.
        let r = ix.read_page(&env, root).unwrap();
        let p = &r.g.0;
        assert!(
            !bp::is_rightmost(p)
                && bp::item_key(p, bp::P_HIKEY).0 <= &keys::encode(&[Type::Int4], &[Value::Int4(1000)]).unwrap()[..]
        );
    }
    assert_eq!(ix.kill_entries(&env, &upper).unwrap(), upper.len());
    let rest =
        scan_all(&db, &ix, KeyBound::Included(vec![Value::Int4(1000)]), KeyBound::Unbounded, ScanDirection::Forward);
    assert!(rest.iter().all(|(_, t)| t.block.0 >= 100), "only the later inserts remain: {:?}", &rest[..3]);
    assert_eq!(rest.len(), 1000);
    assert_clean(&db, &ix);
}

/// Inserts ascending keys into a one-leaf index until the next one would split it.
fn fill_one_leaf(ix: &BtreeIndex, env: &HeapEnv<'_>, from: i32) -> i32 {
    let mut k = from;
    loop {
        let root = ix.meta(env).unwrap().root;
        if root != P_NONE {
            let r = ix.read_page(env, root).unwrap();
            if bp::free_bytes(&r.g.0) < bp::item_space(bp::TUPLE_HEADER_SIZE + 5) {
                return k;
            }
        }
        ix.insert(env, &[Value::Int4(k)], tid(k as u32), None).unwrap();
        k += 1;
    }
}

#[test]
fn insert_into_a_full_leaf_reclaims_killed_entries_instead_of_splitting_and_redo_matches() {
    let db = open_db();
    let env = db.inner().env();
    let start = env.wal.insert_lsn();
    let ix = new_index(&db, 90022, vec![Type::Int4], false);
    let n = fill_one_leaf(&ix, &env, 0);
    assert!(n > 300, "{n}");
    let pages = ix.num_pages(&env).unwrap();
    let dead: Vec<IndexEntry> = (0..n).filter(|k| k % 2 == 0).map(|k| entry(k, tid(k as u32))).collect();
    assert_eq!(ix.kill_entries(&env, &dead).unwrap(), dead.len());
    // Another backend inserts into the full leaf: it reclaims the dead half, no split.
    std::thread::scope(|s| {
        s.spawn(|| {
            let env = db.inner().env();
            for k in n..n + 100 {
                ix.insert(&env, &[Value::Int4(k)], tid(k as u32), None).unwrap();
            }
        });
    });
    assert_eq!(ix.num_pages(&env).unwrap(), pages, "the leaf did not split");
    assert_eq!(ix.meta(&env).unwrap().level, 0);
    let want: Vec<_> =
        (0..n + 100).filter(|k| k % 2 == 1 || *k >= n).map(|k| (vec![Value::Int4(k)], tid(k as u32))).collect();
    assert_eq!(scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward), want);
    assert!(bp::dead_offsets(&ix.read_page(&env, ix.meta(&env).unwrap().root).unwrap().g.0).is_empty());
    // Keep going until it must split anyway: a leaf without dead entries splits as before.
    fill_one_leaf(&ix, &env, 50_000);
    for k in 100_000..100_010 {
        ix.insert(&env, &[Value::Int4(k)], tid(k as u32), None).unwrap();
    }
    assert!(ix.num_pages(&env).unwrap() > pages);
    assert_clean(&db, &ix);
    assert_redo_matches(&db, start, &[90022]);
    let mut reader = WalReader::new(
        db.inner().fs.clone(),
        &crate::db::startup::wal_dir(&db.inner().dir),
        start,
        env.wal.segment_size(),
    );
    let mut deletes = 0;
    while let Some(rec) = reader.next().unwrap() {
        if rec.rmgr == Rmgr::Btree && rec.info == wal::XLOG_BTREE_DELETE {
            assert_eq!(
                wal::describe(&rec),
                format!("DELETE ndeleted {}; blocks {}", dead.len(), rec.blocks[0].tag.block.0)
            );
            deletes += 1;
        }
    }
    assert_eq!(deletes, 1);
}

#[test]
fn unique_check_ignores_killed_entries() {
    let db = open_db();
    let ix = new_index(&db, 90023, vec![Type::Int4], true);
    let env = db.inner().env();
    let (a, b, c) = (Tid::new(1, 1), Tid::new(1, 2), Tid::new(1, 3));
    // The heap answers only about `c`: asking about a killed entry's TID panics.
    let heap = FakeHeap {
        answers: std::sync::Mutex::new(BTreeMap::from([(c, vec![HeapTupleState::Live])])),
        waits: Cell::new(0),
    };
    ix.insert(&env, &[Value::Int4(5)], a, None).unwrap();
    ix.insert(&env, &[Value::Int4(5)], b, None).unwrap();
    assert_eq!(ix.kill_entries(&env, &[entry(5, a), entry(5, b)]).unwrap(), 2);
    ix.insert(&env, &[Value::Int4(5)], c, Some(&heap)).unwrap();
    let err = ix.insert(&env, &[Value::Int4(5)], Tid::new(1, 4), Some(&heap)).unwrap_err();
    assert!(matches!(err, Error::UniqueViolation { .. }), "{err:?}");
    assert_eq!(assert_clean(&db, &ix).len(), 1);
}

#[test]
fn a_kill_dirties_only_pages_changed_since_the_checkpoint() {
    let db = open_db();
    let ix = new_index(&db, 90024, vec![Type::Int4], false);
    let env = db.inner().env();
    for k in 0..100 {
        ix.insert(&env, &[Value::Int4(k)], tid(k as u32), None).unwrap();
    }
    db.checkpoint().unwrap();
    let root = ix.meta(&env).unwrap().root;
    let buf = env.pool.read(ix.tag(root), None).unwrap();
    assert!(!buf.is_dirty());
    assert_eq!(ix.kill_entries(&env, &[entry(1, tid(1))]).unwrap(), 1);
    assert!(!buf.is_dirty(), "no full-page image since the checkpoint: the hint must not be written");
    assert_eq!(scan_all(&db, &ix, KeyBound::Unbounded, KeyBound::Unbounded, ScanDirection::Forward).len(), 99);
    ix.insert(&env, &[Value::Int4(1000)], tid(1000), None).unwrap(); // logged with an image
    buf.flush().unwrap();
    assert!(!buf.is_dirty());
    assert_eq!(ix.kill_entries(&env, &[entry(2, tid(2))]).unwrap(), 1);
    assert!(buf.is_dirty(), "changed since the checkpoint: the hint may be written");
    assert_clean(&db, &ix);
}

/// `delete_items` lays a leaf out exactly as `rebuild` of the items it keeps would, whatever
/// the order its items lie in on the page, their sizes (padding included), LP_DEAD hints,
/// stray bytes in padding and free space, the header's LSN and prune XID, the special area.
#[test]
fn delete_items_equals_rebuild_of_the_kept_items() {
    let mut rng = StdRng::seed_from_u64(0xde1e7e);
    for round in 0..300 {
        let mut p = crate::page::PageBuf::zeroed();
        bp::init(&mut p.0, 0, bp::BTP_LEAF);
        bp::set_next(&mut p.0, rng.gen_range(0..3));
        crate::page::set_lsn(&mut p.0, Lsn(rng.gen()));
        crate::page::set_prune_xid(&mut p.0, crate::types::Xid(rng.gen()));
        // Items go in at random offsets, so their bytes lie in no particular order.
        let mut n = 0u16;
        loop {
            let key: Vec<u8> = (0..rng.gen_range(0..40)).map(|_| rng.gen()).collect();
            let t = bp::make_leaf_tuple(
                &key,
                Tid { block: BlockNumber(rng.gen()), offset: OffsetNumber(rng.gen()) },
                false,
            );
            let at = OffsetNumber(rng.gen_range(1..=n + 1));
            if !bp::insert_item(&mut p.0, at, &t) {
                break;
            }
            n += 1;
            if rng.gen_bool(0.02) {
                break;
            }
        }
        for o in 1..=n {
            if rng.gen_bool(0.1) {
                bp::mark_dead(&mut p.0, OffsetNumber(o));
            }
            // Stray bytes in the item's padding, which neither layout keeps.
            let id = crate::page::item_id(&p.0, OffsetNumber(o));
            let (off, len) = (usize::from(id.off), usize::from(id.len));
            for b in &mut p.0[off + len..off + crate::page::maxalign(len)] {
                *b = rng.gen();
            }
        }
        let (lower, upper) = (usize::from(crate::page::lower(&p.0)), usize::from(crate::page::upper(&p.0)));
        for b in &mut p.0[lower..upper] {
            *b = rng.gen();
        }
        let remove: Vec<u16> = (1..=n).filter(|_| rng.gen_bool([0.05, 0.5, 1.0][round % 3])).collect();
        let kept: Vec<Vec<u8>> =
            (1..=n).filter(|o| !remove.contains(o)).map(|o| bp::item(&p.0, OffsetNumber(o)).to_vec()).collect();
        let mut want = p.clone();
        assert!(bp::rebuild(&mut want.0, &kept));
        let mut got = p.clone();
        assert!(bp::delete_items(&mut got.0, &remove));
        assert!(got.0 == want.0, "round {round}: {n} items, removing {remove:?}");
    }
}
