//! A function that is not set-returning, called in FROM: `SELECT * FROM txid_current()`, or
//! `SELECT * FROM pg_create_logical_replication_slot('s', 'test_decoding')`, which is how
//! PostgreSQL's documentation makes a slot. As in PostgreSQL it is a relation of one row: a
//! scalar function's one column is named after the function (an alias without a column list
//! names it too), and a function returning a record has the record's columns (the slot
//! functions' `slot_name, lsn` and `slot_name, end_lsn`, see [`crate::slotfuncs::record_fields`]).
//!
//! The call runs once, when the join reads it, as the statement `SELECT f(args)`: the same
//! evaluation, so the same checks, SQLSTATEs and side effects as the function in a SELECT
//! list. Its arguments cannot read the relations before it (no LATERAL).

use sqlparser::ast::{FunctionArg, ObjectName, Statement, TableAlias};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::expr::ident_name;
use crate::parse::Stmt;
use crate::session::Cx;
use crate::types::{Datum, SqlType};
use crate::Shared;

/// A function call in FROM, planned.
pub struct FromCall {
    query: Box<sqlparser::ast::Query>,
    /// The call returns a record of this many fields (in their composite text form).
    fields: Option<usize>,
}

impl FromCall {
    /// Checks the call and works out the relation's names and columns.
    pub fn plan(
        sh: &Shared,
        name: &ObjectName,
        args: &[FunctionArg],
        alias: Option<&TableAlias>,
    ) -> Result<(FromCall, Vec<String>, Vec<ColumnDef>), SqlError> {
        let function = crate::ddl::object_name(name);
        let list = args.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        let stmt = crate::parse::parse_one(&format!("SELECT {name}({list})"))?;
        let Stmt::Sql(sql) = &stmt else {
            return Err(SqlError::unsupported(format!("function {function} in FROM")));
        };
        let Statement::Query(query) = sql.as_ref() else {
            return Err(SqlError::unsupported(format!("function {function} in FROM")));
        };
        let Some(described) = crate::query::describe(sh, &stmt, &[]).1 else {
            return Err(SqlError::new("42883", format!("function {function} does not exist")));
        };
        let record = crate::slotfuncs::record_fields(&function);
        let column = |name: &str, ty| ColumnDef { name: name.to_string(), ty, nullable: true };
        let mut cols: Vec<ColumnDef> = match record {
            Some(fields) => fields.iter().map(|f| column(f, SqlType::Text)).collect(),
            None => described.iter().map(|f| column(&function, f.ty)).collect(),
        };
        let relation = alias.map_or_else(|| function.clone(), |a| ident_name(&a.name));
        if let Some(a) = alias {
            if a.columns.len() > cols.len() {
                return Err(SqlError::too_many_column_names(
                    &format!("table \"{relation}\""),
                    cols.len(),
                    a.columns.len(),
                ));
            }
            for (c, n) in cols.iter_mut().zip(&a.columns) {
                c.name = ident_name(&n.name);
            }
            if let (None, true, Some(only)) = (record, a.columns.is_empty(), cols.first_mut()) {
                only.name = relation.clone();
            }
        }
        Ok((FromCall { query: query.clone(), fields: record.map(<[_]>::len) }, vec![relation], cols))
    }

    /// The call's one row.
    pub fn rows(&self, cx: &mut Cx<'_, '_>) -> Result<Vec<Vec<Datum>>, SqlError> {
        let rows = cx.select_copy(&self.query)?.1;
        let Some(n) = self.fields else { return Ok(rows) };
        Ok(rows
            .into_iter()
            .map(|row| match row.first() {
                Some(Datum::Text(t)) => crate::slotfuncs::split_record(t, n),
                _ => vec![Datum::Null; n],
            })
            .collect())
    }
}
