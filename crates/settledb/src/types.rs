//! Identifiers shared by every layer: transaction IDs, WAL positions, block and line-pointer
//! numbers, tuple IDs and object IDs.
//!
//! Each identifier is a newtype so the compiler keeps a block number from being passed where
//! an offset is expected. The rules follow PostgreSQL:
//!
//! * [`Xid`] is the 32-bit transaction ID stored in tuple headers. XIDs 0, 1 and 2 are special
//!   (invalid, bootstrap, frozen); normal XIDs start at 3 and are compared *modulo 2^31*
//!   (`transam.c`'s `TransactionIdPrecedes`): of two normal XIDs, the one up to 2^31 - 1 steps
//!   behind the other is older, so the counter may wrap around 2^32 as long as no live XID is
//!   more than 2^31 behind the newest one.
//! * [`FullXid`] is the 64-bit form (epoch in the high 32 bits) used in memory, so that XID
//!   age arithmetic never has to reason about wraparound.
//! * [`Lsn`] is a byte position in the WAL stream, displayed `X/Y` like `pg_lsn`.

use std::fmt;

/// A 32-bit transaction ID as stored on disk.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Xid(pub u32);

impl Xid {
    pub const INVALID: Xid = Xid(0);
    pub const BOOTSTRAP: Xid = Xid(1);
    pub const FROZEN: Xid = Xid(2);
    pub const FIRST_NORMAL: Xid = Xid(3);

    /// True for XIDs assigned to real transactions (>= 3).
    pub fn is_normal(self) -> bool {
        self.0 >= Self::FIRST_NORMAL.0
    }

    pub fn is_valid(self) -> bool {
        self.0 != 0
    }

    /// `self` is logically older than `other` (PostgreSQL's `TransactionIdPrecedes`).
    /// Special XIDs compare as plain integers and are older than every normal XID.
    pub fn precedes(self, other: Xid) -> bool {
        if !self.is_normal() || !other.is_normal() {
            return self.0 < other.0;
        }
        (self.0.wrapping_sub(other.0) as i32) < 0
    }

    pub fn precedes_or_equals(self, other: Xid) -> bool {
        self == other || self.precedes(other)
    }

    pub fn follows(self, other: Xid) -> bool {
        other.precedes(self)
    }

    pub fn follows_or_equals(self, other: Xid) -> bool {
        self == other || other.precedes(self)
    }

    /// The next normal XID after this one, skipping the special values on wraparound.
    pub fn next_normal(self) -> Xid {
        let n = self.0.wrapping_add(1);
        if n < Self::FIRST_NORMAL.0 {
            Self::FIRST_NORMAL
        } else {
            Xid(n)
        }
    }
}

impl fmt::Debug for Xid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for Xid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A 64-bit transaction ID: epoch in the high half, the on-disk [`Xid`] in the low half.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FullXid(pub u64);

impl FullXid {
    pub fn new(epoch: u32, xid: Xid) -> FullXid {
        FullXid((u64::from(epoch) << 32) | u64::from(xid.0))
    }

    pub fn epoch(self) -> u32 {
        (self.0 >> 32) as u32
    }

    pub fn xid(self) -> Xid {
        Xid(self.0 as u32)
    }

    /// The following full XID, skipping the special 32-bit values 0..=2 after a wrap.
    pub fn next(self) -> FullXid {
        let mut n = self.0 + 1;
        if (n as u32) < Xid::FIRST_NORMAL.0 {
            n = (n & !0xffff_ffff) | u64::from(Xid::FIRST_NORMAL.0);
        }
        FullXid(n)
    }

    /// Widens a 32-bit XID known to be within 2^31 of `self` (before or after) to 64 bits.
    pub fn widen(self, xid: Xid) -> FullXid {
        if !xid.is_normal() {
            return FullXid(u64::from(xid.0));
        }
        let diff = xid.0.wrapping_sub(self.xid().0) as i32;
        let v = self.0 as i64 + i64::from(diff);
        FullXid(v.max(0) as u64)
    }
}

impl fmt::Debug for FullXid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.epoch(), self.xid().0)
    }
}

impl fmt::Display for FullXid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A byte position in the WAL stream.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl Lsn {
    pub const INVALID: Lsn = Lsn(0);
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 as u32)
    }
}

impl fmt::Debug for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A page number within one fork of a relation.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BlockNumber(pub u32);

impl BlockNumber {
    pub const INVALID: BlockNumber = BlockNumber(u32::MAX);
}

impl fmt::Debug for BlockNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for BlockNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A 1-based line pointer number within a page.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct OffsetNumber(pub u16);

impl OffsetNumber {
    pub const INVALID: OffsetNumber = OffsetNumber(0);
    pub const FIRST: OffsetNumber = OffsetNumber(1);

    pub fn next(self) -> OffsetNumber {
        OffsetNumber(self.0 + 1)
    }
}

impl fmt::Debug for OffsetNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for OffsetNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A tuple ID: the block and line pointer of a tuple version (`ItemPointerData`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tid {
    pub block: BlockNumber,
    pub offset: OffsetNumber,
}

impl Tid {
    pub const INVALID: Tid = Tid { block: BlockNumber::INVALID, offset: OffsetNumber::INVALID };

    pub fn new(block: u32, offset: u16) -> Tid {
        Tid { block: BlockNumber(block), offset: OffsetNumber(offset) }
    }

    /// Encodes as 6 little-endian bytes (block then offset), the on-disk form.
    pub fn to_bytes(self) -> [u8; 6] {
        let mut b = [0u8; 6];
        b[..4].copy_from_slice(&self.block.0.to_le_bytes());
        b[4..].copy_from_slice(&self.offset.0.to_le_bytes());
        b
    }

    pub fn from_bytes(b: [u8; 6]) -> Tid {
        Tid {
            block: BlockNumber(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            offset: OffsetNumber(u16::from_le_bytes([b[4], b[5]])),
        }
    }
}

impl fmt::Debug for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({},{})", self.block.0, self.offset.0)
    }
}

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// An object ID: names relations in the catalog and their files on disk.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Oid(pub u32);

impl Oid {
    pub const INVALID: Oid = Oid(0);
}

impl fmt::Debug for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for Oid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The forks of a relation, each its own file (`relpath.h`'s `ForkNumber`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum Fork {
    Main = 0,
    Fsm = 1,
    Vm = 2,
}

impl Fork {
    pub fn from_u8(v: u8) -> Option<Fork> {
        match v {
            0 => Some(Fork::Main),
            1 => Some(Fork::Fsm),
            2 => Some(Fork::Vm),
            _ => None,
        }
    }

    /// File name suffix: `""`, `"_fsm"`, `"_vm"` as PostgreSQL names them.
    /// PostgreSQL's fork name (`forkNames[]`): "main", "fsm", "vm".
    pub fn name(self) -> &'static str {
        match self {
            Fork::Main => "main",
            Fork::Fsm => "fsm",
            Fork::Vm => "vm",
        }
    }

    pub fn suffix(self) -> &'static str {
        match self {
            Fork::Main => "",
            Fork::Fsm => "_fsm",
            Fork::Vm => "_vm",
        }
    }
}

/// Identifies one page of one fork of one relation file: the buffer pool's lookup key and
/// what WAL block references name.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct BufferTag {
    pub rel: Oid,
    pub fork: Fork,
    pub block: BlockNumber,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_comparison_wraps_modulo_2_31() {
        assert!(Xid(3).precedes(Xid(4)));
        assert!(Xid(u32::MAX).precedes(Xid(3)), "the XID just before a wrap is older");
        assert!(Xid(3 + (1 << 31) + 1).precedes(Xid(3)), "more than 2^31 ahead reads as behind");
        assert!(Xid::FROZEN.precedes(Xid(3)));
        assert!(Xid::FROZEN.precedes(Xid(u32::MAX)));
    }

    #[test]
    fn full_xid_skips_special_values_on_wrap() {
        let f = FullXid::new(0, Xid(u32::MAX));
        assert_eq!(f.next(), FullXid::new(1, Xid(3)));
        let base = FullXid::new(5, Xid(10));
        assert_eq!(base.widen(Xid(u32::MAX - 5)), FullXid::new(4, Xid(u32::MAX - 5)));
        assert_eq!(base.widen(Xid(100)), FullXid::new(5, Xid(100)));
    }

    #[test]
    fn lsn_displays_like_pg_lsn() {
        assert_eq!(Lsn(0x1_0000_00A0).to_string(), "1/A0");
    }

    #[test]
    fn tid_round_trips_through_bytes() {
        let t = Tid::new(123_456, 291);
        assert_eq!(Tid::from_bytes(t.to_bytes()), t);
    }
}
