//! Table constraints the engine does not know: CHECK, FOREIGN KEY, and which unique indexes
//! are UNIQUE constraints (PostgreSQL's `pg_constraint`, kept by the server).
//!
//! # What is kept, and where
//!
//! The engine knows a table's columns, NOT NULL, its indexes and which one is the primary
//! key. The rest of `pg_constraint` lives here, in the file `DIR/server_constraints`, one
//! line per constraint (fields separated by tabs; backslash, tab and newline escaped):
//!
//! ```text
//!   check   OID  TABLE-OID  NAME  ATTNUM:NAME,...  EXPRESSION-TEXT
//!   unique  OID  TABLE-OID  NAME                                  (OID = the unique index's)
//!   fkey    OID  TABLE-OID  NAME  ATTNUMS  PARENT-OID  PARENT-ATTNUMS  INDEX-OID  UPD  DEL
//! ```
//!
//! replaced whole as [`crate::catalog`]'s file is (write a sibling, fsync, rename, fsync the
//! directory), after the engine's DDL commits. Tables are named by OID and foreign-key
//! columns by number (`attnum`, from 1), as PostgreSQL's `conrelid` and `conkey` do, so
//! `ALTER TABLE ... RENAME [COLUMN]` needs nothing here. A CHECK expression is SQL text that
//! names columns; it keeps the number and the name each column had when the text was
//! written, and when a column has been renamed since, the text is rewritten
//! ([`check::renamed`]) the next time the table's rules are built, and saved. `UPD`/`DEL`
//! are PostgreSQL's action letters (`a` NO ACTION, `r` RESTRICT, `c` CASCADE, `n` SET NULL,
//! `d` SET DEFAULT). A bad line stops the server at startup with the file and line number.
//!
//! # Rules, and what a table without constraints pays
//!
//! [`Constraints::rules`] hands a statement the table's [`TableRules`] (its parsed CHECK
//! expressions, the foreign keys it holds and those that reference it), built once and
//! cached by table OID. It is called once per statement ([`crate::plan::Target::open`]);
//! when no constraint exists anywhere it is one atomic load, and otherwise a hash lookup.
//! Every hook on the write path starts with `if let Some(rules) = &t.rules`.
//!
//! # Submodules
//!
//! - [`define`]: CREATE TABLE's and ALTER TABLE's constraints, DROP CONSTRAINT, and what
//!   DROP TABLE and TRUNCATE must respect.
//! - [`check`]: CHECK evaluation (PostgreSQL's `ExecConstraints`), `Failing row contains`.
//! - [`fkey`]: foreign-key enforcement (PostgreSQL's `ri_triggers.c`) and its locking.
//! - [`pg`]: `pg_constraint` rows and `pg_get_constraintdef`.
//! - [`file`]: the file above.

pub mod check;
pub mod define;
pub mod file;
pub mod fkey;
pub mod pg;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use settledb::{Database, Table};
use sqlparser::ast::Expr;

use crate::error::SqlError;

/// The first OID given to a CHECK or FOREIGN KEY constraint; far above the engine's
/// relation OIDs, so a `pg_constraint` OID never names a table or an index too.
pub const FIRST_OID: u32 = 3_000_000_000;

/// A referential action, as `pg_constraint.confupdtype` / `confdeltype` spell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    NoAction,
    Restrict,
    Cascade,
    SetNull,
    SetDefault,
}

impl Action {
    pub fn letter(self) -> char {
        match self {
            Action::NoAction => 'a',
            Action::Restrict => 'r',
            Action::Cascade => 'c',
            Action::SetNull => 'n',
            Action::SetDefault => 'd',
        }
    }

    pub fn from_letter(c: &str) -> Option<Action> {
        Some(match c {
            "a" => Action::NoAction,
            "r" => Action::Restrict,
            "c" => Action::Cascade,
            "n" => Action::SetNull,
            "d" => Action::SetDefault,
            _ => return None,
        })
    }

    /// The words `pg_get_constraintdef` prints after ON UPDATE / ON DELETE.
    pub fn words(self) -> &'static str {
        match self {
            Action::NoAction => "NO ACTION",
            Action::Restrict => "RESTRICT",
            Action::Cascade => "CASCADE",
            Action::SetNull => "SET NULL",
            Action::SetDefault => "SET DEFAULT",
        }
    }
}

/// A foreign key: `table(cols) REFERENCES parent(parent_cols)`, MATCH SIMPLE.
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignKey {
    /// Referencing columns (0-based positions in the table).
    pub cols: Vec<usize>,
    pub parent: u32,
    /// Referenced columns (0-based positions in the parent), pairwise with `cols`.
    pub parent_cols: Vec<usize>,
    /// The parent's unique index over `parent_cols` (a PRIMARY KEY's or UNIQUE's), which the
    /// constraint depends on.
    pub index: u32,
    pub on_update: Action,
    pub on_delete: Action,
}

/// What a constraint is.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// `CHECK (text)`; `columns` are the columns the text names, `(position, name when the
    /// text was written)`, by position.
    Check {
        text: String,
        columns: Vec<(usize, String)>,
    },
    /// A UNIQUE constraint; its OID is its index's.
    Unique,
    ForeignKey(ForeignKey),
}

/// One `pg_constraint` row settledb keeps (primary keys are the engine's).
#[derive(Clone, Debug, PartialEq)]
pub struct Constraint {
    pub oid: u32,
    pub table: u32,
    pub name: String,
    pub kind: Kind,
}

/// A CHECK constraint ready to evaluate.
#[derive(Debug)]
pub struct CheckRule {
    pub name: String,
    pub expr: Expr,
}

/// One table's constraints, as statements use them.
#[derive(Debug, Default)]
pub struct TableRules {
    /// The column names the rules were built against (a rename makes them stale).
    names: Vec<String>,
    pub checks: Vec<CheckRule>,
    /// Foreign keys this table holds (it is the referencing side).
    pub outgoing: Vec<Arc<Constraint>>,
    /// Foreign keys of other tables (or this one) that reference it.
    pub incoming: Vec<Arc<Constraint>>,
}

impl TableRules {
    pub fn is_referenced(&self) -> bool {
        !self.incoming.is_empty()
    }

    /// Whether writes must be collected for [`fkey`]'s end-of-statement checks.
    pub fn has_foreign_keys(&self) -> bool {
        !self.outgoing.is_empty() || !self.incoming.is_empty()
    }
}

/// Every constraint, and the per-table rules built from them.
pub struct Constraints {
    path: PathBuf,
    /// Whether any constraint exists (the write path's one check when none does).
    any: AtomicBool,
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    list: Vec<Arc<Constraint>>,
    rules: HashMap<u32, Arc<TableRules>>,
}

impl State {
    fn next_oid(&self) -> u32 {
        self.list.iter().map(|c| c.oid).filter(|&o| o >= FIRST_OID).max().map_or(FIRST_OID, |o| o + 1)
    }
}

/// Whether a foreign key's column positions lie within its tables' columns.
fn fits(db: &Database, child: u32, parent: u32, fk: &ForeignKey) -> bool {
    let width = |oid: u32| db.table_by_oid(settledb::Oid(oid)).map_or(0, |t| t.schema().columns.len());
    let (c, p) = (width(child), width(parent));
    fk.cols.iter().all(|&i| i < c) && fk.parent_cols.iter().all(|&i| i < p) && fk.cols.len() == fk.parent_cols.len()
}

impl Constraints {
    /// Reads `DIR/server_constraints` (absent: none).
    pub fn open(dir: &Path) -> Result<Constraints, SqlError> {
        let path = dir.join("server_constraints");
        let list = file::read(&path)?;
        Ok(Constraints {
            path,
            any: AtomicBool::new(!list.is_empty()),
            state: RwLock::new(State { list: list.into_iter().map(Arc::new).collect(), rules: HashMap::new() }),
        })
    }

    /// The rules of `table`, or `None` when it has no constraint and none references it.
    /// Hot path: one atomic load when no constraint exists anywhere.
    pub fn rules(&self, db: &Database, table: &Table) -> Option<Arc<TableRules>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let oid = table.oid().0;
        let fresh = |r: &TableRules| {
            r.names.iter().map(String::as_str).eq(table.schema().columns.iter().map(|c| c.name.as_str()))
        };
        if let Some(r) = self.state.read().rules.get(&oid) {
            if fresh(r) {
                return (!r.checks.is_empty() || r.has_foreign_keys()).then(|| r.clone());
            }
        }
        let built = self.build(db, table);
        (!built.checks.is_empty() || built.has_foreign_keys()).then_some(built)
    }

    /// Builds (and caches) `table`'s rules; a CHECK text whose columns were renamed since it
    /// was written is rewritten and the file saved.
    fn build(&self, db: &Database, table: &Table) -> Arc<TableRules> {
        let oid = table.oid().0;
        let names: Vec<String> = table.schema().columns.iter().map(|c| c.name.clone()).collect();
        let mut g = self.state.write();
        let mut changed = false;
        for c in g.list.iter_mut().filter(|c| c.table == oid) {
            if let Kind::Check { text, columns } = &c.kind {
                if let Some((t, cols)) = check::renamed(text, columns, &names) {
                    *c = Arc::new(Constraint { kind: Kind::Check { text: t, columns: cols }, ..(**c).clone() });
                    changed = true;
                }
            }
        }
        if changed {
            // Saving is best effort here: the in-memory text is right, and the next save or
            // the next build after a restart rewrites it again.
            let _ = file::write(&self.path, &g.list, db);
        }
        let mut rules = TableRules { names, ..TableRules::default() };
        for c in &g.list {
            match &c.kind {
                Kind::Check { text, .. } if c.table == oid => {
                    // A text that no longer parses cannot be enforced: it was checked when
                    // written, so this is a damaged file, reported at startup by `file::read`.
                    if let Ok(expr) = check::parse(text) {
                        rules.checks.push(CheckRule { name: c.name.clone(), expr });
                    }
                }
                // Column positions come from the file: one past either table's columns is a
                // damaged file (columns are never dropped), left out as a CHECK that does not
                // parse is, rather than read out of a row's bounds.
                Kind::ForeignKey(fk) if (c.table == oid || fk.parent == oid) && fits(db, c.table, fk.parent, fk) => {
                    if c.table == oid {
                        rules.outgoing.push(c.clone());
                    }
                    if fk.parent == oid {
                        rules.incoming.push(c.clone());
                    }
                }
                _ => {}
            }
        }
        // PostgreSQL checks CHECK constraints in name order.
        rules.checks.sort_by(|a, b| a.name.cmp(&b.name));
        let rules = Arc::new(rules);
        g.rules.insert(oid, rules.clone());
        rules
    }

    /// Every constraint now.
    pub fn all(&self) -> Vec<Arc<Constraint>> {
        self.state.read().list.clone()
    }

    /// The constraints of table `oid`.
    pub fn of_table(&self, oid: u32) -> Vec<Arc<Constraint>> {
        self.state.read().list.iter().filter(|c| c.table == oid).cloned().collect()
    }

    /// Changes the list with `f` (given the next free OID) and saves the file.
    pub fn change<T>(
        &self,
        db: &Database,
        f: impl FnOnce(&mut Vec<Arc<Constraint>>, u32) -> Result<T, SqlError>,
    ) -> Result<T, SqlError> {
        let mut g = self.state.write();
        let next = g.next_oid();
        let mut list = g.list.clone();
        let out = f(&mut list, next)?;
        file::write(&self.path, &list, db)?;
        g.list = list;
        g.rules.clear();
        self.any.store(!g.list.is_empty(), Ordering::Release);
        Ok(out)
    }

    /// Forgets cached rules (a table's indexes or columns changed).
    pub fn invalidate(&self) {
        self.state.write().rules.clear();
    }
}

/// Hook: a row about to be inserted into `t` (stored values), against its CHECK constraints.
pub fn check_stored(t: &crate::plan::Target, values: &[settledb::Value]) -> Result<(), SqlError> {
    match &t.rules {
        Some(r) if !r.checks.is_empty() => check::row(r, &t.name, &t.cols, &crate::session::datums(values, &t.cols)),
        _ => Ok(()),
    }
}

/// Hook: after an INSERT (or a COPY batch) wrote `rows` to `t`.
pub fn after_insert(
    sh: &crate::Shared,
    tx: &mut settledb::Transaction<'_>,
    t: &crate::plan::Target,
    rows: &[Vec<settledb::Value>],
) -> Result<(), SqlError> {
    match &t.rules {
        Some(r) if !r.outgoing.is_empty() => {
            fkey::after_statement(sh, tx, t, r, fkey::Writes { inserted: rows.to_vec(), ..Default::default() })
        }
        _ => Ok(()),
    }
}

/// Hook: after an UPDATE changed rows of `t` (old, new), when it has foreign keys.
pub fn after_update(
    sh: &crate::Shared,
    tx: &mut settledb::Transaction<'_>,
    t: &crate::plan::Target,
    pairs: Vec<(Vec<settledb::Value>, Vec<settledb::Value>)>,
) -> Result<(), SqlError> {
    match &t.rules {
        Some(r) if !pairs.is_empty() => {
            fkey::after_statement(sh, tx, t, r, fkey::Writes { updated: pairs, ..Default::default() })
        }
        _ => Ok(()),
    }
}

/// Hook: after a DELETE removed rows of `t` (their values), when a foreign key references it.
pub fn after_delete(
    sh: &crate::Shared,
    tx: &mut settledb::Transaction<'_>,
    t: &crate::plan::Target,
    olds: Vec<Vec<settledb::Value>>,
) -> Result<(), SqlError> {
    match &t.rules {
        Some(r) if !olds.is_empty() => {
            fkey::after_statement(sh, tx, t, r, fkey::Writes { deleted: olds, ..Default::default() })
        }
        _ => Ok(()),
    }
}
