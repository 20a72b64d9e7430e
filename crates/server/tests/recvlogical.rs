//! `pg_recvlogical` (PostgreSQL 15's binary) against `settle serve`: it creates its slot over a
//! replication connection, streams while a workload runs, confirms what it wrote, and the file
//! it writes holds exactly the lines the engine's own decoder gives for the same range of a
//! second slot created at the same point. A second run after a restart gets only what came
//! after its confirmed position: nothing lost, nothing twice. Skipped, saying why, when
//! `psql` or `pg_recvlogical` is not installed.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{psql_run, psql_value, require, run, text, TestServer};
use settledb::db::DecodeLimits;
use settledb::{Database, Lsn};

fn lsn(s: &str) -> Lsn {
    let (hi, lo) = s.trim().split_once('/').expect("an LSN");
    Lsn((u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap())
}

fn recvlogical(bin: &Path, s: &TestServer, args: &[&str]) -> std::process::Output {
    let port = s.port();
    let mut all = vec!["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-d", "postgres"];
    all.extend_from_slice(args);
    run(bin, &all)
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

/// The reference: what the engine decodes from slot `slot` up to `upto`, as lines.
fn engine_lines(dir: &Path, slot: &str, upto: Lsn) -> Vec<String> {
    let mut config = settledb::Config::default();
    config.set("wal_level", "logical").unwrap();
    config.set("autovacuum", "off").unwrap();
    let db = Database::open(dir, config).expect("open the data directory");
    let limits = DecodeLimits { upto_lsn: Some(upto), ..DecodeLimits::default() };
    let r = db.logical_slot_peek_changes(slot, limits, &[]).expect("peek");
    let out = r.rows.into_iter().map(|row| String::from_utf8(row.data).unwrap()).collect();
    db.close().unwrap();
    out
}

#[test]
fn pg_recvlogical_streams_what_the_decoder_decodes_and_resumes_where_it_confirmed() {
    let (Some(psql), Some(recv)) = (require("psql"), require("pg_recvlogical")) else { return };
    let dir = tempfile::tempdir().unwrap();
    let settings = [("wal_level", "logical")];
    let server = TestServer::start_with_settings(dir.path(), &settings);
    let sql = |s: &TestServer, q: &str| psql_value(&psql, s, q);
    sql(&server, "CREATE TABLE t (id int PRIMARY KEY, v text, n bigint)");
    let o = recvlogical(&recv, &server, &["--slot", "s1", "--create-slot", "-P", "test_decoding"]);
    assert!(o.status.success(), "--create-slot: {}", text(&o).1);
    sql(&server, "SELECT pg_create_logical_replication_slot('s2', 'test_decoding')");

    // Stream while the workload runs.
    let out = dir.path().join("stream.out");
    let port = server.port();
    let child = Command::new(&recv)
        .args(["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-d", "postgres", "--slot", "s1", "--start"])
        // Progress reported every second, as written (no fsync: the test needs no durability).
        .args(["--no-loop", "--status-interval", "1", "--fsync-interval", "0", "-f"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pg_recvlogical");
    for i in 0..20 {
        sql(
            &server,
            &format!(
                "INSERT INTO t SELECT g, 'row ' || g, g * {i} FROM generate_series({}, {}) g",
                i * 50,
                i * 50 + 49
            ),
        );
        sql(&server, &format!("UPDATE t SET n = n + 1 WHERE id % 7 = {}", i % 7));
        sql(&server, &format!("DELETE FROM t WHERE id = {}", i * 50 + 3));
    }
    // A transaction rolled back sends nothing; one with a savepoint rolled back sends the rest.
    sql(&server, "BEGIN; INSERT INTO t VALUES (100000, 'gone', 0); ROLLBACK;");
    sql(
        &server,
        "BEGIN; INSERT INTO t VALUES (100001, 'kept', 1); SAVEPOINT a; INSERT INTO t VALUES (100002, 'undone', 2); \
         ROLLBACK TO a; COMMIT;",
    );
    sql(&server, "INSERT INTO t VALUES (999999, 'marker', 0)");
    let end = lsn(&sql(&server, "SELECT pg_current_wal_lsn()"));

    // Wait until the client has confirmed the marker's transaction (its status updates move
    // the slot), then stop it as a user would (SIGINT).
    let deadline = Instant::now() + Duration::from_secs(60);
    let confirmed = || sql(&server, "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's1'");
    while lsn(&confirmed()) < end {
        assert!(Instant::now() < deadline, "s1 confirmed only {}; the file ends {:?}", confirmed(), lines(&out).last());
        std::thread::sleep(Duration::from_millis(50));
    }
    let kill = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("kill");
    assert!(kill.success());
    let exit = child.wait_with_output().expect("pg_recvlogical ends");
    assert!(exit.status.success(), "pg_recvlogical: {}", String::from_utf8_lossy(&exit.stderr));
    let streamed = lines(&out);
    server.stop();

    let reference = engine_lines(dir.path(), "s2", end);
    assert!(reference.len() > 20 * 50, "the reference decoded {} lines", reference.len());
    assert_eq!(streamed.len(), reference.len(), "line counts");
    assert_eq!(streamed, reference);
    assert!(!streamed.iter().any(|l| l.contains("'gone'") || l.contains("'undone'")));
    assert!(streamed.iter().any(|l| l.contains("'kept'")));

    // After a restart, a new run gets what came after the confirmed position and nothing before.
    let server = TestServer::start_with_settings(dir.path(), &settings);
    sql(&server, "INSERT INTO t VALUES (1000000, 'after restart', 0)");
    let end2 = sql(&server, "SELECT pg_current_wal_lsn()");
    let out2 = dir.path().join("stream2.out");
    let o = recvlogical(
        &recv,
        &server,
        &["--slot", "s1", "--start", "--no-loop", "--endpos", &end2, "-f", out2.to_str().unwrap()],
    );
    assert!(o.status.success(), "second run: {}", text(&o).1);
    let again = lines(&out2);
    assert_eq!(again.len(), 3, "{again:?}");
    assert!(again[0].starts_with("BEGIN") && again[2].starts_with("COMMIT"), "{again:?}");
    assert!(again[1].contains("'after restart'"), "{again:?}");
    let confirmed = sql(&server, "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's1'");
    assert!(lsn(&confirmed) >= lsn(&end2), "s1 confirmed {confirmed}, the run ended at {end2}");

    // The replication commands' errors are PostgreSQL's.
    let o = recvlogical(&recv, &server, &["--slot", "nosuch", "--start", "--no-loop", "-f", "-"]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("replication slot \"nosuch\" does not exist"), "{}", text(&o).1);
    let o = recvlogical(&recv, &server, &["--slot", "s1", "--create-slot", "-P", "test_decoding"]);
    assert!(text(&o).1.contains("already exists"), "{}", text(&o).1);
    let o = recvlogical(&recv, &server, &["--slot", "s1", "--drop-slot"]);
    assert!(o.status.success(), "--drop-slot: {}", text(&o).1);
    assert_eq!(sql(&server, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 's1'"), "0");
}

/// The SQL side of the same decoder: `pg_logical_slot_peek_changes` leaves the slot, `get`
/// moves it (by whole transactions with `upto_nchanges`), the binary forms carry `pgoutput`'s
/// messages, and the text forms refuse them.
#[test]
fn pg_logical_slot_functions_decode_over_sql() {
    let Some(psql) = require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_settings(dir.path(), &[("wal_level", "logical")]);
    let sql = |q: &str| psql_value(&psql, &server, q);
    sql("CREATE TABLE t (id int PRIMARY KEY, v text)");
    sql("SELECT pg_create_logical_replication_slot('s', 'test_decoding')");
    sql("SELECT pg_create_logical_replication_slot('b', 'pgoutput')");
    sql("CREATE PUBLICATION p FOR TABLE t");
    sql("INSERT INTO t VALUES (1, 'a'), (2, 'b')");
    sql("INSERT INTO t VALUES (3, 'c')");
    let all = sql("SELECT data FROM pg_logical_slot_peek_changes('s', NULL, NULL, 'skip-empty-xacts', '1')");
    let want: Vec<&str> = all.lines().collect();
    assert_eq!(want.len(), 7, "{all}");
    assert!(want[1].contains("id[integer]:1") && want[5].contains("id[integer]:3"), "{all}");
    // Peeking again gives the same; getting one change returns its whole transaction.
    assert_eq!(sql("SELECT data FROM pg_logical_slot_peek_changes('s', NULL, NULL, 'skip-empty-xacts', '1')"), all);
    let first = sql("SELECT data FROM pg_logical_slot_get_changes('s', NULL, 1, 'skip-empty-xacts', '1')");
    assert_eq!(first.lines().collect::<Vec<_>>(), want[..4]);
    let rest = sql("SELECT data FROM pg_logical_slot_get_changes('s', NULL, NULL, 'skip-empty-xacts', '1')");
    assert_eq!(rest.lines().collect::<Vec<_>>(), want[4..]);
    assert_eq!(sql("SELECT count(*) FROM pg_logical_slot_get_changes('s', NULL, NULL)"), "0");
    // pgoutput: Begin, Relation, two Inserts, Commit for the first transaction, as bytea.
    let kinds = sql("SELECT data FROM pg_logical_slot_peek_binary_changes('b', NULL, NULL, 'proto_version', '1', \
         'publication_names', 'p')");
    // bytea's hex output: `\x`, then the message type byte.
    let got: Vec<&str> = kinds.lines().map(|l| &l[2..4]).collect();
    assert_eq!(&got[..5], ["42", "52", "49", "49", "43"], "{kinds}");
    let o = psql_run(&psql, &server, "SELECT data FROM pg_logical_slot_peek_changes('b', NULL, NULL, 'proto_version', '1', 'publication_names', 'p')");
    assert!(!o.status.success() && text(&o).1.contains("binary"), "{}", text(&o).1);
}
