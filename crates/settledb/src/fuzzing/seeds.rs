//! Valid inputs for every fuzz target, taken from a real database: a small workload (every
//! column type, NULLs, short and long varlena, HOT and non-HOT updates, deletes, an abort, a
//! multi-insert, index builds and splits, VACUUM with freezing, a clean shutdown) runs on an
//! in-memory [`FaultFs`]; then its pages, WAL records, WAL stream, control file, CLOG segment
//! and statistics file are cut into inputs in each target's format (see [`super`]).
//!
//! WAL record seeds carry the page their first block is replayed onto: the WAL is replayed
//! from its beginning with `startup::redo_page` (every page starts with an image or an
//! initialization), so the base page is the block's state just before the record.
//!
//! `tests/fuzz_smoke.rs` mutates these; `cargo run -p settledb --example fuzz_seeds DIR`
//! writes them as a cargo-fuzz corpus (`DIR/<target>/seed-N`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use crate::catalog::RelOptions;
use crate::db::startup;
use crate::heap::tuple::{Column, Schema, Type, Value};
use crate::io::fault::FaultFs;
use crate::io::FileSystem;
use crate::page::{self, BLCKSZ};
use crate::stats::{DB_FIELDS, TABLE_FIELDS};
use crate::types::{BufferTag, Lsn, OffsetNumber};
use crate::wal::{self, record, Rmgr, WalReader};
use crate::{Config, Database, TableOptions, VacuumParams};

use super::REPAIR;

/// The database's WAL segment size: 1 MB (the smallest accepted), `wal_stream` control bits
/// 1..4 = 4.
const SEGMENT_SIZE: u64 = 1 << 20;
/// Records kept per (resource manager, info) kind.
const RECORDS_PER_KIND: usize = 3;
/// Pages kept per kind of page.
const PAGES_PER_KIND: usize = 6;

/// Seeds per target name (every name in [`super::TARGETS`]).
pub fn all() -> BTreeMap<&'static str, Vec<Vec<u8>>> {
    let fs = FaultFs::new();
    let dir = Path::new("/seed");
    let wal_stream = run_workload(&fs, dir);
    let mut out: BTreeMap<&'static str, Vec<Vec<u8>>> = BTreeMap::new();
    out.insert("wal_record", wal_record_seeds(&wal_stream));
    out.insert("wal_stream", wal_stream_seeds(&wal_stream));
    let mut pages = page_seeds(&*fs, dir);
    for name in ["page", "heap_tuple", "btree_page", "vm_page", "fsm_page", "catalog_tuple"] {
        out.insert(name, pages.remove(name).unwrap_or_default());
    }
    let read = |p: &str| read_file(&*fs, &dir.join(p));
    out.insert("control_file", vec![prefixed(0, &read("global/pg_control"))]);
    out.insert("clog_page", vec![prefixed(0, &read("pg_xact/0000")), prefixed(0x0E, &read("pg_xact/0000"))]);
    let twophase: Vec<Vec<u8>> = fs
        .list(&dir.join("pg_twophase"))
        .unwrap_or_default()
        .iter()
        .flat_map(|n| {
            let b = read(&format!("pg_twophase/{n}"));
            [prefixed(0, &b), prefixed(REPAIR, &b[..b.len().min(40)])]
        })
        .collect();
    out.insert("twophase_state", twophase);
    out.insert("slot_state", slot_seeds());
    let spill = super::spill_file_original();
    out.insert(
        "spill_file",
        vec![prefixed(0, &spill), prefixed(2, &spill), prefixed(REPAIR, &spill), prefixed(REPAIR | 2, &spill[..200])],
    );
    out.insert("pgoutput_message", pgoutput_seeds());
    let stats = read("pg_stat/stats.bin");
    out.insert("stats_file", vec![prefixed(0, &stats), prefixed(REPAIR, &stats[..stats.len().min(200)])]);
    let sizes = read("global/pg_relsize");
    out.insert("relsize_file", vec![prefixed(0, &sizes), prefixed(REPAIR, &sizes[..sizes.len().min(30)])]);
    out
}

/// Replication slot state files from a database under `wal_level = logical`: a new slot,
/// one advanced past a checkpoint (two-phase), and one invalidated by
/// `max_slot_wal_keep_size`.
fn slot_seeds() -> Vec<Vec<u8>> {
    let fs = FaultFs::new();
    let dir = Path::new("/slots");
    let config = Config::from_pairs([
        ("autovacuum", "off"),
        ("wal_segment_size", "1MB"),
        ("shared_buffers", "1MB"),
        ("wal_level", "logical"),
        ("max_slot_wal_keep_size", "1MB"),
    ])
    .expect("slot seed configuration");
    let make = || -> crate::Result<()> {
        let db = Database::open_with_fs(fs.clone(), dir, config)?;
        db.create_logical_replication_slot("lost", "test_decoding", false)?;
        let schema = Schema { columns: vec![Column { name: "v".into(), ty: Type::Text, nullable: false }] };
        let t = db.create_table("t", schema, TableOptions::default())?;
        let write = |rows: usize| -> crate::Result<()> {
            let mut tx = db.begin()?;
            for _ in 0..rows {
                tx.insert(&t, &[Value::Text("x".repeat(1000))])?;
            }
            tx.commit()
        };
        write(3000)?;
        db.checkpoint()?;
        db.create_logical_replication_slot("fresh", "pgoutput", false)?;
        db.create_logical_replication_slot("moved", "pgoutput", true)?;
        write(100)?;
        db.checkpoint()?;
        db.replication_slot_advance("moved", Lsn(u64::MAX))?;
        db.close()
    };
    make().expect("slot seed workload runs");
    let mut out = Vec::new();
    for name in ["fresh", "lost", "moved"] {
        let b = read_file(&*fs, &dir.join(format!("pg_replslot/{name}/state")));
        out.push(prefixed(0, &b));
        out.push(prefixed(REPAIR, &b[..b.len().min(50)]));
    }
    out
}

/// Every message of a pgoutput session (protocol 4, binary, messages, streaming parallel,
/// two-phase) over a small workload: each kind of row change, a message, a streamed
/// transaction, a rolled-back one, a prepared one. Messages inside a streamed block get
/// control bit 1.
fn pgoutput_seeds() -> Vec<Vec<u8>> {
    use crate::catalog::publication::PublishActions;
    use crate::db::{DecodeLimits, PublicationTarget};
    let fs = FaultFs::new();
    let config = Config::from_pairs([
        ("autovacuum", "off"),
        ("shared_buffers", "1MB"),
        ("wal_level", "logical"),
        ("logical_decoding_work_mem", "64kB"),
        ("max_prepared_transactions", "2"),
    ])
    .expect("pgoutput seed configuration");
    let make = || -> crate::Result<Vec<Vec<u8>>> {
        let db = Database::open_with_fs(fs.clone(), Path::new("/pgoutput"), config)?;
        let col = |name: &str, ty: Type| Column { name: name.into(), ty, nullable: true };
        let schema = Schema {
            columns: vec![
                col("id", Type::Int4),
                col("n", Type::Int8),
                col("f", Type::Float8),
                col("b", Type::Bool),
                col("s", Type::Text),
                col("ts", Type::Timestamp),
                col("bin", Type::Bytea),
            ],
        };
        let pk = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
        let t = db.create_table("t", schema, pk)?;
        db.alter_table_replica_identity("t", crate::ReplicaIdentity::Full)?;
        db.create_publication("p", PublicationTarget::AllTables, PublishActions::default())?;
        db.create_logical_replication_slot("s", "pgoutput", true)?;
        let row = |i: i32| {
            [
                Value::Int4(i),
                Value::Int8(-7),
                Value::Float8(0.5),
                Value::Bool(true),
                Value::Text(format!("row {i}")),
                Value::Timestamp(1_000_000),
                Value::Bytea(vec![0, 255]),
            ]
        };
        let mut tx = db.begin()?;
        let a = tx.insert(&t, &row(1))?;
        let a = tx.update(&t, a, &row(2))?.unwrap_or(a);
        tx.delete(&t, a)?;
        tx.emit_logical_message(true, "pfx", b"seed")?;
        tx.commit()?;
        let mut tx = db.begin()?;
        for i in 10..3000 {
            tx.insert(&t, &row(i))?;
        }
        tx.rollback()?;
        let mut tx = db.begin()?;
        for i in 10..3000 {
            tx.insert(&t, &row(i))?;
        }
        tx.commit()?;
        db.truncate(&["t"], crate::TruncateOptions { restart_seqs: true, cascade: false })?;
        let mut tx = db.begin()?;
        tx.insert(&t, &row(5000))?;
        tx.prepare("g")?;
        drop(tx);
        db.commit_prepared("g")?;
        let opts: Vec<(String, Option<String>)> = [
            ("proto_version", "4"),
            ("publication_names", "p"),
            ("binary", "on"),
            ("messages", "on"),
            ("streaming", "parallel"),
            ("two_phase", "on"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), Some(v.to_string())))
        .collect();
        let rows = db.logical_slot_peek_changes("s", DecodeLimits::default(), &opts)?.rows;
        db.close()?;
        let mut in_stream = false;
        let mut seeds = Vec::new();
        let mut kinds = std::collections::HashSet::new();
        for r in rows {
            let tag = r.data.first().copied().unwrap_or(0);
            if tag == b'E' {
                in_stream = false;
            }
            // One seed per message kind and context (thousands of inserts add nothing).
            if kinds.insert((tag, in_stream)) {
                seeds.push(prefixed(if in_stream { 0x02 } else { 0 }, &r.data));
            }
            if tag == b'S' {
                in_stream = true;
            }
        }
        let tags: std::collections::HashSet<u8> = kinds.iter().map(|(t, _)| *t).collect();
        for t in *b"BRIUDMCSEAcbPKT" {
            assert!(tags.contains(&t), "the pgoutput seed session sends {:?}", t as char);
        }
        Ok(seeds)
    };
    make().expect("pgoutput seed workload")
}

fn prefixed(ctl: u8, bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + bytes.len());
    v.push(ctl);
    v.extend_from_slice(bytes);
    v
}

fn read_file(fs: &dyn FileSystem, path: &Path) -> Vec<u8> {
    let Ok(f) = fs.open(path, false) else { return Vec::new() };
    let len = f.len().unwrap_or(0) as usize;
    let mut buf = vec![0u8; len];
    let _ = f.read_exact_at(&mut buf, 0);
    buf
}

/// The table every row type goes into.
fn all_types_schema() -> Schema {
    let col = |n: &str, ty, nullable| Column { name: n.into(), ty, nullable };
    Schema {
        columns: vec![
            col("id", Type::Int4, false),
            col("big", Type::Int8, true),
            col("f", Type::Float8, true),
            col("b", Type::Bool, true),
            col("name", Type::Text, true),
            col("blob", Type::Bytea, true),
            col("ts", Type::Timestamp, true),
        ],
    }
}

fn row(i: i32) -> Vec<Value> {
    let null_if = |cond: bool, v: Value| if cond { Value::Null } else { v };
    vec![
        Value::Int4(i),
        null_if(i % 7 == 3, Value::Int8(i64::from(i) * 1_000_000_007)),
        null_if(i % 5 == 1, Value::Float8(f64::from(i) / 3.0)),
        null_if(i % 11 == 2, Value::Bool(i % 2 == 0)),
        Value::Text(format!("name-{i:05}-{}", "x".repeat((i % 3 * 70) as usize))),
        null_if(i % 4 == 0, Value::Bytea(vec![0, 1, 2, (i % 256) as u8])),
        Value::Timestamp(i64::from(i) * 86_400_000_000),
    ]
}

/// Runs the workload and returns the WAL stream it wrote (from the first record), before the
/// shutdown checkpoint may remove segments; then shuts down cleanly (stats.bin is written).
fn run_workload(fs: &Arc<FaultFs>, dir: &Path) -> Vec<u8> {
    let config = Config::from_pairs([
        ("autovacuum", "off"),
        ("wal_segment_size", "1MB"),
        ("shared_buffers", "1MB"),
        ("max_prepared_transactions", "4"),
    ])
    .expect("seed configuration");
    let db = Database::open_with_fs(fs.clone(), dir, config).expect("seed database opens");
    workload(&db).expect("seed workload runs");
    let stream = wal_bytes(&**fs, &dir.join("pg_wal"));
    db.close().expect("seed database closes");
    stream
}

fn workload(db: &Database) -> crate::Result<()> {
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), fillfactor: 90, ..TableOptions::default() };
    let t = db.create_table("t", all_types_schema(), opts)?;
    let mut other = RelOptions::default();
    other.set("autovacuum_vacuum_scale_factor", "0.05")?;
    db.create_table("u", all_types_schema(), TableOptions { options: other, ..TableOptions::default() })?;
    let mut tx = db.begin()?;
    let mut tids = Vec::new();
    for i in 0..400 {
        tids.push(tx.insert(&t, &row(i))?);
    }
    tx.commit()?;
    db.create_index("t_name", "t", &["name"], false)?;
    let mut tx = db.begin()?;
    tx.insert_many(&t, &(400..460).map(row).collect::<Vec<_>>())?;
    tx.commit()?;
    let mut tx = db.begin()?;
    for (i, tid) in tids.iter().enumerate().step_by(9) {
        let mut r = row(i as i32);
        r[1] = Value::Int8(-1); // HOT: no indexed column changes
        if i % 2 == 0 {
            r[4] = Value::Text(format!("renamed-{i}")); // non-HOT
        }
        tx.update(&t, *tid, &r)?;
    }
    tx.commit()?;
    let mut tx = db.begin()?;
    for tid in &tids[100..300] {
        tx.delete(&t, *tid)?;
    }
    tx.commit()?;
    let mut tx = db.begin()?;
    tx.insert(&t, &row(10_000))?;
    tx.rollback()?;
    db.vacuum(Some("t"), &VacuumParams { freeze: true, ..VacuumParams::default() })?;
    db.checkpoint()?;
    let mut tx = db.begin()?;
    tx.insert(&t, &row(20_000))?;
    tx.commit()?;
    // Subtransactions (commit and abort records listing them) and two-phase records; one
    // prepared transaction (which truncated `u`) is left open, so the shutdown checkpoint
    // writes its state file.
    for (i, gid) in ["seed-committed", "seed-open"].iter().enumerate() {
        let base = 30_000 + 10 * i as i32;
        let mut tx = db.begin()?;
        tx.insert(&t, &row(base))?;
        tx.savepoint("a")?;
        tx.insert(&t, &row(base + 1))?;
        tx.release("a")?;
        tx.savepoint("b")?;
        tx.insert(&t, &row(base + 2))?;
        tx.rollback_to("b")?;
        if *gid == "seed-open" {
            // Its state then lists the files each outcome removes.
            tx.truncate(&["u"], Default::default())?;
        }
        tx.prepare(gid)?;
    }
    db.commit_prepared("seed-committed")?;
    let mut tx = db.begin()?;
    tx.savepoint("c")?;
    tx.insert(&t, &row(40_000))?;
    tx.rollback()?;
    Ok(())
}

/// The WAL stream from the first record to the end of the last segment file.
fn wal_bytes(fs: &dyn FileSystem, wal_dir: &Path) -> Vec<u8> {
    let mut names = fs.list(wal_dir).unwrap_or_default();
    names.sort();
    let mut segs: Vec<u64> =
        names.iter().filter_map(|n| wal::segment::parse_segment_file_name(n, SEGMENT_SIZE)).collect();
    segs.sort_unstable();
    let mut out = Vec::new();
    for (i, segno) in segs.iter().enumerate() {
        if *segno != 1 + i as u64 {
            break; // a gap: keep the contiguous prefix from segment 1
        }
        let mut bytes = read_file(fs, &wal::segment::segment_path(wal_dir, *segno, SEGMENT_SIZE));
        bytes.resize(SEGMENT_SIZE as usize, 0);
        out.extend_from_slice(&bytes);
    }
    out
}

/// Every record in `stream` (which starts at segment 1): start LSN and raw bytes.
fn records(stream: &[u8]) -> Vec<(Lsn, Vec<u8>)> {
    let fs = FaultFs::new();
    let dir = Path::new("/records/pg_wal");
    let _ = fs.create_dir_all(dir);
    for (i, chunk) in stream.chunks(SEGMENT_SIZE as usize).enumerate() {
        let path = wal::segment::segment_path(dir, 1 + i as u64, SEGMENT_SIZE);
        if let Ok(f) = fs.open(&path, true) {
            let _ = f.write_at(chunk, 0);
        }
    }
    let mut reader = WalReader::new(fs, dir, wal::first_lsn(SEGMENT_SIZE), SEGMENT_SIZE);
    let mut out = Vec::new();
    while let Ok(Some(rec)) = reader.next() {
        let from = (rec.lsn.0 - SEGMENT_SIZE) as usize;
        let to = (rec.end_lsn.0 - SEGMENT_SIZE) as usize;
        out.push((rec.lsn, stream[from..to].to_vec()));
    }
    out
}

/// Up to [`RECORDS_PER_KIND`] records of each kind, each with its first block's page as it
/// was before the record (replayed from the start of the WAL).
fn wal_record_seeds(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut pages: HashMap<BufferTag, Box<[u8; BLCKSZ]>> = HashMap::new();
    let mut per_kind: HashMap<(Rmgr, u8), usize> = HashMap::new();
    let mut out = Vec::new();
    for (lsn, raw) in records(stream) {
        let Ok(rec) = record::decode(lsn, &raw) else { continue };
        let base = rec.blocks.first().and_then(|b| pages.get(&b.tag)).map_or_else(|| vec![0u8; BLCKSZ], |p| p.to_vec());
        let seen = per_kind.entry((rec.rmgr, rec.info)).or_default();
        // A seed is decoded as if read at super::RECORD_LSN: the control byte repairs the CRC
        // (xl_prev changes) and the base page's checksum.
        if *seen < RECORDS_PER_KIND && raw.len() <= usize::from(u16::MAX) {
            *seen += 1;
            let mut seed = vec![REPAIR | 0x02];
            seed.extend_from_slice(&(raw.len() as u16).to_le_bytes());
            seed.extend_from_slice(&raw);
            let mut base = base;
            page::set_lsn(&mut base, Lsn(0));
            seed.extend_from_slice(&base);
            out.push(seed);
        }
        for b in &rec.blocks {
            let p = pages.entry(b.tag).or_insert_with(|| Box::new([0u8; BLCKSZ]));
            if b.image.is_some() || b.will_init {
                p.fill(0);
            }
            let _ = startup::redo_page(&rec, b, &mut p[..]);
        }
    }
    out
}

/// The start of the stream as is (1 MB segments), and framed over 4 KB segments so that
/// records cross segment boundaries, once with recycled segments' stale bytes after it.
fn wal_stream_seeds(stream: &[u8]) -> Vec<Vec<u8>> {
    let recs = records(stream);
    let upto =
        |max: usize| recs.iter().map(|(_, r)| r.len()).scan(0, |s, n| Some(*s + n)).take_while(|&e| e <= max).last();
    let mut out = Vec::new();
    if let Some(end) = upto(16 << 10) {
        out.push(prefixed(4 << 1, &stream[..end]));
        out.push(prefixed(0x10, &stream[..end]));
    }
    if let Some(end) = upto(32 << 10) {
        out.push(prefixed(0x10 | 4 << 1, &stream[..end]));
        // Over 4 KB segments, followed by the stale bytes of recycled segments.
        out.push(prefixed(0x20 | 0x10, &stream[..end]));
    }
    out
}

/// Pages from the relation files: heap pages (`page`, `heap_tuple`, `catalog_tuple` from
/// `pg_class`), B-tree pages, VM and FSM pages.
fn page_seeds(fs: &dyn FileSystem, dir: &Path) -> HashMap<&'static str, Vec<Vec<u8>>> {
    let mut out: HashMap<&'static str, Vec<Vec<u8>>> = HashMap::new();
    let base = dir.join("base");
    let mut push = |name: &'static str, seed: Vec<u8>| {
        let v = out.entry(name).or_default();
        if v.len() < PAGES_PER_KIND * 4 {
            v.push(seed);
        }
    };
    for file in fs.list(&base).unwrap_or_default() {
        let bytes = read_file(fs, &base.join(&file));
        for (block, p) in bytes.chunks_exact(BLCKSZ).enumerate().take(PAGES_PER_KIND) {
            let ctl = if block < 16 { (block as u8) << 4 } else { REPAIR };
            if file.ends_with("_vm") {
                push("vm_page", prefixed(ctl, p));
            } else if file.ends_with("_fsm") {
                push("fsm_page", prefixed(ctl, p));
            } else if page::special(p) as usize == crate::btree::page::SPECIAL_OFF {
                // Both indexes: the primary key (int4, key types 0) and t_name (text, 2).
                push("btree_page", prefixed(ctl, p));
                push("btree_page", prefixed(ctl | 2 << 1, p));
            } else {
                push("page", prefixed(ctl, p));
                tuple_seeds(&file, p, &mut push);
            }
        }
    }
    out
}

fn tuple_seeds(file: &str, p: &[u8], push: &mut impl FnMut(&'static str, Vec<u8>)) {
    let schema = all_types_schema();
    let mut prefix = vec![schema.columns.len() as u8];
    prefix.extend(
        schema
            .columns
            .iter()
            .map(|c| Type::ALL.iter().position(|t| *t == c.ty).unwrap_or(0) as u8 | if c.nullable { 0x80 } else { 0 }),
    );
    for off in (1..=page::max_offset(p)).map(OffsetNumber).take(40) {
        let Some(t) = page::try_item(p, off) else { continue };
        if file == "1259" {
            push("catalog_tuple", prefixed(0, t));
            let values = crate::heap::tuple::deform_tuple(&crate::catalog::pg_class_schema(), t);
            if let Ok(row) = values.and_then(|v| {
                crate::catalog::ClassRow::from_values(&v, crate::types::Tid::default()).map_err(|e| e.to_string())
            }) {
                push("catalog_tuple", prefixed(1, &row.schema.encode()));
                push("catalog_tuple", prefixed(2, row.options.encode().as_bytes()));
            }
        } else if off.0 % 5 == 1 {
            let mut seed = prefix.clone();
            seed.extend_from_slice(t);
            push("heap_tuple", seed);
        }
    }
}

/// Makes a statistics file's table count agree with its length and its CRC match (control
/// bit 0 of `stats_file`).
/// Makes `global/pg_relsize` bytes pass the checks in front of the entries: the magic, the
/// entry count from the length, the CRC.
pub fn repair_relsize(bytes: &mut Vec<u8>) {
    if bytes.len() < 12 {
        bytes.resize(12, 0);
    }
    bytes[..4].copy_from_slice(b"RSZ1");
    let count = ((bytes.len() - 12) / 8) as u32;
    bytes.truncate(12 + count as usize * 8);
    bytes[4..8].copy_from_slice(&count.to_le_bytes());
    let n = bytes.len();
    let crc = crate::crc::crc32c(&bytes[..n - 4]);
    bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

pub fn repair_stats(bytes: &mut [u8]) {
    const HEADER: usize = 20;
    // The table count as if there were no slot records (version 3 keeps a slot count, then the
    // slots, after the tables), and that slot count set to zero.
    let fixed = HEADER + 8 * DB_FIELDS + 4 + 4;
    if bytes.len() >= fixed {
        let ntables = (bytes.len() - fixed) / (4 + 8 * TABLE_FIELDS);
        bytes[16..20].copy_from_slice(&(ntables as u32).to_le_bytes());
        let at = HEADER + 8 * DB_FIELDS + ntables * (4 + 8 * TABLE_FIELDS);
        bytes[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
    }
    let n = bytes.len();
    let crc = crate::crc::crc32c(&bytes[..n - 4]);
    bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
}
