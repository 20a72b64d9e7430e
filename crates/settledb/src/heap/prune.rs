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
//! The plan is computed by [`plan`] from the page alone (plus transaction status), then applied
//! by [`super::wal::apply_prune`], which is also the redo routine of the PRUNE record. Pruning
//! moves tuples (`repair_fragmentation`), so the caller must hold the cleanup lock.

use super::tuple::{TupleHeader, HEAP_HOT_UPDATED, HEAP_ONLY_TUPLE};
use super::visibility::{satisfies_vacuum, VacuumStatus};
use super::wal::PrunePlan;
use crate::error::Result;
use crate::page::{self, LpFlags, MAX_HEAP_TUPLES_PER_PAGE};
use crate::types::{BlockNumber, OffsetNumber, Xid};
use crate::xact::TransactionManager;

/// Computes what pruning would do to `page` given the `oldest_xmin` horizon.
pub fn plan(page: &[u8], block: BlockNumber, oldest_xmin: Xid, xact: &TransactionManager) -> Result<PrunePlan> {
    let max = page::max_offset(page);
    let mut status: [Option<VacuumStatus>; MAX_HEAP_TUPLES_PER_PAGE + 1] = [None; MAX_HEAP_TUPLES_PER_PAGE + 1];
    let mut heap_only = [false; MAX_HEAP_TUPLES_PER_PAGE + 1];
    let mut reached = [false; MAX_HEAP_TUPLES_PER_PAGE + 1];
    let mut out = PrunePlan::default();
    let mut next_prune: Option<Xid> = None;

    let maxu = usize::from(max).min(MAX_HEAP_TUPLES_PER_PAGE);
    for (i, slot) in status.iter_mut().enumerate().take(maxu + 1).skip(1) {
        let off = OffsetNumber(i as u16);
        if page::item_id(page, off).flags != LpFlags::Normal {
            continue;
        }
        if let Some(h) = TupleHeader::parse(page::item(page, off)) {
            let s = satisfies_vacuum(&h, oldest_xmin, xact)?;
            heap_only[i] = h.infomask2() & HEAP_ONLY_TUPLE != 0;
            if matches!(s, VacuumStatus::RecentlyDead | VacuumStatus::DeleteInProgress) {
                let x = h.xmax();
                if next_prune.is_none_or(|p| x.precedes(p)) {
                    next_prune = Some(x);
                }
            }
            *slot = Some(s);
        }
    }

    // Walk each chain from its root: a NORMAL tuple that is not heap-only, or a REDIRECT.
    let mut chain: Vec<usize> = Vec::with_capacity(8);
    for i in 1..=maxu {
        let off = OffsetNumber(i as u16);
        let lp = page::item_id(page, off);
        let root_is_redirect = lp.flags == LpFlags::Redirect;
        if !(root_is_redirect || (lp.flags == LpFlags::Normal && !heap_only[i])) {
            continue;
        }
        chain.clear();
        let mut cur = if root_is_redirect { usize::from(lp.off) } else { i };
        let mut prior_xmax: Option<Xid> = None;
        while cur >= 1 && cur <= maxu && !chain.contains(&cur) {
            let cl = page::item_id(page, OffsetNumber(cur as u16));
            if cl.flags != LpFlags::Normal || status[cur].is_none() {
                break;
            }
            let Some(h) = TupleHeader::parse(page::item(page, OffsetNumber(cur as u16))) else { break };
            if cur != i && !heap_only[cur] {
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
            if !matches!(status[cur], Some(VacuumStatus::Dead | VacuumStatus::RecentlyDead)) {
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
        let last_dead = chain.iter().rposition(|&c| status[c] == Some(VacuumStatus::Dead));
        let Some(ld) = last_dead else { continue };
        for &c in &chain[..=ld] {
            if c != i {
                out.unused.push(OffsetNumber(c as u16));
            }
        }
        match chain.get(ld + 1) {
            Some(&survivor) => out.redirected.push((off, OffsetNumber(survivor as u16))),
            None => out.dead.push(off),
        }
    }

    // Heap-only tuples no chain reached: dead ones are garbage from aborted updates.
    for i in 1..=maxu {
        if heap_only[i] && !reached[i] && status[i] == Some(VacuumStatus::Dead) {
            out.unused.push(OffsetNumber(i as u16));
        }
    }
    out.unused.sort();
    out.unused.dedup();
    out.new_prune_xid = next_prune.unwrap_or(Xid::INVALID);
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
