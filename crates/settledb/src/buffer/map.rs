//! The buffer pool's mapping from block to frame (PostgreSQL's `buf_table.c`, laid out our
//! own way): an open-addressing table with linear probing, whose hash keeps neighbouring
//! blocks of a relation fork in neighbouring slots.
//!
//! A general hash map scatters the blocks of a scan over the whole table, so on a large pool
//! each lookup of a scan costs two cache misses (the control bytes, then the entry): in a
//! `perf` profile of the first VACUUM of `settle bench vacuum --scale 50` with a 1 GB pool,
//! those two loads held about half of `BufferPool::get`'s 9% of the samples. Here the hash
//! picks a window of [`GROUP`] slots for each run of [`GROUP`] consecutive blocks and the block
//! its place in the window, so a scan's lookups walk the table sequentially: four 16-byte
//! slots to a cache line, and the hardware's prefetcher ahead of them.
//!
//! The table holds four slots per frame, so windows rarely collide; a collision spills into
//! the next window, as linear probing does. Removal shifts the entries after the hole back
//! (no tombstones), so lookups never slow down with churn.
//!
//! Callers hold the pool's mapping lock: shared to look up, exclusive to change.

use crate::types::{BlockNumber, BufferTag, Fork, Oid};

/// Consecutive blocks that share a window of slots.
const GROUP: usize = 16;
/// Slots per frame.
const SLOTS_PER_FRAME: usize = 4;
/// `Slot::frame` of an empty slot.
const EMPTY: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Slot {
    rel: u32,
    block: u32,
    frame: u32,
    fork: Fork,
}

impl Slot {
    const EMPTY: Slot = Slot { rel: 0, block: 0, frame: EMPTY, fork: Fork::Main };

    #[inline]
    fn holds(&self, tag: BufferTag) -> bool {
        self.block == tag.block.0 && self.rel == tag.rel.0 && self.fork == tag.fork
    }

    fn tag(&self) -> BufferTag {
        BufferTag { rel: Oid(self.rel), fork: self.fork, block: BlockNumber(self.block) }
    }
}

pub(super) struct BufMap {
    slots: Box<[Slot]>,
    mask: usize,
}

impl BufMap {
    /// A table for a pool of `nframes` frames.
    pub(super) fn new(nframes: usize) -> BufMap {
        let n = (nframes.max(1) * SLOTS_PER_FRAME).next_power_of_two().max(GROUP);
        BufMap { slots: vec![Slot::EMPTY; n].into_boxed_slice(), mask: n - 1 }
    }

    /// Where `tag`'s probe starts: its group's window, at the block's place in it.
    #[inline]
    fn home(&self, tag: BufferTag) -> usize {
        let group = u64::from(tag.block.0) / GROUP as u64;
        // rel, fork and group packed into one word (a group number fits in 28 bits), then
        // mixed with splitmix64's finalizer.
        let mut h = u64::from(tag.rel.0) << 32 | (tag.fork as u64) << 28 | group;
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        ((h as usize).wrapping_mul(GROUP) + tag.block.0 as usize % GROUP) & self.mask
    }

    /// The frame holding `tag`, if any. Hot path.
    #[inline]
    pub(super) fn get(&self, tag: BufferTag) -> Option<usize> {
        let mut i = self.home(tag);
        loop {
            let s = &self.slots[i];
            if s.frame == EMPTY {
                return None;
            }
            if s.holds(tag) {
                return Some(s.frame as usize);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Maps `tag`, which must not be mapped yet, to `frame`.
    pub(super) fn insert(&mut self, tag: BufferTag, frame: usize) {
        debug_assert!(self.get(tag).is_none(), "{tag:?} is mapped already");
        debug_assert!(frame < EMPTY as usize);
        let mut i = self.home(tag);
        while self.slots[i].frame != EMPTY {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = Slot { rel: tag.rel.0, block: tag.block.0, frame: frame as u32, fork: tag.fork };
    }

    /// Unmaps `tag`; returns the frame it was mapped to.
    pub(super) fn remove(&mut self, tag: BufferTag) -> Option<usize> {
        let mut hole = self.home(tag);
        loop {
            let s = self.slots[hole];
            if s.frame == EMPTY {
                return None;
            }
            if s.holds(tag) {
                break;
            }
            hole = (hole + 1) & self.mask;
        }
        let frame = self.slots[hole].frame as usize;
        // Shift back every entry after the hole, up to the next empty slot, whose probe passes
        // through the hole (its home is not between the hole and where it sits), so that no
        // probe meets an empty slot before its entry.
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let s = self.slots[j];
            if s.frame == EMPTY {
                break;
            }
            let home = self.home(s.tag());
            let home_after_hole = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !home_after_hole {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = Slot::EMPTY;
        Some(frame)
    }

    /// Every mapping, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (BufferTag, usize)> + '_ {
        self.slots.iter().filter(|s| s.frame != EMPTY).map(|s| (s.tag(), s.frame as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;

    fn tag(rel: u32, fork: Fork, block: u32) -> BufferTag {
        BufferTag { rel: Oid(rel), fork, block: BlockNumber(block) }
    }

    /// Model test against `HashMap`: random inserts and removes of tags from a few relations
    /// and forks, runs of consecutive blocks (which share windows) and scattered ones, in a
    /// table small enough that windows collide and probes wrap round its end.
    #[test]
    fn agrees_with_a_hash_map_through_inserts_and_removes() {
        let forks = [Fork::Main, Fork::Fsm, Fork::Vm];
        for seed in 0..40u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let nframes = rng.gen_range(4..64);
            let mut map = BufMap::new(nframes);
            let mut model: HashMap<BufferTag, usize> = HashMap::new();
            for step in 0..4000 {
                let t = if rng.gen_bool(0.5) {
                    tag(rng.gen_range(1..4), forks[rng.gen_range(0..3)], rng.gen_range(0..40))
                } else {
                    tag(rng.gen_range(1..1000), Fork::Main, rng.gen())
                };
                if model.len() < nframes && rng.gen_bool(0.55) {
                    if let std::collections::hash_map::Entry::Vacant(e) = model.entry(t) {
                        e.insert(step);
                        map.insert(t, step);
                    }
                } else if let Some(&t) = model.keys().nth(rng.gen_range(0..model.len().max(1))) {
                    assert_eq!(map.remove(t), model.remove(&t), "seed {seed} step {step}: remove {t:?}");
                }
                assert_eq!(map.remove(tag(5000, Fork::Main, 1)), None);
                for (t, &f) in &model {
                    assert_eq!(map.get(*t), Some(f), "seed {seed} step {step}: {t:?}");
                }
                assert_eq!(map.get(t), model.get(&t).copied(), "seed {seed} step {step}: {t:?}");
                let mut listed: Vec<(BufferTag, usize)> = map.iter().collect();
                let mut want: Vec<(BufferTag, usize)> = model.iter().map(|(t, f)| (*t, *f)).collect();
                listed.sort_by_key(|&(t, f)| (t.rel, t.fork as u8, t.block, f));
                want.sort_by_key(|&(t, f)| (t.rel, t.fork as u8, t.block, f));
                assert_eq!(listed, want, "seed {seed} step {step}");
            }
        }
    }

    /// The layout the table is for: a run of consecutive blocks of one fork lies in
    /// consecutive slots.
    #[test]
    fn consecutive_blocks_take_consecutive_slots() {
        let map = BufMap::new(1024);
        for b in (0..64).step_by(GROUP) {
            let home = map.home(tag(7, Fork::Main, b));
            for k in 1..GROUP as u32 {
                assert_eq!(map.home(tag(7, Fork::Main, b + k)), (home + k as usize) & map.mask);
            }
        }
    }
}
