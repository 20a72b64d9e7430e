//! `settle torture`: SIGKILL a process running a workload on a real data directory, recover,
//! and prove that nothing acknowledged was lost and nothing unacknowledged appeared.
//! `settle torture --wraparound` runs the XID wraparound soak instead (`crate::torture::soak`).
//!
//! # The loop
//!
//! ```text
//!   parent                                   child (`settle torture-child`, a re-exec)
//!   ──────                                   ─────────────────────────────────────────
//!   init DIR/data once (autovacuum off)
//!   verify (as below)
//!   loop:
//!     spawn child ───────────────────────▶   open DIR/data (fsync on, synchronous_commit on,
//!                                            autovacuum naptime 1s, freeze ages ~1000)
//!     wait for "ready"   ◀── stdout ──────   print "ready"; run clients + VACUUM, checkpoint
//!     pick a target:                         and extension threads; print "vacuum begin",
//!       random | vacuum | parallel vacuum |  "checkpoint begin", "extend begin" (and "... end")
//!       checkpoint | extension (in turn)     append B/C/A lines to DIR/acklog
//!     wait for the matching "... begin",
//!     sleep 0..a few ms, SIGKILL ────────▶   ✝
//!     read the child's remaining stdout: the kill landed inside the phase iff no "... end"
//!       followed the "begin"
//!     verify: Database::open (crash recovery, timed); read the new ack log lines; check every
//!       logged transaction (verify.rs); the workload's invariants; settledb::check; close;
//!       append R1/R0 for the transactions that were in doubt
//! ```
//!
//! # What is verified, and why that is sound
//!
//! The child writes `B key payload` to the ack log before a transaction's first change, `C key`
//! after `commit()` returned Ok, `A key` after a rollback ([`acklog`]). Each line is one
//! `write(2)` to a file opened `O_APPEND`; SIGKILL kills the process, not the kernel, so every
//! write that returned is in the page cache and the parent reads it. Hence, after a kill:
//!
//! * a `C` key was acknowledged by the engine (with `synchronous_commit` on, its commit record
//!   was flushed to disk by `fsync` before `commit` returned): it **must** be present;
//! * an `A` key was rolled back: it **must** be absent;
//! * a key whose last line is `B` was somewhere between its first change and the `C` line
//!   (possibly inside `commit`, possibly acknowledged with the `C` line not yet written): it
//!   **may** be present or absent, and whichever recovery chose is recorded (`R1`/`R0`) and
//!   must hold at every later verification;
//! * a key never begun must not be found (a phantom).
//!
//! Present rows must also say what the `B` line said they would. The workload's own checks
//! catch half-applied transactions that the keys alone would not: for pgbench, every account,
//! teller and branch balance equals the sum of the deltas of the history rows naming it (so
//! the four changes of each transaction are all there or none is); for TPC-C, consistency
//! conditions 1-4 and each new order's line count; for the bulk table, every burst of
//! [`schema::BURST_ROWS`] rows is whole. Then `settledb::check` verifies the engine's own
//! invariants (WAL before data, visibility map, frozen XIDs, indexes against the heap).
//!
//! What the page cache does not protect is a crash of the machine; that is what the fault
//! injection tests (`FaultFs`, lost unsynced writes) are for. This command tests the real
//! file system, the real `fsync`, and real concurrency: the kill lands while the checkpointer,
//! the WAL writer, autovacuum workers, a manual VACUUM and a bulk insert are at work.
//!
//! Savepoints and prepared transactions: one pgbench step in four is a savepoint transaction
//! (nested savepoints, some rolled back to, some released), each savepoint's writes logged as
//! their own key, so after recovery a rolled-back savepoint's write must be absent and a
//! released one present once its transaction's commit was acknowledged. A two-phase thread
//! ([`twophase`]) prepares transactions and finishes them later, often in a later child after
//! a kill; the verifier holds each to `prepared_xacts` (an acknowledged PREPARE stays listed
//! with its writes invisible until an acknowledged COMMIT PREPARED makes them visible).
//! `--kills` aimed at `2pc` land inside PREPARE, COMMIT PREPARED and ROLLBACK PREPARED.
//!
//! Half the child's VACUUMs run with two parallel workers (`VACUUM (PARALLEL 2)`: heap phases
//! I and III and the index bulk deletes shared), marked `parallel vacuum begin`/`end`, so kills
//! aimed at `parallel vacuum` land inside parallel heap phases and parallel bulk deletes.
//!
//! # Output
//!
//! Kills survived by target kind (and how many landed inside the targeted phase), verifications,
//! acknowledged commits checked present, rolled-back ones checked absent, in-doubt transactions
//! and how they resolved, recovery time and WAL replayed, and anomalies, which must be 0: the
//! exit status is 1 otherwise. `--json` prints the same as one object.

pub mod acklog;
pub mod child;
mod kill;
pub mod power;
pub mod schema;
pub mod soak;
pub mod twophase;
pub mod verify;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use settledb::{Config, Database};

use acklog::{AckLog, Ledger};
use kill::{KillKind, KillOutcome};
use schema::Workload;

#[derive(clap::Args, Debug)]
pub struct TortureArgs {
    /// The run's directory: DIR/data (the database), DIR/acklog, DIR/child.log. An existing
    /// run is continued (its ack log and history ids too).
    #[arg(long)]
    pub dir: PathBuf,
    /// Kill the child this many times (10 when neither --kills nor --seconds is given).
    #[arg(long)]
    pub kills: Option<u64>,
    /// Stop starting children after this many seconds in all.
    #[arg(long)]
    pub seconds: Option<f64>,
    #[arg(long, value_enum, default_value = "pgbench")]
    pub workload: Workload,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Client threads (TPC-C terminals) in the child.
    #[arg(long, default_value_t = 4)]
    pub clients: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Cut the power instead of killing the process: the workload runs in this process on a
    /// fault-injecting in-memory file system, and each cut keeps, loses or tears every write
    /// not yet fsynced (see `power`). `--kills` counts the cuts (default 20); DIR is unused.
    #[arg(long)]
    pub power_loss: bool,
    /// With --power-loss, a test of the test: the file system acknowledges every fsync
    /// without making anything durable, so the run must report lost acknowledged commits.
    #[arg(long, requires = "power_loss")]
    pub lying_fsync: bool,
    /// With --power-loss: when a cut leads to an anomaly, write the image it left (before
    /// recovery) to this directory, a data directory `settle waldump`/`inspect`/`check` read.
    #[arg(long, requires = "power_loss")]
    pub keep_failed: Option<PathBuf>,
    /// The XID wraparound soak (`--wraparound`, in DIR/data) and its options.
    #[command(flatten)]
    pub soak: crate::torture::soak::SoakArgs,
    /// Engine parameters over the child's defaults, `name=value`, for the child and for this
    /// process's recoveries and checks alike (say `wal_keep_size=4GB`, to keep the WAL a
    /// crash's history is read from with `settle waldump`).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
}

/// The figures a run prints.
#[derive(Default, Serialize)]
pub struct Report {
    pub workload: &'static str,
    pub seed: u64,
    pub clients: u64,
    pub seconds: f64,
    pub kills: u64,
    pub kills_by_kind: std::collections::BTreeMap<&'static str, u64>,
    /// Kills whose targeted phase had begun and not ended when the child died.
    pub kills_inside_phase: std::collections::BTreeMap<&'static str, u64>,
    /// Targeted kills whose marker did not come in time (then made at a random moment).
    pub markers_missed: u64,
    pub verifications: u64,
    /// Acknowledged commits found present at the last verification, by kind.
    pub acknowledged_commits: std::collections::BTreeMap<&'static str, u64>,
    pub acknowledged_commits_total: u64,
    /// Rolled-back or resolved-absent transactions found absent at the last verification.
    pub absent_checked: u64,
    pub in_doubt: u64,
    pub in_doubt_committed: u64,
    pub in_doubt_absent: u64,
    /// Writes of savepoint transactions rolled back (`ROLLBACK TO`, or the whole transaction)
    /// found absent at the last verification; the released ones that committed are counted in
    /// `acknowledged_commits["savepoint write"]`.
    pub savepoint_writes_absent: u64,
    /// Prepared transactions found listed, their rows invisible, at the last verification.
    pub prepared_open: u64,
    /// Rolled-back prepared transactions (ROLLBACK PREPARED, or cut by a kill and found
    /// absent) found absent at the last verification; the committed ones are counted in
    /// `acknowledged_commits["prepared transaction"]`.
    pub prepared_rolled_back_absent: u64,
    /// Writes prepared transactions rolled back to a savepoint before PREPARE, found absent at
    /// the last verification.
    pub prepared_savepoint_writes_absent: u64,
    /// Prepared transactions finished by a later child than the one that prepared them.
    pub prepared_finished_after_kill: u64,
    /// The replication slot's confirmed position at the last verification (advanced by the
    /// child's decoding, never behind what it acknowledged), and the decoded rows checked
    /// against the tables over all verifications.
    pub slot_confirmed_lsn: u64,
    pub slot_decoded_rows_checked: u64,
    /// The most prepared transactions found open at one verification.
    pub prepared_open_max: u64,
    pub recovery_ms_avg: f64,
    pub recovery_ms_max: f64,
    pub wal_records_replayed_avg: f64,
    pub wal_records_replayed_max: u64,
    pub anomaly_count: u64,
    pub anomalies: Vec<String>,
}

struct Run {
    dir: PathBuf,
    data: PathBuf,
    acklog: PathBuf,
    ledger: Ledger,
    report: Report,
    recovery_ms_sum: f64,
    replayed_sum: u64,
    recoveries: u64,
}

pub fn run(a: TortureArgs) -> Result<ExitCode> {
    child::set_extra(a.set.clone())?;
    if a.power_loss {
        return power::run(&a);
    }
    if a.soak.wraparound {
        return crate::torture::soak::run_cmd(&a.dir.join("data"), a.seed, a.clients as usize, a.json, &a.soak);
    }
    let started = Instant::now();
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let mut r = Run {
        dir: a.dir.clone(),
        data: a.dir.join("data"),
        acklog: a.dir.join("acklog"),
        ledger: Ledger::default(),
        report: Report { workload: a.workload.name(), seed: a.seed, clients: a.clients, ..Report::default() },
        recovery_ms_sum: 0.0,
        replayed_sum: 0,
        recoveries: 0,
    };
    r.init(a.workload, a.seed)?;
    r.verify(a.workload)?;
    let kills = a.kills.unwrap_or(if a.seconds.is_some() { u64::MAX } else { 10 });
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(a.seed);
    while r.report.kills < kills && r.report.anomaly_count == 0 {
        if a.seconds.is_some_and(|s| started.elapsed().as_secs_f64() >= s) {
            break;
        }
        let generation = r.next_generation()?;
        let kind = KillKind::ALL[(r.report.kills % KillKind::ALL.len() as u64) as usize];
        let spawn = kill::Spawn { data: &r.data, acklog: &r.acklog, workload: a.workload, generation, seed: a.seed };
        match kill::kill_once(&spawn, &r.dir.join("child.log"), a.clients, kind, &mut rng)? {
            KillOutcome::Killed { kind, inside } => {
                r.report.kills += 1;
                *r.report.kills_by_kind.entry(kind.name()).or_default() += 1;
                if inside {
                    *r.report.kills_inside_phase.entry(kind.name()).or_default() += 1;
                }
            }
            KillOutcome::MarkerMissed => {
                r.report.kills += 1;
                r.report.markers_missed += 1;
                *r.report.kills_by_kind.entry(KillKind::Random.name()).or_default() += 1;
            }
            KillOutcome::ExitedEarly(why) => r.anomaly(why),
        }
        r.verify(a.workload)?;
    }
    r.report.seconds = started.elapsed().as_secs_f64();
    r.finish();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r.report)?);
    } else {
        print_text(&r.report, &r.data);
    }
    Ok(if r.report.anomaly_count == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The configuration the parent recovers and verifies with: no background maintenance.
fn quiet_config() -> Result<Config> {
    let mut c = child::config()?;
    c.set("autovacuum", "off")?;
    Ok(c)
}

impl Run {
    fn anomaly(&mut self, s: String) {
        self.report.anomaly(s);
    }

    /// Creates and loads the database on the first run; checks the workload on later ones.
    fn init(&mut self, workload: Workload, seed: u64) -> Result<()> {
        let marker = self.dir.join("workload");
        if self.data.join("global").join("pg_control").exists() {
            let was = std::fs::read_to_string(&marker).unwrap_or_default();
            if was.trim() != workload.name() {
                bail!("{} holds a {:?} run, not {}", self.dir.display(), was.trim(), workload.name());
            }
            if !self.dir.join("twophase").exists() {
                // A run begun before the two-phase table existed.
                let db = Database::open(&self.data, quiet_config()?)?;
                schema::ensure_twophase(&db)?;
                db.close()?;
                std::fs::write(self.dir.join("twophase"), "")?;
            }
            return Ok(());
        }
        let db = Database::open(&self.data, quiet_config()?)?;
        schema::init(&db, workload, seed).context("loading the workload's tables")?;
        db.close()?;
        std::fs::write(&marker, workload.name())?;
        std::fs::write(self.dir.join("twophase"), "")?;
        Ok(())
    }

    /// The next child's number, kept in DIR/generation so a continued run never reuses ids.
    fn next_generation(&self) -> Result<u64> {
        let path = self.dir.join("generation");
        let last: u64 = std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        std::fs::write(&path, (last + 1).to_string())?;
        Ok(last + 1)
    }

    /// Recovers, checks everything, and records the in-doubt resolutions.
    fn verify(&mut self, workload: Workload) -> Result<()> {
        self.report.verifications += 1;
        let t0 = Instant::now();
        let db = match Database::open(&self.data, quiet_config()?) {
            Ok(db) => db,
            Err(e) => {
                self.anomaly(format!("crash recovery failed: {e}"));
                return Ok(());
            }
        };
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        let replayed = db.recovery_report().records_replayed;
        if db.recovery_report().performed {
            self.recoveries += 1;
            self.recovery_ms_sum += ms;
            self.replayed_sum += replayed;
            self.report.recovery_ms_max = self.report.recovery_ms_max.max(ms);
            self.report.wal_records_replayed_max = self.report.wal_records_replayed_max.max(replayed);
        }
        self.ledger.catch_up(&self.acklog)?;
        let f = verify_database(&db, workload, &self.ledger)?;
        db.close()?;
        let log = AckLog::open(&self.acklog)?;
        for (present, kind, key) in &f.resolutions {
            log.record(if *present { "R1" } else { "R0" }, *kind, key, "")?;
        }
        for key in &f.still_prepared {
            log.record("RP", 'p', key, "")?;
        }
        self.ledger.catch_up(&self.acklog)?;
        self.report.absorb(f);
        Ok(())
    }

    fn finish(&mut self) {
        if self.recoveries > 0 {
            self.report.recovery_ms_avg = self.recovery_ms_sum / self.recoveries as f64;
            self.report.wal_records_replayed_avg = self.replayed_sum as f64 / self.recoveries as f64;
        }
    }
}

/// Everything a verification checks on a recovered database: every logged transaction against
/// the ledger, the workload's invariants, the bulk table's bursts, and `settledb::check`.
fn verify_database(db: &Database, workload: Workload, ledger: &Ledger) -> Result<verify::Findings> {
    let mut f = verify::Findings::default();
    match workload {
        Workload::Pgbench => verify::pgbench(db, ledger, &mut f)?,
        Workload::Tpcc => verify::tpcc(db, ledger, &mut f)?,
    }
    verify::bursts(db, ledger, &mut f)?;
    verify::twophase(db, ledger, &mut f)?;
    verify::slot(db, ledger, &mut f)?;
    let check = settledb::check::check_database(db)?;
    for p in &check.problems {
        f.anomaly(format!("settledb check: {p}"));
    }
    Ok(f)
}

impl Report {
    /// Takes in one verification's findings (the in-doubt resolutions already recorded).
    fn absorb(&mut self, f: verify::Findings) {
        self.acknowledged_commits = f.acknowledged.clone();
        self.acknowledged_commits_total = f.acknowledged.values().sum();
        self.absent_checked = f.absent_checked;
        self.savepoint_writes_absent = f.savepoint_writes_absent;
        self.prepared_open = f.prepared_open;
        self.prepared_open_max = self.prepared_open_max.max(f.prepared_open);
        self.prepared_rolled_back_absent = f.prepared_rolled_back_absent;
        self.prepared_savepoint_writes_absent = f.prepared_savepoint_writes_absent;
        self.prepared_finished_after_kill = f.prepared_finished_after_kill;
        self.slot_confirmed_lsn = f.slot_confirmed;
        self.slot_decoded_rows_checked += f.slot_rows_checked;
        self.in_doubt_committed += f.in_doubt_present;
        self.in_doubt_absent += f.in_doubt_absent;
        self.in_doubt += f.in_doubt_present + f.in_doubt_absent;
        self.anomaly_count += f.anomaly_count;
        let room = 100usize.saturating_sub(self.anomalies.len());
        self.anomalies.extend(f.anomalies.into_iter().take(room));
    }

    fn anomaly(&mut self, s: String) {
        self.anomaly_count += 1;
        if self.anomalies.len() < 100 {
            self.anomalies.push(s);
        }
    }
}

fn print_text(r: &Report, data: &Path) {
    let by = |m: &std::collections::BTreeMap<&'static str, u64>, kinds: &[KillKind]| {
        kinds.iter().map(|k| format!("{} {}", k.name(), m.get(k.name()).unwrap_or(&0))).collect::<Vec<_>>()
    };
    let targeted = &KillKind::ALL[1..];
    println!("settle torture: {} on {}, seed {}, {} clients", r.workload, data.display(), r.seed, r.clients);
    println!(
        "kills survived:         {} in {:.1} s ({})",
        r.kills,
        r.seconds,
        by(&r.kills_by_kind, &KillKind::ALL).join(", ")
    );
    let inside = by(&r.kills_inside_phase, targeted).join(", ");
    println!("  inside the phase:     {inside} (markers missed: {})", r.markers_missed);
    print_body(r);
}

/// The lines every torture report shares, from the verifications on.
fn print_body(r: &Report) {
    println!(
        "verifications:          {} (crash recovery, ack log, workload invariants, settledb check)",
        r.verifications
    );
    let kinds: Vec<String> = r.acknowledged_commits.iter().map(|(k, n)| format!("{k}s {n}")).collect();
    println!("acknowledged commits:   {} checked present ({})", r.acknowledged_commits_total, kinds.join(", "));
    println!("rolled back:            {} checked absent (or found absent after an earlier kill)", r.absent_checked);
    println!(
        "in doubt at a kill:     {} ({} found committed, {} found absent)",
        r.in_doubt, r.in_doubt_committed, r.in_doubt_absent
    );
    let n = |k: &str| r.acknowledged_commits.get(k).copied().unwrap_or(0);
    println!(
        "savepoint writes:       {} released and committed, checked present; {} rolled back, checked absent",
        n("savepoint write"),
        r.savepoint_writes_absent
    );
    println!(
        "prepared transactions:  {} committed (checked present), {} rolled back (checked absent), {} open \
         (listed, invisible; at most {} at once); {} finished after a kill",
        n("prepared transaction"),
        r.prepared_rolled_back_absent,
        r.prepared_open,
        r.prepared_open_max,
        r.prepared_finished_after_kill
    );
    println!(
        "  inside them:          {} writes rolled back to a savepoint before PREPARE, checked absent",
        r.prepared_savepoint_writes_absent
    );
    println!(
        "replication slot:       confirmed at {} (never behind what the child acknowledged); {} decoded rows \
         checked committed in their tables",
        settledb::Lsn(r.slot_confirmed_lsn),
        r.slot_decoded_rows_checked
    );
    println!(
        "recovery:               avg {:.0} ms, max {:.0} ms; WAL records replayed avg {:.0}, max {}",
        r.recovery_ms_avg, r.recovery_ms_max, r.wal_records_replayed_avg, r.wal_records_replayed_max
    );
    println!("anomalies:              {}", r.anomaly_count);
    for a in &r.anomalies {
        println!("  {a}");
    }
}

/// A pause of `lo..=hi` milliseconds.
fn jitter(rng: &mut impl rand::Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.gen_range(lo..=hi))
}
