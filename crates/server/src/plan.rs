//! The planner: how to find the rows a WHERE clause asks for in one table.
//!
//! The WHERE clause is split into its AND-ed conjuncts. A conjunct `column op constant`
//! (`=`, `<`, `<=`, `>`, `>=`, `BETWEEN`; the constant may be a literal, a parameter or a cast
//! of one) can bound an index scan. For every B-tree index of the table the planner takes the
//! longest prefix of its key columns bound by equalities, then at most one range on the next
//! column, and picks the index with the most bound columns (an equality counts double). When no
//! index applies the table is read sequentially. The whole WHERE clause is then re-checked on
//! every row found, so the access path only ever narrows the search.
//!
//! A conjunct `column IN (constants)` or `column IN (subquery)`, the subquery uncorrelated (it
//! runs once for the statement), on the column after the equality prefix, makes the scan a
//! set of point lookups, one per distinct value (PostgreSQL's `= ANY` index condition, or
//! the nested loop of its semi-join plan): BenchmarkSQL's Stock-Level reads the stock rows of
//! its twenty orders' items this way instead of every stock row of the warehouse.
//!
//! ```text
//!   WHERE aid = $1                       -> pgbench_accounts_pkey, key [aid]   (exact, unique)
//!   WHERE w = $1 AND i IN (SELECT ...)   -> pkey (w, i): one lookup per item the subquery gives
//!   WHERE a = 1 AND b > 5 AND c = 2      -> index (a, b): [1, 5) .. [1, +inf), c rechecked
//!   WHERE abalance > 0                   -> sequential scan
//! ```
//!
//! When every column a SELECT reads is a key column of the chosen index, the rows come from an
//! index-only scan ([`fetch_index_only`]): entries on heap pages the visibility map marks
//! all-visible are returned without visiting the heap (`select count(*) from t where id
//! between 1 and 1000` after a VACUUM reads only the index).
//!
//! A SELECT may read an index range backward and stop it early ([`fetch_in`]): its ORDER BY and
//! LIMIT decide that ([`crate::ordered`]).
//!
//! An exact match on every column of a unique index ([`Access::is_exact_unique`]) lets UPDATE
//! and DELETE use the engine's find-and-change-in-one-command calls
//! ([`settledb::Transaction::update_by_key`]).

use settledb::{Index, KeyBound, ScanDirection, Table, Tid, Value};
use sqlparser::ast::{BinaryOperator, Expr};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::expr::{eval, Scope};
use crate::session::Cx;
use crate::types::Datum;

/// A table a statement reads or writes, with its SQL columns.
pub struct Target {
    pub table: Table,
    pub cols: Vec<ColumnDef>,
    pub name: String,
    pub alias: Option<String>,
    /// Its constraints ([`crate::constraints`]); `None` when it has none.
    pub rules: Option<std::sync::Arc<crate::constraints::TableRules>>,
}

impl Target {
    pub fn open(sh: &crate::Shared, name: &str, alias: Option<String>) -> Result<Target, SqlError> {
        let table = sh.db.table(name).map_err(|_| SqlError::undefined_table(name))?;
        let cols = sh.catalog.columns(&table);
        let rules = sh.constraints.rules(&sh.db, &table);
        Ok(Target { table, cols, name: name.to_string(), alias, rules })
    }

    pub fn scope(&self) -> Scope<'_> {
        let mut names = vec![self.name.as_str()];
        if let Some(a) = &self.alias {
            names.push(a.as_str());
        }
        Scope { names, cols: &self.cols, rels: Vec::new(), merged: Vec::new() }
    }

    pub fn is_catalog(&self) -> bool {
        self.name == "pg_class"
    }
}

/// How to find the rows.
pub enum Access {
    Seq,
    Index {
        index: Index,
        lo: KeyBound,
        hi: KeyBound,
        exact_unique: Option<Vec<Value>>,
        conjuncts_used: usize,
        /// How many leading key columns the range pins to one value each (an equality).
        eq_columns: usize,
    },
    /// Point lookups of `keys` (sorted, distinct): an equality prefix and the values of an
    /// `IN` on the next column. `unique` when each key names at most one row.
    Points {
        index: Index,
        keys: Vec<Vec<Value>>,
        unique: bool,
    },
    /// A bound compared with NULL: no row can match.
    Nothing,
}

impl Access {
    pub fn is_exact_unique(&self) -> Option<(&Index, &[Value])> {
        match self {
            Access::Index { index, exact_unique: Some(k), .. } => Some((index, k)),
            _ => None,
        }
    }

    /// Whether every conjunct of the WHERE clause is answered by the index bounds.
    pub fn covers_where(&self, total_conjuncts: usize) -> bool {
        matches!(self, Access::Index { conjuncts_used, .. } if *conjuncts_used == total_conjuncts)
    }
}

/// The AND-ed parts of a condition.
pub fn conjuncts(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            let mut v = conjuncts(left);
            v.extend(conjuncts(right));
            v
        }
        Expr::Nested(x) => conjuncts(x),
        other => vec![other],
    }
}

/// Whether an expression reads no column (literals, parameters, casts and arithmetic of them).
fn is_const(e: &Expr) -> bool {
    match e {
        Expr::Value(_) | Expr::TypedString(_) => true,
        Expr::Nested(x) | Expr::UnaryOp { expr: x, .. } | Expr::Cast { expr: x, .. } => is_const(x),
        Expr::BinaryOp { left, right, op } => {
            matches!(
                op,
                BinaryOperator::Plus | BinaryOperator::Minus | BinaryOperator::Multiply | BinaryOperator::Divide
            ) && is_const(left)
                && is_const(right)
        }
        _ => false,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

/// `column op constant` facts, by column position: (op, constant, conjunct index).
fn facts<'e>(parts: &[&'e Expr], scope: &Scope<'_>) -> Vec<(usize, Op, &'e Expr, usize)> {
    let col = |e: &Expr| match e {
        Expr::Identifier(i) => scope.resolve(std::slice::from_ref(i)).ok(),
        Expr::CompoundIdentifier(p) => scope.resolve(p).ok(),
        Expr::Nested(x) => match x.as_ref() {
            Expr::Identifier(i) => scope.resolve(std::slice::from_ref(i)).ok(),
            _ => None,
        },
        _ => None,
    };
    let mut out = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        match p {
            Expr::BinaryOp { left, op, right } => {
                let o = match op {
                    BinaryOperator::Eq => Op::Eq,
                    BinaryOperator::Lt => Op::Lt,
                    BinaryOperator::LtEq => Op::Le,
                    BinaryOperator::Gt => Op::Gt,
                    BinaryOperator::GtEq => Op::Ge,
                    _ => continue,
                };
                if let (Some(c), true) = (col(left), is_const(right)) {
                    out.push((c, o, right.as_ref(), i));
                } else if let (Some(c), true) = (col(right), is_const(left)) {
                    let flipped = match o {
                        Op::Lt => Op::Gt,
                        Op::Le => Op::Ge,
                        Op::Gt => Op::Lt,
                        Op::Ge => Op::Le,
                        Op::Eq => Op::Eq,
                    };
                    out.push((c, flipped, left.as_ref(), i));
                }
            }
            Expr::Between { expr, negated: false, low, high } => {
                if let (Some(c), true, true) = (col(expr), is_const(low), is_const(high)) {
                    out.push((c, Op::Ge, low.as_ref(), i));
                    out.push((c, Op::Le, high.as_ref(), i));
                }
            }
            _ => {}
        }
    }
    out
}

/// The values of a `column IN (...)` conjunct.
enum InValues<'e> {
    List(&'e [Expr]),
    Subquery(&'e sqlparser::ast::Query),
}

/// `column IN (constants)` and `column IN (uncorrelated subquery)` conjuncts, by column
/// position (NOT IN bounds nothing).
fn in_facts<'e>(parts: &[&'e Expr], scope: &Scope<'_>) -> Vec<(usize, InValues<'e>)> {
    let col = |e: &Expr| match e {
        Expr::Identifier(i) => scope.resolve(std::slice::from_ref(i)).ok(),
        Expr::CompoundIdentifier(p) => scope.resolve(p).ok(),
        _ => None,
    };
    let mut out = Vec::new();
    for p in parts {
        match p {
            Expr::InList { expr, list, negated: false } if list.iter().all(is_const) => {
                if let Some(c) = col(expr) {
                    out.push((c, InValues::List(list)));
                }
            }
            Expr::InSubquery { expr, subquery, negated: false } => {
                // Correlated (it names this table): it would run per row; not a lookup set.
                let probe = vec![Datum::Null; scope.cols.len()];
                if crate::correlate::bind_outer(subquery, scope, &probe).is_some() {
                    continue;
                }
                if let Some(c) = col(expr) {
                    out.push((c, InValues::Subquery(subquery)));
                }
            }
            _ => {}
        }
    }
    out
}

/// An index the WHERE clause can use: (score, index, equality facts, range facts, IN fact).
type Candidate = (usize, Index, Vec<usize>, Vec<usize>, Option<usize>);

/// Chooses the access path for `selection` on `t`.
pub fn access(cx: &mut Cx<'_, '_>, t: &Target, selection: Option<&Expr>) -> Result<Access, SqlError> {
    let Some(sel) = selection else { return Ok(Access::Seq) };
    let parts = conjuncts(sel);
    let scope = t.scope();
    let facts = facts(&parts, &scope);
    let ins = in_facts(&parts, &scope);
    if facts.is_empty() && ins.is_empty() {
        return Ok(Access::Seq);
    }
    let mut best: Option<Candidate> = None;
    for index in cx.db.indexes(&t.table) {
        let positions: Vec<usize> =
            index.columns().iter().filter_map(|n| t.cols.iter().position(|c| &c.name == n)).collect();
        let mut eqs = Vec::new();
        let mut ranges = Vec::new();
        let mut set = None;
        for &p in &positions {
            if let Some(f) = facts.iter().position(|f| f.0 == p && f.1 == Op::Eq) {
                eqs.push(f);
                continue;
            }
            set = ins.iter().position(|f| f.0 == p);
            if set.is_none() {
                ranges = facts.iter().enumerate().filter(|(_, f)| f.0 == p && f.1 != Op::Eq).map(|(i, _)| i).collect();
            }
            break;
        }
        // An IN counts as an equality: each of its lookups binds one more column.
        let bound = eqs.len() + usize::from(set.is_some());
        let score = 2 * bound + usize::from(!ranges.is_empty());
        let exact = bound == positions.len() && index.is_unique();
        let score = score + usize::from(exact);
        if score > 0 && best.as_ref().is_none_or(|b| score > b.0) {
            best = Some((score, index, eqs, ranges, set));
        }
    }
    let Some((_, index, eqs, ranges, set)) = best else { return Ok(Access::Seq) };
    let mut prefix = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    // A bound the column's type cannot hold exactly (1.005 against numeric(6,2)) is rounded
    // into a key: the scan then finds a superset, the WHERE clause must be rechecked, and the
    // key is no exact match.
    let mut all_exact = true;
    for &f in &eqs {
        let (c, _, e, i) = facts[f];
        let Some((v, exact)) = constant(cx, e, &t.cols[c])? else { return Ok(Access::Nothing) };
        prefix.push(v);
        if exact {
            used.insert(i);
        } else {
            all_exact = false;
        }
    }
    if let Some(f) = set {
        let (c, ref values) = ins[f];
        let col = &t.cols[c];
        let mut datums: Vec<Datum> = match values {
            InValues::List(list) => {
                list.iter().map(|e| eval(e, &Scope::empty(), &[], cx, None)).collect::<Result<_, _>>()?
            }
            InValues::Subquery(q) => match crate::expr::Env::subquery(cx, q, &Scope::empty(), &[]) {
                Some(rows) => rows?.iter().filter_map(|r| r.first().cloned()).collect(),
                None => return Ok(Access::Seq),
            },
        };
        // NULL matches nothing; the rest in key order, each once.
        datums.retain(|d| !d.is_null());
        datums.sort_by(|a, b| crate::types::compare(a, b).unwrap_or(std::cmp::Ordering::Equal));
        datums.dedup_by(|a, b| crate::types::compare(a, b) == Some(std::cmp::Ordering::Equal));
        // A value the column cannot hold matches no row (the WHERE clause, rechecked on every
        // row found, decides the rest).
        let found: Vec<Value> = datums.into_iter().filter_map(|d| d.to_stored(col.ty, &col.name).ok()).collect();
        let unique = index.is_unique() && eqs.len() + 1 == index.columns().len();
        let keys = found
            .into_iter()
            .map(|v| {
                let mut k = prefix.clone();
                k.push(v);
                k
            })
            .collect();
        return Ok(Access::Points { index, keys, unique });
    }
    let mut lo = KeyBound::Included(prefix.clone());
    let mut hi = KeyBound::Included(prefix.clone());
    for &f in &ranges {
        let (c, op, e, i) = facts[f];
        let Some((v, exact)) = constant(cx, e, &t.cols[c])? else { return Ok(Access::Nothing) };
        let mut k = prefix.clone();
        k.push(v);
        // A rounded bound is taken inclusive, whichever way it was rounded: a superset.
        match op {
            Op::Gt if exact => lo = KeyBound::Excluded(k),
            Op::Gt | Op::Ge => lo = KeyBound::Included(k),
            Op::Lt if exact => hi = KeyBound::Excluded(k),
            Op::Lt | Op::Le => hi = KeyBound::Included(k),
            Op::Eq => {}
        }
        if exact {
            used.insert(i);
        }
    }
    if prefix.is_empty() && ranges.is_empty() {
        return Ok(Access::Seq);
    }
    let exact_unique = (all_exact && index.is_unique() && eqs.len() == index.columns().len()).then(|| prefix.clone());
    Ok(Access::Index { index, lo, hi, exact_unique, conjuncts_used: used.len(), eq_columns: eqs.len() })
}

/// A bound's value in the column's stored form, and whether that form is the value itself
/// (not rounded to the column's scale); `None` when it is NULL.
fn constant(cx: &mut Cx<'_, '_>, e: &Expr, col: &ColumnDef) -> Result<Option<(Value, bool)>, SqlError> {
    let d = eval(e, &Scope::empty(), &[], cx, None)?;
    if d.is_null() {
        return Ok(None);
    }
    // Bounds are compared in the column's type, as an index scan key is.
    let d = match d {
        Datum::Float(f) if col.ty.storage() != settledb::Type::Float8 => {
            return Err(SqlError::new(
                "42883",
                format!("operator does not exist: {} = double precision ({f})", col.ty.display()),
            ))
        }
        d => d,
    };
    let v = d.to_stored(col.ty, &col.name)?;
    let exact = crate::types::compare(&Datum::from_stored(&v, col.ty), &d) == Some(std::cmp::Ordering::Equal);
    Ok(Some((v, exact)))
}

/// The rows the access path finds (not yet filtered by the WHERE clause).
pub fn fetch(cx: &mut Cx<'_, '_>, t: &Target, a: &Access) -> Result<Vec<(Tid, Vec<Value>)>, SqlError> {
    fetch_in(cx, t, a, ScanDirection::Forward, None)
}

/// [`fetch`] with an index range read in direction `dir` and stopped after `limit` rows
/// ([`crate::ordered`]); a sequential scan stops after `limit` rows too, point lookups ignore
/// both.
pub fn fetch_in(
    cx: &mut Cx<'_, '_>,
    t: &Target,
    a: &Access,
    dir: ScanDirection,
    limit: Option<usize>,
) -> Result<Vec<(Tid, Vec<Value>)>, SqlError> {
    Ok(match a {
        Access::Nothing => Vec::new(),
        Access::Seq => {
            let mut rows = Vec::new();
            for r in cx.tx.scan(&t.table)? {
                if limit.is_some_and(|l| rows.len() >= l) {
                    break;
                }
                cx.interrupts.tick()?;
                rows.push(r?);
            }
            rows
        }
        Access::Index { index, lo, hi, exact_unique, .. } => {
            let limit = if exact_unique.is_some() { Some(1) } else { limit };
            // One engine call: interruptible before and after, not inside.
            let rows = cx.tx.range(index, lo.clone(), hi.clone(), dir, limit)?;
            cx.interrupts.check()?;
            rows
        }
        Access::Points { index, keys, unique } => {
            let mut rows = Vec::new();
            for k in keys {
                let b = KeyBound::Included(k.clone());
                rows.extend(cx.tx.range(index, b.clone(), b, ScanDirection::Forward, unique.then_some(1))?);
                cx.interrupts.tick()?;
            }
            rows
        }
    })
}

/// An index-only scan over the access path's bounds: rows with the key columns (`keys`, the
/// positions of the index's columns) filled and every other column NULL. The caller has
/// checked that the statement reads no other column. `dir` and `limit` as in [`fetch_in`].
pub fn fetch_index_only(
    cx: &mut Cx<'_, '_>,
    t: &Target,
    a: &Access,
    keys: &[usize],
    dir: ScanDirection,
    limit: Option<usize>,
) -> Result<Vec<Vec<Datum>>, SqlError> {
    let found = match a {
        Access::Index { index, lo, hi, exact_unique, .. } => {
            let limit = if exact_unique.is_some() { Some(1) } else { limit };
            cx.tx.index_only(index, lo.clone(), hi.clone(), dir, limit)?
        }
        Access::Points { index, keys, unique } => {
            let mut found = Vec::new();
            for k in keys {
                let b = KeyBound::Included(k.clone());
                found.extend(cx.tx.index_only(index, b.clone(), b, ScanDirection::Forward, unique.then_some(1))?);
                cx.interrupts.tick()?;
            }
            found
        }
        Access::Seq | Access::Nothing => return Ok(Vec::new()),
    };
    cx.interrupts.check()?;
    Ok(found
        .into_iter()
        .map(|key| {
            let mut row = vec![Datum::Null; t.cols.len()];
            for (v, &p) in key.iter().zip(keys) {
                row[p] = Datum::from_stored(v, t.cols[p].ty);
            }
            row
        })
        .collect())
}
