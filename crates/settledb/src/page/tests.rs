use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

fn heap_page() -> PageBuf {
    let mut p = PageBuf::zeroed();
    init(&mut p.0, 0);
    p
}

fn off(n: u16) -> OffsetNumber {
    OffsetNumber(n)
}

fn detail(e: Error) -> String {
    match e {
        Error::Corrupted { detail, .. } => detail,
        other => panic!("expected Corrupted, got {other:?}"),
    }
}

#[test]
fn init_sets_header_like_page_init() {
    let mut p = PageBuf::zeroed();
    assert!(is_new(&p.0));
    init(&mut p.0, 16);
    assert!(!is_new(&p.0));
    assert_eq!(lower(&p.0), 24);
    assert_eq!(upper(&p.0), 8192 - 16);
    assert_eq!(special(&p.0), 8192 - 16);
    assert_eq!(pagesize_version(&p.0), 8192 | 4);
    assert_eq!(max_offset(&p.0), 0);
    assert_eq!(free_space(&p.0), 8192 - 16 - 24 - 4);
    set_lsn(&mut p.0, Lsn(0x1_0000_0020));
    set_prune_xid(&mut p.0, Xid(77));
    set_flags(&mut p.0, PD_ALL_VISIBLE);
    assert_eq!(lsn(&p.0), Lsn(0x1_0000_0020));
    assert_eq!(prune_xid(&p.0), Xid(77));
    assert_eq!(flags(&p.0), PD_ALL_VISIBLE);
    assert_eq!(&p.0[0..8], &0x1_0000_0020u64.to_le_bytes(), "pd_lsn is little-endian at 0");
}

#[test]
fn item_id_bit_layout_matches_postgres() {
    let id = ItemId { off: 8064, flags: LpFlags::Normal, len: 121 };
    let raw = id.to_u32();
    assert_eq!(raw & 0x7fff, 8064);
    assert_eq!((raw >> 15) & 3, 1);
    assert_eq!(raw >> 17, 121);
    assert_eq!(ItemId::from_u32(raw), id);
    assert_eq!(ItemId::from_u32(ItemId::redirect(off(7)).to_u32()).off, 7);
}

#[test]
fn items_are_maxaligned_and_stacked_from_the_end() {
    let mut p = heap_page();
    assert_eq!(add_item(&mut p.0, &[1u8; 121], None, true), Some(off(1)));
    assert_eq!(add_item(&mut p.0, &[2u8; 30], None, true), Some(off(2)));
    assert_eq!(item_id(&p.0, off(1)), ItemId::normal(8192 - 128, 121));
    assert_eq!(item_id(&p.0, off(2)), ItemId::normal(8192 - 128 - 32, 30));
    assert_eq!(item(&p.0, off(1)), &[1u8; 121][..]);
    assert_eq!(item(&p.0, off(2)), &[2u8; 30][..]);
    assert_eq!(lower(&p.0), 32);
    item_mut(&mut p.0, off(2))[0] = 9;
    assert_eq!(item(&p.0, off(2))[0], 9);
    assert_eq!(try_item(&p.0, off(3)), None);
    assert_eq!(try_item(&p.0, off(0)), None);
}

#[test]
fn sixty_one_pgbench_rows_fit_in_a_page() {
    let mut p = heap_page();
    let mut n = 0;
    while add_item(&mut p.0, &[0u8; 121], None, true).is_some() {
        n += 1;
    }
    assert_eq!(n, 61, "pgbench_accounts holds 61 rows per page");
    assert!(free_space(&p.0) < 128);
}

#[test]
fn heap_pages_stop_at_291_line_pointers() {
    let mut p = heap_page();
    for i in 1..=291 {
        assert_eq!(add_item(&mut p.0, &[0u8; 1], None, true), Some(off(i)));
    }
    assert!(free_space(&p.0) > 0);
    assert_eq!(heap_free_space(&p.0), 0);
    assert_eq!(add_item(&mut p.0, &[0u8; 1], None, true), None);
    // A non-heap page is limited only by space.
    assert_eq!(add_item(&mut p.0, &[0u8; 1], None, false), Some(off(292)));
}

#[test]
fn unused_line_pointers_are_reused_and_the_hint_cleared() {
    let mut p = heap_page();
    for _ in 0..4 {
        add_item(&mut p.0, &[7u8; 40], None, true).unwrap();
    }
    set_item_id(&mut p.0, off(2), ItemId::UNUSED);
    set_item_id(&mut p.0, off(3), ItemId::UNUSED);
    // Without the hint, PageAddItem appends.
    assert_eq!(add_item(&mut p.0, &[1u8; 24], None, true), Some(off(5)));
    repair_fragmentation(&mut p.0);
    assert_ne!(flags(&p.0) & PD_HAS_FREE_LINES, 0);
    assert_eq!(add_item(&mut p.0, &[2u8; 24], None, true), Some(off(2)));
    assert_ne!(flags(&p.0) & PD_HAS_FREE_LINES, 0, "slot 3 is still free");
    assert_eq!(add_item(&mut p.0, &[3u8; 24], None, true), Some(off(3)));
    assert_eq!(flags(&p.0) & PD_HAS_FREE_LINES, 0, "no free slot left");
    assert_eq!(add_item(&mut p.0, &[4u8; 24], None, true), Some(off(6)));
}

#[test]
fn explicit_offsets_append_or_fill_an_unused_slot() {
    let mut p = heap_page();
    assert_eq!(add_item(&mut p.0, &[1u8; 24], Some(off(2)), true), None, "gap");
    assert_eq!(add_item(&mut p.0, &[1u8; 24], Some(off(1)), true), Some(off(1)));
    assert_eq!(add_item(&mut p.0, &[1u8; 24], Some(off(1)), true), None, "slot in use");
    assert_eq!(add_item(&mut p.0, &[1u8; 24], Some(off(2)), true), Some(off(2)));
    set_item_id(&mut p.0, off(1), ItemId::UNUSED);
    assert_eq!(add_item(&mut p.0, &[5u8; 24], Some(off(1)), true), Some(off(1)));
    assert_eq!(item(&p.0, off(1)), &[5u8; 24][..]);
    assert_eq!(add_item(&mut p.0, &[1u8; 24], Some(off(0)), true), None);
}

#[test]
fn truncate_drops_trailing_unused_line_pointers() {
    let mut p = heap_page();
    for _ in 0..5 {
        add_item(&mut p.0, &[7u8; 24], None, true).unwrap();
    }
    for o in [2, 4, 5] {
        set_item_id(&mut p.0, off(o), ItemId::UNUSED);
    }
    truncate_line_pointer_array(&mut p.0);
    assert_eq!(max_offset(&p.0), 3);
    assert_ne!(flags(&p.0) & PD_HAS_FREE_LINES, 0, "slot 2 remains unused");
    set_item_id(&mut p.0, off(2), ItemId::dead());
    truncate_line_pointer_array(&mut p.0);
    assert_eq!(max_offset(&p.0), 3);
    assert_eq!(flags(&p.0) & PD_HAS_FREE_LINES, 0);
    for o in 1..=3 {
        set_item_id(&mut p.0, off(o), ItemId::UNUSED);
    }
    truncate_line_pointer_array(&mut p.0);
    assert_eq!(max_offset(&p.0), 0);
}

/// Property: random sequences of adds, removals (to UNUSED or DEAD), redirects,
/// defragmentation and truncation keep every live item's bytes at its offset, and the page
/// always validates.
#[test]
fn random_add_remove_repair_keeps_items_intact() {
    for seed in 0..60u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut p = heap_page();
        let mut model: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
        for step in 0..400 {
            match rng.gen_range(0..10) {
                0..=4 => {
                    let len = rng.gen_range(23..400);
                    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    let before = heap_free_space(&p.0);
                    match add_item(&mut p.0, &data, None, true) {
                        Some(o) => {
                            assert!(model.insert(o.0, data).is_none(), "slot {o} reused while live");
                        }
                        None => assert!(before < maxalign(len), "seed {seed} step {step}"),
                    }
                }
                5..=6 if !model.is_empty() => {
                    let k = *model.keys().nth(rng.gen_range(0..model.len())).unwrap();
                    model.remove(&k);
                    let id = if rng.gen() { ItemId::UNUSED } else { ItemId::dead() };
                    set_item_id(&mut p.0, off(k), id);
                }
                7 => repair_fragmentation(&mut p.0),
                8 => {
                    truncate_line_pointer_array(&mut p.0);
                    repair_fragmentation(&mut p.0);
                }
                _ => {
                    // Turn DEAD pointers UNUSED, as vacuum phase III does.
                    for o in 1..=max_offset(&p.0) {
                        if item_id(&p.0, off(o)).flags == LpFlags::Dead {
                            set_item_id(&mut p.0, off(o), ItemId::UNUSED);
                        }
                    }
                }
            }
            validate_items(&p.0, Oid(1), BlockNumber(0)).unwrap();
            for (&k, v) in &model {
                assert_eq!(item(&p.0, off(k)), &v[..], "seed {seed} step {step} item {k}");
            }
        }
        // After defragmentation the free space is exactly what the live items leave.
        repair_fragmentation(&mut p.0);
        let used: usize = model.values().map(|v| maxalign(v.len())).sum();
        assert_eq!(upper(&p.0) as usize, BLCKSZ - used);
    }
}

fn sample_page() -> PageBuf {
    let mut p = heap_page();
    let mut rng = StdRng::seed_from_u64(42);
    for _ in 0..20 {
        let data: Vec<u8> = (0..rng.gen_range(23..200)).map(|_| rng.gen()).collect();
        add_item(&mut p.0, &data, None, true).unwrap();
    }
    set_lsn(&mut p.0, Lsn(0xABCDEF));
    set_checksum(&mut p.0, BlockNumber(3));
    p
}

#[test]
fn checksum_detects_any_corrupted_byte() {
    let p = sample_page();
    verify(&p.0, Oid(1), BlockNumber(3)).unwrap();
    assert_ne!(checksum(&p.0), 0);
    let e = verify(&p.0, Oid(1), BlockNumber(4)).unwrap_err();
    assert!(detail(e).starts_with("page verification failed"), "wrong block is caught");
    for i in 0..BLCKSZ {
        for x in [0x01u8, 0x80, 0xff] {
            let mut q = p.clone();
            q.0[i] ^= x;
            assert!(verify(&q.0, Oid(1), BlockNumber(3)).is_err(), "flipping {x:#x} at byte {i} went unnoticed");
        }
    }
}

#[test]
fn verify_accepts_new_pages_and_reports_precise_details() {
    let zero = PageBuf::zeroed();
    verify(&zero.0, Oid(5), BlockNumber(9)).unwrap();
    validate_items(&zero.0, Oid(5), BlockNumber(9)).unwrap();

    let mut p = sample_page();
    p.0[8] ^= 1;
    let e = verify(&p.0, Oid(5), BlockNumber(3)).unwrap_err();
    let want = format!(
        "page verification failed, calculated checksum {} but expected {}",
        compute_checksum(&p.0, BlockNumber(3)),
        checksum(&p.0)
    );
    assert_eq!(detail(e), want);

    let mut p = heap_page();
    set_lower(&mut p.0, 30);
    set_upper(&mut p.0, 20);
    set_checksum(&mut p.0, BlockNumber(0));
    let e = verify(&p.0, Oid(5), BlockNumber(0)).unwrap_err();
    assert_eq!(e.to_string(), "invalid page in block 0 of relation 5: pd_lower 30 > pd_upper 20");

    let mut p = heap_page();
    p.0[16..18].copy_from_slice(&8188u16.to_le_bytes());
    set_upper(&mut p.0, 8100);
    set_checksum(&mut p.0, BlockNumber(0));
    assert_eq!(detail(verify(&p.0, Oid(5), BlockNumber(0)).unwrap_err()), "pd_special 8188 is not MAXALIGNed");

    let mut p = PageBuf::zeroed();
    p.0[100] = 1;
    assert!(verify(&p.0, Oid(5), BlockNumber(0)).is_err(), "pd_upper 0 but not all zeros");
    assert!(verify(&[0u8; 100], Oid(5), BlockNumber(0)).is_err());
}

#[test]
fn validate_items_rejects_pointers_that_leave_the_page() {
    let base = sample_page();
    let cases: [(ItemId, &str); 5] = [
        (ItemId::normal(8190, 100), "outside"),
        (ItemId::normal(upper(&base.0) - 8, 23), "outside"),
        (ItemId::normal(8100, 30), "MAXALIGNed"),
        (ItemId::normal(8104, 10), "length 10 < 23"),
        (ItemId::redirect(off(99)), "redirect to 99"),
    ];
    for (id, want) in cases {
        let mut p = base.clone();
        set_item_id(&mut p.0, off(3), id);
        let d = detail(validate_items(&p.0, Oid(1), BlockNumber(3)).unwrap_err());
        assert!(d.starts_with("line pointer 3: ") && d.contains(want), "{id:?}: {d}");
    }
}

/// Found by fuzz target `wal_record`: two NORMAL items sharing their storage passed
/// `validate_items`, and a PRUNE record's redo then ran `repair_fragmentation`, which laid
/// them out one after the other, ran below `pd_lower` and panicked (slice index out of
/// order). Overlap now fails validation, so redo and the heap refuse the page instead.
#[test]
fn validate_items_rejects_items_whose_storage_overlaps() {
    let mut p = heap_page();
    let a = add_item(&mut p.0, &[0u8; 4000], None, true).unwrap();
    add_item(&mut p.0, &[0u8; 4000], None, true).unwrap();
    add_item(&mut p.0, &[0u8; 100], None, true).unwrap();
    validate_items(&p.0, Oid(1), BlockNumber(0)).unwrap();
    // Items 2 and 3 now both cover item 1's 4000 bytes.
    let id = item_id(&p.0, a);
    set_item_id(&mut p.0, off(2), id);
    set_item_id(&mut p.0, off(3), id);
    let d = detail(validate_items(&p.0, Oid(1), BlockNumber(0)).unwrap_err());
    assert!(d.starts_with("corrupted item lengths: total 12000"), "{d}");
}

/// Found by fuzz target `wal_record`: a page with `pd_upper` 0 counts as new, and
/// `validate_items` passed every new page, so a full-page image with `pd_upper` 0 and a line
/// pointer to byte 18432 reached `item`, which panicked. Only an all-zero page is new now.
#[test]
fn validation_passes_a_new_page_only_if_it_is_all_zeros() {
    let mut p = heap_page();
    validate_items(&PageBuf::zeroed().0, Oid(1), BlockNumber(0)).unwrap();
    validate_header(&PageBuf::zeroed().0, Oid(1), BlockNumber(0)).unwrap();
    set_lower(&mut p.0, 28);
    set_upper(&mut p.0, 0);
    wr32(&mut p.0, 24, ItemId::normal(18432, 30).to_u32());
    for e in [validate_items(&p.0, Oid(1), BlockNumber(0)), validate_header(&p.0, Oid(1), BlockNumber(0))] {
        assert_eq!(detail(e.unwrap_err()), "pd_upper is 0 but the page is not all zeros");
    }
}

#[test]
fn describe_renders_header_and_line_pointers() {
    let mut p = heap_page();
    add_item(&mut p.0, &[0u8; 121], None, true).unwrap();
    add_item(&mut p.0, &[0u8; 121], None, true).unwrap();
    set_item_id(&mut p.0, off(2), ItemId::redirect(off(1)));
    set_flags(&mut p.0, PD_ALL_VISIBLE);
    let s = describe(&p.0);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(
        lines[0],
        "lsn: 0/0  checksum: 0  flags: 0x0004 (ALL_VISIBLE)  lower: 32  upper: 7936  \
         special: 8192  pagesize: 8192  version: 4  prune_xid: 0"
    );
    assert_eq!(lines[2], "   1 | NORMAL   | 8064 |  121");
    assert_eq!(lines[3], "   2 | REDIRECT |    1 |    0");
    // Never panics on garbage.
    let mut rng = StdRng::seed_from_u64(1);
    for _ in 0..50 {
        let mut g = [0u8; BLCKSZ];
        rng.fill(&mut g[..]);
        let _ = describe(&g);
        let _ = verify(&g, Oid(1), BlockNumber(0));
        let _ = validate_items(&g, Oid(1), BlockNumber(0));
    }
    assert_eq!(describe(&[1, 2]), "short page: 2 bytes\n");
}

/// The layout `repair_fragmentation` must produce, computed the plain way: every item with
/// storage, highest first, copied on its own up against the last one placed, its MAXALIGN
/// padding zeroed; UNUSED line pointers reset; the gap zeroed; `PD_HAS_FREE_LINES` by whether
/// an UNUSED one is left.
fn repaired_item_by_item(page: &[u8]) -> Vec<u8> {
    let mut q = page.to_vec();
    let mut items: Vec<(usize, usize, u16)> = Vec::new();
    let mut nunused = 0;
    for o in 1..=max_offset(page) {
        let id = item_id(page, off(o));
        if id.has_storage() {
            items.push((usize::from(id.off), usize::from(id.len), o));
        } else if !id.is_used() {
            nunused += 1;
            set_item_id(&mut q, off(o), ItemId::UNUSED);
        }
    }
    items.sort_by(|a, b| b.cmp(a));
    let mut upper = special(page) as usize;
    for (from, len, o) in items {
        upper -= maxalign(len);
        q.copy_within(from..from + len, upper);
        q[upper + len..upper + maxalign(len)].fill(0);
        let id = item_id(&q, off(o));
        set_item_id(&mut q, off(o), ItemId { off: upper as u16, ..id });
    }
    let lower = lower(page) as usize;
    q[lower..upper].fill(0);
    set_upper(&mut q, upper as u16);
    let f = flags(&q);
    set_flags(&mut q, if nunused > 0 { f | PD_HAS_FREE_LINES } else { f & !PD_HAS_FREE_LINES });
    q
}

/// Model test of `repair_fragmentation` on pages holding NORMAL items of odd lengths
/// (padding), DEAD items with and without storage, redirects, UNUSED line pointers, in the
/// order a page filled from the end has them and out of it. Either it leaves every byte as
/// moving the items one by one in offset order does (the ordered compaction, which moves each
/// run of back-to-back items with one copy), or it filled holes: then every item kept its
/// bytes, the items lie packed against `pd_special` with their padding and the free gap
/// zeroed, every line pointer is as the ordered layout has it but for the offsets, and it
/// moved at most half the bytes the ordered compaction moves.
#[test]
fn repair_fragmentation_matches_the_ordered_layout_or_fills_holes_with_less() {
    let mut filled = 0;
    for seed in 0..200u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut p = heap_page();
        let mut live: Vec<u16> = Vec::new();
        // Odd seeds: rows of a table of fixed-width columns, all one length but now and then
        // one of another, which is where holes can be filled exactly.
        let (common, other) = (rng.gen_range(1..300), rng.gen_range(1..300));
        for _ in 0..rng.gen_range(1..120) {
            let len = match seed % 2 {
                0 => rng.gen_range(1..300),
                _ if rng.gen_range(0..10) == 0 => other,
                _ => common,
            };
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            match add_item(&mut p.0, &data, None, true) {
                Some(o) => live.push(o.0),
                None => break,
            }
            // Now and then free some items and defragment, so later items fill reused slots
            // and the storage order departs from the line pointer order.
            if rng.gen_range(0..20) == 0 && live.len() > 2 {
                for _ in 0..rng.gen_range(1..live.len()) {
                    let k = live.swap_remove(rng.gen_range(0..live.len()));
                    set_item_id(&mut p.0, off(k), ItemId::UNUSED);
                }
                repair_fragmentation(&mut p.0);
            }
        }
        for &o in &live {
            let id = item_id(&p.0, off(o));
            match rng.gen_range(0..8) {
                0 => set_item_id(&mut p.0, off(o), ItemId::UNUSED),
                1 => set_item_id(&mut p.0, off(o), ItemId::dead()),
                2 => set_item_id(&mut p.0, off(o), ItemId { flags: LpFlags::Dead, ..id }),
                3 if o > 1 => set_item_id(&mut p.0, off(o), ItemId::redirect(off(o - 1))),
                _ => {}
            }
        }
        // Padding that is not zero, as no page the engine writes has it, so that a copy that
        // carried it along unzeroed would show.
        for o in 1..=max_offset(&p.0) {
            let id = item_id(&p.0, off(o));
            if id.has_storage() {
                let (at, len) = (usize::from(id.off), usize::from(id.len));
                p.0[at + len..at + maxalign(len)].fill(0xA5);
            }
        }
        let before = p.0;
        let want = repaired_item_by_item(&p.0);
        repair_fragmentation(&mut p.0);
        if p.0[..] == want[..] {
            continue;
        }
        filled += 1;
        check_filled_holes(&before, &p.0, &want, seed);
    }
    assert!(filled > 20, "only {filled} of 200 pages filled holes: the model test no longer covers that path");
}

/// What [`repair_fragmentation_matches_the_ordered_layout_or_fills_holes_with_less`] asks of
/// a page `after` whose holes were filled, given the page `before` and the ordered layout
/// `ordered`.
fn check_filled_holes(before: &[u8], after: &[u8], ordered: &[u8], seed: u64) {
    assert_eq!(upper(after), upper(ordered), "seed {seed}: pd_upper");
    assert_eq!(after[..PAGE_HEADER_SIZE], ordered[..PAGE_HEADER_SIZE], "seed {seed}: header");
    let (mut covered, mut moved_fill, mut moved_ordered) = (vec![false; BLCKSZ], 0, 0);
    for o in 1..=max_offset(before) {
        let (was, now, model) = (item_id(before, off(o)), item_id(after, off(o)), item_id(ordered, off(o)));
        assert_eq!(ItemId { off: 0, ..now }, ItemId { off: 0, ..model }, "seed {seed}: line pointer {o}");
        if !now.has_storage() {
            assert_eq!(now, model, "seed {seed}: line pointer {o}");
            continue;
        }
        let (from, at, len) = (usize::from(was.off), usize::from(now.off), usize::from(now.len));
        assert_eq!(after[at..at + len], before[from..from + len], "seed {seed}: item {o} lost its bytes");
        assert!(after[at + len..at + maxalign(len)].iter().all(|&b| b == 0), "seed {seed}: item {o}'s padding");
        for c in &mut covered[at..at + maxalign(len)] {
            assert!(!*c, "seed {seed}: item {o} overlaps another");
            *c = true;
        }
        if at != from {
            moved_fill += maxalign(len);
        }
        if usize::from(model.off) != from {
            moved_ordered += maxalign(len);
        }
    }
    let (lower, upper) = (usize::from(lower(after)), usize::from(upper(after)));
    assert!(covered[upper..special(after) as usize].iter().all(|&c| c), "seed {seed}: storage not packed");
    assert!(after[lower..upper].iter().all(|&b| b == 0), "seed {seed}: free gap not zeroed");
    assert!(moved_fill * 2 <= moved_ordered, "seed {seed}: filling moved {moved_fill} bytes, ordered {moved_ordered}");
}

/// A full page of equal tuples that lost three, as VACUUM finds the pages of a table after
/// updates to every twentieth row: three tuples move into the three holes, the other
/// fifty-seven stay where they are.
#[test]
fn repair_fragmentation_moves_three_tuples_into_three_holes() {
    let mut p = heap_page();
    let mut n = 0u16;
    while let Some(o) = add_item(&mut p.0, &[7u8; 121], None, true) {
        n = o.0;
    }
    let before = p.0;
    for o in [5, 26, 47] {
        set_item_id(&mut p.0, off(o), ItemId::dead());
    }
    repair_fragmentation(&mut p.0);
    let moved: Vec<u16> = (1..=n)
        .filter(|&o| item_id(&p.0, off(o)).off != item_id(&before, off(o)).off && ![5, 26, 47].contains(&o))
        .collect();
    assert_eq!(moved, [n - 2, n - 1, n], "the three lowest tuples fill the holes");
    assert_eq!(upper(&p.0), upper(&before) + 3 * 128);
    validate_items(&p.0, Oid(1), BlockNumber(0)).unwrap();
}
