//! Bulk build (PostgreSQL's `nbtsort.c`): sort the entries, fill leaves left to right, and
//! build each upper level from the low keys of the pages below as they are finished.
//!
//! A page at level *L* is finished when the next item does not fit, or when the free space
//! would drop below the fillfactor reserve (leaves 90%: 819 bytes; internal pages 70%) and it
//! already has two data items. Then its last item moves to a new right sibling and becomes,
//! truncated, the finished page's high key; the finished page's downlink (its low key) goes
//! to level *L + 1*. At the end the rightmost page of each level is closed without a high key
//! and linked into its parent, and the top page becomes the root.
//!
//! With int4 keys a leaf holds 366 entries (16-byte tuples, 4-byte line pointers) and an
//! internal page 284 downlinks, so 5,000,000 keys take 13,662 leaves + 49 + 1 internal pages
//! + the metapage = 13,713 pages, as in PostgreSQL.
//!
//! Every finished page is WAL-logged as a `will_init` image (like `log_newpage`).

use super::insert::plan_separator;
use super::page::{self as bp, BTP_LEAF, BTP_ROOT, MAX_ITEM_SIZE, P_NONE, SPECIAL_OFF};
use super::wal::XLOG_BTREE_NEWPAGES;
use super::{keys, BtreeIndex, Meta, WPage, LEAF_FILLFACTOR, NONLEAF_FILLFACTOR};
use crate::buffer::Ring;
use crate::error::{Error, Result};
use crate::heap::tuple::Type;
use crate::heap::tuple::Value;
use crate::heap::HeapEnv;
use crate::page::{maxalign, PageBuf, BLCKSZ, ITEM_ID_SIZE, PAGE_HEADER_SIZE};
use crate::types::{Fork, Tid};

/// The page being filled at one level.
struct Level {
    block: u32,
    prev: u32,
    items: Vec<Vec<u8>>,
    /// Sum of the MAXALIGNed item sizes.
    used: usize,
    /// The page's low key as a pivot key (`None`: minus infinity, the level's first page).
    low: Option<(Vec<u8>, Option<Tid>)>,
}

struct Builder<'i, 'e> {
    ix: &'i BtreeIndex,
    env: &'i HeapEnv<'e>,
    levels: Vec<Level>,
    ring: Ring,
}

/// The entries of a bulk build: every key encoded into one buffer, so that gathering,
/// sorting and loading millions of them allocates nothing per entry but the leaf tuple the
/// page is laid out from.
pub struct BuildKeys {
    types: Vec<Type>,
    bytes: Vec<u8>,
    spans: Vec<KeySpan>,
}

/// One entry of [`BuildKeys`]: where its encoded key lies, and its heap TID.
#[derive(Clone, Copy)]
struct KeySpan {
    start: usize,
    len: u32,
    tid: Tid,
    nulls: bool,
}

impl BuildKeys {
    /// No entries yet, for an index whose key columns have `types`.
    pub fn new(types: &[Type]) -> BuildKeys {
        BuildKeys { types: types.to_vec(), bytes: Vec::new(), spans: Vec::new() }
    }

    /// Adds the entry `(key, tid)`.
    pub fn push(&mut self, key: &[Value], tid: Tid) -> Result<()> {
        if key.len() != self.types.len() {
            return Err(Error::invalid(format!("index key has {} columns, the index {}", key.len(), self.types.len())));
        }
        let start = self.bytes.len();
        if let Err(e) = keys::encode_into(&mut self.bytes, &self.types, key) {
            self.bytes.truncate(start);
            return Err(Error::invalid(e));
        }
        let len = self.bytes.len() - start;
        let size = bp::TUPLE_HEADER_SIZE + len;
        if size > MAX_ITEM_SIZE {
            self.bytes.truncate(start);
            return Err(Error::invalid(format!("index row size {size} exceeds btree maximum {MAX_ITEM_SIZE}")));
        }
        let nulls = key.contains(&Value::Null);
        self.spans.push(KeySpan { start, len: len as u32, tid, nulls });
        Ok(())
    }

    /// Takes back the last entry pushed if an entry pushed at or after position `since` has
    /// the same key (a HOT chain's versions share their root's TID: one entry per distinct
    /// key). True if it did.
    pub fn drop_last_if_repeated(&mut self, since: usize) -> bool {
        let Some((last, earlier)) = self.spans.split_last() else { return false };
        let key = self.key(last);
        if earlier.get(since..).is_some_and(|e| e.iter().any(|s| self.key(s) == key)) {
            self.bytes.truncate(last.start);
            self.spans.pop();
            return true;
        }
        false
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    fn key(&self, s: &KeySpan) -> &[u8] {
        &self.bytes[s.start..s.start + s.len as usize]
    }
}

/// Sorts and loads `entries` into the empty index `ix`; a unique index's keys are checked
/// for duplicates when `check_unique`.
pub fn build(ix: &BtreeIndex, env: &HeapEnv<'_>, entries: Vec<(Vec<Value>, Tid)>, check_unique: bool) -> Result<()> {
    let mut keys = BuildKeys::new(&ix.key_types);
    for (key, tid) in &entries {
        keys.push(key, *tid).map_err(|e| Error::invalid(format!("index \"{}\": {e}", ix.name)))?;
    }
    drop(entries);
    build_keys(ix, env, keys, check_unique)
}

/// [`build`] of entries gathered as [`BuildKeys`].
pub fn build_keys(ix: &BtreeIndex, env: &HeapEnv<'_>, mut keys: BuildKeys, check_unique: bool) -> Result<()> {
    if ix.meta(env)?.root != P_NONE || ix.num_pages(env)? != 1 {
        return Err(Error::invalid(format!("index \"{}\" is not empty", ix.name)));
    }
    if keys.types != ix.key_types {
        return Err(Error::invalid(format!("index \"{}\": entries gathered for other key types", ix.name)));
    }
    // A stable sort for its run detection: a table's rows are often in key order but for
    // the rows updated since, which lie in key order at its end (a rewritten table's, an
    // index built after a load and some updates); two runs merge in one pass.
    let mut spans = std::mem::take(&mut keys.spans);
    spans.sort_by(|a, b| keys.key(a).cmp(keys.key(b)).then(a.tid.cmp(&b.tid)));
    if ix.unique && check_unique {
        for w in spans.windows(2) {
            let (ka, kb) = (keys.key(&w[0]), keys.key(&w[1]));
            if ka == kb && !w[0].nulls {
                let vals = keys::decode(&ix.key_types, ka).map_err(Error::invalid)?;
                return Err(Error::UniqueViolation { index: ix.name.clone(), key: ix.render_key(&vals) });
            }
        }
    }
    if spans.is_empty() {
        return Ok(());
    }
    let mut b = Builder { ix, env, levels: Vec::new(), ring: Ring::new(16 << 20) };
    for s in &spans {
        b.add(0, bp::make_leaf_tuple(keys.key(s), s.tid, s.nulls))?;
    }
    b.finish()
}

impl Builder<'_, '_> {
    fn new_block(&self) -> Result<u32> {
        Ok(self.env.pool.smgr().extend(self.ix.relfilenode, Fork::Main)?.0)
    }

    /// Adds `tup` to the page being filled at `lvl`, finishing the page first if it is full.
    fn add(&mut self, lvl: usize, tup: Vec<u8>) -> Result<()> {
        if lvl == self.levels.len() {
            let block = self.new_block()?;
            self.levels.push(Level { block, prev: P_NONE, items: Vec::new(), used: 0, low: None });
        }
        let leaf = lvl == 0;
        let st = &self.levels[lvl];
        let n = st.items.len();
        // PageGetFreeSpace of the page as PostgreSQL would have it: the high-key line pointer is
        // reserved from the start, and one line pointer for the new item is subtracted.
        let lower = PAGE_HEADER_SIZE + ITEM_ID_SIZE * (1 + n);
        let upper = SPECIAL_OFF - st.used;
        let pgspc = (upper - lower).saturating_sub(ITEM_ID_SIZE);
        let fillfactor = if leaf { LEAF_FILLFACTOR } else { NONLEAF_FILLFACTOR };
        let full = BLCKSZ * (100 - fillfactor) / 100;
        let itupsz = maxalign(tup.len());
        if n >= 1 && (pgspc < itupsz + if leaf { 8 } else { 0 } || (pgspc < full && n >= 2)) {
            self.finish_page(lvl)?;
        }
        let st = &mut self.levels[lvl];
        let tup = if !leaf && st.items.is_empty() { bp::make_pivot(&[], None, bp::child(&tup)) } else { tup };
        st.used += maxalign(tup.len());
        st.items.push(tup);
        Ok(())
    }

    /// Closes the full page at `lvl`: its last item opens the next page and becomes, as a
    /// separator, the high key; the page's downlink goes one level up.
    fn finish_page(&mut self, lvl: usize) -> Result<()> {
        let leaf = lvl == 0;
        let nb = self.new_block()?;
        let st = &mut self.levels[lvl];
        let moved = st.items.pop().expect("a full page has items");
        let hk = plan_separator(st.items.last().expect("two items"), &moved, leaf);
        let mut items = vec![hk.clone()];
        items.append(&mut st.items);
        let (block, prev, low) = (st.block, st.prev, st.low.take());
        let (k, t) = bp::pivot_key(&hk);
        let first = if leaf { moved } else { bp::make_pivot(&[], None, bp::child(&moved)) };
        *st = Level {
            block: nb,
            prev: block,
            used: maxalign(first.len()),
            items: vec![first],
            low: Some((k.to_vec(), t)),
        };
        self.write(block, lvl as u32, prev, nb, &items, 0)?;
        let down = match low {
            Some((k, t)) => bp::make_pivot(&k, t, block),
            None => bp::make_pivot(&[], None, block),
        };
        self.add(lvl + 1, down)
    }

    /// Closes the rightmost page of every level, bottom-up, and points the metapage at the top.
    fn finish(mut self) -> Result<()> {
        let mut lvl = 0;
        while lvl < self.levels.len() {
            let top = lvl + 1 == self.levels.len();
            let st = &mut self.levels[lvl];
            let items = std::mem::take(&mut st.items);
            let (block, prev, low) = (st.block, st.prev, st.low.take());
            self.write(block, lvl as u32, prev, P_NONE, &items, if top { BTP_ROOT } else { 0 })?;
            if !top {
                let down = match low {
                    Some((k, t)) => bp::make_pivot(&k, t, block),
                    None => bp::make_pivot(&[], None, block),
                };
                self.add(lvl + 1, down)?;
            }
            lvl += 1;
        }
        let root = Meta { root: self.levels[lvl - 1].block, level: (lvl - 1) as u32 };
        let mut meta = self.ix.write_page(self.env, 0)?;
        super::init_meta(&mut meta.g.0, root);
        self.ix.log_images(self.env, XLOG_BTREE_NEWPAGES, &mut [&mut meta])
    }

    /// Lays out and writes one finished page, WAL-logged as an image.
    fn write(&mut self, block: u32, level: u32, prev: u32, next: u32, items: &[Vec<u8>], flags: u16) -> Result<()> {
        let mut p = PageBuf::zeroed();
        bp::init(&mut p.0, level, flags | if level == 0 { BTP_LEAF } else { 0 });
        bp::set_prev(&mut p.0, prev);
        bp::set_next(&mut p.0, next);
        if !bp::rebuild(&mut p.0, items) {
            return Err(self.ix.corrupt(block, "bulk-build page overflow"));
        }
        let tag = self.ix.tag(block);
        let buf = self.env.pool.new_page(tag, Some(&mut self.ring))?;
        let mut w = WPage { g: buf.write(), buf };
        w.g.0.copy_from_slice(&p.0);
        self.ix.log_images(self.env, XLOG_BTREE_NEWPAGES, &mut [&mut w])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{BlockNumber, OffsetNumber};

    fn tid(b: u32, o: u16) -> Tid {
        Tid { block: BlockNumber(b), offset: OffsetNumber(o) }
    }

    #[test]
    fn build_keys_keep_one_entry_per_distinct_key_of_a_chain() {
        let mut k = BuildKeys::new(&[Type::Int4, Type::Text]);
        let key = |i: i32, s: &str| vec![Value::Int4(i), Value::Text(s.into())];
        k.push(&key(1, "a"), tid(0, 1)).unwrap();
        let chain = k.len();
        k.push(&key(2, "b"), tid(0, 2)).unwrap();
        assert!(!k.drop_last_if_repeated(chain), "the chain's first key");
        k.push(&key(2, "c"), tid(0, 2)).unwrap();
        assert!(!k.drop_last_if_repeated(chain), "a second, different key of the chain stays");
        k.push(&key(2, "b"), tid(0, 2)).unwrap();
        assert!(k.drop_last_if_repeated(chain), "a key the chain already has goes");
        // Equal to an entry before the chain: not a repeat within it.
        k.push(&key(1, "a"), tid(0, 2)).unwrap();
        assert!(!k.drop_last_if_repeated(chain));
        assert_eq!(k.len(), 4);
        let keys: Vec<&[u8]> = k.spans.iter().map(|s| k.key(s)).collect();
        assert_eq!(keys[0], keys[3]);
        assert_ne!(keys[1], keys[2]);
        assert_eq!(k.bytes.len(), k.spans.iter().map(|s| s.len as usize).sum::<usize>(), "nothing left behind");
    }

    #[test]
    fn a_bad_key_leaves_the_gathered_entries_as_they_were() {
        let mut k = BuildKeys::new(&[Type::Int4]);
        k.push(&[Value::Int4(7)], tid(1, 1)).unwrap();
        let err = k.push(&[Value::Int4(1), Value::Int4(2)], tid(1, 2)).unwrap_err();
        assert!(err.to_string().contains("2 columns"), "{err}");
        let err = k.push(&[Value::Text("x".into())], tid(1, 3)).unwrap_err();
        assert!(!err.to_string().is_empty());
        assert_eq!((k.len(), k.bytes.len()), (1, k.key(&k.spans[0]).len()));
    }
}
