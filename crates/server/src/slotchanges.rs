//! `pg_logical_slot_get_changes(slot, upto_lsn, upto_nchanges [, name, value ...])` in FROM, and
//! its siblings `pg_logical_slot_peek_changes` and the `_binary_` forms: the rows a decoding
//! session over the slot gives (PostgreSQL's `logicalfuncs.c`), through the engine's
//! [`settledb::Database::logical_slot_get_changes`] and `peek_changes`.
//!
//! Columns `lsn` (text, PostgreSQL's pg_lsn output), `xid` (bigint) and `data` (text; bytea in
//! the binary forms, which a binary plugin such as `pgoutput` needs: the text forms refuse it
//! as PostgreSQL does). A NULL `upto_lsn` or `upto_nchanges` means no limit; the options come
//! in name/value pairs, a NULL value meaning "given without a value". The `get` forms confirm
//! what they return (the slot advances); `peek` leaves the slot where it was. A slot another
//! connection streams, or owns as temporary, is refused with 55006, as PostgreSQL refuses a
//! slot it cannot acquire.

use sqlparser::ast::{Expr, FunctionArg, FunctionArgExpr, TableAlias};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::expr::{eval, ident_name, Scope};
use crate::session::Cx;
use crate::types::{Datum, SqlType};

/// A call of one of the four functions, planned but not yet run.
pub struct SlotChanges {
    pub function: String,
    pub args: Vec<Expr>,
    /// The slot advances (`get`) or not (`peek`).
    pub confirm: bool,
    /// `data` is bytea (the `_binary_` forms).
    pub binary: bool,
}

impl SlotChanges {
    /// Whether `name` is one of the functions.
    pub fn is(name: &str) -> bool {
        matches!(
            name.trim_start_matches("pg_catalog."),
            "pg_logical_slot_get_changes"
                | "pg_logical_slot_peek_changes"
                | "pg_logical_slot_get_binary_changes"
                | "pg_logical_slot_peek_binary_changes"
        )
    }

    /// Checks the call and names the relation and its columns.
    pub fn plan(
        name: &str,
        args: &[FunctionArg],
        alias: Option<&TableAlias>,
    ) -> Result<(SlotChanges, Vec<String>, Vec<ColumnDef>), SqlError> {
        let function = name.trim_start_matches("pg_catalog.").to_string();
        let mut exprs = Vec::with_capacity(args.len());
        for a in args {
            match a {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => exprs.push(e.clone()),
                _ => return Err(SqlError::unsupported(format!("named arguments to {function}"))),
            }
        }
        if exprs.len() < 3 || exprs.len() % 2 == 0 {
            return Err(SqlError::new(
                "42883",
                format!(
                    "function {function} with {} arguments does not exist (slot, upto_lsn, upto_nchanges, then option \
                     name/value pairs)",
                    exprs.len()
                ),
            ));
        }
        let binary = function.contains("_binary_");
        let data = if binary { SqlType::Bytea } else { SqlType::Text };
        let mut cols = vec![
            ColumnDef { name: "lsn".into(), ty: SqlType::Text, nullable: false },
            ColumnDef { name: "xid".into(), ty: SqlType::Int8, nullable: false },
            ColumnDef { name: "data".into(), ty: data, nullable: true },
        ];
        if let Some(a) = alias {
            if a.columns.len() > cols.len() {
                return Err(SqlError::new(
                    "42P10",
                    format!("too many column aliases specified for function {function} ({})", a.columns.len()),
                ));
            }
            for (c, n) in cols.iter_mut().zip(&a.columns) {
                c.name = ident_name(&n.name);
            }
        }
        let rel = alias.map_or_else(|| function.clone(), |a| ident_name(&a.name));
        let confirm = function.contains("_get_");
        Ok((SlotChanges { function, args: exprs, confirm, binary }, vec![rel], cols))
    }

    /// Runs the decoding session.
    pub fn rows(&self, cx: &mut Cx<'_, '_>) -> Result<Vec<Vec<Datum>>, SqlError> {
        let mut vals = Vec::with_capacity(self.args.len());
        for e in &self.args {
            vals.push(eval(e, &Scope::empty(), &[], cx, None)?);
        }
        let Some(slot) = vals[0].to_text() else {
            return Err(SqlError::new("22004", "slot name must not be null"));
        };
        let upto_lsn = match &vals[1] {
            Datum::Null => None,
            d => {
                let text = d.to_text().unwrap_or_default();
                let lsn = crate::slotfuncs::parse_lsn(&text).ok_or_else(|| {
                    SqlError::new("22P02", format!("invalid input syntax for type pg_lsn: \"{text}\""))
                })?;
                Some(lsn)
            }
        };
        let upto_nchanges = match &vals[2] {
            Datum::Null => None,
            Datum::Int(n) if *n >= 0 => Some(*n as usize),
            Datum::Int(_) => return Err(SqlError::new("22023", "upto_nchanges must not be negative")),
            other => {
                return Err(SqlError::new("42804", format!("upto_nchanges must be an integer, not {other:?}")));
            }
        };
        let mut options = Vec::new();
        for pair in vals[3..].chunks(2) {
            let Some(name) = pair[0].to_text() else {
                return Err(SqlError::new("22004", "option name must not be null"));
            };
            options.push((name, pair[1].to_text()));
        }
        // A slot another connection streams or owns as temporary is not decoded here (55006).
        cx.sh.senders.check_free(&slot, cx.interrupts.control.pid())?;
        let limits = settledb::db::DecodeLimits { upto_lsn, upto_nchanges, ..Default::default() };
        let db = cx.db;
        let r = if self.confirm {
            db.logical_slot_get_changes(&slot, limits, &options)
        } else {
            db.logical_slot_peek_changes(&slot, limits, &options)
        }
        .map_err(crate::slotfuncs::slot_error)?;
        let mut rows = Vec::with_capacity(r.rows.len());
        for row in r.rows {
            let data = if self.binary {
                Datum::Bytea(row.data)
            } else {
                match String::from_utf8(row.data) {
                    Ok(s) => Datum::Text(s),
                    Err(_) => {
                        return Err(SqlError::new(
                            "22021",
                            format!(
                                "{} returned bytes that are not UTF-8: the output plugin writes binary data (use \
                                 {})",
                                self.function,
                                self.function.replace("_changes", "_binary_changes")
                            ),
                        ))
                    }
                }
            };
            rows.push(vec![Datum::Text(row.lsn.to_string()), Datum::Int(i64::from(row.xid.0)), data]);
        }
        Ok(rows)
    }
}
