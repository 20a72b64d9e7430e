//! WAL segment files: naming, and writing the stream into them.
//!
//! The WAL stream is cut into files of `segment_size` bytes. Segment `n` holds stream bytes
//! `[n * segment_size, (n + 1) * segment_size)` at file offset `lsn - n * segment_size`; there
//! are no per-page or per-file headers. Files are named as PostgreSQL's `XLogFileName` names
//! them: timeline (always 1), then the segment number split into a "log id" (which 4 GiB of
//! the stream) and the segment within that 4 GiB, each as 8 upper-case hex digits.
//!
//! A segment file is created on first write and grows as the stream is written; it is not
//! preallocated, so the file length is where the written data ends.

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
            // Reserve the whole segment so appends need no block allocation; the file's length
            // still ends where the written WAL ends.
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

    /// Forgets open handles of segments before `segno` (they are being removed).
    pub(crate) fn forget_before(&mut self, segno: u64) {
        self.open.retain(|&s, _| s >= segno);
        self.unsynced.retain(|&s| s >= segno);
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
