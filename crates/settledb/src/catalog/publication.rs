//! Publications (PostgreSQL's `pg_publication` and `pg_publication_rel`): which tables' changes,
//! and which kinds of change, the `pgoutput` plugin sends.
//!
//! One catalog relation, `pg_publication` (OID and file node 6104, PostgreSQL's), holds a row
//! per publication; the tables of a publication that is not `FOR ALL TABLES` are a column of
//! that row (`prtables`) instead of rows of a second relation, which keeps every publication
//! change a single-row replacement:
//!
//! | column       | type  | meaning                                                    |
//! |--------------|-------|------------------------------------------------------------|
//! | oid          | int8  | the publication's OID                                      |
//! | pubname      | text  | its name (unique)                                          |
//! | puballtables | bool  | `FOR ALL TABLES`                                           |
//! | pubinsert    | bool  | publish inserts                                            |
//! | pubupdate    | bool  | publish updates                                            |
//! | pubdelete    | bool  | publish deletes                                            |
//! | pubtruncate  | bool  | publish truncates (the engine has none to publish)         |
//! | prtables     | bytea | the tables' OIDs, u32 little-endian each, ascending        |
//!
//! The relation is created by the first CREATE PUBLICATION, in that transaction (its
//! `pg_class` row and file together with the publication's row), so a database that never
//! publishes has no such relation and nothing of it in its WAL. Rows are MVCC heap tuples
//! like `pg_class`'s: a crash part way through a publication command leaves the catalog as
//! if it had not started, and a decoding session reads the rows as of the WAL position it
//! decodes (`catalog_xmin` keeps their dead versions, as for every catalog relation).

use crate::error::{Error, Result};
use crate::heap::tuple::{Column, Schema, Type, Value};
use crate::types::{Oid, Tid};

/// OID and file node of `pg_publication` (PostgreSQL's `PublicationRelationId`).
pub const PG_PUBLICATION_OID: Oid = Oid(6104);

/// The schema of `pg_publication` rows.
pub fn pg_publication_schema() -> Schema {
    let col = |name: &str, ty: Type| Column { name: name.to_string(), ty, nullable: false };
    Schema {
        columns: vec![
            col("oid", Type::Int8),
            col("pubname", Type::Text),
            col("puballtables", Type::Bool),
            col("pubinsert", Type::Bool),
            col("pubupdate", Type::Bool),
            col("pubdelete", Type::Bool),
            col("pubtruncate", Type::Bool),
            col("prtables", Type::Bytea),
        ],
    }
}

/// Which kinds of change a publication publishes (`WITH (publish = '…')`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublishActions {
    pub insert: bool,
    pub update: bool,
    pub delete: bool,
    pub truncate: bool,
}

impl Default for PublishActions {
    /// PostgreSQL's default: `publish = 'insert, update, delete, truncate'`.
    fn default() -> PublishActions {
        PublishActions { insert: true, update: true, delete: true, truncate: true }
    }
}

impl PublishActions {
    /// Parses a `publish` option value as PostgreSQL's `parse_publication_options` does: a
    /// comma-separated list of `insert`, `update`, `delete`, `truncate` (spaces around the
    /// words allowed, an empty list publishes nothing).
    pub fn parse(s: &str) -> Result<PublishActions> {
        let mut a = PublishActions { insert: false, update: false, delete: false, truncate: false };
        for word in s.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            match word {
                "insert" => a.insert = true,
                "update" => a.update = true,
                "delete" => a.delete = true,
                "truncate" => a.truncate = true,
                _ => return Err(Error::invalid(format!("unrecognized \"publish\" value: \"{word}\""))),
            }
        }
        Ok(a)
    }
}

/// What a publication covers: every table, or those listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublicationTables {
    All,
    /// Tables by OID.
    Some(Vec<Oid>),
}

/// A decoded `pg_publication` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicationRow {
    pub oid: Oid,
    pub name: String,
    pub tables: PublicationTables,
    pub actions: PublishActions,
}

impl PublicationRow {
    /// Whether the publication covers the table with this OID.
    pub fn includes(&self, table: Oid) -> bool {
        match &self.tables {
            PublicationTables::All => true,
            PublicationTables::Some(t) => t.binary_search(&table).is_ok(),
        }
    }

    pub fn to_values(&self) -> Vec<Value> {
        let (all, tables) = match &self.tables {
            PublicationTables::All => (true, Vec::new()),
            PublicationTables::Some(t) => (false, t.iter().flat_map(|o| o.0.to_le_bytes()).collect()),
        };
        let a = self.actions;
        vec![
            Value::Int8(i64::from(self.oid.0)),
            Value::Text(self.name.clone()),
            Value::Bool(all),
            Value::Bool(a.insert),
            Value::Bool(a.update),
            Value::Bool(a.delete),
            Value::Bool(a.truncate),
            Value::Bytea(tables),
        ]
    }

    /// Decodes a row read from disk; a malformed one is corruption of `pg_publication`.
    pub fn from_values(v: &[Value], tid: Tid) -> Result<PublicationRow> {
        let bad =
            |what: &str| Error::corrupted(PG_PUBLICATION_OID, tid.block, format!("pg_publication row {tid}: {what}"));
        let flag = |i: usize| match v.get(i) {
            Some(Value::Bool(b)) => Ok(*b),
            _ => Err(bad("bad flag column")),
        };
        let oid = match v.first() {
            Some(Value::Int8(x)) if *x >= 0 && *x <= i64::from(u32::MAX) => Oid(*x as u32),
            _ => return Err(bad("bad oid")),
        };
        let name = match v.get(1) {
            Some(Value::Text(s)) => s.clone(),
            _ => return Err(bad("bad pubname")),
        };
        let tables = if flag(2)? {
            PublicationTables::All
        } else {
            match v.get(7) {
                Some(Value::Bytea(b)) if b.len() % 4 == 0 => PublicationTables::Some(
                    b.chunks_exact(4).map(|c| Oid(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
                ),
                _ => return Err(bad("bad prtables")),
            }
        };
        let actions = PublishActions { insert: flag(3)?, update: flag(4)?, delete: flag(5)?, truncate: flag(6)? };
        Ok(PublicationRow { oid, name, tables, actions })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_reads_back_as_written() {
        let row = PublicationRow {
            oid: Oid(16400),
            name: "p".into(),
            tables: PublicationTables::Some(vec![Oid(16384), Oid(70000)]),
            actions: PublishActions { insert: true, update: false, delete: true, truncate: false },
        };
        assert_eq!(PublicationRow::from_values(&row.to_values(), Tid::default()).unwrap(), row);
        let all = PublicationRow { tables: PublicationTables::All, ..row };
        assert_eq!(PublicationRow::from_values(&all.to_values(), Tid::default()).unwrap(), all);
        assert!(all.includes(Oid(1)));
    }

    #[test]
    fn publish_option_parses_as_postgresql_does() {
        let a = PublishActions::parse(" insert , delete").unwrap();
        assert_eq!(a, PublishActions { insert: true, update: false, delete: true, truncate: false });
        assert_eq!(
            PublishActions::parse("upsert").unwrap_err().to_string(),
            Error::invalid("unrecognized \"publish\" value: \"upsert\"").to_string()
        );
    }
}
