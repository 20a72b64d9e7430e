//! pgbench-like workloads on the embedded engine and on PostgreSQL.
//!
//! # Tables and initialization
//!
//! pgbench's four tables at scale `S`: `pgbench_branches` (S rows), `pgbench_tellers` (10·S),
//! `pgbench_accounts` (100,000·S, an 84-character blank filler) and `pgbench_history` (empty,
//! no key). [`PgbenchTarget::init`] follows `pgbench -i`'s default steps `dtgvp`: drop the
//! tables, create them, generate the rows ([`generate`], the same rows for both targets),
//! VACUUM them, then add the primary keys.
//!
//! # Scripts
//!
//! [`Script::TpcbLike`] is pgbench's default script, one transaction:
//!
//! ```text
//! UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
//! SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
//! UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
//! UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
//! INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, now);
//! ```
//!
//! with `aid`, `tid`, `bid` uniform over their tables and `delta` uniform in [-5000, 5000].
//! [`Script::SelectOnly`] (`-S`) is the SELECT alone; [`Script::AppendOnly`] is the INSERT
//! alone, a table that is only ever appended to (the case where freezing on the first VACUUM
//! pays off).
//!
//! # Running
//!
//! [`run`] starts one thread per client, each with its own connection and RNG (seeded from the
//! run's seed and the client's number, so a seed fixes the requests). Clients connect first;
//! the clock starts when all have connected (pgbench's "without initial connection time").
//! A serialization failure or deadlock is rolled back and retried with the same inputs,
//! counted in [`Report::retries`].
//!
//! Invariant after TPC-B-like runs only (append-only runs add history rows with no balance
//! change): the balances of accounts, tellers and branches each sum to the sum of history's
//! deltas ([`PgbenchTarget::check_balances`]).

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use settledb::{Column, Database, Error, Index, Schema, Table, TableOptions, Type, VacuumParams, Value};

use crate::pg;
use crate::tpcc::run::with_retries;
use crate::tpcc::Outcome;

/// Rows per branch of the other tables.
pub const TELLERS_PER_BRANCH: i32 = 10;
pub const ACCOUNTS_PER_BRANCH: i32 = 100_000;

/// The built-in scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Script {
    TpcbLike,
    SelectOnly,
    AppendOnly,
}

impl FromStr for Script {
    type Err = String;

    fn from_str(s: &str) -> Result<Script, String> {
        match s {
            "tpcb-like" => Ok(Script::TpcbLike),
            "select-only" => Ok(Script::SelectOnly),
            "append-only" => Ok(Script::AppendOnly),
            _ => Err(format!("unknown script {s:?} (tpcb-like, select-only or append-only)")),
        }
    }
}

impl Script {
    /// The name `-b` takes.
    pub fn name(self) -> &'static str {
        match self {
            Script::TpcbLike => "tpcb-like",
            Script::SelectOnly => "select-only",
            Script::AppendOnly => "append-only",
        }
    }

    /// How pgbench's report names the script's transaction type.
    pub fn label(self) -> &'static str {
        match self {
            Script::TpcbLike => "<builtin: TPC-B (sort of)>",
            Script::SelectOnly => "<builtin: select only>",
            Script::AppendOnly => "<builtin: append only>",
        }
    }
}

/// The inputs of one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Draw {
    pub aid: i32,
    pub tid: i32,
    pub bid: i32,
    pub delta: i32,
}

impl Draw {
    pub fn new(rng: &mut impl Rng, scale: u32) -> Draw {
        let s = scale as i32;
        // The same order as pgbench's script: aid, bid, tid, delta.
        let aid = rng.gen_range(1..=ACCOUNTS_PER_BRANCH * s);
        let bid = rng.gen_range(1..=s);
        let tid = rng.gen_range(1..=TELLERS_PER_BRANCH * s);
        let delta = rng.gen_range(-5000..=5000);
        Draw { aid, tid, bid, delta }
    }
}

/// One client's connection.
pub trait PgbenchConn: Send {
    /// Runs one transaction of `script`; [`Outcome::Retry`] after a serialization failure or
    /// deadlock (the transaction was rolled back).
    fn transaction(&mut self, script: Script, d: &Draw) -> anyhow::Result<Outcome>;
}

/// A place pgbench's tables live.
pub trait PgbenchTarget: Sync {
    type Conn<'a>: PgbenchConn
    where
        Self: 'a;
    /// `pgbench -i -s scale`: drop, create, generate, vacuum, primary keys.
    fn init(&self, scale: u32) -> anyhow::Result<()>;
    /// The scale the tables were initialized with (the rows of pgbench_branches).
    fn scale(&self) -> anyhow::Result<u32>;
    fn connect(&self) -> anyhow::Result<Self::Conn<'_>>;
    /// Checks the balance invariant (see the module doc).
    fn check_balances(&self) -> anyhow::Result<()>;
    /// What the report calls the way statements are sent.
    fn query_mode(&self) -> &'static str;
}

/// One table's definition: its columns (name, engine type, nullable, SQL type).
struct TableSpec {
    name: &'static str,
    columns: &'static [(&'static str, Type, bool, &'static str)],
    key: Option<&'static str>,
}

const BRANCHES: TableSpec = TableSpec {
    name: "pgbench_branches",
    columns: &[
        ("bid", Type::Int4, false, "int"),
        ("bbalance", Type::Int4, true, "int"),
        ("filler", Type::Text, true, "char(88)"),
    ],
    key: Some("bid"),
};
const TELLERS: TableSpec = TableSpec {
    name: "pgbench_tellers",
    columns: &[
        ("tid", Type::Int4, false, "int"),
        ("bid", Type::Int4, true, "int"),
        ("tbalance", Type::Int4, true, "int"),
        ("filler", Type::Text, true, "char(84)"),
    ],
    key: Some("tid"),
};
const ACCOUNTS: TableSpec = TableSpec {
    name: "pgbench_accounts",
    columns: &[
        ("aid", Type::Int4, false, "int"),
        ("bid", Type::Int4, true, "int"),
        ("abalance", Type::Int4, true, "int"),
        ("filler", Type::Text, true, "char(84)"),
    ],
    key: Some("aid"),
};
const HISTORY: TableSpec = TableSpec {
    name: "pgbench_history",
    columns: &[
        ("tid", Type::Int4, true, "int"),
        ("bid", Type::Int4, true, "int"),
        ("aid", Type::Int4, true, "int"),
        ("delta", Type::Int4, true, "int"),
        ("mtime", Type::Timestamp, true, "timestamp"),
        ("filler", Type::Text, true, "char(22)"),
    ],
    key: None,
};
/// In pgbench's creation order.
const TABLES: [&TableSpec; 4] = [&HISTORY, &TELLERS, &ACCOUNTS, &BRANCHES];

/// The balance column of each balanced table, and history's delta.
const BALANCES: [(&str, &str); 4] = [
    ("pgbench_accounts", "abalance"),
    ("pgbench_tellers", "tbalance"),
    ("pgbench_branches", "bbalance"),
    ("pgbench_history", "delta"),
];

/// Rows handed to the sink at a time.
const CHUNK: i32 = 10_000;

/// The initial rows at `scale`, table by table (branches, tellers, accounts), in chunks.
pub fn generate(
    scale: u32,
    sink: &mut dyn FnMut(&'static str, Vec<Vec<Value>>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let s = scale as i32;
    sink(BRANCHES.name, (1..=s).map(|b| vec![Value::Int4(b), Value::Int4(0), Value::Null]).collect())?;
    let tellers = (1..=TELLERS_PER_BRANCH * s)
        .map(|t| vec![Value::Int4(t), Value::Int4((t - 1) / TELLERS_PER_BRANCH + 1), Value::Int4(0), Value::Null]);
    sink(TELLERS.name, tellers.collect())?;
    let filler = " ".repeat(84);
    let total = ACCOUNTS_PER_BRANCH * s;
    let mut aid = 1;
    while aid <= total {
        let end = (aid + CHUNK).min(total + 1);
        let rows = (aid..end).map(|a| {
            let bid = (a - 1) / ACCOUNTS_PER_BRANCH + 1;
            vec![Value::Int4(a), Value::Int4(bid), Value::Int4(0), Value::Text(filler.clone())]
        });
        sink(ACCOUNTS.name, rows.collect())?;
        aid = end;
    }
    Ok(())
}

/// The current time as the engine's timestamp.
fn now() -> i64 {
    crate::tpcc::inputs::now_timestamp()
}

// ---------------------------------------------------------------------------------------------
// The embedded engine.

/// The embedded engine as a pgbench target.
pub struct Embedded<'db> {
    db: &'db Database,
}

impl<'db> Embedded<'db> {
    pub fn new(db: &'db Database) -> Embedded<'db> {
        Embedded { db }
    }
}

/// One client's handles on the keys and history.
pub struct EmbeddedConn<'db> {
    db: &'db Database,
    accounts_pkey: Index,
    tellers_pkey: Index,
    branches_pkey: Index,
    history: Table,
}

/// An update that adds `delta` to the int4 balance column `col` (pgbench's `abalance +
/// :delta`); also used by `settle torture`'s pgbench clients.
pub fn add(delta: i32, col: usize) -> impl FnMut(&[Value]) -> settledb::Result<Vec<Value>> {
    move |row: &[Value]| {
        let mut r = row.to_vec();
        match r.get(col) {
            Some(Value::Int4(b)) => r[col] = Value::Int4(b.wrapping_add(delta)),
            other => return Err(Error::InvalidInput(format!("balance column {col}: unexpected {other:?}"))),
        }
        Ok(r)
    }
}

impl EmbeddedConn<'_> {
    fn try_transaction(&mut self, script: Script, d: &Draw) -> settledb::Result<()> {
        let mut tx = self.db.begin()?;
        let history = |d: &Draw| {
            [
                Value::Int4(d.tid),
                Value::Int4(d.bid),
                Value::Int4(d.aid),
                Value::Int4(d.delta),
                Value::Timestamp(now()),
                Value::Null,
            ]
        };
        match script {
            Script::TpcbLike => {
                let aid = [Value::Int4(d.aid)];
                tx.update_by_key(&self.accounts_pkey, &aid, add(d.delta, 2))?
                    .ok_or_else(|| Error::NotFound(format!("account {}", d.aid)))?;
                std::hint::black_box(tx.get(&self.accounts_pkey, &aid)?);
                tx.update_by_key(&self.tellers_pkey, &[Value::Int4(d.tid)], add(d.delta, 2))?
                    .ok_or_else(|| Error::NotFound(format!("teller {}", d.tid)))?;
                tx.update_by_key(&self.branches_pkey, &[Value::Int4(d.bid)], add(d.delta, 1))?
                    .ok_or_else(|| Error::NotFound(format!("branch {}", d.bid)))?;
                tx.insert(&self.history, &history(d))?;
            }
            Script::SelectOnly => {
                tx.get(&self.accounts_pkey, &[Value::Int4(d.aid)])?
                    .ok_or_else(|| Error::NotFound(format!("account {}", d.aid)))?;
            }
            Script::AppendOnly => {
                tx.insert(&self.history, &history(d))?;
            }
        }
        tx.commit()
    }
}

impl PgbenchConn for EmbeddedConn<'_> {
    fn transaction(&mut self, script: Script, d: &Draw) -> anyhow::Result<Outcome> {
        // A failed transaction is rolled back when dropped.
        match self.try_transaction(script, d) {
            Ok(()) => Ok(Outcome::Committed),
            Err(Error::SerializationFailure | Error::Deadlock { .. }) => Ok(Outcome::Retry),
            Err(e) => Err(anyhow::Error::new(e).context(format!("{} transaction", script.name()))),
        }
    }
}

impl<'db> PgbenchTarget for Embedded<'db> {
    type Conn<'a>
        = EmbeddedConn<'a>
    where
        Self: 'a;

    fn init(&self, scale: u32) -> anyhow::Result<()> {
        anyhow::ensure!(scale >= 1, "the scale must be at least 1");
        let db = self.db;
        for spec in TABLES {
            if db.table(spec.name).is_ok() {
                db.drop_table(spec.name).with_context(|| format!("dropping {}", spec.name))?;
            }
        }
        for spec in TABLES {
            let columns = spec.columns.iter().map(|&(n, ty, nullable, _)| Column { name: n.into(), ty, nullable });
            db.create_table(spec.name, Schema { columns: columns.collect() }, TableOptions::default())
                .with_context(|| format!("creating {}", spec.name))?;
        }
        let mut sink = |table: &'static str, rows: Vec<Vec<Value>>| -> anyhow::Result<()> {
            let t = db.table(table)?;
            let mut tx = db.begin()?;
            tx.insert_many(&t, &rows).with_context(|| format!("loading {table}"))?;
            tx.commit()?;
            Ok(())
        };
        generate(scale, &mut sink)?;
        for spec in TABLES {
            db.vacuum(Some(spec.name), &VacuumParams::default()).with_context(|| format!("vacuuming {}", spec.name))?;
        }
        for spec in TABLES {
            if let Some(key) = spec.key {
                let name = format!("{}_pkey", spec.name);
                db.create_index(&name, spec.name, &[key], true).with_context(|| format!("creating {name}"))?;
            }
        }
        db.checkpoint()?;
        Ok(())
    }

    fn scale(&self) -> anyhow::Result<u32> {
        let t = self.db.table(BRANCHES.name).context("no pgbench tables (initialize with -i)")?;
        let mut tx = self.db.begin()?;
        let mut n = 0u32;
        for row in tx.scan(&t)? {
            row?;
            n += 1;
        }
        tx.commit()?;
        Ok(n)
    }

    fn connect(&self) -> anyhow::Result<EmbeddedConn<'_>> {
        let db = self.db;
        let pk = |t: &str| db.index(&format!("{t}_pkey")).with_context(|| format!("{t} has no primary key"));
        Ok(EmbeddedConn {
            db,
            accounts_pkey: pk(ACCOUNTS.name)?,
            tellers_pkey: pk(TELLERS.name)?,
            branches_pkey: pk(BRANCHES.name)?,
            history: db.table(HISTORY.name)?,
        })
    }

    fn check_balances(&self) -> anyhow::Result<()> {
        let mut sums = Vec::new();
        let mut tx = self.db.begin_with(settledb::IsolationLevel::RepeatableRead)?;
        for (table, col) in BALANCES {
            let spec = TABLES.iter().find(|s| s.name == table).ok_or_else(|| anyhow!("no table {table}"))?;
            let i = spec.columns.iter().position(|c| c.0 == col).ok_or_else(|| anyhow!("no column {col}"))?;
            let mut total = 0i64;
            for row in tx.scan(&self.db.table(table)?)? {
                if let Value::Int4(v) = row?.1[i] {
                    total += i64::from(v);
                }
            }
            sums.push(total);
        }
        tx.commit()?;
        balances_agree(&sums)
    }

    fn query_mode(&self) -> &'static str {
        "embedded"
    }
}

/// Compares the sums of [`BALANCES`] (history's last).
fn balances_agree(sums: &[i64]) -> anyhow::Result<()> {
    let history = sums[BALANCES.len() - 1];
    for ((table, _), &s) in BALANCES.iter().zip(sums) {
        anyhow::ensure!(s == history, "balance check failed: sum over {table} is {s}, history deltas sum to {history}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL.

/// A PostgreSQL server as a pgbench target.
pub struct PgTarget {
    url: String,
}

impl PgTarget {
    pub fn new(url: &str) -> PgTarget {
        PgTarget { url: url.to_string() }
    }
}

/// One client's connection, with the script's statements prepared.
pub struct PgConn {
    client: postgres::Client,
    update_account: postgres::Statement,
    select_account: postgres::Statement,
    update_teller: postgres::Statement,
    update_branch: postgres::Statement,
    insert_history: postgres::Statement,
}

impl PgConn {
    fn try_transaction(&mut self, script: Script, d: &Draw) -> anyhow::Result<()> {
        match script {
            Script::TpcbLike => {
                let mut tx = self.client.transaction()?;
                tx.execute(&self.update_account, &[&d.delta, &d.aid])?;
                std::hint::black_box(tx.query_opt(&self.select_account, &[&d.aid])?);
                tx.execute(&self.update_teller, &[&d.delta, &d.tid])?;
                tx.execute(&self.update_branch, &[&d.delta, &d.bid])?;
                tx.execute(&self.insert_history, &[&d.tid, &d.bid, &d.aid, &d.delta])?;
                tx.commit()?;
            }
            Script::SelectOnly => {
                self.client.query_one(&self.select_account, &[&d.aid])?;
            }
            Script::AppendOnly => {
                self.client.execute(&self.insert_history, &[&d.tid, &d.bid, &d.aid, &d.delta])?;
            }
        }
        Ok(())
    }
}

impl PgbenchConn for PgConn {
    fn transaction(&mut self, script: Script, d: &Draw) -> anyhow::Result<Outcome> {
        match self.try_transaction(script, d) {
            Ok(()) => Ok(Outcome::Committed),
            Err(e) if pg::is_retryable(&e) => Ok(Outcome::Retry),
            Err(e) => Err(e.context(format!("{} transaction", script.name()))),
        }
    }
}

impl PgbenchTarget for PgTarget {
    type Conn<'a>
        = PgConn
    where
        Self: 'a;

    fn init(&self, scale: u32) -> anyhow::Result<()> {
        anyhow::ensure!(scale >= 1, "the scale must be at least 1");
        let mut c = pg::connect(&self.url)?;
        let names: Vec<&str> = TABLES.iter().map(|s| s.name).collect();
        let mut ddl = format!("DROP TABLE IF EXISTS {};\n", names.join(", "));
        for spec in TABLES {
            let cols: Vec<String> = spec
                .columns
                .iter()
                .map(|&(n, _, nullable, sql)| format!("{n} {sql}{}", if nullable { "" } else { " NOT NULL" }))
                .collect();
            let ff = if spec.key.is_some() { " WITH (fillfactor = 100)" } else { "" };
            ddl.push_str(&format!("CREATE TABLE {} ({}){ff};\n", spec.name, cols.join(", ")));
        }
        c.batch_execute(&ddl).context("creating the pgbench tables")?;
        let mut sink = |table: &'static str, rows: Vec<Vec<Value>>| -> anyhow::Result<()> {
            let spec = TABLES.iter().find(|s| s.name == table).ok_or_else(|| anyhow!("no table {table}"))?;
            let cols: Vec<&str> = spec.columns.iter().map(|c| c.0).collect();
            pg::copy_rows(&mut c, table, &cols, &vec![0; cols.len()], &rows)?;
            Ok(())
        };
        generate(scale, &mut sink)?;
        for spec in TABLES {
            c.batch_execute(&format!("VACUUM (ANALYZE) {}", spec.name))
                .with_context(|| format!("vacuuming {}", spec.name))?;
        }
        for spec in TABLES {
            if let Some(key) = spec.key {
                c.batch_execute(&format!("ALTER TABLE {0} ADD PRIMARY KEY ({key})", spec.name))
                    .with_context(|| format!("primary key of {}", spec.name))?;
            }
        }
        Ok(())
    }

    fn scale(&self) -> anyhow::Result<u32> {
        let mut c = pg::connect(&self.url)?;
        let n: i64 = c
            .query_one("SELECT count(*) FROM pgbench_branches", &[])
            .context("no pgbench tables (initialize with -i)")?
            .get(0);
        Ok(n as u32)
    }

    fn connect(&self) -> anyhow::Result<PgConn> {
        let mut client = pg::connect(&self.url)?;
        let mut p = |sql: &str| client.prepare(sql).with_context(|| format!("preparing {sql}"));
        let update_account = p("UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2")?;
        let select_account = p("SELECT abalance FROM pgbench_accounts WHERE aid = $1")?;
        let update_teller = p("UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2")?;
        let update_branch = p("UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2")?;
        let insert_history = p("INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) \
             VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)")?;
        Ok(PgConn { client, update_account, select_account, update_teller, update_branch, insert_history })
    }

    fn check_balances(&self) -> anyhow::Result<()> {
        let mut c = pg::connect(&self.url)?;
        let mut tx = c.build_transaction().isolation_level(postgres::IsolationLevel::RepeatableRead).start()?;
        let mut sums = Vec::new();
        for (table, col) in BALANCES {
            let s: i64 = tx.query_one(&format!("SELECT coalesce(sum({col}), 0)::int8 FROM {table}"), &[])?.get(0);
            sums.push(s);
        }
        tx.commit()?;
        balances_agree(&sums)
    }

    fn query_mode(&self) -> &'static str {
        "prepared"
    }
}

// ---------------------------------------------------------------------------------------------
// The run.

/// What to run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub clients: usize,
    /// Transactions per client (`-t`)…
    pub transactions_per_client: Option<u64>,
    /// … or a duration (`-T`); the count wins when both are given.
    pub duration: Option<Duration>,
    pub script: Script,
    pub seed: u64,
}

/// The figures pgbench reports.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub script: &'static str,
    pub scale: u32,
    pub query_mode: &'static str,
    pub clients: usize,
    pub transactions_per_client: Option<u64>,
    pub duration_s: Option<f64>,
    pub transactions: u64,
    pub retries: u64,
    /// From the moment every client had connected to the last one's end.
    pub seconds: f64,
    pub latency_avg_ms: f64,
    /// The average time a client took to connect.
    pub initial_connection_ms: f64,
    pub tps: f64,
}

/// One client's tally.
struct Tally {
    began: Instant,
    ended: Instant,
    transactions: u64,
    retries: u64,
    latency: Duration,
    connect: Duration,
}

fn client<T: PgbenchTarget>(
    target: &T,
    cfg: &RunConfig,
    scale: u32,
    n: usize,
    ready: &Barrier,
    stop: &AtomicBool,
) -> anyhow::Result<Tally> {
    let t0 = Instant::now();
    let conn = target.connect();
    let connect = t0.elapsed();
    // Every client passes the barrier, connected or not, so no one waits forever.
    ready.wait();
    let mut conn = conn.with_context(|| format!("client {n}: connecting"))?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed ^ (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let began = Instant::now();
    let deadline = cfg.duration.map(|d| began + d);
    let mut tally = Tally { began, ended: began, transactions: 0, retries: 0, latency: Duration::ZERO, connect };
    loop {
        let done = match cfg.transactions_per_client {
            Some(t) => tally.transactions >= t,
            None => deadline.is_some_and(|d| Instant::now() >= d),
        };
        if done || stop.load(Ordering::Relaxed) {
            break;
        }
        let d = Draw::new(&mut rng, scale);
        let start = Instant::now();
        let (_, retries) = with_retries(|| conn.transaction(cfg.script, &d)).with_context(|| format!("client {n}"))?;
        tally.latency += start.elapsed();
        tally.retries += retries;
        tally.transactions += 1;
    }
    tally.ended = Instant::now();
    Ok(tally)
}

/// Runs `cfg` on `target`, whose tables [`PgbenchTarget::init`] created.
pub fn run<T: PgbenchTarget>(target: &T, cfg: &RunConfig) -> anyhow::Result<Report> {
    anyhow::ensure!(cfg.clients >= 1, "need at least one client");
    anyhow::ensure!(
        cfg.transactions_per_client.is_some() || cfg.duration.is_some(),
        "give transactions per client (-t) or a duration (-T)"
    );
    let scale = target.scale()?;
    anyhow::ensure!(scale >= 1, "pgbench_branches is empty (initialize with -i)");
    let ready = Barrier::new(cfg.clients);
    let stop = AtomicBool::new(false);
    let tallies: Vec<anyhow::Result<Tally>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.clients)
            .map(|n| {
                let (ready, stop) = (&ready, &stop);
                s.spawn(move || {
                    let r = client(target, cfg, scale, n, ready, stop);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a client thread panicked")))).collect()
    });
    let tallies: Vec<Tally> = tallies.into_iter().collect::<anyhow::Result<_>>()?;
    let began = tallies.iter().map(|t| t.began).min().ok_or_else(|| anyhow!("no clients ran"))?;
    let ended = tallies.iter().map(|t| t.ended).max().unwrap_or(began);
    let seconds = ended.duration_since(began).as_secs_f64();
    let transactions: u64 = tallies.iter().map(|t| t.transactions).sum();
    let latency: f64 = tallies.iter().map(|t| t.latency.as_secs_f64()).sum();
    let connect: f64 = tallies.iter().map(|t| t.connect.as_secs_f64()).sum();
    Ok(Report {
        script: cfg.script.name(),
        scale,
        query_mode: target.query_mode(),
        clients: cfg.clients,
        transactions_per_client: cfg.transactions_per_client,
        duration_s: if cfg.transactions_per_client.is_some() { None } else { cfg.duration.map(|d| d.as_secs_f64()) },
        transactions,
        retries: tallies.iter().map(|t| t.retries).sum(),
        seconds,
        latency_avg_ms: if transactions > 0 { latency * 1000.0 / transactions as f64 } else { 0.0 },
        initial_connection_ms: connect * 1000.0 / cfg.clients as f64,
        tps: if seconds > 0.0 { transactions as f64 / seconds } else { 0.0 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_db(dir: &std::path::Path) -> Database {
        let mut c = settledb::Config::default();
        c.set("autovacuum", "off").unwrap();
        Database::open(dir, c).unwrap()
    }

    #[test]
    fn tpcb_like_keeps_the_balances_and_counts_every_transaction() {
        let tmp = tempfile::tempdir().unwrap();
        let db = small_db(tmp.path());
        let target = Embedded::new(&db);
        target.init(1).unwrap();
        assert_eq!(target.scale().unwrap(), 1);
        let cfg = RunConfig {
            clients: 3,
            transactions_per_client: Some(50),
            duration: None,
            script: Script::TpcbLike,
            seed: 1,
        };
        let r = run(&target, &cfg).unwrap();
        assert_eq!(r.transactions, 150);
        assert_eq!(r.query_mode, "embedded");
        target.check_balances().unwrap();
        // Append-only adds history rows and nothing else: the balances no longer agree, and
        // the check says so.
        let cfg = RunConfig { script: Script::AppendOnly, clients: 1, transactions_per_client: Some(5), ..cfg };
        assert_eq!(run(&target, &cfg).unwrap().transactions, 5);
        let err = target.check_balances().unwrap_err().to_string();
        assert!(err.contains("balance check failed"), "{err}");
        // Initializing again starts over.
        target.init(1).unwrap();
        target.check_balances().unwrap();
    }

    #[test]
    fn draws_cover_their_ranges_and_scripts_parse() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..1000 {
            let d = Draw::new(&mut rng, 2);
            assert!((1..=200_000).contains(&d.aid) && (1..=20).contains(&d.tid) && (1..=2).contains(&d.bid));
            assert!((-5000..=5000).contains(&d.delta));
        }
        for s in [Script::TpcbLike, Script::SelectOnly, Script::AppendOnly] {
            assert_eq!(s.name().parse::<Script>(), Ok(s));
        }
        assert!("simple-update".parse::<Script>().is_err());
    }
}
