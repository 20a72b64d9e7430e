//! Cumulative statistics: PostgreSQL's `pg_stat_user_tables` per table, and the file that keeps
//! them (with the database-wide counters) across a clean shutdown.
//!
//! # What is counted, and when
//!
//! Every table's [`TableEntry`](crate::catalog::TableEntry) holds a [`TableStats`]: relaxed
//! atomics, read as a plain [`TableStatsSnapshot`]. A transaction does not touch them row by
//! row. It keeps its own [`TableCounts`] per table it used and applies them once, when it
//! ends (commit, rollback, or drop), as PostgreSQL's `pgstat_relation.c` does at end of
//! transaction. How a transaction's counts land depends on how it ended:
//!
//! ```text
//!                      committed                            aborted
//!   insert   n_tup_ins +1, n_live_tup +1,           n_tup_ins +1, n_dead_tup +1
//!            n_mod_since_analyze +1,                (the version it wrote is dead)
//!            n_ins_since_vacuum +1
//!   update   n_tup_upd +1, n_dead_tup +1            n_tup_upd +1, n_dead_tup +1
//!            (the old version), n_mod_since_analyze +1   (the new version)
//!   HOT      n_tup_hot_upd +1 besides the above, either way
//!   delete   n_tup_del +1, n_live_tup -1,           n_tup_del +1 (nothing died)
//!            n_dead_tup +1, n_mod_since_analyze +1
//!   scans    seq_scan / idx_scan +1 per scan started, either way
//! ```
//!
//! Worked example: a table with 10 live rows; T1 updates 2 rows (one HOT) and deletes 1, then
//! commits; T2 inserts 3 and rolls back. Afterwards `n_tup_upd` = 2, `n_tup_hot_upd` = 1,
//! `n_tup_del` = 1, `n_tup_ins` = 3, `n_live_tup` = 9, `n_dead_tup` = 2 + 1 + 3 = 6,
//! `n_mod_since_analyze` = 3. The counters only ever estimate: `n_live_tup` saturates at 0
//! (after a crash reset it starts from nothing while rows exist), and VACUUM replaces both
//! `n_live_tup` and `n_dead_tup` with what it counted ([`TableStats::report_vacuum`]).
//!
//! Unlike PostgreSQL, `n_ins_since_vacuum` counts committed inserts only: an aborted insert
//! left a dead tuple, which `n_dead_tup` already drives VACUUM for.
//!
//! Changes to `pg_class` made by DDL are not counted: it is a catalog, not a user table.
//!
//! # Persistence
//!
//! As PostgreSQL keeps its `pg_stat` directory, a clean shutdown writes `pg_stat/stats.bin`
//! ([`StatsFile`]): every table's snapshot by OID, and the database counters ([`DbTotals`]).
//! The next open reads it only if the control file says the previous run shut down cleanly,
//! and removes it either way: after a crash, counters start from zero, since nothing says how
//! much of the work they counted survived. A file that is short, corrupt or of another
//! version is ignored (the statistics start from zero); it never stops the database opening.
//! Layout: `docs/file-format.md`.
//!
//! # Non-goals
//!
//! ANALYZE ([`crate::analyze`]) sets the live and dead tuple estimates, `last_analyze` and
//! `analyze_count`, and starts `n_mod_since_analyze` again from zero. No autoanalyze, no per-index
//! statistics, no `seq_tup_read` / `idx_tup_fetch` per table (the database has them), and no
//! reset function.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::io::FileSystem;
use crate::types::Oid;

/// One table's cumulative counters (`pg_stat_user_tables`). Every field is a relaxed atomic:
/// the counters are estimates, and no reader needs two of them to agree exactly.
#[derive(Debug, Default)]
pub struct TableStats {
    seq_scan: AtomicU64,
    idx_scan: AtomicU64,
    n_tup_ins: AtomicU64,
    n_tup_upd: AtomicU64,
    n_tup_del: AtomicU64,
    n_tup_hot_upd: AtomicU64,
    n_live_tup: AtomicU64,
    n_dead_tup: AtomicU64,
    n_mod_since_analyze: AtomicU64,
    n_ins_since_vacuum: AtomicU64,
    last_vacuum: AtomicU64,
    last_autovacuum: AtomicU64,
    vacuum_count: AtomicU64,
    autovacuum_count: AtomicU64,
    anti_wraparound_count: AtomicU64,
    pages_frozen: AtomicU64,
    vm_bits_cleared: AtomicU64,
    frozen_bits_cleared: AtomicU64,
    heap_blks_read: AtomicU64,
    heap_blks_hit: AtomicU64,
    last_analyze: AtomicU64,
    analyze_count: AtomicU64,
}

/// A copy of a table's counters. Timestamps are microseconds since the Unix epoch, 0 = never.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TableStatsSnapshot {
    /// Sequential scans started.
    pub seq_scan: u64,
    /// Index scans started on any of the table's indexes.
    pub idx_scan: u64,
    /// Rows inserted, updated, deleted, by committed and aborted transactions alike.
    pub n_tup_ins: u64,
    pub n_tup_upd: u64,
    pub n_tup_del: u64,
    /// Updates that were HOT (no new index entries).
    pub n_tup_hot_upd: u64,
    /// Estimated live and dead tuples.
    pub n_live_tup: u64,
    pub n_dead_tup: u64,
    /// Rows changed by committed transactions since the last ANALYZE (never reset yet).
    pub n_mod_since_analyze: u64,
    /// Rows inserted by committed transactions since the last VACUUM.
    pub n_ins_since_vacuum: u64,
    pub last_vacuum: u64,
    pub last_autovacuum: u64,
    /// Manual VACUUMs and autovacuums completed.
    pub vacuum_count: u64,
    pub autovacuum_count: u64,
    /// Autovacuums run to prevent XID wraparound (also counted in `autovacuum_count`).
    pub anti_wraparound_count: u64,
    /// Heap pages VACUUM froze, in total.
    pub pages_frozen: u64,
    /// Visibility-map bits cleared by inserts, updates and deletes.
    pub vm_bits_cleared: u64,
    /// Of those, pages that were all-frozen: freezing that a later change undid.
    pub frozen_bits_cleared: u64,
    /// Heap blocks read from disk and found in shared buffers (`pg_statio_user_tables`).
    pub heap_blks_read: u64,
    pub heap_blks_hit: u64,
    /// The last ANALYZE, and how many have run.
    pub last_analyze: u64,
    pub analyze_count: u64,
}

/// What one transaction did to one table, applied when it ends (PostgreSQL's
/// `PgStat_TableXactStatus` and the non-transactional scan counts together).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TableCounts {
    pub inserted: u64,
    pub updated: u64,
    pub hot_updated: u64,
    pub deleted: u64,
    pub seq_scan: u64,
    pub idx_scan: u64,
    /// The transaction TRUNCATEd the table before these changes (PostgreSQL's
    /// `truncdropped`): at commit its live and dead tuple estimates start again from zero.
    pub truncated: bool,
}

/// Subtracts without going below zero (a concurrent VACUUM may have just lowered the value).
fn saturating_sub(a: &AtomicU64, n: u64) {
    if n > 0 {
        let _ = a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(n)));
    }
}

fn add(a: &AtomicU64, n: u64) {
    if n > 0 {
        a.fetch_add(n, Ordering::Relaxed);
    }
}

/// The proleptic Gregorian date (year, month, day) `days` days after 1970-01-01 (Howard
/// Hinnant's algorithm), for printing timestamps without a date library.
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// Now, in microseconds since the Unix epoch (0 if the clock is before it).
pub fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl TableStats {
    pub fn new() -> TableStats {
        TableStats::default()
    }

    pub fn snapshot(&self) -> TableStatsSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TableStatsSnapshot {
            seq_scan: l(&self.seq_scan),
            idx_scan: l(&self.idx_scan),
            n_tup_ins: l(&self.n_tup_ins),
            n_tup_upd: l(&self.n_tup_upd),
            n_tup_del: l(&self.n_tup_del),
            n_tup_hot_upd: l(&self.n_tup_hot_upd),
            n_live_tup: l(&self.n_live_tup),
            n_dead_tup: l(&self.n_dead_tup),
            n_mod_since_analyze: l(&self.n_mod_since_analyze),
            n_ins_since_vacuum: l(&self.n_ins_since_vacuum),
            last_vacuum: l(&self.last_vacuum),
            last_autovacuum: l(&self.last_autovacuum),
            vacuum_count: l(&self.vacuum_count),
            autovacuum_count: l(&self.autovacuum_count),
            anti_wraparound_count: l(&self.anti_wraparound_count),
            pages_frozen: l(&self.pages_frozen),
            vm_bits_cleared: l(&self.vm_bits_cleared),
            frozen_bits_cleared: l(&self.frozen_bits_cleared),
            heap_blks_read: l(&self.heap_blks_read),
            heap_blks_hit: l(&self.heap_blks_hit),
            last_analyze: l(&self.last_analyze),
            analyze_count: l(&self.analyze_count),
        }
    }

    /// Sets every counter from a snapshot (the stats file read at startup).
    pub fn restore(&self, s: &TableStatsSnapshot) {
        let fields = s.to_fields();
        for (a, v) in self.atomics().into_iter().zip(fields) {
            a.store(v, Ordering::Relaxed);
        }
    }

    /// The atomics in [`TableStatsSnapshot::to_fields`] order.
    fn atomics(&self) -> [&AtomicU64; TABLE_FIELDS] {
        [
            &self.seq_scan,
            &self.idx_scan,
            &self.n_tup_ins,
            &self.n_tup_upd,
            &self.n_tup_del,
            &self.n_tup_hot_upd,
            &self.n_live_tup,
            &self.n_dead_tup,
            &self.n_mod_since_analyze,
            &self.n_ins_since_vacuum,
            &self.last_vacuum,
            &self.last_autovacuum,
            &self.vacuum_count,
            &self.autovacuum_count,
            &self.anti_wraparound_count,
            &self.pages_frozen,
            &self.vm_bits_cleared,
            &self.frozen_bits_cleared,
            &self.heap_blks_read,
            &self.heap_blks_hit,
            &self.last_analyze,
            &self.analyze_count,
        ]
    }

    /// Applies what a transaction did to this table, once, as it ends (see the module doc for
    /// the rules). Called at commit with `committed`, at rollback and drop without.
    pub fn apply(&self, c: &TableCounts, committed: bool) {
        add(&self.seq_scan, c.seq_scan);
        add(&self.idx_scan, c.idx_scan);
        add(&self.n_tup_ins, c.inserted);
        add(&self.n_tup_upd, c.updated);
        add(&self.n_tup_hot_upd, c.hot_updated);
        add(&self.n_tup_del, c.deleted);
        if committed {
            if c.truncated {
                self.n_live_tup.store(0, Ordering::Relaxed);
                self.n_dead_tup.store(0, Ordering::Relaxed);
                self.n_ins_since_vacuum.store(0, Ordering::Relaxed);
            }
            if c.inserted >= c.deleted {
                add(&self.n_live_tup, c.inserted - c.deleted);
            } else {
                saturating_sub(&self.n_live_tup, c.deleted - c.inserted);
            }
            add(&self.n_dead_tup, c.updated.saturating_add(c.deleted));
            add(&self.n_mod_since_analyze, c.inserted.saturating_add(c.updated).saturating_add(c.deleted));
            add(&self.n_ins_since_vacuum, c.inserted);
        } else {
            add(&self.n_dead_tup, c.inserted.saturating_add(c.updated));
        }
    }

    /// What VACUUM reports when it finishes a table: the live tuples it found, the dead ones it
    /// could not remove yet, and how many pages it froze. Resets `n_ins_since_vacuum`, counts
    /// the run (an anti-wraparound run is an autovacuum) and stamps it with the time.
    pub fn report_vacuum(
        &self,
        autovacuum: bool,
        anti_wraparound: bool,
        live_tuples: u64,
        dead_tuples: u64,
        pages_frozen: u64,
    ) {
        self.report_vacuum_at(autovacuum, anti_wraparound, live_tuples, dead_tuples, pages_frozen, now_micros());
    }

    /// [`TableStats::report_vacuum`] at a given time (microseconds since the Unix epoch).
    pub fn report_vacuum_at(
        &self,
        autovacuum: bool,
        anti_wraparound: bool,
        live_tuples: u64,
        dead_tuples: u64,
        pages_frozen: u64,
        now_micros: u64,
    ) {
        self.n_live_tup.store(live_tuples, Ordering::Relaxed);
        self.n_dead_tup.store(dead_tuples, Ordering::Relaxed);
        self.n_ins_since_vacuum.store(0, Ordering::Relaxed);
        add(&self.pages_frozen, pages_frozen);
        if autovacuum {
            self.autovacuum_count.fetch_add(1, Ordering::Relaxed);
            if anti_wraparound {
                self.anti_wraparound_count.fetch_add(1, Ordering::Relaxed);
            }
            self.last_autovacuum.store(now_micros, Ordering::Relaxed);
        } else {
            self.vacuum_count.fetch_add(1, Ordering::Relaxed);
            self.last_vacuum.store(now_micros, Ordering::Relaxed);
        }
    }

    /// An ANALYZE finished: its estimates of live and dead tuples replace the counters', and
    /// the changes since the last ANALYZE start again from zero (PostgreSQL's
    /// `pgstat_report_analyze`).
    pub fn report_analyze(&self, live_tuples: u64, dead_tuples: u64) {
        self.n_live_tup.store(live_tuples, Ordering::Relaxed);
        self.n_dead_tup.store(dead_tuples, Ordering::Relaxed);
        self.n_mod_since_analyze.store(0, Ordering::Relaxed);
        self.analyze_count.fetch_add(1, Ordering::Relaxed);
        self.last_analyze.store(now_micros(), Ordering::Relaxed);
    }

    /// A heap change cleared a page's visibility-map bits.
    pub fn note_vm_cleared(&self) {
        self.add_vm_cleared(1);
    }

    /// Adds `n` pages whose visibility-map bits were cleared (collected from the heap's
    /// per-relation counter).
    pub fn add_vm_cleared(&self, n: u64) {
        self.vm_bits_cleared.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds what the heap counted on its own since the last collection: visibility-map bits
    /// cleared (and of those, all-frozen pages), heap blocks read and hit.
    pub fn add_heap_counts(&self, c: &HeapCounts) {
        self.vm_bits_cleared.fetch_add(c.vm_cleared, Ordering::Relaxed);
        self.frozen_bits_cleared.fetch_add(c.frozen_cleared, Ordering::Relaxed);
        self.heap_blks_read.fetch_add(c.blks_read, Ordering::Relaxed);
        self.heap_blks_hit.fetch_add(c.blks_hit, Ordering::Relaxed);
    }
}

/// Counters per table in the stats file.
pub(crate) const TABLE_FIELDS: usize = 22;
/// Counters per table in files written before ANALYZE existed (read with its two as 0).
const TABLE_FIELDS_BEFORE_ANALYZE: usize = 20;

/// Counts the heap keeps per relation, without the statistics' locks, until collected.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HeapCounts {
    pub vm_cleared: u64,
    pub frozen_cleared: u64,
    pub blks_read: u64,
    pub blks_hit: u64,
}

impl TableStatsSnapshot {
    /// The counters in file order (the declaration order above).
    pub fn to_fields(&self) -> [u64; TABLE_FIELDS] {
        [
            self.seq_scan,
            self.idx_scan,
            self.n_tup_ins,
            self.n_tup_upd,
            self.n_tup_del,
            self.n_tup_hot_upd,
            self.n_live_tup,
            self.n_dead_tup,
            self.n_mod_since_analyze,
            self.n_ins_since_vacuum,
            self.last_vacuum,
            self.last_autovacuum,
            self.vacuum_count,
            self.autovacuum_count,
            self.anti_wraparound_count,
            self.pages_frozen,
            self.vm_bits_cleared,
            self.frozen_bits_cleared,
            self.heap_blks_read,
            self.heap_blks_hit,
            self.last_analyze,
            self.analyze_count,
        ]
    }

    pub fn from_fields(f: [u64; TABLE_FIELDS]) -> TableStatsSnapshot {
        TableStatsSnapshot {
            seq_scan: f[0],
            idx_scan: f[1],
            n_tup_ins: f[2],
            n_tup_upd: f[3],
            n_tup_del: f[4],
            n_tup_hot_upd: f[5],
            n_live_tup: f[6],
            n_dead_tup: f[7],
            n_mod_since_analyze: f[8],
            n_ins_since_vacuum: f[9],
            last_vacuum: f[10],
            last_autovacuum: f[11],
            vacuum_count: f[12],
            autovacuum_count: f[13],
            anti_wraparound_count: f[14],
            pages_frozen: f[15],
            vm_bits_cleared: f[16],
            frozen_bits_cleared: f[17],
            heap_blks_read: f[18],
            heap_blks_hit: f[19],
            last_analyze: f[20],
            analyze_count: f[21],
        }
    }
}

/// The database-wide counters the stats file keeps (`pg_stat_database`, `pg_stat_wal`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DbTotals {
    pub xact_commit: u64,
    pub xact_rollback: u64,
    pub blks_read: u64,
    pub blks_hit: u64,
    pub tup_returned: u64,
    pub tup_fetched: u64,
    pub tup_inserted: u64,
    pub tup_updated: u64,
    pub tup_deleted: u64,
    pub tup_hot_updated: u64,
    pub idx_scan: u64,
    pub idx_tup_read: u64,
    pub idx_tup_fetch: u64,
    pub heap_fetches: u64,
    pub heap_fetches_avoided: u64,
    pub wal_records: u64,
    pub wal_fpi: u64,
    pub wal_bytes: u64,
    /// When these counters started from zero (the database's creation, or the open that
    /// followed a crash), microseconds since the Unix epoch.
    pub stats_reset: u64,
    /// Deadlocks detected (each reported to one victim as 40P01).
    pub deadlocks: u64,
    /// WAL writes forced by full WAL buffers, WAL writes and WAL fsyncs (`pg_stat_wal`).
    pub wal_buffers_full: u64,
    pub wal_write: u64,
    pub wal_sync: u64,
}

/// Database counters in the stats file.
pub(crate) const DB_FIELDS: usize = 23;
/// Database counters in files written before `deadlocks` was kept (read with it as 0).
const DB_FIELDS_BEFORE_DEADLOCKS: usize = 19;
/// Database counters in files written before the WAL's writes and fsyncs were kept (read
/// with them as 0).
const DB_FIELDS_BEFORE_WAL_IO: usize = 20;

impl DbTotals {
    pub fn to_fields(&self) -> [u64; DB_FIELDS] {
        [
            self.xact_commit,
            self.xact_rollback,
            self.blks_read,
            self.blks_hit,
            self.tup_returned,
            self.tup_fetched,
            self.tup_inserted,
            self.tup_updated,
            self.tup_deleted,
            self.tup_hot_updated,
            self.idx_scan,
            self.idx_tup_read,
            self.idx_tup_fetch,
            self.heap_fetches,
            self.heap_fetches_avoided,
            self.wal_records,
            self.wal_fpi,
            self.wal_bytes,
            self.stats_reset,
            self.deadlocks,
            self.wal_buffers_full,
            self.wal_write,
            self.wal_sync,
        ]
    }

    pub fn from_fields(f: [u64; DB_FIELDS]) -> DbTotals {
        DbTotals {
            xact_commit: f[0],
            xact_rollback: f[1],
            blks_read: f[2],
            blks_hit: f[3],
            tup_returned: f[4],
            tup_fetched: f[5],
            tup_inserted: f[6],
            tup_updated: f[7],
            tup_deleted: f[8],
            tup_hot_updated: f[9],
            idx_scan: f[10],
            idx_tup_read: f[11],
            idx_tup_fetch: f[12],
            heap_fetches: f[13],
            heap_fetches_avoided: f[14],
            wal_records: f[15],
            wal_fpi: f[16],
            wal_bytes: f[17],
            stats_reset: f[18],
            deadlocks: f[19],
            wal_buffers_full: f[20],
            wal_write: f[21],
            wal_sync: f[22],
        }
    }
}

/// One replication slot's cumulative counters (`pg_stat_replication_slots`), summed over the
/// decoding sessions run on it (`pg_logical_slot_get_changes` and `…_peek_changes` alike, as
/// in PostgreSQL): transactions and bytes spilled to disk, streamed, and handed to the plugin.
/// A spill or stream "count" is one eviction of one transaction; `total_*` count each
/// decoded transaction once, streamed or not.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SlotStats {
    pub spill_txns: u64,
    pub spill_count: u64,
    pub spill_bytes: u64,
    pub stream_txns: u64,
    pub stream_count: u64,
    pub stream_bytes: u64,
    pub total_txns: u64,
    pub total_bytes: u64,
    /// When they were last reset, microseconds since the Unix epoch; 0 for never (PostgreSQL's
    /// NULL).
    pub stats_reset: u64,
}

/// Slot counters in the stats file.
pub(crate) const SLOT_FIELDS: usize = 9;

impl SlotStats {
    pub fn to_fields(&self) -> [u64; SLOT_FIELDS] {
        [
            self.spill_txns,
            self.spill_count,
            self.spill_bytes,
            self.stream_txns,
            self.stream_count,
            self.stream_bytes,
            self.total_txns,
            self.total_bytes,
            self.stats_reset,
        ]
    }

    pub fn from_fields(f: [u64; SLOT_FIELDS]) -> SlotStats {
        SlotStats {
            spill_txns: f[0],
            spill_count: f[1],
            spill_bytes: f[2],
            stream_txns: f[3],
            stream_count: f[4],
            stream_bytes: f[5],
            total_txns: f[6],
            total_bytes: f[7],
            stats_reset: f[8],
        }
    }
}

/// The contents of `pg_stat/stats.bin`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StatsFile {
    pub db: DbTotals,
    /// Per table, by OID.
    pub tables: Vec<(Oid, TableStatsSnapshot)>,
    /// Per replication slot, by name.
    pub slots: Vec<(String, SlotStats)>,
}

const STATS_MAGIC: [u8; 4] = *b"SDST";
/// Version 3 added the replication slots' counters; version 2 files (without them) are read.
pub const STATS_FORMAT_VERSION: u32 = 3;
/// magic, version, database field count, table field count, table count.
const HEADER_SIZE: usize = 4 + 4 + 4 + 4 + 4;
const TABLE_RECORD_SIZE: usize = 4 + 8 * TABLE_FIELDS;
/// A slot's name, NUL-padded to PostgreSQL's NAMEDATALEN.
const SLOT_NAME_SIZE: usize = 64;
const SLOT_RECORD_SIZE: usize = SLOT_NAME_SIZE + 8 * SLOT_FIELDS;
/// Files longer than this are not read (a million tables' worth).
const STATS_FILE_MAX_BYTES: u64 = 160 << 20;

/// `DIR/pg_stat/stats.bin`.
pub fn stats_path(dir: &Path) -> PathBuf {
    dir.join("pg_stat").join("stats.bin")
}

impl StatsFile {
    /// The file's bytes: header, database counters, one record per table, the slot count and
    /// one record per slot, CRC-32C of all that.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(HEADER_SIZE + 8 * DB_FIELDS + TABLE_RECORD_SIZE * self.tables.len() + 4);
        b.extend_from_slice(&STATS_MAGIC);
        b.extend_from_slice(&STATS_FORMAT_VERSION.to_le_bytes());
        b.extend_from_slice(&(DB_FIELDS as u32).to_le_bytes());
        b.extend_from_slice(&(TABLE_FIELDS as u32).to_le_bytes());
        b.extend_from_slice(&u32::try_from(self.tables.len()).unwrap_or(u32::MAX).to_le_bytes());
        for v in self.db.to_fields() {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for (oid, s) in self.tables.iter().take(u32::MAX as usize) {
            b.extend_from_slice(&oid.0.to_le_bytes());
            for v in s.to_fields() {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        // Slot names are at most 63 bytes (`slot::validate_name`); a longer one is not kept.
        let slots: Vec<_> = self.slots.iter().filter(|(n, _)| n.len() < SLOT_NAME_SIZE).collect();
        b.extend_from_slice(&(slots.len() as u32).to_le_bytes());
        for (name, s) in slots {
            let mut n = [0u8; SLOT_NAME_SIZE];
            n[..name.len()].copy_from_slice(name.as_bytes());
            b.extend_from_slice(&n);
            for v in s.to_fields() {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        let crc = crate::crc::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes bytes read from `path` (named in errors). Anything but an exact, checksummed
    /// file of this version is an error.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<StatsFile> {
        let corrupt = |detail: String| Error::CorruptFile { path: path.to_path_buf(), detail };
        if bytes.get(0..4) != Some(&STATS_MAGIC[..]) {
            return Err(corrupt("not a settledb statistics file (bad magic number)".into()));
        }
        let u32_at = |at: usize| bytes.get(at..at + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]));
        let version = u32_at(4).ok_or_else(|| corrupt("truncated header".into()))?;
        if version != STATS_FORMAT_VERSION && version != 2 {
            return Err(Error::VersionMismatch {
                path: path.to_path_buf(),
                found: version,
                expected: STATS_FORMAT_VERSION,
            });
        }
        let (Some(db_fields), Some(table_fields), Some(ntables)) = (u32_at(8), u32_at(12), u32_at(16)) else {
            return Err(corrupt("truncated header".into()));
        };
        let db_fields = db_fields as usize;
        let table_fields = table_fields as usize;
        if ![DB_FIELDS, DB_FIELDS_BEFORE_WAL_IO, DB_FIELDS_BEFORE_DEADLOCKS].contains(&db_fields)
            || ![TABLE_FIELDS, TABLE_FIELDS_BEFORE_ANALYZE].contains(&table_fields)
        {
            return Err(corrupt(format!(
                "{db_fields} database and {table_fields} table counters, expected {DB_FIELDS} (or \
                 {DB_FIELDS_BEFORE_WAL_IO} or {DB_FIELDS_BEFORE_DEADLOCKS}) and {TABLE_FIELDS} (or \
                 {TABLE_FIELDS_BEFORE_ANALYZE})"
            )));
        }
        let table_record_size = 4 + 8 * table_fields;
        let tables_end = (ntables as usize)
            .checked_mul(table_record_size)
            .and_then(|n| n.checked_add(HEADER_SIZE + 8 * db_fields))
            .ok_or_else(|| corrupt(format!("impossible table count {ntables}")))?;
        let nslots = if version == 2 { 0 } else { u32_at(tables_end).unwrap_or(0) as usize };
        let slots_at = if version == 2 { tables_end } else { tables_end + 4 };
        let expected = nslots
            .checked_mul(SLOT_RECORD_SIZE)
            .and_then(|n| n.checked_add(slots_at + 4))
            .ok_or_else(|| corrupt(format!("impossible slot count {nslots}")))?;
        if bytes.len() != expected {
            return Err(corrupt(format!(
                "length is {} bytes, {ntables} tables and {nslots} slots need {expected}",
                bytes.len()
            )));
        }
        let crc_at = expected - 4;
        let stored = u32_at(crc_at).unwrap_or(0);
        let computed = crate::crc::crc32c(&bytes[..crc_at]);
        if stored != computed {
            return Err(corrupt(format!("incorrect checksum: stored {stored:08X}, computed {computed:08X}")));
        }
        // The length is checked above, so every slice below is in bounds.
        let u64s = |at: usize, out: &mut [u64]| {
            for (i, v) in out.iter_mut().enumerate() {
                let mut w = [0u8; 8];
                w.copy_from_slice(&bytes[at + 8 * i..at + 8 * i + 8]);
                *v = u64::from_le_bytes(w);
            }
        };
        let mut db = [0u64; DB_FIELDS];
        u64s(HEADER_SIZE, &mut db[..db_fields]);
        let mut tables = Vec::with_capacity(ntables as usize);
        let mut at = HEADER_SIZE + 8 * db_fields;
        for _ in 0..ntables {
            let oid = Oid(u32_at(at).unwrap_or(0));
            let mut f = [0u64; TABLE_FIELDS];
            u64s(at + 4, &mut f[..table_fields]);
            tables.push((oid, TableStatsSnapshot::from_fields(f)));
            at += table_record_size;
        }
        let mut slots = Vec::with_capacity(nslots);
        let mut at = slots_at;
        for _ in 0..nslots {
            let n = &bytes[at..at + SLOT_NAME_SIZE];
            // A name and its NUL padding, nothing else: what `encode` writes.
            let len = n.iter().position(|&b| b == 0).unwrap_or(SLOT_NAME_SIZE);
            if len == SLOT_NAME_SIZE || n[len..].iter().any(|&b| b != 0) {
                return Err(corrupt(format!("a slot name at byte {at} is not NUL-padded")));
            }
            let name = std::str::from_utf8(&n[..len])
                .map_err(|_| corrupt(format!("a slot name at byte {at} is not UTF-8")))?
                .to_string();
            let mut f = [0u64; SLOT_FIELDS];
            u64s(at + SLOT_NAME_SIZE, &mut f);
            slots.push((name, SlotStats::from_fields(f)));
            at += SLOT_RECORD_SIZE;
        }
        Ok(StatsFile { db: DbTotals::from_fields(db), tables, slots })
    }

    /// Writes the file under `dir` durably: a temporary file, fsync, rename, fsync of
    /// `pg_stat/`.
    pub fn write(&self, fs: &dyn FileSystem, dir: &Path) -> Result<()> {
        let path = stats_path(dir);
        let stat_dir = dir.join("pg_stat");
        fs.create_dir_all(&stat_dir)?;
        let tmp = stat_dir.join("stats.bin.tmp");
        let f = fs.open(&tmp, true)?;
        f.set_len(0)?;
        f.write_at(&self.encode(), 0)?;
        f.sync()?;
        drop(f);
        fs.rename(&tmp, &path)?;
        fs.sync_dir(&stat_dir)
    }

    /// Reads the file under `dir`: `Ok(None)` when there is none, an error when it cannot be
    /// read or decoded.
    pub fn read(fs: &dyn FileSystem, dir: &Path) -> Result<Option<StatsFile>> {
        let path = stats_path(dir);
        if !fs.exists(&path) {
            return Ok(None);
        }
        let f = fs.open(&path, false)?;
        let len = f.len()?;
        if len > STATS_FILE_MAX_BYTES {
            return Err(Error::CorruptFile { path, detail: format!("length is {len} bytes, too long") });
        }
        let mut buf = vec![0u8; len as usize];
        f.read_exact_at(&mut buf, 0)?;
        StatsFile::decode(&buf, &path).map(Some)
    }

    /// Takes the file under `dir` at startup: its contents if `clean` (the previous run shut
    /// down cleanly) and it reads back whole, else nothing; the file is removed either way, so
    /// counters it holds are never applied twice, nor after a later crash.
    pub fn take(fs: &dyn FileSystem, dir: &Path, clean: bool) -> Option<StatsFile> {
        let path = stats_path(dir);
        if !fs.exists(&path) {
            return None;
        }
        let contents = if clean { StatsFile::read(fs, dir).ok().flatten() } else { None };
        // A file left behind is harmless: it is read only after a clean shutdown, which
        // rewrites it.
        let _ = fs.remove(&path);
        contents
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(inserted: u64, updated: u64, hot_updated: u64, deleted: u64) -> TableCounts {
        TableCounts { inserted, updated, hot_updated, deleted, ..TableCounts::default() }
    }

    #[test]
    fn committed_transaction_counts_live_dead_and_changes() {
        let s = TableStats::new();
        s.apply(&counts(10, 0, 0, 0), true);
        s.apply(&counts(0, 3, 2, 2), true);
        let v = s.snapshot();
        assert_eq!((v.n_tup_ins, v.n_tup_upd, v.n_tup_hot_upd, v.n_tup_del), (10, 3, 2, 2));
        assert_eq!(v.n_live_tup, 8, "10 inserted, 2 deleted; updates keep the count");
        assert_eq!(v.n_dead_tup, 5, "3 old versions and 2 deleted rows");
        assert_eq!(v.n_mod_since_analyze, 15);
        assert_eq!(v.n_ins_since_vacuum, 10);
    }

    #[test]
    fn aborted_transaction_leaves_dead_versions_and_no_live_ones() {
        let s = TableStats::new();
        s.apply(&counts(5, 0, 0, 0), true);
        s.apply(&counts(2, 3, 1, 4), false);
        let v = s.snapshot();
        assert_eq!((v.n_tup_ins, v.n_tup_upd, v.n_tup_hot_upd, v.n_tup_del), (7, 3, 1, 4), "aborted work still counts");
        assert_eq!(v.n_live_tup, 5, "an abort changes no live count");
        assert_eq!(v.n_dead_tup, 5, "2 inserted and 3 new update versions died with the abort; deletes undone");
        assert_eq!(v.n_mod_since_analyze, 5, "only the committed inserts");
        assert_eq!(v.n_ins_since_vacuum, 5);
    }

    #[test]
    fn hot_and_non_hot_updates_both_count_as_updates() {
        let s = TableStats::new();
        s.apply(&counts(0, 1, 1, 0), true);
        s.apply(&counts(0, 1, 0, 0), true);
        let v = s.snapshot();
        assert_eq!((v.n_tup_upd, v.n_tup_hot_upd, v.n_dead_tup), (2, 1, 2));
    }

    #[test]
    fn live_tuples_saturate_at_zero() {
        let s = TableStats::new();
        s.apply(&counts(1, 0, 0, 0), true);
        // After a crash reset the table may hold rows the counters never saw.
        s.apply(&counts(0, 0, 0, 5), true);
        assert_eq!(s.snapshot().n_live_tup, 0);
        s.apply(&counts(2, 0, 0, 1), true);
        assert_eq!(s.snapshot().n_live_tup, 1);
        s.apply(&counts(1, 0, 0, 3), true);
        assert_eq!(s.snapshot().n_live_tup, 0, "a net decrease saturates too");
    }

    #[test]
    fn scans_count_whether_or_not_the_transaction_commits() {
        let s = TableStats::new();
        let scans = TableCounts { seq_scan: 2, idx_scan: 3, ..TableCounts::default() };
        s.apply(&scans, true);
        s.apply(&scans, false);
        let v = s.snapshot();
        assert_eq!((v.seq_scan, v.idx_scan), (4, 6));
        assert_eq!(v, TableStatsSnapshot { seq_scan: 4, idx_scan: 6, ..Default::default() });
    }

    #[test]
    fn vacuum_report_replaces_estimates_and_counts_the_run() {
        let s = TableStats::new();
        s.apply(&counts(100, 10, 0, 20), true);
        s.note_vm_cleared();
        s.report_vacuum_at(false, false, 80, 3, 7, 1_000);
        let v = s.snapshot();
        assert_eq!((v.n_live_tup, v.n_dead_tup, v.n_ins_since_vacuum), (80, 3, 0));
        assert_eq!((v.vacuum_count, v.autovacuum_count, v.last_vacuum, v.last_autovacuum), (1, 0, 1_000, 0));
        assert_eq!(v.n_mod_since_analyze, 130, "VACUUM is not ANALYZE");
        s.report_vacuum_at(true, true, 80, 0, 5, 2_000);
        s.report_vacuum_at(true, false, 81, 0, 0, 3_000);
        let v = s.snapshot();
        assert_eq!((v.vacuum_count, v.autovacuum_count, v.anti_wraparound_count), (1, 2, 1));
        assert_eq!((v.last_vacuum, v.last_autovacuum), (1_000, 3_000));
        assert_eq!((v.pages_frozen, v.vm_bits_cleared, v.n_live_tup), (12, 1, 81));
        s.report_vacuum(false, false, 0, 0, 0);
        assert!(s.snapshot().last_vacuum > 3_000, "report_vacuum stamps the current time");
    }

    #[test]
    fn analyze_report_replaces_estimates_and_restarts_the_changes() {
        let s = TableStats::new();
        s.apply(&counts(100, 10, 0, 20), true);
        s.report_analyze(95, 4);
        let v = s.snapshot();
        assert_eq!((v.n_live_tup, v.n_dead_tup, v.n_mod_since_analyze, v.analyze_count), (95, 4, 0, 1));
        assert!(v.last_analyze > 0);
        assert_eq!((v.vacuum_count, v.n_tup_ins), (0, 100), "ANALYZE is not VACUUM");
    }

    /// A file written before ANALYZE existed (20 table counters) is read, its two as 0.
    #[test]
    fn files_without_analyze_counters_are_read() {
        let f = sample();
        let b = f.encode();
        let tables_at = HEADER_SIZE + 8 * DB_FIELDS;
        let mut old = b[..tables_at].to_vec();
        old[12..16].copy_from_slice(&20u32.to_le_bytes());
        for i in 0..f.tables.len() {
            let rec = tables_at + i * TABLE_RECORD_SIZE;
            old.extend_from_slice(&b[rec..rec + 4 + 8 * 20]);
        }
        old.extend_from_slice(&b[tables_at + f.tables.len() * TABLE_RECORD_SIZE..b.len() - 4]);
        let crc = crate::crc::crc32c(&old);
        old.extend_from_slice(&crc.to_le_bytes());
        let read = StatsFile::decode(&old, Path::new("stats.bin")).unwrap();
        let tables = f
            .tables
            .iter()
            .map(|(o, t)| (*o, TableStatsSnapshot { last_analyze: 0, analyze_count: 0, ..*t }))
            .collect();
        assert_eq!(read, StatsFile { tables, ..f });
    }

    #[test]
    fn restore_round_trips_every_field() {
        let mut f = [0u64; TABLE_FIELDS];
        for (i, v) in f.iter_mut().enumerate() {
            *v = 1000 + i as u64;
        }
        let snap = TableStatsSnapshot::from_fields(f);
        assert_eq!(snap.to_fields(), f);
        let s = TableStats::new();
        s.restore(&snap);
        assert_eq!(s.snapshot(), snap);
        let mut d = [0u64; DB_FIELDS];
        for (i, v) in d.iter_mut().enumerate() {
            *v = 7 + i as u64;
        }
        assert_eq!(DbTotals::from_fields(d).to_fields(), d);
    }

    fn sample() -> StatsFile {
        let mut db = DbTotals::from_fields([0; DB_FIELDS]);
        db.xact_commit = 42;
        db.wal_bytes = u64::MAX;
        db.deadlocks = 3;
        let t =
            |n: u64| TableStatsSnapshot { n_tup_ins: n, n_live_tup: n / 2, last_vacuum: n << 20, ..Default::default() };
        let slot =
            SlotStats { spill_txns: 1, spill_bytes: 1 << 40, total_txns: 9, stats_reset: 5, ..Default::default() };
        StatsFile {
            db,
            tables: vec![(Oid(16384), t(10)), (Oid(16390), t(99))],
            slots: vec![("s".into(), slot), ("x".repeat(63), SlotStats::default())],
        }
    }

    /// A version 2 file (no slot counters) is read, with no slots.
    #[test]
    fn version_2_files_are_read() {
        let f = StatsFile { slots: Vec::new(), ..sample() };
        let mut b = f.encode();
        b.truncate(b.len() - 8); // the CRC and the slot count
        b[4..8].copy_from_slice(&2u32.to_le_bytes());
        let crc = crate::crc::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(StatsFile::decode(&b, Path::new("stats.bin")).unwrap(), f);
    }

    /// A file written before `deadlocks` was kept (19 database counters) is read, as 0.
    #[test]
    fn files_without_deadlocks_are_read() {
        let f = sample();
        let b = f.encode();
        let mut old = b[..HEADER_SIZE].to_vec();
        old[8..12].copy_from_slice(&19u32.to_le_bytes());
        old.extend_from_slice(&b[HEADER_SIZE..HEADER_SIZE + 8 * 19]);
        old.extend_from_slice(&b[HEADER_SIZE + 8 * DB_FIELDS..b.len() - 4]);
        let crc = crate::crc::crc32c(&old);
        old.extend_from_slice(&crc.to_le_bytes());
        let read = StatsFile::decode(&old, Path::new("stats.bin")).unwrap();
        let no_wal_io = DbTotals { wal_buffers_full: 0, wal_write: 0, wal_sync: 0, ..f.db };
        assert_eq!(read, StatsFile { db: DbTotals { deadlocks: 0, ..no_wal_io }, ..f.clone() });
        // One written before the WAL's writes and fsyncs were kept (20 counters).
        let mut old = b[..HEADER_SIZE].to_vec();
        old[8..12].copy_from_slice(&20u32.to_le_bytes());
        old.extend_from_slice(&b[HEADER_SIZE..HEADER_SIZE + 8 * 20]);
        old.extend_from_slice(&b[HEADER_SIZE + 8 * DB_FIELDS..b.len() - 4]);
        let crc = crate::crc::crc32c(&old);
        old.extend_from_slice(&crc.to_le_bytes());
        let read = StatsFile::decode(&old, Path::new("stats.bin")).unwrap();
        assert_eq!(read, StatsFile { db: no_wal_io, ..f });
    }

    #[test]
    fn file_round_trips() {
        let f = sample();
        let path = Path::new("pg_stat/stats.bin");
        assert_eq!(StatsFile::decode(&f.encode(), path).unwrap(), f);
        let empty = StatsFile::default();
        assert_eq!(StatsFile::decode(&empty.encode(), path).unwrap(), empty);
    }

    /// Every truncation and every flipped byte is an error, never a panic or a wrong answer.
    #[test]
    fn damaged_files_are_errors() {
        let bytes = sample().encode();
        let path = Path::new("pg_stat/stats.bin");
        for n in 0..bytes.len() {
            assert!(StatsFile::decode(&bytes[..n], path).is_err(), "truncated to {n} bytes");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(StatsFile::decode(&b, path).is_err(), "byte {i} flipped");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(StatsFile::decode(&longer, path).is_err());
        // Another format version (this test predates version 2 and used to write a literal 2).
        let other = STATS_FORMAT_VERSION + 1;
        let mut v2 = bytes;
        v2[4..8].copy_from_slice(&other.to_le_bytes());
        assert!(matches!(StatsFile::decode(&v2, path), Err(Error::VersionMismatch { found, .. }) if found == other));
    }

    #[test]
    fn take_reads_only_after_a_clean_shutdown_and_removes_the_file() {
        let fs = crate::io::fault::FaultFs::new();
        let dir = Path::new("/data");
        fs.create_dir_all(dir).unwrap();
        assert_eq!(StatsFile::take(&*fs, dir, true), None, "no file");
        sample().write(&*fs, dir).unwrap();
        assert_eq!(StatsFile::take(&*fs, dir, true), Some(sample()));
        assert!(!fs.exists(&stats_path(dir)), "removed after reading");
        sample().write(&*fs, dir).unwrap();
        assert_eq!(StatsFile::take(&*fs, dir, false), None, "after a crash");
        assert!(!fs.exists(&stats_path(dir)), "removed after a crash too");
        let f = fs.open(&stats_path(dir), true).unwrap();
        f.write_at(b"SDST\x01\0\0\0", 0).unwrap();
        assert_eq!(StatsFile::take(&*fs, dir, true), None, "short file");
        assert!(!fs.exists(&stats_path(dir)));
    }
}
