//! The catalog: tables kept in the engine's own heap (PostgreSQL's `pg_class`).
//!
//! `pg_class` is an ordinary heap relation with the fixed OID and file node 1259; each table,
//! `pg_class` itself included, is one row:
//!
//! | column       | type   | meaning                                                   |
//! |--------------|--------|-----------------------------------------------------------|
//! | oid          | int8   | the table's OID                                           |
//! | relname      | text   | its name (unique)                                         |
//! | relfilenode  | int8   | the file node its forks are stored under                  |
//! | relpages     | int4   | pages, as of the last VACUUM                              |
//! | reltuples    | float8 | live tuples, as of the last VACUUM (-1: never vacuumed)   |
//! | relfrozenxid | int8   | every unfrozen XID in the table is at or after this one   |
//! | relminmxid   | int8   | the same for MultiXact IDs (none exist yet: always 1)     |
//! | fillfactor   | int4   | storage parameter                                         |
//! | relschema    | bytea  | the columns (`Schema::encode`); for an index, its key's   |
//! | relkind      | text   | `r` table, `i` index                                      |
//! | indrelid     | int8   | an index's table (0 for a table)                          |
//! | indkey       | bytea  | an index's key columns: table column numbers, u16 LE      |
//! | indisunique  | bool   | a unique index                                            |
//! | indisprimary | bool   | the table's primary key                                   |
//! | reloptions   | text   | storage parameters, `name=value,...` ([`RelOptions`])      |
//! | relreplident | text   | replica identity: `d` default, `f` full, `n` nothing       |
//! | relmissing   | bytea  | the columns' missing values (`heap::tuple::encode_missing`) |
//!
//! `relreplident` may be null (rows written before it existed): `d`. `relmissing` is null
//! unless `ALTER TABLE ... ADD COLUMN ... DEFAULT` gave a column a missing value (PostgreSQL
//! keeps it per attribute, `pg_attribute.attmissingval`): the value rows written before the
//! column existed read for it. Rows written before `relmissing` existed read it as null.
//!
//! Rows are inserted and deleted by MVCC transactions, so a crash in the middle of CREATE or
//! DROP TABLE leaves the catalog as if it had not started. At startup the catalog is read with
//! a snapshot that sees every committed row, and files on disk no row names (left by a CREATE
//! that did not commit or a DROP whose unlink did not happen) are removed.
//!
//! The in-memory maps (by name and by OID) are the cache every operation uses; DDL takes the
//! catalog's lock, commits, and only then publishes the change in the maps. Tables and
//! indexes share one namespace, as relations do in PostgreSQL; each table entry lists its
//! indexes, and the table's `indexed_columns` (which decide whether an update can be HOT)
//! follow them.
//!
//! The database frozen XID is the minimum `relfrozenxid` over all rows
//! ([`Catalog::database_frozen_xid`]); CLOG is never truncated above it. It is kept
//! incrementally in an indexed min-heap that changes where relfrozenxid does (see [`frozen`]),
//! so reading it costs O(1) and keeping it O(log n) per change, with any number of tables.
//! Lookups by name and by OID are hash-map lookups: CREATE and DROP TABLE cost the same with a
//! million tables as with ten.

mod frozen;
pub mod publication;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::btree::BtreeIndex;
use crate::config::{Config, FreezePolicy};
use crate::error::{Error, Result};
use crate::heap::tuple::{Column, Schema, Type, Value};
use crate::heap::{Relation, ReplicaIdentity};
use crate::stats::TableStats;
use crate::types::{FullXid, Oid, Tid, Xid};

/// OID and file node of `pg_class`.
pub const PG_CLASS_OID: Oid = Oid(1259);
/// First OID handed to user tables (PostgreSQL's FirstNormalObjectId).
pub const FIRST_NORMAL_OID: Oid = Oid(16384);

/// Storage options and constraints given at CREATE TABLE.
#[derive(Clone, Debug)]
pub struct TableOptions {
    pub fillfactor: u8,
    /// Columns of the primary key: a unique index named `<table>_pkey` on them, and the columns
    /// become NOT NULL.
    pub primary_key: Option<Vec<String>>,
    /// Other storage parameters (`WITH (autovacuum_vacuum_scale_factor = 0.05, ...)`).
    pub options: RelOptions,
}

impl Default for TableOptions {
    fn default() -> TableOptions {
        TableOptions { fillfactor: 100, primary_key: None, options: RelOptions::default() }
    }
}

/// Per-table storage parameters that override the database's settings (PostgreSQL's
/// reloptions, with their names), plus our `vacuum_freeze_policy` and `vacuum_fsm_settled`.
/// `vacuum_max_eager_freeze_failure_rate` is one too, as in PostgreSQL 18.
/// The `autovacuum_freeze_*` ages apply to autovacuum only, as in PostgreSQL.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RelOptions {
    /// The options as given, in order (what `pg_class.reloptions` stores).
    pub raw: Vec<(String, String)>,
    pub vacuum_freeze_policy: Option<FreezePolicy>,
    pub vacuum_max_eager_freeze_failure_rate: Option<f64>,
    pub vacuum_fsm_settled: Option<bool>,
    pub vacuum_truncate: Option<bool>,
    pub autovacuum_enabled: Option<bool>,
    pub autovacuum_vacuum_threshold: Option<u64>,
    pub autovacuum_vacuum_scale_factor: Option<f64>,
    pub autovacuum_vacuum_insert_threshold: Option<i64>,
    pub autovacuum_vacuum_insert_scale_factor: Option<f64>,
    pub autovacuum_freeze_min_age: Option<u32>,
    pub autovacuum_freeze_table_age: Option<u32>,
    pub autovacuum_freeze_max_age: Option<u32>,
    pub autovacuum_vacuum_cost_delay_ms: Option<f64>,
    pub autovacuum_vacuum_cost_limit: Option<u32>,
    pub log_autovacuum_min_duration_ms: Option<i64>,
}

impl RelOptions {
    /// Sets one option, validated as the database parameter it overrides would be.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let mut c = Config::default();
        let param =
            RelOptions::parameter(name).ok_or_else(|| Error::Config(format!("unrecognized parameter \"{name}\"")))?;
        c.set(param, value)?;
        match name {
            "vacuum_freeze_policy" => self.vacuum_freeze_policy = Some(c.vacuum_freeze_policy),
            "vacuum_max_eager_freeze_failure_rate" => {
                self.vacuum_max_eager_freeze_failure_rate = Some(c.vacuum_max_eager_freeze_failure_rate)
            }
            "vacuum_fsm_settled" => self.vacuum_fsm_settled = c.vacuum_fsm_settled,
            "vacuum_truncate" => self.vacuum_truncate = Some(c.vacuum_truncate),
            "autovacuum_enabled" => self.autovacuum_enabled = Some(c.autovacuum),
            "autovacuum_vacuum_threshold" => self.autovacuum_vacuum_threshold = Some(c.autovacuum_vacuum_threshold),
            "autovacuum_vacuum_scale_factor" => {
                self.autovacuum_vacuum_scale_factor = Some(c.autovacuum_vacuum_scale_factor)
            }
            "autovacuum_vacuum_insert_threshold" => {
                self.autovacuum_vacuum_insert_threshold = Some(c.autovacuum_vacuum_insert_threshold)
            }
            "autovacuum_vacuum_insert_scale_factor" => {
                self.autovacuum_vacuum_insert_scale_factor = Some(c.autovacuum_vacuum_insert_scale_factor)
            }
            "autovacuum_freeze_min_age" => self.autovacuum_freeze_min_age = Some(c.vacuum_freeze_min_age),
            "autovacuum_freeze_table_age" => self.autovacuum_freeze_table_age = Some(c.vacuum_freeze_table_age),
            "autovacuum_freeze_max_age" => self.autovacuum_freeze_max_age = Some(c.autovacuum_freeze_max_age),
            "autovacuum_multixact_freeze_min_age"
            | "autovacuum_multixact_freeze_table_age"
            | "autovacuum_multixact_freeze_max_age" => {}
            "autovacuum_vacuum_cost_delay" => {
                self.autovacuum_vacuum_cost_delay_ms = Some(c.autovacuum_vacuum_cost_delay_ms)
            }
            "autovacuum_vacuum_cost_limit" => {
                self.autovacuum_vacuum_cost_limit = u32::try_from(c.autovacuum_vacuum_cost_limit).ok()
            }
            _ => self.log_autovacuum_min_duration_ms = Some(c.log_autovacuum_min_duration_ms),
        }
        self.raw.retain(|(k, _)| k != name);
        self.raw.push((name.to_string(), value.to_string()));
        Ok(())
    }

    /// The database parameter a storage parameter overrides (and is validated as), or
    /// `None` for a name that is no storage parameter.
    fn parameter(name: &str) -> Option<&str> {
        Some(match name {
            "autovacuum_enabled" => "autovacuum",
            "autovacuum_freeze_min_age" => "vacuum_freeze_min_age",
            "autovacuum_freeze_table_age" => "vacuum_freeze_table_age",
            // Accepted and checked, but govern nothing: settledb has no MultiXacts
            // (`Config::multixact_ages`).
            "autovacuum_multixact_freeze_min_age" => "vacuum_multixact_freeze_min_age",
            "autovacuum_multixact_freeze_table_age" => "vacuum_multixact_freeze_table_age",
            "autovacuum_multixact_freeze_max_age" => name,
            "vacuum_freeze_policy"
            | "vacuum_max_eager_freeze_failure_rate"
            | "vacuum_fsm_settled"
            | "vacuum_truncate"
            | "autovacuum_vacuum_threshold"
            | "autovacuum_vacuum_scale_factor"
            | "autovacuum_vacuum_insert_threshold"
            | "autovacuum_vacuum_insert_scale_factor"
            | "autovacuum_freeze_max_age"
            | "autovacuum_vacuum_cost_delay"
            | "autovacuum_vacuum_cost_limit"
            | "log_autovacuum_min_duration" => name,
            _ => return None,
        })
    }

    /// These options without `names` (ALTER TABLE ... RESET); names not set are skipped.
    pub fn without(&self, names: &[&str]) -> Result<RelOptions> {
        let mut kept = RelOptions::default();
        for (k, v) in self.raw.iter().filter(|(k, _)| !names.contains(&k.as_str())) {
            kept.set(k, v)?;
        }
        Ok(kept)
    }

    /// `name=value,name=value` (values never contain `,` or `=`).
    pub fn encode(&self) -> String {
        self.raw.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }

    pub fn decode(s: &str) -> Result<RelOptions> {
        let mut o = RelOptions::default();
        for kv in s.split(',').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| Error::Config(format!("bad reloption \"{kv}\"")))?;
            o.set(k, v)?;
        }
        Ok(o)
    }
}

/// Relation kinds (`relkind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelKind {
    Table,
    Index,
}

/// What an index row of `pg_class` adds (PostgreSQL keeps it in `pg_index`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexMeta {
    pub table: Oid,
    /// Key columns, as positions in the table's schema.
    pub columns: Vec<u16>,
    pub unique: bool,
    pub primary: bool,
}

/// An index as the catalog knows it.
pub struct IndexDef {
    pub oid: Oid,
    pub name: String,
    pub meta: IndexMeta,
    /// Where its `pg_class` row is.
    pub row: Mutex<Tid>,
    /// The transaction that created it: a snapshot that does not see that transaction as
    /// committed does not use the index (PostgreSQL's `indcheckxmin`), since the build left out
    /// row versions only such snapshots could see.
    pub created_by: Xid,
    pub btree: Arc<BtreeIndex>,
    /// Held shared by every scan of the index for its whole length and exclusively by DROP
    /// INDEX before it removes the files (PostgreSQL's AccessShareLock against its
    /// AccessExclusiveLock); `true` once dropped, and a scan that finds it so reports the
    /// index as gone instead of reading removed files.
    pub dropped: parking_lot::RwLock<bool>,
}

impl IndexDef {
    /// The key of a table row under this index.
    pub fn key_of(&self, row: &[Value]) -> Vec<Value> {
        self.meta.columns.iter().map(|&c| row.get(usize::from(c)).cloned().unwrap_or(Value::Null)).collect()
    }

    /// [`IndexDef::key_of`] a row deformed as borrowed values
    /// ([`crate::heap::tuple::deform_tuple_refs`]), into `key` (cleared first): only the
    /// key's columns are copied out. `what` names the row in the error for a text value that
    /// is not UTF-8.
    pub fn key_of_refs_into(
        &self,
        row: &[crate::heap::tuple::ValueRef<'_>],
        what: &dyn std::fmt::Display,
        key: &mut Vec<Value>,
    ) -> std::result::Result<(), String> {
        key.clear();
        for &c in &self.meta.columns {
            key.push(row.get(usize::from(c)).map_or(Ok(Value::Null), |v| v.to_value(what))?);
        }
        Ok(())
    }
}

/// A table as the catalog knows it.
pub struct TableEntry {
    pub rel: Arc<Relation>,
    /// Its indexes, in creation order.
    pub indexes: RwLock<Vec<Arc<IndexDef>>>,
    /// Where its `pg_class` row is.
    pub row: Mutex<Tid>,
    pub relfrozenxid: AtomicU32,
    pub relminmxid: AtomicU32,
    pub relpages: AtomicU32,
    pub reltuples: Mutex<f64>,
    /// Storage parameters (CREATE TABLE ... WITH, ALTER TABLE ... SET).
    pub options: RwLock<RelOptions>,
    /// Held by VACUUM for its whole run, and by DDL while it changes the table: one
    /// maintenance operation per table at a time. Always taken after the table lock
    /// ([`crate::lmgr`]) that already orders them (VACUUM's ShareUpdateExclusive conflicts
    /// with every DDL mode), so it is never waited for long; kept as a second guard.
    pub maintenance_lock: Mutex<()>,
    /// Cumulative statistics (`pg_stat_user_tables`), shared with the entries a TRUNCATE
    /// replaces this one with (the counters belong to the table, not to its storage).
    pub stats: Arc<TableStats>,
    /// Statistics or options changed since the autovacuum launcher last looked at the table
    /// (set by `db::autovacuum::note_changed`, cleared by the launcher).
    pub stats_changed: std::sync::atomic::AtomicBool,
    /// Set when a TRUNCATE published another entry (new storage) for the table in its place,
    /// cleared if that TRUNCATE rolls back and this entry is published again: a handle that
    /// finds it set looks the table up again ([`Catalog::get_by_oid`]).
    pub superseded: std::sync::atomic::AtomicBool,
}

impl TableEntry {
    /// The entry a TRUNCATE publishes in place of `self`: the same table (OID, name, columns,
    /// options, statistics) on new storage `rel`, with new `indexes` (the same index OIDs on
    /// new storage), its new `pg_class` row at `row`, no pages and an unknown tuple count.
    pub fn with_new_storage(
        &self,
        rel: Arc<Relation>,
        indexes: Vec<Arc<IndexDef>>,
        row: Tid,
        relfrozenxid: Xid,
    ) -> TableEntry {
        assert_eq!(rel.oid, self.rel.oid, "new storage of the same table");
        rel.replica_identity.write().0 = self.rel.replica_identity.read().0;
        TableEntry {
            rel,
            indexes: RwLock::new(indexes),
            row: Mutex::new(row),
            relfrozenxid: AtomicU32::new(relfrozenxid.0),
            relminmxid: AtomicU32::new(self.relminmxid.load(Ordering::Acquire)),
            relpages: AtomicU32::new(0),
            reltuples: Mutex::new(-1.0),
            options: RwLock::new(self.options()),
            maintenance_lock: Mutex::new(()),
            stats: self.stats.clone(),
            stats_changed: std::sync::atomic::AtomicBool::new(true),
            superseded: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The entry ALTER TABLE publishes in place of `self` after changing the table's
    /// definition (columns, their missing values, its name): `rel` on the same storage, with
    /// the same indexes, its `pg_class` row now at `row`, and everything else (statistics,
    /// options, relfrozenxid, size estimates) carried over.
    pub fn with_new_definition(&self, rel: Arc<Relation>, row: Tid) -> TableEntry {
        assert_eq!((rel.oid, rel.relfilenode), (self.rel.oid, self.rel.relfilenode), "same table, same storage");
        rel.replica_identity.write().0 = self.rel.replica_identity.read().0;
        TableEntry {
            rel,
            indexes: RwLock::new(self.indexes.read().clone()),
            row: Mutex::new(row),
            relfrozenxid: AtomicU32::new(self.relfrozenxid.load(Ordering::Acquire)),
            relminmxid: AtomicU32::new(self.relminmxid.load(Ordering::Acquire)),
            relpages: AtomicU32::new(self.relpages.load(Ordering::Acquire)),
            reltuples: Mutex::new(*self.reltuples.lock()),
            options: RwLock::new(self.options()),
            maintenance_lock: Mutex::new(()),
            stats: self.stats.clone(),
            stats_changed: std::sync::atomic::AtomicBool::new(true),
            superseded: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A copy of the table's storage parameters.
    pub fn options(&self) -> RelOptions {
        self.options.read().clone()
    }

    pub fn relfrozenxid(&self) -> Xid {
        Xid(self.relfrozenxid.load(Ordering::Acquire))
    }
}

/// The schema of `pg_class` rows.
pub fn pg_class_schema() -> Schema {
    let col = |name: &str, ty: Type| Column { name: name.to_string(), ty, nullable: false };
    Schema {
        columns: vec![
            col("oid", Type::Int8),
            col("relname", Type::Text),
            col("relfilenode", Type::Int8),
            col("relpages", Type::Int4),
            col("reltuples", Type::Float8),
            col("relfrozenxid", Type::Int8),
            col("relminmxid", Type::Int8),
            col("fillfactor", Type::Int4),
            col("relschema", Type::Bytea),
            col("relkind", Type::Text),
            col("indrelid", Type::Int8),
            col("indkey", Type::Bytea),
            col("indisunique", Type::Bool),
            col("indisprimary", Type::Bool),
            col("reloptions", Type::Text),
            Column { name: "relreplident".to_string(), ty: Type::Text, nullable: true },
            Column { name: "relmissing".to_string(), ty: Type::Bytea, nullable: true },
        ],
    }
}

/// A decoded `pg_class` row.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassRow {
    pub oid: Oid,
    pub relname: String,
    pub relfilenode: Oid,
    pub relpages: i32,
    pub reltuples: f64,
    pub relfrozenxid: Xid,
    pub relminmxid: u32,
    pub fillfactor: u8,
    pub schema: Schema,
    pub kind: RelKind,
    pub index: Option<IndexMeta>,
    pub options: RelOptions,
    pub replica_identity: ReplicaIdentity,
    /// The columns' missing values, one per column (NULL: none), or empty when none has one.
    pub missing: Vec<Value>,
}

impl ClassRow {
    pub fn to_values(&self) -> Vec<Value> {
        vec![
            Value::Int8(i64::from(self.oid.0)),
            Value::Text(self.relname.clone()),
            Value::Int8(i64::from(self.relfilenode.0)),
            Value::Int4(self.relpages),
            Value::Float8(self.reltuples),
            Value::Int8(i64::from(self.relfrozenxid.0)),
            Value::Int8(i64::from(self.relminmxid)),
            Value::Int4(i32::from(self.fillfactor)),
            Value::Bytea(self.schema.encode()),
            Value::Text(match self.kind {
                RelKind::Table => "r".into(),
                RelKind::Index => "i".into(),
            }),
            Value::Int8(i64::from(self.index.as_ref().map_or(0, |m| m.table.0))),
            Value::Bytea(
                self.index.as_ref().map_or(Vec::new(), |m| m.columns.iter().flat_map(|c| c.to_le_bytes()).collect()),
            ),
            Value::Bool(self.index.as_ref().is_some_and(|m| m.unique)),
            Value::Bool(self.index.as_ref().is_some_and(|m| m.primary)),
            Value::Text(self.options.encode()),
            Value::Text(self.replica_identity.code().to_string()),
            match crate::heap::tuple::encode_missing(&self.missing) {
                Ok(Some(b)) => Value::Bytea(b),
                // A missing value too big for a tuple is refused before a row is formed
                // (`db::alter`); none at all is NULL.
                Ok(None) | Err(_) => Value::Null,
            },
        ]
    }

    /// Decodes a row read from disk; malformed rows are corruption of `pg_class`.
    pub fn from_values(v: &[Value], tid: Tid) -> Result<ClassRow> {
        let bad = |what: &str| Error::corrupted(PG_CLASS_OID, tid.block, format!("pg_class row {tid}: {what}"));
        let int8 = |i: usize| match v.get(i) {
            Some(Value::Int8(x)) if *x >= 0 && *x <= i64::from(u32::MAX) => Ok(*x as u32),
            _ => Err(bad("bad integer column")),
        };
        let relname = match v.get(1) {
            Some(Value::Text(s)) => s.clone(),
            _ => return Err(bad("bad relname")),
        };
        let relpages = match v.get(3) {
            Some(Value::Int4(x)) => *x,
            _ => return Err(bad("bad relpages")),
        };
        let reltuples = match v.get(4) {
            Some(Value::Float8(x)) => *x,
            _ => return Err(bad("bad reltuples")),
        };
        let fillfactor = match v.get(7) {
            Some(Value::Int4(x)) if (10..=100).contains(x) => *x as u8,
            _ => return Err(bad("bad fillfactor")),
        };
        let schema = match v.get(8) {
            Some(Value::Bytea(b)) => Schema::decode(b).map_err(|e| bad(&format!("bad relschema: {e}")))?,
            _ => return Err(bad("bad relschema")),
        };
        let kind = match v.get(9) {
            Some(Value::Text(k)) if k == "r" => RelKind::Table,
            Some(Value::Text(k)) if k == "i" => RelKind::Index,
            _ => return Err(bad("bad relkind")),
        };
        let index = match kind {
            RelKind::Table => None,
            RelKind::Index => {
                let columns = match v.get(11) {
                    Some(Value::Bytea(b)) if b.len() % 2 == 0 && !b.is_empty() => {
                        b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
                    }
                    _ => return Err(bad("bad indkey")),
                };
                let flag = |i: usize| match v.get(i) {
                    Some(Value::Bool(b)) => Ok(*b),
                    _ => Err(bad("bad index flag")),
                };
                Some(IndexMeta { table: Oid(int8(10)?), columns, unique: flag(12)?, primary: flag(13)? })
            }
        };
        let options = match v.get(14) {
            Some(Value::Text(t)) => RelOptions::decode(t).map_err(|e| bad(&format!("bad reloptions: {e}")))?,
            _ => return Err(bad("bad reloptions")),
        };
        let replica_identity = match v.get(15) {
            None | Some(Value::Null) => ReplicaIdentity::Default,
            Some(Value::Text(t)) => {
                let mut cs = t.chars();
                match (cs.next().and_then(ReplicaIdentity::from_code), cs.next()) {
                    (Some(r), None) => r,
                    _ => return Err(bad("bad relreplident")),
                }
            }
            _ => return Err(bad("bad relreplident")),
        };
        let missing = match v.get(16) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Bytea(b)) => {
                crate::heap::tuple::decode_missing(&schema, b).map_err(|e| bad(&format!("bad relmissing: {e}")))?
            }
            _ => return Err(bad("bad relmissing")),
        };
        Ok(ClassRow {
            missing,
            replica_identity,
            kind,
            index,
            options,
            oid: Oid(int8(0)?),
            relname,
            relfilenode: Oid(int8(2)?),
            relpages,
            reltuples,
            relfrozenxid: Xid(int8(5)?),
            relminmxid: int8(6)?,
            fillfactor,
            schema,
        })
    }
}

/// The in-memory catalog cache.
pub struct Catalog {
    indexes: RwLock<HashMap<String, Arc<IndexDef>>>,
    by_name: RwLock<HashMap<String, Arc<TableEntry>>>,
    by_oid: RwLock<HashMap<Oid, Arc<TableEntry>>>,
    next_oid: AtomicU32,
    /// Serializes DDL.
    pub ddl_lock: Mutex<()>,
    /// Serializes moving the database frozen XID (`LockDatabaseFrozenIds`): reading the
    /// oldest relfrozenxid and applying it to the XID limits and CLOG must be one step, or
    /// a VACUUM that read an older value could apply it after one that read a newer value,
    /// setting the limits back.
    pub frozen_ids_lock: Mutex<()>,
    /// Every table's relfrozenxid, ordered (taken after `by_oid` when both are).
    frozen: Mutex<frozen::FrozenXidIndex>,
    /// The database's `autovacuum_freeze_max_age`, for tables that do not override it.
    freeze_max_age: u32,
    /// Bumped after every change to what the catalog publishes (tables, their definitions,
    /// indexes, storage parameters): see [`Catalog::generation`].
    generation: AtomicU64,
}

/// Where a new catalog's [`Catalog::generation`] starts: a multiple of 2^40 no other catalog
/// of this process started from (for the first 2^24 catalogs a process opens; after that the
/// starts come round again).
fn first_generation() -> u64 {
    static CATALOGS: AtomicU64 = AtomicU64::new(1);
    CATALOGS.fetch_add(1, Ordering::Relaxed) << 40
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog::new(Config::default().autovacuum_freeze_max_age)
    }
}

impl Catalog {
    /// An empty catalog; `autovacuum_freeze_max_age` is the database's setting, which decides
    /// when a table not overriding it is due for an anti-wraparound autovacuum.
    pub fn new(autovacuum_freeze_max_age: u32) -> Catalog {
        Catalog {
            indexes: RwLock::new(HashMap::new()),
            by_name: RwLock::new(HashMap::new()),
            by_oid: RwLock::new(HashMap::new()),
            next_oid: AtomicU32::new(FIRST_NORMAL_OID.0),
            ddl_lock: Mutex::new(()),
            frozen_ids_lock: Mutex::new(()),
            frozen: Mutex::new(frozen::FrozenXidIndex::new()),
            freeze_max_age: autovacuum_freeze_max_age,
            generation: AtomicU64::new(first_generation()),
        }
    }

    /// A number that changes whenever a table or index is published, replaced or forgotten,
    /// or a table's storage parameters change (not for statistics or relfrozenxid). A cache
    /// built from the catalog (the server's relation cache) reads it *before* it reads the
    /// catalog and is valid while it stays the same: every change is made before the number
    /// moves, so a cache that saw part of a change carries the old number and is dropped at
    /// its next check. PostgreSQL's relcache learns the same from invalidation messages.
    ///
    /// No two catalogs of one process show the same number (each counts from its own multiple
    /// of 2^40, for the first 2^24 catalogs it opens), so a cache that outlives a database, or
    /// serves two in turn, cannot take one database's tables for another's.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Builds the cache entry for a row and publishes it. `next` is the next XID (relfrozenxid
    /// is ordered as a 64-bit XID widened against it).
    pub fn publish(&self, row: &ClassRow, tid: Tid, next: FullXid) -> Arc<TableEntry> {
        let rel = Arc::new(
            Relation::new(row.oid, &row.relname, row.relfilenode, row.schema.clone(), row.fillfactor)
                .with_missing(row.missing.clone()),
        );
        rel.replica_identity.write().0 = row.replica_identity;
        let e = Arc::new(TableEntry {
            rel,
            indexes: RwLock::new(Vec::new()),
            row: Mutex::new(tid),
            relfrozenxid: AtomicU32::new(row.relfrozenxid.0),
            relminmxid: AtomicU32::new(row.relminmxid),
            relpages: AtomicU32::new(row.relpages.max(0) as u32),
            reltuples: Mutex::new(row.reltuples),
            options: RwLock::new(row.options.clone()),
            maintenance_lock: Mutex::new(()),
            stats: Arc::new(TableStats::new()),
            stats_changed: std::sync::atomic::AtomicBool::new(false),
            superseded: std::sync::atomic::AtomicBool::new(false),
        });
        self.by_name.write().insert(row.relname.clone(), e.clone());
        {
            let mut by_oid = self.by_oid.write();
            by_oid.insert(row.oid, e.clone());
            self.frozen.lock().set(row.oid, row.relfrozenxid, self.freeze_max_age_of(&e), next);
        }
        let next_oid = row.oid.0.max(row.relfilenode.0).saturating_add(1);
        self.next_oid.fetch_max(next_oid, Ordering::AcqRel);
        self.changed();
        e
    }

    /// The `autovacuum_freeze_max_age` in force for a table.
    fn freeze_max_age_of(&self, e: &TableEntry) -> u32 {
        e.options.read().autovacuum_freeze_max_age.unwrap_or(self.freeze_max_age)
    }

    /// Sets a published table's relfrozenxid in the cache and in the ordered index together
    /// (VACUUM's in-place `pg_class` update calls this after writing the row). A table dropped
    /// meanwhile stays out of the index.
    pub fn set_relfrozenxid(&self, e: &Arc<TableEntry>, relfrozenxid: Xid, next: FullXid) {
        let by_oid = self.by_oid.read();
        let mut frozen = self.frozen.lock();
        e.relfrozenxid.store(relfrozenxid.0, Ordering::Release);
        if by_oid.get(&e.rel.oid).is_some_and(|p| Arc::ptr_eq(p, e)) {
            frozen.set(e.rel.oid, relfrozenxid, self.freeze_max_age_of(e), next);
        }
    }

    /// Replaces a published table's storage parameters (ALTER TABLE SET, after its commit);
    /// its anti-wraparound deadline follows its `autovacuum_freeze_max_age`.
    pub fn set_options(&self, e: &Arc<TableEntry>, options: RelOptions, next: FullXid) {
        let by_oid = self.by_oid.read();
        let mut frozen = self.frozen.lock();
        *e.options.write() = options;
        if by_oid.get(&e.rel.oid).is_some_and(|p| Arc::ptr_eq(p, e)) {
            frozen.set(e.rel.oid, e.relfrozenxid(), self.freeze_max_age_of(e), next);
        }
        self.changed();
    }

    /// Publishes an index of a published table.
    pub fn publish_index(&self, def: Arc<IndexDef>) -> Option<Arc<TableEntry>> {
        let table = self.get_by_oid(def.meta.table)?;
        self.indexes.write().insert(def.name.clone(), def.clone());
        let next = def.oid.0.max(def.btree.relfilenode().0).saturating_add(1);
        self.next_oid.fetch_max(next, Ordering::AcqRel);
        table.indexes.write().push(def);
        self.refresh_indexed_columns(&table);
        self.changed();
        Some(table)
    }

    /// Publishes `new` in place of `old`, the entry of the same table (TRUNCATE gives a table
    /// and its indexes new storage; its ROLLBACK publishes the old entry again; ALTER TABLE's
    /// column changes and RENAME publish a new definition on the same storage). Indexes are
    /// replaced by name, the table by its name (the old one forgotten when it changed); `old`
    /// is marked superseded and `new` current.
    pub fn replace(&self, old: &Arc<TableEntry>, new: &Arc<TableEntry>, next: FullXid) {
        assert_eq!(old.rel.oid, new.rel.oid, "an entry is replaced by one of the same table");
        {
            let mut indexes = self.indexes.write();
            for d in old.indexes.read().iter() {
                indexes.remove(&d.name);
            }
            for d in new.indexes.read().iter() {
                indexes.insert(d.name.clone(), d.clone());
                self.next_oid.fetch_max(d.btree.relfilenode().0.saturating_add(1), Ordering::AcqRel);
            }
        }
        self.refresh_indexed_columns(new);
        {
            let mut by_name = self.by_name.write();
            // ALTER TABLE ... RENAME TO publishes the table under its new name.
            if old.rel.name != new.rel.name && by_name.get(&old.rel.name).is_some_and(|e| Arc::ptr_eq(e, old)) {
                by_name.remove(&old.rel.name);
            }
            by_name.insert(new.rel.name.clone(), new.clone());
        }
        {
            let mut by_oid = self.by_oid.write();
            by_oid.insert(new.rel.oid, new.clone());
            self.frozen.lock().set(new.rel.oid, new.relfrozenxid(), self.freeze_max_age_of(new), next);
        }
        self.next_oid.fetch_max(new.rel.relfilenode.0.saturating_add(1), Ordering::AcqRel);
        old.superseded.store(true, Ordering::Release);
        new.superseded.store(false, Ordering::Release);
        self.changed();
    }

    /// Forgets an index.
    pub fn unpublish_index(&self, name: &str) -> Option<Arc<IndexDef>> {
        let def = self.indexes.write().remove(name)?;
        if let Some(table) = self.get_by_oid(def.meta.table) {
            table.indexes.write().retain(|d| d.oid != def.oid);
            self.refresh_indexed_columns(&table);
        }
        self.changed();
        Some(def)
    }

    fn refresh_indexed_columns(&self, table: &TableEntry) {
        let mut cols = vec![false; table.rel.schema.columns.len()];
        for d in table.indexes.read().iter() {
            for &c in &d.meta.columns {
                if let Some(x) = cols.get_mut(usize::from(c)) {
                    *x = true;
                }
            }
        }
        *table.rel.indexed_columns.write() = cols;
        let pkey = table.indexes.read().iter().find(|d| d.meta.primary).map(|d| d.meta.columns.clone());
        table.rel.replica_identity.write().1 = pkey.unwrap_or_default();
    }

    pub fn get_index(&self, name: &str) -> Option<Arc<IndexDef>> {
        self.indexes.read().get(name).cloned()
    }

    /// Whether a table or index has this name.
    pub fn name_taken(&self, name: &str) -> bool {
        self.by_name.read().contains_key(name) || self.indexes.read().contains_key(name)
    }

    /// Every index, by OID.
    pub fn all_indexes(&self) -> Vec<Arc<IndexDef>> {
        let mut v: Vec<_> = self.indexes.read().values().cloned().collect();
        v.sort_by_key(|d| d.oid);
        v
    }

    pub fn unpublish(&self, name: &str) -> Option<Arc<TableEntry>> {
        let e = self.by_name.write().remove(name)?;
        let mut by_oid = self.by_oid.write();
        by_oid.remove(&e.rel.oid);
        self.frozen.lock().remove(e.rel.oid);
        drop(by_oid);
        self.changed();
        Some(e)
    }

    pub fn get(&self, name: &str) -> Option<Arc<TableEntry>> {
        self.by_name.read().get(name).cloned()
    }

    pub fn get_by_oid(&self, oid: Oid) -> Option<Arc<TableEntry>> {
        self.by_oid.read().get(&oid).cloned()
    }

    pub fn tables(&self) -> Vec<Arc<TableEntry>> {
        let mut v: Vec<_> = self.by_oid.read().values().cloned().collect();
        v.sort_by_key(|e| e.rel.oid);
        v
    }

    /// Allocates an OID for a new relation (also its file node).
    pub fn allocate_oid(&self) -> Oid {
        Oid(self.next_oid.fetch_add(1, Ordering::AcqRel))
    }

    /// Makes sure future OIDs are above `oid` (a file found on disk, for example).
    pub fn bump_oid_past(&self, oid: Oid) {
        self.next_oid.fetch_max(oid.0.saturating_add(1), Ordering::AcqRel);
    }

    /// Minimum relfrozenxid over every table (the database frozen XID, `datfrozenxid`): the
    /// top of the ordered index, O(1).
    pub fn database_frozen_xid(&self) -> Option<Xid> {
        self.frozen.lock().oldest()
    }

    /// Tables whose relfrozenxid is at least their `autovacuum_freeze_max_age` old at `next`
    /// (candidates for an anti-wraparound autovacuum): O(k) for k such tables.
    pub fn due_for_wraparound(&self, next: FullXid) -> Vec<Oid> {
        self.frozen.lock().due_for_wraparound(next)
    }

    /// Tables in the ordered index, and the index's bytes (for benchmarks and `check`).
    pub fn frozen_index_size(&self) -> (usize, usize) {
        let f = self.frozen.lock();
        (f.len(), f.allocated_bytes())
    }

    /// Tables in the cache (`pg_class` included).
    pub fn table_count(&self) -> usize {
        self.by_oid.read().len()
    }
}

/// Whether `name` is one of the catalog's own relations (`pg_class`, `pg_publication`), which
/// DDL refuses to drop or alter.
pub fn is_system_catalog(name: &str) -> bool {
    matches!(name, "pg_class" | "pg_publication")
}

/// Validates a table name the way an identifier must look.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 63 {
        return Err(Error::invalid(format!("invalid table name \"{name}\": must be 1 to 63 bytes")));
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(Error::invalid(format!(
            "invalid table name \"{name}\": use letters, digits and underscores, not starting with a digit"
        )));
    }
    Ok(())
}

/// Validates a schema for CREATE TABLE.
pub fn validate_schema(schema: &Schema) -> Result<()> {
    if schema.columns.is_empty() {
        return Err(Error::invalid("a table must have at least one column"));
    }
    if schema.columns.len() > 1600 {
        return Err(Error::invalid("tables can have at most 1600 columns"));
    }
    let mut seen = std::collections::HashSet::new();
    for c in &schema.columns {
        validate_name(&c.name).map_err(|_| Error::invalid(format!("invalid column name \"{}\"", c.name)))?;
        if !seen.insert(c.name.as_str()) {
            return Err(Error::invalid(format!("column \"{}\" specified more than once", c.name)));
        }
    }
    Ok(())
}

/// Calls `f` on every `pg_class` row a new snapshot sees (every committed row), in physical
/// order, through a ring of buffers; returns the pages read.
pub fn for_each_class_row(
    env: &crate::heap::HeapEnv<'_>,
    mut f: impl FnMut(ClassRow, Tid) -> Result<()>,
) -> Result<u32> {
    let rel = Relation::new(PG_CLASS_OID, "pg_class", PG_CLASS_OID, pg_class_schema(), 100);
    let snap = env.xact.get_snapshot(None);
    let oldest = env.xact.oldest_xmin();
    let nblocks = env.pool.smgr().nblocks(PG_CLASS_OID, crate::types::Fork::Main)?;
    let mut ring = crate::buffer::Ring::new(256 << 10);
    for b in 0..nblocks {
        for (tid, vals) in
            crate::heap::scan_page(env, &rel, &snap, u32::MAX, crate::types::BlockNumber(b), oldest, &mut ring)?
        {
            f(ClassRow::from_values(&vals, tid)?, tid)?;
        }
    }
    Ok(nblocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two catalogs never show the same generation, however many changes each has seen: a
    /// cache keyed by it cannot mistake one database's tables for another's.
    #[test]
    fn generations_of_two_catalogs_never_meet() {
        let (a, b) = (Catalog::default(), Catalog::default());
        assert_ne!(a.generation(), b.generation());
        let start_b = b.generation();
        for _ in 0..3 {
            a.changed();
        }
        assert!((start_b..start_b + 3).all(|g| g != a.generation()));
        assert!(a.generation().abs_diff(b.generation()) >= 1 << 39, "each counts in its own range");
    }
}
