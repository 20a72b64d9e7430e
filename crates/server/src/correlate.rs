//! Correlated subqueries: a subquery that names a column of the query around it
//! (`(SELECT max(o.n) FROM o WHERE o.k = t.id)`, `EXISTS (SELECT 1 FROM o WHERE o.k = t.id)`)
//! runs once per outer row, with each such reference replaced by the outer row's value.
//!
//! A reference is a qualified column, `rel.col`, whose `rel` the subquery's own FROM does not
//! name and the outer query's does; it is looked for in the subquery's WHERE, select list,
//! join conditions and HAVING (not in subqueries nested inside it, nor unqualified). A
//! subquery with none is uncorrelated, and [`crate::session`] runs it once per statement.

use sqlparser::ast::{
    DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, JoinConstraint, JoinOperator, Query, SelectItem,
    SetExpr, TableFactor, Value,
};

use crate::expr::{eval, ident_name, Params, Scope};
use crate::types::Datum;

/// `q` with its references to `outer`'s relations replaced by `row`'s values, or `None` when
/// it has none.
pub fn bind_outer(q: &Query, outer: &Scope<'_>, row: &[Datum]) -> Option<Query> {
    if outer.names.is_empty() {
        return None;
    }
    let SetExpr::Select(sel) = q.body.as_ref() else { return None };
    let mut inner: Vec<String> = Vec::new();
    for twj in &sel.from {
        for f in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
            match f {
                TableFactor::Table { name, alias, .. } => {
                    inner.push(alias.as_ref().map_or_else(|| crate::ddl::object_name(name), |a| ident_name(&a.name)));
                }
                TableFactor::Derived { alias: Some(a), .. } | TableFactor::Function { alias: Some(a), .. } => {
                    inner.push(ident_name(&a.name))
                }
                _ => {}
            }
        }
    }
    let mut b = Binder { outer, row, inner: &inner, bound: false };
    let mut q = q.clone();
    let SetExpr::Select(sel) = q.body.as_mut() else { return None };
    if let Some(w) = sel.selection.as_mut() {
        b.expr(w);
    }
    if let Some(h) = sel.having.as_mut() {
        b.expr(h);
    }
    for it in &mut sel.projection {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = it {
            b.expr(e);
        }
    }
    for twj in &mut sel.from {
        for j in &mut twj.joins {
            if let JoinOperator::Join(JoinConstraint::On(e))
            | JoinOperator::Inner(JoinConstraint::On(e))
            | JoinOperator::Left(JoinConstraint::On(e))
            | JoinOperator::LeftOuter(JoinConstraint::On(e)) = &mut j.join_operator
            {
                b.expr(e);
            }
        }
    }
    b.bound.then_some(q)
}

struct Binder<'a, 'b> {
    outer: &'a Scope<'b>,
    row: &'a [Datum],
    inner: &'a [String],
    bound: bool,
}

impl Binder<'_, '_> {
    fn expr(&mut self, e: &mut Expr) {
        match e {
            Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
                let rel = ident_name(&parts[0]);
                if self.inner.contains(&rel) || !self.outer.names.contains(&rel.as_str()) {
                    return;
                }
                if let Ok(d) = eval(e, self.outer, self.row, &mut Params(&[]), None) {
                    *e = literal(d);
                    self.bound = true;
                }
            }
            Expr::BinaryOp { left, right, .. } => {
                self.expr(left);
                self.expr(right);
            }
            Expr::Nested(x)
            | Expr::UnaryOp { expr: x, .. }
            | Expr::IsNull(x)
            | Expr::IsNotNull(x)
            | Expr::IsTrue(x)
            | Expr::IsFalse(x)
            | Expr::Cast { expr: x, .. }
            | Expr::Collate { expr: x, .. } => self.expr(x),
            Expr::Between { expr, low, high, .. } => {
                self.expr(expr);
                self.expr(low);
                self.expr(high);
            }
            Expr::InList { expr, list, .. } => {
                self.expr(expr);
                list.iter_mut().for_each(|x| self.expr(x));
            }
            Expr::InSubquery { expr, .. } => self.expr(expr),
            Expr::Like { expr, pattern, .. } | Expr::ILike { expr, pattern, .. } => {
                self.expr(expr);
                self.expr(pattern);
            }
            Expr::Case { operand, conditions, else_result, .. } => {
                if let Some(o) = operand {
                    self.expr(o);
                }
                for cw in conditions {
                    self.expr(&mut cw.condition);
                    self.expr(&mut cw.result);
                }
                if let Some(x) = else_result {
                    self.expr(x);
                }
            }
            Expr::Function(f) => {
                if let FunctionArguments::List(l) = &mut f.args {
                    for a in &mut l.args {
                        if let FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) = a {
                            self.expr(x);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// A value as SQL that reads back as it (typed where text alone would not say the type).
fn literal(d: Datum) -> Expr {
    let typed = |text: String, ty: DataType| Expr::Cast {
        kind: sqlparser::ast::CastKind::DoubleColon,
        expr: Box::new(Expr::value(Value::SingleQuotedString(text))),
        data_type: ty,
        format: None,
    };
    match d {
        Datum::Null => Expr::value(Value::Null),
        Datum::Bool(b) => Expr::value(Value::Boolean(b)),
        Datum::Int(i) => Expr::value(Value::Number(i.to_string(), false)),
        Datum::Num(_) => Expr::value(Value::Number(d.to_text().unwrap_or_default(), false)),
        Datum::Float(_) => typed(d.to_text().unwrap_or_default(), DataType::DoublePrecision),
        Datum::Text(s) => Expr::value(Value::SingleQuotedString(s)),
        Datum::Timestamp(_) => {
            typed(d.to_text().unwrap_or_default(), DataType::Timestamp(None, sqlparser::ast::TimezoneInfo::None))
        }
        Datum::Date(_) => typed(d.to_text().unwrap_or_default(), DataType::Date),
        // Printed in the session's zone with its offset, so it reads back as the same instant.
        Datum::TimestampTz(_) => {
            typed(d.to_text().unwrap_or_default(), DataType::Timestamp(None, sqlparser::ast::TimezoneInfo::Tz))
        }
        Datum::Interval(_) => {
            typed(d.to_text().unwrap_or_default(), DataType::Interval { fields: None, precision: None })
        }
        Datum::Bytea(_) => typed(d.to_text().unwrap_or_default(), DataType::Bytea),
    }
}
