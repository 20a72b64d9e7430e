//! UNION, INTERSECT and EXCEPT, each with ALL or DISTINCT (the default): each side runs as a
//! query of its own ([`crate::query::select`]); the combined rows are then sorted by the outer
//! ORDER BY, which may name output columns by position or name (as PostgreSQL requires of an
//! ORDER BY over a set operation), and cut by LIMIT/OFFSET. The columns are named and typed
//! after the leftmost SELECT's.

use std::collections::{HashMap, HashSet};

use sqlparser::ast::{Expr, OrderByKind, OrderBySort, Query, Select, SetExpr, SetOperator, SetQuantifier, Value};

use crate::error::SqlError;
use crate::expr::ident_name;
use crate::session::{Cx, Field};
use crate::types::Datum;

type Rows = Vec<Vec<Datum>>;

/// Runs a query whose body is a set operation (or a parenthesized query); its WITH, if any,
/// is already in scope ([`crate::query::select`]).
pub fn select(cx: &mut Cx<'_, '_>, q: &Query) -> Result<(Vec<Field>, Rows), SqlError> {
    if !q.locks.is_empty() {
        return Err(SqlError::unsupported("FOR UPDATE/SHARE with UNION, INTERSECT or EXCEPT"));
    }
    let (fields, mut rows) = side(cx, q, q.body.as_ref())?;
    if let Some(ob) = &q.order_by {
        let OrderByKind::Expressions(items) = &ob.kind else { return Err(SqlError::unsupported("ORDER BY ALL")) };
        let mut cols = Vec::with_capacity(items.len());
        let mut flags = Vec::with_capacity(items.len());
        for o in items {
            cols.push(output_column(&o.expr, &fields)?);
            let desc = matches!(o.options.sort, Some(OrderBySort::Desc));
            flags.push((desc, o.options.nulls_first.unwrap_or(desc)));
        }
        cx.interrupts.check()?;
        // Each row's sort key taken once, not per comparison.
        let mut keyed: Vec<(Vec<Datum>, Vec<Datum>)> =
            rows.into_iter().map(|r| (cols.iter().map(|&c| r[c].clone()).collect(), r)).collect();
        keyed.sort_by(|a, b| crate::query::compare_keys(&a.0, &b.0, &flags));
        rows = keyed.into_iter().map(|(_, r)| r).collect();
    }
    let (limit, offset) = crate::query::limits(cx, q)?;
    let rows = rows.into_iter().skip(offset).take(limit.unwrap_or(usize::MAX)).collect();
    Ok((fields, rows))
}

/// The leftmost SELECT of a query body (whose columns a set operation has).
pub fn leftmost(body: &SetExpr) -> Option<&Select> {
    match body {
        SetExpr::Select(s) => Some(s),
        SetExpr::SetOperation { left, .. } => leftmost(left),
        SetExpr::Query(q) => leftmost(q.body.as_ref()),
        _ => None,
    }
}

/// The output column an ORDER BY item over a set operation names: a position from 1, or a
/// column name.
fn output_column(e: &Expr, fields: &[Field]) -> Result<usize, SqlError> {
    let bad = || {
        SqlError::new(
            "0A000",
            format!("ORDER BY on a UNION/INTERSECT/EXCEPT result must be on one of the result columns, not \"{e}\""),
        )
    };
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => match n.parse::<usize>() {
                Ok(k) if (1..=fields.len()).contains(&k) => Ok(k - 1),
                _ => Err(SqlError::new("42P10", format!("ORDER BY position {n} is not in select list"))),
            },
            _ => Err(bad()),
        },
        Expr::Identifier(i) => {
            let name = ident_name(i);
            fields.iter().position(|f| f.name == name).ok_or_else(bad)
        }
        Expr::Nested(x) => output_column(x, fields),
        _ => Err(bad()),
    }
}

/// One operand: a SELECT (run with none of the outer query's ORDER BY or LIMIT), a
/// parenthesized query, or a set operation of two operands.
pub(crate) fn side(cx: &mut Cx<'_, '_>, outer: &Query, body: &SetExpr) -> Result<(Vec<Field>, Rows), SqlError> {
    match body {
        SetExpr::SetOperation { left, op, set_quantifier, right } => {
            let (fields, l) = side(cx, outer, left)?;
            let (right_fields, r) = side(cx, outer, right)?;
            if right_fields.len() != fields.len() {
                return Err(SqlError::new("42601", format!("each {op} query must have the same number of columns")));
            }
            let all = match set_quantifier {
                SetQuantifier::All => true,
                SetQuantifier::Distinct | SetQuantifier::None => false,
                other => return Err(SqlError::unsupported(format!("{op} {other}"))),
            };
            cx.interrupts.check()?;
            Ok((fields, combine(*op, all, l, r)))
        }
        SetExpr::Query(q) => crate::query::select(cx, q),
        SetExpr::Select(_) => {
            let mut q = outer.clone();
            *q.body = body.clone();
            (q.order_by, q.limit_clause, q.fetch, q.with) = (None, None, None, None);
            cx.select_copy(&q)
        }
        other => Err(SqlError::unsupported(format!("the query \"{other}\" in a set operation"))),
    }
}

/// A row's identity for duplicate elimination (NULLs equal, as DISTINCT treats them).
pub(crate) fn key(row: &[Datum]) -> Vec<Option<String>> {
    row.iter().map(Datum::to_text).collect()
}

fn distinct(rows: Rows) -> Rows {
    let mut seen = HashSet::new();
    rows.into_iter().filter(|r| seen.insert(key(r))).collect()
}

/// `l op r`: with `all`, as multisets (INTERSECT ALL keeps a row as often as both sides have
/// it, EXCEPT ALL removes one left copy per right one); without, as sets.
fn combine(op: SetOperator, all: bool, l: Rows, r: Rows) -> Rows {
    if op == SetOperator::Union {
        let mut v = l;
        v.extend(r);
        return if all { v } else { distinct(v) };
    }
    let mut counts: HashMap<Vec<Option<String>>, usize> = HashMap::new();
    for row in &r {
        *counts.entry(key(row)).or_default() += 1;
    }
    let intersect = op == SetOperator::Intersect;
    let mut out = Vec::new();
    for row in l {
        let c = counts.get_mut(&key(&row));
        let present = c.as_ref().is_some_and(|c| **c > 0);
        if all {
            if let Some(c) = c.filter(|c| **c > 0) {
                *c -= 1;
            }
        }
        if present == intersect {
            out.push(row);
        }
    }
    if all {
        out
    } else {
        distinct(out)
    }
}
