//! The SVG drawing of `settle tpcc`'s HTML report ([`crate::tpcc::html`] decides what to draw).
//!
//! Every chart is plain inline SVG, sized in CSS pixels, with its legend above the plot:
//!
//! ```text
//!   ── lazy  ── eager  ○ autovacuum  ◆ aggressive  ▲ anti-wraparound  ╌╌ freeze max age   <- keys
//!   ┌──────────────────────────┊────────────────────────────┐
//!   │ first half               ┊ second half                │ <- `vline` (the halves)
//!   │╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌┊╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌│ <- `hline` (a setting)
//!   │    /|    /▲      ○──○──○─┊──○──○                      │ <- `line`, `mark`, `stem`
//!   └──────────────────────────┊────────────────────────────┘
//!   0        100k       200k       300k   XIDs consumed       <- axes from zero, round ticks
//! ```
//!
//! A [`Chart`] maps data to pixels with each axis running from zero (or, for an
//! [`Axis::range`], the round tick at or below its minimum) to the round tick at or above its
//! maximum, so two charts given the same maxima have the same scales (the report passes
//! shared maxima so that policies and tables can be compared by eye). A policy keeps its colour on every chart ([`policy_color`]); red is kept
//! for anti-wraparound autovacuums and the line that triggers them.

use std::fmt::Write as _;

/// Anti-wraparound autovacuums and `autovacuum_freeze_max_age` (no policy is drawn in red).
pub const WRAPAROUND_RED: &str = "#d62728";

const GRID: &str = "#e4e4e4";
const INK: &str = "#333";
const CHAR_W: f64 = 6.2;

/// Text for HTML and SVG content and attribute values.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The colour of a report column: fixed for the known policies and PostgreSQL, else the
/// `index`th of a few others, so that a column looks the same on every chart.
pub fn policy_color(name: &str, index: usize) -> &'static str {
    const OTHERS: [&str; 4] = ["#8c564b", "#e377c2", "#17becf", "#bcbd22"];
    match name {
        "lazy" => "#1f77b4",
        "pg16" => "#9467bd",
        "eager" => "#2ca02c",
        "adaptive" => "#ff7f0e",
        "postgres" => "#555555",
        _ => OTHERS[index % OTHERS.len()],
    }
}

/// A "nice" step (1, 2, 2.5 or 5 times a power of ten) for about five ticks over `[0, max]`.
pub fn tick_step(max: f64) -> f64 {
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
    } else if n <= 2.5 {
        2.5
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// A tick label: `2.5k`, `100k`, `1.25M`, `0.995`.
pub fn short(v: f64) -> String {
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let mut s = format!("{scaled:.3}");
    while s.contains('.') && (s.ends_with('0') || s.ends_with('.')) {
        s.pop();
    }
    s + suffix
}

/// How an autovacuum is marked where it happened.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mark {
    /// Hollow circle.
    Autovacuum,
    /// Aggressive (scans every page not all-frozen) but not to prevent wraparound: diamond.
    Aggressive,
    /// To prevent wraparound: a triangle outlined in red.
    AntiWraparound,
}

impl Mark {
    pub fn of(aggressive: bool, wraparound: bool) -> Mark {
        match (wraparound, aggressive) {
            (true, _) => Mark::AntiWraparound,
            (false, true) => Mark::Aggressive,
            (false, false) => Mark::Autovacuum,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mark::Autovacuum => "autovacuum",
            Mark::Aggressive => "aggressive autovacuum",
            Mark::AntiWraparound => "anti-wraparound autovacuum",
        }
    }

    /// The class of a marker on a chart (legend swatches have none), so tests can count them.
    pub fn class(self) -> &'static str {
        match self {
            Mark::Autovacuum => "av",
            Mark::Aggressive => "aggressive",
            Mark::AntiWraparound => "wraparound",
        }
    }

    /// The marker centred on `(x, y)`.
    fn svg(self, color: &str, x: f64, y: f64, class: &str) -> String {
        match self {
            Mark::Autovacuum => format!(
                r#"<circle class="{class}" cx="{x:.1}" cy="{y:.1}" r="3" fill="white" stroke="{color}" stroke-width="1.5"/>"#
            ),
            Mark::Aggressive => {
                let d = 4.5;
                format!(
                    r#"<polygon class="{class}" points="{:.1},{y:.1} {x:.1},{:.1} {:.1},{y:.1} {x:.1},{:.1}" fill="{color}" stroke="{INK}" stroke-width="0.8"/>"#,
                    x - d,
                    y - d,
                    x + d,
                    y + d
                )
            }
            Mark::AntiWraparound => {
                let d = 6.0;
                format!(
                    r#"<polygon class="{class}" points="{x:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{color}" stroke="{WRAPAROUND_RED}" stroke-width="2"/>"#,
                    y - d,
                    x + d,
                    y + d * 0.75,
                    x - d,
                    y + d * 0.75
                )
            }
        }
    }
}

/// One entry of a chart's legend.
pub enum Key {
    /// A series drawn as a line (or stems) in this colour.
    Line(&'static str, String),
    /// A marker shape, drawn in grey.
    Mark(Mark),
    /// A dashed reference line in this colour.
    Dashed(&'static str, String),
}

impl Key {
    fn label(&self) -> &str {
        match self {
            Key::Line(_, s) | Key::Dashed(_, s) => s,
            Key::Mark(m) => m.name(),
        }
    }

    fn width(&self) -> f64 {
        24.0 + CHAR_W * self.label().chars().count() as f64 + 14.0
    }

    fn svg(&self, x: f64, y: f64) -> String {
        let swatch = match self {
            Key::Line(c, _) => format!(r#"<rect x="{x}" y="{}" width="16" height="3" fill="{c}"/>"#, y - 4.0),
            Key::Dashed(c, _) => format!(
                r#"<line x1="{x}" y1="{0}" x2="{1}" y2="{0}" stroke="{c}" stroke-width="1.5" stroke-dasharray="4 3"/>"#,
                y - 3.0,
                x + 16.0
            ),
            Key::Mark(m) => m.svg("#aaaaaa", x + 8.0, y - 3.0, ""),
        };
        format!(r#"{swatch}<text x="{}" y="{}">{}</text>"#, x + 22.0, y + 1.0, esc(self.label()))
    }
}

/// One axis: the values to show (the axis runs between the round ticks around them) and its
/// label with units.
pub struct Axis {
    pub min: f64,
    pub max: f64,
    pub label: String,
}

impl Axis {
    /// From zero to `max`.
    pub fn new(max: f64, label: impl Into<String>) -> Axis {
        Axis { min: 0.0, max, label: label.into() }
    }

    /// From `min` to `max`, for values far from zero (ratios near 1).
    pub fn range(min: f64, max: f64, label: impl Into<String>) -> Axis {
        Axis { min, max, label: label.into() }
    }

    /// (step, bottom, top): round ticks from the last at or below `min` to the first at or
    /// above `max`.
    fn ticks(&self) -> (f64, f64, f64) {
        let step = tick_step(self.max - self.min);
        let bottom = (self.min / step).floor() * step;
        (step, bottom, ((self.max / step).ceil() * step).max(bottom + step))
    }
}

/// A chart with round axes, a legend above the plot, drawn element by element.
pub struct Chart {
    width: f64,
    height: f64,
    left: f64,
    top: f64,
    plot_w: f64,
    plot_h: f64,
    x_bottom: f64,
    x_top: f64,
    y_bottom: f64,
    y_top: f64,
    /// Grid, axes and legend; then lines; then markers (drawn last, over every line).
    frame: String,
    lines: String,
    marks: String,
}

impl Chart {
    /// `width` and the plot's height in pixels; the legend's rows are added above.
    pub fn new(width: f64, plot_h: f64, x: &Axis, y: &Axis, keys: &[Key]) -> Chart {
        let (left, right) = (58.0, 16.0);
        let bottom = if x.label.is_empty() { 22.0 } else { 38.0 };
        let plot_w = width - left - right;
        // Lay the keys out in rows as wide as the plot.
        let mut rows: Vec<Vec<&Key>> = vec![Vec::new()];
        let mut used = 0.0;
        for k in keys {
            if used + k.width() > plot_w && used > 0.0 {
                rows.push(Vec::new());
                used = 0.0;
            }
            used += k.width();
            rows.last_mut().expect("one row at least").push(k);
        }
        let top = 8.0 + 16.0 * rows.len() as f64 + 8.0;
        let (xs, x_bottom, x_top) = x.ticks();
        let (ys, y_bottom, y_top) = y.ticks();
        let mut c = Chart {
            width,
            height: top + plot_h + bottom,
            left,
            top,
            plot_w,
            plot_h,
            x_bottom,
            x_top,
            y_bottom,
            y_top,
            frame: String::new(),
            lines: String::new(),
            marks: String::new(),
        };
        for (i, row) in rows.iter().enumerate() {
            let mut kx = left;
            for k in row {
                c.frame.push_str(&k.svg(kx, 18.0 + 16.0 * i as f64));
                kx += k.width();
            }
        }
        c.grid(xs, ys);
        let _ = write!(
            c.frame,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text transform="translate(13 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            left + plot_w / 2.0,
            c.height - 6.0,
            esc(&x.label),
            top + plot_h / 2.0,
            esc(&y.label)
        );
        c
    }

    fn grid(&mut self, xs: f64, ys: f64) {
        let (l, t, r, b) = (self.left, self.top, self.left + self.plot_w, self.top + self.plot_h);
        for i in 0..=(((self.x_top - self.x_bottom) / xs).round() as usize) {
            let v = self.x_bottom + i as f64 * xs;
            let px = self.px(v);
            let _ = write!(
                self.frame,
                r#"<line x1="{px:.1}" y1="{t}" x2="{px:.1}" y2="{b}" stroke="{GRID}"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                b + 14.0,
                short(v)
            );
        }
        for i in 0..=(((self.y_top - self.y_bottom) / ys).round() as usize) {
            let v = self.y_bottom + i as f64 * ys;
            let py = self.py(v);
            let _ = write!(
                self.frame,
                r#"<line x1="{l}" y1="{py:.1}" x2="{r}" y2="{py:.1}" stroke="{GRID}"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                l - 5.0,
                py + 4.0,
                short(v)
            );
        }
        let _ = write!(self.frame, r#"<path d="M{l} {t}V{b}H{r}" fill="none" stroke="{INK}"/>"#);
    }

    fn px(&self, x: f64) -> f64 {
        self.left + ((x - self.x_bottom) / (self.x_top - self.x_bottom)).clamp(0.0, 1.0) * self.plot_w
    }

    fn py(&self, y: f64) -> f64 {
        self.top + self.plot_h - ((y - self.y_bottom) / (self.y_top - self.y_bottom)).clamp(0.0, 1.0) * self.plot_h
    }

    /// A series as a line through `points` (in data units, in x order).
    pub fn line(&mut self, color: &str, points: &[(f64, f64)]) {
        let pts: Vec<String> = points.iter().map(|&(x, y)| format!("{:.1},{:.1}", self.px(x), self.py(y))).collect();
        let _ = write!(
            self.lines,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.8" stroke-linejoin="round" points="{}"/>"#,
            pts.join(" ")
        );
    }

    /// A marker at `(x, y)`, over every line.
    pub fn mark(&mut self, mark: Mark, color: &str, x: f64, y: f64) {
        let m = mark.svg(color, self.px(x), self.py(y), mark.class());
        self.marks.push_str(&m);
    }

    /// A stem from the x axis up to `(x, y)`, topped by a marker.
    pub fn stem(&mut self, mark: Mark, color: &str, x: f64, y: f64) {
        let (px, py) = (self.px(x), self.py(y));
        let _ = write!(
            self.lines,
            r#"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{py:.1}" stroke="{color}" stroke-width="1.5" stroke-opacity="0.75"/>"#,
            self.top + self.plot_h
        );
        self.mark(mark, color, x, y);
    }

    /// A dashed horizontal line at `y` across the plot, labelled above its left end (where
    /// lines over XIDs consumed are usually still low).
    pub fn hline(&mut self, y: f64, color: &str, label: &str) {
        let (l, r, py) = (self.left, self.left + self.plot_w, self.py(y));
        let _ = write!(
            self.frame,
            r#"<line class="hline" x1="{l}" y1="{py:.1}" x2="{r}" y2="{py:.1}" stroke="{color}" stroke-width="1.5" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" fill="{color}" font-size="10">{}</text>"#,
            l + 4.0,
            py - 4.0,
            esc(label)
        );
    }

    /// A dashed vertical line at `x` over the plot with `before` on its left and `after` on
    /// its right, at the top.
    pub fn vline(&mut self, x: f64, before: &str, after: &str) {
        let (px, t, b) = (self.px(x), self.top, self.top + self.plot_h);
        let _ = write!(
            self.frame,
            r##"<line class="vline" x1="{px:.1}" y1="{t}" x2="{px:.1}" y2="{b}" stroke="#777" stroke-width="1.2" stroke-dasharray="3 3"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555" font-size="10">{}</text><text x="{:.1}" y="{:.1}" fill="#555" font-size="10">{}</text>"##,
            px - 4.0,
            t + 11.0,
            esc(before),
            px + 4.0,
            t + 11.0,
            esc(after)
        );
    }

    pub fn finish(self) -> String {
        let (w, h) = (self.width, self.height);
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11" fill="{INK}">{}{}{}</svg>"#,
            self.frame, self.lines, self.marks
        )
    }
}

/// One column's bars in [`bar_table`]: its name, colour and one value per row and panel.
pub struct BarSeries {
    pub name: String,
    pub color: &'static str,
    /// `values[panel][row]`.
    pub values: Vec<Vec<f64>>,
}

/// Horizontal bars in a grid: a row per label, a panel per heading, a bar per series in every
/// cell, each bar labelled with its value and `unit`. The bars of one row share a scale across
/// panels (its largest value spans the cell), so that a row compares series and panels while
/// rows of very different magnitudes stay readable.
pub fn bar_table(rows: &[String], panels: &[String], unit: &str, series: &[BarSeries]) -> String {
    let label_w = 16.0 + 7.4 * rows.iter().map(|r| r.chars().count()).max().unwrap_or(4) as f64;
    let (cell_w, bar_h, gap, head) = (470.0, 11.0, 10.0, 36.0);
    let row_h = series.len().max(1) as f64 * (bar_h + 2.0) + gap;
    let width = label_w + panels.len() as f64 * (cell_w + 20.0);
    let height = head + rows.len() as f64 * row_h + 4.0;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11" fill="{INK}">"#
    );
    let mut kx = label_w;
    for b in series {
        let k = Key::Line(b.color, b.name.clone());
        s.push_str(&k.svg(kx, 12.0));
        kx += k.width();
    }
    for (p, title) in panels.iter().enumerate() {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="30" font-weight="bold">{}</text>"#,
            label_w + p as f64 * (cell_w + 20.0),
            esc(title)
        );
    }
    for (r, label) in rows.iter().enumerate() {
        let y0 = head + r as f64 * row_h;
        let _ = write!(
            s,
            r#"<text x="0" y="{:.1}">{}</text><line x1="0" y1="{:.1}" x2="{width:.0}" y2="{:.1}" stroke="{GRID}"/>"#,
            y0 + row_h / 2.0,
            esc(label),
            y0 + row_h - gap / 2.0,
            y0 + row_h - gap / 2.0
        );
        let max = series.iter().flat_map(|b| b.values.iter().filter_map(|v| v.get(r))).copied().fold(0.0, f64::max);
        for p in 0..panels.len() {
            let x0 = label_w + p as f64 * (cell_w + 20.0);
            for (i, b) in series.iter().enumerate() {
                let v = b.values.get(p).and_then(|v| v.get(r)).copied().unwrap_or(f64::NAN);
                let len = if max > 0.0 && v.is_finite() { v / max * (cell_w - 90.0) } else { 0.0 };
                let y = y0 + i as f64 * (bar_h + 2.0);
                let text = if v.is_finite() { format!("{v:.2} {unit}") } else { "n/a".into() };
                let _ = write!(
                    s,
                    r#"<rect x="{x0:.1}" y="{y:.1}" width="{len:.1}" height="{bar_h}" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="10">{}</text>"#,
                    b.color,
                    x0 + len + 4.0,
                    y + bar_h - 2.0,
                    esc(&text)
                );
            }
        }
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(1000.0), 200.0);
        assert_eq!(tick_step(7.0), 2.0);
        assert_eq!(tick_step(0.0), 1.0);
        assert_eq!(Axis::new(101_000.0, "").ticks(), (25_000.0, 0.0, 125_000.0));
        let (step, bottom, top) = Axis::range(0.987, 1.043, "").ticks();
        assert_eq!(step, 0.02);
        assert!((bottom - 0.98).abs() < 1e-9 && (top - 1.06).abs() < 1e-9, "{bottom} {top}");
    }

    #[test]
    fn tick_labels_keep_their_digits() {
        assert_eq!(short(2500.0), "2.5k");
        assert_eq!(short(100_000.0), "100k");
        assert_eq!(short(1_250_000.0), "1.25M");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(short(0.0), "0");
        assert_eq!(short(0.995), "0.995");
    }

    #[test]
    fn two_charts_given_the_same_maxima_share_their_scales() {
        let (x, y) = (Axis::new(300.0, "x"), Axis::new(90.0, "y"));
        let mut a = Chart::new(500.0, 200.0, &x, &y, &[]);
        let mut b = Chart::new(500.0, 200.0, &x, &y, &[]);
        a.mark(Mark::Autovacuum, "red", 150.0, 45.0);
        b.mark(Mark::Autovacuum, "blue", 150.0, 45.0);
        let pos = |s: String| {
            s[s.find("<circle").unwrap()..].split(" r=").next().unwrap().split_once(' ').unwrap().1.to_string()
        };
        assert_eq!(pos(a.finish()), pos(b.finish()));
    }

    #[test]
    fn marks_have_one_shape_each_and_legends_escape() {
        assert_eq!(Mark::of(true, true), Mark::AntiWraparound);
        assert_eq!(Mark::of(true, false), Mark::Aggressive);
        assert_eq!(Mark::of(false, false), Mark::Autovacuum);
        let keys = [Key::Line("#000", "a<b".into()), Key::Mark(Mark::AntiWraparound)];
        let svg = Chart::new(400.0, 100.0, &Axis::new(1.0, "x & y"), &Axis::new(1.0, "y"), &keys).finish();
        assert!(svg.contains("a&lt;b") && svg.contains("x &amp; y") && !svg.contains("a<b"));
        assert!(svg.contains(WRAPAROUND_RED));
    }

    #[test]
    fn bar_table_labels_every_bar() {
        let s = bar_table(
            &["A".into(), "B".into()],
            &["first".into(), "second".into()],
            "ms",
            &[BarSeries { name: "p".into(), color: "#000", values: vec![vec![1.0, 2.0], vec![3.0, f64::NAN]] }],
        );
        assert_eq!(s.matches("<rect").count(), 1 + 4, "a legend swatch and four bars");
        assert!(s.contains("3.00 ms") && s.contains("n/a"));
    }
}
