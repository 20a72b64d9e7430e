//! The session's relation cache, as PostgreSQL's relcache: for each table a statement names,
//! the engine's handle, its columns as SQL sees them and its indexes with their key columns
//! as column positions, built at the first statement that names the table and reused by the
//! next ones.
//!
//! Without it every statement looked the table up by name in the engine's catalog, copied
//! its column list with every name (`SqlCatalog::columns`), copied its index list and each
//! index's column names, and matched those names against the columns again for each index
//! while planning: those functions alone held about 3% of the session threads' samples under
//! `pgbench -S -M prepared` (their allocations besides), some of it atomic updates of
//! reference counts that both sessions' threads share.
//!
//! # Validity
//!
//! An entry is built from two catalogs, the engine's (tables, definitions, indexes: TRUNCATE
//! replaces a table's entry and its indexes' storage) and the server's SQL column types
//! ([`crate::catalog::SqlCatalog`]). Each has a generation number that moves after every
//! change ([`settledb::Database::catalog_generation`], [`crate::catalog::SqlCatalog::generation`]).
//! The cache records both numbers as read *before* it reads either catalog, and empties itself
//! whenever either has moved since: an entry built while a change was under way carries the
//! number from before it and is dropped at the next look. So a cached entry is one that a
//! fresh build would give now (PostgreSQL's relcache reaches the same by invalidation
//! messages; here a change anywhere empties every session's cache, which DDL's rarity makes
//! cheap). What changes without DDL (constraints, which keep their own freshness check, and
//! statistics) is not cached.
//!
//! # Where it lives
//!
//! One per session thread (a thread-local): a session has its thread to itself
//! (`crate::wire`), so the reference counts of its entries are touched by no other core. A
//! cache of more than [`MAX_ENTRIES`] tables is emptied before it grows further.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use settledb::{Index, Table};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::Shared;

/// A session caches at most this many tables (a session touching more starts over).
pub const MAX_ENTRIES: usize = 4096;

/// One table as the planner and executor see it.
pub struct Rel {
    pub table: Table,
    pub cols: Arc<Vec<ColumnDef>>,
    /// Its indexes, in creation order.
    pub indexes: Arc<[IndexKeys]>,
}

/// An index and where its key columns are among the table's columns.
pub struct IndexKeys {
    pub index: Index,
    /// The positions of the key columns that name a column of the table, in key order.
    pub positions: Vec<usize>,
    /// Every key column names a column of the table (`positions` is the whole key).
    pub complete: bool,
    /// How many key columns the index has.
    pub key_columns: usize,
}

impl IndexKeys {
    /// The whole key's positions, or `None` when a key column names no column.
    pub fn key(&self) -> Option<&[usize]> {
        self.complete.then_some(&self.positions[..])
    }
}

struct Cache {
    engine: u64,
    sql: u64,
    rels: HashMap<String, Rel>,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache { engine: u64::MAX, sql: u64::MAX, rels: HashMap::new() });
}

/// The table `name` (42P01 when there is none), from the cache or built and cached. `f` gets
/// the entry; what it returns is the caller's.
pub fn with<R>(sh: &Shared, name: &str, f: impl FnOnce(&Rel) -> R) -> Result<R, SqlError> {
    // Both numbers first, then the catalogs (see "Validity").
    let engine = sh.db.catalog_generation();
    let sql = sh.catalog.generation();
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.engine != engine || c.sql != sql {
            c.rels.clear();
            c.engine = engine;
            c.sql = sql;
        }
        if let Some(r) = c.rels.get(name) {
            return Ok(f(r));
        }
        let rel = build(sh, name)?;
        let out = f(&rel);
        if c.rels.len() >= MAX_ENTRIES {
            c.rels.clear();
        }
        c.rels.insert(name.to_string(), rel);
        Ok(out)
    })
}

fn build(sh: &Shared, name: &str) -> Result<Rel, SqlError> {
    let table = sh.db.table(name).map_err(|_| SqlError::undefined_table(name))?;
    let cols = sh.catalog.columns(&table);
    let indexes = sh
        .db
        .indexes(&table)
        .into_iter()
        .map(|index| {
            let names = index.columns();
            let positions: Vec<usize> = names.iter().filter_map(|n| cols.iter().position(|c| &c.name == n)).collect();
            let complete = positions.len() == names.len();
            IndexKeys { index, positions, complete, key_columns: names.len() }
        })
        .collect();
    Ok(Rel { table, cols: Arc::new(cols), indexes })
}
