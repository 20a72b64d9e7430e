//! Common table expressions: `WITH [RECURSIVE] name [(col, ...)] AS [[NOT] MATERIALIZED]
//! (SELECT ...) [, ...] SELECT ...`; the recursive ones are in [`recursive`].
//!
//! Every CTE is materialized, as PostgreSQL does with a CTE marked `MATERIALIZED` (its
//! `nodeCtescan.c`): its query runs once per statement, in the statement's transaction and
//! snapshot, before the main query; its rows are then read like a table's, however many
//! times the main query (its FROM, its joins, its subqueries) names it. `[NOT] MATERIALIZED`
//! is accepted and changes nothing: with no volatile side effects to keep apart, inlining would
//! only be an optimization.
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
//! renamed by its column list. Errors, as PostgreSQL 15's parse analysis reports them:
//! a data-modifying CTE is 0A000 (not built), a name given twice in one WITH is 42712, and a
//! column list longer than the query's columns 42P10.

mod recursive;

use std::cell::RefCell;
use std::rc::Rc;

use sqlparser::ast::{Cte, ObjectName, Query, SetExpr, TableAlias, With};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::expr::ident_name;
use crate::session::{Cx, Field};
use crate::types::{Datum, SqlType};
use crate::Shared;

/// A materialized CTE as a FROM item reads it.
pub struct CteTable {
    pub cols: Vec<ColumnDef>,
    pub rows: Rc<Vec<Vec<Datum>>>,
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

/// Runs `body` (the main query) with the CTEs of `with` materialized and in scope.
pub fn select<T>(
    cx: &mut Cx<'_, '_>,
    with: &With,
    body: impl FnOnce(&mut Cx<'_, '_>) -> Result<T, SqlError>,
) -> Result<T, SqlError> {
    check(with)?;
    let frame = Frame::enter();
    for cte in &with.cte_tables {
        let table = match recursive_terms(with, cte)? {
            Some(terms) => recursive::run(cx, cte, &terms)?,
            None => {
                let (fields, rows) = crate::query::select(cx, &cte.query)?;
                CteTable { cols: columns(&cte.alias, fields)?, rows: Rc::new(rows) }
            }
        };
        frame.push(ident_name(&cte.alias.name), table);
    }
    body(cx)
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
    check(with).ok()?;
    let frame = Frame::enter();
    for cte in &with.cte_tables {
        let cols = match recursive_terms(with, cte).ok()? {
            Some(terms) => recursive::describe(sh, cte, &terms, params)?,
            None => columns(&cte.alias, crate::query::describe_query(sh, &cte.query, params)?).ok()?,
        };
        frame.push(ident_name(&cte.alias.name), CteTable { cols, rows: Rc::default() });
    }
    body(params)
}

/// A CTE's recursive terms: only under WITH RECURSIVE, and only when it names itself.
fn recursive_terms<'a>(with: &With, cte: &'a Cte) -> Result<Option<recursive::Terms<'a>>, SqlError> {
    if with.recursive {
        recursive::terms(cte)
    } else {
        Ok(None)
    }
}

/// What PostgreSQL refuses before running anything: data-modifying CTEs (not built here) and
/// a name given twice.
fn check(with: &With) -> Result<(), SqlError> {
    for (i, cte) in with.cte_tables.iter().enumerate() {
        if modifies(&cte.query) {
            return Err(SqlError::unsupported("a data-modifying statement (INSERT, UPDATE, DELETE) in WITH"));
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
