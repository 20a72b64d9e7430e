//! Bringing a data directory up: bootstrap of a new cluster, crash recovery, checkpoints.
//!
//! # Data directory
//!
//! ```text
//!   DIR/global/pg_control   control file: last checkpoint, redo pointer, next XID, oldest XID
//!   DIR/pg_wal/             WAL segments
//!   DIR/pg_xact/            CLOG segments
//!   DIR/pg_twophase/        state files of prepared transactions older than the last
//!                           checkpoint's redo pointer ([`crate::xact::twophase`])
//!   DIR/base/<filenode>     relation forks (pg_class is 1259)
//!   DIR/pg_stat/stats.bin   statistics saved by a clean shutdown ([`crate::stats`])
//! ```
//!
//! # Recovery
//!
//! The control file is written last by every checkpoint, so it always names a complete one.
//! Recovery first loads the prepared transactions' state files (`pg_twophase`), then reads
//! WAL from that checkpoint's redo pointer to the end of valid WAL (a torn or
//! corrupt tail ends it) and replays each record: transaction records set CLOG (and add or
//! finish prepared transactions), storage records
//! create or truncate files, page records go through [`redo_blocks`], which restores full-page
//! images and skips pages whose LSN already covers the record, so replay is idempotent. Then
//! the WAL continues from the end of the last valid record, the catalog is loaded, files no
//! catalog row names are removed, and an end-of-recovery checkpoint is taken. Prepared
//! transactions not finished in the WAL run again (`xact::prepared`), waiting for COMMIT or
//! ROLLBACK PREPARED; `pg_subtrans` starts empty (`xact::subtrans` says why that is enough).
//!
//! # Checkpoints
//!
//! 1. set the redo pointer (later page changes log full-page images), then wait for the
//!    commits that logged their commit record but have not yet marked the CLOG
//!    (`TransactionManager::wait_for_commits_in_flight`, PostgreSQL's `DELAY_CHKPT_START`): a
//!    commit record before the redo pointer is never replayed, so its CLOG bit must be in what
//!    step 2 writes;
//! 2. flush WAL, then write CLOG pages (a commit's CLOG bit never reaches disk before its
//!    commit record);
//!    then write and fsync a state file for each prepared transaction whose PREPARE record
//!    lies before the redo pointer (waited for like commits in step 1), and drop the
//!    `pg_subtrans` pages before the horizon;
//! 3. write every dirty buffer (each after WAL up to its LSN) and fsync the relation files;
//! 4. log a CHECKPOINT record, flush it, write the control file (atomically, durably);
//! 5. recycle WAL segments wholly before the redo pointer as future segments, or remove them
//!    beyond what `min_wal_size`, `max_wal_size` and the WAL written per checkpoint call for
//!    ([`Wal::remove_old_segments`]).
//!
//! A failure to make the CLOG, the data files or the control file durable (steps 2-4) poisons
//! the WAL: the control file keeps the previous checkpoint and no later checkpoint may claim
//! the pages the failed fsync may have dropped (see `ARCHITECTURE.md`, invariant 8). A failed
//! page write in step 3 (ENOSPC) only fails this checkpoint: the page stays dirty.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::buffer::BufferPool;
use crate::catalog::{self, Catalog, ClassRow, PG_CLASS_OID};
use crate::config::WalLevel;
use crate::error::{Error, Result};
use crate::heap::{self, HeapEnv, Relation, TxContext};
use crate::io::FileSystem;
use crate::page;
use crate::smgr::Smgr;
use crate::types::{Fork, FullXid, Lsn, Oid, Tid, Xid};
use crate::wal::control::{ControlFile, DbState};
use crate::wal::{self, DecodedRecord, RecordBuilder, Rmgr, Wal, WalConfig, WalReader};
use crate::xact::{Snapshot, TransactionManager, XactOptions};

pub const XLOG_CHECKPOINT: u8 = 0x00;
pub const XLOG_CHECKPOINT_SHUTDOWN: u8 = 0x10;
/// A setting that decides what the WAL holds changed at startup (PostgreSQL's
/// `XLOG_PARAMETER_CHANGE`): main data is the new `wal_level` byte ([`WalLevel::to_u8`]).
/// A logical decoder must not read past one that lowers the level below `logical`.
pub const XLOG_PARAMETER_CHANGE: u8 = 0x60;

/// Decodes a parameter-change record's `wal_level`.
pub fn decode_parameter_change(rec: &DecodedRecord) -> Result<WalLevel> {
    match rec.main_data.first().and_then(|&b| WalLevel::from_u8(b)) {
        Some(l) if rec.main_data.len() == 1 => Ok(l),
        _ => Err(Error::corrupt_wal(rec.lsn, "PARAMETER_CHANGE record: bad wal_level")),
    }
}

/// Records `level` in the control file (written by the startup checkpoint that follows) and,
/// when it differs from the level the existing WAL was written at, logs a parameter change so
/// that a logical decoder knows where the WAL stops (or starts) carrying what it needs.
pub fn note_wal_level(wal: &Wal, control: &mut ControlFile, level: WalLevel, fresh: bool) -> Result<()> {
    let before = WalLevel::from_u8(control.wal_level).unwrap_or(WalLevel::Replica);
    if !fresh && before != level {
        wal.insert(&RecordBuilder {
            toplevel_xid: Xid::INVALID,
            rmgr: Rmgr::Xlog,
            info: XLOG_PARAMETER_CHANGE,
            xid: Xid::INVALID,
            blocks: vec![],
            main_data: vec![level.to_u8()],
        })?;
    }
    control.wal_level = level.to_u8();
    Ok(())
}

fn describe_parameter_change(rec: &DecodedRecord) -> String {
    match decode_parameter_change(rec) {
        Ok(l) => format!("PARAMETER_CHANGE wal_level={l}"),
        Err(e) => format!("PARAMETER_CHANGE (malformed: {e})"),
    }
}
pub use crate::wal::{STORAGE_CREATE, STORAGE_TRUNCATE};

pub fn control_path(dir: &Path) -> PathBuf {
    dir.join("global").join("pg_control")
}

pub fn wal_dir(dir: &Path) -> PathBuf {
    dir.join("pg_wal")
}

pub fn base_dir(dir: &Path) -> PathBuf {
    dir.join("base")
}

/// The main forks' lengths at the last checkpoint ([`crate::smgr::sizes`]).
pub fn relsize_path(dir: &Path) -> PathBuf {
    dir.join("global").join(crate::smgr::sizes::FILE_NAME)
}

/// What recovery found, for the log and for tests.
#[derive(Debug, Default, Clone)]
pub struct RecoveryReport {
    pub performed: bool,
    pub redo_start: Lsn,
    pub end_lsn: Lsn,
    pub records_replayed: u64,
    pub stop_reason: Option<String>,
    /// Prepared transactions still waiting for COMMIT/ROLLBACK PREPARED after recovery.
    pub prepared_transactions: usize,
}

/// Applies a record's page changes (the generic half of redo).
pub fn redo_blocks(rec: &DecodedRecord, pool: &BufferPool) -> Result<()> {
    for b in &rec.blocks {
        let tag = b.tag;
        pool.smgr().ensure_size(tag.rel, tag.fork, tag.block)?;
        let imageless = crate::vacuum::wal::keeps_page_lsn(rec, b.id);
        let buf = if b.image.is_some() || b.will_init {
            pool.new_page(tag, None)?
        } else {
            match pool.read(tag, None) {
                Ok(buf) => buf,
                // An imageless all-visible record is the first change to its page since the
                // checkpoint, so the page in the file may be torn by a later write; such a
                // write was of a change logged with a full-page image after this record,
                // which restores the page. (Were it not so, the page fails its next read.)
                Err(Error::Corrupted { .. }) if imageless => continue,
                Err(e) => return Err(e),
            }
        };
        let mut g = buf.write();
        if redo_page(rec, b, &mut g.0)? {
            if imageless {
                buf.mark_dirty_imageless(rec.end_lsn);
            } else {
                buf.mark_dirty();
            }
        }
    }
    Ok(())
}

/// Applies one block reference of `rec` to its page as recovery does: restores a full-page
/// image, skips a page whose LSN already covers the record, otherwise hands the page to its
/// resource manager's redo; then stamps the record's end LSN (except on a heap page an
/// imageless PRUNE_FREEZE record sets all-visible, which keeps its LSN as it did live). `page` is what the buffer pool
/// gave [`redo_blocks`]: a zeroed page for an image or `will_init`, else the page as read (and
/// checksum-verified). Returns whether the page changed. Never does I/O, so the fuzz target
/// `wal_record` runs exactly this on pages made of arbitrary bytes.
pub fn redo_page(rec: &DecodedRecord, b: &wal::DecodedBlock, page: &mut [u8]) -> Result<bool> {
    let tag = b.tag;
    if let Some(img) = &b.image {
        page.copy_from_slice(&img[..]);
    } else if !b.will_init && !page::is_new(page) && page::lsn(page) >= rec.end_lsn {
        return Ok(false); // already there
    } else {
        if !b.will_init && page::is_new(page) && !matches!(rec.rmgr, Rmgr::Heap | Rmgr::Heap2) {
            return Err(Error::corrupt_wal(
                rec.lsn,
                format!("record changes block {} of {} which is empty", tag.block, tag.rel),
            ));
        }
        // Heap changes apply to heap pages only, validated first (a new page passes only if
        // all zeros: one restored from an image may not be).
        // VACUUM's PRUNE_FREEZE and VACUUM records carry the map page as block 1.
        let map_block = rec.rmgr == Rmgr::Heap2 && tag.fork == Fork::Vm && crate::vacuum::wal::is_vacuum_record(rec);
        let heap_change = matches!(rec.rmgr, Rmgr::Heap | Rmgr::Heap2) && !crate::vm::is_vm_record(rec) && !map_block;
        if heap_change && tag.fork != Fork::Main {
            return Err(Error::corrupt_wal(
                rec.lsn,
                format!("heap record changes the {:?} fork of {}", tag.fork, tag.rel),
            ));
        }
        if matches!(rec.rmgr, Rmgr::Heap | Rmgr::Heap2) && tag.fork == Fork::Main {
            page::validate_items(page, tag.rel, tag.block)?;
        }
        match rec.rmgr {
            Rmgr::Heap2 if map_block => crate::vacuum::wal::redo_map_block(rec, b.id, tag.block, page)?,
            Rmgr::Heap2 if crate::vacuum::wal::is_vacuum_record(rec) => {
                crate::vacuum::wal::redo_heap_block(rec, b.id, tag.block, page)?
            }
            Rmgr::Heap2 if crate::vm::is_vm_record(rec) => crate::vm::redo_block(rec, b.id, tag.block, page)?,
            Rmgr::Heap | Rmgr::Heap2 => heap::wal::redo_block(rec, b.id, tag.block, &b.data, page)?,
            Rmgr::Btree => crate::btree::wal::redo_block(rec, b.id, tag.block, &b.data, page)?,
            Rmgr::Xlog if rec.info == wal::newpage::XLOG_FPI => wal::newpage::restore_image(rec, &b.data, page)?,
            other => {
                return Err(Error::corrupt_wal(rec.lsn, format!("{} records carry no page changes", other.name())));
            }
        }
    }
    if !crate::vacuum::wal::keeps_page_lsn(rec, b.id) {
        page::set_lsn(page, rec.end_lsn);
    }
    Ok(true)
}

/// The checkpoint record's main data.
pub struct CheckpointInfo {
    pub redo: Lsn,
    pub next_xid: FullXid,
    pub oldest_xid: Xid,
    pub next_oid: Oid,
}

impl CheckpointInfo {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(24);
        v.extend_from_slice(&self.redo.0.to_le_bytes());
        v.extend_from_slice(&self.next_xid.0.to_le_bytes());
        v.extend_from_slice(&self.oldest_xid.0.to_le_bytes());
        v.extend_from_slice(&self.next_oid.0.to_le_bytes());
        v
    }

    pub fn describe(rec: &DecodedRecord) -> String {
        let mut c = wal::Cursor::new(&rec.main_data, rec.lsn);
        let r: Result<String> = (|| {
            let redo = Lsn(c.u64()?);
            let next = FullXid(c.u64()?);
            let oldest = c.u32()?;
            let oid = c.u32()?;
            let kind = if rec.info == XLOG_CHECKPOINT_SHUTDOWN { "CHECKPOINT_SHUTDOWN" } else { "CHECKPOINT_ONLINE" };
            Ok(format!(
                "{kind} redo {redo}; nextXid {}:{}; nextOid {oid}; oldestXid {oldest}",
                next.epoch(),
                next.xid()
            ))
        })();
        r.unwrap_or_else(|e| format!("(undecodable: {e})"))
    }
}

/// Logs the creation of a relation fork, then creates it (redo creates it again).
pub fn log_create(wal: &Wal, smgr: &Smgr, rel: Oid, fork: Fork) -> Result<()> {
    let main = wal::storage_main_data(rel, fork, None);
    let lsn = wal.insert(&RecordBuilder {
        toplevel_xid: crate::types::Xid::INVALID,
        rmgr: Rmgr::Storage,
        info: STORAGE_CREATE,
        xid: Xid::INVALID,
        blocks: vec![],
        main_data: main,
    })?;
    wal.flush(lsn)?;
    // The WAL now says the file exists: failing to make that durable stops the engine.
    smgr.create(rel, fork).map_err(|e| wal.poison_after("creating a relation file", e))
}

pub fn redo_storage(rec: &DecodedRecord, pool: &BufferPool) -> Result<()> {
    let mut c = wal::Cursor::new(&rec.main_data, rec.lsn);
    let rel = Oid(c.u32()?);
    let fork = Fork::from_u8(c.u8()?).ok_or_else(|| Error::corrupt_wal(rec.lsn, "unknown fork number"))?;
    match rec.info {
        STORAGE_CREATE => pool.smgr().create(rel, fork),
        STORAGE_TRUNCATE => {
            let n = c.u32()?;
            pool.drop_relation_buffers(rel, Some(fork), crate::types::BlockNumber(n))?;
            pool.smgr().truncate(rel, fork, n)
        }
        _ => Err(Error::corrupt_wal(rec.lsn, format!("unknown storage record info 0x{:02X}", rec.info))),
    }
}

pub fn describe_storage(rec: &DecodedRecord) -> String {
    let mut c = wal::Cursor::new(&rec.main_data, rec.lsn);
    let r: Result<String> = (|| {
        let rel = c.u32()?;
        let fork = c.u8()?;
        Ok(match rec.info {
            STORAGE_CREATE => format!("CREATE base/{rel}{}", Fork::from_u8(fork).map_or("?", |f| f.suffix())),
            _ => format!("TRUNCATE base/{rel} to {} blocks", c.u32()?),
        })
    })();
    r.unwrap_or_else(|e| format!("(undecodable: {e})"))
}

/// One rmgr-specific description for `settle waldump`.
pub fn describe_record(rec: &DecodedRecord) -> String {
    match rec.rmgr {
        Rmgr::Xlog if rec.info == XLOG_PARAMETER_CHANGE => describe_parameter_change(rec),
        Rmgr::Xlog if rec.info == wal::newpage::XLOG_FPI => "FPI".to_string(),
        Rmgr::Xlog => CheckpointInfo::describe(rec),
        Rmgr::Storage => describe_storage(rec),
        Rmgr::Heap2 if crate::vm::is_vm_record(rec) => crate::vm::describe(rec),
        Rmgr::Heap2 if crate::vacuum::wal::is_vacuum_record(rec) => crate::vacuum::wal::describe(rec),
        Rmgr::Heap | Rmgr::Heap2 => heap::wal::describe(rec),
        Rmgr::Btree => crate::btree::wal::describe(rec),
        Rmgr::Xact | Rmgr::Clog => crate::xact::describe(rec),
        Rmgr::Standby => crate::xact::standby::describe(rec),
        Rmgr::LogicalMsg => crate::decode::message::describe(rec),
        other => format!("{} info 0x{:02X}", other.name(), rec.info),
    }
}

/// Replays WAL from `start` through `pool`/`xact`. Returns the reader's end and last record.
pub fn replay(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    control: &ControlFile,
    pool: &BufferPool,
    xact: &TransactionManager,
) -> Result<(RecoveryReport, Lsn, FullXid)> {
    let mut reader = WalReader::new(fs.clone(), &wal_dir(dir), control.redo_lsn, control.wal_segment_size);
    let mut report = RecoveryReport { performed: true, redo_start: control.redo_lsn, ..Default::default() };
    xact.set_next_full_xid(control.next_xid);
    xact.load_twophase_files()?;
    while let Some(rec) = reader.next()? {
        if rec.xid.is_normal() {
            let next_xid = xact.next_full_xid();
            let full = next_xid.widen(rec.xid);
            if full >= next_xid {
                xact.set_next_full_xid(full.next());
            }
        }
        match rec.rmgr {
            Rmgr::Xlog if rec.info == wal::newpage::XLOG_FPI => redo_blocks(&rec, pool)?,
            Rmgr::Xlog | Rmgr::Catalog | Rmgr::Standby | Rmgr::LogicalMsg => {}
            Rmgr::Xact => xact.redo(&rec)?,
            Rmgr::Clog => xact.clog().redo(&rec)?,
            Rmgr::Storage => redo_storage(&rec, pool)?,
            Rmgr::Heap | Rmgr::Heap2 | Rmgr::Btree => redo_blocks(&rec, pool)?,
        }
        report.records_replayed += 1;
    }
    report.end_lsn = reader.end_lsn();
    report.stop_reason = reader.stop_reason().map(str::to_string);
    report.prepared_transactions = xact.finish_twophase_recovery()?;
    Ok((report, reader.last_record_lsn(), xact.next_full_xid()))
}

/// Initializes a new data directory.
pub fn bootstrap_dirs(fs: &Arc<dyn FileSystem>, dir: &Path) -> Result<()> {
    for d in [
        dir.to_path_buf(),
        dir.join("global"),
        wal_dir(dir),
        base_dir(dir),
        dir.join("pg_xact"),
        dir.join(crate::xact::twophase::TWOPHASE_DIR),
    ] {
        fs.create_dir_all(&d)?;
    }
    fs.sync_dir(dir)
}

/// Creates `pg_class` and its row for itself, as the bootstrap transaction.
pub fn bootstrap_catalog(env: &HeapEnv<'_>, catalog: &Catalog) -> Result<()> {
    log_create(env.wal, env.pool.smgr(), PG_CLASS_OID, Fork::Main)?;
    let row = ClassRow {
        oid: PG_CLASS_OID,
        relname: "pg_class".to_string(),
        relfilenode: PG_CLASS_OID,
        relpages: 0,
        reltuples: -1.0,
        relfrozenxid: Xid::FIRST_NORMAL,
        relminmxid: 1,
        fillfactor: 100,
        schema: catalog::pg_class_schema(),
        kind: catalog::RelKind::Table,
        index: None,
        options: Default::default(),
        replica_identity: Default::default(),
        missing: Vec::new(),
    };
    let rel = Relation::new(PG_CLASS_OID, "pg_class", PG_CLASS_OID, catalog::pg_class_schema(), 100);
    let snap = Snapshot::simple(Xid::FIRST_NORMAL, Xid::FIRST_NORMAL, vec![], Some(Xid::BOOTSTRAP));
    let tx = TxContext {
        xid: Xid::BOOTSTRAP,
        top_xid: Xid::BOOTSTRAP,
        cid: 0,
        snapshot: &snap,
        serializable_updates: false,
        horizon: Xid::INVALID,
    };
    let tid = heap::insert(env, &rel, &tx, &row.to_values())?;
    catalog.publish(&row, tid, env.xact.next_full_xid());
    Ok(())
}

/// A version of the `pg_class` row of table `oid` still on disk, live or dead: the logical
/// decoder's lookup of a table dropped before decoding reached its changes. A dropped table's
/// row stays in `pg_class` while a logical slot needs it (the slot's `catalog_xmin` holds
/// VACUUM and pruning of `pg_class` back), and a table's name and columns never change under
/// its OID, so any version of its row describes it.
pub fn find_table_row_any_version(env: &HeapEnv<'_>, oid: Oid) -> Result<Option<ClassRow>> {
    let rel = Relation::new(PG_CLASS_OID, "pg_class", PG_CLASS_OID, catalog::pg_class_schema(), 100);
    let nblocks = env.pool.smgr().nblocks(PG_CLASS_OID, Fork::Main)?;
    for b in 0..nblocks {
        for (tid, vals) in heap::scan_page_any(env, &rel, crate::types::BlockNumber(b))? {
            let row = ClassRow::from_values(&vals, tid)?;
            if row.oid == oid && row.kind == catalog::RelKind::Table {
                return Ok(Some(row));
            }
        }
    }
    Ok(None)
}

/// The table whose storage is file node `relfilenode`, by any version of its `pg_class` row
/// still on disk (the logical decoder's lookup of a heap record's relation, which TRUNCATE may
/// since have moved to other storage).
pub fn find_table_by_filenode_any_version(env: &HeapEnv<'_>, relfilenode: Oid) -> Result<Option<Oid>> {
    let rel = Relation::new(PG_CLASS_OID, "pg_class", PG_CLASS_OID, catalog::pg_class_schema(), 100);
    let nblocks = env.pool.smgr().nblocks(PG_CLASS_OID, Fork::Main)?;
    for b in 0..nblocks {
        for (tid, vals) in heap::scan_page_any(env, &rel, crate::types::BlockNumber(b))? {
            let row = ClassRow::from_values(&vals, tid)?;
            if row.relfilenode == relfilenode && row.kind == catalog::RelKind::Table {
                return Ok(Some(row.oid));
            }
        }
    }
    Ok(None)
}

/// The cache's description of the index whose committed `pg_class` row is `row` at `tid`.
pub fn index_def(row: &ClassRow, tid: Tid) -> Result<std::sync::Arc<catalog::IndexDef>> {
    let meta =
        row.index.clone().ok_or_else(|| Error::corrupted(PG_CLASS_OID, tid.block, "index row without index data"))?;
    let btree = std::sync::Arc::new(crate::db::ddl::new_btree(
        row.oid,
        row.relfilenode,
        &row.relname,
        &row.schema,
        meta.unique,
    ));
    Ok(std::sync::Arc::new(catalog::IndexDef {
        oid: row.oid,
        name: row.relname.clone(),
        meta,
        row: parking_lot::Mutex::new(tid),
        // Committed before it is read: every snapshot may use it.
        created_by: Xid::FROZEN,
        btree,
        dropped: parking_lot::RwLock::new(false),
    }))
}

/// Reads every committed `pg_class` row into the catalog cache (which also rebuilds the
/// ordered relfrozenxid index, after a crash as after a clean shutdown).
pub fn load_catalog(env: &HeapEnv<'_>, catalog: &Catalog) -> Result<()> {
    let next = env.xact.next_full_xid();
    let mut index_rows = Vec::new();
    catalog::for_each_class_row(env, |row, tid| {
        match row.kind {
            catalog::RelKind::Table => {
                catalog.publish(&row, tid, next);
            }
            catalog::RelKind::Index => index_rows.push((row, tid)),
        }
        Ok(())
    })?;
    // Indexes after every table, whatever order the rows were found in.
    for (row, tid) in index_rows {
        let def = index_def(&row, tid)?;
        if catalog.publish_index(def).is_none() {
            return Err(Error::corrupted(
                PG_CLASS_OID,
                tid.block,
                format!("index \"{}\" names a table that does not exist", row.relname),
            ));
        }
    }
    if catalog.get("pg_class").is_none() {
        return Err(Error::corrupted(PG_CLASS_OID, crate::types::BlockNumber(0), "pg_class has no row for itself"));
    }
    Ok(())
}

/// Removes relation files no catalog row names (an uncommitted CREATE, an unfinished DROP).
/// The file nodes of every table and index in the catalog.
pub fn live_relfilenodes(catalog: &Catalog) -> std::collections::HashSet<Oid> {
    let mut known: std::collections::HashSet<Oid> = catalog.tables().iter().map(|e| e.rel.relfilenode).collect();
    known.extend(catalog.all_indexes().iter().map(|d| d.btree.relfilenode()));
    known
}

/// `"name"` of the table or index stored under `relfilenode` (its number if none is).
pub fn relation_name(catalog: &Catalog, relfilenode: Oid) -> String {
    let table = catalog.tables().into_iter().find(|e| e.rel.relfilenode == relfilenode).map(|e| e.rel.name.clone());
    let name = table.or_else(|| {
        catalog.all_indexes().into_iter().find(|d| d.btree.relfilenode() == relfilenode).map(|d| d.name.clone())
    });
    name.map_or_else(|| relfilenode.0.to_string(), |n| format!("\"{n}\""))
}

/// Files in `keep` stay too: those a prepared transaction removes only when it finishes (the
/// storage a TRUNCATE made is named by no committed row until it commits).
pub fn remove_orphans(smgr: &Smgr, catalog: &Catalog, keep: &[Oid]) -> Result<Vec<Oid>> {
    let mut known = live_relfilenodes(catalog);
    known.extend(keep.iter().copied());
    let mut removed = Vec::new();
    for rel in smgr.list_relations()? {
        catalog.bump_oid_past(rel);
        if !known.contains(&rel) {
            smgr.unlink(rel)?;
            removed.push(rel);
        }
    }
    Ok(removed)
}

/// The WAL configuration a control file and a config call for.
pub fn wal_config(config: &crate::config::Config, segment_size: u64) -> WalConfig {
    WalConfig {
        segment_size,
        full_page_writes: config.full_page_writes,
        wal_buffers_bytes: config.wal_buffers_bytes,
        logical: config.wal_level == crate::config::WalLevel::Logical,
    }
}

/// Writes a control file for a fresh cluster.
pub fn new_control(segment_size: u64) -> ControlFile {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut c = ControlFile::new(now ^ u64::from(std::process::id()) << 32, segment_size);
    c.state = DbState::ShutDown;
    c.redo_lsn = wal::first_lsn(segment_size);
    c.checkpoint_lsn = c.redo_lsn;
    c.next_xid = XactOptions::default().next_full_xid;
    c.oldest_xid = Xid::FIRST_NORMAL;
    c.next_oid = catalog::FIRST_NORMAL_OID;
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::{ItemId, PageBuf};
    use crate::types::{BlockNumber, BufferTag};

    /// Found by fuzz target `wal_record`: heap redo skipped `validate_items` on a page with
    /// `pd_upper` 0 (a "new" page), but a full-page image of garbage can leave such a page with
    /// line pointers; a DELETE replayed onto it then indexed a line pointer to byte 18432 and
    /// panicked. Redo now validates every heap page, and a new page must be all zeros.
    /// A record by transaction 100 at LSN 16 MB changing block `tag` (no image, no block data).
    fn one_block_record(rmgr: Rmgr, info: u8, tag: BufferTag, main_data: Vec<u8>) -> DecodedRecord {
        DecodedRecord {
            toplevel_xid: Xid::INVALID,
            lsn: Lsn(1 << 24),
            end_lsn: Lsn((1 << 24) + 64),
            prev: Lsn::INVALID,
            xid: Xid(100),
            rmgr,
            info,
            blocks: vec![wal::DecodedBlock { id: 0, tag, will_init: false, image: None, data: vec![] }],
            main_data,
        }
    }

    #[test]
    fn heap_redo_refuses_a_new_page_that_is_not_all_zeros() {
        let mut p = PageBuf::zeroed();
        page::set_lower(&mut p.0, 28);
        p.0[24..28].copy_from_slice(&ItemId::normal(18432, 30).to_u32().to_le_bytes());
        let tag = BufferTag { rel: Oid(16384), fork: Fork::Main, block: BlockNumber(0) };
        let rec = one_block_record(
            Rmgr::Heap,
            heap::wal::XLOG_HEAP_DELETE,
            tag,
            [&1u16.to_le_bytes()[..], &100u32.to_le_bytes(), &[0; 6]].concat(),
        );
        let e = redo_page(&rec, &rec.blocks[0], &mut p.0).unwrap_err();
        assert!(e.to_string().contains("pd_upper is 0 but the page is not all zeros"), "{e}");
    }

    /// Found by fuzz target `wal_record`: a PRUNE record whose block reference named the FSM
    /// fork skipped `validate_items` (done for the main fork only), and `repair_fragmentation`
    /// met a line pointer past the end of the page and panicked. A heap change must name the
    /// main fork.
    #[test]
    fn heap_redo_refuses_a_record_naming_another_fork() {
        let mut p = PageBuf::zeroed();
        page::init(&mut p.0, 0);
        page::add_item(&mut p.0, &[0u8; 40], None, true).unwrap();
        page::set_item_id(&mut p.0, crate::types::OffsetNumber(1), ItemId::normal(8180, 100));
        let tag = BufferTag { rel: Oid(16384), fork: Fork::Fsm, block: BlockNumber(0) };
        let plan = heap::wal::PrunePlan { new_prune_xid: Xid(5), ..Default::default() };
        let rec = one_block_record(Rmgr::Heap2, heap::wal::XLOG_HEAP2_PRUNE, tag, plan.encode());
        let e = redo_page(&rec, &rec.blocks[0], &mut p.0).unwrap_err();
        assert!(e.to_string().contains("heap record changes the Fsm fork"), "{e}");
    }

    /// Found by fuzz target `wal_record`: a PRUNE record replayed onto a new (all-zero) page
    /// reached `repair_fragmentation`, which asserts a sane header, and panicked; VACUUM and
    /// the freeze record left such a page neither new nor valid. All three (now PRUNE, VACUUM
    /// and PRUNE_FREEZE) refuse an empty page.
    #[test]
    fn heap_maintenance_redo_refuses_an_empty_page() {
        let tag = BufferTag { rel: Oid(16384), fork: Fork::Main, block: BlockNumber(7) };
        let prune = heap::wal::PrunePlan { new_prune_xid: Xid(5), ..Default::default() }.encode();
        let prune_freeze = [&[crate::vacuum::wal::PF_PRUNE][..], &prune].concat();
        for (info, main) in [
            (heap::wal::XLOG_HEAP2_PRUNE, prune),
            (heap::wal::XLOG_HEAP2_VACUUM, vec![0, 0, 0]),
            (heap::wal::XLOG_HEAP2_PRUNE_FREEZE, prune_freeze),
        ] {
            let rec = one_block_record(Rmgr::Heap2, info, tag, main);
            let mut p = PageBuf::zeroed();
            let e = redo_page(&rec, &rec.blocks[0], &mut p.0).unwrap_err();
            assert!(e.to_string().contains("names block 7, which is empty"), "{info:#x}: {e}");
            assert!(p.0.iter().all(|&b| b == 0), "{info:#x} changed the page");
        }
    }
}
