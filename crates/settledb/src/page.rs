//! Slotted 8 KB pages (contract skeleton).
use crate::error::Result;
use crate::types::{BlockNumber, Lsn, OffsetNumber, Oid, Xid};

pub const BLCKSZ: usize = 8192;
pub const PAGE_HEADER_SIZE: usize = 24;
pub const ITEM_ID_SIZE: usize = 4;
pub const MAX_HEAP_TUPLES_PER_PAGE: usize = 291;
pub const PD_HAS_FREE_LINES: u16 = 0x0001;
pub const PD_PAGE_FULL: u16 = 0x0002;
pub const PD_ALL_VISIBLE: u16 = 0x0004;

pub const fn maxalign(n: usize) -> usize {
    (n + 7) & !7
}

#[repr(C, align(8))]
#[derive(Clone)]
pub struct PageBuf(pub [u8; BLCKSZ]);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LpFlags {
    Unused = 0,
    Normal = 1,
    Redirect = 2,
    Dead = 3,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ItemId {
    pub off: u16,
    pub flags: LpFlags,
    pub len: u16,
}

pub fn init(_page: &mut [u8], _special_size: usize) { todo!() }
pub fn is_new(_page: &[u8]) -> bool { todo!() }
pub fn lsn(_page: &[u8]) -> Lsn { todo!() }
pub fn set_lsn(_page: &mut [u8], _lsn: Lsn) { todo!() }
pub fn flags(_page: &[u8]) -> u16 { todo!() }
pub fn set_flags(_page: &mut [u8], _flags: u16) { todo!() }
pub fn lower(_page: &[u8]) -> u16 { todo!() }
pub fn upper(_page: &[u8]) -> u16 { todo!() }
pub fn special(_page: &[u8]) -> u16 { todo!() }
pub fn prune_xid(_page: &[u8]) -> Xid { todo!() }
pub fn set_prune_xid(_page: &mut [u8], _xid: Xid) { todo!() }
pub fn max_offset(_page: &[u8]) -> u16 { todo!() }
pub fn item_id(_page: &[u8], _off: OffsetNumber) -> ItemId { todo!() }
pub fn set_item_id(_page: &mut [u8], _off: OffsetNumber, _id: ItemId) { todo!() }
pub fn item(_page: &[u8], _off: OffsetNumber) -> &[u8] { todo!() }
pub fn item_mut(_page: &mut [u8], _off: OffsetNumber) -> &mut [u8] { todo!() }
pub fn free_space(_page: &[u8]) -> usize { todo!() }
pub fn heap_free_space(_page: &[u8]) -> usize { todo!() }
pub fn add_item(_page: &mut [u8], _data: &[u8], _offset: Option<OffsetNumber>, _is_heap: bool) -> Option<OffsetNumber> { todo!() }
pub fn repair_fragmentation(_page: &mut [u8]) { todo!() }
pub fn truncate_line_pointer_array(_page: &mut [u8]) { todo!() }
pub fn compute_checksum(_page: &[u8], _block: BlockNumber) -> u16 { todo!() }
pub fn set_checksum(_page: &mut [u8], _block: BlockNumber) { todo!() }
pub fn verify(_page: &[u8], _rel: Oid, _block: BlockNumber) -> Result<()> { todo!() }
pub fn validate_items(_page: &[u8], _rel: Oid, _block: BlockNumber) -> Result<()> { todo!() }
pub fn describe(_page: &[u8]) -> String { todo!() }
