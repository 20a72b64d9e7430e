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
//! No historic catalog snapshot is needed: a relation's columns never change under its OID
//! (the engine has no ALTER TABLE … ADD/DROP COLUMN; DROP and CREATE make a new OID), so a
//! change is decoded with the schema it was written under as long as the decoder can find
//! the relation by OID. It looks first at the `pg_class` rows it has read from the WAL (a table
//! created, written and dropped while decoding lagged is still known), then at the catalog it
//! was given. Catalog relations' own changes are not decoded.
//!
//! # Records
//!
//! Heap INSERT / MULTI_INSERT / UPDATE / HOT_UPDATE / DELETE of user relations become changes
//! of their top-level transaction (the record names it when written in a subtransaction);
//! transactional logical messages are changes too, non-transactional ones go out at once.
//! COMMIT (and COMMIT PREPARED) hands the transaction over; ABORT (and ABORT PREPARED) drops
//! it; a ROLLBACK TO's abort record cuts it at its savepoint LSN.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::message::LogicalMessage;
use super::reorderbuffer::{Change, ChangeKind, ReorderBuffer, StreamSink};
use crate::catalog::{self, ClassRow, RelKind};
use crate::error::{Error, Result};
use crate::heap::tuple::{deform_tuple, Schema, Value};
use crate::heap::wal::{decode_row_change, RowChange};
use crate::types::{Lsn, Oid, Tid, Xid};
use crate::wal::{DecodedRecord, Rmgr};
use crate::xact::records::decode_end_record;
use crate::xact::standby::{RunningXacts, XLOG_RUNNING_XACTS};
use crate::xact::{INFO_XACT_ABORT, INFO_XACT_ABORT_PREPARED, INFO_XACT_COMMIT, INFO_XACT_COMMIT_PREPARED};

/// First OID of user relations: below it, the catalog's own.
const FIRST_USER_OID: u32 = 16384;

/// A relation as output plugins name and read it.
#[derive(Clone, Debug, PartialEq)]
pub struct RelInfo {
    pub oid: Oid,
    pub namespace: String,
    pub name: String,
    pub schema: Schema,
}

/// Finds a relation by OID in the current catalog (the decoder's fallback).
pub trait RelationLookup {
    fn relation(&self, oid: Oid) -> Option<RelInfo>;
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

/// One decoded row change.
#[derive(Clone, Debug)]
pub enum RowData {
    Insert {
        new: Vec<Value>,
    },
    /// `old` is the logged old key (non-key columns NULL) or whole old row, if any.
    Update {
        old: Option<Vec<Value>>,
        new: Vec<Value>,
    },
    Delete {
        old: Option<Vec<Value>>,
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
    fn change(&mut self, out: &mut Output, txn: &TxnInfo, lsn: Lsn, rel: &RelInfo, row: &RowData) -> Result<()>;
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
    fn stream_change(&mut self, _out: &mut Output, _top: Xid, _lsn: Lsn, _rel: &RelInfo, _row: &RowData) -> Result<()> {
        Err(missing_stream_callback("stream_change_cb"))
    }
    /// A transactional logical message inside a streamed block.
    fn stream_message(
        &mut self,
        _out: &mut Output,
        _top: Xid,
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
    /// A streamed transaction committed (its last changes went out in one more block just
    /// before).
    fn stream_commit(&mut self, _out: &mut Output, _txn: &TxnInfo) -> Result<()> {
        Err(missing_stream_callback("stream_commit_cb"))
    }
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
#[derive(Default)]
pub struct Output<'s> {
    pub rows: Vec<OutputRow>,
    sink: Option<&'s mut dyn FnMut(OutputRow) -> Result<()>>,
    /// The sink's first error; later rows are dropped until the caller takes it.
    error: Option<Error>,
    /// Rows written (to `rows` or to the sink).
    pub written: u64,
}

impl<'s> Output<'s> {
    /// An output that hands every row to `sink` instead of collecting it.
    pub fn to_sink(sink: &'s mut dyn FnMut(OutputRow) -> Result<()>) -> Output<'s> {
        Output { rows: Vec::new(), sink: Some(sink), error: None, written: 0 }
    }

    pub fn write(&mut self, lsn: Lsn, xid: Xid, data: Vec<u8>) {
        if self.error.is_some() {
            return;
        }
        self.written += 1;
        let row = OutputRow { lsn, xid, data };
        match &mut self.sink {
            Some(sink) => {
                if let Err(e) = sink(row) {
                    self.error = Some(e);
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
}

impl Relations<'_> {
    fn get(&mut self, oid: Oid, lsn: Lsn) -> Result<Arc<RelInfo>> {
        if let Some(r) = self.known.get(&oid) {
            return Ok(r.clone());
        }
        let r =
            self.learned.get(&oid).cloned().or_else(|| self.catalog.relation(oid).map(Arc::new)).ok_or_else(|| {
                Error::invalid(format!(
                "logical decoding: relation with OID {} at {lsn} is not known (dropped before decoding reached its \
                 creation)",
                oid.0
            ))
            })?;
        self.known.insert(oid, r.clone());
        Ok(r)
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
                None => plugin.stream_message(out, top, c.lsn, true, &prefix, c.new),
            }
        }
        ChangeKind::Truncate => Ok(()),
        kind => {
            let rel = rels.get(c.rel, c.lsn)?;
            let row = row_data(&rel, kind, c)?;
            match txn {
                Some(txn) => plugin.change(out, txn, c.lsn, &rel, &row),
                None => plugin.stream_change(out, top, c.lsn, &rel, &row),
            }
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
    /// The end of the record being decoded (a stream abort's LSN).
    rec_end: Lsn,
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
            self.plugin.stream_abort(self.out, top, sub, self.rec_end)?;
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
    /// Committed transactions handed over.
    pub transactions: u64,
}

impl<'a> LogicalDecoder<'a> {
    pub fn new(rb: ReorderBuffer, confirmed_flush: Lsn, catalog: &'a dyn RelationLookup) -> LogicalDecoder<'a> {
        LogicalDecoder {
            rb,
            start: Start::Waiting,
            confirmed_flush,
            rels: Relations { catalog, learned: FxHashMap::default(), known: FxHashMap::default() },
            first_lsn: FxHashMap::default(),
            streaming: false,
            streamed: FxHashMap::default(),
            transactions: 0,
        }
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
            Rmgr::Heap | Rmgr::Heap2 => {
                let Some(change) = decode_row_change(rec)? else { return Ok(()) };
                self.learn_catalog(&change)?;
                if skipped {
                    return Ok(());
                }
                self.queue_row(top, rec, change, plugin, out)
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
            opened: false,
            last_lsn: Lsn::INVALID,
        };
        (&mut self.rb, sink)
    }

    /// Learns relations from `pg_class` rows written in the WAL.
    fn learn_catalog(&mut self, change: &RowChange) -> Result<()> {
        let (rel, tuples): (Oid, Vec<&Vec<u8>>) = match change {
            RowChange::Insert { rel, tuples } => (*rel, tuples.iter().collect()),
            RowChange::Update { rel, new, .. } => (*rel, vec![new]),
            RowChange::Delete { .. } => return Ok(()),
        };
        if rel != catalog::PG_CLASS_OID {
            return Ok(());
        }
        for t in tuples {
            let values = deform_tuple(&catalog::pg_class_schema(), t)
                .map_err(|e| Error::invalid(format!("logical decoding: a pg_class row in the WAL: {e}")))?;
            let row = ClassRow::from_values(&values, Tid::default())?;
            if row.kind == RelKind::Table && row.oid.0 >= FIRST_USER_OID {
                let info = RelInfo { oid: row.oid, namespace: "public".into(), name: row.relname, schema: row.schema };
                self.rels.learned.insert(row.oid, Arc::new(info));
            }
        }
        Ok(())
    }

    fn queue_row(
        &mut self,
        top: Xid,
        rec: &DecodedRecord,
        change: RowChange,
        plugin: &mut dyn OutputPlugin,
        out: &mut Output,
    ) -> Result<()> {
        let rel = match &change {
            RowChange::Insert { rel, .. } | RowChange::Update { rel, .. } | RowChange::Delete { rel, .. } => *rel,
        };
        if rel.0 < FIRST_USER_OID {
            return Ok(());
        }
        self.first_lsn.entry(top).or_insert(rec.lsn);
        let mut old_buf = Vec::new();
        let mut put_old = |old: &Option<(u8, Vec<u8>)>| {
            if let Some((kind, t)) = old {
                old_buf.push(*kind);
                old_buf.extend_from_slice(t);
            }
        };
        let (rb, mut sink) = self.sink(plugin, out, rec.end_lsn);
        match &change {
            RowChange::Insert { tuples, .. } => {
                for t in tuples {
                    let c = Change { lsn: rec.lsn, xid: rec.xid, kind: ChangeKind::Insert, rel, old: &[], new: t };
                    rb.queue_change(top, &c, &mut sink)?;
                }
                Ok(())
            }
            RowChange::Update { old, new, .. } => {
                put_old(old);
                let c = Change { lsn: rec.lsn, xid: rec.xid, kind: ChangeKind::Update, rel, old: &old_buf, new };
                rb.queue_change(top, &c, &mut sink)
            }
            RowChange::Delete { old, .. } => {
                put_old(old);
                let c = Change { lsn: rec.lsn, xid: rec.xid, kind: ChangeKind::Delete, rel, old: &old_buf, new: &[] };
                rb.queue_change(top, &c, &mut sink)
            }
        }
    }

    fn end_of_xact(
        &mut self,
        rec: &DecodedRecord,
        skipped: bool,
        plugin: &mut dyn OutputPlugin,
        out: &mut Output,
    ) -> Result<()> {
        let info = rec.info;
        if !matches!(info, INFO_XACT_COMMIT | INFO_XACT_ABORT | INFO_XACT_COMMIT_PREPARED | INFO_XACT_ABORT_PREPARED) {
            return Ok(());
        }
        let end = decode_end_record(rec)?;
        if info == INFO_XACT_ABORT && rec.toplevel_xid != Xid::INVALID {
            // ROLLBACK TO: the record's XID and its list are subtransactions of the top. The
            // list goes first, as PostgreSQL's DecodeAbort takes them.
            let subs: Vec<Xid> = end.subxids.iter().copied().chain(std::iter::once(rec.xid)).collect();
            let (rb, mut sink) = self.sink(plugin, out, rec.end_lsn);
            return rb.abort_subxacts(rec.toplevel_xid, &subs, end.savepoint_lsn, &mut sink);
        }
        let top = rec.xid;
        let first = self.first_lsn.remove(&top);
        let streamed_xids = self.streamed.remove(&top);
        if matches!(info, INFO_XACT_ABORT | INFO_XACT_ABORT_PREPARED) || skipped || rec.lsn < self.confirmed_flush {
            if self.rb.abort(top)? {
                let streamed_xids = streamed_xids.unwrap_or_default();
                for &sub in end.subxids.iter().filter(|x| streamed_xids.contains(x)) {
                    plugin.stream_abort(out, top, sub, rec.end_lsn)?;
                }
                plugin.stream_abort(out, top, top, rec.end_lsn)?;
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
            let (rb, mut sink) = self.sink(plugin, out, rec.end_lsn);
            sink.stream_start(top, txn.first_lsn)?;
            rb.commit(top, &mut |c| sink.stream_change(top, c))?;
            sink.stream_stop(top)?;
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
}

/// Decodes a queued change's tuples with its relation's schema.
fn row_data(rel: &RelInfo, kind: ChangeKind, c: &Change<'_>) -> Result<RowData> {
    let deform = |t: &[u8]| {
        deform_tuple(&rel.schema, t)
            .map_err(|e| Error::invalid(format!("logical decoding: a row of \"{}\" at {}: {e}", rel.name, c.lsn)))
    };
    let old = if c.old.is_empty() { None } else { Some(deform(&c.old[1..])?) };
    Ok(match kind {
        ChangeKind::Insert => RowData::Insert { new: deform(c.new)? },
        ChangeKind::Update => RowData::Update { old, new: deform(c.new)? },
        _ => RowData::Delete { old },
    })
}
