//! `settle bench tidstore`: every dead-TID store on the same sets (bdbench's, and shapes real
//! tables leave behind), one table.
//!
//! For each case the harness generates the dead pages (attach, timed, ending with `freeze`),
//! then probes the structure with index TIDs:
//!
//! * **shuffled** — index order, random relative to the heap: if the index has at most
//!   `probes` entries, all of them in a seeded Fisher–Yates shuffle; otherwise a fixed seeded
//!   sample of `probes` index entries drawn uniformly (with replacement), which is already in
//!   random order. ns/probe is what matters, and the sample keeps a 10× run to minutes.
//! * **ordered** — heap order: the same probes sorted (the whole index when it fits).
//! * **batched** — the shuffled probes through `contains_many`.
//!
//! Each probe set's expected number of dead TIDs is computed from the generator, not from any
//! structure; a structure that matches a different number fails the run, as does an iteration
//! that does not return exactly the dead TIDs. Memory is the live-heap delta measured by the
//! counting allocator (the `settle` binary installs it) after `freeze`, next to the
//! structure's own `memory_bytes()`.

pub mod workload;

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use workload::Bound;
pub use workload::{allocated_bytes, enable_counting, Case, CountingAlloc, Shape, ALLOCATED};

use crate::{Array6, DeadTids, PgRadix, RoaringRef, Tid, TidStore};

/// One structure on one case.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub structure: String,
    /// Heap bytes after freeze, from the counting allocator (None if it is not installed).
    pub bytes: Option<usize>,
    /// The structure's own `memory_bytes()`.
    pub reported_bytes: usize,
    pub bytes_per_dead_tid: f64,
    pub ratio_to_bound: f64,
    pub attach_ms: f64,
    pub shuffled_ns: f64,
    pub ordered_ns: f64,
    pub batched_ns: f64,
    pub iterate_ms: f64,
    pub matched_ok: bool,
    /// Set when the structure was not run (e.g. it would need too much memory).
    pub skipped: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CaseReport {
    pub case: Case,
    pub dead_pages: u64,
    pub dead_tids: u64,
    pub index_tids: u64,
    pub shuffled_probes: usize,
    pub ordered_probes: usize,
    pub expected_shuffled: u64,
    pub expected_ordered: u64,
    pub bound_bytes: f64,
    pub rows: Vec<Row>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub benchmark: &'static str,
    pub machine: String,
    pub scale: u32,
    pub probes: usize,
    pub cases: Vec<CaseReport>,
    pub targets: Vec<Target>,
    pub failed: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub what: String,
    pub holds: bool,
    pub detail: String,
}

/// Structures whose predicted size exceeds this are skipped (array6 at 1e9 TIDs).
const MAX_STRUCTURE_BYTES: u64 = 3 << 30;

/// The cases at `scale`: the seed thread's five, the first at 10× (scale 1 only; at scale 10
/// every case is 10×), the first with every 20th page dead, and a seeded random case; then
/// what real tables leave behind: updates concentrated on recent rows (hot spot), a few dead
/// tuples on most pages (TPC-C-like), one or two dead tuples on 1% of a large table (sparse),
/// and bulk-deleted key ranges among scattered dead tuples.
pub fn cases(scale: u32) -> Vec<Case> {
    let bd = |name: &str, maxblk: u32, k, iv, pi| Case {
        name: name.into(),
        maxblk,
        shape: Shape::Bdbench { dead_per_page: k, interval: iv, page_interval: pi },
    };
    let m = 1_000_000 * scale;
    let mut v = vec![
        bd("seed1 (1e6,10,20,1)", m, 10, 20, 1),
        bd("seed2 (1e6,20,10,1)", m, 20, 10, 1),
        bd("seed3 (1e6,10,1,1)", m, 10, 1, 1),
        bd("seed4 (1e6,2,100,1)", m, 2, 100, 1),
        bd("seed5 (1e6,100,1,1)", m, 100, 1, 1),
    ];
    if scale == 1 {
        v.push(bd("seed1 at 10x (1e7,10,20,1)", 10_000_000, 10, 20, 1));
    }
    v.push(bd("seed1 every 20th page (1e6,10,20,20)", m, 10, 20, 20));
    v.push(Case {
        name: "random (30% pages, 1-20 of 1..200)".into(),
        maxblk: m,
        shape: Shape::Random { seed: 0x5e771e, percent: 30, max_k: 20, max_offset: 200 },
    });
    // What real tables leave behind (not in the seed thread).
    v.push(Case {
        name: "hot spot (last 5%: 80% pages, 5-60 of 1..250; 0.2% elsewhere)".into(),
        maxblk: m,
        shape: Shape::HotSpot {
            seed: 0x407,
            hot_percent: 5,
            percent: 80,
            min_k: 5,
            max_k: 60,
            cold_permille: 2,
            max_offset: 250,
        },
    });
    v.push(Case {
        name: "tpcc-like (90% pages, 1-5 of 1..291)".into(),
        maxblk: m,
        shape: Shape::Random { seed: 0x7bcc, percent: 90, max_k: 5, max_offset: 291 },
    });
    v.push(Case {
        name: "sparse (1% pages, 1-2 of 1..291, 1e7 pages)".into(),
        maxblk: 10 * m,
        shape: Shape::Random { seed: 0x5ba75e, percent: 1, max_k: 2, max_offset: 291 },
    });
    v.push(Case {
        name: "bulk delete (full runs in 30% of 16k stretches; 5% pages 1-10 of 1..120)".into(),
        maxblk: m,
        shape: Shape::Runs { seed: 0xde1e7e, run_percent: 30, max_run: 8192, percent: 5, max_k: 10, max_offset: 120 },
    });
    if scale != 1 {
        for c in &mut v {
            c.name = format!("{} x{scale}", c.name);
        }
    }
    v
}

fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or("unknown", str::trim)
        .to_string();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{cpus} CPUs ({model}), {} {}", std::env::consts::OS, std::env::consts::ARCH)
}

/// The probe sets: (shuffled, ordered).
fn probe_sets(case: &Case, probes: usize) -> (Vec<Tid>, Vec<Tid>) {
    let m = u64::from(case.index_per_page());
    let total = case.index_tids();
    let tid = |p: u64| Tid::new((p / m) as u32, (p % m) as u16 + 1);
    let mut rng = StdRng::seed_from_u64(0x00bd_bec4);
    let mut shuffled: Vec<Tid>;
    if total <= probes as u64 {
        shuffled = (0..total).map(tid).collect();
        for i in (1..shuffled.len()).rev() {
            shuffled.swap(i, rng.gen_range(0..=i));
        }
    } else {
        shuffled = (0..probes).map(|_| tid(rng.gen_range(0..total))).collect();
    }
    let mut ordered = shuffled.clone();
    ordered.sort_unstable();
    (shuffled, ordered)
}

fn expected(case: &Case, probes: &[Tid]) -> u64 {
    let mut buf = Vec::new();
    probes.iter().filter(|t| case.is_dead(t.block, t.offset, &mut buf)).count() as u64
}

fn make(name: &str) -> Box<dyn DeadTids> {
    match name {
        "tidstore" => Box::new(TidStore::new(usize::MAX)),
        "array6" => Box::new(Array6::new(usize::MAX)),
        "roaring" => Box::new(RoaringRef::new(usize::MAX)),
        _ => Box::new(PgRadix::new(usize::MAX)),
    }
}

pub const STRUCTURES: [&str; 4] = ["tidstore", "pgradix", "roaring", "array6"];

struct Truth<'a> {
    case: &'a Case,
    dead_tids: u64,
    bound_bytes: f64,
    shuffled: &'a [Tid],
    ordered: &'a [Tid],
    expected_shuffled: u64,
    expected_ordered: u64,
}

/// Lookup passes are timed in this many interleaved slices: slice `i` of the probes runs on
/// every structure before slice `i + 1` runs on any, so a slow spell of this shared machine
/// falls on all structures alike instead of on whichever was being timed.
const SLICES: usize = 5;

/// A structure built for one case, with what was measured while building it.
struct Built {
    name: String,
    s: Box<dyn DeadTids>,
    bytes: Option<usize>,
    attach_ms: f64,
}

/// Builds one structure from the case's pages (attach, timed, ending with `freeze`).
fn build(name: &str, t: &Truth<'_>) -> Built {
    let mut buf = Vec::with_capacity(300);
    let before = allocated_bytes();
    let start = Instant::now();
    let mut s = make(name);
    for blk in 0..t.case.maxblk {
        t.case.page(blk, &mut buf);
        s.add_page(blk, &buf).expect("unlimited budget");
    }
    s.freeze();
    let attach_ms = start.elapsed().as_secs_f64() * 1e3;
    let bytes = before.and_then(|b| allocated_bytes().map(|a| a.wrapping_sub(b)));
    Built { name: name.into(), s, bytes, attach_ms }
}

/// Times `pass` over `probes` on every structure, slice by slice, rotating which structure goes
/// first; returns (ns per probe, matches) per structure.
fn interleaved(built: &[Built], probes: &[Tid], pass: impl Fn(&dyn DeadTids, &[Tid]) -> u64) -> Vec<(f64, u64)> {
    let mut ns = vec![0u128; built.len()];
    let mut matched = vec![0u64; built.len()];
    let slice = probes.len().div_ceil(SLICES).max(1);
    for (i, chunk) in probes.chunks(slice).enumerate() {
        for k in 0..built.len() {
            let j = (i + k) % built.len();
            let start = Instant::now();
            matched[j] += pass(built[j].s.as_ref(), chunk);
            ns[j] += start.elapsed().as_nanos();
        }
    }
    ns.iter().zip(matched).map(|(&n, m)| (n as f64 / probes.len().max(1) as f64, m)).collect()
}

/// Builds every structure named in `names` (all kept alive), then times their lookups
/// interleaved and their iteration one after the other.
fn measure_all(names: &[&str], t: &Truth<'_>) -> Vec<Row> {
    let built: Vec<Built> = names.iter().map(|&n| build(n, t)).collect();
    let shuffled = interleaved(&built, t.shuffled, |s, p| p.iter().filter(|&&q| s.contains(q)).count() as u64);
    let ordered = interleaved(&built, t.ordered, |s, p| p.iter().filter(|&&q| s.contains(q)).count() as u64);
    let batched = interleaved(&built, t.shuffled, |s, p| {
        let mut bits = vec![0u64; p.len().div_ceil(64)];
        s.contains_many(p, &mut bits);
        bits.iter().map(|w| u64::from(w.count_ones())).sum()
    });
    let mut rows = Vec::new();
    for (i, b) in built.iter().enumerate() {
        let s = b.s.as_ref();
        let start = Instant::now();
        let mut iterated = 0u64;
        let mut last = None;
        let mut ordered_ok = true;
        s.for_each_page(&mut |blk, offs| {
            ordered_ok &= last.is_none_or(|l| blk > l);
            last = Some(blk);
            iterated += offs.len() as u64;
        });
        let iterate_ms = start.elapsed().as_secs_f64() * 1e3;
        let ((shuffled_ns, m_shuf), (ordered_ns, m_ord), (batched_ns, m_batch)) = (shuffled[i], ordered[i], batched[i]);
        let matched_ok = m_shuf == t.expected_shuffled
            && m_ord == t.expected_ordered
            && m_batch == t.expected_shuffled
            && iterated == t.dead_tids
            && ordered_ok
            && s.num_tids() == t.dead_tids;
        if !matched_ok {
            eprintln!(
                "MISMATCH {} on {}: shuffled {m_shuf}/{}, ordered {m_ord}/{}, batched {m_batch}, iterated {iterated}/{}",
                b.name, t.case.name, t.expected_shuffled, t.expected_ordered, t.dead_tids
            );
        }
        let reported_bytes = s.memory_bytes();
        let shown = b.bytes.unwrap_or(reported_bytes) as f64;
        rows.push(Row {
            structure: b.name.clone(),
            bytes: b.bytes,
            reported_bytes,
            bytes_per_dead_tid: shown / t.dead_tids.max(1) as f64,
            ratio_to_bound: shown / t.bound_bytes,
            attach_ms: b.attach_ms,
            shuffled_ns,
            ordered_ns,
            batched_ns,
            iterate_ms,
            matched_ok,
            skipped: None,
        });
    }
    rows
}

/// Runs every case at `scale` with at most `probes` shuffled probes per case.
pub fn run(
    scale: u32,
    probes: usize,
    only: Option<&str>,
    structures: &[&str],
    mut progress: impl FnMut(&CaseReport),
) -> Report {
    enable_counting();
    let mut reports = Vec::new();
    for case in cases(scale) {
        if only.is_some_and(|o| !case.name.contains(o)) {
            continue;
        }
        let mut bound = Bound::new();
        let mut buf = Vec::new();
        let mut dead_tids = 0u64;
        for blk in 0..case.maxblk {
            case.page(blk, &mut buf);
            if !buf.is_empty() {
                bound.add_page(buf.len());
                dead_tids += buf.len() as u64;
            }
        }
        let (shuffled, ordered) = probe_sets(&case, probes);
        let truth = Truth {
            case: &case,
            dead_tids,
            bound_bytes: bound.bytes(u64::from(case.maxblk)),
            expected_shuffled: expected(&case, &shuffled),
            expected_ordered: expected(&case, &ordered),
            shuffled: &shuffled,
            ordered: &ordered,
        };
        let too_big = |name: &str| name == "array6" && 6 * dead_tids > MAX_STRUCTURE_BYTES;
        let run: Vec<&str> = structures.iter().copied().filter(|n| !too_big(n)).collect();
        let mut measured = measure_all(&run, &truth).into_iter();
        let rows: Vec<Row> = structures
            .iter()
            .map(|&name| {
                if too_big(name) {
                    skipped(name, dead_tids, &truth, "over 3 GiB (6 B/TID)")
                } else {
                    measured.next().expect("one row per structure run")
                }
            })
            .collect();
        let report = CaseReport {
            case: case.clone(),
            dead_pages: bound.pages_dead,
            dead_tids,
            index_tids: case.index_tids(),
            shuffled_probes: shuffled.len(),
            ordered_probes: ordered.len(),
            expected_shuffled: truth.expected_shuffled,
            expected_ordered: truth.expected_ordered,
            bound_bytes: truth.bound_bytes,
            rows,
        };
        progress(&report);
        reports.push(report);
    }
    let targets = targets(&reports, scale);
    let failed = reports.iter().flat_map(|c| &c.rows).any(|r| r.skipped.is_none() && !r.matched_ok);
    Report { benchmark: "tidstore", machine: machine(), scale, probes, cases: reports, targets, failed }
}

fn skipped(name: &str, dead_tids: u64, t: &Truth<'_>, why: &str) -> Row {
    let bytes = (6 * dead_tids) as usize;
    Row {
        structure: name.into(),
        bytes: None,
        reported_bytes: bytes,
        bytes_per_dead_tid: 6.0,
        ratio_to_bound: bytes as f64 / t.bound_bytes,
        attach_ms: f64::NAN,
        shuffled_ns: f64::NAN,
        ordered_ns: f64::NAN,
        batched_ns: f64::NAN,
        iterate_ms: f64::NAN,
        matched_ok: true,
        skipped: Some(why.into()),
    }
}

fn row<'a>(c: &'a CaseReport, name: &str) -> Option<&'a Row> {
    c.rows.iter().find(|r| r.structure == name && r.skipped.is_none())
}

fn bytes_of(r: &Row) -> f64 {
    r.bytes.unwrap_or(r.reported_bytes) as f64
}

/// Evaluates the targets on the figures of this run.
fn targets(cases: &[CaseReport], _scale: u32) -> Vec<Target> {
    let mut out = Vec::new();
    let mut t = |what: String, holds: bool, detail: String| out.push(Target { what, holds, detail });
    for c in cases {
        let Some(ours) = row(c, "tidstore") else { continue };
        let refs: Vec<&Row> = c.rows.iter().filter(|r| r.structure != "tidstore").collect();
        let worst =
            refs.iter().map(|r| bytes_of(ours) / r.bytes.unwrap_or(r.reported_bytes) as f64).fold(0.0, f64::max);
        t(format!("memory below every reference: {}", c.case.name), worst < 1.0, format!("largest ratio {worst:.3}"));
        if let Some(r) = row(c, "pgradix") {
            for (what, q) in
                [("shuffled", ours.shuffled_ns / r.shuffled_ns), ("batched", ours.batched_ns / r.batched_ns)]
            {
                t(format!("{what} <= pgradix: {}", c.case.name), q <= 1.0, format!("{q:.3}x"));
            }
        }
        let seed1 = matches!(c.case.shape, Shape::Bdbench { dead_per_page: 10, interval: 20, page_interval: 1 });
        if matches!(c.case.shape, Shape::Random { seed: 0x5e771e, .. }) {
            t(
                format!("<= 1.5x bound: {}", c.case.name),
                ours.ratio_to_bound <= 1.5,
                format!("{:.3}x", ours.ratio_to_bound),
            );
        }
        if seed1 {
            t(
                format!("<= 1.3x bound: {}", c.case.name),
                ours.ratio_to_bound <= 1.3,
                format!("{:.3}x", ours.ratio_to_bound),
            );
        }
        let at10 = c.case.maxblk >= 10_000_000;
        let seed124 = matches!(
            c.case.shape,
            Shape::Bdbench { dead_per_page: 10, interval: 20, page_interval: 1 }
                | Shape::Bdbench { dead_per_page: 20, interval: 10, page_interval: 1 }
                | Shape::Bdbench { dead_per_page: 2, interval: 100, page_interval: 1 }
        );
        if at10 && seed124 {
            for (name, limit) in [("pgradix", 0.7), ("roaring", 0.5)] {
                if let Some(r) = row(c, name) {
                    let q = ours.shuffled_ns / r.shuffled_ns;
                    t(format!("shuffled <= {limit}x {name}: {}", c.case.name), q <= limit, format!("{q:.3}x"));
                }
            }
        }
        if at10 && seed1 {
            t(
                format!("batched <= 100 ns/probe: {}", c.case.name),
                ours.batched_ns <= 100.0,
                format!("{:.1} ns", ours.batched_ns),
            );
        }
        if let Some(a) = row(c, "array6") {
            let q = ours.ordered_ns / a.ordered_ns;
            t(format!("ordered <= array6: {}", c.case.name), q <= 1.0, format!("{q:.3}x"));
            let q = ours.attach_ms / a.attach_ms;
            t(format!("attach <= 2x array6: {}", c.case.name), q <= 2.0, format!("{q:.3}x"));
        }
    }
    out
}

/// The report as a text table.
pub fn render(r: &Report) -> String {
    let mut s = format!(
        "tidstore benchmark, scale {} ({} shuffled probes at most per case)\nmachine: {}\n",
        r.scale, r.probes, r.machine
    );
    for c in &r.cases {
        s += &render_case(c);
    }
    s += "\ntargets:\n";
    for t in &r.targets {
        s += &format!("  [{}] {} ({})\n", if t.holds { "ok" } else { "MISS" }, t.what, t.detail);
    }
    if r.failed {
        s += "FAILED: a structure matched the wrong number of dead TIDs\n";
    }
    s
}

pub fn render_case(c: &CaseReport) -> String {
    let mut s = format!(
        "\n{}: {} dead TIDs on {} of {} pages; bound {:.2} MiB; {} index TIDs, {} shuffled / {} ordered probes ({} / {} dead)\n",
        c.case.name,
        c.dead_tids,
        c.dead_pages,
        c.case.maxblk,
        c.bound_bytes / 1048576.0,
        c.index_tids,
        c.shuffled_probes,
        c.ordered_probes,
        c.expected_shuffled,
        c.expected_ordered,
    );
    s += &format!(
        "  {:<9} {:>9} {:>9} {:>7} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9}  {}\n",
        "structure",
        "MiB",
        "own MiB",
        "B/TID",
        "xbound",
        "attach ms",
        "shuf ns",
        "ord ns",
        "batch ns",
        "iter ms",
        "check"
    );
    for r in &c.rows {
        let mib = |b: f64| b / 1048576.0;
        let check = match (&r.skipped, r.matched_ok) {
            (Some(why), _) => format!("skipped: {why}"),
            (None, true) => "ok".into(),
            (None, false) => "MISMATCH".into(),
        };
        s += &format!(
            "  {:<9} {:>9} {:>9.2} {:>7.2} {:>8.3} {:>10.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}  {}\n",
            r.structure,
            r.bytes.map_or("-".into(), |b| format!("{:.2}", mib(b as f64))),
            mib(r.reported_bytes as f64),
            r.bytes_per_dead_tid,
            r.ratio_to_bound,
            r.attach_ms,
            r.shuffled_ns,
            r.ordered_ns,
            r.batched_ns,
            r.iterate_ms,
            check
        );
    }
    s
}
