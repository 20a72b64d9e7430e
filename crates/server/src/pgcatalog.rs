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
//! none dropped or generated; `atttypid` the type's OID as pgoutput sends it) and per key
//! column of every index (`attrelid` the index's OID, as psql's `\d index` reads them);
//! `pg_index` a row per index, its `indkey` in int2vector's text form (`1 2`), which
//! `= ANY(...)` reads.
//!
//! `pg_roles` and `pg_user` list the roles of `crate::roles` (passwords shown as `********`,
//! as PostgreSQL's views show them); `pg_auth_members` is empty: there is no role membership.
//! There is no `pg_authid` (its `rolpassword` would need the reading session's role).
//!
//! For psql's `\d table` there are also `pg_attrdef` (a row per column default, `adbin` the
//! default's SQL text, which `pg_get_expr` returns), `pg_type` and `pg_collation` (the types
//! settledb has; the default, C and POSIX collations), `pg_constraint` (see
//! [`crate::constraints::pg`]), and the catalogs of features settledb does not
//! have, empty with PostgreSQL's columns: `pg_policy`, `pg_statistic_ext`, `pg_inherits`,
//! `pg_publication_namespace`; `pg_publication_rel` lists the tables a publication names. The functions: `format_type`, `pg_get_indexdef`,
//! `pg_get_constraintdef` (identifiers quoted as PostgreSQL's `quote_identifier` quotes them),
//! `pg_relation_is_publishable`, `pg_encoding_to_char`.

use settledb::decode::test_decoding::quote_identifier;
use settledb::{Database, ReplicaIdentity, Table};

use crate::catalog::ColumnDef;
use crate::roles::Role;
use crate::types::{Datum, SqlType};
use crate::views::{OWNER, PG_CATALOG_NAMESPACE};

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
            ("attcollation", Int8),
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
            ("indisclustered", Bool),
            ("indimmediate", Bool),
            ("indisexclusion", Bool),
            ("indnullsnotdistinct", Bool),
            ("indpred", Text),
            ("indexprs", Text),
        ],
        "pg_auth_members" => {
            &[("oid", Int8), ("roleid", Int8), ("member", Int8), ("grantor", Int8), ("admin_option", Bool)]
        }
        "pg_attrdef" => &[("oid", Int8), ("adrelid", Int8), ("adnum", Int2), ("adbin", Text)],
        "pg_type" => &[
            ("oid", Int8),
            ("typname", Text),
            ("typnamespace", Int8),
            ("typowner", Int8),
            ("typlen", Int2),
            ("typtype", Text),
            ("typcategory", Text),
            ("typcollation", Int8),
        ],
        "pg_collation" => {
            &[("oid", Int8), ("collname", Text), ("collnamespace", Int8), ("collowner", Int8), ("collprovider", Text)]
        }
        "pg_constraint" => return Some(crate::constraints::pg::columns()),
        "pg_policy" => &[
            ("oid", Int8),
            ("polname", Text),
            ("polrelid", Int8),
            ("polcmd", Text),
            ("polpermissive", Bool),
            ("polroles", Text),
            ("polqual", Text),
            ("polwithcheck", Text),
        ],
        "pg_statistic_ext" => &[
            ("oid", Int8),
            ("stxrelid", Int8),
            ("stxname", Text),
            ("stxnamespace", Int8),
            ("stxowner", Int8),
            ("stxstattarget", Int4),
            ("stxkeys", Text),
            ("stxkind", Text),
        ],
        "pg_inherits" => &[("inhrelid", Int8), ("inhparent", Int8), ("inhseqno", Int4), ("inhdetachpending", Bool)],
        "pg_publication_namespace" => &[("oid", Int8), ("pnpubid", Int8), ("pnnspid", Int8)],
        "pg_publication_rel" => {
            &[("oid", Int8), ("prpubid", Int8), ("prrelid", Int8), ("prqual", Text), ("prattrs", Text)]
        }
        "pg_roles" => &[
            ("rolname", Text),
            ("rolsuper", Bool),
            ("rolinherit", Bool),
            ("rolcreaterole", Bool),
            ("rolcreatedb", Bool),
            ("rolcanlogin", Bool),
            ("rolreplication", Bool),
            ("rolconnlimit", Int4),
            ("rolpassword", Text),
            ("rolvaliduntil", SqlType::Timestamp),
            ("rolbypassrls", Bool),
            ("rolconfig", Text),
            ("oid", Int8),
        ],
        "pg_user" => &[
            ("usename", Text),
            ("usesysid", Int8),
            ("usecreatedb", Bool),
            ("usesuper", Bool),
            ("userepl", Bool),
            ("usebypassrls", Bool),
            ("passwd", Text),
            ("valuntil", SqlType::Timestamp),
            ("useconfig", Text),
        ],
        _ => return None,
    };
    Some(cols.iter().map(|(n, t)| col(n, *t)).collect())
}

/// The rows of `pg_attribute` or `pg_index` now.
pub fn rows(sh: &crate::Shared, name: &str) -> Vec<Vec<Datum>> {
    match name {
        "pg_attribute" => sh
            .db
            .tables()
            .iter()
            .flat_map(|t| {
                let mut rows = attributes(sh, t);
                rows.extend(index_attributes(sh, t));
                rows
            })
            .collect(),
        "pg_index" => sh.db.tables().iter().flat_map(|t| indexes(&sh.db, t)).collect(),
        "pg_attrdef" => sh.db.tables().iter().flat_map(|t| defaults(sh, t)).collect(),
        "pg_type" => TYPES
            .iter()
            .map(|&(ty, name, len, category)| {
                vec![
                    Datum::Int(i64::from(ty.pg_type().oid())),
                    Datum::Text(name.into()),
                    Datum::Int(PG_CATALOG_NAMESPACE),
                    Datum::Int(OWNER),
                    Datum::Int(len),
                    Datum::Text("b".into()),
                    Datum::Text(category.into()),
                    Datum::Int(collation(ty)),
                ]
            })
            .collect(),
        "pg_collation" => [(DEFAULT_COLLATION, "default", "d"), (950, "C", "c"), (951, "POSIX", "c")]
            .into_iter()
            .map(|(oid, name, provider)| {
                vec![
                    Datum::Int(oid),
                    Datum::Text(name.into()),
                    Datum::Int(PG_CATALOG_NAMESPACE),
                    Datum::Int(OWNER),
                    Datum::Text(provider.into()),
                ]
            })
            .collect(),
        "pg_constraint" => crate::constraints::pg::rows(sh),
        "pg_publication_rel" => publication_rels(&sh.db),
        "pg_roles" => sh.roles.all().iter().map(role_row).collect(),
        "pg_user" => sh.roles.all().iter().filter(|r| r.login).map(user_row).collect(),
        _ => Vec::new(),
    }
}

/// The attributes settledb does not keep (CREATEROLE, CREATEDB, REPLICATION, BYPASSRLS):
/// the bootstrap superuser has them, as `initdb` makes it; other roles do not.
fn initdb_attributes(r: &Role) -> bool {
    r.oid == crate::roles::BOOTSTRAP_OID
}

/// A `pg_roles` row: the password is never shown, only that it is hidden (`********`, as
/// PostgreSQL's view shows it whether or not there is one).
fn role_row(r: &Role) -> Vec<Datum> {
    let extra = initdb_attributes(r);
    vec![
        Datum::Text(r.name.clone()),
        Datum::Bool(r.superuser),
        Datum::Bool(true),
        Datum::Bool(extra),
        Datum::Bool(extra),
        Datum::Bool(r.login),
        Datum::Bool(extra),
        Datum::Int(-1),
        Datum::Text("********".into()),
        Datum::Null,
        Datum::Bool(extra),
        Datum::Null,
        Datum::Int(r.oid),
    ]
}

/// A `pg_user` row (roles that can log in).
fn user_row(r: &Role) -> Vec<Datum> {
    let extra = initdb_attributes(r);
    vec![
        Datum::Text(r.name.clone()),
        Datum::Int(r.oid),
        Datum::Bool(extra),
        Datum::Bool(r.superuser),
        Datum::Bool(extra),
        Datum::Bool(extra),
        Datum::Text("********".into()),
        Datum::Null,
        Datum::Null,
    ]
}

fn attributes(sh: &crate::Shared, t: &Table) -> Vec<Vec<Datum>> {
    let nullable: Vec<bool> = t.schema().columns.iter().map(|c| c.nullable).collect();
    let defaults = sh.catalog.defaults(t);
    let has_default = |i: usize| defaults.as_ref().is_some_and(|d| d.get(i).is_some_and(Option::is_some));
    sh.catalog
        .columns(t)
        .iter()
        .enumerate()
        .map(|(i, c)| attribute_row(t.oid().0, c, i + 1, !nullable[i], has_default(i)))
        .collect()
}

/// The attributes of `t`'s indexes, as PostgreSQL lists an index's key columns: attached to
/// the index's OID, named and typed as the table's columns, numbered from 1.
fn index_attributes(sh: &crate::Shared, t: &Table) -> Vec<Vec<Datum>> {
    let cols = sh.catalog.columns(t);
    let mut out = Vec::new();
    for ix in sh.db.indexes(t) {
        for (k, name) in ix.columns().iter().enumerate() {
            if let Some(c) = cols.iter().find(|c| &c.name == name) {
                out.push(attribute_row(ix.oid().0, c, k + 1, false, false));
            }
        }
    }
    out
}

/// One `pg_attribute` row (no system, dropped, identity or generated columns here).
fn attribute_row(relid: u32, c: &ColumnDef, attnum: usize, notnull: bool, hasdef: bool) -> Vec<Datum> {
    vec![
        Datum::Int(i64::from(relid)),
        Datum::Text(c.name.clone()),
        Datum::Int(i64::from(c.ty.pg_type().oid())),
        Datum::Int(type_len(c.ty)),
        Datum::Int(attnum as i64),
        Datum::Int(i64::from(typmod(c.ty))),
        Datum::Bool(notnull),
        Datum::Bool(hasdef),
        Datum::Text(String::new()),
        Datum::Text(String::new()),
        Datum::Bool(false),
        Datum::Int(collation(c.ty)),
    ]
}

/// `attlen`: the fixed length of a type's values, -1 for variable-length ones.
fn type_len(ty: SqlType) -> i64 {
    match ty {
        SqlType::Bool => 1,
        SqlType::Int2 => 2,
        SqlType::Int4 | SqlType::Date => 4,
        SqlType::Int8 | SqlType::Float8 | SqlType::Timestamp => 8,
        _ => -1,
    }
}

fn indexes(db: &Database, t: &Table) -> Vec<Vec<Datum>> {
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
                // Only REPLICA IDENTITY USING INDEX marks an index (settledb has no such
                // identity; DEFAULT uses the primary key without marking it).
                Datum::Bool(false),
                Datum::Text(key.join(" ")),
                Datum::Bool(false),
                // Constraints are checked at once (nothing is deferrable), no exclusion
                // constraints, NULLs distinct, no partial or expression indexes.
                Datum::Bool(true),
                Datum::Bool(false),
                Datum::Bool(false),
                Datum::Null,
                Datum::Null,
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

/// The types settledb has, as `pg_type` lists them: name, length, category.
const TYPES: [(SqlType, &str, i64, &str); 14] = [
    (SqlType::Bool, "bool", 1, "B"),
    (SqlType::Int2, "int2", 2, "N"),
    (SqlType::Int4, "int4", 4, "N"),
    (SqlType::Int8, "int8", 8, "N"),
    (SqlType::Numeric { precision: 18, scale: 0 }, "numeric", -1, "N"),
    (SqlType::Float8, "float8", 8, "N"),
    (SqlType::Text, "text", -1, "S"),
    (SqlType::Varchar(None), "varchar", -1, "S"),
    (SqlType::Char(1), "bpchar", -1, "S"),
    (SqlType::Timestamp, "timestamp", 8, "D"),
    (SqlType::TimestampTz, "timestamptz", 8, "D"),
    (SqlType::Interval, "interval", 16, "T"),
    (SqlType::Date, "date", 4, "D"),
    (SqlType::Bytea, "bytea", -1, "U"),
];

/// The OID of the database's default collation, which text types use.
const DEFAULT_COLLATION: i64 = 100;

/// A type's collation: the default for the text types, none (0) for the rest.
fn collation(ty: SqlType) -> i64 {
    match ty {
        SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_) => DEFAULT_COLLATION,
        _ => 0,
    }
}

/// PostgreSQL's type modifier: `numeric(p,s)` is `(p << 16 | s) + 4`, `varchar(n)` and
/// `char(n)` are `n + 4`, everything else -1.
fn typmod(ty: SqlType) -> i32 {
    match ty {
        SqlType::Numeric { precision, scale } => ((i32::from(precision) << 16) | i32::from(scale)) + 4,
        SqlType::Varchar(Some(n)) | SqlType::Char(n) => i32::try_from(n).map_or(-1, |n| n.saturating_add(4)),
        _ => -1,
    }
}

/// `format_type(type_oid, typmod)`: the type's SQL name with its modifier, as `\d` prints it
/// (`numeric(12,2)`, `character varying(20)`); `???` for a type settledb does not have.
pub fn format_type(oid: &Datum, typmod: &Datum) -> Datum {
    let Datum::Int(oid) = oid else { return Datum::Null };
    let m = match typmod {
        Datum::Int(m) => *m,
        _ => -1,
    };
    let Some(ty) = u32::try_from(*oid).ok().and_then(SqlType::from_oid) else { return Datum::Text("???".into()) };
    let args = (m >= 4).then(|| m - 4);
    Datum::Text(match (ty, args) {
        (SqlType::Numeric { .. }, Some(a)) => format!("numeric({},{})", (a >> 16) & 0xffff, a & 0xffff),
        (SqlType::Numeric { .. }, None) => "numeric".into(),
        (SqlType::Varchar(_), a) => SqlType::Varchar(a.and_then(|n| u32::try_from(n).ok())).display(),
        (SqlType::Char(_), Some(n)) => SqlType::Char(u32::try_from(n).unwrap_or(1)).display(),
        (SqlType::Char(_), None) => "bpchar".into(),
        (ty, _) => ty.display(),
    })
}

fn defaults(sh: &crate::Shared, t: &Table) -> Vec<Vec<Datum>> {
    let Some(defaults) = sh.catalog.defaults(t) else { return Vec::new() };
    defaults
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let d = d.as_ref()?;
            // PostgreSQL's pg_attrdef rows have OIDs of their own; these are made unique
            // from the table's OID and the column's number.
            let oid = (i64::from(t.oid().0) << 11) | i as i64;
            Some(vec![
                Datum::Int(oid),
                Datum::Int(i64::from(t.oid().0)),
                Datum::Int(i as i64 + 1),
                Datum::Text(d.to_string()),
            ])
        })
        .collect()
}

/// A row per table a `FOR TABLE` publication names (a `FOR ALL TABLES` one has none).
fn publication_rels(db: &Database) -> Vec<Vec<Datum>> {
    use settledb::catalog::publication::PublicationTables;
    let mut out = Vec::new();
    for p in db.publications().unwrap_or_default() {
        if let PublicationTables::Some(tables) = &p.tables {
            for t in tables {
                let oid = (i64::from(p.oid.0) << 32) | i64::from(t.0);
                out.push(vec![
                    Datum::Int(oid),
                    Datum::Int(i64::from(p.oid.0)),
                    Datum::Int(i64::from(t.0)),
                    Datum::Null,
                    Datum::Null,
                ]);
            }
        }
    }
    out
}

/// The table an index with this OID is on, and the index.
fn find_index(db: &Database, oid: &Datum) -> Option<(Table, settledb::Index)> {
    let Datum::Int(oid) = oid else { return None };
    db.tables().into_iter().find_map(|t| {
        let ix = db.indexes(&t).into_iter().find(|ix| i64::from(ix.oid().0) == *oid)?;
        Some((t, ix))
    })
}

/// Catalog functions that read the database, or `None` for another name.
pub fn call(db: &Database, name: &str, args: &[Datum]) -> Option<Datum> {
    let arg = |i: usize| args.get(i).unwrap_or(&Datum::Null);
    Some(match name {
        "format_type" => format_type(arg(0), arg(1)),
        // `pg_get_indexdef(index [, column, pretty])`: the CREATE INDEX statement, or with a
        // column number above 0 that key column's name.
        "pg_get_indexdef" => match find_index(db, arg(0)) {
            None => Datum::Null,
            Some((t, ix)) => match arg(1) {
                Datum::Int(k) if *k > 0 => {
                    ix.columns().get(*k as usize - 1).map_or(Datum::Null, |c| Datum::Text(quote_identifier(c)))
                }
                _ => {
                    let cols: Vec<String> = ix.columns().iter().map(|c| quote_identifier(c)).collect();
                    Datum::Text(format!(
                        "CREATE {}INDEX {} ON public.{} USING btree ({})",
                        if ix.is_unique() { "UNIQUE " } else { "" },
                        quote_identifier(ix.name()),
                        quote_identifier(t.name()),
                        cols.join(", ")
                    ))
                }
            },
        },
        // The only constraints are primary keys, whose OIDs are their indexes'.
        "pg_get_constraintdef" => match find_index(db, arg(0)) {
            Some((_, ix)) if ix.is_primary() => {
                let cols: Vec<String> = ix.columns().iter().map(|c| quote_identifier(c)).collect();
                Datum::Text(format!("PRIMARY KEY ({})", cols.join(", ")))
            }
            _ => Datum::Null,
        },
        "pg_encoding_to_char" => crate::sysviews::encoding_name(arg(0)),
        // A user table can be published; a catalog cannot.
        "pg_relation_is_publishable" => match arg(0) {
            Datum::Null => Datum::Null,
            d => {
                let oid = match d {
                    Datum::Int(o) => Some(*o),
                    other => other.to_text().and_then(|s| s.parse::<i64>().ok()),
                };
                Datum::Bool(db.tables().iter().any(|t| {
                    Some(i64::from(t.oid().0)) == oid && !settledb::xact::horizon::is_catalog_relation(t.oid())
                }))
            }
        },
        _ => return None,
    })
}
