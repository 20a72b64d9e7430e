//! The database's VACUUM entry points (`VACUUM`, `VACUUM (ONLY_DATABASE_STATS)`, the map
//! and progress views) and what VACUUM borrows of the database: [`Inner::vacuum_env`] hands it
//! the shared parts, and `Inner` answers [`TableChanged`] for autovacuum. VACUUM itself
//! ([`crate::vacuum`]) imports nothing of this module.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{autovacuum, Database, Inner, Table};
use crate::buffer::Buffer;
use crate::catalog::TableEntry;
use crate::error::{Error, Result};
use crate::heap;
use crate::types::{BlockNumber, Fork};
use crate::vacuum::dbstats::DatabaseStatsReport;
use crate::vacuum::{self, ProgressRow, TableChanged, VacuumEnv, VacuumParams, VacuumReport};

impl Inner {
    /// What a VACUUM run in this database borrows of it.
    pub(crate) fn vacuum_env(&self) -> VacuumEnv<'_> {
        VacuumEnv {
            pool: &self.pool,
            wal: &self.wal,
            xact: &self.xact,
            catalog: &self.catalog,
            lmgr: &self.lmgr,
            config: &self.config,
            progress: &self.vacuum_progress,
            shutdown: &self.shutdown,
            changed: self,
        }
    }
}

impl TableChanged for Inner {
    fn table_changed(&self, entry: &TableEntry) {
        autovacuum::note_changed(self, entry);
    }
}

impl Database {
    /// `VACUUM [table]`: vacuums one table, or every table (the catalog included) when `table`
    /// is `None`. Returns one report per table; `params.verbose` only decides what callers
    /// print (see [`VacuumReport::verbose_text`]).
    pub fn vacuum(&self, table: Option<&str>, params: &VacuumParams) -> Result<Vec<VacuumReport>> {
        let inner = self.inner();
        let entries = match table {
            Some(name) => vec![inner
                .catalog
                .get(name)
                .ok_or_else(|| Error::NotFound(format!("relation \"{name}\" does not exist")))?],
            None => inner.catalog.tables(),
        };
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            out.push(vacuum::vacuum_rel(inner.vacuum_env(), &e, params)?);
        }
        Ok(out)
    }

    /// The visibility map bits of every page of a table (`pg_visibility_map`):
    /// `(all_visible, all_frozen)` per block.
    pub fn visibility_map(&self, table: &Table) -> Result<Vec<(bool, bool)>> {
        let inner = self.inner();
        let rel = &table.entry.rel;
        let n = inner.pool.smgr().nblocks(rel.relfilenode, Fork::Main)?;
        (0..n).map(|b| rel.vm.get(&inner.pool, BlockNumber(b)).map(|v| (v.all_visible(), v.all_frozen()))).collect()
    }

    /// The free space map category (free bytes / 32) of every page of a table
    /// (`pg_freespace`).
    pub fn free_space_map(&self, table: &Table) -> Result<Vec<u8>> {
        let inner = self.inner();
        let rel = &table.entry.rel;
        let n = inner.pool.smgr().nblocks(rel.relfilenode, Fork::Main)?;
        (0..n).map(|b| rel.fsm.get(&inner.pool, BlockNumber(b))).collect()
    }

    /// Pins a heap page until the returned guard is dropped, as a cursor parked on the page
    /// does: VACUUM cannot get that page's cleanup lock meanwhile (tests and tools).
    pub fn pin_page(&self, table: &Table, block: u32) -> Result<PagePin<'_>> {
        let inner = self.inner();
        let n = inner.pool.smgr().nblocks(table.entry.rel.relfilenode, Fork::Main)?;
        if block >= n {
            return Err(Error::NotFound(format!("block {block} of \"{}\" does not exist", table.name())));
        }
        Ok(PagePin { _buf: heap::read_page(&inner.env(), &table.entry.rel, BlockNumber(block), None)? })
    }

    /// `pg_stat_progress_vacuum`: one row per VACUUM running now.
    pub fn vacuum_progress(&self) -> Vec<ProgressRow> {
        let inner = self.inner();
        let list = inner.vacuum_progress.lock().clone();
        list.iter()
            .map(|p| {
                let oid = crate::types::Oid(p.relid.load(Ordering::Relaxed));
                ProgressRow {
                    relname: inner.catalog.get_by_oid(oid).map(|e| e.rel.name.clone()).unwrap_or_default(),
                    phase: p.phase().name(),
                    heap_blks_total: p.heap_blks_total.load(Ordering::Relaxed),
                    heap_blks_scanned: p.heap_blks_scanned.load(Ordering::Relaxed),
                    heap_blks_vacuumed: p.heap_blks_vacuumed.load(Ordering::Relaxed),
                    index_vacuum_count: p.index_vacuum_count.load(Ordering::Relaxed),
                    max_dead_tuple_bytes: p.max_dead_tuple_bytes.load(Ordering::Relaxed),
                    dead_tuple_bytes: p.dead_tuple_bytes.load(Ordering::Relaxed),
                    num_dead_item_ids: p.num_dead_item_ids.load(Ordering::Relaxed),
                    indexes_total: p.indexes_total.load(Ordering::Relaxed),
                    indexes_processed: p.indexes_processed.load(Ordering::Relaxed),
                    autovacuum: p.autovacuum.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

/// A pinned heap page (see [`Database::pin_page`]).
pub struct PagePin<'a> {
    _buf: Buffer<'a>,
}

impl Database {
    /// `VACUUM (ONLY_DATABASE_STATS)`: recomputes the database frozen XID by a full scan of
    /// `pg_class` (DDL waits meanwhile), then, as after any VACUUM, moves the XID limits and
    /// truncates CLOG below it, using the older answer should the scan and the incremental
    /// index disagree (a bug that `check` reports).
    pub fn vacuum_database_stats(&self) -> Result<DatabaseStatsReport> {
        let inner = self.inner();
        let _ddl = inner.catalog.ddl_lock.lock();
        let start = Instant::now();
        let env = inner.vacuum_env();
        let scan = vacuum::dbstats::scan_frozen_xids(env, |_, _| {})?;
        let scan_elapsed = start.elapsed();
        let mut incremental = None;
        vacuum::apply_database_frozen_xid(env, |index| {
            incremental = index;
            match (scan.oldest, index) {
                (Some(a), Some(b)) => Some(if b.precedes(a) { b } else { a }),
                (a, b) => a.or(b),
            }
        })?;
        Ok(DatabaseStatsReport {
            scanned_frozen_xid: scan.oldest,
            incremental_frozen_xid: incremental,
            tables_scanned: scan.tables,
            pages_scanned: scan.pages,
            scan_elapsed,
        })
    }
}
