//! The engine's one error type.
//!
//! Variants are the cases a caller branches on (retry a serialization failure, tell the user
//! to VACUUM on a wraparound stop, report corruption with its location), not a list of every
//! place that can fail. Bytes read from disk never cause a panic: a decoder that finds them
//! malformed returns [`Error::Corrupted`] (a data page, naming relation and block) or
//! [`Error::CorruptWal`] (a WAL record, naming its LSN).

use std::path::PathBuf;

use crate::types::{BlockNumber, Lsn, Oid, Xid};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The hint of the wraparound stop-limit error ([`Error::WraparoundStop`]), word for word
/// PostgreSQL's (`varsup.c`).
pub const STOP_HINT: &str = "Execute a database-wide VACUUM in that database.\n\
     You might also need to commit or roll back old prepared transactions, or drop stale replication slots.";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system I/O call failed.
    #[error("could not {op} file \"{path}\": {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A data page failed its checksum or structural checks.
    #[error("invalid page in block {block} of relation {rel}: {detail}")]
    Corrupted { rel: Oid, block: BlockNumber, detail: String },

    /// A WAL record, segment or the control file is malformed where it must not be.
    #[error("corrupt WAL at {lsn}: {detail}")]
    CorruptWal { lsn: Lsn, detail: String },

    /// A file on disk (control file, CLOG segment, catalog) is malformed.
    #[error("corrupt file \"{path}\": {detail}")]
    CorruptFile { path: PathBuf, detail: String },

    /// The data directory was written by an incompatible version of settledb.
    #[error("data directory \"{path}\" has format version {found}, this build reads version {expected}")]
    VersionMismatch { path: PathBuf, found: u32, expected: u32 },

    /// A caller passed something the engine rejects: wrong type, oversized row, bad name …
    #[error("{0}")]
    InvalidInput(String),

    /// A configuration parameter name or value is not accepted.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// A named table, row or index does not exist.
    #[error("{0}")]
    NotFound(String),

    /// A table or index of that name already exists.
    #[error("{0}")]
    AlreadyExists(String),

    /// An insert or update would duplicate a key of a unique index.
    #[error("duplicate key value violates unique constraint \"{index}\": Key ({key}) already exists.")]
    UniqueViolation { index: String, key: String },

    /// REPEATABLE READ met a concurrent update: the transaction must be retried.
    #[error("could not serialize access due to concurrent update")]
    SerializationFailure,

    /// The XID counter is too close to wraparound: no new XIDs until the database is vacuumed.
    /// The hint is PostgreSQL's ([`STOP_HINT`]); `prepared_hint` is empty,
    /// or names the oldest prepared transaction and the replication slot with the oldest xmin
    /// (which hold back what VACUUM can freeze).
    #[error(
        "database is not accepting commands that assign new transaction IDs to avoid wraparound data loss \
         (next XID {next_xid}, oldest frozen XID {oldest_xid}); \
         HINT: {hint}{prepared_hint}",
        hint = STOP_HINT
    )]
    WraparoundStop { next_xid: Xid, oldest_xid: Xid, prepared_hint: String },

    /// The engine stopped after a failure it cannot safely continue from (a failed fsync, a
    /// failed WAL write): every later command, reads included, returns this until the data
    /// directory is reopened, which replays WAL.
    #[error("database is shut down after an unrecoverable error: {0}; reopen it to run crash recovery")]
    Poisoned(String),

    /// A wait (for a row, a unique key or a table lock) would have closed a cycle of waits;
    /// this waiter was chosen to fail (SQLSTATE 40P01). `detail` names the waits.
    #[error("deadlock detected: {detail}")]
    Deadlock { detail: String },

    /// A lock could not be had: `lock_timeout` passed ("canceling statement due to lock
    /// timeout") or a conditional request found it taken (SQLSTATE 55P03).
    #[error("{0}")]
    LockNotAvailable(String),

    /// An earlier command of this transaction failed after changing something: it can only be
    /// rolled back (PostgreSQL's aborted transaction state).
    #[error("current transaction is aborted, commands ignored until end of transaction block (it failed with: {0})")]
    TransactionAborted(String),

    /// The transaction was already committed, rolled back or failed.
    #[error("transaction is not active: {0}")]
    TransactionClosed(&'static str),

    /// The caller's [`Interrupt`] stopped a long operation (a cancel request, a statement
    /// timeout); the caller's own error is kept whole, to be taken back by downcasting.
    #[error("{0}")]
    Interrupted(Box<dyn std::error::Error + Send + Sync>),
}

/// What an [`Interrupt`] check returns to stop the operation: the caller's own error.
pub type InterruptError = Box<dyn std::error::Error + Send + Sync>;

/// A caller's interruption check (PostgreSQL's `CHECK_FOR_INTERRUPTS`): operations that can
/// run long call it where stopping leaves everything consistent, and end with
/// [`Error::Interrupted`] when it says so. VACUUM calls it before each heap page it reads or
/// vacuums and before each index, CREATE INDEX before each heap page it reads
/// ([`crate::Database::create_index_with`]); a lock wait (a table's lock, another transaction's end)
/// wakes at least every [`Interrupt::POLL`] to call it. The check runs on the operation's
/// thread, a parallel VACUUM's workers included, so it must be cheap and must not block.
#[derive(Clone)]
pub struct Interrupt(std::sync::Arc<dyn Fn() -> std::result::Result<(), InterruptError> + Send + Sync>);

impl Interrupt {
    /// How long a lock wait sleeps at most between two checks.
    pub const POLL: std::time::Duration = std::time::Duration::from_millis(20);

    pub fn new(check: impl Fn() -> std::result::Result<(), InterruptError> + Send + Sync + 'static) -> Interrupt {
        Interrupt(std::sync::Arc::new(check))
    }

    /// Calls the check: `Err(Error::Interrupted)` when the operation must stop.
    pub fn check(&self) -> Result<()> {
        (self.0)().map_err(Error::Interrupted)
    }
}

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interrupt")
    }
}

impl Error {
    /// Wraps an `std::io::Error` with the operation and path it came from.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { op, path: path.into(), source }
    }

    pub fn corrupted(rel: Oid, block: BlockNumber, detail: impl Into<String>) -> Error {
        Error::Corrupted { rel, block, detail: detail.into() }
    }

    pub fn corrupt_wal(lsn: Lsn, detail: impl Into<String>) -> Error {
        Error::CorruptWal { lsn, detail: detail.into() }
    }

    pub fn invalid(detail: impl Into<String>) -> Error {
        Error::InvalidInput(detail.into())
    }
}
