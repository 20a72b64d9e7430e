//! A benchmark of B-tree bulk delete alone, single-threaded and parallel (run by
//! `examples/btree_vacuum.rs`; not a test: it prints figures).
//!
//! It builds the index `settle bench vacuum` vacuums, without the table: `pgbench_accounts_pkey`
//! at scale S (100,000·S entries of an int4 key, 61 heap tuples per heap page as in a
//! pgbench_accounts heap), then one new entry for every key with `aid % 20 = 7` pointing past the
//! original heap (the non-HOT updates' new versions, inserted in key order, which splits leaves
//! as the real update does), a CHECKPOINT (so the bulk delete logs a full-page image of every
//! leaf it changes, as after the real CHECKPOINT), and a dead-TID store holding the old versions'
//! TIDs. Then it times the bulk delete with the callback VACUUM uses (the store's batched
//! `contains_many`, the TIDs converted on the way), by 1..n threads, each run on a fresh copy
//! of the index, followed by the index's cleanup. One worker goes through
//! [`IndexAm::bulk_delete`], as VACUUM does; more share one [`crate::btree::vacuum::BulkDelete`].
//!
//! With [`Answer::Bitmap`] the callback reads one bit per TID from a dense bitmap instead, the
//! cheapest possible answer: the time left is the B-tree's own. [`Answer::BlockRuns`] shows what
//! a store could gain from the order of a leaf's TIDs (mostly by heap block for a key that grows
//! with the table): it looks a block up once per run of TIDs on that block (in a hash map made
//! from the store's pages) and checks the run's offsets against that block's dead offsets.

use std::path::Path;
use std::time::Instant;

use tidstore::{DeadTids, TidStore};

use crate::btree::BtreeIndex;
use crate::db::Database;
use crate::error::Result;
use crate::heap::tuple::{Type, Value};
use crate::index::{BulkDeleteStats, IndexAm};
use crate::types::{BlockNumber, Fork, Oid, Tid};
use crate::Config;

/// Heap tuples per pgbench_accounts page.
const ROWS_PER_PAGE: u32 = 61;

/// What answers the dead-TID callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// VACUUM's dead-TID store.
    TidStore,
    /// A dense bitmap, one bit per (block, offset) pair.
    Bitmap,
    /// The store's pages in a hash map, looked up once per run of TIDs on one block.
    BlockRuns,
}

/// The dead TIDs in both forms.
struct Dead {
    store: TidStore,
    bitmap: Vec<u64>,
    pages: rustc_hash::FxHashMap<u32, Vec<u16>>,
}

impl Dead {
    fn bit(t: Tid) -> usize {
        t.block.0 as usize * 64 + usize::from(t.offset.0)
    }

    fn bitmap_has(&self, t: Tid) -> bool {
        let b = Dead::bit(t);
        self.bitmap.get(b / 64).is_some_and(|w| w >> (b % 64) & 1 == 1)
    }
}

/// One timed bulk delete.
#[derive(Clone, Debug)]
pub struct Run {
    pub workers: usize,
    pub seconds: f64,
    /// CPU time of the workers (user + system), summed.
    pub cpu_seconds: f64,
    pub wal_bytes: u64,
    pub stats: BulkDeleteStats,
}

/// The settings of `settle bench vacuum` (for both engines there, before its `--set`).
pub const SETTINGS: &[(&str, &str)] = &[
    ("shared_buffers", "1GB"),
    ("fsync", "off"),
    ("autovacuum", "off"),
    ("full_page_writes", "on"),
    ("max_wal_size", "20GB"),
    ("checkpoint_timeout", "1h"),
];

/// [`SETTINGS`] as a configuration.
pub fn config() -> Result<Config> {
    Config::from_pairs(SETTINGS.iter().copied())
}

/// Opens a database in `dir` and runs `runs` rounds; each round times one bulk delete by each
/// worker count in `workers`, on an index built afresh.
pub fn run(dir: &Path, scale: u32, workers: &[usize], runs: usize, answer: Answer) -> Result<Vec<Run>> {
    let db = Database::open(dir, config()?)?;
    let rows = scale * 100_000;
    let heap_pages = rows.div_ceil(ROWS_PER_PAGE);
    let tid = |aid: u32| Tid::new((aid - 1) / ROWS_PER_PAGE, ((aid - 1) % ROWS_PER_PAGE + 1) as u16);
    let mut dead =
        Dead { store: TidStore::new(256 << 20), bitmap: vec![0; heap_pages as usize + 1], pages: Default::default() };
    let mut page: Vec<u16> = Vec::new();
    let mut block = 0;
    for aid in (1..=rows).filter(|a| a % 20 == 7) {
        let t = tid(aid);
        dead.bitmap[Dead::bit(t) / 64] |= 1 << (Dead::bit(t) % 64);
        if t.block.0 != block && !page.is_empty() {
            let _ = dead.store.add_page(block, &page);
            page.clear();
        }
        block = t.block.0;
        page.push(t.offset.0);
    }
    let _ = dead.store.add_page(block, &page);
    dead.store.freeze();
    dead.pages = dead.store.iter().map(|(b, offs)| (b, offs.as_slice().to_vec())).collect();
    let mut out = Vec::new();
    let mut rel = 900_000u32;
    for _ in 0..runs {
        for &n in workers {
            rel += 1;
            let ix = build(&db, rel, rows, heap_pages, &tid)?;
            out.push(time_bulk_delete(&db, &ix, &dead, answer, n)?);
            let env = db.inner().env();
            env.pool.drop_relation_buffers(Oid(rel), None, BlockNumber(0))?;
            env.pool.smgr().unlink(Oid(rel))?;
        }
    }
    db.close()?;
    Ok(out)
}

/// The primary key after the updates, checkpointed.
fn build(db: &Database, rel: u32, rows: u32, heap_pages: u32, tid: &dyn Fn(u32) -> Tid) -> Result<BtreeIndex> {
    let env = db.inner().env();
    env.pool.smgr().create(Oid(rel), Fork::Main)?;
    let ix = BtreeIndex::new(Oid(rel), "pgbench_accounts_pkey", Oid(rel), vec![Type::Int4], true);
    ix.create_empty(&env)?;
    ix.build(&env, (1..=rows).map(|a| (vec![Value::Int4(a as i32)], tid(a))).collect())?;
    for (i, aid) in (1..=rows).filter(|a| a % 20 == 7).enumerate() {
        let new = Tid::new(heap_pages + i as u32 / ROWS_PER_PAGE, (i as u32 % ROWS_PER_PAGE + 1) as u16);
        ix.insert(&env, &[Value::Int4(aid as i32)], new, None)?;
    }
    db.checkpoint()?;
    Ok(ix)
}

fn time_bulk_delete(db: &Database, ix: &BtreeIndex, dead: &Dead, answer: Answer, workers: usize) -> Result<Run> {
    let env = db.inner().env();
    let wal0 = env.wal.insert_lsn();
    let mut stats = BulkDeleteStats::default();
    let start = Instant::now();
    let cpu_seconds = if workers <= 1 {
        let cpu0 = cpu_seconds();
        let (mut probe, mut bits) = (Vec::new(), Vec::new());
        ix.bulk_delete(&env, &mut |tids, out| callback(dead, answer, &mut probe, &mut bits, tids, out), &mut stats)?;
        ix.cleanup(&env, &mut stats, true)?;
        cpu_seconds() - cpu0
    } else {
        let scan = ix.begin_bulk_delete(&env)?;
        let results: Vec<Result<f64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    let (scan, env) = (&scan, db.inner().env());
                    s.spawn(move || {
                        // Each worker keeps its own buffers, as VACUUM's callback does.
                        let (mut probe, mut bits) = (Vec::new(), Vec::new());
                        let cpu0 = cpu_seconds();
                        scan.work(&env, &mut |tids, out| callback(dead, answer, &mut probe, &mut bits, tids, out))?;
                        Ok(cpu_seconds() - cpu0)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
        });
        let cpu = results.into_iter().sum::<Result<f64>>()?;
        let cpu0 = cpu_seconds();
        scan.finish(&env, &mut stats)?;
        ix.cleanup(&env, &mut stats, true)?;
        cpu + cpu_seconds() - cpu0
    };
    let seconds = start.elapsed().as_secs_f64();
    Ok(Run { workers, seconds, cpu_seconds, wal_bytes: env.wal.insert_lsn().0 - wal0.0, stats })
}

/// The dead-TID callback: VACUUM's (TIDs converted for the store, one batched lookup, bits back
/// to booleans), or the bitmap's.
fn callback(
    dead: &Dead,
    answer: Answer,
    probe: &mut Vec<tidstore::Tid>,
    bits: &mut Vec<u64>,
    tids: &[Tid],
    out: &mut [bool],
) {
    match answer {
        Answer::TidStore => {
            probe.clear();
            probe.extend(tids.iter().map(|t| tidstore::Tid::new(t.block.0, t.offset.0)));
            bits.clear();
            bits.resize(tids.len().div_ceil(64), 0u64);
            dead.store.contains_many(probe, bits);
            for (j, o) in out.iter_mut().enumerate() {
                *o = bits[j / 64] >> (j % 64) & 1 == 1;
            }
        }
        Answer::Bitmap => {
            for (t, o) in tids.iter().zip(out.iter_mut()) {
                *o = dead.bitmap_has(*t);
            }
        }
        Answer::BlockRuns => {
            let mut cur: Option<(u32, &[u16])> = None;
            for (t, o) in tids.iter().zip(out.iter_mut()) {
                let offs = match cur {
                    Some((b, offs)) if b == t.block.0 => offs,
                    _ => {
                        let offs = dead.pages.get(&t.block.0).map_or(&[][..], Vec::as_slice);
                        cur = Some((t.block.0, offs));
                        offs
                    }
                };
                *o = offs.contains(&t.offset.0);
            }
        }
    }
}

/// This thread's CPU time so far, user and system.
fn cpu_seconds() -> f64 {
    let (user, system) = crate::vacuum::report::thread_cpu();
    (user + system).as_secs_f64()
}
