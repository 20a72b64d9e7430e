//! ANALYZE without column statistics: what the planner of a PostgreSQL would be told about a
//! table's size, and what autovacuum's counters need.
//!
//! settledb keeps no column statistics (its SQL front end plans by keys alone), so ANALYZE
//! does the part of PostgreSQL's `do_analyze_rel` that is about the table as a whole:
//!
//! 1. it takes the table's ShareUpdateExclusive lock (one ANALYZE or VACUUM at a time; a
//!    concurrent DROP or ALTER waits), as PostgreSQL does;
//! 2. it reads up to [`SAMPLE_PAGES`] pages, every page of a smaller table, else a uniform
//!    random sample of them in block order (Knuth's selection sampling, as PostgreSQL's
//!    `BlockSampler`), and classifies each tuple as VACUUM would (`HeapTupleSatisfiesVacuum`
//!    against the current horizon): live (also a deletion in progress) or dead (also dead but
//!    still visible to someone, and dead line pointers), an insertion in progress counted as
//!    neither, as `acquire_sample_rows` counts them;
//! 3. it extrapolates both counts to the whole table from the pages read (PostgreSQL's
//!    `totalrows = liverows / pages read × pages`) and writes `relpages` and `reltuples` to
//!    `pg_class` in place, WAL-logged, as VACUUM does;
//! 4. it reports to the statistics: the live and dead estimates replace the counters',
//!    `n_mod_since_analyze` starts again from zero, `last_analyze` and `analyze_count`.
//!
//! PostgreSQL also keeps a reservoir of up to 30,000 rows to compute column statistics from;
//! settledb samples pages, not rows, and keeps none ([`AnalyzeReport::sample_rows`] is 0).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::buffer::Ring;
use crate::catalog::TableEntry;
use crate::db::{Database, Inner, Table};
use crate::error::{Error, Result};
use crate::heap::tuple::TupleHeader;
use crate::heap::visibility::{satisfies_vacuum, VacuumStatus};
use crate::heap::{self};
use crate::lmgr::{LockMode, WaitPolicy};
use crate::page::{self, LpFlags};
use crate::types::{BlockNumber, Fork, OffsetNumber};

/// Pages read at most: PostgreSQL's sample of `300 × default_statistics_target` rows comes
/// from as many pages.
pub const SAMPLE_PAGES: u32 = 30_000;

/// What one ANALYZE found (PostgreSQL's VERBOSE line: `scanned P of N pages, containing L live
/// rows and D dead rows; S rows in sample, T estimated total rows`).
#[derive(Debug, Clone, PartialEq)]
pub struct AnalyzeReport {
    pub table: String,
    /// Pages in the table, and pages read.
    pub pages: u32,
    pub scanned_pages: u32,
    /// Tuples found live and dead in the pages read.
    pub live_rows: u64,
    pub dead_rows: u64,
    /// Rows kept to compute column statistics from: none here.
    pub sample_rows: u64,
    /// The whole table's estimates (`reltuples` and the dead-tuple counter).
    pub estimated_rows: f64,
    pub estimated_dead_rows: f64,
    pub elapsed: Duration,
}

impl Database {
    /// ANALYZE of one table (see the module documentation).
    pub fn analyze(&self, table: &Table) -> Result<AnalyzeReport> {
        analyze_rel(self.inner(), &self.current_entry(table), WaitPolicy::Wait)
    }

    /// ANALYZE (SKIP_LOCKED): as [`Database::analyze`], but a table whose lock another holds
    /// is [`Error::LockNotAvailable`] at once.
    pub fn analyze_nowait(&self, table: &Table) -> Result<AnalyzeReport> {
        analyze_rel(self.inner(), &self.current_entry(table), WaitPolicy::NoWait)
    }
}

fn analyze_rel(inner: &Inner, entry: &Arc<TableEntry>, wait: WaitPolicy) -> Result<AnalyzeReport> {
    let start = Instant::now();
    let owner = inner.lmgr.new_owner("analyze");
    let locked =
        inner.lmgr.lock(&owner, entry.rel.oid, LockMode::ShareUpdateExclusive, wait, inner.config.lock_timeout());
    let result = locked.and_then(|()| {
        // Dropped, or TRUNCATEd (new storage, a new entry), while we waited?
        let entry = inner
            .catalog
            .get_by_oid(entry.rel.oid)
            .ok_or_else(|| Error::NotFound(format!("relation \"{}\" was dropped", entry.rel.name)))?;
        sample_and_report(inner, &entry, start)
    });
    inner.lmgr.release_all(&owner);
    result
}

fn sample_and_report(inner: &Inner, entry: &Arc<TableEntry>, start: Instant) -> Result<AnalyzeReport> {
    let rel = &entry.rel;
    let env = inner.env();
    let pages = inner.pool.smgr().nblocks(rel.relfilenode, Fork::Main)?;
    let horizon = inner.xact.oldest_xmin_with_holder(crate::xact::horizon::is_catalog_relation(rel.oid)).0;
    let mut ring = Ring::new(256 << 10);
    let (mut live, mut dead) = (0u64, 0u64);
    let blocks = sample_blocks(pages, SAMPLE_PAGES, seed());
    for &b in &blocks {
        let buf = heap::read_page(&env, rel, BlockNumber(b), Some(&mut ring))?;
        let g = buf.read();
        if page::is_new(&g.0) {
            continue;
        }
        for o in 1..=page::max_offset(&g.0) {
            let off = OffsetNumber(o);
            match page::item_id(&g.0, off).flags {
                LpFlags::Dead => dead += 1,
                LpFlags::Normal => {
                    let t = page::item(&g.0, off);
                    let h = TupleHeader::parse(t).ok_or_else(|| {
                        heap::corrupt_tuple(
                            rel,
                            crate::types::Tid { block: BlockNumber(b), offset: off },
                            "invalid tuple header",
                        )
                    })?;
                    match satisfies_vacuum(&h, horizon, &inner.xact)? {
                        VacuumStatus::Live | VacuumStatus::DeleteInProgress => live += 1,
                        VacuumStatus::Dead | VacuumStatus::RecentlyDead => dead += 1,
                        VacuumStatus::InsertInProgress => {}
                    }
                }
                _ => {}
            }
        }
    }
    let scanned = blocks.len() as u32;
    let scale = if scanned == 0 { 0.0 } else { f64::from(pages) / f64::from(scanned) };
    let estimated_rows = (live as f64 * scale).round();
    let estimated_dead_rows = (dead as f64 * scale).round();
    crate::vacuum::update_pg_class(inner.vacuum_env(), entry, pages, estimated_rows, entry.relfrozenxid())?;
    entry.stats.report_analyze(estimated_rows as u64, estimated_dead_rows as u64);
    crate::db::autovacuum::note_changed(inner, entry);
    Ok(AnalyzeReport {
        table: rel.name.clone(),
        pages,
        scanned_pages: scanned,
        live_rows: live,
        dead_rows: dead,
        sample_rows: 0,
        estimated_rows,
        estimated_dead_rows,
        elapsed: start.elapsed(),
    })
}

/// A seed for the page sample: the clock's nanoseconds (each ANALYZE samples anew, as
/// PostgreSQL's does).
fn seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0x9E37_79B9, |d| d.as_nanos() as u64)
}

/// `k` of the blocks `0..n` (all of them when `n <= k`), each equally likely, in increasing
/// order: Knuth's selection sampling (Algorithm S), one pass over the block numbers.
pub fn sample_blocks(n: u32, k: u32, seed: u64) -> Vec<u32> {
    if n <= k {
        return (0..n).collect();
    }
    let mut state = seed | 1;
    let mut next_unit = || {
        // xorshift64*, then the top 53 bits as a fraction in [0, 1).
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out = Vec::with_capacity(k as usize);
    for b in 0..n {
        let (left, needed) = (n - b, k - out.len() as u32);
        if needed == 0 {
            break;
        }
        if f64::from(left) * next_unit() < f64::from(needed) {
            out.push(b);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_table_is_read_whole() {
        assert_eq!(sample_blocks(5, 30_000, 1), vec![0, 1, 2, 3, 4]);
        assert!(sample_blocks(0, 10, 1).is_empty());
    }

    #[test]
    fn the_sample_has_k_distinct_blocks_in_order_spread_over_the_table() {
        for seed in [1, 2, 3, 0xDEAD_BEEF] {
            let s = sample_blocks(100_000, 30_000, seed);
            assert_eq!(s.len(), 30_000);
            assert!(s.windows(2).all(|w| w[0] < w[1]));
            assert!(*s.last().unwrap() < 100_000);
            // Each tenth of the table holds about a tenth of the sample.
            for tenth in 0..10u32 {
                let n = s.iter().filter(|&&b| b / 10_000 == tenth).count();
                assert!((2_500..=3_500).contains(&n), "tenth {tenth}: {n} blocks");
            }
        }
    }
}
