//! VACUUM end to end: phases, freezing policies, relfrozenxid, the dead-item budget,
//! truncation, and `check` after each.

use settledb::{
    Column, Config, Database, FreezePolicy, IndexCleanup, Schema, TableOptions, Type, VacuumParams, Value, Xid,
};

fn schema() -> Schema {
    let col = |n: &str, ty| Column { name: n.into(), ty, nullable: false };
    Schema { columns: vec![col("aid", Type::Int4), col("abalance", Type::Int4), col("filler", Type::Text)] }
}

fn row(aid: i32, bal: i32) -> Vec<Value> {
    vec![Value::Int4(aid), Value::Int4(bal), Value::Text(" ".repeat(84))]
}

fn config(pairs: &[(&str, &str)]) -> Config {
    let mut c = Config::from_pairs([("autovacuum", "off")]).unwrap();
    for (k, v) in pairs {
        c.set(k, v).unwrap();
    }
    c
}

fn check(db: &Database) {
    let report = settledb::check::check_database(db).unwrap();
    assert!(report.problems.is_empty(), "check found problems: {:#?}", report.problems);
}

/// `rows` rows with a primary key on aid; then every row with aid % 20 == 7 updated (non-HOT:
/// the pages are full).
fn accounts(db: &Database, rows: i32) -> settledb::Table {
    let opts = TableOptions { primary_key: Some(vec!["aid".into()]), ..TableOptions::default() };
    let t = db.create_table("accounts", schema(), opts).unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert_many(&t, &(0..rows).map(|i| row(i, 0)).collect::<Vec<_>>()).unwrap();
    tx.commit().unwrap();
    let pk = db.index("accounts_pkey").unwrap();
    let mut tx = db.begin().unwrap();
    for i in (7..rows).step_by(20) {
        let done = tx
            .update_by_key(&pk, &[Value::Int4(i)], |r| {
                let mut r = r.to_vec();
                r[1] = Value::Int4(1);
                Ok(r)
            })
            .unwrap();
        assert!(done.is_some());
    }
    tx.commit().unwrap();
    t
}

fn sum_balances(db: &Database, t: &settledb::Table) -> (usize, i64) {
    let mut tx = db.begin().unwrap();
    let mut n = 0;
    let mut sum = 0i64;
    for r in tx.scan(t).unwrap() {
        let (_, v) = r.unwrap();
        n += 1;
        if let Value::Int4(b) = v[1] {
            sum += i64::from(b);
        }
    }
    (n, sum)
}

#[test]
fn vacuum_removes_dead_tuples_and_index_entries() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(&[])).unwrap();
    let t = accounts(&db, 20_000);
    let params = VacuumParams { verbose: true, ..Default::default() };
    let r = db.vacuum(Some("accounts"), &params).unwrap().remove(0);
    let text = r.verbose_text();
    println!("{text}");
    assert_eq!(r.tuples_deleted, 1000, "{text}");
    assert_eq!(r.lpdead_items, 1000, "{text}");
    assert_eq!(r.num_index_scans, 1, "{text}");
    assert_eq!(r.new_live_tuples, 20_000, "{text}");
    assert!(text.contains("index scan needed: "), "{text}");
    assert_eq!(sum_balances(&db, &t), (20_000, 1000));
    check(&db);
    // A second vacuum finds nothing to do and skips the all-visible pages.
    let r2 = db.vacuum(Some("accounts"), &params).unwrap().remove(0);
    assert_eq!(r2.tuples_deleted, 0);
    assert_eq!(r2.num_index_scans, 0);
    assert!(r2.scanned_pages < r.scanned_pages, "{}", r2.verbose_text());
    check(&db);
}

#[test]
fn tiny_maintenance_work_mem_takes_several_index_scans_with_the_same_result() {
    let run = |mem: &str| {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path(), config(&[("maintenance_work_mem", mem)])).unwrap();
        let t = accounts(&db, 20_000);
        let params = VacuumParams { index_cleanup: IndexCleanup::On, ..Default::default() };
        let r = db.vacuum(Some("accounts"), &params).unwrap().remove(0);
        check(&db);
        let pages: Vec<String> =
            (0..db.table_pages(&t).unwrap()).map(|b| db.describe_page(&t, b, false).unwrap()).collect();
        (r, pages, sum_balances(&db, &t))
    };
    let (one, pages_one, sums_one) = run("64MB");
    let (many, pages_many, sums_many) = run("1kB");
    assert_eq!(one.num_index_scans, 1);
    assert!(many.num_index_scans > 2, "index scans: {}\n{}", many.num_index_scans, many.verbose_text());
    assert_eq!(many.dead_items_resets, many.num_index_scans);
    assert_eq!((one.tuples_deleted, one.lpdead_items), (many.tuples_deleted, many.lpdead_items));
    assert_eq!(sums_one, sums_many);
    assert_eq!(pages_one, pages_many, "the heap must end the same after one pass or several");
}

#[test]
fn eager_freezes_all_visible_pages_lazy_does_not() {
    for (policy, expect_frozen) in
        [(FreezePolicy::Eager, true), (FreezePolicy::Lazy, false), (FreezePolicy::Pg16, false)]
    {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path(), config(&[])).unwrap();
        let t = accounts(&db, 5_000);
        let params = VacuumParams { policy: Some(policy), ..Default::default() };
        let r = db.vacuum(Some("accounts"), &params).unwrap().remove(0);
        let text = r.verbose_text();
        if expect_frozen {
            assert_eq!(r.tuples_frozen, 5_000, "{policy}: {text}");
            assert_eq!(r.vm_new_visible_frozen_pages, r.vm_new_visible_pages, "{policy}: {text}");
        } else {
            assert_eq!(r.tuples_frozen, 0, "{policy}: {text}");
            assert_eq!(r.vm_new_visible_frozen_pages, 0, "{policy}: {text}");
        }
        assert!(r.vm_new_visible_pages > 0, "{policy}: {text}");
        // relfrozenxid advances to OldestXmin under eager (nothing unfrozen is left); under lazy
        // it advances to the oldest XID left unfrozen.
        let new = r.new_relfrozenxid.expect("relfrozenxid advances");
        if expect_frozen {
            assert_eq!(new, r.oldest_xmin, "{text}");
        } else {
            assert!(new.precedes(r.oldest_xmin), "{text}");
        }
        assert_eq!(t.relfrozenxid(), new);
        check(&db);
    }
    let _ = Xid::FIRST_NORMAL;
}

#[test]
fn truncates_empty_tail_pages() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(&[])).unwrap();
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    let tids = tx.insert_many(&t, &(0..6100).map(|i| row(i, 0)).collect::<Vec<_>>()).unwrap();
    tx.commit().unwrap();
    let pages = db.table_pages(&t).unwrap();
    assert!(pages > 80);
    let mut tx = db.begin().unwrap();
    let mut kept = 0;
    for tid in &tids {
        if tid.block.0 >= 10 {
            assert!(tx.delete(&t, *tid).unwrap());
        } else {
            kept += 1;
        }
    }
    tx.commit().unwrap();
    // The background writer may hold a pin on a page for a moment (it writes pages a bulk
    // load finished): VACUUM then skips pruning that page and cannot truncate below it, so
    // allow a second run, as autovacuum would do later.
    let mut reports = Vec::new();
    while db.table_pages(&t).unwrap() > 10 && reports.len() < 3 {
        reports.push(db.vacuum(Some("t"), &VacuumParams { verbose: true, ..Default::default() }).unwrap().remove(0));
    }
    let text: String = reports.iter().map(|r| r.verbose_text()).collect();
    assert_eq!(reports.iter().map(|r| r.removed_pages).sum::<u32>(), pages - 10, "{text}");
    assert_eq!(db.table_pages(&t).unwrap(), 10);
    assert!(text.contains(" to 10 pages"), "{text}");
    assert!(reports[0].truncated.is_some_and(|(from, _)| from == pages), "{text}");
    assert_eq!(sum_balances(&db, &t).0, kept);
    check(&db);
    drop(db);
    let db = Database::open(dir.path(), config(&[])).unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(db.table_pages(&t).unwrap(), 10);
    assert_eq!(sum_balances(&db, &t).0, kept);
    check(&db);
}
