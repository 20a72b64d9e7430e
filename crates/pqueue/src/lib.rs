//! An indexed priority queue: a binary heap whose entries keep a stable [`Handle`], so that an
//! entry's key can be changed, or the entry removed, in O(log n) without searching for it.
//!
//! A plain binary heap (PostgreSQL's `binaryheap.c`, Rust's `BinaryHeap`) moves entries around
//! the array as it sifts, so the caller cannot know where an entry is after the next push or pop;
//! removing or re-keying an arbitrary entry then needs an O(n) search. This heap keeps, beside the
//! array, a slot table mapping every live handle to the entry's current array position, updated
//! on every swap (the "indexed priority queue" of Sedgewick & Wayne, §2.4; also what the
//! pgsql-hackers thread on ReorderBuffer eviction proposes, adding a hash table to `binaryheap`).
//!
//! ```text
//!   slots (by handle)          nodes (the heap array, parent of i at (i-1)/2)
//!   h0 -> pos 2                [0] key 3  slot 1        peek = nodes[0]          O(1)
//!   h1 -> pos 0                [1] key 7  slot 2        push: append, sift up    O(log n)
//!   h2 -> pos 1                [2] key 5  slot 0        update(h): sift up/down  O(log n)
//!   h3 -> free (generation 4)                           remove(h): swap with last,
//!                                                         pop it, sift the moved one
//! ```
//!
//! A handle carries its slot's *generation*, bumped whenever the slot is freed, so a handle to a
//! removed entry never reaches the entry that later reuses the slot: every method taking a handle
//! answers `None` for a stale one instead of touching someone else's entry.
//!
//! Users in settledb: the catalog keeps every table's relfrozenxid in a min-heap (the database
//! frozen XID is its top), autovacuum keeps tables ordered by need, and logical decoding's
//! reorder buffer will keep transactions in a max-heap by memory size to pick the one to spill.
//!
//! Non-goals: ties are not broken in any particular order, and the heap is not thread-safe
//! (callers wrap it in their own lock).

/// Which entry [`IndexedHeap::peek`] returns: the smallest key or the largest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Min,
    Max,
}

/// A stable name for one entry, valid until the entry is removed (or popped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    slot: u32,
    generation: u32,
}

/// Marks a free slot in [`Slot::pos`].
const FREE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Slot {
    generation: u32,
    /// The entry's index in `nodes`, or [`FREE`].
    pos: u32,
}

#[derive(Clone, Debug)]
struct Node<K, V> {
    key: K,
    value: V,
    slot: u32,
}

/// A binary heap of `(key, value)` entries with stable handles (see the crate documentation).
#[derive(Clone, Debug)]
pub struct IndexedHeap<K, V> {
    order: Order,
    nodes: Vec<Node<K, V>>,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
}

impl<K: Ord, V> IndexedHeap<K, V> {
    pub fn new(order: Order) -> IndexedHeap<K, V> {
        IndexedHeap { order, nodes: Vec::new(), slots: Vec::new(), free_slots: Vec::new() }
    }

    /// A heap whose [`peek`](Self::peek) is the smallest key.
    pub fn new_min() -> IndexedHeap<K, V> {
        IndexedHeap::new(Order::Min)
    }

    /// A heap whose [`peek`](Self::peek) is the largest key.
    pub fn new_max() -> IndexedHeap<K, V> {
        IndexedHeap::new(Order::Max)
    }

    pub fn order(&self) -> Order {
        self.order
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Bytes of the heap's own arrays (not of what keys and values point to).
    pub fn allocated_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node<K, V>>()
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.free_slots.capacity() * std::mem::size_of::<u32>()
    }

    /// Adds an entry; O(log n).
    ///
    /// # Panics
    /// When the heap would hold more than `u32::MAX - 1` entries.
    pub fn push(&mut self, key: K, value: V) -> Handle {
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                let s = u32::try_from(self.slots.len()).ok().filter(|&s| s < FREE).expect("IndexedHeap is full");
                self.slots.push(Slot { generation: 0, pos: FREE });
                s
            }
        };
        let pos = self.nodes.len();
        self.nodes.push(Node { key, value, slot });
        self.slots[slot as usize].pos = pos as u32;
        self.sift_up(pos);
        Handle { slot, generation: self.slots[slot as usize].generation }
    }

    /// The top entry (smallest or largest key); O(1).
    pub fn peek(&self) -> Option<(Handle, &K, &V)> {
        self.nodes.first().map(|n| (self.handle_of(n), &n.key, &n.value))
    }

    /// Removes and returns the top entry; O(log n).
    pub fn pop(&mut self) -> Option<(K, V)> {
        let top = self.peek().map(|(h, _, _)| h)?;
        self.remove(top)
    }

    /// The entry a handle names, or `None` when it was removed.
    pub fn get(&self, h: Handle) -> Option<(&K, &V)> {
        let n = &self.nodes[self.pos(h)?];
        Some((&n.key, &n.value))
    }

    /// The value of an entry, to change in place (its key cannot change this way).
    pub fn value_mut(&mut self, h: Handle) -> Option<&mut V> {
        let pos = self.pos(h)?;
        Some(&mut self.nodes[pos].value)
    }

    pub fn contains(&self, h: Handle) -> bool {
        self.pos(h).is_some()
    }

    /// Gives an entry a new key and restores the heap order; O(log n). Returns the old key, or
    /// `None` (and changes nothing) when the handle is stale.
    pub fn update(&mut self, h: Handle, key: K) -> Option<K> {
        let pos = self.pos(h)?;
        let old = std::mem::replace(&mut self.nodes[pos].key, key);
        self.restore(pos);
        Some(old)
    }

    /// Removes an entry; O(log n). `None` when the handle is stale.
    pub fn remove(&mut self, h: Handle) -> Option<(K, V)> {
        let pos = self.pos(h)?;
        let last = self.nodes.len() - 1;
        self.swap(pos, last);
        let node = self.nodes.pop()?;
        let slot = &mut self.slots[node.slot as usize];
        slot.pos = FREE;
        slot.generation = slot.generation.wrapping_add(1);
        self.free_slots.push(node.slot);
        if pos < self.nodes.len() {
            self.restore(pos);
        }
        Some((node.key, node.value))
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Handle, &K, &V)> {
        self.nodes.iter().map(|n| (self.handle_of(n), &n.key, &n.value))
    }

    /// Calls `f` on every entry whose key satisfies `at_top`, in no particular order, visiting
    /// only those entries and their children: O(k) for k matches. `at_top` must be monotone in
    /// the heap's order (if it holds for a key, it holds for every key that would come out of
    /// the heap before it), as "key <= bound" is for a min-heap.
    pub fn for_each_top(&self, mut at_top: impl FnMut(&K) -> bool, mut f: impl FnMut(Handle, &K, &V)) {
        let mut stack = Vec::new();
        if !self.nodes.is_empty() {
            stack.push(0usize);
        }
        while let Some(i) = stack.pop() {
            let n = &self.nodes[i];
            if !at_top(&n.key) {
                continue;
            }
            f(self.handle_of(n), &n.key, &n.value);
            for c in [2 * i + 1, 2 * i + 2] {
                if c < self.nodes.len() {
                    stack.push(c);
                }
            }
        }
    }

    /// Removes every entry (outstanding handles become stale).
    pub fn clear(&mut self) {
        while self.pop().is_some() {}
    }

    /// Checks the heap order and the slot table; for tests. Returns what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        for (i, n) in self.nodes.iter().enumerate() {
            if i > 0 && self.before(&n.key, &self.nodes[(i - 1) / 2].key) {
                return Err(format!("node {i} comes before its parent"));
            }
            if self.slots.get(n.slot as usize).map(|s| s.pos) != Some(i as u32) {
                return Err(format!("node {i}'s slot {} does not point back to it", n.slot));
            }
        }
        let live = self.slots.iter().filter(|s| s.pos != FREE).count();
        if live != self.nodes.len() || live + self.free_slots.len() != self.slots.len() {
            return Err(format!(
                "{live} live slots, {} free, {} slots, {} nodes",
                self.free_slots.len(),
                self.slots.len(),
                self.nodes.len()
            ));
        }
        Ok(())
    }

    fn handle_of(&self, n: &Node<K, V>) -> Handle {
        Handle { slot: n.slot, generation: self.slots[n.slot as usize].generation }
    }

    fn pos(&self, h: Handle) -> Option<usize> {
        let s = self.slots.get(h.slot as usize)?;
        (s.generation == h.generation && s.pos != FREE).then_some(s.pos as usize)
    }

    /// Whether `a` must come out of the heap before `b`.
    fn before(&self, a: &K, b: &K) -> bool {
        match self.order {
            Order::Min => a < b,
            Order::Max => a > b,
        }
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.nodes.swap(i, j);
        self.slots[self.nodes[i].slot as usize].pos = i as u32;
        self.slots[self.nodes[j].slot as usize].pos = j as u32;
    }

    /// Moves the entry at `pos` up or down to where the order wants it.
    fn restore(&mut self, pos: usize) {
        if pos > 0 && self.before(&self.nodes[pos].key, &self.nodes[(pos - 1) / 2].key) {
            self.sift_up(pos);
        } else {
            self.sift_down(pos);
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.before(&self.nodes[i].key, &self.nodes[parent].key) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.nodes.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut best = i;
            if l < n && self.before(&self.nodes[l].key, &self.nodes[best].key) {
                best = l;
            }
            if r < n && self.before(&self.nodes[r].key, &self.nodes[best].key) {
                best = r;
            }
            if best == i {
                return;
            }
            self.swap(i, best);
            i = best;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_and_max_pop_in_order() {
        for order in [Order::Min, Order::Max] {
            let mut h = IndexedHeap::new(order);
            for k in [5, 1, 9, 3, 7, 3] {
                h.push(k, ());
            }
            let mut out = Vec::new();
            while let Some((k, ())) = h.pop() {
                out.push(k);
            }
            let mut want = vec![1, 3, 3, 5, 7, 9];
            if order == Order::Max {
                want.reverse();
            }
            assert_eq!(out, want);
        }
    }

    #[test]
    fn stale_handles_touch_nothing() {
        let mut h = IndexedHeap::new_min();
        let a = h.push(10, "a");
        assert_eq!(h.remove(a), Some((10, "a")));
        let b = h.push(20, "b"); // reuses a's slot
        assert_eq!(h.update(a, 1), None);
        assert_eq!(h.remove(a), None);
        assert_eq!(h.get(a), None);
        assert_eq!(h.get(b), Some((&20, &"b")));
        assert_eq!(h.peek().map(|(_, k, v)| (*k, *v)), Some((20, "b")));
    }

    #[test]
    fn update_moves_an_entry_both_ways() {
        let mut h = IndexedHeap::new_min();
        let hs: Vec<Handle> = (0..10).map(|k| h.push(k * 10, k)).collect();
        assert_eq!(h.update(hs[7], -1), Some(70));
        assert_eq!(h.peek().map(|(hd, k, _)| (hd, *k)), Some((hs[7], -1)));
        assert_eq!(h.update(hs[7], 1000), Some(-1));
        assert_eq!(h.peek().map(|(_, k, _)| *k), Some(0));
        h.validate().unwrap();
    }
}
