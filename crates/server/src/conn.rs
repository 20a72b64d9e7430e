//! One connection's message loop: pgwire's per-message dispatch (`process_message`) over a
//! socket whose replies go out when the server is about to wait for the client, not at every
//! message.
//!
//! pgwire flushes after most replies it sends (ParseComplete, BindComplete, CommandComplete,
//! ReadyForQuery), so a `pgbench -M prepared` transaction (Bind, Execute, Sync) cost four
//! `send` calls, each one able to wake the client for a partial answer. A PostgreSQL backend
//! buffers its replies and flushes before it blocks reading the next command. [`Deferred`]
//! does the same below pgwire: writes collect in a buffer (passed on once it holds
//! [`WRITE_THROUGH`] bytes, so a large COPY TO or result streams), a flush is a no-op, and the
//! buffer goes out whenever the connection reads from the socket, which it does only when the
//! messages already received are all handled. Every reply a client can be waiting for
//! (ReadyForQuery, an authentication request, CopyInResponse, the answer to a Flush message)
//! is therefore on the wire before the server waits for anything else. A connection that
//! closes (FATAL error, shutdown) drains the buffer first.
//!
//! Below pgwire too, every byte read is checked against the protocol's grammar
//! ([`crate::frames`]) before pgwire's decoder sees it: the sound messages before a malformed
//! one are passed on, and the malformed one ends the connection with FATAL 08P01.
//!
//! The loop is the one pgwire's `process_socket` runs (startup timeout, Terminate,
//! CancelRequest and FATAL errors end the connection), with the socket wrapped (TLS first when
//! the server has a certificate and the client asks), and these duties of a PostgreSQL
//! backend's main loop added:
//!
//! - **replication connections**: on a connection started with `replication=database`, a
//!   simple query that is a replication command goes to [`crate::walsender`], which answers it
//!   on the socket itself (START_REPLICATION streams until the client ends it); other SQL
//!   runs as on any connection;
//! - **a wrong password** (or a login as a role that cannot authenticate, see
//!   [`crate::auth`]) gets PostgreSQL's FATAL 28P01 naming the user;
//! - **max_connections**: a StartupMessage takes a connection slot ([`Registry::admit`]);
//!   when none is free the client gets FATAL 53300 `sorry, too many clients already` and the
//!   connection closes, as PostgreSQL refuses the backend before authentication. A
//!   CancelRequest takes no slot, so a full server can still be asked to cancel. The slots
//!   kept for superusers (`superuser_reserved_connections`) are checked after
//!   authentication, when the role is known ([`crate::auth`]). A connection ending with a
//!   FATAL error gives its slot back before it sends the error, so a client that reads it
//!   and connects again finds the slot free (in CI, a test's next login found the server
//!   still full of the connection it had just been refused on).
//! - **BackendKeyData**: once startup is done, the session is registered under the process
//!   ID and key the client was given, for CancelRequests from other connections.
//! - **idle_in_transaction_session_timeout**: waiting for the next message while the session
//!   is in a transaction block (failed or not) is bounded by the session's timeout; past it
//!   the client gets FATAL 25P03 and the connection closes, which ends the session and rolls
//!   its transaction back;
//! - **idle_session_timeout**: the same outside a block, with FATAL 57P05.
//!
//! The WAL sender's rows bypass pgwire's encoder: its decoder thread lays out each batch as
//! whole CopyData messages, which go into [`Deferred`]'s buffer as they are ([`RawFrames`]),
//! behind whatever pgwire holds. Fed one message at a time through the codec, they cost the
//! connection's thread a future, an encode and two copies per row.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use std::sync::Arc;

use futures::{SinkExt, StreamExt};
use pgwire::api::{ClientInfo, ErrorHandler, PgWireConnectionState, PgWireServerHandlers};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{negotiate_tls, process_error, process_message};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, FramedParts};

use crate::error::SqlError;
use crate::interrupt::{Control, Registry, TxStatus};
use crate::{walsender, Shared};

/// How long a client has to finish its startup and authentication (pgwire's own limit).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Buffered replies beyond this go out at once.
pub const WRITE_THROUGH: usize = 64 * 1024;

/// A stream whose writes wait in a buffer until the next read (or its shutdown).
pub struct Deferred<S> {
    io: S,
    pending: Vec<u8>,
    /// Bytes of `pending` already written.
    sent: usize,
    /// Every byte read is checked against the protocol's grammar before pgwire sees it.
    check: crate::frames::FrameCheck,
    /// A malformed message was found after sound ones: those were passed on, and the next
    /// read fails with this.
    failed: Option<String>,
}

impl<S: AsyncWrite + Unpin> Deferred<S> {
    pub fn new(io: S, check: crate::frames::FrameCheck) -> Deferred<S> {
        Deferred { io, pending: Vec::with_capacity(8192), sent: 0, check, failed: None }
    }

    /// Writes out everything buffered.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.pending.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.pending[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        self.pending.clear();
        self.sent = 0;
        Pin::new(&mut self.io).poll_flush(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Deferred<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // What the client may be waiting for goes out before we wait for the client.
        ready!(this.poll_drain(cx))?;
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        // A malformed message never reaches pgwire's decoder ([`crate::frames`]); the sound
        // messages before it do, and the read after them fails.
        if let Err((sound, e)) = this.check.feed(&buf.filled()[before..]) {
            buf.set_filled(before + sound);
            if sound == 0 {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
            this.failed = Some(e);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Deferred<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.pending.len() >= WRITE_THROUGH {
            ready!(this.poll_drain(cx))?;
        }
        this.pending.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// A connection that also takes bytes already framed as backend messages.
pub trait RawFrames {
    /// Queues `frames` (whole backend messages) behind every message fed before them;
    /// `Pending` while earlier bytes must go out first.
    fn poll_write_frames(&mut self, cx: &mut Context<'_>, frames: &[u8]) -> Poll<io::Result<()>>;
}

impl<S, C> RawFrames for Framed<Deferred<S>, C>
where
    S: AsyncRead + AsyncWrite + Unpin,
    Framed<Deferred<S>, C>: futures::Sink<PgWireBackendMessage, Error = io::Error> + Unpin,
{
    fn poll_write_frames(&mut self, cx: &mut Context<'_>, frames: &[u8]) -> Poll<io::Result<()>> {
        // What the codec holds goes first (a flush of `Deferred` is a no-op: it only moves the
        // codec's bytes into its buffer).
        if !self.write_buffer().is_empty() {
            ready!(futures::Sink::<PgWireBackendMessage>::poll_flush(Pin::new(&mut *self), cx))?;
        }
        let d = self.get_mut();
        if d.pending.len() >= WRITE_THROUGH {
            ready!(d.poll_drain(cx))?;
        }
        d.pending.extend_from_slice(frames);
        Poll::Ready(Ok(()))
    }
}

/// Sends `e` as a FATAL error, logs it, and closes the connection (the buffer drains first).
async fn fatal<S>(socket: &mut S, sh: &Shared, e: SqlError) -> io::Result<()>
where
    S: futures::Sink<PgWireBackendMessage> + Unpin,
{
    sh.log.line("FATAL", &e.message);
    let info = ErrorInfo::new("FATAL".into(), e.code.into(), e.message);
    let _ = socket.send(PgWireBackendMessage::ErrorResponse(info.into())).await;
    let _ = socket.close().await;
    Ok(())
}

/// Serves one connection with `handlers` until the client leaves, a FATAL error, or the
/// startup timeout. `control` is the connection's session's control block, `session` the
/// session itself (replication commands that act on its transaction reach it there).
pub async fn serve_socket<H: PgWireServerHandlers>(
    tcp: TcpStream,
    handlers: H,
    session: Option<Arc<crate::wire::SessionHandle>>,
    sh: &Arc<Shared>,
    control: Arc<Control>,
) -> io::Result<()> {
    let startup_timeout = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_timeout);
    let negotiated = tokio::select! {
        _ = &mut startup_timeout => return Ok(()),
        s = negotiate_tls(tcp, sh.tls.clone()) => s?,
    };
    let Some(plain) = negotiated else { return Ok(()) };
    let old = plain.into_parts();
    // Bytes read while TLS was negotiated are checked like every later byte.
    let mut check = crate::frames::FrameCheck::new(!sh.trust);
    let mut read_buf = old.read_buf;
    let failed = check.feed(&read_buf).err().map(|(sound, e)| {
        read_buf.truncate(sound);
        e
    });
    let mut io = Deferred::new(old.io, check);
    io.failed = failed;
    let mut parts = FramedParts::new(io, old.codec);
    parts.read_buf = read_buf;
    parts.write_buf = old.write_buf;
    let mut socket = Framed::from_parts(parts);

    let startup = handlers.startup_handler();
    let simple = handlers.simple_query_handler();
    let extended = handlers.extended_query_handler();
    let copy = handlers.copy_handler();
    let cancel = handlers.cancel_handler();
    let errors = handlers.error_handler();
    // The connection slot, and the session's entry for CancelRequests once registered.
    let mut slot = None;
    let mut registered = false;
    loop {
        let starting = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup | PgWireConnectionState::AuthenticationInProgress
        );
        let msg = if starting {
            tokio::select! {
                _ = &mut startup_timeout => None,
                msg = socket.next() => msg,
            }
        } else {
            if !registered {
                registered = true;
                register(&sh.registry, &mut slot, &socket, &control);
                if let Err(e) = startup_settings(&socket, session.as_deref()).await {
                    drop(slot.take());
                    return fatal(&mut socket, sh, e).await;
                }
            }
            match idle_limit(&socket, &control) {
                Some((limit, ended)) => match tokio::time::timeout(limit, socket.next()).await {
                    Ok(msg) => msg,
                    Err(_) => {
                        drop(slot.take());
                        return fatal(&mut socket, sh, ended()).await;
                    }
                },
                None => socket.next().await,
            }
        };
        let msg = match msg {
            Some(Ok(m)) => m,
            // A message that breaks the protocol's grammar: PostgreSQL's FATAL 08P01.
            Some(Err(PgWireError::IoError(e))) if e.kind() == io::ErrorKind::InvalidData => {
                drop(slot.take());
                return fatal(&mut socket, sh, SqlError::new("08P01", e.to_string())).await;
            }
            _ => break,
        };
        if matches!(msg, PgWireFrontendMessage::Terminate(_)) {
            break;
        }
        if matches!(msg, PgWireFrontendMessage::Startup(_)) && slot.is_none() {
            match sh.registry.admit() {
                Some(s) => slot = Some(s),
                None => return fatal(&mut socket, sh, crate::interrupt::too_many_clients()).await,
            }
        }
        if control.exported() && matches!(msg, PgWireFrontendMessage::Query(_) | PgWireFrontendMessage::Parse(_)) {
            // A snapshot a replication command exported lasts until the next command.
            if let Some(s) = session.as_deref() {
                let _ = s.call(|s| s.clear_exported()).await;
            }
        }
        if let PgWireFrontendMessage::Query(q) = &msg {
            if let Some(mode) = walsender::mode(socket.metadata().get("replication").map(String::as_str)) {
                let cmd = match mode {
                    walsender::Mode::Physical => Some(Err(walsender::physical_refused())),
                    walsender::Mode::Logical => walsender::command::parse(&q.query),
                };
                if let Some(cmd) = cmd {
                    sh.log.line("LOG", &format!("received replication command: {}", q.query.trim()));
                    let client = replication_client(&socket);
                    let session = session.as_deref();
                    match cmd {
                        Ok(cmd) => walsender::run(&mut socket, sh, cmd, &client, session).await?,
                        Err(e) => walsender::refuse(&mut socket, sh, &e, session).await?,
                    }
                    continue;
                }
            }
        }
        let extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => msg.is_extended_query(),
        };
        let cancel_request = matches!(msg, PgWireFrontendMessage::CancelRequest(_));
        let handled = process_message(
            msg,
            &mut socket,
            startup.clone(),
            simple.clone(),
            extended.clone(),
            copy.clone(),
            cancel.clone(),
        )
        .await;
        if let Err(mut e) = handled {
            errors.on_error(&socket, &mut e);
            if let pgwire::error::PgWireError::InvalidPassword(_) = &e {
                // PostgreSQL's words, naming the user the client gave (pgwire's name none).
                let user = socket.metadata().get("user").cloned().unwrap_or_default();
                let message = format!("password authentication failed for user \"{user}\"");
                sh.log.line("FATAL", &message);
                let info = ErrorInfo::new("FATAL".into(), "28P01".into(), message);
                e = pgwire::error::PgWireError::UserError(Box::new(info));
            }
            let fatal = e.is_fatal();
            if fatal {
                // Give the slot back before the client can read the FATAL: a client that
                // connects again at once (after a refused password, say) must find it free.
                drop(slot.take());
            }
            process_error(&mut socket, e, extended_query).await?;
            if fatal {
                break;
            }
        }
        if cancel_request {
            break;
        }
    }
    Ok(())
}

/// Who a replication connection's client is (startup parameters, address, process ID).
fn replication_client<C: ClientInfo>(c: &C) -> walsender::Client {
    let m = c.metadata();
    let get = |k: &str, default: &str| m.get(k).cloned().unwrap_or_else(|| default.to_string());
    let addr = c.socket_addr();
    walsender::Client {
        pid: c.pid_and_secret_key().0,
        user: get("user", "postgres"),
        application_name: get("application_name", ""),
        addr: addr.ip().to_string(),
        port: addr.port(),
        dbname: get("database", "postgres"),
    }
}

/// Applies the settings the client's startup packet gave to its session
/// ([`crate::settings::startup`]); the error that ends the connection, if one does.
async fn startup_settings<C: ClientInfo>(
    client: &C,
    session: Option<&crate::wire::SessionHandle>,
) -> Result<(), SqlError> {
    let Some(session) = session else { return Ok(()) };
    let params = client.metadata().iter().map(|(k, v)| (k.as_str(), v.as_str()));
    for (name, value, strict) in crate::settings::startup(params)? {
        let r = session.call(move |s| s.startup_setting(&name, &value)).await?;
        if strict {
            r?;
        }
    }
    Ok(())
}

/// Registers the session under the BackendKeyData its client was given at startup, and
/// records the role it logged in as.
fn register<C: ClientInfo>(
    registry: &Registry,
    slot: &mut Option<crate::interrupt::Slot>,
    client: &C,
    control: &Arc<Control>,
) {
    let (pid, key) = client.pid_and_secret_key();
    control.set_pid(pid);
    if let Some(slot) = slot.as_mut() {
        registry.register(slot, pid, key.to_bytes().to_vec(), control.clone());
    }
    // Authentication is done: the role it accepted is the session's.
    control.set_role(client.metadata().get("user").map_or("", String::as_str));
}

/// How long the connection may wait for the client once it is ready for a query, and the
/// FATAL error past it: the session's `idle_in_transaction_session_timeout` in a block (failed
/// or not), its `idle_session_timeout` outside one.
fn idle_limit<C: ClientInfo>(client: &C, control: &Control) -> Option<(Duration, fn() -> SqlError)> {
    if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
        return None;
    }
    if control.status() == TxStatus::Idle {
        control.idle_session_timeout().map(|t| (t, crate::interrupt::idle_session_timeout as fn() -> SqlError))
    } else {
        control
            .idle_in_transaction_timeout()
            .map(|t| (t, crate::interrupt::idle_in_transaction_timeout as fn() -> SqlError))
    }
}
