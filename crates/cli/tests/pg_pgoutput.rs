//! settledb's `pgoutput` against PostgreSQL 15's, message for message: the same tables (the
//! same column types on both: integer, text, bigint, double precision, boolean, timestamp,
//! bytea), the same two publications (one per table, one of them publishing only inserts
//! and deletes), the same changes (inserts with NULLs, a non-key and a key-changing update,
//! deletes, a table with `REPLICA IDENTITY FULL`, a table in no publication, both kinds of
//! logical message, a rollback) through a `pgoutput` slot on each engine.
//! `pg_logical_slot_peek_binary_changes(…, 'proto_version', N, 'publication_names', …)` on
//! PostgreSQL and `logical_slot_peek_changes` on settledb must give the same messages once
//! parsed and normalized ([`Normalizer`]: XIDs numbered in order of appearance, relations by
//! name, LSNs and times left out): with protocol 1 in text and in binary, and with protocol 2
//! streaming a large transaction under `logical_decoding_work_mem = 64kB`.
//!
//! How many blocks a streamed transaction takes depends on each engine's memory accounting
//! (see `pg_decoding.rs`), so the streamed comparison takes the block framing (`S`/`E`) out,
//! checks that it is well formed, and leaves out the row changes of the transaction that
//! rolls back (how many went out before the rollback depends on when each engine evicted).
//!
//! Skipped (with a message) when PostgreSQL 15 is not installed.

mod common;

use common::{pg15_installed, Peer};
use settledb::catalog::publication::PublishActions;
use settledb::db::{DecodeLimits, PublicationTarget};
use settledb::decode::pgoutput::proto::Normalizer;
use settledb::{Column, Config, Database, ReplicaIdentity, Schema, TableOptions, Type, Value, WalLevel};

/// The workload as PostgreSQL runs it, one simple query per string.
const SQL: [&str; 10] = [
    "CREATE TABLE t (id integer PRIMARY KEY, val text, n bigint, f double precision, b boolean,
                     ts timestamp, bin bytea)",
    r#"CREATE TABLE "full" (id integer PRIMARY KEY, val text); ALTER TABLE "full" REPLICA IDENTITY FULL"#,
    "CREATE TABLE other (id integer PRIMARY KEY, val text)",
    r#"CREATE PUBLICATION p_t FOR TABLE t; CREATE PUBLICATION p_full FOR TABLE "full" WITH (publish = 'insert, delete')"#,
    "SELECT 'init' FROM pg_create_logical_replication_slot('s', 'pgoutput')",
    r#"BEGIN; INSERT INTO t VALUES (1, 'one', 1234567890123, 0.1, true, '2024-01-02 03:04:05.5', '\xdead');
       INSERT INTO t VALUES (2, NULL, NULL, NULL, NULL, NULL, NULL);
       INSERT INTO "full" VALUES (5, 'x'); INSERT INTO other VALUES (9, 'in no publication'); COMMIT"#,
    r#"BEGIN; UPDATE t SET val = 'it''s' WHERE id = 1; UPDATE t SET id = 10, f = -1.5e300 WHERE id = 1;
       DELETE FROM t WHERE id = 2; UPDATE "full" SET val = 'y' WHERE id = 5; DELETE FROM "full" WHERE id = 5;
       SELECT pg_logical_emit_message(true, 'pfx', 'hello'); COMMIT"#,
    "BEGIN; INSERT INTO other VALUES (11, 'still in none'); COMMIT",
    "BEGIN; INSERT INTO t (id) VALUES (30); ROLLBACK",
    // A non-transactional message, flushed by the checkpoint (PostgreSQL decodes flushed WAL).
    "SELECT pg_logical_emit_message(false, 'nt', 'now'); CHECKPOINT",
];

/// PostgreSQL's `timestamp '2024-01-02 03:04:05.5'` in microseconds since 1970.
fn ts() -> i64 {
    settledb::pgtext::days_from_civil(2024, 1, 2) * 86_400_000_000 + (3 * 3600 + 4 * 60 + 5) * 1_000_000 + 500_000
}

fn col(name: &str, ty: Type) -> Column {
    Column { name: name.into(), ty, nullable: true }
}

fn pk() -> TableOptions {
    TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() }
}

fn two_columns() -> Schema {
    Schema { columns: vec![col("id", Type::Int4), col("val", Type::Text)] }
}

fn config() -> Config {
    Config {
        autovacuum: false,
        wal_level: WalLevel::Logical,
        logical_decoding_work_mem_bytes: 64 << 10,
        ..Config::default()
    }
}

/// The workload on settledb.
fn settledb_workload(db: &Database) {
    let schema = Schema {
        columns: vec![
            col("id", Type::Int4),
            col("val", Type::Text),
            col("n", Type::Int8),
            col("f", Type::Float8),
            col("b", Type::Bool),
            col("ts", Type::Timestamp),
            col("bin", Type::Bytea),
        ],
    };
    let t = db.create_table("t", schema, pk()).unwrap();
    let full = db.create_table("full", two_columns(), pk()).unwrap();
    db.alter_table_replica_identity("full", ReplicaIdentity::Full).unwrap();
    let other = db.create_table("other", two_columns(), pk()).unwrap();
    db.create_publication("p_t", PublicationTarget::Tables(&["t"]), PublishActions::default()).unwrap();
    let ins_del = PublishActions::parse("insert, delete").unwrap();
    db.create_publication("p_full", PublicationTarget::Tables(&["full"]), ins_del).unwrap();
    db.create_logical_replication_slot("s", "pgoutput", false).unwrap();

    let text = |s: &str| Value::Text(s.into());
    let one = [
        Value::Int4(1),
        text("one"),
        Value::Int8(1_234_567_890_123),
        Value::Float8(0.1),
        Value::Bool(true),
        Value::Timestamp(ts()),
        Value::Bytea(vec![0xde, 0xad]),
    ];
    let mut tx = db.begin().unwrap();
    let a = tx.insert(&t, &one).unwrap();
    let mut two = vec![Value::Null; 7];
    two[0] = Value::Int4(2);
    let b = tx.insert(&t, &two).unwrap();
    let f = tx.insert(&full, &[Value::Int4(5), text("x")]).unwrap();
    tx.insert(&other, &[Value::Int4(9), text("in no publication")]).unwrap();
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    let mut v = one.to_vec();
    v[1] = text("it's");
    let a = tx.update(&t, a, &v).unwrap().unwrap();
    v[0] = Value::Int4(10);
    v[3] = Value::Float8(-1.5e300);
    tx.update(&t, a, &v).unwrap();
    tx.delete(&t, b).unwrap();
    let f = tx.update(&full, f, &[Value::Int4(5), text("y")]).unwrap().unwrap();
    tx.delete(&full, f).unwrap();
    tx.emit_logical_message(true, "pfx", b"hello").unwrap();
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    tx.insert(&other, &[Value::Int4(11), text("still in none")]).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    let mut r = vec![Value::Null; 7];
    r[0] = Value::Int4(30);
    tx.insert(&t, &r).unwrap();
    tx.rollback().unwrap();
    db.emit_logical_message(false, "nt", b"now").unwrap();
}

fn options(proto: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut o = vec![("proto_version", proto), ("messages", "true")];
    if !extra.iter().any(|(k, _)| *k == "publication_names") {
        o.push(("publication_names", "p_t,p_full"));
    }
    o.extend_from_slice(extra);
    o.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Renders a run's messages.
fn render(rows: impl IntoIterator<Item = Vec<u8>>) -> Vec<String> {
    let mut n = Normalizer::default();
    rows.into_iter().map(|r| n.line(&r).unwrap()).collect()
}

/// Peeks on PostgreSQL with each set of options, after running `sql` (connection, statement).
fn postgres_runs(sql: &[(usize, &str)], runs: &[Vec<(String, String)>]) -> Option<Vec<Vec<String>>> {
    if !pg15_installed() {
        return None;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_peer, url) = Peer::start(&tmp.path().join("pg"), &["wal_level=logical"]);
    postgres_runs_at(&url, sql, runs)
}

/// [`postgres_runs`] on a server already running at `url`.
fn postgres_runs_at(url: &str, sql: &[(usize, &str)], runs: &[Vec<(String, String)>]) -> Option<Vec<Vec<String>>> {
    let mut c = [workload::pg::connect(url).expect("connect"), workload::pg::connect(url).expect("connect")];
    for (k, q) in sql {
        c[*k].batch_execute(q).unwrap_or_else(|e| panic!("{q}: {e:?}"));
    }
    let mut out = Vec::new();
    for o in runs {
        let args: Vec<String> = o.iter().map(|(k, v)| format!("'{k}', '{v}'")).collect();
        let q = format!("SELECT data FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, {})", args.join(", "));
        let rows = c[0].query(q.as_str(), &[]).unwrap_or_else(|e| panic!("{q}: {e:?}"));
        out.push(render(rows.iter().map(|r| r.get::<_, Vec<u8>>(0))));
    }
    Some(out)
}

fn settledb_run(db: &Database, o: &[(String, String)]) -> Vec<String> {
    let o: Vec<(String, Option<String>)> = o.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
    let r = db.logical_slot_peek_changes("s", DecodeLimits::default(), &o).unwrap();
    render(r.rows.into_iter().map(|r| r.data))
}

#[test]
fn pgoutput_sends_what_postgresql_15_sends() {
    let runs = [options("1", &[]), options("1", &[("binary", "true")]), options("2", &[])];
    let sql: Vec<(usize, &str)> = SQL.iter().map(|q| (0, *q)).collect();
    let Some(pg) = postgres_runs(&sql, &runs) else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    settledb_workload(&db);
    for (o, pg) in runs.iter().zip(&pg) {
        let ours = settledb_run(&db, o);
        assert_eq!(&ours, pg, "with {o:?}: settledb's messages, then PostgreSQL 15's");
    }
    assert!(pg[0].iter().any(|l| l.starts_with("UPDATE public.t K(")), "the comparison covers an old key: {:?}", pg[0]);
    assert!(pg[1].iter().any(|l| l.contains("b'")), "and binary values: {:?}", pg[1]);
    db.close().unwrap();
}

/// The streaming workload as PostgreSQL runs it: a large transaction with a message and a
/// released savepoint, a large one rolled back, a small one.
const STREAM_SQL: [(usize, &str); 7] = [
    (0, "CREATE TABLE t (id integer PRIMARY KEY, val text)"),
    (0, "CREATE PUBLICATION p_t FOR TABLE t"),
    (0, "SELECT 'init' FROM pg_create_logical_replication_slot('s', 'pgoutput')"),
    (
        0,
        "BEGIN; INSERT INTO t SELECT g, 'row ' || g FROM generate_series(0, 2999) g;
         SELECT pg_logical_emit_message(true, 'pfx', 'mid');
         SAVEPOINT a; INSERT INTO t VALUES (-1, 'in a savepoint'); RELEASE a;
         INSERT INTO t SELECT g, 'row ' || g FROM generate_series(3000, 4999) g; COMMIT",
    ),
    (0, "BEGIN; INSERT INTO t SELECT g, NULL FROM generate_series(10000, 13999) g; ROLLBACK"),
    (0, "INSERT INTO t VALUES (-7, 'tail'); CHECKPOINT"),
    (0, "SET logical_decoding_work_mem = '64kB'"),
];

fn settledb_stream_workload(db: &Database) {
    let t = db.create_table("t", two_columns(), pk()).unwrap();
    db.create_publication("p_t", PublicationTarget::Tables(&["t"]), PublishActions::default()).unwrap();
    db.create_logical_replication_slot("s", "pgoutput", false).unwrap();
    let row = |i: i32, v: Option<String>| [Value::Int4(i), v.map_or(Value::Null, Value::Text)];
    let mut tx = db.begin().unwrap();
    for g in 0..3000 {
        tx.insert(&t, &row(g, Some(format!("row {g}")))).unwrap();
    }
    tx.emit_logical_message(true, "pfx", b"mid").unwrap();
    tx.savepoint("a").unwrap();
    tx.insert(&t, &row(-1, Some("in a savepoint".into()))).unwrap();
    tx.release("a").unwrap();
    for g in 3000..5000 {
        tx.insert(&t, &row(g, Some(format!("row {g}")))).unwrap();
    }
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    for g in 10000..14000 {
        tx.insert(&t, &row(g, None)).unwrap();
    }
    tx.rollback().unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(-7, Some("tail".into()))).unwrap();
    tx.commit().unwrap();
}

/// A streamed run without its block framing (checked here: blocks do not nest, the first
/// block of a transaction says so and later ones do not), and without the row changes of
/// transactions that were aborted; also the number of such changes per aborted transaction.
fn unframed(lines: &[String]) -> (Vec<String>, Vec<usize>) {
    let mut open: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    let mut kept = Vec::new();
    let mut pending: Vec<(String, String)> = Vec::new();
    for l in lines {
        if let Some(rest) = l.strip_prefix("STREAM START ") {
            assert!(open.is_none(), "nested block at {l}");
            let (xid, first) = rest.split_once(' ').map_or((rest, false), |(x, f)| (x, f == "first"));
            assert_eq!(first, seen.insert(xid.to_string()), "first_segment of {l}");
            open = Some(xid.to_string());
            continue;
        }
        if l == "STREAM STOP" {
            assert!(open.take().is_some(), "a stop without a start");
            continue;
        }
        if let Some(top) = &open {
            pending.push((top.clone(), l.clone()));
            continue;
        }
        let end = l
            .strip_prefix("STREAM COMMIT ")
            .or(l.strip_prefix("STREAM PREPARE "))
            .map(|r| (r, false))
            .or(l.strip_prefix("STREAM ABORT ").map(|r| (r, true)));
        if let Some((rest, aborted)) = end {
            let top = rest.split(' ').next().unwrap_or_default().to_string();
            let (mine, others): (Vec<_>, Vec<_>) = pending.drain(..).partition(|(t, _)| *t == top);
            pending = others;
            let inserts = mine.iter().filter(|(_, x)| x.starts_with("INSERT")).count();
            for (_, x) in mine {
                if !(aborted && x.starts_with("INSERT")) {
                    kept.push(x);
                }
            }
            if aborted {
                kept.push(format!(
                    "(streamed inserts of {top} before its abort: {})",
                    if inserts > 0 { "some" } else { "none" }
                ));
            }
        }
        kept.push(l.clone());
    }
    assert!(open.is_none(), "a block left open");
    (kept, vec![seen.len()])
}

#[test]
fn streamed_pgoutput_is_what_postgresql_15_streams() {
    let runs = [options("2", &[("streaming", "on"), ("publication_names", "p_t")])];
    let Some(pg) = postgres_runs(&STREAM_SQL, &runs) else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    settledb_stream_workload(&db);
    let ours = settledb_run(&db, &runs[0]);
    let (ours_u, ours_n) = unframed(&ours);
    let (pg_u, pg_n) = unframed(&pg[0]);
    assert_eq!(ours_n, pg_n, "streamed transactions");
    assert_eq!(pg_n, vec![2], "both large transactions were streamed");
    assert_eq!(ours_u, pg_u, "settledb's messages, then PostgreSQL 15's, framing taken out");
    assert!(pg[0].iter().any(|l| l.starts_with("INSERT T1") && l.contains("in a savepoint")), "a subtransaction's XID");
    db.close().unwrap();
}

/// The two-phase workload as PostgreSQL runs it (a slot created with `two_phase`): a prepared
/// transaction committed, one rolled back, one with a savepoint rolled back and a message.
const TWO_PHASE_SQL: [(usize, &str); 10] = [
    (0, "CREATE TABLE t (id integer PRIMARY KEY, val text)"),
    (0, "CREATE PUBLICATION p_t FOR TABLE t"),
    (0, "SELECT 'init' FROM pg_create_logical_replication_slot('s', 'pgoutput', false, true)"),
    (0, "BEGIN; INSERT INTO t VALUES (1, 'one'); INSERT INTO t VALUES (2, 'two'); PREPARE TRANSACTION 'p1'"),
    (0, "COMMIT PREPARED 'p1'"),
    (0, "BEGIN; INSERT INTO t VALUES (3, 'three'); UPDATE t SET id = 11 WHERE id = 1; PREPARE TRANSACTION 'it''s'"),
    (0, "ROLLBACK PREPARED 'it''s'"),
    (
        0,
        "BEGIN; INSERT INTO t VALUES (6, 'six'); SAVEPOINT a; INSERT INTO t VALUES (7, 'gone'); ROLLBACK TO a;
         SELECT pg_logical_emit_message(true, 'pfx', 'in 2pc'); PREPARE TRANSACTION 'sp'",
    ),
    (0, "COMMIT PREPARED 'sp'"),
    (0, "CHECKPOINT"),
];

fn settledb_two_phase_workload(db: &Database) {
    let t = db.create_table("t", two_columns(), pk()).unwrap();
    db.create_publication("p_t", PublicationTarget::Tables(&["t"]), PublishActions::default()).unwrap();
    db.create_logical_replication_slot("s", "pgoutput", true).unwrap();
    let row = |i: i32, v: &str| [Value::Int4(i), Value::Text(v.into())];
    let mut tx = db.begin().unwrap();
    let one = tx.insert(&t, &row(1, "one")).unwrap();
    tx.insert(&t, &row(2, "two")).unwrap();
    tx.prepare("p1").unwrap();
    db.commit_prepared("p1").unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(3, "three")).unwrap();
    tx.update(&t, one, &row(11, "one")).unwrap();
    tx.prepare("it's").unwrap();
    db.rollback_prepared("it's").unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(6, "six")).unwrap();
    tx.savepoint("a").unwrap();
    tx.insert(&t, &row(7, "gone")).unwrap();
    tx.rollback_to("a").unwrap();
    tx.emit_logical_message(true, "pfx", b"in 2pc").unwrap();
    tx.prepare("sp").unwrap();
    db.commit_prepared("sp").unwrap();
}

#[test]
fn two_phase_pgoutput_is_what_postgresql_15_sends() {
    let runs = [options("3", &[("two_phase", "on"), ("publication_names", "p_t")])];
    if !pg15_installed() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_peer, url) = Peer::start(&tmp.path().join("pg"), &["wal_level=logical", "max_prepared_transactions=4"]);
    let Some(pg) = postgres_runs_at(&url, &TWO_PHASE_SQL, &runs) else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config { max_prepared_transactions: 4, ..config() }).unwrap();
    settledb_two_phase_workload(&db);
    let ours = settledb_run(&db, &runs[0]);
    assert_eq!(ours, pg[0], "settledb's messages, then PostgreSQL 15's");
    for what in ["BEGIN PREPARE", "PREPARE", "COMMIT PREPARED", "ROLLBACK PREPARED", "MESSAGE"] {
        assert!(pg[0].iter().any(|l| l.starts_with(what)), "the comparison covers {what}: {:?}", pg[0]);
    }
    db.close().unwrap();
}

/// A large prepared transaction streamed before its PREPARE (protocol 3, `streaming` and
/// `two_phase`): its blocks, a stream prepare, then the commit prepared.
const STREAM_PREPARE_SQL: [(usize, &str); 7] = [
    (0, "CREATE TABLE t (id integer PRIMARY KEY, val text)"),
    (0, "CREATE PUBLICATION p_t FOR TABLE t"),
    (0, "SELECT 'init' FROM pg_create_logical_replication_slot('s', 'pgoutput', false, true)"),
    (0, "BEGIN; INSERT INTO t SELECT g, 'row ' || g FROM generate_series(1, 5000) g; PREPARE TRANSACTION 'big'"),
    (0, "COMMIT PREPARED 'big'"),
    (0, "CHECKPOINT"),
    (0, "SET logical_decoding_work_mem = '64kB'"),
];

#[test]
fn a_streamed_prepared_transaction_is_what_postgresql_15_sends() {
    let runs = [options("3", &[("two_phase", "on"), ("streaming", "on"), ("publication_names", "p_t")])];
    if !pg15_installed() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_peer, url) = Peer::start(&tmp.path().join("pg"), &["wal_level=logical", "max_prepared_transactions=4"]);
    let Some(pg) = postgres_runs_at(&url, &STREAM_PREPARE_SQL, &runs) else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config { max_prepared_transactions: 4, ..config() }).unwrap();
    let t = db.create_table("t", two_columns(), pk()).unwrap();
    db.create_publication("p_t", PublicationTarget::Tables(&["t"]), PublishActions::default()).unwrap();
    db.create_logical_replication_slot("s", "pgoutput", true).unwrap();
    let mut tx = db.begin().unwrap();
    for g in 1..=5000 {
        tx.insert(&t, &[Value::Int4(g), Value::Text(format!("row {g}"))]).unwrap();
    }
    tx.prepare("big").unwrap();
    drop(tx);
    db.commit_prepared("big").unwrap();
    let ours = settledb_run(&db, &runs[0]);
    let (ours_u, ours_n) = unframed(&ours);
    let (pg_u, pg_n) = unframed(&pg[0]);
    assert_eq!((ours_n, pg_n.clone()), (vec![1], pg_n), "streamed transactions");
    assert_eq!(ours_u, pg_u, "settledb's messages, then PostgreSQL 15's, framing taken out");
    assert!(pg_u.iter().any(|l| l.starts_with("STREAM PREPARE")), "{:?}", &pg_u[pg_u.len().saturating_sub(3)..]);
    db.close().unwrap();
}

/// The TRUNCATE workload as PostgreSQL runs it: a two-table truncate with both flags where one
/// table's publication does not publish truncates, a truncate between inserts of one
/// transaction, one rolled back, and one of a table whose publication leaves truncates out.
const TRUNCATE_SQL: [(usize, &str); 9] = [
    (0, "CREATE TABLE a (id integer PRIMARY KEY, val text); CREATE TABLE b (id integer PRIMARY KEY, val text)"),
    (0, "CREATE PUBLICATION p_a FOR TABLE a; CREATE PUBLICATION p_b FOR TABLE b WITH (publish = 'insert')"),
    (0, "SELECT 'init' FROM pg_create_logical_replication_slot('s', 'pgoutput')"),
    (0, "TRUNCATE a, b RESTART IDENTITY CASCADE"),
    (0, "BEGIN; INSERT INTO a VALUES (1, 'one'); INSERT INTO b VALUES (1, 'b'); TRUNCATE a; INSERT INTO a VALUES (2, 'two'); COMMIT"),
    (0, "BEGIN; TRUNCATE a; ROLLBACK"),
    (0, "TRUNCATE b"),
    (0, "TRUNCATE a CASCADE"),
    (0, "INSERT INTO a VALUES (3, 'three'); INSERT INTO b VALUES (3, 'b3'); CHECKPOINT"),
];

fn settledb_truncate_workload(db: &Database) {
    use settledb::TruncateOptions;
    let a = db.create_table("a", two_columns(), pk()).unwrap();
    let b = db.create_table("b", two_columns(), pk()).unwrap();
    db.create_publication("p_a", PublicationTarget::Tables(&["a"]), PublishActions::default()).unwrap();
    let ins = PublishActions::parse("insert").unwrap();
    db.create_publication("p_b", PublicationTarget::Tables(&["b"]), ins).unwrap();
    db.create_logical_replication_slot("s", "pgoutput", false).unwrap();
    let row = |i: i32, v: &str| [Value::Int4(i), Value::Text(v.into())];
    let none = TruncateOptions::default();
    db.truncate(&["a", "b"], TruncateOptions { restart_seqs: true, cascade: true }).unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&a, &row(1, "one")).unwrap();
    tx.insert(&b, &row(1, "b")).unwrap();
    tx.truncate(&["a"], none).unwrap();
    tx.insert(&a, &row(2, "two")).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    tx.truncate(&["a"], none).unwrap();
    tx.rollback().unwrap();
    db.truncate(&["b"], none).unwrap();
    db.truncate(&["a"], TruncateOptions { restart_seqs: false, cascade: true }).unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&a, &row(3, "three")).unwrap();
    tx.insert(&b, &row(3, "b3")).unwrap();
    tx.commit().unwrap();
}

/// The `T` message: relations, flags, Relation messages first, the publication's `publish`.
#[test]
fn truncate_is_what_postgresql_15_sends() {
    let runs = [options("1", &[("publication_names", "p_a,p_b")]), options("2", &[("publication_names", "p_a,p_b")])];
    let Some(pg) = postgres_runs(&TRUNCATE_SQL, &runs) else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    settledb_truncate_workload(&db);
    for (o, pg) in runs.iter().zip(&pg) {
        let ours = settledb_run(&db, o);
        assert_eq!(&ours, pg, "with {o:?}: settledb's messages, then PostgreSQL 15's");
    }
    assert!(pg[0].iter().any(|l| l == "TRUNCATE flags 3 (public.a)"), "{:#?}", pg[0]);
    db.close().unwrap();
}

/// A streamed transaction that truncates between its inserts: `T` with the XID.
const STREAM_TRUNCATE_SQL: [(usize, &str); 5] = [
    (0, "CREATE TABLE t (id integer PRIMARY KEY, val text)"),
    (0, "CREATE PUBLICATION p_t FOR TABLE t"),
    (0, "SELECT 'init' FROM pg_create_logical_replication_slot('s', 'pgoutput')"),
    (
        0,
        "BEGIN; INSERT INTO t SELECT g, 'row ' || g FROM generate_series(0, 2999) g; TRUNCATE t;
         INSERT INTO t SELECT g, 'again ' || g FROM generate_series(0, 2999) g; COMMIT; CHECKPOINT",
    ),
    (0, "SET logical_decoding_work_mem = '64kB'"),
];

#[test]
fn a_streamed_truncate_is_what_postgresql_15_streams() {
    let runs = [options("2", &[("streaming", "on"), ("publication_names", "p_t")])];
    let Some(pg) = postgres_runs(&STREAM_TRUNCATE_SQL, &runs) else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    let t = db.create_table("t", two_columns(), pk()).unwrap();
    db.create_publication("p_t", PublicationTarget::Tables(&["t"]), PublishActions::default()).unwrap();
    db.create_logical_replication_slot("s", "pgoutput", false).unwrap();
    let mut tx = db.begin().unwrap();
    for g in 0..3000 {
        tx.insert(&t, &[Value::Int4(g), Value::Text(format!("row {g}"))]).unwrap();
    }
    tx.truncate(&["t"], settledb::TruncateOptions::default()).unwrap();
    for g in 0..3000 {
        tx.insert(&t, &[Value::Int4(g), Value::Text(format!("again {g}"))]).unwrap();
    }
    tx.commit().unwrap();
    let ours = settledb_run(&db, &runs[0]);
    let (ours_u, ours_n) = unframed(&ours);
    let (pg_u, pg_n) = unframed(&pg[0]);
    assert_eq!(ours_n, pg_n, "streamed transactions");
    // After a TRUNCATE, PostgreSQL sends the Relation message again before it, and again in
    // every later block (the transaction's invalidations run after each block): where those
    // fall follows each engine's block boundaries, so Relation messages are compared apart.
    for u in [&ours_u, &pg_u] {
        let at = u.iter().position(|l| l == "TRUNCATE T0 flags 0 (public.t)").expect("a T message");
        assert!(u[0].starts_with("RELATION T0 public.t") && u[at - 1].starts_with("RELATION T0 public.t"), "{u:?}");
    }
    let no_rel = |u: &[String]| u.iter().filter(|l| !l.starts_with("RELATION")).cloned().collect::<Vec<_>>();
    assert_eq!(no_rel(&ours_u), no_rel(&pg_u), "settledb's messages, then PostgreSQL 15's, framing taken out");
    db.close().unwrap();
}
