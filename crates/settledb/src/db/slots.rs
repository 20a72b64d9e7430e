//! Replication slots on the [`Database`]: create, drop, list, advance; and the wiring that
//! pushes the slots' needs down to the layers below (see [`crate::decode::slot`] for the
//! slots themselves).
//!
//! * the oldest `restart_lsn` goes to the checkpoint's WAL removal
//!   ([`crate::wal::Wal::remove_old_segments_keeping`], capped by `max_slot_wal_keep_size`,
//!   invalidating the slots that fall behind it: [`Inner::slot_keep_lsn`]);
//! * the oldest `xmin` and `catalog_xmin` go to the transaction manager
//!   ([`crate::xact::TransactionManager::set_replication_slot_xmin`]) after every change, and
//!   at startup before recovery, so nothing a slot needs is pruned.

use std::path::Path;
use std::sync::Arc;

use super::{Database, Inner};
use crate::config::{Config, WalLevel};
use crate::decode::slot::{
    self, ReplicationSlots, RunningXactsAt, SlotData, SlotInfo, SlotMinima, SlotOptions, WalPosition, DATABASE_OID,
    MAX_NAME_LEN,
};
use crate::error::{Error, Result};
use crate::io::FileSystem;
use crate::types::{Lsn, Xid};
use crate::wal::{Rmgr, WalReader};
use crate::xact::standby::{RunningXacts, XLOG_RUNNING_XACTS};
use crate::xact::TransactionManager;

/// Loads the slots at startup, refuses logical slots under `wal_level = replica` (as
/// PostgreSQL's `RestoreSlotFromDisk` does) and pushes their xmins down.
pub(crate) fn open_slots(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    config: &Config,
    xact: &TransactionManager,
) -> Result<ReplicationSlots> {
    let slots = ReplicationSlots::open(fs.clone(), dir)?;
    if config.wal_level != WalLevel::Logical {
        if let Some(d) = slots.list().first() {
            return Err(Error::Config(format!(
                "logical replication slot \"{}\" exists, but wal_level < logical; HINT: Change wal_level to be \
                 logical or higher.",
                d.name
            )));
        }
    }
    let m = slots.minima();
    xact.set_replication_slot_xmin(m.xmin, m.catalog_xmin);
    Ok(slots)
}

/// Every running-transactions record starting in `[from, to)`, in order, as a decoding session
/// read them ([`Database::decode_slot_into`] reads every record from a slot's `restart_lsn`).
/// WAL below the flushed position never changes, so they stay true; advancing a slot over
/// any part of `[from, to)` uses them instead of reading that WAL a second time (a session
/// following the WAL publishes them pass by pass, so its consumer's confirmations read none).
#[derive(Clone, Debug, Default)]
pub(crate) struct RunningXactsSeen {
    pub from: Lsn,
    pub to: Lsn,
    pub records: Vec<RunningXactsAt>,
}

impl Inner {
    fn push_slot_minima(&self, m: SlotMinima) {
        self.xact.set_replication_slot_xmin(m.xmin, m.catalog_xmin);
    }

    fn wal_position(&self) -> WalPosition {
        WalPosition {
            current: self.wal.insert_lsn(),
            segment_size: self.wal.segment_size(),
            max_wal_size: self.config.get().max_wal_size_bytes,
            max_slot_wal_keep_size: self.config.get().max_slot_wal_keep_size_bytes,
        }
    }

    /// Writes the slots changed since their files were (`CheckPointReplicationSlots`).
    pub(crate) fn checkpoint_replication_slots(&self) -> Result<usize> {
        self.slots.lock().save_dirty()
    }

    /// The oldest WAL the slots keep from a checkpoint's removal (`INVALID`: none), after
    /// invalidating those that fell more than `max_slot_wal_keep_size` behind (logging
    /// PostgreSQL's line for each). Every slot's `restart_lsn` in memory is the one in its
    /// file (advancing writes it at once), so the WAL kept is what a crash would need.
    pub(crate) fn slot_keep_lsn(&self) -> Result<Lsn> {
        let mut g = self.slots.lock();
        let Some((oldest, _)) = g.minima().restart_lsn else { return Ok(Lsn::INVALID) };
        let pos = self.wal_position();
        let keep = pos.keep_lsn(oldest);
        let gone = g.invalidate_obsolete(keep)?;
        if gone.is_empty() {
            return Ok(keep);
        }
        for (name, at) in &gone {
            self.log_line(&format!(
                "LOG:  invalidating slot \"{name}\" because its restart_lsn {at} exceeds max_slot_wal_keep_size\n"
            ));
        }
        let m = g.minima();
        let keep = m.restart_lsn.as_ref().map_or(Lsn::INVALID, |(l, _)| pos.keep_lsn(*l));
        self.push_slot_minima(m);
        Ok(keep)
    }

    /// The running-transactions records from `from` to `to` (records starting before `to`):
    /// those a decoding session just read if it read that range, else read from the WAL.
    fn running_xacts_between(&self, from: Lsn, to: Lsn) -> Result<Vec<RunningXactsAt>> {
        if let Some(seen) = self.running_xacts_seen.lock().as_ref() {
            if seen.from <= from && to <= seen.to {
                return Ok(seen.records.iter().filter(|r| r.lsn >= from && r.lsn < to).cloned().collect());
            }
        }
        let mut reader = WalReader::new(self.fs.clone(), self.wal.dir(), from, self.wal.segment_size());
        reader.skip_page_images();
        reader.read_bodies_of(|rmgr, _| rmgr == Rmgr::Standby);
        let mut out = Vec::new();
        while let Some(rec) = reader.next()? {
            if rec.lsn >= to {
                break;
            }
            if rec.rmgr == Rmgr::Standby && rec.info == XLOG_RUNNING_XACTS {
                let running = RunningXacts::decode(&rec.main_data, rec.lsn)?;
                out.push(RunningXactsAt { lsn: rec.lsn, end: rec.end_lsn, running });
            }
        }
        Ok(out)
    }
}

impl Database {
    /// `pg_current_wal_insert_lsn()`: where the next WAL record goes.
    pub fn current_wal_insert_lsn(&self) -> Lsn {
        self.inner.wal.insert_lsn()
    }

    /// `pg_current_wal_flush_lsn()`: how far the WAL is durable (what a WAL sender reports as
    /// its end of WAL).
    pub fn current_wal_flush_lsn(&self) -> Lsn {
        self.inner.wal.flushed_lsn()
    }

    /// Waits until the WAL is durable past `lsn` or `timeout` passes; the flushed position
    /// then (a WAL sender that has sent everything waits here for the next commit).
    pub fn wait_for_wal_flush(&self, lsn: Lsn, timeout: std::time::Duration) -> Lsn {
        self.inner.wal.wait_flushed_past(lsn, timeout)
    }

    /// The data directory's system identifier, set when it was initialized (`IDENTIFY_SYSTEM`'s
    /// `systemid`).
    pub fn system_identifier(&self) -> u64 {
        self.inner.control.lock().system_id
    }

    /// Creates a logical replication slot (`pg_create_logical_replication_slot(name, plugin,
    /// temporary => false, two_phase)`); see [`crate::decode::slot`], "Creating a logical
    /// slot". Errors, with nothing changed: `wal_level` is not `logical`, an invalid or used
    /// name, `max_replication_slots` reached, an invalid plugin name, or an I/O failure.
    pub fn create_logical_replication_slot(&self, name: &str, plugin: &str, two_phase: bool) -> Result<SlotInfo> {
        self.create_logical_replication_slot_with(name, plugin, SlotOptions { two_phase, temporary: false })
    }

    /// Creates a logical slot as [`Database::create_logical_replication_slot`] does, with
    /// `options`: a temporary slot is never written to disk (see [`crate::decode::slot`],
    /// "Temporary slots"); its creator drops it.
    pub fn create_logical_replication_slot_with(
        &self,
        name: &str,
        plugin: &str,
        options: SlotOptions,
    ) -> Result<SlotInfo> {
        self.create_slot(name, plugin, options, None)
    }

    /// Creates a logical slot as [`Database::create_logical_replication_slot_with`] does, and
    /// returns with it a REPEATABLE READ transaction whose snapshot sees exactly what the slot
    /// will not send: every transaction that committed before the slot's consistent point
    /// (`confirmed_flush_lsn`), and none after (PostgreSQL's `CREATE_REPLICATION_SLOT …
    /// (SNAPSHOT 'use')`, which a subscriber's table synchronization reads the table with
    /// before it streams the rest from the slot, and `(SNAPSHOT 'export')`, which exports
    /// it: [`super::Transaction::export_snapshot`]). The consistent point is chosen at a
    /// moment no commit is between its WAL record and its CLOG update, so the two agree to
    /// the transaction.
    pub fn create_logical_replication_slot_with_snapshot(
        &self,
        name: &str,
        plugin: &str,
        options: SlotOptions,
    ) -> Result<(SlotInfo, super::Transaction<'_>)> {
        let mut tx = self.begin_with(crate::config::IsolationLevel::RepeatableRead)?;
        let info = self.create_slot(name, plugin, options, Some(&mut tx))?;
        Ok((info, tx))
    }

    /// Both creations; with `tx`, the consistent point is moved to a commit boundary whose
    /// snapshot `tx` takes.
    fn create_slot(
        &self,
        name: &str,
        plugin: &str,
        options: SlotOptions,
        tx: Option<&mut super::Transaction<'_>>,
    ) -> Result<SlotInfo> {
        let SlotOptions { two_phase, temporary } = options;
        let inner = &self.inner;
        if inner.config.get().max_replication_slots == 0 {
            return Err(Error::invalid("replication slots can only be used if max_replication_slots > 0".to_string()));
        }
        if inner.config.get().wal_level != WalLevel::Logical {
            return Err(Error::invalid("logical decoding requires wal_level >= logical"));
        }
        slot::validate_name(name)?;
        if plugin.is_empty() || plugin.len() > MAX_NAME_LEN || plugin.contains('\0') {
            return Err(Error::invalid(format!("invalid output plugin name \"{plugin}\"")));
        }
        inner.wal.check_poisoned()?;
        let listed = {
            let mut g = inner.slots.lock();
            if g.get(name).is_some() {
                return Err(Error::AlreadyExists(format!("replication slot \"{name}\" already exists")));
            }
            if g.len() >= inner.config.get().max_replication_slots as usize {
                return Err(Error::invalid(
                    "all replication slots are in use; HINT: Free one or increase max_replication_slots.",
                ));
            }
            let catalog_xmin = inner.xact.reserve_slot_catalog_xmin(name);
            let restart_lsn = inner.wal.insert_lsn();
            let logged = inner
                .xact
                .log_running_xacts_listing(&*inner.wal)
                .and_then(|(end, running)| inner.wal.flush(end).map(|()| (end, running)));
            let (end, running) = match logged {
                Ok(l) => l,
                Err(e) => {
                    inner.push_slot_minima(g.minima());
                    return Err(e);
                }
            };
            let d = SlotData {
                name: name.to_string(),
                plugin: plugin.to_string(),
                database: DATABASE_OID,
                two_phase,
                two_phase_at: if two_phase { end } else { Lsn::INVALID },
                xmin: Xid::INVALID,
                catalog_xmin,
                restart_lsn,
                confirmed_flush: end,
                invalidated_at: Lsn::INVALID,
                invalidated: false,
                temporary,
            };
            g.create_ephemeral(d);
            inner.push_slot_minima(g.minima());
            running.xids
        };
        // The consistent point: every transaction the record lists began before the decoder's
        // start and cannot be decoded, so the slot must begin after all of them finished
        // (PostgreSQL's snapshot builder waits for them the same way, prepared transactions
        // included). Waited for outside the slots' lock; the slot holds its WAL and catalog
        // rows meanwhile, but is only written to disk once consistent.
        for &x in &listed {
            inner.xact.wait_for(x);
        }
        let Some(mut d) = inner.slots.lock().get(name).cloned() else {
            return Err(Error::NotFound(format!("replication slot \"{name}\" was dropped while being created")));
        };
        if !listed.is_empty() || tx.is_some() {
            let position = || {
                let consistent = inner.wal.insert_lsn();
                inner.wal.flush(consistent).map(|()| consistent)
            };
            let consistent = match tx {
                Some(tx) => tx.take_boundary_snapshot(position),
                None => position(),
            };
            let consistent = match consistent {
                Ok(c) => c,
                Err(e) => {
                    self.abandon_slot(name);
                    return Err(e);
                }
            };
            d.confirmed_flush = d.confirmed_flush.max(consistent);
            if two_phase {
                d.two_phase_at = d.confirmed_flush;
            }
        }
        let mut g = inner.slots.lock();
        if let Err(e) = g.persist(d.clone()) {
            drop(g);
            self.abandon_slot(name);
            return Err(e);
        }
        inner.push_slot_minima(g.minima());
        drop(g);
        super::pgstat::reset_slot_stats(inner, name, true);
        Ok(SlotInfo::of(&d, &inner.wal_position()))
    }

    /// Forgets a slot whose creation failed.
    fn abandon_slot(&self, name: &str) {
        let mut g = self.inner.slots.lock();
        let _ = g.drop_slot(name);
        self.inner.push_slot_minima(g.minima());
    }

    /// Copies logical slot `src` to a new slot `dst` (`pg_copy_logical_replication_slot(src,
    /// dst)`, not temporary, same plugin): the copy has `src`'s plugin, `two_phase`,
    /// `restart_lsn`, `confirmed_flush_lsn` and `catalog_xmin`, so it decodes exactly what
    /// `src` would from here, and from then on moves on its own. It is written to its state
    /// file before this returns, as [`Database::create_logical_replication_slot`] does, and
    /// keeps what it needs from that moment (the source holds the same WAL and catalog rows
    /// while both exist under the one lock). Its counters start from zero. Errors, with
    /// nothing changed: no slot `src`, an invalidated `src` ("cannot copy invalidated
    /// replication slot"), an invalid or used name `dst`, `max_replication_slots` reached.
    pub fn copy_logical_replication_slot(&self, src: &str, dst: &str) -> Result<SlotInfo> {
        let inner = &self.inner;
        slot::validate_name(dst)?;
        inner.wal.check_poisoned()?;
        let mut g = inner.slots.lock();
        let Some(from) = g.get(src).cloned() else {
            return Err(Error::NotFound(format!("replication slot \"{src}\" does not exist")));
        };
        if from.invalidated {
            return Err(Error::invalid(format!(
                "cannot copy invalidated replication slot \"{src}\"; DETAIL: This slot has been invalidated \
                 because it exceeded the maximum reserved size."
            )));
        }
        if g.get(dst).is_some() {
            return Err(Error::AlreadyExists(format!("replication slot \"{dst}\" already exists")));
        }
        if g.len() >= inner.config.get().max_replication_slots as usize {
            return Err(Error::invalid(
                "all replication slots are in use; HINT: Free one or increase max_replication_slots.",
            ));
        }
        let d = SlotData { name: dst.to_string(), temporary: false, ..from };
        let created = g.create(d.clone());
        inner.push_slot_minima(g.minima());
        created?;
        super::pgstat::reset_slot_stats(inner, dst, true);
        Ok(SlotInfo::of(&d, &inner.wal_position()))
    }

    /// Drops a replication slot (`pg_drop_replication_slot`): its WAL and catalog rows are
    /// released (removed by the next checkpoint and VACUUM).
    pub fn drop_replication_slot(&self, name: &str) -> Result<()> {
        let inner = &self.inner;
        let mut g = inner.slots.lock();
        let dropped = g.drop_slot(name);
        inner.push_slot_minima(g.minima());
        if dropped.is_ok() {
            super::pgstat::reset_slot_stats(inner, name, false);
        }
        dropped.map(|_| ())
    }

    /// The replication slots, by name (`pg_replication_slots`).
    pub fn replication_slots(&self) -> Vec<SlotInfo> {
        let pos = self.inner.wal_position();
        self.inner.slots.list().iter().map(|d| SlotInfo::of(d, &pos)).collect()
    }

    /// One replication slot's state as its file holds it (tests, `settle inspect`).
    pub fn replication_slot(&self, name: &str) -> Option<SlotData> {
        self.inner.slots.lock().get(name).cloned()
    }

    /// Moves slot `name`'s `confirmed_flush_lsn` to `upto`, or to the end of the WAL written
    /// if that is earlier (`pg_replication_slot_advance`), and its `restart_lsn` and
    /// `catalog_xmin` as far as [`slot::restart_point`] proves safe. Unlike PostgreSQL, which
    /// only marks the slot dirty, the state file is written before this returns: the new
    /// position survives a crash. Returns the new `confirmed_flush_lsn`. Errors: no such
    /// slot, an invalidated slot, `upto` before the current `confirmed_flush_lsn`.
    pub fn replication_slot_advance(&self, name: &str, upto: Lsn) -> Result<Lsn> {
        let inner = &self.inner;
        if upto == Lsn::INVALID {
            return Err(Error::invalid("invalid target WAL LSN"));
        }
        inner.wal.check_poisoned()?;
        inner.wal.flush(inner.wal.insert_lsn())?;
        let mut g = inner.slots.lock();
        let Some(old) = g.get(name).cloned() else {
            return Err(Error::NotFound(format!("replication slot \"{name}\" does not exist")));
        };
        if old.invalidated {
            return Err(Error::invalid(format!(
                "replication slot \"{name}\" cannot be advanced; DETAIL: This slot has never previously reserved \
                 WAL, or it has been invalidated."
            )));
        }
        let moveto = upto.min(inner.wal.flushed_lsn());
        if moveto < old.confirmed_flush {
            return Err(Error::invalid(format!(
                "cannot advance replication slot to {moveto}, minimum is {}",
                old.confirmed_flush
            )));
        }
        let mut d = old.clone();
        d.confirmed_flush = moveto;
        let records = inner.running_xacts_between(old.restart_lsn, moveto)?;
        if let Some((lsn, xmin)) = slot::restart_point(&records, moveto) {
            if lsn > d.restart_lsn {
                d.restart_lsn = lsn;
                if d.catalog_xmin.precedes(xmin) {
                    d.catalog_xmin = xmin;
                }
            }
        }
        if d != old {
            g.update(d, true)?;
            inner.push_slot_minima(g.minima());
        }
        Ok(moveto)
    }

    /// Turns two-phase decoding on for good on slot `name`, from its `confirmed_flush_lsn`
    /// (a plugin asked for it, as pgoutput's `two_phase` option does: PostgreSQL 15's
    /// `CreateDecodingContext`). The state file is written before this returns. Returns the
    /// slot as it now is.
    pub(super) fn enable_slot_two_phase(&self, name: &str) -> Result<SlotData> {
        let mut g = self.inner.slots.lock();
        let Some(mut d) = g.get(name).cloned() else {
            return Err(Error::NotFound(format!("replication slot \"{name}\" does not exist")));
        };
        if !d.two_phase {
            d.two_phase = true;
            d.two_phase_at = d.confirmed_flush;
            g.update(d.clone(), true)?;
        }
        Ok(d)
    }
}
