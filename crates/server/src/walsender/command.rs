//! The replication commands a `replication=database` connection may send instead of SQL
//! (PostgreSQL 15's `repl_gram.y`, the subset that concerns logical slots), parsed from the
//! simple-query text.
//!
//! ```text
//! IDENTIFY_SYSTEM
//! READ_REPLICATION_SLOT slot
//! CREATE_REPLICATION_SLOT slot [TEMPORARY] LOGICAL plugin [( option [value] [, ...] )]
//! CREATE_REPLICATION_SLOT slot [TEMPORARY] LOGICAL plugin [EXPORT_SNAPSHOT|NOEXPORT_SNAPSHOT|USE_SNAPSHOT|TWO_PHASE]...
//! DROP_REPLICATION_SLOT slot [WAIT]
//! START_REPLICATION SLOT slot LOGICAL X/Y [( "name" ['value'] [, ...] )]
//! ```
//!
//! Names are bare (folded to lower case) or double-quoted; values are single-quoted strings,
//! numbers or bare words. Physical replication (`PHYSICAL`, `START_REPLICATION X/Y`,
//! `BASE_BACKUP`, `TIMELINE_HISTORY`) is recognised and refused.

use settledb::Lsn;

use crate::error::SqlError;

/// What `CREATE_REPLICATION_SLOT` does with a snapshot (`SNAPSHOT 'export'|'use'|'nothing'`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotAction {
    Export,
    Use,
    Nothing,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    IdentifySystem,
    ReadSlot { slot: String },
    CreateSlot { slot: String, temporary: bool, plugin: String, two_phase: bool, snapshot: SnapshotAction },
    DropSlot { slot: String, wait: bool },
    StartLogical { slot: String, start: Lsn, options: Vec<(String, Option<String>)> },
}

/// The command `sql` is, `None` if it is not a replication command (then it is SQL), or the
/// error a malformed or unsupported one gets.
pub fn parse(sql: &str) -> Option<Result<Command, SqlError>> {
    let first = sql.trim_start().split(|c: char| !c.is_ascii_alphanumeric() && c != '_').next()?;
    let keyword = first.to_ascii_uppercase();
    if !matches!(
        keyword.as_str(),
        "IDENTIFY_SYSTEM"
            | "READ_REPLICATION_SLOT"
            | "CREATE_REPLICATION_SLOT"
            | "DROP_REPLICATION_SLOT"
            | "START_REPLICATION"
            | "BASE_BACKUP"
            | "TIMELINE_HISTORY"
            | "ALTER_REPLICATION_SLOT"
            | "UPLOAD_MANIFEST"
    ) {
        return None;
    }
    Some(tokenize(sql).and_then(|t| Parser { toks: t, at: 0 }.command()))
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// A bare word, as written.
    Word(String),
    /// A double-quoted identifier.
    Quoted(String),
    /// A single-quoted string.
    Str(String),
    /// `X/Y`.
    Lsn(Lsn),
    Punct(char),
}

fn syntax(what: impl std::fmt::Display) -> SqlError {
    SqlError::new("42601", format!("syntax error in replication command: {what}"))
}

fn tokenize(sql: &str) -> Result<Vec<Tok>, SqlError> {
    let b: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_whitespace() || c == ';' {
            i += 1;
        } else if c == '(' || c == ')' || c == ',' {
            out.push(Tok::Punct(c));
            i += 1;
        } else if c == '"' || c == '\'' {
            // A doubled quote inside is one quote character.
            let mut s = String::new();
            i += 1;
            loop {
                match b.get(i) {
                    None => {
                        return Err(syntax(format!(
                            "unterminated quoted {}",
                            if c == '"' { "identifier" } else { "string" }
                        )))
                    }
                    Some(&q) if q == c && b.get(i + 1) == Some(&c) => {
                        s.push(c);
                        i += 2;
                    }
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(&q) => {
                        s.push(q);
                        i += 1;
                    }
                }
            }
            out.push(if c == '"' { Tok::Quoted(s) } else { Tok::Str(s) });
        } else if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], '_' | '-' | '.' | '/')) {
                i += 1;
            }
            let w: String = b[start..i].iter().collect();
            match w.split_once('/') {
                Some(_) => out.push(Tok::Lsn(
                    crate::slotfuncs::parse_lsn(&w).ok_or_else(|| syntax(format!("invalid LSN \"{w}\"")))?,
                )),
                None => out.push(Tok::Word(w)),
            }
        } else {
            return Err(syntax(format!("unexpected character \"{c}\"")));
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<Tok>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.at).cloned();
        self.at += 1;
        t
    }

    /// Is the next token the keyword `k`? Consumes it if so.
    fn keyword(&mut self, k: &str) -> bool {
        match self.peek() {
            Some(Tok::Word(w)) if w.eq_ignore_ascii_case(k) => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    fn expect_keyword(&mut self, k: &str) -> Result<(), SqlError> {
        if self.keyword(k) {
            Ok(())
        } else {
            Err(syntax(format!("expected {k}")))
        }
    }

    /// A name: a bare word folded to lower case, or a quoted identifier as written.
    fn name(&mut self, what: &str) -> Result<String, SqlError> {
        match self.next() {
            Some(Tok::Word(w)) => Ok(w.to_ascii_lowercase()),
            Some(Tok::Quoted(q)) => Ok(q),
            _ => Err(syntax(format!("expected {what}"))),
        }
    }

    fn punct(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Punct(c)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn end(&self) -> Result<(), SqlError> {
        match self.peek() {
            None => Ok(()),
            Some(t) => Err(syntax(format!("unexpected {t:?} at the end"))),
        }
    }

    /// `( name [value] [, ...] )`, if there: each name folded or as quoted, each value as text.
    fn option_list(&mut self) -> Result<Vec<(String, Option<String>)>, SqlError> {
        let mut out = Vec::new();
        if !self.punct('(') {
            return Ok(out);
        }
        loop {
            let name = self.name("an option name")?;
            let value = match self.peek() {
                Some(Tok::Str(s)) | Some(Tok::Quoted(s)) => Some(s.clone()),
                Some(Tok::Word(w)) => Some(w.clone()),
                _ => None,
            };
            if value.is_some() {
                self.at += 1;
            }
            out.push((name, value));
            if self.punct(')') {
                return Ok(out);
            }
            if !self.punct(',') {
                return Err(syntax("expected \",\" or \")\" in the option list"));
            }
        }
    }

    fn command(&mut self) -> Result<Command, SqlError> {
        let Some(Tok::Word(first)) = self.next() else { return Err(syntax("empty command")) };
        let cmd = match first.to_ascii_uppercase().as_str() {
            "IDENTIFY_SYSTEM" => Command::IdentifySystem,
            "READ_REPLICATION_SLOT" => Command::ReadSlot { slot: self.name("a slot name")? },
            "DROP_REPLICATION_SLOT" => {
                let slot = self.name("a slot name")?;
                Command::DropSlot { slot, wait: self.keyword("WAIT") }
            }
            "CREATE_REPLICATION_SLOT" => self.create_slot()?,
            "START_REPLICATION" => self.start()?,
            other => return Err(SqlError::unsupported(format!("{other} (physical replication)"))),
        };
        self.end()?;
        Ok(cmd)
    }

    fn create_slot(&mut self) -> Result<Command, SqlError> {
        let slot = self.name("a slot name")?;
        let temporary = self.keyword("TEMPORARY");
        if self.keyword("PHYSICAL") {
            return Err(SqlError::unsupported("a physical replication slot"));
        }
        self.expect_keyword("LOGICAL")?;
        let plugin = self.name("an output plugin")?;
        // PostgreSQL's default for a logical slot is to export a snapshot.
        let (mut two_phase, mut snapshot) = (false, SnapshotAction::Export);
        if self.peek() == Some(&Tok::Punct('(')) {
            for (name, value) in self.option_list()? {
                match (name.as_str(), value.as_deref().map(str::to_ascii_lowercase).as_deref()) {
                    ("snapshot", Some("export")) => snapshot = SnapshotAction::Export,
                    ("snapshot", Some("use")) => snapshot = SnapshotAction::Use,
                    ("snapshot", Some("nothing")) => snapshot = SnapshotAction::Nothing,
                    ("snapshot", v) => {
                        return Err(SqlError::new(
                            "22023",
                            format!(
                                "unrecognized value for CREATE_REPLICATION_SLOT option \"snapshot\": \"{}\"",
                                v.unwrap_or("")
                            ),
                        ))
                    }
                    ("two_phase", None | Some("true" | "on" | "1")) => two_phase = true,
                    ("two_phase", Some("false" | "off" | "0")) => two_phase = false,
                    ("reserve_wal", _) => {
                        return Err(SqlError::new("22023", "RESERVE_WAL applies to physical slots only"))
                    }
                    (other, _) => {
                        return Err(SqlError::new("42601", format!("unrecognized option: {other}")));
                    }
                }
            }
        } else {
            while let Some(Tok::Word(w)) = self.peek().cloned() {
                match w.to_ascii_uppercase().as_str() {
                    "EXPORT_SNAPSHOT" => snapshot = SnapshotAction::Export,
                    "NOEXPORT_SNAPSHOT" => snapshot = SnapshotAction::Nothing,
                    "USE_SNAPSHOT" => snapshot = SnapshotAction::Use,
                    "TWO_PHASE" => two_phase = true,
                    _ => return Err(syntax(format!("unexpected \"{w}\""))),
                }
                self.at += 1;
            }
        }
        Ok(Command::CreateSlot { slot, temporary, plugin, two_phase, snapshot })
    }

    fn start(&mut self) -> Result<Command, SqlError> {
        if !self.keyword("SLOT") {
            return Err(SqlError::unsupported("physical replication"));
        }
        let slot = self.name("a slot name")?;
        if self.keyword("PHYSICAL") || !self.keyword("LOGICAL") {
            return Err(SqlError::unsupported("physical replication"));
        }
        let Some(Tok::Lsn(start)) = self.next() else { return Err(syntax("expected a start position X/Y")) };
        let options = self.option_list()?;
        Ok(Command::StartLogical { slot, start, options })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(sql: &str) -> Command {
        parse(sql).expect("a replication command").expect("parses")
    }

    #[test]
    fn what_pg_recvlogical_and_subscribers_send() {
        assert_eq!(ok("IDENTIFY_SYSTEM"), Command::IdentifySystem);
        assert_eq!(
            ok("CREATE_REPLICATION_SLOT \"s1\" LOGICAL \"test_decoding\" ( SNAPSHOT 'nothing')"),
            Command::CreateSlot {
                slot: "s1".into(),
                temporary: false,
                plugin: "test_decoding".into(),
                two_phase: false,
                snapshot: SnapshotAction::Nothing
            }
        );
        assert_eq!(
            ok("CREATE_REPLICATION_SLOT sub1 LOGICAL pgoutput (TWO_PHASE, SNAPSHOT 'use')"),
            Command::CreateSlot {
                slot: "sub1".into(),
                temporary: false,
                plugin: "pgoutput".into(),
                two_phase: true,
                snapshot: SnapshotAction::Use
            }
        );
        assert_eq!(
            ok("CREATE_REPLICATION_SLOT \"t\" TEMPORARY LOGICAL pgoutput NOEXPORT_SNAPSHOT"),
            Command::CreateSlot {
                slot: "t".into(),
                temporary: true,
                plugin: "pgoutput".into(),
                two_phase: false,
                snapshot: SnapshotAction::Nothing
            }
        );
        assert_eq!(
            ok("START_REPLICATION SLOT \"s1\" LOGICAL 0/16B3748 (\"include-xids\" '0', \"skip-empty-xacts\" '1')"),
            Command::StartLogical {
                slot: "s1".into(),
                start: Lsn(0x16B_3748),
                options: vec![("include-xids".into(), Some("0".into())), ("skip-empty-xacts".into(), Some("1".into()))]
            }
        );
        assert_eq!(
            ok("START_REPLICATION SLOT s LOGICAL 1/0"),
            Command::StartLogical { slot: "s".into(), start: Lsn(1 << 32), options: vec![] }
        );
        assert_eq!(ok("DROP_REPLICATION_SLOT \"s1\" WAIT"), Command::DropSlot { slot: "s1".into(), wait: true });
        assert_eq!(ok("READ_REPLICATION_SLOT s1"), Command::ReadSlot { slot: "s1".into() });
    }

    #[test]
    fn sql_is_not_a_replication_command() {
        assert!(parse("SELECT 1").is_none());
        assert!(parse("  show wal_level").is_none());
        assert!(parse("").is_none());
    }

    #[test]
    fn bad_and_physical_commands_are_errors() {
        let err = |sql: &str| parse(sql).expect("recognised").expect_err("refused");
        assert_eq!(err("START_REPLICATION 0/0").code, "0A000");
        assert_eq!(err("START_REPLICATION SLOT s PHYSICAL 0/0").code, "0A000");
        assert_eq!(err("CREATE_REPLICATION_SLOT s PHYSICAL").code, "0A000");
        assert_eq!(err("BASE_BACKUP").code, "0A000");
        assert_eq!(err("START_REPLICATION SLOT s LOGICAL 0/XYZ").code, "42601");
        assert_eq!(err("START_REPLICATION SLOT s LOGICAL").code, "42601");
        assert_eq!(err("CREATE_REPLICATION_SLOT s LOGICAL p (SNAPSHOT 'sometimes')").code, "22023");
        assert_eq!(err("IDENTIFY_SYSTEM please").code, "42601");
        assert_eq!(err("DROP_REPLICATION_SLOT 's").code, "42601");
    }
}
