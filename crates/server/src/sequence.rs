//! Sequences: `CREATE SEQUENCE`, `DROP SEQUENCE`, `nextval`, `currval`, `setval`, and column
//! defaults that call `nextval` (`hist_id integer DEFAULT nextval('bmsql_hist_id_seq')`, as
//! BenchmarkSQL's schema has).
//!
//! As in PostgreSQL a sequence is not transactional: a value `nextval` hands out is gone even
//! if the transaction that asked rolls back, and CREATE and DROP take effect at once. The
//! state is kept in `DIR/server_sequences` (one line per sequence: name, increment, minimum,
//! maximum, cycle, a bound, whether the bound was handed out, and the owning table of a
//! `serial` column's sequence), replaced whole with write,
//! fsync, rename and an fsync of the directory, as [`crate::catalog`]'s file is.
//!
//! `nextval` writes the file only every [`LOG_AHEAD`] values: the file's bound is a value
//! at or past every value handed out (PostgreSQL's sequence relation logs 32 values ahead the
//! same way), and a value is handed out only once a bound covering it is durable. After a
//! crash or a restart the sequence resumes after the bound, so a value is never handed out
//! twice, at the cost of a gap of up to [`LOG_AHEAD`] values, as in PostgreSQL.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use sqlparser::ast::{Expr, SequenceOptions};

use crate::error::SqlError;

/// Values handed out per write of the file.
pub const LOG_AHEAD: i64 = 32;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Seq {
    increment: i64,
    min: i64,
    max: i64,
    cycle: bool,
    /// The last value handed out, or (when `!called`) the next one to hand out.
    last: i64,
    called: bool,
    /// The file's bound: every value handed out is at or before it in the increment's
    /// direction.
    logged: i64,
    /// Whether the file says the bound itself was handed out (`setval(v, false)` says not).
    logged_called: bool,
    /// The table whose `serial` column made it (dropped with the table), if one did.
    owner: Option<String>,
}

/// The sequences of a server.
pub struct Sequences {
    path: PathBuf,
    map: Mutex<BTreeMap<String, Seq>>,
}

fn malformed(path: &Path, line: &str) -> SqlError {
    SqlError::new("XX001", format!("malformed line in {}: {line:?}", path.display()))
}

fn undefined(name: &str) -> SqlError {
    SqlError::new("42P01", format!("relation \"{name}\" does not exist"))
}

impl Sequences {
    /// Reads `DIR/server_sequences` (absent: none). Each sequence resumes after its bound.
    pub fn open(dir: &Path) -> Result<Sequences, SqlError> {
        let path = dir.join("server_sequences");
        let mut map = BTreeMap::new();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                for line in text.lines().filter(|l| !l.is_empty()) {
                    let f: Vec<&str> = line.split('\t').collect();
                    let (fields, owner) = match f.len() {
                        7 => (&f[..], None),
                        8 => (&f[..7], Some(f[7].to_string())),
                        _ => return Err(malformed(&path, line)),
                    };
                    let [name, inc, min, max, cycle, logged, called] = fields[..] else {
                        return Err(malformed(&path, line));
                    };
                    let num = |s: &str| s.parse::<i64>().map_err(|_| malformed(&path, line));
                    let logged = num(logged)?;
                    let called = called == "1";
                    let s = Seq {
                        increment: num(inc)?,
                        min: num(min)?,
                        max: num(max)?,
                        cycle: cycle == "1",
                        last: logged,
                        called,
                        logged,
                        logged_called: called,
                        owner,
                    };
                    if s.increment == 0 || s.min > s.max {
                        return Err(malformed(&path, line));
                    }
                    map.insert(name.to_string(), s);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(SqlError::new("58030", format!("could not read {}: {e}", path.display()))),
        }
        Ok(Sequences { path, map: Mutex::new(map) })
    }

    pub fn exists(&self, name: &str) -> bool {
        self.map.lock().contains_key(name)
    }

    /// `CREATE SEQUENCE name [options]`; false when it exists (the caller decides whether
    /// that is an error). Options: INCREMENT [BY], MINVALUE / NO MINVALUE, MAXVALUE / NO
    /// MAXVALUE, START [WITH], CACHE (accepted, values are always handed out one by one), [NO]
    /// CYCLE; bigint's range by default, as PostgreSQL.
    pub fn create(&self, name: &str, options: &[SequenceOptions]) -> Result<bool, SqlError> {
        self.create_owned(name, options, None)
    }

    /// [`Sequences::create`], owned by table `owner` (a `serial` column's sequence: DROP TABLE
    /// drops it, [`Sequences::drop_owned_by`]).
    pub fn create_owned(&self, name: &str, options: &[SequenceOptions], owner: Option<&str>) -> Result<bool, SqlError> {
        let mut increment = 1i64;
        let (mut min, mut max, mut start, mut cycle) = (None, None, None, false);
        for o in options {
            match o {
                SequenceOptions::IncrementBy(e, _) => increment = constant(e)?,
                SequenceOptions::MinValue(e) => min = e.as_ref().map(constant).transpose()?,
                SequenceOptions::MaxValue(e) => max = e.as_ref().map(constant).transpose()?,
                SequenceOptions::StartWith(e, _) => start = Some(constant(e)?),
                SequenceOptions::Cache(e) => {
                    if constant(e)? < 1 {
                        return Err(SqlError::new("22023", "CACHE must be positive"));
                    }
                }
                // sqlparser's flag says NO CYCLE.
                SequenceOptions::Cycle(no) => cycle = !*no,
            }
        }
        if increment == 0 {
            return Err(SqlError::new("22023", "INCREMENT must not be zero"));
        }
        let min = min.unwrap_or(if increment > 0 { 1 } else { i64::MIN });
        let max = max.unwrap_or(if increment > 0 { i64::MAX } else { -1 });
        if min >= max {
            return Err(SqlError::new("22023", format!("MINVALUE ({min}) must be less than MAXVALUE ({max})")));
        }
        let start = start.unwrap_or(if increment > 0 { min } else { max });
        if start < min || start > max {
            return Err(SqlError::new(
                "22023",
                format!("START value ({start}) cannot be outside the range of values [{min}, {max}]"),
            ));
        }
        let mut g = self.map.lock();
        if g.contains_key(name) {
            return Ok(false);
        }
        let owner = owner.map(str::to_string);
        let s =
            Seq { increment, min, max, cycle, last: start, called: false, logged: start, logged_called: false, owner };
        g.insert(name.to_string(), s);
        if let Err(e) = self.write(&g) {
            g.remove(name);
            return Err(e);
        }
        Ok(true)
    }

    /// `DROP SEQUENCE name`; false when there is none.
    pub fn drop_sequence(&self, name: &str) -> Result<bool, SqlError> {
        let mut g = self.map.lock();
        let Some(old) = g.remove(name) else { return Ok(false) };
        if let Err(e) = self.write(&g) {
            g.insert(name.to_string(), old);
            return Err(e);
        }
        Ok(true)
    }

    /// Drops the sequences table `table` owns (its `serial` columns').
    pub fn drop_owned_by(&self, table: &str) -> Result<(), SqlError> {
        let mut g = self.map.lock();
        let before = g.clone();
        g.retain(|_, s| s.owner.as_deref() != Some(table));
        if g.len() == before.len() {
            return Ok(());
        }
        if let Err(e) = self.write(&g) {
            *g = before;
            return Err(e);
        }
        Ok(())
    }

    /// `nextval(name)`: the next value, once a bound covering it is durable.
    pub fn nextval(&self, name: &str) -> Result<i64, SqlError> {
        let mut g = self.map.lock();
        let s = g.get_mut(name).ok_or_else(|| undefined(name))?;
        let mut wrapped = false;
        let next = if !s.called {
            s.last
        } else {
            match s.last.checked_add(s.increment).filter(|v| (s.min..=s.max).contains(v)) {
                Some(v) => v,
                None if s.cycle => {
                    wrapped = true;
                    if s.increment > 0 {
                        s.min
                    } else {
                        s.max
                    }
                }
                None => {
                    let (which, bound) = if s.increment > 0 { ("maximum", s.max) } else { ("minimum", s.min) };
                    return Err(SqlError::new(
                        "2200H",
                        format!("nextval: reached {which} value of sequence \"{name}\" ({bound})"),
                    ));
                }
            }
        };
        // Would the file, read after a crash now, never hand `next` out again? Only if it says
        // a value at or past `next` was handed out, in this cycle. Otherwise log further ahead.
        let within = if s.increment > 0 { next <= s.logged } else { next >= s.logged };
        if !(s.logged_called && within && !wrapped) {
            let ahead = next.saturating_add(s.increment.saturating_mul(LOG_AHEAD - 1));
            let saved = (s.logged, s.logged_called);
            s.logged = ahead.clamp(s.min, s.max);
            s.logged_called = true;
            if let Err(e) = self.write(&g) {
                let s = g.get_mut(name).expect("present");
                (s.logged, s.logged_called) = saved;
                return Err(e);
            }
        }
        let s = g.get_mut(name).expect("present");
        s.last = next;
        s.called = true;
        Ok(next)
    }

    /// `setval(name, value, is_called)`: the next `nextval` gives the value after `value`, or
    /// `value` itself when `!is_called`; durable before it returns.
    pub fn setval(&self, name: &str, value: i64, is_called: bool) -> Result<i64, SqlError> {
        let mut g = self.map.lock();
        let s = g.get_mut(name).ok_or_else(|| undefined(name))?;
        if value < s.min || value > s.max {
            return Err(SqlError::new(
                "22003",
                format!("setval: value {value} is out of bounds for sequence \"{name}\" ({}..{})", s.min, s.max),
            ));
        }
        let saved = s.clone();
        (s.last, s.called, s.logged, s.logged_called) = (value, is_called, value, is_called);
        if let Err(e) = self.write(&g) {
            g.insert(name.to_string(), saved);
            return Err(e);
        }
        Ok(value)
    }

    fn write(&self, g: &BTreeMap<String, Seq>) -> Result<(), SqlError> {
        let mut text = String::new();
        for (name, s) in g {
            text.push_str(&format!(
                "{name}\t{}\t{}\t{}\t{}\t{}\t{}",
                s.increment,
                s.min,
                s.max,
                u8::from(s.cycle),
                s.logged,
                u8::from(s.logged_called)
            ));
            if let Some(o) = &s.owner {
                text.push('\t');
                text.push_str(o);
            }
            text.push('\n');
        }
        crate::catalog::replace_file(&self.path, &text)
    }
}

/// An integer constant of a sequence option (`-5` included).
fn constant(e: &Expr) -> Result<i64, SqlError> {
    let text = e.to_string().replace(' ', "");
    text.parse().map_err(|_| SqlError::new("22023", format!("a sequence option must be an integer, not {e}")))
}

/// A sequence name as `nextval('name')` gives it: case-folded unless quoted, schema dropped.
pub fn name_of(text: &str) -> String {
    let last = text.rsplit('.').next().unwrap_or(text);
    match last.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        Some(quoted) => quoted.to_string(),
        None => last.to_ascii_lowercase(),
    }
}

/// The values `nextval` gave this session, for `currval`.
#[derive(Default)]
pub struct SessionValues(HashMap<String, i64>);

impl SessionValues {
    pub fn note(&mut self, name: &str, v: i64) {
        self.0.insert(name.to_string(), v);
    }

    /// `currval(name)`: 55000 before this session's first `nextval` of it.
    pub fn currval(&self, name: &str) -> Result<i64, SqlError> {
        self.0.get(name).copied().ok_or_else(|| {
            SqlError::new("55000", format!("currval of sequence \"{name}\" is not yet defined in this session"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(sql: &str) -> Vec<SequenceOptions> {
        let dialect = sqlparser::dialect::PostgreSqlDialect {};
        match sqlparser::parser::Parser::parse_sql(&dialect, sql).unwrap().remove(0) {
            sqlparser::ast::Statement::CreateSequence { sequence_options, .. } => sequence_options,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn values_resume_after_the_durable_bound_and_never_repeat() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sequences::open(dir.path()).unwrap();
        assert!(s.create("a", &opts("CREATE SEQUENCE a")).unwrap());
        assert!(!s.create("a", &[]).unwrap(), "exists");
        let first: Vec<i64> = (0..40).map(|_| s.nextval("a").unwrap()).collect();
        assert_eq!(first, (1..=40).collect::<Vec<_>>());
        // A restart (or a crash: the file is all there is) resumes after the bound.
        let s = Sequences::open(dir.path()).unwrap();
        let next = s.nextval("a").unwrap();
        assert!(next > 40 && next <= 40 + LOG_AHEAD + 1, "{next}");
        assert_eq!(s.setval("a", 100, true).unwrap(), 100);
        let s = Sequences::open(dir.path()).unwrap();
        assert_eq!(s.nextval("a").unwrap(), 101);
        s.setval("a", 7, false).unwrap();
        let s = Sequences::open(dir.path()).unwrap();
        assert_eq!(s.nextval("a").unwrap(), 7, "setval(.., false): the value itself comes next");
        assert_eq!(s.nextval("a").unwrap(), 8);
        assert!(s.drop_sequence("a").unwrap());
        assert_eq!(s.nextval("a").unwrap_err().code, "42P01");
    }

    #[test]
    fn options_bounds_and_cycle() {
        let dir = tempfile::tempdir().unwrap();
        let s = Sequences::open(dir.path()).unwrap();
        s.create("d", &opts("CREATE SEQUENCE d INCREMENT BY -2 MINVALUE -5 MAXVALUE 0")).unwrap();
        let got: Vec<i64> = (0..3).map(|_| s.nextval("d").unwrap()).collect();
        assert_eq!(got, [0, -2, -4]);
        let e = s.nextval("d").unwrap_err();
        assert_eq!((e.code, e.message.as_str()), ("2200H", "nextval: reached minimum value of sequence \"d\" (-5)"));
        s.create("c", &opts("CREATE SEQUENCE c MINVALUE 1 MAXVALUE 3 START 2 CYCLE")).unwrap();
        let got: Vec<i64> = (0..5).map(|_| s.nextval("c").unwrap()).collect();
        assert_eq!(got, [2, 3, 1, 2, 3]);
        let s2 = Sequences::open(dir.path()).unwrap();
        let v = s2.nextval("c").unwrap();
        assert!((1..=3).contains(&v));
        assert_eq!(s.create("z", &opts("CREATE SEQUENCE z INCREMENT 0")).unwrap_err().code, "22023");
        assert_eq!(s.create("z", &opts("CREATE SEQUENCE z MAXVALUE 5 START 10")).unwrap_err().code, "22023");
        assert_eq!(s.setval("c", 9, true).unwrap_err().code, "22003");
    }

    #[test]
    fn a_malformed_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("server_sequences"), "a\t1\t1\n").unwrap();
        let e = Sequences::open(dir.path()).err().unwrap();
        assert!(e.message.contains("malformed line"), "{}", e.message);
    }
}
