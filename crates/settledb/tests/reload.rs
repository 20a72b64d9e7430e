//! `Database::reload_config`: the parameters outside `config::AT_OPEN` change while the
//! database is open; those in it are reported and left as opened.

use settledb::{Column, Config, Database, Schema, TableOptions, Type, Value};

#[test]
fn reload_applies_what_can_change_and_names_what_cannot() {
    let dir = tempfile::tempdir().unwrap();
    let opened = Config::from_pairs([("autovacuum_naptime", "1min"), ("shared_buffers", "16MB")]).unwrap();
    let db = Database::open(dir.path(), opened).unwrap();
    let mut next = Config::clone(&db.config());
    next.set("autovacuum_naptime", "5s").unwrap();
    next.set("vacuum_freeze_min_age", "1000").unwrap();
    next.set("synchronous_commit", "off").unwrap();
    next.set("shared_buffers", "64MB").unwrap();
    next.set("max_prepared_transactions", "5").unwrap();
    next.set("default_transaction_isolation", "repeatable read").unwrap();
    next.set("lock_timeout", "2s").unwrap();
    let mut kept = db.reload_config(next);
    kept.sort();
    assert_eq!(kept, ["max_prepared_transactions", "shared_buffers"]);
    let now = db.config();
    assert_eq!(now.autovacuum_naptime_ms, 5_000);
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
    tx.insert(&t, &[Value::Int4(1)]).unwrap();
    tx.commit().unwrap();
    db.close().unwrap();
}
