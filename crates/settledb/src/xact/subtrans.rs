//! `pg_subtrans`: the parent of every subtransaction XID (PostgreSQL's `subtrans.c`).
//!
//! A subtransaction gets its own XID when it first writes, always after its parent's (the
//! parent is assigned first, so a child's XID is greater). Tuples carry the subtransaction's
//! XID; whoever needs the top-level transaction behind it (a snapshot that overflowed, the
//! deadlock detector, `check`) follows the parent links here until an XID with no parent.
//!
//! ```text
//!   xid ──► page   = xid / 2048             (8 KB page of 2048 four-byte parent XIDs)
//!           slot   = xid % 2048             0 = no parent (a top-level XID, or unknown)
//! ```
//!
//! # Why nothing here survives a restart
//!
//! A parent link is only consulted for an XID that some running transaction or some live
//! snapshot may still consider running: a snapshot looks one up only for an XID at or after
//! its own `xmin`, and only while that snapshot lives. After a restart no transaction from
//! before it runs and no snapshot from before it exists, so no old link can be asked for
//! (PostgreSQL's `StartupSUBTRANS` merely zeroes the pages from the oldest active XID to the
//! next XID for the same reason). The links of prepared transactions, which do survive a
//! restart, are set again when they are recovered (see [`super::twophase`]). So this map is
//! kept in memory only, with no WAL and no files: PostgreSQL writes its SLRU pages out only
//! because its buffer pool for them is small, which an in-memory map does not need.
//!
//! # Page lifecycle and truncation
//!
//! A page exists from the first subtransaction XID on it: XID assignment drops a stale page
//! of a previous epoch when it hands out the first XID of that page ([`SubTrans::extend`],
//! `ExtendSUBTRANS`), and [`SubTrans::set_parent`] creates the page on demand. Pages wholly
//! before the oldest XID any transaction may still consider running (`oldest_xmin`, which
//! includes advertised snapshot xmins, as `GetOldestTransactionIdConsideredRunning`) are
//! dropped at every checkpoint and whenever the CLOG is truncated ([`SubTrans::truncate`]);
//! that horizon is never behind the CLOG's truncation point, so the map never holds more
//! than the running window. Memory is 8 KB per 2048 XIDs of that window that hold at least
//! one subtransaction.
//!
//! # Locking
//!
//! One `parking_lot::RwLock` over the page map. Setting a parent takes it exclusively (once
//! per subtransaction XID); lookups share it (once per lookup of an overflowed snapshot).

use parking_lot::RwLock;
use rustc_hash::FxHashMap;

use crate::types::Xid;

/// Parent XIDs per page (8192 bytes / 4).
pub const SUBTRANS_XACTS_PER_PAGE: u32 = 2048;

/// The page holding `xid`'s parent.
pub fn page_of(xid: Xid) -> u32 {
    xid.0 / SUBTRANS_XACTS_PER_PAGE
}

/// Whether page `a` is older than page `b` on the XID circle (`SubTransPagePrecedes`).
pub fn page_precedes(a: u32, b: u32) -> bool {
    let first = |p: u32| Xid(p.wrapping_mul(SUBTRANS_XACTS_PER_PAGE).wrapping_add(Xid::FIRST_NORMAL.0 + 1));
    let (xa, xb) = (first(a), first(b));
    xa.precedes(xb) && xa.precedes(Xid(xb.0.wrapping_add(SUBTRANS_XACTS_PER_PAGE - 1)))
}

type Page = Box<[u32; SUBTRANS_XACTS_PER_PAGE as usize]>;

/// The subtransaction parent map.
#[derive(Default)]
pub struct SubTrans {
    pages: RwLock<FxHashMap<u32, Page>>,
}

impl SubTrans {
    pub fn new() -> SubTrans {
        SubTrans::default()
    }

    /// Called for every newly assigned XID: at the first XID of a page, a page left from the
    /// previous trip around the XID circle is dropped, so it cannot lend stale parents.
    pub fn extend(&self, xid: Xid) {
        if xid.0.is_multiple_of(SUBTRANS_XACTS_PER_PAGE) || xid == Xid::FIRST_NORMAL {
            self.pages.write().remove(&page_of(xid));
        }
    }

    /// Records that `xid`'s parent is `parent` (`SubTransSetParent`).
    pub fn set_parent(&self, xid: Xid, parent: Xid) {
        let mut pages = self.pages.write();
        let page = pages.entry(page_of(xid)).or_insert_with(|| Box::new([0; SUBTRANS_XACTS_PER_PAGE as usize]));
        page[(xid.0 % SUBTRANS_XACTS_PER_PAGE) as usize] = parent.0;
    }

    /// The parent of `xid`, or the invalid XID when it has none (a top-level XID) or when
    /// its page was truncated away (`SubTransGetParent`).
    pub fn parent(&self, xid: Xid) -> Xid {
        if !xid.is_normal() {
            return Xid::INVALID;
        }
        let pages = self.pages.read();
        pages.get(&page_of(xid)).map_or(Xid::INVALID, |p| Xid(p[(xid.0 % SUBTRANS_XACTS_PER_PAGE) as usize]))
    }

    /// The top-level transaction of `xid`: its parent's parent … up to an XID without one
    /// (`SubTransGetTopmostTransaction`). `xid` itself when it has no parent. A link that
    /// does not point to an older normal XID ends the walk (it cannot be a parent), so a
    /// damaged map cannot loop.
    pub fn topmost(&self, xid: Xid) -> Xid {
        let mut cur = xid;
        let pages = self.pages.read();
        loop {
            let parent = pages.get(&page_of(cur)).map_or(0, |p| p[(cur.0 % SUBTRANS_XACTS_PER_PAGE) as usize]);
            let parent = Xid(parent);
            if !parent.is_normal() || !parent.precedes(cur) {
                return cur;
            }
            cur = parent;
        }
    }

    /// Drops every page wholly before `oldest`'s page (`TruncateSUBTRANS`); returns how many.
    pub fn truncate(&self, oldest: Xid) -> usize {
        let cutoff = page_of(oldest);
        let mut pages = self.pages.write();
        let before = pages.len();
        pages.retain(|&p, _| !page_precedes(p, cutoff));
        before - pages.len()
    }

    /// Keeps only the pages from `oldest`'s to `next`'s (on the XID circle). The test-only XID
    /// burner calls it: skipping XIDs skips the first XID of pages, where [`Self::extend`]
    /// would have dropped a page left from the previous trip around the circle.
    pub fn keep_window(&self, oldest: Xid, next: Xid) {
        let (first, last) = (page_of(oldest), page_of(next));
        self.pages.write().retain(|&p, _| !page_precedes(p, first) && !page_precedes(last, p));
    }

    /// Every recorded `(xid, parent)` link, in no particular order (for `check`).
    pub fn links(&self) -> Vec<(Xid, Xid)> {
        let pages = self.pages.read();
        let mut out = Vec::new();
        for (&page, slots) in pages.iter() {
            for (i, &parent) in slots.iter().enumerate() {
                if parent != 0 {
                    out.push((Xid(page.wrapping_mul(SUBTRANS_XACTS_PER_PAGE).wrapping_add(i as u32)), Xid(parent)));
                }
            }
        }
        out
    }

    /// Pages held in memory.
    pub fn pages(&self) -> usize {
        self.pages.read().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_chain_to_the_top() {
        let st = SubTrans::new();
        st.set_parent(Xid(11), Xid(10));
        st.set_parent(Xid(12), Xid(11));
        st.set_parent(Xid(5000), Xid(12));
        assert_eq!(st.parent(Xid(12)), Xid(11));
        assert_eq!(st.topmost(Xid(5000)), Xid(10));
        assert_eq!(st.topmost(Xid(10)), Xid(10), "a top-level XID is its own top");
        assert_eq!(st.topmost(Xid(77)), Xid(77), "unknown XID: itself");
        assert_eq!(st.pages(), 2);
        let mut links = st.links();
        links.sort_by_key(|l| l.0 .0);
        assert_eq!(links, vec![(Xid(11), Xid(10)), (Xid(12), Xid(11)), (Xid(5000), Xid(12))]);
    }

    #[test]
    fn a_link_that_does_not_go_back_ends_the_walk() {
        let st = SubTrans::new();
        st.set_parent(Xid(20), Xid(30)); // damaged: a parent after its child
        st.set_parent(Xid(30), Xid(20));
        assert_eq!(st.topmost(Xid(20)), Xid(20));
        assert_eq!(st.topmost(Xid(30)), Xid(20));
    }

    #[test]
    fn truncate_and_extend_drop_old_pages() {
        let st = SubTrans::new();
        for p in 0..4u32 {
            st.set_parent(Xid(p * SUBTRANS_XACTS_PER_PAGE + 7), Xid(p * SUBTRANS_XACTS_PER_PAGE + 6));
        }
        assert_eq!(st.truncate(Xid(2 * SUBTRANS_XACTS_PER_PAGE + 100)), 2);
        assert_eq!(st.parent(Xid(7)), Xid::INVALID);
        assert_eq!(st.parent(Xid(2 * SUBTRANS_XACTS_PER_PAGE + 7)), Xid(2 * SUBTRANS_XACTS_PER_PAGE + 6));
        st.extend(Xid(3 * SUBTRANS_XACTS_PER_PAGE));
        assert_eq!(st.parent(Xid(3 * SUBTRANS_XACTS_PER_PAGE + 7)), Xid::INVALID, "stale page dropped");
        st.set_parent(Xid(5 * SUBTRANS_XACTS_PER_PAGE + 1), Xid(5 * SUBTRANS_XACTS_PER_PAGE));
        st.set_parent(Xid(9 * SUBTRANS_XACTS_PER_PAGE + 1), Xid(9 * SUBTRANS_XACTS_PER_PAGE));
        st.keep_window(Xid(4 * SUBTRANS_XACTS_PER_PAGE), Xid(8 * SUBTRANS_XACTS_PER_PAGE));
        assert_eq!(st.pages(), 1, "pages outside the window dropped");
        assert_eq!(st.parent(Xid(5 * SUBTRANS_XACTS_PER_PAGE + 1)), Xid(5 * SUBTRANS_XACTS_PER_PAGE));
        assert!(page_precedes(u32::MAX / SUBTRANS_XACTS_PER_PAGE, 0), "circular");
    }
}
