//! Specification tests of the WAL: what goes in comes out, full-page images follow the redo
//! pointer, a torn or stale tail ends reading at the last valid record, concurrent inserters
//! produce one complete stream, and a failed fsync poisons the WAL.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rand::{Rng, SeedableRng};

use super::*;
use crate::io::{File, RealFs};
use crate::page::BLCKSZ;
use crate::types::{BlockNumber, Fork, Oid};

const SEG: u64 = 64 << 10;

fn config(wal_buffers_bytes: usize) -> WalConfig {
    WalConfig { segment_size: SEG, full_page_writes: true, wal_buffers_bytes }
}

fn open(dir: &Path) -> Wal {
    Wal::open(Arc::new(RealFs), dir, first_lsn(SEG), Lsn::INVALID, config(16 << 10)).unwrap()
}

fn tag(rel: u32, block: u32) -> BufferTag {
    BufferTag { rel: Oid(rel), fork: Fork::Main, block: BlockNumber(block) }
}

fn simple(xid: u32, main_data: Vec<u8>) -> RecordBuilder<'static> {
    RecordBuilder { rmgr: Rmgr::Heap, info: 0x10, xid: Xid(xid), blocks: vec![], main_data }
}

fn read_all(dir: &Path, start: Lsn) -> (Vec<DecodedRecord>, WalReader) {
    let mut r = WalReader::new(Arc::new(RealFs), dir, start, SEG);
    let mut out = Vec::new();
    while let Some(rec) = r.next().unwrap() {
        out.push(rec);
    }
    (out, r)
}

/// A standard page: `pd_lsn`, `pd_lower`, `pd_upper` set, random bytes outside the hole,
/// zeros inside it.
fn page(lsn: u64, lower: u16, upper: u16, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut p: Vec<u8> = (0..BLCKSZ).map(|_| rng.gen()).collect();
    p[0..8].copy_from_slice(&lsn.to_le_bytes());
    p[12..14].copy_from_slice(&lower.to_le_bytes());
    p[14..16].copy_from_slice(&upper.to_le_bytes());
    if lower <= upper {
        p[usize::from(lower)..usize::from(upper)].fill(0);
    }
    p
}

#[test]
fn random_records_round_trip_across_segment_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut expected = Vec::new();
    for i in 0..600u32 {
        let main: Vec<u8> = (0..rng.gen_range(0..3000)).map(|_| rng.gen()).collect();
        let data: Vec<u8> = (0..rng.gen_range(0..500)).map(|_| rng.gen()).collect();
        let mut rec = simple(i + 3, main.clone());
        rec.info = i as u8;
        if i % 3 == 0 {
            rec.blocks.push(BlockRef {
                id: 0,
                tag: tag(16384 + i, i),
                will_init: i % 2 == 0,
                page: None,
                data: data.clone(),
            });
        }
        let end = wal.insert(&rec).unwrap();
        expected.push((end, i, main, data));
        if i % 97 == 0 {
            wal.flush(end).unwrap();
        }
    }
    wal.flush(wal.insert_lsn()).unwrap();
    assert_eq!(wal.flushed_lsn(), wal.insert_lsn());
    assert!(wal.insert_lsn().0 > 8 * SEG, "the test must span many segments");

    let (recs, reader) = read_all(dir.path(), first_lsn(SEG));
    assert_eq!(recs.len(), expected.len(), "stopped early: {:?}", reader.stop_reason());
    let mut prev = Lsn::INVALID;
    let mut start = first_lsn(SEG);
    for (rec, (end, i, main, data)) in recs.iter().zip(&expected) {
        assert_eq!((rec.lsn, rec.end_lsn, rec.prev), (start, *end, prev));
        assert_eq!((rec.xid, rec.rmgr, rec.info), (Xid(i + 3), Rmgr::Heap, *i as u8));
        assert_eq!(&rec.main_data, main);
        if i % 3 == 0 {
            assert_eq!(rec.blocks.len(), 1);
            assert_eq!(rec.blocks[0].tag, tag(16384 + i, *i));
            assert_eq!(rec.blocks[0].will_init, i % 2 == 0);
            assert_eq!(&rec.blocks[0].data, data);
            assert!(rec.blocks[0].image.is_none());
        } else {
            assert!(rec.blocks.is_empty());
        }
        prev = rec.lsn;
        start = rec.end_lsn;
    }
    assert_eq!(reader.end_lsn(), wal.insert_lsn());
    assert_eq!(reader.last_record_lsn(), prev);
    let reason = reader.stop_reason().unwrap();
    assert!(reason.contains("runs past the end") || reason.contains("does not exist"), "{reason}");
    let stats = wal.stats();
    assert_eq!(stats.records, 600);
    assert_eq!(stats.bytes, wal.insert_lsn().0 - first_lsn(SEG).0);
}

#[test]
fn full_page_image_skips_the_hole_and_restores_the_exact_page() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    let standard = page(0, 200, 7000, 1);
    let odd = page(0, 7000, 200, 2); // lower > upper: not a standard page, logged whole
    let rec = RecordBuilder {
        rmgr: Rmgr::Heap2,
        info: 0,
        xid: Xid(10),
        blocks: vec![
            BlockRef { id: 0, tag: tag(1, 0), will_init: false, page: Some(&standard), data: vec![9; 40] },
            BlockRef { id: 3, tag: tag(1, 7), will_init: false, page: Some(&odd), data: vec![] },
        ],
        main_data: b"prune".to_vec(),
    };
    let end = wal.insert(&rec).unwrap();
    wal.flush(end).unwrap();
    let stats = wal.stats();
    assert_eq!(stats.fpi, 2);
    let hole = 7000 - 200;
    assert!(stats.bytes < (2 * BLCKSZ - hole + 100) as u64, "hole not skipped: {}", stats.bytes);

    let (recs, _) = read_all(dir.path(), first_lsn(SEG));
    assert_eq!(recs.len(), 1);
    let b = &recs[0].blocks;
    assert_eq!(&b[0].image.as_deref().unwrap()[..], &standard[..]);
    assert!(b[0].data.is_empty(), "an image replaces the block data");
    assert_eq!(&b[1].image.as_deref().unwrap()[..], &odd[..]);
    assert_eq!(b[1].id, 3);
    assert_eq!(recs[0].main_data, b"prune");
}

#[test]
fn image_only_when_page_lsn_at_or_before_redo_pointer_and_full_page_writes_on() {
    for fpw in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = WalConfig { full_page_writes: fpw, ..config(1 << 20) };
        let wal = Wal::open(Arc::new(RealFs), dir.path(), first_lsn(SEG), Lsn::INVALID, cfg).unwrap();
        for _ in 0..5 {
            wal.insert(&simple(3, vec![1; 100])).unwrap();
        }
        let redo = wal.begin_checkpoint();
        assert_eq!(redo, wal.insert_lsn());
        assert_eq!(wal.redo_ptr(), redo);
        let cases = [
            (redo.0 - 50, false, true), // changed before the checkpoint: image
            (redo.0, false, true),      // exactly at the redo pointer: image
            (redo.0 + 1, false, false), // already imaged since the checkpoint: data only
            (redo.0 - 50, true, false), // will_init: never an image
        ];
        let mut images = 0;
        for (i, (lsn, will_init, want)) in cases.into_iter().enumerate() {
            let p = page(lsn, 64, 4000, i as u64);
            let rec = RecordBuilder {
                blocks: vec![BlockRef { id: 0, tag: tag(5, i as u32), will_init, page: Some(&p), data: vec![7; 12] }],
                ..simple(4, vec![])
            };
            let end = wal.insert(&rec).unwrap();
            wal.flush(end).unwrap();
            let got = read_record_at(Arc::new(RealFs), dir.path(), wal_last_start(&wal, end), SEG).unwrap();
            let want = want && fpw;
            assert_eq!(got.blocks[0].image.is_some(), want, "case {i}, fpw {fpw}");
            assert_eq!(got.blocks[0].data.is_empty(), want, "case {i}: data only without image");
            images += u64::from(want);
        }
        assert_eq!(wal.stats().fpi, images);
    }
}

/// The start of the record that ended at `end` (the last one inserted).
fn wal_last_start(wal: &Wal, end: Lsn) -> Lsn {
    assert_eq!(wal.insert_lsn(), end);
    wal.insert.lock().prev
}

fn write_records(dir: &Path, n: u32) -> Vec<Lsn> {
    let wal = open(dir);
    let mut starts = Vec::new();
    for i in 0..n {
        starts.push(wal.insert_lsn());
        wal.insert(&simple(i + 3, vec![i as u8; 1000 + i as usize * 37])).unwrap();
    }
    wal.flush(wal.insert_lsn()).unwrap();
    starts
}

fn last_segment(dir: &Path) -> std::path::PathBuf {
    let names = RealFs.list(dir).unwrap();
    dir.join(names.last().unwrap())
}

#[test]
fn torn_tail_ends_reading_at_the_previous_record() {
    let dir = tempfile::tempdir().unwrap();
    let starts = write_records(dir.path(), 200);
    let last = *starts.last().unwrap();
    let seg_path = last_segment(dir.path());
    let f = RealFs.open(&seg_path, false).unwrap();
    assert!(last.0 % SEG + 100 < f.len().unwrap(), "last record must start in the last segment");
    f.set_len(last.0 % SEG + 100).unwrap(); // cut the last record after 100 bytes

    let (recs, r) = read_all(dir.path(), first_lsn(SEG));
    assert_eq!(recs.len(), 199);
    assert_eq!(r.end_lsn(), last);
    assert_eq!(r.last_record_lsn(), starts[198]);
    assert!(r.stop_reason().unwrap().contains("runs past the end"), "{:?}", r.stop_reason());
}

#[test]
fn flipped_byte_fails_the_crc_and_ends_reading() {
    let dir = tempfile::tempdir().unwrap();
    let starts = write_records(dir.path(), 100);
    let victim = starts[60];
    let seg_path = dir.path().join(segment::segment_file_name(victim.0 / SEG, SEG));
    let f = RealFs.open(&seg_path, false).unwrap();
    let at = victim.0 % SEG + 24 + 10; // in the body, inside the segment for these sizes
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_at(&[b[0] ^ 1], at).unwrap();

    let (recs, r) = read_all(dir.path(), first_lsn(SEG));
    assert_eq!(recs.len(), 60);
    assert_eq!(r.end_lsn(), victim);
    assert!(r.stop_reason().unwrap().contains("checksum"), "{:?}", r.stop_reason());
    let err = read_record_at(Arc::new(RealFs), dir.path(), victim, SEG).unwrap_err();
    assert!(matches!(err, Error::CorruptWal { lsn, .. } if lsn == victim), "{err}");
}

#[test]
fn zeros_report_invalid_record_length() {
    let dir = tempfile::tempdir().unwrap();
    let starts = write_records(dir.path(), 3);
    let f = RealFs.open(&last_segment(dir.path()), false).unwrap();
    let end = f.len().unwrap();
    f.write_at(&[0u8; 64], end).unwrap();
    let (recs, r) = read_all(dir.path(), starts[0]);
    assert_eq!(recs.len(), 3);
    assert_eq!(r.stop_reason(), Some(format!("invalid record length at {}: wanted 29, got 0", r.end_lsn()).as_str()));
}

#[test]
fn stale_segment_from_an_older_stream_stops_reading_by_prev_link() {
    // An older history wrote segment 2 with records whose xl_prev chain is its own.
    let old = tempfile::tempdir().unwrap();
    let wal_old = Wal::open(Arc::new(RealFs), old.path(), Lsn(2 * SEG), Lsn(SEG + 1234), config(1 << 20)).unwrap();
    for i in 0..10 {
        wal_old.insert(&simple(i + 3, vec![0xAA; 500])).unwrap();
    }
    wal_old.flush(wal_old.insert_lsn()).unwrap();

    // The new stream fills segment 1 exactly, so its next record would start segment 2.
    let new = tempfile::tempdir().unwrap();
    let wal = open(new.path());
    while SEG * 2 - wal.insert_lsn().0 > 2000 {
        wal.insert(&simple(3, vec![0x55; 1000])).unwrap();
    }
    let fill = (SEG * 2 - wal.insert_lsn().0) as usize - record::MIN_RECORD_SIZE;
    wal.insert(&simple(3, vec![0x55; fill])).unwrap();
    assert_eq!(wal.insert_lsn(), Lsn(2 * SEG));
    wal.flush(wal.insert_lsn()).unwrap();
    let seg2 = segment::segment_file_name(2, SEG);
    std::fs::copy(old.path().join(&seg2), new.path().join(&seg2)).unwrap();

    let (recs, r) = read_all(new.path(), first_lsn(SEG));
    assert_eq!(r.end_lsn(), Lsn(2 * SEG), "no record of the old stream may be returned");
    assert!(recs.iter().all(|rec| rec.main_data.first() == Some(&0x55)));
    assert!(r.stop_reason().unwrap().contains("incorrect prev-link"), "{:?}", r.stop_reason());
}

#[test]
fn reopen_continues_the_chain_and_discards_the_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let starts = write_records(dir.path(), 150);
    let f = RealFs.open(&last_segment(dir.path()), false).unwrap();
    let len = f.len().unwrap();
    f.set_len(len - 10).unwrap(); // tear the last record
    let (_, r) = read_all(dir.path(), first_lsn(SEG));
    assert_eq!(r.end_lsn(), starts[149]);

    let wal = Wal::open(Arc::new(RealFs), dir.path(), r.end_lsn(), r.last_record_lsn(), config(4096)).unwrap();
    for i in 0..50 {
        wal.insert(&simple(1000 + i, vec![1; 10])).unwrap();
    }
    wal.flush(wal.insert_lsn()).unwrap();
    let (recs, r2) = read_all(dir.path(), first_lsn(SEG));
    assert_eq!(recs.len(), 149 + 50, "{:?}", r2.stop_reason());
    assert_eq!(r2.end_lsn(), wal.insert_lsn());
}

#[test]
fn concurrent_inserts_and_flushes_produce_a_complete_stream() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Arc::new(Wal::open(Arc::new(RealFs), dir.path(), first_lsn(SEG), Lsn::INVALID, config(8 << 10)).unwrap());
    const PER_THREAD: u32 = 400;
    let handles: Vec<_> = (0..4u32)
        .map(|t| {
            let wal = Arc::clone(&wal);
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(u64::from(t));
                let mut ends = Vec::new();
                for seq in 0..PER_THREAD {
                    let mut main = vec![t as u8];
                    main.extend_from_slice(&seq.to_le_bytes());
                    main.resize(5 + rng.gen_range(0..700), t as u8);
                    let end = wal.insert(&simple(t + 3, main)).unwrap();
                    if seq % 10 == 0 {
                        wal.flush(end).unwrap();
                        assert!(wal.flushed_lsn() >= end);
                    }
                    ends.push(end);
                }
                ends
            })
        })
        .collect();
    let mut all_ends: Vec<Lsn> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    wal.flush(wal.insert_lsn()).unwrap();

    let (recs, r) = read_all(dir.path(), first_lsn(SEG));
    assert_eq!(recs.len(), 4 * PER_THREAD as usize, "{:?}", r.stop_reason());
    let mut next_seq = [0u32; 4];
    for rec in &recs {
        let t = usize::from(rec.main_data[0]);
        let seq = u32::from_le_bytes(rec.main_data[1..5].try_into().unwrap());
        assert_eq!(seq, next_seq[t], "thread {t}'s records out of order");
        assert_eq!(rec.xid, Xid(t as u32 + 3));
        next_seq[t] += 1;
    }
    let mut read_ends: Vec<Lsn> = recs.iter().map(|r| r.end_lsn).collect();
    all_ends.sort();
    read_ends.sort();
    assert_eq!(all_ends, read_ends, "insert must return each record's end LSN");
}

#[test]
fn remove_segments_before_keeps_the_segment_of_the_lsn() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    while wal.insert_lsn().0 < 5 * SEG + 100 {
        wal.insert(&simple(3, vec![0; 4000])).unwrap();
    }
    wal.flush(wal.insert_lsn()).unwrap();
    let removed = wal.remove_segments_before(Lsn(4 * SEG + 10)).unwrap();
    assert_eq!(removed, 3, "segments 1, 2 and 3");
    let names = RealFs.list(dir.path()).unwrap();
    assert_eq!(names.first().unwrap(), &segment::segment_file_name(4, SEG));
    assert_eq!(wal.remove_segments_before(Lsn(4 * SEG + 10)).unwrap(), 0);
    wal.insert(&simple(3, vec![0; 10])).unwrap();
    wal.flush(wal.insert_lsn()).unwrap();
}

/// A file system over real files whose `sync` fails once `fail` is set.
struct FailingSyncFs {
    fail: Arc<AtomicBool>,
}

struct FailingSyncFile {
    inner: Arc<dyn File>,
    fail: Arc<AtomicBool>,
}

impl File for FailingSyncFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            let e = std::io::Error::other("injected EIO");
            return Err(Error::io("fsync", self.path(), e));
        }
        self.inner.sync()
    }
    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        self.inner.set_len(len)
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
}

impl FileSystem for FailingSyncFs {
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn File>> {
        let inner = RealFs.open(path, create)?;
        Ok(Arc::new(FailingSyncFile { inner, fail: Arc::clone(&self.fail) }))
    }
    fn exists(&self, path: &Path) -> bool {
        RealFs.exists(path)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        RealFs.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        RealFs.rename(from, to)
    }
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        RealFs.create_dir_all(path)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        RealFs.list(dir)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        RealFs.sync_dir(dir)
    }
}

#[test]
fn failed_fsync_poisons_the_wal_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let fail = Arc::new(AtomicBool::new(false));
    let fs = Arc::new(FailingSyncFs { fail: Arc::clone(&fail) });
    let wal = Wal::open(fs, dir.path(), first_lsn(SEG), Lsn::INVALID, config(1 << 20)).unwrap();
    let end1 = wal.insert(&simple(3, vec![1; 100])).unwrap();
    wal.flush(end1).unwrap();
    assert_eq!(wal.flushed_lsn(), end1);

    fail.store(true, Ordering::SeqCst);
    let end2 = wal.insert(&simple(3, vec![2; 100])).unwrap();
    let err = wal.flush(end2).unwrap_err();
    assert!(matches!(&err, Error::Poisoned(msg) if msg.contains("injected EIO")), "{err}");
    assert_eq!(wal.flushed_lsn(), end1, "a failed fsync never advances the flushed LSN");
    assert!(wal.is_poisoned());

    fail.store(false, Ordering::SeqCst); // a later fsync would "succeed": must not be trusted
    assert!(matches!(wal.flush(end2), Err(Error::Poisoned(m)) if m.contains("injected EIO")));
    assert!(matches!(wal.insert(&simple(3, vec![3])), Err(Error::Poisoned(_))));
    assert_eq!(wal.flushed_lsn(), end1);
}

#[test]
fn describe_renders_like_pg_waldump() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    wal.insert(&simple(734, vec![0; 5])).unwrap();
    let p = page(0, 100, 8000, 3);
    let rec = RecordBuilder {
        xid: Xid(735),
        blocks: vec![BlockRef { id: 0, tag: tag(16384, 0), will_init: false, page: Some(&p), data: vec![] }],
        ..simple(735, vec![1, 2, 3])
    };
    wal.insert(&rec).unwrap();
    wal.flush(wal.insert_lsn()).unwrap();
    let (recs, _) = read_all(dir.path(), first_lsn(SEG));
    let line = desc::describe(&recs[1], &|r| format!("INSERT off: {}", r.main_data.len()));
    let tot = recs[1].end_lsn.0 - recs[1].lsn.0;
    let rec_len = tot - (BLCKSZ as u64 - 7900);
    assert_eq!(
        line,
        format!(
            "rmgr: Heap        len (rec/tot): {rec_len:>6}/{tot:>8}, tx:        735, \
             lsn: 0/{:08X}, prev 0/00010000, desc: INSERT off: 3, \
             blkref #0: rel 16384 fork main blk 0 FPW",
            recs[1].lsn.0
        )
    );
}

#[test]
fn expect_prev_checks_the_first_record_too() {
    let dir = tempfile::tempdir().unwrap();
    let starts = write_records(dir.path(), 3);
    let mut r = WalReader::new(Arc::new(RealFs), dir.path(), starts[1], SEG);
    r.expect_prev(starts[0]);
    assert!(r.next().unwrap().is_some());
    let mut r = WalReader::new(Arc::new(RealFs), dir.path(), starts[1], SEG);
    r.expect_prev(starts[1]);
    assert!(r.next().unwrap().is_none());
    assert!(r.stop_reason().unwrap().contains("incorrect prev-link"));
    assert_eq!(r.end_lsn(), starts[1]);
}

/// Every truncation and every single-byte change of a valid record body either decodes or is
/// rejected with a reason; none panics (the reader only decodes after the CRC matched, so this
/// stands in for bytes a buggy writer could have produced).
#[test]
fn decoder_survives_truncated_and_mutated_records() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    let p = page(0, 300, 7900, 11);
    let rec = RecordBuilder {
        blocks: vec![
            BlockRef { id: 0, tag: tag(1, 2), will_init: false, page: Some(&p), data: vec![] },
            BlockRef { id: 1, tag: tag(1, 3), will_init: true, page: None, data: vec![5; 30] },
        ],
        ..simple(9, vec![8; 20])
    };
    let end = wal.insert(&rec).unwrap();
    wal.flush(end).unwrap();
    let start = first_lsn(SEG);
    let f = RealFs.open(&dir.path().join(segment::segment_file_name(1, SEG)), false).unwrap();
    let mut bytes = vec![0u8; (end.0 - start.0) as usize];
    f.read_exact_at(&mut bytes, 0).unwrap();
    assert!(record::decode(start, &bytes).is_ok());
    for len in 0..bytes.len().min(200) {
        let mut cut = bytes[..len].to_vec();
        if len >= 4 {
            cut[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        }
        assert!(record::decode(start, &cut).is_err(), "a truncated record decoded ({len} bytes)");
    }
    for i in 24..bytes.len().min(400) {
        for bit in [0x01u8, 0x80] {
            let mut m = bytes.clone();
            m[i] ^= bit;
            let _ = record::decode(start, &m);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Header checks before the body

/// A record of exactly `len` bytes (no blocks): header, block count, main-data length, main.
fn sized(xid: u32, len: usize, fill: u8) -> RecordBuilder<'static> {
    simple(xid, vec![fill; len - record::MIN_RECORD_SIZE])
}

/// Inserts `len`-byte records until the insert position reaches `upto`; returns their starts.
fn fill_to(wal: &Wal, upto: Lsn, len: usize, fill: u8) -> Vec<Lsn> {
    let mut starts = Vec::new();
    while wal.insert_lsn() < upto {
        starts.push(wal.insert_lsn());
        wal.insert(&sized(3, len, fill)).unwrap();
    }
    starts
}

/// A stale header claiming a gigabyte is refused on its `xl_prev` before its body is read:
/// the reader does not walk the segments after it.
#[test]
fn a_stale_header_is_refused_before_its_body_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    let starts = fill_to(&wal, Lsn(SEG + 5000), 1000, 0x33);
    wal.flush(wal.insert_lsn()).unwrap();
    let end = wal.insert_lsn();
    let mut head = [0u8; record::RECORD_HEADER_SIZE];
    head[0..4].copy_from_slice(&(record::MAX_RECORD_SIZE as u32).to_le_bytes());
    head[8..16].copy_from_slice(&(SEG + 8).to_le_bytes());
    let f = RealFs.open(&dir.path().join(segment::segment_file_name(1, SEG)), false).unwrap();
    f.write_at(&head, end.0 - SEG).unwrap();
    let (recs, r) = read_all(dir.path(), starts[0]);
    assert_eq!(recs.len(), starts.len());
    let reason = r.stop_reason().unwrap();
    assert!(reason.contains("incorrect prev-link 0/10008"), "{reason}");
}

#[test]
fn an_unknown_resource_manager_ends_the_wal_at_its_header() {
    let dir = tempfile::tempdir().unwrap();
    let starts = write_records(dir.path(), 3);
    let f = RealFs.open(&last_segment(dir.path()), false).unwrap();
    f.write_at(&[99], starts[2].0 - SEG + 17).unwrap();
    let (recs, r) = read_all(dir.path(), starts[0]);
    assert_eq!(recs.len(), 2);
    assert_eq!(r.stop_reason(), Some(format!("invalid resource manager ID 99 at {}", starts[2]).as_str()));
}
