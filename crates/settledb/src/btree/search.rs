//! Searching: the comparison of an item with a search target, binary search within a page,
//! and the Lehman & Yao descent (one lock at a time, moving right past high keys).

use std::cmp::Ordering;

use super::page::{self as bp, P_HIKEY, P_NONE};
use super::{BtreeIndex, RPage, WPage};
use crate::error::{Error, Result};
use crate::heap::HeapEnv;
use crate::types::{OffsetNumber, Tid};

/// Where a target sits among the entries that share its key bytes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TidPos {
    /// Before every entry whose key starts with `key` (and equal to a pivot without TID).
    MinusInf,
    /// Exactly this (key, TID).
    At(Tid),
    /// After every entry whose key starts with `key`.
    PlusInf,
}

/// A position in the key space: `key` may be a prefix (fewer columns than the index).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Target {
    pub key: Vec<u8>,
    pub tid: TidPos,
    /// Greater than every entry (a backward scan with no upper bound).
    pub infinity: bool,
}

/// A lower bound of a page's key range: `None` is minus infinity.
pub(crate) type LowBound = Option<(Vec<u8>, Option<Tid>)>;

impl Target {
    pub fn new(key: Vec<u8>, tid: TidPos) -> Target {
        Target { key, tid, infinity: false }
    }
    pub fn infinity() -> Target {
        Target { key: Vec::new(), tid: TidPos::PlusInf, infinity: true }
    }
    /// The target "just before `bound`" for a predecessor search.
    pub fn from_bound(key: &[u8], tid: Option<Tid>) -> Target {
        Target::new(key.to_vec(), tid.map_or(TidPos::MinusInf, TidPos::At))
    }
}

/// Compares an item (key bytes, heap TID or none for a pivot without one) with a target.
pub(crate) fn cmp_item(key: &[u8], tid: Option<Tid>, t: &Target) -> Ordering {
    if t.infinity {
        return Ordering::Less;
    }
    match t.tid {
        TidPos::PlusInf => {
            let n = key.len().min(t.key.len());
            match key[..n].cmp(&t.key[..n]) {
                Ordering::Equal if key.len() < t.key.len() => Ordering::Less,
                Ordering::Equal => Ordering::Less,
                o => o,
            }
        }
        TidPos::MinusInf => match key.cmp(&t.key) {
            Ordering::Equal if tid.is_none() => Ordering::Equal,
            Ordering::Equal => Ordering::Greater,
            o => o,
        },
        TidPos::At(at) => match key.cmp(&t.key) {
            Ordering::Equal => tid.cmp(&Some(at)),
            o => o,
        },
    }
}

/// Compares item `off` of page `p` with `t`.
pub(crate) fn cmp_off(p: &[u8], off: OffsetNumber, t: &Target) -> Ordering {
    let (k, tid) = bp::item_key(p, off);
    cmp_item(k, tid, t)
}

/// Whether a search for `t` must move right of page `p` (L&Y): the target is at or beyond
/// the high key (`strict`: beyond it; a predecessor search wants entries *below* `t`).
pub(crate) fn must_move_right(p: &[u8], t: &Target, strict: bool) -> bool {
    if bp::is_rightmost(p) {
        return false;
    }
    let c = cmp_off(p, P_HIKEY, t);
    if strict {
        c == Ordering::Less
    } else {
        c != Ordering::Greater
    }
}

/// First data offset whose item is `>= t` (may be `max_offset + 1`).
pub(crate) fn leaf_lower_bound(p: &[u8], t: &Target) -> OffsetNumber {
    let (mut lo, mut hi) = (bp::first_data_offset(p).0, bp::max_offset(p) + 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if cmp_off(p, OffsetNumber(mid), t) == Ordering::Less {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    OffsetNumber(lo)
}

/// On an internal page: the last item whose separator is `<= t` (`strict`: `< t`); the first
/// data item is minus infinity and always qualifies.
pub(crate) fn choose_child(p: &[u8], t: &Target, strict: bool) -> OffsetNumber {
    let first = bp::first_data_offset(p).0;
    let (mut lo, mut hi) = (first + 1, bp::max_offset(p) + 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let c = cmp_off(p, OffsetNumber(mid), t);
        let ok = if strict { c == Ordering::Less } else { c != Ordering::Greater };
        if ok {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    OffsetNumber(lo - 1)
}

/// What a descent found: the parent blocks visited (root first), the leaf to lock, and the
/// lower bound of the key range the leaf was reached by.
pub(crate) struct Descent {
    pub stack: Vec<u32>,
    pub leaf: u32,
    pub low: LowBound,
}

impl BtreeIndex {
    /// Walks from the root to the leaf level for `t`, holding one shared lock at a time and
    /// moving right wherever a concurrent split moved the key range. `None`: no root yet.
    pub(crate) fn find_leaf(&self, env: &HeapEnv<'_>, t: &Target, strict: bool) -> Result<Option<Descent>> {
        let meta = self.meta(env)?;
        if meta.root == P_NONE {
            return Ok(None);
        }
        let mut block = meta.root;
        let mut stack = Vec::new();
        let mut low: LowBound = None;
        loop {
            let pg = self.read_page(env, block)?;
            let p = &pg.g.0;
            if bp::is_leaf(p) {
                return Ok(Some(Descent { stack, leaf: block, low }));
            }
            if bp::is_ignored(p) || must_move_right(p, t, strict) {
                if !bp::is_ignored(p) {
                    low = Some(hikey_bound(p));
                }
                block = self.right_link(p, block)?;
                continue;
            }
            let off = choose_child(p, t, strict);
            if off != bp::first_data_offset(p) {
                let (k, tid) = bp::item_key(p, off);
                low = Some((k.to_vec(), tid));
            }
            let child = bp::child(bp::item(p, off));
            stack.push(block);
            if bp::level(p) == 1 {
                return Ok(Some(Descent { stack, leaf: child, low }));
            }
            block = child;
        }
    }

    /// The right sibling of `block`, an error when there is none.
    pub(crate) fn right_link(&self, p: &[u8], block: u32) -> Result<u32> {
        match bp::next(p) {
            P_NONE => Err(Error::corrupted(
                self.relfilenode,
                crate::types::BlockNumber(block),
                "search ran off the right end of a level",
            )),
            n => Ok(n),
        }
    }

    /// Share-locks the leaf for `t` starting at `block`, moving right as needed; updates `low`.
    pub(crate) fn lock_leaf_read<'a>(
        &self,
        env: &HeapEnv<'a>,
        mut block: u32,
        t: &Target,
        strict: bool,
        low: &mut LowBound,
    ) -> Result<RPage<'a>> {
        loop {
            let pg = self.read_page(env, block)?;
            let p = &pg.g.0;
            // Leaves are the pages of a lookup least likely to be in cache (see prefetch_used).
            crate::page::prefetch_used(p);
            if !bp::is_ignored(p) && !bp::is_leaf(p) {
                return Err(self.corrupt(block, "expected a leaf page"));
            }
            if bp::is_ignored(p) {
                block = self.right_link(p, block)?;
            } else if must_move_right(p, t, strict) {
                *low = Some(hikey_bound(p));
                block = self.right_link(p, block)?;
            } else {
                return Ok(pg);
            }
        }
    }

    /// Exclusively locks the leaf for `t` starting at `block`, moving right with lock coupling
    /// (the right page is locked before the left is released).
    pub(crate) fn lock_leaf_write<'a>(&self, env: &HeapEnv<'a>, block: u32, t: &Target) -> Result<WPage<'a>> {
        let pg = self.write_page(env, block)?;
        self.step_right_write(env, pg, t)
    }

    /// Moves an exclusively locked leaf position right until `t` belongs on the page.
    pub(crate) fn step_right_write<'a>(&self, env: &HeapEnv<'a>, mut pg: WPage<'a>, t: &Target) -> Result<WPage<'a>> {
        loop {
            let p = &pg.g.0;
            let block = pg.buf.block().0;
            if !bp::is_ignored(p) && !bp::is_leaf(p) {
                return Err(self.corrupt(block, "expected a leaf page"));
            }
            if !bp::is_ignored(p) && !must_move_right(p, t, false) {
                return Ok(pg);
            }
            let next = self.right_link(p, block)?;
            pg = self.write_page(env, next)?;
        }
    }
}

/// The high key of `p` as a lower bound for its right sibling.
pub(crate) fn hikey_bound(p: &[u8]) -> (Vec<u8>, Option<Tid>) {
    let (k, tid) = bp::item_key(p, P_HIKEY);
    (k.to_vec(), tid)
}
