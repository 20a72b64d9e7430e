//! ALTER TABLE that changes columns: `ADD [COLUMN] [IF NOT EXISTS]`, `RENAME [COLUMN] a TO b`,
//! `RENAME TO u`, `ALTER [COLUMN] c SET DEFAULT e | DROP DEFAULT | SET NOT NULL | DROP NOT
//! NULL`, on the engine's `Database::alter_table` (see its `db/alter.rs`).
//!
//! # ADD COLUMN and its default
//!
//! As in PostgreSQL 11 and later, a column added with a non-volatile `DEFAULT` costs no
//! rewrite: the default is evaluated once, here, in a transaction of the session's own (so
//! `now()` is the statement's time, as PostgreSQL's STABLE functions are), and handed to the
//! engine as the column's *missing value*, which every row stored before reads. The default's
//! SQL text goes to the server's catalog ([`crate::catalog`]) for later INSERTs. A volatile
//! default (`nextval`, `random()`, `clock_timestamp()`, `gen_random_uuid()`, `timeofday()`, a
//! `serial` type) would need one value per row, that is a rewrite, and is refused with 0A000.
//! `NOT NULL` without a default on a table with rows is PostgreSQL's 23502 (`column "c" of
//! relation "t" contains null values`).
//!
//! `SET DEFAULT` and `DROP DEFAULT` change only the server's catalog: they govern later
//! INSERTs, never what stored rows read (the missing value stays, as in PostgreSQL).
//!
//! # Order and atomicity
//!
//! Several subcommands in one statement are applied in order, each in an engine transaction
//! of its own (PostgreSQL applies them as one): a later one failing leaves the earlier ones
//! done. Other subcommands (ADD PRIMARY KEY / UNIQUE, SET (...)) go to [`crate::ddl`].
//!
//! # Not built
//!
//! `DROP COLUMN` (PostgreSQL keeps the attribute as dropped, and every reader of the schema,
//! COPY, `SELECT *`, Describe and the output plugins, would have to skip it) and `ALTER COLUMN
//! TYPE` (a rewrite) are refused with 0A000; so are constraints inside ADD COLUMN other than
//! NULL / NOT NULL / DEFAULT. A `serial` column's sequence stays owned by the table's old name
//! after RENAME TO (so DROP TABLE under the new name leaves it).

use settledb::db::{AlterTable, Altered};
use settledb::{Column, Value};
use sqlparser::ast::{AlterColumnOperation, AlterTableOperation, ColumnOption, Expr, RenameTableNameKind};

use crate::ddl::object_name;
use crate::error::SqlError;
use crate::expr::{eval, ident_name, sql_type, Scope};
use crate::session::{Notice, Outcome, Session};
use crate::types::SqlType;

/// Whether the statement has a subcommand this module runs (the session sends it here, the
/// others to [`crate::ddl`]).
pub fn changes_columns(at: &sqlparser::ast::AlterTable) -> bool {
    at.operations.iter().any(|op| {
        matches!(
            op,
            AlterTableOperation::AddColumn { .. }
                | AlterTableOperation::RenameColumn { .. }
                | AlterTableOperation::RenameTable { .. }
                | AlterTableOperation::AlterColumn { .. }
                | AlterTableOperation::DropColumn { .. }
        )
    })
}

/// Runs `ALTER TABLE` (outside a transaction block; the session checked).
pub fn execute(
    session: &mut Session<'_>,
    at: &sqlparser::ast::AlterTable,
    interrupt: &settledb::Interrupt,
    notices: &mut Vec<Notice>,
) -> Result<Outcome, SqlError> {
    let sh = session.sh;
    let mut table = object_name(&at.name);
    if sh.db.table(&table).is_err() {
        if at.if_exists {
            notices.push(Notice {
                detail: None,
                severity: "NOTICE",
                code: "00000",
                message: format!("relation \"{table}\" does not exist, skipping"),
            });
            return Ok(Outcome::Command("ALTER TABLE".into()));
        }
        return Err(SqlError::new("42P01", format!("relation \"{table}\" does not exist")));
    }
    for op in &at.operations {
        match op {
            AlterTableOperation::AddColumn { if_not_exists, column_def, .. } => {
                add_column(session, &table, *if_not_exists, column_def, notices)?;
            }
            AlterTableOperation::RenameColumn { old_column_name, new_column_name } => {
                let (from, to) = (ident_name(old_column_name), ident_name(new_column_name));
                alter(session, &table, &AlterTable::RenameColumn { from, to })?;
                let types = sh.catalog.columns(&sh.db.table(&table)?).into_iter().map(|c| c.ty).collect();
                sh.catalog.update(&sh.db, &table, types, |_| {})?;
            }
            AlterTableOperation::RenameTable {
                table_name: RenameTableNameKind::To(n) | RenameTableNameKind::As(n),
            } => {
                let to = object_name(n);
                if sh.sequences.exists(&to) {
                    return Err(SqlError::new("42P07", format!("relation \"{to}\" already exists")));
                }
                alter(session, &table, &AlterTable::RenameTable { to: to.clone() })?;
                sh.catalog.rename(&sh.db, &table, &to)?;
                table = to;
            }
            AlterTableOperation::AlterColumn { column_name, op } => {
                alter_column(session, &table, &ident_name(column_name), op)?;
            }
            AlterTableOperation::DropColumn { .. } => {
                return Err(SqlError::unsupported("ALTER TABLE ... DROP COLUMN"));
            }
            other => crate::ddl::alter(sh, &table, other, interrupt)?,
        }
    }
    Ok(Outcome::Command("ALTER TABLE".into()))
}

fn add_column(
    session: &mut Session<'_>,
    table: &str,
    if_not_exists: bool,
    def: &sqlparser::ast::ColumnDef,
    notices: &mut Vec<Notice>,
) -> Result<(), SqlError> {
    let sh = session.sh;
    let name = ident_name(&def.name);
    let lowered = def.data_type.to_string().to_ascii_lowercase();
    if matches!(lowered.as_str(), "smallserial" | "serial" | "bigserial" | "serial2" | "serial4" | "serial8") {
        return Err(volatile(&name));
    }
    let ty = sql_type(&def.data_type)?;
    let mut nullable = true;
    let mut default: Option<Expr> = None;
    for o in &def.options {
        match &o.option {
            ColumnOption::Null => nullable = true,
            ColumnOption::NotNull => nullable = false,
            ColumnOption::Default(Expr::Value(v)) if matches!(v.value, sqlparser::ast::Value::Null) => default = None,
            ColumnOption::Default(e) => default = Some(e.clone()),
            other => return Err(SqlError::unsupported(format!("the column option \"{other}\" in ADD COLUMN"))),
        }
    }
    let before = sh.db.table(table).map_err(SqlError::from)?;
    if before.schema().columns.iter().any(|c| c.name == name) {
        if if_not_exists {
            notices.push(column_exists_skipping(&name, table));
            return Ok(());
        }
        return Err(SqlError::new("42701", format!("column \"{name}\" of relation \"{table}\" already exists")));
    }
    let missing = match &default {
        Some(e) if is_volatile(e) => return Err(volatile(&name)),
        Some(e) => evaluate(session, e, ty, &name)?,
        None => Value::Null,
    };
    let column = Column { name: name.clone(), ty: ty.storage(), nullable };
    let old_types: Vec<SqlType> = sh.catalog.columns(&before).into_iter().map(|c| c.ty).collect();
    match alter(session, table, &AlterTable::AddColumn { column, missing, if_not_exists })? {
        Altered::Skipped => notices.push(column_exists_skipping(&name, table)),
        Altered::Done => {
            let text = default.map(|e| e.to_string());
            sh.catalog.add_column(&sh.db, table, old_types, ty, text)?;
        }
    }
    Ok(())
}

fn alter_column(
    session: &mut Session<'_>,
    table: &str,
    column: &str,
    op: &AlterColumnOperation,
) -> Result<(), SqlError> {
    let sh = session.sh;
    let t = sh.db.table(table).map_err(SqlError::from)?;
    let Some(pos) = t.schema().columns.iter().position(|c| c.name == column) else {
        return Err(SqlError::new("42703", format!("column \"{column}\" of relation \"{table}\" does not exist")));
    };
    let old_types: Vec<SqlType> = sh.catalog.columns(&t).into_iter().map(|c| c.ty).collect();
    match op {
        AlterColumnOperation::SetNotNull | AlterColumnOperation::DropNotNull => {
            let not_null = matches!(op, AlterColumnOperation::SetNotNull);
            alter(session, table, &AlterTable::SetNotNull { column: column.to_string(), not_null })?;
            Ok(())
        }
        AlterColumnOperation::SetDefault { value } => {
            let text = match value {
                Expr::Value(v) if matches!(v.value, sqlparser::ast::Value::Null) => None,
                e => Some(e.to_string()),
            };
            sh.catalog.set_default(&sh.db, table, old_types, pos, text)
        }
        AlterColumnOperation::DropDefault => sh.catalog.set_default(&sh.db, table, old_types, pos, None),
        other => Err(SqlError::unsupported(format!("ALTER TABLE ... ALTER COLUMN ... {other}"))),
    }
}

/// The engine's ALTER, its errors given PostgreSQL's SQLSTATEs.
fn alter(session: &Session<'_>, table: &str, change: &AlterTable) -> Result<Altered, SqlError> {
    use settledb::Error as E;
    session.sh.db.alter_table(table, change).map_err(|e| match e {
        E::AlreadyExists(m) if m.starts_with("column") => SqlError::new("42701", m),
        E::NotFound(m) if m.starts_with("column") => SqlError::new("42703", m),
        E::InvalidInput(m) if m.ends_with("contains null values") => SqlError::new("23502", m),
        E::InvalidInput(m) if m.ends_with("is in a primary key") => SqlError::new("42P16", m),
        E::InvalidInput(m) if m.starts_with("invalid column name") || m.starts_with("invalid table name") => {
            SqlError::new("42602", m)
        }
        E::InvalidInput(m) if m.starts_with("tables can have at most") => SqlError::new("54011", m),
        e => SqlError::from(e),
    })
}

/// The default's value, computed once in a transaction of the session's own.
fn evaluate(session: &mut Session<'_>, e: &Expr, ty: SqlType, column: &str) -> Result<Value, SqlError> {
    let mut out = Value::Null;
    let mut notices = Vec::new();
    session.in_transaction(&[], &mut notices, |cx| {
        out = eval(e, &Scope::empty(), &[], cx, None)?.to_stored(ty, column)?;
        Ok(Outcome::Command(String::new()))
    })?;
    Ok(out)
}

/// Functions PostgreSQL marks VOLATILE that a default may call: such a default needs a value
/// per row.
const VOLATILE: [&str; 8] =
    ["nextval", "random", "clock_timestamp", "timeofday", "gen_random_uuid", "setseed", "random_normal", "setval"];

/// Whether `e` calls a volatile function: every name followed by `(`, outside string
/// literals, is compared with [`VOLATILE`].
fn is_volatile(e: &Expr) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    let mut word = String::new();
    let mut in_string = false;
    for c in text.chars() {
        if in_string {
            in_string = c != '\'';
            continue;
        }
        match c {
            '\'' => {
                in_string = true;
                word.clear();
            }
            c if c.is_ascii_alphanumeric() || c == '_' || c == '.' => word.push(c),
            '(' if VOLATILE.contains(&word.rsplit('.').next().unwrap_or_default()) => return true,
            _ => word.clear(),
        }
    }
    false
}

fn volatile(column: &str) -> SqlError {
    SqlError::unsupported(format!(
        "ADD COLUMN \"{column}\" with a volatile default (it would rewrite the table); add the column without \
         it, then UPDATE"
    ))
}

fn column_exists_skipping(column: &str, table: &str) -> Notice {
    Notice {
        detail: None,
        severity: "NOTICE",
        code: "42701",
        message: format!("column \"{column}\" of relation \"{table}\" already exists, skipping"),
    }
}
