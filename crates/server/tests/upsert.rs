//! `INSERT ... ON CONFLICT` through tokio-postgres (and psql for the command tag), against
//! answers worked out by hand and checked on PostgreSQL 15: DO NOTHING and DO UPDATE with
//! `excluded`, the target's alias, a WHERE on DO UPDATE, RETURNING of inserted and updated
//! rows, `INSERT 0 n` counting both, multi-row VALUES and INSERT ... SELECT, NULL keys,
//! composite keys inferred in any column order, ON CONSTRAINT, `$n` through the extended
//! protocol, PostgreSQL's errors (42P10, 21000, 42601, 42704, 42703, 42702, 42P01, 0A000,
//! 23505 on an index that is not an arbiter), and concurrency: a session upserting a key
//! another session's open transaction inserted waits for it (seen in `pg_locks`) and then
//! updates the committed row, or inserts if it rolled back; REPEATABLE READ gets 40001 for a
//! row its snapshot cannot see; sessions hammering the same keys lose no increment and never
//! see 23505. Every concurrent step is bounded by a client-side timeout, so a hang fails.
//! Before ON CONFLICT was built every such statement was 0A000.

mod common;

use common::{bounded, code, connect, rows, until_waiting, Row, TestServer};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, SimpleQueryMessage};

/// Rows given as text literals, `None` for NULL.
fn expect(v: &[&[Option<&str>]]) -> Vec<Row> {
    v.iter().map(|r| r.iter().map(|c| c.map(str::to_string)).collect()).collect()
}

/// The SQLSTATE and message of a statement that must fail.
async fn error(c: &Client, sql: &str) -> (String, String) {
    let e = c.simple_query(sql).await.expect_err(sql);
    let msg = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
    (code(&e), msg)
}

/// The row count of a statement's command tag (`INSERT 0 n` -> n) and its rows.
async fn run(c: &Client, sql: &str) -> (u64, Vec<Row>) {
    let msgs = c.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut n = None;
    let mut out = Vec::new();
    for m in &msgs {
        match m {
            SimpleQueryMessage::Row(r) => out.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect()),
            SimpleQueryMessage::CommandComplete(k) => n = Some(*k),
            _ => {}
        }
    }
    (n.expect("a command tag"), out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn do_nothing_and_do_update_with_excluded() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute(
        "create table kv (k int primary key, v int not null, note text unique);
         insert into kv values (1, 10, 'one'), (2, 20, 'two')",
    )
    .await
    .unwrap();

    // DO NOTHING: a conflict is skipped (0 rows), a new key inserted.
    assert_eq!(run(&c, "insert into kv values (1, 99, 'x') on conflict (k) do nothing").await.0, 0);
    assert_eq!(run(&c, "insert into kv values (3, 30, 'three') on conflict (k) do nothing").await.0, 1);
    // Without a target every unique index arbitrates: 'two' conflicts on note.
    assert_eq!(run(&c, "insert into kv values (9, 90, 'two') on conflict do nothing").await.0, 0);

    // DO UPDATE with excluded and the table's own columns; RETURNING the updated row.
    let (n, r) =
        run(&c, "insert into kv values (1, 5, 'uno') on conflict (k) do update set v = kv.v + excluded.v, note = excluded.note returning *")
            .await;
    assert_eq!((n, r), (1, expect(&[&[Some("1"), Some("15"), Some("uno")]])));

    // Several rows: inserted and updated alike are counted and returned, in order.
    let (n, r) = run(
        &c,
        "insert into kv values (2, 1, null), (4, 40, 'four'), (3, 3, null)
           on conflict (k) do update set v = kv.v + excluded.v returning k, v",
    )
    .await;
    assert_eq!(n, 3);
    assert_eq!(r, expect(&[&[Some("2"), Some("21")], &[Some("4"), Some("40")], &[Some("3"), Some("33")]]));

    // The alias names the target; WHERE on DO UPDATE skips rows where it is not true.
    let (n, r) = run(
        &c,
        "insert into kv as x values (1, 0, null), (2, 0, null)
           on conflict (k) do update set v = x.v * 2 where x.v > 20 returning x.k, x.v",
    )
    .await;
    assert_eq!((n, r), (1, expect(&[&[Some("2"), Some("42")]])));

    // INSERT ... SELECT as the source.
    let (n, _) = run(
        &c,
        "insert into kv select k + 3, v, null from kv where k <= 2 on conflict (k) do update set v = excluded.v + 1000",
    )
    .await;
    assert_eq!(n, 2);
    assert_eq!(
        rows(&c, "select k, v, note from kv order by k").await,
        expect(&[
            &[Some("1"), Some("15"), Some("uno")],
            &[Some("2"), Some("42"), Some("two")],
            &[Some("3"), Some("33"), Some("three")],
            &[Some("4"), Some("1015"), Some("four")],
            &[Some("5"), Some("42"), None],
        ])
    );

    // A NULL in a unique key conflicts with nothing: two NULL notes, both inserted.
    let (n, _) = run(&c, "insert into kv values (6, 0, null), (7, 0, null) on conflict (note) do nothing").await;
    assert_eq!(n, 2);
    // DO NOTHING proposing the same key twice: the second meets the first and is skipped.
    let (n, _) = run(&c, "insert into kv values (8, 1, 'eight'), (8, 2, 'eight') on conflict do nothing").await;
    assert_eq!(n, 1);

    // psql prints PostgreSQL's tag.
    if let Some(psql) = common::require("psql") {
        let o = common::psql_run(
            &psql,
            &srv,
            "insert into kv values (100, 1, null), (1, 1, null) on conflict (k) do update set v = kv.v + 1",
        );
        assert_eq!(common::text(&o).0.trim(), "INSERT 0 2");
    }
    drop(c);
    srv.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_keys_and_on_constraint() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute(
        "create table stock (w int, item int, qty int, code text, primary key (w, item), unique (code));
         insert into stock values (1, 1, 10, 'a'), (1, 2, 20, 'b')",
    )
    .await
    .unwrap();
    // The key's columns in another order (and repeated) infer the same index.
    let (n, r) = run(
        &c,
        "insert into stock values (1, 2, 5, 'z') on conflict (item, w, item) do update set qty = stock.qty + excluded.qty returning qty, code",
    )
    .await;
    assert_eq!((n, r), (1, expect(&[&[Some("25"), Some("b")]])));
    // Same warehouse, another item: inserted.
    assert_eq!(run(&c, "insert into stock values (1, 3, 1, 'c') on conflict (w, item) do nothing").await.0, 1);
    // ON CONSTRAINT names the index: the primary key, then the unique column.
    let (n, _) =
        run(&c, "insert into stock values (1, 1, 1, 'q') on conflict on constraint stock_pkey do update set qty = 0")
            .await;
    assert_eq!(n, 1);
    let (n, r) = run(
        &c,
        "insert into stock values (9, 9, 7, 'a') on conflict on constraint stock_code_key do update set qty = excluded.qty returning w, item, qty",
    )
    .await;
    assert_eq!((n, r), (1, expect(&[&[Some("1"), Some("1"), Some("7")]])));
    assert_eq!(
        rows(&c, "select w, item, qty, code from stock order by w, item").await,
        expect(&[
            &[Some("1"), Some("1"), Some("7"), Some("a")],
            &[Some("1"), Some("2"), Some("25"), Some("b")],
            &[Some("1"), Some("3"), Some("1"), Some("c")],
        ])
    );
    drop(c);
    srv.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_postgresql_sqlstates() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute(
        "create table t (a int primary key, b int, c text unique);
         create table plain (a int);
         insert into t values (1, 1, 'x')",
    )
    .await
    .unwrap();
    let cases: &[(&str, &str, &str)] = &[
        (
            "insert into t values (2, 2, 'y') on conflict (b) do nothing",
            "42P10",
            "there is no unique or exclusion constraint matching the ON CONFLICT specification",
        ),
        (
            "insert into t values (2, 2, 'y') on conflict (a, c) do nothing",
            "42P10",
            "there is no unique or exclusion constraint matching the ON CONFLICT specification",
        ),
        (
            "insert into t values (2, 2, 'y'), (2, 3, 'z') on conflict (a) do update set b = excluded.b",
            "21000",
            "ON CONFLICT DO UPDATE command cannot affect row a second time",
        ),
        (
            "insert into t values (1, 2, 'y') on conflict do update set b = 1",
            "42601",
            "ON CONFLICT DO UPDATE requires inference specification or constraint name",
        ),
        (
            "insert into t values (1, 2, 'y') on conflict on constraint nope do nothing",
            "42704",
            "constraint \"nope\" for table \"t\" does not exist",
        ),
        ("insert into t values (1, 2, 'y') on conflict (nope) do nothing", "42703", "column \"nope\" does not exist"),
        (
            "insert into t values (1, 2, 'y') on conflict (a) do update set nope = 1",
            "42703",
            "column \"nope\" of relation \"t\" does not exist",
        ),
        (
            "insert into t values (1, 2, 'y') on conflict (a) do update set b = b + 1",
            "42702",
            "column reference \"b\" is ambiguous",
        ),
        ("insert into t values (3, 2, 'y') on conflict (a) do update set b = 1 returning excluded.b", "42P01", ""),
        ("insert into t values (1, 2, 'y') on conflict (a) where a > 0 do nothing", "0A000", ""),
        ("insert into t values (1, 2, 'y') on conflict (lower(c)) do nothing", "0A000", ""),
        // A conflict on an index that is not an arbiter is an error, as in PostgreSQL.
        (
            "insert into t values (5, 2, 'x') on conflict (a) do nothing",
            "23505",
            "duplicate key value violates unique constraint \"t_c_key\"",
        ),
        (
            "insert into plain values (1) on conflict (a) do nothing",
            "42P10",
            "there is no unique or exclusion constraint matching the ON CONFLICT specification",
        ),
    ];
    for (sql, want, msg) in cases {
        let (got, m) = error(&c, sql).await;
        assert_eq!(&got, want, "{sql}: {m}");
        assert!(m.starts_with(msg), "{sql}: {m}");
    }
    // 21000 failed the statement: nothing of it stays.
    assert_eq!(rows(&c, "select a, b, c from t order by a").await, expect(&[&[Some("1"), Some("1"), Some("x")]]));
    // Inside a block the error fails the block, as any statement's error does.
    c.batch_execute("begin").await.unwrap();
    error(&c, "insert into t values (7, 1, 'q'), (7, 2, 'r') on conflict (a) do update set b = 0").await;
    assert_eq!(error(&c, "select 1").await.0, "25P02");
    c.batch_execute("rollback").await.unwrap();
    // DO NOTHING on a table without unique indexes simply inserts.
    assert_eq!(run(&c, "insert into plain values (1), (1) on conflict do nothing").await.0, 2);
    drop(c);
    srv.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_through_the_extended_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute("create table acct (id int primary key, balance bigint not null, name text)").await.unwrap();
    let st = c
        .prepare(
            "insert into acct values ($1, $2, $3) on conflict (id)
               do update set balance = acct.balance + $4 where acct.name = $3 returning id, balance",
        )
        .await
        .unwrap();
    assert_eq!(st.params(), &[Type::INT4, Type::INT8, Type::TEXT, Type::INT8]);
    let r = c.query(&st, &[&1i32, &100i64, &"ann", &5i64]).await.unwrap();
    assert_eq!((r[0].get::<_, i32>(0), r[0].get::<_, i64>(1)), (1, 100));
    let r = c.query(&st, &[&1i32, &0i64, &"ann", &5i64]).await.unwrap();
    assert_eq!(r[0].get::<_, i64>(1), 105);
    // The WHERE is false for another name: nothing returned, nothing counted.
    assert!(c.query(&st, &[&1i32, &0i64, &"bob", &5i64]).await.unwrap().is_empty());
    let n = c
        .execute("insert into acct values ($1, 1, 'x'), ($2, 1, 'y') on conflict (id) do nothing", &[&1i32, &2i32])
        .await
        .unwrap();
    assert_eq!(n, 1);
    drop(c);
    srv.stop();
}

/// One session's open transaction inserted a key; another upserts it and must wait for that
/// transaction, then update the committed row (DO UPDATE), skip it (DO NOTHING), or insert
/// when it rolled back. A REPEATABLE READ snapshot that cannot see the conflicting row gets
/// 40001.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_upsert_waits_then_updates() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let a = connect(&srv).await;
    let b = std::sync::Arc::new(connect(&srv).await);
    let watch = connect(&srv).await;
    a.batch_execute("create table hits (k int primary key, n int not null)").await.unwrap();
    let upsert = "insert into hits values (1, 1) on conflict (k) do update set n = hits.n + excluded.n returning n";

    for (end, want) in [("commit", "2"), ("rollback", "1")] {
        a.batch_execute("delete from hits").await.unwrap();
        a.batch_execute("begin").await.unwrap();
        a.simple_query(upsert).await.unwrap();
        let b2 = b.clone();
        let waiter = tokio::spawn(async move { run(&b2, upsert).await });
        until_waiting(&watch, 1).await;
        a.batch_execute(end).await.unwrap();
        let (n, r) = bounded("the waiting upsert", waiter).await.unwrap();
        assert_eq!((n, r), (1, expect(&[&[Some(want)]])), "after {end}");
        assert_eq!(rows(&a, "select count(*) from hits").await, expect(&[&[Some("1")]]));
    }

    // DO NOTHING waits too, then skips the committed row.
    a.batch_execute("begin").await.unwrap();
    a.simple_query("insert into hits values (10, 1)").await.unwrap();
    let b2 = b.clone();
    let waiter =
        tokio::spawn(async move { run(&b2, "insert into hits values (10, 5) on conflict (k) do nothing").await });
    until_waiting(&watch, 1).await;
    a.batch_execute("commit").await.unwrap();
    assert_eq!(bounded("the waiting DO NOTHING", waiter).await.unwrap().0, 0);
    assert_eq!(rows(&a, "select n from hits where k = 10").await, expect(&[&[Some("1")]]));

    // REPEATABLE READ: a row committed after the snapshot is a serialization failure.
    for action in ["do nothing", "do update set n = 0"] {
        // The snapshot is taken by the first statement that reads a table.
        a.batch_execute("begin isolation level repeatable read; select count(*) from hits").await.unwrap();
        b.batch_execute("insert into hits values (20, 1)").await.unwrap();
        let (got, _) = error(&a, &format!("insert into hits values (20, 2) on conflict (k) {action}")).await;
        assert_eq!(got, "40001", "{action}");
        a.batch_execute("rollback").await.unwrap();
        b.batch_execute("delete from hits where k = 20").await.unwrap();
    }
    // Its own rows and rows committed before the snapshot are fine.
    a.batch_execute("begin isolation level repeatable read").await.unwrap();
    assert_eq!(run(&a, "insert into hits values (10, 1) on conflict (k) do update set n = hits.n + 1").await.0, 1);
    assert_eq!(run(&a, "insert into hits values (10, 1) on conflict (k) do update set n = hits.n + 1").await.0, 1);
    a.batch_execute("commit").await.unwrap();
    assert_eq!(rows(&a, "select n from hits where k = 10").await, expect(&[&[Some("3")]]));
    drop((a, watch));
    srv.stop();
}

/// Sessions upserting the same few keys at once, in READ COMMITTED: every increment lands,
/// no session sees 23505, and each key ends as one row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_hammering_the_same_keys_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute("create table ctr (k int primary key, n int not null)").await.unwrap();
    let (sessions, rounds, keys) = (4i32, 40i32, 3i32);
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let client = connect(&srv).await;
        tasks.push(tokio::spawn(async move {
            for i in 0..rounds {
                let k = (i + s) % keys;
                let upsert = "insert into ctr values ($1, 1) on conflict (k) do update set n = ctr.n + 1";
                if i % 2 == 0 {
                    // In a block that stays open a little longer, so others wait for it.
                    client.batch_execute("begin").await?;
                    client.execute(upsert, &[&k]).await?;
                    client.batch_execute("select count(*) from ctr; commit").await?;
                } else {
                    client.execute(upsert, &[&k]).await?;
                }
            }
            Ok::<_, tokio_postgres::Error>(())
        }));
    }
    for t in tasks {
        if let Err(e) = bounded("a hammering session", t).await.unwrap() {
            panic!("{}: {e}", code(&e));
        }
    }
    let total = sessions * rounds;
    assert_eq!(
        rows(&c, "select count(*), sum(n) from ctr").await,
        expect(&[&[Some(&keys.to_string()), Some(&total.to_string())]])
    );
    drop(c);
    srv.stop();
}
