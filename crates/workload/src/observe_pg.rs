//! Sampling a running PostgreSQL 15 into an [`Observation`], and reading its server log.
//!
//! # Figures
//!
//! One sample reads, each statement in its own transaction after `pg_stat_clear_snapshot()`
//! so that no cached statistics snapshot is reused:
//!
//! - `pg_stat_database` of the current database (commits, rollbacks, blocks, tuples);
//! - `pg_stat_wal` (records, full-page images, bytes);
//! - per user table, `pg_stat_user_tables` (autovacuums, live and dead tuples),
//!   `pg_statio_user_tables` (heap blocks read and hit, also summed into [`DbCounters`]),
//!   `age(pg_class.relfrozenxid)`, the main fork's size in 8 kB pages and its indexes' pages;
//! - the next XID, `txid_snapshot_xmax(txid_current_snapshot())`, which reads the counter
//!   without assigning an XID (so sampling does not age the database);
//! - the autovacuum workers running (`pg_stat_activity.backend_type = 'autovacuum worker'`).
//!
//! PostgreSQL 15 counts neither pages frozen nor visibility-map bits cleared: those are `None`.
//! Statistics reach the views when backends flush them (at most about once a second in
//! PostgreSQL 15), so a sample lags the work by up to that much.
//!
//! # The server log
//!
//! Anti-wraparound autovacuums are counted from the log, where PostgreSQL 15 reports each one
//! (with `log_autovacuum_min_duration = 0`) as `automatic aggressive vacuum to prevent
//! wraparound of table "db.schema.table": index scans: N` (or, in the corner case of a
//! non-aggressive one, `automatic vacuum to prevent wraparound of table …`), followed by
//! tab-indented continuation lines. The log is read through SQL, `pg_read_binary_file(
//! pg_current_logfile(), offset, length)`, so the logging collector must be on (`settle peer
//! start` turns it on) and the user must be a superuser or hold `pg_read_server_files`. An entry
//! is a line starting with a timestamp (the `%m` of `log_line_prefix`) and its continuation
//! lines; it is complete when the next entry begins or the file ends with a newline (the
//! collector writes each message whole). When the log rotates, the old file is read to its end
//! before the new one. A server without a log file (collector off) yields no entries and no
//! counts; its other figures are sampled as usual.

use std::collections::HashMap;

use anyhow::Context;
use postgres::Client;

use crate::observe::{DbCounters, Observation, Observer, TableObs};
use crate::pg;

/// Bytes read from the log per call.
const LOG_CHUNK: i64 = 1 << 20;

/// Splits log text, fed in arbitrary pieces, into entries.
#[derive(Default)]
pub struct LogParser {
    /// Bytes after the last newline seen.
    partial: Vec<u8>,
    /// The entry being assembled (its continuation lines may still come).
    entry: Option<String>,
}

/// Whether `line` begins with `YYYY-MM-DD HH:MM:SS`, the start of `%m`.
fn starts_with_timestamp(line: &str) -> bool {
    let b = line.as_bytes();
    let digits = |r: std::ops::Range<usize>| r.clone().all(|i| b.get(i).is_some_and(u8::is_ascii_digit));
    digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10)
        && b.get(10) == Some(&b' ')
        && digits(11..13)
        && b.get(13) == Some(&b':')
}

impl LogParser {
    /// Takes the next bytes of the file; returns the entries completed by them. `at_end` says
    /// the bytes reach the current end of the file, so a final entry ending in a newline is
    /// complete.
    pub fn feed(&mut self, bytes: &[u8], at_end: bool) -> Vec<String> {
        self.partial.extend_from_slice(bytes);
        let mut out = Vec::new();
        if let Some(last_newline) = self.partial.iter().rposition(|&b| b == b'\n') {
            let complete: Vec<u8> = self.partial.drain(..=last_newline).collect();
            for raw in complete[..complete.len() - 1].split(|&b| b == b'\n') {
                let line = String::from_utf8_lossy(raw);
                let line = line.strip_suffix('\r').unwrap_or(&line);
                match &mut self.entry {
                    Some(entry) if !starts_with_timestamp(line) => {
                        entry.push('\n');
                        entry.push_str(line);
                    }
                    _ => out.extend(self.entry.replace(line.to_string())),
                }
            }
        }
        if at_end && self.partial.is_empty() {
            out.extend(self.entry.take());
        }
        out
    }
}

/// The table an anti-wraparound autovacuum entry names (the last part of `db.schema.table`).
pub fn anti_wraparound_table(entry: &str) -> Option<&str> {
    const MARK: &str = "vacuum to prevent wraparound of table \"";
    let first = entry.lines().next()?;
    let at = first.find(MARK)?;
    if !first[..at].contains("automatic") {
        return None;
    }
    let rest = &first[at + MARK.len()..];
    let name = &rest[..rest.find('"')?];
    name.rsplit('.').next()
}

/// Samples a PostgreSQL server and follows its log.
pub struct PgObserver {
    client: Client,
    /// The log file being read (relative to the data directory) and the bytes read of it.
    log_file: Option<String>,
    offset: i64,
    parser: LogParser,
    /// Entries read but not yet handed out by [`Observer::take_log`].
    pending: Vec<String>,
    /// Anti-wraparound autovacuums per table, from the entries read so far.
    anti_wraparound: HashMap<String, u64>,
}

impl PgObserver {
    /// Connects to `url`. The log is followed from the start of the current log file.
    pub fn new(url: &str) -> anyhow::Result<PgObserver> {
        Ok(PgObserver {
            client: pg::connect(url)?,
            log_file: None,
            offset: 0,
            parser: LogParser::default(),
            pending: Vec::new(),
            anti_wraparound: HashMap::new(),
        })
    }

    /// Reads whatever the log gained since the last call.
    fn pump(&mut self) -> anyhow::Result<()> {
        let current: Option<String> =
            self.client.query_one("SELECT pg_current_logfile()", &[]).context("pg_current_logfile()")?.get(0);
        let Some(current) = current else { return Ok(()) };
        if self.log_file.as_deref() != Some(current.as_str()) {
            if let Some(old) = self.log_file.take() {
                // Rotated: finish the old file first.
                self.read_to_end(&old)?;
            }
            self.log_file = Some(current.clone());
            self.offset = 0;
            self.parser = LogParser::default();
        }
        self.read_to_end(&current)
    }

    fn read_to_end(&mut self, file: &str) -> anyhow::Result<()> {
        loop {
            let bytes: Option<Vec<u8>> = self
                .client
                .query_one("SELECT pg_read_binary_file($1, $2, $3, true)", &[&file, &self.offset, &LOG_CHUNK])
                .with_context(|| format!("reading the server log {file}"))?
                .get(0);
            let Some(bytes) = bytes else { return Ok(()) };
            self.offset += bytes.len() as i64;
            let at_end = (bytes.len() as i64) < LOG_CHUNK;
            for entry in self.parser.feed(&bytes, at_end) {
                if let Some(table) = anti_wraparound_table(&entry) {
                    *self.anti_wraparound.entry(table.to_string()).or_default() += 1;
                }
                self.pending.push(entry);
            }
            if at_end {
                return Ok(());
            }
        }
    }

    fn db_counters(&mut self) -> anyhow::Result<DbCounters> {
        let c = &mut self.client;
        let d = c
            .query_one(
                "SELECT xact_commit, xact_rollback, blks_read, blks_hit, tup_returned, tup_fetched, tup_inserted, \
                 tup_updated, tup_deleted FROM pg_stat_database WHERE datname = current_database()",
                &[],
            )
            .context("reading pg_stat_database")?;
        let w = c
            .query_one("SELECT wal_records, wal_fpi, wal_bytes::int8 FROM pg_stat_wal", &[])
            .context("reading pg_stat_wal")?;
        let n = |r: &postgres::Row, i: usize| -> anyhow::Result<u64> {
            Ok(r.try_get::<_, Option<i64>>(i)?.unwrap_or(0).max(0) as u64)
        };
        Ok(DbCounters {
            xact_commit: n(&d, 0)?,
            xact_rollback: n(&d, 1)?,
            blks_read: n(&d, 2)?,
            blks_hit: n(&d, 3)?,
            tup_returned: n(&d, 4)?,
            tup_fetched: n(&d, 5)?,
            tup_inserted: n(&d, 6)?,
            tup_updated: n(&d, 7)?,
            tup_deleted: n(&d, 8)?,
            heap_blks_read: 0,
            heap_blks_hit: 0,
            wal_records: n(&w, 0)?,
            wal_fpi: n(&w, 1)?,
            wal_bytes: n(&w, 2)?,
        })
    }

    fn tables(&mut self) -> anyhow::Result<Vec<TableObs>> {
        let rows = self
            .client
            .query(
                "SELECT s.relname::text, s.autovacuum_count, coalesce(io.heap_blks_read, 0), \
                 coalesce(io.heap_blks_hit, 0), age(c.relfrozenxid)::int8, \
                 (pg_relation_size(c.oid, 'main') / 8192)::int8, \
                 (SELECT coalesce(sum(pg_relation_size(i.indexrelid, 'main') / 8192), 0)::int8 \
                    FROM pg_index i WHERE i.indrelid = c.oid), \
                 s.n_live_tup, s.n_dead_tup \
                 FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid \
                 LEFT JOIN pg_statio_user_tables io ON io.relid = s.relid ORDER BY s.relname",
                &[],
            )
            .context("reading pg_stat_user_tables")?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let n =
                |i: usize| -> anyhow::Result<u64> { Ok(r.try_get::<_, Option<i64>>(i)?.unwrap_or(0).max(0) as u64) };
            let name: String = r.try_get(0)?;
            out.push(TableObs {
                anti_wraparound_count: self.anti_wraparound.get(&name).copied().unwrap_or(0),
                name,
                autovacuum_count: n(1)?,
                pages_frozen: None,
                vm_bits_cleared: None,
                frozen_pages_modified: None,
                heap_blks_read: n(2)?,
                heap_blks_hit: n(3)?,
                relfrozenxid_age: n(4)?,
                heap_pages: n(5)?,
                index_pages: n(6)?,
                n_live_tup: n(7)?,
                n_dead_tup: n(8)?,
            });
        }
        Ok(out)
    }
}

impl Observer for PgObserver {
    fn observe(&mut self) -> anyhow::Result<Observation> {
        self.pump()?;
        self.client.batch_execute("SELECT pg_stat_clear_snapshot()").context("pg_stat_clear_snapshot()")?;
        let mut db = self.db_counters()?;
        let tables = self.tables()?;
        db.heap_blks_read = tables.iter().map(|t| t.heap_blks_read).sum();
        db.heap_blks_hit = tables.iter().map(|t| t.heap_blks_hit).sum();
        let next_xid: i64 = self
            .client
            .query_one("SELECT txid_snapshot_xmax(txid_current_snapshot())", &[])
            .context("reading the next XID")?
            .try_get(0)?;
        let running: i64 = self
            .client
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'", &[])
            .context("counting autovacuum workers")?
            .try_get(0)?;
        Ok(Observation { next_xid: next_xid.max(0) as u64, autovacuums_running: running as u32, db, tables })
    }

    fn take_log(&mut self) -> anyhow::Result<Vec<String>> {
        self.pump()?;
        Ok(std::mem::take(&mut self.pending))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What PostgreSQL 15 writes with `log_line_prefix = '%m [%p] '` and
    /// `log_autovacuum_min_duration = 0`: an ordinary autovacuum, an anti-wraparound one, and
    /// a checkpoint, each message's details on tab-indented continuation lines.
    const SAMPLE: &str = "\
2024-05-01 10:00:00.101 UTC [4242] LOG:  automatic vacuum of table \"postgres.public.bmsql_stock\": index scans: 1
\tpages: 0 removed, 1200 remain, 300 scanned (25.00% of total)
\ttuples: 10 removed, 20000 remain, 0 are dead but not yet removable
2024-05-01 10:00:01.202 UTC [4243] LOG:  automatic aggressive vacuum to prevent wraparound of table \"postgres.public.bmsql_order_line\": index scans: 0
\tpages: 0 removed, 9000 remain, 9000 scanned (100.00% of total)
\tnew relfrozenxid: 123456, which is 100000 XIDs ahead of previous value
2024-05-01 10:00:02.303 UTC [4200] LOG:  checkpoint starting: time
";

    #[test]
    fn entries_are_a_timestamped_line_and_its_continuations() {
        let mut p = LogParser::default();
        let entries = p.feed(SAMPLE.as_bytes(), true);
        assert_eq!(entries.len(), 3);
        assert!(entries[0].starts_with("2024-05-01 10:00:00.101 UTC [4242] LOG:  automatic vacuum"));
        assert_eq!(entries[0].lines().count(), 3);
        assert!(entries[1].ends_with("which is 100000 XIDs ahead of previous value"));
        assert_eq!(entries[2], "2024-05-01 10:00:02.303 UTC [4200] LOG:  checkpoint starting: time");
    }

    #[test]
    fn entries_split_across_reads_wait_for_their_end() {
        let bytes = SAMPLE.as_bytes();
        let mut p = LogParser::default();
        let mut all = Vec::new();
        // Feed in 7-byte pieces, never at the end until the last one: an entry is handed out
        // only once the next one has begun.
        for (i, piece) in bytes.chunks(7).enumerate() {
            let last = (i + 1) * 7 >= bytes.len();
            let got = p.feed(piece, last);
            if !last {
                assert!(got.iter().all(|e| !e.contains("checkpoint")), "the last entry came early");
            }
            all.extend(got);
        }
        assert_eq!(all, LogParser::default().feed(bytes, true));
        // Without a final newline the last line is not complete yet, and neither is the entry
        // before it, which that line might have continued.
        let mut p = LogParser::default();
        let cut = &SAMPLE[..SAMPLE.len() - 5];
        assert_eq!(p.feed(cut.as_bytes(), true).len(), 1);
        assert_eq!(p.feed(&SAMPLE.as_bytes()[SAMPLE.len() - 5..], true).len(), 2);
    }

    #[test]
    fn only_anti_wraparound_vacuums_name_a_table() {
        let entries = LogParser::default().feed(SAMPLE.as_bytes(), true);
        let named: Vec<Option<&str>> = entries.iter().map(|e| anti_wraparound_table(e)).collect();
        assert_eq!(named, [None, Some("bmsql_order_line"), None]);
        let plain = "2024-05-01 10:00:00.000 UTC [1] LOG:  automatic vacuum to prevent wraparound of table \
                     \"db.s.t\": index scans: 0";
        assert_eq!(anti_wraparound_table(plain), Some("t"));
        let aggressive_only = "2024-05-01 10:00:00.000 UTC [1] LOG:  automatic aggressive vacuum of table \
                               \"db.s.t\": index scans: 0";
        assert_eq!(anti_wraparound_table(aggressive_only), None);
    }
}
