//! Round-trip properties of every on-disk encoding, over seeded random values: what is
//! encoded decodes to the same thing. The fuzz targets (`settledb::fuzzing`, `fuzz_smoke.rs`)
//! start from bytes and check that decoding never panics; these start from values.
//!
//! | encoding        | property                                                           |
//! |-----------------|--------------------------------------------------------------------|
//! | heap tuple      | `deform_tuple(form_tuple(v)) == v`, every type, NULLs, short/long   |
//! |                 | varlena, and a row read with a wider schema gets NULLs             |
//! | page            | items added come back byte for byte after checksum + validation    |
//! | WAL record      | every kind (TRUNCATE included), with images, data and main data,   |
//! |                 | through `Wal::insert`                                              |
//! |                 | and `WalReader` on an in-memory file system; rendering decodes it  |
//! | control file    | `decode(encode(c)) == c`                                           |
//! | CLOG page       | statuses survive a checkpoint and a reopen                         |
//! | statistics file | `decode(encode(s)) == s`, byte-exact                               |
//! | B-tree          | keys decode to their values, equal keys for equal values only;    |
//! |                 | items keep their key and TID or downlink                           |
//! | catalog         | `ClassRow` and `Schema` through their tuple and byte forms          |
//!
//! `SETTLEDB_ROUNDTRIP_CASES` sets the cases per property (default 300).

use std::path::Path;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use settledb::btree::{keys, page as bp};
use settledb::catalog::{ClassRow, IndexMeta, RelKind, RelOptions};
use settledb::heap::tuple::{deform_tuple, form_tuple};
use settledb::io::fault::FaultFs;
use settledb::io::FileSystem;
use settledb::page::{self, BLCKSZ};
use settledb::stats::{DbTotals, SlotStats, StatsFile, TableStatsSnapshot};
use settledb::types::{BufferTag, Fork};
use settledb::wal::control::{ControlFile, DbState};
use settledb::wal::{self, BlockRef, RecordBuilder, Rmgr, Wal, WalConfig, WalReader};
use settledb::xact::{Clog, XactLog, XidStatus};
use settledb::{BlockNumber, Column, FullXid, Lsn, OffsetNumber, Oid, Schema, Tid, Type, Value, Xid};

fn cases() -> usize {
    std::env::var("SETTLEDB_ROUNDTRIP_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300)
}

fn rng(test: &str) -> StdRng {
    StdRng::seed_from_u64(0xC0FF_EE00 ^ test.bytes().map(u64::from).sum::<u64>())
}

fn same(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Value::Float8(x), Value::Float8(y)) => x.to_bits() == y.to_bits(),
            _ => x == y,
        })
}

fn text(rng: &mut StdRng, max: usize) -> String {
    let n = rng.gen_range(0..=max);
    (0..n).map(|_| ['a', 'é', '0', ' ', '\u{1F600}', '\0'][rng.gen_range(0..6)]).collect()
}

fn value(rng: &mut StdRng, ty: Type) -> Value {
    let long = rng.gen_bool(0.2);
    let max = if long { 700 } else { 130 };
    match ty {
        Type::Int4 => Value::Int4([0, -1, i32::MIN, i32::MAX, rng.gen()][rng.gen_range(0..5)]),
        Type::Int8 => Value::Int8([0, -1, i64::MIN, i64::MAX, rng.gen()][rng.gen_range(0..5)]),
        Type::Float8 => {
            Value::Float8([0.0, -0.0, f64::NAN, f64::INFINITY, f64::MIN_POSITIVE, rng.gen()][rng.gen_range(0..6)])
        }
        Type::Bool => Value::Bool(rng.gen()),
        Type::Text => Value::Text(text(rng, max)),
        Type::Bytea => Value::Bytea((0..rng.gen_range(0..=max)).map(|_| rng.gen()).collect()),
        Type::Timestamp => Value::Timestamp(rng.gen()),
    }
}

fn schema(rng: &mut StdRng) -> Schema {
    let n = rng.gen_range(0..12);
    let columns = (0..n)
        .map(|i| Column {
            name: format!("c{i}"),
            ty: Type::ALL[rng.gen_range(0..Type::ALL.len())],
            nullable: rng.gen_bool(0.5),
        })
        .collect();
    Schema { columns }
}

fn row(rng: &mut StdRng, s: &Schema) -> Vec<Value> {
    s.columns.iter().map(|c| if c.nullable && rng.gen_bool(0.3) { Value::Null } else { value(rng, c.ty) }).collect()
}

#[test]
fn heap_tuples_round_trip_every_type_and_nulls() {
    let mut rng = rng("tuples");
    for _ in 0..cases() * 3 {
        let s = schema(&mut rng);
        let v = row(&mut rng, &s);
        let Ok(t) = form_tuple(&s, &v) else { continue }; // too big for a page
        let back = deform_tuple(&s, &t).unwrap();
        assert!(same(&v, &back), "{s:?}\n{v:?}\n{back:?}");
        // A column added later reads as NULL in rows written before it.
        let mut wider = s.clone();
        wider.columns.push(Column { name: "added".into(), ty: Type::Int8, nullable: true });
        let back = deform_tuple(&wider, &t).unwrap();
        assert!(same(&v, &back[..v.len()]) && back[v.len()] == Value::Null);
    }
}

#[test]
fn pages_keep_their_items_through_checksum_and_validation() {
    let mut rng = rng("pages");
    for _ in 0..cases() {
        let mut p = page::PageBuf::zeroed();
        page::init(&mut p.0, 0);
        let mut items = Vec::new();
        while let Some(off) = {
            let len = rng.gen_range(23..600);
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            let r = page::add_item(&mut p.0, &data, None, true);
            if r.is_some() {
                items.push(data);
            }
            r
        } {
            assert_eq!(off.0 as usize, items.len());
        }
        page::set_lsn(&mut p.0, Lsn(rng.gen()));
        let block = BlockNumber(rng.gen());
        page::set_checksum(&mut p.0, block);
        page::verify(&p.0, Oid(1), block).unwrap();
        page::validate_items(&p.0, Oid(1), block).unwrap();
        for (i, data) in items.iter().enumerate() {
            assert_eq!(page::item(&p.0, OffsetNumber(i as u16 + 1)), &data[..]);
        }
        assert!(page::verify(&p.0, Oid(1), BlockNumber(block.0 ^ 1)).is_err(), "the checksum covers the block");
    }
}

fn u16s(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Main data and block data a record of each kind carries, well formed, random contents.
fn kinds(rng: &mut StdRng) -> Vec<(Rmgr, u8, Vec<u8>, Vec<u8>)> {
    let truncate = truncate_record(rng);
    let mut r = |n: usize| -> Vec<u8> { (0..n).map(|_| rng.gen()).collect() };
    let ckpt = [r(8), 8u64.to_le_bytes().to_vec(), r(8)].concat();
    let tuple = [vec![3, 0, 0x02, 0x09], vec![24], r(40)].concat(); // infomask2, infomask, hoff, body
    let prune = settledb::heap::wal::PrunePlan {
        redirected: vec![(OffsetNumber(1), OffsetNumber(2))],
        dead: vec![OffsetNumber(3)],
        unused: vec![OffsetNumber(4)],
        new_prune_xid: Xid(77),
    };
    // PRUNE_FREEZE: flags (prune, freeze, map bits), map bits, prune plan, freeze plans.
    let mut freeze = vec![0x07, 0x03];
    prune.encode_into(&mut freeze);
    settledb::vacuum::wal::encode_freeze(
        &mut freeze,
        &[settledb::vacuum::wal::FreezePlan {
            set: 0x0300,
            clear: 0,
            clear2: 0,
            flags: 1,
            offsets: vec![OffsetNumber(1), OffsetNumber(5)],
            all_normal: false,
        }],
    );
    vec![
        (Rmgr::Xlog, 0x00, ckpt.clone(), vec![]),
        (Rmgr::Xlog, 0x10, ckpt, vec![]),
        (Rmgr::Xact, 0x00, r(8), vec![]),
        (Rmgr::Xact, 0x20, r(8), vec![]),
        (Rmgr::Clog, 0x00, r(4), vec![]),
        (Rmgr::Clog, 0x10, r(8), vec![]),
        (Rmgr::Storage, 0x00, wal::storage_main_data(Oid(16384), Fork::Vm, None), vec![]),
        (Rmgr::Storage, 0x10, wal::storage_main_data(Oid(16384), Fork::Main, Some(3)), vec![]),
        (Rmgr::Heap, 0x00, vec![1, 0, 1], tuple.clone()),
        (Rmgr::Heap, 0x10, [vec![1, 0], r(8), vec![0, 0]].concat(), vec![]),
        (Rmgr::Heap, 0x20, [vec![1, 0], r(8), vec![2, 0, 0, 0, 0]].concat(), tuple.clone()),
        (Rmgr::Heap, 0x40, [vec![1, 0], r(8), vec![2, 0, 0, 0, 0]].concat(), tuple.clone()),
        (Rmgr::Heap, 0x70, vec![1, 0], r(16)),
        (Rmgr::Heap, 0x30, truncate, vec![]),
        (Rmgr::Heap2, 0x10, prune.encode(), vec![]),
        (Rmgr::Heap2, 0x20, [vec![0x04, 0x03], u16s(&[2, 1, 4])].concat(), vec![]),
        (Rmgr::Heap2, 0x30, freeze, vec![]),
        (Rmgr::Heap2, 0x40, [r(4), vec![3, 1]].concat(), vec![]),
        (
            Rmgr::Heap2,
            0x50,
            [vec![1], u16s(&[2, 1, 2])].concat(),
            [u16s(&[45]), tuple.clone(), u16s(&[45]), tuple].concat(),
        ),
        (Rmgr::Heap2, 0x80, [r(4), 5u32.to_le_bytes().to_vec(), vec![1]].concat(), vec![]),
        (Rmgr::Btree, 0x00, vec![], [u16s(&[2]), bp::make_leaf_tuple(&r(9), Tid::default(), false)].concat()),
        (Rmgr::Btree, 0x10, vec![], r(100)),
        (Rmgr::Btree, 0x20, vec![], r(100)),
        (Rmgr::Btree, 0x30, vec![], r(100)),
        (Rmgr::Btree, 0x40, vec![], u16s(&[2, 1, 3])),
        (Rmgr::Btree, 0x50, vec![], r(100)),
        (Rmgr::Btree, 0x60, vec![], u16s(&[1, 2])),
        (Rmgr::Catalog, 0x00, r(20), vec![]),
    ]
}

/// A TRUNCATE record of 1..5 random relations and random flags; it decodes to what it encodes.
fn truncate_record(rng: &mut StdRng) -> Vec<u8> {
    use settledb::heap::truncate::TruncateRecord;
    let rels = (0..rng.gen_range(1..5)).map(|_| Oid(rng.gen())).collect();
    let t = TruncateRecord { flags: rng.gen_range(0..4), rels };
    let bytes = t.encode();
    assert_eq!(TruncateRecord::decode(&bytes, Lsn(1)).unwrap(), t);
    bytes
}

#[test]
fn wal_records_of_every_kind_round_trip_through_insert_and_the_reader() {
    let mut rng = rng("wal");
    let fs = FaultFs::new();
    let dir = Path::new("/wal");
    fs.create_dir_all(dir).unwrap();
    let size = 1 << 20;
    let config = WalConfig { segment_size: size, full_page_writes: true, wal_buffers_bytes: 64 << 10, logical: false };
    let start = wal::first_lsn(size);
    let wal = Wal::open(fs.clone(), dir, start, Lsn::INVALID, config).unwrap();
    let mut page_img = page::PageBuf::zeroed();
    page::init(&mut page_img.0, 0);
    page::add_item(&mut page_img.0, &[9u8; 100], None, true).unwrap();
    let mut written = Vec::new();
    for round in 0..(cases() / 30).max(2) {
        for (rmgr, info, main, data) in kinds(&mut rng) {
            let mut blocks = Vec::new();
            if !data.is_empty() {
                let tag = BufferTag { rel: Oid(16384), fork: Fork::Main, block: BlockNumber(rng.gen_range(0..99)) };
                // Odd rounds attach the page: an image (its LSN is before the redo pointer).
                let page = (round % 2 == 1).then_some(&page_img.0[..]);
                blocks.push(BlockRef {
                    keep_data: false,
                    id: 0,
                    tag,
                    will_init: rng.gen_bool(0.2),
                    page,
                    data: data.clone(),
                });
            }
            let xid = Xid(rng.gen());
            let rec = RecordBuilder {
                toplevel_xid: settledb::Xid::INVALID,
                rmgr,
                info,
                xid,
                blocks,
                main_data: main.clone(),
            };
            let end = wal.insert(&rec).unwrap();
            written.push((
                rmgr,
                info,
                xid,
                main,
                rec.blocks.first().map(|b| (b.tag, b.will_init, b.page.is_some() && !b.will_init, data)),
                end,
            ));
        }
    }
    wal.flush(written.last().unwrap().5).unwrap();
    let mut reader = WalReader::new(fs, dir, start, size);
    for (rmgr, info, xid, main, block, end) in written {
        let d = reader.next().unwrap().expect("every record written is read back");
        assert_eq!((d.rmgr, d.info, d.xid, &d.main_data, d.end_lsn), (rmgr, info, xid, &main, end));
        match block {
            None => assert!(d.blocks.is_empty()),
            Some((tag, will_init, image, data)) => {
                let b = &d.blocks[0];
                assert_eq!((b.tag, b.will_init, b.image.is_some()), (tag, will_init, image));
                if image {
                    assert_eq!(&b.image.as_deref().unwrap()[..], &page_img.0[..]);
                } else {
                    assert_eq!(b.data, data);
                }
            }
        }
        let text = wal::desc::describe(&d, &settledb::db::startup::describe_record);
        assert!(!text.contains("undecodable") && !text.contains("UNKNOWN"), "{text}");
    }
    assert!(reader.next().unwrap().is_none());
}

#[test]
fn control_files_round_trip() {
    let mut rng = rng("control");
    for _ in 0..cases() {
        let mut c = ControlFile::new(rng.gen(), 1 << rng.gen_range(12..31));
        c.state = if rng.gen() { DbState::ShutDown } else { DbState::InProduction };
        c.full_page_writes = rng.gen();
        (c.checkpoint_lsn, c.prev_checkpoint_lsn, c.redo_lsn) = (Lsn(rng.gen()), Lsn(rng.gen()), Lsn(rng.gen()));
        (c.next_xid, c.oldest_xid, c.next_oid, c.time_secs) =
            (FullXid(rng.gen()), Xid(rng.gen()), Oid(rng.gen()), rng.gen());
        assert_eq!(ControlFile::decode(&c.encode(), Path::new("pg_control")).unwrap(), c);
    }
}

struct NoLog;

impl XactLog for NoLog {
    fn log(&self, _: &RecordBuilder<'_>) -> settledb::Result<Lsn> {
        Ok(Lsn(1))
    }
    fn flush(&self, _: Lsn) -> settledb::Result<()> {
        Ok(())
    }
}

#[test]
fn clog_pages_round_trip_through_checkpoint_and_reopen() {
    let mut rng = rng("clog");
    let fs: Arc<dyn FileSystem> = FaultFs::new();
    let dir = Path::new("/clog");
    let clog = Clog::open(fs.clone(), dir).unwrap();
    let statuses = [XidStatus::InProgress, XidStatus::Committed, XidStatus::Aborted, XidStatus::SubCommitted];
    let mut set = std::collections::BTreeMap::new();
    for _ in 0..cases() * 10 {
        let xid = Xid(rng.gen_range(3..5 * 32768));
        if set.is_empty() || !set.contains_key(&xid.0) {
            clog.extend(xid, &NoLog).unwrap();
        }
        let s = statuses[rng.gen_range(0..4)];
        clog.set_status(xid, s).unwrap();
        set.insert(xid.0, s);
    }
    clog.checkpoint(&NoLog).unwrap();
    let again = Clog::open(fs, dir).unwrap();
    for (xid, s) in set {
        assert_eq!(again.status(Xid(xid)).unwrap(), s, "xid {xid}");
    }
}

#[test]
fn statistics_files_round_trip_byte_exact() {
    let mut rng = rng("stats");
    for _ in 0..cases() {
        let tables = (0..rng.gen_range(0..20))
            .map(|_| (Oid(rng.gen()), TableStatsSnapshot::from_fields(std::array::from_fn(|_| rng.gen()))))
            .collect();
        let slots = (0..rng.gen_range(0..4))
            .map(|i| (format!("slot_{i}"), SlotStats::from_fields(std::array::from_fn(|_| rng.gen()))))
            .collect();
        let f = StatsFile { db: DbTotals::from_fields(std::array::from_fn(|_| rng.gen())), tables, slots };
        let bytes = f.encode();
        let back = StatsFile::decode(&bytes, Path::new("stats.bin")).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.encode(), bytes);
    }
}

/// Equal as index keys: floats compare as SQL does (-0 = 0, every NaN equal), as
/// `keys::encode` canonicalizes them.
fn same_key(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Value::Float8(x), Value::Float8(y)) => x == y || (x.is_nan() && y.is_nan()),
            _ => x == y,
        })
}

#[test]
fn btree_keys_decode_to_their_values_and_items_keep_them() {
    let mut rng = rng("keys");
    for _ in 0..cases() {
        let types: Vec<Type> = (0..rng.gen_range(1..4)).map(|_| Type::ALL[rng.gen_range(0..7)]).collect();
        let vals = |rng: &mut StdRng| -> Vec<Value> {
            types.iter().map(|&t| if rng.gen_bool(0.15) { Value::Null } else { value(rng, t) }).collect()
        };
        let (a, b) = (vals(&mut rng), vals(&mut rng));
        let (ka, kb) = (keys::encode(&types, &a).unwrap(), keys::encode(&types, &b).unwrap());
        assert!(same_key(&keys::decode(&types, &ka).unwrap(), &a), "{a:?}");
        assert!(same_key(&keys::decode(&types, &kb).unwrap(), &b), "{b:?}");
        assert_eq!(ka == kb, same_key(&a, &b), "one key for equal values only: {a:?} {b:?}");
        // Items carry the key and the TID or downlink they were made with.
        let tid = Tid { block: BlockNumber(rng.gen()), offset: OffsetNumber(rng.gen_range(1..292)) };
        let leaf = bp::make_leaf_tuple(&ka, tid, a.contains(&Value::Null));
        assert_eq!(bp::leaf_key(&leaf), (&ka[..], tid));
        let child = rng.gen();
        let pivot = bp::make_pivot(&kb, Some(tid), child);
        assert_eq!((bp::pivot_key(&pivot), bp::child(&pivot)), ((&kb[..], Some(tid)), child));
        let mut p = vec![0u8; BLCKSZ];
        bp::init(&mut p, 0, bp::BTP_LEAF);
        assert!(bp::insert_item(&mut p, OffsetNumber(1), &leaf));
        bp::validate(&p, Oid(1), BlockNumber(1)).unwrap();
        assert_eq!(bp::item(&p, OffsetNumber(1)), &leaf[..]);
    }
}

#[test]
fn catalog_rows_round_trip_through_tuples() {
    let mut rng = rng("catalog");
    let pg_class = settledb::catalog::pg_class_schema();
    for i in 0..cases() {
        let schema = schema(&mut rng);
        assert_eq!(Schema::decode(&schema.encode()).unwrap(), schema);
        let mut options = RelOptions::default();
        if i % 2 == 0 {
            options.set("autovacuum_vacuum_scale_factor", "0.05").unwrap();
        }
        let index = (i % 3 == 0).then(|| IndexMeta {
            table: Oid(rng.gen()),
            columns: vec![rng.gen(), rng.gen()],
            unique: rng.gen(),
            primary: rng.gen(),
        });
        // Missing values (ADD COLUMN ... DEFAULT) on some int4 columns of every fourth table.
        let mut missing: Vec<Value> = schema
            .columns
            .iter()
            .map(|c| if i % 4 == 1 && c.ty == Type::Int4 { Value::Int4(rng.gen()) } else { Value::Null })
            .collect();
        if missing.iter().all(|v| *v == Value::Null) {
            missing.clear();
        }
        let row = ClassRow {
            missing,
            oid: Oid(rng.gen()),
            relname: text(&mut rng, 60).replace('\0', ""),
            relfilenode: Oid(rng.gen()),
            relpages: rng.gen(),
            reltuples: rng.gen(),
            relfrozenxid: Xid(rng.gen()),
            relminmxid: rng.gen(),
            fillfactor: rng.gen_range(10..=100),
            schema,
            kind: if index.is_some() { RelKind::Index } else { RelKind::Table },
            index,
            options,
            replica_identity: [
                settledb::ReplicaIdentity::Default,
                settledb::ReplicaIdentity::Full,
                settledb::ReplicaIdentity::Nothing,
            ][i % 3],
        };
        let t = form_tuple(&pg_class, &row.to_values()).unwrap();
        let back = ClassRow::from_values(&deform_tuple(&pg_class, &t).unwrap(), Tid::default()).unwrap();
        assert_eq!(back, row);
    }
}
