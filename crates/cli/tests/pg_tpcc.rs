//! The TPC-C driver on a real PostgreSQL 15, end to end: `settle peer start` brings up a
//! throwaway server, the workload crate creates BenchmarkSQL's schema, loads two warehouses
//! with COPY, runs 2,000 transactions from four terminals, and the database must then satisfy
//! consistency conditions 1–4; `PgObserver` must report figures that moved the way that work
//! moves them, and the server log through SQL.
//!
//! Skipped (with a message) when PostgreSQL 15 is not installed.

mod common;

use common::{pg15_installed, Peer};
use workload::observe::{Observer, PgObserver};
use workload::tpcc::postgres::{self as pgtpcc, PgTarget};
use workload::tpcc::{run, RunConfig, RunProgress, TpccConn, TpccTarget, TABLES};

#[test]
fn tpcc_on_postgres_stays_consistent_and_observable() {
    if !pg15_installed() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let (peer, url) = Peer::start(&tmp.path().join("pg"), &["autovacuum_naptime=1"]);
    assert_eq!(url, format!("postgres://postgres@127.0.0.1:{}/postgres", peer.port));

    pgtpcc::create_schema(&url).expect("create schema");
    pgtpcc::load(&url, 2, 7).expect("load 2 warehouses");
    pgtpcc::vacuum_all(&url).expect("vacuum analyze");

    let mut obs = PgObserver::new(&url).expect("observer");
    let before = obs.observe().expect("observe before");
    let target = PgTarget::new(&url).expect("target");
    let cfg = RunConfig {
        warehouses: 2,
        terminals: 4,
        transactions: Some(2000),
        duration: None,
        seed: 7,
        mix: Default::default(),
        delivery_workers: 1,
        rate: None,
    };
    let result = run(&target, &cfg, &RunProgress::default()).expect("run");
    assert_eq!(result.transactions, 2000);
    let new_orders = result.kinds.iter().find(|k| k.kind == "NEW_ORDER").expect("NEW_ORDER row");
    assert!(new_orders.count > 600, "about 45% New-Orders expected, got {}", new_orders.count);

    let facts = target.connect().expect("connect").consistency_facts().expect("facts");
    assert_eq!(facts.warehouses.len(), 2);
    assert_eq!(facts.districts.len(), 20);
    let violations = facts.violations();
    assert!(violations.is_empty(), "consistency violations: {violations:#?}");
    // Every committed New-Order advanced its district's counter from the loaded 3001.
    let advanced: i64 = facts.districts.iter().map(|d| i64::from(d.d_next_o_id - 3001)).sum();
    assert_eq!(advanced as u64, new_orders.count - new_orders.rolled_back);

    // The terminals' statistics reach the views when their backends flush them (at exit at the
    // latest), so wait for the commits to show, without bounding how long that takes.
    let committed = 2000 - new_orders.rolled_back;
    let after = loop {
        let o = obs.observe().expect("observe after");
        if o.db.xact_commit - before.db.xact_commit >= committed {
            break o;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let d = after.db.since(&before.db);
    assert!(d.tup_inserted > 0 && d.tup_updated > 0 && d.tup_deleted > 0, "{d:?}");
    assert!(d.wal_records > 0 && d.wal_bytes > 0, "{d:?}");
    assert!(d.heap_blks_read + d.heap_blks_hit > 0, "{d:?}");
    assert!(after.next_xid >= before.next_xid + committed / 2, "XIDs: {} -> {}", before.next_xid, after.next_xid);
    for def in TABLES {
        let t = after.table(def.name).unwrap_or_else(|| panic!("{} not observed", def.name));
        assert!(t.heap_pages > 0, "{}: no heap pages", def.name);
        assert!(t.index_pages > 0, "{}: no index pages", def.name);
        assert!(
            t.relfrozenxid_age > 0 && t.relfrozenxid_age < after.next_xid,
            "{}: age {}",
            def.name,
            t.relfrozenxid_age
        );
        assert!(t.pages_frozen.is_none() && t.vm_bits_cleared.is_none());
        assert_eq!(t.anti_wraparound_count, 0, "{}", def.name);
    }
    let stock = after.table("bmsql_stock").expect("stock");
    assert_eq!(stock.n_live_tup, 200_000, "analyzed after the load");
    assert!(stock.heap_blks_hit > 0);

    // The server log, through SQL: whole entries, each starting with its timestamp, none twice.
    let log = obs.take_log().expect("take_log");
    assert!(log.iter().any(|e| e.contains("database system is ready to accept connections")), "{log:#?}");
    assert!(log.iter().all(|e| e.as_bytes()[..4].iter().all(u8::is_ascii_digit)), "{log:#?}");
    let again = obs.take_log().expect("take_log again");
    assert!(again.iter().all(|e| !log.contains(e)), "entries handed out twice");
    drop(peer);
}

#[test]
fn apply_settings_sets_freeze_ages_per_table_and_names_what_it_rejects() {
    if !pg15_installed() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_peer, url) = Peer::start(&tmp.path().join("pg"), &[]);
    pgtpcc::create_schema(&url).expect("create schema");
    let set = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    pgtpcc::apply_settings(
        &url,
        &set(&[
            ("autovacuum_freeze_max_age", "200000"),
            ("vacuum_freeze_min_age", "50000"),
            ("vacuum_freeze_table_age", "150000"),
            ("autovacuum_naptime", "2"),
        ]),
    )
    .expect("apply");
    let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    let opts: Vec<String> =
        c.query_one("SELECT reloptions FROM pg_class WHERE relname = 'bmsql_stock'", &[]).expect("reloptions").get(0);
    for want in ["fillfactor=95", "autovacuum_freeze_max_age=200000", "autovacuum_freeze_min_age=50000"] {
        assert!(opts.iter().any(|o| o == want), "{want} missing from {opts:?}");
    }
    show_becomes(&url, "vacuum_freeze_min_age", "50000");
    show_becomes(&url, "autovacuum_naptime", "2s");

    let err = pgtpcc::apply_settings(&url, &set(&[("vacuum_fsm_settled", "on")])).unwrap_err();
    assert!(format!("{err:#}").contains("vacuum_fsm_settled"), "{err:#}");
    let err = pgtpcc::apply_settings(&url, &set(&[("shared_buffers", "1GB")])).unwrap_err();
    assert!(format!("{err:#}").contains("shared_buffers"), "{err:#}");
    let err = pgtpcc::apply_settings(&url, &set(&[("vacuum_freeze_min_age", "lots")])).unwrap_err();
    assert!(format!("{err:#}").contains("vacuum_freeze_min_age"), "{err:#}");
}

/// Waits for a reloaded setting to reach new sessions (the postmaster rereads its
/// configuration asynchronously after pg_reload_conf()).
fn show_becomes(url: &str, name: &str, want: &str) {
    let mut seen = String::new();
    for _ in 0..100 {
        let mut c = postgres::Client::connect(url, postgres::NoTls).expect("connect");
        seen = c.query_one(&format!("SHOW {name}"), &[]).expect("show").get(0);
        if seen == want {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{name} is {seen}, expected {want}");
}
