//! Write-ahead log. (Contract skeleton: the implementation replaces every `todo!` body.)

pub mod control;

use std::path::Path;
use std::sync::Arc;

use crate::error::Result;
use crate::io::FileSystem;
use crate::types::{BufferTag, Lsn, Xid};

/// Resource managers: who writes a record and whose redo routine replays it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum Rmgr {
    Xlog = 0,
    Xact = 1,
    Clog = 2,
    Storage = 3,
    Heap = 4,
    Heap2 = 5,
    Btree = 6,
    Catalog = 7,
}

impl Rmgr {
    pub fn from_u8(v: u8) -> Option<Rmgr> {
        Some(match v {
            0 => Rmgr::Xlog,
            1 => Rmgr::Xact,
            2 => Rmgr::Clog,
            3 => Rmgr::Storage,
            4 => Rmgr::Heap,
            5 => Rmgr::Heap2,
            6 => Rmgr::Btree,
            7 => Rmgr::Catalog,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Rmgr::Xlog => "XLOG",
            Rmgr::Xact => "Transaction",
            Rmgr::Clog => "CLOG",
            Rmgr::Storage => "Storage",
            Rmgr::Heap => "Heap",
            Rmgr::Heap2 => "Heap2",
            Rmgr::Btree => "Btree",
            Rmgr::Catalog => "Catalog",
        }
    }
}

/// One block a record changes.
pub struct BlockRef<'a> {
    pub id: u8,
    pub tag: BufferTag,
    /// The record's redo initializes the page from nothing: never attach an image.
    pub will_init: bool,
    /// The page as it is *after* the change (the caller holds its exclusive lock); the WAL
    /// attaches it as a full-page image when the page's LSN is at or before the redo pointer
    /// and full_page_writes is on. `None`: never an image for this block.
    pub page: Option<&'a [u8]>,
    /// Per-block data for redo (used when no image is attached, or always when `keep_data`).
    pub data: Vec<u8>,
}

/// A record under construction.
pub struct RecordBuilder<'a> {
    pub rmgr: Rmgr,
    pub info: u8,
    pub xid: Xid,
    pub blocks: Vec<BlockRef<'a>>,
    pub main_data: Vec<u8>,
}

/// A record read back from the WAL.
#[derive(Debug, Clone)]
pub struct DecodedRecord {
    pub lsn: Lsn,
    pub end_lsn: Lsn,
    pub prev: Lsn,
    pub xid: Xid,
    pub rmgr: Rmgr,
    pub info: u8,
    pub blocks: Vec<DecodedBlock>,
    pub main_data: Vec<u8>,
}

#[derive(Debug, Clone)]
pub struct DecodedBlock {
    pub id: u8,
    pub tag: BufferTag,
    pub will_init: bool,
    pub image: Option<Box<[u8; crate::page::BLCKSZ]>>,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    pub records: u64,
    pub fpi: u64,
    pub bytes: u64,
}

pub struct WalConfig {
    pub segment_size: u64,
    pub full_page_writes: bool,
    pub wal_buffers_bytes: usize,
}

pub struct Wal {}

impl Wal {
    pub fn open(_fs: Arc<dyn FileSystem>, _dir: &Path, _start: Lsn, _prev: Lsn, _config: WalConfig) -> Result<Wal> {
        todo!()
    }
    pub fn insert(&self, _rec: &RecordBuilder<'_>) -> Result<Lsn> {
        todo!()
    }
    pub fn flush(&self, _upto: Lsn) -> Result<()> {
        todo!()
    }
    pub fn flushed_lsn(&self) -> Lsn {
        todo!()
    }
    pub fn insert_lsn(&self) -> Lsn {
        todo!()
    }
    pub fn redo_ptr(&self) -> Lsn {
        todo!()
    }
    pub fn begin_checkpoint(&self) -> Lsn {
        todo!()
    }
    pub fn stats(&self) -> WalStats {
        todo!()
    }
    pub fn remove_segments_before(&self, _lsn: Lsn) -> Result<usize> {
        todo!()
    }
}
