//! A session: one client connection's transaction state, settings and COPY in progress.
//!
//! A session runs on a thread of its own (see [`crate::wire`]) because the engine is
//! synchronous and a [`Transaction`] borrows the [`Database`]: the thread owns the session
//! for the connection's life, and the protocol tasks send it one statement at a time.
//!
//! # Transactions
//!
//! ```text
//!            BEGIN                         error
//!   idle  ----------->  in block  ------------------>  failed block
//!    ^  \                 |  COMMIT / ROLLBACK             | ROLLBACK (or COMMIT, which
//!    |   autocommit:      v                                v  reports ROLLBACK)
//!    |   begin, run, commit (rollback on error)          idle
//! ```
//!
//! Outside BEGIN every statement runs in a transaction of its own (autocommit). Inside, the
//! session keeps one engine [`Transaction`] until COMMIT or ROLLBACK; after an error only
//! those are accepted (25P02), and ROLLBACK TO a savepoint, which makes the block usable
//! again. Dropping the session (the client went away) drops the transaction, which rolls it
//! back.
//!
//! # A Query message of several statements: the implicit block
//!
//! As in PostgreSQL (`exec_simple_query`), the statements of one simple-protocol Query
//! message run outside BEGIN as one *implicit* transaction block: the wire layer brackets
//! them with [`Session::begin_message`] and [`Session::end_message`], which commits what
//! they did; an error rolls all of it back and the rest of the message is not run.
//!
//! ```text
//!   INSERT; INSERT; SELECT 1/0        nothing stays
//!   INSERT; BEGIN; INSERT             BEGIN upgrades the implicit block: the block holds
//!                                     both INSERTs and is still open after the message
//!   INSERT; COMMIT; INSERT; 1/0       COMMIT (with PostgreSQL's warning "there is no
//!                                     transaction in progress") commits the first INSERT;
//!                                     a new implicit block holds the second, rolled back
//!   INSERT; ROLLBACK; INSERT          the first INSERT is rolled back, the second commits
//! ```
//!
//! What refuses to run in a block (VACUUM, ALTER SYSTEM, DISCARD ALL) is refused in the
//! implicit block too (25001), and SAVEPOINT and its family need an explicit block (25P01).
//! One difference: the engine runs DDL (and ANALYZE, role and publication commands) in
//! transactions of its own, so such a statement cannot join the implicit block. Rather than
//! refuse it (which would break `psql -c "CREATE TABLE ...; INSERT ..."`), the statements
//! before it commit, it runs and commits, and the statements after it form a new implicit
//! block: an error later in the message rolls back only what came after the DDL. Inside an
//! explicit block DDL stays refused (25001).
//!
//! # Savepoints
//!
//! `SAVEPOINT name`, `RELEASE [SAVEPOINT] name` and `ROLLBACK TO [SAVEPOINT] name` map onto
//! the engine's subtransactions ([`Transaction::savepoint`], [`Transaction::release`],
//! [`Transaction::rollback_to`]) and are refused outside a block (25P01), as in PostgreSQL.
//! A name that is not open is 3B001. The engine transaction starts lazily (at the first
//! statement that reads or writes, where the snapshot is taken), so savepoints set before it
//! wait in `pending_savepoints` and are opened, in order, when it starts.
//!
//! # Prepared statements
//!
//! `PREPARE`, `EXECUTE`, `DEALLOCATE` and `DISCARD` are the session's (`session/prepared.rs`):
//! its SQL-level prepared statements outlive its transactions and end with it.
//!
//! # Interrupts
//!
//! Every statement starts [`Interrupts::start_statement`] with the session's
//! `statement_timeout`; executor loops check it and the cancel flag (see
//! [`crate::interrupt`]). A cancelled or timed-out statement is an error like any other: it
//! rolls back an autocommit transaction and fails a block. After each statement the session
//! publishes its transaction status and `idle_in_transaction_session_timeout` to its
//! [`Control`], where the protocol side reads them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use settledb::{Database, IsolationLevel, Transaction, Value};
use sqlparser::ast::{Expr, Set, Statement, TransactionIsolationLevel, TransactionMode};

use crate::error::SqlError;
use crate::expr::{ident_name, Env};
use crate::interrupt::{Control, Interrupts, TxStatus};
use crate::parse::{CopyCmd, Stmt};
use crate::types::Datum;
use crate::{copy, ddl, query, settings, utility, Shared};

pub(crate) mod prepared;
mod replication;
pub use prepared::{view_columns as prepared_statements_columns, view_rows as prepared_statements_rows};

/// A notice sent before a statement's result (`INFO`, `NOTICE`, `WARNING`).
#[derive(Clone, Debug)]
pub struct Notice {
    pub severity: &'static str,
    pub code: &'static str,
    pub message: String,
    /// The DETAIL field (psql prints it on its own `DETAIL:  ` line).
    pub detail: Option<String>,
}

/// A result column.
#[derive(Clone, Debug)]
pub struct Field {
    pub name: String,
    pub ty: crate::types::SqlType,
}

/// What a statement produced.
#[derive(Debug)]
pub enum Outcome {
    Rows {
        fields: Vec<Field>,
        rows: Vec<Vec<Datum>>,
        tag: String,
    },
    Command(String),
    /// BEGIN: the client's transaction status becomes "in a transaction".
    Begin(String),
    /// COMMIT / ROLLBACK: back to idle.
    End(String),
    /// COPY FROM STDIN started: the client sends the data next.
    CopyIn {
        columns: usize,
    },
    /// COPY TO STDOUT: one chunk per row.
    CopyOut {
        columns: usize,
        csv: bool,
        chunks: Vec<Vec<u8>>,
    },
}

/// A statement's notices and result.
#[derive(Debug)]
pub struct Reply {
    pub notices: Vec<Notice>,
    pub result: Result<Outcome, SqlError>,
}

/// What statement executors get: the database, the transaction and the session's inputs.
pub struct Cx<'a, 'db> {
    pub db: &'db Database,
    pub sh: &'a Shared,
    pub tx: &'a mut Transaction<'db>,
    pub params: &'a [Datum],
    pub settings: &'a BTreeMap<String, String>,
    pub notices: &'a mut Vec<Notice>,
    /// Checked by executor loops: cancel requests and `statement_timeout`.
    pub interrupts: &'a Interrupts,
    /// Settings `set_config(name, value, false)` changed, validated: the session takes them
    /// once the statement has succeeded.
    pub set_config: Vec<(String, String)>,
    /// The session's `nextval` results, for `currval`.
    pub sequence_values: &'a mut crate::sequence::SessionValues,
    /// The statement's uncorrelated subqueries' rows, by the address of their syntax tree:
    /// each runs once, however many rows the outer query evaluates it for.
    pub subqueries: HashMap<usize, std::rc::Rc<Vec<Vec<Datum>>>>,
    /// The prepared statement being executed, whose plan slot its SELECT may use
    /// ([`crate::query::PlanSlot`]); taken by the first executor that looks.
    pub plan: Option<std::sync::Arc<prepared::Prepared>>,
}

use crate::sequence::name_of as sequence_name;

/// How a refusal of DDL inside a transaction block names it.
const DDL: &str = "DDL (CREATE, DROP, ALTER)";

impl Cx<'_, '_> {
    /// Runs a SELECT whose syntax tree is a copy that will be freed (a side of a set
    /// operation, a correlated subquery bound to its outer row, a derived table): the rows
    /// its uncorrelated subqueries leave in [`Cx::subqueries`] are keyed by addresses inside
    /// that copy, which a later copy may reuse, so they go when it returns.
    pub fn select_copy(&mut self, q: &sqlparser::ast::Query) -> Result<(Vec<Field>, Vec<Vec<Datum>>), SqlError> {
        let before: std::collections::HashSet<usize> = self.subqueries.keys().copied().collect();
        let r = query::select(self, q);
        self.subqueries.retain(|k, _| before.contains(k));
        r
    }
}

impl Env for Cx<'_, '_> {
    fn param(&self, n: usize) -> Result<Datum, SqlError> {
        crate::expr::param_at(self.params, n)
    }

    fn subquery(
        &mut self,
        q: &sqlparser::ast::Query,
        outer: &crate::expr::Scope<'_>,
        row: &[Datum],
    ) -> Option<Result<std::rc::Rc<Vec<Vec<Datum>>>, SqlError>> {
        if let Some(bound) = crate::correlate::bind_outer(q, outer, row) {
            // Correlated: run for this outer row.
            return Some(self.select_copy(&bound).map(|(_, rows)| std::rc::Rc::new(rows)));
        }
        let key = q as *const sqlparser::ast::Query as usize;
        if let Some(rows) = self.subqueries.get(&key) {
            return Some(Ok(rows.clone()));
        }
        Some(query::select(self, q).map(|(_, rows)| {
            let rows = std::rc::Rc::new(rows);
            self.subqueries.insert(key, rows.clone());
            rows
        }))
    }

    fn session_function(&mut self, name: &str, args: &[Datum]) -> Option<Result<Datum, SqlError>> {
        let r = match name {
            "version" => Ok(Datum::Text(crate::version_string())),
            "pg_sleep" => match args.first() {
                Some(Datum::Null) | None => Ok(Datum::Null),
                Some(d) => match crate::expr::as_f64(d) {
                    Ok(secs) if secs.is_finite() => {
                        // Negative sleeps return at once; longer than a day is capped there.
                        let secs = secs.clamp(0.0, 86_400.0);
                        self.interrupts.sleep(Duration::from_secs_f64(secs)).map(|()| Datum::Null)
                    }
                    Ok(_) => Err(SqlError::new("22023", "pg_sleep takes a finite number of seconds")),
                    Err(e) => Err(e),
                },
            },
            "txid_current" => self.tx.assign_xid().map(|x| Datum::Int(x.0 as i64)).map_err(SqlError::from),
            // Valid until the transaction ends (session/replication.rs has the import side).
            "pg_export_snapshot" => self.tx.export_snapshot().map(Datum::Text).map_err(SqlError::from),
            "age" => match args.first() {
                Some(Datum::Int(x)) => {
                    let next = self.db.next_xid().xid().0;
                    Ok(Datum::Int(i64::from(next.wrapping_sub(*x as u32) as i32)))
                }
                Some(Datum::Null) => Ok(Datum::Null),
                _ => Err(SqlError::new("42883", "function age() takes an xid")),
            },
            // The WAL written so far, flushed on demand (pg_lsn shown as text).
            "pg_current_wal_lsn" | "pg_current_wal_insert_lsn" => {
                Ok(Datum::Text(self.db.current_wal_insert_lsn().to_string()))
            }
            "set_config" => (|| {
                let (Some(name), Some(value)) =
                    (args.first().and_then(Datum::to_text), args.get(1).and_then(Datum::to_text))
                else {
                    return Err(SqlError::new("22004", "set_config: the name and value must not be null"));
                };
                if matches!(args.get(2), Some(Datum::Bool(true))) {
                    return Err(SqlError::unsupported("set_config with is_local = true"));
                }
                let name = name.to_ascii_lowercase();
                let mut probe = self.settings.clone();
                for (k, v) in &self.set_config {
                    probe.insert(k.clone(), v.clone());
                }
                settings::set(self.db, &mut probe, &name, &value)?;
                let shown = settings::show(self.db, &probe, &name)?;
                self.set_config.push((name, value));
                Ok(Datum::Text(shown))
            })(),
            // In a select list: the row as a record's text, `(all_visible,all_frozen)`.
            "pg_visibility_map_summary" => crate::srf::vm_summary(self.db, args.first().unwrap_or(&Datum::Null))
                .map(|r| r.map_or(Datum::Null, |(v, f)| Datum::Text(format!("({v},{f})")))),
            "pg_get_replica_identity_index" => match args.first() {
                Some(relid) => Ok(crate::pgcatalog::get_replica_identity_index(self.db, relid)),
                None => Err(SqlError::new("42883", "function pg_get_replica_identity_index() does not exist")),
            },
            "nextval" => match args.first().and_then(Datum::to_text) {
                Some(n) => {
                    let n = sequence_name(&n);
                    self.sh.sequences.nextval(&n).map(|v| {
                        self.sequence_values.note(&n, v);
                        Datum::Int(v)
                    })
                }
                None => Ok(Datum::Null),
            },
            "currval" => match args.first().and_then(Datum::to_text) {
                Some(n) => self.sequence_values.currval(&sequence_name(&n)).map(Datum::Int),
                None => Ok(Datum::Null),
            },
            "setval" => match (args.first().and_then(Datum::to_text), args.get(1)) {
                (Some(n), Some(Datum::Int(v))) => {
                    let called = !matches!(args.get(2), Some(Datum::Bool(false)));
                    self.sh.sequences.setval(&sequence_name(&n), *v, called).map(Datum::Int)
                }
                (Some(_), Some(Datum::Null)) | (None, _) => Ok(Datum::Null),
                _ => {
                    Err(SqlError::new("42883", "function setval(regclass, bigint [, boolean]) needs an integer value"))
                }
            },
            "current_setting" => match args.first().and_then(Datum::to_text) {
                Some(n) => settings::show(self.db, self.settings, &n).map(Datum::Text),
                None => Ok(Datum::Null),
            },
            "pg_relation_size" => match args.first() {
                None | Some(Datum::Null) => Ok(Datum::Null),
                Some(rel) => relation_size(self.db, rel, args.get(1)),
            },
            "current_database" => Ok(Datum::Text("postgres".into())),
            "current_user" | "session_user" | "user" => Ok(Datum::Text(self.interrupts.control.role().to_string())),
            "pg_reload_conf" => self.sh.reload_config().map(|()| Datum::Bool(true)),
            "pg_current_logfile" => {
                let dir = &self.sh.config_sources.dir;
                Ok(if dir.join(crate::genfile::LOG_FILE).exists() {
                    Datum::Text(crate::genfile::LOG_FILE.into())
                } else {
                    Datum::Null
                })
            }
            "pg_read_binary_file" => {
                let int = |i: usize| match args.get(i) {
                    Some(Datum::Int(n)) => Ok(Some(*n)),
                    None | Some(Datum::Null) => Ok(None),
                    Some(d) => crate::expr::as_f64(d).map(|f| Some(f as i64)),
                };
                match args.first() {
                    None | Some(Datum::Null) => Ok(Datum::Null),
                    Some(p) => (|| {
                        let path = p.to_text().unwrap_or_default();
                        let (offset, length) = match args.len() {
                            1 => (0, None),
                            _ => (int(1)?.unwrap_or(0), int(2)?),
                        };
                        let missing_ok = matches!(args.get(3), Some(Datum::Bool(true)));
                        let dir = &self.sh.config_sources.dir;
                        crate::genfile::read_binary_file(dir, &path, offset, length, missing_ok)
                            .map(|b| b.map_or(Datum::Null, Datum::Bytea))
                    })(),
                }
            }
            // `xmin:xmax:xip,...` with 64-bit XIDs (the text form of txid_snapshot).
            "txid_current_snapshot" | "pg_current_snapshot" => {
                let (xmin, xmax, xip) = self.db.snapshot_now();
                let xip: Vec<String> = xip.iter().map(|x| x.0.to_string()).collect();
                Ok(Datum::Text(format!("{}:{}:{}", xmin.0, xmax.0, xip.join(","))))
            }
            "txid_snapshot_xmin" | "txid_snapshot_xmax" | "pg_snapshot_xmin" | "pg_snapshot_xmax" => {
                match args.first().and_then(Datum::to_text) {
                    None => Ok(Datum::Null),
                    Some(t) => {
                        let mut parts = t.splitn(3, ':');
                        let (lo, hi) = (parts.next(), parts.next());
                        let pick = if name.ends_with("xmin") { lo } else { hi };
                        match pick.and_then(|v| v.parse::<i64>().ok()) {
                            Some(v) if parts.next().is_some() => Ok(Datum::Int(v)),
                            _ => Err(SqlError::new(
                                "22P02",
                                format!("invalid input syntax for type txid_snapshot: \"{t}\""),
                            )),
                        }
                    }
                }
            }
            // Statistics are read live here: there is no per-transaction snapshot to drop.
            "pg_stat_clear_snapshot" => Ok(Datum::Null),
            // The slot would wait for this very transaction to finish (its consistent point).
            "pg_create_logical_replication_slot" if self.tx.xid().is_some() => Err(SqlError::new(
                "25001",
                "cannot create logical replication slot in transaction that has performed writes",
            )),
            "pg_get_constraintdef"
                if args.first().and_then(|a| crate::constraints::pg::constraintdef(self.sh, a)).is_some() =>
            {
                Ok(args.first().and_then(|a| crate::constraints::pg::constraintdef(self.sh, a)).unwrap_or(Datum::Null))
            }
            _ => match crate::pgcatalog::call(self.db, name, args) {
                Some(d) => Ok(d),
                None => {
                    let caller = crate::slotfuncs::Caller::new(self.sh, self.interrupts.control.pid());
                    return crate::slotfuncs::call(&caller, name, args);
                }
            },
        };
        Some(r)
    }
}

/// One connection's state. Lives on the session's thread.
pub struct Session<'db> {
    pub db: &'db Database,
    pub sh: &'db Shared,
    tx: Option<Transaction<'db>>,
    /// Inside BEGIN ... COMMIT.
    in_block: bool,
    /// The block had an error: only ROLLBACK (or COMMIT, which rolls back) is accepted.
    failed: bool,
    /// Isolation level asked for by BEGIN or SET TRANSACTION, for the block's transaction.
    block_isolation: Option<IsolationLevel>,
    /// BEGIN READ ONLY or SET TRANSACTION READ ONLY: the block may not write.
    block_read_only: bool,
    pub settings: BTreeMap<String, String>,
    /// What RESET puts back: the settings as the connection began, the startup packet's
    /// included.
    reset_to: BTreeMap<String, String>,
    pub copy: Option<copy::CopyIn<'db>>,
    copy_error: Option<SqlError>,
    /// Savepoints set in the block before its engine transaction started, outermost first.
    pending_savepoints: Vec<String>,
    /// The session's `statement_timeout` (`None`: off), read from `settings` when they change.
    statement_timeout: Option<Duration>,
    /// What `nextval` gave this session (`currval`).
    sequence_values: crate::sequence::SessionValues,
    /// The prepared statement [`Session::execute_bound`] runs, handed to the statement's
    /// [`Cx`] (and so taken once).
    prepared_now: Option<std::sync::Arc<prepared::Prepared>>,
    pub interrupts: Interrupts,
    /// The prepared statements, PREPARE's and named Parse's (see `session/prepared.rs`).
    prepared: prepared::Statements,
    /// Running a Query message of several statements (module documentation): outside a
    /// block they share the implicit block's transaction.
    multi_statement: bool,
    /// The implicit block has begun: a statement ran in it since the message began or since
    /// a COMMIT, ROLLBACK or DDL in it ended the previous one (`now()` stays the same in it).
    implicit_open: bool,
    /// The transaction whose snapshot a replication command exported, kept until the
    /// connection's next command (see `session/replication.rs`).
    exported: Option<Transaction<'db>>,
}

impl<'db> Session<'db> {
    pub fn new(sh: &'db Shared, control: Arc<Control>) -> Session<'db> {
        let mut s = Session {
            db: &sh.db,
            sh,
            tx: None,
            in_block: false,
            failed: false,
            block_isolation: None,
            block_read_only: false,
            settings: settings::initial(),
            reset_to: settings::initial(),
            copy: None,
            copy_error: None,
            pending_savepoints: Vec::new(),
            statement_timeout: None,
            sequence_values: Default::default(),
            prepared_now: None,
            interrupts: Interrupts::new(control),
            prepared: prepared::Statements::new(),
            multi_statement: false,
            implicit_open: false,
            exported: None,
        };
        s.settings_changed();
        s
    }

    /// After SET or RESET: the timeouts the session enforces, and the connection limit SHOW
    /// reports (a server-start setting, kept in the map so RESET ALL cannot lose it).
    fn settings_changed(&mut self) {
        self.settings.insert("max_connections".into(), self.sh.registry.max_connections().to_string());
        let reserved = self.sh.registry.superuser_reserved_connections().to_string();
        self.settings.insert("superuser_reserved_connections".into(), reserved);
        self.statement_timeout = settings::duration_of(&self.settings, "statement_timeout");
        let idle = settings::duration_of(&self.settings, "idle_in_transaction_session_timeout");
        self.interrupts.control.set_idle_in_transaction_timeout(idle);
        let idle = settings::duration_of(&self.settings, "idle_session_timeout");
        self.interrupts.control.set_idle_session_timeout(idle);
        crate::datetime::zone::set_session(&self.settings);
    }

    /// A setting the client's startup packet gave (see [`settings::startup`]).
    pub fn startup_setting(&mut self, name: &str, value: &str) -> Result<(), SqlError> {
        settings::set(self.db, &mut self.settings, name, value)?;
        settings::set(self.db, &mut self.reset_to, name, value)?;
        self.settings_changed();
        Ok(())
    }

    /// What ReadyForQuery reports now.
    pub fn status(&self) -> TxStatus {
        match (self.in_block, self.failed) {
            (false, _) => TxStatus::Idle,
            (true, false) => TxStatus::InBlock,
            (true, true) => TxStatus::Failed,
        }
    }

    /// Makes the session's transaction status visible to the protocol side (after every job).
    pub fn publish_status(&self) {
        self.interrupts.control.set_status(self.status());
    }

    pub fn in_block(&self) -> bool {
        self.in_block
    }

    /// Whether statements now run in a multi-statement message's implicit block.
    fn implicit(&self) -> bool {
        self.multi_statement && !self.in_block
    }

    /// A Query message of several statements begins: outside a block they run as one
    /// implicit transaction block, until [`Session::end_message`].
    pub fn begin_message(&mut self) {
        self.multi_statement = true;
        self.implicit_open = false;
    }

    /// The message's statements are done (or one failed): the implicit block's transaction,
    /// if one is open, commits. A COPY FROM STDIN the message started keeps it open: the
    /// COPY's end commits it, or its failure rolls it back, with the statements before it.
    pub fn end_message(&mut self) -> Result<(), SqlError> {
        let implicit = self.implicit();
        if implicit {
            self.end_implicit();
        }
        self.multi_statement = false;
        let r = match self.tx.take() {
            Some(tx) if implicit && self.copy.is_none() => tx.commit().map_err(SqlError::from),
            tx => {
                self.tx = tx;
                Ok(())
            }
        };
        self.publish_status();
        r
    }

    /// An error in the implicit block: everything it did is rolled back.
    fn abort_implicit(&mut self) {
        self.end_implicit();
        if let Some(tx) = self.tx.take() {
            let _ = tx.rollback();
        }
    }

    /// The implicit block ends (its transaction is committed or rolled back by the caller):
    /// what SET TRANSACTION chose in it goes with it.
    fn end_implicit(&mut self) {
        self.implicit_open = false;
        self.block_isolation = None;
        self.block_read_only = false;
    }

    /// Executes the prepared statement `p` with `params` (the extended protocol's Execute):
    /// as [`Session::execute`] of its statement, its SELECT planned with what `p` keeps.
    pub fn execute_bound(&mut self, p: &std::sync::Arc<prepared::Prepared>, params: &[Datum]) -> Reply {
        self.prepared_now = Some(p.clone());
        let reply = self.execute(&p.stmt, params);
        self.prepared_now = None;
        reply
    }

    /// Runs one statement with bound parameters.
    pub fn execute(&mut self, stmt: &Stmt, params: &[Datum]) -> Reply {
        if self.copy.is_some() {
            // A statement while a COPY was open: the client broke off the COPY (pgwire has
            // already answered the stray message with an error). Its rows go with it.
            self.copy_failed();
        }
        self.interrupts.start_statement(self.statement_timeout);
        crate::datetime::statement_started(self.in_block || self.implicit_open);
        if self.implicit() {
            self.implicit_open = true;
        }
        let mut notices = Vec::new();
        let result = self.dispatch(stmt, params, &mut notices);
        if result.is_err() {
            // As PostgreSQL, an error drops the session's temporary slots.
            self.slot_caller().drop_temporary_slots();
            if self.in_block {
                // Any error inside a block fails it, as PostgreSQL aborts the transaction.
                self.failed = true;
            } else if self.multi_statement {
                self.abort_implicit();
            }
        }
        self.publish_status();
        Reply { notices, result }
    }

    fn dispatch(&mut self, stmt: &Stmt, params: &[Datum], notices: &mut Vec<Notice>) -> Result<Outcome, SqlError> {
        if let Stmt::Sql(s) = stmt {
            match s.as_ref() {
                Statement::StartTransaction { modes, .. } => return self.begin(modes, notices),
                Statement::Commit { .. } => return Ok(self.commit(notices)),
                Statement::Rollback { savepoint: None, .. } => return Ok(self.rollback(notices)),
                Statement::Rollback { savepoint: Some(name), .. } => return self.rollback_to(&ident_name(name)),
                _ => {}
            }
        }
        if self.failed {
            return Err(SqlError::in_failed_transaction());
        }
        match stmt {
            Stmt::Empty => Ok(Outcome::Command(String::new())),
            Stmt::Vacuum(v) => {
                self.outside_block("VACUUM")?;
                utility::vacuum(self.db, &self.settings, v, self.interrupts.engine(), notices)
            }
            Stmt::Analyze(a) => {
                self.on_its_own("ANALYZE")?;
                utility::analyze(self.db, &a.tables, a.verbose, a.skip_locked, notices)?;
                Ok(Outcome::Command("ANALYZE".into()))
            }
            Stmt::Checkpoint => {
                self.db.checkpoint()?;
                Ok(Outcome::Command("CHECKPOINT".into()))
            }
            Stmt::AlterSystem { name, value } => {
                self.outside_block("ALTER SYSTEM")?;
                self.sh.config_sources.alter(name, value.as_deref())?;
                Ok(Outcome::Command("ALTER SYSTEM".into()))
            }
            Stmt::AlterTableReset { table, if_exists, options } => {
                self.on_its_own(DDL)?;
                ddl::reset_options(self.sh, table, *if_exists, options, notices)
            }
            Stmt::Copy(c) => self.copy_start(c, params),
            Stmt::Publication(c) => {
                self.on_its_own("a publication command")?;
                crate::ddl::publication(self.db, c, notices)
            }
            Stmt::Role(c) => {
                // Role changes are not transactional here (crate::roles).
                self.on_its_own("CREATE, ALTER or DROP ROLE")?;
                crate::roles::command::execute(&self.sh.roles, self.interrupts.control.role(), c, notices)
            }
            Stmt::PartitionProbe { table } => {
                let rows = if self.db.table(table).is_ok() {
                    vec![vec![Datum::Int(1), Datum::Null, Datum::Int(0)]]
                } else {
                    Vec::new()
                };
                let tag = format!("SELECT {}", rows.len());
                Ok(Outcome::Rows { fields: crate::dml::partition_probe_fields(), rows, tag })
            }
            Stmt::Prepare(c) => self.prepare_cmd(c, notices),
            Stmt::Discard(d) => self.discard(*d),
            Stmt::Sql(s) => self.sql(s, params, notices),
        }
    }

    /// 25006 for a write (`what`: its command) in a READ ONLY block.
    fn writable(&self, what: &str) -> Result<(), SqlError> {
        if (self.in_block || self.multi_statement) && self.block_read_only {
            return Err(SqlError::new("25006", format!("cannot execute {what} in a read-only transaction")));
        }
        Ok(())
    }

    /// 25001 for what cannot run in a transaction block, the implicit block of a
    /// multi-statement message included (PostgreSQL's `PreventInTransactionBlock`).
    fn outside_block(&self, what: &str) -> Result<(), SqlError> {
        if self.in_block || self.multi_statement {
            return Err(SqlError::new("25001", format!("{what} cannot run inside a transaction block")));
        }
        Ok(())
    }

    /// For what the engine runs in a transaction of its own (DDL, ANALYZE, role and
    /// publication commands): refused in an explicit block (25001); in a multi-statement
    /// message's implicit block, what the block did so far commits first and the statements
    /// after it start a new one (module documentation).
    fn on_its_own(&mut self, what: &str) -> Result<(), SqlError> {
        if self.in_block {
            return Err(SqlError::new("25001", format!("{what} cannot run inside a transaction block")));
        }
        if self.multi_statement {
            self.end_implicit();
            if let Some(tx) = self.tx.take() {
                tx.commit()?;
            }
        }
        Ok(())
    }

    fn sql(&mut self, s: &Statement, params: &[Datum], notices: &mut Vec<Notice>) -> Result<Outcome, SqlError> {
        match s {
            Statement::Set(set) => {
                let zone = self.settings.get("timezone").cloned();
                let r = self.set(set, notices);
                self.settings_changed();
                crate::datetime::zone::report(zone, &self.settings, notices);
                r
            }
            Statement::Savepoint { name } => self.savepoint(&ident_name(name)),
            Statement::ReleaseSavepoint { name } => self.release(&ident_name(name)),
            Statement::ShowVariable { variable } if variable.len() == 1 && ident_name(&variable[0]) == "all" => {
                let text = crate::types::SqlType::Text;
                let fields = vec![Field { name: "name".into(), ty: text }, Field { name: "setting".into(), ty: text }];
                let rows: Vec<Vec<Datum>> = settings::show_all(self.db, &self.settings)
                    .into_iter()
                    .map(|(n, v)| vec![Datum::Text(n), Datum::Text(v)])
                    .collect();
                let tag = format!("SHOW {}", rows.len());
                Ok(Outcome::Rows { fields, rows, tag })
            }
            Statement::ShowVariable { variable } => {
                let name = variable.iter().map(ident_name).collect::<Vec<_>>().join(" ");
                let v = settings::show(self.db, &self.settings, &name)?;
                let field = Field { name: settings::canonical(&name), ty: crate::types::SqlType::Text };
                Ok(Outcome::Rows { fields: vec![field], rows: vec![vec![Datum::Text(v)]], tag: "SHOW".into() })
            }
            Statement::Reset(r) => {
                let zone = self.settings.get("timezone").cloned();
                let r = settings::reset(&mut self.settings, &self.reset_to, &r.reset);
                self.settings_changed();
                crate::datetime::zone::report(zone, &self.settings, notices);
                r.map(|()| Outcome::Command("RESET".into()))
            }
            Statement::AlterTable(at) if crate::alter::changes_columns(at) => {
                self.on_its_own(DDL)?;
                let interrupt = self.interrupts.engine();
                crate::alter::execute(self, at, &interrupt, notices)
            }
            Statement::CreateTable(_)
            | Statement::CreateSequence { .. }
            | Statement::Drop { .. }
            | Statement::CreateIndex(_)
            | Statement::AlterTable(_) => {
                // The engine runs DDL in transactions of its own: refuse it inside a block
                // rather than pretend it would roll back with the block.
                self.on_its_own(DDL)?;
                ddl::execute(self.sh, s, &self.interrupts.engine(), notices)
            }
            Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) | Statement::Truncate(_) => {
                let command = s.to_string().split_whitespace().next().unwrap_or_default().to_ascii_uppercase();
                self.writable(&command)?;
                self.in_transaction(params, notices, |cx| query::execute(cx, s))
            }
            Statement::Query(q) => {
                // A WITH's INSERT, UPDATE or DELETE writes (crate::cte).
                if let Some(command) = crate::cte::writes(q) {
                    self.writable(command)?;
                }
                self.in_transaction(params, notices, |cx| query::execute(cx, s))
            }
            other => Err(SqlError::unsupported(format!("the statement \"{}\"", statement_head(other)))),
        }
    }

    /// Runs `f` in the block's transaction, or in a transaction of its own committed at once.
    pub fn in_transaction(
        &mut self,
        params: &[Datum],
        notices: &mut Vec<Notice>,
        f: impl FnOnce(&mut Cx<'_, 'db>) -> Result<Outcome, SqlError>,
    ) -> Result<Outcome, SqlError> {
        let mut tx = match self.tx.take() {
            Some(t) => t,
            None => self.start_transaction()?,
        };
        // SET lock_timeout applies from the next statement on, inside a block too. A lock
        // wait also ends when the statement's time is up: the engine's wait is capped at it.
        let lock_timeout = self.lock_timeout();
        let left = self.interrupts.remaining();
        let capped = left.is_some_and(|l| lock_timeout.is_none_or(|t| l < t));
        tx.set_lock_timeout(if capped { left } else { lock_timeout });
        // A cancel request or the statement's deadline also ends a lock wait.
        tx.set_interrupt(Some(self.interrupts.engine()));
        let (r, set_config) = {
            let mut cx = Cx {
                db: self.db,
                sh: self.sh,
                tx: &mut tx,
                params,
                settings: &self.settings,
                notices,
                interrupts: &self.interrupts,
                set_config: Vec::new(),
                sequence_values: &mut self.sequence_values,
                subqueries: HashMap::new(),
                plan: self.prepared_now.take(),
            };
            // One snapshot for the whole statement under READ COMMITTED, however many engine
            // calls it makes (settledb::Transaction::begin_statement).
            cx.tx.begin_statement();
            let r = f(&mut cx);
            cx.tx.end_statement();
            (r, cx.set_config)
        };
        if r.is_ok() && !set_config.is_empty() {
            for (name, value) in &set_config {
                settings::set(self.db, &mut self.settings, name, value)?;
            }
            self.settings_changed();
        }
        let r = match r {
            Err(e) if capped && e.code == "55P03" => Err(crate::interrupt::statement_timeout()),
            r => r,
        };
        if self.in_block {
            if r.is_err() {
                self.failed = true;
            }
            self.tx = Some(tx);
            r
        } else if self.multi_statement {
            // The implicit block keeps its transaction; an error rolls it back.
            match r {
                Ok(o) => {
                    self.tx = Some(tx);
                    Ok(o)
                }
                Err(e) => {
                    self.end_implicit();
                    let _ = tx.rollback();
                    Err(e)
                }
            }
        } else {
            match r {
                Ok(o) => {
                    tx.commit()?;
                    Ok(o)
                }
                Err(e) => {
                    let _ = tx.rollback();
                    Err(e)
                }
            }
        }
    }

    /// The session's `lock_timeout` (SET), else the engine's.
    fn lock_timeout(&self) -> Option<std::time::Duration> {
        match self.settings.get("lock_timeout") {
            Some(v) => {
                // Validated by SET already.
                let mut c = settledb::Config::default();
                let _ = c.set("lock_timeout", v);
                c.lock_timeout()
            }
            None => self.db.lock_timeout(),
        }
    }

    fn isolation(&self) -> IsolationLevel {
        if let Some(i) = self.block_isolation {
            return i;
        }
        // Asked at every statement outside a block: compared in place, no lowercased copy.
        let is = |s: &String, a: &str, b: &str| s.eq_ignore_ascii_case(a) || s.eq_ignore_ascii_case(b);
        match self.settings.get("default_transaction_isolation") {
            Some(s) if is(s, "repeatable read", "serializable") => IsolationLevel::RepeatableRead,
            Some(s) if is(s, "read committed", "read uncommitted") => IsolationLevel::ReadCommitted,
            _ => self.db.default_transaction_isolation(),
        }
    }

    fn begin(&mut self, modes: &[TransactionMode], notices: &mut Vec<Notice>) -> Result<Outcome, SqlError> {
        if self.in_block {
            notices.push(Notice {
                detail: None,
                severity: "WARNING",
                code: "25001",
                message: "there is already a transaction in progress".into(),
            });
            return Ok(Outcome::Begin("BEGIN".into()));
        }
        let (isolation, read_only) = isolation_of(modes)?;
        // BEGIN in a multi-statement message's implicit block turns it into a normal block,
        // its transaction included; a statement of it has taken the snapshot, so another
        // isolation level can no longer be had (PostgreSQL says so in SET TRANSACTION's words).
        if let (Some(tx), Some(level)) = (&self.tx, isolation) {
            if tx.isolation() != level {
                return Err(SqlError::new("25001", "SET TRANSACTION ISOLATION LEVEL must be called before any query"));
            }
        }
        // Outside any block these are unset; in the implicit block SET TRANSACTION may have
        // set them, and BEGIN keeps what it does not change.
        self.block_isolation = isolation.or(self.block_isolation);
        self.block_read_only = read_only.unwrap_or(self.block_read_only);
        self.in_block = true;
        self.failed = false;
        // The transaction itself starts lazily, at the first statement that needs it; its
        // snapshot is taken there, as PostgreSQL takes it at the first query.
        Ok(Outcome::Begin("BEGIN".into()))
    }

    fn end_block(&mut self) {
        self.in_block = false;
        self.implicit_open = false;
        self.failed = false;
        self.block_isolation = None;
        self.block_read_only = false;
        self.pending_savepoints.clear();
    }

    /// Begins the engine transaction of an autocommit statement or of the block, opening
    /// the savepoints the block set before it.
    fn start_transaction(&mut self) -> Result<Transaction<'db>, SqlError> {
        let mut tx = self.db.begin_with(self.isolation())?;
        if self.in_block {
            for name in &self.pending_savepoints {
                tx.savepoint(name)?;
            }
            self.pending_savepoints.clear();
        }
        Ok(tx)
    }

    /// 25P01 for a savepoint command outside a block.
    fn require_block(&self, what: &str) -> Result<(), SqlError> {
        if !self.in_block {
            return Err(SqlError::new("25P01", format!("{what} can only be used in transaction blocks")));
        }
        Ok(())
    }

    fn savepoint(&mut self, name: &str) -> Result<Outcome, SqlError> {
        self.require_block("SAVEPOINT")?;
        match self.tx.as_mut() {
            Some(tx) => tx.savepoint(name)?,
            None => self.pending_savepoints.push(name.to_string()),
        }
        Ok(Outcome::Command("SAVEPOINT".into()))
    }

    fn release(&mut self, name: &str) -> Result<Outcome, SqlError> {
        self.require_block("RELEASE SAVEPOINT")?;
        self.savepoint_exists(name)?;
        match self.tx.as_mut() {
            Some(tx) => tx.release(name)?,
            None => {
                let i = self.pending_savepoints.iter().rposition(|n| n == name).unwrap_or(0);
                self.pending_savepoints.truncate(i);
            }
        }
        Ok(Outcome::Command("RELEASE".into()))
    }

    /// ROLLBACK TO: allowed in a failed block, which it makes usable again.
    fn rollback_to(&mut self, name: &str) -> Result<Outcome, SqlError> {
        self.require_block("ROLLBACK TO SAVEPOINT")?;
        self.savepoint_exists(name)?;
        match self.tx.as_mut() {
            Some(tx) => tx.rollback_to(name)?,
            None => {
                // Nothing ran since: the savepoint stays, the ones after it go.
                let i = self.pending_savepoints.iter().rposition(|n| n == name).unwrap_or(0);
                self.pending_savepoints.truncate(i + 1);
            }
        }
        self.failed = false;
        Ok(Outcome::Command("ROLLBACK".into()))
    }

    /// 3B001 when no open savepoint has this name (which fails the block, as any error).
    fn savepoint_exists(&self, name: &str) -> Result<(), SqlError> {
        let open = match &self.tx {
            Some(tx) => tx.savepoints().contains(&name),
            None => self.pending_savepoints.iter().any(|n| n == name),
        };
        if open {
            return Ok(());
        }
        Err(SqlError::new("3B001", format!("savepoint \"{name}\" does not exist")))
    }

    fn commit(&mut self, notices: &mut Vec<Notice>) -> Outcome {
        if !self.in_block {
            notices.push(Notice {
                detail: None,
                severity: "WARNING",
                code: "25P01",
                message: "there is no transaction in progress".into(),
            });
            if !self.multi_statement {
                return Outcome::End("COMMIT".into());
            }
            // In the implicit block: what it did commits, warning and all, as in PostgreSQL.
            self.end_implicit();
        }
        let failed = self.failed;
        self.end_block();
        let tx = self.tx.take();
        if failed {
            drop(tx.map(Transaction::rollback));
            return Outcome::End("ROLLBACK".into());
        }
        match tx.map(Transaction::commit) {
            Some(Err(e)) => {
                // The client still learns the outcome; the block is over either way.
                notices.push(Notice {
                    detail: None,
                    severity: "WARNING",
                    code: "40001",
                    message: format!("commit failed: {e}"),
                });
                Outcome::End("ROLLBACK".into())
            }
            _ => Outcome::End("COMMIT".into()),
        }
    }

    fn rollback(&mut self, notices: &mut Vec<Notice>) -> Outcome {
        if !self.in_block {
            notices.push(Notice {
                detail: None,
                severity: "WARNING",
                code: "25P01",
                message: "there is no transaction in progress".into(),
            });
            if !self.multi_statement {
                return Outcome::End("ROLLBACK".into());
            }
            // In the implicit block: what it did is rolled back (falls through).
            self.end_implicit();
        }
        self.end_block();
        if let Some(tx) = self.tx.take() {
            let _ = tx.rollback();
        }
        Outcome::End("ROLLBACK".into())
    }

    fn set(&mut self, set: &Set, notices: &mut Vec<Notice>) -> Result<Outcome, SqlError> {
        match set {
            Set::SingleAssignment { variable, values, .. } => {
                let name = variable.to_string().to_ascii_lowercase();
                if let [Expr::Identifier(i)] = values.as_slice() {
                    if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default") {
                        // SET name TO DEFAULT is RESET name.
                        settings::reset_name(&mut self.settings, &self.reset_to, &name);
                        return Ok(Outcome::Command("SET".into()));
                    }
                }
                let value = values.iter().map(settings::value_text).collect::<Vec<_>>().join(", ");
                settings::set(self.db, &mut self.settings, &name, &value)?;
                Ok(Outcome::Command("SET".into()))
            }
            Set::SetTransaction { snapshot: Some(id), .. } => {
                let name = match &id.value {
                    sqlparser::ast::Value::SingleQuotedString(s) => s.clone(),
                    other => other.to_string(),
                };
                self.set_transaction_snapshot(&name, notices)
            }
            Set::SetTransaction { modes, .. } => {
                if !self.in_block && !self.multi_statement {
                    // Nothing to apply it to: PostgreSQL warns and goes on.
                    notices.push(Notice {
                        detail: None,
                        severity: "WARNING",
                        code: "25P01",
                        message: "SET TRANSACTION can only be used in transaction blocks".into(),
                    });
                    return Ok(Outcome::Command("SET".into()));
                }
                // PostgreSQL checks in this order: a snapshot taken, then a savepoint open.
                if self.tx.is_some() {
                    return Err(SqlError::new(
                        "25001",
                        "SET TRANSACTION ISOLATION LEVEL must be called before any query",
                    ));
                }
                if !self.pending_savepoints.is_empty() {
                    return Err(SqlError::new(
                        "25001",
                        "SET TRANSACTION ISOLATION LEVEL must not be called in a subtransaction",
                    ));
                }
                let (isolation, read_only) = isolation_of(modes)?;
                self.block_isolation = isolation.or(self.block_isolation);
                self.block_read_only = read_only.unwrap_or(self.block_read_only);
                Ok(Outcome::Command("SET".into()))
            }
            Set::SetTimeZone { value, .. } => {
                settings::set(self.db, &mut self.settings, "timezone", &settings::value_text(value))?;
                Ok(Outcome::Command("SET".into()))
            }
            other => Err(SqlError::unsupported(format!("\"{other}\""))),
        }
    }

    fn copy_start(&mut self, c: &CopyCmd, params: &[Datum]) -> Result<Outcome, SqlError> {
        if !c.from_stdin {
            let mut notices = Vec::new();
            return self.in_transaction(params, &mut notices, |cx| copy::copy_out(cx, c));
        }
        self.writable("COPY FROM")?;
        let state = copy::CopyIn::new(self.sh, c)?;
        self.copy_error = None;
        let columns = state.columns();
        if self.tx.is_none() {
            self.tx = Some(self.start_transaction()?);
        }
        self.copy = Some(state);
        Ok(Outcome::CopyIn { columns })
    }

    /// A chunk of COPY data. The first error ends the COPY (its rows are rolled back) and is
    /// kept for CopyDone; later chunks are read and dropped.
    pub fn copy_data(&mut self, data: &[u8]) {
        if self.copy_error.is_some() {
            return;
        }
        let r = match (self.copy.as_mut(), self.tx.as_mut()) {
            (Some(state), Some(tx)) => state.feed(tx, data, &self.interrupts),
            _ => Err(SqlError::new("08P01", "unexpected COPY data")),
        };
        if let Err(e) = r {
            self.copy_error = Some(e);
            self.copy_failed();
        }
    }

    /// CopyDone: the rows left are inserted; outside a block the COPY commits. Returns the
    /// row count.
    pub fn copy_done(&mut self) -> Result<u64, SqlError> {
        if let Some(e) = self.copy_error.take() {
            return Err(e);
        }
        let (Some(mut state), Some(tx)) = (self.copy.take(), self.tx.as_mut()) else {
            return Err(SqlError::new("08P01", "unexpected end of COPY data"));
        };
        match state.finish(tx, &self.interrupts) {
            Ok(n) => {
                if !self.in_block {
                    if let Some(tx) = self.tx.take() {
                        tx.commit()?;
                    }
                }
                Ok(n)
            }
            Err(e) => {
                self.copy_failed();
                Err(e)
            }
        }
    }

    /// A statement that failed before reaching the session (it did not parse, or is not
    /// supported): inside a transaction block that fails the block, as any error does, and
    /// the session's temporary slots are dropped.
    pub fn statement_failed(&mut self) {
        self.slot_caller().drop_temporary_slots();
        if self.in_block {
            self.failed = true;
        } else if self.multi_statement {
            self.abort_implicit();
        }
    }

    /// CopyFail or an error in the data: the COPY's rows go with its transaction.
    pub fn copy_failed(&mut self) {
        self.copy = None;
        if self.in_block {
            self.failed = true;
        } else if let Some(tx) = self.tx.take() {
            let _ = tx.rollback();
        }
    }
}

/// The isolation level and access mode (read only or not) `modes` ask for, if they do.
fn isolation_of(modes: &[TransactionMode]) -> Result<(Option<IsolationLevel>, Option<bool>), SqlError> {
    let (mut out, mut read_only) = (None, None);
    for m in modes {
        match m {
            TransactionMode::IsolationLevel(l) => {
                out = Some(match l {
                    TransactionIsolationLevel::ReadCommitted | TransactionIsolationLevel::ReadUncommitted => {
                        IsolationLevel::ReadCommitted
                    }
                    TransactionIsolationLevel::RepeatableRead => IsolationLevel::RepeatableRead,
                    _ => return Err(SqlError::unsupported(format!("isolation level {l}"))),
                })
            }
            TransactionMode::AccessMode(a) => read_only = Some(a.to_string().eq_ignore_ascii_case("read only")),
        }
    }
    Ok((out, read_only))
}

/// The first words of a statement, to name it in an error.
fn statement_head(s: &Statement) -> String {
    let text = s.to_string();
    text.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

/// Converts an engine row to datums by the SQL column types.
pub fn datums(values: &[Value], cols: &[crate::catalog::ColumnDef]) -> Vec<Datum> {
    values.iter().zip(cols).map(|(v, c)| Datum::from_stored(v, c.ty)).collect()
}

/// `pg_relation_size(relation [, fork])`: a table's or an index's size in bytes, the relation
/// named (`'t'`) or given by OID (`c.oid`, `i.indexrelid`). Only the main fork is measured.
fn relation_size(db: &Database, rel: &Datum, fork: Option<&Datum>) -> Result<Datum, SqlError> {
    match fork.and_then(Datum::to_text).as_deref() {
        None | Some("main") => {}
        Some(f @ ("fsm" | "vm" | "init")) => {
            return Err(SqlError::unsupported(format!("pg_relation_size of the {f} fork (only main is measured)")))
        }
        Some(f) => {
            return Err(SqlError::new("22023", "invalid fork name")
                .with_hint(format!("Valid fork names are \"main\", \"fsm\", \"vm\", and \"init\" (got \"{f}\").")))
        }
    }
    let pages = match rel {
        Datum::Int(oid) => {
            let table = u32::try_from(*oid).ok().and_then(|o| db.table_by_oid(settledb::Oid(o)));
            let mut found = match table {
                Some(t) => Some(db.table_pages(&t)?),
                None => None,
            };
            // An index: looked for among the tables' indexes (the catalog keys only tables by OID).
            for t in if found.is_some() { Vec::new() } else { db.tables() } {
                if let Some(ix) = db.indexes(&t).into_iter().find(|ix| i64::from(ix.oid().0) == *oid) {
                    found = Some(db.index_pages(&ix)?);
                    break;
                }
            }
            // PostgreSQL answers NULL for an OID that names no relation.
            match found {
                Some(p) => p,
                None => return Ok(Datum::Null),
            }
        }
        other => {
            let name = other.to_text().unwrap_or_default();
            match db.table(&name) {
                Ok(t) => db.table_pages(&t)?,
                Err(_) => db
                    .index(&name)
                    .and_then(|ix| db.index_pages(&ix))
                    .map_err(|_| SqlError::new("42P01", format!("relation \"{name}\" does not exist")))?,
            }
        }
    };
    Ok(Datum::Int(i64::from(pages) * 8192))
}
