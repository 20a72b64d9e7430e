//! `settle vacuum DIR [TABLE]`: runs VACUUM on a data directory, as PostgreSQL's `vacuumdb`
//! does on a server.
//!
//! The directory is opened with `autovacuum` off whatever `--set` says, so that the vacuum
//! reported is the one asked for and no worker races it for the table. Each flag maps onto one
//! of `VACUUM`'s options ([`settledb::VacuumParams`]): `--verbose`, `--freeze`,
//! `--disable-page-skipping`, `--index-cleanup auto|on|off`, `--truncate on|off`,
//! `--parallel N` (worker threads for the heap), and `--policy lazy|pg16|eager|adaptive` overrides
//! `vacuum_freeze_policy` (settledb's own option). With
//! `--verbose` each table's report is printed in the words of PostgreSQL's `VACUUM (VERBOSE)`
//! INFO block; otherwise one line per table. The database is closed with a shutdown
//! checkpoint, so the directory is clean afterwards.
//!
//! `--full` rewrites each table instead (`VACUUM FULL`, [`settledb::Database::vacuum_full`]):
//! every table but the system catalogs when none is named; `--freeze` and `--verbose` apply.
//!
//! `--only-database-stats` vacuums no table: like PostgreSQL 16's `VACUUM (ONLY_DATABASE_STATS)`
//! it recomputes the database frozen XID by scanning all of `pg_class`, prints it beside the
//! value settledb keeps incrementally and the scan's time, and exits 1 if they differ.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use settledb::{Database, FreezePolicy, IndexCleanup, VacuumParams, VacuumReport};

/// The command's flags, as parsed by clap.
#[derive(clap::Args)]
pub struct VacuumArgs {
    /// The data directory.
    dir: PathBuf,
    /// The table to vacuum (default: every table, `pg_class` included).
    table: Option<String>,
    /// Print PostgreSQL's VACUUM (VERBOSE) report for each table.
    #[arg(long)]
    verbose: bool,
    /// Freeze every tuple that can be frozen (vacuum_freeze_min_age and
    /// vacuum_freeze_table_age of 0).
    #[arg(long)]
    freeze: bool,
    /// Read every page, even those the visibility map marks all-visible (aggressive).
    #[arg(long)]
    disable_page_skipping: bool,
    /// Whether to remove index entries pointing to dead tuples.
    #[arg(long, value_name = "auto|on|off", default_value = "auto", value_parser = parse_index_cleanup)]
    index_cleanup: IndexCleanup,
    /// Whether to give empty pages at the end of the table back to the file system (default:
    /// the vacuum_truncate setting).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    truncate: Option<bool>,
    /// Worker threads beside the leader for the heap's phases I and III (`PARALLEL n`; 0
    /// runs without; default: sized by the table, at most max_parallel_maintenance_workers and
    /// one less than the machine's cores).
    #[arg(long, value_name = "N")]
    parallel: Option<u32>,
    /// Freezing policy for this run (default: the vacuum_freeze_policy setting).
    #[arg(long, value_name = "lazy|pg16|eager|adaptive", value_parser = parse_policy)]
    policy: Option<FreezePolicy>,
    /// VACUUM FULL: rewrite the table (default: every table but the system catalogs) into
    /// new storage holding only what some snapshot may still see, and rebuild its indexes.
    #[arg(long, conflicts_with_all = ["disable_page_skipping", "parallel", "policy", "only_database_stats"])]
    full: bool,
    /// Vacuum no table: recompute the database frozen XID by a full scan of pg_class.
    #[arg(long, conflicts_with = "table")]
    only_database_stats: bool,
    /// Configuration parameters, `name=value` (PostgreSQL names and units).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
}

fn parse_index_cleanup(v: &str) -> Result<IndexCleanup, String> {
    IndexCleanup::parse(v).ok_or_else(|| format!("expected auto, on or off, got {v:?}"))
}

fn parse_on_off(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" => Ok(true),
        "off" | "false" | "no" | "0" => Ok(false),
        _ => Err(format!("expected on or off, got {v:?}")),
    }
}

pub fn parse_policy(v: &str) -> Result<FreezePolicy, String> {
    FreezePolicy::parse(v).ok_or_else(|| format!("expected lazy, pg16, eager or adaptive, got {v:?}"))
}

pub fn run(a: VacuumArgs) -> Result<ExitCode> {
    crate::require_data_dir(&a.dir)?;
    let mut config = crate::config_for_dir(&a.dir, &a.set)?;
    config.set("autovacuum", "off")?;
    let db = Database::open(&a.dir, config)?;
    if a.only_database_stats {
        let r = db.vacuum_database_stats();
        db.close()?;
        let r = r?;
        let show = |x: Option<settledb::Xid>| x.map_or("none".to_string(), |x| x.to_string());
        println!(
            "database frozen XID {} by a full scan of pg_class ({} tables, {} pages, {:.3} ms), {} kept incrementally",
            show(r.scanned_frozen_xid),
            r.tables_scanned,
            r.pages_scanned,
            r.scan_elapsed.as_secs_f64() * 1e3,
            show(r.incremental_frozen_xid)
        );
        if !r.agrees() {
            eprintln!("settle vacuum: the two computations of the database frozen XID differ");
            return Ok(ExitCode::from(1));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if a.full {
        let r = vacuum_full(&db, a.table.as_deref(), a.freeze, a.verbose);
        let closed = db.close();
        r?;
        closed?;
        return Ok(ExitCode::SUCCESS);
    }
    let params = VacuumParams {
        verbose: a.verbose,
        freeze: a.freeze,
        disable_page_skipping: a.disable_page_skipping,
        index_cleanup: a.index_cleanup,
        truncate: a.truncate,
        policy: a.policy,
        parallel: a.parallel,
        ..VacuumParams::default()
    };
    let reports = match db.vacuum(a.table.as_deref(), &params) {
        Ok(r) => r,
        Err(e) => {
            // Still shut down cleanly; the vacuum's own error is the one to report.
            let _ = db.close();
            return Err(e.into());
        }
    };
    for r in &reports {
        if a.verbose {
            print!("{}", r.verbose_text());
        } else {
            println!("{}", summary_line(r));
        }
    }
    db.close()?;
    Ok(ExitCode::SUCCESS)
}

/// `--full`: each table rewritten in a transaction of its own, reported in PostgreSQL's
/// words with `--verbose` (its INFO and DETAIL lines), else one line per table.
fn vacuum_full(db: &Database, table: Option<&str>, freeze: bool, verbose: bool) -> Result<()> {
    let names: Vec<String> = match table {
        Some(t) => vec![t.to_string()],
        None => db
            .tables()
            .iter()
            .map(|t| t.name().to_string())
            .filter(|n| !settledb::catalog::is_system_catalog(n))
            .collect(),
    };
    let params = settledb::VacuumFullParams { freeze, ..Default::default() };
    for t in &names {
        let r = db.vacuum_full(t, &params)?;
        if verbose {
            for (message, detail) in r.verbose_messages() {
                println!("INFO:  {message}");
                if let Some(d) = detail {
                    println!("DETAIL:  {d}");
                }
            }
        } else {
            let c = &r.counts;
            println!(
                "rewrote \"{}\": {} pages into {}, {} row versions removed, {} kept ({} dead but not yet removable, {} \
                 frozen), relfrozenxid {}",
                r.table, c.old_pages, c.new_pages, c.removed, c.kept, c.recently_dead, c.frozen, r.relfrozenxid
            );
        }
    }
    Ok(())
}

/// One line for a table vacuumed without `--verbose`.
pub fn summary_line(r: &VacuumReport) -> String {
    let scans = if r.num_index_scans == 1 { "scan" } else { "scans" };
    let mut s = format!(
        "vacuumed \"{}\": {} pages ({} scanned), {} dead tuples removed, {} dead item identifiers, {} index {scans}, \
         {} pages newly all-visible, {} newly all-frozen, {} tuples frozen",
        r.table,
        r.new_pages,
        r.scanned_pages,
        r.tuples_deleted,
        r.lpdead_items,
        r.num_index_scans,
        r.vm_new_visible_pages,
        r.vm_new_visible_frozen_pages + r.vm_new_frozen_pages,
        r.tuples_frozen
    );
    if let Some((from, to)) = r.truncated {
        s.push_str(&format!(", truncated {from} to {to} pages"));
    }
    s.push_str(&format!(
        ", WAL {} bytes ({} full-page images), {:.3} s",
        r.wal.bytes,
        r.wal.fpi,
        r.elapsed.as_secs_f64()
    ));
    s
}
