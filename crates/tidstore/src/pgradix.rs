//! `PgRadix`: PostgreSQL 17's dead-TID store, rebuilt from its source's description
//! (`src/backend/access/common/tidstore.c` over `src/include/lib/radixtree.h`).
//!
//! An adaptive radix tree (Leis et al., "The Adaptive Radix Tree", ICDE 2013) keyed by block
//! number, one key byte per level, no path compression; the tree is only as tall as the largest
//! key needs (the root's shift grows as keys do). Nodes come in four kinds:
//!
//! ```text
//!  Node4    count, 4 key bytes, 4 slots            40 B   linear search
//!  Node16   count, 16 key bytes, 16 slots         152 B   linear (PG: SIMD) search
//!  Node48   256-byte slot index, 48 slots         648 B   index lookup
//!  Node256  256 slots                            2056 B   direct
//! ```
//!
//! and grow 4 → 16 → 48 → 256 when full. Each kind lives in its own slab (`Vec`), with a
//! free list for the nodes that grew. A leaf slot holds the page's value, a
//! `BlocktableEntry`: when the page has at most 3 dead offsets (`NUM_FULL_OFFSETS` on 64-bit
//! platforms) they are embedded in the 8-byte slot itself; otherwise the slot points into a
//! bump allocator holding a header word and the offset bitmap (`ceil((max_offset + 1) / 64)`
//! 64-bit words), as PostgreSQL allocates them from a `BumpContext`.
//!
//! Slot encoding (low two bits): `0` empty, `1` node (`index << 4 | kind << 2`), `2` embedded
//! offsets (`count << 2`, offsets at bits 16, 32, 48), `3` bump entry (`index << 2`).

use crate::{check_page, grown_capacity, reserve_to, DeadTids, Full, Tid};

const TAG_NODE: u64 = 1;
const TAG_EMBED: u64 = 2;
const TAG_BUMP: u64 = 3;
const NONE48: u8 = 0xFF;

#[derive(Clone, Copy, Debug, Default)]
struct Node4 {
    count: u8,
    chunks: [u8; 4],
    children: [u64; 4],
}

#[derive(Clone, Copy, Debug, Default)]
struct Node16 {
    count: u8,
    chunks: [u8; 16],
    children: [u64; 16],
}

#[derive(Clone, Copy, Debug)]
struct Node48 {
    count: u8,
    slot: [u8; 256],
    children: [u64; 48],
}

#[derive(Clone, Copy, Debug)]
struct Node256 {
    count: u16,
    children: [u64; 256],
}

const NODE_BYTES: [usize; 4] = [
    std::mem::size_of::<Node4>(),
    std::mem::size_of::<Node16>(),
    std::mem::size_of::<Node48>(),
    std::mem::size_of::<Node256>(),
];

#[derive(Debug, Default)]
pub struct PgRadix {
    budget_bytes: usize,
    root: u64,
    /// Shift of the key byte the root node decides on (0, 8, 16 or 24).
    root_shift: u32,
    n4: Vec<Node4>,
    n16: Vec<Node16>,
    n48: Vec<Node48>,
    n256: Vec<Node256>,
    free: [Vec<u32>; 4],
    bump: Vec<u64>,
    num_tids: u64,
    last_block: Option<u32>,
}

#[inline(always)]
fn node_ref(kind: u64, idx: usize) -> u64 {
    (idx as u64) << 4 | kind << 2 | TAG_NODE
}

impl PgRadix {
    pub fn new(budget_bytes: usize) -> PgRadix {
        PgRadix { budget_bytes, ..Default::default() }
    }

    fn lens(&self) -> [(usize, usize); 4] {
        [
            (self.n4.len(), self.n4.capacity()),
            (self.n16.len(), self.n16.capacity()),
            (self.n48.len(), self.n48.capacity()),
            (self.n256.len(), self.n256.capacity()),
        ]
    }

    #[inline(always)]
    fn find_child(&self, node: u64, chunk: u8) -> u64 {
        let idx = (node >> 4) as usize;
        match (node >> 2) & 3 {
            0 => {
                let n = &self.n4[idx];
                for j in 0..usize::from(n.count) {
                    if n.chunks[j] == chunk {
                        return n.children[j];
                    }
                }
                0
            }
            1 => {
                let n = &self.n16[idx];
                let mut hit = 0u32;
                for (j, &c) in n.chunks.iter().enumerate() {
                    hit |= u32::from(c == chunk) << j;
                }
                hit &= (1u32 << n.count) - 1;
                if hit == 0 {
                    0
                } else {
                    n.children[hit.trailing_zeros() as usize]
                }
            }
            2 => {
                let n = &self.n48[idx];
                match n.slot[usize::from(chunk)] {
                    NONE48 => 0,
                    s => n.children[usize::from(s)],
                }
            }
            _ => self.n256[idx].children[usize::from(chunk)],
        }
    }

    fn alloc(&mut self, kind: usize) -> u64 {
        if let Some(i) = self.free[kind].pop() {
            let i = i as usize;
            match kind {
                0 => self.n4[i] = Node4::default(),
                1 => self.n16[i] = Node16::default(),
                2 => self.n48[i] = Node48 { count: 0, slot: [NONE48; 256], children: [0; 48] },
                _ => self.n256[i] = Node256 { count: 0, children: [0; 256] },
            }
            return node_ref(kind as u64, i);
        }
        let idx = match kind {
            0 => {
                self.n4.push(Node4::default());
                self.n4.len() - 1
            }
            1 => {
                self.n16.push(Node16::default());
                self.n16.len() - 1
            }
            2 => {
                self.n48.push(Node48 { count: 0, slot: [NONE48; 256], children: [0; 48] });
                self.n48.len() - 1
            }
            _ => {
                self.n256.push(Node256 { count: 0, children: [0; 256] });
                self.n256.len() - 1
            }
        };
        node_ref(kind as u64, idx)
    }

    /// Sets `chunk`'s slot in `node` to `child`, growing the node if it is full; returns the
    /// node's (possibly new) reference.
    fn set_child(&mut self, node: u64, chunk: u8, child: u64) -> u64 {
        let idx = (node >> 4) as usize;
        let kind = ((node >> 2) & 3) as usize;
        match kind {
            0 => {
                let n = &mut self.n4[idx];
                if sorted_insert(&mut n.count, &mut n.chunks, &mut n.children, chunk, child) {
                    return node;
                }
            }
            1 => {
                let n = &mut self.n16[idx];
                if sorted_insert(&mut n.count, &mut n.chunks, &mut n.children, chunk, child) {
                    return node;
                }
            }
            2 => {
                let n = &mut self.n48[idx];
                let s = n.slot[usize::from(chunk)];
                if s != NONE48 {
                    n.children[usize::from(s)] = child;
                    return node;
                }
                if usize::from(n.count) < 48 {
                    n.slot[usize::from(chunk)] = n.count;
                    n.children[usize::from(n.count)] = child;
                    n.count += 1;
                    return node;
                }
            }
            _ => {
                let n = &mut self.n256[idx];
                if n.children[usize::from(chunk)] == 0 {
                    n.count += 1;
                }
                n.children[usize::from(chunk)] = child;
                return node;
            }
        }
        let grown = self.grow(node);
        self.set_child(grown, chunk, child)
    }

    /// Copies a full node into a node of the next kind and frees it.
    fn grow(&mut self, node: u64) -> u64 {
        let idx = (node >> 4) as usize;
        let kind = ((node >> 2) & 3) as usize;
        let entries: Vec<(u8, u64)> = match kind {
            0 => {
                let n = self.n4[idx];
                (0..4).map(|j| (n.chunks[j], n.children[j])).collect()
            }
            1 => {
                let n = self.n16[idx];
                (0..16).map(|j| (n.chunks[j], n.children[j])).collect()
            }
            _ => {
                let n = self.n48[idx];
                (0..=255u8)
                    .filter(|&c| n.slot[usize::from(c)] != NONE48)
                    .map(|c| (c, n.children[usize::from(n.slot[usize::from(c)])]))
                    .collect()
            }
        };
        self.free[kind].push(idx as u32);
        let mut new = self.alloc(kind + 1);
        for (c, ch) in entries {
            new = self.set_child(new, c, ch);
        }
        new
    }

    fn insert_rec(&mut self, node: u64, shift: u32, key: u32, value: u64) -> u64 {
        let chunk = (key >> shift) as u8;
        if shift == 0 {
            return self.set_child(node, chunk, value);
        }
        let child = match self.find_child(node, chunk) {
            0 => self.alloc(0),
            c => c,
        };
        let new_child = self.insert_rec(child, shift - 8, key, value);
        self.set_child(node, chunk, new_child)
    }

    /// The value slot for a page (embedded offsets or a bump-allocated bitmap entry).
    fn make_value(&mut self, offsets: &[u16]) -> u64 {
        if offsets.len() <= 3 {
            let mut v = TAG_EMBED | (offsets.len() as u64) << 2;
            for (i, &o) in offsets.iter().enumerate() {
                v |= u64::from(o) << (16 * (i + 1));
            }
            return v;
        }
        let nwords = usize::from(offsets[offsets.len() - 1]) / 64 + 1;
        let at = self.bump.len();
        self.bump.push(nwords as u64);
        self.bump.resize(at + 1 + nwords, 0);
        for &o in offsets {
            self.bump[at + 1 + usize::from(o) / 64] |= 1 << (o % 64);
        }
        (at as u64) << 2 | TAG_BUMP
    }

    fn value_contains(&self, v: u64, o: u16) -> bool {
        if v & 3 == TAG_EMBED {
            let n = ((v >> 2) & 3) as usize;
            (1..=n).any(|i| (v >> (16 * i)) as u16 == o)
        } else {
            let at = (v >> 2) as usize;
            let nwords = self.bump[at] as usize;
            let w = usize::from(o) / 64;
            w < nwords && self.bump[at + 1 + w] >> (o % 64) & 1 != 0
        }
    }

    /// Capacities needed for one more page in the worst case (new nodes on every level,
    /// each level growing once, a new root), or `Full`.
    fn plan_capacity(&self, words: usize) -> Result<([usize; 4], usize, [usize; 4]), Full> {
        let lens = self.lens();
        let plan = |double: bool| {
            let mut caps = [0usize; 4];
            let mut total = 0usize;
            for k in 0..4 {
                let (len, cap) = lens[k];
                caps[k] = if double { grown_capacity(len, cap, 8, 16) } else { cap.max(len + 8) };
                total += caps[k] * NODE_BYTES[k];
            }
            let (bl, bc) = (self.bump.len(), self.bump.capacity());
            let bump = if double { grown_capacity(bl, bc, words, 512) } else { bc.max(bl + words) };
            let mut free = [0usize; 4];
            for (f, list) in free.iter_mut().zip(&self.free) {
                let (fl, fc) = (list.len(), list.capacity());
                *f = if double { grown_capacity(fl, fc, 8, 16) } else { fc.max(fl + 8) };
                total += *f * 4;
            }
            (caps, bump, free, total + bump * 8)
        };
        let (c, b, f, t) = plan(true);
        if t <= self.budget_bytes {
            return Ok((c, b, f));
        }
        let (c, b, f, t) = plan(false);
        if t <= self.budget_bytes {
            return Ok((c, b, f));
        }
        Err(Full)
    }
}

impl DeadTids for PgRadix {
    fn name(&self) -> &'static str {
        "pgradix"
    }

    fn add_page(&mut self, block: u32, offsets: &[u16]) -> Result<(), Full> {
        check_page(self.last_block, block, offsets);
        if offsets.is_empty() {
            return Ok(());
        }
        let words = if offsets.len() <= 3 { 0 } else { usize::from(offsets[offsets.len() - 1]) / 64 + 2 };
        let (caps, bump, free) = self.plan_capacity(words)?;
        reserve_to(&mut self.n4, caps[0]);
        reserve_to(&mut self.n16, caps[1]);
        reserve_to(&mut self.n48, caps[2]);
        reserve_to(&mut self.n256, caps[3]);
        reserve_to(&mut self.bump, bump);
        for (f, cap) in self.free.iter_mut().zip(free) {
            reserve_to(f, cap);
        }
        if self.root == 0 {
            self.root = self.alloc(0);
            self.root_shift = 0;
        }
        while self.root_shift < 24 && block >> (self.root_shift + 8) != 0 {
            let new_root = self.alloc(0);
            self.root = self.set_child(new_root, 0, self.root);
            self.root_shift += 8;
        }
        let value = self.make_value(offsets);
        self.root = self.insert_rec(self.root, self.root_shift, block, value);
        self.num_tids += offsets.len() as u64;
        self.last_block = Some(block);
        Ok(())
    }

    fn freeze(&mut self) {
        self.n4.shrink_to_fit();
        self.n16.shrink_to_fit();
        self.n48.shrink_to_fit();
        self.n256.shrink_to_fit();
        self.bump.shrink_to_fit();
        for f in &mut self.free {
            f.shrink_to_fit();
        }
    }

    fn contains(&self, tid: Tid) -> bool {
        if self.root == 0 || (self.root_shift < 24 && tid.block >> (self.root_shift + 8) != 0) {
            return false;
        }
        let mut slot = self.root;
        let mut shift = self.root_shift;
        loop {
            slot = self.find_child(slot, (tid.block >> shift) as u8);
            if slot == 0 {
                return false;
            }
            if shift == 0 {
                return self.value_contains(slot, tid.offset);
            }
            shift -= 8;
        }
    }

    fn for_each_page(&self, f: &mut dyn FnMut(u32, &[u16])) {
        if self.root == 0 {
            return;
        }
        let mut buf = Vec::new();
        self.walk(self.root, self.root_shift, 0, &mut buf, f);
    }

    fn memory_bytes(&self) -> usize {
        let lens = self.lens();
        (0..4).map(|k| lens[k].1 * NODE_BYTES[k] + self.free[k].capacity() * 4).sum::<usize>()
            + self.bump.capacity() * 8
    }

    fn num_tids(&self) -> u64 {
        self.num_tids
    }

    fn reset(&mut self) {
        *self = PgRadix::new(self.budget_bytes);
    }
}

impl PgRadix {
    /// Children of `node` in key order.
    fn children(&self, node: u64) -> Vec<(u8, u64)> {
        let idx = (node >> 4) as usize;
        match (node >> 2) & 3 {
            0 => {
                let n = &self.n4[idx];
                (0..usize::from(n.count)).map(|j| (n.chunks[j], n.children[j])).collect()
            }
            1 => {
                let n = &self.n16[idx];
                (0..usize::from(n.count)).map(|j| (n.chunks[j], n.children[j])).collect()
            }
            2 => {
                let n = &self.n48[idx];
                (0..=255u8)
                    .filter(|&c| n.slot[usize::from(c)] != NONE48)
                    .map(|c| (c, n.children[usize::from(n.slot[usize::from(c)])]))
                    .collect()
            }
            _ => {
                let n = &self.n256[idx];
                (0..=255u8)
                    .filter(|&c| n.children[usize::from(c)] != 0)
                    .map(|c| (c, n.children[usize::from(c)]))
                    .collect()
            }
        }
    }

    fn walk(&self, node: u64, shift: u32, prefix: u32, buf: &mut Vec<u16>, f: &mut dyn FnMut(u32, &[u16])) {
        for (c, child) in self.children(node) {
            let key = prefix | u32::from(c) << shift;
            if shift > 0 {
                self.walk(child, shift - 8, key, buf, f);
                continue;
            }
            buf.clear();
            if child & 3 == TAG_EMBED {
                let n = ((child >> 2) & 3) as usize;
                buf.extend((1..=n).map(|i| (child >> (16 * i)) as u16));
            } else {
                let at = (child >> 2) as usize;
                let nwords = self.bump[at] as usize;
                for w in 0..nwords {
                    let mut word = self.bump[at + 1 + w];
                    while word != 0 {
                        buf.push((w * 64) as u16 + word.trailing_zeros() as u16);
                        word &= word - 1;
                    }
                }
            }
            f(key, buf);
        }
    }
}

/// Sets `chunk`'s child in a small node kept sorted by chunk (the 4- and 16-slot kinds):
/// replaces an existing entry or inserts in order. Returns false when the node is full.
fn sorted_insert<const N: usize>(
    count: &mut u8,
    chunks: &mut [u8; N],
    children: &mut [u64; N],
    chunk: u8,
    child: u64,
) -> bool {
    let cnt = usize::from(*count);
    if let Some(j) = chunks[..cnt].iter().position(|&c| c == chunk) {
        children[j] = child;
        return true;
    }
    if cnt == N {
        return false;
    }
    let j = chunks[..cnt].iter().position(|&c| c > chunk).unwrap_or(cnt);
    chunks.copy_within(j..cnt, j + 1);
    children.copy_within(j..cnt, j + 1);
    chunks[j] = chunk;
    children[j] = child;
    *count += 1;
    true
}
