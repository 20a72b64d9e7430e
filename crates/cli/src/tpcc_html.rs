//! The HTML report of `settle tpcc`: one self-contained file (inline SVG charts and styles, no
//! scripts, nothing fetched), readable offline.
//!
//! Charts: relfrozenxid age of every table over XIDs consumed (one chart per column), WAL
//! bytes over time, heap pages of all tables over time, and p95 latency per transaction type;
//! then the report's tables and the targets.

use std::fmt::Write as _;

use crate::tpcc::{groups, TpccReport};

const PALETTE: [&str; 10] =
    ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A "nice" step for about five ticks over `[0, max]`.
fn tick_step(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    let nice = if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// A line chart of `series` (name, points), axes from zero.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[(String, Vec<(f64, f64)>)]) -> String {
    let (w, h) = (640.0, 320.0);
    let (left, right, top, bottom) = (64.0, 150.0, 28.0, 40.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let xmax = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)).fold(0.0, f64::max);
    let ymax = series.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)).fold(0.0, f64::max);
    let (xs, ys) = (tick_step(xmax), tick_step(ymax));
    let (xtop, ytop) = ((xmax / xs).ceil().max(1.0) * xs, (ymax / ys).ceil().max(1.0) * ys);
    let px = |x: f64| left + x / xtop * pw;
    let py = |y: f64| top + ph - y / ytop * ph;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(s, r#"<text x="{}" y="16" font-size="13" font-weight="bold">{}</text>"#, left, esc(title));
    let mut x = 0.0;
    while x <= xtop + xs / 2.0 {
        let _ = write!(
            s,
            r##"<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#ddd"/><text x="{0}" y="{3}" text-anchor="middle">{4}</text>"##,
            px(x),
            top,
            top + ph,
            top + ph + 14.0,
            short(x)
        );
        x += xs;
    }
    let mut y = 0.0;
    while y <= ytop + ys / 2.0 {
        let _ = write!(
            s,
            r##"<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="#ddd"/><text x="{3}" y="{4}" text-anchor="end">{5}</text>"##,
            left,
            py(y),
            left + pw,
            left - 4.0,
            py(y) + 4.0,
            short(y)
        );
        y += ys;
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text><text transform="translate(14 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        left + pw / 2.0,
        h - 6.0,
        esc(x_label),
        top + ph / 2.0,
        esc(y_label)
    );
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let path: Vec<String> = pts.iter().map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y))).collect();
        let _ = write!(s, r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#, path.join(" "));
        let ly = top + 12.0 + 15.0 * i as f64;
        let _ = write!(
            s,
            r#"<rect x="{}" y="{}" width="10" height="3" fill="{color}"/><text x="{}" y="{}">{}</text>"#,
            left + pw + 10.0,
            ly - 4.0,
            left + pw + 24.0,
            ly,
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

/// A grouped bar chart: one group per label, one bar per series.
pub fn bar_chart(title: &str, y_label: &str, labels: &[String], series: &[(String, Vec<f64>)]) -> String {
    let (w, h) = (640.0, 300.0);
    let (left, right, top, bottom) = (64.0, 150.0, 28.0, 44.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let ymax = series.iter().flat_map(|(_, v)| v.iter().copied()).fold(0.0, f64::max);
    let ys = tick_step(ymax);
    let ytop = (ymax / ys).ceil().max(1.0) * ys;
    let py = |y: f64| top + ph - y / ytop * ph;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(s, r#"<text x="{left}" y="16" font-size="13" font-weight="bold">{}</text>"#, esc(title));
    let mut y = 0.0;
    while y <= ytop + ys / 2.0 {
        let _ = write!(
            s,
            r##"<line x1="{left}" y1="{0}" x2="{1}" y2="{0}" stroke="#ddd"/><text x="{2}" y="{3}" text-anchor="end">{4}</text>"##,
            py(y),
            left + pw,
            left - 4.0,
            py(y) + 4.0,
            short(y)
        );
        y += ys;
    }
    let _ = write!(
        s,
        r#"<text transform="translate(14 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        top + ph / 2.0,
        esc(y_label)
    );
    let group_w = pw / labels.len().max(1) as f64;
    let bar_w = group_w * 0.8 / series.len().max(1) as f64;
    for (g, label) in labels.iter().enumerate() {
        let gx = left + g as f64 * group_w + group_w * 0.1;
        for (i, (_, values)) in series.iter().enumerate() {
            let v = values.get(g).copied().unwrap_or(0.0);
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"/>"#,
                gx + i as f64 * bar_w,
                py(v),
                bar_w,
                top + ph - py(v),
                PALETTE[i % PALETTE.len()]
            );
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle" font-size="9">{}</text>"#,
            gx + group_w * 0.4,
            top + ph + 14.0,
            esc(label)
        );
    }
    for (i, (name, _)) in series.iter().enumerate() {
        let ly = top + 12.0 + 15.0 * i as f64;
        let _ = write!(
            s,
            r#"<rect x="{}" y="{}" width="10" height="8" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            left + pw + 10.0,
            ly - 8.0,
            PALETTE[i % PALETTE.len()],
            left + pw + 24.0,
            ly,
            esc(name)
        );
    }
    s.push_str("</svg>");
    s
}

pub fn render(r: &TpccReport) -> String {
    let mut h = String::from(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>settle tpcc report</title><style>\
         body{font-family:sans-serif;margin:24px;max-width:1100px}table{border-collapse:collapse;margin:8px 0 20px}\
         td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,th:first-child{text-align:left}\
         .met{color:#2a7d2a}.missed{color:#b00020;font-weight:bold}svg{margin:8px 0}</style></head><body>",
    );
    let m = &r.machine;
    let _ = write!(
        h,
        "<h1>settle tpcc</h1><p>TPC-C-like, {} warehouses, {} terminals, seed {}, aging {}; {} CPUs ({}), {} GiB, {}.</p>",
        r.warehouses,
        r.terminals,
        r.seed,
        esc(&r.aging),
        m.cpus,
        esc(&m.cpu_model),
        m.memory_gib,
        esc(&m.os)
    );
    if !r.targets.is_empty() {
        h.push_str("<h2>Targets (seed 000: eager against lazy)</h2><table><tr><th>target</th><th>measured</th><th>goal</th><th></th></tr>");
        for t in &r.targets {
            let (class, word) = if t.met { ("met", "met") } else { ("missed", "MISSED") };
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{word}</td></tr>",
                esc(&t.name),
                esc(&t.value),
                esc(&t.goal)
            );
        }
        h.push_str("</table>");
    }
    h.push_str("<h2>relfrozenxid age over XIDs consumed</h2>");
    for c in &r.columns {
        let series: Vec<(String, Vec<(f64, f64)>)> = c
            .table_names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let pts = c.samples.iter().map(|s| (s.xids as f64, s.ages.get(i).copied().unwrap_or(0) as f64));
                (n.trim_start_matches("bmsql_").to_string(), pts.collect())
            })
            .collect();
        h.push_str(&line_chart(
            &format!("{}: relfrozenxid age per table", c.name),
            "XIDs consumed",
            "age (XIDs)",
            &series,
        ));
    }
    let per_column = |f: &dyn Fn(&crate::tpcc::Sample) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        r.columns.iter().map(|c| (c.name.clone(), c.samples.iter().map(|s| (s.seconds, f(s))).collect())).collect()
    };
    h.push_str("<h2>WAL and table size over time</h2>");
    h.push_str(&line_chart("WAL written", "seconds", "bytes", &per_column(&|s| s.wal_bytes as f64)));
    h.push_str(&line_chart(
        "heap pages, all tables",
        "seconds",
        "pages",
        &per_column(&|s| s.heap_pages.iter().sum::<u64>() as f64),
    ));
    h.push_str("<h2>Latency</h2>");
    let kinds: Vec<String> =
        r.columns.first().map(|c| c.run.kinds.iter().map(|k| k.kind.to_string()).collect()).unwrap_or_default();
    let p95: Vec<(String, Vec<f64>)> =
        r.columns.iter().map(|c| (c.name.clone(), c.run.kinds.iter().map(|k| k.p95_ms).collect())).collect();
    h.push_str(&bar_chart("p95 latency per transaction type", "ms", &kinds, &p95));
    let p99: Vec<(String, Vec<f64>)> =
        r.columns.iter().map(|c| (c.name.clone(), c.run.kinds.iter().map(|k| k.p99_ms).collect())).collect();
    h.push_str(&bar_chart("p99 latency per transaction type", "ms", &kinds, &p99));
    h.push_str("<h2>Figures</h2>");
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
    h.push_str("<h2>Autovacuums</h2>");
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
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(1000.0), 200.0);
        assert_eq!(tick_step(7.0), 2.0);
        assert_eq!(tick_step(0.0), 1.0);
    }

    #[test]
    fn charts_escape_names_and_draw_every_series() {
        let svg = line_chart("a<b", "x", "y", &[("s&1".into(), vec![(0.0, 1.0), (2.0, 3.0)]), ("s2".into(), vec![])]);
        assert!(svg.contains("a&lt;b") && svg.contains("s&amp;1"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        let bars = bar_chart("t", "ms", &["A".into(), "B".into()], &[("p".into(), vec![1.0, 2.0])]);
        assert_eq!(bars.matches("<rect").count(), 3);
    }
}
