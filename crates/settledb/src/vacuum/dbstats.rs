//! `VACUUM (ONLY_DATABASE_STATS)`: the database frozen XID recomputed the way PostgreSQL's
//! `vac_update_datfrozenxid` computes it, by reading every `pg_class` row.
//!
//! settledb does not need this scan after a VACUUM: the catalog keeps every relfrozenxid in an
//! ordered index whose top is the answer ([`crate::catalog`]'s `frozen` module). The scan stays
//! as the reference: [`Database::vacuum_database_stats`] runs it, applies what it found (the XID
//! limits and CLOG truncation follow the older of the two answers) and reports both answers and
//! the scan's time; `check` runs it and reports any difference, table by table.
//!
//! The minimum is taken with the modulo-2^31 comparison of 32-bit XIDs, as PostgreSQL takes it,
//! independently of the index's 64-bit keys.

use std::time::{Duration, Instant};

use super::apply_database_frozen_xid;
use crate::db::{startup, Database, Inner};
use crate::error::Result;
use crate::types::{Oid, Xid};

/// What the full scan of `pg_class` found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrozenXidScan {
    /// The oldest normal relfrozenxid of any table (`None`: no table has one).
    pub oldest: Option<Xid>,
    /// Table rows read (`pg_class` included; index rows are read and skipped).
    pub tables: u64,
    pub pages: u32,
}

/// Reads every committed `pg_class` row; calls `per_table` with each table's OID and
/// relfrozenxid.
pub(crate) fn scan_frozen_xids(inner: &Inner, mut per_table: impl FnMut(Oid, Xid)) -> Result<FrozenXidScan> {
    let mut out = FrozenXidScan::default();
    out.pages = startup::for_each_class_row(&inner.env(), |row, _| {
        if row.kind == crate::catalog::RelKind::Table {
            out.tables += 1;
            per_table(row.oid, row.relfrozenxid);
            let x = row.relfrozenxid;
            if x.is_normal() && out.oldest.is_none_or(|m| x.precedes(m)) {
                out.oldest = Some(x);
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// The result of `VACUUM (ONLY_DATABASE_STATS)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseStatsReport {
    /// The database frozen XID as the full scan found it.
    pub scanned_frozen_xid: Option<Xid>,
    /// The database frozen XID as the incremental index holds it (read in O(1)).
    pub incremental_frozen_xid: Option<Xid>,
    pub tables_scanned: u64,
    pub pages_scanned: u32,
    /// Time of the scan alone.
    pub scan_elapsed: Duration,
}

impl DatabaseStatsReport {
    /// Whether the two computations agree.
    pub fn agrees(&self) -> bool {
        self.scanned_frozen_xid == self.incremental_frozen_xid
    }
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
        let scan = scan_frozen_xids(inner, |_, _| {})?;
        let scan_elapsed = start.elapsed();
        let mut incremental = None;
        apply_database_frozen_xid(inner, |index| {
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
