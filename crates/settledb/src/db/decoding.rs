//! `pg_logical_slot_get_changes` and `pg_logical_slot_peek_changes` on the [`Database`]: a
//! decoding session over a slot (see [`crate::decode::logical`]).

use super::Database;
use crate::catalog::Catalog;
use crate::decode::logical::{LogicalDecoder, Output, OutputPlugin, OutputRow, RelInfo, RelationLookup};
use crate::decode::pgoutput::PgOutput;
use crate::decode::reorderbuffer::{ReorderBuffer, ReorderBufferConfig, ReorderStats};
use crate::decode::slot;
use crate::decode::test_decoding::TestDecoding;
use crate::error::{Error, Result};
use crate::heap::HeapEnv;
use crate::types::{Lsn, Oid};
use crate::wal::WalReader;

/// Where a session stops: at the first record ending at or past `upto_lsn`, or once
/// `upto_nchanges` rows were produced (after the record that produced them), or at the end
/// of the WAL flushed when it began.
#[derive(Clone, Copy, Debug, Default)]
pub struct DecodeLimits {
    pub upto_lsn: Option<Lsn>,
    pub upto_nchanges: Option<usize>,
}

/// What a session produced and how far it read.
#[derive(Debug)]
pub struct DecodeResult {
    pub rows: Vec<OutputRow>,
    /// The end of the last record read.
    pub end_lsn: Lsn,
    pub stats: ReorderStats,
}

/// The current catalog, then the versions of `pg_class` rows still on disk (a table dropped
/// since: its row stays while the slot's `catalog_xmin` holds VACUUM back).
struct CatalogLookup<'a>(&'a Catalog, HeapEnv<'a>);

impl RelationLookup for CatalogLookup<'_> {
    fn relation(&self, oid: Oid) -> Option<RelInfo> {
        if let Some(e) = self.0.get_by_oid(oid) {
            let (replica_identity, key_columns) = e.rel.replica_identity.read().clone();
            return Some(RelInfo {
                oid,
                namespace: "public".into(),
                name: e.rel.name.clone(),
                schema: e.rel.schema.clone(),
                replica_identity,
                key_columns,
            });
        }
        // An error reading pg_class leaves the relation unknown, which the decoder reports.
        // (Its primary key's index row is not looked for: the key is left unknown.)
        let row = super::startup::find_table_row_any_version(&self.1, oid).ok()??;
        Some(RelInfo {
            oid,
            namespace: "public".into(),
            name: row.relname,
            schema: row.schema,
            replica_identity: row.replica_identity,
            key_columns: Vec::new(),
        })
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

    fn decode_slot(
        &self,
        slot_name: &str,
        limits: DecodeLimits,
        options: &[(String, Option<String>)],
        confirm: bool,
    ) -> Result<DecodeResult> {
        let d = self.decodable_slot(slot_name)?;
        let mut plugin: Box<dyn OutputPlugin> = match d.plugin.as_str() {
            "test_decoding" => Box::new(TestDecoding::new(options)?),
            "pgoutput" => {
                Box::new(PgOutput::new(options, Box::new(super::publication::DbPublications(self.inner.clone())))?)
            }
            other => {
                return Err(Error::invalid(format!(
                    "could not access file \"{other}\": No such file or directory (output plugins: test_decoding, \
                     pgoutput)"
                )))
            }
        };
        self.decode_slot_with(slot_name, limits, &mut *plugin, confirm)
    }

    /// A decoding session over `slot_name` into `plugin` (whatever plugin the slot names):
    /// for tests and embedders that consume structured changes rather than a plugin's rows.
    /// `limits.upto_nchanges` counts the rows the plugin writes to its [`crate::decode::logical::Output`];
    /// with `confirm` the slot advances to the end of the last record read, as
    /// [`Database::logical_slot_get_changes`] does.
    pub fn decode_slot_with(
        &self,
        slot_name: &str,
        limits: DecodeLimits,
        plugin: &mut dyn OutputPlugin,
        confirm: bool,
    ) -> Result<DecodeResult> {
        let inner = &self.inner;
        let d = self.decodable_slot(slot_name)?;
        let two_phase = plugin.two_phase() && (d.two_phase || plugin.two_phase_requested());
        let d = if two_phase && !d.two_phase { self.enable_slot_two_phase(slot_name)? } else { d };
        inner.wal.flush(inner.wal.insert_lsn())?;
        let end_of_wal = inner.wal.flushed_lsn();
        let cfg = ReorderBufferConfig {
            memory_limit: inner.config.logical_decoding_work_mem_bytes,
            ..ReorderBufferConfig::default()
        };
        let spill_dir = slot::slot_dir(&inner.dir).join(slot_name);
        let rb = ReorderBuffer::new(cfg, inner.fs.clone(), &spill_dir)?;
        let lookup = CatalogLookup(&inner.catalog, inner.env());
        let mut decoder = LogicalDecoder::new(rb, d.confirmed_flush, &lookup);
        if two_phase {
            decoder.set_two_phase(d.two_phase_at);
        }
        let mut reader = WalReader::new(inner.fs.clone(), inner.wal.dir(), d.restart_lsn, inner.wal.segment_size());
        let mut out = Output::default();
        let mut end_lsn = d.confirmed_flush;
        while let Some(rec) = reader.next()? {
            if rec.lsn >= end_of_wal {
                break;
            }
            decoder.process(&rec, plugin, &mut out)?;
            end_lsn = end_lsn.max(rec.end_lsn);
            if limits.upto_lsn.is_some_and(|u| u <= rec.end_lsn)
                || limits.upto_nchanges.is_some_and(|n| n > 0 && out.rows.len() >= n)
            {
                break;
            }
        }
        let stats = decoder.stats();
        drop(decoder);
        // Peeking counts too, as in PostgreSQL: the work was done.
        super::pgstat::add_slot_stats(inner, slot_name, &stats);
        if confirm && end_lsn > d.confirmed_flush {
            self.replication_slot_advance(slot_name, end_lsn)?;
        }
        Ok(DecodeResult { rows: out.rows, end_lsn, stats })
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
