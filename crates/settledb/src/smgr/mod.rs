//! Storage manager: relation forks as files of 8 KB blocks (PostgreSQL's `md.c`, simplified).
//!
//! Each fork of a relation is one file under `base/`, named by the relation's file node and the
//! fork suffix (`base/16384`, `base/16384_fsm`, `base/16384_vm`). Unlike PostgreSQL, files are
//! not split into 1 GB segments.
//!
//! A relation's *logical* size can run ahead of its file: [`Smgr::extend`] hands out the next
//! block number and reserves its disk space (`fallocate`, a step ahead) without writing, and
//! the buffer pool creates that page zeroed in memory. The file grows when the page is first
//! written back, inside the reservation, so a full disk fails the extension, not the write. Reading a block that lies past
//! the end of the file but inside the logical size yields a zeroed ("new") page, which every
//! page reader treats as empty. After a crash the logical size is the file size again; WAL redo
//! extends relations as records name higher blocks.
//!
//! Writes are not synced one by one: every file written since the last checkpoint is remembered
//! and [`Smgr::sync_all`] fsyncs them at checkpoint (PostgreSQL's pending-fsync table).
//!
//! At most [`MAX_OPEN_FILES`] file descriptors are kept open (PostgreSQL's virtual file
//! descriptors in `fd.c`, `max_files_per_process`), whatever the number of relations: a fork's
//! entry (its logical size) stays in memory, but its descriptor is closed when others are needed
//! and reopened at its next use. The victim is chosen by a clock over the open descriptors in
//! the order they were opened: one used since the hand last passed gets a second chance.

pub mod sizes;

use rustc_hash::FxHashMap;
use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::io::{File, FileSystem};
use crate::page::BLCKSZ;
use crate::types::{BlockNumber, BufferTag, Fork, Oid};

/// File descriptors kept open at most (PostgreSQL's `max_files_per_process` default).
pub const MAX_OPEN_FILES: usize = 1000;

struct ForkFile {
    /// The open file, or `None` when its descriptor was closed to make room (reopened on use).
    file: Mutex<Option<Arc<dyn File>>>,
    /// Used since the clock hand last passed (see [`Smgr::note_open`]).
    used: AtomicBool,
    /// Logical size in blocks: at least the file's size, more when blocks were handed out by
    /// `extend` and not yet written.
    nblocks: BlockCount,
    /// Bytes of disk space reserved ahead of the writes (see [`File::allocate`]).
    allocated: Mutex<u64>,
    /// A main fork found cut short at open ([`sizes`]): (blocks it has, blocks it had);
    /// reading a block between the two is an error.
    cut_short: Mutex<Option<(u32, u32)>>,
}

/// A fork's logical size: changed under a lock, read without one. Every index scan's heap
/// fetch asks for it (is the TID's block still there?), and with a mutex the sessions of two
/// cores took turns owning its cache line just to read it.
struct BlockCount {
    lock: Mutex<u32>,
    /// The value, stored under `lock` by every change ([`BlockCountGuard`]'s drop).
    now: AtomicU32,
}

impl BlockCount {
    fn new(n: u32) -> BlockCount {
        BlockCount { lock: Mutex::new(n), now: AtomicU32::new(n) }
    }

    /// The size as of the last change.
    fn get(&self) -> u32 {
        self.now.load(Ordering::Acquire)
    }

    /// Locks the size for a change, published to [`BlockCount::get`] when the guard drops.
    fn lock(&self) -> BlockCountGuard<'_> {
        BlockCountGuard { g: self.lock.lock(), now: &self.now }
    }
}

struct BlockCountGuard<'a> {
    g: parking_lot::MutexGuard<'a, u32>,
    now: &'a AtomicU32,
}

impl std::ops::Deref for BlockCountGuard<'_> {
    type Target = u32;
    fn deref(&self) -> &u32 {
        &self.g
    }
}

impl std::ops::DerefMut for BlockCountGuard<'_> {
    fn deref_mut(&mut self) -> &mut u32 {
        &mut self.g
    }
}

impl Drop for BlockCountGuard<'_> {
    fn drop(&mut self) {
        self.now.store(*self.g, Ordering::Release);
    }
}

/// A main fork that recovery left shorter than it was at the last checkpoint ([`sizes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutShort {
    pub rel: Oid,
    pub path: PathBuf,
    /// Blocks the file has.
    pub blocks: u32,
    /// Blocks it had, fsynced, at the last checkpoint.
    pub expected: u32,
}

impl std::fmt::Display for CutShort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "file \"{}\" is cut short: it has {} blocks, but {} were durable at the last checkpoint (blocks {} to {} are missing)",
            self.path.display(),
            self.blocks,
            self.expected,
            self.blocks,
            self.expected - 1
        )
    }
}

/// Space is reserved ahead of a growing file in steps of 1/8 of its size, between these bounds.
const ALLOCATE_MIN_BYTES: u64 = 1 << 20;
const ALLOCATE_MAX_BYTES: u64 = 64 << 20;

pub struct Smgr {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    files: RwLock<FxHashMap<(Oid, Fork), Arc<ForkFile>>>,
    /// Forks found missing on disk. Every fork is created through this `Smgr` (which forgets
    /// the entry), so asking the file system again would only cost a `stat` per call (a table
    /// without a visibility map asks for every page VACUUM reads).
    missing: RwLock<rustc_hash::FxHashSet<(Oid, Fork)>>,
    pending_sync: Mutex<HashSet<(Oid, Fork)>>,
    /// Forks whose descriptor is open, oldest first (the clock).
    open: Mutex<VecDeque<(Oid, Fork)>>,
    max_open_files: usize,
    /// Main forks' lengths as of the last checkpoint ([`sizes`]).
    sizes: Mutex<sizes::Sizes>,
}

impl Smgr {
    pub fn new(fs: Arc<dyn FileSystem>, dir: &Path) -> Result<Smgr> {
        fs.create_dir_all(dir)?;
        Ok(Smgr {
            fs,
            dir: dir.to_path_buf(),
            files: RwLock::new(FxHashMap::default()),
            missing: RwLock::new(Default::default()),
            pending_sync: Mutex::new(HashSet::new()),
            open: Mutex::new(VecDeque::new()),
            max_open_files: MAX_OPEN_FILES,
            sizes: Mutex::new(sizes::Sizes::default()),
        })
    }

    /// The same, keeping at most `n` descriptors open (tests).
    pub fn with_max_open_files(mut self, n: usize) -> Smgr {
        self.max_open_files = n.max(1);
        self
    }

    /// Descriptors open now.
    pub fn open_files(&self) -> usize {
        self.open.lock().len()
    }

    pub fn path(&self, rel: Oid, fork: Fork) -> PathBuf {
        self.dir.join(format!("{}{}", rel.0, fork.suffix()))
    }

    pub fn exists(&self, rel: Oid, fork: Fork) -> bool {
        if self.files.read().contains_key(&(rel, fork)) {
            return true;
        }
        if self.missing.read().contains(&(rel, fork)) {
            return false;
        }
        let found = self.fs.exists(&self.path(rel, fork));
        if !found {
            self.missing.write().insert((rel, fork));
        }
        found
    }

    fn fork(&self, rel: Oid, fork: Fork, create: bool) -> Result<Arc<ForkFile>> {
        if let Some(f) = self.files.read().get(&(rel, fork)) {
            return Ok(f.clone());
        }
        let mut files = self.files.write();
        if let Some(f) = files.get(&(rel, fork)) {
            return Ok(f.clone());
        }
        let path = self.path(rel, fork);
        if !create && !self.fs.exists(&path) {
            return Err(Error::NotFound(format!(
                "could not open file \"{}\": relation file does not exist",
                path.display()
            )));
        }
        let file = self.fs.open(&path, true)?;
        let len = file.len()?;
        // A partial last block (a truncated file, or an extension torn by a crash) counts as a
        // block: reading it fails its checksum, naming relation and block, instead of the rows
        // it held vanishing silently. Redo never reads such a block: it restores a full-page
        // image or initializes the page.
        let nblocks = u32::try_from(len.div_ceil(BLCKSZ as u64)).map_err(|_| Error::CorruptFile {
            path: path.clone(),
            detail: format!("file size {len} exceeds the block address space"),
        })?;
        let ff = Arc::new(ForkFile {
            file: Mutex::new(Some(file)),
            used: AtomicBool::new(true),
            nblocks: BlockCount::new(nblocks),
            allocated: Mutex::new(len),
            cut_short: Mutex::new(None),
        });
        files.insert((rel, fork), ff.clone());
        drop(files);
        self.missing.write().remove(&(rel, fork));
        self.note_open((rel, fork));
        Ok(ff)
    }

    /// The fork's open file, reopening it if its descriptor was closed. Hot path: one
    /// uncontended lock and an `Arc` clone when it is open.
    fn file(&self, rel: Oid, fork: Fork, ff: &ForkFile) -> Result<Arc<dyn File>> {
        ff.used.store(true, Ordering::Relaxed);
        if let Some(f) = ff.file.lock().as_ref() {
            return Ok(f.clone());
        }
        let f = self.fs.open(&self.path(rel, fork), false)?;
        {
            let mut slot = ff.file.lock();
            if let Some(other) = slot.as_ref() {
                return Ok(other.clone());
            }
            *slot = Some(f.clone());
        }
        self.note_open((rel, fork));
        Ok(f)
    }

    /// Records a newly opened descriptor and closes others while more than the limit are open:
    /// the clock hand takes the oldest; one used since the hand last passed goes to the back
    /// with its mark cleared, one not used is closed (an I/O holding a clone of the file
    /// finishes first).
    fn note_open(&self, key: (Oid, Fork)) {
        let mut open = self.open.lock();
        open.push_back(key);
        let mut turns = 2 * open.len();
        while open.len() > self.max_open_files && turns > 0 {
            turns -= 1;
            let Some(victim) = open.pop_front() else { break };
            let Some(ff) = self.files.read().get(&victim).cloned() else { continue };
            if ff.used.swap(false, Ordering::Relaxed) {
                open.push_back(victim);
            } else {
                ff.file.lock().take();
            }
        }
    }

    /// Creates the fork's file if it does not exist (durable after the next directory sync).
    pub fn create(&self, rel: Oid, fork: Fork) -> Result<()> {
        self.fork(rel, fork, true)?;
        self.fs.sync_dir(&self.dir)
    }

    /// Logical number of blocks of a fork; 0 when the fork does not exist.
    /// Hot path: one map lookup when the fork is open.
    pub fn nblocks(&self, rel: Oid, fork: Fork) -> Result<u32> {
        if let Some(f) = self.files.read().get(&(rel, fork)) {
            return Ok(f.nblocks.get());
        }
        if !self.exists(rel, fork) {
            return Ok(0);
        }
        Ok(self.fork(rel, fork, false)?.nblocks.get())
    }

    /// Reserves the next block of a fork (creating the file if needed) and returns its number.
    /// The block's disk space is reserved now (a step ahead, see [`Smgr::reserve`]), so a full
    /// disk fails the statement that extends the relation, as PostgreSQL's `mdextend` does by
    /// writing the new block, not a later write-back of the page.
    pub fn extend(&self, rel: Oid, fork: Fork) -> Result<BlockNumber> {
        let ff = self.fork(rel, fork, true)?;
        let mut n = ff.nblocks.lock();
        if *n == u32::MAX - 1 {
            return Err(Error::invalid(format!("cannot extend relation {rel} beyond {} blocks", *n)));
        }
        let b = BlockNumber(*n);
        self.reserve(rel, fork, &ff, b).map_err(|e| match e {
            Error::Io { source, .. } => Error::io("extend", self.path(rel, fork), source),
            e => e,
        })?;
        *n += 1;
        Ok(b)
    }

    /// Makes sure disk space is reserved for `block`: when it lies past the reservation, 1/8
    /// of the file's size more (between 1 and 64 MB) is reserved with [`File::allocate`].
    fn reserve(&self, rel: Oid, fork: Fork, ff: &ForkFile, block: BlockNumber) -> Result<()> {
        let off = u64::from(block.0) * BLCKSZ as u64;
        let mut allocated = ff.allocated.lock();
        if off + BLCKSZ as u64 > *allocated {
            let step = (off / 8).clamp(ALLOCATE_MIN_BYTES, ALLOCATE_MAX_BYTES);
            self.file(rel, fork, ff)?.allocate(off, step)?;
            *allocated = off + step;
        }
        Ok(())
    }

    /// Makes sure the fork's logical size covers `block` (used by WAL redo).
    pub fn ensure_size(&self, rel: Oid, fork: Fork, block: BlockNumber) -> Result<()> {
        let ff = self.fork(rel, fork, true)?;
        let mut n = ff.nblocks.lock();
        if *n <= block.0 {
            *n = block.0 + 1;
        }
        Ok(())
    }

    /// Reads a block into `buf`. A block inside the logical size but past the end of the file
    /// reads as zeros. A block past the logical size is an error.
    pub fn read(&self, tag: BufferTag, buf: &mut [u8]) -> Result<()> {
        let ff = self.fork(tag.rel, tag.fork, false)?;
        if let Some((have, expected)) = *ff.cut_short.lock() {
            if (have..expected).contains(&tag.block.0) {
                let c = CutShort { rel: tag.rel, path: self.path(tag.rel, tag.fork), blocks: have, expected };
                return Err(Error::corrupted(tag.rel, tag.block, c.to_string()));
            }
        }
        // Under the lock: a read racing a truncation waits for it and fails "beyond the
        // end" (which `heap::read_page_if_exists` retries), instead of reading zeros.
        if tag.block.0 >= *ff.nblocks.lock() {
            return Err(Error::NotFound(format!(
                "could not read block {} in file \"{}\": beyond the end of the relation",
                tag.block,
                self.path(tag.rel, tag.fork).display()
            )));
        }
        let n = self.file(tag.rel, tag.fork, &ff)?.read_at(buf, u64::from(tag.block.0) * BLCKSZ as u64)?;
        buf[n..].fill(0);
        Ok(())
    }

    /// Writes a block. Durable after the next [`Smgr::sync_all`].
    pub fn write(&self, tag: BufferTag, buf: &[u8]) -> Result<()> {
        let ff = self.fork(tag.rel, tag.fork, true)?;
        let off = u64::from(tag.block.0) * BLCKSZ as u64;
        // Blocks that WAL redo named past the end were never `extend`ed here.
        self.reserve(tag.rel, tag.fork, &ff, tag.block)?;
        let file = self.file(tag.rel, tag.fork, &ff)?;
        file.write_at(buf, off)?;
        {
            let mut n = ff.nblocks.lock();
            if *n <= tag.block.0 {
                *n = tag.block.0 + 1;
            }
        }
        self.pending_sync.lock().insert((tag.rel, tag.fork));
        Ok(())
    }

    /// Truncates a fork to `nblocks` blocks, durably (PostgreSQL's smgrtruncate).
    pub fn truncate(&self, rel: Oid, fork: Fork, nblocks: u32) -> Result<()> {
        if !self.exists(rel, fork) {
            return Ok(());
        }
        let ff = self.fork(rel, fork, false)?;
        let file = self.file(rel, fork, &ff)?;
        let mut n = ff.nblocks.lock();
        file.set_len(u64::from(nblocks) * BLCKSZ as u64)?;
        file.sync()?;
        *n = nblocks;
        *ff.allocated.lock() = u64::from(nblocks) * BLCKSZ as u64;
        if fork == Fork::Main {
            self.sizes.lock().set(rel, nblocks);
        }
        Ok(())
    }

    /// Removes every fork of a relation.
    pub fn unlink(&self, rel: Oid) -> Result<()> {
        self.sizes.lock().forget(rel);
        for fork in [Fork::Main, Fork::Fsm, Fork::Vm] {
            self.files.write().remove(&(rel, fork));
            self.pending_sync.lock().remove(&(rel, fork));
            self.fs.remove(&self.path(rel, fork))?;
        }
        self.fs.sync_dir(&self.dir)
    }

    /// Fsyncs every file written since the last call (checkpoint). A failure is final: the
    /// caller must not retry it as if the writes were still pending (see [`crate::io`]); the
    /// checkpointer poisons the WAL instead.
    pub fn sync_all(&self) -> Result<()> {
        let mut pending: Vec<(Oid, Fork)> = self.pending_sync.lock().drain().collect();
        // In file order, so that a run (and a test failing the n-th fsync) is repeatable.
        pending.sort_unstable_by_key(|&(rel, fork)| (rel.0, fork as u8));
        for (i, &(rel, fork)) in pending.iter().enumerate() {
            let ff = match self.files.read().get(&(rel, fork)) {
                Some(f) => f.clone(),
                None => continue,
            };
            let synced = self.file(rel, fork, &ff).and_then(|f| {
                f.sync()?;
                f.len()
            });
            match synced {
                Ok(len) if fork == Fork::Main => {
                    self.sizes.lock().set(rel, u32::try_from(len.div_ceil(BLCKSZ as u64)).unwrap_or(u32::MAX));
                }
                Ok(_) => {}
                Err(e) => {
                    // Keep the rest pending; the caller treats a failed fsync as fatal anyway.
                    self.pending_sync.lock().extend(pending[i..].iter().copied());
                    return Err(e);
                }
            }
        }
        self.fs.sync_dir(&self.dir)
    }

    /// Writes the lengths [`Smgr::sync_all`] recorded to `path` (`global/pg_relsize`) if they
    /// changed: a temporary file, fsynced, renamed over it, and the directory fsynced.
    pub fn save_sizes(&self, path: &Path) -> Result<()> {
        let bytes = {
            let s = self.sizes.lock();
            if !s.dirty {
                return Ok(());
            }
            s.encode()
        };
        let tmp = path.with_extension("tmp");
        let f = self.fs.open(&tmp, true)?;
        f.set_len(0)?;
        f.write_at(&bytes, 0)?;
        f.sync()?;
        drop(f);
        self.fs.rename(&tmp, path)?;
        self.fs.sync_dir(&parent_dir(path))?;
        self.sizes.lock().dirty = false;
        Ok(())
    }

    /// Reads the lengths of the last checkpoint from `path` (none when there is no file).
    pub fn load_sizes(&self, path: &Path) -> Result<()> {
        if !self.fs.exists(path) {
            return Ok(());
        }
        let f = self.fs.open(path, false)?;
        let mut bytes = vec![0u8; usize::try_from(f.len()?).unwrap_or(usize::MAX).min(1 << 30)];
        f.read_exact_at(&mut bytes, 0)?;
        *self.sizes.lock() = sizes::Sizes::decode(&bytes, path)?;
        Ok(())
    }

    /// After recovery: the main forks of `live` relations that are shorter than they were at
    /// the last checkpoint. Each is marked so that reading a missing block is an error naming
    /// the range, and its logical length covers the range, so scans reach it instead of
    /// skipping the rows it held.
    pub fn find_cut_short(&self, live: &std::collections::HashSet<Oid>) -> Result<Vec<CutShort>> {
        let expected: Vec<(Oid, u32)> = {
            let s = self.sizes.lock();
            s.blocks.iter().filter(|(r, _)| live.contains(r)).map(|(&r, &n)| (r, n)).collect()
        };
        let mut out = Vec::new();
        for (rel, expected) in expected {
            let have = self.nblocks(rel, Fork::Main)?;
            if have >= expected {
                continue;
            }
            let ff = self.fork(rel, Fork::Main, true)?;
            *ff.cut_short.lock() = Some((have, expected));
            {
                let mut n = ff.nblocks.lock();
                *n = (*n).max(expected);
            }
            out.push(CutShort { rel, path: self.path(rel, Fork::Main), blocks: have, expected });
        }
        out.sort_by_key(|c| c.rel.0);
        Ok(out)
    }

    /// The forks [`Smgr::find_cut_short`] found (for `check`).
    pub fn cut_short(&self) -> Vec<CutShort> {
        let files = self.files.read();
        let mut out: Vec<CutShort> = files
            .iter()
            .filter_map(|(&(rel, fork), ff)| {
                let (have, expected) = (*ff.cut_short.lock())?;
                Some(CutShort { rel, path: self.path(rel, fork), blocks: have, expected })
            })
            .collect();
        out.sort_by_key(|c| c.rel.0);
        out
    }

    /// Relation file nodes that have a main fork on disk (for `check` and recovery).
    pub fn list_relations(&self) -> Result<Vec<Oid>> {
        let mut out = Vec::new();
        for name in self.fs.list(&self.dir)? {
            if let Ok(n) = name.parse::<u32>() {
                out.push(Oid(n));
            }
        }
        Ok(out)
    }
}

fn parent_dir(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::fault::FaultFs;

    /// Many relations, few descriptors: every fork stays readable and writable, its logical
    /// size survives the closing of its descriptor, and no more than the limit stay open.
    #[test]
    fn descriptors_stay_under_the_limit() -> Result<()> {
        let fs: Arc<dyn FileSystem> = FaultFs::new();
        let smgr = Smgr::new(fs, Path::new("/base"))?.with_max_open_files(4);
        let tag = |r: u32, b: u32| BufferTag { rel: Oid(r), fork: Fork::Main, block: BlockNumber(b) };
        for r in 0..40u32 {
            smgr.create(Oid(r), Fork::Main)?;
            smgr.write(tag(r, 0), &[r as u8; BLCKSZ])?;
            // Handed out but never written: known only to the in-memory entry.
            smgr.extend(Oid(r), Fork::Main)?;
            assert!(smgr.open_files() <= 4, "{} descriptors open", smgr.open_files());
        }
        let mut page = [0u8; BLCKSZ];
        for r in (0..40u32).rev() {
            assert_eq!(smgr.nblocks(Oid(r), Fork::Main)?, 2);
            smgr.read(tag(r, 0), &mut page)?;
            assert!(page.iter().all(|&b| b == r as u8), "relation {r} reads back");
            assert!(smgr.open_files() <= 4);
        }
        smgr.sync_all()?;
        Ok(())
    }
}
