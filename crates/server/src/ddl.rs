//! DDL: CREATE/DROP TABLE, CREATE/DROP INDEX, ALTER TABLE ADD PRIMARY KEY / SET (...).
//!
//! Each maps onto one engine call, which runs in a transaction of its own (see the engine's
//! `db/ddl.rs`); the SQL column types then go to the server's catalog ([`crate::catalog`]).
//! Because engine DDL is not part of the session's transaction, DDL inside BEGIN is refused
//! (see [`crate::session`]). `UNIQUE` column constraints become unique indexes named
//! `<table>_<column>_key`, as PostgreSQL names them. A column's `DEFAULT` expression is
//! kept in the server's catalog and evaluated by INSERT for the columns it does not list (or
//! lists as `DEFAULT`). `CHECK` and foreign keys (in CREATE TABLE, ALTER TABLE ADD / DROP
//! CONSTRAINT) are [`crate::constraints`]'s. CREATE / DROP SEQUENCE go to
//! [`crate::sequence`].

use settledb::{Column, Schema, TableOptions};
use sqlparser::ast::{
    AlterTableOperation, ColumnOption, CreateIndex, CreateTable, CreateTableOptions, Expr, ObjectName, ObjectType,
    SqlOption, Statement, TableConstraint, Value,
};

use crate::error::SqlError;
use crate::expr::{ident_name, sql_type};
use crate::session::{Notice, Outcome};
use crate::settings::value_text;
use crate::Shared;

/// Runs a DDL statement; `interrupt` (the session's cancel and `statement_timeout`) can stop
/// CREATE INDEX and ADD PRIMARY KEY / UNIQUE while they wait for the table and while they
/// read it.
pub fn execute(
    sh: &Shared,
    s: &Statement,
    interrupt: &settledb::Interrupt,
    notices: &mut Vec<Notice>,
) -> Result<Outcome, SqlError> {
    match s {
        Statement::CreateTable(ct) => create_table(sh, ct, notices),
        Statement::Drop { object_type, if_exists, names, cascade, .. } => {
            drop(sh, *object_type, *if_exists, names, *cascade, notices)
        }
        Statement::CreateIndex(ci) => create_index(sh, ci, interrupt, notices),
        Statement::CreateSequence {
            if_not_exists, name, sequence_options, temporary: false, owned_by: None, ..
        } => {
            let name = object_name(name);
            if sh.db.table(&name).is_ok() || sh.db.index(&name).is_ok() {
                return Err(SqlError::new("42P07", format!("relation \"{name}\" already exists")));
            }
            if !sh.sequences.create(&name, sequence_options)? {
                if !if_not_exists {
                    return Err(SqlError::new("42P07", format!("relation \"{name}\" already exists")));
                }
                notices.push(Notice {
                    detail: None,
                    severity: "NOTICE",
                    code: "42P07",
                    message: format!("relation \"{name}\" already exists, skipping"),
                });
            }
            Ok(Outcome::Command("CREATE SEQUENCE".into()))
        }
        Statement::AlterTable(at) => {
            let table = object_name(&at.name);
            if at.if_exists && sh.db.table(&table).is_err() {
                notices.push(missing_relation_skipped(&table));
                return Ok(Outcome::Command("ALTER TABLE".into()));
            }
            for op in &at.operations {
                match op {
                    AlterTableOperation::DropConstraint { .. } => drop_constraint(sh, &table, op, notices)?,
                    op => alter(sh, &table, op, interrupt)?,
                }
            }
            Ok(Outcome::Command("ALTER TABLE".into()))
        }
        _ => Err(SqlError::unsupported(format!("\"{s}\""))),
    }
}

/// The last part of a possibly schema-qualified name, case-folded.
pub fn object_name(n: &ObjectName) -> String {
    n.0.last().and_then(|p| p.as_ident()).map(ident_name).unwrap_or_default()
}

fn create_table(sh: &Shared, ct: &CreateTable, notices: &mut Vec<Notice>) -> Result<Outcome, SqlError> {
    let name = object_name(&ct.name);
    if ct.query.is_some() || ct.like.is_some() {
        return Err(SqlError::unsupported("CREATE TABLE AS / LIKE"));
    }
    if sh.db.table(&name).is_ok() {
        if ct.if_not_exists {
            notices.push(Notice {
                detail: None,
                severity: "NOTICE",
                code: "42P07",
                message: format!("relation \"{name}\" already exists, skipping"),
            });
            return Ok(Outcome::Command("CREATE TABLE".into()));
        }
        return Err(SqlError::new("42P07", format!("relation \"{name}\" already exists")));
    }
    if sh.sequences.exists(&name) {
        return Err(SqlError::new("42P07", format!("relation \"{name}\" already exists")));
    }
    let mut columns = Vec::new();
    let mut types = Vec::new();
    let mut defaults = Vec::new();
    let mut pk: Option<Vec<String>> = None;
    let mut uniques: Vec<Vec<String>> = Vec::new();
    // `serial` columns: an integer column whose default is its own sequence's nextval, made
    // after the table (as PostgreSQL's `<table>_<column>_seq`) and dropped with it.
    let mut serials: Vec<(String, i64)> = Vec::new();
    let mut pending = crate::constraints::define::Pending::default();
    for c in &ct.columns {
        let cname = ident_name(&c.name);
        let serial = serial_type(&c.data_type);
        let ty = match serial {
            Some((ty, max)) => {
                let seq = format!("{name}_{cname}_seq");
                if sh.sequences.exists(&seq) || sh.db.table(&seq).is_ok() {
                    return Err(SqlError::new("42P07", format!("relation \"{seq}\" already exists")));
                }
                serials.push((seq, max));
                ty
            }
            None => sql_type(&c.data_type)?,
        };
        let mut nullable = serial.is_none();
        let mut default = serials.last().filter(|_| serial.is_some()).map(|(seq, _)| format!("nextval('{seq}')"));
        for o in &c.options {
            match &o.option {
                ColumnOption::Null => nullable = true,
                ColumnOption::NotNull => nullable = false,
                ColumnOption::Default(Expr::Value(v)) if matches!(v.value, Value::Null) => default = None,
                ColumnOption::Default(e) => default = Some(e.to_string()),
                ColumnOption::PrimaryKey(_) => {
                    set_pk(&mut pk, vec![cname.clone()])?;
                    nullable = false;
                }
                ColumnOption::Unique(_) => uniques.push(vec![cname.clone()]),
                ColumnOption::Check(check) => pending.check(o.name.as_ref(), check),
                ColumnOption::ForeignKey(fk) => pending.foreign_key(o.name.as_ref(), fk, Some(&c.name)),
                other => return Err(SqlError::unsupported(format!("the column option \"{other}\""))),
            }
        }
        columns.push(Column { name: cname, ty: ty.storage(), nullable });
        types.push(ty);
        defaults.push(default);
    }
    for con in &ct.constraints {
        match con {
            TableConstraint::PrimaryKey(p) => set_pk(&mut pk, index_columns(&p.columns)?)?,
            TableConstraint::Unique(u) => uniques.push(index_columns(&u.columns)?),
            TableConstraint::Check(check) => pending.check(None, check),
            TableConstraint::ForeignKey(fk) => pending.foreign_key(None, fk, None),
            other => return Err(SqlError::unsupported(format!("the table constraint \"{other}\""))),
        }
    }
    let named: Vec<(String, crate::types::SqlType)> =
        columns.iter().map(|c| c.name.clone()).zip(types.clone()).collect();
    crate::interval::refuse_key(pk.iter().flatten().chain(uniques.iter().flatten()), &named)?;
    let mut options = TableOptions { primary_key: pk, ..TableOptions::default() };
    let with = match &ct.table_options {
        CreateTableOptions::None => &[][..],
        CreateTableOptions::With(o) => &o[..],
        _ => return Err(SqlError::unsupported("table options other than WITH (...)")),
    };
    for (k, v) in storage_options(with)? {
        if k == "fillfactor" {
            options.fillfactor =
                v.parse().map_err(|_| SqlError::new("22023", format!("invalid value for fillfactor: \"{v}\"")))?;
        } else {
            options.options.set(&k, &v).map_err(SqlError::from)?;
        }
    }
    crate::constraints::define::refuse_unbuilt(&pending)?;
    sh.db.create_table(&name, Schema { columns }, options)?;
    sh.catalog.set(&sh.db, &name, crate::catalog::TableSql { types, defaults, parsed: None })?;
    for (seq, max) in serials {
        let max = sqlparser::ast::Expr::value(sqlparser::ast::Value::Number(max.to_string(), false));
        sh.sequences.create_owned(&seq, &[sqlparser::ast::SequenceOptions::MaxValue(Some(max))], Some(&name))?;
    }
    let mut unique_names = Vec::new();
    for cols in uniques {
        let refs: Vec<&str> = cols.iter().map(String::as_str).collect();
        unique_names.push(format!("{name}_{}_key", cols.join("_")));
        sh.db.create_index(&format!("{name}_{}_key", cols.join("_")), &name, &refs, true)?;
    }
    // A constraint refused now (an unknown referenced table, a type mismatch, ...) takes the
    // table with it, as PostgreSQL's CREATE TABLE makes nothing when it fails.
    if let Err(e) = crate::constraints::define::created(sh, &name, pending, &unique_names) {
        sh.db.drop_table(&name)?;
        sh.catalog.remove(&sh.db, &name)?;
        sh.sequences.drop_owned_by(&name)?;
        return Err(e);
    }
    Ok(Outcome::Command("CREATE TABLE".into()))
}

/// `smallserial`, `serial`, `bigserial` (and `serial2/4/8`): the column's type and its
/// sequence's maximum.
fn serial_type(dt: &sqlparser::ast::DataType) -> Option<(crate::types::SqlType, i64)> {
    use crate::types::SqlType;
    match dt.to_string().to_ascii_lowercase().as_str() {
        "smallserial" | "serial2" => Some((SqlType::Int2, i64::from(i16::MAX))),
        "serial" | "serial4" => Some((SqlType::Int4, i64::from(i32::MAX))),
        "bigserial" | "serial8" => Some((SqlType::Int8, i64::MAX)),
        _ => None,
    }
}

fn set_pk(pk: &mut Option<Vec<String>>, cols: Vec<String>) -> Result<(), SqlError> {
    if pk.is_some() {
        return Err(SqlError::new("42P16", "multiple primary keys are not allowed"));
    }
    *pk = Some(cols);
    Ok(())
}

fn index_columns(cols: &[sqlparser::ast::IndexColumn]) -> Result<Vec<String>, SqlError> {
    cols.iter()
        .map(|c| match &c.column.expr {
            Expr::Identifier(i) => Ok(ident_name(i)),
            other => Err(SqlError::unsupported(format!("an index on the expression \"{other}\""))),
        })
        .collect()
}

fn storage_options(opts: &[SqlOption]) -> Result<Vec<(String, String)>, SqlError> {
    opts.iter()
        .map(|o| match o {
            SqlOption::KeyValue { key, value } => Ok((ident_name(key), value_text(value))),
            other => Err(SqlError::unsupported(format!("the storage option \"{other}\""))),
        })
        .collect()
}

fn drop(
    sh: &Shared,
    kind: ObjectType,
    if_exists: bool,
    names: &[ObjectName],
    cascade: bool,
    notices: &mut Vec<Notice>,
) -> Result<Outcome, SqlError> {
    let (tag, what) = match kind {
        ObjectType::Table => ("DROP TABLE", "table"),
        ObjectType::Index => ("DROP INDEX", "index"),
        ObjectType::Sequence => ("DROP SEQUENCE", "sequence"),
        other => return Err(SqlError::unsupported(format!("DROP {other}"))),
    };
    let names: Vec<String> = names.iter().map(object_name).collect();
    // PostgreSQL checks every name before dropping any.
    for n in &names {
        let exists = match kind {
            ObjectType::Table => sh.db.table(n).is_ok(),
            ObjectType::Sequence => sh.sequences.exists(n),
            _ => sh.db.index(n).is_ok(),
        };
        if !exists {
            if if_exists {
                notices.push(Notice {
                    detail: None,
                    severity: "NOTICE",
                    code: "00000",
                    message: format!("{what} \"{n}\" does not exist, skipping"),
                });
            } else {
                let code = if kind == ObjectType::Index { "42704" } else { "42P01" };
                return Err(SqlError::new(code, format!("{what} \"{n}\" does not exist")));
            }
        }
    }
    if kind == ObjectType::Table {
        crate::constraints::define::before_drop_tables(sh, &names, cascade, notices)?;
    }
    for n in &names {
        match kind {
            ObjectType::Table if sh.db.table(n).is_ok() => {
                sh.db.drop_table(n)?;
                sh.catalog.remove(&sh.db, n)?;
                sh.sequences.drop_owned_by(n)?;
            }
            ObjectType::Index if sh.db.index(n).is_ok() => sh.db.drop_index(n)?,
            ObjectType::Sequence => {
                sh.sequences.drop_sequence(n)?;
            }
            _ => {}
        }
    }
    if kind == ObjectType::Table {
        crate::constraints::define::after_drop_tables(sh)?;
    }
    Ok(Outcome::Command(tag.into()))
}

fn create_index(
    sh: &Shared,
    ci: &CreateIndex,
    interrupt: &settledb::Interrupt,
    notices: &mut Vec<Notice>,
) -> Result<Outcome, SqlError> {
    let table = object_name(&ci.table_name);
    if ci.predicate.is_some() {
        return Err(SqlError::unsupported("partial indexes"));
    }
    if ci.using.as_ref().is_some_and(|u| !u.to_string().eq_ignore_ascii_case("btree")) {
        return Err(SqlError::unsupported("index access methods other than btree"));
    }
    let cols = index_columns(&ci.columns)?;
    let name = match &ci.name {
        Some(n) => object_name(n),
        None => format!("{table}_{}_idx", cols.join("_")),
    };
    if ci.if_not_exists && sh.db.index(&name).is_ok() {
        notices.push(Notice {
            detail: None,
            severity: "NOTICE",
            code: "42P07",
            message: format!("relation \"{name}\" already exists, skipping"),
        });
        return Ok(Outcome::Command("CREATE INDEX".into()));
    }
    crate::interval::refuse_index(sh, &table, &cols)?;
    let refs: Vec<&str> = cols.iter().map(String::as_str).collect();
    sh.db.create_index_with(&name, &table, &refs, ci.unique, Some(interrupt))?;
    Ok(Outcome::Command("CREATE INDEX".into()))
}

/// ALTER TABLE IF EXISTS's notice for a table that is not there.
fn missing_relation_skipped(table: &str) -> Notice {
    Notice {
        detail: None,
        severity: "NOTICE",
        code: "00000",
        message: format!("relation \"{table}\" does not exist, skipping"),
    }
}

/// `ALTER TABLE [IF EXISTS] table RESET (option, ...)`.
pub fn reset_options(
    sh: &Shared,
    table: &str,
    if_exists: bool,
    options: &[String],
    notices: &mut Vec<Notice>,
) -> Result<Outcome, SqlError> {
    if if_exists && sh.db.table(table).is_err() {
        notices.push(missing_relation_skipped(table));
        return Ok(Outcome::Command("ALTER TABLE".into()));
    }
    let refs: Vec<&str> = options.iter().map(String::as_str).collect();
    sh.db.alter_table_reset(table, &refs)?;
    Ok(Outcome::Command("ALTER TABLE".into()))
}

pub(crate) fn alter(
    sh: &Shared,
    table: &str,
    op: &AlterTableOperation,
    interrupt: &settledb::Interrupt,
) -> Result<(), SqlError> {
    match op {
        AlterTableOperation::AddConstraint { constraint: TableConstraint::PrimaryKey(p), .. } => {
            let cols = index_columns(&p.columns)?;
            crate::interval::refuse_index(sh, table, &cols)?;
            let refs: Vec<&str> = cols.iter().map(String::as_str).collect();
            sh.db.add_primary_key_with(table, &refs, Some(interrupt))?;
            Ok(())
        }
        AlterTableOperation::AddConstraint { constraint: TableConstraint::Unique(u), .. } => {
            let cols = index_columns(&u.columns)?;
            crate::interval::refuse_index(sh, table, &cols)?;
            let refs: Vec<&str> = cols.iter().map(String::as_str).collect();
            let index = format!("{table}_{}_key", cols.join("_"));
            sh.db.create_index_with(&index, table, &refs, true, Some(interrupt))?;
            crate::constraints::define::created(sh, table, Default::default(), &[index])
        }
        AlterTableOperation::AddConstraint { constraint: TableConstraint::Check(c), .. } => {
            crate::constraints::define::add(sh, table, crate::constraints::define::Adding::Check(None, c), interrupt)
        }
        AlterTableOperation::AddConstraint { constraint: TableConstraint::ForeignKey(fk), .. } => {
            crate::constraints::define::add(
                sh,
                table,
                crate::constraints::define::Adding::ForeignKey(None, fk),
                interrupt,
            )
        }
        AlterTableOperation::DropConstraint { .. } => drop_constraint(sh, table, op, &mut Vec::new()),
        AlterTableOperation::SetOptionsParens { options } => {
            let pairs = storage_options(options)?;
            let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            sh.db.alter_table_set(table, &refs)?;
            Ok(())
        }
        other => Err(SqlError::unsupported(format!("ALTER TABLE ... {other}"))),
    }
}

/// `ALTER TABLE ... DROP CONSTRAINT [IF EXISTS] name [CASCADE | RESTRICT]`.
fn drop_constraint(
    sh: &Shared,
    table: &str,
    op: &AlterTableOperation,
    notices: &mut Vec<Notice>,
) -> Result<(), SqlError> {
    let AlterTableOperation::DropConstraint { if_exists, name, drop_behavior } = op else { return Ok(()) };
    let cascade = matches!(drop_behavior, Some(sqlparser::ast::DropBehavior::Cascade));
    crate::constraints::define::drop(sh, table, &ident_name(name), *if_exists, cascade, notices)
}

/// CREATE / ALTER / DROP PUBLICATION on the engine's `pg_publication` (see
/// [`settledb::Database::create_publication`]).
pub fn publication(
    db: &settledb::Database,
    cmd: &crate::parse::PublicationCmd,
    notices: &mut Vec<Notice>,
) -> Result<Outcome, SqlError> {
    use crate::parse::PublicationCmd as P;
    use settledb::catalog::publication::PublishActions;
    use settledb::db::PublicationTarget;
    let err = |e: settledb::Error| -> SqlError {
        match e {
            settledb::Error::AlreadyExists(m) => SqlError::new("42710", m),
            settledb::Error::InvalidInput(m) if m.contains("FOR ALL TABLES") => SqlError::new("55000", m),
            e => SqlError::from(e),
        }
        .split_detail()
    };
    let actions = |s: &str| PublishActions::parse(s).map_err(|e| SqlError::new("22023", e.to_string()));
    let tag = match cmd {
        P::Create { name, tables, publish } => {
            let actions = publish.as_deref().map(actions).transpose()?.unwrap_or_default();
            let names: Vec<&str> = tables.iter().flatten().map(String::as_str).collect();
            let target =
                if tables.is_some() { PublicationTarget::Tables(&names) } else { PublicationTarget::AllTables };
            db.create_publication(name, target, actions).map_err(err)?;
            "CREATE PUBLICATION"
        }
        P::AddTables { name, tables } => {
            let names: Vec<&str> = tables.iter().map(String::as_str).collect();
            db.alter_publication_add_tables(name, &names).map_err(err)?;
            "ALTER PUBLICATION"
        }
        P::DropTables { name, tables } => {
            let names: Vec<&str> = tables.iter().map(String::as_str).collect();
            db.alter_publication_drop_tables(name, &names).map_err(err)?;
            "ALTER PUBLICATION"
        }
        P::SetPublish { name, publish } => {
            db.alter_publication_set_publish(name, actions(publish)?).map_err(err)?;
            "ALTER PUBLICATION"
        }
        P::Drop { names, if_exists } => {
            for name in names {
                match db.drop_publication(name) {
                    Err(settledb::Error::NotFound(_)) if *if_exists => notices.push(Notice {
                        detail: None,
                        severity: "NOTICE",
                        code: "00000",
                        message: format!("publication \"{name}\" does not exist, skipping"),
                    }),
                    r => r.map_err(err)?,
                }
            }
            "DROP PUBLICATION"
        }
    };
    Ok(Outcome::Command(tag.into()))
}
