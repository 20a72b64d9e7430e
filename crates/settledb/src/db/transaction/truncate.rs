//! TRUNCATE on [`Transaction`] (PostgreSQL's `ExecuteTruncateGuts` with
//! `RelationSetNewRelfilenumber`): empties tables by giving each, and each of its indexes, new
//! empty storage under a new file node, transactionally.
//!
//! # How
//!
//! For each table, after taking AccessExclusive on all of them (in the order named; a
//! table named twice is truncated once):
//!
//! ```text
//!   1. STORAGE CREATE base/<new heap>, and per index STORAGE CREATE base/<new index> and its
//!      empty metapage (B-tree NEWPAGES), as CREATE INDEX does on an empty table
//!   2. pg_class: the table's and each index's row deleted and inserted again with the new
//!      relfilenode (relpages 0, reltuples -1; the table's relfrozenxid the oldest running
//!      XID), by this transaction (its current subtransaction): ordinary MVCC versions
//!   3. the catalog cache publishes a new entry for the table (same OID, name, options and
//!      statistics, new storage); the old entry is marked superseded, and every handle that
//!      finds its entry superseded looks the table up again
//!   4. under wal_level = logical, one XLOG_HEAP_TRUNCATE record naming every table
//!      (heap::truncate), for logical decoding
//! ```
//!
//! The swap is remembered with the savepoint depth it was made at. At COMMIT the old files
//! go (heap with its VM and FSM forks, and each old index), after the commit record and
//! before the locks are released; at ROLLBACK, or a ROLLBACK TO a savepoint set before it, the
//! old entry is published again and the new files go. The `pg_class` versions follow the
//! (sub)transaction's fate by MVCC alone. Nobody else can see the swap: every reader and
//! writer of a table holds a table lock, which conflicts with AccessExclusive.
//!
//! # Crashes
//!
//! No file is removed before the commit record is durable, and recovery removes, after
//! replay, every file no committed `pg_class` row names (`startup::remove_orphans`, the same
//! rule that finishes a DROP TABLE). A crash before the commit record leaves the new files as
//! orphans; one after it, the old ones: either way exactly one set of files remains, the one
//! the committed catalog names.
//!
//! # PREPARE
//!
//! A prepared transaction's state lists the files to remove at each outcome (the old
//! storage at COMMIT PREPARED, the new at ROLLBACK PREPARED; `xact::twophase`), and recovery
//! keeps both sets while it stays prepared. Finished in the same run, the swaps kept in
//! memory are finished as a COMMIT or ROLLBACK would; finished after a restart, when the
//! catalog cache was loaded with the old storage (the new `pg_class` rows were not
//! committed), a commit publishes each table's entry again from its now committed rows.
//! Either way before the prepared transaction's locks are released.
//!
//! # Not done
//!
//! There are no foreign keys or sequences, so CASCADE and RESTART IDENTITY change nothing
//! but the flags the TRUNCATE record carries.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Transaction;
use crate::btree::BtreeIndex;
use crate::catalog::{self, ClassRow, IndexDef, TableEntry};
use crate::db::{ddl, startup, Index, Inner, Table};
use crate::error::{Error, Result};
use crate::heap::truncate::{TruncateRecord, TRUNCATE_CASCADE, TRUNCATE_RESTART_SEQS, XLOG_HEAP_TRUNCATE};
use crate::heap::tuple::{Column, Schema};
use crate::heap::Relation;
use crate::lmgr::LockMode;
use crate::types::{BlockNumber, Fork, Oid, Tid, Xid};
use crate::wal::{RecordBuilder, Rmgr};

/// TRUNCATE's options (PostgreSQL's `RESTART IDENTITY` and `CASCADE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TruncateOptions {
    pub restart_seqs: bool,
    pub cascade: bool,
}

/// One table's storage swap, undone by a rollback of the (sub)transaction that made it.
pub(in crate::db) struct StorageSwap {
    /// `subxacts.len()` when it was made (the savepoint level it belongs to).
    pub(super) depth: usize,
    pub(super) old: Arc<TableEntry>,
    pub(super) new: Arc<TableEntry>,
}

impl StorageSwap {
    /// The file nodes of an entry's table and indexes.
    fn files(entry: &TableEntry) -> Vec<Oid> {
        let mut v = vec![entry.rel.relfilenode];
        v.extend(entry.indexes.read().iter().map(|d| d.btree.relfilenode()));
        v
    }
}

/// What a table's new storage is filled with: nothing ([`Empty`], TRUNCATE) or the old
/// heap's surviving rows (VACUUM FULL, `super::vacuum_full`).
pub(super) trait Refill {
    /// Fills `new`, the empty heap on `old`'s new storage.
    fn heap(&mut self, old: &TableEntry, new: &Relation) -> Result<Filled>;
    /// Fills `btree`, the new storage (an empty B-tree) of index `def`, from the new heap.
    fn index(&mut self, new: &Relation, def: &IndexDef, btree: &BtreeIndex) -> Result<Filled>;
}

/// What a filled relation's `pg_class` row says of it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Filled {
    /// `relpages`, `None`: 0 with `reltuples` -1 (never vacuumed or analyzed).
    pub relpages: Option<u32>,
    pub reltuples: f64,
    /// A heap's `relfrozenxid` (`None` for an index).
    pub relfrozenxid: Option<Xid>,
}

impl Filled {
    fn stamp(&self, row: &mut ClassRow) {
        if let Some(p) = self.relpages {
            row.relpages = i32::try_from(p).unwrap_or(i32::MAX);
            row.reltuples = self.reltuples;
        }
        if let Some(x) = self.relfrozenxid {
            row.relfrozenxid = x;
        }
    }
}

/// TRUNCATE's filling: none. The new heap's `relfrozenxid` is the oldest running XID, as no
/// row in it can be older.
struct Empty {
    relfrozenxid: Xid,
}

impl Refill for Empty {
    fn heap(&mut self, _old: &TableEntry, _new: &Relation) -> Result<Filled> {
        Ok(Filled { relpages: None, reltuples: -1.0, relfrozenxid: Some(self.relfrozenxid) })
    }

    fn index(&mut self, _new: &Relation, _def: &IndexDef, _btree: &BtreeIndex) -> Result<Filled> {
        Ok(Filled { relpages: None, reltuples: -1.0, relfrozenxid: None })
    }
}

impl Transaction<'_> {
    /// `TRUNCATE tables`: empties them, with their indexes, as one command of this
    /// transaction (see the module doc). Waits for AccessExclusive on each table (bounded by
    /// `lock_timeout`; a deadlock or timeout fails the transaction). Rows this transaction
    /// writes to the tables afterwards are its own as usual; a rollback (or ROLLBACK TO a
    /// savepoint set before) brings every old row and index entry back.
    pub fn truncate(&mut self, tables: &[&str], options: TruncateOptions) -> Result<()> {
        self.active()?;
        if tables.is_empty() {
            return Err(Error::invalid("TRUNCATE needs at least one table"));
        }
        let mut entries: Vec<Arc<TableEntry>> = Vec::new();
        for name in tables {
            if catalog::is_system_catalog(name) {
                return Err(Error::invalid(format!("permission denied: \"{name}\" is a system catalog")));
            }
            let e = self
                .inner
                .catalog
                .get(name)
                .ok_or_else(|| Error::NotFound(format!("relation \"{name}\" does not exist")))?;
            if !entries.iter().any(|x| x.rel.oid == e.rel.oid) {
                entries.push(e);
            }
        }
        for e in &entries {
            self.lock_rel(e, LockMode::AccessExclusive)?;
        }
        // Replaced while we waited (a TRUNCATE that committed)? Work on what is there now.
        let entries = entries.iter().map(|e| self.current(e)).collect::<Result<Vec<_>>>()?;
        self.command(|tx| {
            for e in &entries {
                tx.truncate_one(e)?;
            }
            tx.log_truncate(&entries, options)
        })
    }

    /// Gives one table (locked AccessExclusive) and its indexes new storage.
    fn truncate_one(&mut self, old: &Arc<TableEntry>) -> Result<()> {
        let inner: &Inner = self.inner;
        let _ddl = inner.catalog.ddl_lock.lock();
        let pg_class = inner.catalog.get("pg_class").ok_or_else(|| Error::NotFound("pg_class".into()))?;
        self.ensure_xid()?;
        let mut made: Vec<Oid> = Vec::new();
        let mut empty = Empty { relfrozenxid: inner.xact.oldest_xmin() };
        let r = self.new_storage(old, &pg_class.rel, &mut made, &mut empty);
        let new = match r {
            Ok(new) => new,
            Err(e) => {
                for f in made {
                    let _ = drop_files(inner, f);
                }
                return Err(e);
            }
        };
        inner.catalog.replace(old, &new, inner.xact.next_full_xid());
        self.swaps.push(StorageSwap { depth: self.subxacts.len(), old: old.clone(), new: new.clone() });
        self.counts(&new).truncated = true;
        Ok(())
    }

    /// Steps 1 and 2 of the module doc, the new storage filled by `fill` (empty for
    /// TRUNCATE); `made` collects the file nodes created.
    pub(super) fn new_storage(
        &mut self,
        old: &Arc<TableEntry>,
        pg_class: &Relation,
        made: &mut Vec<Oid>,
        fill: &mut dyn Refill,
    ) -> Result<Arc<TableEntry>> {
        let inner: &Inner = self.inner;
        let smgr = inner.pool.smgr();
        let filenode = inner.catalog.allocate_oid();
        startup::log_create(&inner.wal, smgr, filenode, Fork::Main)?;
        made.push(filenode);
        let rel = Arc::new(
            Relation::new(old.rel.oid, &old.rel.name, filenode, old.rel.schema.clone(), old.rel.fillfactor)
                .with_missing(old.rel.missing.clone()),
        );
        let heap = fill.heap(old, &rel)?;
        let tid = self.rewrite_class_row(pg_class, *old.row.lock(), &old.rel.name, |row| {
            row.relfilenode = filenode;
            heap.stamp(row);
        })?;
        let mut defs = Vec::new();
        for d in old.indexes.read().clone() {
            let ix_node = inner.catalog.allocate_oid();
            startup::log_create(&inner.wal, smgr, ix_node, Fork::Main)?;
            made.push(ix_node);
            let key_schema = Schema {
                columns: d
                    .meta
                    .columns
                    .iter()
                    .filter_map(|&c| old.rel.schema.columns.get(usize::from(c)))
                    .map(|c| Column { name: c.name.clone(), ty: c.ty, nullable: c.nullable })
                    .collect(),
            };
            let btree = Arc::new(ddl::new_btree(d.oid, ix_node, &d.name, &key_schema, d.meta.unique));
            btree.create_empty(&inner.env())?;
            let filled = fill.index(&rel, &d, &btree)?;
            let ix_tid = self.rewrite_class_row(pg_class, *d.row.lock(), &d.name, |row| {
                row.relfilenode = ix_node;
                filled.stamp(row);
            })?;
            defs.push(Arc::new(IndexDef {
                oid: d.oid,
                name: d.name.clone(),
                meta: d.meta.clone(),
                row: parking_lot::Mutex::new(ix_tid),
                created_by: d.created_by,
                btree,
                dropped: parking_lot::RwLock::new(false),
            }));
        }
        let entry = old.with_new_storage(rel, defs, tid, heap.relfrozenxid.unwrap_or(old.relfrozenxid()));
        if let Some(pages) = heap.relpages {
            entry.relpages.store(pages, Ordering::Release);
            *entry.reltuples.lock() = heap.reltuples;
        }
        Ok(Arc::new(entry))
    }

    /// Replaces a `pg_class` row with a new version (`relpages` 0, `reltuples` -1, and what
    /// `change` sets); the new version's TID.
    fn rewrite_class_row(
        &mut self,
        pg_class: &Relation,
        old_tid: Tid,
        name: &str,
        change: impl FnOnce(&mut ClassRow),
    ) -> Result<Tid> {
        let old = self.fetch_raw(pg_class, old_tid)?.ok_or_else(|| {
            Error::corrupted(pg_class.oid, old_tid.block, format!("pg_class row of \"{name}\" not found"))
        })?;
        let mut row = ClassRow::from_values(&old, old_tid)?;
        row.relpages = 0;
        row.reltuples = -1.0;
        change(&mut row);
        if !self.delete_raw(pg_class, old_tid)? {
            return Err(Error::invalid(format!("relation \"{name}\" is being changed by another transaction")));
        }
        self.insert_raw(pg_class, &row.to_values())
    }

    /// Step 4: the XLOG_HEAP_TRUNCATE record, under `wal_level = logical`.
    fn log_truncate(&mut self, entries: &[Arc<TableEntry>], options: TruncateOptions) -> Result<()> {
        let wal = &self.inner.wal;
        if !wal.logical() {
            return Ok(());
        }
        let xid = self.ensure_xid()?;
        let top = self.xid().unwrap_or(xid);
        let mut flags = 0;
        if options.cascade {
            flags |= TRUNCATE_CASCADE;
        }
        if options.restart_seqs {
            flags |= TRUNCATE_RESTART_SEQS;
        }
        let rec = TruncateRecord { flags, rels: entries.iter().map(|e| e.rel.oid).collect() };
        wal.insert(&RecordBuilder {
            toplevel_xid: if top != xid { top } else { Xid::INVALID },
            rmgr: Rmgr::Heap,
            info: XLOG_HEAP_TRUNCATE,
            xid,
            blocks: vec![],
            main_data: rec.encode(),
        })?;
        Ok(())
    }

    /// The table's entry now: `entry` unless a TRUNCATE replaced it (this transaction's, or
    /// one that committed before this transaction locked the table). Hot path: one atomic
    /// load when nothing was replaced.
    pub(super) fn current(&self, entry: &Arc<TableEntry>) -> Result<Arc<TableEntry>> {
        if !entry.superseded.load(Ordering::Acquire) {
            return Ok(entry.clone());
        }
        self.inner
            .catalog
            .get_by_oid(entry.rel.oid)
            .ok_or_else(|| Error::NotFound(format!("relation \"{}\" does not exist", entry.rel.name)))
    }

    /// A handle on the table's current entry (see [`Transaction::current`]).
    pub(super) fn current_table(&self, table: &Table) -> Result<Table> {
        Ok(Table { entry: self.current(&table.entry)? })
    }

    /// A handle on the index in its table's current entry.
    pub(super) fn current_index(&self, index: &Index) -> Result<Index> {
        if !index.table.superseded.load(Ordering::Acquire) {
            return Ok(index.clone());
        }
        let table = self.current(&index.table)?;
        let def = table
            .indexes
            .read()
            .iter()
            .find(|d| d.oid == index.def.oid)
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("index \"{}\" does not exist", index.def.name)))?;
        Ok(Index { def, table })
    }

    /// PREPARE: the files its swaps leave to remove at each outcome.
    pub(super) fn prepared_drops(&self) -> crate::xact::prepared::PreparedDrops {
        let mut d = crate::xact::prepared::PreparedDrops::default();
        for s in &self.swaps {
            d.at_commit.extend(StorageSwap::files(&s.old));
            d.at_abort.extend(StorageSwap::files(&s.new));
        }
        d
    }

    /// At COMMIT (after the commit record): the replaced storage goes. A file that cannot be
    /// removed now is an orphan the next startup removes; the commit stands.
    pub(super) fn finish_swaps_committed(&mut self) {
        for s in std::mem::take(&mut self.swaps) {
            for f in StorageSwap::files(&s.old) {
                let _ = drop_files(self.inner, f);
            }
        }
    }

    /// At ROLLBACK, or ROLLBACK TO a savepoint at index `depth - 1`: the swaps made at
    /// `depth` or deeper are undone, newest first (the old entry published again, the new
    /// storage removed).
    pub(super) fn undo_swaps_from(&mut self, depth: usize) {
        while self.swaps.last().is_some_and(|s| s.depth >= depth) {
            let Some(s) = self.swaps.pop() else { break };
            self.inner.catalog.replace(&s.new, &s.old, self.inner.xact.next_full_xid());
            for f in StorageSwap::files(&s.new) {
                let _ = drop_files(self.inner, f);
            }
        }
    }

    /// RELEASE merges savepoints deeper than `depth` into it: their swaps now belong to it.
    pub(super) fn merge_swaps_into(&mut self, depth: usize) {
        for s in &mut self.swaps {
            s.depth = s.depth.min(depth);
        }
    }
}

impl crate::db::Database {
    /// `TRUNCATE tables` outside a transaction block: a transaction of its own, committed.
    pub fn truncate(&self, tables: &[&str], options: TruncateOptions) -> Result<()> {
        let mut tx = self.begin()?;
        tx.truncate(tables, options)?;
        tx.commit()
    }
}

/// COMMIT PREPARED (`commit`) or ROLLBACK PREPARED of `xid`, after its outcome is logged and
/// before its locks are released: its TRUNCATEs' storage swaps are finished (see the module
/// doc) and `drops`, its state's files for this outcome, removed. A file that cannot be
/// removed now is an orphan the next startup removes.
pub(in crate::db) fn finish_prepared_storage(
    inner: &Inner,
    xid: crate::types::FullXid,
    commit: bool,
    drops: &[Oid],
) -> Result<()> {
    let swaps = inner.prepared_swaps.lock().remove(&xid);
    match swaps {
        Some(swaps) if !commit => {
            for s in swaps.iter().rev() {
                inner.catalog.replace(&s.new, &s.old, inner.xact.next_full_xid());
            }
        }
        Some(_) => {}
        None if commit && !drops.is_empty() => {
            // After a restart: the cache holds the storage being removed.
            for e in inner.catalog.tables() {
                if drops.contains(&e.rel.relfilenode) {
                    republish(inner, &e)?;
                }
            }
        }
        None => {}
    }
    for &f in drops {
        let _ = drop_files(inner, f);
    }
    Ok(())
}

/// Publishes table `old`'s entry again from its committed `pg_class` rows (its own and its
/// indexes'): the storage a TRUNCATE, prepared before a restart and committed since, gave it.
fn republish(inner: &Inner, old: &Arc<TableEntry>) -> Result<()> {
    let oid = old.rel.oid;
    let mut table = None;
    let mut defs = Vec::new();
    crate::catalog::for_each_class_row(&inner.env(), |row, tid| {
        match row.kind {
            catalog::RelKind::Table if row.oid == oid => table = Some((row, tid)),
            catalog::RelKind::Index if row.index.as_ref().is_some_and(|m| m.table == oid) => {
                defs.push(startup::index_def(&row, tid)?);
            }
            _ => {}
        }
        Ok(())
    })?;
    let (row, tid) = table.ok_or_else(|| {
        Error::corrupted(
            catalog::PG_CLASS_OID,
            BlockNumber(0),
            format!("no committed row for table \"{}\"", old.rel.name),
        )
    })?;
    let rel = Arc::new(Relation::new(oid, &old.rel.name, row.relfilenode, old.rel.schema.clone(), old.rel.fillfactor));
    let new = Arc::new(old.with_new_storage(rel, defs, tid, row.relfrozenxid));
    inner.catalog.replace(old, &new, inner.xact.next_full_xid());
    Ok(())
}

/// Drops a relation's buffers (every fork) and removes its files.
pub(super) fn drop_files(inner: &Inner, relfilenode: Oid) -> Result<()> {
    inner.pool.drop_relation_buffers(relfilenode, None, BlockNumber(0))?;
    inner.pool.smgr().unlink(relfilenode)
}
