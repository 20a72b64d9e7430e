//! Expressions: evaluation over one row, and the static type inference that Describe needs.
//!
//! An expression is evaluated against a [`Scope`] (the columns of the one table a statement
//! reads, under its name or alias) and an [`Env`] (bound parameters and the functions that
//! need the session: `version()`, `txid_current()`, `current_setting()`). Aggregates are
//! computed by the SELECT executor and looked up here by their text.
//!
//! NULL follows SQL's three-valued logic: comparisons with NULL are NULL, `AND`/`OR` use the
//! truth tables, and a WHERE clause keeps a row only when it is true.

use std::collections::HashMap;

use sqlparser::ast::{
    BinaryOperator, CastKind, DataType, Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, UnaryOperator,
    Value,
};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::types::{compare, parse_text, Datum, Num, SqlType};

/// The columns an expression may name.
///
/// One relation: `names` are its name and alias and `cols` its columns. A join: `cols` are the
/// columns of every relation side by side (left to right) and `rels` says which relation owns
/// which run of them, so `a.id` finds `a`'s column and a bare `id` that two relations have is
/// ambiguous (42702).
pub struct Scope<'a> {
    /// The table's name and its alias, either of which may qualify a column.
    pub names: Vec<&'a str>,
    pub cols: &'a [ColumnDef],
    /// The relations of a join, in column order; empty for one relation.
    pub rels: Vec<ScopeRel<'a>>,
    /// The columns a `JOIN ... USING` (or NATURAL JOIN) merged: the name, the column an
    /// unqualified reference to it means (the left one, or the right one for a RIGHT JOIN),
    /// and every column merged into it.
    pub merged: Vec<(&'a str, usize, &'a [usize])>,
}

/// One relation of a join's [`Scope`]: the names that qualify its columns and where they are.
pub struct ScopeRel<'a> {
    pub names: Vec<&'a str>,
    pub first: usize,
    pub len: usize,
}

impl Scope<'_> {
    pub fn empty() -> Scope<'static> {
        Scope { names: Vec::new(), cols: &[], rels: Vec::new(), merged: Vec::new() }
    }

    /// The position of the column an identifier chain names.
    pub fn resolve(&self, parts: &[sqlparser::ast::Ident]) -> Result<usize, SqlError> {
        let col = ident_name(parts.last().ok_or_else(|| SqlError::syntax("empty identifier"))?);
        let qualifier = (parts.len() >= 2).then(|| ident_name(&parts[parts.len() - 2]));
        if !self.rels.is_empty() {
            return self.resolve_in_join(qualifier.as_deref(), &col);
        }
        if let Some(q) = qualifier {
            if !self.names.iter().any(|n| *n == q) {
                return Err(SqlError::new("42P01", format!("missing FROM-clause entry for table \"{q}\"")));
            }
        }
        self.cols.iter().position(|c| c.name == col).ok_or_else(|| SqlError::undefined_column(&col))
    }

    fn resolve_in_join(&self, qualifier: Option<&str>, col: &str) -> Result<usize, SqlError> {
        if let Some(q) = qualifier {
            let rel = self.rel(q)?;
            return (rel.first..rel.first + rel.len)
                .find(|&i| self.cols[i].name == col)
                .ok_or_else(|| SqlError::new("42703", format!("column {q}.{col} does not exist")));
        }
        if let Some(&(_, i, _)) = self.merged.iter().find(|(n, _, _)| *n == col) {
            return Ok(i);
        }
        let mut found = self.cols.iter().enumerate().filter(|(_, c)| c.name == col).map(|(i, _)| i);
        match (found.next(), found.next()) {
            (Some(i), None) => Ok(i),
            (None, _) => Err(SqlError::undefined_column(col)),
            (Some(_), Some(_)) => Err(SqlError::new("42702", format!("column reference \"{col}\" is ambiguous"))),
        }
    }

    /// The join relation a qualifier names.
    pub fn rel(&self, q: &str) -> Result<&ScopeRel<'_>, SqlError> {
        self.rels
            .iter()
            .find(|r| r.names.contains(&q))
            .ok_or_else(|| SqlError::new("42P01", format!("missing FROM-clause entry for table \"{q}\"")))
    }
}

/// Folds an unquoted identifier to lower case, as PostgreSQL does in a UTF-8 database
/// (`downcase_identifier`): only `A`-`Z`; other letters keep their case (`Émile` is `Émile`).
pub fn ident_name(i: &sqlparser::ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}

/// What expressions need from the session.
pub trait Env {
    /// `$n` (1-based).
    fn param(&self, n: usize) -> Result<Datum, SqlError>;
    /// A function only the session can answer, or `None` when `name` is not one.
    fn session_function(&mut self, name: &str, args: &[Datum]) -> Option<Result<Datum, SqlError>>;
    /// The rows of a subquery evaluated for the outer row `row` of `outer` (see
    /// [`crate::correlate`]; an uncorrelated one runs once per statement), or `None` where
    /// there is no session to run it.
    fn subquery(
        &mut self,
        _q: &sqlparser::ast::Query,
        _outer: &Scope<'_>,
        _row: &[Datum],
    ) -> Option<Result<std::rc::Rc<Vec<Vec<Datum>>>, SqlError>> {
        None
    }
}

/// An [`Env`] with parameters and no session functions.
pub struct Params<'a>(pub &'a [Datum]);

impl Env for Params<'_> {
    fn param(&self, n: usize) -> Result<Datum, SqlError> {
        param_at(self.0, n)
    }

    fn session_function(&mut self, _: &str, _: &[Datum]) -> Option<Result<Datum, SqlError>> {
        None
    }
}

pub fn param_at(params: &[Datum], n: usize) -> Result<Datum, SqlError> {
    n.checked_sub(1)
        .and_then(|i| params.get(i))
        .cloned()
        .ok_or_else(|| SqlError::new("42P02", format!("there is no parameter ${n}")))
}

/// Names of the aggregate functions.
pub fn is_aggregate(f: &Function) -> bool {
    matches!(func_name(f).as_str(), "count" | "sum" | "min" | "max" | "avg")
}

pub fn func_name(f: &Function) -> String {
    f.name.0.last().and_then(|p| p.as_ident()).map(ident_name).unwrap_or_default()
}

/// A function call's argument expressions; `None` for `count(*)`.
pub fn func_args(f: &Function) -> Result<Option<Vec<&Expr>>, SqlError> {
    match &f.args {
        FunctionArguments::None => Ok(Some(Vec::new())),
        FunctionArguments::Subquery(_) => Err(SqlError::unsupported("a subquery as a function argument")),
        FunctionArguments::List(l) => {
            let mut out = Vec::new();
            for a in &l.args {
                match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => out.push(e),
                    FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => return Ok(None),
                    _ => return Err(SqlError::unsupported("named or wildcard function arguments")),
                }
            }
            Ok(Some(out))
        }
    }
}

/// Evaluates `e` on `row`.
pub fn eval(
    e: &Expr,
    scope: &Scope<'_>,
    row: &[Datum],
    env: &mut dyn Env,
    aggs: Option<&HashMap<String, Datum>>,
) -> Result<Datum, SqlError> {
    let ev = |x: &Expr, env: &mut dyn Env| eval(x, scope, row, env, aggs);
    Ok(match e {
        Expr::Identifier(i) => {
            let parts = std::slice::from_ref(i);
            match scope.resolve(parts) {
                Ok(p) => row[p].clone(),
                // Functions SQL spells without parentheses.
                Err(err) => match ident_name(i).as_str() {
                    n @ ("current_timestamp" | "localtimestamp" | "current_date") => {
                        crate::datetime::call(n, &[]).unwrap_or(Err(err))?
                    }
                    "current_user" | "session_user" | "user" | "current_catalog" => Datum::Text("postgres".into()),
                    _ => return Err(err),
                },
            }
        }
        Expr::CompoundIdentifier(parts) => row[scope.resolve(parts)?].clone(),
        Expr::Value(v) => literal(&v.value, env)?,
        Expr::Nested(x) => ev(x, env)?,
        // One collation here (byte order, as C): `COLLATE "C"` or `pg_catalog.default` changes nothing.
        Expr::Collate { expr, .. } => ev(expr, env)?,
        Expr::UnaryOp { op, expr } => {
            let v = ev(expr, env)?;
            match (op, v) {
                (_, Datum::Null) => Datum::Null,
                (UnaryOperator::Minus, Datum::Int(x)) => {
                    Datum::Int(x.checked_neg().ok_or_else(|| SqlError::out_of_range("bigint"))?)
                }
                (UnaryOperator::Minus, Datum::Float(x)) => Datum::Float(-x),
                (UnaryOperator::Minus, Datum::Num(n)) => Datum::Num(Num { mantissa: -n.mantissa, scale: n.scale }),
                (UnaryOperator::Minus, Datum::Interval(i)) => {
                    Datum::Interval(i.checked_neg().ok_or_else(crate::interval::out_of_range)?)
                }
                (UnaryOperator::Minus, Datum::Text(s)) => negate_text(&s)?,
                (UnaryOperator::Plus, v) => v,
                (UnaryOperator::Not, v) => match truth(&v)? {
                    Some(b) => Datum::Bool(!b),
                    None => Datum::Null,
                },
                (op, _) => return Err(SqlError::unsupported(format!("operator {op}"))),
            }
        }
        Expr::BinaryOp { left, op, right } => {
            let l = ev(left, env)?;
            match op {
                BinaryOperator::And | BinaryOperator::Or => {
                    let lb = truth(&l)?;
                    let and = matches!(op, BinaryOperator::And);
                    if lb == Some(!and) {
                        return Ok(Datum::Bool(!and));
                    }
                    let rb = truth(&ev(right, env)?)?;
                    match (lb, rb) {
                        (_, Some(b)) if b != and => Datum::Bool(b),
                        (Some(_), Some(b)) => Datum::Bool(b),
                        _ => Datum::Null,
                    }
                }
                _ => binary(op, l, ev(right, env)?)?,
            }
        }
        Expr::IsNull(x) => Datum::Bool(ev(x, env)?.is_null()),
        Expr::IsNotNull(x) => Datum::Bool(!ev(x, env)?.is_null()),
        Expr::IsTrue(x) => Datum::Bool(truth(&ev(x, env)?)? == Some(true)),
        Expr::IsFalse(x) => Datum::Bool(truth(&ev(x, env)?)? == Some(false)),
        Expr::IsNotTrue(x) => Datum::Bool(truth(&ev(x, env)?)? != Some(true)),
        Expr::IsNotFalse(x) => Datum::Bool(truth(&ev(x, env)?)? != Some(false)),
        Expr::IsDistinctFrom(a, b) | Expr::IsNotDistinctFrom(a, b) => {
            let (a, b) = (ev(a, env)?, ev(b, env)?);
            let same = match (&a, &b) {
                (Datum::Null, Datum::Null) => true,
                (Datum::Null, _) | (_, Datum::Null) => false,
                _ => compare(&a, &b) == Some(std::cmp::Ordering::Equal),
            };
            Datum::Bool(same == matches!(e, Expr::IsNotDistinctFrom(..)))
        }
        Expr::Between { expr, negated, low, high } => {
            let v = ev(expr, env)?;
            let ge = binary(&BinaryOperator::GtEq, v.clone(), ev(low, env)?)?;
            let le = binary(&BinaryOperator::LtEq, v, ev(high, env)?)?;
            let r = match (truth(&ge)?, truth(&le)?) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
            r.map_or(Datum::Null, |b| Datum::Bool(b != *negated))
        }
        Expr::Subquery(q) => {
            let rows = run_subquery(q, scope, row, env)?;
            match rows.as_slice() {
                [] => Datum::Null,
                [row] if row.len() == 1 => row[0].clone(),
                [row] => {
                    return Err(SqlError::new(
                        "42601",
                        format!("subquery must return only one column, not {}", row.len()),
                    ))
                }
                _ => {
                    return Err(SqlError::new(
                        "21000",
                        "more than one row returned by a subquery used as an expression",
                    ))
                }
            }
        }
        Expr::Exists { subquery, negated } => {
            let rows = run_subquery(subquery, scope, row, env)?;
            Datum::Bool(rows.is_empty() == *negated)
        }
        Expr::InSubquery { expr, subquery, negated } => {
            let v = ev(expr, env)?;
            let rows = run_subquery(subquery, scope, row, env)?;
            if v.is_null() {
                return Ok(if rows.is_empty() { Datum::Bool(*negated) } else { Datum::Null });
            }
            let mut saw_null = false;
            for r in rows.iter() {
                if r.len() != 1 {
                    return Err(SqlError::new("42601", "subquery has too many columns"));
                }
                if r[0].is_null() {
                    saw_null = true;
                } else if compare(&v, &r[0]) == Some(std::cmp::Ordering::Equal) {
                    return Ok(Datum::Bool(!negated));
                }
            }
            if saw_null {
                Datum::Null
            } else {
                Datum::Bool(*negated)
            }
        }
        Expr::Substring { expr, substring_from, substring_for, .. } => {
            let mut args = vec![ev(expr, env)?, Datum::Int(1)];
            if let Some(f) = substring_from {
                args[1] = ev(f, env)?;
            }
            if let Some(n) = substring_for {
                args.push(ev(n, env)?);
            }
            if args.iter().any(Datum::is_null) {
                return Ok(Datum::Null);
            }
            substr(&args)?
        }
        Expr::AnyOp { left, compare_op, right, .. } => {
            let v = ev(left, env)?;
            let arr = ev(right, env)?;
            let Some(text) = arr.to_text() else { return Ok(Datum::Null) };
            any_of(&v, compare_op, &text)?
        }
        Expr::InList { expr, list, negated } => {
            let v = ev(expr, env)?;
            if v.is_null() {
                return Ok(Datum::Null);
            }
            let mut saw_null = false;
            for item in list {
                let x = ev(item, env)?;
                if x.is_null() {
                    saw_null = true;
                } else if compare(&v, &x) == Some(std::cmp::Ordering::Equal) {
                    return Ok(Datum::Bool(!negated));
                }
            }
            if saw_null {
                Datum::Null
            } else {
                Datum::Bool(*negated)
            }
        }
        Expr::Like { negated, expr, pattern, any: false, escape_char: None } => {
            let (v, p) = (ev(expr, env)?, ev(pattern, env)?);
            match (v.to_text(), p.to_text()) {
                (Some(v), Some(p)) => Datum::Bool(crate::pattern::like(&v, &p) != *negated),
                _ => Datum::Null,
            }
        }
        Expr::Cast { kind: CastKind::Cast | CastKind::DoubleColon, expr, data_type, .. } => {
            let ty = sql_type(data_type)?;
            let v = ev(expr, env)?;
            cast(v, ty)?
        }
        Expr::Extract { field, expr, .. } => {
            let v = ev(expr, env)?;
            if v.is_null() {
                return Ok(Datum::Null);
            }
            crate::datetime::extract(&field.to_string(), &v)?
        }
        Expr::Interval(iv) => {
            let v = ev(&iv.value, env)?;
            let unit = iv.last_field.as_ref().or(iv.leading_field.as_ref()).map(|f| f.to_string().to_ascii_lowercase());
            match v.to_text() {
                None => Datum::Null,
                Some(s) => Datum::Interval(crate::interval::parse(&s, unit.as_deref())?),
            }
        }
        Expr::AtTimeZone { timestamp, time_zone } => {
            let (v, z) = (ev(timestamp, env)?, ev(time_zone, env)?);
            crate::datetime::call("timezone", &[z, v]).unwrap_or(Ok(Datum::Null))?
        }
        Expr::TypedString(ts) => {
            let ty = sql_type(&ts.data_type)?;
            let s = match &ts.value.value {
                Value::SingleQuotedString(s) => s.clone(),
                other => other.to_string(),
            };
            cast(Datum::Text(s), ty)?
        }
        Expr::Case { operand, conditions, else_result, .. } => {
            let base = match operand {
                Some(o) => Some(ev(o, env)?),
                None => None,
            };
            for cw in conditions {
                let c = ev(&cw.condition, env)?;
                let hit = match &base {
                    Some(b) => compare(b, &c) == Some(std::cmp::Ordering::Equal),
                    None => truth(&c)? == Some(true),
                };
                if hit {
                    return ev(&cw.result, env);
                }
            }
            match else_result {
                Some(x) => ev(x, env)?,
                None => Datum::Null,
            }
        }
        // `ARRAY(subquery)`: the subquery's one column as an array, in its text form.
        Expr::Function(f) if func_name(f) == "array" && matches!(f.args, FunctionArguments::Subquery(_)) => {
            let FunctionArguments::Subquery(q) = &f.args else { unreachable!("matched above") };
            let rows = run_subquery(q, scope, row, env)?;
            if let Some(r) = rows.first().filter(|r| r.len() != 1) {
                return Err(SqlError::new("42601", format!("subquery must return only one column, not {}", r.len())));
            }
            Datum::Text(array_text(rows.iter().map(|r| r[0].to_text())))
        }
        Expr::Function(f) => {
            // Aggregates and window calls were computed over the rows (query.rs, window.rs).
            if is_aggregate(f) || f.over.is_some() {
                let key = e.to_string();
                return aggs.and_then(|m| m.get(&key).cloned()).ok_or_else(|| match f.over {
                    Some(_) => crate::window::not_allowed_here(),
                    None => SqlError::new("42803", format!("aggregate function {} is not allowed here", func_name(f))),
                });
            }
            let args = func_args(f)?.ok_or_else(|| SqlError::unsupported("* as a function argument"))?;
            let mut vals = Vec::with_capacity(args.len());
            for a in args {
                vals.push(ev(a, env)?);
            }
            call(f, &func_name(f), vals, env)?
        }
        other => return Err(SqlError::unsupported(format!("the expression \"{other}\""))),
    })
}

fn negate_text(s: &str) -> Result<Datum, SqlError> {
    match parse_text(s, SqlType::Int8) {
        Ok(Datum::Int(x)) => Ok(Datum::Int(-x)),
        _ => match parse_text(s, SqlType::Float8)? {
            Datum::Float(f) => Ok(Datum::Float(-f)),
            other => Ok(other),
        },
    }
}

/// An explicit cast.
pub fn cast(v: Datum, ty: SqlType) -> Result<Datum, SqlError> {
    let d = v.coerce(ty)?;
    Ok(match (d, ty) {
        (Datum::Num(n), SqlType::Numeric { scale, precision }) if precision < 38 => {
            Datum::Num(n.rescale(scale).ok_or_else(|| SqlError::numeric_overflow(precision, scale))?)
        }
        (Datum::Int(x), SqlType::Int2) if i16::try_from(x).is_err() => return Err(SqlError::out_of_range("smallint")),
        (Datum::Int(x), SqlType::Int4) if i32::try_from(x).is_err() => return Err(SqlError::out_of_range("integer")),
        (d, _) => d,
    })
}

/// The value of a literal.
fn literal(v: &Value, env: &mut dyn Env) -> Result<Datum, SqlError> {
    Ok(match v {
        Value::Null => Datum::Null,
        Value::Boolean(b) => Datum::Bool(*b),
        Value::Number(n, _) => {
            if let Ok(i) = n.parse::<i64>() {
                Datum::Int(i)
            } else if n.contains(['e', 'E']) {
                Datum::Float(n.parse().map_err(|_| SqlError::syntax(format!("invalid number {n}")))?)
            } else {
                Datum::Num(Num::parse(n).ok_or_else(|| SqlError::syntax(format!("invalid number {n}")))?)
            }
        }
        Value::SingleQuotedString(s) | Value::EscapedStringLiteral(s) | Value::NationalStringLiteral(s) => {
            Datum::Text(s.clone())
        }
        Value::DollarQuotedString(d) => Datum::Text(d.value.clone()),
        Value::Placeholder(p) => {
            let n: usize = p
                .strip_prefix('$')
                .and_then(|x| x.parse().ok())
                .ok_or_else(|| SqlError::syntax(format!("syntax error at or near \"{p}\"")))?;
            env.param(n)?
        }
        other => return Err(SqlError::unsupported(format!("the literal {other}"))),
    })
}

/// SQL truth value of a datum.
pub fn truth(v: &Datum) -> Result<Option<bool>, SqlError> {
    match v {
        Datum::Null => Ok(None),
        Datum::Bool(b) => Ok(Some(*b)),
        Datum::Text(s) => match parse_text(s, SqlType::Bool)? {
            Datum::Bool(b) => Ok(Some(b)),
            _ => Ok(None),
        },
        _ => Err(SqlError::new("42804", "argument of WHERE must be type boolean")),
    }
}

fn binary(op: &BinaryOperator, l: Datum, r: Datum) -> Result<Datum, SqlError> {
    use std::cmp::Ordering as O;
    use BinaryOperator as B;
    if l.is_null() || r.is_null() {
        return Ok(Datum::Null);
    }
    let cmp = |want: fn(O) -> bool| -> Result<Datum, SqlError> {
        match compare(&l, &r) {
            Some(o) => Ok(Datum::Bool(want(o))),
            None => Err(SqlError::new("42883", format!("operator does not exist: {} {op} {}", tyname(&l), tyname(&r)))),
        }
    };
    match op {
        B::Eq => cmp(|o| o == O::Equal),
        B::NotEq => cmp(|o| o != O::Equal),
        B::Lt => cmp(|o| o == O::Less),
        B::LtEq => cmp(|o| o != O::Greater),
        B::Gt => cmp(|o| o == O::Greater),
        B::GtEq => cmp(|o| o != O::Less),
        B::StringConcat => {
            Ok(Datum::Text(format!("{}{}", l.to_text().unwrap_or_default(), r.to_text().unwrap_or_default())))
        }
        B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo => {
            crate::datetime::arith(op, &l, &r).unwrap_or_else(|| arith(op, l, r))
        }
        B::PGRegexMatch | B::PGRegexIMatch | B::PGRegexNotMatch | B::PGRegexNotIMatch => {
            let (s, p) = (l.to_text().unwrap_or_default(), r.to_text().unwrap_or_default());
            let insensitive = matches!(op, B::PGRegexIMatch | B::PGRegexNotIMatch);
            let hit = crate::pattern::regex_match(&s, &p, insensitive)?;
            Ok(Datum::Bool(hit == matches!(op, B::PGRegexMatch | B::PGRegexIMatch)))
        }
        // `OPERATOR(pg_catalog.~)` (psql's catalog queries): the operator it names.
        B::PGCustomBinaryOperator(parts) => match parts.last().map(String::as_str) {
            Some("~") => binary(&B::PGRegexMatch, l, r),
            Some("~*") => binary(&B::PGRegexIMatch, l, r),
            Some("!~") => binary(&B::PGRegexNotMatch, l, r),
            Some("!~*") => binary(&B::PGRegexNotIMatch, l, r),
            Some("=") => binary(&B::Eq, l, r),
            Some("<>") => binary(&B::NotEq, l, r),
            _ => Err(SqlError::unsupported(format!("operator {op}"))),
        },
        other => Err(SqlError::unsupported(format!("operator {other}"))),
    }
}

fn tyname(d: &Datum) -> String {
    d.natural_type().display()
}

/// Reads an untyped string operand as the other side's type (or as a number).
fn untext(d: Datum, other: &Datum) -> Result<Datum, SqlError> {
    match d {
        Datum::Text(s) => match other {
            Datum::Text(_) => parse_text(&s, SqlType::Numeric { precision: 38, scale: 0 }),
            o => parse_text(&s, o.natural_type()),
        },
        d => Ok(d),
    }
}

fn arith(op: &BinaryOperator, l: Datum, r: Datum) -> Result<Datum, SqlError> {
    use BinaryOperator as B;
    let l2 = untext(l.clone(), &r)?;
    let r = untext(r, &l2)?;
    let l = l2;
    let overflow = || SqlError::out_of_range("bigint");
    let div0 = || SqlError::new("22012", "division by zero");
    Ok(match (l, r) {
        (Datum::Int(a), Datum::Int(b)) => Datum::Int(match op {
            B::Plus => a.checked_add(b).ok_or_else(overflow)?,
            B::Minus => a.checked_sub(b).ok_or_else(overflow)?,
            B::Multiply => a.checked_mul(b).ok_or_else(overflow)?,
            B::Divide => a.checked_div(b).ok_or_else(div0)?,
            _ => a.checked_rem(b).ok_or_else(div0)?,
        }),
        (a @ Datum::Float(_), b) | (a, b @ Datum::Float(_)) => {
            let (x, y) = (as_f64(&a)?, as_f64(&b)?);
            Datum::Float(match op {
                B::Plus => x + y,
                B::Minus => x - y,
                B::Multiply => x * y,
                B::Divide if y == 0.0 => return Err(div0()),
                B::Divide => x / y,
                _ => x % y,
            })
        }
        (a @ (Datum::Num(_) | Datum::Int(_)), b @ (Datum::Num(_) | Datum::Int(_))) => {
            let (a, b) = (to_num(&a), to_num(&b));
            let s = a.scale.max(b.scale);
            let (x, y) = (a.rescale(s).ok_or_else(overflow)?, b.rescale(s).ok_or_else(overflow)?);
            Datum::Num(match op {
                B::Plus => Num { mantissa: x.mantissa.checked_add(y.mantissa).ok_or_else(overflow)?, scale: s },
                B::Minus => Num { mantissa: x.mantissa.checked_sub(y.mantissa).ok_or_else(overflow)?, scale: s },
                B::Multiply => Num {
                    mantissa: a.mantissa.checked_mul(b.mantissa).ok_or_else(overflow)?,
                    scale: a.scale.checked_add(b.scale).filter(|s| *s <= 60).ok_or_else(overflow)?,
                },
                B::Divide => {
                    if y.mantissa == 0 {
                        return Err(div0());
                    }
                    // Sixteen decimal places, as numeric division of small values gives.
                    let num = x.mantissa.checked_mul(10i128.pow(16)).ok_or_else(overflow)?;
                    Num { mantissa: num / y.mantissa, scale: 16 }
                }
                _ => {
                    if y.mantissa == 0 {
                        return Err(div0());
                    }
                    Num { mantissa: x.mantissa % y.mantissa, scale: s }
                }
            })
        }
        (a, b) => {
            return Err(SqlError::new("42883", format!("operator does not exist: {} {op} {}", tyname(&a), tyname(&b))))
        }
    })
}

fn to_num(d: &Datum) -> Num {
    match d {
        Datum::Int(x) => Num { mantissa: i128::from(*x), scale: 0 },
        Datum::Num(n) => *n,
        _ => Num { mantissa: 0, scale: 0 },
    }
}

pub fn as_f64(d: &Datum) -> Result<f64, SqlError> {
    match d {
        Datum::Int(x) => Ok(*x as f64),
        Datum::Float(f) => Ok(*f),
        Datum::Num(n) => Ok(n.to_f64()),
        Datum::Text(s) => match parse_text(s, SqlType::Float8)? {
            Datum::Float(f) => Ok(f),
            _ => Ok(0.0),
        },
        other => Err(SqlError::new("42883", format!("{} is not a number", tyname(other)))),
    }
}

/// Scalar functions that need no session.
fn call(f: &Function, name: &str, args: Vec<Datum>, env: &mut dyn Env) -> Result<Datum, SqlError> {
    // Before the session's: `age(timestamp)` is answered here, `age(xid)` there.
    if let Some(r) = crate::datetime::call(name, &args) {
        return r;
    }
    if let Some(r) = env.session_function(name, &args) {
        return r;
    }
    let arity = |n: usize| -> Result<(), SqlError> {
        if args.len() == n {
            Ok(())
        } else {
            Err(SqlError::new("42883", format!("function {name} with {} arguments does not exist", args.len())))
        }
    };
    let text = |d: &Datum| d.to_text();
    Ok(match name {
        "coalesce" => args.into_iter().find(|a| !a.is_null()).unwrap_or(Datum::Null),
        "nullif" => {
            arity(2)?;
            if compare(&args[0], &args[1]) == Some(std::cmp::Ordering::Equal) {
                Datum::Null
            } else {
                args[0].clone()
            }
        }
        "lower" | "upper" | "length" | "char_length" | "btrim" | "trim" => {
            arity(1)?;
            match text(&args[0]) {
                None => Datum::Null,
                Some(s) => match name {
                    "lower" => Datum::Text(s.to_lowercase()),
                    "upper" => Datum::Text(s.to_uppercase()),
                    "btrim" | "trim" => Datum::Text(s.trim_matches(' ').to_string()),
                    _ => Datum::Int(s.chars().count() as i64),
                },
            }
        }
        "abs" => {
            arity(1)?;
            match &args[0] {
                Datum::Int(x) => Datum::Int(x.checked_abs().ok_or_else(|| SqlError::out_of_range("bigint"))?),
                Datum::Float(x) => Datum::Float(x.abs()),
                Datum::Num(n) => Datum::Num(Num { mantissa: n.mantissa.abs(), scale: n.scale }),
                Datum::Null => Datum::Null,
                other => Datum::Float(as_f64(other)?.abs()),
            }
        }
        "random" => {
            arity(0)?;
            Datum::Float(random_f64())
        }
        "substr" | "substring" => {
            if !(2..=3).contains(&args.len()) {
                arity(2)?;
            }
            substr(&args)?
        }
        // An array in its text form: `{a,b}`, or an int2vector's `1 2`.
        "array_length" => {
            arity(2)?;
            match (text(&args[0]), &args[1]) {
                (Some(a), Datum::Int(1)) => {
                    let n = array_elements(&a).len();
                    if n == 0 {
                        Datum::Null
                    } else {
                        Datum::Int(n as i64)
                    }
                }
                _ => Datum::Null,
            }
        }
        "array_to_string" => {
            if !(2..=3).contains(&args.len()) {
                arity(2)?;
            }
            match (text(&args[0]), text(&args[1])) {
                (Some(a), Some(sep)) => {
                    let null_as = args.get(2).and_then(Datum::to_text);
                    let parts: Vec<String> =
                        array_elements(&a).into_iter().filter_map(|e| e.or_else(|| null_as.clone())).collect();
                    Datum::Text(parts.join(&sep))
                }
                _ => Datum::Null,
            }
        }
        // Arrays here are one-dimensional and 1-based.
        "array_upper" | "array_lower" => {
            arity(2)?;
            match (text(&args[0]), &args[1]) {
                (Some(a), Datum::Int(1)) => match array_elements(&a).len() {
                    0 => Datum::Null,
                    n if name == "array_upper" => Datum::Int(n as i64),
                    _ => Datum::Int(1),
                },
                _ => Datum::Null,
            }
        }
        // An expression tree's text is kept as its source (row filters have none here).
        "pg_get_expr" => {
            if !(2..=3).contains(&args.len()) {
                arity(2)?;
            }
            args.into_iter().next().unwrap_or(Datum::Null)
        }
        // psql's catalog queries: one role owns everything but the public schema (PostgreSQL
        // 15's pg_database_owner), every table is on the search path.
        "pg_get_userbyid" => {
            arity(1)?;
            match &args[0] {
                Datum::Null => Datum::Null,
                Datum::Int(crate::views::DATABASE_OWNER) => Datum::Text("pg_database_owner".into()),
                _ => Datum::Text("postgres".into()),
            }
        }
        "pg_table_is_visible" => {
            arity(1)?;
            if args[0].is_null() {
                Datum::Null
            } else {
                Datum::Bool(true)
            }
        }
        _ => {
            return Err(SqlError::new("42883", format!("function {}() does not exist", f.name))
                .with_hint("settledb implements a small set of functions; see docs/server.md."))
        }
    })
}

/// A subquery's rows through the session, or 0A000 where there is none.
fn run_subquery(
    q: &sqlparser::ast::Query,
    scope: &Scope<'_>,
    row: &[Datum],
    env: &mut dyn Env,
) -> Result<std::rc::Rc<Vec<Vec<Datum>>>, SqlError> {
    env.subquery(q, scope, row).unwrap_or_else(|| Err(SqlError::unsupported("a subquery here")))
}

/// PostgreSQL's `substr(text, from [, count])` (and `substring(text FROM from FOR count)`):
/// characters, 1-based; a start before 1 shortens the count by as much.
fn substr(args: &[Datum]) -> Result<Datum, SqlError> {
    let (Some(s), Some(Datum::Int(from))) = (args[0].to_text(), args.get(1)) else { return Ok(Datum::Null) };
    let end = match args.get(2) {
        None => i64::MAX,
        Some(Datum::Int(n)) if *n < 0 => return Err(SqlError::new("22011", "negative substring length not allowed")),
        Some(Datum::Int(n)) => from.saturating_add(*n),
        Some(_) => return Ok(Datum::Null),
    };
    let start = (*from).max(1);
    if end <= start {
        return Ok(Datum::Text(String::new()));
    }
    let take = usize::try_from(end - start).unwrap_or(usize::MAX);
    Ok(Datum::Text(s.chars().skip((start - 1) as usize).take(take).collect()))
}

/// The elements of an array in its text form: `{1,2}` (quoted elements unquoted, `NULL` a
/// null), or the space-separated form of int2vector and oidvector (`1 2`).
pub fn array_elements(text: &str) -> Vec<Option<String>> {
    let t = text.trim();
    let Some(inner) = t.strip_prefix('{').and_then(|x| x.strip_suffix('}')) else {
        return t.split_whitespace().map(|x| Some(x.to_string())).collect();
    };
    if inner.trim().is_empty() {
        return Vec::new();
    }
    let (mut out, mut cur, mut quoted, mut was_quoted, mut escape) = (Vec::new(), String::new(), false, false, false);
    for c in inner.chars() {
        match c {
            _ if escape => {
                cur.push(c);
                escape = false;
            }
            '\\' if quoted => escape = true,
            '"' => {
                quoted = !quoted;
                was_quoted = true;
            }
            ',' if !quoted => {
                out.push(element(std::mem::take(&mut cur), was_quoted));
                was_quoted = false;
            }
            _ => cur.push(c),
        }
    }
    out.push(element(cur, was_quoted));
    out
}

/// An array's text form, as PostgreSQL's `array_out` writes it: `{a,b}`, NULL elements as
/// `NULL`, an element quoted (`"a b"`, with `\` before `"` and `\`) when it is empty, is
/// `NULL` in any case, or holds a space, comma, brace, quote or backslash.
pub fn array_text(items: impl Iterator<Item = Option<String>>) -> String {
    let mut out = String::from("{");
    for (i, it) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        match it {
            None => out.push_str("NULL"),
            Some(v) => {
                let quote = v.is_empty()
                    || v.eq_ignore_ascii_case("null")
                    || v.chars().any(|c| c.is_whitespace() || matches!(c, ',' | '{' | '}' | '"' | '\\'));
                if quote {
                    out.push('"');
                    for c in v.chars() {
                        if matches!(c, '"' | '\\') {
                            out.push('\\');
                        }
                        out.push(c);
                    }
                    out.push('"');
                } else {
                    out.push_str(&v);
                }
            }
        }
    }
    out.push('}');
    out
}

fn element(s: String, quoted: bool) -> Option<String> {
    if !quoted && s.trim().eq_ignore_ascii_case("null") {
        None
    } else if quoted {
        Some(s)
    } else {
        Some(s.trim().to_string())
    }
}

/// `v op ANY(array)`: true when some element compares so, else NULL when `v` or an element
/// is NULL, else false. Elements are read as `v`'s kind of value.
fn any_of(v: &Datum, op: &BinaryOperator, array: &str) -> Result<Datum, SqlError> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let holds = |o: std::cmp::Ordering| match op {
        BinaryOperator::Eq => Ok(o == Equal),
        BinaryOperator::NotEq => Ok(o != Equal),
        BinaryOperator::Lt => Ok(o == Less),
        BinaryOperator::LtEq => Ok(o != Greater),
        BinaryOperator::Gt => Ok(o == Greater),
        BinaryOperator::GtEq => Ok(o != Less),
        other => Err(SqlError::unsupported(format!("the operator {other} with ANY"))),
    };
    if v.is_null() {
        return Ok(Datum::Null);
    }
    let mut saw_null = false;
    for e in array_elements(array) {
        let Some(e) = e else {
            saw_null = true;
            continue;
        };
        let x = match v {
            Datum::Int(_) => parse_text(&e, SqlType::Int8)?,
            Datum::Float(_) | Datum::Num(_) => parse_text(&e, SqlType::Float8)?,
            Datum::Bool(_) => parse_text(&e, SqlType::Bool)?,
            _ => Datum::Text(e),
        };
        match compare(v, &x) {
            Some(o) if holds(o)? => return Ok(Datum::Bool(true)),
            Some(_) => {}
            None => saw_null = true,
        }
    }
    Ok(if saw_null { Datum::Null } else { Datum::Bool(false) })
}

fn random_f64() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_micros() as u64);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

pub fn now_micros() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// The SQL type a type name in the query means.
pub fn sql_type(dt: &DataType) -> Result<SqlType, SqlError> {
    type_from_name(&dt.to_string())
}

/// Parses a type name as written (`varchar(20)`, `numeric(12, 2)`, `double precision`).
pub fn type_from_name(s: &str) -> Result<SqlType, SqlError> {
    let lower = s.trim().to_ascii_lowercase();
    let (base, args) = match lower.find('(') {
        Some(i) => (lower[..i].trim().to_string(), lower[i + 1..].trim_end_matches(')').to_string()),
        None => (lower.clone(), String::new()),
    };
    let base = base.trim_start_matches("pg_catalog.");
    // `timestamp(3) with time zone`: the precision is not kept (microseconds always).
    let base = if base.starts_with("timestamp") && lower.ends_with("with time zone") && !lower.contains("without") {
        "timestamptz"
    } else {
        base
    };
    let nums: Vec<u32> = args.split(',').filter_map(|x| x.trim().parse().ok()).collect();
    Ok(match base {
        "bool" | "boolean" => SqlType::Bool,
        "int2" | "smallint" => SqlType::Int2,
        "int" | "int4" | "integer" => SqlType::Int4,
        "int8" | "bigint" => SqlType::Int8,
        "float8" | "double precision" | "double" | "float" => SqlType::Float8,
        "numeric" | "decimal" => match nums.as_slice() {
            [p] if (1..=18).contains(p) => SqlType::Numeric { precision: *p as u8, scale: 0 },
            [p, s] if (1..=18).contains(p) && s <= p => SqlType::Numeric { precision: *p as u8, scale: *s as u8 },
            _ => {
                return Err(SqlError::unsupported(format!(
                    "type {s} (numeric needs a precision of 1 to 18, as numeric(p) or numeric(p,s), because it is stored as a scaled 64-bit integer)"
                )))
            }
        },
        "text" => SqlType::Text,
        "varchar" | "character varying" => SqlType::Varchar(nums.first().copied()),
        "char" | "character" | "bpchar" => SqlType::Char(nums.first().copied().unwrap_or(1)),
        "timestamp" | "timestamp without time zone" => SqlType::Timestamp,
        "timestamptz" | "timestamp with time zone" => SqlType::TimestampTz,
        b if b.starts_with("interval") => SqlType::Interval,
        "date" => SqlType::Date,
        "bytea" => SqlType::Bytea,
        _ => return Err(SqlError::new("42704", format!("type \"{s}\" is not supported by settledb"))),
    })
}

/// The type an expression will have, for RowDescription before execution.
pub fn infer_type(e: &Expr, scope: &Scope<'_>, params: &[SqlType]) -> SqlType {
    match e {
        Expr::Identifier(i) => match scope.resolve(std::slice::from_ref(i)) {
            Ok(p) => scope.cols[p].ty,
            Err(_) => match ident_name(i).as_str() {
                n @ ("current_timestamp" | "localtimestamp" | "current_date") => {
                    crate::datetime::infer_call(n, &[]).unwrap_or(SqlType::Text)
                }
                _ => SqlType::Text,
            },
        },
        Expr::CompoundIdentifier(p) => scope.resolve(p).map_or(SqlType::Text, |i| scope.cols[i].ty),
        Expr::Nested(x) | Expr::Collate { expr: x, .. } => infer_type(x, scope, params),
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) if n.parse::<i64>().is_ok() => {
                if n.parse::<i32>().is_ok() {
                    SqlType::Int4
                } else {
                    SqlType::Int8
                }
            }
            Value::Number(..) => SqlType::Numeric { precision: 38, scale: 0 },
            Value::Boolean(_) => SqlType::Bool,
            Value::Placeholder(p) => p
                .strip_prefix('$')
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| params.get(n.wrapping_sub(1)).copied())
                .unwrap_or(SqlType::Text),
            _ => SqlType::Text,
        },
        Expr::UnaryOp { op: UnaryOperator::Not, .. } => SqlType::Bool,
        Expr::UnaryOp { expr, .. } => infer_type(expr, scope, params),
        Expr::BinaryOp { left, op, right } => match op {
            BinaryOperator::Plus
            | BinaryOperator::Minus
            | BinaryOperator::Multiply
            | BinaryOperator::Divide
            | BinaryOperator::Modulo => {
                let (a, b) = (infer_type(left, scope, params), infer_type(right, scope, params));
                if let Some(t) = crate::datetime::infer_arith(op, a, b) {
                    return t;
                }
                match (a, b) {
                    (SqlType::Float8, _) | (_, SqlType::Float8) => SqlType::Float8,
                    (SqlType::Numeric { .. }, _) | (_, SqlType::Numeric { .. }) => {
                        SqlType::Numeric { precision: 38, scale: 0 }
                    }
                    (SqlType::Int8, _) | (_, SqlType::Int8) => SqlType::Int8,
                    (SqlType::Int4 | SqlType::Int2, SqlType::Int4 | SqlType::Int2) => SqlType::Int4,
                    (x, SqlType::Text) => x,
                    (_, y) => y,
                }
            }
            BinaryOperator::StringConcat => SqlType::Text,
            _ => SqlType::Bool,
        },
        // A scalar subquery: its one output's type where the expression alone says it (a cast,
        // a typed function); the subquery's own columns are not in this scope.
        Expr::Subquery(q) => match q.body.as_ref() {
            sqlparser::ast::SetExpr::Select(sel) => match sel.projection.first() {
                Some(sqlparser::ast::SelectItem::UnnamedExpr(x))
                | Some(sqlparser::ast::SelectItem::ExprWithAlias { expr: x, .. }) => {
                    infer_type(x, &Scope::empty(), params)
                }
                _ => SqlType::Text,
            },
            _ => SqlType::Text,
        },
        Expr::IsNull(_)
        | Expr::IsNotNull(_)
        | Expr::Between { .. }
        | Expr::InList { .. }
        | Expr::Like { .. }
        | Expr::AnyOp { .. }
        | Expr::Exists { .. }
        | Expr::InSubquery { .. } => SqlType::Bool,
        Expr::Cast { data_type, .. } => sql_type(data_type).unwrap_or(SqlType::Text),
        Expr::Extract { .. } => SqlType::Numeric { precision: 38, scale: 6 },
        Expr::Interval(_) => SqlType::Interval,
        Expr::AtTimeZone { timestamp, .. } => match infer_type(timestamp, scope, params) {
            SqlType::TimestampTz => SqlType::Timestamp,
            _ => SqlType::TimestampTz,
        },
        Expr::TypedString(ts) => sql_type(&ts.data_type).unwrap_or(SqlType::Text),
        Expr::Function(f) => {
            let args = func_args(f).ok().flatten().unwrap_or_default();
            let first = args.first().map(|a| infer_type(a, scope, params));
            let types: Vec<SqlType> = args.iter().map(|a| infer_type(a, scope, params)).collect();
            if let Some(t) = crate::datetime::infer_call(&func_name(f), &types) {
                return t;
            }
            match func_name(f).as_str() {
                "count" | "txid_current" | "age" | "length" | "char_length" | "pg_relation_size" => SqlType::Int8,
                "sum" => match first {
                    Some(SqlType::Float8) => SqlType::Float8,
                    Some(SqlType::Numeric { .. }) | Some(SqlType::Int8) => SqlType::Numeric { precision: 38, scale: 0 },
                    _ => SqlType::Int8,
                },
                "avg" => match first {
                    Some(SqlType::Float8) => SqlType::Float8,
                    _ => SqlType::Numeric { precision: 38, scale: 0 },
                },
                "min" | "max" | "abs" | "coalesce" | "nullif" => first.unwrap_or(SqlType::Text),
                w if crate::window::is_window_only(w) => crate::window::result_type(w, first),
                "random" => SqlType::Float8,
                "pg_table_is_visible" => SqlType::Bool,
                "array_length" | "array_upper" | "array_lower" => SqlType::Int4,
                "pg_relation_is_publishable" => SqlType::Bool,
                "substr" => SqlType::Text,
                "nextval" | "currval" | "setval" => SqlType::Int8,
                "pg_get_replica_identity_index" => SqlType::Int8,
                "pg_get_expr" => SqlType::Text,
                "pg_reload_conf" => SqlType::Bool,
                "pg_read_binary_file" => SqlType::Bytea,
                "txid_snapshot_xmin" | "txid_snapshot_xmax" | "pg_snapshot_xmin" | "pg_snapshot_xmax" => SqlType::Int8,
                _ => SqlType::Text,
            }
        }
        Expr::Substring { .. } => SqlType::Text,
        Expr::Case { conditions, .. } => {
            conditions.first().map_or(SqlType::Text, |c| infer_type(&c.result, scope, params))
        }
        _ => SqlType::Text,
    }
}

/// The name PostgreSQL gives a result column computed by `e`.
pub fn column_name(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => ident_name(i),
        Expr::CompoundIdentifier(p) => p.last().map(ident_name).unwrap_or_default(),
        Expr::Function(f) => func_name(f),
        Expr::Cast { expr, data_type, .. } => match expr.as_ref() {
            Expr::Value(_) => sql_type(data_type).map(|t| t.short_name().to_string()).unwrap_or_default(),
            other => column_name(other),
        },
        Expr::Nested(x) => column_name(x),
        Expr::Extract { .. } => "extract".into(),
        Expr::Interval(_) => "interval".into(),
        Expr::AtTimeZone { .. } => "timezone".into(),
        _ => "?column?".into(),
    }
}

/// Collects the `$n` parameters compared with or assigned to columns, to type them for
/// Describe: `col = $1`, `col + $1`, `$1 < col`.
pub fn infer_params(e: &Expr, scope: &Scope<'_>, out: &mut Vec<Option<SqlType>>) {
    let mut note = |p: &Expr, ty: SqlType| {
        if let Some(n) = placeholder(p) {
            if out.len() < n {
                out.resize(n, None);
            }
            out[n - 1].get_or_insert(ty);
        }
    };
    match e {
        Expr::BinaryOp { left, right, .. } => {
            let (lt, rt) = (infer_type(left, scope, &[]), infer_type(right, scope, &[]));
            if placeholder(right).is_some() && !matches!(left.as_ref(), Expr::Value(_)) {
                note(right, lt);
            }
            if placeholder(left).is_some() && !matches!(right.as_ref(), Expr::Value(_)) {
                note(left, rt);
            }
            infer_params(left, scope, out);
            infer_params(right, scope, out);
        }
        Expr::Between { expr, low, high, .. } => {
            let t = infer_type(expr, scope, &[]);
            note(low, t);
            note(high, t);
            infer_params(expr, scope, out);
        }
        Expr::InList { expr, list, .. } => {
            let t = infer_type(expr, scope, &[]);
            for x in list {
                note(x, t);
            }
        }
        Expr::Nested(x) | Expr::UnaryOp { expr: x, .. } | Expr::IsNull(x) | Expr::IsNotNull(x) => {
            infer_params(x, scope, out)
        }
        Expr::Cast { expr, data_type, .. } => {
            if let Ok(t) = sql_type(data_type) {
                note(expr, t);
            }
        }
        Expr::Function(f) => {
            // Functions whose arguments are not text.
            let signature: &[SqlType] = match func_name(f).as_str() {
                "pg_read_binary_file" => &[SqlType::Text, SqlType::Int8, SqlType::Int8, SqlType::Bool],
                _ => &[],
            };
            let args = func_args(f).ok().flatten().unwrap_or_default();
            for (a, &t) in args.iter().zip(signature) {
                note(a, t);
            }
            for a in args {
                infer_params(a, scope, out);
            }
        }
        // In the order PostgreSQL meets them: the first use of `$n` types it.
        Expr::Case { operand, conditions, else_result, .. } => {
            for e in operand.iter().map(|o| o.as_ref()) {
                infer_params(e, scope, out);
            }
            for cw in conditions {
                infer_params(&cw.condition, scope, out);
                infer_params(&cw.result, scope, out);
            }
            if let Some(e) = else_result {
                infer_params(e, scope, out);
            }
        }
        _ => {}
    }
}

/// `$n` of a placeholder expression.
pub fn placeholder(e: &Expr) -> Option<usize> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Placeholder(p) => p.strip_prefix('$')?.parse().ok().filter(|n| *n > 0),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use sqlparser::ast::Ident;

    use super::ident_name;

    #[test]
    fn identifiers_fold_ascii_letters_only() {
        // PostgreSQL 15 (UTF-8): `select 1 as Émile_X` names its column `Émile_x`.
        assert_eq!(ident_name(&Ident::new("Émile_X")), "Émile_x");
        assert_eq!(ident_name(&Ident::new("ÄBC")), "Äbc");
        assert_eq!(ident_name(&Ident::with_quote('"', "ÄBC")), "ÄBC");
    }
}
