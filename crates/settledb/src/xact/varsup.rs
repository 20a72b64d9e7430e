//! XID wraparound limits (PostgreSQL's `varsup.c`, `SetTransactionIdLimit`) and 64-bit XID
//! arithmetic for the XID burner.
//!
//! From the database's oldest frozen XID `oldest` (the minimum relfrozenxid):
//!
//! ```text
//!   wrap_limit = oldest + (2^31 - 1)          past it, old XIDs would look like future ones
//!   stop_limit = wrap_limit -  3,000,000      assign_xid refuses (Error::WraparoundStop)
//!   warn_limit = wrap_limit - 40,000,000      assign_xid warns "must be vacuumed within N"
//!   vac_limit  = oldest + autovacuum_freeze_max_age   anti-wraparound autovacuum is due
//! ```
//!
//! All additions are modulo 2^32; a result that lands on a special XID (0, 1, 2) is moved
//! past them in the direction of travel, as PostgreSQL does.

use crate::types::{FullXid, Xid};

/// Distance from the oldest frozen XID to the point where XIDs would wrap (`MaxTransactionId >> 1`).
pub const WRAP_DISTANCE: u32 = (1u32 << 31) - 1;
/// XIDs kept in reserve below the wrap limit after which new XIDs are refused.
pub const STOP_MARGIN: u32 = 3_000_000;
/// XIDs below the wrap limit where the warnings start.
pub const WARN_MARGIN: u32 = 40_000_000;
/// The hint of the wraparound warning, word for word PostgreSQL's (`varsup.c`).
pub const WARNING_HINT: &str = "To avoid XID assignment failures, execute a database-wide VACUUM in that database.\n\
     You might also need to commit or roll back old prepared transactions, or drop stale replication slots.";
/// The hint of the stop-limit error (defined with the error, [`crate::error::Error::WraparoundStop`]).
pub use crate::error::STOP_HINT;
/// PostgreSQL's default `autovacuum_freeze_max_age`.
pub const DEFAULT_AUTOVACUUM_FREEZE_MAX_AGE: u32 = 200_000_000;

/// The wraparound limits derived from the oldest frozen XID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XidLimits {
    /// The database's oldest frozen XID the limits were computed from.
    pub oldest_xid: Xid,
    pub vac_limit: Xid,
    pub warn_limit: Xid,
    pub stop_limit: Xid,
    pub wrap_limit: Xid,
}

impl XidLimits {
    /// Computes the limits (`SetTransactionIdLimit`).
    pub fn compute(oldest_xid: Xid, autovacuum_freeze_max_age: u32) -> XidLimits {
        let first = Xid::FIRST_NORMAL.0;
        let forward = |v: u32| if v < first { v.wrapping_add(first) } else { v };
        let backward = |v: u32| if v < first { v.wrapping_sub(first) } else { v };
        let wrap = forward(oldest_xid.0.wrapping_add(WRAP_DISTANCE));
        XidLimits {
            oldest_xid,
            vac_limit: Xid(forward(oldest_xid.0.wrapping_add(autovacuum_freeze_max_age))),
            warn_limit: Xid(backward(wrap.wrapping_sub(WARN_MARGIN))),
            stop_limit: Xid(backward(wrap.wrapping_sub(STOP_MARGIN))),
            wrap_limit: Xid(wrap),
        }
    }

    /// XIDs left before the wrap limit when `next` is the next XID to assign.
    pub fn xids_until_wrap(&self, next: Xid) -> u32 {
        self.wrap_limit.0.wrapping_sub(next.0)
    }

    /// The warning PostgreSQL prints past the warn limit, with its hint (`varsup.c`,
    /// `GetNewTransactionId`, PostgreSQL 16+ wording; the caller appends the oldest prepared
    /// transaction when there is one).
    pub fn warning(&self, next: Xid) -> String {
        format!(
            "database must be vacuumed within {} transactions (oldest frozen XID {}); \
             HINT: {WARNING_HINT}",
            self.xids_until_wrap(next),
            self.oldest_xid
        )
    }
}

/// `xid` advanced by `n` normal XIDs, skipping 0..=2 at every epoch boundary. Runs in time
/// proportional to the epochs crossed, not to `n`.
pub fn advance(xid: FullXid, n: u64) -> FullXid {
    let mut cur = xid;
    let mut left = n;
    if !cur.xid().is_normal() {
        cur = FullXid::new(cur.epoch(), Xid::FIRST_NORMAL);
    }
    while left > 0 {
        let room = (1u64 << 32) - u64::from(cur.xid().0);
        if left < room {
            return FullXid(cur.0 + left);
        }
        left -= room;
        cur = FullXid::new(cur.epoch().wrapping_add(1), Xid::FIRST_NORMAL);
    }
    cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_follow_set_transaction_id_limit() {
        let l = XidLimits::compute(Xid(3), DEFAULT_AUTOVACUUM_FREEZE_MAX_AGE);
        assert_eq!(l.wrap_limit, Xid(3 + WRAP_DISTANCE));
        assert_eq!(l.stop_limit, Xid(3 + WRAP_DISTANCE - STOP_MARGIN));
        assert_eq!(l.warn_limit, Xid(3 + WRAP_DISTANCE - WARN_MARGIN));
        assert_eq!(l.vac_limit, Xid(200_000_003));
        // Oldest near the top of the space: the wrap limit lands past the special XIDs.
        let l = XidLimits::compute(Xid((1 << 31) + 1), 100);
        assert_eq!(l.wrap_limit, Xid(3), "0 is skipped forward to 3");
        assert_eq!(l.stop_limit, Xid(3u32.wrapping_sub(STOP_MARGIN)));
        // A stop limit landing on a special XID moves backwards past them.
        let l = XidLimits::compute(Xid(STOP_MARGIN.wrapping_sub(WRAP_DISTANCE).wrapping_add(1)), 100);
        assert!(l.stop_limit.is_normal(), "stop limit {}", l.stop_limit);
    }

    #[test]
    fn advance_skips_special_xids() {
        let start = FullXid::new(0, Xid(u32::MAX - 1));
        assert_eq!(advance(start, 1), FullXid::new(0, Xid(u32::MAX)));
        assert_eq!(advance(start, 2), FullXid::new(1, Xid(3)));
        assert_eq!(advance(start, 3), FullXid::new(1, Xid(4)));
        let mut step = start;
        for _ in 0..3 {
            step = step.next();
        }
        assert_eq!(advance(start, 3), step, "agrees with FullXid::next");
        assert_eq!(advance(FullXid::new(0, Xid(3)), 3 * ((1u64 << 32) - 3)), FullXid::new(3, Xid(3)));
    }
}
