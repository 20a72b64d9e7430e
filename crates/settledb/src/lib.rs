//! settledb: an embeddable, crash-safe MVCC storage engine built the way PostgreSQL's heap is
//! built. See `ARCHITECTURE.md` at the repository root for the codemap and invariants, and
//! [`db`] for the public API with an example.
//!
//! Layers, each importing only from those above it in this list:
//! [`types`], [`error`], [`io`], [`page`], [`smgr`], [`stats`], [`buffer`], [`wal`], [`xact`], [`heap`],
//! [`vm`], [`fsm`], [`index`], [`btree`], [`catalog`], [`vacuum`], [`decode`], [`db`], [`check`].

pub mod analyze;
pub mod btree;
pub mod btree_bench;
pub mod buffer;
pub mod catalog;
pub mod check;
pub mod config;
pub mod counter;
pub mod crc;
pub mod db;
pub mod decode;
pub mod error;
pub mod fsm;
#[doc(hidden)]
pub mod fuzzing;
pub mod heap;
pub mod index;
pub mod io;
pub mod lmgr;
pub mod page;
pub mod pgtext;
pub mod smgr;
pub mod stats;
pub(crate) mod sync;
pub mod types;
pub mod vacuum;
pub mod vm;
pub mod wal;
pub mod xact;

pub use catalog::TableOptions;
pub use config::{Config, FreezePolicy, IsolationLevel, WalLevel};
pub use db::{
    Database, DbStats, Index, InsertOrConflict, Reloaded, Scan, Table, Transaction, TruncateOptions, VacuumFullParams,
    VacuumFullReport,
};
pub use decode::slot::{SlotInfo, SlotOptions, WalStatus};
pub use error::{Error, Interrupt, InterruptError, Result};
pub use heap::tuple::{Column, Schema, Type, Value, ValueRef};
pub use heap::{LockResult, ReplicaIdentity, RowLockMode, RowLockWait};
pub use index::{KeyBound, ScanDirection};
pub use stats::TableStatsSnapshot;
pub use types::{BlockNumber, FullXid, Lsn, OffsetNumber, Oid, Tid, Xid};
pub use vacuum::dbstats::DatabaseStatsReport;
pub use vacuum::{IndexCleanup, VacuumParams, VacuumReport};
