//! Storage manager: relation forks as files of 8 KB blocks (PostgreSQL's `md.c`, simplified).
//!
//! Each fork of a relation is one file under `base/`, named by the relation's file node and the
//! fork suffix (`base/16384`, `base/16384_fsm`, `base/16384_vm`). Unlike PostgreSQL, files are
//! not split into 1 GB segments.
//!
//! A relation's *logical* size can run ahead of its file: [`Smgr::extend`] hands out the next
//! block number without writing anything, and the buffer pool creates that page zeroed in
//! memory. The file grows when the page is first written back. Reading a block that lies past
//! the end of the file but inside the logical size yields a zeroed ("new") page, which every
//! page reader treats as empty. After a crash the logical size is the file size again; WAL redo
//! extends relations as records name higher blocks.
//!
//! Writes are not synced one by one: every file written since the last checkpoint is remembered
//! and [`Smgr::sync_all`] fsyncs them at checkpoint (PostgreSQL's pending-fsync table).

use rustc_hash::FxHashMap;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::io::{File, FileSystem};
use crate::page::BLCKSZ;
use crate::types::{BlockNumber, BufferTag, Fork, Oid};

struct ForkFile {
    file: Arc<dyn File>,
    /// Logical size in blocks: at least the file's size, more when blocks were handed out by
    /// `extend` and not yet written.
    nblocks: Mutex<u32>,
    /// Bytes of disk space reserved ahead of the writes (see [`File::allocate`]).
    allocated: Mutex<u64>,
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
        })
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
        let ff = Arc::new(ForkFile { file, nblocks: Mutex::new(nblocks), allocated: Mutex::new(len) });
        files.insert((rel, fork), ff.clone());
        self.missing.write().remove(&(rel, fork));
        Ok(ff)
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
            return Ok(*f.nblocks.lock());
        }
        if !self.exists(rel, fork) {
            return Ok(0);
        }
        Ok(*self.fork(rel, fork, false)?.nblocks.lock())
    }

    /// Reserves the next block of a fork (creating the file if needed) and returns its number.
    pub fn extend(&self, rel: Oid, fork: Fork) -> Result<BlockNumber> {
        let ff = self.fork(rel, fork, true)?;
        let mut n = ff.nblocks.lock();
        if *n == u32::MAX - 1 {
            return Err(Error::invalid(format!("cannot extend relation {rel} beyond {} blocks", *n)));
        }
        let b = BlockNumber(*n);
        *n += 1;
        Ok(b)
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
        if tag.block.0 >= *ff.nblocks.lock() {
            return Err(Error::NotFound(format!(
                "could not read block {} in file \"{}\": beyond the end of the relation",
                tag.block,
                self.path(tag.rel, tag.fork).display()
            )));
        }
        let n = ff.file.read_at(buf, u64::from(tag.block.0) * BLCKSZ as u64)?;
        buf[n..].fill(0);
        Ok(())
    }

    /// Writes a block. Durable after the next [`Smgr::sync_all`].
    pub fn write(&self, tag: BufferTag, buf: &[u8]) -> Result<()> {
        let ff = self.fork(tag.rel, tag.fork, true)?;
        let off = u64::from(tag.block.0) * BLCKSZ as u64;
        {
            let mut allocated = ff.allocated.lock();
            if off + BLCKSZ as u64 > *allocated {
                let step = (off / 8).clamp(ALLOCATE_MIN_BYTES, ALLOCATE_MAX_BYTES);
                ff.file.allocate(off, step)?;
                *allocated = off + step;
            }
        }
        ff.file.write_at(buf, off)?;
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
        let mut n = ff.nblocks.lock();
        ff.file.set_len(u64::from(nblocks) * BLCKSZ as u64)?;
        ff.file.sync()?;
        *n = nblocks;
        *ff.allocated.lock() = u64::from(nblocks) * BLCKSZ as u64;
        Ok(())
    }

    /// Removes every fork of a relation.
    pub fn unlink(&self, rel: Oid) -> Result<()> {
        for fork in [Fork::Main, Fork::Fsm, Fork::Vm] {
            self.files.write().remove(&(rel, fork));
            self.pending_sync.lock().remove(&(rel, fork));
            self.fs.remove(&self.path(rel, fork))?;
        }
        self.fs.sync_dir(&self.dir)
    }

    /// Fsyncs every file written since the last call (checkpoint).
    pub fn sync_all(&self) -> Result<()> {
        let pending: Vec<(Oid, Fork)> = self.pending_sync.lock().drain().collect();
        for (i, &(rel, fork)) in pending.iter().enumerate() {
            let ff = match self.files.read().get(&(rel, fork)) {
                Some(f) => f.clone(),
                None => continue,
            };
            if let Err(e) = ff.file.sync() {
                // Keep the rest pending; the caller treats a failed fsync as fatal anyway.
                self.pending_sync.lock().extend(pending[i..].iter().copied());
                return Err(e);
            }
        }
        self.fs.sync_dir(&self.dir)
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
