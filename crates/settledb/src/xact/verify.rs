//! Consistency of the transaction state kept beside the CLOG, for `check`: the
//! subtransaction parent map against the CLOG and the proc array, and the prepared
//! transactions against both.
//!
//! For every link `xid → parent` held in `pg_subtrans`:
//!
//! * the parent precedes its child (it was assigned first);
//! * a subtransaction the CLOG calls committed has a committed parent (resolved statuses:
//!   the sub-committed state is never what a reader is answered);
//! * nothing older than the oldest running XID is still sub-committed in the CLOG: a commit
//!   resolves its sub-committed marks before its XIDs leave the running set;
//! * a running subtransaction's top-level transaction, found by walking the map, is the one
//!   the proc array files it under.
//!
//! For every prepared transaction: the CLOG still says in progress for it and its
//! subtransactions, all of them run, and the map leads each subtransaction to it.

use super::{TransactionManager, XidStatus};
use crate::error::Result;
use crate::types::Xid;

impl TransactionManager {
    /// The problems found (see the module doc); an error only when the CLOG cannot be read.
    pub fn verify(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let oldest_running = {
            let procs = self.procs.lock();
            procs.oldest_running().xid()
        };
        let mut links = self.subtrans.links();
        links.sort_by_key(|l| l.0 .0);
        for (xid, parent) in links {
            if !parent.precedes(xid) {
                out.push(format!("pg_subtrans: parent {parent} of subtransaction {xid} does not precede it"));
                continue;
            }
            let (st, pst) = (self.status(xid)?, self.status(parent)?);
            if st == XidStatus::Committed && pst != XidStatus::Committed {
                out.push(format!("subtransaction {xid} is committed but its parent {parent} is {pst:?}"));
            }
            if xid.precedes(oldest_running) && self.clog.status(xid)? == XidStatus::SubCommitted {
                out.push(format!(
                    "subtransaction {xid} is still sub-committed in the CLOG, older than the oldest running \
                     XID {oldest_running} (its parent {parent} is {pst:?})"
                ));
            }
            if self.is_running(xid) {
                let (filed, walked) = (self.top_level_of(xid), self.subtrans.topmost(xid));
                if filed != walked {
                    out.push(format!(
                        "running subtransaction {xid}: the proc array files it under {filed}, pg_subtrans leads to \
                         {walked}"
                    ));
                }
            }
        }
        for p in self.prepared_xacts() {
            let xid = p.xid.xid();
            let subs: Vec<Xid> = {
                let procs = self.procs.lock();
                procs.prepared.get(&p.xid).map(|e| e.state.subxids.clone()).unwrap_or_default()
            };
            for x in std::iter::once(xid).chain(subs.iter().copied()) {
                let raw = self.clog.status(x)?;
                if raw != XidStatus::InProgress {
                    out.push(format!("prepared transaction \"{}\": XID {x} is {raw:?} in the CLOG", p.gid));
                }
                if !self.is_running(x) {
                    out.push(format!("prepared transaction \"{}\": XID {x} is not running", p.gid));
                }
                if x != xid && self.subtrans.topmost(x) != xid {
                    out.push(format!(
                        "prepared transaction \"{}\": pg_subtrans leads its subtransaction {x} to {}",
                        p.gid,
                        self.subtrans.topmost(x)
                    ));
                }
            }
        }
        Ok(out)
    }
}
