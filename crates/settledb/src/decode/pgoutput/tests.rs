//! Message encoding and option parsing of the pgoutput plugin, against the protocol's
//! documented layouts (byte for byte where it is short enough to read) and through the reader.

use super::proto::{Datum, Message, Reader, RelColumn};
use super::*;
use crate::catalog::publication::PublicationTables;
use crate::heap::tuple::{Column, Schema, Type};
use crate::xact::standby::RunningXacts;

fn opts(kv: &[(&str, &str)]) -> Vec<(String, Option<String>)> {
    kv.iter().map(|(k, v)| (k.to_string(), Some(v.to_string()))).collect()
}

fn err(kv: &[(&str, &str)]) -> String {
    match PgOutputOptions::parse(&opts(kv)) {
        Err(Error::InvalidInput(m)) => m,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn options_are_checked_as_postgresql_checks_them() {
    assert_eq!(
        err(&[("publication_names", "p")]),
        "client sent proto_version=0 but server only supports protocol 1 or higher"
    );
    assert_eq!(
        err(&[("proto_version", "5"), ("publication_names", "p")]),
        "client sent proto_version=5 but server only supports protocol 4 or lower"
    );
    assert_eq!(err(&[("proto_version", "x")]), "invalid proto_version");
    assert_eq!(err(&[("proto_version", "1")]), "publication_names parameter missing");
    assert_eq!(
        err(&[("proto_version", "1"), ("publication_names", "p"), ("streaming", "on")]),
        "requested proto_version=1 does not support streaming, need 2 or higher"
    );
    assert_eq!(
        err(&[("proto_version", "3"), ("publication_names", "p"), ("streaming", "parallel")]),
        "requested proto_version=3 does not support parallel streaming, need 4 or higher"
    );
    assert_eq!(
        err(&[("proto_version", "2"), ("publication_names", "p"), ("two_phase", "on")]),
        "requested proto_version=2 does not support two-phase commit, need 3 or higher"
    );
    assert_eq!(err(&[("proto_version", "1"), ("proto_version", "1")]), "conflicting or redundant options");
    assert_eq!(
        err(&[("proto_version", "1"), ("publication_names", "p"), ("binary", "maybe")]),
        "binary requires a Boolean value"
    );
    assert_eq!(
        err(&[("proto_version", "1"), ("publication_names", "p"), ("origin", "x")]),
        "unrecognized origin value: \"x\""
    );
    assert_eq!(
        err(&[("proto_version", "1"), ("publication_names", "p"), ("fast", "1")]),
        "unrecognized pgoutput option: fast"
    );
    assert_eq!(err(&[("proto_version", "1"), ("publication_names", "a,,b")]), "invalid publication_names syntax");
    let o = PgOutputOptions::parse(&opts(&[
        ("proto_version", "4"),
        ("publication_names", r#" Pub1 , "Mixed""Case" "#),
        ("binary", "true"),
        ("messages", "on"),
        ("streaming", "parallel"),
        ("two_phase", "1"),
        ("origin", "NONE"),
    ]))
    .unwrap();
    assert_eq!(o.publication_names, vec!["pub1".to_string(), "Mixed\"Case".to_string()]);
    assert!(o.binary && o.messages && o.two_phase && o.streaming == Streaming::Parallel);
}

/// Publications fixed for the test: `p` publishes inserts and deletes of table 16384.
struct Fixed(Vec<PublicationRow>);

impl PublicationLookup for Fixed {
    fn publications(&self, _snapshot: &Snapshot) -> Result<Vec<PublicationRow>> {
        Ok(self.0.clone())
    }
}

fn publication(actions: PublishActions) -> PublicationRow {
    PublicationRow { oid: Oid(16500), name: "p".into(), tables: PublicationTables::Some(vec![Oid(16384)]), actions }
}

fn plugin(kv: &[(&str, &str)], actions: PublishActions) -> PgOutput {
    let mut p = PgOutput::new(&opts(kv), Box::new(Fixed(vec![publication(actions)]))).unwrap();
    let mut h = CatalogHistory::default();
    h.start(&RunningXacts {
        next_xid: Xid(700),
        oldest_running: Xid(700),
        xids: vec![],
        subxids: vec![],
        overflowed: false,
    });
    p.catalog_history(&h).unwrap();
    p
}

fn rel(identity: ReplicaIdentity) -> RelInfo {
    RelInfo {
        epoch: RelInfo::next_epoch(),
        oid: Oid(16384),
        namespace: "public".into(),
        name: "t".into(),
        schema: Schema {
            columns: vec![
                Column { name: "id".into(), ty: Type::Int4, nullable: false },
                Column { name: "val".into(), ty: Type::Text, nullable: true },
            ],
        },
        missing: Vec::new(),
        replica_identity: identity,
        key_columns: vec![0],
    }
}

fn txn() -> TxnInfo {
    TxnInfo {
        xid: Xid(727),
        first_lsn: Lsn(0x100),
        commit_lsn: Lsn(0x200),
        end_lsn: Lsn(0x228),
        commit_time_us: PG_EPOCH_OFFSET_US + 5,
    }
}

fn parse_all(out: &Output) -> Vec<Message> {
    let mut r = Reader::default();
    out.rows.iter().map(|row| r.parse(&row.data).unwrap()).collect()
}

#[test]
fn a_transaction_is_begin_relation_changes_commit() {
    let mut p = plugin(&[("proto_version", "1"), ("publication_names", "p")], PublishActions::default());
    let mut out = Output::default();
    let (t, r) = (txn(), rel(ReplicaIdentity::Default));
    p.begin(&mut out, &t).unwrap();
    let one = vec![ValueRef::Int4(1), ValueRef::Text(b"one")];
    p.change(&mut out, &t, Lsn(0x110), &r, &RowData::Insert { new: one.clone() }).unwrap();
    let key = vec![ValueRef::Int4(1), ValueRef::Null];
    p.change(
        &mut out,
        &t,
        Lsn(0x120),
        &r,
        &RowData::Update { old: Some(key.clone()), old_whole: false, new: one.clone() },
    )
    .unwrap();
    p.change(&mut out, &t, Lsn(0x130), &r, &RowData::Delete { old: Some(key), old_whole: false }).unwrap();
    p.commit(&mut out, &t).unwrap();

    // Byte for byte, the documented layouts.
    let begin = [&[b'B'][..], &0x200u64.to_be_bytes(), &5i64.to_be_bytes(), &727u32.to_be_bytes()].concat();
    assert_eq!(out.rows[0].data, begin);
    assert_eq!(out.rows[0].lsn, Lsn(0x110), "BEGIN goes out with the first change sent");
    let relation = [
        &[b'R'][..],
        &16384u32.to_be_bytes(),
        b"public\0t\0d",
        &2i16.to_be_bytes(),
        b"\x01id\0",
        &23u32.to_be_bytes(),
        &(-1i32).to_be_bytes(),
        b"\x00val\0",
        &25u32.to_be_bytes(),
        &(-1i32).to_be_bytes(),
    ]
    .concat();
    assert_eq!(out.rows[1].data, relation);
    let insert =
        [&[b'I'][..], &16384u32.to_be_bytes(), b"N", &2i16.to_be_bytes(), b"t\0\0\0\x011t\0\0\0\x03one"].concat();
    assert_eq!(out.rows[2].data, insert);
    let commit = [&[b'C', 0][..], &0x200u64.to_be_bytes(), &0x228u64.to_be_bytes(), &5i64.to_be_bytes()].concat();
    assert_eq!(out.rows[5].data, commit);

    let m = parse_all(&out);
    assert_eq!(m.len(), 6, "the relation goes out once: {m:?}");
    let text = |s: &str| Datum::Text(s.as_bytes().to_vec());
    assert_eq!(
        m[3],
        Message::Update {
            xid: None,
            relid: 16384,
            old: Some((b'K', vec![text("1"), Datum::Null])),
            new: vec![text("1"), text("one")]
        }
    );
    assert_eq!(m[4], Message::Delete { xid: None, relid: 16384, old: (b'K', vec![text("1"), Datum::Null]) });
}

#[test]
fn unpublished_actions_and_empty_transactions_send_nothing() {
    let inserts = PublishActions { insert: true, update: false, delete: false, truncate: false };
    let mut p = plugin(&[("proto_version", "1"), ("publication_names", "p")], inserts);
    let mut out = Output::default();
    let (t, r) = (txn(), rel(ReplicaIdentity::Default));
    p.begin(&mut out, &t).unwrap();
    p.change(
        &mut out,
        &t,
        Lsn(0x130),
        &r,
        &RowData::Delete { old: Some(vec![ValueRef::Int4(1), ValueRef::Null]), old_whole: false },
    )
    .unwrap();
    p.message(&mut out, Some(&t), Lsn(0x140), true, "pfx", b"x").unwrap();
    p.commit(&mut out, &t).unwrap();
    assert!(out.rows.is_empty(), "no published change, messages off: nothing at all");
    // Another table is in no publication.
    let other = RelInfo { oid: Oid(99999), epoch: RelInfo::next_epoch(), ..rel(ReplicaIdentity::Default) };
    p.begin(&mut out, &t).unwrap();
    p.change(&mut out, &t, Lsn(0x150), &other, &RowData::Insert { new: vec![ValueRef::Int4(1), ValueRef::Null] })
        .unwrap();
    p.commit(&mut out, &t).unwrap();
    assert!(out.rows.is_empty());
}

#[test]
fn a_missing_publication_is_postgresql_15s_error_at_the_first_change() {
    let mut p = PgOutput::new(
        &opts(&[("proto_version", "1"), ("publication_names", "p,q")]),
        Box::new(Fixed(vec![publication(PublishActions::default())])),
    )
    .unwrap();
    let mut h = CatalogHistory::default();
    h.start(&RunningXacts {
        next_xid: Xid(700),
        oldest_running: Xid(700),
        xids: vec![],
        subxids: vec![],
        overflowed: false,
    });
    p.catalog_history(&h).unwrap();
    let mut out = Output::default();
    let t = txn();
    p.begin(&mut out, &t).unwrap();
    let e = p.change(
        &mut out,
        &t,
        Lsn(0x110),
        &rel(ReplicaIdentity::Default),
        &RowData::Insert { new: vec![ValueRef::Int4(1), ValueRef::Null] },
    );
    assert_eq!(e.unwrap_err().to_string(), Error::NotFound("publication \"q\" does not exist".into()).to_string());
}

#[test]
fn streamed_blocks_carry_xids_and_binary_values_their_send_format() {
    let mut p = plugin(
        &[
            ("proto_version", "4"),
            ("publication_names", "p"),
            ("streaming", "parallel"),
            ("binary", "on"),
            ("messages", "on"),
        ],
        PublishActions::default(),
    );
    let mut out = Output::default();
    let (t, r) = (txn(), rel(ReplicaIdentity::Full));
    assert!(p.streaming());
    p.stream_start(&mut out, t.xid, Lsn(0x110)).unwrap();
    p.stream_change(
        &mut out,
        t.xid,
        Xid(728),
        Lsn(0x110),
        &r,
        &RowData::Insert { new: vec![ValueRef::Int4(7), ValueRef::Null] },
    )
    .unwrap();
    p.stream_message(&mut out, t.xid, Xid(728), Lsn(0x118), true, "pfx", b"hi").unwrap();
    p.stream_stop(&mut out, t.xid, Lsn(0x118)).unwrap();
    p.stream_start(&mut out, t.xid, Lsn(0x120)).unwrap();
    p.stream_change(
        &mut out,
        t.xid,
        t.xid,
        Lsn(0x120),
        &r,
        &RowData::Delete { old: Some(vec![ValueRef::Int4(7), ValueRef::Null]), old_whole: true },
    )
    .unwrap();
    p.stream_stop(&mut out, t.xid, Lsn(0x120)).unwrap();
    p.stream_abort_at(&mut out, t.xid, Xid(728), Lsn(0x180), PG_EPOCH_OFFSET_US + 9).unwrap();
    p.stream_commit(&mut out, &t).unwrap();
    let m = parse_all(&out);
    let bin = |b: &[u8]| Datum::Binary(b.to_vec());
    assert_eq!(m[0], Message::StreamStart { xid: 727, first_segment: true });
    let Message::Relation { xid, replident, columns, .. } = &m[1] else { panic!("{:?}", m[1]) };
    assert_eq!((*xid, *replident), (Some(728), b'f'));
    assert_eq!(
        columns[1],
        RelColumn { key: true, name: "val".into(), type_oid: 25, typmod: -1 },
        "FULL: every column is key"
    );
    assert_eq!(
        m[2],
        Message::Insert { xid: Some(728), relid: 16384, new: vec![bin(&7i32.to_be_bytes()), Datum::Null] }
    );
    assert_eq!(
        m[3],
        Message::Message {
            xid: Some(727),
            transactional: true,
            lsn: 0x118,
            prefix: "pfx".into(),
            content: b"hi".to_vec()
        }
    );
    assert_eq!(m[4], Message::StreamStop);
    assert_eq!(m[5], Message::StreamStart { xid: 727, first_segment: false });
    assert_eq!(
        m[6],
        Message::Delete { xid: Some(727), relid: 16384, old: (b'O', vec![bin(&7i32.to_be_bytes()), Datum::Null]) }
    );
    assert_eq!(m[8], Message::StreamAbort { xid: 727, subxid: 728, abort: Some((0x180, 9)) });
    assert_eq!(m[9], Message::StreamCommit { xid: 727, flags: 0, commit_lsn: 0x200, end_lsn: 0x228, commit_time: 5 });
}

#[test]
fn binary_send_formats() {
    assert_eq!(datum(ValueRef::Int8(-2), true), Datum::Binary((-2i64).to_be_bytes().to_vec()));
    assert_eq!(datum(ValueRef::Float8(1.5), true), Datum::Binary(1.5f64.to_bits().to_be_bytes().to_vec()));
    assert_eq!(datum(ValueRef::Bool(true), true), Datum::Binary(vec![1]));
    assert_eq!(datum(ValueRef::Bool(true), false), Datum::Text(b"t".to_vec()));
    assert_eq!(datum(ValueRef::Timestamp(PG_EPOCH_OFFSET_US + 1), true), Datum::Binary(1i64.to_be_bytes().to_vec()));
    assert_eq!(datum(ValueRef::Bytea(&[0xde]), false), Datum::Text(b"\\xde".to_vec()));
}

#[test]
fn the_reader_refuses_what_is_malformed() {
    let mut r = Reader::default();
    assert!(r.parse(b"").is_err());
    assert!(r.parse(b"Z").is_err());
    assert!(r.parse(b"B\0\0").is_err());
    assert!(r.parse(&[b'E', 0]).is_err(), "bytes left over");
    assert!(r
        .parse(&[&[b'I'][..], &1u32.to_be_bytes(), b"N", &1i16.to_be_bytes(), b"t\xff\xff\xff\xff"].concat())
        .is_err());
}

#[test]
fn two_phase_messages_are_protocol_3s() {
    let mut p =
        plugin(&[("proto_version", "3"), ("publication_names", "p"), ("two_phase", "on")], PublishActions::default());
    assert!(p.two_phase() && p.two_phase_requested());
    let mut out = Output::default();
    let (t, r) = (txn(), rel(ReplicaIdentity::Default));
    p.begin_prepare(&mut out, &t, "g1").unwrap();
    p.change(&mut out, &t, Lsn(0x110), &r, &RowData::Insert { new: vec![ValueRef::Int4(1), ValueRef::Null] }).unwrap();
    p.prepare(&mut out, &t, "g1").unwrap();
    let fin = TxnInfo { commit_lsn: Lsn(0x300), end_lsn: Lsn(0x330), commit_time_us: PG_EPOCH_OFFSET_US + 7, ..t };
    p.commit_prepared(&mut out, &fin, "g1").unwrap();
    p.rollback_prepared(&mut out, &fin, "g2", Lsn(0x228), PG_EPOCH_OFFSET_US + 5).unwrap();
    let begin = [
        &[b'b'][..],
        &0x200u64.to_be_bytes(),
        &0x228u64.to_be_bytes(),
        &5i64.to_be_bytes(),
        &727u32.to_be_bytes(),
        b"g1\0",
    ]
    .concat();
    assert_eq!(out.rows[0].data, begin);
    let rollback = [
        &[b'r', 0][..],
        &0x228u64.to_be_bytes(),
        &0x330u64.to_be_bytes(),
        &5i64.to_be_bytes(),
        &7i64.to_be_bytes(),
        &727u32.to_be_bytes(),
        b"g2\0",
    ]
    .concat();
    assert_eq!(out.rows[5].data, rollback);
    let m = parse_all(&out);
    assert!(matches!(m[1], Message::Relation { .. }) && matches!(m[2], Message::Insert { .. }), "no B inside: {m:?}");
    assert!(
        matches!(&m[3], Message::Prepare { stream: false, prepare_lsn: 0x200, end_lsn: 0x228, gid, .. } if gid == "g1")
    );
    assert!(matches!(&m[4], Message::CommitPrepared { commit_lsn: 0x300, commit_time: 7, gid, .. } if gid == "g1"));
}

#[test]
fn numbers_and_timestamps_are_written_as_their_text_output() {
    // The one-copy fields against the text functions every other output uses.
    let field = |v: ValueRef<'_>, format: ValueFormat| {
        let mut w = Writer(Vec::new());
        write_value(&mut w, v, format, false);
        w.0
    };
    let text = |s: String| [&[b't'][..], &(s.len() as u32).to_be_bytes(), s.as_bytes()].concat();
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let m = (x as i64) >> (x % 64);
        let scale = (x % 23) as u8;
        assert_eq!(field(ValueRef::Int8(m), ValueFormat::Numeric { scale }), text(sqltypes::numeric_text(m, scale)));
        assert_eq!(field(ValueRef::Int8(m), ValueFormat::Stored), text(m.to_string()));
        assert_eq!(field(ValueRef::Int4(m as i32), ValueFormat::Stored), text((m as i32).to_string()));
        assert_eq!(field(ValueRef::Timestamp(m), ValueFormat::Stored), text(pgtext::timestamp_out(m)));
    }
}
