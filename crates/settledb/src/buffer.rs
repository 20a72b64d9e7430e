//! The buffer pool: `shared_buffers` frames of 8 KB caching relation blocks (PostgreSQL's
//! `bufmgr.c` and `freelist.c`).
//!
//! # Pins, content locks, the cleanup lock
//!
//! A [`Buffer`] handle is a *pin*: while any pin is held the frame keeps its page (it cannot be
//! evicted). To look at the bytes a pin holder takes the frame's *content lock*, shared
//! ([`Buffer::read`]) or exclusive ([`Buffer::write`]). The *cleanup lock*
//! ([`Buffer::cleanup_lock`], [`Buffer::try_cleanup_lock`]) is the exclusive content lock taken
//! while the caller holds the only pin: pruning, which moves tuples within a page, needs it,
//! because in PostgreSQL another pin holder may still remember where a tuple was. Rust's
//! borrow rules already keep us from holding tuple references past a lock, but the protocol is
//! kept so that VACUUM's "could not get the cleanup lock" path behaves as PostgreSQL's does.
//!
//! # Replacement
//!
//! Clock sweep: each frame has a usage count (bumped on every pin, at most 5); the clock hand
//! skips pinned frames, decrements usage counts, and takes the first unpinned frame at zero.
//! Bulk scans and vacuum pass a [`Ring`] (a "buffer access strategy") so they recycle a small
//! set of frames instead of flushing the whole pool.
//!
//! # WAL before data
//!
//! A dirty page is written only after the WAL is flushed up to the page's LSN
//! ([`WalFlush::flush`]); this is the trait through which the buffer pool, which sits below the
//! WAL, reaches it. A page is copied under its shared content lock and the checksum is set on
//! the copy, so hint-bit setters never race a write.
//!
//! # Write-out
//!
//! A dirty frame is written by whoever needs it clean: a backend evicting it, the checkpoint
//! (`flush_all`), the write-behind writer. The dirty flag is cleared and the copy taken under
//! the shared content lock, and the copy is written after it is released, so a write can
//! overlap a change (which dirties the frame again). Two writes of one frame never overlap:
//! each holds the frame's `write_io` lock from the copy to the write, so the later copy always
//! reaches the file last. Without it, an eviction's older copy could land after a
//! checkpoint's newer one while the frame was left clean, and the change between them was lost
//! at the next eviction (found by `tests/shuttle.rs`, eviction under contention, under PCT).
//!
//! # Checkpoints
//!
//! A change is logged and marked dirty under the page's exclusive content lock, in that order
//! (PostgreSQL marks the buffer dirty first; here the record's LSN is stamped first). A
//! checkpoint takes its redo pointer and only then writes every dirty frame
//! ([`BufferPool::flush_all`]); recovery replays from the redo pointer on, so a change whose
//! record lies before it must reach the file. A frame that looks clean may belong to a change
//! whose record is in and whose dirty mark is not yet: `flush_all` takes such a frame's content
//! lock (shared, released at once) before it believes the frame clean. Found by
//! `tests/shuttle.rs` (checkpoint and redo pointer).
//!
//! # Changes kept out of the file
//!
//! Two kinds of change reach memory without the usual "logged with a full-page image since the
//! checkpoint's redo pointer, then dirty" rule, and the frame tracks both, because a torn write
//! of a page whose memory differs from its file in places no image covers would leave a page
//! that fails its checksum with nothing in the WAL to repair it:
//!
//! * hint bits on a page with no image since the redo pointer are kept in memory only (the
//!   frame is not dirtied for them; `unsaved` remembers that memory differs from the file,
//!   until the page is next written or the frame reused);
//! * VACUUM setting `PD_ALL_VISIBLE` alone on a page that matches its file is logged without
//!   an image ([`Buffer::mark_dirty_imageless`]): the flag and the checksum lie in the first
//!   512-byte sector, which a device writes whole (PostgreSQL's `pg_control` relies on the
//!   same), so a torn write leaves the old page or the new one, both with valid checksums.
//!   Until that write, hint setters leave the page alone ([`Buffer::may_add_hints`]), and the
//!   WAL is flushed up to the record before the page goes out even though its LSN was not
//!   raised (raising it would spare the page's next change the image it needs).
//!
//! # Write-behind
//!
//! A bulk writer that has filled a page and will not touch it again hands its tag to
//! [`BufferPool::queue_write_behind`]; a background writer ([`BufferPool::write_behind`]) writes
//! such pages on another core, so that when the bulk writer's ring comes round to them they are
//! already clean and the bulk writer does no write I/O of its own. The queue is a bounded hint:
//! when it is full, hints are dropped and the ring writes its victims itself.
//!
//! # Locking order
//!
//! The mapping (tag → frame) is a table of its own, laid out for scans (`buffer/map.rs`). The
//! mapping lock is taken before, never while holding, a content lock. It is a reader-writer
//! lock: a hit takes it shared (it only pins), anything that changes the mapping takes it
//! exclusive. Pins are only ever raised from zero under the mapping lock, in either
//! mode, so the clock sweep, which runs under the exclusive side, can claim a frame whose pin
//! count it saw at zero. (With one mutex, two threads of read-only transactions spent about a
//! tenth of their time queueing for it: `settle bench pgbench -S` went from about 340,000 to
//! about 400,000 transactions a second with two clients.)

use std::sync::Arc;

use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use crate::sync::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{Error, Result};
use crate::page::{self, PageBuf, BLCKSZ};
use crate::smgr::Smgr;
use crate::types::{BlockNumber, BufferTag, Fork, Lsn, Oid};

mod map;
use map::BufMap;

/// An access method's check of a page's contents, run when the page is read from disk.
pub type PageValidator = fn(&[u8], Oid, BlockNumber) -> Result<()>;

/// How the buffer pool reaches the WAL to honour WAL-before-data.
pub trait WalFlush: Send + Sync {
    fn flush(&self, upto: Lsn) -> Result<()>;
}

const MAX_USAGE: u8 = 5;

struct Frame {
    /// The block this frame holds; `None` while free. Only changed under the mapping lock.
    tag: Mutex<Option<BufferTag>>,
    pins: AtomicU32,
    usage: AtomicU8,
    dirty: AtomicBool,
    /// The page in memory holds hint bits the file does not, and the frame is not dirty for
    /// them (see "Changes kept out of the file").
    unsaved: AtomicBool,
    /// Dirty with a change logged without a full-page image ([`Buffer::mark_dirty_imageless`]).
    imageless: AtomicBool,
    /// WAL to flush before writing the page, beyond its LSN (0: none).
    flush_lsn: AtomicU64,
    /// The page bytes are loaded and valid.
    valid: AtomicBool,
    /// Held while the frame's page is being read in; waiters take it to wait for the load.
    io: Mutex<()>,
    /// Held across a write-out, from taking the copy to the write: one write of a frame at a
    /// time (PostgreSQL's BM_IO_IN_PROGRESS for writes; see "Write-out").
    write_io: Mutex<()>,
}

/// Counters of buffer accesses, as PostgreSQL's `BufferUsage`.
#[derive(Debug, Default)]
pub struct BufferCounters {
    pub hits: crate::counter::StripedCounter,
    pub reads: crate::counter::StripedCounter,
    pub dirtied: crate::counter::StripedCounter,
    pub written: crate::counter::StripedCounter,
}

/// A snapshot of [`BufferCounters`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BufferUsage {
    pub hits: u64,
    pub reads: u64,
    pub dirtied: u64,
    pub written: u64,
}

crate::sync::thread_local! {
    /// This thread's own buffer usage (PostgreSQL's per-backend `pgBufferUsage`): VACUUM
    /// reports and cost-limits its own accesses, not the whole pool's.
    static MY_USAGE: std::cell::Cell<BufferUsage> = const {
        std::cell::Cell::new(BufferUsage { hits: 0, reads: 0, dirtied: 0, written: 0 })
    };
}

/// The buffer usage of the calling thread so far.
pub fn my_usage() -> BufferUsage {
    MY_USAGE.with(|c| c.get())
}

fn count_mine(f: impl FnOnce(&mut BufferUsage)) {
    MY_USAGE.with(|c| {
        let mut u = c.get();
        f(&mut u);
        c.set(u);
    });
}

impl BufferUsage {
    pub fn since(self, earlier: BufferUsage) -> BufferUsage {
        BufferUsage {
            hits: self.hits - earlier.hits,
            reads: self.reads - earlier.reads,
            dirtied: self.dirtied - earlier.dirtied,
            written: self.written - earlier.written,
        }
    }

    /// The sum of two usages (a parallel worker's share added to the leader's).
    pub fn plus(self, other: BufferUsage) -> BufferUsage {
        BufferUsage {
            hits: self.hits + other.hits,
            reads: self.reads + other.reads,
            dirtied: self.dirtied + other.dirtied,
            written: self.written + other.written,
        }
    }
}

pub struct BufferPool {
    frames: Box<[Frame]>,
    /// Frame `i`'s page, apart from the frames' small headers so that a new pool's pages are
    /// memory the kernel has not yet handed over: see [`zeroed_pages`].
    pages: Box<[RwLock<PageBuf>]>,
    /// Tag → frame. Read-locked by hits (which only pin), write-locked by anything that
    /// changes the mapping: a pin is raised from zero only under this lock, and a victim is
    /// claimed only under its write lock, so no hit can pin a frame being claimed.
    map: RwLock<BufMap>,
    hand: AtomicUsize,
    smgr: Arc<Smgr>,
    wal: RwLock<Option<Arc<dyn WalFlush>>>,
    counters: BufferCounters,
    write_behind: Mutex<std::collections::VecDeque<BufferTag>>,
    write_behind_cv: Condvar,
}

/// What [`BufferPool::claim_victim`] found: a frame ready for a new page, or a dirty one to
/// write out first (pinned either way).
enum Victim {
    Clean(usize),
    Dirty(usize),
}

/// How long [`BufferPool::drop_relation_buffers`] waits for a pin taken to write a page out.
pub const DROP_PIN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Most write-behind hints kept waiting; more are dropped.
const WRITE_BEHIND_QUEUE_MAX: usize = 8192;

/// A ring of frames reused by one bulk operation (a buffer access strategy).
pub struct Ring {
    slots: Vec<usize>,
    capacity: usize,
    next: usize,
}

impl Ring {
    /// A ring of `bytes` worth of frames (PostgreSQL: 256 kB for bulk reads, 16 MB for bulk
    /// writes, 256 kB–2 GB for vacuum).
    pub fn new(bytes: usize) -> Ring {
        Ring { slots: Vec::new(), capacity: (bytes / BLCKSZ).max(1), next: 0 }
    }
}

/// A pinned buffer. Dropping it unpins.
pub struct Buffer<'a> {
    pool: &'a BufferPool,
    id: usize,
    tag: BufferTag,
}

impl BufferPool {
    pub fn new(nframes: usize, smgr: Arc<Smgr>) -> BufferPool {
        let nframes = nframes.max(16);
        let frames = (0..nframes)
            .map(|_| Frame {
                tag: Mutex::new(None),
                pins: AtomicU32::new(0),
                usage: AtomicU8::new(0),
                dirty: AtomicBool::new(false),
                unsaved: AtomicBool::new(false),
                imageless: AtomicBool::new(false),
                flush_lsn: AtomicU64::new(0),
                valid: AtomicBool::new(false),
                io: Mutex::new(()),
                write_io: Mutex::new(()),
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        BufferPool {
            frames,
            pages: zeroed_pages(nframes),
            map: RwLock::new(BufMap::new(nframes)),
            hand: AtomicUsize::new(0),
            smgr,
            wal: RwLock::new(None),
            counters: BufferCounters::default(),
            write_behind: Mutex::new(std::collections::VecDeque::new()),
            write_behind_cv: Condvar::new(),
        }
    }

    /// Asks the background writer to write `tag`'s page soon (see "Write-behind").
    pub fn queue_write_behind(&self, tag: BufferTag) {
        let mut q = self.write_behind.lock();
        if q.len() < WRITE_BEHIND_QUEUE_MAX {
            q.push_back(tag);
            self.write_behind_cv.notify_one();
        }
    }

    /// Background writer step: waits up to `wait` for hints, then writes every queued page that
    /// is still cached and dirty. Returns how many pages it wrote.
    pub fn write_behind(&self, wait: std::time::Duration) -> Result<usize> {
        let batch: Vec<BufferTag> = {
            let mut q = self.write_behind.lock();
            if q.is_empty() {
                self.write_behind_cv.wait_for(&mut q, wait);
            }
            q.drain(..).collect()
        };
        let mut written = 0;
        for tag in batch {
            let id = {
                let map = self.map.read();
                let Some(id) = map.get(tag) else { continue };
                let f = &self.frames[id];
                if !f.valid.load(Ordering::Acquire) || !f.dirty.load(Ordering::Acquire) {
                    continue;
                }
                f.pins.fetch_add(1, Ordering::AcqRel);
                id
            };
            let r = self.flush_frame(id);
            self.frames[id].pins.fetch_sub(1, Ordering::AcqRel);
            r?;
            written += 1;
        }
        Ok(written)
    }

    /// Wakes a background writer waiting in [`BufferPool::write_behind`] (shutdown).
    pub fn wake_write_behind(&self) {
        let _q = self.write_behind.lock();
        self.write_behind_cv.notify_all();
    }

    pub fn set_wal(&self, wal: Arc<dyn WalFlush>) {
        *self.wal.write() = Some(wal);
    }

    pub fn smgr(&self) -> &Arc<Smgr> {
        &self.smgr
    }

    pub fn usage(&self) -> BufferUsage {
        let c = &self.counters;
        BufferUsage { hits: c.hits.get(), reads: c.reads.get(), dirtied: c.dirtied.get(), written: c.written.get() }
    }

    pub fn nframes(&self) -> usize {
        self.frames.len()
    }

    /// Pins the buffer holding `tag`, reading it from disk on a miss. The page's checksum and
    /// header are verified when it comes in; a corrupt page is an error naming rel and block.
    pub fn read(&self, tag: BufferTag, ring: Option<&mut Ring>) -> Result<Buffer<'_>> {
        self.get(tag, ring, false, None)
    }

    /// Like [`BufferPool::read`], and when the page comes in from disk (only then) its contents
    /// are also checked by `validate` (the access method's structural check: every line
    /// pointer in bounds, for a heap page). Pages changed in memory are trusted, so the check
    /// costs nothing on a hit. Hot path.
    pub fn read_validated(
        &self,
        tag: BufferTag,
        ring: Option<&mut Ring>,
        validate: PageValidator,
    ) -> Result<Buffer<'_>> {
        self.get(tag, ring, false, Some(validate))
    }

    /// Pins a buffer for a block just reserved with [`Smgr::extend`]: zero-filled, no read.
    pub fn new_page(&self, tag: BufferTag, ring: Option<&mut Ring>) -> Result<Buffer<'_>> {
        self.get(tag, ring, true, None)
    }

    /// Reserves the next block of `rel`'s fork and pins a zeroed buffer for it.
    pub fn extend(&self, rel: Oid, fork: Fork, ring: Option<&mut Ring>) -> Result<Buffer<'_>> {
        let block = self.smgr.extend(rel, fork)?;
        self.new_page(BufferTag { rel, fork, block }, ring)
    }

    fn get(
        &self,
        tag: BufferTag,
        mut ring: Option<&mut Ring>,
        zero: bool,
        validate: Option<PageValidator>,
    ) -> Result<Buffer<'_>> {
        loop {
            // Hits share the mapping lock: they only pin.
            let hit = {
                let map = self.map.read();
                let id = map.get(tag);
                if let Some(id) = id {
                    // Under the mapping lock: see "Locking order".
                    self.frames[id].pins.fetch_add(1, Ordering::AcqRel);
                }
                id
            };
            if let Some(id) = hit {
                match self.finish_hit(id, tag) {
                    Some(b) => return Ok(b),
                    None => continue,
                }
            }
            let mut map = self.map.write();
            if let Some(id) = map.get(tag) {
                // Loaded by someone else since we looked.
                self.frames[id].pins.fetch_add(1, Ordering::AcqRel);
                drop(map);
                match self.finish_hit(id, tag) {
                    Some(b) => return Ok(b),
                    None => continue,
                }
            }
            let id = match self.claim_victim(&map, ring.as_deref_mut())? {
                Victim::Clean(id) => id,
                Victim::Dirty(id) => {
                    // Write it out without the mapping lock, then look again.
                    drop(map);
                    let r = self.flush_frame(id);
                    self.frames[id].pins.fetch_sub(1, Ordering::AcqRel);
                    r?;
                    continue;
                }
            };
            let f = &self.frames[id];
            let io = f.io.lock();
            if let Some(old) = f.tag.lock().take() {
                map.remove(old);
            }
            *f.tag.lock() = Some(tag);
            f.valid.store(false, Ordering::Release);
            f.clear_write_state();
            f.usage.store(1, Ordering::Relaxed);
            map.insert(tag, id);
            drop(map);
            let loaded = self.load(id, tag, zero, validate);
            match loaded {
                Ok(()) => {
                    f.valid.store(true, Ordering::Release);
                    drop(io);
                    return Ok(Buffer { pool: self, id, tag });
                }
                Err(e) => {
                    let mut map = self.map.write();
                    map.remove(tag);
                    *f.tag.lock() = None;
                    f.usage.store(0, Ordering::Relaxed);
                    f.pins.fetch_sub(1, Ordering::AcqRel);
                    drop(map);
                    drop(io);
                    return Err(e);
                }
            }
        }
    }

    /// The rest of a hit on frame `id`, pinned by the caller under the mapping lock, which it
    /// has released: waits for a load in progress. `None` (pin dropped) if that load failed,
    /// and the caller looks again.
    fn finish_hit(&self, id: usize, tag: BufferTag) -> Option<Buffer<'_>> {
        let f = &self.frames[id];
        bump_usage(f);
        if !f.valid.load(Ordering::Acquire) {
            // Someone is loading it; wait for the load, then re-check.
            drop(f.io.lock());
            if !f.valid.load(Ordering::Acquire) {
                f.pins.fetch_sub(1, Ordering::AcqRel);
                return None;
            }
        }
        self.counters.hits.add(1);
        count_mine(|u| u.hits += 1);
        Some(Buffer { pool: self, id, tag })
    }

    fn load(&self, id: usize, tag: BufferTag, zero: bool, validate: Option<PageValidator>) -> Result<()> {
        let mut page = self.pages[id].write();
        if zero {
            page.0.fill(0);
            return Ok(());
        }
        self.smgr.read(tag, &mut page.0)?;
        self.counters.reads.add(1);
        count_mine(|u| u.reads += 1);
        page::verify(&page.0, tag.rel, tag.block).map_err(|e| match e {
            // Name the fork, or a damaged map page reads like a damaged heap page.
            Error::Corrupted { rel, block, detail } if tag.fork != Fork::Main => {
                Error::Corrupted { rel, block, detail: format!("{} fork: {detail}", tag.fork.name()) }
            }
            e => e,
        })?;
        match validate {
            Some(v) if !page::is_new(&page.0) => v(&page.0, tag.rel, tag.block),
            _ => Ok(()),
        }
    }

    /// Finds an unpinned frame under the mapping lock and pins it. Returns `Ok(None)` when the
    /// chosen frame was dirty: it has been written out (outside the lock, which is released and
    /// re-taken) and the caller must retry its lookup.
    fn claim_victim(&self, _write_locked: &RwLockWriteGuard<'_, BufMap>, ring: Option<&mut Ring>) -> Result<Victim> {
        let id = match ring {
            Some(r) => self.ring_victim(r)?,
            None => self.clock_victim()?,
        };
        let f = &self.frames[id];
        // Pins are raised from zero only under the mapping lock, whose write side we hold.
        f.pins.store(1, Ordering::Release);
        if f.dirty.load(Ordering::Acquire) {
            return Ok(Victim::Dirty(id));
        }
        Ok(Victim::Clean(id))
    }

    fn clock_victim(&self) -> Result<usize> {
        let n = self.frames.len();
        for _ in 0..n * (usize::from(MAX_USAGE) + 2) {
            let id = self.hand.fetch_add(1, Ordering::Relaxed) % n;
            let f = &self.frames[id];
            if f.pins.load(Ordering::Acquire) != 0 {
                continue;
            }
            let u = f.usage.load(Ordering::Relaxed);
            if u > 0 {
                f.usage.store(u - 1, Ordering::Relaxed);
                continue;
            }
            return Ok(id);
        }
        Err(Error::invalid("no unpinned buffers available (shared_buffers too small for the work)"))
    }

    fn ring_victim(&self, r: &mut Ring) -> Result<usize> {
        if r.slots.len() < r.capacity {
            let id = self.clock_victim()?;
            r.slots.push(id);
            return Ok(id);
        }
        let slot = r.next;
        r.next = (r.next + 1) % r.capacity;
        let id = r.slots[slot];
        let f = &self.frames[id];
        if f.pins.load(Ordering::Acquire) == 0 && f.usage.load(Ordering::Relaxed) <= 1 {
            return Ok(id);
        }
        // Someone else is using our ring member: leave it to them and take a fresh frame.
        let id = self.clock_victim()?;
        r.slots[slot] = id;
        Ok(id)
    }

    /// Writes a frame's page if dirty (WAL first). The caller holds a pin.
    fn flush_frame(&self, id: usize) -> Result<()> {
        let f = &self.frames[id];
        let _writing = f.write_io.lock();
        let Some(tag) = *f.tag.lock() else { return Ok(()) };
        let mut copy = PageBuf([0; BLCKSZ]);
        {
            let page = self.pages[id].read();
            if !f.dirty.swap(false, Ordering::AcqRel) {
                return Ok(());
            }
            copy.0.copy_from_slice(&page.0);
        }
        // Taken under the content lock with the copy: the file will hold what memory does.
        let imageless = f.imageless.swap(false, Ordering::AcqRel);
        let unsaved = f.unsaved.swap(false, Ordering::AcqRel);
        let flush_lsn = Lsn(f.flush_lsn.swap(0, Ordering::AcqRel));
        let r = self.write_copy(tag, &mut copy, flush_lsn);
        if r.is_err() {
            f.flush_lsn.fetch_max(flush_lsn.0, Ordering::AcqRel);
            f.unsaved.fetch_or(unsaved, Ordering::AcqRel);
            f.imageless.fetch_or(imageless, Ordering::AcqRel);
            f.dirty.store(true, Ordering::Release);
        }
        r
    }

    fn write_copy(&self, tag: BufferTag, copy: &mut PageBuf, flush_lsn: Lsn) -> Result<()> {
        let lsn = page::lsn(&copy.0).max(flush_lsn);
        if lsn != Lsn::INVALID {
            if let Some(wal) = self.wal.read().as_ref() {
                wal.flush(lsn)?;
            }
        }
        page::set_checksum(&mut copy.0, tag.block);
        self.smgr.write(tag, &copy.0)?;
        self.counters.written.add(1);
        Ok(())
    }

    /// Writes every dirty buffer (checkpoint, clean shutdown). Returns how many were written.
    ///
    /// A frame found clean may be clean only because another writer (an eviction, the
    /// write-behind writer) took its copy and has not yet handed it to the file: that write is
    /// waited for, so that the fsync the checkpoint does next covers it, as PostgreSQL's
    /// checkpoint waits for a buffer's I/O in progress. Found by `settle torture
    /// --power-loss`: without the wait, a bulk insert's page written by the write-behind
    /// writer across a checkpoint was missing after a power cut that followed the checkpoint.
    pub fn flush_all(&self) -> Result<usize> {
        let mut written = 0;
        for id in 0..self.frames.len() {
            let f = &self.frames[id];
            // A change marks its frame dirty after its record is inserted, both under the
            // exclusive content lock (see "Checkpoints"): a frame found clean is looked at again
            // once that lock is free, or a change logged before the caller's redo pointer could
            // be dirtied just after the look and be neither written nor replayed.
            let dirty = f.dirty.load(Ordering::Acquire) || {
                drop(self.pages[id].read());
                f.dirty.load(Ordering::Acquire)
            };
            if !dirty {
                drop(f.write_io.lock());
                continue;
            }
            {
                let _map = self.map.read();
                if f.tag.lock().is_none() || !f.valid.load(Ordering::Acquire) {
                    continue;
                }
                f.pins.fetch_add(1, Ordering::AcqRel);
            }
            let r = self.flush_frame(id);
            f.pins.fetch_sub(1, Ordering::AcqRel);
            r?;
            written += 1;
        }
        Ok(written)
    }

    /// Forgets every buffer of a relation fork at or beyond `from` without writing them (drop
    /// and truncate). A buffer pinned only to be written out (by an eviction, the checkpoint or
    /// the write-behind writer) is waited for, as PostgreSQL's `InvalidateBuffer` waits for
    /// the I/O; one still pinned after [`DROP_PIN_WAIT`] fails the call. Found by `settle
    /// stress`: DROP INDEX failed with "still pinned" while a checkpoint was writing one of
    /// the index's pages.
    pub fn drop_relation_buffers(&self, rel: Oid, fork: Option<Fork>, from: BlockNumber) -> Result<()> {
        let deadline = std::time::Instant::now() + DROP_PIN_WAIT;
        let (mut map, victims) = loop {
            let map = self.map.write();
            let victims: Vec<(BufferTag, usize)> = map
                .iter()
                .filter(|(t, _)| t.rel == rel && fork.is_none_or(|fk| t.fork == fk) && t.block >= from)
                .collect();
            let pinned = victims.iter().find(|&&(_, id)| self.frames[id].pins.load(Ordering::Acquire) != 0);
            match pinned {
                None => break (map, victims),
                Some((tag, _)) if std::time::Instant::now() >= deadline => {
                    return Err(Error::invalid(format!(
                        "buffer of relation {rel} block {} is still pinned",
                        tag.block
                    )));
                }
                Some(_) => {
                    drop(map);
                    crate::sync::sleep(std::time::Duration::from_millis(1));
                }
            }
        };
        for (tag, id) in victims {
            let f = &self.frames[id];
            map.remove(tag);
            *f.tag.lock() = None;
            f.dirty.store(false, Ordering::Release);
            f.clear_write_state();
            f.valid.store(false, Ordering::Release);
            f.usage.store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Number of pinned frames (leak check for tests).
    pub fn pinned_frames(&self) -> usize {
        self.frames.iter().filter(|f| f.pins.load(Ordering::Acquire) != 0).count()
    }
}

/// `n` unlocked, zeroed pages. Filling 128 MB of `shared_buffers` with zeros by hand makes the
/// kernel hand over and clear every page of it at open (a third of a second of CPU, paid by
/// every short-lived `settle` command); a zeroed allocation of that size is mapped memory the
/// kernel clears only when a page is first touched. That is sound only if an unlocked lock
/// around a zero page is all zero bytes, which `parking_lot`'s is (its state word starts at
/// 0); this is checked on a real value, and any other lock (shuttle's) is built one by one.
fn zeroed_pages(n: usize) -> Box<[RwLock<PageBuf>]> {
    let fresh = Box::new(RwLock::new(PageBuf([0; BLCKSZ])));
    // SAFETY: reads the bytes of an initialized value; a lock word and a byte array
    // (`size_of` equal to their sum, as asserted) leave no padding to read.
    let all_zero = std::mem::size_of::<RwLock<PageBuf>>() == BLCKSZ + std::mem::size_of::<usize>()
        && unsafe {
            std::slice::from_raw_parts(
                (&*fresh as *const RwLock<PageBuf>).cast::<u8>(),
                std::mem::size_of::<RwLock<PageBuf>>(),
            )
        }
        .iter()
        .all(|&b| b == 0);
    if !all_zero || n == 0 {
        return (0..n).map(|_| RwLock::new(PageBuf([0; BLCKSZ]))).collect();
    }
    let layout = std::alloc::Layout::array::<RwLock<PageBuf>>(n).expect("buffer pool size fits in memory");
    // SAFETY: `layout` is non-zero-sized; all-zero bytes are a valid unlocked lock around a
    // zero page (checked above), so every element is initialized; the box frees with the
    // same layout, that of a slice of `n` such elements.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<RwLock<PageBuf>>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        advise_huge_pages(p.cast::<u8>(), layout.size());
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n))
    }
}

/// Asks the kernel to back the pool's pages with transparent huge pages where it can (Linux,
/// `MADV_HUGEPAGE`; PostgreSQL's `huge_pages`, which needs pages reserved by the administrator
/// where this needs none). With 4 KB pages a scan of a large pool misses the TLB on nearly
/// every page it reads, and the walk of a page table as large as the pool's (2 MB of entries
/// per GB) misses the cache too; 2 MB pages cover a 1 GB pool with 512 entries. Only whole
/// 2 MB extents inside the allocation become huge pages, so a small pool is unaffected, and
/// memory is still handed over only when first touched. A refusal (no THP in this kernel) is
/// harmless and ignored.
fn advise_huge_pages(start: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let (lo, hi) = ((start as usize).next_multiple_of(HUGE), (start as usize + len) / HUGE * HUGE);
        if hi > lo {
            // SAFETY: [lo, hi) lies inside the live allocation starting at `start`; the advice
            // changes how the kernel backs it, not its contents.
            unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, len);
}

fn bump_usage(f: &Frame) {
    let u = f.usage.load(Ordering::Relaxed);
    if u < MAX_USAGE {
        f.usage.store(u + 1, Ordering::Relaxed);
    }
}

impl<'a> Buffer<'a> {
    pub fn tag(&self) -> BufferTag {
        self.tag
    }

    pub fn block(&self) -> BlockNumber {
        self.tag.block
    }

    fn frame(&self) -> &'a Frame {
        &self.pool.frames[self.id]
    }

    fn page(&self) -> &'a RwLock<PageBuf> {
        &self.pool.pages[self.id]
    }

    /// Shared content lock.
    pub fn read(&self) -> RwLockReadGuard<'a, PageBuf> {
        self.page().read()
    }

    /// Exclusive content lock.
    pub fn write(&self) -> RwLockWriteGuard<'a, PageBuf> {
        self.page().write()
    }

    /// The exclusive content lock if it can be had right now.
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'a, PageBuf>> {
        self.page().try_write()
    }

    /// The cleanup lock if it can be had right now: exclusive lock and ours is the only pin.
    pub fn try_cleanup_lock(&self) -> Option<RwLockWriteGuard<'a, PageBuf>> {
        let g = self.page().try_write()?;
        if self.frame().pins.load(Ordering::Acquire) == 1 {
            Some(g)
        } else {
            None
        }
    }

    /// Waits for the cleanup lock (LockBufferForCleanup).
    pub fn cleanup_lock(&self) -> RwLockWriteGuard<'a, PageBuf> {
        loop {
            let g = self.page().write();
            if self.frame().pins.load(Ordering::Acquire) == 1 {
                return g;
            }
            drop(g);
            crate::sync::sleep(std::time::Duration::from_micros(100));
        }
    }

    /// Marks the page dirty. Call while holding the exclusive content lock.
    pub fn mark_dirty(&self) {
        if !self.frame().dirty.swap(true, Ordering::AcqRel) {
            self.pool.counters.dirtied.add(1);
            count_mine(|u| u.dirtied += 1);
        }
    }

    pub fn is_dirty(&self) -> bool {
        self.frame().dirty.load(Ordering::Acquire)
    }

    /// After hint bits were added to the exclusively locked page (whose LSN is `page_lsn`):
    /// marks it dirty if a full-page image since the checkpoint's redo pointer `redo` covers
    /// them, else only notes that memory now differs from the file (see "Changes kept out of
    /// the file").
    pub fn hints_added(&self, page_lsn: Lsn, redo: Lsn) {
        if page_lsn > redo {
            self.mark_dirty();
        } else {
            self.frame().unsaved.store(true, Ordering::Release);
        }
    }

    /// Whether hint bits may be written into the exclusively locked page (whose LSN is
    /// `page_lsn`): not while it waits to be written with an imageless change and no image
    /// since the redo pointer `redo` covers the rest of the page.
    pub fn may_add_hints(&self, page_lsn: Lsn, redo: Lsn) -> bool {
        page_lsn > redo || !self.frame().imageless.load(Ordering::Acquire)
    }

    /// Whether the exclusively locked page is byte for byte what its file holds (not dirty,
    /// no hints kept in memory).
    pub fn matches_file(&self) -> bool {
        let f = self.frame();
        !f.dirty.load(Ordering::Acquire) && !f.unsaved.load(Ordering::Acquire)
    }

    /// Marks the exclusively locked page dirty with a change logged at `lsn` without a
    /// full-page image and without raising the page's LSN: the change lies in the page's first
    /// sector and memory matched the file before it ([`Buffer::matches_file`]), so a torn
    /// write leaves either the old page or the new one. Until the page is written, the WAL is
    /// flushed to `lsn` before it, and no hint bits go into it ([`Buffer::may_add_hints`]).
    pub fn mark_dirty_imageless(&self, lsn: Lsn) {
        let f = self.frame();
        f.imageless.store(true, Ordering::Release);
        f.flush_lsn.fetch_max(lsn.0, Ordering::AcqRel);
        self.mark_dirty();
    }

    /// Writes this buffer now if dirty (used by tests and by relation-level flushes).
    pub fn flush(&self) -> Result<()> {
        self.pool.flush_frame(self.id)
    }
}

impl Frame {
    /// Forgets what concerned the write of the page the frame held.
    fn clear_write_state(&self) {
        self.unsaved.store(false, Ordering::Release);
        self.imageless.store(false, Ordering::Release);
        self.flush_lsn.store(0, Ordering::Release);
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        self.frame().pins.fetch_sub(1, Ordering::AcqRel);
    }
}
