//! Many relations (issue "the database frozen XID and autovacuum scheduling that stay cheap with
//! 1,000,000 tables"; seed 001, `vac_update_datfrozenxid`):
//!
//! * `incremental_and_full_frozen_xid_agree_through_vacuums_drops_and_a_crash`: 20,000 tables.
//!   The database frozen XID kept incrementally (the catalog's min-heap) must equal the one a
//!   full scan of `pg_class` computes (`VACUUM (ONLY_DATABASE_STATS)`) and the minimum the test
//!   computes itself from every table's relfrozenxid: after tables are vacuumed (the oldest
//!   ones included, so the minimum moves), after tables are dropped (the oldest ones included),
//!   and after a crash (`Database::abandon` with no checkpoint since the changes), when it is
//!   rebuilt from the catalog. CLOG truncation follows it, and `check` is clean at the end.
//! * `autovacuum_looks_only_at_tables_that_changed`: 5,000 tables, autovacuum on. A launcher
//!   cycle over an idle database looks at no table; after writes to a few tables it looks at
//!   those; the table over its dead-tuple threshold (a per-table reloption) is vacuumed, the
//!   one under it and the one with `autovacuum_enabled = off` are not, and the one whose own
//!   `autovacuum_freeze_max_age` was passed gets an anti-wraparound vacuum.

use std::time::{Duration, Instant};

use settledb::{Column, Config, Database, Schema, TableOptions, Type, VacuumParams, Value, Xid};

fn schema() -> Schema {
    Schema { columns: vec![Column { name: "a".into(), ty: Type::Int4, nullable: false }] }
}

/// The oldest relfrozenxid over every table, by the modulo-2^31 comparison.
fn oracle_min(db: &Database) -> Option<Xid> {
    db.tables()
        .iter()
        .map(|t| t.relfrozenxid())
        .filter(|x| x.is_normal())
        .reduce(|a, b| if b.precedes(a) { b } else { a })
}

/// The three computations agree; returns their answer.
fn assert_agree(db: &Database, what: &str) -> Xid {
    let r = db.vacuum_database_stats().unwrap();
    let want = oracle_min(db);
    assert_eq!(r.scanned_frozen_xid, want, "{what}: full scan vs the tables' relfrozenxid");
    assert_eq!(r.incremental_frozen_xid, want, "{what}: incremental vs the tables' relfrozenxid");
    assert_eq!(r.tables_scanned as usize, db.tables().len(), "{what}: pg_class rows");
    assert_eq!(db.xid_limits().oldest_xid, want.unwrap(), "{what}: the XID limits follow it");
    want.unwrap()
}

fn vacuum(db: &Database, name: &str) {
    db.vacuum(Some(name), &VacuumParams::default()).unwrap();
}

#[test]
fn incremental_and_full_frozen_xid_agree_through_vacuums_drops_and_a_crash() {
    const TABLES: usize = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_pairs([("autovacuum", "off"), ("fsync", "off")]).unwrap();
    let db = Database::open(dir.path(), config.clone()).unwrap();
    for i in 0..TABLES {
        db.create_table(&format!("r{i}"), schema(), TableOptions::default()).unwrap();
    }
    // A row in every 1000th table, so that some vacuums find something.
    for i in (0..TABLES).step_by(1000) {
        let t = db.table(&format!("r{i}")).unwrap();
        let mut tx = db.begin().unwrap();
        tx.insert(&t, &[Value::Int4(i as i32)]).unwrap();
        tx.commit().unwrap();
    }
    let first = assert_agree(&db, "after creating the tables");
    assert_eq!(db.table("pg_class").unwrap().relfrozenxid(), first, "pg_class itself is the oldest");

    // Vacuum pg_class and the oldest tables: the minimum moves up table by table.
    db.consume_xids(1000).unwrap();
    vacuum(&db, "pg_class");
    let mut last = first;
    for i in 0..50 {
        vacuum(&db, &format!("r{i}"));
        if i % 10 == 9 {
            let now = assert_agree(&db, &format!("after vacuuming r0..r{i}"));
            assert!(last.precedes(now), "the frozen XID advances ({last} -> {now})");
            last = now;
        }
    }
    // Vacuums scattered over the rest, with XIDs consumed in between.
    for i in (50..TABLES).step_by(397) {
        db.consume_xids(10).unwrap();
        vacuum(&db, &format!("r{i}"));
    }
    assert_agree(&db, "after scattered vacuums");

    // Drop the oldest remaining tables and a scattered few.
    let dropped: Vec<usize> = (50..2050).chain((5000..TABLES).step_by(7)).collect();
    for &i in &dropped {
        db.drop_table(&format!("r{i}")).unwrap();
    }
    let before_crash = db.vacuum_database_stats().unwrap();
    assert!(before_crash.agrees());
    assert_eq!(before_crash.incremental_frozen_xid, oracle_min(&db), "after the drops");
    let min_before = before_crash.incremental_frozen_xid.unwrap();
    assert!(last.precedes(min_before), "dropping the oldest tables moves the frozen XID");

    // More changes after the last checkpoint, then a crash: recovery replays them and the
    // index is rebuilt from the catalog.
    db.checkpoint().unwrap();
    db.consume_xids(100).unwrap();
    for i in [2050usize, 2051, 3000, 4999] {
        vacuum(&db, &format!("r{i}"));
    }
    for i in 2052..2100 {
        db.drop_table(&format!("r{i}")).unwrap();
    }
    let expected_tables = db.tables().len();
    let expected_min = oracle_min(&db);
    let expected_rfx: Vec<(String, Xid)> =
        db.tables().iter().map(|t| (t.name().to_string(), t.relfrozenxid())).collect();
    db.abandon();

    let db = Database::open(dir.path(), config).unwrap();
    assert!(db.recovery_report().records_replayed > 0, "crash recovery ran");
    assert_eq!(db.tables().len(), expected_tables);
    let got_rfx: Vec<(String, Xid)> = db.tables().iter().map(|t| (t.name().to_string(), t.relfrozenxid())).collect();
    assert_eq!(got_rfx, expected_rfx, "every relfrozenxid survives the crash");
    let after = assert_agree(&db, "after the crash");
    assert_eq!(Some(after), expected_min);

    // And keeps working: vacuum the table holding the minimum.
    db.consume_xids(10).unwrap();
    let holder = db.tables().into_iter().find(|t| t.relfrozenxid() == after).unwrap();
    vacuum(&db, holder.name());
    let moved = assert_agree(&db, "after vacuuming the oldest table after the crash");
    assert!(after.precedes_or_equals(moved));
    let report = settledb::check::check_database(&db).unwrap();
    assert!(report.is_clean(), "{report}");
    db.close().unwrap();
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn autovacuum_looks_only_at_tables_that_changed() {
    const TABLES: usize = 5_000;
    let dir = tempfile::tempdir().unwrap();
    // The launcher's own naptime is long: the test drives cycles with autovacuum_kick.
    let config = Config::from_pairs([("autovacuum", "on"), ("autovacuum_naptime", "1h"), ("fsync", "off")]).unwrap();
    let db = Database::open(dir.path(), config).unwrap();
    for i in 0..TABLES {
        db.create_table(&format!("r{i}"), schema(), TableOptions::default()).unwrap();
    }
    db.autovacuum_kick();
    assert_eq!(db.autovacuum_stats().last_cycle_tables, 0, "an idle database: nothing to look at");

    let with = |pairs: &[(&str, &str)]| {
        let mut o = TableOptions::default();
        for (k, v) in pairs {
            o.options.set(k, v).unwrap();
        }
        o
    };
    let over = db.create_table("over", schema(), with(&[("autovacuum_vacuum_threshold", "10")])).unwrap();
    let under = db.create_table("under", schema(), with(&[("autovacuum_vacuum_threshold", "1000")])).unwrap();
    let off = db
        .create_table("off", schema(), with(&[("autovacuum_vacuum_threshold", "10"), ("autovacuum_enabled", "off")]))
        .unwrap();
    let old = db.create_table("old", schema(), with(&[("autovacuum_freeze_max_age", "100000")])).unwrap();
    for t in [&over, &under, &off] {
        let mut tx = db.begin().unwrap();
        let tids: Vec<_> = (0..50).map(|i| tx.insert(t, &[Value::Int4(i)]).unwrap()).collect();
        tx.commit().unwrap();
        let mut tx = db.begin().unwrap();
        for tid in tids {
            tx.delete(t, tid).unwrap();
        }
        tx.commit().unwrap();
    }
    db.consume_xids(150_000).unwrap();
    db.autovacuum_kick();
    let st = db.autovacuum_stats();
    // The three written tables, "over" once more from the need queue, and the tables whose
    // relfrozenxid deadline passed ("old"); never the 5,000 idle ones.
    assert!(
        (4..=6).contains(&st.last_cycle_tables),
        "looked at {} tables, not only those that changed",
        st.last_cycle_tables
    );
    wait_for("the autovacuums", || {
        let s = db.autovacuum_stats();
        s.vacuums >= 2 && s.running == 0
    });
    let count = |t: &settledb::Table| db.table_stats(t).autovacuum_count;
    assert_eq!(count(&over), 1, "over its threshold");
    assert_eq!(count(&under), 0, "under its threshold");
    assert_eq!(count(&off), 0, "autovacuum_enabled = off");
    assert_eq!(count(&old), 1, "past its own autovacuum_freeze_max_age");
    assert_eq!(db.table_stats(&old).anti_wraparound_count, 1);
    assert_eq!(db.autovacuum_stats().wraparound_vacuums, 1);

    // The vacuums changed two tables' statistics; once seen, the database is idle again.
    db.autovacuum_kick();
    db.autovacuum_kick();
    assert_eq!(db.autovacuum_stats().last_cycle_tables, 0);
    let report = settledb::check::check_database(&db).unwrap();
    assert!(report.is_clean(), "{report}");
    db.close().unwrap();
}
