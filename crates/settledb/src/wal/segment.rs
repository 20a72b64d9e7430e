//! WAL segment files: naming, writing the stream into them, and recycling old ones.
//!
//! The WAL stream is cut into files of `segment_size` bytes. Segment `n` holds stream bytes
//! `[n * segment_size, (n + 1) * segment_size)` at file offset `lsn - n * segment_size`; there
//! are no per-page or per-file headers. Files are named as PostgreSQL's `XLogFileName` names
//! them: timeline (always 1), then the segment number split into a "log id" (which 4 GiB of
//! the stream) and the segment within that 4 GiB, each as 8 upper-case hex digits.
//!
//! # Where segment files come from
//!
//! * **Recycled** (the usual case once a database has run a few checkpoints): a checkpoint
//!   renames each segment wholly before its redo pointer to a future segment number instead
//!   of removing it ([`recycle_horizon`] says how many future segments to keep, as PostgreSQL's
//!   `XLOGfileslop` does). A recycled file keeps its full length and its old bytes; the
//!   writer overwrites them. Overwriting a file whose pages are still in the page cache is the
//!   cheapest write there is (no block allocation, no extent conversion, no page-cache
//!   allocation), which is why PostgreSQL recycles.
//! * **New**: the writer creates the file on first write and reserves the whole segment with
//!   `fallocate` (`FALLOC_FL_KEEP_SIZE`: the length still grows with the writes), rather than
//!   zero-filling it as PostgreSQL does by default (`wal_init_zero`). Measured on the
//!   development machine (ext4 on a virtual disk, 2 shared cores): writing 16 MiB segments in
//!   1 MiB pieces into the page cache ran at 0.5-1 GB/s into a plain new file, 2.9-4 GB/s into
//!   a reserved one and 4.5-6.6 GB/s into a cached file being overwritten; zero-filling made
//!   the later writes as cheap as overwriting, but the fill cost more than it saved (1-1.9
//!   GB/s for fill and writes together), and with `fsync` on it sends every page to disk
//!   twice (zeros fsynced at creation as PostgreSQL does, then the WAL: 0.13-0.17 GB/s
//!   against 0.23-0.35 reserved, one fdatasync per segment). Small commits
//!   (2 KiB written, then fdatasync) were about 10% faster into a zero-filled file, within the
//!   noise of the disk. In the engine, `settle bench load --rows 3000000` took a median 6.0 s
//!   with reserved segments against 7.3 s zero-filled (fsync on; 4.7 s against 4.9 s with
//!   fsync off), with more system time when zero-filling. So we reserve, and recycling
//!   supplies the cheap files.
//!
//! A file's length therefore says nothing about where the WAL ends: a recycled file is full
//! of stale records from an older part of the stream. The reader finds the end by record
//! validity alone (see [`super::reader`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::io::{File, FileSystem};
use crate::types::Lsn;

/// The only timeline settledb writes.
pub const TIMELINE: u32 = 1;

/// Smallest segment size accepted (tests use 64 KiB; production uses 16 MiB).
pub const MIN_SEGMENT_SIZE: u64 = 4096;
/// Largest segment size accepted (PostgreSQL's limit too).
pub const MAX_SEGMENT_SIZE: u64 = 1 << 30;

/// Checks that `segment_size` is a power of two within the accepted range.
pub fn validate_segment_size(segment_size: u64) -> Result<()> {
    if !segment_size.is_power_of_two() || !(MIN_SEGMENT_SIZE..=MAX_SEGMENT_SIZE).contains(&segment_size) {
        return Err(Error::Config(format!(
            "WAL segment size must be a power of two between {MIN_SEGMENT_SIZE} and \
             {MAX_SEGMENT_SIZE} bytes, got {segment_size}"
        )));
    }
    Ok(())
}

/// Segments per 4 GiB "log id" (PostgreSQL's `XLogSegmentsPerXLogId`).
fn segments_per_id(segment_size: u64) -> u64 {
    0x1_0000_0000 / segment_size
}

/// The segment number holding stream byte `lsn`.
pub fn segment_number(lsn: Lsn, segment_size: u64) -> u64 {
    lsn.0 / segment_size
}

/// The file name of segment `segno`, e.g. `000000010000000000000001`.
pub fn segment_file_name(segno: u64, segment_size: u64) -> String {
    let per_id = segments_per_id(segment_size);
    format!("{:08X}{:08X}{:08X}", TIMELINE, segno / per_id, segno % per_id)
}

/// Parses a segment file name back to its segment number; `None` for any other file.
pub fn parse_segment_file_name(name: &str, segment_size: u64) -> Option<u64> {
    if name.len() != 24 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let tli = u32::from_str_radix(name.get(0..8)?, 16).ok()?;
    let log = u64::from_str_radix(name.get(8..16)?, 16).ok()?;
    let seg = u64::from_str_radix(name.get(16..24)?, 16).ok()?;
    let per_id = segments_per_id(segment_size);
    if tli != TIMELINE || seg >= per_id {
        return None;
    }
    log.checked_mul(per_id)?.checked_add(seg)
}

/// The path of segment `segno` in `dir`.
pub fn segment_path(dir: &Path, segno: u64, segment_size: u64) -> PathBuf {
    dir.join(segment_file_name(segno, segment_size))
}

/// Writes stream bytes into segment files and remembers which ones need an fsync.
///
/// Owned by the WAL's write/flush mutex: one writer at a time.
pub(crate) struct SegmentWriter {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    segment_size: u64,
    open: BTreeMap<u64, Arc<dyn File>>,
    unsynced: BTreeSet<u64>,
    /// A segment file was created since the last `sync`: the directory needs an fsync too.
    dir_dirty: bool,
}

impl SegmentWriter {
    pub(crate) fn new(fs: Arc<dyn FileSystem>, dir: PathBuf, segment_size: u64) -> Self {
        SegmentWriter { fs, dir, segment_size, open: BTreeMap::new(), unsynced: BTreeSet::new(), dir_dirty: false }
    }

    fn file(&mut self, segno: u64) -> Result<Arc<dyn File>> {
        if let Some(f) = self.open.get(&segno) {
            return Ok(Arc::clone(f));
        }
        let path = segment_path(&self.dir, segno, self.segment_size);
        let created = !self.fs.exists(&path);
        let f = self.fs.open(&path, true)?;
        if created {
            self.dir_dirty = true;
        }
        // Reserve the whole segment so that writes need no block allocation (see the module
        // doc): a new file, or the one `Wal::open` truncated where recovery ended. A recycled
        // file is full length already.
        if created || f.len()? < self.segment_size {
            f.allocate(0, self.segment_size)?;
        }
        self.open.insert(segno, Arc::clone(&f));
        Ok(f)
    }

    /// Writes `bytes` at stream position `lsn`, crossing segment boundaries as needed.
    pub(crate) fn write(&mut self, lsn: Lsn, mut bytes: &[u8]) -> Result<()> {
        let mut pos = lsn.0;
        while !bytes.is_empty() {
            let segno = pos / self.segment_size;
            let off = pos % self.segment_size;
            let room = (self.segment_size - off).min(bytes.len() as u64) as usize;
            let (now, rest) = bytes.split_at(room);
            let f = self.file(segno)?;
            f.write_at(now, off)?;
            self.unsynced.insert(segno);
            bytes = rest;
            pos += room as u64;
        }
        Ok(())
    }

    /// Hands over the files written since the last call, and whether a segment was created, so
    /// that the caller can fsync them without holding the writer (inserters keep writing).
    pub(crate) fn take_unsynced(&mut self) -> Result<(Vec<Arc<dyn File>>, bool)> {
        let segnos: Vec<u64> = std::mem::take(&mut self.unsynced).into_iter().collect();
        let mut files = Vec::with_capacity(segnos.len());
        for segno in segnos {
            files.push(self.file(segno)?);
        }
        Ok((files, std::mem::replace(&mut self.dir_dirty, false)))
    }

    /// Closes the files of segments before `keep_from` (fully written and synced).
    pub(crate) fn close_before(&mut self, keep_from: u64) {
        self.open.retain(|&segno, _| segno >= keep_from || self.unsynced.contains(&segno));
    }

    /// Forgets open handles of segments before `segno` (they are being recycled or removed).
    pub(crate) fn forget_before(&mut self, segno: u64) {
        self.open.retain(|&s, _| s >= segno);
        self.unsynced.retain(|&s| s >= segno);
    }

    /// Recycles or removes every segment file before `keep_from` (see [`recycle_horizon`]): the
    /// oldest ones are renamed, in order, to the free segment numbers from the one the writer
    /// writes next (`write_pos`) up to `horizon`; the rest are removed. Returns how many of
    /// each, and the first error, if any, after recording what was done.
    ///
    /// Called with the WAL's write mutex held, so the writer cannot create a segment file
    /// under a name being given to a recycled one. A rename is durable only after an fsync
    /// of the directory; the next WAL flush does it before it reports anything durable
    /// ([`SegmentWriter::take_unsynced`] hands the flag over), so no WAL written into a
    /// recycled file is ever claimed durable while a crash could undo the rename. An undone
    /// rename or removal is harmless: the file falls back to its old name, before the redo
    /// pointer, where recovery never reads and the next checkpoint finds it again.
    pub(crate) fn recycle_before(&mut self, keep_from: u64, write_pos: Lsn, horizon: u64) -> (Recycled, Result<()>) {
        self.forget_before(keep_from);
        let mut done = Recycled::default();
        let result = self.recycle_files(keep_from, write_pos, horizon, &mut done);
        if done.recycled + done.removed > 0 {
            self.dir_dirty = true;
        }
        (done, result)
    }

    fn recycle_files(&mut self, keep_from: u64, write_pos: Lsn, horizon: u64, done: &mut Recycled) -> Result<()> {
        let mut present = BTreeSet::new();
        for name in self.fs.list(&self.dir)? {
            if let Some(segno) = parse_segment_file_name(&name, self.segment_size) {
                present.insert(segno);
            }
        }
        let old: Vec<u64> = present.range(..keep_from).copied().collect();
        let mut target = segment_number(write_pos, self.segment_size).max(keep_from);
        for segno in old {
            while target <= horizon && present.contains(&target) {
                target += 1;
            }
            let path = segment_path(&self.dir, segno, self.segment_size);
            if target <= horizon {
                self.fs.rename(&path, &segment_path(&self.dir, target, self.segment_size))?;
                present.insert(target);
                done.recycled += 1;
            } else {
                self.fs.remove(&path)?;
                done.removed += 1;
            }
            present.remove(&segno);
        }
        Ok(())
    }
}

/// What a checkpoint did with the segment files it no longer needs (PostgreSQL's
/// `log_checkpoints` prints the same two counts).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recycled {
    /// Renamed to a future segment number, to be overwritten.
    pub recycled: usize,
    /// Removed.
    pub removed: usize,
}

/// PostgreSQL's default `checkpoint_completion_target`: a spread checkpoint lasts this
/// fraction of the interval, so the WAL written while it runs counts in the recycling target.
/// Our checkpoints are not spread, but the checkpointer starts one at `max_wal_size / 2` of
/// WAL, close to PostgreSQL's `max_wal_size / (1 + 0.9)`, so the same estimate fits.
pub const CHECKPOINT_COMPLETION_TARGET: f64 = 0.9;

/// The highest segment number a checkpoint with redo pointer `redo` keeps ready as a recycled
/// future segment (PostgreSQL's `XLOGfileslop`): enough for the WAL expected until the next
/// checkpoint ends, `(1 + CHECKPOINT_COMPLETION_TARGET) * 1.1 * distance_estimate` bytes past
/// `redo`, but at least `min_wal_size` and at most `max_wal_size` from the redo pointer's
/// segment on (each counted in whole segments, rounded down, as PostgreSQL does).
pub fn recycle_horizon(
    redo: Lsn,
    segment_size: u64,
    min_wal_size: u64,
    max_wal_size: u64,
    distance_estimate: f64,
) -> u64 {
    let redo_seg = segment_number(redo, segment_size);
    let min_seg = (redo_seg + min_wal_size / segment_size).saturating_sub(1);
    let max_seg = (redo_seg + max_wal_size / segment_size).saturating_sub(1);
    let distance = (1.0 + CHECKPOINT_COMPLETION_TARGET) * distance_estimate * 1.10;
    let wanted = ((redo.0 as f64 + distance) / segment_size as f64).ceil() as u64;
    wanted.max(min_seg).min(max_seg)
}

/// The next estimate of the WAL written between two checkpoints, given that the last interval
/// wrote `distance` bytes (PostgreSQL's `UpdateCheckPointDistanceEstimate`): a larger
/// interval is taken at once, so that a burst finds its segments ready; a smaller one lowers
/// the estimate by a tenth of the difference, so that a quiet spell gives them up slowly.
pub fn next_distance_estimate(estimate: f64, distance: u64) -> f64 {
    let d = distance as f64;
    if estimate < d {
        d
    } else {
        0.9 * estimate + 0.1 * d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_xlog_file_name() {
        let seg16m = 16 << 20;
        assert_eq!(segment_file_name(1, seg16m), "000000010000000000000001");
        assert_eq!(segment_file_name(256, seg16m), "000000010000000100000000");
        assert_eq!(parse_segment_file_name("000000010000000100000000", seg16m), Some(256));
        assert_eq!(parse_segment_file_name("000000010000000000000100", seg16m), None);
        assert_eq!(parse_segment_file_name("000000020000000000000001", seg16m), None);
        assert_eq!(parse_segment_file_name("00000001000000000000000g", seg16m), None);
        let seg64k = 64 << 10;
        assert_eq!(segment_file_name(0x1_0001, seg64k), "000000010000000100000001");
    }

    #[test]
    fn segment_size_must_be_power_of_two_in_range() {
        assert!(validate_segment_size(64 << 10).is_ok());
        assert!(validate_segment_size(16 << 20).is_ok());
        assert!(validate_segment_size(3 << 20).is_err());
        assert!(validate_segment_size(1024).is_err());
    }
}
