//! Reading the WAL stream back (PostgreSQL `xlogreader.c`: `XLogReadRecord`,
//! `ValidXLogRecordHeader`, `ValidXLogRecord`; our own code).
//!
//! [`WalReader::next`] returns records in stream order and `Ok(None)` at the end of valid
//! WAL. Segment files do not end where the WAL ends (a recycled segment is full of stale
//! bytes from an older part of the stream, a new one may be shorter than a segment), so the
//! end is found by record validity alone: it is wherever the next record fails a check, in
//! this order:
//!
//! 1. its header cannot be read: its segment file does not exist, or the file ends first;
//! 2. its length is below the minimum or above the maximum (zeros, garbage);
//! 3. its resource manager ID is unknown;
//! 4. its `xl_prev` is not the start of the record read before it. This is what stops the
//!    reader at the stale bytes of a recycled segment: they are records (or pieces of
//!    records) of an older part of the stream, whose `xl_prev` points to a record that ended
//!    before them, never to the one just read (see the `wal` module doc, "Recycling"). It is
//!    checked on the header, before the body is read, so a stale header claiming a huge
//!    length costs nothing;
//! 5. its body cannot be read (the file or the segments end first: a torn tail);
//! 6. its CRC-32C does not match (a torn or corrupted write, or garbage that got this far);
//! 7. its body does not decode (impossible without a bug, since the CRC matched).
//!
//! None of these is an error: after a crash the tail of the WAL is expected to be torn, and
//! recovery ends at the last valid record. [`WalReader::stop_reason`] says why reading stopped,
//! in the words PostgreSQL's recovery would log. `Err` is returned only for I/O failures.
//!
//! # Read-ahead
//!
//! Records are small (a one-row insert is under 100 bytes) and each needs its header, then
//! its body: read one `pread` at a time, a decoder spent most of its CPU in system calls. The
//! reader keeps a window of up to [`READ_AHEAD`] bytes of the current segment and serves
//! reads inside it from memory; a read the window does not hold refills it from that point,
//! and a read as large as the window goes straight to the file. Bytes once read are not read
//! again, so the reader sees the WAL as it was when each window was filled: a reader stops
//! at the end of the WAL as it stood then (stale or torn bytes past the end fail the checks
//! above exactly as they would have when read one by one). Every reader here reads WAL
//! that is already written (recovery, decoding up to the flushed position, tools), and stops
//! for good at the first invalid record, so it never waits for bytes it cached to change.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::io::{File, FileSystem};
use crate::types::Lsn;

use super::record::{self, Header, MAX_RECORD_SIZE, MIN_RECORD_SIZE, RECORD_HEADER_SIZE};
use super::segment::{segment_file_name, segment_path};
use super::{DecodedBlock, DecodedRecord, Rmgr};

/// Reads records sequentially from a start position.
pub struct WalReader {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    segment_size: u64,
    /// Where the next record starts.
    pos: Lsn,
    /// Start of the last valid record; `INVALID` until one is read (unless set by
    /// [`WalReader::expect_prev`]).
    last_record: Lsn,
    /// Whether `xl_prev` of the next record is checked against `last_record`.
    check_prev: bool,
    stop_reason: Option<String>,
    current: Option<(u64, Arc<dyn File>)>,
    /// Reused buffer for the record being read.
    buf: Vec<u8>,
    /// The read-ahead window: segment, offset in it, the bytes read from there.
    ahead: (u64, u64, Vec<u8>),
    /// Whether page images are restored ([`WalReader::skip_page_images`]).
    images: bool,
    /// The records whose bodies are read ([`WalReader::read_bodies_of`]); all when `None`.
    wanted: Option<fn(Rmgr, u8) -> bool>,
    /// Block references a record with fewer blocks than the one before left over, their data
    /// buffers kept for the next record with more (a commit between two row changes would
    /// otherwise free one and allocate another).
    spare_blocks: Vec<DecodedBlock>,
}

/// Checks a whole record's CRC and decodes it into `out` (with page images when `images`;
/// block buffers reused from `spare`).
fn validate(
    lsn: Lsn,
    h: &Header,
    rec: &[u8],
    out: &mut DecodedRecord,
    images: bool,
    spare: &mut Vec<DecodedBlock>,
) -> std::result::Result<(), Stop> {
    if !record::crc_matches(rec, h.crc) {
        return Err(format!("incorrect resource manager data checksum in record at {lsn}"));
    }
    record::decode_into(lsn, rec, out, images, spare).map_err(|detail| format!("invalid record at {lsn}: {detail}"))
}

/// The read-ahead window's size (see the module doc).
pub const READ_AHEAD: usize = 128 << 10;

/// The most a record's buffer grows ahead of the bytes read (see `WalReader::read_body`).
const BODY_CHUNK: usize = 1 << 20;

/// Why a read of stream bytes did not complete (the end of valid WAL, not an error).
type Stop = String;

impl WalReader {
    /// A reader whose first record starts at `start`. The first record's `xl_prev` is not
    /// checked (see [`WalReader::expect_prev`]); every later one is.
    pub fn new(fs: Arc<dyn FileSystem>, dir: &Path, start: Lsn, segment_size: u64) -> WalReader {
        WalReader {
            fs,
            dir: dir.to_path_buf(),
            segment_size,
            pos: start,
            last_record: Lsn::INVALID,
            check_prev: false,
            stop_reason: None,
            current: None,
            buf: Vec::new(),
            ahead: (u64::MAX, 0, Vec::new()),
            images: true,
            spare_blocks: Vec::new(),
            wanted: None,
        }
    }

    /// Leaves full-page images out of the records read (`DecodedBlock::image` is `None`): for
    /// a reader that never looks at them (logical decoding), which saves restoring each.
    pub fn skip_page_images(&mut self) {
        self.images = false;
    }

    /// Reads the bodies of only the records `wanted(rmgr, info)` accepts; the others come back
    /// with their header's fields alone (no blocks, no main data, [`Xid::INVALID`] as
    /// `toplevel_xid`), their bodies neither read nor CRC-checked. For a reader that looks at
    /// a few kinds of record (logical decoding skips B-tree and pruning records, two fifths of
    /// TPC-C's WAL by count and by bytes) and reads only WAL known to be valid, as far as
    /// the flushed end: a skipped record's header still passes steps 2-4 of the module doc,
    /// and its `xl_tot_len` is what finds the next record, whose own `xl_prev` check then
    /// fails if that length was wrong. Past the valid end a skipped record is not known to be
    /// complete; such a reader stops at the flushed end before it looks.
    ///
    /// [`Xid::INVALID`]: crate::types::Xid::INVALID
    pub fn read_bodies_of(&mut self, wanted: fn(Rmgr, u8) -> bool) {
        self.wanted = Some(wanted);
    }

    /// Also checks that the first record's `xl_prev` is `prev`.
    pub fn expect_prev(&mut self, prev: Lsn) {
        self.last_record = prev;
        self.check_prev = true;
    }

    /// Why reading stopped, once `next` has returned `Ok(None)`.
    pub fn stop_reason(&self) -> Option<&str> {
        self.stop_reason.as_deref()
    }

    /// The end of the last valid record read (the start position before any record is read):
    /// where a new WAL continues inserting after recovery.
    pub fn end_lsn(&self) -> Lsn {
        self.pos
    }

    /// The start of the last valid record read: `xl_prev` of the next record inserted.
    pub fn last_record_lsn(&self) -> Lsn {
        self.last_record
    }

    /// The next record, or `Ok(None)` at the end of valid WAL.
    #[expect(
        clippy::should_implement_trait,
        reason = "fallible: Result<Option<_>> lets callers use `?` and still see the end"
    )]
    pub fn next(&mut self) -> Result<Option<DecodedRecord>> {
        let mut rec = DecodedRecord::empty();
        Ok(self.next_into(&mut rec)?.then_some(rec))
    }

    /// [`WalReader::next`] into `rec`, reusing its vectors: `Ok(false)` at the end of valid
    /// WAL (`rec` is then unspecified). A caller reading many records allocates nothing per
    /// record but page images.
    pub fn next_into(&mut self, rec: &mut DecodedRecord) -> Result<bool> {
        if self.stop_reason.is_some() {
            return Ok(false);
        }
        match self.read_record(rec)? {
            Ok(()) => {
                self.last_record = rec.lsn;
                self.check_prev = true;
                self.pos = rec.end_lsn;
                Ok(true)
            }
            Err(reason) => {
                self.stop_reason = Some(reason);
                Ok(false)
            }
        }
    }

    fn read_record(&mut self, out: &mut DecodedRecord) -> Result<std::result::Result<(), Stop>> {
        let lsn = self.pos;
        if lsn == Lsn::INVALID {
            return Ok(Err("invalid record position 0/0".to_string()));
        }
        let mut head = [0u8; RECORD_HEADER_SIZE];
        if let Err(stop) = self.read_stream(lsn, &mut head)? {
            return Ok(Err(stop));
        }
        let h = Header::parse(&head);
        let rmgr = match self.validate_header(lsn, &h) {
            Ok(rmgr) => rmgr,
            Err(stop) => return Ok(Err(stop)),
        };
        let tot_len = h.tot_len as usize;
        if let Some(wanted) = self.wanted {
            if !wanted(rmgr, h.info) {
                self.spare_blocks.extend(out.blocks.drain(..).map(|b| DecodedBlock { image: None, ..b }));
                out.main_data.clear();
                (out.lsn, out.end_lsn, out.prev) = (lsn, Lsn(lsn.0 + tot_len as u64), h.prev);
                (out.xid, out.toplevel_xid, out.rmgr, out.info) = (h.xid, crate::types::Xid::INVALID, rmgr, h.info);
                return Ok(Ok(()));
            }
        }
        // Hot path: the whole record lies in the read-ahead window, and is checked and decoded
        // where it is rather than copied out first (a full-page image is 8 kB).
        let mut spare = std::mem::take(&mut self.spare_blocks);
        let result = if let Some(rec) = self.in_window(lsn, tot_len) {
            Ok(validate(lsn, &h, rec, out, self.images, &mut spare))
        } else {
            let mut buf = std::mem::take(&mut self.buf);
            buf.clear();
            buf.extend_from_slice(&head);
            let result = match self.read_body(lsn, tot_len, &mut buf) {
                Ok(Ok(())) => Ok(validate(lsn, &h, &buf, out, self.images, &mut spare)),
                Ok(Err(stop)) => Ok(Err(stop)),
                Err(e) => Err(e),
            };
            self.buf = buf;
            result
        };
        self.spare_blocks = spare;
        result
    }

    /// Appends the body of the record at `lsn` to `buf` (which holds its header), growing
    /// `buf` by at most [`BODY_CHUNK`] beyond the bytes actually read: `xl_tot_len` comes from
    /// disk, and a garbage length (up to [`MAX_RECORD_SIZE`]) must end the WAL, not allocate a
    /// gigabyte first.
    fn read_body(&mut self, lsn: Lsn, tot_len: usize, buf: &mut Vec<u8>) -> Result<std::result::Result<(), Stop>> {
        while buf.len() < tot_len {
            let have = buf.len();
            let n = (tot_len - have).min(BODY_CHUNK);
            buf.resize(have + n, 0);
            if let Err(stop) = self.read_stream(Lsn(lsn.0 + have as u64), &mut buf[have..])? {
                return Ok(Err(stop));
            }
        }
        Ok(Ok(()))
    }

    /// The checks a header alone allows (steps 2-4 of the module doc); the record's resource
    /// manager.
    fn validate_header(&self, lsn: Lsn, h: &Header) -> std::result::Result<Rmgr, Stop> {
        let tot_len = h.tot_len as usize;
        if !(MIN_RECORD_SIZE..=MAX_RECORD_SIZE).contains(&tot_len) {
            return Err(format!("invalid record length at {lsn}: wanted {MIN_RECORD_SIZE}, got {tot_len}"));
        }
        let Some(rmgr) = Rmgr::from_u8(h.rmid) else {
            return Err(format!("invalid resource manager ID {} at {lsn}", h.rmid));
        };
        if self.check_prev && h.prev != self.last_record {
            return Err(format!("record with incorrect prev-link {} at {lsn}", h.prev));
        }
        Ok(rmgr)
    }

    /// The `len` stream bytes from `lsn`, if the read-ahead window holds them all.
    fn in_window(&self, lsn: Lsn, len: usize) -> Option<&[u8]> {
        let (wseg, woff, window) = &self.ahead;
        let (segno, off) = (lsn.0 / self.segment_size, lsn.0 % self.segment_size);
        if *wseg != segno || off < *woff || off + len as u64 > *woff + window.len() as u64 {
            return None;
        }
        let start = (off - woff) as usize;
        Some(&window[start..start + len])
    }

    /// Fills `buf` with stream bytes from `lsn`, crossing segments; `Ok(Err(..))` when the
    /// WAL ends first.
    fn read_stream(&mut self, lsn: Lsn, buf: &mut [u8]) -> Result<std::result::Result<(), Stop>> {
        // Hot path (each record's header): the bytes are all in the read-ahead window.
        if let Some(bytes) = self.in_window(lsn, buf.len()) {
            buf.copy_from_slice(bytes);
            return Ok(Ok(()));
        }
        let mut pos = lsn.0;
        let mut done = 0;
        while done < buf.len() {
            let segno = pos / self.segment_size;
            let off = pos % self.segment_size;
            let want = (self.segment_size - off).min((buf.len() - done) as u64) as usize;
            let file = match self.segment(segno)? {
                Some(f) => f,
                None => {
                    return Ok(Err(format!(
                        "WAL segment {} for {} does not exist",
                        segment_file_name(segno, self.segment_size),
                        Lsn(pos)
                    )));
                }
            };
            let got = self.read_segment(segno, &file, &mut buf[done..done + want], off)?;
            if got < want {
                return Ok(Err(format!(
                    "record at {} runs past the end of segment file {} at {}",
                    self.pos,
                    segment_file_name(segno, self.segment_size),
                    Lsn(pos + got as u64)
                )));
            }
            done += want;
            pos += want as u64;
        }
        Ok(Ok(()))
    }

    /// Reads `buf.len()` bytes at `off` of segment `segno` through the read-ahead window;
    /// returns how many there were (fewer where the file ends). Hot path: once or twice per
    /// record.
    fn read_segment(&mut self, segno: u64, file: &Arc<dyn File>, buf: &mut [u8], off: u64) -> Result<usize> {
        let (wseg, woff, window) = &self.ahead;
        let covered = |woff: u64, len: usize| off >= woff && off + buf.len() as u64 <= woff + len as u64;
        if *wseg != segno || !covered(*woff, window.len()) {
            if buf.len() >= READ_AHEAD {
                return file.read_at(buf, off);
            }
            let (_, _, mut window) = std::mem::replace(&mut self.ahead, (u64::MAX, 0, Vec::new()));
            let len = (self.segment_size - off).min(READ_AHEAD as u64) as usize;
            window.resize(len, 0);
            let got = file.read_at(&mut window, off)?;
            window.truncate(got);
            self.ahead = (segno, off, window);
        }
        let (_, woff, window) = &self.ahead;
        let start = (off - woff) as usize;
        let n = buf.len().min(window.len().saturating_sub(start));
        buf[..n].copy_from_slice(&window[start..start + n]);
        Ok(n)
    }

    fn segment(&mut self, segno: u64) -> Result<Option<Arc<dyn File>>> {
        if let Some((s, f)) = &self.current {
            if *s == segno {
                return Ok(Some(Arc::clone(f)));
            }
        }
        let path = segment_path(&self.dir, segno, self.segment_size);
        if !self.fs.exists(&path) {
            return Ok(None);
        }
        let f = self.fs.open(&path, false)?;
        self.current = Some((segno, Arc::clone(&f)));
        Ok(Some(f))
    }
}

/// Reads the one record that must be at `lsn` (the checkpoint record the control file names).
/// Anything but a valid record there is [`Error::CorruptWal`] naming `lsn`.
pub fn read_record_at(fs: Arc<dyn FileSystem>, dir: &Path, lsn: Lsn, segment_size: u64) -> Result<DecodedRecord> {
    let mut r = WalReader::new(fs, dir, lsn, segment_size);
    match r.next()? {
        Some(rec) => Ok(rec),
        None => Err(Error::corrupt_wal(lsn, r.stop_reason().unwrap_or("no valid record").to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::fault::FaultFs;
    use crate::wal::segment::segment_path;

    /// Found by fuzz target `wal_stream`: a header claiming a 1 GB record made the reader
    /// allocate (and zero) 1 GB before it found that the WAL ends a few bytes later, so every
    /// garbage tail cost recovery a gigabyte and a second.
    #[test]
    fn garbage_record_length_does_not_allocate_it() {
        let fs = FaultFs::new();
        let dir = Path::new("/wal");
        fs.create_dir_all(dir).unwrap();
        let size = 1 << 20;
        let mut head = [0u8; RECORD_HEADER_SIZE];
        head[0..4].copy_from_slice(&(MAX_RECORD_SIZE as u32).to_le_bytes());
        let f = fs.open(&segment_path(dir, 1, size), true).unwrap();
        f.write_at(&head, 0).unwrap();
        f.write_at(&[7u8; 100], RECORD_HEADER_SIZE as u64).unwrap();
        let mut r = WalReader::new(fs, dir, Lsn(size), size);
        assert!(r.next().unwrap().is_none());
        assert!(r.stop_reason().unwrap().contains("runs past the end of segment file"), "{:?}", r.stop_reason());
        assert!(r.buf.capacity() <= 2 * BODY_CHUNK, "buffer grew to {} bytes", r.buf.capacity());
    }
}
