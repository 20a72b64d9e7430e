//! The statistics and settings views a PostgreSQL user reads, with PostgreSQL 15's column
//! names, computed when a query reads them:
//!
//! - `pg_database`: the one database, `postgres`, with `datfrozenxid` the engine's database
//!   frozen XID (the oldest `relfrozenxid`; `age(datfrozenxid)` works) and UTF8, C collation;
//!   `pg_encoding_to_char` names its encoding, so psql's `\l` lists it.
//! - `pg_settings`: every parameter SHOW ALL lists, for this session (a SET shows): `setting`
//!   is SHOW's text, with its unit in it (`128MB`; PostgreSQL prints `16384` and `unit` `8kB`,
//!   so `unit` is NULL here), `context` (`user` for what SET changes, `sighup` for what
//!   `ALTER SYSTEM` and `pg_reload_conf()` change (crate::autoconf), `postmaster` for what the
//!   directory's open reads, `internal` for the fixed ones), `vartype` as the value reads,
//!   `source` (`session`, `configuration file` for a value from `ALTER SYSTEM`'s
//!   `postgresql.auto.conf`, `command line` for a `settle serve --set` value, else `default`).
//! - `pg_stat_wal`: WAL records, full-page images and bytes, writes forced by full WAL buffers,
//!   writes and fsyncs, kept across clean restarts; the write and sync times are not timed
//!   (PostgreSQL times them only with `track_wal_io_timing`, off by default: 0 there too).
//! - `pg_statio_user_tables`: each table's heap blocks read and found in the buffer pool; the
//!   index columns are NULL (index blocks are not counted per table) and so are the TOAST ones
//!   (there is no TOAST, as PostgreSQL's NULL for a table without).
//! - `pg_stat_progress_vacuum`: a row per running VACUUM, PostgreSQL 15's columns and PostgreSQL
//!   17's (`max_dead_tuple_bytes`, `dead_tuple_bytes`, `num_dead_item_ids`, `indexes_total`,
//!   `indexes_processed`), since the dead TIDs are kept in a TID store whose capacity is
//!   bytes, not a count: `max_dead_tuples` is what PostgreSQL 15's 6-byte array would hold in
//!   the same memory, `num_dead_tuples` the dead item IDs collected. `pid` is NULL (a VACUUM
//!   is not tied to a backend process) and `autovacuum` says whose it is.

use std::collections::BTreeMap;

use settledb::Database;

use crate::catalog::ColumnDef;
use crate::types::{Datum, SqlType};
use crate::views::OWNER;

/// `pg_database.oid` of `postgres`, as PostgreSQL's initdb gives it.
pub const DATABASE_OID: i64 = 5;
/// `pg_database.encoding` for UTF8.
const UTF8: i64 = 6;

fn col(name: &str, ty: SqlType) -> ColumnDef {
    ColumnDef { name: name.into(), ty, nullable: true }
}

/// The columns of one of these views, or `None` for another name.
pub fn columns(name: &str) -> Option<Vec<ColumnDef>> {
    use SqlType::{Bool, Int4, Int8, Text, Timestamp};
    let cols: &[(&str, SqlType)] = match name {
        "pg_database" => &[
            ("oid", Int8),
            ("datname", Text),
            ("datdba", Int8),
            ("encoding", Int4),
            ("datlocprovider", Text),
            ("datistemplate", Bool),
            ("datallowconn", Bool),
            ("datconnlimit", Int4),
            ("datfrozenxid", Int8),
            ("datminmxid", Int8),
            ("dattablespace", Int8),
            ("datcollate", Text),
            ("datctype", Text),
            ("daticulocale", Text),
            ("datcollversion", Text),
            ("datacl", Text),
        ],
        "pg_settings" => &[
            ("name", Text),
            ("setting", Text),
            ("unit", Text),
            ("context", Text),
            ("vartype", Text),
            ("source", Text),
            ("pending_restart", Bool),
        ],
        "pg_stat_wal" => &[
            ("wal_records", Int8),
            ("wal_fpi", Int8),
            ("wal_bytes", Int8),
            ("wal_buffers_full", Int8),
            ("wal_write", Int8),
            ("wal_sync", Int8),
            ("wal_write_time", SqlType::Float8),
            ("wal_sync_time", SqlType::Float8),
            ("stats_reset", Timestamp),
        ],
        "pg_statio_user_tables" => &[
            ("relid", Int8),
            ("schemaname", Text),
            ("relname", Text),
            ("heap_blks_read", Int8),
            ("heap_blks_hit", Int8),
            ("idx_blks_read", Int8),
            ("idx_blks_hit", Int8),
            ("toast_blks_read", Int8),
            ("toast_blks_hit", Int8),
            ("tidx_blks_read", Int8),
            ("tidx_blks_hit", Int8),
        ],
        "pg_stat_progress_vacuum" => &[
            ("pid", Int4),
            ("datid", Int8),
            ("datname", Text),
            ("relid", Int8),
            ("phase", Text),
            ("heap_blks_total", Int8),
            ("heap_blks_scanned", Int8),
            ("heap_blks_vacuumed", Int8),
            ("index_vacuum_count", Int8),
            ("max_dead_tuples", Int8),
            ("num_dead_tuples", Int8),
            ("max_dead_tuple_bytes", Int8),
            ("dead_tuple_bytes", Int8),
            ("num_dead_item_ids", Int8),
            ("indexes_total", Int8),
            ("indexes_processed", Int8),
            ("autovacuum", Bool),
        ],
        _ => return None,
    };
    Some(cols.iter().map(|(n, t)| col(n, *t)).collect())
}

fn n(v: u64) -> Datum {
    Datum::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

/// The rows of one of these views now, for a session whose settings are `settings`.
pub fn rows(db: &Database, settings: &BTreeMap<String, String>, name: &str) -> Vec<Vec<Datum>> {
    match name {
        "pg_database" => vec![vec![
            Datum::Int(DATABASE_OID),
            Datum::Text("postgres".into()),
            Datum::Int(OWNER),
            Datum::Int(UTF8),
            Datum::Text("c".into()),
            Datum::Bool(false),
            Datum::Bool(true),
            Datum::Int(-1),
            Datum::Int(i64::from(db.datfrozenxid().0)),
            Datum::Int(1),
            Datum::Int(1663),
            Datum::Text("C".into()),
            Datum::Text("C".into()),
            Datum::Null,
            Datum::Null,
            Datum::Null,
        ]],
        "pg_settings" => {
            let auto = crate::autoconf::read(db.dir()).unwrap_or_default();
            crate::settings::show_all(db, settings)
                .into_iter()
                .map(|(name, value)| {
                    let kind = crate::settings::kind(db, settings, &auto, &name);
                    vec![
                        Datum::Text(name),
                        Datum::Text(value.clone()),
                        Datum::Null,
                        Datum::Text(kind.context.into()),
                        Datum::Text(vartype(&value).into()),
                        Datum::Text(kind.source.into()),
                        Datum::Bool(false),
                    ]
                })
                .collect()
        }
        "pg_stat_wal" => {
            let s = db.stats();
            vec![vec![
                n(s.wal_records),
                n(s.wal_fpi),
                n(s.wal_bytes),
                n(s.wal_buffers_full),
                n(s.wal_write),
                n(s.wal_sync),
                Datum::Float(0.0),
                Datum::Float(0.0),
                crate::views::when(s.stats_reset),
            ]]
        }
        "pg_statio_user_tables" => {
            let oids: std::collections::HashMap<String, u32> =
                db.tables().iter().map(|t| (t.name().to_string(), t.oid().0)).collect();
            db.all_table_stats()
                .into_iter()
                .map(|(relname, s)| {
                    let mut r = vec![
                        n(u64::from(oids.get(&relname).copied().unwrap_or(0))),
                        Datum::Text("public".into()),
                        Datum::Text(relname),
                        n(s.heap_blks_read),
                        n(s.heap_blks_hit),
                    ];
                    r.extend(std::iter::repeat_n(Datum::Null, 6));
                    r
                })
                .collect()
        }
        "pg_stat_progress_vacuum" => db
            .vacuum_progress()
            .into_iter()
            .map(|p| {
                let relid = db.table(&p.relname).map_or(Datum::Null, |t| Datum::Int(i64::from(t.oid().0)));
                vec![
                    Datum::Null,
                    Datum::Int(DATABASE_OID),
                    Datum::Text("postgres".into()),
                    relid,
                    Datum::Text(p.phase.into()),
                    n(u64::from(p.heap_blks_total)),
                    n(u64::from(p.heap_blks_scanned)),
                    n(u64::from(p.heap_blks_vacuumed)),
                    n(u64::from(p.index_vacuum_count)),
                    n(p.max_dead_tuple_bytes / 6),
                    n(p.num_dead_item_ids),
                    n(p.max_dead_tuple_bytes),
                    n(p.dead_tuple_bytes),
                    n(p.num_dead_item_ids),
                    n(u64::from(p.indexes_total)),
                    n(u64::from(p.indexes_processed)),
                    Datum::Bool(p.autovacuum),
                ]
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `pg_settings.vartype` as the value reads: `bool`, `integer`, `real` or `string`.
fn vartype(value: &str) -> &'static str {
    match value {
        "on" | "off" => "bool",
        v if v.parse::<i64>().is_ok() => "integer",
        v if v.parse::<f64>().is_ok() => "real",
        _ => "string",
    }
}

/// `pg_encoding_to_char(encoding)`: the encoding's name (only UTF8 exists here).
pub fn encoding_name(code: &Datum) -> Datum {
    match code {
        Datum::Int(UTF8) => Datum::Text("UTF8".into()),
        Datum::Int(_) => Datum::Text(String::new()),
        _ => Datum::Null,
    }
}
