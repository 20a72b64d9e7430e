//! `SELECT ... FOR UPDATE | FOR NO KEY UPDATE | FOR SHARE | FOR KEY SHARE [OF t] [NOWAIT |
//! SKIP LOCKED]` over the wire, two sessions at a time: the lock blocks an updater until the
//! locker ends, NOWAIT is 55P03 with PostgreSQL's message, SKIP LOCKED skips (and LIMIT counts
//! only the rows locked), READ COMMITTED re-checks WHERE on the newest version after a wait,
//! REPEATABLE READ is 40001, ROLLBACK TO releases, autocommit releases at the statement's end,
//! lock_timeout and statement_timeout end a wait, and the clauses PostgreSQL 15 refuses are
//! refused with its SQLSTATEs and messages (checked against PostgreSQL 15 by hand).
//!
//! Every wait a test expects to end is bounded on the client side, so a hang fails the test
//! instead of stalling it; blocking is seen in `pg_locks`, never timed.

mod common;

use common::{bounded, code, connect, rows, until_waiting, TestServer};
use tokio_postgres::Client;

async fn setup(s: &TestServer) -> Client {
    let c = connect(s).await;
    c.batch_execute("create table t (id int primary key, v int); insert into t values (1, 10), (2, 20), (3, 30)")
        .await
        .unwrap();
    c
}

fn texts(r: Vec<common::Row>) -> Vec<Vec<String>> {
    r.into_iter().map(|row| row.into_iter().map(|v| v.unwrap_or_default()).collect()).collect()
}

/// The error a statement fails with: (SQLSTATE, message).
async fn fails(c: &Client, sql: &str) -> (String, String) {
    let e = bounded(sql, c.simple_query(sql)).await.expect_err(sql);
    (code(&e), e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_update_blocks_an_updater_until_the_locker_commits() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let a = setup(&s).await;
    let b = connect(&s).await;
    let watch = connect(&s).await;
    a.batch_execute("begin").await.unwrap();
    assert_eq!(texts(rows(&a, "select id, v from t where id = 1 for update").await), [["1", "10"]]);
    let w = tokio::spawn(async move {
        let n = b.execute("update t set v = v + 1 where id = 1", &[]).await.unwrap();
        (b, n)
    });
    until_waiting(&watch, 1).await;
    a.batch_execute("update t set v = v + 5 where id = 1; commit").await.unwrap();
    let (b, n) = bounded("the updater", w).await.unwrap();
    assert_eq!(n, 1);
    assert_eq!(texts(rows(&b, "select v from t where id = 1").await), [["16"]]);
    // The same with a deleter and a locker that rolls back; FOR NO KEY UPDATE and OF.
    a.batch_execute("begin; select * from t where id = 2 for no key update of t").await.unwrap();
    let w = tokio::spawn(async move {
        let n = b.execute("delete from t where id = 2", &[]).await.unwrap();
        (b, n)
    });
    until_waiting(&watch, 1).await;
    a.batch_execute("rollback").await.unwrap();
    let (_b, n) = bounded("the deleter", w).await.unwrap();
    assert_eq!(n, 1);
    assert_eq!(texts(rows(&a, "select id from t order by id").await), [["1"], ["3"]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nowait_skip_locked_and_lock_lifetimes() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let a = setup(&s).await;
    let b = connect(&s).await;
    a.batch_execute("begin").await.unwrap();
    rows(&a, "select * from t where id = 1 for update").await;
    assert_eq!(
        fails(&b, "select * from t where id = 1 for update nowait").await,
        ("55P03".to_string(), "could not obtain lock on row in relation \"t\"".to_string())
    );
    assert_eq!(texts(rows(&b, "select id from t order by id for update skip locked").await), [["2"], ["3"]]);
    // A queue's pop: LIMIT counts the rows locked, not the rows skipped.
    assert_eq!(texts(rows(&b, "select id from t order by id limit 1 for update skip locked").await), [["2"]]);
    // Plain reads are not blocked.
    assert_eq!(texts(rows(&b, "select v from t where id = 1").await), [["10"]]);
    a.batch_execute("commit").await.unwrap();
    // The locks b took ended with its statements (autocommit).
    a.batch_execute("begin").await.unwrap();
    assert_eq!(texts(rows(&a, "select id from t where id >= 2 order by id for share nowait").await), [["2"], ["3"]]);
    // ROLLBACK TO releases a lock taken in the savepoint.
    a.batch_execute("savepoint s; select * from t where id = 1 for update; rollback to s").await.unwrap();
    assert_eq!(texts(rows(&b, "select id from t where id = 1 for update nowait").await), [["1"]]);
    a.batch_execute("commit").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_rechecks_where_on_the_newest_version() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let a = setup(&s).await;
    let b = connect(&s).await;
    let watch = connect(&s).await;
    a.batch_execute("begin; update t set v = 100 where id = 1; update t set v = 21 where id = 2").await.unwrap();
    let w = tokio::spawn(async move {
        let r = rows(&b, "select id, v from t where v < 50 order by id for update").await;
        (b, r)
    });
    until_waiting(&watch, 1).await;
    a.batch_execute("commit").await.unwrap();
    let (b, r) = bounded("the locker", w).await.unwrap();
    // Row 1 no longer matches; row 2 is returned as its newest version.
    assert_eq!(texts(r), [["2", "21"], ["3", "30"]]);
    // REPEATABLE READ: a row updated after the snapshot cannot be locked.
    b.batch_execute("begin isolation level repeatable read; select * from t where id = 3").await.unwrap();
    a.batch_execute("update t set v = v + 1 where id = 3").await.unwrap();
    assert_eq!(
        fails(&b, "select * from t where id = 3 for update").await,
        ("40001".to_string(), "could not serialize access due to concurrent update".to_string())
    );
    b.batch_execute("rollback").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_timeout_and_statement_timeout_end_a_wait() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let a = setup(&s).await;
    let b = connect(&s).await;
    a.batch_execute("begin; select * from t where id = 1 for share").await.unwrap();
    b.batch_execute("set lock_timeout = '50ms'").await.unwrap();
    assert_eq!(
        fails(&b, "select * from t where id = 1 for update").await,
        ("55P03".to_string(), "canceling statement due to lock timeout".to_string())
    );
    b.batch_execute("set lock_timeout = 0; set statement_timeout = '100ms'").await.unwrap();
    assert_eq!(
        fails(&b, "select * from t where id = 1 for key share").await,
        ("57014".to_string(), "canceling statement due to statement timeout".to_string())
    );
    a.batch_execute("commit").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_match_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = setup(&s).await;
    for (sql, state, msg) in [
        ("select count(*) from t for update", "0A000", "FOR UPDATE is not allowed with aggregate functions"),
        (
            "select id, row_number() over () from t for update",
            "0A000",
            "FOR UPDATE is not allowed with window functions",
        ),
        ("select distinct v from t for update", "0A000", "FOR UPDATE is not allowed with DISTINCT clause"),
        ("select v from t group by v for update", "0A000", "FOR UPDATE is not allowed with GROUP BY clause"),
        ("select 1 from t having true for share", "0A000", "FOR SHARE is not allowed with HAVING clause"),
        (
            "select * from t union select * from t for update",
            "0A000",
            "FOR UPDATE is not allowed with UNION/INTERSECT/EXCEPT",
        ),
        ("select * from t for update of u", "42P01", "relation \"u\" in FOR UPDATE clause not found in FROM clause"),
        ("select * from t a for update of t", "42P01", "relation \"t\" in FOR UPDATE clause not found in FROM clause"),
    ] {
        assert_eq!(fails(&c, sql).await, (state.to_string(), msg.to_string()), "{sql}");
    }
    assert_eq!(texts(rows(&c, "select id from t where id = 2 for no key update skip locked").await), [["2"]]);
    assert_eq!(texts(rows(&c, "select id from t a where id = 3 for key share of a, a").await), [["3"]]);
    assert_eq!(texts(rows(&c, "select id from t where id = 1 for update for share nowait").await), [["1"]]);
}
