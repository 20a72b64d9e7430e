//! Phases II and III (PostgreSQL's `lazy_vacuum`): every index loses its entries for the TIDs
//! in the dead-item store, then those LP_DEAD line pointers become LP_UNUSED.
//!
//! The order is DESIGN.md invariant 3: an LP_DEAD item becomes reusable only after no index
//! entry can lead to it any more. Phase III logs one VACUUM record per heap page, which also
//! sets the page all-visible (and all-frozen) when phase I found it would be once its LP_DEAD
//! items were gone, and records the page's free space.

use std::sync::atomic::Ordering;

use tidstore::{DeadTids, TidStore};

use crate::error::Result;
use crate::heap;
use crate::heap::prune;
use crate::heap::wal::XLOG_HEAP2_VACUUM;
use crate::index::IndexAm;
use crate::page::{self, PD_ALL_VISIBLE};
use crate::types::{BlockNumber, Lsn, OffsetNumber, Tid};
use crate::vm::VmBits;

use super::freeze;
use super::scan::{repair_vm, Ctx, Worker};
use super::wal as vwal;
use super::{LazyVacuum, VacuumPhase};

/// What phase I learned of a page it left with LP_DEAD items (see [`super::scan::DeadPage`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Seen {
    pub block: u32,
    pub lsn: Lsn,
    pub visible: bool,
    pub frozen: bool,
}

impl LazyVacuum<'_> {
    /// Phases II and III for what the store holds, then resets it.
    pub(super) fn vacuum_cycle(&mut self) -> Result<()> {
        self.dead.freeze();
        self.r.dead_items_bytes_total += self.dead.memory_bytes() as u64;
        self.r.dead_items_resets += 1;
        if self.do_index_vacuuming && !self.check_failsafe() {
            self.vacuum_indexes()?;
            self.vacuum_heap()?;
        }
        self.phase1.clear();
        self.dead.reset();
        self.progress.dead_tuple_bytes.store(0, Ordering::Relaxed);
        self.progress.num_dead_item_ids.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Phase II: every index loses its entries for the stored TIDs.
    fn vacuum_indexes(&mut self) -> Result<()> {
        self.progress.set_phase(VacuumPhase::VacuumingIndexes);
        self.progress.indexes_total.store(self.indexes.len() as u32, Ordering::Relaxed);
        self.progress.indexes_processed.store(0, Ordering::Relaxed);
        let mut scratch = ProbeScratch::default();
        for i in 0..self.indexes.len() {
            self.leader.cost.point()?;
            let ix = self.indexes[i].clone();
            if self.nworkers > 0 && ix.btree.num_pages(&self.env)? >= self.min_parallel_index_pages {
                self.bulk_delete_parallel(&ix.btree, i, self.nworkers)?;
            } else {
                let dead = &self.dead;
                let cost = &mut self.leader.cost;
                let mut is_dead = |tids: &[Tid], out: &mut [bool]| {
                    probe_batch(dead, tids, out, &mut scratch);
                    cost.delay();
                };
                ix.btree.bulk_delete(&self.env, &mut is_dead, &mut self.index_stats[i])?;
            }
            self.progress.indexes_processed.store(i as u32 + 1, Ordering::Relaxed);
        }
        self.r.num_index_scans += 1;
        self.progress.index_vacuum_count.store(self.r.num_index_scans, Ordering::Relaxed);
        Ok(())
    }

    /// Phase III: LP_DEAD -> LP_UNUSED on every page in the store, then VM and FSM.
    fn vacuum_heap(&mut self) -> Result<()> {
        self.progress.set_phase(VacuumPhase::VacuumingHeap);
        let mut pages: Vec<(u32, Vec<u16>)> = Vec::new();
        self.dead.for_each_page(&mut |b, offs| pages.push((b, offs.to_vec())));
        if self.nworkers > 0 && pages.len() > super::parallel::PHASE3_BATCH {
            return self.vacuum_heap_parallel(&pages, self.nworkers);
        }
        let progress = self.progress.clone();
        let ctx = self.ctx(&progress);
        for (b, offs) in &pages {
            let seen = self.phase1.binary_search_by_key(b, |e| e.block).ok().map(|i| self.phase1[i]);
            self.leader.vacuum_page(&ctx, *b, offs, seen)?;
        }
        self.leader.flush_fsm(&ctx)
    }
}

impl Worker<'_> {
    /// Phase III on one page: its LP_DEAD items at `offs` become LP_UNUSED, and the page is
    /// set all-visible (and all-frozen) when it now is, in one VACUUM record; then its free
    /// space goes to the FSM. `seen`: what phase I learned of the page, trusted if the page's
    /// LSN has not moved since.
    pub(super) fn vacuum_page(&mut self, ctx: &Ctx<'_>, block: u32, offs: &[u16], seen: Option<Seen>) -> Result<()> {
        self.cost.point()?;
        let env = self.env;
        let block = BlockNumber(block);
        let buf = heap::read_page(&env, ctx.rel, block, Some(&mut self.ring))?;
        let mut g = buf.write();
        let p = &mut g.0;
        let mut offsets = std::mem::take(&mut self.unused);
        offsets.clear();
        offsets.extend(offs.iter().map(|&o| OffsetNumber(o)));
        let unchanged = seen.filter(|s| s.lsn == page::lsn(p));
        vwal::apply_unused(p, &offsets, Lsn(0))?;
        let (all_visible, all_frozen, has_lpdead) = match unchanged {
            Some(s) => (s.visible, s.visible && s.frozen, false),
            None => {
                // The page changed since phase I: look at it again (without pruning).
                let (scan, summary, memo) = self.scratch();
                // The VACUUM record below covers the page, with an image if it needs one.
                prune::scan_page(p, ctx.cutoffs.oldest_xmin, env.xact, env.wal.flushed_lsn(), true, memo, scan)?;
                freeze::summarize(p, scan, &ctx.cutoffs, env.xact, summary);
                if scan.hints_changed {
                    buf.hints_added(page::lsn(p), env.wal.redo_ptr());
                }
                let visible = summary.all_visible && summary.lpdead.is_empty();
                let frozen =
                    summary.is_fully_frozen() && (summary.has_tuples() || ctx.empty_page_bits(block).all_frozen());
                (visible, visible && frozen, !summary.lpdead.is_empty())
            }
        };
        let bits = ctx.rel.vm.get_pinned(env.pool, block, &mut self.vm_pin)?;
        let mut set = None;
        if all_visible {
            let want = if all_frozen { VmBits::VALID } else { VmBits::ALL_VISIBLE };
            if !bits.contains(want) || page::flags(p) & PD_ALL_VISIBLE == 0 {
                set = Some(want);
                self.c.note_vm(bits, all_frozen);
            }
        }
        vwal::encode_unused(&mut self.main, &offsets, set.map(|b| (b.0, false)));
        self.log_with_map(ctx, &buf, p, set, XLOG_HEAP2_VACUUM, false)?;
        if !all_visible {
            repair_vm(ctx, &env, &buf, p, bits, has_lpdead)?;
        }
        let cat = ctx.fsm_category(page::heap_free_space(p), all_visible);
        drop(g);
        self.unused = offsets;
        self.note_free(ctx, block, cat)?;
        ctx.progress.heap_blks_vacuumed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Buffers [`probe_batch`] reuses from batch to batch.
#[derive(Default)]
pub(super) struct ProbeScratch {
    probe: Vec<tidstore::Tid>,
    bits: Vec<u64>,
    offsets: Vec<u16>,
}

/// Answers "is this TID dead?" for one batch of index entries (a B-tree leaf's), in `out`.
///
/// A leaf's entries are in key order; when keys follow the heap's order (a serial key, rows
/// loaded in key order, new versions appended together) its TIDs fall on a handful of heap
/// pages, one after the other. Then each page's dead offsets are fetched once
/// ([`TidStore::page_offsets`]) into a bitmap kept for the batch, and every entry costs a bit
/// test: the store is asked once per page instead of once per entry. Otherwise (TIDs that jump
/// from page to page) the store's batched lookup overlaps the probes' cache misses.
///
/// Hot path: every entry of every index goes through here in phase II.
pub(super) fn probe_batch(dead: &TidStore, tids: &[Tid], out: &mut [bool], s: &mut ProbeScratch) {
    let page_changes = tids.windows(2).filter(|w| w[0].block != w[1].block).count();
    if page_changes * 4 <= tids.len() {
        // A direct-mapped cache of page bitmaps: consecutive pages take distinct slots.
        const SLOTS: usize = 8;
        let mut pages = [(u32::MAX, [0u64; 5]); SLOTS];
        for (t, o) in tids.iter().zip(out.iter_mut()) {
            let slot = &mut pages[t.block.0 as usize % SLOTS];
            if slot.0 != t.block.0 {
                slot.0 = t.block.0;
                slot.1 = [0; 5];
                dead.page_offsets(t.block.0, &mut s.offsets);
                for &off in &s.offsets {
                    if let Some(w) = slot.1.get_mut(usize::from(off) / 64) {
                        *w |= 1 << (off % 64);
                    }
                }
            }
            let off = usize::from(t.offset.0);
            *o = match slot.1.get(off / 64) {
                Some(w) => w >> (off % 64) & 1 == 1,
                // Beyond the bitmap (no heap page has that many line pointers): ask the store.
                None => dead.contains(tidstore::Tid::new(t.block.0, t.offset.0)),
            };
        }
        return;
    }
    s.probe.clear();
    s.probe.extend(tids.iter().map(|t| tidstore::Tid::new(t.block.0, t.offset.0)));
    s.bits.clear();
    s.bits.resize(tids.len().div_ceil(64), 0u64);
    dead.contains_many(&s.probe, &mut s.bits);
    for (j, o) in out.iter_mut().enumerate() {
        *o = s.bits[j / 64] >> (j % 64) & 1 == 1;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::types::{BlockNumber, OffsetNumber};

    /// `probe_batch` answers as the store does, on batches whose TIDs cluster on a few pages
    /// (the bitmap cache, with pages colliding in its slots) and on scattered ones (the
    /// store's batched lookup), including pages the store does not hold.
    #[test]
    fn probe_batch_agrees_with_the_store_on_clustered_and_scattered_batches() {
        let mut store = TidStore::new(usize::MAX);
        let mut oracle = BTreeSet::new();
        for b in (0..400u32).filter(|b| b % 3 != 0) {
            let offs: Vec<u16> = (1..=291u16).filter(|o| (u32::from(*o) * 7 + b) % 11 == 0).collect();
            store.add_page(b, &offs).unwrap();
            oracle.extend(offs.iter().map(|&o| (b, o)));
        }
        store.freeze();
        let tid = |b: u32, o: u16| Tid { block: BlockNumber(b), offset: OffsetNumber(o) };
        // Clustered: runs of one page, jumping between pages 8 apart (same cache slot) and
        // a far one (a leaf's new versions at the table's end).
        let mut clustered = Vec::new();
        for run in 0..40u32 {
            let b = if run % 5 == 4 { 399 } else { (run * 8) % 400 };
            clustered.extend((1..=60u16).map(|o| tid(b, o * 4 + (run % 4) as u16)));
        }
        let scattered: Vec<Tid> = (0..2000u32).map(|i| tid((i * 37) % 400, ((i * 13) % 291 + 1) as u16)).collect();
        let mut s = ProbeScratch::default();
        for (what, batch) in [("clustered", clustered), ("scattered", scattered)] {
            let mut out = vec![false; batch.len()];
            probe_batch(&store, &batch, &mut out, &mut s);
            for (t, got) in batch.iter().zip(&out) {
                assert_eq!(*got, oracle.contains(&(t.block.0, t.offset.0)), "{what}: {t}");
            }
        }
    }
}
