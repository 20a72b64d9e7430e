//! What a replication connection (`replication=database`) owns besides its stream, spoken
//! in raw protocol messages as a CDC tool speaks them: temporary slots (active for their
//! connection only, dropped at its end and on any error), the snapshot `CREATE_REPLICATION_SLOT`
//! exports (`SNAPSHOT 'export'`, the default; `pg_export_snapshot()` in any session) and
//! `SET TRANSACTION SNAPSHOT` in another session, and a per-connection `wal_sender_timeout`
//! from the startup packet's `options`.
//! Waits are for events (a connection closing), bounded; nothing is timed.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::TestServer;

/// A raw protocol connection.
struct Raw {
    sock: TcpStream,
    pid: i32,
}

/// A command's rows (text, NULL as `None`), or its error's SQLSTATE and message.
type Answer = Result<Vec<Vec<Option<String>>>, (String, String)>;

fn message(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as i32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

fn error_fields(body: &[u8]) -> (String, String) {
    let field = |t: u8| {
        body.split(|&b| b == 0)
            .find(|f| f.first() == Some(&t))
            .map(|f| String::from_utf8_lossy(&f[1..]).into_owned())
            .unwrap_or_default()
    };
    (field(b'C'), field(b'M'))
}

impl Raw {
    /// Connects with these startup parameters besides user and database; the FATAL error's
    /// SQLSTATE and message if the server refuses.
    fn connect(s: &TestServer, params: &[(&str, &str)]) -> Result<Raw, (String, String)> {
        let mut sock = TcpStream::connect(s.addr).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut body = 196608i32.to_be_bytes().to_vec();
        for (k, v) in [("user", "postgres"), ("database", "postgres")].iter().chain(params) {
            for x in [k, v] {
                body.extend_from_slice(x.as_bytes());
                body.push(0);
            }
        }
        body.push(0);
        let mut m = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        m.extend(body);
        sock.write_all(&m).unwrap();
        let mut raw = Raw { sock, pid: 0 };
        loop {
            match raw.read() {
                Some((b'K', b)) => raw.pid = i32::from_be_bytes(b[0..4].try_into().unwrap()),
                Some((b'E', b)) => return Err(error_fields(&b)),
                Some((b'Z', _)) => return Ok(raw),
                Some(_) => {}
                None => return Err(("closed".into(), String::new())),
            }
        }
    }

    fn replication(s: &TestServer) -> Raw {
        Raw::connect(s, &[("replication", "database")]).unwrap()
    }

    fn normal(s: &TestServer) -> Raw {
        Raw::connect(s, &[]).unwrap()
    }

    /// One backend message, or `None` once the server closed the connection.
    fn read(&mut self) -> Option<(u8, Vec<u8>)> {
        let mut head = [0u8; 5];
        self.sock.read_exact(&mut head).ok()?;
        let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len - 4];
        self.sock.read_exact(&mut body).ok()?;
        Some((head[0], body))
    }

    /// Sends a simple Query and reads through ReadyForQuery.
    fn query(&mut self, sql: &str) -> Answer {
        self.sock.write_all(&message(b'Q', format!("{sql}\0").as_bytes())).unwrap();
        let (mut rows, mut err) = (Vec::new(), None);
        loop {
            match self.read().expect("connection closed") {
                (b'Z', _) => return err.map_or(Ok(rows), Err),
                (b'E', b) => err = Some(error_fields(&b)),
                (b'D', b) => {
                    let n = i16::from_be_bytes([b[0], b[1]]) as usize;
                    let (mut at, mut row) = (2, Vec::with_capacity(n));
                    for _ in 0..n {
                        let len = i32::from_be_bytes(b[at..at + 4].try_into().unwrap());
                        at += 4;
                        if len < 0 {
                            row.push(None);
                        } else {
                            row.push(Some(String::from_utf8_lossy(&b[at..at + len as usize]).into_owned()));
                            at += len as usize;
                        }
                    }
                    rows.push(row);
                }
                _ => {}
            }
        }
    }

    /// The one value a query returns.
    fn value(&mut self, sql: &str) -> String {
        let rows = self.query(sql).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        rows[0][0].clone().unwrap_or_else(|| "NULL".into())
    }

    /// The SQLSTATE a command fails with.
    fn code(&mut self, sql: &str) -> String {
        match self.query(sql) {
            Err((code, _)) => code,
            Ok(rows) => panic!("{sql} succeeded: {rows:?}"),
        }
    }
}

fn server(dir: &std::path::Path) -> TestServer {
    TestServer::start_with_settings(dir, &[("wal_level", "logical")])
}

/// `sql`'s value in a REPEATABLE READ transaction that imports snapshot `name` first.
fn read_in_snapshot(r: &mut Raw, name: &str, sql: &str) -> String {
    r.query("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    r.query(&format!("SET TRANSACTION SNAPSHOT '{name}'")).unwrap();
    let v = r.value(sql);
    r.query("COMMIT").unwrap();
    v
}

/// The SQLSTATE of importing snapshot `name` first thing in a REPEATABLE READ transaction.
fn import_refused(r: &mut Raw, name: &str) -> String {
    r.query("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    let code = r.code(&format!("SET TRANSACTION SNAPSHOT '{name}'"));
    r.query("ROLLBACK").unwrap();
    code
}

/// Waits (bounded) until `query` on `c` returns `want`.
fn until(c: &mut Raw, query: &str, want: &str) {
    for _ in 0..600 {
        if c.value(query) == want {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{query} never returned {want}");
}

#[test]
fn temporary_slots_belong_to_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let mut a = Raw::replication(&s);
    let mut b = Raw::normal(&s);
    let row = a.query("CREATE_REPLICATION_SLOT tmp TEMPORARY LOGICAL test_decoding (SNAPSHOT 'nothing')").unwrap();
    assert_eq!(row[0][0].as_deref(), Some("tmp"));
    assert_eq!(row[0][2], None, "no snapshot exported");
    let shown =
        b.query("SELECT temporary, active, active_pid FROM pg_replication_slots WHERE slot_name = 'tmp'").unwrap();
    assert_eq!(shown[0], [Some("t".into()), Some("t".into()), Some(a.pid.to_string())]);

    // Another session can neither drop it nor stream it; its owner can stream it.
    assert_eq!(b.code("SELECT pg_drop_replication_slot('tmp')"), "55006");
    assert_eq!(b.code("SELECT pg_replication_slot_advance('tmp', '0/1')"), "55006");
    assert_eq!(b.code("SELECT * FROM pg_logical_slot_peek_changes('tmp', NULL, NULL)"), "55006");
    let mut c = Raw::replication(&s);
    assert_eq!(c.code("START_REPLICATION SLOT tmp LOGICAL 0/0"), "55006");
    assert_eq!(c.code("DROP_REPLICATION_SLOT tmp"), "55006");

    // Any error on its connection drops it, as PostgreSQL does.
    assert_eq!(a.code("DROP_REPLICATION_SLOT nosuch"), "42704");
    assert_eq!(b.value("SELECT count(*) FROM pg_replication_slots"), "0");

    // So does the connection's end, for both ways of making one.
    a.query("CREATE_REPLICATION_SLOT tmp TEMPORARY LOGICAL test_decoding (SNAPSHOT 'nothing')").unwrap();
    a.query("SELECT pg_create_logical_replication_slot('tmp_sql', 'test_decoding', true)").unwrap();
    c.query("CREATE_REPLICATION_SLOT kept LOGICAL test_decoding (SNAPSHOT 'nothing')").unwrap();
    let temps = "SELECT count(*) FROM pg_replication_slots WHERE temporary";
    assert_eq!(b.value(temps), "2");
    drop(a);
    until(&mut b, temps, "0");
    assert_eq!(b.value("SELECT slot_name FROM pg_replication_slots"), "kept");

    // A SQL session's temporary slot: its own to drop, and gone on its next error.
    b.query("SELECT pg_create_logical_replication_slot('mine', 'test_decoding', true)").unwrap();
    assert_eq!(b.value("SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'mine'"), b.pid.to_string());
    assert_eq!(b.value("SELECT count(*) FROM pg_logical_slot_get_changes('mine', NULL, NULL)"), "0");
    b.query("SELECT pg_drop_replication_slot('mine')").unwrap();
    b.query("SELECT pg_create_logical_replication_slot('mine', 'test_decoding', true)").unwrap();
    assert_eq!(b.code("SELECT 1/0"), "22012");
    assert_eq!(b.value(temps), "0");
    // A temporary slot's name is taken like any other's.
    assert_eq!(c.code("CREATE_REPLICATION_SLOT kept TEMPORARY LOGICAL test_decoding (SNAPSHOT 'nothing')"), "42710");
    assert_eq!(b.value("SELECT count(*) FROM pg_replication_slots"), "1");
}

#[test]
fn an_exported_snapshot_reads_what_the_slot_does_not_send() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let mut w = Raw::normal(&s);
    w.query("CREATE TABLE t (id int PRIMARY KEY)").unwrap();
    w.query("INSERT INTO t SELECT g FROM generate_series(1, 50) g").unwrap();
    let mut a = Raw::replication(&s);
    // No SNAPSHOT option: PostgreSQL's default is to export.
    let row = a.query("CREATE_REPLICATION_SLOT ex LOGICAL test_decoding").unwrap();
    let name = row[0][2].clone().expect("a snapshot name");
    w.query("INSERT INTO t SELECT g FROM generate_series(51, 60) g").unwrap();

    let mut r = Raw::normal(&s);
    assert_eq!(read_in_snapshot(&mut r, &name, "SELECT count(*) || ' ' || max(id) FROM t"), "50 50");

    // PostgreSQL's checks, in its order.
    r.query("BEGIN").unwrap();
    assert_eq!(r.code(&format!("SET TRANSACTION SNAPSHOT '{name}'")), "0A000", "READ COMMITTED");
    r.query("ROLLBACK").unwrap();
    r.query("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
    r.query("SELECT 1").unwrap();
    assert_eq!(r.code(&format!("SET TRANSACTION SNAPSHOT '{name}'")), "25001", "after a query");
    r.query("ROLLBACK").unwrap();
    assert_eq!(import_refused(&mut r, "00000000-00000000-9"), "22023");

    // The connection's next command ends the export.
    a.query("IDENTIFY_SYSTEM").unwrap();
    assert_eq!(import_refused(&mut r, &name), "22023", "after the next command");

    // The slot sends exactly the rows the snapshot did not see.
    let sent =
        "SELECT count(*) FROM pg_logical_slot_get_changes('ex', NULL, NULL) WHERE data LIKE 'table public.t: INSERT%'";
    assert_eq!(w.value(sent), "10");

    // Inside a block it is refused; the older syntax exports too.
    a.query("BEGIN").unwrap();
    assert_eq!(a.code("CREATE_REPLICATION_SLOT ex2 LOGICAL test_decoding (SNAPSHOT 'export')"), "25000");
    a.query("ROLLBACK").unwrap();
    let row = a.query("CREATE_REPLICATION_SLOT ex3 LOGICAL test_decoding EXPORT_SNAPSHOT").unwrap();
    let name3 = row[0][2].clone().expect("a snapshot name");
    assert_ne!(name3, name);
    assert_eq!(read_in_snapshot(&mut r, &name3, "SELECT count(*) FROM t"), "60");
    // pg_export_snapshot() in an ordinary session, READ COMMITTED: valid until its transaction
    // ends, whatever its later statements read.
    let mut e = Raw::normal(&s);
    e.query("BEGIN").unwrap();
    let exported = e.value("SELECT pg_export_snapshot()");
    w.query("INSERT INTO t VALUES (61)").unwrap();
    assert_eq!(e.value("SELECT count(*) FROM t"), "61");
    assert_eq!(read_in_snapshot(&mut r, &exported, "SELECT count(*) FROM t"), "60");
    e.query("COMMIT").unwrap();
    assert_eq!(import_refused(&mut r, &exported), "22023", "after its COMMIT");

    // The connection's end ends it too.
    drop(a);
    let mut late = Raw::normal(&s);
    for _ in 0..600 {
        late.query("BEGIN ISOLATION LEVEL REPEATABLE READ").unwrap();
        let gone = late.query(&format!("SET TRANSACTION SNAPSHOT '{name3}'")).is_err();
        late.query("ROLLBACK").unwrap();
        if gone {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the export outlived its connection");
}

#[test]
fn wal_sender_timeout_is_the_connections() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let params = [("replication", "database"), ("options", "-c wal_sender_timeout=1s")];
    let mut a = Raw::connect(&s, &params).unwrap();
    assert_eq!(a.value("SHOW wal_sender_timeout"), "1s");
    a.query("CREATE_REPLICATION_SLOT w LOGICAL test_decoding (SNAPSHOT 'nothing')").unwrap();
    a.sock.write_all(&message(b'Q', b"START_REPLICATION SLOT w LOGICAL 0/0\0")).unwrap();
    // A client that never answers is asked for a reply, then disconnected.
    let (mut started, mut asked) = (false, false);
    while let Some((tag, body)) = a.read() {
        started |= tag == b'W';
        if tag == b'd' && body[0] == b'k' {
            asked |= body[17] == 1;
        }
    }
    assert!(started && asked, "copy both {started}, reply requested {asked}");
    let mut b = Raw::normal(&s);
    assert_eq!(b.value("SELECT active FROM pg_replication_slots WHERE slot_name = 'w'"), "f");

    // Settable per session, PostgreSQL's units; 0 turns it off.
    assert_eq!(b.value("SHOW wal_sender_timeout"), "1min");
    assert_eq!(b.code("SET wal_sender_timeout = 'soon'"), "22023");
    b.query("SET wal_sender_timeout = 0").unwrap();
    assert_eq!(b.value("SHOW wal_sender_timeout"), "0");
    b.query("SET wal_sender_timeout = '90s'").unwrap();
    assert_eq!(b.value("SHOW wal_sender_timeout"), "90s");
    assert_eq!(b.value("SELECT context FROM pg_settings WHERE name = 'wal_sender_timeout'"), "user");

    // A bad value in the startup packet ends the connection, as in PostgreSQL.
    let e = Raw::connect(&s, &[("options", "-c wal_sender_timeout=never")]).err().unwrap();
    assert_eq!(e.0, "22023", "{e:?}");
}
