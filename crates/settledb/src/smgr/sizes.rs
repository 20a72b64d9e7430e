//! The durable length of every relation's main fork as of the last checkpoint
//! (`global/pg_relsize`), so that a data file cut short is found instead of read as shorter.
//!
//! A relation file only ever shrinks by a logged truncation (`STORAGE_TRUNCATE`, VACUUM's
//! truncation) or by being dropped. Anything else that leaves it shorter than it was at a
//! checkpoint (a file restored from the wrong backup, a copy cut off, a file system that lost
//! its tail) would otherwise go unnoticed when the file ends on a block boundary: the blocks
//! past the end simply do not exist, and their rows vanish from every scan. PostgreSQL finds it
//! only when something reads such a block ("could not read block … read only 0 of 8192
//! bytes"); settledb keeps each main fork's length at the last checkpoint and compares it
//! with what recovery leaves, at every open and in `check`.
//!
//! ```text
//!   checkpoint   fsync a fork  ->  sizes[fork] = its length now (blocks)
//!                truncate      ->  sizes[fork] = the new length; drop -> forgotten
//!                then, if any changed, write global/pg_relsize (temp file, fsync, rename,
//!                fsync of global/) before the control file names the checkpoint
//!   open         read it; redo of a truncation lowers the entry; after recovery, a fork of a
//!                live relation shorter than its entry is cut short: reported (log, `check`),
//!                and a read of a missing block is an error naming the file and the range
//! ```
//!
//! FSM and VM forks are not tracked: PostgreSQL reads their missing pages as zeros, and both
//! are rebuilt by VACUUM. An entry may be lower than the truth (a truncation replayed after the
//! map was written), never higher: every length it records was fsynced first.
//!
//! # Format (little-endian)
//!
//! ```text
//!   magic "RSZ1" | count u32 | count x (relfilenode u32, blocks u32), ascending | CRC-32C u32
//! ```

use rustc_hash::FxHashMap;

use crate::error::{Error, Result};
use crate::types::Oid;

const MAGIC: &[u8; 4] = b"RSZ1";

/// The file's name under `global/`.
pub const FILE_NAME: &str = "pg_relsize";

/// The lengths, and whether they changed since the file was last written.
#[derive(Debug, Default)]
pub struct Sizes {
    pub blocks: FxHashMap<Oid, u32>,
    pub dirty: bool,
}

impl Sizes {
    pub fn set(&mut self, rel: Oid, blocks: u32) {
        if self.blocks.insert(rel, blocks) != Some(blocks) {
            self.dirty = true;
        }
    }

    pub fn forget(&mut self, rel: Oid) {
        if self.blocks.remove(&rel).is_some() {
            self.dirty = true;
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut entries: Vec<(Oid, u32)> = self.blocks.iter().map(|(&r, &n)| (r, n)).collect();
        entries.sort_unstable_by_key(|&(r, _)| r.0);
        let mut v = Vec::with_capacity(12 + entries.len() * 8);
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for (r, n) in entries {
            v.extend_from_slice(&r.0.to_le_bytes());
            v.extend_from_slice(&n.to_le_bytes());
        }
        let crc = crate::crc::crc32c(&v);
        v.extend_from_slice(&crc.to_le_bytes());
        v
    }

    /// Decodes the file's bytes; `path` names it in the error.
    pub fn decode(bytes: &[u8], path: &std::path::Path) -> Result<Sizes> {
        let bad = |detail: String| Error::CorruptFile { path: path.to_path_buf(), detail };
        if bytes.len() < 12 || &bytes[..4] != MAGIC {
            return Err(bad(format!("not a relation size map ({} bytes, no RSZ1 header)", bytes.len())));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let want = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        let got = crate::crc::crc32c(body);
        if got != want {
            return Err(bad(format!("checksum {got:08X} does not match the stored {want:08X}")));
        }
        let count = u32::from_le_bytes([body[4], body[5], body[6], body[7]]) as usize;
        let entries = &body[8..];
        if entries.len() != count.saturating_mul(8) {
            return Err(bad(format!("{count} entries announced, {} bytes of entries", entries.len())));
        }
        let mut blocks = FxHashMap::default();
        for e in entries.chunks_exact(8) {
            let rel = Oid(u32::from_le_bytes([e[0], e[1], e[2], e[3]]));
            blocks.insert(rel, u32::from_le_bytes([e[4], e[5], e[6], e[7]]));
        }
        Ok(Sizes { blocks, dirty: false })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage_is_an_error_naming_the_file() {
        let mut s = Sizes::default();
        s.set(Oid(16385), 40);
        s.set(Oid(16390), 0);
        assert!(s.dirty);
        let bytes = s.encode();
        let path = std::path::Path::new("global/pg_relsize");
        let back = Sizes::decode(&bytes, path).unwrap();
        assert_eq!(back.blocks, s.blocks);
        assert!(!back.dirty);
        for cut in [0, 3, 11, bytes.len() - 1] {
            let e = Sizes::decode(&bytes[..cut], path).unwrap_err().to_string();
            assert!(e.contains("global/pg_relsize"), "{e}");
        }
        let mut flipped = bytes.clone();
        flipped[9] ^= 1;
        assert!(Sizes::decode(&flipped, path).unwrap_err().to_string().contains("checksum"));
        let mut same = Sizes::decode(&bytes, path).unwrap();
        same.set(Oid(16385), 40);
        assert!(!same.dirty, "setting the same length changes nothing");
        same.forget(Oid(1));
        assert!(!same.dirty);
    }
}
