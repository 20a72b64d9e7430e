//! Phase I on one page: prune, freeze by policy, set the visibility map, note the free space,
//! and hand back the page's LP_DEAD items, in one WAL record per page (PRUNE_FREEZE,
//! [`super::wal`]).
//!
//! ```text
//!  cleanup lock ──> heap::prune::scan_page   one pass: hint bits + HeapTupleSatisfiesVacuum
//!               ──> heap::prune::plan_from_scan   redirects, dead, unused (no chain walk
//!                                                 on a page without HOT chains)
//!               ──> apply the prune part          tuples move (repair_fragmentation)
//!               ──> freeze::summarize + decide    the policy, on the pruned page
//!               ──> apply the freeze part, PD_ALL_VISIBLE and the map bits
//!               ──> one PRUNE_FREEZE record (heap page, map page), both pages stamped
//! ```
//!
//! Nothing is logged for a page that needs no change; its hint bits are kept as
//! [`crate::heap::hint`] allows. A page whose cleanup lock is taken by someone else goes down
//! the no-prune path (`lazy_scan_noprune`): its LP_DEAD items are still collected, its dead
//! tuples counted as missed, its unfrozen XIDs still bound the new relfrozenxid.
//!
//! A [`Worker`] holds what one thread needs for this (its buffer ring, the pinned map page,
//! the page scratch, its counters); the leader has one, and each parallel worker its own
//! ([`super::parallel`]). Workers share nothing mutable but the buffer pool, the WAL and the
//! maps, whose locks order them: heap page, then map page, as everywhere.
//!
//! Hot path: everything here runs once per heap page. No allocation per page (the scratch is
//! reused), no question to the CLOG per tuple (a memo of the last transactions' fates), one
//! header parse per tuple per pass.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::VacuumEnv;
use crate::buffer::{self, Buffer, Ring};
use crate::config::FreezePolicy;
use crate::error::Result;
use crate::fsm;
use crate::heap::prune::{self, PageScan, XidMemo};
use crate::heap::tuple::TupleHeader;
use crate::heap::visibility::{satisfies_vacuum, VacuumStatus};
use crate::heap::wal::{apply_prune, PrunePlan, XLOG_HEAP2_PRUNE_FREEZE};
use crate::heap::{self, HeapEnv, Relation};
use crate::page::{self, LpFlags, BLCKSZ, PD_ALL_VISIBLE};
use crate::types::{BlockNumber, Lsn, OffsetNumber, Xid};
use crate::vm::{MapPin, VmBits};
use crate::wal::{BlockRef, RecordBuilder, Rmgr};

use super::adaptive::{Freezing, Verdicts};
use super::freeze::{self, Cutoffs, PageFacts, PageSummary};
use super::wal::{self as vwal, FreezePlan};
use super::{CostDelay, VacuumProgress};

/// Extra attempts at a page's cleanup lock before the no-prune path.
const CLEANUP_LOCK_RETRIES: usize = 5;
/// Pages between FSM flushes.
const FSM_BATCH: usize = 1024;

/// `adaptive`'s deferred FreezeLimits ([`super::adaptive::deferred_freeze_age`] and
/// [`super::adaptive::deferred_freeze_age_modified`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DeferredLimits {
    /// For a page found all-visible.
    pub untouched: Xid,
    /// For a page found modified.
    pub modified: Xid,
}

/// What every worker of one VACUUM reads and nobody changes.
pub(super) struct Ctx<'a> {
    pub db: VacuumEnv<'a>,
    pub rel: &'a Relation,
    pub cutoffs: Cutoffs,
    pub policy: FreezePolicy,
    /// `adaptive`: where freezing sticks, per range of the table's pages.
    pub verdicts: Option<Arc<Verdicts>>,
    /// `adaptive`, unless anti-wraparound or DISABLE_PAGE_SKIPPING: the FreezeLimits for
    /// pages in ranges where freezing does not stick (not later than `cutoffs.freeze_limit`;
    /// see [`freeze`], "the deferred FreezeLimit").
    pub deferred_freeze_limits: Option<DeferredLimits>,
    pub fsm_settled: bool,
    pub aggressive: bool,
    pub has_indexes: bool,
    pub progress: &'a VacuumProgress,
}

impl Ctx<'_> {
    /// `adaptive`: what VACUUM freezes in `block`'s range.
    pub fn range_freezing(&self, block: BlockNumber) -> Freezing {
        self.verdicts.as_ref().map(|v| v.freezing(block)).unwrap_or_default()
    }

    /// What the page at `block` may have frozen, and the cutoffs to freeze it by: `adaptive`
    /// freezes a page where freezing does not stick by a deferred FreezeLimit, the one for
    /// pages found all-visible (`was_all_visible`) or the one for modified pages.
    pub fn page_freezing(&self, block: BlockNumber, was_all_visible: bool) -> (Freezing, Cutoffs) {
        let range = self.range_freezing(block);
        match self.deferred_freeze_limits {
            Some(d) if range != Freezing::Eager => {
                let freeze_limit = if was_all_visible { d.untouched } else { d.modified };
                (range, Cutoffs { freeze_limit, ..self.cutoffs })
            }
            _ => (range, self.cutoffs),
        }
    }

    /// The map bits for a page without tuples: all-frozen as well as all-visible, except under
    /// `adaptive` where freezing does not stick (see [`freeze::decide`]).
    pub fn empty_page_bits(&self, block: BlockNumber) -> VmBits {
        if self.policy == FreezePolicy::Adaptive && self.range_freezing(block) != Freezing::Eager {
            VmBits::ALL_VISIBLE
        } else {
            VmBits::VALID
        }
    }

    pub fn fsm_category(&self, free: usize, all_visible: bool) -> u8 {
        if self.fsm_settled && all_visible && free <= BLCKSZ / 2 {
            0
        } else {
            fsm::avail_to_category(free)
        }
    }
}

/// A page phase I leaves with LP_DEAD items, for the dead-item store and phase III.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DeadPage {
    pub block: u32,
    pub offsets: Vec<u16>,
    /// The page's LSN when phase I let go of it, whether it will be all-visible once its
    /// LP_DEAD items are gone, and whether it is then all-frozen. Phase III trusts these when
    /// the LSN has not moved (no logged change since) instead of examining every tuple again.
    pub lsn: Lsn,
    pub visible: bool,
    pub frozen: bool,
}

/// What one worker's pages add to the report.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ScanCounts {
    pub scanned_pages: u32,
    pub tuples_deleted: u64,
    pub new_live_tuples: u64,
    pub recently_dead_tuples: u64,
    pub missed_dead_tuples: u64,
    pub missed_dead_pages: u32,
    pub frozen_pages: u32,
    pub tuples_frozen: u64,
    pub vm_new_visible_pages: u32,
    pub vm_new_visible_frozen_pages: u32,
    pub vm_new_frozen_pages: u32,
    pub lpdead_item_pages: u32,
    pub lpdead_items: u64,
    /// Oldest unfrozen XID left on the pages read (`None`: none).
    pub oldest_left: Option<Xid>,
    /// One past the last page that has tuples or redirects.
    pub nonempty_pages: u32,
    /// An all-visible page that is not all-frozen was skipped.
    pub skipped_allvis: bool,
}

impl ScanCounts {
    fn note_xid(&mut self, x: Xid) {
        if self.oldest_left.is_none_or(|o| x.precedes(o)) {
            self.oldest_left = Some(x);
        }
    }

    /// Adds another worker's counts.
    pub fn merge(&mut self, o: &ScanCounts) {
        self.scanned_pages += o.scanned_pages;
        self.tuples_deleted += o.tuples_deleted;
        self.new_live_tuples += o.new_live_tuples;
        self.recently_dead_tuples += o.recently_dead_tuples;
        self.missed_dead_tuples += o.missed_dead_tuples;
        self.missed_dead_pages += o.missed_dead_pages;
        self.frozen_pages += o.frozen_pages;
        self.tuples_frozen += o.tuples_frozen;
        self.vm_new_visible_pages += o.vm_new_visible_pages;
        self.vm_new_visible_frozen_pages += o.vm_new_visible_frozen_pages;
        self.vm_new_frozen_pages += o.vm_new_frozen_pages;
        self.lpdead_item_pages += o.lpdead_item_pages;
        self.lpdead_items += o.lpdead_items;
        if let Some(x) = o.oldest_left {
            self.note_xid(x);
        }
        self.nonempty_pages = self.nonempty_pages.max(o.nonempty_pages);
        self.skipped_allvis |= o.skipped_allvis;
    }

    /// Counts the map bits a page got, given what it had.
    pub fn note_vm(&mut self, before: VmBits, all_frozen: bool) {
        if !before.all_visible() {
            self.vm_new_visible_pages += 1;
            if all_frozen {
                self.vm_new_visible_frozen_pages += 1;
            }
        } else if all_frozen && !before.all_frozen() {
            self.vm_new_frozen_pages += 1;
        }
    }
}

/// One thread's tools and scratch for phases I and III.
pub(super) struct Worker<'a> {
    pub env: HeapEnv<'a>,
    pub ring: Ring,
    /// The visibility map page of the pages being processed, kept pinned (`vmbuffer`).
    pub vm_pin: MapPin<'a>,
    pub fsm_pending: Vec<(BlockNumber, u8)>,
    pub cost: CostDelay,
    pub c: ScanCounts,
    scan: Box<PageScan>,
    summary: Box<PageSummary>,
    plan: PrunePlan,
    freeze: Vec<FreezePlan>,
    /// A record's main data, reused.
    pub main: Vec<u8>,
    /// Phase III's offsets to free on the page at hand, reused.
    pub unused: Vec<OffsetNumber>,
    pub memo: XidMemo,
}

impl<'a> Worker<'a> {
    pub fn new(db: VacuumEnv<'a>, cost: CostDelay) -> Worker<'a> {
        Worker {
            env: db.heap(),
            ring: Ring::new(256 << 10),
            vm_pin: MapPin::default(),
            fsm_pending: Vec::with_capacity(FSM_BATCH),
            cost,
            c: ScanCounts::default(),
            scan: Box::default(),
            summary: Box::default(),
            plan: PrunePlan::default(),
            freeze: Vec::new(),
            main: Vec::with_capacity(64),
            unused: Vec::new(),
            memo: XidMemo::default(),
        }
    }

    pub fn flush_fsm(&mut self, ctx: &Ctx<'_>) -> Result<()> {
        if !self.fsm_pending.is_empty() {
            ctx.rel.fsm.set_many(self.env.pool, &self.fsm_pending)?;
            self.fsm_pending.clear();
        }
        Ok(())
    }

    /// The page scan and summary scratch, and the transaction memo.
    pub fn scratch(&mut self) -> (&mut PageScan, &mut PageSummary, &mut XidMemo) {
        (&mut self.scan, &mut self.summary, &mut self.memo)
    }

    pub fn note_free(&mut self, ctx: &Ctx<'_>, block: BlockNumber, cat: u8) -> Result<()> {
        self.fsm_pending.push((block, cat));
        if self.fsm_pending.len() >= FSM_BATCH {
            self.flush_fsm(ctx)?;
        }
        Ok(())
    }

    /// Phase I on one page; returns the page's LP_DEAD items when it has some.
    pub fn scan_page(&mut self, ctx: &Ctx<'_>, block: BlockNumber) -> Result<Option<DeadPage>> {
        let env = self.env;
        let buf = heap::read_page(&env, ctx.rel, block, Some(&mut self.ring))?;
        // Our background writer pins pages for a moment while it writes them; give such a
        // pin a few microseconds to go away before settling for the no-prune path (PostgreSQL
        // tries once).
        let mut first = buf.try_cleanup_lock();
        for _ in 0..CLEANUP_LOCK_RETRIES {
            if first.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_micros(20));
            first = buf.try_cleanup_lock();
        }
        let mut g = match first {
            Some(g) => g,
            None => {
                // No cleanup lock: process the page read-only, unless an aggressive vacuum
                // finds XIDs it must freeze here.
                let g = buf.read();
                if !page::is_new(&g.0) && page::max_offset(&g.0) > 0 {
                    if let Some(lpdead) = self.scan_noprune(ctx, block, &g.0)? {
                        let lsn = page::lsn(&g.0);
                        drop(g);
                        return Ok(self.dead_page(ctx, block, lpdead, lsn, false, false));
                    }
                }
                drop(g);
                buf.cleanup_lock()
            }
        };
        let p = &mut g.0;
        if page::is_new(p) {
            // An extended page nobody initialized: all of it is free.
            self.note_free(ctx, block, fsm::avail_to_category(BLCKSZ - page::PAGE_HEADER_SIZE))?;
            return Ok(None);
        }
        if page::max_offset(p) == 0 {
            // An empty page: all-visible and (usually) all-frozen, unless it is already.
            let bits = ctx.rel.vm.get_pinned(self.env.pool, block, &mut self.vm_pin)?;
            let want = ctx.empty_page_bits(block);
            if !bits.contains(want) || page::flags(p) & PD_ALL_VISIBLE == 0 {
                self.log_page(ctx, &buf, p, None, Some(want), false)?;
                self.c.note_vm(bits, want.all_frozen());
            }
            let cat = ctx.fsm_category(page::heap_free_space(p), true);
            self.note_free(ctx, block, cat)?;
            return Ok(None);
        }
        self.prune_freeze(ctx, &buf, p)
    }

    /// The cleanup-locked part of [`Self::scan_page`] for a page with line pointers.
    fn prune_freeze(&mut self, ctx: &Ctx<'_>, buf: &Buffer<'_>, p: &mut [u8]) -> Result<Option<DeadPage>> {
        let block = buf.block();
        let env = self.env;
        let was_all_visible = page::flags(p) & PD_ALL_VISIBLE != 0;
        let (lsn0, redo) = (page::lsn(p), env.wal.redo_ptr());
        // A page that matches its file and has no image since the redo pointer may end up only
        // set all-visible, which is logged without an image (`Buffer::mark_dirty_imageless`)
        // if nothing else in the page changed: its hint bits wait until a record with an image
        // (pruning, freezing) is certain.
        let imageless_candidate = env.wal.needs_image(lsn0) && buf.matches_file();
        let write_hints = !imageless_candidate && buf.may_add_hints(lsn0, redo);
        let (range, cutoffs) = ctx.page_freezing(block, was_all_visible);
        // A page set all-visible is usually untouched since: one walk, without the prune
        // pass, tells whether it is plain (nothing to prune or hint) and summarizes it.
        let summarized = was_all_visible && freeze::summarize_plain(p, &cutoffs, &mut self.summary);
        if summarized {
            self.scan.set_nothing_found();
        } else {
            prune::scan_page(
                p,
                ctx.cutoffs.oldest_xmin,
                env.xact,
                env.wal.flushed_lsn(),
                write_hints,
                &mut self.memo,
                &mut self.scan,
            )?;
        }
        prune::plan_from_scan(p, block, &self.scan, &mut self.plan);
        let mut lpdead_now_unused = 0u64;
        if !self.plan.is_empty() {
            self.c.tuples_deleted += u64::from(prune::tuples_removed(p, &self.plan));
        }
        if !ctx.has_indexes {
            // Nothing points at LP_DEAD items: make them unused right away, the ones pruning
            // makes and the ones already there (PostgreSQL's one-pass strategy).
            let before = self.plan.unused.len();
            for o in 1..=usize::from(page::max_offset(p)) {
                if page::item_id(p, OffsetNumber(o as u16)).flags == LpFlags::Dead {
                    self.plan.unused.push(OffsetNumber(o as u16));
                }
            }
            let PrunePlan { dead, unused, .. } = &mut self.plan;
            unused.append(dead);
            unused.sort_unstable();
            lpdead_now_unused = (self.plan.unused.len() - before) as u64;
        }
        let do_prune = !self.plan.is_empty();
        let prune_writes_fpi = do_prune && env.wal.needs_image(page::lsn(p));
        if do_prune {
            // The record will carry the page's image (or follow one): the hints can go in.
            self.scan.write_pending_hints(p);
            apply_prune(p, &self.plan);
            if lpdead_now_unused > 0 {
                self.c.lpdead_item_pages += 1;
                self.c.lpdead_items += lpdead_now_unused;
            }
        } else if page::prune_xid(p) != self.plan.new_prune_xid {
            // Nothing removable yet: remember the new horizon need without dirtying for it.
            page::set_prune_xid(p, self.plan.new_prune_xid);
        }

        if !summarized {
            freeze::summarize(p, &self.scan, &cutoffs, env.xact, &mut self.summary);
        }
        let s = &self.summary;
        let facts = PageFacts { will_be_all_visible: s.all_visible, prune_writes_fpi, range };
        let decision = freeze::decide(s, ctx.policy, &facts);
        let tuples_frozen = freeze::freeze_plans(s, decision.mode, &mut self.freeze);
        if !self.freeze.is_empty() {
            self.scan.write_pending_hints(p);
            vwal::apply_planned_freeze(p, &self.freeze);
            if tuples_frozen > 0 {
                self.c.frozen_pages += 1;
                self.c.tuples_frozen += tuples_frozen;
            }
        }
        if let Some(x) = decision.oldest_left {
            self.c.note_xid(x);
        }
        self.c.new_live_tuples += s.live;
        self.c.recently_dead_tuples += s.recently_dead;
        if s.hastup {
            self.c.nonempty_pages = self.c.nonempty_pages.max(block.0 + 1);
        }
        let has_lpdead = !s.lpdead.is_empty();
        let all_visible = s.all_visible && !has_lpdead;
        let all_frozen = all_visible && decision.all_frozen;
        let (will_visible, will_frozen) = (s.all_visible, decision.all_frozen);

        // The map: set what the page now deserves, or repair a claim it does not.
        let bits = ctx.rel.vm.get_pinned(self.env.pool, block, &mut self.vm_pin)?;
        let flag = page::flags(p) & PD_ALL_VISIBLE != 0;
        let mut set = None;
        if all_visible {
            let want = if all_frozen { VmBits::VALID } else { VmBits::ALL_VISIBLE };
            if !bits.contains(want) || !flag {
                set = Some(want);
                self.c.note_vm(bits, all_frozen);
            }
        }
        if do_prune || !self.freeze.is_empty() || set.is_some() {
            // Only the flag changes (pending hints are dropped): log it without an image.
            let imageless = imageless_candidate && !do_prune && self.freeze.is_empty();
            let plan = std::mem::take(&mut self.plan);
            let r = self.log_page(ctx, buf, p, do_prune.then_some(&plan), set, imageless);
            self.plan = plan;
            r?;
        } else if self.scan.hints_changed {
            buf.hints_added(page::lsn(p), redo);
        }
        if !all_visible {
            repair_vm(ctx, &env, buf, p, bits, has_lpdead)?;
        }
        if has_lpdead {
            let lpdead = self.summary.lpdead.clone();
            return Ok(self.dead_page(ctx, block, lpdead, page::lsn(p), will_visible, will_frozen));
        }
        let cat = ctx.fsm_category(page::heap_free_space(p), all_visible);
        self.note_free(ctx, block, cat)?;
        Ok(None)
    }

    /// Counts a page's LP_DEAD items and packages them for the store.
    fn dead_page(
        &mut self,
        ctx: &Ctx<'_>,
        block: BlockNumber,
        offsets: Vec<u16>,
        lsn: Lsn,
        visible: bool,
        frozen: bool,
    ) -> Option<DeadPage> {
        if offsets.is_empty() {
            return None;
        }
        if !ctx.has_indexes {
            // Without the cleanup lock the one-pass strategy cannot free them: missed.
            self.c.missed_dead_tuples += offsets.len() as u64;
            return None;
        }
        self.c.lpdead_item_pages += 1;
        self.c.lpdead_items += offsets.len() as u64;
        Some(DeadPage { block: block.0, offsets, lsn, visible, frozen })
    }

    /// Logs phase I's change to the exclusively locked heap page `p` (already pruned and
    /// frozen as the record says) as one PRUNE_FREEZE record (see [`Self::log_with_map`]).
    fn log_page(
        &mut self,
        ctx: &Ctx<'_>,
        buf: &Buffer<'_>,
        p: &mut [u8],
        prune: Option<&PrunePlan>,
        set: Option<VmBits>,
        imageless: bool,
    ) -> Result<()> {
        vwal::encode_prune_freeze(&mut self.main, prune, &self.freeze, p, set.map(|b| (b.0, false)));
        self.log_with_map(ctx, buf, p, set, XLOG_HEAP2_PRUNE_FREEZE, imageless)
    }

    /// Logs a change to the exclusively locked heap page `p` as one record of kind `info`
    /// whose main data the caller put in `self.main` (encoded with the map bits `set`, as
    /// not initializing the map page). With `set`, first sets the map bits and
    /// `PD_ALL_VISIBLE`, and the record carries the map page as block 1; both pages get the
    /// record's LSN.
    ///
    /// `imageless` (a PRUNE_FREEZE record that only sets the map, on a page that matches its
    /// file): the heap page is named without an image and keeps its LSN
    /// ([`vwal::PF_IMAGELESS`], `Buffer::mark_dirty_imageless`).
    pub fn log_with_map(
        &mut self,
        ctx: &Ctx<'_>,
        buf: &Buffer<'_>,
        p: &mut [u8],
        set: Option<VmBits>,
        info: u8,
        imageless: bool,
    ) -> Result<()> {
        debug_assert!(!imageless || (set.is_some() && info == XLOG_HEAP2_PRUNE_FREEZE));
        if imageless {
            self.main[0] |= vwal::PF_IMAGELESS;
        }
        let env = self.env;
        let block = buf.block();
        let map = match set {
            Some(bits) => {
                page::set_flags(p, page::flags(p) | PD_ALL_VISIBLE);
                ctx.rel.vm.lock_and_set(env.pool, block, bits, &mut self.vm_pin)?
            }
            None => None,
        };
        if map.as_ref().is_some_and(|m| m.1) {
            self.main[0] |= vwal::PF_VM_INIT;
        }
        let heap_image = if imageless { None } else { Some(&*p) };
        let mut blocks = vec![BlockRef {
            keep_data: false,
            id: 0,
            tag: ctx.rel.tag(block),
            will_init: false,
            page: heap_image,
            data: vec![],
        }];
        match &map {
            Some((g, init)) => blocks.push(BlockRef {
                keep_data: false,
                id: 1,
                tag: ctx.rel.vm.tag_for(block),
                will_init: *init,
                page: Some(&g.0),
                data: vec![],
            }),
            // The bits were there already (only the page flag was missing): the record still
            // names the map page so that redo sets both.
            None if set.is_some() => blocks.push(BlockRef {
                keep_data: false,
                id: 1,
                tag: ctx.rel.vm.tag_for(block),
                will_init: false,
                page: None,
                data: vec![],
            }),
            None => {}
        }
        let rec = RecordBuilder {
            toplevel_xid: crate::types::Xid::INVALID,
            rmgr: Rmgr::Heap2,
            info,
            xid: Xid::INVALID,
            blocks,
            main_data: std::mem::take(&mut self.main),
        };
        let lsn = env.wal.insert(&rec);
        let RecordBuilder { blocks, main_data, .. } = rec;
        drop(blocks);
        self.main = main_data;
        let lsn = lsn?;
        if imageless {
            buf.mark_dirty_imageless(lsn);
        } else {
            page::set_lsn(p, lsn);
            buf.mark_dirty();
        }
        if let Some((mut g, _)) = map {
            page::set_lsn(&mut g.0, lsn);
            drop(g);
            if let Some(pin) = self.vm_pin.buffer() {
                pin.mark_dirty();
            }
        }
        Ok(())
    }

    /// `lazy_scan_noprune`: a page whose cleanup lock is taken. Returns its LP_DEAD offsets,
    /// or `None` when an aggressive vacuum must wait for the lock and freeze.
    fn scan_noprune(&mut self, ctx: &Ctx<'_>, block: BlockNumber, p: &[u8]) -> Result<Option<Vec<u16>>> {
        let mut lpdead = Vec::new();
        let mut oldest: Option<Xid> = None;
        // The later of the page's possible FreezeLimits: waiting is needed only for an XID
        // the page would have frozen.
        let freeze_limit = ctx.page_freezing(block, false).1.freeze_limit;
        let (mut live, mut recently_dead, mut missed, mut hastup) = (0u64, 0u64, 0u64, false);
        for o in 1..=page::max_offset(p) {
            let off = OffsetNumber(o);
            match page::item_id(p, off).flags {
                LpFlags::Unused => continue,
                LpFlags::Redirect => {
                    hastup = true;
                    continue;
                }
                LpFlags::Dead => {
                    lpdead.push(o);
                    continue;
                }
                LpFlags::Normal => {}
            }
            hastup = true;
            let Some(h) = page::try_item(p, off).and_then(TupleHeader::parse) else { continue };
            if freeze::oldest_unfrozen(&h, &mut oldest, freeze_limit) && ctx.aggressive {
                return Ok(None);
            }
            match satisfies_vacuum(&h, ctx.cutoffs.oldest_xmin, ctx.db.xact)? {
                VacuumStatus::Dead => missed += 1,
                VacuumStatus::RecentlyDead => recently_dead += 1,
                VacuumStatus::Live | VacuumStatus::DeleteInProgress => live += 1,
                VacuumStatus::InsertInProgress => {}
            }
        }
        if let Some(x) = oldest {
            self.c.note_xid(x);
        }
        self.c.new_live_tuples += live;
        self.c.recently_dead_tuples += recently_dead;
        if missed > 0 {
            self.c.missed_dead_tuples += missed;
            self.c.missed_dead_pages += 1;
        }
        if hastup {
            self.c.nonempty_pages = self.c.nonempty_pages.max(block.0 + 1);
        }
        if lpdead.is_empty() {
            self.note_free(ctx, block, fsm::avail_to_category(page::heap_free_space(p)))?;
        }
        Ok(Some(lpdead))
    }

    /// Phase I over the pages `[start, end)`, skipping runs of pages the visibility map lets
    /// it skip (the page `rel_pages - 1` is always read); each page with LP_DEAD items is
    /// handed to `dead`.
    pub fn scan_range(
        &mut self,
        ctx: &Ctx<'_>,
        skip: Option<SkipRule>,
        start: u32,
        end: u32,
        rel_pages: u32,
        dead: &mut dyn FnMut(&mut Self, DeadPage) -> Result<()>,
    ) -> Result<()> {
        let mut blk = start;
        while blk < end {
            let mut stop = blk + 1;
            if let Some(rule) = skip {
                let (run, allvis_only) = self.skippable_run(ctx, rule, blk, end, rel_pages)?;
                if run >= SKIP_PAGES_THRESHOLD {
                    self.c.skipped_allvis |= allvis_only;
                    blk += run;
                    continue;
                }
                // A short run is read, with the unskippable page after it.
                stop = blk + run + 1;
            }
            while blk < stop.min(end) {
                self.cost.point()?;
                if ctx.progress.autovacuum.load(Ordering::Relaxed) && ctx.db.shutdown.load(Ordering::Acquire) {
                    return Err(crate::error::Error::invalid(
                        "canceling autovacuum task: the database is shutting down",
                    ));
                }
                if let Some(d) = self.scan_page(ctx, BlockNumber(blk))? {
                    dead(self, d)?;
                }
                self.c.scanned_pages += 1;
                ctx.progress.heap_blks_scanned.fetch_add(1, Ordering::Relaxed);
                blk += 1;
            }
        }
        Ok(())
    }

    /// The length of the run of skippable pages starting at `blk` and ending before `end`
    /// (the last page of the table is never skippable), and whether any of them is
    /// all-visible but not all-frozen.
    fn skippable_run(
        &mut self,
        ctx: &Ctx<'_>,
        rule: SkipRule,
        blk: u32,
        end: u32,
        rel_pages: u32,
    ) -> Result<(u32, bool)> {
        let mut n = 0;
        let mut allvis_only = false;
        let mut b = blk;
        while b < end && b + 1 < rel_pages {
            let bits = ctx.rel.vm.get_pinned(self.env.pool, BlockNumber(b), &mut self.vm_pin)?;
            let skippable = if rule == SkipRule::AllFrozen { bits.all_frozen() } else { bits.all_visible() };
            if !skippable {
                break;
            }
            allvis_only |= !bits.all_frozen();
            n += 1;
            b += 1;
        }
        Ok((n, allvis_only))
    }

    /// This thread's buffer usage, WAL and CPU since `since` (for parallel workers' shares).
    pub fn usage_since(since: &Usage) -> Usage {
        let (u, s) = super::report::thread_cpu();
        let b = buffer::my_usage().since(since.buffers);
        let w = crate::wal::my_wal_usage();
        Usage {
            buffers: b,
            wal: crate::wal::WalStats {
                records: w.records - since.wal.records,
                fpi: w.fpi - since.wal.fpi,
                bytes: w.bytes - since.wal.bytes,
            },
            wal_buffers_full: crate::wal::my_wal_buffers_full() - since.wal_buffers_full,
            user_cpu: u.saturating_sub(since.user_cpu),
            system_cpu: s.saturating_sub(since.system_cpu),
        }
    }
}

/// Which pages the visibility map lets phase I skip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SkipRule {
    AllVisible,
    /// An aggressive vacuum skips only all-frozen pages.
    AllFrozen,
}

/// Runs of all-visible pages shorter than this are read anyway (`SKIP_PAGES_THRESHOLD`).
pub(super) const SKIP_PAGES_THRESHOLD: u32 = 32;

/// A thread's resource usage: buffers, WAL, CPU (a point in time, or a difference).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Usage {
    pub buffers: buffer::BufferUsage,
    pub wal: crate::wal::WalStats,
    /// Times the thread found the WAL buffers full and wrote them out itself.
    pub wal_buffers_full: u64,
    pub user_cpu: Duration,
    pub system_cpu: Duration,
}

impl Usage {
    /// This thread's usage so far.
    pub fn now() -> Usage {
        let (u, s) = super::report::thread_cpu();
        Usage {
            buffers: buffer::my_usage(),
            wal: crate::wal::my_wal_usage(),
            wal_buffers_full: crate::wal::my_wal_buffers_full(),
            user_cpu: u,
            system_cpu: s,
        }
    }
}

/// The map (or the page flag) claims more than the page holds: repair it, as PostgreSQL does
/// with a warning. `bits` are the page's bits as read before.
pub(super) fn repair_vm(
    ctx: &Ctx<'_>,
    env: &HeapEnv<'_>,
    buf: &Buffer<'_>,
    p: &mut [u8],
    bits: VmBits,
    has_lpdead: bool,
) -> Result<()> {
    let flag = page::flags(p) & PD_ALL_VISIBLE != 0;
    if (bits.all_visible() && !flag) || (flag && has_lpdead) || (bits.all_visible() && has_lpdead) {
        page::clear_flags(p, PD_ALL_VISIBLE);
        buf.mark_dirty();
        ctx.rel.vm.clear(env.maps(), buf.block(), VmBits::VALID)?;
    }
    Ok(())
}
