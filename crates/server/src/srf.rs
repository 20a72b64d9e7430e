//! Catalog set-returning functions in FROM, which may read columns of the relations before
//! them (`LATERAL`): `pg_get_publication_tables(pubname)`, the rows a PostgreSQL 15 subscriber's
//! table synchronization reads with
//!
//! ```sql
//! SELECT … FROM pg_publication p, LATERAL pg_get_publication_tables(p.pubname) gpt, pg_class c
//!  WHERE gpt.relid = 16385 AND c.oid = gpt.relid AND p.pubname IN ('p')
//! ```
//!
//! The call's arguments are evaluated for each row of the relations joined before it (once,
//! with no outer row, when the call comes first), and its rows are joined to that row alone:
//! [`crate::join`] runs such a step as a nested loop over the left rows. The function's
//! columns are PostgreSQL 15's: `relid` (oid), `attrs` (int2vector: the publication's column
//! list, NULL when it publishes every column, which is always the case here, as settledb
//! has no column lists) and `qual` (the row filter's expression tree: NULL, no row filters).
//!
//! Also `pg_visibility_map_summary(rel)` (the pg_visibility extension's): one row of the
//! table's page counts marked all-visible and all-frozen in its visibility map, `rel` a
//! table's name or OID.

use sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, TableAlias};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::expr::{eval, ident_name, Scope};
use crate::session::Cx;
use crate::types::{Datum, SqlType};

/// A set-returning catalog function called in FROM, planned but not yet run.
pub struct SetFunction {
    vm_summary: bool,
    args: Vec<Expr>,
}

impl SetFunction {
    /// Whether `name` is a function this module runs.
    pub fn is(name: &str) -> bool {
        matches!(name, "pg_get_publication_tables" | "pg_visibility_map_summary")
    }

    /// Checks the call and works out the relation's names and columns.
    pub fn plan(
        name: &str,
        args: &[FunctionArg],
        alias: Option<&TableAlias>,
    ) -> Result<(SetFunction, Vec<String>, Vec<ColumnDef>), SqlError> {
        let mut exprs = Vec::with_capacity(args.len());
        for a in args {
            match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => exprs.push(e.clone()),
                _ => return Err(SqlError::unsupported(format!("named arguments to {name}"))),
            }
        }
        if exprs.len() != 1 {
            return Err(SqlError::new(
                "42883",
                format!("function {name} with {} arguments does not exist", exprs.len()),
            ));
        }
        if alias.is_some_and(|a| !a.columns.is_empty()) {
            return Err(SqlError::unsupported(format!("column aliases on {name}")));
        }
        let names = vec![alias.map_or_else(|| name.to_string(), |a| ident_name(&a.name))];
        let col = |n: &str, ty| ColumnDef { name: n.into(), ty, nullable: true };
        let vm_summary = name == "pg_visibility_map_summary";
        let cols = if vm_summary {
            vec![col("all_visible", SqlType::Int8), col("all_frozen", SqlType::Int8)]
        } else {
            vec![col("relid", SqlType::Int8), col("attrs", SqlType::Text), col("qual", SqlType::Text)]
        };
        Ok((SetFunction { vm_summary, args: exprs }, names, cols))
    }

    /// The rows for the outer row `row` (as wide as the FROM list; the call's own columns and
    /// those after it NULL): the tables publication `pubname` publishes, none for a NULL
    /// name, 42704 for a name no publication has (as PostgreSQL).
    pub fn rows(&self, cx: &mut Cx<'_, '_>, scope: &Scope<'_>, row: &[Datum]) -> Result<Vec<Vec<Datum>>, SqlError> {
        if self.vm_summary {
            let rel = eval(&self.args[0], scope, row, cx, None)?;
            return Ok(match vm_summary(cx.db, &rel)? {
                Some((v, f)) => vec![vec![Datum::Int(v as i64), Datum::Int(f as i64)]],
                None => Vec::new(),
            });
        }
        let name = match eval(&self.args[0], scope, row, cx, None)? {
            Datum::Null => return Ok(Vec::new()),
            Datum::Text(n) => n,
            other => {
                return Err(SqlError::new("42883", format!("pg_get_publication_tables({other:?}) does not exist")))
            }
        };
        let publications = cx.db.publications().map_err(SqlError::from)?;
        let Some(p) = publications.into_iter().find(|p| p.name == name) else {
            return Err(SqlError::new("42704", format!("publication \"{name}\" does not exist")));
        };
        let mut out = Vec::new();
        for t in cx.db.tables() {
            if !settledb::xact::horizon::is_catalog_relation(t.oid()) && p.includes(t.oid()) {
                out.push(vec![Datum::Int(i64::from(t.oid().0)), Datum::Null, Datum::Null]);
            }
        }
        Ok(out)
    }
}

/// `pg_visibility_map_summary(rel)`'s counts for a table named by name or OID; `None` for a
/// NULL argument, 42P01 for no such table.
pub fn vm_summary(db: &settledb::Database, rel: &Datum) -> Result<Option<(u64, u64)>, SqlError> {
    let table = match rel {
        Datum::Null => return Ok(None),
        Datum::Int(oid) => db.tables().into_iter().find(|t| i64::from(t.oid().0) == *oid),
        other => {
            let name = other.to_text().unwrap_or_default();
            db.table(name.trim_start_matches("public.")).ok()
        }
    };
    let Some(t) = table else {
        return Err(SqlError::new(
            "42P01",
            format!("relation \"{}\" does not exist", rel.to_text().unwrap_or_default()),
        ));
    };
    db.vm_summary(&t).map(Some).map_err(SqlError::from)
}
