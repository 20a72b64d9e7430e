//! The real `psql` against `settle serve`'s server: a script with `-f` (DDL, DML, types,
//! errors with their SQLSTATE-bearing messages, a rolled-back block), `VACUUM (VERBOSE)`
//! showing PostgreSQL's INFO block, `VACUUM (FULL, VERBOSE)` with its INFO and DETAIL lines,
//! and `pg_isready`.

mod common;

use common::*;

const SCRIPT: &str = r#"
create table items (id int primary key, qty int2 not null, price numeric(8,2), name varchar(12), code char(3), seen timestamp, day date, ok boolean, raw bytea, note text);
insert into items values
  (1, 5, 9.99, 'widget', 'ab', '2024-02-29 13:45:01.5', '2024-03-01', true, '\x0aff', null),
  (2, 7, 0.5, 'gadget', 'xyz', '2000-01-01 00:00:00', '1999-12-31', false, '\x', 'two');
select id, qty, price, name, code || '|' as code, seen, day, ok, raw, note from items order by id;
select count(*) as n, sum(qty) as q, max(price) as p from items;
update items set qty = qty + 1 where id = 2 returning id, qty;
begin;
delete from items where id = 1;
rollback;
select count(*) as after_rollback from items;
insert into items (id, qty) values (1, 1);
select * from nosuch_table;
insert into items (id, qty) values (9, 'many');
select name from items where id = 2;
"#;

#[test]
fn psql_runs_a_script() {
    let Some(psql) = require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let file = dir.path().join("script.sql");
    std::fs::write(&file, SCRIPT).unwrap();
    let o = run(&psql, &["-X", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-f", file.to_str().unwrap()]);
    let (out, err) = text(&o);
    eprintln!("{out}\n{err}");
    for want in [
        "CREATE TABLE",
        "INSERT 0 2",
        "  1 |   5 |  9.99 | widget | ab | | 2024-02-29 13:45:01.5 | 2024-03-01 | t  | \\x0aff |",
        "  2 |   7 |  0.50 | gadget | xyz| | 2000-01-01 00:00:00   | 1999-12-31 | f  | \\x     | two",
        " 2 | 12 | 9.99",
        "  2 |   8",
        "UPDATE 1",
        "ROLLBACK",
        "              2",
        " gadget",
    ] {
        assert!(out.contains(want), "psql output lacks {want:?}:\n{out}");
    }
    for want in [
        "ERROR:  duplicate key value violates unique constraint \"items_pkey\"",
        "DETAIL:  Key (id)=(1) already exists.",
        "ERROR:  relation \"nosuch_table\" does not exist",
        "ERROR:  invalid input syntax for type smallint: \"many\"",
    ] {
        assert!(err.contains(want), "psql stderr lacks {want:?}:\n{err}");
    }
    // The types survive a restart (the server's catalog is durable).
    s.stop();
    let s = TestServer::start(dir.path());
    assert_eq!(psql_value(&psql, &s, "select price, code || '|' from items where id = 2"), "0.50|xyz|");
}

#[test]
fn vacuum_verbose_sends_info_notices() {
    let Some(psql) = require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    psql_value(&psql, &s, "create table v (id int primary key, n int)");
    psql_value(&psql, &s, "insert into v values (1, 1), (2, 2), (3, 3)");
    psql_value(&psql, &s, "delete from v where id = 2");
    let o =
        run(&psql, &["-X", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-c", "VACUUM (VERBOSE, FREEZE) v"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim(), "VACUUM");
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines[0].starts_with("INFO:  aggressively vacuuming \"settledb.public.v\""), "{err}");
    assert!(lines[1].starts_with("INFO:  finished vacuuming \"settledb.public.v\": index scans: 1"), "{err}");
    // The report's body continues the second message, as PostgreSQL sends it.
    assert!(lines[2].starts_with("pages: 0 removed, 1 remain, 1 scanned"), "{err}");
    assert!(err.contains("tuples: 1 removed, 2 remain"), "{err}");
    assert!(err.contains("index \"v_pkey\": pages:"), "{err}");
    // Reads of key columns only are answered by index-only scans; after the VACUUM the page is
    // all-visible, so they fetch no heap tuple.
    let fetched = || psql_value(&psql, &s, "select tup_fetched from pg_stat_database");
    let before = fetched();
    assert_eq!(psql_value(&psql, &s, "select count(*), min(id), max(id) from v where id between 1 and 3"), "2|1|3");
    assert_eq!(fetched(), before, "an index-only scan of an all-visible page visits no heap tuple");
    assert_eq!(psql_value(&psql, &s, "select id from v where id >= 2 order by id desc"), "3");
    psql_value(&psql, &s, "insert into v values (4, 4)");
    assert_eq!(psql_value(&psql, &s, "select count(*) from v where id > 0"), "3");
    assert_eq!(psql_value(&psql, &s, "select n from v where id = 4"), "4");
    // The statistics views count what happened.
    let stats = psql_value(
        &psql,
        &s,
        "select n_tup_ins, n_tup_del, vacuum_count, last_vacuum is not null from pg_stat_user_tables where relname = 'v'",
    );
    assert_eq!(stats, "4|1|1|t");
    assert_eq!(psql_value(&psql, &s, "select xact_commit > 0 from pg_stat_database"), "t");
    // VACUUM refuses to run in a block, as in PostgreSQL.
    let o = run(&psql, &["-X", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-c", "begin", "-c", "vacuum v"]);
    assert!(text(&o).1.contains("VACUUM cannot run inside a transaction block"));
}

/// `VACUUM FULL` rewrites the table: psql shows PostgreSQL 15's two INFO messages and the
/// DETAIL line, `pg_relation_size` falls, the rows and the primary key are intact, and the
/// options FULL does not take are refused as PostgreSQL refuses them.
#[test]
fn vacuum_full_rewrites_the_table() {
    let Some(psql) = require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    psql_value(&psql, &s, "create table f (id int primary key, pad text)");
    let pad = "x".repeat(200);
    psql_value(&psql, &s, &format!("insert into f select g, '{pad}' from generate_series(1, 3000) g"));
    psql_value(&psql, &s, "delete from f where id % 3 <> 0");
    let size = || psql_value(&psql, &s, "select pg_relation_size('f')").parse::<u64>().unwrap();
    let before = size();
    let o = run(&psql, &["-X", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-c", "VACUUM (FULL, VERBOSE) f"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim(), "VACUUM");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines[0], "INFO:  vacuuming \"public.f\"", "{err}");
    let pages = before / 8192;
    assert_eq!(
        lines[1],
        format!("INFO:  \"public.f\": found 2000 removable, 1000 nonremovable row versions in {pages} pages"),
        "{err}"
    );
    assert_eq!(lines[2], "DETAIL:  0 dead row versions cannot be removed yet.", "{err}");
    assert!(lines[3].starts_with("CPU: user: ") && lines[3].contains(" elapsed: "), "{err}");
    let after = size();
    assert!(after * 2 < before, "{after} bytes from {before}");
    assert_eq!(psql_value(&psql, &s, "select count(*), sum(id) from f"), "1000|1501500");
    assert_eq!(psql_value(&psql, &s, &format!("select pad = '{pad}' from f where id = 2997")), "t");
    let dup = run(
        &psql,
        &["-X", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-c", "insert into f values (3, 'd')"],
    );
    assert!(text(&dup).1.contains("duplicate key value violates unique constraint \"f_pkey\""), "{:?}", text(&dup));
    // Plain `VACUUM FULL` (every table) works too; what FULL cannot take is refused.
    assert_eq!(psql_value(&psql, &s, "vacuum full"), "VACUUM");
    for (sql, want) in [
        ("vacuum (full, disable_page_skipping) f", "VACUUM option DISABLE_PAGE_SKIPPING cannot be used with FULL"),
        ("vacuum (full, parallel 2) f", "VACUUM FULL cannot be performed in parallel"),
        ("vacuum (full, process_toast false) f", "PROCESS_TOAST required with VACUUM FULL"),
        ("vacuum full pg_class", "VACUUM FULL of system catalog \"pg_class\" is not supported"),
    ] {
        let o = run(&psql, &["-X", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-c", sql]);
        assert!(text(&o).1.contains(want), "{sql}: {:?}", text(&o));
    }
    // The rewrite survives a restart.
    s.stop();
    let s = TestServer::start(dir.path());
    assert_eq!(psql_value(&psql, &s, "select count(*), sum(id) from f"), "1000|1501500");
}

#[test]
fn pg_isready_sees_the_server() {
    let Some(ready) = require("pg_isready") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let o = run(&ready, &["-h", "127.0.0.1", "-p", &s.port()]);
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(text(&o).0.contains("accepting connections"));
}

/// psql's ON_ERROR_ROLLBACK wraps each statement of a block in a savepoint and rolls back to it
/// after an error, deciding by the transaction status ReadyForQuery reports: the block goes on
/// after the failed statement and commits the rest. `\echo` of `:LAST_ERROR_SQLSTATE` shows the
/// savepoint errors' codes.
#[test]
fn psql_on_error_rollback_uses_savepoints() {
    let Some(psql) = require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let script = r#"
\set ON_ERROR_ROLLBACK on
create table oer (id int primary key);
begin;
insert into oer values (1);
insert into oer values (1);
insert into oer values (2);
commit;
select 'rows: ' || count(*) from oer;
savepoint outside;
\echo outside :LAST_ERROR_SQLSTATE
begin;
rollback to savepoint nosuch;
\echo unknown :LAST_ERROR_SQLSTATE
rollback;
set statement_timeout = '100ms';
select pg_sleep(30);
\echo timeout :LAST_ERROR_SQLSTATE
"#;
    let file = dir.path().join("oer.sql");
    std::fs::write(&file, script).unwrap();
    let o =
        run(&psql, &["-X", "-At", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-f", file.to_str().unwrap()]);
    let (out, err) = text(&o);
    eprintln!("{out}\n{err}");
    assert!(err.contains("duplicate key value violates unique constraint \"oer_pkey\""), "{err}");
    assert!(out.contains("rows: 2"), "{out}");
    assert!(err.contains("SAVEPOINT can only be used in transaction blocks"), "{err}");
    assert!(out.contains("outside 25P01"), "{out}");
    assert!(out.contains("unknown 3B001"), "{out}");
    assert!(err.contains("canceling statement due to statement timeout"), "{err}");
    assert!(out.contains("timeout 57014"), "{out}");
}

/// A join and a series through psql's `-c`: the rows psql prints unaligned.
#[test]
fn psql_runs_a_join() {
    let Some(psql) = require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    psql_value(&psql, &s, "create table dept (id int primary key, name text)");
    psql_value(&psql, &s, "create table emp (id int primary key, dept_id int, name text)");
    psql_value(&psql, &s, "insert into dept values (1, 'eng'), (2, 'ops'), (3, 'empty')");
    psql_value(&psql, &s, "insert into emp select g, g % 2 + 1, 'e' || g from generate_series(1, 5) g");
    let o = run(
        &psql,
        &[
            "-X",
            "-At",
            "-h",
            "127.0.0.1",
            "-p",
            &s.port(),
            "-U",
            "postgres",
            "-c",
            "select d.name, count(e.id) from dept d left join emp e on e.dept_id = d.id group by d.name order by d.name",
        ],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out.trim(), "empty|0\neng|2\nops|3");
    // psql's \dt: a join of pg_class, pg_namespace and pg_am.
    assert_eq!(psql_value(&psql, &s, "\\dt"), "public|dept|table|postgres\npublic|emp|table|postgres");
    // The first two of psql's `\d table` queries: a name match through `OPERATOR(pg_catalog.~)`
    // with a COLLATE clause, then the pg_class columns it reads of the table.
    assert_eq!(
        psql_value(
            &psql,
            &s,
            "SELECT n.nspname, c.relname FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_namespace n \
             ON n.oid = c.relnamespace WHERE c.relname OPERATOR(pg_catalog.~) '^(emp)$' COLLATE pg_catalog.default \
             AND pg_catalog.pg_table_is_visible(c.oid) ORDER BY 1, 2"
        ),
        "public|emp"
    );
    assert_eq!(
        psql_value(
            &psql,
            &s,
            "SELECT c.relchecks, c.relkind, c.relhasindex, c.relhasrules, c.relhastriggers, c.relpersistence, \
             c.relreplident, am.amname FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_class tc \
             ON (c.reltoastrelid = tc.oid) LEFT JOIN pg_catalog.pg_am am ON (c.relam = am.oid) WHERE c.relname = 'emp'"
        ),
        "0|r|t|f|f|p|d|heap"
    );
}

/// Subqueries: uncorrelated (once per statement) and correlated (once per outer row, the
/// outer row's values standing in for its columns), scalar, `IN` and `EXISTS`.
#[test]
fn psql_runs_subqueries() {
    let Some(psql) = require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    psql_value(&psql, &s, "create table dept (id int primary key, name text)");
    psql_value(&psql, &s, "create table emp (id int primary key, dept_id int, pay int)");
    psql_value(&psql, &s, "insert into dept values (1, 'eng'), (2, 'ops'), (3, 'empty')");
    psql_value(&psql, &s, "insert into emp select g, g % 2 + 1, g * 10 from generate_series(1, 5) g");
    let q = |sql: &str| psql_value(&psql, &s, sql);
    assert_eq!(q("select (select max(pay) from emp)"), "50");
    assert_eq!(
        q("select d.name, (select count(*) from emp e where e.dept_id = d.id), \
           (select max(e.pay) from emp e where e.dept_id = d.id) from dept d order by d.id"),
        "eng|2|40\nops|3|50\nempty|0|"
    );
    assert_eq!(
        q("select d.name from dept d where exists (select 1 from emp e where e.dept_id = d.id) order by 1"),
        "eng\nops"
    );
    assert_eq!(q("select d.name from dept d where not exists (select 1 from emp e where e.dept_id = d.id)"), "empty");
    assert_eq!(
        q("select e.id from emp e where e.pay > (select avg(x.pay) from emp x where x.dept_id = e.dept_id) order by 1"),
        "4\n5"
    );
    assert_eq!(q("select count(*) from emp where dept_id in (select id from dept where name <> 'ops')"), "2");
    let o = psql_run(&psql, &s, "select (select id from emp)");
    assert!(text(&o).1.contains("more than one row returned by a subquery used as an expression"), "{:?}", text(&o));
}

/// psql's `\d table` (its nine catalog queries: pg_class, pg_attribute with pg_attrdef,
/// pg_collation and pg_type, pg_index with pg_constraint and pg_get_indexdef, pg_policy,
/// pg_statistic_ext, the publications' UNION, pg_inherits), `\d index` and `\du` print what
/// PostgreSQL 15 prints for the same table, and `\d` lists the user's relations only.
#[test]
fn psql_describes_a_table_as_postgresql_does() {
    let Some(psql) = require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    for sql in [
        "create table emp (id int primary key, dept_id int not null default 7, name text, pay numeric(12,2))",
        "create index emp_dept on emp(dept_id)",
        "create publication p_emp for table emp",
    ] {
        psql_value(&psql, &s, sql);
    }
    let describe = |cmd: &str| {
        let o = run(&psql, &["-X", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-c", cmd]);
        let (out, err) = text(&o);
        assert!(o.status.success() && err.is_empty(), "psql -c {cmd:?}: {err}");
        out
    };
    // PostgreSQL 15.18's output for the same statements, byte for byte.
    let want = r#"                    Table "public.emp"
 Column  |     Type      | Collation | Nullable | Default 
---------+---------------+-----------+----------+---------
 id      | integer       |           | not null | 
 dept_id | integer       |           | not null | 7
 name    | text          |           |          | 
 pay     | numeric(12,2) |           |          | 
Indexes:
    "emp_pkey" PRIMARY KEY, btree (id)
    "emp_dept" btree (dept_id)
Publications:
    "p_emp"

"#;
    assert_eq!(describe("\\d emp"), want);
    // An index (its key columns are pg_attribute rows of the index) and the roles, as
    // PostgreSQL 15.18 prints them.
    let want = r#"       Index "public.emp_pkey"
 Column |  Type   | Key? | Definition 
--------+---------+------+------------
 id     | integer | yes  | id
primary key, btree, for table "public.emp"

"#;
    assert_eq!(describe("\\d emp_pkey"), want);
    let want = r#"        Index "public.emp_dept"
 Column  |  Type   | Key? | Definition 
---------+---------+------+------------
 dept_id | integer | yes  | dept_id
btree, for table "public.emp"

"#;
    assert_eq!(describe("\\d emp_dept"), want);
    let want = r#"                                   List of roles
 Role name |                         Attributes                         | Member of 
-----------+------------------------------------------------------------+-----------
 postgres  | Superuser, Create role, Create DB, Replication, Bypass RLS | {}

"#;
    assert_eq!(describe("\\du"), want);
    let want = r#"      List of schemas
  Name  |       Owner       
--------+-------------------
 public | pg_database_owner
(1 row)

"#;
    assert_eq!(describe("\\dn"), want);
    // ARRAY(subquery), which \du reads its memberships with.
    assert_eq!(
        psql_value(
            &psql,
            &s,
            "select array(select relname from pg_class where relkind = 'i' order by 1), array(select 'a b')"
        ),
        r#"{emp_dept,emp_pkey}|{"a b"}"#
    );
    // The engine's own catalogs (pg_class, pg_publication) are pg_catalog's, not listed.
    let list = describe("\\d");
    assert!(list.contains(" public | emp  | table | postgres") && list.contains("(1 row)"), "{list}");
    // Set operations, which the publications query needs.
    assert_eq!(psql_value(&psql, &s, "select 2 union select 1 union select 2 order by 1"), "1\n2");
    assert_eq!(psql_value(&psql, &s, "select 1 union all select 1"), "1\n1");
    assert_eq!(psql_value(&psql, &s, "select id from emp union select 5 except select 5"), "");
    assert_eq!(
        psql_value(&psql, &s, "select x from (select 3 as x) a intersect select 3 order by x desc limit 1"),
        "3"
    );
    let o = psql_run(&psql, &s, "select 1, 2 union select 3");
    assert!(text(&o).1.contains("each UNION query must have the same number of columns"), "{:?}", text(&o));
}
