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
}

/// One row of `pg_logical_slot_get_changes`: the LSN it belongs to, the transaction, the
/// plugin's bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputRow {
    pub lsn: Lsn,
    pub xid: Xid,
    pub data: Vec<u8>,
}

/// Where a plugin's rows go.
#[derive(Default)]
pub struct Output {
    pub rows: Vec<OutputRow>,
}

impl Output {
    pub fn write(&mut self, lsn: Lsn, xid: Xid, data: Vec<u8>) {
        self.rows.push(OutputRow { lsn, xid, data });
    }
}

/// Where decoding stands relative to its start point.
enum Start {
    /// No RUNNING_XACTS record read yet: nothing is decoded.
    Waiting,
    /// Decoding; these transactions began before the start point and are skipped.
    Decoding { skip: FxHashSet<Xid> },
}

/// A decoding session over the WAL from a slot's `restart_lsn`.
pub struct LogicalDecoder<'a> {
    rb: ReorderBuffer,
    start: Start,
    confirmed_flush: Lsn,
    catalog: &'a dyn RelationLookup,
    learned: FxHashMap<Oid, Arc<RelInfo>>,
    known: FxHashMap<Oid, Arc<RelInfo>>,
    /// Relations' `pg_class` rows by TID, to forget the right one on a delete.
    first_lsn: FxHashMap<Xid, Lsn>,
    /// Committed transactions handed over, and rows written.
    pub transactions: u64,
}

/// Streaming is not offered by this session's buffer (see [`ReorderBuffer::set_streaming`]).
struct NoStream;

impl StreamSink for NoStream {
    fn stream_start(&mut self, _: Xid, _: Lsn) -> Result<()> {
        Ok(())
    }
    fn stream_change(&mut self, _: Xid, _: &Change<'_>) -> Result<()> {
        Ok(())
    }
    fn stream_stop(&mut self, _: Xid) -> Result<()> {
        Ok(())
    }
    fn stream_abort(&mut self, _: Xid, _: Xid) -> Result<()> {
        Ok(())
    }
}

impl<'a> LogicalDecoder<'a> {
    pub fn new(rb: ReorderBuffer, confirmed_flush: Lsn, catalog: &'a dyn RelationLookup) -> LogicalDecoder<'a> {
        LogicalDecoder {
            rb,
            start: Start::Waiting,
            confirmed_flush,
            catalog,
            learned: FxHashMap::default(),
            known: FxHashMap::default(),
            first_lsn: FxHashMap::default(),
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
        let top = if rec.toplevel_xid != Xid::INVALID { rec.toplevel_xid } else { rec.xid };
        let skipped = skip.contains(&top);
        match rec.rmgr {
            Rmgr::Heap | Rmgr::Heap2 => {
                let Some(change) = decode_row_change(rec)? else { return Ok(()) };
                self.learn_catalog(&change)?;
                if skipped {
                    return Ok(());
                }
                self.queue_row(top, rec, change)
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
                self.rb.queue_change(top, &c, &mut NoStream)
            }
            Rmgr::Xact => self.end_of_xact(rec, skipped, plugin, out),
            _ => Ok(()),
        }
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
                self.learned.insert(row.oid, Arc::new(info));
            }
        }
        Ok(())
    }

    fn queue_row(&mut self, top: Xid, rec: &DecodedRecord, change: RowChange) -> Result<()> {
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
        match &change {
            RowChange::Insert { tuples, .. } => {
                for t in tuples {
                    let c = Change { lsn: rec.lsn, xid: rec.xid, kind: ChangeKind::Insert, rel, old: &[], new: t };
                    self.rb.queue_change(top, &c, &mut NoStream)?;
                }
                Ok(())
            }
            RowChange::Update { old, new, .. } => {
                put_old(old);
                let c = Change { lsn: rec.lsn, xid: rec.xid, kind: ChangeKind::Update, rel, old: &old_buf, new };
                self.rb.queue_change(top, &c, &mut NoStream)
            }
            RowChange::Delete { old, .. } => {
                put_old(old);
                let c = Change { lsn: rec.lsn, xid: rec.xid, kind: ChangeKind::Delete, rel, old: &old_buf, new: &[] };
                self.rb.queue_change(top, &c, &mut NoStream)
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
            // ROLLBACK TO: the record's XID and its list are subtransactions of the top.
            let subs: Vec<Xid> = std::iter::once(rec.xid).chain(end.subxids.iter().copied()).collect();
            return self.rb.abort_subxacts(rec.toplevel_xid, &subs, end.savepoint_lsn, &mut NoStream);
        }
        let top = rec.xid;
        let first = self.first_lsn.remove(&top);
        if matches!(info, INFO_XACT_ABORT | INFO_XACT_ABORT_PREPARED) || skipped || rec.lsn < self.confirmed_flush {
            self.rb.abort(top)?;
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
        plugin.begin(out, &txn)?;
        let known = &mut self.known;
        let learned = &self.learned;
        let catalog = self.catalog;
        let mut emit = |c: &Change<'_>| -> Result<()> {
            match c.kind {
                ChangeKind::Message => {
                    let prefix = String::from_utf8_lossy(c.old);
                    plugin.message(out, Some(&txn), c.lsn, true, &prefix, c.new)
                }
                ChangeKind::Truncate => Ok(()),
                kind => {
                    let rel = match known.get(&c.rel) {
                        Some(r) => r.clone(),
                        None => {
                            let r = learned
                                .get(&c.rel)
                                .cloned()
                                .or_else(|| catalog.relation(c.rel).map(Arc::new))
                                .ok_or_else(|| {
                                    Error::invalid(format!(
                                        "logical decoding: relation with OID {} at {} is not known (dropped before \
                                         decoding reached its creation)",
                                        c.rel.0, c.lsn
                                    ))
                                })?;
                            known.insert(c.rel, r.clone());
                            r
                        }
                    };
                    let row = row_data(&rel, kind, c)?;
                    plugin.change(out, &txn, c.lsn, &rel, &row)
                }
            }
        };
        self.rb.commit(top, &mut emit)?;
        plugin.commit(out, &txn)?;
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
