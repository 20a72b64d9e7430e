//! The PostgreSQL protocol side: pgwire's handler traits, bridged to the session threads.
//!
//! ```text
//!  one thread per connection, running a single-threaded tokio runtime:
//!
//!  pgwire's task
//!  -------------
//!  Query / Parse / Bind / Execute ...  --call-->  Session::execute(stmt, params)
//!        <-- Reply (notices, rows, tag) --        (owns the engine Transaction)
//!  CopyData / CopyDone / CopyFail      --call-->  Session::copy_data / copy_done
//! ```
//!
//! pgwire runs on the connection's own thread ([`serve_connection`]), as a PostgreSQL backend
//! serves its connection in a process of its own, and the session lives on that thread's
//! stack. A handler reaches it through [`SessionHandle::call`], which runs the job right there,
//! inside pgwire's poll: no channel, no second task to wake, no extra turn of the runtime.
//! (The first design ran pgwire on a shared runtime and the session on a thread of its own;
//! those two hand-offs per statement were most of the server's CPU under `pgbench -S`. The
//! second put the session in a task of its own on the same thread, reached by a channel: a
//! boxed job, a oneshot reply and one more pass of the runtime per message.) The engine is
//! synchronous: while a statement runs, or waits for a lock, the connection's thread does
//! nothing else, which is all it has to do. When pgwire drops the connection (the client went
//! away, or a protocol error closed it) the session drops, which rolls back any transaction
//! in progress. A panic while running a job is caught and reported to that client as an
//! internal error (XX000); other sessions never share its state.
//!
//! Authentication ([`Startup`], in [`crate::auth`]): trust, or SCRAM-SHA-256 (pgwire's
//! implementation) against the login role's stored verifier. Either way the connection gets
//! BackendKeyData from [`crate::interrupt::KeyGenerator`] (a process ID unique to the server,
//! a random secret key), under which [`crate::conn`] registers its session for CancelRequests
//! ([`crate::interrupt::Cancel`]).
//!
//! ReadyForQuery reports the session's own transaction status ([`Control::status`]), not
//! pgwire's guess from the responses: ROLLBACK TO in a failed block makes it "in transaction"
//! again, which no response type of pgwire's says. The simple-query loop is therefore ours
//! ([`QueryHandler`]'s `on_query`, pgwire's loop with that one change), and so is Sync's.
//!
//! Extended protocol: Parse runs the SQL front end and Describe's type inference once and
//! stores the result as the prepared statement ([`Prepared`]); Bind's parameters are decoded
//! by the types the client gave or, when it gave none (pgbench, psql), by the types inferred
//! from where each `$n` appears (`aid = $1` takes `aid`'s type). Results are sent in the format
//! each column was asked for (text or binary). The unnamed statement and the portals are kept
//! in pgwire's store; a named statement in the session's table with PREPARE's
//! ([`crate::session::prepared`]), which our Parse, Bind, Describe and Close consult, so the
//! two kinds share one namespace as in PostgreSQL. Describe of an `EXECUTE name` reports that
//! statement's result columns.

use std::cell::Cell;
use std::fmt::Debug;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{BufMut, BytesMut};
use futures::sink::{Sink, SinkExt};
use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::copy::{send_copy_both_response, send_copy_in_response, send_copy_out_response, CopyHandler};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{
    send_describe_response, send_execution_response, send_query_response, send_ready_for_query, ExtendedQueryHandler,
    SimpleQueryHandler,
};
use pgwire::api::results::{
    CopyResponse, DescribePortalResponse, DescribeResponse, DescribeStatementResponse, FieldFormat, FieldInfo,
    QueryResponse, Response, Tag,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::{Entry as Stored, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState, PgWireServerHandlers, Type, DEFAULT_NAME};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::data::DataRow;
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Close, CloseComplete, Describe, Parse, ParseComplete, Sync as PgSync, TARGET_TYPE_BYTE_PORTAL,
    TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::{EmptyQueryResponse, NoticeResponse, ReadyForQuery, TransactionStatus};
use pgwire::messages::simplequery::Query;
use pgwire::messages::PgWireBackendMessage;

use crate::auth::Startup;
use crate::error::SqlError;
use crate::interrupt::{Cancel, Control, TxStatus};
use crate::parse::{parse_one, split_statements, Stmt};
use crate::session::prepared::{self, Prepared, StoredPrepared};
use crate::session::{Field, Notice, Outcome, Reply, Session};
use crate::types::{parse_text, Datum, SqlType};
use crate::Shared;

/// A connection's session, reached from pgwire's handlers on the connection's thread.
pub struct SessionHandle {
    /// What the session publishes between statements (its transaction status); also the
    /// connection's identity in [`CURRENT`].
    control: Arc<Control>,
}

thread_local! {
    /// The session this thread serves while [`serve_connection`] runs it, with its
    /// connection's [`Control`] (so a handle of another connection never finds it); null
    /// outside, and while a job holds it.
    static CURRENT: Cell<(*const Control, *mut ())> = const { Cell::new((std::ptr::null(), std::ptr::null_mut())) };
}

/// Publishes a session in [`CURRENT`] for as long as it lives, holding the session's
/// exclusive borrow so nothing else touches it meanwhile.
struct Current<'s, 'db> {
    _session: std::marker::PhantomData<&'s mut Session<'db>>,
}

impl<'s, 'db> Current<'s, 'db> {
    fn enter(session: &'s mut Session<'db>, control: &Arc<Control>) -> Current<'s, 'db> {
        let ptr = (session as *mut Session<'db>).cast::<()>();
        CURRENT.with(|c| c.set((Arc::as_ptr(control), ptr)));
        Current { _session: std::marker::PhantomData }
    }
}

impl Drop for Current<'_, '_> {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set((std::ptr::null(), std::ptr::null_mut())));
    }
}

/// Puts the session back in [`CURRENT`] when a job ends, panicking or not.
struct Restore((*const Control, *mut ()));

impl Drop for Restore {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

impl SessionHandle {
    /// The status ReadyForQuery reports.
    pub(crate) fn tx_status(&self) -> TransactionStatus {
        match self.control.status() {
            TxStatus::Idle => TransactionStatus::Idle,
            TxStatus::InBlock => TransactionStatus::Transaction,
            TxStatus::Failed => TransactionStatus::Error,
        }
    }
}

static SESSION_IDS: AtomicU64 = AtomicU64::new(1);

/// A name for a connection's thread.
pub fn next_session_thread_name() -> String {
    format!("settle-session-{}", SESSION_IDS.fetch_add(1, Ordering::Relaxed))
}

/// Serves one connection on the calling thread until the client goes or `stop` turns true:
/// pgwire on `sock` and the session's jobs, both on one single-threaded runtime. Returns
/// pgwire's error, if any.
pub fn serve_connection(
    sh: Arc<Shared>,
    template: &Handler,
    sock: std::net::TcpStream,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let control: Arc<Control> = Arc::default();
    let handler = template.for_connection(SessionHandle { control: control.clone() });
    let session_handle = handler.session.clone();
    let mut session = Session::new(&sh, control.clone());
    let current = Current::enter(&mut session, &control);
    let served = rt.block_on(async {
        let sock = tokio::net::TcpStream::from_std(sock)?;
        tokio::select! {
            r = crate::conn::serve_socket(sock, handler, session_handle, &sh, control) => r,
            _ = stop.wait_for(|stopped| *stopped) => Ok(()),
        }
    });
    drop(rt);
    drop(current);
    // A transaction still open rolls back here.
    drop(session);
    served
}

impl SessionHandle {
    /// Runs `f` on the session, here on the connection's thread (see [`CURRENT`]).
    pub(crate) async fn call<R: Send + 'static>(
        &self,
        f: impl for<'a> FnOnce(&mut Session<'a>) -> R + Send + 'static,
    ) -> Result<R, SqlError> {
        let ended = || SqlError::new("57P01", "the session has ended");
        // Taken out while the job runs: a second call from inside it finds nothing.
        let (owner, ptr) = CURRENT.with(|c| c.replace((std::ptr::null(), std::ptr::null_mut())));
        if ptr.is_null() {
            return Err(ended());
        }
        let _restore = Restore((owner, ptr));
        if owner != Arc::as_ptr(&self.control) {
            return Err(ended());
        }
        // SAFETY: `ptr` came from the `&mut Session` that `Current::enter` holds borrowed for
        // as long as it is published, on this thread (a thread-local); it was taken out of
        // `CURRENT` above, so this is the only reference until `_restore` puts it back. The
        // job is generic over the session's lifetime, so it cannot keep anything borrowed
        // from the session past this call.
        let s = unsafe { &mut *ptr.cast::<Session<'_>>() };
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| f(s)));
        // A parse error or a COPY failure can fail the block outside `execute` too.
        s.publish_status();
        match r {
            Ok(r) => Ok(r),
            Err(p) => {
                let what = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(SqlError::new("XX000", format!("internal error in settledb-server: {what}")))
            }
        }
    }
}

/// Rows typed as Describe announced them to the client. The executor types a bare `$n` of the
/// select list without the statement's parameter types, as text; its value is the bound
/// parameter's, so it is sent as the type the client was told (and asked for in binary).
fn as_described(o: Outcome, described: Option<&[Field]>) -> Outcome {
    match (o, described) {
        (Outcome::Rows { mut fields, rows, tag }, Some(d)) if d.len() == fields.len() => {
            for (i, (f, d)) in fields.iter_mut().zip(d).enumerate() {
                // Only where no value is text: a text value keeps its text type.
                if f.ty == SqlType::Text
                    && d.ty != SqlType::Text
                    && rows.iter().all(|r| !matches!(r.get(i), Some(Datum::Text(_))))
                {
                    f.ty = d.ty;
                }
            }
            Outcome::Rows { fields, rows, tag }
        }
        (o, _) => o,
    }
}

/// The handlers pgwire calls: a template per server, and from it one set per connection,
/// which reaches that connection's session.
pub struct Handler {
    sh: Arc<Shared>,
    parser: Arc<SqlParser>,
    startup: Arc<Startup>,
    session: Option<Arc<SessionHandle>>,
}

impl Handler {
    pub fn new(sh: Arc<Shared>) -> Handler {
        let startup = Arc::new(Startup::new(sh.clone()));
        Handler { parser: Arc::new(SqlParser { sh: sh.clone(), session: None }), sh, startup, session: None }
    }

    /// The handlers of one connection, whose statements go to `session`.
    fn for_connection(&self, session: SessionHandle) -> Handler {
        let session = Arc::new(session);
        let parser = Arc::new(SqlParser { sh: self.sh.clone(), session: Some(session.clone()) });
        Handler { session: Some(session), parser, ..self.clone_parts_inner() }
    }

    fn session<C: ClientInfo>(&self, _client: &C) -> Result<Arc<SessionHandle>, SqlError> {
        self.session.clone().ok_or_else(|| SqlError::new("XX000", "no session for this connection"))
    }
}

impl PgWireServerHandlers for Handler {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::new(QueryHandler { h: self.clone_parts() })
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::new(QueryHandler { h: self.clone_parts() })
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.startup.clone()
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        Arc::new(QueryHandler { h: self.clone_parts() })
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        Arc::new(Cancel::new(self.sh.registry.clone()))
    }
}

impl Handler {
    fn clone_parts_inner(&self) -> Handler {
        Handler {
            sh: self.sh.clone(),
            parser: self.parser.clone(),
            startup: self.startup.clone(),
            session: self.session.clone(),
        }
    }

    fn clone_parts(&self) -> Arc<Handler> {
        Arc::new(self.clone_parts_inner())
    }
}

/// Simple and extended query, and COPY, for one server.
pub struct QueryHandler {
    h: Arc<Handler>,
}

async fn send_notices<C>(client: &mut C, notices: &[Notice]) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for n in notices {
        if let Some((name, value)) = crate::datetime::zone::parameter_status(n) {
            let m = pgwire::messages::startup::ParameterStatus::new(name.into(), value.into());
            client.feed(PgWireBackendMessage::ParameterStatus(m)).await?;
            continue;
        }
        let mut info = ErrorInfo::new(n.severity.into(), n.code.into(), n.message.clone());
        info.detail = n.detail.clone();
        client.feed(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(info))).await?;
    }
    Ok(())
}

fn field_infos(fields: &[Field], format: &Format) -> Vec<FieldInfo> {
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| FieldInfo::new(f.name.clone(), None, None, f.ty.pg_type(), format_for(format, i)))
        .collect()
}

/// A column's format, tolerating a format list shorter than the columns (text then).
fn format_for(format: &Format, i: usize) -> FieldFormat {
    match format {
        Format::Individual(v) => v.get(i).map_or(FieldFormat::Text, |c| FieldFormat::from(*c)),
        f => f.format_for(i),
    }
}

/// Encodes rows as DataRow messages in each column's format.
fn data_rows(fields: &[Field], rows: Vec<Vec<Datum>>, format: &Format) -> Result<Vec<PgWireResult<DataRow>>, SqlError> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let mut buf = BytesMut::with_capacity(16 * r.len());
        for (i, d) in r.iter().enumerate() {
            let ty = fields.get(i).map_or(SqlType::Text, |f| f.ty);
            let bytes = match format_for(format, i) {
                FieldFormat::Binary => d.to_binary(ty)?,
                FieldFormat::Text => d.to_text().map(String::into_bytes),
            };
            match bytes {
                None => buf.put_i32(-1),
                Some(b) => {
                    buf.put_i32(b.len() as i32);
                    buf.put_slice(&b);
                }
            }
        }
        out.push(Ok(DataRow::new(buf, r.len() as i16)));
    }
    Ok(out)
}

/// Turns a session's reply into a pgwire response (notices go out first).
fn response(outcome: Outcome, format: &Format) -> Result<Response, SqlError> {
    Ok(match outcome {
        Outcome::Rows { fields, rows, tag } => {
            let infos = Arc::new(field_infos(&fields, format));
            let data = data_rows(&fields, rows, format)?;
            let mut q = QueryResponse::new(infos, futures::stream::iter(data));
            // pgwire appends the row count to the tag's command word.
            let word: String = tag.rsplit_once(' ').map_or(tag.clone(), |(w, _)| w.to_string());
            q.set_command_tag(&word);
            Response::Query(q)
        }
        Outcome::Command(tag) if tag.is_empty() => Response::EmptyQuery,
        Outcome::Command(tag) => Response::Execution(Tag::new(&tag)),
        Outcome::Begin(tag) => Response::TransactionStart(Tag::new(&tag)),
        Outcome::End(tag) => Response::TransactionEnd(Tag::new(&tag)),
        Outcome::CopyIn { columns } => Response::CopyIn(CopyResponse::new(0, columns, futures::stream::empty())),
        Outcome::CopyOut { columns, csv, chunks } => {
            let _ = csv;
            let data: Vec<PgWireResult<CopyData>> =
                chunks.into_iter().map(|c| Ok(CopyData::new(bytes::Bytes::from(c)))).collect();
            Response::CopyOut(CopyResponse::new(0, columns, futures::stream::iter(data)))
        }
    })
}

fn error_response(e: &SqlError) -> Response {
    Response::Error(Box::new(e.to_error_info()))
}

#[async_trait]
impl SimpleQueryHandler for QueryHandler {
    /// pgwire's simple-query loop, except that ReadyForQuery carries the session's status.
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        if query.query.chars().all(|c| c == ';' || c.is_whitespace()) {
            client.feed(PgWireBackendMessage::EmptyQueryResponse(EmptyQueryResponse::new())).await?;
        } else {
            for r in SimpleQueryHandler::do_query(self, client, &query.query).await? {
                match r {
                    Response::EmptyQuery => {
                        client.feed(PgWireBackendMessage::EmptyQueryResponse(EmptyQueryResponse::new())).await?;
                    }
                    Response::Query(results) => send_query_response(client, results, true).await?,
                    Response::Execution(tag) | Response::TransactionStart(tag) | Response::TransactionEnd(tag) => {
                        send_execution_response(client, tag).await?
                    }
                    Response::Error(e) => client.feed(PgWireBackendMessage::ErrorResponse((*e).into())).await?,
                    Response::CopyIn(r) => {
                        send_copy_in_response(client, r).await?;
                        client.set_state(PgWireConnectionState::CopyInProgress(false));
                    }
                    Response::CopyOut(r) => send_copy_out_response(client, r).await?,
                    Response::CopyBoth(r) => {
                        send_copy_both_response(client, r).await?;
                        client.set_state(PgWireConnectionState::CopyInProgress(false));
                    }
                }
            }
        }
        let status = self.h.session(client).map_or(TransactionStatus::Idle, |s| s.tx_status());
        client.set_transaction_status(status);
        // During COPY FROM STDIN, ReadyForQuery waits for CopyDone or CopyFail.
        if !matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            client.set_state(PgWireConnectionState::ReadyForQuery);
            send_ready_for_query(client, status).await?;
        }
        Ok(())
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = match self.h.session(client) {
            Ok(s) => s,
            Err(e) => return Ok(vec![error_response(&e)]),
        };
        let mut out = Vec::new();
        if let Err(e) = check_utf8(query) {
            self.h.sh.log.statement_error(&e, query);
            let _ = session.call(|s| s.statement_failed()).await;
            return Ok(vec![error_response(&e)]);
        }
        // The whole message is parsed before any of it runs, as PostgreSQL does: a statement
        // that does not parse leaves the ones before it unrun.
        let mut stmts = Vec::new();
        for piece in split_statements(query) {
            match parse_one(piece) {
                Ok(s) => stmts.push((piece, s)),
                Err(e) => {
                    self.h.sh.log.statement_error(&e, piece);
                    let _ = session.call(|s| s.statement_failed()).await;
                    return Ok(vec![error_response(&e)]);
                }
            }
        }
        // Several statements: outside BEGIN, one implicit transaction block (crate::session).
        let multi = stmts.len() > 1;
        if multi {
            let _ = session.call(|s| s.begin_message()).await;
        }
        for (piece, stmt) in stmts {
            let reply = run(&session, stmt, Vec::new()).await;
            send_notices(client, &reply.notices).await?;
            let mut stop = reply.result.is_err();
            let copy_in = matches!(reply.result, Ok(Outcome::CopyIn { .. }));
            match reply.result.and_then(|o| response(o, &Format::UnifiedText)) {
                Ok(r) => out.push(r),
                Err(e) => {
                    self.h.sh.log.statement_error(&e, piece);
                    out.push(error_response(&e));
                    if !stop {
                        // The statement ran but its result could not be sent: it fails.
                        let _ = session.call(|s| s.statement_failed()).await;
                        stop = true;
                    }
                }
            }
            if stop || copy_in {
                break;
            }
        }
        if multi {
            let ended = session.call(|s| s.end_message()).await;
            if let Err(e) = ended.and_then(|r| r) {
                self.h.sh.log.statement_error(&e, query);
                out.push(error_response(&e));
            }
        }
        Ok(out)
    }
}

/// Refuses query text that was not valid UTF-8. pgwire decodes message strings lossily,
/// replacing bad bytes with U+FFFD, so that character stands for them (a query holding a
/// genuine U+FFFD is refused too, a deliberate over-approximation).
fn check_utf8(sql: &str) -> Result<(), SqlError> {
    if sql.contains('\u{fffd}') {
        return Err(SqlError::bad_utf8().with_hint(
            "the query held bytes that are not UTF-8 (or the character U+FFFD, which this server refuses)",
        ));
    }
    Ok(())
}

/// Runs a statement on the session thread.
async fn run(session: &SessionHandle, stmt: Stmt, params: Vec<Datum>) -> Reply {
    match session.call(move |s| s.execute(&stmt, &params)).await {
        Ok(r) => r,
        Err(e) => Reply { notices: Vec::new(), result: Err(e) },
    }
}

/// Parses and describes statements for the extended protocol.
pub struct SqlParser {
    sh: Arc<Shared>,
    /// The connection's session (a Parse that fails inside a transaction block fails it).
    session: Option<Arc<SessionHandle>>,
}

#[async_trait]
impl QueryParser for SqlParser {
    type Statement = Arc<Prepared>;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Self::Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let parsed = check_utf8(sql).and_then(|()| match split_statements(sql).as_slice() {
            [] => Ok(None),
            [one] => parse_one(one).map(Some).inspect_err(|e| self.sh.log.statement_error(e, sql)),
            _ => Err(SqlError::syntax("cannot insert multiple commands into a prepared statement")),
        });
        let stmt = match parsed {
            Ok(Some(stmt)) => stmt,
            Ok(None) => return Ok(None),
            Err(e) => {
                if let Some(s) = &self.session {
                    let _ = s.call(|s| s.statement_failed()).await;
                }
                return Err(e.into_pgwire());
            }
        };
        let client_types: Vec<Option<SqlType>> =
            types.iter().map(|t| t.as_ref().and_then(|t| SqlType::from_oid(t.oid()))).collect();
        let (params, mut fields) = crate::query::describe(&self.sh, &stmt, &client_types);
        // `EXECUTE name` returns what the session's prepared statement returns.
        if let (Stmt::Prepare(cmd), Some(session)) = (&stmt, &self.session) {
            if let crate::parse::PrepareCmd::Execute { name, .. } = cmd.as_ref() {
                let name = name.clone();
                fields = session.call(move |s| s.prepared_fields(&name)).await.ok().flatten();
            }
        }
        Ok(Some(Arc::new(Prepared::new(sql.to_string(), stmt, params, fields))))
    }

    fn get_parameter_types(&self, stmt: &Self::Statement) -> PgWireResult<Vec<Type>> {
        Ok(stmt.params.iter().map(|t| t.pg_type()).collect())
    }

    fn get_result_schema(
        &self,
        stmt: &Self::Statement,
        column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        let fmt = column_format.cloned().unwrap_or(Format::UnifiedText);
        Ok(stmt.fields.as_deref().map(|f| field_infos(f, &fmt)).unwrap_or_default())
    }
}

/// Decodes a portal's parameters by the client's types or the inferred ones.
fn bind_params(portal: &Portal<Arc<Prepared>>) -> Result<Vec<Datum>, SqlError> {
    let prepared = &portal.statement.statement;
    let mut out = Vec::with_capacity(portal.parameters.len());
    for (i, p) in portal.parameters.iter().enumerate() {
        let client_ty =
            portal.statement.parameter_types.get(i).cloned().flatten().and_then(|t| SqlType::from_oid(t.oid()));
        let ty = client_ty.or_else(|| prepared.params.get(i).copied()).unwrap_or(SqlType::Text);
        let d = match p {
            None => Datum::Null,
            Some(b) if format_for(&portal.parameter_format, i) == FieldFormat::Binary => Datum::from_binary(b, ty)?,
            Some(b) => {
                let s = std::str::from_utf8(b).map_err(|_| SqlError::bad_utf8())?;
                match ty {
                    SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_) => Datum::Text(s.to_string()),
                    t => parse_text(s, t)?,
                }
            }
        };
        out.push(d);
    }
    Ok(out)
}

/// The statement a Bind or Describe names, with the name to report: the unnamed one from
/// pgwire's store, a named one from the session's table ([`prepared`]).
fn statement<'n, C>(client: &C, name: Option<&'n str>) -> (&'n str, Option<StoredPrepared>)
where
    C: ClientPortalStore,
    C::PortalStore: PortalStore<Statement = Arc<Prepared>>,
{
    match name.filter(|n| !n.is_empty()) {
        Some(name) => (name, prepared::lookup(name)),
        None => ("", client.portal_store().get_statement(DEFAULT_NAME)),
    }
}

fn statement_not_found(name: &str) -> SqlError {
    SqlError::new("26000", format!("prepared statement \"{name}\" does not exist"))
}

#[async_trait]
impl ExtendedQueryHandler for QueryHandler {
    type Statement = Arc<Prepared>;
    type QueryParser = SqlParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.h.parser.clone()
    }

    /// Parse: the unnamed statement is pgwire's, replaced by each unnamed Parse; a named one
    /// goes to the session's table, where a name in use is 42P05 (either kind).
    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let parsed = StoredStatement::parse(client, &message, self.query_parser()).await?;
        match message.name.as_deref().filter(|n| !n.is_empty()) {
            None => match parsed {
                Some(stmt) => client.portal_store().put_statement(Arc::new(stmt)),
                None => client.portal_store().put_empty_statement(DEFAULT_NAME),
            },
            Some(name) => {
                let stored = parsed.map_or(Stored::Empty, |s| Stored::Value(Arc::new(s)));
                if let Err(e) = prepared::parsed(name, stored) {
                    // Like any error, it fails a transaction block.
                    if let Ok(s) = self.h.session(client) {
                        let _ = s.call(|s| s.statement_failed()).await;
                    }
                    self.h.sh.log.statement_error(&e, &message.query);
                    return Err(e.into_pgwire());
                }
            }
        }
        client.send(PgWireBackendMessage::ParseComplete(ParseComplete::new())).await?;
        Ok(())
    }

    /// Bind: a portal of the unnamed statement or of a named one of either kind (hot path:
    /// one lookup in the session's table, no copy of the statement).
    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let (name, found) = statement(client, message.statement_name.as_deref());
        match found {
            Some(Stored::Value(statement)) => {
                let portal = Portal::try_new(&message, statement)?;
                client.portal_store().put_portal(Arc::new(portal));
            }
            Some(Stored::Empty) => {
                if !message.parameters.is_empty() {
                    let e = SqlError::new(
                        "08P01",
                        format!(
                            "bind message supplies {} parameters, but prepared statement \"{name}\" requires 0",
                            message.parameters.len()
                        ),
                    );
                    return Err(e.into_pgwire());
                }
                client.portal_store().put_empty_portal(message.portal_name.as_deref().unwrap_or(DEFAULT_NAME));
            }
            None => return Err(statement_not_found(name).into_pgwire()),
        }
        client.send(PgWireBackendMessage::BindComplete(BindComplete::new())).await?;
        Ok(())
    }

    /// Describe of a statement finds it where Bind does; of a portal, in pgwire's store.
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if message.target_type != TARGET_TYPE_BYTE_STATEMENT {
            return self._on_describe(client, message).await;
        }
        let (name, found) = statement(client, message.name.as_deref());
        match found {
            Some(Stored::Value(stmt)) => {
                let r = self.do_describe_statement(client, &stmt).await?;
                send_describe_response(client, &r).await?;
            }
            Some(Stored::Empty) => send_describe_response(client, &DescribeStatementResponse::no_data()).await?,
            None => return Err(statement_not_found(name).into_pgwire()),
        }
        Ok(())
    }

    /// Close of a statement removes it from whichever table holds it (and so from
    /// `pg_prepared_statements`); closing one that does not exist is no error.
    async fn on_close<C>(&self, client: &mut C, message: Close) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let named = message.name.as_deref().filter(|n| !n.is_empty());
        match (message.target_type, named) {
            (TARGET_TYPE_BYTE_STATEMENT, Some(name)) => prepared::close(name),
            (TARGET_TYPE_BYTE_STATEMENT, None) => client.portal_store().rm_statement(DEFAULT_NAME),
            (TARGET_TYPE_BYTE_PORTAL, name) => client.portal_store().rm_portal(name.unwrap_or(DEFAULT_NAME)),
            _ => {}
        }
        client.send(PgWireBackendMessage::CloseComplete(CloseComplete::new())).await?;
        Ok(())
    }

    /// Sync: ReadyForQuery with the session's status.
    async fn on_sync<C>(&self, client: &mut C, _message: PgSync) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        client.portal_store().rm_portal(pgwire::api::DEFAULT_NAME);
        let status = self.h.session(client).map_or(client.transaction_status(), |s| s.tx_status());
        client.set_transaction_status(status);
        client.send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(status))).await?;
        Ok(())
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Self::Statement>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.h.session(client).map_err(SqlError::into_pgwire)?;
        let prepared = portal.statement.statement.clone();
        let params = bind_params(portal).map_err(SqlError::into_pgwire)?;
        prepared.count_plan();
        // The prepared statement is shared with the session thread, not copied (hot path).
        let shared = prepared.clone();
        let reply = match session.call(move |s| s.execute_bound(&shared, &params)).await {
            Ok(r) => r,
            Err(e) => Reply { notices: Vec::new(), result: Err(e) },
        };
        send_notices(client, &reply.notices).await?;
        let described = prepared.fields.as_deref();
        match reply.result.and_then(|o| response(as_described(o, described), &portal.result_column_format)) {
            Ok(r) => Ok(r),
            Err(e) => {
                self.h.sh.log.statement_error(&e, &prepared.sql);
                Err(e.into_pgwire())
            }
        }
    }

    async fn do_describe_statement<C>(
        &self,
        _client: &mut C,
        target: &StoredStatement<Self::Statement>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let p = &target.statement;
        let types = (0..p.params.len().max(target.parameter_types.len()))
            .map(|i| {
                target
                    .parameter_types
                    .get(i)
                    .cloned()
                    .flatten()
                    .filter(|t| *t != Type::UNKNOWN)
                    .or_else(|| p.params.get(i).map(|t| t.pg_type()))
                    .unwrap_or(Type::TEXT)
            })
            .collect();
        let fields = p.fields.as_deref().map(|f| field_infos(f, &Format::UnifiedText)).unwrap_or_default();
        Ok(DescribeStatementResponse::new(types, fields))
    }

    async fn do_describe_portal<C>(
        &self,
        _client: &mut C,
        portal: &Portal<Self::Statement>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let p = &portal.statement.statement;
        let fields = p.fields.as_deref().map(|f| field_infos(f, &portal.result_column_format)).unwrap_or_default();
        Ok(DescribePortalResponse::new(fields))
    }
}

#[async_trait]
impl CopyHandler for QueryHandler {
    async fn on_copy_data<C>(&self, client: &mut C, copy_data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.h.session(client).map_err(SqlError::into_pgwire)?;
        let data = copy_data.data;
        // An error in the data is kept by the session and reported at CopyDone, as
        // PostgreSQL reports it after the client stops sending.
        session.call(move |s| s.copy_data(&data)).await.map_err(SqlError::into_pgwire)
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.h.session(client).map_err(SqlError::into_pgwire)?;
        let r = session.call(|s| s.copy_done()).await.and_then(|r| r);
        match r {
            Ok(n) => {
                client
                    .send(PgWireBackendMessage::CommandComplete(Tag::new("COPY").with_rows(n as usize).into()))
                    .await?;
                Ok(())
            }
            Err(e) => {
                self.h.sh.log.statement_error(&e, "COPY");
                Err(e.into_pgwire())
            }
        }
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Ok(session) = self.h.session(client) {
            let _ = session.call(|s| s.copy_failed()).await;
        }
        SqlError::new("57014", format!("COPY from stdin failed: {}", fail.message)).into_pgwire()
    }
}
