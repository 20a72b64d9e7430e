//! `timestamptz`, `interval` and the session's `TimeZone` through tokio-postgres, against
//! answers checked by hand on a real PostgreSQL 15 (each expected text below is what
//! PostgreSQL 15 printed for the same statement). Covers: text output following SET
//! TimeZone (named zones, numeric offsets with PostgreSQL's sign conventions, `+05:30` and
//! fractional seconds), input with offsets and zone names, DST arithmetic in the session
//! zone, interval input and output normalization, comparisons with 30-day months, the
//! casts, extract/date_part/date_trunc/age, now() fixed within a block, the type OIDs
//! Describe reports and the binary formats both ways, a timestamptz column that is still one
//! after a restart, the refusal of an index on an interval column, and the SQLSTATEs
//! (22007, 22008, 22023). Before these types were built, `timestamptz` was read as
//! `timestamp` (its output had no offset), `interval` was 42704 and SET TimeZone took only UTC.

mod common;

use common::{code, connect, rows, Row, TestServer};
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type};
use tokio_postgres::Client;

/// One text value of a one-row, one-column query.
async fn one(c: &Client, sql: &str) -> String {
    let r = rows(c, sql).await;
    assert_eq!(r.len(), 1, "{sql}");
    r[0][0].clone().unwrap_or_else(|| panic!("{sql}: NULL"))
}

/// The texts of one row.
async fn row(c: &Client, sql: &str) -> Vec<String> {
    let r: Vec<Row> = rows(c, sql).await;
    assert_eq!(r.len(), 1, "{sql}");
    r[0].iter().map(|v| v.clone().unwrap_or_default()).collect()
}

/// The SQLSTATE and message of a statement that must fail.
async fn error(c: &Client, sql: &str) -> (String, String) {
    let e = c.simple_query(sql).await.expect_err(sql);
    let msg = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    (code(&e), msg)
}

/// A value's binary form as the server sent it, whatever its type.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

/// A parameter sent in binary as the given bytes.
#[derive(Debug)]
struct RawParam(Vec<u8>);

impl ToSql for RawParam {
    fn to_sql(&self, _: &Type, out: &mut bytes::BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(IsNull::No)
    }
    fn accepts(_: &Type) -> bool {
        true
    }
    tokio_postgres::types::to_sql_checked!();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamptz_prints_in_the_session_zone() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;

    assert_eq!(one(&c, "show timezone").await, "UTC");
    assert_eq!(one(&c, "select '2024-03-01 10:00:00+02'::timestamptz").await, "2024-03-01 08:00:00+00");
    assert_eq!(one(&c, "select '2024-03-01 10:00:00Z'::timestamptz").await, "2024-03-01 10:00:00+00");
    assert_eq!(one(&c, "select '2024-03-01 10:00:00 Europe/Paris'::timestamptz").await, "2024-03-01 09:00:00+00");
    assert_eq!(
        one(&c, "select '2024-03-01 10:00:00.123456+05:30'::timestamptz").await,
        "2024-03-01 04:30:00.123456+00"
    );

    c.batch_execute("set timezone = 'Asia/Kolkata'").await.unwrap();
    assert_eq!(one(&c, "select '2024-03-01 10:00:00.5'::timestamptz").await, "2024-03-01 10:00:00.5+05:30");

    c.batch_execute("set time zone 'europe/paris'").await.unwrap();
    assert_eq!(one(&c, "show timezone").await, "Europe/Paris");
    assert_eq!(one(&c, "select '2024-03-01 10:00:00'::timestamptz").await, "2024-03-01 10:00:00+01");
    // A local time the spring-forward skips, and one the fall-back repeats.
    assert_eq!(one(&c, "select '2024-03-31 02:30:00'::timestamptz").await, "2024-03-31 03:30:00+02");
    assert_eq!(one(&c, "select '2024-10-27 02:30:00'::timestamptz").await, "2024-10-27 02:30:00+01");

    // Sign conventions: POSIX strings count west, numbers and INTERVALs east.
    for (set, shown, out) in [
        ("set timezone = 'UTC+3'", "UTC+3", "2024-03-01 07:00:00-03"),
        ("set time zone -3", "<-03>+03", "2024-03-01 07:00:00-03"),
        ("set time zone interval '-03:00' hour to minute", "<-03>+03", "2024-03-01 07:00:00-03"),
        ("set timezone = '+3'", "<+03>-03", "2024-03-01 13:00:00+03"),
        ("set timezone = 5.5", "<+05:30>-05:30", "2024-03-01 15:30:00+05:30"),
        ("set timezone = 'America/St_Johns'", "America/St_Johns", "2024-03-01 06:30:00-03:30"),
    ] {
        c.batch_execute(set).await.unwrap();
        assert_eq!(one(&c, "show timezone").await, shown, "{set}");
        assert_eq!(one(&c, "select '2024-03-01 10:00:00+00'::timestamptz").await, out, "{set}");
    }
    c.batch_execute("set timezone = 'Africa/Monrovia'").await.unwrap();
    assert_eq!(one(&c, "select '1960-07-01 10:00:00+00'::timestamptz").await, "1960-07-01 09:15:30-00:44:30");

    c.batch_execute("set time zone local").await.unwrap();
    assert_eq!(one(&c, "show timezone").await, "UTC");
    c.batch_execute("set timezone = 'Europe/Paris'; reset timezone").await.unwrap();
    assert_eq!(one(&c, "select current_setting('TimeZone')").await, "UTC");

    // Unknown zones.
    let e = error(&c, "set timezone = 'Mars/Olympus'").await;
    assert_eq!(e, ("22023".into(), "invalid value for parameter \"TimeZone\": \"Mars/Olympus\"".into()));
    let e = error(&c, "set time zone interval '1 day'").await;
    assert_eq!(e.0, "22023");
    let e = error(&c, "select '2024-03-01 10:00:00 Mars/X'::timestamptz").await;
    assert_eq!(e, ("22023".into(), "time zone \"mars/x\" not recognized".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arithmetic_follows_the_session_zone_across_dst() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute("set timezone = 'Europe/Paris'").await.unwrap();

    let r = row(
        &c,
        "select '2024-03-30 12:00:00'::timestamptz + interval '1 day',
                '2024-03-30 12:00:00'::timestamptz + interval '24 hours',
                '2024-03-31 12:00:00'::timestamptz - '2024-03-30 12:00:00'::timestamptz,
                timestamptz '2024-01-31 12:00+01' + interval '1 mon',
                timestamptz '2024-10-27 01:30+00' + interval '1 hour'",
    )
    .await;
    assert_eq!(
        r,
        [
            "2024-03-31 12:00:00+02",
            "2024-03-31 13:00:00+02",
            "23:00:00",
            "2024-02-29 12:00:00+01",
            "2024-10-27 03:30:00+01"
        ]
    );
    let r = row(
        &c,
        "select timestamp '2024-01-31' + interval '1 mon', date '2024-01-31' + interval '1 mon',
                date '2024-03-01' - date '2024-02-01', date '2024-03-01' + 1, date '2024-03-01' - 1,
                timestamptz '2024-03-01 10:00+00' - timestamptz '2024-02-28 09:00+00',
                timestamp '2024-03-01' - timestamp '2024-03-02 01:00',
                date '2024-03-01' - interval '1 day'",
    )
    .await;
    assert_eq!(
        r,
        [
            "2024-02-29 00:00:00",
            "2024-02-29 00:00:00",
            "29",
            "2024-03-02",
            "2024-02-29",
            "2 days 01:00:00",
            "-1 days -01:00:00",
            "2024-02-29 00:00:00"
        ]
    );
    // Casts between the three types, in the session zone.
    let r = row(
        &c,
        "select timestamp '2024-03-01 10:00'::timestamptz, timestamptz '2024-03-01 10:00+00'::timestamp,
                timestamptz '2024-03-01 00:30+01'::date, date '2024-03-01'::timestamptz,
                timestamp '2024-03-01 10:00' = timestamptz '2024-03-01 09:00+00',
                timestamptz '2024-03-01 10:00+00'::text",
    )
    .await;
    assert_eq!(
        r,
        [
            "2024-03-01 10:00:00+01",
            "2024-03-01 11:00:00",
            "2024-03-01",
            "2024-03-01 00:00:00+01",
            "t",
            "2024-03-01 11:00:00+01"
        ]
    );
    // Fields and truncation in the session zone.
    let r = row(
        &c,
        "select extract(hour from timestamptz '2024-03-01 10:00:00+00'),
                extract(epoch from timestamptz '2024-03-01 10:00:00.5+00'),
                extract(timezone from timestamptz '2024-03-01 10:00:00+00'),
                date_trunc('month', timestamptz '2024-03-15 10:00:00+00'),
                date_trunc('hour', timestamptz '2024-03-31 03:30:00+02'),
                to_timestamp(1709287200.5)",
    )
    .await;
    assert_eq!(
        r,
        [
            "11",
            "1709287200.500000",
            "3600",
            "2024-03-01 00:00:00+01",
            "2024-03-31 03:00:00+02",
            "2024-03-01 11:00:00.5+01"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intervals_read_print_and_compare_as_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;

    let r = row(
        &c,
        "select '1 day 02:00:00'::interval, '2 hours'::interval, '1 mon'::interval, 'P1DT2H'::interval,
                '@ 1 day'::interval, '1 year 2 mons 3 days 04:05:06.5'::interval, '-1 second'::interval,
                '-1 day +02:00'::interval, 'P1Y2M3DT4H5M6.5S'::interval, '3.7 weeks'::interval",
    )
    .await;
    assert_eq!(
        r,
        [
            "1 day 02:00:00",
            "02:00:00",
            "1 mon",
            "1 day 02:00:00",
            "1 day",
            "1 year 2 mons 3 days 04:05:06.5",
            "-00:00:01",
            "-1 days +02:00:00",
            "1 year 2 mons 3 days 04:05:06.5",
            "25 days 21:36:00"
        ]
    );
    let r = row(
        &c,
        "select interval '1 day' - interval '1 hour', interval '1 mon' * 1.5, interval '1 day' / 3,
                -interval '1 day 2 hours', 2 * interval '1 day', '2 years 3 mons'::interval - '1 year 5 mons'::interval,
                interval '1 mon' = interval '30 days', interval '1 day' = interval '24 hours',
                interval '1 year' > interval '360 days'",
    )
    .await;
    assert_eq!(
        r,
        ["1 day -01:00:00", "1 mon 15 days", "08:00:00", "-1 days -02:00:00", "2 days", "10 mons", "t", "t", "f"]
    );
    let r = row(
        &c,
        "select justify_days(interval '35 days'), justify_hours(interval '27 hours'),
                justify_interval(interval '1 mon -1 hour'), date_trunc('hour', interval '1 day 02:30:00'),
                extract(epoch from interval '1 mon'), date_part('epoch', interval '1 day 2 hours'),
                age(timestamp '2024-03-01', timestamp '2023-01-15 10:00')",
    )
    .await;
    assert_eq!(
        r,
        [
            "1 mon 5 days",
            "1 day 03:00:00",
            "29 days 23:00:00",
            "1 day 02:00:00",
            "2592000.000000",
            "93600",
            "1 year 1 mon 16 days 14:00:00"
        ]
    );
    // Stored in a table: ordered by span, refused as an index key.
    c.batch_execute(
        "create table iv (id int primary key, d interval);
         insert into iv values (1, '1 mon'), (2, '29 days'), (3, '1 day 1 hour'), (4, null), (5, '30 days')",
    )
    .await
    .unwrap();
    let got: Vec<String> = rows(&c, "select id from iv where d >= interval '30 days' order by id")
        .await
        .into_iter()
        .map(|r| r[0].clone().unwrap_or_default())
        .collect();
    assert_eq!(got, ["1", "5"]);
    assert_eq!(one(&c, "select d from iv where id = 1").await, "1 mon");
    let e = error(&c, "create index on iv (d)").await;
    assert_eq!(e.0, "0A000", "{e:?}");
    let e = error(&c, "create table iv2 (d interval primary key)").await;
    assert_eq!(e.0, "0A000", "{e:?}");

    let e = error(&c, "select 'garbage'::interval").await;
    assert_eq!(e, ("22007".into(), "invalid input syntax for type interval: \"garbage\"".into()));
    assert_eq!(error(&c, "select interval '1 year' / 0").await.0, "22012");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_postgresql_sqlstates() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    let cases = [
        (
            "select 'garbage'::timestamptz",
            "22007",
            "invalid input syntax for type timestamp with time zone: \"garbage\"",
        ),
        ("select '2024-13-01 00:00'::timestamptz", "22008", "date/time field value out of range: \"2024-13-01 00:00\""),
        ("select '2024-02-30'::timestamptz", "22008", "date/time field value out of range: \"2024-02-30\""),
        ("select '10000000-01-01'::timestamp", "22008", "timestamp out of range: \"10000000-01-01\""),
    ];
    for (sql, state, msg) in cases {
        assert_eq!(error(&c, sql).await, (state.to_string(), msg.to_string()), "{sql}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn now_is_the_transaction_start() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute("begin").await.unwrap();
    let a = one(&c, "select now()::text").await;
    c.batch_execute("select pg_sleep(0)").await.unwrap();
    let b = one(&c, "select transaction_timestamp()::text").await;
    assert_eq!(a, b);
    assert_eq!(one(&c, "select current_timestamp = now() and statement_timestamp() >= now()").await, "t");
    assert_eq!(one(&c, "select localtimestamp = now()::timestamp and current_date = now()::date").await, "t");
    c.batch_execute("commit").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_types_and_binary_formats() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute("set timezone = 'Europe/Paris'").await.unwrap();

    let st = c
        .prepare(
            "select timestamptz '2000-01-01 00:00:01+00', interval '1 year 2 days 00:00:01.5', now(),
                    extract(year from now()), localtimestamp, current_date, date_part('hour', now()),
                    now() - now(), date '2024-03-01' + interval '1 hour'",
        )
        .await
        .unwrap();
    let types: Vec<Type> = st.columns().iter().map(|c| c.type_().clone()).collect();
    assert_eq!(
        types,
        [
            Type::TIMESTAMPTZ,
            Type::INTERVAL,
            Type::TIMESTAMPTZ,
            Type::NUMERIC,
            Type::TIMESTAMP,
            Type::DATE,
            Type::FLOAT8,
            Type::INTERVAL,
            Type::TIMESTAMP
        ]
    );
    let r = c
        .query_one("select timestamptz '2000-01-01 00:00:01+00', interval '1 year 2 days 00:00:01.5'", &[])
        .await
        .unwrap();
    assert_eq!(r.get::<_, Raw>(0).0, 1_000_000i64.to_be_bytes());
    let mut iv = 1_500_000i64.to_be_bytes().to_vec();
    iv.extend_from_slice(&2i32.to_be_bytes());
    iv.extend_from_slice(&12i32.to_be_bytes());
    assert_eq!(r.get::<_, Raw>(1).0, iv);

    // Binary parameters of both types, described by the column they meet.
    c.batch_execute("create table ev (id int primary key, at timestamptz, took interval)").await.unwrap();
    let ins = c.prepare("insert into ev values ($1, $2, $3)").await.unwrap();
    assert_eq!(ins.params(), [Type::INT4, Type::TIMESTAMPTZ, Type::INTERVAL]);
    let at = RawParam(3_600_000_000i64.to_be_bytes().to_vec());
    c.execute(&ins, &[&1i32, &at, &RawParam(iv.clone())]).await.unwrap();
    assert_eq!(row(&c, "select at, took from ev").await, ["2000-01-01 02:00:00+01", "1 year 2 days 00:00:01.5"]);
    let r = c.query_one("select at, took from ev where id = 1", &[]).await.unwrap();
    assert_eq!(r.get::<_, Raw>(0).0, 3_600_000_000i64.to_be_bytes());
    assert_eq!(r.get::<_, Raw>(1).0, iv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timestamptz_column_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let srv = TestServer::start(dir.path());
        let c = connect(&srv).await;
        c.batch_execute(
            "create table log (id int primary key, at timestamptz, plain timestamp);
             create index log_at on log (at);
             insert into log values (1, '2024-03-01 10:00:00+00', '2024-03-01 10:00:00'),
                                    (2, '2024-06-01 10:00:00+00', '2024-06-01 10:00:00')",
        )
        .await
        .unwrap();
        drop(c);
        srv.stop();
    }
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute("set timezone = 'America/New_York'").await.unwrap();
    assert_eq!(
        row(&c, "select at, plain from log where id = 1").await,
        ["2024-03-01 05:00:00-05", "2024-03-01 10:00:00"]
    );
    assert_eq!(one(&c, "select id from log where at = '2024-06-01 06:00:00-04'").await, "2");
    let st = c.prepare("select at from log").await.unwrap();
    assert_eq!(st.columns()[0].type_(), &Type::TIMESTAMPTZ);
}
