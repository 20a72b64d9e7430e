//! The reorder buffer against an oracle: random interleavings of transactions, savepoints
//! rolled back, commits and aborts, under memory limits small enough to spill and stream all
//! the time, with each victim index; plus the bound on memory, streaming's callbacks,
//! known-aborted transactions, and a damaged spill file.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::io::RealFs;

/// An owned change, for comparing.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owned {
    lsn: u64,
    xid: u32,
    kind: u8,
    rel: u32,
    old: Vec<u8>,
    new: Vec<u8>,
}

impl Owned {
    fn of(c: &Change<'_>) -> Owned {
        Owned { lsn: c.lsn.0, xid: c.xid.0, kind: c.kind as u8, rel: c.rel.0, old: c.old.to_vec(), new: c.new.to_vec() }
    }
    fn change(&self) -> Change<'_> {
        Change {
            lsn: Lsn(self.lsn),
            xid: Xid(self.xid),
            kind: ChangeKind::from_u8(self.kind).unwrap(),
            rel: Oid(self.rel),
            old: &self.old,
            new: &self.new,
        }
    }
}

/// What the sink saw, in order.
#[derive(Default)]
struct Recorder {
    events: Vec<String>,
    streamed: BTreeMap<u32, Vec<Owned>>,
}

impl StreamSink for Recorder {
    fn stream_start(&mut self, top: Xid, _: Lsn) -> Result<()> {
        self.events.push(format!("start {}", top.0));
        Ok(())
    }
    fn stream_change(&mut self, top: Xid, c: &Change<'_>) -> Result<()> {
        self.streamed.entry(top.0).or_default().push(Owned::of(c));
        Ok(())
    }
    fn stream_stop(&mut self, top: Xid) -> Result<()> {
        self.events.push(format!("stop {}", top.0));
        Ok(())
    }
    fn stream_abort(&mut self, top: Xid, sub: Xid) -> Result<()> {
        self.events.push(format!("abort {} {}", top.0, sub.0));
        Ok(())
    }
}

fn buffer(limit: usize, victim: VictimIndex, dir: &std::path::Path) -> ReorderBuffer {
    let cfg = ReorderBufferConfig {
        memory_limit: limit,
        victim_index: victim,
        spill_segment_size: 1 << 20,
        ..Default::default()
    };
    ReorderBuffer::new(cfg, Arc::new(RealFs), dir).unwrap()
}

/// One savepoint level of the model: its XID, the LSN where it began, the index of its first
/// change, and the XIDs of the levels released into it.
struct Level {
    xid: u32,
    lsn: u64,
    first: usize,
    children: Vec<u32>,
}

/// One open transaction of the model: its changes so far and its savepoint stack.
struct ModelTxn {
    changes: Vec<Owned>,
    levels: Vec<Level>,
}

/// Random work against the buffer and an oracle; returns the buffer's stats.
fn run_model(seed: u64, limit: usize, victim: VictimIndex, streaming: bool, use_lsn: bool) -> ReorderStats {
    let dir = tempfile::tempdir().unwrap();
    let mut rb = buffer(limit, victim, dir.path());
    rb.set_streaming(streaming);
    let mut sink = Recorder::default();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut open: BTreeMap<u32, ModelTxn> = BTreeMap::new();
    let mut next_xid = 100u32;
    let mut lsn = 1000u64;
    let mut committed = 0;
    for _ in 0..4000 {
        lsn += rng.gen_range(1..50);
        let roll = rng.gen_range(0..100);
        if open.is_empty() || roll < 8 {
            next_xid += 1;
            open.insert(next_xid, ModelTxn { changes: Vec::new(), levels: Vec::new() });
            continue;
        }
        let tops: Vec<u32> = open.keys().copied().collect();
        let top = tops[rng.gen_range(0..tops.len())];
        let t = open.get_mut(&top).unwrap();
        match roll {
            8..=11 => {
                // SAVEPOINT: a new level with its own XID.
                next_xid += 1;
                t.levels.push(Level { xid: next_xid, lsn, first: t.changes.len(), children: Vec::new() });
            }
            12..=13 if !t.levels.is_empty() => {
                // RELEASE the innermost level: its changes become the parent's.
                let l = t.levels.pop().unwrap();
                if let Some(parent) = t.levels.last_mut() {
                    parent.children.push(l.xid);
                    parent.children.extend(l.children);
                }
            }
            14..=16 if !t.levels.is_empty() => {
                // ROLLBACK TO a random level: it and those inside it go.
                let k = rng.gen_range(0..t.levels.len());
                let gone: Vec<Xid> = t.levels[k..]
                    .iter()
                    .flat_map(|l| std::iter::once(l.xid).chain(l.children.iter().copied()))
                    .map(Xid)
                    .collect();
                let (at, first) = (t.levels[k].lsn, t.levels[k].first);
                t.changes.truncate(first);
                t.levels.truncate(k);
                rb.abort_subxacts(Xid(top), &gone, use_lsn.then_some(Lsn(at)), &mut sink).unwrap();
            }
            17..=19 => {
                let t = open.remove(&top).unwrap();
                let streamed_before = rb.is_streamed(Xid(top));
                let mut got = Vec::new();
                let streamed = rb
                    .commit(Xid(top), &mut |c| {
                        got.push(Owned::of(c));
                        Ok(())
                    })
                    .unwrap();
                assert_eq!(streamed, streamed_before);
                let mut all = sink.streamed.remove(&top).unwrap_or_default();
                // Streamed changes later rolled back reach the consumer with a stream abort;
                // the model drops them: compare what survives.
                all.retain(|c| t.changes.contains(c));
                all.extend(got);
                assert_eq!(all, t.changes, "transaction {top} (seed {seed})");
                committed += 1;
            }
            20..=21 => {
                open.remove(&top);
                rb.abort(Xid(top)).unwrap();
                sink.streamed.remove(&top);
            }
            _ => {
                // One change, or (a multi-insert record's shape) several with one LSN, XID
                // and relation.
                let xid = t.levels.last().map_or(top, |l| l.xid);
                let rel = rng.gen_range(16384..16400);
                let group = if rng.gen_bool(0.2) { rng.gen_range(2..40) } else { 1 };
                for _ in 0..group {
                    let n = rng.gen_range(0..300);
                    let c = Owned {
                        lsn,
                        xid,
                        kind: rng.gen_range(1..=5),
                        rel,
                        old: (0..rng.gen_range(0..20)).map(|_| rng.gen()).collect(),
                        new: (0..n).map(|_| rng.gen()).collect(),
                    };
                    rb.queue_change(Xid(top), &c.change(), &mut sink).unwrap();
                    t.changes.push(c);
                }
            }
        }
    }
    // Whatever is left commits in XID order.
    for (top, t) in std::mem::take(&mut open) {
        let mut got = Vec::new();
        rb.commit(Xid(top), &mut |c| {
            got.push(Owned::of(c));
            Ok(())
        })
        .unwrap();
        let mut all = sink.streamed.remove(&top).unwrap_or_default();
        all.retain(|c| t.changes.contains(c));
        all.extend(got);
        assert_eq!(all, t.changes, "transaction {top} (seed {seed})");
        committed += 1;
    }
    assert!(committed > 50);
    assert_eq!(rb.open_transactions(), 0);
    assert_eq!(rb.spill_files(), 0, "every spill segment is removed once nothing refers to it");
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "no spill file left");
    rb.stats()
}

#[test]
fn matches_the_oracle_without_pressure() {
    let s = run_model(1, 256 << 20, VictimIndex::Heap, false, true);
    assert_eq!((s.spill_count, s.stream_count), (0, 0));
}

#[test]
fn matches_the_oracle_while_spilling_with_each_victim_index() {
    let mut merged = 0;
    for victim in [VictimIndex::Heap, VictimIndex::Scan, VictimIndex::Adaptive { threshold: 8 }] {
        for seed in 0..4 {
            let s = run_model(seed, 128 << 10, victim, false, true);
            assert!(s.spill_count > 10 && s.spill_bytes > 0, "{victim:?}: {s:?}");
            assert!(s.peak_memory <= 128 << 10, "{victim:?}: peak {} over the limit", s.peak_memory);
            merged += s.runs_merged;
        }
    }
    // Over a hundred transactions open under 128 kB, spilled again and again: their short
    // runs had to be merged to keep the run entries within the limit.
    assert!(merged > 0, "no spill run was merged");
}

#[test]
fn matches_the_oracle_while_streaming() {
    for seed in 0..4 {
        let s = run_model(seed, 128 << 10, VictimIndex::Heap, true, true);
        assert!(s.stream_count > 10 && s.spill_count == 0, "{s:?}");
        assert!(s.peak_memory <= 128 << 10);
    }
}

#[test]
fn rollback_to_without_a_savepoint_lsn_filters_at_replay() {
    for seed in 0..3 {
        run_model(seed, 128 << 10, VictimIndex::Heap, false, false);
    }
}

fn change(lsn: u64, xid: u32, bytes: usize) -> Owned {
    Owned { lsn, xid, kind: 1, rel: 16384, old: Vec::new(), new: vec![(lsn % 251) as u8; bytes] }
}

#[test]
fn the_largest_transaction_is_spilled_first_and_commits_come_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut rb = buffer(64 << 10, VictimIndex::Heap, dir.path());
    let mut sink = NoStreaming;
    // A small and a large transaction; the large one crosses the limit.
    let mut lsn = 10;
    for k in 0..20 {
        lsn += 1;
        rb.queue_change(Xid(5), &change(lsn, 5, 10).change(), &mut sink).unwrap();
        for _ in 0..10 {
            lsn += 1;
            rb.queue_change(Xid(6), &change(lsn, 6, 300 + k).change(), &mut sink).unwrap();
        }
    }
    let s = rb.stats();
    assert_eq!(s.spill_txns, 1, "only the large one spilled: {s:?}");
    let mut n5 = 0;
    rb.commit(Xid(5), &mut |c| {
        assert_eq!(c.xid, Xid(5));
        n5 += 1;
        Ok(())
    })
    .unwrap();
    let mut last = 0;
    let mut n6 = 0;
    rb.commit(Xid(6), &mut |c| {
        assert!(c.lsn.0 > last, "in LSN order");
        last = c.lsn.0;
        n6 += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!((n5, n6), (20, 200));
    assert_eq!(rb.stats().total_txns, 2);
}

#[test]
fn a_rollback_to_cuts_into_spilled_changes() {
    let dir = tempfile::tempdir().unwrap();
    let mut rb = buffer(32 << 10, VictimIndex::Heap, dir.path());
    let mut sink = NoStreaming;
    for lsn in 1..=100 {
        rb.queue_change(Xid(7), &change(lsn, 7, 200).change(), &mut sink).unwrap();
    }
    // SAVEPOINT at LSN 100.5 (its changes from 101 on), all of them spilled by the top's.
    for lsn in 101..=400 {
        rb.queue_change(Xid(7), &change(lsn, 8, 200).change(), &mut sink).unwrap();
    }
    assert!(rb.stats().spill_count >= 2);
    rb.abort_subxacts(Xid(7), &[Xid(8)], Some(Lsn(101)), &mut sink).unwrap();
    rb.queue_change(Xid(7), &change(500, 7, 10).change(), &mut sink).unwrap();
    let mut lsns = Vec::new();
    rb.commit(Xid(7), &mut |c| {
        lsns.push(c.lsn.0);
        Ok(())
    })
    .unwrap();
    let want: Vec<u64> = (1..=100).chain([500]).collect();
    assert_eq!(lsns, want);
}

/// A transaction the CLOG says rolled back is dropped, never spilled.
#[test]
fn known_aborted_transactions_are_not_spilled() {
    struct Aborted(Xid);
    impl XidStatus for Aborted {
        fn is_aborted(&self, xid: Xid) -> bool {
            xid == self.0
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rb = buffer(32 << 10, VictimIndex::Heap, dir.path());
    rb.set_xid_status(Arc::new(Aborted(Xid(9))));
    let mut sink = NoStreaming;
    for lsn in 1..=1000 {
        rb.queue_change(Xid(9), &change(lsn, 9, 200).change(), &mut sink).unwrap();
    }
    let s = rb.stats();
    assert_eq!((s.spill_bytes, s.aborted_dropped), (0, 1), "{s:?}");
    assert!(rb.memory() < 16 << 10, "nothing of it is kept: {}", rb.memory());
    rb.abort(Xid(9)).unwrap();
}

#[test]
fn streaming_announces_a_rollback_to_of_streamed_changes() {
    let dir = tempfile::tempdir().unwrap();
    let mut rb = buffer(16 << 10, VictimIndex::Heap, dir.path());
    rb.set_streaming(true);
    let mut sink = Recorder::default();
    for lsn in 1..=200 {
        rb.queue_change(Xid(3), &change(lsn, 4, 200).change(), &mut sink).unwrap();
    }
    assert!(rb.is_streamed(Xid(3)));
    assert_eq!(sink.events.first().map(String::as_str), Some("start 3"));
    rb.abort_subxacts(Xid(3), &[Xid(4)], Some(Lsn(1)), &mut sink).unwrap();
    assert_eq!(sink.events.last().map(String::as_str), Some("abort 3 4"));
    let mut left = 0;
    assert!(
        rb.commit(Xid(3), &mut |_| {
            left += 1;
            Ok(())
        })
        .unwrap(),
        "a streamed transaction"
    );
    assert_eq!(left, 0, "everything after the savepoint went");
}

/// Many open transactions, each with one small change: the memory accounted includes their
/// structures, so the limit still holds by spilling their changes (PostgreSQL's W4 shape).
#[test]
fn memory_stays_under_the_limit_with_many_open_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 4 << 20;
    let mut rb = buffer(limit, VictimIndex::Heap, dir.path());
    let mut sink = NoStreaming;
    for x in 0..10_000u32 {
        rb.queue_change(Xid(1000 + x), &change(u64::from(x) + 1, 1000 + x, 30).change(), &mut sink).unwrap();
    }
    let s = rb.stats();
    assert!(s.peak_memory <= limit as u64, "{s:?}");
    assert!(s.spill_txns > 0);
    for x in 0..10_000u32 {
        let mut n = 0;
        rb.commit(Xid(1000 + x), &mut |c| {
            assert_eq!(c.new.len(), 30);
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 1);
    }
    assert_eq!(rb.spill_files(), 0);
}

#[test]
fn a_damaged_spill_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut rb = buffer(16 << 10, VictimIndex::Heap, dir.path());
    let mut sink = NoStreaming;
    for lsn in 1..=200 {
        rb.queue_change(Xid(3), &change(lsn, 3, 200).change(), &mut sink).unwrap();
    }
    assert!(rb.stats().spill_count > 0);
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let mut bytes = std::fs::read(&p).unwrap();
        if bytes.len() > 100 {
            bytes[100] ^= 0xFF;
            std::fs::write(&p, bytes).unwrap();
        }
    }
    let err = rb.commit(Xid(3), &mut |_| Ok(())).unwrap_err().to_string();
    assert!(err.contains("xid-spill.") && err.contains("spill run at offset") && err.contains("CRC mismatch"), "{err}");
    assert_eq!(rb.open_transactions(), 0);
}

/// A buffer holding transaction 3's 200 changes, most spilled; the spill files' paths.
fn spilled(dir: &std::path::Path) -> (ReorderBuffer, Vec<std::path::PathBuf>) {
    let mut rb = buffer(16 << 10, VictimIndex::Heap, dir);
    for lsn in 1..=200 {
        rb.queue_change(Xid(3), &change(lsn, 3, 200).change(), &mut NoStreaming).unwrap();
    }
    rb.flush_spill().unwrap();
    let files = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    (rb, files)
}

/// Found while writing fuzz target `spill_file`: a run whose CRC matches but whose changes do
/// not parse (a writer bug, or a crafted file) was "malformed change at byte N of transaction
/// 3", naming neither the file nor where in it.
#[test]
fn a_spill_run_that_does_not_parse_or_is_cut_short_names_the_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (mut rb, files) = spilled(dir.path());
    let p = &files[0];
    let mut bytes = std::fs::read(p).unwrap();
    // The first run's first change claims a body longer than the run.
    let len = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    bytes[16] = 0xFF;
    bytes[17] = 0x7F;
    let crc = crate::crc::crc32c(&bytes[16..16 + len]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(p, &bytes).unwrap();
    match rb.commit(Xid(3), &mut |_| Ok(())).unwrap_err() {
        Error::CorruptFile { path, detail } => {
            assert_eq!(&path, p);
            assert_eq!(detail, "spill run at offset 16: a malformed change");
        }
        e => panic!("{e}"),
    }

    let dir = tempfile::tempdir().unwrap();
    let (mut rb, files) = spilled(dir.path());
    let bytes = std::fs::read(&files[0]).unwrap();
    std::fs::write(&files[0], &bytes[..bytes.len() - 1]).unwrap();
    let err = rb.commit(Xid(3), &mut |_| Ok(())).unwrap_err();
    // (The replay spills the in-memory tail after the old end first, so the cut byte reads
    // back as a zero.)
    assert!(
        matches!(&err, Error::CorruptFile { path, detail } if path == &files[0] && detail.starts_with("spill run at offset ")),
        "{err}"
    );
}

#[test]
fn spill_files_left_by_an_earlier_process_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("xid-spill.00000003"), b"stale").unwrap();
    std::fs::write(dir.path().join("state"), b"kept").unwrap();
    let _rb = buffer(1 << 20, VictimIndex::Heap, dir.path());
    let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("state")]);
}

/// One transaction of 100,000 savepoints with one change each (PostgreSQL's W2 shape, 123 s of
/// decoder CPU on PostgreSQL 15 at 64 kB): nothing is kept per subtransaction, so it spills as
/// one transaction and stays within 64 kB.
#[test]
fn many_subtransactions_cost_nothing_each() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 64 << 10;
    let mut rb = buffer(limit, VictimIndex::Heap, dir.path());
    let mut sink = NoStreaming;
    for s in 0..100_000u32 {
        rb.queue_change(Xid(100), &change(u64::from(s) + 1, 101 + s, 28).change(), &mut sink).unwrap();
    }
    let s = rb.stats();
    assert_eq!(s.spill_txns, 1);
    assert!(s.spill_count < 200, "{s:?}");
    assert!(s.peak_memory <= limit as u64, "{s:?}");
    let mut n = 0u32;
    rb.commit(Xid(100), &mut |c| {
        assert_eq!(c.xid, Xid(101 + n));
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 100_000);
    assert!(rb.stats().peak_memory <= limit as u64, "{:?}", rb.stats());
}
