//! What a session does for replication: slots created with a snapshot (`SNAPSHOT 'use'` and
//! `'export'`), `SET TRANSACTION SNAPSHOT`, and the temporary slots it owns.
//!
//! # Snapshots
//!
//! `CREATE_REPLICATION_SLOT … (SNAPSHOT 'use')` gives the block's transaction the slot's
//! snapshot. `(SNAPSHOT 'export')`, PostgreSQL's default, is for a replication connection
//! outside a block: the slot is created with a REPEATABLE READ transaction holding its
//! snapshot, which is exported under a name (`snapshot_name` in the command's row). The
//! session keeps that transaction until the connection's next command (the connection's loop
//! asks it to let go, [`Session::clear_exported`], when [`crate::interrupt::Control::exported`]
//! says it holds one), or until it ends. Meanwhile any other session may adopt the snapshot
//! with `SET TRANSACTION SNAPSHOT 'name'`, first thing in a REPEATABLE READ block, and read
//! exactly the data the slot will not send. `pg_export_snapshot()` exports any transaction's
//! snapshot the same way, until that transaction ends.
//!
//! # Temporary slots
//!
//! A temporary slot, made by `CREATE_REPLICATION_SLOT … TEMPORARY` or
//! `pg_create_logical_replication_slot(…, temporary => true)`, belongs to the session that
//! made it ([`crate::walsender::Senders`] records the owner): the session drops it when it
//! ends and on any error, as PostgreSQL does; the engine never writes it to disk.

use settledb::{IsolationLevel, SlotInfo, SlotOptions};

use super::{Notice, Outcome, Session};
use crate::error::SqlError;
use crate::slotfuncs::{slot_error, Caller};

impl<'db> Session<'db> {
    /// This session as a caller of the slot functions.
    pub(crate) fn slot_caller(&self) -> Caller<'_> {
        Caller::new(self.sh, self.interrupts.control.pid())
    }

    /// `CREATE_REPLICATION_SLOT … (SNAPSHOT 'use')` on a replication connection: creates the
    /// slot, and the block's transaction reads with the slot's snapshot from here on (it sees
    /// what committed before the slot's consistent point, and nothing after). PostgreSQL's
    /// conditions: inside a READ ONLY, REPEATABLE READ block, before its first query, not in
    /// a savepoint. An error fails the block.
    pub fn create_slot_using_snapshot(
        &mut self,
        slot: &str,
        plugin: &str,
        options: SlotOptions,
    ) -> Result<SlotInfo, SqlError> {
        let r = self.slot_snapshot(slot, plugin, options);
        if r.is_err() {
            self.statement_failed();
        }
        r
    }

    fn slot_snapshot(&mut self, slot: &str, plugin: &str, options: SlotOptions) -> Result<SlotInfo, SqlError> {
        const WHAT: &str = "CREATE_REPLICATION_SLOT ... (SNAPSHOT 'use')";
        let refuse = |why: &str| Err(SqlError::new("25000", format!("{WHAT} {why}")));
        if self.failed {
            return Err(SqlError::in_failed_transaction());
        }
        if !self.in_block {
            return refuse("must be called inside a transaction");
        }
        if self.isolation() != IsolationLevel::RepeatableRead {
            return refuse("must be called in REPEATABLE READ isolation mode transaction");
        }
        if !self.block_read_only {
            return refuse("must be called in a read-only transaction");
        }
        if self.tx.is_some() {
            return refuse("must be called before any query");
        }
        if !self.pending_savepoints.is_empty() {
            return refuse("must not be called in a subtransaction");
        }
        let (info, tx) = self.create_with_snapshot(slot, plugin, options)?;
        self.tx = Some(tx);
        Ok(info)
    }

    /// `CREATE_REPLICATION_SLOT … (SNAPSHOT 'export')` on a replication connection: creates
    /// the slot and exports its snapshot, whose name it returns; the snapshot can be imported
    /// until the connection's next command. Refused inside a block, as PostgreSQL does.
    pub fn create_slot_exporting(
        &mut self,
        slot: &str,
        plugin: &str,
        options: SlotOptions,
    ) -> Result<(SlotInfo, String), SqlError> {
        if self.in_block {
            self.statement_failed();
            return Err(SqlError::new(
                "25000",
                "CREATE_REPLICATION_SLOT ... (SNAPSHOT 'export') must not be called inside a transaction",
            ));
        }
        let r = self.create_with_snapshot(slot, plugin, options).and_then(|(info, mut tx)| {
            let name = tx.export_snapshot()?;
            self.exported = Some(tx);
            self.interrupts.control.set_exported(true);
            Ok((info, name))
        });
        if r.is_err() {
            self.statement_failed();
        }
        r
    }

    /// The slot and the transaction holding its snapshot; a temporary slot is recorded as
    /// this session's.
    fn create_with_snapshot(
        &self,
        slot: &str,
        plugin: &str,
        options: SlotOptions,
    ) -> Result<(SlotInfo, settledb::Transaction<'db>), SqlError> {
        let db = self.db;
        let create = || db.create_logical_replication_slot_with_snapshot(slot, plugin, options);
        if options.temporary {
            self.slot_caller().temporary(slot, create)
        } else {
            create().map_err(slot_error)
        }
    }

    /// The connection's next command came: the exported snapshot, if any, is no longer
    /// offered (its transaction ends).
    pub fn clear_exported(&mut self) {
        self.exported = None;
        self.interrupts.control.set_exported(false);
    }

    /// `SET TRANSACTION SNAPSHOT 'name'`: the block's transaction reads with the snapshot
    /// another session exported (PostgreSQL's `ImportSnapshot` and its checks, in its order:
    /// before any query and outside a savepoint, 25001; REPEATABLE READ, 0A000; a name no live
    /// export has, 22023). Outside a block PostgreSQL warns and imports into the statement's
    /// own transaction, which then ends: the same here, with nothing kept.
    pub(super) fn set_transaction_snapshot(
        &mut self,
        name: &str,
        notices: &mut Vec<Notice>,
    ) -> Result<Outcome, SqlError> {
        let in_block = self.in_block || self.multi_statement;
        if !in_block {
            notices.push(Notice {
                detail: None,
                severity: "WARNING",
                code: "25P01",
                message: "SET TRANSACTION can only be used in transaction blocks".into(),
            });
        }
        if self.tx.is_some() || !self.pending_savepoints.is_empty() {
            return Err(SqlError::new("25001", "SET TRANSACTION SNAPSHOT must be called before any query"));
        }
        if self.isolation() != IsolationLevel::RepeatableRead {
            return Err(SqlError::new(
                "0A000",
                "a snapshot-importing transaction must have isolation level SERIALIZABLE or REPEATABLE READ",
            ));
        }
        let mut tx = self.start_transaction()?;
        tx.import_snapshot(name).map_err(|e| match e {
            settledb::Error::NotFound(m) => SqlError::new("22023", m),
            other => SqlError::from(other),
        })?;
        if in_block {
            self.tx = Some(tx);
        }
        Ok(Outcome::Command("SET".into()))
    }
}

impl Drop for Session<'_> {
    /// The session ends: its temporary slots go with it.
    fn drop(&mut self) {
        self.slot_caller().drop_temporary_slots();
    }
}
