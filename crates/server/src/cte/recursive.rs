//! `WITH RECURSIVE`: a CTE whose query is `non-recursive-term UNION [ALL] recursive-term`,
//! the recursive term naming the CTE once in its FROM, runs as PostgreSQL's recursive union
//! (`nodeRecursiveunion.c`) does:
//!
//! ```text
//!   result  := rows of the non-recursive term (UNION: duplicates dropped)
//!   working := result
//!   while working is not empty:
//!       new     := rows of the recursive term, the CTE's name reading `working`
//!                  (UNION: rows already in result dropped)
//!       result  += new;  working := new
//! ```
//!
//! The CTE's columns are the non-recursive term's, renamed by its column list; a recursive
//! term whose column types differ is 42804, as in PostgreSQL. A recursion that never ends
//! runs until cancelled or `statement_timeout` (checked once per iteration and by the terms'
//! own scans), as in PostgreSQL.
//!
//! Refused as PostgreSQL 15's parse analysis refuses them: a self-reference in a query that
//! is not `... UNION [ALL] ...` or in its non-recursive term, two references in the recursive
//! term (42P19), an aggregate in the recursive term (42P19), and ORDER BY, LIMIT or OFFSET
//! on the recursive query (0A000). What is not checked: a self-reference inside a subquery of
//! the recursive term (PostgreSQL's 42P19) reads the working table here.

use std::collections::HashSet;
use std::rc::Rc;

use sqlparser::ast::{Cte, Query, SetExpr, SetOperator, SetQuantifier, TableFactor, TableWithJoins};

use super::{columns, CteTable, Frame};
use crate::error::SqlError;
use crate::expr::ident_name;
use crate::session::{Cx, Field};
use crate::types::SqlType;
use crate::Shared;

/// A recursive CTE's two terms.
pub struct Terms<'a> {
    name: String,
    query: &'a Query,
    seed: &'a SetExpr,
    step: &'a SetExpr,
    distinct: bool,
}

/// The terms of `cte` when its query refers to itself, `None` when it does not (it is then
/// an ordinary CTE even under WITH RECURSIVE); PostgreSQL's errors for a malformed one.
pub fn terms(cte: &Cte) -> Result<Option<Terms<'_>>, SqlError> {
    let name = ident_name(&cte.alias.name);
    let q = cte.query.as_ref();
    if references(q.body.as_ref(), &name) == 0 {
        return Ok(None);
    }
    let SetExpr::SetOperation { op: SetOperator::Union, set_quantifier, left, right } = q.body.as_ref() else {
        return Err(SqlError::new(
            "42P19",
            format!("recursive query \"{name}\" does not have the form non-recursive-term UNION [ALL] recursive-term"),
        ));
    };
    if references(left, &name) > 0 {
        return Err(SqlError::new(
            "42P19",
            format!("recursive reference to query \"{name}\" must not appear within its non-recursive term"),
        ));
    }
    if references(right, &name) > 1 {
        return Err(SqlError::new(
            "42P19",
            format!("recursive reference to query \"{name}\" must not appear more than once"),
        ));
    }
    if q.order_by.is_some() {
        return Err(SqlError::new("0A000", "ORDER BY in a recursive query is not implemented"));
    }
    if q.limit_clause.is_some() || q.fetch.is_some() {
        return Err(SqlError::new("0A000", "OFFSET/LIMIT in a recursive query is not implemented"));
    }
    if let SetExpr::Select(s) = right.as_ref() {
        let mut aggs = Vec::new();
        for item in &s.projection {
            if let sqlparser::ast::SelectItem::UnnamedExpr(e)
            | sqlparser::ast::SelectItem::ExprWithAlias { expr: e, .. } = item
            {
                crate::query::collect_aggs(e, &mut aggs);
            }
        }
        if !aggs.is_empty() || s.having.is_some() {
            return Err(SqlError::new(
                "42P19",
                "aggregate functions are not allowed in a recursive query's recursive term",
            ));
        }
    }
    let distinct = match set_quantifier {
        SetQuantifier::All => false,
        SetQuantifier::Distinct | SetQuantifier::None => true,
        other => return Err(SqlError::unsupported(format!("UNION {other} in a recursive query"))),
    };
    Ok(Some(Terms { name, query: q, seed: left, step: right, distinct }))
}

/// How many times `body` names `name` as a table in a FROM (its own SELECTs and the operands
/// of its set operations, joins included; not subqueries).
fn references(body: &SetExpr, name: &str) -> usize {
    match body {
        SetExpr::Select(s) => s.from.iter().map(|f| in_from(f, name)).sum(),
        SetExpr::SetOperation { left, right, .. } => references(left, name) + references(right, name),
        SetExpr::Query(q) => references(q.body.as_ref(), name),
        _ => 0,
    }
}

fn in_from(f: &TableWithJoins, name: &str) -> usize {
    in_factor(&f.relation, name) + f.joins.iter().map(|j| in_factor(&j.relation, name)).sum::<usize>()
}

fn in_factor(t: &TableFactor, name: &str) -> usize {
    match t {
        TableFactor::Table { name: n, .. } => {
            usize::from(matches!(n.0.as_slice(), [p] if p.as_ident().is_some_and(|i| ident_name(i) == name)))
        }
        TableFactor::NestedJoin { table_with_joins, .. } => in_from(table_with_joins, name),
        _ => 0,
    }
}

/// Runs the recursion; the CTE's columns and all its rows.
pub fn run(cx: &mut Cx<'_, '_>, cte: &Cte, t: &Terms<'_>) -> Result<CteTable, SqlError> {
    let (fields, mut rows) = crate::setop::side(cx, t.query, t.seed)?;
    let cols = columns(&cte.alias, fields.clone())?;
    let mut seen = HashSet::new();
    if t.distinct {
        rows.retain(|r| seen.insert(crate::setop::key(r)));
    }
    let mut working = rows.clone();
    while !working.is_empty() {
        cx.interrupts.check()?;
        let frame = Frame::enter();
        frame.push(t.name.clone(), CteTable { cols: cols.clone(), rows: Rc::new(working), returning: true });
        let (step_fields, mut new) = crate::setop::side(cx, t.query, t.step)?;
        drop(frame);
        same_columns(&t.name, &fields, &step_fields)?;
        if t.distinct {
            new.retain(|r| seen.insert(crate::setop::key(r)));
        }
        rows.extend(new.iter().cloned());
        working = new;
    }
    Ok(CteTable { cols, rows: Rc::new(rows), returning: true })
}

/// Describe's view: the non-recursive term's columns, with the recursive term described
/// against them (so its `$n` are typed too).
pub fn describe(
    sh: &Shared,
    cte: &Cte,
    t: &Terms<'_>,
    params: &mut Vec<Option<SqlType>>,
) -> Option<Vec<crate::catalog::ColumnDef>> {
    let fields = crate::query::describe_query(sh, &operand(t.query, t.seed), params)?;
    let cols = columns(&cte.alias, fields).ok()?;
    let frame = Frame::enter();
    frame.push(t.name.clone(), CteTable { cols: cols.clone(), rows: Rc::default(), returning: true });
    crate::query::describe_query(sh, &operand(t.query, t.step), params)?;
    drop(frame);
    Some(cols)
}

/// One term as a query of its own.
fn operand(q: &Query, body: &SetExpr) -> Query {
    let mut q = q.clone();
    *q.body = body.clone();
    (q.order_by, q.limit_clause, q.fetch, q.with) = (None, None, None, None);
    q
}

/// PostgreSQL's check that the recursive term yields the non-recursive term's columns.
fn same_columns(name: &str, seed: &[Field], step: &[Field]) -> Result<(), SqlError> {
    if seed.len() != step.len() {
        return Err(SqlError::new("42601", "each UNION query must have the same number of columns"));
    }
    for (i, (a, b)) in seed.iter().zip(step).enumerate() {
        let string = |t: SqlType| matches!(t, SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_));
        let numeric = |t: SqlType| matches!(t, SqlType::Numeric { .. });
        let alike = a.ty == b.ty || (string(a.ty) && string(b.ty)) || (numeric(a.ty) && numeric(b.ty));
        if !alike {
            return Err(SqlError::new(
                "42804",
                format!(
                    "recursive query \"{name}\" column {} has type {} in non-recursive term but type {} overall",
                    i + 1,
                    a.ty.display(),
                    b.ty.display()
                ),
            )
            .with_hint("Cast the output of the non-recursive term to the correct type."));
        }
    }
    Ok(())
}
