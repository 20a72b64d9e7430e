//! Two-phase commit state: what a prepared transaction needs to be finished after a crash
//! (PostgreSQL's `twophase.c`).
//!
//! `PREPARE TRANSACTION` ([`super::TransactionManager::prepare`]) logs an `XACT PREPARE`
//! record whose main data is the [`TwoPhaseState`] below and flushes it; from then on the
//! transaction no longer belongs to a session: it keeps its XID (and its subtransactions')
//! in the proc array, so its row locks (its XID in `xmax`) keep blocking writers, its rows
//! stay invisible, and it holds back the horizon (`OldestXmin`) and so the relfrozenxid
//! VACUUM can reach, until `COMMIT PREPARED` or `ROLLBACK PREPARED` by any session, which
//! logs `XACT COMMIT_PREPARED` / `XACT ABORT_PREPARED` and sets the CLOG as a commit or an
//! abort would. VACUUM VERBOSE and the autovacuum log name the prepared transaction that
//! holds the removable cutoff, and the XID wraparound warnings and the stop error name the
//! oldest one (PostgreSQL's hint only says "old prepared transactions").
//!
//! # Surviving a crash: WAL, then a state file at checkpoint
//!
//! As in PostgreSQL 11+, the state lives in WAL only until a checkpoint's redo pointer
//! passes the PREPARE record; that checkpoint then writes one file per such transaction,
//! `pg_twophase/<64-bit XID as 16 hex digits>`, fsyncs it and the directory, before the
//! control file names the checkpoint (`CheckPointTwoPhase`). Recovery loads every state file,
//! then replays WAL from the redo pointer, where PREPARE records add transactions and
//! COMMIT/ABORT PREPARED records finish them; a state file whose transaction the CLOG already
//! calls committed or aborted is stale (its finish raced a checkpoint) and is removed.
//! Prepared transactions left at the end of recovery are running again, with their
//! subtransactions' parent links set anew in `pg_subtrans` (which is not kept across a
//! restart, see [`super::subtrans`]). Most prepared transactions are finished before a
//! checkpoint comes, and then never touch a file.
//!
//! Row locks need nothing more: a row lock here is the locker's XID in the row's `xmax`,
//! on a page the WAL restores, and the XID is running again after recovery. Table locks
//! are in the state (version 2): recovery takes them again for the prepared transaction
//! before any session can connect, as PostgreSQL's `lock_twophase_recover` does, so a
//! `DROP TABLE` or `CREATE INDEX` still waits for a transaction prepared before a crash.
//!
//! # State layout (state file and PREPARE main data), little-endian
//!
//! ```text
//!   0  magic       u32  0x53325043 ("CP2S")
//!   4  version     u16  3 (1: no lock list, 2: no file lists; both still read)
//!   6  gid_len     u16  at most 199 bytes (PostgreSQL's GIDSIZE is 200 with its NUL)
//!   8  xid         u64  FullXid of the prepared transaction
//!  16  prepared_at i64  microseconds since the Unix epoch
//!  24  nsubxacts   u32
//!  28  gid         gid_len bytes of UTF-8
//!      subxids     nsubxacts x u32 (committed subtransactions, each after xid)
//!      nlocks      u32  (version 2 on)
//!      locks       nlocks x (relation OID u32, modes u16: bit n for `lmgr::LockMode` n)
//!      ncommit     u32  (version 3)
//!      commit_drops ncommit x file node u32: relation files COMMIT PREPARED removes
//!      nabort      u32  (version 3)
//!      abort_drops nabort x file node u32: relation files ROLLBACK PREPARED removes
//!      crc         u32  CRC-32C of everything before it
//! ```
//!
//! The file lists (version 3; PostgreSQL's `commitrels` and `abortrels`) are a TRUNCATE's:
//! the storage it replaced goes at COMMIT PREPARED, the storage it made at ROLLBACK
//! PREPARED, whenever that comes; until then recovery keeps both sets.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::io::FileSystem;
use crate::types::{FullXid, Oid, Xid};

/// Directory of the state files inside the data directory.
pub const TWOPHASE_DIR: &str = "pg_twophase";
/// Longest transaction identifier, in bytes (PostgreSQL's `GIDSIZE` less its terminator).
pub const MAX_GID_LEN: usize = 199;
/// The most `max_prepared_transactions` accepts (PostgreSQL's `MAX_BACKENDS`).
pub const MAX_PREPARED_TRANSACTIONS_LIMIT: u32 = 262_143;

const MAGIC: u32 = 0x5332_5043;
const HEADER_LEN: usize = 28;

/// A prepared transaction's durable state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TwoPhaseState {
    pub xid: FullXid,
    pub gid: String,
    /// When it was prepared, microseconds since the Unix epoch.
    pub prepared_at_us: i64,
    /// Its committed (released or still open at PREPARE) subtransactions' XIDs.
    pub subxids: Vec<Xid>,
    /// The table locks it holds: (relation, modes as `lmgr::LockMask` bits), one entry per
    /// relation, ascending.
    pub locks: Vec<(Oid, u16)>,
    /// Relation files to remove when it commits (storage a TRUNCATE replaced).
    pub commit_drops: Vec<Oid>,
    /// Relation files to remove when it rolls back (storage a TRUNCATE made).
    pub abort_drops: Vec<Oid>,
}

/// Checks a transaction identifier as `PREPARE TRANSACTION` does.
pub fn validate_gid(gid: &str) -> Result<()> {
    if gid.len() > MAX_GID_LEN {
        return Err(Error::invalid(format!(
            "transaction identifier \"{gid}\" is too long (at most {MAX_GID_LEN} bytes)"
        )));
    }
    if gid.contains('\0') {
        return Err(Error::invalid("transaction identifier contains a NUL byte"));
    }
    Ok(())
}

impl TwoPhaseState {
    /// The layout version written.
    pub const VERSION: u16 = 3;

    /// The bytes of a state file and of a PREPARE record's main data.
    pub fn encode(&self) -> Vec<u8> {
        let mut v =
            Vec::with_capacity(HEADER_LEN + self.gid.len() + 4 * self.subxids.len() + 4 + 6 * self.locks.len() + 4);
        v.extend_from_slice(&MAGIC.to_le_bytes());
        v.extend_from_slice(&Self::VERSION.to_le_bytes());
        // validate_gid keeps it far below u16::MAX.
        v.extend_from_slice(&(self.gid.len().min(usize::from(u16::MAX)) as u16).to_le_bytes());
        v.extend_from_slice(&self.xid.0.to_le_bytes());
        v.extend_from_slice(&self.prepared_at_us.to_le_bytes());
        v.extend_from_slice(&(self.subxids.len() as u32).to_le_bytes());
        v.extend_from_slice(self.gid.as_bytes());
        for x in &self.subxids {
            v.extend_from_slice(&x.0.to_le_bytes());
        }
        v.extend_from_slice(&(self.locks.len() as u32).to_le_bytes());
        for (rel, modes) in &self.locks {
            v.extend_from_slice(&rel.0.to_le_bytes());
            v.extend_from_slice(&modes.to_le_bytes());
        }
        for list in [&self.commit_drops, &self.abort_drops] {
            v.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for f in list {
                v.extend_from_slice(&f.0.to_le_bytes());
            }
        }
        let crc = crate::crc::crc32c(&v);
        v.extend_from_slice(&crc.to_le_bytes());
        v
    }

    /// Decodes [`Self::encode`]'s bytes; a description of the first problem otherwise.
    pub fn decode(bytes: &[u8]) -> std::result::Result<TwoPhaseState, String> {
        if bytes.len() < HEADER_LEN + 4 {
            return Err(format!("{} bytes, shorter than the smallest state ({})", bytes.len(), HEADER_LEN + 4));
        }
        let (body, crc_bytes) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
        let computed = crate::crc::crc32c(body);
        if stored != computed {
            return Err(format!("CRC mismatch: stored {stored:08X}, computed {computed:08X}"));
        }
        let u16_at = |i: usize| u16::from_le_bytes([body[i], body[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        if u32_at(0) != MAGIC {
            return Err(format!("bad magic {:08X}", u32_at(0)));
        }
        let version = u16_at(4);
        if !(1..=Self::VERSION).contains(&version) {
            return Err(format!("unknown version {version}"));
        }
        let gid_len = usize::from(u16_at(6));
        if gid_len > MAX_GID_LEN {
            return Err(format!("transaction identifier of {gid_len} bytes, at most {MAX_GID_LEN}"));
        }
        let xid = FullXid(u64_at(8));
        if !xid.xid().is_normal() {
            return Err(format!("special XID {} cannot be prepared", xid.xid()));
        }
        let prepared_at_us = u64_at(16) as i64;
        let nsub = u32_at(24) as usize;
        let subs_end = HEADER_LEN.checked_add(gid_len).and_then(|n| nsub.checked_mul(4).and_then(|s| n.checked_add(s)));
        let Some(subs_end) = subs_end.filter(|&e| e <= body.len()) else {
            return Err(format!(
                "{} bytes before the CRC, too few for a {gid_len}-byte identifier and {nsub} subtransactions",
                body.len()
            ));
        };
        let gid = std::str::from_utf8(&body[HEADER_LEN..HEADER_LEN + gid_len])
            .map_err(|e| format!("transaction identifier is not UTF-8: {e}"))?
            .to_string();
        let mut subxids = Vec::with_capacity(nsub);
        for i in 0..nsub {
            let x = Xid(u32_at(HEADER_LEN + gid_len + 4 * i));
            if !x.is_normal() || !xid.xid().precedes(x) {
                return Err(format!("subtransaction XID {x} is not after the prepared XID {}", xid.xid()));
            }
            subxids.push(x);
        }
        // What follows the subtransactions: counted lists, each checked against what is left.
        // A counted list at `at` of `item`-byte entries: its bytes' range.
        let list = |at: usize, what: &str, item: usize| -> std::result::Result<std::ops::Range<usize>, String> {
            let n = (at + 4 <= body.len()).then(|| u32_at(at) as usize).ok_or_else(|| format!("no {what} count"))?;
            let end = n.checked_mul(item).and_then(|b| b.checked_add(at + 4)).filter(|&e| e <= body.len());
            let end = end.ok_or_else(|| {
                format!("{n} {what} do not fit in the {} bytes left before the CRC", body.len() - at - 4)
            })?;
            Ok(at + 4..end)
        };
        let lock_range = if version >= 2 { list(subs_end, "locks", 6)? } else { subs_end..subs_end };
        let (commit_range, abort_range) = if version >= 3 {
            let c = list(lock_range.end, "files to remove at commit", 4)?;
            let a = list(c.end, "files to remove at rollback", 4)?;
            (c, a)
        } else {
            (lock_range.end..lock_range.end, lock_range.end..lock_range.end)
        };
        if abort_range.end != body.len() {
            return Err(format!("{} bytes after the state's last list", body.len() - abort_range.end));
        }
        let mut locks: Vec<(Oid, u16)> = Vec::with_capacity(lock_range.len() / 6);
        for at in lock_range.step_by(6) {
            let (rel, modes) = (Oid(u32_at(at)), u16_at(at + 4));
            // Bits 1..=8 are the eight lock modes.
            if modes == 0 || modes & !0x1FE != 0 {
                return Err(format!("lock on relation {} has modes {modes:#06x}", rel.0));
            }
            if locks.last().is_some_and(|&(prev, _)| prev >= rel) {
                return Err(format!("lock list not in ascending relation order at relation {}", rel.0));
            }
            locks.push((rel, modes));
        }
        let files = |r: std::ops::Range<usize>| r.step_by(4).map(|at| Oid(u32_at(at))).collect::<Vec<Oid>>();
        let (commit_drops, abort_drops) = (files(commit_range), files(abort_range));
        Ok(TwoPhaseState { xid, gid, prepared_at_us, subxids, locks, commit_drops, abort_drops })
    }
}

/// The state file of `xid`.
pub fn state_file_path(dir: &Path, xid: FullXid) -> PathBuf {
    dir.join(format!("{:016X}", xid.0))
}

/// The XID a state file name stands for (`None` for other names).
pub fn parse_state_file_name(name: &str) -> Option<FullXid> {
    if name.len() != 16 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(name, 16).ok().map(FullXid)
}

/// Writes and fsyncs the state file of `state` (the caller fsyncs the directory).
/// The file is written whole under a temporary name, fsynced, then renamed into place: a
/// crash while writing leaves no state file cut short under a transaction's name (only a
/// `.tmp` file, which [`read_state_files`] removes). The caller fsyncs the directory.
pub fn write_state_file(fs: &dyn FileSystem, dir: &Path, state: &TwoPhaseState) -> Result<()> {
    let path = state_file_path(dir, state.xid);
    let tmp = path.with_extension(TMP_EXTENSION);
    let bytes = state.encode();
    let file = fs.open(&tmp, true)?;
    file.set_len(0)?;
    file.write_at(&bytes, 0)?;
    file.sync()?;
    fs.rename(&tmp, &path)
}

/// The extension of a state file being written.
const TMP_EXTENSION: &str = "tmp";

/// Reads every state file in `dir`, in XID order. A file that does not decode, or whose
/// name disagrees with its content, is an error naming it.
pub fn read_state_files(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<TwoPhaseState>> {
    let mut out = Vec::new();
    for name in fs.list(dir)? {
        if name.strip_suffix(".tmp").and_then(parse_state_file_name).is_some() {
            // A state file a crash interrupted before it was renamed into place: its
            // checkpoint did not finish, so replay brings the transaction back from its
            // PREPARE record.
            fs.remove(&dir.join(&name))?;
            continue;
        }
        let Some(xid) = parse_state_file_name(&name) else { continue };
        let path = dir.join(&name);
        let file = fs.open(&path, false)?;
        let len = file.len()?;
        if len > 1 << 20 {
            return Err(Error::CorruptFile { path, detail: format!("two-phase state file of {len} bytes") });
        }
        let mut bytes = vec![0u8; len as usize];
        file.read_exact_at(&mut bytes, 0)?;
        let state =
            TwoPhaseState::decode(&bytes).map_err(|detail| Error::CorruptFile { path: path.clone(), detail })?;
        if state.xid != xid {
            return Err(Error::CorruptFile {
                path,
                detail: format!("file name says XID {:016X}, content says {:016X}", xid.0, state.xid.0),
            });
        }
        out.push(state);
    }
    out.sort_by_key(|s| s.xid);
    Ok(out)
}

/// One line describing a state (waldump, `settle inspect`).
pub fn describe(state: &TwoPhaseState) -> String {
    let subs: Vec<String> = state.subxids.iter().map(|x| x.0.to_string()).collect();
    let mut s = format!(
        "gid \"{}\" xid {} prepared_at_us {} subxacts [{}]",
        state.gid,
        state.xid.xid(),
        state.prepared_at_us,
        subs.join(" ")
    );
    if !state.locks.is_empty() {
        let locks: Vec<String> = state.locks.iter().map(|(r, m)| format!("{}:{m:#x}", r.0)).collect();
        s.push_str(&format!(" locks [{}]", locks.join(" ")));
    }
    for (what, list) in [("drops_at_commit", &state.commit_drops), ("drops_at_abort", &state.abort_drops)] {
        if !list.is_empty() {
            let files: Vec<String> = list.iter().map(|f| f.0.to_string()).collect();
            s.push_str(&format!(" {what} [{}]", files.join(" ")));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TwoPhaseState {
        TwoPhaseState {
            xid: FullXid::new(2, Xid(1000)),
            gid: "order-17".into(),
            prepared_at_us: 1_700_000_000_000_000,
            subxids: vec![Xid(1001), Xid(1005)],
            locks: vec![(Oid(16384), 1 << 3), (Oid(16390), (1 << 1) | (1 << 8))],
            commit_drops: vec![Oid(16400), Oid(16401)],
            abort_drops: vec![Oid(16410)],
        }
    }

    #[test]
    fn state_round_trips_and_rejects_damage() {
        let s = sample();
        let bytes = s.encode();
        assert_eq!(TwoPhaseState::decode(&bytes), Ok(s.clone()));
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(TwoPhaseState::decode(&b).is_err(), "flipped byte {i} accepted");
        }
        for n in 0..bytes.len() {
            assert!(TwoPhaseState::decode(&bytes[..n]).is_err(), "prefix of {n} bytes accepted");
        }
        assert_eq!(
            describe(&s),
            "gid \"order-17\" xid 1000 prepared_at_us 1700000000000000 subxacts [1001 1005] locks [16384:0x8 \
             16390:0x102] drops_at_commit [16400 16401] drops_at_abort [16410]"
        );
    }

    #[test]
    fn version_1_and_2_states_still_load() {
        // A version 2 state is a version 3 one without the file lists, a version 1 one
        // without the lock list either.
        let s = TwoPhaseState { commit_drops: vec![], abort_drops: vec![], ..sample() };
        let v3 = s.encode();
        let older = |cut: usize, version: u16| {
            let mut v = v3[..v3.len() - cut].to_vec();
            v[4..6].copy_from_slice(&version.to_le_bytes());
            let crc = crate::crc::crc32c(&v);
            v.extend_from_slice(&crc.to_le_bytes());
            v
        };
        assert_eq!(TwoPhaseState::decode(&older(12, 2)), Ok(s.clone()));
        let s1 = TwoPhaseState { locks: vec![], ..s.clone() };
        let v3 = s1.encode();
        let mut v1 = v3[..v3.len() - 16].to_vec();
        v1[4..6].copy_from_slice(&1u16.to_le_bytes());
        let crc = crate::crc::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(TwoPhaseState::decode(&v1), Ok(s1));
        // A lock list with a bad mode is refused even under a good CRC.
        let bad = TwoPhaseState { locks: vec![(Oid(16384), 1)], ..sample() }.encode();
        let mut body = bad[..bad.len() - 4].to_vec();
        let crc = crate::crc::crc32c(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert!(TwoPhaseState::decode(&body).unwrap_err().contains("modes"));
    }

    #[test]
    fn files_are_named_by_full_xid() -> Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let fs = crate::io::RealFs;
        write_state_file(&fs, tmp.path(), &sample())?;
        std::fs::write(tmp.path().join("README"), b"not a state file").expect("write");
        // What a crash while writing a state file leaves: its temporary, cut short. It is
        // removed, not read.
        let torn = tmp.path().join("00000002000003F0.tmp");
        std::fs::write(&torn, &sample().encode()[..10]).expect("write");
        let read = read_state_files(&fs, tmp.path())?;
        assert_eq!(read, vec![sample()]);
        assert!(!torn.exists(), "the interrupted write's file is removed");
        assert!(tmp.path().join("README").exists(), "other files are left alone");
        assert_eq!(parse_state_file_name("00000002000003E8"), Some(FullXid::new(2, Xid(1000))));
        std::fs::rename(state_file_path(tmp.path(), sample().xid), tmp.path().join("00000002000003E9"))
            .expect("rename");
        let e = read_state_files(&fs, tmp.path()).unwrap_err();
        assert!(e.to_string().contains("file name says XID 00000002000003E9"), "{e}");
        Ok(())
    }

    #[test]
    fn gid_limits() {
        assert!(validate_gid("").is_ok());
        assert!(validate_gid(&"g".repeat(MAX_GID_LEN)).is_ok());
        let e = validate_gid(&"g".repeat(MAX_GID_LEN + 1)).unwrap_err();
        assert!(e.to_string().contains("is too long"), "{e}");
    }
}
