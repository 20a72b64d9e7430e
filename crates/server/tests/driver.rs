//! A Rust driver (tokio-postgres, binary parameters and results in the extended protocol)
//! against the server: types round-trip, errors carry PostgreSQL's SQLSTATEs, a client that
//! disconnects mid-transaction is rolled back, REPEATABLE READ conflicts fail with 40001, and
//! malformed protocol bytes never take the server down or disturb other sessions. The session
//! features: savepoints (and ROLLBACK TO out of a failed block, with ReadyForQuery's status),
//! `max_connections` (53300), `statement_timeout` and cancel requests (57014),
//! `idle_in_transaction_session_timeout` (FATAL 25P03, the transaction rolled back) and
//! `idle_session_timeout` (FATAL 57P05).

mod common;

use std::io::{Read, Write};
use std::time::{Duration, UNIX_EPOCH};

use common::{code, connect, TestServer};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls};

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

/// A numeric in its binary form, as it travels: tokio-postgres has no numeric type of its own,
/// and asks for every result column in binary.
#[derive(Debug, PartialEq)]
struct RawNumeric(Vec<u8>);

impl<'a> tokio_postgres::types::FromSql<'a> for RawNumeric {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<RawNumeric, Box<dyn std::error::Error + Sync + Send>> {
        Ok(RawNumeric(raw.to_vec()))
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

impl tokio_postgres::types::ToSql for RawNumeric {
    fn to_sql(
        &self,
        _: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(tokio_postgres::types::IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }

    tokio_postgres::types::to_sql_checked!();
}

/// `numeric_send`'s bytes: ndigits, weight, sign, dscale, then the base-10000 digits.
fn numeric(weight: i16, negative: bool, dscale: i16, digits: &[i16]) -> RawNumeric {
    let mut v = Vec::new();
    for x in [digits.len() as i16, weight, if negative { 0x4000 } else { 0 }, dscale] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    for d in digits {
        v.extend_from_slice(&d.to_be_bytes());
    }
    RawNumeric(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numerics_travel_in_binary() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute("create table money (id int4 primary key, n numeric(12,2))").await.unwrap();
    // -123.45, and 1.005 (three places: the column rounds it to 1.01, as PostgreSQL does).
    let insert = "insert into money values ($1, $2)";
    c.execute(insert, &[&1i32, &numeric(0, true, 2, &[123, 4500])]).await.unwrap();
    c.execute(insert, &[&2i32, &numeric(0, false, 3, &[1, 50])]).await.unwrap();
    let rows = c.query("select n, n::text from money order by id", &[]).await.unwrap();
    let got: Vec<(RawNumeric, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        got,
        vec![
            (numeric(0, true, 2, &[123, 4500]), "-123.45".to_string()),
            (numeric(0, false, 2, &[1, 100]), "1.01".to_string()),
        ]
    );
    // A parameter compared with the column, and an aggregate's numeric result, in binary too.
    let row = c.query_one("select sum(n) from money where n > $1", &[&numeric(0, false, 0, &[])]).await.unwrap();
    assert_eq!(row.get::<_, RawNumeric>(0), numeric(0, false, 2, &[1, 100]));
    // NaN has no place in settledb's numeric; a malformed value is PostgreSQL's 22P03.
    let nan = RawNumeric(vec![0, 0, 0, 0, 0xC0, 0, 0, 0]);
    assert_eq!(code(&c.execute(insert, &[&3i32, &nan]).await.unwrap_err()), "0A000");
    assert_eq!(code(&c.execute(insert, &[&3i32, &numeric(0, false, 0, &[10_000])]).await.unwrap_err()), "22P03");
    assert_eq!(code(&c.execute(insert, &[&3i32, &numeric(3, false, 0, &[1])]).await.unwrap_err()), "22003");
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
        ("select count(*) from e for update", &SqlState::FEATURE_NOT_SUPPORTED),
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
    // Messages that break their grammar, which pgwire 0.42 would read past (a Bind promising
    // a parameter it does not hold panicked its decoder): FATAL 08P01, and no session thread
    // panics.
    static SESSION_PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name().is_some_and(|n| n.starts_with("settle-session")) {
            SESSION_PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        previous(info);
    }));
    for bytes in [
        [startup(), message(b'B', b"\0s\0\x00\x00\x00\x01"), message(b'S', b"")].concat(),
        [startup(), message(b'B', b"\0s\0\x00\x00\x00\x01\x00\x00\x01\x00ab\x00\x00")].concat(),
        [startup(), message(b'E', b"\0")].concat(),
        [startup(), message(b'D', b"Xs\0")].concat(),
        [startup(), message(b'P', b"s\0select 1\0\x00\x03\x00\x00\x00\x17")].concat(),
    ] {
        let answer = raw_exchange(&s, &bytes);
        assert!(answer.windows(6).any(|w| w == b"C08P01"), "no protocol violation error: {answer:?}");
    }
    assert_eq!(SESSION_PANICS.load(std::sync::atomic::Ordering::SeqCst), 0, "a session thread panicked");
    let n: i64 = c.query_one("select count(*) from g", &[]).await.unwrap().get(0);
    assert_eq!(n, 1);
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

/// A function that is not set-returning, called in FROM, is a one-row relation as in
/// PostgreSQL: `SELECT * FROM pg_create_logical_replication_slot(...)` (the documentation's
/// form) has the record's columns, a scalar function one column named after it or its alias.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_in_from_are_one_row_relations() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start_with_settings(dir.path(), &[("wal_level", "logical")]);
    let c = connect(&s).await;
    let names = |r: &tokio_postgres::Row| r.columns().iter().map(|c| c.name().to_string()).collect::<Vec<_>>();
    let rows = c.query("select * from pg_create_logical_replication_slot('s1', 'test_decoding')", &[]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(names(&rows[0]), ["slot_name", "lsn"]);
    assert_eq!(rows[0].get::<_, String>(0), "s1");
    let lsn: String = rows[0].get(1);
    assert!(lsn.starts_with("0/"), "{lsn}");
    let listed: String = c.query_one("select slot_name from pg_replication_slots", &[]).await.unwrap().get(0);
    assert_eq!(listed, "s1", "the slot was made once");
    let row = c
        .query_one("select slot_name, end_lsn from pg_replication_slot_advance('s1', pg_current_wal_lsn())", &[])
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "s1");
    let row = c
        .query_one("select * from pg_replication_slot_advance('s1', pg_current_wal_lsn()) as a (s, e)", &[])
        .await
        .unwrap();
    assert_eq!(names(&row), ["s", "e"]);

    let row = c.query_one("select * from txid_current()", &[]).await.unwrap();
    assert_eq!(names(&row), ["txid_current"]);
    assert!(row.get::<_, i64>(0) > 0);
    let row = c.query_one("select x + 1 from txid_current() x", &[]).await.unwrap();
    assert!(row.get::<_, i64>(0) > 1, "an alias names the column");
    let row = c.query_one("select * from pg_current_wal_lsn() as t (l)", &[]).await.unwrap();
    assert_eq!(names(&row), ["l"]);
    let e = c.query_one("select * from txid_current() as t (a, b)", &[]).await.unwrap_err();
    assert_eq!(code(&e), "42P10");
    let e = c.query_one("select * from no_such_function(1)", &[]).await.unwrap_err();
    assert_eq!(code(&e), "42883");

    let rows = c.query("select * from pg_drop_replication_slot('s1')", &[]).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(c.query("select * from pg_replication_slots", &[]).await.unwrap().is_empty());
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

// ---- Session features: savepoints, max_connections, timeouts, cancel requests ----

/// A client whose connection task's result the test can await (a FATAL error from the
/// server ends that task with the error).
async fn connect_watched(s: &TestServer) -> (Client, tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>) {
    let (client, conn) = tokio_postgres::connect(&s.conn_string(), NoTls).await.expect("connect");
    (client, tokio::spawn(conn))
}

async fn ids(c: &Client, table: &str) -> Vec<i32> {
    let rows = c.query(&format!("select id from {table} order by id"), &[]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoints_keep_earlier_rows_and_drop_later_ones() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let mut c = connect(&s).await;
    c.batch_execute("create table sp (id int primary key)").await.unwrap();

    // A savepoint set before the block's first statement, one after; RELEASE keeps the rows.
    c.batch_execute(
        "begin; savepoint a; insert into sp values (1); savepoint b; insert into sp values (2);
         rollback to savepoint b; insert into sp values (3); release a; commit",
    )
    .await
    .unwrap();
    assert_eq!(ids(&c, "sp").await, [1, 3]);

    // The extended protocol, and ROLLBACK TO keeps the savepoint open for another round.
    c.batch_execute("begin").await.unwrap();
    c.execute("insert into sp values (4)", &[]).await.unwrap();
    c.execute("savepoint s1", &[]).await.unwrap();
    c.execute("insert into sp values (5)", &[]).await.unwrap();
    c.execute("rollback to s1", &[]).await.unwrap();
    c.execute("insert into sp values (6)", &[]).await.unwrap();
    c.execute("rollback transaction to savepoint s1", &[]).await.unwrap();
    c.execute("release savepoint s1", &[]).await.unwrap();
    c.batch_execute("commit").await.unwrap();
    assert_eq!(ids(&c, "sp").await, [1, 3, 4]);

    // tokio-postgres's nested transactions are savepoints.
    let mut tx = c.transaction().await.unwrap();
    tx.execute("insert into sp values (7)", &[]).await.unwrap();
    {
        let inner = tx.savepoint("inner").await.unwrap();
        inner.execute("insert into sp values (8)", &[]).await.unwrap();
        inner.rollback().await.unwrap();
    }
    {
        let inner = tx.savepoint("kept").await.unwrap();
        inner.execute("insert into sp values (9)", &[]).await.unwrap();
        inner.commit().await.unwrap();
    }
    tx.commit().await.unwrap();
    assert_eq!(ids(&c, "sp").await, [1, 3, 4, 7, 9]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_to_savepoint_recovers_a_failed_block() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute("create table r (id int primary key); insert into r values (1)").await.unwrap();
    for extended in [false, true] {
        c.batch_execute("begin; insert into r values (10); savepoint s; insert into r values (11)").await.unwrap();
        let e = c.batch_execute("insert into r values (1)").await.unwrap_err();
        assert_eq!(code(&e), "23505");
        let e = c.batch_execute("select 1").await.unwrap_err();
        assert_eq!(code(&e), "25P02");
        // RELEASE is not a way out of a failed block.
        let e = c.batch_execute("release s").await.unwrap_err();
        assert_eq!(code(&e), "25P02");
        if extended {
            c.execute("rollback to savepoint s", &[]).await.unwrap();
        } else {
            c.batch_execute("rollback to savepoint s").await.unwrap();
        }
        c.batch_execute("insert into r values (12); commit").await.unwrap();
        assert_eq!(ids(&c, "r").await, [1, 10, 12], "extended protocol: {extended}");
        c.batch_execute("delete from r where id > 1").await.unwrap();
    }
    // A savepoint set before the error that is not the one named stays failed (3B001).
    c.batch_execute("begin; savepoint s").await.unwrap();
    assert!(c.batch_execute("insert into r values (1)").await.is_err());
    let e = c.batch_execute("rollback to savepoint nosuch").await.unwrap_err();
    assert_eq!(code(&e), "3B001");
    let e = c.batch_execute("select 1").await.unwrap_err();
    assert_eq!(code(&e), "25P02");
    c.batch_execute("rollback to s; rollback").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoint_errors_have_postgresql_sqlstates() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    for (sql, msg) in [
        ("savepoint a", "SAVEPOINT can only be used in transaction blocks"),
        ("release savepoint a", "RELEASE SAVEPOINT can only be used in transaction blocks"),
        ("rollback to savepoint a", "ROLLBACK TO SAVEPOINT can only be used in transaction blocks"),
    ] {
        let e = c.batch_execute(sql).await.unwrap_err();
        assert_eq!(code(&e), "25P01", "{sql}");
        assert_eq!(e.as_db_error().unwrap().message(), msg);
    }
    c.batch_execute("begin").await.unwrap();
    let e = c.batch_execute("release x").await.unwrap_err();
    assert_eq!(code(&e), "3B001");
    assert_eq!(e.as_db_error().unwrap().message(), "savepoint \"x\" does not exist");
    c.batch_execute("rollback").await.unwrap();
    // Released savepoints and those after a ROLLBACK TO target are gone.
    c.batch_execute("begin; savepoint a; savepoint b; release a").await.unwrap();
    let e = c.batch_execute("rollback to b").await.unwrap_err();
    assert_eq!(code(&e), "3B001");
    c.batch_execute("rollback").await.unwrap();
    c.batch_execute("begin; select 1; savepoint a; savepoint b; rollback work to savepoint a").await.unwrap();
    let e = c.batch_execute("release b").await.unwrap_err();
    assert_eq!(code(&e), "3B001");
    c.batch_execute("rollback").await.unwrap();
    // Isolation is chosen before any savepoint.
    c.batch_execute("begin; savepoint a").await.unwrap();
    let e = c.batch_execute("set transaction isolation level repeatable read").await.unwrap_err();
    assert_eq!(code(&e), "25001");
    c.batch_execute("rollback").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_refuses_one_more_with_53300() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start_with_max_connections(dir.path(), 3);
    let a = connect(&s).await;
    let b = connect(&s).await;
    let c = connect(&s).await;
    let e = tokio_postgres::connect(&s.conn_string(), NoTls).await.map(|_| ()).unwrap_err();
    assert_eq!(code(&e), "53300", "{e}");
    assert_eq!(e.as_db_error().unwrap().message(), "sorry, too many clients already");
    assert_eq!(e.as_db_error().unwrap().severity(), "FATAL");
    for x in [&a, &b, &c] {
        assert_eq!(x.query_one("select 1 + 1", &[]).await.unwrap().get::<_, i32>(0), 2);
    }
    let shown: String = a.query_one("show max_connections", &[]).await.unwrap().get(0);
    assert_eq!(shown, "3");
    let e = a.batch_execute("set max_connections = 5").await.unwrap_err();
    assert_eq!(code(&e), "55P02");
    a.batch_execute("reset all").await.unwrap();
    let shown: String = a.query_one("show max_connections", &[]).await.unwrap().get(0);
    assert_eq!(shown, "3", "RESET ALL keeps the server's value");
    // A full server still takes cancel requests (they use no slot).
    c.cancel_token().cancel_query(NoTls).await.unwrap();
    // A closed connection gives its slot back (once its session has ended).
    drop(c);
    let d = loop {
        match tokio_postgres::connect(&s.conn_string(), NoTls).await {
            Ok((client, conn)) => {
                tokio::spawn(conn);
                break client;
            }
            Err(e) => {
                assert_eq!(code(&e), "53300", "{e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(d.query_one("select 3", &[]).await.unwrap().get::<_, i32>(0), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_timeout_cancels_a_long_statement() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    let show = |v: &'static str| {
        let c = &c;
        async move { c.query_one(&format!("show {v}"), &[]).await.unwrap().get::<_, String>(0) }
    };
    assert_eq!(show("statement_timeout").await, "0");
    for (set, shown) in [("'5s'", "5s"), ("100", "100ms"), ("'1min'", "1min"), ("'1.5s'", "1500ms")] {
        c.batch_execute(&format!("set statement_timeout = {set}")).await.unwrap();
        assert_eq!(show("statement_timeout").await, shown);
    }
    c.batch_execute("reset statement_timeout").await.unwrap();
    assert_eq!(show("statement_timeout").await, "0");
    c.batch_execute("set statement_timeout to '2h'; set statement_timeout to default").await.unwrap();
    assert_eq!(show("statement_timeout").await, "0");
    let e = c.batch_execute("set statement_timeout = 'soon'").await.unwrap_err();
    assert_eq!(code(&e), "22023");
    let e = c.batch_execute("set idle_in_transaction_session_timeout = -1").await.unwrap_err();
    assert_eq!(code(&e), "22023");

    c.batch_execute("set statement_timeout = '200ms'").await.unwrap();
    let e = c.batch_execute("select pg_sleep(60)").await.unwrap_err();
    assert_eq!(code(&e), "57014");
    assert_eq!(e.as_db_error().unwrap().message(), "canceling statement due to statement timeout");
    // Inside a block the timeout fails the block, as any error does.
    c.batch_execute("begin").await.unwrap();
    let e = c.query("select pg_sleep(60)", &[]).await.unwrap_err();
    assert_eq!(code(&e), "57014");
    let e = c.batch_execute("select 1").await.unwrap_err();
    assert_eq!(code(&e), "25P02");
    c.batch_execute("rollback").await.unwrap();

    // The executor's own loops check the clock too: a scan of 2^17 rows cannot finish in 1 ms.
    c.batch_execute("set statement_timeout = 0; create table big (a int); insert into big values (1)").await.unwrap();
    for _ in 0..17 {
        c.batch_execute("insert into big select a + 1 from big").await.unwrap();
    }
    c.batch_execute("set statement_timeout = '1ms'").await.unwrap();
    let e = c.query("select count(*) from big where a > 0", &[]).await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().message(), "canceling statement due to statement timeout");
    let e = c.batch_execute("update big set a = a + 1").await.unwrap_err();
    assert_eq!(code(&e), "57014");
    c.batch_execute("set statement_timeout = 0").await.unwrap();
    let n: i64 = c.query_one("select count(*) from big where a > 1", &[]).await.unwrap().get(0);
    assert_eq!(n, (1 << 17) - 1, "the timed-out UPDATE rolled back");

    // A wait for a row lock ends when the statement's time is up, with the same error.
    let other = connect(&s).await;
    other.batch_execute("create table lk (id int primary key, v int); insert into lk values (1, 0)").await.unwrap();
    other.batch_execute("begin; update lk set v = 1 where id = 1").await.unwrap();
    c.batch_execute("set statement_timeout = '200ms'").await.unwrap();
    let e = c.batch_execute("update lk set v = 2 where id = 1").await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().message(), "canceling statement due to statement timeout");
    other.batch_execute("commit").await.unwrap();
    c.batch_execute("update lk set v = v + 10 where id = 1").await.unwrap();
    assert_eq!(c.query_one("select v from lk", &[]).await.unwrap().get::<_, i32>(0), 11);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_request_stops_a_running_statement() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    let token = c.cancel_token();
    let running = tokio::spawn(async move {
        let r = c.batch_execute("select pg_sleep(120)").await;
        (c, r)
    });
    let (c, r) = cancel_until_finished(&token, running).await;
    let e = r.unwrap_err();
    assert_eq!(code(&e), "57014");
    assert_eq!(e.as_db_error().unwrap().message(), "canceling statement due to user request");
    // The session goes on.
    assert_eq!(c.query_one("select 5", &[]).await.unwrap().get::<_, i32>(0), 5);
}

/// A cancel request or `statement_timeout` stops a statement inside one engine call: a VACUUM
/// between its pages, a wait for a table's lock. Without the engine's interrupt checks the
/// VACUUM below (a 100 ms cost delay at every page) would run for minutes and the lock wait
/// would last until the holder commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_statement_timeout_stop_vacuum_and_lock_waits() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute(
        "create table v (id int primary key, pad text); \
         insert into v select g, 'a row padded to fill its page sooner, so the table has some pages' from generate_series(1, 20000) g; \
         update v set pad = 'y' where id % 10 = 0; \
         set vacuum_cost_delay = 100; set vacuum_cost_limit = 1",
    )
    .await
    .unwrap();

    c.batch_execute("set statement_timeout = '300ms'").await.unwrap();
    let e = c.batch_execute("vacuum v").await.unwrap_err();
    assert_eq!(e.as_db_error().map(|d| d.message()), Some("canceling statement due to statement timeout"), "{e}");
    c.batch_execute("set statement_timeout = 0").await.unwrap();

    let token = c.cancel_token();
    let running = tokio::spawn(async move {
        let r = c.batch_execute("vacuum (verbose) v").await;
        (c, r)
    });
    let (c, r) = cancel_until_finished(&token, running).await;
    let e = r.unwrap_err();
    assert_eq!(code(&e), "57014");
    assert_eq!(e.as_db_error().unwrap().message(), "canceling statement due to user request");
    // The session goes on, and a VACUUM left to run finishes the work.
    c.batch_execute("reset vacuum_cost_delay").await.unwrap();
    c.batch_execute("vacuum v").await.unwrap();
    let n: i64 =
        c.query_one("select n_dead_tup from pg_stat_user_tables where relname = 'v'", &[]).await.unwrap().get(0);
    assert_eq!(n, 0);

    // CREATE INDEX waits for a writer's lock on the table, and the timeout ends the wait
    // (the writer commits only after); the build that stopped leaves no index. (Stops
    // between the pages it reads: settledb's tests/locks.rs.)
    let writer = connect(&s).await;
    writer.batch_execute("begin; update v set pad = 'w' where id = 2").await.unwrap();
    c.batch_execute("set statement_timeout = '300ms'").await.unwrap();
    // Bounded, so that a wait the timeout cannot end fails the test rather than hang it.
    let create = tokio::time::timeout(Duration::from_secs(30), c.batch_execute("create index v_pad on v (pad)"));
    let e = create.await.expect("the wait for the table's lock ended").unwrap_err();
    assert_eq!(e.as_db_error().map(|d| d.message()), Some("canceling statement due to statement timeout"), "{e}");
    writer.batch_execute("commit").await.unwrap();
    c.batch_execute("set statement_timeout = 0; create index v_pad on v (pad)").await.unwrap();

    // A wait for another transaction's row (the engine's wait on its XID).
    let holder = connect(&s).await;
    holder.batch_execute("begin; update v set pad = 'held' where id = 1").await.unwrap();
    c.batch_execute("set statement_timeout = '300ms'").await.unwrap();
    let e = c.batch_execute("update v set pad = 'timed out' where id = 1").await.unwrap_err();
    assert_eq!(e.as_db_error().map(|d| d.message()), Some("canceling statement due to statement timeout"), "{e}");
    c.batch_execute("set statement_timeout = 0; set lock_timeout = 0").await.unwrap();
    let token = c.cancel_token();
    let waiting = tokio::spawn(async move {
        let r = c.batch_execute("update v set pad = 'cancelled' where id = 1").await;
        (c, r)
    });
    // The holder commits only after: a wait the cancel cannot end would succeed once it does,
    // failing the test, rather than hang it.
    let waiting = tokio::spawn(async move {
        let outcome = cancel_until_finished(&token, waiting).await;
        holder.batch_execute("commit").await.unwrap();
        outcome
    });
    let (c, r) = waiting.await.unwrap();
    let e = r.unwrap_err();
    assert_eq!(e.as_db_error().map(|d| d.message()), Some("canceling statement due to user request"), "{e}");
    let pad: String = c.query_one("select pad from v where id = 1", &[]).await.unwrap().get(0);
    assert_eq!(pad, "held");
}

/// Sends cancel requests for `running`'s statement until it ends, for at most 10 s (one that
/// arrives before the statement starts is forgotten, so they are sent until one lands); then
/// waits for it and returns what it gave.
async fn cancel_until_finished<T>(token: &tokio_postgres::CancelToken, running: tokio::task::JoinHandle<T>) -> T {
    for _ in 0..200 {
        if running.is_finished() {
            break;
        }
        token.cancel_query(NoTls).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.await.unwrap()
}

/// Reads one backend message: its tag and body.
fn read_message(sock: &mut std::net::TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 5];
    sock.read_exact(&mut head).unwrap();
    let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len - 4];
    sock.read_exact(&mut body).unwrap();
    (head[0], body)
}

/// Reads messages up to ReadyForQuery; returns the SQLSTATE of an ErrorResponse, if any.
fn until_ready(sock: &mut std::net::TcpStream) -> Option<String> {
    until_ready_status(sock).0
}

/// Reads messages up to ReadyForQuery: the SQLSTATE of an ErrorResponse, if any, and the
/// transaction status ReadyForQuery reports (`I`, `T` or `E`).
fn until_ready_status(sock: &mut std::net::TcpStream) -> (Option<String>, char) {
    let mut code = None;
    loop {
        match read_message(sock) {
            (b'Z', body) => return (code, body[0] as char),
            (b'E', body) => {
                let field = body.split(|&b| b == 0).find(|f| f.first() == Some(&b'C'));
                code = field.map(|f| String::from_utf8_lossy(&f[1..]).into_owned());
            }
            _ => {}
        }
    }
}

fn cancel_request(s: &TestServer, pid: i32, key: i32) {
    let mut m = 16i32.to_be_bytes().to_vec();
    m.extend_from_slice(&80877102i32.to_be_bytes());
    m.extend_from_slice(&pid.to_be_bytes());
    m.extend_from_slice(&key.to_be_bytes());
    let _ = raw_exchange(s, &m);
}

/// A raw connection past startup, with the BackendKeyData it was given.
fn raw_session(s: &TestServer) -> (std::net::TcpStream, i32, i32) {
    let mut sock = std::net::TcpStream::connect(s.addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    sock.write_all(&startup()).unwrap();
    let mut keys = None;
    loop {
        match read_message(&mut sock) {
            (b'K', body) => {
                let pid = i32::from_be_bytes(body[0..4].try_into().unwrap());
                let key = i32::from_be_bytes(body[4..8].try_into().unwrap());
                keys = Some((pid, key));
            }
            (b'Z', _) => break,
            _ => {}
        }
    }
    let (pid, key) = keys.expect("BackendKeyData");
    (sock, pid, key)
}

fn query_message(sql: &str) -> Vec<u8> {
    message(b'Q', format!("{sql}\0").as_bytes())
}

#[test]
fn ready_for_query_reports_the_session_status() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let (mut sock, _, _) = raw_session(&s);
    let ask = |sock: &mut std::net::TcpStream, sql: &str| {
        sock.write_all(&query_message(sql)).unwrap();
        until_ready_status(sock)
    };
    let mut ask = |sql: &str| ask(&mut sock, sql);
    assert_eq!(ask("begin; savepoint s"), (None, 'T'));
    assert_eq!(ask("select nosuch"), (Some("42703".into()), 'E'));
    // ROLLBACK TO makes the failed block usable again: "in transaction", not "failed".
    assert_eq!(ask("rollback to savepoint s"), (None, 'T'));
    assert_eq!(ask("selec 1"), (Some("42601".into()), 'E'));
    assert_eq!(ask("rollback to s; select 1"), (None, 'T'));
    assert_eq!(ask("commit"), (None, 'I'));
    assert_eq!(ask("select nosuch"), (Some("42703".into()), 'I'));
    // The extended protocol: a Parse that fails inside a block, then Sync.
    assert_eq!(ask("begin"), (None, 'T'));
    let mut parse = vec![0u8];
    parse.extend_from_slice(b"selec 1\0");
    parse.extend_from_slice(&0i16.to_be_bytes());
    let mut m = message(b'P', &parse);
    m.extend(message(b'S', &[]));
    sock.write_all(&m).unwrap();
    assert_eq!(until_ready_status(&mut sock), (Some("42601".into()), 'E'));
    sock.write_all(&query_message("rollback")).unwrap();
    assert_eq!(until_ready_status(&mut sock), (None, 'I'));
}

#[test]
fn a_cancel_request_with_the_wrong_key_does_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let (mut sock, pid, key) = raw_session(&s);
    let query = query_message;
    // The right process ID with a wrong key, and a wrong process ID with the right key.
    sock.write_all(&query("select pg_sleep(1)")).unwrap();
    for _ in 0..5 {
        cancel_request(&s, pid, key.wrapping_add(1));
        cancel_request(&s, pid.wrapping_add(1), key);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(until_ready(&mut sock), None, "a wrong key cancelled the statement");
    // The right key cancels.
    sock.write_all(&query("select pg_sleep(120)")).unwrap();
    sock.set_nonblocking(true).unwrap();
    let mut peek = [0u8; 1];
    while sock.peek(&mut peek).is_err() {
        cancel_request(&s, pid, key);
        std::thread::sleep(Duration::from_millis(50));
    }
    sock.set_nonblocking(false).unwrap();
    assert_eq!(until_ready(&mut sock).as_deref(), Some("57014"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_in_transaction_timeout_ends_the_session_and_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let other = connect(&s).await;
    other.batch_execute("create table idle (id int primary key, v int)").await.unwrap();
    other.batch_execute("insert into idle values (1, 0)").await.unwrap();

    let (c, conn) = connect_watched(&s).await;
    c.batch_execute("set idle_in_transaction_session_timeout = '300ms'").await.unwrap();
    assert_eq!(
        c.query_one("show idle_in_transaction_session_timeout", &[]).await.unwrap().get::<_, String>(0),
        "300ms"
    );
    // Idle outside a block is not limited.
    tokio::time::sleep(Duration::from_millis(600)).await;
    c.batch_execute("select 1").await.unwrap();
    // Idle inside one is: the session is closed with FATAL 25P03.
    c.batch_execute("begin; insert into idle values (2, 2); update idle set v = 1 where id = 1").await.unwrap();
    let e = conn.await.unwrap().unwrap_err();
    assert_eq!(code(&e), "25P03", "{e}");
    assert_eq!(e.as_db_error().unwrap().message(), "terminating connection due to idle-in-transaction timeout");
    assert!(c.batch_execute("select 1").await.is_err(), "the connection is closed");
    // Its writes are gone and its row lock released: the same key inserts, the row updates.
    other.batch_execute("insert into idle values (2, 20); update idle set v = 10 where id = 1").await.unwrap();
    let rows: Vec<(i32, i32)> = other
        .query("select id, v from idle order by id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(rows, [(1, 10), (2, 20)]);

    // A failed block is idle in transaction too.
    let (c, conn) = connect_watched(&s).await;
    c.batch_execute("set idle_in_transaction_session_timeout = 200; begin").await.unwrap();
    assert!(c.batch_execute("select nosuch").await.is_err());
    let e = conn.await.unwrap().unwrap_err();
    assert_eq!(code(&e), "25P03", "{e}");
}

/// `idle_session_timeout` limits the wait outside a block (where
/// `idle_in_transaction_session_timeout` does not apply) and only there: a block waits as long
/// as it likes under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_session_timeout_ends_an_idle_session_outside_a_block() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let (c, conn) = connect_watched(&s).await;
    // Set inside the block, so that no wait outside one comes before the test means it to.
    c.batch_execute("begin; set idle_session_timeout = '1s'").await.unwrap();
    assert_eq!(c.query_one("show idle_session_timeout", &[]).await.unwrap().get::<_, String>(0), "1s");
    // Inside a block the session waits longer than the timeout and goes on.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    c.batch_execute("select 1; commit").await.unwrap();
    // Outside one it is closed with FATAL 57P05 (within 20 s: a server that never
    // closed it would otherwise hang the test).
    let e = tokio::time::timeout(Duration::from_secs(60), conn)
        .await
        .expect("the session was closed")
        .unwrap()
        .unwrap_err();
    assert_eq!(code(&e), "57P05", "{e}");
    assert_eq!(e.as_db_error().unwrap().message(), "terminating connection due to idle-session timeout");
    assert!(c.batch_execute("select 1").await.is_err(), "the connection is closed");
    // A bad value is refused as PostgreSQL refuses it.
    let other = connect(&s).await;
    let e = other.batch_execute("set idle_session_timeout = -1").await.unwrap_err();
    assert_eq!(code(&e), "22023", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_stops_a_running_statement() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute("create table keep (id int primary key); insert into keep values (1)").await.unwrap();
    let running =
        tokio::spawn(async move { c.batch_execute("begin; insert into keep values (2); select pg_sleep(3600)").await });
    // Give the statement time to start (if it has not, shutdown never runs it: fine too).
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::task::spawn_blocking(move || s.stop()).await.unwrap();
    assert!(running.await.unwrap().is_err());
    // The open transaction rolled back.
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    assert_eq!(ids(&c, "keep").await, [1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_honours_statement_timeout() {
    use futures::SinkExt;
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute("create table cp (id int primary key)").await.unwrap();
    c.batch_execute("set statement_timeout = '50ms'").await.unwrap();
    let sink = c.copy_in("copy cp from stdin").await.unwrap();
    futures::pin_mut!(sink);
    // The COPY statement's clock runs while the client is slow to send its rows.
    tokio::time::sleep(Duration::from_millis(200)).await;
    sink.send(bytes::Bytes::from_static(b"1\n2\n")).await.unwrap();
    let e = sink.finish().await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().message(), "canceling statement due to statement timeout");
    c.batch_execute("set statement_timeout = 0").await.unwrap();
    assert!(ids(&c, "cp").await.is_empty());
}

/// COPY FROM STDIN in chunks that split lines, the data ending with a newline (as libpq and
/// tokio-postgres send it: no `\.` line): every row arrives once, none is made of the empty
/// rest at CopyDone; a genuinely empty line is an error that quotes the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_in_chunks_that_split_lines() {
    use futures::SinkExt;
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute("create table cc (id int primary key, v text)").await.unwrap();
    let data: String = (1..=3000).map(|i| format!("{i}\tv{i}\n")).collect();
    let sink = c.copy_in("copy cc from stdin").await.unwrap();
    futures::pin_mut!(sink);
    for chunk in data.as_bytes().chunks(997) {
        sink.send(bytes::Bytes::copy_from_slice(chunk)).await.unwrap();
    }
    assert_eq!(sink.finish().await.unwrap(), 3000);
    let n: i64 = c.query_one("select count(*) from cc", &[]).await.unwrap().get(0);
    assert_eq!(n, 3000);
    let sink = c.copy_in("copy cc from stdin").await.unwrap();
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from_static(b"5000\tx\n\n5001\ty\n")).await.unwrap();
    let e = sink.finish().await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().message(), "missing data for a column (COPY cc, line 2): \"\"");
}

/// `serial` columns: their own sequence (`<table>_<column>_seq`) feeds INSERT and COPY FROM of
/// the other columns; after a restart the values go on past every one handed out (the
/// sequence's file is written ahead); DROP TABLE drops the sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serial_columns_take_their_sequence() {
    use futures::SinkExt;
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute("create table sr (id serial primary key, v text)").await.unwrap();
    let ids: Vec<i32> = c
        .query("insert into sr (v) values ('a'), ('b') returning id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [1, 2]);
    let sink = c.copy_in("copy sr (v) from stdin").await.unwrap();
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from_static(b"c\nd\n")).await.unwrap();
    assert_eq!(sink.finish().await.unwrap(), 2);
    let got: Vec<(i32, String)> =
        c.query("select id, v from sr order by id", &[]).await.unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(got, [(1, "a".into()), (2, "b".into()), (3, "c".into()), (4, "d".into())]);
    let e = c.batch_execute("insert into sr (id, v) values (null, 'x')").await.unwrap_err();
    assert_eq!(code(&e), "23502", "serial implies NOT NULL");
    drop(c);
    s.stop();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    let id: i32 = c.query_one("insert into sr (v) values ('after') returning id", &[]).await.unwrap().get(0);
    assert!(id > 4, "after a restart the sequence goes on past 4, not {id}");
    c.batch_execute("drop table sr").await.unwrap();
    let e = c.query_one("select nextval('sr_id_seq')", &[]).await.unwrap_err();
    assert_eq!(code(&e), "42P01", "the table's sequence went with it");
}

/// A bare parameter in the select list has the type Describe gave it when its value comes
/// back, in binary as tokio-postgres asks, not text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_select_list_parameter_comes_back_in_its_declared_type() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    let st = c
        .prepare_typed("select $1, $2 + 1", &[tokio_postgres::types::Type::INT8, tokio_postgres::types::Type::INT4])
        .await
        .unwrap();
    assert_eq!(st.columns()[0].type_(), &tokio_postgres::types::Type::INT8);
    let r = c.query_one(&st, &[&7i64, &41i32]).await.unwrap();
    assert_eq!((r.get::<_, i64>(0), r.get::<_, i32>(1)), (7, 42));
}

/// RESET, RESET ALL, SET … TO DEFAULT and DISCARD ALL put a setting back to what the
/// connection began with, the startup packet's `options` included (as PostgreSQL does), and a
/// setting the connection did not give back to the server's default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_returns_to_the_startup_packets_values() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let url = format!("{} options='-c statement_timeout=5s -c application_name=starter'", s.conn_string());
    let (c, conn) = tokio_postgres::connect(&url, NoTls).await.expect("connect");
    tokio::spawn(conn);
    let show = |name: &'static str| {
        let c = &c;
        async move { c.query_one(&format!("show {name}"), &[]).await.unwrap().get::<_, String>(0) }
    };
    assert_eq!(show("statement_timeout").await, "5s");
    c.batch_execute("set statement_timeout = '1min'; set extra_float_digits = 3").await.unwrap();
    assert_eq!(show("statement_timeout").await, "1min");
    c.batch_execute("reset statement_timeout").await.unwrap();
    assert_eq!(show("statement_timeout").await, "5s");
    c.batch_execute("set statement_timeout = '2min'; set statement_timeout to default").await.unwrap();
    assert_eq!(show("statement_timeout").await, "5s");
    c.batch_execute("set statement_timeout = '3min'; set application_name = 'other'; reset all").await.unwrap();
    assert_eq!(show("statement_timeout").await, "5s");
    assert_eq!(show("application_name").await, "starter");
    assert_eq!(show("extra_float_digits").await, "1", "not given at startup: the server's default");
    c.batch_execute("set statement_timeout = '4min'").await.unwrap();
    c.batch_execute("discard all").await.unwrap();
    assert_eq!(show("statement_timeout").await, "5s");
    drop(c);
    s.stop();
}
