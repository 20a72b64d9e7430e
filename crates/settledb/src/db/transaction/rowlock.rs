//! Row locks on [`Transaction`]: `SELECT ... FOR UPDATE | FOR NO KEY UPDATE | FOR SHARE |
//! FOR KEY SHARE [NOWAIT | SKIP LOCKED]` (the heap side, the lock's format and who reads it:
//! [`crate::heap::lock`]).
//!
//! [`Transaction::lock_row`] is one command: it takes RowShare on the table (as PostgreSQL's
//! row-locking SELECT does), gives the transaction (or its innermost savepoint) an XID, and
//! stamps the row with it. The lock holds until that XID ends: commit or rollback of the
//! transaction, or ROLLBACK TO a savepoint opened before it (the subtransaction's XID is then
//! aborted, and an aborted locker is ignored); RELEASE hands it to the enclosing level. A wait
//! for another transaction's row is the engine's `transactionid` wait: the deadlock detector
//! sees it, `lock_timeout` bounds it and the interrupt set by [`Transaction::set_interrupt`]
//! ends it. A failed wait, NOWAIT's refusal and REPEATABLE READ's serialization failure fail the
//! transaction, as in PostgreSQL.
//!
//! The command does not advance the command counter: a lock changes no row's visibility.

use super::Transaction;
use crate::db::Table;
use crate::error::Result;
use crate::heap::{self, LockResult, RowLockMode, RowLockWait};
use crate::lmgr::LockMode;
use crate::types::Tid;

impl Transaction<'_> {
    /// Locks the row version at `tid` (a TID a scan of this transaction returned) in `mode`,
    /// holding it until this transaction (or the savepoint it was taken in) ends.
    ///
    /// Another running transaction that holds the row (locked, updating or deleting it)
    /// makes this call wait for it, fail with [`crate::Error::LockNotAvailable`] (`NoWait`) or
    /// return [`LockResult::Skipped`] (`SkipLocked`); every lock is exclusive (see
    /// [`crate::heap::lock`], "Modes and sharing"). When the row was updated by a transaction
    /// that committed, READ COMMITTED locks the newest version and returns it with `followed`
    /// set, for the caller to re-check its conditions; REPEATABLE READ fails with
    /// [`crate::Error::SerializationFailure`]. A deleted row is [`LockResult::Gone`].
    ///
    /// Like [`Transaction::update_with`], a TID kept across commands names a version that may
    /// since have been pruned and its slot reused: check the returned values.
    pub fn lock_row(&mut self, table: &Table, tid: Tid, mode: RowLockMode, wait: RowLockWait) -> Result<LockResult> {
        self.active()?;
        self.lock_rel(&table.entry, LockMode::RowShare)?;
        let table = &self.current_table(table)?;
        self.command(|tx| {
            let xid = tx.ensure_xid()?;
            let snap = tx.command_snapshot()?;
            let ctx = crate::db::tx_context((xid, tx.xid().unwrap_or(xid)), tx.cid, &snap, tx.rr(), tx.horizon);
            let (inner, owner, timeout) = (&**tx.inner, &tx.owner, tx.lock_timeout);
            let waiter = move |other| inner.wait_for_xid(owner, xid, other, timeout);
            let rel = &table.entry.rel;
            let r = {
                let _writers = rel.write_lock.read();
                heap::lock_tuple(&tx.inner.env(), rel, &ctx, tid, mode, wait, &waiter)
            };
            tx.end_command();
            r
        })
    }
}
