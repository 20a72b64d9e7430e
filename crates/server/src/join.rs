//! FROM lists with more than one relation, or with `generate_series`: the relations, their
//! names, and the rows of their join ([`JoinSource::rows`]); the SELECT executor then filters,
//! groups, sorts and projects those rows as it does one table's.
//!
//! ```text
//!   FROM a JOIN b ON a.id = b.aid LEFT JOIN c ON c.k = b.k, d      (left-deep)
//!
//!        ((a ⋈ b) ⟕ c) × d        a row of the join: [a's columns | b's | c's | d's]
//! ```
//!
//! `JOIN`/`INNER JOIN`, `LEFT [OUTER] JOIN`, `RIGHT [OUTER] JOIN`, `FULL [OUTER] JOIN` and
//! `CROSS JOIN` with `ON`, and comma-separated lists, are joined left to right. `USING (c, ...)`
//! and NATURAL (the names both sides have) become `left.c = R.c AND ...`; each such column is
//! merged: an unqualified `c` means the left side's (a RIGHT JOIN's: R's), and `*` shows it
//! once, first, as PostgreSQL does (FULL JOIN ... USING, whose merged column is the COALESCE
//! of both, is refused). Every joined row is as wide as the whole FROM list; the
//! columns of relations not yet joined (and of the NULL-padded side of a LEFT JOIN that found
//! no match) are NULL. Names: a relation is qualified by its alias if it has one, else by its
//! table name (as in PostgreSQL, an alias hides the table name); the same name twice is 42712;
//! a bare column two relations have is 42702 ([`crate::expr::Scope`]).
//!
//! Each join step chooses how to find the matches of the right-hand relation R, as
//! PostgreSQL's planner would with no statistics (its `nodeNestloop.c`, `nodeHashjoin.c`):
//!
//! 1. **index nested loop** when R is a table with a B-tree index whose leading columns are
//!    each equated (`R.col = expr of the left side`) by the step's conditions: one index range
//!    per left row, on the longest such prefix;
//! 2. **hash join** when some condition equates an expression of the left side with one of R of
//!    the same kind (exact numbers, floats, text, times, ...): R is read once into a hash table
//!    keyed by its side's values, and each left row probes it;
//! 3. **nested loop** otherwise: every left row meets every row of R.
//!
//! The step's conditions are its `ON` conjuncts and, for inner and cross steps, the `WHERE`
//! conjuncts that name R and only relations joined so far (a LEFT JOIN's `WHERE` must see the
//! NULL-padded rows, so it waits for the end). All of them are evaluated on every pair a
//! strategy proposes, so the hash or index only narrows the search, and NULL never equals
//! anything: a NULL key finds no match. A LEFT JOIN emits a left row that matched nothing once,
//! with R's columns NULL; a RIGHT JOIN reads R whole (hash join or nested loop), marks the R
//! rows that matched and emits the others once with the left side NULL, and a FULL JOIN does
//! both. Relations a later RIGHT or FULL JOIN may pad take no WHERE conjuncts early. Conjuncts that name one relation alone narrow that relation's read
//! (an index scan through [`crate::plan`]) when that cannot drop rows a LEFT JOIN must keep.
//! The whole `WHERE` is re-checked by the caller. Loops tick the statement's interrupts.
//!
//! A set-returning catalog function ([`crate::srf`]) may read the relations before it
//! (`LATERAL`): its step calls it once per left row and joins its rows to that row alone.

use std::collections::BTreeSet;

use sqlparser::ast::{
    BinaryOperator, Expr, JoinConstraint, JoinOperator, ObjectName, TableAlias, TableFactor, TableFunctionArgs,
    TableWithJoins,
};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::expr::{eval, ident_name, infer_type, truth, Scope, ScopeRel};
use crate::plan::{access, conjuncts, fetch, Target};
use crate::series::Series;
use crate::session::{datums, Cx};
use crate::types::{Datum, SqlType};
use crate::Shared;

/// Where a relation's rows come from.
pub enum Leaf {
    Table(Target),
    View(String),
    Series(Series),
    SlotChanges(crate::slotchanges::SlotChanges),
    /// A set-returning catalog function whose arguments may read the relations before it.
    Function(crate::srf::SetFunction),
    /// A function that is not set-returning ([`crate::fromcall`]): one row.
    Call(crate::fromcall::FromCall),
    /// A subquery in FROM (not LATERAL): run once, when the join reads it.
    Derived(Box<sqlparser::ast::Query>),
    /// A CTE of an enclosing WITH, materialized before the query began ([`crate::cte`]).
    Cte(std::rc::Rc<crate::cte::CteTable>),
}

/// One relation of a FROM list.
pub struct Rel {
    pub leaf: Leaf,
    pub names: Vec<String>,
    pub first: usize,
    pub len: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum JoinKind {
    Inner,
    Left,
    /// RIGHT JOIN: every row of the relation joined keeps, the rows so far are padded.
    Right,
    /// FULL JOIN: both sides keep their unmatched rows.
    Full,
    Cross,
}

impl JoinKind {
    /// Whether the rows so far keep those that match nothing (padded with NULLs for R).
    fn keeps_left(self) -> bool {
        matches!(self, JoinKind::Left | JoinKind::Full)
    }

    /// Whether R's rows that match nothing are kept (with the rows so far NULL).
    fn keeps_right(self) -> bool {
        matches!(self, JoinKind::Right | JoinKind::Full)
    }
}

/// How relation `i + 1` joins the relations before it.
pub struct Step {
    pub kind: JoinKind,
    pub on: Option<Expr>,
}

/// A planned FROM list.
pub struct JoinSource {
    pub rels: Vec<Rel>,
    pub steps: Vec<Step>,
    pub cols: Vec<ColumnDef>,
    /// Columns merged by `USING`/NATURAL: the name, the column an unqualified reference
    /// means, and the columns merged into it (which `*` leaves out after the merged one).
    pub merged: Vec<Merged>,
}

/// One column a `JOIN ... USING` merged.
pub struct Merged {
    pub name: String,
    pub shown: usize,
    pub parts: Vec<usize>,
}

/// The strategy a join step uses (visible for tests and the log).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Strategy {
    IndexNestedLoop,
    Hash,
    NestedLoop,
}

impl JoinSource {
    /// Opens every relation of `from` (tables, views, `generate_series`) and names them.
    pub fn build(sh: &Shared, from: &[TableWithJoins]) -> Result<JoinSource, SqlError> {
        let mut js = JoinSource { rels: Vec::new(), steps: Vec::new(), cols: Vec::new(), merged: Vec::new() };
        for (i, twj) in from.iter().enumerate() {
            js.add(sh, &twj.relation)?;
            if i > 0 {
                js.steps.push(Step { kind: JoinKind::Cross, on: None });
            }
            for j in &twj.joins {
                js.add(sh, &j.relation)?;
                let (kind, c) = match &j.join_operator {
                    JoinOperator::Join(c) | JoinOperator::Inner(c) => (JoinKind::Inner, c),
                    JoinOperator::Left(c) | JoinOperator::LeftOuter(c) => (JoinKind::Left, c),
                    JoinOperator::CrossJoin(c) => (JoinKind::Cross, c),
                    JoinOperator::Right(c) | JoinOperator::RightOuter(c) => (JoinKind::Right, c),
                    JoinOperator::FullOuter(c) => (JoinKind::Full, c),
                    other => return Err(SqlError::unsupported(format!("the join {other:?}"))),
                };
                let on = match c {
                    JoinConstraint::On(e) => Some(e.clone()),
                    JoinConstraint::None if kind == JoinKind::Cross => None,
                    JoinConstraint::None => return Err(SqlError::syntax("syntax error: JOIN needs ON")),
                    JoinConstraint::Using(names) => {
                        let names: Vec<String> = names.iter().map(crate::ddl::object_name).collect();
                        js.using(kind, &names)?
                    }
                    JoinConstraint::Natural => {
                        // The column names both sides have, in the left side's order.
                        let r = js.rels.last().expect("R was just added");
                        let right: Vec<&str> =
                            js.cols[r.first..r.first + r.len].iter().map(|c| c.name.as_str()).collect();
                        let mut names: Vec<String> = Vec::new();
                        for c in &js.cols[..r.first] {
                            if right.contains(&c.name.as_str()) && !names.contains(&c.name) {
                                names.push(c.name.clone());
                            }
                        }
                        js.using(kind, &names)?
                    }
                };
                js.steps.push(Step { kind, on });
            }
        }
        Ok(js)
    }

    /// `USING (names)` for the relation just added, R: each name must be one column of the
    /// relations before it (or a column an earlier USING merged) and a column of R. Returns
    /// the equivalent ON condition (`left.c = R.c AND ...`; none for no names, as NATURAL
    /// with no common column is a cross join) and records the merged columns.
    fn using(&mut self, kind: JoinKind, names: &[String]) -> Result<Option<Expr>, SqlError> {
        if kind == JoinKind::Full && !names.is_empty() {
            return Err(SqlError::unsupported(
                "FULL JOIN ... USING (the merged column would be COALESCE of both sides); use ON",
            ));
        }
        let r = self.rels.len() - 1;
        let (rfirst, rlen) = (self.rels[r].first, self.rels[r].len);
        let qualified = |rel: &Rel, col: &str| {
            let q = sqlparser::ast::Ident::with_quote('"', rel.names[0].clone());
            Expr::CompoundIdentifier(vec![q, sqlparser::ast::Ident::with_quote('"', col.to_string())])
        };
        let mut on: Option<Expr> = None;
        for name in names {
            let left = match self.merged.iter().position(|m| &m.name == name) {
                Some(m) => self.merged[m].shown,
                None => {
                    let mut found = (0..rfirst).filter(|&i| &self.cols[i].name == name);
                    match (found.next(), found.next()) {
                        (Some(i), None) => i,
                        (None, _) => {
                            return Err(SqlError::new(
                                "42703",
                                format!("column \"{name}\" specified in USING clause does not exist in left table"),
                            ))
                        }
                        (Some(_), Some(_)) => {
                            return Err(SqlError::new(
                                "42702",
                                format!("common column name \"{name}\" appears more than once in left table"),
                            ))
                        }
                    }
                }
            };
            let right = (rfirst..rfirst + rlen).find(|&i| &self.cols[i].name == name).ok_or_else(|| {
                SqlError::new(
                    "42703",
                    format!("column \"{name}\" specified in USING clause does not exist in right table"),
                )
            })?;
            let eq = Expr::BinaryOp {
                left: Box::new(qualified(&self.rels[self.rel_of(left)], name)),
                op: BinaryOperator::Eq,
                right: Box::new(qualified(&self.rels[r], name)),
            };
            on = Some(match on {
                None => eq,
                Some(prev) => Expr::BinaryOp { left: Box::new(prev), op: BinaryOperator::And, right: Box::new(eq) },
            });
            // A RIGHT JOIN's merged column is the right side's (the left one may be padded).
            let shown = if kind == JoinKind::Right { right } else { left };
            match self.merged.iter_mut().find(|m| &m.name == name) {
                Some(m) => {
                    m.shown = shown;
                    m.parts.push(right);
                }
                None => self.merged.push(Merged { name: name.clone(), shown, parts: vec![left, right] }),
            }
        }
        Ok(on)
    }

    fn add(&mut self, sh: &Shared, f: &TableFactor) -> Result<(), SqlError> {
        let (leaf, names, cols) = match f {
            TableFactor::Table { name, alias, args: None, .. } => {
                if let Some(table) = crate::cte::lookup(name) {
                    let (names, cols) = crate::cte::from_item(name, &table, alias.as_ref())?;
                    (Leaf::Cte(table), names, cols)
                } else {
                    named_relation(sh, name, alias.as_ref())?
                }
            }
            TableFactor::Table { name, alias, args: Some(TableFunctionArgs { args, .. }), .. }
                if crate::ddl::object_name(name) == "generate_series" =>
            {
                let (s, names, col) = Series::plan(args, alias.as_ref())?;
                (Leaf::Series(s), names, vec![col])
            }
            TableFactor::Table { name, alias, args: Some(TableFunctionArgs { args, .. }), .. }
                if crate::slotchanges::SlotChanges::is(&crate::ddl::object_name(name)) =>
            {
                let (c, names, cols) =
                    crate::slotchanges::SlotChanges::plan(&crate::ddl::object_name(name), args, alias.as_ref())?;
                (Leaf::SlotChanges(c), names, cols)
            }
            TableFactor::Table { name, alias, args: Some(TableFunctionArgs { args, .. }), .. }
                if crate::srf::SetFunction::is(&crate::ddl::object_name(name)) =>
            {
                let (f, names, cols) =
                    crate::srf::SetFunction::plan(&crate::ddl::object_name(name), args, alias.as_ref())?;
                (Leaf::Function(f), names, cols)
            }
            TableFactor::Function { name, alias, args, with_ordinality: false, .. }
                if crate::srf::SetFunction::is(&crate::ddl::object_name(name)) =>
            {
                let (f, names, cols) =
                    crate::srf::SetFunction::plan(&crate::ddl::object_name(name), args, alias.as_ref())?;
                (Leaf::Function(f), names, cols)
            }
            TableFactor::Derived { lateral: false, subquery, alias, .. } => {
                let Some(alias) = alias else {
                    return Err(SqlError::syntax("subquery in FROM must have an alias"));
                };
                let stmt = crate::parse::Stmt::Sql(Box::new(sqlparser::ast::Statement::Query(subquery.clone())));
                let Some(fields) = crate::query::describe(sh, &stmt, &[]).1 else {
                    return Err(SqlError::unsupported(format!("the subquery in FROM {}", ident_name(&alias.name))));
                };
                let cols = crate::cte::renamed(&format!("table \"{}\"", ident_name(&alias.name)), alias, fields)?;
                (Leaf::Derived(subquery.clone()), vec![ident_name(&alias.name)], cols)
            }
            TableFactor::Table { name, alias, args: Some(TableFunctionArgs { args, .. }), .. } => {
                let (c, names, cols) = crate::fromcall::FromCall::plan(sh, name, args, alias.as_ref())?;
                (Leaf::Call(c), names, cols)
            }
            other => return Err(SqlError::unsupported(format!("FROM {other}"))),
        };
        if let Some(n) = names.iter().find(|n| self.rels.iter().any(|r| r.names.contains(n))) {
            return Err(SqlError::new("42712", format!("table name \"{n}\" specified more than once")));
        }
        self.rels.push(Rel { leaf, names, first: self.cols.len(), len: cols.len() });
        self.cols.extend(cols);
        Ok(())
    }

    pub fn scope(&self) -> Scope<'_> {
        let rels = self
            .rels
            .iter()
            .map(|r| ScopeRel { names: r.names.iter().map(String::as_str).collect(), first: r.first, len: r.len })
            .collect();
        Scope {
            names: self.rels.iter().flat_map(|r| r.names.iter().map(String::as_str)).collect(),
            cols: &self.cols,
            rels,
            merged: self.merged.iter().map(|m| (m.name.as_str(), m.shown, m.parts.as_slice())).collect(),
        }
    }

    /// The relation that owns column `c`.
    fn rel_of(&self, c: usize) -> usize {
        self.rels.iter().position(|r| (r.first..r.first + r.len).contains(&c)).unwrap_or(0)
    }

    /// Whether relation `i` may be NULL-padded: the right side of a LEFT or FULL JOIN, or
    /// joined before a RIGHT or FULL JOIN (which keeps rows that match none of it).
    fn nullable(&self, i: usize) -> bool {
        (i > 0 && self.steps[i - 1].kind.keeps_left()) || self.steps[i..].iter().any(|s| s.kind.keeps_right())
    }

    /// Whether a RIGHT or FULL JOIN comes at step `s` or after (a WHERE conjunct over the rows
    /// joined so far must then wait for the end: the padded rows it would keep come later).
    fn padded_later(&self, s: usize) -> bool {
        self.steps[s..].iter().any(|st| st.kind.keeps_right())
    }

    /// The rows of the join, each as wide as [`JoinSource::cols`]; `selection` is the WHERE
    /// clause, used to narrow reads and steps (the caller still applies all of it).
    pub fn rows(&self, cx: &mut Cx<'_, '_>, selection: Option<&Expr>) -> Result<Vec<Vec<Datum>>, SqlError> {
        let scope = self.scope();
        let wheres: Vec<(&Expr, Option<BTreeSet<usize>>)> =
            selection.map(conjuncts).unwrap_or_default().into_iter().map(|e| (e, self.refs(e, &scope))).collect();
        let width = self.cols.len();
        let first = self.leaf_rows(cx, 0, &wheres, &scope)?;
        let mut acc: Vec<Vec<Datum>> = first.into_iter().map(|r| self.widen(0, r, width)).collect();
        for s in 0..self.steps.len() {
            acc = self.step(cx, s, acc, &wheres, &scope)?;
        }
        Ok(acc)
    }

    fn widen(&self, rel: usize, r: Vec<Datum>, width: usize) -> Vec<Datum> {
        let mut row = vec![Datum::Null; width];
        let Rel { first, len, .. } = self.rels[rel];
        for (slot, d) in row[first..first + len].iter_mut().zip(r) {
            *slot = d;
        }
        row
    }

    /// The relations an expression names; `None` when it holds something this walk cannot
    /// see into (then it is never moved, only evaluated where the caller evaluates WHERE).
    fn refs(&self, e: &Expr, scope: &Scope<'_>) -> Option<BTreeSet<usize>> {
        let mut cols = BTreeSet::new();
        columns_read(e, scope, &mut cols).then_some(())?;
        Some(cols.into_iter().map(|c| self.rel_of(c)).collect())
    }

    /// The rows of relation `i`, narrowed by the conjuncts (of WHERE, if it may, and of its
    /// own ON) that name it alone.
    fn leaf_rows(
        &self,
        cx: &mut Cx<'_, '_>,
        i: usize,
        wheres: &[(&Expr, Option<BTreeSet<usize>>)],
        scope: &Scope<'_>,
    ) -> Result<Vec<Vec<Datum>>, SqlError> {
        let alone = |r: &Option<BTreeSet<usize>>| r.as_ref().is_some_and(|s| s.len() == 1 && s.contains(&i));
        let mut local: Vec<&Expr> = Vec::new();
        if !self.nullable(i) {
            local.extend(wheres.iter().filter(|(_, r)| alone(r)).map(|(e, _)| *e));
        }
        // An ON conjunct naming R alone narrows R's read, unless R's unmatched rows are kept
        // (RIGHT, FULL): a row the condition fails must still come out, padded.
        if i > 0 && !self.steps[i - 1].kind.keeps_right() {
            if let Some(on) = &self.steps[i - 1].on {
                local.extend(conjuncts(on).into_iter().filter(|e| alone(&self.refs(e, scope))));
            }
        }
        let rel = &self.rels[i];
        let rows = match &rel.leaf {
            Leaf::Table(t) => {
                let cond = and_all(&local);
                let a = access(cx, t, cond.as_ref())?;
                let rows = fetch(cx, t, &a)?.into_iter().map(|(_, v)| datums(&v, &t.cols));
                if t.is_catalog() {
                    rows.map(|mut r| {
                        let extra = crate::views::class_extras(cx.sh, &t.cols, &r);
                        r.extend(extra);
                        r
                    })
                    .collect()
                } else {
                    rows.collect()
                }
            }
            Leaf::View(v) => crate::views::rows(cx.sh, cx.settings, v),
            Leaf::Series(s) => s.rows(cx)?,
            Leaf::SlotChanges(c) => c.rows(cx)?,
            Leaf::Function(f) => f.rows(cx, scope, &vec![Datum::Null; self.cols.len()])?,
            Leaf::Call(c) => c.rows(cx)?,
            Leaf::Derived(q) => cx.select_copy(q)?.1,
            Leaf::Cte(t) => t.rows.as_ref().clone(),
        };
        if local.is_empty() {
            return Ok(rows);
        }
        let width = self.cols.len();
        let mut kept = Vec::with_capacity(rows.len());
        for r in rows {
            cx.interrupts.tick()?;
            let wide = self.widen(i, r, width);
            if passes(cx, &local, scope, &wide)? {
                let first = rel.first;
                kept.push(wide[first..first + rel.len].to_vec());
            }
        }
        Ok(kept)
    }

    /// Joins relation `s + 1` to the rows so far.
    fn step(
        &self,
        cx: &mut Cx<'_, '_>,
        s: usize,
        left: Vec<Vec<Datum>>,
        wheres: &[(&Expr, Option<BTreeSet<usize>>)],
        scope: &Scope<'_>,
    ) -> Result<Vec<Vec<Datum>>, SqlError> {
        let r = s + 1;
        let step = &self.steps[s];
        let mut conds: Vec<&Expr> = Vec::new();
        if let Some(on) = &step.on {
            for c in conjuncts(on) {
                if let Some(late) = self.refs(c, scope).and_then(|set| set.into_iter().find(|&x| x > r)) {
                    let n = &self.rels[late].names[0];
                    return Err(SqlError::new(
                        "42P01",
                        format!("invalid reference to FROM-clause entry for table \"{n}\""),
                    ));
                }
                conds.push(c);
            }
        }
        if matches!(step.kind, JoinKind::Inner | JoinKind::Cross) && !self.padded_later(s) {
            conds.extend(
                wheres
                    .iter()
                    .filter(|(_, set)| set.as_ref().is_some_and(|set| set.contains(&r) && set.iter().all(|&x| x <= r)))
                    .map(|(e, _)| *e),
            );
        }
        let ctx = StepCx { js: self, r, conds: &conds, scope, left_join: step.kind.keeps_left() };
        if step.kind.keeps_right() {
            // R's unmatched rows come out too: R is read whole, matched by hash where a
            // condition equates the sides, else by a nested loop, and what matched is marked.
            let inner = self.leaf_rows(cx, r, wheres, scope)?;
            let keys = self.equi_keys(&conds, r, scope)?;
            return ctx.outer(cx, left, inner, &keys);
        }
        if let Leaf::Function(f) = &self.rels[r].leaf {
            // LATERAL: the function's rows depend on the left row.
            let mut out = Vec::new();
            for l in left {
                let inner = f.rows(cx, scope, &l)?;
                out.extend(ctx.nested_loop(cx, vec![l], inner)?);
            }
            return Ok(out);
        }
        let keys = self.equi_keys(&conds, r, scope)?;
        let ranges = self.range_keys(&conds, r, scope);
        let strategy = self.strategy(cx, r, &keys, &ranges);
        match strategy {
            (Strategy::IndexNestedLoop, Some(plan)) => ctx.index_nested_loop(cx, left, &plan, &keys, &ranges),
            (Strategy::Hash, _) => {
                let inner = self.leaf_rows(cx, r, wheres, scope)?;
                ctx.hash(cx, left, inner, &keys)
            }
            _ => {
                let inner = self.leaf_rows(cx, r, wheres, scope)?;
                ctx.nested_loop(cx, left, inner)
            }
        }
    }

    /// `left expr = right expr` conjuncts with each side on one side of the step and values
    /// of one kind; a pair of plain columns of unlike kinds is 42883, as PostgreSQL has no such
    /// operator.
    fn equi_keys<'e>(&self, conds: &[&'e Expr], r: usize, scope: &Scope<'_>) -> Result<Vec<EquiKey<'e>>, SqlError> {
        let mut out = Vec::new();
        for c in conds {
            let Expr::BinaryOp { left, op: BinaryOperator::Eq, right } = c else { continue };
            let (Some(lr), Some(rr)) = (self.refs(left, scope), self.refs(right, scope)) else { continue };
            let side = |set: &BTreeSet<usize>| {
                if set.is_empty() {
                    None
                } else if set.iter().all(|&x| x < r) {
                    Some(false)
                } else if set.len() == 1 && set.contains(&r) {
                    Some(true)
                } else {
                    None
                }
            };
            let (outer, inner) = match (side(&lr), side(&rr)) {
                (Some(false), Some(true)) => (left.as_ref(), right.as_ref()),
                (Some(true), Some(false)) => (right.as_ref(), left.as_ref()),
                _ => continue,
            };
            let (ot, it) = (infer_type(outer, scope, &[]), infer_type(inner, scope, &[]));
            if kind(ot) != kind(it) {
                // Integers, numerics and floats compare with each other (PostgreSQL casts the
                // exact side to float8), but hash apart: such a pair is left to the loop.
                let numbers = |k| matches!(k, Kind::Exact | Kind::Float);
                let comparable = numbers(kind(ot)) && numbers(kind(it));
                if !comparable && is_column(outer) && is_column(inner) {
                    return Err(SqlError::new(
                        "42883",
                        format!("operator does not exist: {} = {}", ot.display(), it.display()),
                    )
                    .with_hint("No operator matches the given name and argument types. You might need to add explicit type casts."));
                }
                continue;
            }
            let inner_col = match inner {
                Expr::Identifier(_) | Expr::CompoundIdentifier(_) => {
                    column_of(inner, scope).map(|c| c - self.rels[r].first)
                }
                _ => None,
            };
            out.push(EquiKey { outer, inner, inner_col, outer_ty: ot });
        }
        Ok(out)
    }

    /// `inner op outer` conjuncts (`<`, `<=`, `>`, `>=`) where `inner` is a plain column of
    /// relation `r` and `outer` reads only the relations joined before it: bounds an index
    /// nested loop may put on the column after its equality prefix (Stock-Level's `ol_o_id >=
    /// d_next_o_id - 20 AND ol_o_id < d_next_o_id`).
    fn range_keys<'e>(&self, conds: &[&'e Expr], r: usize, scope: &Scope<'_>) -> Vec<RangeKey<'e>> {
        let mut out = Vec::new();
        for c in conds {
            let Expr::BinaryOp { left, op, right } = c else { continue };
            if !matches!(op, BinaryOperator::Lt | BinaryOperator::LtEq | BinaryOperator::Gt | BinaryOperator::GtEq) {
                continue;
            }
            let (Some(lr), Some(rr)) = (self.refs(left, scope), self.refs(right, scope)) else { continue };
            let outer_side = |set: &BTreeSet<usize>| set.iter().all(|&x| x < r);
            let inner_col = |e: &Expr, set: &BTreeSet<usize>| {
                (set.len() == 1 && set.contains(&r))
                    .then(|| column_of(e, scope))
                    .flatten()
                    .map(|c| c - self.rels[r].first)
            };
            // Oriented as `inner op outer`.
            let (col, outer, op) = match (inner_col(left, &lr), inner_col(right, &rr)) {
                (Some(c), None) if outer_side(&rr) => (c, right.as_ref(), op.clone()),
                (None, Some(c)) if outer_side(&lr) => {
                    let flipped = match op {
                        BinaryOperator::Lt => BinaryOperator::Gt,
                        BinaryOperator::LtEq => BinaryOperator::GtEq,
                        BinaryOperator::Gt => BinaryOperator::Lt,
                        _ => BinaryOperator::LtEq,
                    };
                    (c, left.as_ref(), flipped)
                }
                _ => continue,
            };
            let lower = matches!(op, BinaryOperator::Gt | BinaryOperator::GtEq);
            let inclusive = matches!(op, BinaryOperator::GtEq | BinaryOperator::LtEq);
            out.push(RangeKey { outer, inner_col: col, outer_ty: infer_type(outer, scope, &[]), lower, inclusive });
        }
        out
    }

    /// The strategy for joining relation `r`, and for an index nested loop its index, keys
    /// and the range keys on the column after them.
    fn strategy(
        &self,
        cx: &Cx<'_, '_>,
        r: usize,
        keys: &[EquiKey<'_>],
        ranges: &[RangeKey<'_>],
    ) -> (Strategy, Option<IndexPlan>) {
        if keys.is_empty() {
            return (Strategy::NestedLoop, None);
        }
        if let Some(t) = match &self.rels[r].leaf {
            Leaf::Table(t) if !t.is_catalog() => Some(t),
            _ => None,
        } {
            let mut best: Option<IndexPlan> = None;
            for index in cx.db.indexes(&t.table) {
                let mut prefix = Vec::new();
                let mut bounds = Vec::new();
                for name in index.columns() {
                    let Some(pos) = t.cols.iter().position(|c| c.name == name) else { break };
                    let Some(k) =
                        keys.iter().position(|k| k.inner_col == Some(pos) && lookup_fits(k.outer_ty, t.cols[pos].ty))
                    else {
                        bounds = (0..ranges.len())
                            .filter(|&i| ranges[i].inner_col == pos && lookup_fits(ranges[i].outer_ty, t.cols[pos].ty))
                            .map(|i| (i, pos))
                            .collect();
                        break;
                    };
                    prefix.push((k, pos));
                }
                let better = |b: &IndexPlan| (prefix.len(), !bounds.is_empty()) > (b.keys.len(), !b.ranges.is_empty());
                if !prefix.is_empty() && best.as_ref().is_none_or(better) {
                    best = Some(IndexPlan { index, keys: prefix, ranges: bounds });
                }
            }
            if let Some(plan) = best {
                return (Strategy::IndexNestedLoop, Some(plan));
            }
        }
        (Strategy::Hash, None)
    }
}

/// `outer = inner` where `outer` reads the relations joined so far and `inner` relation R.
pub struct EquiKey<'e> {
    outer: &'e Expr,
    inner: &'e Expr,
    /// The position within R when `inner` is a plain column of R.
    inner_col: Option<usize>,
    outer_ty: SqlType,
}

/// An index of R and, for each of its leading columns, the key that equates it.
pub struct IndexPlan {
    index: settledb::Index,
    /// (equi-key position, column position within R)
    keys: Vec<(usize, usize)>,
    /// (range-key position, column position within R): bounds on the column after `keys`.
    ranges: Vec<(usize, usize)>,
}

/// `inner op outer`: a bound on a column of R from the relations joined so far.
pub struct RangeKey<'e> {
    outer: &'e Expr,
    /// The position within R of the bounded column.
    inner_col: usize,
    outer_ty: SqlType,
    /// `>`/`>=` (a lower bound) rather than `<`/`<=`.
    lower: bool,
    inclusive: bool,
}

/// The kinds of value a hash key compares within: equal values of one kind hash alike.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Kind {
    Exact,
    Float,
    Text,
    Bool,
    Time,
    /// An instant (timestamptz): hashes as itself, joins by hash only with its own kind.
    Instant,
    /// An interval: hashed by its span (`crate::interval::Interval::span`).
    Span,
    Bytes,
}

/// A table or view named in a FROM list: where its rows come from, its names, its columns.
fn named_relation(
    sh: &Shared,
    name: &ObjectName,
    alias: Option<&TableAlias>,
) -> Result<(Leaf, Vec<String>, Vec<ColumnDef>), SqlError> {
    let n = crate::ddl::object_name(name);
    let a = alias.map(|a| ident_name(&a.name));
    if alias.is_some_and(|a| !a.columns.is_empty()) {
        return Err(SqlError::unsupported("column aliases on a table"));
    }
    let names = vec![a.clone().unwrap_or_else(|| n.clone())];
    if let Some(cols) = crate::views::columns(&n) {
        return Ok((Leaf::View(n), names, cols));
    }
    let t = Target::open(sh, &n, a)?;
    let mut cols = t.cols.to_vec();
    if t.is_catalog() {
        cols.extend(crate::views::class_extra_columns());
    }
    Ok((Leaf::Table(t), names, cols))
}

fn kind(t: SqlType) -> Kind {
    match t {
        SqlType::Int2 | SqlType::Int4 | SqlType::Int8 | SqlType::Numeric { .. } => Kind::Exact,
        SqlType::Float8 => Kind::Float,
        SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_) => Kind::Text,
        SqlType::Bool => Kind::Bool,
        SqlType::Timestamp | SqlType::Date => Kind::Time,
        SqlType::TimestampTz => Kind::Instant,
        SqlType::Interval => Kind::Span,
        SqlType::Bytea => Kind::Bytes,
    }
}

/// Whether a value of type `outer` converts to the stored form of an `inner` column without
/// changing what it equals (integers into integer columns, text into text, a type into itself).
fn lookup_fits(outer: SqlType, inner: SqlType) -> bool {
    let int = |t| matches!(t, SqlType::Int2 | SqlType::Int4 | SqlType::Int8);
    outer == inner || (int(outer) && int(inner)) || (kind(outer) == Kind::Text && kind(inner) == Kind::Text)
}

/// The column a plain column reference names.
fn column_of(e: &Expr, scope: &Scope<'_>) -> Option<usize> {
    match e {
        Expr::Identifier(i) => scope.resolve(std::slice::from_ref(i)).ok(),
        Expr::CompoundIdentifier(p) => scope.resolve(p).ok(),
        _ => None,
    }
}

/// Adds the columns `e` reads to `used`; false when `e` names a column that does not resolve
/// or holds an expression this walk does not know.
fn columns_read(e: &Expr, scope: &Scope<'_>, used: &mut BTreeSet<usize>) -> bool {
    let all = |xs: &[&Expr], used: &mut BTreeSet<usize>| xs.iter().all(|x| columns_read(x, scope, used));
    match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => match column_of(e, scope) {
            Some(c) => {
                used.insert(c);
                true
            }
            None => false,
        },
        Expr::Value(_) | Expr::TypedString(_) => true,
        Expr::Nested(x)
        | Expr::UnaryOp { expr: x, .. }
        | Expr::Cast { expr: x, .. }
        | Expr::IsNull(x)
        | Expr::IsNotNull(x)
        | Expr::IsTrue(x)
        | Expr::IsFalse(x)
        | Expr::IsNotTrue(x)
        | Expr::IsNotFalse(x) => columns_read(x, scope, used),
        Expr::BinaryOp { left, right, .. }
        | Expr::IsDistinctFrom(left, right)
        | Expr::IsNotDistinctFrom(left, right) => all(&[left, right], used),
        Expr::Like { expr, pattern, .. } => all(&[expr, pattern], used),
        Expr::Between { expr, low, high, .. } => all(&[expr, low, high], used),
        Expr::InList { expr, list, .. } => {
            columns_read(expr, scope, used) && all(&list.iter().collect::<Vec<_>>(), used)
        }
        Expr::Function(f) if !crate::expr::is_aggregate(f) => match crate::expr::func_args(f) {
            Ok(Some(args)) => all(&args, used),
            _ => false,
        },
        _ => false,
    }
}

fn is_column(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
}

fn and_all(parts: &[&Expr]) -> Option<Expr> {
    parts.iter().map(|e| (*e).clone()).reduce(|a, b| Expr::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    })
}

fn passes(cx: &mut Cx<'_, '_>, conds: &[&Expr], scope: &Scope<'_>, row: &[Datum]) -> Result<bool, SqlError> {
    for c in conds {
        if truth(&eval(c, scope, row, cx, None)?)? != Some(true) {
            return Ok(false);
        }
    }
    Ok(true)
}

mod exec;
use exec::StepCx;
