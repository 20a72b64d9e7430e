//! Foreign-key enforcement: PostgreSQL's `ri_triggers.c`, run at the end of each writing
//! statement (as PostgreSQL's AFTER triggers fire), over the rows the statement wrote.
//!
//! # The referencing side (INSERT, UPDATE of the key, COPY)
//!
//! For each new row whose key columns are all non-NULL (MATCH SIMPLE: a NULL passes), the
//! referenced row is looked up through the parent's unique index and locked
//! (`Transaction::lock_row`, FOR KEY SHARE; every settledb row lock is exclusive, which is
//! stricter than PostgreSQL's shared lock and never wrong). The lock is what makes the check
//! hold until commit:
//!
//! ```text
//!   T1: INSERT INTO c VALUES (1, 7)      T2: DELETE FROM p WHERE id = 7
//!   T1: lookup p(7), lock it             T2: delete p(7) -> waits for T1's lock
//!   T1: COMMIT                           T2: wakes, deletes, checks c: sees T1's row
//!                                            -> 23503 "is still referenced"
//! or the other way round:
//!   T2: delete p(7) (not committed)      T1: lookup p(7), lock -> waits for T2
//!   T2: (c has no row 7) COMMIT          T1: the row is gone -> 23503 "is not present"
//! ```
//!
//! Under READ COMMITTED both sides read with a fresh snapshot (`end_statement` +
//! `begin_statement`, the one the statement's next command takes), as PostgreSQL's RI
//! queries do: a row committed by a transaction this one waited for is seen.
//!
//! # The referenced side (DELETE, UPDATE of the key)
//!
//! For each old key no longer present: NO ACTION and RESTRICT look for a referencing row
//! (NO ACTION first looks whether another row of the parent now has the key, PostgreSQL's
//! `ri_Check_Pk_Match`); CASCADE deletes the referencing rows or sets their key to the new
//! one; SET NULL / SET DEFAULT set it to NULL or the column's default. Rows changed so are
//! checked (NOT NULL, CHECK, and for SET DEFAULT the reference itself) and their own
//! constraints run in turn. Referencing rows are found through an index whose leading
//! columns are the key columns when the table has one, by a sequential scan otherwise.
//!
//! # Not built
//!
//! Under REPEATABLE READ the referenced side reads the transaction's snapshot, and does not
//! raise PostgreSQL's 40001 for a referencing row committed after it (PostgreSQL's
//! cross-check snapshot); a concurrent insert of a child that the delete waited for can
//! then leave an orphan. READ COMMITTED is fully checked.

use std::cell::RefCell;

use settledb::{
    Error as EngineError, Index, IsolationLevel, KeyBound, LockResult, RowLockMode, RowLockWait, ScanDirection, Table,
    Tid, Transaction, Value,
};

use super::{Action, Constraint, ForeignKey, Kind, TableRules};
use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::plan::Target;
use crate::session::datums;
use crate::types::Datum;
use crate::Shared;

/// Marks a referencing row that no longer has the key (changed concurrently).
const MOVED: &str = "settledb-server: the referencing row's key changed";
/// Marks an error raised inside an engine callback (the real one is kept aside).
const SQL_ERROR: &str = "settledb-server: referential action error";
/// Cascades deeper than this are refused (a cycle of cascading keys).
const DEPTH_MAX: usize = 64;

/// The rows one statement wrote to a table, as stored.
#[derive(Default)]
pub struct Writes {
    pub inserted: Vec<Vec<Value>>,
    pub updated: Vec<(Vec<Value>, Vec<Value>)>,
    pub deleted: Vec<Vec<Value>>,
}

impl Writes {
    pub fn is_empty(&self) -> bool {
        self.inserted.is_empty() && self.updated.is_empty() && self.deleted.is_empty()
    }
}

/// Runs the foreign keys of `t` (both sides) over what a statement wrote to it.
pub fn after_statement(
    sh: &Shared,
    tx: &mut Transaction<'_>,
    t: &Target,
    rules: &TableRules,
    writes: Writes,
) -> Result<(), SqlError> {
    if writes.is_empty() || !rules.has_foreign_keys() {
        return Ok(());
    }
    fresh_snapshot(tx);
    run(sh, tx, &t.table, &t.cols, rules, writes, 0)
}

/// READ COMMITTED: the next command reads with a new snapshot.
fn fresh_snapshot(tx: &mut Transaction<'_>) {
    if tx.isolation() == IsolationLevel::ReadCommitted {
        tx.end_statement();
        tx.begin_statement();
    }
}

fn run(
    sh: &Shared,
    tx: &mut Transaction<'_>,
    table: &Table,
    cols: &[ColumnDef],
    rules: &TableRules,
    writes: Writes,
    depth: usize,
) -> Result<(), SqlError> {
    if depth > DEPTH_MAX {
        return Err(SqlError::new("54001", "foreign key actions nest too deeply"));
    }
    for c in &rules.outgoing {
        let Kind::ForeignKey(fk) = &c.kind else { continue };
        let changed = writes.updated.iter().filter(|(old, new)| fk.cols.iter().any(|&p| old[p] != new[p]));
        for row in writes.inserted.iter().chain(changed.map(|(_, new)| new)) {
            if fk.cols.iter().any(|&p| matches!(row[p], Value::Null)) {
                continue;
            }
            if !lock_parent(sh, tx, fk, cols, row)? {
                return Err(not_present(sh, table.name(), cols, &c.name, fk, row));
            }
        }
    }
    for c in &rules.incoming {
        let Kind::ForeignKey(fk) = &c.kind else { continue };
        for old in &writes.deleted {
            referenced_gone(sh, tx, table, cols, c, fk, old, None, depth)?;
        }
        for (old, new) in &writes.updated {
            if fk.parent_cols.iter().any(|&p| old[p] != new[p]) {
                referenced_gone(sh, tx, table, cols, c, fk, old, Some(new), depth)?;
            }
        }
    }
    Ok(())
}

fn table_of(sh: &Shared, oid: u32) -> Result<Table, SqlError> {
    sh.db
        .table_by_oid(settledb::Oid(oid))
        .ok_or_else(|| SqlError::new("XX000", format!("table with OID {oid} of a foreign key does not exist")))
}

/// The parent's unique index of `fk`, and the positions in the parent of its columns.
fn parent_index(sh: &Shared, parent: &Table, fk: &ForeignKey) -> Result<(Index, Vec<usize>), SqlError> {
    let ix = sh.db.indexes(parent).into_iter().find(|ix| ix.oid().0 == fk.index).ok_or_else(|| {
        SqlError::new("XX000", format!("the index of a foreign key on \"{}\" does not exist", parent.name()))
    })?;
    let names: Vec<&str> = parent.schema().columns.iter().map(|c| c.name.as_str()).collect();
    let order = ix.columns().iter().filter_map(|n| names.iter().position(|x| x == n)).collect();
    Ok((ix, order))
}

/// `row`'s key (columns `from` of a table with columns `from_cols`) converted to the types
/// of columns `to` of `to_cols`, in the order of `to`; `None` when a value does not fit.
fn convert(
    row: &[Value],
    from: &[usize],
    from_cols: &[ColumnDef],
    to: &[usize],
    to_cols: &[ColumnDef],
) -> Option<Vec<Value>> {
    from.iter()
        .zip(to)
        .map(|(&f, &t)| Datum::from_stored(&row[f], from_cols[f].ty).to_stored(to_cols[t].ty, &to_cols[t].name).ok())
        .collect()
}

/// Looks the referenced row of `row` (a referencing row of `fk`) up: its TID and values.
pub fn find_parent(
    sh: &Shared,
    tx: &mut Transaction<'_>,
    fk: &ForeignKey,
    cols: &[ColumnDef],
    row: &[Value],
) -> Result<Option<(Tid, Vec<Value>)>, SqlError> {
    if fk.cols.iter().any(|&p| matches!(row[p], Value::Null)) {
        return Ok(Some((Tid::default(), Vec::new())));
    }
    let parent = table_of(sh, fk.parent)?;
    let pcols = sh.catalog.columns(&parent);
    let (ix, order) = parent_index(sh, &parent, fk)?;
    let Some(by_parent) = convert(row, &fk.cols, cols, &fk.parent_cols, &pcols) else { return Ok(None) };
    // In the index's column order.
    let key: Vec<Value> =
        order.iter().filter_map(|p| fk.parent_cols.iter().position(|x| x == p).map(|j| by_parent[j].clone())).collect();
    Ok(tx.get(&ix, &key)?)
}

/// Finds and locks the referenced row of `row`; whether it exists.
fn lock_parent(
    sh: &Shared,
    tx: &mut Transaction<'_>,
    fk: &ForeignKey,
    cols: &[ColumnDef],
    row: &[Value],
) -> Result<bool, SqlError> {
    let parent = table_of(sh, fk.parent)?;
    // A lookup finds a version a concurrent transaction then deleted or re-keyed: look again
    // with a snapshot that sees its commit (READ COMMITTED), at most a few times.
    for _ in 0..4 {
        let Some((tid, values)) = find_parent(sh, tx, fk, cols, row)? else { return Ok(false) };
        match tx.lock_row(&parent, tid, RowLockMode::KeyShare, RowLockWait::Block)? {
            LockResult::Locked { values: now, .. } if fk.parent_cols.iter().all(|&p| now.get(p) == values.get(p)) => {
                return Ok(true)
            }
            _ if tx.isolation() == IsolationLevel::ReadCommitted => fresh_snapshot(tx),
            _ => return Ok(false),
        }
    }
    Ok(false)
}

/// 23503 for a referencing row whose key is not in the parent.
pub fn not_present(
    sh: &Shared,
    table: &str,
    cols: &[ColumnDef],
    name: &str,
    fk: &ForeignKey,
    row: &[Value],
) -> SqlError {
    let parent = table_of(sh, fk.parent).map(|t| t.name().to_string()).unwrap_or_default();
    let names: Vec<&str> = fk.cols.iter().map(|&p| cols[p].name.as_str()).collect();
    let values: Vec<String> = fk.cols.iter().map(|&p| text(&row[p], &cols[p])).collect();
    SqlError::new("23503", format!("insert or update on table \"{table}\" violates foreign key constraint \"{name}\""))
        .with_detail(format!(
            "Key ({})=({}) is not present in table \"{parent}\".",
            names.join(", "),
            values.join(", ")
        ))
}

fn text(v: &Value, c: &ColumnDef) -> String {
    Datum::from_stored(v, c.ty).to_text().unwrap_or_else(|| "null".into())
}

/// An index of `child` whose leading columns are `cols` (in some order): the positions of
/// `cols` in its key order.
fn child_index(sh: &Shared, child: &Table, cols: &[usize]) -> Option<(Index, Vec<usize>)> {
    let names: Vec<&str> = child.schema().columns.iter().map(|c| c.name.as_str()).collect();
    sh.db.indexes(child).into_iter().find_map(|ix| {
        let lead: Vec<usize> =
            ix.columns().iter().take(cols.len()).filter_map(|n| names.iter().position(|x| x == n)).collect();
        let mut a = lead.clone();
        a.sort_unstable();
        let mut b = cols.to_vec();
        b.sort_unstable();
        (a == b).then_some((ix, lead))
    })
}

/// The visible rows of `child` whose columns `cols` equal `key` (pairwise), at most `limit`.
fn referencing_rows(
    sh: &Shared,
    tx: &mut Transaction<'_>,
    child: &Table,
    cols: &[usize],
    key: &[Value],
    limit: Option<usize>,
) -> Result<Vec<(Tid, Vec<Value>)>, SqlError> {
    if let Some((ix, lead)) = child_index(sh, child, cols) {
        let prefix: Vec<Value> =
            lead.iter().filter_map(|p| cols.iter().position(|c| c == p).map(|j| key[j].clone())).collect();
        let b = KeyBound::Included(prefix);
        let rows = tx.range(&ix, b.clone(), b, ScanDirection::Forward, None)?;
        let mut out: Vec<_> =
            rows.into_iter().filter(|(_, r)| cols.iter().zip(key).all(|(&p, k)| &r[p] == k)).collect();
        if let Some(l) = limit {
            out.truncate(l);
        }
        return Ok(out);
    }
    let mut out = Vec::new();
    for r in tx.scan(child)? {
        let (tid, row) = r?;
        if cols.iter().zip(key).all(|(&p, k)| &row[p] == k) {
            out.push((tid, row));
            if limit.is_some_and(|l| out.len() >= l) {
                break;
            }
        }
    }
    Ok(out)
}

/// The old key `old` of the parent (its row deleted, or updated to `new`) is gone: the
/// constraint's action on the referencing rows.
#[expect(clippy::too_many_arguments, reason = "one pg_constraint row's fields, or the action's whole context")]
fn referenced_gone(
    sh: &Shared,
    tx: &mut Transaction<'_>,
    parent: &Table,
    pcols: &[ColumnDef],
    c: &Constraint,
    fk: &ForeignKey,
    old: &[Value],
    new: Option<&[Value]>,
    depth: usize,
) -> Result<(), SqlError> {
    if fk.parent_cols.iter().any(|&p| matches!(old[p], Value::Null)) {
        return Ok(());
    }
    let child = table_of(sh, c.table)?;
    let ccols = sh.catalog.columns(&child);
    let Some(key) = convert(old, &fk.parent_cols, pcols, &fk.cols, &ccols) else { return Ok(()) };
    let action = if new.is_some() { fk.on_update } else { fk.on_delete };
    if action == Action::NoAction && still_present(sh, tx, fk, parent, pcols, old)? {
        return Ok(());
    }
    let limit = matches!(action, Action::NoAction | Action::Restrict).then_some(1);
    let found = referencing_rows(sh, tx, &child, &fk.cols, &key, limit)?;
    if found.is_empty() {
        return Ok(());
    }
    let still_referenced = || {
        let names: Vec<&str> = fk.parent_cols.iter().map(|&p| pcols[p].name.as_str()).collect();
        let values: Vec<String> = fk.parent_cols.iter().map(|&p| text(&old[p], &pcols[p])).collect();
        SqlError::new(
            "23503",
            format!(
                "update or delete on table \"{}\" violates foreign key constraint \"{}\" on table \"{}\"",
                parent.name(),
                c.name,
                child.name()
            ),
        )
        .with_detail(format!(
            "Key ({})=({}) is still referenced from table \"{}\".",
            names.join(", "),
            values.join(", "),
            child.name()
        ))
    };
    let target = Target::open(sh, child.name(), None)?;
    let mut writes = Writes::default();
    match (action, new) {
        (Action::NoAction | Action::Restrict, _) => return Err(still_referenced()),
        (Action::Cascade, None) => {
            for (tid, row) in found {
                if tx.delete(&child, tid)? {
                    writes.deleted.push(row);
                }
            }
        }
        (Action::Cascade, Some(new)) => {
            let Some(to) = convert(new, &fk.parent_cols, pcols, &fk.cols, &ccols) else {
                return Err(still_referenced());
            };
            set_key(tx, &target, fk, &key, found, |_| Ok(to.clone()), &mut writes)?;
        }
        (Action::SetNull, _) => {
            set_key(tx, &target, fk, &key, found, |_| Ok(vec![Value::Null; fk.cols.len()]), &mut writes)?;
        }
        (Action::SetDefault, _) => {
            let defaults = sh.catalog.defaults(&child);
            let to = |_: &[Value]| -> Result<Vec<Value>, SqlError> {
                fk.cols
                    .iter()
                    .map(|&p| match defaults.as_ref().and_then(|d| d[p].as_ref()) {
                        Some(e) => {
                            let scope = crate::expr::Scope::empty();
                            crate::expr::eval(e, &scope, &[], &mut crate::expr::Params(&[]), None)?
                                .to_stored(ccols[p].ty, &ccols[p].name)
                        }
                        None => Ok(Value::Null),
                    })
                    .collect()
            };
            set_key(tx, &target, fk, &key, found, to, &mut writes)?;
        }
    }
    if let Some(rules) = &target.rules {
        run(sh, tx, &child, &ccols, rules, writes, depth + 1)?;
    }
    Ok(())
}

/// Whether the parent has (again) a row with the key `old` held (NO ACTION's re-check).
fn still_present(
    sh: &Shared,
    tx: &mut Transaction<'_>,
    fk: &ForeignKey,
    parent: &Table,
    pcols: &[ColumnDef],
    old: &[Value],
) -> Result<bool, SqlError> {
    let (ix, order) = parent_index(sh, parent, fk)?;
    let key: Vec<Value> = order.iter().map(|&p| old[p].clone()).collect();
    let _ = pcols;
    Ok(tx.get(&ix, &key)?.is_some())
}

/// Sets the key columns of the referencing rows `found` (which held `key`) to what `to`
/// computes, each new row checked (NOT NULL, CHECK); re-run by the engine on a newer
/// version under READ COMMITTED, skipped when that version no longer holds `key`.
fn set_key(
    tx: &mut Transaction<'_>,
    t: &Target,
    fk: &ForeignKey,
    key: &[Value],
    found: Vec<(Tid, Vec<Value>)>,
    to: impl Fn(&[Value]) -> Result<Vec<Value>, SqlError>,
    writes: &mut Writes,
) -> Result<(), SqlError> {
    for (tid, _) in found {
        let failure: RefCell<Option<SqlError>> = RefCell::new(None);
        let pair: RefCell<Option<(Vec<Value>, Vec<Value>)>> = RefCell::new(None);
        let change = |row: &[Value]| -> settledb::Result<Vec<Value>> {
            if fk.cols.iter().zip(key).any(|(&p, k)| &row[p] != k) {
                return Err(EngineError::NotFound(MOVED.into()));
            }
            let r = to(row).and_then(|vals| {
                let mut new = datums(row, &t.cols);
                for (&p, v) in fk.cols.iter().zip(&vals) {
                    new[p] = Datum::from_stored(v, t.cols[p].ty);
                }
                crate::dml::checked_row(t, &new).map(|(stored, _)| stored)
            });
            match r {
                Ok(stored) => {
                    *pair.borrow_mut() = Some((row.to_vec(), stored.clone()));
                    Ok(stored)
                }
                Err(e) => {
                    *failure.borrow_mut() = Some(e);
                    Err(EngineError::InvalidInput(SQL_ERROR.into()))
                }
            }
        };
        match tx.update_with(&t.table, tid, change) {
            Ok(Some(_)) => {
                if let Some(p) = pair.borrow_mut().take() {
                    writes.updated.push(p);
                }
            }
            Ok(None) => {}
            Err(EngineError::NotFound(m)) if m == MOVED => {}
            Err(e) => return Err(failure.borrow_mut().take().unwrap_or_else(|| SqlError::from(e))),
        }
    }
    Ok(())
}
