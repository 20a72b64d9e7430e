//! Visibility map specification tests: bits across many map pages against a model,
//! `PD_ALL_VISIBLE` agreement, redo onto a blank pool, crash recovery, a torn map page repaired
//! by its full-page image, truncation.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::db::Database;
use crate::heap::HeapEnv;
use crate::io::fault::{CrashMode, FaultFs};
use crate::io::FileSystem;
use crate::smgr::Smgr;
use crate::wal::WalReader;
use crate::{Column, Config, Schema, TableOptions, Type, Value};

/// A relation with hand-made heap pages (no catalog row: these tests never reopen).
const REL: Oid = Oid(90001);
const HPP: u32 = HEAPBLOCKS_PER_PAGE;

fn config() -> Config {
    // Only the tests' own checkpoints run.
    Config::from_pairs(vec![("checkpoint_timeout", "1d"), ("max_wal_size", "1TB"), ("wal_writer_delay", "10s")])
        .unwrap()
}

fn open(fs: &Arc<FaultFs>) -> Database {
    Database::open_with_fs(fs.clone(), Path::new("/db"), config()).unwrap()
}

fn heap_tag(rel: Oid, block: u32) -> BufferTag {
    BufferTag { rel, fork: Fork::Main, block: BlockNumber(block) }
}

/// Creates an empty, initialized heap page `block` of `REL` in the pool.
fn make_heap_page(env: &HeapEnv<'_>, block: u32) {
    env.pool.smgr().ensure_size(REL, Fork::Main, BlockNumber(block)).unwrap();
    let buf = env.pool.new_page(heap_tag(REL, block), None).unwrap();
    let mut g = buf.write();
    page::init(&mut g.0, 0);
    buf.mark_dirty();
}

/// Sets bits the way VACUUM will: under the heap page's exclusive lock.
fn set(env: &HeapEnv<'_>, vm: &VisibilityMap, block: u32, bits: VmBits) -> Option<Lsn> {
    let buf = env.pool.read(heap_tag(vm.rel(), block), None).unwrap();
    let mut g = buf.write();
    let lsn = vm.set(env.maps(), &buf, &mut g.0, bits).unwrap();
    if let Some(lsn) = lsn {
        assert_eq!(page::lsn(&g.0), lsn, "set stamps the heap page");
    }
    lsn
}

/// Clears bits the way a heap change will: under the heap page's lock, clearing
/// `PD_ALL_VISIBLE` too (standing in for the heap record that would log that).
fn clear(env: &HeapEnv<'_>, vm: &VisibilityMap, block: u32, bits: VmBits) -> Option<Lsn> {
    let buf = env.pool.read(heap_tag(vm.rel(), block), None).unwrap();
    let mut g = buf.write();
    if bits.all_visible() {
        page::clear_flags(&mut g.0, PD_ALL_VISIBLE);
        buf.mark_dirty();
    }
    vm.clear(env.maps(), BlockNumber(block), bits).unwrap()
}

fn heap_flags(env: &HeapEnv<'_>, rel: Oid, block: BlockNumber) -> Result<u16> {
    let buf = env.pool.read(heap_tag(rel, block.0), None)?;
    let f = page::flags(&buf.read().0);
    Ok(f)
}

/// What the map must say: the model's bits, with clearing ALL_VISIBLE taking ALL_FROZEN.
fn model_apply(model: &mut BTreeMap<u32, u8>, block: u32, set: bool, bits: VmBits) {
    let e = model.entry(block).or_insert(0);
    if set {
        *e |= bits.0;
    } else {
        *e &= !effective_clear_mask(bits);
    }
}

fn assert_map_matches(env: &HeapEnv<'_>, vm: &VisibilityMap, model: &BTreeMap<u32, u8>, check_flags: bool) {
    for (&b, &bits) in model {
        assert_eq!(vm.get(env.pool, BlockNumber(b)).unwrap(), VmBits(bits), "heap block {b}");
        if check_flags {
            let all_visible = heap_flags(env, vm.rel(), BlockNumber(b)).unwrap() & PD_ALL_VISIBLE != 0;
            assert_eq!(all_visible, bits & 1 != 0, "PD_ALL_VISIBLE of heap block {b} disagrees with the map");
        }
    }
    let visible = model.values().filter(|&&b| b & 1 != 0).count() as u64;
    let frozen = model.values().filter(|&&b| b & 2 != 0).count() as u64;
    assert_eq!(vm.count(env.pool).unwrap(), (visible, frozen));
}

/// Replays every record from `start` onto a blank pool and compares the map pages.
fn assert_redo_matches(db: &Database, start: Lsn, rel: Oid) {
    let inner = db.inner();
    let env = inner.env();
    env.wal.flush(env.wal.insert_lsn()).unwrap();
    let blank: Arc<dyn FileSystem> = FaultFs::new();
    let smgr = Arc::new(Smgr::new(blank, Path::new("/r")).unwrap());
    let pool = BufferPool::new(4096, smgr);
    let mut reader =
        WalReader::new(inner.fs.clone(), &crate::db::startup::wal_dir(&inner.dir), start, env.wal.segment_size());
    let mut n = 0;
    while let Some(rec) = reader.next().unwrap() {
        let ours = rec.blocks.iter().any(|b| b.tag.rel == rel);
        if is_vm_record(&rec) && ours {
            assert!(!crate::db::startup::describe_record(&rec).contains("undecodable"));
            crate::db::startup::redo_blocks(&rec, &pool).unwrap();
            n += 1;
        } else if rec.rmgr == Rmgr::Storage && rec.main_data[..4] == rel.0.to_le_bytes() {
            crate::db::startup::redo_storage(&rec, &pool).unwrap();
        }
    }
    assert!(n > 0, "no visibility map records replayed");
    let nblocks = env.pool.smgr().nblocks(rel, Fork::Vm).unwrap();
    assert_eq!(pool.smgr().nblocks(rel, Fork::Vm).unwrap(), nblocks, "map size after redo");
    for b in 0..nblocks {
        let tag = BufferTag { rel, fork: Fork::Vm, block: BlockNumber(b) };
        let live = env.pool.read(tag, None).unwrap();
        let redone = pool.read(tag, None).unwrap();
        let (x, y) = (live.read(), redone.read());
        assert!(x.0[PAGE_HEADER_SIZE..] == y.0[PAGE_HEADER_SIZE..], "map block {b} differs after redo");
        assert_eq!(page::lsn(&x.0), page::lsn(&y.0), "map block {b} LSN after redo");
    }
}

#[test]
fn location_follows_postgres_layout() {
    assert_eq!(location(BlockNumber(0)), (BlockNumber(0), 24, 0));
    assert_eq!(location(BlockNumber(5)), (BlockNumber(0), 25, 2));
    assert_eq!(location(BlockNumber(HPP - 1)), (BlockNumber(0), BLCKSZ - 1, 6));
    assert_eq!(location(BlockNumber(HPP)), (BlockNumber(1), 24, 0));
    assert_eq!(map_pages_for(0), 0);
    assert_eq!(map_pages_for(HPP), 1);
    assert_eq!(map_pages_for(HPP + 1), 2);
}

#[test]
fn set_get_clear_across_many_map_pages_agree_with_model_and_pd_all_visible() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let inner = db.inner();
    let env = inner.env();
    let start = env.wal.insert_lsn();
    let vm = VisibilityMap::new(REL);
    // A missing fork reads as zeros.
    assert_eq!(vm.get(env.pool, BlockNumber(7)).unwrap(), VmBits::NONE);
    assert_eq!(vm.count(env.pool).unwrap(), (0, 0));
    let mut rng = StdRng::seed_from_u64(11);
    let mut blocks: Vec<u32> = vec![0, 3, HPP - 1, HPP, 2 * HPP + 3, 4 * HPP + 99];
    blocks.extend((0..300).map(|_| rng.gen_range(0..4 * HPP + 100)));
    blocks.sort_unstable();
    blocks.dedup();
    for &b in &blocks {
        make_heap_page(&env, b);
    }
    let mut model = BTreeMap::new();
    for &b in &blocks {
        let bits = if rng.gen_bool(0.5) { VmBits::ALL_VISIBLE } else { VmBits::VALID };
        assert!(set(&env, &vm, b, bits).is_some());
        model_apply(&mut model, b, true, bits);
    }
    assert_eq!(env.pool.smgr().nblocks(REL, Fork::Vm).unwrap(), 5);
    assert_map_matches(&env, &vm, &model, true);
    for _ in 0..1500 {
        let b = blocks[rng.gen_range(0..blocks.len())];
        let bits = [VmBits::ALL_VISIBLE, VmBits::ALL_FROZEN, VmBits::VALID][rng.gen_range(0..3)];
        let before = model.get(&b).copied().unwrap_or(0);
        if rng.gen_bool(0.5) {
            if !VmBits(before | bits.0).all_visible() {
                // ALL_FROZEN alone on a page that is not all-visible: refused.
                let buf = env.pool.read(heap_tag(REL, b), None).unwrap();
                let mut g = buf.write();
                assert!(vm.set(env.maps(), &buf, &mut g.0, bits).is_err());
                continue;
            }
            let logged = set(&env, &vm, b, bits);
            assert_eq!(logged.is_none(), VmBits(before).contains(bits), "set logs only a change");
            model_apply(&mut model, b, true, bits);
        } else {
            let logged = clear(&env, &vm, b, bits);
            assert_eq!(logged.is_some(), before & effective_clear_mask(bits) != 0, "clear logs only a change");
            model_apply(&mut model, b, false, bits);
        }
    }
    assert_map_matches(&env, &vm, &model, true);
    // Blocks nobody set read as zeros, on existing map pages and past the fork's end.
    for b in [1, 2, HPP + 1, 3 * HPP, 5 * HPP + 1, 100 * HPP] {
        if !model.contains_key(&b) {
            assert_eq!(vm.get(env.pool, BlockNumber(b)).unwrap(), VmBits::NONE, "heap block {b}");
        }
    }
    let heap_nblocks = env.pool.smgr().nblocks(REL, Fork::Main).unwrap();
    let v = vm.violations(env.pool, heap_nblocks, |b| heap_flags(&env, REL, b)).unwrap();
    assert!(v.is_empty(), "{v:?}");
    assert_redo_matches(&db, start, REL);
}

#[test]
fn violations_report_a_bit_without_pd_all_visible() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let inner = db.inner();
    let env = inner.env();
    let vm = VisibilityMap::new(REL);
    make_heap_page(&env, 0);
    set(&env, &vm, 0, VmBits::ALL_VISIBLE);
    // A heap change that forgot to clear the map: exactly what the invariant forbids.
    let buf = env.pool.read(heap_tag(REL, 0), None).unwrap();
    page::clear_flags(&mut buf.write().0, PD_ALL_VISIBLE);
    let v = vm.violations(env.pool, 1, |b| heap_flags(&env, REL, b)).unwrap();
    assert_eq!(v.len(), 1, "{v:?}");
}

#[test]
fn truncate_forgets_pages_past_the_new_end_and_redo_agrees() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let inner = db.inner();
    let env = inner.env();
    let start = env.wal.insert_lsn();
    let vm = VisibilityMap::new(REL);
    let blocks = [0, 50, HPP - 1, HPP, HPP + 99, HPP + 100, HPP + 101, 2 * HPP + 5];
    let mut model = BTreeMap::new();
    for &b in &blocks {
        make_heap_page(&env, b);
        set(&env, &vm, b, VmBits::VALID);
        model.insert(b, 3u8);
    }
    assert_eq!(env.pool.smgr().nblocks(REL, Fork::Vm).unwrap(), 3);
    vm.truncate(env.maps(), HPP + 100).unwrap();
    assert_eq!(env.pool.smgr().nblocks(REL, Fork::Vm).unwrap(), 2);
    model.retain(|&b, _| b < HPP + 100);
    assert_map_matches(&env, &vm, &model, false);
    for b in [HPP + 100, HPP + 101, 2 * HPP + 5] {
        assert_eq!(vm.get(env.pool, BlockNumber(b)).unwrap(), VmBits::NONE);
    }
    assert_redo_matches(&db, start, REL);
    vm.truncate(env.maps(), HPP).unwrap();
    assert_eq!(env.pool.smgr().nblocks(REL, Fork::Vm).unwrap(), 1);
    assert_eq!(vm.count(env.pool).unwrap(), (3, 3));
    vm.truncate(env.maps(), 0).unwrap();
    assert_eq!(env.pool.smgr().nblocks(REL, Fork::Vm).unwrap(), 0);
    assert_eq!(vm.count(env.pool).unwrap(), (0, 0));
}

/// A table of `n` rows over several pages, committed and checkpointed.
fn make_table(db: &Database, n: i32) -> (Oid, u32) {
    let schema = Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "pad".into(), ty: Type::Text, nullable: false },
        ],
    };
    let t = db.create_table("t", schema, TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    for i in 0..n {
        tx.insert(&t, &[Value::Int4(i), Value::Text("x".repeat(200))]).unwrap();
    }
    tx.commit().unwrap();
    db.checkpoint().unwrap();
    let rel = t.entry.rel.relfilenode;
    (rel, db.inner().pool.smgr().nblocks(rel, Fork::Main).unwrap())
}

#[test]
fn crash_and_recovery_reproduce_the_map() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let (rel, nblocks) = make_table(&db, 600);
    assert!(nblocks >= 10, "{nblocks} heap pages");
    let vm = VisibilityMap::new(rel);
    let mut model = BTreeMap::new();
    {
        let inner = db.inner();
        let env = inner.env();
        for b in 0..nblocks {
            let bits = match b % 3 {
                0 => VmBits::VALID,
                1 => VmBits::ALL_VISIBLE,
                _ => continue,
            };
            set(&env, &vm, b, bits);
            model_apply(&mut model, b, true, bits);
        }
        for b in (0..nblocks).filter(|b| b % 4 == 0) {
            clear(&env, &vm, b, VmBits::ALL_FROZEN);
            model_apply(&mut model, b, false, VmBits::ALL_FROZEN);
        }
        env.wal.flush(env.wal.insert_lsn()).unwrap();
        assert_map_matches(&env, &vm, &model, true);
    }
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    let db = open(&crashed);
    assert!(db.recovery_report().records_replayed > 0);
    let inner = db.inner();
    let env = inner.env();
    let vm = VisibilityMap::new(rel);
    assert_map_matches(&env, &vm, &model, true);
    let v = vm.violations(env.pool, nblocks, |b| heap_flags(&env, rel, b)).unwrap();
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn torn_map_page_is_repaired_by_its_full_page_image() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let (rel, nblocks) = make_table(&db, 200);
    assert!(nblocks >= 2);
    let vm = VisibilityMap::new(rel);
    let path = {
        let inner = db.inner();
        let env = inner.env();
        set(&env, &vm, 0, VmBits::VALID);
        db.checkpoint().unwrap();
        // First change since the redo pointer: the record carries the map page's image.
        set(&env, &vm, 1, VmBits::ALL_VISIBLE);
        env.wal.flush(env.wal.insert_lsn()).unwrap();
        env.pool.flush_all().unwrap();
        env.pool.smgr().path(rel, Fork::Vm)
    };
    // Tear the map page: its second half is garbage, durably.
    let f = fs.open(&path, false).unwrap();
    f.write_at(&[0xA5; BLCKSZ / 2], (BLCKSZ / 2) as u64).unwrap();
    f.sync().unwrap();
    let mut raw = vec![0u8; BLCKSZ];
    f.read_at(&mut raw, 0).unwrap();
    assert!(page::verify(&raw, rel, BlockNumber(0)).is_err(), "the page is torn");
    let crashed = fs.crash(CrashMode::LoseUnsynced);
    db.abandon();
    let db = open(&crashed);
    let inner = db.inner();
    let env = inner.env();
    let vm = VisibilityMap::new(rel);
    assert_eq!(vm.get(env.pool, BlockNumber(0)).unwrap(), VmBits::VALID);
    assert_eq!(vm.get(env.pool, BlockNumber(1)).unwrap(), VmBits::ALL_VISIBLE);
    assert_eq!(vm.count(env.pool).unwrap(), (2, 1));
}

#[test]
fn waldump_describes_both_records() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let inner = db.inner();
    let env = inner.env();
    let start = env.wal.insert_lsn();
    let vm = VisibilityMap::new(REL);
    make_heap_page(&env, 9);
    set(&env, &vm, 9, VmBits::VALID);
    clear(&env, &vm, 9, VmBits::ALL_FROZEN);
    env.wal.flush(env.wal.insert_lsn()).unwrap();
    let mut reader =
        WalReader::new(inner.fs.clone(), &crate::db::startup::wal_dir(&inner.dir), start, env.wal.segment_size());
    let mut seen = Vec::new();
    while let Some(rec) = reader.next().unwrap() {
        if is_vm_record(&rec) {
            seen.push(crate::db::startup::describe_record(&rec));
        }
    }
    assert_eq!(
        seen,
        vec![
            "VISIBLE heap block: 9, flags: ALL_VISIBLE|ALL_FROZEN, init map page".to_string(),
            "VM_CLEAR heap blocks: 9..10, flags: ALL_FROZEN".to_string(),
        ]
    );
    let buf = env.pool.read(BufferTag { rel: REL, fork: Fork::Vm, block: BlockNumber(0) }, None).unwrap();
    assert!(describe_page(&buf.read().0, BlockNumber(0)).contains("heap block 9: ALL_VISIBLE"));
}

/// Noticed while writing fuzz target `wal_record`: VISIBLE and VM_CLEAR redo applied the heap
/// block's bits to whatever map page the block reference named, so a record (with a valid CRC)
/// naming map block 0 for heap block HPP set bits of heap block 0. Both now refuse it.
#[test]
fn map_redo_refuses_a_heap_block_on_another_map_page() {
    use crate::types::{BufferTag, Fork, Oid};
    use crate::wal::{DecodedBlock, DecodedRecord, Rmgr};
    let record = |info: u8, main_data: Vec<u8>, map_block: u32| DecodedRecord {
        toplevel_xid: Xid::INVALID,
        lsn: Lsn(1 << 24),
        end_lsn: Lsn((1 << 24) + 64),
        prev: Lsn::INVALID,
        xid: crate::types::Xid(0),
        rmgr: Rmgr::Heap2,
        info,
        blocks: vec![DecodedBlock {
            id: 0,
            tag: BufferTag { rel: Oid(16384), fork: Fork::Vm, block: BlockNumber(map_block) },
            will_init: false,
            image: None,
            data: vec![],
        }],
        main_data,
    };
    let visible = [&HPP.to_le_bytes()[..], &[VmBits::ALL_VISIBLE.0, FLAG_INIT_PAGE]].concat();
    let clear = [&HPP.to_le_bytes()[..], &1u32.to_le_bytes(), &[VmBits::ALL_VISIBLE.0]].concat();
    for (info, data) in [(XLOG_HEAP2_VISIBLE, visible), (XLOG_HEAP2_VM_CLEAR, clear)] {
        let mut p = crate::page::PageBuf::zeroed();
        init_page(&mut p.0);
        let before = p.0;
        let wrong = record(info, data.clone(), 0);
        let e = redo_block(&wrong, 0, BlockNumber(0), &mut p.0).unwrap_err();
        assert!(e.to_string().contains("but map block 1 covers it"), "{e}");
        assert_eq!(p.0, before, "a refused record must leave the page alone");
        let right = record(info, data, 1);
        redo_block(&right, 0, BlockNumber(1), &mut p.0).unwrap();
    }
}

/// A pin remembers a missing map page; the bits its holder then sets under that page (which
/// creates it) read back through the same pin, in the map page it had found missing and in
/// the next one, while a heap page of a map page that was never created reads clear.
#[test]
fn a_pin_that_found_its_map_page_missing_reads_the_bits_its_holder_sets() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let inner = db.inner();
    let env = inner.env();
    let vm = VisibilityMap::new(REL);
    for b in [5, HPP + 5] {
        make_heap_page(&env, b);
    }
    let mut pin = MapPin::default();
    for b in [5, 6, 2 * HPP] {
        assert_eq!(vm.get_pinned(env.pool, BlockNumber(b), &mut pin).unwrap(), VmBits::NONE, "block {b}");
    }
    for b in [5, HPP + 5] {
        assert_eq!(vm.get_pinned(env.pool, BlockNumber(b), &mut pin).unwrap(), VmBits::NONE, "block {b}");
        let (g, _) = vm.lock_and_set(env.pool, BlockNumber(b), VmBits::ALL_VISIBLE, &mut pin).unwrap().unwrap();
        drop(g);
        assert_eq!(vm.get_pinned(env.pool, BlockNumber(b), &mut pin).unwrap(), VmBits::ALL_VISIBLE, "block {b}");
        assert_eq!(vm.get(env.pool, BlockNumber(b)).unwrap(), VmBits::ALL_VISIBLE, "block {b}");
    }
    assert_eq!(vm.get_pinned(env.pool, BlockNumber(5), &mut pin).unwrap(), VmBits::ALL_VISIBLE);
    assert_eq!(vm.get_pinned(env.pool, BlockNumber(2 * HPP), &mut pin).unwrap(), VmBits::NONE);
    pin.clear();
    assert!(pin.buffer().is_none());
}
