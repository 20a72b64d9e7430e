//! Free space map specification tests: record/get/search across FSM pages against a model,
//! the summary never hiding a page with room, a corrupt page read as zeros and rewritten by the
//! next write, truncation.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::io::fault::FaultFs;
use crate::io::{FileSystem, RealFs};
use crate::smgr::Smgr;

const REL: Oid = Oid(90002);
const SPP: u32 = SLOTS_PER_PAGE;

fn pool_on(fs: Arc<dyn FileSystem>, dir: &Path, heap_nblocks: u32) -> BufferPool {
    let smgr = Arc::new(Smgr::new(fs, dir).unwrap());
    if heap_nblocks > 0 {
        smgr.ensure_size(REL, Fork::Main, BlockNumber(heap_nblocks - 1)).unwrap();
    }
    BufferPool::new(256, smgr)
}

/// The oracle: the first block whose category is at least `min`, below the heap's end.
fn model_search(model: &BTreeMap<u32, u8>, min: u8, heap_nblocks: u32) -> Option<u32> {
    model.iter().find(|(&b, &c)| c >= min && b < heap_nblocks).map(|(&b, _)| b)
}

#[test]
fn categories_follow_postgres() {
    assert_eq!(avail_to_category(0), 0);
    assert_eq!(avail_to_category(31), 0);
    assert_eq!(avail_to_category(32), 1);
    assert_eq!(avail_to_category(8000), 250);
    assert_eq!(avail_to_category(MAX_REQUEST_BYTES), 255);
    assert_eq!(needed_to_category(0), 1);
    assert_eq!(needed_to_category(33), 2);
    assert_eq!(needed_to_category(MAX_REQUEST_BYTES), 255);
    assert_eq!(location(BlockNumber(SPP + 2)), (BlockNumber(1), 26));
}

#[test]
fn record_get_search_across_pages_match_the_model() {
    let heap_nblocks = 4 * SPP + 50;
    let pool = pool_on(FaultFs::new(), Path::new("/d"), heap_nblocks);
    let fsm = FreeSpaceMap::new(REL);
    // Missing fork: nothing known, nothing found.
    assert_eq!(fsm.get(&pool, BlockNumber(3)).unwrap(), 0);
    assert_eq!(fsm.search(&pool, 1).unwrap(), None);
    let mut rng = StdRng::seed_from_u64(7);
    let mut model = BTreeMap::new();
    for step in 0..4000 {
        let b = rng.gen_range(0..heap_nblocks);
        if rng.gen_bool(0.8) {
            let free = rng.gen_range(0..BLCKSZ);
            fsm.record(&pool, BlockNumber(b), free).unwrap();
            model.insert(b, avail_to_category(free));
        } else {
            // A batch the way VACUUM writes it.
            let batch: Vec<(BlockNumber, u8)> =
                (0..20).map(|_| (BlockNumber(rng.gen_range(0..heap_nblocks)), rng.gen())).collect();
            fsm.set_many(&pool, &batch).unwrap();
            for &(bb, c) in &batch {
                model.insert(bb.0, c);
            }
        }
        if step % 50 == 0 {
            for _ in 0..5 {
                let need = rng.gen_range(0..MAX_REQUEST_BYTES);
                let min = needed_to_category(need);
                let found = fsm.search(&pool, min).unwrap().map(|b| b.0);
                assert_eq!(found, model_search(&model, min, heap_nblocks), "search for {need} bytes");
                if let Some(b) = found {
                    assert!(usize::from(model[&b]) * CAT_STEP >= need, "block {b} has no room for {need} bytes");
                }
            }
        }
    }
    for (&b, &c) in &model {
        assert_eq!(fsm.get(&pool, BlockNumber(b)).unwrap(), c, "heap block {b}");
    }
    assert_eq!(pool.smgr().nblocks(REL, Fork::Fsm).unwrap(), 5);
    // Lowering every entry leaves stale high bounds behind; search must still be exact.
    let all: Vec<(BlockNumber, u8)> = model.keys().map(|&b| (BlockNumber(b), 1)).collect();
    fsm.set_many(&pool, &all).unwrap();
    assert_eq!(fsm.search(&pool, 2).unwrap(), None);
    fsm.record(&pool, BlockNumber(3 * SPP + 7), 4000).unwrap();
    assert_eq!(fsm.search(&pool, 100).unwrap(), Some(BlockNumber(3 * SPP + 7)));
}

#[test]
fn search_ignores_entries_past_the_heap_end() {
    let pool = pool_on(FaultFs::new(), Path::new("/d"), 10);
    let fsm = FreeSpaceMap::new(REL);
    fsm.record(&pool, BlockNumber(20), 5000).unwrap();
    assert_eq!(fsm.search(&pool, 1).unwrap(), None);
    fsm.record(&pool, BlockNumber(9), 100).unwrap();
    assert_eq!(fsm.search(&pool, 1).unwrap(), Some(BlockNumber(9)));
    assert_eq!(fsm.search(&pool, 10).unwrap(), None);
}

#[test]
fn corrupt_page_reads_as_zeros_and_the_next_record_rewrites_it() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let heap_nblocks = 2 * SPP + 10;
    {
        let pool = pool_on(fs.clone(), dir.path(), heap_nblocks);
        let fsm = FreeSpaceMap::new(REL);
        for b in [1, 5, SPP + 1, SPP + 2, 2 * SPP + 3] {
            fsm.record(&pool, BlockNumber(b), 4000).unwrap();
        }
        pool.flush_all().unwrap();
    }
    // Flip bytes in FSM block 1 on disk.
    let path = dir.path().join(format!("{}_fsm", REL.0));
    let f = fs.open(&path, false).unwrap();
    let off = BLCKSZ as u64 + 24 + 2;
    f.write_at(&[0x5A, 0x5A, 0x5A], off).unwrap();
    f.sync().unwrap();
    drop(f);
    // A restart: a fresh pool and map on the same files.
    let pool = pool_on(fs.clone(), dir.path(), heap_nblocks);
    let fsm = FreeSpaceMap::new(REL);
    assert_eq!(fsm.get(&pool, BlockNumber(SPP + 1)).unwrap(), 0, "the corrupt page reads as zeros");
    assert_eq!(fsm.get(&pool, BlockNumber(5)).unwrap(), avail_to_category(4000), "other pages unaffected");
    assert_eq!(fsm.search(&pool, 100).unwrap(), Some(BlockNumber(1)));
    fsm.set_many(&pool, &[(BlockNumber(1), 0), (BlockNumber(5), 0)]).unwrap();
    assert_eq!(fsm.search(&pool, 100).unwrap(), Some(BlockNumber(2 * SPP + 3)), "the corrupt page is skipped");
    fsm.record(&pool, BlockNumber(SPP + 9), 1000).unwrap();
    assert_eq!(fsm.get(&pool, BlockNumber(SPP + 9)).unwrap(), avail_to_category(1000));
    assert_eq!(fsm.get(&pool, BlockNumber(SPP + 1)).unwrap(), 0, "the rewrite starts from zeros");
    assert_eq!(fsm.search(&pool, 20).unwrap(), Some(BlockNumber(SPP + 9)));
    pool.flush_all().unwrap();
    // On disk again it verifies.
    let mut raw = vec![0u8; BLCKSZ];
    fs.open(&path, false).unwrap().read_at(&mut raw, BLCKSZ as u64).unwrap();
    page::verify(&raw, REL, BlockNumber(1)).unwrap();
    assert!(FreeSpaceMap::describe_page(&raw, BlockNumber(1)).contains(&format!("heap block {}: category 31", SPP + 9)));
}

#[test]
fn truncate_forgets_pages_past_the_new_end() {
    let pool = pool_on(FaultFs::new(), Path::new("/d"), 3 * SPP);
    let fsm = FreeSpaceMap::new(REL);
    let blocks = [0, 10, SPP - 1, SPP, SPP + 20, SPP + 21, 2 * SPP + 4];
    for b in blocks {
        fsm.record(&pool, BlockNumber(b), 2000).unwrap();
    }
    assert_eq!(fsm.search(&pool, 1).unwrap(), Some(BlockNumber(0)));
    fsm.truncate(&pool, SPP + 21).unwrap();
    assert_eq!(pool.smgr().nblocks(REL, Fork::Fsm).unwrap(), 2);
    for b in blocks {
        let want = if b < SPP + 21 { avail_to_category(2000) } else { 0 };
        assert_eq!(fsm.get(&pool, BlockNumber(b)).unwrap(), want, "heap block {b}");
    }
    // The heap grows again: the forgotten slot does not come back.
    assert_eq!(fsm.get(&pool, BlockNumber(SPP + 21)).unwrap(), 0);
    fsm.truncate(&pool, 0).unwrap();
    assert_eq!(pool.smgr().nblocks(REL, Fork::Fsm).unwrap(), 0);
    assert_eq!(fsm.search(&pool, 1).unwrap(), None);
}
