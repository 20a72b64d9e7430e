//! The session's prepared statements, SQL-level (`PREPARE`, `EXECUTE`, `DEALLOCATE`) and the
//! protocol's (a named Parse), in one table, and `DISCARD`, as PostgreSQL 15's
//! `commands/prepare.c` and `commands/discard.c` do them.
//!
//! # PREPARE
//!
//! The statement was parsed once, with the PREPARE (`crate::parse::PrepareCmd`). Here it is
//! checked once: the relations it names must exist (42P01), and its parameter types are
//! settled the way the extended protocol's Parse settles them ([`crate::query::describe`]):
//! the declared ones first, then, for each `$n` past the list, the type of what it is compared
//! with or assigned to (`a = $2` takes `a`'s type), text where nothing says (`SELECT $1`, as
//! PostgreSQL resolves an unknown output column). As in `PrepareQuery`, `$0` is 42P02 (`there
//! is no parameter $0`) and a number no declared type covers and the statement does not name
//! (`$1` when only `$2` appears) is 42P18. A name in use is 42P05.
//!
//! # EXECUTE
//!
//! `EXECUTE name (expr, ...)`: the count must match (42601, `wrong number of parameters for
//! prepared statement "q"`, DETAIL `Expected 2 parameters but got 1.`), then each argument is
//! evaluated and converted to its parameter's type (`'12a'` for an integer is 22P02), in the
//! same transaction as the statement itself, which then runs as if it had been sent with
//! those values bound: its rows and command tag are the statement's. An unknown name is 26000.
//! A single-table SELECT keeps what its planning decides before any value is known (its
//! table, output columns, the index its WHERE clause can use and whether that index covers
//! the query: [`crate::query::PlanSlot`]) until the catalogs change; each EXECUTE, and each
//! protocol Execute, then binds its values to that choice (the key bounds, the ORDER BY and
//! LIMIT decisions) instead of planning from the start. The bound plan depends on the values,
//! which PostgreSQL calls a custom plan, so `pg_prepared_statements.custom_plans` counts the
//! executions of a statement with parameters and `generic_plans` those of one without
//! (PostgreSQL always uses a generic plan there).
//!
//! # One namespace
//!
//! As in PostgreSQL (`prepared_queries`, one hash table per backend), both kinds live in one
//! table, by name: [`Prepared`] (the text, the parsed statement, its parameter types and
//! result columns) inside pgwire's `StoredStatement`, the form Bind makes a portal of without
//! copying. PREPARE adds one (`from_sql` true, parameter types from the statement); the wire
//! layer's Parse of a named statement adds one through [`parsed`] (`from_sql` false), so a
//! name in use is 42P05 for either. EXECUTE runs either kind; Bind and Describe
//! ([`lookup`]) find either; DEALLOCATE, DEALLOCATE ALL, DISCARD ALL and Close ([`close`])
//! remove either. The unnamed statement is not here: it is pgwire's (its store's
//! `POSTGRESQL_DEFAULT_NAME`), replaced by each unnamed Parse, and not listed, as in
//! PostgreSQL. `pg_prepared_statements` ([`view_rows`]) lists the table.
//!
//! ```text
//!   PREPARE q ...  ─┐                          ┌─ EXECUTE q / s0
//!   Parse "s0" ... ─┼─> STATEMENTS (by name) ──┼─ Bind "q" / "s0", Describe S
//!                   │   name -> Entry          ├─ DEALLOCATE [ALL], DISCARD ALL, Close S
//!   Parse ""  ─> pgwire's store (unnamed)      └─ pg_prepared_statements
//! ```
//!
//! Executions are counted in [`Prepared`] (atomics: Bind/Execute is the hot path of
//! `pgbench -M prepared`, and a lookup by name, a reference count and a relaxed add are all it
//! costs here, no allocation and no lock beyond the thread-local's borrow flag).
//!
//! # Lifetime and where they live
//!
//! Prepared statements belong to the session: they survive COMMIT and ROLLBACK (a PREPARE in
//! a block that rolls back stays, as in PostgreSQL, where PREPARE is not transactional) and go
//! with the connection. They are kept in a thread-local of the connection's thread, which the
//! session has to itself for its whole life (`crate::wire`), because the executor reads the
//! `pg_prepared_statements` view ([`view_rows`]) through `crate::views::rows`, which is given
//! no session, and pgwire's Parse and Bind handlers, which run on that thread, reach it with
//! no call into the session. The session holds a [`Statements`] handle; dropping it (the
//! session ending) empties the thread's map; a Parse on a thread without one is refused.
//!
//! # DISCARD
//!
//! `DISCARD PLANS` has no plans to drop and `DISCARD TEMP` no temporary tables; `DISCARD
//! SEQUENCES` forgets what `currval` would answer; `DISCARD ALL` does all of that, deallocates
//! every prepared statement and runs `RESET ALL`, and is refused inside a block (25001).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pgwire::api::stmt::StoredStatement;
use pgwire::api::store::Entry as Stored;
use sqlparser::ast::{Expr, FromTable, Statement, TableFactor, TableObject};

use super::{Cx, Field, Notice, Outcome, Session};
use crate::error::SqlError;
use crate::expr::{cast, eval, Scope};
use crate::parse::{Discard, PrepareCmd, Stmt};
use crate::types::{Datum, SqlType};
use crate::Shared;

/// A parsed and described statement: what Parse makes of its query and PREPARE of its
/// statement, and what Bind, Describe and EXECUTE use.
#[derive(Debug)]
pub struct Prepared {
    /// The text `pg_prepared_statements` shows: Parse's query, or the whole PREPARE.
    pub sql: String,
    pub stmt: Stmt,
    /// Each `$n`'s type, declared or inferred.
    pub params: Vec<SqlType>,
    /// The result columns (`None`: it returns no rows).
    pub fields: Option<Vec<Field>>,
    /// Executions with no parameters (PostgreSQL's generic plans) and with some (custom).
    generic_plans: AtomicU64,
    custom_plans: AtomicU64,
    /// What planning its SELECT decided before any value was known, kept while the catalogs
    /// stay the same.
    pub plan: crate::query::PlanSlot,
}

impl Prepared {
    pub fn new(sql: String, stmt: Stmt, params: Vec<SqlType>, fields: Option<Vec<Field>>) -> Prepared {
        Prepared {
            sql,
            stmt,
            params,
            fields,
            generic_plans: AtomicU64::new(0),
            custom_plans: AtomicU64::new(0),
            plan: Default::default(),
        }
    }

    /// Counts one execution, where PostgreSQL chooses its plan (hot path: one relaxed add).
    pub fn count_plan(&self) {
        let plans = if self.params.is_empty() { &self.generic_plans } else { &self.custom_plans };
        plans.fetch_add(1, Ordering::Relaxed);
    }
}

/// A prepared statement as the extended protocol keeps it (pgwire's types): Bind makes a
/// portal of it without copying. `Empty` is a Parse of an empty query.
pub type StoredPrepared = Stored<StoredStatement<Arc<Prepared>>>;

/// One prepared statement of the session, of either kind.
struct Entry {
    stored: StoredPrepared,
    /// Made by PREPARE (true) or by a Parse message (false).
    from_sql: bool,
    /// Microseconds since the Unix epoch.
    prepared_at: i64,
}

thread_local! {
    /// The prepared statements of the session this thread serves, by name.
    static STATEMENTS: RefCell<BTreeMap<String, Entry>> = const { RefCell::new(BTreeMap::new()) };
    /// How many EXECUTEs are running inside one another on this thread.
    static EXECUTE_DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Whether a [`Statements`] handle is alive on this thread (there is never more than one).
    static HELD: Cell<bool> = const { Cell::new(false) };
}

/// The session's handle on its prepared statements (see the module documentation); they go
/// when it drops.
#[derive(Debug)]
pub struct Statements(());

impl Statements {
    pub fn new() -> Statements {
        debug_assert!(!HELD.get(), "a second session on one thread would share its prepared statements");
        HELD.set(true);
        STATEMENTS.with(|m| m.borrow_mut().clear());
        Statements(())
    }

    fn clear(&self) {
        STATEMENTS.with(|m| m.borrow_mut().clear());
    }
}

impl Drop for Statements {
    fn drop(&mut self) {
        self.clear();
        HELD.set(false);
    }
}

/// How deep EXECUTEs may nest (a statement executing another, which executes another...).
const EXECUTE_DEPTH_MAX: u32 = 32;

/// Puts [`EXECUTE_DEPTH`] back to what it was when dropped.
struct Nested(u32);

impl Drop for Nested {
    fn drop(&mut self) {
        EXECUTE_DEPTH.set(self.0);
    }
}

fn does_not_exist(name: &str) -> SqlError {
    SqlError::new("26000", format!("prepared statement \"{name}\" does not exist"))
}

fn already_exists(name: &str) -> SqlError {
    SqlError::new("42P05", format!("prepared statement \"{name}\" already exists"))
}

/// Keeps what a Parse named `name` made (a name in use is 42P05), on the connection's thread.
/// The unnamed statement is not kept here: it is pgwire's, replaced by each unnamed Parse.
pub fn parsed(name: &str, stored: StoredPrepared) -> Result<(), SqlError> {
    debug_assert!(!name.is_empty(), "the unnamed statement is pgwire's");
    if !HELD.get() {
        return Err(SqlError::new("XX000", "no session on this connection's thread"));
    }
    STATEMENTS.with(|m| match m.borrow_mut().entry(name.to_string()) {
        std::collections::btree_map::Entry::Occupied(_) => Err(already_exists(name)),
        std::collections::btree_map::Entry::Vacant(v) => {
            v.insert(Entry { stored, from_sql: false, prepared_at: crate::expr::now_micros() });
            Ok(())
        }
    })
}

/// The statement named `name`, of either kind, for Bind and Describe (hot path: a lookup
/// and a reference count, no allocation).
pub fn lookup(name: &str) -> Option<StoredPrepared> {
    STATEMENTS.with(|m| m.borrow().get(name).map(|e| e.stored.clone()))
}

/// Close of statement `name`: it goes, whichever kind it is; closing none is no error.
pub fn close(name: &str) {
    STATEMENTS.with(|m| m.borrow_mut().remove(name));
}

impl<'db> Session<'db> {
    /// PREPARE, EXECUTE or DEALLOCATE.
    pub(super) fn prepare_cmd(&mut self, c: &PrepareCmd, notices: &mut Vec<Notice>) -> Result<Outcome, SqlError> {
        match c {
            PrepareCmd::Prepare { name, types, stmt, text, placeholders } => {
                prepare(self.sh, name, types, stmt, text, placeholders)?;
                Ok(Outcome::Command("PREPARE".into()))
            }
            PrepareCmd::Execute { name, args } => self.execute_prepared(name, args, notices),
            PrepareCmd::Deallocate { name: None } => {
                self.prepared.clear();
                Ok(Outcome::Command("DEALLOCATE ALL".into()))
            }
            PrepareCmd::Deallocate { name: Some(name) } => {
                STATEMENTS.with(|m| m.borrow_mut().remove(name)).ok_or_else(|| does_not_exist(name))?;
                Ok(Outcome::Command("DEALLOCATE".into()))
            }
        }
    }

    /// The result columns of prepared statement `name`, for Describe of an `EXECUTE name`
    /// (`None`: no such statement, or it returns no rows).
    pub fn prepared_fields(&self, name: &str) -> Option<Vec<super::Field>> {
        lookup(name)?.value()?.statement.fields.clone()
    }

    fn execute_prepared(&mut self, name: &str, args: &[Expr], notices: &mut Vec<Notice>) -> Result<Outcome, SqlError> {
        let stored = lookup(name).ok_or_else(|| does_not_exist(name))?;
        // A Parse of an empty query: nothing runs.
        let Some(stored) = stored.value() else { return Ok(Outcome::Command(String::new())) };
        let prepared = stored.statement.clone();
        if args.len() != prepared.params.len() {
            return Err(SqlError::new(
                "42601",
                format!("wrong number of parameters for prepared statement \"{name}\""),
            )
            .with_detail(format!("Expected {} parameters but got {}.", prepared.params.len(), args.len())));
        }
        // A Parse may name `EXECUTE x` itself, and statements may execute each other in a
        // cycle: PostgreSQL stops that at its stack depth limit, and so does this.
        let depth = EXECUTE_DEPTH.get();
        if depth >= EXECUTE_DEPTH_MAX {
            return Err(SqlError::new("54001", "stack depth limit exceeded")
                .with_hint("EXECUTE nests prepared statements too deeply (a statement executing itself?)."));
        }
        EXECUTE_DEPTH.set(depth + 1);
        // Set back however the run ends (a panic is caught above the session).
        let _depth = Nested(depth);
        self.execute_stmt(args, &prepared, notices)
    }

    /// EXECUTE's run of `prepared` with `args`.
    fn execute_stmt(
        &mut self,
        args: &[Expr],
        prepared: &Arc<Prepared>,
        notices: &mut Vec<Notice>,
    ) -> Result<Outcome, SqlError> {
        let stmt = &prepared.stmt;
        let Stmt::Sql(s) = stmt else { return self.dispatch(stmt, &[], notices) };
        if let Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) = s.as_ref() {
            let command = s.to_string().split_whitespace().next().unwrap_or_default().to_ascii_uppercase();
            self.writable(&command)?;
        }
        self.in_transaction(&[], notices, |cx| {
            let values = arguments(cx, args, &prepared.params)?;
            // Counted where PostgreSQL chooses the plan: after the arguments, before the run.
            prepared.count_plan();
            with_params(cx, &values, prepared, |cx| crate::query::execute(cx, s))
        })
    }

    /// DISCARD.
    pub(super) fn discard(&mut self, what: Discard) -> Result<Outcome, SqlError> {
        match what {
            Discard::All => {
                self.outside_block(what.tag())?;
                self.prepared.clear();
                // RESET ALL's own path.
                let reset = crate::settings::reset(&mut self.settings, &self.reset_to, &sqlparser::ast::Reset::ALL);
                self.settings_changed();
                reset?;
                self.sequence_values = Default::default();
            }
            Discard::Sequences => self.sequence_values = Default::default(),
            // No cached plans, no temporary tables.
            Discard::Plans | Discard::Temp => {}
        }
        Ok(Outcome::Command(what.tag().into()))
    }
}

/// PREPARE's checks (module documentation), then the statement is kept under `name`.
fn prepare(
    sh: &Shared,
    name: &str,
    declared: &[SqlType],
    stmt: &Stmt,
    text: &str,
    placeholders: &[u64],
) -> Result<(), SqlError> {
    if STATEMENTS.with(|m| m.borrow().contains_key(name)) {
        return Err(already_exists(name));
    }
    // The protocol allows 65535 parameters; a larger number could not be bound anyway.
    if let Some(&n) = placeholders.iter().find(|&&n| n == 0 || n > u64::from(u16::MAX)) {
        return Err(SqlError::new("42P02", format!("there is no parameter ${n}")));
    }
    relations_exist(sh, stmt)?;
    let client: Vec<Option<SqlType>> = declared.iter().copied().map(Some).collect();
    let (mut params, fields) = crate::query::describe(sh, stmt, &client);
    // A `$n` where the inference does not look (a select list, a subquery) is text, as
    // PostgreSQL takes a parameter whose type nothing decides.
    let named_max = placeholders.last().map_or(0, |&n| n as usize);
    if params.len() < named_max {
        params.resize(named_max, SqlType::Text);
    }
    let named = |i: usize| placeholders.binary_search(&(i as u64)).is_ok();
    if let Some(i) = (declared.len() + 1..=params.len()).find(|&i| !named(i)) {
        return Err(SqlError::new("42P18", format!("could not determine data type of parameter ${i}")));
    }
    let prepared = Prepared::new(text.to_string(), stmt.clone(), params, fields);
    // Bind takes the parameter types from the statement (none declared by a client).
    let stored = StoredStatement::new(name.to_string(), Arc::new(prepared), Vec::new());
    let entry =
        Entry { stored: Stored::Value(Arc::new(stored)), from_sql: true, prepared_at: crate::expr::now_micros() };
    STATEMENTS.with(|m| m.borrow_mut().insert(name.to_string(), entry));
    Ok(())
}

/// 42P01 at PREPARE for a relation the statement reads or writes that does not exist (its
/// FROM list's, or its target table's), as PostgreSQL's parse analysis finds it.
fn relations_exist(sh: &Shared, stmt: &Stmt) -> Result<(), SqlError> {
    let Stmt::Sql(s) = stmt else { return Ok(()) };
    let table = |f: &TableFactor| match f {
        TableFactor::Table { name, .. } => Some(crate::ddl::object_name(name)),
        _ => None,
    };
    let target = match s.as_ref() {
        Statement::Query(q) => return crate::query::relations_exist(sh, q),
        Statement::Insert(i) => match &i.table {
            TableObject::TableName(n) => Some(crate::ddl::object_name(n)),
            _ => None,
        },
        Statement::Update(u) => table(&u.table.relation),
        Statement::Delete(d) => match &d.from {
            FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t.first().and_then(|t| table(&t.relation)),
        },
        _ => None,
    };
    let Some(name) = target else { return Ok(()) };
    sh.db.table(&name).map(drop).map_err(|_| SqlError::undefined_table(&name))
}

/// EXECUTE's arguments, evaluated and converted to the parameters' types as an assignment
/// converts them (a string as the type's input; `1.7` to an integer rounds), else 42804 with
/// PostgreSQL's words.
fn arguments(cx: &mut Cx<'_, '_>, args: &[Expr], types: &[SqlType]) -> Result<Vec<Datum>, SqlError> {
    let scope = Scope::empty();
    let mut out = Vec::with_capacity(args.len());
    for (i, (e, &ty)) in args.iter().zip(types).enumerate() {
        let v = eval(e, &scope, &[], cx, None)?;
        let given = type_name(&v);
        let v = match v {
            Datum::Text(s) if matches!(ty, SqlType::Text) => Datum::Text(s),
            v => cast(v, ty).map_err(|e| {
                if e.code != "42804" {
                    return e;
                }
                SqlError::new(
                    "42804",
                    format!(
                        "parameter ${} of type {given} cannot be coerced to the expected type {}",
                        i + 1,
                        ty.display()
                    ),
                )
                .with_hint("You will need to rewrite or cast the expression.")
            })?,
        };
        out.push(v);
    }
    Ok(out)
}

/// The type PostgreSQL would give the value of an EXECUTE argument, for its error message.
fn type_name(d: &Datum) -> &'static str {
    match d {
        Datum::Null | Datum::Text(_) => "text",
        Datum::Bool(_) => "boolean",
        Datum::Int(x) if i32::try_from(*x).is_ok() => "integer",
        Datum::Int(_) => "bigint",
        Datum::Float(_) => "double precision",
        Datum::Num(_) => "numeric",
        Datum::Bytea(_) => "bytea",
        Datum::Timestamp(_) => "timestamp without time zone",
        Datum::TimestampTz(_) => "timestamp with time zone",
        Datum::Interval(_) => "interval",
        Datum::Date(_) => "date",
    }
}

/// Runs `f` with `cx` as it is but for its parameters, which are `values`, and its prepared
/// statement, `prepared` (whose kept plan its SELECT may use).
fn with_params<'db>(
    cx: &mut Cx<'_, 'db>,
    values: &[Datum],
    prepared: &Arc<Prepared>,
    f: impl FnOnce(&mut Cx<'_, 'db>) -> Result<Outcome, SqlError>,
) -> Result<Outcome, SqlError> {
    let mut bound = Cx {
        db: cx.db,
        sh: cx.sh,
        tx: &mut *cx.tx,
        params: values,
        settings: cx.settings,
        notices: &mut *cx.notices,
        interrupts: cx.interrupts,
        set_config: std::mem::take(&mut cx.set_config),
        sequence_values: &mut *cx.sequence_values,
        subqueries: Default::default(),
        plan: Some(prepared.clone()),
    };
    let r = f(&mut bound);
    cx.set_config = bound.set_config;
    r
}

/// The columns of `pg_prepared_statements` (PostgreSQL 15's; `parameter_types`, a `regtype[]`
/// there, as its text).
pub fn view_columns() -> Vec<crate::catalog::ColumnDef> {
    use SqlType::{Bool, Int8, Text, Timestamp};
    [
        ("name", Text),
        ("statement", Text),
        ("prepare_time", Timestamp),
        ("parameter_types", Text),
        ("from_sql", Bool),
        ("generic_plans", Int8),
        ("custom_plans", Int8),
    ]
    .into_iter()
    .map(|(name, ty)| crate::catalog::ColumnDef { name: name.into(), ty, nullable: true })
    .collect()
}

/// `pg_prepared_statements`' rows: this thread's session's prepared statements, both kinds.
pub fn view_rows() -> Vec<Vec<Datum>> {
    STATEMENTS.with(|m| {
        m.borrow()
            .iter()
            .map(|(name, e)| {
                let p = e.stored.value().map(|s| &s.statement);
                let types: Vec<String> = p.map_or(&[][..], |p| &p.params).iter().map(|t| regtype(*t)).collect();
                let plans = |c: fn(&Prepared) -> &AtomicU64| p.map_or(0, |p| c(p).load(Ordering::Relaxed));
                vec![
                    Datum::Text(name.clone()),
                    Datum::Text(p.map_or_else(String::new, |p| p.sql.clone())),
                    Datum::Timestamp(e.prepared_at),
                    Datum::Text(format!("{{{}}}", types.join(","))),
                    Datum::Bool(e.from_sql),
                    Datum::Int(plans(|p| &p.generic_plans) as i64),
                    Datum::Int(plans(|p| &p.custom_plans) as i64),
                ]
            })
            .collect()
    })
}

/// A type as `regtype` prints it: the name without modifiers (`character varying`), quoted
/// in an array where it holds a space, as `array_out` quotes it.
fn regtype(t: SqlType) -> String {
    let shown = t.display();
    let name = shown.split('(').next().unwrap_or_default();
    if name.contains(' ') {
        format!("\"{name}\"")
    } else {
        name.to_string()
    }
}
