//! WAL record framing: assembling a [`RecordBuilder`] into bytes and decoding bytes back into
//! a [`DecodedRecord`] (PostgreSQL `xloginsert.c` `XLogRecordAssemble` and `xlogreader.c`
//! `DecodeXLogRecord`; our own layout).
//!
//! ```text
//! header (24 bytes)
//!   0  xl_tot_len u32   whole record, header included
//!   4  xl_xid     u32
//!   8  xl_prev    u64   start LSN of the previous record
//!  16  xl_info    u8
//!  17  xl_rmid    u8
//!  18  pad        2 bytes (zero)
//!  20  xl_crc     u32   CRC-32C of the body, then of header bytes 0..20
//! body
//!   nblocks u8          bit 0x80: a top-level XID follows (the rest is the block count)
//!   [toplevel_xid u32]  a subtransaction's record under wal_level = logical
//!   block header x nblocks
//!     id u8, fork u8, flags u8 (1 HAS_IMAGE, 2 HAS_DATA, 4 WILL_INIT; both 1 and 2 when
//!       the block keeps its data beside its image),
//!     rel u32, block u32, data_len u32,
//!     [if HAS_IMAGE] image_len u16, hole_offset u16, hole_length u16
//!   main_len u32
//!   per block, in header order: image bytes (page minus hole) if any, then block data if any
//!   main data
//! ```
//!
//! The body CRC is computed when the record is assembled, outside the insert lock, over the
//! pieces where the caller keeps them (a page image is read in place); the insert lock only
//! patches `xl_prev`, folds the header into the CRC with `crc32c_append` and copies the header
//! and the pieces into the WAL buffer.

use crate::error::{Error, Result};
use crate::page::BLCKSZ;
use crate::types::{BlockNumber, BufferTag, Fork, Lsn, Oid, Xid};

use super::{DecodedBlock, DecodedRecord, RecordBuilder, Rmgr};

/// Size of the fixed record header.
pub const RECORD_HEADER_SIZE: usize = 24;
/// Smallest possible record: a header, a zero block count and a zero main-data length.
pub const MIN_RECORD_SIZE: usize = RECORD_HEADER_SIZE + 1 + 4;
/// Largest record accepted (PostgreSQL's `XLogRecordMaxSize` is about 1 GB too).
pub const MAX_RECORD_SIZE: usize = 1 << 30;
/// Most block references one record may carry (PostgreSQL's `XLR_MAX_BLOCK_ID` + 1).
pub const MAX_BLOCKS_PER_RECORD: usize = 33;

/// A flag of the first byte of a heap or visibility-map record's main data: the record
/// initialized the page it changes (redo initializes it again rather than expecting it).
pub const FLAG_INIT_PAGE: u8 = 0x01;

/// Byte offset of `xl_prev` in the header.
pub(crate) const PREV_OFFSET: usize = 8;
/// Byte offset of `xl_crc` in the header.
pub(crate) const CRC_OFFSET: usize = 20;

const FLAG_HAS_IMAGE: u8 = 0x01;
const FLAG_HAS_DATA: u8 = 0x02;
const FLAG_WILL_INIT: u8 = 0x04;
const KNOWN_FLAGS: u8 = FLAG_HAS_IMAGE | FLAG_HAS_DATA | FLAG_WILL_INIT;
/// Set in the block-count byte when a top-level XID follows it.
const HAS_TOPLEVEL_XID: u8 = 0x80;

const _: () = assert!(BLCKSZ <= u16::MAX as usize + 1);

/// The "hole" of a page image: the unused bytes between `pd_lower` and `pd_upper` of a
/// standard page, left out of the image. `(offset, length)`; `(0, 0)` for a non-standard page.
pub fn page_hole(page: &[u8]) -> (usize, usize) {
    let (Some(lo), Some(up)) = (page.get(12..14), page.get(14..16)) else {
        return (0, 0);
    };
    let lower = usize::from(u16::from_le_bytes([lo[0], lo[1]]));
    let upper = usize::from(u16::from_le_bytes([up[0], up[1]]));
    if page.len() == BLCKSZ && 24 <= lower && lower <= upper && upper <= BLCKSZ {
        (lower, upper - lower)
    } else {
        (0, 0)
    }
}

/// The page LSN (`pd_lsn`, bytes 0..8) of a page image.
pub fn page_lsn(page: &[u8]) -> Lsn {
    match page.get(0..8) {
        Some(b) => Lsn(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])),
        None => Lsn::INVALID,
    }
}

/// What [`assemble_head`] decided.
pub(crate) struct Assembled {
    /// The whole record's length, header included.
    pub tot_len: usize,
    /// CRC-32C of the body (everything after the header).
    pub body_crc: u32,
    /// Full-page images attached.
    pub fpi: u64,
    /// Bit `i` set: block `i` (in `rec.blocks` order) carries an image rather than its data.
    pub images: u64,
    /// Some block could take an image but did not because its LSN was after `redo_ptr`: if
    /// the redo pointer moved in the meantime the record must be assembled again.
    pub depends_on_redo: bool,
}

const _: () = assert!(MAX_BLOCKS_PER_RECORD <= u64::BITS as usize);

fn wants_image(block: &super::BlockRef<'_>, full_page_writes: bool, redo_ptr: Lsn) -> bool {
    match block.page {
        Some(page) if full_page_writes && !block.will_init => page_lsn(page) <= redo_ptr,
        _ => false,
    }
}

/// Rejects what a caller must never pass: too many blocks, duplicate ids, wrong page size.
fn check_blocks(rec: &RecordBuilder<'_>) -> Result<()> {
    if rec.blocks.len() > MAX_BLOCKS_PER_RECORD {
        return Err(Error::invalid(format!(
            "WAL record has {} block references, at most {MAX_BLOCKS_PER_RECORD} allowed",
            rec.blocks.len()
        )));
    }
    for (i, b) in rec.blocks.iter().enumerate() {
        if rec.blocks[..i].iter().any(|o| o.id == b.id) {
            return Err(Error::invalid(format!("duplicate WAL block id {}", b.id)));
        }
        if let Some(page) = b.page {
            if page.len() != BLCKSZ {
                return Err(Error::invalid(format!("page of block {} is {} bytes, not {BLCKSZ}", b.id, page.len())));
            }
        }
    }
    Ok(())
}

/// Assembles the fixed part of `rec` (header with `xl_prev` and `xl_crc` left zero, block
/// headers, main-data length) into `head`, which is cleared first, and computes the body's
/// CRC over it and the payload [`for_each_payload`] yields, read where the caller keeps it.
///
/// Hot path: a full-page image is read once here (for the CRC) and once when it is copied
/// into the WAL buffer, never copied into an intermediate buffer; `head` is a reused scratch
/// buffer, so a record costs no allocation.
pub(crate) fn assemble_head(
    head: &mut Vec<u8>,
    rec: &RecordBuilder<'_>,
    full_page_writes: bool,
    redo_ptr: Lsn,
) -> Result<Assembled> {
    check_blocks(rec)?;
    head.clear();
    head.resize(RECORD_HEADER_SIZE, 0);
    if rec.toplevel_xid.is_valid() {
        head.push(rec.blocks.len() as u8 | HAS_TOPLEVEL_XID);
        head.extend_from_slice(&rec.toplevel_xid.0.to_le_bytes());
    } else {
        head.push(rec.blocks.len() as u8);
    }
    let (mut fpi, mut images, mut depends_on_redo) = (0, 0u64, false);
    let mut payload_len = rec.main_data.len();
    for (i, b) in rec.blocks.iter().enumerate() {
        let image = wants_image(b, full_page_writes, redo_ptr);
        depends_on_redo |= !image && full_page_writes && !b.will_init && b.page.is_some();
        let data_len = if image && !b.keep_data { 0 } else { b.data.len() };
        let mut flags = 0;
        if image {
            flags |= FLAG_HAS_IMAGE;
        }
        if data_len > 0 {
            flags |= FLAG_HAS_DATA;
        }
        if b.will_init {
            flags |= FLAG_WILL_INIT;
        }
        head.extend_from_slice(&[b.id, b.tag.fork as u8, flags]);
        head.extend_from_slice(&b.tag.rel.0.to_le_bytes());
        head.extend_from_slice(&b.tag.block.0.to_le_bytes());
        head.extend_from_slice(&u32_len(data_len)?.to_le_bytes());
        payload_len += data_len;
        if let (true, Some(page)) = (image, b.page) {
            let (hole_off, hole_len) = page_hole(page);
            head.extend_from_slice(&((BLCKSZ - hole_len) as u16).to_le_bytes());
            head.extend_from_slice(&(hole_off as u16).to_le_bytes());
            head.extend_from_slice(&(hole_len as u16).to_le_bytes());
            payload_len += BLCKSZ - hole_len;
            fpi += 1;
            images |= 1 << i;
        }
    }
    head.extend_from_slice(&u32_len(rec.main_data.len())?.to_le_bytes());
    let tot_len = head.len() + payload_len;
    if tot_len > MAX_RECORD_SIZE {
        return Err(Error::invalid(format!("WAL record of {tot_len} bytes exceeds the maximum of {MAX_RECORD_SIZE}")));
    }
    let mut body_crc = crate::crc::crc32c(&head[RECORD_HEADER_SIZE..]);
    for_each_payload(rec, images, |piece| body_crc = crate::crc::crc32c_append(body_crc, piece));
    head[0..4].copy_from_slice(&(tot_len as u32).to_le_bytes());
    head[4..8].copy_from_slice(&rec.xid.0.to_le_bytes());
    head[16] = rec.info;
    head[17] = rec.rmgr as u8;
    Ok(Assembled { tot_len, body_crc, fpi, images, depends_on_redo })
}

/// Calls `f` on each piece of `rec`'s payload, in record order: per block its image (the
/// page without its hole, in at most two pieces) if bit `i` of `images` is set, else its
/// data; then the main data. `images` is [`Assembled::images`].
pub(crate) fn for_each_payload(rec: &RecordBuilder<'_>, images: u64, mut f: impl FnMut(&[u8])) {
    for (i, b) in rec.blocks.iter().enumerate() {
        match b.page {
            Some(page) if images & (1 << i) != 0 => {
                let (hole_off, hole_len) = page_hole(page);
                f(&page[..hole_off]);
                f(&page[hole_off + hole_len..]);
                if b.keep_data {
                    f(&b.data);
                }
            }
            _ => f(&b.data),
        }
    }
    f(&rec.main_data);
}

/// Assembles the whole of `rec` into `buf` (cleared first), `xl_prev` and `xl_crc` left zero
/// for [`finish`]: the contiguous form, for tests and the fuzz targets' round trip.
pub(crate) fn assemble(
    buf: &mut Vec<u8>,
    rec: &RecordBuilder<'_>,
    full_page_writes: bool,
    redo_ptr: Lsn,
) -> Result<Assembled> {
    let a = assemble_head(buf, rec, full_page_writes, redo_ptr)?;
    for_each_payload(rec, a.images, |piece| buf.extend_from_slice(piece));
    debug_assert_eq!(buf.len(), a.tot_len);
    Ok(a)
}

fn u32_len(len: usize) -> Result<u32> {
    u32::try_from(len).map_err(|_| Error::invalid(format!("WAL data of {len} bytes is too long")))
}

/// Finishes an assembled record once its position is known: sets `xl_prev` and `xl_crc` in
/// its header, the first [`RECORD_HEADER_SIZE`] bytes of `buf`.
pub(crate) fn finish(buf: &mut [u8], body_crc: u32, prev: Lsn) {
    buf[PREV_OFFSET..PREV_OFFSET + 8].copy_from_slice(&prev.0.to_le_bytes());
    let crc = crate::crc::crc32c_append(body_crc, &buf[..CRC_OFFSET]);
    buf[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
}

/// The fixed header, decoded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub tot_len: u32,
    pub xid: Xid,
    pub prev: Lsn,
    pub info: u8,
    pub rmid: u8,
    pub crc: u32,
}

impl Header {
    pub(crate) fn parse(b: &[u8; RECORD_HEADER_SIZE]) -> Header {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut prev = [0u8; 8];
        prev.copy_from_slice(&b[PREV_OFFSET..PREV_OFFSET + 8]);
        Header {
            tot_len: u32_at(0),
            xid: Xid(u32_at(4)),
            prev: Lsn(u64::from_le_bytes(prev)),
            info: b[16],
            rmid: b[17],
            crc: u32_at(CRC_OFFSET),
        }
    }
}

/// Checks the CRC of a whole record (header included).
pub(crate) fn crc_matches(rec: &[u8], expected: u32) -> bool {
    match (rec.get(..CRC_OFFSET), rec.get(RECORD_HEADER_SIZE..)) {
        (Some(head), Some(body)) => crate::crc::crc32c_append(crate::crc::crc32c(body), head) == expected,
        _ => false,
    }
}

/// A bounds-checked little-endian reader over bytes from disk.
struct Cursor<'a> {
    bytes: &'a [u8],
}

// Every record's fields are read through these: inlined, with the message built out of line.
impl<'a> Cursor<'a> {
    #[inline]
    fn take(&mut self, n: usize, what: &str) -> std::result::Result<&'a [u8], String> {
        match self.bytes.split_at_checked(n) {
            Some((now, rest)) => {
                self.bytes = rest;
                Ok(now)
            }
            None => Err(self.short(n, what)),
        }
    }

    #[cold]
    #[inline(never)]
    fn short(&self, n: usize, what: &str) -> String {
        format!("{what} needs {n} bytes, only {} left", self.bytes.len())
    }

    #[inline]
    fn array<const N: usize>(&mut self, what: &str) -> std::result::Result<[u8; N], String> {
        match self.bytes.split_first_chunk::<N>() {
            Some((now, rest)) => {
                self.bytes = rest;
                Ok(*now)
            }
            None => Err(self.short(N, what)),
        }
    }

    #[inline]
    fn u8(&mut self, what: &str) -> std::result::Result<u8, String> {
        Ok(self.array::<1>(what)?[0])
    }

    #[inline]
    fn u16(&mut self, what: &str) -> std::result::Result<u16, String> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }

    #[inline]
    fn u32(&mut self, what: &str) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
}

/// One block header as read, before its payload.
#[derive(Clone, Copy)]
struct RawBlock {
    id: u8,
    tag: BufferTag,
    flags: u8,
    data_len: usize,
    image: Option<(usize, usize, usize)>,
}

#[inline]
fn decode_block_header(c: &mut Cursor<'_>) -> std::result::Result<RawBlock, String> {
    let id = c.u8("block id")?;
    let fork_byte = c.u8("fork")?;
    let fork = Fork::from_u8(fork_byte).ok_or_else(|| format!("invalid fork number {fork_byte} in block {id}"))?;
    let flags = c.u8("block flags")?;
    if flags & !KNOWN_FLAGS != 0 {
        return Err(format!("unknown flags 0x{flags:02X} in block {id}"));
    }
    let rel = Oid(c.u32("relation")?);
    let block = BlockNumber(c.u32("block number")?);
    let data_len = c.u32("data length")? as usize;
    if (flags & FLAG_HAS_DATA != 0) != (data_len > 0) {
        return Err(format!("block {id}: HAS_DATA flag disagrees with data length {data_len}"));
    }
    let image = if flags & FLAG_HAS_IMAGE != 0 {
        let stored = usize::from(c.u16("image length")?);
        let hole_off = usize::from(c.u16("hole offset")?);
        let hole_len = usize::from(c.u16("hole length")?);
        if stored + hole_len != BLCKSZ || hole_off + hole_len > BLCKSZ {
            return Err(format!(
                "block {id}: image length {stored}, hole offset {hole_off}, hole length \
                 {hole_len} do not make a {BLCKSZ}-byte page"
            ));
        }
        Some((stored, hole_off, hole_len))
    } else {
        None
    };
    Ok(RawBlock { id, tag: BufferTag { rel, fork, block }, flags, data_len, image })
}

fn restore_image(stored: &[u8], hole_off: usize, hole_len: usize) -> std::result::Result<Box<[u8; BLCKSZ]>, String> {
    let mut page = vec![0u8; BLCKSZ];
    let (head, tail) = stored.split_at(hole_off.min(stored.len()));
    page[..head.len()].copy_from_slice(head);
    let tail_start = hole_off + hole_len;
    page.get_mut(tail_start..tail_start + tail.len()).ok_or("image hole out of range")?.copy_from_slice(tail);
    page.into_boxed_slice().try_into().map_err(|_| "image is not one page".to_string())
}

/// Block headers [`decode_into`] keeps from its first pass over them.
const KEPT_HEADERS: usize = 4;

/// Decodes a whole record (header included) found at `lsn` whose CRC already matched.
/// Returns a description of what is wrong when the body is malformed.
pub(crate) fn decode(lsn: Lsn, rec: &[u8]) -> std::result::Result<DecodedRecord, String> {
    let mut out = DecodedRecord::empty();
    decode_into(lsn, rec, &mut out, true, &mut Vec::new())?;
    Ok(out)
}

/// [`decode`] into `out`, reusing its vectors (a reader of many records, logical decoding's,
/// allocates nothing per record but page images). `out` is unspecified after an error.
///
/// Without `images` a block's full-page image is skipped (its bytes still counted and checked
/// to fit), and the block's `image` is `None`: logical decoding reads tuples from block data
/// and never a page image, which would cost a page's allocation and copy each.
///
/// Blocks `out` held beyond this record's go to `spare`, and blocks it lacks are taken from
/// there first, so their data buffers are reused across records of different block counts.
pub(crate) fn decode_into(
    lsn: Lsn,
    rec: &[u8],
    out: &mut DecodedRecord,
    images: bool,
    spare: &mut Vec<DecodedBlock>,
) -> std::result::Result<(), String> {
    let head: &[u8; RECORD_HEADER_SIZE] =
        rec.get(..RECORD_HEADER_SIZE).and_then(|h| h.try_into().ok()).ok_or("record shorter than its header")?;
    let h = Header::parse(head);
    if h.tot_len as usize != rec.len() {
        return Err(format!("record length {} disagrees with {} bytes read", h.tot_len, rec.len()));
    }
    let rmgr = Rmgr::from_u8(h.rmid).ok_or_else(|| format!("invalid resource manager ID {}", h.rmid))?;
    let mut c = Cursor { bytes: &rec[RECORD_HEADER_SIZE..] };
    let count = c.u8("block count")?;
    let toplevel_xid = if count & HAS_TOPLEVEL_XID != 0 { Xid(c.u32("top-level XID")?) } else { Xid::INVALID };
    let nblocks = usize::from(count & !HAS_TOPLEVEL_XID);
    if nblocks > MAX_BLOCKS_PER_RECORD {
        return Err(format!("{nblocks} block references, at most {MAX_BLOCKS_PER_RECORD}"));
    }
    // The block headers come first, then the main data's length, then each block's payload:
    // the headers are read (and checked) once to find where the payloads start, and used
    // again beside them: kept from the first pass when there are few (most records name one
    // or two blocks), read again otherwise.
    let headers = c.bytes;
    let mut kept = [None; KEPT_HEADERS];
    let mut ids = [0u64; 4]; // The block IDs seen, one bit per possible u8.
    for k in 0..nblocks {
        let b = decode_block_header(&mut c)?;
        let (word, bit) = (usize::from(b.id / 64), 1u64 << (b.id % 64));
        if ids[word] & bit != 0 {
            return Err(format!("duplicate block id {}", b.id));
        }
        ids[word] |= bit;
        if let Some(slot) = kept.get_mut(k) {
            *slot = Some(b);
        }
    }
    let main_len = c.u32("main data length")? as usize;
    let mut h2 = Cursor { bytes: headers };
    if out.blocks.len() > nblocks {
        spare.extend(out.blocks.drain(nblocks..).map(|b| DecodedBlock { image: None, ..b }));
    }
    for k in 0..nblocks {
        let b = match kept.get(k).copied().flatten() {
            Some(b) if nblocks <= KEPT_HEADERS => b,
            _ => decode_block_header(&mut h2)?,
        };
        let image = match b.image {
            Some((stored, hole_off, hole_len)) => {
                let bytes = c.take(stored, "page image")?;
                if images {
                    Some(restore_image(bytes, hole_off, hole_len)?)
                } else {
                    None
                }
            }
            None => None,
        };
        let data = c.take(b.data_len, "block data")?;
        let will_init = b.flags & FLAG_WILL_INIT != 0;
        if out.blocks.len() == k {
            match spare.pop() {
                Some(o) => out.blocks.push(o),
                None => {
                    out.blocks.push(DecodedBlock { id: b.id, tag: b.tag, will_init, image: None, data: Vec::new() })
                }
            }
        }
        let o = &mut out.blocks[k];
        (o.id, o.tag, o.will_init, o.image) = (b.id, b.tag, will_init, image);
        o.data.clear();
        o.data.extend_from_slice(data);
    }
    out.main_data.clear();
    out.main_data.extend_from_slice(c.take(main_len, "main data")?);
    if !c.bytes.is_empty() {
        return Err(format!("{} unexplained bytes at the end of the record", c.bytes.len()));
    }
    out.lsn = lsn;
    out.end_lsn = Lsn(lsn.0 + u64::from(h.tot_len));
    out.prev = h.prev;
    out.xid = h.xid;
    out.toplevel_xid = toplevel_xid;
    out.rmgr = rmgr;
    out.info = h.info;
    Ok(())
}

/// Bytes a block's image occupies in its record (for `len (rec/tot)` in waldump).
pub fn stored_image_len(image: &[u8]) -> usize {
    BLCKSZ - page_hole(image).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hole_only_for_standard_pages() {
        let mut page = vec![0u8; BLCKSZ];
        page[12..14].copy_from_slice(&40u16.to_le_bytes());
        page[14..16].copy_from_slice(&8000u16.to_le_bytes());
        assert_eq!(page_hole(&page), (40, 7960));
        page[12..14].copy_from_slice(&8100u16.to_le_bytes());
        assert_eq!(page_hole(&page), (0, 0), "lower > upper is not a standard page");
        page[12..14].copy_from_slice(&10u16.to_le_bytes());
        assert_eq!(page_hole(&page), (0, 0), "lower inside the header");
    }

    #[test]
    fn decode_rejects_garbage_without_panicking() {
        let mut rng_state = 0x1234_5678_u64;
        for len in 0..300 {
            let mut rec = Vec::with_capacity(len);
            for _ in 0..len {
                rng_state = rng_state.wrapping_mul(6364136223846793005).wrapping_add(1);
                rec.push((rng_state >> 33) as u8);
            }
            if len >= 4 {
                rec[0..4].copy_from_slice(&(len as u32).to_le_bytes());
            }
            let _ = decode(Lsn(100), &rec);
        }
    }
}
