//! `RoaringRef`: a `roaring::RoaringTreemap` keyed `block << 9 | offset` (offsets below 512,
//! which holds for 8 KB pages), run through `optimize()` at freeze so that runs become run
//! containers. Roaring (Chambi, Lemire et al., 2016) splits the key into 48 high bits, looked
//! up in a sorted container list, and 16 low bits, held in an array, bitmap or run container.
//!
//! Its budget is approximate: the crate does not expose its allocations, so the check counts
//! 2 bytes per value in array containers, 8 KiB per bitmap container and a fixed overhead per
//! container. [`DeadTids::memory_bytes`] reports the crate's own container statistics; the
//! benchmark's counting allocator gives the exact figure.

use roaring::RoaringTreemap;

use crate::{check_page, DeadTids, Full, Tid};

/// Assumed bytes per container besides its values (key, store enum, `Vec` header).
const CONTAINER_OVERHEAD: usize = 32;
/// Assumed bytes per inner 32-bit bitmap (a `BTreeMap` entry and its `Vec` header).
const BITMAP_OVERHEAD: usize = 64;

#[derive(Debug, Default)]
pub struct RoaringRef {
    budget_bytes: usize,
    map: RoaringTreemap,
    last_block: Option<u32>,
    /// Estimated bytes of the containers before the current one.
    closed_bytes: usize,
    /// High 48 bits of the current container's keys, and its cardinality.
    current: Option<(u64, usize)>,
}

fn container_bytes(card: usize) -> usize {
    CONTAINER_OVERHEAD + if card <= 4096 { 2 * card } else { 8192 }
}

impl RoaringRef {
    pub fn new(budget_bytes: usize) -> RoaringRef {
        RoaringRef { budget_bytes, ..Default::default() }
    }

    #[inline(always)]
    fn key(tid: Tid) -> u64 {
        (u64::from(tid.block) << 9) | u64::from(tid.offset)
    }

    fn estimate(&self) -> usize {
        self.closed_bytes + self.current.map_or(0, |(_, c)| container_bytes(c))
    }
}

impl DeadTids for RoaringRef {
    fn name(&self) -> &'static str {
        "roaring"
    }

    fn add_page(&mut self, block: u32, offsets: &[u16]) -> Result<(), Full> {
        check_page(self.last_block, block, offsets);
        if offsets.is_empty() {
            return Ok(());
        }
        assert!(offsets[offsets.len() - 1] < 512, "RoaringRef keys hold offsets below 512");
        // A page's keys share block >> 7, so they land in one container.
        let high = u64::from(block) >> 7;
        let (closed, card) = match self.current {
            Some((h, c)) if h == high => (self.closed_bytes, c + offsets.len()),
            Some((_, c)) => (self.closed_bytes + container_bytes(c), offsets.len()),
            None => (BITMAP_OVERHEAD, offsets.len()),
        };
        let new_bitmap = self.last_block.is_none_or(|l| l >> 23 != block >> 23);
        let extra = if new_bitmap && self.last_block.is_some() { BITMAP_OVERHEAD } else { 0 };
        if closed + extra + container_bytes(card) > self.budget_bytes {
            return Err(Full);
        }
        self.closed_bytes = closed + extra;
        self.current = Some((high, card));
        for &o in offsets {
            self.map.try_push(Self::key(Tid::new(block, o))).expect("keys ascend");
        }
        self.last_block = Some(block);
        debug_assert!(self.estimate() <= self.budget_bytes);
        Ok(())
    }

    fn freeze(&mut self) {
        self.map.optimize();
    }

    fn contains(&self, tid: Tid) -> bool {
        self.map.contains(Self::key(tid))
    }

    fn for_each_page(&self, f: &mut dyn FnMut(u32, &[u16])) {
        let mut buf = Vec::new();
        let mut cur: Option<u32> = None;
        for k in self.map.iter() {
            let (b, o) = ((k >> 9) as u32, (k & 511) as u16);
            if cur != Some(b) {
                if let Some(c) = cur {
                    f(c, &buf);
                }
                buf.clear();
                cur = Some(b);
            }
            buf.push(o);
        }
        if let Some(c) = cur {
            f(c, &buf);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.map
            .bitmaps()
            .map(|(_, bm)| {
                let s = bm.statistics();
                BITMAP_OVERHEAD
                    + s.n_containers as usize * CONTAINER_OVERHEAD
                    + (s.n_bytes_array_containers + s.n_bytes_run_containers + s.n_bytes_bitset_containers) as usize
            })
            .sum()
    }

    fn num_tids(&self) -> u64 {
        self.map.len()
    }

    fn reset(&mut self) {
        *self = RoaringRef::new(self.budget_bytes);
    }
}
