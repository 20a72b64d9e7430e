//! Verifiers of the engine's invariants (PostgreSQL's `amcheck` and `pg_visibility` checks,
//! rewritten), run by `settle check` and at the end of stateful tests.
//!
//! For every table and every page, [`check_database`] verifies:
//!
//! * the page's checksum and header, and every line pointer's bounds (`page::verify`,
//!   `page::validate_items`);
//! * every tuple header parses and its data decodes with the table's schema;
//! * every normal `xmin`/`xmax` not marked frozen lies in `[relfrozenxid, next XID)`
//!   (invariant 5: nothing older than relfrozenxid survives unfrozen);
//! * hint bits agree with CLOG: `XMIN_COMMITTED` only on committed XIDs, `XMIN_INVALID` only on
//!   aborted ones, and likewise for `xmax`;
//! * HOT chains: a REDIRECT points at a heap-only tuple on the same page; a `HOT_UPDATED`
//!   tuple's successor is a heap-only tuple whose `xmin` is its `xmax` (unless that updater
//!   aborted and the successor was pruned); a heap-only tuple is reachable from a root unless
//!   its inserter aborted;
//! * visibility (invariant 4): a page with `PD_ALL_VISIBLE`, or whose visibility-map bit says
//!   ALL_VISIBLE, holds only tuples visible to everyone (inserted by a committed transaction
//!   older than `OldestXmin`, or frozen, and not deleted by one that did not abort); a map bit
//!   ALL_VISIBLE needs `PD_ALL_VISIBLE` on the page (the opposite, flag without bit, is allowed);
//!   ALL_FROZEN needs ALL_VISIBLE and every tuple frozen (xmin frozen, no xmax); and no bit is
//!   set for a page past the heap's end;
//! * WAL before data (invariant 1): the copy of every page *on disk* has an LSN no later than
//!   the WAL flushed so far;
//!
//! for every index (B-tree structure is `BtreeIndex::check`'s), that
//!
//! * no entry points to a heap line pointer that is LP_UNUSED or beyond the page (invariant 3);
//! * every row version that is not dead to everyone is reachable through the index: its HOT
//!   chain's root has an entry under its key;
//!
//! for the catalog, that the database frozen XID is the minimum relfrozenxid; and for the
//! transaction state, that `pg_subtrans` agrees with the CLOG and the proc array, and every
//! prepared transaction is in progress in the CLOG and running (`xact::verify`).
//!
//! Each table and each index is checked under the table's ShareUpdateExclusive lock, so no
//! VACUUM changes it halfway through; writers are not held off, so a check is exact only when
//! none runs (the end of a test).
//!
//! Problems are collected, not returned as errors, so one run reports all of them; an I/O error
//! that stops the check is returned as an error.

use std::collections::HashMap;
use std::fmt;

use crate::buffer::BufferPool;
use crate::catalog::{IndexDef, TableEntry};
use crate::db::{Database, Inner};
use crate::error::{Error, Result};
use crate::heap::tuple::Value;
use crate::heap::tuple::{
    TupleHeader, HEAP_HOT_UPDATED, HEAP_ONLY_TUPLE, HEAP_XMAX_COMMITTED, HEAP_XMAX_INVALID, HEAP_XMAX_LOCK_ONLY,
    HEAP_XMIN_COMMITTED, HEAP_XMIN_FROZEN, HEAP_XMIN_INVALID,
};
use crate::heap::visibility::{satisfies_vacuum, VacuumStatus};
use crate::heap::Relation;
use crate::lmgr::{LockMode, LockOwner, WaitPolicy};
use crate::page::{self, LpFlags, PageBuf, BLCKSZ};
use crate::types::{BlockNumber, Fork, FullXid, OffsetNumber, Oid, Tid, Xid};
use crate::vm::VmBits;
use crate::xact::{TransactionManager, XidStatus};

/// What a check found.
#[derive(Debug, Default, Clone)]
pub struct CheckReport {
    pub tables: usize,
    pub pages: u64,
    pub tuples: u64,
    pub problems: Vec<String>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.problems {
            writeln!(f, "{p}")?;
        }
        write!(
            f,
            "checked {} tables, {} pages, {} tuples: {}",
            self.tables,
            self.pages,
            self.tuples,
            if self.problems.is_empty() {
                "no problems".to_string()
            } else {
                format!("{} problems", self.problems.len())
            }
        )
    }
}

/// Checks every table of an open database.
pub fn check_database(db: &Database) -> Result<CheckReport> {
    let inner = db.inner();
    let mut report = CheckReport::default();
    let next = inner.xact.next_full_xid();
    let cut_short = inner.pool.smgr().cut_short();
    for c in &cut_short {
        report.problems.push(format!("relation {}: {c}", crate::db::startup::relation_name(&inner.catalog, c.rel)));
    }
    let owner = inner.lmgr.new_owner("check");
    for entry in inner.catalog.tables() {
        let _vacuum_held_off = HoldOffVacuum::take(inner, &owner, entry.rel.oid)?;
        report.tables += 1;
        let ctx = Ctx { xact: &inner.xact, rel: &entry.rel, relfrozenxid: entry.relfrozenxid(), next };
        let nblocks = inner.pool.smgr().nblocks(entry.rel.relfilenode, Fork::Main)?;
        // Blocks of a file cut short are one problem (above), not one per block.
        let missing = cut_short.iter().find(|c| c.rel == entry.rel.relfilenode).map_or(0..0, |c| c.blocks..c.expected);
        let mut disk = PageBuf([0; BLCKSZ]);
        let mut bits_in_heap = 0u64;
        for b in missing.clone() {
            // The map still describes the missing pages: their bits are not past the end.
            let bits = entry.rel.vm.get(&inner.pool, BlockNumber(b)).unwrap_or(VmBits::NONE);
            bits_in_heap += u64::from(bits.0.count_ones());
        }
        for b in (0..nblocks).filter(|b| !missing.contains(b)) {
            report.pages += 1;
            let tag = entry.rel.tag(BlockNumber(b));
            // The flushed LSN is read after the page: the check's own reads may evict (and so
            // flush WAL for and write) pages as it goes, and the flushed LSN only grows.
            let on_disk = inner.pool.smgr().read(tag, &mut disk.0).is_ok() && !page::is_new(&disk.0);
            let flushed = inner.wal.flushed_lsn();
            if on_disk && page::lsn(&disk.0) > flushed {
                report.problems.push(format!(
                    "relation \"{}\" block {b}: page on disk has LSN {} beyond the flushed WAL {flushed}",
                    entry.rel.name,
                    page::lsn(&disk.0)
                ));
            }
            let buf = match inner.pool.read(entry.rel.tag(BlockNumber(b)), None) {
                Ok(buf) => buf,
                Err(e) => {
                    report.problems.push(e.to_string());
                    continue;
                }
            };
            let g = buf.read();
            let bits = match entry.rel.vm.get(&inner.pool, BlockNumber(b)) {
                Ok(bits) => bits,
                Err(e) => {
                    report.problems.push(format!("relation \"{}\" visibility map: {e}", entry.rel.name));
                    VmBits::NONE
                }
            };
            bits_in_heap += u64::from(bits.0.count_ones());
            match ctx.check_page(&g.0, BlockNumber(b), bits, &mut report.problems) {
                Ok(n) => report.tuples += n,
                Err(e) => report.problems.push(damage(e)?),
            }
        }
        check_map_tail(&inner.pool, &entry.rel, nblocks, bits_in_heap, &mut report.problems);
    }
    for def in inner.catalog.all_indexes() {
        let Some(table) = inner.catalog.get_by_oid(def.meta.table) else {
            report.problems.push(format!("index \"{}\": its table {} does not exist", def.name, def.meta.table));
            continue;
        };
        let _vacuum_held_off = HoldOffVacuum::take(inner, &owner, table.rel.oid)?;
        if let Err(e) = check_index(db, &table, &def, &mut report.problems) {
            report.problems.push(format!("index \"{}\": {}", def.name, damage(e)?));
        }
    }
    check_frozen_xids(inner, &mut report.problems)?;
    report.problems.extend(inner.xact.verify()?);
    Ok(report)
}

/// The table's ShareUpdateExclusive lock, held while one table or one index is checked, and
/// released on drop: a VACUUM (which takes the same lock; autovacuum skips the table) cannot
/// run meanwhile. Without it the check raced an autovacuum that was still running: it read an
/// index's entries, then VACUUM removed some of them and set their heap items unused, and the
/// check reported entries pointing to unused items that were no longer there (found by `settle
/// stress` in CI). Writers (RowExclusive, prepared transactions' too) are not held off.
struct HoldOffVacuum<'a> {
    inner: &'a Inner,
    owner: &'a LockOwner,
}

impl<'a> HoldOffVacuum<'a> {
    fn take(inner: &'a Inner, owner: &'a LockOwner, rel: Oid) -> Result<Self> {
        inner.lmgr.lock(owner, rel, LockMode::ShareUpdateExclusive, WaitPolicy::Wait, inner.config.lock_timeout())?;
        Ok(HoldOffVacuum { inner, owner })
    }
}

impl Drop for HoldOffVacuum<'_> {
    fn drop(&mut self) {
        self.inner.lmgr.release_all(self.owner);
    }
}

/// A damaged page met on the way (a checksum failure, a page that cannot be decoded) becomes
/// one of the report's problems, so one bad block does not hide the rest of the database, as
/// `pg_amcheck` goes on after a corrupt page; any other error (I/O, a poisoned engine) stops
/// the check.
fn damage(e: Error) -> Result<String> {
    match e {
        e @ Error::Corrupted { .. } => Ok(e.to_string()),
        e => Err(e),
    }
}

/// Invariant 5 for the catalog: the database frozen XID the incremental index holds is the one
/// a full scan of `pg_class` on disk computes (`VACUUM (ONLY_DATABASE_STATS)`'s reference), every
/// table's cached relfrozenxid is its row's, and CLOG was not truncated above it.
fn check_frozen_xids(inner: &crate::db::Inner, out: &mut Vec<String>) -> Result<()> {
    let mut rows = 0usize;
    let scan = crate::vacuum::dbstats::scan_frozen_xids(inner.vacuum_env(), |oid, x| {
        rows += 1;
        match inner.catalog.get_by_oid(oid) {
            None => out.push(format!("pg_class row of table {oid} has no catalog cache entry")),
            Some(e) if e.relfrozenxid() != x => out.push(format!(
                "relation \"{}\": relfrozenxid {} in the cache, {x} in pg_class",
                e.rel.name,
                e.relfrozenxid()
            )),
            Some(_) => {}
        }
    })?;
    let cached = inner.catalog.table_count();
    if rows != cached {
        out.push(format!("pg_class has {rows} table rows, the catalog cache {cached} tables"));
    }
    let incremental = inner.catalog.database_frozen_xid();
    if scan.oldest != incremental {
        out.push(format!(
            "database frozen XID {incremental:?} (incremental) differs from {:?} (full scan of pg_class)",
            scan.oldest
        ));
    }
    let limit = inner.xact.limits().oldest_xid;
    if let Some(oldest) = scan.oldest {
        if oldest.precedes(limit) {
            out.push(format!(
                "XID limits use database frozen XID {limit}, newer than the oldest relfrozenxid {oldest}"
            ));
        }
    }
    Ok(())
}

struct Ctx<'a> {
    xact: &'a TransactionManager,
    rel: &'a Relation,
    relfrozenxid: Xid,
    next: FullXid,
}

impl Ctx<'_> {
    fn problem(&self, out: &mut Vec<String>, tid: Tid, what: String) {
        out.push(format!("relation \"{}\" tuple {tid}: {what}", self.rel.name));
    }

    fn check_xid(&self, out: &mut Vec<String>, tid: Tid, which: &str, xid: Xid) {
        if !xid.is_normal() {
            return;
        }
        if xid.precedes(self.relfrozenxid) {
            self.problem(out, tid, format!("{which} {xid} precedes relfrozenxid {}", self.relfrozenxid));
        }
        if xid.follows_or_equals(self.next.xid()) {
            self.problem(out, tid, format!("{which} {xid} is not before the next XID {}", self.next.xid()));
        }
    }

    fn check_hints(&self, out: &mut Vec<String>, tid: Tid, h: &TupleHeader<'_>) -> Result<()> {
        let m = h.infomask();
        let frozen = m & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN;
        if !frozen && h.xmin().is_normal() {
            let st = self.xact.status(h.xmin())?;
            if m & HEAP_XMIN_COMMITTED != 0 && st != XidStatus::Committed {
                self.problem(out, tid, format!("XMIN_COMMITTED set but xmin {} is {st:?}", h.xmin()));
            }
            if m & HEAP_XMIN_INVALID != 0 && st == XidStatus::Committed {
                self.problem(out, tid, format!("XMIN_INVALID set but xmin {} committed", h.xmin()));
            }
        }
        if h.xmax().is_normal() && m & HEAP_XMAX_INVALID == 0 {
            let st = self.xact.status(h.xmax())?;
            if m & HEAP_XMAX_COMMITTED != 0 && st != XidStatus::Committed {
                self.problem(out, tid, format!("XMAX_COMMITTED set but xmax {} is {st:?}", h.xmax()));
            }
        }
        Ok(())
    }

    /// Checks one page, whose visibility-map bits are `bits`; returns how many tuples it holds.
    fn check_page(&self, p: &[u8], block: BlockNumber, bits: VmBits, out: &mut Vec<String>) -> Result<u64> {
        if page::is_new(p) {
            if bits != VmBits::NONE {
                out.push(format!(
                    "relation \"{}\" block {block}: visibility map says {bits} of a new page",
                    self.rel.name
                ));
            }
            return Ok(0);
        }
        if let Err(e) = page::validate_items(p, self.rel.oid, block) {
            out.push(e.to_string());
            return Ok(0);
        }
        if let Some(what) = crate::vm::flags_disagreement(bits, page::flags(p)) {
            out.push(format!("relation \"{}\" block {block}: {what}", self.rel.name));
        }
        let max = page::max_offset(p);
        let mut reached = vec![false; usize::from(max) + 1];
        let mut tuples = 0;
        let all_visible = page::flags(p) & page::PD_ALL_VISIBLE != 0;
        let horizon = self.xact.oldest_xmin();
        for o in 1..=max {
            let off = OffsetNumber(o);
            let tid = Tid { block, offset: off };
            let lp = page::item_id(p, off);
            match lp.flags {
                LpFlags::Redirect => {
                    let target = OffsetNumber(lp.off);
                    if target.0 == 0 || target.0 > max || !self.is_heap_only(p, target) {
                        self.problem(out, tid, format!("REDIRECT to {target}, which is not a heap-only tuple"));
                    } else {
                        reached[usize::from(target.0)] = true;
                    }
                }
                LpFlags::Normal => {
                    tuples += 1;
                    let t = page::item(p, off);
                    let Some(h) = TupleHeader::parse(t) else {
                        self.problem(out, tid, "invalid tuple header".into());
                        continue;
                    };
                    if let Err(e) = self.rel.deform(t) {
                        self.problem(out, tid, format!("data does not decode: {e}"));
                    }
                    if h.infomask() & HEAP_XMIN_FROZEN != HEAP_XMIN_FROZEN {
                        self.check_xid(out, tid, "xmin", h.xmin());
                    }
                    if h.infomask() & HEAP_XMAX_INVALID == 0 {
                        self.check_xid(out, tid, "xmax", h.xmax());
                    }
                    self.check_hints(out, tid, &h)?;
                    self.check_hot_link(p, tid, &h, &mut reached, out)?;
                    self.check_all_visible(out, tid, &h, all_visible, bits, horizon)?;
                }
                LpFlags::Dead | LpFlags::Unused => {}
            }
        }
        for o in 1..=max {
            let off = OffsetNumber(o);
            if self.is_heap_only(p, off) && !reached[usize::from(o)] {
                let h = TupleHeader::parse(page::item(p, off));
                let inserter_aborted = match h {
                    Some(h) => self.xact.status(h.xmin())? == XidStatus::Aborted,
                    None => false,
                };
                if !inserter_aborted {
                    self.problem(out, Tid { block, offset: off }, "heap-only tuple not reachable from any root".into());
                }
            }
        }
        Ok(tuples)
    }

    /// A tuple on a page that `PD_ALL_VISIBLE` or the visibility map calls all-visible (or
    /// all-frozen) must be so.
    fn check_all_visible(
        &self,
        out: &mut Vec<String>,
        tid: Tid,
        h: &TupleHeader<'_>,
        page_all_visible: bool,
        bits: VmBits,
        horizon: Xid,
    ) -> Result<()> {
        if (page_all_visible || bits.all_visible()) && !visible_to_all(h, horizon, self.xact)? {
            if page_all_visible {
                self.problem(out, tid, "page is marked all-visible but this tuple is not visible to all".into());
            }
            if bits.all_visible() {
                self.problem(out, tid, "visibility map says ALL_VISIBLE but this tuple is not visible to all".into());
            }
        }
        if bits.all_frozen() && !is_frozen(h) {
            self.problem(
                out,
                tid,
                format!(
                    "visibility map says ALL_FROZEN but this tuple is not frozen (xmin {}, xmax {})",
                    h.xmin(),
                    h.xmax()
                ),
            );
        }
        Ok(())
    }

    fn is_heap_only(&self, p: &[u8], off: OffsetNumber) -> bool {
        page::item_id(p, off).flags == LpFlags::Normal
            && TupleHeader::parse(page::item(p, off)).is_some_and(|h| h.infomask2() & HEAP_ONLY_TUPLE != 0)
    }

    fn check_hot_link(
        &self,
        p: &[u8],
        tid: Tid,
        h: &TupleHeader<'_>,
        reached: &mut [bool],
        out: &mut Vec<String>,
    ) -> Result<()> {
        if h.infomask2() & HEAP_HOT_UPDATED == 0 {
            return Ok(());
        }
        if h.infomask() & HEAP_XMAX_LOCK_ONLY != 0 {
            self.problem(out, tid, "HOT_UPDATED with a lock-only xmax".into());
            return Ok(());
        }
        let next = h.ctid();
        if next.block != tid.block {
            self.problem(out, tid, format!("HOT_UPDATED but its successor {next} is on another page"));
            return Ok(());
        }
        let updater_aborted = self.xact.status(h.xmax())? == XidStatus::Aborted;
        let ok = next.offset.0 >= 1 && next.offset.0 <= page::max_offset(p) && self.is_heap_only(p, next.offset);
        if ok {
            let succ = TupleHeader::parse(page::item(p, next.offset));
            if succ.is_some_and(|s| s.xmin() == h.xmax()) {
                reached[usize::from(next.offset.0)] = true;
                return Ok(());
            }
        }
        if !updater_aborted {
            self.problem(out, tid, format!("HOT_UPDATED by {} but {next} is not its heap-only successor", h.xmax()));
        }
        Ok(())
    }
}

/// Whether every snapshot, now and later, sees the tuple (what an all-visible page promises):
/// inserted by a committed transaction older than the `horizon` (`OldestXmin`) or frozen, and
/// not deleted, or deleted only by a transaction that aborted or merely locked it.
fn visible_to_all(h: &TupleHeader<'_>, horizon: Xid, xact: &TransactionManager) -> Result<bool> {
    if satisfies_vacuum(h, horizon, xact)? != VacuumStatus::Live {
        return Ok(false);
    }
    Ok(h.infomask() & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN || h.xmin().precedes(horizon))
}

/// Whether the tuple needs no freezing, now or ever (what an all-frozen page promises): its
/// xmin is frozen (or a permanent XID) and its xmax is no normal XID (freezing sets a
/// meaningless xmax to InvalidTransactionId).
fn is_frozen(h: &TupleHeader<'_>) -> bool {
    let xmin_frozen = h.infomask() & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN || !h.xmin().is_normal();
    xmin_frozen && !h.xmax().is_normal()
}

/// Bits set in the visibility map for heap pages at or past `nblocks` (the heap's end): the map
/// would describe pages that do not exist. `bits_in_heap` counts those set below the end.
fn check_map_tail(pool: &BufferPool, rel: &Relation, nblocks: u32, bits_in_heap: u64, out: &mut Vec<String>) {
    match rel.vm.count(pool) {
        Ok((visible, frozen)) if visible + frozen > bits_in_heap => out.push(format!(
            "relation \"{}\": visibility map has {} bits set for pages past the heap's end (block {nblocks})",
            rel.name,
            visible + frozen - bits_in_heap
        )),
        Ok(_) => {}
        Err(e) => out.push(format!("relation \"{}\" visibility map: {e}", rel.name)),
    }
}

/// Checks one index against its table.
fn check_index(db: &Database, table: &TableEntry, def: &IndexDef, out: &mut Vec<String>) -> Result<()> {
    let inner = db.inner();
    let env = inner.env();
    let (problems, mut entries) = def.btree.check(&env)?;
    out.extend(problems.into_iter().map(|p| format!("index \"{}\": {p}", def.name)));
    let rel = &table.rel;
    let nblocks = inner.pool.smgr().nblocks(rel.relfilenode, Fork::Main)?;
    // Entries in heap order, so each heap page is read once.
    entries.sort_by_key(|e| e.tid);
    let mut by_tid: HashMap<Tid, Vec<Vec<Value>>> = HashMap::new();
    let mut i = 0;
    while i < entries.len() {
        let block = entries[i].tid.block;
        let page = if block.0 < nblocks { Some(inner.pool.read(rel.tag(block), None)?) } else { None };
        while i < entries.len() && entries[i].tid.block == block {
            let e = &entries[i];
            let ok = page.as_ref().is_some_and(|buf| {
                let g = buf.read();
                e.tid.offset.0 >= 1
                    && e.tid.offset.0 <= page::max_offset(&g.0)
                    && page::item_id(&g.0, e.tid.offset).flags != LpFlags::Unused
            });
            if !ok {
                out.push(format!(
                    "index \"{}\": entry {} points to heap tuple {} of \"{}\", which is unused or out of range",
                    def.name,
                    crate::heap::render_values(&e.key),
                    e.tid,
                    rel.name
                ));
            }
            by_tid.entry(e.tid).or_default().push(e.key.clone());
            i += 1;
        }
    }
    // Every version not dead to everyone is reachable under its key.
    let horizon = inner.xact.oldest_xmin();
    for b in 0..nblocks {
        let buf = inner.pool.read(rel.tag(BlockNumber(b)), None)?;
        let g = buf.read();
        if page::is_new(&g.0) || page::validate_items(&g.0, rel.oid, BlockNumber(b)).is_err() {
            continue; // reported by the heap check
        }
        for o in 1..=page::max_offset(&g.0) {
            let root = OffsetNumber(o);
            let lp = page::item_id(&g.0, root);
            let is_root = lp.flags == LpFlags::Redirect
                || (lp.flags == LpFlags::Normal
                    && TupleHeader::parse(page::item(&g.0, root))
                        .is_some_and(|h| h.infomask2() & HEAP_ONLY_TUPLE == 0));
            if !is_root {
                continue;
            }
            let tid = Tid { block: BlockNumber(b), offset: root };
            for m in crate::heap::hot::chain(&g.0, root) {
                let t = page::item(&g.0, m);
                let Some(h) = TupleHeader::parse(t) else { continue };
                if matches!(
                    satisfies_vacuum(&h, horizon, &inner.xact)?,
                    VacuumStatus::Dead | VacuumStatus::RecentlyDead
                ) {
                    continue;
                }
                let Ok(vals) = rel.deform(t) else { continue };
                let key = def.key_of(&vals);
                if !by_tid.get(&tid).is_some_and(|keys| keys.contains(&key)) {
                    out.push(format!(
                        "index \"{}\": row {} of \"{}\" (root {tid}) has no entry for key {}",
                        def.name,
                        Tid { block: BlockNumber(b), offset: m },
                        rel.name,
                        crate::heap::render_values(&key)
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
