//! Insertion (PostgreSQL's `nbtinsert.c`): find the leaf, check uniqueness, add the entry,
//! split pages bottom-up when they are full. See the module doc of [`super`] for the locking
//! and WAL rules; the invariants here are that every page changed by one insert stays
//! exclusively locked until the one WAL record describing them is inserted, and that locks
//! are taken bottom-up and left to right. A split stamps both halves with the cycle ID of the
//! bulk delete running on the index, if any, and marks the right half SPLIT_END when the old
//! right sibling carries another ID ([`super::cycle`]).

use std::cmp::Ordering;

use super::page::{self as bp, BTP_LEAF, BTP_ROOT, BTP_SPLIT_END, MAX_ITEM_SIZE, P_HIKEY, P_NONE, USABLE};
use super::search::{cmp_item, cmp_off, leaf_lower_bound, Target, TidPos};
use super::wal::{XLOG_BTREE_INSERT_LEAF, XLOG_BTREE_NEWROOT, XLOG_BTREE_SPLIT};
use super::{keys, BtreeIndex, Meta, WPage, LEAF_FILLFACTOR};
use crate::error::{Error, Result};
use crate::heap::tuple::Value;
use crate::heap::HeapEnv;
use crate::index::{HeapTupleState, UniqueCheck};
use crate::page::{self as pg};
use crate::types::{OffsetNumber, Tid, Xid};
use crate::wal::{BlockRef, RecordBuilder, Rmgr};

enum Unique {
    Ok,
    Wait(Xid),
    Conflict,
}

/// Inserts `(key, tid)`; with `unique`, checks first that no live entry has an equal key.
///
/// `UniqueCheck::state` is called while the first leaf that can hold the key is exclusively
/// locked (that lock is what serializes two inserters of one key), so it must not touch this
/// index; `UniqueCheck::wait` is called with no lock held, and the insert then starts over.
pub fn insert(
    ix: &BtreeIndex,
    env: &HeapEnv<'_>,
    key: &[Value],
    tid: Tid,
    unique: Option<&dyn UniqueCheck>,
) -> Result<()> {
    if key.len() != ix.key_types.len() {
        return Err(Error::invalid(format!(
            "index \"{}\" has {} key columns, got {}",
            ix.name,
            ix.key_types.len(),
            key.len()
        )));
    }
    let enc = keys::encode(&ix.key_types, key).map_err(Error::invalid)?;
    let has_nulls = key.contains(&Value::Null);
    let tup = bp::make_leaf_tuple(&enc, tid, has_nulls);
    if tup.len() > MAX_ITEM_SIZE {
        return Err(Error::invalid(format!(
            "index row size {} exceeds btree maximum {MAX_ITEM_SIZE} for index \"{}\"",
            tup.len(),
            ix.name
        )));
    }
    // NULLs never conflict (SQL: NULL is not equal to NULL).
    let check = unique.filter(|_| !has_nulls);
    let exact = Target::new(enc.clone(), TidPos::At(tid));
    loop {
        let search = if check.is_some() { Target::new(enc.clone(), TidPos::MinusInf) } else { exact.clone() };
        let Some(d) = ix.find_leaf(env, &search, false)? else {
            create_root(ix, env)?;
            continue;
        };
        let mut leaf = ix.lock_leaf_write(env, d.leaf, &search)?;
        if let Some(check) = check {
            match check_unique(ix, env, &leaf, &enc, check)? {
                Unique::Ok => {}
                Unique::Conflict => {
                    return Err(Error::UniqueViolation { index: ix.name.clone(), key: ix.render_key(key) })
                }
                Unique::Wait(xid) => {
                    drop(leaf);
                    check.wait(xid)?;
                    continue;
                }
            }
            // The entry's own place may be further right, among equal keys with larger TIDs.
            leaf = ix.step_right_write(env, leaf, &exact)?;
        }
        return insert_on_leaf(ix, env, d.stack, leaf, tup, &exact);
    }
}

/// Looks at every entry whose key equals `enc` (ignoring the TID), from the locked leaf
/// rightwards (share-locking each right sibling while the leaf stays locked, left to right),
/// and asks the heap about each. The leaf lock keeps any other inserter of this key waiting.
fn check_unique(
    ix: &BtreeIndex,
    env: &HeapEnv<'_>,
    leaf: &WPage<'_>,
    enc: &[u8],
    check: &dyn UniqueCheck,
) -> Result<Unique> {
    let lo = Target::new(enc.to_vec(), TidPos::MinusInf);
    let hi = Target::new(enc.to_vec(), TidPos::PlusInf);
    let mut tids = Vec::new();
    let mut more = scan_equal(&leaf.g.0, &lo, &hi, &mut tids);
    let mut next = bp::next(&leaf.g.0);
    while more && next != P_NONE {
        let r = ix.read_page(env, next)?;
        if !bp::is_ignored(&r.g.0) {
            more = scan_equal(&r.g.0, &lo, &hi, &mut tids);
        }
        next = bp::next(&r.g.0);
    }
    for tid in tids {
        match check.state(tid)? {
            HeapTupleState::Dead => {}
            HeapTupleState::Live => return Ok(Unique::Conflict),
            HeapTupleState::InProgress(x) => return Ok(Unique::Wait(x)),
        }
    }
    Ok(Unique::Ok)
}

/// Collects the TIDs of entries in `[lo, hi)` on a leaf; true when equal keys may continue on
/// the right sibling (the high key is still below `hi`).
fn scan_equal(p: &[u8], lo: &Target, hi: &Target, tids: &mut Vec<Tid>) -> bool {
    let mut off = leaf_lower_bound(p, lo).0;
    while off <= bp::max_offset(p) {
        let (k, tid) = bp::item_key(p, OffsetNumber(off));
        if cmp_item(k, tid, hi) != Ordering::Less {
            return false;
        }
        if !bp::is_dead(p, OffsetNumber(off)) {
            tids.extend(tid); // LP_DEAD entries are known dead to everyone
        }
        off += 1;
    }
    !bp::is_rightmost(p) && cmp_off(p, P_HIKEY, hi) == Ordering::Less
}

/// Creates the first (leaf) root of an empty index.
fn create_root(ix: &BtreeIndex, env: &HeapEnv<'_>) -> Result<()> {
    let mut meta = ix.write_page(env, 0)?;
    if ix.decode_meta(&meta.g.0)?.root != P_NONE {
        return Ok(()); // someone else did it
    }
    let mut root = ix.alloc_page(env)?;
    bp::init(&mut root.g.0, 0, BTP_LEAF | BTP_ROOT);
    let root_block = root.buf.block().0;
    super::init_meta(&mut meta.g.0, Meta { root: root_block, level: 0 });
    ix.log_images(env, XLOG_BTREE_NEWROOT, &mut [&mut meta, &mut root])
}

/// Adds `tup` at its place on the locked leaf; a full leaf first loses its LP_DEAD entries
/// (simple deletion, [`super::kill`]), and splits only if that made no room.
fn insert_on_leaf(
    ix: &BtreeIndex,
    env: &HeapEnv<'_>,
    stack: Vec<u32>,
    mut leaf: WPage<'_>,
    tup: Vec<u8>,
    exact: &Target,
) -> Result<()> {
    let mut off = leaf_lower_bound(&leaf.g.0, exact);
    let mut fits = bp::insert_item(&mut leaf.g.0, off, &tup);
    if !fits && super::kill::delete_dead_items(ix, env, &mut leaf)? {
        off = leaf_lower_bound(&leaf.g.0, exact);
        fits = bp::insert_item(&mut leaf.g.0, off, &tup);
    }
    if fits {
        let mut data = off.0.to_le_bytes().to_vec();
        data.extend_from_slice(&tup);
        let lsn = env.wal.insert(&RecordBuilder {
            toplevel_xid: crate::types::Xid::INVALID,
            rmgr: Rmgr::Btree,
            info: XLOG_BTREE_INSERT_LEAF,
            xid: Xid::INVALID,
            blocks: vec![BlockRef {
                keep_data: false,
                id: 0,
                tag: ix.tag(leaf.buf.block().0),
                will_init: false,
                page: Some(&leaf.g.0),
                data,
            }],
            main_data: vec![],
        })?;
        pg::set_lsn(&mut leaf.g.0, lsn);
        leaf.buf.mark_dirty();
        return Ok(());
    }
    split_and_insert(ix, env, stack, leaf, off, tup)
}

/// How a full page divides: the new left contents (high key first), the new right contents,
/// and the separator (a pivot without downlink) that goes to the parent.
pub(crate) struct SplitPlan {
    pub left: Vec<Vec<u8>>,
    pub right: Vec<Vec<u8>>,
    pub sep: Vec<u8>,
}

/// Chooses the split point of page `p` with `tup` inserted at `off` (PostgreSQL's
/// `_bt_findsplitloc`, reduced to: balance the bytes, or leave the left page 90% full when
/// the rightmost leaf grows at its end).
pub(crate) fn plan_split(p: &[u8], off: OffsetNumber, tup: &[u8]) -> Option<SplitPlan> {
    let leaf = bp::is_leaf(p);
    let first = bp::first_data_offset(p).0;
    let n = bp::max_offset(p);
    let mut items: Vec<Vec<u8>> = (first..=n).map(|o| bp::item(p, OffsetNumber(o)).to_vec()).collect();
    let at = usize::from(off.0.checked_sub(first)?);
    items.insert(at.min(items.len()), tup.to_vec());
    let old_hk = (!bp::is_rightmost(p)).then(|| bp::item(p, P_HIKEY).to_vec());
    let space: Vec<usize> = items.iter().map(|t| bp::item_space(t.len())).collect();
    let total: usize = space.iter().sum();
    let hk_space = old_hk.as_ref().map_or(0, |h| bp::item_space(h.len()));
    let append = leaf && old_hk.is_none() && at == items.len() - 1;
    let mut best: Option<(usize, usize)> = None; // (score, k)
    let mut left_bytes = 0;
    for k in 1..items.len() {
        left_bytes += space[k - 1];
        let sep_len = plan_separator(&items[k - 1], &items[k], leaf).len();
        let left = left_bytes + bp::item_space(sep_len);
        let mut right = total - left_bytes + hk_space;
        if !leaf {
            right -= space[k] - bp::item_space(bp::TUPLE_HEADER_SIZE);
        }
        if left > USABLE || right > USABLE {
            continue;
        }
        let score = if append {
            if left <= USABLE * LEAF_FILLFACTOR / 100 {
                usize::MAX / 2 + k // the largest k that keeps the left page at most 90% full
            } else {
                usize::MAX / 2 - left
            }
        } else {
            usize::MAX - left.abs_diff(right)
        };
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, k));
        }
    }
    let (_, k) = best?;
    let sep = plan_separator(&items[k - 1], &items[k], leaf);
    let mut left = vec![sep.clone()];
    left.extend_from_slice(&items[..k]);
    let mut right: Vec<Vec<u8>> = old_hk.into_iter().collect();
    if leaf {
        right.extend_from_slice(&items[k..]);
    } else {
        // The first right item's key moves up; the item stays as "minus infinity".
        right.push(bp::make_pivot(&[], None, bp::child(&items[k])));
        right.extend_from_slice(&items[k + 1..]);
    }
    Some(SplitPlan { left, right, sep })
}

/// The separator between `lastleft` and `firstright` as a pivot without downlink. On a leaf:
/// the key of `firstright`, with its heap TID only when the keys are equal (TID truncation).
/// On an internal page: `firstright`'s own separator.
pub(crate) fn plan_separator(lastleft: &[u8], firstright: &[u8], leaf: bool) -> Vec<u8> {
    if !leaf {
        let (k, tid) = bp::pivot_key(firstright);
        return bp::make_pivot(k, tid, P_NONE);
    }
    let (lk, _) = bp::leaf_key(lastleft);
    let (rk, rtid) = bp::leaf_key(firstright);
    bp::make_pivot(rk, (lk == rk).then_some(rtid), P_NONE)
}

/// Splits the locked page and inserts the separator into the parent, cascading up; logs one
/// record with every changed page.
fn split_and_insert(
    ix: &BtreeIndex,
    env: &HeapEnv<'_>,
    mut stack: Vec<u32>,
    leaf: WPage<'_>,
    off: OffsetNumber,
    tup: Vec<u8>,
) -> Result<()> {
    let mut held: Vec<WPage<'_>> = Vec::new();
    let (mut cur, mut off, mut tup) = (leaf, off, tup);
    let mut info = XLOG_BTREE_SPLIT;
    loop {
        if bp::insert_item(&mut cur.g.0, off, &tup) {
            held.push(cur);
            break;
        }
        let block = cur.buf.block().0;
        let level = bp::level(&cur.g.0);
        let plan = plan_split(&cur.g.0, off, &tup)
            .ok_or_else(|| ix.corrupt(block, "page cannot be split: items too large"))?;
        let mut right = ix.alloc_page(env)?;
        let right_block = right.buf.block().0;
        let old_next = bp::next(&cur.g.0);
        let flags = bp::flags(&cur.g.0);
        // Both halves locked: now the running bulk delete's cycle ID, if any, can be read.
        let cycle_id = super::cycle::current(ix);
        bp::init(&mut right.g.0, level, flags & BTP_LEAF);
        bp::set_prev(&mut right.g.0, block);
        bp::set_next(&mut right.g.0, old_next);
        bp::set_cycle_id(&mut right.g.0, cycle_id);
        if !bp::rebuild(&mut right.g.0, &plan.right) {
            return Err(ix.corrupt(block, "split right half does not fit"));
        }
        bp::set_next(&mut cur.g.0, right_block);
        bp::set_flags(&mut cur.g.0, flags & !(BTP_ROOT | BTP_SPLIT_END));
        bp::set_cycle_id(&mut cur.g.0, cycle_id);
        if !bp::rebuild(&mut cur.g.0, &plan.left) {
            return Err(ix.corrupt(block, "split left half does not fit"));
        }
        let mut sep = plan.sep;
        bp::set_child(&mut sep, right_block);
        let is_root = flags & BTP_ROOT != 0;
        let old_right = if old_next != P_NONE {
            let mut s = ix.write_page(env, old_next)?;
            bp::set_prev(&mut s.g.0, right_block);
            // The old right sibling holds nothing from the split page's range as of the bulk
            // delete's start unless it was split off it during that bulk delete (same ID): the
            // chain of such pages ends at the new right half.
            if bp::cycle_id(&s.g.0) != cycle_id {
                let f = bp::flags(&right.g.0);
                bp::set_flags(&mut right.g.0, f | BTP_SPLIT_END);
            }
            Some(s)
        } else {
            None
        };
        held.push(cur);
        held.push(right);
        held.extend(old_right);
        if is_root {
            new_root(ix, env, &mut held, block, level, sep)?;
            info = XLOG_BTREE_NEWROOT;
            break;
        }
        let (parent, poff) = relock_parent(ix, env, &mut stack, block, level)?;
        cur = parent;
        off = poff;
        tup = sep;
    }
    let mut refs: Vec<&mut WPage<'_>> = held.iter_mut().collect();
    ix.log_images(env, info, &mut refs)
}

/// Makes a new root above the split old root `left` and points the metapage at it.
fn new_root<'a>(
    ix: &BtreeIndex,
    env: &HeapEnv<'a>,
    held: &mut Vec<WPage<'a>>,
    left: u32,
    level: u32,
    sep: Vec<u8>,
) -> Result<()> {
    let mut root = ix.alloc_page(env)?;
    bp::init(&mut root.g.0, level + 1, BTP_ROOT);
    if !bp::rebuild(&mut root.g.0, &[bp::make_pivot(&[], None, left), sep]) {
        return Err(ix.corrupt(root.buf.block().0, "new root does not fit"));
    }
    let mut meta = ix.write_page(env, 0)?;
    super::init_meta(&mut meta.g.0, Meta { root: root.buf.block().0, level: level + 1 });
    held.push(root);
    held.push(meta);
    Ok(())
}

/// Finds and exclusively locks the parent of `child` (at `child_level + 1`): starts at the
/// page the descent came through (or the leftmost page of that level when the tree grew
/// since), searches it for the downlink and moves right until found. Returns the page and the
/// offset where the new right sibling's downlink goes (just after the child's).
fn relock_parent<'a>(
    ix: &BtreeIndex,
    env: &HeapEnv<'a>,
    stack: &mut Vec<u32>,
    child: u32,
    child_level: u32,
) -> Result<(WPage<'a>, OffsetNumber)> {
    let start = match stack.pop() {
        Some(b) => b,
        None => leftmost_at_level(ix, env, child_level + 1)?,
    };
    let mut p = ix.write_page(env, start)?;
    loop {
        let block = p.buf.block().0;
        if bp::level(&p.g.0) != child_level + 1 || bp::is_leaf(&p.g.0) {
            return Err(ix.corrupt(block, format!("expected a parent page at level {}", child_level + 1)));
        }
        let first = bp::first_data_offset(&p.g.0).0;
        if let Some(o) =
            (first..=bp::max_offset(&p.g.0)).find(|&o| bp::child(bp::item(&p.g.0, OffsetNumber(o))) == child)
        {
            return Ok((p, OffsetNumber(o + 1)));
        }
        match bp::next(&p.g.0) {
            P_NONE => return Err(ix.corrupt(child, "could not find the downlink to this page in its parent level")),
            n => p = ix.write_page(env, n)?,
        }
    }
}

/// The leftmost page of `level`, reached from the root through first downlinks.
pub(crate) fn leftmost_at_level(ix: &BtreeIndex, env: &HeapEnv<'_>, level: u32) -> Result<u32> {
    let meta = ix.meta(env)?;
    if meta.root == P_NONE || meta.level < level {
        return Err(ix.corrupt(0, format!("no level {level} in the tree (root level {})", meta.level)));
    }
    let mut block = meta.root;
    loop {
        let r = ix.read_page(env, block)?;
        let l = bp::level(&r.g.0);
        if l == level {
            return Ok(block);
        }
        if bp::is_leaf(&r.g.0) || l < level {
            return Err(ix.corrupt(block, format!("descent to level {level} reached level {l}")));
        }
        let first = bp::first_data_offset(&r.g.0);
        if first.0 > bp::max_offset(&r.g.0) {
            return Err(ix.corrupt(block, "internal page without downlinks"));
        }
        block = bp::child(bp::item(&r.g.0, first));
    }
}
