//! `generate_series(start, stop [, step])` in FROM: the integers from `start` to `stop` by
//! `step` (default 1), as PostgreSQL's integer forms give them.
//!
//! The column's type is `integer` when every argument is an `integer` (or `smallint`, or an
//! untyped literal or parameter) and `bigint` when one is a `bigint`; other argument types
//! (numeric, timestamps) are refused with 0A000. The relation is named by its alias, else
//! `generate_series`; its one column by the alias's column list (`AS g(i)`), else by the alias
//! itself (`FROM generate_series(1, 3) g` has a column `g`), else `generate_series`.
//!
//! Semantics kept from PostgreSQL: a NULL argument gives no rows; a step of zero is 22023; a
//! series whose next value would leave the column's type ends there instead of overflowing;
//! `start > stop` with a positive step is empty. The arguments are evaluated once, before the
//! first row, and may not name columns (no LATERAL).
//!
//! The rows are materialized; the loop is an interruption point every
//! [`crate::interrupt::CHECK_EVERY`] rows, as a sequential scan is, so a large series obeys
//! cancel requests and `statement_timeout`.

use sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, TableAlias};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::expr::{cast, eval, ident_name, infer_type, Scope};
use crate::session::Cx;
use crate::types::{Datum, SqlType};

/// A `generate_series` call in FROM, planned but not yet run.
pub struct Series {
    pub args: Vec<Expr>,
    pub ty: SqlType,
}

impl Series {
    /// Checks the call's arguments and works out the relation's names and column.
    pub fn plan(
        args: &[FunctionArg],
        alias: Option<&TableAlias>,
    ) -> Result<(Series, Vec<String>, ColumnDef), SqlError> {
        let mut exprs = Vec::with_capacity(args.len());
        for a in args {
            match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => exprs.push(e.clone()),
                _ => return Err(SqlError::unsupported("named arguments to generate_series")),
            }
        }
        if !(2..=3).contains(&exprs.len()) {
            return Err(SqlError::new(
                "42883",
                format!("function generate_series with {} arguments does not exist", exprs.len()),
            ));
        }
        let mut ty = SqlType::Int4;
        for e in &exprs {
            match infer_type(e, &Scope::empty(), &[]) {
                SqlType::Int2 | SqlType::Int4 | SqlType::Text => {}
                SqlType::Int8 => ty = SqlType::Int8,
                other => {
                    return Err(SqlError::unsupported(format!("generate_series over {}", other.display())));
                }
            }
        }
        let rel = alias.map_or_else(|| "generate_series".to_string(), |a| ident_name(&a.name));
        let col = match alias {
            Some(a) if a.columns.len() > 1 => {
                return Err(SqlError::new(
                    "42P10",
                    format!("too many column aliases specified for function generate_series ({})", a.columns.len()),
                ))
            }
            Some(a) => a.columns.first().map_or_else(|| rel.clone(), |c| ident_name(&c.name)),
            None => "generate_series".to_string(),
        };
        Ok((Series { args: exprs, ty }, vec![rel], ColumnDef { name: col, ty, nullable: false }))
    }

    /// The series' values, one single-column row each.
    pub fn rows(&self, cx: &mut Cx<'_, '_>) -> Result<Vec<Vec<Datum>>, SqlError> {
        let mut vals = Vec::with_capacity(3);
        for e in &self.args {
            match cast(eval(e, &Scope::empty(), &[], cx, None)?, self.ty)? {
                Datum::Int(x) => vals.push(x),
                Datum::Null => return Ok(Vec::new()),
                other => {
                    return Err(SqlError::new("42804", format!("generate_series argument {other:?} is not an integer")))
                }
            }
        }
        let (start, stop, step) = (vals[0], vals[1], vals.get(2).copied().unwrap_or(1));
        if step == 0 {
            return Err(SqlError::new("22023", "step size cannot equal zero"));
        }
        let (lo, hi) = match self.ty {
            SqlType::Int8 => (i64::MIN, i64::MAX),
            _ => (i64::from(i32::MIN), i64::from(i32::MAX)),
        };
        let mut rows = Vec::new();
        let mut v = start;
        while (step > 0 && v <= stop) || (step < 0 && v >= stop) {
            cx.interrupts.tick()?;
            rows.push(vec![Datum::Int(v)]);
            match v.checked_add(step) {
                Some(n) if (lo..=hi).contains(&n) => v = n,
                _ => break,
            }
        }
        Ok(rows)
    }
}
