//! Truncation of empty pages at the end of a table after VACUUM (`lazy_truncate_heap`).
//!
//! Worth it when at least [`REL_TRUNCATE_MINIMUM`] pages, or 1/[`REL_TRUNCATE_FRACTION`] of
//! the table, are free at the end. As in PostgreSQL, the table's AccessExclusive lock is
//! taken only conditionally (retrying every 50 ms for [`TRUNCATE_LOCK_TIMEOUT`]; readers and
//! writers hold weaker modes to their transaction's end, so any of them makes it wait), and
//! while walking back over empty pages VACUUM checks every [`TRUNCATE_LOCK_HOLD`] whether
//! anyone waits for the table and then gives the lock back (`lazy_truncate_heap`'s
//! `LockHasWaitersRelation`), so no one waits behind it long. The relation's write lock is
//! taken conditionally beside it, for the catalog's own writers, which take no table lock.
//! The maps are truncated before the heap: their bits for the removed pages are cleared by
//! records that precede the heap's truncation record.

use std::time::{Duration, Instant};

use crate::error::Result;
use crate::heap;
use crate::lmgr::{LockMode, WaitPolicy};
use crate::page::{self, LpFlags};
use crate::types::{BlockNumber, Fork, Xid};
use crate::wal::{RecordBuilder, Rmgr};

use super::{LazyVacuum, VacuumPhase};

/// Truncation is attempted when at least this many tail pages, or 1/16 of the table, are free.
const REL_TRUNCATE_MINIMUM: u32 = 1000;
const REL_TRUNCATE_FRACTION: u32 = 16;
/// Truncation waits for the table lock this long, retrying every 50 ms, then gives up.
const TRUNCATE_LOCK_TIMEOUT: Duration = Duration::from_secs(5);
/// ... and checks this often whether anyone waits for the table, to give way.
const TRUNCATE_LOCK_HOLD: Duration = Duration::from_millis(20);

/// Gives the AccessExclusive lock back (VACUUM keeps its ShareUpdateExclusive).
struct ReleaseOnDrop<'a> {
    lmgr: &'a crate::lmgr::LockManager,
    owner: &'a crate::lmgr::LockOwner,
    oid: crate::types::Oid,
}

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        self.lmgr.release(self.owner, self.oid, LockMode::AccessExclusive);
    }
}

impl LazyVacuum<'_> {
    /// Truncates empty pages at the end of the table; returns the new page count.
    pub(super) fn truncate_heap(&mut self, rel_pages: u32) -> Result<u32> {
        let freeable = rel_pages.saturating_sub(self.counts.nonempty_pages);
        if freeable == 0 || (freeable < REL_TRUNCATE_MINIMUM && freeable < rel_pages / REL_TRUNCATE_FRACTION) {
            return Ok(rel_pages);
        }
        self.progress.set_phase(VacuumPhase::TruncatingHeap);
        let mut current = rel_pages;
        loop {
            let deadline = Instant::now() + TRUNCATE_LOCK_TIMEOUT;
            let lmgr = self.db.lmgr;
            let oid = self.rel.oid;
            let lock = loop {
                if lmgr.lock(self.locks, oid, LockMode::AccessExclusive, WaitPolicy::NoWait, None).is_ok() {
                    if let Some(l) = self.rel.write_lock.try_write() {
                        break Some(l);
                    }
                    lmgr.release(self.locks, oid, LockMode::AccessExclusive);
                }
                if Instant::now() >= deadline {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let Some(_lock) = lock else { return Ok(current) };
            let _release = ReleaseOnDrop { lmgr, owner: self.locks, oid };
            let env = &self.db.heap();
            let nblocks = env.pool.smgr().nblocks(self.rel.relfilenode, Fork::Main)?;
            if nblocks != current {
                // The table grew meanwhile: its new pages are not empty.
                return Ok(current);
            }
            // Walk back over empty pages while no one needs the lock for long.
            let started = Instant::now();
            let mut new_end = current;
            let mut gave_way = false;
            while new_end > self.counts.nonempty_pages {
                if (current - new_end).is_multiple_of(32)
                    && started.elapsed() > TRUNCATE_LOCK_HOLD
                    && lmgr.has_waiters(oid)
                {
                    gave_way = true;
                    break;
                }
                let b = BlockNumber(new_end - 1);
                let buf = heap::read_page(env, self.rel, b, Some(&mut self.leader.ring))?;
                let g = buf.read();
                let empty =
                    page::is_new(&g.0) || page::item_ids(&g.0).iter().all(|(_, id)| id.flags == LpFlags::Unused);
                if !empty {
                    self.counts.nonempty_pages = new_end;
                    break;
                }
                new_end -= 1;
            }
            if new_end < current {
                // The maps first: their bits for the removed pages are cleared by records that
                // precede the heap's truncation record, so no crash can leave a map claiming
                // pages past the heap's end (a re-extended page would inherit the bits).
                self.rel.vm.truncate(env.maps(), new_end)?;
                self.rel.fsm.truncate(self.db.pool, new_end)?;
                let lsn = env.wal.insert(&RecordBuilder {
                    toplevel_xid: crate::types::Xid::INVALID,
                    rmgr: Rmgr::Storage,
                    info: crate::wal::STORAGE_TRUNCATE,
                    xid: Xid::INVALID,
                    blocks: vec![],
                    main_data: crate::wal::storage_main_data(self.rel.relfilenode, Fork::Main, Some(new_end)),
                })?;
                env.wal.flush(lsn)?;
                env.pool.drop_relation_buffers(self.rel.relfilenode, Some(Fork::Main), BlockNumber(new_end))?;
                // Logged and its buffers dropped: a truncation that may not be durable stops
                // the engine (PostgreSQL truncates in a critical section).
                env.pool
                    .smgr()
                    .truncate(self.rel.relfilenode, Fork::Main, new_end)
                    .map_err(|e| env.wal.poison_after("truncating a relation file", e))?;
                self.r.truncated = Some((self.r.truncated.map_or(current, |t| t.0), new_end));
                current = new_end;
            }
            if !gave_way || current <= self.counts.nonempty_pages {
                return Ok(current);
            }
        }
    }
}
