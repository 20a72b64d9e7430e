//! Logical decoding across crashes: a slot's consumer ends with every acknowledged commit
//! exactly once, whatever dies when.
//!
//! * `a_stream_cut_by_a_crash_starts_again_from_its_beginning`: a large transaction is
//!   streamed while in progress (the session ends before its commit, so a subscriber drops
//!   those blocks), commits, and the next session dies in the middle of streaming it (the
//!   consumer fails, nothing is confirmed); the engine then crashes (power loss, unsynced
//!   writes lost). After recovery the stream starts again from the transaction's first change
//!   and the subscriber ends with each transaction once.
//! * `decoded_history_survives_crashes_mid_spill_and_mid_workload`: random cycles of work
//!   (small and large transactions, savepoints rolled back, rollbacks, a transaction left open
//!   at the crash) on the in-memory `FaultFs`, sessions on a spilling and a streaming slot,
//!   some failing midway, and a power cut, either in the middle of a session while it spills
//!   or between transactions; spill files are planted as a process killed mid-spill leaves
//!   them (a power cut takes them: they are never synced). After each recovery `check` is
//!   clean; at the end each slot's subscriber has applied exactly the acknowledged
//!   commits, in commit order.
//!
//! A `get` that fails returns nothing and confirms nothing, so the subscriber applies a
//! session's events only when it succeeded, and forgets streamed transactions left
//! unfinished at the end of each session (see `decoding_common`).

mod decoding_common;

use std::path::Path;
use std::sync::Arc;

use decoding_common::{Ev, Hist, Item, Recorder, Subscriber};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use settledb::db::DecodeLimits;
use settledb::io::fault::{CrashMode, FaultFs};
use settledb::io::FileSystem;
use settledb::{Column, Config, Database, Schema, TableOptions, Type, Value};

const DIR: &str = "/data";

fn config() -> Config {
    // Only the tests' own checkpoints run.
    Config::from_pairs([
        ("wal_segment_size", "1MB"),
        ("checkpoint_timeout", "1d"),
        ("max_wal_size", "1TB"),
        ("wal_writer_delay", "10s"),
        ("autovacuum", "off"),
        ("wal_level", "logical"),
        ("logical_decoding_work_mem", "64kB"),
        ("shared_buffers", "4MB"),
    ])
    .unwrap()
}

fn open(fs: &Arc<FaultFs>) -> Database {
    Database::open_with_fs(fs.clone(), Path::new(DIR), config()).unwrap()
}

fn row(i: i32) -> Vec<Value> {
    vec![Value::Int4(i), Value::Text(format!("row {i} {}", "z".repeat(i as usize % 40)))]
}

fn inserted(i: i32) -> Item {
    Item::Change { table: "t".into(), kind: "insert", old: None, new: Some(row(i)) }
}

fn create_table(db: &Database) {
    let schema = Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "val".into(), ty: Type::Text, nullable: true },
        ],
    };
    db.create_table("t", schema, TableOptions { primary_key: Some(vec!["id".into()]), ..Default::default() }).unwrap();
}

/// Commits a transaction inserting `ids`; returns its history entry.
fn commit(db: &Database, ids: impl Iterator<Item = i32>) -> Hist {
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    let mut items = Vec::new();
    for i in ids {
        tx.insert(&t, &row(i)).unwrap();
        items.push(inserted(i));
    }
    tx.commit().unwrap();
    Hist::Txn(items)
}

/// A `get` on `slot`; applied to `sub` only if it succeeded (the session's spills and streams
/// counted there too). Returns the events, or `None`.
fn get(db: &Database, slot: &str, streaming: bool, fail_at: Option<usize>, sub: &mut Subscriber) -> Option<Vec<Ev>> {
    let mut r = Recorder::new(streaming);
    r.fail_at = fail_at;
    match db.decode_slot_with(slot, DecodeLimits::default(), &mut r, true) {
        Ok(res) => {
            sub.apply(&r.events);
            sub.end_session();
            sub.spill_count += res.stats.spill_count;
            sub.stream_count += res.stats.stream_count;
            Some(r.events)
        }
        Err(e) => {
            assert!(fail_at.is_some(), "decoding failed: {e}");
            None
        }
    }
}

fn assert_check_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap_or_else(|e| panic!("{what}: check failed to run: {e}"));
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

#[test]
fn a_stream_cut_by_a_crash_starts_again_from_its_beginning() {
    let fs = FaultFs::new();
    let db = open(&fs);
    create_table(&db);
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    let mut sub = Subscriber::default();
    let mut want = vec![commit(&db, 0..3)];
    get(&db, "s", true, None, &mut sub).unwrap();

    // T: large, in progress across the first session, a savepoint rolled back inside it.
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    for i in 1000..3000 {
        tx.insert(&t, &row(i)).unwrap();
    }
    want.push(commit(&db, 10..13));
    tx.savepoint("a").unwrap();
    for i in 3000..3500 {
        tx.insert(&t, &row(i)).unwrap();
    }
    tx.rollback_to("a").unwrap();
    for i in 3500..4000 {
        tx.insert(&t, &row(i)).unwrap();
    }
    let top = tx.xid().unwrap();
    let first = get(&db, "s", true, None, &mut sub).unwrap();
    assert!(first.iter().any(|e| matches!(e, Ev::StreamStart(x) if *x == top)), "T was streamed in progress");
    assert!(!first.iter().any(|e| matches!(e, Ev::StreamCommit(_))));

    for i in 4000..6000 {
        tx.insert(&t, &row(i)).unwrap();
    }
    tx.commit().unwrap();
    want.push(Hist::Txn((1000..3000).chain(3500..6000).map(inserted).collect()));
    want.push(commit(&db, 20..23));
    // The next session dies while it streams T: nothing is confirmed.
    assert!(get(&db, "s", true, Some(300), &mut sub).is_none());

    let fs = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    let db = open(&fs);
    let last = get(&db, "s", true, None, &mut sub).unwrap();
    let first_streamed = last.iter().find_map(|e| match e {
        Ev::StreamItem { top: x, item, .. } if *x == top => Some(item.clone()),
        _ => None,
    });
    assert_eq!(first_streamed, Some(inserted(1000)), "T's stream starts again from its first change");
    assert!(last.iter().any(|e| matches!(e, Ev::StreamCommit(x) if *x == top)));
    assert_eq!(sub.take(), want, "every committed transaction once, in commit order");
    assert!(get(&db, "s", true, None, &mut sub).unwrap().is_empty(), "all consumed");
    assert_check_clean(&db, "after the crash");
    db.close().unwrap();
}

/// The workload's state across crashes.
struct Run {
    rng: StdRng,
    fs: Arc<FaultFs>,
    next_id: i32,
    history: Vec<Hist>,
    /// Per slot (spill, stream): its subscriber.
    subs: [Subscriber; 2],
    power_cuts: u32,
    /// Spill files planted as a dead process would leave them.
    stale_spill_files: usize,
    failed_sessions: u32,
}

const SLOTS: [(&str, bool); 2] = [("spill", false), ("stream", true)];

impl Run {
    fn ids(&mut self, n: i32) -> std::ops::Range<i32> {
        let r = self.next_id..self.next_id + n;
        self.next_id += n;
        r
    }

    /// One transaction: small or large, perhaps with a savepoint rolled back, committed or not.
    fn transaction(&mut self, db: &Database) {
        let t = db.table("t").unwrap();
        let mut tx = db.begin().unwrap();
        let n = if self.rng.gen_range(0..4) == 0 { self.rng.gen_range(1000..3000) } else { self.rng.gen_range(1..20) };
        let mut items = Vec::new();
        for i in self.ids(n) {
            tx.insert(&t, &row(i)).unwrap();
            items.push(inserted(i));
        }
        if self.rng.gen_bool(0.3) {
            tx.savepoint("s").unwrap();
            let n = self.rng.gen_range(1..600);
            for i in self.ids(n) {
                tx.insert(&t, &row(i)).unwrap();
            }
            tx.rollback_to("s").unwrap();
            for i in self.ids(3) {
                tx.insert(&t, &row(i)).unwrap();
                items.push(inserted(i));
            }
        }
        if self.rng.gen_bool(0.8) {
            tx.commit().unwrap();
            self.history.push(Hist::Txn(items));
        } else {
            tx.rollback().unwrap();
        }
    }

    fn session(&mut self, db: &Database) {
        let k = self.rng.gen_range(0..2);
        let (slot, streaming) = SLOTS[k];
        let fail_at = self.rng.gen_bool(0.4).then(|| self.rng.gen_range(0..200));
        if get(db, slot, streaming, fail_at, &mut self.subs[k]).is_none() {
            self.failed_sessions += 1;
        }
    }

    /// One cycle of work and sessions, ending in a crash; returns the recovered database.
    fn cycle(&mut self, db: Database) -> Database {
        for _ in 0..self.rng.gen_range(2..8) {
            self.transaction(&db);
            if self.rng.gen_bool(0.5) {
                self.session(&db);
            }
        }
        // Left open at the crash: none of it may ever be decoded.
        let t = db.table("t").unwrap();
        let mut open = db.begin().unwrap();
        let n = self.rng.gen_range(1..5000);
        for i in self.ids(n) {
            open.insert(&t, &row(i)).unwrap();
        }
        let crashed = if self.rng.gen_bool(0.7) {
            // The power fails in the middle of a peek: it is reading WAL and spilling (the open
            // transaction, when it is large).
            let k = self.rng.gen_range(0..2);
            let (slot, streaming) = SLOTS[k];
            // (The cut takes what the file system holds at that call; the session runs on.)
            self.fs.arm_power_cut(self.rng.gen_range(1..12), CrashMode::Random { seed: self.rng.gen() });
            let mut r = Recorder::new(streaming);
            db.decode_slot_with(slot, DecodeLimits::default(), &mut r, false).unwrap();
            self.fs.disarm_power_cut();
            match self.fs.take_power_cut() {
                Some(fs) => {
                    self.power_cuts += 1;
                    fs
                }
                None => self.fs.crash(CrashMode::LoseUnsynced),
            }
        } else {
            self.fs.crash(CrashMode::LoseUnsynced)
        };
        std::mem::forget(open);
        db.abandon();
        // Spill files are never synced, so a power cut takes them; a process killed mid-spill
        // leaves them (crates/cli/tests/decode_crash.rs does that for real). Here, planted
        // ones, with what a dead session might have left: the first segment it would write
        // again, and another.
        for (slot, _) in SLOTS {
            let dir = Path::new(DIR).join("pg_replslot").join(slot);
            for name in ["xid-spill.00000000", "xid-spill.00000007"] {
                let f = crashed.open(&dir.join(name), true).unwrap();
                let junk: Vec<u8> = (0..self.rng.gen_range(0..5000)).map(|_| self.rng.gen()).collect();
                f.write_at(&junk, 0).unwrap();
                self.stale_spill_files += 1;
            }
        }
        self.fs = crashed;
        let db = open_db(&self.fs);
        assert_check_clean(&db, "after a crash");
        db
    }
}

fn open_db(fs: &Arc<FaultFs>) -> Database {
    open(fs)
}

#[test]
fn decoded_history_survives_crashes_mid_spill_and_mid_workload() {
    let seed = std::env::var("SETTLEDB_MODEL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0xc4a5_4dec);
    eprintln!("seed {seed}");
    let fs = FaultFs::new();
    let db = open(&fs);
    create_table(&db);
    for (slot, _) in SLOTS {
        db.create_logical_replication_slot(slot, "test_decoding", false).unwrap();
    }
    let mut run = Run {
        // SETTLEDB_MODEL_SEED runs another seed (the coverage asserted below is the default's).
        rng: StdRng::seed_from_u64(seed),
        fs,
        next_id: 0,
        history: Vec::new(),
        subs: Default::default(),
        power_cuts: 0,
        stale_spill_files: 0,
        failed_sessions: 0,
    };
    let mut db = db;
    for _ in 0..10 {
        db = run.cycle(db);
    }
    for (k, (slot, streaming)) in SLOTS.into_iter().enumerate() {
        get(&db, slot, streaming, None, &mut run.subs[k]).unwrap();
        let got = run.subs[k].take();
        let want: Vec<Hist> =
            run.history.iter().filter(|h| !matches!(h, Hist::Txn(i) if i.is_empty())).cloned().collect();
        if got != want {
            let n = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
            panic!("slot {slot}: the history applied differs at transaction {n} of {} (got {})", want.len(), got.len());
        }
    }
    eprintln!(
        "power cuts mid-session {} (spill files planted {}), failed sessions {}",
        run.power_cuts, run.stale_spill_files, run.failed_sessions
    );
    let default_seed = std::env::var_os("SETTLEDB_MODEL_SEED").is_none();
    assert!(!default_seed || run.power_cuts > 0 && run.stale_spill_files > 0 && run.failed_sessions > 0);
    for (slot, _) in SLOTS {
        let left = run.fs.list(&Path::new(DIR).join("pg_replslot").join(slot)).unwrap();
        assert!(left.iter().all(|n| !n.starts_with("xid-spill")), "stale spill files are gone: {left:?}");
    }
    assert!(
        !default_seed || run.subs[0].spill_count > 0 && run.subs[1].stream_count > 0,
        "spilled {}, streamed {}",
        run.subs[0].spill_count,
        run.subs[1].stream_count
    );
    db.close().unwrap();
}
