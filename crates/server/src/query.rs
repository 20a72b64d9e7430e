//! SELECT: one table, a join or none; WHERE, GROUP BY with count/sum/min/max/avg, HAVING, ORDER BY,
//! DISTINCT, LIMIT/OFFSET; and Describe's view of every statement (parameter and result types).
//!
//! A SELECT runs as: find rows ([`crate::plan`]), filter by WHERE, group and aggregate when
//! the query has aggregates or GROUP BY, project, sort, de-duplicate, cut by OFFSET/LIMIT (an
//! index range read in the ORDER BY's order skips the sort, and may stop at OFFSET + LIMIT
//! rows: [`crate::ordered`]). Rows are materialized (the result is sent after the statement
//! finished). UNION, INTERSECT and
//! EXCEPT combine whole SELECTs ([`crate::setop`]); a WITH's CTEs are materialized before the
//! query that names them ([`crate::cte`]). `FOR UPDATE/SHARE` locks the rows of one table
//! ([`crate::rowlock`]). Window functions run over the rows once WHERE, grouping and HAVING
//! are done, before projection ([`crate::window`]). A FROM list with joins, functions
//! or subqueries is read by [`crate::join`], whose rows (as wide as all its relations'
//! columns) go through the same WHERE, grouping, sorting and projection. Subqueries in
//! expressions run through the session ([`crate::expr::Env::subquery`], [`crate::correlate`]).

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use sqlparser::ast::{
    Distinct, DuplicateTreatment, Expr, FunctionArguments, GroupByExpr, LimitClause, OrderByKind, OrderBySort, Query,
    Select, SelectItem, SelectItemQualifiedWildcardKind, SetExpr, Statement, TableFactor, Value,
};

use crate::error::SqlError;
use crate::expr::{
    as_f64, column_name, eval, func_args, func_name, ident_name, infer_params, infer_type, is_aggregate, truth, Scope,
};
use crate::parse::Stmt;
use crate::plan::{access, Target};
use crate::session::{datums, Cx, Field, Outcome};
use crate::types::{compare, Datum, SqlType};
use crate::Shared;

pub fn execute(cx: &mut Cx<'_, '_>, s: &Statement) -> Result<Outcome, SqlError> {
    // A prepared statement's plan slot serves its top-level SELECT only (never a subquery,
    // whose turn to run first could change from one execution to the next).
    let prepared = cx.plan.take();
    match s {
        Statement::Query(q) if q.with.is_some() => crate::cte::statement(cx, q),
        Statement::Query(q) => {
            let (fields, rows) = select_planned(cx, q, prepared.as_deref().map(|p| &p.plan))?;
            let tag = format!("SELECT {}", rows.len());
            Ok(Outcome::Rows { fields, rows, tag })
        }
        Statement::Insert(i) => crate::dml::insert(cx, i),
        Statement::Update(u) => crate::dml::update(cx, u),
        Statement::Delete(d) => crate::dml::delete(cx, d),
        Statement::Truncate(t) => crate::dml::truncate(cx, t),
        other => Err(SqlError::unsupported(format!("\"{other}\""))),
    }
}

/// What a SELECT reads: nothing, a table, or a view computed from the engine's state.
pub enum Source {
    None,
    Table(Target),
    View {
        names: Vec<String>,
        cols: Vec<crate::catalog::ColumnDef>,
        view: String,
    },
    /// Several relations, or a `generate_series` ([`crate::join`]).
    Join(crate::join::JoinSource),
}

impl Source {
    pub fn scope(&self) -> Scope<'_> {
        match self {
            Source::None => Scope::empty(),
            Source::Table(t) => t.scope(),
            Source::View { names, cols, .. } => {
                Scope { names: names.iter().map(String::as_str).collect(), cols, rels: Vec::new(), merged: Vec::new() }
            }
            Source::Join(j) => j.scope(),
        }
    }

    pub fn target(&self) -> Option<&Target> {
        match self {
            Source::Table(t) => Some(t),
            _ => None,
        }
    }
}

/// What a FROM clause names: nothing, one table or view, or a join ([`crate::join`]).
pub fn from_source(sh: &Shared, sel: &Select) -> Result<Source, SqlError> {
    match sel.from.as_slice() {
        [] => Ok(Source::None),
        [twj] if twj.joins.is_empty() => match &twj.relation {
            TableFactor::Table { name, alias, args: None, .. }
                if alias.as_ref().is_none_or(|a| a.columns.is_empty()) && crate::cte::lookup(name).is_none() =>
            {
                let n = crate::ddl::object_name(name);
                let alias = alias.as_ref().map(|a| ident_name(&a.name));
                if let Some(cols) = crate::views::columns(&n) {
                    let names = std::iter::once(n.clone()).chain(alias).collect();
                    return Ok(Source::View { names, cols, view: n });
                }
                Target::open(sh, &n, alias).map(Source::Table)
            }
            _ => crate::join::JoinSource::build(sh, &sel.from).map(Source::Join),
        },
        _ => crate::join::JoinSource::build(sh, &sel.from).map(Source::Join),
    }
}

/// The SELECT of a query body (its WITH is the caller's: [`select`], [`describe_query`]).
fn check_query(q: &Query) -> Result<&Select, SqlError> {
    match q.body.as_ref() {
        SetExpr::Select(s) => {
            if s.distinct.as_ref().is_some_and(|d| matches!(d, Distinct::On(_))) {
                return Err(SqlError::unsupported("DISTINCT ON"));
            }
            Ok(s)
        }
        SetExpr::SetOperation { .. } => Err(SqlError::unsupported("UNION / INTERSECT / EXCEPT here")),
        other => Err(SqlError::unsupported(format!("the query \"{other}\""))),
    }
}

/// One output column: its name and expression (a column reference for `*`).
pub struct OutCol {
    pub name: String,
    pub expr: Expr,
}

pub fn projection(items: &[SelectItem], scope: &Scope<'_>) -> Result<Vec<OutCol>, SqlError> {
    let mut out = Vec::new();
    for it in items {
        match it {
            SelectItem::UnnamedExpr(e) => out.push(OutCol { name: column_name(e), expr: e.clone() }),
            SelectItem::ExprWithAlias { expr, alias } => {
                out.push(OutCol { name: ident_name(alias), expr: expr.clone() })
            }
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) if !scope.rels.is_empty() => {
                out.extend(join_star(it, scope)?)
            }
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                if scope.names.is_empty() {
                    return Err(SqlError::syntax("SELECT * with no tables specified is not valid"));
                }
                for c in scope.cols {
                    let id = sqlparser::ast::Ident::with_quote('"', c.name.clone());
                    out.push(OutCol { name: c.name.clone(), expr: Expr::Identifier(id) });
                }
            }
            other => return Err(SqlError::unsupported(format!("the select item {other}"))),
        }
    }
    Ok(out)
}

/// `*` or `a.*` over a join: each column as `rel.col`, so equal names stay apart.
fn join_star(it: &SelectItem, scope: &Scope<'_>) -> Result<Vec<OutCol>, SqlError> {
    let rels: Vec<&crate::expr::ScopeRel<'_>> = match it {
        SelectItem::QualifiedWildcard(SelectItemQualifiedWildcardKind::ObjectName(n), _) => {
            vec![scope.rel(&crate::ddl::object_name(n))?]
        }
        SelectItem::QualifiedWildcard(k, _) => return Err(SqlError::unsupported(format!("the select item {k}"))),
        _ => scope.rels.iter().collect(),
    };
    let mut out = Vec::new();
    let whole = matches!(it, SelectItem::Wildcard(_));
    // `*` over USING joins: each merged column once, first, in the order merged.
    let mut hidden = std::collections::BTreeSet::new();
    if whole {
        for &(name, _, parts) in &scope.merged {
            out.push(OutCol {
                name: name.to_string(),
                expr: Expr::Identifier(sqlparser::ast::Ident::with_quote('"', name)),
            });
            hidden.extend(parts.iter().copied());
        }
    }
    for r in rels {
        for (i, c) in scope.cols[r.first..r.first + r.len].iter().enumerate() {
            if hidden.contains(&(r.first + i)) {
                continue;
            }
            let q = sqlparser::ast::Ident::with_quote('"', r.names[0]);
            let id = sqlparser::ast::Ident::with_quote('"', c.name.clone());
            out.push(OutCol { name: c.name.clone(), expr: Expr::CompoundIdentifier(vec![q, id]) });
        }
    }
    Ok(out)
}

/// Runs a query; returns its columns and rows.
pub fn select(cx: &mut Cx<'_, '_>, q: &Query) -> Result<(Vec<Field>, Vec<Vec<Datum>>), SqlError> {
    match &q.with {
        Some(with) => crate::cte::select(cx, with, |cx| select_body(cx, q)),
        None => select_body(cx, q),
    }
}

/// Runs a query whose WITH, if any, is in scope.
pub(crate) fn select_body(cx: &mut Cx<'_, '_>, q: &Query) -> Result<(Vec<Field>, Vec<Vec<Datum>>), SqlError> {
    select_planned(cx, q, None)
}

/// What planning a single-table SELECT decides before any value is known: its table, output
/// columns and types, the index its WHERE clause can use and whether that index covers the
/// query. A prepared statement keeps it ([`PlanSlot`]) while the catalogs stay as they were
/// (the generation numbers the relation cache checks, [`crate::relcache`]), and each
/// execution only binds the values and reads: PostgreSQL's plan cache keeps a generic plan
/// the same way, until an invalidation. The ORDER BY and LIMIT decisions, which depend on the
/// values, are made at each execution.
pub struct SelectPlan {
    engine: u64,
    sql: u64,
    /// The address of the query it was made for, inside the prepared statement that owns the
    /// slot (a slot handed to some other query by mistake plans afresh instead of misleading).
    query: usize,
    target: Target,
    outs: Vec<OutCol>,
    fields: Vec<Field>,
    choice: crate::plan::Choice,
    /// The index-only scan's key positions for `choice`'s index ([`index_only_columns`]).
    keys: Option<Vec<usize>>,
}

/// A prepared statement's [`SelectPlan`], once one is made.
#[derive(Default)]
pub struct PlanSlot(parking_lot::Mutex<Option<Arc<SelectPlan>>>);

impl std::fmt::Debug for PlanSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.0.lock().as_ref().map(|p| (p.engine, p.sql));
        f.debug_struct("PlanSlot").field("kept_at_generations", &kept).finish()
    }
}

impl PlanSlot {
    /// The kept plan if the catalogs have not changed since it was made, else one made now
    /// (and kept); `None` for a query this cache does not serve (a join, a view, none).
    fn get_or_build(&self, cx: &Cx<'_, '_>, sel: &Select, q: &Query) -> Result<Option<Arc<SelectPlan>>, SqlError> {
        // Both numbers before the catalogs are read (see crate::relcache's "Validity").
        let (engine, sql) = (cx.sh.db.catalog_generation(), cx.sh.catalog.generation());
        let query = q as *const Query as usize;
        if let Some(p) = self.0.lock().as_ref().filter(|p| p.engine == engine && p.sql == sql && p.query == query) {
            return Ok(Some(p.clone()));
        }
        let Source::Table(target) = from_source(cx.sh, sel)? else { return Ok(None) };
        let scope = target.scope();
        let outs = projection(&sel.projection, &scope)?;
        let fields =
            outs.iter().map(|o| Field { name: o.name.clone(), ty: infer_type(&o.expr, &scope, &[]) }).collect();
        let choice = crate::plan::choose(&target, sel.selection.as_ref());
        let keys = index_only_columns(&target, choice.index(), sel, &outs, &order_exprs(q));
        drop(scope);
        let plan = Arc::new(SelectPlan { engine, sql, query, target, outs, fields, choice, keys });
        *self.0.lock() = Some(plan.clone());
        Ok(Some(plan))
    }
}

/// [`select_body`] with the plan `slot` of the prepared statement `q` belongs to, if any.
fn select_planned(
    cx: &mut Cx<'_, '_>,
    q: &Query,
    slot: Option<&PlanSlot>,
) -> Result<(Vec<Field>, Vec<Vec<Datum>>), SqlError> {
    if matches!(q.body.as_ref(), SetExpr::SetOperation { .. } | SetExpr::Query(_)) {
        crate::rowlock::check(q, None, false, false)?;
        return crate::setop::select(cx, q);
    }
    let sel = check_query(q)?;
    let plan = match slot {
        // A locking read checks and locks its table its own way (crate::rowlock).
        Some(slot) if q.locks.is_empty() => slot.get_or_build(cx, sel, q)?,
        _ => None,
    };
    let fresh;
    let (source, outs, fields) = match &plan {
        // A handle on the kept table (reference counts; no catalog lookup).
        Some(p) => {
            fresh = (Source::Table(p.target.clone()), Vec::new());
            (&fresh.0, &p.outs, p.fields.clone())
        }
        None => {
            let source = from_source(cx.sh, sel)?;
            let scope = source.scope();
            let outs = projection(&sel.projection, &scope)?;
            let fields: Vec<Field> =
                outs.iter().map(|o| Field { name: o.name.clone(), ty: infer_type(&o.expr, &scope, &[]) }).collect();
            drop(scope);
            fresh = (source, outs);
            (&fresh.0, &fresh.1, fields)
        }
    };
    let scope = source.scope();

    // What happens to the rows once read; known first, so a table's scan can give them in the
    // ORDER BY's order and stop at the LIMIT ([`crate::ordered`]).
    let order = order_items(q)?;
    let windows = crate::window::Plan::build(sel, outs, &order, cx)?;
    let group_exprs: Vec<Expr> = match &sel.group_by {
        GroupByExpr::Expressions(v, m) if m.is_empty() => v.clone(),
        GroupByExpr::Expressions(..) => return Err(SqlError::unsupported("GROUP BY modifiers")),
        GroupByExpr::All(_) => return Err(SqlError::unsupported("GROUP BY ALL")),
    };
    let mut agg_calls = Vec::new();
    for o in outs {
        collect_aggs(&o.expr, &mut agg_calls);
    }
    if let Some(h) = &sel.having {
        collect_aggs(h, &mut agg_calls);
    }
    for e in order.iter().map(|(e, _, _)| e).chain(windows.exprs()) {
        collect_aggs(e, &mut agg_calls);
    }
    let grouped = !group_exprs.is_empty() || !agg_calls.is_empty() || sel.having.is_some();
    let distinct = matches!(sel.distinct, Some(Distinct::Distinct));
    let (limit, offset) = limits(cx, q)?;
    if !q.locks.is_empty() {
        crate::rowlock::check(q, Some(sel), !agg_calls.is_empty(), !windows.is_empty())?;
        let plan = crate::rowlock::Plan { sel, outs, order: &order, limit, offset };
        return Ok((fields, crate::rowlock::rows(cx, q, source, &plan)?));
    }

    // Input rows, filtered by WHERE.
    let mut sorted_by_scan = false;
    let input: Vec<Vec<Datum>> = match &source {
        Source::Table(t) => {
            let a = match &plan {
                Some(p) => crate::plan::bind(cx, t, sel.selection.as_ref(), &p.choice)?,
                None => access(cx, t, sel.selection.as_ref())?,
            };
            let shape = crate::ordered::Shape {
                order: &order,
                outs,
                where_conjuncts: sel.selection.as_ref().map_or(0, |w| crate::plan::conjuncts(w).len()),
                grouped: grouped || !windows.is_empty(),
                distinct,
                limit,
                offset,
            };
            let scan = crate::ordered::choose(t, &a, &shape);
            sorted_by_scan = scan.sorted;
            let keys = match &plan {
                // The bound path reads the chosen index, or none (a NULL bound, no bound).
                Some(p) => p.keys.as_deref().filter(|_| a.index().is_some()).map(<[usize]>::to_vec),
                None => index_only_columns(t, a.index(), sel, outs, &order_exprs(q)),
            };
            table_rows(cx, t, &a, keys.as_deref(), scan, sel.selection.as_ref())?
        }
        other => {
            let rows = match other {
                Source::None => vec![Vec::new()],
                Source::View { view, .. } => crate::views::rows(cx.sh, cx.settings, view),
                Source::Join(j) => j.rows(cx, sel.selection.as_ref())?,
                Source::Table(_) => unreachable!("matched above"),
            };
            filter(cx, sel.selection.as_ref(), &scope, rows)?
        }
    };

    // (output row, sort keys); with window functions, first the rows they run over.
    let mut produced: Vec<(Vec<Datum>, Vec<Datum>)> = Vec::new();
    let mut windowed: crate::window::Rows = Vec::new();
    let mut emit =
        |cx: &mut Cx<'_, '_>, rep: &[Datum], aggs: Option<&HashMap<String, Datum>>| -> Result<(), SqlError> {
            if !windows.is_empty() {
                windowed.push((rep.to_vec(), aggs.cloned().unwrap_or_default()));
                return Ok(());
            }
            produced.push(produce(cx, outs, &order, &scope, rep, aggs)?);
            Ok(())
        };
    if grouped {
        let group_exprs: Vec<Expr> = group_exprs.iter().map(|g| positional(g, outs)).collect::<Result<_, _>>()?;
        let mut index: HashMap<Vec<String>, usize> = HashMap::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for (i, r) in input.iter().enumerate() {
            cx.interrupts.tick()?;
            let mut key = Vec::with_capacity(group_exprs.len());
            for g in &group_exprs {
                key.push(format!("{:?}", eval(g, &scope, r, cx, None)?.to_text()));
            }
            let slot = *index.entry(key).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[slot].push(i);
        }
        if groups.is_empty() && group_exprs.is_empty() {
            groups.push(Vec::new());
        }
        let nulls = vec![Datum::Null; scope.cols.len()];
        for g in groups {
            cx.interrupts.tick()?;
            let rows: Vec<&Vec<Datum>> = g.iter().map(|&i| &input[i]).collect();
            let mut aggs = HashMap::new();
            for call in &agg_calls {
                aggs.insert(call.to_string(), aggregate(call, &rows, &scope, cx)?);
            }
            let rep: &[Datum] = rows.first().map_or(&nulls[..], |r| &r[..]);
            if let Some(h) = &sel.having {
                if truth(&eval(h, &scope, rep, cx, Some(&aggs))?)? != Some(true) {
                    continue;
                }
            }
            emit(cx, rep, Some(&aggs))?;
        }
    } else {
        for r in &input {
            cx.interrupts.tick()?;
            emit(cx, r, None)?;
        }
    }

    if !windows.is_empty() {
        let window_order = windows.compute(cx, &scope, &mut windowed)?;
        for i in window_order {
            cx.interrupts.tick()?;
            let (rep, aggs) = &windowed[i];
            produced.push(produce(cx, outs, &order, &scope, rep, Some(aggs))?);
        }
    }

    // The sort below runs to its end once started; its input was read under interrupt checks.
    cx.interrupts.check()?;
    if !order.is_empty() && !sorted_by_scan {
        let flags: Vec<(bool, bool)> = order.iter().map(|(_, desc, nulls_first)| (*desc, *nulls_first)).collect();
        produced.sort_by(|a, b| compare_keys(&a.1, &b.1, &flags));
    }
    let mut rows: Vec<Vec<Datum>> = produced.into_iter().map(|(r, _)| r).collect();
    if distinct {
        let mut seen = std::collections::HashSet::new();
        rows.retain(|r| seen.insert(r.iter().map(|d| format!("{:?}", d.to_text())).collect::<Vec<_>>()));
    }
    let rows: Vec<Vec<Datum>> = rows.into_iter().skip(offset).take(limit.unwrap_or(usize::MAX)).collect();
    Ok((fields, rows))
}

/// One output row and its sort keys, from the representative input row `rep` and the values
/// of its group's aggregates (and window calls).
fn produce(
    cx: &mut Cx<'_, '_>,
    outs: &[OutCol],
    order: &[crate::ordered::OrderItem],
    scope: &Scope<'_>,
    rep: &[Datum],
    aggs: Option<&HashMap<String, Datum>>,
) -> Result<(Vec<Datum>, Vec<Datum>), SqlError> {
    let mut row = Vec::with_capacity(outs.len());
    for o in outs {
        row.push(eval(&o.expr, scope, rep, cx, aggs)?);
    }
    let mut keys = Vec::with_capacity(order.len());
    for (e, _, _) in order {
        keys.push(sort_key(e, outs, &row, scope, rep, cx, aggs)?);
    }
    Ok((row, keys))
}

/// The ORDER BY items of a query: (expression, descending, NULLs first).
fn order_items(q: &Query) -> Result<Vec<crate::ordered::OrderItem>, SqlError> {
    match &q.order_by {
        None => Ok(Vec::new()),
        Some(ob) => match &ob.kind {
            OrderByKind::Expressions(v) => Ok(v
                .iter()
                .map(|o| {
                    let desc = matches!(o.options.sort, Some(OrderBySort::Desc));
                    // PostgreSQL: NULLs sort as if larger than every value.
                    let nulls_first = o.options.nulls_first.unwrap_or(desc);
                    (o.expr.clone(), desc, nulls_first)
                })
                .collect()),
            OrderByKind::All(_) => Err(SqlError::unsupported("ORDER BY ALL")),
        },
    }
}

/// The rows of `rows` the WHERE clause `w` keeps.
fn filter(
    cx: &mut Cx<'_, '_>,
    w: Option<&Expr>,
    scope: &Scope<'_>,
    rows: Vec<Vec<Datum>>,
) -> Result<Vec<Vec<Datum>>, SqlError> {
    let Some(w) = w else { return Ok(rows) };
    let mut kept = Vec::with_capacity(rows.len());
    for r in rows {
        cx.interrupts.tick()?;
        if truth(&eval(w, scope, &r, cx, None)?)? == Some(true) {
            kept.push(r);
        }
    }
    Ok(kept)
}

/// A table's rows for a SELECT, found by the access path `a` (from the index alone when `keys`
/// names the index's columns) in the direction `scan` chose, filtered by WHERE. A scan told to
/// stop early whose recheck dropped a row is read again whole (see [`crate::ordered`]).
fn table_rows(
    cx: &mut Cx<'_, '_>,
    t: &Target,
    a: &crate::plan::Access,
    keys: Option<&[usize]>,
    scan: crate::ordered::ScanOrder,
    w: Option<&Expr>,
) -> Result<Vec<Vec<Datum>>, SqlError> {
    let read = |cx: &mut Cx<'_, '_>, limit: Option<usize>| -> Result<Vec<Vec<Datum>>, SqlError> {
        match keys {
            Some(keys) => crate::plan::fetch_index_only(cx, t, a, keys, scan.dir, limit),
            None => {
                let found = crate::plan::fetch_in(cx, t, a, scan.dir, limit)?;
                Ok(found.into_iter().map(|(_, v)| datums(&v, &t.cols)).collect())
            }
        }
    };
    let scope = t.scope();
    let found = read(cx, scan.stop_after)?;
    let n = found.len();
    let stopped = scan.stop_after.is_some_and(|limit| n >= limit);
    let kept = filter(cx, w, &scope, found)?;
    if stopped && kept.len() < n {
        let all = read(cx, None)?;
        return filter(cx, w, &scope, all);
    }
    Ok(kept)
}

/// Orders two rows' sort keys; `flags` holds each key's (descending, nulls first).
/// PostgreSQL's rules: NULLs sort as if larger than every value unless NULLS FIRST says.
pub fn compare_keys(a: &[Datum], b: &[Datum], flags: &[(bool, bool)]) -> Ordering {
    for (i, &(desc, nulls_first)) in flags.iter().enumerate() {
        let (x, y) = (&a[i], &b[i]);
        let o = match (x.is_null(), y.is_null()) {
            (true, true) => Ordering::Equal,
            (true, false) if nulls_first => Ordering::Less,
            (true, false) => Ordering::Greater,
            (false, true) if nulls_first => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => {
                let o = compare(x, y).unwrap_or(Ordering::Equal);
                if desc {
                    o.reverse()
                } else {
                    o
                }
            }
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// The ORDER BY expressions of a query.
fn order_exprs(q: &Query) -> Vec<Expr> {
    match q.order_by.as_ref().map(|o| &o.kind) {
        Some(OrderByKind::Expressions(v)) => v.iter().map(|o| o.expr.clone()).collect(),
        _ => Vec::new(),
    }
}

/// When the access path is an index scan and every column the query reads is a key column of
/// that index, the positions of the key columns: the rows can come from an index-only scan,
/// which skips the heap for pages the visibility map marks all-visible.
fn index_only_columns(
    t: &Target,
    index: Option<&settledb::Index>,
    sel: &Select,
    outs: &[OutCol],
    order: &[Expr],
) -> Option<Vec<usize>> {
    let keys = t.index_keys(index?)?.key()?;
    let scope = t.scope();
    let mut used = std::collections::BTreeSet::new();
    let mut exprs: Vec<&Expr> = outs.iter().map(|o| &o.expr).collect();
    exprs.extend(sel.selection.iter());
    exprs.extend(sel.having.iter());
    exprs.extend(order.iter());
    if let GroupByExpr::Expressions(g, _) = &sel.group_by {
        exprs.extend(g.iter());
    }
    for e in exprs {
        if !referenced(e, &scope, &mut used) {
            return None;
        }
    }
    used.iter().all(|c| keys.contains(c)).then(|| keys.to_vec())
}

/// Adds the columns `e` reads to `used`; false when `e` holds something this walk does not
/// know (then no index-only scan is tried).
fn referenced(e: &Expr, scope: &Scope<'_>, used: &mut std::collections::BTreeSet<usize>) -> bool {
    match e {
        Expr::Identifier(i) => {
            if let Ok(p) = scope.resolve(std::slice::from_ref(i)) {
                used.insert(p);
            }
            true
        }
        Expr::CompoundIdentifier(p) => match scope.resolve(p) {
            Ok(c) => {
                used.insert(c);
                true
            }
            Err(_) => false,
        },
        Expr::Value(_) | Expr::TypedString(_) => true,
        Expr::Nested(x)
        | Expr::UnaryOp { expr: x, .. }
        | Expr::Cast { expr: x, .. }
        | Expr::IsNull(x)
        | Expr::IsNotNull(x) => referenced(x, scope, used),
        Expr::BinaryOp { left, right, .. } => referenced(left, scope, used) && referenced(right, scope, used),
        Expr::Between { expr, low, high, .. } => {
            referenced(expr, scope, used) && referenced(low, scope, used) && referenced(high, scope, used)
        }
        Expr::InList { expr, list, .. } => {
            referenced(expr, scope, used) && list.iter().all(|x| referenced(x, scope, used))
        }
        // A window clause or FILTER reads columns this walk does not look at.
        Expr::Function(f) if f.over.is_some() || f.filter.is_some() => false,
        Expr::Function(f) => match func_args(f) {
            Ok(Some(args)) => args.iter().all(|a| referenced(a, scope, used)),
            Ok(None) => true,
            Err(_) => false,
        },
        _ => false,
    }
}

/// `GROUP BY 1` means the first output column.
fn positional(e: &Expr, outs: &[OutCol]) -> Result<Expr, SqlError> {
    if let Expr::Value(v) = e {
        if let Value::Number(n, _) = &v.value {
            let i: usize = n.parse().map_err(|_| SqlError::syntax("non-integer constant in GROUP BY"))?;
            return outs
                .get(i.wrapping_sub(1))
                .map(|o| o.expr.clone())
                .ok_or_else(|| SqlError::new("42P10", format!("GROUP BY position {i} is not in select list")));
        }
    }
    Ok(e.clone())
}

/// A sort key: an output position (`ORDER BY 2`), an output name, or an expression.
pub(crate) fn sort_key(
    e: &Expr,
    outs: &[OutCol],
    row: &[Datum],
    scope: &Scope<'_>,
    rep: &[Datum],
    cx: &mut Cx<'_, '_>,
    aggs: Option<&HashMap<String, Datum>>,
) -> Result<Datum, SqlError> {
    if let Expr::Value(v) = e {
        if let Value::Number(n, _) = &v.value {
            let i: usize = n.parse().map_err(|_| SqlError::syntax("non-integer constant in ORDER BY"))?;
            return row
                .get(i.wrapping_sub(1))
                .cloned()
                .ok_or_else(|| SqlError::new("42P10", format!("ORDER BY position {i} is not in select list")));
        }
    }
    if let Expr::Identifier(id) = e {
        let n = ident_name(id);
        if let Some(p) = outs.iter().position(|o| o.name == n) {
            if scope.resolve(std::slice::from_ref(id)).is_err() || matches!(outs[p].expr, Expr::Identifier(_)) {
                return Ok(row[p].clone());
            }
        }
    }
    eval(e, scope, rep, cx, aggs)
}

pub fn limits(cx: &mut Cx<'_, '_>, q: &Query) -> Result<(Option<usize>, usize), SqlError> {
    let mut num = |e: &Expr| -> Result<Option<usize>, SqlError> {
        match eval(e, &Scope::empty(), &[], cx, None)? {
            Datum::Null => Ok(None),
            d => {
                let n = as_f64(&d)?;
                if n < 0.0 {
                    return Err(SqlError::new("2201W", "LIMIT must not be negative"));
                }
                Ok(Some(n as usize))
            }
        }
    };
    match &q.limit_clause {
        None => Ok((None, 0)),
        Some(LimitClause::LimitOffset { limit, offset, limit_by }) => {
            if !limit_by.is_empty() {
                return Err(SqlError::unsupported("LIMIT BY"));
            }
            let l = match limit {
                Some(e) => num(e)?,
                None => None,
            };
            let o = match offset {
                Some(o) => num(&o.value)?.unwrap_or(0),
                None => 0,
            };
            Ok((l, o))
        }
        Some(LimitClause::OffsetCommaLimit { .. }) => Err(SqlError::unsupported("LIMIT offset, count")),
    }
}

/// Collects the aggregate calls in an expression (not window aggregates, but those in their
/// arguments: `sum(x)` of `sum(sum(x)) OVER ()`).
pub fn collect_aggs(e: &Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::Function(f) if is_aggregate(f) && f.over.is_none() && !out.contains(e) => out.push(e.clone()),
        Expr::Function(f) if is_aggregate(f) && f.over.is_none() => {}
        Expr::Function(f) => {
            for a in func_args(f).ok().flatten().unwrap_or_default() {
                collect_aggs(a, out);
            }
        }
        Expr::BinaryOp { left, right, .. } => {
            collect_aggs(left, out);
            collect_aggs(right, out);
        }
        Expr::UnaryOp { expr, .. }
        | Expr::Nested(expr)
        | Expr::Cast { expr, .. }
        | Expr::IsNull(expr)
        | Expr::IsNotNull(expr) => collect_aggs(expr, out),
        Expr::Case { operand, conditions, else_result, .. } => {
            if let Some(o) = operand {
                collect_aggs(o, out);
            }
            for c in conditions {
                collect_aggs(&c.condition, out);
                collect_aggs(&c.result, out);
            }
            if let Some(x) = else_result {
                collect_aggs(x, out);
            }
        }
        _ => {}
    }
}

/// Computes one aggregate over a group's rows (those its FILTER keeps).
fn aggregate(call: &Expr, rows: &[&Vec<Datum>], scope: &Scope<'_>, cx: &mut Cx<'_, '_>) -> Result<Datum, SqlError> {
    let Expr::Function(f) = call else { return Ok(Datum::Null) };
    let name = func_name(f);
    let distinct = matches!(&f.args, FunctionArguments::List(l) if matches!(l.duplicate_treatment, Some(DuplicateTreatment::Distinct)));
    let args = func_args(f)?;
    let mut state = crate::aggregate::State::new(&name, args.is_none())
        .ok_or_else(|| SqlError::new("42883", format!("function {name} does not exist")))?;
    let arg = match args.as_deref() {
        None => None,
        Some([arg]) => Some(*arg),
        Some(_) => return Err(SqlError::new("42883", format!("function {name} takes one argument"))),
    };
    let mut seen = std::collections::HashSet::new();
    for r in rows {
        cx.interrupts.tick()?;
        if let Some(w) = &f.filter {
            if truth(&eval(w, scope, r, cx, None)?)? != Some(true) {
                continue;
            }
        }
        state.add_row();
        let Some(arg) = arg else { continue };
        let v = eval(arg, scope, r, cx, None)?;
        if !distinct || (!v.is_null() && seen.insert(format!("{:?}", v.to_text()))) {
            state.add(&v);
        }
    }
    state.result()
}

/// Types the `$n` of a SELECT's WHERE and select list, and of the (uncorrelated) subqueries
/// in them, each in its own FROM's scope.
fn select_params(sh: &Shared, sel: &Select, scope: &Scope<'_>, params: &mut Vec<Option<SqlType>>) {
    let mut exprs: Vec<&Expr> = sel.selection.iter().collect();
    for it in &sel.projection {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = it {
            exprs.push(e);
        }
    }
    for e in exprs {
        infer_params(e, scope, params);
        crate::window::infer_params(e, scope, params);
        let mut subs = Vec::new();
        subqueries(e, &mut subs);
        for q in subs {
            describe_query(sh, q, params);
        }
    }
}

/// The subqueries directly inside `e` (not inside those): for Describe's parameter types, and
/// for UPDATE, which runs the uncorrelated ones before its rows change.
pub(crate) fn subqueries<'e>(e: &'e Expr, out: &mut Vec<&'e Query>) {
    match e {
        Expr::Subquery(q) | Expr::Exists { subquery: q, .. } => out.push(q),
        Expr::InSubquery { expr, subquery, .. } => {
            subqueries(expr, out);
            out.push(subquery);
        }
        Expr::BinaryOp { left, right, .. } => {
            subqueries(left, out);
            subqueries(right, out);
        }
        Expr::Nested(x) | Expr::UnaryOp { expr: x, .. } | Expr::IsNull(x) | Expr::IsNotNull(x) => subqueries(x, out),
        Expr::Cast { expr, .. } => subqueries(expr, out),
        Expr::Between { expr, low, high, .. } => {
            for x in [expr, low, high] {
                subqueries(x, out);
            }
        }
        Expr::InList { expr, list, .. } => {
            subqueries(expr, out);
            for x in list {
                subqueries(x, out);
            }
        }
        Expr::Case { operand, conditions, else_result, .. } => {
            for x in operand.iter().chain(else_result.iter()) {
                subqueries(x, out);
            }
            for cw in conditions {
                subqueries(&cw.condition, out);
                subqueries(&cw.result, out);
            }
        }
        Expr::Function(f) => {
            for a in crate::expr::func_args(f).ok().flatten().unwrap_or_default() {
                subqueries(a, out);
            }
        }
        _ => {}
    }
}

/// What Describe reports for a statement: parameter types and result columns (`None` for
/// statements that return no rows).
pub fn describe(sh: &Shared, stmt: &Stmt, client: &[Option<SqlType>]) -> (Vec<SqlType>, Option<Vec<Field>>) {
    let mut params: Vec<Option<SqlType>> = client.to_vec();
    let mut fields = None;
    if let Stmt::Sql(s) = stmt {
        match s.as_ref() {
            Statement::Query(q) => fields = crate::cte::describe_statement(sh, q, &mut params),
            Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) => {
                fields = crate::dml::describe(sh, s, &mut params);
            }
            Statement::ShowVariable { variable } => {
                let name = variable.iter().map(ident_name).collect::<Vec<_>>().join(" ");
                fields = Some(vec![Field { name: crate::settings::canonical(&name), ty: SqlType::Text }]);
            }
            _ => {}
        }
    }
    if let Stmt::PartitionProbe { .. } = stmt {
        fields = Some(crate::dml::partition_probe_fields());
    }
    (params.into_iter().map(|p| p.unwrap_or(SqlType::Text)).collect(), fields)
}

/// 42P01 for a relation the query's FROM list names that does not exist (PREPARE's check),
/// with its CTEs in scope; a CTE that cannot be described leaves the error to EXECUTE.
pub fn relations_exist(sh: &Shared, q: &Query) -> Result<(), SqlError> {
    let sel = match q.body.as_ref() {
        SetExpr::Select(sel) => Some(sel.as_ref()),
        body => crate::setop::leftmost(body),
    };
    let Some(sel) = sel else { return Ok(()) };
    match &q.with {
        Some(with) => {
            crate::cte::describe(sh, with, &mut Vec::new(), |_| Some(from_source(sh, sel).map(drop))).unwrap_or(Ok(()))
        }
        None => from_source(sh, sel).map(drop),
    }
}

/// A query's result columns (`None` when it cannot be described), typing its `$n` into
/// `params`: those of its CTEs, WHERE, select list, subqueries, LIMIT and OFFSET.
pub(crate) fn describe_query(sh: &Shared, q: &Query, params: &mut Vec<Option<SqlType>>) -> Option<Vec<Field>> {
    match &q.with {
        Some(with) => crate::cte::describe(sh, with, params, |params| describe_body(sh, q, params)),
        None => describe_body(sh, q, params),
    }
}

fn describe_body(sh: &Shared, q: &Query, params: &mut Vec<Option<SqlType>>) -> Option<Vec<Field>> {
    // A set operation's columns are its leftmost SELECT's.
    let sel = match crate::setop::leftmost(q.body.as_ref()) {
        Some(s) if !matches!(q.body.as_ref(), SetExpr::Select(_)) => s,
        _ => check_query(q).ok()?,
    };
    let source = from_source(sh, sel).ok()?;
    let scope = source.scope();
    select_params(sh, sel, &scope, params);
    limit_params(q, params);
    let ptypes: Vec<SqlType> = params.iter().map(|p| p.unwrap_or(SqlType::Text)).collect();
    let outs = projection(&sel.projection, &scope).ok()?;
    Some(outs.iter().map(|o| Field { name: o.name.clone(), ty: infer_type(&o.expr, &scope, &ptypes) }).collect())
}

fn limit_params(q: &Query, params: &mut Vec<Option<SqlType>>) {
    if let Some(LimitClause::LimitOffset { limit, offset, .. }) = &q.limit_clause {
        for e in limit.iter().chain(offset.iter().map(|o| &o.value)) {
            if let Some(n) = crate::expr::placeholder(e) {
                if params.len() < n {
                    params.resize(n, None);
                }
                params[n - 1].get_or_insert(SqlType::Int8);
            }
        }
    }
}
