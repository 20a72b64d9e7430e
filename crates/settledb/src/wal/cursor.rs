//! Reading a record's main data and block data.

use crate::error::{Error, Result};
use crate::types::Lsn;

/// A little-endian cursor over record bytes that reports truncation as a WAL error.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    lsn: Lsn,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8], lsn: Lsn) -> Cursor<'a> {
        Cursor { buf, pos: 0, lsn }
    }

    /// The LSN of the record being read (for errors).
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or_else(|| {
            Error::corrupt_wal(self.lsn, format!("record data truncated: wanted {n} bytes at {}", self.pos))
        })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self) -> Result<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self) -> Result<u64> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }
}
