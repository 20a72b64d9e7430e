//! The control file (contract skeleton).
use crate::types::{FullXid, Lsn, Oid, Xid};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbState {
    ShutDown,
    InProduction,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlFile {
    pub version: u32,
    pub system_id: u64,
    pub state: DbState,
    pub checkpoint_lsn: Lsn,
    pub redo_lsn: Lsn,
    pub next_xid: FullXid,
    pub oldest_xid: Xid,
    pub next_oid: Oid,
    pub time_secs: u64,
}
