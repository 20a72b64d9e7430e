//! VACUUM FULL (PostgreSQL's `cluster_rel` without an ordering index): a table rewritten into
//! new storage that holds only what some snapshot may still see, its indexes rebuilt from the
//! copy, and the storage swapped in by the transaction's commit.
//!
//! # How
//!
//! ```text
//!   1. AccessExclusive on the table (readers and writers wait, and wait for it)
//!   2. the storage swap TRUNCATE makes (`truncate.rs`: new file nodes, new pg_class
//!      versions, a new catalog entry), filled instead of empty:
//!        heap:    heap::rewrite copies every tuple not dead to everyone, freezing xmins
//!                 older than the freeze limit, and logs each new page whole (XLOG FPI)
//!        indexes: every copied tuple indexed under its new TID (B-tree bulk build, NEWPAGES)
//!        pg_class: relpages and reltuples of the copy; the table's relfrozenxid the freeze
//!                 limit (no unfrozen xmin precedes it)
//!   3. COMMIT: the old files go after the commit record, as after a TRUNCATE
//! ```
//!
//! Crashes, rollback and PREPARE follow TRUNCATE's rules exactly (the swap is the same
//! `StorageSwap`): before the commit record the new files are orphans, after it the old ones.
//! The visibility map and free space map of the new heap start empty, as PostgreSQL's do; the
//! next VACUUM sets them.
//!
//! # Not done
//!
//! System catalogs are not rewritten (PostgreSQL rewrites them through its relation mapper;
//! `pg_class` here names its own storage): [`Database::vacuum_full`] refuses one by name.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::truncate::{Filled, Refill};
use super::Transaction;
use crate::btree::build::BuildKeys;
use crate::btree::BtreeIndex;
use crate::catalog::{self, IndexDef, TableEntry};
use crate::db::{Database, Inner};
use crate::error::{Error, Interrupt, Result};
use crate::heap::rewrite::{self, RewriteCounts, RewriteCutoffs};
use crate::heap::{self, Relation};
use crate::lmgr::{LockMode, WaitPolicy};
use crate::page::{self, LpFlags};
use crate::types::{BlockNumber, Fork, OffsetNumber, Oid, Tid, Xid};

/// What one VACUUM FULL of a table did (PostgreSQL's VERBOSE lines for it).
#[derive(Clone, Debug)]
pub struct VacuumFullReport {
    pub table: String,
    pub counts: RewriteCounts,
    /// The new `relfrozenxid`: the freeze limit the copy went by, or the old value if that
    /// was newer.
    pub relfrozenxid: Xid,
    pub elapsed: Duration,
    pub cpu_user: Duration,
    pub cpu_system: Duration,
}

impl VacuumFullReport {
    /// The VERBOSE report as PostgreSQL 15 sends it: one INFO message naming the table, then
    /// one with the counts whose detail carries the dead rows kept and the resource usage.
    /// Each element is (message, detail).
    pub fn verbose_messages(&self) -> Vec<(String, Option<String>)> {
        let c = &self.counts;
        vec![
            (format!("vacuuming \"public.{}\"", self.table), None),
            (
                format!(
                    "\"public.{}\": found {} removable, {} nonremovable row versions in {} pages",
                    self.table, c.removed, c.kept, c.old_pages
                ),
                Some(format!(
                    "{} dead row versions cannot be removed yet.\nCPU: user: {:.2} s, system: {:.2} s, elapsed: {:.2} s.",
                    c.recently_dead,
                    self.cpu_user.as_secs_f64(),
                    self.cpu_system.as_secs_f64(),
                    self.elapsed.as_secs_f64()
                )),
            ),
        ]
    }
}

/// VACUUM FULL's options.
#[derive(Clone, Debug, Default)]
pub struct VacuumFullParams {
    /// `FREEZE`: freeze every copied xmin that precedes OldestXmin (a freeze age of 0).
    pub freeze: bool,
    /// `SKIP_LOCKED`: a table whose lock is not free now is [`Error::LockNotAvailable`].
    pub skip_locked: bool,
    /// Checked before the lock is taken and before each page the copy and the index builds
    /// read; a stop rolls the rewrite back (the old storage stays, the new goes).
    pub interrupt: Option<Interrupt>,
}

impl Database {
    /// `VACUUM FULL table`: rewrites it in a transaction of its own (see the module doc).
    pub fn vacuum_full(&self, table: &str, params: &VacuumFullParams) -> Result<VacuumFullReport> {
        let mut tx = self.begin()?;
        let report = tx.vacuum_full(table, params)?;
        tx.commit()?;
        Ok(report)
    }
}

impl Transaction<'_> {
    /// `VACUUM FULL table` as a command of this transaction. Waits for AccessExclusive on the
    /// table (bounded by `lock_timeout`), which it holds to the transaction's end; a rollback
    /// puts the old storage back.
    pub fn vacuum_full(&mut self, table: &str, params: &VacuumFullParams) -> Result<VacuumFullReport> {
        self.active()?;
        if catalog::is_system_catalog(table) {
            return Err(Error::invalid(format!("VACUUM FULL of system catalog \"{table}\" is not supported")));
        }
        let entry = self
            .inner
            .catalog
            .get(table)
            .ok_or_else(|| Error::NotFound(format!("relation \"{table}\" does not exist")))?;
        if let Some(i) = &params.interrupt {
            i.check()?;
        }
        let policy = if params.skip_locked { WaitPolicy::NoWait } else { WaitPolicy::Wait };
        self.lock_rel_with(&entry, LockMode::AccessExclusive, policy)?;
        let entry = self.current(&entry)?;
        self.command(|tx| tx.rewrite_one(&entry, params))
    }

    fn rewrite_one(&mut self, old: &Arc<TableEntry>, params: &VacuumFullParams) -> Result<VacuumFullReport> {
        let inner: &Inner = self.inner;
        let started = Instant::now();
        let cpu0 = crate::vacuum::report::thread_cpu();
        let _ddl = inner.catalog.ddl_lock.lock();
        let pg_class = inner.catalog.get("pg_class").ok_or_else(|| Error::NotFound("pg_class".into()))?;
        self.ensure_xid()?;
        let cutoffs = cutoffs(inner, params.freeze);
        // relfrozenxid never goes back: with a freeze limit older than the table's, every
        // xmin the copy leaves unfrozen still follows the old value.
        let old_frozen = old.relfrozenxid();
        let relfrozenxid = if old_frozen.is_normal() && cutoffs.freeze_limit.precedes(old_frozen) {
            old_frozen
        } else {
            cutoffs.freeze_limit
        };
        let mut copy = Rewritten { inner, cutoffs, relfrozenxid, interrupt: params.interrupt.clone(), counts: None };
        let mut made: Vec<Oid> = Vec::new();
        let new = match self.new_storage(old, &pg_class.rel, &mut made, &mut copy) {
            Ok(new) => new,
            Err(e) => {
                for f in made {
                    let _ = super::truncate::drop_files(inner, f);
                }
                return Err(e);
            }
        };
        inner.catalog.replace(old, &new, inner.xact.next_full_xid());
        self.swaps.push(super::truncate::StorageSwap { depth: self.subxacts.len(), old: old.clone(), new });
        let cpu1 = crate::vacuum::report::thread_cpu();
        Ok(VacuumFullReport {
            table: old.rel.name.clone(),
            counts: copy.counts.unwrap_or_default(),
            relfrozenxid,
            elapsed: started.elapsed(),
            cpu_user: cpu1.0.saturating_sub(cpu0.0),
            cpu_system: cpu1.1.saturating_sub(cpu0.1),
        })
    }
}

/// OldestXmin now, and the freeze limit `vacuum_freeze_min_age` (0 under FREEZE) before it,
/// capped as VACUUM caps it at half of `autovacuum_freeze_max_age`.
fn cutoffs(inner: &Inner, freeze: bool) -> RewriteCutoffs {
    let oldest_xmin = inner.xact.oldest_xmin();
    let config = inner.config.get();
    let min_age = if freeze { 0 } else { config.vacuum_freeze_min_age.min(config.autovacuum_freeze_max_age / 2) };
    let freeze_limit = crate::vacuum::normal_or_first(Xid(oldest_xmin.0.wrapping_sub(min_age)), oldest_xmin);
    RewriteCutoffs { oldest_xmin, freeze_limit }
}

/// VACUUM FULL's filling of the new storage: the copy, then the indexes built from it.
struct Rewritten<'i> {
    inner: &'i Inner,
    cutoffs: RewriteCutoffs,
    relfrozenxid: Xid,
    interrupt: Option<Interrupt>,
    counts: Option<RewriteCounts>,
}

impl Refill for Rewritten<'_> {
    fn heap(&mut self, old: &TableEntry, new: &Relation) -> Result<Filled> {
        let env = self.inner.env();
        let c = rewrite::rewrite(&env, &old.rel, new, self.cutoffs, self.interrupt.as_ref())?;
        self.counts = Some(c);
        Ok(Filled { relpages: Some(c.new_pages), reltuples: c.kept as f64, relfrozenxid: Some(self.relfrozenxid) })
    }

    fn index(&mut self, new: &Relation, def: &IndexDef, btree: &BtreeIndex) -> Result<Filled> {
        let env = self.inner.env();
        let mut keys = btree.new_build_keys();
        entries(self.inner, new, def, self.interrupt.as_ref(), &mut keys)?;
        let n = keys.len();
        btree.rebuild_from(&env, keys)?;
        Ok(Filled { relpages: Some(btree.num_pages(&env)?), reltuples: n as f64, relfrozenxid: None })
    }
}

/// Every tuple of the rewritten heap under index `def`'s key, into `out`: each is a version
/// some snapshot may see, and none is heap-only.
fn entries(
    inner: &Inner,
    rel: &Relation,
    def: &IndexDef,
    interrupt: Option<&Interrupt>,
    out: &mut BuildKeys,
) -> Result<()> {
    let env = inner.env();
    let nblocks = inner.pool.smgr().nblocks(rel.relfilenode, Fork::Main)?;
    let mut key = Vec::with_capacity(def.meta.columns.len());
    for b in 0..nblocks {
        if let Some(i) = interrupt {
            i.check()?;
        }
        let buf = heap::read_page(&env, rel, BlockNumber(b), None)?;
        let g = buf.read();
        let mut refs = Vec::with_capacity(rel.schema.columns.len());
        for o in 1..=page::max_offset(&g.0) {
            let off = OffsetNumber(o);
            if page::item_id(&g.0, off).flags != LpFlags::Normal {
                continue;
            }
            let tid = Tid { block: BlockNumber(b), offset: off };
            let bad = |e: String| heap::corrupt_tuple(rel, tid, &e);
            heap::tuple::deform_tuple_refs(&rel.schema, &rel.missing, page::item(&g.0, off), &mut refs).map_err(bad)?;
            def.key_of_refs_into(&refs, &tid, &mut key).map_err(bad)?;
            out.push(&key, tid)?;
        }
    }
    Ok(())
}
