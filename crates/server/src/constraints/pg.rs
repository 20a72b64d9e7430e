//! `pg_constraint` with PostgreSQL 15's columns (those clients read) and
//! `pg_get_constraintdef(oid [, pretty])`, so psql's `\d table` prints its "Check
//! constraints:", "Foreign-key constraints:" and "Referenced by:" sections and marks UNIQUE
//! constraints' indexes `UNIQUE CONSTRAINT`.
//!
//! A primary key's row comes from the engine (its OID is its index's, as a UNIQUE
//! constraint's is); CHECK and FOREIGN KEY rows from [`super::Constraints`]. Nothing is
//! deferrable and everything is validated.

use settledb::decode::test_decoding::quote_identifier;
use settledb::Table;

use super::{check, Kind};
use crate::catalog::ColumnDef;
use crate::types::{Datum, SqlType};
use crate::views::PUBLIC_NAMESPACE;
use crate::Shared;

/// The columns of `pg_constraint`.
pub fn columns() -> Vec<ColumnDef> {
    use SqlType::{Bool, Int8, Text};
    [
        ("oid", Int8),
        ("conname", Text),
        ("connamespace", Int8),
        ("contype", Text),
        ("condeferrable", Bool),
        ("condeferred", Bool),
        ("convalidated", Bool),
        ("conrelid", Int8),
        ("contypid", Int8),
        ("conindid", Int8),
        ("conparentid", Int8),
        ("confrelid", Int8),
        ("conislocal", Bool),
        ("conkey", Text),
        ("confkey", Text),
        ("confupdtype", Text),
        ("confdeltype", Text),
        ("confmatchtype", Text),
        ("conbin", Text),
    ]
    .iter()
    .map(|(n, t)| ColumnDef { name: (*n).into(), ty: *t, nullable: true })
    .collect()
}

fn array(positions: impl IntoIterator<Item = usize>) -> Datum {
    let v: Vec<String> = positions.into_iter().map(|p| (p + 1).to_string()).collect();
    Datum::Text(format!("{{{}}}", v.join(",")))
}

fn positions_of(t: &Table, names: &[String]) -> Vec<usize> {
    names.iter().filter_map(|n| t.schema().columns.iter().position(|c| &c.name == n)).collect()
}

/// One row: (oid, name, type, table, index, parent, conkey, confkey, upd, del, match, conbin).
#[expect(clippy::too_many_arguments, reason = "one pg_constraint row's fields, or the action's whole context")]
fn row(
    oid: u32,
    name: &str,
    contype: &str,
    table: u32,
    index: u32,
    parent: u32,
    conkey: Datum,
    confkey: Datum,
    actions: (char, char, char),
    conbin: Datum,
) -> Vec<Datum> {
    vec![
        Datum::Int(i64::from(oid)),
        Datum::Text(name.into()),
        Datum::Int(PUBLIC_NAMESPACE),
        Datum::Text(contype.into()),
        Datum::Bool(false),
        Datum::Bool(false),
        Datum::Bool(true),
        Datum::Int(i64::from(table)),
        Datum::Int(0),
        Datum::Int(i64::from(index)),
        Datum::Int(0),
        Datum::Int(i64::from(parent)),
        Datum::Bool(true),
        conkey,
        confkey,
        Datum::Text(actions.0.to_string()),
        Datum::Text(actions.1.to_string()),
        Datum::Text(actions.2.to_string()),
        conbin,
    ]
}

/// The rows of `pg_constraint` now.
pub fn rows(sh: &Shared) -> Vec<Vec<Datum>> {
    let none = (' ', ' ', ' ');
    let mut out = Vec::new();
    for t in sh.db.tables() {
        if let Some(ix) = sh.db.indexes(&t).into_iter().find(|ix| ix.is_primary()) {
            let key = array(positions_of(&t, &ix.columns()));
            out.push(row(ix.oid().0, ix.name(), "p", t.oid().0, ix.oid().0, 0, key, Datum::Null, none, Datum::Null));
        }
    }
    for c in sh.constraints.all() {
        let Some(t) = sh.db.table_by_oid(settledb::Oid(c.table)) else { continue };
        match &c.kind {
            Kind::Unique => {
                let Some(ix) = sh.db.indexes(&t).into_iter().find(|ix| ix.oid().0 == c.oid) else { continue };
                let key = array(positions_of(&t, &ix.columns()));
                out.push(row(c.oid, ix.name(), "u", c.table, c.oid, 0, key, Datum::Null, none, Datum::Null));
            }
            Kind::Check { text, columns } => {
                let key = array(columns.iter().map(|(p, _)| *p));
                out.push(row(c.oid, &c.name, "c", c.table, 0, 0, key, Datum::Null, none, Datum::Text(text.clone())));
            }
            Kind::ForeignKey(fk) => {
                let actions = (fk.on_update.letter(), fk.on_delete.letter(), 's');
                out.push(row(
                    c.oid,
                    &c.name,
                    "f",
                    c.table,
                    fk.index,
                    fk.parent,
                    array(fk.cols.iter().copied()),
                    array(fk.parent_cols.iter().copied()),
                    actions,
                    Datum::Null,
                ));
            }
        }
    }
    out
}

fn quoted(t: &Table, positions: &[usize]) -> String {
    let names: Vec<String> =
        positions.iter().filter_map(|&p| t.schema().columns.get(p)).map(|c| quote_identifier(&c.name)).collect();
    names.join(", ")
}

/// `pg_get_constraintdef(oid)`, or `None` when no constraint has that OID.
pub fn constraintdef(sh: &Shared, oid: &Datum) -> Option<Datum> {
    let Datum::Int(oid) = oid else { return None };
    let oid = u32::try_from(*oid).ok()?;
    let c = sh.constraints.all().into_iter().find(|c| c.oid == oid)?;
    let t = sh.db.table_by_oid(settledb::Oid(c.table))?;
    Some(Datum::Text(match &c.kind {
        Kind::Unique => {
            let ix = sh.db.indexes(&t).into_iter().find(|ix| ix.oid().0 == oid)?;
            let cols: Vec<String> = ix.columns().iter().map(|c| quote_identifier(c)).collect();
            format!("UNIQUE ({})", cols.join(", "))
        }
        Kind::Check { text, .. } => check::definition(text, &sh.catalog.columns(&t)),
        Kind::ForeignKey(fk) => {
            let parent = sh.db.table_by_oid(settledb::Oid(fk.parent))?;
            let mut s = format!(
                "FOREIGN KEY ({}) REFERENCES {}({})",
                quoted(&t, &fk.cols),
                quote_identifier(parent.name()),
                quoted(&parent, &fk.parent_cols)
            );
            if fk.on_update != super::Action::NoAction {
                s.push_str(&format!(" ON UPDATE {}", fk.on_update.words()));
            }
            if fk.on_delete != super::Action::NoAction {
                s.push_str(&format!(" ON DELETE {}", fk.on_delete.words()));
            }
            s
        }
    }))
}

/// `pg_class.relchecks` (CHECK constraints) and `relhastriggers` (a foreign key on either
/// side) of the table with OID `oid`.
pub fn class_counts(sh: &Shared, oid: i64) -> (i64, bool) {
    let mut out = (0, false);
    for c in sh.constraints.all() {
        match &c.kind {
            Kind::Check { .. } if i64::from(c.table) == oid => out.0 += 1,
            Kind::ForeignKey(fk) if i64::from(c.table) == oid || i64::from(fk.parent) == oid => out.1 = true,
            _ => {}
        }
    }
    out
}

/// psql 15's `\d table` asks for its foreign keys with two things settledb does not have, a
/// `regclass` cast and `pg_partition_ancestors`: its two queries are rewritten (`None` for
/// any other text) to a subquery on `pg_class` and the table's OID itself (there are no
/// partitions); its triggers query to an empty result.
pub fn psql_rewrite(sql: &str) -> Option<String> {
    // Its triggers query, run when `relhastriggers` is set (a foreign key's table): settledb
    // has no triggers other than foreign keys, which psql does not list there.
    if sql.contains("FROM pg_catalog.pg_trigger t") && sql.contains("pg_get_triggerdef") {
        return Some(
            "SELECT ''::text AS tgname, ''::text AS pg_get_triggerdef, ''::text AS tgenabled, false AS tgisinternal, \
             ''::text AS parent WHERE false"
                .into(),
        );
    }
    if !sql.contains("conrelid::pg_catalog.regclass AS ontable") {
        return None;
    }
    // The subquery names the outer row's column through its alias (`r` or `c`).
    let alias = regex_lite::Regex::new(r"pg_catalog\.pg_constraint (\w+)").ok()?;
    let alias = alias.captures(sql).and_then(|c| c.get(1)).map_or("pg_constraint", |m| m.as_str());
    let mut out = sql.replace(
        "conrelid::pg_catalog.regclass AS ontable",
        &format!("(SELECT rc.relname FROM pg_catalog.pg_class rc WHERE rc.oid = {alias}.conrelid) AS ontable"),
    );
    let ancestors = regex_lite::Regex::new(
        r"\(SELECT pg_catalog\.pg_partition_ancestors\('(\d+)'\)\s+UNION ALL VALUES \('\d+'::pg_catalog\.regclass\)\)",
    )
    .ok()?;
    out = ancestors.replace_all(&out, "($1)").into_owned();
    Some(out)
}
