//! The database's side of cumulative statistics ([`crate::stats`]): reading the views, and
//! keeping the counters across a clean shutdown.
//!
//! At open, `pg_stat/stats.bin` is taken ([`StatsFile::take`]) before anything runs: after a
//! clean shutdown its database counters seed [`DbCounters`] and the buffer and WAL totals, and
//! its table counters are restored into the catalog entries once the catalog is loaded (tables
//! dropped since are skipped by OID). After a crash it is removed unread, and the counters
//! start from zero with `stats_reset` set to the time of the open. [`Database::close`]
//! writes it again after the shutdown checkpoint, when nothing can change the counters any more.
//!
//! Replication slots' counters (`pg_stat_replication_slots`) live here too: each decoding
//! session adds its reorder buffer's [`ReorderStats`] to its slot's when it ends, creating a
//! slot starts them from zero, dropping it forgets them, and the stats file keeps them by slot
//! name (a slot dropped while the database was down is skipped at open).

use std::collections::BTreeMap;

use super::{Database, DbCounters, DbStats, Inner, Table};
use crate::catalog::{Catalog, FIRST_NORMAL_OID};
use crate::decode::reorderbuffer::ReorderStats;
use crate::decode::slot::ReplicationSlots;
use crate::error::{Error, Result};
use crate::stats::{now_micros, DbTotals, SlotStats, StatsFile, TableStatsSnapshot};

impl Database {
    /// A table's counters (`pg_stat_user_tables`; `pg_stat_sys_tables` for `pg_class`).
    pub fn table_stats(&self, table: &Table) -> TableStatsSnapshot {
        collected(&table.entry)
    }

    /// Every user table's counters with its name, by OID (`pg_stat_user_tables`).
    pub fn all_table_stats(&self) -> Vec<(String, TableStatsSnapshot)> {
        self.inner
            .catalog
            .tables()
            .into_iter()
            .filter(|e| e.rel.oid >= FIRST_NORMAL_OID)
            .map(|e| (e.rel.name.clone(), collected(&e)))
            .collect()
    }
}

impl Database {
    /// `pg_stat_replication_slots`: every replication slot's counters, by name (zero for a slot
    /// that has decoded nothing yet).
    pub fn replication_slot_stats(&self) -> Vec<(String, SlotStats)> {
        let stats = self.inner.slot_stats.lock();
        self.inner
            .slots
            .list()
            .into_iter()
            .map(|d| {
                let s = stats.get(&d.name).copied().unwrap_or_default();
                (d.name, s)
            })
            .collect()
    }

    /// `pg_stat_reset_replication_slot(name)`: zeroes slot `name`'s counters, or every slot's
    /// when `None`, and sets their `stats_reset` to now. Error: no such slot.
    pub fn reset_replication_slot_stats(&self, name: Option<&str>) -> Result<()> {
        let names: Vec<String> = match name {
            Some(n) => {
                if self.inner.slots.lock().get(n).is_none() {
                    return Err(Error::NotFound(format!("replication slot \"{n}\" does not exist")));
                }
                vec![n.to_string()]
            }
            None => self.inner.slots.list().into_iter().map(|d| d.name).collect(),
        };
        let now = now_micros();
        let mut stats = self.inner.slot_stats.lock();
        for n in names {
            stats.insert(n, SlotStats { stats_reset: now, ..SlotStats::default() });
        }
        Ok(())
    }
}

/// Adds a decoding session's counters to slot `name`'s.
///
/// `before` is what the session reported earlier (a session that follows the WAL reports
/// pass by pass, as PostgreSQL's walsender does at transaction ends; a one-off session once,
/// from zero).
pub(super) fn add_slot_stats_since(inner: &Inner, name: &str, r: &ReorderStats, before: &ReorderStats) {
    let mut stats = inner.slot_stats.lock();
    let s = stats.entry(name.to_string()).or_default();
    s.spill_txns += r.spill_txns - before.spill_txns;
    s.spill_count += r.spill_count - before.spill_count;
    s.spill_bytes += r.spill_bytes - before.spill_bytes;
    s.stream_txns += r.stream_txns - before.stream_txns;
    s.stream_count += r.stream_count - before.stream_count;
    s.stream_bytes += r.stream_bytes - before.stream_bytes;
    s.total_txns += r.total_txns - before.total_txns;
    s.total_bytes += r.total_bytes - before.total_bytes;
}

/// A new slot's counters start from zero; a dropped one's are forgotten.
pub(super) fn reset_slot_stats(inner: &Inner, name: &str, exists: bool) {
    let mut stats = inner.slot_stats.lock();
    if exists {
        stats.insert(name.to_string(), SlotStats::default());
    } else {
        stats.remove(name);
    }
}

/// The slot counters a saved file left, for the slots that still exist.
pub(super) fn slot_stats_from(file: Option<&StatsFile>, slots: &ReplicationSlots) -> BTreeMap<String, SlotStats> {
    let live: Vec<String> = slots.list().into_iter().map(|d| d.name).collect();
    file.map(|f| f.slots.iter().filter(|(n, _)| live.contains(n)).cloned().collect()).unwrap_or_default()
}

/// A table's counters after folding in what the heap counted on its own (VM clears, block
/// reads and hits).
fn collected(e: &crate::catalog::TableEntry) -> TableStatsSnapshot {
    e.stats.add_heap_counts(&e.rel.take_counts());
    e.stats.snapshot()
}

pub(super) fn counters_from(t: &DbTotals) -> DbCounters {
    let a = crate::counter::StripedCounter::new;
    DbCounters {
        xact_commit: a(t.xact_commit),
        xact_rollback: a(t.xact_rollback),
        tup_returned: a(t.tup_returned),
        tup_fetched: a(t.tup_fetched),
        tup_inserted: a(t.tup_inserted),
        tup_updated: a(t.tup_updated),
        tup_deleted: a(t.tup_deleted),
        tup_hot_updated: a(t.tup_hot_updated),
        idx_scan: a(t.idx_scan),
        idx_tup_read: a(t.idx_tup_read),
        idx_tup_fetch: a(t.idx_tup_fetch),
        heap_fetches: a(t.heap_fetches),
        heap_fetches_avoided: a(t.heap_fetches_avoided),
    }
}

/// Restores saved table counters into the catalog's entries, by OID.
pub(super) fn restore_tables(catalog: &Catalog, file: &StatsFile) {
    for (oid, snap) in &file.tables {
        if let Some(e) = catalog.get_by_oid(*oid) {
            e.stats.restore(snap);
        }
    }
}

/// The database counters to save, from a [`DbStats`] snapshot.
pub(super) fn totals_of(s: &DbStats) -> DbTotals {
    DbTotals {
        xact_commit: s.xact_commit,
        xact_rollback: s.xact_rollback,
        blks_read: s.blks_read,
        blks_hit: s.blks_hit,
        tup_returned: s.tup_returned,
        tup_fetched: s.tup_fetched,
        tup_inserted: s.tup_inserted,
        tup_updated: s.tup_updated,
        tup_deleted: s.tup_deleted,
        tup_hot_updated: s.tup_hot_updated,
        idx_scan: s.idx_scan,
        idx_tup_read: s.idx_tup_read,
        idx_tup_fetch: s.idx_tup_fetch,
        heap_fetches: s.heap_fetches,
        heap_fetches_avoided: s.heap_fetches_avoided,
        wal_records: s.wal_records,
        wal_fpi: s.wal_fpi,
        wal_bytes: s.wal_bytes,
        stats_reset: s.stats_reset,
        deadlocks: s.deadlocks,
        wal_buffers_full: s.wal_buffers_full,
        wal_write: s.wal_write,
        wal_sync: s.wal_sync,
    }
}

/// Writes `pg_stat/stats.bin` (every table, `pg_class` included, the database counters and
/// the replication slots').
pub(super) fn save(db: &Database) -> Result<()> {
    let inner: &Inner = &db.inner;
    let file = StatsFile {
        db: totals_of(&db.stats()),
        tables: inner.catalog.tables().iter().map(|e| (e.rel.oid, collected(e))).collect(),
        slots: db.replication_slot_stats(),
    };
    file.write(&*inner.fs, &inner.dir)
}
