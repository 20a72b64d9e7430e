//! Structure verification (PostgreSQL's `amcheck` `bt_index_check`, for a quiescent index).
//!
//! Walks every level from its leftmost page along the right links and checks: each page's
//! level and flags; items strictly ascending by (key, TID) within the page; every item below
//! the high key; the first item of a page above the previous page's last item and at or above
//! its high key; `prev` links that mirror `next` links; every downlink pointing to a live page
//! one level down whose items are at or above the separator and whose high key equals the next
//! separator (or the parent's high key for the last downlink); leaf keys that decode.
//!
//! LP_DEAD entries are checked like the others (order, bounds, decodable keys) but are *not*
//! among the returned entries: they are hints that the entry is dead, so a live row whose only
//! entry was killed shows up in the database check as a row without an index entry.

use std::cmp::Ordering;

use super::keys;
use super::page::{self as bp, P_HIKEY, P_NONE};
use super::search::{cmp_item, Target};
use super::BtreeIndex;
use crate::error::Result;
use crate::heap::HeapEnv;
use crate::index::IndexEntry;
use crate::types::{OffsetNumber, Tid};

type Key = (Vec<u8>, Option<Tid>);

fn cmp_keys(a: &Key, b: &Key) -> Ordering {
    // from_bound maps a missing TID to minus infinity, as pivots without one mean.
    cmp_item(&a.0, a.1, &Target::from_bound(&b.0, b.1))
}

/// One problem per string (empty: clean), and every leaf entry in key order.
pub fn check(ix: &BtreeIndex, env: &HeapEnv<'_>) -> Result<(Vec<String>, Vec<IndexEntry>)> {
    let mut problems = Vec::new();
    let mut entries = Vec::new();
    let meta = ix.meta(env)?;
    if meta.root == P_NONE {
        return Ok((problems, entries));
    }
    {
        let r = ix.read_page(env, meta.root)?;
        if bp::level(&r.g.0) != meta.level || bp::flags(&r.g.0) & bp::BTP_ROOT == 0 || !bp::is_rightmost(&r.g.0) {
            problems.push(format!("root block {} does not look like the root of level {}", meta.root, meta.level));
        }
    }
    for level in (0..=meta.level).rev() {
        let start = super::insert::leftmost_at_level(ix, env, level)?;
        check_level(ix, env, level, start, &mut problems, &mut entries)?;
    }
    Ok((problems, entries))
}

fn check_level(
    ix: &BtreeIndex,
    env: &HeapEnv<'_>,
    level: u32,
    start: u32,
    problems: &mut Vec<String>,
    entries: &mut Vec<IndexEntry>,
) -> Result<()> {
    let (mut block, mut prev_block) = (start, P_NONE);
    let mut last: Option<Key> = None;
    let mut prev_hk: Option<Key> = None;
    let mut seen = 0u32;
    while block != P_NONE {
        seen += 1;
        if seen > ix.num_pages(env)? {
            problems.push(format!("level {level}: right links form a cycle"));
            return Ok(());
        }
        let r = ix.read_page(env, block)?;
        let p = &r.g.0;
        let mut problem = |s: String| problems.push(format!("block {block}: {s}"));
        if bp::is_ignored(p) {
            problem("deleted or half-dead page is still linked".into());
        }
        if bp::level(p) != level {
            problem(format!("level {} but reached at level {level}", bp::level(p)));
        }
        if bp::prev(p) != prev_block {
            problem(format!("prev link {} but left sibling is {prev_block}", bp::prev(p)));
        }
        let hk: Option<Key> = (!bp::is_rightmost(p)).then(|| bp::item_key(p, P_HIKEY)).map(|(k, t)| (k.to_vec(), t));
        let first = bp::first_data_offset(p).0;
        for o in first..=bp::max_offset(p) {
            let (k, t) = bp::item_key(p, OffsetNumber(o));
            let cur: Key = (k.to_vec(), t);
            let minus_inf = level > 0 && o == first;
            if !minus_inf {
                if let Some(l) = &last {
                    if cmp_keys(l, &cur) != Ordering::Less {
                        problem(format!("item {o} is not above the item before it"));
                    }
                }
                if o == first {
                    if let Some(h) = &prev_hk {
                        if cmp_keys(&cur, h) == Ordering::Less {
                            problem(format!("first item {o} is below the left sibling's high key"));
                        }
                    }
                }
                if let Some(h) = &hk {
                    if cmp_keys(&cur, h) != Ordering::Less {
                        problem(format!("item {o} is not below the high key"));
                    }
                }
                last = Some(cur.clone());
            }
            if level == 0 {
                match keys::decode(&ix.key_types, k) {
                    Ok(_) if bp::is_dead(p, OffsetNumber(o)) => {}
                    Ok(key) => entries.push(IndexEntry { key, tid: t.unwrap_or(Tid::INVALID) }),
                    Err(e) => problem(format!("item {o}: undecodable key: {e}")),
                }
            } else {
                let next_sep: Option<Key> = if o < bp::max_offset(p) {
                    let (k, t) = bp::item_key(p, OffsetNumber(o + 1));
                    Some((k.to_vec(), t))
                } else {
                    hk.clone()
                };
                let sep = (!minus_inf).then(|| cur.clone());
                check_downlink(ix, env, bp::child(bp::item(p, OffsetNumber(o))), level, sep, next_sep, &mut problem)?;
            }
        }
        prev_hk = hk;
        prev_block = block;
        block = bp::next(p);
    }
    Ok(())
}

fn check_downlink(
    ix: &BtreeIndex,
    env: &HeapEnv<'_>,
    child: u32,
    level: u32,
    sep: Option<Key>,
    next_sep: Option<Key>,
    problem: &mut dyn FnMut(String),
) -> Result<()> {
    if child == P_NONE || child >= ix.num_pages(env)? {
        problem(format!("downlink to block {child} outside the index"));
        return Ok(());
    }
    let r = ix.read_page(env, child)?;
    let c = &r.g.0;
    if bp::is_ignored(c) || bp::level(c) + 1 != level {
        problem(format!("downlink to block {child} which is deleted or at level {}", bp::level(c)));
        return Ok(());
    }
    let first = bp::first_data_offset(c).0;
    let child_is_internal = bp::level(c) > 0;
    let first_cmp = if child_is_internal { first + 1 } else { first };
    if let Some(s) = &sep {
        if first_cmp <= bp::max_offset(c) {
            let (k, t) = bp::item_key(c, OffsetNumber(first_cmp));
            if cmp_keys(&(k.to_vec(), t), s) == Ordering::Less {
                problem(format!("child {child}'s first key is below its separator"));
            }
        }
    }
    let child_hk: Option<Key> = (!bp::is_rightmost(c)).then(|| bp::item_key(c, P_HIKEY)).map(|(k, t)| (k.to_vec(), t));
    if child_hk != next_sep {
        problem(format!("child {child}'s high key differs from the next separator"));
    }
    Ok(())
}
