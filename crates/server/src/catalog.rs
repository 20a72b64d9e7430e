//! The server's catalog: the SQL type of every column, which the engine does not know.
//!
//! The engine's catalog (`pg_class` rows written through its own transactions) holds each
//! table's name, options, columns with their *storage* types and nullability, and its indexes.
//! SQL needs a little more: `int2` vs `int4`, `numeric(p,s)`'s scale, `varchar(n)`, `char(n)`
//! and `date` share storage types. That remainder is kept here, in the file
//! `DIR/server_catalog` (one line per column: `table<TAB>column<TAB>type`), replaced whole
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

use parking_lot::RwLock;
use settledb::{Database, Table};

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
    types: RwLock<HashMap<String, Vec<SqlType>>>,
}

impl SqlCatalog {
    /// Reads `DIR/server_catalog` (absent: empty).
    pub fn open(dir: &Path) -> Result<SqlCatalog, SqlError> {
        let path = dir.join("server_catalog");
        let mut types: HashMap<String, Vec<SqlType>> = HashMap::new();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for line in text.lines().filter(|l| !l.is_empty()) {
                    let mut f = line.split('\t');
                    let (Some(t), Some(_col), Some(ty)) = (f.next(), f.next(), f.next()) else {
                        return Err(SqlError::new("XX001", format!("malformed line in {}: {line:?}", path.display())));
                    };
                    let ty = SqlType::decode(ty).ok_or_else(|| {
                        SqlError::new("XX001", format!("unknown type in {}: {line:?}", path.display()))
                    })?;
                    types.entry(t.to_string()).or_default().push(ty);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SqlError::new("58030", format!("could not read {}: {e}", path.display()))),
        }
        Ok(SqlCatalog { path, types: RwLock::new(types) })
    }

    /// The SQL columns of `table`.
    pub fn columns(&self, table: &Table) -> Vec<ColumnDef> {
        let types = self.types.read();
        let known = types.get(table.name()).filter(|t| {
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

    /// Records a new table's column types and rewrites the file.
    pub fn set(&self, db: &Database, table: &str, types: Vec<SqlType>) -> Result<(), SqlError> {
        let mut g = self.types.write();
        g.insert(table.to_string(), types);
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

    fn write(&self, db: &Database, map: &mut HashMap<String, Vec<SqlType>>) -> Result<(), SqlError> {
        let live: std::collections::HashSet<String> = db.tables().iter().map(|t| t.name().to_string()).collect();
        map.retain(|k, _| live.contains(k));
        let mut text = String::new();
        let mut names: Vec<&String> = map.keys().collect();
        names.sort();
        for name in names {
            let Ok(table) = db.table(name) else { continue };
            for (c, ty) in table.schema().columns.iter().zip(&map[name]) {
                text.push_str(&format!("{name}\t{}\t{}\n", c.name, ty.encode()));
            }
        }
        let io = |e: std::io::Error| SqlError::new("58030", format!("could not write {}: {e}", self.path.display()));
        let tmp = self.path.with_extension("tmp");
        {
            let mut f = std::fs::File::create(&tmp).map_err(io)?;
            f.write_all(text.as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        }
        Ok(())
    }
}
