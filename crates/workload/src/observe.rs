//! What a run samples from its target, in one shape for every target.
//!
//! The figures are PostgreSQL's, under its names: `pg_stat_database` (per database),
//! `pg_stat_user_tables` and `pg_statio_user_tables` (per table), `pg_stat_wal`, and the age of
//! `pg_class.relfrozenxid`. A figure a target cannot give is `None` (PostgreSQL 15 counts
//! neither pages frozen nor visibility-map bits cleared).
//!
//! An [`Observer`] samples one target and hands out its log: [`EmbeddedObserver`] over an
//! open [`Database`] (its statistics and its in-memory log), [`PgObserver`] over a PostgreSQL
//! server by URL (its statistics views and its server log file; see [`crate::observe_pg`]).

use serde::Serialize;
use settledb::Database;

pub use crate::observe_pg::PgObserver;

/// A target being watched during a run.
pub trait Observer {
    /// One sample of the target's figures.
    fn observe(&mut self) -> anyhow::Result<Observation>;
    /// The log entries (each a message and its continuation lines, joined with `\n`) written
    /// since the last call.
    fn take_log(&mut self) -> anyhow::Result<Vec<String>>;
}

/// Watches an embedded database.
pub struct EmbeddedObserver<'a> {
    db: &'a Database,
}

impl<'a> EmbeddedObserver<'a> {
    pub fn new(db: &'a Database) -> EmbeddedObserver<'a> {
        EmbeddedObserver { db }
    }
}

impl Observer for EmbeddedObserver<'_> {
    fn observe(&mut self) -> anyhow::Result<Observation> {
        observe_embedded(self.db)
    }

    fn take_log(&mut self) -> anyhow::Result<Vec<String>> {
        Ok(self.db.take_log())
    }
}

/// The cumulative counters of the database (they only grow; a run reports differences).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DbCounters {
    pub xact_commit: u64,
    pub xact_rollback: u64,
    pub blks_read: u64,
    pub blks_hit: u64,
    pub tup_returned: u64,
    pub tup_fetched: u64,
    pub tup_inserted: u64,
    pub tup_updated: u64,
    pub tup_deleted: u64,
    /// Heap blocks of user tables read and found in shared buffers (pg_statio_user_tables).
    pub heap_blks_read: u64,
    pub heap_blks_hit: u64,
    pub wal_records: u64,
    pub wal_fpi: u64,
    pub wal_bytes: u64,
}

impl DbCounters {
    /// `self - earlier`, field by field.
    pub fn since(&self, earlier: &DbCounters) -> DbCounters {
        DbCounters {
            xact_commit: self.xact_commit.saturating_sub(earlier.xact_commit),
            xact_rollback: self.xact_rollback.saturating_sub(earlier.xact_rollback),
            blks_read: self.blks_read.saturating_sub(earlier.blks_read),
            blks_hit: self.blks_hit.saturating_sub(earlier.blks_hit),
            tup_returned: self.tup_returned.saturating_sub(earlier.tup_returned),
            tup_fetched: self.tup_fetched.saturating_sub(earlier.tup_fetched),
            tup_inserted: self.tup_inserted.saturating_sub(earlier.tup_inserted),
            tup_updated: self.tup_updated.saturating_sub(earlier.tup_updated),
            tup_deleted: self.tup_deleted.saturating_sub(earlier.tup_deleted),
            heap_blks_read: self.heap_blks_read.saturating_sub(earlier.heap_blks_read),
            heap_blks_hit: self.heap_blks_hit.saturating_sub(earlier.heap_blks_hit),
            wal_records: self.wal_records.saturating_sub(earlier.wal_records),
            wal_fpi: self.wal_fpi.saturating_sub(earlier.wal_fpi),
            wal_bytes: self.wal_bytes.saturating_sub(earlier.wal_bytes),
        }
    }
}

/// One user table's figures.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct TableObs {
    pub name: String,
    pub autovacuum_count: u64,
    /// Anti-wraparound autovacuums (settledb counts them; for PostgreSQL, parsed from the log).
    pub anti_wraparound_count: u64,
    pub pages_frozen: Option<u64>,
    /// Visibility-map bits cleared by inserts, updates and deletes (pages that stopped being
    /// all-visible), and of those, pages that had been all-frozen: freezing undone.
    pub vm_bits_cleared: Option<u64>,
    pub frozen_pages_modified: Option<u64>,
    /// Heap blocks read and found in shared buffers (`pg_statio_user_tables`).
    pub heap_blks_read: u64,
    pub heap_blks_hit: u64,
    pub relfrozenxid_age: u64,
    pub heap_pages: u64,
    pub index_pages: u64,
    pub n_live_tup: u64,
    pub n_dead_tup: u64,
}

/// One sample of a target.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Observation {
    /// XIDs assigned since the target started (the next XID, as a 64-bit full XID).
    pub next_xid: u64,
    pub autovacuums_running: u32,
    pub db: DbCounters,
    pub tables: Vec<TableObs>,
}

impl Observation {
    /// The oldest relfrozenxid age among the tables.
    pub fn max_relfrozenxid_age(&self) -> u64 {
        self.tables.iter().map(|t| t.relfrozenxid_age).max().unwrap_or(0)
    }

    pub fn table(&self, name: &str) -> Option<&TableObs> {
        self.tables.iter().find(|t| t.name == name)
    }
}

/// Samples an embedded database: its user tables, and their indexes' sizes.
pub fn observe_embedded(db: &Database) -> anyhow::Result<Observation> {
    let s = db.stats();
    let next = db.next_xid();
    let next_xid = (u64::from(next.epoch()) << 32) | u64::from(next.xid().0);
    let mut tables = Vec::new();
    for t in db.tables() {
        let st = db.table_stats(&t);
        let frozen = t.relfrozenxid();
        let age = if frozen.is_normal() { next.xid().0.wrapping_sub(frozen.0) as u64 } else { 0 };
        let mut index_pages = 0;
        for ix in db.indexes(&t) {
            index_pages += u64::from(db.index_pages(&ix)?);
        }
        tables.push(TableObs {
            name: t.name().to_string(),
            autovacuum_count: st.autovacuum_count,
            anti_wraparound_count: st.anti_wraparound_count,
            pages_frozen: Some(st.pages_frozen),
            vm_bits_cleared: Some(st.vm_bits_cleared),
            frozen_pages_modified: Some(st.frozen_bits_cleared),
            heap_blks_read: st.heap_blks_read,
            heap_blks_hit: st.heap_blks_hit,
            relfrozenxid_age: age,
            heap_pages: u64::from(db.table_pages(&t)?),
            index_pages,
            n_live_tup: st.n_live_tup,
            n_dead_tup: st.n_dead_tup,
        });
    }
    let heap_blks_read = tables.iter().map(|t| t.heap_blks_read).sum();
    let heap_blks_hit = tables.iter().map(|t| t.heap_blks_hit).sum();
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Observation {
        next_xid,
        autovacuums_running: db.autovacuum_stats().running,
        db: DbCounters {
            xact_commit: s.xact_commit,
            xact_rollback: s.xact_rollback,
            blks_read: s.blks_read,
            blks_hit: s.blks_hit,
            tup_returned: s.tup_returned,
            tup_fetched: s.tup_fetched,
            tup_inserted: s.tup_inserted,
            tup_updated: s.tup_updated,
            tup_deleted: s.tup_deleted,
            heap_blks_read,
            heap_blks_hit,
            wal_records: s.wal_records,
            wal_fpi: s.wal_fpi,
            wal_bytes: s.wal_bytes,
        },
        tables,
    })
}
