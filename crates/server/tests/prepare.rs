//! SQL-level prepared statements and DISCARD, as PostgreSQL 15 has them (each expectation was
//! read off a PostgreSQL 15 server given the same statements):
//!
//! - `PREPARE name [(types)] AS statement` then `EXECUTE name [(values)]`: SELECT with declared
//!   and inferred parameter types, INSERT, UPDATE and DELETE, each EXECUTE answering
//!   with the statement's own rows and command tag (read from the raw protocol, since
//!   tokio-postgres reports only row counts), and Describe of an EXECUTE giving the
//!   statement's columns to the extended protocol;
//! - the errors and their SQLSTATEs: 42P05, 26000, 42601 (wrong number of parameters, with
//!   its DETAIL), 22P02, 42804, 42P02, 42P18, 42P01;
//! - `DEALLOCATE [PREPARE] name | ALL`, `pg_prepared_statements` (this session's only);
//! - statements outlive transactions and end with their session;
//! - `DISCARD ALL` (RESET ALL, DEALLOCATE ALL, `currval` forgotten; 25001 in a block) and
//!   `DISCARD PLANS | SEQUENCES | TEMP`;
//! - one namespace with the protocol's named statements (Parse): EXECUTE runs them, Bind and
//!   Describe use PREPARE's, a name in use is 42P05 for either, DEALLOCATE [ALL], DISCARD ALL
//!   and Close remove either (then 26000), `pg_prepared_statements` lists both (`from_sql`
//!   false for a Parse's), and tokio-postgres's `s0`, `s1`, ... are reachable from SQL;
//! - the real `psql` printing the tags, when it is installed.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use common::{code, connect, psql_run, require, text, TestServer};
use tokio_postgres::{Client, SimpleQueryMessage};

/// What a simple Query message brought back: each CommandComplete's tag, and an
/// ErrorResponse's SQLSTATE as `ERROR <code>`.
fn tags(addr: SocketAddr, sql: &str) -> Vec<String> {
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut body = 196608i32.to_be_bytes().to_vec();
    for part in ["user", "postgres", "database", "postgres", ""] {
        body.extend_from_slice(part.as_bytes());
        body.push(0);
    }
    let mut startup = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    startup.extend(body);
    sock.write_all(&startup).unwrap();
    until_ready(&mut sock);
    let mut q = vec![b'Q'];
    q.extend_from_slice(&((sql.len() + 5) as i32).to_be_bytes());
    q.extend_from_slice(sql.as_bytes());
    q.push(0);
    sock.write_all(&q).unwrap();
    until_ready(&mut sock)
}

/// Reads backend messages up to ReadyForQuery, collecting tags and error codes.
fn until_ready(sock: &mut std::net::TcpStream) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let mut head = [0u8; 5];
        sock.read_exact(&mut head).unwrap();
        let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 4];
        sock.read_exact(&mut body).unwrap();
        match head[0] {
            b'Z' => return out,
            b'C' => out.push(String::from_utf8_lossy(&body[..body.len() - 1]).into_owned()),
            b'E' => {
                let field = body.split(|&b| b == 0).find(|f| f.first() == Some(&b'C')).unwrap_or(b"C?");
                out.push(format!("ERROR {}", String::from_utf8_lossy(&field[1..])));
            }
            _ => {}
        }
    }
}

/// The rows of a simple query, each column's text (`NULL` for null).
async fn rows(c: &Client, sql: &str) -> Vec<Vec<String>> {
    c.simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).unwrap_or("NULL").to_string()).collect()),
            _ => None,
        })
        .collect()
}

/// The SQLSTATE `sql` fails with.
async fn fails(c: &Client, sql: &str) -> String {
    match c.simple_query(sql).await {
        Ok(r) => panic!("{sql} succeeded: {r:?}"),
        Err(e) => code(&e),
    }
}

async fn table_p(c: &Client) {
    c.batch_execute("create table p (id int primary key, name text); insert into p values (1, 'one'), (2, 'two')")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_answers_with_the_statements_rows_and_tags() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    table_p(&connect(&s).await).await;
    let got = tags(
        s.addr,
        "PREPARE byid (int) AS SELECT name FROM p WHERE id = $1; EXECUTE byid(2);
         PREPARE ins AS INSERT INTO p VALUES ($1, $2); EXECUTE ins(3, 'three');
         PREPARE upd AS UPDATE p SET name = $2 WHERE id >= $1; EXECUTE upd(2, 'many');
         PREPARE del AS DELETE FROM p WHERE id = $1; EXECUTE del(3);
         PREPARE v AS SELECT id FROM p ORDER BY id; EXECUTE v;
         DEALLOCATE byid; DEALLOCATE PREPARE ins; DEALLOCATE ALL; EXECUTE v",
    );
    let want = [
        "PREPARE",
        "SELECT 1",
        "PREPARE",
        "INSERT 0 1",
        "PREPARE",
        "UPDATE 2",
        "PREPARE",
        "DELETE 1",
        "PREPARE",
        "SELECT 2",
        "DEALLOCATE",
        "DEALLOCATE",
        "DEALLOCATE ALL",
        "ERROR 26000",
    ];
    assert_eq!(got, want);
    // INSERT/UPDATE/DELETE with RETURNING give their rows, under their own tags.
    let got =
        tags(s.addr, "PREPARE r AS UPDATE p SET name = upper(name) WHERE id = $1 RETURNING id, name; EXECUTE r(1)");
    assert_eq!(got, ["PREPARE", "UPDATE 1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_declared_or_inferred_and_converted() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    table_p(&c).await;
    c.batch_execute(
        "PREPARE byid (int) AS SELECT name FROM p WHERE id = $1;
         PREPARE byname AS SELECT id FROM p WHERE name = $1;
         PREPARE ins AS INSERT INTO p VALUES ($1, $2);
         PREPARE echo AS SELECT $1;
         PREPARE extra (bigint) AS SELECT name FROM p WHERE id = $2",
    )
    .await
    .unwrap();
    assert_eq!(rows(&c, "EXECUTE byid(2)").await, [["two"]]);
    // A string is read as the parameter's type; a numeric is rounded to an integer one.
    assert_eq!(rows(&c, "EXECUTE byid('1')").await, [["one"]]);
    assert_eq!(rows(&c, "EXECUTE byid(1.7)").await, [["two"]]);
    assert_eq!(rows(&c, "EXECUTE byid(1 + 0)").await, [["one"]]);
    assert_eq!(rows(&c, "EXECUTE byname('two')").await, [["2"]]);
    assert_eq!(rows(&c, "EXECUTE echo(42)").await, [["42"]]);
    assert_eq!(rows(&c, "EXECUTE extra(0, 1)").await, [["one"]]);
    c.batch_execute("EXECUTE ins(3, 'three')").await.unwrap();
    assert_eq!(rows(&c, "EXECUTE byname('three')").await, [["3"]]);
    // Inferred where the extended protocol's Parse infers: from the column compared or assigned.
    let types = rows(&c, "SELECT name, parameter_types FROM pg_prepared_statements ORDER BY name").await;
    let want = [
        ["byid", "{integer}"],
        ["byname", "{text}"],
        ["echo", "{text}"],
        ["extra", "{bigint,integer}"],
        ["ins", "{integer,text}"],
    ];
    assert_eq!(types, want);
    // The extended protocol: Describe of EXECUTE gives the prepared statement's columns.
    let row = c.query_one("EXECUTE byid(2)", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>("name"), "two");
    let st = c.prepare("EXECUTE byname('one')").await.unwrap();
    assert_eq!(st.columns()[0].type_(), &tokio_postgres::types::Type::INT4);
    assert_eq!(c.query_one(&st, &[]).await.unwrap().get::<_, i32>(0), 1);
    assert_eq!(c.execute("EXECUTE ins(4, 'four')", &[]).await.unwrap(), 1);
    // A column that is a parameter has the parameter's type.
    c.batch_execute("PREPARE same (int8, date) AS SELECT $1 AS n, $2 AS d").await.unwrap();
    let st = c.prepare("EXECUTE same(21, '2024-02-29')").await.unwrap();
    let types: Vec<_> = st.columns().iter().map(|c| c.type_().clone()).collect();
    assert_eq!(types, [tokio_postgres::types::Type::INT8, tokio_postgres::types::Type::DATE]);
    assert_eq!(rows(&c, "EXECUTE same(21, '2024-02-29')").await, [["21", "2024-02-29"]]);
    // PREPARE itself through the extended protocol.
    c.execute("PREPARE typed (text, varchar(3), numeric(6,2), timestamp, bool, char(2)) AS SELECT $1", &[])
        .await
        .unwrap();
    let types = rows(&c, "SELECT parameter_types FROM pg_prepared_statements WHERE name = 'typed'").await;
    let want = r#"{text,"character varying",numeric,"timestamp without time zone",boolean,character}"#;
    assert_eq!(types, [[want]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_postgresql_sqlstates() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    table_p(&c).await;
    c.batch_execute("PREPARE byid (int) AS SELECT name FROM p WHERE id = $1").await.unwrap();
    let cases = [
        ("PREPARE byid AS SELECT 1", "42P05"),
        ("EXECUTE nosuch", "26000"),
        ("EXECUTE nosuch(1)", "26000"),
        ("DEALLOCATE nosuch", "26000"),
        ("EXECUTE byid(1, 2)", "42601"),
        ("EXECUTE byid", "42601"),
        ("EXECUTE byid('x')", "22P02"),
        ("EXECUTE byid(true)", "42804"),
        ("EXECUTE byid($1)", "42P02"),
        ("PREPARE zero AS SELECT $0", "42P02"),
        ("PREPARE gap AS SELECT $2::int", "42P18"),
        ("PREPARE nt AS SELECT * FROM nosuch", "42P01"),
        ("PREPARE ni AS INSERT INTO nosuch VALUES (1)", "42P01"),
        ("PREPARE ct AS CREATE TABLE x (a int)", "42601"),
        ("PREPARE bad AS SELEC 1", "42601"),
    ];
    for (sql, want) in cases {
        assert_eq!(fails(&c, sql).await, want, "{sql}");
    }
    let e = c.simple_query("EXECUTE byid(1, 2)").await.unwrap_err();
    let db = e.as_db_error().unwrap();
    assert_eq!(db.message(), "wrong number of parameters for prepared statement \"byid\"");
    assert_eq!(db.detail(), Some("Expected 1 parameters but got 2."));
    let e = c.simple_query("EXECUTE byid(true)").await.unwrap_err();
    let db = e.as_db_error().unwrap();
    assert_eq!(db.message(), "parameter $1 of type boolean cannot be coerced to the expected type integer");
    let e = c.simple_query("EXECUTE gone").await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().message(), "prepared statement \"gone\" does not exist");
    let e = c.simple_query("PREPARE byid AS SELECT 1").await.unwrap_err();
    assert_eq!(e.as_db_error().unwrap().message(), "prepared statement \"byid\" already exists");
    // None of the failed PREPAREs left a statement behind; the good one still runs.
    assert_eq!(rows(&c, "SELECT name FROM pg_prepared_statements").await, [["byid"]]);
    assert_eq!(rows(&c, "EXECUTE byid(1)").await, [["one"]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_prepared_statements_lists_this_sessions_statements() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    table_p(&c).await;
    c.batch_execute("PREPARE byid (int) AS SELECT name FROM p WHERE id = $1").await.unwrap();
    c.batch_execute("PREPARE v AS SELECT 1").await.unwrap();
    for sql in ["EXECUTE byid(1)", "EXECUTE byid(2)", "EXECUTE v"] {
        c.batch_execute(sql).await.unwrap();
    }
    // A failed conversion chose no plan.
    assert_eq!(fails(&c, "EXECUTE byid('x')").await, "22P02");
    let got = rows(
        &c,
        "SELECT name, statement, parameter_types, from_sql, generic_plans, custom_plans, \
         prepare_time IS NOT NULL FROM pg_prepared_statements ORDER BY name",
    )
    .await;
    let want = [
        ["byid", "PREPARE byid (int) AS SELECT name FROM p WHERE id = $1", "{integer}", "t", "0", "2", "t"],
        ["v", "PREPARE v AS SELECT 1", "{}", "t", "1", "0", "t"],
    ];
    assert_eq!(got, want);
    // Another session has statements of its own, and none of these.
    let other = connect(&s).await;
    assert_eq!(rows(&other, "SELECT count(*) FROM pg_prepared_statements").await, [["0"]]);
    assert_eq!(fails(&other, "EXECUTE byid(1)").await, "26000");
    other.batch_execute("PREPARE byid AS SELECT 2").await.unwrap();
    assert_eq!(rows(&other, "EXECUTE byid").await, [["2"]]);
    c.batch_execute("DEALLOCATE v").await.unwrap();
    assert_eq!(rows(&c, "SELECT name FROM pg_prepared_statements").await, [["byid"]]);
    c.batch_execute("DEALLOCATE ALL").await.unwrap();
    assert_eq!(rows(&c, "SELECT count(*) FROM pg_prepared_statements").await, [["0"]]);
    assert_eq!(rows(&other, "SELECT name FROM pg_prepared_statements").await, [["byid"]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_outlive_transactions_and_end_with_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    table_p(&c).await;
    // A PREPARE in a block that rolls back stays (it is not transactional).
    c.batch_execute("BEGIN; PREPARE cnt AS SELECT count(*) FROM p; ROLLBACK").await.unwrap();
    assert_eq!(rows(&c, "EXECUTE cnt").await, [["2"]]);
    // EXECUTE in a block sees the block's rows, and its writes go with the block.
    c.batch_execute("PREPARE ins AS INSERT INTO p VALUES ($1, $2)").await.unwrap();
    c.batch_execute("BEGIN; EXECUTE ins(3, 'three')").await.unwrap();
    assert_eq!(rows(&c, "EXECUTE cnt").await, [["3"]]);
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(rows(&c, "EXECUTE cnt").await, [["2"]]);
    // A failed EXECUTE fails the block; ROLLBACK makes the session usable again.
    c.batch_execute("BEGIN").await.unwrap();
    assert_eq!(fails(&c, "EXECUTE ins(1, 'dup')").await, "23505");
    assert_eq!(fails(&c, "EXECUTE cnt").await, "25P02");
    c.batch_execute("ROLLBACK").await.unwrap();
    // A READ ONLY block refuses a prepared write as it refuses the write itself.
    c.batch_execute("BEGIN READ ONLY").await.unwrap();
    assert_eq!(fails(&c, "EXECUTE ins(5, 'five')").await, "25006");
    c.batch_execute("ROLLBACK").await.unwrap();
    drop(c);
    // A new session starts with none.
    let c = connect(&s).await;
    assert_eq!(fails(&c, "EXECUTE cnt").await, "26000");
    assert_eq!(rows(&c, "SELECT count(*) FROM pg_prepared_statements").await, [["0"]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discard_all_resets_settings_forgets_sequences_and_statements() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute("CREATE SEQUENCE sq; SELECT nextval('sq'); SET statement_timeout = '5s'; PREPARE one AS SELECT 1")
        .await
        .unwrap();
    // Refused inside a block, which it fails.
    c.batch_execute("BEGIN").await.unwrap();
    let e = c.simple_query("DISCARD ALL").await.unwrap_err();
    assert_eq!(code(&e), "25001");
    assert_eq!(e.as_db_error().unwrap().message(), "DISCARD ALL cannot run inside a transaction block");
    assert_eq!(fails(&c, "SELECT 1").await, "25P02");
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(rows(&c, "SHOW statement_timeout").await, [["5s"]]);
    // PLANS and TEMP have nothing to drop here: the statement and the settings stay.
    assert_eq!(
        tags(s.addr, "DISCARD PLANS; DISCARD TEMP; DISCARD TEMPORARY"),
        ["DISCARD PLANS", "DISCARD TEMP", "DISCARD TEMP"]
    );
    c.batch_execute("DISCARD PLANS; DISCARD TEMP").await.unwrap();
    assert_eq!(rows(&c, "EXECUTE one").await, [["1"]]);
    assert_eq!(rows(&c, "SELECT currval('sq')").await, [["1"]]);
    // SEQUENCES forgets currval's state.
    c.batch_execute("DISCARD SEQUENCES").await.unwrap();
    assert_eq!(fails(&c, "SELECT currval('sq')").await, "55000");
    c.batch_execute("SELECT nextval('sq')").await.unwrap();
    // ALL: settings back to their defaults, statements and currval gone.
    assert_eq!(tags(s.addr, "DISCARD ALL"), ["DISCARD ALL"]);
    c.batch_execute("DISCARD ALL").await.unwrap();
    assert_eq!(rows(&c, "SHOW statement_timeout").await, [["0"]]);
    assert_eq!(fails(&c, "EXECUTE one").await, "26000");
    assert_eq!(rows(&c, "SELECT count(*) FROM pg_prepared_statements").await, [["0"]]);
    assert_eq!(fails(&c, "SELECT currval('sq')").await, "55000");
    assert_eq!(rows(&c, "SELECT nextval('sq')").await, [["3"]]);
}

#[test]
fn psql_prints_the_tags() {
    let Some(psql) = require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let sql = "CREATE TABLE t (a int, b text);
        PREPARE ins (int, text) AS INSERT INTO t VALUES ($1, $2);
        EXECUTE ins(1, 'x');
        PREPARE q AS SELECT b FROM t WHERE a = $1;
        EXECUTE q(1);
        DEALLOCATE ins;
        DISCARD ALL;";
    let o = run_script(&psql, &s, sql);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let want = ["CREATE TABLE", "PREPARE", "INSERT 0 1", "PREPARE", "x", "DEALLOCATE", "DISCARD ALL"];
    assert_eq!(lines, want, "{out}");
    let o = psql_run(&psql, &s, "EXECUTE q(1)");
    let (_, err) = text(&o);
    assert!(err.contains("ERROR:  prepared statement \"q\" does not exist"), "{err}");
}

/// psql with `-At` running `sql` as a script (each statement its own Query, tags printed).
fn run_script(psql: &std::path::Path, s: &TestServer, sql: &str) -> std::process::Output {
    let file = s.dir.join("prepare.sql");
    std::fs::write(&file, sql).unwrap();
    common::run(
        psql,
        &["-X", "-At", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-f", file.to_str().unwrap()],
    )
}

// One namespace for both kinds of prepared statement, as PostgreSQL 15 keeps them: a Parse
// with a name and a PREPARE fill the same per-session table. Each transcript below was read
// off PostgreSQL 15 given the same messages.

/// A connection speaking the raw protocol, to send Parse, Bind, Describe and Close as a
/// driver does and read back every reply.
struct Raw(std::net::TcpStream);

/// A message: its type byte, then its length and body.
fn framed(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn cstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

impl Raw {
    fn connect(addr: SocketAddr) -> Raw {
        let mut sock = std::net::TcpStream::connect(addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut body = 196608i32.to_be_bytes().to_vec();
        for part in ["user", "postgres", "database", "postgres", ""] {
            cstr(&mut body, part);
        }
        let mut startup = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        startup.extend(body);
        sock.write_all(&startup).unwrap();
        let mut raw = Raw(sock);
        raw.until_ready();
        raw
    }

    /// A simple query's replies, its RowDescription left out.
    fn query(&mut self, sql: &str) -> Vec<String> {
        let mut b = Vec::new();
        cstr(&mut b, sql);
        self.0.write_all(&framed(b'Q', &b)).unwrap();
        self.until_ready().into_iter().filter(|w| !w.starts_with("columns ")).collect()
    }

    fn parse(&mut self, name: &str, sql: &str) -> Vec<String> {
        let mut b = Vec::new();
        cstr(&mut b, name);
        cstr(&mut b, sql);
        b.extend_from_slice(&0u16.to_be_bytes());
        self.sync(framed(b'P', &b))
    }

    /// Bind of `stmt` to the unnamed portal with text parameters, then Execute.
    fn bind_execute(&mut self, stmt: &str, params: &[&str]) -> Vec<String> {
        let mut b = Vec::new();
        cstr(&mut b, "");
        cstr(&mut b, stmt);
        b.extend_from_slice(&0u16.to_be_bytes());
        b.extend_from_slice(&(params.len() as u16).to_be_bytes());
        for p in params {
            b.extend_from_slice(&(p.len() as i32).to_be_bytes());
            b.extend_from_slice(p.as_bytes());
        }
        b.extend_from_slice(&0u16.to_be_bytes());
        let mut m = framed(b'B', &b);
        m.extend(framed(b'E', b"\0\0\0\0\0"));
        self.sync(m)
    }

    fn describe(&mut self, stmt: &str) -> Vec<String> {
        let mut b = vec![b'S'];
        cstr(&mut b, stmt);
        self.sync(framed(b'D', &b))
    }

    fn close(&mut self, stmt: &str) -> Vec<String> {
        let mut b = vec![b'S'];
        cstr(&mut b, stmt);
        self.sync(framed(b'C', &b))
    }

    fn sync(&mut self, mut messages: Vec<u8>) -> Vec<String> {
        messages.extend(framed(b'S', &[]));
        self.0.write_all(&messages).unwrap();
        self.until_ready()
    }

    /// The replies up to ReadyForQuery, each as a word: `parsed`, `bound`, `closed`, a
    /// tag, `ERROR <code>`, `row a|b`, `params <oid> ...`, `columns <name> ...`, `no data`.
    fn until_ready(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let mut head = [0u8; 5];
            self.0.read_exact(&mut head).unwrap();
            let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
            let mut body = vec![0u8; len - 4];
            self.0.read_exact(&mut body).unwrap();
            let word = match head[0] {
                b'Z' => return out,
                b'1' => "parsed".to_string(),
                b'2' => "bound".to_string(),
                b'3' => "closed".to_string(),
                b'n' => "no data".to_string(),
                b'C' => String::from_utf8_lossy(&body[..body.len() - 1]).into_owned(),
                b'E' => {
                    let field = body.split(|&b| b == 0).find(|f| f.first() == Some(&b'C')).unwrap_or(b"C?");
                    format!("ERROR {}", String::from_utf8_lossy(&field[1..]))
                }
                b'D' => {
                    let (mut at, mut cols) = (2, Vec::new());
                    for _ in 0..u16::from_be_bytes([body[0], body[1]]) {
                        let n = i32::from_be_bytes(body[at..at + 4].try_into().unwrap());
                        at += 4;
                        if n < 0 {
                            cols.push("NULL".to_string());
                            continue;
                        }
                        cols.push(String::from_utf8_lossy(&body[at..at + n as usize]).into_owned());
                        at += n as usize;
                    }
                    format!("row {}", cols.join("|"))
                }
                b't' => {
                    let n = u16::from_be_bytes([body[0], body[1]]) as usize;
                    let oids: Vec<String> = (0..n)
                        .map(|i| u32::from_be_bytes(body[2 + 4 * i..6 + 4 * i].try_into().unwrap()).to_string())
                        .collect();
                    format!("params {}", oids.join(" "))
                }
                b'T' => {
                    // Each field: its name, then 18 bytes (table, column, type, size, modifier, format).
                    let (mut at, mut names) = (2, Vec::new());
                    for _ in 0..u16::from_be_bytes([body[0], body[1]]) {
                        let end = at + body[at..].iter().position(|&b| b == 0).unwrap();
                        names.push(String::from_utf8_lossy(&body[at..end]).into_owned());
                        at = end + 1 + 18;
                    }
                    format!("columns {}", names.join(" "))
                }
                _ => continue,
            };
            out.push(word);
        }
    }
}

/// The session's table, as `pg_prepared_statements` shows it.
const VIEW: &str = "SELECT name, statement, parameter_types, from_sql, generic_plans, custom_plans \
                    FROM pg_prepared_statements ORDER BY name";

/// The scenario of `parse_and_prepare_share_one_namespace`, on any server.
fn one_namespace(addr: SocketAddr) {
    let mut c = Raw::connect(addr);
    c.query("CREATE TABLE p (id int PRIMARY KEY, name text); INSERT INTO p VALUES (1, 'one'), (2, 'two')");
    // EXECUTE runs a statement a Parse named.
    assert_eq!(c.parse("s0", "SELECT name FROM p WHERE id = $1"), ["parsed"]);
    assert_eq!(c.query("EXECUTE s0(2)"), ["row two", "SELECT 1"]);
    // Bind uses a statement PREPARE made, and Describe finds it.
    assert_eq!(c.query("PREPARE byname (text) AS SELECT id FROM p WHERE name = $1"), ["PREPARE"]);
    assert_eq!(c.bind_execute("byname", &["one"]), ["bound", "row 1", "SELECT 1"]);
    assert_eq!(c.describe("byname"), ["params 25", "columns id"]);
    assert_eq!(c.bind_execute("s0", &["1"]), ["bound", "row one", "SELECT 1"]);
    // A name in use is 42P05 whichever kind holds it; the unnamed statement is replaced.
    assert_eq!(c.parse("s0", "SELECT 1"), ["ERROR 42P05"]);
    assert_eq!(c.parse("byname", "SELECT 1"), ["ERROR 42P05"]);
    assert_eq!(c.query("PREPARE s0 AS SELECT 1"), ["ERROR 42P05"]);
    assert_eq!(c.parse("", "SELECT 1"), ["parsed"]);
    assert_eq!(c.parse("", "SELECT 2"), ["parsed"]);
    // The view lists both kinds: a Parse's with its query and from_sql false; each counted
    // its executions (one EXECUTE and one Bind each).
    assert_eq!(
        c.query(VIEW),
        [
            "row byname|PREPARE byname (text) AS SELECT id FROM p WHERE name = $1|{text}|t|0|1",
            "row s0|SELECT name FROM p WHERE id = $1|{integer}|f|0|2",
            "SELECT 2"
        ]
    );
    // DEALLOCATE reaches a Parse's statement; Bind to it is then 26000.
    assert_eq!(c.query("DEALLOCATE s0"), ["DEALLOCATE"]);
    assert_eq!(c.bind_execute("s0", &["1"]), ["ERROR 26000"]);
    assert_eq!(c.describe("s0"), ["ERROR 26000"]);
    // Close reaches a PREPARE's; EXECUTE of it is then 26000, and the name is free again.
    assert_eq!(c.close("byname"), ["closed"]);
    assert_eq!(c.query("SELECT count(*) FROM pg_prepared_statements"), ["row 0", "SELECT 1"]);
    assert_eq!(c.query("EXECUTE byname('one')"), ["ERROR 26000"]);
    assert_eq!(c.parse("byname", "SELECT $1::int + 1"), ["parsed"]);
    assert_eq!(c.query("EXECUTE byname(41)"), ["row 42", "SELECT 1"]);
    // A statement that executes itself stops at the stack depth limit (found by review: it
    // would have recursed until the thread's stack overflowed).
    assert_eq!(c.parse("loop", "EXECUTE loop"), ["parsed"]);
    assert_eq!(c.query("EXECUTE loop"), ["ERROR 54001"]);
    // A Parse refused for its name fails the transaction block, as any error there does.
    assert_eq!(c.query("BEGIN"), ["BEGIN"]);
    assert_eq!(c.parse("byname", "SELECT 1"), ["ERROR 42P05"]);
    assert_eq!(c.query("SELECT 1"), ["ERROR 25P02"]);
    assert_eq!(c.query("ROLLBACK"), ["ROLLBACK"]);
}

/// The scenario of `deallocate_all_and_discard_all_remove_both_kinds`, on any server.
fn both_kinds_go(addr: SocketAddr) {
    let mut c = Raw::connect(addr);
    for all in ["DEALLOCATE ALL", "DISCARD ALL"] {
        assert_eq!(c.parse("parsed", "SELECT 1"), ["parsed"]);
        assert_eq!(c.query("PREPARE prepared AS SELECT 2"), ["PREPARE"]);
        assert_eq!(c.query("SELECT count(*) FROM pg_prepared_statements"), ["row 2", "SELECT 1"]);
        assert_eq!(c.query(all), [all]);
        assert_eq!(c.query("SELECT count(*) FROM pg_prepared_statements"), ["row 0", "SELECT 1"]);
        assert_eq!(c.bind_execute("parsed", &[]), ["ERROR 26000"], "{all}");
        assert_eq!(c.bind_execute("prepared", &[]), ["ERROR 26000"], "{all}");
        assert_eq!(c.query("EXECUTE parsed"), ["ERROR 26000"], "{all}");
    }
}

#[test]
fn parse_and_prepare_share_one_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    one_namespace(s.addr);
}

#[test]
fn deallocate_all_and_discard_all_remove_both_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    both_kinds_go(s.addr);
}

/// The same scenarios against a throwaway PostgreSQL 15 (skipped, saying why, where it is not
/// installed): what they expect is what PostgreSQL answers.
#[test]
fn one_namespace_on_postgresql() {
    let Some(pg) = common::PgCluster::start(&[]) else { return };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], pg.port));
    one_namespace(addr);
    both_kinds_go(addr);
}

/// tokio-postgres names its statements `s0`, `s1`, ... by Parse: SQL reaches them by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drivers_statements_are_reachable_from_sql() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    table_p(&c).await;
    let byid = c.prepare("SELECT name FROM p WHERE id = $1").await.unwrap();
    let name = rows(&c, "SELECT name FROM pg_prepared_statements WHERE NOT from_sql").await;
    assert_eq!(name.len(), 1);
    let name = &name[0][0];
    assert_eq!(rows(&c, &format!("EXECUTE {name}(2)")).await, [["two"]]);
    assert_eq!(fails(&c, &format!("PREPARE {name} AS SELECT 1")).await, "42P05");
    // Once SQL deallocates it, the driver's next Bind finds nothing.
    c.batch_execute(&format!("DEALLOCATE {name}")).await.unwrap();
    let e = c.query(&byid, &[&1i32]).await.unwrap_err();
    assert_eq!(code(&e), "26000");
    // And a PREPARE under the driver's next name makes its Parse fail.
    c.batch_execute("PREPARE s1 AS SELECT 1").await.unwrap();
    let e = c.prepare("SELECT 2").await.unwrap_err();
    assert_eq!(code(&e), "42P05");
}
