//! Defining and dropping constraints: CREATE TABLE's CHECK and REFERENCES / FOREIGN KEY,
//! `ALTER TABLE ... ADD [CONSTRAINT name] CHECK | FOREIGN KEY` (validating the rows already
//! there), `ALTER TABLE ... DROP CONSTRAINT [IF EXISTS] name [CASCADE]`, and what DROP TABLE
//! and TRUNCATE must respect (PostgreSQL's `tablecmds.c` and `dependency.c`).
//!
//! # Names (PostgreSQL's `ChooseConstraintName`)
//!
//! A CHECK naming exactly one column is `<table>_<column>_check`, any other
//! `<table>_check`; a foreign key is `<table>_<column>[_<column>...]_fkey`. A name the table
//! already has gets the first free suffix `1`, `2`, ... Names given with `CONSTRAINT name`
//! must be new on the table (42710).
//!
//! # Validation on ADD
//!
//! The constraint is added under a transaction holding the table (and for a foreign key
//! the referenced table) in ShareRowExclusive mode, as PostgreSQL takes it: writers in
//! flight finish first and new ones wait, so every row is either read by the validation or
//! written after the constraint is in force. A row that fails removes the constraint again:
//! 23514 `check constraint "c" of relation "t" is violated by some row`, or 23503 as an
//! insert would report it.
//!
//! # Not built
//!
//! `DEFERRABLE` foreign keys (0A000), `MATCH FULL` / `MATCH PARTIAL` (0A000), `NOT VALID`,
//! `ON DELETE SET NULL (columns)`, CHECK constraints `NO INHERIT`.

use std::sync::Arc;

use settledb::lmgr::LockMode;
use settledb::Table;
use sqlparser::ast::{
    CheckConstraint, ConstraintReferenceMatchKind, DeferrableInitial, ForeignKeyConstraint, ReferentialAction,
};

use super::{check, Action, Constraint, ForeignKey, Kind};
use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::expr::ident_name;
use crate::session::Notice;
use crate::types::SqlType;
use crate::Shared;

/// CHECK and FOREIGN KEY constraints a CREATE TABLE declares, added once the table exists.
#[derive(Default)]
pub struct Pending {
    checks: Vec<(Option<String>, String)>,
    fkeys: Vec<(Option<String>, ForeignKeyConstraint)>,
}

impl Pending {
    /// `[CONSTRAINT name] CHECK (expr)`, on a column or the table.
    pub fn check(&mut self, name: Option<&sqlparser::ast::Ident>, c: &CheckConstraint) {
        self.checks.push((name.or(c.name.as_ref()).map(ident_name), c.expr.to_string()));
    }

    /// `REFERENCES ...` on `column`, or `FOREIGN KEY (...) REFERENCES ...` (`column` None).
    pub fn foreign_key(
        &mut self,
        name: Option<&sqlparser::ast::Ident>,
        fk: &ForeignKeyConstraint,
        column: Option<&sqlparser::ast::Ident>,
    ) {
        let mut fk = fk.clone();
        if let Some(c) = column {
            fk.columns = vec![c.clone()];
        }
        self.fkeys.push((name.or(fk.name.as_ref()).map(ident_name), fk));
    }

    pub fn is_empty(&self) -> bool {
        self.checks.is_empty() && self.fkeys.is_empty()
    }
}

/// Refuses what CREATE TABLE cannot build before the table is made (so nothing is left
/// behind): deferrable keys and MATCH FULL / PARTIAL.
pub fn refuse_unbuilt(p: &Pending) -> Result<(), SqlError> {
    p.fkeys.iter().try_for_each(|(_, fk)| refuse_fk_options(fk))
}

fn refuse_fk_options(fk: &ForeignKeyConstraint) -> Result<(), SqlError> {
    if let Some(ch) = &fk.characteristics {
        if ch.initially == Some(DeferrableInitial::Deferred) && ch.deferrable != Some(true) {
            return Err(SqlError::syntax("constraint declared INITIALLY DEFERRED must be DEFERRABLE"));
        }
        if ch.deferrable == Some(true) {
            return Err(SqlError::unsupported("DEFERRABLE foreign keys"));
        }
    }
    match fk.match_kind {
        None | Some(ConstraintReferenceMatchKind::Simple) => Ok(()),
        Some(k) => Err(SqlError::unsupported(format!("foreign keys {k}"))),
    }
}

/// Records a new table's constraints: its UNIQUE indexes' names, then the CHECK and
/// FOREIGN KEY constraints of `p`. The table is empty, so nothing needs validating.
pub fn created(sh: &Shared, table: &str, p: Pending, unique_indexes: &[String]) -> Result<(), SqlError> {
    if p.is_empty() && unique_indexes.is_empty() {
        return Ok(());
    }
    let t = sh.db.table(table)?;
    let cols = sh.catalog.columns(&t);
    let uniques: Vec<u32> = sh
        .db
        .indexes(&t)
        .into_iter()
        .filter(|ix| unique_indexes.iter().any(|n| n == ix.name()))
        .map(|ix| ix.oid().0)
        .collect();
    let mut made = Vec::new();
    for (name, text) in &p.checks {
        made.push(new_check(&t, &cols, name.clone(), text)?);
    }
    for (name, fk) in &p.fkeys {
        made.push(new_foreign_key(sh, &t, &cols, name.clone(), fk)?);
    }
    sh.constraints.change(&sh.db, |list, next| {
        for oid in uniques {
            let name = sh.db.indexes(&t).into_iter().find(|ix| ix.oid().0 == oid).map(|ix| ix.name().to_string());
            list.push(Arc::new(Constraint {
                oid,
                table: t.oid().0,
                name: name.unwrap_or_default(),
                kind: Kind::Unique,
            }));
        }
        add_named(list, next, t.oid().0, table, made).map(|_| ())
    })
}

/// Adds `made` (names still to choose where `None`) to `list`, OIDs from `next`.
fn add_named(
    list: &mut Vec<Arc<Constraint>>,
    mut next: u32,
    table_oid: u32,
    table: &str,
    made: Vec<(Option<String>, String, Kind)>,
) -> Result<Vec<Arc<Constraint>>, SqlError> {
    let mut out = Vec::new();
    // Given names first: a chosen one must not take a name the statement gives later.
    for (given, _, _) in &made {
        if let Some(n) = given {
            if list.iter().any(|c| c.table == table_oid && &c.name == n) || out_names(&made, n) > 1 {
                return Err(SqlError::new(
                    "42710",
                    format!("constraint \"{n}\" for relation \"{table}\" already exists"),
                ));
            }
        }
    }
    for (given, base, kind) in made {
        let name = match given {
            Some(n) => n,
            None => choose_name(list, &out, &made_names(&out), table_oid, &base),
        };
        let c = Arc::new(Constraint { oid: next, table: table_oid, name, kind });
        next += 1;
        list.push(c.clone());
        out.push(c);
    }
    Ok(out)
}

fn out_names(made: &[(Option<String>, String, Kind)], n: &str) -> usize {
    made.iter().filter(|(g, _, _)| g.as_deref() == Some(n)).count()
}

fn made_names(out: &[Arc<Constraint>]) -> Vec<String> {
    out.iter().map(|c| c.name.clone()).collect()
}

/// `base`, or `base1`, `base2`, ... (before the suffix `_check` / `_fkey`, as PostgreSQL
/// numbers: `t_a_check1`), the first the table does not have.
fn choose_name(list: &[Arc<Constraint>], _out: &[Arc<Constraint>], taken: &[String], table: u32, base: &str) -> String {
    let free = |n: &str| !list.iter().any(|c| c.table == table && c.name == n) && !taken.iter().any(|t| t == n);
    if free(base) {
        return base.to_string();
    }
    (1..).map(|i| format!("{base}{i}")).find(|n| free(n)).unwrap_or_default()
}

/// A CHECK constraint over `t`'s columns: (given name, default name, kind).
fn new_check(
    t: &Table,
    cols: &[ColumnDef],
    name: Option<String>,
    text: &str,
) -> Result<(Option<String>, String, Kind), SqlError> {
    let expr = check::parse(text)?;
    check::refuse_subqueries(&expr)?;
    // Names resolve (42703) and types fit, on a row of NULLs.
    check::holds(&expr, cols, &vec![crate::types::Datum::Null; cols.len()])?;
    let columns = check::columns_named(text, cols)?;
    let base = match columns.as_slice() {
        [(_, c)] => format!("{}_{c}_check", t.name()),
        _ => format!("{}_check", t.name()),
    };
    Ok((name, base, Kind::Check { text: text.to_string(), columns }))
}

fn action(a: Option<ReferentialAction>) -> Action {
    match a {
        None | Some(ReferentialAction::NoAction) => Action::NoAction,
        Some(ReferentialAction::Restrict) => Action::Restrict,
        Some(ReferentialAction::Cascade) => Action::Cascade,
        Some(ReferentialAction::SetNull) => Action::SetNull,
        Some(ReferentialAction::SetDefault) => Action::SetDefault,
    }
}

/// Whether PostgreSQL has a btree equality operator between the two types.
fn comparable(a: SqlType, b: SqlType) -> bool {
    fn family(t: SqlType) -> u8 {
        match t {
            SqlType::Bool => 0,
            SqlType::Int2 | SqlType::Int4 | SqlType::Int8 | SqlType::Numeric { .. } | SqlType::Float8 => 1,
            SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_) => 2,
            SqlType::Date | SqlType::Timestamp | SqlType::TimestampTz => 3,
            SqlType::Interval => 4,
            SqlType::Bytea => 5,
        }
    }
    family(a) == family(b)
}

/// A FOREIGN KEY of `t` (columns `cols`): the referenced table, its unique index over the
/// referenced columns, types compared (PostgreSQL's `ATAddForeignKeyConstraint`).
fn new_foreign_key(
    sh: &Shared,
    t: &Table,
    cols: &[ColumnDef],
    name: Option<String>,
    fk: &ForeignKeyConstraint,
) -> Result<(Option<String>, String, Kind), SqlError> {
    refuse_fk_options(fk)?;
    let parent_name = crate::ddl::object_name(&fk.foreign_table);
    let parent = sh.db.table(&parent_name).map_err(|_| SqlError::undefined_table(&parent_name))?;
    let pcols = sh.catalog.columns(&parent);
    let position = |cs: &[ColumnDef], n: &str| {
        cs.iter().position(|c| c.name == n).ok_or_else(|| {
            SqlError::new("42703", format!("column \"{n}\" referenced in foreign key constraint does not exist"))
        })
    };
    let mine: Vec<usize> = fk.columns.iter().map(|c| position(cols, &ident_name(c))).collect::<Result<_, _>>()?;
    let indexes = sh.db.indexes(&parent);
    let theirs: Vec<usize> = if fk.referred_columns.is_empty() {
        let pk = indexes.iter().find(|ix| ix.is_primary()).ok_or_else(|| {
            SqlError::new("42830", format!("there is no primary key for referenced table \"{parent_name}\""))
        })?;
        pk.columns().iter().map(|n| position(&pcols, n)).collect::<Result<_, _>>()?
    } else {
        fk.referred_columns.iter().map(|c| position(&pcols, &ident_name(c))).collect::<Result<_, _>>()?
    };
    if mine.len() != theirs.len() {
        return Err(SqlError::new("42830", "number of referencing and referenced columns for foreign key disagree"));
    }
    let mut wanted = theirs.clone();
    wanted.sort_unstable();
    let index = indexes
        .iter()
        .filter(|ix| ix.is_unique())
        .find(|ix| {
            let mut have: Vec<usize> =
                ix.columns().iter().filter_map(|n| pcols.iter().position(|c| &c.name == n)).collect();
            have.sort_unstable();
            have == wanted && ix.columns().len() == wanted.len()
        })
        .ok_or_else(|| {
            SqlError::new(
                "42830",
                format!("there is no unique constraint matching given keys for referenced table \"{parent_name}\""),
            )
        })?;
    let names: Vec<String> = mine.iter().map(|&p| cols[p].name.clone()).collect();
    let base = format!("{}_{}_fkey", t.name(), names.join("_"));
    for (&m, &p) in mine.iter().zip(&theirs) {
        if !comparable(cols[m].ty, pcols[p].ty) {
            let shown = name.clone().unwrap_or_else(|| base.clone());
            return Err(SqlError::new("42804", format!("foreign key constraint \"{shown}\" cannot be implemented"))
                .with_detail(format!(
                    "Key columns \"{}\" and \"{}\" are of incompatible types: {} and {}.",
                    cols[m].name,
                    pcols[p].name,
                    cols[m].ty.display(),
                    pcols[p].ty.display()
                )));
        }
    }
    let kind = Kind::ForeignKey(ForeignKey {
        cols: mine,
        parent: parent.oid().0,
        parent_cols: theirs,
        index: index.oid().0,
        on_update: action(fk.on_update),
        on_delete: action(fk.on_delete),
    });
    Ok((name, base, kind))
}

/// What ALTER TABLE ... ADD CONSTRAINT adds.
pub enum Adding<'a> {
    Check(Option<String>, &'a CheckConstraint),
    ForeignKey(Option<String>, &'a ForeignKeyConstraint),
}

/// `ALTER TABLE table ADD [CONSTRAINT name] CHECK (...) | FOREIGN KEY ...`, validated
/// against the rows already there (see the module doc).
pub fn add(sh: &Shared, table: &str, what: Adding<'_>, interrupt: &settledb::Interrupt) -> Result<(), SqlError> {
    let t = sh.db.table(table).map_err(|_| SqlError::undefined_table(table))?;
    let cols = sh.catalog.columns(&t);
    let made = match &what {
        Adding::Check(name, c) => {
            new_check(&t, &cols, name.clone().or(c.name.as_ref().map(ident_name)), &c.expr.to_string())?
        }
        Adding::ForeignKey(name, fk) => {
            new_foreign_key(sh, &t, &cols, name.clone().or(fk.name.as_ref().map(ident_name)), fk)?
        }
    };
    let mut tx = sh.db.begin()?;
    tx.set_interrupt(Some(interrupt.clone()));
    tx.lock_table(&t, LockMode::ShareRowExclusive)?;
    if let Kind::ForeignKey(fk) = &made.2 {
        if let Some(p) = sh.db.table_by_oid(settledb::Oid(fk.parent)) {
            tx.lock_table(&p, LockMode::ShareRowExclusive)?;
        }
    }
    let added = sh.constraints.change(&sh.db, |list, next| add_named(list, next, t.oid().0, table, vec![made]))?;
    let Some(c) = added.first().cloned() else { return Ok(()) };
    let r = validate(sh, &mut tx, &t, &cols, &c);
    if r.is_err() {
        let _ = tx.rollback();
        sh.constraints.change(&sh.db, |list, _| {
            list.retain(|x| x.oid != c.oid);
            Ok(())
        })?;
        return r;
    }
    tx.commit()?;
    Ok(())
}

/// Reads every row of `t` and checks it against the new constraint `c`.
fn validate(
    sh: &Shared,
    tx: &mut settledb::Transaction<'_>,
    t: &Table,
    cols: &[ColumnDef],
    c: &Constraint,
) -> Result<(), SqlError> {
    let rows: Vec<Vec<settledb::Value>> = tx.scan(t)?.map(|r| r.map(|(_, v)| v)).collect::<Result<_, _>>()?;
    match &c.kind {
        Kind::Check { text, .. } => {
            let expr = check::parse(text)?;
            for row in &rows {
                if !check::holds(&expr, cols, &crate::session::datums(row, cols))? {
                    return Err(SqlError::new(
                        "23514",
                        format!("check constraint \"{}\" of relation \"{}\" is violated by some row", c.name, t.name()),
                    ));
                }
            }
        }
        Kind::ForeignKey(fk) => {
            for row in &rows {
                if super::fkey::find_parent(sh, tx, fk, cols, row)?.is_none() {
                    return Err(super::fkey::not_present(sh, t.name(), cols, &c.name, fk, row));
                }
            }
        }
        Kind::Unique => {}
    }
    Ok(())
}

/// `ALTER TABLE table DROP CONSTRAINT [IF EXISTS] name [CASCADE]`: a CHECK or FOREIGN KEY
/// goes from the file; a UNIQUE or PRIMARY KEY drops its index, refused with 2BP01 while a
/// foreign key depends on it unless CASCADE, which drops those too.
pub fn drop(
    sh: &Shared,
    table: &str,
    name: &str,
    if_exists: bool,
    cascade: bool,
    notices: &mut Vec<Notice>,
) -> Result<(), SqlError> {
    let t = sh.db.table(table).map_err(|_| SqlError::undefined_table(table))?;
    let mine = sh.constraints.of_table(t.oid().0);
    let index = sh
        .db
        .indexes(&t)
        .into_iter()
        .find(|ix| ix.name() == name && (ix.is_primary() || mine.iter().any(|c| c.oid == ix.oid().0)));
    let found = mine.iter().find(|c| c.name == name).cloned();
    if found.is_none() && index.is_none() {
        if if_exists {
            notices.push(Notice {
                detail: None,
                severity: "NOTICE",
                code: "00000",
                message: format!("constraint \"{name}\" of relation \"{table}\" does not exist, skipping"),
            });
            return Ok(());
        }
        return Err(SqlError::new("42704", format!("constraint \"{name}\" of relation \"{table}\" does not exist")));
    }
    if let Some(ix) = &index {
        let oid = ix.oid().0;
        let dependents: Vec<Arc<Constraint>> = sh
            .constraints
            .all()
            .into_iter()
            .filter(|c| matches!(&c.kind, Kind::ForeignKey(fk) if fk.index == oid))
            .collect();
        if !dependents.is_empty() {
            let lines: Vec<String> = dependents
                .iter()
                .map(|c| format!("constraint {} on table {} depends on index {name}", c.name, table_name(sh, c.table)))
                .collect();
            if !cascade {
                return Err(SqlError::new(
                    "2BP01",
                    format!("cannot drop constraint {name} on table {table} because other objects depend on it"),
                )
                .with_detail(lines.join("\n"))
                .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
            }
            cascade_notice(notices, &dependents, sh);
        }
        sh.db.drop_index(ix.name())?;
        sh.constraints.change(&sh.db, |list, _| {
            list.retain(|c| c.oid != oid && !matches!(&c.kind, Kind::ForeignKey(fk) if fk.index == oid));
            Ok(())
        })?;
        return Ok(());
    }
    let oid = found.map(|c| c.oid);
    sh.constraints.change(&sh.db, |list, _| {
        list.retain(|c| Some(c.oid) != oid);
        Ok(())
    })
}

fn table_name(sh: &Shared, oid: u32) -> String {
    sh.db.table_by_oid(settledb::Oid(oid)).map(|t| t.name().to_string()).unwrap_or_default()
}

fn cascade_notice(notices: &mut Vec<Notice>, dropped: &[Arc<Constraint>], sh: &Shared) {
    let lines: Vec<String> =
        dropped.iter().map(|c| format!("constraint {} on table {}", c.name, table_name(sh, c.table))).collect();
    let message = match lines.as_slice() {
        [one] => format!("drop cascades to {one}"),
        _ => format!("drop cascades to {} other objects", lines.len()),
    };
    let mut n = Notice { severity: "NOTICE", code: "00000", message, detail: None };
    if lines.len() > 1 {
        // PostgreSQL puts the list in the DETAIL; a notice here has none, so it follows.
        n.message = format!(
            "{}\n{}",
            n.message,
            lines.iter().map(|l| format!("drop cascades to {l}")).collect::<Vec<_>>().join("\n")
        );
    }
    notices.push(n);
}

/// Before DROP TABLE of `names`: 2BP01 when a table not being dropped references one of
/// them, unless CASCADE, which drops those foreign keys (with PostgreSQL's NOTICE).
pub fn before_drop_tables(
    sh: &Shared,
    names: &[String],
    cascade: bool,
    notices: &mut Vec<Notice>,
) -> Result<(), SqlError> {
    if sh.constraints.all().is_empty() {
        return Ok(());
    }
    let oids: Vec<u32> = names.iter().filter_map(|n| sh.db.table(n).ok()).map(|t| t.oid().0).collect();
    let blocking: Vec<Arc<Constraint>> = sh
        .constraints
        .all()
        .into_iter()
        .filter(|c| matches!(&c.kind, Kind::ForeignKey(fk) if oids.contains(&fk.parent) && !oids.contains(&c.table)))
        .collect();
    if blocking.is_empty() {
        return Ok(());
    }
    if !cascade {
        let first = table_name_of_parent(sh, &blocking[0]);
        let lines: Vec<String> = blocking
            .iter()
            .map(|c| {
                format!(
                    "constraint {} on table {} depends on table {}",
                    c.name,
                    table_name(sh, c.table),
                    table_name_of_parent(sh, c)
                )
            })
            .collect();
        return Err(SqlError::new("2BP01", format!("cannot drop table {first} because other objects depend on it"))
            .with_detail(lines.join("\n"))
            .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
    }
    cascade_notice(notices, &blocking, sh);
    let gone: Vec<u32> = blocking.iter().map(|c| c.oid).collect();
    sh.constraints.change(&sh.db, |list, _| {
        list.retain(|c| !gone.contains(&c.oid));
        Ok(())
    })
}

fn table_name_of_parent(sh: &Shared, c: &Constraint) -> String {
    match &c.kind {
        Kind::ForeignKey(fk) => table_name(sh, fk.parent),
        _ => String::new(),
    }
}

/// After DROP TABLE: the dropped tables' constraints go.
pub fn after_drop_tables(sh: &Shared) -> Result<(), SqlError> {
    if sh.constraints.all().is_empty() {
        return Ok(());
    }
    sh.constraints.change(&sh.db, |list, _| {
        list.retain(|c| {
            sh.db.table_by_oid(settledb::Oid(c.table)).is_some()
                && !matches!(&c.kind, Kind::ForeignKey(fk) if sh.db.table_by_oid(settledb::Oid(fk.parent)).is_none())
        });
        Ok(())
    })
}

/// TRUNCATE of `names`: a table referenced from a table not truncated too is 0A000, unless
/// CASCADE, which adds the referencing tables (with PostgreSQL's NOTICE), recursively.
pub fn truncate_targets(
    sh: &Shared,
    names: &mut Vec<String>,
    cascade: bool,
    notices: &mut Vec<Notice>,
) -> Result<(), SqlError> {
    let all = sh.constraints.all();
    if all.is_empty() {
        return Ok(());
    }
    let mut i = 0;
    while i < names.len() {
        let Ok(t) = sh.db.table(&names[i]) else {
            i += 1;
            continue;
        };
        for c in &all {
            let Kind::ForeignKey(fk) = &c.kind else { continue };
            if fk.parent != t.oid().0 {
                continue;
            }
            let child = table_name(sh, c.table);
            if names.contains(&child) {
                continue;
            }
            if !cascade {
                return Err(SqlError::new("0A000", "cannot truncate a table referenced in a foreign key constraint")
                    .with_detail(format!("Table \"{child}\" references \"{}\".", names[i]))
                    .with_hint(format!("Truncate table \"{child}\" at the same time, or use TRUNCATE ... CASCADE.")));
            }
            notices.push(Notice {
                detail: None,
                severity: "NOTICE",
                code: "00000",
                message: format!("truncate cascades to table \"{child}\""),
            });
            names.push(child);
        }
        i += 1;
    }
    Ok(())
}
