//! One child's life: spawn it, wait for the targeted moment, SIGKILL it.
//!
//! A targeted kill waits for a fresh `<phase> begin` line (markers already queued are dropped),
//! sleeps a random 0..[`KillKind::max_delay_ms`] and kills. After the kill the child's
//! remaining stdout is read to its end: the kill landed inside the phase iff no `<phase> end`
//! followed the last `<phase> begin` (one thread prints each kind of marker, and prints `end` as
//! soon as the phase returns).

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::schema::Workload;

/// What the kill aims at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillKind {
    Random,
    Vacuum,
    /// A VACUUM with two parallel workers (heap phases I and III and the index bulk deletes
    /// shared among them).
    ParallelVacuum,
    Checkpoint,
    Extension,
    /// PREPARE TRANSACTION, COMMIT PREPARED or ROLLBACK PREPARED.
    TwoPhase,
}

impl KillKind {
    /// Taken in turn, so that every kind gets a sixth of the kills.
    pub const ALL: [KillKind; 6] = [
        KillKind::Random,
        KillKind::Vacuum,
        KillKind::ParallelVacuum,
        KillKind::Checkpoint,
        KillKind::Extension,
        KillKind::TwoPhase,
    ];

    pub fn name(self) -> &'static str {
        match self {
            KillKind::Random => "random",
            KillKind::Vacuum => "vacuum",
            KillKind::ParallelVacuum => "parallel vacuum",
            KillKind::Checkpoint => "checkpoint",
            KillKind::Extension => "extension",
            KillKind::TwoPhase => "2pc",
        }
    }

    /// The child's marker for the phase.
    fn marker(self) -> Option<&'static str> {
        match self {
            KillKind::Random => None,
            KillKind::Vacuum => Some("vacuum"),
            KillKind::ParallelVacuum => Some("parallel vacuum"),
            KillKind::Checkpoint => Some("checkpoint"),
            KillKind::Extension => Some("extend"),
            KillKind::TwoPhase => Some("2pc"),
        }
    }

    /// The longest sleep after the marker: shorter than the phase usually lasts.
    fn max_delay_ms(self) -> u64 {
        match self {
            KillKind::Random => 0,
            KillKind::Vacuum | KillKind::ParallelVacuum => 15,
            KillKind::Checkpoint | KillKind::Extension => 8,
            // A PREPARE or a finish is one WAL flush (and a state file at a checkpoint).
            KillKind::TwoPhase => 2,
        }
    }
}

pub enum KillOutcome {
    Killed {
        kind: KillKind,
        inside: bool,
    },
    /// The phase's marker did not come within 30 s: killed then, counted as random.
    MarkerMissed,
    /// The child died (or never got ready) before the kill: an anomaly, described.
    ExitedEarly(String),
}

pub struct Spawn<'a> {
    pub data: &'a Path,
    pub acklog: &'a Path,
    pub workload: Workload,
    pub generation: u64,
    pub seed: u64,
}

/// Waits for a line satisfying `want`; false if the child exits or `timeout` passes first.
fn wait_line(child: &mut Child, rx: &Receiver<String>, want: &dyn Fn(&str) -> bool, timeout: Duration) -> Result<bool> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) if want(&line) => return Ok(true),
            Ok(_) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(false),
            Err(RecvTimeoutError::Timeout) => {
                if child.try_wait()?.is_some() {
                    return Ok(false);
                }
            }
        }
    }
    Ok(false)
}

/// The last couple of KB of the children's stderr.
fn tail(path: &Path) -> String {
    let mut s = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(2000)));
        let _ = f.read_to_string(&mut s);
    }
    s
}

pub fn kill_once(
    s: &Spawn<'_>,
    child_log: &Path,
    clients: u64,
    kind: KillKind,
    rng: &mut impl rand::Rng,
) -> Result<KillOutcome> {
    let stderr = OpenOptions::new().create(true).append(true).open(child_log)?;
    let mut child = Command::new(std::env::current_exe().context("finding the settle binary")?)
        .arg("torture-child")
        .arg("--data")
        .arg(s.data)
        .arg("--acklog")
        .arg(s.acklog)
        .args(["--workload", s.workload.name()])
        .args(["--generation", &s.generation.to_string(), "--seed", &s.seed.to_string()])
        .args(["--clients", &clients.to_string()])
        .args(super::child::extra().iter().flat_map(|kv| ["--set", kv.as_str()]))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .context("starting the child")?;
    let out = child.stdout.take().context("the child's stdout")?;
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(l) = line else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let r = aim(&mut child, &rx, kind, rng);
    // Whatever happened, the child is dead before we go on (kill fails only if it exited).
    let _ = child.kill();
    let status = child.wait()?;
    let _ = reader.join();
    let rest: Vec<String> = rx.try_iter().collect();
    Ok(match r? {
        Aim::Early(what) => KillOutcome::ExitedEarly(format!(
            "child {} {what} ({status}); its stderr ends:\n{}",
            s.generation,
            tail(child_log)
        )),
        Aim::Missed => KillOutcome::MarkerMissed,
        Aim::Fired => {
            let inside = kind.marker().is_some_and(|m| {
                let (begin, end) = (format!("{m} begin"), format!("{m} end"));
                rest.iter().fold(true, |inside, l| if *l == end { false } else { inside || *l == begin })
            });
            KillOutcome::Killed { kind, inside }
        }
    })
}

enum Aim {
    Fired,
    Missed,
    Early(&'static str),
}

/// Waits for the moment and sends SIGKILL (std's `Child::kill`).
fn aim(child: &mut Child, rx: &Receiver<String>, kind: KillKind, rng: &mut impl rand::Rng) -> Result<Aim> {
    if !wait_line(child, rx, &|l| l == "ready", Duration::from_secs(300))? {
        return Ok(Aim::Early("never became ready"));
    }
    let mut aim = Aim::Fired;
    match kind.marker() {
        None => std::thread::sleep(super::jitter(rng, 100, 1500)),
        Some(m) => {
            while rx.try_recv().is_ok() {}
            let begin = format!("{m} begin");
            if wait_line(child, rx, &|l| l == begin, Duration::from_secs(30))? {
                std::thread::sleep(super::jitter(rng, 0, kind.max_delay_ms()));
            } else {
                aim = Aim::Missed;
            }
        }
    }
    if child.try_wait()?.is_some() {
        return Ok(Aim::Early("exited before it was killed"));
    }
    child.kill().context("SIGKILL")?;
    Ok(aim)
}
