//! The HTML report of `settle tpcc`, the page a person reads first: one self-contained file
//! (inline SVG and CSS, no scripts, nothing fetched), readable offline.
//!
//! It tells seed 000's story (eager "block-driven" freezing avoids the anti-wraparound
//! stampede and the freezing cliff that lazy has) in this order:
//!
//! 1. **Targets**, MET / MISSED / n/a / info ([`crate::tpcc::Target::verdict`]).
//! 2. **relfrozenxid age per table**: one chart per key table (`bmsql_oorder`,
//!    `bmsql_order_line`, `bmsql_new_order`, `bmsql_history`, `bmsql_stock`,
//!    `bmsql_customer`) with every column (policy) overlaid, all six on the same scales:
//!    x = XIDs consumed, y = relfrozenxid age, from the per-second samples. Each autovacuum of
//!    the table is a marker on its policy's line at the XIDs where its log entry was read
//!    (○ ordinary, ◆ aggressive, ▲ outlined in red: to prevent wraparound); a dashed red line
//!    at `autovacuum_freeze_max_age` (the last `autovacuum_freeze_max_age=N` of the column's
//!    settings); a dashed vertical line where the first half ends (`halves[0].xids_at_end`),
//!    labelled "first half | second half", as on every chart over XIDs.
//! 3. **The freezing cliff**: pages frozen and WAL per autovacuum, each a stem at the XIDs of
//!    every autovacuum of every table, in one lane per policy on shared scales (lazy's
//!    aggressive and anti-wraparound autovacuums tower over eager's steady ones); their running
//!    sums with the policies overlaid.
//! 4. **WAL and table size**: cumulative WAL, each policy's WAL over lazy's at the same XIDs
//!    (the seed's ×1.040 after the first day, ×0.990 at the end), and the heap pages of all
//!    tables, over XIDs consumed.
//! 5. **Latency**: p99 per transaction type in each half, a labelled bar per policy.
//! 6. The report's tables ([`groups`]) and each column's autovacuum count.
//!
//! Every chart is over XIDs consumed, not seconds (the policies run the same requests, not at
//! the same speed), has a legend and axis units, and has one sentence under its title saying
//! what to look at; the sentences describe the mechanism, not one run's numbers. Charts of the
//! same kind share their scales and a policy has one colour everywhere (lazy blue, pg16
//! purple, eager green, adaptive orange, postgres grey; red only for wraparound), drawn by
//! [`crate::tpcc::charts`]. Nothing here changes the report's model: what a chart needs
//! (cumulative sums, ratios, the setting) is computed from it.

use std::fmt::Write as _;

use crate::tpcc::charts::{bar_table, esc, policy_color, short, Axis, BarSeries, Chart, Key, Mark, WRAPAROUND_RED};
use crate::tpcc::{groups, ColumnResult, TpccReport, VacuumEvent};

/// The tables whose relfrozenxid age is charted, with what to look at in each.
const KEY_TABLES: [(&str, &str); 6] = [
    (
        "bmsql_oorder",
        "Orders are inserted and later updated once by Delivery, then left alone: lazy leaves their \
         all-visible pages unfrozen, so its age climbs until an aggressive (◆) or anti-wraparound (▲) \
         autovacuum; eager freezes pages as they become all-visible, so its age falls at every autovacuum.",
    ),
    (
        "bmsql_order_line",
        "The largest insert-mostly table: under lazy its age climbs toward autovacuum_freeze_max_age and \
         falls only in aggressive or anti-wraparound autovacuums, which then freeze the most pages at once; \
         eager's falls at every autovacuum.",
    ),
    (
        "bmsql_new_order",
        "Rows are inserted and soon deleted by Delivery, so few pages stay all-visible and every \
         autovacuum scans most of the table: both policies can advance relfrozenxid at ordinary \
         autovacuums here.",
    ),
    (
        "bmsql_history",
        "Insert-only (one row per Payment): lazy's age climbs until an aggressive or anti-wraparound \
         autovacuum; eager's falls at every autovacuum.",
    ),
    (
        "bmsql_stock",
        "Updated in place by every New-Order: pages dirtied between autovacuums are scanned anyway, so \
         either policy's age can fall at an ordinary autovacuum; a climbing line means pages stayed \
         all-visible and were skipped.",
    ),
    (
        "bmsql_customer",
        "Updated in place by Payment and Delivery: as with stock, the age falls wherever autovacuum \
         scans every page that is not all-frozen, and climbs while all-visible pages are skipped.",
    ),
];

const HALF_W: f64 = 570.0;
const FULL_W: f64 = 1156.0;

const STYLE: &str = "body{font-family:sans-serif;margin:24px;max-width:1160px;color:#222}\
    h2{margin:28px 0 4px;border-bottom:1px solid #ccc}h3{margin:10px 0 2px;font-size:15px}\
    p.lead{margin:4px 0 10px;max-width:1000px;line-height:1.4}\
    p.what{margin:0 0 4px;color:#444;font-size:13px;line-height:1.35}\
    .grid{display:grid;grid-template-columns:repeat(2,570px);gap:6px 16px}.grid p.what{min-height:4.1em}\
    figure{margin:0}figure svg{display:block}\
    table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}\
    td:first-child,th:first-child{text-align:left}table.targets td,table.targets th{text-align:left}\
    .tables{display:flex;flex-wrap:wrap;gap:0 24px;align-items:flex-start}.met{color:#1f7a1f;font-weight:bold}.missed{color:#b00020;font-weight:bold}.na{color:#777}";

pub fn render(r: &TpccReport) -> String {
    let mut h = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>settle tpcc report</title>\
         <style>{STYLE}</style></head><body>"
    );
    heading(&mut h, r);
    targets(&mut h, r);
    let story = Story::new(r);
    if !story.cols.is_empty() {
        story.ages(&mut h);
        story.freezing(&mut h);
        story.wal_and_size(&mut h);
        story.latency(&mut h);
    }
    figures(&mut h, r);
    h.push_str("</body></html>\n");
    h
}

fn heading(h: &mut String, r: &TpccReport) {
    let m = &r.machine;
    let _ = write!(
        h,
        "<h1>settle tpcc</h1><p>TPC-C-like, {} warehouses, {} terminals, seed {}, aging {}; {} CPUs ({}), {} GiB, {}.",
        r.warehouses,
        r.terminals,
        r.seed,
        esc(&r.aging),
        m.cpus,
        esc(&m.cpu_model),
        m.memory_gib,
        esc(&m.os)
    );
    if let Some(n) = r.aging.split_once(':').and_then(|(_, n)| n.trim().parse::<u64>().ok()).filter(|&n| n > 1) {
        let _ = write!(
            h,
            " XIDs and ages are scaled 1:{n}: an age of 100k here stands for {} in PostgreSQL.",
            short(1e5 * n as f64)
        );
    }
    h.push_str("</p>");
    for (name, e) in &r.errors {
        let _ = write!(h, "<p class=\"missed\">{}: {}</p>", esc(name), esc(e));
    }
}

fn targets(h: &mut String, r: &TpccReport) {
    if r.targets.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Targets (seed 000: eager against lazy)</h2><table class=\"targets\">\
         <tr><th>target</th><th>measured</th><th>goal</th><th>verdict</th></tr>",
    );
    for t in &r.targets {
        let class = match t.verdict() {
            "MET" => "met",
            "MISSED" => "missed",
            _ => "na",
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td></tr>",
            esc(&t.name),
            esc(&t.value),
            esc(&t.goal),
            t.verdict()
        );
    }
    h.push_str("</table>");
}

/// A chart under its title and the one sentence saying what to look at.
fn figure(h: &mut String, id: &str, title: &str, what: &str, svg: &str) {
    let _ = write!(
        h,
        "<figure id=\"{}\"><h3>{}</h3><p class=\"what\">{}</p>{svg}</figure>",
        esc(id),
        esc(title),
        esc(what)
    );
}

/// `autovacuum_freeze_max_age` of a column: the last one in its settings.
fn freeze_max_age(c: &ColumnResult) -> Option<u64> {
    c.settings.iter().rev().find_map(|s| s.strip_prefix("autovacuum_freeze_max_age=")?.trim().parse().ok())
}

/// A byte count's unit for an axis whose largest value is `max` bytes: (divisor, name).
fn bytes_unit(max: f64) -> (f64, &'static str) {
    const KIB: f64 = 1024.0;
    if max >= 2.0 * KIB * KIB * KIB {
        (KIB * KIB * KIB, "GiB")
    } else if max >= 2.0 * KIB * KIB {
        (KIB * KIB, "MiB")
    } else {
        (KIB, "KiB")
    }
}

/// Every marker shape, for legends (the same on every chart, whether the data has it or not).
const MARKS: [Mark; 3] = [Mark::Autovacuum, Mark::Aggressive, Mark::AntiWraparound];

/// The columns with their colours, and the scale every chart over XIDs shares.
struct Story<'a> {
    cols: Vec<(&'a ColumnResult, &'static str)>,
    xids_max: f64,
}

impl<'a> Story<'a> {
    fn new(r: &'a TpccReport) -> Story<'a> {
        let cols: Vec<(&ColumnResult, &'static str)> = r
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.samples.is_empty())
            .map(|(i, c)| (c, policy_color(&c.name, i)))
            .collect();
        let xids_max = cols.iter().flat_map(|(c, _)| c.samples.iter().map(|s| s.xids)).max().unwrap_or(0) as f64;
        Story { cols, xids_max }
    }

    fn policy_keys(&self) -> Vec<Key> {
        self.cols.iter().map(|(c, color)| Key::Line(color, c.name.clone())).collect()
    }

    fn xids_axis(&self) -> Axis {
        Axis::new(self.xids_max, "XIDs consumed")
    }

    /// The end of the first half: one dashed line per distinct position among the columns
    /// (they run the same requests, so usually one), labelled once.
    fn halves(&self, c: &mut Chart) {
        let mut drawn: Vec<f64> = Vec::new();
        for (col, _) in &self.cols {
            let x = col.halves[0].xids_at_end as f64;
            if drawn.iter().all(|d| (d - x).abs() > self.xids_max * 0.005) {
                let (before, after) = if drawn.is_empty() { ("first half", "second half") } else { ("", "") };
                c.vline(x, before, after);
                drawn.push(x);
            }
        }
    }

    fn ages(&self, h: &mut String) {
        let index = |c: &ColumnResult, t: &str| c.table_names.iter().position(|n| n == t);
        let ages = KEY_TABLES.iter().flat_map(|(t, _)| {
            self.cols.iter().filter_map(move |(c, _)| {
                let i = index(c, t)?;
                c.samples.iter().map(|s| s.ages.get(i).copied().unwrap_or(0)).max()
            })
        });
        let fmas = self.cols.iter().filter_map(|(c, _)| freeze_max_age(c));
        let y_max = ages.chain(fmas).max().unwrap_or(0) as f64;
        h.push_str(
            "<h2>relfrozenxid age per table</h2><p class=\"lead\">One chart per table, all on the same scales: \
             x is XIDs consumed since the run began, y the table's relfrozenxid age, one line per policy. \
             A marker is one autovacuum of that table under that policy (○ ordinary, ◆ aggressive, \
             ▲ outlined in red: to prevent wraparound); a line that reaches the dashed red \
             autovacuum_freeze_max_age is due an anti-wraparound autovacuum.</p><div class=\"grid\">",
        );
        for (table, what) in KEY_TABLES {
            if self.cols.iter().any(|(c, _)| index(c, table).is_some()) {
                figure(h, &format!("age-{table}"), table, what, &self.age_chart(table, y_max));
            }
        }
        h.push_str("</div>");
    }

    fn age_chart(&self, table: &str, y_max: f64) -> String {
        let mut keys = self.policy_keys();
        keys.extend(MARKS.map(Key::Mark));
        let mut fmas: Vec<u64> = self.cols.iter().filter_map(|(c, _)| freeze_max_age(c)).collect();
        fmas.sort_unstable();
        fmas.dedup();
        if !fmas.is_empty() {
            keys.push(Key::Dashed(WRAPAROUND_RED, "autovacuum_freeze_max_age".into()));
        }
        let mut chart =
            Chart::new(HALF_W, 210.0, &self.xids_axis(), &Axis::new(y_max, "relfrozenxid age, XIDs"), &keys);
        self.halves(&mut chart);
        for f in fmas {
            chart.hline(f as f64, WRAPAROUND_RED, &format!("autovacuum_freeze_max_age = {}", short(f as f64)));
        }
        for (c, color) in &self.cols {
            let Some(i) = c.table_names.iter().position(|n| n == table) else { continue };
            let pts: Vec<(f64, f64)> =
                c.samples.iter().map(|s| (s.xids as f64, s.ages.get(i).copied().unwrap_or(0) as f64)).collect();
            chart.line(color, &pts);
            for v in c.vacuums.iter().filter(|v| v.table == table) {
                chart.mark(Mark::of(v.aggressive, v.wraparound), color, v.xids as f64, value_at(&pts, v.xids as f64));
            }
        }
        chart.finish()
    }

    /// Stems at every autovacuum of every table, `value / divisor` high, in one lane per column
    /// (all on the same scales; ordinary autovacuums of nothing left out), and the running sums
    /// overlaid.
    fn per_autovacuum(
        &self,
        value: fn(&VacuumEvent) -> f64,
        divisor: f64,
        lane_label: &str,
        total_label: &str,
    ) -> (String, String) {
        let y_max = self.cols.iter().flat_map(|(c, _)| c.vacuums.iter().map(value)).fold(0.0, f64::max) / divisor;
        let y_axis = Axis::new(y_max, lane_label);
        let mut lanes = String::new();
        let lane_h = if self.cols.len() <= 3 { 110.0 } else { 80.0 };
        let mut sums: Vec<(&str, Vec<(f64, f64)>)> = Vec::new();
        for (i, (c, color)) in self.cols.iter().enumerate() {
            let mut keys = vec![Key::Line(color, c.name.clone())];
            if i == 0 {
                keys.extend(MARKS.map(Key::Mark));
            }
            let last = i + 1 == self.cols.len();
            let x_axis = if last { self.xids_axis() } else { Axis::new(self.xids_max, "") };
            let mut lane = Chart::new(FULL_W, lane_h, &x_axis, &y_axis, &keys);
            self.halves(&mut lane);
            let mut vacuums: Vec<&VacuumEvent> = c.vacuums.iter().collect();
            vacuums.sort_by_key(|v| v.xids);
            let mut pts = vec![(0.0, 0.0)];
            let mut sum = 0.0;
            for v in vacuums {
                let (mark, y) = (Mark::of(v.aggressive, v.wraparound), value(v) / divisor);
                if y > 0.0 || mark != Mark::Autovacuum {
                    lane.stem(mark, color, v.xids as f64, y);
                }
                pts.push((v.xids as f64, sum));
                sum += y;
                pts.push((v.xids as f64, sum));
            }
            pts.push((c.samples.last().map_or(0, |s| s.xids) as f64, sum));
            sums.push((color, pts));
            lanes.push_str(&lane.finish());
        }
        let sum_max = sums.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).fold(0.0, f64::max);
        let mut total =
            Chart::new(HALF_W, 210.0, &self.xids_axis(), &Axis::new(sum_max, total_label), &self.policy_keys());
        self.halves(&mut total);
        for (color, pts) in &sums {
            total.line(color, pts);
        }
        (lanes, total.finish())
    }

    fn freezing(&self, h: &mut String) {
        h.push_str(
            "<h2>The freezing cliff: work per autovacuum</h2><p class=\"lead\">Every autovacuum of every \
             table at the XIDs where it ended, a lane per policy on the same scales, with the same markers \
             as above (ordinary autovacuums that froze nothing are left out); the cumulative charts add them \
             up.</p>",
        );
        let (stems, frozen) =
            self.per_autovacuum(|v| v.pages_frozen as f64, 1.0, "pages frozen", "pages frozen by autovacuum");
        figure(
            h,
            "pages-frozen",
            "Pages frozen per autovacuum",
            "Lazy freezes only tuples older than vacuum_freeze_min_age on the pages it scans, until aggressive \
             and anti-wraparound autovacuums freeze whole tables' worth of all-visible pages at once (the cliff, \
             often several big tables together); eager freezes each page it sets all-visible, a steadier amount \
             at every autovacuum.",
            &stems,
        );
        let max = self.cols.iter().flat_map(|(c, _)| c.vacuums.iter().map(|v| v.wal_bytes)).max().unwrap_or(0);
        let (divisor, unit) = bytes_unit(max as f64);
        let (stems, wal) = self.per_autovacuum(
            |v| v.wal_bytes as f64,
            divisor,
            &format!("WAL, {unit}"),
            &format!("WAL by autovacuum, {unit}"),
        );
        figure(
            h,
            "wal-per-autovacuum",
            "WAL per autovacuum",
            "An autovacuum's WAL grows with the pages it freezes and their full-page images, so the tall stems \
             are the same autovacuums as above: the cliff costs WAL at once.",
            &stems,
        );
        h.push_str("<div class=\"grid\">");
        figure(
            h,
            "pages-frozen-total",
            "Pages frozen by autovacuum, cumulative",
            "A step is an autovacuum that froze many pages at once; a steady slope is freezing spread over the run.",
            &frozen,
        );
        figure(
            h,
            "autovacuum-wal-total",
            "WAL written by autovacuum, cumulative",
            "Autovacuum's own WAL: eager pays for freezing as it goes, lazy in steps when it has to freeze.",
            &wal,
        );
        h.push_str("</div>");
    }

    /// One line per column over XIDs consumed.
    fn lines(&self, points: &dyn Fn(&ColumnResult) -> Vec<(f64, f64)>, y_label: &str) -> String {
        let series: Vec<(&str, Vec<(f64, f64)>)> = self.cols.iter().map(|(c, color)| (*color, points(c))).collect();
        let y_max = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).fold(0.0, f64::max);
        let mut chart = Chart::new(HALF_W, 210.0, &self.xids_axis(), &Axis::new(y_max, y_label), &self.policy_keys());
        self.halves(&mut chart);
        for (color, pts) in &series {
            chart.line(color, pts);
        }
        chart.finish()
    }

    fn wal_and_size(&self, h: &mut String) {
        h.push_str("<h2>WAL and table size</h2><div class=\"grid\">");
        let max = self.cols.iter().flat_map(|(c, _)| c.samples.iter().map(|s| s.wal_bytes)).max().unwrap_or(0);
        let unit = bytes_unit(max as f64);
        let wal = |c: &ColumnResult| -> Vec<(f64, f64)> {
            let pts = c.samples.iter().map(|s| (s.xids as f64, s.wal_bytes as f64 / unit.0));
            std::iter::once((0.0, 0.0)).chain(pts).collect()
        };
        figure(
            h,
            "wal-total",
            "WAL written, cumulative",
            "All WAL, the workload's included: eager pays for freezing early, lazy when its aggressive \
             autovacuums freeze the same pages later.",
            &self.lines(&wal, &format!("WAL, {}", unit.1)),
        );
        if let Some((reference, svg)) = self.wal_ratio() {
            figure(
                h,
                "wal-ratio",
                &format!("WAL relative to {reference}"),
                &format!(
                    "Each policy's WAL over {reference}'s at the same XIDs consumed: above 1 it has written more \
                     so far. Seed 000's eager stood at ×1.040 lazy's after the first day and ×0.990 at the end."
                ),
                &svg,
            );
        }
        let pages = |c: &ColumnResult| -> Vec<(f64, f64)> {
            c.samples.iter().map(|s| (s.xids as f64, s.heap_pages.iter().sum::<u64>() as f64)).collect()
        };
        figure(
            h,
            "heap-pages",
            "Table size",
            "Heap pages of all tables together for the same requests: a line that climbs faster is a policy \
             whose vacuuming let less free space be reused.",
            &self.lines(&pages, "heap pages (8 KiB), all tables"),
        );
        h.push_str("</div>");
    }

    /// Each column's WAL over the reference column's (lazy, else the first) at the same XIDs
    /// consumed, from 5% of the run on (before that, both are too small for a ratio to mean
    /// much): the reference's name and the chart.
    fn wal_ratio(&self) -> Option<(String, String)> {
        if self.cols.len() < 2 {
            return None;
        }
        let (reference, _) = self.cols.iter().find(|(c, _)| c.name == "lazy").unwrap_or(&self.cols[0]);
        let base: Vec<(f64, f64)> = reference.samples.iter().map(|s| (s.xids as f64, s.wal_bytes as f64)).collect();
        let end = base.last()?.0;
        let series: Vec<(&str, Vec<(f64, f64)>)> = self
            .cols
            .iter()
            .map(|(c, color)| {
                let pts = c.samples.iter().map(|s| (s.xids as f64, s.wal_bytes as f64));
                let pts = pts.filter(|&(x, _)| x >= 0.05 * self.xids_max && x <= end);
                let ratios = pts.filter_map(|(x, w)| {
                    let b = value_at(&base, x);
                    (b > 0.0).then_some((x, w / b))
                });
                (*color, ratios.collect())
            })
            .collect();
        let ys = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1));
        let (lo, hi) = ys.fold((1.0f64, 1.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
        let pad = (hi - lo).max(0.01) * 0.05;
        let y_axis = Axis::range(lo - pad, hi + pad, format!("WAL / {}'s WAL", reference.name));
        let mut chart = Chart::new(HALF_W, 210.0, &self.xids_axis(), &y_axis, &self.policy_keys());
        self.halves(&mut chart);
        for (color, pts) in &series {
            chart.line(color, pts);
        }
        Some((reference.name.clone(), chart.finish()))
    }

    fn latency(&self, h: &mut String) {
        h.push_str("<h2>Latency</h2>");
        let Some((first, _)) = self.cols.first() else { return };
        let kinds: Vec<String> = first.run.kinds.iter().map(|k| k.kind.to_string()).collect();
        let series: Vec<BarSeries> = self
            .cols
            .iter()
            .map(|(c, color)| BarSeries {
                name: c.name.clone(),
                color,
                values: (0..2)
                    .map(|half| {
                        kinds
                            .iter()
                            .map(|k| {
                                c.run.kinds.iter().find(|x| x.kind == k).map_or(f64::NAN, |x| x.halves[half].p99_ms)
                            })
                            .collect()
                    })
                    .collect(),
            })
            .collect();
        let svg = bar_table(&kinds, &["p99, first half".into(), "p99, second half".into()], "ms", &series);
        figure(
            h,
            "latency",
            "p99 latency per transaction type and half",
            "A bar per policy; a row's bars share one scale. Seed 000's claim is ORDER_STATUS in the second \
             half: once order pages stay all-visible, its index-only scans skip the heap.",
            &svg,
        );
    }
}

/// The line through `pts` (in x order) at `x`, for a marker on it.
fn value_at(pts: &[(f64, f64)], x: f64) -> f64 {
    let i = pts.partition_point(|p| p.0 < x);
    match (i.checked_sub(1).and_then(|j| pts.get(j)), pts.get(i)) {
        (Some(a), Some(b)) if b.0 > a.0 => a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0),
        (_, Some(b)) => b.1,
        (Some(a), None) => a.1,
        (None, None) => 0.0,
    }
}

/// The report's tables, as the text report has them, and each column's autovacuums.
fn figures(h: &mut String, r: &TpccReport) {
    h.push_str("<h2>Figures</h2><div class=\"tables\">");
    for g in groups(r) {
        let _ = write!(h, "<table><tr><th>{}</th>", esc(&g.title));
        for c in &r.columns {
            let _ = write!(h, "<th>{}</th>", esc(&c.name));
        }
        h.push_str("</tr>");
        for (label, values) in &g.rows {
            let _ = write!(h, "<tr><td>{}</td>", esc(label));
            for v in values {
                let _ = write!(h, "<td>{}</td>", esc(v));
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");
    }
    h.push_str("</div><h2>Autovacuums</h2>");
    for c in &r.columns {
        let wrap = c.vacuums.iter().filter(|v| v.wraparound).count();
        let _ = write!(
            h,
            "<p>{}: {} autovacuums, {} of them to prevent wraparound.</p>",
            esc(&c.name),
            c.vacuums.len(),
            wrap
        );
    }
}

#[cfg(test)]
mod tests;
