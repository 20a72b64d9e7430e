//! Replication slots (PostgreSQL's `replication/slot.c` and `slotfuncs.c`): named, durable
//! positions that keep the WAL and the catalog rows a logical decoder still needs.
//!
//! A logical slot has
//!
//! * `restart_lsn`: where its decoder must start reading; every WAL segment from the one
//!   holding it on is kept by checkpoints (PostgreSQL's `KeepLogSeg`);
//! * `confirmed_flush_lsn`: the consumer has everything committed before it; the next
//!   decoding session sends only transactions committing after it;
//! * `catalog_xmin`: catalog rows deleted by this XID or later stay (a decoder reads the
//!   catalog as it was when the changes were made); VACUUM's removable cutoff for catalog
//!   relations is held back to the oldest slot's (see [`crate::xact::horizon`]);
//! * `xmin`: for a physical slot with hot-standby feedback, holding back every relation;
//!   always invalid for a logical slot (physical slots are not built yet, but the field is
//!   kept in the file and pushed down like PostgreSQL's).
//!
//! # Creating a logical slot
//!
//! Under the slots' lock: the name is checked (lower-case letters, digits and `_`, 1..=63
//! bytes), `wal_level` must be `logical`, the name unused and fewer than
//! `max_replication_slots` slots in use. The horizon is installed at once as the slot's
//! `catalog_xmin` (under the proc-array lock, so nothing newer is pruned meanwhile);
//! `restart_lsn` is the WAL insert position, then a running-transactions record is logged and
//! flushed (PostgreSQL's `ReplicationSlotReserveWal`: the decoder's starting snapshot), and
//! `confirmed_flush_lsn` is that record's end. The slot is then added in memory only
//! (PostgreSQL's `RS_EPHEMERAL`: it holds its WAL and catalog rows, its name is taken, a
//! crash leaves nothing) and, outside the slots' lock, creation waits for every transaction
//! the record lists to finish, prepared ones included, as PostgreSQL's snapshot builder does
//! before it reaches its consistent point: those transactions began before the decoder's
//! start and cannot be decoded, so the slot must begin after them. If any were listed,
//! `confirmed_flush_lsn` moves to the WAL insert position after the wait (flushed), past all
//! their commit records. Only then is the state written to disk: nothing it promises can have
//! been removed by then, because a checkpoint only removes WAL before its redo pointer, which
//! is never past the slot's `restart_lsn` once the slot is in memory. A caller that creates a
//! slot while itself holding a transaction with an XID waits forever (PostgreSQL refuses to
//! create a slot in a transaction that has written; the engine's API cannot tell).
//!
//! # Advancing (`pg_replication_slot_advance`)
//!
//! `confirmed_flush_lsn` moves to `min(upto, flushed WAL)`; going back is an error. Without a
//! decoder to track which transactions straddle a position, `restart_lsn` and `catalog_xmin`
//! move by this conservative rule ([`restart_point`]): to the start of the latest
//! running-transactions record R ending at or before `confirmed_flush_lsn` such that every
//! transaction R lists has finished, proven by a running-transactions record R2 (R itself
//! when R lists none) also ending at or before `confirmed_flush_lsn` whose oldest running XID
//! follows all of them. The new `catalog_xmin` is R's oldest running XID (PostgreSQL's
//! `LogicalIncreaseXminForSlot(lsn, running->oldestRunningXid)`). Why this is safe: R is
//! logged under the proc-array lock ([`crate::xact::TransactionManager::log_running_xacts`]),
//! so every transaction with a record before R is listed in R or had finished; those listed
//! finished before R2, hence before `confirmed_flush_lsn`: a decoder starting at R misses
//! nothing it must send. Checkpoints log such records, and so does the background writer
//! every 15 s while WAL is written (`db::LOG_SNAPSHOT_INTERVAL`), so a slot whose consumer
//! keeps up moves on within about that long. Finding R reads the WAL from the current
//! `restart_lsn` to the new position, under the slots' lock: an advance costs a read of the WAL
//! the slot holds (the decoder will learn the same from the records it decodes anyway).
//!
//! When `restart_lsn` or `catalog_xmin` moves, the state file is written before the new
//! minima are pushed down (so WAL or rows are released only once the slot's file no longer
//! needs them, as PostgreSQL's `LogicalConfirmReceivedLocation` does); a move of
//! `confirmed_flush_lsn` alone marks the slot dirty and the next checkpoint writes it
//! (`CheckPointReplicationSlots`): after a crash it may come back older, and the consumer is
//! sent some transactions again, as in PostgreSQL.
//!
//! # `max_slot_wal_keep_size` and invalidation
//!
//! A checkpoint keeps the WAL from the oldest slot's `restart_lsn`, but no more than
//! `max_slot_wal_keep_size` behind the WAL insert position: a slot whose `restart_lsn` falls
//! before that is invalidated (`InvalidateObsoleteReplicationSlots`) with PostgreSQL 15's log
//! line `invalidating slot "s" because its restart_lsn X/Y exceeds max_slot_wal_keep_size`.
//! Its `restart_lsn` becomes invalid (the old one is kept as `invalidated_at`), its file is
//! written at once, `wal_status` says `lost`, and it no longer holds back WAL or rows (as in
//! PostgreSQL 16+); it can only be dropped.
//!
//! # On disk (`pg_replslot/<name>/state`), little-endian
//!
//! ```text
//!   0  magic           u32  0x504C5352 ("RSLP")
//!   4  version         u16  2
//!   6  kind            u8   1 logical
//!   7  flags           u8   bit 0 two_phase, bit 1 invalidated
//!   8  database        u32  OID of the database (1)
//!  12  xmin            u32  0 when none
//!  16  catalog_xmin    u32  0 when none
//!  20  restart_lsn     u64  0 when invalidated
//!  28  confirmed_flush u64
//!  36  invalidated_at  u64  restart_lsn when invalidated, else 0
//!  44  two_phase_at    u64  where prepared transactions began to be decoded at PREPARE
//!  52  name_len        u8   1..=63
//!  53  plugin_len      u8   1..=63
//!  54  name, plugin    UTF-8
//!      crc             u32  CRC-32C of everything before it
//! ```
//!
//! Version 1 files (written before `two_phase_at` existed) lack the field at 44 and are read
//! with `two_phase_at` 0: their two-phase slots decoded PREPAREs from their creation on.
//!
//! Written as PostgreSQL's `SaveSlotToPath` does: `state.tmp`, fsync, rename to `state`,
//! fsync the file, its directory and `pg_replslot`. A slot exists exactly when its directory
//! holds a `state` file: creation makes the directory (fsyncing `pg_replslot`) and then
//! writes `state` as above; dropping removes `state` and fsyncs the directory (from then on
//! the slot is gone), then removes the directory. Startup removes every directory without
//! a `state` (an interrupted creation or drop; PostgreSQL renames whole directories to
//! `<name>.tmp` for the same purpose, and those are removed too) and loads the others; a file
//! that does not decode is an error naming it.
//!
//! # Locking
//!
//! One mutex guards the slots and is held across their file I/O and the WAL record of a
//! creation (slot operations are rare; PostgreSQL's `ReplicationSlotAllocationLock` and
//! `ReplicationSlotControlLock` together). Lock order: checkpoint lock, slots, proc array,
//! WAL insert.
//!
//! # Temporary slots
//!
//! A slot created temporary (PostgreSQL's `RS_TEMPORARY`, [`SlotData::temporary`]) is never
//! written: no directory, no state file, nothing for a checkpoint to save. It holds WAL and
//! catalog rows like any slot while it exists, and a restart (or a crash) forgets it. The
//! engine does not know sessions: whoever created it drops it when its session ends, as
//! `settle serve` does for the connection that created it (and on any error in that
//! connection, as PostgreSQL does).
//!
//! # Non-goals (for now)
//!
//! Physical slots, `active` (always false here: `settle serve` marks a slot
//! its WAL sender streams or a session holds as temporary), failover
//! and synced slots (PostgreSQL 17), invalidation for other causes than removed WAL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::io::FileSystem;
use crate::types::{Lsn, Oid, Xid};
use crate::xact::standby::RunningXacts;

/// Directory of the slots inside the data directory.
pub const SLOT_DIR: &str = "pg_replslot";
/// Longest slot or plugin name, in bytes (PostgreSQL's `NAMEDATALEN` less its terminator).
pub const MAX_NAME_LEN: usize = 63;
/// The database a slot belongs to: settledb has one (`pg_stat_database` shows it as 1).
pub const DATABASE_OID: Oid = Oid(1);
/// Its name.
pub const DATABASE_NAME: &str = crate::vacuum::DATABASE_NAME;

const MAGIC: u32 = 0x504C_5352;
const VERSION: u16 = 2;
/// The first version, without `two_phase_at` (its header is 8 bytes shorter).
const VERSION_1: u16 = 1;
const KIND_LOGICAL: u8 = 1;
const FLAG_TWO_PHASE: u8 = 1;
const FLAG_INVALIDATED: u8 = 2;
const HEADER_LEN: usize = 54;
const HEADER_LEN_V1: usize = 46;
/// A state file is never larger than this.
const MAX_STATE_LEN: usize = HEADER_LEN + 2 * MAX_NAME_LEN + 4;

/// A slot's durable state (PostgreSQL's `ReplicationSlotPersistentData`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotData {
    pub name: String,
    pub plugin: String,
    pub database: Oid,
    pub two_phase: bool,
    /// Where two-phase decoding was enabled (PostgreSQL's `two_phase_at`): a transaction
    /// PREPAREd before it is decoded whole at its COMMIT PREPARED; one PREPAREd at or after
    /// it was (or will be) decoded at its PREPARE. `INVALID` while `two_phase` is off.
    pub two_phase_at: Lsn,
    pub xmin: Xid,
    pub catalog_xmin: Xid,
    /// `INVALID` once invalidated.
    pub restart_lsn: Lsn,
    pub confirmed_flush: Lsn,
    /// The `restart_lsn` it had when invalidated; `INVALID` for a valid slot.
    pub invalidated_at: Lsn,
    pub invalidated: bool,
    /// A temporary slot, in memory only (see the module doc, "Temporary slots"); never in a
    /// state file, so [`SlotData::decode`] always gives `false`.
    pub temporary: bool,
}

/// How a new logical slot is made (the flags of `pg_create_logical_replication_slot` and
/// `CREATE_REPLICATION_SLOT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlotOptions {
    /// Decode prepared transactions at PREPARE.
    pub two_phase: bool,
    /// In memory only, dropped by its creator (see the module doc, "Temporary slots").
    pub temporary: bool,
}

/// Checks a slot name as `ReplicationSlotValidateName` does.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(format!("replication slot name \"{name}\" is too short")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!("replication slot name \"{name}\" is too long")));
    }
    if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        return Err(Error::invalid(format!(
            "replication slot name \"{name}\" contains invalid character; HINT: Replication slot names may only \
             contain lower case letters, numbers, and the underscore character."
        )));
    }
    Ok(())
}

impl SlotData {
    /// The bytes of a state file.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_LEN + self.name.len() + self.plugin.len() + 4);
        v.extend_from_slice(&MAGIC.to_le_bytes());
        v.extend_from_slice(&VERSION.to_le_bytes());
        v.push(KIND_LOGICAL);
        let flags = (u8::from(self.two_phase) * FLAG_TWO_PHASE) | (u8::from(self.invalidated) * FLAG_INVALIDATED);
        v.push(flags);
        v.extend_from_slice(&self.database.0.to_le_bytes());
        v.extend_from_slice(&self.xmin.0.to_le_bytes());
        v.extend_from_slice(&self.catalog_xmin.0.to_le_bytes());
        v.extend_from_slice(&self.restart_lsn.0.to_le_bytes());
        v.extend_from_slice(&self.confirmed_flush.0.to_le_bytes());
        v.extend_from_slice(&self.invalidated_at.0.to_le_bytes());
        v.extend_from_slice(&self.two_phase_at.0.to_le_bytes());
        // validate_name and the plugin check keep both at most 63 bytes.
        v.push(self.name.len().min(MAX_NAME_LEN) as u8);
        v.push(self.plugin.len().min(MAX_NAME_LEN) as u8);
        v.extend_from_slice(self.name.as_bytes());
        v.extend_from_slice(self.plugin.as_bytes());
        let crc = crate::crc::crc32c(&v);
        v.extend_from_slice(&crc.to_le_bytes());
        v
    }

    /// Decodes [`Self::encode`]'s bytes; a description of the first problem otherwise.
    pub fn decode(bytes: &[u8]) -> std::result::Result<SlotData, String> {
        if bytes.len() < HEADER_LEN_V1 + 4 {
            return Err(format!("{} bytes, shorter than the smallest state ({})", bytes.len(), HEADER_LEN_V1 + 4));
        }
        let (body, crc_bytes) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
        let computed = crate::crc::crc32c(body);
        if stored != computed {
            return Err(format!("checksum mismatch: stored {stored:08X}, computed {computed:08X}"));
        }
        let u32_at = |i: usize| u32::from_le_bytes([body[i], body[i + 1], body[i + 2], body[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        if u32_at(0) != MAGIC {
            return Err(format!("bad magic {:08X}", u32_at(0)));
        }
        let version = u16::from_le_bytes([body[4], body[5]]);
        let header = match version {
            VERSION => HEADER_LEN,
            VERSION_1 => HEADER_LEN_V1,
            _ => return Err(format!("unknown version {version}")),
        };
        if body.len() < header {
            return Err(format!("{} bytes before the checksum, shorter than a version {version} header", body.len()));
        }
        if body[6] != KIND_LOGICAL {
            return Err(format!("unknown slot kind {}", body[6]));
        }
        let flags = body[7];
        if flags & !(FLAG_TWO_PHASE | FLAG_INVALIDATED) != 0 {
            return Err(format!("unknown flags {flags:#04x}"));
        }
        let (name_len, plugin_len) = (usize::from(body[header - 2]), usize::from(body[header - 1]));
        if body.len() != header + name_len + plugin_len {
            return Err(format!(
                "{} bytes before the checksum, but a {name_len}-byte name and a {plugin_len}-byte plugin need {}",
                body.len(),
                header + name_len + plugin_len
            ));
        }
        let text = |at: usize, len: usize, what: &str| {
            std::str::from_utf8(&body[at..at + len])
                .map(str::to_string)
                .map_err(|e| format!("{what} is not UTF-8: {e}"))
        };
        let name = text(header, name_len, "slot name")?;
        validate_name(&name).map_err(|e| e.to_string())?;
        let plugin = text(header + name_len, plugin_len, "plugin name")?;
        if plugin.is_empty() || plugin.len() > MAX_NAME_LEN {
            return Err(format!("plugin name of {} bytes", plugin.len()));
        }
        let d = SlotData {
            name,
            plugin,
            database: Oid(u32_at(8)),
            two_phase: flags & FLAG_TWO_PHASE != 0,
            two_phase_at: if version == VERSION { Lsn(u64_at(44)) } else { Lsn::INVALID },
            invalidated: flags & FLAG_INVALIDATED != 0,
            xmin: Xid(u32_at(12)),
            catalog_xmin: Xid(u32_at(16)),
            restart_lsn: Lsn(u64_at(20)),
            confirmed_flush: Lsn(u64_at(28)),
            invalidated_at: Lsn(u64_at(36)),
            temporary: false,
        };
        if d.invalidated != (d.restart_lsn == Lsn::INVALID) {
            return Err(format!("restart_lsn {} disagrees with the invalidated flag", d.restart_lsn));
        }
        if d.invalidated && d.invalidated_at == Lsn::INVALID {
            return Err("an invalidated slot without the restart_lsn it was invalidated at".into());
        }
        if !d.invalidated && d.confirmed_flush < d.restart_lsn {
            return Err(format!("confirmed_flush {} precedes restart_lsn {}", d.confirmed_flush, d.restart_lsn));
        }
        Ok(d)
    }
}

/// One line describing a slot's state (`settle inspect`, tests).
pub fn describe(d: &SlotData) -> String {
    format!(
        "slot \"{}\" plugin \"{}\" two_phase {} xmin {} catalog_xmin {} restart_lsn {} confirmed_flush {}{}",
        d.name,
        d.plugin,
        d.two_phase,
        d.xmin,
        d.catalog_xmin,
        d.restart_lsn,
        d.confirmed_flush,
        if d.invalidated { format!(" invalidated_at {}", d.invalidated_at) } else { String::new() }
    )
}

/// `pg_replslot` under `data_dir`.
pub fn slot_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(SLOT_DIR)
}

/// Writes the state of `d` into `dir` (a slot's directory) as `SaveSlotToPath` does.
fn save_to_path(fs: &dyn FileSystem, dir: &Path, d: &SlotData) -> Result<()> {
    let tmp = dir.join("state.tmp");
    let path = dir.join("state");
    let bytes = d.encode();
    let file = fs.open(&tmp, true)?;
    file.set_len(0)?;
    file.write_at(&bytes, 0)?;
    file.sync()?;
    drop(file);
    fs.rename(&tmp, &path)?;
    fs.open(&path, false)?.sync()?;
    fs.sync_dir(dir)?;
    match dir.parent() {
        Some(parent) => fs.sync_dir(parent),
        None => Ok(()),
    }
}

/// Removes a directory and the files in it (slots hold no subdirectories).
fn remove_dir(fs: &dyn FileSystem, dir: &Path) -> Result<()> {
    for name in fs.list(dir)? {
        fs.remove(&dir.join(name))?;
    }
    fs.remove(dir)
}

/// Reads the state file of the slot directory `dir`, named `name`.
fn read_state(fs: &dyn FileSystem, dir: &Path, name: &str) -> Result<SlotData> {
    let path = dir.join("state");
    let file = fs.open(&path, false)?;
    let len = file.len()?;
    if len > MAX_STATE_LEN as u64 {
        return Err(Error::CorruptFile { path, detail: format!("replication slot state file of {len} bytes") });
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, 0)?;
    let d = SlotData::decode(&bytes).map_err(|detail| Error::CorruptFile { path: path.clone(), detail })?;
    if d.name != name {
        return Err(Error::CorruptFile {
            path,
            detail: format!("directory says slot \"{name}\", state says \"{}\"", d.name),
        });
    }
    Ok(d)
}

/// Loads the slots under `data_dir/pg_replslot` (creating the directory if missing), after
/// removing the leftovers of interrupted creations and drops (`StartupReplicationSlots`).
pub fn load_all(fs: &dyn FileSystem, data_dir: &Path) -> Result<Vec<SlotData>> {
    let dir = slot_dir(data_dir);
    if !fs.exists(&dir) {
        fs.create_dir_all(&dir)?;
        fs.sync_dir(data_dir)?;
    }
    let mut out = Vec::new();
    let mut removed = false;
    for name in fs.list(&dir)? {
        let path = dir.join(&name);
        if !name.ends_with(".tmp") && fs.exists(&path.join("state")) {
            out.push(read_state(fs, &path, &name)?);
            continue;
        }
        // Not a directory (no entries to list): not ours, left alone as PostgreSQL does.
        let Ok(entries) = fs.list(&path) else { continue };
        for e in entries {
            fs.remove(&path.join(e))?;
        }
        fs.remove(&path)?;
        removed = true;
    }
    if removed {
        fs.sync_dir(&dir)?;
    }
    Ok(out)
}

/// A slot in memory.
#[derive(Clone, Debug)]
struct Slot {
    data: SlotData,
    /// Changed since its file was written.
    dirty: bool,
    /// Not on disk yet: a slot being created waits for its consistent point in memory only
    /// (PostgreSQL's `RS_EPHEMERAL`), so a crash meanwhile leaves no slot.
    ephemeral: bool,
}

/// The slots' minima pushed down to the WAL and the transaction manager.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotMinima {
    /// The oldest `restart_lsn` of a valid slot (`INVALID`: none), with its slot.
    pub restart_lsn: Option<(Lsn, String)>,
    pub xmin: Option<(Xid, String)>,
    pub catalog_xmin: Option<(Xid, String)>,
}

/// The replication slots of a data directory (PostgreSQL's `ReplicationSlotCtl`).
pub struct ReplicationSlots {
    fs: Arc<dyn FileSystem>,
    /// `pg_replslot`.
    dir: PathBuf,
    slots: Mutex<BTreeMap<String, Slot>>,
}

/// The slots' lock, held by a caller doing several steps at once (creation).
pub struct SlotsGuard<'a> {
    owner: &'a ReplicationSlots,
    slots: parking_lot::MutexGuard<'a, BTreeMap<String, Slot>>,
}

impl ReplicationSlots {
    /// Loads the slots of `data_dir` ([`load_all`]).
    pub fn open(fs: Arc<dyn FileSystem>, data_dir: &Path) -> Result<ReplicationSlots> {
        let loaded = load_all(&*fs, data_dir)?;
        let slots =
            loaded.into_iter().map(|d| (d.name.clone(), Slot { data: d, dirty: false, ephemeral: false })).collect();
        Ok(ReplicationSlots { fs, dir: slot_dir(data_dir), slots: Mutex::new(slots) })
    }

    /// Takes the slots' lock.
    pub fn lock(&self) -> SlotsGuard<'_> {
        SlotsGuard { owner: self, slots: self.slots.lock() }
    }

    /// Every slot's state, by name.
    pub fn list(&self) -> Vec<SlotData> {
        self.slots.lock().values().map(|s| s.data.clone()).collect()
    }

    /// The slots' minima now.
    pub fn minima(&self) -> SlotMinima {
        self.lock().minima()
    }
}

impl SlotsGuard<'_> {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&SlotData> {
        self.slots.get(name).map(|s| &s.data)
    }

    /// Writes a new slot's directory (`CreateSlotOnDisk`) and adds it; a temporary slot is
    /// only added. On error nothing is added, and at most a directory without `state` is
    /// left, which the next startup removes.
    pub fn create(&mut self, d: SlotData) -> Result<()> {
        if d.temporary {
            self.slots.insert(d.name.clone(), Slot { data: d, dirty: false, ephemeral: false });
            return Ok(());
        }
        let fs = &*self.owner.fs;
        let path = self.owner.dir.join(&d.name);
        if fs.exists(&path) {
            remove_dir(fs, &path)?;
        }
        fs.create_dir_all(&path)?;
        fs.sync_dir(&self.owner.dir)?;
        save_to_path(fs, &path, &d)?;
        self.slots.insert(d.name.clone(), Slot { data: d, dirty: false, ephemeral: false });
        Ok(())
    }

    /// Adds a slot in memory only: it holds WAL and catalog rows and its name is taken, but
    /// nothing is on disk until [`SlotsGuard::persist`].
    pub fn create_ephemeral(&mut self, d: SlotData) {
        self.slots.insert(d.name.clone(), Slot { data: d, dirty: false, ephemeral: true });
    }

    /// Writes an ephemeral slot to disk as [`SlotsGuard::create`] does, with state `d`.
    pub fn persist(&mut self, d: SlotData) -> Result<()> {
        match self.slots.get(&d.name) {
            Some(s) if s.ephemeral => self.create(d),
            Some(_) => self.update(d, true),
            None => Err(Error::NotFound(format!("replication slot \"{}\" does not exist", d.name))),
        }
    }

    /// Drops a slot (`ReplicationSlotDropPtr`): its `state` is removed and that made durable,
    /// then its directory. `NotFound` when there is none.
    pub fn drop_slot(&mut self, name: &str) -> Result<SlotData> {
        if !self.slots.contains_key(name) {
            return Err(Error::NotFound(format!("replication slot \"{name}\" does not exist")));
        }
        if self.slots.get(name).is_some_and(|s| s.ephemeral || s.data.temporary) {
            return self
                .slots
                .remove(name)
                .map(|s| s.data)
                .ok_or_else(|| Error::NotFound(format!("replication slot \"{name}\" does not exist")));
        }
        let fs = &*self.owner.fs;
        let path = self.owner.dir.join(name);
        fs.remove(&path.join("state"))?;
        fs.sync_dir(&path)?;
        let gone = self.slots.remove(name).map(|s| s.data);
        // The slot is gone once the removal is durable; a failure to remove the rest only
        // leaves a directory without `state`, which the next startup removes (PostgreSQL
        // warns).
        let _ = remove_dir(fs, &path).and_then(|()| fs.sync_dir(&self.owner.dir));
        gone.ok_or_else(|| Error::NotFound(format!("replication slot \"{name}\" does not exist")))
    }

    /// Replaces a slot's state; written at once when `save`, else at the next checkpoint.
    pub fn update(&mut self, d: SlotData, save: bool) -> Result<()> {
        let dir = self.owner.dir.join(&d.name);
        let in_memory = d.temporary || self.slots.get(&d.name).is_some_and(|s| s.ephemeral);
        if save && !in_memory {
            save_to_path(&*self.owner.fs, &dir, &d)?;
        }
        match self.slots.get_mut(&d.name) {
            Some(s) => {
                s.dirty = !save && !d.temporary && (s.dirty || s.data != d);
                s.data = d;
                Ok(())
            }
            None => Err(Error::NotFound(format!("replication slot \"{}\" does not exist", d.name))),
        }
    }

    /// Writes every dirty slot (`CheckPointReplicationSlots`); how many. A slot whose write
    /// fails stays dirty.
    pub fn save_dirty(&mut self) -> Result<usize> {
        let mut n = 0;
        for s in self.slots.values_mut().filter(|s| s.dirty && !s.ephemeral && !s.data.temporary) {
            save_to_path(&*self.owner.fs, &self.owner.dir.join(&s.data.name), &s.data)?;
            s.dirty = false;
            n += 1;
        }
        Ok(n)
    }

    /// The oldest `restart_lsn`, `xmin` and `catalog_xmin` of the valid slots
    /// (`ReplicationSlotsComputeRequiredLSN` / `…RequiredXmin`), XIDs compared modulo 2^32.
    pub fn minima(&self) -> SlotMinima {
        let mut m = SlotMinima::default();
        for d in self.slots.values().map(|s| &s.data).filter(|d| !d.invalidated) {
            if m.restart_lsn.as_ref().is_none_or(|(l, _)| d.restart_lsn < *l) {
                m.restart_lsn = Some((d.restart_lsn, d.name.clone()));
            }
            for (x, slot) in [(d.xmin, &mut m.xmin), (d.catalog_xmin, &mut m.catalog_xmin)] {
                if x.is_normal() && slot.as_ref().is_none_or(|(o, _)| x.precedes(*o)) {
                    *slot = Some((x, d.name.clone()));
                }
            }
        }
        m
    }

    /// Invalidates every valid slot whose `restart_lsn` precedes `oldest_kept`
    /// (`InvalidateObsoleteReplicationSlots`), writing each at once; returns them with the
    /// `restart_lsn` each had.
    pub fn invalidate_obsolete(&mut self, oldest_kept: Lsn) -> Result<Vec<(String, Lsn)>> {
        let doomed: Vec<SlotData> = self
            .slots
            .values()
            .map(|s| &s.data)
            .filter(|d| !d.invalidated && d.restart_lsn < oldest_kept)
            .cloned()
            .collect();
        let mut out = Vec::new();
        for mut d in doomed {
            let at = d.restart_lsn;
            d.invalidated = true;
            d.invalidated_at = at;
            d.restart_lsn = Lsn::INVALID;
            out.push((d.name.clone(), at));
            self.update(d, true)?;
        }
        Ok(out)
    }
}

/// A running-transactions record seen in the WAL.
#[derive(Clone, Debug)]
pub struct RunningXactsAt {
    pub lsn: Lsn,
    pub end: Lsn,
    pub running: RunningXacts,
}

/// The position a slot's `restart_lsn` may move to and the `catalog_xmin` that goes with it,
/// given the running-transactions records between its current `restart_lsn` and
/// `confirmed_flush` (ascending); `None` when none qualifies. The rule and why it is safe
/// are in the module doc ("Advancing").
pub fn restart_point(records: &[RunningXactsAt], confirmed_flush: Lsn) -> Option<(Lsn, Xid)> {
    let usable: Vec<&RunningXactsAt> = records.iter().filter(|r| r.end <= confirmed_flush).collect();
    // The newest oldest-running XID seen: every XID before it had finished when the record
    // carrying it was logged (a listed XID cannot be newer, see the module doc).
    let horizon = usable.iter().map(|r| r.running.oldest_running).reduce(|a, b| if a.precedes(b) { b } else { a })?;
    usable
        .iter()
        .rev()
        .find(|r| r.running.xids.iter().all(|x| x.precedes(horizon)))
        .map(|r| (r.lsn, r.running.oldest_running))
}

/// `wal_status` of `pg_replication_slots` (PostgreSQL's `GetWALAvailability`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalStatus {
    /// Within `max_wal_size`.
    Reserved,
    /// Beyond `max_wal_size`, kept for the slot.
    Extended,
    /// Beyond `max_slot_wal_keep_size`: the next checkpoint invalidates the slot.
    Unreserved,
    /// Invalidated: WAL it needed is gone.
    Lost,
}

impl WalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            WalStatus::Reserved => "reserved",
            WalStatus::Extended => "extended",
            WalStatus::Unreserved => "unreserved",
            WalStatus::Lost => "lost",
        }
    }
}

/// What `pg_replication_slots` needs to know of the WAL.
#[derive(Clone, Copy, Debug)]
pub struct WalPosition {
    /// The WAL write position (`GetXLogWriteRecPtr`).
    pub current: Lsn,
    pub segment_size: u64,
    pub max_wal_size: u64,
    /// `max_slot_wal_keep_size` in bytes, -1 for unlimited.
    pub max_slot_wal_keep_size: i64,
}

impl WalPosition {
    fn segno(&self, lsn: Lsn) -> u64 {
        lsn.0 / self.segment_size.max(1)
    }

    /// `max_slot_wal_keep_size` in whole segments (`XLogMBVarToSegs`), `None` for unlimited.
    fn slot_keep_segs(&self) -> Option<u64> {
        u64::try_from(self.max_slot_wal_keep_size).ok().map(|b| b / self.segment_size.max(1))
    }

    /// The oldest LSN a checkpoint keeps for the slots given their oldest `restart_lsn`
    /// (`KeepLogSeg`, slot part): that LSN, or no further back than `max_slot_wal_keep_size`
    /// before the current position's segment.
    pub fn keep_lsn(&self, oldest_restart: Lsn) -> Lsn {
        let mut segno = self.segno(oldest_restart);
        if let Some(keep) = self.slot_keep_segs() {
            let cur = self.segno(self.current);
            if cur.saturating_sub(segno) > keep {
                segno = cur - keep;
            }
        }
        // The segment's start; never 0, which would mean "nothing to keep".
        Lsn((segno * self.segment_size).max(1))
    }

    /// `wal_status` and `safe_wal_size` of a slot.
    pub fn status(&self, d: &SlotData) -> (WalStatus, Option<i64>) {
        if d.invalidated {
            return (WalStatus::Lost, None);
        }
        let target = self.segno(d.restart_lsn);
        let cur = self.segno(self.current);
        let oldest_slot_seg = match self.slot_keep_segs() {
            Some(keep) if cur.saturating_sub(target) > keep => cur - keep,
            _ => target,
        };
        let keep_segs = self.max_wal_size / self.segment_size.max(1) + 1;
        let oldest_by_max_wal = if cur > keep_segs { cur - keep_segs } else { 1 };
        let status = if target >= oldest_slot_seg {
            if target >= oldest_by_max_wal {
                WalStatus::Reserved
            } else {
                WalStatus::Extended
            }
        } else {
            WalStatus::Unreserved
        };
        let safe = self.slot_keep_segs().map(|keep| {
            let fail_lsn = (i128::from(target) + i128::from(keep) + 1) * i128::from(self.segment_size);
            (fail_lsn - i128::from(self.current.0)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
        });
        (status, safe)
    }
}

/// One row of `pg_replication_slots` (PostgreSQL 15's columns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotInfo {
    pub slot_name: String,
    pub plugin: String,
    /// `logical` (physical slots are not built yet).
    pub slot_type: &'static str,
    pub datoid: Oid,
    pub database: String,
    /// Kept in memory only, dropped with the session that created it.
    pub temporary: bool,
    /// Always false: no walsender or decoding session holds a slot yet.
    pub active: bool,
    pub active_pid: Option<u32>,
    pub xmin: Option<Xid>,
    pub catalog_xmin: Option<Xid>,
    pub restart_lsn: Option<Lsn>,
    pub confirmed_flush_lsn: Option<Lsn>,
    pub wal_status: Option<WalStatus>,
    /// Bytes of WAL that can still be written before the slot is in danger of losing WAL it
    /// needs (`None` with `max_slot_wal_keep_size = -1` or a lost slot).
    pub safe_wal_size: Option<i64>,
    pub two_phase: bool,
}

impl SlotInfo {
    /// The row of slot `d` given the WAL's position.
    pub fn of(d: &SlotData, wal: &WalPosition) -> SlotInfo {
        let (status, safe) = wal.status(d);
        let some_xid = |x: Xid| Some(x).filter(|x| x.is_normal());
        SlotInfo {
            slot_name: d.name.clone(),
            plugin: d.plugin.clone(),
            slot_type: "logical",
            datoid: d.database,
            database: DATABASE_NAME.to_string(),
            temporary: d.temporary,
            active: false,
            active_pid: None,
            xmin: some_xid(d.xmin),
            catalog_xmin: some_xid(d.catalog_xmin),
            restart_lsn: Some(d.restart_lsn).filter(|l| *l != Lsn::INVALID),
            confirmed_flush_lsn: Some(d.confirmed_flush).filter(|l| *l != Lsn::INVALID),
            wal_status: Some(status),
            safe_wal_size: safe,
            two_phase: d.two_phase,
        }
    }
}

#[cfg(test)]
mod tests;
