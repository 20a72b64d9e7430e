//! SIGKILL `settle serve` while a PostgreSQL 15 subscriber streams from it, restart it, and
//! the subscriber resumes: at the end its table equals settledb's row for row, with every
//! acknowledged insert in both (a row applied twice would stop its apply worker on the
//! primary key, and the tables would never converge). Skipped, saying why, without
//! PostgreSQL 15.

mod common;

use std::time::{Duration, Instant};

use common::{free_port, pg15_installed, psql, serve, Peer};

#[test]
fn the_subscriber_resumes_after_settle_serve_is_killed() {
    if !pg15_installed() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (peer, _url) = Peer::start(
        &tmp.path().join("pg"),
        &["max_logical_replication_workers=4", "wal_receiver_status_interval=1s", "wal_retrieve_retry_interval=1s"],
    );
    let data = tmp.path().join("settle");
    let port = free_port().to_string();
    let mut server = serve(&data, &port);
    let schema = "CREATE TABLE t (id int PRIMARY KEY, v text)";
    psql(&port, schema).unwrap();
    psql(&port, "CREATE PUBLICATION p FOR TABLE t").unwrap();
    psql(&peer.port, schema).unwrap();
    psql(
        &peer.port,
        &format!(
            "CREATE SUBSCRIPTION s CONNECTION 'host=127.0.0.1 port={port} user=postgres dbname=postgres' \
             PUBLICATION p WITH (copy_data = false)"
        ),
    )
    .unwrap();

    // Inserts (each with an update of an earlier row); the server is killed a third of the way
    // through and restarted at once, and the statements that meet it down fail.
    let mut acknowledged = Vec::new();
    for i in 0..300 {
        if i == 100 {
            server.kill().expect("SIGKILL settle serve");
            server.wait().unwrap();
            server = serve(&data, &port);
        }
        let sql = format!("INSERT INTO t VALUES ({i}, 'v{i}'); UPDATE t SET v = v || '+' WHERE id = {}", i / 2);
        if psql(&port, &sql).is_ok() {
            acknowledged.push(i);
        }
    }
    let want = psql(&port, "SELECT id, v FROM t ORDER BY id").unwrap();
    let ids: Vec<i64> = want.lines().map(|l| l.split('|').next().unwrap().parse().unwrap()).collect();
    for i in &acknowledged {
        assert!(ids.contains(i), "acknowledged insert {i} is not in settledb");
    }
    assert!(acknowledged.len() > 250, "only {} statements succeeded", acknowledged.len());
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got = psql(&peer.port, "SELECT id, v FROM t ORDER BY id").unwrap();
        if got == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the subscriber has {} rows, settledb {}",
            got.lines().count(),
            want.lines().count()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    psql(&peer.port, "DROP SUBSCRIPTION s").unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
}
