//! Non-recursive common table expressions (`WITH name [(cols)] AS (SELECT ...) SELECT ...`)
//! through tokio-postgres, on a small employees/departments schema whose answers are worked
//! out by hand below. Covers: a CTE joined to a table, a CTE reading an earlier one, a CTE read
//! twice and evaluated once (a `nextval` in it gives both reads the same value), a CTE in an
//! `IN (SELECT ...)` subquery, column lists, aggregates, ORDER BY/LIMIT, a CTE shadowing a
//! table, `$n` inside a CTE through the extended protocol (Describe's parameter and column
//! types) and SQL-level PREPARE, and PostgreSQL's errors (42712, 42P10). Before CTEs were
//! built every WITH was 0A000. `WITH RECURSIVE`: counting,
//! UNION's duplicate removal ending a cycle, a tree walk joined to a table, a recursive CTE
//! read by a later one, `$n` in the recursive term, and PostgreSQL 15's 42P19, 42804 and 0A000
//! refusals (answers and messages checked on PostgreSQL 15). Data-modifying CTEs and a WITH
//! before INSERT, UPDATE and DELETE (`data_modifying_*` below; before they were built both
//! were 0A000): rows moved between tables, RETURNING rows as the CTE's rows, a CTE that is
//! never read still running, ON CONFLICT in a CTE, the main statement's command tag and
//! Describe, what the other parts of the statement see, PostgreSQL 15's errors and the
//! rollback of the CTE's changes when the statement fails (answers, tags and messages checked
//! on PostgreSQL 15.18, except where a test says this engine differs).

mod common;

use common::{code, connect, psql_run, require, rows, text, Row, TestServer};
use tokio_postgres::types::Type;
use tokio_postgres::Client;

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

/// emp:  1 ann eng 100.00 | 2 bob eng 80.00 | 3 cy ops 50.00 | 4 di (none) 70.00 | 5 ed sales 90.50
async fn schema(c: &Client) {
    c.batch_execute(
        "create table dept (id int primary key, title text);
         insert into dept values (1, 'eng'), (2, 'ops'), (3, 'sales');
         create table emp (id int primary key, name text, dept int, salary numeric(10,2));
         insert into emp values (1, 'ann', 1, 100.00), (2, 'bob', 1, 80.00), (3, 'cy', 2, 50.00),
                                (4, 'di', null, 70.00), (5, 'ed', 3, 90.50);
         create sequence seq",
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctes_read_like_tables() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    schema(&c).await;

    // Joined to a table, under an alias.
    let sql = "with rich as (select id, name, dept from emp where salary >= 80)
               select r.name, d.title from rich r join dept d on d.id = r.dept order by r.name";
    assert_eq!(
        rows(&c, sql).await,
        expect(&[&[Some("ann"), Some("eng")], &[Some("bob"), Some("eng")], &[Some("ed"), Some("sales")]])
    );

    // The second CTE reads the first; grouping inside a CTE.
    let sql = "with a as (select dept, salary from emp where dept is not null),
                    b as (select dept, sum(salary) as total from a group by dept)
               select dept, total from b order by dept";
    assert_eq!(
        rows(&c, sql).await,
        expect(&[&[Some("1"), Some("180.00")], &[Some("2"), Some("50.00")], &[Some("3"), Some("90.50")]])
    );

    // Read twice in one FROM list, and once more from a scalar subquery.
    let sql = "with d as (select id, title from dept)
               select x.title, y.title, (select count(*) from d) from d x join d y on y.id = x.id + 1 order by x.id";
    assert_eq!(
        rows(&c, sql).await,
        expect(&[&[Some("eng"), Some("ops"), Some("3")], &[Some("ops"), Some("sales"), Some("3")]])
    );

    // Evaluated once per statement: both reads see the one nextval it took.
    let sql = "with s as (select nextval('seq') as v) select a.v, b.v from s a, s b";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("1"), Some("1")]]));

    // In an IN subquery of the main query.
    let sql = "with eng as (select id from dept where title = 'eng')
               select name from emp where dept in (select id from eng) order by name";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("ann")], &[Some("bob")]]));

    // A column list renames the leading columns; the rest keep their names.
    let sql = "with t(k, label) as (select id, title from dept) select label from t where k = 2";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("ops")]]));
    let sql = "with t(k) as (select id, title from dept) select k, title from t order by k desc limit 1";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("3"), Some("sales")]]));
    let st = c.prepare("with t(k, label) as (select id, title from dept) select * from t").await.unwrap();
    let cols: Vec<(&str, &Type)> = st.columns().iter().map(|c| (c.name(), c.type_())).collect();
    assert_eq!(cols, vec![("k", &Type::INT4), ("label", &Type::TEXT)]);

    // Aggregates over a CTE.
    let sql = "with s as (select salary from emp) select count(*), min(salary), max(salary), sum(salary) from s";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("5"), Some("50.00"), Some("100.00"), Some("390.50")]]));

    // ORDER BY, LIMIT and OFFSET over a CTE (salaries 100, 90.50, 80, 70, 50).
    let sql = "with s as (select name, salary from emp) select name from s order by salary desc limit 2 offset 1";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("ed")], &[Some("bob")]]));

    // A correlated subquery over a CTE, naming the outer row.
    let sql = "with d as (select id, title from dept)
               select name, (select title from d where d.id = emp.dept) from emp where id <= 3 order by id";
    assert_eq!(
        rows(&c, sql).await,
        expect(&[&[Some("ann"), Some("eng")], &[Some("bob"), Some("eng")], &[Some("cy"), Some("ops")]])
    );

    // A set operation over a CTE; a WITH inside a subquery in FROM.
    let sql = "with a as (select 1 as x) select x from a union all select x + 1 from a order by 1";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("1")], &[Some("2")]]));
    let sql = "select s.x from (with a as (select title as x from dept where id = 3) select x from a) s";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("sales")]]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cte_names_shadow_tables() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    schema(&c).await;
    let sql = "with dept as (select 42 as id, 'fake' as title) select id, title from dept";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("42"), Some("fake")]]));
    // In its own query a (non-recursive) CTE's name still means the table.
    let sql = "with dept as (select id from dept where id < 3) select count(*) from dept";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("2")]]));
    // The CTE ends with its statement; a schema-qualified name means the table.
    assert_eq!(rows(&c, "select count(*) from dept").await, expect(&[&[Some("3")]]));
    let sql = "with dept as (select 1 as id) select count(*) from public.dept";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("3")]]));
    // INSERT ... SELECT from a CTE.
    let n = c.execute("insert into dept with n as (select 4 as id, 'hr' as title) select id, title from n", &[]);
    assert_eq!(n.await.unwrap(), 1);
    assert_eq!(rows(&c, "select title from dept where id = 4").await, expect(&[&[Some("hr")]]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_inside_ctes() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    schema(&c).await;

    // $1 typed from the CTE's WHERE, $2 from the main query's comparison with a CTE column.
    let sql = "with e as (select id, name from emp where dept = $1)
               select name, id * 10 as x from e where id > $2 order by id";
    let st = c.prepare(sql).await.unwrap();
    assert_eq!(st.params(), &[Type::INT4, Type::INT4]);
    let cols: Vec<(&str, &Type)> = st.columns().iter().map(|c| (c.name(), c.type_())).collect();
    assert_eq!(cols, vec![("name", &Type::TEXT), ("x", &Type::INT4)]);
    let got: Vec<(String, i32)> =
        c.query(&st, &[&1i32, &0i32]).await.unwrap().iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(got, vec![("ann".to_string(), 10), ("bob".to_string(), 20)]);
    let got = c.query(&st, &[&1i32, &1i32]).await.unwrap();
    assert_eq!(got.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>(), vec!["bob"]);

    // $1 inside a CTE read from an IN subquery.
    let sql = "with d as (select id from dept where title = $1) select name from emp where dept in (select id from d)";
    let st = c.prepare(sql).await.unwrap();
    assert_eq!(st.params(), &[Type::TEXT]);
    let got = c.query(&st, &[&"ops"]).await.unwrap();
    assert_eq!(got.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>(), vec!["cy"]);

    // SQL-level PREPARE checks the main query's FROM with the CTE in scope.
    c.batch_execute(
        "prepare p(int) as with e as (select name from emp where dept = $1) select name from e order by name",
    )
    .await
    .unwrap();
    assert_eq!(rows(&c, "execute p(1)").await, expect(&[&[Some("ann")], &[Some("bob")]]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cte_errors() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    schema(&c).await;

    let (sqlstate, msg) = error(&c, "with x as (select 1), x as (select 2) select * from x").await;
    assert_eq!((sqlstate.as_str(), msg.as_str()), ("42712", "WITH query name \"x\" specified more than once"));

    let (sqlstate, msg) = error(&c, "with x(a, b) as (select 1) select * from x").await;
    assert_eq!(
        (sqlstate.as_str(), msg.as_str()),
        ("42P10", "WITH query \"x\" has 1 columns available but 2 columns specified")
    );

    // A CTE is not visible before it is defined, nor after its statement.
    let (sqlstate, _) = error(&c, "with a as (select * from b), b as (select 1 as y) select * from a").await;
    assert_eq!(sqlstate, "42P01");
    let (sqlstate, _) = error(&c, "select * from x").await;
    assert_eq!(sqlstate, "42P01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursive_ctes() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    schema(&c).await;
    c.batch_execute("create table boss (id int primary key, manager int); insert into boss values (1, null), (2, 1), (3, 2), (4, 2), (5, 1)")
        .await
        .unwrap();

    let sql = "with recursive t(n) as (select 1 union all select n + 1 from t where n < 5) select * from t";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("1")], &[Some("2")], &[Some("3")], &[Some("4")], &[Some("5")]]));
    // UNION drops rows already found, which ends a cycle UNION ALL would follow forever.
    let sql = "with recursive t(n) as (select 1 union select n % 3 + 1 from t) select * from t order by n";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("1")], &[Some("2")], &[Some("3")]]));
    // A walk down the reporting tree from ann, joined to a table, with its depth.
    let sql = "with recursive under(id, depth) as (
                   select id, 0 from boss where id = 1
                   union all
                   select b.id, u.depth + 1 from boss b join under u on b.manager = u.id)
               select e.name, u.depth from under u join emp e on e.id = u.id order by u.depth, e.name";
    assert_eq!(
        rows(&c, sql).await,
        expect(&[
            &[Some("ann"), Some("0")],
            &[Some("bob"), Some("1")],
            &[Some("ed"), Some("1")],
            &[Some("cy"), Some("2")],
            &[Some("di"), Some("2")],
        ])
    );
    // Text grows; a later CTE reads the recursive one; a non-recursive CTE under RECURSIVE.
    let sql = "with recursive t(s) as (select 'a'::text union all select s || 'a' from t where length(s) < 3),
                    u as (select length(s) * 10 as m from t), v as (select 1 as one)
               select m from u, v order by m";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("10")], &[Some("20")], &[Some("30")]]));
    let sql = "with recursive t(n) as (select 1 union all select n + 1 from t where n < 3) select * from t limit 2";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("1")], &[Some("2")]]));
    // $n in the recursive term, typed by Describe.
    let st = c
        .prepare("with recursive t(n) as (select 1 union all select n + 1 from t where n < $1) select count(*) from t")
        .await
        .unwrap();
    assert_eq!(st.params(), &[Type::INT4]);
    let n: i64 = c.query_one(&st, &[&10i32]).await.unwrap().get(0);
    assert_eq!(n, 10);

    let refused = [
        (
            "with recursive t(n) as (select 1 intersect select n + 1 from t) select * from t",
            "42P19",
            "recursive query \"t\" does not have the form non-recursive-term UNION [ALL] recursive-term",
        ),
        (
            "with recursive t(n) as (select n from t union all select 1) select * from t",
            "42P19",
            "recursive reference to query \"t\" must not appear within its non-recursive term",
        ),
        (
            "with recursive t(n) as (select 1 union all select t.n + u.n from t, t u) select * from t",
            "42P19",
            "recursive reference to query \"t\" must not appear more than once",
        ),
        (
            "with recursive t(n) as (select 1 union all select n + 1 from t where n < 3 union all select 7) select * from t",
            "42P19",
            "recursive reference to query \"t\" must not appear within its non-recursive term",
        ),
        (
            "with recursive t(n) as (select 1 union all select count(*) from t) select * from t",
            "42P19",
            "aggregate functions are not allowed in a recursive query's recursive term",
        ),
        (
            "with recursive t(n) as (select 1::int union all select (n + 1)::bigint from t where n < 5) select * from t",
            "42804",
            "recursive query \"t\" column 1 has type integer in non-recursive term but type bigint overall",
        ),
        (
            "with recursive t(n) as (select 1 union all select n + 1 from t order by 1) select * from t",
            "0A000",
            "ORDER BY in a recursive query is not implemented",
        ),
    ];
    for (sql, want_code, want_msg) in refused {
        let (sqlstate, msg) = error(&c, sql).await;
        assert_eq!((sqlstate.as_str(), msg.as_str()), (want_code, want_msg), "{sql}");
    }
}

/// a: 1 10 | 2 20 | 3 30 | 4 40;  b: empty.
async fn two_tables(c: &Client) {
    c.batch_execute(
        "create table a (id int primary key, v int);
         create table b (id int primary key, v int);
         insert into a values (1, 10), (2, 20), (3, 30), (4, 40)",
    )
    .await
    .unwrap();
}

async fn ids(c: &Client, table: &str) -> Vec<Row> {
    rows(c, &format!("select id from {table} order by id")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_modifying_ctes_run_once_to_completion() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    two_tables(&c).await;

    // Moving rows: the DELETE's RETURNING rows feed the main INSERT; one statement, one tag.
    let sql = "with moved as (delete from a where id <= 2 returning *) insert into b select * from moved";
    assert_eq!(c.execute(sql, &[]).await.unwrap(), 2);
    assert_eq!(ids(&c, "a").await, expect(&[&[Some("3")], &[Some("4")]]));
    assert_eq!(
        rows(&c, "select id, v from b order by id").await,
        expect(&[&[Some("1"), Some("10")], &[Some("2"), Some("20")]])
    );

    // RETURNING's expressions are the CTE's columns.
    let sql = "with ins as (insert into a values (5, 50), (6, 60) returning id, v * 2 as w)
               select id, w from ins order by id";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("5"), Some("100")], &[Some("6"), Some("120")]]));

    // Never read, with or without RETURNING: it runs all the same.
    assert_eq!(rows(&c, "with x as (insert into a values (7, 70)) select 1 as one").await, expect(&[&[Some("1")]]));
    assert_eq!(ids(&c, "a where id = 7").await, expect(&[&[Some("7")]]));
    let sql = "with x as (delete from a where id >= 6 returning *) select 'done'";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("done")]]));
    assert_eq!(ids(&c, "a").await, expect(&[&[Some("3")], &[Some("4")], &[Some("5")]]));

    // Read twice: the UPDATE ran once (v 30 -> 31, not 32).
    let sql = "with u as (update a set v = v + 1 where id = 3 returning v) select x.v, y.v from u x, u y";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("31"), Some("31")]]));

    // ON CONFLICT in a CTE.
    let sql = "with x as (insert into a values (4, 0), (8, 80) on conflict (id) do update set v = excluded.v
                          returning id, v)
               select id, v from x order by id";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("4"), Some("0")], &[Some("8"), Some("80")]]));

    // Two data-modifying CTEs and a DELETE as the main statement.
    let sql = "with d as (delete from b where id = 1 returning id), i as (insert into b values (9, 90) returning id)
               delete from a where id in (select id from d) or id = 8";
    assert_eq!(c.execute(sql, &[]).await.unwrap(), 1);
    assert_eq!(ids(&c, "b").await, expect(&[&[Some("2")], &[Some("9")]]));
    assert_eq!(ids(&c, "a").await, expect(&[&[Some("3")], &[Some("4")], &[Some("5")]]));

    // A column list renames the RETURNING columns; a WITH of SELECTs on the CTE's INSERT is
    // allowed (only a data-modifying CTE below the top level is refused).
    let sql = "with d(k, w) as (delete from b where id = 2 returning id, v) select k, w from d";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("2"), Some("20")]]));
    let sql = "with x as (with y as (select 10 as k) insert into b select k, k from y returning id) select id from x";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("10")]]));
    assert_eq!(ids(&c, "b").await, expect(&[&[Some("9")], &[Some("10")]]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_modifying_with_before_insert_update_delete() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    two_tables(&c).await;

    let sql = "with x as (select id, v * 10 as v from a where id >= 3) insert into b select * from x";
    assert_eq!(c.execute(sql, &[]).await.unwrap(), 2);
    assert_eq!(
        rows(&c, "select id, v from b order by id").await,
        expect(&[&[Some("3"), Some("300")], &[Some("4"), Some("400")]])
    );

    let sql = "with x as (select 100 as bump) update a set v = v + (select bump from x) where id = 4 returning v";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("140")]]));

    let sql = "with x as (select id from b) delete from a where id in (select id from x)";
    assert_eq!(c.execute(sql, &[]).await.unwrap(), 2);
    assert_eq!(ids(&c, "a").await, expect(&[&[Some("1")], &[Some("2")]]));

    // The command tag is the main statement's.
    if let Some(psql) = require("psql") {
        let tag = |sql: &str| text(&psql_run(&psql, &srv, sql)).0.trim().to_string();
        assert_eq!(
            tag("with d as (delete from a where id = 1 returning *) insert into b select * from d"),
            "INSERT 0 1"
        );
        assert_eq!(tag("with x as (select 3 as id) update b set v = 0 where id in (select id from x)"), "UPDATE 1");
        assert_eq!(tag("with x as (insert into a values (1, 1) returning id) delete from b where id = 4"), "DELETE 1");
    }

    // Describe: the main statement's parameters and columns, a CTE's `$n` typed too.
    let st = c.prepare("with d as (delete from a where id = $1 returning id, v) select v from d").await.unwrap();
    assert_eq!(st.params(), &[Type::INT4]);
    let cols: Vec<(&str, &Type)> = st.columns().iter().map(|c| (c.name(), c.type_())).collect();
    assert_eq!(cols, vec![("v", &Type::INT4)]);
    let st = c.prepare("with x as (select $1::int as k) insert into b select k, k from x returning id").await.unwrap();
    assert_eq!(st.params(), &[Type::INT4]);
    let cols: Vec<&str> = st.columns().iter().map(|c| c.name()).collect();
    assert_eq!(cols, vec!["id"]);
    assert_eq!(c.query(&st, &[&7i32]).await.unwrap().len(), 1);
    let st = c.prepare("with x as (select 8 as k) insert into b select k, k from x").await.unwrap();
    assert!(st.columns().is_empty());
}

/// PostgreSQL runs every part of the statement with one snapshot and one command ID, so the
/// main query and the other CTEs do not see a data-modifying CTE's changes. Here the CTEs run
/// first, in order, and each later part reads with a later command ID, so it does see them
/// (docs/server.md, "Data-modifying statements in WITH"). Each answer below was run on
/// PostgreSQL 15.18; where it differs, the comment says so and the test pins this engine's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_modifying_cte_and_what_the_statement_sees() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    two_tables(&c).await;

    // PostgreSQL 15 answers 4 (the count before the DELETE); this engine 3.
    let sql = "with d as (delete from a where id = 1 returning *) select count(*) from a";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("3")]]));
    // A later CTE: PostgreSQL 15 counts 3 rows (not the one inserted); this engine 4.
    let sql = "with i as (insert into a values (9, 90) returning id), e as (select count(*) from a) select * from e";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("4")]]));
    // Deleting the row the CTE deleted deletes nothing, in both (DELETE 0).
    let sql = "with d as (delete from a where id = 2 returning *) delete from a where id in (select id from d)";
    assert_eq!(c.execute(sql, &[]).await.unwrap(), 0);
    assert_eq!(ids(&c, "a").await, expect(&[&[Some("3")], &[Some("4")], &[Some("9")]]));
    // Updating the row the CTE updated: PostgreSQL 15 skips it (UPDATE 0, v 31); this engine
    // updates the CTE's version (UPDATE 1, v 41).
    let sql = "with u as (update a set v = v + 1 where id = 3 returning id)
               update a set v = v + 10 where id in (select id from u)";
    assert_eq!(c.execute(sql, &[]).await.unwrap(), 1);
    assert_eq!(rows(&c, "select v from a where id = 3").await, expect(&[&[Some("41")]]));
    // The CTE's RETURNING rows are the rows as it changed them, in both.
    let sql = "with u as (update a set v = 0 where id = 4 returning v) select u.v from u";
    assert_eq!(rows(&c, sql).await, expect(&[&[Some("0")]]));

    // Foreign keys: checked when the CTE's INSERT ends here (23503), at the end of the whole
    // statement in PostgreSQL 15 (which inserts both rows); the parent first works in both.
    c.batch_execute("create table parent (id int primary key); create table child (id int, p int references parent)")
        .await
        .unwrap();
    let sql = "with c as (insert into child values (1, 1)) insert into parent values (1)";
    assert_eq!(error(&c, sql).await.0, "23503");
    let sql = "with p as (insert into parent values (1)) insert into child values (1, 1)";
    assert_eq!(c.execute(sql, &[]).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_modifying_cte_errors() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    two_tables(&c).await;

    let (sqlstate, msg) = error(&c, "with x as (insert into a values (5, 50)) select * from x").await;
    assert_eq!((sqlstate.as_str(), msg.as_str()), ("0A000", "WITH query \"x\" does not have a RETURNING clause"));
    let (sqlstate, msg) =
        error(&c, "with d as (delete from a where id = 9) delete from b where id in (select id from d)").await;
    assert_eq!((sqlstate.as_str(), msg.as_str()), ("0A000", "WITH query \"d\" does not have a RETURNING clause"));

    let nested = "WITH clause containing a data-modifying statement must be at the top level";
    for sql in [
        "select * from (with x as (insert into a values (6, 60) returning *) select * from x) s",
        "with a1 as (with x as (insert into a values (6, 60) returning *) select * from x) select * from a1",
        "insert into b with d as (delete from a returning *) select * from d",
    ] {
        let (sqlstate, msg) = error(&c, sql).await;
        assert_eq!((sqlstate.as_str(), msg.as_str()), ("0A000", nested), "{sql}");
    }

    let (sqlstate, msg) = error(&c, "with x(p, q, r) as (delete from a returning id, v) select 1").await;
    assert_eq!(
        (sqlstate.as_str(), msg.as_str()),
        ("42P10", "WITH query \"x\" has 2 columns available but 3 columns specified")
    );

    // A read-only transaction names the main statement's command.
    c.batch_execute("begin read only").await.unwrap();
    let (sqlstate, msg) = error(&c, "with d as (delete from a returning *) select 1").await;
    assert_eq!((sqlstate.as_str(), msg.as_str()), ("25006", "cannot execute SELECT in a read-only transaction"));
    c.batch_execute("rollback; begin read only").await.unwrap();
    let (sqlstate, msg) = error(&c, "with d as (select 1) delete from a").await;
    assert_eq!((sqlstate.as_str(), msg.as_str()), ("25006", "cannot execute DELETE in a read-only transaction"));
    c.batch_execute("rollback").await.unwrap();

    // Nothing above changed a row.
    assert_eq!(rows(&c, "select count(*) from a").await, expect(&[&[Some("4")]]));
    assert_eq!(rows(&c, "select count(*) from b").await, expect(&[&[Some("0")]]));
}

/// The CTE's changes belong to the statement: when the main statement fails they go with it,
/// in autocommit and in a transaction block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_modifying_cte_rolls_back_with_its_statement() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    two_tables(&c).await;
    c.batch_execute("insert into b values (2, 0)").await.unwrap();

    // The main INSERT hits b's key 2 after the CTE deleted all of a.
    let sql = "with d as (delete from a returning *) insert into b select * from d";
    assert_eq!(error(&c, sql).await.0, "23505");
    assert_eq!(ids(&c, "a").await.len(), 4);
    // The main query fails after reading the CTE.
    let (sqlstate, _) = error(&c, "with d as (delete from a returning *) select 1 / 0 from d").await;
    assert_eq!(sqlstate, "22012");
    assert_eq!(ids(&c, "a").await.len(), 4);
    // A later CTE fails after an earlier one ran.
    let sql = "with d as (delete from a returning *), i as (insert into b values (2, 2) returning *) select 1";
    assert_eq!(error(&c, sql).await.0, "23505");
    assert_eq!(ids(&c, "a").await.len(), 4);

    // In a block: the block fails; ROLLBACK undoes the statement and what came before it.
    c.batch_execute("begin; insert into a values (8, 80)").await.unwrap();
    let sql = "with d as (delete from a returning *) insert into b select * from d";
    assert_eq!(error(&c, sql).await.0, "23505");
    assert_eq!(error(&c, "select 1").await.0, "25P02");
    c.batch_execute("rollback").await.unwrap();
    assert_eq!(ids(&c, "a").await, expect(&[&[Some("1")], &[Some("2")], &[Some("3")], &[Some("4")]]));
    assert_eq!(ids(&c, "b").await, expect(&[&[Some("2")]]));

    // In a block, a successful one commits with the block.
    c.batch_execute("begin").await.unwrap();
    let sql = "with d as (delete from a where id = 1 returning *) insert into b select * from d";
    assert_eq!(c.execute(sql, &[]).await.unwrap(), 1);
    c.batch_execute("commit").await.unwrap();
    assert_eq!(ids(&c, "b").await, expect(&[&[Some("1")], &[Some("2")]]));
}
