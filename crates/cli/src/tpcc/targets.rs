//! Seed 000's targets, evaluated on the columns of one `settle tpcc` report: eager against
//! lazy, the adaptive policy against both, whether the terminals kept the rate, and the
//! accounts printed beside them (the cadence achieved, the heap accesses index-only scans could
//! save).

use workload::aging::SEED_AUTOVACUUMS_PER_FREEZE_MAX_AGE;
use workload::tpcc::{self, TxKind};

use super::{ColumnResult, Target, INSERT_HEAVY, LATE_MAX_SECONDS, ORDERS_TABLES};

pub(super) fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        f64::NAN
    } else {
        a / b
    }
}

/// Seed 000's targets, eager against lazy, and the adaptive policy's against both.
pub(super) fn targets(columns: &[ColumnResult]) -> Vec<Target> {
    let find = |n: &str| columns.iter().find(|c| c.name == n);
    let (Some(lazy), Some(eager)) = (find("lazy"), find("eager")) else {
        return Vec::new();
    };
    let mut out = vec![rate_kept(columns)];
    let table = |c: &ColumnResult, n: &str| c.tables.iter().find(|t| t.name == n).cloned();
    out.push(cadence(columns));
    let lazy_cycles: Vec<String> = ORDERS_TABLES
        .iter()
        .map(|n| {
            table(lazy, n).map_or(format!("{n} -"), |t| {
                format!("{n} {} ({} to prevent wraparound)", t.aggressive_autovacuums, t.anti_wraparound_autovacuums)
            })
        })
        .collect();
    out.push(Target::new(
        "lazy goes through freezing cycles: aggressive autovacuums, anti-wraparound or past \
         vacuum_freeze_table_age (precondition)",
        lazy_cycles.join(", "),
        ">= 2 on bmsql_oorder and bmsql_order_line",
        ORDERS_TABLES.iter().all(|n| table(lazy, n).is_some_and(|t| t.aggressive_autovacuums >= 2)),
    ));
    out.push(no_anti_wraparound(eager));
    for n in ORDERS_TABLES {
        let Some(t) = table(eager, n) else { continue };
        let gap = t.xids_between_autovacuums_max.unwrap_or(0);
        out.push(Target::new(
            format!("eager: {n} max relfrozenxid age"),
            format!("{} (longest interval between autovacuums: {gap} XIDs)", t.max_relfrozenxid_age),
            "<= 2 x the longest interval (relfrozenxid lags one interval at most)",
            gap > 0 && t.max_relfrozenxid_age <= 2 * gap,
        ));
        let (k, of) = t.relfrozenxid_reached_previous_cutoff;
        out.push(Target::new(
            format!("eager: {n} relfrozenxid reached the previous removable cutoff"),
            format!("{k} of {of} autovacuums"),
            "every autovacuum (seed 000's log pattern)",
            of > 0 && k == of,
        ));
    }
    let wal = |c: &ColumnResult, h: usize| c.halves[h].wal_bytes_at_end as f64;
    let whole = ratio(eager.db.wal_bytes as f64, lazy.db.wal_bytes as f64);
    out.push(Target::new(
        "WAL bytes, eager / lazy",
        format!(
            "{whole:.3} (first half {:.3}, second half alone {:.3})",
            ratio(wal(eager, 0), wal(lazy, 0)),
            ratio(eager.halves[1].wal_bytes as f64, lazy.halves[1].wal_bytes as f64)
        ),
        "<= 1.0 at the end (seed 000: 1.040 after the first day, 0.990 after the second)",
        whole <= 1.0,
    ));
    out.push(heap_accesses(lazy, eager));
    out.push(order_status_tail(lazy, eager));
    if let Some(adaptive) = find("adaptive") {
        out.extend(adaptive_targets(lazy, eager, adaptive));
    }
    out
}

/// Whether every column's terminals kept the rate limit (so the run did the same XIDs per
/// autovacuum cycle as on any machine that keeps it).
fn rate_kept(columns: &[ColumnResult]) -> Target {
    let share = |c: &ColumnResult| c.run.late.late_100ms as f64 / c.run.transactions.max(1) as f64;
    let value: Vec<String> = columns
        .iter()
        .map(|c| match c.run.rate_limit {
            Some(r) => format!(
                "{} {:.0}/{:.0} tps, {:.2}% late (max {:.2} s)",
                c.name,
                c.run.tps,
                r,
                100.0 * share(c),
                c.run.late.max_seconds
            ),
            None => format!("{} unthrottled ({:.0} tps)", c.name, c.run.tps),
        })
        .collect();
    // The targets compare settledb's policies; a PostgreSQL column that could not keep the rate
    // is shown, not counted (its client's round trips, not the machine, set its pace).
    let judged: Vec<&ColumnResult> = columns.iter().filter(|c| c.name != "postgres").collect();
    let limited = judged.iter().all(|c| c.run.rate_limit.is_some());
    let mut t = Target::new(
        "the terminals kept the rate limit (the verdict does not depend on machine speed)",
        value.join("; "),
        format!(
            "no transaction of settledb's columns started over {LATE_MAX_SECONDS:.0} s (one autovacuum_naptime) \
             behind schedule"
        ),
        limited && judged.iter().all(|c| c.run.late.max_seconds <= LATE_MAX_SECONDS),
    );
    t.applies = limited;
    t
}

/// No anti-wraparound autovacuum of an insert-heavy table, per half (and how many were
/// aggressive all the same).
fn no_anti_wraparound(c: &ColumnResult) -> Target {
    let per_half = |n: &str| {
        let h = |i: usize| c.halves[i].anti_wraparound_by_table.get(n).copied().unwrap_or(0);
        let aggressive = c.tables.iter().find(|t| t.name == n).map_or(0, |t| t.aggressive_autovacuums);
        format!("{n} {}+{} ({aggressive} aggressive)", h(0), h(1))
    };
    let value: Vec<String> = INSERT_HEAVY.iter().map(|n| per_half(n)).collect();
    Target::new(
        format!("{}: anti-wraparound autovacuums (first + second half)", c.name),
        value.join(", "),
        "0 on oorder, order_line, new_order, history",
        INSERT_HEAVY.iter().all(|n| c.tables.iter().any(|t| t.name == *n && t.anti_wraparound_autovacuums == 0)),
    )
}

/// The cadence achieved: autovacuums of the orders tables per `autovacuum_freeze_max_age`,
/// beside the seed's (an account, not a pass/fail).
fn cadence(columns: &[ColumnResult]) -> Target {
    let value: Vec<String> = columns
        .iter()
        .map(|c| {
            let per = |n: &str| {
                c.tables
                    .iter()
                    .find(|t| t.name == n)
                    .and_then(|t| t.autovacuums_per_freeze_max_age)
                    .map_or("-".into(), |v| format!("{v:.1}"))
            };
            format!("{} {}/{}", c.name, per(ORDERS_TABLES[0]), per(ORDERS_TABLES[1]))
        })
        .collect();
    let mut t = Target::new(
        "cadence: autovacuums per autovacuum_freeze_max_age, bmsql_oorder/bmsql_order_line",
        value.join(", "),
        format!("the seed's, {SEED_AUTOVACUUMS_PER_FREEZE_MAX_AGE:.1} on bmsql_oorder"),
        false,
    );
    t.informational = true;
    t
}

/// Heap buffer accesses, eager / lazy: what index-only scans save once pages stay all-visible.
/// It applies when the data outgrows shared buffers, as in the seed (the larger-scale run).
fn heap_accesses(lazy: &ColumnResult, eager: &ColumnResult) -> Target {
    let heap = ratio(
        (eager.db.heap_blks_hit + eager.db.heap_blks_read) as f64,
        (lazy.db.heap_blks_hit + lazy.db.heap_blks_read) as f64,
    );
    let all = ratio((eager.db.blks_hit + eager.db.blks_read) as f64, (lazy.db.blks_hit + lazy.db.blks_read) as f64);
    let fetched = ratio(eager.db.tup_fetched as f64, lazy.db.tup_fetched as f64);
    let read_share = lazy.db.heap_blks_read as f64 / (lazy.db.heap_blks_hit + lazy.db.heap_blks_read).max(1) as f64;
    // The most index-only scans could save: every entry they return, as a share of lazy's heap
    // accesses by the terminals and delivery workers.
    let sum = |c: &ColumnResult| {
        let mut t = tpcc::AccessCounts::default();
        c.run.kinds.iter().filter_map(|k| k.access.as_ref()).for_each(|a| t.add(a));
        t
    };
    let l = sum(lazy);
    let ceiling = (l.index_only_heap_fetches + l.index_only_fetches_avoided) as f64
        / (l.heap_blks_hit + l.heap_blks_read).max(1) as f64;
    let mut t = Target::new(
        "heap buffer accesses (heap_blks_hit + heap_blks_read), eager / lazy",
        format!(
            "{heap:.3} (all blocks {all:.3}, tup_fetched {fetched:.3}; lazy read {:.1}% of its heap accesses; \
             index-only scan entries are {:.2}% of lazy's heap accesses, the most they could save)",
            100.0 * read_share,
            100.0 * ceiling
        ),
        "<= 0.7 where the data outgrows shared_buffers (seed 000: blks_hit 0.616, tup_fetched 0.526)",
        heap <= 0.7,
    );
    // An account, not a verdict: the index-only scans BenchmarkSQL's SQL allows (Order-Status's
    // newest order, Delivery's oldest new order) are a small share of the heap accesses, at
    // any scale; the value shows that share.
    t.informational = true;
    t
}

/// ORDER_STATUS p99 in the second half, eager against lazy. Seed 000 expects it much lower
/// because the transaction's index-only scan finds its pages all-visible; the value shows how
/// much of ORDER_STATUS's heap work that spared in this run. Where it is a few percent (every
/// table in shared buffers; one index-only scan per transaction beside a dozen heap accesses)
/// the ratio of two sub-millisecond tails measures the machine's scheduling, not the policy:
/// identical runs gave 0.47 to 1.80. So it is an account, as the heap accesses are.
fn order_status_tail(lazy: &ColumnResult, eager: &ColumnResult) -> Target {
    fn kind(c: &ColumnResult) -> Option<&tpcc::run::KindResult> {
        c.run.kinds.iter().find(|k| k.kind == TxKind::OrderStatus.name())
    }
    let p99 = |c: &ColumnResult| kind(c).map_or(f64::NAN, |k| k.halves[1].p99_ms);
    let accesses = |c: &ColumnResult| kind(c).and_then(|k| k.access).unwrap_or_default();
    let (l, e) = (accesses(lazy), accesses(eager));
    let spared = (e.index_only_fetches_avoided as f64 - l.index_only_fetches_avoided as f64)
        / (l.heap_blks_hit + l.heap_blks_read).max(1) as f64;
    let r = ratio(p99(eager), p99(lazy));
    let mut t = Target::new(
        "ORDER_STATUS p99 in the second half, eager / lazy",
        format!(
            "{r:.3} ({:.2} ms against {:.2} ms; eager's index-only scans spared ORDER_STATUS {:.1}% of lazy's \
             heap accesses)",
            p99(eager),
            p99(lazy),
            100.0 * spared
        ),
        "<= 0.5 where index-only scans spare ORDER_STATUS much of its heap work (seed 000: \"much lower \
         latency, particularly tail latency\")",
        r <= 0.5,
    );
    t.informational = true;
    t
}

/// The adaptive policy: freezing that sticks, no anti-wraparound, least WAL.
fn adaptive_targets(lazy: &ColumnResult, eager: &ColumnResult, adaptive: &ColumnResult) -> Vec<Target> {
    let wasted = |c: &ColumnResult, n: &str| {
        c.tables.iter().find(|t| t.name == n).and_then(|t| t.wasted_freeze_percent).unwrap_or(0.0)
    };
    let mut worst: Vec<(String, f64, f64)> = adaptive
        .table_names
        .iter()
        .map(|n| (n.clone(), wasted(adaptive, n), wasted(lazy, n)))
        .filter(|(_, a, _)| *a > 0.0)
        .collect();
    worst.sort_by(|x, y| (y.1 - y.2).total_cmp(&(x.1 - x.2)));
    let value: Vec<String> = worst.iter().take(3).map(|(n, a, l)| format!("{n} {a:.1}% (lazy {l:.1}%)")).collect();
    let wal = adaptive.db.wal_bytes as f64;
    let floor = lazy.db.wal_bytes.min(eager.db.wal_bytes) as f64;
    vec![
        Target::new(
            "adaptive: frozen pages modified again / pages frozen, worst tables",
            if value.is_empty() { "no table had a page frozen".into() } else { value.join(", ") },
            "<= lazy's + 5 points on every table",
            worst.iter().all(|(_, a, l)| *a <= *l + 5.0),
        ),
        no_anti_wraparound(adaptive),
        Target::new(
            "WAL bytes, adaptive / min(lazy, eager)",
            format!("{:.3}", ratio(wal, floor)),
            "<= 1.0",
            wal <= floor,
        ),
    ]
}
