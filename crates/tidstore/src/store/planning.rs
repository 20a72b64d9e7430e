//! Planning a page's arrival: whether the staged group ends before it ([`TidStore::must_flush`],
//! which decides what kind of group a run of pages becomes) and what capacities the store
//! needs to take it within its budget ([`TidStore::plan_capacity`]).

use super::group::{
    GroupPlan, PageSummary, DENSE_SPAN, GROUP_PAGES_CONTIG, GROUP_PAGES_LIST, GROUP_PAGES_MIXED, LIST_DENSE_MIN,
    STRIDE_MAX, WIDE_SPAN,
};
use super::index::{filter_words, top_cap};
use super::{container, grown_capacity, Full, TidStore, PAD};

impl TidStore {
    /// Does the staged group end before this page `p`? A group stays one whose lookup finds
    /// the page's slot without a search while it can: evenly spaced blocks of one shape (up to
    /// [`GROUP_PAGES_CONTIG`] pages), or any dense stretch within a WIDE group's
    /// [`WIDE_SPAN`] blocks (dense: under [`DENSE_SPAN`] blocks so far, or at least
    /// [`LIST_DENSE_MIN`] pages). A group that would leave those forms ends there, unless it is
    /// a sparse one, which goes on as a LIST group up to [`GROUP_PAGES_LIST`] pages, or mixed
    /// and evenly spaced (up to [`GROUP_PAGES_MIXED`]). Those two pad every page's slot to the
    /// longest page's, so a mixed one also ends where that would cost more than twice its
    /// pages' own estimate.
    pub(super) fn must_flush(&self, p: PageSummary, est: u32) -> bool {
        let n = self.staged_n;
        if n == 0 {
            return false;
        }
        if n == GROUP_PAGES_CONTIG {
            return true;
        }
        let (first, last) = (self.staged[0], self.staged[n - 1]);
        let same = !self.staged_mixed && (p.k, p.min, p.max) == (first.k, first.min, first.max);
        let step = p.block - last.block;
        let even = |stride: u32| (1..=STRIDE_MAX).contains(&stride);
        let stays_even = (n == 1 || self.staged_stride == step) && even(step);
        if same && stays_even {
            return false;
        }
        let span = p.block - first.block;
        let cur_span = last.block - first.block;
        if span < WIDE_SPAN && (span < DENSE_SPAN || n >= LIST_DENSE_MIN) {
            return false;
        }
        if !same {
            let max = u64::from(self.staged_est_max.max(est));
            let sum = u64::from(self.staged_est_sum) + u64::from(est);
            if (n as u64 + 1) * max > 2 * sum + 256 {
                return true;
            }
        }
        if stays_even {
            return n >= GROUP_PAGES_MIXED;
        }
        let list = n >= 2
            && !even(self.staged_stride)
            && !(cur_span < WIDE_SPAN && (cur_span < DENSE_SPAN || n >= LIST_DENSE_MIN));
        n >= if list { GROUP_PAGES_LIST } else { LIST_DENSE_MIN }
    }

    /// Capacities after adding page `summary` (`flush`: [`TidStore::must_flush`] for it;
    /// `bucketable`: whether the group it opens or joins can be written bucketed, at that
    /// group's universe): (arena, dir, staged offsets, filter words), or `Full`.
    pub(super) fn plan_capacity(&self, summary: PageSummary, bucketable: bool, flush: bool) -> Result<Caps, Full> {
        let first = if self.num_pages == 0 { summary.block } else { self.first_block };
        let filter_need = filter_words(self.num_pages + 1, summary.block - first);
        let filter_cap = self.filter.capacity();
        let filter_grown = if filter_cap >= filter_need { filter_cap } else { filter_need.max(2 * filter_cap) };
        // Fast path: the current capacity holds even a loose upper bound of what is needed.
        let staged_u = self.staged_u;
        let (closed_upper, open_upper, staged_after) = if flush {
            (upper_bytes(self.staged_n, staged_u), upper_bytes(1, u32::from(summary.max)), usize::from(summary.k))
        } else {
            (
                0,
                upper_bytes(self.staged_n + 1, staged_u.max(u32::from(summary.max))),
                self.staged_offsets.len() + usize::from(summary.k),
            )
        };
        if self.arena.capacity() >= self.arena.len().max(PAD) + closed_upper + open_upper
            && self.dir.capacity() >= self.dir.len() + 2
            && self.top.capacity() >= top_cap(self.dir.capacity())
            && self.staged_offsets.capacity() >= staged_after
            && filter_cap >= filter_need
        {
            return Ok((self.arena.capacity(), self.dir.capacity(), self.staged_offsets.capacity(), filter_cap));
        }
        let top = self.top.capacity();
        let total = |a: usize, d: usize, s: usize, f: usize| a + d * 16 + top_cap(d).max(top) * 4 + s * 2 + f * 8;
        // Grow to cover the loose bound while the budget allows, so that the following pages
        // take the fast path again instead of planning their group exactly, page after page.
        let loose = self.arena.len().max(PAD) + closed_upper + open_upper;
        let loose_caps = (
            grown_capacity(self.arena.len(), self.arena.capacity(), loose - self.arena.len(), 4096),
            grown_capacity(self.dir.len(), self.dir.capacity(), 2, 64),
            if self.staged_offsets.capacity() >= staged_after {
                self.staged_offsets.capacity()
            } else {
                staged_after.max(self.staged_offsets.capacity() * 2).max(64)
            },
            filter_grown,
        );
        if total(loose_caps.0, loose_caps.1, loose_caps.2, loose_caps.3) <= self.budget_bytes {
            return Ok(loose_caps);
        }
        let (arena_len, dir_len, staged_len, open) = if flush {
            let closed = GroupPlan::new(&self.staged[..self.staged_n], self.staged_bucketable).bytes();
            let open = GroupPlan::new(&[summary], bucketable).bytes();
            (self.arena.len().max(PAD) + closed, self.dir.len() + 1, 0, open)
        } else {
            let mut pages = self.staged[..self.staged_n].to_vec();
            pages.push(summary);
            let open = GroupPlan::new(&pages, bucketable).bytes();
            (self.arena.len().max(PAD), self.dir.len(), self.staged_offsets.len(), open)
        };
        // Room for the open group to be encoded without growing: arena, its PAD, a dir slot.
        let arena_need = arena_len + open;
        let arena_cap = grown_capacity(self.arena.len(), self.arena.capacity(), arena_need - self.arena.len(), 4096);
        let dir_cap = grown_capacity(self.dir.len(), self.dir.capacity(), dir_len + 1 - self.dir.len(), 64);
        let staged_cap = grown_capacity(staged_len, self.staged_offsets.capacity(), usize::from(summary.k), 64);
        if total(arena_cap, dir_cap, staged_cap, filter_grown) <= self.budget_bytes {
            return Ok((arena_cap, dir_cap, staged_cap, filter_grown));
        }
        // Doubling overshoots: grow only as far as needed.
        let exact = (
            arena_need.max(self.arena.capacity()),
            (dir_len + 1).max(self.dir.capacity()),
            (staged_len + usize::from(summary.k)).max(self.staged_offsets.capacity()),
            filter_need.max(filter_cap),
        );
        let room = self.budget_bytes.saturating_sub(total(exact.0, exact.1, exact.2, exact.3));
        if total(exact.0, exact.1, exact.2, exact.3) > self.budget_bytes {
            return Err(Full);
        }
        // Spend what is left of the budget on the arena, which grows fastest.
        let arena_cap = exact.0 + room.min(arena_cap - exact.0);
        Ok((arena_cap, exact.1, exact.2, exact.3))
    }
}

/// Capacities: (arena bytes, directory entries, staged offsets, filter words).
pub(super) type Caps = (usize, usize, usize, usize);

/// An estimate of a page's slot in a mixed group, in bits: its code byte and its container in
/// its own universe `u` (the group's may be larger). Only for the padding rule of
/// `must_flush`.
pub(super) fn slot_estimate(code: u8, u: u32) -> u32 {
    8 + container::code_bits(code, u)
}

/// An upper bound of the arena bytes of a group of `n` pages whose largest offset is `u`:
/// block list (32 bits per page at most), code bytes, and containers no longer than bitmaps.
fn upper_bytes(n: usize, u: u32) -> usize {
    2 + n * ((u as usize).div_ceil(8) + 1 + 4)
}
