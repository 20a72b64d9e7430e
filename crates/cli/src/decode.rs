//! `settle decode DIR --slot S …`: PostgreSQL's `pg_recvlogical` on the embedded engine.
//!
//! ```text
//! settle decode DIR --slot S --create-slot [--plugin test_decoding] [--if-not-exists]
//! settle decode DIR --slot S --start [-f FILE|-] [--startpos LSN] [--endpos LSN] [-o NAME[=VALUE]]...
//! settle decode DIR --slot S --drop-slot
//! ```
//!
//! `--create-slot` and `--start` may be given together (the slot is created, then read).
//! `--start` writes each decoded row's data as one line to FILE (`-`, the default, is
//! standard output; a file is appended to, as `pg_recvlogical` does) and confirms what it
//! wrote as it goes. It runs one decoding session that follows the WAL, as `settle serve`'s
//! WAL sender does ([`settledb::Database::decode_slot_follow`]): each pass reads the flushed
//! WAL on from where the last one stopped, with the reorder buffer kept, each row going
//! through a buffered writer as the plugin writes it (no pass holds its rows in memory); after
//! a pass the lines are flushed (a file fsynced), the slot's `confirmed_flush_lsn` is advanced
//! over them, and when nothing new was flushed it waits for the next flush, at most
//! [`IDLE_SLEEP`]. It stops on SIGINT or SIGTERM (at the end of a pass), or once `--endpos` is
//! reached, and prints the position the slot was confirmed up to on standard error.
//!
//! `--stats` also prints, on standard error, one line `settle decode stats: {…}` of JSON: the
//! process's `RssAnon` right after opening the directory (kB), the rows written, and the
//! session's reorder-buffer counters (`pg_stat_replication_slots`' and the buffer's own:
//! evictions, spill files, peak accounted memory). `settle bench decode` reads it. The memory
//! limit is `--set logical_decoding_work_mem=…` (PostgreSQL's `PGOPTIONS='-c
//! logical_decoding_work_mem=…'`).
//!
//! `--startpos` is `pg_recvlogical`'s (`START_REPLICATION ... LOGICAL X/Y`): transactions that
//! committed before it are skipped as if consumed, when it lies past the slot's confirmed
//! position; the slot moves when what is written is confirmed.
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

/// The longest wait for new WAL between passes (a stop signal is noticed at least this often).
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
    /// With --start: begin at this LSN (`X/Y`): transactions that committed before it are
    /// skipped, as consumed, when it lies past the slot's confirmed position.
    #[arg(long, short = 'I', value_name = "LSN")]
    pub startpos: Option<String>,
    /// A plugin option, NAME or NAME=VALUE (repeatable).
    #[arg(long = "option", short = 'o', value_name = "NAME[=VALUE]")]
    pub options: Vec<String>,
    /// Where rows go: a file (appended to) or `-` for standard output.
    #[arg(long, short = 'f', value_name = "FILE", default_value = "-")]
    pub file: String,
    /// Configuration parameters, `name=value` (PostgreSQL names and units).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// With --start: print the session counters as one JSON line on standard error at the end.
    #[arg(long)]
    pub stats: bool,
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM set [`STOP`]; the session finishes its pass and exits cleanly.
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
    if a.startpos.is_some() && !a.start {
        bail!("--startpos may only be specified with --start");
    }
    let endpos = a.endpos.as_deref().map(parse_lsn).transpose()?;
    let startpos = a.startpos.as_deref().map(parse_lsn).transpose()?;
    crate::require_data_dir(&a.dir)?;
    let set: Vec<String> = ["wal_level=logical", "autovacuum=off"].iter().map(|s| s.to_string()).chain(a.set).collect();
    let db = Database::open(&a.dir, crate::config_from(&set)?)?;
    let rss_after_open_kb = rss_anon_kb();
    let result = actions(&db, &a.slot, a.create_slot, a.if_not_exists, &a.plugin, a.drop_slot, a.start, || {
        let mut stats = FollowStats { rss_anon_after_open_kb: rss_after_open_kb, ..FollowStats::default() };
        let limits = DecodeLimits { start_lsn: startpos, ..DecodeLimits::default() };
        let at = follow(&db, &a.slot, limits, endpos, &plugin_options(&a.options), &a.file, &mut stats)?;
        if a.stats {
            eprintln!("settle decode stats: {}", serde_json::to_string(&stats)?);
        }
        Ok(at)
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

/// `RssAnon` of this process in kB, from `/proc/self/status` (0 where there is none).
pub fn rss_anon_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// What `--stats` prints: the session's counters.
#[derive(serde::Serialize, serde::Deserialize, Default, Debug, Clone)]
pub struct FollowStats {
    pub rss_anon_after_open_kb: u64,
    /// Passes of the session over the flushed WAL.
    pub passes: u64,
    pub rows: u64,
    pub total_txns: u64,
    pub total_bytes: u64,
    pub spill_txns: u64,
    pub spill_count: u64,
    pub spill_bytes: u64,
    pub spill_files: u64,
    pub stream_txns: u64,
    pub stream_count: u64,
    pub stream_bytes: u64,
    pub evictions: u64,
    pub peak_memory: u64,
}

impl FollowStats {
    fn add(&mut self, s: &settledb::decode::reorderbuffer::ReorderStats) {
        self.total_txns += s.total_txns;
        self.total_bytes += s.total_bytes;
        self.spill_txns += s.spill_txns;
        self.spill_count += s.spill_count;
        self.spill_bytes += s.spill_bytes;
        self.spill_files += s.spill_files;
        self.stream_txns += s.stream_txns;
        self.stream_count += s.stream_count;
        self.stream_bytes += s.stream_bytes;
        self.evictions += s.evictions;
        self.peak_memory = self.peak_memory.max(s.peak_memory);
    }
}

/// Where rows are written: standard output or a file opened for appending, buffered.
struct Sink {
    out: std::io::BufWriter<Box<dyn Write>>,
    file: Option<std::fs::File>,
    path: String,
}

impl Sink {
    fn open(path: &str) -> Result<Sink> {
        if path == "-" {
            let out: Box<dyn Write> = Box::new(std::io::stdout());
            return Ok(Sink { out: std::io::BufWriter::with_capacity(1 << 16, out), file: None, path: path.into() });
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("could not open log file \"{path}\""))?;
        let out: Box<dyn Write> = Box::new(f.try_clone()?);
        // Only a regular file is fsynced (a device such as /dev/null refuses it).
        let file = f.metadata()?.is_file().then_some(f);
        Ok(Sink { out: std::io::BufWriter::with_capacity(1 << 16, out), file, path: path.into() })
    }

    /// One row's line, buffered (a hot path: once per row).
    fn write_line(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.out.write_all(data)?;
        self.out.write_all(b"\n")
    }

    /// Flushes the lines and makes them durable (a file is fsynced) before the slot moves
    /// past them.
    fn flush_durable(&mut self) -> Result<()> {
        self.out.flush()?;
        if let Some(f) = &self.file {
            f.sync_data().with_context(|| format!("could not fsync file \"{}\"", self.path))?;
        }
        Ok(())
    }
}

/// The `--start` loop: one decoding session that follows the WAL
/// ([`Database::decode_slot_follow`]), its reorder buffer kept from pass to pass; after each
/// pass the lines are flushed (and a file fsynced) and the slot is advanced over them. Returns
/// the slot's confirmed position at the end.
fn follow(
    db: &Database,
    slot: &str,
    limits: DecodeLimits,
    endpos: Option<Lsn>,
    options: &[(String, Option<String>)],
    file: &str,
    stats: &mut FollowStats,
) -> Result<Lsn> {
    let sink = std::cell::RefCell::new(Sink::open(file)?);
    install_stop_handlers();
    let mut confirmed = db
        .replication_slot(slot)
        .with_context(|| format!("replication slot \"{slot}\" does not exist"))?
        .confirmed_flush;
    // Rows past --endpos are not written; `cut` says a transaction was cut there. Not
    // `upto_lsn: endpos`: a transaction running across --endpos must be read up to its commit
    // for its rows before --endpos to be written (the walsender, too, decodes past it;
    // pg_recvlogical cuts).
    let (cut, last_written) = (std::cell::Cell::new(false), std::cell::Cell::new(None::<Lsn>));
    let mut passes = 0u64;
    let mut write_error = None;
    let mut on_row = |row: &settledb::decode::logical::OutputRow| {
        if cut.get() || endpos.is_some_and(|e| row.lsn > e) {
            cut.set(true);
            return Ok(());
        }
        sink.borrow_mut().write_line(&row.data).map_err(|e| Error::io("write", file, e))?;
        last_written.set(Some(row.lsn));
        stats.rows += 1;
        Ok(())
    };
    let mut after_pass = |pos: Lsn| -> settledb::Result<bool> {
        passes += 1;
        if let Err(e) = sink.borrow_mut().flush_durable() {
            write_error = Some(e);
            return Ok(false);
        }
        // A transaction cut at --endpos is confirmed only up to its last row written (it is
        // decoded again next time); otherwise everything read is consumed.
        let reached = cut.get() || endpos.is_some_and(|e| pos >= e);
        let upto = match (cut.get(), endpos) {
            (true, _) => last_written.get().unwrap_or(confirmed),
            (false, Some(e)) => pos.min(e),
            (false, None) => pos,
        };
        if upto > confirmed {
            confirmed = db.replication_slot_advance(slot, upto)?;
        }
        if reached || STOP.load(Ordering::SeqCst) {
            return Ok(false);
        }
        if db.current_wal_flush_lsn() <= pos {
            db.wait_for_wal_flush(pos, IDLE_SLEEP);
        }
        Ok(!STOP.load(Ordering::SeqCst))
    };
    let r = db.decode_slot_follow(slot, limits, options, &mut on_row, &mut after_pass)?;
    if let Some(e) = write_error {
        return Err(e);
    }
    stats.add(&r.stats);
    stats.passes = passes;
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
