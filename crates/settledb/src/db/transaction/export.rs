//! Exported snapshots (PostgreSQL's `ExportSnapshot` and `ImportSnapshot`): one transaction
//! publishes its snapshot under a name, and another adopts it, so the two read exactly the
//! same data.
//!
//! A logical slot created with `SNAPSHOT 'export'` exports the snapshot of its consistent
//! point: a client (pg_dump, a CDC tool's initial copy) reads the tables with it from other
//! connections, then streams the rest from the slot, and nothing is missed or read twice.
//!
//! The registry maps a name to a copy of the exporter's snapshot. An export lives as long as
//! the exporting transaction: [`Transaction`]'s end removes its exports before it leaves the
//! proc array. Each export advertises its snapshot's xmin in the proc array under a backend
//! of its own, taken while the exporter advertises that same xmin (its snapshot was just
//! taken): a READ COMMITTED exporter moves its own xmin on at its next statement, and the
//! export still holds back pruning (PostgreSQL registers an exported snapshot with the
//! transaction for the same reason). An import advertises the xmin for the importer under
//! the registry's lock, while the export still holds it: nothing the snapshot needs can have
//! been removed (PostgreSQL checks the same with `ProcArrayInstallImportedXmin`). From then on
//! the importer holds it itself.
//!
//! An exported snapshot lists the exporter's own XIDs as running, when it has any: the
//! importer must not see the exporter's uncommitted rows (the exporter's snapshot calls them
//! its own).
//!
//! Names are PostgreSQL's shape, three hexadecimal and decimal parts (`00000003-0000001B-1`):
//! the exporter's backend, a counter, and the export's number in its transaction.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::Transaction;
use crate::config::IsolationLevel;
use crate::error::{Error, Result};
use crate::xact::{BackendId, Snapshot};

/// The snapshots exported now, by name.
#[derive(Default)]
pub(crate) struct ExportedSnapshots {
    next: AtomicU32,
    by_name: Mutex<HashMap<String, Export>>,
}

/// One exported snapshot.
struct Export {
    /// The exporting transaction's backend.
    exporter: BackendId,
    /// The backend under which the export advertises the snapshot's xmin.
    holder: BackendId,
    snapshot: Snapshot,
}

impl ExportedSnapshots {
    /// Removes every export of `exporter` (its transaction is ending), each no longer holding
    /// back pruning.
    fn withdraw(&self, exporter: BackendId, xact: &crate::xact::TransactionManager) {
        self.by_name.lock().retain(|_, e| {
            if e.exporter != exporter {
                return true;
            }
            xact.unregister_backend(e.holder);
            false
        });
    }
}

/// The snapshot another transaction sees when it imports `snap`, taken by a transaction
/// whose current XIDs are `snap.my_xid` and `snap.my_subxids`: those become running XIDs.
fn as_seen_by_another(snap: &Snapshot) -> Snapshot {
    let mut out = snap.clone();
    if let Some(me) = out.my_xid.take() {
        // An XID at or past xmax is invisible anyway (and xip holds only XIDs before xmax).
        if me.precedes(out.xmax) {
            if let Err(at) = out.xip.binary_search_by_key(&me.0, |x| x.0) {
                out.xip.insert(at, me);
            }
            out.subxip.extend(out.my_subxids.iter().copied());
            out.subxip.sort_by_key(|x| x.0);
            out.subxip.dedup();
        }
    }
    out.my_subxids = Arc::default();
    out
}

impl Transaction<'_> {
    /// Exports this transaction's snapshot (PostgreSQL's `pg_export_snapshot()`): a
    /// REPEATABLE READ transaction's, taken now if no command has yet; under READ COMMITTED
    /// the current statement's, or a new one. Returns its name, which
    /// [`Transaction::import_snapshot`] accepts until this transaction ends.
    pub fn export_snapshot(&mut self) -> Result<String> {
        self.active()?;
        // Taken and advertised as this backend's xmin: the export's holder may take it over.
        let snap = self.command_snapshot()?;
        let holder = self.inner.xact.new_backend_id();
        self.inner.xact.install_imported_xmin(holder, snap.xmin);
        let registry = &self.inner.exported_snapshots;
        let mut map = registry.by_name.lock();
        let mine = map.values().filter(|e| e.exporter == self.backend).count();
        let n = registry.next.fetch_add(1, Ordering::Relaxed);
        let name = format!("{:08X}-{:08X}-{}", self.backend.0, n, mine + 1);
        let export = Export { exporter: self.backend, holder, snapshot: as_seen_by_another(&snap) };
        map.insert(name.clone(), export);
        self.exported = true;
        Ok(name)
    }

    /// Adopts the snapshot another transaction exported as `name` (`SET TRANSACTION SNAPSHOT`):
    /// from now on this transaction reads exactly what that one does. Only a REPEATABLE READ
    /// transaction can, before its first command. `NotFound` when no live transaction exports
    /// `name`.
    pub fn import_snapshot(&mut self, name: &str) -> Result<()> {
        self.active()?;
        if self.isolation != IsolationLevel::RepeatableRead {
            return Err(Error::invalid(
                "a snapshot-importing transaction must have isolation level SERIALIZABLE or REPEATABLE READ",
            ));
        }
        if self.snapshot.is_some() || self.xid.is_some() {
            return Err(Error::invalid("SET TRANSACTION SNAPSHOT must be called before any query"));
        }
        let map = self.inner.exported_snapshots.by_name.lock();
        let Some(Export { snapshot: snap, .. }) = map.get(name) else {
            return Err(Error::NotFound(format!("invalid snapshot identifier: \"{name}\"")));
        };
        // Under the registry's lock: the export still advertises this xmin (module doc).
        self.horizon = self.inner.xact.install_imported_xmin(self.backend, snap.xmin);
        self.snapshot = Some(snap.clone());
        drop(map);
        self.refresh_snapshot_xids();
        Ok(())
    }

    /// The transaction ends: its exports go first, while its xmin still holds.
    pub(super) fn withdraw_exports(&mut self) {
        if std::mem::take(&mut self.exported) {
            self.inner.exported_snapshots.withdraw(self.backend, &self.inner.xact);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Xid;

    #[test]
    fn the_exporters_own_xids_run_for_the_importer() {
        let snap = Snapshot {
            xmin: Xid(100),
            xmax: Xid(110),
            xip: vec![Xid(101), Xid(107)],
            subxip: vec![Xid(108)],
            my_xid: Some(Xid(104)),
            my_subxids: Arc::new(vec![Xid(105), Xid(106)]),
            ..Snapshot::default()
        };
        let seen = as_seen_by_another(&snap);
        assert_eq!(seen.xip, vec![Xid(101), Xid(104), Xid(107)]);
        assert_eq!(seen.subxip, vec![Xid(105), Xid(106), Xid(108)]);
        assert_eq!(seen.my_xid, None);
        assert!(seen.my_subxids.is_empty());
        // The exporter's own rows: its snapshot sees them, the imported one does not.
        assert!(snap.is_current(Xid(105)));
        assert!(!seen.is_current(Xid(105)));
        assert!(seen.is_in_progress(Xid(104)));
        assert!(seen.is_in_progress(Xid(106)));

        let no_xid = Snapshot { my_xid: None, my_subxids: Arc::default(), ..snap.clone() };
        assert_eq!(as_seen_by_another(&no_xid).xip, snap.xip);
    }
}
