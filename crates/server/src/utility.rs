//! VACUUM and ANALYZE over the wire.
//!
//! PostgreSQL 15's options map onto [`VacuumParams`]: `FREEZE`, `VERBOSE`,
//! `DISABLE_PAGE_SKIPPING`, `INDEX_CLEANUP`, `TRUNCATE`, `PARALLEL`, `SKIP_LOCKED` directly.
//! `FULL` rewrites each table ([`settledb::Database::vacuum_full`]; `FREEZE`, `VERBOSE`,
//! `ANALYZE` and `SKIP_LOCKED` apply, `INDEX_CLEANUP` and `TRUNCATE` mean nothing to it, and
//! `DISABLE_PAGE_SKIPPING`, `PARALLEL` and `PROCESS_TOAST false` are refused as PostgreSQL
//! refuses them); the system catalogs are not rewritten. `ANALYZE` runs the engine's table-level
//! ANALYZE after the vacuum. With `SKIP_LOCKED` a table whose lock another session holds (a
//! running VACUUM, ANALYZE or DDL) is skipped with PostgreSQL's WARNING (`skipping vacuum of
//! "t" --- lock not available`); without, VACUUM waits for it. `PROCESS_TOAST` is accepted:
//! there is no TOAST.
//!
//! With VERBOSE the engine's report ([`settledb::VacuumReport::verbose_text`]) is sent as INFO
//! notices the way PostgreSQL sends them: `vacuuming "db.public.t"` is one message, and
//! `finished vacuuming ...` carries the rest of the report as its continuation lines, so psql
//! prints exactly PostgreSQL's block.

use std::collections::BTreeMap;

use settledb::{Database, FreezePolicy, IndexCleanup, VacuumFullParams, VacuumParams, VacuumReport};

use crate::error::SqlError;
use crate::parse::VacuumCmd;
use crate::session::{Notice, Outcome};

pub fn vacuum(
    db: &Database,
    settings: &BTreeMap<String, String>,
    v: &VacuumCmd,
    interrupt: settledb::Interrupt,
    notices: &mut Vec<Notice>,
) -> Result<Outcome, SqlError> {
    if v.full {
        return vacuum_full(db, v, interrupt, notices);
    }
    let bad = |e: String| SqlError::new("22023", e);
    let mut params = VacuumParams {
        skip_locked: v.skip_locked,
        verbose: v.verbose,
        freeze: v.freeze,
        disable_page_skipping: v.disable_page_skipping,
        truncate: v.truncate,
        parallel: v.parallel,
        interrupt: Some(interrupt),
        ..VacuumParams::default()
    };
    if let Some(ic) = &v.index_cleanup {
        params.index_cleanup = IndexCleanup::parse(ic).ok_or_else(|| bad(format!("invalid INDEX_CLEANUP {ic}")))?;
    }
    if let Some(p) = settings.get("vacuum_freeze_policy") {
        params.policy = Some(FreezePolicy::parse(p).ok_or_else(|| bad(format!("invalid vacuum_freeze_policy {p}")))?);
    }
    if params.truncate.is_none() {
        if let Some(t) = settings.get("vacuum_truncate") {
            params.truncate = Some(matches!(t.to_ascii_lowercase().as_str(), "on" | "true" | "1" | "yes"));
        }
    }
    if let Some(d) = settings.get("vacuum_cost_delay") {
        let mut c = settledb::Config::clone(&db.config());
        c.set("vacuum_cost_delay", d).map_err(|e| bad(e.to_string()))?;
        params.cost_delay_ms = Some(c.vacuum_cost_delay_ms);
    }
    if let Some(l) = settings.get("vacuum_cost_limit") {
        params.cost_limit = Some(l.parse().map_err(|_| bad(format!("invalid vacuum_cost_limit {l}")))?);
    }
    let mut reports = Vec::new();
    if v.tables.is_empty() && !v.skip_locked {
        reports.extend(db.vacuum(None, &params)?);
    } else {
        let names: Vec<String> = if v.tables.is_empty() {
            db.tables().iter().map(|t| t.name().to_string()).collect()
        } else {
            v.tables.clone()
        };
        for t in &names {
            match db.vacuum(Some(t), &params) {
                Ok(r) => reports.extend(r),
                Err(settledb::Error::LockNotAvailable(_)) if v.skip_locked => {
                    notices.push(skipping("vacuum", t));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    if v.verbose {
        for r in &reports {
            notices.extend(verbose_notices(r));
        }
    }
    if v.analyze {
        analyze(db, &v.tables, v.verbose, v.skip_locked, notices)?;
    }
    Ok(Outcome::Command("VACUUM".into()))
}

/// `VACUUM (FULL ...)`: each table named, or every table, rewritten by
/// [`Database::vacuum_full`] in a transaction of its own. The system catalogs are not
/// rewritten: named, one is refused (0A000); with no table named they get a plain VACUUM.
/// PostgreSQL's refusals of options FULL does not take come first.
fn vacuum_full(
    db: &Database,
    v: &VacuumCmd,
    interrupt: settledb::Interrupt,
    notices: &mut Vec<Notice>,
) -> Result<Outcome, SqlError> {
    let refuse = |m: &str| Err(SqlError::new("0A000", m));
    if v.disable_page_skipping {
        return refuse("VACUUM option DISABLE_PAGE_SKIPPING cannot be used with FULL");
    }
    if v.process_toast == Some(false) {
        return refuse("PROCESS_TOAST required with VACUUM FULL");
    }
    if v.parallel.is_some() {
        return refuse("VACUUM FULL cannot be performed in parallel");
    }
    let is_catalog = |t: &str| settledb::catalog::is_system_catalog(t);
    if let Some(t) = v.tables.iter().find(|t| is_catalog(t)) {
        return Err(SqlError::unsupported(format!("VACUUM FULL of system catalog \"{t}\"")));
    }
    let params = VacuumFullParams { freeze: v.freeze, skip_locked: v.skip_locked, interrupt: Some(interrupt.clone()) };
    let all = v.tables.is_empty();
    let names: Vec<String> =
        if all { db.tables().iter().map(|t| t.name().to_string()).collect() } else { v.tables.clone() };
    for t in &names {
        let r = if is_catalog(t) {
            let plain = VacuumParams {
                skip_locked: v.skip_locked,
                verbose: v.verbose,
                freeze: v.freeze,
                interrupt: Some(interrupt.clone()),
                ..VacuumParams::default()
            };
            db.vacuum(Some(t), &plain).map(|r| {
                if v.verbose {
                    notices.extend(r.iter().flat_map(verbose_notices));
                }
            })
        } else {
            db.vacuum_full(t, &params).map(|r| {
                if v.verbose {
                    for (message, detail) in r.verbose_messages() {
                        notices.push(Notice { severity: "INFO", code: "00000", message, detail });
                    }
                }
            })
        };
        match r {
            Ok(()) => {}
            Err(settledb::Error::LockNotAvailable(_)) if v.skip_locked => notices.push(skipping("vacuum", t)),
            Err(e) => return Err(e.into()),
        }
    }
    if v.analyze {
        analyze(db, &v.tables, v.verbose, v.skip_locked, notices)?;
    }
    Ok(Outcome::Command("VACUUM".into()))
}

/// ANALYZE of the tables named, or of every table: the engine's table-level ANALYZE
/// (`settledb::analyze`: relpages, reltuples, the live and dead estimates; no column
/// statistics). VERBOSE sends PostgreSQL's two INFO messages per table; the sample PostgreSQL
/// would keep for column statistics is not taken, so its row count is 0.
pub fn analyze(
    db: &Database,
    tables: &[String],
    verbose: bool,
    skip_locked: bool,
    notices: &mut Vec<Notice>,
) -> Result<(), SqlError> {
    let targets: Vec<settledb::Table> =
        if tables.is_empty() { db.tables() } else { tables.iter().map(|t| db.table(t)).collect::<Result<_, _>>()? };
    for t in targets {
        let schema = if settledb::xact::horizon::is_catalog_relation(t.oid()) { "pg_catalog" } else { "public" };
        let r = match if skip_locked { db.analyze_nowait(&t) } else { db.analyze(&t) } {
            Ok(r) => r,
            Err(settledb::Error::LockNotAvailable(_)) if skip_locked => {
                notices.push(skipping("analyze", t.name()));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if verbose {
            let info = |message: String| Notice { severity: "INFO", code: "00000", message, detail: None };
            notices.push(info(format!("analyzing \"{schema}.{}\"", r.table)));
            notices.push(info(format!(
                "\"{}\": scanned {} of {} pages, containing {} live rows and {} dead rows; {} rows in sample, {} \
                 estimated total rows",
                r.table, r.scanned_pages, r.pages, r.live_rows, r.dead_rows, r.sample_rows, r.estimated_rows
            )));
        }
    }
    Ok(())
}

/// PostgreSQL's WARNING for a table SKIP_LOCKED passed over.
fn skipping(what: &str, table: &str) -> Notice {
    Notice {
        detail: None,
        severity: "WARNING",
        code: "55P03",
        message: format!("skipping {what} of \"{table}\" --- lock not available"),
    }
}

/// The report split into the messages PostgreSQL sends: each `INFO:  ` line starts one, and
/// lines without the prefix continue the message before them.
pub fn verbose_notices(r: &VacuumReport) -> Vec<Notice> {
    let mut out: Vec<Notice> = Vec::new();
    for line in r.verbose_text().lines() {
        match line.strip_prefix("INFO:  ") {
            Some(m) => out.push(Notice { severity: "INFO", code: "00000", message: m.to_string(), detail: None }),
            None => {
                if let Some(last) = out.last_mut() {
                    last.message.push('\n');
                    last.message.push_str(line);
                }
            }
        }
    }
    out
}
