//! The commit log (`pg_xact`): two status bits per transaction ID.
//!
//! Algorithm and layout follow PostgreSQL's `clog.c` on top of `slru.c`:
//!
//! ```text
//!   xid ──► page    = xid / 32768          (8192-byte page, 4 XIDs per byte)
//!           byte    = (xid % 32768) / 4
//!           shift   = (xid % 4) * 2        (low bits first)
//!   page ──► segment = page / 32            file pg_xact/%04X, 256 KB at most
//!            offset  = (page % 32) * 8192
//! ```
//!
//! Status values: `0` in progress (also: never assigned, or crashed), `1` committed,
//! `2` aborted, `3` sub-committed. The page number is computed from the 32-bit XID, so
//! the 131072 pages (4096 segments) of the 2^32 space are reused after wraparound; that is
//! safe because a segment is removed (see [`Clog::truncate`]) before the XID counter comes
//! back to it.
//!
//! # Cache
//!
//! Pages live in an in-memory map guarded by one `parking_lot::RwLock`. A status lookup takes
//! the read lock, finds the page and reads two bits: no allocation, no I/O once the page is
//! cached (hot path: it runs for every tuple whose hint bits are not yet set). A miss loads
//! the page from its segment, or uses zeros when the segment or the page does not exist yet
//! (legitimate for XIDs skipped by the test-only XID burner, which never appear in tuples).
//! Only clean pages are evicted, when the cache holds more than [`MAX_CACHED_PAGES`].
//!
//! # WAL rules
//!
//! * The first XID of a page zeroes the page and logs `CLOG ZEROPAGE` ([`INFO_ZEROPAGE`],
//!   main data = page number u32 LE). Status changes themselves are not logged here: the
//!   commit and abort records of the `xact` resource manager are, and their redo sets the bits.
//! * A page is written to its segment only at [`Clog::checkpoint`]. Before the write, WAL is
//!   flushed up to the newest *asynchronous* commit recorded on the dirty pages, so a commit
//!   never reaches the CLOG file before its commit record reaches the WAL (PostgreSQL keeps
//!   group LSNs per page for the same reason).
//! * Truncation logs `CLOG TRUNCATE` ([`INFO_TRUNCATE`], main data = cutoff page u32 LE +
//!   oldest XID u32 LE) and flushes it before any file is removed.
//!
//! Sub-committed (3) is written only by [`Clog::set_tree_status`], for a commit's
//! subtransactions on other pages than the top-level XID's, and resolved to committed by the
//! same call; see `xact::procarray` ("Subtransactions in the proc array").
//!
//! Non-goals: long (more than 4 hex digit) segment names.

use rustc_hash::FxHashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;

use super::{XactLog, XidStatus};
use crate::error::{Error, Result};
use crate::io::FileSystem;
use crate::types::{Lsn, Xid};
use crate::wal::{DecodedRecord, RecordBuilder, Rmgr};

/// Bytes per CLOG page.
pub const CLOG_PAGE_SIZE: usize = 8192;
/// Transactions whose status one page holds (2 bits each).
pub const CLOG_XACTS_PER_PAGE: u32 = (CLOG_PAGE_SIZE * 4) as u32;
/// Pages per segment file (`SLRU_PAGES_PER_SEGMENT`).
pub const CLOG_PAGES_PER_SEGMENT: u32 = 32;
/// Pages in the whole 32-bit XID space: 131072.
pub const CLOG_PAGES_TOTAL: u32 = (1u64 << 32).div_ceil(CLOG_XACTS_PER_PAGE as u64) as u32;
/// Segments in the whole 32-bit XID space: 4096, named `0000` to `0FFF`.
pub const CLOG_SEGMENTS_TOTAL: u32 = CLOG_PAGES_TOTAL / CLOG_PAGES_PER_SEGMENT;
/// Clean pages kept in memory before eviction starts (PostgreSQL 15 keeps at most 128).
pub const MAX_CACHED_PAGES: usize = 1024;
/// Directory of the segment files inside the data directory.
pub const CLOG_DIR: &str = "pg_xact";

/// `CLOG ZEROPAGE`: main data = page number (u32 LE).
pub const INFO_ZEROPAGE: u8 = 0x00;
/// `CLOG TRUNCATE`: main data = cutoff page (u32 LE) + oldest XID (u32 LE).
pub const INFO_TRUNCATE: u8 = 0x10;

const SEGMENT_BYTES: u64 = CLOG_PAGE_SIZE as u64 * CLOG_PAGES_PER_SEGMENT as u64;

const _: () = assert!(CLOG_XACTS_PER_PAGE == 32768);
const _: () = assert!(CLOG_SEGMENTS_TOTAL == 4096);

/// The page holding `xid`'s status.
pub fn page_of(xid: Xid) -> u32 {
    xid.0 / CLOG_XACTS_PER_PAGE
}

/// The segment holding `page`.
pub fn segment_of(page: u32) -> u32 {
    page / CLOG_PAGES_PER_SEGMENT
}

/// The file name of a segment: four upper-case hex digits, as PostgreSQL names them.
pub fn segment_file_name(segment: u32) -> String {
    format!("{segment:04X}")
}

/// True when `xid` is the first XID ever assigned on its page: the page's first slot, or
/// XID 3 on page 0 (XIDs 0 to 2 are never assigned).
pub fn is_first_on_page(xid: Xid) -> bool {
    xid.0.is_multiple_of(CLOG_XACTS_PER_PAGE) || xid == Xid::FIRST_NORMAL
}

/// Whether page `a` is older than page `b` in the circular 32-bit space
/// (`CLOGPagePrecedes`). Both the first and the last XID of `a` must precede the first XID
/// of `b`; comparing an XID slightly inside each page keeps special XIDs out of the test.
pub fn page_precedes(a: u32, b: u32) -> bool {
    let xa = Xid(a.wrapping_mul(CLOG_XACTS_PER_PAGE).wrapping_add(Xid::FIRST_NORMAL.0 + 1));
    let xb = Xid(b.wrapping_mul(CLOG_XACTS_PER_PAGE).wrapping_add(Xid::FIRST_NORMAL.0 + 1));
    xa.precedes(xb) && xa.precedes(Xid(xb.0.wrapping_add(CLOG_XACTS_PER_PAGE - 1)))
}

/// Whether every page of the segment starting at `segment_first_page` precedes `cutoff_page`
/// (`SlruMayDeleteSegment`).
fn segment_precedes(segment_first_page: u32, cutoff_page: u32) -> bool {
    let last = segment_first_page + CLOG_PAGES_PER_SEGMENT - 1;
    page_precedes(segment_first_page, cutoff_page) && page_precedes(last, cutoff_page)
}

struct CachedPage {
    bytes: Box<[u8; CLOG_PAGE_SIZE]>,
    dirty: bool,
    /// Bumped by every change, so a checkpoint can tell whether its copy is still current.
    version: u64,
    /// Newest asynchronous commit LSN on this page: WAL must be flushed past it before the
    /// page is written.
    async_lsn: Lsn,
}

impl CachedPage {
    fn zeroed() -> CachedPage {
        CachedPage { bytes: Box::new([0u8; CLOG_PAGE_SIZE]), dirty: true, version: 0, async_lsn: Lsn::INVALID }
    }
}

#[derive(Default)]
struct Cache {
    pages: FxHashMap<u32, CachedPage>,
    /// Source of page versions, unique across pages and page reincarnations.
    last_version: u64,
    /// The page of the newest XID extended so far (to refuse an apparent-wraparound truncation).
    latest_page: Option<u32>,
}

impl Cache {
    fn bump_version(&mut self) -> u64 {
        self.last_version += 1;
        self.last_version
    }
}

/// The commit log of one data directory.
pub struct Clog {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    cache: RwLock<Cache>,
}

impl Clog {
    /// Opens (creating if needed) `<data_dir>/pg_xact`. Pages are loaded lazily.
    pub fn open(fs: Arc<dyn FileSystem>, data_dir: &Path) -> Result<Clog> {
        let dir = data_dir.join(CLOG_DIR);
        fs.create_dir_all(&dir)?;
        Ok(Clog { fs, dir, cache: RwLock::new(Cache::default()) })
    }

    /// The `pg_xact` directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The status stored for `xid`. Hot path: one read lock and two bits when cached.
    pub fn status(&self, xid: Xid) -> Result<XidStatus> {
        let page = page_of(xid);
        {
            let cache = self.cache.read();
            if let Some(p) = cache.pages.get(&page) {
                return Ok(read_bits(&p.bytes, xid));
            }
        }
        let loaded = self.load_page(page)?;
        let status = read_bits(&loaded, xid);
        let mut cache = self.cache.write();
        if !cache.pages.contains_key(&page) {
            evict_if_full(&mut cache);
            cache.pages.insert(page, CachedPage { bytes: loaded, dirty: false, version: 0, async_lsn: Lsn::INVALID });
            return Ok(status);
        }
        // Someone else cached (and maybe changed) the page meanwhile: theirs is current.
        Ok(cache.pages.get(&page).map_or(status, |p| read_bits(&p.bytes, xid)))
    }

    /// Stores `status` for `xid`.
    pub fn set_status(&self, xid: Xid, status: XidStatus) -> Result<()> {
        self.set_status_lsn(xid, status, Lsn::INVALID)
    }

    /// Stores `status` for `xid`, remembering `async_commit_lsn` (the commit record of an
    /// asynchronous commit, `Lsn::INVALID` otherwise) so the page is not written before WAL
    /// is flushed past it.
    pub fn set_status_lsn(&self, xid: Xid, status: XidStatus, async_commit_lsn: Lsn) -> Result<()> {
        let page = page_of(xid);
        loop {
            self.ensure_cached(page)?;
            let mut cache = self.cache.write();
            let version = cache.bump_version();
            // None: evicted between ensure_cached and here (only clean pages are evicted, so
            // reloading is exact); try again.
            if let Some(p) = cache.pages.get_mut(&page) {
                write_bits(&mut p.bytes, xid, status);
                p.dirty = true;
                p.version = version;
                p.async_lsn = p.async_lsn.max(async_commit_lsn);
                return Ok(());
            }
        }
    }

    /// Stores the final `status` of top-level `xid` and of its subtransactions `subxids`
    /// (`TransactionIdSetTreeStatus`). For a commit with subtransactions on other pages than
    /// `xid`'s, those are first marked sub-committed, then `xid`'s page is updated at once
    /// (`xid` and the subtransactions on that page: one write lock, so no reader sees part
    /// of it), then the others are marked committed: at no point can the CLOG say a
    /// subtransaction committed while its parent does not. An abort needs no order (every
    /// state before the last says "not committed").
    pub fn set_tree_status(&self, xid: Xid, subxids: &[Xid], status: XidStatus, async_commit_lsn: Lsn) -> Result<()> {
        let top_page = page_of(xid);
        let (same, other): (Vec<Xid>, Vec<Xid>) = subxids.iter().partition(|s| page_of(**s) == top_page);
        if status == XidStatus::Committed {
            for &s in &other {
                self.set_status_lsn(s, XidStatus::SubCommitted, async_commit_lsn)?;
            }
        }
        let mut first = vec![xid];
        first.extend_from_slice(&same);
        self.set_page_statuses(top_page, &first, status, async_commit_lsn)?;
        for &s in &other {
            self.set_status_lsn(s, status, async_commit_lsn)?;
        }
        Ok(())
    }

    /// Stores `status` for every XID of `xids`, all on `page`, under one write lock.
    fn set_page_statuses(&self, page: u32, xids: &[Xid], status: XidStatus, async_commit_lsn: Lsn) -> Result<()> {
        debug_assert!(xids.iter().all(|x| page_of(*x) == page));
        loop {
            self.ensure_cached(page)?;
            let mut cache = self.cache.write();
            let version = cache.bump_version();
            if let Some(p) = cache.pages.get_mut(&page) {
                for &x in xids {
                    write_bits(&mut p.bytes, x, status);
                }
                p.dirty = true;
                p.version = version;
                p.async_lsn = p.async_lsn.max(async_commit_lsn);
                return Ok(());
            }
        }
    }

    /// The newest asynchronous commit LSN recorded on `xid`'s page (`TransactionIdGetCommitLSN`
    /// at page granularity): WAL flushed past it makes a commit hint for `xid` safe to set.
    /// `Lsn::INVALID` when the page is not cached: it was then written, which flushed WAL.
    pub fn async_commit_lsn(&self, xid: Xid) -> Lsn {
        let cache = self.cache.read();
        cache.pages.get(&page_of(xid)).map_or(Lsn::INVALID, |p| p.async_lsn)
    }

    /// Makes sure the page of a newly assigned `xid` exists (`ExtendCLOG`): at the first XID
    /// of a page, the page is zeroed and `CLOG ZEROPAGE` is logged, unless the page is already
    /// cached and all zero (zeroed earlier by redo or by [`Clog::zero_page`]).
    pub fn extend(&self, xid: Xid, log: &dyn XactLog) -> Result<()> {
        if !is_first_on_page(xid) {
            return Ok(());
        }
        self.zero_page(page_of(xid), log)
    }

    /// Zeroes `page` and logs `CLOG ZEROPAGE`, unless it is already cached and all zero.
    pub fn zero_page(&self, page: u32, log: &dyn XactLog) -> Result<()> {
        {
            let cache = self.cache.read();
            if let Some(p) = cache.pages.get(&page) {
                if p.bytes.iter().all(|&b| b == 0) {
                    return Ok(());
                }
            }
        }
        log.log(&RecordBuilder {
            toplevel_xid: crate::types::Xid::INVALID,
            rmgr: Rmgr::Clog,
            info: INFO_ZEROPAGE,
            xid: Xid::INVALID,
            blocks: Vec::new(),
            main_data: page.to_le_bytes().to_vec(),
        })?;
        self.install_zero_page(page);
        Ok(())
    }

    fn install_zero_page(&self, page: u32) {
        let mut cache = self.cache.write();
        if !cache.pages.contains_key(&page) {
            evict_if_full(&mut cache);
        }
        let version = cache.bump_version();
        let mut fresh = CachedPage::zeroed();
        fresh.version = version;
        cache.pages.insert(page, fresh);
        cache.latest_page = Some(page);
    }

    /// Tells the CLOG where the XID counter is (at startup and after recovery), so that a
    /// truncation past it is refused as an apparent wraparound.
    pub fn set_latest_xid(&self, next_xid: Xid) {
        self.cache.write().latest_page = Some(page_of(next_xid));
    }

    /// Writes every dirty page to its segment and fsyncs the segments (SLRU write-out at a
    /// checkpoint). WAL is first flushed past the newest asynchronous commit on those pages.
    pub fn checkpoint(&self, log: &dyn XactLog) -> Result<()> {
        let mut copies: Vec<(u32, u64, Box<[u8; CLOG_PAGE_SIZE]>)> = Vec::new();
        let mut flush_to = Lsn::INVALID;
        {
            let cache = self.cache.read();
            for (&page, p) in cache.pages.iter().filter(|(_, p)| p.dirty) {
                copies.push((page, p.version, p.bytes.clone()));
                flush_to = flush_to.max(p.async_lsn);
            }
        }
        if copies.is_empty() {
            return Ok(());
        }
        if flush_to != Lsn::INVALID {
            log.flush(flush_to)?;
        }
        copies.sort_by_key(|c| c.0);
        let mut i = 0;
        while i < copies.len() {
            let segment = segment_of(copies[i].0);
            let path = self.dir.join(segment_file_name(segment));
            let file = self.fs.open(&path, true)?;
            while let Some((page, _, bytes)) = copies.get(i).filter(|c| segment_of(c.0) == segment) {
                let offset = u64::from(page % CLOG_PAGES_PER_SEGMENT) * CLOG_PAGE_SIZE as u64;
                file.write_at(&bytes[..], offset)?;
                i += 1;
            }
            file.sync()?;
        }
        self.fs.sync_dir(&self.dir)?;
        let mut cache = self.cache.write();
        for (page, version, _) in &copies {
            if let Some(p) = cache.pages.get_mut(page) {
                if p.version == *version {
                    p.dirty = false;
                }
            }
        }
        Ok(())
    }

    /// Removes the segments wholly older than `oldest_xid`'s segment (`TruncateCLOG`).
    /// `oldest_xid` must be the database's oldest frozen XID: statuses below it are never
    /// asked for again. Logs and flushes `CLOG TRUNCATE` first. Returns the segments removed.
    pub fn truncate(&self, oldest_xid: Xid, log: &dyn XactLog) -> Result<usize> {
        let cutoff_page = page_of(oldest_xid);
        if self.removable_segments(cutoff_page)?.is_empty() {
            return Ok(0);
        }
        let mut data = Vec::with_capacity(8);
        data.extend_from_slice(&cutoff_page.to_le_bytes());
        data.extend_from_slice(&oldest_xid.0.to_le_bytes());
        let end = log.log(&RecordBuilder {
            toplevel_xid: crate::types::Xid::INVALID,
            rmgr: Rmgr::Clog,
            info: INFO_TRUNCATE,
            xid: Xid::INVALID,
            blocks: Vec::new(),
            main_data: data,
        })?;
        log.flush(end)?;
        self.truncate_segments(cutoff_page)
    }

    /// Segment numbers present on disk that lie wholly before `cutoff_page`'s segment.
    fn removable_segments(&self, cutoff_page: u32) -> Result<Vec<u32>> {
        let cutoff = cutoff_page - cutoff_page % CLOG_PAGES_PER_SEGMENT;
        if let Some(latest) = self.cache.read().latest_page {
            if page_precedes(latest, cutoff) {
                // The counter has apparently wrapped past the cutoff: removing would lose
                // live statuses (SimpleLruTruncate's "apparent wraparound").
                return Ok(Vec::new());
            }
        }
        let mut out = Vec::new();
        for name in self.fs.list(&self.dir)? {
            let Some(segment) = parse_segment_name(&name) else {
                continue;
            };
            if segment_precedes(segment * CLOG_PAGES_PER_SEGMENT, cutoff) {
                out.push(segment);
            }
        }
        Ok(out)
    }

    fn truncate_segments(&self, cutoff_page: u32) -> Result<usize> {
        let segments = self.removable_segments(cutoff_page)?;
        {
            let mut cache = self.cache.write();
            cache.pages.retain(|&page, _| !segments.contains(&segment_of(page)));
        }
        for &segment in &segments {
            self.fs.remove(&self.dir.join(segment_file_name(segment)))?;
        }
        self.fs.sync_dir(&self.dir)?;
        Ok(segments.len())
    }

    /// Replays a `CLOG` record.
    pub fn redo(&self, rec: &DecodedRecord) -> Result<()> {
        match rec.info {
            INFO_ZEROPAGE => {
                let page = read_u32(rec, 0)?;
                self.install_zero_page(page);
                Ok(())
            }
            INFO_TRUNCATE => {
                let page = read_u32(rec, 0)?;
                self.truncate_segments(page).map(|_| ())
            }
            other => Err(Error::corrupt_wal(rec.lsn, format!("unknown CLOG record info {other:#04x}"))),
        }
    }

    /// A one-line rendering of the page holding `xid` (for `settle inspect` and tests):
    /// its number, segment and how many XIDs are in each state.
    pub fn describe_page(&self, xid: Xid) -> Result<String> {
        let page = page_of(xid);
        self.ensure_cached(page)?;
        let cache = self.cache.read();
        let mut counts = [0usize; 4];
        if let Some(p) = cache.pages.get(&page) {
            for byte in p.bytes.iter() {
                for shift in [0, 2, 4, 6] {
                    counts[usize::from((byte >> shift) & 0b11)] += 1;
                }
            }
        }
        let first = page.wrapping_mul(CLOG_XACTS_PER_PAGE);
        Ok(format!(
            "clog page {page} (segment {}, xids {first}..={}): in progress {}, committed {}, aborted {}, sub-committed {}",
            segment_file_name(segment_of(page)),
            first.wrapping_add(CLOG_XACTS_PER_PAGE - 1),
            counts[0],
            counts[1],
            counts[2],
            counts[3]
        ))
    }

    /// Number of pages in memory and how many of them are dirty (for `check` and tests).
    pub fn cached_pages(&self) -> (usize, usize) {
        let cache = self.cache.read();
        (cache.pages.len(), cache.pages.values().filter(|p| p.dirty).count())
    }

    fn ensure_cached(&self, page: u32) -> Result<()> {
        if self.cache.read().pages.contains_key(&page) {
            return Ok(());
        }
        let loaded = self.load_page(page)?;
        let mut cache = self.cache.write();
        if !cache.pages.contains_key(&page) {
            evict_if_full(&mut cache);
            cache.pages.insert(page, CachedPage { bytes: loaded, dirty: false, version: 0, async_lsn: Lsn::INVALID });
        }
        Ok(())
    }

    /// Reads `page` from its segment; zeros when the segment or the page is not there yet.
    fn load_page(&self, page: u32) -> Result<Box<[u8; CLOG_PAGE_SIZE]>> {
        let mut bytes = Box::new([0u8; CLOG_PAGE_SIZE]);
        let path = self.dir.join(segment_file_name(segment_of(page)));
        if !self.fs.exists(&path) {
            return Ok(bytes);
        }
        let file = self.fs.open(&path, false)?;
        let len = file.len()?;
        if len % CLOG_PAGE_SIZE as u64 != 0 || len > SEGMENT_BYTES {
            return Err(Error::CorruptFile {
                path,
                detail: format!(
                    "CLOG segment is {len} bytes, expected a multiple of {CLOG_PAGE_SIZE} up to {SEGMENT_BYTES}"
                ),
            });
        }
        let offset = u64::from(page % CLOG_PAGES_PER_SEGMENT) * CLOG_PAGE_SIZE as u64;
        if offset < len {
            file.read_exact_at(&mut bytes[..], offset)?;
        }
        Ok(bytes)
    }
}

fn parse_segment_name(name: &str) -> Option<u32> {
    if name.len() != 4 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(name, 16).ok().filter(|&s| s < CLOG_SEGMENTS_TOTAL)
}

fn bit_position(xid: Xid) -> (usize, u32) {
    let index = xid.0 % CLOG_XACTS_PER_PAGE;
    ((index / 4) as usize, (index % 4) * 2)
}

fn read_bits(page: &[u8; CLOG_PAGE_SIZE], xid: Xid) -> XidStatus {
    let (byte, shift) = bit_position(xid);
    // byte < CLOG_PAGE_SIZE by construction (index < 32768).
    let bits = page.get(byte).map_or(0, |b| (b >> shift) & 0b11);
    XidStatus::from_bits(bits)
}

fn write_bits(page: &mut [u8; CLOG_PAGE_SIZE], xid: Xid, status: XidStatus) {
    let (byte, shift) = bit_position(xid);
    if let Some(b) = page.get_mut(byte) {
        *b = (*b & !(0b11 << shift)) | ((status as u8) << shift);
    }
}

/// Evicts one clean page when the cache is full: the one farthest behind the latest page.
fn evict_if_full(cache: &mut Cache) {
    if cache.pages.len() < MAX_CACHED_PAGES {
        return;
    }
    let latest = cache.latest_page.unwrap_or(0);
    let victim = cache
        .pages
        .iter()
        .filter(|(_, p)| !p.dirty)
        .map(|(&page, _)| page)
        .max_by_key(|&page| latest.wrapping_sub(page) % CLOG_PAGES_TOTAL);
    if let Some(v) = victim {
        cache.pages.remove(&v);
    }
}

fn read_u32(rec: &DecodedRecord, at: usize) -> Result<u32> {
    rec.main_data
        .get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| Error::corrupt_wal(rec.lsn, format!("{} record too short", rec.rmgr.name())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::RealFs;
    use crate::xact::test_log::RecordingLog;

    fn open(dir: &Path) -> Clog {
        Clog::open(Arc::new(RealFs), dir).expect("open clog")
    }

    #[test]
    fn status_round_trips_through_checkpoint_and_reopen() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let log = RecordingLog::default();
        let xids = [Xid(3), Xid(4), Xid(32767), Xid(32768), Xid(40_000), Xid(32768 * 40 + 7)];
        {
            let clog = open(tmp.path());
            for (i, &x) in xids.iter().enumerate() {
                let s = if i % 2 == 0 { XidStatus::Committed } else { XidStatus::Aborted };
                clog.set_status(x, s)?;
            }
            clog.set_status(Xid(5), XidStatus::SubCommitted)?;
            clog.checkpoint(&log)?;
            assert_eq!(clog.cached_pages().1, 0, "checkpoint leaves no dirty page");
        }
        let clog = open(tmp.path());
        for (i, &x) in xids.iter().enumerate() {
            let s = if i % 2 == 0 { XidStatus::Committed } else { XidStatus::Aborted };
            assert_eq!(clog.status(x)?, s, "xid {x}");
        }
        assert_eq!(clog.status(Xid(5))?, XidStatus::SubCommitted);
        assert_eq!(clog.status(Xid(6))?, XidStatus::InProgress);
        assert_eq!(clog.status(Xid(32768 * 1000))?, XidStatus::InProgress, "missing segment reads zeros");
        let names = RealFs.list(&tmp.path().join(CLOG_DIR))?;
        assert_eq!(names, vec!["0000".to_string(), "0001".to_string()]);
        Ok(())
    }

    #[test]
    fn extend_zeroes_and_logs_once_per_page() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let log = RecordingLog::default();
        let clog = open(tmp.path());
        clog.extend(Xid(3), &log)?;
        clog.extend(Xid(4), &log)?;
        clog.extend(Xid(32768), &log)?;
        clog.extend(Xid(32768), &log)?;
        let recs = log.records();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].rmgr, Rmgr::Clog);
        assert_eq!(recs[1].info, INFO_ZEROPAGE);
        assert_eq!(recs[1].main_data, 1u32.to_le_bytes().to_vec());
        // A page holding statuses is zeroed again at its first XID (new epoch).
        clog.set_status(Xid(32769), XidStatus::Committed)?;
        clog.extend(Xid(32768), &log)?;
        assert_eq!(clog.status(Xid(32769))?, XidStatus::InProgress);
        assert_eq!(log.records().len(), 3);
        Ok(())
    }

    #[test]
    fn segment_of_unexpected_size_is_corrupt_file() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let clog = open(tmp.path());
        let path = tmp.path().join(CLOG_DIR).join("0000");
        std::fs::write(&path, [0u8; 100]).expect("write");
        match clog.status(Xid(10)) {
            Err(Error::CorruptFile { path: p, .. }) => assert_eq!(p, path),
            other => panic!("expected CorruptFile, got {other:?}"),
        }
        Ok(())
    }

    fn make_segment(dir: &Path, segment: u32) {
        let path = dir.join(CLOG_DIR).join(segment_file_name(segment));
        std::fs::write(path, vec![0u8; CLOG_PAGE_SIZE]).expect("write segment");
    }

    fn segments(dir: &Path) -> Vec<String> {
        RealFs.list(&dir.join(CLOG_DIR)).expect("list")
    }

    #[test]
    fn truncate_removes_only_older_segments() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let log = RecordingLog::default();
        let clog = open(tmp.path());
        for s in 0..5 {
            make_segment(tmp.path(), s);
        }
        // Oldest XID in the middle of segment 3: segments 0..=2 go, 3 and 4 stay.
        let per_segment = CLOG_XACTS_PER_PAGE * CLOG_PAGES_PER_SEGMENT;
        let oldest = Xid(3 * per_segment + 12_345);
        assert_eq!(clog.truncate(oldest, &log)?, 3);
        assert_eq!(segments(tmp.path()), vec!["0003", "0004"]);
        let recs = log.records();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].info, INFO_TRUNCATE);
        let mut expect = page_of(oldest).to_le_bytes().to_vec();
        expect.extend_from_slice(&oldest.0.to_le_bytes());
        assert_eq!(recs[0].main_data, expect);
        assert_eq!(log.flushed(), recs[0].end, "truncate record is flushed before removal");
        // Nothing more to remove: no record.
        assert_eq!(clog.truncate(oldest, &log)?, 0);
        assert_eq!(log.records().len(), 1);
        Ok(())
    }

    #[test]
    fn truncate_across_the_wrap_keeps_segments_after_it() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let log = RecordingLog::default();
        let clog = open(tmp.path());
        for s in [0x0FFD, 0x0FFE, 0x0FFF, 0x0000, 0x0001] {
            make_segment(tmp.path(), s);
        }
        // The counter wrapped: live XIDs run from segment 0FFF into segment 0001.
        let oldest = Xid(0x0FFF * CLOG_XACTS_PER_PAGE * CLOG_PAGES_PER_SEGMENT + 99);
        clog.extend(Xid(CLOG_XACTS_PER_PAGE * CLOG_PAGES_PER_SEGMENT), &log)?;
        assert_eq!(clog.truncate(oldest, &log)?, 2);
        assert_eq!(segments(tmp.path()), vec!["0000", "0001", "0FFF"]);
        // Later the oldest XID moves past the wrap: 0FFF goes, 0000 and 0001 stay.
        assert_eq!(clog.truncate(Xid(5), &log)?, 1);
        assert_eq!(segments(tmp.path()), vec!["0000", "0001"]);
        Ok(())
    }

    #[test]
    fn cache_evicts_clean_pages_only_and_rereads_them() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let log = RecordingLog::default();
        let clog = open(tmp.path());
        let pages = MAX_CACHED_PAGES as u32 + 100;
        for page in 0..pages {
            clog.set_status(Xid(page * CLOG_XACTS_PER_PAGE + 7), XidStatus::Committed)?;
        }
        assert_eq!(clog.cached_pages(), (pages as usize, pages as usize), "dirty pages stay");
        clog.checkpoint(&log)?;
        let clog = open(tmp.path());
        for page in 0..pages {
            assert_eq!(clog.status(Xid(page * CLOG_XACTS_PER_PAGE + 7))?, XidStatus::Committed);
            assert!(clog.cached_pages().0 <= MAX_CACHED_PAGES);
        }
        // Page 0 may have been evicted meanwhile; changing it then reloads it from its segment.
        clog.set_status(Xid(8), XidStatus::Aborted)?;
        clog.checkpoint(&log)?;
        let clog = open(tmp.path());
        assert_eq!(clog.status(Xid(7))?, XidStatus::Committed);
        assert_eq!(clog.status(Xid(8))?, XidStatus::Aborted);
        assert!(clog.cached_pages().0 <= MAX_CACHED_PAGES);
        let line = clog.describe_page(Xid(7))?;
        assert_eq!(
            line,
            "clog page 0 (segment 0000, xids 0..=32767): in progress 32766, committed 1, aborted 1, sub-committed 0"
        );
        Ok(())
    }

    #[test]
    fn page_precedes_is_circular() {
        assert!(page_precedes(0, 1));
        assert!(!page_precedes(1, 0));
        assert!(page_precedes(CLOG_PAGES_TOTAL - 1, 0), "last page precedes page 0 after a wrap");
        assert!(!page_precedes(5, 5));
    }

    #[test]
    fn redo_replays_zeropage_and_truncate() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let clog = open(tmp.path());
        make_segment(tmp.path(), 0);
        make_segment(tmp.path(), 1);
        clog.set_status(Xid(40), XidStatus::Committed)?;
        let mut rec =
            crate::xact::test_log::decoded(Rmgr::Clog, INFO_ZEROPAGE, Xid::INVALID, 0u32.to_le_bytes().to_vec());
        clog.redo(&rec)?;
        assert_eq!(clog.status(Xid(40))?, XidStatus::InProgress);
        let page = CLOG_PAGES_PER_SEGMENT;
        rec.main_data = (page + 1).to_le_bytes().to_vec();
        clog.redo(&rec)?; // the counter has moved on to page 33
        rec.info = INFO_TRUNCATE;
        rec.main_data = [page.to_le_bytes(), (page * CLOG_XACTS_PER_PAGE).to_le_bytes()].concat();
        clog.redo(&rec)?;
        assert_eq!(segments(tmp.path()), vec!["0001"]);
        rec.main_data.truncate(2);
        assert!(matches!(clog.redo(&rec), Err(Error::CorruptWal { .. })));
        Ok(())
    }
}
