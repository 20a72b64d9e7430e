//! The public API: [`Database`] and [`Transaction`].
//!
//! ```no_run
//! use settledb::{Column, Config, Database, Schema, TableOptions, Type, Value};
//!
//! let db = Database::open("/tmp/settledb-example", Config::default())?;
//! let schema = Schema {
//!     columns: vec![
//!         Column { name: "id".into(), ty: Type::Int4, nullable: false },
//!         Column { name: "note".into(), ty: Type::Text, nullable: true },
//!     ],
//! };
//! db.create_table("notes", schema, TableOptions::default())?;
//! let notes = db.table("notes")?;
//!
//! let mut tx = db.begin()?;
//! let tid = tx.insert(&notes, &[Value::Int4(1), Value::Text("hello".into())])?;
//! tx.commit()?;
//!
//! let mut tx = db.begin()?;
//! let new_tid = tx.update_with(&notes, tid, |row| {
//!     let mut row = row.to_vec();
//!     row[1] = Value::Text("hello, world".into());
//!     Ok(row)
//! })?;
//! assert!(new_tid.is_some());
//! tx.commit()?;
//! db.close()?;
//! # Ok::<(), settledb::Error>(())
//! ```
//!
//! `Database` is `Send + Sync`: share it (`Arc<Database>` or scoped threads) and run one
//! transaction per thread. A transaction that is dropped without `commit` rolls back.
//!
//! # Isolation
//!
//! READ COMMITTED (the default) takes a new snapshot for every call; an update or delete that
//! meets a row changed by a transaction still running waits for it, then, if it committed,
//! follows the row to its newest version and re-applies the change there (the closure of
//! [`Transaction::update_with`] is re-run on the new values). REPEATABLE READ keeps the first
//! snapshot and fails such an update with [`Error::SerializationFailure`].
//!
//! # Locks
//!
//! Every read takes the table's AccessShare lock and every write its RowExclusive lock, held
//! to the transaction's end; DDL and VACUUM take stronger modes (see [`crate::lmgr`] and
//! `docs/locking.md`). Waits for table locks and for other transactions' rows form one graph:
//! a wait that would close a cycle fails at once with [`Error::Deadlock`] (the waiter that
//! closes it is the victim), and `lock_timeout` bounds every wait
//! ([`Error::LockNotAvailable`]). [`Database::locks`] is `pg_locks`.

mod alter;
pub mod autovacuum;
pub(crate) mod ddl;
mod decoding;
mod pgstat;
mod publication;
mod slots;
pub mod startup;
mod transaction;
mod vacuum;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::buffer::{BufferPool, BufferUsage, WalFlush};
use crate::catalog::{Catalog, TableEntry};
use crate::config::{Config, LiveConfig};
use crate::error::{Error, Result};
use crate::heap::tuple::Schema;
use crate::heap::{HeapEnv, TxContext};
use crate::io::{FileSystem, PreadFs, RealFs};
use crate::page::BLCKSZ;
use crate::smgr::Smgr;
use crate::stats::{DbTotals, StatsFile};
use crate::types::{Fork, FullXid, Lsn, Oid, Xid};
use crate::wal::control::{ControlFile, DbState};
use crate::wal::{RecordBuilder, Rmgr, Wal, WalStats};
use crate::xact::{TransactionManager, XactOptions};
pub use alter::{AlterTable, Altered};
pub use ddl::Index;
pub use decoding::{DecodeLimits, DecodeResult, DecodeSummary};
pub use publication::PublicationTarget;
pub use startup::RecoveryReport;
pub use transaction::{InsertOrConflict, Scan, Transaction, TruncateOptions, VacuumFullParams, VacuumFullReport};
pub use vacuum::PagePin;

/// pg_stat_database-style counters.
#[derive(Debug, Default)]
pub struct DbCounters {
    pub xact_commit: crate::counter::StripedCounter,
    pub xact_rollback: crate::counter::StripedCounter,
    pub tup_returned: crate::counter::StripedCounter,
    pub tup_fetched: crate::counter::StripedCounter,
    pub tup_inserted: crate::counter::StripedCounter,
    pub tup_updated: crate::counter::StripedCounter,
    pub tup_deleted: crate::counter::StripedCounter,
    pub tup_hot_updated: crate::counter::StripedCounter,
    pub idx_scan: crate::counter::StripedCounter,
    pub idx_tup_read: crate::counter::StripedCounter,
    pub idx_tup_fetch: crate::counter::StripedCounter,
    pub heap_fetches: crate::counter::StripedCounter,
    pub heap_fetches_avoided: crate::counter::StripedCounter,
}

/// A snapshot of the database's statistics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DbStats {
    pub xact_commit: u64,
    pub xact_rollback: u64,
    pub tup_returned: u64,
    pub tup_fetched: u64,
    pub tup_inserted: u64,
    pub tup_updated: u64,
    pub tup_deleted: u64,
    /// Updates that were HOT (`n_tup_hot_upd`).
    pub tup_hot_updated: u64,
    /// Index scans started, entries they read, heap rows they returned.
    pub idx_scan: u64,
    pub idx_tup_read: u64,
    pub idx_tup_fetch: u64,
    /// Index-only scan entries checked against the heap, and those the visibility map spared.
    pub heap_fetches: u64,
    pub heap_fetches_avoided: u64,
    /// Buffer accesses and WAL written since this open (deltas between two snapshots measure
    /// a piece of work).
    pub buffers: BufferUsage,
    pub wal: WalStats,
    pub checkpoints: u64,
    /// Pages read from disk and found in the buffer pool, as `pg_stat_database` counts them:
    /// like every counter above except `buffers`, `wal` and `checkpoints`, kept across a clean
    /// shutdown (see [`crate::stats`]).
    pub blks_read: u64,
    pub blks_hit: u64,
    /// WAL written, kept across a clean shutdown (`pg_stat_wal`).
    pub wal_records: u64,
    pub wal_fpi: u64,
    pub wal_bytes: u64,
    /// Deadlocks detected, kept across a clean shutdown (`pg_stat_database.deadlocks`).
    pub deadlocks: u64,
    /// WAL writes forced by full WAL buffers, WAL writes and WAL fsyncs, kept across a clean
    /// shutdown (`pg_stat_wal`'s `wal_buffers_full`, `wal_write`, `wal_sync`).
    pub wal_buffers_full: u64,
    pub wal_write: u64,
    pub wal_sync: u64,
    /// When the counters kept across clean shutdowns started from zero: the database's
    /// creation or the open after a crash (microseconds since the Unix epoch).
    pub stats_reset: u64,
}

struct WalFlusher(Arc<Wal>);

impl WalFlush for WalFlusher {
    fn flush(&self, upto: Lsn) -> Result<()> {
        self.0.flush(upto)
    }
}

pub(crate) struct Inner {
    pub(crate) config: LiveConfig,
    pub(crate) dir: PathBuf,
    pub(crate) fs: Arc<dyn FileSystem>,
    pub(crate) pool: BufferPool,
    pub(crate) wal: Arc<Wal>,
    pub(crate) xact: TransactionManager,
    pub(crate) catalog: Catalog,
    pub(crate) counters: DbCounters,
    /// The database counters the last clean shutdown saved; those of `counters` were loaded
    /// into it, the buffer and WAL totals are added to this run's.
    restored: DbTotals,
    control: Mutex<ControlFile>,
    checkpoint_lock: Mutex<()>,
    checkpoints: AtomicU64,
    /// Table locks and the wait-for graph of every lock and XID wait ([`crate::lmgr`]).
    pub(crate) lmgr: crate::lmgr::LockManager,
    /// The lock owners of prepared transactions, whose locks last until COMMIT/ROLLBACK
    /// PREPARED (in this run only: a restart brings prepared transactions back without them).
    pub(crate) prepared_locks: Mutex<std::collections::HashMap<crate::types::FullXid, crate::lmgr::LockOwner>>,
    /// The storage swaps of transactions prepared after a TRUNCATE, in this run (after a
    /// restart their states' file lists stand in for them).
    pub(in crate::db) prepared_swaps:
        Mutex<std::collections::HashMap<crate::types::FullXid, Vec<transaction::StorageSwap>>>,
    pub(crate) shutdown: AtomicBool,
    bg_wake: Condvar,
    bg_mutex: Mutex<()>,
    bg_error: Mutex<Option<String>>,
    /// Progress of the VACUUMs running now (`pg_stat_progress_vacuum`).
    pub(crate) vacuum_progress: Mutex<Vec<Arc<crate::vacuum::VacuumProgress>>>,
    pub(crate) autovacuum: autovacuum::AutovacuumState,
    /// The table statistics of prepared transactions, applied when they are finished (like
    /// all statistics, not kept across a crash).
    pub(crate) prepared_counts: Mutex<std::collections::HashMap<crate::types::FullXid, PreparedCounts>>,
    /// The replication slots (`pg_replslot`, see [`crate::decode::slot`]).
    pub(crate) slots: crate::decode::slot::ReplicationSlots,
    /// Their cumulative counters (`pg_stat_replication_slots`), by name.
    pub(crate) slot_stats: Mutex<std::collections::BTreeMap<String, crate::stats::SlotStats>>,
    /// The running-transactions records the last decoding session read, so that confirming
    /// what it decoded does not read the same WAL again (see `slots::RunningXactsSeen`).
    pub(crate) running_xacts_seen: Mutex<Option<slots::RunningXactsSeen>>,
    /// The snapshots transactions export now (`SNAPSHOT 'export'`, see `transaction::export`).
    pub(crate) exported_snapshots: transaction::ExportedSnapshots,
    /// The columns' SQL types a layer above the engine gives, for the output plugins.
    pub(crate) column_types: parking_lot::RwLock<Option<Arc<dyn crate::decode::sqltypes::ColumnTypes>>>,
}

type PreparedCounts = Vec<(Arc<TableEntry>, crate::stats::TableCounts)>;

impl Inner {
    pub(crate) fn env(&self) -> HeapEnv<'_> {
        HeapEnv { pool: &self.pool, wal: &self.wal, xact: &self.xact }
    }

    /// Waits for `other` to finish on behalf of `owner` (whose rows carry `me`), failing
    /// instead when that would close a cycle of waits (table locks included, see
    /// [`crate::lmgr`]) or after `timeout` (`lock_timeout`). Either may be a subtransaction's
    /// XID: the graph of waiters is kept between top-level transactions (a transaction waits as
    /// a whole), while the wait itself ends as soon as `other` does, which for a
    /// subtransaction may be at its ROLLBACK TO.
    pub(crate) fn wait_for_xid(
        &self,
        owner: &crate::lmgr::LockOwner,
        me: Xid,
        other: Xid,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let wait_on = other;
        let (me, other) = (self.xact.top_level_of(me), self.xact.top_level_of(other));
        self.lmgr.wait_for_xid(owner, me, other, timeout, &|d| self.xact.wait_for_timeout(wait_on, d))
    }

    /// Takes a checkpoint (see [`startup`]). `shutdown` marks the control file cleanly shut down.
    pub(crate) fn checkpoint(&self, shutdown: bool) -> Result<Lsn> {
        let _g = self.checkpoint_lock.lock();
        let redo = self.wal.begin_checkpoint();
        // A commit record before `redo` is not replayed: its CLOG bit must be in what we write.
        self.xact.wait_for_commits_in_flight();
        // Where a logical decoder starting at `redo` learns which transactions were running
        // (`LogStandbySnapshot`, logged by PostgreSQL's checkpoints too).
        self.xact.log_running_xacts(&*self.wal)?;
        self.wal.flush(self.wal.insert_lsn())?;
        // A failed fsync may have dropped the pages it was to make durable, and the buffer pool
        // no longer holds them dirty: a later checkpoint whose fsync succeeds would then move the
        // redo pointer past WAL that recovery still needs ("fsyncgate"). So a failure to make the
        // CLOG or the data files durable poisons the WAL (no later checkpoint, write or command
        // succeeds) and leaves the control file naming the previous checkpoint, whose redo
        // pointer covers every lost write. A failed *write* (ENOSPC) leaves its buffer dirty and
        // is simply retried by the next checkpoint, as in PostgreSQL.
        self.xact.clog().checkpoint(&*self.wal).map_err(|e| self.wal.poison_after("checkpoint of the CLOG", e))?;
        // Prepared transactions whose PREPARE record replay from `redo` would not see get a
        // state file (waited for above like commits: `commits_in_flight`).
        self.xact
            .checkpoint_twophase(redo)
            .map_err(|e| self.wal.poison_after("writing two-phase state files at checkpoint", e))?;
        // Slots whose state changed without being written (`CheckPointReplicationSlots`). Only
        // their confirmed_flush_lsn can differ from their file (restart_lsn and catalog_xmin
        // are written before they move), and either file is whole (`state.tmp`, then a
        // rename): a failure is logged and retried by the next checkpoint, as in PostgreSQL.
        if let Err(e) = self.checkpoint_replication_slots() {
            self.log_line(&format!("LOG:  could not save replication slot state at checkpoint: {e}\n"));
        }
        self.xact.truncate_subtrans();
        self.pool.flush_all()?;
        self.pool.smgr().sync_all().map_err(|e| self.wal.poison_after("fsync of data files at checkpoint", e))?;
        // Written like the control file (and in the same directory): a failed fsync there is
        // as final as one of the control file's.
        self.pool
            .smgr()
            .save_sizes(&startup::relsize_path(&self.dir))
            .map_err(|e| self.wal.poison_after("writing the relation size map", e))?;
        let oldest_xid = self.catalog.database_frozen_xid().unwrap_or(Xid::FIRST_NORMAL);
        let info = startup::CheckpointInfo {
            redo,
            next_xid: self.xact.next_full_xid(),
            oldest_xid,
            next_oid: self.catalog.allocate_oid(),
        };
        let kind = if shutdown { startup::XLOG_CHECKPOINT_SHUTDOWN } else { startup::XLOG_CHECKPOINT };
        let end = self.wal.insert(&RecordBuilder {
            toplevel_xid: crate::types::Xid::INVALID,
            rmgr: Rmgr::Xlog,
            info: kind,
            xid: Xid::INVALID,
            blocks: vec![],
            main_data: info.encode(),
        })?;
        self.wal.flush(end)?;
        let prior_redo = {
            let mut current = self.control.lock();
            let prior_redo = current.redo_lsn;
            let mut c = current.clone();
            c.prev_checkpoint_lsn = c.checkpoint_lsn;
            c.checkpoint_lsn = end;
            c.redo_lsn = redo;
            c.next_xid = info.next_xid;
            c.oldest_xid = oldest_xid;
            c.next_oid = info.next_oid;
            c.state = if shutdown { DbState::ShutDown } else { DbState::InProduction };
            c.time_secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            // Either the old or the new control file survives a crash; which one is unknown after
            // a failure, so stop (both name a checkpoint whose WAL is still there).
            c.write(&*self.fs, &startup::control_path(&self.dir))
                .map_err(|e| self.wal.poison_after("writing the control file", e))?;
            *current = c;
            prior_redo
        };
        // Only now, with the control file naming this checkpoint, is the WAL before `redo`
        // no longer needed by recovery; replication slots may need more of it (`KeepLogSeg`,
        // invalidating those past `max_slot_wal_keep_size`).
        let cfg = self.config.get();
        let mut keep = self.slot_keep_lsn()?;
        if cfg.wal_keep_size_bytes > 0 {
            // `wal_keep_size` behind the end of this checkpoint's record (at least the first
            // byte of the WAL, so that 0/0 does not read as "nothing to keep").
            let by_size = Lsn(end.0.saturating_sub(cfg.wal_keep_size_bytes).max(1));
            keep = if keep == Lsn::INVALID { by_size } else { keep.min(by_size) };
        }
        self.wal.remove_old_segments_keeping(redo, keep, prior_redo, cfg.min_wal_size_bytes, cfg.max_wal_size_bytes)?;
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(end)
    }

    /// Sleeps up to `d` unless shutting down; returns false when the thread should stop.
    fn nap(&self, d: Duration) -> bool {
        let mut g = self.bg_mutex.lock();
        if self.shutdown.load(Ordering::Acquire) {
            return false;
        }
        self.bg_wake.wait_for(&mut g, d);
        !self.shutdown.load(Ordering::Acquire)
    }

    /// The WAL writer: flushes WAL every `wal_writer_delay`, and at once while more than
    /// `WAL_WRITER_FLUSH_AFTER` bytes are unflushed, so that asynchronous commits become durable
    /// promptly and a backend evicting a dirty page rarely has to wait for an fsync itself.
    /// Inserters wake it when they have buffered a megabyte (see [`Wal::set_writer_waker`]), so
    /// that one producing WAL fast (VACUUM) rarely finds `wal_buffers` full and writes out
    /// itself. It sleeps by parking: an unpark that comes between its check of the backlog and
    /// its park makes the park return at once, so no wake-up is lost, and the inserter waking
    /// it never waits for a lock this thread could hold while descheduled.
    fn wal_writer_loop(self: Arc<Inner>) {
        const WAL_WRITER_FLUSH_AFTER: u64 = 1 << 20;
        let delay = Duration::from_millis(self.config.get().wal_writer_delay_ms.max(1));
        loop {
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            let behind = self.wal.insert_lsn().0.saturating_sub(self.wal.flushed_lsn().0);
            if behind < WAL_WRITER_FLUSH_AFTER {
                std::thread::park_timeout(delay);
            }
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            if let Err(e) = self.wal.flush(self.wal.insert_lsn()) {
                *self.bg_error.lock() = Some(e.to_string());
                return;
            }
        }
    }

    /// The background writer: writes pages bulk writers have finished with (write-behind),
    /// and logs the running transactions every [`LOG_SNAPSHOT_INTERVAL`] while WAL is written.
    fn bgwriter_loop(self: Arc<Inner>) {
        let mut last_snapshot = (Instant::now(), self.wal.insert_lsn());
        while !self.shutdown.load(Ordering::Acquire) {
            let done = self.pool.write_behind(Duration::from_millis(200)).and_then(|_| {
                if last_snapshot.0.elapsed() < LOG_SNAPSHOT_INTERVAL {
                    return Ok(());
                }
                last_snapshot = (Instant::now(), self.log_snapshot_if_written(last_snapshot.1)?);
                Ok(())
            });
            if let Err(e) = done {
                *self.bg_error.lock() = Some(e.to_string());
                return;
            }
        }
    }

    /// With `wal_level = logical`, logs a running-transactions record when WAL was written
    /// since `last` (the end of the one logged last), and returns where it ends; returns `last`
    /// otherwise. PostgreSQL's background writer does the same every 15 s
    /// (`LogStandbySnapshot`, `LOG_SNAPSHOT_INTERVAL_MS`), at `wal_level = replica` too, for hot
    /// standbys, which settledb has none of. A logical slot's `restart_lsn` only moves to such a
    /// record ([`crate::decode::slot::restart_point`]): without them between checkpoints, a
    /// slot whose consumer keeps up would still hold a checkpoint interval of WAL, and a decoder
    /// that starts again would read all of it.
    fn log_snapshot_if_written(&self, last: Lsn) -> Result<Lsn> {
        if self.config.get().wal_level != crate::config::WalLevel::Logical || self.wal.insert_lsn() == last {
            return Ok(last);
        }
        self.xact.log_running_xacts(&*self.wal)
    }

    /// The checkpointer: a checkpoint every `checkpoint_timeout`, or sooner when half of
    /// `max_wal_size` of WAL was written since the last redo pointer.
    fn checkpointer_loop(self: Arc<Inner>) {
        let mut last_checkpoint = Instant::now();
        while self.nap(Duration::from_millis(200)) {
            let wal_since = self.wal.insert_lsn().0.saturating_sub(self.wal.redo_ptr().0);
            let cfg = self.config.get();
            let due = last_checkpoint.elapsed() >= Duration::from_millis(cfg.checkpoint_timeout_ms)
                || wal_since >= cfg.max_wal_size_bytes / 2;
            if due {
                if let Err(e) = self.checkpoint(false) {
                    *self.bg_error.lock() = Some(e.to_string());
                    return;
                }
                last_checkpoint = Instant::now();
            }
        }
    }
}

/// How often the background writer logs the running transactions
/// (`Inner::log_snapshot_if_written`), with `wal_level = logical`.
pub const LOG_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(15);

/// An open database (data directory).
pub struct Database {
    inner: Arc<Inner>,
    background: Mutex<Vec<JoinHandle<()>>>,
    recovery: RecoveryReport,
    closed: AtomicBool,
    /// Autovacuum's threads exist (started at open, or by the first reload that turned
    /// `autovacuum` on).
    autovacuum_started: AtomicBool,
}

/// Starts autovacuum's launcher and its `autovacuum_max_workers` workers (as opened).
fn spawn_autovacuum(inner: &Arc<Inner>, bg: &mut Vec<JoinHandle<()>>) -> Result<()> {
    let workers = inner.config.get().autovacuum_max_workers as usize;
    let launcher = std::iter::once(("settledb-autovacuum-launcher".to_string(), true));
    let names = launcher.chain((0..workers).map(|i| (format!("settledb-autovacuum-worker-{i}"), false)));
    for (name, is_launcher) in names {
        let i = inner.clone();
        let h = std::thread::Builder::new()
            .name(name)
            .spawn(move || if is_launcher { i.autovacuum_launcher_loop() } else { i.autovacuum_worker_loop() })
            .map_err(|e| Error::io("spawn autovacuum thread", &inner.dir, e))?;
        bg.push(h);
    }
    Ok(())
}

/// What [`Database::reload_config`] did beyond taking the new values.
#[derive(Debug)]
pub struct Reloaded {
    /// The parameters of [`crate::config::AT_OPEN`] whose value in the new configuration
    /// differs and was not applied (they take a reopen).
    pub unapplied: Vec<&'static str>,
    /// `autovacuum` was turned on and its threads could not all be started. If none did, it
    /// stays off in practice until a later reload starts them; if the launcher did, it runs
    /// with the workers that started.
    pub autovacuum_failed: Option<Error>,
}

/// A table handle for the row API.
#[derive(Clone)]
pub struct Table {
    pub(crate) entry: Arc<TableEntry>,
}

impl Table {
    pub fn name(&self) -> &str {
        &self.entry.rel.name
    }

    pub fn oid(&self) -> Oid {
        self.entry.rel.oid
    }

    pub fn schema(&self) -> &Schema {
        &self.entry.rel.schema
    }

    pub fn relfrozenxid(&self) -> Xid {
        self.entry.relfrozenxid()
    }

    /// `pg_class.relpages` and `reltuples`: the size VACUUM or ANALYZE last found (-1 tuples
    /// before either ran).
    pub fn size_estimates(&self) -> (u32, f64) {
        (self.entry.relpages.load(std::sync::atomic::Ordering::Acquire), *self.entry.reltuples.lock())
    }

    /// The table's storage parameters (`pg_class.reloptions`) as they are now.
    pub fn options(&self) -> crate::catalog::RelOptions {
        self.entry.options()
    }

    /// The table's replica identity (`relreplident`).
    pub fn replica_identity(&self) -> crate::heap::ReplicaIdentity {
        self.entry.rel.replica_identity.read().0
    }
}

impl Database {
    /// Opens (creating if needed) the data directory `dir` on real files.
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<Database> {
        let real: Arc<dyn FileSystem> = if config.mapped_reads { Arc::new(RealFs) } else { Arc::new(PreadFs) };
        let fs: Arc<dyn FileSystem> = if config.fsync { real } else { Arc::new(crate::io::NoSyncFs(real)) };
        Database::open_with_fs(fs, dir.as_ref(), config)
    }

    /// Opens a data directory through any file system (tests pass a fault-injecting one).
    pub fn open_with_fs(fs: Arc<dyn FileSystem>, dir: &Path, config: Config) -> Result<Database> {
        let cpath = startup::control_path(dir);
        let fresh = !fs.exists(&cpath);
        if fresh {
            if fs.exists(dir) && !fs.list(dir)?.is_empty() {
                return Err(Error::invalid(format!(
                    "directory \"{}\" exists and is not empty, but has no control file: not a settledb data directory",
                    dir.display()
                )));
            }
            startup::bootstrap_dirs(&fs, dir)?;
        }
        let control =
            if fresh { startup::new_control(config.wal_segment_size_bytes) } else { ControlFile::read(&*fs, &cpath)? };
        let saved_stats = StatsFile::take(&*fs, dir, control.state == DbState::ShutDown);
        let restored = saved_stats
            .as_ref()
            .map_or(DbTotals { stats_reset: crate::stats::now_micros(), ..DbTotals::default() }, |f| f.db);
        let smgr = Arc::new(Smgr::new(fs.clone(), &startup::base_dir(dir))?);
        // An unreadable size map only costs the check it enables: said at the end of open.
        let sizes_unreadable = smgr.load_sizes(&startup::relsize_path(dir)).err();
        let pool = BufferPool::new(config.shared_buffers_bytes / BLCKSZ, smgr.clone());
        let xact = TransactionManager::open(
            fs.clone(),
            dir,
            XactOptions {
                next_full_xid: control.next_xid,
                oldest_xid: control.oldest_xid,
                autovacuum_freeze_max_age: config.autovacuum_freeze_max_age,
            },
        )?;
        // Before replay: a slot's xmins hold back pruning from the start (`StartupReplicationSlots`).
        let slots = slots::open_slots(&fs, dir, &config, &xact)?;
        let (recovery, start, prev, next_xid) = if fresh {
            (RecoveryReport::default(), control.redo_lsn, Lsn::INVALID, control.next_xid)
        } else {
            let (report, last, next_xid) = startup::replay(&fs, dir, &control, &pool, &xact)?;
            let end = report.end_lsn;
            (report, end, last, next_xid)
        };
        xact.set_next_full_xid(next_xid);
        let wal = Arc::new(Wal::open(
            fs.clone(),
            &startup::wal_dir(dir),
            start,
            prev,
            startup::wal_config(&config, control.wal_segment_size),
        )?);
        pool.set_wal(Arc::new(WalFlusher(wal.clone())));
        let catalog = Catalog::new(config.autovacuum_freeze_max_age);
        let slot_stats = Mutex::new(pgstat::slot_stats_from(saved_stats.as_ref(), &slots));
        let deadlock_timeout = Duration::from_millis(config.deadlock_timeout_ms);
        let inner = Arc::new(Inner {
            config: LiveConfig::new(config),
            dir: dir.to_path_buf(),
            fs: fs.clone(),
            pool,
            wal,
            xact,
            catalog,
            counters: pgstat::counters_from(&restored),
            restored,
            control: Mutex::new(control),
            checkpoint_lock: Mutex::new(()),
            checkpoints: AtomicU64::new(0),
            lmgr: crate::lmgr::LockManager::new(deadlock_timeout),
            prepared_locks: Mutex::new(Default::default()),
            prepared_swaps: Mutex::new(Default::default()),
            shutdown: AtomicBool::new(false),
            bg_wake: Condvar::new(),
            bg_mutex: Mutex::new(()),
            bg_error: Mutex::new(None),
            vacuum_progress: Mutex::new(Vec::new()),
            autovacuum: Default::default(),
            prepared_counts: Mutex::new(Default::default()),
            slots,
            slot_stats,
            running_xacts_seen: Mutex::new(None),
            exported_snapshots: Default::default(),
            column_types: parking_lot::RwLock::new(None),
        });
        startup::note_wal_level(&inner.wal, &mut inner.control.lock(), inner.config.get().wal_level, fresh)?;
        if fresh {
            startup::bootstrap_catalog(&inner.env(), &inner.catalog)?;
        } else {
            startup::load_catalog(&inner.env(), &inner.catalog)?;
            startup::remove_orphans(inner.pool.smgr(), &inner.catalog, &inner.xact.prepared_drops())?;
            if let Some(e) = &sizes_unreadable {
                inner.log_line(&format!(
                    "WARNING:  {e}: files cut short cannot be detected until the next checkpoint\n"
                ));
            }
            for c in inner.pool.smgr().find_cut_short(&startup::live_relfilenodes(&inner.catalog))? {
                inner.log_line(&format!(
                    "WARNING:  relation {}: {c}\nHINT:  Restore the file from a backup; reading the missing blocks fails until then.\n",
                    startup::relation_name(&inner.catalog, c.rel)
                ));
            }
        }
        if let Some(f) = &saved_stats {
            pgstat::restore_tables(&inner.catalog, f);
            // The launcher learns of restored counters as of any change.
            for (oid, _) in &f.tables {
                if let Some(e) = inner.catalog.get_by_oid(*oid) {
                    autovacuum::note_changed(&inner, &e);
                }
            }
        }
        restore_prepared_locks(&inner)?;
        let oldest = inner.catalog.database_frozen_xid().unwrap_or(Xid::FIRST_NORMAL);
        inner.xact.set_oldest_xid(oldest, inner.config.get().autovacuum_freeze_max_age);
        // A fresh cluster and the end of recovery both start from a checkpoint.
        inner.checkpoint(false)?;
        // The threads are registered with the database as they start: should one fail to
        // start, dropping it stops and joins those already running (and shuts down cleanly).
        let db = Database {
            inner,
            background: Mutex::new(Vec::new()),
            recovery,
            closed: AtomicBool::new(false),
            autovacuum_started: AtomicBool::new(false),
        };
        for (name, f) in [
            ("settledb-walwriter", Inner::wal_writer_loop as fn(Arc<Inner>)),
            ("settledb-checkpointer", Inner::checkpointer_loop as fn(Arc<Inner>)),
            ("settledb-bgwriter", Inner::bgwriter_loop as fn(Arc<Inner>)),
        ] {
            let i = db.inner.clone();
            let h = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || f(i))
                .map_err(|e| Error::io("spawn background thread", dir, e))?;
            db.background.lock().push(h);
        }
        // The WAL writer (the first thread) wakes when inserters have buffered a megabyte.
        let walwriter = db.background.lock()[0].thread().clone();
        db.inner.wal.set_writer_waker(Box::new(move || walwriter.unpark()));
        if db.inner.config.get().autovacuum {
            db.autovacuum_started.store(true, Ordering::Release);
            spawn_autovacuum(&db.inner, &mut db.background.lock())?;
        }
        Ok(db)
    }

    /// What recovery did when this database was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The configuration now: as opened, with the changes [`Database::reload_config`] made.
    pub fn config(&self) -> Arc<Config> {
        self.inner.config.get()
    }

    /// `default_transaction_isolation` now (no lock taken: read per transaction).
    pub fn default_transaction_isolation(&self) -> crate::config::IsolationLevel {
        self.inner.config.default_transaction_isolation()
    }

    /// `lock_timeout` now (`None`: wait forever; no lock taken).
    pub fn lock_timeout(&self) -> Option<Duration> {
        self.inner.config.lock_timeout()
    }

    /// Takes new values for the parameters that can change while the database is open (every
    /// one outside [`crate::config::AT_OPEN`]; PostgreSQL's `pg_reload_conf()`), from `next`.
    /// Autovacuum, the checkpointer and new transactions see the new values from their next
    /// look; a running VACUUM keeps the values it started with. `autovacuum` turned on when it
    /// was off at open starts autovacuum's threads; a failure to start them is reported in the
    /// outcome and leaves it off in practice, and the other values stand.
    pub fn reload_config(&self, next: Config) -> Reloaded {
        let unapplied = self.inner.config.reload(next);
        let mut autovacuum_failed = None;
        if self.inner.config.get().autovacuum && !self.autovacuum_started.load(Ordering::Acquire) {
            let mut bg = self.background.lock();
            if !self.autovacuum_started.swap(true, Ordering::AcqRel) && !self.closed.load(Ordering::Acquire) {
                let before = bg.len();
                if let Err(e) = spawn_autovacuum(&self.inner, &mut bg) {
                    // Threads that did start (the launcher first) keep running until shutdown:
                    // autovacuum then stays started, with fewer workers, so that a later
                    // reload does not start a second launcher beside them.
                    if bg.len() == before {
                        self.autovacuum_started.store(false, Ordering::Release);
                    }
                    autovacuum_failed = Some(e);
                }
            }
        }
        Reloaded { unapplied, autovacuum_failed }
    }

    /// Whether autovacuum's threads run (`autovacuum` was on at open or a reload turned it on).
    pub fn autovacuum_running(&self) -> bool {
        self.autovacuum_started.load(Ordering::Acquire)
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Begins a transaction at `default_transaction_isolation`.
    pub fn begin(&self) -> Result<Transaction<'_>> {
        self.begin_with(self.inner.config.default_transaction_isolation())
    }

    pub fn begin_with(&self, isolation: crate::config::IsolationLevel) -> Result<Transaction<'_>> {
        self.check_healthy()?;
        Ok(Transaction::new(self, isolation))
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// Fails once a background thread failed or the WAL is poisoned (see [`Wal::poison_after`]):
    /// no new transaction, reads included, until the directory is reopened.
    fn check_healthy(&self) -> Result<()> {
        if let Some(e) = self.inner.bg_error.lock().as_ref() {
            return Err(Error::Poisoned(e.clone()));
        }
        self.inner.wal.check_poisoned()
    }

    /// A handle on a table, for the row API.
    pub fn table(&self, name: &str) -> Result<Table> {
        self.inner
            .catalog
            .get(name)
            .map(|entry| Table { entry })
            .ok_or_else(|| Error::NotFound(format!("relation \"{name}\" does not exist")))
    }

    /// Changes whenever a table or index is created, dropped, altered or truncated, or a
    /// table's storage parameters change: what a cache of table definitions (the server's
    /// relation cache) checks before it trusts itself (see [`crate::catalog::Catalog::generation`]).
    pub fn catalog_generation(&self) -> u64 {
        self.inner.catalog.generation()
    }

    /// The table with this OID, if there is one.
    pub fn table_by_oid(&self, oid: Oid) -> Option<Table> {
        self.inner.catalog.get_by_oid(oid).map(|entry| Table { entry })
    }

    /// Every table, `pg_class` included, by OID.
    pub fn tables(&self) -> Vec<Table> {
        self.inner.catalog.tables().into_iter().map(|entry| Table { entry }).collect()
    }

    /// The database's frozen XID (`pg_database.datfrozenxid`): the oldest `relfrozenxid` of
    /// its tables, which no XID older than may remain unfrozen.
    pub fn datfrozenxid(&self) -> Xid {
        self.inner.catalog.database_frozen_xid().unwrap_or(Xid::FIRST_NORMAL)
    }

    /// CHECKPOINT.
    pub fn checkpoint(&self) -> Result<()> {
        self.check_healthy()?;
        self.inner.checkpoint(false).map(|_| ())
    }

    /// Counters (pg_stat_database, buffer usage, WAL).
    pub fn stats(&self) -> DbStats {
        let c = &self.inner.counters;
        let (buffers, wal, base) = (self.inner.pool.usage(), self.inner.wal.stats(), &self.inner.restored);
        let wal_io = self.inner.wal.io_stats();
        DbStats {
            xact_commit: c.xact_commit.get(),
            xact_rollback: c.xact_rollback.get(),
            tup_returned: c.tup_returned.get(),
            tup_fetched: c.tup_fetched.get(),
            tup_inserted: c.tup_inserted.get(),
            tup_updated: c.tup_updated.get(),
            tup_deleted: c.tup_deleted.get(),
            tup_hot_updated: c.tup_hot_updated.get(),
            idx_scan: c.idx_scan.get(),
            idx_tup_read: c.idx_tup_read.get(),
            idx_tup_fetch: c.idx_tup_fetch.get(),
            heap_fetches: c.heap_fetches.get(),
            heap_fetches_avoided: c.heap_fetches_avoided.get(),
            buffers,
            wal,
            checkpoints: self.inner.checkpoints.load(Ordering::Relaxed),
            blks_read: base.blks_read + buffers.reads,
            blks_hit: base.blks_hit + buffers.hits,
            wal_records: base.wal_records + wal.records,
            wal_fpi: base.wal_fpi + wal.fpi,
            wal_bytes: base.wal_bytes + wal.bytes,
            stats_reset: base.stats_reset,
            deadlocks: base.deadlocks + self.inner.lmgr.deadlocks.load(Ordering::Relaxed),
            wal_buffers_full: base.wal_buffers_full + wal_io.buffers_full,
            wal_write: base.wal_write + wal_io.write,
            wal_sync: base.wal_sync + wal_io.sync,
        }
    }

    /// The table's entry now: a TRUNCATE publishes a new one (new storage), and a handle may
    /// be older than it.
    pub(crate) fn current_entry(&self, table: &Table) -> Arc<TableEntry> {
        if table.entry.superseded.load(std::sync::atomic::Ordering::Acquire) {
            if let Some(e) = self.inner.catalog.get_by_oid(table.entry.rel.oid) {
                return e;
            }
        }
        table.entry.clone()
    }

    /// Pages in a table's main fork.
    pub fn table_pages(&self, table: &Table) -> Result<u32> {
        self.inner.pool.smgr().nblocks(self.current_entry(table).rel.relfilenode, Fork::Main)
    }

    /// A pageinspect-style rendering of one page of a table (see [`crate::heap::describe_page`]).
    pub fn describe_page(&self, table: &Table, block: u32, with_lsn: bool) -> Result<String> {
        let entry = self.current_entry(table);
        let rel = &entry.rel;
        if block >= self.table_pages(table)? {
            return Err(Error::NotFound(format!("block number {block} is out of range for relation \"{}\"", rel.name)));
        }
        let buf = self.inner.pool.read(rel.tag(crate::types::BlockNumber(block)), None)?;
        let g = buf.read();
        Ok(crate::heap::describe_page(&g.0, Some(&rel.schema), with_lsn))
    }

    /// Runs opportunistic pruning on one page now (as a reader would), waiting for nothing.
    /// Returns whether the page changed. For tests and `settle` tools.
    pub fn prune_page(&self, table: &Table, block: u32) -> Result<bool> {
        let entry = self.current_entry(table);
        let rel = &entry.rel;
        let env = self.inner.env();
        let buf = crate::heap::read_page(&env, rel, crate::types::BlockNumber(block), None)?;
        let oldest = self.inner.xact.oldest_xmin();
        let Some(mut g) = buf.try_cleanup_lock() else { return Ok(false) };
        crate::heap::prune_and_record(&env, rel, &buf, &mut g.0, oldest)
    }

    /// The row-lock waits in progress, as `(waiter, holder)` pairs sorted by waiter: which
    /// transaction is blocked on which (the part of PostgreSQL's `pg_locks` that the isolation
    /// tester polls to know that a step is blocked).
    pub fn lock_waits(&self) -> Vec<(Xid, Xid)> {
        self.inner.lmgr.xid_waits()
    }

    /// Every lock held or awaited, `pg_locks`-style (see [`crate::lmgr`]).
    pub fn locks(&self) -> Vec<crate::lmgr::LockInfo> {
        self.inner.lmgr.locks()
    }

    /// Deadlocks reported and lock timeouts since open (`stats().deadlocks` adds those of
    /// earlier runs).
    pub fn lock_failures(&self) -> (u64, u64) {
        (self.inner.lmgr.deadlocks.load(Ordering::Relaxed), self.inner.lmgr.lock_timeouts.load(Ordering::Relaxed))
    }

    /// The next XID to be assigned.
    pub fn next_xid(&self) -> crate::types::FullXid {
        self.inner.xact.next_full_xid()
    }

    /// The wraparound limits in force.
    pub fn xid_limits(&self) -> crate::xact::XidLimits {
        self.inner.xact.limits()
    }

    /// How many XID wraparound warnings ("database must be vacuumed within N transactions")
    /// were issued since the database was opened.
    pub fn xid_warnings(&self) -> u64 {
        self.inner.xact.warnings_issued()
    }

    /// The last XID wraparound warning issued, if any.
    pub fn last_xid_warning(&self) -> Option<String> {
        self.inner.xact.last_warning()
    }

    /// COMMIT PREPARED `gid`: commits a transaction prepared by [`Transaction::prepare`], in
    /// this or an earlier run of the database. An unknown `gid` is an error naming it.
    pub fn commit_prepared(&self, gid: &str) -> Result<()> {
        self.finish_prepared(gid, true)
    }

    /// ROLLBACK PREPARED `gid`: rolls back a prepared transaction.
    pub fn rollback_prepared(&self, gid: &str) -> Result<()> {
        self.finish_prepared(gid, false)
    }

    fn finish_prepared(&self, gid: &str, commit: bool) -> Result<()> {
        self.check_healthy()?;
        let (xid, drops) = self.inner.xact.finish_prepared(gid, commit, &*self.inner.wal)?;
        // Before the locks go: nobody may see the tables between outcome and storage. The
        // outcome is durable whatever happens here: the rest is done, the error reported after.
        let storage = transaction::finish_prepared_storage(&self.inner, xid, commit, &drops);
        if let Some(owner) = self.inner.prepared_locks.lock().remove(&xid) {
            self.inner.lmgr.release_all(&owner);
        }
        if let Some(counts) = self.inner.prepared_counts.lock().remove(&xid) {
            transaction::apply_counts(&self.inner, counts, commit);
        }
        if commit {
            self.inner.counters.xact_commit.add(1);
        } else {
            self.inner.counters.xact_rollback.add(1);
        }
        storage
    }

    /// The prepared transactions, by XID (`pg_prepared_xacts`).
    pub fn prepared_xacts(&self) -> Vec<crate::xact::PreparedXact> {
        self.inner.xact.prepared_xacts()
    }

    /// A snapshot taken now, as 64-bit XIDs `(xmin, xmax, xip)` (PostgreSQL's
    /// `txid_current_snapshot()`/`pg_current_snapshot()`): every XID before `xmin` had ended,
    /// `xmax` is the next to be assigned, `xip` the top-level transactions running between.
    pub fn snapshot_now(&self) -> (FullXid, FullXid, Vec<FullXid>) {
        let s = self.inner.xact.get_snapshot(None);
        let next = self.inner.xact.next_full_xid();
        (next.widen(s.xmin), next.widen(s.xmax), s.xip.iter().map(|&x| next.widen(x)).collect())
    }

    /// The oldest XID any snapshot may still need (`OldestXmin`).
    pub fn oldest_xmin(&self) -> Xid {
        self.inner.xact.oldest_xmin()
    }

    /// Test and benchmark tool: burns `n` XIDs without running transactions (PostgreSQL's
    /// `consume_xids`). Honours the stop limit.
    pub fn consume_xids(&self, n: u64) -> Result<crate::types::FullXid> {
        self.inner.xact.consume_xids(n, &*self.inner.wal)
    }

    fn stop_background(&self) {
        self.inner.shutdown.store(true, Ordering::Release);
        {
            let _g = self.inner.bg_mutex.lock();
            self.inner.bg_wake.notify_all();
        }
        self.inner.pool.wake_write_behind();
        self.inner.autovacuum.wake.notify_all();
        for h in self.background.lock().drain(..) {
            h.thread().unpark(); // the WAL writer parks
            let _ = h.join();
        }
    }

    /// Clean shutdown: a shutdown checkpoint, then the control file says "shut down"; then the
    /// statistics are saved for the next open (`pg_stat/stats.bin`).
    pub fn close(self) -> Result<()> {
        self.closed.store(true, Ordering::Release);
        self.stop_background();
        self.inner.wal.check_poisoned()?;
        self.inner.checkpoint(true)?;
        pgstat::save(&self)
    }

    /// Stops without a checkpoint or any further write, as a crash would (the process lives on,
    /// so what the OS already has stays). The next open runs crash recovery.
    pub fn abandon(self) {
        self.closed.store(true, Ordering::Release);
        self.stop_background();
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.stop_background();
            if !self.inner.wal.is_poisoned() && self.inner.checkpoint(true).is_ok() {
                let _ = pgstat::save(self);
            }
        }
    }
}

// Used by `TxContext` construction in `transaction.rs`.
pub(crate) fn tx_context<'a>(
    (xid, top_xid): (Xid, Xid),
    cid: u32,
    snapshot: &'a crate::xact::Snapshot,
    rr: bool,
    horizon: Xid,
) -> TxContext<'a> {
    TxContext { xid, top_xid, cid, snapshot, serializable_updates: rr, horizon }
}

/// After recovery, before any session: each prepared transaction takes its table locks again
/// (PostgreSQL's `lock_twophase_recover`), under an owner that [`Database::commit_prepared`]
/// and [`Database::rollback_prepared`] release. Nothing else holds a lock yet, so none waits;
/// a lock on a relation that no longer exists is still taken (its OID is never reused while
/// the transaction runs).
fn restore_prepared_locks(inner: &Inner) -> Result<()> {
    use crate::lmgr::{LockMode, WaitPolicy};
    let mut restored = inner.prepared_locks.lock();
    for (xid, locks) in inner.xact.prepared_table_locks() {
        let owner = inner.lmgr.new_owner("prepared");
        inner.lmgr.set_xid(&owner, xid.xid());
        for (rel, modes) in locks {
            for mode in LockMode::ALL.into_iter().filter(|m| modes & m.mask() != 0) {
                inner.lmgr.lock(&owner, rel, mode, WaitPolicy::NoWait, None)?;
            }
        }
        restored.insert(xid, owner);
    }
    Ok(())
}
