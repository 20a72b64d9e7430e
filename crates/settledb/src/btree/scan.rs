//! Range scans (PostgreSQL's `nbtsearch.c`): an iterator that copies one leaf page's matching
//! entries at a time under the page's shared lock, then releases it.
//!
//! * Forward: the first leaf is found by a descent for the lower bound; each page's `next`
//!   link is read under the same lock as its entries. A split of the page after we copied it
//!   only moves entries we already have to the new right sibling, so following the saved
//!   link neither loses nor repeats anything. A deleted page is stepped over (its `next`).
//! * Backward: remembers the lower bound of the key range already covered and searches again
//!   for the predecessor of that bound (a descent that takes the last separator *below* it and
//!   moves right only past high keys *below* it). The covered ranges are contiguous and
//!   disjoint, so an entry present throughout the scan is returned exactly once.
//!
//! Entries marked LP_DEAD ([`super::kill`]) are skipped in both directions: their heap chains
//! are dead to every snapshot.

use std::cmp::Ordering;
use std::collections::VecDeque;

use super::page::{self as bp, P_HIKEY, P_NONE};
use super::search::{cmp_item, cmp_off, leaf_lower_bound, LowBound, Target, TidPos};
use super::{keys, BtreeIndex};
use crate::error::{Error, Result};
use crate::heap::HeapEnv;
use crate::index::{IndexEntry, KeyBound, ScanDirection};
use crate::types::{BlockNumber, OffsetNumber, Tid};

enum State {
    Start,
    Forward(u32),
    Backward(Target),
    Done,
}

/// A running range scan; see the module doc.
pub struct BtreeScan<'a> {
    ix: &'a BtreeIndex,
    env: crate::heap::HeapEnv<'a>,
    /// Entries `>=` this (forward start; backward stop). `None`: unbounded.
    lo: Option<Target>,
    /// Entries `<` this (forward stop; backward start). `None`: unbounded.
    hi: Option<Target>,
    dir: ScanDirection,
    state: State,
    ready: VecDeque<(Vec<u8>, Tid, u32)>,
}

impl<'a> BtreeScan<'a> {
    pub(crate) fn new(
        ix: &'a BtreeIndex,
        env: &HeapEnv<'a>,
        lo: KeyBound,
        hi: KeyBound,
        dir: ScanDirection,
    ) -> Result<BtreeScan<'a>> {
        let enc = |vals: &[crate::heap::tuple::Value]| {
            if vals.len() > ix.key_types.len() {
                return Err(Error::invalid(format!(
                    "scan bound has {} columns, index has {}",
                    vals.len(),
                    ix.key_types.len()
                )));
            }
            keys::encode(&ix.key_types, vals).map_err(Error::invalid)
        };
        let lo = match lo {
            KeyBound::Unbounded => None,
            KeyBound::Included(v) => Some(Target::new(enc(&v)?, TidPos::MinusInf)),
            KeyBound::Excluded(v) => Some(Target::new(enc(&v)?, TidPos::PlusInf)),
        };
        let hi = match hi {
            KeyBound::Unbounded => None,
            KeyBound::Included(v) => Some(Target::new(enc(&v)?, TidPos::PlusInf)),
            KeyBound::Excluded(v) => Some(Target::new(enc(&v)?, TidPos::MinusInf)),
        };
        let env = HeapEnv { pool: env.pool, wal: env.wal, xact: env.xact };
        Ok(BtreeScan { ix, env, lo, hi, dir, state: State::Start, ready: VecDeque::new() })
    }

    fn below_hi(&self, key: &[u8], tid: Option<Tid>) -> bool {
        self.hi.as_ref().is_none_or(|h| cmp_item(key, tid, h) == Ordering::Less)
    }

    fn at_or_above_lo(&self, key: &[u8], tid: Option<Tid>) -> bool {
        self.lo.as_ref().is_none_or(|l| cmp_item(key, tid, l) != Ordering::Less)
    }

    /// Copies the next page's worth of entries into `ready`; false when the scan is over.
    fn step(&mut self) -> Result<bool> {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Done => Ok(false),
            State::Start => {
                let ix = self.ix;
                match self.dir {
                    ScanDirection::Forward => {
                        let t = self.lo.clone().unwrap_or_else(|| Target::new(Vec::new(), TidPos::MinusInf));
                        let Some(d) = ix.find_leaf(&self.env, &t, false)? else { return Ok(false) };
                        let mut low = d.low;
                        let pg = ix.lock_leaf_read(&self.env, d.leaf, &t, false, &mut low)?;
                        let from = leaf_lower_bound(&pg.g.0, &t);
                        self.forward_page(&pg.g.0, pg.buf.block().0, from);
                    }
                    ScanDirection::Backward => {
                        self.state = State::Backward(self.hi.clone().unwrap_or_else(Target::infinity));
                    }
                }
                Ok(true)
            }
            State::Forward(block) => {
                let pg = self.ix.read_page(&self.env, block)?;
                if bp::is_ignored(&pg.g.0) {
                    self.state = match bp::next(&pg.g.0) {
                        P_NONE => State::Done,
                        n => State::Forward(n),
                    };
                } else if !bp::is_leaf(&pg.g.0) {
                    return Err(self.ix.corrupt(block, "scan followed a right link to a non-leaf page"));
                } else {
                    self.forward_page(&pg.g.0, block, bp::first_data_offset(&pg.g.0));
                }
                Ok(true)
            }
            State::Backward(before) => {
                self.backward_step(before)?;
                Ok(true)
            }
        }
    }

    /// Takes the entries of a locked leaf from `from` on, up to the upper bound.
    fn forward_page(&mut self, p: &[u8], block: u32, from: OffsetNumber) {
        for o in from.0..=bp::max_offset(p) {
            let (k, tid) = bp::leaf_key(bp::item(p, OffsetNumber(o)));
            if !self.below_hi(k, Some(tid)) {
                return; // state stays Done
            }
            if !bp::is_dead(p, OffsetNumber(o)) {
                self.ready.push_back((k.to_vec(), tid, block));
            }
        }
        let beyond = !bp::is_rightmost(p) && self.hi.as_ref().is_some_and(|h| cmp_off(p, P_HIKEY, h) != Ordering::Less);
        if !beyond && bp::next(p) != P_NONE {
            self.state = State::Forward(bp::next(p));
        }
    }

    /// Takes the entries just below `before` from the leaf that holds them, and remembers
    /// that leaf's lower bound as the next `before`.
    fn backward_step(&mut self, before: Target) -> Result<()> {
        let ix = self.ix;
        let Some(d) = ix.find_leaf(&self.env, &before, true)? else { return Ok(()) };
        let mut low: LowBound = d.low;
        let pg = ix.lock_leaf_read(&self.env, d.leaf, &before, true, &mut low)?;
        let p = &pg.g.0;
        let block = pg.buf.block().0;
        let end = leaf_lower_bound(p, &before).0;
        let first = bp::first_data_offset(p).0;
        for o in (first..end).rev() {
            let (k, tid) = bp::leaf_key(bp::item(p, OffsetNumber(o)));
            if !self.at_or_above_lo(k, Some(tid)) {
                return Ok(()); // state stays Done
            }
            if !bp::is_dead(p, OffsetNumber(o)) {
                self.ready.push_back((k.to_vec(), tid, block));
            }
        }
        if let Some((k, tid)) = low {
            if self.lo.as_ref().is_none_or(|l| cmp_item(&k, tid, l) == Ordering::Greater) {
                self.state = State::Backward(Target::from_bound(&k, tid));
            }
        }
        Ok(())
    }
}

impl Iterator for BtreeScan<'_> {
    type Item = Result<IndexEntry>;

    fn next(&mut self) -> Option<Result<IndexEntry>> {
        loop {
            if let Some((k, tid, block)) = self.ready.pop_front() {
                return Some(keys::decode(&self.ix.key_types, &k).map(|key| IndexEntry { key, tid }).map_err(|d| {
                    Error::corrupted(self.ix.relfilenode, BlockNumber(block), format!("index key: {d}"))
                }));
            }
            match self.step() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    self.state = State::Done;
                    return Some(Err(e));
                }
            }
        }
    }
}
