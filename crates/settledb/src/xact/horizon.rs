//! What holds the removable cutoff back, and the replication slots' share of it (PostgreSQL's
//! `ProcArraySetReplicationSlotXmin` and the `replication_slot_xmin` /
//! `replication_slot_catalog_xmin` of `procarray.c`).
//!
//! The horizon ([`TransactionManager::oldest_xmin`]) is the oldest of the running and prepared
//! XIDs, the advertised snapshot xmins and, when a replication slot keeps one, the slots'
//! `xmin`: row versions deleted before it are dead to everyone. Catalog relations (OID below
//! [`FIRST_NORMAL_OID`], PostgreSQL's `IsCatalogRelationOid`) have their own, older horizon
//! ([`TransactionManager::catalog_oldest_xmin`]): it also counts the slots' `catalog_xmin`,
//! because a logical decoder reads the catalog as it was when the changes it decodes were
//! made. Pruning ([`TransactionManager::relation_horizon`]) and VACUUM both take the right one
//! for the relation.
//!
//! The transaction manager knows nothing of slots (`xact` sits below `decode`): their owner
//! computes the minimum `xmin` and `catalog_xmin` over all slots and pushes them down with
//! [`TransactionManager::set_replication_slot_xmin`], naming the slot that holds each, so
//! that VACUUM VERBOSE can say who holds its cutoff ([`HorizonHolder`]).

use super::TransactionManager;
use crate::types::{FullXid, Oid, Xid};

/// OIDs below this are catalog relations (PostgreSQL's `FirstNormalObjectId`).
pub const FIRST_NORMAL_OID: Oid = Oid(16384);

/// Whether `oid` names a catalog relation, whose dead rows a slot's `catalog_xmin` keeps.
pub fn is_catalog_relation(oid: Oid) -> bool {
    oid < FIRST_NORMAL_OID
}

/// The slots' minima, each with the name of the slot that has it.
#[derive(Clone, Debug, Default)]
pub(super) struct SlotXmins {
    pub(super) xmin: Option<(FullXid, String)>,
    pub(super) catalog_xmin: Option<(FullXid, String)>,
}

/// Who holds the removable cutoff back, when it is not simply the oldest running session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HorizonHolder {
    /// The oldest prepared transaction.
    PreparedXact { gid: String, xid: Xid },
    /// A replication slot's `xmin` (`catalog: false`) or `catalog_xmin` (`catalog: true`).
    ReplicationSlot { name: String, xid: Xid, catalog: bool },
}

impl std::fmt::Display for HorizonHolder {
    /// The tail of VACUUM VERBOSE's line `removable cutoff held back by …`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HorizonHolder::PreparedXact { gid, xid } => write!(f, "prepared transaction \"{gid}\" (xid {xid})"),
            HorizonHolder::ReplicationSlot { name, xid, catalog } => {
                let what = if *catalog { "catalog_xmin" } else { "xmin" };
                write!(f, "replication slot \"{name}\" ({what} {xid})")
            }
        }
    }
}

impl TransactionManager {
    /// Sets the replication slots' minimum `xmin` and `catalog_xmin`, each with the slot that
    /// has it (`None`: no slot keeps one). Their owner calls this after every change of a
    /// slot's xmins, and at startup before anything can prune.
    pub fn set_replication_slot_xmin(&self, xmin: Option<(Xid, String)>, catalog_xmin: Option<(Xid, String)>) {
        let mut procs = self.procs.lock();
        let next = procs.next;
        procs.slot_xmins = SlotXmins {
            xmin: xmin.map(|(x, n)| (next.widen(x), n)),
            catalog_xmin: catalog_xmin.map(|(x, n)| (next.widen(x), n)),
        };
    }

    /// For a new logical slot: the horizon now, installed at once (under the proc-array lock,
    /// so nothing newer can be pruned in between) as the `catalog_xmin` of slot `name` unless
    /// an older one is already kept. The caller records it in the slot and pushes the new
    /// minima down afterwards (PostgreSQL's `CreateInitDecodingContext`).
    pub fn reserve_slot_catalog_xmin(&self, name: &str) -> Xid {
        let mut procs = self.procs.lock();
        let h = procs.horizon();
        let keep = procs.slot_xmins.catalog_xmin.as_ref().is_some_and(|(x, _)| *x <= h);
        if !keep {
            procs.slot_xmins.catalog_xmin = Some((h, name.to_string()));
        }
        h.xid()
    }

    /// The horizon for catalog relations: [`Self::oldest_xmin`] and the slots' `catalog_xmin`.
    pub fn catalog_oldest_xmin(&self) -> Xid {
        self.procs.lock().catalog_horizon().xid()
    }

    /// The horizon to prune relation `rel` with, given the one computed for user relations:
    /// for a catalog relation the older of it and the slots' `catalog_xmin`. Takes no lock
    /// for a user relation.
    pub fn relation_horizon(&self, rel: Oid, oldest_xmin: Xid) -> Xid {
        if !is_catalog_relation(rel) {
            return oldest_xmin;
        }
        let procs = self.procs.lock();
        match &procs.slot_xmins.catalog_xmin {
            Some((x, _)) if x.xid().precedes(oldest_xmin) => x.xid(),
            _ => oldest_xmin,
        }
    }

    /// The horizon for a relation (catalog or not, see [`Self::catalog_oldest_xmin`]) and, when
    /// a prepared transaction or a replication slot is what holds it there, which.
    pub fn oldest_xmin_with_holder(&self, catalog: bool) -> (Xid, Option<HorizonHolder>) {
        let procs = self.procs.lock();
        let base = procs.horizon_without_slots();
        let mut horizon = base;
        let mut holder = None;
        let slots = &procs.slot_xmins;
        let candidates = [(&slots.xmin, false), (if catalog { &slots.catalog_xmin } else { &None }, true)];
        for (slot, is_catalog) in candidates {
            if let Some((x, name)) = slot {
                if *x < horizon {
                    horizon = *x;
                    holder =
                        Some(HorizonHolder::ReplicationSlot { name: name.clone(), xid: x.xid(), catalog: is_catalog });
                }
            }
        }
        if holder.is_none() {
            holder = procs
                .prepared
                .iter()
                .next()
                .filter(|(&x, _)| x == base)
                .map(|(&x, e)| HorizonHolder::PreparedXact { gid: e.state.gid.clone(), xid: x.xid() });
        }
        (horizon.xid(), holder)
    }
}
