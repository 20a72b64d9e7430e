//! `wal_level = logical` end to end: what the WAL carries for a logical decoder, read back
//! with the WAL reader, against the same work under `replica`.
//!
//! Under `logical`: a heap change's tuple stays in its record beside a full-page image;
//! updates and deletes log the old row as the table's replica identity says (the primary key's
//! columns when a key column changed or the row was deleted; the whole row with FULL; nothing
//! with NOTHING); a subtransaction's records and its ROLLBACK TO's abort record name the
//! top-level transaction; commit records list subtransactions and carry a time; logical
//! messages are logged with their flag, prefix and bytes; checkpoints log the running
//! transactions; restarting at another level logs a parameter change. Under `replica` none
//! of the logical additions appear. Recovery replays logical WAL like any other.

use std::path::Path;
use std::sync::Arc;

use settledb::decode::message::LogicalMessage;
use settledb::heap::wal::{decode_old_row, decode_row_change, encode_tuple, logged_row_change, RowChange};
use settledb::heap::{OLD_KEY, OLD_TUPLE};
use settledb::io::{FileSystem, RealFs};
use settledb::wal::control::ControlFile;
use settledb::wal::{segment, DecodedRecord, Rmgr, WalReader};
use settledb::xact::standby::RunningXacts;
use settledb::{Column, Config, Database, ReplicaIdentity, Schema, Table, TableOptions, Type, Value, WalLevel, Xid};

fn config(level: WalLevel) -> Config {
    Config { shared_buffers_bytes: 8 << 20, autovacuum: false, wal_level: level, ..Config::default() }
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "val".into(), ty: Type::Text, nullable: false },
        ],
    }
}

fn create(db: &Database, name: &str) -> Table {
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    db.create_table(name, schema(), opts).unwrap()
}

/// Every record in the data directory's WAL, oldest first.
fn records(dir: &Path) -> Vec<DecodedRecord> {
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let control = ControlFile::read(&*fs, &dir.join("global").join("pg_control")).unwrap();
    let wal_dir = dir.join("pg_wal");
    let first = fs
        .list(&wal_dir)
        .unwrap()
        .iter()
        .filter_map(|n| segment::parse_segment_file_name(n, control.wal_segment_size))
        .min()
        .unwrap();
    let start = settledb::Lsn(first * control.wal_segment_size).max(settledb::wal::first_lsn(control.wal_segment_size));
    let mut reader = WalReader::new(fs, &wal_dir, start, control.wal_segment_size);
    let mut out = Vec::new();
    while let Some(r) = reader.next().unwrap() {
        out.push(r);
    }
    out
}

fn heap(recs: &[DecodedRecord], info: u8) -> Vec<&DecodedRecord> {
    recs.iter().filter(|r| r.rmgr == Rmgr::Heap && r.info & 0xF0 == info).collect()
}

/// The values of a logged old row, decoded with the table's schema.
fn old_row(rec: &DecodedRecord) -> Option<(u8, Vec<Value>)> {
    decode_old_row(rec).unwrap().map(|(k, t)| (k, settledb::heap::tuple::deform_tuple(&schema(), &t).unwrap()))
}

/// Logical decoding reads an update's or delete's rows borrowed from the record, in their
/// logged form: the same rows as the whole tuples decoded from it, re-encoded.
fn assert_logged_rows_match(rec: &DecodedRecord) {
    let logged = logged_row_change(rec).unwrap().expect("an update or a delete");
    let encoded = |t: &[u8]| {
        let mut b = Vec::new();
        encode_tuple(&mut b, t);
        b
    };
    let old_form = |old: Option<(u8, Vec<u8>)>| old.map(|(k, t)| [vec![k], encoded(&t)].concat()).unwrap_or_default();
    match decode_row_change(rec).unwrap().expect("a row change") {
        RowChange::Update { rel, old, new } => {
            assert_eq!(logged.rel, rel);
            assert_eq!(logged.new, Some(&encoded(&new)[..]));
            assert_eq!(logged.old, &old_form(old)[..]);
        }
        RowChange::Delete { rel, old } => {
            assert_eq!(logged.rel, rel);
            assert_eq!(logged.new, None);
            assert_eq!(logged.old, &old_form(old)[..]);
        }
        RowChange::Insert { .. } => panic!("an insert at {}", rec.lsn),
    }
}

/// The workload both levels run: a row written before a checkpoint so that the next insert
/// on its page carries an image, inserts, a key-changing and a non-key update, a delete, a savepoint rolled back and one
/// released, and two logical messages. Returns the top-level XID of the savepoint transaction.
fn workload(db: &Database, t: &Table) -> Xid {
    let mut tx = db.begin().unwrap();
    tx.insert(t, &[Value::Int4(-1), Value::Text("before the checkpoint".into())]).unwrap();
    tx.commit().unwrap();
    db.checkpoint().unwrap();
    let mut tx = db.begin().unwrap();
    let mut tids = Vec::new();
    for i in 0..4 {
        tids.push(tx.insert(t, &[Value::Int4(i), Value::Text(format!("row {i}"))]).unwrap());
    }
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    tx.update(t, tids[0], &[Value::Int4(100), Value::Text("key changed".into())]).unwrap();
    tx.update(t, tids[1], &[Value::Int4(1), Value::Text("value changed".into())]).unwrap();
    assert!(tx.delete(t, tids[2]).unwrap());
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(t, &[Value::Int4(10), Value::Text("top".into())]).unwrap();
    let top = tx.xid().unwrap();
    tx.savepoint("a").unwrap();
    tx.insert(t, &[Value::Int4(11), Value::Text("rolled back".into())]).unwrap();
    tx.emit_logical_message(true, "test", b"in a savepoint").unwrap();
    tx.rollback_to("a").unwrap();
    tx.savepoint("b").unwrap();
    tx.insert(t, &[Value::Int4(12), Value::Text("released".into())]).unwrap();
    tx.release("b").unwrap();
    tx.commit().unwrap();
    db.emit_logical_message(false, "test", b"on its own").unwrap();
    top
}

#[test]
fn logical_level_logs_what_a_decoder_needs() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(WalLevel::Logical)).unwrap();
    let t = create(&db, "t");
    let top = workload(&db, &t);
    db.close().unwrap();
    let recs = records(dir.path());

    // The first insert after the checkpoint took a page image and kept its tuple.
    let inserts = heap(&recs, 0x00);
    let with_image: Vec<_> =
        inserts.iter().filter(|r| r.blocks[0].image.is_some() && r.blocks[0].tag.rel == t.oid()).collect();
    assert!(!with_image.is_empty(), "some insert into t carries a page image");
    assert!(with_image.iter().all(|r| !r.blocks[0].data.is_empty()), "the tuple is kept beside the image");

    // Updates: the key change logs the old key (id only), the non-key change logs nothing.
    let updates: Vec<_> = recs
        .iter()
        .filter(|r| r.rmgr == Rmgr::Heap && matches!(r.info & 0xF0, 0x20 | 0x40) && r.blocks[0].tag.rel == t.oid())
        .collect();
    assert_eq!(updates.len(), 2);
    assert_eq!(old_row(updates[0]), Some((OLD_KEY, vec![Value::Int4(0), Value::Null])));
    assert_eq!(old_row(updates[1]), None, "an update that keeps the key logs no old key");
    assert!(updates.iter().all(|r| !r.blocks[0].data.is_empty()));

    // The delete logs the old key.
    let deletes = heap(&recs, 0x10);
    let del: Vec<_> = deletes.iter().filter(|r| r.blocks[0].tag.rel == t.oid()).collect();
    assert_eq!(del.len(), 1);
    assert_eq!(old_row(del[0]), Some((OLD_KEY, vec![Value::Int4(2), Value::Null])));
    for r in updates.iter().chain(del.iter().copied()) {
        assert_logged_rows_match(r);
    }

    // Records written in the savepoints name the top-level transaction; the top-level's own
    // records do not need to.
    let sub_inserts: Vec<_> = inserts.iter().filter(|r| r.toplevel_xid.is_valid()).collect();
    assert_eq!(sub_inserts.len(), 2, "the two inserts made inside savepoints");
    assert!(sub_inserts.iter().all(|r| r.toplevel_xid == top && r.xid != top));
    assert!(inserts.iter().any(|r| r.xid == top && !r.toplevel_xid.is_valid()));
    // ROLLBACK TO's abort record names the top-level transaction too.
    let sub_abort = recs
        .iter()
        .find(|r| r.rmgr == Rmgr::Xact && r.toplevel_xid == top)
        .expect("the rolled-back savepoint's abort record names its top-level transaction");
    assert_eq!(sub_abort.xid, sub_inserts[0].xid);
    // It carries where the savepoint began: after the top's own insert, before the
    // savepoint's first record.
    let sp = settledb::xact::records::decode_end_record(sub_abort).unwrap().savepoint_lsn.expect("a savepoint LSN");
    let top_insert = inserts.iter().find(|r| r.xid == top).unwrap();
    assert!(
        top_insert.lsn < sp && sp <= sub_inserts[0].lsn,
        "{sp} against {} and {}",
        top_insert.lsn,
        sub_inserts[0].lsn
    );
    // The commit lists the committed subtransactions, with a time: "b", and "a" as ROLLBACK
    // TO reopened it ("b" nests in it, so it took an XID first), never the rolled-back one.
    let commit = recs.iter().find(|r| r.rmgr == Rmgr::Xact && r.xid == top).unwrap();
    let end = settledb::xact::records::decode_end_record(commit).unwrap();
    assert_eq!(end.subxids, vec![Xid(sub_inserts[1].xid.0 - 1), sub_inserts[1].xid]);
    assert!(!end.subxids.contains(&sub_abort.xid));
    assert!(end.time_us > 1_600_000_000_000_000);

    // Messages.
    let msgs: Vec<_> = recs.iter().filter(|r| r.rmgr == Rmgr::LogicalMsg).collect();
    assert_eq!(msgs.len(), 2);
    let m0 = LogicalMessage::decode(&msgs[0].main_data, msgs[0].lsn).unwrap();
    assert!(m0.transactional && m0.prefix == "test" && m0.content == b"in a savepoint");
    assert_eq!(msgs[0].xid, sub_inserts[0].xid, "a transactional message belongs to its subtransaction");
    assert_eq!(msgs[0].toplevel_xid, top);
    let m1 = LogicalMessage::decode(&msgs[1].main_data, msgs[1].lsn).unwrap();
    assert!(!m1.transactional && m1.content == b"on its own" && msgs[1].xid == Xid::INVALID);

    // Checkpoints log the running transactions.
    let running: Vec<_> = recs.iter().filter(|r| r.rmgr == Rmgr::Standby).collect();
    assert!(running.len() >= 2, "one per checkpoint");
    for r in running {
        let rx = RunningXacts::decode(&r.main_data, r.lsn).unwrap();
        assert!(rx.xids.is_empty(), "nothing was running at these checkpoints: {rx:?}");
    }
}

#[test]
fn replica_identity_full_and_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(WalLevel::Logical)).unwrap();
    let full = create(&db, "full");
    let nothing = create(&db, "nothing");
    db.alter_table_replica_identity("full", ReplicaIdentity::Full).unwrap();
    db.alter_table_replica_identity("nothing", ReplicaIdentity::Nothing).unwrap();
    let err = db.alter_table_replica_identity("missing", ReplicaIdentity::Full).unwrap_err();
    assert!(err.to_string().contains("table \"missing\" does not exist"), "{err}");
    let mut tx = db.begin().unwrap();
    let a = tx.insert(&full, &[Value::Int4(1), Value::Text("a".into())]).unwrap();
    let b = tx.insert(&nothing, &[Value::Int4(1), Value::Text("b".into())]).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    tx.update(&full, a, &[Value::Int4(1), Value::Text("a2".into())]).unwrap();
    tx.delete(&nothing, b).unwrap();
    tx.commit().unwrap();
    db.close().unwrap();
    // The identity survives a restart (it lives in pg_class).
    let db = Database::open(dir.path(), config(WalLevel::Logical)).unwrap();
    let full = db.table("full").unwrap();
    let mut tx = db.begin().unwrap();
    let tid = tx.scan(&full).unwrap().next().unwrap().unwrap().0;
    tx.delete(&full, tid).unwrap();
    tx.commit().unwrap();
    db.close().unwrap();

    let recs = records(dir.path());
    let of = |rel: settledb::Oid| -> Vec<&DecodedRecord> {
        recs.iter()
            .filter(|r| r.rmgr == Rmgr::Heap && r.info & 0xF0 != 0x00 && r.blocks.iter().any(|b| b.tag.rel == rel))
            .collect()
    };
    let f = of(full.oid());
    assert_eq!(f.len(), 2, "an update and a delete of \"full\"");
    assert_eq!(old_row(f[0]), Some((OLD_TUPLE, vec![Value::Int4(1), Value::Text("a".into())])));
    assert_eq!(old_row(f[1]), Some((OLD_TUPLE, vec![Value::Int4(1), Value::Text("a2".into())])));
    let n = of(nothing.oid());
    assert_eq!(n.len(), 1);
    assert_eq!(old_row(n[0]), None);
    for r in f.iter().chain(&n) {
        assert_logged_rows_match(r);
    }
}

#[test]
fn replica_level_logs_none_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(WalLevel::Replica)).unwrap();
    let t = create(&db, "t");
    workload(&db, &t);
    db.close().unwrap();
    let recs = records(dir.path());
    for r in recs.iter().filter(|r| matches!(r.rmgr, Rmgr::Heap | Rmgr::Heap2)) {
        assert!(!r.toplevel_xid.is_valid(), "no top-level XID under replica: {r:?}");
        for b in &r.blocks {
            assert!(b.image.is_none() || b.data.is_empty(), "an image replaces the data under replica");
        }
        assert!(decode_old_row(r).unwrap().is_none(), "no old row under replica");
    }
    assert!(recs.iter().any(|r| r.rmgr == Rmgr::Heap && r.blocks[0].image.is_some()), "images were taken");
    // Messages are logged at any level, as PostgreSQL does.
    assert_eq!(recs.iter().filter(|r| r.rmgr == Rmgr::LogicalMsg).count(), 2);
}

#[test]
fn changing_the_level_logs_a_parameter_change_and_recovery_replays_logical_wal() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(WalLevel::Replica)).unwrap();
    let t = create(&db, "t");
    db.close().unwrap();
    // Restart at logical, write, crash.
    let db = Database::open(dir.path(), config(WalLevel::Logical)).unwrap();
    let mut tx = db.begin().unwrap();
    tx.savepoint("s").unwrap();
    for i in 0..200 {
        tx.insert(&t, &[Value::Int4(i), Value::Text("x".repeat(100))]).unwrap();
    }
    tx.release("s").unwrap();
    tx.commit().unwrap();
    db.abandon();
    let db = Database::open(dir.path(), config(WalLevel::Logical)).unwrap();
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.scan(&t).unwrap().count(), 200, "every committed row survives the crash");
    tx.commit().unwrap();
    let report = settledb::check::check_database(&db).unwrap();
    assert!(report.is_clean(), "{report}");
    db.close().unwrap();
    // And back to replica.
    Database::open(dir.path(), config(WalLevel::Replica)).unwrap().close().unwrap();
    let recs = records(dir.path());
    let levels: Vec<WalLevel> = recs
        .iter()
        .filter(|r| r.rmgr == Rmgr::Xlog && r.info == settledb::db::startup::XLOG_PARAMETER_CHANGE)
        .map(|r| settledb::db::startup::decode_parameter_change(r).unwrap())
        .collect();
    assert_eq!(levels, vec![WalLevel::Logical, WalLevel::Replica]);
}
