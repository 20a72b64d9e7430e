//! Golden scripts: the engine's concurrency and page behaviour stated as scripts with their
//! expected output, in the style of toydb's `goldenscript` files and PostgreSQL's isolation
//! specs (`src/test/isolation/specs/*.spec`).
//!
//! Every file in `testscripts/*.txt` runs against a fresh database in a temporary directory. A
//! script opens with a prose header (`#` lines) saying what it proves, then has one step per
//! line, each followed by its output (lines starting with `> `). `#` lines and blank lines
//! anywhere are comments.
//!
//! ```text
//! create accounts (aid int4, bal int4) fillfactor 100    table; columns are nullable
//! create accounts (aid int4, bal int4) primary key (aid) ... with its primary key
//! create index idx on accounts (bal) [unique]            CREATE INDEX
//! t1: get accounts_pkey (5)                              the row with that key, via the index
//! t1: range idx [from (k)] [to (k)] [desc]               rows by key range (inclusive)
//! t1: update accounts_pkey key (5) set bal = bal + 1     update_by_key
//! t1: delete accounts_pkey key (5)                       delete_by_key
//! inspect index idx 1                                    a B-tree page
//! values: 5, 'text', null, true, repeat('x', 3), pad('k05', 2000) ('k05' then dots to 2000 bytes)
//! t1: begin [repeatable read | read committed]
//! t1: insert accounts (1, 100) as r1                     prints the TID and names it r1
//! t2: update accounts r1 set bal = bal + 10 [as r2]      update_with; `set col = N` too
//! t1: delete accounts r1
//! t1: fetch accounts r1                                  the row, or "not visible"
//! t1: scan accounts                                      "(block,offset) (values)" per row
//! t1: commit | rollback
//! t1: savepoint s1 | release s1 | rollback to s1      SAVEPOINT / RELEASE / ROLLBACK TO
//! t1: prepare g1                                     PREPARE TRANSACTION 'g1'
//! commit prepared g1 | rollback prepared g1           COMMIT / ROLLBACK PREPARED 'g1'
//! prepared xacts                                     pg_prepared_xacts (xid, gid)
//! slot create s pgoutput [two_phase] | slot drop s    logical replication slots
//! slot advance s                                      pg_replication_slot_advance to the WAL's end
//! slots                                               pg_replication_slots (LSNs as labels L1, L2, ...)
//! t2: update accounts r1 set bal = bal + 1 &             start a step that may block ...
//! t2: await                                              ... and print its result here
//! inspect accounts 0                                     Database::describe_page
//! prune accounts 0                                       Database::prune_page
//! checkpoint | restart | crash | check
//! config name=value ...                                  restart with these parameters
//! vacuum accounts [freeze] [disable_page_skipping] [index_cleanup on|off|auto]
//!        [truncate on|off] [policy lazy|pg16|eager|adaptive]      VACUUM (VERBOSE), timing lines left out
//! vm accounts | fsm accounts                             visibility map bits, free space per page
//! relfrozenxid accounts | consume xids 1000              the table's relfrozenxid; burn XIDs
//! pin accounts 0 | unpin accounts 0                      hold a page pinned (no cleanup lock)
//! ```
//!
//! A session step outside `begin … commit` runs in a transaction of its own (autocommit). A
//! step that fails leaves its transaction failed, as in PostgreSQL: later steps are refused
//! and `commit` rolls it back. Each session runs on its own thread; a step started with `&`
//! prints `blocked` once the engine reports its transaction waiting on a row lock (polled
//! through `Database::lock_waits`, as PostgreSQL's isolation tester polls `pg_locks`), or its
//! result if it finished at once. Timeouts exist only to fail a stuck script with a clear
//! message; no outcome depends on timing.
//!
//! With `UPDATE_GOLDEN=1` the files are rewritten with the actual output: read the diff, since
//! a golden file is only a test if its content is right by the semantics.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use settledb::heap::render_values;
use settledb::{Column, Config, Database, IsolationLevel, Schema, TableOptions, Tid, Transaction, Type, Value};

/// How long a step may take before the script fails as stuck (never a measured timing).
const STEP_TIMEOUT: Duration = Duration::from_secs(10);

type StepResult = Result<Out, String>;

/// The one place the verifier is called from. Until `settledb::check` has a database verifier,
/// it scans every table (the catalog included) and requires that no page fails validation.
fn run_check(db: &Database) -> Result<(), String> {
    let report = settledb::check::check_database(db).map_err(|e| e.to_string())?;
    if report.is_clean() {
        Ok(())
    } else {
        Err(report.to_string())
    }
}

fn config() -> Config {
    Config { shared_buffers_bytes: 4 << 20, fsync: false, autovacuum: false, ..Config::default() }
}

// ---------------------------------------------------------------------------------------------
// Steps

/// A literal in a script, typed when it meets its column.
#[derive(Clone, Debug)]
enum Lit {
    Null,
    Int(i64),
    Bool(bool),
    Text(String),
}

#[derive(Clone, Debug)]
enum Expr {
    Lit(Lit),
    /// `col + n` (or `col - n`).
    Add(String, i64),
}

#[derive(Debug)]
enum Op {
    Insert { table: String, values: Vec<Lit> },
    Update { table: String, tid: Tid, sets: Vec<(String, Expr)> },
    Delete { table: String, tid: Tid },
    Fetch { table: String, tid: Tid },
    Scan { table: String },
    Get { index: String, key: Vec<Lit> },
    Range { index: String, lo: Option<Vec<Lit>>, hi: Option<Vec<Lit>>, desc: bool },
    UpdateByKey { index: String, key: Vec<Lit>, sets: Vec<(String, Expr)> },
    DeleteByKey { index: String, key: Vec<Lit> },
}

#[derive(Debug)]
enum Cmd {
    Begin(IsolationLevel),
    Commit,
    Rollback,
    Savepoint(String),
    Release(String),
    RollbackTo(String),
    Prepare(String),
    /// Creates a logical slot from the session's thread (creation waits for the transactions
    /// running when it starts, so a script runs it in the background).
    CreateSlot {
        name: String,
        plugin: String,
        two_phase: bool,
    },
    Op(Op),
    /// End the session thread: roll its transaction back, or at a crash leave it in progress.
    Exit {
        crash: bool,
    },
}

/// What a step printed.
enum Out {
    Ok,
    Tid(Tid),
    Gone,
    Deleted,
    Row(Option<Vec<Value>>),
    Rows(Vec<(Tid, Vec<Value>)>),
    RolledBack,
}

fn render(r: &StepResult) -> Vec<String> {
    match r {
        Err(e) => vec![format!("error: {e}")],
        Ok(Out::Ok) => vec!["ok".into()],
        Ok(Out::Tid(t)) => vec![t.to_string()],
        Ok(Out::Gone) => vec!["gone".into()],
        Ok(Out::Deleted) => vec!["deleted".into()],
        Ok(Out::RolledBack) => vec!["rollback (the transaction had failed)".into()],
        Ok(Out::Row(Some(v))) => vec![render_values(v)],
        Ok(Out::Row(None)) => vec!["not visible".into()],
        Ok(Out::Rows(rows)) if rows.is_empty() => vec!["no rows".into()],
        Ok(Out::Rows(rows)) => rows.iter().map(|(t, v)| format!("{t} {}", render_values(v))).collect(),
    }
}

// ---------------------------------------------------------------------------------------------
// Session threads

struct Session {
    cmds: Sender<Cmd>,
    results: Receiver<StepResult>,
    handle: JoinHandle<()>,
    /// A step started with `&` whose result `await` has not printed yet, and the name its TID
    /// will be bound to.
    pending: Option<Option<String>>,
}

struct Txn<'db> {
    tx: Transaction<'db>,
    failed: bool,
}

fn session_main(db: Arc<Database>, cmds: Receiver<Cmd>, results: Sender<StepResult>) {
    let mut txn: Option<Txn<'_>> = None;
    while let Ok(cmd) = cmds.recv() {
        if let Cmd::Exit { crash } = cmd {
            if let Some(t) = txn.take() {
                if crash {
                    std::mem::forget(t.tx); // in progress when the "process" dies
                }
            }
            return;
        }
        let r = run_cmd(&db, &mut txn, cmd);
        if results.send(r).is_err() {
            return;
        }
    }
}

fn run_cmd<'db>(db: &'db Database, txn: &mut Option<Txn<'db>>, cmd: Cmd) -> StepResult {
    let err = |e: settledb::Error| e.to_string();
    match cmd {
        Cmd::Begin(iso) => {
            if txn.is_some() {
                return Err("there is already a transaction in progress".into());
            }
            *txn = Some(Txn { tx: db.begin_with(iso).map_err(err)?, failed: false });
            Ok(Out::Ok)
        }
        Cmd::Commit => match txn.take() {
            None => Err("there is no transaction in progress".into()),
            Some(t) if t.failed => t.tx.rollback().map(|()| Out::RolledBack).map_err(err),
            Some(t) => t.tx.commit().map(|()| Out::Ok).map_err(err),
        },
        Cmd::Rollback => match txn.take() {
            None => Err("there is no transaction in progress".into()),
            Some(t) => t.tx.rollback().map(|()| Out::Ok).map_err(err),
        },
        Cmd::CreateSlot { name, plugin, two_phase } => {
            db.create_logical_replication_slot(&name, &plugin, two_phase).map(|_| Out::Ok).map_err(err)
        }
        Cmd::Savepoint(name) | Cmd::Release(name) if txn.as_ref().is_some_and(|t| t.failed) => {
            let _ = name;
            Err("current transaction is aborted, commands ignored until end of transaction block".into())
        }
        Cmd::Savepoint(name) => match txn.as_mut() {
            None => Err("SAVEPOINT can only be used in transaction blocks".into()),
            Some(t) => t.tx.savepoint(&name).map(|()| Out::Ok).map_err(err),
        },
        Cmd::Release(name) => match txn.as_mut() {
            None => Err("RELEASE SAVEPOINT can only be used in transaction blocks".into()),
            Some(t) => t.tx.release(&name).map(|()| Out::Ok).map_err(err),
        },
        Cmd::RollbackTo(name) => match txn.as_mut() {
            None => Err("ROLLBACK TO SAVEPOINT can only be used in transaction blocks".into()),
            Some(t) => {
                let r = t.tx.rollback_to(&name).map(|()| Out::Ok).map_err(err);
                t.failed = t.tx.is_failed();
                r
            }
        },
        Cmd::Prepare(gid) => match txn.take() {
            None => Err("there is no transaction in progress".into()),
            Some(t) if t.failed => t.tx.rollback().map(|()| Out::RolledBack).map_err(err),
            Some(mut t) => match t.tx.prepare(&gid) {
                Ok(()) => Ok(Out::Ok),
                Err(e) => {
                    *txn = Some(t);
                    Err(err(e))
                }
            },
        },
        Cmd::Op(op) => match txn.as_mut() {
            Some(t) if t.failed => {
                Err("current transaction is aborted, commands ignored until end of transaction block".into())
            }
            Some(t) => {
                let r = run_op(db, &mut t.tx, op);
                t.failed = r.is_err();
                r
            }
            None => {
                let mut tx = db.begin().map_err(err)?;
                let out = run_op(db, &mut tx, op)?;
                tx.commit().map_err(err)?;
                Ok(out)
            }
        },
        Cmd::Exit { .. } => unreachable!("handled by the session loop"),
    }
}

fn coerce(lit: &Lit, col: &Column) -> Result<Value, String> {
    Ok(match (lit, col.ty) {
        (Lit::Null, _) => Value::Null,
        (Lit::Int(i), Type::Int4) => Value::Int4(i32::try_from(*i).map_err(|_| format!("{i} out of range for int4"))?),
        (Lit::Int(i), Type::Int8) => Value::Int8(*i),
        (Lit::Int(i), Type::Float8) => Value::Float8(*i as f64),
        (Lit::Bool(b), Type::Bool) => Value::Bool(*b),
        (Lit::Text(s), Type::Text) => Value::Text(s.clone()),
        (l, ty) => return Err(format!("{l:?} is not a value of column \"{}\" ({ty:?})", col.name)),
    })
}

fn eval(expr: &Expr, schema: &Schema, row: &[Value], col: &Column) -> Result<Value, String> {
    match expr {
        Expr::Lit(l) => coerce(l, col),
        Expr::Add(src, n) => {
            let i = column_index(schema, src)?;
            match &row[i] {
                Value::Int4(x) => {
                    i32::try_from(i64::from(*x) + n).map(Value::Int4).map_err(|_| "int4 out of range".into())
                }
                Value::Int8(x) => x.checked_add(*n).map(Value::Int8).ok_or_else(|| "int8 out of range".into()),
                v => Err(format!("cannot add to {v:?}")),
            }
        }
    }
}

fn column_index(schema: &Schema, name: &str) -> Result<usize, String> {
    schema.columns.iter().position(|c| c.name == name).ok_or_else(|| format!("column \"{name}\" does not exist"))
}

/// Types key literals by the index's columns.
fn index_key(index: &settledb::Index, lits: &[Lit]) -> Result<Vec<Value>, String> {
    let table = index.table();
    let schema = table.schema();
    let cols = index.columns();
    if lits.len() > cols.len() {
        return Err(format!("{} key values for {} key columns", lits.len(), cols.len()));
    }
    lits.iter().zip(&cols).map(|(l, c)| coerce(l, &schema.columns[column_index(schema, c)?])).collect()
}

/// The assignments of an update, as (column position, expression).
fn targets(schema: &Schema, sets: &[(String, Expr)]) -> Result<Vec<(usize, Expr)>, String> {
    sets.iter().map(|(col, e)| Ok((column_index(schema, col)?, e.clone()))).collect()
}

fn apply_sets(schema: &Schema, targets: &[(usize, Expr)], row: &[Value]) -> settledb::Result<Vec<Value>> {
    let mut new = row.to_vec();
    for (i, e) in targets {
        new[*i] = eval(e, schema, row, &schema.columns[*i]).map_err(settledb::Error::InvalidInput)?;
    }
    Ok(new)
}

fn run_op(db: &Database, tx: &mut Transaction<'_>, op: Op) -> StepResult {
    let err = |e: settledb::Error| e.to_string();
    let table = |name: &str| db.table(name).map_err(err);
    let index = |name: &str| db.index(name).map_err(err);
    match op {
        Op::Insert { table: name, values } => {
            let t = table(&name)?;
            let cols = &t.schema().columns;
            if values.len() != cols.len() {
                return Err(format!("{} values for {} columns", values.len(), cols.len()));
            }
            let row = values.iter().zip(cols).map(|(l, c)| coerce(l, c)).collect::<Result<Vec<_>, _>>()?;
            tx.insert(&t, &row).map(Out::Tid).map_err(err)
        }
        Op::Update { table: name, tid, sets } => {
            let t = table(&name)?;
            let schema = t.schema().clone();
            let mut targets = Vec::new();
            for (col, e) in &sets {
                targets.push((column_index(&schema, col)?, e.clone()));
            }
            let r = tx.update_with(&t, tid, |row| {
                let mut new = row.to_vec();
                for (i, e) in &targets {
                    new[*i] = eval(e, &schema, row, &schema.columns[*i]).map_err(settledb::Error::InvalidInput)?;
                }
                Ok(new)
            });
            r.map(|o| o.map_or(Out::Gone, Out::Tid)).map_err(err)
        }
        Op::Delete { table: name, tid } => {
            let t = table(&name)?;
            tx.delete(&t, tid).map(|d| if d { Out::Deleted } else { Out::Gone }).map_err(err)
        }
        Op::Fetch { table: name, tid } => {
            let t = table(&name)?;
            tx.fetch(&t, tid).map(Out::Row).map_err(err)
        }
        Op::Scan { table: name } => {
            let t = table(&name)?;
            let rows = tx.scan(&t).map_err(err)?.collect::<Result<Vec<_>, _>>().map_err(err)?;
            Ok(Out::Rows(rows))
        }
        Op::Get { index: name, key } => {
            let ix = index(&name)?;
            let key = index_key(&ix, &key)?;
            tx.get(&ix, &key).map(|r| Out::Row(r.map(|(_, v)| v))).map_err(err)
        }
        Op::Range { index: name, lo, hi, desc } => {
            let ix = index(&name)?;
            let bound = |k: Option<Vec<Lit>>| -> Result<settledb::KeyBound, String> {
                Ok(match k {
                    None => settledb::KeyBound::Unbounded,
                    Some(k) => settledb::KeyBound::Included(index_key(&ix, &k)?),
                })
            };
            let dir = if desc { settledb::ScanDirection::Backward } else { settledb::ScanDirection::Forward };
            tx.range(&ix, bound(lo)?, bound(hi)?, dir, None).map(Out::Rows).map_err(err)
        }
        Op::UpdateByKey { index: name, key, sets } => {
            let ix = index(&name)?;
            let key = index_key(&ix, &key)?;
            let t = ix.table();
            let schema = t.schema().clone();
            let targets = targets(&schema, &sets)?;
            let r = tx.update_by_key(&ix, &key, |row| apply_sets(&schema, &targets, row));
            r.map(|o| o.map_or(Out::Gone, Out::Tid)).map_err(err)
        }
        Op::DeleteByKey { index: name, key } => {
            let ix = index(&name)?;
            let key = index_key(&ix, &key)?;
            tx.delete_by_key(&ix, &key).map(|d| if d { Out::Deleted } else { Out::Gone }).map_err(err)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing

/// Splits `s` on top-level commas (outside quotes and parentheses).
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quoted) = (Vec::new(), String::new(), 0, false);
    for c in s.chars() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

fn parse_lit(s: &str) -> Result<Lit, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("null") {
        return Ok(Lit::Null);
    }
    if s == "true" || s == "false" {
        return Ok(Lit::Bool(s == "true"));
    }
    if let Some(q) = s.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
        return Ok(Lit::Text(q.to_string()));
    }
    // repeat('x', n)
    if let Some(args) = s.strip_prefix("repeat(").and_then(|r| r.strip_suffix(')')) {
        let a = split_top(args);
        if let [Ok(Lit::Text(t)), Ok(Lit::Int(n))] = [parse_lit(&a[0]), parse_lit(a.get(1).map_or("", |s| s))] {
            return Ok(Lit::Text(t.repeat(n as usize)));
        }
    }
    // pad('k05', n): the text followed by dots up to n bytes (wide keys that still sort by prefix)
    if let Some(args) = s.strip_prefix("pad(").and_then(|r| r.strip_suffix(')')) {
        let a = split_top(args);
        if let [Ok(Lit::Text(t)), Ok(Lit::Int(n))] = [parse_lit(&a[0]), parse_lit(a.get(1).map_or("", |s| s))] {
            let fill = (n as usize).saturating_sub(t.len());
            return Ok(Lit::Text(format!("{t}{}", ".".repeat(fill))));
        }
    }
    s.parse::<i64>().map(Lit::Int).map_err(|_| format!("cannot parse value `{s}`"))
}

fn parse_expr(s: &str) -> Result<Expr, String> {
    let s = s.trim();
    for (sign, k) in [('+', 1), ('-', -1)] {
        if let Some((col, n)) = s.split_once(sign) {
            let col = col.trim();
            if !col.is_empty() && col.chars().all(|c| c.is_alphanumeric() || c == '_') {
                let n: i64 = n.trim().parse().map_err(|_| format!("cannot parse `{s}`"))?;
                return Ok(Expr::Add(col.to_string(), k * n));
            }
        }
    }
    parse_lit(s).map(Expr::Lit)
}

fn parse_values(s: &str) -> Result<Vec<Lit>, String> {
    let inner = s.trim().strip_prefix('(').and_then(|r| r.strip_suffix(')')).ok_or("values must be in parentheses")?;
    split_top(inner).iter().map(|v| parse_lit(v)).collect()
}

fn parse_type(s: &str) -> Result<Type, String> {
    Ok(match s {
        "int4" | "int" | "integer" => Type::Int4,
        "int8" | "bigint" => Type::Int8,
        "float8" => Type::Float8,
        "bool" | "boolean" => Type::Bool,
        "text" => Type::Text,
        "bytea" => Type::Bytea,
        "timestamp" => Type::Timestamp,
        _ => return Err(format!("unknown type {s}")),
    })
}

/// `create name (col type, …) [fillfactor N] [primary key (col, …)]`
fn parse_create(rest: &str) -> Result<(String, Schema, TableOptions), String> {
    let (name, rest) = rest.split_once(' ').ok_or("create: missing columns")?;
    let open = rest.find('(').ok_or("create: missing (")?;
    let close = rest[open..].find(')').map(|i| open + i).ok_or("create: missing )")?;
    let mut columns = Vec::new();
    for c in split_top(&rest[open + 1..close]) {
        let (n, ty) = c.split_once(' ').ok_or_else(|| format!("create: bad column `{c}`"))?;
        columns.push(Column { name: n.trim().into(), ty: parse_type(ty.trim())?, nullable: true });
    }
    let mut options = TableOptions::default();
    // The column list ends at the first `)` that closes it; a primary key list may follow.
    let cols_close = rest[open..].find(')').map(|i| open + i).ok_or("create: missing )")?;
    let tail = &rest[cols_close + 1..];
    let (tail, pk) = match tail.split_once("primary key") {
        Some((t, k)) => {
            let k = k.trim().strip_prefix('(').and_then(|k| k.strip_suffix(')')).ok_or("create: primary key (cols)")?;
            (t, Some(k.split(',').map(|c| c.trim().to_string()).collect::<Vec<_>>()))
        }
        None => (tail, None),
    };
    options.primary_key = pk;
    let tail: Vec<&str> = tail.split_whitespace().collect();
    match tail.as_slice() {
        [] => {}
        ["fillfactor", n] => options.fillfactor = n.parse().map_err(|_| "bad fillfactor")?,
        _ => return Err(format!("create: unexpected `{}`", tail.join(" "))),
    }
    Ok((name.to_string(), Schema { columns }, options))
}

/// `… as name` at the end of a step.
fn split_as(s: &str) -> (&str, Option<String>) {
    match s.rsplit_once(" as ") {
        Some((head, name)) if !name.contains(' ') && !name.contains(')') => (head.trim(), Some(name.to_string())),
        _ => (s, None),
    }
}

// ---------------------------------------------------------------------------------------------
// The runner

struct Runner {
    dir: PathBuf,
    config: Config,
    /// Pages held pinned by `pin`, each by a thread of its own until `unpin`.
    pins: HashMap<(String, u32), (Sender<()>, JoinHandle<()>)>,
    db: Option<Arc<Database>>,
    sessions: BTreeMap<String, Session>,
    names: HashMap<String, Tid>,
    /// LSNs printed by `slots`, as labels L1, L2, ... in order of first appearance (their
    /// values depend on the WAL's layout).
    lsn_labels: HashMap<u64, String>,
}

impl Runner {
    fn lsn_label(&mut self, lsn: Option<settledb::Lsn>) -> String {
        let Some(l) = lsn else { return "-".into() };
        let n = self.lsn_labels.len() + 1;
        self.lsn_labels.entry(l.0).or_insert_with(|| format!("L{n}")).clone()
    }

    fn db(&self) -> &Arc<Database> {
        self.db.as_ref().expect("database open")
    }

    fn tid(&self, s: &str) -> Result<Tid, String> {
        if let Some(n) = self.names.get(s) {
            return Ok(*n);
        }
        let inner = s.strip_prefix('(').and_then(|r| r.strip_suffix(')')).ok_or_else(|| format!("unknown row {s}"))?;
        let (b, o) = inner.split_once(',').ok_or_else(|| format!("bad TID {s}"))?;
        let b: u32 = b.trim().parse().map_err(|_| format!("bad TID {s}"))?;
        let o: u16 = o.trim().parse().map_err(|_| format!("bad TID {s}"))?;
        Ok(Tid { block: settledb::BlockNumber(b), offset: settledb::OffsetNumber(o) })
    }

    fn session(&mut self, name: &str) -> &mut Session {
        let db = self.db().clone();
        self.sessions.entry(name.to_string()).or_insert_with(|| {
            let (ctx, crx) = mpsc::channel();
            let (rtx, rrx) = mpsc::channel();
            let handle = std::thread::Builder::new()
                .name(format!("session {name}"))
                .spawn(move || session_main(db, crx, rtx))
                .expect("spawn session thread");
            Session { cmds: ctx, results: rrx, handle, pending: None }
        })
    }

    /// Runs one step; returns its output lines. `Err` means the script itself is broken or stuck.
    fn step(&mut self, line: &str) -> Result<Vec<String>, String> {
        match line.split_once(':') {
            Some((who, rest)) if !who.contains(' ') && !who.is_empty() => self.session_step(who, rest.trim()),
            _ => self.global_step(line),
        }
    }

    fn global_step(&mut self, line: &str) -> Result<Vec<String>, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let db = self.db().clone();
        let table = |n: &str| db.table(n).map_err(|e| e.to_string());
        let block = |s: &str| s.parse::<u32>().map_err(|_| format!("bad block number {s}"));
        let r: Result<Vec<String>, String> = match words.as_slice() {
            ["create", "index", name, "on", t, rest @ ..] => {
                let rest = rest.join(" ");
                let unique = rest.trim_end().ends_with("unique");
                let cols = rest.trim_end().trim_end_matches("unique");
                let cols =
                    cols.trim().strip_prefix('(').and_then(|c| c.strip_suffix(')')).ok_or("create index: (cols)")?;
                let cols: Vec<&str> = cols.split(',').map(str::trim).collect();
                Ok(db.create_index(name, t, &cols, unique).map_or_else(|e| vec![format!("error: {e}")], |_| ok()))
            }
            ["inspect", "index", name, b] => {
                let ix = db.index(name).map_err(|e| e.to_string())?;
                let out = db.describe_index_page(&ix, block(b)?).map_err(|e| e.to_string())?;
                // Leave out WAL positions (they move with any record format change) and cut
                // long key dumps.
                Ok(out
                    .lines()
                    .map(|l| match l.find("flags:") {
                        Some(i) if l.starts_with("lsn:") => l[i..].to_string(),
                        _ if l.chars().count() > 110 => format!("{}…", l.chars().take(110).collect::<String>()),
                        _ => l.to_string(),
                    })
                    .collect())
            }
            ["create", rest @ ..] => {
                let (name, schema, options) = parse_create(&rest.join(" "))?;
                Ok(db.create_table(&name, schema, options).map_or_else(|e| vec![format!("error: {e}")], |_| ok()))
            }
            ["inspect", t, b] => {
                let out = db.describe_page(&table(t)?, block(b)?, false).map_err(|e| e.to_string())?;
                Ok(out.lines().map(str::to_string).collect())
            }
            ["prune", t, b] => {
                let changed = db.prune_page(&table(t)?, block(b)?).map_err(|e| e.to_string())?;
                Ok(vec![if changed { "pruned" } else { "nothing to prune" }.into()])
            }
            ["vacuum", t, opts @ ..] => {
                let params = parse_vacuum(opts)?;
                let r = db.vacuum(Some(t), &params).map_err(|e| e.to_string())?.remove(0);
                Ok(r.verbose_text()
                    .lines()
                    .filter(|l| !VACUUM_UNSTABLE_LINES.iter().any(|p| l.starts_with(p)))
                    .map(str::to_string)
                    .collect())
            }
            ["config", pairs @ ..] => {
                for kv in pairs {
                    let (k, v) = kv.split_once('=').ok_or_else(|| format!("config: expected name=value, got {kv}"))?;
                    self.config.set(k, v).map_err(|e| e.to_string())?;
                }
                drop(db);
                self.reopen(false).map(|()| ok())
            }
            ["consume", "xids", n] => {
                let n: u64 = n.parse().map_err(|_| format!("bad count {n}"))?;
                db.consume_xids(n).map(|next| vec![format!("next xid {}", next.xid())]).map_err(|e| e.to_string())
            }
            ["relfrozenxid", t] => Ok(vec![format!("{}", table(t)?.relfrozenxid())]),
            ["vm", t] => {
                let bits = db.visibility_map(&table(t)?).map_err(|e| e.to_string())?;
                Ok(bits
                    .iter()
                    .enumerate()
                    .map(|(b, (v, f))| {
                        format!(
                            "block {b}: {}",
                            match (v, f) {
                                (true, true) => "all-visible all-frozen",
                                (true, false) => "all-visible",
                                _ => "-",
                            }
                        )
                    })
                    .collect())
            }
            ["fsm", t] => {
                let cats = db.free_space_map(&table(t)?).map_err(|e| e.to_string())?;
                Ok(cats
                    .iter()
                    .enumerate()
                    .map(|(b, c)| format!("block {b}: {} bytes free", u32::from(*c) * 32))
                    .collect())
            }
            ["pin", t, b] => {
                let (t, b) = (t.to_string(), block(b)?);
                let (release, wait) = mpsc::channel::<()>();
                let (ready_tx, ready) = mpsc::channel::<Result<(), String>>();
                let db2 = db.clone();
                let name = t.clone();
                let handle = std::thread::spawn(move || {
                    let pinned = db2.table(&name).and_then(|tb| db2.pin_page(&tb, b));
                    match pinned {
                        Ok(pin) => {
                            let _ = ready_tx.send(Ok(()));
                            let _ = wait.recv();
                            drop(pin);
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                        }
                    }
                });
                ready.recv_timeout(STEP_TIMEOUT).map_err(|e| e.to_string())??;
                self.pins.insert((t, b), (release, handle));
                Ok(ok())
            }
            ["unpin", t, b] => {
                let (release, handle) =
                    self.pins.remove(&(t.to_string(), block(b)?)).ok_or_else(|| format!("{t} {b} is not pinned"))?;
                let _ = release.send(());
                let _ = handle.join();
                Ok(ok())
            }
            ["commit", "prepared", gid] => {
                Ok(db.commit_prepared(gid).map_or_else(|e| vec![format!("error: {e}")], |()| ok()))
            }
            ["rollback", "prepared", gid] => {
                Ok(db.rollback_prepared(gid).map_or_else(|e| vec![format!("error: {e}")], |()| ok()))
            }
            ["prepared", "xacts"] => {
                let v = db.prepared_xacts();
                if v.is_empty() {
                    Ok(vec!["no prepared transactions".into()])
                } else {
                    Ok(v.iter().map(|p| format!("xid {} gid {} subxacts {}", p.xid.xid(), p.gid, p.subxacts)).collect())
                }
            }
            ["slot", "create", name, plugin, opts @ ..] => {
                let two_phase = opts == ["two_phase"];
                Ok(db
                    .create_logical_replication_slot(name, plugin, two_phase)
                    .map_or_else(|e| vec![format!("error: {e}")], |_| ok()))
            }
            ["slot", "drop", name] => {
                Ok(db.drop_replication_slot(name).map_or_else(|e| vec![format!("error: {e}")], |()| ok()))
            }
            ["slot", "advance", name] => Ok(db
                .replication_slot_advance(name, settledb::Lsn(u64::MAX))
                .map_or_else(|e| vec![format!("error: {e}")], |_| ok())),
            ["slots"] => {
                let v = db.replication_slots();
                if v.is_empty() {
                    return Ok(vec!["no replication slots".into()]);
                }
                Ok(v.iter()
                    .map(|s| {
                        let xid = |x: Option<settledb::Xid>| x.map_or("-".to_string(), |x| x.to_string());
                        format!(
                            "{} {} catalog_xmin {} restart_lsn {} confirmed_flush_lsn {} wal_status {}{}",
                            s.slot_name,
                            s.plugin,
                            xid(s.catalog_xmin),
                            self.lsn_label(s.restart_lsn),
                            self.lsn_label(s.confirmed_flush_lsn),
                            s.wal_status.map_or("-", |w| w.as_str()),
                            if s.two_phase { " two_phase" } else { "" }
                        )
                    })
                    .collect())
            }
            ["checkpoint"] => db.checkpoint().map(|()| ok()).map_err(|e| e.to_string()),
            ["check"] => run_check(&db).map(|()| ok()),
            ["restart"] => {
                drop(db);
                self.reopen(false).map(|()| ok())
            }
            ["crash"] => {
                drop(db);
                self.reopen(true).map(|()| ok())
            }
            _ => Err(format!("unknown step `{line}`")),
        };
        r
    }

    fn session_step(&mut self, who: &str, rest: &str) -> Result<Vec<String>, String> {
        let (rest, background) = match rest.strip_suffix('&') {
            Some(r) => (r.trim(), true),
            None => (rest, false),
        };
        if rest == "await" {
            let s = self.session(who);
            let bind = s.pending.take().ok_or_else(|| format!("{who}: nothing to await"))?;
            let r = recv(s, who)?;
            return Ok(self.finish(r, bind));
        }
        if self.session(who).pending.is_some() {
            return Err(format!("{who} is still running a step started with &: await it first"));
        }
        let (cmd, bind) = self.parse_session_cmd(rest)?;
        if background {
            return self.start_background(who, cmd, bind);
        }
        let s = self.session(who);
        s.cmds.send(cmd).map_err(|_| format!("{who}: session thread is gone"))?;
        let r = recv(s, who).map_err(|e| format!("{e}; if the step waits for another session, end it with &"))?;
        Ok(self.finish(r, bind))
    }

    /// Starts a step and returns once it has finished or the engine reports a new lock waiter.
    fn start_background(&mut self, who: &str, cmd: Cmd, bind: Option<String>) -> Result<Vec<String>, String> {
        let db = self.db().clone();
        let waiting_before: HashSet<u32> = db.lock_waits().iter().map(|(w, _)| w.0).collect();
        // A slot being created shows (in memory) while it waits for its consistent point.
        let creating = match &cmd {
            Cmd::CreateSlot { name, .. } if db.replication_slot(name).is_none() => Some(name.clone()),
            _ => None,
        };
        let s = self.session(who);
        s.cmds.send(cmd).map_err(|_| format!("{who}: session thread is gone"))?;
        let start = Instant::now();
        loop {
            match s.results.try_recv() {
                Ok(r) => return Ok(self.finish(r, bind)),
                Err(TryRecvError::Disconnected) => return Err(format!("{who}: session thread died")),
                Err(TryRecvError::Empty) => {}
            }
            if db.lock_waits().iter().any(|(w, _)| !waiting_before.contains(&w.0))
                || creating.as_ref().is_some_and(|n| db.replication_slot(n).is_some())
            {
                s.pending = Some(bind);
                return Ok(vec!["blocked".into()]);
            }
            if start.elapsed() > STEP_TIMEOUT {
                return Err(format!("{who}: step neither finished nor blocked in {STEP_TIMEOUT:?}"));
            }
            std::thread::yield_now();
        }
    }

    fn finish(&mut self, r: StepResult, bind: Option<String>) -> Vec<String> {
        if let (Ok(Out::Tid(t)), Some(name)) = (&r, bind) {
            self.names.insert(name, *t);
        }
        render(&r)
    }

    fn parse_session_cmd(&self, s: &str) -> Result<(Cmd, Option<String>), String> {
        let (head, bind) = split_as(s);
        let words: Vec<&str> = head.split_whitespace().collect();
        let cmd = match words.as_slice() {
            ["begin"] | ["begin", "read", "committed"] => Cmd::Begin(IsolationLevel::ReadCommitted),
            ["begin", "repeatable", "read"] => Cmd::Begin(IsolationLevel::RepeatableRead),
            ["commit"] => Cmd::Commit,
            ["rollback"] => Cmd::Rollback,
            ["savepoint", name] => Cmd::Savepoint(name.to_string()),
            ["release", name] | ["release", "savepoint", name] => Cmd::Release(name.to_string()),
            ["rollback", "to", name] | ["rollback", "to", "savepoint", name] => Cmd::RollbackTo(name.to_string()),
            ["prepare", gid] => Cmd::Prepare(gid.to_string()),
            ["slot", "create", name, plugin, opts @ ..] => {
                Cmd::CreateSlot { name: name.to_string(), plugin: plugin.to_string(), two_phase: opts == ["two_phase"] }
            }
            ["insert", table, ..] => {
                let values = head.split_once(table).map(|(_, v)| v).unwrap_or_default();
                Cmd::Op(Op::Insert { table: table.to_string(), values: parse_values(values)? })
            }
            ["update", table, tid, "set", ..] => {
                let assigns = head.split_once(" set ").map(|(_, a)| a).unwrap_or_default();
                let mut sets = Vec::new();
                for a in split_top(assigns) {
                    let (col, e) = a.split_once('=').ok_or_else(|| format!("bad assignment `{a}`"))?;
                    sets.push((col.trim().to_string(), parse_expr(e)?));
                }
                Cmd::Op(Op::Update { table: table.to_string(), tid: self.tid(tid)?, sets })
            }
            ["delete", table, tid] => Cmd::Op(Op::Delete { table: table.to_string(), tid: self.tid(tid)? }),
            ["fetch", table, tid] => Cmd::Op(Op::Fetch { table: table.to_string(), tid: self.tid(tid)? }),
            ["scan", table] => Cmd::Op(Op::Scan { table: table.to_string() }),
            ["get", index, ..] => {
                let key = head.split_once(index).map(|(_, k)| k).unwrap_or_default();
                Cmd::Op(Op::Get { index: index.to_string(), key: parse_values(key)? })
            }
            ["range", index, ..] => {
                let tail = head.split_once(index).map(|(_, t)| t).unwrap_or_default().trim();
                let (tail, desc) = match tail.strip_suffix("desc") {
                    Some(t) => (t.trim(), true),
                    None => (tail, false),
                };
                let (lo, hi) = match (tail.find("from"), tail.find("to")) {
                    (Some(f), Some(t)) if f < t => (Some(&tail[f + 4..t]), Some(&tail[t + 2..])),
                    (Some(f), None) => (Some(&tail[f + 4..]), None),
                    (None, Some(t)) => (None, Some(&tail[t + 2..])),
                    (None, None) => (None, None),
                    _ => return Err(format!("range: `from (k)` comes before `to (k)` in `{s}`")),
                };
                Cmd::Op(Op::Range {
                    index: index.to_string(),
                    lo: lo.map(parse_values).transpose()?,
                    hi: hi.map(parse_values).transpose()?,
                    desc,
                })
            }
            ["update", index, "key", ..] => {
                let (k, assigns) = head.split_once(" set ").ok_or("update … key (k) set …")?;
                let key = k.split_once(" key ").map(|(_, k)| k).unwrap_or_default();
                let mut sets = Vec::new();
                for a in split_top(assigns) {
                    let (col, e) = a.split_once('=').ok_or_else(|| format!("bad assignment `{a}`"))?;
                    sets.push((col.trim().to_string(), parse_expr(e)?));
                }
                Cmd::Op(Op::UpdateByKey { index: index.to_string(), key: parse_values(key)?, sets })
            }
            ["delete", index, "key", ..] => {
                let key = head.split_once(" key ").map(|(_, k)| k).unwrap_or_default();
                Cmd::Op(Op::DeleteByKey { index: index.to_string(), key: parse_values(key)? })
            }
            _ => return Err(format!("unknown session step `{s}`")),
        };
        Ok((cmd, bind))
    }

    /// Ends every session (rolling back, or at a crash abandoning, open transactions), closes or
    /// abandons the database, and opens it again (crash recovery after `crash`).
    fn reopen(&mut self, crash: bool) -> Result<(), String> {
        if let Some((who, _)) = self.sessions.iter().find(|(_, s)| s.pending.is_some()) {
            return Err(format!("{who} has a step in progress; await it before a restart or crash"));
        }
        self.end_sessions(crash);
        let db = Arc::try_unwrap(self.db.take().expect("open")).map_err(|_| "database still shared")?;
        if crash {
            db.abandon();
        } else {
            db.close().map_err(|e| e.to_string())?;
        }
        self.db = Some(Arc::new(Database::open(&self.dir, self.config.clone()).map_err(|e| e.to_string())?));
        Ok(())
    }

    fn end_sessions(&mut self, crash: bool) {
        for (_, s) in std::mem::take(&mut self.sessions) {
            let _ = s.cmds.send(Cmd::Exit { crash });
            let _ = s.handle.join();
        }
    }
}

/// VACUUM VERBOSE lines that depend on timing or WAL layout, left out of golden output.
const VACUUM_UNSTABLE_LINES: &[&str] = &["avg read rate:", "buffer usage:", "WAL usage:", "system usage:"];

fn parse_vacuum(opts: &[&str]) -> Result<settledb::VacuumParams, String> {
    let mut p = settledb::VacuumParams { verbose: true, ..Default::default() };
    let mut it = opts.iter();
    while let Some(o) = it.next() {
        let mut val = || it.next().copied().ok_or_else(|| format!("vacuum: {o} needs a value"));
        match *o {
            "freeze" => p.freeze = true,
            "disable_page_skipping" => p.disable_page_skipping = true,
            "index_cleanup" => {
                p.index_cleanup = settledb::IndexCleanup::parse(val()?).ok_or("vacuum: index_cleanup auto|on|off")?
            }
            "truncate" => p.truncate = Some(val()? == "on"),
            "policy" => {
                p.policy = Some(settledb::FreezePolicy::parse(val()?).ok_or("vacuum: policy lazy|pg16|eager|adaptive")?)
            }
            other => return Err(format!("vacuum: unknown option {other}")),
        }
    }
    Ok(p)
}

fn ok() -> Vec<String> {
    vec!["ok".into()]
}

fn recv(s: &Session, who: &str) -> Result<StepResult, String> {
    match s.results.recv_timeout(STEP_TIMEOUT) {
        Ok(r) => Ok(r),
        Err(RecvTimeoutError::Timeout) => Err(format!("{who}: step did not finish within {STEP_TIMEOUT:?}")),
        Err(RecvTimeoutError::Disconnected) => Err(format!("{who}: session thread died")),
    }
}

/// Runs one script; returns the file as it should read with the actual output.
fn run_script(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    if !text.starts_with('#') {
        return Err("a script must open with a prose header of # lines saying what it proves".into());
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let data = dir.path().join("data");
    let db = Database::open(&data, config()).map_err(|e| e.to_string())?;
    let mut runner = Runner {
        dir: data,
        config: config(),
        pins: HashMap::new(),
        db: Some(Arc::new(db)),
        sessions: BTreeMap::new(),
        names: HashMap::new(),
        lsn_labels: HashMap::new(),
    };
    let mut out = String::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('>') {
            continue;
        }
        out.push_str(line);
        out.push('\n');
        let step = line.trim();
        if step.is_empty() || step.starts_with('#') {
            continue;
        }
        let lines = runner.step(step).map_err(|e| format!("line {}: `{step}`: {e}", n + 1))?;
        for l in lines {
            let l = format!("> {l}");
            out.push_str(l.trim_end());
            out.push('\n');
        }
    }
    if let Some((who, _)) = runner.sessions.iter().find(|(_, s)| s.pending.is_some()) {
        return Err(format!("script ends with {who}'s step started with & never awaited"));
    }
    runner.end_sessions(false);
    let db = Arc::try_unwrap(runner.db.take().expect("open")).map_err(|_| "database still shared")?;
    db.close().map_err(|e| e.to_string())?;
    Ok(out)
}

/// The first differing lines of two texts, for the failure message.
fn diff(expected: &str, actual: &str) -> String {
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let first = e.iter().zip(&a).position(|(x, y)| x != y).unwrap_or(e.len().min(a.len()));
    let mut s = format!("first difference at line {}:\n", first + 1);
    for l in e.iter().skip(first).take(8) {
        s.push_str(&format!("  - {l}\n"));
    }
    for l in a.iter().skip(first).take(8) {
        s.push_str(&format!("  + {l}\n"));
    }
    s
}

#[test]
fn golden_scripts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testscripts");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("testscripts directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scripts in {}", dir.display());
    let update = std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for f in &files {
        let name = f.file_name().expect("file name").to_string_lossy().to_string();
        match run_script(f) {
            Err(e) => failures.push(format!("{name}: {e}")),
            Ok(actual) => {
                let expected = std::fs::read_to_string(f).expect("read script");
                if actual != expected {
                    if update {
                        std::fs::write(f, &actual).expect("rewrite script");
                        eprintln!("updated {name}");
                    } else {
                        failures.push(format!(
                            "{name}: output differs (UPDATE_GOLDEN=1 rewrites)\n{}",
                            diff(&expected, &actual)
                        ));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} scripts failed:\n\n{}", failures.len(), files.len(), failures.join("\n\n"));
}
