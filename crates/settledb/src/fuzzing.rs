//! Fuzz entry points: one function per decoder of bytes read from disk, each running the
//! decoder the way the engine does and, where decoding succeeds, encoding again and checking
//! the round trip (redb's `fuzz/` and PostgreSQL's "a corrupt page is an error, not a crash").
//!
//! Used by the cargo-fuzz targets in `fuzz/` (one `fuzz_target!` per function here, same
//! name) and by `tests/fuzz_smoke.rs`, which runs every target over seeded random and mutated
//! valid inputs so that plain `cargo test` exercises them too. Not part of the API.
//!
//! | target          | decoder, as the engine runs it                                          |
//! |-----------------|-------------------------------------------------------------------------|
//! | `page`          | `page::verify` + `validate_items` (the buffer manager's heap read), then |
//! |                 | what the heap does with a validated page: line pointers, tuple headers, |
//! |                 | `describe_page`, pruning's `repair_fragmentation`, `add_item`            |
//! | `heap_tuple`    | `TupleHeader::parse`, `deform_tuple` against a schema picked by the      |
//! |                 | input's first bytes; `form_tuple` of the values decodes to them again    |
//! | `catalog_tuple` | a `pg_class` row (`deform_tuple` + `ClassRow::from_values`), the schema  |
//! |                 | bytes of `relschema` (`Schema::decode`), `reloptions` (`RelOptions`)      |
//! | `wal_record`    | `record::decode` after the CRC check, the waldump rendering, redo of     |
//! |                 | every block onto a page (`startup::redo_page`), CLOG and XACT redo      |
//! |                 | (commit/abort subtransaction lists, two-phase records); re-assembly     |
//! | `wal_stream`    | `WalReader` over segments made of the input (recovery's reader)          |
//! | `control_file`  | `ControlFile::decode`, then the XID limits and WAL geometry startup     |
//! |                 | derives from it                                                         |
//! | `clog_page`     | a `pg_xact` segment read by `Clog` (status, describe, set and read back) |
//! | `btree_page`    | `page::verify` + `btree::page::validate`, items, high key, metapage,     |
//! |                 | key decoding, binary search, `rebuild`, vacuum's item removal            |
//! | `vm_page`       | a visibility-map page read through the buffer pool, bits, set/clear      |
//! | `fsm_page`      | a free-space-map page read through the buffer pool, get/search/record    |
//! | `stats_file`    | `StatsFile::decode` (`pg_stat/stats.bin`); encode gives the same bytes   |
//! | `relsize_file`  | `Sizes::decode` (`global/pg_relsize`); the re-encoded map decodes alike  |
//! | `twophase_state`| a `pg_twophase` state file as recovery reads it (`read_state_files`,    |
//! |                 | `TwoPhaseState::decode`), re-encoded (older versions as the current one),|
//! |                 | then loaded into a transaction manager and recovered                     |
//! |                 | (`finish_twophase_recovery`)                                             |
//! | `slot_state`    | a `pg_replslot/<name>/state` file as startup reads it (`load_all`,       |
//! |                 | `SlotData::decode`), re-encoded to the same bytes; the loaded slots'     |
//! |                 | minima and `pg_replication_slots` row                                    |
//! | `spill_file`    | a reorder buffer spill segment read back at commit and by a ROLLBACK TO  |
//! |                 | cut (`SpillLog::read`: header, length, CRC; the change decoder)          |
//! | `pgoutput_message` | one pgoutput message as `pgoutput::proto::Reader` parses it (what a   |
//! |                 | subscriber reads); re-encoded to the same bytes, rendered               |
//!
//! `pg_subtrans` has no target: it is never read from disk (see `xact::subtrans`).
//!
//! # Input conventions
//!
//! Every target takes the first input byte as control bits (missing bytes read as zero).
//! Bit 0 ([`REPAIR`]) asks the target to repair the integrity check in front of the decoder
//! (page checksum, record CRC and length, control file and statistics CRC) so that the fuzzer
//! spends its time behind it; with bit 0 clear the check itself is what is fuzzed. The rest
//! of the byte is target-specific and documented on each function.
//!
//! A target panics only on a bug: a decoder that panicked, or a round trip that broke.

use std::path::Path;
use std::sync::Arc;

use crate::btree::{self, keys, page as bp};
use crate::buffer::BufferPool;
use crate::catalog::{self, ClassRow, RelOptions};
use crate::db::startup;
use crate::error::Error;
use crate::heap::tuple::{self, Column, Schema, TupleHeader, Type, Value};
use crate::io::fault::FaultFs;
use crate::io::FileSystem;
use crate::page::{self, LpFlags, BLCKSZ};
use crate::smgr::Smgr;
use crate::stats::StatsFile;
use crate::types::{BlockNumber, BufferTag, Fork, Lsn, OffsetNumber, Oid, Tid, Xid};
use crate::wal::{self, control::ControlFile, record, DecodedRecord, RecordBuilder, WalReader};
use crate::xact::twophase::{self, TwoPhaseState};
use crate::xact::{Clog, TransactionManager, XactOptions, XidStatus};

pub mod seeds;

/// Control bit 0: repair the checksum / CRC in front of the decoder.
pub const REPAIR: u8 = 0x01;

/// A fuzz target: takes any bytes, panics only on a bug.
pub type Target = fn(&[u8]);

/// Every target, by name (the names of the cargo-fuzz targets).
pub const TARGETS: &[(&str, Target)] = &[
    ("page", page),
    ("heap_tuple", heap_tuple),
    ("catalog_tuple", catalog_tuple),
    ("wal_record", wal_record),
    ("wal_stream", wal_stream),
    ("control_file", control_file),
    ("clog_page", clog_page),
    ("btree_page", btree_page),
    ("vm_page", vm_page),
    ("fsm_page", fsm_page),
    ("stats_file", stats_file),
    ("relsize_file", relsize_file),
    ("twophase_state", twophase_state),
    ("slot_state", slot_state),
    ("spill_file", spill_file),
    ("pgoutput_message", pgoutput_message),
];

/// The relation every page target pretends to read.
const REL: Oid = Oid(16384);

/// A reader over the fuzz input that yields zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn u8(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (now, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        now
    }

    fn rest(&mut self) -> &'a [u8] {
        self.take(self.0.len())
    }
}

/// `bytes` as one page: cut or zero-padded to [`BLCKSZ`].
fn to_page(bytes: &[u8]) -> Box<[u8; BLCKSZ]> {
    let mut p = Box::new([0u8; BLCKSZ]);
    let n = bytes.len().min(BLCKSZ);
    p[..n].copy_from_slice(&bytes[..n]);
    p
}

/// The page of a page target: control byte, then the page bytes. Returns the control byte,
/// the block number (control bits 4..8) and the page, its checksum repaired on request.
fn page_input(data: &[u8]) -> (u8, BlockNumber, Box<[u8; BLCKSZ]>) {
    let mut input = Input(data);
    let ctl = input.u8();
    let raw = input.rest();
    let block = BlockNumber(u32::from(ctl >> 4));
    if raw.len() != BLCKSZ {
        assert!(page::verify(raw, REL, block).is_err(), "a page of {} bytes verified", raw.len());
    }
    let mut p = to_page(raw);
    if ctl & REPAIR != 0 && !page::is_new(&p[..]) {
        page::set_checksum(&mut p[..], block);
    }
    (ctl, block, p)
}

/// Values equal as stored (floats by their bits, so NaN equals itself).
fn same_values(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Value::Float8(x), Value::Float8(y)) => x.to_bits() == y.to_bits(),
            _ => x == y,
        })
}

// ---------------------------------------------------------------------------------------------
// Heap pages and tuples

/// Control bit 1 of the page targets: render the page as `settle inspect` does (on pages that
/// fail verification too). Off half the time because rendering is most of an execution.
const RENDER: u8 = 0x02;

/// A heap page as the buffer manager reads it (`read_validated` with `validate_items`), then
/// what the heap does with it. Input: control byte (bit 1: [`RENDER`], bits 4..8: block
/// number), page bytes.
pub fn page(data: &[u8]) {
    let (ctl, block, p) = page_input(data);
    if ctl & RENDER != 0 {
        let _ = page::describe(&p[..]);
        let _ = crate::heap::describe_page(&p[..], None, true);
    }
    if page::verify(&p[..], REL, block).is_err() || page::validate_items(&p[..], REL, block).is_err() {
        return;
    }
    let mut again = p.clone();
    page::set_checksum(&mut again[..], block);
    assert!(page::is_new(&p[..]) || again == p, "re-stamping the checksum of a verified page changed it");
    read_heap_page(&p[..]);
    rewrite_heap_page(&p[..], block);
}

/// Every read the heap makes of a page that passed `validate_items`.
fn read_heap_page(p: &[u8]) {
    let _ = page::heap_free_space(p);
    let _ = page::free_space(p);
    for off in (1..=page::max_offset(p)).map(OffsetNumber) {
        let id = page::item_id(p, off);
        match id.flags {
            LpFlags::Normal => {
                let t = page::item(p, off);
                let _ = tuple::describe_header(t);
                if let Some(h) = TupleHeader::parse(t) {
                    let _ = (h.xmin(), h.xmax(), h.cid(), h.ctid(), h.natts(), h.data());
                    let _ = (0..=usize::from(h.natts())).filter(|&i| h.is_null(i)).count();
                }
            }
            LpFlags::Redirect => {
                let _ = page::item_id(p, OffsetNumber(id.off));
            }
            LpFlags::Dead | LpFlags::Unused => {}
        }
    }
}

/// The in-place rewrites pruning, vacuum and insert make. A page the engine wrote stays valid
/// through them; a validated page of arbitrary bytes may come out invalid (a redirect to a
/// line pointer that `truncate_line_pointer_array` drops, say), which the next read reports
/// as corruption: what is checked here is that they never panic, and that the next read
/// copes either way.
fn rewrite_heap_page(p: &[u8], block: BlockNumber) {
    if page::is_new(p) {
        return;
    }
    let reread = |q: &[u8]| {
        if page::validate_items(q, REL, block).is_ok() {
            read_heap_page(q);
        }
    };
    let mut q = p.to_vec();
    page::repair_fragmentation(&mut q);
    reread(&q);
    let mut q = p.to_vec();
    page::truncate_line_pointer_array(&mut q);
    reread(&q);
    let mut q = p.to_vec();
    let row = tuple::form_tuple(&Schema::default(), &[]).expect("an empty row forms");
    if let Some(off) = page::add_item(&mut q, &row, None, true) {
        assert_eq!(page::item(&q, off), &row[..], "add_item stored the row");
        reread(&q);
    }
}

/// Builds a schema from the input: column count (0..=8), then one byte per column (type =
/// byte % 7, nullable = bit 7).
fn schema_from(input: &mut Input<'_>) -> Schema {
    let n = input.u8() % 9;
    let columns = (0..n)
        .map(|i| {
            let b = input.u8();
            Column { name: format!("c{i}"), ty: Type::ALL[usize::from(b % 7)], nullable: b & 0x80 != 0 }
        })
        .collect();
    Schema { columns }
}

/// A heap tuple decoded against a schema. Input: schema (see `schema_from`), tuple bytes.
pub fn heap_tuple(data: &[u8]) {
    let mut input = Input(data);
    let schema = schema_from(&mut input);
    let t = input.rest();
    let _ = tuple::describe_header(t);
    if let Some(h) = TupleHeader::parse(t) {
        let _ = (h.infomask(), h.infomask2(), h.hoff(), h.data());
        let _ = tuple::infomask_names(h.infomask(), h.infomask2());
    }
    let Ok(values) = tuple::deform_tuple(&schema, t) else { return };
    assert_eq!(values.len(), schema.columns.len(), "deform_tuple returned the wrong number of values");
    // A row the engine would accept encodes to a tuple that decodes to the same values.
    if let Ok(formed) = tuple::form_tuple(&schema, &values) {
        let again = tuple::deform_tuple(&schema, &formed).expect("a formed tuple decodes");
        assert!(same_values(&values, &again), "round trip changed {values:?} into {again:?}");
    }
}

/// The catalog's own decoders. Control byte % 3: 0 = a `pg_class` tuple, 1 = `relschema`
/// bytes, 2 = `reloptions` text.
pub fn catalog_tuple(data: &[u8]) {
    let mut input = Input(data);
    let ctl = input.u8();
    let bytes = input.rest();
    match ctl % 3 {
        0 => {
            let schema = catalog::pg_class_schema();
            let Ok(values) = tuple::deform_tuple(&schema, bytes) else { return };
            let tid = Tid { block: BlockNumber(0), offset: OffsetNumber(1) };
            let Ok(row) = ClassRow::from_values(&values, tid) else { return };
            let formed = tuple::form_tuple(&schema, &row.to_values()).expect("a decoded pg_class row forms");
            let again = tuple::deform_tuple(&schema, &formed).expect("a formed pg_class row decodes");
            let again = ClassRow::from_values(&again, tid).expect("a formed pg_class row is valid");
            assert_eq!(format!("{row:?}"), format!("{again:?}"), "pg_class row round trip");
        }
        1 => {
            let Ok(schema) = Schema::decode(bytes) else { return };
            assert_eq!(schema.encode(), bytes, "relschema round trip");
        }
        _ => {
            let Ok(text) = std::str::from_utf8(bytes) else { return };
            let Ok(opts) = RelOptions::decode(text) else { return };
            let again = RelOptions::decode(&opts.encode()).expect("encoded reloptions decode");
            assert_eq!(again.encode(), opts.encode(), "reloptions round trip");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// WAL

/// Where `wal_record` pretends its record was read.
const RECORD_LSN: Lsn = Lsn(0x0100_0000);

/// Makes `rec`'s length field and CRC right (what a writer would have produced).
fn repair_record(rec: &mut [u8], prev: Lsn) {
    if rec.len() < record::RECORD_HEADER_SIZE {
        return;
    }
    let len = rec.len() as u32;
    rec[0..4].copy_from_slice(&len.to_le_bytes());
    let body_crc = crate::crc::crc32c(&rec[record::RECORD_HEADER_SIZE..]);
    record::finish(rec, body_crc, prev);
}

/// One WAL record as recovery and waldump handle it. Input: control byte, record length u16,
/// the record, then the page its blocks are replayed onto (zero-padded). Control bit 1:
/// repair the base page's checksum too.
pub fn wal_record(data: &[u8]) {
    let mut input = Input(data);
    let ctl = input.u8();
    let len = usize::from(input.u16());
    let mut rec = input.take(len).to_vec();
    let base_bytes = input.rest();
    if ctl & REPAIR != 0 {
        let prev = Lsn(RECORD_LSN.0 - 64);
        repair_record(&mut rec, prev);
    }
    // The reader's checks, in its order: length, CRC, then the body.
    let Some(head) = rec.get(..record::RECORD_HEADER_SIZE).and_then(|h| <&[u8; 24]>::try_from(h).ok()) else {
        return;
    };
    let h = record::Header::parse(head);
    if !(record::MIN_RECORD_SIZE..=record::MAX_RECORD_SIZE).contains(&(h.tot_len as usize))
        || !record::crc_matches(&rec, h.crc)
    {
        return;
    }
    let Ok(decoded) = record::decode(RECORD_LSN, &rec) else { return };
    let _ = wal::desc::describe(&decoded, &startup::describe_record);
    reassemble(&decoded);
    let mut base = to_page(base_bytes);
    if ctl & 0x02 != 0 {
        for b in &decoded.blocks {
            page::set_checksum(&mut base[..], b.tag.block);
            replay_block(&decoded, b, &base);
        }
    } else {
        for b in &decoded.blocks {
            replay_block(&decoded, b, &base);
        }
    }
    if decoded.rmgr == wal::Rmgr::Clog {
        let fs = FaultFs::new();
        if let Ok(clog) = Clog::open(fs, Path::new("/fuzz")) {
            let _ = clog.redo(&decoded);
        }
    }
    if decoded.rmgr == wal::Rmgr::Xact {
        let fs = FaultFs::new();
        if let Ok(tm) = TransactionManager::open(fs, Path::new("/fuzz"), XactOptions::default()) {
            if tm.redo(&decoded).is_ok() {
                let _ = tm.finish_twophase_recovery();
                let _ = tm.verify();
            }
        }
    }
}

/// Redo of one block as `startup::redo_blocks` does it, on a copy of `base` (or a zeroed
/// page for an image or `will_init`), followed by the checks a later read makes.
fn replay_block(rec: &DecodedRecord, b: &wal::DecodedBlock, base: &[u8; BLCKSZ]) {
    let mut p = if b.image.is_some() || b.will_init {
        Box::new([0u8; BLCKSZ])
    } else {
        if page::verify(base, b.tag.rel, b.tag.block).is_err() {
            return; // the buffer pool would have refused to read it
        }
        Box::new(*base)
    };
    if startup::redo_page(rec, b, &mut p[..]).is_err() {
        return;
    }
    page::set_checksum(&mut p[..], b.tag.block);
    let _ = page::verify(&p[..], b.tag.rel, b.tag.block);
    match rec.rmgr {
        wal::Rmgr::Btree if bp::validate(&p[..], b.tag.rel, b.tag.block).is_ok() => {
            let _ = btree::describe_page(&p[..]);
        }
        wal::Rmgr::Btree => {}
        _ if b.tag.fork == Fork::Main && page::validate_items(&p[..], b.tag.rel, b.tag.block).is_ok() => {
            read_heap_page(&p[..]);
        }
        _ => {}
    }
}

/// Assembles a decoded record again and checks that it decodes to the same record. Only
/// records a writer can produce are compared: an image is never attached to a `will_init`
/// block, and a block with both an image and data kept its data on purpose (`keep_data`).
fn reassemble(d: &DecodedRecord) {
    if d.blocks.iter().any(|b| b.image.is_some() && b.will_init) {
        return;
    }
    let builder = RecordBuilder {
        toplevel_xid: d.toplevel_xid,
        rmgr: d.rmgr,
        info: d.info,
        xid: d.xid,
        blocks: d
            .blocks
            .iter()
            .map(|b| wal::BlockRef {
                keep_data: b.image.is_some() && !b.data.is_empty(),
                id: b.id,
                tag: b.tag,
                will_init: b.will_init,
                page: b.image.as_deref().map(|p| &p[..]),
                data: b.data.clone(),
            })
            .collect(),
        main_data: d.main_data.clone(),
    };
    let mut buf = Vec::new();
    let assembled = record::assemble(&mut buf, &builder, true, Lsn(u64::MAX)).expect("a decoded record assembles");
    record::finish(&mut buf, assembled.body_crc, d.prev);
    let again = record::decode(d.lsn, &buf).expect("a re-assembled record decodes");
    assert!(canonical(&again) == canonical(d), "WAL record round trip changed the record");
}

/// A decoded record up to what a writer chooses: the hole left out of an image (a record may
/// leave out any run of zeros; the writer leaves out `pd_lower..pd_upper`, free space, which
/// comes back as zeros) and hence the record's length.
fn canonical(d: &DecodedRecord) -> DecodedRecord {
    let mut c = d.clone();
    c.end_lsn = c.lsn;
    for b in &mut c.blocks {
        if let Some(img) = b.image.as_deref_mut() {
            let (off, len) = record::page_hole(&img[..]);
            img[off..off + len].fill(0);
        }
    }
    c
}

/// Segment sizes `wal_stream` picks from (control bits 1..4).
const SEGMENT_SIZES: [u64; 8] = [4 << 10, 8 << 10, 16 << 10, 64 << 10, 1 << 20, 1 << 20, 1 << 20, 16 << 20];

/// Recovery's reader over WAL segments made of the input. Control bits 1..4: segment size
/// ([`SEGMENT_SIZES`]; 4 = 1 MB, the smallest a database accepts). Control bit 4: the input is
/// a sequence of records (each at least its header, length taken from `xl_tot_len` and cut at
/// the end of the input) whose `xl_prev` and CRC are repaired, so the reader gets past the
/// first record; otherwise the bytes are the stream as is. Control bit 5: the segment files
/// go on past the stream as recycled ones do, with up to [`STALE_BYTES`] of stale bytes: at
/// each offset, the stream's byte at the same offset of its first segment (the old contents
/// of a recycled segment 1), so the reader must find the end by record validity alone.
pub fn wal_stream(data: &[u8]) {
    let mut input = Input(data);
    let ctl = input.u8();
    let segment_size = SEGMENT_SIZES[usize::from((ctl >> 1) & 7)];
    let start = wal::first_lsn(segment_size);
    let stream = if ctl & 0x10 != 0 { frame_records(input.rest(), start) } else { input.rest().to_vec() };
    let fs = FaultFs::new();
    let dir = Path::new("/fuzz/pg_wal");
    fs.create_dir_all(dir).expect("FaultFs makes directories");
    let files = if ctl & 0x20 != 0 { with_stale_tail(&stream, segment_size) } else { stream.clone() };
    for (i, chunk) in files.chunks(segment_size as usize).enumerate() {
        let segno = start.0 / segment_size + i as u64;
        let f = fs.open(&wal::segment::segment_path(dir, segno, segment_size), true).expect("FaultFs creates");
        f.write_at(chunk, 0).expect("FaultFs writes");
    }
    let fs: Arc<dyn FileSystem> = fs;
    let mut reader = WalReader::new(Arc::clone(&fs), dir, start, segment_size);
    let mut expected = start;
    for _ in 0..10_000 {
        match reader.next() {
            Ok(Some(rec)) => {
                assert_eq!(rec.lsn, expected, "records follow each other with no gap");
                assert!(rec.end_lsn > rec.lsn, "a record has a length");
                expected = rec.end_lsn;
                let _ = wal::desc::describe(&rec, &startup::describe_record);
            }
            Ok(None) => {
                assert!(reader.stop_reason().is_some(), "the reader says why it stopped");
                break;
            }
            Err(e) => panic!("reading WAL from memory failed with an I/O error: {e}"),
        }
    }
    assert_eq!(reader.end_lsn(), expected);
    let _ = wal::read_record_at(fs, dir, start, segment_size);
}

/// The most stale bytes `wal_stream` puts after the stream (control bit 5).
pub const STALE_BYTES: usize = 64 << 10;

/// `stream` followed by what recycled segment files would hold past it, up to the end of a
/// segment and at most [`STALE_BYTES`]: at each offset, the byte of `stream`'s first segment
/// at that offset (zero past the stream).
fn with_stale_tail(stream: &[u8], segment_size: u64) -> Vec<u8> {
    let seg = segment_size as usize;
    let room = seg - stream.len() % seg;
    let stale = if room == seg { seg.min(STALE_BYTES) } else { room.min(STALE_BYTES) };
    let mut out = Vec::with_capacity(stream.len() + stale);
    out.extend_from_slice(stream);
    for pos in stream.len()..stream.len() + stale {
        out.push(stream.get(pos % seg).copied().unwrap_or(0));
    }
    out
}

/// Frames `bytes` as consecutive records starting at `start` (see [`wal_stream`]).
fn frame_records(bytes: &[u8], start: Lsn) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut rest = bytes;
    let mut prev = Lsn::INVALID;
    while rest.len() >= record::RECORD_HEADER_SIZE {
        let claimed = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let len = claimed.clamp(record::RECORD_HEADER_SIZE, rest.len());
        let mut rec = rest[..len].to_vec();
        rest = &rest[len..];
        let at = Lsn(start.0 + out.len() as u64);
        repair_record(&mut rec, prev);
        prev = at;
        out.extend_from_slice(&rec);
    }
    out.extend_from_slice(rest);
    out
}

/// The control file as startup reads it, then the XID limits and WAL geometry startup derives
/// from it.
pub fn control_file(data: &[u8]) {
    let mut input = Input(data);
    let ctl = input.u8();
    let mut bytes = input.rest().to_vec();
    if ctl & REPAIR != 0 && bytes.len() >= wal::control::CONTROL_FILE_SIZE {
        let crc_at = wal::control::CONTROL_FILE_SIZE - 4;
        let crc = crate::crc::crc32c(&bytes[..crc_at]);
        bytes[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let Ok(c) = ControlFile::decode(&bytes, Path::new("global/pg_control")) else { return };
    let encoded = c.encode();
    let again = ControlFile::decode(&encoded, Path::new("global/pg_control")).expect("an encoded control file decodes");
    assert_eq!(again, c, "control file round trip");
    // The XID limits startup computes from it (all modular arithmetic).
    let limits = crate::xact::XidLimits::compute(c.oldest_xid, 200_000_000);
    let _ = (limits.xids_until_wrap(c.next_xid.xid()), limits.warning(c.next_xid.xid()), c.next_xid.epoch());
    if wal::segment::validate_segment_size(c.wal_segment_size).is_ok() {
        let size = c.wal_segment_size;
        for lsn in [c.checkpoint_lsn, c.redo_lsn, c.prev_checkpoint_lsn, wal::first_lsn(size)] {
            let segno = wal::segment::segment_number(lsn, size);
            let name = wal::segment::segment_file_name(segno, size);
            assert_eq!(wal::segment::parse_segment_file_name(&name, size), Some(segno), "segment name {name}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SLRU, index and map pages, statistics

/// A `pg_xact` segment as `Clog` reads it. Input: control byte (bits 1..8: XID picks), the
/// segment file `0000`'s bytes (any length: the length check is part of the read).
pub fn clog_page(data: &[u8]) {
    let mut input = Input(data);
    let ctl = input.u8();
    let bytes = input.rest();
    let fs = FaultFs::new();
    let dir = Path::new("/fuzz");
    let Ok(clog) = Clog::open(fs.clone(), dir) else { return };
    let f = fs.open(&dir.join("pg_xact").join("0000"), true).expect("FaultFs creates");
    f.write_at(bytes, 0).expect("FaultFs writes");
    let pages = (bytes.len() / crate::xact::clog::CLOG_PAGE_SIZE).clamp(1, 32) as u32;
    let step = u32::from(ctl >> 1) + 1;
    for page in 0..pages {
        let first = page * crate::xact::clog::CLOG_XACTS_PER_PAGE;
        let _ = clog.describe_page(Xid(first));
        for k in (0..crate::xact::clog::CLOG_XACTS_PER_PAGE).step_by(step as usize * 97) {
            let xid = Xid(first + k);
            let Ok(status) = clog.status(xid) else { return };
            let other = if status == XidStatus::Committed { XidStatus::Aborted } else { XidStatus::Committed };
            clog.set_status(xid, other).expect("setting a cached status");
            assert_eq!(clog.status(xid).expect("a cached status"), other, "CLOG status round trip for {xid}");
        }
    }
}

/// Key column types a B-tree page is decoded with, picked by control bits 1..4.
fn key_types(ctl: u8) -> Vec<Type> {
    match (ctl >> 1) & 7 {
        0 => vec![Type::Int4],
        1 => vec![Type::Int8],
        2 => vec![Type::Text],
        3 => vec![Type::Int4, Type::Text],
        4 => vec![Type::Float8, Type::Bool],
        5 => vec![Type::Bytea, Type::Timestamp],
        6 => vec![Type::Int4, Type::Int4, Type::Int8],
        _ => Type::ALL.to_vec(),
    }
}

/// A B-tree page as the index reads it (`read_validated` with `btree::page::validate`).
/// Input: control byte (bits 1..4: key types, bits 4..8: block), page bytes.
pub fn btree_page(data: &[u8]) {
    let (ctl, block, p) = page_input(data);
    let p = &p[..];
    let _ = btree::describe_page(p);
    if page::verify(p, REL, block).is_err() || page::is_new(p) || bp::validate(p, REL, block).is_err() {
        return;
    }
    let _ = btree::describe_page(p);
    let flags = bp::flags(p);
    if flags & bp::BTP_META != 0 {
        let _ = btree::decode_meta(p);
        return;
    }
    if flags & bp::BTP_DELETED != 0 {
        let _ = btree::vacuum::safe_xid(p);
        return;
    }
    let _ = (bp::cycle_id(p), flags & bp::BTP_SPLIT_END);
    if bp::is_leaf(p) {
        let (mut tids, mut lp_dead) = (Vec::new(), Vec::new());
        bp::leaf_tids(p, &mut tids, &mut lp_dead);
        assert_eq!(tids.len(), usize::from((bp::max_offset(p) + 1).saturating_sub(bp::first_data_offset(p).0)));
        assert_eq!(lp_dead, bp::dead_offsets(p));
    }
    let types = key_types(ctl);
    let n = bp::max_offset(p);
    for off in (1..=n).map(OffsetNumber) {
        let (key, tid) = bp::item_key(p, off);
        let _ = (bp::is_dead(p, off), bp::child(bp::item(p, off)), tid);
        if let Ok(values) = keys::decode(&types, key) {
            if let Ok(enc) = keys::encode(&types[..values.len()], &values) {
                let again = keys::decode(&types, &enc).expect("an encoded key decodes");
                assert!(same_values(&values, &again), "key round trip: {values:?} vs {again:?}");
            }
        }
        let target = btree::search::Target::from_bound(key, tid);
        let _ = btree::search::must_move_right(p, &target, off.0 % 2 == 0);
        if bp::is_leaf(p) {
            let _ = btree::search::leaf_lower_bound(p, &target);
        } else if n >= bp::first_data_offset(p).0 {
            let _ = btree::search::choose_child(p, &target, off.0 % 2 == 0);
        }
    }
    let _ = btree::search::hikey_bound(p);
    rewrite_btree_page(p, block);
}

/// Vacuum's removal and the deterministic rebuild keep a valid page valid and its items.
fn rewrite_btree_page(p: &[u8], block: BlockNumber) {
    let items = bp::items(p);
    let mut q = p.to_vec();
    if bp::rebuild(&mut q, &items) {
        assert_eq!(bp::items(&q), items, "rebuild kept the items");
        bp::validate(&q, REL, block).expect("rebuild left an invalid page");
    }
    // VACUUM's one-pass removal leaves exactly what rebuilding from the kept items would.
    let dead = bp::dead_offsets(p);
    let mut q = p.to_vec();
    if btree::wal::apply_vacuum(&mut q, btree::wal::XLOG_BTREE_VACUUM, &dead) {
        let kept: Vec<Vec<u8>> = items
            .iter()
            .enumerate()
            .filter(|(i, _)| !dead.contains(&(*i as u16 + 1)))
            .map(|(_, t)| t.clone())
            .collect();
        assert_eq!(bp::items(&q), kept, "vacuum removed exactly the dead items");
        assert_eq!(bp::cycle_id(&q), 0, "vacuum clears the cycle ID");
        let mut r = p.to_vec();
        if bp::rebuild(&mut r, &kept) {
            bp::set_cycle_id(&mut r, 0);
            assert!(q == r, "one-pass removal and rebuild lay the page out alike");
        }
    }
    let mut q = p.to_vec();
    let t = bp::make_leaf_tuple(&[0, 0x80, 0, 0, 1], Tid { block: BlockNumber(1), offset: OffsetNumber(1) }, false);
    if bp::insert_item(&mut q, bp::first_data_offset(p), &t) {
        assert_eq!(bp::item(&q, bp::first_data_offset(p)), &t[..]);
    }
}

/// Writes `p` as block `block` of fork `fork` of [`REL`] on an in-memory file system and
/// returns a buffer pool over it, as a running database would read it.
fn pool_with_page(fork: Fork, block: BlockNumber, p: &[u8]) -> Option<BufferPool> {
    let fs = FaultFs::new();
    let dir = Path::new("/fuzz");
    let smgr = Smgr::new(fs, dir).ok()?;
    smgr.create(REL, fork).ok()?;
    smgr.ensure_size(REL, fork, block).ok()?;
    smgr.write(BufferTag { rel: REL, fork, block }, p).ok()?;
    Some(BufferPool::new(8, Arc::new(smgr)))
}

/// A visibility-map page read through the buffer pool. Input: control byte (bit 1:
/// [`RENDER`], bits 4..8: map block), page bytes.
pub fn vm_page(data: &[u8]) {
    let (ctl, block, p) = page_input(data);
    if ctl & RENDER != 0 {
        let _ = crate::vm::describe_page(&p[..], block);
    }
    let Some(pool) = pool_with_page(Fork::Vm, block, &p[..]) else { return };
    let vm = crate::vm::VisibilityMap::new(REL);
    let per_page = crate::vm::HEAPBLOCKS_PER_PAGE;
    let first = block.0 * per_page;
    for i in [0, 1, 2, 3, u32::from(ctl), per_page / 2, per_page - 1] {
        let heap_block = BlockNumber(first + i);
        match vm.get(&pool, heap_block) {
            Ok(bits) => {
                let _ = crate::vm::flags_disagreement(bits, page::PD_ALL_VISIBLE);
            }
            Err(Error::Corrupted { .. }) => return,
            Err(e) => panic!("reading a VM page from memory: {e}"),
        }
    }
    let _ = vm.count(&pool);
    // Setting and clearing bits on the page as read, as the live path and redo do.
    let mut q = p.clone();
    if !page::is_new(&q[..]) {
        let hb = BlockNumber(first + u32::from(ctl));
        crate::vm::apply_set(&mut q[..], hb, crate::vm::VmBits::ALL_VISIBLE);
        assert!(crate::vm::apply_clear(&mut q[..], hb, 1, crate::vm::VmBits::ALL_VISIBLE), "a set bit clears");
    }
}

/// A free-space-map page read through the buffer pool: get, search, record. Input: control
/// byte (bit 1: [`RENDER`], bits 4..8: FSM block), page bytes.
pub fn fsm_page(data: &[u8]) {
    let (ctl, block, p) = page_input(data);
    if ctl & RENDER != 0 {
        let _ = crate::fsm::FreeSpaceMap::describe_page(&p[..], block);
    }
    let Some(pool) = pool_with_page(Fork::Fsm, block, &p[..]) else { return };
    let fsm = crate::fsm::FreeSpaceMap::new(REL);
    let first = block.0 * crate::fsm::SLOTS_PER_PAGE;
    for i in [0, 1, u32::from(ctl), crate::fsm::SLOTS_PER_PAGE - 1] {
        fsm.get(&pool, BlockNumber(first + i)).expect("FSM reads never fail on bad pages");
    }
    let _ = fsm.search(&pool, ctl).expect("FSM search never fails on bad pages");
    let hb = BlockNumber(first + u32::from(ctl));
    fsm.record(&pool, hb, 4000).expect("FSM record rewrites a bad page");
    assert_eq!(fsm.get(&pool, hb).expect("FSM get"), crate::fsm::avail_to_category(4000), "FSM round trip");
}

/// `pg_stat/stats.bin` as the next open reads it. Control bit 0 repairs the table count (from
/// the length) and the CRC.
pub fn stats_file(data: &[u8]) {
    let mut input = Input(data);
    let ctl = input.u8();
    let mut bytes = input.rest().to_vec();
    if ctl & REPAIR != 0 && bytes.len() >= 4 {
        seeds::repair_stats(&mut bytes);
    }
    let path = Path::new("pg_stat/stats.bin");
    let Ok(file) = StatsFile::decode(&bytes, path) else { return };
    let current = |at: usize, v: u32| bytes.get(at..at + 4) == Some(&v.to_le_bytes()[..]);
    let layout =
        (crate::stats::STATS_FORMAT_VERSION, crate::stats::DB_FIELDS as u32, crate::stats::TABLE_FIELDS as u32);
    if current(4, layout.0) && current(8, layout.1) && current(12, layout.2) {
        assert_eq!(file.encode(), bytes, "statistics file round trip");
    } else {
        // An older version, or this version with fewer counters (written before some were
        // added; read, never written): it comes back in the current layout.
        assert_eq!(StatsFile::decode(&file.encode(), path).ok(), Some(file.clone()), "re-encoded statistics file");
    }
    for (_, snapshot) in &file.tables {
        let live = crate::stats::TableStats::new();
        live.restore(snapshot);
        assert_eq!(&live.snapshot(), snapshot, "restored table statistics");
    }
}

/// `global/pg_relsize` as the next open reads it. Control bit 0 repairs the entry count (from
/// the length) and the CRC.
pub fn relsize_file(data: &[u8]) {
    let mut input = Input(data);
    let ctl = input.u8();
    let mut bytes = input.rest().to_vec();
    if ctl & REPAIR != 0 {
        seeds::repair_relsize(&mut bytes);
    }
    let path = Path::new("global/pg_relsize");
    let Ok(sizes) = crate::smgr::sizes::Sizes::decode(&bytes, path) else { return };
    let again = crate::smgr::sizes::Sizes::decode(&sizes.encode(), path).expect("re-encoded map decodes");
    assert_eq!(again.blocks, sizes.blocks, "relation size map round trip");
}

/// A prepared transaction's state file as recovery reads it. Input: control byte, the file's
/// bytes (its name is taken from the XID the bytes claim, or a fixed one when too short).
pub fn twophase_state(data: &[u8]) {
    let mut input = Input(data);
    let ctl = input.u8();
    let mut bytes = input.rest().to_vec();
    if ctl & REPAIR != 0 && bytes.len() >= 4 {
        let n = bytes.len();
        let crc = crate::crc::crc32c(&bytes[..n - 4]);
        bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(state) = TwoPhaseState::decode(&bytes) {
        // Older versions (fewer lists) are re-encoded as the current one.
        let current = bytes[4..6] == TwoPhaseState::VERSION.to_le_bytes();
        if current {
            assert_eq!(state.encode(), bytes, "two-phase state round trip");
        } else {
            assert_eq!(TwoPhaseState::decode(&state.encode()), Ok(state.clone()), "an older state re-encoded");
        }
        let _ = twophase::describe(&state);
    }
    let xid = bytes
        .get(8..16)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(crate::types::FullXid(3), |b| crate::types::FullXid(u64::from_le_bytes(b)));
    let fs = FaultFs::new();
    let dir = Path::new("/fuzz");
    // The control file's next XID is after every prepared one.
    let opts = XactOptions { next_full_xid: crate::xact::varsup::advance(xid, 1000), ..XactOptions::default() };
    let Ok(tm) = TransactionManager::open(fs.clone(), dir, opts) else { return };
    let path = twophase::state_file_path(&dir.join(twophase::TWOPHASE_DIR), xid);
    let f = fs.open(&path, true).expect("FaultFs creates");
    f.write_at(&bytes, 0).expect("FaultFs writes");
    if tm.load_twophase_files().is_ok() {
        // A file whose XIDs are ahead of the next XID is set aside by the load and refused
        // (naming it) after replay, of which there is none here.
        let left = match tm.finish_twophase_recovery() {
            Ok(left) => left,
            Err(crate::Error::CorruptFile { .. }) => return,
            Err(e) => panic!("recovering a loaded state: {e}"),
        };
        assert_eq!(tm.prepared_xacts().len(), left);
        let problems = tm.verify().expect("verifying");
        assert!(problems.is_empty(), "a recovered prepared transaction is consistent: {problems:?}");
    }
}

/// A replication slot's state file as startup reads it. Input: control byte, the file's bytes
/// (its directory is named after the slot the bytes claim, or `fuzz` when they do not decode).
pub fn slot_state(data: &[u8]) {
    use crate::decode::slot::{self, ReplicationSlots, SlotData, SlotInfo, WalPosition};
    let mut input = Input(data);
    let ctl = input.u8();
    let mut bytes = input.rest().to_vec();
    if ctl & REPAIR != 0 && bytes.len() >= 4 {
        let n = bytes.len();
        let crc = crate::crc::crc32c(&bytes[..n - 4]);
        bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
    }
    let decoded = SlotData::decode(&bytes).ok();
    if let Some(d) = &decoded {
        assert_eq!(d.encode(), bytes, "slot state round trip");
        let _ = slot::describe(d);
    }
    let name = decoded.as_ref().map_or("fuzz", |d| d.name.as_str());
    let fs = FaultFs::new();
    let dir = Path::new("/fuzz");
    let slot_dir = slot::slot_dir(dir).join(name);
    fs.create_dir_all(&slot_dir).expect("FaultFs creates directories");
    let f = fs.open(&slot_dir.join("state"), true).expect("FaultFs creates");
    f.write_at(&bytes, 0).expect("FaultFs writes");
    match ReplicationSlots::open(fs.clone(), dir) {
        Ok(slots) => {
            let list = slots.list();
            assert_eq!(list.len(), 1, "one state file, one slot");
            assert_eq!(Some(&list[0]), decoded.as_ref(), "startup loads what decode accepts");
            let m = slots.minima();
            assert_eq!(m.restart_lsn.is_some(), !list[0].invalidated, "only a valid slot keeps WAL");
            let segment_size = 1u64 << (20 + (ctl >> 1) % 11);
            let pos = WalPosition {
                current: Lsn(u64::from_le_bytes(bytes.get(20..28).and_then(|b| b.try_into().ok()).unwrap_or([0; 8]))),
                segment_size,
                max_wal_size: 64 * segment_size,
                max_slot_wal_keep_size: if ctl & 0x80 != 0 { -1 } else { i64::from(ctl) << 20 },
            };
            let _ = SlotInfo::of(&list[0], &pos);
            if let Some((l, _)) = m.restart_lsn {
                let _ = pos.keep_lsn(l);
            }
        }
        Err(e) => {
            assert!(decoded.is_none(), "startup refused a state decode accepts: {e}");
            assert!(matches!(e, Error::CorruptFile { .. }), "a bad state file is a corrupt-file error: {e}");
        }
    }
}

/// One pgoutput message (`decode::pgoutput::proto`). Input: control byte (bit 1: the reader
/// is inside a streamed block, so row messages carry an XID), the message's bytes. A message
/// the reader accepts encodes back to the same bytes and renders.
pub fn pgoutput_message(data: &[u8]) {
    use crate::decode::pgoutput::proto::{Normalizer, Reader};
    let mut input = Input(data);
    let ctl = input.u8();
    let bytes = input.rest();
    let mut reader = if ctl & 0x02 != 0 { Reader::in_stream() } else { Reader::default() };
    if let Ok(m) = reader.parse(bytes) {
        assert_eq!(m.encode(), bytes, "pgoutput message round trip");
        let _ = Normalizer::default().render(&m);
    }
}

/// The transaction [`spill_file`] spills: top-level XID 1000, its changes (LSN, writing XID,
/// kind, old, new; the second half by subtransaction 1001) and where the subtransaction
/// begins.
fn spill_transaction() -> (Xid, Vec<SpillChange>, Lsn) {
    use crate::decode::reorderbuffer::ChangeKind;
    let kinds = [ChangeKind::Insert, ChangeKind::Update, ChangeKind::Delete, ChangeKind::Message];
    let changes = (0..300u32)
        .map(|i| {
            let kind = kinds[i as usize % 4];
            let old = match kind {
                ChangeKind::Update | ChangeKind::Delete => vec![b'k', i as u8, (i >> 8) as u8],
                ChangeKind::Message => b"prefix".to_vec(),
                _ => Vec::new(),
            };
            let new = if kind == ChangeKind::Delete { Vec::new() } else { vec![i as u8; 8 + i as usize % 40] };
            (Lsn(0x1000 + u64::from(i) * 64), Xid(if i < 150 { 1000 } else { 1001 }), kind, old, new)
        })
        .collect();
    (Xid(1000), changes, Lsn(0x1000 + 150 * 64))
}

type SpillChange = (Lsn, Xid, crate::decode::reorderbuffer::ChangeKind, Vec<u8>, Vec<u8>);

/// A reorder buffer under a 16 kB limit holding [`spill_transaction`], most of it spilled and
/// flushed to one segment file; that file's path and bytes.
fn spilled_buffer(
    fs: &Arc<FaultFs>,
) -> crate::Result<(crate::decode::reorderbuffer::ReorderBuffer, std::path::PathBuf, Vec<u8>)> {
    use crate::decode::reorderbuffer::{Change, NoStreaming, ReorderBuffer, ReorderBufferConfig};
    let dir = Path::new("/fuzz/pg_replslot/s");
    let cfg = ReorderBufferConfig { memory_limit: 16 << 10, ..ReorderBufferConfig::default() };
    let mut rb = ReorderBuffer::new(cfg, fs.clone(), dir)?;
    let (top, changes, _) = spill_transaction();
    for (lsn, xid, kind, old, new) in &changes {
        let c = Change { lsn: *lsn, xid: *xid, kind: *kind, rel: REL, old, new };
        rb.queue_change(top, &c, &mut NoStreaming)?;
    }
    rb.flush_spill()?;
    let mut names = fs.list(dir)?;
    names.sort();
    let path = dir.join(names.first().ok_or_else(|| Error::invalid("nothing spilled"))?);
    let f = fs.open(&path, false)?;
    let mut bytes = vec![0; f.len()? as usize];
    f.read_exact_at(&mut bytes, 0)?;
    Ok((rb, path, bytes))
}

/// The spill segment bytes [`spill_file`] starts from (its seeds).
pub fn spill_file_original() -> Vec<u8> {
    spilled_buffer(&FaultFs::new()).expect("the spill fuzz target's buffer").2
}

/// The reorder buffer's spill log read back (`decode/reorderbuffer/spill.rs`): a transaction
/// of 300 changes of every kind, the second half by a subtransaction, is queued under a 16 kB
/// `logical_decoding_work_mem` until most of it is spilled to one segment file, whose bytes
/// are then replaced, and the transaction is committed (its runs read back, checked and
/// decoded, the in-memory tail after them). Input: control byte, bytes. With [`REPAIR`] the
/// run headers the buffer wrote stay and the input fills their bodies (cycled), with CRCs
/// repaired, so that the change decoder behind the CRC is fuzzed; without it the input is the
/// whole file. Control bit 1: a ROLLBACK TO first cuts the subtransaction off at its first
/// change, inside the spilled part (the cut reads a run too).
///
/// Whatever the bytes, the buffer hands back changes or a corrupt-file error naming the
/// segment file; bytes equal to those written give back the changes queued.
pub fn spill_file(data: &[u8]) {
    use crate::decode::reorderbuffer::{NoStreaming, SPILL_RUN_HEADER};
    let mut input = Input(data);
    let ctl = input.u8();
    let bytes = input.rest();
    let fs = FaultFs::new();
    let (mut rb, path, original) = spilled_buffer(&fs).expect("the spill fuzz target's buffer");
    let mut file = bytes.to_vec();
    if ctl & REPAIR != 0 {
        file = original.clone();
        let mut filler = bytes.iter().copied().cycle();
        let mut at = 0;
        while at + SPILL_RUN_HEADER <= file.len() {
            let len = u32::from_le_bytes(file[at + 8..at + 12].try_into().expect("4 bytes")) as usize;
            let body = at + SPILL_RUN_HEADER..at + SPILL_RUN_HEADER + len;
            if !bytes.is_empty() {
                file[body.clone()].iter_mut().for_each(|b| *b = filler.next().expect("cycled"));
            }
            let crc = crate::crc::crc32c(&file[body.clone()]);
            file[at + 12..at + 16].copy_from_slice(&crc.to_le_bytes());
            at = body.end;
        }
    }
    let f = fs.open(&path, true).expect("FaultFs opens");
    f.set_len(0).expect("FaultFs truncates");
    f.write_at(&file, 0).expect("FaultFs writes");
    let (top, changes, sub_lsn) = spill_transaction();
    let cut = ctl & 0x02 != 0;
    let mut got: Vec<SpillChange> = Vec::new();
    let result = (|| {
        if cut {
            rb.abort_subxacts(top, &[Xid(1001)], Some(sub_lsn), &mut NoStreaming)?;
        }
        rb.commit(top, &mut |c| {
            got.push((c.lsn, c.xid, c.kind, c.old.to_vec(), c.new.to_vec()));
            Ok(())
        })
    })();
    match result {
        Ok(streamed) => {
            assert!(!streamed);
            if file == original {
                let want = if cut { &changes[..150] } else { &changes[..] };
                assert_eq!(got, want, "the changes spilled come back");
            }
        }
        Err(Error::CorruptFile { path: p, detail }) => {
            assert_eq!(p, path, "the error names the spill file");
            assert!(detail.starts_with("spill run at offset "), "and the offset: {detail}");
            assert!(file != original, "the bytes written are read back: {detail}");
        }
        Err(e) => panic!("a corrupt spill file is a corrupt-file error: {e}"),
    }
}
