//! VACUUM FULL's copy of a heap into new storage (PostgreSQL's `rewriteheap.c` and the copy
//! loop of `heapam_relation_copy_for_cluster`).
//!
//! Every tuple some snapshot may still see goes into the new heap, packed page after page to
//! the table's fillfactor; every tuple dead to everyone stays behind. The caller holds the
//! table's AccessExclusive lock, so nothing changes under the copy.
//!
//! # What a copied tuple keeps, and what changes
//!
//! Its xmin, xmax, command ID and data are kept, so each snapshot sees in the new heap exactly
//! what it saw in the old one. On the way:
//!
//! - the commit hint bits are set (the copy consulted the commit log for every tuple);
//! - an xmin older than the freeze limit is frozen, so the new heap's `relfrozenxid` can be
//!   the freeze limit (PostgreSQL's `FreezeLimit`);
//! - an xmax that no longer means anything (an aborted deleter, a finished locker) is cleared,
//!   with the `t_ctid` it may have pointed elsewhere;
//! - HOT flags go: each copied tuple gets its own index entries in the indexes rebuilt after
//!   the copy, so there are no heap-only tuples and no redirects in the new heap.
//!
//! # Update chains
//!
//! A version deleted by an UPDATE that some snapshot still needs (RECENTLY_DEAD) points at its
//! successor through `t_ctid`, which a READ COMMITTED writer follows. The copy keeps these links
//! pointing at the successors' new places, the way PostgreSQL's rewrite does:
//!
//! - a successor copied before its predecessor is remembered (`placed`: old TID to new TID),
//!   when it is an UPDATE's new version whose predecessor can still be around (its xmin does
//!   not precede OldestXmin; an older xmin means the predecessor is dead to everyone);
//! - a predecessor met before its successor waits (`waiting`, keyed by the successor's old TID)
//!   and is written right after it.
//!
//! A predecessor whose successor never came (it was dead after all) is written at the end
//! pointing at itself, as the last version of its row.
//!
//! # WAL
//!
//! Each finished page is logged whole as an `XLOG FPI` record ([`crate::wal::newpage`]) and
//! goes through the buffer pool, behind a ring, like a bulk load: a crash after the commit
//! replays the images; a crash before it leaves the new file an orphan that startup removes.

use std::collections::HashMap;

use super::tuple::{
    self, TupleHeader, HEAP_HOT_UPDATED, HEAP_ONLY_TUPLE, HEAP_UPDATED, HEAP_XMAX_COMMITTED, HEAP_XMAX_INVALID,
    HEAP_XMAX_LOCK_ONLY, HEAP_XMIN_COMMITTED, HEAP_XMIN_FROZEN,
};
use super::visibility::{satisfies_vacuum, VacuumStatus};
use super::{corrupt_tuple, read_page, HeapEnv, Relation};
use crate::buffer::Ring;
use crate::error::{Error, Interrupt, Result};
use crate::page::{self, LpFlags, PageBuf, BLCKSZ};
use crate::types::{BlockNumber, Fork, OffsetNumber, Tid, Xid};
use crate::wal::newpage::log_new_page;

/// What a rewrite did (PostgreSQL's VERBOSE line: `found R removable, N nonremovable row
/// versions in P pages`, `D dead row versions cannot be removed yet`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RewriteCounts {
    /// Pages of the old heap read.
    pub old_pages: u32,
    /// Pages of the new heap written.
    pub new_pages: u32,
    /// Tuples left behind: dead to every snapshot.
    pub removed: u64,
    /// Tuples copied, the RECENTLY_DEAD among them.
    pub kept: u64,
    pub recently_dead: u64,
    /// Copied tuples whose xmin was frozen on the way.
    pub frozen: u64,
}

/// Where the copy stands in XID time.
#[derive(Clone, Copy, Debug)]
pub struct RewriteCutoffs {
    /// Tuples deleted before it are dead to everyone.
    pub oldest_xmin: Xid,
    /// xmins before it are frozen.
    pub freeze_limit: Xid,
}

/// Copies every tuple of `old` that a snapshot may still see into `new`, an empty heap on new
/// storage; see the module doc. `interrupt` is checked before each old page.
pub fn rewrite(
    env: &HeapEnv<'_>,
    old: &Relation,
    new: &Relation,
    cutoffs: RewriteCutoffs,
    interrupt: Option<&Interrupt>,
) -> Result<RewriteCounts> {
    let nblocks = env.pool.smgr().nblocks(old.relfilenode, Fork::Main)?;
    let mut w = Writer::new(env, new, cutoffs);
    w.counts.old_pages = nblocks;
    let mut read_ring = Ring::new(256 << 10);
    let mut scratch = Vec::new();
    for b in 0..nblocks {
        if let Some(i) = interrupt {
            i.check()?;
        }
        let buf = read_page(env, old, BlockNumber(b), Some(&mut read_ring))?;
        let g = buf.read();
        let p = &g.0;
        if page::is_new(p) {
            continue;
        }
        for o in 1..=page::max_offset(p) {
            let off = OffsetNumber(o);
            if page::item_id(p, off).flags != LpFlags::Normal {
                continue;
            }
            let tid = Tid { block: BlockNumber(b), offset: off };
            let t = page::item(p, off);
            let h = TupleHeader::parse(t).ok_or_else(|| corrupt_tuple(old, tid, "invalid tuple header"))?;
            let status = satisfies_vacuum(&h, cutoffs.oldest_xmin, env.xact)?;
            if status == VacuumStatus::Dead {
                w.counts.removed += 1;
                continue;
            }
            scratch.clear();
            scratch.extend_from_slice(t);
            let follows = w.prepare(&mut scratch, tid, status)?;
            w.counts.kept += 1;
            if status == VacuumStatus::RecentlyDead {
                w.counts.recently_dead += 1;
            }
            w.add(tid, &mut scratch, follows)?;
        }
    }
    w.finish()
}

/// The new heap being filled.
struct Writer<'w, 'a> {
    env: &'w HeapEnv<'a>,
    rel: &'w Relation,
    cutoffs: RewriteCutoffs,
    page: Box<PageBuf>,
    items: usize,
    reserve: usize,
    ring: Ring,
    /// Successors written before their predecessors: old TID to new TID.
    placed: HashMap<Tid, Tid>,
    /// Predecessors waiting for their successor, by the successor's old TID: the
    /// predecessor's old TID and its prepared bytes.
    waiting: HashMap<Tid, (Tid, Vec<u8>)>,
    counts: RewriteCounts,
}

impl<'w, 'a> Writer<'w, 'a> {
    fn new(env: &'w HeapEnv<'a>, rel: &'w Relation, cutoffs: RewriteCutoffs) -> Self {
        Writer {
            env,
            rel,
            cutoffs,
            page: fresh_page(),
            items: 0,
            reserve: rel.reserved_bytes(),
            ring: Ring::new(16 << 20),
            placed: HashMap::new(),
            waiting: HashMap::new(),
            counts: RewriteCounts::default(),
        }
    }

    /// Sets the copy's hint bits, freezes its xmin if old enough, clears an xmax that means
    /// nothing any more and the HOT flags. Returns the successor's old TID when the tuple is
    /// an updated version a snapshot may still follow to its successor.
    fn prepare(&mut self, t: &mut [u8], tid: Tid, status: VacuumStatus) -> Result<Option<Tid>> {
        let h = TupleHeader::parse(t).ok_or_else(|| corrupt_tuple(self.rel, tid, "invalid tuple header"))?;
        let (xmin, xmax, mut m, m2, ctid) = (h.xmin(), h.xmax(), h.infomask(), h.infomask2(), h.ctid());
        let xmax_set = m & HEAP_XMAX_INVALID == 0 && xmax.is_valid();
        let mut follows = None;
        // Every status left (DEAD tuples stay behind) but INSERT_IN_PROGRESS means the
        // inserter committed.
        if status != VacuumStatus::InsertInProgress {
            m |= HEAP_XMIN_COMMITTED;
            if xmin.is_normal() && xmin.precedes(self.cutoffs.freeze_limit) && m & HEAP_XMIN_FROZEN != HEAP_XMIN_FROZEN
            {
                m |= HEAP_XMIN_FROZEN;
                self.counts.frozen += 1;
            }
        }
        match status {
            VacuumStatus::RecentlyDead => m |= HEAP_XMAX_COMMITTED,
            // An xmax on a live tuple is an aborted deleter or a locker: one still running
            // (only this transaction could be, under the table's AccessExclusive lock) stays.
            VacuumStatus::Live if xmax_set && !self.env.xact.is_running(xmax) => {
                tuple::set_xmax(t, Xid::INVALID);
                m = (m & !(HEAP_XMAX_COMMITTED
                    | HEAP_XMAX_LOCK_ONLY
                    | tuple::HEAP_XMAX_EXCL_LOCK
                    | tuple::HEAP_XMAX_KEYSHR_LOCK))
                    | HEAP_XMAX_INVALID;
            }
            _ => {}
        }
        let still_set = m & HEAP_XMAX_INVALID == 0 && xmax_set;
        if still_set && m & HEAP_XMAX_LOCK_ONLY == 0 && ctid != tid {
            follows = Some(ctid);
        }
        tuple::set_infomask(t, m);
        tuple::set_infomask2(t, m2 & !(HEAP_HOT_UPDATED | HEAP_ONLY_TUPLE));
        Ok(follows)
    }

    /// Writes `t` (old TID `tid`), or holds it back (taking it) until its successor `follows`
    /// is written.
    fn add(&mut self, tid: Tid, t: &mut Vec<u8>, follows: Option<Tid>) -> Result<()> {
        if let Some(next) = follows {
            match self.placed.remove(&next) {
                Some(new_next) => tuple::set_ctid(t, new_next),
                None => {
                    self.waiting.insert(next, (tid, std::mem::take(t)));
                    return Ok(());
                }
            }
        }
        self.write_chain(tid, t, follows.is_some())
    }

    /// Writes `t` (old TID `tid`; `linked`: its `t_ctid` already names its successor's new
    /// place), then each predecessor that was waiting for the version just written.
    fn write_chain(&mut self, tid: Tid, t: &mut [u8], linked: bool) -> Result<()> {
        let (mut tid, mut new_tid) = (tid, self.place(t, linked)?);
        let mut last: Option<Vec<u8>> = None;
        while let Some((pred_tid, mut pred)) = self.waiting.remove(&tid) {
            tuple::set_ctid(&mut pred, new_tid);
            new_tid = self.place(&mut pred, true)?;
            (tid, last) = (pred_tid, Some(pred));
        }
        // The last version written may be the successor of one still to come.
        let h = TupleHeader::parse(last.as_deref().unwrap_or(t))
            .ok_or_else(|| corrupt_tuple(self.rel, tid, "invalid tuple header"))?;
        if h.infomask() & HEAP_UPDATED != 0 && !h.xmin().precedes(self.cutoffs.oldest_xmin) {
            self.placed.insert(tid, new_tid);
        }
        Ok(())
    }

    /// Puts `t` on the page being filled (finishing it first if `t` does not fit); its new
    /// TID. Unless `linked`, its `t_ctid` is set to that TID.
    fn place(&mut self, t: &mut [u8], linked: bool) -> Result<Tid> {
        for _ in 0..2 {
            let fits = self.items == 0 || page::heap_free_space(&self.page.0) >= page::maxalign(t.len()) + self.reserve;
            if fits {
                let off = OffsetNumber(page::max_offset(&self.page.0) + 1);
                let tid = Tid { block: BlockNumber(self.counts.new_pages), offset: off };
                if !linked {
                    tuple::set_ctid(t, tid);
                }
                if page::add_item(&mut self.page.0, t, Some(off), true) == Some(off) {
                    self.items += 1;
                    return Ok(tid);
                }
            }
            if self.items == 0 {
                break;
            }
            self.flush()?;
        }
        Err(Error::invalid(format!("a tuple of {} bytes does not fit on a page of \"{}\"", t.len(), self.rel.name)))
    }

    /// Writes the page being filled as the next block of the new heap, logged whole.
    fn flush(&mut self) -> Result<()> {
        if self.items == 0 {
            return Ok(());
        }
        let env = self.env;
        let buf = env.pool.extend(self.rel.relfilenode, Fork::Main, Some(&mut self.ring))?;
        let block = buf.block();
        if block.0 != self.counts.new_pages {
            return Err(Error::invalid(format!(
                "new storage of \"{}\" grew to block {} where block {} was expected",
                self.rel.name, block.0, self.counts.new_pages
            )));
        }
        {
            let mut g = buf.write();
            g.0.copy_from_slice(&self.page.0);
            let lsn = log_new_page(env.wal, self.rel.tag(block), &g.0)?;
            page::set_lsn(&mut g.0, lsn);
            buf.mark_dirty();
        }
        drop(buf);
        env.pool.queue_write_behind(self.rel.tag(block));
        self.counts.new_pages += 1;
        self.page = fresh_page();
        self.items = 0;
        Ok(())
    }

    /// Writes the predecessors still waiting (their successors were dead after all) as the
    /// last versions of their rows, each followed by whatever waited for it, then the last page.
    fn finish(mut self) -> Result<RewriteCounts> {
        let mut rest: Vec<Tid> = self.waiting.keys().copied().collect();
        rest.sort_unstable();
        for next in rest {
            // Gone already if it was the predecessor of one written before it here.
            if let Some((tid, mut t)) = self.waiting.remove(&next) {
                self.write_chain(tid, &mut t, false)?;
            }
        }
        self.flush()?;
        Ok(self.counts)
    }
}

fn fresh_page() -> Box<PageBuf> {
    let mut p = Box::new(PageBuf([0; BLCKSZ]));
    page::init(&mut p.0, 0);
    p
}
