//! What freezing does to one page, under each policy (DESIGN.md §5, seed 000).
//!
//! [`summarize`] walks the tuples a page holds after pruning, with the statuses the prune
//! pass gave them ([`crate::heap::prune::PageScan`]), and works out per tuple which of its
//! XIDs could be frozen (xmin marked frozen, an xmax that no longer matters cleared) and
//! which of those *must* be (they precede FreezeLimit), and for the page the oldest XID each
//! choice would leave unfrozen. [`decide`] then applies the policy:
//!
//! | policy  | freezes                                                                      |
//! |---------|------------------------------------------------------------------------------|
//! | `lazy`  | tuple by tuple, only the XIDs older than FreezeLimit (PostgreSQL 14)          |
//! | `pg16`  | the whole page when some XID is older than FreezeLimit, or when pruning       |
//! |         | writes a full-page image anyway and freezing makes the page all-frozen       |
//! | `eager` | the whole page when it is about to be set all-visible (so it becomes          |
//! |         | all-frozen too), or when some XID is older than FreezeLimit                  |
//!
//! "The whole page" means every tuple whose XIDs can be frozen at all: xmin committed before
//! OldestXmin, xmax aborted or a finished locker. The oldest XID that stays unfrozen feeds the
//! relation's new relfrozenxid (PostgreSQL 16's `NewRelfrozenXid` tracking), so even a
//! non-aggressive VACUUM advances relfrozenxid as far as the XIDs it leaves behind allow.
//! [`freeze_plans`] turns the decision into the freeze part of the PRUNE_FREEZE record
//! ([`super::wal`]), grouped by the way each tuple changes (at most three ways).
//!
//! Hot path (every page of phase I): one walk of the line pointers, no allocation, and no
//! question to the CLOG, since the prune pass already classified every tuple.

use super::wal::{FreezePlan, TupleFreeze, FREEZE_CLEAR_XMAX};
use crate::config::FreezePolicy;
use crate::error::Result;
use crate::heap::prune::{lp, PageScan};
use crate::heap::tuple::{
    HEAP_HOT_UPDATED, HEAP_KEYS_UPDATED, HEAP_XMAX_COMMITTED, HEAP_XMAX_INVALID, HEAP_XMAX_LOCK_ONLY, HEAP_XMIN_FROZEN,
};
use crate::heap::visibility::VacuumStatus;
use crate::page::{self, LpFlags, MAX_HEAP_TUPLES_PER_PAGE};
use crate::types::{OffsetNumber, Xid};
use crate::xact::TransactionManager;

/// The cutoffs one VACUUM works with (PostgreSQL's `VacuumCutoffs`).
#[derive(Clone, Copy, Debug)]
pub struct Cutoffs {
    /// Tuples deleted before it are dead to everyone; xmins before it are visible to all.
    pub oldest_xmin: Xid,
    /// XIDs before it must be frozen (`OldestXmin - vacuum_freeze_min_age`).
    pub freeze_limit: Xid,
}

/// Per-tuple bits of [`PageSummary`]: xmin can / must be frozen, xmax can / must be cleared.
const XMIN_CAN: u8 = 0x01;
const XMIN_MUST: u8 = 0x02;
const XMAX_CAN: u8 = 0x04;
const XMAX_MUST: u8 = 0x08;

/// What [`summarize`] learned about a (pruned) page.
pub struct PageSummary {
    /// Live tuples (including ones being deleted), as VACUUM counts them.
    pub live: u64,
    /// Deleted, but some snapshot may still see them.
    pub recently_dead: u64,
    /// Every remaining tuple is visible to every snapshot (LP_DEAD items not considered).
    pub all_visible: bool,
    /// LP_DEAD line pointers on the page.
    pub lpdead: Vec<u16>,
    /// The page has NORMAL or REDIRECT items (it cannot be truncated away).
    pub hastup: bool,
    /// Some XID on the page precedes FreezeLimit.
    pub must_freeze: bool,
    /// Oldest unfrozen XID left if nothing is frozen / if everything freezable is / if only
    /// what must be is.
    left_none: Option<Xid>,
    left_full: Option<Xid>,
    left_required: Option<Xid>,
    /// Per offset: the `XMIN_*` / `XMAX_*` bits (0 for anything but a NORMAL tuple).
    bits: [u8; MAX_HEAP_TUPLES_PER_PAGE + 1],
    max: usize,
}

impl Default for PageSummary {
    fn default() -> Self {
        PageSummary {
            live: 0,
            recently_dead: 0,
            all_visible: true,
            lpdead: Vec::new(),
            hastup: false,
            must_freeze: false,
            left_none: None,
            left_full: None,
            left_required: None,
            bits: [0; MAX_HEAP_TUPLES_PER_PAGE + 1],
            max: 0,
        }
    }
}

impl PageSummary {
    /// No tuple on the page has an unfrozen XID (as it stands, without freezing anything).
    pub fn is_fully_frozen(&self) -> bool {
        self.left_none.is_none()
    }

    /// Freezing everything freezable would leave no unfrozen XID.
    pub fn can_freeze_all(&self) -> bool {
        self.left_full.is_none()
    }
}

/// How much of a page [`decide`] freezes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreezeMode {
    Nothing,
    /// Only the XIDs that precede FreezeLimit (`lazy`).
    Required,
    /// Everything freezable.
    WholePage,
}

/// The outcome of [`decide`].
#[derive(Clone, Copy, Debug)]
pub struct FreezeDecision {
    pub mode: FreezeMode,
    /// No unfrozen XID remains on the page.
    pub all_frozen: bool,
    /// The oldest unfrozen XID left on the page.
    pub oldest_left: Option<Xid>,
}

fn older(a: Option<Xid>, b: Xid) -> Option<Xid> {
    match a {
        Some(x) if x.precedes_or_equals(b) => Some(x),
        _ => Some(b),
    }
}

/// Walks the line pointers of `p` (pruned, if pruning applied) using the statuses `scan`
/// gave its tuples before pruning (offsets do not move), and fills `out`.
pub fn summarize(
    p: &[u8],
    scan: &PageScan,
    cutoffs: &Cutoffs,
    xact: &TransactionManager,
    out: &mut PageSummary,
) -> Result<()> {
    let max = usize::from(page::max_offset(p)).min(MAX_HEAP_TUPLES_PER_PAGE);
    out.live = 0;
    out.recently_dead = 0;
    out.all_visible = true;
    out.lpdead.clear();
    out.hastup = false;
    out.must_freeze = false;
    out.left_none = None;
    out.left_full = None;
    out.left_required = None;
    out.max = max;
    for o in 1..=max {
        out.bits[o] = 0;
        match lp(p, o).flags {
            LpFlags::Unused => continue,
            LpFlags::Redirect => {
                out.hastup = true;
                continue;
            }
            LpFlags::Dead => {
                out.lpdead.push(o as u16);
                continue;
            }
            LpFlags::Normal => out.hastup = true,
        }
        let Some((status, f)) = scan.tuple(o) else {
            // A tuple the prune pass could not read: nothing can be said of it.
            out.all_visible = false;
            out.left_full = older(out.left_full, cutoffs.oldest_xmin);
            continue;
        };
        let m = f.infomask;
        let xmin_frozen = m & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN || !f.xmin.is_normal();
        match status {
            VacuumStatus::Live => {
                out.live += 1;
                if !xmin_frozen && !f.xmin.precedes(cutoffs.oldest_xmin) {
                    out.all_visible = false;
                }
            }
            VacuumStatus::RecentlyDead => {
                out.recently_dead += 1;
                out.all_visible = false;
            }
            VacuumStatus::DeleteInProgress => {
                out.live += 1;
                out.all_visible = false;
            }
            VacuumStatus::InsertInProgress | VacuumStatus::Dead => out.all_visible = false,
        }
        let mut bits = 0u8;
        // xmin: freezable once its inserter committed before every running snapshot began.
        // The prune pass found the inserter committed exactly when the status is neither
        // INSERT_IN_PROGRESS nor DEAD (a dead tuple left here has a committed deleter only if
        // a snapshot could still see it, which makes it RECENTLY_DEAD instead).
        if !xmin_frozen {
            out.left_none = older(out.left_none, f.xmin);
            let committed = !matches!(status, VacuumStatus::InsertInProgress | VacuumStatus::Dead);
            if committed && f.xmin.precedes(cutoffs.oldest_xmin) {
                bits |= XMIN_CAN;
                if f.xmin.precedes(cutoffs.freeze_limit) {
                    bits |= XMIN_MUST;
                } else {
                    out.left_required = older(out.left_required, f.xmin);
                }
            } else {
                out.left_full = older(out.left_full, f.xmin);
                out.left_required = older(out.left_required, f.xmin);
            }
        }
        // xmax: it can be cleared when it no longer means anything (an aborted deleter, whose
        // hint the prune pass set, or a locker that has finished); a committed or running
        // deleter stays.
        if f.xmax.is_normal() {
            out.left_none = older(out.left_none, f.xmax);
            // (A deleter without a hint was running or committed when the prune pass looked:
            // it gave an aborted one its hint.)
            let clearable = m & HEAP_XMAX_INVALID != 0 || (m & HEAP_XMAX_LOCK_ONLY != 0 && !xact.is_running(f.xmax));
            if clearable {
                bits |= XMAX_CAN;
                if f.xmax.precedes(cutoffs.freeze_limit) {
                    bits |= XMAX_MUST;
                } else {
                    out.left_required = older(out.left_required, f.xmax);
                }
            } else {
                out.left_full = older(out.left_full, f.xmax);
                out.left_required = older(out.left_required, f.xmax);
            }
        }
        out.must_freeze |= bits & (XMIN_MUST | XMAX_MUST) != 0;
        out.bits[o] = bits;
    }
    Ok(())
}

/// Decides what to freeze on a page. `will_be_all_visible`: the page is about to be set
/// all-visible (now, or in phase III once its LP_DEAD items are gone); `prune_writes_fpi`:
/// the record that prunes the page carries a full-page image of it anyway.
pub fn decide(
    s: &PageSummary,
    policy: FreezePolicy,
    will_be_all_visible: bool,
    prune_writes_fpi: bool,
) -> FreezeDecision {
    let whole_page = match policy {
        FreezePolicy::Lazy => false,
        FreezePolicy::Pg16 => s.must_freeze || (prune_writes_fpi && will_be_all_visible && s.can_freeze_all()),
        FreezePolicy::Eager => s.must_freeze || will_be_all_visible,
    };
    let (mode, oldest_left) = match (policy, whole_page) {
        (_, true) => (FreezeMode::WholePage, s.left_full),
        (FreezePolicy::Lazy, false) => (FreezeMode::Required, s.left_required),
        (_, false) => (FreezeMode::Nothing, s.left_none),
    };
    FreezeDecision { mode, all_frozen: oldest_left.is_none(), oldest_left }
}

/// The header change that freezes a tuple's xmin / clears its xmax.
const FREEZE_XMIN: TupleFreeze = TupleFreeze { set: HEAP_XMIN_FROZEN, clear: 0, clear2: 0, flags: 0 };
const CLEAR_XMAX: TupleFreeze = TupleFreeze {
    set: HEAP_XMAX_INVALID,
    clear: HEAP_XMAX_COMMITTED | HEAP_XMAX_LOCK_ONLY,
    clear2: HEAP_HOT_UPDATED | HEAP_KEYS_UPDATED,
    flags: FREEZE_CLEAR_XMAX,
};

/// Fills `plans` (reused: emptied first) with what `mode` changes on the summarized page,
/// one plan per way a tuple changes, offsets ascending; returns how many tuples get their
/// xmin frozen.
pub fn freeze_plans(s: &PageSummary, mode: FreezeMode, plans: &mut Vec<FreezePlan>) -> u64 {
    plans.clear();
    let (xmin_bit, xmax_bit) = match mode {
        FreezeMode::Nothing => return 0,
        FreezeMode::Required => (XMIN_MUST, XMAX_MUST),
        FreezeMode::WholePage => (XMIN_CAN, XMAX_CAN),
    };
    // Slot 0: xmin only, 1: xmax only, 2: both.
    let mut slot_of = [usize::MAX; 3];
    let mut frozen = 0u64;
    for o in 1..=s.max {
        let b = s.bits[o];
        let kind = match (b & xmin_bit != 0, b & xmax_bit != 0) {
            (false, false) => continue,
            (true, false) => 0,
            (false, true) => 1,
            (true, true) => 2,
        };
        if kind != 1 {
            frozen += 1;
        }
        if slot_of[kind] == usize::MAX {
            let f = match kind {
                0 => FREEZE_XMIN,
                1 => CLEAR_XMAX,
                _ => TupleFreeze {
                    set: FREEZE_XMIN.set | CLEAR_XMAX.set,
                    clear: CLEAR_XMAX.clear,
                    clear2: CLEAR_XMAX.clear2,
                    flags: CLEAR_XMAX.flags,
                },
            };
            slot_of[kind] = plans.len();
            plans.push(FreezePlan {
                set: f.set,
                clear: f.clear,
                clear2: f.clear2,
                flags: f.flags,
                offsets: Vec::new(),
            });
        }
        plans[slot_of[kind]].offsets.push(OffsetNumber(o as u16));
    }
    frozen
}

/// The oldest unfrozen XID on a page, and whether one precedes FreezeLimit: what the no-prune
/// path (no cleanup lock) needs without changing anything.
pub fn oldest_unfrozen(h: &crate::heap::tuple::TupleHeader<'_>, acc: &mut Option<Xid>, freeze_limit: Xid) -> bool {
    let mut old = false;
    let m = h.infomask();
    if m & HEAP_XMIN_FROZEN != HEAP_XMIN_FROZEN && h.xmin().is_normal() {
        *acc = older(*acc, h.xmin());
        old |= h.xmin().precedes(freeze_limit);
    }
    if h.xmax().is_normal() {
        *acc = older(*acc, h.xmax());
        old |= h.xmax().precedes(freeze_limit);
    }
    old
}
