//! The block index and the presence filter: how a lookup finds a block's group, or learns
//! that no page lies near the block. See the module documentation of [`super`].

use super::TidStore;

impl TidStore {
    /// The last group whose first block is `<= block`: the block index gives the groups
    /// starting at or before the block's bucket and the next bucket, and a binary search
    /// between them (most buckets hold one or two group starts) finishes. Whatever the
    /// distribution, no interpolation guess to go wrong.
    #[inline(always)]
    pub(super) fn find_group(&self, block: u32) -> Option<usize> {
        let dir = &self.dir[..];
        let n = dir.len();
        if n == 0 || block < dir[0].first {
            return None;
        }
        let b = (u64::from(block - dir[0].first) >> self.top_shift) as usize;
        let top = &self.top[..];
        if b >= top.len() {
            return Some(n - 1);
        }
        let lo = top[b] as usize;
        let hi = if b + 1 < top.len() { top[b + 1] as usize } else { n - 1 };
        if hi <= lo + 1 {
            // The usual case: at most one group starts inside the bucket; no branch on it.
            let next = dir[hi].first;
            return Some(lo + usize::from((hi > lo) & (next <= block)));
        }
        Some(lo + dir[lo + 1..=hi].partition_point(|e| e.first <= block))
    }

    /// Where [`TidStore::find_group`] starts its search for `block` (for prefetching).
    #[inline(always)]
    pub(super) fn top_guess(&self, block: u32) -> usize {
        let b = (u64::from(block.saturating_sub(self.dir[0].first)) >> self.top_shift) as usize;
        self.top.get(b).map_or(self.dir.len() - 1, |&g| g as usize)
    }

    /// Adds the last group of `dir` to the block index, coarsening the buckets first if the
    /// index would outgrow [`top_cap`] (whose capacity `add_page` has reserved).
    pub(super) fn index_last_group(&mut self) {
        let g = self.dir.len() - 1;
        let (base, f) = (self.dir[0].first, self.dir[g].first);
        let limit = top_cap(self.dir.len());
        while ((u64::from(f - base) >> self.top_shift) as usize) >= limit {
            self.top_shift += 1;
            let len = self.top.len().div_ceil(2);
            for b in 0..len {
                self.top[b] = self.top[2 * b];
            }
            self.top.truncate(len);
        }
        let last = (u64::from(f - base) >> self.top_shift) as usize;
        debug_assert!(last < self.top.capacity(), "block index capacity reserved");
        for b in self.top.len()..=last {
            let start = u64::from(base) + ((b as u64) << self.top_shift);
            self.top.push(if start == u64::from(f) { g as u32 } else { g as u32 - 1 });
        }
    }

    /// Builds the presence filter of a sparse set in the capacity kept for it (freeing it
    /// for a dense one): buckets of the fewest blocks (a power of two) whose bits fit.
    pub(super) fn build_filter(&mut self) {
        let Some(last) = self.last_block.filter(|_| self.staged_n == 0 && self.filter_shift == NO_FILTER) else {
            return;
        };
        let span = last - self.first_block;
        let bits = (self.filter.capacity() * 64).min(FILTER_SPARSE * self.num_pages);
        if filter_words(self.num_pages, span) == 0 || bits == 0 {
            self.filter = Vec::new();
            return;
        }
        let mut shift = 0;
        while (u64::from(span) >> shift) + 1 > bits as u64 {
            shift += 1;
        }
        let words = ((u64::from(span) >> shift) as usize + 1).div_ceil(64);
        debug_assert!(words <= self.filter.capacity());
        self.filter.clear();
        self.filter.resize(words, 0);
        let a = &self.arena[..];
        for e in &self.dir {
            for d in e.deltas(a) {
                let x = (e.first + d - self.first_block) >> shift;
                self.filter[x as usize / 64] |= 1 << (x % 64);
            }
        }
        self.filter.shrink_to_fit();
        self.filter_base = self.first_block;
        self.filter_shift = shift;
    }
}

/// [`TidStore::filter_shift`] when there is no presence filter.
pub(super) const NO_FILTER: u32 = u32::MAX;

/// A set is sparse, and gets a presence filter, when its blocks span at least this many
/// times its pages; the filter then has at most this many bits per page (buckets of
/// `1 << filter_shift` blocks, a power of two), so that most buckets are empty.
const FILTER_SPARSE: usize = 8;

/// ... but not when they span this many times its pages or more: a page every thousand
/// blocks already costs nearly the 6 bytes of a TID when it has one, and the store promises
/// never to take more.
const FILTER_GAP_MAX: usize = 1024;

/// The filter words to keep room for: [`FILTER_SPARSE`] bits per page if `pages` pages span
/// `span` blocks past the first sparsely (see [`FILTER_GAP_MAX`]), else none.
pub(super) fn filter_words(pages: usize, span: u32) -> usize {
    if (FILTER_SPARSE * pages..FILTER_GAP_MAX * pages).contains(&(span as usize)) {
        (FILTER_SPARSE * pages).div_ceil(64)
    } else {
        0
    }
}

/// The most block-index entries for `groups` directory entries: 8 bytes per group and a
/// constant, half the directory's own 16.
pub(super) fn top_cap(groups: usize) -> usize {
    2 * groups + 2
}
