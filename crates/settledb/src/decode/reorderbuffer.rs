//! The reorder buffer (PostgreSQL's `reorderbuffer.c`, redesigned; seed 004): row changes
//! decoded from the WAL wait here, per top-level transaction, until their transaction commits,
//! and are handed over then in commit order.
//!
//! # Design, and where it departs from PostgreSQL
//!
//! - **One change stream per top-level transaction.** Under `wal_level = logical` every record
//!   of a subtransaction names its top-level XID, so a subtransaction's changes go inline into
//!   its top-level transaction's stream, tagged with their own XID. PostgreSQL keeps a change
//!   list per subtransaction and merges them by LSN at commit (a k-way merge through a binary
//!   heap); here the stream is already in LSN order and the only candidates for eviction are
//!   top-level transactions.
//! - **ROLLBACK TO truncates.** Statements of one transaction run one after another, so the
//!   changes of a subtransaction rolled back (and of its children) are a suffix of the stream.
//!   Its abort record carries the LSN where the savepoint began (`xact::records`), and the
//!   stream is cut at its first change at or after that LSN, in memory or inside the spilled
//!   part. Nothing is kept per subtransaction: a transaction with 100,000 savepoints costs
//!   what one with none costs.
//! - **Changes are encoded compactly** into chunks that double from 256 bytes to 64 kB:
//!   rows in their logged form (the heap record's bytes, 18 bytes shorter than a tuple), a
//!   header of a flags byte and varints, and the LSN, XID and relation left out when they are
//!   the previous change's in the same chunk (a multi-insert's rows: a 2-byte header). **The
//!   memory accounted is what is allocated**: chunk capacities, each transaction's structure and vectors, the XID
//!   map, the victim index and the spill write buffer. `logical_decoding_work_mem` bounds all
//!   of it (PostgreSQL counts neither its transaction structures nor allocator slack, and
//!   restores up to 4096 changes per subtransaction at once at commit).
//! - **The victim is the largest transaction** by memory of changes, found through an
//!   indexed max-heap (`crates/pqueue`): O(1) to find, O(log n) per size change. A
//!   transaction's accounted size changes only when it allocates a chunk, so the heap is
//!   touched once per chunk, not per change. The same index picks transactions to spill and to
//!   stream (PostgreSQL 17 and 18 scan every top-level transaction to pick one to stream).
//!   [`VictimIndex`] also offers a linear scan and the seed's adaptive scheme (a scan until
//!   many transactions are open), for `settle bench reorder` to compare.
//! - **Eviction goes down to a low-water mark** (half the limit by default), many victims per
//!   eviction, so a buffer at its limit does not evict on every change.
//! - **Spilled changes go to one append-only log per buffer** ([`spill`]) in large writes, and
//!   come back at commit one run (at most about 1 MB) at a time: replay memory is bounded.
//!   Each spill of a transaction adds a run entry; the short runs of a transaction spilled
//!   again and again are merged, so that the entries stay within an eighth of the limit.
//! - **Transactions known aborted are dropped**, not spilled or streamed, when an
//!   [`XidStatus`] oracle is given: checked when a transaction is first seen and when it is
//!   chosen as a victim.

mod spill;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;

use pqueue::{Handle, IndexedHeap};
use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::io::FileSystem;
use crate::types::{Lsn, Oid, Xid};
use spill::{RunLoc, SpillLog};

/// A spill run's header bytes (magic, XID, length, CRC-32C; see [`spill`]).
pub(crate) const SPILL_RUN_HEADER: usize = spill::RUN_HEADER;

/// What a change does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ChangeKind {
    Insert = 1,
    Update = 2,
    Delete = 3,
    /// A transactional logical message: `old` is its prefix, `new` its content.
    Message = 4,
    /// TRUNCATE: `old` its flags, `new` the relations' OIDs (u32 each).
    Truncate = 5,
}

impl ChangeKind {
    fn from_u8(b: u8) -> Option<ChangeKind> {
        Some(match b {
            1 => ChangeKind::Insert,
            2 => ChangeKind::Update,
            3 => ChangeKind::Delete,
            4 => ChangeKind::Message,
            5 => ChangeKind::Truncate,
            _ => return None,
        })
    }
}

/// One change, as queued and as handed back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change<'a> {
    /// Where its record starts.
    pub lsn: Lsn,
    /// The (sub)transaction that wrote it.
    pub xid: Xid,
    pub kind: ChangeKind,
    /// The relation changed (0 for messages and TRUNCATE).
    pub rel: Oid,
    /// The old row or key (UPDATE, DELETE: a kind byte, then the tuple in its logged form,
    /// `heap::wal::encode_tuple`), a message's prefix, TRUNCATE's flags.
    pub old: &'a [u8],
    /// The new row (INSERT, UPDATE: the tuple in its logged form, as the heap record carries
    /// it), a message's content, TRUNCATE's relations.
    pub new: &'a [u8],
}

/// Where streamed transactions go (the output plugin's `stream_*` callbacks).
pub trait StreamSink {
    fn stream_start(&mut self, top: Xid, first_lsn: Lsn) -> Result<()>;
    fn stream_change(&mut self, top: Xid, change: &Change<'_>) -> Result<()>;
    fn stream_stop(&mut self, top: Xid) -> Result<()>;
    /// `sub` (or the whole transaction, when `sub == top`) rolled back after some of its
    /// changes were streamed.
    fn stream_abort(&mut self, top: Xid, sub: Xid) -> Result<()>;
}

/// A sink for buffers that never stream.
pub struct NoStreaming;

impl StreamSink for NoStreaming {
    fn stream_start(&mut self, _: Xid, _: Lsn) -> Result<()> {
        Err(Error::invalid("streaming is off"))
    }
    fn stream_change(&mut self, _: Xid, _: &Change<'_>) -> Result<()> {
        Err(Error::invalid("streaming is off"))
    }
    fn stream_stop(&mut self, _: Xid) -> Result<()> {
        Err(Error::invalid("streaming is off"))
    }
    fn stream_abort(&mut self, _: Xid, _: Xid) -> Result<()> {
        Err(Error::invalid("streaming is off"))
    }
}

/// Whether a transaction is known to have rolled back (the CLOG, for a decoder that lags).
pub trait XidStatus: Send + Sync {
    fn is_aborted(&self, xid: Xid) -> bool;
}

/// How the victim of an eviction is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VictimIndex {
    /// An indexed max-heap, always maintained.
    Heap,
    /// A scan of every transaction at each pick (PostgreSQL 13–16's way).
    Scan,
    /// A scan while fewer than `threshold` transactions are open, the heap beyond (the seed's
    /// proposal: no heap maintenance while a scan is cheap).
    Adaptive { threshold: usize },
}

/// The buffer's settings.
#[derive(Clone, Debug)]
pub struct ReorderBufferConfig {
    /// `logical_decoding_work_mem`: the bound on the buffer's accounted memory.
    pub memory_limit: usize,
    /// Eviction stops once memory is at most this fraction of the limit.
    pub low_water: f64,
    /// Size of a spill segment file.
    pub spill_segment_size: u64,
    pub victim_index: VictimIndex,
}

impl Default for ReorderBufferConfig {
    fn default() -> Self {
        ReorderBufferConfig {
            memory_limit: 64 << 20,
            low_water: 0.5,
            spill_segment_size: 64 << 20,
            victim_index: VictimIndex::Heap,
        }
    }
}

/// `pg_stat_replication_slots`' counters, and the buffer's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorderStats {
    /// Transactions spilled at least once, spill events (a transaction spilled once per
    /// eviction that chose it), bytes of changes spilled.
    pub spill_txns: u64,
    pub spill_count: u64,
    pub spill_bytes: u64,
    pub stream_txns: u64,
    pub stream_count: u64,
    pub stream_bytes: u64,
    /// Transactions handed over at commit (streamed ones included) and their change bytes.
    pub total_txns: u64,
    pub total_bytes: u64,
    /// Evictions (each frees memory down to the low-water mark), transactions dropped as
    /// known aborted, spill files created, the peak of accounted memory.
    pub evictions: u64,
    pub aborted_dropped: u64,
    pub spill_files: u64,
    pub peak_memory: u64,
    /// Short spill runs merged into longer ones ([`ReorderBuffer::compact_runs`]).
    pub runs_merged: u64,
}

/// Short runs a transaction gathers before they are merged ([`ReorderBuffer::compact_runs`]).
const MERGE_AT: usize = 8;

const MIN_CHUNK: usize = 256;
const MAX_CHUNK: usize = 64 << 10;

/// Spilled runs are cut at about this many bytes (whole chunks; replay reads one at a time),
/// and the spill write buffer is flushed at it: a quarter of the limit, within [4 kB, 1 MB].
fn run_target(limit: usize) -> usize {
    (limit / 4).clamp(4 << 10, 1 << 20)
}

/// A piece of the stream on disk: the stream position it starts at, the LSN of its first
/// change, its location, and how many of its bytes are still live (fewer than its length when
/// ROLLBACK TO cut into it).
#[derive(Clone, Copy, Debug)]
struct Run {
    start: u64,
    first_lsn: Lsn,
    loc: RunLoc,
    live: u32,
}

/// One top-level transaction.
struct Txn {
    top: Xid,
    first_lsn: Lsn,
    last_lsn: Lsn,
    /// The in-memory tail of the stream, from position `mem_start` to `len`, and the LSN of
    /// each chunk's first change.
    chunks: Vec<Vec<u8>>,
    chunk_lsns: Vec<Lsn>,
    mem_start: u64,
    len: u64,
    /// Bytes of chunk capacity (what the victim index is keyed by).
    chunk_bytes: usize,
    /// The spilled part of the stream before `mem_start`, in order (streaming empties it).
    runs: Vec<Run>,
    /// Subtransactions rolled back by abort records without a savepoint LSN: their changes
    /// are skipped at replay instead of cut.
    aborted_subs: Vec<Xid>,
    heap: Option<Handle>,
    /// `runs.capacity()` when last accounted (the buffer's `run_slots` sums them).
    runs_counted: usize,
    /// The LSN, XID and relation of the last change in the last chunk (what the next change
    /// may share; `None` when the next change starts a chunk or follows a cut).
    prev: Option<(Lsn, Xid, Oid)>,
    /// Its accounted structure bytes (the struct and its vectors, but not chunks).
    fixed: usize,
    spilled: bool,
    /// The LSN of the last change streamed (INVALID: never streamed).
    streamed_lsn: Lsn,
    /// Change bytes streamed so far (counted into `total_bytes` at commit).
    streamed_bytes: u64,
    aborted: bool,
}

impl Txn {
    fn fixed_bytes(&self) -> usize {
        std::mem::size_of::<Txn>()
            + self.chunks.capacity() * std::mem::size_of::<Vec<u8>>()
            + self.chunk_lsns.capacity() * std::mem::size_of::<Lsn>()
            + self.runs.capacity() * std::mem::size_of::<Run>()
            + self.aborted_subs.capacity() * std::mem::size_of::<Xid>()
    }

    /// Bytes of live changes (in memory and spilled).
    fn live_bytes(&self) -> u64 {
        self.len - self.mem_start + self.runs.iter().map(|r| u64::from(r.live)).sum::<u64>()
    }

    fn streamed(&self) -> bool {
        self.streamed_lsn != Lsn::INVALID
    }
}

/// The reorder buffer of one decoding session (one slot).
pub struct ReorderBuffer {
    cfg: ReorderBufferConfig,
    /// Boxed, so that growing the slab moves (and doubles) pointers, not structures.
    txns: Vec<Option<Box<Txn>>>,
    free: Vec<u32>,
    open: usize,
    /// Top-level XIDs to their transaction's index.
    by_xid: FxHashMap<Xid, u32>,
    heap: IndexedHeap<usize, u32>,
    heap_on: bool,
    /// Sum of chunk capacities, and of everything else accounted.
    chunk_bytes: usize,
    fixed_bytes: usize,
    /// The sum of the live transactions' `fixed`.
    txn_fixed: usize,
    /// Run entries allocated over all transactions (what [`ReorderBuffer::compact_runs`]
    /// keeps within an eighth of the limit).
    run_slots: usize,
    spill: SpillLog,
    run_target: usize,
    status: Option<Arc<dyn XidStatus>>,
    streaming: bool,
    stats: ReorderStats,
}

impl ReorderBuffer {
    /// A buffer spilling into `spill_dir` (created; spill files left there by an earlier
    /// process are removed).
    pub fn new(cfg: ReorderBufferConfig, fs: Arc<dyn FileSystem>, spill_dir: &Path) -> Result<ReorderBuffer> {
        let run_target = run_target(cfg.memory_limit);
        let spill = SpillLog::open(fs, spill_dir, cfg.spill_segment_size, run_target)?;
        let heap_on = matches!(cfg.victim_index, VictimIndex::Heap);
        let mut rb = ReorderBuffer {
            cfg,
            txns: Vec::new(),
            free: Vec::new(),
            open: 0,
            by_xid: FxHashMap::default(),
            heap: IndexedHeap::new_max(),
            heap_on,
            chunk_bytes: 0,
            fixed_bytes: 0,
            txn_fixed: 0,
            run_slots: 0,
            spill,
            run_target,
            status: None,
            streaming: false,
            stats: ReorderStats::default(),
        };
        rb.recount_fixed();
        Ok(rb)
    }

    /// Gives the buffer a way to know aborted transactions.
    pub fn set_xid_status(&mut self, status: Arc<dyn XidStatus>) {
        self.status = Some(status);
    }

    /// Streams instead of spilling when evicting (the plugin asked for streaming and the
    /// decoder's snapshot is consistent).
    pub fn set_streaming(&mut self, on: bool) {
        self.streaming = on;
    }

    pub fn stats(&self) -> ReorderStats {
        self.stats
    }

    /// Writes the spill log's buffered runs to their segment file (the fuzz target
    /// `spill_file` replaces a segment's bytes once everything is on disk).
    pub(crate) fn flush_spill(&mut self) -> Result<()> {
        self.spill.flush()
    }

    /// Accounted bytes now.
    pub fn memory(&self) -> usize {
        self.chunk_bytes + self.fixed_bytes
    }

    /// Open (not yet committed or aborted) top-level transactions.
    pub fn open_transactions(&self) -> usize {
        self.open
    }

    /// Spill segment files that exist now.
    pub fn spill_files(&self) -> usize {
        self.spill.live_files()
    }

    /// The oldest first LSN of the open transactions (what the slot's `restart_lsn` may not
    /// pass).
    pub fn oldest_first_lsn(&self) -> Option<Lsn> {
        self.txns.iter().flatten().map(|t| t.first_lsn).min()
    }

    /// Whether some of `top`'s changes were streamed (its commit is then a stream commit).
    pub fn is_streamed(&self, top: Xid) -> bool {
        self.by_xid.get(&top).is_some_and(|&i| self.txn(i).streamed())
    }

    /// Whether top-level transaction `top` has queued changes.
    pub fn has_transaction(&self, top: Xid) -> bool {
        self.by_xid.contains_key(&top)
    }

    fn recount_fixed(&mut self) {
        self.fixed_bytes = std::mem::size_of::<ReorderBuffer>()
            + self.txns.capacity() * std::mem::size_of::<Option<Box<Txn>>>()
            + self.free.capacity() * 4
            + self.by_xid.capacity() * (std::mem::size_of::<(Xid, u32)>() + 1)
            + self.heap.allocated_bytes()
            + self.spill.allocated_bytes()
            + self.txn_fixed;
        self.note_peak();
    }

    fn note_peak(&mut self) {
        self.stats.peak_memory = self.stats.peak_memory.max(self.memory() as u64);
    }

    fn txn(&self, i: u32) -> &Txn {
        self.txns[i as usize].as_ref().expect("a live transaction index")
    }

    fn txn_mut(&mut self, i: u32) -> &mut Txn {
        self.txns[i as usize].as_mut().expect("a live transaction index")
    }

    /// Re-accounts transaction `i`'s structure after its vectors changed.
    fn refix(&mut self, i: u32) {
        let t = self.txn_mut(i);
        let (old, new) = (t.fixed, t.fixed_bytes());
        let (old_runs, new_runs) = (t.runs_counted, t.runs.capacity());
        t.fixed = new;
        t.runs_counted = new_runs;
        self.fixed_bytes = self.fixed_bytes + new - old;
        self.txn_fixed = self.txn_fixed + new - old;
        self.run_slots = self.run_slots + new_runs - old_runs;
    }

    fn index_of(&mut self, top: Xid, lsn: Lsn) -> u32 {
        if let Some(&i) = self.by_xid.get(&top) {
            return i;
        }
        let aborted = self.status.as_ref().is_some_and(|s| s.is_aborted(top));
        let mut t = Txn {
            top,
            first_lsn: lsn,
            last_lsn: lsn,
            chunks: Vec::new(),
            chunk_lsns: Vec::new(),
            mem_start: 0,
            len: 0,
            chunk_bytes: 0,
            runs: Vec::new(),
            aborted_subs: Vec::new(),
            heap: None,
            runs_counted: 0,
            prev: None,
            fixed: 0,
            spilled: false,
            streamed_lsn: Lsn::INVALID,
            streamed_bytes: 0,
            aborted,
        };
        t.fixed = t.fixed_bytes();
        self.txn_fixed += t.fixed;
        if aborted {
            self.stats.aborted_dropped += 1;
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.txns[i as usize] = Some(Box::new(t));
                i
            }
            None => {
                self.txns.push(Some(Box::new(t)));
                (self.txns.len() - 1) as u32
            }
        };
        self.open += 1;
        self.by_xid.insert(top, i);
        if let VictimIndex::Adaptive { threshold } = self.cfg.victim_index {
            if !self.heap_on && self.open > threshold {
                self.build_heap();
            }
        }
        self.recount_fixed();
        i
    }

    fn build_heap(&mut self) {
        self.heap_on = true;
        let entries: Vec<(u32, usize)> = self
            .txns
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_ref().filter(|t| t.chunk_bytes > 0).map(|t| (i as u32, t.chunk_bytes)))
            .collect();
        for (i, bytes) in entries {
            let h = self.heap.push(bytes, i);
            self.txn_mut(i).heap = Some(h);
        }
    }

    fn drop_heap(&mut self) {
        self.heap_on = false;
        self.heap.clear();
        for t in self.txns.iter_mut().flatten() {
            t.heap = None;
        }
    }

    /// Keeps the victim index in step with transaction `i`'s chunk bytes.
    fn reindex(&mut self, i: u32) {
        if !self.heap_on {
            return;
        }
        let (bytes, h) = {
            let t = self.txn(i);
            (t.chunk_bytes, t.heap)
        };
        match (h, bytes) {
            (Some(h), 0) => {
                self.heap.remove(h);
                self.txn_mut(i).heap = None;
            }
            (Some(h), b) => {
                self.heap.update(h, b);
            }
            (None, 0) => {}
            (None, b) => {
                let h = self.heap.push(b, i);
                self.txn_mut(i).heap = Some(h);
            }
        }
    }

    /// Queues a change of top-level transaction `top` (written by `change.xid`, which is
    /// `top` or one of its subtransactions). Changes of one transaction must come in LSN
    /// order. Whatever the change needs allocated (a chunk, a new transaction's structure) is
    /// made room for first, by evicting down to the low-water mark, so that the accounted
    /// memory never passes the limit (unless one change alone is larger than what eviction
    /// can free).
    pub fn queue_change(&mut self, top: Xid, change: &Change<'_>, sink: &mut dyn StreamSink) -> Result<()> {
        let i = match self.by_xid.get(&top) {
            Some(&i) => i,
            None => {
                let need = self.new_txn_bytes();
                self.make_room_for(need, sink)?;
                self.index_of(top, change.lsn)
            }
        };
        if self.txn(i).aborted {
            return Ok(());
        }
        let need = chunk_needed(self.txn(i), change, self.max_chunk());
        if need > 0 {
            self.make_room_for(need, sink)?;
            if self.txn(i).aborted {
                return Ok(());
            }
        }
        let max_chunk = self.max_chunk();
        let grew = {
            let t = self.txn_mut(i);
            let grew = encode_change(t, change, max_chunk);
            t.last_lsn = t.last_lsn.max(change.lsn);
            grew
        };
        if grew > 0 {
            self.chunk_bytes += grew;
            self.refix(i);
            self.reindex(i);
            self.note_peak();
        }
        Ok(())
    }

    /// Chunks grow up to 64 kB, or a run's size under small limits.
    fn max_chunk(&self) -> usize {
        MAX_CHUNK.min(self.run_target)
    }

    /// Evicts when `need` more bytes would take the buffer past its limit.
    fn make_room_for(&mut self, need: usize, sink: &mut dyn StreamSink) -> Result<()> {
        if self.memory() + need > self.cfg.memory_limit {
            self.evict(sink)?;
        }
        Ok(())
    }

    /// What a new transaction adds: its structure, and the slab, XID map and victim index
    /// when they must grow for it.
    fn new_txn_bytes(&self) -> usize {
        let mut need = std::mem::size_of::<Txn>() + 64;
        if self.free.is_empty() && self.txns.len() == self.txns.capacity() {
            need += self.txns.capacity().max(4) * std::mem::size_of::<Option<Box<Txn>>>();
        }
        if self.by_xid.len() >= self.by_xid.capacity() {
            need += self.by_xid.capacity().max(4) * (std::mem::size_of::<(Xid, u32)>() + 1) * 2;
        }
        if self.heap_on {
            need += self.heap.allocated_bytes();
        }
        need
    }

    /// The largest transaction with changes in memory.
    fn victim(&self) -> Option<u32> {
        if self.heap_on {
            return self.heap.peek().map(|(_, _, &i)| i);
        }
        let mut best: Option<(usize, u32)> = None;
        for (i, t) in self.txns.iter().enumerate() {
            if let Some(t) = t {
                if t.chunk_bytes > 0 && best.is_none_or(|(b, _)| t.chunk_bytes > b) {
                    best = Some((t.chunk_bytes, i as u32));
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// Frees memory down to the low-water mark: the largest transactions first, each streamed
    /// (when streaming is on) or spilled, known-aborted ones dropped.
    fn evict(&mut self, sink: &mut dyn StreamSink) -> Result<()> {
        if self.victim().is_some() {
            // Counted when something is evicted: with more transactions open than their
            // structures leave room for, a new one finds nothing to evict.
            self.stats.evictions += 1;
        }
        let target = (self.cfg.memory_limit as f64 * self.cfg.low_water) as usize;
        let mut spilled = Vec::new();
        while self.memory() > target {
            let Some(i) = self.victim() else { break };
            let top = self.txn(i).top;
            if self.status.as_ref().is_some_and(|s| s.is_aborted(top)) {
                self.discard_changes(i)?;
                let t = self.txn_mut(i);
                if !t.aborted {
                    t.aborted = true;
                    self.stats.aborted_dropped += 1;
                }
                continue;
            }
            if self.streaming {
                self.stream(i, sink)?;
            } else {
                self.spill_txn(i)?;
                spilled.push(i);
            }
        }
        if let VictimIndex::Adaptive { threshold } = self.cfg.victim_index {
            // Back to scanning when few transactions are left (a tenth below, not to flap).
            if self.heap_on && self.open < threshold - threshold / 10 {
                self.drop_heap();
            }
        }
        self.recount_fixed();
        self.compact_runs(&spilled)
    }

    /// Keeps the run entries within an eighth of the limit. Each spill of a transaction adds
    /// a run, and a long transaction spilled many times in small pieces (many open at once
    /// under a small limit) would otherwise fill the limit with entries that cannot be
    /// evicted. A transaction just spilled that has [`MERGE_AT`] short runs (under a quarter
    /// of a run's target size) has them rewritten, in order, as runs of up to half the target
    /// size. A merged run that is still short holds at least `MERGE_AT` runs' bytes, so a
    /// byte is rewritten only a few times before it sits in a long run, which stays. The two
    /// buffers this takes (a short run read back, a merged run) fit beside the spill write
    /// buffer and a replay buffer.
    fn compact_runs(&mut self, spilled: &[u32]) -> Result<()> {
        let budget = self.cfg.memory_limit / 8;
        let short = self.run_target / 4;
        for &i in spilled {
            if self.run_slots * std::mem::size_of::<Run>() <= budget {
                break;
            }
            // Only those spilled just now are looked at: a scan of every transaction at each
            // eviction would cost O(n) with many open (100,000 prepared ones, say).
            if self.txn(i).runs.iter().filter(|r| (r.loc.len as usize) < short).nth(MERGE_AT - 1).is_some() {
                self.merge_short_runs(i)?;
            }
        }
        Ok(())
    }

    /// Rewrites transaction `i`'s consecutive short runs as runs of about `run_target / 2` bytes,
    /// through a read buffer and a merge buffer accounted while they live.
    fn merge_short_runs(&mut self, i: u32) -> Result<()> {
        let (short, target) = (self.run_target / 4, self.run_target / 2);
        let (top, runs) = {
            let t = self.txn_mut(i);
            (t.top, std::mem::take(&mut t.runs))
        };
        let mut merged: Vec<Run> = Vec::new();
        let mut read = Vec::with_capacity(short + spill::RUN_HEADER);
        let mut acc: Vec<u8> = Vec::with_capacity(target);
        let mut acc_head: Option<(u64, Lsn)> = None;
        let counted = read.capacity() + acc.capacity();
        self.fixed_bytes += counted;
        self.note_peak();
        let result = (|| {
            let mut released = Vec::new();
            for r in runs.iter().copied() {
                // Short by its length on disk, which is what the read buffer must hold.
                let long = r.loc.len as usize >= short;
                if long || acc.len() + r.live as usize > target {
                    if let Some((start, first_lsn)) = acc_head.take() {
                        let loc = self.spill.append(top, std::iter::once(acc.as_slice()), acc.len())?;
                        merged.push(Run { start, first_lsn, loc, live: loc.len });
                        acc.clear();
                    }
                }
                if long {
                    merged.push(r);
                    continue;
                }
                self.spill.read(top, r.loc, &mut read)?;
                acc.extend_from_slice(&read[..r.live as usize]);
                acc_head.get_or_insert((r.start, r.first_lsn));
                released.push(r.loc);
                self.stats.runs_merged += 1;
            }
            if let Some((start, first_lsn)) = acc_head.take() {
                let loc = self.spill.append(top, std::iter::once(acc.as_slice()), acc.len())?;
                merged.push(Run { start, first_lsn, loc, live: loc.len });
            }
            // The old runs go only once the merged ones are in the log (a segment is removed
            // when nothing refers to it).
            for loc in released {
                self.spill.release(loc)?;
            }
            Ok(())
        })();
        self.fixed_bytes -= counted;
        merged.shrink_to_fit();
        self.txn_mut(i).runs = merged;
        self.refix(i);
        result
    }

    /// Moves transaction `i`'s in-memory changes to the spill log, in runs of whole chunks.
    fn spill_txn(&mut self, i: u32) -> Result<()> {
        let (top, chunks, lsns, mut start) = {
            let t = self.txn_mut(i);
            (t.top, std::mem::take(&mut t.chunks), std::mem::take(&mut t.chunk_lsns), t.mem_start)
        };
        let mut runs = Vec::new();
        let mut k = 0;
        let mut bytes = 0u64;
        while k < chunks.len() {
            let mut end = k;
            let mut len = 0;
            while end < chunks.len() && (end == k || len + chunks[end].len() <= self.run_target) {
                len += chunks[end].len();
                end += 1;
            }
            if len > 0 {
                let loc = self.spill.append(top, chunks[k..end].iter().map(Vec::as_slice), len)?;
                runs.push(Run { start, first_lsn: lsns[k], loc, live: loc.len });
                start += len as u64;
                bytes += len as u64;
            }
            k = end;
        }
        let freed: usize = chunks.iter().map(Vec::capacity).sum();
        drop(chunks);
        self.chunk_bytes -= freed;
        let first = {
            let t = self.txn_mut(i);
            t.chunk_bytes = 0;
            t.mem_start = start;
            t.runs.reserve_exact(runs.len());
            t.runs.extend(runs);
            !std::mem::replace(&mut t.spilled, true)
        };
        self.stats.spill_count += 1;
        self.stats.spill_bytes += bytes;
        self.stats.spill_txns += u64::from(first);
        self.stats.spill_files = self.spill.files_created;
        self.refix(i);
        self.reindex(i);
        Ok(())
    }

    /// Streams transaction `i`'s changes so far (spilled ones first) and frees them.
    fn stream(&mut self, i: u32, sink: &mut dyn StreamSink) -> Result<()> {
        let (top, first_lsn, first_time, bytes, last) = {
            let t = self.txn(i);
            (t.top, t.first_lsn, !t.streamed(), t.live_bytes(), t.last_lsn)
        };
        sink.stream_start(top, first_lsn)?;
        let skip = self.txn(i).aborted_subs.clone();
        self.replay(i, &mut |c| if skip.contains(&c.xid) { Ok(()) } else { sink.stream_change(top, c) })?;
        sink.stream_stop(top)?;
        self.discard_changes(i)?;
        let t = self.txn_mut(i);
        t.streamed_lsn = last;
        t.streamed_bytes += bytes;
        self.stats.stream_count += 1;
        self.stats.stream_bytes += bytes;
        self.stats.stream_txns += u64::from(first_time);
        Ok(())
    }

    /// Frees every change of transaction `i` (in memory and spilled), keeping the
    /// transaction (its stream position stays where it was).
    fn discard_changes(&mut self, i: u32) -> Result<()> {
        let (chunks, runs) = {
            let t = self.txn_mut(i);
            let chunks = std::mem::take(&mut t.chunks);
            t.chunk_lsns.clear();
            let runs = std::mem::take(&mut t.runs);
            t.mem_start = t.len;
            t.chunk_bytes = 0;
            (chunks, runs)
        };
        self.chunk_bytes -= chunks.iter().map(Vec::capacity).sum::<usize>();
        for r in runs {
            self.spill.release(r.loc)?;
        }
        self.refix(i);
        self.reindex(i);
        Ok(())
    }

    /// Hands `f` every live change of transaction `i` in order: spilled runs (read one at a
    /// time into a buffer accounted while it lives), then the in-memory chunks.
    fn replay(&mut self, i: u32, f: &mut dyn FnMut(&Change<'_>) -> Result<()>) -> Result<()> {
        if !self.txn(i).runs.is_empty() {
            // Room for the replay buffer within the limit, made by spilling (this transaction's
            // in-memory tail too, if need be: it is then replayed from disk as well).
            let longest = self.txn(i).runs.iter().map(|r| r.loc.len as usize).max().unwrap_or(0);
            self.make_room(longest.max(self.run_target) + spill::RUN_HEADER)?;
        }
        let (top, base) = {
            let t = self.txn(i);
            (t.top, t.first_lsn)
        };
        let mut buf = Vec::new();
        let mut counted = 0;
        let result = (|| {
            for k in 0..self.txn(i).runs.len() {
                let r = self.txn(i).runs[k];
                self.spill.read(top, r.loc, &mut buf)?;
                self.fixed_bytes += buf.capacity() - counted;
                counted = buf.capacity();
                self.note_peak();
                let spill = &self.spill;
                let bad = |at: usize| spill.corrupt(r.loc, Some(at), "a malformed change");
                decode_changes(&buf[..r.live as usize], top, base, &bad, f)?;
            }
            for c in &self.txn(i).chunks {
                decode_changes(c, top, base, &|at| malformed(top, at), f)?;
            }
            Ok(())
        })();
        self.fixed_bytes -= counted;
        result
    }

    /// Spills the largest transactions until `need` more bytes fit within the limit (or
    /// nothing is left in memory).
    fn make_room(&mut self, need: usize) -> Result<()> {
        while self.memory() + need > self.cfg.memory_limit {
            let Some(v) = self.victim() else { break };
            self.spill_txn(v)?;
        }
        Ok(())
    }

    /// ROLLBACK TO: `subxids` (a subtransaction and those inside it) rolled back. With the
    /// savepoint's LSN (logical WAL always has it) the stream is cut at its first change at or
    /// after that LSN; without it, their changes are skipped at replay. When the transaction
    /// was streamed past that point, `sink` hears a stream abort for each of `subxids`.
    pub fn abort_subxacts(
        &mut self,
        top: Xid,
        subxids: &[Xid],
        savepoint_lsn: Option<Lsn>,
        sink: &mut dyn StreamSink,
    ) -> Result<()> {
        let Some(&i) = self.by_xid.get(&top) else {
            return Ok(());
        };
        let streamed_past = {
            let t = self.txn(i);
            t.streamed() && savepoint_lsn.is_none_or(|l| l <= t.streamed_lsn)
        };
        if streamed_past {
            for &x in subxids {
                sink.stream_abort(top, x)?;
            }
        }
        match savepoint_lsn {
            Some(lsn) => self.cut_at_lsn(i, lsn)?,
            None => {
                self.txn_mut(i).aborted_subs.extend_from_slice(subxids);
                self.refix(i);
            }
        }
        Ok(())
    }

    /// Cuts transaction `i`'s stream before its first change at or after `lsn`.
    fn cut_at_lsn(&mut self, i: u32, lsn: Lsn) -> Result<()> {
        let (top, base) = {
            let t = self.txn(i);
            if lsn > t.last_lsn || t.len == t.mem_start && t.runs.is_empty() {
                return Ok(());
            }
            (t.top, t.first_lsn)
        };
        // In memory: the first chunk starting at or after lsn, or inside the one before it.
        let at_mem = {
            let t = self.txn(i);
            let k = t.chunk_lsns.partition_point(|&l| l < lsn);
            let mut pos = t.mem_start + t.chunks[..k].iter().map(|c| c.len() as u64).sum::<u64>();
            if k > 0 {
                let prev = &t.chunks[k - 1];
                let from = pos - prev.len() as u64;
                if let Some(off) = first_at_or_after(prev, base, lsn, &|at| malformed(top, at))? {
                    pos = from + off as u64;
                }
            }
            pos
        };
        if at_mem > self.txn(i).mem_start || self.txn(i).runs.is_empty() {
            return self.truncate(i, at_mem);
        }
        // Into the spilled part: the last run starting before lsn may hold the cut.
        let runs = self.txn(i).runs.clone();
        let r = runs.iter().rposition(|r| r.first_lsn < lsn);
        let pos = match r {
            None => runs[0].start,
            Some(r) => {
                let run = runs[r];
                let need = run.loc.len as usize + spill::RUN_HEADER;
                self.make_room(need)?;
                let mut buf = Vec::new();
                self.spill.read(top, run.loc, &mut buf)?;
                self.fixed_bytes += buf.capacity();
                self.note_peak();
                self.fixed_bytes -= buf.capacity();
                let bad = |at: usize| self.spill.corrupt(run.loc, Some(at), "a malformed change");
                match first_at_or_after(&buf[..run.live as usize], base, lsn, &bad)? {
                    Some(off) => run.start + off as u64,
                    None => run.start + u64::from(run.live),
                }
            }
        };
        self.truncate(i, pos)
    }

    /// Cuts transaction `i`'s stream back to position `p` (a change boundary).
    fn truncate(&mut self, i: u32, p: u64) -> Result<()> {
        let mut freed = 0;
        let mut released = Vec::new();
        {
            let t = self.txn_mut(i);
            if p >= t.len {
                return Ok(());
            }
            if p >= t.mem_start {
                // Inside the in-memory tail: drop whole chunks past p, shorten the one holding it.
                let mut at = t.mem_start;
                let mut keep = 0;
                for c in &mut t.chunks {
                    if at >= p {
                        break;
                    }
                    let end = at + c.len() as u64;
                    keep += 1;
                    if end > p {
                        c.truncate((p - at) as usize);
                    }
                    at = end;
                }
                for c in t.chunks.drain(keep..) {
                    freed += c.capacity();
                }
                t.chunk_lsns.truncate(keep);
            } else {
                for c in t.chunks.drain(..) {
                    freed += c.capacity();
                }
                t.chunk_lsns.clear();
                t.mem_start = p;
                while let Some(r) = t.runs.last_mut() {
                    if r.start >= p {
                        released.push(t.runs.pop().expect("a run").loc);
                    } else {
                        r.live = r.live.min((p - r.start) as u32);
                        break;
                    }
                }
            }
            t.len = p;
            t.chunk_bytes -= freed;
            // The change before the cut may not be the one the next change was compared with.
            t.prev = None;
        }
        self.chunk_bytes -= freed;
        for loc in released {
            self.spill.release(loc)?;
        }
        self.refix(i);
        self.reindex(i);
        Ok(())
    }

    /// The transaction committed: hands `f` its changes in order (those of subtransactions
    /// rolled back without a savepoint LSN skipped), then forgets it. Returns whether it had
    /// been streamed: the caller then sends a stream commit rather than a whole transaction,
    /// and `f` got only what was not streamed yet.
    pub fn commit(&mut self, top: Xid, f: &mut dyn FnMut(&Change<'_>) -> Result<()>) -> Result<bool> {
        let Some(&i) = self.by_xid.get(&top) else {
            return Ok(false);
        };
        let (aborted, streamed, live, earlier) = {
            let t = self.txn(i);
            (t.aborted, t.streamed(), t.live_bytes(), t.streamed_bytes)
        };
        if !aborted {
            let skip = std::mem::take(&mut self.txn_mut(i).aborted_subs);
            let result = if skip.is_empty() {
                self.replay(i, f)
            } else {
                self.replay(i, &mut |c| if skip.contains(&c.xid) { Ok(()) } else { f(c) })
            };
            if let Err(e) = result {
                self.forget(i)?;
                return Err(e);
            }
            self.stats.total_txns += 1;
            self.stats.total_bytes += live + earlier;
            if streamed && live > 0 {
                // The rest went out as one more streamed block (PostgreSQL's
                // ReorderBufferStreamCommit counts it as a stream even when it is empty).
                self.stats.stream_count += 1;
                self.stats.stream_bytes += live;
            }
        }
        self.forget(i)?;
        Ok(streamed)
    }

    /// The transaction rolled back: forgets it. Returns whether it had been streamed (the
    /// caller then sends a stream abort).
    pub fn abort(&mut self, top: Xid) -> Result<bool> {
        let Some(&i) = self.by_xid.get(&top) else {
            return Ok(false);
        };
        let streamed = self.txn(i).streamed();
        self.forget(i)?;
        Ok(streamed)
    }

    fn forget(&mut self, i: u32) -> Result<()> {
        self.discard_changes(i)?;
        let t = self.txns[i as usize].take().expect("a live transaction");
        self.txn_fixed -= t.fixed;
        if let Some(h) = t.heap {
            self.heap.remove(h);
        }
        self.by_xid.remove(&t.top);
        self.free.push(i);
        self.open -= 1;
        if self.open == 0 && self.txns.len() > 1024 {
            // Give memory back after a burst.
            self.by_xid.shrink_to_fit();
            self.txns.clear();
            self.txns.shrink_to_fit();
            self.free.clear();
            self.free.shrink_to_fit();
        }
        self.recount_fixed();
        Ok(())
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn get_varint(d: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *d.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7F) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// A change's flags byte: its kind in the low bits, and which fields it shares with the change
/// before it in the same chunk (the rows of one multi-insert record share all three).
const KIND_MASK: u8 = 0x07;
const SAME_LSN: u8 = 0x08;
const SAME_XID: u8 = 0x10;
const SAME_REL: u8 = 0x20;
const HAS_OLD: u8 = 0x40;

/// Appends `c` to the stream of `t`: `varint body length`, then the body: `flags u8` (the
/// kind and the `SAME_*`/`HAS_OLD` bits), `varint LSN offset from the transaction's first
/// LSN` unless `SAME_LSN`, `varint XID offset from the top-level XID` unless `SAME_XID`,
/// `varint relation` unless `SAME_REL`, `varint old length` and the old bytes if `HAS_OLD`,
/// then the new bytes. A chunk's first change shares nothing, so any run of whole chunks
/// decodes on its own. Returns the chunk capacity it allocated (0 when the change fit the
/// last chunk).
fn encode_change(t: &mut Txn, c: &Change<'_>, max_chunk: usize) -> usize {
    let mut grew = 0;
    let mut e = encoded_len(t, t.prev, c);
    let fits = t.chunks.last().is_some_and(|ch| ch.capacity() - ch.len() >= e.total);
    if !fits {
        e = encoded_len(t, None, c);
        let cap = next_chunk(t, e.total, max_chunk);
        t.chunks.push(Vec::with_capacity(cap));
        t.chunk_lsns.push(c.lsn);
        grew = t.chunks.last().expect("just pushed").capacity();
        t.chunk_bytes += grew;
    }
    let out = t.chunks.last_mut().expect("a chunk");
    put_varint(out, e.body as u64);
    out.push(e.flags);
    if e.flags & SAME_LSN == 0 {
        put_varint(out, e.lsn_off);
    }
    if e.flags & SAME_XID == 0 {
        put_varint(out, e.xid_off);
    }
    if e.flags & SAME_REL == 0 {
        put_varint(out, u64::from(c.rel.0));
    }
    if e.flags & HAS_OLD != 0 {
        put_varint(out, c.old.len() as u64);
        out.extend_from_slice(c.old);
    }
    out.extend_from_slice(c.new);
    t.len += e.total as u64;
    t.prev = Some((c.lsn, c.xid, c.rel));
    grew
}

/// How [`encode_change`] writes a change after one with `prev`'s LSN, XID and relation.
struct Encoded {
    flags: u8,
    lsn_off: u64,
    xid_off: u64,
    body: usize,
    total: usize,
}

#[inline]
fn encoded_len(t: &Txn, prev: Option<(Lsn, Xid, Oid)>, c: &Change<'_>) -> Encoded {
    let lsn_off = c.lsn.0.saturating_sub(t.first_lsn.0);
    let xid_off = u64::from(c.xid.0.wrapping_sub(t.top.0));
    let mut flags = c.kind as u8;
    if let Some((lsn, xid, rel)) = prev {
        flags |= if lsn == c.lsn { SAME_LSN } else { 0 }
            | if xid == c.xid { SAME_XID } else { 0 }
            | if rel == c.rel { SAME_REL } else { 0 };
    }
    if !c.old.is_empty() {
        flags |= HAS_OLD;
    }
    let mut body = 1 + c.new.len();
    if flags & SAME_LSN == 0 {
        body += varint_len(lsn_off);
    }
    if flags & SAME_XID == 0 {
        body += varint_len(xid_off);
    }
    if flags & SAME_REL == 0 {
        body += varint_len(u64::from(c.rel.0));
    }
    if flags & HAS_OLD != 0 {
        body += varint_len(c.old.len() as u64) + c.old.len();
    }
    Encoded { flags, lsn_off, xid_off, body, total: varint_len(body as u64) + body }
}

/// The capacity of the chunk `t` would allocate next for `total` bytes: double the last.
fn next_chunk(t: &Txn, total: usize, max_chunk: usize) -> usize {
    let last = t.chunks.last().map_or(0, Vec::capacity);
    (last * 2).clamp(MIN_CHUNK, max_chunk.max(MIN_CHUNK)).max(total)
}

/// The chunk bytes queuing `c` would allocate (0 when it fits the last chunk).
fn chunk_needed(t: &Txn, c: &Change<'_>, max_chunk: usize) -> usize {
    let total = encoded_len(t, t.prev, c).total;
    if t.chunks.last().is_some_and(|c| c.capacity() - c.len() >= total) {
        0
    } else {
        // The chunk, and the doubling of the chunk and LSN vectors when they are full.
        let grow = if t.chunks.len() == t.chunks.capacity() {
            t.chunks.capacity().max(4) * (std::mem::size_of::<Vec<u8>>() + std::mem::size_of::<Lsn>())
        } else {
            0
        };
        next_chunk(t, encoded_len(t, None, c).total, max_chunk) + grow
    }
}

/// The error for a malformed change `at` bytes into `top`'s in-memory stream.
fn malformed(top: Xid, at: usize) -> Error {
    Error::invalid(format!("reorder buffer: malformed change at byte {at} of transaction {top:?}"))
}

/// Decodes the changes in `d` (whole changes, as [`encode_change`] wrote them, from a chunk's
/// start); a change that does not parse is `bad(its offset in d)`.
fn decode_changes(
    d: &[u8],
    top: Xid,
    base: Lsn,
    bad: &dyn Fn(usize) -> Error,
    f: &mut dyn FnMut(&Change<'_>) -> Result<()>,
) -> Result<()> {
    let mut at = 0;
    let mut prev = None;
    while at < d.len() {
        let change = decode_one(d, &mut at, top, base, &mut prev).ok_or_else(|| bad(at))?;
        f(&change)?;
    }
    Ok(())
}

/// Decodes the change at `*at` in `d`, `prev` the LSN, XID and relation of the one before it
/// (`None` at a chunk's start); moves `at` past it. `None` when it does not parse.
fn decode_one<'d>(
    d: &'d [u8],
    at: &mut usize,
    top: Xid,
    base: Lsn,
    prev: &mut Option<(Lsn, Xid, Oid)>,
) -> Option<Change<'d>> {
    let mut p = *at;
    let body = get_varint(d, &mut p)? as usize;
    let end = p.checked_add(body).filter(|&e| e <= d.len())?;
    let b = &d[..end];
    let flags = *b.get(p)?;
    p += 1;
    let kind = ChangeKind::from_u8(flags & KIND_MASK)?;
    let shared = flags & (SAME_LSN | SAME_XID | SAME_REL) != 0;
    let (plsn, pxid, prel) = match prev {
        Some(v) => *v,
        None if shared => return None,
        None => (Lsn::INVALID, Xid::INVALID, Oid(0)),
    };
    let lsn = if flags & SAME_LSN != 0 { plsn } else { Lsn(base.0.wrapping_add(get_varint(b, &mut p)?)) };
    let xid = if flags & SAME_XID != 0 { pxid } else { Xid(top.0.wrapping_add(get_varint(b, &mut p)? as u32)) };
    let rel = if flags & SAME_REL != 0 { prel } else { Oid(u32::try_from(get_varint(b, &mut p)?).ok()?) };
    let old = if flags & HAS_OLD != 0 {
        let n = get_varint(b, &mut p)? as usize;
        let old_end = p.checked_add(n).filter(|&e| e <= end)?;
        let old = &b[p..old_end];
        p = old_end;
        old
    } else {
        &[]
    };
    *prev = Some((lsn, xid, rel));
    *at = end;
    Some(Change { lsn, xid, kind, rel, old, new: &b[p..end] })
}

/// The offset in `d` (whole changes from a chunk's start) of its first change at or after
/// `lsn`, if any (a change that does not parse is `bad(its offset)`).
fn first_at_or_after(d: &[u8], base: Lsn, lsn: Lsn, bad: &dyn Fn(usize) -> Error) -> Result<Option<usize>> {
    let mut at = 0;
    let mut prev = None;
    while at < d.len() {
        let start = at;
        let c = decode_one(d, &mut at, Xid::INVALID, base, &mut prev).ok_or_else(|| bad(start))?;
        if c.lsn >= lsn {
            return Ok(Some(start));
        }
    }
    Ok(None)
}
