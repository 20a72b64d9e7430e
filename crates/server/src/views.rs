//! Read-only views computed from the engine's own state: `pg_stat_user_tables` and
//! `pg_stat_database`, with PostgreSQL 15's column names (a subset of the columns: those the
//! engine counts), and `pg_replication_slots` (all of PostgreSQL 15's columns; LSNs as text
//! `X/Y`, XIDs as int8, as there is no `pg_lsn` or `xid` type), and
//! `pg_stat_replication_slots` (PostgreSQL 15's columns), and `pg_locks` (the engine's table
//! and transaction locks, `Database::locks`: PostgreSQL's columns locktype, database,
//! relation, transactionid, pid (the lock owner's number), mode, granted, fastpath, plus
//! `holder`: what owns the lock, "transaction", "ddl", "vacuum", "autovacuum", or "prepared" for a
//! prepared transaction recovered at startup), and `pg_namespace` and `pg_am` (fixed rows: the
//! schemas and access methods there are), which with `pg_class`'s extra join columns
//! ([`class_extras`]) answer psql's `\dt`; and `pg_stat_activity` (PostgreSQL 15's columns: a
//! row per client session, its `state` from its transaction status, so a session running a
//! statement shows as idle; one per running autovacuum, `backend_type` `autovacuum worker`;
//! one per WAL sender; times, queries and wait events NULL), and `pg_prepared_statements` (the
//! reading session's SQL-level prepared statements, from `crate::session`'s `prepared`
//! module). They are materialized when a query reads them; a
//! SELECT may filter, sort, join and aggregate them like a table.

use settledb::Database;

use crate::catalog::ColumnDef;
use crate::types::{Datum, SqlType};

fn col(name: &str, ty: SqlType) -> ColumnDef {
    ColumnDef { name: name.into(), ty, nullable: true }
}

const USER_TABLES_COUNTS: [&str; 12] = [
    "seq_scan",
    "idx_scan",
    "n_tup_ins",
    "n_tup_upd",
    "n_tup_del",
    "n_tup_hot_upd",
    "n_live_tup",
    "n_dead_tup",
    "n_mod_since_analyze",
    "n_ins_since_vacuum",
    "vacuum_count",
    "autovacuum_count",
];

/// `pg_stat_activity`'s columns (PostgreSQL 15's; the times as text, NULL here).
const ACTIVITY_COLUMNS: [&str; 22] = [
    "datid",
    "datname",
    "pid",
    "leader_pid",
    "usesysid",
    "usename",
    "application_name",
    "client_addr",
    "client_hostname",
    "client_port",
    "backend_start",
    "xact_start",
    "query_start",
    "state_change",
    "wait_event_type",
    "wait_event",
    "state",
    "backend_xid",
    "backend_xmin",
    "query_id",
    "query",
    "backend_type",
];

const DATABASE_COUNTS: [&str; 10] = [
    "xact_commit",
    "xact_rollback",
    "blks_read",
    "blks_hit",
    "tup_returned",
    "tup_fetched",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "deadlocks",
];

const SLOT_COUNTS: [&str; 8] = [
    "spill_txns",
    "spill_count",
    "spill_bytes",
    "stream_txns",
    "stream_count",
    "stream_bytes",
    "total_txns",
    "total_bytes",
];

/// The columns of a view, or `None` when `name` is not one.
pub fn columns(name: &str) -> Option<Vec<ColumnDef>> {
    match name {
        "pg_stat_user_tables" => {
            let mut c =
                vec![col("relid", SqlType::Int8), col("schemaname", SqlType::Text), col("relname", SqlType::Text)];
            c.extend(USER_TABLES_COUNTS.iter().map(|n| col(n, SqlType::Int8)));
            c.push(col("last_vacuum", SqlType::Timestamp));
            c.push(col("last_autovacuum", SqlType::Timestamp));
            c.push(col("last_analyze", SqlType::Timestamp));
            c.push(col("last_autoanalyze", SqlType::Timestamp));
            c.push(col("analyze_count", SqlType::Int8));
            c.push(col("autoanalyze_count", SqlType::Int8));
            Some(c)
        }
        "pg_stat_database" => {
            let mut c = vec![col("datid", SqlType::Int8), col("datname", SqlType::Text)];
            c.extend(DATABASE_COUNTS.iter().map(|n| col(n, SqlType::Int8)));
            c.push(col("stats_reset", SqlType::Timestamp));
            Some(c)
        }
        "pg_replication_slots" => {
            use SqlType::{Bool, Int8, Text};
            let cols = [
                ("slot_name", Text),
                ("plugin", Text),
                ("slot_type", Text),
                ("datoid", Int8),
                ("database", Text),
                ("temporary", Bool),
                ("active", Bool),
                ("active_pid", Int8),
                ("xmin", Int8),
                ("catalog_xmin", Int8),
                ("restart_lsn", Text),
                ("confirmed_flush_lsn", Text),
                ("wal_status", Text),
                ("safe_wal_size", Int8),
                ("two_phase", Bool),
            ];
            Some(cols.into_iter().map(|(n, t)| col(n, t)).collect())
        }
        "pg_stat_replication_slots" => {
            let mut c = vec![col("slot_name", SqlType::Text)];
            c.extend(SLOT_COUNTS.iter().map(|n| col(n, SqlType::Int8)));
            c.push(col("stats_reset", SqlType::Timestamp));
            Some(c)
        }
        "pg_namespace" => {
            Some(vec![col("oid", SqlType::Int8), col("nspname", SqlType::Text), col("nspowner", SqlType::Int8)])
        }
        "pg_am" => Some(vec![col("oid", SqlType::Int8), col("amname", SqlType::Text), col("amtype", SqlType::Text)]),
        "pg_stat_activity" => Some(
            ACTIVITY_COLUMNS
                .iter()
                .map(|&n| {
                    let ty = match n {
                        "datid" | "pid" | "leader_pid" | "usesysid" | "client_port" | "backend_xid"
                        | "backend_xmin" | "query_id" => SqlType::Int8,
                        _ => SqlType::Text,
                    };
                    col(n, ty)
                })
                .collect(),
        ),
        // PostgreSQL 15's columns; addresses, LSNs and the lags (intervals) as text.
        "pg_stat_replication" => {
            use SqlType::{Int8, Text, Timestamp};
            let cols = [
                ("pid", Int8),
                ("usesysid", Int8),
                ("usename", Text),
                ("application_name", Text),
                ("client_addr", Text),
                ("client_hostname", Text),
                ("client_port", Int8),
                ("backend_start", Timestamp),
                ("backend_xmin", Int8),
                ("state", Text),
                ("sent_lsn", Text),
                ("write_lsn", Text),
                ("flush_lsn", Text),
                ("replay_lsn", Text),
                ("write_lag", Text),
                ("flush_lag", Text),
                ("replay_lag", Text),
                ("sync_priority", Int8),
                ("sync_state", Text),
                ("reply_time", Timestamp),
            ];
            Some(cols.into_iter().map(|(n, t)| col(n, t)).collect())
        }
        "pg_publication" => {
            use SqlType::{Bool, Int8, Text};
            let cols = [
                ("oid", Int8),
                ("pubname", Text),
                ("pubowner", Int8),
                ("puballtables", Bool),
                ("pubinsert", Bool),
                ("pubupdate", Bool),
                ("pubdelete", Bool),
                ("pubtruncate", Bool),
                ("pubviaroot", Bool),
            ];
            Some(cols.into_iter().map(|(n, t)| col(n, t)).collect())
        }
        // `attnames` is PostgreSQL's name[] in its text form (`{a,b}`), which a subscriber's
        // table-list query reads back as name[].
        "pg_publication_tables" => Some(
            ["pubname", "schemaname", "tablename", "attnames", "rowfilter"]
                .into_iter()
                .map(|n| col(n, SqlType::Text))
                .collect(),
        ),
        "pg_locks" => {
            use SqlType::{Bool, Int8, Text};
            let cols = [
                ("locktype", Text),
                ("database", Int8),
                ("relation", Int8),
                ("transactionid", Int8),
                ("pid", Int8),
                ("mode", Text),
                ("granted", Bool),
                ("fastpath", Bool),
                ("holder", Text),
            ];
            Some(cols.into_iter().map(|(n, t)| col(n, t)).collect())
        }
        "pg_prepared_statements" => Some(crate::session::prepared_statements_columns()),
        other => crate::sysviews::columns(other).or_else(|| crate::pgcatalog::columns(other)),
    }
}

/// PostgreSQL's fixed OIDs for what the catalog views name: the schemas, the only role
/// (`postgres`, the bootstrap superuser) and the access methods.
pub const PG_CATALOG_NAMESPACE: i64 = 11;
pub const PUBLIC_NAMESPACE: i64 = 2200;
pub const OWNER: i64 = 10;
/// The `pg_database_owner` role, which owns PostgreSQL 15's public schema.
pub const DATABASE_OWNER: i64 = 6171;
pub const HEAP_AM: i64 = 2;
pub const BTREE_AM: i64 = 403;

/// The `pg_class` columns PostgreSQL has and the engine's catalog does not keep, as a join
/// reads them: `relnamespace` (pg_catalog for the engine's catalogs, public for the rest),
/// `relowner`, `relam` (heap for tables, btree for indexes), `relnatts` (the columns),
/// `relhasindex`, `relchecks` and `relhastriggers` (CHECK constraints; a foreign key on either
/// side, [`crate::constraints`]), and what psql's `\d` reads of the features settledb does not
/// have (no rules, row security, partitions, tablespaces, typed tables or TOAST; permanent).
pub fn class_extra_columns() -> Vec<ColumnDef> {
    use SqlType::{Bool, Int2, Int8, Text};
    [
        ("relnamespace", Int8),
        ("relowner", Int8),
        ("relam", Int8),
        ("relnatts", Int2),
        ("relhasindex", Bool),
        ("relchecks", Int2),
        ("relhasrules", Bool),
        ("relhastriggers", Bool),
        ("relrowsecurity", Bool),
        ("relforcerowsecurity", Bool),
        ("relispartition", Bool),
        ("reltablespace", Int8),
        ("reloftype", Int8),
        ("reltoastrelid", Int8),
        ("relpersistence", Text),
    ]
    .into_iter()
    .map(|(n, t)| col(n, t))
    .collect()
}

/// The values of [`class_extra_columns`] for one `pg_class` row.
pub fn class_extras(sh: &crate::Shared, cols: &[ColumnDef], row: &[Datum]) -> Vec<Datum> {
    let db = &sh.db;
    let get = |n: &str| cols.iter().position(|c| c.name == n).and_then(|i| row.get(i));
    // The engine's own catalogs (pg_class, pg_publication) have OIDs below the first normal
    // one, as PostgreSQL's do, and live in pg_catalog.
    let catalog = match get("oid") {
        Some(Datum::Int(oid)) => {
            u32::try_from(*oid).is_ok_and(|o| settledb::xact::horizon::is_catalog_relation(settledb::Oid(o)))
        }
        _ => matches!(get("relname"), Some(Datum::Text(n)) if n == "pg_class"),
    };
    let index = matches!(get("relkind"), Some(Datum::Text(k)) if k == "i");
    let counts = match get("oid") {
        Some(Datum::Int(oid)) if !index => crate::constraints::pg::class_counts(sh, *oid),
        _ => (0, false),
    };
    vec![
        Datum::Int(if catalog { PG_CATALOG_NAMESPACE } else { PUBLIC_NAMESPACE }),
        Datum::Int(OWNER),
        Datum::Int(if index { BTREE_AM } else { HEAP_AM }),
        match get("relschema") {
            Some(Datum::Bytea(b)) => {
                settledb::Schema::decode(b).map_or(Datum::Null, |s| Datum::Int(s.columns.len() as i64))
            }
            _ => Datum::Null,
        },
        // relhasindex: a table some index is on.
        Datum::Bool(
            !index
                && matches!(get("relname"), Some(Datum::Text(n)) if db.table(n).is_ok_and(|t| !db.indexes(&t).is_empty())),
        ),
        // relchecks and relhastriggers (foreign keys are triggers in PostgreSQL), which psql's
        // `\d` reads to decide whether to list them.
        Datum::Int(counts.0),
        Datum::Bool(false),
        Datum::Bool(counts.1),
        Datum::Bool(false),
        Datum::Bool(false),
        Datum::Bool(false),
        Datum::Int(0),
        Datum::Int(0),
        Datum::Int(0),
        Datum::Text("p".into()),
    ]
}

/// Microseconds as PostgreSQL prints a short interval (`00:00:00.001234`); NULL for none.
fn interval(micros: Option<i64>) -> Datum {
    let Some(us) = micros else { return Datum::Null };
    let (s, frac) = (us / 1_000_000, us % 1_000_000);
    Datum::Text(format!("{:02}:{:02}:{:02}.{frac:06}", s / 3600, s / 60 % 60, s % 60))
}

/// A time kept as microseconds since the Unix epoch; NULL for 0 (never).
pub fn when(micros: u64) -> Datum {
    if micros == 0 {
        Datum::Null
    } else {
        Datum::Timestamp(micros as i64)
    }
}

/// The view's rows now, for a session whose settings are `settings` (`pg_settings`).
pub fn rows(sh: &crate::Shared, settings: &std::collections::BTreeMap<String, String>, name: &str) -> Vec<Vec<Datum>> {
    let db: &Database = &sh.db;
    let n = |x: u64| Datum::Int(x as i64);
    match name {
        "pg_stat_activity" => {
            let row = |pid: Datum, state: Option<&str>, backend_type: &str, client: bool| {
                let mut r = vec![Datum::Null; ACTIVITY_COLUMNS.len()];
                r[2] = pid;
                if client {
                    r[0] = Datum::Int(crate::sysviews::DATABASE_OID);
                    r[1] = Datum::Text("postgres".into());
                    r[4] = Datum::Int(OWNER);
                    r[5] = Datum::Text("postgres".into());
                }
                r[16] = state.map_or(Datum::Null, |s| Datum::Text(s.into()));
                r[21] = Datum::Text(backend_type.into());
                r
            };
            let mut out: Vec<Vec<Datum>> = sh
                .registry
                .sessions_now()
                .into_iter()
                .map(|(pid, status)| {
                    let state = match status {
                        crate::interrupt::TxStatus::Idle => "idle",
                        crate::interrupt::TxStatus::InBlock => "idle in transaction",
                        crate::interrupt::TxStatus::Failed => "idle in transaction (aborted)",
                    };
                    row(Datum::Int(i64::from(pid)), Some(state), "client backend", true)
                })
                .collect();
            out.extend(
                db.vacuum_progress()
                    .into_iter()
                    .filter(|p| p.autovacuum)
                    .map(|_| row(Datum::Null, None, "autovacuum worker", false)),
            );
            out.extend(
                sh.senders
                    .snapshot()
                    .into_iter()
                    .map(|s| row(Datum::Int(i64::from(s.pid)), Some("active"), "walsender", true)),
            );
            out
        }
        "pg_stat_replication" => sh
            .senders
            .snapshot()
            .into_iter()
            .map(|s| {
                let lsn = |l: settledb::Lsn| {
                    if l == settledb::Lsn::INVALID {
                        Datum::Null
                    } else {
                        Datum::Text(l.to_string())
                    }
                };
                vec![
                    Datum::Int(i64::from(s.pid)),
                    Datum::Int(OWNER),
                    Datum::Text(s.usename),
                    Datum::Text(s.application_name),
                    Datum::Text(s.client_addr),
                    Datum::Null,
                    Datum::Int(i64::from(s.client_port)),
                    Datum::Timestamp(s.started_micros),
                    Datum::Null,
                    Datum::Text("streaming".into()),
                    lsn(s.sent),
                    lsn(s.write),
                    lsn(s.flush),
                    lsn(s.replay),
                    interval(s.lags[0]),
                    interval(s.lags[1]),
                    interval(s.lags[2]),
                    Datum::Int(0),
                    Datum::Text("async".into()),
                    if s.reply_micros == 0 { Datum::Null } else { Datum::Timestamp(s.reply_micros) },
                ]
            })
            .collect(),
        "pg_stat_user_tables" => {
            let oids: std::collections::HashMap<String, u32> =
                db.tables().iter().map(|t| (t.name().to_string(), t.oid().0)).collect();
            db.all_table_stats()
                .into_iter()
                .map(|(relname, s)| {
                    let mut r =
                        vec![n(u64::from(oids.get(&relname).copied().unwrap_or(0))), Datum::Text("public".into())];
                    r.push(Datum::Text(relname));
                    for v in [
                        s.seq_scan,
                        s.idx_scan,
                        s.n_tup_ins,
                        s.n_tup_upd,
                        s.n_tup_del,
                        s.n_tup_hot_upd,
                        s.n_live_tup,
                        s.n_dead_tup,
                        s.n_mod_since_analyze,
                        s.n_ins_since_vacuum,
                        s.vacuum_count,
                        s.autovacuum_count,
                    ] {
                        r.push(n(v));
                    }
                    r.push(when(s.last_vacuum));
                    r.push(when(s.last_autovacuum));
                    // There is no autoanalyze: its time stays NULL and its count 0.
                    r.push(when(s.last_analyze));
                    r.push(Datum::Null);
                    r.push(n(s.analyze_count));
                    r.push(n(0));
                    r
                })
                .collect()
        }
        "pg_stat_database" => {
            let s = db.stats();
            let mut r = vec![Datum::Int(crate::sysviews::DATABASE_OID), Datum::Text("postgres".into())];
            for v in [
                s.xact_commit,
                s.xact_rollback,
                s.blks_read,
                s.blks_hit,
                s.tup_returned,
                s.tup_fetched,
                s.tup_inserted,
                s.tup_updated,
                s.tup_deleted,
                s.deadlocks,
            ] {
                r.push(n(v));
            }
            r.push(when(s.stats_reset));
            vec![r]
        }
        "pg_replication_slots" => db
            .replication_slots()
            .into_iter()
            .map(|mut s| {
                // A slot a replication connection is streaming, or a session owns as
                // temporary, is active for that connection's process ID (the engine itself
                // never holds one for long).
                if let Some(pid) = sh.senders.active_pid(&s.slot_name) {
                    s.active = true;
                    s.active_pid = Some(pid as _);
                }
                let opt = |x: Option<i64>| x.map_or(Datum::Null, Datum::Int);
                let text = |x: Option<String>| x.map_or(Datum::Null, Datum::Text);
                vec![
                    Datum::Text(s.slot_name),
                    Datum::Text(s.plugin),
                    Datum::Text(s.slot_type.into()),
                    n(u64::from(s.datoid.0)),
                    Datum::Text(s.database),
                    Datum::Bool(s.temporary),
                    Datum::Bool(s.active),
                    opt(s.active_pid.map(i64::from)),
                    opt(s.xmin.map(|x| i64::from(x.0))),
                    opt(s.catalog_xmin.map(|x| i64::from(x.0))),
                    text(s.restart_lsn.map(|l| l.to_string())),
                    text(s.confirmed_flush_lsn.map(|l| l.to_string())),
                    text(s.wal_status.map(|w| w.as_str().to_string())),
                    opt(s.safe_wal_size),
                    Datum::Bool(s.two_phase),
                ]
            })
            .collect(),
        // PostgreSQL 15's public schema belongs to the pg_database_owner role.
        "pg_namespace" => [
            (PG_CATALOG_NAMESPACE, "pg_catalog", OWNER),
            (99, "pg_toast", OWNER),
            (PUBLIC_NAMESPACE, "public", DATABASE_OWNER),
        ]
        .into_iter()
        .map(|(oid, name, owner)| vec![Datum::Int(oid), Datum::Text(name.into()), Datum::Int(owner)])
        .collect(),
        "pg_publication" => db
            .publications()
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let all = matches!(p.tables, settledb::catalog::publication::PublicationTables::All);
                let a = p.actions;
                vec![
                    Datum::Int(i64::from(p.oid.0)),
                    Datum::Text(p.name),
                    Datum::Int(OWNER),
                    Datum::Bool(all),
                    Datum::Bool(a.insert),
                    Datum::Bool(a.update),
                    Datum::Bool(a.delete),
                    Datum::Bool(a.truncate),
                    Datum::Bool(false),
                ]
            })
            .collect(),
        "pg_publication_tables" => {
            let tables = db.tables();
            let mut out = Vec::new();
            for p in db.publications().unwrap_or_default() {
                let published = |t: &&settledb::Table| {
                    !settledb::xact::horizon::is_catalog_relation(t.oid()) && p.includes(t.oid())
                };
                for t in tables.iter().filter(published) {
                    let names: Vec<&str> = t.schema().columns.iter().map(|c| c.name.as_str()).collect();
                    out.push(vec![
                        Datum::Text(p.name.clone()),
                        Datum::Text("public".into()),
                        Datum::Text(t.name().to_string()),
                        Datum::Text(format!("{{{}}}", names.join(","))),
                        Datum::Null,
                    ]);
                }
            }
            out
        }
        "pg_am" => [(HEAP_AM, "heap", "t"), (BTREE_AM, "btree", "i")]
            .into_iter()
            .map(|(oid, name, ty)| vec![Datum::Int(oid), Datum::Text(name.into()), Datum::Text(ty.into())])
            .collect(),
        "pg_locks" => db
            .locks()
            .into_iter()
            .map(|l| {
                let opt = |x: Option<u32>| x.map_or(Datum::Null, |v| Datum::Int(i64::from(v)));
                vec![
                    Datum::Text(l.locktype.into()),
                    Datum::Int(1),
                    opt(l.relation.map(|o| o.0)),
                    opt(l.transactionid.map(|x| x.0)),
                    Datum::Int(l.owner.0 as i64),
                    Datum::Text(l.mode.name().into()),
                    Datum::Bool(l.granted),
                    Datum::Bool(l.fastpath),
                    Datum::Text(l.owner_kind.into()),
                ]
            })
            .collect(),
        "pg_stat_replication_slots" => db
            .replication_slot_stats()
            .into_iter()
            .map(|(name, s)| {
                let mut r = vec![Datum::Text(name)];
                for v in [
                    s.spill_txns,
                    s.spill_count,
                    s.spill_bytes,
                    s.stream_txns,
                    s.stream_count,
                    s.stream_bytes,
                    s.total_txns,
                    s.total_bytes,
                ] {
                    r.push(n(v));
                }
                r.push(when(s.stats_reset));
                r
            })
            .collect(),
        "pg_prepared_statements" => crate::session::prepared_statements_rows(),
        other if crate::sysviews::columns(other).is_some() => crate::sysviews::rows(db, settings, other),
        other => crate::pgcatalog::rows(sh, other),
    }
}
