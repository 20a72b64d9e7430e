//! The `test_decoding` output plugin: PostgreSQL 15's `contrib/test_decoding` text lines.
//!
//! ```text
//! BEGIN 727
//! table public.t: INSERT: a[integer]:1 b[text]:'one'
//! table public.t: UPDATE: old-key: a[integer]:1 new-tuple: a[integer]:2 b[text]:'uno'
//! table public.t: DELETE: a[integer]:2
//! message: transactional: 1 prefix: pfx, sz: 5 content:hello
//! table public.t, public.u: TRUNCATE: restart_seqs cascade
//! COMMIT 727 (at 2026-11-21 04:24:28.320101+00)
//! ```
//!
//! Options (values as PostgreSQL's `parse_bool` reads them; a missing value means true):
//! `include-xids` (default on), `include-timestamp`, `skip-empty-xacts`, `only-local` and
//! `include-rewrites` (accepted: the engine has no replication origins and no table rewrites),
//! `force-binary` (accepted when false; the SQL functions return text), `stream-changes`
//! (in-progress transactions the reorder buffer evicts are streamed). Anything else is
//! PostgreSQL's error.
//!
//! Streamed transactions print PostgreSQL 15's stream lines, which show no row data (the
//! transaction may still roll back):
//!
//! ```text
//! opening a streamed block for transaction TXN 727
//! streaming change for TXN 727
//! streaming message: transactional: 1 prefix: pfx, sz: 5
//! streaming truncate for TXN 727
//! closing a streamed block for transaction TXN 727
//! committing streamed transaction TXN 727
//! aborting streamed (sub)transaction TXN 728
//! ```
//!
//! With `include-xids=0` they end at "for transaction" (`streaming change for transaction`,
//! `committing streamed transaction`). With `skip-empty-xacts` a block's opening line waits
//! for its first change (a block of messages alone has neither opening nor closing line),
//! and a stream commit or abort of a transaction that streamed no change prints nothing.
//!
//! Values print as `print_literal` does: integers and floats bare, booleans `true`/`false`,
//! everything else single-quoted with quotes doubled; NULLs as `null`, skipped in an old key
//! or old row. Column names go through `quote_identifier`, type names as `format_type_be`,
//! once per relation: the plugin keeps each relation's printed names until the decoder says
//! the relation changed (`OutputPlugin::relation_changed`), and writes each row's values
//! straight into its line.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::logical::{Output, OutputPlugin, RelInfo, RowData, TxnInfo};
use super::sqltypes::{self, columns_of, ColumnTypes, SqlColumn, ValueFormat};
use crate::error::{Error, Result};
use crate::heap::truncate::TruncateRecord;
use crate::heap::tuple::{Type, ValueRef};
use crate::pgtext;
use crate::types::{Lsn, Oid, Xid};

#[derive(Clone, Debug)]
pub struct TestDecoding {
    include_xids: bool,
    include_timestamp: bool,
    skip_empty_xacts: bool,
    stream_changes: bool,
    /// Whether the current transaction wrote its BEGIN yet (skip-empty-xacts defers it).
    wrote_begin: bool,
    /// Whether the current streamed block wrote a change yet, and the streamed transactions
    /// that did (test_decoding's `stream_wrote_changes` and per-transaction
    /// `xact_wrote_changes`).
    stream_wrote_changes: bool,
    streamed_wrote: FxHashMap<Xid, bool>,
    /// Each relation's names as printed, made once per relation (and again after the decoder
    /// says it changed, [`OutputPlugin::relation_changed`]).
    rel_text: FxHashMap<Oid, RelText>,
    /// The SQL types of the columns, when a layer above the engine gives them.
    types: Option<std::sync::Arc<dyn ColumnTypes>>,
}

/// A relation's fixed text: `table ns.name:` and each column's ` name[type]:`, names quoted
/// by `quote_identifier` (which scans the keywords: once per relation, not per row).
#[derive(Clone, Debug)]
struct RelText {
    table: String,
    columns: Vec<String>,
    sql: Vec<SqlColumn>,
}

impl RelText {
    fn new(rel: &RelInfo, types: Option<&std::sync::Arc<dyn ColumnTypes>>) -> RelText {
        let table = format!("table {}.{}:", quote_identifier(&rel.namespace), quote_identifier(&rel.name));
        let sql = columns_of(types, rel);
        let columns = rel
            .schema
            .columns
            .iter()
            .zip(&sql)
            .map(|(c, t)| format!(" {}[{}]:", quote_identifier(&c.name), t.type_name))
            .collect();
        RelText { table, columns, sql }
    }
}

/// PostgreSQL's `parse_bool`: on/off, true/false, yes/no, 1/0 and unique prefixes.
pub fn parse_bool(v: &str) -> Option<bool> {
    let l = v.trim().to_ascii_lowercase();
    let is = |word: &str, min: usize| l.len() >= min && word.starts_with(&l);
    if is("true", 1) || is("yes", 1) || l == "on" || l == "1" {
        Some(true)
    } else if is("false", 1) || is("no", 1) || l == "off" || is("off", 2) || l == "0" {
        Some(false)
    } else {
        None
    }
}

impl TestDecoding {
    /// The plugin with `options` (`name`, optional `value`), or PostgreSQL's error.
    pub fn new(options: &[(String, Option<String>)]) -> Result<TestDecoding> {
        let mut p = TestDecoding {
            include_xids: true,
            include_timestamp: false,
            skip_empty_xacts: false,
            stream_changes: false,
            wrote_begin: false,
            stream_wrote_changes: false,
            streamed_wrote: FxHashMap::default(),
            rel_text: FxHashMap::default(),
            types: None,
        };
        for (name, value) in options {
            let flag = || -> Result<bool> {
                match value {
                    None => Ok(true),
                    Some(v) => parse_bool(v).ok_or_else(|| {
                        Error::invalid(format!("could not parse value \"{v}\" for parameter \"{name}\""))
                    }),
                }
            };
            match name.as_str() {
                "include-xids" => p.include_xids = flag()?,
                "include-timestamp" => p.include_timestamp = flag()?,
                "skip-empty-xacts" => p.skip_empty_xacts = flag()?,
                "stream-changes" => p.stream_changes = flag()?,
                "only-local" | "include-rewrites" => {
                    flag()?;
                }
                "force-binary" => {
                    if flag()? {
                        return Err(Error::invalid(
                            "logical decoding output plugin \"test_decoding\" produces binary output, but function \
                             \"pg_logical_slot_get_changes(name,pg_lsn,integer,text[])\" expects textual data",
                        ));
                    }
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "option \"{name}\" = \"{}\" is unknown",
                        value.as_deref().unwrap_or("(null)")
                    )))
                }
            }
        }
        Ok(p)
    }

    fn begin_line(&self, txn: &TxnInfo) -> String {
        if self.include_xids {
            format!("BEGIN {}", txn.xid.0)
        } else {
            "BEGIN".into()
        }
    }

    /// BEGIN, at the transaction's first LSN, or (deferred by skip-empty-xacts) at the LSN of
    /// the change that writes it, as PostgreSQL's plugin does.
    fn write_begin(&mut self, out: &mut Output, txn: &TxnInfo, lsn: Lsn) {
        out.write(lsn, txn.xid, self.begin_line(txn).into_bytes());
        self.wrote_begin = true;
    }

    /// A stream line: `what` followed by ` TXN xid` (`TXN` spelled as given), or by `bare`
    /// without xids.
    fn stream_line(&self, what: &str, xid: Xid, bare: &str) -> Vec<u8> {
        if self.include_xids {
            format!("{what} TXN {}", xid.0).into_bytes()
        } else {
            format!("{what}{bare}").into_bytes()
        }
    }

    fn write_stream_start(&self, out: &mut Output, top: Xid, lsn: Lsn) {
        out.write(lsn, top, self.stream_line("opening a streamed block for transaction", top, ""));
    }
}

impl OutputPlugin for TestDecoding {
    fn begin(&mut self, out: &mut Output, txn: &TxnInfo) -> Result<()> {
        self.wrote_begin = false;
        if !self.skip_empty_xacts {
            self.write_begin(out, txn, txn.first_lsn);
        }
        Ok(())
    }

    fn change(&mut self, out: &mut Output, txn: &TxnInfo, lsn: Lsn, rel: &RelInfo, row: &RowData) -> Result<()> {
        if !self.wrote_begin {
            self.write_begin(out, txn, lsn);
        }
        let names = self.rel_text(rel);
        let mut s =
            Vec::with_capacity(names.table.len() + 16 + names.columns.iter().map(|c| c.len() + 12).sum::<usize>());
        s.extend_from_slice(names.table.as_bytes());
        match row {
            RowData::Insert { new } => {
                s.extend_from_slice(b" INSERT:");
                tuple(&mut s, rel, names, new, false);
            }
            RowData::Update { old, new, .. } => {
                s.extend_from_slice(b" UPDATE:");
                if let Some(old) = old {
                    s.extend_from_slice(b" old-key:");
                    tuple(&mut s, rel, names, old, true);
                    s.extend_from_slice(b" new-tuple:");
                }
                tuple(&mut s, rel, names, new, false);
            }
            RowData::Delete { old, .. } => {
                s.extend_from_slice(b" DELETE:");
                match old {
                    Some(old) => tuple(&mut s, rel, names, old, true),
                    None => s.extend_from_slice(b" (no-tuple-data)"),
                }
            }
        }
        out.write(lsn, txn.xid, s);
        Ok(())
    }

    /// PostgreSQL's `pg_decode_truncate`: one line naming every table of the statement.
    fn truncate(
        &mut self,
        out: &mut Output,
        txn: &TxnInfo,
        lsn: Lsn,
        rels: &[Arc<RelInfo>],
        flags: &TruncateRecord,
    ) -> Result<()> {
        if !self.wrote_begin {
            self.write_begin(out, txn, lsn);
        }
        let names: Vec<String> =
            rels.iter().map(|r| format!("{}.{}", quote_identifier(&r.namespace), quote_identifier(&r.name))).collect();
        let mut s = format!("table {}: TRUNCATE:", names.join(", "));
        if flags.restart_seqs() {
            s.push_str(" restart_seqs");
        }
        if flags.cascade() {
            s.push_str(" cascade");
        }
        if !flags.restart_seqs() && !flags.cascade() {
            s.push_str(" (no-flags)");
        }
        out.write(lsn, txn.xid, s.into_bytes());
        Ok(())
    }

    fn message(
        &mut self,
        out: &mut Output,
        txn: Option<&TxnInfo>,
        lsn: Lsn,
        transactional: bool,
        prefix: &str,
        content: &[u8],
    ) -> Result<()> {
        let line = format!(
            "message: transactional: {} prefix: {prefix}, sz: {} content:{}",
            u8::from(transactional),
            content.len(),
            String::from_utf8_lossy(content)
        );
        out.write(lsn, txn.map_or(Xid::INVALID, |t| t.xid), line.into_bytes());
        Ok(())
    }

    fn commit(&mut self, out: &mut Output, txn: &TxnInfo) -> Result<()> {
        if self.skip_empty_xacts && !self.wrote_begin {
            return Ok(());
        }
        let mut s = if self.include_xids { format!("COMMIT {}", txn.xid.0) } else { "COMMIT".into() };
        if self.include_timestamp {
            s.push_str(&format!(" (at {}+00)", timestamptz(txn.commit_time_us)));
        }
        out.write(txn.end_lsn, txn.xid, s.into_bytes());
        Ok(())
    }

    fn streaming(&self) -> bool {
        self.stream_changes
    }

    fn relation_changed(&mut self, oid: Oid) {
        self.rel_text.remove(&oid);
    }

    fn stream_start(&mut self, out: &mut Output, top: Xid, lsn: Lsn) -> Result<()> {
        self.streamed_wrote.entry(top).or_insert(false);
        self.stream_wrote_changes = false;
        if !self.skip_empty_xacts {
            self.write_stream_start(out, top, lsn);
        }
        Ok(())
    }

    fn stream_stop(&mut self, out: &mut Output, top: Xid, lsn: Lsn) -> Result<()> {
        if self.skip_empty_xacts && !self.stream_wrote_changes {
            return Ok(());
        }
        out.write(lsn, top, self.stream_line("closing a streamed block for transaction", top, ""));
        Ok(())
    }

    fn stream_change(
        &mut self,
        out: &mut Output,
        top: Xid,
        _xid: Xid,
        lsn: Lsn,
        _rel: &RelInfo,
        _row: &RowData,
    ) -> Result<()> {
        if self.skip_empty_xacts && !self.stream_wrote_changes {
            self.write_stream_start(out, top, lsn);
        }
        self.stream_wrote_changes = true;
        self.streamed_wrote.insert(top, true);
        out.write(lsn, top, self.stream_line("streaming change for", top, " transaction"));
        Ok(())
    }

    /// `pg_decode_stream_truncate`: like a streamed change, no detail.
    fn stream_truncate(
        &mut self,
        out: &mut Output,
        top: Xid,
        _xid: Xid,
        lsn: Lsn,
        _rels: &[Arc<RelInfo>],
        _flags: &TruncateRecord,
    ) -> Result<()> {
        if self.skip_empty_xacts && !self.stream_wrote_changes {
            self.write_stream_start(out, top, lsn);
        }
        self.stream_wrote_changes = true;
        self.streamed_wrote.insert(top, true);
        out.write(lsn, top, self.stream_line("streaming truncate for", top, " transaction"));
        Ok(())
    }

    fn stream_message(
        &mut self,
        out: &mut Output,
        top: Xid,
        _xid: Xid,
        lsn: Lsn,
        transactional: bool,
        prefix: &str,
        content: &[u8],
    ) -> Result<()> {
        let mut line = format!(
            "streaming message: transactional: {} prefix: {prefix}, sz: {}",
            u8::from(transactional),
            content.len()
        );
        if !transactional {
            line.push_str(" content:");
            line.push_str(&String::from_utf8_lossy(content));
        }
        out.write(lsn, top, line.into_bytes());
        Ok(())
    }

    fn stream_abort(&mut self, out: &mut Output, top: Xid, xid: Xid, lsn: Lsn) -> Result<()> {
        let wrote = if xid == top {
            self.streamed_wrote.remove(&top).unwrap_or(false)
        } else {
            self.streamed_wrote.get(&top).copied().unwrap_or(false)
        };
        if self.skip_empty_xacts && !wrote {
            return Ok(());
        }
        out.write(lsn, xid, self.stream_line("aborting streamed (sub)transaction", xid, ""));
        Ok(())
    }

    fn stream_commit(&mut self, out: &mut Output, txn: &TxnInfo) -> Result<()> {
        let wrote = self.streamed_wrote.remove(&txn.xid).unwrap_or(false);
        if self.skip_empty_xacts && !wrote {
            return Ok(());
        }
        let mut line = self.stream_line("committing streamed transaction", txn.xid, "");
        if self.include_timestamp {
            line.extend_from_slice(format!(" (at {}+00)", timestamptz(txn.commit_time_us)).as_bytes());
        }
        out.write(txn.end_lsn, txn.xid, line);
        Ok(())
    }

    fn two_phase(&self) -> bool {
        true
    }

    /// test_decoding's own rule: a GID containing `_nodecode` is decoded at COMMIT PREPARED.
    fn filter_prepare(&mut self, _xid: Xid, gid: &str) -> bool {
        gid.contains("_nodecode")
    }

    fn begin_prepare(&mut self, out: &mut Output, txn: &TxnInfo, _gid: &str) -> Result<()> {
        self.begin(out, txn)
    }

    fn prepare(&mut self, out: &mut Output, txn: &TxnInfo, gid: &str) -> Result<()> {
        if self.skip_empty_xacts && !self.wrote_begin {
            return Ok(());
        }
        out.write(txn.end_lsn, txn.xid, self.two_phase_line("PREPARE TRANSACTION", gid, txn.xid, txn.commit_time_us));
        Ok(())
    }

    fn commit_prepared(&mut self, out: &mut Output, txn: &TxnInfo, gid: &str) -> Result<()> {
        out.write(txn.end_lsn, txn.xid, self.two_phase_line("COMMIT PREPARED", gid, txn.xid, txn.commit_time_us));
        Ok(())
    }

    fn rollback_prepared(
        &mut self,
        out: &mut Output,
        txn: &TxnInfo,
        gid: &str,
        _prepare_end_lsn: Lsn,
        _prepare_time_us: i64,
    ) -> Result<()> {
        out.write(txn.end_lsn, txn.xid, self.two_phase_line("ROLLBACK PREPARED", gid, txn.xid, txn.commit_time_us));
        Ok(())
    }

    fn stream_prepare(&mut self, out: &mut Output, txn: &TxnInfo, gid: &str) -> Result<()> {
        let wrote = self.streamed_wrote.remove(&txn.xid).unwrap_or(false);
        if self.skip_empty_xacts && !wrote {
            return Ok(());
        }
        let what =
            if self.include_xids { "preparing streamed transaction TXN" } else { "preparing streamed transaction" };
        out.write(txn.end_lsn, txn.xid, self.two_phase_line(what, gid, txn.xid, txn.commit_time_us));
        Ok(())
    }
}

impl TestDecoding {
    /// Prints the columns' SQL types and values as `types` gives them (see
    /// [`super::sqltypes`]).
    pub fn with_column_types(mut self, types: Option<std::sync::Arc<dyn ColumnTypes>>) -> TestDecoding {
        self.types = types;
        self.rel_text.clear();
        self
    }

    /// `rel`'s printed names, made when first needed or when `rel` changed (a hot path: once
    /// per row).
    fn rel_text(&mut self, rel: &RelInfo) -> &RelText {
        if self.rel_text.get(&rel.oid).is_none_or(|t| t.columns.len() != rel.schema.columns.len()) {
            self.rel_text.insert(rel.oid, RelText::new(rel, self.types.as_ref()));
        }
        &self.rel_text[&rel.oid]
    }

    /// A two-phase line: `what 'gid'`, then `, txid N` and ` (at …)` as the options say.
    fn two_phase_line(&self, what: &str, gid: &str, xid: Xid, time_us: i64) -> Vec<u8> {
        let mut s = format!("{what} {}", pgtext::quote_literal(gid));
        if self.include_xids {
            s.push_str(&format!(", txid {}", xid.0));
        }
        if self.include_timestamp {
            s.push_str(&format!(" (at {}+00)", timestamptz(time_us)));
        }
        s.into_bytes()
    }
}

/// A commit time as `timestamptz_to_str` prints it in UTC, without the zone.
fn timestamptz(us: i64) -> String {
    pgtext::timestamp_out(us)
}

/// Appends ` name[type]:value` per column; `skip_nulls` for old keys and rows. Values are
/// written straight into the line (a hot path: once per column of every row).
fn tuple(s: &mut Vec<u8>, rel: &RelInfo, names: &RelText, values: &[ValueRef<'_>], skip_nulls: bool) {
    for (((c, name), sql), &v) in rel.schema.columns.iter().zip(&names.columns).zip(&names.sql).zip(values) {
        if skip_nulls && v.is_null() {
            continue;
        }
        s.extend_from_slice(name.as_bytes());
        if sql.format != ValueFormat::Stored {
            match sqltypes::text(v, sql.format) {
                None => s.extend_from_slice(b"null"),
                Some(text) if sql.bare() => s.extend_from_slice(text.as_bytes()),
                Some(text) => literal(s, Type::Text, text.as_bytes()),
            }
            continue;
        }
        match v {
            ValueRef::Null => s.extend_from_slice(b"null"),
            ValueRef::Int4(x) => push_int(s, i64::from(x)),
            ValueRef::Int8(x) => push_int(s, x),
            ValueRef::Text(t) => literal(s, c.ty, t),
            v => match pgtext::value_text(v) {
                None => s.extend_from_slice(b"null"),
                Some(text) => literal(s, c.ty, text.as_bytes()),
            },
        }
    }
}

/// An integer in decimal, as `int4out` and `int8out` write it.
fn push_int(s: &mut Vec<u8>, v: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = v.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        s.push(b'-');
    }
    s.extend_from_slice(&digits[at..]);
}

/// `print_literal`: numbers bare, booleans as words, the rest quoted.
fn literal(s: &mut Vec<u8>, ty: Type, text: &[u8]) {
    match ty {
        Type::Int4 | Type::Int8 | Type::Float8 => s.extend_from_slice(text),
        Type::Bool => s.extend_from_slice(if text == b"t" { b"true" } else { b"false" }),
        _ => {
            // Byte by byte: a quote is one byte in UTF-8 and never part of another character.
            s.push(b'\'');
            for &b in text {
                if b == b'\'' {
                    s.push(b'\'');
                }
                s.push(b);
            }
            s.push(b'\'');
        }
    }
}

/// PostgreSQL's `quote_identifier`: bare when lower-case letters, digits and underscores not
/// starting with a digit and not a reserved word; otherwise double-quoted, quotes doubled.
pub fn quote_identifier(name: &str) -> String {
    let safe = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && RESERVED.binary_search(&name).is_err();
    if safe {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// PostgreSQL's keywords that `quote_identifier` quotes (every category but unreserved:
/// reserved, type/function-name and column-name keywords), sorted for a binary search.
const RESERVED: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "between",
    "bigint",
    "binary",
    "bit",
    "boolean",
    "both",
    "case",
    "cast",
    "char",
    "character",
    "check",
    "coalesce",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "dec",
    "decimal",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "exists",
    "extract",
    "false",
    "fetch",
    "float",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "greatest",
    "group",
    "grouping",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "inout",
    "int",
    "integer",
    "intersect",
    "interval",
    "into",
    "is",
    "isnull",
    "join",
    "json",
    "lateral",
    "leading",
    "least",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "national",
    "natural",
    "nchar",
    "none",
    "normalize",
    "not",
    "notnull",
    "null",
    "nullif",
    "numeric",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "out",
    "outer",
    "overlaps",
    "overlay",
    "placing",
    "position",
    "precision",
    "primary",
    "real",
    "references",
    "returning",
    "right",
    "row",
    "select",
    "session_user",
    "setof",
    "similar",
    "smallint",
    "some",
    "substring",
    "symmetric",
    "table",
    "tablesample",
    "then",
    "time",
    "timestamp",
    "to",
    "trailing",
    "treat",
    "trim",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "values",
    "varchar",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
    "xmlattributes",
    "xmlconcat",
    "xmlelement",
    "xmlexists",
    "xmlforest",
    "xmlnamespaces",
    "xmlparse",
    "xmlpi",
    "xmlroot",
    "xmlserialize",
    "xmltable",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_are_sorted_for_binary_search() {
        assert!(RESERVED.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn identifiers_and_literals() {
        assert_eq!(quote_identifier("abc_1"), "abc_1");
        assert_eq!(quote_identifier("Abc"), "\"Abc\"");
        assert_eq!(quote_identifier("user"), "\"user\"");
        assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
        let mut s = Vec::new();
        literal(&mut s, Type::Text, b"it's");
        literal(&mut s, Type::Bool, b"f");
        literal(&mut s, Type::Float8, b"1.5");
        push_int(&mut s, i64::MIN);
        push_int(&mut s, 0);
        push_int(&mut s, -7);
        assert_eq!(s, b"'it''s'false1.5-92233720368547758080-7");
        assert_eq!(parse_bool("of"), Some(false));
        assert_eq!(parse_bool("o"), None);
        assert_eq!(parse_bool("Y"), Some(true));
    }

    #[test]
    fn unknown_and_bad_options_are_postgresql_errors() {
        let e = TestDecoding::new(&[("nope".into(), Some("1".into()))]).unwrap_err().to_string();
        assert!(e.contains("option \"nope\" = \"1\" is unknown"), "{e}");
        let e = TestDecoding::new(&[("include-xids".into(), Some("maybe".into()))]).unwrap_err().to_string();
        assert!(e.contains("could not parse value \"maybe\" for parameter \"include-xids\""), "{e}");
    }
}
