//! `pg_attribute` and `pg_index`, computed from the engine's catalog with PostgreSQL 15's
//! column names (a subset: those a client's catalog queries read), and the functions that go
//! with them: `pg_get_replica_identity_index(relid)`.
//!
//! A PostgreSQL 15 subscriber's table synchronization reads the published table's columns
//! and which of them form its replica identity with
//!
//! ```sql
//! SELECT a.attnum, a.attname, a.atttypid, a.attnum = ANY(i.indkey)
//!   FROM pg_catalog.pg_attribute a
//!   LEFT JOIN pg_catalog.pg_index i ON (i.indexrelid = pg_get_replica_identity_index(16385))
//!  WHERE a.attnum > 0::pg_catalog.int2 AND NOT a.attisdropped AND a.attgenerated = ''
//!    AND a.attrelid = 16385 ORDER BY a.attnum
//! ```
//!
//! `pg_attribute` has a row per column of every table (`attnum` from 1; no system columns,
//! none dropped or generated; `atttypid` the type's OID as pgoutput sends it); `pg_index` a
//! row per index, its `indkey` in int2vector's text form (`1 2`), which `= ANY(...)` reads.

use settledb::{Database, ReplicaIdentity, Table};

use crate::catalog::ColumnDef;
use crate::types::{Datum, SqlType};

fn col(name: &str, ty: SqlType) -> ColumnDef {
    ColumnDef { name: name.into(), ty, nullable: true }
}

/// The columns of `pg_attribute` or `pg_index`, or `None` for another name.
pub fn columns(name: &str) -> Option<Vec<ColumnDef>> {
    use SqlType::{Bool, Int2, Int4, Int8, Text};
    let cols: &[(&str, SqlType)] = match name {
        "pg_attribute" => &[
            ("attrelid", Int8),
            ("attname", Text),
            ("atttypid", Int8),
            ("attlen", Int2),
            ("attnum", Int2),
            ("atttypmod", Int4),
            ("attnotnull", Bool),
            ("atthasdef", Bool),
            ("attidentity", Text),
            ("attgenerated", Text),
            ("attisdropped", Bool),
        ],
        "pg_index" => &[
            ("indexrelid", Int8),
            ("indrelid", Int8),
            ("indnatts", Int2),
            ("indnkeyatts", Int2),
            ("indisunique", Bool),
            ("indisprimary", Bool),
            ("indisvalid", Bool),
            ("indisready", Bool),
            ("indislive", Bool),
            ("indisreplident", Bool),
            ("indkey", Text),
        ],
        _ => return None,
    };
    Some(cols.iter().map(|(n, t)| col(n, *t)).collect())
}

/// The rows of `pg_attribute` or `pg_index` now.
pub fn rows(sh: &crate::Shared, name: &str) -> Vec<Vec<Datum>> {
    match name {
        "pg_attribute" => sh.db.tables().iter().flat_map(|t| attributes(sh, t)).collect(),
        "pg_index" => sh.db.tables().iter().flat_map(|t| indexes(&sh.db, t)).collect(),
        _ => Vec::new(),
    }
}

fn attributes(sh: &crate::Shared, t: &Table) -> Vec<Vec<Datum>> {
    let nullable: Vec<bool> = t.schema().columns.iter().map(|c| c.nullable).collect();
    sh.catalog
        .columns(t)
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let ty = c.ty.pg_type();
            let len = match c.ty {
                SqlType::Bool => 1,
                SqlType::Int2 => 2,
                SqlType::Int4 | SqlType::Date => 4,
                SqlType::Int8 | SqlType::Float8 | SqlType::Timestamp => 8,
                _ => -1,
            };
            vec![
                Datum::Int(i64::from(t.oid().0)),
                Datum::Text(c.name),
                Datum::Int(i64::from(ty.oid())),
                Datum::Int(len),
                Datum::Int(i as i64 + 1),
                Datum::Int(-1),
                Datum::Bool(!nullable[i]),
                Datum::Bool(false),
                Datum::Text(String::new()),
                Datum::Text(String::new()),
                Datum::Bool(false),
            ]
        })
        .collect()
}

fn indexes(db: &Database, t: &Table) -> Vec<Vec<Datum>> {
    let replident = replica_identity_index(db, t);
    db.indexes(t)
        .into_iter()
        .map(|ix| {
            let names: Vec<&str> = t.schema().columns.iter().map(|c| c.name.as_str()).collect();
            let key: Vec<String> = ix
                .columns()
                .iter()
                .map(|c| names.iter().position(|n| n == c).map_or(0, |p| p + 1).to_string())
                .collect();
            let n = key.len() as i64;
            vec![
                Datum::Int(i64::from(ix.oid().0)),
                Datum::Int(i64::from(t.oid().0)),
                Datum::Int(n),
                Datum::Int(n),
                Datum::Bool(ix.is_unique()),
                Datum::Bool(ix.is_primary()),
                Datum::Bool(true),
                Datum::Bool(true),
                Datum::Bool(true),
                Datum::Bool(replident == Some(ix.oid().0)),
                Datum::Text(key.join(" ")),
            ]
        })
        .collect()
}

/// The OID of the index that identifies `t`'s rows to a subscriber: with replica identity
/// DEFAULT, the primary key's; none with FULL or NOTHING, or without a primary key.
fn replica_identity_index(db: &Database, t: &Table) -> Option<u32> {
    if t.replica_identity() != ReplicaIdentity::Default {
        return None;
    }
    db.indexes(t).into_iter().find(|ix| ix.is_primary()).map(|ix| ix.oid().0)
}

/// `pg_get_replica_identity_index(relid)`: that index's OID, NULL when there is none or no
/// table has that OID.
pub fn get_replica_identity_index(db: &Database, relid: &Datum) -> Datum {
    let Datum::Int(oid) = relid else { return Datum::Null };
    db.tables()
        .iter()
        .find(|t| i64::from(t.oid().0) == *oid)
        .and_then(|t| replica_identity_index(db, t))
        .map_or(Datum::Null, |o| Datum::Int(i64::from(o)))
}
