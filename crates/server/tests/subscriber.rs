//! A PostgreSQL 15 subscriber replicating from `settle serve`: publications over SQL, the
//! subscriber's slot and table-list query over a replication connection, its apply worker's
//! stream (pgoutput, protocol version 3), and its table synchronization: the catalog queries,
//! a slot created with `SNAPSHOT 'use'` in a READ ONLY REPEATABLE READ transaction, `COPY …
//! TO STDOUT` with that snapshot, then the slot's stream from its consistent point. At the
//! end the subscriber's rows equal settledb's. Skipped, saying why, when PostgreSQL 15 is not
//! installed.

mod common;

use std::time::{Duration, Instant};

use common::{psql_value, require, PgCluster, TestServer};

/// psql and a subscriber cluster, or `None` (the reason printed) when either is missing.
fn subscriber() -> Option<(std::path::PathBuf, PgCluster)> {
    let psql = require("psql")?;
    let sub = PgCluster::start(&[("max_logical_replication_workers", "4"), ("wal_receiver_status_interval", "1s")])?;
    Some((psql, sub))
}

#[test]
fn a_postgresql_subscriber_applies_what_settledb_publishes() {
    let Some((psql, sub)) = subscriber() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_settings(dir.path(), &[("wal_level", "logical")]);
    let pubq = |q: &str| psql_value(&psql, &server, q);
    let schema = "CREATE TABLE t (id int PRIMARY KEY, v text, n bigint)";
    pubq(schema);
    pubq("CREATE TABLE other (k int PRIMARY KEY)");
    pubq("CREATE PUBLICATION p FOR TABLE t");
    assert_eq!(pubq("SELECT pubname, puballtables FROM pg_publication"), "p|f");
    assert_eq!(pubq("SELECT tablename, attnames FROM pg_publication_tables"), "t|{id,v,n}");

    sub.psql(schema);
    sub.psql(&format!(
        "CREATE SUBSCRIPTION s CONNECTION 'host=127.0.0.1 port={} user=postgres dbname=postgres' PUBLICATION p \
         WITH (copy_data = false)",
        server.port()
    ));
    assert_eq!(pubq("SELECT slot_name, plugin FROM pg_replication_slots"), "s|pgoutput");

    for i in 0..10 {
        pubq(&format!("INSERT INTO t SELECT g, 'v' || g, g FROM generate_series({}, {}) g", i * 100, i * 100 + 99));
        pubq(&format!("UPDATE t SET n = n + {i}, v = 'u{i}' WHERE id % 9 = {}", i % 9));
        pubq(&format!("DELETE FROM t WHERE id % 17 = {i}"));
        pubq(&format!("INSERT INTO other VALUES ({i})"));
    }
    let want = pubq("SELECT id, v, n FROM t ORDER BY id");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = sub.psql("SELECT id, v, n FROM t ORDER BY id");
        if got == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the subscriber has {} rows of {}; its log:\n{}",
            got.lines().count(),
            want.lines().count(),
            sub.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(want.lines().count() > 600, "{} rows", want.lines().count());
    // `other` is not in the publication: nothing of it reached the subscriber's stream (it has
    // no such table, and a change to one would stop its apply worker).
    assert!(!sub.log().contains("other"), "{}", sub.log());

    // The subscriber confirms what it applied.
    let end = pubq("SELECT pg_current_wal_lsn()");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let confirmed = pubq("SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 's'");
        if lsn(&confirmed) >= lsn(&end) {
            break;
        }
        assert!(Instant::now() < deadline, "slot s confirmed only {confirmed}, the WAL is at {end}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // The apply worker's stream, as pg_stat_replication shows it (the subscriber names its
    // connection after the subscription).
    assert_eq!(
        pubq("SELECT application_name, state, sync_state, flush_lsn IS NOT NULL FROM pg_stat_replication"),
        "s|streaming|async|t"
    );
    // The lags the subscriber's reports showed: intervals, well under a minute here.
    let lags = pubq("SELECT write_lag, flush_lag, replay_lag FROM pg_stat_replication");
    for lag in lags.split('|') {
        assert!(lag.starts_with("00:00:"), "pg_stat_replication lags: {lags}");
    }
    let pid = pubq("SELECT pid FROM pg_stat_replication");
    assert_eq!(pubq("SELECT active, active_pid FROM pg_replication_slots"), format!("t|{pid}"));
    // A slot being streamed is not dropped, nor streamed twice.
    let o = common::psql_run(&psql, &server, "SELECT pg_drop_replication_slot('s')");
    assert!(
        common::text(&o).1.contains(&format!("replication slot \"s\" is active for PID {pid}")),
        "{}",
        common::text(&o).1
    );
    if let Some(recv) = common::pg_binary("pg_recvlogical") {
        let port = server.port();
        let args = ["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-d", "postgres", "--slot", "s", "--start"];
        let o = common::run(&recv, &[&args[..], &["--no-loop", "-f", "-"]].concat());
        assert!(common::text(&o).1.contains("is active for PID"), "{}", common::text(&o).1);
    }
    let flushed = pubq("SELECT flush_lsn FROM pg_stat_replication");
    assert!(lsn(&flushed) >= lsn(&end), "pg_stat_replication: flush_lsn {flushed}, WAL at {end}");

    // DROP SUBSCRIPTION drops its slot on settledb.
    sub.psql("DROP SUBSCRIPTION s");
    assert_eq!(pubq("SELECT count(*) FROM pg_replication_slots"), "0");
    // The stream ends when the apply worker's connection closes, which the server may see a
    // moment after the slot was dropped.
    let deadline = Instant::now() + Duration::from_secs(30);
    while pubq("SELECT count(*) FROM pg_stat_replication") != "0" {
        assert!(Instant::now() < deadline, "the apply worker's stream is still listed");
        std::thread::sleep(Duration::from_millis(100));
    }
    pubq("DROP PUBLICATION p");
    assert_eq!(pubq("SELECT count(*) FROM pg_publication"), "0");
}

fn lsn(s: &str) -> u64 {
    let (hi, lo) = s.trim().split_once('/').expect("an LSN");
    (u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap()
}

/// The same with `streaming = on`: a transaction larger than `logical_decoding_work_mem` goes
/// to the subscriber in stream blocks before its commit (pgoutput protocol 3's stream
/// messages), and one that rolls back after streaming is undone there.
#[test]
fn a_streaming_subscriber_gets_large_transactions_in_blocks() {
    let Some((psql, sub)) = subscriber() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server =
        TestServer::start_with_settings(dir.path(), &[("wal_level", "logical"), ("logical_decoding_work_mem", "64kB")]);
    let pubq = |q: &str| psql_value(&psql, &server, q);
    let schema = "CREATE TABLE t (id int PRIMARY KEY, v text)";
    pubq(schema);
    pubq("CREATE PUBLICATION p FOR ALL TABLES");
    sub.psql(schema);
    sub.psql(&format!(
        "CREATE SUBSCRIPTION s CONNECTION 'host=127.0.0.1 port={} user=postgres dbname=postgres' PUBLICATION p \
         WITH (copy_data = false, streaming = on)",
        server.port()
    ));
    // 20,000 rows of 40 bytes in one transaction: far past 64 kB.
    pubq("INSERT INTO t SELECT g, 'row ' || g || ' of the large transaction' FROM generate_series(1, 20000) g");
    pubq("BEGIN; INSERT INTO t SELECT g, 'rolled back' FROM generate_series(20001, 30000) g; ROLLBACK;");
    pubq("UPDATE t SET v = 'last' WHERE id = 1");
    let want = pubq("SELECT count(*), min(id), max(id) FROM t");
    assert_eq!(want, "20000|1|20000");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = sub.psql("SELECT count(*), min(id), max(id) FROM t");
        if got == want && sub.psql("SELECT v FROM t WHERE id = 1") == "last" {
            break;
        }
        assert!(Instant::now() < deadline, "the subscriber has {got}, settledb {want}; its log:\n{}", sub.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    // The slot's counters show the transactions were streamed, not spilled (a stream adds
    // them pass by pass).
    assert_eq!(
        pubq("SELECT stream_txns >= 2, stream_count > 2, spill_txns FROM pg_stat_replication_slots WHERE slot_name = 's'"),
        "t|t|0"
    );
    sub.psql("DROP SUBSCRIPTION s");
}

/// `copy_data = true` (the default) while a writer keeps changing the table: the subscriber's
/// table synchronization copies the rows its slot's snapshot sees and streams the rest from
/// the slot, and the two meet exactly (a row in both would stop the apply worker on the
/// primary key; a row in neither would be missing at the end). The catalog queries the sync
/// worker sends are checked first against what PostgreSQL 15 answers for the same table.
#[test]
fn the_initial_copy_and_the_stream_meet_exactly() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let Some((psql, sub)) = subscriber() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with_settings(dir.path(), &[("wal_level", "logical")]);
    let pubq = |q: &str| psql_value(&psql, &server, q);
    let schema = "CREATE TABLE t (id int PRIMARY KEY, v text, n bigint)";
    pubq(schema);
    pubq("INSERT INTO t SELECT g, 'v' || g, g FROM generate_series(1, 5000) g");
    pubq("CREATE PUBLICATION p FOR ALL TABLES");

    // The sync worker's catalog queries, as PostgreSQL 15.18 sends them; the answers are
    // PostgreSQL's for this table (its OID aside).
    let oid = pubq("SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname = 't'");
    assert_eq!(
        pubq(
            "SELECT c.oid, c.relreplident, c.relkind  FROM pg_catalog.pg_class c  INNER JOIN pg_catalog.pg_namespace n \
             ON (c.relnamespace = n.oid) WHERE n.nspname = 'public'   AND c.relname = 't'"
        ),
        format!("{oid}|d|r")
    );
    // One row, NULL (every column is published): psql -At prints an empty line for it.
    let one_null_row = |q: String| {
        let o = common::psql_run(&psql, &server, &q);
        assert!(o.status.success(), "{q}: {}", common::text(&o).1);
        assert_eq!(common::text(&o).0, "\n", "{q}");
    };
    one_null_row(format!(
        "SELECT DISTINCT  (CASE WHEN (array_length(gpt.attrs, 1) = c.relnatts)   THEN NULL ELSE gpt.attrs END)  \
         FROM pg_publication p,  LATERAL pg_get_publication_tables(p.pubname) gpt,  pg_class c \
         WHERE gpt.relid = {oid} AND c.oid = gpt.relid   AND p.pubname IN ( 'p' )"
    ));
    assert_eq!(
        pubq(&format!(
            "SELECT a.attnum,       a.attname,       a.atttypid,       a.attnum = ANY(i.indkey)  \
             FROM pg_catalog.pg_attribute a  LEFT JOIN pg_catalog.pg_index i \
             ON (i.indexrelid = pg_get_replica_identity_index({oid})) WHERE a.attnum > 0::pg_catalog.int2 \
             AND NOT a.attisdropped AND a.attgenerated = ''   AND a.attrelid = {oid} ORDER BY a.attnum"
        )),
        "1|id|23|t\n2|v|25|f\n3|n|20|f"
    );
    one_null_row(format!(
        "SELECT DISTINCT pg_get_expr(gpt.qual, gpt.relid)  FROM pg_publication p,  \
         LATERAL pg_get_publication_tables(p.pubname) gpt WHERE gpt.relid = {oid}   AND p.pubname IN ( 'p' )"
    ));
    // A READ ONLY block refuses writes, as the sync worker's transaction would.
    let o = common::psql_run(&psql, &server, "BEGIN READ ONLY; INSERT INTO t VALUES (0, 'x', 0)");
    assert!(common::text(&o).1.contains("cannot execute INSERT in a read-only transaction"), "{:?}", common::text(&o));

    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let id = 5001 + i;
                pubq(&format!(
                    "BEGIN; INSERT INTO t VALUES ({id}, 'w{i}', {i}); UPDATE t SET n = n + 1 WHERE id = {}; \
                     DELETE FROM t WHERE id = {}; COMMIT",
                    1 + (i * 7) % 5000,
                    2 + (i * 13) % 4999
                ));
                i += 1;
            }
            i
        });
        sub.psql(schema);
        sub.psql(&format!(
            "CREATE SUBSCRIPTION s CONNECTION 'host=127.0.0.1 port={} user=postgres dbname=postgres' PUBLICATION p",
            server.port()
        ));
        let deadline = Instant::now() + Duration::from_secs(90);
        while sub.psql("SELECT srsubstate FROM pg_subscription_rel") != "r" {
            assert!(Instant::now() < deadline, "the table never became ready; the subscriber's log:\n{}", sub.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        // Some writes after the sync too.
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        let writes = writer.join().unwrap();
        assert!(writes > 0);
    });
    // Every row, in order, on both sides.
    let want = pubq("SELECT id, v, n FROM t ORDER BY id");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = sub.psql("SELECT id, v, n FROM t ORDER BY id");
        if got == want {
            break;
        }
        let counts = (got.lines().count(), want.lines().count());
        assert!(
            Instant::now() < deadline,
            "the subscriber has {} rows, settledb {}; its log:\n{}",
            counts.0,
            counts.1,
            sub.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The sync slot is gone; only the subscription's remains.
    assert_eq!(pubq("SELECT slot_name FROM pg_replication_slots"), "s");
    sub.psql("DROP SUBSCRIPTION s");
}
