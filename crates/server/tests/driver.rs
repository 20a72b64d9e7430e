//! A Rust driver (tokio-postgres, binary parameters and results in the extended protocol)
//! against the server: types round-trip, errors carry PostgreSQL's SQLSTATEs, a client that
//! disconnects mid-transaction is rolled back, REPEATABLE READ conflicts fail with 40001, and
//! malformed protocol bytes never take the server down or disturb other sessions.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, UNIX_EPOCH};

use common::TestServer;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls};

async fn connect(s: &TestServer) -> Client {
    let (client, conn) = tokio_postgres::connect(&s.conn_string(), NoTls).await.expect("connect");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

fn code(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_round_trip_in_binary() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute(
        "create table ty (id int4 primary key, a int2, b int8, f float8, t text, v varchar(5), ok bool, raw bytea, at timestamp, n numeric(6,2), d date)",
    )
    .await
    .unwrap();
    let at = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
    let n = c
        .execute(
            "insert into ty (id, a, b, f, t, v, ok, raw, at) values ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[&1i32, &-7i16, &(1i64 << 40), &2.5f64, &"héllo", &"abc", &true, &vec![0u8, 255, 10], &at],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    let row = c.query_one("select a, b, f, t, v, ok, raw, at from ty where id = $1", &[&1i32]).await.unwrap();
    assert_eq!(row.get::<_, i16>(0), -7);
    assert_eq!(row.get::<_, i64>(1), 1 << 40);
    assert_eq!(row.get::<_, f64>(2), 2.5);
    assert_eq!(row.get::<_, String>(3), "héllo");
    assert_eq!(row.get::<_, String>(4), "abc");
    assert!(row.get::<_, bool>(5));
    assert_eq!(row.get::<_, Vec<u8>>(6), vec![0u8, 255, 10]);
    assert_eq!(row.get::<_, std::time::SystemTime>(7), at);
    // Describe reports the columns' types, so drivers pick their decoders.
    let st = c.prepare("select id, a, b, v, at from ty where id = $1").await.unwrap();
    let types: Vec<Type> = st.columns().iter().map(|c| c.type_().clone()).collect();
    assert_eq!(types, vec![Type::INT4, Type::INT2, Type::INT8, Type::VARCHAR, Type::TIMESTAMP]);
    assert_eq!(st.params(), &[Type::INT4]);
    // numeric and date in text (the simple protocol).
    c.batch_execute("update ty set n = 1234.5, d = '2024-02-29' where id = 1").await.unwrap();
    let rows = c.simple_query("select n, d from ty").await.unwrap();
    let tokio_postgres::SimpleQueryMessage::Row(r) = &rows[1] else { panic!("{rows:?}") };
    assert_eq!((r.get(0), r.get(1)), (Some("1234.50"), Some("2024-02-29")));
    let e = c.batch_execute("update ty set n = 123456 where id = 1").await.unwrap_err();
    assert_eq!(code(&e), "22003");
    let e = c.batch_execute("insert into ty (id, v) values (2, 'toolong')").await.unwrap_err();
    assert_eq!(code(&e), "22001");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_sqlstates() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute("create table e (id int primary key, x int)").await.unwrap();
    c.execute("insert into e values (1, 1)", &[]).await.unwrap();
    let cases: &[(&str, &SqlState)] = &[
        ("insert into e values (1, 2)", &SqlState::UNIQUE_VIOLATION),
        ("select * from nope", &SqlState::UNDEFINED_TABLE),
        ("select nope from e", &SqlState::UNDEFINED_COLUMN),
        ("select * from e where id = 'one'", &SqlState::INVALID_TEXT_REPRESENTATION),
        ("selec 1", &SqlState::SYNTAX_ERROR),
        ("create table e (id int)", &SqlState::DUPLICATE_TABLE),
        ("lock table e", &SqlState::FEATURE_NOT_SUPPORTED),
        ("select * from e, e as f", &SqlState::FEATURE_NOT_SUPPORTED),
        ("insert into e values (null, 1)", &SqlState::NOT_NULL_VIOLATION),
        ("select 1 / 0", &SqlState::DIVISION_BY_ZERO),
    ];
    for (sql, want) in cases {
        let e = c.simple_query(sql).await.unwrap_err();
        assert_eq!(e.code(), Some(*want), "{sql}: {e}");
    }
    // A parameter whose text is not of the type it is compared with.
    let st = c.prepare_typed("select x from e where id = $1", &[Type::TEXT]).await.unwrap();
    let e = c.query(&st, &[&"abc"]).await.unwrap_err();
    assert_eq!(code(&e), "22P02");
    // After an error a block accepts only ROLLBACK.
    c.batch_execute("begin").await.unwrap();
    assert!(c.batch_execute("insert into e values (1, 9)").await.is_err());
    let e = c.batch_execute("select 1").await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::IN_FAILED_SQL_TRANSACTION));
    c.batch_execute("rollback").await.unwrap();
    assert_eq!(c.query_one("select count(*) from e", &[]).await.unwrap().get::<_, i64>(0), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_isolate_and_disconnects_roll_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let a = connect(&s).await;
    a.batch_execute("create table acct (id int primary key, bal int)").await.unwrap();
    a.batch_execute("insert into acct values (1, 100), (2, 100)").await.unwrap();

    // A transaction left open by a client that goes away is rolled back: its uncommitted key
    // stops blocking a second insert of the same key.
    {
        let gone = connect(&s).await;
        gone.batch_execute("begin; insert into acct values (3, 0)").await.unwrap();
    } // dropping the client closes its connection
    a.execute("insert into acct values (3, 7)", &[]).await.unwrap();
    assert_eq!(a.query_one("select bal from acct where id = 3", &[]).await.unwrap().get::<_, i32>(0), 7);

    // READ COMMITTED: a concurrent committed update is followed, none is lost.
    let b = connect(&s).await;
    a.batch_execute("begin").await.unwrap();
    a.execute("update acct set bal = bal + 1 where id = 1", &[]).await.unwrap();
    let upd = {
        let b2 = connect(&s).await;
        tokio::spawn(async move { b2.execute("update acct set bal = bal + 10 where id = 1", &[]).await })
    };
    a.batch_execute("commit").await.unwrap();
    upd.await.unwrap().unwrap();
    assert_eq!(b.query_one("select bal from acct where id = 1", &[]).await.unwrap().get::<_, i32>(0), 111);

    // REPEATABLE READ: updating a row changed since the snapshot fails with 40001.
    a.batch_execute("begin isolation level repeatable read").await.unwrap();
    assert_eq!(a.query_one("select bal from acct where id = 2", &[]).await.unwrap().get::<_, i32>(0), 100);
    b.execute("update acct set bal = 0 where id = 2", &[]).await.unwrap();
    assert_eq!(a.query_one("select bal from acct where id = 2", &[]).await.unwrap().get::<_, i32>(0), 100);
    let e = a.execute("update acct set bal = bal - 1 where id = 2", &[]).await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::T_R_SERIALIZATION_FAILURE));
    a.batch_execute("rollback").await.unwrap();

    // A statement that does not parse fails the block like any error, in the simple protocol
    // and at Parse in the extended one: nothing after it runs, and COMMIT rolls back.
    for extended in [false, true] {
        a.batch_execute("begin").await.unwrap();
        a.execute("insert into acct values (4, 4)", &[]).await.unwrap();
        let e = if extended {
            a.prepare("selec 1").await.map(|_| ()).unwrap_err()
        } else {
            a.batch_execute("selec 1").await.unwrap_err()
        };
        assert_eq!(code(&e), "42601", "{e}");
        let e = a.execute("insert into acct values (5, 5)", &[]).await.unwrap_err();
        assert_eq!(code(&e), "25P02", "{e}");
        a.batch_execute("commit").await.unwrap();
        let n: i64 = a.query_one("select count(*) from acct where id >= 4", &[]).await.unwrap().get(0);
        assert_eq!(n, 0, "extended protocol: {extended}");
    }
}

/// Sends raw bytes on a fresh connection; returns what the server answered (it may close).
fn raw_exchange(s: &TestServer, bytes: &[u8]) -> Vec<u8> {
    let mut sock = std::net::TcpStream::connect(s.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = sock.write_all(bytes);
    let _ = sock.shutdown(std::net::Shutdown::Write);
    let mut out = Vec::new();
    let _ = sock.read_to_end(&mut out);
    out
}

fn startup() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&196608i32.to_be_bytes());
    for kv in ["user", "postgres", "database", "postgres"] {
        body.extend_from_slice(kv.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut m = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    m.extend(body);
    m
}

fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_never_hurts_other_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute("create table g (id int primary key); insert into g values (1)").await.unwrap();
    let cases: Vec<Vec<u8>> = vec![
        b"\xde\xad\xbe\xef garbage before any startup".to_vec(),
        vec![0, 0, 0, 3],
        vec![0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0],
        [startup(), message(b'Q', b"select \xff\xfe from g\0")].concat(),
        [startup(), message(b'Q', b"no nul terminator")].concat(),
        [startup(), vec![b'Q', 0x7f, 0xff, 0xff, 0xff, b's']].concat(),
        [startup(), message(b'P', b"\0select $1\0\0\x05"), message(b'S', b"")].concat(),
        [startup(), message(b'B', b"nope\0nope\0\0\0\0\0\0\0"), message(b'S', b"")].concat(),
        [startup(), message(b'Z', b"??"), message(b'd', b"copy data out of nowhere")].concat(),
        [startup(), message(b'Q', b"copy g from stdin\0"), message(b'd', b"x\n\xff\n"), message(b'c', b"")].concat(),
    ];
    for bytes in cases {
        let answer = tokio::task::spawn_blocking({
            let s_addr = s.addr;
            move || {
                let probe = TestServer::probe(s_addr);
                raw_exchange(&probe, &bytes)
            }
        })
        .await
        .unwrap();
        let _ = answer; // an ErrorResponse or a closed connection: both are fine
                        // The first session still works, and so does a new one.
        let n: i64 = c.query_one("select count(*) from g", &[]).await.unwrap().get(0);
        assert_eq!(n, 1);
        let d = connect(&s).await;
        d.simple_query("select 1").await.unwrap();
    }
    // A bad-UTF-8 query on an authenticated connection gets an ErrorResponse with 22021.
    let answer = raw_exchange(&s, &[startup(), message(b'Q', b"select '\xc3\x28'\0")].concat());
    assert!(answer.windows(6).any(|w| w == b"C22021"), "no invalid-encoding error: {answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_password_is_required_when_set() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start_with_password(dir.path(), Some("s3cret"));
    let good = format!("{} password=s3cret", s.conn_string());
    let (c, conn) = tokio_postgres::connect(&good, NoTls).await.expect("the right password is accepted");
    tokio::spawn(conn);
    assert_eq!(c.query_one("select 1 + 1", &[]).await.unwrap().get::<_, i32>(0), 2);
    let bad = format!("{} password=wrong", s.conn_string());
    assert!(tokio_postgres::connect(&bad, NoTls).await.is_err(), "a wrong password is refused");
    assert!(tokio_postgres::connect(&s.conn_string(), NoTls).await.is_err(), "no password is refused");
}

/// Replication slots over SQL: `pg_create_logical_replication_slot`, the
/// `pg_replication_slots` view with PostgreSQL's columns, `pg_stat_replication_slots` and
/// `pg_stat_reset_replication_slot`, `pg_replication_slot_advance`,
/// `pg_drop_replication_slot`, and PostgreSQL's SQLSTATEs and hints for bad input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_slots_over_sql() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start_with_settings(dir.path(), &[("wal_level", "logical"), ("max_replication_slots", "1")]);
    let c = connect(&s).await;
    let created: String =
        c.query_one("select pg_create_logical_replication_slot('s1', 'pgoutput')", &[]).await.unwrap().get(0);
    assert!(created.starts_with("(s1,0/") && created.ends_with(')'), "{created}");
    let row = c
        .query_one(
            "select slot_name, plugin, slot_type, database, temporary, active, xmin, confirmed_flush_lsn, wal_status, \
             two_phase from pg_replication_slots",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "s1");
    assert_eq!(row.get::<_, String>(1), "pgoutput");
    assert_eq!(row.get::<_, String>(2), "logical");
    assert_eq!(row.get::<_, String>(3), "settledb");
    assert!(!row.get::<_, bool>(4) && !row.get::<_, bool>(5) && !row.get::<_, bool>(9));
    assert_eq!(row.get::<_, Option<i64>>(6), None);
    assert_eq!(format!("(s1,{})", row.get::<_, String>(7)), created);
    assert_eq!(row.get::<_, String>(8), "reserved");

    let row = c
        .query_one("select slot_name, spill_txns, total_bytes, stats_reset from pg_stat_replication_slots", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "s1");
    assert_eq!((row.get::<_, i64>(1), row.get::<_, i64>(2)), (0, 0));
    assert!(row.get::<_, Option<std::time::SystemTime>>(3).is_none(), "never reset: NULL");
    c.query_one("select pg_stat_reset_replication_slot('s1')", &[]).await.unwrap();
    let reset = c.query_one("select stats_reset from pg_stat_replication_slots", &[]).await.unwrap();
    assert!(reset.get::<_, Option<std::time::SystemTime>>(0).is_some());
    let e = c.query_one("select pg_stat_reset_replication_slot('nope')", &[]).await.unwrap_err();
    assert_eq!(code(&e), "42704");

    let e = c.query_one("select pg_create_logical_replication_slot('s2', 'pgoutput')", &[]).await.unwrap_err();
    assert_eq!(code(&e), "53400");
    let db = e.as_db_error().unwrap();
    assert_eq!(db.message(), "all replication slots are in use");
    assert_eq!(db.hint(), Some("Free one or increase max_replication_slots."));
    let e = c.query_one("select pg_create_logical_replication_slot('S-1', 'pgoutput')", &[]).await.unwrap_err();
    assert_eq!(code(&e), "42602");
    let e = c.query_one("select pg_create_logical_replication_slot('s1', 'pgoutput')", &[]).await.unwrap_err();
    assert_eq!(code(&e), "42710");

    c.batch_execute("create table t (id int4 primary key); insert into t values (1), (2); checkpoint").await.unwrap();
    let advanced: String =
        c.query_one("select pg_replication_slot_advance('s1', 'FFFFFFFF/0')", &[]).await.unwrap().get(0);
    assert!(advanced > created, "{advanced} after {created}");
    // The WAL position, as pg_current_wal_lsn() prints it: past what the slot was advanced to.
    let lsn: String = c.query_one("select pg_current_wal_lsn()", &[]).await.unwrap().get(0);
    let parse = |s: &str| {
        let (hi, lo) = s.trim_matches(|c| c == '(' || c == ')').rsplit(',').next().unwrap().split_once('/').unwrap();
        (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
    };
    assert!(parse(&lsn) >= parse(&advanced), "{lsn} before {advanced}");
    let e = c.query_one("select pg_replication_slot_advance('s1', '0/1')", &[]).await.unwrap_err();
    assert_eq!(code(&e), "22023");
    c.query_one("select pg_drop_replication_slot('s1')", &[]).await.unwrap();
    // In a transaction that wrote, creation would wait for itself: PostgreSQL's error.
    c.batch_execute("begin; insert into t values (3)").await.unwrap();
    let e = c.query_one("select pg_create_logical_replication_slot('s3', 'pgoutput')", &[]).await.unwrap_err();
    assert_eq!(code(&e), "25001");
    c.batch_execute("rollback").await.unwrap();
    let e = c.query_one("select pg_drop_replication_slot('s1')", &[]).await.unwrap_err();
    assert_eq!(code(&e), "42704");
    assert!(c.query("select * from pg_replication_slots", &[]).await.unwrap().is_empty());
    drop(c);
    s.stop();
}

/// Waits until `pg_locks` shows `n` lock requests not granted (a session blocked).
async fn until_waiting(c: &Client, n: i64) {
    let start = std::time::Instant::now();
    loop {
        let w: i64 = c.query_one("select count(*) from pg_locks where not granted", &[]).await.unwrap().get(0);
        if w >= n {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no session blocked");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Lock failures over the wire: a row-lock cycle is 40P01 to the session that closes it,
/// `SET lock_timeout` ends a wait with 55P03, and `pg_locks` shows who holds and waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlock_and_lock_timeout_have_their_sqlstates() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let a = connect(&s).await;
    let b = connect(&s).await;
    let watch = connect(&s).await;
    a.batch_execute("create table acct (id int primary key, bal int)").await.unwrap();
    a.batch_execute("insert into acct values (1, 100), (2, 100)").await.unwrap();

    a.batch_execute("begin; update acct set bal = bal + 1 where id = 1").await.unwrap();
    b.batch_execute("begin; update acct set bal = bal + 1 where id = 2").await.unwrap();
    let modes: Vec<String> = watch
        .query("select mode from pg_locks where locktype = 'relation' order by pid", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(modes, ["RowExclusiveLock", "RowExclusiveLock"]);
    let a_waits = tokio::spawn(async move {
        let r = a.execute("update acct set bal = bal + 1 where id = 2", &[]).await;
        (a, r)
    });
    until_waiting(&watch, 1).await;
    let e = b.execute("update acct set bal = bal + 1 where id = 1", &[]).await.unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::T_R_DEADLOCK_DETECTED), "{e}");
    b.batch_execute("rollback").await.unwrap();
    let (a, r) = a_waits.await.unwrap();
    r.unwrap();
    a.batch_execute("commit").await.unwrap();

    a.batch_execute("begin; update acct set bal = 0 where id = 1").await.unwrap();
    b.batch_execute("set lock_timeout = '50ms'").await.unwrap();
    let e = b.execute("update acct set bal = 5 where id = 1", &[]).await.unwrap_err();
    assert_eq!(code(&e), "55P03");
    assert_eq!(e.as_db_error().unwrap().message(), "canceling statement due to lock timeout");
    a.batch_execute("commit").await.unwrap();
    let total: i64 = watch.query_one("select sum(bal) from acct", &[]).await.unwrap().get(0);
    assert_eq!(total, 101);
}

async fn count(c: &Client, t: &str) -> i64 {
    c.query_one(format!("select count(*) from {t}").as_str(), &[]).await.unwrap().get(0)
}

/// TRUNCATE over SQL is the engine's: rows and index entries go (the primary key holds on the
/// empty table), ROLLBACK brings them back, the options parse, a system
/// catalog is refused, and a session reading the table makes TRUNCATE wait (55P03 under
/// `lock_timeout`; seen in `pg_locks` otherwise) while the reader keeps its rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_over_sql() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let a = connect(&s).await;
    let b = connect(&s).await;
    a.batch_execute("create table x (id int primary key, v text); create table y (id int primary key)").await.unwrap();
    let rows: Vec<String> = (1..=500).map(|i| format!("({i}, 'v')")).collect();
    a.batch_execute(&format!("insert into x values {}; insert into y values (1), (2)", rows.join(", "))).await.unwrap();

    a.batch_execute("begin; truncate x; insert into x values (1, 'new')").await.unwrap();
    assert_eq!(count(&a, "x").await, 1, "the transaction sees its own rows after the TRUNCATE");
    a.batch_execute("rollback").await.unwrap();
    assert_eq!(count(&a, "x").await, 500);
    a.batch_execute("begin; truncate table only x, y restart identity cascade; rollback").await.unwrap();
    assert_eq!((count(&a, "x").await, count(&a, "y").await), (500, 2));

    a.batch_execute("truncate x, y continue identity restrict").await.unwrap();
    assert_eq!((count(&a, "x").await, count(&a, "y").await), (0, 0));
    a.batch_execute("insert into x values (7, 'seven')").await.unwrap();
    let e = a.execute("insert into x values (7, 'again')", &[]).await.unwrap_err();
    assert_eq!(code(&e), "23505", "{e}");
    let v: String = a.query_one("select v from x where id = 7", &[]).await.unwrap().get(0);
    assert_eq!(v, "seven");
    let e = a.batch_execute("truncate pg_class").await.unwrap_err();
    assert_eq!(code(&e), "42501", "{e}");
    let e = a.batch_execute("truncate nosuch").await.unwrap_err();
    assert_eq!(code(&e), "42P01", "{e}");

    // A reader holds its lock to its end: TRUNCATE waits, or fails under lock_timeout.
    b.batch_execute("begin").await.unwrap();
    assert_eq!(count(&b, "x").await, 1);
    a.batch_execute("set lock_timeout = '50ms'").await.unwrap();
    let e = a.batch_execute("truncate x").await.unwrap_err();
    assert_eq!(code(&e), "55P03", "{e}");
    a.batch_execute("set lock_timeout = 0").await.unwrap();
    let watch = connect(&s).await;
    let waits = tokio::spawn(async move { a.batch_execute("truncate x").await });
    until_waiting(&watch, 1).await;
    assert_eq!(count(&b, "x").await, 1, "the reader still reads");
    b.batch_execute("commit").await.unwrap();
    waits.await.unwrap().unwrap();
    assert_eq!(count(&watch, "x").await, 0);
}
