//! `pg_logical_emit_message` on [`Transaction`] and [`Database`]: see [`crate::decode::message`].

use super::Transaction;
use crate::db::Database;
use crate::decode::message::{LogicalMessage, XLOG_LOGICAL_MESSAGE};
use crate::error::Result;
use crate::types::{Lsn, Xid};
use crate::wal::{RecordBuilder, Rmgr};

impl Transaction<'_> {
    /// Writes a logical message into the WAL; returns the end of its record.
    ///
    /// A transactional message belongs to this transaction (the current subtransaction's, if
    /// a savepoint is open): logical decoding hands it over at the commit, in its place among
    /// the transaction's changes, and never if the transaction (or that savepoint) rolls back.
    /// A non-transactional one is handed over as soon as the decoder reads it.
    pub fn emit_logical_message(&mut self, transactional: bool, prefix: &str, content: &[u8]) -> Result<Lsn> {
        LogicalMessage::check_prefix(prefix)?;
        self.command(|tx| {
            let (xid, top) = if transactional {
                let xid = tx.ensure_xid()?;
                let top = tx.xid().unwrap_or(xid);
                (xid, top)
            } else {
                (Xid::INVALID, Xid::INVALID)
            };
            let wal = &tx.inner.wal;
            let msg = LogicalMessage { transactional, prefix: prefix.to_string(), content: content.to_vec() };
            wal.insert(&RecordBuilder {
                toplevel_xid: if wal.logical() && top != xid { top } else { Xid::INVALID },
                rmgr: Rmgr::LogicalMsg,
                info: XLOG_LOGICAL_MESSAGE,
                xid,
                blocks: vec![],
                main_data: msg.encode(),
            })
        })
    }
}

impl Database {
    /// `SELECT pg_logical_emit_message(transactional, prefix, content)` outside a transaction
    /// block: a transactional message is written by a transaction of its own, committed at once.
    pub fn emit_logical_message(&self, transactional: bool, prefix: &str, content: &[u8]) -> Result<Lsn> {
        let mut tx = self.begin()?;
        let lsn = tx.emit_logical_message(transactional, prefix, content)?;
        tx.commit()?;
        Ok(lsn)
    }
}
