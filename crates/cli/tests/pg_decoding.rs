//! settledb's `test_decoding` against PostgreSQL 15's, line for line: the same changes (inserts
//! with a NULL, a quote to escape, a non-key and a key-changing update, deletes, a table with
//! `REPLICA IDENTITY FULL` whose name is a keyword, a savepoint rolled back and one released,
//! transactional and non-transactional messages, a transaction rolled back) go through a
//! logical slot on each engine, and `pg_logical_slot_get_changes(…, 'include-xids', '0')` must
//! print the same lines in the same order.
//!
//! Skipped (with a message) when PostgreSQL 15 is not installed.

mod common;

use common::{pg15_installed, Peer};
use settledb::db::DecodeLimits;
use settledb::{Column, Config, Database, ReplicaIdentity, Schema, TableOptions, Type, Value, WalLevel};

/// Each string runs as its own simple query (several statements in one string are one
/// implicit transaction, in which PostgreSQL refuses to create a slot).
const SQL: [&str; 9] = [
    "CREATE TABLE t (id integer PRIMARY KEY, val text)",
    r#"CREATE TABLE "full" (id integer PRIMARY KEY, val text); ALTER TABLE "full" REPLICA IDENTITY FULL"#,
    "SELECT 'init' FROM pg_create_logical_replication_slot('s', 'test_decoding')",
    "BEGIN; INSERT INTO t VALUES (1, 'one'); INSERT INTO t VALUES (2, NULL); COMMIT",
    "BEGIN; UPDATE t SET val = 'it''s' WHERE id = 1; UPDATE t SET id = 10, val = 'uno' WHERE id = 1;
     DELETE FROM t WHERE id = 2; COMMIT",
    r#"BEGIN; INSERT INTO "full" VALUES (5, 'x');
       SAVEPOINT a; INSERT INTO t VALUES (20, 'gone'); ROLLBACK TO a;
       SAVEPOINT b; UPDATE "full" SET val = 'y' WHERE id = 5;
       SELECT pg_logical_emit_message(true, 'pfx', 'hello'); RELEASE b;
       DELETE FROM "full" WHERE id = 5; COMMIT"#,
    "BEGIN; INSERT INTO t VALUES (30, 'rolled back'); ROLLBACK",
    "SELECT pg_logical_emit_message(false, 'nt', 'now')",
    // PostgreSQL 15 decodes only flushed WAL and does not flush a non-transactional message
    // (settledb's get_changes flushes first): a checkpoint flushes it.
    "CHECKPOINT",
];

fn postgres_lines() -> Option<Vec<String>> {
    if !pg15_installed() {
        return None;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_peer, url) = Peer::start(&tmp.path().join("pg"), &["wal_level=logical"]);
    let mut c = workload::pg::connect(&url).expect("connect");
    for q in SQL {
        c.batch_execute(q).unwrap_or_else(|e| panic!("{q}: {e}"));
    }
    let rows = c
        .query("SELECT data FROM pg_logical_slot_get_changes('s', NULL, NULL, 'include-xids', '0')", &[])
        .expect("get changes");
    Some(rows.iter().map(|r| r.get::<_, String>(0)).collect())
}

fn settledb_lines() -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let cfg = Config { autovacuum: false, wal_level: WalLevel::Logical, ..Config::default() };
    let db = Database::open(dir.path(), cfg).unwrap();
    let schema = || Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "val".into(), ty: Type::Text, nullable: true },
        ],
    };
    let opts = || TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", schema(), opts()).unwrap();
    let full = db.create_table("full", schema(), opts()).unwrap();
    db.alter_table_replica_identity("full", ReplicaIdentity::Full).unwrap();
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();

    let mut tx = db.begin().unwrap();
    let a = tx.insert(&t, &[Value::Int4(1), Value::Text("one".into())]).unwrap();
    let b = tx.insert(&t, &[Value::Int4(2), Value::Null]).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    let a = tx.update(&t, a, &[Value::Int4(1), Value::Text("it's".into())]).unwrap().unwrap();
    tx.update(&t, a, &[Value::Int4(10), Value::Text("uno".into())]).unwrap();
    tx.delete(&t, b).unwrap();
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
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(30), Value::Text("rolled back".into())]).unwrap();
    tx.rollback().unwrap();
    db.emit_logical_message(false, "nt", b"now").unwrap();

    let opts = vec![("include-xids".to_string(), Some("0".to_string()))];
    let r = db.logical_slot_get_changes("s", DecodeLimits::default(), &opts).unwrap();
    db.close().unwrap();
    r.rows.into_iter().map(|r| String::from_utf8(r.data).unwrap()).collect()
}

#[test]
fn test_decoding_prints_what_postgresql_15_prints() {
    let Some(pg) = postgres_lines() else { return };
    let ours = settledb_lines();
    assert_eq!(ours, pg, "settledb's lines, then PostgreSQL 15's");
}
