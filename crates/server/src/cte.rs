//! Common table expressions: `WITH [RECURSIVE] name [(col, ...)] AS [[NOT] MATERIALIZED]
//! (query) [, ...] statement`; the recursive ones are in [`recursive`], data-modifying ones
//! (INSERT, UPDATE, DELETE as a CTE or after the WITH) below.
//!
//! Every CTE is materialized, as PostgreSQL does with a CTE marked `MATERIALIZED` (its
//! `nodeCtescan.c`): its query runs once per statement, in the statement's transaction and
//! snapshot, before the main query; its rows are then read like a table's, however many
//! times the main query (its FROM, its joins, its subqueries) names it. `[NOT] MATERIALIZED`
//! is accepted and changes nothing: inlining would only be an optimization (PostgreSQL never
//! inlines a data-modifying CTE).
//!
//! ```text
//!   WITH a AS (SELECT ...),          1. run a's query         -> push a (columns, rows)
//!        b AS (SELECT ... FROM a)    2. run b's query (sees a) -> push b
//!   SELECT ... FROM b JOIN t ...     3. run the main query (sees a and b)
//!   ... IN (SELECT x FROM a)            its subqueries too      4. pop b and a
//! ```
//!
//! The names in scope live in a per-thread stack ([`Frame`]): a session runs one statement at a
//! time on its own thread, and the executor's name lookups ([`crate::query::from_source`],
//! [`crate::join::JoinSource`]) and the subqueries it runs through the session's
//! [`crate::expr::Env`] cannot otherwise see which CTEs the enclosing query defined. A frame
//! is pushed when a query with a WITH starts and popped when it ends (errors and panics
//! included), so a nested WITH shadows an outer one of the same name and nothing outlives its
//! statement. Lookups search from the newest entry, so a CTE shadows a table or view of its
//! name, and CTE `i` sees only the CTEs before it (a non-recursive CTE naming itself reads the
//! table of that name, as in PostgreSQL). Describe pushes the same names with their columns
//! and no rows, so parameter and column types are inferred against the CTEs' columns.
//!
//! A CTE's columns are its query's output columns (names and the types Describe infers),
//! renamed by its column list. Errors, as PostgreSQL 15's parse analysis reports them: a name
//! given twice in one WITH is 42712, and a column list longer than the query's columns 42P10.
//!
//! # Data-modifying statements in WITH
//!
//! At the top level of a statement ([`statement`]: the WITH of a `Statement::Query`) a CTE may
//! be an INSERT (ON CONFLICT too), UPDATE or DELETE, and so may the main statement (sqlparser
//! gives `WITH ... DELETE ...` as a query whose body is the DELETE). Such a CTE runs like the
//! others, once, to completion, at its place in the WITH, whether or not anything reads it,
//! through the same executor as the statement on its own ([`crate::query::execute`]); its
//! RETURNING rows are its rows. Without RETURNING it has no columns and a FROM item naming it
//! is 0A000 (`WITH query "x" does not have a RETURNING clause`, PostgreSQL's
//! `addRangeTableEntryForCTE`). The result and command tag are the main statement's.
//!
//! ```text
//!   WITH d AS (DELETE FROM a ... RETURNING *)   1. delete, push d (RETURNING rows)
//!   INSERT INTO b SELECT * FROM d               2. the INSERT reads d; tag INSERT 0 n
//! ```
//!
//! Below the top level ([`select`]: subqueries, derived tables, a CTE's own WITH, an INSERT's
//! SELECT) a data-modifying CTE is 0A000 (`WITH clause containing a data-modifying statement
//! must be at the top level`, PostgreSQL's `analyzeCTE`).
//!
//! What differs from PostgreSQL: there, every part of the statement reads with one snapshot
//! and one command ID, so nothing but the CTE's RETURNING rows shows its changes, and a CTE
//! nobody reads runs after the main statement. Here the parts run in order and the engine
//! advances the command ID after each write, so the CTEs after a data-modifying one and the
//! main statement see its changes (a count after the DELETE; an UPDATE of a row the CTE
//! updated applies both); foreign keys are checked at the end of each part. docs/server.md
//! ("Data-modifying statements in WITH") lists the cases; the engine has no way to read at an
//! earlier command ID.

mod recursive;

use std::cell::RefCell;
use std::rc::Rc;

use sqlparser::ast::{Cte, ObjectName, Query, SetExpr, Statement, TableAlias, With};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::expr::ident_name;
use crate::session::{Cx, Field, Outcome};
use crate::types::{Datum, SqlType};
use crate::Shared;

/// A materialized CTE as a FROM item reads it.
pub struct CteTable {
    pub cols: Vec<ColumnDef>,
    pub rows: Rc<Vec<Vec<Datum>>>,
    /// False for a data-modifying CTE without RETURNING, which a FROM item may not name.
    pub returning: bool,
}

struct Entry {
    name: String,
    table: Rc<CteTable>,
}

thread_local! {
    /// The CTEs in scope on this thread, innermost last.
    static IN_SCOPE: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// The CTEs one WITH adds to the scope; dropping it removes them.
struct Frame {
    depth: usize,
}

impl Frame {
    fn enter() -> Frame {
        Frame { depth: IN_SCOPE.with(|s| s.borrow().len()) }
    }

    fn push(&self, name: String, table: CteTable) {
        IN_SCOPE.with(|s| s.borrow_mut().push(Entry { name, table: Rc::new(table) }));
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        IN_SCOPE.with(|s| s.borrow_mut().truncate(self.depth));
    }
}

/// The CTE an unqualified FROM name refers to, if one is in scope.
pub fn lookup(name: &ObjectName) -> Option<Rc<CteTable>> {
    let [part] = name.0.as_slice() else { return None };
    let name = ident_name(part.as_ident()?);
    IN_SCOPE.with(|s| s.borrow().iter().rev().find(|e| e.name == name).map(|e| e.table.clone()))
}

/// Runs `body` (the main query) with the CTEs of `with` materialized and in scope: a WITH
/// below the top level of its statement, where a data-modifying CTE is 0A000.
pub fn select<T>(
    cx: &mut Cx<'_, '_>,
    with: &With,
    body: impl FnOnce(&mut Cx<'_, '_>) -> Result<T, SqlError>,
) -> Result<T, SqlError> {
    materialize(cx, with, Level::Nested, body)
}

/// Runs a statement that is a query with a WITH (`Statement::Query`): the top level, where
/// CTEs may be INSERT, UPDATE or DELETE and the main statement too. Its result and command
/// tag are the main statement's.
pub fn statement(cx: &mut Cx<'_, '_>, q: &Query) -> Result<Outcome, SqlError> {
    let main = |cx: &mut Cx<'_, '_>| match dml(q) {
        Some(s) => crate::query::execute(cx, s),
        None => {
            let (fields, rows) = crate::query::select_body(cx, q)?;
            let tag = format!("SELECT {}", rows.len());
            Ok(Outcome::Rows { fields, rows, tag })
        }
    };
    match &q.with {
        Some(with) => materialize(cx, with, Level::Top, main),
        None => main(cx),
    }
}

/// Where a WITH stands in its statement.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// Attached to the statement itself: data-modifying CTEs allowed.
    Top,
    /// In a subquery, a derived table, a CTE's query, an INSERT's SELECT.
    Nested,
}

/// Materializes the CTEs of `with` in order, each seeing the ones before it, then runs `body`
/// with all of them in scope.
fn materialize<T>(
    cx: &mut Cx<'_, '_>,
    with: &With,
    level: Level,
    body: impl FnOnce(&mut Cx<'_, '_>) -> Result<T, SqlError>,
) -> Result<T, SqlError> {
    check(with, level)?;
    let frame = Frame::enter();
    for cte in &with.cte_tables {
        let table = match (dml(&cte.query), recursive_terms(with, cte)?) {
            (Some(s), _) => modifying(cx, cte, s)?,
            (None, Some(terms)) => recursive::run(cx, cte, &terms)?,
            (None, None) => {
                let (fields, rows) = crate::query::select(cx, &cte.query)?;
                CteTable { cols: columns(&cte.alias, fields)?, rows: Rc::new(rows), returning: true }
            }
        };
        frame.push(ident_name(&cte.alias.name), table);
    }
    body(cx)
}

/// Runs a data-modifying CTE to completion; its RETURNING rows are the CTE's rows. A WITH of
/// its own is below the top level.
fn modifying(cx: &mut Cx<'_, '_>, cte: &Cte, s: &Statement) -> Result<CteTable, SqlError> {
    let run = |cx: &mut Cx<'_, '_>| crate::query::execute(cx, s);
    let outcome = match &cte.query.with {
        Some(with) => materialize(cx, with, Level::Nested, run)?,
        None => run(cx)?,
    };
    match outcome {
        Outcome::Rows { fields, rows, .. } => {
            Ok(CteTable { cols: columns(&cte.alias, fields)?, rows: Rc::new(rows), returning: true })
        }
        _ => Ok(CteTable { cols: columns(&cte.alias, Vec::new())?, rows: Rc::default(), returning: false }),
    }
}

/// The INSERT, UPDATE or DELETE a query's body is (`WITH ... DELETE ...`, a CTE's query).
fn dml(q: &Query) -> Option<&Statement> {
    match q.body.as_ref() {
        SetExpr::Insert(s) | SetExpr::Update(s) | SetExpr::Delete(s) => Some(s),
        _ => None,
    }
}

/// The command a read-only transaction refuses a statement as (25006), when the query
/// writes: its main statement's (`INSERT`, `UPDATE`, `DELETE`), or `SELECT` for a SELECT
/// with a data-modifying CTE, as PostgreSQL names it.
pub fn writes(q: &Query) -> Option<&'static str> {
    let command = |body: &SetExpr| match body {
        SetExpr::Insert(_) => Some("INSERT"),
        SetExpr::Update(_) => Some("UPDATE"),
        SetExpr::Delete(_) => Some("DELETE"),
        SetExpr::Merge(_) => Some("MERGE"),
        _ => None,
    };
    command(q.body.as_ref())
        .or_else(|| q.with.as_ref()?.cte_tables.iter().any(|c| modifies(&c.query)).then_some("SELECT"))
}

/// Describe's view of a query with a WITH: each CTE's query is described in turn (its `$n`
/// typed into `params`), its columns put in scope, then `body` describes the main query.
/// `None` when a CTE cannot be described.
pub fn describe<T>(
    sh: &Shared,
    with: &With,
    params: &mut Vec<Option<SqlType>>,
    body: impl FnOnce(&mut Vec<Option<SqlType>>) -> Option<T>,
) -> Option<T> {
    check(with, Level::Top).ok()?;
    let frame = Frame::enter();
    for cte in &with.cte_tables {
        let (cols, returning) = match (dml(&cte.query), recursive_terms(with, cte).ok()?) {
            (Some(s), _) => {
                let fields = describe_dml(sh, &cte.query, s, params);
                (columns(&cte.alias, fields.clone().unwrap_or_default()).ok()?, fields.is_some())
            }
            (None, Some(terms)) => (recursive::describe(sh, cte, &terms, params)?, true),
            (None, None) => (columns(&cte.alias, crate::query::describe_query(sh, &cte.query, params)?).ok()?, true),
        };
        frame.push(ident_name(&cte.alias.name), CteTable { cols, rows: Rc::default(), returning });
    }
    body(params)
}

/// Describe's view of a statement that is a query (`Statement::Query`): its parameter types
/// and result columns, those of its RETURNING when its main statement is an INSERT, UPDATE or
/// DELETE (`None`: no rows, or it cannot be described).
pub fn describe_statement(sh: &Shared, q: &Query, params: &mut Vec<Option<SqlType>>) -> Option<Vec<Field>> {
    match dml(q) {
        Some(s) => describe_dml(sh, q, s, params),
        None => crate::query::describe_query(sh, q, params),
    }
}

/// The RETURNING columns of the INSERT, UPDATE or DELETE `s`, the body of `q`, with `q`'s
/// WITH in scope; `None` without RETURNING.
fn describe_dml(sh: &Shared, q: &Query, s: &Statement, params: &mut Vec<Option<SqlType>>) -> Option<Vec<Field>> {
    match &q.with {
        Some(with) => describe(sh, with, params, |params| crate::dml::describe(sh, s, params)),
        None => crate::dml::describe(sh, s, params),
    }
}

/// A CTE's recursive terms: only under WITH RECURSIVE, and only when it names itself.
fn recursive_terms<'a>(with: &With, cte: &'a Cte) -> Result<Option<recursive::Terms<'a>>, SqlError> {
    if with.recursive {
        recursive::terms(cte)
    } else {
        Ok(None)
    }
}

/// What PostgreSQL refuses before running anything: a data-modifying CTE below the top
/// level (0A000), MERGE in WITH (a syntax error in PostgreSQL 15; 0A000 here) and a name
/// given twice (42712).
fn check(with: &With, level: Level) -> Result<(), SqlError> {
    for (i, cte) in with.cte_tables.iter().enumerate() {
        if matches!(cte.query.body.as_ref(), SetExpr::Merge(_)) {
            return Err(SqlError::unsupported("MERGE in WITH"));
        }
        if level == Level::Nested && modifies(&cte.query) {
            return Err(SqlError::new(
                "0A000",
                "WITH clause containing a data-modifying statement must be at the top level",
            ));
        }
        let name = ident_name(&cte.alias.name);
        if with.cte_tables[..i].iter().any(|c: &Cte| ident_name(&c.alias.name) == name) {
            return Err(SqlError::new("42712", format!("WITH query name \"{name}\" specified more than once")));
        }
    }
    Ok(())
}

fn modifies(q: &Query) -> bool {
    matches!(q.body.as_ref(), SetExpr::Insert(_) | SetExpr::Update(_) | SetExpr::Delete(_) | SetExpr::Merge(_))
}

/// A CTE's columns: its query's, renamed by its column list.
fn columns(alias: &TableAlias, fields: Vec<Field>) -> Result<Vec<ColumnDef>, SqlError> {
    renamed(&format!("WITH query \"{}\"", ident_name(&alias.name)), alias, fields)
}

/// A query's output columns renamed by a column list (`name (a, b)`), leading columns first;
/// 42P10 naming `what` when the list is longer. CTEs and derived tables in FROM.
pub(crate) fn renamed(what: &str, alias: &TableAlias, fields: Vec<Field>) -> Result<Vec<ColumnDef>, SqlError> {
    if alias.columns.len() > fields.len() {
        return Err(SqlError::too_many_column_names(what, fields.len(), alias.columns.len()));
    }
    Ok(fields
        .into_iter()
        .enumerate()
        .map(|(i, f)| ColumnDef {
            name: alias.columns.get(i).map_or(f.name, |c| ident_name(&c.name)),
            ty: f.ty,
            nullable: true,
        })
        .collect())
}

/// A FROM item naming a CTE, `cte [AS] alias [(col, ...)]`: its names and columns (an alias
/// hides the CTE's name; its column list renames the leading columns, 42P10 when too long).
pub fn from_item(
    name: &ObjectName,
    table: &CteTable,
    alias: Option<&TableAlias>,
) -> Result<(Vec<String>, Vec<ColumnDef>), SqlError> {
    if !table.returning {
        let shown = crate::ddl::object_name(name);
        return Err(SqlError::new("0A000", format!("WITH query \"{shown}\" does not have a RETURNING clause")));
    }
    let Some(alias) = alias else { return Ok((vec![crate::ddl::object_name(name)], table.cols.clone())) };
    let shown = ident_name(&alias.name);
    if alias.columns.len() > table.cols.len() {
        return Err(SqlError::new(
            "42P10",
            format!(
                "table \"{shown}\" has {} columns available but {} columns specified",
                table.cols.len(),
                alias.columns.len()
            ),
        ));
    }
    let mut cols = table.cols.clone();
    for (c, new) in cols.iter_mut().zip(&alias.columns) {
        c.name = ident_name(&new.name);
    }
    Ok((vec![shown], cols))
}
