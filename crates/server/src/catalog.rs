//! The server's catalog: the SQL type of every column, and its `DEFAULT`, which the engine
//! does not know.
//!
//! The engine's catalog (`pg_class` rows written through its own transactions) holds each
//! table's name, options, columns with their *storage* types and nullability, and its indexes.
//! SQL needs a little more: `int2` vs `int4`, `numeric(p,s)`'s scale, `varchar(n)`, `char(n)`
//! and `date` share storage types; a column's `DEFAULT` expression is SQL's too. That
//! remainder is kept here, in the file `DIR/server_catalog` (one line per column:
//! `table<TAB>column<TAB>type`, then `<TAB>` and the default's SQL text, with backslash,
//! tab and newline escaped, when the column has one), replaced whole
//! with write, fsync, rename and an fsync of the directory, so a crash leaves the old or the
//! new file.
//!
//! The file is written after the engine's DDL commits. A crash in between leaves a table the
//! file does not describe; its columns then read as the SQL types their storage types name
//! (`Int4` as `integer`, `Text` as `text`, ...), which loses only the refinements above.
//! Entries for tables the engine no longer has are ignored and dropped at the next write.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use settledb::{Database, Table};
use sqlparser::ast::Expr;

use crate::error::SqlError;
use crate::types::SqlType;

/// A column as SQL sees it.
#[derive(Clone, Debug)]
pub struct ColumnDef {
    pub name: String,
    pub ty: SqlType,
    pub nullable: bool,
}

/// The SQL column types of every table, by table name.
pub struct SqlCatalog {
    path: PathBuf,
    types: Arc<RwLock<HashMap<String, TableSql>>>,
    /// Bumped at every change of `types`, under its write lock ([`SqlCatalog::generation`]).
    generation: AtomicU64,
}

/// The catalog's column types as the engine's output plugins ask for them
/// ([`SqlCatalog::column_types`]).
#[derive(Debug)]
pub struct PluginColumnTypes(Arc<RwLock<HashMap<String, TableSql>>>);

impl settledb::decode::sqltypes::ColumnTypes for PluginColumnTypes {
    /// The catalog's types when they describe the relation as the decoder has it (as many
    /// columns, the same storage types); else `None`, and the plugin shows storage types.
    fn columns(&self, rel: &settledb::decode::logical::RelInfo) -> Option<Vec<settledb::decode::sqltypes::SqlColumn>> {
        let g = self.0.read();
        let t = g.get(&rel.name)?;
        let matches = t.types.len() == rel.schema.columns.len()
            && t.types.iter().zip(&rel.schema.columns).all(|(s, c)| s.storage() == c.ty);
        matches.then(|| t.types.iter().map(|ty| ty.sql_column()).collect())
    }
}

/// One table's columns as SQL sees them: types, and defaults (SQL text), by position.
#[derive(Clone, Debug, Default)]
pub struct TableSql {
    pub types: Vec<SqlType>,
    pub defaults: Vec<Option<String>>,
    /// `defaults` parsed ([`TableSql::parse_defaults`]); `None` when there are none.
    pub parsed: Option<Arc<Vec<Option<Expr>>>>,
}

impl TableSql {
    /// Parses `defaults` into `parsed` (once, when the catalog is read or a table created).
    fn parse_defaults(&mut self) -> Result<(), SqlError> {
        if self.defaults.iter().all(Option::is_none) {
            self.parsed = None;
            return Ok(());
        }
        let dialect = sqlparser::dialect::PostgreSqlDialect {};
        let parsed = self
            .defaults
            .iter()
            .map(|d| {
                d.as_ref()
                    .map(|text| {
                        sqlparser::parser::Parser::new(&dialect)
                            .try_with_sql(text)
                            .and_then(|mut p| p.parse_expr())
                            .map_err(|e| SqlError::new("XX001", format!("the default \"{text}\" does not parse: {e}")))
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.parsed = Some(Arc::new(parsed));
        Ok(())
    }
}

/// Backslash, tab and newline escaped, so a value fits one tab-separated field of a line
/// (this file's and the constraints file's).
pub(crate) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n")
}

/// [`escape`] undone.
pub(crate) fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

impl SqlCatalog {
    /// Reads `DIR/server_catalog` (absent: empty).
    pub fn open(dir: &Path) -> Result<SqlCatalog, SqlError> {
        let path = dir.join("server_catalog");
        let mut types: HashMap<String, TableSql> = HashMap::new();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for line in text.lines().filter(|l| !l.is_empty()) {
                    let mut f = line.split('\t');
                    let (Some(t), Some(_col), Some(ty), default) = (f.next(), f.next(), f.next(), f.next()) else {
                        return Err(SqlError::new("XX001", format!("malformed line in {}: {line:?}", path.display())));
                    };
                    let ty = SqlType::decode(ty).ok_or_else(|| {
                        SqlError::new("XX001", format!("unknown type in {}: {line:?}", path.display()))
                    })?;
                    let entry = types.entry(t.to_string()).or_default();
                    entry.types.push(ty);
                    entry.defaults.push(default.map(unescape));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SqlError::new("58030", format!("could not read {}: {e}", path.display()))),
        }
        for (table, t) in &mut types {
            t.parse_defaults()
                .map_err(|e| SqlError::new("XX001", format!("{} (table {table} in {})", e.message, path.display())))?;
        }
        Ok(SqlCatalog { path, types: Arc::new(RwLock::new(types)), generation: AtomicU64::new(0) })
    }

    /// Changes whenever a table's SQL types or defaults change: with
    /// `Database::catalog_generation`, what the relation cache ([`crate::relcache`]) checks.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The column types for the engine's output plugins (`Database::set_column_types`).
    pub fn column_types(&self) -> Arc<PluginColumnTypes> {
        Arc::new(PluginColumnTypes(self.types.clone()))
    }

    /// The SQL columns of `table`.
    pub fn columns(&self, table: &Table) -> Vec<ColumnDef> {
        let types = self.types.read();
        let known = types.get(table.name()).map(|t| &t.types).filter(|t| {
            t.len() == table.schema().columns.len()
                && t.iter().zip(&table.schema().columns).all(|(s, c)| s.storage() == c.ty)
        });
        table
            .schema()
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| ColumnDef {
                name: c.name.clone(),
                ty: known.map_or(SqlType::from_storage(c.ty), |t| t[i]),
                nullable: c.nullable,
            })
            .collect()
    }

    /// The `DEFAULT` expressions of `table`'s columns, by position, parsed once; `None` when
    /// no column has one (INSERT asks once per statement).
    pub fn defaults(&self, table: &Table) -> Option<Arc<Vec<Option<Expr>>>> {
        let g = self.types.read();
        g.get(table.name()).and_then(|t| t.parsed.clone()).filter(|d| d.len() == table.schema().columns.len())
    }

    /// Records a new table's column types and defaults and rewrites the file.
    pub fn set(&self, db: &Database, table: &str, mut sql: TableSql) -> Result<(), SqlError> {
        sql.parse_defaults()?;
        let mut g = self.types.write();
        g.insert(table.to_string(), sql);
        self.write(db, &mut g)
    }

    /// Changes `table`'s entry with `f` and rewrites the file (ALTER TABLE). A table the file
    /// does not describe yet starts from `old_types`, its columns' types before the change
    /// ([`SqlCatalog::columns`]), without defaults.
    pub fn update(
        &self,
        db: &Database,
        table: &str,
        old_types: Vec<SqlType>,
        f: impl FnOnce(&mut TableSql),
    ) -> Result<(), SqlError> {
        let mut g = self.types.write();
        let entry = g.entry(table.to_string()).or_default();
        if entry.types.len() != old_types.len() {
            *entry = TableSql { defaults: vec![None; old_types.len()], types: old_types, parsed: None };
        }
        f(entry);
        entry.parse_defaults()?;
        self.write(db, &mut g)
    }

    /// ALTER TABLE ... ADD COLUMN: the new column's type and default, after the others'.
    pub fn add_column(
        &self,
        db: &Database,
        table: &str,
        old_types: Vec<SqlType>,
        ty: SqlType,
        default: Option<String>,
    ) -> Result<(), SqlError> {
        self.update(db, table, old_types, |t| {
            t.types.push(ty);
            t.defaults.push(default);
        })
    }

    /// ALTER TABLE ... ALTER COLUMN ... SET / DROP DEFAULT (`None`).
    pub fn set_default(
        &self,
        db: &Database,
        table: &str,
        old_types: Vec<SqlType>,
        column: usize,
        default: Option<String>,
    ) -> Result<(), SqlError> {
        self.update(db, table, old_types, |t| {
            if let Some(d) = t.defaults.get_mut(column) {
                *d = default;
            }
        })
    }

    /// ALTER TABLE ... RENAME TO: the entry follows the table.
    pub fn rename(&self, db: &Database, from: &str, to: &str) -> Result<(), SqlError> {
        let mut g = self.types.write();
        if let Some(t) = g.remove(from) {
            g.insert(to.to_string(), t);
        }
        self.write(db, &mut g)
    }

    /// Forgets a dropped table.
    pub fn remove(&self, db: &Database, table: &str) -> Result<(), SqlError> {
        let mut g = self.types.write();
        if g.remove(table).is_some() {
            self.write(db, &mut g)?;
        }
        Ok(())
    }

    fn write(&self, db: &Database, map: &mut HashMap<String, TableSql>) -> Result<(), SqlError> {
        // Every change of the map ends here, its write lock still held.
        self.generation.fetch_add(1, Ordering::AcqRel);
        let live: std::collections::HashSet<String> = db.tables().iter().map(|t| t.name().to_string()).collect();
        map.retain(|k, _| live.contains(k));
        let mut text = String::new();
        let mut names: Vec<&String> = map.keys().collect();
        names.sort();
        for name in names {
            let Ok(table) = db.table(name) else { continue };
            let t = &map[name];
            for (i, (c, ty)) in table.schema().columns.iter().zip(&t.types).enumerate() {
                text.push_str(&format!("{name}\t{}\t{}", c.name, ty.encode()));
                if let Some(Some(d)) = t.defaults.get(i) {
                    text.push('\t');
                    text.push_str(&escape(d));
                }
                text.push('\n');
            }
        }
        replace_file(&self.path, &text)
    }
}

/// Replaces `path` with `text` so that a crash leaves the old file or the new one: write a
/// sibling, fsync it, rename it over, fsync the directory. The server's own small files (this
/// catalog, [`crate::sequence`]'s, the roles' verifiers) are written so, readable by their
/// owner only (mode 0600, as PostgreSQL's files).
pub fn replace_file(path: &Path, text: &str) -> Result<(), SqlError> {
    let io = |e: std::io::Error| SqlError::new("58030", format!("could not write {}: {e}", path.display()));
    let tmp = path.with_extension("tmp");
    {
        // A sibling left by a crash may have another mode: the new one is created afresh.
        let _ = std::fs::remove_file(&tmp);
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        let mut f = o.open(&tmp).map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaced_files_are_the_owners_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        // A stale sibling readable by everyone does not lend the new file its mode.
        std::fs::write(path.with_extension("tmp"), "old").unwrap();
        std::fs::set_permissions(path.with_extension("tmp"), std::fs::Permissions::from_mode(0o644)).unwrap();
        super::replace_file(&path, "secret").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "secret");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
