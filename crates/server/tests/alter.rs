//! ALTER TABLE that changes columns, through tokio-postgres and the real psql (`\d t`): ADD
//! COLUMN without and with a default (old rows read NULL / the default, new rows their own),
//! NOT NULL with a default, IF NOT EXISTS's NOTICE, RENAME COLUMN, RENAME TO (the primary key
//! keeps working), SET / DROP DEFAULT (later INSERTs only), SET / DROP NOT NULL; PostgreSQL's
//! SQLSTATEs (42701, 42703, 42P01, 23502, 42P16, 0A000 for a volatile default and for DROP
//! COLUMN); a second session opened before the ALTERs sees each change at its next
//! statement; a restart keeps the types and defaults. Before these were built every form was
//! 0A000.

mod common;

use common::{code, connect, psql_run, require, rows, text, Row, TestServer};
use tokio_postgres::Client;

fn expect(v: &[&[Option<&str>]]) -> Vec<Row> {
    v.iter().map(|r| r.iter().map(|c| c.map(str::to_string)).collect()).collect()
}

async fn error(c: &Client, sql: &str) -> (String, String) {
    let e = c.simple_query(sql).await.expect_err(sql);
    let msg = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    (code(&e), msg)
}

async fn ok(c: &Client, sql: &str) {
    c.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_table_changes_columns_as_postgresql_does() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    let other = connect(&s).await;
    ok(&c, "create table t (id int primary key, v varchar(10))").await;
    ok(&c, "insert into t values (1, 'a'), (2, 'b')").await;
    assert_eq!(rows(&other, "select * from t order by id").await.len(), 2);

    ok(&c, "alter table t add column note text").await;
    ok(&c, "alter table t add n int2 not null default 7").await;
    ok(&c, "alter table t add column if not exists n int").await;
    ok(&c, "alter table t add column d date default '2024-01-02'").await;
    // The session opened before sees the new columns at its next statement.
    assert_eq!(
        rows(&other, "select * from t order by id").await,
        expect(&[
            &[Some("1"), Some("a"), None, Some("7"), Some("2024-01-02")],
            &[Some("2"), Some("b"), None, Some("7"), Some("2024-01-02")],
        ])
    );
    ok(&other, "insert into t (id, v) values (3, 'c')").await;
    ok(&other, "update t set note = 'x' where id = 1").await;
    assert_eq!(
        rows(&c, "select id, note, n, d from t order by id").await,
        expect(&[
            &[Some("1"), Some("x"), Some("7"), Some("2024-01-02")],
            &[Some("2"), None, Some("7"), Some("2024-01-02")],
            &[Some("3"), None, Some("7"), Some("2024-01-02")],
        ])
    );

    // Errors, with PostgreSQL's SQLSTATEs and words.
    assert_eq!(
        error(&c, "alter table t add column v int").await,
        ("42701".into(), "column \"v\" of relation \"t\" already exists".into())
    );
    assert_eq!(
        error(&c, "alter table t add column m int not null").await,
        ("23502".into(), "column \"m\" of relation \"t\" contains null values".into())
    );
    assert_eq!(error(&c, "alter table nosuch add column m int").await.0, "42P01");
    assert_eq!(
        error(&c, "alter table t rename column nope to x").await,
        ("42703".into(), "column \"nope\" does not exist".into())
    );
    assert_eq!(
        error(&c, "alter table t alter column nope set default 1").await,
        ("42703".into(), "column \"nope\" of relation \"t\" does not exist".into())
    );
    assert_eq!(error(&c, "alter table t rename column v to id").await.0, "42701");
    assert_eq!(error(&c, "alter table t add column r float8 default random()").await.0, "0A000");
    assert_eq!(error(&c, "alter table t add column s serial").await.0, "0A000");
    assert_eq!(error(&c, "alter table t drop column note").await.0, "0A000");
    assert_eq!(
        error(&c, "alter table t alter column note set not null").await,
        ("23502".into(), "column \"note\" of relation \"t\" contains null values".into())
    );
    assert_eq!(
        error(&c, "alter table t alter column id drop not null").await,
        ("42P16".into(), "column \"id\" is in a primary key".into())
    );
    assert_eq!(error(&c, "alter table t rename to t").await.0, "42P07");

    // Defaults govern later INSERTs only; NOT NULL is checked and enforced.
    ok(&c, "alter table t alter column n set default 8").await;
    ok(&c, "alter table t alter column d drop default").await;
    ok(&c, "insert into t (id, v) values (4, 'd')").await;
    assert_eq!(
        rows(&c, "select id, n, d from t where id >= 3 order by id").await,
        expect(&[&[Some("3"), Some("7"), Some("2024-01-02")], &[Some("4"), Some("8"), None]])
    );
    ok(&c, "update t set note = '' where note is null").await;
    ok(&c, "alter table t alter column note set not null").await;
    assert_eq!(error(&c, "insert into t (id, v, note) values (5, 'e', null)").await.0, "23502");
    ok(&c, "alter table t alter note drop not null").await;
    ok(&c, "insert into t (id, v, note) values (5, 'e', null)").await;

    // Renames: the primary key keeps working under the new names.
    ok(&c, "alter table t rename column id to key").await;
    ok(&c, "alter table t rename to u").await;
    assert_eq!(error(&other, "select * from t").await.0, "42P01");
    assert_eq!(rows(&other, "select v from u where key = 2").await, expect(&[&[Some("b")]]));
    let (state, msg) = error(&other, "insert into u (key, v) values (2, 'dup')").await;
    assert_eq!((state.as_str(), msg.as_str()), ("23505", "duplicate key value violates unique constraint \"t_pkey\""));
    assert_eq!(error(&other, "insert into u (key, v) values (9, 'far too long')").await.0, "22001", "varchar(10) kept");

    if let Some(psql) = require("psql") {
        let o = psql_run(&psql, &s, "\\d u");
        let (out, err) = text(&o);
        assert!(o.status.success(), "{err}");
        for want in ["key|integer||not null|", "v|character varying(10)|||", "n|smallint||not null|8", "d|date|||"] {
            assert!(out.lines().any(|l| l == want), "\\d u lacks {want:?}:\n{out}");
        }
    }
    drop(c);
    drop(other);
    s.stop();

    // A restart keeps the columns, their types and defaults.
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    ok(&c, "insert into u (key, v) values (6, 'f')").await;
    assert_eq!(
        rows(&c, "select key, v, note, n, d from u where key in (1, 6) order by key").await,
        expect(&[
            &[Some("1"), Some("a"), Some("x"), Some("7"), Some("2024-01-02")],
            &[Some("6"), Some("f"), None, Some("8"), None]
        ])
    );
    drop(c);
    s.stop();
}
