//! Physical floors for a benchmark figure: how fast this machine can read memory and write a
//! file sequentially, measured in the run that quotes them, so that a time can be printed
//! beside the least it could be ("bytes scanned / memory bandwidth", "WAL bytes / write rate").
//!
//! Both are best-of-N rates of simple loops, not models of either engine: the memory figure is
//! a sum over a buffer far larger than the caches, split across every core (a parallel VACUUM
//! may use them all, so the floor assumes it could); the write figure is `write(2)` of 1 MiB
//! chunks to a fresh file in the directory given, without `fsync`, because the benchmarks that
//! print it run both engines with `fsync=off`, where a WAL write ends in the page cache.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use serde::Serialize;

/// Bytes the memory pass reads (far past any last-level cache).
const READ_BYTES: usize = 512 << 20;
/// Bytes the write pass writes, in chunks of [`WRITE_CHUNK`].
const WRITE_BYTES: usize = 256 << 20;
const WRITE_CHUNK: usize = 1 << 20;
/// Passes of each; the fastest counts (the others met the machine's other tenants).
const PASSES: usize = 3;

/// This machine's rates, as measured.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Rates {
    /// Bytes per second a sum over a large buffer reads, on `threads` threads.
    pub memory_read_bytes_per_s: f64,
    pub threads: usize,
    /// Bytes per second of sequential 1 MiB `write(2)` calls to a new file (no fsync).
    pub sequential_write_bytes_per_s: f64,
}

impl Rates {
    /// Measures both rates; the write pass uses a file in `dir`, removed afterwards.
    pub fn measure(dir: &Path) -> Result<Rates> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(Rates {
            memory_read_bytes_per_s: memory_read_rate(threads),
            threads,
            sequential_write_bytes_per_s: write_rate(dir)?,
        })
    }

    /// Seconds to read `bytes` at the memory rate.
    pub fn scan_seconds(&self, bytes: u64) -> f64 {
        bytes as f64 / self.memory_read_bytes_per_s
    }

    /// Seconds to write `bytes` at the sequential write rate.
    pub fn write_seconds(&self, bytes: u64) -> f64 {
        bytes as f64 / self.sequential_write_bytes_per_s
    }

    /// One line for a report's header.
    pub fn describe(&self) -> String {
        format!(
            "memory read {:.1} GB/s ({} threads), sequential write {:.2} GB/s (no fsync)",
            self.memory_read_bytes_per_s / 1e9,
            self.threads,
            self.sequential_write_bytes_per_s / 1e9
        )
    }
}

/// A lower bound on a figure: its two parts and the larger, which is what can't be beaten
/// even if scanning and writing overlapped perfectly.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Floor {
    pub scan_bytes: u64,
    pub scan_seconds: f64,
    pub write_bytes: u64,
    pub write_seconds: f64,
    pub seconds: f64,
}

impl Floor {
    pub fn new(rates: &Rates, scan_bytes: u64, write_bytes: u64) -> Floor {
        let (scan_seconds, write_seconds) = (rates.scan_seconds(scan_bytes), rates.write_seconds(write_bytes));
        Floor { scan_bytes, scan_seconds, write_bytes, write_seconds, seconds: scan_seconds.max(write_seconds) }
    }
}

fn memory_read_rate(threads: usize) -> f64 {
    let words = READ_BYTES / 8;
    // Filled with non-zero values so that every page is really mapped before the clock starts.
    let buf: Vec<u64> = (0..words as u64).collect();
    let per = words.div_ceil(threads);
    let mut best = f64::INFINITY;
    for _ in 0..PASSES {
        let start = Instant::now();
        let total: u64 = std::thread::scope(|s| {
            let parts: Vec<_> = buf.chunks(per).map(|c| s.spawn(move || sum(c))).collect();
            parts.into_iter().map(|h| h.join().unwrap_or(0)).fold(0, u64::wrapping_add)
        });
        std::hint::black_box(total);
        best = best.min(start.elapsed().as_secs_f64());
    }
    READ_BYTES as f64 / best
}

/// A sum the compiler vectorizes: bound by the loads, not the adds.
fn sum(words: &[u64]) -> u64 {
    let mut lanes = [0u64; 8];
    let mut chunks = words.chunks_exact(8);
    for c in &mut chunks {
        for (l, w) in lanes.iter_mut().zip(c) {
            *l = l.wrapping_add(*w);
        }
    }
    let tail: u64 = chunks.remainder().iter().fold(0, |a, w| a.wrapping_add(*w));
    lanes.iter().fold(tail, |a, l| a.wrapping_add(*l))
}

fn write_rate(dir: &Path) -> Result<f64> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("settle-floor-{}.tmp", std::process::id()));
    let chunk = vec![0x5au8; WRITE_CHUNK];
    let mut best = f64::INFINITY;
    let result = (|| -> Result<()> {
        for _ in 0..PASSES {
            let _ = std::fs::remove_file(&path);
            let mut f = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            let start = Instant::now();
            for _ in 0..WRITE_BYTES / WRITE_CHUNK {
                f.write_all(&chunk).with_context(|| format!("writing {}", path.display()))?;
            }
            best = best.min(start.elapsed().as_secs_f64());
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&path);
    result?;
    Ok(WRITE_BYTES as f64 / best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_is_the_larger_part() {
        let r = Rates { memory_read_bytes_per_s: 10e9, threads: 2, sequential_write_bytes_per_s: 1e9 };
        let f = Floor::new(&r, 10_000_000_000, 500_000_000);
        assert_eq!(f.scan_seconds, 1.0);
        assert_eq!(f.write_seconds, 0.5);
        assert_eq!(f.seconds, 1.0);
        let f = Floor::new(&r, 0, 2_000_000_000);
        assert_eq!(f.seconds, 2.0);
    }

    #[test]
    fn sum_covers_every_word() {
        let words: Vec<u64> = (1..=1003).collect();
        assert_eq!(sum(&words), 1003 * 1004 / 2);
    }
}
