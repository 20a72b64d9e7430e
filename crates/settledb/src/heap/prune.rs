//! HOT pruning (PostgreSQL's `pruneheap.c` and `README.HOT`, rewritten).
//!
//! An update that changes no indexed column and finds room on the same page writes a
//! *heap-only tuple* (HOT): the old version gets `HEAP_HOT_UPDATED` and a `t_ctid` pointing at
//! the new one, and no index entry is made for the new one. Indexes keep pointing at the chain's
//! *root* line pointer. Pruning shortens chains once their old members are dead to everyone:
//!
//! ```text
//!  before:  lp1 NORMAL (dead, HOT_UPDATED) -> lp2 NORMAL (dead, heap-only) -> lp3 NORMAL (live)
//!  after:   lp1 REDIRECT -> 3                  lp2 UNUSED                     lp3 NORMAL (live)
//! ```
//!
//! * a chain whose members are all dead: a heap-only root cannot exist, so the root becomes
//!   `LP_DEAD` (its index entries still point at it; VACUUM removes them and then the line
//!   pointer), and the heap-only members become `LP_UNUSED`;
//! * a non-HOT tuple that is dead becomes `LP_DEAD`;
//! * a heap-only tuple no chain reaches (its inserter aborted) and that is dead becomes unused.
//!
//! # One pass, then the plan
//!
//! [`scan_page`] reads every line pointer once: it classifies each tuple as
//! `HeapTupleSatisfiesVacuum` does ([`VacuumStatus`]), setting on the way every hint bit the
//! transactions' fate allows (see [`super::hint`] for when a commit hint may be set), and
//! notes whether the page has HOT chains at all. [`plan_from_scan`] then computes the prune
//! plan from those statuses alone: a page without heap-only tuples, HOT-updated tuples or
//! redirects (the common case) needs no chain walk, every DEAD tuple simply becomes `LP_DEAD`.
//! The plan is applied by [`super::wal::apply_prune`], which is also the redo routine of the
//! PRUNE record (and the prune part of VACUUM's PRUNE_FREEZE record). Pruning moves tuples
//! (`repair_fragmentation`), so the caller must hold the cleanup lock.
//!
//! VACUUM's phase I reads the same [`PageScan`] to decide freezing and visibility over the
//! tuples the plan leaves (offsets do not move when a page is pruned), so a page is
//! classified exactly once: the statuses cannot change between the prune decision and the
//! freeze decision, as PostgreSQL 17's `heap_page_prune_and_freeze` ensures the same way.

use super::tuple::{
    self, TupleHeader, HEAP_HOT_UPDATED, HEAP_ONLY_TUPLE, HEAP_XMAX_COMMITTED, HEAP_XMAX_INVALID, HEAP_XMAX_LOCK_ONLY,
    HEAP_XMIN_COMMITTED, HEAP_XMIN_FROZEN, HEAP_XMIN_INVALID,
};
use super::visibility::VacuumStatus;
use super::wal::PrunePlan;
use crate::error::Result;
use crate::page::{self, ItemId, LpFlags, MAX_HEAP_TUPLES_PER_PAGE, PAGE_HEADER_SIZE};
use crate::types::{BlockNumber, Lsn, OffsetNumber, Xid};
use crate::xact::{TransactionManager, XidStatus};

/// Slots per page in a [`PageScan`] (index 0 unused, offsets start at 1).
const SLOTS: usize = MAX_HEAP_TUPLES_PER_PAGE + 1;

/// What [`scan_page`] learned about every line pointer of one page. Reused from page to page
/// (its arrays are written up to the page's last line pointer by every scan).
pub struct PageScan {
    /// Line pointers examined: `min(max_offset, MAX_HEAP_TUPLES_PER_PAGE)`.
    pub max: usize,
    /// Status of each NORMAL tuple with a valid header; `None` for anything else.
    status: [Option<VacuumStatus>; SLOTS],
    /// Its header fields, hint bits included (valid where `status` is `Some`).
    fields: [Fields; SLOTS],
    heap_only: [bool; SLOTS],
    /// Some line pointer redirects, or some tuple is heap-only or HOT-updated.
    hot: bool,
    /// Some tuple is DEAD.
    any_dead: bool,
    /// Hint bits were added to some tuple.
    pub hints_changed: bool,
    /// Hint bits were earned but, as asked, not written ([`PageScan::write_pending_hints`]).
    pub hints_pending: bool,
    /// Where they go: each such tuple's start in the page and the bits it earned, the first
    /// `n_pending` entries.
    pending: [(u16, u16); SLOTS],
    n_pending: usize,
    /// Oldest xmax of a tuple deleted but not yet dead to everyone (the page's next
    /// `pd_prune_xid`).
    pub next_prune: Option<Xid>,
}

impl Default for PageScan {
    fn default() -> Self {
        PageScan {
            max: 0,
            status: [None; SLOTS],
            fields: [Fields { xmin: Xid::INVALID, xmax: Xid::INVALID, infomask: 0, infomask2: 0 }; SLOTS],
            heap_only: [false; SLOTS],
            hot: false,
            any_dead: false,
            hints_changed: false,
            hints_pending: false,
            pending: [(0, 0); SLOTS],
            n_pending: 0,
            next_prune: None,
        }
    }
}

impl PageScan {
    /// The status [`scan_page`] gave the tuple at `off` (`None`: not a NORMAL tuple with a
    /// valid header).
    #[inline]
    pub fn status(&self, off: usize) -> Option<VacuumStatus> {
        self.status.get(off).copied().flatten()
    }

    /// The status and header fields (with the hint bits the scan set) of the tuple at `off`.
    /// Pruning moves tuples but changes no header, so they stay true of the pruned page.
    #[inline]
    pub fn tuple(&self, off: usize) -> Option<(VacuumStatus, Fields)> {
        Some((self.status.get(off).copied().flatten()?, self.fields[off]))
    }
}

/// The final fate of a transaction, as hint bits record it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Running,
    /// Committed; a commit hint may be set once WAL is flushed to `hint_after`.
    Committed {
        hint_after: Lsn,
    },
    Aborted,
}

/// The last few final answers about transactions, kept across the tuples and pages of one
/// pass: neighbouring tuples mostly share their inserter and deleter (a bulk load, one
/// transaction's updates), so the proc array and the CLOG are asked once per transaction
/// rather than once per tuple. Only final answers are kept (a running transaction's is not).
#[derive(Default)]
pub struct XidMemo {
    entries: [(Xid, Option<Fate>); 4],
    next: usize,
}

impl XidMemo {
    fn fate(&mut self, xact: &TransactionManager, xid: Xid) -> Result<Fate> {
        if let Some((_, Some(f))) = self.entries.iter().find(|(x, f)| *x == xid && f.is_some()) {
            return Ok(*f);
        }
        let f = match xact.status(xid)? {
            XidStatus::Committed => Fate::Committed { hint_after: xact.commit_lsn_bound(xid) },
            XidStatus::InProgress => Fate::Running,
            XidStatus::Aborted | XidStatus::SubCommitted => Fate::Aborted,
        };
        if f != Fate::Running && xid.is_normal() {
            self.entries[self.next] = (xid, Some(f));
            self.next = (self.next + 1) % self.entries.len();
        }
        Ok(f)
    }
}

/// The raw line pointer at `off` (1-based), which must be at most `max_offset` (a panic
/// otherwise).
#[inline]
pub fn lp(page: &[u8], off: usize) -> ItemId {
    let at = PAGE_HEADER_SIZE + (off - 1) * page::ITEM_ID_SIZE;
    ItemId::from_u32(u32::from_le_bytes([page[at], page[at + 1], page[at + 2], page[at + 3]]))
}

/// The header fields pruning and freezing look at, read once per tuple.
#[derive(Clone, Copy, Debug)]
pub struct Fields {
    pub xmin: Xid,
    pub xmax: Xid,
    pub infomask: u16,
    pub infomask2: u16,
}

/// Where the NORMAL tuple with line pointer `id` lies and its header fields, if its storage
/// lies in the page and its header is valid.
#[inline]
fn tuple_fields(page: &[u8], id: ItemId) -> Option<(usize, Fields)> {
    let start = usize::from(id.off);
    let (xmin, xmax, infomask, infomask2) = tuple::header_fields(page.get(start..start + usize::from(id.len))?)?;
    Some((start, Fields { xmin, xmax, infomask, infomask2 }))
}

/// Classifies every tuple of `page` against the horizon `oldest_xmin`, setting the hint bits
/// the transactions' fates allow (commit hints only for commits flushed to WAL by `flushed`;
/// with `write_hints` false they are only remembered, see [`PageScan::write_pending_hints`]),
/// and records whether the page has HOT chains. The caller holds the page exclusively.
pub fn scan_page(
    page: &mut [u8],
    oldest_xmin: Xid,
    xact: &TransactionManager,
    flushed: Lsn,
    write_hints: bool,
    memo: &mut XidMemo,
    out: &mut PageScan,
) -> Result<()> {
    let max = usize::from(page::max_offset(page)).min(MAX_HEAP_TUPLES_PER_PAGE);
    // Each tuple header read below is otherwise its own cache miss, one after the other (a
    // VACUUM of a table bigger than the CPU's caches spent most of this function waiting on
    // the first load of each header); asked for all at once, the misses overlap.
    page::prefetch_used(page);
    out.max = max;
    out.hot = false;
    out.any_dead = false;
    out.hints_changed = false;
    out.hints_pending = false;
    out.n_pending = 0;
    out.next_prune = None;
    for o in 1..=max {
        out.status[o] = None;
        out.heap_only[o] = false;
        let id = lp(page, o);
        match id.flags {
            LpFlags::Normal => {}
            LpFlags::Redirect => {
                out.hot = true;
                continue;
            }
            LpFlags::Dead | LpFlags::Unused => continue,
        }
        let Some((start, f)) = tuple_fields(page, id) else { continue };
        let (status, add) = classify(&f, oldest_xmin, xact, flushed, memo)?;
        if add != 0 {
            if write_hints {
                tuple::set_infomask(&mut page[start..start + usize::from(id.len)], f.infomask | add);
                out.hints_changed = true;
            } else {
                out.hints_pending = true;
                // A tuple starts inside the page: its offset fits.
                out.pending[out.n_pending] = (start as u16, add);
                out.n_pending += 1;
            }
        }
        out.fields[o] = Fields { infomask: f.infomask | add, ..f };
        out.heap_only[o] = f.infomask2 & HEAP_ONLY_TUPLE != 0;
        out.hot |= f.infomask2 & (HEAP_ONLY_TUPLE | HEAP_HOT_UPDATED) != 0;
        if matches!(status, VacuumStatus::RecentlyDead | VacuumStatus::DeleteInProgress)
            && out.next_prune.is_none_or(|p| f.xmax.precedes(p))
        {
            out.next_prune = Some(f.xmax);
        }
        out.any_dead |= status == VacuumStatus::Dead;
        out.status[o] = Some(status);
    }
    Ok(())
}

impl PageScan {
    /// Records a scan that found nothing: no tuple to prune or to hint, no HOT chain, no
    /// tuple status. For a caller that proved as much without [`scan_page`] (VACUUM's walk
    /// of a plain all-visible page), so that [`plan_from_scan`] plans nothing.
    pub fn set_nothing_found(&mut self) {
        self.max = 0;
        self.n_pending = 0;
        self.hot = false;
        self.any_dead = false;
        self.hints_changed = false;
        self.hints_pending = false;
        self.next_prune = None;
    }

    /// Writes the hint bits a scan without `write_hints` earned into `page`, which must be the
    /// page as scanned (nothing pruned or frozen since): straight to the tuples the scan noted,
    /// without reading the line pointers and headers again.
    pub fn write_pending_hints(&mut self, page: &mut [u8]) {
        if !self.hints_pending {
            return;
        }
        for &(start, bits) in &self.pending[..self.n_pending] {
            tuple::add_infomask_at(page, usize::from(start), bits);
        }
        self.n_pending = 0;
        self.hints_pending = false;
        self.hints_changed = true;
    }
}

/// `HeapTupleSatisfiesVacuum` for one tuple, with the hint bits its answers earn.
#[inline]
fn classify(
    f: &Fields,
    oldest_xmin: Xid,
    xact: &TransactionManager,
    flushed: Lsn,
    memo: &mut XidMemo,
) -> Result<(VacuumStatus, u16)> {
    let m = f.infomask;
    let mut add = 0u16;
    // The inserter.
    if m & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN || m & HEAP_XMIN_COMMITTED != 0 {
        // committed (or frozen)
    } else if m & HEAP_XMIN_INVALID != 0 {
        return Ok((VacuumStatus::Dead, 0));
    } else {
        match memo.fate(xact, f.xmin)? {
            Fate::Running => return Ok((VacuumStatus::InsertInProgress, 0)),
            Fate::Aborted => return Ok((VacuumStatus::Dead, HEAP_XMIN_INVALID)),
            Fate::Committed { hint_after } => {
                if hint_after <= flushed {
                    add |= HEAP_XMIN_COMMITTED;
                }
            }
        }
    }
    // The deleter.
    let xmax = f.xmax;
    if m & HEAP_XMAX_INVALID != 0 || !xmax.is_valid() || m & HEAP_XMAX_LOCK_ONLY != 0 {
        return Ok((VacuumStatus::Live, add));
    }
    if m & HEAP_XMAX_COMMITTED == 0 {
        match memo.fate(xact, xmax)? {
            Fate::Running => return Ok((VacuumStatus::DeleteInProgress, add)),
            Fate::Aborted => return Ok((VacuumStatus::Live, add | HEAP_XMAX_INVALID)),
            Fate::Committed { hint_after } => {
                if hint_after <= flushed {
                    add |= HEAP_XMAX_COMMITTED;
                }
            }
        }
    }
    let status = if xmax.precedes(oldest_xmin) { VacuumStatus::Dead } else { VacuumStatus::RecentlyDead };
    Ok((status, add))
}

/// Computes the prune plan from a [`scan_page`] of `page` (which must not have changed since).
pub fn plan_from_scan(page: &[u8], block: BlockNumber, scan: &PageScan, out: &mut PrunePlan) {
    out.redirected.clear();
    out.dead.clear();
    out.unused.clear();
    out.new_prune_xid = scan.next_prune.unwrap_or(Xid::INVALID);
    if !scan.hot {
        // No chains: every dead tuple is a chain of one, and its line pointer becomes LP_DEAD.
        if !scan.any_dead {
            return;
        }
        for o in 1..=scan.max {
            if scan.status[o] == Some(VacuumStatus::Dead) {
                out.dead.push(OffsetNumber(o as u16));
            }
        }
        return;
    }
    plan_chains(page, block, scan, out);
}

/// The general case of [`plan_from_scan`]: walk each HOT chain from its root.
fn plan_chains(page: &[u8], block: BlockNumber, scan: &PageScan, out: &mut PrunePlan) {
    let maxu = scan.max;
    let mut reached = [false; SLOTS];
    // Walk each chain from its root: a NORMAL tuple that is not heap-only, or a REDIRECT.
    let mut chain: Vec<usize> = Vec::with_capacity(8);
    for i in 1..=maxu {
        let id = lp(page, i);
        let root_is_redirect = id.flags == LpFlags::Redirect;
        if !(root_is_redirect || (id.flags == LpFlags::Normal && !scan.heap_only[i])) {
            continue;
        }
        chain.clear();
        let mut cur = if root_is_redirect { usize::from(id.off) } else { i };
        let mut prior_xmax: Option<Xid> = None;
        while cur >= 1 && cur <= maxu && !chain.contains(&cur) {
            let cl = lp(page, cur);
            if cl.flags != LpFlags::Normal || scan.status[cur].is_none() {
                break;
            }
            let Some(h) =
                page.get(usize::from(cl.off)..usize::from(cl.off) + usize::from(cl.len)).and_then(TupleHeader::parse)
            else {
                break;
            };
            if cur != i && !scan.heap_only[cur] {
                break;
            }
            if prior_xmax.is_some_and(|x| x != h.xmin()) {
                break; // the chain link is stale: the next slot was reused
            }
            chain.push(cur);
            reached[cur] = true;
            // A member that is not DEAD or RECENTLY_DEAD ends the walk (`heap_prune_chain`):
            // a live version's successor can only be dead because its inserter aborted, which
            // says nothing about the live version; such leftovers are collected below. Walking
            // on made a live root LP_DEAD (found by tests/model.rs and tests/crash.rs; see
            // prune_dead.txt and tests/regressions.rs).
            if !matches!(scan.status[cur], Some(VacuumStatus::Dead | VacuumStatus::RecentlyDead)) {
                break;
            }
            if h.infomask2() & HEAP_HOT_UPDATED == 0 || h.ctid().block != block {
                break;
            }
            prior_xmax = Some(h.xmax());
            cur = usize::from(h.ctid().offset.0);
        }
        // Everything up to the last DEAD member goes (RECENTLY_DEAD ones before it too: once a
        // later version is dead to everyone, so are its predecessors).
        let last_dead = chain.iter().rposition(|&c| scan.status[c] == Some(VacuumStatus::Dead));
        let Some(ld) = last_dead else { continue };
        for &c in &chain[..=ld] {
            if c != i {
                out.unused.push(OffsetNumber(c as u16));
            }
        }
        let off = OffsetNumber(i as u16);
        match chain.get(ld + 1) {
            Some(&survivor) => out.redirected.push((off, OffsetNumber(survivor as u16))),
            None => out.dead.push(off),
        }
    }

    // Heap-only tuples no chain reached: dead ones are garbage from aborted updates.
    let leftovers =
        (1..=maxu).filter(|&i| scan.heap_only[i] && !reached[i] && scan.status[i] == Some(VacuumStatus::Dead));
    out.unused.extend(leftovers.map(|i| OffsetNumber(i as u16)));
    out.unused.sort();
    out.unused.dedup();
}

/// Computes what pruning would do to `page` given the `oldest_xmin` horizon, without setting
/// hint bits (the page is copied for the scan).
pub fn plan(page: &[u8], block: BlockNumber, oldest_xmin: Xid, xact: &TransactionManager) -> Result<PrunePlan> {
    let mut copy = page.to_vec();
    let mut scan = Box::<PageScan>::default();
    // No commit hint is set on the copy (flushed = 0), so nothing depends on the WAL.
    scan_page(&mut copy, oldest_xmin, xact, Lsn(0), true, &mut XidMemo::default(), &mut scan)?;
    let mut out = PrunePlan::default();
    plan_from_scan(&copy, block, &scan, &mut out);
    Ok(out)
}

/// How many tuples `plan` frees on `page` (before it is applied): the heap-only members it
/// makes unused, and the chain roots it makes DEAD or redirects that still held a tuple (a
/// root that was already a REDIRECT held none).
pub fn tuples_removed(page: &[u8], plan: &PrunePlan) -> u32 {
    let normal = |o: OffsetNumber| page::item_id(page, o).flags == LpFlags::Normal;
    let roots =
        plan.dead.iter().filter(|&&o| normal(o)).count() + plan.redirected.iter().filter(|(o, _)| normal(*o)).count();
    (plan.unused.len() + roots) as u32
}

/// Should a reader try to prune this page? (PostgreSQL's `heap_page_prune_opt` test: there is
/// something prunable older than the horizon and the page is short of space.)
pub fn worth_pruning(page: &[u8], oldest_xmin: Xid, fillfactor: u8) -> bool {
    let px = page::prune_xid(page);
    if !px.is_valid() || !px.precedes(oldest_xmin) {
        return false;
    }
    let target = (page::BLCKSZ * (100 - usize::from(fillfactor)) / 100).max(page::BLCKSZ / 10);
    page::flags(page) & page::PD_PAGE_FULL != 0 || page::free_space(page) < target
}
