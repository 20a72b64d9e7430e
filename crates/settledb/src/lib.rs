//! settledb: an embeddable, crash-safe MVCC storage engine built the way PostgreSQL's heap is
//! built. See `ARCHITECTURE.md` at the repository root for the codemap and invariants.

pub mod error;
pub mod io;
pub mod page;
pub mod types;
pub mod wal;
pub mod xact;
pub mod heap;

pub use error::{Error, Result};
