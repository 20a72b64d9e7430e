//! Autovacuum log entries, in PostgreSQL's format, read back into figures.
//!
//! settledb writes its autovacuum reports as PostgreSQL 15+ does (`VacuumReport::log_text`),
//! so one parser reads the logs of both targets.

use std::collections::BTreeMap;

use serde::Serialize;

/// Sums over autovacuum log entries of one kind.
#[derive(Serialize, Default, Clone, Copy, Debug, PartialEq)]
pub struct LogSums {
    pub vacuums: u64,
    pub pages_scanned: u64,
    pub pages_scanned_max: u64,
    pub elapsed_seconds: f64,
    pub elapsed_seconds_max: f64,
    pub pages_frozen: u64,
    pub wal_bytes: u64,
    pub wal_fpi: u64,
}

/// What one autovacuum log entry says.
#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry {
    pub table: String,
    pub wraparound: bool,
    /// `automatic aggressive vacuum …` (anti-wraparound ones are aggressive too).
    pub aggressive: bool,
    /// `removable cutoff:` (OldestXmin) and `new relfrozenxid:`, when the entry has them.
    pub removable_cutoff: Option<u32>,
    pub new_relfrozenxid: Option<u32>,
    pub pages_scanned: u64,
    pub elapsed_seconds: f64,
    pub pages_frozen: u64,
    pub wal_bytes: u64,
    pub wal_fpi: u64,
}

impl LogSums {
    pub fn add(&mut self, e: &LogEntry) {
        self.vacuums += 1;
        self.pages_scanned += e.pages_scanned;
        self.pages_scanned_max = self.pages_scanned_max.max(e.pages_scanned);
        self.elapsed_seconds += e.elapsed_seconds;
        self.elapsed_seconds_max = self.elapsed_seconds_max.max(e.elapsed_seconds);
        self.pages_frozen += e.pages_frozen;
        self.wal_bytes += e.wal_bytes;
        self.wal_fpi += e.wal_fpi;
    }
}

/// One table's share of the autovacuum log.
#[derive(Serialize, Default, Debug)]
pub struct LogSplit {
    pub anti_wraparound: LogSums,
    pub normal: LogSums,
}

/// The autovacuum log of one run, split into anti-wraparound and other autovacuums, in total
/// and per table; entries that are not vacuum reports (errors) are kept as they are.
#[derive(Serialize, Default, Debug)]
pub struct LogTotals {
    pub anti_wraparound: LogSums,
    pub normal: LogSums,
    /// The same split for each table.
    pub tables: BTreeMap<String, LogSplit>,
    pub other_entries: Vec<String>,
}

impl LogTotals {
    pub fn add(&mut self, entry: &str) {
        match parse_log_entry(entry) {
            Some(e) => {
                let sums = self.tables.entry(e.table.clone()).or_default();
                if e.wraparound {
                    self.anti_wraparound.add(&e);
                    sums.anti_wraparound.add(&e);
                } else {
                    self.normal.add(&e);
                    sums.normal.add(&e);
                }
            }
            None => self.other_entries.push(entry.trim_end().to_string()),
        }
    }
}

/// The first whitespace-separated word of `s` as a number.
fn first_number<T: std::str::FromStr>(s: &str) -> Option<T> {
    s.split_whitespace().next()?.parse().ok()
}

/// Parses one autovacuum log entry in PostgreSQL's format (as `VacuumReport::log_text` writes
/// it, possibly behind a `log_line_prefix`); `None` for anything else, such as an ERROR entry.
pub fn parse_log_entry(text: &str) -> Option<LogEntry> {
    let heading = text.lines().next()?;
    let heading = &heading[heading.find("LOG:  automatic ")?..];
    let wraparound = heading.contains(" to prevent wraparound ");
    let aggressive = heading.starts_with("LOG:  automatic aggressive ");
    let quoted = &heading[heading.find(" of table \"")? + " of table \"".len()..];
    let name = &quoted[..quoted.find('"')?];
    let table = name.rsplit('.').next().unwrap_or(name).to_string();
    let (mut scanned, mut elapsed) = (None, None);
    let mut e = LogEntry {
        table,
        wraparound,
        aggressive,
        removable_cutoff: None,
        new_relfrozenxid: None,
        pages_scanned: 0,
        elapsed_seconds: 0.0,
        pages_frozen: 0,
        wal_bytes: 0,
        wal_fpi: 0,
    };
    // PostgreSQL's server log indents an entry's continuation lines with a tab.
    for line in text.lines().skip(1).map(str::trim_start) {
        if let Some(rest) = line.strip_prefix("pages: ") {
            scanned = rest.split(", ").find(|p| p.contains(" scanned (")).and_then(first_number);
        } else if let Some(rest) = line.strip_prefix("removable cutoff: ") {
            e.removable_cutoff = first_number(rest.trim_end_matches(|c: char| !c.is_ascii_digit()).split(',').next()?);
        } else if let Some(rest) = line.strip_prefix("new relfrozenxid: ") {
            e.new_relfrozenxid = first_number(rest.split(',').next()?);
        } else if let Some(rest) = line.strip_prefix("frozen: ") {
            e.pages_frozen = first_number(rest)?;
        } else if let Some(rest) = line.strip_prefix("WAL usage: ") {
            let parts: Vec<&str> = rest.split(", ").collect();
            e.wal_fpi = parts.iter().find(|p| p.ends_with(" full page images")).and_then(|p| first_number(p))?;
            e.wal_bytes = parts.iter().find(|p| p.ends_with(" bytes")).and_then(|p| first_number(p))?;
        } else if let Some(rest) = line.strip_prefix("system usage: ") {
            elapsed = rest.split("elapsed: ").nth(1).and_then(first_number);
        }
    }
    e.pages_scanned = scanned?;
    e.elapsed_seconds = elapsed?;
    Some(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use settledb::VacuumReport;
    use std::time::Duration;

    fn report(wraparound: bool) -> VacuumReport {
        VacuumReport {
            table: "pgbench_accounts".into(),
            autovacuum: true,
            wraparound,
            aggressive: wraparound,
            orig_pages: 1640,
            new_pages: 1640,
            scanned_pages: 1200,
            frozen_pages: 300,
            oldest_xmin: settledb::Xid(1000),
            new_relfrozenxid: Some(settledb::Xid(900)),
            elapsed: Duration::from_millis(1250),
            wal: settledb::wal::WalStats { records: 10, fpi: 3, bytes: 45_678 },
            ..Default::default()
        }
    }

    /// The parser reads the engine's own rendering, so a change of wording breaks this test
    /// rather than silently zeroing the figures.
    #[test]
    fn parses_the_engines_autovacuum_log_entries() {
        for wraparound in [false, true] {
            let text = format!("2025-01-01 00:00:00.000 UTC [42] {}", report(wraparound).log_text());
            let e = parse_log_entry(&text).expect("parsed");
            assert_eq!(
                e,
                LogEntry {
                    table: "pgbench_accounts".into(),
                    wraparound,
                    aggressive: wraparound,
                    removable_cutoff: Some(1000),
                    new_relfrozenxid: Some(900),
                    pages_scanned: 1200,
                    elapsed_seconds: 1.25,
                    pages_frozen: 300,
                    wal_bytes: 45_678,
                    wal_fpi: 3,
                }
            );
        }
        // The same entry as PostgreSQL's server log writes it: continuation lines indented.
        let indented: String = format!("2025-01-01 00:00:00.000 UTC [42] {}", report(true).log_text())
            .lines()
            .enumerate()
            .map(|(i, l)| if i == 0 { format!("{l}\n") } else { format!("\t{l}\n") })
            .collect();
        assert_eq!(parse_log_entry(&indented).map(|e| e.pages_scanned), Some(1200));
        let err = "2025-01-01 00:00:00.000 UTC [42] ERROR:  autovacuum of table \"settledb.public.t\" failed: x\n";
        assert_eq!(parse_log_entry(err), None);
        let mut totals = LogTotals::default();
        totals.add(&report(true).log_text());
        totals.add(&report(false).log_text());
        totals.add(&report(false).log_text());
        totals.add(err);
        assert_eq!((totals.anti_wraparound.vacuums, totals.normal.vacuums), (1, 2));
        assert_eq!(totals.normal.pages_scanned, 2400);
        assert_eq!(totals.normal.pages_scanned_max, 1200);
        assert_eq!(totals.tables["pgbench_accounts"].normal.vacuums, 2);
        assert_eq!(totals.other_entries.len(), 1);
    }
}
