//! `VACUUM (ONLY_DATABASE_STATS)`: the database frozen XID recomputed the way PostgreSQL's
//! `vac_update_datfrozenxid` computes it, by reading every `pg_class` row.
//!
//! settledb does not need this scan after a VACUUM: the catalog keeps every relfrozenxid in an
//! ordered index whose top is the answer ([`crate::catalog`]'s `frozen` module). The scan stays
//! as the reference: [`crate::Database::vacuum_database_stats`] runs it, applies what it found (the XID
//! limits and CLOG truncation follow the older of the two answers) and reports both answers and
//! the scan's time; `check` runs it and reports any difference, table by table.
//!
//! The minimum is taken with the modulo-2^31 comparison of 32-bit XIDs, as PostgreSQL takes it,
//! independently of the index's 64-bit keys.

use std::time::Duration;

use super::VacuumEnv;
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
pub(crate) fn scan_frozen_xids(db: VacuumEnv<'_>, mut per_table: impl FnMut(Oid, Xid)) -> Result<FrozenXidScan> {
    let mut out = FrozenXidScan::default();
    out.pages = crate::catalog::for_each_class_row(&db.heap(), |row, _| {
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
