//! `Array6`: PostgreSQL <= 16's dead-TID store (`vacuumlazy.c`, `LVDeadItems`/`VacDeadItems`).
//!
//! A sorted array of 6-byte `ItemPointerData` (block number as two 16-bit halves, then the
//! offset), looked up with `bsearch` after a range pre-check (`lazy_tid_reaped`: "if the TID
//! is less than the smallest or greater than the largest, it can't be dead"). 6 bytes per TID,
//! whatever the distribution; `log2 n` dependent cache misses per random lookup.

use crate::{check_page, grown_capacity, reserve_to, DeadTids, Full, Tid};

/// `ItemPointerData`: `bi_hi`, `bi_lo`, `ip_posid`.
type Item = [u16; 3];

const _: () = assert!(std::mem::size_of::<Item>() == 6);

#[inline(always)]
fn key(i: &Item) -> u64 {
    (u64::from(i[0]) << 32) | (u64::from(i[1]) << 16) | u64::from(i[2])
}

#[inline(always)]
fn tid_key(t: Tid) -> u64 {
    (u64::from(t.block) << 16) | u64::from(t.offset)
}

#[derive(Debug, Default)]
pub struct Array6 {
    budget_bytes: usize,
    items: Vec<Item>,
    last_block: Option<u32>,
}

impl Array6 {
    pub fn new(budget_bytes: usize) -> Array6 {
        Array6 { budget_bytes, ..Default::default() }
    }
}

impl DeadTids for Array6 {
    fn name(&self) -> &'static str {
        "array6"
    }

    fn add_page(&mut self, block: u32, offsets: &[u16]) -> Result<(), Full> {
        check_page(self.last_block, block, offsets);
        if offsets.is_empty() {
            return Ok(());
        }
        let need = self.items.len() + offsets.len();
        if need * 6 > self.budget_bytes {
            return Err(Full);
        }
        let cap =
            grown_capacity(self.items.len(), self.items.capacity(), offsets.len(), 1024).min(self.budget_bytes / 6);
        reserve_to(&mut self.items, cap);
        let (hi, lo) = ((block >> 16) as u16, block as u16);
        self.items.extend(offsets.iter().map(|&o| [hi, lo, o]));
        self.last_block = Some(block);
        Ok(())
    }

    fn freeze(&mut self) {
        self.items.shrink_to_fit();
    }

    fn contains(&self, tid: Tid) -> bool {
        let (Some(first), Some(last)) = (self.items.first(), self.items.last()) else {
            return false;
        };
        let k = tid_key(tid);
        if k < key(first) || k > key(last) {
            return false;
        }
        self.items.binary_search_by(|i| key(i).cmp(&k)).is_ok()
    }

    fn for_each_page(&self, f: &mut dyn FnMut(u32, &[u16])) {
        let mut buf = Vec::new();
        let mut i = 0;
        while i < self.items.len() {
            let block = (u32::from(self.items[i][0]) << 16) | u32::from(self.items[i][1]);
            buf.clear();
            while i < self.items.len() && self.items[i][..2] == [(block >> 16) as u16, block as u16] {
                buf.push(self.items[i][2]);
                i += 1;
            }
            f(block, &buf);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.items.capacity() * 6
    }

    fn num_tids(&self) -> u64 {
        self.items.len() as u64
    }

    fn reset(&mut self) {
        *self = Array6::new(self.budget_bytes);
    }
}
