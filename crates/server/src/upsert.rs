//! `INSERT ... ON CONFLICT` (PostgreSQL 15's upsert):
//!
//! ```text
//! INSERT INTO table [ AS alias ] [ (column, ...) ] { VALUES ... | SELECT ... }
//!     ON CONFLICT [ ( column [, ...] ) | ON CONSTRAINT name ]
//!     { DO NOTHING | DO UPDATE SET column = expr [, ...] [ WHERE condition ] }
//!     [ RETURNING ... ]
//! ```
//!
//! # Arbiters (PostgreSQL's `infer_arbiter_indexes`)
//!
//! A column list names the unique indexes whose column *set* is exactly that list (order and
//! repeats do not matter; every such index is an arbiter); `ON CONSTRAINT name` names one
//! unique index; no target (DO NOTHING only) makes every unique index an arbiter. No match is
//! 42P10; DO UPDATE without a target is 42601; an unknown constraint is 42704.
//!
//! # Each proposed row
//!
//! ```text
//!   loop:
//!     engine insert_or_conflict(row, arbiters)      (pre-check, insert in a subtransaction,
//!       Inserted(tid)          -> counted, RETURNING   retry on a lost race: see the engine's
//!       Conflict(tid)                                  db/transaction/upsert.rs)
//!         DO NOTHING           -> skipped
//!         tid written by this statement -> 21000 (cannot affect row a second time)
//!         DO UPDATE            -> update_with(tid): the closure checks the row still has the
//!                                 arbiter's key, evaluates WHERE and SET over
//!                                 (existing row, EXCLUDED row), and is re-run by the engine on
//!                                 the newest version under READ COMMITTED (EvalPlanQual)
//!           updated            -> counted, RETURNING
//!           WHERE false        -> skipped
//!           row gone / key moved (concurrent DELETE or key UPDATE) -> loop again
//! ```
//!
//! Two sessions upserting one key therefore never raise 23505: the second waits in the
//! pre-check (or in the B-tree's unique check) for the first to end, then finds its row
//! committed and updates it (READ COMMITTED), or fails with 40001 if its snapshot cannot see
//! that row (REPEATABLE READ), as PostgreSQL does.
//!
//! DO UPDATE's SET and WHERE see the target table's columns under its name (or only its
//! alias, when it has one) and the proposed row under `excluded`; an unqualified column both
//! have is ambiguous (42702), as in PostgreSQL. RETURNING sees the target table only.
//!
//! # Not built
//!
//! A conflict target with an index predicate (`ON CONFLICT (a) WHERE ...`) or with
//! expressions, COLLATE or operator classes is refused with 0A000 (there are no partial or
//! expression indexes to infer). DO UPDATE's WHERE, when false, leaves the row unlocked
//! (PostgreSQL locks it). `ON CONSTRAINT` accepts any unique index's name, also one made by
//! CREATE UNIQUE INDEX (PostgreSQL wants a constraint). Uncorrelated subqueries in SET and
//! WHERE run once per statement, before the rows (correlated ones are 0A000, as for UPDATE).

use std::cell::RefCell;
use std::collections::HashSet;

use settledb::{Error as EngineError, Index, InsertOrConflict, Tid, Value};
use sqlparser::ast::{AssignmentTarget, ConflictTarget, Expr, Insert, OnConflict, OnConflictAction, OnInsert};
use sqlparser::tokenizer::Token;

use crate::dml::{checked_row, prerun_subqueries, returning, rows_to_insert, Prerun};
use crate::error::SqlError;
use crate::expr::{eval, ident_name, truth, Scope, ScopeRel};
use crate::plan::Target;
use crate::session::{datums, Cx, Outcome};
use crate::types::{Datum, SqlType};

/// Marks a DO UPDATE whose WHERE is false on the conflicting row.
const SKIP: &str = "settledb-server: ON CONFLICT DO UPDATE's WHERE is false";
/// Marks a conflicting row that no longer has the arbiter's key (a concurrent update).
const MOVED: &str = "settledb-server: the conflicting row's key changed";
/// Marks an error raised inside the engine's update callback (the real one is kept aside).
const SQL_ERROR: &str = "settledb-server: ON CONFLICT statement error";

/// Runs `INSERT ... ON CONFLICT` on `t` (already opened and checked writable by the caller).
pub fn insert(cx: &mut Cx<'_, '_>, i: &Insert, t: &Target, on: &OnInsert) -> Result<Outcome, SqlError> {
    let OnInsert::OnConflict(oc) = on else {
        return Err(SqlError::unsupported("INSERT ... ON DUPLICATE KEY UPDATE"));
    };
    let arbiters = arbiters(cx, t, oc)?;
    let sets = match &oc.action {
        OnConflictAction::DoNothing => Vec::new(),
        OnConflictAction::DoUpdate(u) => set_list(t, &u.assignments)?,
    };
    let stored = rows_to_insert(cx, i, t)?;
    let mut done = Done::default();
    if arbiters.is_empty() {
        // DO NOTHING on a table without unique indexes: nothing can conflict.
        for values in stored {
            cx.interrupts.tick()?;
            cx.tx.insert(&t.table, &values)?;
            done.rows.push(datums(&values, &t.cols));
            done.writes.inserted.push(values);
        }
    } else {
        let update = match &oc.action {
            OnConflictAction::DoUpdate(u) => Some(Update::new(cx, t, &sets, u.selection.as_ref())?),
            OnConflictAction::DoNothing => None,
        };
        for values in &stored {
            cx.interrupts.tick()?;
            upsert_row(cx, t, &arbiters, update.as_ref(), values, &mut done)?;
        }
    }
    if let Some(rules) = &t.rules {
        let writes = std::mem::take(&mut done.writes);
        crate::constraints::fkey::after_statement(cx.sh, cx.tx, t, rules, writes)?;
    }
    let tag = format!("INSERT 0 {}", done.rows.len());
    returning(cx, t, i.returning.as_deref(), done.rows, tag)
}

/// What the statement has written so far.
#[derive(Default)]
struct Done {
    /// The versions it inserted or updated (a conflict with one of them is 21000).
    tids: HashSet<Tid>,
    /// Those rows as datums, for RETURNING, in order.
    rows: Vec<Vec<Datum>>,
    /// What the foreign keys check at the end (kept only when the table has some).
    writes: crate::constraints::fkey::Writes,
}

/// The unique indexes a conflict is looked for in, with their columns' positions in `t`.
struct Arbiter {
    index: Index,
    positions: Vec<usize>,
}

fn arbiters(cx: &Cx<'_, '_>, t: &Target, oc: &OnConflict) -> Result<Vec<Arbiter>, SqlError> {
    let position = |n: &str| t.cols.iter().position(|c| c.name == n);
    let unique: Vec<Arbiter> = cx
        .db
        .indexes(&t.table)
        .into_iter()
        .filter(|ix| ix.is_unique())
        .filter_map(|index| {
            let positions = index.columns().iter().map(|n| position(n)).collect::<Option<Vec<_>>>()?;
            Some(Arbiter { index, positions })
        })
        .collect();
    match &oc.conflict_target {
        None => match oc.action {
            OnConflictAction::DoNothing => Ok(unique),
            OnConflictAction::DoUpdate(_) => {
                Err(SqlError::syntax("ON CONFLICT DO UPDATE requires inference specification or constraint name")
                    .with_hint("For example, ON CONFLICT (column_name)."))
            }
        },
        Some(ConflictTarget::Columns(cols)) => {
            let mut wanted = Vec::new();
            for c in cols {
                let n = ident_name(c);
                wanted.push(position(&n).ok_or_else(|| SqlError::undefined_column(&n))?);
            }
            wanted.sort_unstable();
            wanted.dedup();
            let found: Vec<Arbiter> = unique
                .into_iter()
                .filter(|a| {
                    let mut p = a.positions.clone();
                    p.sort_unstable();
                    p.dedup();
                    p == wanted
                })
                .collect();
            if found.is_empty() {
                return Err(SqlError::new(
                    "42P10",
                    "there is no unique or exclusion constraint matching the ON CONFLICT specification",
                ));
            }
            Ok(found)
        }
        Some(ConflictTarget::OnConstraint(name)) => {
            let n = crate::ddl::object_name(name);
            let found: Vec<Arbiter> = unique.into_iter().filter(|a| a.index.name() == n).collect();
            if found.is_empty() {
                return Err(SqlError::new(
                    "42704",
                    format!("constraint \"{n}\" for table \"{}\" does not exist", t.name),
                ));
            }
            Ok(found)
        }
    }
}

/// DO UPDATE's SET list: (column position, expression).
fn set_list<'a>(t: &Target, assignments: &'a [sqlparser::ast::Assignment]) -> Result<Vec<(usize, &'a Expr)>, SqlError> {
    let mut sets = Vec::new();
    for a in assignments {
        let AssignmentTarget::ColumnName(c) = &a.target else {
            return Err(SqlError::unsupported("ON CONFLICT DO UPDATE SET (a, b) = ..."));
        };
        let n = crate::ddl::object_name(c);
        let p = t.cols.iter().position(|x| x.name == n).ok_or_else(|| {
            SqlError::new("42703", format!("column \"{n}\" of relation \"{}\" does not exist", t.name))
        })?;
        sets.push((p, &a.value));
    }
    Ok(sets)
}

/// The columns DO UPDATE's expressions see: the target row, then the `excluded` row.
struct Both {
    cols: Vec<crate::catalog::ColumnDef>,
    target_names: Vec<String>,
    width: usize,
}

impl Both {
    fn new(t: &Target) -> Both {
        let mut cols = t.cols.to_vec();
        cols.extend(t.cols.iter().cloned());
        // With an alias, PostgreSQL hides the table's own name.
        let target_names = vec![t.alias.clone().unwrap_or_else(|| t.name.clone())];
        Both { cols, target_names, width: t.cols.len() }
    }

    fn scope(&self) -> Scope<'_> {
        Scope {
            names: Vec::new(),
            cols: &self.cols,
            rels: vec![
                ScopeRel { names: self.target_names.iter().map(String::as_str).collect(), first: 0, len: self.width },
                ScopeRel { names: vec!["excluded"], first: self.width, len: self.width },
            ],
            merged: Vec::new(),
        }
    }
}

/// DO UPDATE, ready to run inside the engine's update callback.
struct Update<'q> {
    both: Both,
    sets: Vec<(usize, &'q Expr)>,
    selection: Option<&'q Expr>,
    params: Vec<Datum>,
    subquery_rows: crate::dml::SubqueryRows,
}

impl<'q> Update<'q> {
    fn new(
        cx: &mut Cx<'_, '_>,
        t: &Target,
        sets: &[(usize, &'q Expr)],
        selection: Option<&'q Expr>,
    ) -> Result<Update<'q>, SqlError> {
        let mut exprs: Vec<&Expr> = selection.into_iter().collect();
        exprs.extend(sets.iter().map(|(_, e)| *e));
        let subquery_rows = prerun_subqueries(cx, t, &exprs)?;
        let both = Both::new(t);
        // Name errors (42703, 42P01, 42702) surface before any row is written, as
        // PostgreSQL finds them when it analyzes the statement.
        let scope = both.scope();
        for e in &exprs {
            check_names(e, &scope)?;
        }
        Ok(Update { both, sets: sets.to_vec(), selection, params: cx.params.to_vec(), subquery_rows })
    }

    /// The new version of the conflicting row `existing` given the proposed row `excluded`,
    /// or `None` when the WHERE clause is not true.
    fn apply(&self, t: &Target, existing: &[Datum], excluded: &[Datum]) -> Result<Option<Vec<Value>>, SqlError> {
        let scope = self.both.scope();
        let row: Vec<Datum> = existing.iter().chain(excluded).cloned().collect();
        let mut env = Prerun { params: &self.params, rows: &self.subquery_rows };
        if let Some(w) = self.selection {
            if truth(&eval(w, &scope, &row, &mut env, None)?)? != Some(true) {
                return Ok(None);
            }
        }
        let mut new = existing.to_vec();
        for &(p, e) in &self.sets {
            new[p] = eval(e, &scope, &row, &mut env, None)?;
        }
        Ok(Some(checked_row(t, &new)?.0))
    }
}

/// Resolves the column references of `e` in `scope`, through the common expression forms
/// (others, and subqueries, are checked when they are evaluated).
fn check_names(e: &Expr, scope: &Scope<'_>) -> Result<(), SqlError> {
    use sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
    match e {
        Expr::Identifier(i) => scope.resolve(std::slice::from_ref(i)).map(|_| ()),
        Expr::CompoundIdentifier(parts) => scope.resolve(parts).map(|_| ()),
        Expr::BinaryOp { left, right, .. } => check_names(left, scope).and_then(|_| check_names(right, scope)),
        Expr::Nested(x) | Expr::UnaryOp { expr: x, .. } | Expr::IsNull(x) | Expr::IsNotNull(x) => check_names(x, scope),
        Expr::Cast { expr, .. } => check_names(expr, scope),
        Expr::Function(f) => match &f.args {
            FunctionArguments::List(l) => l.args.iter().try_for_each(|a| match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => check_names(x, scope),
                _ => Ok(()),
            }),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

/// One proposed row: inserted, skipped, or the conflicting row updated.
fn upsert_row(
    cx: &mut Cx<'_, '_>,
    t: &Target,
    arbiters: &[Arbiter],
    update: Option<&Update<'_>>,
    values: &[Value],
    done: &mut Done,
) -> Result<(), SqlError> {
    let indexes: Vec<Index> = arbiters.iter().map(|a| a.index.clone()).collect();
    loop {
        let (arbiter, tid) = match cx.tx.insert_or_conflict(&t.table, values, &indexes)? {
            InsertOrConflict::Inserted(tid) => {
                done.tids.insert(tid);
                done.rows.push(datums(values, &t.cols));
                if t.rules.is_some() {
                    done.writes.inserted.push(values.to_vec());
                }
                return Ok(());
            }
            InsertOrConflict::Conflict { arbiter, tid } => (arbiter, tid),
        };
        let Some(update) = update else { return Ok(()) };
        if done.tids.contains(&tid) {
            return Err(SqlError::new("21000", "ON CONFLICT DO UPDATE command cannot affect row a second time")
                .with_hint(
                "Ensure that no rows proposed for insertion within the same command have duplicate constrained values.",
            ));
        }
        let positions = &arbiters[arbiter].positions;
        let key: Vec<&Value> = positions.iter().map(|&p| &values[p]).collect();
        let excluded = datums(values, &t.cols);
        let failure: RefCell<Option<SqlError>> = RefCell::new(None);
        let written: RefCell<Option<Vec<Value>>> = RefCell::new(None);
        let old: RefCell<Option<Vec<Value>>> = RefCell::new(None);
        // Run by the engine on the version it locks (again on a newer one under READ
        // COMMITTED when a concurrent update committed first).
        let change = |row: &[Value]| -> settledb::Result<Vec<Value>> {
            if positions.iter().zip(&key).any(|(&p, k)| row[p] != **k) {
                return Err(EngineError::NotFound(MOVED.into()));
            }
            match update.apply(t, &datums(row, &t.cols), &excluded) {
                Ok(Some(new)) => {
                    *written.borrow_mut() = Some(new.clone());
                    *old.borrow_mut() = t.rules.as_ref().map(|_| row.to_vec());
                    Ok(new)
                }
                Ok(None) => Err(EngineError::NotFound(SKIP.into())),
                Err(e) => {
                    *failure.borrow_mut() = Some(e);
                    Err(EngineError::InvalidInput(SQL_ERROR.into()))
                }
            }
        };
        match cx.tx.update_with(&t.table, tid, change) {
            Ok(Some(new_tid)) => {
                let new = written.borrow_mut().take().unwrap_or_default();
                done.tids.insert(new_tid);
                done.rows.push(datums(&new, &t.cols));
                if let Some(o) = old.borrow_mut().take() {
                    done.writes.updated.push((o, new));
                }
                return Ok(());
            }
            Err(EngineError::NotFound(m)) if m == SKIP => return Ok(()),
            // Deleted, or moved to another key, by a transaction that committed: try again.
            Ok(None) => {}
            Err(EngineError::NotFound(m)) if m == MOVED => {}
            Err(e) => return Err(failure.borrow_mut().take().unwrap_or_else(|| SqlError::from(e))),
        }
    }
}

/// Parameter types for Describe from DO UPDATE's SET (a bare `$n` takes its column's type)
/// and from the expressions of SET and WHERE.
pub fn describe_params(t: &Target, i: &Insert, params: &mut Vec<Option<SqlType>>) {
    let Some(OnInsert::OnConflict(OnConflict { action: OnConflictAction::DoUpdate(u), .. })) = &i.on else {
        return;
    };
    let both = Both::new(t);
    crate::dml::assignment_params(t, &both.scope(), &u.assignments, u.selection.as_ref(), params);
}

/// For a statement sqlparser could not parse: 0A000 when it is an `INSERT ... ON CONFLICT`
/// whose conflict target has what settledb does not build (an index predicate, expressions,
/// COLLATE, operator classes), instead of a syntax error.
pub fn refused_target(toks: &[Token]) -> Option<SqlError> {
    let is =
        |t: &Token, w: &str| matches!(t, Token::Word(x) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    if !toks.first().is_some_and(|t| is(t, "INSERT")) {
        return None;
    }
    let at = toks.windows(3).position(|w| is(&w[0], "ON") && is(&w[1], "CONFLICT") && w[2] == Token::LParen)?;
    let mut depth = 0usize;
    let mut plain = true;
    for (k, tok) in toks[at + 2..].iter().enumerate() {
        match tok {
            Token::LParen => {
                depth += 1;
                plain &= depth == 1;
            }
            Token::RParen => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    if !plain {
                        return Some(SqlError::unsupported(
                            "an ON CONFLICT target with expressions, COLLATE or operator classes",
                        ));
                    }
                    let next = toks.get(at + 2 + k + 1)?;
                    return is(next, "WHERE")
                        .then(|| SqlError::unsupported("an ON CONFLICT target with an index predicate (WHERE)"));
                }
            }
            Token::Comma | Token::Word(_) if depth == 1 => {
                // `(a COLLATE "C")` or `(a text_pattern_ops)`: two words in a row.
                if let (Token::Word(_), Some(Token::Word(_))) = (tok, toks.get(at + 2 + k + 1)) {
                    plain = false;
                }
            }
            _ if depth == 1 => plain = false,
            _ => {}
        }
    }
    None
}
