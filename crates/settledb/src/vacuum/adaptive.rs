//! What the `adaptive` freeze policy learns: per table and per range of heap pages, how often
//! a page VACUUM left all-visible is modified again (DESIGN.md §5, seed 000).
//!
//! Seed 000 treats a page about to be set all-visible as *settled* and freezes it whole
//! (`eager`). That pays where it is true (append-mostly tables: orders, order lines, history)
//! and wastes a freeze, often a full-page image, on every page where it is not (TPC-C's stock
//! and customer, updated at random: most pages eager freezes there are modified again before
//! the next VACUUM). `adaptive` freezes eagerly only where the table's own history says that
//! freezing sticks, as PostgreSQL 18 caps eager freezing by a failure rate
//! (`vacuum_max_eager_freeze_failure_rate`, `vacuumlazy.c`), with its own notion of failure:
//! a page left all-visible that a modification clears again.
//!
//! # Ranges and their life stages
//!
//! The table is cut into ranges of [`RANGE_PAGES`] heap pages. A range's own past is a poor
//! guide to its future in the tables that matter most: in TPC-C's order lines, a range of
//! fresh rows is updated once (by the delivery, a while after the insert) and never again,
//! so "it was just modified" means "it is settled now" there, and the very opposite in the
//! stock table. What generalizes is the *stage* a range is in, learned per table:
//!
//! ```text
//!              modified                     modified
//!   Fresh ─────────────────> Once ──────────────────────> Churning ──┐ modified
//!   (never modified since      │  not modified               │   <────┘
//!    VACUUM first left it      v                             │ not modified
//!    all-visible)            Quiet <─────────────────────────┘
//!                              │ modified: back to Once
//! ```
//!
//! "Modified" means that in the interval between two VACUUMs more than 1/16 of the range's
//! all-visible pages had their bit cleared (so that one insert into the last, half-full page
//! of an append-only table does not count). For each stage the table keeps a hazard: of the
//! pages that ranges in that stage had all-visible at the end of a VACUUM, the fraction
//! cleared before the next one. Each VACUUM first learns from the interval that just ended
//! ([`learn`]), halving the old evidence so that it follows the workload (a range that was
//! hot and went cold is Quiet, and judged by what Quiet ranges do), then judges every range
//! by its stage's hazard ([`judge`], [`Freezing`]; an interval in which no transaction was
//! given an XID and no bit was cleared, a VACUUM run again at once, put nothing at risk and
//! teaches nothing): at most
//! `vacuum_max_eager_freeze_failure_rate` (default 0.03, PostgreSQL 18's): freeze as `eager`;
//! at most [`CHEAP_FACTOR`] times that: freeze only when pruning writes the page's image
//! anyway; otherwise only what must be frozen. A stage without enough evidence yet (fewer
//! than [`MIN_EVIDENCE_PAGES`] pages) is judged failing: a new table's first VACUUM only sets
//! it all-visible (which logs no image when the page is clean), and the next ones freeze it
//! once they have seen whether its pages stay put.
//!
//! In TPC-C this learns (one run): stock, customer, new orders: every range churns, hazard
//! 0.7 to 1, so only what must be frozen is. History: every range stays Fresh, hazard 0,
//! frozen on first sight as `eager` would. Order lines and orders: Fresh ranges are delivered
//! later (hazard 0.25 to 0.95: not frozen before the delivery); a range just delivered (Once,
//! 0.03 to 0.1) is frozen when VACUUM prunes the delivery's old versions with an image
//! anyway, and Quiet ranges (0.01) are frozen outright.
//!
//! # What is counted, and where
//!
//! ```text
//!  hot path   cleared[range] += 1 when an insert/update/delete clears a page's all-visible bit
//!  VACUUM     at_risk[range]  = all-visible bits in the map now + cleared[range]
//!             (= the pages the previous VACUUM left all-visible), one read of each map page
//! ```
//!
//! A modification undoes a freeze exactly when it clears the all-visible bit, so every page
//! left all-visible is a trial, frozen or not: the policy keeps learning where it has stopped
//! freezing (counting only frozen pages would leave a range judged failing without evidence,
//! to be retried blindly).
//!
//! # Cost
//!
//! Hot path: a modification that clears an all-visible bit (already a VM_CLEAR record under
//! the map page's exclusive lock) adds one shared lock of the range table (contended only by
//! a VACUUM growing it) and one relaxed atomic increment. Each VACUUM reads the map once more
//! and learns in O(ranges). Memory: 5 bytes per range of 256 KB of heap.
//!
//! # Not kept
//!
//! The history lives in memory on the [`crate::heap::Relation`] (the clear counts beside its
//! map, the rest in the slot it keeps for VACUUM) and starts empty when the database is
//! opened (a reopened table is judged failing until its VACUUMs have relearned, which takes
//! one or two): it is a hint, never needed for correctness, so it is neither WAL-logged nor
//! kept across a restart. Truncation leaves the stages of ranges past the new
//! end, which a table growing back reuses.

use parking_lot::Mutex;

use crate::heap::Relation;
use crate::types::{BlockNumber, Xid};
pub use crate::vm::RANGE_PAGES;

/// Pages at risk a stage needs to have seen before its hazard is trusted.
pub const MIN_EVIDENCE_PAGES: f64 = 32.0;

/// A range counts as modified in an interval when more than 1/this of its all-visible pages
/// were cleared.
const MODIFIED_FRACTION: u32 = 16;

/// The stage of a range's life (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stage {
    /// Not modified since VACUUM first left pages of it all-visible.
    #[default]
    Fresh = 0,
    /// Modified in the last interval, not in the one before.
    Once = 1,
    /// Modified in the last two intervals or more.
    Churning = 2,
    /// Modified once or more before, not in the last interval.
    Quiet = 3,
}

impl Stage {
    pub const ALL: [Stage; 4] = [Stage::Fresh, Stage::Once, Stage::Churning, Stage::Quiet];

    /// The stage after an interval in which the range was `modified` or not.
    pub fn next(self, modified: bool) -> Stage {
        match (self, modified) {
            (Stage::Fresh, false) => Stage::Fresh,
            (Stage::Fresh | Stage::Quiet, true) => Stage::Once,
            (Stage::Once | Stage::Churning, true) => Stage::Churning,
            (Stage::Once | Stage::Churning | Stage::Quiet, false) => Stage::Quiet,
        }
    }
}

/// What one stage taught, decayed: pages ranges in it had all-visible at the end of a
/// VACUUM, and of those, pages cleared before the next one.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Hazard {
    pub at_risk: f64,
    pub failed: f64,
}

impl Hazard {
    /// The failure rate, once there is enough evidence for it.
    pub fn rate(&self) -> Option<f64> {
        (self.at_risk >= MIN_EVIDENCE_PAGES).then(|| (self.failed / self.at_risk).min(1.0))
    }
}

/// What the table has learned: the stage of every range and the hazard of every stage.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Learned {
    pub stages: Vec<Stage>,
    pub hazards: [Hazard; 4],
}

/// One interval's outcome for one range: pages it had all-visible when the last VACUUM
/// ended, and how many of those were cleared since.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    pub at_risk: u32,
    pub cleared: u32,
}

/// Learns from the interval that just ended: the old evidence halves, each range's outcome
/// is added to the hazard of the stage it was in, and its stage moves on. `outcomes` has one
/// entry per range of the table now (ranges beyond `learned.stages` are new: Fresh).
pub fn learn(learned: &mut Learned, outcomes: &[Outcome]) {
    for h in &mut learned.hazards {
        h.at_risk /= 2.0;
        h.failed /= 2.0;
    }
    if learned.stages.len() < outcomes.len() {
        learned.stages.resize(outcomes.len(), Stage::Fresh);
    }
    for (stage, o) in learned.stages.iter_mut().zip(outcomes) {
        if o.at_risk == 0 {
            continue;
        }
        let failed = o.cleared.min(o.at_risk);
        let h = &mut learned.hazards[*stage as usize];
        h.at_risk += f64::from(o.at_risk);
        h.failed += f64::from(failed);
        *stage = stage.next(failed * MODIFIED_FRACTION > o.at_risk);
    }
}

/// What VACUUM freezes in a range, by how often freezing fails there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Freezing {
    /// Failures at most `vacuum_max_eager_freeze_failure_rate`: every page about to be set
    /// all-visible is frozen whole (`eager`).
    Eager,
    /// Failures at most [`CHEAP_FACTOR`] times that: such a page is frozen whole only when
    /// pruning writes its full-page image anyway (`pg16`'s cheap freeze; a failure then costs
    /// a few bytes of freeze plan, a success saves the image a later freeze would write).
    Cheap,
    /// Failures above that, or not known yet: only what must be frozen.
    #[default]
    Required,
}

/// Where freezing is [`Freezing::Cheap`]: up to this many times the eager bar. The hazard is
/// per interval between VACUUMs, and a page frozen while its range is still young stays at
/// risk for several: at 0.15 (with the default bar) a page at risk for three intervals is
/// modified again about once in three. (Ten times, 0.3, let TPC-C's order lines, whose new
/// ranges run at 0.24 to 0.37 until their delivery, be frozen before it.)
pub const CHEAP_FACTOR: f64 = 5.0;

/// The freezing a failure rate (if known) earns against the eager bar `max_failure_rate`.
pub fn freezing_for(rate: Option<f64>, max_failure_rate: f64) -> Freezing {
    match rate {
        Some(r) if r <= max_failure_rate => Freezing::Eager,
        Some(r) if r <= max_failure_rate * CHEAP_FACTOR => Freezing::Cheap,
        _ => Freezing::Required,
    }
}

/// Judges every range by the hazard of its stage.
pub fn judge(learned: &Learned, max_failure_rate: f64) -> Verdicts {
    let by_stage = learned.hazards.map(|h| freezing_for(h.rate(), max_failure_rate));
    Verdicts {
        ranges: learned.stages.iter().map(|&s| by_stage[s as usize]).collect(),
        fresh: by_stage[Stage::Fresh as usize],
        interval_xids: None,
    }
}

/// The age past which `adaptive` freezes the XIDs of a page it finds all-visible where
/// freezing does not stick (the deferred FreezeLimit, see [`super::freeze`]): late enough to
/// spare pages that are modified first, early enough that relfrozenxid is younger than
/// `freeze_table_age` at the next VACUUM, expected `interval_xids` later (the last interval,
/// with a quarter more for margin); never earlier than `freeze_min_age`. The age is counted
/// back from the next XID, as `freeze_table_age` is (see `LazyVacuum::learn_freeze_history`).
///
/// The margin was twice the interval at first. In TPC-C's orders that reached the oldest
/// undelivered orders in the second half of the run (their delivery lags further behind as
/// the backlog grows), and every one of the 177 order pages frozen that way was delivered, so
/// modified again, before the next VACUUM; with a quarter, 26 were, and the wasted freezes
/// fell from 17.5% to 9.2% of the pages frozen on the orders and from 15.4% to 9.6% on the
/// order lines (`settle tpcc --compare adaptive`, one run each, with the pages' freezing traced).
/// Where an interval grows by more than the margin, or a page busy at one VACUUM keeps its
/// old XIDs, the next VACUUM is aggressive (in later runs: 2 of the stock table's 75
/// autovacuums and 2 of the customers', none anti-wraparound, which is
/// `autovacuum_freeze_max_age` away); it freezes by the same deferred limits (see
/// [`super::freeze`]), so it is no freezing cliff.
pub fn deferred_freeze_age(freeze_table_age: u32, freeze_min_age: u32, interval_xids: u32) -> u32 {
    freeze_table_age.saturating_sub(interval_xids.saturating_add(interval_xids / 4)).max(freeze_min_age)
}

/// The same for a page VACUUM finds modified (not all-visible) where freezing does not stick,
/// with a whole interval more for margin. Such a page is pruned, so freezing it costs no
/// image, but its rows are the ones about to change again: in TPC-C's new orders (a queue:
/// inserted, then deleted by the delivery, which falls further behind as the run goes on) the
/// oldest undelivered rows passed FreezeLimit, their pages were frozen whole and set
/// all-frozen, and nearly every one was delivered before the next VACUUM. Here every page's
/// XIDs are deferred, not only untouched ones', so relfrozenxid sits near this age after most
/// VACUUMs; with a quarter of an interval for margin, an interval a little longer than the
/// last made the next VACUUM aggressive, and aggressive means FreezeLimit on every page (a
/// freezing cliff: the whole stock table in one autovacuum).
pub fn deferred_freeze_age_modified(freeze_table_age: u32, freeze_min_age: u32, interval_xids: u32) -> u32 {
    freeze_table_age.saturating_sub(interval_xids.saturating_mul(2)).max(freeze_min_age)
}

/// The per-relation memory of the `adaptive` policy (see the module doc): what it learned,
/// and the next XID when the table's last VACUUM began. The clears it learns from are counted
/// by the heap, beside the map ([`crate::vm::ClearCounts`]).
#[derive(Default)]
pub struct FreezeHistory {
    learned: Mutex<(Learned, Option<Xid>)>,
}

fn range_of(block: BlockNumber) -> usize {
    (block.0 / RANGE_PAGES) as usize
}

/// `rel`'s history, kept in the slot the heap leaves VACUUM on each relation
/// ([`Relation::vacuum_memory`]; created empty on first use).
pub fn history(rel: &Relation) -> &FreezeHistory {
    let memory = rel.vacuum_memory.get_or_init(|| Box::<FreezeHistory>::default());
    memory.downcast_ref().expect("a relation's VACUUM memory holds adaptive's freeze history and nothing else")
}

impl FreezeHistory {
    /// At the start of a VACUUM of a table whose map counts `visible[i]` all-visible pages in
    /// range `i` ([`crate::vm::VisibilityMap::count_visible_by_range`]) and whose modifications
    /// cleared `cleared[i]` bits there since the previous VACUUM ([`crate::vm::ClearCounts::take`],
    /// covering at least the ranges of `visible`): learns from that interval (the previous
    /// VACUUM began when the next XID was the one remembered; this one begins at `next_xid`)
    /// and judges every range against `max_failure_rate`. The first VACUUM since the database
    /// was opened only starts the first interval.
    pub fn begin_vacuum(&self, visible: &[u32], cleared: &[u32], max_failure_rate: f64, next_xid: Xid) -> Verdicts {
        let outcomes: Vec<Outcome> = (0..visible.len().max(cleared.len()))
            .map(|i| {
                let cleared = cleared.get(i).copied().unwrap_or(0);
                Outcome { at_risk: visible.get(i).copied().unwrap_or(0).saturating_add(cleared), cleared }
            })
            .collect();
        let mut guard = self.learned.lock();
        let (learned, last_xid) = &mut *guard;
        let interval_xids = last_xid.map(|x| next_xid.0.wrapping_sub(x.0)).filter(|&i| i < 1 << 31);
        // An interval in which no transaction was given an XID and no bit was cleared (a
        // VACUUM run again at once) put nothing at risk: its pages staying all-visible is no
        // evidence that freezing sticks, and learning from it would judge a table cold by
        // two VACUUMs in a row.
        let void = interval_xids == Some(0) && outcomes.iter().all(|o| o.cleared == 0);
        if last_xid.is_some() && !void {
            learn(learned, &outcomes);
        } else if learned.stages.len() < outcomes.len() {
            // The first VACUUM since the database was opened has no interval behind it to
            // learn from (the map's bits may be older than the process), nor has a void one.
            learned.stages.resize(outcomes.len(), Stage::Fresh);
        }
        let mut v = judge(learned, max_failure_rate);
        v.interval_xids = interval_xids;
        *last_xid = Some(next_xid);
        v
    }

    /// What has been learned so far (tests, tools).
    pub fn learned(&self) -> Learned {
        self.learned.lock().0.clone()
    }
}

/// Per range: what VACUUM freezes there (for one VACUUM).
#[derive(Clone, Debug, PartialEq)]
pub struct Verdicts {
    ranges: Vec<Freezing>,
    /// For pages past the ranges judged (the table grew): the Fresh stage's verdict.
    fresh: Freezing,
    /// XIDs consumed between the start of the previous VACUUM of the table and this one's
    /// (`None` for the first since the database was opened).
    pub interval_xids: Option<u32>,
}

impl Verdicts {
    /// What VACUUM freezes in `block`'s range.
    pub fn freezing(&self, block: BlockNumber) -> Freezing {
        self.ranges.get(range_of(block)).copied().unwrap_or(self.fresh)
    }
}

#[cfg(test)]
mod tests {
    //! The learning and the judgement, as a table's VACUUMs would drive them: each step is
    //! one interval between two VACUUMs, given as what every range had all-visible at the
    //! end of the first and how many of those pages were modified before the second.

    use super::*;

    const BAR: f64 = 0.03;

    /// A range that had all its pages all-visible and saw `cleared` of them modified.
    fn full(cleared: u32) -> Outcome {
        Outcome { at_risk: RANGE_PAGES, cleared }
    }

    fn vacuum(learned: &mut Learned, outcomes: &[Outcome]) -> Vec<Freezing> {
        learn(learned, outcomes);
        let v = judge(learned, BAR);
        (0..outcomes.len() as u32).map(|r| v.freezing(BlockNumber(r * RANGE_PAGES))).collect()
    }

    /// Stock-like: every page of every range is modified between any two VACUUMs.
    #[test]
    fn ranges_whose_pages_keep_being_modified_stop_freezing_eagerly() {
        let mut l = Learned::default();
        for _ in 0..6 {
            vacuum(&mut l, &[full(30), full(32), full(29), full(31)]);
        }
        assert_eq!(l.stages, vec![Stage::Churning; 4]);
        assert!(l.hazards[Stage::Churning as usize].rate().unwrap() > 0.9, "{l:?}");
        assert_eq!(judge(&l, BAR).freezing(BlockNumber(0)), Freezing::Required);
    }

    /// History-like: nothing is ever modified again. The first VACUUM has no evidence and
    /// freezes only what must be; from the second on, every page is frozen on sight.
    #[test]
    fn ranges_nobody_modifies_freeze_eagerly_once_that_is_known() {
        let mut l = Learned::default();
        assert_eq!(vacuum(&mut l, &[Outcome::default(); 3]), vec![Freezing::Required; 3], "no evidence yet");
        assert_eq!(vacuum(&mut l, &[full(0), full(0), full(0)]), vec![Freezing::Eager; 3]);
        // New ranges at the end of the table are Fresh, and judged as Fresh ranges have done.
        let v = judge(&l, BAR);
        assert_eq!(v.freezing(BlockNumber(1000 * RANGE_PAGES)), Freezing::Eager);
        // One insert into the half-full last page of an append-only table is no modification.
        assert_eq!(vacuum(&mut l, &[full(0), full(0), full(1)]), vec![Freezing::Eager; 3]);
        assert_eq!(l.stages, vec![Stage::Fresh; 3]);
    }

    /// Order-line-like: each range is modified once, some intervals after it was filled (the
    /// delivery), and never again. Ranges not modified yet are not frozen; a range is frozen
    /// once its modification has come.
    #[test]
    fn ranges_modified_once_are_frozen_after_the_modification_not_before() {
        let mut l = Learned::default();
        // Range i is filled at interval i and modified at interval i + 2.
        let n = 12;
        let mut last = Vec::new();
        for t in 0..n {
            let outcomes: Vec<Outcome> = (0..n)
                .map(|i| match t as i64 - i as i64 {
                    d if d < 0 => Outcome::default(),
                    2 => full(RANGE_PAGES),
                    _ => full(0),
                })
                .collect();
            last = vacuum(&mut l, &outcomes);
        }
        // The youngest ranges are Fresh (their delivery is still to come), the next one just
        // had it (Once), the older ones are Quiet.
        assert_eq!(l.stages[n - 1], Stage::Fresh);
        assert_eq!(l.stages[n - 3], Stage::Once);
        assert_eq!(l.stages[0], Stage::Quiet);
        assert!(l.hazards[Stage::Fresh as usize].rate().unwrap() > 0.2, "{l:?}");
        assert_eq!(last[n - 1], Freezing::Required, "not frozen before its delivery");
        assert_eq!(last[n - 3], Freezing::Eager, "frozen once delivered");
        assert_eq!(last[0], Freezing::Eager);
    }

    /// A range that churned and went cold is Quiet, and judged by what Quiet ranges do; and
    /// old evidence halves at every VACUUM, so a stage whose ranges stopped failing is
    /// trusted again after a few VACUUMs.
    #[test]
    fn decay_lets_a_range_that_went_cold_be_tried_again() {
        let mut l = Learned::default();
        // Range 0 churns, range 1 churned and has been quiet since (Quiet has evidence: 0).
        for _ in 0..4 {
            vacuum(&mut l, &[full(32), full(32)]);
        }
        for _ in 0..3 {
            vacuum(&mut l, &[full(32), full(0)]);
        }
        assert_eq!(l.stages, vec![Stage::Churning, Stage::Quiet]);
        // Range 0 goes cold too: Quiet, and frozen.
        assert_eq!(vacuum(&mut l, &[full(0), full(0)]), vec![Freezing::Eager, Freezing::Eager]);

        // Fresh ranges failed at first (a bulk load then updated all over), then stopped:
        // halving brings the Fresh hazard under the bar within a few VACUUMs.
        let mut l = Learned::default();
        vacuum(&mut l, &[Outcome::default(); 8]);
        let hot: Vec<Outcome> = (0..8).map(|i| if i < 4 { full(32) } else { Outcome::default() }).collect();
        assert_eq!(vacuum(&mut l, &hot)[4..], [Freezing::Required; 4]);
        let mut rounds = 0;
        loop {
            // Ranges 0..4 keep churning; new Fresh ranges 4..8 are left alone.
            let o: Vec<Outcome> = (0..8).map(|i| full(if i < 4 { 32 } else { 0 })).collect();
            rounds += 1;
            if vacuum(&mut l, &o)[4..] == [Freezing::Eager; 4] {
                break;
            }
            assert!(rounds < 8, "the Fresh stage's old failures never decayed: {l:?}");
        }
        assert_eq!(vacuum(&mut l, &[full(32); 4])[..4], [Freezing::Required; 4], "the churning ones stay out");
    }

    /// Between the eager bar and five times it, a page is frozen only where pruning writes
    /// its image anyway.
    #[test]
    fn moderate_failure_rates_earn_the_cheap_freeze() {
        assert_eq!(freezing_for(None, BAR), Freezing::Required);
        assert_eq!(freezing_for(Some(0.0), BAR), Freezing::Eager);
        assert_eq!(freezing_for(Some(BAR), BAR), Freezing::Eager);
        assert_eq!(freezing_for(Some(0.1), BAR), Freezing::Cheap);
        assert_eq!(freezing_for(Some(0.15), BAR), Freezing::Cheap);
        assert_eq!(freezing_for(Some(0.25), BAR), Freezing::Required);
        assert_eq!(freezing_for(Some(0.0), 0.0), Freezing::Eager, "0: eager only where nothing failed");
        assert_eq!(freezing_for(Some(0.9), 1.0), Freezing::Eager, "1: eager everywhere known");
    }

    /// The relfrozenxid fallback: pages left all-visible where freezing fails have their XIDs
    /// frozen once they are old enough that the next VACUUM, one interval later (with a
    /// quarter more for margin), would otherwise find relfrozenxid past
    /// `vacuum_freeze_table_age`; never before FreezeLimit.
    #[test]
    fn all_visible_pages_left_unfrozen_are_frozen_before_the_next_vacuum_would_be_aggressive() {
        assert_eq!(deferred_freeze_age(75_000, 25_000, 10_000), 62_500);
        assert_eq!(deferred_freeze_age(75_000, 25_000, 40_000), 25_000, "a long interval: FreezeLimit");
        assert_eq!(deferred_freeze_age(150_000_000, 50_000_000, 1_000), 149_998_750);
        assert_eq!(deferred_freeze_age(u32::MAX, 0, u32::MAX), 0, "no overflow");
        assert_eq!(deferred_freeze_age(0, 0, 1_000), 0, "VACUUM FREEZE");
        assert_eq!(deferred_freeze_age_modified(75_000, 25_000, 10_000), 55_000, "a whole interval more");
        assert_eq!(deferred_freeze_age_modified(75_000, 25_000, 30_000), 25_000, "a long interval: FreezeLimit");
        assert_eq!(deferred_freeze_age_modified(u32::MAX, 0, u32::MAX), 0, "no overflow");
        assert_eq!(deferred_freeze_age_modified(0, 0, 1_000), 0, "VACUUM FREEZE");
    }

    /// The history as VACUUM and the hot path use it: clears land in their page's range, and
    /// each VACUUM learns from them once, with the XIDs consumed since the previous one.
    #[test]
    fn history_learns_each_interval_once_from_the_clears_of_its_ranges() {
        let (h, clears) = (FreezeHistory::default(), crate::vm::ClearCounts::default());
        let begin = |visible: &[u32], next: u32| h.begin_vacuum(visible, &clears.take(visible.len()), BAR, Xid(next));
        clears.note_clear(BlockNumber(0)); // before any VACUUM sized the ranges: not counted
        let v = begin(&[32, 32], 1000);
        assert_eq!(v.interval_xids, None);
        assert_eq!(v.freezing(BlockNumber(0)), Freezing::Required, "no evidence yet");
        for b in 0..20 {
            clears.note_clear(BlockNumber(b)); // range 0
        }
        clears.note_clear(BlockNumber(40)); // range 1
        let v = begin(&[12, 31], 6000);
        assert_eq!(v.interval_xids, Some(5000));
        let l = h.learned();
        assert_eq!(l.stages, vec![Stage::Once, Stage::Fresh]);
        assert_eq!(l.hazards[Stage::Fresh as usize], Hazard { at_risk: 64.0, failed: 21.0 });
        // The next VACUUM does not count those clears again.
        begin(&[32, 32], 7000);
        let l = h.learned();
        assert_eq!(l.hazards[Stage::Fresh as usize], Hazard { at_risk: 32.0 + 32.0, failed: 10.5 });
        assert_eq!(l.stages, vec![Stage::Quiet, Stage::Fresh]);
        // A VACUUM run again at once (no XID assigned since, nothing cleared) learns nothing.
        begin(&[32, 32], 7000);
        assert_eq!(h.learned(), l);
        // One whose interval assigned no XID but saw a clear (a transaction older than the
        // last VACUUM wrote) does learn.
        clears.note_clear(BlockNumber(33));
        begin(&[32, 31], 7000);
        assert_ne!(h.learned(), l);
    }

    /// Two VACUUMs in a row: the second has no interval behind it, so a table nobody touched
    /// is not judged cold and frozen by it.
    #[test]
    fn a_vacuum_run_again_at_once_is_no_evidence_that_freezing_sticks() {
        let (h, clears) = (FreezeHistory::default(), crate::vm::ClearCounts::default());
        let begin = |visible: &[u32], next: u32| h.begin_vacuum(visible, &clears.take(visible.len()), BAR, Xid(next));
        begin(&[0, 0, 0], 1000);
        let v = begin(&[32, 32, 32], 1000);
        assert_eq!(v.interval_xids, Some(0));
        assert_eq!(v.freezing(BlockNumber(0)), Freezing::Required);
        // Once XIDs have been given out and the pages stayed all-visible, freezing sticks.
        let v = begin(&[32, 32, 32], 5000);
        assert_eq!(v.freezing(BlockNumber(0)), Freezing::Eager);
    }
}
