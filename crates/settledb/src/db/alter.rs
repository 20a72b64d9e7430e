//! ALTER TABLE that changes a table's definition: ADD COLUMN, RENAME COLUMN, RENAME TO,
//! SET / DROP NOT NULL (PostgreSQL's `tablecmds.c`, without its rewrite phase).
//!
//! # ADD COLUMN without rewriting
//!
//! A column is appended to the schema. Rows already stored keep their `natts`
//! (`t_infomask2`), so the new attribute lies past their end, and the tuple reader gives it
//! the column's *missing value* ([`crate::heap::tuple::deform_tuple_with`]): NULL, or the
//! non-volatile `DEFAULT` the column was added with, evaluated once by the caller and kept in
//! the table's `pg_class` row (`relmissing`, PostgreSQL 11's `attmissingval`). No row is
//! rewritten, whatever the table's size. Rows written afterwards carry the column like any
//! other; an UPDATE of an old row writes a new version that holds the missing value
//! explicitly.
//!
//! ```text
//!   before:  schema (id int4, v text)          row A: natts 2 (1, 'a')
//!   ALTER TABLE t ADD COLUMN n int4 DEFAULT 7   -> relmissing = (NULL, NULL, 7)
//!   after:   schema (id, v, n)                 row A: natts 2, reads (1, 'a', 7)
//!            INSERT (2, 'b', 9)                row B: natts 3, reads (2, 'b', 9)
//! ```
//!
//! A missing value stays for the life of the column: it is what every row older than the
//! column reads, so a later `SET DEFAULT` (the server's own catalog) does not change it, as
//! in PostgreSQL. A volatile default would need a value per row, that is a rewrite; callers
//! refuse it.
//!
//! NOT NULL without a default is refused when the table has a row
//! (`column "c" of relation "t" contains null values`); SET NOT NULL reads every row visible
//! to a new snapshot and refuses the same way if one holds NULL.
//!
//! # One transaction, one publication
//!
//! Every change is made as the storage-parameter changes of [`super::ddl`] are: under
//! AccessExclusive on the table (taken before the catalog's `ddl_lock`), the table's
//! `pg_class` row (and, for RENAME COLUMN, the rows of the indexes on that column, whose key
//! schema names it) is deleted and inserted again by one transaction. A crash before its
//! commit record leaves the old definition, after it the new one: the catalog is read back
//! from committed rows at startup, missing values included, so never a mix. Stored rows are
//! untouched either way.
//!
//! After the commit a new [`TableEntry`] is published on the same storage
//! ([`TableEntry::with_new_definition`], [`crate::catalog::Catalog::replace`]), and the old
//! one is marked superseded as TRUNCATE does: a [`super::Table`] handle taken before finds
//! the new definition at its next use ([`Database::current_entry`], `Transaction::current`).
//! Nobody reads or writes the table while the old entry is replaced (every reader and writer
//! holds a lock AccessExclusive conflicts with).
//!
//! # Logical decoding
//!
//! The new `pg_class` row is in the WAL, so a decoder learns the new columns (and missing
//! values, and name) at that point and pgoutput sends a new Relation message before the
//! next change of the table. A transaction that changed the table before the ALTER committed
//! before it (the lock), so its changes are decoded with the old columns. See
//! [`crate::decode::logical`] for what a decoder that starts later sees.
//!
//! # Not done
//!
//! DROP COLUMN (PostgreSQL keeps a dropped attribute, `attisdropped`, that every reader of
//! the schema must skip) and ALTER COLUMN TYPE (a rewrite) are not built.

use std::sync::Arc;

use super::ddl::{lock_table, new_btree, pg_class};
use super::Database;
use crate::catalog::{self, ClassRow, IndexDef, TableEntry};
use crate::error::{Error, Result};
use crate::heap::tuple::{encode_missing, Column, Schema, Value, MAX_HEAP_ATTRIBUTES};
use crate::heap::{self, Relation};
use crate::lmgr::LockMode;
use crate::types::{BlockNumber, Fork};

/// One change of a table's definition (see the module doc).
#[derive(Clone, Debug, PartialEq)]
pub enum AlterTable {
    /// `ADD COLUMN`: `column` appended; rows stored before read `missing` for it (NULL: no
    /// default). `if_not_exists`: a column of that name already there is no error
    /// ([`Altered::Skipped`]).
    AddColumn { column: Column, missing: Value, if_not_exists: bool },
    /// `RENAME COLUMN from TO to`.
    RenameColumn { from: String, to: String },
    /// `RENAME TO to`.
    RenameTable { to: String },
    /// `ALTER COLUMN column SET NOT NULL` (`not_null`) or `DROP NOT NULL`.
    SetNotNull { column: String, not_null: bool },
}

/// What [`Database::alter_table`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Altered {
    Done,
    /// Nothing to do: `ADD COLUMN IF NOT EXISTS` of a column that exists (PostgreSQL's
    /// NOTICE `column "c" of relation "t" already exists, skipping`).
    Skipped,
}

impl Database {
    /// ALTER TABLE `name` with one definition change, in a transaction of its own (see the
    /// module doc). Errors use PostgreSQL's messages: `column "c" of relation "t" already
    /// exists` ([`Error::AlreadyExists`]), `column "c" of relation "t" does not exist`
    /// (RENAME COLUMN: `column "c" does not exist`; [`Error::NotFound`]), `column "c" of relation "t" contains null values` and
    /// `column "c" is in a primary key` ([`Error::InvalidInput`]).
    pub fn alter_table(&self, name: &str, change: &AlterTable) -> Result<Altered> {
        let inner = &self.inner;
        let not_found = || Error::NotFound(format!("relation \"{name}\" does not exist"));
        let (_lock, entry) = lock_table(inner, name, LockMode::AccessExclusive, not_found)?;
        let _ddl = inner.catalog.ddl_lock.lock();
        if catalog::is_system_catalog(name) {
            return Err(Error::invalid(format!("permission denied: \"{name}\" is a system catalog")));
        }
        let _maint = entry.maintenance_lock.lock();
        let pg_class = pg_class(self)?;
        let old_tid = *entry.row.lock();
        let mut tx = self.begin()?;
        let old = tx.fetch_raw(&pg_class.rel, old_tid)?.ok_or_else(|| {
            Error::corrupted(pg_class.rel.oid, old_tid.block, format!("pg_class row of \"{name}\" not found"))
        })?;
        let mut row = ClassRow::from_values(&old, old_tid)?;
        // Index rows to write again (RENAME COLUMN), with their new key schema.
        let mut index_rows: Vec<(Arc<IndexDef>, ClassRow)> = Vec::new();
        match change {
            AlterTable::AddColumn { column, missing, if_not_exists } => {
                if row.schema.columns.iter().any(|c| c.name == column.name) {
                    if *if_not_exists {
                        return Ok(Altered::Skipped);
                    }
                    return Err(column_exists(&column.name, name));
                }
                add_column(self, &entry, &mut row, column, missing)?;
            }
            AlterTable::RenameColumn { from, to } => {
                // PostgreSQL's renameatt words it without the relation.
                let p = position(&row.schema, from, name)
                    .map_err(|_| Error::NotFound(format!("column \"{from}\" does not exist")))?;
                if row.schema.columns.iter().any(|c| &c.name == to) {
                    return Err(column_exists(to, name));
                }
                catalog::validate_name(to).map_err(|_| Error::invalid(format!("invalid column name \"{to}\"")))?;
                row.schema.columns[p].name = to.clone();
                for d in entry.indexes.read().iter().filter(|d| d.meta.columns.contains(&(p as u16))) {
                    let tid = *d.row.lock();
                    let vals = tx.fetch_raw(&pg_class.rel, tid)?.ok_or_else(|| {
                        Error::corrupted(
                            pg_class.rel.oid,
                            tid.block,
                            format!("pg_class row of \"{}\" not found", d.name),
                        )
                    })?;
                    let mut ix = ClassRow::from_values(&vals, tid)?;
                    for (k, &c) in ix.schema.columns.iter_mut().zip(&d.meta.columns) {
                        k.name = row.schema.columns.get(usize::from(c)).map_or(k.name.clone(), |c| c.name.clone());
                    }
                    index_rows.push((d.clone(), ix));
                }
            }
            AlterTable::RenameTable { to } => {
                catalog::validate_name(to)?;
                if inner.catalog.name_taken(to) {
                    return Err(Error::AlreadyExists(format!("relation \"{to}\" already exists")));
                }
                row.relname = to.clone();
            }
            AlterTable::SetNotNull { column, not_null } => {
                let p = position(&row.schema, column, name)?;
                if *not_null {
                    let nulls = any_row(self, &entry.rel, |vals| vals.get(p).is_none_or(|v| *v == Value::Null))?;
                    if nulls {
                        return Err(contains_nulls(column, name));
                    }
                } else if entry.indexes.read().iter().any(|d| d.meta.primary && d.meta.columns.contains(&(p as u16))) {
                    return Err(Error::invalid(format!("column \"{column}\" is in a primary key")));
                }
                row.schema.columns[p].nullable = !*not_null;
            }
        }
        // Written again: the table's row, then its indexes'.
        if !tx.delete_raw(&pg_class.rel, old_tid)? {
            return Err(Error::invalid(format!("table \"{name}\" is being changed by another transaction")));
        }
        let tid = tx.insert_raw(&pg_class.rel, &row.to_values())?;
        let mut new_index_tids = Vec::with_capacity(index_rows.len());
        for (d, ix) in &index_rows {
            if !tx.delete_raw(&pg_class.rel, *d.row.lock())? {
                return Err(Error::invalid(format!("index \"{}\" is being changed by another transaction", d.name)));
            }
            new_index_tids.push(tx.insert_raw(&pg_class.rel, &ix.to_values())?);
        }
        tx.commit()?;
        let rel = Relation::new(row.oid, &row.relname, row.relfilenode, row.schema.clone(), row.fillfactor)
            .with_missing(row.missing.clone());
        let new = Arc::new(entry.with_new_definition(Arc::new(rel), tid));
        if !index_rows.is_empty() {
            let mut defs = new.indexes.write();
            for ((d, ix), tid) in index_rows.iter().zip(new_index_tids) {
                let btree = new_btree(d.oid, d.btree.relfilenode(), &d.name, &ix.schema, d.meta.unique);
                let def = Arc::new(IndexDef {
                    oid: d.oid,
                    name: d.name.clone(),
                    meta: d.meta.clone(),
                    row: parking_lot::Mutex::new(tid),
                    created_by: d.created_by,
                    btree: Arc::new(btree),
                    dropped: parking_lot::RwLock::new(false),
                });
                if let Some(slot) = defs.iter_mut().find(|x| x.oid == d.oid) {
                    *slot = def;
                }
            }
        }
        inner.catalog.replace(&entry, &new, inner.xact.next_full_xid());
        Ok(Altered::Done)
    }
}

/// ADD COLUMN's checks and its change to the table's row.
fn add_column(db: &Database, entry: &TableEntry, row: &mut ClassRow, column: &Column, missing: &Value) -> Result<()> {
    let table = &row.relname;
    catalog::validate_name(&column.name)
        .map_err(|_| Error::invalid(format!("invalid column name \"{}\"", column.name)))?;
    if row.schema.columns.len() >= MAX_HEAP_ATTRIBUTES {
        return Err(Error::invalid(format!("tables can have at most {MAX_HEAP_ATTRIBUTES} columns")));
    }
    if missing.ty().is_some_and(|t| t != column.ty) {
        return Err(Error::invalid(format!(
            "column \"{}\" is of type {} but the default is {}",
            column.name,
            column.ty.name(),
            missing.ty().map_or("null", |t| t.name())
        )));
    }
    if !column.nullable && *missing == Value::Null && any_row(db, &entry.rel, |_| true)? {
        return Err(contains_nulls(&column.name, table));
    }
    let n = row.schema.columns.len();
    if *missing != Value::Null || !row.missing.is_empty() {
        row.missing.resize(n, Value::Null);
        row.missing.push(missing.clone());
    }
    row.schema.columns.push(column.clone());
    // A missing value must fit in the catalog row (there is no TOAST).
    encode_missing(&row.missing)?;
    Ok(())
}

fn position(schema: &Schema, column: &str, table: &str) -> Result<usize> {
    schema
        .columns
        .iter()
        .position(|c| c.name == column)
        .ok_or_else(|| Error::NotFound(format!("column \"{column}\" of relation \"{table}\" does not exist")))
}

fn column_exists(column: &str, table: &str) -> Error {
    Error::AlreadyExists(format!("column \"{column}\" of relation \"{table}\" already exists"))
}

fn contains_nulls(column: &str, table: &str) -> Error {
    Error::invalid(format!("column \"{column}\" of relation \"{table}\" contains null values"))
}

/// Whether a row a new snapshot sees satisfies `pred` (the caller holds AccessExclusive, so no
/// transaction is changing the table). Reads through a ring of buffers.
fn any_row(db: &Database, rel: &Relation, mut pred: impl FnMut(&[Value]) -> bool) -> Result<bool> {
    let inner = &db.inner;
    let env = inner.env();
    let snap = inner.xact.get_snapshot(None);
    let oldest = inner.xact.oldest_xmin();
    let nblocks = inner.pool.smgr().nblocks(rel.relfilenode, Fork::Main)?;
    let mut ring = crate::buffer::Ring::new(256 << 10);
    for b in 0..nblocks {
        let rows = heap::scan_page(&env, rel, &snap, u32::MAX, BlockNumber(b), oldest, &mut ring)?;
        if rows.iter().any(|(_, vals)| pred(vals)) {
            return Ok(true);
        }
    }
    Ok(false)
}
