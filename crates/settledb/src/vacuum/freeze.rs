//! What freezing does to one page, under each policy (DESIGN.md §5, seed 000).
//!
//! [`summarize`] walks the tuples a page holds after pruning, with the statuses the prune
//! pass gave them ([`crate::heap::prune::PageScan`]), and works out per tuple which of its
//! XIDs could be frozen (xmin marked frozen, an xmax that no longer matters cleared) and
//! which of those *must* be (they precede FreezeLimit), and for the page the oldest XID each
//! choice would leave unfrozen. [`decide`] then applies the policy:
//!
//! | policy     | freezes                                                                 |
//! |------------|-------------------------------------------------------------------------|
//! | `lazy`     | tuple by tuple, only the XIDs older than FreezeLimit (PostgreSQL 14)    |
//! | `pg16`     | the whole page when some XID is older than FreezeLimit, or when pruning |
//! |            | writes a full-page image anyway and freezing makes the page all-frozen  |
//! | `eager`    | the whole page when it is about to be set all-visible (so it becomes    |
//! |            | all-frozen too), or when some XID is older than FreezeLimit             |
//! | `adaptive` | as `eager` in a range of pages where freezing sticks; as `pg16`'s cheap |
//! |            | freeze (the image is written anyway) where it fails up to five times as |
//! |            | often; elsewhere as `lazy`, by a later FreezeLimit                      |
//!
//! # `adaptive`
//!
//! The ranges and how they are judged are [`super::adaptive`]'s: per table and per range of
//! 32 pages, the fraction of pages left all-visible that a modification clears again before
//! the next VACUUM, against `vacuum_max_eager_freeze_failure_rate` ([`Freezing`]). Where
//! freezing does not stick the page is frozen tuple by tuple as `lazy` does, so that it is
//! not made all-frozen only to be modified again, and:
//!
//! * The VACUUM reads every page that is not all-frozen (it skips what an aggressive one
//!   skips), so that the all-visible pages it leaves unfrozen never keep relfrozenxid from
//!   advancing: each VACUUM sets relfrozenxid to the oldest XID left on any page, as `eager`
//!   does on an append-only table. Reading costs no WAL; a page stays unfrozen only while it
//!   has nothing old enough to freeze, so the pages read again are bounded.
//! * A page found all-visible (untouched since a VACUUM set it so) has its XIDs frozen only
//!   when they are older than `vacuum_freeze_table_age` minus 1.25 times the XIDs between the
//!   table's last two VACUUMs, counted back from the next XID as `vacuum_freeze_table_age`
//!   is (never earlier than FreezeLimit; the deferred FreezeLimit,
//!   [`super::adaptive::deferred_freeze_age`]):
//!   late enough that a page about to be modified anyway is rarely frozen first (freezing an
//!   untouched page costs its full-page image), early enough that the next VACUUM finds
//!   relfrozenxid younger than `vacuum_freeze_table_age` and need not be aggressive (nor,
//!   later, anti-wraparound).
//! * A page found modified has its XIDs frozen only when they are older than
//!   `vacuum_freeze_table_age` minus twice that interval
//!   ([`super::adaptive::deferred_freeze_age_modified`]): its rows are the ones about to
//!   change again (in a queue such as TPC-C's new orders, the oldest undelivered rows pass
//!   FreezeLimit shortly before they are deleted), and the wider margin keeps relfrozenxid,
//!   which now sits near that age after most VACUUMs, clear of `vacuum_freeze_table_age`.
//! * A VACUUM made aggressive by `vacuum_freeze_table_age` (a page busy at the last VACUUM,
//!   or an interval longer than the margins, left an XID that old) freezes by the same
//!   deferred limits: what makes it aggressive is that it waits for every page's cleanup
//!   lock, so nothing holds relfrozenxid back again. With FreezeLimit it froze the whole
//!   table at once (in `settle tpcc`, all 4,400 pages of the stock table in one
//!   autovacuum: the freezing cliff seed 000 is about). An anti-wraparound VACUUM, or one
//!   with DISABLE_PAGE_SKIPPING, uses FreezeLimit.
//! * A page without tuples is set all-visible but not all-frozen: it is where the next
//!   inserts go (the free space map offers it), and an all-frozen bit there would only be
//!   cleared again.
//!
//! Two other rules were measured on TPC-C and rejected (`settle tpcc`, 300,000 transactions,
//! one run each): freezing a page on its second sighting (still all-visible one VACUUM after
//! it was set so) froze stock, customer and new-order pages that a skewed random update
//! reached later (9%, 13% and 83% of them modified again, against lazy's 3%, 5% and 2%);
//! `pg16`'s cheap freeze in every range, failing or not, did the same to 32% of customer,
//! 26% of order and 71% of new-order pages, without a WAL saving beyond the runs' noise.
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

use super::adaptive::Freezing;
use super::wal::{FreezePlan, TupleFreeze, FREEZE_CLEAR_XMAX};
use crate::config::FreezePolicy;
use crate::heap::prune::{lp, PageScan};
use crate::heap::tuple::{
    self, HEAP_HOT_UPDATED, HEAP_KEYS_UPDATED, HEAP_ONLY_TUPLE, HEAP_XMAX_INVALID, HEAP_XMAX_LOCK_ONLY,
    HEAP_XMIN_COMMITTED, HEAP_XMIN_FROZEN,
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
#[derive(Debug, PartialEq)]
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
    /// what must be is, as its age before OldestXmin ([`NONE`]: no XID left).
    left_none: i64,
    left_full: i64,
    left_required: i64,
    /// NORMAL tuples on the page.
    normal: usize,
    /// Per offset: the `XMIN_*` / `XMAX_*` bits (0 for anything but a NORMAL tuple).
    bits: [u8; MAX_HEAP_TUPLES_PER_PAGE + 1],
    max: usize,
    oldest_xmin: Xid,
}

/// "No XID" among ages (every real age is an `i32`).
const NONE: i64 = i64::MIN;

impl Default for PageSummary {
    fn default() -> Self {
        PageSummary {
            live: 0,
            recently_dead: 0,
            all_visible: true,
            lpdead: Vec::new(),
            hastup: false,
            must_freeze: false,
            left_none: NONE,
            left_full: NONE,
            left_required: NONE,
            normal: 0,
            bits: [0; MAX_HEAP_TUPLES_PER_PAGE + 1],
            max: 0,
            oldest_xmin: Xid::INVALID,
        }
    }
}

impl PageSummary {
    /// No tuple on the page has an unfrozen XID (as it stands, without freezing anything).
    pub fn is_fully_frozen(&self) -> bool {
        self.left_none == NONE
    }

    /// The page holds NORMAL tuples.
    pub fn has_tuples(&self) -> bool {
        self.normal > 0
    }

    /// Freezing everything freezable would leave no unfrozen XID.
    pub fn can_freeze_all(&self) -> bool {
        self.left_full == NONE
    }

    /// The XID an age stands for.
    fn xid_of(&self, age: i64) -> Option<Xid> {
        (age != NONE).then(|| Xid(self.oldest_xmin.0.wrapping_sub(age as i32 as u32)))
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
    /// The page may be marked all-frozen (when it is all-visible): no unfrozen XID remains on
    /// it. Under `adaptive` where freezing does not stick, a page without tuples is not: it is
    /// where the next inserts go, and its all-frozen bit would only be cleared again.
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

/// The oldest unfrozen XIDs a page would keep under each choice, as ages before OldestXmin
/// ([`NONE`]: none), accumulated XID by XID.
struct Left {
    none: i64,
    full: i64,
    required: i64,
}

impl Left {
    const EMPTY: Left = Left { none: NONE, full: NONE, required: NONE };

    /// An unfrozen XID `age` before OldestXmin, which freezing could remove (`freezable`) or
    /// not; FreezeLimit is `limit_age` before OldestXmin. Returns the tuple's bits for it:
    /// `can` when freezable, `can | must` when it also precedes FreezeLimit.
    #[inline(always)]
    fn xid(&mut self, age: i64, freezable: bool, limit_age: i64, can: u8, must: u8) -> u8 {
        self.none = self.none.max(age);
        if !freezable {
            self.full = self.full.max(age);
            self.required = self.required.max(age);
            0
        } else if age > limit_age {
            can | must
        } else {
            self.required = self.required.max(age);
            can
        }
    }

    fn store(&self, out: &mut PageSummary) {
        out.left_none = self.none;
        out.left_full = self.full;
        out.left_required = self.required;
    }
}

/// Walks the line pointers of `p` (pruned, if pruning applied) using the statuses `scan`
/// gave its tuples before pruning (offsets do not move), and fills `out`.
///
/// Hot path (every tuple of every page phase I reads): the oldest XIDs are tracked as signed
/// ages before OldestXmin (the XIDs of a table lie within 2^31 of it), so that "older" is a
/// `max`, and FreezeLimit is an age too.
pub fn summarize(p: &[u8], scan: &PageScan, cutoffs: &Cutoffs, xact: &TransactionManager, out: &mut PageSummary) {
    let max = usize::from(page::max_offset(p)).min(MAX_HEAP_TUPLES_PER_PAGE);
    let oxm = cutoffs.oldest_xmin;
    let age = |x: Xid| i64::from(oxm.0.wrapping_sub(x.0) as i32);
    // An XID precedes FreezeLimit when its age exceeds FreezeLimit's.
    let limit_age = age(cutoffs.freeze_limit);
    let (mut live, mut recently_dead, mut all_visible, mut hastup, mut must) = (0u64, 0u64, true, false, false);
    let mut left = Left::EMPTY;
    let mut normal = 0usize;
    out.lpdead.clear();
    for o in 1..=max {
        out.bits[o] = 0;
        match lp(p, o).flags {
            LpFlags::Unused => continue,
            LpFlags::Redirect => {
                hastup = true;
                continue;
            }
            LpFlags::Dead => {
                out.lpdead.push(o as u16);
                continue;
            }
            LpFlags::Normal => {
                hastup = true;
                normal += 1;
            }
        }
        let Some((status, f)) = scan.tuple(o) else {
            // A tuple the prune pass could not read: nothing can be said of it.
            all_visible = false;
            left.full = left.full.max(0);
            continue;
        };
        let m = f.infomask;
        let xmin_frozen = m & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN || !f.xmin.is_normal();
        let xmin_age = age(f.xmin);
        match status {
            VacuumStatus::Live => {
                live += 1;
                // Visible to all once its inserter precedes OldestXmin (age > 0) or it is frozen.
                all_visible &= xmin_frozen || xmin_age > 0;
            }
            VacuumStatus::RecentlyDead => {
                recently_dead += 1;
                all_visible = false;
            }
            VacuumStatus::DeleteInProgress => {
                live += 1;
                all_visible = false;
            }
            VacuumStatus::InsertInProgress | VacuumStatus::Dead => all_visible = false,
        }
        let mut bits = 0u8;
        // xmin: freezable once its inserter committed before every running snapshot began.
        // The prune pass found the inserter committed exactly when the status is neither
        // INSERT_IN_PROGRESS nor DEAD (a dead tuple left here has a committed deleter only if
        // a snapshot could still see it, which makes it RECENTLY_DEAD instead).
        if !xmin_frozen {
            let committed = !matches!(status, VacuumStatus::InsertInProgress | VacuumStatus::Dead);
            bits |= left.xid(xmin_age, committed && xmin_age > 0, limit_age, XMIN_CAN, XMIN_MUST);
        }
        // xmax: it can be cleared when it no longer means anything (an aborted deleter, whose
        // hint the prune pass set, or a locker that has finished); a committed or running
        // deleter stays. (A deleter without a hint was running or committed when the prune
        // pass looked: it gave an aborted one its hint.)
        if f.xmax.is_normal() {
            let clearable = m & HEAP_XMAX_INVALID != 0 || (m & HEAP_XMAX_LOCK_ONLY != 0 && !xact.is_running(f.xmax));
            bits |= left.xid(age(f.xmax), clearable, limit_age, XMAX_CAN, XMAX_MUST);
        }
        must |= bits & (XMIN_MUST | XMAX_MUST) != 0;
        out.bits[o] = bits;
    }
    out.live = live;
    out.recently_dead = recently_dead;
    out.all_visible = all_visible;
    out.hastup = hastup;
    out.must_freeze = must;
    left.store(out);
    out.normal = normal;
    out.max = max;
    out.oldest_xmin = oxm;
}

/// [`summarize`] without the prune pass, for the usual page of a table at rest (an
/// all-visible page that an aggressive or `adaptive` VACUUM reads again).
///
/// When every line pointer of `p` is UNUSED or a NORMAL tuple whose inserter is hinted
/// committed (or frozen), whose xmax is invalid (never deleted, updated or locked), and that
/// is no member of a HOT chain, the prune pass ([`crate::heap::prune::scan_page`]) would find
/// every tuple LIVE, set no hint bit, and plan nothing: this one walk then fills `out` exactly
/// as `scan_page` followed by [`summarize`] would, and returns true. It returns false, `out`
/// being meaningless, at the first line pointer that is anything else; the caller then takes
/// the general path. Nothing here asks the CLOG or the proc array.
pub fn summarize_plain(p: &[u8], cutoffs: &Cutoffs, out: &mut PageSummary) -> bool {
    let max = usize::from(page::max_offset(p)).min(MAX_HEAP_TUPLES_PER_PAGE);
    page::prefetch_used(p);
    let oxm = cutoffs.oldest_xmin;
    let age = |x: Xid| i64::from(oxm.0.wrapping_sub(x.0) as i32);
    let limit_age = age(cutoffs.freeze_limit);
    let (mut all_visible, mut must) = (true, false);
    let mut left = Left::EMPTY;
    let mut normal = 0usize;
    for o in 1..=max {
        out.bits[o] = 0;
        let id = lp(p, o);
        match id.flags {
            LpFlags::Unused => continue,
            LpFlags::Normal => {}
            LpFlags::Redirect | LpFlags::Dead => return false,
        }
        let start = usize::from(id.off);
        let Some((xmin, xmax, m, m2)) = p.get(start..start + usize::from(id.len)).and_then(tuple::header_fields) else {
            return false;
        };
        // HEAP_XMIN_FROZEN includes the committed bit.
        if m & HEAP_XMIN_COMMITTED == 0 || xmax != Xid::INVALID || m2 & (HEAP_ONLY_TUPLE | HEAP_HOT_UPDATED) != 0 {
            return false;
        }
        normal += 1;
        if m & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN || !xmin.is_normal() {
            continue;
        }
        let xmin_age = age(xmin);
        all_visible &= xmin_age > 0;
        let bits = left.xid(xmin_age, xmin_age > 0, limit_age, XMIN_CAN, XMIN_MUST);
        must |= bits & XMIN_MUST != 0;
        out.bits[o] = bits;
    }
    out.live = normal as u64;
    out.recently_dead = 0;
    out.all_visible = all_visible;
    out.lpdead.clear();
    out.hastup = normal > 0;
    out.must_freeze = must;
    left.store(out);
    out.normal = normal;
    out.max = max;
    out.oldest_xmin = oxm;
    true
}

/// What [`decide`] knows of a page besides its tuples.
#[derive(Clone, Copy, Debug, Default)]
pub struct PageFacts {
    /// The page is about to be set all-visible (now, or in phase III once its LP_DEAD items
    /// are gone).
    pub will_be_all_visible: bool,
    /// The record that prunes the page carries a full-page image of it anyway.
    pub prune_writes_fpi: bool,
    /// `adaptive`: what the page's range has earned ([`super::adaptive::Verdicts::freezing`]).
    pub range: Freezing,
}

/// Decides what to freeze on a page under `policy`.
pub fn decide(s: &PageSummary, policy: FreezePolicy, f: &PageFacts) -> FreezeDecision {
    let whole_page = match policy {
        FreezePolicy::Lazy => false,
        FreezePolicy::Pg16 => s.must_freeze || (f.prune_writes_fpi && f.will_be_all_visible && s.can_freeze_all()),
        FreezePolicy::Eager => s.must_freeze || f.will_be_all_visible,
        FreezePolicy::Adaptive => match f.range {
            Freezing::Eager => s.must_freeze || f.will_be_all_visible,
            Freezing::Cheap => f.prune_writes_fpi && f.will_be_all_visible && s.can_freeze_all(),
            Freezing::Required => false,
        },
    };
    let (mode, oldest_left) = match (policy, whole_page) {
        (_, true) => (FreezeMode::WholePage, s.left_full),
        (FreezePolicy::Lazy, false) => (FreezeMode::Required, s.left_required),
        (FreezePolicy::Adaptive, false) if s.must_freeze => (FreezeMode::Required, s.left_required),
        (_, false) => (FreezeMode::Nothing, s.left_none),
    };
    let empty_unsettled = policy == FreezePolicy::Adaptive && f.range != Freezing::Eager && s.normal == 0;
    FreezeDecision { mode, all_frozen: oldest_left == NONE && !empty_unsettled, oldest_left: s.xid_of(oldest_left) }
}

/// The header change that freezes a tuple's xmin / clears its xmax / both.
const FREEZE_XMIN: TupleFreeze = TupleFreeze { set: HEAP_XMIN_FROZEN, clear: 0, clear2: 0, flags: 0 };
const CLEAR_XMAX: TupleFreeze = TupleFreeze {
    set: HEAP_XMAX_INVALID,
    // A finished locker's xmax goes with its strength bits (`heap::lock`).
    clear: crate::heap::wal::XMAX_BITS & !HEAP_XMAX_INVALID,
    clear2: HEAP_HOT_UPDATED | HEAP_KEYS_UPDATED,
    flags: FREEZE_CLEAR_XMAX,
};
const FREEZE_BOTH: TupleFreeze = TupleFreeze {
    set: FREEZE_XMIN.set | CLEAR_XMAX.set,
    clear: CLEAR_XMAX.clear,
    clear2: CLEAR_XMAX.clear2,
    flags: CLEAR_XMAX.flags,
};

/// Fills `plans` (emptied first) with what `mode` changes on the summarized page, one plan per
/// way a tuple changes, offsets ascending; when every NORMAL tuple changes the same way (the
/// usual whole-page freeze) the one plan says so instead of listing them. Returns how many
/// tuples get their xmin frozen.
pub fn freeze_plans(s: &PageSummary, mode: FreezeMode, plans: &mut Vec<FreezePlan>) -> u64 {
    plans.clear();
    let (xmin_bit, xmax_bit) = match mode {
        FreezeMode::Nothing => return 0,
        // Nothing to walk for (the usual page): a MUST bit is set only where must_freeze
        // says so, and a CAN bit only on an unfrozen XID.
        FreezeMode::Required if !s.must_freeze => return 0,
        FreezeMode::WholePage if s.is_fully_frozen() => return 0,
        FreezeMode::Required => (XMIN_MUST, XMAX_MUST),
        FreezeMode::WholePage => (XMIN_CAN, XMAX_CAN),
    };
    // How many tuples change in each way: xmin only, xmax only, both.
    let kind = |b: u8| match (b & xmin_bit != 0, b & xmax_bit != 0) {
        (false, false) => 3,
        (true, false) => 0,
        (false, true) => 1,
        (true, true) => 2,
    };
    let mut count = [0usize; 4];
    for &b in &s.bits[1..=s.max] {
        count[kind(b)] += 1;
    }
    let ways = [FREEZE_XMIN, CLEAR_XMAX, FREEZE_BOTH];
    let frozen = (count[0] + count[2]) as u64;
    if let Some(k) = (0..3).find(|&k| count[k] == s.normal && s.normal > 0) {
        let mut plan = FreezePlan::new(ways[k]);
        plan.all_normal = true;
        plans.push(plan);
        return frozen;
    }
    for k in (0..3).filter(|&k| count[k] > 0) {
        let mut plan = FreezePlan::new(ways[k]);
        plan.offsets.extend((1..=s.max).filter(|&o| kind(s.bits[o]) == k).map(|o| OffsetNumber(o as u16)));
        plans.push(plan);
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

#[cfg(test)]
mod tests {
    //! [`decide`] under `adaptive`, for a page about to be set all-visible, by what its range
    //! has earned.

    use super::*;

    /// A page of ten committed tuples, all visible to everyone and all freezable; its oldest
    /// XID is 100 before OldestXmin, and with `must_freeze` some of them precede FreezeLimit
    /// (the youngest left then is 50 before OldestXmin).
    fn page(must_freeze: bool) -> PageSummary {
        PageSummary {
            live: 10,
            hastup: true,
            must_freeze,
            left_none: 100,
            left_full: NONE,
            left_required: if must_freeze { 50 } else { 100 },
            normal: 10,
            oldest_xmin: Xid(1000),
            ..PageSummary::default()
        }
    }

    fn adaptive(s: &PageSummary, range: Freezing, prune_writes_fpi: bool) -> FreezeDecision {
        let facts = PageFacts { will_be_all_visible: true, prune_writes_fpi, range };
        decide(s, FreezePolicy::Adaptive, &facts)
    }

    #[test]
    fn where_freezing_sticks_the_page_is_frozen_whole_as_eager_does() {
        let d = adaptive(&page(false), Freezing::Eager, false);
        assert_eq!((d.mode, d.all_frozen, d.oldest_left), (FreezeMode::WholePage, true, None));
    }

    #[test]
    fn where_it_fails_moderately_only_a_page_pruning_images_anyway_is_frozen() {
        let d = adaptive(&page(false), Freezing::Cheap, true);
        assert_eq!((d.mode, d.all_frozen), (FreezeMode::WholePage, true));
        let d = adaptive(&page(false), Freezing::Cheap, false);
        assert_eq!((d.mode, d.all_frozen, d.oldest_left), (FreezeMode::Nothing, false, Some(Xid(900))));
    }

    /// Only what must be frozen is, tuple by tuple: the page is set all-visible, not
    /// all-frozen, and relfrozenxid can still advance past every XID that was frozen.
    #[test]
    fn where_it_fails_only_what_must_be_frozen_is() {
        let d = adaptive(&page(false), Freezing::Required, true);
        assert_eq!((d.mode, d.all_frozen, d.oldest_left), (FreezeMode::Nothing, false, Some(Xid(900))));
        let d = adaptive(&page(true), Freezing::Required, false);
        assert_eq!((d.mode, d.all_frozen, d.oldest_left), (FreezeMode::Required, false, Some(Xid(950))));
        // eager and pg16 freeze such a page whole.
        let facts = PageFacts { will_be_all_visible: true, prune_writes_fpi: false, range: Freezing::Required };
        assert_eq!(decide(&page(true), FreezePolicy::Eager, &facts).mode, FreezeMode::WholePage);
        assert_eq!(decide(&page(true), FreezePolicy::Pg16, &facts).mode, FreezeMode::WholePage);
    }

    /// One way a line pointer of a generated page can differ from a plain one.
    #[derive(Clone, Copy, Debug)]
    enum Odd {
        /// Deleted by an aborted transaction (hinted): xmax is set.
        AbortedDeleter,
        /// The inserter's commit is not hinted.
        UnhintedInserter,
        HeapOnly,
        HotUpdated,
        LpDead,
        LpRedirect,
        /// Its storage runs past the page's end.
        Torn,
    }

    /// A heap page of `n` tuples as [`summarize_plain`] takes it: committed and hinted (some
    /// frozen, some with the frozen XID, some younger than OldestXmin, some older than
    /// FreezeLimit), never deleted, a few line pointers unused; and `odd` on one of them.
    fn generated_page(rng: &mut impl rand::Rng, oxm: Xid, n: usize, odd: Option<Odd>) -> Vec<u8> {
        use crate::heap::tuple::{build_tuple, set_infomask, set_infomask2, set_xmax, set_xmin, HEAP_XMIN_INVALID};
        use crate::page::ItemId;
        use crate::Value;
        let mut p = vec![0u8; page::BLCKSZ];
        page::init(&mut p, 0);
        for i in 0..n {
            let mut t = build_tuple(&[Value::Int4(i as i32), Value::Text("x".repeat(rng.gen_range(0..60)))]).unwrap();
            let xmin = match rng.gen_range(0..10) {
                0 => Xid(2),
                1..=2 => Xid(oxm.0.wrapping_add(rng.gen_range(0..100))),
                _ => Xid(oxm.0.wrapping_sub(rng.gen_range(1..400_000))),
            };
            set_xmin(&mut t, xmin);
            let frozen = if rng.gen_range(0..5) == 0 { HEAP_XMIN_FROZEN } else { HEAP_XMIN_COMMITTED };
            let m = tuple::header_fields(&t).unwrap().2;
            set_infomask(&mut t, m | frozen);
            page::add_item(&mut p, &t, None, true).unwrap();
        }
        for o in 1..=n {
            if rng.gen_range(0..8) == 0 {
                page::set_item_id(&mut p, OffsetNumber(o as u16), ItemId { off: 0, flags: LpFlags::Unused, len: 0 });
            }
        }
        if let Some(odd) = odd {
            let o = rng.gen_range(1..=n);
            let mut id = lp(&p, o);
            if id.flags == LpFlags::Unused {
                // Give the odd one a tuple: the first NORMAL line pointer's storage.
                id = (1..=n)
                    .map(|k| lp(&p, k))
                    .find(|i| i.flags == LpFlags::Normal)
                    .unwrap_or(page::item_id(&p, OffsetNumber(1)));
                if id.len == 0 {
                    return generated_page(rng, oxm, n, Some(odd));
                }
            }
            let (start, len) = (usize::from(id.off), usize::from(id.len));
            let t = &mut p[start..start + len];
            let (_, _, m, m2) = tuple::header_fields(t).unwrap();
            let normal = ItemId { flags: LpFlags::Normal, ..id };
            match odd {
                Odd::AbortedDeleter => {
                    set_xmax(t, Xid(oxm.0.wrapping_sub(5)));
                    set_infomask(t, m | HEAP_XMAX_INVALID);
                }
                Odd::UnhintedInserter => set_infomask(t, m & !HEAP_XMIN_COMMITTED & !HEAP_XMIN_INVALID),
                Odd::HeapOnly => set_infomask2(t, m2 | HEAP_ONLY_TUPLE),
                Odd::HotUpdated => set_infomask2(t, m2 | HEAP_HOT_UPDATED),
                Odd::LpDead | Odd::LpRedirect | Odd::Torn => {}
            }
            let id = match odd {
                Odd::LpDead => ItemId { off: 0, flags: LpFlags::Dead, len: 0 },
                Odd::LpRedirect => ItemId { off: 1, flags: LpFlags::Redirect, len: 0 },
                Odd::Torn => ItemId { off: (page::BLCKSZ - 8) as u16, ..normal },
                _ => normal,
            };
            page::set_item_id(&mut p, OffsetNumber(o as u16), id);
        }
        p
    }

    /// The one-walk summary of a plain page is exactly the prune pass's followed by
    /// [`summarize`], and the prune pass finds nothing to do there; any other page is refused.
    #[test]
    fn a_plain_page_is_summarized_in_one_walk_as_the_prune_pass_would() {
        use crate::heap::prune::{plan_from_scan, scan_page, XidMemo};
        use crate::heap::wal::PrunePlan;
        use crate::io::RealFs;
        use crate::types::{BlockNumber, Lsn};
        use crate::xact::XactOptions;
        use rand::{Rng, SeedableRng};
        let dir = tempfile::tempdir().unwrap();
        let xact = TransactionManager::open(std::sync::Arc::new(RealFs), dir.path(), XactOptions::default()).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(23);
        let odds = [
            Odd::AbortedDeleter,
            Odd::UnhintedInserter,
            Odd::HeapOnly,
            Odd::HotUpdated,
            Odd::LpDead,
            Odd::LpRedirect,
            Odd::Torn,
        ];
        let (mut plain, mut refused, mut must) = (0, 0, 0);
        for _ in 0..3000 {
            // OldestXmin anywhere on the XID circle, FreezeLimit up to 200,000 before it.
            let oxm = Xid(rng.gen_range(3..u32::MAX));
            let cutoffs =
                Cutoffs { oldest_xmin: oxm, freeze_limit: Xid(oxm.0.wrapping_sub(rng.gen_range(0..200_000))) };
            let odd = (rng.gen_range(0..3) == 0).then(|| odds[rng.gen_range(0..odds.len())]);
            let n = rng.gen_range(1..62);
            let p = generated_page(&mut rng, oxm, n, odd);
            let mut fast = Box::<PageSummary>::default();
            let ok = summarize_plain(&p, &cutoffs, &mut fast);
            assert_eq!(ok, odd.is_none(), "{odd:?}");
            if !ok {
                refused += 1;
                continue;
            }
            plain += 1;
            must += usize::from(fast.must_freeze);
            let mut copy = p.clone();
            let mut scan = Box::<PageScan>::default();
            scan_page(&mut copy, oxm, &xact, Lsn(u64::MAX), true, &mut XidMemo::default(), &mut scan).unwrap();
            assert!(!scan.hints_changed && !scan.hints_pending && scan.next_prune.is_none());
            assert_eq!(copy, p, "the prune pass changed a plain page");
            let mut plan = PrunePlan::default();
            plan_from_scan(&p, BlockNumber(0), &scan, &mut plan);
            assert!(plan.is_empty());
            let mut slow = Box::<PageSummary>::default();
            summarize(&p, &scan, &cutoffs, &xact, &mut slow);
            assert_eq!(fast, slow);
        }
        // Both outcomes, and pages with something to freeze, were exercised.
        assert!(plain > 1000 && refused > 500 && must > 100, "{plain} {refused} {must}");
    }

    /// An empty page where freezing fails is where the next inserts go: all-visible only.
    #[test]
    fn an_empty_page_is_all_frozen_only_where_freezing_sticks() {
        let empty = PageSummary::default();
        assert!(adaptive(&empty, Freezing::Eager, false).all_frozen);
        assert!(!adaptive(&empty, Freezing::Required, false).all_frozen);
        let facts = PageFacts { will_be_all_visible: true, prune_writes_fpi: false, range: Freezing::Required };
        assert!(decide(&empty, FreezePolicy::Lazy, &facts).all_frozen);
    }
}
