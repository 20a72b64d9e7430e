//! The SQL front end: splits a query string into statements, parses the utility commands
//! sqlparser does not know (VACUUM with options, CHECKPOINT, ANALYZE, COPY) with a small
//! parser of our own, and hands everything else to sqlparser's PostgreSQL dialect.
//!
//! The role statements (`CREATE|ALTER|DROP ROLE|USER`) have their own grammar too, in
//! `parse/role.rs`: sqlparser's DROP ROLE would reach the table DDL, and its options differ.
//! `PREPARE`, `EXECUTE`, `DEALLOCATE` and `DISCARD` are parsed by sqlparser and turned into
//! statements of ours in `parse/prepare.rs`, which checks what PostgreSQL's grammar refuses.
//!
//! sqlparser 0.63 rejects `VACUUM (VERBOSE) t`, `CHECKPOINT` and the COPY that `pgbench -i`
//! sends (`copy pgbench_accounts from stdin with (freeze on)`), so those four commands never
//! reach it. Their grammar, from PostgreSQL 15's documentation:
//!
//! ```text
//! VACUUM [ ( option [ value ] [, ...] ) ] [ table [ (column [, ...]) ] [, ...] ]
//! VACUUM [ FULL ] [ FREEZE ] [ VERBOSE ] [ ANALYZE ] [ table [, ...] ]
//!   option: FULL | FREEZE | VERBOSE | ANALYZE | DISABLE_PAGE_SKIPPING | SKIP_LOCKED
//!           | INDEX_CLEANUP {AUTO|ON|OFF} | PROCESS_TOAST | TRUNCATE | PARALLEL n
//! ANALYZE [ ( option [, ...] ) ] [ table [, ...] ]
//! CHECKPOINT
//! COPY table [ ( column [, ...] ) ] { FROM STDIN | TO STDOUT } [ [ WITH ] ( option [, ...] ) ]
//!   option: FORMAT {text|csv|binary} | FREEZE [bool] | DELIMITER 'c' | NULL 's' | HEADER [bool]
//!           | QUOTE 'c' | ESCAPE 'c' | ENCODING 'name'
//! ```

use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer, Word};

use crate::error::SqlError;

mod prepare;
mod role;

pub use prepare::{Discard, PrepareCmd};

/// One parsed statement.
#[derive(Clone, Debug)]
pub enum Stmt {
    Vacuum(VacuumCmd),
    Analyze(AnalyzeCmd),
    Checkpoint,
    Copy(CopyCmd),
    Sql(Box<sqlparser::ast::Statement>),
    /// The catalog query `pgbench` sends before a run to learn whether `pgbench_accounts` is
    /// partitioned (a join of pg_class, pg_namespace, pg_partitioned_table and pg_inherits with
    /// `current_schemas()`). settledb has no partitioning and no such catalogs, so this one
    /// query is recognized by its text and answered as PostgreSQL answers it for a plain table:
    /// one row `(1, NULL, 0)` when the table exists.
    PartitionProbe {
        table: String,
    },
    /// CREATE / ALTER / DROP PUBLICATION.
    Publication(PublicationCmd),
    /// `ALTER SYSTEM SET name { = | TO } value` (`Some`), `ALTER SYSTEM SET name TO DEFAULT`
    /// and `ALTER SYSTEM RESET name` (`None`), `ALTER SYSTEM RESET ALL` (name `all`).
    AlterSystem {
        name: String,
        value: Option<String>,
    },
    /// `ALTER TABLE [IF EXISTS] [ONLY] table RESET ( option [, ...] )`: storage parameters
    /// back to the database's settings (sqlparser 0.63 has no RESET form).
    AlterTableReset {
        table: String,
        if_exists: bool,
        options: Vec<String>,
    },
    /// CREATE / ALTER / DROP ROLE or USER ([`crate::roles::command`]; grammar in `role`).
    Role(crate::roles::command::RoleCmd),
    /// PREPARE, EXECUTE, DEALLOCATE in SQL (the session's prepared statements, not the
    /// protocol's; grammar in `prepare`).
    Prepare(Box<PrepareCmd>),
    /// `DISCARD ALL | PLANS | SEQUENCES | TEMP`.
    Discard(Discard),
    /// Only whitespace and comments.
    Empty,
}

/// The publication statements (PostgreSQL 15's forms for tables; no `TABLES IN SCHEMA`, column
/// lists or row filters).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublicationCmd {
    /// `CREATE PUBLICATION name [FOR ALL TABLES | FOR TABLE t [, ...]] [WITH (publish = '...')]`;
    /// `tables` is `None` for ALL TABLES, empty for none.
    Create { name: String, tables: Option<Vec<String>>, publish: Option<String> },
    /// `ALTER PUBLICATION name ADD TABLE t [, ...]`.
    AddTables { name: String, tables: Vec<String> },
    /// `ALTER PUBLICATION name DROP TABLE t [, ...]`.
    DropTables { name: String, tables: Vec<String> },
    /// `ALTER PUBLICATION name SET (publish = '...')`.
    SetPublish { name: String, publish: String },
    /// `DROP PUBLICATION [IF EXISTS] name [, ...] [CASCADE | RESTRICT]`.
    Drop { names: Vec<String>, if_exists: bool },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VacuumCmd {
    pub tables: Vec<String>,
    pub full: bool,
    pub freeze: bool,
    pub verbose: bool,
    pub analyze: bool,
    pub disable_page_skipping: bool,
    pub skip_locked: bool,
    pub index_cleanup: Option<String>,
    pub process_toast: Option<bool>,
    pub truncate: Option<bool>,
    pub parallel: Option<u32>,
}

/// `ANALYZE [ ( option [, ...] ) | VERBOSE ] [ table [ (column, ...) ] [, ...] ]`.
#[derive(Clone, Debug, Default)]
pub struct AnalyzeCmd {
    pub tables: Vec<String>,
    pub verbose: bool,
    pub skip_locked: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyFormat {
    Text,
    Csv,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyCmd {
    pub table: String,
    pub columns: Vec<String>,
    pub from_stdin: bool,
    pub format: CopyFormat,
    pub freeze: bool,
    pub delimiter: char,
    pub null: String,
    pub header: bool,
    pub quote: char,
    pub escape: char,
}

/// Splits `sql` at top-level semicolons (not inside quotes, dollar quotes or comments).
pub fn split_statements(sql: &str) -> Vec<&str> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' => {
                let q = b[i];
                i += 1;
                while i < b.len() {
                    if b[i] == q {
                        if b.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
            }
            b'$' => {
                // A dollar quote: $tag$ ... $tag$.
                let tag_end = b[i + 1..].iter().position(|&c| !(c.is_ascii_alphanumeric() || c == b'_'));
                match tag_end.map(|t| i + 1 + t) {
                    Some(e) if b[e] == b'$' => {
                        let tag = &sql[i..=e];
                        match sql[e + 1..].find(tag) {
                            Some(p) => i = e + 1 + p + tag.len(),
                            None => i = b.len(),
                        }
                    }
                    _ => i += 1,
                }
            }
            b';' => {
                out.push(&sql[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    if start < b.len() {
        out.push(&sql[start..]);
    }
    out.into_iter().filter(|s| !is_blank(s)).collect()
}

/// Whether a statement text holds only whitespace and comments.
pub fn is_blank(s: &str) -> bool {
    match Tokenizer::new(&PostgreSqlDialect {}, s).tokenize() {
        Ok(toks) => toks.iter().all(|t| matches!(t, Token::Whitespace(_))),
        Err(_) => false,
    }
}

/// Parses one statement (no top-level semicolons inside).
pub fn parse_one(sql: &str) -> Result<Stmt, SqlError> {
    let toks: Vec<Token> = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .map_err(|e| SqlError::syntax(e.to_string()))?
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .collect();
    let Some(first) = toks.first() else { return Ok(Stmt::Empty) };
    let kw = word(first).map(|w| w.value.to_ascii_uppercase()).unwrap_or_default();
    match kw.as_str() {
        "VACUUM" => return Ok(Stmt::Vacuum(Toks::new(&toks[1..]).vacuum()?)),
        "ANALYZE" | "ANALYSE" => return Ok(Stmt::Analyze(Toks::new(&toks[1..]).analyze()?)),
        "CHECKPOINT" if toks.len() == 1 => return Ok(Stmt::Checkpoint),
        "COPY" => return Ok(Stmt::Copy(Toks::new(&toks[1..]).copy()?)),
        "ALTER" if toks.get(1).and_then(word).is_some_and(|w| w.value.eq_ignore_ascii_case("SYSTEM")) => {
            return Toks::new(&toks[2..]).alter_system();
        }
        "CREATE" | "ALTER" | "DROP"
            if toks.get(1).and_then(word).is_some_and(|w| w.value.eq_ignore_ascii_case("PUBLICATION")) =>
        {
            return Ok(Stmt::Publication(Toks::new(&toks[2..]).publication(&kw)?));
        }
        "ALTER"
            if toks.get(1).and_then(word).is_some_and(|w| w.value.eq_ignore_ascii_case("TABLE"))
                && toks.iter().any(|t| {
                    word(t).is_some_and(|w| w.quote_style.is_none() && w.value.eq_ignore_ascii_case("RESET"))
                }) =>
        {
            return Toks::new(&toks[2..]).alter_table_reset();
        }
        "CREATE" | "ALTER" | "DROP" => {
            let second = toks.get(1).and_then(word).filter(|w| w.quote_style.is_none());
            let second = second.map(|w| w.value.to_ascii_uppercase()).unwrap_or_default();
            if second == "ROLE" || second == "USER" {
                return Ok(Stmt::Role(Toks::new(&toks[2..]).role(&kw, second == "USER")?));
            }
        }
        _ => {}
    }
    if let Some(table) = partition_probe(sql) {
        return Ok(Stmt::PartitionProbe { table });
    }
    // Locking clauses sqlparser does not parse (FOR NO KEY UPDATE, OF a, b): [`crate::rowlock`].
    let relocked = crate::rowlock::normalize(sql);
    let sql = relocked.as_deref().unwrap_or(sql);
    // psql's `\d` foreign-key queries: [`crate::constraints::pg::psql_rewrite`].
    let described = crate::constraints::pg::psql_rewrite(sql);
    let sql = described.as_deref().unwrap_or(sql);
    let mut stmts = Parser::parse_sql(&PostgreSqlDialect {}, sql).map_err(|e| {
        let m = e.to_string();
        crate::upsert::refused_target(&toks)
            .unwrap_or_else(|| SqlError::syntax(m.strip_prefix("sql parser error: ").unwrap_or(&m).to_string()))
    })?;
    match stmts.len() {
        0 => Ok(Stmt::Empty),
        1 => match prepare::convert(&stmts[0], sql)? {
            Some(s) => Ok(s),
            None => Ok(Stmt::Sql(Box::new(stmts.remove(0)))),
        },
        _ => Err(SqlError::syntax("more than one statement where one was expected")),
    }
}

/// Recognizes pgbench's partition probe (see [`Stmt::PartitionProbe`]).
fn partition_probe(sql: &str) -> Option<String> {
    if !sql.contains("pg_catalog.pg_partitioned_table") || !sql.contains("pg_catalog.pg_inherits") {
        return None;
    }
    let rest = &sql[sql.find("c.relname = '")? + "c.relname = '".len()..];
    Some(rest[..rest.find('\'')?].to_string())
}

fn word(t: &Token) -> Option<&Word> {
    match t {
        Token::Word(w) => Some(w),
        _ => None,
    }
}

/// A cursor over a utility command's tokens.
struct Toks<'a> {
    t: &'a [Token],
    i: usize,
}

impl<'a> Toks<'a> {
    /// DROP's `[IF EXISTS] name [, ...]`.
    fn if_exists_names(&mut self) -> Result<(bool, Vec<String>), SqlError> {
        let if_exists = self.eat_kw("IF");
        if if_exists && !self.eat_kw("EXISTS") {
            return Err(self.err());
        }
        let mut names = vec![self.ident()?];
        while self.eat(&Token::Comma) {
            names.push(self.ident()?);
        }
        Ok((if_exists, names))
    }

    fn new(t: &'a [Token]) -> Toks<'a> {
        Toks { t, i: 0 }
    }

    fn peek(&self) -> Option<&'a Token> {
        self.t.get(self.i)
    }

    fn next(&mut self) -> Option<&'a Token> {
        let t = self.t.get(self.i);
        self.i += 1;
        t
    }

    fn done(&self) -> bool {
        self.i >= self.t.len()
    }

    fn err(&self) -> SqlError {
        match self.peek() {
            Some(t) => SqlError::syntax(format!("syntax error at or near \"{t}\"")),
            None => SqlError::syntax("syntax error at end of input"),
        }
    }

    fn keyword(&self) -> Option<String> {
        self.peek().and_then(word).filter(|w| w.quote_style.is_none()).map(|w| w.value.to_ascii_uppercase())
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        if self.keyword().as_deref() == Some(kw) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn eat(&mut self, t: &Token) -> bool {
        if self.peek() == Some(t) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: &Token) -> Result<(), SqlError> {
        if self.eat(t) {
            Ok(())
        } else {
            Err(self.err())
        }
    }

    /// An identifier, possibly schema-qualified (`public.t`); folded to lower case unless quoted.
    fn name(&mut self) -> Result<String, SqlError> {
        let mut n = self.ident()?;
        while self.eat(&Token::Period) {
            n = self.ident()?;
        }
        Ok(n)
    }

    fn ident(&mut self) -> Result<String, SqlError> {
        match self.peek().and_then(word) {
            Some(w) => {
                self.i += 1;
                Ok(if w.quote_style.is_some() { w.value.clone() } else { w.value.to_lowercase() })
            }
            None => Err(self.err()),
        }
    }

    /// What follows `ALTER TABLE` in `ALTER TABLE ... RESET (...)`.
    fn alter_table_reset(mut self) -> Result<Stmt, SqlError> {
        let if_exists = self.eat_kw("IF");
        if if_exists && !self.eat_kw("EXISTS") {
            return Err(self.err());
        }
        self.eat_kw("ONLY");
        let mut table = self.ident()?;
        // A schema-qualified name: the last part names the table.
        while self.eat(&Token::Period) {
            table = self.ident()?;
        }
        if !self.eat_kw("RESET") {
            return Err(self.err());
        }
        self.expect(&Token::LParen)?;
        let mut options = vec![self.ident()?];
        while self.eat(&Token::Comma) {
            options.push(self.ident()?);
        }
        self.expect(&Token::RParen)?;
        if !self.done() {
            return Err(self.err());
        }
        Ok(Stmt::AlterTableReset { table, if_exists, options })
    }

    /// What follows `ALTER SYSTEM`.
    fn alter_system(mut self) -> Result<Stmt, SqlError> {
        let set = if self.eat_kw("SET") {
            true
        } else if self.eat_kw("RESET") {
            false
        } else {
            return Err(self.err());
        };
        let name = self.ident()?;
        let value = if set {
            if !self.eat_kw("TO") && !self.eat(&Token::Eq) {
                return Err(self.err());
            }
            if self.eat_kw("DEFAULT") {
                None
            } else {
                let negative = self.eat(&Token::Minus);
                let v = match self.next() {
                    Some(Token::Number(n, _)) => n.clone(),
                    Some(Token::SingleQuotedString(s)) if !negative => s.clone(),
                    Some(Token::Word(w)) if !negative => w.value.clone(),
                    _ => {
                        self.i -= 1;
                        return Err(self.err());
                    }
                };
                Some(if negative { format!("-{v}") } else { v })
            }
        } else {
            None
        };
        if !self.done() {
            return Err(self.err());
        }
        Ok(Stmt::AlterSystem { name, value })
    }

    /// An option's value: a word, number or string, as text.
    fn value(&mut self) -> Option<String> {
        let v = match self.peek()? {
            Token::Word(w) => w.value.to_lowercase(),
            Token::Number(n, _) => n.clone(),
            Token::SingleQuotedString(s) => s.clone(),
            _ => return None,
        };
        self.i += 1;
        Some(v)
    }

    /// The rest of `CREATE|ALTER|DROP PUBLICATION` (`verb` is the first word).
    fn publication(&mut self, verb: &str) -> Result<PublicationCmd, SqlError> {
        let cmd = match verb {
            "CREATE" => {
                let name = self.ident()?;
                let tables = if self.eat_kw("FOR") {
                    if self.eat_kw("ALL") {
                        if !self.eat_kw("TABLES") {
                            return Err(self.err());
                        }
                        None
                    } else if self.eat_kw("TABLE") {
                        Some(self.publication_tables()?)
                    } else if self.keyword().as_deref() == Some("TABLES") {
                        return Err(SqlError::unsupported("FOR TABLES IN SCHEMA"));
                    } else {
                        return Err(self.err());
                    }
                } else {
                    Some(Vec::new())
                };
                let publish = if self.eat_kw("WITH") { Some(self.publish_option()?) } else { None };
                PublicationCmd::Create { name, tables, publish }
            }
            "ALTER" => {
                let name = self.ident()?;
                if self.eat_kw("ADD") {
                    if !self.eat_kw("TABLE") {
                        return Err(self.err());
                    }
                    PublicationCmd::AddTables { name, tables: self.publication_tables()? }
                } else if self.eat_kw("DROP") {
                    if !self.eat_kw("TABLE") {
                        return Err(self.err());
                    }
                    PublicationCmd::DropTables { name, tables: self.publication_tables()? }
                } else if self.eat_kw("SET") {
                    if self.keyword().as_deref() == Some("TABLE") {
                        return Err(SqlError::unsupported("ALTER PUBLICATION ... SET TABLE"));
                    }
                    PublicationCmd::SetPublish { name, publish: self.publish_option()? }
                } else {
                    return Err(self.err());
                }
            }
            _ => {
                let (if_exists, names) = self.if_exists_names()?;
                let _ = self.eat_kw("CASCADE") || self.eat_kw("RESTRICT");
                PublicationCmd::Drop { names, if_exists }
            }
        };
        if !self.done() {
            return Err(self.err());
        }
        Ok(cmd)
    }

    /// `[ONLY] t [*] [, ...]` (column lists and WHERE clauses are refused).
    fn publication_tables(&mut self) -> Result<Vec<String>, SqlError> {
        let mut tables = Vec::new();
        loop {
            let _ = self.eat_kw("ONLY");
            tables.push(self.name()?);
            let _ = self.eat(&Token::Mul);
            if self.peek() == Some(&Token::LParen) {
                return Err(SqlError::unsupported("a publication column list"));
            }
            if self.keyword().as_deref() == Some("WHERE") {
                return Err(SqlError::unsupported("a publication row filter"));
            }
            if !self.eat(&Token::Comma) {
                return Ok(tables);
            }
        }
    }

    /// `( publish = '...' [, publish_via_partition_root = ...] )`: the publish list.
    fn publish_option(&mut self) -> Result<String, SqlError> {
        self.expect(&Token::LParen)?;
        let mut publish = None;
        loop {
            let opt = self.ident()?;
            self.expect(&Token::Eq)?;
            let v = self.value().ok_or_else(|| self.err())?;
            match opt.as_str() {
                "publish" => publish = Some(v),
                "publish_via_partition_root" => {}
                other => {
                    return Err(SqlError::new("42601", format!("unrecognized publication parameter: \"{other}\"")))
                }
            }
            if self.eat(&Token::RParen) {
                break;
            }
            self.expect(&Token::Comma)?;
        }
        Ok(publish.unwrap_or_else(|| "insert, update, delete, truncate".into()))
    }

    fn table_list(&mut self) -> Result<Vec<String>, SqlError> {
        let mut tables = Vec::new();
        while !self.done() {
            tables.push(self.name()?);
            if self.eat(&Token::LParen) {
                // A column list (for ANALYZE): accepted and not used.
                while !self.eat(&Token::RParen) {
                    self.next().ok_or_else(|| self.err())?;
                }
            }
            if !self.eat(&Token::Comma) {
                break;
            }
        }
        if !self.done() {
            return Err(self.err());
        }
        Ok(tables)
    }

    fn vacuum(&mut self) -> Result<VacuumCmd, SqlError> {
        let mut v = VacuumCmd::default();
        if self.eat(&Token::LParen) {
            loop {
                let opt = self.keyword().ok_or_else(|| self.err())?;
                self.i += 1;
                let val = if matches!(self.peek(), Some(Token::Comma | Token::RParen)) { None } else { self.value() };
                let on = || bool_opt(&opt, val.as_deref());
                match opt.as_str() {
                    "FULL" => v.full = on()?,
                    "FREEZE" => v.freeze = on()?,
                    "VERBOSE" => v.verbose = on()?,
                    "ANALYZE" => v.analyze = on()?,
                    "DISABLE_PAGE_SKIPPING" => v.disable_page_skipping = on()?,
                    "SKIP_LOCKED" => v.skip_locked = on()?,
                    "PROCESS_TOAST" => v.process_toast = Some(on()?),
                    "TRUNCATE" => v.truncate = Some(on()?),
                    "INDEX_CLEANUP" => {
                        let s = val.unwrap_or_else(|| "on".into());
                        let s = match s.as_str() {
                            "true" | "1" | "yes" => "on".to_string(),
                            "false" | "0" | "no" => "off".to_string(),
                            _ => s,
                        };
                        if !matches!(s.as_str(), "auto" | "on" | "off") {
                            return Err(SqlError::syntax(format!(
                                "index_cleanup requires a Boolean value or \"auto\", got \"{s}\""
                            )));
                        }
                        v.index_cleanup = Some(s);
                    }
                    "PARALLEL" => {
                        let n = val.and_then(|s| s.parse::<u32>().ok()).filter(|n| *n <= 1024).ok_or_else(|| {
                            SqlError::syntax("parallel workers for vacuum must be between 0 and 1024")
                        })?;
                        v.parallel = Some(n);
                    }
                    other => {
                        return Err(SqlError::syntax(format!(
                            "unrecognized VACUUM option \"{}\"",
                            other.to_lowercase()
                        )))
                    }
                }
                if self.eat(&Token::RParen) {
                    break;
                }
                self.expect(&Token::Comma)?;
            }
        } else {
            for (kw, flag) in [("FULL", 0), ("FREEZE", 1), ("VERBOSE", 2), ("ANALYZE", 3), ("ANALYSE", 3)] {
                if self.eat_kw(kw) {
                    match flag {
                        0 => v.full = true,
                        1 => v.freeze = true,
                        2 => v.verbose = true,
                        _ => v.analyze = true,
                    }
                }
            }
        }
        v.tables = self.table_list()?;
        Ok(v)
    }

    fn analyze(&mut self) -> Result<AnalyzeCmd, SqlError> {
        let mut a = AnalyzeCmd::default();
        if self.eat(&Token::LParen) {
            loop {
                let opt = self.keyword().ok_or_else(|| self.err())?;
                self.i += 1;
                let val = if matches!(self.peek(), Some(Token::Comma | Token::RParen)) { None } else { self.value() };
                match opt.as_str() {
                    "VERBOSE" => a.verbose = bool_opt(&opt, val.as_deref())?,
                    "SKIP_LOCKED" => a.skip_locked = bool_opt(&opt, val.as_deref())?,
                    other => {
                        return Err(SqlError::syntax(format!(
                            "unrecognized ANALYZE option \"{}\"",
                            other.to_lowercase()
                        )))
                    }
                }
                if self.eat(&Token::RParen) {
                    break;
                }
                self.expect(&Token::Comma)?;
            }
        } else {
            a.verbose = self.eat_kw("VERBOSE");
        }
        a.tables = self.table_list()?;
        Ok(a)
    }

    fn copy(&mut self) -> Result<CopyCmd, SqlError> {
        if self.peek() == Some(&Token::LParen) {
            return Err(SqlError::unsupported("COPY (query) TO"));
        }
        let table = self.name()?;
        let mut columns = Vec::new();
        if self.eat(&Token::LParen) {
            loop {
                columns.push(self.ident()?);
                if self.eat(&Token::RParen) {
                    break;
                }
                self.expect(&Token::Comma)?;
            }
        }
        let from_stdin = if self.eat_kw("FROM") {
            if !self.eat_kw("STDIN") {
                return Err(SqlError::unsupported("COPY FROM a file (only FROM STDIN)"));
            }
            true
        } else if self.eat_kw("TO") {
            if !self.eat_kw("STDOUT") {
                return Err(SqlError::unsupported("COPY TO a file (only TO STDOUT)"));
            }
            false
        } else {
            return Err(self.err());
        };
        let mut c = CopyCmd {
            table,
            columns,
            from_stdin,
            format: CopyFormat::Text,
            freeze: false,
            delimiter: '\t',
            null: "\\N".into(),
            header: false,
            quote: '"',
            escape: '"',
        };
        let mut delimiter = None;
        let mut null = None;
        self.eat_kw("WITH");
        if self.eat(&Token::LParen) {
            loop {
                let opt = self.keyword().ok_or_else(|| self.err())?;
                self.i += 1;
                let val = if matches!(self.peek(), Some(Token::Comma | Token::RParen)) { None } else { self.value() };
                match opt.as_str() {
                    "FORMAT" => {
                        c.format = match val.as_deref() {
                            Some("text") => CopyFormat::Text,
                            Some("csv") => CopyFormat::Csv,
                            Some("binary") => return Err(SqlError::unsupported("COPY in binary format")),
                            _ => {
                                return Err(SqlError::syntax(format!(
                                    "COPY format \"{}\" not recognized",
                                    val.unwrap_or_default()
                                )))
                            }
                        }
                    }
                    "FREEZE" => c.freeze = bool_opt(&opt, val.as_deref())?,
                    "HEADER" => c.header = bool_opt(&opt, val.as_deref())?,
                    "DELIMITER" => delimiter = Some(single_char(&opt, val)?),
                    "NULL" => null = Some(val.unwrap_or_default()),
                    "QUOTE" => c.quote = single_char(&opt, val)?,
                    "ESCAPE" => c.escape = single_char(&opt, val)?,
                    "ENCODING" => {
                        let e = val.unwrap_or_default().to_ascii_lowercase().replace('-', "");
                        if e != "utf8" && e != "unicode" {
                            return Err(SqlError::unsupported(format!("COPY encoding \"{e}\" (only UTF8)")));
                        }
                    }
                    other => {
                        return Err(SqlError::syntax(format!("option \"{}\" not recognized", other.to_lowercase())))
                    }
                }
                if self.eat(&Token::RParen) {
                    break;
                }
                self.expect(&Token::Comma)?;
            }
        } else {
            // The pre-9.0 spellings psql's \copy still produces: CSV, HEADER, DELIMITER 'x', NULL 'x'.
            while !self.done() {
                if self.eat_kw("CSV") {
                    c.format = CopyFormat::Csv;
                } else if self.eat_kw("HEADER") {
                    c.header = true;
                } else if self.eat_kw("FREEZE") {
                    c.freeze = true;
                } else if self.eat_kw("DELIMITER") {
                    self.eat_kw("AS");
                    delimiter = Some(single_char("DELIMITER", self.value())?);
                } else if self.eat_kw("NULL") {
                    self.eat_kw("AS");
                    null = Some(self.value().unwrap_or_default());
                } else {
                    return Err(self.err());
                }
            }
        }
        if !self.done() {
            return Err(self.err());
        }
        if c.format == CopyFormat::Csv {
            c.delimiter = ',';
            c.null = String::new();
        }
        if let Some(d) = delimiter {
            c.delimiter = d;
        }
        if let Some(n) = null {
            c.null = n;
        }
        Ok(c)
    }
}

fn bool_opt(opt: &str, v: Option<&str>) -> Result<bool, SqlError> {
    match v.map(str::to_ascii_lowercase).as_deref() {
        None | Some("on" | "true" | "1" | "yes") => Ok(true),
        Some("off" | "false" | "0" | "no") => Ok(false),
        Some(x) => Err(SqlError::syntax(format!("{} requires a Boolean value, got \"{x}\"", opt.to_lowercase()))),
    }
}

fn single_char(opt: &str, v: Option<String>) -> Result<char, SqlError> {
    let v = v.unwrap_or_default();
    let mut it = v.chars();
    match (it.next(), it.next()) {
        (Some(c), None) => Ok(c),
        _ => Err(SqlError::new("22023", format!("COPY {} must be a single one-byte character", opt.to_lowercase()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_outside_quotes_and_comments() {
        let s = split_statements("select ';'; -- a; b\nselect $$x;y$$; /* ; */ select 1;;");
        assert_eq!(s.len(), 3);
        assert_eq!(s[0], "select ';'");
    }

    #[test]
    fn vacuum_options_of_postgresql_15() {
        let Stmt::Vacuum(v) = parse_one(
            "VACUUM (VERBOSE, FREEZE false, INDEX_CLEANUP off, TRUNCATE 0, PARALLEL 2, SKIP_LOCKED, \
             PROCESS_TOAST, DISABLE_PAGE_SKIPPING, ANALYZE) public.t, u (a)",
        )
        .unwrap() else {
            panic!()
        };
        assert!(
            v.verbose
                && !v.freeze
                && v.skip_locked
                && v.process_toast == Some(true)
                && v.disable_page_skipping
                && v.analyze
        );
        assert_eq!(v.index_cleanup.as_deref(), Some("off"));
        assert_eq!((v.truncate, v.parallel), (Some(false), Some(2)));
        assert_eq!(v.tables, vec!["t", "u"]);
        let Stmt::Vacuum(v) = parse_one("vacuum analyze pgbench_branches").unwrap() else { panic!() };
        assert!(v.analyze && v.tables == ["pgbench_branches"]);
        assert!(parse_one("vacuum (bogus) t").is_err());
    }

    #[test]
    fn pgbench_copy_and_checkpoint() {
        let Stmt::Copy(c) = parse_one("copy pgbench_accounts from stdin with (freeze on)").unwrap() else { panic!() };
        assert!(c.freeze && c.from_stdin && c.format == CopyFormat::Text);
        let Stmt::Copy(c) = parse_one("COPY t (a, b) TO STDOUT WITH (FORMAT csv, HEADER)").unwrap() else { panic!() };
        assert!(!c.from_stdin && c.header && c.delimiter == ',' && c.columns == ["a", "b"]);
        assert!(matches!(parse_one("CHECKPOINT").unwrap(), Stmt::Checkpoint));
        let alter = |sql: &str| match parse_one(sql).unwrap() {
            Stmt::AlterSystem { name, value } => (name, value),
            s => panic!("{sql}: {s:?}"),
        };
        assert_eq!(
            alter("ALTER SYSTEM SET autovacuum_naptime = '1s'"),
            ("autovacuum_naptime".into(), Some("1s".into()))
        );
        assert_eq!(alter("alter system set lock_timeout to -1"), ("lock_timeout".into(), Some("-1".into())));
        assert_eq!(alter("ALTER SYSTEM SET autovacuum TO on"), ("autovacuum".into(), Some("on".into())));
        assert_eq!(alter("ALTER SYSTEM SET autovacuum TO DEFAULT"), ("autovacuum".into(), None));
        assert_eq!(alter("ALTER SYSTEM RESET ALL"), ("all".into(), None));
        assert!(parse_one("ALTER SYSTEM SET x = 1 2").is_err());
        assert!(parse_one("ALTER SYSTEM SET x").is_err());
        assert!(parse_one("ALTER SYSTEM").is_err());
        let publication = |sql: &str| match parse_one(sql).unwrap() {
            Stmt::Publication(p) => p,
            other => panic!("{sql}: {other:?}"),
        };
        assert_eq!(
            publication("CREATE PUBLICATION p FOR ALL TABLES"),
            PublicationCmd::Create { name: "p".into(), tables: None, publish: None }
        );
        assert_eq!(
            publication("create publication \"P\" for table a, public.b with (publish = 'insert, delete')"),
            PublicationCmd::Create {
                name: "P".into(),
                tables: Some(vec!["a".into(), "b".into()]),
                publish: Some("insert, delete".into())
            }
        );
        assert_eq!(
            publication("ALTER PUBLICATION p ADD TABLE c"),
            PublicationCmd::AddTables { name: "p".into(), tables: vec!["c".into()] }
        );
        assert_eq!(
            publication("ALTER PUBLICATION p SET (publish = 'insert')"),
            PublicationCmd::SetPublish { name: "p".into(), publish: "insert".into() }
        );
        assert_eq!(
            publication("DROP PUBLICATION IF EXISTS p, q"),
            PublicationCmd::Drop { names: vec!["p".into(), "q".into()], if_exists: true }
        );
        assert_eq!(parse_one("CREATE PUBLICATION p FOR TABLE a (x)").unwrap_err().code, "0A000");
        assert_eq!(parse_one("CREATE PUBLICATION p FOR TABLES IN SCHEMA public").unwrap_err().code, "0A000");
        assert_eq!(parse_one("CREATE PUBLICATION p WITH (nonsense = 1)").unwrap_err().code, "42601");
    }
}
