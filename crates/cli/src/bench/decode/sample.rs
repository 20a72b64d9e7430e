//! Measuring a decoder process from outside, the same way for both engines
//! (`../shared/research/logical-decoding.md` §4.1, step 3): every 20 ms, its CPU time
//! (`utime + stime` of `/proc/<pid>/stat`) and its `RssAnon` (`/proc/<pid>/status`); the last
//! CPU sample and the highest `RssAnon` are the figures. Also the td line-stream digests that
//! prove both engines wrote the same output.

use std::io::BufRead;
use std::path::Path;
use std::time::{Duration, Instant};

/// The sampling period.
pub const PERIOD: Duration = Duration::from_millis(20);

/// One sample of a process: CPU seconds so far, `RssAnon` in kB.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub cpu_seconds: f64,
    pub rss_anon_kb: u64,
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf only reads a constant.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Reads `pid`'s CPU time and `RssAnon`; `None` once it is gone.
pub fn sample(pid: u32) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields count from after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); utime and stime are fields 14 and 15.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_anon_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Some(Sample { cpu_seconds: (utime + stime) / clock_ticks(), rss_anon_kb })
}

/// What sampling a process found.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sampled {
    pub cpu_seconds: f64,
    pub peak_rss_anon_kb: u64,
    pub wall_seconds: f64,
    pub samples: u64,
}

impl Sampled {
    pub fn add(&mut self, s: Sample) {
        self.cpu_seconds = self.cpu_seconds.max(s.cpu_seconds);
        self.peak_rss_anon_kb = self.peak_rss_anon_kb.max(s.rss_anon_kb);
        self.samples += 1;
    }
}

/// Samples `pid` every [`PERIOD`] until `done()` says the run is over or `pid` is gone, or
/// `cap` passes (then returns `capped = true` without waiting further).
pub fn sample_until(
    pid: u32,
    start: Instant,
    cap: Option<Duration>,
    mut done: impl FnMut() -> bool,
) -> (Sampled, bool) {
    let mut s = Sampled::default();
    while let Some(x) = sample(pid) {
        s.add(x);
        if done() {
            break;
        }
        if cap.is_some_and(|c| start.elapsed() >= c) {
            s.wall_seconds = start.elapsed().as_secs_f64();
            return (s, true);
        }
        std::thread::sleep(PERIOD);
    }
    s.wall_seconds = start.elapsed().as_secs_f64();
    (s, false)
}

/// test_decoding's line stream with what differs between engines taken out: the XIDs after
/// `BEGIN`, `COMMIT` and `TXN`. LSNs and timestamps are not in the lines (no
/// `include-timestamp`).
pub fn normalize(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    for key in ["BEGIN ", "COMMIT ", "TXN "] {
        if let Some(i) = rest.find(key) {
            if i == 0 || key == "TXN " {
                let after = &rest[i + key.len()..];
                let digits = after.bytes().take_while(u8::is_ascii_digit).count();
                if digits > 0 {
                    out.push_str(&rest[..i + key.len()]);
                    out.push('N');
                    rest = &after[digits..];
                    break;
                }
            }
        }
    }
    out.push_str(rest);
    out
}

/// A digest of a test_decoding file: lines, and a hash of the normalized line stream, in
/// order, or (`unordered`) of the sorted multiset of transactions (each its lines from BEGIN
/// to COMMIT), for workloads whose commit order depends on concurrent clients.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Digest {
    pub lines: u64,
    pub hash: String,
}

pub fn digest(path: &Path, unordered: bool) -> std::io::Result<Digest> {
    use std::hash::{Hash, Hasher};
    let f = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?);
    let mut lines = 0u64;
    let mut whole = std::collections::hash_map::DefaultHasher::default();
    let mut txn = std::collections::hash_map::DefaultHasher::default();
    let mut txns: Vec<u64> = Vec::new();
    for line in f.lines() {
        let l = normalize(&line?);
        lines += 1;
        if unordered {
            l.hash(&mut txn);
            if l.starts_with("COMMIT") {
                txns.push(std::mem::take(&mut txn).finish());
            }
        } else {
            l.hash(&mut whole);
        }
    }
    if unordered {
        txns.sort_unstable();
        txns.hash(&mut whole);
        txn.finish().hash(&mut whole);
    }
    Ok(Digest { lines, hash: format!("{:016x}", whole.finish()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xids_are_taken_out() {
        assert_eq!(normalize("BEGIN 727"), "BEGIN N");
        assert_eq!(normalize("COMMIT 12"), "COMMIT N");
        assert_eq!(normalize("streaming change for TXN 99"), "streaming change for TXN N");
        assert_eq!(normalize("table public.w1: INSERT: a[integer]:1"), "table public.w1: INSERT: a[integer]:1");
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample(std::process::id()).unwrap();
        assert!(s.rss_anon_kb > 0);
    }
}
