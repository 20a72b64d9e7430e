//! `pg_logical_slot_get_changes` and `pg_logical_slot_peek_changes` on the [`Database`]: a
//! decoding session over a slot (see [`crate::decode::logical`]). Both collect the session's
//! rows; [`Database::decode_slot_into`] hands them to a sink one by one instead, so that a
//! consumer (`settle decode`) never holds more than one row of output.

use std::sync::Arc;

use super::{Database, Inner};
use crate::catalog::Catalog;
use crate::decode::logical::{LogicalDecoder, Output, OutputPlugin, OutputRow, RelInfo, RelationLookup};
use crate::decode::null::NullOutput;
use crate::decode::pgoutput::PgOutput;
use crate::decode::reorderbuffer::{ReorderBuffer, ReorderBufferConfig, ReorderStats, XidStatus};
use crate::decode::slot;
use crate::decode::slot::RunningXactsAt;
use crate::decode::test_decoding::TestDecoding;
use crate::error::{Error, Result};
use crate::heap::HeapEnv;
use crate::types::{Lsn, Oid, Xid};
use crate::wal::{DecodedRecord, Rmgr, WalReader};
use crate::xact::standby::{RunningXacts, XLOG_RUNNING_XACTS};

use super::slots::RunningXactsSeen;

/// Where a session stops: at the first record ending at or past `upto_lsn`, or once
/// `upto_nchanges` rows were produced (after the record that produced them), or at the end
/// of the WAL flushed when it began.
#[derive(Clone, Copy, Debug, Default)]
pub struct DecodeLimits {
    pub upto_lsn: Option<Lsn>,
    pub upto_nchanges: Option<usize>,
    /// A consumer's start point (`START_REPLICATION SLOT s LOGICAL X/Y`): what committed
    /// before it is skipped as if confirmed, when it lies past the slot's
    /// `confirmed_flush_lsn` (PostgreSQL's `start_decoding_at`). The slot is not moved.
    pub start_lsn: Option<Lsn>,
}

/// What a session produced and how far it read.
#[derive(Debug)]
pub struct DecodeResult {
    pub rows: Vec<OutputRow>,
    /// The end of the last record read.
    pub end_lsn: Lsn,
    pub stats: ReorderStats,
}

/// What a session that handed its rows to a sink produced and how far it read.
#[derive(Debug)]
pub struct DecodeSummary {
    /// Rows handed to the sink.
    pub rows: u64,
    /// The end of the last record read.
    pub end_lsn: Lsn,
    pub stats: ReorderStats,
}

/// The CLOG, for the reorder buffer: a transaction it holds that the CLOG already says rolled
/// back (the decoder lags the writers, so it often knows before reading the abort record) is
/// dropped instead of spilled, as PostgreSQL 16's `ReorderBufferCheckAndTruncateAbortedTXN`
/// does. Only an aborted verdict counts: a running or committed transaction is kept, and an
/// error reading the CLOG keeps it too. Given to the buffer only when the plugin does not
/// stream and prepared transactions are not decoded at PREPARE: with streaming, a transaction
/// that rolls back is streamed and then stream-aborted as PostgreSQL 15 does (and as
/// `tests/decoding.rs` specifies); dropping it there too would be PostgreSQL 16's behaviour, a
/// change of what consumers see; and a prepared transaction rolled back later is still handed
/// over at its PREPARE.
struct ClogStatus(Arc<Inner>);

impl XidStatus for ClogStatus {
    fn is_aborted(&self, xid: Xid) -> bool {
        matches!(self.0.xact.status(xid), Ok(crate::xact::XidStatus::Aborted))
    }
}

/// The current catalog, then the versions of `pg_class` rows still on disk (a table dropped
/// since: its row stays while the slot's `catalog_xmin` holds VACUUM back).
struct CatalogLookup<'a>(&'a Catalog, HeapEnv<'a>);

impl RelationLookup for CatalogLookup<'_> {
    fn relation(&self, oid: Oid) -> Option<RelInfo> {
        if let Some(e) = self.0.get_by_oid(oid) {
            let (replica_identity, key_columns) = e.rel.replica_identity.read().clone();
            return Some(RelInfo {
                epoch: RelInfo::next_epoch(),
                oid,
                namespace: "public".into(),
                name: e.rel.name.clone(),
                schema: e.rel.schema.clone(),
                missing: e.rel.missing.clone(),
                replica_identity,
                key_columns,
            });
        }
        // An error reading pg_class leaves the relation unknown, which the decoder reports.
        // (Its primary key's index row is not looked for: the key is left unknown.)
        let row = super::startup::find_table_row_any_version(&self.1, oid).ok()??;
        Some(RelInfo {
            epoch: RelInfo::next_epoch(),
            oid,
            namespace: "public".into(),
            name: row.relname,
            schema: row.schema,
            missing: row.missing,
            replica_identity: row.replica_identity,
            key_columns: Vec::new(),
        })
    }

    fn table_of_filenode(&self, relfilenode: Oid) -> Option<Oid> {
        if let Some(e) = self.0.tables().into_iter().find(|e| e.rel.relfilenode == relfilenode) {
            return Some(e.rel.oid);
        }
        super::startup::find_table_by_filenode_any_version(&self.1, relfilenode).ok().flatten()
    }
}

impl Database {
    /// `pg_logical_slot_get_changes(slot, upto_lsn, upto_nchanges, options…)`: decodes from the
    /// slot's position and confirms what was read (the slot advances; a second call returns
    /// what came after).
    pub fn logical_slot_get_changes(
        &self,
        slot_name: &str,
        limits: DecodeLimits,
        options: &[(String, Option<String>)],
    ) -> Result<DecodeResult> {
        self.decode_slot(slot_name, limits, options, true)
    }

    /// `pg_logical_slot_peek_changes`: as [`Database::logical_slot_get_changes`], leaving the
    /// slot where it was.
    pub fn logical_slot_peek_changes(
        &self,
        slot_name: &str,
        limits: DecodeLimits,
        options: &[(String, Option<String>)],
    ) -> Result<DecodeResult> {
        self.decode_slot(slot_name, limits, options, false)
    }

    /// A decoding session over slot `slot_name` that hands each output row to `sink` as the
    /// plugin writes it (a streaming `pg_logical_slot_get_changes` when `confirm`, `peek`
    /// otherwise). `upto_nchanges` counts rows handed over. A sink's error stops the session:
    /// nothing is confirmed and its counters are not added to the slot's.
    pub fn decode_slot_into(
        &self,
        slot_name: &str,
        limits: DecodeLimits,
        options: &[(String, Option<String>)],
        confirm: bool,
        sink: &mut dyn FnMut(&OutputRow) -> Result<()>,
    ) -> Result<DecodeSummary> {
        let d = self.decodable_slot(slot_name)?;
        let mut plugin = self.output_plugin(&d, options)?;
        let mut out = Output::to_sink(sink);
        let (end_lsn, stats) = self.decode_session(slot_name, limits, &mut *plugin, confirm, &mut out, None)?;
        Ok(DecodeSummary { rows: out.written, end_lsn, stats })
    }

    /// A decoding session over `slot_name` into `plugin` (whatever plugin the slot names):
    /// for tests and embedders that consume structured changes rather than a plugin's rows.
    /// `limits.upto_nchanges` counts the rows the plugin writes to its [`Output`]; with
    /// `confirm` the slot advances to the end of the last record read, as
    /// [`Database::logical_slot_get_changes`] does.
    pub fn decode_slot_with(
        &self,
        slot_name: &str,
        limits: DecodeLimits,
        plugin: &mut dyn OutputPlugin,
        confirm: bool,
    ) -> Result<DecodeResult> {
        let mut out = Output::default();
        let (end_lsn, stats) = self.decode_session(slot_name, limits, plugin, confirm, &mut out, None)?;
        Ok(DecodeResult { rows: out.rows, end_lsn, stats })
    }

    fn decode_slot(
        &self,
        slot_name: &str,
        limits: DecodeLimits,
        options: &[(String, Option<String>)],
        confirm: bool,
    ) -> Result<DecodeResult> {
        let d = self.decodable_slot(slot_name)?;
        let mut plugin = self.output_plugin(&d, options)?;
        self.decode_slot_with(slot_name, limits, &mut *plugin, confirm)
    }

    /// Gives the output plugins the columns' SQL types (a server that keeps them above the
    /// engine's storage types registers them once; see [`crate::decode::sqltypes`]).
    pub fn set_column_types(&self, types: Arc<dyn crate::decode::sqltypes::ColumnTypes>) {
        *self.inner.column_types.write() = Some(types);
    }

    /// The plugin slot `d` names, with `options`.
    fn output_plugin(&self, d: &slot::SlotData, options: &[(String, Option<String>)]) -> Result<Box<dyn OutputPlugin>> {
        let types = self.inner.column_types.read().clone();
        Ok(match d.plugin.as_str() {
            "test_decoding" => Box::new(TestDecoding::new(options)?.with_column_types(types)),
            "pgoutput" => Box::new(
                PgOutput::new(options, Box::new(super::publication::DbPublications(self.inner.clone())))?
                    .with_column_types(types),
            ),
            "null" => Box::new(NullOutput::new(options)?),
            other => {
                return Err(Error::invalid(format!(
                    "could not access file \"{other}\": No such file or directory (output plugins: test_decoding, \
                     pgoutput, null)"
                )))
            }
        })
    }

    /// A decoding session that does not end at the end of the WAL but follows it, as a WAL
    /// sender does: the same session as [`Database::decode_slot_into`] (without confirming),
    /// reading only WAL already flushed, and after each pass to the flushed end calling
    /// `follow` with the position decoded to; it goes on (reading what was flushed meanwhile,
    /// with the reorder buffer and the decoder kept) while `follow` returns `true`. `follow`
    /// is where the caller waits when nothing moved. The slot is not moved; its
    /// `pg_stat_replication_slots` counters are added after every pass.
    pub fn decode_slot_follow(
        &self,
        slot_name: &str,
        limits: DecodeLimits,
        options: &[(String, Option<String>)],
        sink: &mut dyn FnMut(&OutputRow) -> Result<()>,
        follow: &mut dyn FnMut(Lsn) -> Result<bool>,
    ) -> Result<DecodeSummary> {
        let d = self.decodable_slot(slot_name)?;
        let mut plugin = self.output_plugin(&d, options)?;
        let mut out = Output::to_sink(sink);
        let (end_lsn, stats) = self.decode_session(slot_name, limits, &mut *plugin, false, &mut out, Some(follow))?;
        Ok(DecodeSummary { rows: out.written, end_lsn, stats })
    }

    /// One session: reads the WAL from the slot's `restart_lsn`, `plugin` writing to `out`; to
    /// the end of the WAL written when it began, or following the WAL when `follow` is given
    /// (see [`Database::decode_slot_follow`]).
    fn decode_session(
        &self,
        slot_name: &str,
        limits: DecodeLimits,
        plugin: &mut dyn OutputPlugin,
        confirm: bool,
        out: &mut Output<'_>,
        mut follow: Option<&mut dyn FnMut(Lsn) -> Result<bool>>,
    ) -> Result<(Lsn, ReorderStats)> {
        let inner = &self.inner;
        let d = self.decodable_slot(slot_name)?;
        let two_phase = plugin.two_phase() && (d.two_phase || plugin.two_phase_requested());
        let d = if two_phase && !d.two_phase { self.enable_slot_two_phase(slot_name)? } else { d };
        // A one-off session reads all the WAL written when it began; a follower reads what is
        // durable, pass by pass, and never forces a flush.
        if follow.is_none() {
            inner.wal.flush(inner.wal.insert_lsn())?;
        }
        let mut end_of_wal = inner.wal.flushed_lsn();
        let cfg = ReorderBufferConfig {
            memory_limit: inner.config.get().logical_decoding_work_mem_bytes,
            ..ReorderBufferConfig::default()
        };
        let spill_dir = slot::slot_dir(&inner.dir).join(slot_name);
        let mut rb = ReorderBuffer::new(cfg, inner.fs.clone(), &spill_dir)?;
        if !plugin.streaming() && !two_phase {
            // Streaming plugins still get PostgreSQL 15's stream of an aborted transaction
            // and its stream abort (see `ClogStatus`); decoding two-phase, a transaction the
            // CLOG says rolled back may be one prepared and then rolled back, which is handed
            // over at its PREPARE all the same.
            rb.set_xid_status(Arc::new(ClogStatus(self.inner.clone())));
        }
        let lookup = CatalogLookup(&inner.catalog, inner.env());
        let skip_before = limits.start_lsn.map_or(d.confirmed_flush, |s| s.max(d.confirmed_flush));
        let mut decoder = LogicalDecoder::new(rb, skip_before, &lookup);
        if two_phase {
            decoder.set_two_phase(d.two_phase_at);
        }
        let mut end_lsn = skip_before;
        let mut seen = RunningXactsSeen { from: d.restart_lsn, to: d.restart_lsn, records: Vec::new() };
        // One record decoded into again and again: nothing allocated per record.
        let mut rec = DecodedRecord::empty();
        // Where the next pass starts reading: the end of the last record decoded.
        let mut pos = d.restart_lsn;
        // The counters already added to the slot's (a follower adds them pass by pass).
        let mut reported = ReorderStats::default();
        'passes: loop {
            let mut reader = WalReader::new(inner.fs.clone(), inner.wal.dir(), pos, inner.wal.segment_size());
            reader.skip_page_images();
            reader.read_bodies_of(crate::decode::logical::reads_body);
            while reader.next_into(&mut rec)? {
                // Nothing that is not durable yet: a record ending past the flushed end could
                // be a commit a crash takes back.
                if rec.lsn >= end_of_wal || rec.end_lsn > end_of_wal {
                    break;
                }
                if rec.rmgr == Rmgr::Standby && rec.info == XLOG_RUNNING_XACTS {
                    let running = RunningXacts::decode(&rec.main_data, rec.lsn)?;
                    seen.records.push(RunningXactsAt { lsn: rec.lsn, end: rec.end_lsn, running });
                }
                seen.to = rec.end_lsn;
                decoder.process(&rec, plugin, out)?;
                if let Some(e) = out.take_error() {
                    return Err(e);
                }
                pos = rec.end_lsn;
                end_lsn = end_lsn.max(rec.end_lsn);
                if limits.upto_lsn.is_some_and(|u| u <= rec.end_lsn)
                    || limits.upto_nchanges.is_some_and(|n| n > 0 && out.written >= n as u64)
                {
                    break 'passes;
                }
            }
            let Some(follow) = follow.as_mut() else { break };
            // A follower's session may last for days: it keeps the records the slot may still
            // restart from (at or after its restart_lsn, which confirmations move) and
            // publishes them, so that advancing the slot over what it read reads no WAL.
            let restart = self.replication_slot(slot_name).map_or(seen.from, |d| d.restart_lsn).min(seen.to);
            if restart > seen.from {
                seen.records.retain(|r| r.lsn >= restart);
                seen.from = restart;
            }
            *inner.running_xacts_seen.lock() = Some(seen.clone());
            let counted = decoder.stats();
            super::pgstat::add_slot_stats_since(inner, slot_name, &counted, &reported);
            reported = counted;
            if !follow(end_lsn)? {
                break;
            }
            end_of_wal = inner.wal.flushed_lsn();
        }
        let stats = decoder.stats();
        drop(decoder);
        *inner.running_xacts_seen.lock() = Some(seen);
        // Peeking counts too, as in PostgreSQL: the work was done.
        super::pgstat::add_slot_stats_since(inner, slot_name, &stats, &reported);
        if confirm && end_lsn > d.confirmed_flush {
            self.replication_slot_advance(slot_name, end_lsn)?;
        }
        Ok((end_lsn, stats))
    }

    /// The slot, if it exists and is not invalidated.
    fn decodable_slot(&self, slot_name: &str) -> Result<slot::SlotData> {
        let d = self
            .replication_slot(slot_name)
            .ok_or_else(|| Error::NotFound(format!("replication slot \"{slot_name}\" does not exist")))?;
        if d.invalidated {
            return Err(Error::invalid(format!(
                "can no longer get changes from replication slot \"{slot_name}\"; DETAIL: This slot has been \
                 invalidated because it exceeded the maximum reserved size."
            )));
        }
        Ok(d)
    }
}
