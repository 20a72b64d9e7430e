//! Logical decoding end to end: a slot, changes written through the API, and
//! `logical_slot_get_changes` / `peek_changes` with the `test_decoding` plugin, line for line
//! in PostgreSQL 15's format.

use settledb::db::DecodeLimits;
use settledb::{Column, Config, Database, ReplicaIdentity, Schema, Table, TableOptions, Type, Value, WalLevel};

fn config() -> Config {
    Config {
        shared_buffers_bytes: 8 << 20,
        autovacuum: false,
        wal_level: WalLevel::Logical,
        max_prepared_transactions: 4,
        ..Config::default()
    }
}

fn create(db: &Database, name: &str) -> Table {
    let schema = Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "val".into(), ty: Type::Text, nullable: true },
        ],
    };
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    db.create_table(name, schema, opts).unwrap()
}

fn opts(list: &[(&str, &str)]) -> Vec<(String, Option<String>)> {
    list.iter().map(|(k, v)| (k.to_string(), Some(v.to_string()))).collect()
}

fn lines(db: &Database, slot: &str, o: &[(&str, &str)]) -> Vec<String> {
    db.logical_slot_get_changes(slot, DecodeLimits::default(), &opts(o))
        .unwrap()
        .rows
        .into_iter()
        .map(|r| String::from_utf8(r.data).unwrap())
        .collect()
}

#[test]
fn test_decoding_lines_match_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    let t = create(&db, "t");
    let full = create(&db, "full");
    db.alter_table_replica_identity("full", ReplicaIdentity::Full).unwrap();
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();

    let mut tx = db.begin().unwrap();
    let a = tx.insert(&t, &[Value::Int4(1), Value::Text("one".into())]).unwrap();
    let b = tx.insert(&t, &[Value::Int4(2), Value::Null]).unwrap();
    let x1 = tx.xid().unwrap().0;
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    let a = tx.update(&t, a, &[Value::Int4(1), Value::Text("it's".into())]).unwrap().unwrap();
    tx.update(&t, a, &[Value::Int4(10), Value::Text("uno".into())]).unwrap();
    tx.delete(&t, b).unwrap();
    let x2 = tx.xid().unwrap().0;
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    let f = tx.insert(&full, &[Value::Int4(5), Value::Text("x".into())]).unwrap();
    tx.savepoint("a").unwrap();
    tx.insert(&t, &[Value::Int4(20), Value::Text("gone".into())]).unwrap();
    tx.rollback_to("a").unwrap();
    tx.savepoint("b").unwrap();
    let f = tx.update(&full, f, &[Value::Int4(5), Value::Text("y".into())]).unwrap().unwrap();
    tx.emit_logical_message(true, "pfx", b"hello").unwrap();
    tx.release("b").unwrap();
    tx.delete(&full, f).unwrap();
    let x3 = tx.xid().unwrap().0;
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(30), Value::Text("rolled back".into())]).unwrap();
    tx.rollback().unwrap();
    db.emit_logical_message(false, "nt", b"now").unwrap();

    let got = lines(&db, "s", &[]);
    let want = vec![
        format!("BEGIN {x1}"),
        "table public.t: INSERT: id[integer]:1 val[text]:'one'".to_string(),
        "table public.t: INSERT: id[integer]:2 val[text]:null".to_string(),
        format!("COMMIT {x1}"),
        format!("BEGIN {x2}"),
        "table public.t: UPDATE: id[integer]:1 val[text]:'it''s'".to_string(),
        "table public.t: UPDATE: old-key: id[integer]:1 new-tuple: id[integer]:10 val[text]:'uno'".to_string(),
        "table public.t: DELETE: id[integer]:2".to_string(),
        format!("COMMIT {x2}"),
        format!("BEGIN {x3}"),
        "table public.\"full\": INSERT: id[integer]:5 val[text]:'x'".to_string(),
        "table public.\"full\": UPDATE: old-key: id[integer]:5 val[text]:'x' new-tuple: id[integer]:5 val[text]:'y'"
            .to_string(),
        "message: transactional: 1 prefix: pfx, sz: 5 content:hello".to_string(),
        "table public.\"full\": DELETE: id[integer]:5 val[text]:'y'".to_string(),
        format!("COMMIT {x3}"),
        "message: transactional: 0 prefix: nt, sz: 3 content:now".to_string(),
    ];
    assert_eq!(got, want);

    // Consumed: nothing more until something new commits.
    assert!(lines(&db, "s", &[]).is_empty());
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(40), Value::Null]).unwrap();
    tx.commit().unwrap();
    let peek = |o: &[(&str, &str)]| -> Vec<String> {
        db.logical_slot_peek_changes("s", DecodeLimits::default(), &opts(o))
            .unwrap()
            .rows
            .into_iter()
            .map(|r| String::from_utf8(r.data).unwrap())
            .collect()
    };
    assert_eq!(
        peek(&[("include-xids", "0")]),
        vec!["BEGIN", "table public.t: INSERT: id[integer]:40 val[text]:null", "COMMIT"]
    );
    let stamped = peek(&[("include-xids", "off"), ("include-timestamp", "on")]);
    assert!(stamped[2].starts_with("COMMIT (at 20") && stamped[2].ends_with("+00)"), "{stamped:?}");
    assert_eq!(lines(&db, "s", &[("include-xids", "0")]).len(), 3, "peek did not consume");
    db.close().unwrap();
}

#[test]
fn skip_empty_xacts_limits_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    let t = create(&db, "t");
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    // DDL is an empty transaction to test_decoding (CREATE TABLE, then its primary key).
    create(&db, "other");
    for i in 0..5 {
        let mut tx = db.begin().unwrap();
        tx.insert(&t, &[Value::Int4(i), Value::Null]).unwrap();
        tx.commit().unwrap();
    }
    let all = lines(&db, "s", &[("include-xids", "0")]);
    assert_eq!(all.iter().filter(|l| *l == "BEGIN").count(), 7, "{all:?}");
    assert_eq!(all.iter().filter(|l| *l == "COMMIT").count(), 7, "{all:?}");
    assert_eq!(&all[..4], &["BEGIN", "COMMIT", "BEGIN", "COMMIT"], "the empty DDL transactions first");
    // That was a get: everything is consumed now.
    for i in 5..10 {
        let mut tx = db.begin().unwrap();
        tx.insert(&t, &[Value::Int4(i), Value::Null]).unwrap();
        tx.commit().unwrap();
    }
    // upto_nchanges stops after the transaction that reached it.
    let limited = db
        .logical_slot_get_changes(
            "s",
            DecodeLimits { upto_nchanges: Some(4), ..Default::default() },
            &opts(&[("skip-empty-xacts", "1"), ("include-xids", "0")]),
        )
        .unwrap();
    assert_eq!(limited.rows.len(), 6, "two transactions of three rows");
    // A crash: the slot's position survives, and decoding goes on from it.
    db.abandon();
    let db = Database::open(dir.path(), config()).unwrap();
    let rest = lines(&db, "s", &[("skip-empty-xacts", "1"), ("include-xids", "0")]);
    let want: Vec<String> = (7..10)
        .flat_map(|i| {
            ["BEGIN".to_string(), format!("table public.t: INSERT: id[integer]:{i} val[text]:null"), "COMMIT".into()]
        })
        .collect();
    assert_eq!(rest, want, "the three transactions the limited get left, once each");
    db.close().unwrap();
}

#[test]
fn a_dropped_table_is_decoded_with_the_schema_it_was_written_under() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    let gone = create(&db, "gone");
    let mut tx = db.begin().unwrap();
    tx.insert(&gone, &[Value::Int4(1), Value::Text("a".into())]).unwrap();
    tx.commit().unwrap();
    db.drop_table("gone").unwrap();
    let got = lines(&db, "s", &[("skip-empty-xacts", "1"), ("include-xids", "0")]);
    assert_eq!(got, vec!["BEGIN", "table public.gone: INSERT: id[integer]:1 val[text]:'a'", "COMMIT"]);
}

#[test]
fn a_large_transaction_spills_under_a_small_limit_and_comes_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.logical_decoding_work_mem_bytes = 64 << 10;
    let db = Database::open(dir.path(), cfg).unwrap();
    let t = create(&db, "t");
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    let mut tx = db.begin().unwrap();
    for i in 0..5_000 {
        tx.insert(&t, &[Value::Int4(i), Value::Text(format!("row {i}"))]).unwrap();
        if i % 1000 == 500 {
            tx.savepoint("s").unwrap();
            tx.insert(&t, &[Value::Int4(-i), Value::Text("rolled back".into())]).unwrap();
            tx.rollback_to("s").unwrap();
            tx.release("s").unwrap();
        }
    }
    tx.commit().unwrap();
    let r = db.logical_slot_get_changes("s", DecodeLimits::default(), &opts(&[("include-xids", "0")])).unwrap();
    assert!(r.stats.spill_count > 0 && r.stats.spill_bytes > 0, "{:?}", r.stats);
    assert!(r.stats.peak_memory <= 64 << 10, "{:?}", r.stats);
    let rows: Vec<String> = r.rows.into_iter().map(|r| String::from_utf8(r.data).unwrap()).collect();
    assert_eq!(rows.len(), 5_002);
    for (i, l) in rows[1..5_001].iter().enumerate() {
        assert_eq!(l, &format!("table public.t: INSERT: id[integer]:{i} val[text]:'row {i}'"));
    }
    // The spill files went with the session.
    let spill = dir.path().join("pg_replslot").join("s");
    let left: Vec<_> = std::fs::read_dir(&spill).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.iter().all(|n| !n.to_string_lossy().starts_with("xid-spill")), "{left:?}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    let e = db.logical_slot_get_changes("nope", DecodeLimits::default(), &[]).unwrap_err().to_string();
    assert!(e.contains("replication slot \"nope\" does not exist"), "{e}");
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    let e = db.logical_slot_get_changes("s", DecodeLimits::default(), &opts(&[("bogus", "1")])).unwrap_err();
    assert!(e.to_string().contains("option \"bogus\" = \"1\" is unknown"), "{e}");
    db.create_logical_replication_slot("p", "pgoutput_nope", false).unwrap();
    let e = db.logical_slot_get_changes("p", DecodeLimits::default(), &[]).unwrap_err().to_string();
    assert!(e.contains("pgoutput_nope"), "{e}");
}

/// Checks the framing of streamed output: every block opens, holds stream lines of one
/// transaction only, and closes; returns the blocks' sizes (stream lines per block).
fn stream_blocks(lines: &[String], xid: u32) -> Vec<usize> {
    let open = format!("opening a streamed block for transaction TXN {xid}");
    let close = format!("closing a streamed block for transaction TXN {xid}");
    let mut blocks = Vec::new();
    let mut cur: Option<usize> = None;
    for l in lines {
        if *l == open {
            assert!(cur.is_none(), "a block opened inside a block: {lines:?}");
            cur = Some(0);
        } else if *l == close {
            blocks.push(cur.take().expect("a block closed before it opened"));
        } else if l.starts_with("streaming ") {
            assert!(l.ends_with(&format!("TXN {xid}")) || l.starts_with("streaming message"), "{l}");
            *cur.as_mut().expect("a stream line outside a block") += 1;
        } else {
            assert!(cur.is_none(), "{l:?} inside a streamed block");
        }
    }
    assert!(cur.is_none(), "a block left open");
    blocks
}

#[test]
fn stream_changes_streams_a_large_transaction_in_blocks_and_commits_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.logical_decoding_work_mem_bytes = 64 << 10;
    let db = Database::open(dir.path(), cfg).unwrap();
    let t = create(&db, "t");
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();

    let mut big = db.begin().unwrap();
    for i in 0..3_000 {
        big.insert(&t, &[Value::Int4(i), Value::Text(format!("row {i}"))]).unwrap();
    }
    big.emit_logical_message(true, "pfx", b"mid").unwrap();
    let mut small = db.begin().unwrap();
    small.insert(&t, &[Value::Int4(-1), Value::Text("small".into())]).unwrap();
    let xs = small.xid().unwrap().0;
    small.commit().unwrap();
    for i in 3_000..5_000 {
        big.insert(&t, &[Value::Int4(i), Value::Text(format!("row {i}"))]).unwrap();
    }
    let xb = big.xid().unwrap().0;
    big.commit().unwrap();

    let o = [("stream-changes", "1")];
    let peeked = db.logical_slot_peek_changes("s", DecodeLimits::default(), &opts(&o)).unwrap();
    let r = db.logical_slot_get_changes("s", DecodeLimits::default(), &opts(&o)).unwrap();
    assert_eq!(peeked.rows, r.rows, "peek and get decode the same");
    let got: Vec<String> = r.rows.iter().map(|r| String::from_utf8(r.data.clone()).unwrap()).collect();

    let blocks = stream_blocks(&got, xb);
    assert!(blocks.len() >= 2, "{blocks:?}");
    assert_eq!(blocks.iter().sum::<usize>(), 5_001, "every change and the message, streamed once");
    assert_eq!(got.iter().filter(|l| **l == format!("streaming change for TXN {xb}")).count(), 5_000);
    assert!(got.contains(&"streaming message: transactional: 1 prefix: pfx, sz: 3".to_string()));
    assert_eq!(got.last().unwrap(), &format!("committing streamed transaction TXN {xb}"));
    // The small transaction is decoded whole at its commit, between streamed blocks.
    let b = got.iter().position(|l| *l == format!("BEGIN {xs}")).unwrap();
    assert_eq!(got[b + 1], "table public.t: INSERT: id[integer]:-1 val[text]:'small'");
    assert_eq!(got[b + 2], format!("COMMIT {xs}"));
    assert!(b > 0 && got[..b].iter().any(|l| l.starts_with("closing")), "streaming began before it");
    // Row LSNs: a change at its record, the commit at its end.
    assert_eq!(r.rows.last().unwrap().lsn, r.end_lsn);

    assert_eq!(r.stats.spill_count, 0, "{:?}", r.stats);
    assert_eq!(r.stats.stream_txns, 1, "{:?}", r.stats);
    assert_eq!(r.stats.stream_count, blocks.len() as u64, "{:?}", r.stats);
    assert_eq!(r.stats.total_txns, 2, "{:?}", r.stats);
    assert!(r.stats.peak_memory <= 64 << 10, "{:?}", r.stats);

    // include-xids=0 and include-timestamp.
    let mut tx = db.begin().unwrap();
    for i in 10_000..14_000 {
        tx.insert(&t, &[Value::Int4(i), Value::Null]).unwrap();
    }
    tx.commit().unwrap();
    let got = lines(&db, "s", &[("stream-changes", "1"), ("include-xids", "0"), ("include-timestamp", "1")]);
    assert_eq!(got[0], "opening a streamed block for transaction");
    assert_eq!(got[1], "streaming change for transaction");
    assert!(got.contains(&"closing a streamed block for transaction".to_string()));
    let last = got.last().unwrap();
    assert!(last.starts_with("committing streamed transaction (at 20") && last.ends_with("+00)"), "{last}");
}

#[test]
fn streamed_transactions_that_roll_back_are_stream_aborts() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.logical_decoding_work_mem_bytes = 64 << 10;
    let db = Database::open(dir.path(), cfg).unwrap();
    let t = create(&db, "t");
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();

    // A savepoint whose rows were streamed, then rolled back to; the transaction commits.
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(0), Value::Text("kept".into())]).unwrap();
    tx.savepoint("a").unwrap();
    for i in 1..4_000 {
        tx.insert(&t, &[Value::Int4(i), Value::Text(format!("gone {i}"))]).unwrap();
    }
    tx.rollback_to("a").unwrap();
    tx.insert(&t, &[Value::Int4(-5), Value::Text("after".into())]).unwrap();
    let x1 = tx.xid().unwrap().0;
    tx.commit().unwrap();
    // A streamed transaction rolled back whole, with a released savepoint's rows inside.
    let mut tx = db.begin().unwrap();
    tx.savepoint("b").unwrap();
    for i in 5_000..9_000 {
        tx.insert(&t, &[Value::Int4(i), Value::Null]).unwrap();
    }
    tx.release("b").unwrap();
    let x2 = tx.xid().unwrap().0;
    tx.rollback().unwrap();

    let got = lines(&db, "s", &[("stream-changes", "on")]);
    let aborts: Vec<&String> = got.iter().filter(|l| l.starts_with("aborting")).collect();
    let sub_abort = got.iter().position(|l| l.starts_with("aborting streamed (sub)transaction TXN ")).unwrap();
    let sub: u32 = got[sub_abort].rsplit(' ').next().unwrap().parse().unwrap();
    assert_ne!(sub, x1, "the first abort is the savepoint's subtransaction");
    assert!(sub_abort < got.iter().position(|l| *l == format!("committing streamed transaction TXN {x1}")).unwrap());
    // The whole rollback: the released subtransaction first, then the top.
    assert_eq!(aborts.len(), 3, "{aborts:?}");
    assert!(aborts[1].starts_with("aborting streamed (sub)transaction TXN ") && *aborts[1] != aborts[2].as_str());
    assert_eq!(*aborts[2], format!("aborting streamed (sub)transaction TXN {x2}"));
    assert_eq!(got.last().unwrap(), &format!("aborting streamed (sub)transaction TXN {x2}"));
    // Without streaming, the same WAL decodes to the committed rows only.
    db.create_logical_replication_slot("plain", "test_decoding", false).unwrap();
    assert!(lines(&db, "plain", &[("stream-changes", "0")]).is_empty());
}

#[test]
fn skip_empty_xacts_defers_the_opening_line_to_the_first_change() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.logical_decoding_work_mem_bytes = 64 << 10;
    let db = Database::open(dir.path(), cfg).unwrap();
    let t = create(&db, "t");
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    let mut tx = db.begin().unwrap();
    for i in 0..4_000 {
        tx.insert(&t, &[Value::Int4(i), Value::Null]).unwrap();
    }
    tx.commit().unwrap();
    let o = [("stream-changes", "1"), ("skip-empty-xacts", "1"), ("include-xids", "0")];
    let got = lines(&db, "s", &o);
    assert_eq!(got[0], "opening a streamed block for transaction");
    assert_eq!(got.last().unwrap(), "committing streamed transaction");
    assert_eq!(got.iter().filter(|l| *l == "streaming change for transaction").count(), 4_000);
}

#[test]
fn replication_slot_stats_add_up_sessions_reset_and_survive_a_clean_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config();
    cfg.logical_decoding_work_mem_bytes = 64 << 10;
    let db = Database::open(dir.path(), cfg.clone()).unwrap();
    let t = create(&db, "t");
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    db.create_logical_replication_slot("idle", "test_decoding", false).unwrap();
    let big = |db: &Database, from: i32| {
        let mut tx = db.begin().unwrap();
        for i in from..from + 4_000 {
            tx.insert(&t, &[Value::Int4(i), Value::Null]).unwrap();
        }
        tx.commit().unwrap();
    };
    big(&db, 0);
    // A peek counts as PostgreSQL's does, then the get that consumes the same WAL.
    let peek = db.logical_slot_peek_changes("s", DecodeLimits::default(), &[]).unwrap().stats;
    let get = db.logical_slot_get_changes("s", DecodeLimits::default(), &[]).unwrap().stats;
    assert!(peek.spill_count > 0 && peek.total_txns == 1, "{peek:?}");
    big(&db, 10_000);
    let streamed =
        db.logical_slot_get_changes("s", DecodeLimits::default(), &opts(&[("stream-changes", "1")])).unwrap();
    let st = streamed.stats;
    // (It re-reads the first transaction, already consumed, from the slot's restart point:
    // that one spills, as in PostgreSQL, which streams nothing before `confirmed_flush`.)
    assert!(st.stream_count > 0 && st.stream_txns == 1, "{st:?}");

    let all = db.replication_slot_stats();
    assert_eq!(all.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["idle", "s"]);
    assert_eq!(all[0].1, settledb::stats::SlotStats::default());
    let s = all[1].1;
    let sum = |f: fn(&settledb::decode::reorderbuffer::ReorderStats) -> u64| f(&peek) + f(&get) + f(&st);
    assert_eq!(s.spill_txns, sum(|r| r.spill_txns));
    assert_eq!(s.spill_count, sum(|r| r.spill_count));
    assert_eq!(s.spill_bytes, sum(|r| r.spill_bytes));
    assert_eq!((s.stream_txns, s.stream_count, s.stream_bytes), (1, st.stream_count, st.stream_bytes));
    assert_eq!(s.total_txns, 3);
    assert_eq!(s.total_bytes, sum(|r| r.total_bytes));
    assert_eq!(s.stats_reset, 0, "never reset: NULL");

    // Kept across a clean shutdown, by name.
    db.close().unwrap();
    let db = Database::open(dir.path(), cfg.clone()).unwrap();
    assert_eq!(db.replication_slot_stats()[1].1, s);

    // pg_stat_reset_replication_slot.
    let e = db.reset_replication_slot_stats(Some("nope")).unwrap_err().to_string();
    assert!(e.contains("replication slot \"nope\" does not exist"), "{e}");
    db.reset_replication_slot_stats(Some("s")).unwrap();
    let r = db.replication_slot_stats()[1].1;
    assert_eq!(r.total_txns, 0);
    assert!(r.stats_reset > 0);
    // A dropped slot's counters go with it; one created under its name starts from zero.
    db.logical_slot_get_changes("s", DecodeLimits::default(), &[]).unwrap();
    db.drop_replication_slot("s").unwrap();
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    assert_eq!(db.replication_slot_stats()[1].1, settledb::stats::SlotStats::default());
    // Not kept after a crash, like every cumulative counter.
    db.reset_replication_slot_stats(None).unwrap();
    db.abandon();
    let db = Database::open(dir.path(), cfg).unwrap();
    assert!(db.replication_slot_stats().iter().all(|(_, s)| *s == settledb::stats::SlotStats::default()));
}

/// `decode_slot_follow` reads on past the end of the WAL with its reorder buffer kept: a
/// transaction open across passes comes out whole at its commit, what commits between passes
/// is decoded in the next, what committed before the start point is skipped, and the lines
/// are those a one-off session gives for the same range.
#[test]
fn a_following_session_reads_on_and_matches_a_one_off_session() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    let t = create(&db, "t");
    db.create_logical_replication_slot("follow", "test_decoding", false).unwrap();
    db.create_logical_replication_slot("reference", "test_decoding", false).unwrap();
    let follow_at = db.replication_slot("follow").unwrap().confirmed_flush;
    let insert = |id: i32| {
        let mut tx = db.begin().unwrap();
        tx.insert(&t, &[Value::Int4(id), Value::Text(format!("v{id}"))]).unwrap();
        tx.commit().unwrap();
    };
    insert(1);
    let skip_to = db.current_wal_insert_lsn();
    insert(2);
    // Open across the first pass: half of it is in the WAL when the session starts.
    let mut open = db.begin().unwrap();
    open.insert(&t, &[Value::Int4(3), Value::Text("v3".into())]).unwrap();
    let mut open = Some(open);
    let mut rows = Vec::new();
    let mut passes = 0;
    let mut sink = |r: &settledb::decode::logical::OutputRow| {
        rows.push(String::from_utf8(r.data.clone()).unwrap());
        Ok(())
    };
    let mut follow = |_pos: settledb::Lsn| -> settledb::Result<bool> {
        passes += 1;
        match passes {
            1 => {
                let mut tx = open.take().unwrap();
                tx.insert(&t, &[Value::Int4(4), Value::Text("v4".into())]).unwrap();
                tx.commit().unwrap();
                insert(5);
                Ok(true)
            }
            // A pass that finds nothing new, then the end.
            2 => Ok(true),
            _ => Ok(false),
        }
    };
    let limits = DecodeLimits { start_lsn: Some(skip_to), ..DecodeLimits::default() };
    let summary = db.decode_slot_follow("follow", limits, &[], &mut sink, &mut follow).unwrap();
    assert_eq!(passes, 3);
    assert_eq!(summary.rows, rows.len() as u64);
    let ids: Vec<&str> = rows.iter().filter_map(|l| l.split("id[integer]:").nth(1)).collect();
    assert_eq!(ids.len(), 4, "{rows:?}");
    assert!(
        ids[0].starts_with("2 ") && ids[1].starts_with("3 ") && ids[2].starts_with("4 ") && ids[3].starts_with("5 ")
    );
    // The slot did not move; a one-off session over the same range, skipping the same first
    // transaction, gives the same lines.
    assert_eq!(db.replication_slot("follow").unwrap().confirmed_flush, follow_at);
    let reference = db
        .logical_slot_peek_changes(
            "reference",
            DecodeLimits { start_lsn: Some(skip_to), ..DecodeLimits::default() },
            &[],
        )
        .unwrap();
    let reference: Vec<String> = reference.rows.into_iter().map(|r| String::from_utf8(r.data).unwrap()).collect();
    assert_eq!(rows, reference);
}
