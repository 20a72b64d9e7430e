//! A simple-protocol Query message holding several statements runs as one implicit
//! transaction block, as PostgreSQL runs it (`psql -c "a; b; c"` sends one such message):
//! an error anywhere rolls back the whole message; BEGIN inside it upgrades the implicit
//! block to a normal one holding the statements before it; COMMIT and ROLLBACK inside it end
//! the implicit block (with PostgreSQL's warning) and the statements after them form a new
//! one; VACUUM and SAVEPOINT are refused in it. The cases run on settledb and on PostgreSQL 15
//! through the same psql binary and must print the same. Then what PostgreSQL cannot show:
//! DDL, which the engine runs in a transaction of its own, commits what came before it.

mod common;

use std::path::Path;

use common::{connect, psql_run, require, rows, run, text, PgCluster, TestServer};

/// psql -X -At -c `sql` against PostgreSQL's port: what it printed on stdout and stderr.
fn pg_psql(psql: &Path, port: u16, sql: &str) -> (String, String) {
    text(&run(psql, &["-X", "-At", "-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres", "-c", sql]))
}

/// Each case: one message, then what table `t` holds afterwards (and the session's state).
const CASES: &[&str] = &[
    "insert into t values (1); insert into t values (2); select 1/0",
    "insert into t values (1); insert into t values (2); select count(*) from t",
    "insert into t values (1); commit; insert into t values (2); select 1/0",
    "insert into t values (1); rollback; insert into t values (2)",
    // BEGIN upgrades the implicit block; psql's session ends, so the open block rolls back.
    "insert into t values (1); begin; insert into t values (2)",
    "insert into t values (1); begin; insert into t values (2); commit; insert into t values (3); select 1/0",
    "insert into t values (1); begin; insert into t values (1)",
    "select 1; vacuum t",
    "vacuum t; select 1",
    "commit; vacuum t",
    "insert into t values (1); savepoint a",
    "select 1; release savepoint a",
    "select 1; begin isolation level repeatable read; select 2; commit",
    "set transaction isolation level read committed; select 2",
    "set transaction isolation level repeatable read",
    "set transaction read only; insert into t values (3)",
    "set transaction isolation level repeatable read; begin; insert into t values (3); commit",
    "select 1; begin isolation level read committed; insert into t values (4); commit",
    "begin isolation level repeatable read; insert into t values (5); commit; select count(*) from t",
    "select 1; alter system set work_mem = '5MB'",
    "insert into t values (6); select 1 from; select 2",
    "insert into t values (7); insert into t values (7); insert into t values (8)",
    "insert into t values (9); select 1; checkpoint",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_messages_match_postgresql() {
    let Some(psql) = require("psql") else { return };
    let Some(pg) = PgCluster::start(&[]) else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let setup = "create table t (a int primary key)";
    assert!(psql_run(&psql, &s, setup).status.success());
    pg.psql(setup);
    for case in CASES {
        let mut ours = text(&psql_run(&psql, &s, case));
        let theirs = pg_psql(&psql, pg.port, case);
        if theirs.1.starts_with("ERROR:  syntax error") {
            // The parsers word syntax errors differently; that nothing ran is what counts.
            assert!(ours.1.starts_with("ERROR:  "), "{case:?}: {ours:?}");
            ours.1 = theirs.1.clone();
        }
        assert_eq!(ours, theirs, "the message {case:?}: settledb printed the first, PostgreSQL the second");
        let after = "select a from t order by a";
        let ours = text(&psql_run(&psql, &s, after));
        let theirs = pg_psql(&psql, pg.port, after);
        assert_eq!(ours, theirs, "t after {case:?}: settledb holds the first, PostgreSQL the second");
        let reset = "delete from t";
        assert!(psql_run(&psql, &s, reset).status.success());
        pg.psql(reset);
    }
}

/// BEGIN in a message leaves the block open after it, holding the statements before BEGIN;
/// other sessions see none of it until COMMIT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn begin_in_a_message_opens_a_block_holding_what_came_before() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let (a, b) = (connect(&s).await, connect(&s).await);
    a.batch_execute("create table t (a int primary key)").await.unwrap();
    a.batch_execute("insert into t values (1); begin; insert into t values (2)").await.unwrap();
    assert!(!a.is_closed());
    assert_eq!(rows(&a, "select count(*) from t").await, vec![vec![Some("2".to_string())]]);
    assert_eq!(rows(&b, "select count(*) from t").await, vec![vec![Some("0".to_string())]]);
    a.batch_execute("rollback").await.unwrap();
    assert_eq!(rows(&b, "select count(*) from t").await, vec![vec![Some("0".to_string())]]);
    // An error in the block the message opened fails it: only ROLLBACK is accepted.
    let e = a.batch_execute("insert into t values (3); begin; select 1/0; insert into t values (4)").await;
    assert_eq!(e.map_err(|e| common::code(&e)).unwrap_err(), "22012");
    let e = a.batch_execute("select 1").await.map_err(|e| common::code(&e));
    assert_eq!(e.unwrap_err(), "25P02");
    a.batch_execute("rollback").await.unwrap();
    assert_eq!(rows(&b, "select count(*) from t").await, vec![vec![Some("0".to_string())]]);
    // now() is the implicit block's start in every statement of it.
    let r = rows(&a, "select now()::text; select pg_sleep(0.01); select now()::text").await;
    assert_eq!(r.len(), 3, "{r:?}");
    assert_eq!(r[0], r[2], "now() in one implicit block");
}

/// The difference from PostgreSQL: DDL cannot join the implicit block, so the statements
/// before it commit, it commits, and an error after it rolls back only what followed it.
/// Inside an explicit block DDL stays refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_in_a_message_commits_what_came_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    // What psql -c scripts and pgbench's set-up do: DDL and the rows it needs in one message.
    c.batch_execute("create table t (a int primary key); insert into t values (1); create index t_a on t (a)")
        .await
        .unwrap();
    let e =
        c.batch_execute("insert into t values (2); create table u (a int); insert into t values (3); select 1/0").await;
    assert_eq!(e.map_err(|e| common::code(&e)).unwrap_err(), "22012");
    assert_eq!(rows(&c, "select a from t order by a").await, vec![vec![Some("1".into())], vec![Some("2".into())]]);
    assert_eq!(rows(&c, "select count(*) from u").await, vec![vec![Some("0".into())]]);
    let e = c.batch_execute("insert into t values (4); begin; create table v (a int)").await;
    assert_eq!(e.map_err(|e| common::code(&e)).unwrap_err(), "25001");
    c.batch_execute("rollback").await.unwrap();
    assert_eq!(rows(&c, "select count(*) from t").await, vec![vec![Some("2".into())]]);
}
