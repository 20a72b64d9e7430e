//! The reorder buffer's spill log: one append-only sequence of segment files per buffer
//! (per slot), `xid-spill.<segment %08X>` in the buffer's directory, written in large
//! sequential writes and read back run by run.
//!
//! A *run* is a piece of one transaction's change stream, whole changes only, as they were
//! encoded in memory:
//!
//! ```text
//!  magic u32 "SRUN" | top-level XID u32 | length u32 | CRC-32C of the bytes u32 | bytes
//! ```
//!
//! Runs are appended to a write buffer flushed when it holds a run's worth of bytes (the
//! buffer's `run_target`), before a run still in it is read back, and before the log moves to
//! a new segment, so that one eviction of many small transactions is a few large writes
//! rather than one per change (PostgreSQL writes each change with its own `write()`, into a
//! file per transaction and WAL segment). A segment file is removed as soon as no
//! transaction refers to a run in it. The log is a cache, not durable state: nothing is
//! fsynced, and a new buffer removes whatever an earlier process left in its directory
//! (decoding restarts from the slot's `restart_lsn`, as PostgreSQL's does).
//!
//! Bytes read back are checked, never trusted: a run whose header, length or CRC is wrong, or
//! whose changes do not parse, is [`Error::CorruptFile`] naming the segment file and the
//! offset (fuzz target `spill_file`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::io::{File, FileSystem};
use crate::types::Xid;

const RUN_MAGIC: u32 = u32::from_le_bytes(*b"SRUN");
pub(super) const RUN_HEADER: usize = 16;
const FILE_PREFIX: &str = "xid-spill.";

/// Where a run lies: its segment, the offset of its header, and its length without header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RunLoc {
    pub segment: u64,
    pub offset: u64,
    pub len: u32,
}

/// The open segment being appended to.
struct Current {
    segment: u64,
    file: Arc<dyn File>,
    /// Bytes in the file, plus those in the write buffer.
    len: u64,
    /// Offset in the file where the write buffer's bytes go.
    flushed: u64,
}

pub(super) struct SpillLog {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    segment_size: u64,
    current: Option<Current>,
    next_segment: u64,
    buf: Vec<u8>,
    /// The write buffer is flushed when it holds this much.
    flush_at: usize,
    /// Live runs per segment; a segment at zero (and not current) is removed.
    refs: FxHashMap<u64, usize>,
    /// Files created, bytes written (headers included).
    pub files_created: u64,
    pub bytes_written: u64,
}

impl SpillLog {
    /// A log in `dir` (created if missing), removing the spill files an earlier process left;
    /// its write buffer is flushed at `flush_at` bytes.
    pub fn open(fs: Arc<dyn FileSystem>, dir: &Path, segment_size: u64, flush_at: usize) -> Result<SpillLog> {
        fs.create_dir_all(dir)?;
        for name in fs.list(dir)? {
            if name.starts_with(FILE_PREFIX) {
                fs.remove(&dir.join(&name))?;
            }
        }
        Ok(SpillLog {
            fs,
            dir: dir.to_path_buf(),
            segment_size: segment_size.max(1 << 16),
            current: None,
            next_segment: 0,
            // Allocated once, up front: the buffer's memory is counted from the start, so that
            // the first eviction does not take the buffer past its limit.
            buf: Vec::with_capacity(flush_at + RUN_HEADER),
            flush_at,
            refs: FxHashMap::default(),
            files_created: 0,
            bytes_written: 0,
        })
    }

    fn path(&self, segment: u64) -> PathBuf {
        self.dir.join(format!("{FILE_PREFIX}{segment:08X}"))
    }

    /// Bytes the log holds in memory (its write buffer's capacity and the segment map).
    pub fn allocated_bytes(&self) -> usize {
        self.buf.capacity() + self.refs.capacity() * (std::mem::size_of::<(u64, usize)>() + 1)
    }

    /// Appends a run of `len` bytes given as `pieces` for `top`; returns where it lies. The
    /// bytes reach the file at the next [`SpillLog::flush`] (or sooner, when the buffer fills).
    pub fn append<'a>(
        &mut self,
        top: Xid,
        pieces: impl Iterator<Item = &'a [u8]> + Clone,
        len: usize,
    ) -> Result<RunLoc> {
        let len32 =
            u32::try_from(len).map_err(|_| Error::invalid(format!("a spill run of {len} bytes is too long")))?;
        let whole = (RUN_HEADER + len) as u64;
        // Flushed before it would grow: a run of whole chunks is at most `flush_at` bytes
        // (unless one change alone is larger), so the buffer keeps its first allocation.
        if !self.buf.is_empty() && self.buf.len() + whole as usize > self.buf.capacity() {
            self.flush()?;
        }
        let rotate = match &self.current {
            None => true,
            Some(c) => c.len > 0 && c.len + whole > self.segment_size,
        };
        if rotate {
            self.flush()?;
            let segment = self.next_segment;
            self.next_segment += 1;
            let file = self.fs.open(&self.path(segment), true)?;
            file.set_len(0)?;
            self.files_created += 1;
            if let Some(old) = self.current.replace(Current { segment, file, len: 0, flushed: 0 }) {
                if self.refs.get(&old.segment).copied().unwrap_or(0) == 0 {
                    self.remove_segment(old.segment)?;
                }
            }
        }
        let crc = pieces.clone().fold(0u32, crate::crc::crc32c_append);
        let cur = self.current.as_mut().expect("a current segment");
        let loc = RunLoc { segment: cur.segment, offset: cur.len, len: len32 };
        self.buf.extend_from_slice(&RUN_MAGIC.to_le_bytes());
        self.buf.extend_from_slice(&top.0.to_le_bytes());
        self.buf.extend_from_slice(&len32.to_le_bytes());
        self.buf.extend_from_slice(&crc.to_le_bytes());
        for p in pieces {
            self.buf.extend_from_slice(p);
        }
        cur.len += whole;
        *self.refs.entry(loc.segment).or_insert(0) += 1;
        if self.buf.len() >= self.flush_at {
            self.flush()?;
        }
        Ok(loc)
    }

    /// Writes the buffered runs to their segment.
    pub fn flush(&mut self) -> Result<()> {
        let Some(cur) = self.current.as_mut() else {
            return Ok(());
        };
        if self.buf.is_empty() {
            return Ok(());
        }
        cur.file.write_at(&self.buf, cur.flushed)?;
        cur.flushed += self.buf.len() as u64;
        self.bytes_written += self.buf.len() as u64;
        self.buf.clear();
        if self.buf.capacity() > self.flush_at + RUN_HEADER {
            self.buf.shrink_to(self.flush_at + RUN_HEADER);
        }
        Ok(())
    }

    /// Reads run `loc` of `top` into `out` (replacing its contents), checking its header and
    /// CRC; flushes the write buffer first when the run is still in it.
    pub fn read(&mut self, top: Xid, loc: RunLoc, out: &mut Vec<u8>) -> Result<()> {
        if self.current.as_ref().is_some_and(|c| {
            c.segment == loc.segment && loc.offset + RUN_HEADER as u64 + u64::from(loc.len) > c.flushed
        }) {
            self.flush()?;
        }
        let bad = |what: String| self.corrupt(loc, None, &what);
        let file = match &self.current {
            Some(c) if c.segment == loc.segment => c.file.clone(),
            _ => self.fs.open(&self.path(loc.segment), false)?,
        };
        out.clear();
        out.reserve_exact(RUN_HEADER + loc.len as usize);
        out.resize(RUN_HEADER + loc.len as usize, 0);
        let n = file.read_at(out, loc.offset)?;
        if n < out.len() {
            return Err(bad(format!("the file ends {n} bytes into a run of {}", out.len())));
        }
        let word = |at: usize| u32::from_le_bytes(out[at..at + 4].try_into().expect("4 bytes"));
        if word(0) != RUN_MAGIC {
            return Err(bad(format!("bad magic {:#010x}", word(0))));
        }
        if word(4) != top.0 || word(8) != loc.len {
            return Err(bad(format!(
                "run of transaction {} with {} bytes where {top:?} with {} was written",
                word(4),
                word(8),
                loc.len
            )));
        }
        let crc = word(12);
        out.drain(..RUN_HEADER);
        if crate::crc::crc32c(out) != crc {
            return Err(bad("CRC mismatch".into()));
        }
        Ok(())
    }

    /// The error for bad bytes in run `loc`: in its header, or `at` bytes into its changes.
    pub fn corrupt(&self, loc: RunLoc, at: Option<usize>, what: &str) -> Error {
        let offset = at.map_or(loc.offset, |at| loc.offset + (RUN_HEADER + at) as u64);
        Error::CorruptFile { path: self.path(loc.segment), detail: format!("spill run at offset {offset}: {what}") }
    }

    /// Forgets run `loc`; removes its segment when no other live run is in it.
    pub fn release(&mut self, loc: RunLoc) -> Result<()> {
        let left = match self.refs.get_mut(&loc.segment) {
            Some(n) => {
                *n -= 1;
                *n
            }
            None => return Ok(()),
        };
        if left == 0 {
            self.refs.remove(&loc.segment);
            if self.current.as_ref().is_some_and(|c| c.segment == loc.segment) {
                // Nothing live in the segment being written: drop it; the next run starts
                // a new one.
                self.buf.clear();
                self.current = None;
            }
            self.remove_segment(loc.segment)?;
        }
        Ok(())
    }

    fn remove_segment(&mut self, segment: u64) -> Result<()> {
        let path = self.path(segment);
        if self.fs.exists(&path) {
            self.fs.remove(&path)?;
        }
        Ok(())
    }

    /// Segment files that exist now.
    pub fn live_files(&self) -> usize {
        self.refs.len() + usize::from(self.current.as_ref().is_some_and(|c| !self.refs.contains_key(&c.segment)))
    }
}

impl Drop for SpillLog {
    fn drop(&mut self) {
        let segments: Vec<u64> = self.refs.keys().copied().chain(self.current.as_ref().map(|c| c.segment)).collect();
        for s in segments {
            let _ = self.remove_segment(s);
        }
    }
}
