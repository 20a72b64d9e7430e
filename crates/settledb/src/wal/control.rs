//! The control file (PostgreSQL's `pg_control`): the few facts recovery needs before it can
//! read anything else: where the last checkpoint record is, its redo pointer, the next XID and
//! OID, whether the cluster was shut down cleanly, and the WAL settings the data directory
//! was created with.
//!
//! # Format (80 bytes, little-endian)
//!
//! ```text
//!  0 magic "SDBC"          4 format version u32    8 system_id u64
//! 16 state u8 (0 shut down, 1 in production)     17 full_page_writes u8
//! 18 wal_level u8 (0 not recorded, 1 replica, 2 logical)                   19 pad 1
//! 20 wal_segment_size u64 28 checkpoint_lsn u64   36 prev_checkpoint_lsn u64
//! 44 redo_lsn u64         52 next_xid u64 (full)  60 oldest_xid u32
//! 64 next_oid u32         68 time_secs u64        76 CRC-32C of bytes 0..76, u32
//! ```
//!
//! The magic and version are checked before the length and CRC, so a file written by another
//! format version reports [`Error::VersionMismatch`] rather than corruption.
//!
//! # Durability
//!
//! [`ControlFile::write`] writes `<path>.tmp`, fsyncs it, renames it over `<path>` and fsyncs
//! the directory: a crash leaves either the old or the new file, never a torn one.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::io::FileSystem;
use crate::types::{FullXid, Lsn, Oid, Xid};

/// The control file format this build reads and writes.
pub const CONTROL_FORMAT_VERSION: u32 = 1;
/// Magic bytes at the start of the control file.
pub const CONTROL_MAGIC: [u8; 4] = *b"SDBC";
/// Encoded size of the control file.
pub const CONTROL_FILE_SIZE: usize = 80;

const CRC_AT: usize = CONTROL_FILE_SIZE - 4;

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
    /// The checkpoint before `checkpoint_lsn` (for diagnostics; PostgreSQL ≤ 10 fell back to it).
    pub prev_checkpoint_lsn: Lsn,
    /// The WAL segment size the cluster was created with; the WAL cannot be read with another.
    pub wal_segment_size: u64,
    pub full_page_writes: bool,
    /// The `wal_level` the WAL since the last checkpoint was written at (`WalLevel::to_u8`;
    /// 0 in a file written before the field existed: treated as `replica`).
    pub wal_level: u8,
}

impl ControlFile {
    /// A control file for a new cluster: no checkpoint yet, shut down.
    pub fn new(system_id: u64, wal_segment_size: u64) -> ControlFile {
        ControlFile {
            version: CONTROL_FORMAT_VERSION,
            system_id,
            state: DbState::ShutDown,
            checkpoint_lsn: Lsn::INVALID,
            redo_lsn: Lsn::INVALID,
            next_xid: FullXid(u64::from(Xid::FIRST_NORMAL.0)),
            oldest_xid: Xid::FIRST_NORMAL,
            next_oid: Oid(16384),
            time_secs: 0,
            prev_checkpoint_lsn: Lsn::INVALID,
            wal_segment_size,
            full_page_writes: true,
            wal_level: 0,
        }
    }

    /// The encoded bytes, CRC included.
    pub fn encode(&self) -> [u8; CONTROL_FILE_SIZE] {
        let mut b = [0u8; CONTROL_FILE_SIZE];
        b[0..4].copy_from_slice(&CONTROL_MAGIC);
        b[4..8].copy_from_slice(&self.version.to_le_bytes());
        b[8..16].copy_from_slice(&self.system_id.to_le_bytes());
        b[16] = match self.state {
            DbState::ShutDown => 0,
            DbState::InProduction => 1,
        };
        b[17] = u8::from(self.full_page_writes);
        b[18] = self.wal_level;
        b[20..28].copy_from_slice(&self.wal_segment_size.to_le_bytes());
        b[28..36].copy_from_slice(&self.checkpoint_lsn.0.to_le_bytes());
        b[36..44].copy_from_slice(&self.prev_checkpoint_lsn.0.to_le_bytes());
        b[44..52].copy_from_slice(&self.redo_lsn.0.to_le_bytes());
        b[52..60].copy_from_slice(&self.next_xid.0.to_le_bytes());
        b[60..64].copy_from_slice(&self.oldest_xid.0.to_le_bytes());
        b[64..68].copy_from_slice(&self.next_oid.0.to_le_bytes());
        b[68..76].copy_from_slice(&self.time_secs.to_le_bytes());
        let crc = crate::crc::crc32c(&b[..CRC_AT]);
        b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes bytes read from `path` (named in errors).
    pub fn decode(bytes: &[u8], path: &Path) -> Result<ControlFile> {
        let corrupt = |detail: String| Error::CorruptFile { path: path.to_path_buf(), detail };
        if bytes.get(0..4) != Some(&CONTROL_MAGIC[..]) {
            return Err(corrupt("not a settledb control file (bad magic number)".into()));
        }
        let version = le_u32(bytes, 4).ok_or_else(|| corrupt("truncated version field".into()))?;
        if version != CONTROL_FORMAT_VERSION {
            return Err(Error::VersionMismatch {
                path: path.to_path_buf(),
                found: version,
                expected: CONTROL_FORMAT_VERSION,
            });
        }
        if bytes.len() != CONTROL_FILE_SIZE {
            return Err(corrupt(format!("length is {} bytes, expected {CONTROL_FILE_SIZE}", bytes.len())));
        }
        let stored = le_u32(bytes, CRC_AT).unwrap_or(0);
        let computed = crate::crc::crc32c(&bytes[..CRC_AT]);
        if stored != computed {
            return Err(corrupt(format!("incorrect checksum: stored {stored:08X}, computed {computed:08X}")));
        }
        let u64_at = |at| le_u64(bytes, at).unwrap_or(0);
        let u32_at = |at| le_u32(bytes, at).unwrap_or(0);
        let state = match bytes[16] {
            0 => DbState::ShutDown,
            1 => DbState::InProduction,
            s => return Err(corrupt(format!("invalid database state {s}"))),
        };
        let full_page_writes = match bytes[17] {
            0 => false,
            1 => true,
            v => return Err(corrupt(format!("invalid full_page_writes flag {v}"))),
        };
        if bytes[18] > 2 {
            return Err(corrupt(format!("invalid wal_level {}", bytes[18])));
        }
        Ok(ControlFile {
            wal_level: bytes[18],
            version,
            system_id: u64_at(8),
            state,
            full_page_writes,
            wal_segment_size: u64_at(20),
            checkpoint_lsn: Lsn(u64_at(28)),
            prev_checkpoint_lsn: Lsn(u64_at(36)),
            redo_lsn: Lsn(u64_at(44)),
            next_xid: FullXid(u64_at(52)),
            oldest_xid: Xid(u32_at(60)),
            next_oid: Oid(u32_at(64)),
            time_secs: u64_at(68),
        })
    }

    /// Reads and checks the control file at `path`.
    pub fn read(fs: &dyn FileSystem, path: &Path) -> Result<ControlFile> {
        let f = fs.open(path, false)?;
        let len = f.len()?;
        if len > 64 * 1024 {
            return Err(Error::CorruptFile {
                path: path.to_path_buf(),
                detail: format!("length is {len} bytes, expected {CONTROL_FILE_SIZE}"),
            });
        }
        let mut buf = vec![0u8; len as usize];
        f.read_exact_at(&mut buf, 0)?;
        ControlFile::decode(&buf, path)
    }

    /// Writes the control file durably: temporary file, fsync, rename, fsync of the directory.
    pub fn write(&self, fs: &dyn FileSystem, path: &Path) -> Result<()> {
        let tmp = tmp_path(path);
        let f = fs.open(&tmp, true)?;
        f.set_len(0)?;
        f.write_at(&self.encode(), 0)?;
        f.sync()?;
        drop(f);
        fs.rename(&tmp, path)?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        fs.sync_dir(dir)
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 8)?;
    Some(u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::RealFs;

    fn sample() -> ControlFile {
        ControlFile {
            state: DbState::InProduction,
            checkpoint_lsn: Lsn(0x1_0000_2000),
            prev_checkpoint_lsn: Lsn(0x1_0000_1000),
            redo_lsn: Lsn(0x1_0000_1F00),
            next_xid: FullXid::new(2, Xid(1234)),
            oldest_xid: Xid(700),
            next_oid: Oid(20000),
            time_secs: 1_700_000_000,
            full_page_writes: false,
            ..ControlFile::new(0xDEAD_BEEF_1234, 64 << 10)
        }
    }

    #[test]
    fn round_trips_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settle_control");
        let c = sample();
        c.write(&RealFs, &path).unwrap();
        assert_eq!(ControlFile::read(&RealFs, &path).unwrap(), c);
        let mut c2 = c.clone();
        c2.state = DbState::ShutDown;
        c2.write(&RealFs, &path).unwrap();
        assert_eq!(ControlFile::read(&RealFs, &path).unwrap(), c2, "rewrite replaces the file");
        assert!(!RealFs.exists(&tmp_path(&path)), "the temporary file was renamed away");
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let path = Path::new("/data/settle_control");
        let good = sample().encode();
        for i in 0..CONTROL_FILE_SIZE {
            let mut bad = good;
            bad[i] ^= 0x40;
            match ControlFile::decode(&bad, path) {
                Err(Error::CorruptFile { path: p, .. }) => assert_eq!(p, path),
                Err(Error::VersionMismatch { .. }) if (4..8).contains(&i) => {}
                other => panic!("flipping byte {i} gave {other:?}"),
            }
        }
        assert!(matches!(ControlFile::decode(&good[..40], path), Err(Error::CorruptFile { .. })));
        assert!(matches!(ControlFile::decode(&[], path), Err(Error::CorruptFile { .. })));
    }

    #[test]
    fn other_version_is_a_version_mismatch() {
        let path = Path::new("settle_control");
        let mut c = sample();
        c.version = CONTROL_FORMAT_VERSION + 1;
        match ControlFile::decode(&c.encode(), path) {
            Err(Error::VersionMismatch { found, expected, .. }) => {
                assert_eq!((found, expected), (CONTROL_FORMAT_VERSION + 1, CONTROL_FORMAT_VERSION));
            }
            other => panic!("expected a version mismatch, got {other:?}"),
        }
    }
}
