//! Configuration parameters, with PostgreSQL's names, units and defaults.
//!
//! [`Config::set`] takes a parameter the way `postgresql.conf` or `SET` would (`"128MB"`,
//! `"5min"`, `"on"`), checks it against the same bounds PostgreSQL applies, and rejects an
//! unknown name with PostgreSQL's wording. Memory sizes are stored in bytes and times in
//! milliseconds whatever unit they were given in.
//!
//! An open database reads the parameters of [`AT_OPEN`] as they were when it was opened; every
//! other one takes a new value from [`crate::Database::reload_config`] (PostgreSQL's
//! `pg_reload_conf()`), through the snapshot the database keeps.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::page::BLCKSZ;

/// `default_transaction_isolation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IsolationLevel {
    ReadCommitted,
    RepeatableRead,
}

/// `wal_level`: how much the WAL carries. `minimal` is not offered (we always archive-safe log).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WalLevel {
    /// Enough for crash recovery and a physical standby (PostgreSQL's default).
    Replica,
    /// Also what logical decoding needs: tuple data beside full-page images, old keys of
    /// updated and deleted rows, the top-level XID of subtransaction records.
    Logical,
}

impl WalLevel {
    pub fn parse(v: &str) -> Option<WalLevel> {
        match v.to_ascii_lowercase().as_str() {
            "replica" | "archive" | "hot_standby" => Some(WalLevel::Replica),
            "logical" => Some(WalLevel::Logical),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            WalLevel::Replica => "replica",
            WalLevel::Logical => "logical",
        }
    }

    /// The byte stored in the control file and in a parameter-change record.
    pub fn to_u8(self) -> u8 {
        match self {
            WalLevel::Replica => 1,
            WalLevel::Logical => 2,
        }
    }

    pub fn from_u8(v: u8) -> Option<WalLevel> {
        match v {
            1 => Some(WalLevel::Replica),
            2 => Some(WalLevel::Logical),
            _ => None,
        }
    }
}

impl std::fmt::Display for WalLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `vacuum_freeze_policy`: how VACUUM decides which tuples to freeze (DESIGN.md §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreezePolicy {
    /// PostgreSQL 14: freeze a tuple when its XID is older than FreezeLimit.
    Lazy,
    /// PostgreSQL 16: freeze the whole page when one tuple must be frozen, or when pruning
    /// wrote a full-page image and the page would become all-frozen.
    Pg16,
    /// Seed 000's block-driven freezing: freeze every tuple of a page about to be set
    /// all-visible, so that it is set all-frozen too.
    Eager,
    /// `eager` where the table's history says freezing sticks, per range of pages; elsewhere
    /// `pg16`'s cheap freeze or only what must be frozen, reading every page not all-frozen so
    /// that relfrozenxid keeps moving (`vacuum::adaptive`, `vacuum::freeze`).
    Adaptive,
}

impl FreezePolicy {
    pub fn parse(v: &str) -> Option<FreezePolicy> {
        match v.to_ascii_lowercase().as_str() {
            "lazy" => Some(FreezePolicy::Lazy),
            "pg16" => Some(FreezePolicy::Pg16),
            "eager" => Some(FreezePolicy::Eager),
            "adaptive" => Some(FreezePolicy::Adaptive),
            _ => None,
        }
    }

    /// Whether `vacuum_fsm_settled = auto` turns the all-visible FSM heuristic on.
    pub fn fsm_settled_by_default(self) -> bool {
        matches!(self, FreezePolicy::Eager | FreezePolicy::Adaptive)
    }

    pub fn name(self) -> &'static str {
        match self {
            FreezePolicy::Lazy => "lazy",
            FreezePolicy::Pg16 => "pg16",
            FreezePolicy::Eager => "eager",
            FreezePolicy::Adaptive => "adaptive",
        }
    }
}

impl std::fmt::Display for FreezePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    /// `shared_buffers`, bytes (default 128MB).
    pub shared_buffers_bytes: usize,
    /// `synchronous_commit`: on waits for the commit record's WAL flush.
    pub synchronous_commit: bool,
    /// `fsync`: off skips every fsync (unsafe; for benchmarks, like PostgreSQL's).
    pub fsync: bool,
    /// `full_page_writes`.
    pub full_page_writes: bool,
    /// `mapped_reads` (ours, default on): a buffer-pool miss on a file of 1 MiB or more is
    /// copied from a shared read-only mapping of the file instead of read with `pread`
    /// (`io::mapped`); off reads with `pread` only. (It was off for a while after a torture
    /// run lost district updates with it on; the cause was a heap race that does not depend
    /// on how pages are read, see `heap::init_if_new`.)
    pub mapped_reads: bool,
    /// `wal_buffers`, bytes (default 16MB here: PostgreSQL's automatic maximum).
    pub wal_buffers_bytes: usize,
    /// `wal_segment_size`, bytes (default 16MB; fixed when the directory is created).
    pub wal_segment_size_bytes: u64,
    /// `max_wal_size`, bytes (default 1GB): WAL volume that triggers a checkpoint, and the
    /// most WAL kept in segment files (recycled ones included) from the redo pointer on.
    pub max_wal_size_bytes: u64,
    /// `min_wal_size`, bytes (default 80MB): a checkpoint keeps at least this much WAL, from
    /// its redo pointer on, in segment files ready for reuse, recycling old segments rather
    /// than removing them (see `wal::segment::recycle_horizon`).
    pub min_wal_size_bytes: u64,
    /// `wal_keep_size`, bytes (default 0): a checkpoint also keeps this much WAL behind the
    /// insert position, whatever recovery and the slots need (for a standby in PostgreSQL;
    /// here for reading a crash's history with `settle waldump`, as `settle torture --set`
    /// does).
    pub wal_keep_size_bytes: u64,
    /// `checkpoint_timeout`, milliseconds (default 5min).
    pub checkpoint_timeout_ms: u64,
    /// `wal_writer_delay`, milliseconds (default 200ms): flush interval for asynchronous commits.
    pub wal_writer_delay_ms: u64,
    /// `default_transaction_isolation`.
    pub default_transaction_isolation: IsolationLevel,
    /// `autovacuum_freeze_max_age` (default 200 million): a table whose relfrozenxid is older
    /// gets an anti-wraparound autovacuum; also drives the XID vacuum limit.
    pub autovacuum_freeze_max_age: u32,
    /// `vacuum_freeze_min_age` (default 50 million): FreezeLimit = OldestXmin - this.
    pub vacuum_freeze_min_age: u32,
    /// `vacuum_freeze_table_age` (default 150 million): a vacuum is aggressive when
    /// relfrozenxid is older than this (capped at 95% of `autovacuum_freeze_max_age`).
    pub vacuum_freeze_table_age: u32,
    /// `vacuum_failsafe_age` (default 1.6 billion): past it VACUUM skips index vacuuming and
    /// cost delays to advance relfrozenxid as fast as it can.
    pub vacuum_failsafe_age: u32,
    /// PostgreSQL's MultiXact ages: `autovacuum_multixact_freeze_max_age` (default 400
    /// million), `vacuum_multixact_freeze_min_age` (5 million),
    /// `vacuum_multixact_freeze_table_age` (150 million) and `vacuum_multixact_failsafe_age`
    /// (1.6 billion). settledb has no MultiXacts (no row locks shared by several
    /// transactions), so they govern nothing; they are accepted, checked against PostgreSQL's
    /// bounds and shown, so that tools that set them (BenchmarkSQL-style setups, `settle tpcc
    /// --target`) run unchanged.
    pub multixact_ages: [u32; 4],
    /// `vacuum_freeze_policy` (our parameter; default `eager`).
    pub vacuum_freeze_policy: FreezePolicy,
    /// `vacuum_max_eager_freeze_failure_rate` (PostgreSQL 18's name; default 0.03): under
    /// `adaptive`, freezing a page whole because it is about to be set all-visible is done only
    /// in a range of pages whose learned failure rate (pages left all-visible that were
    /// modified again before the next VACUUM) is at most this, and where pruning writes the
    /// page's image anyway up to five times this. 0 freezes eagerly only where nothing failed.
    pub vacuum_max_eager_freeze_failure_rate: f64,
    /// `vacuum_fsm_settled` (our parameter): a page set all-visible records no free space
    /// unless more than half of it is free. `None` means "on with `eager` and `adaptive`, off
    /// otherwise".
    pub vacuum_fsm_settled: Option<bool>,
    /// `maintenance_work_mem`, bytes (default 64MB): the dead-item store's budget. Values below
    /// PostgreSQL's 1MB minimum are accepted (down to 1kB) so tests can force several index
    /// passes on small tables.
    pub maintenance_work_mem_bytes: usize,
    /// `max_parallel_maintenance_workers` (default 2): the most parallel workers one VACUUM
    /// uses beside its leader (fewer on a machine with fewer cores; see `vacuum::parallel`).
    pub max_parallel_maintenance_workers: u32,
    /// `min_parallel_table_scan_size`, bytes (default 8MB): a table needs this many pages for
    /// VACUUM to scan its heap with one parallel worker, three times as many for two, and so on.
    pub min_parallel_table_scan_size_bytes: u64,
    /// `min_parallel_index_scan_size`, bytes (default 512kB): an index needs this many pages
    /// for VACUUM to split its bulk delete among workers.
    pub min_parallel_index_scan_size_bytes: u64,
    /// `vacuum_truncate` (default on): truncate empty pages at the end of the table.
    pub vacuum_truncate: bool,
    /// `vacuum_cost_delay`, milliseconds (default 0: manual VACUUM is not throttled).
    pub vacuum_cost_delay_ms: f64,
    /// `vacuum_cost_limit` (default 200).
    pub vacuum_cost_limit: u32,
    /// `vacuum_cost_page_hit`, `_miss`, `_dirty` (defaults 1, 2, 20).
    pub vacuum_cost_page_hit: u32,
    pub vacuum_cost_page_miss: u32,
    pub vacuum_cost_page_dirty: u32,
    /// `autovacuum` (default on).
    pub autovacuum: bool,
    /// `autovacuum_max_workers` (default 3).
    pub autovacuum_max_workers: u32,
    /// `autovacuum_naptime`, milliseconds (default 1min).
    pub autovacuum_naptime_ms: u64,
    /// `autovacuum_vacuum_threshold` (50) and `autovacuum_vacuum_scale_factor` (0.2).
    pub autovacuum_vacuum_threshold: u64,
    pub autovacuum_vacuum_scale_factor: f64,
    /// `autovacuum_vacuum_insert_threshold` (1000; -1 disables) and
    /// `autovacuum_vacuum_insert_scale_factor` (0.2).
    pub autovacuum_vacuum_insert_threshold: i64,
    pub autovacuum_vacuum_insert_scale_factor: f64,
    /// `autovacuum_vacuum_cost_delay`, milliseconds (default 2ms).
    pub autovacuum_vacuum_cost_delay_ms: f64,
    /// `autovacuum_vacuum_cost_limit` (default -1: use `vacuum_cost_limit`).
    pub autovacuum_vacuum_cost_limit: i32,
    /// `log_autovacuum_min_duration`, milliseconds (default 10min; -1 disables, 0 logs all).
    pub log_autovacuum_min_duration_ms: i64,
    /// `max_prepared_transactions` (default 0, as in PostgreSQL: PREPARE TRANSACTION is
    /// refused); up to 262143. The proc array has no fixed slots, so the value only caps how
    /// many prepared transactions may exist at once.
    pub max_prepared_transactions: u32,
    /// `lock_timeout`, milliseconds (default 0: none): the longest a statement waits for a
    /// table lock or for another transaction's row (then 55P03, "canceling statement due to
    /// lock timeout"). See [`crate::lmgr`].
    pub lock_timeout_ms: u64,
    /// `deadlock_timeout`, milliseconds (default 1s): how often a waiting lock request runs
    /// the deadlock check again (it also runs it at once when the wait begins; see
    /// [`crate::lmgr`]).
    pub deadlock_timeout_ms: u64,
    /// `wal_level` (default `replica`; `logical` for logical decoding and slots).
    pub wal_level: WalLevel,
    /// `max_replication_slots` (default 10, as in PostgreSQL).
    pub max_replication_slots: u32,
    /// `max_slot_wal_keep_size`, bytes (default -1: a slot keeps WAL without limit).
    pub max_slot_wal_keep_size_bytes: i64,
    /// `logical_decoding_work_mem`, bytes (default 64MB): the reorder buffer's memory bound.
    pub logical_decoding_work_mem_bytes: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            shared_buffers_bytes: 128 << 20,
            synchronous_commit: true,
            fsync: true,
            full_page_writes: true,
            mapped_reads: true,
            wal_buffers_bytes: 16 << 20,
            wal_segment_size_bytes: 16 << 20,
            max_wal_size_bytes: 1 << 30,
            wal_keep_size_bytes: 0,
            min_wal_size_bytes: 80 << 20,
            checkpoint_timeout_ms: 5 * 60 * 1000,
            wal_writer_delay_ms: 200,
            default_transaction_isolation: IsolationLevel::ReadCommitted,
            autovacuum_freeze_max_age: 200_000_000,
            vacuum_freeze_min_age: 50_000_000,
            multixact_ages: [400_000_000, 5_000_000, 150_000_000, 1_600_000_000],
            vacuum_freeze_table_age: 150_000_000,
            vacuum_failsafe_age: 1_600_000_000,
            vacuum_freeze_policy: FreezePolicy::Eager,
            vacuum_max_eager_freeze_failure_rate: 0.03,
            vacuum_fsm_settled: None,
            maintenance_work_mem_bytes: 64 << 20,
            max_parallel_maintenance_workers: 2,
            min_parallel_table_scan_size_bytes: 8 << 20,
            min_parallel_index_scan_size_bytes: 512 << 10,
            vacuum_truncate: true,
            vacuum_cost_delay_ms: 0.0,
            vacuum_cost_limit: 200,
            vacuum_cost_page_hit: 1,
            vacuum_cost_page_miss: 2,
            vacuum_cost_page_dirty: 20,
            autovacuum: true,
            autovacuum_max_workers: 3,
            autovacuum_naptime_ms: 60_000,
            autovacuum_vacuum_threshold: 50,
            autovacuum_vacuum_scale_factor: 0.2,
            autovacuum_vacuum_insert_threshold: 1000,
            autovacuum_vacuum_insert_scale_factor: 0.2,
            autovacuum_vacuum_cost_delay_ms: 2.0,
            autovacuum_vacuum_cost_limit: -1,
            log_autovacuum_min_duration_ms: 600_000,
            lock_timeout_ms: 0,
            deadlock_timeout_ms: 1000,
            max_prepared_transactions: 0,
            wal_level: WalLevel::Replica,
            max_replication_slots: 10,
            max_slot_wal_keep_size_bytes: -1,
            logical_decoding_work_mem_bytes: 64 << 20,
        }
    }
}

/// The parameter names [`Config::set`] accepts.
pub const PARAMETERS: &[&str] = &[
    "shared_buffers",
    "synchronous_commit",
    "fsync",
    "full_page_writes",
    "mapped_reads",
    "wal_buffers",
    "wal_segment_size",
    "max_wal_size",
    "min_wal_size",
    "wal_keep_size",
    "checkpoint_timeout",
    "wal_writer_delay",
    "default_transaction_isolation",
    "autovacuum_freeze_max_age",
    "vacuum_freeze_min_age",
    "vacuum_freeze_table_age",
    "vacuum_failsafe_age",
    "autovacuum_multixact_freeze_max_age",
    "vacuum_multixact_freeze_min_age",
    "vacuum_multixact_freeze_table_age",
    "vacuum_multixact_failsafe_age",
    "vacuum_freeze_policy",
    "vacuum_max_eager_freeze_failure_rate",
    "vacuum_fsm_settled",
    "maintenance_work_mem",
    "max_parallel_maintenance_workers",
    "min_parallel_table_scan_size",
    "min_parallel_index_scan_size",
    "vacuum_truncate",
    "vacuum_cost_delay",
    "vacuum_cost_limit",
    "vacuum_cost_page_hit",
    "vacuum_cost_page_miss",
    "vacuum_cost_page_dirty",
    "autovacuum",
    "autovacuum_max_workers",
    "autovacuum_naptime",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_insert_threshold",
    "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
    "log_autovacuum_min_duration",
    "lock_timeout",
    "deadlock_timeout",
    "max_prepared_transactions",
    "wal_level",
    "max_replication_slots",
    "max_slot_wal_keep_size",
    "logical_decoding_work_mem",
];

/// The parameters read only when the data directory is opened (PostgreSQL's `postmaster` and
/// `internal` contexts, plus `fsync`, `full_page_writes` and `wal_writer_delay`, which
/// PostgreSQL rereads on SIGHUP and settledb fixes at open). Every other parameter takes a new
/// value from [`crate::Database::reload_config`] while the database is open.
/// (`autovacuum` itself changes: off stops all but anti-wraparound autovacuums, as in
/// PostgreSQL; on starts autovacuum's threads if they were not started at open.)
pub const AT_OPEN: &[&str] = &[
    "shared_buffers",
    "fsync",
    "full_page_writes",
    "mapped_reads",
    "wal_buffers",
    "wal_segment_size",
    "wal_writer_delay",
    "autovacuum_freeze_max_age",
    "autovacuum_multixact_freeze_max_age",
    "autovacuum_max_workers",
    "deadlock_timeout",
    "max_prepared_transactions",
    "wal_level",
    "max_replication_slots",
];

impl Config {
    /// Copies the parameters of [`AT_OPEN`] from `open` (the configuration the database was
    /// opened with) and returns the names of those whose value differed.
    pub fn keep_at_open(&mut self, open: &Config) -> Vec<&'static str> {
        let mut kept = Vec::new();
        macro_rules! keep {
            ($($name:literal => $field:ident),* $(,)?) => {$(
                if self.$field != open.$field {
                    self.$field = open.$field.clone();
                    kept.push($name);
                }
            )*};
        }
        keep!(
            "shared_buffers" => shared_buffers_bytes,
            "fsync" => fsync,
            "full_page_writes" => full_page_writes,
            "mapped_reads" => mapped_reads,
            "wal_buffers" => wal_buffers_bytes,
            "wal_segment_size" => wal_segment_size_bytes,
            "wal_writer_delay" => wal_writer_delay_ms,
            "autovacuum_freeze_max_age" => autovacuum_freeze_max_age,
            "autovacuum_max_workers" => autovacuum_max_workers,
            "deadlock_timeout" => deadlock_timeout_ms,
            "max_prepared_transactions" => max_prepared_transactions,
            "wal_level" => wal_level,
            "max_replication_slots" => max_replication_slots,
        );
        if self.multixact_ages[0] != open.multixact_ages[0] {
            self.multixact_ages[0] = open.multixact_ages[0];
            kept.push("autovacuum_multixact_freeze_max_age");
        }
        kept
    }

    /// Sets one parameter from its textual form.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let v = value.trim();
        match name {
            "shared_buffers" => {
                self.shared_buffers_bytes = bytes(name, v, BLCKSZ as u64, 16 * BLCKSZ as u64, 1 << 40)? as usize
            }
            "synchronous_commit" => self.synchronous_commit = boolean(name, v)?,
            "fsync" => self.fsync = boolean(name, v)?,
            "full_page_writes" => self.full_page_writes = boolean(name, v)?,
            "mapped_reads" => self.mapped_reads = boolean(name, v)?,
            "wal_buffers" => self.wal_buffers_bytes = bytes(name, v, BLCKSZ as u64, 32 << 10, 1 << 31)? as usize,
            "wal_segment_size" => {
                let b = bytes(name, v, 1 << 20, 1 << 20, 1 << 30)?;
                if !b.is_power_of_two() {
                    return Err(bad(name, v, "must be a power of two between 1MB and 1GB"));
                }
                self.wal_segment_size_bytes = b;
            }
            "max_wal_size" => self.max_wal_size_bytes = bytes(name, v, 1 << 20, 2 << 20, 1 << 50)?,
            "min_wal_size" => self.min_wal_size_bytes = bytes(name, v, 1 << 20, 2 << 20, 1 << 50)?,
            "wal_keep_size" => self.wal_keep_size_bytes = bytes(name, v, 1 << 20, 0, 1 << 50)?,
            "checkpoint_timeout" => self.checkpoint_timeout_ms = millis(name, v, 1000, 30_000, 86_400_000)?,
            "wal_writer_delay" => self.wal_writer_delay_ms = millis(name, v, 1, 1, 10_000)?,
            "default_transaction_isolation" => {
                self.default_transaction_isolation = match v.to_ascii_lowercase().as_str() {
                    "read committed" => IsolationLevel::ReadCommitted,
                    "repeatable read" => IsolationLevel::RepeatableRead,
                    _ => return Err(bad(name, v, "expected \"read committed\" or \"repeatable read\"")),
                }
            }
            "autovacuum_freeze_max_age" => {
                self.autovacuum_freeze_max_age = integer(name, v, 100_000, 2_000_000_000)? as u32
            }
            "vacuum_freeze_min_age" => self.vacuum_freeze_min_age = integer(name, v, 0, 1_000_000_000)? as u32,
            "vacuum_freeze_table_age" => self.vacuum_freeze_table_age = integer(name, v, 0, 2_000_000_000)? as u32,
            "vacuum_failsafe_age" => self.vacuum_failsafe_age = integer(name, v, 0, 2_100_000_000)? as u32,
            "autovacuum_multixact_freeze_max_age" => {
                self.multixact_ages[0] = integer(name, v, 10_000, 2_000_000_000)? as u32
            }
            "vacuum_multixact_freeze_min_age" => self.multixact_ages[1] = integer(name, v, 0, 1_000_000_000)? as u32,
            "vacuum_multixact_freeze_table_age" => self.multixact_ages[2] = integer(name, v, 0, 2_000_000_000)? as u32,
            "vacuum_multixact_failsafe_age" => self.multixact_ages[3] = integer(name, v, 0, 2_100_000_000)? as u32,
            "vacuum_freeze_policy" => {
                self.vacuum_freeze_policy = FreezePolicy::parse(v)
                    .ok_or_else(|| bad(name, v, "expected \"lazy\", \"pg16\", \"eager\" or \"adaptive\""))?
            }
            "vacuum_max_eager_freeze_failure_rate" => {
                self.vacuum_max_eager_freeze_failure_rate = float(name, v, 0.0, 1.0)?
            }
            "vacuum_fsm_settled" => {
                self.vacuum_fsm_settled = if v.eq_ignore_ascii_case("auto") { None } else { Some(boolean(name, v)?) }
            }
            "maintenance_work_mem" => {
                self.maintenance_work_mem_bytes = bytes(name, v, 1 << 10, 1 << 10, i32::MAX as u64 * 1024)? as usize
            }
            "max_parallel_maintenance_workers" => {
                self.max_parallel_maintenance_workers = integer(name, v, 0, 1024)? as u32
            }
            "min_parallel_table_scan_size" => {
                self.min_parallel_table_scan_size_bytes =
                    bytes(name, v, BLCKSZ as u64, 0, (i32::MAX as u64 / 3) * BLCKSZ as u64)?
            }
            "min_parallel_index_scan_size" => {
                self.min_parallel_index_scan_size_bytes =
                    bytes(name, v, BLCKSZ as u64, 0, (i32::MAX as u64 / 3) * BLCKSZ as u64)?
            }
            "vacuum_truncate" => self.vacuum_truncate = boolean(name, v)?,
            "vacuum_cost_delay" => self.vacuum_cost_delay_ms = float(name, v, 0.0, 100.0)?,
            "vacuum_cost_limit" => self.vacuum_cost_limit = integer(name, v, 1, 10_000)? as u32,
            "vacuum_cost_page_hit" => self.vacuum_cost_page_hit = integer(name, v, 0, 10_000)? as u32,
            "vacuum_cost_page_miss" => self.vacuum_cost_page_miss = integer(name, v, 0, 10_000)? as u32,
            "vacuum_cost_page_dirty" => self.vacuum_cost_page_dirty = integer(name, v, 0, 10_000)? as u32,
            "autovacuum" => self.autovacuum = boolean(name, v)?,
            "autovacuum_max_workers" => self.autovacuum_max_workers = integer(name, v, 1, 262_143)? as u32,
            "max_prepared_transactions" => {
                self.max_prepared_transactions =
                    integer(name, v, 0, i64::from(crate::xact::twophase::MAX_PREPARED_TRANSACTIONS_LIMIT))? as u32
            }
            "autovacuum_naptime" => self.autovacuum_naptime_ms = millis(name, v, 1000, 1000, 2_147_483_000)?,
            "autovacuum_vacuum_threshold" => {
                self.autovacuum_vacuum_threshold = integer(name, v, 0, i32::MAX as i64)? as u64
            }
            "autovacuum_vacuum_scale_factor" => self.autovacuum_vacuum_scale_factor = float(name, v, 0.0, 100.0)?,
            "autovacuum_vacuum_insert_threshold" => {
                self.autovacuum_vacuum_insert_threshold = integer(name, v, -1, i32::MAX as i64)?
            }
            "autovacuum_vacuum_insert_scale_factor" => {
                self.autovacuum_vacuum_insert_scale_factor = float(name, v, 0.0, 100.0)?
            }
            "autovacuum_vacuum_cost_delay" => {
                self.autovacuum_vacuum_cost_delay_ms =
                    if v == "-1" { self.vacuum_cost_delay_ms } else { float(name, v, 0.0, 100.0)? }
            }
            "autovacuum_vacuum_cost_limit" => {
                self.autovacuum_vacuum_cost_limit = integer(name, v, -1, 10_000)? as i32;
                if self.autovacuum_vacuum_cost_limit == 0 {
                    return Err(bad(name, v, "must be -1 or between 1 and 10000"));
                }
            }
            "log_autovacuum_min_duration" => {
                self.log_autovacuum_min_duration_ms =
                    if v == "-1" { -1 } else { millis(name, v, 1, 0, i32::MAX as u64)? as i64 }
            }
            "wal_level" => {
                self.wal_level =
                    WalLevel::parse(v).ok_or_else(|| bad(name, v, "expected \"replica\" or \"logical\""))?
            }
            "max_replication_slots" => self.max_replication_slots = integer(name, v, 0, 262_143)? as u32,
            "max_slot_wal_keep_size" => {
                self.max_slot_wal_keep_size_bytes =
                    if v == "-1" { -1 } else { bytes(name, v, 1 << 20, 0, i32::MAX as u64 * (1 << 20))? as i64 }
            }
            "logical_decoding_work_mem" => {
                self.logical_decoding_work_mem_bytes =
                    bytes(name, v, 1 << 10, 64 << 10, i32::MAX as u64 * 1024)? as usize
            }
            "lock_timeout" => self.lock_timeout_ms = millis(name, v, 1, 0, i32::MAX as u64)?,
            "deadlock_timeout" => self.deadlock_timeout_ms = millis(name, v, 1, 1, i32::MAX as u64)?,
            _ => {
                return Err(Error::Config(format!("unrecognized configuration parameter \"{name}\"")));
            }
        }
        Ok(())
    }

    /// Whether the all-visible FSM heuristic is on (`vacuum_fsm_settled`, `auto` = with `eager`
    /// and `adaptive`).
    pub fn fsm_settled(&self) -> bool {
        self.vacuum_fsm_settled.unwrap_or(self.vacuum_freeze_policy.fsm_settled_by_default())
    }

    /// The cost limit autovacuum workers share.
    /// `lock_timeout` as a duration, `None` when 0 (no timeout).
    pub fn lock_timeout(&self) -> Option<std::time::Duration> {
        (self.lock_timeout_ms > 0).then(|| std::time::Duration::from_millis(self.lock_timeout_ms))
    }

    pub fn autovacuum_cost_limit(&self) -> u32 {
        if self.autovacuum_vacuum_cost_limit > 0 {
            self.autovacuum_vacuum_cost_limit as u32
        } else {
            self.vacuum_cost_limit
        }
    }

    /// Builds a configuration from `name=value` pairs on top of the defaults.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Config> {
        let mut c = Config::default();
        for (k, v) in pairs {
            c.set(k, v)?;
        }
        Ok(c)
    }
}

fn bad(name: &str, value: &str, why: &str) -> Error {
    Error::Config(format!("invalid value for parameter \"{name}\": \"{value}\" ({why})"))
}

fn boolean(name: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(bad(name, v, "expected a Boolean value")),
    }
}

fn integer(name: &str, v: &str, min: i64, max: i64) -> Result<i64> {
    let n: i64 = v.parse().map_err(|_| bad(name, v, "expected an integer"))?;
    if n < min || n > max {
        return Err(bad(name, v, &format!("must be between {min} and {max}")));
    }
    Ok(n)
}

fn float(name: &str, v: &str, min: f64, max: f64) -> Result<f64> {
    // Cost delays may carry PostgreSQL's "ms" unit; scale factors have none.
    let n: f64 = v.trim_end_matches("ms").trim().parse().map_err(|_| bad(name, v, "expected a number"))?;
    if !(min..=max).contains(&n) {
        return Err(bad(name, v, &format!("must be between {min} and {max}")));
    }
    Ok(n)
}

fn split_unit(v: &str) -> (&str, &str) {
    let idx = v.find(|c: char| !(c.is_ascii_digit() || c == '-')).unwrap_or(v.len());
    (v[..idx].trim(), v[idx..].trim())
}

/// A memory size; a bare number is in `default_unit` bytes (PostgreSQL's GUC_UNIT_BLOCKS/KB).
fn bytes(name: &str, v: &str, default_unit: u64, min: u64, max: u64) -> Result<u64> {
    let (num, unit) = split_unit(v);
    let n: u64 = num.parse().map_err(|_| bad(name, v, "expected a size such as 128MB"))?;
    let mult = match unit {
        "" => default_unit,
        "B" => 1,
        "kB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        "TB" => 1 << 40,
        _ => return Err(bad(name, v, "valid units are \"B\", \"kB\", \"MB\", \"GB\" and \"TB\"")),
    };
    let b = n.checked_mul(mult).ok_or_else(|| bad(name, v, "out of range"))?;
    if b < min || b > max {
        return Err(bad(name, v, &format!("must be between {min} and {max} bytes")));
    }
    Ok(b)
}

fn millis(name: &str, v: &str, default_unit: u64, min: u64, max: u64) -> Result<u64> {
    let (num, unit) = split_unit(v);
    let n: u64 = num.parse().map_err(|_| bad(name, v, "expected a time such as 5min"))?;
    let mult = match unit {
        "" => default_unit,
        "ms" => 1,
        "s" => 1000,
        "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(bad(name, v, "valid units are \"ms\", \"s\", \"min\", \"h\" and \"d\"")),
    };
    let ms = n.checked_mul(mult).ok_or_else(|| bad(name, v, "out of range"))?;
    if ms < min || ms > max {
        return Err(bad(name, v, &format!("must be between {min} and {max} ms")));
    }
    Ok(ms)
}

/// A running database's configuration: the parameters of [`AT_OPEN`] as opened, the others as
/// last reloaded. Readers take a snapshot ([`LiveConfig::get`]); the three that every
/// transaction reads are also kept in atomics, so that beginning and committing touch no
/// shared lock.
pub(crate) struct LiveConfig {
    current: parking_lot::RwLock<Arc<Config>>,
    synchronous_commit: AtomicBool,
    lock_timeout_ms: AtomicU64,
    repeatable_read: AtomicBool,
}

impl LiveConfig {
    pub(crate) fn new(c: Config) -> LiveConfig {
        LiveConfig {
            synchronous_commit: AtomicBool::new(c.synchronous_commit),
            lock_timeout_ms: AtomicU64::new(c.lock_timeout_ms),
            repeatable_read: AtomicBool::new(c.default_transaction_isolation == IsolationLevel::RepeatableRead),
            current: parking_lot::RwLock::new(Arc::new(c)),
        }
    }

    /// The configuration now.
    pub(crate) fn get(&self) -> Arc<Config> {
        self.current.read().clone()
    }

    pub(crate) fn synchronous_commit(&self) -> bool {
        self.synchronous_commit.load(Ordering::Relaxed)
    }

    pub(crate) fn default_transaction_isolation(&self) -> IsolationLevel {
        if self.repeatable_read.load(Ordering::Relaxed) {
            IsolationLevel::RepeatableRead
        } else {
            IsolationLevel::ReadCommitted
        }
    }

    pub(crate) fn lock_timeout(&self) -> Option<std::time::Duration> {
        let ms = self.lock_timeout_ms.load(Ordering::Relaxed);
        (ms > 0).then(|| std::time::Duration::from_millis(ms))
    }

    /// Takes `next`'s values for every parameter not in [`AT_OPEN`]; returns the names of
    /// those in it whose new value was left unapplied.
    pub(crate) fn reload(&self, mut next: Config) -> Vec<&'static str> {
        let mut cur = self.current.write();
        let kept = next.keep_at_open(&cur);
        self.synchronous_commit.store(next.synchronous_commit, Ordering::Relaxed);
        self.lock_timeout_ms.store(next.lock_timeout_ms, Ordering::Relaxed);
        self.repeatable_read
            .store(next.default_transaction_isolation == IsolationLevel::RepeatableRead, Ordering::Relaxed);
        *cur = Arc::new(next);
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_postgres_units() {
        let c = Config::from_pairs([
            ("shared_buffers", "1GB"),
            ("checkpoint_timeout", "30s"),
            ("synchronous_commit", "off"),
        ])
        .unwrap();
        assert_eq!(c.shared_buffers_bytes, 1 << 30);
        assert_eq!(c.checkpoint_timeout_ms, 30_000);
        assert!(!c.synchronous_commit);
        let c = Config::from_pairs([("min_wal_size", "32")]).unwrap();
        assert_eq!(c.min_wal_size_bytes, 32 << 20, "min_wal_size is in megabytes");
        assert_eq!(Config::default().min_wal_size_bytes, 80 << 20);
        assert!(Config::from_pairs([("min_wal_size", "1MB")]).is_err(), "PostgreSQL's minimum is 2MB");
        let c = Config::from_pairs([("shared_buffers", "1024")]).unwrap();
        assert_eq!(c.shared_buffers_bytes, 1024 * BLCKSZ, "a bare number is in blocks");
    }

    #[test]
    fn adaptive_takes_postgresql_18s_failure_rate() {
        assert_eq!(Config::default().vacuum_max_eager_freeze_failure_rate, 0.03);
        let c =
            Config::from_pairs([("vacuum_freeze_policy", "Adaptive"), ("vacuum_max_eager_freeze_failure_rate", "0.1")])
                .unwrap();
        assert_eq!((c.vacuum_freeze_policy, c.vacuum_max_eager_freeze_failure_rate), (FreezePolicy::Adaptive, 0.1));
        assert!(c.fsm_settled(), "the all-visible FSM heuristic comes with adaptive as with eager");
        assert_eq!(FreezePolicy::parse(FreezePolicy::Adaptive.name()), Some(FreezePolicy::Adaptive));
        assert!(Config::from_pairs([("vacuum_max_eager_freeze_failure_rate", "1.5")]).is_err());
        assert!(Config::from_pairs([("vacuum_max_eager_freeze_failure_rate", "-0.1")]).is_err());
    }

    #[test]
    fn rejects_unknown_names_and_bad_values() {
        let e = Config::from_pairs([("shared_bufers", "1GB")]).unwrap_err();
        assert_eq!(e.to_string(), "invalid configuration: unrecognized configuration parameter \"shared_bufers\"");
        assert!(Config::from_pairs([("fsync", "maybe")]).is_err());
        assert!(Config::from_pairs([("shared_buffers", "1XB")]).is_err());
        assert!(Config::from_pairs([("wal_segment_size", "3MB")]).is_err());
        assert!(Config::from_pairs([("autovacuum_freeze_max_age", "10")]).is_err());
    }
}
