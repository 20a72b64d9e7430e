//! The logical decoder (PostgreSQL's `decode.c`, `snapbuild.c` and `logical.c`, much
//! simplified by what the engine guarantees): WAL records in, committed transactions out,
//! through the [`ReorderBuffer`] and an [`OutputPlugin`].
//!
//! # Where decoding starts, and what it skips
//!
//! A session reads from a slot's `restart_lsn`, which is always a RUNNING_XACTS record
//! (`xact::standby`, logged at every checkpoint and at slot creation). Until the first such
//! record nothing is decoded. The transactions it lists began before it, so their first
//! changes may lie before the decoder's start: they are skipped entirely (PostgreSQL's
//! snapshot builder waits for them to finish before it reaches `SNAPBUILD_CONSISTENT`; the
//! slot's rules make sure every one of them committed before `confirmed_flush`, so nothing
//! owed is lost). Every other transaction began after the record and is decoded whole, and
//! handed to the plugin at its commit unless the commit record starts before the slot's
//! `confirmed_flush` (already consumed: PostgreSQL's `SnapBuildXactNeedsSkip`).
//!
//! No historic catalog snapshot is needed. A relation's columns change under its OID only by
//! ALTER TABLE (ADD COLUMN appends one, with the missing value rows stored before read for
//! it; RENAME COLUMN / RENAME TO change names; `db::alter`), which writes the table's new
//! `pg_class` row under AccessExclusive: every transaction that changed the table before
//! committed before that row, and every one after began after it, so a change is decoded with
//! the description the decoder has learned at the change's point in the WAL (pgoutput sends a
//! new Relation message when that description differs from the one it sent). A decoder that
//! finds a relation not yet learned takes the catalog's *current* description instead: changes
//! read before it reaches a later ALTER's `pg_class` row then carry the added column (NULL or
//! its missing value) and the new names. It looks first at the `pg_class` rows it has read from the WAL (a table
//! created, written and dropped while decoding lagged is still known), then at the catalog it
//! was given. A heap record names its relation by file node, which TRUNCATE changes: the
//! decoder maps file nodes to tables from the same `pg_class` rows, in WAL order, so the
//! changes a transaction makes after its TRUNCATE (in the new storage) find their table
//! before that transaction commits. Catalog relations' own changes are not decoded. A relation's replica identity
//! and primary key (what pgoutput's Relation message says) are learned the same way, from its
//! new `pg_class` row and its key's index row.
//!
//! Catalog rows that do change under their identity (publications) are read by the plugin as
//! of each change's LSN: the decoder keeps the start point and the commits of the transactions
//! that wrote them ([`super::historic::CatalogHistory`]) and hands that to the plugin
//! ([`OutputPlugin::catalog_history`]) before anything later.
//!
//! # Records
//!
//! Heap INSERT / MULTI_INSERT / UPDATE / HOT_UPDATE / DELETE of user relations become changes
//! of their top-level transaction (the record names it when written in a subtransaction);
//! transactional logical messages are changes too, non-transactional ones go out at once; a
//! TRUNCATE record (`heap::truncate`) is one change listing its tables, handed to the plugin's
//! `truncate` (or `stream_truncate`) callback with every table still known.
//! COMMIT (and COMMIT PREPARED) hands the transaction over; ABORT (and ABORT PREPARED) drops
//! it; a ROLLBACK TO's abort record cuts it at its savepoint LSN.
//!
//! # Two-phase decoding
//!
//! On a slot with `two_phase` (and a plugin with the two-phase callbacks), a prepared
//! transaction is handed over at its PREPARE: `begin_prepare`, its changes, `prepare` (or,
//! if it was streamed, a last block and `stream_prepare`); its COMMIT PREPARED is then only
//! `commit_prepared` and its ROLLBACK PREPARED `rollback_prepared`. The slot's
//! `two_phase_at` (where two-phase decoding was turned on) splits prepared transactions as
//! PostgreSQL 15 does: one PREPAREd before it was never handed over at its PREPARE, so its
//! COMMIT PREPARED hands over the whole prepared transaction first; one PREPAREd before the
//! slot's `confirmed_flush` but at or after `two_phase_at` was handed over by an earlier
//! session and is not repeated. A PREPARE the plugin filters (`filter_prepare`), or any
//! PREPARE without two-phase decoding, leaves the transaction to be decoded whole at its
//! COMMIT PREPARED, as an ordinary commit. COMMIT and ROLLBACK PREPARED records carry no
//! GID: the decoder keeps the one its PREPARE record named (a transaction it decodes
//! always began, and so was prepared, after its start point).

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::historic::CatalogHistory;
use super::message::LogicalMessage;
use super::reorderbuffer::{Change, ChangeKind, ReorderBuffer, StreamSink};
use crate::catalog::{self, ClassRow, RelKind};
use crate::error::{Error, Result};
use crate::heap::truncate::{TruncateRecord, XLOG_HEAP_TRUNCATE};
use crate::heap::tuple::{deform_logged_tuple_refs, deform_tuple, Schema, Value, ValueRef};
use crate::heap::wal::{
    decode_row_change, for_each_inserted_tuple, insert_rel, logged_row_change, LoggedRowChange, RowChange,
    XLOG_HEAP2_MULTI_INSERT,
};
use crate::heap::ReplicaIdentity;
use crate::types::{Lsn, Oid, Tid, Xid};
use crate::wal::{DecodedRecord, Rmgr};
use crate::xact::records::decode_end_record;
use crate::xact::standby::{RunningXacts, XLOG_RUNNING_XACTS};
use crate::xact::twophase::TwoPhaseState;
use crate::xact::{
    INFO_XACT_ABORT, INFO_XACT_ABORT_PREPARED, INFO_XACT_COMMIT, INFO_XACT_COMMIT_PREPARED, INFO_XACT_PREPARE,
};

/// First OID of user relations: below it, the catalog's own.
const FIRST_USER_OID: u32 = 16384;

/// A relation as output plugins name and read it.
#[derive(Clone, Debug)]
pub struct RelInfo {
    /// A number no other description of any relation made in this process has (see
    /// [`RelInfo::next_epoch`]): a plugin caches what it derives from a description by it,
    /// which saves comparing schemas once per row. Not part of the description's equality.
    pub epoch: u64,
    pub oid: Oid,
    pub namespace: String,
    pub name: String,
    pub schema: Schema,
    /// The columns' missing values (`pg_class.relmissing`): what a row logged before
    /// `ALTER TABLE ... ADD COLUMN ... DEFAULT` holds for the column (an old row or key
    /// logged by a later UPDATE or DELETE may be such a row). Empty: NULL for every column.
    pub missing: Vec<Value>,
    /// `relreplident`, and the primary key's columns (positions in `schema`; empty without
    /// one): what an update's or delete's old row holds.
    pub replica_identity: ReplicaIdentity,
    pub key_columns: Vec<u16>,
}

impl PartialEq for RelInfo {
    fn eq(&self, o: &RelInfo) -> bool {
        (self.oid, &self.namespace, &self.name, &self.schema, &self.missing, self.replica_identity, &self.key_columns)
            == (o.oid, &o.namespace, &o.name, &o.schema, &o.missing, o.replica_identity, &o.key_columns)
    }
}

impl RelInfo {
    /// A fresh [`RelInfo::epoch`].
    pub fn next_epoch() -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

/// Finds a relation by OID in the current catalog (the decoder's fallback).
pub trait RelationLookup {
    fn relation(&self, oid: Oid) -> Option<RelInfo>;
    /// The table stored under file node `relfilenode` (a heap record names its relation by
    /// file node; TRUNCATE gives a table a new one). By default the OID itself, which a table
    /// never truncated keeps as its file node.
    fn table_of_filenode(&self, relfilenode: Oid) -> Option<Oid> {
        Some(relfilenode)
    }
}

/// A committed (or streamed) transaction, as plugins see it.
#[derive(Clone, Copy, Debug)]
pub struct TxnInfo {
    pub xid: Xid,
    /// Its first change's LSN, its commit record's start and end, its commit time (µs since
    /// the Unix epoch).
    pub first_lsn: Lsn,
    pub commit_lsn: Lsn,
    pub end_lsn: Lsn,
    pub commit_time_us: i64,
}

/// What a row change does (what [`OutputPlugin::wants_change`] is told before deforming).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    Insert,
    Update,
    Delete,
}

/// One decoded row change, its values borrowed from the change's logged tuples (and the
/// table's missing values): a plugin writes them out or copies what it keeps
/// ([`ValueRef::to_value`]).
#[derive(Clone, Debug)]
pub enum RowData<'a> {
    Insert {
        new: Vec<ValueRef<'a>>,
    },
    /// `old` is the logged old key (non-key columns NULL) or whole old row, if any;
    /// `old_whole` says which (the table's replica identity when the change was logged:
    /// FULL logs the whole row).
    Update {
        old: Option<Vec<ValueRef<'a>>>,
        old_whole: bool,
        new: Vec<ValueRef<'a>>,
    },
    Delete {
        old: Option<Vec<ValueRef<'a>>>,
        old_whole: bool,
    },
}

/// PostgreSQL's output plugin callbacks. Each writes rows through [`Output::write`].
///
/// The `stream_*` callbacks are PostgreSQL 14's streaming of in-progress transactions
/// (`logical.c`'s `stream_*_cb_wrapper`s): when [`OutputPlugin::streaming`] says so, a
/// transaction the reorder buffer must evict is handed over before it commits, in blocks
/// (`stream_start`, `stream_change`/`stream_message`…, `stream_stop`), and ends with
/// `stream_commit` or `stream_abort`. A plugin that streams must implement all of them; the
/// defaults are PostgreSQL's error for a missing one.
pub trait OutputPlugin {
    fn begin(&mut self, out: &mut Output, txn: &TxnInfo) -> Result<()>;
    /// Whether the plugin wants a `kind` change of `rel` at `lsn` (`has_old`: an old row or
    /// key was logged), asked before its tuples are deformed: a change declined here costs
    /// neither deforming nor a [`OutputPlugin::change`] / [`OutputPlugin::stream_change`] call.
    /// PostgreSQL's pgoutput decides by its publications before it touches the tuple
    /// (`pgoutput_change`), and so does the engine's; the null plugin declines everything.
    fn wants_change(&mut self, _rel: &RelInfo, _lsn: Lsn, _kind: RowKind, _has_old: bool) -> Result<bool> {
        Ok(true)
    }
    fn change(&mut self, out: &mut Output, txn: &TxnInfo, lsn: Lsn, rel: &RelInfo, row: &RowData<'_>) -> Result<()>;
    /// A logical message: `txn` is `None` for a non-transactional one.
    fn message(
        &mut self,
        out: &mut Output,
        txn: Option<&TxnInfo>,
        lsn: Lsn,
        transactional: bool,
        prefix: &str,
        content: &[u8],
    ) -> Result<()>;
    fn commit(&mut self, out: &mut Output, txn: &TxnInfo) -> Result<()>;

    /// Whether in-progress transactions are to be streamed (PostgreSQL's `ctx->streaming`,
    /// which test_decoding takes from its `stream-changes` option).
    fn streaming(&self) -> bool {
        false
    }
    /// A block of top-level transaction `top`'s changes begins; `lsn` is its first change's.
    fn stream_start(&mut self, _out: &mut Output, _top: Xid, _lsn: Lsn) -> Result<()> {
        Err(missing_stream_callback("stream_start_cb"))
    }
    /// The block ends; `lsn` is its last change's.
    fn stream_stop(&mut self, _out: &mut Output, _top: Xid, _lsn: Lsn) -> Result<()> {
        Err(missing_stream_callback("stream_stop_cb"))
    }
    /// A change of `top` written by `xid` (`top` or one of its subtransactions: pgoutput sends
    /// it, so that a subscriber can drop that subtransaction's changes at its stream abort).
    fn stream_change(
        &mut self,
        _out: &mut Output,
        _top: Xid,
        _xid: Xid,
        _lsn: Lsn,
        _rel: &RelInfo,
        _row: &RowData<'_>,
    ) -> Result<()> {
        Err(missing_stream_callback("stream_change_cb"))
    }
    /// A transactional logical message inside a streamed block, written by `xid`.
    #[expect(clippy::too_many_arguments, reason = "PostgreSQL's callback and the change's XID")]
    fn stream_message(
        &mut self,
        _out: &mut Output,
        _top: Xid,
        _xid: Xid,
        _lsn: Lsn,
        _transactional: bool,
        _prefix: &str,
        _content: &[u8],
    ) -> Result<()> {
        Err(missing_stream_callback("stream_message_cb"))
    }
    /// `xid` (`top` itself, or one of its subtransactions whose changes were streamed) rolled
    /// back; `lsn` is the end of the abort record.
    fn stream_abort(&mut self, _out: &mut Output, _top: Xid, _xid: Xid, _lsn: Lsn) -> Result<()> {
        Err(missing_stream_callback("stream_abort_cb"))
    }
    /// [`OutputPlugin::stream_abort`] with the abort record's time (µs since the Unix epoch),
    /// which pgoutput's protocol 4 sends. The decoder calls this one.
    fn stream_abort_at(&mut self, out: &mut Output, top: Xid, xid: Xid, lsn: Lsn, _abort_time_us: i64) -> Result<()> {
        self.stream_abort(out, top, xid, lsn)
    }
    /// A TRUNCATE of `rels` in one statement (PostgreSQL's `truncate_cb`, optional: a plugin
    /// without it hears nothing of truncates). `flags` says CASCADE and RESTART IDENTITY.
    fn truncate(
        &mut self,
        _out: &mut Output,
        _txn: &TxnInfo,
        _lsn: Lsn,
        _rels: &[Arc<RelInfo>],
        _flags: &TruncateRecord,
    ) -> Result<()> {
        Ok(())
    }
    /// A TRUNCATE inside a streamed block, written by `xid` (`stream_truncate_cb`, optional).
    fn stream_truncate(
        &mut self,
        _out: &mut Output,
        _top: Xid,
        _xid: Xid,
        _lsn: Lsn,
        _rels: &[Arc<RelInfo>],
        _flags: &TruncateRecord,
    ) -> Result<()> {
        Ok(())
    }
    /// A streamed transaction committed (its last changes went out in one more block just
    /// before).
    fn stream_commit(&mut self, _out: &mut Output, _txn: &TxnInfo) -> Result<()> {
        Err(missing_stream_callback("stream_commit_cb"))
    }

    /// The decoder's historic catalog moved (see [`super::historic`]): at the start point, and
    /// after the commit of each transaction that wrote a catalog relation other than
    /// `pg_class` or was running at the start point, before anything later is handed over. A
    /// plugin that reads catalog rows (pgoutput's publications) keeps it.
    fn catalog_history(&mut self, _history: &CatalogHistory) -> Result<()> {
        Ok(())
    }

    /// What the decoder knows of relation `oid` changed (a new `pg_class` or key row read from
    /// the WAL): changes handed over from now on come with the new [`RelInfo`]. A plugin that
    /// caches what it derives from a relation drops that here (PostgreSQL's pgoutput registers
    /// a relcache invalidation callback, `rel_sync_cache_relation_cb`, for its cache).
    fn relation_changed(&mut self, _oid: Oid) {}

    /// Whether the plugin can decode prepared transactions at PREPARE (PostgreSQL: it has the
    /// two-phase callbacks). Decoding does so when this holds and the slot has `two_phase`
    /// on, or the plugin asks for it ([`OutputPlugin::two_phase_requested`]).
    fn two_phase(&self) -> bool {
        false
    }
    /// Whether the plugin's options ask for two-phase decoding on a slot created without it
    /// (pgoutput's `two_phase`): the slot then turns it on for good, from where this session
    /// starts (PostgreSQL 15's `CreateDecodingContext`).
    fn two_phase_requested(&self) -> bool {
        false
    }
    /// Whether prepared transaction `xid` named `gid` is to be decoded at its COMMIT PREPARED
    /// as an ordinary transaction instead (`filter_prepare_cb`).
    fn filter_prepare(&mut self, _xid: Xid, _gid: &str) -> bool {
        false
    }
    /// A prepared transaction's changes begin. `txn`'s commit fields describe the PREPARE
    /// record (its start, end and time).
    fn begin_prepare(&mut self, _out: &mut Output, _txn: &TxnInfo, _gid: &str) -> Result<()> {
        Err(missing_two_phase_callback("begin_prepare_cb"))
    }
    /// The PREPARE, after the changes.
    fn prepare(&mut self, _out: &mut Output, _txn: &TxnInfo, _gid: &str) -> Result<()> {
        Err(missing_two_phase_callback("prepare_cb"))
    }
    /// COMMIT PREPARED of a transaction decoded at its PREPARE; `txn`'s commit fields
    /// describe the COMMIT PREPARED record.
    fn commit_prepared(&mut self, _out: &mut Output, _txn: &TxnInfo, _gid: &str) -> Result<()> {
        Err(missing_two_phase_callback("commit_prepared_cb"))
    }
    /// ROLLBACK PREPARED: `txn`'s commit fields describe the ROLLBACK PREPARED record; the
    /// PREPARE record ended at `prepare_end_lsn` at `prepare_time_us`.
    fn rollback_prepared(
        &mut self,
        _out: &mut Output,
        _txn: &TxnInfo,
        _gid: &str,
        _prepare_end_lsn: Lsn,
        _prepare_time_us: i64,
    ) -> Result<()> {
        Err(missing_two_phase_callback("rollback_prepared_cb"))
    }
    /// The PREPARE of a streamed transaction (its last changes went out in one more block
    /// just before); `txn` as for [`OutputPlugin::prepare`].
    fn stream_prepare(&mut self, _out: &mut Output, _txn: &TxnInfo, _gid: &str) -> Result<()> {
        Err(missing_stream_callback("stream_prepare_cb"))
    }
}

/// PostgreSQL's error for a two-phase plugin without one of the two-phase callbacks.
fn missing_two_phase_callback(name: &str) -> Error {
    Error::invalid(format!("logical replication at prepare time requires a {name} callback"))
}

/// PostgreSQL's error for a streaming plugin without one of the stream callbacks.
fn missing_stream_callback(name: &str) -> Error {
    Error::invalid(format!("logical streaming requires a {name} callback"))
}

/// One row of `pg_logical_slot_get_changes`: the LSN it belongs to, the transaction, the
/// plugin's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputRow {
    pub lsn: Lsn,
    pub xid: Xid,
    pub data: Vec<u8>,
}

/// Where a plugin's rows go: collected in `rows`, or handed one by one to a sink
/// ([`Output::to_sink`]) so that a session's rows need not all sit in memory at once (one
/// transaction of 8,000,000 rows is 8,000,000 rows at its commit).
///
/// A sink borrows each row and copies what it keeps, and the row's buffer comes back to the
/// plugin for its next message ([`Output::buffer`]): a session with a sink allocates no
/// message buffer per row.
#[derive(Default)]
pub struct Output<'s> {
    pub rows: Vec<OutputRow>,
    sink: Option<&'s mut RowSink<'s>>,
    /// The sink's first error; later rows are dropped until the caller takes it.
    error: Option<Error>,
    /// Rows written (to `rows` or to the sink).
    pub written: u64,
    /// The last row's buffer once the sink is done with it, emptied.
    spare: Vec<u8>,
}

/// What takes an output's rows one by one, borrowed.
pub type RowSink<'s> = dyn FnMut(&OutputRow) -> Result<()> + 's;

/// The largest buffer kept for the next message (a larger one was a large row's).
const SPARE_BYTES: usize = 64 << 10;

impl<'s> Output<'s> {
    /// An output that hands every row to `sink` instead of collecting it.
    pub fn to_sink(sink: &'s mut RowSink<'s>) -> Output<'s> {
        Output { rows: Vec::new(), sink: Some(sink), error: None, written: 0, spare: Vec::new() }
    }

    /// An empty buffer for the next message's bytes, to give back through [`Output::write`]:
    /// the last message's when a sink took it.
    pub fn buffer(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.spare)
    }

    pub fn write(&mut self, lsn: Lsn, xid: Xid, data: Vec<u8>) {
        if self.error.is_some() {
            return;
        }
        self.written += 1;
        let row = OutputRow { lsn, xid, data };
        match &mut self.sink {
            Some(sink) => {
                if let Err(e) = sink(&row) {
                    self.error = Some(e);
                }
                let mut data = row.data;
                if data.capacity() <= SPARE_BYTES && data.capacity() > self.spare.capacity() {
                    data.clear();
                    self.spare = data;
                }
            }
            None => self.rows.push(row),
        }
    }

    /// The sink's error, if it failed (the caller stops decoding).
    pub fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }
}

/// Where decoding stands relative to its start point.
enum Start {
    /// No RUNNING_XACTS record read yet: nothing is decoded.
    Waiting,
    /// Decoding; these transactions began before the start point and are skipped.
    Decoding { skip: FxHashSet<Xid> },
}

/// The relations changes name: those learned from `pg_class` rows in the WAL, then the
/// catalog's, cached once used.
struct Relations<'a> {
    catalog: &'a dyn RelationLookup,
    learned: FxHashMap<Oid, Arc<RelInfo>>,
    known: FxHashMap<Oid, Arc<RelInfo>>,
    /// Tables by file node: learned from `pg_class` rows in WAL order (so the changes after a
    /// TRUNCATE, in its new storage, find their table), then asked of the catalog.
    by_filenode: FxHashMap<Oid, Oid>,
    /// The vectors the last change's rows were decoded into, for the next one's.
    rows: RowBuffers,
}

/// The vectors of a decoded row's new and old values, kept from one change to the next so
/// that decoding a row allocates nothing. They hold no values between changes, so any
/// lifetime's values fit.
#[derive(Default)]
struct RowBuffers {
    new: Vec<ValueRef<'static>>,
    old: Vec<ValueRef<'static>>,
}

impl RowBuffers {
    /// Takes back the vectors of a row the plugin is done with.
    fn recycle(&mut self, row: RowData<'_>) {
        match row {
            RowData::Insert { new } => self.new = emptied(new),
            RowData::Update { old, new, .. } => {
                self.new = emptied(new);
                if let Some(old) = old {
                    self.old = emptied(old);
                }
            }
            RowData::Delete { old, .. } => {
                if let Some(old) = old {
                    self.old = emptied(old);
                }
            }
        }
    }
}

/// `v` emptied, as a vector of values of any lifetime. The collect of an emptied vector's
/// iterator into one of a type of the same size and alignment reuses its allocation (the
/// standard library's in-place collection), so this moves the buffer and allocates nothing.
fn emptied<'b>(mut v: Vec<ValueRef<'_>>) -> Vec<ValueRef<'b>> {
    v.clear();
    v.into_iter().map(|_| ValueRef::Null).collect()
}

impl Relations<'_> {
    /// The table a heap record's file node belongs to.
    fn table_of(&mut self, relfilenode: Oid) -> Oid {
        if let Some(&oid) = self.by_filenode.get(&relfilenode) {
            return oid;
        }
        let oid = self.catalog.table_of_filenode(relfilenode).unwrap_or(relfilenode);
        self.by_filenode.insert(relfilenode, oid);
        oid
    }

    /// A hot path: once per change handed over.
    fn get(&mut self, oid: Oid, lsn: Lsn) -> Result<&Arc<RelInfo>> {
        self.get_with_rows(oid, lsn).map(|(rel, _)| rel)
    }

    /// [`Relations::get`], and the row buffers beside it (borrowed apart, so that a change's
    /// relation need not be cloned to decode its rows).
    fn get_with_rows(&mut self, oid: Oid, lsn: Lsn) -> Result<(&Arc<RelInfo>, &mut RowBuffers)> {
        use std::collections::hash_map::Entry;
        let Relations { catalog, learned, known, rows, .. } = self;
        match known.entry(oid) {
            Entry::Occupied(e) => Ok((e.into_mut(), rows)),
            Entry::Vacant(v) => {
                let r = learned.get(&oid).cloned().or_else(|| catalog.relation(oid).map(Arc::new));
                let r = r.ok_or_else(|| {
                    Error::invalid(format!(
                        "logical decoding: relation with OID {} at {lsn} is not known (dropped before decoding \
                         reached its creation)",
                        oid.0
                    ))
                })?;
                Ok((v.insert(r), rows))
            }
        }
    }
}

/// Hands one queued change to the plugin: as part of committed transaction `txn`, or (`txn`
/// `None`) streamed as part of in-progress top-level transaction `top`.
fn emit(
    rels: &mut Relations<'_>,
    plugin: &mut dyn OutputPlugin,
    out: &mut Output,
    top: Xid,
    txn: Option<&TxnInfo>,
    c: &Change<'_>,
) -> Result<()> {
    match c.kind {
        ChangeKind::Message => {
            let prefix = String::from_utf8_lossy(c.old);
            match txn {
                Some(txn) => plugin.message(out, Some(txn), c.lsn, true, &prefix, c.new),
                None => plugin.stream_message(out, top, c.xid, c.lsn, true, &prefix, c.new),
            }
        }
        ChangeKind::Truncate => {
            let flags = TruncateRecord { flags: c.old.first().copied().unwrap_or(0), rels: Vec::new() };
            // Relations no longer known are left out, as PostgreSQL leaves out those it
            // cannot open; nothing goes out when none is left.
            let mut list = Vec::new();
            for b in c.new.chunks_exact(4) {
                let oid = Oid(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                if let Ok(r) = rels.get(oid, c.lsn) {
                    list.push(r.clone());
                }
            }
            if list.is_empty() {
                return Ok(());
            }
            match txn {
                Some(txn) => plugin.truncate(out, txn, c.lsn, &list, &flags),
                None => plugin.stream_truncate(out, top, c.xid, c.lsn, &list, &flags),
            }
        }
        kind => {
            let (rel, bufs) = rels.get_with_rows(c.rel, c.lsn)?;
            let row_kind = match kind {
                ChangeKind::Insert => RowKind::Insert,
                ChangeKind::Update => RowKind::Update,
                _ => RowKind::Delete,
            };
            if !plugin.wants_change(rel, c.lsn, row_kind, !c.old.is_empty())? {
                return Ok(());
            }
            let row = row_data(rel, kind, c, bufs)?;
            let r = match txn {
                Some(txn) => plugin.change(out, txn, c.lsn, rel, &row),
                None => plugin.stream_change(out, top, c.xid, c.lsn, rel, &row),
            };
            bufs.recycle(row);
            r
        }
    }
}

/// Routes the reorder buffer's stream callbacks to the plugin's.
///
/// A block's start is told the plugin at its first change, with that change's LSN, and its
/// stop with the last change's, as PostgreSQL's `ReorderBufferProcessTXN` does (a block with
/// no change is not told at all). The (sub)transactions whose changes went out are noted per
/// top-level transaction: PostgreSQL marks a subtransaction streamed only when it had changes
/// in a streamed block, and only those hear a stream abort.
struct PluginSink<'s, 'a, 'o> {
    rels: &'s mut Relations<'a>,
    plugin: &'s mut dyn OutputPlugin,
    out: &'s mut Output<'o>,
    streamed: &'s mut FxHashMap<Xid, FxHashSet<Xid>>,
    /// The end of the record being decoded (a stream abort's LSN), and its time if it is a
    /// transaction's end.
    rec_end: Lsn,
    rec_time_us: i64,
    opened: bool,
    last_lsn: Lsn,
}

impl StreamSink for PluginSink<'_, '_, '_> {
    fn stream_start(&mut self, _top: Xid, _first_lsn: Lsn) -> Result<()> {
        self.opened = false;
        Ok(())
    }

    fn stream_change(&mut self, top: Xid, c: &Change<'_>) -> Result<()> {
        if !self.opened {
            self.plugin.stream_start(self.out, top, c.lsn)?;
            self.opened = true;
        }
        self.last_lsn = c.lsn;
        self.streamed.entry(top).or_default().insert(c.xid);
        emit(self.rels, self.plugin, self.out, top, None, c)
    }

    fn stream_stop(&mut self, top: Xid) -> Result<()> {
        if std::mem::take(&mut self.opened) {
            self.plugin.stream_stop(self.out, top, self.last_lsn)?;
        }
        Ok(())
    }

    fn stream_abort(&mut self, top: Xid, sub: Xid) -> Result<()> {
        if self.streamed.get_mut(&top).is_some_and(|s| s.remove(&sub)) {
            self.plugin.stream_abort_at(self.out, top, sub, self.rec_end, self.rec_time_us)?;
        }
        Ok(())
    }
}

/// A decoding session over the WAL from a slot's `restart_lsn`.
///
/// # Streaming
///
/// When the plugin streams ([`OutputPlugin::streaming`]), the reorder buffer streams its
/// eviction victims instead of spilling them, from the first record at or past the slot's
/// `confirmed_flush` on (PostgreSQL's `ReorderBufferCanStartStreaming`: no streaming while
/// re-reading what was already consumed; the engine's start point is consistent at once, so
/// that is the only condition). A transaction streamed before it committed ends with its
/// remaining changes as one more block and a stream commit; one that rolls back ends with a
/// stream abort for each subtransaction whose changes went out, then for itself. A ROLLBACK
/// TO after some of the subtransaction's changes went out is a stream abort of that
/// subtransaction.
pub struct LogicalDecoder<'a> {
    rb: ReorderBuffer,
    start: Start,
    confirmed_flush: Lsn,
    rels: Relations<'a>,
    /// Each open top-level transaction's first decoded change (its BEGIN's LSN).
    first_lsn: FxHashMap<Xid, Lsn>,
    /// Whether the buffer streams yet, and per streamed top-level transaction the
    /// (sub)transactions whose changes were streamed.
    streaming: bool,
    streamed: FxHashMap<Xid, FxHashSet<Xid>>,
    /// What a historic catalog snapshot needs, and the open top-level transactions that wrote
    /// catalog rows it covers (every catalog relation but `pg_class`).
    history: CatalogHistory,
    catalog_writers: FxHashSet<Xid>,
    /// `Some(two_phase_at)` when prepared transactions are decoded at PREPARE (see "Two-phase
    /// decoding" above), and the PREPAREs read of transactions decoded that way.
    two_phase_at: Option<Lsn>,
    prepared: FxHashMap<Xid, Prepared>,
    /// Committed (or, decoding two-phase, prepared) transactions handed over.
    pub transactions: u64,
}

/// A PREPARE the decoder read, kept until its COMMIT or ROLLBACK PREPARED.
struct Prepared {
    gid: String,
    /// The PREPARE record's start, end and time, and the transaction's first change.
    txn: TxnInfo,
}

/// Whether [`LogicalDecoder::process`] reads the body of a record of this resource manager
/// and info: the WAL reader leaves the others unread ([`crate::wal::WalReader::read_bodies_of`]).
/// B-tree, pruning, freezing and visibility-map records, checkpoints and page images are
/// what a decoder passes over; rows, transaction ends, messages and running transactions are
/// what it reads. Every resource manager is named, so that a new one is decided on here.
pub fn reads_body(rmgr: Rmgr, info: u8) -> bool {
    match rmgr {
        Rmgr::Heap | Rmgr::Xact | Rmgr::LogicalMsg | Rmgr::Standby => true,
        Rmgr::Heap2 => info & 0xF0 == XLOG_HEAP2_MULTI_INSERT,
        Rmgr::Xlog | Rmgr::Clog | Rmgr::Storage | Rmgr::Btree | Rmgr::Catalog => false,
    }
}

impl<'a> LogicalDecoder<'a> {
    pub fn new(rb: ReorderBuffer, confirmed_flush: Lsn, catalog: &'a dyn RelationLookup) -> LogicalDecoder<'a> {
        LogicalDecoder {
            rb,
            start: Start::Waiting,
            confirmed_flush,
            rels: Relations {
                catalog,
                learned: FxHashMap::default(),
                known: FxHashMap::default(),
                by_filenode: FxHashMap::default(),
                rows: RowBuffers::default(),
            },
            first_lsn: FxHashMap::default(),
            two_phase_at: None,
            prepared: FxHashMap::default(),
            streaming: false,
            streamed: FxHashMap::default(),
            history: CatalogHistory::default(),
            catalog_writers: FxHashSet::default(),
            transactions: 0,
        }
    }

    /// Decodes prepared transactions at their PREPARE from `two_phase_at` on (the slot's;
    /// see "Two-phase decoding" above). The caller checks the plugin can
    /// ([`OutputPlugin::two_phase`]).
    pub fn set_two_phase(&mut self, two_phase_at: Lsn) {
        self.two_phase_at = Some(two_phase_at);
    }

    /// The reorder buffer's counters (`pg_stat_replication_slots`).
    pub fn stats(&self) -> super::reorderbuffer::ReorderStats {
        self.rb.stats()
    }

    /// Decodes one record, handing committed transactions to `plugin`.
    pub fn process(&mut self, rec: &DecodedRecord, plugin: &mut dyn OutputPlugin, out: &mut Output) -> Result<()> {
        if rec.rmgr == Rmgr::Standby && rec.info == XLOG_RUNNING_XACTS {
            if matches!(self.start, Start::Waiting) {
                let rx = RunningXacts::decode(&rec.main_data, rec.lsn)?;
                self.history.start(&rx);
                plugin.catalog_history(&self.history)?;
                self.start = Start::Decoding { skip: rx.xids.into_iter().collect() };
            }
            return Ok(());
        }
        let Start::Decoding { skip } = &self.start else {
            return Ok(());
        };
        if !self.streaming && plugin.streaming() && rec.lsn >= self.confirmed_flush {
            self.streaming = true;
            self.rb.set_streaming(true);
        }
        let top = if rec.toplevel_xid != Xid::INVALID { rec.toplevel_xid } else { rec.xid };
        let skipped = skip.contains(&top);
        match rec.rmgr {
            Rmgr::Heap if rec.info & 0xF0 == XLOG_HEAP_TRUNCATE => {
                if skipped {
                    return Ok(());
                }
                self.queue_truncate(top, rec, plugin, out)
            }
            Rmgr::Heap | Rmgr::Heap2 => {
                if let Some(rel) = insert_rel(rec).filter(|r| r.0 >= FIRST_USER_OID) {
                    // Rows inserted into a user relation: the hot path, queued without
                    // allocating per row.
                    if skipped {
                        return Ok(());
                    }
                    let rel = self.rels.table_of(rel);
                    return self.queue_inserts(top, rec, rel, plugin, out);
                }
                if let Some(row) = logged_row_change(rec)?.filter(|r| r.rel.0 >= FIRST_USER_OID) {
                    // A user relation's row updated or deleted: as hot, and queued as it
                    // was logged, likewise.
                    if skipped {
                        return Ok(());
                    }
                    let rel = self.rels.table_of(row.rel);
                    return self.queue_logged_row(top, rec, rel, &row, plugin, out);
                }
                // What is left is a catalog's row, which is learned from and never sent.
                let Some(change) = decode_row_change(rec)? else { return Ok(()) };
                for oid in self.learn_catalog(&change)? {
                    plugin.relation_changed(oid);
                }
                let rel = match &change {
                    RowChange::Insert { rel, .. } | RowChange::Update { rel, .. } | RowChange::Delete { rel, .. } => {
                        *rel
                    }
                };
                if rel.0 < FIRST_USER_OID && rel != catalog::PG_CLASS_OID {
                    self.catalog_writers.insert(top);
                }
                Ok(())
            }
            Rmgr::LogicalMsg => {
                let m = LogicalMessage::decode(&rec.main_data, rec.lsn)?;
                if !m.transactional {
                    if rec.lsn >= self.confirmed_flush {
                        plugin.message(out, None, rec.lsn, false, &m.prefix, &m.content)?;
                    }
                    return Ok(());
                }
                if skipped {
                    return Ok(());
                }
                self.first_lsn.entry(top).or_insert(rec.lsn);
                let c = Change {
                    lsn: rec.lsn,
                    xid: rec.xid,
                    kind: ChangeKind::Message,
                    rel: Oid(0),
                    old: m.prefix.as_bytes(),
                    new: &m.content,
                };
                let (rb, mut sink) = self.sink(plugin, out, rec.end_lsn);
                rb.queue_change(top, &c, &mut sink)
            }
            Rmgr::Xact => self.end_of_xact(rec, skipped, plugin, out),
            _ => Ok(()),
        }
    }

    /// The buffer, and a sink streaming into `plugin` (borrowing the decoder's other parts).
    fn sink<'s, 'o>(
        &'s mut self,
        plugin: &'s mut dyn OutputPlugin,
        out: &'s mut Output<'o>,
        rec_end: Lsn,
    ) -> (&'s mut ReorderBuffer, PluginSink<'s, 'a, 'o>) {
        let sink = PluginSink {
            rels: &mut self.rels,
            plugin,
            out,
            streamed: &mut self.streamed,
            rec_end,
            rec_time_us: 0,
            opened: false,
            last_lsn: Lsn::INVALID,
        };
        (&mut self.rb, sink)
    }

    /// Learns relations from `pg_class` rows written in the WAL: a table's row (its name,
    /// columns and replica identity; an ALTER … REPLICA IDENTITY writes a new one), and its
    /// primary key's index row (the key columns). What a row does not say is kept from what
    /// was known of the relation before.
    /// Returns the relations whose description changed.
    fn learn_catalog(&mut self, change: &RowChange) -> Result<Vec<Oid>> {
        let mut changed = Vec::new();
        let (rel, tuples): (Oid, Vec<&Vec<u8>>) = match change {
            RowChange::Insert { rel, tuples } => (*rel, tuples.iter().collect()),
            RowChange::Update { rel, new, .. } => (*rel, vec![new]),
            RowChange::Delete { .. } => return Ok(changed),
        };
        if rel != catalog::PG_CLASS_OID {
            return Ok(changed);
        }
        for t in tuples {
            let values = deform_tuple(&catalog::pg_class_schema(), t)
                .map_err(|e| Error::invalid(format!("logical decoding: a pg_class row in the WAL: {e}")))?;
            let row = ClassRow::from_values(&values, Tid::default())?;
            let (oid, key) = match (&row.kind, &row.index) {
                (RelKind::Table, _) => {
                    if row.oid.0 >= FIRST_USER_OID {
                        self.rels.by_filenode.insert(row.relfilenode, row.oid);
                    }
                    (row.oid, None)
                }
                (RelKind::Index, Some(ix)) if ix.primary => (ix.table, Some(ix.columns.clone())),
                _ => continue,
            };
            if oid.0 < FIRST_USER_OID {
                continue;
            }
            let before = self.rels.learned.get(&oid).cloned().or_else(|| self.rels.catalog.relation(oid).map(Arc::new));
            let info = match key {
                Some(key_columns) => match before {
                    Some(b) => RelInfo { key_columns, epoch: RelInfo::next_epoch(), ..(*b).clone() },
                    None => continue,
                },
                None => RelInfo {
                    epoch: RelInfo::next_epoch(),
                    oid,
                    namespace: "public".into(),
                    name: row.relname,
                    schema: row.schema,
                    missing: row.missing,
                    replica_identity: row.replica_identity,
                    key_columns: before.map(|b| b.key_columns.clone()).unwrap_or_default(),
                },
            };
            self.rels.learned.insert(oid, Arc::new(info));
            self.rels.known.remove(&oid);
            changed.push(oid);
        }
        Ok(changed)
    }

    /// Queues the rows an INSERT or MULTI_INSERT record of user relation `rel` inserts, each in
    /// its logged form as a slice of the record (a hot path: once per row, nothing copied).
    fn queue_inserts(
        &mut self,
        top: Xid,
        rec: &DecodedRecord,
        rel: Oid,
        plugin: &mut dyn OutputPlugin,
        out: &mut Output,
    ) -> Result<()> {
        self.first_lsn.entry(top).or_insert(rec.lsn);
        let (rb, mut sink) = self.sink(plugin, out, rec.end_lsn);
        for_each_inserted_tuple(rec, &mut |t| {
            let c = Change { lsn: rec.lsn, xid: rec.xid, kind: ChangeKind::Insert, rel, old: &[], new: t };
            rb.queue_change(top, &c, &mut sink)
        })
    }

    /// Queues the update or delete a record logged for user relation `rel`, its rows as
    /// slices of the record (nothing copied).
    fn queue_logged_row(
        &mut self,
        top: Xid,
        rec: &DecodedRecord,
        rel: Oid,
        row: &LoggedRowChange<'_>,
        plugin: &mut dyn OutputPlugin,
        out: &mut Output,
    ) -> Result<()> {
        self.first_lsn.entry(top).or_insert(rec.lsn);
        let kind = if row.new.is_some() { ChangeKind::Update } else { ChangeKind::Delete };
        let c = Change { lsn: rec.lsn, xid: rec.xid, kind, rel, old: row.old, new: row.new.unwrap_or_default() };
        let (rb, mut sink) = self.sink(plugin, out, rec.end_lsn);
        rb.queue_change(top, &c, &mut sink)
    }

    /// A TRUNCATE record becomes one change of its transaction, in its place among the others.
    fn queue_truncate(
        &mut self,
        top: Xid,
        rec: &DecodedRecord,
        plugin: &mut dyn OutputPlugin,
        out: &mut Output,
    ) -> Result<()> {
        let t = TruncateRecord::decode(&rec.main_data, rec.lsn)?;
        let rels: Vec<u8> = t.rels.iter().flat_map(|r| r.0.to_le_bytes()).collect();
        self.first_lsn.entry(top).or_insert(rec.lsn);
        let c =
            Change { lsn: rec.lsn, xid: rec.xid, kind: ChangeKind::Truncate, rel: Oid(0), old: &[t.flags], new: &rels };
        let (rb, mut sink) = self.sink(plugin, out, rec.end_lsn);
        rb.queue_change(top, &c, &mut sink)
    }

    fn end_of_xact(
        &mut self,
        rec: &DecodedRecord,
        skipped: bool,
        plugin: &mut dyn OutputPlugin,
        out: &mut Output,
    ) -> Result<()> {
        let info = rec.info;
        if info == INFO_XACT_PREPARE {
            return self.prepare(rec, skipped, plugin, out);
        }
        if !matches!(info, INFO_XACT_COMMIT | INFO_XACT_ABORT | INFO_XACT_COMMIT_PREPARED | INFO_XACT_ABORT_PREPARED) {
            return Ok(());
        }
        let end = decode_end_record(rec)?;
        if info == INFO_XACT_ABORT && rec.toplevel_xid != Xid::INVALID {
            // ROLLBACK TO: the record's XID and its list are subtransactions of the top. The
            // list goes first, as PostgreSQL's DecodeAbort takes them.
            let subs: Vec<Xid> = end.subxids.iter().copied().chain(std::iter::once(rec.xid)).collect();
            let (rb, mut sink) = self.sink(plugin, out, rec.end_lsn);
            sink.rec_time_us = end.time_us;
            return rb.abort_subxacts(rec.toplevel_xid, &subs, end.savepoint_lsn, &mut sink);
        }
        let top = rec.xid;
        let wrote_catalog = self.catalog_writers.remove(&top);
        if matches!(info, INFO_XACT_COMMIT | INFO_XACT_COMMIT_PREPARED) && (wrote_catalog || skipped) {
            let xids = std::iter::once(top).chain(end.subxids.iter().copied()).collect();
            self.history.commit(rec.lsn, xids);
            plugin.catalog_history(&self.history)?;
        }
        let first = self.first_lsn.remove(&top);
        let streamed_xids = self.streamed.remove(&top);
        // Decoded at its PREPARE (or to be, for one prepared before two_phase_at)?
        let prepared = self.prepared.remove(&top);
        let consumed = skipped || rec.lsn < self.confirmed_flush;
        if let (Some(p), false) = (&prepared, consumed) {
            let finish = TxnInfo { commit_lsn: rec.lsn, end_lsn: rec.end_lsn, commit_time_us: end.time_us, ..p.txn };
            return self.finish_prepared(top, p, &finish, info == INFO_XACT_COMMIT_PREPARED, plugin, out);
        }
        if matches!(info, INFO_XACT_ABORT | INFO_XACT_ABORT_PREPARED) || consumed {
            if self.rb.abort(top)? {
                let streamed_xids = streamed_xids.unwrap_or_default();
                for &sub in end.subxids.iter().filter(|x| streamed_xids.contains(x)) {
                    plugin.stream_abort_at(out, top, sub, rec.end_lsn, end.time_us)?;
                }
                plugin.stream_abort_at(out, top, top, rec.end_lsn, end.time_us)?;
            }
            if let Start::Decoding { skip } = &mut self.start {
                skip.remove(&top);
            }
            return Ok(());
        }
        let txn = TxnInfo {
            xid: top,
            first_lsn: first.unwrap_or(rec.lsn),
            commit_lsn: rec.lsn,
            end_lsn: rec.end_lsn,
            commit_time_us: end.time_us,
        };
        if self.rb.is_streamed(top) {
            // The rest as one more block, then the stream commit.
            self.stream_rest(top, &txn, plugin, out)?;
            plugin.stream_commit(out, &txn)?;
        } else {
            plugin.begin(out, &txn)?;
            let rels = &mut self.rels;
            self.rb.commit(top, &mut |c| emit(rels, &mut *plugin, &mut *out, top, Some(&txn), c))?;
            plugin.commit(out, &txn)?;
        }
        self.transactions += 1;
        Ok(())
    }

    /// A streamed transaction's changes not streamed yet, as one last block.
    fn stream_rest(&mut self, top: Xid, txn: &TxnInfo, plugin: &mut dyn OutputPlugin, out: &mut Output) -> Result<()> {
        let (rb, mut sink) = self.sink(plugin, out, txn.end_lsn);
        sink.stream_start(top, txn.first_lsn)?;
        rb.commit(top, &mut |c| sink.stream_change(top, c))?;
        sink.stream_stop(top)
    }

    /// A PREPARE record. Decoding two-phase, the transaction goes to the plugin now (unless
    /// the plugin filters it, or the PREPARE precedes `two_phase_at` or was consumed); the
    /// record is remembered for its COMMIT or ROLLBACK PREPARED either way.
    fn prepare(
        &mut self,
        rec: &DecodedRecord,
        skipped: bool,
        plugin: &mut dyn OutputPlugin,
        out: &mut Output,
    ) -> Result<()> {
        let Some(two_phase_at) = self.two_phase_at else { return Ok(()) };
        if skipped {
            return Ok(());
        }
        let state = TwoPhaseState::decode(&rec.main_data)
            .map_err(|d| Error::corrupt_wal(rec.lsn, format!("PREPARE record: {d}")))?;
        let top = rec.xid;
        if plugin.filter_prepare(top, &state.gid) {
            return Ok(());
        }
        let txn = TxnInfo {
            xid: top,
            first_lsn: self.first_lsn.get(&top).copied().unwrap_or(rec.lsn),
            commit_lsn: rec.lsn,
            end_lsn: rec.end_lsn,
            commit_time_us: state.prepared_at_us,
        };
        let p = Prepared { gid: state.gid, txn };
        if rec.lsn >= two_phase_at {
            self.first_lsn.remove(&top);
            self.streamed.remove(&top);
            if rec.lsn < self.confirmed_flush {
                // Handed over at its PREPARE by an earlier session: only its end is owed.
                self.rb.abort(top)?;
            } else {
                self.emit_prepared(top, &p, plugin, out)?;
            }
        }
        self.prepared.insert(top, p);
        Ok(())
    }

    /// A prepared transaction's changes and its PREPARE (a last stream block and a stream
    /// prepare, if it was streamed).
    fn emit_prepared(&mut self, top: Xid, p: &Prepared, plugin: &mut dyn OutputPlugin, out: &mut Output) -> Result<()> {
        let txn = &p.txn;
        if self.rb.is_streamed(top) {
            self.stream_rest(top, txn, plugin, out)?;
            plugin.stream_prepare(out, txn, &p.gid)?;
        } else {
            plugin.begin_prepare(out, txn, &p.gid)?;
            let rels = &mut self.rels;
            self.rb.commit(top, &mut |c| emit(rels, &mut *plugin, &mut *out, top, Some(txn), c))?;
            plugin.prepare(out, txn, &p.gid)?;
        }
        self.transactions += 1;
        Ok(())
    }

    /// COMMIT PREPARED (`commit`) or ROLLBACK PREPARED of a transaction decoded two-phase;
    /// `finish` carries the record's start, end and time. A transaction prepared before
    /// `two_phase_at` was never handed over: committed, it is now, as a prepared one, before
    /// its COMMIT PREPARED (PostgreSQL's `ReorderBufferFinishPrepared`).
    fn finish_prepared(
        &mut self,
        top: Xid,
        p: &Prepared,
        finish: &TxnInfo,
        commit: bool,
        plugin: &mut dyn OutputPlugin,
        out: &mut Output,
    ) -> Result<()> {
        let never_sent = self.two_phase_at.is_some_and(|at| p.txn.commit_lsn < at);
        if commit {
            if never_sent {
                self.emit_prepared(top, p, plugin, out)?;
            }
            plugin.commit_prepared(out, finish, &p.gid)
        } else {
            self.rb.abort(top)?;
            plugin.rollback_prepared(out, finish, &p.gid, p.txn.end_lsn, p.txn.commit_time_us)
        }
    }
}

/// Decodes a queued change's tuples with its relation's schema, into `bufs`' vectors.
fn row_data<'a>(rel: &'a RelInfo, kind: ChangeKind, c: &Change<'a>, bufs: &mut RowBuffers) -> Result<RowData<'a>> {
    let deform = |t: &'a [u8], into: Vec<ValueRef<'static>>| {
        let mut into = emptied(into);
        deform_logged_tuple_refs(&rel.schema, &rel.missing, t, &mut into)
            .map(|()| into)
            .map_err(|e| Error::invalid(format!("logical decoding: a row of \"{}\" at {}: {e}", rel.name, c.lsn)))
    };
    let old = if c.old.is_empty() { None } else { Some(deform(&c.old[1..], std::mem::take(&mut bufs.old))?) };
    let old_whole = c.old.first() == Some(&crate::heap::OLD_TUPLE);
    Ok(match kind {
        ChangeKind::Insert => RowData::Insert { new: deform(c.new, std::mem::take(&mut bufs.new))? },
        ChangeKind::Update => RowData::Update { old, old_whole, new: deform(c.new, std::mem::take(&mut bufs.new))? },
        _ => RowData::Delete { old, old_whole },
    })
}
