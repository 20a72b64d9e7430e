//! Hint bits (PostgreSQL's `SetHintBits` and `MarkBufferDirtyHint`, simplified).
//!
//! `XMIN_COMMITTED`, `XMIN_INVALID`, `XMAX_COMMITTED` and `XMAX_INVALID` cache in the tuple
//! header what CLOG says about its inserter and deleter, so later readers need not ask. They
//! are only ever *added*, and only when the answer can no longer change:
//!
//! * a commit hint waits until the WAL holding that commit record is flushed (asynchronous
//!   commit: a crash could otherwise lose the commit while the hint survives on disk);
//! * an abort hint is always safe (an XID that is not running and not committed never will be).
//!
//! Rust will not let us write a page under a shared lock, so hints are set by code that holds
//! the exclusive lock anyway (updates, deletes, pruning) or that gets it without waiting (a
//! scan tries; if the page is busy it simply reads CLOG).
//!
//! A hint alone does not WAL-log the page. A page whose last change precedes the current
//! checkpoint's redo pointer has no full-page image in the WAL to repair a torn write, so a
//! hint-only change there is *not* marked dirty (the hint is kept in memory and reaches disk
//! with the page's next logged change); a page changed since the redo pointer is marked dirty,
//! since replay would restore it from its image (`Buffer::hints_added` does both, and the
//! buffer remembers that memory then differs from the file). A page waiting to be written with
//! VACUUM's imageless all-visible change takes no hints at all (`Buffer::may_add_hints`).
//! PostgreSQL instead logs a hint full-page image when checksums are on; ours costs no WAL and
//! loses at most a hint.

use super::tuple::{
    self, TupleHeader, HEAP_XMAX_COMMITTED, HEAP_XMAX_INVALID, HEAP_XMAX_LOCK_ONLY, HEAP_XMIN_COMMITTED,
    HEAP_XMIN_INVALID,
};
use crate::error::Result;
use crate::page::{self, LpFlags};
use crate::types::{Lsn, OffsetNumber, Xid};
use crate::xact::{TransactionManager, XidStatus};

/// The hint a finished transaction earns, if it can be set now.
fn final_status(xact: &TransactionManager, xid: Xid, flushed: Lsn) -> Result<Option<bool>> {
    if !xid.is_normal() || xact.is_running(xid) {
        return Ok(None);
    }
    Ok(match xact.status(xid)? {
        XidStatus::Committed if xact.commit_lsn_bound(xid) <= flushed => Some(true),
        XidStatus::Committed => None,
        XidStatus::Aborted => Some(false),
        _ => None,
    })
}

/// Sets every hint bit that can be set on the page. Returns whether anything changed.
pub fn set_page_hints(page_bytes: &mut [u8], xact: &TransactionManager, flushed: Lsn) -> Result<bool> {
    let mut changed = false;
    // Tuples next to each other usually share their inserter (a bulk load, one transaction's
    // rows): remember the last answer instead of asking the proc array and CLOG again.
    let mut memo: Option<(Xid, Option<bool>)> = None;
    let mut final_status = |xid: Xid| -> Result<Option<bool>> {
        if let Some((x, st)) = memo {
            if x == xid {
                return Ok(st);
            }
        }
        let st = final_status(xact, xid, flushed)?;
        memo = Some((xid, st));
        Ok(st)
    };
    for o in 1..=page::max_offset(page_bytes) {
        let off = OffsetNumber(o);
        if page::item_id(page_bytes, off).flags != LpFlags::Normal {
            continue;
        }
        let Some(h) = TupleHeader::parse(page::item(page_bytes, off)) else { continue };
        let m = h.infomask();
        let mut add = 0u16;
        if m & (HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID) == 0 {
            match final_status(h.xmin())? {
                Some(true) => add |= HEAP_XMIN_COMMITTED,
                Some(false) => add |= HEAP_XMIN_INVALID,
                None => {}
            }
        }
        let xmax_open = m & (HEAP_XMAX_COMMITTED | HEAP_XMAX_INVALID) == 0 && m & HEAP_XMAX_LOCK_ONLY == 0;
        if xmax_open && h.xmax().is_valid() {
            match final_status(h.xmax())? {
                Some(true) => add |= HEAP_XMAX_COMMITTED,
                Some(false) => add |= HEAP_XMAX_INVALID,
                None => {}
            }
        }
        if add != 0 {
            tuple::set_infomask(page::item_mut(page_bytes, off), m | add);
            changed = true;
        }
    }
    Ok(changed)
}
