//! The HTML report's tests: a small run built by hand (two policies, one of them with an
//! anti-wraparound and an aggressive autovacuum), rendered and read back as text; and a way
//! to re-render the charts of a saved `report.json`.

use super::*;
use crate::tpcc::{HalfResult, Sample, Target};
use workload::tpcc::run::{KindResult, Lateness, Mix, Quantiles, RunResult, TxKind};

const TABLES: [&str; 7] = [
    "bmsql_customer",
    "bmsql_history",
    "bmsql_new_order",
    "bmsql_oorder",
    "bmsql_order_line",
    "bmsql_stock",
    "pg_class",
];

fn run(p99_ms: [f64; 2]) -> RunResult {
    let q = |p99_ms| Quantiles { count: 10, p99_ms, ..Quantiles::default() };
    let kind = |k: TxKind| KindResult {
        kind: k.name(),
        count: 20,
        rolled_back: 0,
        retries: 0,
        per_second: 1.0,
        p50_ms: 0.1,
        p95_ms: 0.2,
        p99_ms: p99_ms[1],
        max_ms: 9.0,
        halves: [q(p99_ms[0]), q(p99_ms[1])],
        access: None,
    };
    RunResult {
        seconds: 20.0,
        transactions: 10_000,
        tps: 500.0,
        tpmc: 13_500.0,
        rate_limit: Some(500.0),
        late: Lateness::default(),
        kinds: TxKind::ALL.into_iter().map(kind).collect(),
    }
}

/// A column whose every table ages by one XID per XID consumed, 20,000 in all, with
/// autovacuum_freeze_max_age set twice (the last one, 20,000, wins).
fn column(name: &str, vacuums: Vec<VacuumEvent>) -> ColumnResult {
    let samples = (0..=20u64)
        .map(|i| Sample {
            seconds: i as f64,
            xids: i * 1000,
            wal_bytes: i * 3_000_000,
            transactions: i * 500,
            autovacuums_running: 0,
            ages: vec![i * 1000; TABLES.len()],
            heap_pages: vec![100 + i; TABLES.len()],
        })
        .collect();
    let half = |xids_at_end| HalfResult { xids_at_end, ..HalfResult::default() };
    ColumnResult {
        name: name.into(),
        settings: vec!["autovacuum_freeze_max_age=100000".into(), "autovacuum_freeze_max_age=20000".into()],
        setup_vacuum_seconds: 0.0,
        run: run(if name == "eager" { [0.2, 0.3] } else { [0.4, 3.5] }),
        xids_consumed: 20_000,
        db: Default::default(),
        tables: Vec::new(),
        table_names: TABLES.iter().map(|t| t.to_string()).collect(),
        samples,
        vacuums,
        halves: [half(10_000), half(20_000)],
        consistency_violations: Vec::new(),
        check: String::new(),
        check_problems: Vec::new(),
        other_log_entries: Vec::new(),
    }
}

fn vacuum(table: &str, xids: u64, aggressive: bool, wraparound: bool) -> VacuumEvent {
    VacuumEvent {
        seconds: xids as f64 / 1000.0,
        transactions: xids / 2,
        xids,
        half: usize::from(xids > 10_000),
        table: table.into(),
        wraparound,
        aggressive,
        removable_cutoff: None,
        new_relfrozenxid: None,
        pages_scanned: 50,
        pages_frozen: if aggressive { 40 } else { 5 },
        wal_bytes: if aggressive { 4_000_000 } else { 300_000 },
        wal_fpi: 0,
        elapsed_seconds: 0.1,
    }
}

fn report(columns: Vec<ColumnResult>) -> TpccReport {
    let target = |name: &str, met, applies| Target {
        name: name.into(),
        value: "1".into(),
        goal: "<= 1.0".into(),
        met,
        applies,
        informational: false,
    };
    TpccReport {
        benchmark: "tpcc",
        machine: Default::default(),
        warehouses: 1,
        terminals: 2,
        seed: 42,
        aging: "1:2000".into(),
        mix: Mix::default(),
        nurand: workload::rng::NurandConstants::from_seed(42),
        load_seconds: None,
        columns,
        targets: vec![target("kept", true, true), target("wal", false, true), target("heap", false, false)],
        errors: Vec::new(),
    }
}

/// Lazy: an ordinary autovacuum of oorder, then one to prevent wraparound, and an aggressive
/// one of order_line. Eager: ordinary autovacuums of both, three times.
fn lazy_and_eager() -> TpccReport {
    let lazy = column(
        "lazy",
        vec![
            vacuum("bmsql_oorder", 5000, false, false),
            vacuum("bmsql_order_line", 15_000, true, false),
            vacuum("bmsql_oorder", 18_000, true, true),
        ],
    );
    let eager = column(
        "eager",
        [5000, 10_000, 15_000]
            .into_iter()
            .flat_map(|x| [vacuum("bmsql_oorder", x, false, false), vacuum("bmsql_order_line", x, false, false)])
            .collect(),
    );
    report(vec![lazy, eager])
}

/// The `<figure>` with this id.
fn figure_of<'h>(html: &'h str, id: &str) -> &'h str {
    let start = html.find(&format!("<figure id=\"{id}\"")).unwrap_or_else(|| panic!("no figure {id}"));
    let len = html[start..].find("</figure>").expect("figures close");
    &html[start..start + len]
}

/// The y axis's tick labels of a chart (right-aligned texts without other attributes).
fn y_ticks(svg: &str) -> Vec<&str> {
    svg.split("text-anchor=\"end\">").skip(1).filter_map(|s| s.split('<').next()).collect()
}

#[test]
fn every_key_table_has_one_chart_with_the_freeze_max_age_line_and_the_halves() {
    let html = render(&lazy_and_eager());
    for (t, _) in KEY_TABLES {
        assert_eq!(html.matches(&format!("<figure id=\"age-{t}\"")).count(), 1, "{t}");
        let f = figure_of(&html, &format!("age-{t}"));
        assert_eq!(f.matches("class=\"hline\"").count(), 1, "{t}: one freeze_max_age line");
        assert!(f.contains("autovacuum_freeze_max_age = 20k"), "{t}: the last setting wins");
        assert_eq!(f.matches("class=\"vline\"").count(), 1, "{t}: the halves coincide");
        assert!(f.contains(">first half<") && f.contains(">second half<"));
        assert_eq!(f.matches("<polyline").count(), 2, "{t}: one line per policy");
    }
    assert!(!html.contains("age-pg_class"), "only the key tables are charted");
    assert!(html.contains("relfrozenxid age"));
}

#[test]
fn anti_wraparound_markers_appear_only_where_the_data_has_them() {
    let html = render(&lazy_and_eager());
    let oorder = figure_of(&html, "age-bmsql_oorder");
    assert_eq!(oorder.matches("class=\"wraparound\"").count(), 1);
    let marker = &oorder[oorder.find("class=\"wraparound\"").unwrap()..];
    assert!(marker.contains(&format!("fill=\"{}\" stroke=\"{WRAPAROUND_RED}\"", policy_color("lazy", 0))));
    assert_eq!(oorder.matches("class=\"av\"").count(), 1 + 3, "lazy's ordinary one and eager's three");
    let order_line = figure_of(&html, "age-bmsql_order_line");
    assert_eq!(order_line.matches("class=\"wraparound\"").count(), 0);
    assert_eq!(order_line.matches("class=\"aggressive\"").count(), 1);
    for t in ["bmsql_new_order", "bmsql_history", "bmsql_stock", "bmsql_customer"] {
        let f = figure_of(&html, &format!("age-{t}"));
        assert!(!f.contains("class=\"wraparound\""), "{t}");
    }
    for id in ["pages-frozen", "wal-per-autovacuum"] {
        assert_eq!(figure_of(&html, id).matches("class=\"wraparound\"").count(), 1, "{id}");
    }
    let eager_only = render(&report(vec![column("eager", vec![vacuum("bmsql_oorder", 5000, false, false)])]));
    assert!(!eager_only.contains("class=\"wraparound\""));
}

#[test]
fn policies_keep_one_colour_and_age_charts_share_scales() {
    let html = render(&lazy_and_eager());
    let (lazy, eager) = (policy_color("lazy", 0), policy_color("eager", 1));
    assert_ne!(lazy, eager);
    let first = y_ticks(figure_of(&html, "age-bmsql_oorder"));
    assert_eq!(first.last(), Some(&"20k"), "from zero to freeze_max_age: {first:?}");
    for (t, _) in KEY_TABLES {
        let f = figure_of(&html, &format!("age-{t}"));
        assert_eq!(y_ticks(f), first, "{t}");
        assert!(f.contains(&format!("stroke=\"{lazy}\" stroke-width=\"1.8\"")), "{t}");
        assert!(f.contains(&format!("stroke=\"{eager}\" stroke-width=\"1.8\"")), "{t}");
    }
    for id in ["pages-frozen", "wal-total", "heap-pages", "latency"] {
        let f = figure_of(&html, id);
        assert!(f.contains(lazy) && f.contains(eager) && f.contains(">lazy<") && f.contains(">eager<"), "{id}");
    }
}

#[test]
fn targets_come_first_with_their_verdicts() {
    let html = render(&lazy_and_eager());
    let targets = html.find("<h2>Targets").expect("a targets table");
    assert!(targets < html.find("<svg").unwrap());
    for verdict in ["<td class=\"met\">MET</td>", "<td class=\"missed\">MISSED</td>", "<td class=\"na\">n/a</td>"] {
        assert!(html.contains(verdict), "{verdict}");
    }
}

#[test]
fn latency_shows_p99_per_half_and_policy() {
    let html = render(&lazy_and_eager());
    let f = figure_of(&html, "latency");
    assert!(f.contains(">ORDER_STATUS<") && f.contains("p99, second half"));
    assert!(f.contains(">3.50 ms<") && f.contains(">0.30 ms<") && f.contains(">0.40 ms<"));
}

#[test]
fn names_are_escaped_and_the_page_is_self_contained() {
    let mut r = report(vec![column("x<y&z", vec![vacuum("bmsql_oorder", 1000, false, false)])]);
    r.errors.push(("pg".into(), "failed: <boom>".into()));
    let html = render(&r);
    assert!(html.contains("x&lt;y&amp;z") && !html.contains("x<y&z"));
    assert!(html.contains("&lt;= 1.0") && html.contains("failed: &lt;boom&gt;"));
    assert!(html.contains("<svg") && !html.contains("<script") && !html.contains(" src="));
    assert!(!html.contains("href=") && !html.contains("url("));
}

#[test]
fn markers_sit_on_their_line() {
    let pts = [(0.0, 0.0), (10.0, 100.0), (20.0, 50.0)];
    assert_eq!(value_at(&pts, 10.0), 100.0);
    assert_eq!(value_at(&pts, 15.0), 75.0);
    assert_eq!(value_at(&pts, 30.0), 50.0);
    assert_eq!(value_at(&[], 1.0), 0.0);
    assert_eq!(bytes_unit(3e9).1, "GiB");
    assert_eq!(bytes_unit(5e6).1, "MiB");
}

#[test]
fn wal_is_also_shown_relative_to_lazy() {
    let mut r = lazy_and_eager();
    for s in &mut r.columns[1].samples {
        s.wal_bytes = s.wal_bytes * 104 / 100;
    }
    let html = render(&r);
    let f = figure_of(&html, "wal-ratio");
    assert!(f.contains("WAL relative to lazy") && f.contains("WAL / lazy's WAL"));
    let ticks = y_ticks(f);
    assert!(ticks.contains(&"1") && ticks.contains(&"1.04"), "{ticks:?}");
    assert!(!render(&report(vec![column("eager", Vec::new())])).contains("wal-ratio"), "one column, no ratio");
}
