//! Transactions: snapshots per isolation level, lazy XID assignment, command IDs, the row API.
//!
//! A transaction gets an XID only when it first writes (read-only transactions consume none,
//! as in PostgreSQL). Every call is one *command*: it runs with command ID `cid`, and the
//! command counter advances after each write, so later calls see earlier ones' effects while a
//! scan in progress does not see rows written behind it.
//!
//! The snapshot a call runs with is advertised in the proc array (so pruning never removes a
//! version it may still need) and withdrawn at commit or rollback.
//!
//! # Savepoints (subtransactions)
//!
//! [`Transaction::savepoint`] opens a subtransaction, [`Transaction::release`] merges it (and
//! those opened after it) into its parent, [`Transaction::rollback_to`] undoes everything
//! done since it and keeps it open, as PostgreSQL's SAVEPOINT / RELEASE / ROLLBACK TO. A
//! subtransaction gets an XID only when it first writes, after every enclosing one got its
//! own (so a child's XID is greater than its parent's; `xact::subtrans` records the link).
//! Rows are written with the innermost subtransaction's XID. The transaction's *current*
//! XIDs are the top-level one and those of its open and released subtransactions; rolled
//! back ones are aborted in the CLOG at once (an ABORT record lists them), so their rows are
//! dead to every snapshot, this transaction's included, and their row locks are free. Each
//! command's snapshot carries the current XIDs ([`Snapshot::is_current`]), which is how the
//! heap recognises the transaction's own rows. At commit the released and still open
//! subtransactions commit with the top-level one (the commit record lists them).
//!
//! Names may repeat; the newest savepoint of a name is the one RELEASE and ROLLBACK TO find.
//! ROLLBACK TO also ends the failed state a failing command left (the failed command's
//! changes belonged to the subtransactions it rolls back). Unlike PostgreSQL, naming a
//! savepoint that does not exist is refused without failing the transaction (nothing was
//! changed).
//!
//! # PREPARE TRANSACTION
//!
//! [`Transaction::prepare`] hands the transaction to the proc array under a global
//! identifier (see `xact::twophase`); [`Database::commit_prepared`] and
//! [`Database::rollback_prepared`] finish it from any session, after a restart or a crash too.
//!
//! What a transaction does to each user table (rows inserted, updated, deleted, scans started)
//! is counted in the transaction and added to the table's [`crate::stats::TableStats`] once,
//! when it ends, by rules that depend on whether it committed (see [`crate::stats`]). A heap
//! change counts as soon as it is made, even if the command then fails (a unique violation
//! after the heap insert): its version exists, and dies with the abort.

use std::sync::Arc;

use super::{tx_context, Database, Index, Inner, Table};
use crate::buffer::Ring;
use crate::catalog::{IndexDef, TableEntry};
use crate::config::IsolationLevel;
use crate::error::{Error, Result};
use crate::heap::hot;
use crate::heap::tuple::Value;
use crate::heap::{self, ModifyResult, Relation};
use crate::index::{compare_prefix, in_range, HeapTupleState, IndexEntry, KeyBound, ScanDirection, UniqueCheck};
use crate::lmgr::{LockMode, LockOwner, WaitPolicy};
use crate::stats::TableCounts;
use crate::types::{BlockNumber, Fork, FullXid, Lsn, Oid, Tid, Xid};
use crate::xact::{BackendId, Snapshot};

mod export;
mod message;
mod rowlock;
mod savepoint;
mod truncate;
mod upsert;
mod vacuum_full;
pub(crate) use export::ExportedSnapshots;
use savepoint::SubXact;
pub use truncate::TruncateOptions;
pub(in crate::db) use truncate::{finish_prepared_storage, StorageSwap};
pub use upsert::InsertOrConflict;
pub use vacuum_full::{VacuumFullParams, VacuumFullReport};

/// An open transaction. Dropping it without [`Transaction::commit`] rolls it back.
pub struct Transaction<'db> {
    db: &'db Database,
    inner: &'db Arc<Inner>,
    backend: BackendId,
    isolation: IsolationLevel,
    xid: Option<FullXid>,
    /// Open savepoints, outermost first.
    subxacts: Vec<SubXact>,
    /// The XIDs of the subtransactions that are not rolled back (open or released), sorted by
    /// value: what the snapshots of the next commands call current. Shared with them, changed
    /// in place when no snapshot holds it (a transaction with 100,000 subtransactions does
    /// not copy them per command).
    current_subxids: Arc<Vec<Xid>>,
    cid: u32,
    /// REPEATABLE READ: the transaction snapshot, taken at the first command. READ
    /// COMMITTED inside a statement ([`Transaction::begin_statement`]): the statement's
    /// snapshot, taken at its first command.
    snapshot: Option<Snapshot>,
    /// Between [`Transaction::begin_statement`] and [`Transaction::end_statement`].
    in_statement: bool,
    /// The pruning horizon computed with the last command snapshot.
    horizon: Xid,
    done: bool,
    /// Set when a command failed after it may have changed something: only rollback remains.
    failed: Option<String>,
    /// Bulk-insert state (the buffer ring and the tuple buffer), kept across `insert_many` calls.
    bulk_insert: Option<heap::BulkInsert>,
    /// Statistics counted per table, applied to the tables when the transaction ends.
    table_counts: Vec<(Arc<TableEntry>, TableCounts)>,
    /// Who holds this transaction's table locks ([`crate::lmgr`]).
    owner: LockOwner,
    /// The table locks it took: (table, mode, savepoint depth when first taken). Hot path: a
    /// linear search, and the lock manager is asked only for a new (table, mode).
    held: Vec<(Oid, LockMode, usize)>,
    /// `lock_timeout` for this transaction's waits.
    lock_timeout: Option<std::time::Duration>,
    /// Tables TRUNCATE gave new storage, oldest first (see `truncate`).
    swaps: Vec<truncate::StorageSwap>,
    /// It exported its snapshot (see `export`): the export ends with it.
    exported: bool,
}

impl<'db> Transaction<'db> {
    pub(super) fn new(db: &'db Database, isolation: IsolationLevel) -> Transaction<'db> {
        let inner = db.inner();
        let backend = inner.xact.new_backend_id();
        Transaction {
            db,
            inner,
            backend,
            isolation,
            xid: None,
            subxacts: Vec::new(),
            current_subxids: Arc::default(),
            cid: 0,
            snapshot: None,
            in_statement: false,
            horizon: Xid::INVALID,
            done: false,
            failed: None,
            bulk_insert: None,
            table_counts: Vec::new(),
            owner: inner.lmgr.new_owner("transaction"),
            held: Vec::new(),
            lock_timeout: inner.config.lock_timeout(),
            swaps: Vec::new(),
            exported: false,
        }
    }

    /// Sets `lock_timeout` for the rest of the transaction (`None`: wait without limit).
    pub fn set_lock_timeout(&mut self, timeout: Option<std::time::Duration>) {
        self.lock_timeout = timeout;
    }

    /// Sets the check the transaction's lock waits (a table's lock, another transaction's
    /// row) call while they wait: a wait it stops fails like a lock timeout, with
    /// [`Error::Interrupted`] (`None`: no check).
    pub fn set_interrupt(&mut self, interrupt: Option<crate::error::Interrupt>) {
        self.owner.set_interrupt(interrupt);
    }

    /// `LOCK TABLE table IN mode MODE`: takes a table lock, held until the transaction ends.
    /// A deadlock or lock timeout fails the transaction, as any lock wait does.
    pub fn lock_table(&mut self, table: &Table, mode: LockMode) -> Result<()> {
        self.active()?;
        self.lock_rel(&table.entry, mode)
    }

    /// Takes `mode` on the table for the rest of the transaction, unless already held.
    /// Hot path: a search of the (short) list of locks held.
    fn lock_rel(&mut self, entry: &TableEntry, mode: LockMode) -> Result<()> {
        self.lock_rel_with(entry, mode, WaitPolicy::Wait)
    }

    /// [`Transaction::lock_rel`] that, under [`WaitPolicy::NoWait`], fails with
    /// [`Error::LockNotAvailable`] rather than wait.
    fn lock_rel_with(&mut self, entry: &TableEntry, mode: LockMode, policy: WaitPolicy) -> Result<()> {
        let oid = entry.rel.oid;
        if self.held.iter().any(|&(o, m, _)| o == oid && m == mode) {
            return Ok(());
        }
        let r = self.inner.lmgr.lock(&self.owner, oid, mode, policy, self.lock_timeout);
        if let Err(e) = r {
            // A failed lock wait ends the statement with an error that aborts the transaction.
            self.failed = Some(e.to_string());
            return Err(e);
        }
        self.held.push((oid, mode, self.subxacts.len()));
        // The table may have been dropped while we waited (PostgreSQL rechecks the catalog
        // after locking too).
        if self.inner.catalog.get_by_oid(oid).is_none() {
            return Err(Error::NotFound(format!("relation \"{}\" does not exist", entry.rel.name)));
        }
        Ok(())
    }

    /// Releases the table locks taken at savepoint depth `depth` or deeper (ROLLBACK TO),
    /// as PostgreSQL releases those of a rolled-back subtransaction.
    fn release_locks_from(&mut self, depth: usize) {
        let (gone, kept): (Vec<_>, Vec<_>) = self.held.iter().partition(|h| h.2 >= depth);
        for (oid, mode, _) in gone {
            self.inner.lmgr.release(&self.owner, oid, mode);
        }
        self.held = kept;
    }

    /// RELEASE merges savepoints deeper than `depth` into it: their locks now belong to it.
    fn merge_locks_into(&mut self, depth: usize) {
        for h in &mut self.held {
            h.2 = h.2.min(depth);
        }
    }

    pub fn isolation(&self) -> IsolationLevel {
        self.isolation
    }

    /// The transaction's (top-level) XID, if it has written anything.
    pub fn xid(&self) -> Option<Xid> {
        self.xid.map(FullXid::xid)
    }

    /// The XID rows are written with now: the innermost open savepoint's, if it has one, else
    /// the top-level XID (`GetCurrentTransactionIdIfAny`).
    pub fn current_xid(&self) -> Option<Xid> {
        self.subxacts.last().map_or(self.xid, |s| s.xid).map(FullXid::xid)
    }

    /// Adds a newly assigned subtransaction XID to the current ones. Usually the largest (the
    /// newest), so an append.
    fn add_current_subxid(&mut self, x: Xid) {
        let v = Arc::make_mut(&mut self.current_subxids);
        match v.last() {
            Some(last) if last.0 > x.0 => {
                let i = v.partition_point(|y| y.0 < x.0);
                v.insert(i, x);
            }
            _ => v.push(x),
        }
    }

    /// Removes rolled-back subtransaction XIDs from the current ones. They are the newest
    /// (a rolled-back level's XIDs were assigned after every XID outside it), so usually a
    /// truncation.
    fn remove_current_subxids(&mut self, xids: &[FullXid]) {
        let gone: rustc_hash::FxHashSet<Xid> = xids.iter().map(|x| x.xid()).collect();
        let v = Arc::make_mut(&mut self.current_subxids);
        let mut removed = 0;
        while v.last().is_some_and(|x| gone.contains(x)) {
            v.pop();
            removed += 1;
        }
        if removed < gone.len() {
            v.retain(|x| !gone.contains(x));
        }
    }

    /// The names of the open savepoints, outermost first.
    pub fn savepoints(&self) -> Vec<&str> {
        self.subxacts.iter().map(|s| s.name.as_str()).collect()
    }

    fn active(&self) -> Result<()> {
        if self.done {
            return Err(Error::TransactionClosed("it already committed or rolled back"));
        }
        if let Some(why) = &self.failed {
            return Err(Error::TransactionAborted(why.clone()));
        }
        // After a failed fsync pages may have reverted under the buffer pool: no more reads.
        self.inner.wal.check_poisoned()
    }

    /// Runs one command. An error that may have left changes behind (anything but input
    /// rejected before any change) puts the transaction in the failed state, as PostgreSQL
    /// aborts the transaction of a failed statement.
    fn command<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.active()?;
        let r = f(self);
        if let Err(e) = &r {
            if !matches!(e, Error::InvalidInput(_) | Error::NotFound(_) | Error::TransactionAborted(_)) {
                self.failed = Some(e.to_string());
            }
        }
        r
    }

    /// Whether an earlier error left the transaction able only to roll back.
    pub fn is_failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Assigns the top-level transaction's XID now if it has none yet, returning it with its
    /// epoch: PostgreSQL's `txid_current()`, which gives an open savepoint no XID of its own.
    pub fn assign_xid(&mut self) -> Result<FullXid> {
        self.active()?;
        self.ensure_top_xid()
    }

    /// Assigns XIDs on first write: the top-level transaction's, then each open
    /// savepoint's that has none, outermost first (a parent before its child). Returns the
    /// XID to write rows with.
    pub(crate) fn ensure_xid(&mut self) -> Result<Xid> {
        self.active()?;
        let top = self.ensure_top_xid()?;
        let mut parent = top;
        let mut assigned = false;
        for i in 0..self.subxacts.len() {
            parent = match self.subxacts[i].xid {
                Some(x) => x,
                None => {
                    let x = self.inner.xact.assign_subxid(top, parent, &*self.inner.wal)?;
                    self.subxacts[i].xid = Some(x);
                    self.add_current_subxid(x.xid());
                    assigned = true;
                    x
                }
            };
        }
        if assigned {
            self.refresh_snapshot_xids();
        }
        Ok(parent.xid())
    }

    fn ensure_top_xid(&mut self) -> Result<FullXid> {
        if let Some(x) = self.xid {
            return Ok(x);
        }
        let full = self.inner.xact.assign_xid(&*self.inner.wal)?;
        self.xid = Some(full);
        self.inner.lmgr.set_xid(&self.owner, full.xid());
        self.refresh_snapshot_xids();
        Ok(full)
    }

    /// Makes the kept (REPEATABLE READ or statement) snapshot know the transaction's current XIDs.
    fn refresh_snapshot_xids(&mut self) {
        let subs = self.current_subxids.clone();
        let top = self.xid();
        if let Some(s) = self.snapshot.as_mut() {
            s.my_xid = top;
            s.my_subxids = subs;
        }
    }

    /// The snapshot for the next command: the transaction's (REPEATABLE READ), the
    /// statement's (READ COMMITTED inside [`Transaction::begin_statement`]) or a new one,
    /// advertised in the proc array; also refreshes the pruning horizon.
    fn command_snapshot(&mut self) -> Result<Snapshot> {
        self.active()?;
        let my = self.xid();
        if self.rr() || self.in_statement {
            if self.snapshot.is_none() {
                let (snap, horizon) = self.inner.xact.command_snapshot(self.backend, my);
                self.snapshot = Some(snap);
                self.horizon = horizon;
            } else {
                self.horizon = self.inner.xact.oldest_xmin();
            }
            self.refresh_snapshot_xids();
            Ok(self.snapshot.clone().expect("set above"))
        } else {
            let (mut snap, horizon) = self.inner.xact.command_snapshot(self.backend, my);
            self.horizon = horizon;
            if !self.current_subxids.is_empty() {
                snap.my_subxids = self.current_subxids.clone();
            }
            Ok(snap)
        }
    }

    /// Gives this REPEATABLE READ transaction, before its first command, the snapshot of a
    /// commit boundary (see `TransactionManager::snapshot_at_commit_boundary`): it sees
    /// exactly the transactions whose commit record precedes the LSN `position` returns,
    /// which is returned. For a logical slot's initial copy (`SNAPSHOT 'use'`).
    pub(super) fn take_boundary_snapshot(&mut self, position: impl FnOnce() -> Result<Lsn>) -> Result<Lsn> {
        self.active()?;
        if !self.rr() {
            return Err(Error::invalid("a slot's snapshot needs a REPEATABLE READ transaction"));
        }
        if self.snapshot.is_some() {
            return Err(Error::invalid("a slot's snapshot must be taken before the transaction's first query"));
        }
        let my = self.xid();
        let (snap, horizon, lsn) = self.inner.xact.snapshot_at_commit_boundary(self.backend, my, position)?;
        self.snapshot = Some(snap);
        self.horizon = horizon;
        self.refresh_snapshot_xids();
        Ok(lsn)
    }

    /// Ends a command: a READ COMMITTED transaction outside a statement stops advertising its
    /// command snapshot, so an idle transaction does not hold back pruning (scans keep theirs
    /// until the next command).
    fn end_command(&mut self) {
        if self.isolation == IsolationLevel::ReadCommitted && !self.in_statement {
            self.inner.xact.release_snapshot_xmin(self.backend);
        }
    }

    /// Starts a statement: under READ COMMITTED every command until
    /// [`Transaction::end_statement`] reads with one snapshot, taken at the first of them, as
    /// a PostgreSQL statement does (a query that makes several calls, say one lookup per key
    /// of an `IN` list, then never sees a transaction commit between two of them). Writes
    /// still follow a row's newer committed version ([`Transaction::update_with`]), and each
    /// command still sees the statement's own earlier changes. Under REPEATABLE READ, where
    /// the transaction has one snapshot anyway, it changes nothing.
    pub fn begin_statement(&mut self) {
        if self.isolation == IsolationLevel::ReadCommitted {
            self.snapshot = None;
            self.in_statement = true;
        }
    }

    /// Ends the statement [`Transaction::begin_statement`] started: its snapshot is dropped
    /// and no longer holds back pruning.
    pub fn end_statement(&mut self) {
        if self.isolation == IsolationLevel::ReadCommitted && self.in_statement {
            self.in_statement = false;
            self.snapshot = None;
            self.inner.xact.release_snapshot_xmin(self.backend);
        }
    }

    fn rr(&self) -> bool {
        self.isolation == IsolationLevel::RepeatableRead
    }

    /// This transaction's statistics for `entry`'s table. Hot path: a linear search of a list
    /// that rarely holds more than a few tables, and no lock.
    fn counts(&mut self, entry: &Arc<TableEntry>) -> &mut TableCounts {
        let i = match self.table_counts.iter().position(|(e, _)| Arc::ptr_eq(e, entry)) {
            Some(i) => i,
            None => {
                self.table_counts.push((entry.clone(), TableCounts::default()));
                self.table_counts.len() - 1
            }
        };
        &mut self.table_counts[i].1
    }

    /// Adds the counts to the tables' statistics, once, as the transaction ends.
    fn apply_table_counts(&mut self, committed: bool) {
        apply_counts(self.inner, std::mem::take(&mut self.table_counts), committed);
    }

    /// Inserts a row; returns its TID.
    pub fn insert(&mut self, table: &Table, values: &[Value]) -> Result<Tid> {
        self.active()?;
        self.lock_rel(&table.entry, LockMode::RowExclusive)?;
        let table = &self.current_table(table)?;
        let tid = self.command(|tx| tx.insert_into(&table.entry.rel, Some(&table.entry), values))?;
        self.inner.counters.tup_inserted.add(1);
        Ok(tid)
    }

    pub(crate) fn insert_raw(&mut self, rel: &Relation, values: &[Value]) -> Result<Tid> {
        self.insert_into(rel, None, values)
    }

    /// Heap insert plus one entry in each of the table's indexes.
    fn insert_into(&mut self, rel: &Relation, entry: Option<&Arc<TableEntry>>, values: &[Value]) -> Result<Tid> {
        let xid = self.ensure_xid()?;
        let snap = self.command_snapshot()?;
        let tx = tx_context((xid, self.xid().unwrap_or(xid)), self.cid, &snap, self.rr(), self.horizon);
        let _writers = rel.write_lock.read();
        let tid = heap::insert(&self.inner.env(), rel, &tx, values)?;
        if let Some(e) = entry {
            self.counts(e).inserted += 1;
            self.insert_index_entries(e, xid, &snap, tid, values)?;
        }
        self.cid += 1;
        self.end_command();
        Ok(tid)
    }

    /// Adds the entries of a new heap version to every index of its table (checking unique
    /// indexes against live versions, waiting for running inserters and deleters).
    fn insert_index_entries(
        &self,
        entry: &TableEntry,
        xid: Xid,
        snap: &Snapshot,
        tid: Tid,
        values: &[Value],
    ) -> Result<()> {
        let defs: Vec<Arc<IndexDef>> = entry.indexes.read().clone();
        let env = self.inner.env();
        for def in defs {
            let key = def.key_of(values);
            let check = UniqueProbe {
                inner: self.inner,
                rel: &entry.rel,
                def: &def,
                key: &key,
                me: xid,
                snap,
                owner: &self.owner,
                timeout: self.lock_timeout,
            };
            let unique: Option<&dyn UniqueCheck> = if def.meta.unique { Some(&check) } else { None };
            def.btree.insert(&env, &key, tid, unique)?;
        }
        Ok(())
    }

    /// Inserts many rows at once, a page per WAL record (COPY's path). Returns their TIDs.
    pub fn insert_many(&mut self, table: &Table, rows: &[Vec<Value>]) -> Result<Vec<Tid>> {
        self.active()?;
        self.lock_rel(&table.entry, LockMode::RowExclusive)?;
        let table = &self.current_table(table)?;
        self.command(|tx| tx.insert_many_raw(table, rows))
    }

    fn insert_many_raw(&mut self, table: &Table, rows: &[Vec<Value>]) -> Result<Vec<Tid>> {
        let xid = self.ensure_xid()?;
        let snap = self.command_snapshot()?;
        let tx = tx_context((xid, self.xid().unwrap_or(xid)), self.cid, &snap, self.rr(), self.horizon);
        let _writers = table.entry.rel.write_lock.read();
        let bulk = self.bulk_insert.get_or_insert_with(heap::BulkInsert::new);
        let tids = heap::multi_insert(&self.inner.env(), &table.entry.rel, &tx, rows, bulk)?;
        self.counts(&table.entry).inserted += tids.len() as u64;
        if !table.entry.indexes.read().is_empty() {
            for (tid, row) in tids.iter().zip(rows) {
                self.insert_index_entries(&table.entry, xid, &snap, *tid, row)?;
            }
        }
        self.cid += 1;
        self.end_command();
        self.inner.counters.tup_inserted.add(tids.len() as u64);
        Ok(tids)
    }

    /// The row at `tid` if this transaction's snapshot sees it.
    pub fn fetch(&mut self, table: &Table, tid: Tid) -> Result<Option<Vec<Value>>> {
        self.active()?;
        self.lock_rel(&table.entry, LockMode::AccessShare)?;
        let table = &self.current_table(table)?;
        let snap = self.command_snapshot()?;
        let r = heap::fetch(&self.inner.env(), &table.entry.rel, &snap, self.cid, tid)?;
        self.end_command();
        if r.is_some() {
            self.inner.counters.tup_fetched.add(1);
        }
        Ok(r)
    }

    /// [`Self::fetch`] from a relation without a `Table` handle (the catalog).
    pub(crate) fn fetch_raw(&mut self, rel: &Relation, tid: Tid) -> Result<Option<Vec<Value>>> {
        let snap = self.command_snapshot()?;
        let r = heap::fetch(&self.inner.env(), rel, &snap, self.cid, tid)?;
        self.end_command();
        Ok(r)
    }

    /// Replaces the row at `tid` with `values`. Returns the new version's TID, or `None` when
    /// the row is gone (deleted concurrently, under READ COMMITTED).
    pub fn update(&mut self, table: &Table, tid: Tid, values: &[Value]) -> Result<Option<Tid>> {
        let v = values.to_vec();
        self.update_with(table, tid, move |_| Ok(v.clone()))
    }

    /// Updates the row at `tid` to what `f` computes from its current values. Under READ
    /// COMMITTED, if a concurrent transaction updated the row and committed, `f` is run again on
    /// the newest version (so `balance + delta` is never lost).
    ///
    /// A TID names a row version, like PostgreSQL's `ctid`: one read by an earlier command of a
    /// READ COMMITTED transaction may since have been updated away, pruned, and its line pointer
    /// reused by another row. Callers that keep TIDs across commands should check the row's key
    /// inside `f` (or re-find the row) before changing it.
    pub fn update_with(
        &mut self,
        table: &Table,
        tid: Tid,
        f: impl FnMut(&[Value]) -> Result<Vec<Value>>,
    ) -> Result<Option<Tid>> {
        self.active()?;
        self.lock_rel(&table.entry, LockMode::RowExclusive)?;
        let table = &self.current_table(table)?;
        self.command(|tx| tx.update_raw(table, tid, f))
    }

    fn update_raw(
        &mut self,
        table: &Table,
        tid: Tid,
        mut f: impl FnMut(&[Value]) -> Result<Vec<Value>>,
    ) -> Result<Option<Tid>> {
        let xid = self.ensure_xid()?;
        let snap = self.command_snapshot()?;
        let out = self.update_in_command(table, xid, &snap, tid, &mut f)?;
        self.cid += 1;
        self.end_command();
        Ok(out)
    }

    /// The update itself, within a command whose snapshot `snap` is taken (and advertised).
    fn update_in_command(
        &mut self,
        table: &Table,
        xid: Xid,
        snap: &Snapshot,
        tid: Tid,
        f: &mut dyn FnMut(&[Value]) -> Result<Vec<Value>>,
    ) -> Result<Option<Tid>> {
        let tx = tx_context((xid, self.xid().unwrap_or(xid)), self.cid, snap, self.rr(), self.horizon);
        let (inner, owner, timeout) = (&**self.inner, &self.owner, self.lock_timeout);
        let wait = move |other: Xid| inner.wait_for_xid(owner, xid, other, timeout);
        let _writers = table.entry.rel.write_lock.read();
        let r = heap::update(&self.inner.env(), &table.entry.rel, &tx, tid, f, &wait)?;
        let out = match r {
            ModifyResult::Updated { tid, hot, values } => {
                let c = self.counts(&table.entry);
                c.updated += 1;
                c.hot_updated += u64::from(hot);
                if !hot {
                    self.insert_index_entries(&table.entry, xid, snap, tid, &values)?;
                }
                self.inner.counters.tup_updated.add(1);
                if hot {
                    self.inner.counters.tup_hot_updated.add(1);
                }
                Some(tid)
            }
            ModifyResult::Done(t) => Some(t),
            ModifyResult::Gone => None,
        };
        Ok(out)
    }

    /// Deletes the row at `tid`. Returns whether a row was deleted.
    pub fn delete(&mut self, table: &Table, tid: Tid) -> Result<bool> {
        self.active()?;
        self.lock_rel(&table.entry, LockMode::RowExclusive)?;
        let table = &self.current_table(table)?;
        let ok = self.command(|tx| tx.delete_raw(&table.entry.rel, tid))?;
        if ok {
            self.counts(&table.entry).deleted += 1;
            self.inner.counters.tup_deleted.add(1);
        }
        Ok(ok)
    }

    pub(crate) fn delete_raw(&mut self, rel: &Relation, tid: Tid) -> Result<bool> {
        let xid = self.ensure_xid()?;
        let snap = self.command_snapshot()?;
        let done = self.delete_in_command(rel, xid, &snap, tid)?;
        self.cid += 1;
        self.end_command();
        Ok(done)
    }

    /// The delete itself, within a command whose snapshot `snap` is taken (and advertised).
    fn delete_in_command(&mut self, rel: &Relation, xid: Xid, snap: &Snapshot, tid: Tid) -> Result<bool> {
        let tx = tx_context((xid, self.xid().unwrap_or(xid)), self.cid, snap, self.rr(), self.horizon);
        let (inner, owner, timeout) = (&**self.inner, &self.owner, self.lock_timeout);
        let wait = move |other: Xid| inner.wait_for_xid(owner, xid, other, timeout);
        let _writers = rel.write_lock.read();
        let r = heap::delete(&self.inner.env(), rel, &tx, tid, &wait)?;
        Ok(matches!(r, ModifyResult::Done(_)))
    }

    /// A sequential scan of the rows this transaction sees, in physical order.
    pub fn scan(&mut self, table: &Table) -> Result<Scan<'_, 'db>> {
        self.active()?;
        self.lock_rel(&table.entry, LockMode::AccessShare)?;
        let table = &self.current_table(table)?;
        let snap = self.command_snapshot()?;
        let nblocks = self.inner.pool.smgr().nblocks(table.entry.rel.relfilenode, Fork::Main)?;
        let oldest_xmin = self.horizon;
        self.counts(&table.entry).seq_scan += 1;
        Ok(Scan {
            tx: self,
            rel: table.entry.rel.clone(),
            snap,
            next_block: 0,
            nblocks,
            oldest_xmin,
            buffered: Vec::new().into_iter(),
            ring: Ring::new(256 << 10),
        })
    }

    /// Commits. With `synchronous_commit` on, returns once the commit record is durable.
    pub fn commit(mut self) -> Result<()> {
        if let Some(why) = self.failed.clone() {
            self.abort_now()?;
            return Err(Error::TransactionAborted(format!("{why}; the transaction was rolled back")));
        }
        self.active()?;
        self.done = true;
        let r = match self.xid {
            Some(x) => self.inner.xact.commit(x, &*self.inner.wal, self.inner.config.synchronous_commit()).map(|_| ()),
            None => Ok(()),
        };
        self.apply_table_counts(r.is_ok());
        if r.is_ok() {
            self.finish_swaps_committed();
        }
        self.unregister();
        match r {
            Ok(()) => {
                self.inner.counters.xact_commit.add(1);
                Ok(())
            }
            Err(e) => Err(Error::Poisoned(format!("commit failed: {e}"))),
        }
    }

    /// Rolls back: the transaction's row versions become invisible (aborted in CLOG).
    pub fn rollback(mut self) -> Result<()> {
        if self.done {
            return Err(Error::TransactionClosed("it already committed or rolled back"));
        }
        self.abort_now()
    }

    fn abort_now(&mut self) -> Result<()> {
        self.done = true;
        let r = match self.xid {
            Some(x) => self.inner.xact.abort(x, &*self.inner.wal).map(|_| ()),
            None => Ok(()),
        };
        self.apply_table_counts(false);
        self.undo_swaps_from(0);
        self.unregister();
        self.inner.counters.xact_rollback.add(1);
        r
    }

    /// Leaves the proc array and releases every table lock (in bulk), as the transaction ends.
    fn unregister(&mut self) {
        self.withdraw_exports();
        self.inner.xact.unregister_backend(self.backend);
        self.inner.lmgr.release_all(&self.owner);
        self.held.clear();
    }

    /// The database this transaction belongs to.
    pub fn database(&self) -> &'db Database {
        self.db
    }
}

/// Index lookups and changes by key.
impl Transaction<'_> {
    /// The row whose key in `index` equals `key` (the first, for a non-unique index).
    pub fn get(&mut self, index: &Index, key: &[Value]) -> Result<Option<(Tid, Vec<Value>)>> {
        let bound = KeyBound::Included(key.to_vec());
        Ok(self.range(index, bound.clone(), bound, ScanDirection::Forward, Some(1))?.into_iter().next())
    }

    /// The rows whose keys lie in `[lo, hi]`, in index order, at most `limit` of them.
    pub fn range(
        &mut self,
        index: &Index,
        lo: KeyBound,
        hi: KeyBound,
        dir: ScanDirection,
        limit: Option<usize>,
    ) -> Result<Vec<(Tid, Vec<Value>)>> {
        self.active()?;
        self.lock_rel(&index.table, LockMode::AccessShare)?;
        let index = &self.current_index(index)?;
        let snap = self.command_snapshot()?;
        let r = self.index_rows(index, &snap, &lo, &hi, dir, limit.unwrap_or(usize::MAX));
        self.end_command();
        r
    }

    /// Index-only scan: the key values of the visible rows in `[lo, hi]`, in index order. An
    /// entry on a heap page marked all-visible in the visibility map is returned without
    /// visiting the heap (counted in `heap_fetches_avoided`); every other entry is checked
    /// against the heap (counted in `heap_fetches`).
    pub fn index_only(
        &mut self,
        index: &Index,
        lo: KeyBound,
        hi: KeyBound,
        dir: ScanDirection,
        limit: Option<usize>,
    ) -> Result<Vec<Vec<Value>>> {
        self.active()?;
        self.lock_rel(&index.table, LockMode::AccessShare)?;
        let index = &self.current_index(index)?;
        let snap = self.command_snapshot()?;
        let r = self.index_only_rows(index, &snap, &lo, &hi, dir, limit.unwrap_or(usize::MAX));
        self.end_command();
        r
    }

    /// Updates the row whose key in `index` is `key` (see [`Transaction::update_with`]); `None`
    /// when there is none, or when a concurrent update moved it to another key.
    ///
    /// Finding the row and updating it are one command under one snapshot, which stays
    /// advertised throughout, so the version found cannot be pruned before it is locked (as
    /// PostgreSQL's UPDATE … WHERE finds and locks its rows in one statement). If the version
    /// found was changed meanwhile, READ COMMITTED follows it to the newest version and
    /// re-evaluates the key there (EvalPlanQual).
    pub fn update_by_key(
        &mut self,
        index: &Index,
        key: &[Value],
        mut f: impl FnMut(&[Value]) -> Result<Vec<Value>>,
    ) -> Result<Option<Tid>> {
        self.active()?;
        self.lock_rel(&index.table, LockMode::RowExclusive)?;
        let index = &self.current_index(index)?;
        let def = index.def.clone();
        let wanted = key.to_vec();
        let table = index.table();
        let mut g = |row: &[Value]| {
            if def.key_of(row) != wanted {
                return Err(Error::NotFound(KEY_MOVED.into()));
            }
            f(row)
        };
        let r =
            self.by_key(index, key, None, |tx, xid, snap, tid| tx.update_in_command(&table, xid, snap, tid, &mut g));
        match r {
            Err(Error::NotFound(m)) if m == KEY_MOVED => Ok(None),
            other => other,
        }
    }

    /// Deletes the row whose key in `index` is `key` (found and deleted in one command, as
    /// [`Transaction::update_by_key`]); whether one was deleted.
    pub fn delete_by_key(&mut self, index: &Index, key: &[Value]) -> Result<bool> {
        self.active()?;
        self.lock_rel(&index.table, LockMode::RowExclusive)?;
        let index = &self.current_index(index)?;
        let table = index.table();
        let done = self
            .by_key(index, key, false, |tx, xid, snap, tid| tx.delete_in_command(&table.entry.rel, xid, snap, tid))?;
        if done {
            self.counts(&index.table).deleted += 1;
            self.inner.counters.tup_deleted.add(1);
        }
        Ok(done)
    }

    /// One writing command on the row whose key in `index` is `key`: finds it under the
    /// command's snapshot and runs `act` on it while that snapshot is still advertised (so the
    /// version found cannot be pruned in between); `none` when there is no such row.
    fn by_key<T>(
        &mut self,
        index: &Index,
        key: &[Value],
        none: T,
        act: impl FnOnce(&mut Self, Xid, &Snapshot, Tid) -> Result<T>,
    ) -> Result<T> {
        self.active()?;
        self.lock_rel(&index.table, LockMode::RowExclusive)?;
        self.command(|tx| {
            let xid = tx.ensure_xid()?;
            let snap = tx.command_snapshot()?;
            let bound = KeyBound::Included(key.to_vec());
            let found = tx.index_rows(index, &snap, &bound, &bound, ScanDirection::Forward, 1)?;
            let out = match found.first() {
                Some(&(tid, _)) => act(tx, xid, &snap, tid)?,
                None => none,
            };
            tx.cid += 1;
            tx.end_command();
            Ok(out)
        })
    }

    /// Whether `snap` may use `index`: it must see the index's creation as committed.
    fn index_usable(&self, index: &Index, snap: &Snapshot) -> Result<bool> {
        let x = index.def.created_by;
        if snap.is_current(x) || !x.is_normal() {
            return Ok(true);
        }
        // A published index's creator committed (DDL publishes only after commit), so the
        // snapshot need only see that commit. Asking CLOG is wrong once VACUUM has truncated
        // it below the creator (found by `settle bench aging`: every keyed lookup fell back to
        // a sequential scan after CLOG truncation).
        Ok(!snap.is_in_progress(x))
    }

    fn index_rows(
        &mut self,
        index: &Index,
        snap: &Snapshot,
        lo: &KeyBound,
        hi: &KeyBound,
        dir: ScanDirection,
        limit: usize,
    ) -> Result<Vec<(Tid, Vec<Value>)>> {
        let rel = &index.table.rel;
        if !self.index_usable(index, snap)? {
            return self.range_by_seqscan(index, snap, lo, hi, dir, limit);
        }
        let _not_dropped = hold_off_drop(index)?;
        self.counts(&index.table).idx_scan += 1;
        let env = self.inner.env();
        let c = &self.inner.counters;
        c.idx_scan.add(1);
        let horizon = self.horizon;
        let mut out = Vec::new();
        let mut dead = Vec::new();
        for entry in index.def.btree.scan(&env, lo.clone(), hi.clone(), dir)? {
            let entry = entry?;
            // PostgreSQL counts an index scan's entries in pg_stat_database.tup_returned and the
            // heap tuples it fetches in tup_fetched, as well as in the idx_* counters.
            c.idx_tup_read.add(1);
            c.tup_returned.add(1);
            match hot::hot_search(&env, rel, snap, self.cid, entry.tid, horizon)? {
                Some((tid, vals)) => {
                    // The entry may be for another version of the row (a key changed before the
                    // index existed): the version we see must have the entry's key.
                    if index.def.key_of(&vals) == entry.key {
                        c.idx_tup_fetch.add(1);
                        c.tup_fetched.add(1);
                        out.push((tid, vals));
                        if out.len() >= limit {
                            break;
                        }
                    }
                }
                None => {
                    if hot::chain_dead_to_all(&env, rel, entry.tid, horizon)? {
                        dead.push(entry);
                    }
                }
            }
        }
        kill_dead_entries(&env, index, &dead, horizon)?;
        Ok(out)
    }

    fn index_only_rows(
        &mut self,
        index: &Index,
        snap: &Snapshot,
        lo: &KeyBound,
        hi: &KeyBound,
        dir: ScanDirection,
        limit: usize,
    ) -> Result<Vec<Vec<Value>>> {
        if !self.index_usable(index, snap)? {
            let rows = self.range_by_seqscan(index, snap, lo, hi, dir, limit)?;
            return Ok(rows.iter().map(|(_, v)| index.def.key_of(v)).collect());
        }
        let _not_dropped = hold_off_drop(index)?;
        self.counts(&index.table).idx_scan += 1;
        let env = self.inner.env();
        let c = &self.inner.counters;
        c.idx_scan.add(1);
        let horizon = self.horizon;
        let rel = &index.table.rel;
        let mut out = Vec::new();
        let mut dead = Vec::new();
        for entry in index.def.btree.scan(&env, lo.clone(), hi.clone(), dir)? {
            let entry = entry?;
            c.idx_tup_read.add(1);
            c.tup_returned.add(1);
            if heap_page_all_visible(&self.inner.pool, rel, entry.tid.block)? {
                c.heap_fetches_avoided.add(1);
                heap::usage::count(|u| u.index_only_fetches_avoided += 1);
                out.push(entry.key);
            } else {
                c.heap_fetches.add(1);
                heap::usage::count(|u| u.index_only_heap_fetches += 1);
                match hot::hot_search(&env, rel, snap, self.cid, entry.tid, horizon)? {
                    Some((_, vals)) if index.def.key_of(&vals) == entry.key => {
                        c.tup_fetched.add(1);
                        out.push(entry.key)
                    }
                    Some(_) => continue,
                    None => {
                        if hot::chain_dead_to_all(&env, rel, entry.tid, horizon)? {
                            dead.push(entry);
                        }
                        continue;
                    }
                }
            }
            if out.len() >= limit {
                break;
            }
        }
        kill_dead_entries(&env, index, &dead, horizon)?;
        Ok(out)
    }

    /// The rows of an index range found without the index (for snapshots older than it).
    fn range_by_seqscan(
        &mut self,
        index: &Index,
        snap: &Snapshot,
        lo: &KeyBound,
        hi: &KeyBound,
        dir: ScanDirection,
        limit: usize,
    ) -> Result<Vec<(Tid, Vec<Value>)>> {
        self.counts(&index.table).seq_scan += 1;
        let rel = &index.table.rel;
        let env = self.inner.env();
        let nblocks = self.inner.pool.smgr().nblocks(rel.relfilenode, Fork::Main)?;
        let horizon = self.horizon;
        let mut ring = Ring::new(256 << 10);
        let mut rows = Vec::new();
        for b in 0..nblocks {
            for (tid, vals) in heap::scan_page(&env, rel, snap, self.cid, BlockNumber(b), horizon, &mut ring)? {
                if in_range(&index.def.key_of(&vals), lo, hi) {
                    rows.push((tid, vals));
                }
            }
        }
        rows.sort_by(|a, b| {
            let o = compare_prefix(&index.def.key_of(&a.1), &index.def.key_of(&b.1)).then(a.0.cmp(&b.0));
            if dir == ScanDirection::Backward {
                o.reverse()
            } else {
                o
            }
        });
        rows.truncate(limit);
        Ok(rows)
    }
}

/// Adds a finished (sub)transaction's counts to the tables' statistics.
pub(super) fn apply_counts(inner: &Inner, counts: Vec<(Arc<TableEntry>, TableCounts)>, committed: bool) {
    for (entry, c) in counts {
        entry.stats.apply(&c, committed);
        if c.inserted + c.updated + c.deleted > 0 {
            super::autovacuum::note_changed(inner, &entry);
        }
    }
}

/// Marks index entries whose heap chains an index scan found dead to everyone LP_DEAD, once at
/// the end of the scan (PostgreSQL's `kill_prior_tuple`, batched per leaf by `kill_entries`).
/// Each is checked again under its leaf's lock, in case its heap slot was freed and reused.
fn kill_dead_entries(env: &heap::HeapEnv<'_>, index: &Index, dead: &[IndexEntry], horizon: Xid) -> Result<()> {
    if dead.is_empty() {
        return Ok(());
    }
    let rel = &index.table.rel;
    index.def.btree.kill_entries_checked(env, dead, &mut |tid| hot::chain_dead_to_all(env, rel, tid, horizon))?;
    Ok(())
}

/// Marker for an update whose row no longer has the key it was found by.
const KEY_MOVED: &str = "the row's key changed under a concurrent update";

/// Whether the visibility map says every tuple on a heap page is visible to everyone, so that
/// an index-only scan may return an entry's key without visiting the heap. The map is read
/// without the heap page's lock: a writer clears the bit before it changes the page (and before
/// it adds index entries), so a scan that still finds the bit set has a snapshot taken before
/// the writer committed, which would not see the change anyway (see [`crate::vm`], "Locking").
fn heap_page_all_visible(pool: &crate::buffer::BufferPool, rel: &Relation, block: BlockNumber) -> Result<bool> {
    Ok(rel.vm.get(pool, block)?.all_visible())
}

/// Answers a unique index's questions about the heap for one new key.
struct UniqueProbe<'a> {
    inner: &'a Arc<Inner>,
    rel: &'a Relation,
    def: &'a IndexDef,
    key: &'a [Value],
    /// The XID the new version is written with.
    me: Xid,
    /// The writer's command snapshot: which XIDs are its own.
    snap: &'a Snapshot,
    /// The writer's lock owner and `lock_timeout`, for its waits.
    owner: &'a LockOwner,
    timeout: Option<std::time::Duration>,
}

impl UniqueCheck for UniqueProbe<'_> {
    fn state(&self, tid: Tid) -> Result<HeapTupleState> {
        let (state, vals) = hot::unique_state(&self.inner.env(), self.rel, tid, self.snap)?;
        Ok(match (state, vals) {
            // A live version under another key (the entry is stale): no conflict.
            (HeapTupleState::Live, Some(v)) if self.def.key_of(&v) != self.key => HeapTupleState::Dead,
            (s, _) => s,
        })
    }

    fn wait(&self, xid: Xid) -> Result<()> {
        self.inner.wait_for_xid(self.owner, self.me, xid, self.timeout)
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.abort_now();
        }
    }
}

/// A sequential scan: yields `(tid, values)` page by page.
pub struct Scan<'t, 'db> {
    tx: &'t mut Transaction<'db>,
    rel: Arc<Relation>,
    snap: Snapshot,
    next_block: u32,
    nblocks: u32,
    oldest_xmin: Xid,
    buffered: std::vec::IntoIter<(Tid, Vec<Value>)>,
    ring: Ring,
}

impl Iterator for Scan<'_, '_> {
    type Item = Result<(Tid, Vec<Value>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.buffered.next() {
                self.tx.inner.counters.tup_returned.add(1);
                return Some(Ok(r));
            }
            if self.next_block >= self.nblocks {
                return None;
            }
            let b = BlockNumber(self.next_block);
            self.next_block += 1;
            let env = self.tx.inner.env();
            match heap::scan_page(&env, &self.rel, &self.snap, self.tx.cid, b, self.oldest_xmin, &mut self.ring) {
                Ok(rows) => self.buffered = rows.into_iter(),
                // VACUUM truncated the table's empty tail after the scan began: the pages
                // it removed held no rows.
                Err(Error::NotFound(_))
                    if env.pool.smgr().nblocks(self.rel.relfilenode, Fork::Main).is_ok_and(|n| b.0 >= n) =>
                {
                    self.next_block = self.nblocks;
                }
                Err(e) => {
                    self.next_block = self.nblocks;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// Holds off DROP INDEX for the rest of a scan of `index` (see [`IndexDef::dropped`]); an
/// error naming the index when it was dropped already.
fn hold_off_drop(index: &Index) -> Result<parking_lot::RwLockReadGuard<'_, bool>> {
    let g = index.def.dropped.read();
    if *g {
        return Err(Error::NotFound(format!("index \"{}\" does not exist", index.def.name)));
    }
    Ok(g)
}
