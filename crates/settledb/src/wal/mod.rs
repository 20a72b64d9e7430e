//! The write-ahead log: every change to a page is described by a WAL record, and the record
//! reaches disk before the page does, so that after a crash replaying the WAL from the last
//! checkpoint's redo pointer rebuilds every change that was lost with the buffer pool.
//!
//! The algorithm follows PostgreSQL's `xlog.c` (insert position, flush, checkpoints' redo
//! pointer), `xloginsert.c` (record assembly, full-page images with a "hole") and
//! `xlogreader.c` (reading and validating records); the layout and the code are our own.
//!
//! # The stream and its segments
//!
//! The WAL is one byte stream addressed by [`Lsn`] (a byte position). It is stored in
//! *segment* files of `segment_size` bytes (16 MiB by default, a power of two), named like
//! PostgreSQL's: `TTTTTTTTLLLLLLLLSSSSSSSS` = timeline 1, which 4 GiB of the stream, which
//! segment within it ([`segment::segment_file_name`]). Segment `n` holds stream bytes
//! `[n * segment_size, (n + 1) * segment_size)`; there are no page or file headers, and
//! records follow each other with no padding, crossing segment boundaries freely.
//!
//! ```text
//!   segment 1 (000000010000000000000001)        segment 2 (...0002)
//!   |rec A|rec B|rec C|  rec D (first part) ||  rec D (rest)|rec E| ...
//!   ^ Lsn(segment_size): first record of a new cluster ([first_lsn])
//! ```
//!
//! LSN 0 is invalid (it means "no record"), so a new cluster starts inserting at the beginning
//! of segment 1, `Lsn(segment_size)`, with `xl_prev = 0/0`.
//!
//! # Record format (all integers little-endian)
//!
//! ```text
//!   +---------------------------- header, 24 bytes ----------------------------+
//!   | xl_tot_len u32 | xl_xid u32 | xl_prev u64 | info u8 | rmid u8 | pad 2 | crc u32 |
//!   +--------------------------------------------------------------------------+
//!   | nblocks u8 | block header * nblocks | main_len u32                       |
//!   | block header: id u8, fork u8, flags u8 (IMAGE|DATA|WILL_INIT),           |
//!   |               rel u32, block u32, data_len u32,                          |
//!   |               [IMAGE: stored_len u16, hole_offset u16, hole_length u16]  |
//!   | per block: image bytes (page without its hole), block data               |
//!   | main data                                                                |
//!   +--------------------------------------------------------------------------+
//! ```
//!
//! `xl_crc` is CRC-32C over the body (everything after the header) continued over the
//! header's first 20 bytes. `xl_prev` is the start of the previous record: a reader that
//! finds bytes whose `xl_prev` does not point back to the record it just read has walked into
//! stale data and stops there. See [`record`] for the exact byte offsets.
//!
//! # WAL before data
//!
//! [`Wal::insert`] returns the record's *end* LSN, which the caller stores as the page's
//! `pd_lsn`. Before the buffer pool writes a dirty page it calls [`Wal::flush`] with the
//! page's LSN, so no page on disk describes a change whose record could still be lost.
//!
//! # Full-page images
//!
//! A crash can tear a page write, leaving a page that is neither old nor new, which redo of a
//! record describing a small change cannot repair. So the first change to a page after a
//! checkpoint's redo pointer logs the whole page: when a [`BlockRef`] carries the page, the
//! record does not `will_init` it, `full_page_writes` is on, and the page's current LSN is at or
//! before [`Wal::redo_ptr`], the record carries an image of the page (minus the unused hole
//! between `pd_lower` and `pd_upper` of a standard page) instead of the block data. Redo
//! restores the image and never needs the torn page. The decision is checked under the insert
//! lock, against the redo pointer [`Wal::begin_checkpoint`] moves under the same lock: a record
//! assembled against an older redo pointer is assembled again (`XLogInsertRecord`'s
//! "RedoRecPtr changed" retry).
//!
//! # Insertion and group commit
//!
//! Outside any lock, a record's fixed part (header and block headers) is assembled in a reused
//! per-thread buffer and the body's CRC computed over it and the payload where the caller
//! keeps it: a full-page image is read in the locked buffer-pool page, never copied aside. The
//! insert lock is held only to take the next position, patch `xl_prev`, finish the CRC and
//! copy the header and the payload, once, into the in-memory WAL buffer. (PostgreSQL copies
//! into reserved space outside its insert lock, which pays with many concurrent inserters;
//! the big producer here is one VACUUM, whose copy costs the same under the lock.)
//!
//! When more than [`WRITER_WAKE_BYTES`] are buffered the WAL writer thread is woken to write
//! them out; when the buffer still exceeds `wal_buffers_bytes` the inserter writes it out
//! itself (no fsync) so memory stays bounded, and counts it ([`my_wal_buffers_full`]).
//!
//! Two copies is what each byte costs here: into the WAL buffer, then the kernel's, from the
//! buffer into the page cache. Copying straight into shared mappings of the segment files
//! would be one. It was built and measured (2026-11, Linux 6.18, ext4, 2 cores) and is
//! slower. The first VACUUM of `settle bench vacuum --scale 50 --policy lazy --runs 3`
//! (743 MB of WAL) took 0.86 and 1.03 s through mappings, against 0.44 and 0.57 s through
//! the buffer, in alternating sets. Prefaulting each segment at mapping
//! (`MADV_POPULATE_WRITE`) did not change that: 0.64 and 1.05 s against 0.36 and 0.53 s.
//! The profile shows why:
//!
//! - The first store into each 4 KB page faults, and ext4 makes the page writable. In one
//!   `perf` profile each, the fault path's symbols had about 800 samples. `pwrite`'s copy and
//!   block handling had about 370.
//! - The faults happen in the copy under the insert lock, so the other inserter waits. Idle,
//!   scheduler and lock-wait symbols had about 1,700 samples, against about 310.
//!
//! For scale: leaving the kernel copy out altogether (an experiment that wrote no WAL, not
//! an engine) made the same VACUUM 12-17% faster. That is the most any way of getting the
//! bytes into the page cache could gain.
//!
//! [`Wal::flush`] is group commit: it returns at once when `flushed_lsn >= upto`; otherwise it
//! takes the flush mutex, checks again (a flush that ran while it waited usually covered it),
//! writes everything inserted so far under the writer mutex, then fsyncs the segments written
//! since the last flush *after releasing the writer mutex*, so inserters that overflow
//! `wal_buffers` keep writing while a long fsync runs. One fsync serves every transaction that
//! committed meanwhile. The writer writes into recycled segments when a checkpoint left some,
//! and otherwise creates a segment and reserves its disk space
//! ([`crate::io::File::allocate`]) so that writes need no block allocation ([`segment`] has
//! the measurements behind that choice).
//!
//! # Recycling
//!
//! As PostgreSQL does (`RemoveOldXlogFiles`), a checkpoint does not delete the segments wholly
//! before its redo pointer: once the control file naming it is durable, it renames them to the
//! free segment numbers from the one the writer writes next, up to a horizon
//! ([`segment::recycle_horizon`], PostgreSQL's `XLOGfileslop`: the WAL expected until the next
//! checkpoint ends, from an estimate of the WAL written per checkpoint, kept within
//! `min_wal_size` and `max_wal_size`), and removes the rest ([`Wal::remove_old_segments`]).
//! Segments a replication slot still needs are kept whatever the redo pointer
//! ([`Wal::remove_old_segments_keeping`]).
//! Writing into a recycled file overwrites pages the page cache still holds, with no block
//! allocation: several times cheaper than filling a new file.
//!
//! A recycled file keeps its old bytes until they are overwritten, so past the end of the WAL
//! the reader meets well-formed records with correct CRCs. They can never be taken for the
//! continuation of the stream: a stale record found at position `q` was written at an earlier
//! position `p < q` of the same stream (a segment is recycled only once the stream has passed
//! it, and the crash handling below keeps one history), so its `xl_prev` is the start of the
//! record before it *there*, a record that ended at `p`; the record the reader has just read
//! ends at `q`, and one start has one end. Bytes that are not a stale record's start would need
//! an `xl_prev` equal to the last record's start and a matching CRC-32C.
//!
//! Renaming is done under the writer mutex, so the writer never creates a file under a name
//! being given to a recycled one. A rename becomes durable with the next fsync of the WAL
//! directory, which the next flush does before it reports anything durable: no WAL written
//! into a recycled file is acknowledged while a crash could still undo the rename. An undone
//! rename or removal leaves a file under its old name, before the redo pointer, where
//! recovery never reads and the next checkpoint finds it again.
//!
//! # Poisoning
//!
//! After a failed write or fsync the kernel may have dropped the dirty data while reporting
//! success for later fsyncs ("fsyncgate"), so a failed fsync is never retried. The WAL becomes
//! *poisoned*: that call and every later insert and flush return [`Error::Poisoned`] naming
//! the first error; the data directory must be reopened, which runs crash recovery. The rest
//! of the engine poisons the WAL the same way ([`Wal::poison_after`]) when a checkpoint cannot
//! make the data files, the CLOG or the control file durable, and when a file creation or
//! truncation already in the WAL cannot be made durable: PostgreSQL PANICs in those places
//! (`data_sync_retry = off`), we refuse every later write and every new command instead.
//!
//! # Locks
//!
//! Order: flush mutex, then writer mutex, then insert lock (the writer takes the insert lock
//! briefly to take the buffer). The insert lock is never held across I/O; the writer mutex is
//! held across writes but never across an fsync.
//!
//! # Reopening
//!
//! [`Wal::open`] continues at `start` (the end of the last valid record recovery found) and
//! discards whatever lies beyond it: it truncates `start`'s segment at `start` and removes later
//! segments. Those may be recycled, but they may also hold WAL written before the crash past a
//! torn or lost record, and such records belong to the same stream: if the new stream wrote a
//! record of the same length where the lost one was, the next old record's `xl_prev` would
//! chain to it. Nothing in a file tells the two apart, so both go, and with them this run's
//! recycled segments; the next checkpoints recycle again. Truncating keeps the argument of
//! "Recycling" true: every stale byte the reader can meet was written at an earlier position
//! of the one stream it is reading.

pub mod control;
mod cursor;
pub mod desc;
pub mod newpage;
pub mod reader;
pub mod record;
pub mod segment;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sync::Mutex;
use crate::sync::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::io::FileSystem;
use crate::types::{BufferTag, Lsn, Xid};

pub use cursor::Cursor;
pub use reader::{read_record_at, WalReader};
use segment::SegmentWriter;

#[cfg(test)]
mod tests;
/// Resource managers: who writes a record and whose redo routine replays it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum Rmgr {
    Xlog = 0,
    Xact = 1,
    Clog = 2,
    Storage = 3,
    Heap = 4,
    Heap2 = 5,
    Btree = 6,
    Catalog = 7,
    /// `pg_logical_emit_message` ([`crate::decode::message`]).
    LogicalMsg = 8,
    /// The running-transactions record ([`crate::xact::standby`]).
    Standby = 9,
}

impl Rmgr {
    pub fn from_u8(v: u8) -> Option<Rmgr> {
        Some(match v {
            0 => Rmgr::Xlog,
            1 => Rmgr::Xact,
            2 => Rmgr::Clog,
            3 => Rmgr::Storage,
            4 => Rmgr::Heap,
            5 => Rmgr::Heap2,
            6 => Rmgr::Btree,
            7 => Rmgr::Catalog,
            8 => Rmgr::LogicalMsg,
            9 => Rmgr::Standby,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Rmgr::Xlog => "XLOG",
            Rmgr::Xact => "Transaction",
            Rmgr::Clog => "CLOG",
            Rmgr::Storage => "Storage",
            Rmgr::Heap => "Heap",
            Rmgr::Heap2 => "Heap2",
            Rmgr::Btree => "Btree",
            Rmgr::Catalog => "Catalog",
            Rmgr::LogicalMsg => "LogicalMessage",
            Rmgr::Standby => "Standby",
        }
    }
}

/// `Storage` rmgr info: a relation fork was created (redo: `db::startup::redo_storage`).
pub const STORAGE_CREATE: u8 = 0x00;
/// `Storage` rmgr info: a relation fork was truncated to a number of blocks.
pub const STORAGE_TRUNCATE: u8 = 0x10;

/// Main data of a `Storage` record: file node u32, fork u8, and for TRUNCATE the new size u32.
pub fn storage_main_data(rel: crate::types::Oid, fork: crate::types::Fork, nblocks: Option<u32>) -> Vec<u8> {
    let mut main = rel.0.to_le_bytes().to_vec();
    main.push(fork as u8);
    if let Some(n) = nblocks {
        main.extend_from_slice(&n.to_le_bytes());
    }
    main
}

/// One block a record changes.
pub struct BlockRef<'a> {
    pub id: u8,
    pub tag: BufferTag,
    /// The record's redo initializes the page from nothing: never attach an image.
    pub will_init: bool,
    /// The page as it is *after* the change (the caller holds its exclusive lock); the WAL
    /// attaches it as a full-page image when the page's LSN is at or before the redo pointer
    /// and full_page_writes is on. `None`: never an image for this block.
    pub page: Option<&'a [u8]>,
    /// Per-block data for redo (used when no image is attached, or always when `keep_data`).
    pub data: Vec<u8>,
    /// Keep `data` in the record even when an image is attached (PostgreSQL's
    /// `REGBUF_KEEP_DATA`): under `wal_level = logical` the decoder reads the tuple from it.
    pub keep_data: bool,
}

/// A record under construction.
pub struct RecordBuilder<'a> {
    /// The top-level transaction when `xid` is one of its subtransactions and the record must
    /// name it (`wal_level = logical`); [`Xid::INVALID`] otherwise.
    pub toplevel_xid: Xid,
    pub rmgr: Rmgr,
    pub info: u8,
    pub xid: Xid,
    pub blocks: Vec<BlockRef<'a>>,
    pub main_data: Vec<u8>,
}

/// A record read back from the WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRecord {
    pub lsn: Lsn,
    pub end_lsn: Lsn,
    pub prev: Lsn,
    pub xid: Xid,
    /// The top-level transaction of a subtransaction's record, when the record names it
    /// (`wal_level = logical`); [`Xid::INVALID`] otherwise.
    pub toplevel_xid: Xid,
    pub rmgr: Rmgr,
    pub info: u8,
    pub blocks: Vec<DecodedBlock>,
    pub main_data: Vec<u8>,
}

impl DecodedRecord {
    /// A record to decode into ([`reader::WalReader::next_into`]).
    pub fn empty() -> DecodedRecord {
        DecodedRecord {
            lsn: Lsn::INVALID,
            end_lsn: Lsn::INVALID,
            prev: Lsn::INVALID,
            xid: Xid::INVALID,
            toplevel_xid: Xid::INVALID,
            rmgr: Rmgr::Xlog,
            info: 0,
            blocks: Vec::new(),
            main_data: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedBlock {
    pub id: u8,
    pub tag: BufferTag,
    pub will_init: bool,
    pub image: Option<Box<[u8; crate::page::BLCKSZ]>>,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    pub records: u64,
    pub fpi: u64,
    pub bytes: u64,
}

crate::sync::thread_local! {
    /// WAL written by the calling thread (PostgreSQL's per-backend `pgWalUsage`).
    static MY_WAL_USAGE: std::cell::Cell<WalStats> = const { std::cell::Cell::new(WalStats { records: 0, fpi: 0, bytes: 0 }) };
}

/// The WAL the calling thread has written so far.
pub fn my_wal_usage() -> WalStats {
    MY_WAL_USAGE.with(|c| c.get())
}

crate::sync::thread_local! {
    /// Times the calling thread found `wal_buffers` full and wrote WAL out itself.
    static MY_WAL_BUFFERS_FULL: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times the calling thread found `wal_buffers` full and wrote WAL out itself
/// (PostgreSQL's `wal_buffers_full` of `pg_stat_wal` and VACUUM VERBOSE's "buffers full"):
/// each one means the WAL writer fell behind.
pub fn my_wal_buffers_full() -> u64 {
    MY_WAL_BUFFERS_FULL.with(|c| c.get())
}

pub struct WalConfig {
    pub segment_size: u64,
    pub full_page_writes: bool,
    pub wal_buffers_bytes: usize,
    /// `wal_level = logical`: writers add what logical decoding needs ([`Wal::logical`]).
    pub logical: bool,
}

impl Default for WalConfig {
    /// PostgreSQL's defaults: 16 MiB segments, full_page_writes on, 4 MiB of WAL buffers
    /// (what `wal_buffers = -1` gives with the default shared_buffers).
    fn default() -> Self {
        WalConfig { segment_size: 16 << 20, full_page_writes: true, wal_buffers_bytes: 4 << 20, logical: false }
    }
}

/// Where a new cluster's first record goes: the start of segment 1 (LSN 0 is invalid).
pub fn first_lsn(segment_size: u64) -> Lsn {
    Lsn(segment_size)
}

/// An empty WAL buffer with room for `wal_buffers` bytes and a large record past them, its
/// memory already handed over by the kernel (PostgreSQL clears its WAL buffers when the server
/// starts). Otherwise the first burst of WAL after an open, the first that outruns the WAL
/// writer, pays for it, under the insert lock: in `settle bench vacuum --scale 50` the first
/// VACUUM took 4,405 page faults (17 MB) in the copy into the WAL buffer.
fn resident_buffer(wal_buffers_bytes: usize) -> Vec<u8> {
    let mut buf: Vec<u8> = Vec::with_capacity(wal_buffers_bytes.max(1) + RESIDENT_SLACK);
    let (base, cap) = (buf.as_mut_ptr(), buf.capacity());
    // One write per 4 KB page is what makes the kernel supply it; volatile, so that it is not
    // folded into a zeroed allocation the kernel would again supply lazily.
    for at in (0..cap).step_by(4096) {
        // SAFETY: `at` is within the allocation's capacity; the byte is spare capacity, never
        // read before the buffer's own writes cover it, and `len` stays 0.
        unsafe { base.add(at).write_volatile(0) };
    }
    buf
}

/// Room a WAL buffer keeps past `wal_buffers` for the record that takes it over the limit
/// (without it, that record would double the buffer's allocation).
const RESIDENT_SLACK: usize = 256 << 10;

/// State under the insert lock.
struct InsertState {
    /// End of the last inserted record: where the next one starts.
    pos: Lsn,
    /// Start of the last inserted record: the next record's `xl_prev`.
    prev: Lsn,
    /// Inserted bytes not yet written, starting at `buf_start` and ending at `pos`.
    buf: Vec<u8>,
    buf_start: Lsn,
    /// An emptied buffer kept for reuse, so taking `buf` does not allocate.
    spare: Vec<u8>,
    stats: WalStats,
}

/// State under the write/flush mutex.
struct IoState {
    segments: SegmentWriter,
    /// Everything before this is written to the segment files (maybe not yet synced).
    written: Lsn,
    /// Bytes of WAL expected between two checkpoints (PostgreSQL's
    /// `CheckPointDistanceEstimate`; see [`segment::next_distance_estimate`]).
    distance_estimate: f64,
}

pub struct Wal {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    segment_size: u64,
    full_page_writes: bool,
    logical: bool,
    wal_buffers_bytes: usize,
    insert: Mutex<InsertState>,
    io: Mutex<IoState>,
    /// One fsyncing flusher at a time (group commit: the others find their LSN covered).
    flush_lock: Mutex<()>,
    redo_ptr: AtomicU64,
    flushed: AtomicU64,
    /// Woken at every flush ([`Wal::wait_flushed_past`]: a WAL sender waits here for new WAL).
    flush_wait: Mutex<()>,
    flush_cv: crate::sync::Condvar,
    poisoned: AtomicBool,
    poison_reason: Mutex<Option<String>>,
    /// Called when the unwritten WAL crosses [`WRITER_WAKE_BYTES`], so the WAL writer thread
    /// writes it out on its own core before inserters fill `wal_buffers` and must write it
    /// themselves (a VACUUM produces hundreds of MB per second).
    writer_waker: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    /// Set when the writer was woken; cleared whenever buffered WAL is written.
    writer_poked: AtomicBool,
    /// `pg_stat_wal`'s `wal_write`, `wal_sync` and `wal_buffers_full` since the open.
    io_counts: [AtomicU64; 3],
}

/// WAL writes, fsyncs and writes forced by full WAL buffers since the WAL was opened
/// (`pg_stat_wal`'s `wal_write`, `wal_sync`, `wal_buffers_full`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WalIoStats {
    pub write: u64,
    pub sync: u64,
    pub buffers_full: u64,
}

/// Unwritten WAL that wakes the WAL writer early.
pub const WRITER_WAKE_BYTES: usize = 1 << 20;

crate::sync::thread_local! {
    /// Per-thread scratch buffer for the fixed part of a record (header and block headers, at
    /// most a few hundred bytes): no allocation per record.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Wal {
    /// Opens the WAL in `dir` to insert at `start` with `xl_prev = prev`. Creates `dir` if
    /// needed; discards any bytes at or after `start` (see the module doc, "Reopening").
    /// The redo pointer starts at `start`; see [`Wal::set_redo_ptr`].
    pub fn open(fs: Arc<dyn FileSystem>, dir: &Path, start: Lsn, prev: Lsn, config: WalConfig) -> Result<Wal> {
        segment::validate_segment_size(config.segment_size)?;
        if start == Lsn::INVALID {
            return Err(Error::invalid("WAL cannot start at 0/0"));
        }
        if prev >= start {
            return Err(Error::invalid(format!("WAL xl_prev {prev} is not before start {start}")));
        }
        fs.create_dir_all(dir)?;
        discard_after(&*fs, dir, start, config.segment_size)?;
        let segments = SegmentWriter::new(Arc::clone(&fs), dir.to_path_buf(), config.segment_size);
        Ok(Wal {
            fs,
            dir: dir.to_path_buf(),
            segment_size: config.segment_size,
            full_page_writes: config.full_page_writes,
            logical: config.logical,
            wal_buffers_bytes: config.wal_buffers_bytes.max(1),
            insert: Mutex::new(InsertState {
                pos: start,
                prev,
                buf: resident_buffer(config.wal_buffers_bytes),
                buf_start: start,
                spare: resident_buffer(config.wal_buffers_bytes),
                stats: WalStats::default(),
            }),
            io: Mutex::new(IoState { segments, written: start, distance_estimate: 0.0 }),
            flush_lock: Mutex::new(()),
            redo_ptr: AtomicU64::new(start.0),
            flushed: AtomicU64::new(start.0),
            flush_wait: Mutex::new(()),
            flush_cv: crate::sync::Condvar::new(),
            poisoned: AtomicBool::new(false),
            poison_reason: Mutex::new(None),
            writer_waker: Mutex::new(None),
            writer_poked: AtomicBool::new(false),
            io_counts: Default::default(),
        })
    }

    /// Appends a record; returns its END lsn (the caller's new page LSN).
    ///
    /// Hot path: assembly and the body CRC happen outside the insert lock; under it, the
    /// header and the payload are copied once, from where the caller keeps them, into the WAL
    /// buffer.
    pub fn insert(&self, rec: &RecordBuilder<'_>) -> Result<Lsn> {
        self.check_poisoned()?;
        let (end, buffered) = SCRATCH.with(|cell| self.insert_assembled(&mut cell.borrow_mut(), rec))?;
        if buffered >= WRITER_WAKE_BYTES && !self.writer_poked.swap(true, Ordering::AcqRel) {
            if let Some(wake) = self.writer_waker.lock().as_ref() {
                wake();
            }
        }
        if buffered > self.wal_buffers_bytes {
            let mut io = self.io.lock();
            let still = self.insert.lock().buf.len();
            if still > self.wal_buffers_bytes {
                MY_WAL_BUFFERS_FULL.with(|c| c.set(c.get() + 1));
                self.io_counts[2].fetch_add(1, Ordering::Relaxed);
                self.write_buffered(&mut io).map_err(|e| self.poison(e))?;
            }
        }
        Ok(end)
    }

    /// Registers what wakes the WAL writer (see [`WRITER_WAKE_BYTES`]).
    pub fn set_writer_waker(&self, wake: Box<dyn Fn() + Send + Sync>) {
        *self.writer_waker.lock() = Some(wake);
    }

    /// Assembles the fixed part of `rec` into `head` and copies the record into the WAL
    /// buffer; returns the record's end and how many bytes are buffered unwritten.
    fn insert_assembled(&self, head: &mut Vec<u8>, rec: &RecordBuilder<'_>) -> Result<(Lsn, usize)> {
        loop {
            let redo = Lsn(self.redo_ptr.load(Ordering::Acquire));
            let a = record::assemble_head(head, rec, self.full_page_writes, redo)?;
            let mut st = self.insert.lock();
            if a.depends_on_redo && self.redo_ptr.load(Ordering::Acquire) != redo.0 {
                continue; // a checkpoint began: some block may need an image now
            }
            let lsn = st.pos;
            record::finish(head, a.body_crc, st.prev);
            let st = &mut *st;
            st.buf.reserve(a.tot_len);
            st.buf.extend_from_slice(head);
            record::for_each_payload(rec, a.images, |piece| st.buf.extend_from_slice(piece));
            let bytes = a.tot_len as u64;
            st.prev = lsn;
            st.pos = Lsn(lsn.0 + bytes);
            debug_assert_eq!(st.pos.0 - st.buf_start.0, st.buf.len() as u64, "the buffer ends at the insert position");
            st.stats.records += 1;
            st.stats.fpi += a.fpi;
            st.stats.bytes += bytes;
            MY_WAL_USAGE.with(|c| {
                let mut u = c.get();
                u.records += 1;
                u.fpi += a.fpi;
                u.bytes += bytes;
                c.set(u);
            });
            return Ok((st.pos, st.buf.len()));
        }
    }

    /// Writes every buffered byte to the segment files (no fsync); returns the written end.
    fn write_buffered(&self, io: &mut IoState) -> Result<Lsn> {
        self.writer_poked.store(false, Ordering::Release);
        let (start, chunk) = {
            let mut st = self.insert.lock();
            let spare = std::mem::take(&mut st.spare);
            let chunk = std::mem::replace(&mut st.buf, spare);
            let start = st.buf_start;
            st.buf_start = st.pos;
            (start, chunk)
        };
        debug_assert_eq!(start, io.written, "WAL buffer must continue the written stream");
        if !chunk.is_empty() {
            self.io_counts[0].fetch_add(1, Ordering::Relaxed);
        }
        let result = io.segments.write(start, &chunk);
        let end = Lsn(start.0 + chunk.len() as u64);
        let mut chunk = chunk;
        chunk.clear();
        {
            let mut st = self.insert.lock();
            if st.spare.capacity() < chunk.capacity() {
                st.spare = chunk;
            }
        }
        result?;
        io.written = end;
        Ok(end)
    }

    /// Makes the WAL durable at least up to `upto` (clamped to the insert position).
    /// Group commit: one flusher writes and fsyncs everything inserted so far.
    pub fn flush(&self, upto: Lsn) -> Result<()> {
        self.check_poisoned()?;
        if self.flushed.load(Ordering::Acquire) >= upto.0 {
            return Ok(());
        }
        let _flusher = self.flush_lock.lock();
        self.check_poisoned()?;
        if self.flushed.load(Ordering::Acquire) >= upto.0 {
            return Ok(()); // a flush that ran while we waited covered us
        }
        // Write under the writer lock, fsync outside it: inserters that overflow wal_buffers
        // must be able to write out while a long fsync runs.
        let (end, files, dir_dirty) = {
            let mut io = self.io.lock();
            let end = self.write_buffered(&mut io).map_err(|e| self.poison(e))?;
            let (files, dir_dirty) = io.segments.take_unsynced().map_err(|e| self.poison(e))?;
            (end, files, dir_dirty)
        };
        for f in &files {
            f.sync().map_err(|e| self.poison(e))?;
            self.io_counts[1].fetch_add(1, Ordering::Relaxed);
        }
        if dir_dirty {
            self.fs.sync_dir(&self.dir).map_err(|e| self.poison(e))?;
        }
        self.io.lock().segments.close_before(segment::segment_number(end, self.segment_size));
        self.flushed.store(end.0, Ordering::Release);
        // Taken and released after the store: a waiter that saw the old value under the lock
        // is waiting by now and gets the notification.
        drop(self.flush_wait.lock());
        self.flush_cv.notify_all();
        Ok(())
    }

    /// Waits until the WAL is durable past `lsn`, or `timeout` passes; returns the flushed
    /// position then.
    pub fn wait_flushed_past(&self, lsn: Lsn, timeout: std::time::Duration) -> Lsn {
        let deadline = std::time::Instant::now() + timeout;
        let mut g = self.flush_wait.lock();
        while self.flushed_lsn() <= lsn {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            let _ = self.flush_cv.wait_for(&mut g, deadline - now);
        }
        drop(g);
        self.flushed_lsn()
    }

    /// Everything before this LSN is durable.
    /// Whether `wal_level = logical`: heap records keep their tuple data beside page images,
    /// carry the old key of updated and deleted rows, and a subtransaction's records name its
    /// top-level transaction.
    pub fn logical(&self) -> bool {
        self.logical
    }

    pub fn flushed_lsn(&self) -> Lsn {
        Lsn(self.flushed.load(Ordering::Acquire))
    }

    /// The end of the last inserted record.
    pub fn insert_lsn(&self) -> Lsn {
        self.insert.lock().pos
    }

    /// The redo pointer of the checkpoint in progress or last completed: a page whose LSN is at
    /// or before it gets a full-page image with its next change.
    pub fn redo_ptr(&self) -> Lsn {
        Lsn(self.redo_ptr.load(Ordering::Acquire))
    }

    /// Whether the next change to a page whose LSN is `page_lsn` would carry a full-page image
    /// (its first change since the redo pointer, with full_page_writes on). VACUUM asks before
    /// deciding to freeze, as PostgreSQL's `XLogCheckBufferNeedsBackup`; the answer can only
    /// turn from false to true (a checkpoint starting), never the other way.
    pub fn needs_image(&self, page_lsn: Lsn) -> bool {
        self.full_page_writes && page_lsn <= self.redo_ptr()
    }

    /// Starts a checkpoint: sets the redo pointer to the current insert position, atomically
    /// with respect to inserts, and returns it.
    pub fn begin_checkpoint(&self) -> Lsn {
        let st = self.insert.lock();
        self.redo_ptr.store(st.pos.0, Ordering::Release);
        st.pos
    }

    /// Sets the redo pointer at startup (to the redo LSN of the last checkpoint recovery used).
    pub fn set_redo_ptr(&self, lsn: Lsn) {
        let _st = self.insert.lock();
        self.redo_ptr.store(lsn.0, Ordering::Release);
    }

    pub fn stats(&self) -> WalStats {
        self.insert.lock().stats
    }

    /// Writes, fsyncs and full-buffer writes since the open ([`WalIoStats`]).
    pub fn io_stats(&self) -> WalIoStats {
        let c = |i: usize| self.io_counts[i].load(Ordering::Relaxed);
        WalIoStats { write: c(0), sync: c(1), buffers_full: c(2) }
    }

    /// Recycles or removes the segment files wholly before the segment of `redo`, the redo
    /// pointer of a checkpoint whose control file is durable (PostgreSQL's
    /// `RemoveOldXlogFiles`); never a segment holding unflushed WAL. `prior_redo` is the redo
    /// pointer of the checkpoint before it (`INVALID` if none): the distance between the two
    /// feeds the estimate of the WAL written per checkpoint, which, within `min_wal_size` and
    /// `max_wal_size`, decides how many segments are kept as recycled future segments
    /// ([`segment::recycle_horizon`]); the rest are removed. See the module doc, "Recycling".
    pub fn remove_old_segments(
        &self,
        redo: Lsn,
        prior_redo: Lsn,
        min_wal_size: u64,
        max_wal_size: u64,
    ) -> Result<segment::Recycled> {
        self.remove_old_segments_keeping(redo, Lsn::INVALID, prior_redo, min_wal_size, max_wal_size)
    }

    /// [`Self::remove_old_segments`], also keeping the segment holding `keep` and every later
    /// one (`INVALID`: nothing more): the oldest WAL a replication slot still needs, already
    /// capped by `max_slot_wal_keep_size` (PostgreSQL's `KeepLogSeg`). The WAL knows nothing of
    /// slots; their owner computes `keep`.
    pub fn remove_old_segments_keeping(
        &self,
        redo: Lsn,
        keep: Lsn,
        prior_redo: Lsn,
        min_wal_size: u64,
        max_wal_size: u64,
    ) -> Result<segment::Recycled> {
        let mut limit = redo.min(self.flushed_lsn());
        if keep != Lsn::INVALID {
            limit = limit.min(keep);
        }
        let keep_from = segment::segment_number(limit, self.segment_size);
        let mut io = self.io.lock();
        if prior_redo != Lsn::INVALID && prior_redo < redo {
            io.distance_estimate = segment::next_distance_estimate(io.distance_estimate, redo.0 - prior_redo.0);
        }
        let horizon =
            segment::recycle_horizon(redo, self.segment_size, min_wal_size, max_wal_size, io.distance_estimate);
        let write_pos = io.written;
        let (done, result) = io.segments.recycle_before(keep_from, write_pos, horizon);
        result.map(|()| done)
    }

    /// The segment size this WAL was opened with.
    pub fn segment_size(&self) -> u64 {
        self.segment_size
    }

    /// The directory holding the segment files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether a write or fsync failed; see the module doc, "Poisoning".
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// `Err(Poisoned)` naming the first failure once the WAL is poisoned.
    pub fn check_poisoned(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            let reason = self.poison_reason.lock().clone().unwrap_or_default();
            return Err(Error::Poisoned(reason));
        }
        Ok(())
    }

    /// Records the first I/O failure and turns it into [`Error::Poisoned`].
    fn poison(&self, e: Error) -> Error {
        self.poison_after("WAL write or fsync", e)
    }

    /// Poisons the WAL because `what` failed with `e` outside the WAL (a data file's fsync at a
    /// checkpoint, the control file, a logged file creation or truncation); returns the
    /// [`Error::Poisoned`] to hand the caller. Every later insert and flush fails, so nothing
    /// can claim durability past the failure: see the module doc, "Poisoning".
    pub fn poison_after(&self, what: &str, e: Error) -> Error {
        let mut reason = self.poison_reason.lock();
        let msg = reason.get_or_insert_with(|| format!("{what} failed: {e}")).clone();
        self.poisoned.store(true, Ordering::Release);
        Error::Poisoned(msg)
    }
}

/// Truncates `start`'s segment at `start` and removes every later segment, durably.
fn discard_after(fs: &dyn FileSystem, dir: &Path, start: Lsn, segment_size: u64) -> Result<()> {
    let first = segment::segment_number(start, segment_size);
    let mut changed = false;
    for name in fs.list(dir)? {
        match segment::parse_segment_file_name(&name, segment_size) {
            Some(segno) if segno > first => {
                fs.remove(&dir.join(&name))?;
                changed = true;
            }
            _ => {}
        }
    }
    let path = segment::segment_path(dir, first, segment_size);
    if fs.exists(&path) {
        let f = fs.open(&path, false)?;
        let offset = start.0 % segment_size;
        if f.len()? > offset {
            f.set_len(offset)?;
            f.sync()?;
        }
    }
    if changed {
        fs.sync_dir(dir)?;
    }
    Ok(())
}
