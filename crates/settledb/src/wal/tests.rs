//! Specification tests of the WAL: what goes in comes out, full-page images follow the redo
//! pointer, a torn or stale tail ends reading at the last valid record, concurrent inserters
//! produce one complete stream, and a failed fsync poisons the WAL.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rand::{Rng, SeedableRng};

use super::*;
use crate::io::fault::{CrashMode, FaultFs};
use crate::io::{File, RealFs};
use crate::page::BLCKSZ;
use crate::types::{BlockNumber, Fork, Oid};

const SEG: u64 = 64 << 10;

fn config(wal_buffers_bytes: usize) -> WalConfig {
    WalConfig { segment_size: SEG, full_page_writes: true, wal_buffers_bytes, logical: false }
}

fn open(dir: &Path) -> Wal {
    Wal::open(Arc::new(RealFs), dir, first_lsn(SEG), Lsn::INVALID, config(16 << 10)).unwrap()
}

fn tag(rel: u32, block: u32) -> BufferTag {
    BufferTag { rel: Oid(rel), fork: Fork::Main, block: BlockNumber(block) }
}

fn simple(xid: u32, main_data: Vec<u8>) -> RecordBuilder<'static> {
    RecordBuilder {
        toplevel_xid: crate::types::Xid::INVALID,
        rmgr: Rmgr::Heap,
        info: 0x10,
        xid: Xid(xid),
        blocks: vec![],
        main_data,
    }
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
                keep_data: false,
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
    // Decoding into one record again and again (blocks coming and going, data of every
    // length) gives each record exactly as a fresh decode does.
    let mut again = WalReader::new(Arc::new(RealFs), dir.path(), first_lsn(SEG), SEG);
    let mut reused = DecodedRecord::empty();
    let mut n = 0;
    while again.next_into(&mut reused).unwrap() {
        assert_eq!(reused, recs[n], "record {n} decoded into a reused record");
        n += 1;
    }
    assert_eq!((n, again.stop_reason()), (recs.len(), reader.stop_reason()));
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
        toplevel_xid: crate::types::Xid::INVALID,
        rmgr: Rmgr::Heap2,
        info: 0,
        xid: Xid(10),
        blocks: vec![
            BlockRef {
                keep_data: false,
                id: 0,
                tag: tag(1, 0),
                will_init: false,
                page: Some(&standard),
                data: vec![9; 40],
            },
            BlockRef { keep_data: false, id: 3, tag: tag(1, 7), will_init: false, page: Some(&odd), data: vec![] },
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
                toplevel_xid: crate::types::Xid::INVALID,
                blocks: vec![BlockRef {
                    keep_data: false,
                    id: 0,
                    tag: tag(5, i as u32),
                    will_init,
                    page: Some(&p),
                    data: vec![7; 12],
                }],
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
fn old_segments_are_removed_beyond_the_recycling_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    while wal.insert_lsn().0 < 5 * SEG + 100 {
        wal.insert(&simple(3, vec![0; 4000])).unwrap();
    }
    wal.flush(wal.insert_lsn()).unwrap();
    // min_wal_size and max_wal_size of one segment: the horizon is the redo pointer's own
    // segment, so nothing can be recycled and segments 1, 2 and 3 go.
    let done = wal.remove_old_segments(Lsn(4 * SEG + 10), Lsn::INVALID, SEG, SEG).unwrap();
    assert_eq!(done, segment::Recycled { recycled: 0, removed: 3 });
    let names = RealFs.list(dir.path()).unwrap();
    assert_eq!(names, [4, 5].map(|n| segment::segment_file_name(n, SEG)));
    let again = wal.remove_old_segments(Lsn(4 * SEG + 10), Lsn::INVALID, SEG, SEG).unwrap();
    assert_eq!(again, segment::Recycled::default());
    wal.insert(&simple(3, vec![0; 10])).unwrap();
    wal.flush(wal.insert_lsn()).unwrap();
}

#[test]
fn segments_a_replication_slot_keeps_are_not_removed() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    while wal.insert_lsn().0 < 5 * SEG + 100 {
        wal.insert(&simple(3, vec![0; 4000])).unwrap();
    }
    wal.flush(wal.insert_lsn()).unwrap();
    // A slot needs WAL from segment 2 on: only segment 1 goes, whatever the redo pointer.
    let redo = Lsn(4 * SEG + 10);
    let done = wal.remove_old_segments_keeping(redo, Lsn(2 * SEG + 500), Lsn::INVALID, SEG, SEG).unwrap();
    assert_eq!(done, segment::Recycled { recycled: 0, removed: 1 });
    let names = RealFs.list(dir.path()).unwrap();
    assert_eq!(names, [2, 3, 4, 5].map(|n| segment::segment_file_name(n, SEG)));
    // A keep position past the redo pointer keeps nothing more than the redo pointer does.
    let done = wal.remove_old_segments_keeping(redo, Lsn(5 * SEG), Lsn::INVALID, SEG, SEG).unwrap();
    assert_eq!(done, segment::Recycled { recycled: 0, removed: 2 });
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
        toplevel_xid: crate::types::Xid::INVALID,
        xid: Xid(735),
        blocks: vec![BlockRef {
            keep_data: false,
            id: 0,
            tag: tag(16384, 0),
            will_init: false,
            page: Some(&p),
            data: vec![],
        }],
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
        toplevel_xid: crate::types::Xid::INVALID,
        blocks: vec![
            BlockRef { keep_data: false, id: 0, tag: tag(1, 2), will_init: false, page: Some(&p), data: vec![] },
            BlockRef { keep_data: false, id: 1, tag: tag(1, 3), will_init: true, page: None, data: vec![5; 30] },
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
// Recycling

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

fn segment_len(fs: &dyn FileSystem, dir: &Path, segno: u64) -> u64 {
    fs.open(&dir.join(segment::segment_file_name(segno, SEG)), false).unwrap().len().unwrap()
}

fn segment_numbers(fs: &dyn FileSystem, dir: &Path) -> Vec<u64> {
    fs.list(dir).unwrap().iter().filter_map(|n| segment::parse_segment_file_name(n, SEG)).collect()
}

#[test]
fn recycling_follows_postgres_xlogfileslop() {
    let seg16m = 16 << 20;
    // PostgreSQL's defaults (min_wal_size 80MB = 5 segments, max_wal_size 1GB = 64) with the
    // redo pointer in segment 0x3D and 33 segments written per checkpoint: 1.9 * 1.1 * 33 =
    // 68.97 segments wanted, capped at the redo segment + 64 - 1.
    let redo = Lsn(0x3D00_0100);
    let est = 33.0 * seg16m as f64;
    assert_eq!(segment::recycle_horizon(redo, seg16m, 80 << 20, 1 << 30, est), 0x3D + 63);
    // A quiet database keeps min_wal_size: the redo segment + 5 - 1.
    assert_eq!(segment::recycle_horizon(redo, seg16m, 80 << 20, 1 << 30, 0.0), 0x3D + 4);
    // Between the bounds: ceil((redo + 1.9 * 1.1 * 10 segments) / segment size).
    let want = ((redo.0 as f64 + 1.9 * 1.1 * 10.0 * seg16m as f64) / seg16m as f64).ceil() as u64;
    assert_eq!(segment::recycle_horizon(redo, seg16m, 80 << 20, 1 << 30, 10.0 * seg16m as f64), want);
    // max_wal_size wins over min_wal_size, as in PostgreSQL.
    assert_eq!(segment::recycle_horizon(redo, seg16m, 1 << 30, 32 << 20, 0.0), 0x3D + 1);

    // The estimate jumps up at once and decays by a tenth of the difference.
    assert_eq!(segment::next_distance_estimate(100.0, 500), 500.0);
    assert_eq!(segment::next_distance_estimate(500.0, 100), 460.0);
}

#[test]
fn checkpoint_recycles_old_segments_as_future_ones_and_the_reader_stops_at_their_stale_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    fill_to(&wal, Lsn(5 * SEG + 3000), 1000, 0x11);
    wal.flush(wal.insert_lsn()).unwrap();
    let redo = wal.begin_checkpoint();
    assert_eq!(segment_numbers(&RealFs, dir.path()), [1, 2, 3, 4, 5]);

    let done = wal.remove_old_segments(redo, first_lsn(SEG), 8 * SEG, 64 * SEG).unwrap();
    assert_eq!(done, segment::Recycled { recycled: 4, removed: 0 });
    assert_eq!(segment_numbers(&RealFs, dir.path()), [5, 6, 7, 8, 9], "1-4 renamed after the current one");
    for segno in 6..=9 {
        assert_eq!(segment_len(&RealFs, dir.path(), segno), SEG, "a recycled segment keeps its length");
    }

    // The stream continues into the recycled files and ends in the middle of segment 7.
    let starts = fill_to(&wal, Lsn(7 * SEG + SEG / 2), 700, 0x22);
    wal.flush(wal.insert_lsn()).unwrap();
    assert_eq!(segment_numbers(&RealFs, dir.path()), [5, 6, 7, 8, 9], "no segment file was created");

    let mut r = WalReader::new(Arc::new(RealFs), dir.path(), starts[0], SEG);
    let mut n = 0;
    while let Some(rec) = r.next().unwrap() {
        assert_eq!(rec.main_data[0], 0x22, "a stale record of the old stream was returned");
        n += 1;
    }
    assert_eq!(n, starts.len(), "stopped early: {:?}", r.stop_reason());
    assert_eq!(r.end_lsn(), wal.insert_lsn());
}

/// Records of 1 KiB from the start of segment 1 start at the same offsets in every segment, so
/// where the new stream ends inside a recycled segment the stale bytes are a whole, valid
/// record of the old stream: right length, resource manager and CRC. Only its `xl_prev` (a
/// position of the old stream) tells it apart, and the reader stops there.
#[test]
fn a_valid_stale_record_at_the_end_of_the_stream_fails_on_its_prev_link() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    fill_to(&wal, Lsn(3 * SEG), 1024, 0x11);
    wal.flush(wal.insert_lsn()).unwrap();
    let redo = wal.begin_checkpoint();
    assert_eq!(redo, Lsn(3 * SEG));
    let done = wal.remove_old_segments(redo, first_lsn(SEG), 8 * SEG, 64 * SEG).unwrap();
    assert_eq!(done.recycled, 2, "segments 1 and 2 become 3 (not created yet) and 4");

    let end = Lsn(4 * SEG + 10 * 1024);
    let starts = fill_to(&wal, end, 1024, 0x22);
    assert_eq!(wal.insert_lsn(), end);
    wal.flush(end).unwrap();
    let stale = read_record_at(Arc::new(RealFs), dir.path(), end, SEG).unwrap();
    assert_eq!(stale.main_data[0], 0x11, "a whole record of the old stream lies at the end");
    assert_eq!(stale.prev.0 / SEG, 2, "its xl_prev is in segment 2: {}", stale.prev);

    let (recs, r) = read_all(dir.path(), starts[0]);
    assert_eq!(recs.len(), starts.len());
    assert_eq!(r.end_lsn(), end);
    let reason = r.stop_reason().unwrap();
    assert!(reason.contains(&format!("record with incorrect prev-link {} at {end}", stale.prev)), "{reason}");
}

/// A stale header claiming a gigabyte is refused on its `xl_prev` before its body is read:
/// the reader does not walk the recycled segments after it.
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

/// A crash right after a checkpoint recycled segments, before anything synced the directory:
/// the renames may be lost (the files fall back to their old names, before the redo pointer)
/// and the WAL from the redo pointer is whole either way. After the first flush that wrote
/// into a recycled file, the renames are durable with it.
#[test]
fn a_crash_right_after_recycling_loses_nothing() {
    let fs = FaultFs::new();
    let dir = Path::new("/wal");
    let wal = Wal::open(fs.clone(), dir, first_lsn(SEG), Lsn::INVALID, config(16 << 10)).unwrap();
    fill_to(&wal, Lsn(4 * SEG + 100), 900, 0x44);
    wal.flush(wal.insert_lsn()).unwrap();
    let redo = wal.begin_checkpoint();
    let redo_start = fill_to(&wal, Lsn(redo.0 + 1), 900, 0x55)[0];
    wal.flush(wal.insert_lsn()).unwrap();
    let done = wal.remove_old_segments(redo, first_lsn(SEG), 8 * SEG, 64 * SEG).unwrap();
    assert_eq!(done.recycled, 3);

    // 1. Crash before any flush: the renames are not durable.
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    assert_eq!(segment_numbers(&*crashed, dir), [1, 2, 3, 4], "the renames were undone");
    let mut r = WalReader::new(crashed, dir, redo_start, SEG);
    assert!(r.next().unwrap().is_some());
    assert_eq!(r.end_lsn(), wal.insert_lsn());

    // 2. The stream goes on into the recycled segments 5 and 6; a flush makes it durable.
    let more = fill_to(&wal, Lsn(6 * SEG + 300), 900, 0x66);
    let end = wal.insert_lsn();
    wal.flush(end).unwrap();
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    assert_eq!(segment_numbers(&*crashed, dir), [4, 5, 6, 7]);
    let crashed: Arc<dyn FileSystem> = crashed;
    let mut r = WalReader::new(Arc::clone(&crashed), dir, redo_start, SEG);
    let mut n = 0;
    while let Some(rec) = r.next().unwrap() {
        assert_ne!(rec.main_data[0], 0x44, "a stale record was returned");
        n += 1;
    }
    assert_eq!(n, 1 + more.len(), "{:?}", r.stop_reason());
    assert_eq!(r.end_lsn(), end);

    // 3. Reopening there discards the recycled segment after the current one and the stale
    // tail of the current one; the stream then continues and reads back whole.
    let last = r.last_record_lsn();
    let wal2 = Wal::open(Arc::clone(&crashed), dir, end, last, config(16 << 10)).unwrap();
    assert_eq!(segment_numbers(&*crashed, dir), [4, 5, 6]);
    assert_eq!(segment_len(&*crashed, dir, 6), end.0 - 6 * SEG, "the stale tail is cut off");
    let after = fill_to(&wal2, Lsn(8 * SEG), 900, 0x77);
    wal2.flush(wal2.insert_lsn()).unwrap();
    let mut r = WalReader::new(crashed, dir, redo_start, SEG);
    let mut n = 0;
    while r.next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(n, 1 + more.len() + after.len(), "{:?}", r.stop_reason());
    assert_eq!(r.end_lsn(), wal2.insert_lsn());
}

/// The flush that first writes into a recycled segment fsyncs the WAL directory (which makes
/// the rename durable) before it reports anything durable; when that fsync fails, the WAL is
/// poisoned and the flushed LSN stays where it was.
#[test]
fn a_failed_directory_fsync_after_recycling_poisons_the_wal() {
    let fs = FaultFs::new();
    let dir = Path::new("/wal");
    let wal = Wal::open(fs.clone(), dir, first_lsn(SEG), Lsn::INVALID, config(16 << 10)).unwrap();
    fill_to(&wal, Lsn(3 * SEG + 100), 900, 0x44);
    wal.flush(wal.insert_lsn()).unwrap();
    let redo = wal.begin_checkpoint();
    assert_eq!(wal.remove_old_segments(redo, first_lsn(SEG), 8 * SEG, 64 * SEG).unwrap().recycled, 2);
    fs.fail_syncs_of(Some(PathBuf::from("wal")));
    let flushed = wal.flushed_lsn();
    fill_to(&wal, Lsn(4 * SEG + 100), 900, 0x55);
    let err = wal.flush(wal.insert_lsn()).unwrap_err();
    assert!(matches!(&err, Error::Poisoned(m) if m.contains("could not fsync directory")), "{err}");
    assert_eq!(wal.flushed_lsn(), flushed);
}

#[test]
fn recycling_stops_at_the_horizon_and_removes_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    fill_to(&wal, Lsn(7 * SEG + 100), 1000, 0x11);
    wal.flush(wal.insert_lsn()).unwrap();
    let redo = wal.begin_checkpoint();
    // min_wal_size 3 segments, no estimate: the horizon is segment 7 + 3 - 1 = 9; the writer
    // is in segment 7, so 8 and 9 are the free names: segments 1 and 2 take them, 3-6 go.
    let done = wal.remove_old_segments(redo, Lsn::INVALID, 3 * SEG, 64 * SEG).unwrap();
    assert_eq!(done, segment::Recycled { recycled: 2, removed: 4 });
    assert_eq!(segment_numbers(&RealFs, dir.path()), [7, 8, 9]);
    // The next checkpoint, 2 segments later, finds 8 and 9 used; the distance of 2 segments
    // since the prior redo pointer now sets the horizon: ceil(redo + 1.9 * 1.1 * 2 segments).
    fill_to(&wal, Lsn(9 * SEG + 100), 1000, 0x22);
    wal.flush(wal.insert_lsn()).unwrap();
    let redo2 = wal.begin_checkpoint();
    let done = wal.remove_old_segments(redo2, redo, 3 * SEG, 64 * SEG).unwrap();
    assert_eq!(done, segment::Recycled { recycled: 2, removed: 0 }, "7 and 8 become 10 and 11");
    assert_eq!(segment_numbers(&RealFs, dir.path()), [9, 10, 11]);
}

// ---------------------------------------------------------------------------------------------
// Insertion

/// `insert` copies a record's pieces (header, images around their holes, block data, main
/// data) straight into the WAL buffer: the bytes on disk are exactly the contiguous assembly.
#[test]
fn inserted_bytes_equal_the_contiguous_assembly() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    let first = wal.insert(&simple(3, vec![1; 77])).unwrap();
    let (standard, odd) = (page(0, 300, 5000, 21), page(0, 6000, 100, 22));
    let recent = page(first.0 + 1, 64, 64, 23);
    let rec = RecordBuilder {
        toplevel_xid: crate::types::Xid::INVALID,
        rmgr: Rmgr::Heap2,
        info: 0x30,
        xid: Xid(9),
        blocks: vec![
            BlockRef {
                keep_data: false,
                id: 0,
                tag: tag(7, 1),
                will_init: false,
                page: Some(&standard),
                data: vec![4; 10],
            },
            BlockRef { keep_data: false, id: 1, tag: tag(7, 2), will_init: true, page: None, data: vec![5; 33] },
            BlockRef { keep_data: false, id: 2, tag: tag(7, 3), will_init: false, page: Some(&odd), data: vec![] },
            BlockRef {
                keep_data: false,
                id: 3,
                tag: tag(7, 4),
                will_init: false,
                page: Some(&recent),
                data: vec![6; 3],
            },
        ],
        main_data: vec![8; 500],
    };
    let end = wal.insert(&rec).unwrap();
    wal.flush(end).unwrap();

    let mut expected = Vec::new();
    let a = record::assemble(&mut expected, &rec, true, wal.redo_ptr()).unwrap();
    assert_eq!(a.fpi, 2, "blocks 0 and 2 carry images; block 3 changed after the redo pointer");
    record::finish(&mut expected, a.body_crc, first_lsn(SEG));
    let f = RealFs.open(&dir.path().join(segment::segment_file_name(1, SEG)), false).unwrap();
    let mut on_disk = vec![0u8; expected.len()];
    f.read_exact_at(&mut on_disk, first.0 - SEG).unwrap();
    assert_eq!(on_disk, expected);
    assert_eq!(end.0 - first.0, expected.len() as u64);
    let got = read_record_at(Arc::new(RealFs), dir.path(), first, SEG).unwrap();
    assert_eq!(&got.blocks[0].image.as_deref().unwrap()[..], &standard[..]);
    assert_eq!(got.blocks[3].data, vec![6; 3]);
    // A reader that skips page images reads the same record without them.
    let mut reader = WalReader::new(Arc::new(RealFs), dir.path(), first, SEG);
    reader.skip_page_images();
    let mut bare = DecodedRecord::empty();
    assert!(reader.next_into(&mut bare).unwrap());
    assert!(bare.blocks.iter().all(|b| b.image.is_none()));
    let strip = |r: &DecodedRecord| -> Vec<(u8, Vec<u8>)> { r.blocks.iter().map(|b| (b.id, b.data.clone())).collect() };
    assert_eq!(strip(&bare), strip(&got));
    assert_eq!((bare.main_data, bare.end_lsn), (got.main_data, got.end_lsn));
}

/// An inserter that finds more than `wal_buffers` unwritten writes it out itself and counts it
/// in its thread's `my_wal_buffers_full`; below the limit it leaves the writing to others.
#[test]
fn an_inserter_past_wal_buffers_writes_out_and_counts_it() {
    let dir = tempfile::tempdir().unwrap();
    let wal = Wal::open(Arc::new(RealFs), dir.path(), first_lsn(SEG), Lsn::INVALID, config(8 << 10)).unwrap();
    let before = my_wal_buffers_full();
    for _ in 0..7 {
        wal.insert(&sized(3, 1000, 1)).unwrap();
    }
    assert_eq!(my_wal_buffers_full(), before, "7,000 bytes fit in 8 KiB");
    assert!(!RealFs.exists(&dir.path().join(segment::segment_file_name(1, SEG))), "nothing written yet");
    wal.insert(&sized(3, 2000, 1)).unwrap();
    assert_eq!(my_wal_buffers_full(), before + 1);
    let len = segment_len(&RealFs, dir.path(), 1);
    assert_eq!(len, 9000, "the inserter wrote the whole buffer");
    assert_eq!(wal.flushed_lsn(), first_lsn(SEG), "writing out is not flushing");
}

/// A reader told which bodies it wants returns the others by their headers alone, unread and
/// unchecked (a flipped byte in a skipped body goes unnoticed), and finds every record after
/// them; a flipped byte in a body it reads still ends the WAL there.
#[test]
fn unwanted_bodies_are_skipped_by_their_length() {
    let dir = tempfile::tempdir().unwrap();
    let wal = open(dir.path());
    let mut ends = Vec::new();
    for i in 0..40u32 {
        let mut rec = simple(100 + i, vec![i as u8; 50 + 30 * i as usize]);
        if i % 3 != 0 {
            rec.rmgr = Rmgr::Btree;
            rec.blocks = vec![BlockRef {
                keep_data: false,
                id: 0,
                tag: tag(9, i),
                will_init: false,
                page: None,
                data: vec![7; 900],
            }];
        }
        ends.push(wal.insert(&rec).unwrap());
    }
    let end = wal.insert(&sized(999, 64, 1)).unwrap();
    wal.flush(end).unwrap();
    let first = first_lsn(SEG);
    let (all, _) = read_all(dir.path(), first);
    assert_eq!(all.len(), 41);

    let flip = |lsn: Lsn| {
        let f = RealFs.open(&dir.path().join(segment::segment_file_name(lsn.0 / SEG, SEG)), false).unwrap();
        let at = lsn.0 % SEG + record::RECORD_HEADER_SIZE as u64 + 20;
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_at(&[b[0] ^ 1], at).unwrap();
    };
    // Record 4, a B-tree record, starts where record 3 ends.
    flip(ends[3]);
    let heap_only = |rmgr: Rmgr, _info: u8| rmgr == Rmgr::Heap;
    let mut r = WalReader::new(Arc::new(RealFs), dir.path(), first, SEG);
    r.read_bodies_of(heap_only);
    let mut got = Vec::new();
    while let Some(rec) = r.next().unwrap() {
        got.push(rec);
    }
    assert_eq!(got.len(), 41, "{:?}", r.stop_reason());
    for (g, a) in got.iter().zip(&all) {
        assert_eq!(
            (g.lsn, g.end_lsn, g.prev, g.xid, g.rmgr, g.info),
            (a.lsn, a.end_lsn, a.prev, a.xid, a.rmgr, a.info)
        );
        if g.rmgr == Rmgr::Heap {
            assert_eq!((&g.main_data, g.blocks.len()), (&a.main_data, a.blocks.len()));
        } else {
            assert!(g.main_data.is_empty() && g.blocks.is_empty(), "a skipped body comes back empty");
        }
    }
    // A reader reading every body stops at the damaged one.
    let (stopped, r) = read_all(dir.path(), first);
    assert_eq!(r.end_lsn(), ends[3]);
    assert_eq!(stopped.len(), 4);
    // Damage in a body the reader wants (record 6, a heap record) still ends the WAL there.
    flip(ends[5]);
    let mut r = WalReader::new(Arc::new(RealFs), dir.path(), first, SEG);
    r.read_bodies_of(heap_only);
    let mut n = 0;
    while r.next().unwrap().is_some() {
        n += 1;
    }
    assert_eq!(r.end_lsn(), ends[5]);
    assert_eq!(n, 6);
    assert!(r.stop_reason().unwrap().contains("checksum"), "{:?}", r.stop_reason());
}
