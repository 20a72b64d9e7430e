//! Window functions: `fn(args) [FILTER (WHERE ...)] OVER ([w] [PARTITION BY ...] [ORDER BY ...]
//! [frame])`, `OVER w` and the `WINDOW w AS (...)` clause, in the select list and ORDER BY.
//!
//! A window function sees the rows the query has once WHERE, GROUP BY and HAVING are done
//! (PostgreSQL's `nodeWindowAgg.c` runs above the Agg node), so aggregates may appear in its
//! arguments and window clause (`sum(sum(x)) OVER ()`, `rank() OVER (ORDER BY count(*))`).
//! The SELECT executor ([`crate::query`]) collects those rows, each its representative input
//! row and its group's aggregate values; [`Plan::compute`] then adds each window call's value
//! to every row's map, under the call's text, where the evaluator looks it up as it does an
//! aggregate's ([`crate::expr::eval`]); the select list and ORDER BY are evaluated last.
//!
//! ```text
//!   rows after WHERE/GROUP BY/HAVING      for each window call (compute.rs):
//!   (rep row, {agg text -> value})   ->     evaluate PARTITION BY and ORDER BY keys per row
//!                                           stable-sort the row numbers by (partition, order)
//!                                           per partition: peer groups, then per row its
//!                                           frame (frame.rs) and the function's value
//!                                           -> {call text -> value} added to each row
//!   then: select list, ORDER BY keys, sort, DISTINCT, LIMIT as for any SELECT
//! ```
//!
//! Sorting uses the executor's ORDER BY comparison ([`crate::query::compare_keys`]), so
//! NULLS FIRST/LAST and DESC mean what they mean for the query's ORDER BY. Without an ORDER BY
//! of its own the query's rows come out in the last window's sort order (as a single window
//! gives them in PostgreSQL). Interrupts are checked every 256 rows of each pass and of each
//! frame an aggregate folds, and before each sort.
//!
//! Built: `row_number`, `rank`, `dense_rank`, `percent_rank`, `cume_dist`, `ntile`,
//! `lag`/`lead` (offset, default), `first_value`, `last_value`, `nth_value`, and the aggregates
//! (`count`, `sum`, `avg`, `min`, `max`, with FILTER) over ROWS, GROUPS and RANGE frames
//! (RANGE without offsets). Planning ([`Plan::build`]) gives PostgreSQL 15's parse-analysis
//! errors: 42P20 for window functions in WHERE, GROUP BY, HAVING, FILTER, window clauses or
//! nested, 42809 for a window function without OVER, 42803 for one inside an aggregate, 42704
//! for an unknown window name, 42P20 for a named window overridden as PostgreSQL forbids; not
//! built, 0A000: DISTINCT in a window aggregate (PostgreSQL neither), RANGE with an offset,
//! IGNORE NULLS.

mod compute;
pub mod frame;

use sqlparser::ast::{
    DuplicateTreatment, Expr, Function, FunctionArguments, GroupByExpr, NamedWindowExpr, OrderByExpr, OrderBySort,
    Select, WindowFrame, WindowType,
};

use crate::error::SqlError;
use crate::expr::{func_args, func_name, ident_name, is_aggregate, Env};
use crate::ordered::OrderItem;
use crate::query::OutCol;
use crate::types::SqlType;

pub use compute::Rows;

/// What a window function computes.
#[derive(Clone, Debug, PartialEq)]
enum Func {
    RowNumber,
    Rank,
    DenseRank,
    PercentRank,
    CumeDist,
    Ntile,
    Lag,
    Lead,
    FirstValue,
    LastValue,
    NthValue,
    /// An aggregate over the frame; `star` for `count(*)`.
    Agg {
        name: String,
        star: bool,
    },
}

/// One window function call of the query, its window resolved.
struct Call {
    /// The call's text: its key in each row's map.
    key: String,
    func: Func,
    args: Vec<Expr>,
    filter: Option<Expr>,
    partition: Vec<Expr>,
    order: Vec<OrderItem>,
    frame: frame::Frame,
}

/// The window calls of one SELECT, in the order they first appear.
pub struct Plan {
    calls: Vec<Call>,
}

/// A named window after resolving the window it copies.
#[derive(Clone)]
struct Named {
    name: String,
    partition: Vec<Expr>,
    order: Vec<OrderByExpr>,
    frame: Option<WindowFrame>,
}

/// Whether `name` is a function that exists only as a window function.
pub fn is_window_only(name: &str) -> bool {
    matches!(
        name,
        "row_number"
            | "rank"
            | "dense_rank"
            | "percent_rank"
            | "cume_dist"
            | "ntile"
            | "lag"
            | "lead"
            | "first_value"
            | "last_value"
            | "nth_value"
    )
}

/// The result type of a window-only function whose first argument has type `first`
/// (Describe): bigint for the counters, integer for `ntile`, float8 for the ratios, the
/// argument's type for the functions returning a row's value.
pub fn result_type(name: &str, first: Option<SqlType>) -> SqlType {
    match name {
        "row_number" | "rank" | "dense_rank" => SqlType::Int8,
        "ntile" => SqlType::Int4,
        "percent_rank" | "cume_dist" => SqlType::Float8,
        _ => first.unwrap_or(SqlType::Text),
    }
}

/// Evaluating a window call where no window values are (a context the planner did not check).
pub fn not_allowed_here() -> SqlError {
    SqlError::new("42P20", "window functions are not allowed here")
}

impl Plan {
    /// The window calls of a SELECT whose output columns are `outs` and ORDER BY `order`, with
    /// the errors PostgreSQL's parse analysis gives. Frame offsets are evaluated here.
    pub fn build(sel: &Select, outs: &[OutCol], order: &[OrderItem], env: &mut dyn Env) -> Result<Plan, SqlError> {
        if let Some(w) = &sel.selection {
            refuse_in(w, "WHERE")?;
        }
        if let GroupByExpr::Expressions(g, _) = &sel.group_by {
            for e in g {
                refuse_in(e, "GROUP BY")?;
            }
        }
        if let Some(h) = &sel.having {
            refuse_in(h, "HAVING")?;
        }
        let named = named_windows(sel)?;
        let mut calls = Vec::new();
        let exprs = outs.iter().map(|o| &o.expr).chain(order.iter().map(|(e, _, _)| e));
        for e in exprs {
            collect(e, &named, env, &mut calls)?;
        }
        // Definitions no call uses are still checked, as PostgreSQL does.
        for n in &named {
            let spec = (n.partition.clone(), n.order.clone(), n.frame.clone());
            resolve_frame(&spec, env)?;
        }
        Ok(Plan { calls })
    }

    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The expressions the calls evaluate per row (arguments, FILTER, PARTITION BY, ORDER
    /// BY), for the executor to find the aggregates in them.
    pub fn exprs(&self) -> impl Iterator<Item = &Expr> {
        self.calls.iter().flat_map(|c| {
            c.args.iter().chain(c.filter.iter()).chain(c.partition.iter()).chain(c.order.iter().map(|(e, _, _)| e))
        })
    }
}

/// Types the `$n` that are a window call's arguments (Describe): `lag`/`lead`'s default as
/// the value's type, offsets and counts as integers; other `$n` as any function's.
pub fn infer_params(e: &Expr, scope: &crate::expr::Scope<'_>, params: &mut Vec<Option<SqlType>>) {
    if let Expr::Function(f) = e {
        if f.over.is_some() && is_window_only(&func_name(f)) {
            let args = func_args(f).ok().flatten().unwrap_or_default();
            let value = args.first().map(|a| crate::expr::infer_type(a, scope, &[]));
            for (i, a) in args.iter().enumerate() {
                let ty = match (func_name(f).as_str(), i) {
                    (_, 0) => continue,
                    ("lag" | "lead", 2) => value.unwrap_or(SqlType::Text),
                    _ => SqlType::Int4,
                };
                if let Some(n) = crate::expr::placeholder(a) {
                    if params.len() < n {
                        params.resize(n, None);
                    }
                    params[n - 1].get_or_insert(ty);
                }
            }
        }
    }
    for c in children(e) {
        infer_params(c, scope, params);
    }
}

/// 42P20 for a window function in `clause` (42809 for a window-only function without OVER).
fn refuse_in(e: &Expr, clause: &str) -> Result<(), SqlError> {
    match find_window(e) {
        Some(f) if f.over.is_none() => Err(requires_over(f)),
        Some(_) => Err(SqlError::new("42P20", format!("window functions are not allowed in {clause}"))),
        None => Ok(()),
    }
}

fn requires_over(f: &Function) -> SqlError {
    SqlError::new("42809", format!("window function {} requires an OVER clause", func_name(f)))
}

/// The first window function call in `e` (with OVER, or a window-only name without it),
/// not looking into subqueries.
fn find_window(e: &Expr) -> Option<&Function> {
    if let Expr::Function(f) = e {
        if f.over.is_some() || is_window_only(&func_name(f)) {
            return Some(f);
        }
    }
    children(e).into_iter().find_map(find_window)
}

/// Whether `e` names a column (a frame offset may not).
fn mentions_column(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) || children(e).into_iter().any(mentions_column)
}

/// The expressions directly inside `e` that are evaluated with it (not subqueries'), the
/// window clause of a call included.
fn children(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::BinaryOp { left, right, .. } => vec![left, right],
        Expr::UnaryOp { expr: x, .. }
        | Expr::Nested(x)
        | Expr::Cast { expr: x, .. }
        | Expr::Collate { expr: x, .. }
        | Expr::IsNull(x)
        | Expr::IsNotNull(x)
        | Expr::IsTrue(x)
        | Expr::IsFalse(x)
        | Expr::IsNotTrue(x)
        | Expr::IsNotFalse(x) => vec![x],
        Expr::IsDistinctFrom(a, b) | Expr::IsNotDistinctFrom(a, b) => vec![a, b],
        Expr::Between { expr, low, high, .. } => vec![expr, low, high],
        Expr::InList { expr, list, .. } => std::iter::once(expr.as_ref()).chain(list).collect(),
        Expr::InSubquery { expr, .. } => vec![expr],
        Expr::Like { expr, pattern, .. } => vec![expr, pattern],
        Expr::AnyOp { left, right, .. } => vec![left, right],
        Expr::Substring { expr, substring_from, substring_for, .. } => {
            std::iter::once(expr.as_ref()).chain(substring_from.as_deref()).chain(substring_for.as_deref()).collect()
        }
        Expr::Case { operand, conditions, else_result, .. } => {
            let mut v: Vec<&Expr> = operand.iter().map(|o| o.as_ref()).collect();
            for c in conditions {
                v.push(&c.condition);
                v.push(&c.result);
            }
            v.extend(else_result.as_deref());
            v
        }
        Expr::Function(f) => {
            let mut v = func_args(f).ok().flatten().unwrap_or_default();
            v.extend(f.filter.as_deref());
            if let Some(WindowType::WindowSpec(s)) = &f.over {
                v.extend(s.partition_by.iter());
                v.extend(s.order_by.iter().map(|o| &o.expr));
            }
            v
        }
        _ => Vec::new(),
    }
}

/// The WINDOW clause's definitions, each resolved against the earlier ones it names.
fn named_windows(sel: &Select) -> Result<Vec<Named>, SqlError> {
    let mut out: Vec<Named> = Vec::new();
    for def in &sel.named_window {
        let name = ident_name(&def.0);
        if out.iter().any(|n| n.name == name) {
            return Err(SqlError::new("42P20", format!("window \"{name}\" is already defined")));
        }
        let spec = match &def.1 {
            NamedWindowExpr::WindowSpec(s) => s,
            NamedWindowExpr::NamedWindow(other) => {
                return Err(SqlError::syntax(format!("syntax error at or near \"{}\"", other.value)))
            }
        };
        let (partition, order, frame) = merge(spec.window_name.as_ref().map(ident_name), spec, &out)?;
        for e in partition.iter().chain(order.iter().map(|o| &o.expr)) {
            refuse_in(e, "window definitions")?;
        }
        out.push(Named { name, partition, order, frame });
    }
    Ok(out)
}

type Spec = (Vec<Expr>, Vec<OrderByExpr>, Option<WindowFrame>);

/// A window clause `(base PARTITION BY ... ORDER BY ... frame)` on top of the named window
/// `base`, with PostgreSQL's rules for what may be added to it.
fn merge(base: Option<String>, spec: &sqlparser::ast::WindowSpec, named: &[Named]) -> Result<Spec, SqlError> {
    let Some(base) = base else {
        return Ok((spec.partition_by.clone(), spec.order_by.clone(), spec.window_frame.clone()));
    };
    let b = lookup(&base, named)?;
    let refuse = |m: String| Err(SqlError::new("42P20", m));
    if !spec.partition_by.is_empty() {
        return refuse(format!("cannot override PARTITION BY clause of window \"{base}\""));
    }
    if !spec.order_by.is_empty() && !b.order.is_empty() {
        return refuse(format!("cannot override ORDER BY clause of window \"{base}\""));
    }
    if b.frame.is_some() {
        return Err(SqlError::new("42P20", format!("cannot copy window \"{base}\" because it has a frame clause"))
            .with_hint("Omit the parentheses in this OVER clause."));
    }
    let order = if spec.order_by.is_empty() { b.order.clone() } else { spec.order_by.clone() };
    Ok((b.partition.clone(), order, spec.window_frame.clone()))
}

fn lookup<'n>(name: &str, named: &'n [Named]) -> Result<&'n Named, SqlError> {
    named
        .iter()
        .find(|n| n.name == name)
        .ok_or_else(|| SqlError::new("42704", format!("window \"{name}\" does not exist")))
}

/// Finds the window calls in `e` (adding each distinct one once), with the errors for window
/// functions where they may not be.
fn collect(e: &Expr, named: &[Named], env: &mut dyn Env, calls: &mut Vec<Call>) -> Result<(), SqlError> {
    match e {
        Expr::Function(f) if f.over.is_some() => {
            let key = e.to_string();
            if !calls.iter().any(|c| c.key == key) {
                calls.push(call(key, f, named, env)?);
            }
            Ok(())
        }
        Expr::Function(f) if is_window_only(&func_name(f)) => Err(requires_over(f)),
        Expr::Function(f) if is_aggregate(f) => {
            if let Some(w) = f.filter.as_deref().and_then(find_window) {
                return Err(nested_or_missing(w, "window functions are not allowed in FILTER"));
            }
            match func_args(f)?.unwrap_or_default().into_iter().find_map(find_window) {
                Some(w) => Err(nested_or_missing(w, "aggregate function calls cannot contain window function calls")),
                None => Ok(()),
            }
        }
        _ => children(e).into_iter().try_for_each(|c| collect(c, named, env, calls)),
    }
}

/// `message` (42803 for aggregates, else 42P20) for the window call `w`, or 42809 when `w`
/// has no OVER.
fn nested_or_missing(w: &Function, message: &str) -> SqlError {
    if w.over.is_none() {
        return requires_over(w);
    }
    let code = if message.starts_with("aggregate") { "42803" } else { "42P20" };
    SqlError::new(code, message.to_string())
}

/// One call, its window resolved and checked.
fn call(key: String, f: &Function, named: &[Named], env: &mut dyn Env) -> Result<Call, SqlError> {
    let name = func_name(f);
    if matches!(&f.args, FunctionArguments::List(l) if matches!(l.duplicate_treatment, Some(DuplicateTreatment::Distinct)))
    {
        return Err(SqlError::new("0A000", "DISTINCT is not implemented for window functions"));
    }
    if f.null_treatment.is_some() || !f.within_group.is_empty() {
        return Err(SqlError::unsupported(format!("IGNORE/RESPECT NULLS or WITHIN GROUP in {name}")));
    }
    let star = func_args(f)?.is_none();
    let args: Vec<Expr> = func_args(f)?.unwrap_or_default().into_iter().cloned().collect();
    let func = function(&name, args.len(), star)?;
    if f.filter.is_some() && !matches!(func, Func::Agg { .. }) {
        return Err(SqlError::new("0A000", "FILTER is not implemented for non-aggregate window functions"));
    }
    for a in args.iter().chain(f.filter.as_deref()) {
        if let Some(w) = find_window(a) {
            let in_filter = f.filter.as_deref() == Some(a);
            let m = if in_filter {
                "window functions are not allowed in FILTER"
            } else {
                "window function calls cannot be nested"
            };
            return Err(nested_or_missing(w, m));
        }
    }
    let spec = match f.over.as_ref() {
        Some(WindowType::NamedWindow(id)) => {
            let n = lookup(&ident_name(id), named)?;
            (n.partition.clone(), n.order.clone(), n.frame.clone())
        }
        Some(WindowType::WindowSpec(s)) => {
            let spec = merge(s.window_name.as_ref().map(ident_name), s, named)?;
            for e in spec.0.iter().chain(spec.1.iter().map(|o| &o.expr)) {
                refuse_in(e, "window definitions")?;
            }
            spec
        }
        None => return Err(requires_over(f)),
    };
    let (order, frame) = resolve_frame(&spec, env)?;
    Ok(Call { key, func, args, filter: f.filter.as_deref().cloned(), partition: spec.0, order, frame })
}

/// A window's ORDER BY as sort items, and its frame.
fn resolve_frame(spec: &Spec, env: &mut dyn Env) -> Result<(Vec<OrderItem>, frame::Frame), SqlError> {
    let order: Vec<OrderItem> = spec
        .1
        .iter()
        .map(|o| {
            let desc = matches!(o.options.sort, Some(OrderBySort::Desc));
            (o.expr.clone(), desc, o.options.nulls_first.unwrap_or(desc))
        })
        .collect();
    let frame = frame::Frame::from_ast(spec.2.as_ref(), order.len(), env)?;
    Ok((order, frame))
}

/// The function a name and argument count call (42883 when there is none).
fn function(name: &str, n: usize, star: bool) -> Result<Func, SqlError> {
    let f = match name {
        "row_number" => Func::RowNumber,
        "rank" => Func::Rank,
        "dense_rank" => Func::DenseRank,
        "percent_rank" => Func::PercentRank,
        "cume_dist" => Func::CumeDist,
        "ntile" => Func::Ntile,
        "lag" => Func::Lag,
        "lead" => Func::Lead,
        "first_value" => Func::FirstValue,
        "last_value" => Func::LastValue,
        "nth_value" => Func::NthValue,
        _ if crate::aggregate::is_aggregate_name(name) => Func::Agg { name: name.to_string(), star },
        _ => {
            return Err(SqlError::new(
                "42809",
                format!("OVER specified, but {name} is not a window function nor an aggregate function"),
            ))
        }
    };
    let arity_ok = match f {
        Func::RowNumber | Func::Rank | Func::DenseRank | Func::PercentRank | Func::CumeDist => n == 0 && !star,
        Func::Ntile | Func::FirstValue | Func::LastValue => n == 1,
        Func::Lag | Func::Lead => (1..=3).contains(&n),
        Func::NthValue => n == 2,
        Func::Agg { star: true, .. } => name == "count",
        Func::Agg { .. } => n == 1,
    };
    if !arity_ok {
        let message = match (star, n) {
            (true, _) => format!("function {name}(*) does not exist"),
            (false, 0) => format!("function {name}() does not exist"),
            _ => format!("function {name} with {n} arguments does not exist"),
        };
        return Err(SqlError::new("42883", message));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_check_their_argument_counts() {
        assert_eq!(function("row_number", 0, false).unwrap(), Func::RowNumber);
        assert_eq!(function("row_number", 1, false).unwrap_err().code, "42883");
        assert_eq!(function("lag", 3, false).unwrap(), Func::Lag);
        assert_eq!(function("lag", 4, false).unwrap_err().code, "42883");
        assert_eq!(function("count", 0, true).unwrap(), Func::Agg { name: "count".into(), star: true });
        assert_eq!(function("sum", 0, true).unwrap_err().code, "42883");
        assert_eq!(function("lower", 1, false).unwrap_err().code, "42809");
    }
}
