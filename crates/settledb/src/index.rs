//! The index access-method interface: what the heap, the row API and VACUUM need from an
//! index, whatever its kind (PostgreSQL's `amapi.h`, reduced to what we use).
//!
//! An index maps a key (the values of its columns, in order) to heap TIDs. Entries are never
//! updated in place: a non-HOT update inserts a new entry for the new version, and the old
//! entry stays until VACUUM removes it through [`IndexAm::bulk_delete`], whose callback asks
//! (in batches) which heap TIDs are dead; it is answered by the dead-TID store, so VACUUM does
//! not need to know what kind of index it is cleaning.
//!
//! A unique index checks uniqueness against *live* heap tuples only (an entry whose heap
//! tuple is dead does not conflict); for that it asks the heap through [`UniqueCheck`].

use crate::error::Result;
pub use crate::heap::hot::HeapTupleState;
use crate::heap::tuple::Value;
use crate::heap::HeapEnv;
use crate::types::{Tid, Xid};

/// Scan order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanDirection {
    Forward,
    Backward,
}

/// One end of a key range: a prefix of the index's columns, inclusive or not.
#[derive(Clone, Debug, PartialEq)]
pub enum KeyBound {
    Unbounded,
    Included(Vec<Value>),
    Excluded(Vec<Value>),
}

/// An index entry returned by a scan: the key values (for index-only scans) and the heap TID.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexEntry {
    pub key: Vec<Value>,
    pub tid: Tid,
}

/// Answers uniqueness questions about heap tuples (implemented by the heap side).
pub trait UniqueCheck {
    /// The state of the row version at `tid` (following its HOT chain to the version that
    /// matters).
    fn state(&self, tid: Tid) -> Result<HeapTupleState>;
    /// Blocks until `xid` has finished (with deadlock detection).
    fn wait(&self, xid: Xid) -> Result<()>;
}

/// Counters of one VACUUM pass over an index, printed as PostgreSQL prints them:
/// `index "…": pages: N in total, N newly deleted, N currently deleted, N reusable`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BulkDeleteStats {
    /// Pages in the index.
    pub num_pages: u32,
    /// Entries left after the pass.
    pub num_index_tuples: u64,
    /// Entries removed by the pass.
    pub tuples_removed: u64,
    /// Pages this pass deleted.
    pub pages_newly_deleted: u32,
    /// Pages now in the deleted state (including older ones).
    pub pages_deleted: u32,
    /// Deleted pages that no scan can still reach and may be reused.
    pub pages_free: u32,
}

/// One bulk delete of one index that several threads of a VACUUM may work on at once
/// (from [`IndexAm::begin_bulk_delete`]).
pub trait IndexBulkDelete: Sync {
    /// Takes parts of the index and removes the entries whose heap TIDs `is_dead` reports,
    /// until no part is left. Call it from as many threads as wanted, each with its own
    /// callback (which may keep its own buffers and cost accounting).
    fn work(&self, env: &HeapEnv<'_>, is_dead: &mut dyn FnMut(&[Tid], &mut [bool])) -> Result<()>;

    /// Ends the bulk delete after every [`IndexBulkDelete::work`] call has returned, and
    /// updates `stats` as [`IndexAm::bulk_delete`] does. If a `work` call failed, drop the bulk
    /// delete instead.
    fn finish(self: Box<Self>, env: &HeapEnv<'_>, stats: &mut BulkDeleteStats) -> Result<()>;
}

/// What VACUUM calls on every index of a table.
pub trait IndexAm: Send + Sync {
    /// Removes every entry whose heap TID `is_dead` reports dead. The callback gets a batch of
    /// TIDs (typically one leaf page's worth) and fills `dead[i]` for `tids[i]`, so that the
    /// dead-TID store can overlap its memory accesses. Deletes pages that became empty.
    ///
    /// `stats`: the figures about the whole index (pages, entries left, deleted and reusable
    /// pages) are replaced by this pass's, `tuples_removed` and `pages_newly_deleted` are added
    /// to, so one `stats` serves every index pass of a VACUUM and then [`IndexAm::cleanup`].
    fn bulk_delete(
        &self,
        env: &HeapEnv<'_>,
        is_dead: &mut dyn FnMut(&[Tid], &mut [bool]),
        stats: &mut BulkDeleteStats,
    ) -> Result<()>;

    /// [`IndexAm::bulk_delete`] split into parts that several threads can work on at once.
    fn begin_bulk_delete<'a>(&'a self, env: &HeapEnv<'_>) -> Result<Box<dyn IndexBulkDelete + 'a>>;

    /// Post-VACUUM cleanup: counts pages and entries, finds deleted pages that can be
    /// recycled, and fills `stats`. `bulk_deleted` says whether this VACUUM ran
    /// [`IndexAm::bulk_delete`] on the index, in which case `stats` holds what the bulk delete
    /// left there, which an index may return as it is. Returns whether `stats` holds figures: like
    /// PostgreSQL's `amvacuumcleanup` returning NULL, an index may skip the work when nothing
    /// was deleted and it has nothing to recycle, and VACUUM VERBOSE then prints no line for it.
    fn cleanup(&self, env: &HeapEnv<'_>, stats: &mut BulkDeleteStats, bulk_deleted: bool) -> Result<bool>;
}

/// Orders two values of the same type as an index does (NULLs last). Values of different types
/// order by type, which never happens within one index column.
pub fn compare_values(a: &Value, b: &Value) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (Value::Null, Value::Null) => Ordering::Equal,
        (Value::Null, _) => Ordering::Greater,
        (_, Value::Null) => Ordering::Less,
        (Value::Int4(x), Value::Int4(y)) => x.cmp(y),
        (Value::Int8(x), Value::Int8(y)) => x.cmp(y),
        (Value::Float8(x), Value::Float8(y)) => x.total_cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Text(x), Value::Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bytea(x), Value::Bytea(y)) => x.cmp(y),
        (Value::Timestamp(x), Value::Timestamp(y)) => x.cmp(y),
        _ => type_rank(a).cmp(&type_rank(b)),
    }
}

fn type_rank(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::Int4(_) => 1,
        Value::Int8(_) => 2,
        Value::Float8(_) => 3,
        Value::Bool(_) => 4,
        Value::Text(_) => 5,
        Value::Bytea(_) => 6,
        Value::Timestamp(_) => 7,
    }
}

/// Compares a key with a bound's prefix: only the bound's columns count.
pub fn compare_prefix(key: &[Value], prefix: &[Value]) -> std::cmp::Ordering {
    for (k, p) in key.iter().zip(prefix) {
        let o = compare_values(k, p);
        if o != std::cmp::Ordering::Equal {
            return o;
        }
    }
    std::cmp::Ordering::Equal
}

/// Whether `key` lies within `[lo, hi]` as the bounds say.
pub fn in_range(key: &[Value], lo: &KeyBound, hi: &KeyBound) -> bool {
    use std::cmp::Ordering::*;
    let lo_ok = match lo {
        KeyBound::Unbounded => true,
        KeyBound::Included(p) => compare_prefix(key, p) != Less,
        KeyBound::Excluded(p) => compare_prefix(key, p) == Greater,
    };
    let hi_ok = match hi {
        KeyBound::Unbounded => true,
        KeyBound::Included(p) => compare_prefix(key, p) != Greater,
        KeyBound::Excluded(p) => compare_prefix(key, p) == Less,
    };
    lo_ok && hi_ok
}
