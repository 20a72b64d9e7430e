//! Terminals, the deferred Delivery queue and its workers, latency histograms.
//!
//! Terminal `i` (from 0) has home warehouse `i mod W + 1` and its own RNG stream `i`. It draws
//! a transaction type by the mix, draws the inputs, runs the transaction, and retries the same
//! inputs after a serialization failure or deadlock. Under `--transactions N` each terminal
//! runs its share of N (so the requests are the same whatever the timing); under a duration
//! it runs until the time is up.
//!
//! # The rate limit
//!
//! With [`RunConfig::rate`] the terminals run at a fixed rate, as BenchmarkSQL's
//! `limitTxnsPerMin` does: terminal `i` of `T` starts its `k`-th transaction at
//! `start + (k + i/T) · T/rate`, sleeping until then when it is early and starting at once when
//! it is late (so a stall is caught up and the rate holds over the run). A workload aged in
//! XIDs against cadences kept in wall-clock time (`autovacuum_naptime`, the cost delay) needs
//! this: unthrottled, a faster machine burns more XIDs per naptime and per vacuum, and what
//! VACUUM has to do becomes a property of the machine rather than of the workload. The run
//! reports how far behind schedule the terminals fell ([`RunResult::late`]), so a machine too
//! slow for the rate is seen, not hidden.
//!
//! # Halves
//!
//! Latencies are kept per half of the run (seed 000 reported two 24-hour runs): a terminal's
//! transaction belongs to the second half once the terminal has done half its share (or, under
//! a duration, once half the time has passed); a deferred Delivery belongs to the half its
//! request was queued in.
//!
//! A Delivery is queued, as BenchmarkSQL queues it: the terminal's own latency is that of
//! queueing (reported as `DELIVERY`), and a delivery worker later runs the ten districts in one
//! transaction (`DELIVERY_BG`, whose latency runs from queueing to commit). The workers drain
//! the queue before the run ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::Serialize;

use super::{AccessCounts, Delivery, NewOrder, OrderStatus, Outcome, Payment, StockLevel, TpccConn, TpccTarget};
use crate::rng::{NurandConstants, TpccRng};

/// The transaction types, with Delivery's two halves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum TxKind {
    NewOrder,
    Payment,
    OrderStatus,
    StockLevel,
    Delivery,
    DeliveryBg,
}

impl TxKind {
    pub const ALL: [TxKind; 6] = [
        TxKind::NewOrder,
        TxKind::Payment,
        TxKind::OrderStatus,
        TxKind::StockLevel,
        TxKind::Delivery,
        TxKind::DeliveryBg,
    ];

    /// BenchmarkSQL's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            TxKind::NewOrder => "NEW_ORDER",
            TxKind::Payment => "PAYMENT",
            TxKind::OrderStatus => "ORDER_STATUS",
            TxKind::StockLevel => "STOCK_LEVEL",
            TxKind::Delivery => "DELIVERY",
            TxKind::DeliveryBg => "DELIVERY_BG",
        }
    }

    fn index(self) -> usize {
        TxKind::ALL.iter().position(|&k| k == self).unwrap_or(0)
    }
}

/// Percentages of New-Order, Payment, Order-Status, Delivery and Stock-Level; they sum to 100.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct Mix {
    pub new_order: u32,
    pub payment: u32,
    pub order_status: u32,
    pub delivery: u32,
    pub stock_level: u32,
}

impl Default for Mix {
    fn default() -> Mix {
        Mix { new_order: 45, payment: 43, order_status: 4, delivery: 4, stock_level: 4 }
    }
}

impl std::str::FromStr for Mix {
    type Err = String;

    /// `45/43/4/4/4`: New-Order, Payment, Order-Status, Delivery, Stock-Level.
    fn from_str(s: &str) -> Result<Mix, String> {
        let parts: Vec<u32> = s
            .split('/')
            .map(|p| p.trim().parse::<u32>().map_err(|_| format!("mix {s:?}: {p:?} is not a percentage")))
            .collect::<Result<_, _>>()?;
        let [new_order, payment, order_status, delivery, stock_level] = parts[..] else {
            return Err(format!("mix {s:?}: expected five percentages NO/P/OS/D/SL"));
        };
        if parts.iter().sum::<u32>() != 100 {
            return Err(format!("mix {s:?}: the percentages sum to {}, not 100", parts.iter().sum::<u32>()));
        }
        Ok(Mix { new_order, payment, order_status, delivery, stock_level })
    }
}

impl Mix {
    fn pick(&self, r: &mut TpccRng) -> TxKind {
        let x = r.int32(1, 100) as u32;
        let mut edge = self.new_order;
        if x <= edge {
            return TxKind::NewOrder;
        }
        edge += self.payment;
        if x <= edge {
            return TxKind::Payment;
        }
        edge += self.order_status;
        if x <= edge {
            return TxKind::OrderStatus;
        }
        edge += self.delivery;
        if x <= edge {
            return TxKind::Delivery;
        }
        TxKind::StockLevel
    }
}

#[derive(Clone, Debug)]
pub struct RunConfig {
    pub warehouses: i32,
    pub terminals: usize,
    /// Stop after this many terminal transactions in all (shared evenly by the terminals)…
    pub transactions: Option<u64>,
    /// … or after this long (whichever is given; transactions wins when both are).
    pub duration: Option<Duration>,
    pub seed: u64,
    pub mix: Mix,
    pub delivery_workers: usize,
    /// Terminal transactions per second, all terminals together (None: as fast as they can).
    pub rate: Option<f64>,
}

/// Live counters of a run, read by the caller's progress display; `stop` ends a run early.
#[derive(Default)]
pub struct RunProgress {
    pub done: AtomicU64,
    pub new_orders: AtomicU64,
    pub rolled_back: AtomicU64,
    pub retries: AtomicU64,
    pub deliveries_pending: AtomicU64,
    pub stop: AtomicBool,
}

/// Figures of one transaction type.
#[derive(Clone, Debug, Serialize)]
pub struct KindResult {
    pub kind: &'static str,
    pub count: u64,
    pub rolled_back: u64,
    pub retries: u64,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The same quantiles over the first and the second half of the run.
    pub halves: [Quantiles; 2],
    /// The heap accesses charged to this type (retries included), where the target reports
    /// them.
    pub access: Option<AccessCounts>,
}

/// Latency quantiles of one transaction type over part of a run.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Quantiles {
    pub count: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Quantiles {
    fn of(h: &Histogram<u64>) -> Quantiles {
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        Quantiles {
            count: h.len(),
            p50_ms: ms(0.50),
            p95_ms: ms(0.95),
            p99_ms: ms(0.99),
            max_ms: h.max() as f64 / 1000.0,
        }
    }
}

/// How well a rate-limited run kept its schedule.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Lateness {
    /// Terminal transactions that started more than 100 ms after their scheduled time.
    pub late_100ms: u64,
    /// The most any transaction started after its scheduled time, seconds.
    pub max_seconds: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub seconds: f64,
    /// Terminal transactions (DELIVERY_BG not counted again).
    pub transactions: u64,
    pub tps: f64,
    /// New-Orders committed per minute (tpmC).
    pub tpmc: f64,
    /// The rate limit the terminals ran under, transactions per second (None: unthrottled).
    pub rate_limit: Option<f64>,
    pub late: Lateness,
    pub kinds: Vec<KindResult>,
}

struct Stats {
    /// Per half of the run, per transaction type.
    hist: [Vec<Histogram<u64>>; 2],
    rolled_back: [u64; 6],
    retries: [u64; 6],
    late: Lateness,
    access: [AccessCounts; 6],
    /// Whether the target reported access counts.
    access_known: bool,
}

impl Stats {
    fn new() -> Stats {
        let kinds = || {
            TxKind::ALL
                .iter()
                .map(|_| Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"))
                .collect()
        };
        Stats {
            hist: [kinds(), kinds()],
            rolled_back: [0; 6],
            retries: [0; 6],
            late: Lateness::default(),
            access: [AccessCounts::default(); 6],
            access_known: false,
        }
    }

    fn record(&mut self, half: usize, kind: TxKind, micros: u64) {
        self.hist[half.min(1)][kind.index()].saturating_record(micros.max(1));
    }

    fn merge(&mut self, other: &Stats) {
        for (mine, theirs) in self.hist.iter_mut().zip(&other.hist) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                // Same bounds on both sides, so adding cannot fail.
                let _ = a.add(b);
            }
        }
        for i in 0..6 {
            self.rolled_back[i] += other.rolled_back[i];
            self.retries[i] += other.retries[i];
        }
        for i in 0..6 {
            self.access[i].add(&other.access[i]);
        }
        self.access_known |= other.access_known;
        self.late.late_100ms += other.late.late_100ms;
        self.late.max_seconds = self.late.max_seconds.max(other.late.max_seconds);
    }

    /// Charges one transaction of `kind` with the accesses between `before` and `after`.
    fn charge(&mut self, kind: TxKind, before: Option<AccessCounts>, after: Option<AccessCounts>) {
        if let (Some(b), Some(a)) = (before, after) {
            let mut d = a.since(b);
            d.transactions = 1;
            self.access[kind.index()].add(&d);
            self.access_known = true;
        }
    }

    /// The whole run's histogram of one type (both halves).
    fn whole(&self, kind: TxKind) -> Histogram<u64> {
        let mut h = self.hist[0][kind.index()].clone();
        let _ = h.add(&self.hist[1][kind.index()]);
        h
    }
}

/// Runs `f` until it does not ask for a retry; the retries taken.
pub(crate) fn with_retries(mut f: impl FnMut() -> anyhow::Result<Outcome>) -> anyhow::Result<(Outcome, u64)> {
    const MAX_RETRIES: u64 = 1000;
    for retries in 0..MAX_RETRIES {
        match f()? {
            Outcome::Retry => continue,
            done => return Ok((done, retries)),
        }
    }
    Err(anyhow!("gave up after {MAX_RETRIES} retries (serialization failures or deadlocks)"))
}

/// Runs the workload on `target` as `cfg` says.
pub fn run<T: TpccTarget>(target: &T, cfg: &RunConfig, progress: &RunProgress) -> anyhow::Result<RunResult> {
    if cfg.terminals == 0 || cfg.warehouses < 1 {
        return Err(anyhow!("need at least one terminal and one warehouse"));
    }
    if cfg.transactions.is_none() && cfg.duration.is_none() {
        return Err(anyhow!("give a number of transactions or a duration"));
    }
    if cfg.rate.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return Err(anyhow!("the rate limit must be a positive number of transactions per second"));
    }
    let c = NurandConstants::from_seed(cfg.seed);
    let start = Instant::now();
    let deadline = cfg.duration.map(|d| start + d);
    let (queue, deliveries) = mpsc::channel::<Queued>();
    let deliveries = Mutex::new(deliveries);
    let total = Mutex::new(Stats::new());
    let failure: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let fail = |e: anyhow::Error| {
        progress.stop.store(true, Ordering::Relaxed);
        failure.lock().get_or_insert(e);
    };

    std::thread::scope(|s| {
        for worker in 0..cfg.delivery_workers.max(1) {
            let (deliveries, total, fail) = (&deliveries, &total, &fail);
            s.spawn(move || {
                let mut conn = match target.connect().with_context(|| format!("delivery worker {worker}")) {
                    Ok(c) => c,
                    Err(e) => return fail(e),
                };
                let mut stats = Stats::new();
                loop {
                    let next = deliveries.lock().recv();
                    let Ok(Queued { delivery, at, half }) = next else { break };
                    let before = conn.access_counts();
                    let result = with_retries(|| conn.delivery(&delivery));
                    stats.charge(TxKind::DeliveryBg, before, conn.access_counts());
                    match result {
                        Ok((_, retries)) => {
                            stats.retries[TxKind::DeliveryBg.index()] += retries;
                            stats.record(half, TxKind::DeliveryBg, at.elapsed().as_micros() as u64);
                        }
                        Err(e) => fail(e.context("DELIVERY_BG")),
                    }
                    progress.deliveries_pending.fetch_sub(1, Ordering::Relaxed);
                }
                total.lock().merge(&stats);
            });
        }
        for term in 0..cfg.terminals {
            let queue = queue.clone();
            let (total, fail) = (&total, &fail);
            let share = cfg
                .transactions
                .map(|n| n / cfg.terminals as u64 + u64::from((term as u64) < n % cfg.terminals as u64));
            s.spawn(move || {
                let clock = Clock { start, share, deadline };
                let r = terminal(target, cfg, term, c, &clock, &queue, progress);
                match r {
                    Ok(stats) => total.lock().merge(&stats),
                    Err(e) => fail(e.context(format!("terminal {term}"))),
                }
            });
        }
        drop(queue);
    });
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    let seconds = start.elapsed().as_secs_f64();
    let total = total.into_inner();
    let kinds: Vec<KindResult> = TxKind::ALL
        .iter()
        .map(|&k| {
            let all = Quantiles::of(&total.whole(k));
            KindResult {
                kind: k.name(),
                count: all.count,
                rolled_back: total.rolled_back[k.index()],
                retries: total.retries[k.index()],
                per_second: all.count as f64 / seconds,
                p50_ms: all.p50_ms,
                p95_ms: all.p95_ms,
                p99_ms: all.p99_ms,
                max_ms: all.max_ms,
                halves: [Quantiles::of(&total.hist[0][k.index()]), Quantiles::of(&total.hist[1][k.index()])],
                access: total.access_known.then_some(total.access[k.index()]),
            }
        })
        .collect();
    let transactions: u64 = kinds.iter().filter(|k| k.kind != TxKind::DeliveryBg.name()).map(|k| k.count).sum();
    let new_orders = kinds[TxKind::NewOrder.index()].count - kinds[TxKind::NewOrder.index()].rolled_back;
    Ok(RunResult {
        seconds,
        transactions,
        tps: transactions as f64 / seconds,
        tpmc: new_orders as f64 * 60.0 / seconds,
        rate_limit: cfg.rate,
        late: total.late,
        kinds,
    })
}

/// A Delivery request on its way to a worker: when it was queued and in which half.
struct Queued {
    delivery: Delivery,
    at: Instant,
    half: usize,
}

/// When a terminal stops, and which half of the run a transaction falls in.
struct Clock {
    start: Instant,
    /// The terminal's share of a fixed number of transactions…
    share: Option<u64>,
    /// … or the end of a timed run.
    deadline: Option<Instant>,
}

impl Clock {
    fn finished(&self, done: u64) -> bool {
        match self.share {
            Some(n) => done >= n,
            None => self.deadline.is_some_and(|d| Instant::now() >= d),
        }
    }

    /// 0 for the first half of the run, 1 for the second.
    fn half(&self, done: u64, now: Instant) -> usize {
        match (self.share, self.deadline) {
            (Some(n), _) => usize::from(done * 2 >= n),
            (None, Some(d)) => usize::from((now - self.start) * 2 >= d - self.start),
            (None, None) => 0,
        }
    }
}

fn terminal<T: TpccTarget>(
    target: &T,
    cfg: &RunConfig,
    term: usize,
    c: NurandConstants,
    clock: &Clock,
    queue: &mpsc::Sender<Queued>,
    progress: &RunProgress,
) -> anyhow::Result<Stats> {
    let mut conn = target.connect()?;
    let mut r = TpccRng::new(cfg.seed, term as u64, c);
    let w_id = (term as i32 % cfg.warehouses) + 1;
    let mut stats = Stats::new();
    let mut done = 0u64;
    // Under a rate limit: this terminal's interval, and its first slot, offset from the other
    // terminals' so that they do not start in step.
    let interval = cfg.rate.map(|rate| Duration::from_secs_f64(cfg.terminals as f64 / rate));
    let mut due = interval.map(|i| clock.start + i.mul_f64(term as f64 / cfg.terminals as f64));
    loop {
        if clock.finished(done) || progress.stop.load(Ordering::Relaxed) {
            break;
        }
        if let (Some(at), Some(i)) = (due.as_mut(), interval) {
            let now = Instant::now();
            if *at > now {
                std::thread::sleep(*at - now);
            } else {
                let behind = (now - *at).as_secs_f64();
                stats.late.max_seconds = stats.late.max_seconds.max(behind);
                stats.late.late_100ms += u64::from(behind > 0.1);
            }
            *at += i;
        }
        let kind = cfg.mix.pick(&mut r);
        let began = Instant::now();
        let half = clock.half(done, began);
        let before = conn.access_counts();
        let (outcome, retries) = match kind {
            TxKind::NewOrder => {
                let t = NewOrder::draw(&mut r, w_id, cfg.warehouses);
                with_retries(|| conn.new_order(&t))?
            }
            TxKind::Payment => {
                let t = Payment::draw(&mut r, w_id, cfg.warehouses);
                with_retries(|| conn.payment(&t))?
            }
            TxKind::OrderStatus => {
                let t = OrderStatus::draw(&mut r, w_id);
                with_retries(|| conn.order_status(&t))?
            }
            TxKind::StockLevel => {
                let t = StockLevel::draw(&mut r, w_id);
                with_retries(|| conn.stock_level(&t))?
            }
            TxKind::Delivery | TxKind::DeliveryBg => {
                progress.deliveries_pending.fetch_add(1, Ordering::Relaxed);
                queue
                    .send(Queued { delivery: Delivery::draw(&mut r, w_id), at: began, half })
                    .map_err(|_| anyhow!("the delivery workers stopped"))?;
                (Outcome::Committed, 0)
            }
        };
        stats.record(half, kind, began.elapsed().as_micros() as u64);
        if kind != TxKind::Delivery {
            stats.charge(kind, before, conn.access_counts());
        }
        stats.retries[kind.index()] += retries;
        progress.retries.fetch_add(retries, Ordering::Relaxed);
        if outcome == Outcome::RolledBack {
            stats.rolled_back[kind.index()] += 1;
            progress.rolled_back.fetch_add(1, Ordering::Relaxed);
        } else if kind == TxKind::NewOrder {
            progress.new_orders.fetch_add(1, Ordering::Relaxed);
        }
        progress.done.fetch_add(1, Ordering::Relaxed);
        done += 1;
    }
    Ok(stats)
}
