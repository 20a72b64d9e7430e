//! `settle decode DIR --slot S …`: PostgreSQL's `pg_recvlogical` on the embedded engine.
//!
//! ```text
//! settle decode DIR --slot S --create-slot [--plugin test_decoding] [--if-not-exists]
//! settle decode DIR --slot S --start [-f FILE|-] [--endpos LSN] [-o NAME[=VALUE]]...
//! settle decode DIR --slot S --drop-slot
//! ```
//!
//! `--create-slot` and `--start` may be given together (the slot is created, then read).
//! `--start` writes each decoded row's data as one line to FILE (`-`, the default, is
//! standard output; a file is appended to, as `pg_recvlogical` does) and confirms what it
//! wrote as it goes: each round decodes from the slot (as `pg_logical_slot_peek_changes`, at
//! most [`BATCH_ROWS`] rows), writes and flushes the lines (and fsyncs a file), then advances
//! the slot's `confirmed_flush_lsn` over them; when there is nothing new it sleeps
//! [`IDLE_SLEEP`]. It stops on SIGINT or SIGTERM, or once `--endpos` is reached, and prints
//! the position the slot was confirmed up to on standard error.
//!
//! `--endpos` is `pg_recvlogical`'s: rows up to and including that LSN are written, and it is
//! not aware of transaction boundaries. A transaction cut short there is confirmed only up to
//! its last row written, so the next read decodes it again whole.
//!
//! # No server
//!
//! A data directory is opened by one process at a time, so this command opens it itself (a
//! running `settle serve` or application must be stopped first), and while it runs nothing
//! else writes: `--start` decodes what the WAL holds, then waits for WAL that only this
//! process could write (checkpoints), until stopped. It is the tool for draining a slot from
//! a directory at rest, with the options and output of `pg_recvlogical`. The directory is
//! opened with `wal_level=logical` (a directory with logical slots opens only so) and
//! autovacuum off, unless `--set` says otherwise.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use settledb::db::DecodeLimits;
use settledb::{Database, Error, Lsn};

/// Rows decoded per round at most (bounds the memory a backlog takes).
pub const BATCH_ROWS: usize = 10_000;
/// The pause between rounds that found nothing new.
pub const IDLE_SLEEP: Duration = Duration::from_millis(100);

#[derive(Args)]
pub struct DecodeArgs {
    /// The data directory (opened by this process: no server may have it open).
    pub dir: PathBuf,
    /// The logical replication slot.
    #[arg(long, short = 'S')]
    pub slot: String,
    /// Create the slot (with `--plugin`).
    #[arg(long)]
    pub create_slot: bool,
    /// With --create-slot: no error if the slot exists.
    #[arg(long)]
    pub if_not_exists: bool,
    /// The output plugin of a slot created here.
    #[arg(long, short = 'P', default_value = "test_decoding")]
    pub plugin: String,
    /// Drop the slot.
    #[arg(long)]
    pub drop_slot: bool,
    /// Decode from the slot, writing rows to FILE, until stopped or --endpos.
    #[arg(long)]
    pub start: bool,
    /// With --start: stop once this LSN (`X/Y`) is reached.
    #[arg(long, short = 'E', value_name = "LSN")]
    pub endpos: Option<String>,
    /// A plugin option, NAME or NAME=VALUE (repeatable).
    #[arg(long = "option", short = 'o', value_name = "NAME[=VALUE]")]
    pub options: Vec<String>,
    /// Where rows go: a file (appended to) or `-` for standard output.
    #[arg(long, short = 'f', value_name = "FILE", default_value = "-")]
    pub file: String,
    /// Configuration parameters, `name=value` (PostgreSQL names and units).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM set [`STOP`]; the loop finishes its round and exits cleanly.
fn install_stop_handlers() {
    let handler = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// `X/Y` with hexadecimal halves, as PostgreSQL's `pg_lsn` reads it.
pub fn parse_lsn(s: &str) -> Result<Lsn> {
    let parse = || -> Option<Lsn> {
        let (hi, lo) = s.trim().split_once('/')?;
        let (hi, lo) = (u32::from_str_radix(hi, 16).ok()?, u32::from_str_radix(lo, 16).ok()?);
        Some(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    };
    parse().with_context(|| format!("could not parse end position \"{s}\""))
}

/// `-o NAME[=VALUE]` as the decoding functions take options.
fn plugin_options(list: &[String]) -> Vec<(String, Option<String>)> {
    list.iter()
        .map(|o| match o.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (o.clone(), None),
        })
        .collect()
}

pub fn run(a: DecodeArgs) -> Result<ExitCode> {
    if !a.create_slot && !a.start && !a.drop_slot {
        bail!("at least one action needs to be specified (--create-slot, --start or --drop-slot)");
    }
    if a.drop_slot && (a.create_slot || a.start) {
        bail!("cannot use --create-slot or --start together with --drop-slot");
    }
    if a.endpos.is_some() && !a.start {
        bail!("--endpos may only be specified with --start");
    }
    let endpos = a.endpos.as_deref().map(parse_lsn).transpose()?;
    crate::require_data_dir(&a.dir)?;
    let set: Vec<String> = ["wal_level=logical", "autovacuum=off"].iter().map(|s| s.to_string()).chain(a.set).collect();
    let db = Database::open(&a.dir, crate::config_from(&set)?)?;
    let result = actions(&db, &a.slot, a.create_slot, a.if_not_exists, &a.plugin, a.drop_slot, a.start, || {
        follow(&db, &a.slot, endpos, &plugin_options(&a.options), &a.file)
    });
    let closed = db.close();
    result?;
    closed?;
    Ok(ExitCode::SUCCESS)
}

#[expect(clippy::too_many_arguments, reason = "the command's flags, passed through once")]
fn actions(
    db: &Database,
    slot: &str,
    create: bool,
    if_not_exists: bool,
    plugin: &str,
    drop: bool,
    start: bool,
    follow: impl FnOnce() -> Result<Lsn>,
) -> Result<()> {
    if drop {
        db.drop_replication_slot(slot)?;
        return Ok(());
    }
    if create {
        match db.create_logical_replication_slot(slot, plugin, false) {
            Ok(_) => {}
            Err(Error::AlreadyExists(_)) if if_not_exists => {}
            Err(e) => return Err(e.into()),
        }
    }
    if start {
        let at = follow()?;
        eprintln!("settle decode: slot \"{slot}\" confirmed up to {at}");
    }
    Ok(())
}

/// Where rows are written: standard output or a file opened for appending.
enum Sink {
    Stdout(std::io::Stdout),
    File(std::fs::File),
}

impl Sink {
    fn open(path: &str) -> Result<Sink> {
        if path == "-" {
            return Ok(Sink::Stdout(std::io::stdout()));
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("could not open log file \"{path}\""))?;
        Ok(Sink::File(f))
    }

    /// Writes the lines and makes them durable (a file is fsynced) before the slot moves past
    /// them.
    fn write_lines(&mut self, lines: &[u8]) -> Result<()> {
        match self {
            Sink::Stdout(o) => {
                let mut o = o.lock();
                o.write_all(lines)?;
                o.flush()?;
            }
            Sink::File(f) => {
                f.write_all(lines)?;
                f.sync_data()?;
            }
        }
        Ok(())
    }
}

/// The `--start` loop; returns the slot's confirmed position at the end.
fn follow(
    db: &Database,
    slot: &str,
    endpos: Option<Lsn>,
    options: &[(String, Option<String>)],
    file: &str,
) -> Result<Lsn> {
    let mut sink = Sink::open(file)?;
    install_stop_handlers();
    let mut confirmed = db
        .replication_slot(slot)
        .with_context(|| format!("replication slot \"{slot}\" does not exist"))?
        .confirmed_flush;
    while !STOP.load(Ordering::SeqCst) {
        // Not `upto_lsn: endpos`: a transaction running across --endpos must be read up to its
        // commit for its rows before --endpos to be written (the walsender, too, decodes
        // past it; pg_recvlogical cuts).
        let limits = DecodeLimits { upto_lsn: None, upto_nchanges: Some(BATCH_ROWS) };
        let r = db.logical_slot_peek_changes(slot, limits, options)?;
        let mut lines = Vec::new();
        let mut last_written = None;
        let mut cut = false;
        for row in &r.rows {
            if endpos.is_some_and(|e| row.lsn > e) {
                cut = true;
                break;
            }
            lines.extend_from_slice(&row.data);
            lines.push(b'\n');
            last_written = Some(row.lsn);
        }
        sink.write_lines(&lines)?;
        // A transaction cut at --endpos is confirmed only up to its last row written (it is
        // decoded again next time); otherwise everything read is consumed.
        let reached = cut || endpos.is_some_and(|e| r.end_lsn >= e);
        let upto = match (cut, endpos) {
            (true, _) => last_written.unwrap_or(confirmed),
            (false, Some(e)) => r.end_lsn.min(e),
            (false, None) => r.end_lsn,
        };
        if upto > confirmed {
            confirmed = db.replication_slot_advance(slot, upto)?;
        }
        if reached {
            break;
        }
        if r.rows.is_empty() {
            std::thread::sleep(IDLE_SLEEP);
        }
    }
    Ok(confirmed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsns_and_options_parse_as_pg_recvlogical_reads_them() {
        assert_eq!(parse_lsn("0/16B2408").unwrap(), Lsn(0x16B_2408));
        assert_eq!(parse_lsn("1/0").unwrap(), Lsn(1 << 32));
        assert!(parse_lsn("16B2408").is_err());
        assert_eq!(
            plugin_options(&["include-xids=0".into(), "skip-empty-xacts".into()]),
            vec![("include-xids".to_string(), Some("0".to_string())), ("skip-empty-xacts".to_string(), None)]
        );
    }
}
