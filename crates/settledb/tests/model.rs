//! Model test: concurrent random transactions against the engine and a trivially correct
//! oracle (toydb's `Mirror` idea), compared exactly at the end, after a clean restart, and
//! after a crash.
//!
//! The oracle is a `Mutex<BTreeMap<key, value>>` changed only when a transaction's commit has
//! succeeded. For the oracle to be trivially correct whatever order commits land in, writes
//! come in two kinds:
//!
//! * shared counters (keys `0..COUNTERS`), which every thread increments with `update_with`
//!   (`v = v + delta`). Increments commute, so the oracle adds the deltas of each committed
//!   transaction; the engine must have serialized the increments itself: READ COMMITTED waits
//!   for the holder and re-applies the increment to the newest version, REPEATABLE READ fails
//!   with a serialization error, and two transactions incrementing counters in opposite order
//!   deadlock (the victim rolls back). A lost update shows as a sum that differs.
//! * private rows, inserted, updated (`v = random`), deleted and fetched only by the thread
//!   that owns their key range, checked within the transaction against the thread's own view.
//!
//! Transactions also set savepoints, release them and roll back to them (the oracle keeps the
//! transaction's pending changes as of each savepoint, and ROLLBACK TO restores them): a
//! counter incremented in a rolled-back subtransaction keeps its old value, and its row lock
//! is released to the threads waiting for it before the transaction ends.
//!
//! Rows are located by key through a scan; a TID is a row *version*, so the update closure
//! checks the key and a stale TID (a version pruned since the scan) is retried from a new scan.
//! REPEATABLE READ transactions also check that every scan returns the same rows for the keys
//! they did not write. Thread interleavings vary from run to run; the operation mix is seeded.

use std::collections::BTreeMap;
use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use settledb::{Column, Config, Database, Error, IsolationLevel, Schema, TableOptions, Tid, Transaction, Type, Value};

const THREADS: usize = 4;
const TXNS_PER_THREAD: usize = 600;
const COUNTERS: i32 = 6;
const SEED: u64 = 0x5e77_1edb;

type Rows = BTreeMap<i32, i64>;

#[derive(Default, Debug)]
struct Tally {
    commits: u64,
    rollbacks: u64,
    savepoints: u64,
    rollbacks_to_savepoint: u64,
    serialization_failures: u64,
    deadlocks: u64,
    stale_tids: u64,
}

/// Runs the verifier; any problem fails the test with the full report.
fn assert_check_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap_or_else(|e| panic!("{what}: check failed to run: {e}"));
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

fn config() -> Config {
    Config { shared_buffers_bytes: 4 << 20, fsync: false, ..Config::default() }
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "k".into(), ty: Type::Int4, nullable: false },
            Column { name: "v".into(), ty: Type::Int8, nullable: false },
        ],
    }
}

fn kv(vals: &[Value]) -> (i32, i64) {
    match vals {
        [Value::Int4(k), Value::Int8(v)] => (*k, *v),
        other => panic!("unexpected row {other:?}"),
    }
}

fn scan(tx: &mut Transaction<'_>, db: &Database) -> Result<BTreeMap<i32, (Tid, i64)>, Error> {
    let t = db.table("kv")?;
    let mut out = BTreeMap::new();
    for r in tx.scan(&t)? {
        let (tid, vals) = r?;
        let (k, v) = kv(&vals);
        assert!(out.insert(k, (tid, v)).is_none(), "key {k} visible twice in one scan");
    }
    Ok(out)
}

/// The table's contents as a fresh transaction sees them.
fn contents(db: &Database) -> Rows {
    let mut tx = db.begin().unwrap();
    let rows = scan(&mut tx, db).unwrap().into_iter().map(|(k, (_, v))| (k, v)).collect();
    tx.commit().unwrap();
    rows
}

/// Why a transaction had to stop early.
enum Abort {
    Serialization,
    Deadlock,
}

fn classify(e: Error) -> Abort {
    match e {
        Error::SerializationFailure => Abort::Serialization,
        Error::Deadlock { .. } => Abort::Deadlock,
        e => panic!("unexpected engine error: {e}"),
    }
}

/// One thread's state: its committed private rows (key -> (tid, value)).
struct Worker<'a> {
    db: &'a Database,
    oracle: &'a Mutex<Rows>,
    rng: StdRng,
    mine: BTreeMap<i32, (Tid, i64)>,
    next_key: i32,
    tally: Tally,
}

/// A transaction's own changes, applied to the oracle if it commits.
#[derive(Default, Clone)]
struct Pending {
    deltas: BTreeMap<i32, i64>,
    private: BTreeMap<i32, Option<(Tid, i64)>>,
}

impl Worker<'_> {
    fn view(&self, p: &Pending, k: i32) -> Option<(Tid, i64)> {
        p.private.get(&k).copied().unwrap_or_else(|| self.mine.get(&k).copied())
    }

    fn my_keys(&self, p: &Pending) -> Vec<i32> {
        let mut keys: Vec<i32> = self.mine.keys().chain(p.private.keys()).copied().collect();
        keys.sort();
        keys.dedup();
        keys.retain(|&k| self.view(p, k).is_some());
        keys
    }

    /// Increments counter `c` by `delta`, locating it by a scan.
    fn increment(&mut self, tx: &mut Transaction<'_>, p: &mut Pending, c: i32, delta: i64) -> Result<(), Abort> {
        let t = self.db.table("kv").unwrap();
        loop {
            let rows = scan(tx, self.db).map_err(classify)?;
            let (tid, _) = *rows.get(&c).unwrap_or_else(|| panic!("counter {c} missing"));
            let r = tx.update_with(&t, tid, |row| {
                let (k, v) = kv(row);
                if k != c {
                    return Err(Error::InvalidInput("stale tid".into()));
                }
                Ok(vec![Value::Int4(k), Value::Int8(v + delta)])
            });
            match r {
                Ok(Some(_)) => {
                    *p.deltas.entry(c).or_default() += delta;
                    return Ok(());
                }
                // The version found was pruned away (REDIRECT) or its slot reused: look again.
                Ok(None) | Err(Error::InvalidInput(_)) => self.tally.stale_tids += 1,
                Err(e) => return Err(classify(e)),
            }
        }
    }

    /// One operation on this thread's private rows; checks reads against the thread's view.
    fn private_op(&mut self, tx: &mut Transaction<'_>, p: &mut Pending) {
        let t = self.db.table("kv").unwrap();
        let keys = self.my_keys(p);
        let pick = |rng: &mut StdRng| (!keys.is_empty()).then(|| keys[rng.gen_range(0..keys.len())]);
        match self.rng.gen_range(0..4) {
            0 => {
                let (k, v) = (self.next_key, self.rng.gen_range(0..1000));
                self.next_key += 1;
                let tid = tx.insert(&t, &[Value::Int4(k), Value::Int8(v)]).unwrap();
                p.private.insert(k, Some((tid, v)));
            }
            1 => {
                let Some(k) = pick(&mut self.rng) else { return };
                let (tid, _) = self.view(p, k).unwrap();
                let v = self.rng.gen_range(0..1000);
                let new = tx.update(&t, tid, &[Value::Int4(k), Value::Int8(v)]).unwrap();
                let new = new.unwrap_or_else(|| panic!("own row {k} at {tid} gone"));
                p.private.insert(k, Some((new, v)));
            }
            2 => {
                let Some(k) = pick(&mut self.rng) else { return };
                let (tid, _) = self.view(p, k).unwrap();
                assert!(tx.delete(&t, tid).unwrap(), "own row {k} at {tid} not deleted");
                p.private.insert(k, None);
            }
            _ => {
                let Some(k) = pick(&mut self.rng) else { return };
                let (tid, v) = self.view(p, k).unwrap();
                let got = tx.fetch(&t, tid).unwrap().map(|r| kv(&r));
                assert_eq!(got, Some((k, v)), "fetch of own row at {tid}");
            }
        }
    }

    /// A scan sees exactly this thread's view of its private rows.
    fn check_scan(&self, rows: &BTreeMap<i32, (Tid, i64)>, p: &Pending, lo: i32) {
        let seen: Rows = rows.range(lo..lo + 1_000_000).map(|(&k, &(_, v))| (k, v)).collect();
        let expected: Rows = self.my_keys(p).into_iter().map(|k| (k, self.view(p, k).unwrap().1)).collect();
        assert_eq!(seen, expected, "a scan disagrees with the thread's own rows");
    }

    fn transaction(&mut self, lo: i32) {
        let rr = self.rng.gen_bool(0.25);
        let iso = if rr { IsolationLevel::RepeatableRead } else { IsolationLevel::ReadCommitted };
        let db = self.db;
        let mut tx = db.begin_with(iso).unwrap();
        let mut p = Pending::default();
        // REPEATABLE READ: the first scan, to compare later scans with.
        let first = if rr { Some(scan(&mut tx, db).unwrap()) } else { None };
        let mut aborted = None;
        // Open savepoints with the changes made before each (ROLLBACK TO restores them).
        let mut savepoints: Vec<(String, Pending)> = Vec::new();
        for _ in 0..self.rng.gen_range(1..8) {
            match self.rng.gen_range(0..13) {
                10 => {
                    let name = format!("sp{}", savepoints.len());
                    tx.savepoint(&name).unwrap();
                    savepoints.push((name, p.clone()));
                    self.tally.savepoints += 1;
                }
                11 if !savepoints.is_empty() => {
                    // Undo since a random open savepoint: its row locks are released at once.
                    let i = self.rng.gen_range(0..savepoints.len());
                    tx.rollback_to(&savepoints[i].0).unwrap();
                    savepoints.truncate(i + 1);
                    p = savepoints[i].1.clone();
                    self.tally.rollbacks_to_savepoint += 1;
                }
                12 if !savepoints.is_empty() => {
                    let i = self.rng.gen_range(0..savepoints.len());
                    tx.release(&savepoints[i].0).unwrap();
                    savepoints.truncate(i);
                }
                11 | 12 => {}
                0..=4 => {
                    let (c, delta) = (self.rng.gen_range(0..COUNTERS), self.rng.gen_range(1..10));
                    if let Err(a) = self.increment(&mut tx, &mut p, c, delta) {
                        aborted = Some(a);
                        break;
                    }
                }
                5..=8 => self.private_op(&mut tx, &mut p),
                _ => {
                    let rows = scan(&mut tx, db).unwrap();
                    self.check_scan(&rows, &p, lo);
                    if let Some(first) = &first {
                        let untouched = |k: &i32| !p.private.contains_key(k) && !p.deltas.contains_key(k);
                        let a: Vec<_> = first.iter().filter(|(k, _)| untouched(k)).map(|(k, (_, v))| (k, v)).collect();
                        let b: Vec<_> = rows.iter().filter(|(k, _)| untouched(k)).map(|(k, (_, v))| (k, v)).collect();
                        assert_eq!(a, b, "REPEATABLE READ scan changed");
                    }
                }
            }
        }
        match aborted {
            Some(a) => {
                match a {
                    Abort::Serialization => self.tally.serialization_failures += 1,
                    Abort::Deadlock => self.tally.deadlocks += 1,
                }
                tx.rollback().unwrap();
                self.tally.rollbacks += 1;
            }
            None if self.rng.gen_bool(0.2) => {
                tx.rollback().unwrap();
                self.tally.rollbacks += 1;
            }
            None => {
                // Hold the oracle lock across the commit so the oracle never lags a commit
                // another thread could already observe.
                let mut oracle = self.oracle.lock().unwrap();
                tx.commit().unwrap();
                for (k, d) in &p.deltas {
                    *oracle.get_mut(k).expect("counter") += d;
                }
                for (k, change) in &p.private {
                    match change {
                        Some((tid, v)) => {
                            oracle.insert(*k, *v);
                            self.mine.insert(*k, (*tid, *v));
                        }
                        None => {
                            oracle.remove(k);
                            self.mine.remove(k);
                        }
                    }
                }
                self.tally.commits += 1;
            }
        }
    }
}

fn workload(db: &Database, oracle: &Mutex<Rows>) -> Tally {
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                s.spawn(move || {
                    let lo = (i as i32 + 1) * 1_000_000;
                    let mut w = Worker {
                        db,
                        oracle,
                        rng: StdRng::seed_from_u64(SEED + i as u64),
                        mine: BTreeMap::new(),
                        next_key: lo,
                        tally: Tally::default(),
                    };
                    for _ in 0..TXNS_PER_THREAD {
                        w.transaction(lo);
                    }
                    w.tally
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("worker panicked")).collect()
    });
    let mut sum = Tally::default();
    for t in tallies {
        sum.commits += t.commits;
        sum.rollbacks += t.rollbacks;
        sum.savepoints += t.savepoints;
        sum.rollbacks_to_savepoint += t.rollbacks_to_savepoint;
        sum.serialization_failures += t.serialization_failures;
        sum.deadlocks += t.deadlocks;
        sum.stale_tids += t.stale_tids;
    }
    sum
}

#[test]
fn concurrent_transactions_match_the_oracle_across_restart_and_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let db = Database::open(&path, config()).unwrap();
    let t = db.create_table("kv", schema(), TableOptions { fillfactor: 90, ..TableOptions::default() }).unwrap();
    let oracle = Mutex::new(Rows::new());
    {
        let mut tx = db.begin().unwrap();
        for c in 0..COUNTERS {
            tx.insert(&t, &[Value::Int4(c), Value::Int8(0)]).unwrap();
            oracle.lock().unwrap().insert(c, 0);
        }
        tx.commit().unwrap();
    }

    let tally = workload(&db, &oracle);
    eprintln!("{tally:?}");
    assert!(tally.commits > 0);
    assert!(tally.savepoints > 0 && tally.rollbacks_to_savepoint > 0, "{tally:?}");
    let expected = oracle.into_inner().unwrap();
    assert_eq!(contents(&db), expected, "after the workload");
    assert_check_clean(&db, "after the workload");
    let counters: i64 = (0..COUNTERS).map(|c| expected[&c]).sum();
    assert!(counters > 0, "no increment committed");

    db.close().unwrap();
    let db = Database::open(&path, config()).unwrap();
    assert_eq!(contents(&db), expected, "after a clean restart");

    // A transaction in progress at the crash, its WAL flushed by a later commit: not visible.
    let t = db.table("kv").unwrap();
    let mut tx = db.begin().unwrap();
    let counter0 = scan(&mut tx, &db).unwrap()[&0].0;
    tx.update(&t, counter0, &[Value::Int4(0), Value::Int8(-1)]).unwrap();
    tx.insert(&t, &[Value::Int4(-1), Value::Int8(-1)]).unwrap();
    let mut other = db.begin().unwrap();
    other.insert(&t, &[Value::Int4(-2), Value::Int8(-2)]).unwrap();
    other.commit().unwrap();
    std::mem::forget(tx);
    let mut expected = expected;
    expected.insert(-2, -2);
    db.abandon();
    let db = Database::open(&path, config()).unwrap();
    assert_eq!(contents(&db), expected, "after a crash");
    assert_check_clean(&db, "after a crash");
    db.close().unwrap();
}
