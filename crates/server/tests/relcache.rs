//! The session's relation cache (`crate::relcache`) never answers with a table as it was
//! before another session's DDL. Session `a` reads a table through its primary key, a second
//! index and a prepared statement, so its cache holds the table, its columns and its indexes;
//! session `b` then TRUNCATEs it (new storage for the table and each index), drops the second
//! index, and drops and re-creates the table with other columns; after each change `a`'s next
//! statements must see exactly what a fresh session sees. With a cache that outlived the
//! changes, `a` would look keys up in the truncated indexes' old files, scan an index that is
//! gone, or show the old table's columns.

mod common;

use common::{connect, rows, Row, TestServer};
use tokio_postgres::Client;

fn expect(v: &[&[Option<&str>]]) -> Vec<Row> {
    v.iter().map(|r| r.iter().map(|c| c.map(str::to_string)).collect()).collect()
}

async fn ok(c: &Client, sql: &str) {
    c.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// What `a` and a session opened just now both answer to `sql`.
async fn same(a: &Client, s: &TestServer, sql: &str) -> Vec<Row> {
    let fresh = connect(s).await;
    let want = rows(&fresh, sql).await;
    assert_eq!(rows(a, sql).await, want, "{sql}: the cached session differs from a new one");
    want
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_tables_follow_other_sessions_ddl() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let a = connect(&s).await;
    let b = connect(&s).await;
    ok(&b, "create table t (id int primary key, v text)").await;
    ok(&b, "create index t_v on t (v)").await;
    ok(&b, "insert into t select g, 'v' || g from generate_series(1, 500) g").await;

    // `a` caches the table, both indexes and a prepared lookup.
    ok(&a, "prepare q (int) as select v from t where id = $1").await;
    assert_eq!(rows(&a, "execute q (7)").await, expect(&[&[Some("v7")]]));
    assert_eq!(rows(&a, "select id from t where v = 'v9'").await, expect(&[&[Some("9")]]));

    // TRUNCATE gives the table and its indexes new storage.
    ok(&b, "truncate t").await;
    ok(&b, "insert into t values (7, 'seven'), (9, 'v9x')").await;
    assert_eq!(rows(&a, "execute q (7)").await, expect(&[&[Some("seven")]]));
    assert_eq!(same(&a, &s, "select v from t where id = 9").await, expect(&[&[Some("v9x")]]));
    assert_eq!(same(&a, &s, "select id from t where v = 'v9x'").await, expect(&[&[Some("9")]]));
    assert_eq!(same(&a, &s, "select count(*) from t where id between 1 and 500").await, expect(&[&[Some("2")]]));

    // A dropped index is no longer read; one created since is.
    ok(&b, "drop index t_v").await;
    assert_eq!(same(&a, &s, "select id from t where v = 'seven'").await, expect(&[&[Some("7")]]));
    ok(&b, "create index t_v2 on t (v, id)").await;
    ok(&b, "insert into t values (8, 'eight')").await;
    assert_eq!(same(&a, &s, "select id from t where v = 'eight'").await, expect(&[&[Some("8")]]));

    // The same name, another table: other columns, another key.
    ok(&b, "drop table t").await;
    ok(&b, "create table t (k text primary key, n int8, d date)").await;
    ok(&b, "insert into t values ('x', 42, '2024-02-03')").await;
    assert_eq!(same(&a, &s, "select * from t").await, expect(&[&[Some("x"), Some("42"), Some("2024-02-03")]]));
    assert_eq!(same(&a, &s, "select n from t where k = 'x'").await, expect(&[&[Some("42")]]));

    // A renamed table answers to its new name only.
    ok(&b, "alter table t rename to u").await;
    let e = a.simple_query("select * from t").await.expect_err("t was renamed");
    assert_eq!(e.code().map(|c| c.code()), Some("42P01"), "{e}");
    assert_eq!(same(&a, &s, "select d from u where k = 'x'").await, expect(&[&[Some("2024-02-03")]]));
}

/// The extended protocol's prepared statements keep their SELECT's plan (`query::PlanSlot`):
/// the table, the index chosen and whether it covers the query. Each of session `b`'s
/// changes below would make a kept plan read the wrong storage or a dropped index; `a`'s
/// next executions must answer as a fresh session does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_plans_follow_other_sessions_ddl() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let a = connect(&s).await;
    let b = connect(&s).await;
    ok(&b, "create table t (id int primary key, v text, n int)").await;
    ok(&b, "create index t_v on t (v)").await;
    ok(&b, "insert into t select g, 'v' || g, g * 10 from generate_series(1, 500) g").await;
    ok(&b, "vacuum t").await;

    let by_id = a.prepare("select v, n from t where id = $1").await.unwrap();
    let by_v = a.prepare("select id from t where v = $1").await.unwrap();
    // Covered by the primary key: an index-only scan.
    let ids = a.prepare("select id from t where id between $1 and $2 order by id").await.unwrap();
    let one = |rows: Vec<tokio_postgres::Row>| -> Vec<(String, i32)> {
        rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i32>(1))).collect()
    };
    let idv = |rows: Vec<tokio_postgres::Row>| -> Vec<i32> { rows.iter().map(|r| r.get::<_, i32>(0)).collect() };
    for _ in 0..3 {
        assert_eq!(one(a.query(&by_id, &[&7i32]).await.unwrap()), vec![("v7".to_string(), 70)]);
        assert_eq!(idv(a.query(&by_v, &[&"v9"]).await.unwrap()), vec![9]);
        assert_eq!(idv(a.query(&ids, &[&3i32, &5i32]).await.unwrap()), vec![3, 4, 5]);
    }

    // New storage for the table and both indexes.
    ok(&b, "truncate t").await;
    ok(&b, "insert into t values (7, 'seven', 1), (9, 'v9x', 2), (4, 'four', 3)").await;
    assert_eq!(one(a.query(&by_id, &[&7i32]).await.unwrap()), vec![("seven".to_string(), 1)]);
    assert_eq!(idv(a.query(&by_v, &[&"v9x"]).await.unwrap()), vec![9]);
    assert_eq!(idv(a.query(&by_v, &[&"v9"]).await.unwrap()), Vec::<i32>::new());
    assert_eq!(idv(a.query(&ids, &[&3i32, &5i32]).await.unwrap()), vec![4]);

    // The index a kept plan reads is dropped; another is made.
    ok(&b, "drop index t_v").await;
    assert_eq!(idv(a.query(&by_v, &[&"four"]).await.unwrap()), vec![4]);
    ok(&b, "create index t_v_n on t (v, n)").await;
    ok(&b, "insert into t values (8, 'eight', 4)").await;
    assert_eq!(idv(a.query(&by_v, &[&"eight"]).await.unwrap()), vec![8]);

    // The table is dropped and made again under its name, with other rows.
    ok(&b, "drop table t").await;
    ok(&b, "create table t (id int primary key, v text, n int)").await;
    ok(&b, "insert into t values (7, 'again', 5)").await;
    assert_eq!(one(a.query(&by_id, &[&7i32]).await.unwrap()), vec![("again".to_string(), 5)]);
    assert_eq!(idv(a.query(&ids, &[&1i32, &100i32]).await.unwrap()), vec![7]);

    // Gone for good: PostgreSQL's error, 42P01.
    ok(&b, "drop table t").await;
    let e = a.query(&by_id, &[&7i32]).await.expect_err("t was dropped");
    assert_eq!(e.code().map(|c| c.code()), Some("42P01"), "{e}");
}
