//! The TPC-C driver on the embedded engine against the specification's consistency conditions.

use settledb::{Config, Database};
use workload::tpcc::{self, embedded, RunConfig, RunProgress};

fn open(dir: &std::path::Path) -> Database {
    let mut c = Config::default();
    c.set("fsync", "off").unwrap();
    c.set("autovacuum_naptime", "1s").unwrap();
    Database::open(dir, c).unwrap()
}

#[test]
fn a_run_keeps_consistency_conditions_one_to_four() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    embedded::create_schema(&db).unwrap();
    embedded::load(&db, 2, 42).unwrap();
    let target = embedded::Embedded::new(&db).unwrap();
    let mut conn = tpcc::TpccTarget::connect(&target).unwrap();
    let before = tpcc::TpccConn::consistency_facts(&mut conn).unwrap();
    assert_eq!(before.violations(), Vec::<String>::new());
    assert_eq!(before.districts.len(), 20);
    assert!(before.districts.iter().all(|d| d.new_orders == 900 && d.d_next_o_id == 3001));

    let cfg = RunConfig {
        warehouses: 2,
        terminals: 4,
        transactions: Some(3000),
        duration: None,
        seed: 42,
        mix: Default::default(),
        delivery_workers: 2,
        rate: None,
    };
    let progress = RunProgress::default();
    let r = tpcc::run(&target, &cfg, &progress).unwrap();
    assert_eq!(r.transactions, 3000);
    let after = tpcc::TpccConn::consistency_facts(&mut conn).unwrap();
    assert_eq!(after.violations(), Vec::<String>::new());
    // The run did something to every kind of row the conditions watch.
    let orders: i32 = after.districts.iter().map(|d| d.d_next_o_id).sum::<i32>() - 20 * 3001;
    let new_orders_committed = r.kinds[0].count - r.kinds[0].rolled_back;
    assert_eq!(orders as u64, new_orders_committed);
    let delivered: i64 = 20 * 900 + orders as i64 - after.districts.iter().map(|d| d.new_orders).sum::<i64>();
    assert!(delivered > 0, "deliveries removed no new_order rows");
    drop(conn);
    db.close().unwrap();
}

/// Under a rate limit the terminals run the same seeded requests as unthrottled ones (the
/// transaction count is exact and the mix is the same), and each type's latencies are split
/// into two halves that add up to the whole: the halves the `settle tpcc` report compares.
#[test]
fn rate_limited_run_keeps_its_requests_and_splits_halves() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    embedded::create_schema(&db).unwrap();
    embedded::load(&db, 1, 7).unwrap();
    let target = embedded::Embedded::new(&db).unwrap();
    let cfg = RunConfig {
        warehouses: 1,
        terminals: 2,
        transactions: Some(600),
        duration: None,
        seed: 7,
        mix: Default::default(),
        delivery_workers: 1,
        rate: Some(2000.0),
    };
    let limited = tpcc::run(&target, &cfg, &RunProgress::default()).unwrap();
    assert_eq!(limited.transactions, 600);
    assert_eq!(limited.rate_limit, Some(2000.0));
    for k in &limited.kinds {
        assert_eq!(k.halves[0].count + k.halves[1].count, k.count, "{}: halves do not add up", k.kind);
    }
    // Every terminal switches halves at half its share: 150 of each terminal's 300.
    let terminal_kinds = limited.kinds.iter().filter(|k| k.kind != "DELIVERY_BG");
    let first: u64 = terminal_kinds.clone().map(|k| k.halves[0].count).sum();
    assert_eq!(first, 300);
    // The embedded target charges each type with its own heap accesses; ORDER_STATUS's newest
    // order and DELIVERY's oldest new order come from index-only scans.
    for k in limited.kinds.iter().filter(|k| k.kind != "DELIVERY") {
        let a = k.access.unwrap_or_else(|| panic!("{}: no access counts", k.kind));
        assert_eq!(a.transactions, k.count, "{}", k.kind);
        assert!(a.heap_blks_hit + a.heap_blks_read > 0 || k.count == 0, "{}: no heap access", k.kind);
        let index_only = a.index_only_heap_fetches + a.index_only_fetches_avoided;
        match k.kind {
            "ORDER_STATUS" | "DELIVERY_BG" => assert!(index_only >= k.count, "{}: {index_only}", k.kind),
            _ => assert_eq!(index_only, 0, "{}", k.kind),
        }
    }
    // The same requests as an unthrottled run of the same seed: the same count per type.
    let free = tpcc::run(&target, &RunConfig { rate: None, ..cfg.clone() }, &RunProgress::default()).unwrap();
    let counts = |r: &tpcc::RunResult| r.kinds.iter().map(|k| (k.kind, k.count)).collect::<Vec<_>>();
    assert_eq!(counts(&limited), counts(&free));
    let bad = tpcc::run(&target, &RunConfig { rate: Some(0.0), ..cfg }, &RunProgress::default());
    assert!(bad.is_err(), "a zero rate is refused");
    db.close().unwrap();
}
