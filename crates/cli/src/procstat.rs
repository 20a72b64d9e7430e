//! What benchmarks read of processes from `/proc`: CPU time and proportional memory, of one
//! process or of a PostgreSQL server (its postmaster and every process it started).

use std::path::Path;

use anyhow::{Context, Result};

/// Clock ticks per second (`getconf CLK_TCK`; 100 where that fails).
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<f64>().ok())
        .unwrap_or(100.0)
}

/// CPU seconds the hypervisor ran someone else while this machine's CPUs had work (the
/// `steal` column of `/proc/stat`, summed over the CPUs), so far; `None` where it is missing.
pub fn machine_steal(ticks: f64) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    // cpu user nice system idle iowait irq softirq steal ...
    let steal: f64 = stat.lines().next()?.split_whitespace().nth(8)?.parse().ok()?;
    Some(steal / ticks)
}

/// A process's parent and CPU seconds, its reaped children's included (`/proc/<pid>/stat`).
pub fn cpu(pid: u32, ticks: f64) -> Option<(u32, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    // After the command: state, ppid, ... utime (14), stime, cutime, cstime (17).
    let cpu = num(11)? + num(12)? + num(13)? + num(14)?;
    Some((num(1)? as u32, cpu / ticks))
}

/// This process's own CPU seconds (its threads; not its children).
pub fn self_cpu(ticks: f64) -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = stat.rsplit_once(')').map_or("", |p| p.1).split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (num(11) + num(12)) / ticks
}

/// The CPU seconds so far (`schedstat`, to the nanosecond) of each live thread of this
/// process whose name starts with one of `prefixes`, by thread ID, with the index in
/// `prefixes` of the first prefix its name starts with.
pub fn threads_cpu(prefixes: &[&str]) -> std::collections::HashMap<u32, (usize, f64)> {
    let mut out = std::collections::HashMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return out };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if let Some(which) = prefixes.iter().position(|p| comm.starts_with(p)) {
            let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            let ns = s.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            out.insert(tid, (which, ns / 1e9));
        }
    }
    out
}

/// A single-threaded process's CPU seconds to the nanosecond (`/proc/<pid>/schedstat`'s time
/// on CPU), for figures too short for clock ticks; `None` when it is gone.
pub fn cpu_precise(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse::<f64>().ok().map(|ns| ns / 1e9)
}

/// A process's proportional set size in kB (`Pss` of `/proc/<pid>/smaps_rollup`): shared
/// pages count in part, so a server's processes add up to what they really use.
pub fn pss_kb(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("Pss:")).and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The postmaster of the PostgreSQL server whose data directory is `data`.
pub fn postmaster_pid(data: &Path) -> Result<u32> {
    let pidfile = std::fs::read_to_string(data.join("postmaster.pid")).context("reading postmaster.pid")?;
    pidfile.lines().next().and_then(|l| l.trim().parse().ok()).context("postmaster.pid holds no PID")
}

/// The postmaster and the processes it started.
fn server_pids(postmaster: u32, ticks: f64) -> Vec<(u32, f64)> {
    let mut pids: Vec<(u32, f64)> = cpu(postmaster, ticks).map(|(_, c)| (postmaster, c)).into_iter().collect();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if let Some((ppid, c)) = cpu(pid, ticks) {
            if ppid == postmaster {
                pids.push((pid, c));
            }
        }
    }
    pids
}

/// How many processes the postmaster has now.
pub fn server_children(postmaster: u32) -> usize {
    server_pids(postmaster, 1.0).len().saturating_sub(1)
}

/// CPU seconds of a PostgreSQL server: its postmaster, its live children and those reaped.
pub fn server_cpu(postmaster: u32, ticks: f64) -> f64 {
    server_pids(postmaster, ticks).iter().map(|(_, c)| c).sum()
}

/// Proportional memory of a PostgreSQL server's processes, in kB.
pub fn server_pss_kb(postmaster: u32) -> u64 {
    server_pids(postmaster, 1.0).iter().filter_map(|(p, _)| pss_kb(&p.to_string())).sum()
}
