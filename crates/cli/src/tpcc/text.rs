//! The text rendering of a `settle tpcc` report: tables of figures with one column per policy
//! (also shown by the HTML page), then the targets and the checks.

use std::fmt::Write as _;

use workload::observe::DbCounters;
use workload::tpcc::run::{KindResult, TxKind};

use super::{ColumnResult, HalfResult, TableResult, TpccReport};

/// Rows of (label, one value per column) under a title.
pub struct Group {
    pub title: String,
    pub rows: Vec<(String, Vec<String>)>,
}

impl Group {
    fn new(title: impl Into<String>) -> Group {
        Group { title: title.into(), rows: Vec::new() }
    }

    fn row(&mut self, label: impl Into<String>, values: Vec<String>) {
        self.rows.push((label.into(), values));
    }

    fn render(&self, heads: &[String]) -> String {
        let lw = self.rows.iter().map(|(l, _)| l.len()).chain([self.title.len()]).max().unwrap_or(0);
        let widths: Vec<usize> = (0..heads.len())
            .map(|i| self.rows.iter().filter_map(|(_, v)| v.get(i)).map(String::len).chain([heads[i].len(), 8]).max())
            .map(|w| w.unwrap_or(8))
            .collect();
        let mut out = format!("{:<lw$}", self.title);
        for (h, w) in heads.iter().zip(&widths) {
            let _ = write!(out, "  {h:>w$}");
        }
        out.push('\n');
        for (l, vs) in &self.rows {
            let _ = write!(out, "{l:<lw$}");
            for (v, w) in vs.iter().zip(&widths) {
                let _ = write!(out, "  {v:>w$}");
            }
            out.push('\n');
        }
        out
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "n/a".into(), |v| v.to_string())
}

/// The report's tables, columns as policies.
pub fn groups(r: &TpccReport) -> Vec<Group> {
    let cols = &r.columns;
    let each = |f: &dyn Fn(&ColumnResult) -> String| -> Vec<String> { cols.iter().map(f).collect() };
    let mut out = Vec::new();
    let mut g = Group::new("run");
    g.row("seconds", each(&|c| format!("{:.1}", c.run.seconds)));
    g.row("transactions", each(&|c| c.run.transactions.to_string()));
    g.row("tps", each(&|c| format!("{:.0}", c.run.tps)));
    g.row("rate limit, tps", each(&|c| c.run.rate_limit.map_or("none".into(), |r| format!("{r:.0}"))));
    g.row(
        "started > 100 ms late (max s)",
        each(&|c| format!("{} ({:.2})", c.run.late.late_100ms, c.run.late.max_seconds)),
    );
    g.row("tpmC (New-Orders per minute)", each(&|c| format!("{:.0}", c.run.tpmc)));
    g.row("XIDs consumed", each(&|c| c.xids_consumed.to_string()));
    g.row("setup VACUUM seconds", each(&|c| format!("{:.2}", c.setup_vacuum_seconds)));
    out.push(g);
    let mut g = Group::new("database (pg_stat_database, pg_stat_wal)");
    let d = |f: fn(&DbCounters) -> u64| each(&|c| f(&c.db).to_string());
    g.row("xact_commit", d(|d| d.xact_commit));
    g.row("xact_rollback", d(|d| d.xact_rollback));
    g.row("blks_read", d(|d| d.blks_read));
    g.row("blks_hit", d(|d| d.blks_hit));
    g.row("heap_blks_read", d(|d| d.heap_blks_read));
    g.row("heap_blks_hit", d(|d| d.heap_blks_hit));
    g.row("tup_returned", d(|d| d.tup_returned));
    g.row("tup_fetched", d(|d| d.tup_fetched));
    g.row("tup_inserted", d(|d| d.tup_inserted));
    g.row("tup_updated", d(|d| d.tup_updated));
    g.row("tup_deleted", d(|d| d.tup_deleted));
    g.row("WAL records", d(|d| d.wal_records));
    g.row("WAL full-page images", d(|d| d.wal_fpi));
    g.row("WAL bytes", d(|d| d.wal_bytes));
    out.push(g);
    let mut g = Group::new("halves (first / second)");
    let halves = |f: fn(&HalfResult) -> u64| each(&|c| format!("{} / {}", f(&c.halves[0]), f(&c.halves[1])));
    g.row("XIDs consumed", halves(|h| h.xids));
    g.row("WAL bytes", halves(|h| h.wal_bytes));
    g.row("autovacuums", halves(|h| h.autovacuums));
    g.row("anti-wraparound autovacuums", halves(|h| h.anti_wraparound_autovacuums));
    g.row("pages frozen by autovacuum", halves(|h| h.autovacuum_pages_frozen));
    g.row("autovacuum WAL bytes", halves(|h| h.autovacuum_wal_bytes));
    out.push(g);
    let names: Vec<String> = cols.first().map(|c| c.table_names.clone()).unwrap_or_default();
    for n in names {
        let t = |f: &dyn Fn(&TableResult) -> String| -> Vec<String> {
            cols.iter().map(|c| c.tables.iter().find(|t| t.name == n).map_or("-".into(), f)).collect()
        };
        let mut g = Group::new(n.clone());
        g.row("autovacuums", t(&|t| t.autovacuums.to_string()));
        g.row("anti-wraparound autovacuums", t(&|t| t.anti_wraparound_autovacuums.to_string()));
        g.row("aggressive autovacuums", t(&|t| t.aggressive_autovacuums.to_string()));
        g.row("max relfrozenxid age", t(&|t| t.max_relfrozenxid_age.to_string()));
        g.row("relfrozenxid age at end", t(&|t| t.relfrozenxid_age_at_end.to_string()));
        g.row("XIDs between autovacuums", t(&|t| opt(t.xids_between_autovacuums)));
        g.row("  longest", t(&|t| opt(t.xids_between_autovacuums_max)));
        g.row(
            "autovacuums per freeze_max_age",
            t(&|t| t.autovacuums_per_freeze_max_age.map_or("n/a".into(), |v| format!("{v:.1}"))),
        );
        g.row(
            "relfrozenxid reached prev. cutoff",
            t(&|t| {
                format!("{}/{}", t.relfrozenxid_reached_previous_cutoff.0, t.relfrozenxid_reached_previous_cutoff.1)
            }),
        );
        g.row("pages frozen", t(&|t| opt(t.pages_frozen)));
        g.row("frozen pages modified again", t(&|t| opt(t.frozen_pages_modified)));
        g.row("  of pages frozen, %", t(&|t| t.wasted_freeze_percent.map_or("n/a".into(), |p| format!("{p:.1}"))));
        g.row("VM bits cleared", t(&|t| opt(t.vm_bits_cleared)));
        g.row("heap blocks accessed", t(&|t| t.heap_blks_accessed.to_string()));
        g.row("table pages", t(&|t| t.heap_pages.to_string()));
        g.row("index pages", t(&|t| t.index_pages.to_string()));
        out.push(g);
    }
    let mut g = Group::new("latency ms p50 / p95 / p99, rate /s");
    for (i, k) in cols.first().map(|c| c.run.kinds.clone()).unwrap_or_default().iter().enumerate() {
        let kind = |f: &dyn Fn(&KindResult) -> String| -> Vec<String> {
            cols.iter().map(|c| c.run.kinds.get(i).map_or("-".into(), f)).collect()
        };
        g.row(k.kind, kind(&|k| format!("{:.2} / {:.2} / {:.2}", k.p50_ms, k.p95_ms, k.p99_ms)));
        g.row(format!("{} /s", k.kind), kind(&|k| format!("{:.0}", k.per_second)));
        g.row(
            format!("{} p99 by half", k.kind),
            kind(&|k| format!("{:.2} / {:.2}", k.halves[0].p99_ms, k.halves[1].p99_ms)),
        );
    }
    out.push(g);
    let mut g = Group::new("heap per transaction: blocks accessed (read); index-only fetches / avoided");
    for (i, k) in cols.first().map(|c| c.run.kinds.clone()).unwrap_or_default().iter().enumerate() {
        if k.kind == TxKind::Delivery.name() {
            continue;
        }
        let row: Vec<String> = cols
            .iter()
            .map(|c| match c.run.kinds.get(i).and_then(|k| k.access) {
                Some(a) if a.transactions > 0 => {
                    let per = |v: u64| v as f64 / a.transactions as f64;
                    format!(
                        "{:.1} ({:.2}); {:.2} / {:.2}",
                        per(a.heap_blks_hit + a.heap_blks_read),
                        per(a.heap_blks_read),
                        per(a.index_only_heap_fetches),
                        per(a.index_only_fetches_avoided)
                    )
                }
                _ => "n/a".into(),
            })
            .collect();
        g.row(k.kind, row);
    }
    out.push(g);
    out
}

pub fn render(r: &TpccReport) -> String {
    let m = &r.machine;
    let mut out = format!("machine: {} CPUs ({}), {} GiB, {}\n", m.cpus, m.cpu_model, m.memory_gib, m.os);
    let _ = writeln!(
        out,
        "workload: TPC-C-like, {} warehouses, {} terminals, mix {}/{}/{}/{}/{}, seed {}, aging {}",
        r.warehouses,
        r.terminals,
        r.mix.new_order,
        r.mix.payment,
        r.mix.order_status,
        r.mix.delivery,
        r.mix.stock_level,
        r.seed,
        r.aging
    );
    if let Some(c) = r.columns.first() {
        let _ = writeln!(out, "settings ({}): {}", c.name, c.settings.join(" "));
    }
    out.push('\n');
    let heads: Vec<String> = r.columns.iter().map(|c| c.name.clone()).collect();
    let text: Vec<String> = groups(r).iter().map(|g| g.render(&heads)).collect();
    out.push_str(&text.join("\n"));
    if !r.targets.is_empty() {
        out.push_str("\ntargets (seed 000, eager against lazy)\n");
        for t in &r.targets {
            let _ = writeln!(out, "  [{}] {}: {} (goal {})", t.verdict(), t.name, t.value, t.goal);
        }
    }
    for c in &r.columns {
        let _ = writeln!(
            out,
            "\n{}: consistency conditions 1-4: {}",
            c.name,
            if c.consistency_violations.is_empty() {
                "hold".to_string()
            } else {
                format!("{} violated", c.consistency_violations.len())
            }
        );
        for v in &c.consistency_violations {
            let _ = writeln!(out, "  {v}");
        }
        let _ = writeln!(out, "{}: check: {}", c.name, c.check.lines().next().unwrap_or_default());
        for p in &c.check_problems {
            let _ = writeln!(out, "  {p}");
        }
        // Warnings and errors in full; routine LOG entries (PostgreSQL's automatic analyze
        // and checkpoint lines) only counted.
        let routine = c.other_log_entries.iter().filter(|e| e.contains(" LOG:  ")).count();
        for e in c.other_log_entries.iter().filter(|e| !e.contains(" LOG:  ")) {
            let _ = writeln!(out, "  log: {}", e.lines().next().unwrap_or_default());
        }
        if routine > 0 {
            let _ =
                writeln!(out, "  log: {routine} routine LOG entries besides the autovacuum reports (in report.json)");
        }
    }
    for (name, e) in &r.errors {
        let _ = writeln!(out, "\n{name}: error: {e}");
    }
    out
}
