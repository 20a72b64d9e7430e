//! COPY FROM STDIN and COPY TO STDOUT, in PostgreSQL's text and CSV formats.
//!
//! Text format: one row per line, columns separated by the delimiter (tab), `\N` for NULL,
//! and backslash escapes (`\t`, `\n`, `\r`, `\\`, `\b`, `\f`, `\v`, octal `\ooo`, hex `\xhh`); a
//! line `\.` ends the data. CSV: fields separated by the delimiter (comma), quoted with `"`
//! when they hold the delimiter, a quote or a line break (a quote inside doubled), NULL as
//! an unquoted empty field; an optional header line.
//!
//! Rows are inserted as the data arrives, a thousand at a time through the engine's
//! multi-insert (one WAL record per page, as PostgreSQL's COPY does), in the session's
//! transaction; outside BEGIN the COPY commits at CopyDone and rolls back at CopyFail or on
//! the first bad row. `FREEZE` is accepted: the engine freezes through VACUUM (its eager
//! policy freezes a freshly loaded page the first time it is set all-visible), so the option
//! changes nothing here.

use settledb::{Transaction, Value};

use crate::catalog::ColumnDef;
use crate::error::SqlError;
use crate::interrupt::Interrupts;
use crate::parse::{CopyCmd, CopyFormat};
use crate::plan::Target;
use crate::session::{datums, Cx, Outcome};
use crate::types::parse_text;
use crate::Shared;

const BATCH_ROWS: usize = 1000;

/// A COPY FROM STDIN in progress.
pub struct CopyIn<'a> {
    sh: &'a Shared,
    /// The columns the data leaves out that have a `DEFAULT`, and its expression.
    defaults: Vec<(usize, sqlparser::ast::Expr)>,
    target: Target,
    /// Positions of the columns the data carries, in order.
    positions: Vec<usize>,
    cmd: CopyCmd,
    /// Bytes of a line not complete yet (text) or all the data (CSV, which may quote newlines).
    pending: Vec<u8>,
    rows: Vec<Vec<Value>>,
    count: u64,
    line_no: u64,
    ended: bool,
    header_skipped: bool,
}

fn positions(t: &Target, cmd: &CopyCmd) -> Result<Vec<usize>, SqlError> {
    if cmd.columns.is_empty() {
        return Ok((0..t.cols.len()).collect());
    }
    cmd.columns
        .iter()
        .map(|n| {
            t.cols.iter().position(|c| &c.name == n).ok_or_else(|| {
                SqlError::new("42703", format!("column \"{n}\" of relation \"{}\" does not exist", t.name))
            })
        })
        .collect()
}

impl<'a> CopyIn<'a> {
    pub fn new(sh: &'a Shared, cmd: &CopyCmd) -> Result<CopyIn<'a>, SqlError> {
        let target = Target::open(sh, &cmd.table, None)?;
        if target.is_catalog() {
            return Err(SqlError::new("42501", "permission denied for table pg_class"));
        }
        let positions = positions(&target, cmd)?;
        let defaults = sh
            .catalog
            .defaults(&target.table)
            .map(|d| {
                d.iter()
                    .enumerate()
                    .filter(|(p, _)| !positions.contains(p))
                    .filter_map(|(p, e)| e.clone().map(|e| (p, e)))
                    .collect()
            })
            .unwrap_or_default();
        Ok(CopyIn {
            sh,
            defaults,
            target,
            positions,
            cmd: cmd.clone(),
            pending: Vec::new(),
            rows: Vec::new(),
            count: 0,
            line_no: 0,
            ended: false,
            header_skipped: false,
        })
    }

    pub fn columns(&self) -> usize {
        self.positions.len()
    }

    /// A CopyData message's bytes; complete lines are parsed and inserted in batches. Each
    /// message is an interruption point (cancel, `statement_timeout`).
    pub fn feed(&mut self, tx: &mut Transaction<'_>, data: &[u8], interrupts: &Interrupts) -> Result<(), SqlError> {
        interrupts.check()?;
        self.pending.extend_from_slice(data);
        if self.cmd.format == CopyFormat::Csv {
            return Ok(());
        }
        let Some(last_nl) = self.pending.iter().rposition(|&b| b == b'\n') else { return Ok(()) };
        let rest = self.pending.split_off(last_nl + 1);
        let complete = std::mem::replace(&mut self.pending, rest);
        self.text_lines(&complete)?;
        self.flush(tx, false)
    }

    pub fn finish(&mut self, tx: &mut Transaction<'_>, interrupts: &Interrupts) -> Result<u64, SqlError> {
        interrupts.check()?;
        let rest = std::mem::take(&mut self.pending);
        match self.cmd.format {
            CopyFormat::Text => self.text_lines(&rest)?,
            CopyFormat::Csv => self.csv(&rest)?,
        }
        self.flush(tx, true)?;
        Ok(self.count)
    }

    fn flush(&mut self, tx: &mut Transaction<'_>, all: bool) -> Result<(), SqlError> {
        if self.rows.len() >= BATCH_ROWS || (all && !self.rows.is_empty()) {
            let rows = std::mem::take(&mut self.rows);
            tx.insert_many(&self.target.table, &rows)?;
            crate::constraints::after_insert(self.sh, tx, &self.target, &rows)?;
            self.count += rows.len() as u64;
        }
        Ok(())
    }

    fn text_lines(&mut self, bytes: &[u8]) -> Result<(), SqlError> {
        let text = std::str::from_utf8(bytes).map_err(|_| SqlError::bad_utf8())?;
        // `split_terminator`: no empty piece after a final newline, none for empty input (the
        // rest at CopyDone is empty when the data ended with a newline).
        for line in text.split_terminator('\n') {
            if self.ended {
                break;
            }
            let line = line.strip_suffix('\r').unwrap_or(line);
            self.line_no += 1;
            if line == "\\." {
                self.ended = true;
                break;
            }
            if self.cmd.header && !self.header_skipped {
                self.header_skipped = true;
                continue;
            }
            let fields = split_text(line, self.cmd.delimiter, &self.cmd.null).map_err(|e| self.context(e))?;
            self.add_row(fields).map_err(|e| with_line(e, line))?;
        }
        Ok(())
    }

    fn csv(&mut self, bytes: &[u8]) -> Result<(), SqlError> {
        let text = std::str::from_utf8(bytes).map_err(|_| SqlError::bad_utf8())?;
        let records = split_csv(text, self.cmd.delimiter, self.cmd.quote, self.cmd.escape, &self.cmd.null)?;
        for (i, rec) in records.into_iter().enumerate() {
            self.line_no += 1;
            if i == 0 && self.cmd.header {
                continue;
            }
            if rec.len() == 1 && rec[0].as_deref() == Some("\\.") {
                break;
            }
            self.add_row(rec)?;
        }
        Ok(())
    }

    fn context(&self, e: SqlError) -> SqlError {
        let mut e = e;
        e.message = format!("{} (COPY {}, line {})", e.message, self.target.name, self.line_no);
        e
    }

    fn add_row(&mut self, fields: Vec<Option<String>>) -> Result<(), SqlError> {
        if fields.len() != self.positions.len() {
            let what = if fields.len() < self.positions.len() {
                "missing data for a column"
            } else {
                "extra data after last expected column"
            };
            return Err(self.context(SqlError::new("22P04", what)));
        }
        let mut row = vec![Value::Null; self.target.cols.len()];
        for (f, &p) in fields.into_iter().zip(&self.positions) {
            let c: &ColumnDef = &self.target.cols[p];
            row[p] = match f {
                None => {
                    if !c.nullable {
                        return Err(self.context(SqlError::new(
                            "23502",
                            format!(
                                "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                                c.name, self.target.name
                            ),
                        )));
                    }
                    Value::Null
                }
                Some(s) => {
                    parse_text(&s, c.ty).and_then(|d| d.to_stored(c.ty, &c.name)).map_err(|e| self.context(e))?
                }
            };
        }
        for (p, e) in &self.defaults {
            let c = &self.target.cols[*p];
            let d = crate::expr::eval(e, &crate::expr::Scope::empty(), &[], &mut DefaultEnv(self.sh), None)
                .and_then(|d| d.to_stored(c.ty, &c.name))
                .map_err(|e| self.context(e))?;
            row[*p] = d;
        }
        for (c, v) in self.target.cols.iter().zip(&row) {
            if !c.nullable && matches!(v, Value::Null) {
                return Err(self.context(SqlError::new(
                    "23502",
                    format!(
                        "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                        c.name, self.target.name
                    ),
                )));
            }
        }
        crate::constraints::check_stored(&self.target, &row).map_err(|e| self.context(e))?;
        self.rows.push(row);
        Ok(())
    }
}

/// What a COPY's column defaults may call: `nextval` (not `currval`: COPY does not note the
/// values in the session, which PostgreSQL's COPY does).
struct DefaultEnv<'a>(&'a Shared);

impl crate::expr::Env for DefaultEnv<'_> {
    fn param(&self, n: usize) -> Result<crate::types::Datum, SqlError> {
        crate::expr::param_at(&[], n)
    }

    fn session_function(
        &mut self,
        name: &str,
        args: &[crate::types::Datum],
    ) -> Option<Result<crate::types::Datum, SqlError>> {
        if name != "nextval" {
            return None;
        }
        let seq = args.first().and_then(crate::types::Datum::to_text)?;
        Some(self.0.sequences.nextval(&crate::sequence::name_of(&seq)).map(crate::types::Datum::Int))
    }
}

/// Adds the line an error is about, as PostgreSQL's context line quotes it (cut at 100
/// characters).
fn with_line(mut e: SqlError, line: &str) -> SqlError {
    let shown: String = line.chars().take(100).collect();
    let more = if shown.len() < line.len() { "..." } else { "" };
    e.message = format!("{}: \"{shown}{more}\"", e.message);
    e
}

/// Splits a text-format line into fields, undoing backslash escapes.
fn split_text(line: &str, delim: char, null: &str) -> Result<Vec<Option<String>>, SqlError> {
    let mut out = Vec::new();
    for raw in line.split(delim) {
        if raw == null {
            out.push(None);
            continue;
        }
        let mut s = String::with_capacity(raw.len());
        let mut it = raw.chars().peekable();
        while let Some(c) = it.next() {
            if c != '\\' {
                s.push(c);
                continue;
            }
            match it.next() {
                Some('t') => s.push('\t'),
                Some('n') => s.push('\n'),
                Some('r') => s.push('\r'),
                Some('b') => s.push('\u{8}'),
                Some('f') => s.push('\u{c}'),
                Some('v') => s.push('\u{b}'),
                Some('x') => {
                    let mut v = 0u32;
                    let mut n = 0;
                    while n < 2 {
                        match it.peek().and_then(|c| c.to_digit(16)) {
                            Some(d) => {
                                v = v * 16 + d;
                                it.next();
                                n += 1;
                            }
                            None => break,
                        }
                    }
                    if n == 0 {
                        s.push('x');
                    } else {
                        s.push(char::from_u32(v).unwrap_or('\u{fffd}'));
                    }
                }
                Some(d @ '0'..='7') => {
                    let mut v = d.to_digit(8).unwrap_or(0);
                    for _ in 0..2 {
                        match it.peek().and_then(|c| c.to_digit(8)) {
                            Some(x) => {
                                v = v * 8 + x;
                                it.next();
                            }
                            None => break,
                        }
                    }
                    s.push(char::from_u32(v).unwrap_or('\u{fffd}'));
                }
                Some(other) => s.push(other),
                None => return Err(SqlError::new("22P04", "unterminated backslash escape")),
            }
        }
        out.push(Some(s));
    }
    Ok(out)
}

/// Splits CSV data into records of fields (quoted fields may span lines).
fn split_csv(
    text: &str,
    delim: char,
    quote: char,
    escape: char,
    null: &str,
) -> Result<Vec<Vec<Option<String>>>, SqlError> {
    let mut records = Vec::new();
    let mut rec: Vec<Option<String>> = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut in_quotes = false;
    let mut any = false;
    let mut it = text.chars().peekable();
    let end_field = |rec: &mut Vec<Option<String>>, field: &mut String, quoted: &mut bool| {
        let f = std::mem::take(field);
        rec.push(if !*quoted && f == null { None } else { Some(f) });
        *quoted = false;
    };
    while let Some(c) = it.next() {
        any = true;
        if in_quotes {
            if c == escape && escape != quote && it.peek() == Some(&quote) {
                field.push(quote);
                it.next();
            } else if c == quote {
                if escape == quote && it.peek() == Some(&quote) {
                    field.push(quote);
                    it.next();
                } else {
                    in_quotes = false;
                }
            } else {
                field.push(c);
            }
        } else if c == quote {
            in_quotes = true;
            quoted = true;
        } else if c == delim {
            end_field(&mut rec, &mut field, &mut quoted);
        } else if c == '\n' || c == '\r' {
            if c == '\r' && it.peek() == Some(&'\n') {
                it.next();
            }
            end_field(&mut rec, &mut field, &mut quoted);
            records.push(std::mem::take(&mut rec));
            any = false;
        } else {
            field.push(c);
        }
    }
    if in_quotes {
        return Err(SqlError::new("22P04", "unterminated CSV quoted field"));
    }
    if any {
        end_field(&mut rec, &mut field, &mut quoted);
        records.push(rec);
    }
    Ok(records)
}

/// COPY ... TO STDOUT: every row of the table, one chunk per row.
pub fn copy_out(cx: &mut Cx<'_, '_>, c: &CopyCmd) -> Result<Outcome, SqlError> {
    let t = Target::open(cx.sh, &c.table, None)?;
    let pos = positions(&t, c)?;
    let rows = crate::plan::fetch(cx, &t, &crate::plan::Access::Seq)?;
    let csv = c.format == CopyFormat::Csv;
    let mut chunks = Vec::with_capacity(rows.len() + 1);
    if c.header {
        let names: Vec<String> = pos.iter().map(|&p| csv_field(&t.cols[p].name, c, csv)).collect();
        chunks.push(format!("{}\n", names.join(&c.delimiter.to_string())).into_bytes());
    }
    for (_, v) in rows {
        cx.interrupts.tick()?;
        let d = datums(&v, &t.cols);
        let fields: Vec<String> = pos
            .iter()
            .map(|&p| match d[p].to_text() {
                None => c.null.clone(),
                Some(s) if csv => csv_field(&s, c, true),
                Some(s) => escape_text(&s, c.delimiter),
            })
            .collect();
        chunks.push(format!("{}\n", fields.join(&c.delimiter.to_string())).into_bytes());
    }
    Ok(Outcome::CopyOut { columns: pos.len(), csv, chunks })
}

fn csv_field(s: &str, c: &CopyCmd, csv: bool) -> String {
    if !csv {
        return escape_text(s, c.delimiter);
    }
    let needs =
        s.is_empty() && c.null.is_empty() || s.contains(c.delimiter) || s.contains(c.quote) || s.contains(['\n', '\r']);
    if !needs {
        return s.to_string();
    }
    let q = c.quote.to_string();
    let doubled = format!("{}{}", c.escape, c.quote);
    format!("{q}{}{q}", s.replace(c.quote, &doubled))
}

fn escape_text(s: &str, delim: char) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' if delim == '\t' => out.push_str("\\t"),
            c if c == delim => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_fields_unescape() {
        let f = split_text("1\t\\N\ta\\tb\\\\c\t\\101", '\t', "\\N").unwrap();
        assert_eq!(f, vec![Some("1".into()), None, Some("a\tb\\c".into()), Some("A".into())]);
    }

    #[test]
    fn csv_quotes_span_lines() {
        let r = split_csv("1,\"a,\"\"b\nc\",\n2,,\"\"\n", ',', '"', '"', "").unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0], vec![Some("1".into()), Some("a,\"b\nc".into()), None]);
        assert_eq!(r[1], vec![Some("2".into()), None, Some(String::new())]);
    }
}
