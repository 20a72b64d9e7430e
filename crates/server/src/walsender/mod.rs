//! Replication connections: what PostgreSQL's walsender does for a client that connected with
//! `replication=database` (`pg_recvlogical`, a subscriber's apply worker, Debezium), on the
//! engine's logical slots.
//!
//! Such a connection runs SQL as any other, and besides it the replication commands of
//! [`command`]: `IDENTIFY_SYSTEM`, `CREATE_REPLICATION_SLOT … LOGICAL`,
//! `DROP_REPLICATION_SLOT`, `READ_REPLICATION_SLOT` and `START_REPLICATION SLOT … LOGICAL`.
//! The connection's message loop ([`crate::conn`]) hands them here; they answer with the
//! rows, command tags and errors PostgreSQL 15 sends.
//!
//! # Streaming
//!
//! `START_REPLICATION` switches the connection to CopyBoth. A decoder thread
//! ([`spawn_decoder`]) runs one decoding session that follows the WAL
//! ([`settledb::Database::decode_slot_follow`]): it reads from the slot's `restart_lsn`, skips
//! what committed before the client's requested position (or the slot's `confirmed_flush_lsn`,
//! if later), and hands the output rows over a bounded channel in batches of up to
//! [`BATCH_ROWS`], each row already a CopyData message holding an XLogData message (`w`: the
//! row's LSN, the end of the WAL decoded, the send time, the plugin's bytes) in the batch's
//! one buffer ([`Batch`]); at the flushed end of the WAL it reports the position decoded to
//! and waits for the next WAL flush (at most [`IDLE_WAIT`]), then reads on from where it
//! stopped, its reorder buffer kept, so a commit reaches the client as soon as it is durable.
//! The connection's task writes a batch's bytes as they are ([`crate::conn::RawFrames`]) and,
//! when the position decoded to passes the last row sent, a keepalive (`k`) carrying it, which
//! is what lets `pg_recvlogical --endpos` stop when no row reaches it. The client's standby
//! status updates (`r`) advance the slot's `confirmed_flush_lsn` (and with it `restart_lsn`
//! and `catalog_xmin`) to the flush position they report: the slot moves only as far as the
//! consumer has made the rows durable, so a consumer that reconnects after a crash on either
//! side gets every row it did not confirm. A client's
//! CopyDone ends the stream (CopyDone back, `CommandComplete` for the COPY and for the
//! command, ReadyForQuery); a client
//! silent for longer than the connection's `wal_sender_timeout` (PostgreSQL's default
//! [`WAL_SENDER_TIMEOUT`]; settable per connection, with `SET` or the startup packet's
//! `options=-c wal_sender_timeout=…`; 0 turns it off) is disconnected, after a keepalive
//! asking for a reply at half that time.
//!
//! # Slots and snapshots
//!
//! `CREATE_REPLICATION_SLOT` takes PostgreSQL 15's options: `TEMPORARY` (the slot belongs
//! to the connection and goes when it ends or hits an error), and `SNAPSHOT 'export'` (the
//! default), `'use'` or `'nothing'`; what the session does for them is in
//! `crate::session`'s replication module.
//!
//! # Not done
//!
//! Physical replication.
//!
//! # pg_stat_replication
//!
//! Each stream registers itself in [`Senders`] for its length: the client (the BackendKeyData
//! process ID it was given, user, `application_name`, address), the position sent, and what
//! the client's last status update reported.

pub mod command;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use futures::{Sink, SinkExt, Stream, StreamExt};
use pgwire::error::PgWireError;
use pgwire::messages::copy::{CopyBothResponse, CopyData, CopyDone};
use pgwire::messages::data::{DataRow, FieldDescription, RowDescription};
use pgwire::messages::response::{CommandComplete, ReadyForQuery, TransactionStatus};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use settledb::db::DecodeLimits;
use settledb::decode::logical::OutputRow;
use settledb::{Lsn, SlotOptions};

use self::command::{Command, SnapshotAction};
use crate::conn::RawFrames;
use crate::error::SqlError;
use crate::slotfuncs::Caller;
use crate::wire::SessionHandle;
use crate::Shared;

/// How often a stream moves its slot to what the client reported, at most.
const CONFIRM_EVERY: Duration = Duration::from_millis(100);
/// PostgreSQL's default `wal_sender_timeout`.
pub const WAL_SENDER_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest wait for new WAL after a pass that found nothing new (a flush ends it at once).
pub const IDLE_WAIT: Duration = Duration::from_millis(100);
/// Rows handed from the decoder thread to the connection in one message, at most.
const BATCH_ROWS: usize = 256;
/// A batch's first allocation: room for [`BATCH_ROWS`] rows of TPC-C's size (about 250
/// bytes), below the size the allocator would map afresh for each batch.
const BATCH_BYTES: usize = 80 * 1024;
/// Messages (batches, positions) in flight between the decoder thread and the connection: up
/// to 16,384 rows, a few MB, ahead of a slow client.
const CHANNEL_MESSAGES: usize = 64;
/// A keepalive goes out at least this often while streaming, even when nothing moved.
const KEEPALIVE_EVERY: Duration = Duration::from_secs(10);

/// PostgreSQL's `TEXTOID` and `INT4OID`.
const TEXT: u32 = 25;
const INT4: u32 = 23;
/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;

/// What kind of connection the `replication` startup parameter asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `replication=database`: SQL and the logical replication commands.
    Logical,
    /// `replication=true`: physical replication, which settledb does not serve.
    Physical,
}

/// The mode the startup parameter `replication` (as the client sent it) selects; `None` for a
/// normal connection.
pub fn mode(replication: Option<&str>) -> Option<Mode> {
    match replication.map(str::to_ascii_lowercase).as_deref() {
        Some("database") => Some(Mode::Logical),
        Some("true" | "on" | "yes" | "1") => Some(Mode::Physical),
        _ => None,
    }
}

/// The error a physical replication connection gets at startup.
pub fn physical_refused() -> SqlError {
    SqlError::unsupported("physical replication (connect with replication=database for logical replication)")
}

/// What `pg_stat_replication` shows of one stream.
#[derive(Clone, Debug, Default)]
pub struct SenderState {
    pub pid: i32,
    pub usename: String,
    pub application_name: String,
    pub client_addr: String,
    pub client_port: u16,
    pub slot: String,
    /// When the stream started (microseconds since the Unix epoch).
    pub started_micros: i64,
    /// The position decoded and sent up to.
    pub sent: Lsn,
    /// What the client's last standby status update reported (0/0 before the first).
    pub write: Lsn,
    pub flush: Lsn,
    pub replay: Lsn,
    /// When that update arrived (microseconds since the Unix epoch; 0 before the first).
    pub reply_micros: i64,
    /// `write_lag`, `flush_lag`, `replay_lag` in microseconds: how long ago the newest
    /// position the client's last report covers was sent ([`LagTracker`]); `None` before.
    pub lags: [Option<i64>; 3],
}

/// PostgreSQL's `LagTracker`, simplified: the times positions were sent (at most one sample a
/// millisecond, at most [`LAG_SAMPLES`] kept, the oldest dropped), and for each of the
/// client's three positions the lag its last report showed: the age of the newest sample at
/// or before the position. A report that covers no new sample keeps the last lag, as
/// PostgreSQL's does while the positions stand still.
#[derive(Default)]
struct LagTracker {
    samples: std::collections::VecDeque<(Lsn, Instant)>,
    /// Per write/flush/replay: how many samples it has consumed, as an index into the
    /// samples (adjusted when the front is dropped), and its last lag.
    read: [usize; 3],
    lags: [Option<i64>; 3],
}

const LAG_SAMPLES: usize = 8192;

impl LagTracker {
    fn sent(&mut self, lsn: Lsn, now: Instant) {
        if let Some(&(last, at)) = self.samples.back() {
            if lsn <= last || now.duration_since(at) < Duration::from_millis(1) {
                return;
            }
        }
        if self.samples.len() == LAG_SAMPLES {
            self.samples.pop_front();
            for r in &mut self.read {
                *r = r.saturating_sub(1);
            }
        }
        self.samples.push_back((lsn, now));
    }

    /// The client reported `positions` (write, flush, replay) at `now`; the lags then.
    fn reported(&mut self, positions: [Lsn; 3], now: Instant) -> [Option<i64>; 3] {
        for (k, pos) in positions.into_iter().enumerate() {
            let mut newest = None;
            while let Some(&(lsn, at)) = self.samples.get(self.read[k]) {
                if lsn > pos {
                    break;
                }
                newest = Some(at);
                self.read[k] += 1;
            }
            if let Some(at) = newest {
                self.lags[k] = Some(now.duration_since(at).as_micros() as i64);
            }
        }
        // Samples every position has passed are not needed again.
        let done = self.read.iter().copied().min().unwrap_or(0);
        self.samples.drain(..done);
        for r in &mut self.read {
            *r -= done;
        }
        self.lags
    }
}

/// The streams running now, by a key of their own, and the temporary slots, by the session
/// that owns each: together, who holds which slot.
#[derive(Default)]
pub struct Senders {
    next: std::sync::atomic::AtomicU64,
    live: parking_lot::Mutex<std::collections::BTreeMap<u64, SenderState>>,
    /// Temporary slots and their sessions' process IDs: a temporary slot is active for its
    /// session from creation to drop, as PostgreSQL's is.
    temporary: parking_lot::Mutex<std::collections::BTreeMap<String, i32>>,
}

impl Senders {
    pub fn snapshot(&self) -> Vec<SenderState> {
        self.live.lock().values().cloned().collect()
    }

    /// The process ID of the connection streaming `slot` or owning it as temporary, if one
    /// does (`pg_replication_slots.active_pid`).
    pub fn active_pid(&self, slot: &str) -> Option<i32> {
        let streaming = self.live.lock().values().find(|s| s.slot == slot).map(|s| s.pid);
        streaming.or_else(|| self.temporary.lock().get(slot).copied())
    }

    /// PostgreSQL's error (55006) for a slot another session holds, if one does; `me` is the
    /// asking session's process ID.
    pub fn check_free(&self, slot: &str, me: i32) -> Result<(), SqlError> {
        match self.active_pid(slot) {
            Some(pid) if pid != me => Err(active_for(slot, pid)),
            _ => Ok(()),
        }
    }

    /// Registers a stream of `s.slot` unless one runs already or another session owns the
    /// slot as temporary (checked and added at once).
    fn register_inactive(&self, s: SenderState) -> Result<u64, SqlError> {
        let mut live = self.live.lock();
        if let Some(other) = live.values().find(|x| x.slot == s.slot) {
            return Err(active_for(&s.slot, other.pid));
        }
        if let Some(&owner) = self.temporary.lock().get(&s.slot).filter(|&&p| p != s.pid) {
            return Err(active_for(&s.slot, owner));
        }
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        live.insert(key, s);
        Ok(key)
    }

    /// Reserves `slot` as a temporary slot of session `pid` before it is created; false when
    /// the name is held already (the creation then fails on the name anyway).
    pub fn claim_temporary(&self, slot: &str, pid: i32) -> bool {
        let mut t = self.temporary.lock();
        if t.contains_key(slot) {
            return false;
        }
        t.insert(slot.to_string(), pid);
        true
    }

    /// Forgets temporary slot `slot` (dropped, or its creation failed).
    pub fn release_temporary(&self, slot: &str) {
        self.temporary.lock().remove(slot);
    }

    /// The temporary slots session `pid` owns.
    pub fn temporary_of(&self, pid: i32) -> Vec<String> {
        self.temporary.lock().iter().filter(|(_, &p)| p == pid).map(|(s, _)| s.clone()).collect()
    }

    fn update(&self, key: u64, f: impl FnOnce(&mut SenderState)) {
        if let Some(s) = self.live.lock().get_mut(&key) {
            f(s);
        }
    }
}

fn active_for(slot: &str, pid: i32) -> SqlError {
    SqlError::new("55006", format!("replication slot \"{slot}\" is active for PID {pid}"))
}

/// Removes a stream from [`Senders`] when it ends, however it ends.
struct Registered<'a> {
    senders: &'a Senders,
    key: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.senders.live.lock().remove(&self.key);
    }
}

/// Who is on the other end of a replication connection, for `pg_stat_replication`.
#[derive(Clone, Debug, Default)]
pub struct Client {
    pub pid: i32,
    pub user: String,
    pub application_name: String,
    pub addr: String,
    pub port: u16,
    pub dbname: String,
}

/// Runs one replication command on the connection `socket`, through to ReadyForQuery.
pub async fn run<S>(
    socket: &mut S,
    sh: &Arc<Shared>,
    cmd: Command,
    client: &Client,
    session: Option<&SessionHandle>,
) -> io::Result<()>
where
    S: Sink<PgWireBackendMessage, Error = io::Error>
        + Stream<Item = Result<PgWireFrontendMessage, PgWireError>>
        + RawFrames
        + Unpin,
{
    let done = match cmd {
        Command::StartLogical { slot, start, options } => {
            let timeout = match session {
                Some(s) => s
                    .call(|s| crate::settings::duration_of(&s.settings, "wal_sender_timeout"))
                    .await
                    .unwrap_or(Some(WAL_SENDER_TIMEOUT)),
                None => Some(WAL_SENDER_TIMEOUT),
            };
            return stream(socket, sh, &slot, start, options, client, timeout).await;
        }
        Command::IdentifySystem => identify_system(socket, sh, &client.dbname).await,
        Command::CreateSlot { slot, temporary, plugin, two_phase, snapshot } => {
            let how = SlotRequest { options: SlotOptions { two_phase, temporary }, plugin, snapshot };
            create_slot(socket, sh, &slot, how, client, session).await
        }
        Command::DropSlot { slot, wait } => match drop_slot(sh, &slot, wait, client.pid).await {
            Ok(()) => Ok(complete(socket, "DROP_REPLICATION_SLOT").await),
            Err(e) => Err(e),
        },
        Command::ReadSlot { slot } => read_slot(socket, sh, &slot).await,
    };
    match done {
        Ok(r) => r?,
        Err(e) => return refuse(socket, sh, &e, session).await,
    }
    ready_in(socket, session).await
}

/// Answers a replication command that could not be parsed, or is refused, with its error.
pub async fn refuse<S>(socket: &mut S, sh: &Shared, e: &SqlError, session: Option<&SessionHandle>) -> io::Result<()>
where
    S: Sink<PgWireBackendMessage, Error = io::Error> + Unpin,
{
    if let Some(s) = session {
        // As any error inside a transaction block, it fails the block; and as any error, it
        // drops the session's temporary slots.
        let _ = s.call(|s| s.statement_failed()).await;
    }
    error(socket, sh, e).await?;
    ready_in(socket, session).await
}

type Answer = Result<io::Result<()>, SqlError>;

/// `DROP_REPLICATION_SLOT slot [WAIT]`: a slot another connection holds (streams, or owns as
/// temporary) is refused (55006), or with WAIT waited for, as PostgreSQL does (here for at
/// most [`WAL_SENDER_TIMEOUT`], after which a silent client is gone anyway). `me` is the
/// asking connection's process ID: its own temporary slot it may drop.
async fn drop_slot(sh: &Shared, slot: &str, wait: bool, me: i32) -> Result<(), SqlError> {
    let deadline = Instant::now() + WAL_SENDER_TIMEOUT;
    while wait && sh.senders.active_pid(slot).is_some_and(|p| p != me) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Caller::new(sh, me).drop_slot(slot)
}

async fn identify_system<S>(socket: &mut S, sh: &Shared, dbname: &str) -> Answer
where
    S: Sink<PgWireBackendMessage, Error = io::Error> + Unpin,
{
    let columns = [("systemid", TEXT), ("timeline", INT4), ("xlogpos", TEXT), ("dbname", TEXT)];
    let xlogpos = sh.db.current_wal_flush_lsn().to_string();
    let row = [Some(sh.db.system_identifier().to_string()), Some("1".to_string()), Some(xlogpos), Some(dbname.into())];
    Ok(one_row(socket, &columns, &row, "IDENTIFY_SYSTEM").await)
}

/// What `CREATE_REPLICATION_SLOT` asks for besides the slot's name.
struct SlotRequest {
    options: SlotOptions,
    plugin: String,
    snapshot: SnapshotAction,
}

/// `CREATE_REPLICATION_SLOT`. With `SNAPSHOT 'use'` the slot is created by the connection's
/// session, whose transaction block (READ ONLY, REPEATABLE READ, no query yet) then reads
/// with the slot's snapshot: a subscriber's table synchronization copies the table with it
/// before it streams the rest from the slot. With `SNAPSHOT 'export'` (the default) the
/// session exports that snapshot until the connection's next command, and the row names it.
/// A `TEMPORARY` slot belongs to the connection (see `crate::session`, "Temporary slots").
async fn create_slot<S>(
    socket: &mut S,
    sh: &Shared,
    slot: &str,
    how: SlotRequest,
    client: &Client,
    session: Option<&SessionHandle>,
) -> Answer
where
    S: Sink<PgWireBackendMessage, Error = io::Error> + Unpin,
{
    let SlotRequest { options, plugin, snapshot } = how;
    let in_session = || session.ok_or_else(|| SqlError::new("XX000", "no session for this connection"));
    let (name, p) = (slot.to_string(), plugin.clone());
    let (info, snapshot_name) = match snapshot {
        SnapshotAction::Nothing => (Caller::new(sh, client.pid).create_slot(slot, &plugin, options)?, None),
        SnapshotAction::Export => {
            let s = in_session()?;
            let (info, exported) = s.call(move |s| s.create_slot_exporting(&name, &p, options)).await??;
            (info, Some(exported))
        }
        SnapshotAction::Use => {
            let s = in_session()?;
            (s.call(move |s| s.create_slot_using_snapshot(&name, &p, options)).await??, None)
        }
    };
    let columns = [("slot_name", TEXT), ("consistent_point", TEXT), ("snapshot_name", TEXT), ("output_plugin", TEXT)];
    let point = info.confirmed_flush_lsn.unwrap_or(Lsn::INVALID).to_string();
    let row = [Some(info.slot_name.clone()), Some(point), snapshot_name, Some(plugin)];
    Ok(one_row(socket, &columns, &row, "CREATE_REPLICATION_SLOT").await)
}

async fn read_slot<S>(socket: &mut S, sh: &Shared, slot: &str) -> Answer
where
    S: Sink<PgWireBackendMessage, Error = io::Error> + Unpin,
{
    if sh.db.replication_slot(slot).is_some() {
        // Every engine slot is logical; PostgreSQL 15 answers this for physical slots only.
        return Err(SqlError::new("0A000", "cannot use READ_REPLICATION_SLOT with a logical replication slot"));
    }
    let columns = [("slot_type", TEXT), ("restart_lsn", TEXT), ("restart_tli", INT4)];
    Ok(one_row(socket, &columns, &[None, None, None], "READ_REPLICATION_SLOT").await)
}

/// RowDescription, one DataRow of text values, CommandComplete.
async fn one_row<S>(socket: &mut S, columns: &[(&str, u32)], row: &[Option<String>], tag: &str) -> io::Result<()>
where
    S: Sink<PgWireBackendMessage, Error = io::Error> + Unpin,
{
    let fields = columns
        .iter()
        .map(|&(name, oid)| {
            let size = if oid == INT4 { 4 } else { -1 };
            FieldDescription::new(name.to_string(), 0, 0, oid, size, -1, 0)
        })
        .collect();
    socket.feed(PgWireBackendMessage::RowDescription(RowDescription::new(fields))).await?;
    let mut data = BytesMut::new();
    for v in row {
        match v {
            Some(v) => {
                data.put_i32(v.len() as i32);
                data.put_slice(v.as_bytes());
            }
            None => data.put_i32(-1),
        }
    }
    socket.feed(PgWireBackendMessage::DataRow(DataRow::new(data, row.len() as i16))).await?;
    complete(socket, tag).await
}

async fn complete<S>(socket: &mut S, tag: &str) -> io::Result<()>
where
    S: Sink<PgWireBackendMessage, Error = io::Error> + Unpin,
{
    socket.feed(PgWireBackendMessage::CommandComplete(CommandComplete::new(tag.to_string()))).await
}

async fn error<S>(socket: &mut S, sh: &Shared, e: &SqlError) -> io::Result<()>
where
    S: Sink<PgWireBackendMessage, Error = io::Error> + Unpin,
{
    sh.log.line("ERROR", &e.message);
    socket.feed(PgWireBackendMessage::ErrorResponse(e.to_error_info().into())).await
}

async fn ready<S>(socket: &mut S) -> io::Result<()>
where
    S: Sink<PgWireBackendMessage, Error = io::Error> + Unpin,
{
    socket.send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(TransactionStatus::Idle))).await
}

/// ReadyForQuery with the session's transaction status (a command may run inside a block).
async fn ready_in<S>(socket: &mut S, session: Option<&SessionHandle>) -> io::Result<()>
where
    S: Sink<PgWireBackendMessage, Error = io::Error> + Unpin,
{
    let status = session.map_or(TransactionStatus::Idle, SessionHandle::tx_status);
    socket.send(PgWireBackendMessage::ReadyForQuery(ReadyForQuery::new(status))).await
}

/// What the decoder thread hands the connection.
enum Event {
    Rows(Batch),
    /// A round ended; everything committed before this position has been handed over.
    Decoded(Lsn),
    Failed(SqlError),
}

/// The decoder thread of one `START_REPLICATION`; stops when told or when the connection's
/// end of the channel goes.
struct Decoder {
    events: tokio::sync::mpsc::Receiver<Event>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Decoder {
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Unblock a send waiting for room, then wait for the thread.
        self.events.close();
        while self.events.try_recv().is_ok() {}
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn_decoder(sh: Arc<Shared>, slot: String, start: Lsn, options: Vec<(String, Option<String>)>) -> Decoder {
    let (tx, events) = tokio::sync::mpsc::channel(CHANNEL_MESSAGES);
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let thread = std::thread::Builder::new().name(format!("walsender-{slot}")).spawn(move || {
        let limits = DecodeLimits { start_lsn: Some(start), ..DecodeLimits::default() };
        let gone = || settledb::Error::invalid("the replication client left");
        // Rows go over in batches (one channel message and one wake-up of the connection per
        // batch), the last of a pass before its position, as the XLogData messages the
        // connection sends: built here, so that a row's bytes are copied once and its buffer
        // is freed by the thread that allocated it.
        let batch = std::cell::RefCell::new(Batch::new(start));
        let send_batch = || -> settledb::Result<()> {
            let mut b = batch.borrow_mut();
            if b.ends.is_empty() {
                return Ok(());
            }
            let next = Batch::new(b.wal_end);
            let mut full = std::mem::replace(&mut *b, next);
            drop(b);
            full.stamp(now_pg_micros());
            tx.blocking_send(Event::Rows(full)).map_err(|_| gone())
        };
        let mut sink = |row: &OutputRow| {
            let full = {
                let mut b = batch.borrow_mut();
                b.push(row);
                b.ends.len() >= BATCH_ROWS
            };
            if full {
                send_batch()?;
            }
            Ok(())
        };
        let mut follow = |pos: Lsn| -> settledb::Result<bool> {
            if stopped.load(Ordering::Acquire)
                || send_batch().is_err()
                || tx.blocking_send(Event::Decoded(pos)).is_err()
            {
                return Ok(false);
            }
            batch.borrow_mut().passed(pos);
            // Nothing new past what this pass read: wait for the next flush.
            if sh.db.current_wal_flush_lsn() <= pos {
                sh.db.wait_for_wal_flush(pos, IDLE_WAIT);
            }
            Ok(!stopped.load(Ordering::Acquire))
        };
        let r = sh.db.decode_slot_follow(&slot, limits, &options, &mut sink, &mut follow);
        if let Err(e) = r {
            if !stopped.load(Ordering::Acquire) {
                let _ = tx.blocking_send(Event::Failed(crate::slotfuncs::slot_error(e)));
            }
        }
    });
    Decoder { events, stop, thread: thread.ok() }
}

/// `START_REPLICATION SLOT slot LOGICAL start (options)`: the CopyBoth stream (see the module
/// documentation), through to ReadyForQuery, or an error before it.
async fn stream<S>(
    socket: &mut S,
    sh: &Arc<Shared>,
    slot: &str,
    start: Lsn,
    options: Vec<(String, Option<String>)>,
    client: &Client,
    timeout: Option<Duration>,
) -> io::Result<()>
where
    S: Sink<PgWireBackendMessage, Error = io::Error>
        + Stream<Item = Result<PgWireFrontendMessage, PgWireError>>
        + RawFrames
        + Unpin,
{
    let Some(d) = sh.db.replication_slot(slot) else {
        let e = SqlError::new("42704", format!("replication slot \"{slot}\" does not exist"));
        error(socket, sh, &e).await?;
        return ready(socket).await;
    };
    let from = start.max(d.confirmed_flush);
    let registered = sh.senders.register_inactive(SenderState {
        pid: client.pid,
        usename: client.user.clone(),
        application_name: client.application_name.clone(),
        client_addr: client.addr.clone(),
        client_port: client.port,
        slot: slot.to_string(),
        started_micros: now_pg_micros() + PG_EPOCH_MICROS,
        sent: from,
        ..SenderState::default()
    });
    let key = match registered {
        Ok(key) => key,
        Err(e) => {
            error(socket, sh, &e).await?;
            return ready(socket).await;
        }
    };
    let _registered = Registered { senders: &sh.senders, key };
    sh.log.line("LOG", &format!("starting logical decoding for slot \"{slot}\" at {from}"));
    socket.send(PgWireBackendMessage::CopyBothResponse(CopyBothResponse::new(0, 0, vec![]))).await?;
    let mut decoder = spawn_decoder(sh.clone(), slot.to_string(), from, options);
    let mut st = StreamState::new(sh, slot, key, from, timeout);
    // One clock for the whole stream: a sleep made afresh per event would never end while
    // events come faster than it (the decoder reports its position every pass).
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + st.tick_every(), st.tick_every());
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Hand what was queued to the connection's buffer, which goes out when the loop next
        // waits (see `crate::conn`); rows queue back to back while the decoder keeps up.
        if decoder.events.is_empty() {
            socket.flush().await?;
        }
        tokio::select! {
            ev = decoder.events.recv() => match ev {
                Some(Event::Rows(batch)) => {
                    st.sent_rows(&batch);
                    futures::future::poll_fn(|cx| socket.poll_write_frames(cx, batch.frames())).await?;
                }
                Some(Event::Decoded(lsn)) => {
                    if let Some(k) = st.decoded(lsn) {
                        socket.feed(copy_data(k)).await?;
                    }
                }
                Some(Event::Failed(e)) => {
                    decoder.stop();
                    error(socket, sh, &e).await?;
                    return ready(socket).await;
                }
                None => {
                    let e = SqlError::new("XX000", "the logical decoding thread ended");
                    error(socket, sh, &e).await?;
                    return ready(socket).await;
                }
            },
            msg = socket.next() => {
                st.heard();
                match msg {
                    Some(Ok(PgWireFrontendMessage::CopyData(d))) => st.client_data(&d.data),
                    Some(Ok(PgWireFrontendMessage::CopyDone(_))) => {
                        decoder.stop();
                        socket.feed(PgWireBackendMessage::CopyDone(CopyDone::new())).await?;
                        // PostgreSQL ends the COPY ("COPY 0") and then the command; libpq's
                        // walreceiver reads both (a subscriber's table sync ends its stream so).
                        complete(socket, "COPY 0").await?;
                        complete(socket, "START_REPLICATION").await?;
                        return ready(socket).await;
                    }
                    Some(Ok(PgWireFrontendMessage::CopyFail(f))) => {
                        decoder.stop();
                        let e = SqlError::new("57014", format!("COPY from the replication client failed: {}", f.message));
                        error(socket, sh, &e).await?;
                        return ready(socket).await;
                    }
                    // Terminate, a closed socket, or a message that has no place in CopyBoth.
                    Some(Ok(PgWireFrontendMessage::Terminate(_))) | None => return Ok(()),
                    Some(Ok(other)) => {
                        let e = SqlError::new("08P01", format!("unexpected message during replication: {other:?}"));
                        sh.log.line("FATAL", &e.message);
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e.message));
                    }
                    Some(Err(e)) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
                }
            },
            _ = ticker.tick() => match st.tick() {
                Tick::TimedOut => {
                    // As PostgreSQL's walsender: logged, not sent, and the connection closes.
                    let why = "terminating walsender process due to replication timeout";
                    sh.log.line("LOG", why);
                    return Err(io::Error::new(io::ErrorKind::TimedOut, why));
                }
                Tick::Send(Some(k)) => socket.feed(copy_data(k)).await?,
                Tick::Send(None) => {}
            }
        }
    }
}

/// What a stream keeps between its events: positions sent and reported, and its clocks.
struct StreamState<'a> {
    sh: &'a Shared,
    slot: &'a str,
    /// Its entry in [`Senders`].
    key: u64,
    /// The position decoded and sent up to.
    decoded: Lsn,
    /// The last row's position, and the position the last keepalive reported.
    last_row: Lsn,
    last_reported: Lsn,
    last_heard: Instant,
    last_keepalive: Instant,
    asked_reply: bool,
    /// However the stream ends, the slot gets what the client last reported.
    reported: ConfirmAtEnd<'a>,
    last_confirm: Instant,
    lag: LagTracker,
    /// The connection's `wal_sender_timeout` (`None`: 0, never).
    timeout: Option<Duration>,
}

/// What a tick of the stream's clock asks for.
enum Tick {
    /// The client has been silent past `wal_sender_timeout`.
    TimedOut,
    /// A keepalive to send, if any.
    Send(Option<Bytes>),
}

impl<'a> StreamState<'a> {
    fn new(sh: &'a Shared, slot: &'a str, key: u64, from: Lsn, timeout: Option<Duration>) -> StreamState<'a> {
        let now = Instant::now();
        StreamState {
            sh,
            slot,
            key,
            decoded: from,
            last_row: Lsn::INVALID,
            last_reported: Lsn::INVALID,
            last_heard: now,
            last_keepalive: now,
            asked_reply: false,
            reported: ConfirmAtEnd { sh, slot, flush: std::cell::Cell::new(Lsn::INVALID) },
            last_confirm: now,
            lag: LagTracker::default(),
            timeout,
        }
    }

    /// How often the stream's clock ticks: every second, or four times per
    /// `wal_sender_timeout` when that is shorter than four seconds.
    fn tick_every(&self) -> Duration {
        self.timeout
            .map_or(Duration::from_secs(1), |t| (t / 4).clamp(Duration::from_millis(10), Duration::from_secs(1)))
    }

    /// A batch of rows is about to go out.
    fn sent_rows(&mut self, batch: &Batch) {
        self.decoded = self.decoded.max(batch.wal_end);
        self.last_row = self.last_row.max(batch.last_row);
        self.lag.sent(self.decoded, Instant::now());
    }

    /// A pass of the decoder ended at `lsn`: a keepalive to send when that position passes
    /// the last row sent (what lets `pg_recvlogical --endpos` stop where no row reaches it;
    /// a busy stream, whose passes end on the commit just sent, sends none), or when none
    /// went out for a while.
    fn decoded(&mut self, lsn: Lsn) -> Option<Bytes> {
        self.decoded = self.decoded.max(lsn);
        let decoded = self.decoded;
        self.sh.senders.update(self.key, |s| s.sent = decoded);
        let unreported = decoded > self.last_row && decoded > self.last_reported;
        if !unreported && self.last_keepalive.elapsed() < KEEPALIVE_EVERY {
            return None;
        }
        self.last_keepalive = Instant::now();
        self.last_reported = decoded;
        Some(keepalive(decoded, false))
    }

    fn heard(&mut self) {
        self.last_heard = Instant::now();
        self.asked_reply = false;
    }

    /// CopyData from the client: a standby status update is recorded and moves the slot, at
    /// most every [`CONFIRM_EVERY`] (a subscriber reports after nearly every batch it
    /// applies; PostgreSQL too keeps `confirmed_flush` in memory and writes it at
    /// checkpoints). Anything else (hot standby feedback) means nothing here.
    fn client_data(&mut self, data: &[u8]) {
        let Some(st) = standby_status(data) else { return };
        let lags = self.lag.reported([st.write, st.flush, st.replay], Instant::now());
        self.sh.senders.update(self.key, |s| {
            (s.write, s.flush, s.replay) = (st.write, st.flush, st.replay);
            s.reply_micros = now_pg_micros() + PG_EPOCH_MICROS;
            s.lags = lags;
        });
        if st.flush != Lsn::INVALID {
            self.reported.flush.set(self.reported.flush.get().max(st.flush));
            self.confirm_due();
        }
    }

    /// Moves the slot to the client's last report if the last move is [`CONFIRM_EVERY`] old.
    fn confirm_due(&mut self) {
        let flush = self.reported.flush.get();
        if flush != Lsn::INVALID && self.last_confirm.elapsed() >= CONFIRM_EVERY {
            confirm(self.sh, self.slot, flush);
            self.last_confirm = Instant::now();
        }
    }

    /// Once a second when nothing else happens: a report that came too soon after the last
    /// move moves the slot now; a client silent for half of `wal_sender_timeout` is asked to
    /// reply, one silent for all of it is timed out; otherwise a keepalive every
    /// [`KEEPALIVE_EVERY`].
    fn tick(&mut self) -> Tick {
        self.confirm_due();
        let silent = self.last_heard.elapsed();
        let limit = self.timeout.unwrap_or(Duration::MAX);
        if silent >= limit {
            return Tick::TimedOut;
        }
        let ask = silent >= limit / 2 && !self.asked_reply;
        if !ask && self.last_keepalive.elapsed() < KEEPALIVE_EVERY {
            return Tick::Send(None);
        }
        self.asked_reply |= ask;
        self.last_keepalive = Instant::now();
        Tick::Send(Some(keepalive(self.decoded, ask)))
    }
}

/// The flush position a stream's client last reported; the slot is moved to it when the
/// stream ends, however it ends.
struct ConfirmAtEnd<'a> {
    sh: &'a Shared,
    slot: &'a str,
    flush: std::cell::Cell<Lsn>,
}

impl Drop for ConfirmAtEnd<'_> {
    fn drop(&mut self) {
        if self.flush.get() != Lsn::INVALID {
            confirm(self.sh, self.slot, self.flush.get());
        }
    }
}

/// Moves the slot to what the client reports flushed (never backwards, never past the WAL).
fn confirm(sh: &Shared, slot: &str, flush: Lsn) {
    let Some(d) = sh.db.replication_slot(slot) else { return };
    if flush <= d.confirmed_flush {
        return;
    }
    if let Err(e) = sh.db.replication_slot_advance(slot, flush) {
        sh.log.line("LOG", &format!("could not confirm {flush} for slot \"{slot}\": {e}"));
    }
}

fn copy_data(b: Bytes) -> PgWireBackendMessage {
    PgWireBackendMessage::CopyData(CopyData::new(b))
}

/// Now, in microseconds since 2000-01-01 (the protocol's `sendTime`).
fn now_pg_micros() -> i64 {
    let unix = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64);
    unix - PG_EPOCH_MICROS
}

/// Output rows as the CopyData messages that carry them, back to back, each an XLogData
/// message (`w`, the row's LSN, the end of the WAL sent so far, the send time, the row): the
/// connection writes the batch as it is ([`crate::conn::RawFrames`]). A message's send time is written
/// when the batch is handed to the connection ([`Batch::stamp`]), which sends it at once.
struct Batch {
    bytes: BytesMut,
    /// Where each message ends in `bytes`.
    ends: Vec<usize>,
    /// The end of the WAL sent once this batch is out: every row's position and every
    /// position a pass reported before it, and the stream's start.
    wal_end: Lsn,
    /// The last row's position.
    last_row: Lsn,
}

/// A CopyData message's header: `d` and its length.
const COPY_DATA_HEADER: usize = 5;
/// Where an XLogData message's send time sits: after `w`, its LSN and the WAL end.
const SEND_TIME_AT: usize = 17;
/// An XLogData message's header: `w`, LSN, WAL end, send time.
const XLOG_DATA_HEADER: usize = 25;

impl Batch {
    fn new(wal_end: Lsn) -> Batch {
        Batch {
            bytes: BytesMut::with_capacity(BATCH_BYTES),
            ends: Vec::with_capacity(BATCH_ROWS),
            wal_end,
            last_row: Lsn::INVALID,
        }
    }

    fn push(&mut self, row: &OutputRow) {
        self.wal_end = self.wal_end.max(row.lsn);
        self.last_row = self.last_row.max(row.lsn);
        // The two headers are laid out on the stack and go in with one copy (a hot path: once
        // per row, where a put per field costs a capacity check each).
        let len = XLOG_DATA_HEADER + row.data.len();
        let mut head = [0u8; COPY_DATA_HEADER + XLOG_DATA_HEADER];
        head[0] = b'd';
        head[1..5].copy_from_slice(&u32::try_from(4 + len).unwrap_or(u32::MAX).to_be_bytes());
        head[5] = b'w';
        head[6..14].copy_from_slice(&row.lsn.0.to_be_bytes());
        head[14..22].copy_from_slice(&self.wal_end.0.to_be_bytes());
        // The send time (bytes 22..30) is stamped when the batch goes.
        self.bytes.reserve(head.len() + row.data.len());
        self.bytes.extend_from_slice(&head);
        self.bytes.extend_from_slice(&row.data);
        self.ends.push(self.bytes.len());
    }

    /// A pass of the decoder ended at `pos`, reported to the connection.
    fn passed(&mut self, pos: Lsn) {
        self.wal_end = self.wal_end.max(pos);
    }

    fn stamp(&mut self, now_micros: i64) {
        let mut start = 0;
        for &end in &self.ends {
            let at = start + COPY_DATA_HEADER + SEND_TIME_AT;
            self.bytes[at..at + 8].copy_from_slice(&now_micros.to_be_bytes());
            start = end;
        }
    }

    /// The batch's CopyData messages, back to back.
    fn frames(&self) -> &[u8] {
        &self.bytes
    }
}

/// Primary keepalive: `k`, the end of the WAL sent, the send time, whether a reply is wanted.
fn keepalive(wal_end: Lsn, reply: bool) -> Bytes {
    let mut b = BytesMut::with_capacity(18);
    b.put_u8(b'k');
    b.put_u64(wal_end.0);
    b.put_i64(now_pg_micros());
    b.put_u8(u8::from(reply));
    b.freeze()
}

/// A standby status update's positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StandbyStatus {
    write: Lsn,
    flush: Lsn,
    replay: Lsn,
}

/// A standby status update (`r`, write, flush, apply, time, reply); `None` for any other
/// message (`h`, hot standby feedback, means nothing here) or a short one.
pub(crate) fn standby_status(d: &[u8]) -> Option<StandbyStatus> {
    if d.first() != Some(&b'r') || d.len() < 34 {
        return None;
    }
    let at = |i: usize| d[i..i + 8].try_into().ok().map(|b| Lsn(u64::from_be_bytes(b)));
    Some(StandbyStatus { write: at(1)?, flush: at(9)?, replay: at(17)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_have_the_protocol_layout() {
        // A batch that starts where a pass ended, at 0x1_0000_0020: a row before that
        // position (a transaction that began earlier) carries the pass's end as the WAL end.
        let mut b = Batch::new(Lsn(0x1_0000_0020));
        let row = |lsn: u64, data: &[u8]| OutputRow { lsn: Lsn(lsn), xid: settledb::Xid(7), data: data.to_vec() };
        b.push(&row(0x1_0000_0010, b"BEGIN 7"));
        b.push(&row(0x1_0000_0030, b""));
        b.passed(Lsn(0x1_0000_0028));
        b.push(&row(0x1_0000_0040, b"COMMIT 7"));
        b.stamp(0x0102_0304_0506_0708);
        assert_eq!((b.wal_end, b.last_row), (Lsn(0x1_0000_0040), Lsn(0x1_0000_0040)));
        // Whole CopyData messages back to back: `d`, the length (itself included), XLogData.
        let mut m = Vec::new();
        let mut rest = b.frames();
        while let Some((&tag, after)) = rest.split_first() {
            assert_eq!(tag, b'd');
            let len = u32::from_be_bytes(after[..4].try_into().unwrap()) as usize;
            m.push(&after[4..len]);
            rest = &after[len..];
        }
        assert_eq!(m.len(), 3);
        let field = |w: &[u8], at: usize| u64::from_be_bytes(w[at..at + 8].try_into().unwrap());
        for (w, (lsn, end, data)) in m.iter().zip([
            (0x1_0000_0010, 0x1_0000_0020, &b"BEGIN 7"[..]),
            (0x1_0000_0030, 0x1_0000_0030, &b""[..]),
            (0x1_0000_0040, 0x1_0000_0040, &b"COMMIT 7"[..]),
        ]) {
            assert_eq!(w[0], b'w');
            assert_eq!((field(w, 1), field(w, 9)), (lsn, end));
            assert_eq!(field(w, 17), 0x0102_0304_0506_0708, "the send time is the batch's");
            assert_eq!(&w[25..], data);
        }
        let k = keepalive(Lsn(5), true);
        assert_eq!((k[0], k.len(), k[17]), (b'k', 18, 1));
        let mut r = vec![b'r'];
        for v in [10u64, 9, 8, 0] {
            r.extend_from_slice(&v.to_be_bytes());
        }
        r.push(0);
        assert_eq!(standby_status(&r), Some(StandbyStatus { write: Lsn(10), flush: Lsn(9), replay: Lsn(8) }));
        assert_eq!(standby_status(&r[..20]), None);
        assert_eq!(standby_status(b"h"), None);
    }

    #[test]
    fn replication_parameter() {
        assert_eq!(mode(Some("database")), Some(Mode::Logical));
        assert_eq!(mode(Some("true")), Some(Mode::Physical));
        assert_eq!(mode(Some("off")), None);
        assert_eq!(mode(None), None);
    }
}

#[cfg(test)]
mod lag_tests {
    use super::*;

    #[test]
    fn lags_are_the_age_of_the_newest_position_a_report_covers() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut l = LagTracker::default();
        l.sent(Lsn(100), ms(0));
        l.sent(Lsn(200), ms(10));
        l.sent(Lsn(250), ms(10)); // within a millisecond of the last: not sampled
        l.sent(Lsn(300), ms(20));
        // Written to 200, flushed to 100, nothing applied: at 25 ms.
        let lags = l.reported([Lsn(200), Lsn(100), Lsn::INVALID], ms(25));
        assert_eq!(lags, [Some(15_000), Some(25_000), None]);
        // A report that covers no new sample keeps the last lag.
        let lags = l.reported([Lsn(200), Lsn(150), Lsn::INVALID], ms(40));
        assert_eq!(lags, [Some(15_000), Some(25_000), None]);
        let lags = l.reported([Lsn(300), Lsn(300), Lsn(300)], ms(50));
        assert_eq!(lags, [Some(30_000), Some(30_000), Some(30_000)]);
        assert!(l.samples.is_empty(), "every position passed them all");
        // Bounded: the oldest samples go.
        for i in 0..(LAG_SAMPLES as u64 + 10) {
            l.sent(Lsn(1_000 + i), ms(100 + i * 2));
        }
        assert_eq!(l.samples.len(), LAG_SAMPLES);
    }
}
