//! The targets for `settle bench decode`, judged on the medians, and the table.
//!
//! Ratios are settledb's CPU over PostgreSQL's; a capped PostgreSQL figure is a lower bound,
//! so a ratio over it is an upper bound and "met" stays true. Memory targets are judged on the
//! decoder's gross peak `RssAnon` (what PostgreSQL's figure is); the peak over the `RssAnon`
//! right after opening the directory is printed beside it. In a `--shrink`ed run absolute
//! targets are judged on the small sizes, which proves nothing about the full ones: their
//! detail says so.

use std::fmt::Write;

use super::{CaseResult, Report, SinkKind, Target};

const MB: f64 = 1024.0 * 1024.0;

fn find<'a>(cases: &'a [CaseResult], case: &str, limit: &str, sink: SinkKind) -> Option<&'a CaseResult> {
    cases.iter().find(|c| c.case == case && c.limit == limit && c.sink == sink)
}

fn ratio_target(c: &CaseResult, max: f64) -> Target {
    let what = format!("{} {} {}: CPU <= {max}x PostgreSQL's", c.case, c.limit, c.sink_name());
    match &c.postgres {
        Some(p) if p.median.cpu_seconds > 0.0 => {
            let r = c.engine.median.cpu_seconds / p.median.cpu_seconds;
            let bound = if p.median.capped { " (PostgreSQL capped: an upper bound)" } else { "" };
            Target {
                what,
                met: Some(r <= max),
                detail: format!(
                    "{:.3} s / {:.3} s = {r:.3}x{bound}",
                    c.engine.median.cpu_seconds, p.median.cpu_seconds
                ),
            }
        }
        _ => Target { what, met: None, detail: "needs PostgreSQL's figure (--peer)".into() },
    }
}

fn rss_target(c: &CaseResult, limit_bytes: f64) -> Target {
    let peak = c.engine.median.peak_rss_anon_kb as f64 * 1024.0;
    let over = c.engine.peak_rss_over_open_kb.unwrap_or(0) as f64 * 1024.0;
    let max = limit_bytes + 16.0 * MB;
    Target {
        what: format!("{} {} {}: decoder peak RssAnon <= limit + 16 MB", c.case, c.limit, c.sink_name()),
        met: Some(peak <= max),
        detail: format!(
            "peak {:.1} MB (judged), {:.1} MB over the RssAnon after open; bound {:.1} MB",
            peak / MB,
            over / MB,
            max / MB
        ),
    }
}

fn cpu_target(c: &CaseResult, max: f64, shrink: u64) -> Target {
    let cpu = c.engine.median.cpu_seconds;
    Target {
        what: format!("{} {} {}: CPU <= {max} s", c.case, c.limit, c.sink_name()),
        met: Some(cpu <= max),
        detail: format!("{cpu:.3} s{}", shrunk(shrink)),
    }
}

fn shrunk(shrink: u64) -> String {
    if shrink > 1 {
        format!(" (at 1/{shrink} size)")
    } else {
        String::new()
    }
}

fn no_spill(c: &CaseResult) -> Target {
    let b = c.engine.median.spill_bytes;
    Target {
        what: format!("{} {} {}: 0 bytes spilled", c.case, c.limit, c.sink_name()),
        met: Some(c.engine.runs.iter().all(|r| r.spill_bytes == 0)),
        detail: format!("{b} bytes (median run)"),
    }
}

impl CaseResult {
    fn sink_name(&self) -> &'static str {
        self.sink.name()
    }
}

/// Judges every target, stores each with its case, returns them all.
pub fn evaluate(cases: &mut [CaseResult], shrink: u64) -> Vec<Target> {
    let mut per_case: Vec<(usize, Target)> = Vec::new();
    let idx = |cases: &[CaseResult], case: &str, limit: &str, sink: SinkKind| {
        cases.iter().position(|c| c.case == case && c.limit == limit && c.sink == sink)
    };
    use SinkKind::*;
    if let Some(i) = idx(cases, "W1", "64MB", Null) {
        per_case.push((i, ratio_target(&cases[i], 0.1)));
        per_case.push((i, rss_target(&cases[i], 64.0 * MB)));
    }
    if let Some(i) = idx(cases, "W1", "4GB", Null) {
        per_case.push((i, ratio_target(&cases[i], 0.2)));
    }
    if let Some(i) = idx(cases, "W1", "64MB", Td) {
        per_case.push((i, ratio_target(&cases[i], 0.15)));
    }
    if let Some(i) = idx(cases, "W2", "64kB", Null) {
        per_case.push((i, cpu_target(&cases[i], 0.3, shrink)));
    }
    if let (Some(a), Some(i)) = (find(cases, "W2-25k", "64kB", Null), idx(cases, "W2-200k", "64kB", Null)) {
        let b = &cases[i];
        let (ca, cb) = (a.engine.median.cpu_seconds, b.engine.median.cpu_seconds);
        let proportional = b.changes as f64 / a.changes as f64;
        let growth = cb / ca.max(1e-9);
        per_case.push((
            i,
            Target {
                what: "W2 64kB null: CPU linear in subtransactions (25k -> 200k within 1.3x of proportional)".into(),
                met: Some(growth <= 1.3 * proportional),
                detail: format!("{ca:.3} s -> {cb:.3} s = {growth:.2}x for {proportional:.0}x the subtransactions"),
            },
        ));
    }
    if let Some(i) = idx(cases, "W3", "1MB", Null) {
        per_case.push((i, rss_target(&cases[i], MB)));
    }
    if let Some(i) = idx(cases, "W4", "64kB", Null) {
        per_case.push((i, cpu_target(&cases[i], 1.0, shrink)));
    }
    if let Some(i) = idx(cases, "W4", "64kB", TdStream) {
        per_case.push((i, cpu_target(&cases[i], 1.0, shrink)));
    }
    if let Some(i) = idx(cases, "W5", "64MB", Null) {
        let c = &cases[i];
        let tps = c.engine.transactions_per_second;
        per_case.push((
            i,
            Target {
                what: "W5 64MB null: >= 2,000,000 transactions/s of decoder CPU".into(),
                met: Some(tps >= 2e6),
                detail: format!("{tps:.0} transactions/s{}", shrunk(shrink)),
            },
        ));
    }
    if let Some(i) = idx(cases, "W6", "64kB", Null) {
        let c = &cases[i];
        per_case.push((i, ratio_target(c, 0.1)));
        let what = "W6 64kB null: >= 10x fewer eviction events than PostgreSQL".to_string();
        let t = match &c.postgres {
            Some(p) => {
                let (e, pe) = (c.engine.median.eviction_events, p.median.eviction_events);
                Target {
                    what,
                    met: Some(e * 10 <= pe),
                    detail: format!(
                        "{e} evictions ({} transactions spilled or streamed in them) vs PostgreSQL's {pe} \
                         (spill_count + stream_count)",
                        c.engine.median.spill_count + c.engine.median.stream_count
                    ),
                }
            }
            None => Target { what, met: None, detail: "needs PostgreSQL's figure (--peer)".into() },
        };
        per_case.push((i, t));
    }
    if let Some(i) = idx(cases, "W7", "64MB", TdStream) {
        per_case.push((i, no_spill(&cases[i])));
    }
    if let Some(i) = idx(cases, "W9", "64MB", Null) {
        per_case.push((i, no_spill(&cases[i])));
    }
    for (i, c) in cases.iter().enumerate() {
        if let Some(k) = &c.check {
            let what = format!("{} {} {}: the same test_decoding lines as PostgreSQL", c.case, c.limit, c.sink_name());
            let how = if k.ordered { "in order" } else { "as a multiset of transactions" };
            let detail = match &k.postgres {
                Some(p) => {
                    format!("{} / {} lines, digests {} / {} ({how})", k.engine.lines, p.lines, k.engine.hash, p.hash)
                }
                None => format!("{} lines; needs --peer to compare", k.engine.lines),
            };
            per_case.push((i, Target { what, met: k.equal, detail }));
        }
    }
    let mut all = Vec::new();
    for (i, t) in per_case {
        cases[i].targets.push(t.clone());
        all.push(t);
    }
    all
}

fn status(t: &Target) -> &'static str {
    match t.met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "n/a",
    }
}

/// The table: one line per setting and engine, then the targets.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let m = &r.machine;
    let _ = writeln!(s, "machine: {} CPUs ({}), {} GiB, {}", m.cpus, m.cpu_model, m.memory_gib, m.os);
    let _ = writeln!(
        s,
        "settle bench decode: median of {} run(s), engines alternating{}{}",
        r.runs,
        if r.shrink > 1 { format!(", sizes / {}", r.shrink) } else { String::new() },
        if r.peer { format!(", PostgreSQL capped at {} s", r.peer_timeout_seconds) } else { String::new() }
    );
    let _ = writeln!(
        s,
        "{:<8} {:>5} {:<9} {:<8} {:>14} {:>8} {:>9} {:>15} {:>9} {:>6} {:>9} {:>7}  targets",
        "case",
        "limit",
        "sink",
        "engine",
        "CPU s",
        "wall s",
        "Mchg/s",
        "peak RSS MB",
        "spill MB",
        "files",
        "evictions",
        "txns"
    );
    for c in &r.cases {
        let mut line = |engine: &str, e: Option<&super::EngineResult>, note: Option<&str>, targets: String| {
            let Some(e) = e else {
                let _ = writeln!(
                    s,
                    "{:<8} {:>5} {:<9} {:<8} {}",
                    c.case,
                    c.limit,
                    c.sink.name(),
                    engine,
                    note.unwrap_or("-")
                );
                return;
            };
            let f = &e.median;
            let cpu = if f.capped {
                format!("> {:.1} (capped)", f.cpu_seconds)
            } else if f.samples == 0 {
                "not sampled".to_string()
            } else {
                format!("{:.3}", f.cpu_seconds)
            };
            let rss = match e.peak_rss_over_open_kb {
                Some(o) => format!("{:.1} ({:.1})", f.peak_rss_anon_kb as f64 / 1024.0, o as f64 / 1024.0),
                None => format!("{:.1}", f.peak_rss_anon_kb as f64 / 1024.0),
            };
            let files = f.spill_files.map_or_else(|| format!("{}*", f.spill_count), |n| n.to_string());
            let _ = writeln!(
                s,
                "{:<8} {:>5} {:<9} {:<8} {:>14} {:>8.2} {:>9.2} {:>15} {:>9.1} {:>6} {:>9} {:>7}  {}",
                c.case,
                c.limit,
                c.sink.name(),
                engine,
                cpu,
                f.wall_seconds,
                e.changes_per_second / 1e6,
                rss,
                f.spill_bytes as f64 / 1024.0 / 1024.0,
                files,
                f.eviction_events,
                f.transactions,
                targets
            );
        };
        let t: Vec<String> = c.targets.iter().map(|t| format!("{} [{}]", short(&t.what), status(t))).collect();
        line("settledb", Some(&c.engine), None, t.join("; "));
        line("pg15", c.postgres.as_ref(), c.postgres_note.as_deref(), String::new());
    }
    let _ = writeln!(
        s,
        "peak RSS: the decoder's highest RssAnon (settledb: in parentheses, over its RssAnon right after opening the \
         directory); files* = PostgreSQL's spill_count; evictions: settledb's (each spills or streams down to the \
         low-water mark), PostgreSQL's spill_count + stream_count (one transaction each)"
    );
    let _ = writeln!(s, "targets:");
    for t in &r.targets {
        let _ = writeln!(s, "  [{}] {} ({})", status(t), t.what, t.detail);
    }
    let b: Vec<String> = r
        .builds
        .iter()
        .map(|b| match b.postgres_seconds {
            Some(p) => format!("{} {:.1}/{:.1}", b.case, b.engine_seconds, p),
            None => format!("{} {:.1}", b.case, b.engine_seconds),
        })
        .collect();
    let _ = writeln!(s, "workload build seconds (settledb/pg15, not measured): {}", b.join(", "));
    let _ = writeln!(s, "total: {:.0} s", r.total_seconds);
    s
}

/// A target's name without its case prefix, for the table's last column.
fn short(what: &str) -> &str {
    what.split_once(": ").map_or(what, |(_, w)| w)
}
