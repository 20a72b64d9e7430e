//! What one VACUUM did, and its rendering in PostgreSQL's words: the `VACUUM (VERBOSE)` INFO
//! block and the autovacuum LOG entry (PostgreSQL 18's lines and order, plus PostgreSQL 19's
//! `memory usage:` line), so existing habits and log parsers work on our output.

use std::fmt::Write;
use std::time::Duration;

use crate::buffer::BufferUsage;
use crate::index::BulkDeleteStats;
use crate::page::BLCKSZ;
use crate::types::Xid;
use crate::wal::WalStats;

/// The database name VACUUM's messages qualify tables with (`"settledb.public.t"`).
pub const DATABASE_NAME: &str = "settledb";

/// Everything one VACUUM of one table measured.
#[derive(Clone, Debug, Default)]
pub struct VacuumReport {
    pub table: String,
    pub autovacuum: bool,
    pub wraparound: bool,
    pub aggressive: bool,
    pub policy: String,
    /// Pages when the vacuum began; pages removed by truncation; pages left.
    pub orig_pages: u32,
    pub removed_pages: u32,
    pub new_pages: u32,
    pub scanned_pages: u32,
    pub eagerly_scanned_pages: u32,
    /// Tuples pruning removed; live tuples estimated to remain; deleted tuples some snapshot
    /// may still need; dead tuples left on pages whose cleanup lock was unavailable.
    pub tuples_deleted: u64,
    pub new_live_tuples: u64,
    pub recently_dead_tuples: u64,
    pub missed_dead_tuples: u64,
    pub missed_dead_pages: u32,
    pub oldest_xmin: Xid,
    /// What holds `oldest_xmin` back, when it is a prepared transaction (its identifier and
    /// XID) or a replication slot (its name and the `xmin` or `catalog_xmin` it keeps):
    /// printed after the `removable cutoff:` line. PostgreSQL only hints at prepared
    /// transactions and replication slots in its "oldest xmin is far in the past" warning.
    pub oldest_xmin_holder: Option<crate::xact::HorizonHolder>,
    /// XIDs consumed between OldestXmin and the end of the vacuum.
    pub oldest_xmin_age_at_end: i64,
    pub old_relfrozenxid: Xid,
    /// `Some` when relfrozenxid advanced.
    pub new_relfrozenxid: Option<Xid>,
    pub frozen_pages: u32,
    pub tuples_frozen: u64,
    pub vm_new_visible_pages: u32,
    pub vm_new_visible_frozen_pages: u32,
    pub vm_new_frozen_pages: u32,
    pub lpdead_item_pages: u32,
    pub lpdead_items: u64,
    pub num_index_scans: u32,
    /// Index vacuuming was skipped (`index_cleanup off`, the bypass optimization, or the
    /// failsafe).
    pub index_vacuuming_skipped: bool,
    pub failsafe: bool,
    pub indexes: Vec<(String, BulkDeleteStats)>,
    pub buffers: BufferUsage,
    pub wal: WalStats,
    /// Dead-item store: bytes accumulated over all cycles, resets, budget.
    pub dead_items_bytes_total: u64,
    pub dead_items_resets: u32,
    pub dead_items_limit: u64,
    pub user_cpu: Duration,
    pub system_cpu: Duration,
    pub elapsed: Duration,
    pub truncated: Option<(u32, u32)>,
    /// Times a vacuum thread found the WAL buffers full and wrote them out itself.
    pub wal_buffers_full: u64,
    /// Worker threads beside the leader for the heap's phases I and III.
    pub parallel_workers: u32,
    pub delay_time: Duration,
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        100.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

impl VacuumReport {
    /// The heading line: `finished vacuuming "…"` for VERBOSE, the autovacuum variants
    /// otherwise.
    pub fn heading(&self, verbose: bool) -> String {
        let name = format!("\"{DATABASE_NAME}.public.{}\"", self.table);
        let what = if verbose {
            format!("finished vacuuming {name}")
        } else {
            match (self.wraparound, self.aggressive) {
                (true, true) => format!("automatic aggressive vacuum to prevent wraparound of table {name}"),
                (true, false) => format!("automatic vacuum to prevent wraparound of table {name}"),
                (false, true) => format!("automatic aggressive vacuum of table {name}"),
                (false, false) => format!("automatic vacuum of table {name}"),
            }
        };
        format!("{what}: index scans: {}", self.num_index_scans)
    }

    /// The report body, one line each, as PostgreSQL's `heap_vacuum_rel` writes it.
    pub fn body(&self) -> String {
        let mut s = String::new();
        let orig = u64::from(self.orig_pages);
        let _ = writeln!(
            s,
            "pages: {} removed, {} remain, {} scanned ({:.2}% of total), {} eagerly scanned",
            self.removed_pages,
            self.new_pages,
            self.scanned_pages,
            pct(u64::from(self.scanned_pages), orig),
            self.eagerly_scanned_pages
        );
        let _ = writeln!(
            s,
            "tuples: {} removed, {} remain, {} are dead but not yet removable",
            self.tuples_deleted, self.new_live_tuples, self.recently_dead_tuples
        );
        if self.missed_dead_tuples > 0 {
            let _ = writeln!(
                s,
                "tuples missed: {} dead from {} pages not removed due to cleanup lock contention",
                self.missed_dead_tuples, self.missed_dead_pages
            );
        }
        let _ = writeln!(
            s,
            "removable cutoff: {}, which was {} XIDs old when operation ended",
            self.oldest_xmin.0, self.oldest_xmin_age_at_end
        );
        if let Some(holder) = &self.oldest_xmin_holder {
            let _ = writeln!(s, "removable cutoff held back by {holder}");
        }
        if let Some(x) = self.new_relfrozenxid {
            let _ = writeln!(
                s,
                "new relfrozenxid: {}, which is {} XIDs ahead of previous value",
                x.0,
                x.0.wrapping_sub(self.old_relfrozenxid.0) as i32
            );
        }
        let _ = writeln!(
            s,
            "frozen: {} pages from table ({:.2}% of total) had {} tuples frozen",
            self.frozen_pages,
            pct(u64::from(self.frozen_pages), orig),
            self.tuples_frozen
        );
        let _ = writeln!(
            s,
            "visibility map: {} pages set all-visible, {} pages set all-frozen ({} were all-visible)",
            self.vm_new_visible_pages,
            self.vm_new_visible_frozen_pages + self.vm_new_frozen_pages,
            self.vm_new_frozen_pages
        );
        let lp = format!(
            "{} pages from table ({:.2}% of total)",
            self.lpdead_item_pages,
            pct(u64::from(self.lpdead_item_pages), orig)
        );
        if !self.index_vacuuming_skipped {
            let what = if self.indexes.is_empty() || self.num_index_scans == 0 {
                "index scan not needed"
            } else {
                "index scan needed"
            };
            let _ = writeln!(s, "{what}: {lp} had {} dead item identifiers removed", self.lpdead_items);
        } else {
            let what = if self.failsafe { "index scan bypassed by failsafe" } else { "index scan bypassed" };
            let _ = writeln!(s, "{what}: {lp} have {} dead item identifiers", self.lpdead_items);
        }
        for (name, st) in &self.indexes {
            let _ = writeln!(
                s,
                "index \"{name}\": pages: {} in total, {} newly deleted, {} currently deleted, {} reusable",
                st.num_pages, st.pages_newly_deleted, st.pages_deleted, st.pages_free
            );
        }
        let secs = self.elapsed.as_secs_f64();
        let (read_rate, write_rate) = if secs > 0.0 {
            let mb = |blocks: u64| blocks as f64 * BLCKSZ as f64 / (1024.0 * 1024.0) / secs;
            (mb(self.buffers.reads), mb(self.buffers.dirtied))
        } else {
            (0.0, 0.0)
        };
        let _ = writeln!(s, "avg read rate: {read_rate:.3} MB/s, avg write rate: {write_rate:.3} MB/s");
        let _ = writeln!(
            s,
            "buffer usage: {} hits, {} reads, {} dirtied",
            self.buffers.hits, self.buffers.reads, self.buffers.dirtied
        );
        let _ = writeln!(
            s,
            "WAL usage: {} records, {} full page images, {} bytes, {} buffers full",
            self.wal.records, self.wal.fpi, self.wal.bytes, self.wal_buffers_full
        );
        let resets = self.dead_items_resets;
        let _ = writeln!(
            s,
            "memory usage: dead item storage {:.2} MB accumulated across {resets} reset{} (limit {:.2} MB each)",
            self.dead_items_bytes_total as f64 / (1024.0 * 1024.0),
            if resets == 1 { "" } else { "s" },
            self.dead_items_limit as f64 / (1024.0 * 1024.0)
        );
        let _ = write!(
            s,
            "system usage: CPU: user: {:.2} s, system: {:.2} s, elapsed: {:.2} s",
            self.user_cpu.as_secs_f64(),
            self.system_cpu.as_secs_f64(),
            self.elapsed.as_secs_f64()
        );
        s
    }

    /// The whole `VACUUM (VERBOSE)` output, as psql shows it (`INFO:  ` prefixes).
    pub fn verbose_text(&self) -> String {
        let mut s = String::new();
        let name = format!("\"{DATABASE_NAME}.public.{}\"", self.table);
        let verb = if self.aggressive { "aggressively vacuuming" } else { "vacuuming" };
        let _ = writeln!(s, "INFO:  {verb} {name}");
        if self.parallel_workers > 0 {
            // PostgreSQL's wording for its index workers; ours share the heap's phases I and III.
            let n = self.parallel_workers;
            let noun = if n == 1 { "worker" } else { "workers" };
            let _ = writeln!(
                s,
                "INFO:  launched {n} parallel vacuum {noun} for heap scanning and vacuuming (planned: {n})"
            );
        }
        if let Some((from, to)) = self.truncated {
            let _ = writeln!(s, "INFO:  table \"{}\": truncated {from} to {to} pages", self.table);
        }
        let _ = writeln!(s, "INFO:  {}", self.heading(true));
        s.push_str(&self.body());
        s.push('\n');
        s
    }

    /// The autovacuum log entry (`LOG:  automatic vacuum of table …`).
    pub fn log_text(&self) -> String {
        format!("LOG:  {}\n{}\n", self.heading(false), self.body())
    }
}

/// CPU time of the calling thread (user, system).
pub fn thread_cpu() -> (Duration, Duration) {
    // SAFETY: getrusage writes into the zeroed struct we own; RUSAGE_THREAD is Linux's
    // per-thread flavour, and the call has no other effect.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}
