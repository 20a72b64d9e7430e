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
