//! `settle torture --wraparound`: the XID wraparound soak (issue 7, item 2).
//!
//! PostgreSQL's promise about wraparound is that it never silently loses data: a row whose
//! xmin is about to look "in the future" modulo 2^32 is frozen by an (anti-wraparound) VACUUM
//! first, and if VACUUM cannot keep up, the server stops assigning XIDs before any row
//! becomes invisible ("database is not accepting commands to avoid wraparound data loss").
//! The soak proves both halves on the embedded engine, in one process, with real files.
//!
//! **With autovacuum** (the default): three tables are populated: `soak_accounts` (updated
//! by the workload), `soak_history` (append-mostly; each worker also deletes its oldest rows,
//! so vacuum has dead tuples to remove) and `soak_cold` (written once, never touched again:
//! only an anti-wraparound vacuum can save its rows). Worker threads run transfers between
//! accounts while a burner thread consumes XIDs with the test-only XID consumer
//! ([`Database::consume_xids`], PostgreSQL's `consume_xids`) in steps of `--xid-step` until
//! `--xids` have been consumed (by default past 2 × 2^32, into the third epoch), under small
//! freeze ages. After each step the burner waits until autovacuum has brought every table's
//! relfrozenxid age back under `autovacuum_freeze_max_age` (a stall of two minutes is an
//! anomaly), and checks in one snapshot that the balances still sum to zero.
//!
//! Each worker owns the accounts `aid ≡ worker (mod threads)`, so its oracle (the balance of
//! each of its accounts and the ids of its live history rows) is exact without locking: a
//! change enters the oracle only after `commit()` returned `Ok`. At the end every row of every
//! table is compared with the oracle (missing, extra or changed rows are anomalies), `check`
//! runs, the database is closed, reopened, and verified again.
//!
//! **Without autovacuum** (`--autovacuum off`): the same population and workload, but XIDs
//! are burned until the stop limit refuses them. Then: a write must be refused with
//! [`Error::WraparoundStop`] (whose message says to VACUUM), the wraparound warnings must have
//! been issued before, every row must still read back exactly (nothing lost at the limit), a
//! database-wide VACUUM (which needs no XID) must restore service, and a write must then
//! succeed. Rows, `check`, restart and rows again, as above.
//!
//! **The held prepared transaction** (issue 18; `--prepared-hold`, on unless 0): before
//! anything else, a transaction is prepared (`soak-held`, PREPARE of a transaction that wrote
//! nothing, which takes an XID then) and left open, so no relfrozenxid can ever pass its XID
//! while it is. With autovacuum it is held for `--prepared-hold` XIDs (twice the freeze max
//! age by default), during which the burner does not wait for autovacuum (it cannot catch up)
//! but records how far relfrozenxid was held back; then it is committed and autovacuum must
//! bring every table back under `autovacuum_freeze_max_age` (the catch-up time is reported).
//! Without autovacuum it is held to the stop limit: the warnings and the stop error must name
//! it (GID and XID, after PostgreSQL's hint "You might also need to commit or roll back old
//! prepared transactions"), a database-wide VACUUM must *not* restore service while it is
//! open, and after ROLLBACK PREPARED the VACUUM must.
//!
//! **The lagging replication slot** (with the held prepared transaction): a logical slot
//! (`soak_lagging`) is created just before it (a slot created while a transaction runs waits
//! for it, as PostgreSQL's does), so its `catalog_xmin` is at or before the prepared
//! transaction's XID, and nothing decodes from it: it keeps the WAL from its `restart_lsn` and
//! holds back the catalog's horizon, so `pg_class`'s relfrozenxid (and with it the database's
//! frozen XID) cannot pass it. The warnings must name it too (PostgreSQL's hint: "or drop stale
//! replication slots"). When the prepared transaction is finished the slot is advanced to the
//! end of the WAL (between checkpoints, whose running-transactions records give it a new
//! restart point), which releases its WAL and its `catalog_xmin` (the figures after are the
//! advanced slot's), and then dropped, since nothing consumes it and it would lag again.
//!
//! `fsync` is off: the soak is about XID arithmetic and freezing, not durability across
//! crashes (`settle torture` kills processes for that).

use std::collections::{BTreeSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use settledb::{Column, Config, Database, Error, Index, Schema, Table, TableOptions, Type, VacuumParams, Value};

/// The soak's own options (the directory, `--seed`, `--clients` (the worker threads) and `--json`
/// are `settle torture`'s).
#[derive(Args, Clone, Debug)]
pub struct SoakArgs {
    /// Run the XID wraparound soak instead of the kill loop.
    #[arg(long, conflicts_with_all = ["kills", "seconds", "workload"])]
    pub wraparound: bool,
    /// XIDs to consume (the default is past 2 × 2^32).
    #[arg(long, default_value_t = 9_000_000_000, requires = "wraparound")]
    pub xids: u64,
    /// XIDs burned per step of the XID consumer.
    #[arg(long, default_value_t = 10_000_000, requires = "wraparound")]
    pub xid_step: u64,
    /// `autovacuum_freeze_max_age` for the soak (`vacuum_freeze_table_age` is half of it,
    /// `vacuum_freeze_min_age` a twentieth).
    #[arg(long, default_value_t = 100_000_000, requires = "wraparound")]
    pub freeze_max_age: u64,
    /// `off` burns XIDs up to the stop limit and proves VACUUM restores service.
    #[arg(long, default_value = "on", value_parser = ["on", "off"], requires = "wraparound")]
    pub autovacuum: String,
    /// Rows in `soak_accounts` (and in `soak_cold`).
    #[arg(long, default_value_t = 10_000, requires = "wraparound")]
    pub accounts: u32,
    /// XIDs burned while a prepared transaction (`soak-held`, prepared before anything else)
    /// stays open; 0: none. With autovacuum the default is twice `--freeze-max-age` (at most
    /// 2^31 - 200,000,000, short of the warn limit); without, it is held to the stop limit
    /// whatever the number (not 0), and finished only after a VACUUM alone failed to restore
    /// service.
    #[arg(long, requires = "wraparound")]
    pub prepared_hold: Option<u64>,
}

/// The GID of the soak's long-held prepared transaction.
pub const HELD_GID: &str = "soak-held";

/// What the soak did and found.
#[derive(Serialize, Debug, Default)]
pub struct SoakReport {
    pub mode: &'static str,
    pub xids_consumed: u64,
    pub next_xid_start: u64,
    pub next_xid_end: u64,
    pub epoch_end: u32,
    pub freeze_max_age: u64,
    pub transactions_committed: u64,
    pub autovacuums: u64,
    pub anti_wraparound_autovacuums: u64,
    pub max_relfrozenxid_age: u64,
    pub snapshot_checks: u64,
    pub xid_warnings: u64,
    pub writes_refused: u64,
    pub service_restored_by_vacuum: bool,
    pub rows_verified: u64,
    pub rows_lost: u64,
    pub rows_extra: u64,
    pub rows_changed: u64,
    pub check_clean: bool,
    pub verified_after_restart: bool,
    /// The prepared transaction held open (issue 18), when there was one.
    pub prepared: Option<HeldReport>,
    pub anomalies: Vec<String>,
    pub seconds: f64,
}

/// What the long-held prepared transaction did to the soak.
#[derive(Serialize, Debug, Default, Clone)]
pub struct HeldReport {
    pub gid: String,
    pub xid: u64,
    /// XIDs consumed while it was open.
    pub xids_consumed_while_open: u64,
    /// How far behind the next XID it held the oldest relfrozenxid (the most seen).
    pub max_relfrozenxid_age_while_open: u64,
    /// `committed` or `rolled back`.
    pub outcome: &'static str,
    /// Whether the last wraparound warning issued while it was open named it (GID and XID).
    pub warnings_named_it: bool,
    pub last_warning: Option<String>,
    /// Stop-limit mode: the error that refused new XIDs, and whether it named it.
    pub stop_error: Option<String>,
    pub stop_error_named_it: bool,
    /// Stop-limit mode: whether a database-wide VACUUM restored service while it was open
    /// (it must not: the prepared transaction holds VACUUM's cutoff).
    pub vacuum_restored_service_while_open: bool,
    /// The oldest relfrozenxid's age once VACUUM (autovacuum, or the manual one at the stop
    /// limit) had run after it was finished.
    pub relfrozenxid_age_after: u64,
    /// Autovacuum mode: seconds from finishing it until autovacuum brought every table back
    /// under `autovacuum_freeze_max_age`.
    pub catch_up_seconds: f64,
    /// The lagging replication slot held beside it.
    pub slot: Option<LaggingSlotReport>,
}

/// What the lagging replication slot did to the soak.
#[derive(Serialize, Default, Clone, Debug)]
pub struct LaggingSlotReport {
    pub name: String,
    pub catalog_xmin: u32,
    pub restart_lsn: String,
    /// The most WAL it kept (insert position minus its restart LSN), bytes.
    pub max_wal_kept_bytes: u64,
    /// Whether the last wraparound warning issued while it lagged named it.
    pub warnings_named_it: bool,
    /// After the advance (then it is dropped): its catalog_xmin and restart LSN, and whether it
    /// was invalidated.
    pub catalog_xmin_after: u32,
    pub restart_lsn_after: String,
    pub invalidated: bool,
}

/// The lagging slot's name.
pub const LAGGING_SLOT: &str = "soak_lagging";

const COLD_FILLER: &str = "frozen-or-lost";

fn col(name: &str, ty: Type) -> Column {
    Column { name: name.into(), ty, nullable: false }
}

fn config(args: &SoakArgs) -> Result<Config> {
    let max = args.freeze_max_age;
    let pairs = [
        ("autovacuum", args.autovacuum.clone()),
        ("autovacuum_naptime", "1s".into()),
        ("autovacuum_freeze_max_age", max.to_string()),
        ("vacuum_freeze_table_age", (max / 2).to_string()),
        ("vacuum_freeze_min_age", (max / 20).to_string()),
        ("log_autovacuum_min_duration", "-1".into()),
        ("fsync", "off".into()),
        ("max_prepared_transactions", "2".into()),
        ("wal_level", "logical".into()),
    ];
    Ok(Config::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())))?)
}

/// Runs the soak in `dir` (which must not hold a database yet) with `threads` workers.
pub fn run(dir: &Path, seed: u64, threads: usize, args: &SoakArgs) -> Result<SoakReport> {
    if threads == 0 || args.accounts < 2 * threads as u32 || args.xid_step == 0 {
        bail!("--clients must be at least 1, --accounts at least twice --clients, --xid-step positive");
    }
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        bail!("{} is not empty: the soak creates its own database", dir.display());
    }
    let started = Instant::now();
    let db = Database::open(dir, config(args)?).with_context(|| format!("opening {}", dir.display()))?;
    // Prepared before the tables exist, so no relfrozenxid is older than it: while it is open,
    // no VACUUM can advance the oldest frozen XID at all.
    let held = if args.prepared_hold == Some(0) { None } else { Some(Held::prepare(&db, args)?) };
    // Issue 18: the lagging replication slot is created here, beside the prepared transaction.
    let mut soak = Soak::populate(&db, args)?;
    soak.held = held.map(Mutex::new);
    let mut report = SoakReport {
        mode: if args.autovacuum == "on" { "autovacuum" } else { "stop limit" },
        freeze_max_age: args.freeze_max_age,
        next_xid_start: db.next_xid().0,
        ..SoakReport::default()
    };
    soak.run(&db, seed, threads, args, &mut report);
    report.next_xid_end = db.next_xid().0;
    report.epoch_end = db.next_xid().epoch();
    report.xids_consumed = report.next_xid_end - report.next_xid_start;
    let av = db.autovacuum_stats();
    report.autovacuums = av.vacuums;
    report.anti_wraparound_autovacuums = av.wraparound_vacuums;
    report.xid_warnings = db.xid_warnings();
    report.transactions_committed = soak.committed.load(Ordering::Relaxed);
    if let Some(h) = &soak.held {
        let h = h.lock().unwrap();
        if h.open {
            report.anomalies.push(format!("the prepared transaction {HELD_GID} was never finished"));
        }
        report.prepared = Some(h.report.clone());
    }
    soak.verify(&db, &mut report, true);
    report.check_clean = check_clean(&db, &mut report);
    db.close().context("closing after the soak")?;
    let db = Database::open(dir, config(args)?).context("reopening after the soak")?;
    let (lost, extra, changed) = (report.rows_lost, report.rows_extra, report.rows_changed);
    soak.verify(&db, &mut report, false);
    report.verified_after_restart =
        (report.rows_lost, report.rows_extra, report.rows_changed) == (lost, extra, changed);
    report.check_clean &= check_clean(&db, &mut report);
    db.close().context("closing after the restart")?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

fn check_clean(db: &Database, report: &mut SoakReport) -> bool {
    match settledb::check::check_database(db) {
        Ok(r) if r.is_clean() => true,
        Ok(r) => {
            report.anomalies.push(format!("check: {r}"));
            false
        }
        Err(e) => {
            report.anomalies.push(format!("check failed: {e}"));
            false
        }
    }
}

/// The tables and the oracle.
struct Soak {
    accounts: Table,
    history: Table,
    cold: Table,
    accounts_pk: Index,
    history_pk: Index,
    /// Expected balance per account (each worker writes only its own accounts).
    balances: Vec<AtomicI64>,
    /// Each worker's live history ids, handed over when it stops.
    history_ids: Mutex<BTreeSet<i64>>,
    committed: AtomicU64,
    refused: AtomicU64,
    stop: AtomicBool,
    anomalies: Mutex<Vec<String>>,
    /// The long-held prepared transaction, when there is one.
    held: Option<Mutex<Held>>,
}

/// The prepared transaction the soak holds open while XIDs burn.
struct Held {
    open: bool,
    /// The next XID when it was prepared; the XIDs to burn before finishing it (autovacuum).
    from: u64,
    hold: u64,
    report: HeldReport,
}

impl Held {
    /// PREPARE TRANSACTION of a transaction that wrote nothing (it gets its XID then).
    fn prepare(db: &Database, args: &SoakArgs) -> Result<Held> {
        db.create_logical_replication_slot(LAGGING_SLOT, "test_decoding", false)?;
        let d = db.replication_slot(LAGGING_SLOT).context("the lagging slot")?;
        let mut tx = db.begin()?;
        tx.prepare(HELD_GID).context("preparing the held transaction")?;
        let xid = db.prepared_xacts().iter().find(|p| p.gid == HELD_GID).context("the held transaction")?.xid;
        let hold = args.prepared_hold.unwrap_or((2 * args.freeze_max_age).min((1 << 31) - 200_000_000));
        let slot = LaggingSlotReport {
            name: LAGGING_SLOT.into(),
            catalog_xmin: d.catalog_xmin.0,
            restart_lsn: d.restart_lsn.to_string(),
            ..LaggingSlotReport::default()
        };
        Ok(Held {
            open: true,
            from: db.next_xid().0,
            hold,
            report: HeldReport { gid: HELD_GID.into(), xid: xid.0, slot: Some(slot), ..HeldReport::default() },
        })
    }

    /// Notes what the burn did while it is open: XIDs, relfrozenxid age, the last warning.
    fn observe(&mut self, db: &Database, age: u64) {
        if !self.open {
            return;
        }
        self.report.xids_consumed_while_open = db.next_xid().0 - self.from;
        self.report.max_relfrozenxid_age_while_open = self.report.max_relfrozenxid_age_while_open.max(age);
        if let Some(w) = db.last_xid_warning() {
            let xid = settledb::FullXid(self.report.xid).xid();
            self.report.warnings_named_it = w.contains(&format!("\"{HELD_GID}\" (xid {xid}"));
            if let Some(slot) = self.report.slot.as_mut() {
                slot.warnings_named_it = w.contains(&format!("\"{LAGGING_SLOT}\""));
            }
            self.report.last_warning = Some(w);
        }
        if let (Some(slot), Some(d)) = (self.report.slot.as_mut(), db.replication_slot(LAGGING_SLOT)) {
            let kept = db.current_wal_insert_lsn().0.saturating_sub(d.restart_lsn.0);
            slot.max_wal_kept_bytes = slot.max_wal_kept_bytes.max(kept);
        }
    }

    /// COMMIT PREPARED or ROLLBACK PREPARED; an error is an anomaly.
    fn finish(&mut self, db: &Database, commit: bool) -> Option<String> {
        let r = if commit { db.commit_prepared(HELD_GID) } else { db.rollback_prepared(HELD_GID) };
        self.open = false;
        self.report.outcome = if commit { "committed" } else { "rolled back" };
        if let Err(e) = r {
            return Some(format!("finishing the prepared transaction {HELD_GID}: {e}"));
        }
        self.release_slot(db).err().map(|e| format!("advancing the lagging slot {LAGGING_SLOT}: {e}"))
    }

    /// Advances the lagging slot to the end of the WAL. Its restart point must be a
    /// running-transactions record whose transactions a later one shows finished, so
    /// checkpoints (which log them) alternate with advances until its catalog_xmin moves past
    /// the finished prepared transaction (it starts at or before it) (the workers' short transactions are running at
    /// each checkpoint, so one pair may not do).
    fn release_slot(&mut self, db: &Database) -> Result<()> {
        let Some(slot) = self.report.slot.as_mut() else { return Ok(()) };
        let held = settledb::FullXid(self.report.xid).xid();
        for _ in 0..50 {
            db.checkpoint()?;
            let d = db.replication_slot(LAGGING_SLOT).context("the lagging slot")?;
            if d.invalidated {
                break;
            }
            db.replication_slot_advance(LAGGING_SLOT, settledb::Lsn(u64::MAX))?;
            let d = db.replication_slot(LAGGING_SLOT).context("the lagging slot")?;
            if held.precedes(d.catalog_xmin) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let d = db.replication_slot(LAGGING_SLOT).context("the lagging slot")?;
        slot.catalog_xmin_after = d.catalog_xmin.0;
        slot.restart_lsn_after = d.restart_lsn.to_string();
        slot.invalidated = d.invalidated;
        // Nothing consumes it, so it would lag again at once: dropped, as the hint says
        // ("drop stale replication slots"), so that autovacuum can catch the catalog up too.
        db.drop_replication_slot(LAGGING_SLOT)?;
        Ok(())
    }
}

impl Soak {
    fn populate(db: &Database, args: &SoakArgs) -> Result<Soak> {
        let pk = |c: &str| TableOptions { primary_key: Some(vec![c.into()]), ..TableOptions::default() };
        let accounts_schema =
            Schema { columns: vec![col("aid", Type::Int4), col("abalance", Type::Int8), col("filler", Type::Text)] };
        let history_schema =
            Schema { columns: vec![col("hid", Type::Int8), col("aid", Type::Int4), col("delta", Type::Int8)] };
        let cold_schema = Schema { columns: vec![col("id", Type::Int4), col("note", Type::Text)] };
        let accounts = db.create_table("soak_accounts", accounts_schema, pk("aid"))?;
        let history = db.create_table("soak_history", history_schema, pk("hid"))?;
        let cold = db.create_table("soak_cold", cold_schema, TableOptions::default())?;
        let filler = "x".repeat(80);
        for chunk in (0..args.accounts as i32).collect::<Vec<_>>().chunks(1000) {
            let mut tx = db.begin()?;
            for &aid in chunk {
                tx.insert(&accounts, &[Value::Int4(aid), Value::Int8(0), Value::Text(filler.clone())])?;
                tx.insert(&cold, &[Value::Int4(aid), Value::Text(format!("{COLD_FILLER} {aid}"))])?;
            }
            tx.commit()?;
        }
        Ok(Soak {
            accounts_pk: db.index("soak_accounts_pkey")?,
            history_pk: db.index("soak_history_pkey")?,
            accounts,
            history,
            cold,
            balances: (0..args.accounts).map(|_| AtomicI64::new(0)).collect(),
            history_ids: Mutex::new(BTreeSet::new()),
            committed: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            anomalies: Mutex::new(Vec::new()),
            held: None,
        })
    }

    fn anomaly(&self, what: String) {
        self.anomalies.lock().unwrap().push(what);
    }

    /// Workers and the burner until the XIDs are consumed (or, without autovacuum, until the
    /// stop limit and the recovery from it).
    fn run(&self, db: &Database, seed: u64, threads: usize, args: &SoakArgs, report: &mut SoakReport) {
        let target = db.next_xid().0 + args.xids;
        std::thread::scope(|s| {
            for w in 0..threads {
                let rng = StdRng::seed_from_u64(seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                s.spawn(move || self.worker(db, w, threads, args, rng));
            }
            if args.autovacuum == "on" {
                self.burn_with_autovacuum(db, target, args, report);
            } else {
                self.burn_to_stop_limit(db, threads, args, report);
            }
            self.stop.store(true, Ordering::Release);
        });
        report.writes_refused += self.refused.load(Ordering::Relaxed);
        report.anomalies.append(&mut self.anomalies.lock().unwrap());
        if args.autovacuum == "off" {
            self.restore_service(db, report);
        }
    }

    fn max_age(db: &Database) -> u64 {
        let next = db.next_xid().xid().0;
        db.tables().iter().map(|t| u64::from(next.wrapping_sub(t.relfrozenxid().0))).max().unwrap_or(0)
    }

    /// The age of the oldest frozen XID the wraparound limits were last computed from. A
    /// VACUUM sets its table's relfrozenxid first and moves the limits after, so between the
    /// two [`Self::max_age`] can look caught up while the stop limit is still the old one.
    fn limits_age(db: &Database) -> u64 {
        u64::from(db.next_xid().xid().0.wrapping_sub(db.xid_limits().oldest_xid.0))
    }

    /// Whether the held prepared transaction is still open.
    fn holding(&self) -> bool {
        self.held.as_ref().is_some_and(|h| h.lock().unwrap().open)
    }

    fn burn_with_autovacuum(&self, db: &Database, target: u64, args: &SoakArgs, report: &mut SoakReport) {
        let mut released: Option<Instant> = None;
        while db.next_xid().0 < target && !self.failed() {
            let mut n = args.xid_step.min(target - db.next_xid().0);
            if let Some(h) = &self.held {
                let mut h = h.lock().unwrap();
                let end = h.from + h.hold;
                if h.open && db.next_xid().0 >= end {
                    if let Some(a) = h.finish(db, true) {
                        self.anomaly(a);
                    }
                    // No XIDs until autovacuum has caught up: the stop limit is still where
                    // the prepared transaction held it.
                    released = Some(Instant::now());
                    n = 0;
                } else if h.open {
                    n = n.min(end - db.next_xid().0);
                }
            }
            if let Err(e) = if n > 0 { db.consume_xids(n).map(drop) } else { Ok(()) } {
                self.anomaly(format!("XID consumer at {}: {e}", db.next_xid().0));
                return;
            }
            if let Some(h) = self.held.as_ref().filter(|_| self.holding()) {
                // Autovacuum cannot advance relfrozenxid past the prepared transaction: the
                // age grows with every step; waiting for it would stall.
                h.lock().unwrap().observe(db, Self::max_age(db));
                self.snapshot_check(db, report);
                continue;
            }
            if released.is_none() {
                // (The step that finished the prepared transaction still shows its hold.)
                report.max_relfrozenxid_age = report.max_relfrozenxid_age.max(Self::max_age(db));
            }
            let deadline = Instant::now() + Duration::from_secs(120);
            while Self::max_age(db).max(Self::limits_age(db)) > args.freeze_max_age {
                if Instant::now() > deadline {
                    self.anomaly(format!(
                        "autovacuum left relfrozenxid age at {} and the XID limits' age at {} for two \
                         minutes (freeze max age {})",
                        Self::max_age(db),
                        Self::limits_age(db),
                        args.freeze_max_age
                    ));
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let (Some(at), Some(h)) = (released.take(), &self.held) {
                let mut h = h.lock().unwrap();
                h.report.catch_up_seconds = at.elapsed().as_secs_f64();
                h.report.relfrozenxid_age_after = Self::max_age(db);
            }
            self.snapshot_check(db, report);
        }
        if self.holding() {
            // The burn ended first: finish it, and let autovacuum catch up.
            if let Some(a) = self.held.as_ref().and_then(|h| h.lock().unwrap().finish(db, true)) {
                self.anomaly(a);
            }
        }
    }

    fn burn_to_stop_limit(&self, db: &Database, threads: usize, args: &SoakArgs, report: &mut SoakReport) {
        // The burn reaches the stop limit in a few dozen steps: let the workers commit first,
        // so that rows written before it are among those checked (on a loaded machine they
        // might not otherwise have run at all).
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.committed.load(Ordering::Relaxed) < threads as u64 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        loop {
            let outcome = db.consume_xids(args.xid_step);
            if let Some(h) = &self.held {
                h.lock().unwrap().observe(db, Self::max_age(db));
            }
            match outcome {
                Ok(_) => report.max_relfrozenxid_age = report.max_relfrozenxid_age.max(Self::max_age(db)),
                Err(e @ Error::WraparoundStop { .. }) => {
                    if let Some(h) = &self.held {
                        let mut h = h.lock().unwrap();
                        let xid = settledb::FullXid(h.report.xid).xid();
                        h.report.stop_error_named_it = e.to_string().contains(&format!("\"{HELD_GID}\" (xid {xid}"));
                        h.report.stop_error = Some(e.to_string());
                    }
                    break;
                }
                Err(e) => {
                    self.anomaly(format!("XID consumer at {}: {e}", db.next_xid().0));
                    return;
                }
            }
            self.snapshot_check(db, report);
        }
        report.max_relfrozenxid_age = report.max_relfrozenxid_age.max(Self::max_age(db));
        if db.xid_warnings() == 0 {
            self.anomaly("the stop limit came without a wraparound warning first".into());
        }
        // Give the workers time to meet the refusal.
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.refused.load(Ordering::Relaxed) < threads as u64 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// At the stop limit: writes are refused, reads are exact, VACUUM restores service.
    fn restore_service(&self, db: &Database, report: &mut SoakReport) {
        match self.transfer_once(db, 0, 1, 1) {
            Err(Error::WraparoundStop { .. }) => report.writes_refused += 1,
            Err(e) => report.anomalies.push(format!("a write at the stop limit failed otherwise: {e}")),
            Ok(()) => report.anomalies.push("a write at the stop limit was accepted".into()),
        }
        self.verify(db, report, false);
        if let Some(h) = &self.held {
            self.vacuum_while_held(db, &mut h.lock().unwrap(), report);
        }
        if let Err(e) = db.vacuum(None, &VacuumParams::default()) {
            report.anomalies.push(format!("VACUUM at the stop limit: {e}"));
            return;
        }
        if let Some(h) = &self.held {
            h.lock().unwrap().report.relfrozenxid_age_after = Self::max_age(db);
        }
        match self.transfer_once(db, 0, 1, 1) {
            Ok(()) => {
                self.balances[0].fetch_sub(1, Ordering::Relaxed);
                self.balances[1].fetch_add(1, Ordering::Relaxed);
                report.service_restored_by_vacuum = true;
            }
            Err(e) => report.anomalies.push(format!("a write after VACUUM: {e}")),
        }
    }

    /// At the stop limit with the prepared transaction open: a database-wide VACUUM must not
    /// restore service (it cannot freeze past the prepared transaction); then it is rolled
    /// back, and the caller's VACUUM must.
    fn vacuum_while_held(&self, db: &Database, h: &mut Held, report: &mut SoakReport) {
        if let Err(e) = db.vacuum(None, &VacuumParams::default()) {
            report.anomalies.push(format!("VACUUM at the stop limit, prepared transaction open: {e}"));
        }
        h.observe(db, Self::max_age(db));
        match self.transfer_once(db, 0, 1, 1) {
            Err(Error::WraparoundStop { .. }) => report.writes_refused += 1,
            Err(e) => report.anomalies.push(format!("a write at the stop limit failed otherwise: {e}")),
            Ok(()) => {
                self.balances[0].fetch_sub(1, Ordering::Relaxed);
                self.balances[1].fetch_add(1, Ordering::Relaxed);
                h.report.vacuum_restored_service_while_open = true;
                report
                    .anomalies
                    .push(format!("VACUUM restored service while the prepared transaction {HELD_GID} held its cutoff"));
            }
        }
        if let Some(a) = h.finish(db, false) {
            report.anomalies.push(a);
        }
    }

    fn failed(&self) -> bool {
        !self.anomalies.lock().unwrap().is_empty()
    }

    fn transfer_once(&self, db: &Database, from: i32, to: i32, delta: i64) -> settledb::Result<()> {
        let mut tx = db.begin()?;
        self.add(&mut tx, from, -delta)?;
        self.add(&mut tx, to, delta)?;
        tx.commit()
    }

    fn add(&self, tx: &mut settledb::Transaction<'_>, aid: i32, delta: i64) -> settledb::Result<()> {
        let found = tx.update_by_key(&self.accounts_pk, &[Value::Int4(aid)], |row| {
            let mut row = row.to_vec();
            if let Value::Int8(b) = row[1] {
                row[1] = Value::Int8(b + delta);
            }
            Ok(row)
        })?;
        if found.is_none() {
            return Err(Error::NotFound(format!("soak_accounts row {aid}")));
        }
        Ok(())
    }

    /// One worker: transfers between its own accounts, a history row each, deleting its
    /// oldest history rows beyond 1,000.
    fn worker(&self, db: &Database, w: usize, threads: usize, args: &SoakArgs, mut rng: StdRng) {
        let threads = threads as i32;
        let owned = (args.accounts as i32 - w as i32 + threads - 1) / threads;
        let mut live: VecDeque<i64> = VecDeque::new();
        let mut seq = 0i64;
        while !self.stop.load(Ordering::Acquire) {
            let a = rng.gen_range(0..owned) * threads + w as i32;
            let b = rng.gen_range(0..owned) * threads + w as i32;
            let delta = rng.gen_range(-5000..=5000i64);
            let hid = ((w as i64) << 40) | seq;
            let evict = (live.len() >= 1000).then(|| live[0]);
            let outcome = (|| {
                let mut tx = db.begin()?;
                self.add(&mut tx, a, -delta)?;
                self.add(&mut tx, b, delta)?;
                tx.insert(&self.history, &[Value::Int8(hid), Value::Int4(b), Value::Int8(delta)])?;
                if let Some(old) = evict {
                    if !tx.delete_by_key(&self.history_pk, &[Value::Int8(old)])? {
                        return Err(Error::NotFound(format!("soak_history row {old}")));
                    }
                }
                tx.commit()
            })();
            match outcome {
                Ok(()) => {
                    self.balances[a as usize].fetch_sub(delta, Ordering::Relaxed);
                    self.balances[b as usize].fetch_add(delta, Ordering::Relaxed);
                    live.push_back(hid);
                    if evict.is_some() {
                        live.pop_front();
                    }
                    seq += 1;
                    self.committed.fetch_add(1, Ordering::Relaxed);
                }
                Err(Error::WraparoundStop { .. }) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(e) => {
                    self.anomaly(format!("worker {w}: {e}"));
                    break;
                }
            }
        }
        self.history_ids.lock().unwrap().extend(live);
    }

    /// In one snapshot, the balances sum to zero (transfers only move money).
    fn snapshot_check(&self, db: &Database, report: &mut SoakReport) {
        let sum = (|| -> settledb::Result<i64> {
            let mut tx = db.begin()?;
            let mut sum = 0i64;
            for r in tx.scan(&self.accounts)? {
                if let Value::Int8(b) = r?.1[1] {
                    sum += b;
                }
            }
            Ok(sum)
        })();
        report.snapshot_checks += 1;
        match sum {
            Ok(0) => {}
            Ok(s) => self.anomaly(format!("balances sum to {s} in one snapshot, not 0")),
            Err(e) => self.anomaly(format!("snapshot check: {e}")),
        }
    }

    /// Compares every row of every table with the oracle; counts into `report` when `count`.
    fn verify(&self, db: &Database, report: &mut SoakReport, count: bool) {
        let mut lost = 0u64;
        let mut extra = 0u64;
        let mut changed = 0u64;
        let mut seen = 0u64;
        let result = (|| -> settledb::Result<()> {
            let mut tx = db.begin()?;
            let mut balance_seen = vec![false; self.balances.len()];
            for r in tx.scan(&self.accounts)? {
                let row = r?.1;
                seen += 1;
                match (&row[0], &row[1]) {
                    (Value::Int4(aid), Value::Int8(b)) if (*aid as usize) < self.balances.len() => {
                        let aid = *aid as usize;
                        if std::mem::replace(&mut balance_seen[aid], true) {
                            extra += 1;
                        } else if *b != self.balances[aid].load(Ordering::Relaxed) {
                            changed += 1;
                        }
                    }
                    _ => extra += 1,
                }
            }
            lost += balance_seen.iter().filter(|s| !**s).count() as u64;
            let expected = self.history_ids.lock().unwrap().clone();
            let mut present = BTreeSet::new();
            for r in tx.scan(&self.history)? {
                seen += 1;
                match r?.1[0] {
                    Value::Int8(hid) if expected.contains(&hid) && present.insert(hid) => {}
                    _ => extra += 1,
                }
            }
            lost += (expected.len() - present.len()) as u64;
            let mut cold_seen = vec![false; self.balances.len()];
            for r in tx.scan(&self.cold)? {
                let row = r?.1;
                seen += 1;
                match (&row[0], &row[1]) {
                    (Value::Int4(id), Value::Text(note)) if (*id as usize) < cold_seen.len() => {
                        if std::mem::replace(&mut cold_seen[*id as usize], true) {
                            extra += 1;
                        } else if *note != format!("{COLD_FILLER} {id}") {
                            changed += 1;
                        }
                    }
                    _ => extra += 1,
                }
            }
            lost += cold_seen.iter().filter(|s| !**s).count() as u64;
            Ok(())
        })();
        if let Err(e) = result {
            report.anomalies.push(format!("reading every row: {e}"));
        }
        if count {
            report.rows_verified += seen;
        }
        report.rows_lost += lost;
        report.rows_extra += extra;
        report.rows_changed += changed;
        if lost + extra + changed > 0 {
            report.anomalies.push(format!("rows: {lost} lost, {extra} extra, {changed} changed"));
        }
    }
}

/// Runs the soak and prints its report (text or JSON); fails when there was an anomaly.
pub fn run_cmd(dir: &Path, seed: u64, threads: usize, json: bool, args: &SoakArgs) -> Result<std::process::ExitCode> {
    let report = run(dir, seed, threads, args)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print(&report);
    }
    Ok(if report.anomalies.is_empty() { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::from(1) })
}

/// Prints the report as text.
pub fn print(report: &SoakReport) {
    println!("settle torture --wraparound ({})", report.mode);
    println!(
        "  XIDs consumed:                {} (next XID {} -> {}, epoch {})",
        report.xids_consumed, report.next_xid_start, report.next_xid_end, report.epoch_end
    );
    println!("  autovacuum_freeze_max_age:    {}", report.freeze_max_age);
    println!("  max relfrozenxid age seen:    {}", report.max_relfrozenxid_age);
    println!("  transactions committed:       {}", report.transactions_committed);
    println!(
        "  autovacuums:                  {} ({} to prevent wraparound)",
        report.autovacuums, report.anti_wraparound_autovacuums
    );
    println!("  snapshot checks:              {}", report.snapshot_checks);
    println!("  wraparound warnings:          {}", report.xid_warnings);
    if report.mode == "stop limit" {
        println!("  writes refused at the limit:  {}", report.writes_refused);
        println!("  VACUUM restored service:      {}", if report.service_restored_by_vacuum { "yes" } else { "NO" });
    }
    if let Some(h) = &report.prepared {
        print_held(h, report.mode);
    }
    println!("  rows verified:                {}", report.rows_verified);
    println!("  rows lost:                    {}", report.rows_lost);
    println!("  rows extra / changed:         {} / {}", report.rows_extra, report.rows_changed);
    println!("  check:                        {}", if report.check_clean { "clean" } else { "NOT CLEAN" });
    println!("  verified after restart:       {}", if report.verified_after_restart { "yes" } else { "NO" });
    println!("  anomalies:                    {}", report.anomalies.len());
    for a in &report.anomalies {
        println!("    {a}");
    }
    println!("  seconds:                      {:.1}", report.seconds);
}

fn print_held(h: &HeldReport, mode: &str) {
    let yes = |b: bool| if b { "yes" } else { "no" };
    println!("  prepared transaction:         \"{}\" (xid {}), {}", h.gid, settledb::FullXid(h.xid).xid(), h.outcome);
    println!("    XIDs consumed while open:   {}", h.xids_consumed_while_open);
    println!("    relfrozenxid age held to:   {}", h.max_relfrozenxid_age_while_open);
    println!("    warnings named it:          {}", yes(h.warnings_named_it));
    if let Some(s) = &h.slot {
        println!(
            "  lagging slot {}: catalog_xmin {} restart {} (kept up to {} bytes of WAL; warnings named it: {}); \
             advanced after: catalog_xmin {} restart {}{}",
            s.name,
            s.catalog_xmin,
            s.restart_lsn,
            s.max_wal_kept_bytes,
            yes(s.warnings_named_it),
            s.catalog_xmin_after,
            s.restart_lsn_after,
            if s.invalidated { " (invalidated)" } else { "" }
        );
    }
    if mode == "stop limit" {
        println!("    stop error named it:        {}", yes(h.stop_error_named_it));
        println!("    VACUUM alone restored:      {} (it must not)", yes(h.vacuum_restored_service_while_open));
    } else {
        println!("    autovacuum caught up in:    {:.1} s", h.catch_up_seconds);
    }
    println!("    relfrozenxid age after:     {}", h.relfrozenxid_age_after);
    for (what, text) in [("last warning", &h.last_warning), ("stop error", &h.stop_error)] {
        if let Some(t) = text {
            println!("    {what}: {}", t.replace('\n', "\n      "));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> SoakArgs {
        SoakArgs {
            wraparound: true,
            xids: 0,
            xid_step: 1,
            freeze_max_age: 100_000_000,
            autovacuum: "off".into(),
            accounts: 20,
            prepared_hold: Some(0),
        }
    }

    /// The verifier is what makes the soak's "rows lost: 0" mean something: an oracle that
    /// disagrees with the tables in any of the three ways must be reported.
    #[test]
    fn verifier_reports_lost_extra_and_changed_rows() {
        let dir = tempfile::tempdir().unwrap();
        let a = args();
        let db = Database::open(dir.path(), config(&a).unwrap()).unwrap();
        let soak = Soak::populate(&db, &a).unwrap();
        soak.transfer_once(&db, 0, 1, 7).unwrap();
        soak.balances[0].store(-7, Ordering::Relaxed);
        soak.balances[1].store(7, Ordering::Relaxed);
        let mut clean = SoakReport::default();
        soak.verify(&db, &mut clean, true);
        assert!(clean.anomalies.is_empty(), "{:?}", clean.anomalies);
        assert_eq!(clean.rows_verified, 40);

        // A committed change the oracle does not know about is a changed row.
        soak.balances[1].store(8, Ordering::Relaxed);
        // A history row the oracle expects but the table lacks is a lost row.
        soak.history_ids.lock().unwrap().insert(42);
        // A row the oracle never saw is an extra row.
        let mut tx = db.begin().unwrap();
        tx.insert(&soak.history, &[Value::Int8(43), Value::Int4(0), Value::Int8(0)]).unwrap();
        tx.commit().unwrap();
        let mut bad = SoakReport::default();
        soak.verify(&db, &mut bad, true);
        assert_eq!((bad.rows_lost, bad.rows_extra, bad.rows_changed), (1, 1, 1), "{:?}", bad.anomalies);
        assert_eq!(bad.anomalies.len(), 1);
        db.close().unwrap();
    }
}
