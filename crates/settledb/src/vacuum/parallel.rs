//! Block-level parallel VACUUM (seed 003, "Block level parallel vacuum"): the leader and its
//! workers share phase I and phase III of one table, block by block, and phase II page by page
//! of each index; PostgreSQL 13+ shares only index vacuuming, one index per worker.
//!
//! # Phase I
//!
//! ```text
//!  chunks of CHUNK_PAGES pages, claimed in order from one counter
//!   ┌──────┬──────┬──────┬──────┬──────┬─────
//!   │  0 L │  1 W │  2 L │  3 W │  4 W │ ...     L leader, W a worker
//!   └──────┴──────┴──────┴──────┴──────┴─────
//!  finished chunks' LP_DEAD pages ──> `done` (by chunk) ──> the leader adds them to the
//!  dead-item store in block order (the store is built append-only, ascending)
//! ```
//!
//! Each thread runs phase I on its chunks with its own [`Worker`] (buffer ring, pinned map
//! page, scratch, counters); pages are independent, and the heap page → map page lock order
//! keeps two threads setting bits on one map page apart. After each of its chunks the leader
//! moves the finished prefix of chunks into the store. When the store is full the leader stops
//! the round: no thread claims another chunk, the ones in flight finish, and phases II and III
//! run for what the store holds (themselves in parallel); then the rest of the finished chunks
//! go in and a new round starts with the next unclaimed chunk. At most one chunk per thread is
//! ever held outside the store, so `maintenance_work_mem` stays the bound it is.
//!
//! Skipping by the visibility map works within a chunk (a run of all-visible pages is cut at
//! a chunk's end, so a skippable run straddling two chunks may be read); the page `rel_pages -
//! 1` is always read, as in the serial scan.
//!
//! # Phase II
//!
//! An index of at least `min_parallel_index_scan_size` is bulk-deleted by all the threads at
//! once: the B-tree hands out its pages in physical order (`btree::vacuum::BulkDelete`), and
//! each thread asks the dead-item store about its leaves with its own scratch buffers and cost
//! balance. Smaller indexes are done by the leader alone. (PostgreSQL gives each worker whole
//! indexes instead, which does nothing for a table with one big index.)
//!
//! # Phase III
//!
//! The pages in the store are cut into one contiguous share per thread, each claimed in
//! batches of [`PHASE3_BATCH`] pages from a counter of its own ([`Shares`]); each thread frees
//! the LP_DEAD items of its pages and sets their map bits, working through its own share
//! first and then helping with the others'. One map page covers some 32,000 heap pages, so
//! threads in different shares set bits on different map pages: with one counter for all they
//! worked side by side, each waiting for the other's exclusive lock on the same map page (in
//! a perf timeline of `settle bench vacuum` on two cores, 15% of phase III's CPU time idle).
//!
//! # How many workers
//!
//! As PostgreSQL sizes a parallel sequential scan (`compute_parallel_worker`): one worker for
//! a table of `min_parallel_table_scan_size`, one more each time the table is three times
//! larger, at most `max_parallel_maintenance_workers`; and since a thread beyond the
//! machine's cores would only take turns with the others, the leader and its workers together
//! do not outnumber them. `VACUUM (PARALLEL n)` asks for `n` (0: none), capped by
//! `max_parallel_maintenance_workers` only, as in PostgreSQL. Never more threads than chunks.
//! Autovacuum runs without workers, as in PostgreSQL. With a cost delay, each of the threads counts against a
//! limit divided by their number, so that together they stay within `vacuum_cost_limit`.
//!
//! Counters, buffer usage, WAL and CPU of the workers are added to the leader's, so VACUUM
//! VERBOSE reports the whole vacuum. A worker's error stops the others and is the vacuum's.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tidstore::DeadTids;

use crate::btree::BtreeIndex;
use crate::config::Config;
use crate::error::Result;
use crate::types::Tid;

use super::reap::{probe_batch, ProbeScratch, Seen};
use super::scan::{Ctx, DeadPage, ScanCounts, SkipRule, Usage, Worker};
use super::{CostDelay, LazyVacuum, VacuumParams, VacuumPhase, CHUNK_PAGES};

/// Phase III hands out the pages to free in batches of this many.
pub(super) const PHASE3_BATCH: usize = 64;

/// Phase III's pages cut into one contiguous share per thread, each with its own claim
/// counter (see the module doc).
struct Shares {
    /// Share `i` is `ends[i - 1]..ends[i]` (`0..ends[0]` for the first).
    ends: Vec<usize>,
    next: Vec<PaddedCounter>,
}

/// A claim counter on a cache line of its own, so that threads claiming from their own
/// shares do not bounce one line between them.
#[repr(align(128))]
struct PaddedCounter(AtomicUsize);

impl Shares {
    fn new(len: usize, threads: usize) -> Shares {
        let threads = threads.max(1);
        let ends: Vec<usize> = (1..=threads).map(|i| len * i / threads).collect();
        let next = (0..threads).map(|i| PaddedCounter(AtomicUsize::new(len * i / threads))).collect();
        Shares { ends, next }
    }

    /// The next batch for thread `me`: from its own share while it lasts, then from the
    /// others' in turn. `None` when every share is claimed.
    fn claim(&self, me: usize) -> Option<std::ops::Range<usize>> {
        let n = self.ends.len();
        (0..n).map(|k| (me + k) % n).find_map(|s| {
            let end = self.ends[s];
            let first = self.next[s].0.fetch_add(PHASE3_BATCH, Ordering::AcqRel);
            (first < end).then(|| first..(first + PHASE3_BATCH).min(end))
        })
    }
}

/// How many workers (beside the leader) VACUUM uses on a heap of `rel_pages` pages.
pub(super) fn heap_workers(config: &Config, params: &VacuumParams, rel_pages: u32) -> usize {
    if params.is_autovacuum {
        return 0;
    }
    let by_size = |threshold_pages: u64| {
        let mut n = 0usize;
        let mut threshold = threshold_pages.max(1);
        while u64::from(rel_pages) >= threshold && n < 1024 {
            n += 1;
            threshold = threshold.saturating_mul(3);
        }
        n
    };
    let cap = config.max_parallel_maintenance_workers as usize;
    let wanted = match params.parallel {
        Some(n) => (n as usize).min(cap),
        None => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            by_size(config.min_parallel_table_scan_size_bytes / crate::page::BLCKSZ as u64)
                .min(cap)
                .min(cores.saturating_sub(1))
        }
    };
    // No more threads than chunks.
    wanted.min(rel_pages.div_ceil(CHUNK_PAGES).saturating_sub(1) as usize)
}

/// What a worker thread hands back when it is done.
struct Outcome {
    counts: ScanCounts,
    usage: Usage,
    slept: Duration,
}

/// Phase I's shared state.
struct Round<'r> {
    next: &'r AtomicU32,
    nchunks: u32,
    /// Set when the store is full or a thread failed: claim no more chunks.
    stop: AtomicBool,
    /// Finished chunks not yet in the store, by chunk number.
    done: &'r Mutex<BTreeMap<u32, Vec<DeadPage>>>,
}

impl Round<'_> {
    fn claim(&self) -> Option<u32> {
        if self.stop.load(Ordering::Acquire) {
            return None;
        }
        let k = self.next.fetch_add(1, Ordering::AcqRel);
        (k < self.nchunks).then_some(k)
    }
}

/// Runs phase I on chunk `k` with `w`, returning the chunk's pages with LP_DEAD items.
fn scan_chunk(
    w: &mut Worker<'_>,
    ctx: &Ctx<'_>,
    skip: Option<SkipRule>,
    k: u32,
    rel_pages: u32,
) -> Result<Vec<DeadPage>> {
    let start = k * CHUNK_PAGES;
    let end = start.saturating_add(CHUNK_PAGES).min(rel_pages);
    let mut found = Vec::new();
    w.scan_range(ctx, skip, start, end, rel_pages, &mut |_, d| {
        found.push(d);
        Ok(())
    })?;
    Ok(found)
}

/// A worker thread's phase I: chunks until there are none or the round stops.
fn phase1_worker(
    ctx: &Ctx<'_>,
    round: &Round<'_>,
    skip: Option<SkipRule>,
    rel_pages: u32,
    cost: CostDelay,
) -> Result<Outcome> {
    let usage0 = Usage::now();
    let mut w = Worker::new(ctx.db, cost);
    let r = (|| {
        while let Some(k) = round.claim() {
            let found = scan_chunk(&mut w, ctx, skip, k, rel_pages)?;
            round.done.lock().insert(k, found);
        }
        w.flush_fsm(ctx)
    })();
    if r.is_err() {
        round.stop.store(true, Ordering::Release);
    }
    r?;
    w.vm_pin.clear();
    Ok(Outcome { counts: std::mem::take(&mut w.c), usage: Worker::usage_since(&usage0), slept: w.cost.slept })
}

/// A worker thread's phase III: batches of `pages` until none is left.
fn phase3_worker(
    ctx: &Ctx<'_>,
    pages: &[(u32, Vec<u16>)],
    phase1: &[Seen],
    (shares, me): (&Shares, usize),
    stop: &AtomicBool,
    cost: CostDelay,
) -> Result<Outcome> {
    let usage0 = Usage::now();
    let mut w = Worker::new(ctx.db, cost);
    let r = vacuum_batches(&mut w, ctx, pages, phase1, (shares, me), stop);
    if r.is_err() {
        stop.store(true, Ordering::Release);
    }
    r?;
    w.vm_pin.clear();
    Ok(Outcome { counts: std::mem::take(&mut w.c), usage: Worker::usage_since(&usage0), slept: w.cost.slept })
}

/// Frees the LP_DEAD items of the batches of `pages` that thread `me` claims from `shares`,
/// with `w`.
fn vacuum_batches(
    w: &mut Worker<'_>,
    ctx: &Ctx<'_>,
    pages: &[(u32, Vec<u16>)],
    phase1: &[Seen],
    (shares, me): (&Shares, usize),
    stop: &AtomicBool,
) -> Result<()> {
    while !stop.load(Ordering::Acquire) {
        let Some(batch) = shares.claim(me) else { break };
        for (b, offs) in &pages[batch] {
            let seen = phase1.binary_search_by_key(b, |e| e.block).ok().map(|i| phase1[i]);
            w.vacuum_page(ctx, *b, offs, seen)?;
        }
    }
    w.flush_fsm(ctx)
}

impl<'a> LazyVacuum<'a> {
    /// Adds a worker's share to the totals.
    fn absorb_outcome(&mut self, o: Outcome) {
        self.counts.merge(&o.counts);
        self.helpers.buffers = self.helpers.buffers.plus(o.usage.buffers);
        self.helpers.wal.records += o.usage.wal.records;
        self.helpers.wal.fpi += o.usage.wal.fpi;
        self.helpers.wal.bytes += o.usage.wal.bytes;
        self.helpers.wal_buffers_full += o.usage.wal_buffers_full;
        self.helpers.user_cpu += o.usage.user_cpu;
        self.helpers.system_cpu += o.usage.system_cpu;
        self.helpers_slept += o.slept;
    }

    /// Adds every worker's share that finished, whatever the others did; then the leader's
    /// error, else the first worker's, is the result.
    fn absorb_outcomes(&mut self, leader: Result<()>, outcomes: Vec<Result<Outcome>>) -> Result<()> {
        let mut first_error = leader.err();
        for o in outcomes {
            match o {
                Ok(o) => self.absorb_outcome(o),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Phase I with `nworkers` worker threads beside the leader (see the module doc).
    pub(super) fn scan_heap_parallel(&mut self, rel_pages: u32, nworkers: usize) -> Result<()> {
        let progress = self.progress.clone();
        let skip = self.skip_rule();
        let nchunks = rel_pages.div_ceil(CHUNK_PAGES);
        let next = AtomicU32::new(0);
        let done = Mutex::new(BTreeMap::new());
        let mut fed = 0u32;
        let threads = nworkers + 1;
        loop {
            let ctx = self.ctx(&progress);
            let round = Round { next: &next, nchunks, stop: AtomicBool::new(false), done: &done };
            let worker_cost = self.leader.cost.share(threads);
            let LazyVacuum { leader, dead, phase1, .. } = self;
            let (leader_result, outcomes) = std::thread::scope(|s| {
                let handles: Vec<_> = (0..nworkers)
                    .map(|_| {
                        let cost = worker_cost.clone();
                        let (ctx, round) = (&ctx, &round);
                        s.spawn(move || phase1_worker(ctx, round, skip, rel_pages, cost))
                    })
                    .collect();
                // The leader scans too, and after each chunk moves finished chunks into the
                // store, stopping the round when it is full.
                let mut lead = || -> Result<()> {
                    while let Some(k) = round.claim() {
                        let found = scan_chunk(leader, &ctx, skip, k, rel_pages)?;
                        done.lock().insert(k, found);
                        if !feed_in_order(&done, &mut fed, dead, phase1) {
                            round.stop.store(true, Ordering::Release);
                        }
                    }
                    Ok(())
                };
                let r = lead();
                if r.is_err() {
                    round.stop.store(true, Ordering::Release);
                }
                let outcomes: Vec<Result<Outcome>> =
                    handles.into_iter().map(|h| h.join().expect("a vacuum worker panicked")).collect();
                (r, outcomes)
            });
            self.absorb_outcomes(leader_result, outcomes)?;
            // Every claimed chunk is finished now: move them all into the store, running
            // phases II and III whenever it fills.
            loop {
                let all_in = feed_in_order(&done, &mut fed, &mut self.dead, &mut self.phase1);
                self.publish_store_size();
                if all_in {
                    break;
                }
                if self.dead.num_tids() == 0 {
                    return Err(crate::error::Error::invalid(format!(
                        "maintenance_work_mem ({} bytes) cannot hold the dead items of one heap page",
                        self.dead_budget
                    )));
                }
                self.leader.flush_fsm(&self.ctx(&progress))?;
                self.vacuum_cycle()?;
                self.progress.set_phase(VacuumPhase::ScanningHeap);
            }
            if next.load(Ordering::Acquire) >= nchunks {
                break;
            }
            self.check_failsafe();
        }
        self.leader.flush_fsm(&self.ctx(&progress))
    }

    /// Phase II on the `i`th index with `nworkers` worker threads beside the leader, all
    /// working on one physical-order scan of it (the B-tree hands out its pages); each asks
    /// the dead-item store with its own scratch and cost balance.
    pub(super) fn bulk_delete_parallel(&mut self, ix: &BtreeIndex, i: usize, nworkers: usize) -> Result<()> {
        let env = self.env;
        let scan = ix.begin_bulk_delete(&env)?;
        let worker_cost = self.leader.cost.share(nworkers + 1);
        let dead = &self.dead;
        let work = |cost: &mut CostDelay| {
            let mut scratch = ProbeScratch::default();
            scan.work(&env, &mut |tids: &[Tid], out: &mut [bool]| {
                probe_batch(dead, tids, out, &mut scratch);
                cost.delay();
            })
        };
        let (leader_result, outcomes) = std::thread::scope(|s| {
            let handles: Vec<_> = (0..nworkers)
                .map(|_| {
                    let mut cost = worker_cost.clone();
                    let work = &work;
                    s.spawn(move || -> Result<Outcome> {
                        let usage0 = Usage::now();
                        work(&mut cost)?;
                        Ok(Outcome {
                            counts: ScanCounts::default(),
                            usage: Worker::usage_since(&usage0),
                            slept: cost.slept,
                        })
                    })
                })
                .collect();
            let r = work(&mut self.leader.cost);
            let outcomes: Vec<Result<Outcome>> =
                handles.into_iter().map(|h| h.join().expect("a vacuum worker panicked")).collect();
            (r, outcomes)
        });
        self.absorb_outcomes(leader_result, outcomes)?;
        scan.finish(&env, &mut self.index_stats[i])
    }

    /// Phase III over `pages` with `nworkers` worker threads beside the leader.
    pub(super) fn vacuum_heap_parallel(&mut self, pages: &[(u32, Vec<u16>)], nworkers: usize) -> Result<()> {
        let progress = self.progress.clone();
        let ctx = self.ctx(&progress);
        let shares = Shares::new(pages.len(), nworkers + 1);
        let stop = AtomicBool::new(false);
        let worker_cost = self.leader.cost.share(nworkers + 1);
        let LazyVacuum { leader, phase1, .. } = self;
        let phase1: &[Seen] = phase1;
        let (leader_result, outcomes) = std::thread::scope(|s| {
            let handles: Vec<_> = (1..=nworkers)
                .map(|me| {
                    let cost = worker_cost.clone();
                    let (ctx, shares, stop) = (&ctx, &shares, &stop);
                    s.spawn(move || phase3_worker(ctx, pages, phase1, (shares, me), stop, cost))
                })
                .collect();
            let r = vacuum_batches(leader, &ctx, pages, phase1, (&shares, 0), &stop);
            if r.is_err() {
                stop.store(true, Ordering::Release);
            }
            let outcomes: Vec<Result<Outcome>> =
                handles.into_iter().map(|h| h.join().expect("a vacuum worker panicked")).collect();
            (r, outcomes)
        });
        self.absorb_outcomes(leader_result, outcomes)
    }
}

/// Moves the finished chunks that follow the ones already in the store (`fed` counts them)
/// into the store, page by page in block order. Returns false when the store filled up; the
/// page that did not fit and everything after it stay in `done`.
fn feed_in_order(
    done: &Mutex<BTreeMap<u32, Vec<DeadPage>>>,
    fed: &mut u32,
    dead: &mut tidstore::TidStore,
    phase1: &mut Vec<Seen>,
) -> bool {
    loop {
        let Some(mut pages) = done.lock().remove(fed) else { return true };
        let mut taken = 0;
        for d in &pages {
            if dead.add_page(d.block, &d.offsets).is_err() {
                break;
            }
            phase1.push(Seen { block: d.block, lsn: d.lsn, visible: d.visible, frozen: d.frozen });
            taken += 1;
        }
        if taken < pages.len() {
            pages.drain(..taken);
            done.lock().insert(*fed, pages);
            return false;
        }
        *fed += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claims batches for the threads in turn until none is left; returns each thread's.
    fn claim_all(shares: &Shares, threads: usize) -> Vec<Vec<std::ops::Range<usize>>> {
        let mut got = vec![Vec::new(); threads];
        let mut live = threads;
        while live > 0 {
            live = 0;
            for (me, mine) in got.iter_mut().enumerate() {
                if let Some(b) = shares.claim(me) {
                    mine.push(b);
                    live += 1;
                }
            }
        }
        got
    }

    #[test]
    fn phase3_shares_start_apart_and_cover_every_page_once() {
        let (len, threads) = (1000, 3);
        let shares = Shares::new(len, threads);
        let got = claim_all(&shares, threads);
        // Each thread starts at the head of its own share, far from the others.
        assert_eq!(got[0][0].start, 0);
        assert_eq!(got[1][0].start, 333);
        assert_eq!(got[2][0].start, 666);
        let mut seen = vec![0u32; len];
        for r in got.iter().flatten() {
            assert!(r.len() <= PHASE3_BATCH && !r.is_empty());
            for i in r.clone() {
                seen[i] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "every page claimed exactly once");
        // A thread that finishes its share helps with another's.
        let shares = Shares::new(len, threads);
        let mut mine = Vec::new();
        while let Some(b) = shares.claim(2) {
            mine.push(b);
        }
        assert_eq!(mine.iter().map(|r| r.len()).sum::<usize>(), len);
        assert_eq!(mine[0].start, 666, "its own share first");
    }

    #[test]
    fn phase3_shares_of_fewer_pages_than_threads() {
        for (len, threads) in [(0, 1), (0, 3), (2, 3), (1, 1)] {
            let shares = Shares::new(len, threads);
            let total: usize = claim_all(&shares, threads).iter().flatten().map(|r| r.len()).sum();
            assert_eq!(total, len, "{len} pages over {threads} threads");
        }
    }
}
