//! Savepoints and PREPARE TRANSACTION on [`Transaction`] (see the parent module's doc,
//! "Savepoints (subtransactions)" and "PREPARE TRANSACTION").

use std::sync::Arc;

use super::{apply_counts, Transaction};
use crate::catalog::TableEntry;
use crate::error::{Error, Result};
use crate::stats::TableCounts;
use crate::types::{FullXid, Lsn};

/// An open savepoint.
pub(super) struct SubXact {
    pub(super) name: String,
    /// Assigned when the subtransaction (or one inside it) first writes.
    pub(super) xid: Option<FullXid>,
    /// XIDs of subtransactions released into this one.
    pub(super) children: Vec<FullXid>,
    /// The transaction's statistics when the savepoint was set: what ROLLBACK TO undoes.
    pub(super) counts_at_start: Vec<(Arc<TableEntry>, TableCounts)>,
    /// The WAL insert position when it was set (or last reopened by ROLLBACK TO): every
    /// record of this level comes after it. Its abort record carries it under
    /// `wal_level = logical` (`xact::records`).
    pub(super) start_lsn: Lsn,
}

impl SubXact {
    pub(super) fn new(name: &str, counts: &[(Arc<TableEntry>, TableCounts)], start_lsn: Lsn) -> SubXact {
        SubXact { name: name.to_string(), xid: None, children: Vec::new(), counts_at_start: counts.to_vec(), start_lsn }
    }
}

impl Transaction<'_> {
    /// SAVEPOINT `name`: opens a subtransaction. Names may repeat (the newest wins).
    pub fn savepoint(&mut self, name: &str) -> Result<()> {
        self.active()?;
        let start = self.inner.wal.insert_lsn();
        self.subxacts.push(SubXact::new(name, &self.table_counts, start));
        Ok(())
    }

    /// The position of the newest open savepoint named `name`.
    fn find_savepoint(&self, name: &str) -> Result<usize> {
        self.subxacts
            .iter()
            .rposition(|s| s.name == name)
            .ok_or_else(|| Error::NotFound(format!("savepoint \"{name}\" does not exist")))
    }

    /// RELEASE SAVEPOINT `name`: ends the newest savepoint of that name and every one opened
    /// after it, keeping their changes, which now belong to the enclosing (sub)transaction
    /// and commit or roll back with it.
    pub fn release(&mut self, name: &str) -> Result<()> {
        self.active()?;
        let i = self.find_savepoint(name)?;
        let mut xids = Vec::new();
        for s in self.subxacts.split_off(i) {
            xids.extend(s.xid);
            xids.extend(s.children);
        }
        self.merge_locks_into(i);
        self.merge_swaps_into(i);
        // Into the top level: they stay current and commit with it (the proc array lists them).
        if let Some(parent) = self.subxacts.last_mut() {
            parent.children.extend(xids);
        }
        Ok(())
    }

    /// ROLLBACK TO SAVEPOINT `name`: undoes everything done since the newest savepoint of
    /// that name was set, ends the savepoints opened after it and keeps it open (a new
    /// subtransaction with the same name; it gets a new XID if it writes again). The rows
    /// written since are dead to every snapshot at once and their row locks are released.
    /// Allowed in a failed transaction, which it makes usable again.
    pub fn rollback_to(&mut self, name: &str) -> Result<()> {
        if self.done {
            return Err(Error::TransactionClosed("it already committed or rolled back"));
        }
        self.inner.wal.check_poisoned()?;
        let i = self.find_savepoint(name)?;
        let mut result = Ok(());
        // Innermost first: each level is one subtransaction with its released children.
        while let Some(level) = self.subxacts.last_mut() {
            let xids: Vec<FullXid> = level.xid.take().into_iter().chain(level.children.drain(..)).collect();
            let start = level.start_lsn;
            if let (Some(top), false) = (self.xid, xids.is_empty()) {
                if let Err(e) = self.inner.xact.abort_subxacts(top, &xids, start, &*self.inner.wal) {
                    result = Err(e);
                }
                self.remove_current_subxids(&xids);
            }
            if self.subxacts.len() == i + 1 {
                // Table locks taken since the savepoint go too (PostgreSQL releases a rolled
                // back subtransaction's locks).
                self.undo_swaps_from(i + 1);
                self.release_locks_from(i + 1);
                // The savepoint stays, reopened: its next records come after this point.
                self.subxacts[i].start_lsn = self.inner.wal.insert_lsn();
                break;
            }
            self.subxacts.pop();
        }
        let saved = self.subxacts[i].counts_at_start.clone();
        let now = std::mem::replace(&mut self.table_counts, saved.clone());
        apply_counts(self.inner, counts_since(&saved, now), false);
        self.refresh_snapshot_xids();
        match result {
            Ok(()) => {
                self.failed = None;
                Ok(())
            }
            Err(e) => {
                self.failed = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// PREPARE TRANSACTION `gid`: makes the transaction durable in a prepared state that
    /// outlives this handle, a restart and a crash, to be finished later by
    /// [`Database::commit_prepared`] or [`Database::rollback_prepared`]. Open savepoints are
    /// released first. A transaction that wrote nothing gets an XID now, as in PostgreSQL.
    ///
    /// Refused, leaving the transaction open and unchanged (PostgreSQL would roll it back):
    /// `max_prepared_transactions` is 0 or reached, `gid` is longer than 199 bytes or already
    /// in use. A failed transaction is rolled back instead.
    pub fn prepare(&mut self, gid: &str) -> Result<()> {
        if let Some(why) = self.failed.clone() {
            self.abort_now()?;
            return Err(Error::TransactionAborted(format!("{why}; the transaction was rolled back")));
        }
        self.active()?;
        crate::xact::twophase::validate_gid(gid)?;
        let max = self.inner.config.get().max_prepared_transactions;
        if max == 0 {
            return Err(Error::invalid(
                "prepared transactions are disabled; HINT: set max_prepared_transactions to a nonzero value",
            ));
        }
        let top = self.ensure_top_xid()?;
        let mut locks: Vec<(crate::types::Oid, u16)> = Vec::new();
        for &(oid, mode, _) in &self.held {
            match locks.iter_mut().find(|l| l.0 == oid) {
                Some(l) => l.1 |= mode.mask(),
                None => locks.push((oid, mode.mask())),
            }
        }
        locks.sort_unstable_by_key(|l| l.0);
        let drops = self.prepared_drops();
        self.inner.xact.prepare(top, gid, locks, drops, max, &*self.inner.wal)?;
        self.done = true;
        // TRUNCATEs' storage swaps wait for COMMIT/ROLLBACK PREPARED.
        let swaps = std::mem::take(&mut self.swaps);
        if !swaps.is_empty() {
            self.inner.prepared_swaps.lock().insert(top, swaps);
        }
        // The locks stay with the prepared transaction until COMMIT/ROLLBACK PREPARED.
        let owner = std::mem::replace(&mut self.owner, self.inner.lmgr.new_owner("transaction"));
        self.inner.prepared_locks.lock().insert(top, owner);
        self.held.clear();
        self.subxacts.clear();
        let counts = std::mem::take(&mut self.table_counts);
        self.inner.prepared_counts.lock().insert(top, counts);
        self.unregister();
        Ok(())
    }
}

/// What `now` counted beyond `before` (both a transaction's per-table counts, `now` later).
fn counts_since(
    before: &[(Arc<TableEntry>, TableCounts)],
    now: Vec<(Arc<TableEntry>, TableCounts)>,
) -> Vec<(Arc<TableEntry>, TableCounts)> {
    now.into_iter()
        .map(|(e, c)| {
            let b = before.iter().find(|(x, _)| Arc::ptr_eq(x, &e)).map(|(_, b)| *b).unwrap_or_default();
            let d = TableCounts {
                inserted: c.inserted.saturating_sub(b.inserted),
                updated: c.updated.saturating_sub(b.updated),
                hot_updated: c.hot_updated.saturating_sub(b.hot_updated),
                deleted: c.deleted.saturating_sub(b.deleted),
                seq_scan: c.seq_scan.saturating_sub(b.seq_scan),
                idx_scan: c.idx_scan.saturating_sub(b.idx_scan),
                truncated: c.truncated && !b.truncated,
            };
            (e, d)
        })
        .collect()
}
