//! What freezing does to one page, under each policy (DESIGN.md §5, seed 000).
//!
//! [`analyze_page`] looks at every tuple left on a pruned page and works out, per tuple, the
//! header change that would freeze it ([`TupleFreeze`]: xmin marked frozen, an xmax that no
//! longer matters cleared) and which unfrozen XIDs would remain either way. [`decide`] then
//! applies the policy:
//!
//! | policy  | freezes                                                                      |
//! |---------|------------------------------------------------------------------------------|
//! | `lazy`  | tuple by tuple, only the XIDs older than FreezeLimit (PostgreSQL 14)          |
//! | `pg16`  | the whole page when some XID is older than FreezeLimit, or when pruning just  |
//! |         | wrote a full-page image and freezing makes the page all-frozen               |
//! | `eager` | the whole page when it is about to be set all-visible (so it becomes          |
//! |         | all-frozen too), or when some XID is older than FreezeLimit                  |
//!
//! "The whole page" means every tuple whose XIDs can be frozen at all: xmin committed before
//! OldestXmin, xmax aborted or a finished locker. The oldest XID that stays unfrozen feeds the
//! relation's new relfrozenxid (PostgreSQL 16's `NewRelfrozenXid` tracking), so even a
//! non-aggressive VACUUM advances relfrozenxid as far as the XIDs it leaves behind allow.

use super::wal::TupleFreeze;
use crate::config::FreezePolicy;
use crate::error::Result;
use crate::heap::tuple::{
    TupleHeader, HEAP_HOT_UPDATED, HEAP_KEYS_UPDATED, HEAP_XMAX_COMMITTED, HEAP_XMAX_INVALID, HEAP_XMAX_LOCK_ONLY,
    HEAP_XMIN_COMMITTED, HEAP_XMIN_FROZEN,
};
use crate::heap::visibility::{satisfies_vacuum, VacuumStatus};
use crate::page::{self, LpFlags};
use crate::types::{OffsetNumber, Xid};
use crate::xact::{TransactionManager, XidStatus};

/// The cutoffs one VACUUM works with (PostgreSQL's `VacuumCutoffs`).
#[derive(Clone, Copy, Debug)]
pub struct Cutoffs {
    /// Tuples deleted before it are dead to everyone; xmins before it are visible to all.
    pub oldest_xmin: Xid,
    /// XIDs before it must be frozen (`OldestXmin - vacuum_freeze_min_age`).
    pub freeze_limit: Xid,
}

/// One tuple as freezing sees it.
#[derive(Clone, Copy, Debug)]
struct TupleInfo {
    off: OffsetNumber,
    /// The change that freezes everything freezable in this tuple.
    full: TupleFreeze,
    /// The part of `full` whose XIDs precede FreezeLimit (what `lazy` applies).
    required: TupleFreeze,
    /// Oldest XID left if `full` is applied / if nothing is applied / if `required` is.
    left_full: Option<Xid>,
    left_none: Option<Xid>,
    left_required: Option<Xid>,
}

/// What [`analyze_page`] learned about a page.
#[derive(Debug, Default)]
pub struct PageScan {
    tuples: Vec<TupleInfo>,
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
    /// Freezing everything freezable would leave no unfrozen XID.
    pub can_freeze_all: bool,
}

impl PageScan {
    /// No tuple on the page has an unfrozen XID (as it stands, without freezing anything).
    pub fn is_fully_frozen(&self) -> bool {
        self.tuples.iter().all(|t| t.left_none.is_none())
    }
}

/// The outcome of [`decide`]: the header changes to make and what the page is left with.
#[derive(Debug, Default)]
pub struct FreezeDecision {
    pub changes: Vec<(OffsetNumber, TupleFreeze)>,
    /// Tuples whose xmin this freezes.
    pub tuples_frozen: u64,
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

fn min_opt(a: Option<Xid>, b: Option<Xid>) -> Option<Xid> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if x.precedes(y) { x } else { y }),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Examines every line pointer of a (pruned) heap page.
pub fn analyze_page(p: &[u8], cutoffs: &Cutoffs, xact: &TransactionManager) -> Result<PageScan> {
    let n = usize::from(page::max_offset(p));
    let mut s =
        PageScan { all_visible: true, can_freeze_all: true, tuples: Vec::with_capacity(n), ..Default::default() };
    for o in 1..=page::max_offset(p) {
        let off = OffsetNumber(o);
        let lp = page::item_id(p, off);
        match lp.flags {
            LpFlags::Unused => continue,
            LpFlags::Redirect => {
                s.hastup = true;
                continue;
            }
            LpFlags::Dead => {
                s.lpdead.push(o);
                continue;
            }
            LpFlags::Normal => {}
        }
        s.hastup = true;
        let Some(h) = page::try_item(p, off).and_then(TupleHeader::parse) else {
            s.all_visible = false;
            s.can_freeze_all = false;
            continue;
        };
        let status = satisfies_vacuum(&h, cutoffs.oldest_xmin, xact)?;
        match status {
            VacuumStatus::Live => {
                s.live += 1;
                let frozen = h.infomask() & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN || !h.xmin().is_normal();
                if !frozen && !h.xmin().precedes(cutoffs.oldest_xmin) {
                    s.all_visible = false;
                }
            }
            VacuumStatus::RecentlyDead => {
                s.recently_dead += 1;
                s.all_visible = false;
            }
            VacuumStatus::DeleteInProgress => {
                s.live += 1;
                s.all_visible = false;
            }
            VacuumStatus::InsertInProgress | VacuumStatus::Dead => s.all_visible = false,
        }
        let info = tuple_info(off, &h, status, cutoffs, xact)?;
        if info.left_full.is_some() {
            s.can_freeze_all = false;
        }
        if !info.required.is_empty() {
            s.must_freeze = true;
        }
        s.tuples.push(info);
    }
    Ok(s)
}

fn tuple_info(
    off: OffsetNumber,
    h: &TupleHeader<'_>,
    status: VacuumStatus,
    cutoffs: &Cutoffs,
    xact: &TransactionManager,
) -> Result<TupleInfo> {
    let m = h.infomask();
    let mut full = TupleFreeze::default();
    let mut required = TupleFreeze::default();
    let (mut left_full, mut left_none, mut left_required) = (None, None, None);

    // xmin: freezable once its inserter committed before every running snapshot began.
    let xmin = h.xmin();
    let xmin_frozen = m & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN || !xmin.is_normal();
    if !xmin_frozen {
        left_none = older(left_none, xmin);
        let committed = !matches!(status, VacuumStatus::InsertInProgress | VacuumStatus::Dead)
            && (m & HEAP_XMIN_COMMITTED != 0 || xact.status(xmin)? == XidStatus::Committed);
        if committed && xmin.precedes(cutoffs.oldest_xmin) {
            full.set |= HEAP_XMIN_FROZEN;
            if xmin.precedes(cutoffs.freeze_limit) {
                required.set |= HEAP_XMIN_FROZEN;
            } else {
                left_required = older(left_required, xmin);
            }
        } else {
            left_full = older(left_full, xmin);
            left_required = older(left_required, xmin);
        }
    }

    // xmax: it can be cleared when it no longer means anything (an aborted deleter, or a
    // locker that has finished); a committed or running deleter stays.
    let xmax = h.xmax();
    if xmax.is_normal() {
        left_none = older(left_none, xmax);
        let clearable = if m & HEAP_XMAX_INVALID != 0 {
            true
        } else if m & HEAP_XMAX_LOCK_ONLY != 0 {
            !xact.is_running(xmax)
        } else if m & HEAP_XMAX_COMMITTED != 0 || xact.is_running(xmax) {
            false
        } else {
            xact.status(xmax)? != XidStatus::Committed
        };
        if clearable {
            let clear = TupleFreeze {
                set: HEAP_XMAX_INVALID,
                clear: HEAP_XMAX_COMMITTED | HEAP_XMAX_LOCK_ONLY,
                clear2: HEAP_HOT_UPDATED | HEAP_KEYS_UPDATED,
                flags: super::wal::FREEZE_CLEAR_XMAX,
            };
            merge(&mut full, clear);
            if xmax.precedes(cutoffs.freeze_limit) {
                merge(&mut required, clear);
            } else {
                left_required = older(left_required, xmax);
            }
        } else {
            left_full = older(left_full, xmax);
            left_required = older(left_required, xmax);
        }
    }
    Ok(TupleInfo { off, full, required, left_full, left_none, left_required })
}

fn merge(a: &mut TupleFreeze, b: TupleFreeze) {
    a.set |= b.set;
    a.clear |= b.clear;
    a.clear2 |= b.clear2;
    a.flags |= b.flags;
}

/// Decides what to freeze on a page. `will_be_all_visible`: the page is about to be set
/// all-visible (now, or in phase III once its LP_DEAD items are gone); `pruning_wrote_fpi`:
/// the prune record just logged a full-page image of it.
pub fn decide(
    s: &PageScan,
    policy: FreezePolicy,
    will_be_all_visible: bool,
    pruning_wrote_fpi: bool,
) -> FreezeDecision {
    let whole_page = match policy {
        FreezePolicy::Lazy => false,
        FreezePolicy::Pg16 => s.must_freeze || (pruning_wrote_fpi && will_be_all_visible && s.can_freeze_all),
        FreezePolicy::Eager => s.must_freeze || will_be_all_visible,
    };
    let mut d = FreezeDecision { changes: Vec::with_capacity(s.tuples.len()), ..Default::default() };
    for t in &s.tuples {
        let (change, left) = match (policy, whole_page) {
            (_, true) => (t.full, t.left_full),
            (FreezePolicy::Lazy, false) => (t.required, t.left_required),
            (_, false) => (TupleFreeze::default(), t.left_none),
        };
        if !change.is_empty() {
            if change.set & HEAP_XMIN_FROZEN != 0 {
                d.tuples_frozen += 1;
            }
            d.changes.push((t.off, change));
        }
        d.oldest_left = min_opt(d.oldest_left, left);
    }
    d.all_frozen = d.oldest_left.is_none();
    d
}

/// The oldest unfrozen XID on a page, and whether one precedes FreezeLimit: what the no-prune
/// path (no cleanup lock) needs without changing anything.
pub fn oldest_unfrozen(h: &TupleHeader<'_>, acc: &mut Option<Xid>, freeze_limit: Xid) -> bool {
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
