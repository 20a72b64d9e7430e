//! `settle torture --power-loss`: cut the power, not only the process.
//!
//! SIGKILL ends a process but keeps the kernel's page cache, so a write the engine never
//! fsynced still reaches the disk afterwards; the SIGKILL torture cannot catch a missing
//! `fsync`. This mode runs the same workload (the same clients, VACUUM, checkpoints and
//! extension bursts as `settle torture-child`, one step at a time on one thread) on the
//! in-memory fault-injecting file system ([`FaultFs`]) and cuts the power there:
//!
//! ```text
//!   init the tables on a FaultFs (a clean shutdown)
//!   per power cut:
//!     open the database (crash recovery of the last cut), clients, extender
//!     arm the cut: `FaultFs::arm_power_cut(k)`: just before the k-th changing file call
//!       (write, truncate, fsync, create, remove, rename) from now, k drawn from the seed
//!       * random:     k anywhere in the next few hundred steps' calls
//!       * vacuum | checkpoint | extension: k within the calls the last such phase made,
//!         armed as the phase begins, so the cut lands inside it (a checkpoint includes
//!         recycling WAL segments; a VACUUM is parallel half the time)
//!     run steps until the cut has come; the image it left is what a power loss leaves:
//!       every unsynced write kept, lost or, past 512 bytes, torn to a prefix of sectors
//!       (`CrashMode::Random`, drawn from the seed; every fifth cut loses all of them), and
//!       directory entries never fsynced gone
//!     abandon the old machine; recover on the image; verify exactly as the SIGKILL torture
//!       does (ack log, workload invariants, bursts, `settledb::check`)
//! ```
//!
//! The ack log lives in this process's memory, outside the machine whose power goes: a `C`
//! line is recorded only if `commit` returned before the cut (a client of a machine that lost
//! power never hears from it again), so "acknowledged" means "its commit record was fsynced
//! before the power went", which is what must survive.
//!
//! Replay: the crash points and what survives are drawn from `--seed`; the workload steps are
//! too. The engine's background threads (WAL writer, checkpointer, background writer) make
//! some file calls of their own, so a replay cuts the same phase at nearly, not always exactly,
//! the same call; each anomaly names the cut (number, phase, call) it was found after.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use settledb::io::fault::{CrashMode, FaultFs};
use settledb::Database;
use std::sync::Mutex;

use super::acklog::{line, Acks, Ledger};
use super::child::{vacuum_step, Client, Extender};
use super::schema::{self, Workload};
use super::{verify_database, Report, TortureArgs};

/// Where the database lives on the in-memory file system.
const DATA: &str = "/data";

/// Steps a generation runs at most before the cut is forced at the next call.
const MAX_STEPS: u32 = 2_000;

/// A random cut comes within about this many client steps' file calls.
const RANDOM_STEPS: f64 = 200.0;

/// The phases a cut aims at, in turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Aim {
    Random,
    Vacuum,
    Checkpoint,
    Extension,
}

impl Aim {
    const ALL: [Aim; 4] = [Aim::Random, Aim::Vacuum, Aim::Checkpoint, Aim::Extension];

    fn name(self) -> &'static str {
        match self {
            Aim::Random => "random",
            Aim::Vacuum => "vacuum",
            Aim::Checkpoint => "checkpoint",
            Aim::Extension => "extension",
        }
    }
}

/// The in-memory ack log of a power-loss run, recording for one machine (`fs`).
struct PowerAcks<'a> {
    lines: &'a Mutex<Vec<String>>,
    fs: &'a FaultFs,
}

impl Acks for PowerAcks<'_> {
    fn record(&self, op: &str, kind: char, key: &str, payload: &str) -> Result<()> {
        // An acknowledgement after the cut never reached the client.
        if op == "C" && self.fs.power_was_cut() {
            return Ok(());
        }
        self.lines.lock().expect("ack log lock").push(line(op, kind, key, payload).trim_end().to_string());
        Ok(())
    }
}

/// The state carried from one power cut to the next.
struct PowerRun {
    workload: Workload,
    seed: u64,
    clients: u64,
    fs: Arc<FaultFs>,
    lines: Mutex<Vec<String>>,
    applied: usize,
    ledger: Ledger,
    report: Report,
    /// Changing file calls the last phase of each aim made (the window a cut is drawn from).
    span: BTreeMap<&'static str, u64>,
    /// Changing file calls per client step, averaged (a random cut falls within ~200 steps).
    calls_per_step: f64,
    recovery_ms_sum: f64,
    replayed_sum: u64,
    recoveries: u64,
    /// Cuts that kept every unsynced write at random / lost them all.
    cuts_random: u64,
    cuts_lose_all: u64,
}

pub fn run(a: &TortureArgs) -> Result<std::process::ExitCode> {
    let started = Instant::now();
    let fs = FaultFs::new();
    let mut r = PowerRun {
        workload: a.workload,
        seed: a.seed,
        clients: a.clients,
        fs,
        lines: Mutex::new(Vec::new()),
        applied: 0,
        ledger: Ledger::default(),
        report: Report { workload: a.workload.name(), seed: a.seed, clients: a.clients, ..Report::default() },
        span: BTreeMap::new(),
        calls_per_step: 25.0,
        recovery_ms_sum: 0.0,
        replayed_sum: 0,
        recoveries: 0,
        cuts_random: 0,
        cuts_lose_all: 0,
    };
    r.init()?;
    r.verify("the load")?;
    if a.lying_fsync {
        r.fs.set_syncs_lie(true);
    }
    let cuts = a.kills.unwrap_or(if a.seconds.is_some() { u64::MAX } else { 20 });
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed ^ 0x0070_6f77_6572);
    while r.report.kills < cuts && r.report.anomaly_count == 0 {
        if a.seconds.is_some_and(|s| started.elapsed().as_secs_f64() >= s) {
            break;
        }
        let aim = Aim::ALL[(r.report.kills % Aim::ALL.len() as u64) as usize];
        let (phase, inside, call) = match r.one_generation(aim, &mut rng) {
            Ok(o) => o,
            Err(e) => {
                // The workload failed on a machine recovered from the last cut.
                r.report.anomaly(format!("after power cut {}: the workload failed: {e:#}", r.report.kills));
                break;
            }
        };
        r.report.kills += 1;
        *r.report.kills_by_kind.entry(phase).or_default() += 1;
        if inside {
            *r.report.kills_inside_phase.entry(phase).or_default() += 1;
        }
        let image = r.fs.crash(CrashMode::LoseUnsynced); // a copy of what the cut left
        let before = r.report.anomaly_count;
        r.verify(&format!("power cut {} ({phase}, file call {call})", r.report.kills))?;
        if r.report.anomaly_count > before {
            if let Some(dir) = &a.keep_failed {
                image.export(dir).with_context(|| format!("exporting the crash image to {}", dir.display()))?;
                eprintln!("the image power cut {} left is in {}", r.report.kills, dir.display());
            }
        }
    }
    r.report.seconds = started.elapsed().as_secs_f64();
    if r.recoveries > 0 {
        r.report.recovery_ms_avg = r.recovery_ms_sum / r.recoveries as f64;
        r.report.wal_records_replayed_avg = r.replayed_sum as f64 / r.recoveries as f64;
    }
    if a.json {
        let mut v = serde_json::to_value(&r.report)?;
        v["mode"] = "power-loss".into();
        v["cuts_writes_kept_lost_or_torn"] = r.cuts_random.into();
        v["cuts_unsynced_all_lost"] = r.cuts_lose_all.into();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "settle torture --power-loss: {} on a fault-injecting file system, seed {}, {} clients",
            r.report.workload, r.report.seed, r.report.clients
        );
        println!(
            "power cuts:             {} ({} with each unsynced write kept, lost or torn; {} losing them all)",
            r.report.kills, r.cuts_random, r.cuts_lose_all
        );
        let by = |m: &BTreeMap<&'static str, u64>| {
            ["random", "vacuum", "parallel vacuum", "checkpoint", "extension"]
                .iter()
                .map(|k| format!("{k} {}", m.get(k).unwrap_or(&0)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("  landed in:            {}", by(&r.report.kills_by_kind));
        println!("  inside the aimed phase: {}", by(&r.report.kills_inside_phase));
        super::print_body(&r.report);
    }
    Ok(if r.report.anomaly_count == 0 { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::from(1) })
}

impl PowerRun {
    fn data() -> &'static Path {
        Path::new(DATA)
    }

    fn open(&self, config: settledb::Config) -> settledb::Result<Database> {
        let fs: Arc<dyn settledb::io::FileSystem> = self.fs.clone();
        Database::open_with_fs(fs, Self::data(), config)
    }

    /// Creates and loads the tables, then shuts down cleanly.
    fn init(&mut self) -> Result<()> {
        use settledb::io::FileSystem;
        self.fs.create_dir_all(Self::data())?;
        let db = self.open(super::quiet_config()?)?;
        schema::init(&db, self.workload, self.seed).context("loading the workload's tables")?;
        db.close()?;
        Ok(())
    }

    /// Runs the workload on the current machine until the power cut aimed at `aim` comes;
    /// leaves `self.fs` holding what the cut left. Returns the phase the cut landed in (or was
    /// aimed at), whether it landed inside it, and the file call it came at.
    fn one_generation(&mut self, aim: Aim, rng: &mut impl Rng) -> Result<(&'static str, bool, u64)> {
        let generation = self.report.kills + 1;
        let gseed = self.seed ^ generation.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mode = if generation.is_multiple_of(5) {
            self.cuts_lose_all += 1;
            CrashMode::LoseUnsynced
        } else {
            self.cuts_random += 1;
            CrashMode::Random { seed: rng.gen() }
        };
        let fs = self.fs.clone();
        let db = self.open(power_config()?).context("opening the database after a power cut")?;
        let acks = PowerAcks { lines: &self.lines, fs: &fs };
        let outcome = {
            let tpcc = match self.workload {
                Workload::Tpcc => Some(workload::tpcc::embedded::Embedded::new(&db)?),
                Workload::Pgbench => None,
            };
            let mut clients = (0..self.clients)
                .map(|c| Client::new(&db, tpcc.as_ref(), self.seed, generation, c, gseed))
                .collect::<Result<Vec<_>>>()?;
            let mut ext = Extender::new(&db, generation)?;
            let mut steps = Steps { db: &db, acks: &acks, clients: &mut clients, ext: &mut ext };
            let warmup = rng.gen_range(0..40);
            if aim == Aim::Random {
                let window = (self.calls_per_step * RANDOM_STEPS) as u64;
                fs.arm_power_cut(rng.gen_range(1..=window.max(1)), mode);
            }
            let mut outcome = None;
            for step in 0..MAX_STEPS {
                let start = fs.ops();
                let (phase, armed) = if step >= warmup && aim != Aim::Random {
                    let window = self.span.get(aim.name()).copied();
                    if let Some(w) = window {
                        fs.arm_power_cut(rng.gen_range(1..=w.max(1)), mode);
                    }
                    (steps.run(aim, rng)?, window.is_some())
                } else {
                    let pick = match rng.gen_range(0..20) {
                        0 => Aim::Vacuum,
                        1 => Aim::Checkpoint,
                        2 => Aim::Extension,
                        _ => Aim::Random,
                    };
                    (steps.run(pick, rng)?, false)
                };
                let calls = fs.ops() - start;
                if fs.power_was_cut() {
                    outcome = Some((phase, armed, start));
                    break;
                }
                if armed {
                    // The phase ended before the cut (this one was shorter): try again.
                    fs.disarm_power_cut();
                }
                match phase {
                    "random" => self.calls_per_step = 0.9 * self.calls_per_step + 0.1 * calls as f64,
                    "parallel vacuum" => _ = self.span.insert("vacuum", calls.max(1)),
                    p => _ = self.span.insert(p, calls.max(1)),
                }
            }
            if outcome.is_none() {
                // No phase of that kind came in time: cut at the next call of a client step.
                fs.arm_power_cut(1, mode);
                let start = fs.ops();
                steps.run(Aim::Random, rng)?;
                outcome = Some(("random", false, start));
            }
            outcome
        };
        db.abandon();
        self.fs = fs.take_power_cut().context("the power cut never came")?;
        self.fs.set_syncs_lie(fs.syncs_lie());
        let (phase, inside, call) = outcome.unwrap_or(("random", false, 0));
        Ok((phase, inside, call))
    }

    /// Recovers on the current machine and checks everything, recording the in-doubt
    /// resolutions in the ack log.
    fn verify(&mut self, after: &str) -> Result<()> {
        self.report.verifications += 1;
        let t0 = Instant::now();
        let db = match self.open(super::quiet_config()?) {
            Ok(db) => db,
            Err(e) => {
                self.report.anomaly(format!("after {after}: crash recovery failed: {e}"));
                return Ok(());
            }
        };
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        if db.recovery_report().performed {
            let replayed = db.recovery_report().records_replayed;
            self.recoveries += 1;
            self.recovery_ms_sum += ms;
            self.replayed_sum += replayed;
            self.report.recovery_ms_max = self.report.recovery_ms_max.max(ms);
            self.report.wal_records_replayed_max = self.report.wal_records_replayed_max.max(replayed);
        }
        self.catch_up()?;
        let mut f = match verify_database(&db, self.workload, &self.ledger) {
            Ok(f) => f,
            Err(e) => {
                // Reading the recovered database failed (a torn or lost page, say).
                self.report.anomaly(format!("after {after}: verifying the recovered database: {e:#}"));
                db.abandon();
                return Ok(());
            }
        };
        db.close()?;
        for a in &mut f.anomalies {
            *a = format!("after {after}: {a}");
        }
        for (present, kind, key) in &f.resolutions {
            self.lines
                .lock()
                .expect("ack log lock")
                .push(line(if *present { "R1" } else { "R0" }, *kind, key, "").trim_end().to_string());
        }
        self.catch_up()?;
        self.report.absorb(f);
        Ok(())
    }

    fn catch_up(&mut self) -> Result<()> {
        let lines = self.lines.lock().expect("ack log lock");
        for l in &lines[self.applied..] {
            self.ledger.apply(l)?;
        }
        self.applied = lines.len();
        Ok(())
    }
}

/// One machine's workload, a step at a time.
struct Steps<'a, 'db> {
    db: &'db Database,
    acks: &'a PowerAcks<'a>,
    clients: &'a mut Vec<Client<'db>>,
    ext: &'a mut Extender<'db>,
}

impl Steps<'_, '_> {
    /// Runs one step of the kind `aim` names (`Random`: one client transaction); returns the
    /// phase it was ("parallel vacuum" for a VACUUM with workers).
    fn run(&mut self, aim: Aim, rng: &mut impl Rng) -> Result<&'static str> {
        Ok(match aim {
            Aim::Random => {
                let n = self.clients.len().max(1);
                if let Some(c) = self.clients.get_mut(rng.gen_range(0..n)) {
                    c.step(self.acks)?;
                }
                "random"
            }
            Aim::Vacuum => {
                let mut phase = "vacuum";
                vacuum_step(self.db, rng, &mut |m| {
                    if m.starts_with("parallel") {
                        phase = "parallel vacuum";
                    }
                })?;
                phase
            }
            Aim::Checkpoint => {
                self.db.checkpoint().context("CHECKPOINT")?;
                "checkpoint"
            }
            Aim::Extension => {
                self.ext.step(self.acks, &mut |_| {})?;
                "extension"
            }
        })
    }
}

/// The configuration of the machine whose power is cut: durable commits, no autovacuum (the
/// steps run VACUUM themselves, so one seed drives what runs), small freeze ages so VACUUM
/// freezes, and checkpoints only when a step asks.
fn power_config() -> Result<settledb::Config> {
    let mut c = super::child::config()?;
    for (k, v) in [("autovacuum", "off"), ("checkpoint_timeout", "1h"), ("max_wal_size", "1GB")] {
        c.set(k, v)?;
    }
    Ok(c)
}
