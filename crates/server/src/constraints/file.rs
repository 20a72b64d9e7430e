//! `DIR/server_constraints`: one line per constraint (see [`super`] for the fields), read at
//! startup and replaced whole at every change.
//!
//! Reading refuses a damaged file with an error naming it and the line (SQLSTATE XX001), so
//! the server does not start with constraints it cannot enforce. Writing drops the lines of
//! tables the engine no longer has (a crash between DROP TABLE's commit and the save).

use std::path::Path;
use std::sync::Arc;

use settledb::Database;

use super::{Action, Constraint, ForeignKey, Kind};
use crate::catalog::{escape, unescape};
use crate::error::SqlError;

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    let bytes = (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

/// `1,2,3` (attnums, from 1) as 0-based positions.
fn positions(s: &str) -> Option<Vec<usize>> {
    s.split(',').map(|p| p.parse::<usize>().ok().filter(|&n| n > 0).map(|n| n - 1)).collect()
}

fn attnums(p: &[usize]) -> String {
    p.iter().map(|i| (i + 1).to_string()).collect::<Vec<_>>().join(",")
}

/// One line, or `None` when it is malformed.
fn decode(line: &str) -> Option<Constraint> {
    let f: Vec<&str> = line.split('\t').collect();
    let (kind, oid, table, name) = (*f.first()?, f.get(1)?.parse().ok()?, f.get(2)?.parse().ok()?, unescape(f.get(3)?));
    let kind = match (kind, f.len()) {
        ("check", 6) => {
            let columns = if f[4].is_empty() {
                Vec::new()
            } else {
                f[4].split(',')
                    .map(|c| {
                        let (n, name) = c.split_once(':')?;
                        Some((n.parse::<usize>().ok().filter(|&n| n > 0)? - 1, unhex(name)?))
                    })
                    .collect::<Option<Vec<_>>>()?
            };
            let text = unescape(f[5]);
            super::check::parse(&text).ok()?;
            Kind::Check { text, columns }
        }
        ("unique", 4) => Kind::Unique,
        ("fkey", 10) => Kind::ForeignKey(ForeignKey {
            cols: positions(f[4])?,
            parent: f[5].parse().ok()?,
            parent_cols: positions(f[6])?,
            index: f[7].parse().ok()?,
            on_update: Action::from_letter(f[8])?,
            on_delete: Action::from_letter(f[9])?,
        }),
        _ => return None,
    };
    if let Kind::ForeignKey(fk) = &kind {
        if fk.cols.len() != fk.parent_cols.len() || fk.cols.is_empty() {
            return None;
        }
    }
    Some(Constraint { oid, table, name, kind })
}

fn encode(c: &Constraint) -> String {
    let head = |k: &str| format!("{k}\t{}\t{}\t{}", c.oid, c.table, escape(&c.name));
    match &c.kind {
        Kind::Check { text, columns } => {
            // Names in hex: a quoted column name may hold any character.
            let cols: Vec<String> = columns.iter().map(|(p, n)| format!("{}:{}", p + 1, hex(n))).collect();
            format!("{}\t{}\t{}", head("check"), cols.join(","), escape(text))
        }
        Kind::Unique => head("unique"),
        Kind::ForeignKey(fk) => format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            head("fkey"),
            attnums(&fk.cols),
            fk.parent,
            attnums(&fk.parent_cols),
            fk.index,
            fk.on_update.letter(),
            fk.on_delete.letter()
        ),
    }
}

/// Reads the file; absent is empty.
pub fn read(path: &Path) -> Result<Vec<Constraint>, SqlError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(SqlError::new("58030", format!("could not read {}: {e}", path.display()))),
    };
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.is_empty()) {
        let c = decode(line).ok_or_else(|| {
            SqlError::new("XX001", format!("malformed constraint at {} line {}: {line:?}", path.display(), n + 1))
        })?;
        out.push(c);
    }
    Ok(out)
}

/// Replaces the file with `list`, leaving out tables the engine no longer has.
pub fn write(path: &Path, list: &[Arc<Constraint>], db: &Database) -> Result<(), SqlError> {
    let mut text = String::new();
    for c in list {
        if db.table_by_oid(settledb::Oid(c.table)).is_none() {
            continue;
        }
        text.push_str(&encode(c));
        text.push('\n');
    }
    crate::catalog::replace_file(path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let list = [
            Constraint {
                oid: 3_000_000_000,
                table: 16385,
                name: "t_a\tcheck".into(),
                kind: Kind::Check {
                    text: "a > 0 AND \"b,c\" <> 'x\ny'".into(),
                    columns: vec![(0, "a".into()), (1, "b,c".into())],
                },
            },
            Constraint { oid: 16390, table: 16385, name: "t_b_key".into(), kind: Kind::Unique },
            Constraint {
                oid: 3_000_000_001,
                table: 16385,
                name: "t_p_fkey".into(),
                kind: Kind::ForeignKey(ForeignKey {
                    cols: vec![1, 0],
                    parent: 16400,
                    parent_cols: vec![0, 2],
                    index: 16401,
                    on_update: Action::Cascade,
                    on_delete: Action::SetNull,
                }),
            },
        ];
        for c in &list {
            let line = encode(c);
            assert_eq!(decode(&line).as_ref(), Some(c), "{line}");
        }
    }

    #[test]
    fn a_damaged_file_names_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server_constraints");
        std::fs::write(&path, "unique\t1\t2\tk\nfkey\t1\t2\n").unwrap();
        let e = read(&path).unwrap_err();
        assert!(e.message.contains("line 2"), "{}", e.message);
        std::fs::write(&path, "check\t1\t2\tc\t\ta >\n").unwrap();
        assert!(read(&path).unwrap_err().message.contains("line 1"));
    }
}
