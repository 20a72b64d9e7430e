//! `settle torture-child`: the process the parent kills.
//!
//! It opens the data directory with real fsync, synchronous commit, an aggressive autovacuum
//! and small freeze ages ([`config`]), prints `ready`, and runs until it is killed:
//!
//! * clients running the workload's transactions, each logged to the ack log (`B` before the
//!   first change, `C` after `commit` returned, `A` after a rollback);
//! * a VACUUM thread (the largest table or a random one, sometimes `FREEZE`, half the time with
//!   two parallel workers), printing `vacuum begin`/`vacuum end` (`parallel vacuum …`);
//! * a checkpoint thread, printing `checkpoint begin`/`checkpoint end`;
//! * an extension thread inserting bursts of [`BURST_ROWS`] rows into the bulk table in one
//!   transaction (the relation grows by about a dozen pages), printing `extend begin`/`extend
//!   end`, and deleting the oldest burst once 16 are live, so VACUUM has pages to empty and
//!   truncate;
//! * a two-phase thread preparing transactions (savepoints inside, one rolled back to) and
//!   finishing those left prepared, its own or an earlier child's (`twophase`), printing `2pc
//!   begin`/`2pc end` around PREPARE and COMMIT/ROLLBACK PREPARED.
//!
//! One pgbench step in [`SAVEPOINT_EVERY`] is a savepoint transaction (nested savepoints,
//! some rolled back to, some released; see `PgbenchClient::savepoint_step`).
//!
//! Any error other than a serialization failure or deadlock ends the process with status 3 and
//! the error on stderr: the parent, which expected to kill a live child, reports it.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use rand::{Rng, SeedableRng};
use settledb::{Config, Database, Error, KeyBound, ScanDirection, Transaction, VacuumParams, Value};
use workload::pgbench;
use workload::rng::{NurandConstants, TpccRng};
use workload::tpcc::{Delivery, NewOrder, OrderStatus, Outcome, Payment, StockLevel, TpccConn, TpccTarget};

use super::acklog::{AckLog, Acks};
use super::schema::{Workload, ACCOUNTS, BRANCHES, BULK, BULK_INDEX, BURST_PAD, BURST_ROWS, HISTORY, TELLERS};

/// Bursts kept live in the bulk table; the oldest beyond this is deleted.
const LIVE_BURSTS: usize = 16;
/// One pgbench step in this many is a savepoint transaction.
const SAVEPOINT_EVERY: u32 = 4;

#[derive(clap::Args, Debug)]
pub struct ChildArgs {
    #[arg(long)]
    pub data: PathBuf,
    #[arg(long)]
    pub acklog: PathBuf,
    #[arg(long, value_enum)]
    pub workload: Workload,
    /// This child's number (the kill it precedes); part of every id it makes.
    #[arg(long)]
    pub generation: u64,
    #[arg(long)]
    pub seed: u64,
    #[arg(long, default_value_t = 4)]
    pub clients: u64,
    /// A safety net should the parent die: exit after this long.
    #[arg(long, default_value_t = 600)]
    pub max_seconds: u64,
    /// The parent's `--set`, applied over [`config`]'s defaults.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
}

/// The run's `--set` parameters (the parent's, handed to each child), applied last by
/// [`config`].
static EXTRA: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

/// Records this process's `--set` parameters (once), after checking that they parse.
pub fn set_extra(set: Vec<String>) -> Result<()> {
    crate::config_from(&set)?;
    let _ = EXTRA.set(set);
    Ok(())
}

/// What [`set_extra`] recorded, to hand to a child.
pub fn extra() -> &'static [String] {
    EXTRA.get().map_or(&[], Vec::as_slice)
}

/// The child's configuration: durable commits, maintenance as often as the engine allows.
pub fn config() -> Result<Config> {
    let mut c = Config::default();
    for (k, v) in [
        ("fsync", "on"),
        ("synchronous_commit", "on"),
        ("shared_buffers", "16MB"),
        ("max_wal_size", "16MB"),
        ("checkpoint_timeout", "30s"),
        ("autovacuum", "on"),
        ("autovacuum_naptime", "1s"),
        ("autovacuum_vacuum_threshold", "20"),
        ("autovacuum_vacuum_scale_factor", "0.01"),
        ("autovacuum_vacuum_insert_threshold", "100"),
        ("autovacuum_vacuum_insert_scale_factor", "0.01"),
        ("vacuum_freeze_min_age", "1000"),
        ("vacuum_freeze_table_age", "5000"),
        ("autovacuum_freeze_max_age", "100000"),
        ("log_autovacuum_min_duration", "-1"),
        // A logical slot is decoded beside the workload; a small limit makes it spill.
        ("wal_level", "logical"),
        ("logical_decoding_work_mem", "256kB"),
    ] {
        c.set(k, v)?;
    }
    c.set("max_prepared_transactions", &super::twophase::MAX_PREPARED.to_string())?;
    for kv in extra() {
        let (k, v) = kv.split_once('=').with_context(|| format!("--set {kv:?}: expected name=value"))?;
        c.set(k.trim(), v.trim())?;
    }
    Ok(c)
}

/// Prints a phase marker for the parent (stdout is line-buffered: one line, flushed).
fn mark(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{s}");
    let _ = o.flush();
}

/// Ends the process on an unexpected error: the parent sees an exit it did not cause.
fn fatal(what: &str, e: anyhow::Error) -> ! {
    eprintln!("settle torture-child: {what}: {e:#}");
    std::process::exit(3)
}

pub(super) fn retryable(e: &Error) -> bool {
    matches!(e, Error::SerializationFailure | Error::Deadlock { .. })
}

pub fn run(a: ChildArgs) -> Result<ExitCode> {
    set_extra(a.set.clone())?;
    let db = Database::open(&a.data, config()?).context("opening the data directory")?;
    let log = AckLog::open(&a.acklog)?;
    mark("ready");
    let deadline = Instant::now() + Duration::from_secs(a.max_seconds);
    let seed = a.seed ^ a.generation.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    // One target for all terminals: it owns the history id sequence.
    let tpcc = match a.workload {
        Workload::Tpcc => Some(workload::tpcc::embedded::Embedded::new(&db)?),
        Workload::Pgbench => None,
    };
    let (db, log, a, tpcc) = (&db, &log, &a, tpcc.as_ref());
    std::thread::scope(|s| {
        for client in 0..a.clients {
            s.spawn(move || {
                let r = (|| -> Result<()> {
                    let mut c = Client::new(db, tpcc, a.seed, a.generation, client, seed)?;
                    while Instant::now() < deadline {
                        c.step(log)?;
                    }
                    Ok(())
                })();
                r.unwrap_or_else(|e| fatal(&format!("client {client}"), e))
            });
        }
        s.spawn(move || vacuum_loop(db, seed, deadline).unwrap_or_else(|e| fatal("vacuum", e)));
        s.spawn(move || checkpoint_loop(db, seed, deadline).unwrap_or_else(|e| fatal("checkpoint", e)));
        s.spawn(move || extend_loop(db, log, a.generation, seed, deadline).unwrap_or_else(|e| fatal("extend", e)));
        s.spawn(move || twophase_loop(db, log, a.generation, seed, deadline).unwrap_or_else(|e| fatal("2pc", e)));
        s.spawn(move || slot_loop(db, log, seed, deadline).unwrap_or_else(|e| fatal("slot", e)));
    });
    Ok(ExitCode::SUCCESS)
}

/// One client of the workload: a pgbench client or a TPC-C terminal, one transaction a step.
pub enum Client<'a> {
    Pgbench(PgbenchClient<'a>),
    Tpcc(TpccTerminal<'a>),
}

impl<'a> Client<'a> {
    /// Client `client` of child `generation`; `tpcc` is the shared TPC-C target (None: pgbench).
    pub fn new(
        db: &'a Database,
        tpcc: Option<&'a workload::tpcc::embedded::Embedded<'a>>,
        load_seed: u64,
        generation: u64,
        client: u64,
        seed: u64,
    ) -> Result<Client<'a>> {
        Ok(match tpcc {
            None => Client::Pgbench(PgbenchClient::new(db, generation, client, seed)?),
            Some(target) => Client::Tpcc(TpccTerminal::new(target, load_seed, seed, client)?),
        })
    }

    pub fn step(&mut self, log: &dyn Acks) -> Result<()> {
        match self {
            Client::Pgbench(c) => c.step(log),
            Client::Tpcc(t) => t.step(log),
        }
    }
}

/// A pgbench client: each step one TPC-B-like transaction with a history id unique to it.
pub struct PgbenchClient<'a> {
    db: &'a Database,
    accounts: settledb::Index,
    tellers: settledb::Index,
    branches: settledb::Index,
    history: settledb::Table,
    rng: rand::rngs::StdRng,
    generation: u64,
    client: u64,
    seq: u64,
}

impl<'a> PgbenchClient<'a> {
    fn new(db: &'a Database, generation: u64, client: u64, seed: u64) -> Result<PgbenchClient<'a>> {
        let pk = |t: &str| db.index(&format!("{t}_pkey"));
        Ok(PgbenchClient {
            db,
            accounts: pk(ACCOUNTS)?,
            tellers: pk(TELLERS)?,
            branches: pk(BRANCHES)?,
            history: db.table(HISTORY)?,
            rng: rand::rngs::StdRng::seed_from_u64(seed ^ (client + 1).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)),
            generation,
            client,
            seq: 0,
        })
    }

    fn step(&mut self, log: &dyn Acks) -> Result<()> {
        if self.rng.gen_ratio(1, SAVEPOINT_EVERY) {
            return self.savepoint_step(log);
        }
        let db = self.db;
        let d = workload::pgbench::Draw::new(&mut self.rng, 1);
        let hid = self.next_hid();
        let key = hid.to_string();
        log.record("B", 'h', &key, &payload(&d))?;
        let body = || -> settledb::Result<Transaction<'_>> {
            let mut tx = db.begin()?;
            self.leg(&mut tx, &d, hid)?;
            Ok(tx)
        };
        match body() {
            // An error from commit itself leaves the transaction in doubt: the caller stops.
            Ok(tx) => {
                tx.commit().context("commit")?;
                log.record("C", 'h', &key, "")
            }
            Err(e) if retryable(&e) => log.record("A", 'h', &key, ""),
            Err(e) => Err(anyhow!(e).context("pgbench transaction")),
        }
    }

    fn next_hid(&mut self) -> i64 {
        self.seq += 1;
        (self.generation << 32 | self.client << 24 | self.seq) as i64
    }

    /// One pgbench transaction's worth of changes inside `tx`: the account, teller and branch
    /// updates and the history row `hid`.
    fn leg(&self, tx: &mut Transaction<'_>, d: &pgbench::Draw, hid: i64) -> settledb::Result<()> {
        let not_found = |what: String| Error::NotFound(what);
        tx.update_by_key(&self.accounts, &[Value::Int4(d.aid)], pgbench::add(d.delta, 2))?
            .ok_or_else(|| not_found(format!("account {}", d.aid)))?;
        tx.update_by_key(&self.tellers, &[Value::Int4(d.tid)], pgbench::add(d.delta, 2))?
            .ok_or_else(|| not_found(format!("teller {}", d.tid)))?;
        tx.update_by_key(&self.branches, &[Value::Int4(d.bid)], pgbench::add(d.delta, 1))?
            .ok_or_else(|| not_found(format!("branch {}", d.bid)))?;
        let now = workload::tpcc::inputs::now_timestamp();
        let row = [
            Value::Int8(hid),
            Value::Int4(d.tid),
            Value::Int4(d.bid),
            Value::Int4(d.aid),
            Value::Int4(d.delta),
            Value::Timestamp(now),
            Value::Null,
        ];
        tx.insert(&self.history, &row)?;
        Ok(())
    }

    /// A savepoint transaction: four legs (each a whole pgbench transaction's changes, logged
    /// as kind `s`), in the shape
    ///
    /// ```text
    ///   BEGIN; leg 0
    ///     SAVEPOINT a; leg 1
    ///       SAVEPOINT b; leg 2; ROLLBACK TO b | RELEASE b
    ///     ROLLBACK TO a | RELEASE a          (rolling back a undoes leg 2 even if b was released)
    ///     SAVEPOINT c; leg 3; ROLLBACK TO c | RELEASE c
    ///   COMMIT
    /// ```
    ///
    /// Each leg is begun (`B s`) before the first change; `A s` is written as soon as a `ROLLBACK
    /// TO` undoing it returned (it must be absent whatever happens next); `C s` for every leg
    /// still standing once `commit` returned. The balances check sees a rolled-back leg's
    /// updates, should any survive, as balances its history does not explain.
    fn savepoint_step(&mut self, log: &dyn Acks) -> Result<()> {
        let legs: Vec<(i64, pgbench::Draw)> =
            (0..4).map(|_| (self.next_hid(), pgbench::Draw::new(&mut self.rng, 1))).collect();
        let (roll_b, roll_a, roll_c) = (self.rng.gen_bool(0.5), self.rng.gen_bool(0.4), self.rng.gen_bool(0.5));
        for (hid, d) in &legs {
            log.record("B", 's', &hid.to_string(), &payload(d))?;
        }
        let mut undone = [false; 4];
        let mut tx = self.db.begin()?;
        match self.savepoint_body(&mut tx, &legs, [roll_a, roll_b, roll_c], &mut undone, log) {
            Ok(()) => {
                tx.commit().context("savepoint transaction commit")?;
                for (i, (hid, _)) in legs.iter().enumerate() {
                    if !undone[i] {
                        log.record("C", 's', &hid.to_string(), "")?;
                    }
                }
                Ok(())
            }
            Err(e) if e.downcast_ref::<Error>().is_some_and(retryable) => {
                drop(tx);
                for (i, (hid, _)) in legs.iter().enumerate() {
                    if !undone[i] {
                        log.record("A", 's', &hid.to_string(), "")?;
                    }
                }
                Ok(())
            }
            Err(e) => Err(e.context("savepoint transaction")),
        }
    }

    /// The changes of [`Self::savepoint_step`]; `roll` says which of savepoints a, b, c are
    /// rolled back to; `undone` marks the legs whose `A` line is written.
    fn savepoint_body(
        &self,
        tx: &mut Transaction<'_>,
        legs: &[(i64, pgbench::Draw)],
        roll: [bool; 3],
        undone: &mut [bool; 4],
        log: &dyn Acks,
    ) -> Result<()> {
        let mut end = |tx: &mut Transaction<'_>, name: &str, rollback: bool, legs_undone: &[usize]| -> Result<()> {
            if !rollback {
                return Ok(tx.release(name)?);
            }
            tx.rollback_to(name)?;
            for &i in legs_undone {
                if !std::mem::replace(&mut undone[i], true) {
                    log.record("A", 's', &legs[i].0.to_string(), "")?;
                }
            }
            Ok(())
        };
        // Which leg failed, and the shape, in the child's error (a diagnosis after a kill run).
        let leg = |this: &Self, tx: &mut Transaction<'_>, i: usize| {
            this.leg(tx, &legs[i].1, legs[i].0)
                .with_context(|| format!("leg {i} of {legs:?}, rolled back to a/b/c {roll:?}"))
        };
        leg(self, tx, 0)?;
        tx.savepoint("a")?;
        leg(self, tx, 1)?;
        tx.savepoint("b")?;
        leg(self, tx, 2)?;
        end(tx, "b", roll[1], &[2])?;
        end(tx, "a", roll[0], &[1, 2])?;
        tx.savepoint("c")?;
        leg(self, tx, 3)?;
        end(tx, "c", roll[2], &[3])
    }
}

/// What a leg's `B` line says (and its history row must say): `aid tid bid delta`.
fn payload(d: &pgbench::Draw) -> String {
    format!("{} {} {} {}", d.aid, d.tid, d.bid, d.delta)
}

/// One TPC-C terminal of warehouse 1, in the 45/43/4/4/4 mix, Delivery run inline. New-Orders
/// are logged (key `w.d.c.entry_d`, payload the line count); the others are checked by the
/// consistency conditions.
pub struct TpccTerminal<'a> {
    conn: workload::tpcc::embedded::Conn<'a>,
    r: TpccRng,
}

impl<'a> TpccTerminal<'a> {
    fn new(
        target: &'a workload::tpcc::embedded::Embedded<'a>,
        load_seed: u64,
        seed: u64,
        term: u64,
    ) -> Result<TpccTerminal<'a>> {
        Ok(TpccTerminal { conn: target.connect()?, r: TpccRng::new(seed, term, NurandConstants::from_seed(load_seed)) })
    }

    fn step(&mut self, log: &dyn Acks) -> Result<()> {
        let (conn, r) = (&mut self.conn, &mut self.r);
        let until_done = |f: &mut dyn FnMut() -> Result<Outcome>| -> Result<Outcome> {
            loop {
                match f()? {
                    Outcome::Retry => continue,
                    o => return Ok(o),
                }
            }
        };
        let x = r.int32(1, 100);
        if x <= 45 {
            let t = NewOrder::draw(r, 1, 1);
            let key = format!("{}.{}.{}.{}", t.w_id, t.d_id, t.c_id, t.entry_d);
            log.record("B", 'o', &key, &t.lines.len().to_string())?;
            match until_done(&mut || conn.new_order(&t))? {
                Outcome::Committed => log.record("C", 'o', &key, "")?,
                _ => log.record("A", 'o', &key, "")?,
            }
        } else if x <= 88 {
            let t = Payment::draw(r, 1, 1);
            until_done(&mut || conn.payment(&t))?;
        } else if x <= 92 {
            let t = OrderStatus::draw(r, 1);
            until_done(&mut || conn.order_status(&t))?;
        } else if x <= 96 {
            let t = Delivery::draw(r, 1);
            until_done(&mut || conn.delivery(&t))?;
        } else {
            let t = StockLevel::draw(r, 1);
            until_done(&mut || conn.stock_level(&t))?;
        }
        Ok(())
    }
}

fn pause(rng: &mut impl Rng, lo_ms: u64, hi_ms: u64) {
    std::thread::sleep(Duration::from_millis(rng.gen_range(lo_ms..=hi_ms)));
}

/// The VACUUM of one step: half the time the largest table, whose VACUUM lasts long enough to
/// be killed in; sometimes FREEZE; sometimes with two parallel workers (the heap phases and
/// the index bulk deletes split between them), marked `parallel vacuum begin`/`end`.
pub fn vacuum_step(db: &Database, rng: &mut impl Rng, mark: &mut dyn FnMut(&str)) -> Result<()> {
    let mut tables = db.tables();
    tables.sort_by_key(|t| std::cmp::Reverse(db.table_pages(t).unwrap_or(0)));
    let pick = if rng.gen_bool(0.5) { 0 } else { rng.gen_range(0..tables.len().max(1)) };
    let Some(t) = tables.get(pick) else { return Ok(()) };
    let parallel = rng.gen_bool(0.5).then_some(2);
    let params = VacuumParams { freeze: rng.gen_bool(0.3), parallel, ..VacuumParams::default() };
    let phase = if parallel.is_some() { "parallel vacuum" } else { "vacuum" };
    mark(&format!("{phase} begin"));
    db.vacuum(Some(t.name()), &params).with_context(|| format!("VACUUM {}", t.name()))?;
    mark(&format!("{phase} end"));
    Ok(())
}

fn vacuum_loop(db: &Database, seed: u64, deadline: Instant) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x7661_6375_756d);
    while Instant::now() < deadline {
        pause(&mut rng, 50, 400);
        vacuum_step(db, &mut rng, &mut |m| mark(m))?;
    }
    Ok(())
}

fn checkpoint_loop(db: &Database, seed: u64, deadline: Instant) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x0063_686b_7074);
    while Instant::now() < deadline {
        pause(&mut rng, 100, 600);
        mark("checkpoint begin");
        db.checkpoint().context("CHECKPOINT")?;
        mark("checkpoint end");
    }
    Ok(())
}

/// The extension work: each step inserts a burst of [`BURST_ROWS`] rows in one transaction
/// (the relation grows by about a dozen pages), then deletes the oldest burst once more than
/// [`LIVE_BURSTS`] are live, so VACUUM has pages to empty and truncate.
pub struct Extender<'a> {
    db: &'a Database,
    bulk: settledb::Table,
    index: settledb::Index,
    live: Vec<i64>,
    pad: String,
    generation: u64,
    seq: u64,
}

impl<'a> Extender<'a> {
    /// The live bursts are read once, oldest first (the ones resolved present included).
    pub fn new(db: &'a Database, generation: u64) -> Result<Extender<'a>> {
        let bulk = db.table(BULK)?;
        let mut tx = db.begin()?;
        let mut ids = std::collections::BTreeSet::new();
        for row in tx.scan(&bulk)? {
            if let Value::Int8(b) = row?.1[0] {
                ids.insert(b);
            }
        }
        tx.commit()?;
        Ok(Extender {
            db,
            bulk,
            index: db.index(BULK_INDEX)?,
            live: ids.into_iter().collect(),
            pad: "x".repeat(BURST_PAD),
            generation,
            seq: 0,
        })
    }

    pub fn step(&mut self, log: &dyn Acks, mark: &mut dyn FnMut(&str)) -> Result<()> {
        let db = self.db;
        self.seq += 1;
        let burst = (self.generation << 32 | self.seq) as i64;
        let key = burst.to_string();
        log.record("B", 'x', &key, &BURST_ROWS.to_string())?;
        let rows: Vec<Vec<Value>> =
            (0..BURST_ROWS).map(|n| vec![Value::Int8(burst), Value::Int4(n), Value::Text(self.pad.clone())]).collect();
        mark("extend begin");
        let mut tx = db.begin()?;
        tx.insert_many(&self.bulk, &rows).context("bulk insert")?;
        tx.commit().context("bulk insert commit")?;
        log.record("C", 'x', &key, "")?;
        mark("extend end");
        self.live.push(burst);
        if self.live.len() > LIVE_BURSTS {
            let oldest = self.live.remove(0);
            let key = oldest.to_string();
            log.record("B", 'y', &key, "")?;
            let mut tx = db.begin()?;
            let k = vec![Value::Int8(oldest)];
            let rows = tx.range(
                &self.index,
                KeyBound::Included(k.clone()),
                KeyBound::Included(k),
                ScanDirection::Forward,
                None,
            )?;
            for (tid, _) in rows {
                tx.delete(&self.bulk, tid)?;
            }
            tx.commit().context("burst delete commit")?;
            log.record("C", 'y', &key, "")?;
        }
        Ok(())
    }
}

fn twophase_loop(db: &Database, log: &AckLog, generation: u64, seed: u64, deadline: Instant) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x0074_7770_6863);
    let mut tp = super::twophase::TwoPhase::new(db, generation, seed)?;
    while Instant::now() < deadline {
        pause(&mut rng, 20, 150);
        tp.step(log, &mut |m| mark(m))?;
    }
    Ok(())
}

/// Decodes the replication slot's changes now and then (`pg_logical_slot_get_changes`, which
/// confirms what it read), then logs the slot's confirmed position (`L l slot LSN`): after a
/// kill, the slot must be at least there (`verify::slot`).
fn slot_loop(db: &Database, log: &AckLog, seed: u64, deadline: Instant) -> Result<()> {
    use settledb::db::DecodeLimits;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x736c_6f74);
    let opts = [("skip-empty-xacts".to_string(), Some("1".to_string()))];
    super::schema::ensure_slot(db)?;
    while Instant::now() < deadline {
        pause(&mut rng, 50, 400);
        let limits = DecodeLimits { upto_nchanges: Some(5_000), ..DecodeLimits::default() };
        db.logical_slot_get_changes(super::schema::SLOT, limits, &opts)?;
        let confirmed = db.replication_slot(super::schema::SLOT).context("the slot is gone")?.confirmed_flush;
        log.record("L", 'l', "slot", &confirmed.0.to_string())?;
    }
    Ok(())
}

fn extend_loop(db: &Database, log: &AckLog, generation: u64, seed: u64, deadline: Instant) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x6578_7465_6e64);
    let mut ext = Extender::new(db, generation)?;
    while Instant::now() < deadline {
        pause(&mut rng, 100, 400);
        ext.step(log, &mut |m| mark(m))?;
    }
    Ok(())
}
