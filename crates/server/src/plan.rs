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

use std::sync::Arc;

use settledb::{Index, KeyBound, ScanDirection, Table, Tid, Value};
use sqlparser::ast::{BinaryOperator, Expr};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::expr::{eval, Scope};
use crate::relcache::IndexKeys;
use crate::session::Cx;
use crate::types::Datum;

/// A table a statement reads or writes, with its SQL columns.
#[derive(Clone)]
pub struct Target {
    pub table: Table,
    pub cols: Arc<Vec<ColumnDef>>,
    /// Its indexes and their key columns' positions in `cols`.
    pub indexes: Arc<[IndexKeys]>,
    pub name: String,
    pub alias: Option<String>,
    /// Its constraints ([`crate::constraints`]); `None` when it has none.
    pub rules: Option<Arc<crate::constraints::TableRules>>,
}

impl Target {
    /// The table `name` as the session's relation cache has it ([`crate::relcache`]); its
    /// constraints are looked up each time (they keep their own freshness check).
    pub fn open(sh: &crate::Shared, name: &str, alias: Option<String>) -> Result<Target, SqlError> {
        let (table, cols, indexes) =
            crate::relcache::with(sh, name, |r| (r.table.clone(), r.cols.clone(), r.indexes.clone()))?;
        let rules = sh.constraints.rules(&sh.db, &table);
        Ok(Target { table, cols, indexes, name: name.to_string(), alias, rules })
    }

    /// The key columns of `index`, one of this table's.
    pub fn index_keys(&self, index: &Index) -> Option<&IndexKeys> {
        self.indexes.iter().find(|k| k.index.oid() == index.oid())
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
    /// The index this path reads, if it reads one.
    pub fn index(&self) -> Option<&Index> {
        match self {
            Access::Index { index, .. } | Access::Points { index, .. } => Some(index),
            Access::Seq | Access::Nothing => None,
        }
    }

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Where a fact's constant is in its conjunct.
#[derive(Clone, Copy, Debug)]
enum Side {
    Left,
    Right,
    Low,
    High,
}

/// A `column op constant` conjunct, or one bound of a BETWEEN: the column's position, the
/// operator with the column on its left, and where the constant is (conjunct `conj`, `side`).
#[derive(Clone, Copy, Debug)]
pub struct Fact {
    col: usize,
    op: Op,
    conj: usize,
    side: Side,
}

/// The `column op constant` facts of the conjuncts `parts`.
fn facts(parts: &[&Expr], scope: &Scope<'_>) -> Vec<Fact> {
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
    for (conj, p) in parts.iter().enumerate() {
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
                    out.push(Fact { col: c, op: o, conj, side: Side::Right });
                } else if let (Some(c), true) = (col(right), is_const(left)) {
                    let flipped = match o {
                        Op::Lt => Op::Gt,
                        Op::Le => Op::Ge,
                        Op::Gt => Op::Lt,
                        Op::Ge => Op::Le,
                        Op::Eq => Op::Eq,
                    };
                    out.push(Fact { col: c, op: flipped, conj, side: Side::Left });
                }
            }
            Expr::Between { expr, negated: false, low, high } => {
                if let (Some(c), true, true) = (col(expr), is_const(low), is_const(high)) {
                    out.push(Fact { col: c, op: Op::Ge, conj, side: Side::Low });
                    out.push(Fact { col: c, op: Op::Le, conj, side: Side::High });
                }
            }
            _ => {}
        }
    }
    out
}

/// The constant of fact `f` among the conjuncts `parts` it was found in; `None` only when
/// `parts` are not those (a choice applied to another clause).
fn operand<'e>(parts: &[&'e Expr], f: &Fact) -> Option<&'e Expr> {
    match (parts.get(f.conj)?, f.side) {
        (Expr::BinaryOp { left, .. }, Side::Left) => Some(left),
        (Expr::BinaryOp { right, .. }, Side::Right) => Some(right),
        (Expr::Between { low, .. }, Side::Low) => Some(low),
        (Expr::Between { high, .. }, Side::High) => Some(high),
        _ => None,
    }
}

/// The values of a `column IN (...)` conjunct.
enum InValues<'e> {
    List(&'e [Expr]),
    Subquery(&'e sqlparser::ast::Query),
}

/// `column IN (constants)` and `column IN (uncorrelated subquery)` conjuncts: (column
/// position, conjunct index). NOT IN bounds nothing.
fn in_facts(parts: &[&Expr], scope: &Scope<'_>) -> Vec<(usize, usize)> {
    let col = |e: &Expr| match e {
        Expr::Identifier(i) => scope.resolve(std::slice::from_ref(i)).ok(),
        Expr::CompoundIdentifier(p) => scope.resolve(p).ok(),
        _ => None,
    };
    let mut out = Vec::new();
    for (conj, p) in parts.iter().enumerate() {
        match p {
            Expr::InList { expr, list, negated: false } if list.iter().all(is_const) => {
                if let Some(c) = col(expr) {
                    out.push((c, conj));
                }
            }
            Expr::InSubquery { expr, subquery, negated: false } => {
                // Correlated (it names this table): it would run per row; not a lookup set.
                let probe = vec![Datum::Null; scope.cols.len()];
                if crate::correlate::bind_outer(subquery, scope, &probe).is_some() {
                    continue;
                }
                if let Some(c) = col(expr) {
                    out.push((c, conj));
                }
            }
            _ => {}
        }
    }
    out
}

/// The values of the IN conjunct [`in_facts`] found at `part`.
fn in_values(part: &Expr) -> Option<InValues<'_>> {
    match part {
        Expr::InList { list, .. } => Some(InValues::List(list)),
        Expr::InSubquery { subquery, .. } => Some(InValues::Subquery(subquery)),
        _ => None,
    }
}

/// What [`choose`] decides from the WHERE clause's shape and the table's indexes, before any
/// value is known: the part of planning a prepared statement can keep ([`crate::query`]'s
/// plan cache) while its parameters change.
#[derive(Clone)]
pub enum Choice {
    Seq,
    Index {
        index: Index,
        /// The equality facts bounding the index's leading key columns, in key order.
        eqs: Vec<Fact>,
        /// The range facts on the next key column.
        ranges: Vec<Fact>,
        /// An IN on the next key column: (column, conjunct).
        set: Option<(usize, usize)>,
        /// How many key columns the index has.
        key_columns: usize,
    },
}

impl Choice {
    /// The index the access path will read, when it reads one.
    pub fn index(&self) -> Option<&Index> {
        match self {
            Choice::Index { index, .. } => Some(index),
            Choice::Seq => None,
        }
    }
}

/// An index the WHERE clause can use: (score, index, equality facts, range facts, IN fact).
type Candidate<'t> = (usize, &'t IndexKeys, Vec<Fact>, Vec<Fact>, Option<(usize, usize)>);

/// Chooses the index for `selection` on `t` (see the module doc), or none.
pub fn choose(t: &Target, selection: Option<&Expr>) -> Choice {
    let Some(sel) = selection else { return Choice::Seq };
    let parts = conjuncts(sel);
    let scope = t.scope();
    let facts = facts(&parts, &scope);
    let ins = in_facts(&parts, &scope);
    if facts.is_empty() && ins.is_empty() {
        return Choice::Seq;
    }
    let mut best: Option<Candidate> = None;
    for keys in t.indexes.iter() {
        let mut eqs = Vec::new();
        let mut ranges = Vec::new();
        let mut set = None;
        for &p in &keys.positions {
            if let Some(f) = facts.iter().find(|f| f.col == p && f.op == Op::Eq) {
                eqs.push(*f);
                continue;
            }
            set = ins.iter().find(|f| f.0 == p).copied();
            if set.is_none() {
                ranges = facts.iter().filter(|f| f.col == p && f.op != Op::Eq).copied().collect();
            }
            break;
        }
        // An IN counts as an equality: each of its lookups binds one more column.
        let bound = eqs.len() + usize::from(set.is_some());
        let score = 2 * bound + usize::from(!ranges.is_empty());
        let exact = bound == keys.positions.len() && keys.index.is_unique();
        let score = score + usize::from(exact);
        if score > 0 && best.as_ref().is_none_or(|b| score > b.0) {
            best = Some((score, keys, eqs, ranges, set));
        }
    }
    match best {
        None => Choice::Seq,
        Some((_, keys, eqs, ranges, set)) => {
            Choice::Index { index: keys.index.clone(), eqs, ranges, set, key_columns: keys.key_columns }
        }
    }
}

/// Chooses the access path for `selection` on `t` and binds it to the statement's values.
pub fn access(cx: &mut Cx<'_, '_>, t: &Target, selection: Option<&Expr>) -> Result<Access, SqlError> {
    bind(cx, t, selection, &choose(t, selection))
}

/// The access path `choice` (made by [`choose`] for this `selection` on this table) with the
/// values of its bounds: the parameters, casts and arithmetic evaluated and converted to the
/// key columns' types.
pub fn bind(cx: &mut Cx<'_, '_>, t: &Target, selection: Option<&Expr>, choice: &Choice) -> Result<Access, SqlError> {
    let (Choice::Index { index, eqs, ranges, set, key_columns }, Some(sel)) = (choice, selection) else {
        return Ok(Access::Seq);
    };
    let parts = conjuncts(sel);
    let index = index.clone();
    let mut prefix = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    // A bound the column's type cannot hold exactly (1.005 against numeric(6,2)) is rounded
    // into a key: the scan then finds a superset, the WHERE clause must be rechecked, and the
    // key is no exact match.
    let mut all_exact = true;
    for f in eqs {
        let Some(e) = operand(&parts, f) else { return Ok(Access::Seq) };
        let Some((v, exact)) = constant(cx, e, &t.cols[f.col])? else { return Ok(Access::Nothing) };
        prefix.push(v);
        if exact {
            used.insert(f.conj);
        } else {
            all_exact = false;
        }
    }
    if let Some((c, conj)) = *set {
        let Some(values) = parts.get(conj).and_then(|p| in_values(p)) else { return Ok(Access::Seq) };
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
        let unique = index.is_unique() && eqs.len() + 1 == *key_columns;
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
    for f in ranges {
        let Some(e) = operand(&parts, f) else { return Ok(Access::Seq) };
        let Some((v, exact)) = constant(cx, e, &t.cols[f.col])? else { return Ok(Access::Nothing) };
        let mut k = prefix.clone();
        k.push(v);
        // A rounded bound is taken inclusive, whichever way it was rounded: a superset.
        match f.op {
            Op::Gt if exact => lo = KeyBound::Excluded(k),
            Op::Gt | Op::Ge => lo = KeyBound::Included(k),
            Op::Lt if exact => hi = KeyBound::Excluded(k),
            Op::Lt | Op::Le => hi = KeyBound::Included(k),
            Op::Eq => {}
        }
        if exact {
            used.insert(f.conj);
        }
    }
    if prefix.is_empty() && ranges.is_empty() {
        return Ok(Access::Seq);
    }
    let exact_unique = (all_exact && index.is_unique() && eqs.len() == *key_columns).then(|| prefix.clone());
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
