//! `Database::reload_config`: the parameters outside `config::AT_OPEN` change while the
//! database is open; those in it are reported and left as opened; `autovacuum` turned on by a
//! reload starts autovacuum.

use settledb::{Column, Config, Database, Schema, TableOptions, Type, Value};

#[test]
fn reload_applies_what_can_change_and_names_what_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let opened =
        Config::from_pairs([("autovacuum_naptime", "1min"), ("shared_buffers", "16MB"), ("autovacuum", "off")])
            .unwrap();
    let db = Database::open(dir.path(), opened).unwrap();
    let mut next = Config::clone(&db.config());
    next.set("autovacuum_naptime", "1s").unwrap();
    next.set("autovacuum", "on").unwrap();
    next.set("vacuum_freeze_min_age", "1000").unwrap();
    next.set("synchronous_commit", "off").unwrap();
    next.set("shared_buffers", "64MB").unwrap();
    next.set("max_prepared_transactions", "5").unwrap();
    next.set("default_transaction_isolation", "repeatable read").unwrap();
    next.set("lock_timeout", "2s").unwrap();
    let reloaded = db.reload_config(next);
    assert!(reloaded.autovacuum_failed.is_none(), "{:?}", reloaded.autovacuum_failed);
    let mut kept = reloaded.unapplied;
    kept.sort();
    assert_eq!(kept, ["max_prepared_transactions", "shared_buffers"]);
    let now = db.config();
    assert_eq!(now.autovacuum_naptime_ms, 1_000);
    assert_eq!(now.vacuum_freeze_min_age, 1000);
    assert!(!now.synchronous_commit);
    assert_eq!(now.shared_buffers_bytes, 16 << 20);
    assert_eq!(now.max_prepared_transactions, 0);
    assert_eq!(db.default_transaction_isolation(), settledb::IsolationLevel::RepeatableRead);
    assert_eq!(db.lock_timeout(), Some(std::time::Duration::from_secs(2)));
    // Commits still work with the reloaded synchronous_commit.
    let col = Column { name: "a".into(), ty: Type::Int4, nullable: false };
    let t = db.create_table("t", Schema { columns: vec![col] }, TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    let tids: Vec<_> = (0..2000).map(|i| tx.insert(&t, &[Value::Int4(i)]).unwrap()).collect();
    tx.commit().unwrap();
    // Autovacuum was off at open; the reload started it, and it vacuums the dead rows.
    assert!(db.autovacuum_running());
    let mut tx = db.begin().unwrap();
    for tid in tids {
        tx.delete(&t, tid).unwrap();
    }
    tx.commit().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while db.table_stats(&t).autovacuum_count == 0 {
        assert!(std::time::Instant::now() < deadline, "no autovacuum within 60 s of the reload");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    db.close().unwrap();
}
