//! Interrupts: query cancel, `statement_timeout`, `idle_in_transaction_session_timeout`,
//! `idle_session_timeout` and `max_connections`, the session features that reach across
//! threads.
//!
//! PostgreSQL delivers these as signals that set flags (`QueryCancelPending`,
//! `IdleInTransactionSessionTimeoutPending`, ...) which a backend acts on only where the code
//! says it is safe to, at `CHECK_FOR_INTERRUPTS()` (`src/backend/tcop/postgres.c`,
//! `ProcessInterrupts`). This module is the same design without signals:
//!
//! ```text
//!   CancelRequest (another connection's thread)           statement_timeout (the session)
//!        |  (pid, key) -> Registry -> Control.cancel           |  Control.deadline
//!        v                                                     v
//!   session thread: executor loops call Interrupts::tick() every CHECK_EVERY rows;
//!   tick() -> check(): cancel set?  -> 57014 "canceling statement due to user request"
//!                      deadline past? -> 57014 "canceling statement due to statement timeout"
//! ```
//!
//! * [`Control`] is one connection's shared block: the cancel flag, the transaction status the
//!   session last reported (what ReadyForQuery says, and what picks the idle timer), the
//!   session's two idle timeouts, and the role it logged in as (set once authentication is
//!   done, before the first statement).
//! * [`Registry`] maps the BackendKeyData a connection was given at startup (process ID and
//!   secret key) to its `Control`, hands out process IDs, and counts connections against
//!   `max_connections` and, after authentication, a non-superuser's against the slots left
//!   when `superuser_reserved_connections` are kept back ([`Registry::admits_non_superuser`],
//!   called by `crate::auth`). A CancelRequest with a key that matches no session does nothing, as
//!   in PostgreSQL (the client learns nothing either way).
//! * [`Interrupts`] is the session thread's side: the control block plus the running
//!   statement's deadline. Interruption points are the loops of the executor (sequential
//!   scans, WHERE filtering, grouping and aggregation, projection, the UPDATE and DELETE row
//!   loops, INSERT's row conversion, COPY TO's rows), every CopyData message of COPY FROM,
//!   and `pg_sleep`.
//!
//! Non-goals, said plainly: an engine call is not interrupted inside. An index range scan
//! returns its rows in one call, INSERT's rows go in one call, VACUUM, CHECKPOINT, TRUNCATE
//! and DDL run to their end, and a sort runs to its end once started (its input was read
//! under interrupt checks). A wait for a lock honours `statement_timeout` (the session caps
//! the engine's lock timeout at the time left) but not a cancel request, which takes effect
//! at the next interruption point after the lock is granted.
//!
//! A cancel that arrives while the session is between statements is forgotten when the next
//! statement starts (PostgreSQL ignores a cancel that arrives while it reads a command). At
//! server shutdown [`Registry::terminate_all`] sets every session's terminate flag, which ends
//! a running statement with 57P01 at its next interruption point, so that a long statement
//! (`pg_sleep(3600)`) does not hold the shutdown up.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use parking_lot::Mutex;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::{ClientInfo, PidSecretKeyGenerator, RandomPidSecretKeyGenerator};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;

use crate::error::SqlError;

/// Rows between two interrupt checks in executor loops (hot path: a counter decrement per row,
/// a clock read per this many).
pub const CHECK_EVERY: u32 = 256;

/// The transaction status ReadyForQuery reports: idle, in a block, in a failed block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxStatus {
    Idle,
    InBlock,
    Failed,
}

/// One connection's control block, shared by its session, its protocol task and the
/// registry (through which CancelRequests from other connections reach it).
#[derive(Debug, Default)]
pub struct Control {
    cancel: AtomicBool,
    /// Server shutdown: every interruption point from now on ends the statement.
    terminate: AtomicBool,
    status: AtomicU8,
    idle_in_transaction_timeout_ms: AtomicU64,
    idle_session_timeout_ms: AtomicU64,
    /// The role the connection authenticated as.
    role: std::sync::OnceLock<String>,
    /// The process ID its client was given (BackendKeyData).
    pid: std::sync::OnceLock<i32>,
    /// The session holds a snapshot a replication command exported, until the connection's
    /// next command.
    exported: AtomicBool,
    /// When the running statement's `statement_timeout` runs out, if it has one (read by the
    /// session and, inside engine calls, by the engine's threads).
    deadline: Mutex<Option<Instant>>,
}

impl Control {
    /// Records the role the connection logged in as (the first call wins: a session's role
    /// does not change).
    pub fn set_role(&self, role: &str) {
        let _ = self.role.set(role.to_string());
    }

    /// Records the process ID the connection's client was given (the first call wins).
    pub fn set_pid(&self, pid: i32) {
        let _ = self.pid.set(pid);
    }

    /// The session's process ID, as its BackendKeyData gave it; 0 for a session made without
    /// a connection.
    pub fn pid(&self) -> i32 {
        self.pid.get().copied().unwrap_or(0)
    }

    /// Whether the session holds an exported snapshot (see [`Control::set_exported`]).
    pub fn exported(&self) -> bool {
        self.exported.load(Ordering::SeqCst)
    }

    /// Set by the session when it starts or stops holding an exported snapshot.
    pub fn set_exported(&self, on: bool) {
        self.exported.store(on, Ordering::SeqCst);
    }

    /// The session's role (`current_user`); a session made without a connection (as the fuzz
    /// targets make one) is the bootstrap superuser's.
    pub fn role(&self) -> &str {
        self.role.get().map_or(crate::roles::BOOTSTRAP_SUPERUSER, String::as_str)
    }

    /// A CancelRequest matched this session: its running statement stops at the next
    /// interruption point.
    pub fn request_cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }

    /// The server is shutting down: the running statement, if any, stops at its next
    /// interruption point, and so does every later one.
    pub fn request_terminate(&self) {
        self.terminate.store(true, Ordering::SeqCst);
    }

    pub fn status(&self) -> TxStatus {
        match self.status.load(Ordering::Acquire) {
            1 => TxStatus::InBlock,
            2 => TxStatus::Failed,
            _ => TxStatus::Idle,
        }
    }

    pub fn set_status(&self, s: TxStatus) {
        let v = match s {
            TxStatus::Idle => 0,
            TxStatus::InBlock => 1,
            TxStatus::Failed => 2,
        };
        self.status.store(v, Ordering::Release);
    }

    /// `idle_in_transaction_session_timeout` as the session last set it (`None`: off).
    pub fn idle_in_transaction_timeout(&self) -> Option<Duration> {
        load_timeout(&self.idle_in_transaction_timeout_ms)
    }

    pub fn set_idle_in_transaction_timeout(&self, t: Option<Duration>) {
        store_timeout(&self.idle_in_transaction_timeout_ms, t);
    }

    /// `idle_session_timeout` as the session last set it (`None`: off).
    pub fn idle_session_timeout(&self) -> Option<Duration> {
        load_timeout(&self.idle_session_timeout_ms)
    }

    pub fn set_idle_session_timeout(&self, t: Option<Duration>) {
        store_timeout(&self.idle_session_timeout_ms, t);
    }
}

/// A timeout kept in whole milliseconds, 0 for none.
fn load_timeout(ms: &AtomicU64) -> Option<Duration> {
    match ms.load(Ordering::Acquire) {
        0 => None,
        ms => Some(Duration::from_millis(ms)),
    }
}

/// Keeps `t` in whole milliseconds, at least 1 (0 means none).
fn store_timeout(ms: &AtomicU64, t: Option<Duration>) {
    ms.store(t.map_or(0, |d| d.as_millis().clamp(1, u128::from(u64::MAX)) as u64), Ordering::Release);
}

/// A session's BackendKeyData: process ID and secret key (4 bytes under protocol 3.0).
type BackendKey = (i32, Vec<u8>);

/// BackendKeyData to sessions, process IDs, and the connection count.
#[derive(Debug)]
pub struct Registry {
    sessions: Mutex<HashMap<BackendKey, Arc<Control>>>,
    next_pid: AtomicI32,
    connections: AtomicUsize,
    max_connections: usize,
    /// `superuser_reserved_connections`: slots only superusers may take.
    reserved: usize,
}

impl Registry {
    /// A registry for `max_connections` slots, the last `reserved` of them for superusers
    /// (`reserved < max_connections`, which the server checks at startup).
    pub fn new(max_connections: usize, reserved: usize) -> Registry {
        Registry {
            sessions: Mutex::default(),
            next_pid: AtomicI32::new(std::process::id() as i32 & 0x3fff_ffff),
            connections: AtomicUsize::new(0),
            max_connections,
            reserved,
        }
    }

    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    pub fn superuser_reserved_connections(&self) -> usize {
        self.reserved
    }

    /// Whether an authenticated connection of a role that is not a superuser may stay: the
    /// connections holding slots (its own among them) leave at least the reserved ones free.
    pub fn admits_non_superuser(&self) -> bool {
        self.connections.load(Ordering::Acquire) + self.reserved <= self.max_connections
    }

    /// A process ID for a new connection's BackendKeyData, unique among live sessions.
    pub fn next_pid(&self) -> i32 {
        (self.next_pid.fetch_add(1, Ordering::Relaxed) & 0x7fff_ffff).max(1)
    }

    /// Takes a connection slot, or `None` when `max_connections` are in use. The slot is
    /// given back when the returned guard drops.
    pub fn admit(self: &Arc<Self>) -> Option<Slot> {
        let taken = self
            .connections
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max_connections).then_some(n + 1));
        taken.ok().map(|_| Slot { registry: self.clone(), key: None })
    }

    /// Makes the session reachable by CancelRequests carrying `(pid, key)`.
    pub fn register(&self, slot: &mut Slot, pid: i32, key: Vec<u8>, control: Arc<Control>) {
        self.sessions.lock().insert((pid, key.clone()), control);
        slot.key = Some((pid, key));
    }

    /// Every registered session's pid and transaction status, by pid.
    pub fn sessions_now(&self) -> Vec<(i32, TxStatus)> {
        let mut v: Vec<(i32, TxStatus)> = self.sessions.lock().iter().map(|((pid, _), c)| (*pid, c.status())).collect();
        v.sort_by_key(|(pid, _)| *pid);
        v
    }

    /// Fast shutdown: every registered session's statement stops at its next interruption
    /// point (PostgreSQL's postmaster sends its backends SIGTERM).
    pub fn terminate_all(&self) {
        for c in self.sessions.lock().values() {
            c.request_terminate();
        }
    }

    /// A CancelRequest: cancels the matching session's statement; `false` when none matches.
    pub fn cancel(&self, pid: i32, key: &[u8]) -> bool {
        let found = self.sessions.lock().get(&(pid, key.to_vec())).cloned();
        match found {
            Some(c) => {
                c.request_cancel();
                true
            }
            None => false,
        }
    }
}

/// A connection slot (and, once registered, its BackendKeyData entry).
#[derive(Debug)]
pub struct Slot {
    registry: Arc<Registry>,
    key: Option<BackendKey>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(k) = self.key.take() {
            self.registry.sessions.lock().remove(&k);
        }
        self.registry.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

/// CancelRequest: the session whose BackendKeyData matches stops its running statement with
/// 57014; a key that matches no session does nothing (and the requester learns nothing).
pub struct Cancel {
    registry: Arc<Registry>,
}

impl Cancel {
    pub fn new(registry: Arc<Registry>) -> Cancel {
        Cancel { registry }
    }
}

#[async_trait]
impl CancelHandler for Cancel {
    async fn on_cancel_request(&self, req: CancelRequest) {
        self.registry.cancel(req.pid, &req.secret_key.to_bytes());
    }
}

/// BackendKeyData for a new connection: a process ID no live session shares, and a random
/// secret key (pgwire's generator, whose own process IDs restart at every instance).
pub struct KeyGenerator {
    registry: Arc<Registry>,
}

impl KeyGenerator {
    pub fn new(registry: Arc<Registry>) -> KeyGenerator {
        KeyGenerator { registry }
    }
}

impl PidSecretKeyGenerator for KeyGenerator {
    fn generate(&self, client: &dyn ClientInfo) -> (i32, SecretKey) {
        let (_, key) = RandomPidSecretKeyGenerator::default().generate(client);
        (self.registry.next_pid(), key)
    }
}

/// The session thread's view: its control block (with the running statement's deadline).
#[derive(Debug)]
pub struct Interrupts {
    pub control: Arc<Control>,
    countdown: Cell<u32>,
    /// The same checks for the engine, made once per session ([`Interrupts::engine`]).
    engine: settledb::Interrupt,
}

impl Interrupts {
    pub fn new(control: Arc<Control>) -> Interrupts {
        let shared = control.clone();
        let engine = settledb::Interrupt::new(move || pending(&shared).map_or(Ok(()), |e| Err(e.into())));
        Interrupts { control, countdown: Cell::new(CHECK_EVERY), engine }
    }

    /// A statement starts: a cancel that came earlier is forgotten, and `statement_timeout`
    /// (`None`: off) starts counting.
    pub fn start_statement(&self, timeout: Option<Duration>) {
        self.control.cancel.store(false, Ordering::SeqCst);
        *self.control.deadline.lock() = timeout.map(|t| Instant::now() + t);
        self.countdown.set(CHECK_EVERY);
    }

    /// The time the running statement has left, if it has a timeout.
    pub fn remaining(&self) -> Option<Duration> {
        self.control.deadline.lock().map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// An interruption point in a loop: checks every [`CHECK_EVERY`] calls. Hot path.
    #[inline]
    pub fn tick(&self) -> Result<(), SqlError> {
        let n = self.countdown.get();
        if n > 1 {
            self.countdown.set(n - 1);
            return Ok(());
        }
        self.countdown.set(CHECK_EVERY);
        self.check()
    }

    /// An interruption point: the statement ends here if it was cancelled or ran out of time.
    pub fn check(&self) -> Result<(), SqlError> {
        pending(&self.control).map_or(Ok(()), Err)
    }

    /// The running statement's interruption points inside one engine call (a VACUUM's pages,
    /// a lock wait): the same checks as [`Interrupts::check`], made by the engine on its own
    /// threads, which end the call with `settledb::Error::Interrupted` holding the SqlError.
    /// One per session, shared (the deadline it reads is the running statement's).
    pub fn engine(&self) -> settledb::Interrupt {
        self.engine.clone()
    }

    /// `pg_sleep`: sleeps `d`, waking every few milliseconds to check for interrupts.
    pub fn sleep(&self, d: Duration) -> Result<(), SqlError> {
        let end = Instant::now() + d;
        loop {
            self.check()?;
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            std::thread::sleep((end - now).min(Duration::from_millis(10)));
        }
    }
}

/// Why the running statement must stop now, if it must: shutdown, a cancel (taken, so it
/// stops one statement), or its deadline.
fn pending(control: &Control) -> Option<SqlError> {
    if control.terminate.load(Ordering::Relaxed) {
        return Some(SqlError::new("57P01", "terminating connection due to administrator command"));
    }
    if control.cancel.swap(false, Ordering::SeqCst) {
        return Some(canceled_by_user());
    }
    if control.deadline.lock().is_some_and(|d| Instant::now() >= d) {
        return Some(statement_timeout());
    }
    None
}

pub fn canceled_by_user() -> SqlError {
    SqlError::new("57014", "canceling statement due to user request")
}

pub fn statement_timeout() -> SqlError {
    SqlError::new("57014", "canceling statement due to statement timeout")
}

/// The FATAL error a connection over `max_connections` gets.
pub fn too_many_clients() -> SqlError {
    SqlError::new("53300", "sorry, too many clients already")
}

pub fn idle_in_transaction_timeout() -> SqlError {
    SqlError::new("25P03", "terminating connection due to idle-in-transaction timeout")
}

pub fn idle_session_timeout() -> SqlError {
    SqlError::new("57P05", "terminating connection due to idle-session timeout")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_before_the_statement_is_forgotten_and_one_during_it_stops_it() {
        let i = Interrupts::new(Arc::default());
        i.control.request_cancel();
        i.start_statement(None);
        assert!(i.check().is_ok());
        i.control.request_cancel();
        let e = (0..CHECK_EVERY).map(|_| i.tick()).find(Result::is_err).expect("tick checks");
        assert_eq!(e.unwrap_err().message, "canceling statement due to user request");
    }

    #[test]
    fn a_past_deadline_is_a_statement_timeout() {
        let i = Interrupts::new(Arc::default());
        i.start_statement(Some(Duration::ZERO));
        assert_eq!(i.check().unwrap_err(), statement_timeout());
        i.start_statement(None);
        assert!(i.check().is_ok());
    }

    #[test]
    fn slots_are_counted_and_given_back() {
        let r = Arc::new(Registry::new(2, 0));
        let mut a = r.admit().unwrap();
        let _b = r.admit().unwrap();
        assert!(r.admit().is_none());
        let c: Arc<Control> = Arc::default();
        r.register(&mut a, 7, vec![1, 2, 3, 4], c.clone());
        assert!(!r.cancel(7, &[9, 9, 9, 9]), "a wrong key matches nothing");
        assert!(r.cancel(7, &[1, 2, 3, 4]));
        drop(a);
        assert!(!r.cancel(7, &[1, 2, 3, 4]), "a closed session is unregistered");
        assert!(r.admit().is_some());
    }

    #[test]
    fn reserved_slots_are_left_to_superusers() {
        // max_connections 4, 2 reserved: two ordinary sessions fit, a third (counted once it
        // took its slot) does not; its slot can still go to a superuser.
        let r = Arc::new(Registry::new(4, 2));
        let (_a, _b) = (r.admit().unwrap(), r.admit().unwrap());
        assert!(r.admits_non_superuser());
        let third = r.admit().unwrap();
        assert!(!r.admits_non_superuser());
        drop(third);
        assert!(r.admits_non_superuser());
    }
}
