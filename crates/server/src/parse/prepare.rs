//! The grammar of SQL-level prepared statements and DISCARD, as PostgreSQL 15 has it:
//!
//! ```text
//! PREPARE name [ ( data_type [, ...] ) ] AS statement
//!   statement: SELECT | VALUES | INSERT | UPDATE | DELETE   (PostgreSQL's PreparableStmt)
//! EXECUTE name [ ( parameter [, ...] ) ]
//! DEALLOCATE [ PREPARE ] { name | ALL }
//! DISCARD { ALL | PLANS | SEQUENCES | TEMPORARY | TEMP }
//! ```
//!
//! sqlparser 0.63 parses all four; this module turns its statements into ours
//! ([`PrepareCmd`], [`Discard`]) and checks what PostgreSQL's grammar refuses and sqlparser
//! lets through: a statement other than the preparable ones (PostgreSQL: a syntax error at its
//! first word), SQL Server's `EXECUTE ... USING | OUTPUT | DEFAULT | INTO` and `EXECUTE (...)`
//! without a name. The execution is the session's (`crate::session::prepared`).
//!
//! The `$n` a PREPARE's statement names are read from its tokens ([`placeholders`]), so the
//! session can refuse `$0` (42P02) and a gap no declared type fills (42P18) as PostgreSQL's
//! `PrepareQuery` does.

use sqlparser::ast::{DiscardObject, Expr, Statement};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::Stmt;
use crate::error::SqlError;
use crate::expr::ident_name;
use crate::types::SqlType;

/// PREPARE, EXECUTE and DEALLOCATE.
#[derive(Clone, Debug)]
pub enum PrepareCmd {
    /// `PREPARE name [(types)] AS statement`.
    Prepare {
        name: String,
        /// The declared parameter types, `$1` first.
        types: Vec<SqlType>,
        /// The statement, parsed once here.
        stmt: Box<Stmt>,
        /// The PREPARE's own text (`pg_prepared_statements.statement`).
        text: String,
        /// Every `$n` the statement names, sorted, without repeats.
        placeholders: Vec<u64>,
    },
    /// `EXECUTE name [(args)]`: each argument an expression, evaluated at EXECUTE.
    Execute { name: String, args: Vec<Expr> },
    /// `DEALLOCATE [PREPARE] name`; `None` for `ALL`.
    Deallocate { name: Option<String> },
}

/// What `DISCARD` throws away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discard {
    All,
    Plans,
    Sequences,
    Temp,
}

impl Discard {
    /// The command tag, which is also how the command is named in errors.
    pub fn tag(self) -> &'static str {
        match self {
            Discard::All => "DISCARD ALL",
            Discard::Plans => "DISCARD PLANS",
            Discard::Sequences => "DISCARD SEQUENCES",
            Discard::Temp => "DISCARD TEMP",
        }
    }
}

/// Our statement for one of sqlparser's, when it is one of the four commands; `Ok(None)` for
/// any other statement. `text` is the statement's source.
pub(super) fn convert(s: &Statement, text: &str) -> Result<Option<Stmt>, SqlError> {
    Ok(Some(match s {
        Statement::Prepare { name, data_types, statement } => {
            if !matches!(
                statement.as_ref(),
                Statement::Query(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)
            ) {
                let first = statement.to_string();
                let first = first.split_whitespace().next().unwrap_or_default();
                return Err(SqlError::syntax(format!("syntax error at or near \"{first}\"")));
            }
            let types = data_types.iter().map(crate::expr::sql_type).collect::<Result<Vec<_>, _>>()?;
            Stmt::Prepare(Box::new(PrepareCmd::Prepare {
                name: ident_name(name),
                types,
                stmt: Box::new(Stmt::Sql(statement.clone())),
                text: text.trim().to_string(),
                placeholders: placeholders(text)?,
            }))
        }
        Statement::Execute { name, parameters, immediate, into, using, output, default, .. } => {
            let name = match name.as_ref().map(|n| n.0.as_slice()) {
                Some([part]) if !immediate && into.is_empty() && using.is_empty() && !output && !default => {
                    part.as_ident().map(ident_name).ok_or_else(|| SqlError::syntax("syntax error in EXECUTE"))?
                }
                _ => return Err(SqlError::syntax("syntax error in EXECUTE: EXECUTE name [ ( parameter [, ...] ) ]")),
            };
            Stmt::Prepare(Box::new(PrepareCmd::Execute { name, args: parameters.clone() }))
        }
        Statement::Deallocate { name, .. } => {
            let all = name.quote_style.is_none() && name.value.eq_ignore_ascii_case("all");
            Stmt::Prepare(Box::new(PrepareCmd::Deallocate { name: (!all).then(|| ident_name(name)) }))
        }
        Statement::Discard { object_type } => Stmt::Discard(match object_type {
            DiscardObject::ALL => Discard::All,
            DiscardObject::PLANS => Discard::Plans,
            DiscardObject::SEQUENCES => Discard::Sequences,
            DiscardObject::TEMP => Discard::Temp,
        }),
        _ => return Ok(None),
    }))
}

/// The numbers of the `$n` placeholders in `sql`, sorted and without repeats (`$n` inside a
/// string or comment is not one).
fn placeholders(sql: &str) -> Result<Vec<u64>, SqlError> {
    let toks = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().map_err(|e| SqlError::syntax(e.to_string()))?;
    let mut out: Vec<u64> = toks
        .iter()
        .filter_map(|t| match t {
            Token::Placeholder(p) => p.strip_prefix('$').and_then(|n| n.parse().ok()),
            _ => None,
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_one;

    fn cmd(sql: &str) -> PrepareCmd {
        match parse_one(sql).unwrap() {
            Stmt::Prepare(c) => *c,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn prepare_keeps_types_text_and_placeholders() {
        let PrepareCmd::Prepare { name, types, stmt, text, placeholders } =
            cmd("PREPARE Q1 (int, varchar(3)) AS SELECT $2, '$9' FROM t WHERE a = $1 OR b = $2 ")
        else {
            panic!()
        };
        assert_eq!(name, "q1");
        assert_eq!(types, vec![SqlType::Int4, SqlType::Varchar(Some(3))]);
        assert!(matches!(*stmt, Stmt::Sql(ref s) if matches!(**s, Statement::Query(_))));
        assert_eq!(text, "PREPARE Q1 (int, varchar(3)) AS SELECT $2, '$9' FROM t WHERE a = $1 OR b = $2");
        assert_eq!(placeholders, vec![1, 2]);
        assert!(matches!(cmd("prepare v as values (1)"), PrepareCmd::Prepare { .. }));
        assert!(matches!(cmd("prepare d as delete from t where a = $1"), PrepareCmd::Prepare { .. }));
    }

    #[test]
    fn only_preparable_statements_and_known_types() {
        assert_eq!(parse_one("PREPARE p AS CREATE TABLE t (a int)").unwrap_err().code, "42601");
        assert_eq!(parse_one("PREPARE p AS BEGIN").unwrap_err().code, "42601");
        assert_eq!(parse_one("PREPARE p (nosuchtype) AS SELECT 1").unwrap_err().code, "42704");
    }

    #[test]
    fn execute_deallocate_discard() {
        let PrepareCmd::Execute { name, args } = cmd("EXECUTE q (1, 'x' || 'y')") else { panic!() };
        assert_eq!((name.as_str(), args.len()), ("q", 2));
        let PrepareCmd::Execute { args, .. } = cmd("execute \"Q\"") else { panic!() };
        assert!(args.is_empty());
        assert_eq!(parse_one("EXECUTE q USING 1").unwrap_err().code, "42601");
        assert!(matches!(cmd("DEALLOCATE ALL"), PrepareCmd::Deallocate { name: None }));
        assert!(matches!(cmd("deallocate prepare all"), PrepareCmd::Deallocate { name: None }));
        let PrepareCmd::Deallocate { name } = cmd("DEALLOCATE \"all\"") else { panic!() };
        assert_eq!(name.as_deref(), Some("all"));
        let PrepareCmd::Deallocate { name } = cmd("DEALLOCATE PREPARE Q") else { panic!() };
        assert_eq!(name.as_deref(), Some("q"));
        for (sql, want) in [
            ("DISCARD ALL", Discard::All),
            ("discard plans", Discard::Plans),
            ("DISCARD SEQUENCES", Discard::Sequences),
            ("DISCARD TEMPORARY", Discard::Temp),
            ("DISCARD TEMP", Discard::Temp),
        ] {
            assert!(matches!(parse_one(sql).unwrap(), Stmt::Discard(d) if d == want), "{sql}");
        }
        assert_eq!(parse_one("DISCARD nothing").unwrap_err().code, "42601");
    }
}
