//! INSERT (VALUES or SELECT, multi-row, RETURNING), UPDATE and DELETE with WHERE (RETURNING),
//! TRUNCATE.
//!
//! UPDATE and DELETE find their rows through [`crate::plan`]. When the WHERE clause pins every
//! column of a unique index (pgbench's `WHERE aid = $1`), the row is found and changed in one
//! engine command ([`settledb::Transaction::update_by_key`]) so it cannot be pruned or moved
//! between the two. Otherwise each row found is updated by TID with
//! [`settledb::Transaction::update_with`]; under READ COMMITTED the engine re-runs the change
//! on the newest version of a row a concurrent transaction updated, and the WHERE clause is
//! re-checked there (PostgreSQL's EvalPlanQual), so `balance = balance + 1` loses no update.
//!
//! TRUNCATE is the engine's: each table and its indexes get new, empty files in the session's
//! transaction (AccessExclusive until it ends; rolled back with it), as PostgreSQL's file swap.

use std::cell::RefCell;

use settledb::{Error as EngineError, Value};
use sqlparser::ast::{
    AssignmentTarget, CascadeOption, Delete, Expr, FromTable, Insert, SelectItem, SetExpr, Statement, TableFactor,
    TableObject, Truncate, TruncateIdentityOption, Update,
};

use crate::error::SqlError;
use crate::expr::{eval, ident_name, infer_params, infer_type, truth, Scope};
use crate::plan::{access, conjuncts, fetch, Target};
use crate::query::projection;
use crate::session::{datums, Cx, Field, Outcome};
use crate::types::{Datum, SqlType};
use crate::Shared;

/// Marks a row the re-checked WHERE clause no longer matches.
const SKIP: &str = "settledb-server: row no longer matches";
/// Marks an error raised inside an engine callback (the real one is kept aside).
const SQL_ERROR: &str = "settledb-server: statement error";

fn target_of_insert(sh: &Shared, i: &Insert) -> Result<Target, SqlError> {
    let alias = i.table_alias.as_ref().map(|a| ident_name(&a.alias));
    match &i.table {
        TableObject::TableName(n) => Target::open(sh, &crate::ddl::object_name(n), alias),
        _ => Err(SqlError::unsupported("INSERT INTO a table function")),
    }
}

fn writable(t: &Target) -> Result<(), SqlError> {
    if t.is_catalog() {
        return Err(SqlError::new("42501", "permission denied for table pg_class"));
    }
    Ok(())
}

pub fn insert(cx: &mut Cx<'_, '_>, i: &Insert) -> Result<Outcome, SqlError> {
    let t = target_of_insert(cx.sh, i)?;
    writable(&t)?;
    if let Some(on) = &i.on {
        return crate::upsert::insert(cx, i, &t, on);
    }
    let stored = rows_to_insert(cx, i, &t)?;
    if stored.len() > 1 {
        cx.tx.insert_many(&t.table, &stored)?;
    } else if let Some(v) = stored.first() {
        cx.tx.insert(&t.table, v)?;
    }
    crate::constraints::after_insert(cx.sh, cx.tx, &t, &stored)?;
    let tag = format!("INSERT 0 {}", stored.len());
    returning(cx, &t, i.returning.as_deref(), stored.iter().map(|v| datums(v, &t.cols)).collect(), tag)
}

/// The rows an INSERT proposes, as stored: its VALUES or SELECT, with the defaults of the
/// columns it leaves out, checked against NOT NULL.
pub(crate) fn rows_to_insert(cx: &mut Cx<'_, '_>, i: &Insert, t: &Target) -> Result<Vec<Vec<Value>>, SqlError> {
    let positions: Vec<usize> = if i.columns.is_empty() {
        (0..t.cols.len()).collect()
    } else {
        i.columns
            .iter()
            .map(|c| {
                let n = crate::ddl::object_name(c);
                t.cols.iter().position(|x| x.name == n).ok_or_else(|| {
                    SqlError::new("42703", format!("column \"{n}\" of relation \"{}\" does not exist", t.name))
                })
            })
            .collect::<Result<_, _>>()?
    };
    let defaults = cx.sh.catalog.defaults(&t.table);
    let default_at = |p: usize| defaults.as_ref().and_then(|d| d[p].as_ref());
    let default_of = |cx: &mut Cx<'_, '_>, p: usize| match default_at(p) {
        Some(e) => eval(e, &Scope::empty(), &[], cx, None),
        None => Ok(Datum::Null),
    };
    let source = i.source.as_ref().ok_or_else(|| SqlError::unsupported("INSERT without VALUES or SELECT"))?;
    let input: Vec<Vec<Datum>> = match source.body.as_ref() {
        SetExpr::Values(v) if source.order_by.is_none() && source.limit_clause.is_none() => {
            let mut rows = Vec::with_capacity(v.rows.len());
            for r in &v.rows {
                let mut row = Vec::with_capacity(r.len());
                for (j, e) in r.iter().enumerate() {
                    row.push(match e {
                        Expr::Identifier(id)
                            if id.quote_style.is_none() && id.value.eq_ignore_ascii_case("default") =>
                        {
                            match positions.get(j) {
                                Some(&p) => default_of(cx, p)?,
                                None => Datum::Null,
                            }
                        }
                        e => eval(e, &Scope::empty(), &[], cx, None)?,
                    });
                }
                rows.push(row);
            }
            rows
        }
        _ => crate::query::select(cx, source)?.1,
    };
    let mut stored = Vec::with_capacity(input.len());
    for r in &input {
        cx.interrupts.tick()?;
        if r.len() > positions.len() {
            return Err(SqlError::syntax("INSERT has more expressions than target columns"));
        }
        let mut values = vec![Value::Null; t.cols.len()];
        for (d, &p) in r.iter().zip(&positions) {
            values[p] = d.to_stored(t.cols[p].ty, &t.cols[p].name)?;
        }
        for p in (0..t.cols.len()).filter(|p| default_at(*p).is_some() && !positions[..r.len()].contains(p)) {
            values[p] = default_of(cx, p)?.to_stored(t.cols[p].ty, &t.cols[p].name)?;
        }
        for (c, v) in t.cols.iter().zip(&values) {
            if !c.nullable && matches!(v, Value::Null) {
                return Err(SqlError::new(
                    "23502",
                    format!(
                        "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                        c.name, t.name
                    ),
                ));
            }
        }
        crate::constraints::check_stored(t, &values)?;
        stored.push(values);
    }
    Ok(stored)
}

/// Evaluates RETURNING over the rows a statement wrote; a plain command tag without it.
pub(crate) fn returning(
    cx: &mut Cx<'_, '_>,
    t: &Target,
    items: Option<&[SelectItem]>,
    rows: Vec<Vec<Datum>>,
    tag: String,
) -> Result<Outcome, SqlError> {
    let Some(items) = items else { return Ok(Outcome::Command(tag)) };
    let scope = t.scope();
    let outs = projection(items, &scope)?;
    let fields = outs.iter().map(|o| Field { name: o.name.clone(), ty: infer_type(&o.expr, &scope, &[]) }).collect();
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let mut row = Vec::with_capacity(outs.len());
        for o in &outs {
            row.push(eval(&o.expr, &scope, r, cx, None)?);
        }
        out.push(row);
    }
    Ok(Outcome::Rows { fields, rows: out, tag })
}

fn single_table(f: &TableFactor) -> Result<(String, Option<String>), SqlError> {
    match f {
        TableFactor::Table { name, alias, .. } => {
            Ok((crate::ddl::object_name(name), alias.as_ref().map(|a| ident_name(&a.name))))
        }
        other => Err(SqlError::unsupported(format!("{other} as a target table"))),
    }
}

/// The new row an UPDATE's SET list computes from `old` (datums), checked and stored.
fn apply_set(
    t: &Target,
    sets: &[(usize, &Expr)],
    old: &[Datum],
    env: &mut dyn crate::expr::Env,
) -> Result<(Vec<Value>, Vec<Datum>), SqlError> {
    let scope = t.scope();
    let mut new = old.to_vec();
    for &(p, e) in sets {
        new[p] = eval(e, &scope, old, env, None)?;
    }
    checked_row(t, &new)
}

/// A new version of a row of `t` (datums), stored and checked against NOT NULL.
pub(crate) fn checked_row(t: &Target, new: &[Datum]) -> Result<(Vec<Value>, Vec<Datum>), SqlError> {
    let mut stored = Vec::with_capacity(new.len());
    for (c, d) in t.cols.iter().zip(new) {
        let v = d.to_stored(c.ty, &c.name)?;
        if !c.nullable && matches!(v, Value::Null) {
            return Err(SqlError::new(
                "23502",
                format!("null value in column \"{}\" of relation \"{}\" violates not-null constraint", c.name, t.name),
            ));
        }
        stored.push(v);
    }
    let datums = datums(&stored, &t.cols);
    if let Some(rules) = &t.rules {
        crate::constraints::check::row(rules, &t.name, &t.cols, &datums)?;
    }
    Ok((stored, datums))
}

pub fn update(cx: &mut Cx<'_, '_>, u: &Update) -> Result<Outcome, SqlError> {
    if !u.table.joins.is_empty() || u.from.is_some() {
        return Err(SqlError::unsupported("UPDATE ... FROM"));
    }
    let (name, alias) = single_table(&u.table.relation)?;
    let t = Target::open(cx.sh, &name, alias)?;
    writable(&t)?;
    let mut sets = Vec::new();
    for a in &u.assignments {
        let AssignmentTarget::ColumnName(c) = &a.target else {
            return Err(SqlError::unsupported("UPDATE SET (a, b) = ..."));
        };
        let n = crate::ddl::object_name(c);
        let p = t.cols.iter().position(|x| x.name == n).ok_or_else(|| {
            SqlError::new("42703", format!("column \"{n}\" of relation \"{}\" does not exist", t.name))
        })?;
        sets.push((p, &a.value));
    }
    let acc = access(cx, &t, u.selection.as_ref())?;
    let params = cx.params.to_vec();
    // The engine runs the change inside its update call, where no query can run: the
    // uncorrelated subqueries of WHERE and SET run now, once (a correlated one stays 0A000).
    let mut exprs: Vec<&Expr> = u.selection.iter().collect();
    exprs.extend(sets.iter().map(|(_, e)| *e));
    let subquery_rows = prerun_subqueries(cx, &t, &exprs)?;
    let failure: RefCell<Option<SqlError>> = RefCell::new(None);
    let written: RefCell<Vec<Vec<Datum>>> = RefCell::new(Vec::new());
    // (old, new) of the last run, for the foreign keys' end-of-statement checks.
    let track = t.rules.as_ref().is_some_and(|r| r.has_foreign_keys());
    let last: RefCell<Option<(Vec<Value>, Vec<Value>)>> = RefCell::new(None);
    let mut pairs = Vec::new();
    let scope = t.scope();
    // The change, run by the engine on the version it locks (again on a newer one under READ
    // COMMITTED when a concurrent update committed first).
    let change = |row: &[Value]| -> settledb::Result<Vec<Value>> {
        let old = datums(row, &t.cols);
        let mut env = Prerun { params: &params, rows: &subquery_rows };
        let r = (|| {
            if let Some(w) = &u.selection {
                if truth(&eval(w, &scope, &old, &mut env, None)?)? != Some(true) {
                    return Ok(None);
                }
            }
            apply_set(&t, &sets, &old, &mut env).map(Some)
        })();
        match r {
            Ok(Some((stored, d))) => {
                written.borrow_mut().push(d);
                if track {
                    *last.borrow_mut() = Some((row.to_vec(), stored.clone()));
                }
                Ok(stored)
            }
            Ok(None) => Err(EngineError::NotFound(SKIP.into())),
            Err(e) => {
                *failure.borrow_mut() = Some(e);
                Err(EngineError::InvalidInput(SQL_ERROR.into()))
            }
        }
    };
    let mut count = 0usize;
    let mut rows = Vec::new();
    // A change re-run on a newer version records its row once per run: keep the last run's.
    let keep = |n: usize, rows: &mut Vec<Vec<Datum>>| {
        let mut w = written.borrow_mut();
        if n == 1 {
            if let Some(last) = w.pop() {
                rows.push(last);
            }
        }
        w.clear();
    };
    if let Some((index, key)) = acc.is_exact_unique() {
        let r = cx.tx.update_by_key(index, key, change);
        let n = settle(r, &failure)?;
        count += n;
        keep(n, &mut rows);
        pairs.extend(last.borrow_mut().take().filter(|_| n == 1));
    } else {
        let found = fetch(cx, &t, &acc)?;
        let mut change = change;
        for (tid, _) in found {
            cx.interrupts.tick()?;
            let r = cx.tx.update_with(&t.table, tid, &mut change);
            let n = settle(r, &failure)?;
            count += n;
            keep(n, &mut rows);
            pairs.extend(last.borrow_mut().take().filter(|_| n == 1));
        }
    }
    crate::constraints::after_update(cx.sh, cx.tx, &t, pairs)?;
    returning(cx, &t, u.returning.as_deref(), rows, format!("UPDATE {count}"))
}

/// Subqueries' rows by the address of their syntax tree.
pub(crate) type SubqueryRows = std::collections::HashMap<usize, std::rc::Rc<Vec<Vec<Datum>>>>;

/// An [`crate::expr::Env`] with parameters and the rows of subqueries already run.
pub(crate) struct Prerun<'a> {
    pub(crate) params: &'a [Datum],
    pub(crate) rows: &'a SubqueryRows,
}

impl crate::expr::Env for Prerun<'_> {
    fn param(&self, n: usize) -> Result<Datum, SqlError> {
        crate::expr::param_at(self.params, n)
    }

    fn session_function(&mut self, _: &str, _: &[Datum]) -> Option<Result<Datum, SqlError>> {
        None
    }

    fn subquery(
        &mut self,
        q: &sqlparser::ast::Query,
        _outer: &Scope<'_>,
        _row: &[Datum],
    ) -> Option<Result<std::rc::Rc<Vec<Vec<Datum>>>, SqlError>> {
        self.rows.get(&(q as *const sqlparser::ast::Query as usize)).map(|r| Ok(r.clone()))
    }
}

/// Runs the subqueries in `exprs` that do not name `t` (uncorrelated), keyed as the
/// session's statement cache keys them (by the address of their syntax tree).
pub(crate) fn prerun_subqueries(cx: &mut Cx<'_, '_>, t: &Target, exprs: &[&Expr]) -> Result<SubqueryRows, SqlError> {
    let mut found = Vec::new();
    for e in exprs {
        crate::query::subqueries(e, &mut found);
    }
    let scope = t.scope();
    let probe = vec![Datum::Null; scope.cols.len()];
    let mut out = SubqueryRows::new();
    for q in found {
        if crate::correlate::bind_outer(q, &scope, &probe).is_some() {
            continue;
        }
        if let Some(rows) = crate::expr::Env::subquery(cx, q, &Scope::empty(), &[]) {
            out.insert(q as *const sqlparser::ast::Query as usize, rows?);
        }
    }
    Ok(out)
}

/// Turns one engine update's result into rows changed, surfacing a statement error.
fn settle(r: settledb::Result<Option<settledb::Tid>>, failure: &RefCell<Option<SqlError>>) -> Result<usize, SqlError> {
    match r {
        Ok(Some(_)) => Ok(1),
        Ok(None) => Ok(0),
        Err(EngineError::NotFound(m)) if m == SKIP => Ok(0),
        Err(e) => Err(failure.borrow_mut().take().unwrap_or_else(|| SqlError::from(e))),
    }
}

pub fn delete(cx: &mut Cx<'_, '_>, d: &Delete) -> Result<Outcome, SqlError> {
    if d.using.is_some() {
        return Err(SqlError::unsupported("DELETE ... USING"));
    }
    let from = match &d.from {
        FromTable::WithFromKeyword(v) | FromTable::WithoutKeyword(v) => v,
    };
    let [twj] = from.as_slice() else { return Err(SqlError::unsupported("DELETE from several tables")) };
    let (name, alias) = single_table(&twj.relation)?;
    let t = Target::open(cx.sh, &name, alias)?;
    writable(&t)?;
    let acc = access(cx, &t, d.selection.as_ref())?;
    let total = d.selection.as_ref().map_or(0, |w| conjuncts(w).len());
    let referenced = t.rules.as_ref().is_some_and(|r| r.is_referenced());
    if d.returning.is_none() && acc.covers_where(total) && !referenced {
        if let Some((index, key)) = acc.is_exact_unique() {
            let n = usize::from(cx.tx.delete_by_key(index, key)?);
            return Ok(Outcome::Command(format!("DELETE {n}")));
        }
    }
    let found = fetch(cx, &t, &acc)?;
    let scope = t.scope();
    let mut deleted = Vec::new();
    let mut olds = Vec::new();
    for (tid, row) in found {
        cx.interrupts.tick()?;
        let old = datums(&row, &t.cols);
        if let Some(w) = &d.selection {
            if truth(&eval(w, &scope, &old, cx, None)?)? != Some(true) {
                continue;
            }
        }
        if cx.tx.delete(&t.table, tid)? {
            deleted.push(old);
            if referenced {
                olds.push(row);
            }
        }
    }
    crate::constraints::after_delete(cx.sh, cx.tx, &t, olds)?;
    let tag = format!("DELETE {}", deleted.len());
    returning(cx, &t, d.returning.as_deref(), deleted, tag)
}

/// `TRUNCATE [TABLE] [ONLY] a [, b …] [RESTART IDENTITY | CONTINUE IDENTITY] [CASCADE |
/// RESTRICT]`: the engine's TRUNCATE ([`settledb::Transaction::truncate`]), in the session's
/// transaction. ONLY changes nothing (no inheritance); RESTART IDENTITY and CASCADE are passed
/// on for logical decoding (no sequences, no foreign keys).
pub fn truncate(cx: &mut Cx<'_, '_>, tr: &Truncate) -> Result<Outcome, SqlError> {
    let mut names = Vec::new();
    for n in &tr.table_names {
        let t = Target::open(cx.sh, &crate::ddl::object_name(&n.name), None)?;
        writable(&t)?;
        names.push(t.table.name().to_string());
    }
    let cascade = matches!(tr.cascade, Some(CascadeOption::Cascade));
    crate::constraints::define::truncate_targets(cx.sh, &mut names, cascade, cx.notices)?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let options = settledb::TruncateOptions {
        restart_seqs: matches!(tr.identity, Some(TruncateIdentityOption::Restart)),
        cascade,
    };
    cx.tx.truncate(&refs, options)?;
    Ok(Outcome::Command("TRUNCATE TABLE".into()))
}

/// Parameter types and RETURNING columns of INSERT, UPDATE and DELETE, for Describe.
pub fn describe(sh: &Shared, s: &Statement, params: &mut Vec<Option<SqlType>>) -> Option<Vec<Field>> {
    let (t, ret) = match s {
        Statement::Insert(i) => {
            let t = target_of_insert(sh, i).ok()?;
            let positions: Vec<usize> = if i.columns.is_empty() {
                (0..t.cols.len()).collect()
            } else {
                i.columns
                    .iter()
                    .filter_map(|c| {
                        let n = crate::ddl::object_name(c);
                        t.cols.iter().position(|x| x.name == n)
                    })
                    .collect()
            };
            if let Some(SetExpr::Values(v)) = i.source.as_ref().map(|q| q.body.as_ref()) {
                let scope = t.scope();
                for r in &v.rows {
                    for (e, &p) in r.iter().zip(&positions) {
                        if let Some(n) = crate::expr::placeholder(e) {
                            if params.len() < n {
                                params.resize(n, None);
                            }
                            params[n - 1].get_or_insert(t.cols[p].ty);
                        } else {
                            // `$6::int8 / 100.0`: typed by the expression around it.
                            infer_params(e, &scope, params);
                        }
                    }
                }
            }
            crate::upsert::describe_params(&t, i, params);
            (t, i.returning.as_deref())
        }
        Statement::Update(u) => {
            let (name, alias) = single_table(&u.table.relation).ok()?;
            let t = Target::open(sh, &name, alias).ok()?;
            assignment_params(&t, &t.scope(), &u.assignments, u.selection.as_ref(), params);
            (t, u.returning.as_deref())
        }
        Statement::Delete(d) => {
            let from = match &d.from {
                FromTable::WithFromKeyword(v) | FromTable::WithoutKeyword(v) => v,
            };
            let (name, alias) = single_table(&from.first()?.relation).ok()?;
            let t = Target::open(sh, &name, alias).ok()?;
            if let Some(w) = &d.selection {
                infer_params(w, &t.scope(), params);
            }
            (t, d.returning.as_deref())
        }
        _ => return None,
    };
    let items = ret?;
    let scope = t.scope();
    let outs = projection(items, &scope).ok()?;
    Some(outs.iter().map(|o| Field { name: o.name.clone(), ty: infer_type(&o.expr, &scope, &[]) }).collect())
}

/// The columns of pgbench's catalog probe (see [`crate::parse::Stmt::PartitionProbe`]).
pub fn partition_probe_fields() -> Vec<Field> {
    vec![
        Field { name: "n".into(), ty: SqlType::Int4 },
        Field { name: "partstrat".into(), ty: SqlType::Text },
        Field { name: "count".into(), ty: SqlType::Int8 },
    ]
}

/// Describe's parameter types from an UPDATE's (or DO UPDATE's) `SET` list and `WHERE`: a bare
/// `$n` assigned to a column takes the column's type; the rest are inferred in `scope`.
pub(crate) fn assignment_params(
    t: &Target,
    scope: &crate::expr::Scope<'_>,
    assignments: &[sqlparser::ast::Assignment],
    selection: Option<&Expr>,
    params: &mut Vec<Option<SqlType>>,
) {
    for a in assignments {
        if let AssignmentTarget::ColumnName(c) = &a.target {
            let n = crate::ddl::object_name(c);
            if let (Some(p), Some(k)) = (t.cols.iter().position(|x| x.name == n), crate::expr::placeholder(&a.value)) {
                if params.len() < k {
                    params.resize(k, None);
                }
                params[k - 1].get_or_insert(t.cols[p].ty);
            }
        }
        infer_params(&a.value, scope, params);
    }
    if let Some(w) = selection {
        infer_params(w, scope, params);
    }
}
