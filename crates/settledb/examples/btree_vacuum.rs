//! Times B-tree bulk delete on the primary key `settle bench vacuum` vacuums, by one and by
//! several threads ([`settledb::btree_bench`] describes the work).
//!
//! ```text
//! cargo run --release -p settledb --example btree_vacuum -- [scale] [workers,...] [runs] [tidstore|bitmap|runs] [dir]
//! cargo run --release -p settledb --example btree_vacuum -- 50 1,2 3
//! ```
//!
//! Prints one line per bulk delete (and cleanup), then the median seconds per worker count.
//! `bitmap` answers the callback from a dense bitmap instead of VACUUM's dead-TID store, which
//! leaves the B-tree's own cost; `runs` looks the store's pages up once per run of TIDs on one
//! heap block ([`settledb::btree_bench::Answer`]).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scale: u32 = args.first().map_or(Ok(20), |s| s.parse())?;
    let workers: Vec<usize> =
        args.get(1).map_or("1,2", String::as_str).split(',').map(str::parse).collect::<Result<_, _>>()?;
    let runs: usize = args.get(2).map_or(Ok(3), |s| s.parse())?;
    let answer = match args.get(3).map_or("tidstore", String::as_str) {
        "tidstore" => settledb::btree_bench::Answer::TidStore,
        "bitmap" => settledb::btree_bench::Answer::Bitmap,
        "runs" => settledb::btree_bench::Answer::BlockRuns,
        other => return Err(format!("unknown answer {other}: tidstore, bitmap or runs").into()),
    };
    let dir = match args.get(4) {
        Some(d) => PathBuf::from(d),
        None => std::env::temp_dir().join(format!("settledb-btree-vacuum-{}", std::process::id())),
    };
    if dir.exists() {
        return Err(format!("{} exists; give a directory that does not", dir.display()).into());
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "bulk delete of pgbench_accounts_pkey at scale {scale}: workers {workers:?}, {runs} runs, {answer:?}, {cpus} CPUs"
    );
    let result = settledb::btree_bench::run(&dir, scale, &workers, runs, answer);
    let _ = std::fs::remove_dir_all(&dir);
    let all = result?;
    for r in &all {
        let s = &r.stats;
        println!(
            "workers {}: {:.3} s ({:.3} s CPU), {} WAL bytes; pages {} ({} deleted), entries {} left, {} removed",
            r.workers,
            r.seconds,
            r.cpu_seconds,
            r.wal_bytes,
            s.num_pages,
            s.pages_deleted,
            s.num_index_tuples,
            s.tuples_removed
        );
    }
    for &n in &workers {
        let median = |f: &dyn Fn(&settledb::btree_bench::Run) -> f64| {
            let mut t: Vec<f64> = all.iter().filter(|r| r.workers == n).map(f).collect();
            t.sort_by(f64::total_cmp);
            t.get(t.len() / 2).copied().unwrap_or(f64::NAN)
        };
        println!("median, {n} worker(s): {:.3} s, {:.3} s CPU", median(&|r| r.seconds), median(&|r| r.cpu_seconds));
    }
    Ok(())
}
