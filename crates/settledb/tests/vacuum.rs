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
    // Row by row, not insert_many: a bulk insert hands its full pages to the background
    // writer, whose momentary pins could send VACUUM down the no-prune path and make the
    // exact counts below depend on timing.
    let mut tx = db.begin().unwrap();
    for i in 0..rows {
        tx.insert(&t, &row(i, 0)).unwrap();
    }
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
    // The first reports its index; the second, with nothing deleted and no deleted index
    // pages pending, does not read the index at all (PostgreSQL's amvacuumcleanup skip).
    assert_eq!(r.indexes.len(), 1, "{text}");
    assert!(r2.indexes.is_empty(), "{}", r2.verbose_text());
    assert!(!r2.verbose_text().contains("index \"accounts_pkey\""), "{}", r2.verbose_text());
    check(&db);
}

/// An interrupt stops a VACUUM partway, in each phase and in a parallel one, and leaves a
/// table `check` finds sound, its rows and relfrozenxid as they were; the next VACUUM
/// finishes the work.
#[test]
fn an_interrupted_vacuum_leaves_a_sound_table_for_the_next() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(&[])).unwrap();
    let t = accounts(&db, 20_000);
    let pages = db.vacuum(Some("accounts"), &VacuumParams { index_cleanup: IndexCleanup::Off, ..Default::default() });
    let pages = pages.unwrap().remove(0).orig_pages;
    // Dead rows again, for the interrupted runs: another 1,000 updated, non-HOT.
    let pk = db.index("accounts_pkey").unwrap();
    let mut tx = db.begin().unwrap();
    for i in (3..20_000).step_by(20) {
        tx.update_by_key(&pk, &[Value::Int4(i)], |r| Ok(vec![r[0].clone(), Value::Int4(2), r[2].clone()])).unwrap();
    }
    tx.commit().unwrap();
    let frozen = t.relfrozenxid();
    // Stop at the nth check: early in phase I, late in phase I, in the index pass or phase III.
    for (n, parallel) in [(3, Some(0)), (pages - 5, Some(0)), (pages + 3, Some(0)), (10, Some(2)), (pages + 3, Some(2))]
    {
        let checks = Arc::new(AtomicU32::new(0));
        let seen = checks.clone();
        let interrupt = settledb::Interrupt::new(move || {
            if seen.fetch_add(1, Ordering::SeqCst) + 1 >= n {
                Err("canceling statement due to user request".into())
            } else {
                Ok(())
            }
        });
        let params = VacuumParams { parallel, interrupt: Some(interrupt), ..Default::default() };
        let e = db.vacuum(Some("accounts"), &params).unwrap_err();
        assert!(matches!(e, settledb::Error::Interrupted(_)), "check {n}, parallel {parallel:?}: {e:?}");
        assert!(checks.load(Ordering::SeqCst) >= n);
        assert_eq!(t.relfrozenxid(), frozen, "an interrupted VACUUM does not move relfrozenxid");
        assert_eq!(sum_balances(&db, &t), (20_000, 1000 + 2000));
        check(&db);
    }
    let r = db.vacuum(Some("accounts"), &VacuumParams::default()).unwrap().remove(0);
    assert_eq!(r.num_index_scans, 1, "{}", r.verbose_text());
    let again = db.vacuum(Some("accounts"), &VacuumParams::default()).unwrap().remove(0);
    assert_eq!(
        (again.tuples_deleted, again.lpdead_items, again.num_index_scans),
        (0, 0, 0),
        "{}",
        again.verbose_text()
    );
    assert_eq!(sum_balances(&db, &t), (20_000, 1000 + 2000));
    check(&db);
}

/// The cleanup-only index scan runs when the last one left deleted pages not yet reusable
/// (more than 5% of the index): it recycles them, and after that it is skipped again.
#[test]
fn index_cleanup_recycles_pending_deleted_pages_then_stops_scanning() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(&[])).unwrap();
    let t = accounts(&db, 20_000);
    let pkey = db.index("accounts_pkey").unwrap();
    let mut tx = db.begin().unwrap();
    for aid in 0..15_000 {
        assert!(tx.delete_by_key(&pkey, &[Value::Int4(aid)]).unwrap());
    }
    tx.commit().unwrap();
    let params = VacuumParams { verbose: true, ..Default::default() };
    let r1 = db.vacuum(Some("accounts"), &params).unwrap().remove(0);
    let s1 = r1.indexes[0].1;
    assert!(s1.pages_newly_deleted > 0, "{}", r1.verbose_text());
    check(&db);
    // Deleted pages become reusable once no transaction older than their deletion is left:
    // one more transaction moves the horizon past it. The next VACUUM has nothing to delete
    // but must scan the index to recycle them.
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(100_000, 0)).unwrap();
    tx.commit().unwrap();
    let r2 = db.vacuum(Some("accounts"), &params).unwrap().remove(0);
    assert_eq!(r2.num_index_scans, 0);
    assert_eq!(r2.indexes.len(), 1, "{}", r2.verbose_text());
    let s2 = r2.indexes[0].1;
    assert!(s2.pages_free > 0 && s2.pages_free == s2.pages_deleted, "{}", r2.verbose_text());
    // Nothing pending any more: the third VACUUM leaves the index alone.
    let r3 = db.vacuum(Some("accounts"), &params).unwrap().remove(0);
    assert!(r3.indexes.is_empty(), "{}", r3.verbose_text());
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
    // allow more runs, as autovacuum would make later. On a loaded machine the writer can be
    // descheduled with the pin held for longer than three back-to-back runs take (CI saw
    // that), so the runs are spaced out.
    let mut reports = Vec::new();
    while db.table_pages(&t).unwrap() > 10 && reports.len() < 50 {
        if !reports.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        reports.push(db.vacuum(Some("t"), &VacuumParams { verbose: true, ..Default::default() }).unwrap().remove(0));
    }
    let text: String = reports.iter().map(|r| r.verbose_text()).collect();
    assert_eq!(reports.iter().map(|r| r.removed_pages).sum::<u32>(), pages - 10, "{text}");
    assert_eq!(db.table_pages(&t).unwrap(), 10);
    assert!(text.contains(" to 10 pages"), "{text}");
    // The first run that truncates starts from the table's end (an earlier one may have
    // been stopped by a pinned tail page).
    assert!(reports.iter().find_map(|r| r.truncated).is_some_and(|(from, _)| from == pages), "{text}");
    assert_eq!(sum_balances(&db, &t).0, kept);
    check(&db);
    drop(db);
    let db = Database::open(dir.path(), config(&[])).unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(db.table_pages(&t).unwrap(), 10);
    assert_eq!(sum_balances(&db, &t).0, kept);
    check(&db);
}

/// Seed 000 (pgbench_history): on an append-only table, block-driven freezing lets every
/// VACUUM set relfrozenxid to its own removable cutoff, because every page it sets
/// all-visible is frozen at once and nothing unfrozen is left behind.
#[test]
fn append_only_table_relfrozenxid_follows_oldest_xmin() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(&[("vacuum_freeze_policy", "eager")])).unwrap();
    let t = db.create_table("history", schema(), TableOptions::default()).unwrap();
    for round in 0..4 {
        for batch in 0..50 {
            let mut tx = db.begin().unwrap();
            for i in 0..50 {
                tx.insert(&t, &row(round * 2500 + batch * 50 + i, 0)).unwrap();
            }
            tx.commit().unwrap();
        }
        let r = db.vacuum(Some("history"), &VacuumParams::default()).unwrap().remove(0);
        assert_eq!(r.new_relfrozenxid, Some(r.oldest_xmin), "round {round}:\n{}", r.verbose_text());
        assert_eq!(t.relfrozenxid(), r.oldest_xmin);
        // Only the pages appended since the previous vacuum are read.
        if round > 0 {
            assert!(r.scanned_pages < r.orig_pages, "round {round}:\n{}", r.verbose_text());
        }
    }
    check(&db);
}

/// Seed 000 (the bmsql_oorder log): on a table whose rows are updated some time after they
/// were inserted (TPC-C's delivery of new orders), with that work in flight while VACUUM
/// runs, relfrozenxid advances with every VACUUM to about the previous VACUUM's removable
/// cutoff: the pages the in-flight deliveries touch cannot be frozen, and the oldest XIDs left
/// there are the orders inserted between the last two VACUUMs; everything else is frozen.
#[test]
fn delayed_correlated_updates_advance_relfrozenxid_to_the_previous_cutoff() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(&[("vacuum_freeze_policy", "eager")])).unwrap();
    let opts = TableOptions { primary_key: Some(vec!["aid".into()]), ..TableOptions::default() };
    let t = db.create_table("orders", schema(), opts).unwrap();
    let pk = db.index("orders_pkey").unwrap();
    let per_round = 500;
    let mut cutoffs: Vec<Xid> = Vec::new();
    let mut frozen: Vec<Xid> = Vec::new();
    for round in 0..6 {
        // New orders, one transaction each batch.
        for b in 0..10 {
            let mut tx = db.begin().unwrap();
            for i in 0..per_round / 10 {
                tx.insert(&t, &row(round * per_round + b * (per_round / 10) + i, 0)).unwrap();
            }
            tx.commit().unwrap();
        }
        // Deliveries of the previous round's orders are still running when VACUUM starts.
        let mut inflight = db.begin().unwrap();
        if round > 0 {
            for i in ((round - 1) * per_round..round * per_round).step_by(5) {
                inflight
                    .update_by_key(&pk, &[Value::Int4(i)], |r| {
                        let mut r = r.to_vec();
                        r[1] = Value::Int4(1);
                        Ok(r)
                    })
                    .unwrap();
            }
        }
        let r = db.vacuum(Some("orders"), &VacuumParams::default()).unwrap().remove(0);
        inflight.commit().unwrap();
        cutoffs.push(r.oldest_xmin);
        frozen.push(t.relfrozenxid());
        if round >= 2 {
            // The in-flight deliveries touch rows inserted between the last two vacuums.
            let (older, prev, new) = (cutoffs[cutoffs.len() - 3], cutoffs[cutoffs.len() - 2], t.relfrozenxid());
            assert!(
                new.follows_or_equals(older) && new.precedes_or_equals(prev),
                "round {round}: relfrozenxid {new} should lie between the cutoffs {older} and {prev} of the two \
                 previous vacuums\n{}",
                r.verbose_text()
            );
        }
    }
    // It kept moving: it ends past the cutoff of three vacuums before the last.
    let last = *frozen.last().unwrap();
    assert!(last.follows(cutoffs[cutoffs.len() - 4]), "relfrozenxid stalled: {frozen:?}, cutoffs {cutoffs:?}");
    check(&db);
}

/// Seed 000's all-visible FSM heuristic (`vacuum_fsm_settled`, on with `eager`): a page VACUUM
/// sets all-visible records no free space unless more than half of it is free, so inserts
/// leave settled (frozen) pages alone instead of dirtying them again for a few bytes; a page
/// with more than half its space free is still offered. With the heuristic off, VACUUM
/// records every page's real free space and inserts fill the small holes too.
#[test]
fn fsm_heuristic_keeps_inserts_off_settled_pages() {
    for settled in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let setting = if settled { "on" } else { "off" };
        let db =
            Database::open(dir.path(), config(&[("vacuum_freeze_policy", "eager"), ("vacuum_fsm_settled", setting)]))
                .unwrap();
        let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
        // Row by row: a bulk insert hands its full pages to the background writer, whose
        // momentary pin could send VACUUM down the no-prune path for page 0.
        let mut tx = db.begin().unwrap();
        let tids: Vec<_> = (0..400).map(|i| tx.insert(&t, &row(i, 0)).unwrap()).collect();
        tx.commit().unwrap();
        let per_page = tids.iter().filter(|t| t.block.0 == 0).count();
        // Page 0 loses 5 rows (a small hole), page 1 loses 80% of its rows.
        let mut tx = db.begin().unwrap();
        for tid in tids.iter().filter(|t| t.block.0 == 0).take(5) {
            tx.delete(&t, *tid).unwrap();
        }
        for tid in tids.iter().filter(|t| t.block.0 == 1).take(per_page * 4 / 5) {
            tx.delete(&t, *tid).unwrap();
        }
        tx.commit().unwrap();
        db.vacuum(Some("t"), &VacuumParams::default()).unwrap();
        let fsm = db.free_space_map(&t).unwrap();
        if settled {
            assert_eq!(fsm[0], 0, "settled page 0 must record no free space: {fsm:?}");
        } else {
            assert!(fsm[0] > 0, "page 0's hole is recorded without the heuristic: {fsm:?}");
        }
        assert!(u32::from(fsm[1]) * 32 > 4096, "page 1 is more than half free: {fsm:?}");
        // Reopen (forgets the last insert's target page), then insert rows one at a time.
        db.close().unwrap();
        let db =
            Database::open(dir.path(), config(&[("vacuum_freeze_policy", "eager"), ("vacuum_fsm_settled", setting)]))
                .unwrap();
        let t = db.table("t").unwrap();
        let mut blocks = Vec::new();
        for i in 0..5 {
            let mut tx = db.begin().unwrap();
            blocks.push(tx.insert(&t, &row(1000 + i, 0)).unwrap().block.0);
            tx.commit().unwrap();
        }
        if settled {
            assert!(blocks.iter().all(|&b| b != 0), "inserts went to the settled page: {blocks:?}");
            assert!(blocks.contains(&1), "the half-empty page is still offered: {blocks:?}");
            assert_eq!(db.visibility_map(&t).unwrap()[0], (true, true), "page 0 stays all-frozen");
        } else {
            assert!(blocks.contains(&0), "without the heuristic the hole on page 0 is used: {blocks:?}");
        }
        check(&db);
    }
}

/// VACUUM while writers change the same pages (DESIGN.md §4 invariant 4): with a tiny dead-item
/// budget, phases I and III of each page are far apart and writers update and insert in
/// between; the visibility map must never claim a page whose rows changed after phase I
/// looked at it (phase III re-examines any page whose LSN moved), and no row may be lost.
#[test]
fn vacuum_with_concurrent_writers_keeps_the_map_honest() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(
        dir.path(),
        config(&[("maintenance_work_mem", "1kB"), ("vacuum_freeze_policy", "eager"), ("synchronous_commit", "off")]),
    )
    .unwrap();
    let t = accounts(&db, 6_000);
    let pk = db.index("accounts_pkey").unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let updates = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut n = 0u64;
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut tx = db.begin().unwrap();
                for _ in 0..10 {
                    let key = (i * 37) % 6_000;
                    let done = tx
                        .update_by_key(&pk, &[Value::Int4(key)], |r| {
                            let mut r = r.to_vec();
                            if let Value::Int4(b) = r[1] {
                                r[1] = Value::Int4(b + 1);
                            }
                            Ok(r)
                        })
                        .unwrap();
                    assert!(done.is_some(), "row {key} not found by its key");
                    i += 1;
                    n += 1;
                }
                tx.commit().unwrap();
            }
            n
        });
        // Stops the writer however this thread leaves (a failed assertion included).
        struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let guard = Stop(&stop);
        for _ in 0..4 {
            db.vacuum(Some("accounts"), &VacuumParams::default()).unwrap();
        }
        drop(guard);
        writer.join().unwrap()
    });
    // The initial 300 rows set to 1 (aid % 20 = 7) plus one per concurrent update.
    assert_eq!(sum_balances(&db, &t), (6_000, 300 + updates as i64));
    db.vacuum(Some("accounts"), &VacuumParams::default()).unwrap();
    check(&db);
}

/// Storage parameters set after CREATE TABLE (`ALTER TABLE ... SET`) override the database's
/// settings for VACUUM and survive a restart; a bad name or value is refused and changes
/// nothing.
#[test]
fn alter_table_set_overrides_the_freeze_policy_and_persists() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(&[("vacuum_freeze_policy", "eager")])).unwrap();
    accounts(&db, 3_000);
    db.alter_table_set("accounts", &[("vacuum_freeze_policy", "lazy"), ("autovacuum_vacuum_scale_factor", "0.05")])
        .unwrap();
    let e = db.alter_table_set("accounts", &[("vacuum_freeze_policy", "fastest")]).unwrap_err();
    assert!(e.to_string().contains("vacuum_freeze_policy"), "{e}");
    db.alter_table_set("accounts", &[("vacuum_max_eager_freeze_failure_rate", "0.2")]).unwrap();
    assert!(db.alter_table_set("accounts", &[("vacuum_max_eager_freeze_failure_rate", "2")]).is_err());
    assert!(db.alter_table_set("accounts", &[("no_such_option", "1")]).is_err());
    assert!(db.alter_table_set("accounts", &[("fillfactor", "50")]).is_err());
    let r = db.vacuum(Some("accounts"), &VacuumParams::default()).unwrap().remove(0);
    assert_eq!((r.policy.as_str(), r.tuples_frozen), ("lazy", 0), "{}", r.verbose_text());
    check(&db);
    db.close().unwrap();
    let db = Database::open(dir.path(), config(&[("vacuum_freeze_policy", "eager")])).unwrap();
    let r = db.vacuum(Some("accounts"), &VacuumParams { disable_page_skipping: true, ..Default::default() }).unwrap();
    assert_eq!(r[0].policy, "lazy", "the option survives a restart");
    db.alter_table_set("accounts", &[("vacuum_freeze_policy", "eager")]).unwrap();
    let r = db.vacuum(Some("accounts"), &VacuumParams { disable_page_skipping: true, ..Default::default() }).unwrap();
    assert_eq!(r[0].policy, "eager");
    assert!(r[0].tuples_frozen > 0, "{}", r[0].verbose_text());
    check(&db);
}

/// `ALTER TABLE ... RESET` returns the named parameters to the database's settings, keeps the
/// others, skips names that are not set (as PostgreSQL does), and survives a restart.
#[test]
fn alter_table_reset_returns_to_the_database_setting_and_persists() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config(&[("vacuum_freeze_policy", "eager")])).unwrap();
    accounts(&db, 3_000);
    db.alter_table_set("accounts", &[("vacuum_freeze_policy", "lazy"), ("autovacuum_vacuum_threshold", "7")]).unwrap();
    db.alter_table_reset("accounts", &[]).unwrap();
    assert_eq!(db.table("accounts").unwrap().options().raw.len(), 2, "an empty reset changes nothing");
    db.alter_table_reset("accounts", &["vacuum_freeze_policy", "no_such_option", "fillfactor"]).unwrap();
    let o = db.table("accounts").unwrap().options();
    assert_eq!(o.raw, vec![("autovacuum_vacuum_threshold".to_string(), "7".to_string())]);
    assert_eq!((o.vacuum_freeze_policy, o.autovacuum_vacuum_threshold), (None, Some(7)));
    let r = db.vacuum(Some("accounts"), &VacuumParams { disable_page_skipping: true, ..Default::default() }).unwrap();
    assert_eq!(r[0].policy, "eager", "the database's policy again");
    assert!(db.alter_table_reset("no_such_table", &["vacuum_truncate"]).is_err());
    db.close().unwrap();
    let db = Database::open(dir.path(), config(&[("vacuum_freeze_policy", "eager")])).unwrap();
    assert_eq!(
        db.table("accounts").unwrap().options().raw,
        vec![("autovacuum_vacuum_threshold".to_string(), "7".to_string())]
    );
    check(&db);
}

/// What a VACUUM leaves, for comparing two of them: every heap page (pageinspect rendering
/// without LSNs: the two ran in a different WAL order), the visibility map and the free space
/// map bits of every page.
fn table_state(db: &Database, t: &settledb::Table) -> (Vec<String>, Vec<(bool, bool)>, Vec<u8>) {
    let pages = (0..db.table_pages(t).unwrap()).map(|b| db.describe_page(t, b, false).unwrap()).collect();
    (pages, db.visibility_map(t).unwrap(), db.free_space_map(t).unwrap())
}

/// The counts a VACUUM reports, for comparing two of them.
fn counts(r: &settledb::VacuumReport) -> [u64; 12] {
    [
        u64::from(r.scanned_pages),
        r.tuples_deleted,
        r.new_live_tuples,
        r.recently_dead_tuples,
        u64::from(r.frozen_pages),
        r.tuples_frozen,
        u64::from(r.vm_new_visible_pages),
        u64::from(r.vm_new_visible_frozen_pages),
        u64::from(r.lpdead_item_pages),
        r.lpdead_items,
        u64::from(r.num_index_scans),
        r.wal.fpi,
    ]
}

/// Block-level parallel VACUUM (seed 003): the leader and its workers split phases I and III
/// by chunks of pages and phase II by the index's pages, and the result is the serial one. Two
/// databases get the same table (~1,000 pages, 4 chunks; 5% of the rows updated non-HOT; an
/// index of ~170 pages, above `min_parallel_index_scan_size`) and the same VACUUM, one serial
/// and one with `PARALLEL 2`; the reports' counts and index figures, every heap page, the
/// visibility map and the free space map must agree, and `check` must be clean. Then the same with a dead-item budget
/// so small that both take several rounds of phases II and III: the parallel leader stops its
/// workers whenever the store fills.
#[test]
fn parallel_vacuum_leaves_what_a_serial_one_leaves() {
    for budget in [None, Some("1kB")] {
        let run = |parallel: u32| {
            let dir = tempfile::tempdir().unwrap();
            let mut pairs = vec![("checkpoint_timeout", "1d"), ("max_wal_size", "1TB")];
            if let Some(b) = budget {
                pairs.push(("maintenance_work_mem", b));
            }
            let db = Database::open(dir.path(), config(&pairs)).unwrap();
            let t = accounts(&db, 60_000);
            let pages = db.table_pages(&t).unwrap();
            assert!(pages > 3 * 256, "the table spans {pages} pages: too few chunks for workers");
            db.checkpoint().unwrap();
            let params = VacuumParams { parallel: Some(parallel), verbose: true, ..VacuumParams::default() };
            let r = db.vacuum(Some("accounts"), &params).unwrap().remove(0);
            assert_eq!(r.parallel_workers, parallel, "workers launched");
            if parallel > 0 {
                assert!(r.verbose_text().contains("INFO:  launched 2 parallel vacuum workers"), "{}", r.verbose_text());
            }
            check(&db);
            let state = table_state(&db, &t);
            let ix: Vec<_> = r
                .indexes
                .iter()
                .map(|(n, s)| (n.clone(), s.num_pages, s.num_index_tuples, s.tuples_removed, s.pages_deleted))
                .collect();
            assert!(ix.iter().all(|i| i.1 >= 64), "{ix:?}: an index below min_parallel_index_scan_size");
            (counts(&r), state, sum_balances(&db, &t), ix, dir)
        };
        let (serial_counts, serial_state, serial_sums, serial_ix, _d1) = run(0);
        let (parallel_counts, parallel_state, parallel_sums, parallel_ix, _d2) = run(2);
        assert_eq!(serial_counts, parallel_counts, "budget {budget:?}: report counts");
        assert_eq!(serial_ix, parallel_ix, "budget {budget:?}: index figures");
        assert_eq!(serial_sums, parallel_sums, "budget {budget:?}: rows");
        if budget.is_some() {
            assert!(serial_counts[10] > 1, "budget {budget:?}: several index scans expected");
        }
        let (sp, svm, sfsm) = serial_state;
        let (pp, pvm, pfsm) = parallel_state;
        assert_eq!(sp.len(), pp.len(), "budget {budget:?}: page count");
        for (b, (x, y)) in sp.iter().zip(&pp).enumerate() {
            assert_eq!(x, y, "budget {budget:?}: heap page {b} differs");
        }
        assert_eq!(svm, pvm, "budget {budget:?}: visibility map");
        assert_eq!(sfsm, pfsm, "budget {budget:?}: free space map");
    }
}

/// `adaptive` (vacuum/adaptive.rs) learns per range of pages where freezing sticks. The table
/// has a hot region (its first pages, a quarter of whose rows are updated between any two
/// VACUUMs, so that every page of it changes) and an append-only region (rows inserted
/// before every VACUUM and never touched again). After ten VACUUMs the hot region is mostly
/// not all-frozen, the append region is all-frozen, relfrozenxid has left the load behind,
/// and few of the pages `adaptive` froze were modified again, where `eager` freezes the hot
/// region at every VACUUM only to see it modified before the next.
#[test]
fn adaptive_freezes_the_append_only_region_and_not_the_hot_one() {
    let run = |policy: &str| {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(dir.path(), config(&[("vacuum_freeze_policy", policy)])).unwrap();
        // Half-full pages: an update finds room on its own page (HOT) and changes only it.
        let opts = TableOptions { fillfactor: 50, primary_key: Some(vec!["aid".into()]), ..TableOptions::default() };
        let t = db.create_table("t", schema(), opts).unwrap();
        let pk = db.index("t_pkey").unwrap();
        let per_round = 2048;
        // Row by row, as in accounts(): no background writer pins on the pages VACUUM reads.
        let append = |round: i32| {
            let mut tx = db.begin().unwrap();
            for i in 0..per_round {
                tx.insert(&t, &row(round * per_round + i, 0)).unwrap();
            }
            tx.commit().unwrap();
        };
        append(0);
        let hot_pages = db.table_pages(&t).unwrap();
        let mut first = None;
        for round in 1..=10 {
            let mut tx = db.begin().unwrap();
            for aid in (round % 4..per_round).step_by(4) {
                let done = tx
                    .update_by_key(&pk, &[Value::Int4(aid)], |r| {
                        let mut r = r.to_vec();
                        r[1] = Value::Int4(round);
                        Ok(r)
                    })
                    .unwrap();
                assert!(done.is_some());
            }
            tx.commit().unwrap();
            append(round);
            let r = db.vacuum(Some("t"), &VacuumParams::default()).unwrap().remove(0);
            assert_eq!(r.policy, policy);
            first.get_or_insert(t.relfrozenxid());
        }
        let map = db.visibility_map(&t).unwrap();
        let (hot, appended) = map.split_at(hot_pages as usize);
        let frozen = |pages: &[(bool, bool)]| pages.iter().filter(|&&(_, f)| f).count() as f64 / pages.len() as f64;
        let stats = db.table_stats(&t);
        check(&db);
        (frozen(hot), frozen(appended), first.unwrap(), t.relfrozenxid(), stats, u64::from(hot_pages))
    };

    let (hot, appended, first, last, stats, _) = run("adaptive");
    println!("adaptive: {:?}", (hot, appended, first, last, stats.pages_frozen, stats.frozen_bits_cleared));
    assert!(hot <= 0.1, "adaptive: {:.0}% of the hot region all-frozen", hot * 100.0);
    assert!(appended >= 0.95, "adaptive: only {:.0}% of the append region all-frozen", appended * 100.0);
    assert!(last.follows(first), "adaptive: relfrozenxid stayed at {first}");
    assert!(stats.pages_frozen > 0, "{stats:?}");
    assert!(
        stats.frozen_bits_cleared * 10 <= stats.pages_frozen,
        "adaptive: {} of {} pages frozen were modified again",
        stats.frozen_bits_cleared,
        stats.pages_frozen
    );

    // eager froze every hot page at each VACUUM, and each was modified before the next.
    let (hot, appended, _, _, stats, hot_pages) = run("eager");
    assert!(hot >= 0.9 && appended >= 0.95, "eager: {hot} {appended}");
    assert!(
        stats.frozen_bits_cleared >= 9 * hot_pages * 9 / 10,
        "eager: only {} of {} pages frozen were modified again ({hot_pages} hot pages)",
        stats.frozen_bits_cleared,
        stats.pages_frozen
    );
}

/// `adaptive` on a queue (TPC-C's new orders): rows are inserted, then deleted in two steps,
/// the second more than FreezeLimit after the insert. At each VACUUM the oldest batch's page
/// is modified (half its rows deleted) and what is left on it is older than FreezeLimit:
/// `lazy` freezes those rows, the page becomes all-frozen, and the next round's delete clears
/// the bit again. `adaptive` judges the queue's range as one where freezing does not stick
/// and freezes a modified page there only by its deferred FreezeLimit, which the rows never
/// reach: no page it freezes is modified again, and relfrozenxid still advances.
#[test]
fn adaptive_does_not_freeze_a_queue_just_before_its_rows_are_deleted() {
    let run = |policy: &str| {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::open(
            dir.path(),
            config(&[
                ("vacuum_freeze_policy", policy),
                ("vacuum_freeze_min_age", "1000"),
                ("vacuum_freeze_table_age", "1000000"),
            ]),
        )
        .unwrap();
        let opts = TableOptions { primary_key: Some(vec!["aid".into()]), ..TableOptions::default() };
        let t = db.create_table("q", schema(), opts).unwrap();
        let pk = db.index("q_pkey").unwrap();
        let per_round = 256;
        let delete = |tx: &mut settledb::Transaction<'_>, round: i32, half: i32| {
            for aid in (round * per_round + half..(round + 1) * per_round).step_by(2) {
                assert!(tx.delete_by_key(&pk, &[Value::Int4(aid)]).unwrap());
            }
        };
        let (mut first, mut cleared_before) = (None, 0);
        for round in 0..16 {
            let mut tx = db.begin().unwrap();
            for i in 0..per_round {
                tx.insert(&t, &row(round * per_round + i, 0)).unwrap();
            }
            if round >= 1 {
                delete(&mut tx, round - 1, 0);
            }
            if round >= 2 {
                delete(&mut tx, round - 2, 1);
            }
            tx.commit().unwrap();
            // The rows of the previous round pass FreezeLimit before this VACUUM.
            db.consume_xids(1500).unwrap();
            db.vacuum(Some("q"), &VacuumParams::default()).unwrap();
            if round == 2 {
                // Counted from here: the first VACUUM since the database was opened has no
                // history to judge by (it froze the first batch, as lazy does).
                first = Some(t.relfrozenxid());
                cleared_before = db.table_stats(&t).frozen_bits_cleared;
            }
        }
        check(&db);
        (db.table_stats(&t).frozen_bits_cleared - cleared_before, first.unwrap(), t.relfrozenxid())
    };

    let (lazy, _, _) = run("lazy");
    assert!(lazy >= 100, "lazy: only {lazy} of the queue's pages were frozen and modified again");
    let (adaptive, first, last) = run("adaptive");
    assert_eq!(adaptive, 0, "adaptive froze {adaptive} queue pages just before their rows went");
    assert!(last.follows(first), "adaptive: relfrozenxid stayed at {first}");
}

/// `adaptive`, where freezing does not stick: a VACUUM made aggressive only by
/// `vacuum_freeze_table_age` freezes by the deferred FreezeLimits, as a normal one does, so it
/// is no freezing cliff; one with DISABLE_PAGE_SKIPPING, or an anti-wraparound one, freezes by
/// FreezeLimit. Two groups of rows on their own pages: the old group (which makes the VACUUM
/// aggressive) is past every limit; the young one is past FreezeLimit only.
#[test]
fn adaptive_aggressive_by_age_freezes_by_the_deferred_limits() {
    const GROUP: i32 = 122; // two full pages
    let run = |params: VacuumParams| {
        let dir = tempfile::tempdir().unwrap();
        let base = [("vacuum_freeze_policy", "adaptive"), ("vacuum_freeze_min_age", "1000")];
        let db =
            Database::open(dir.path(), config(&[base[0], base[1], ("vacuum_freeze_table_age", "1000000")])).unwrap();
        let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
        let insert = |from: i32| {
            let mut tx = db.begin().unwrap();
            for aid in from..from + GROUP {
                tx.insert(&t, &row(aid, 0)).unwrap();
            }
            tx.commit().unwrap();
        };
        let vacuum = |params: &VacuumParams| db.vacuum(Some("t"), params).unwrap().remove(0);
        insert(0);
        let old = t.relfrozenxid();
        // The first VACUUM starts the table's history; the second learns an interval of
        // 10,000 XIDs and, with a freeze table age of a million, freezes nothing.
        vacuum(&VacuumParams::default());
        db.consume_xids(10_000).unwrap();
        let r = vacuum(&VacuumParams::default());
        assert_eq!((r.aggressive, r.tuples_frozen), (false, 0));
        insert(GROUP);
        db.consume_xids(2_000).unwrap();
        // Now the old group (12,000 XIDs old) is past vacuum_freeze_table_age, which makes
        // the VACUUM aggressive. Interval: 2,000 XIDs, so the deferred ages are 8,000 - 2,500
        // for the old group's all-visible pages and 8,000 - 4,000 for the young group's new
        // ones; FreezeLimit's is 1,000, and the young group is 2,000 old.
        let reloaded = db.reload_config(config(&[base[0], base[1], ("vacuum_freeze_table_age", "8000")]));
        assert!(reloaded.unapplied.is_empty());
        let r = vacuum(&params);
        assert!(r.aggressive, "relfrozenxid {old} is older than vacuum_freeze_table_age");
        check(&db);
        (r.tuples_frozen, t.relfrozenxid().follows(old))
    };
    let (frozen, advanced) = run(VacuumParams::default());
    assert_eq!(frozen, GROUP as u64, "aggressive by age: only the old group is past the deferred limits");
    assert!(advanced, "relfrozenxid advances to the young group's XID");
    let dps = VacuumParams { disable_page_skipping: true, ..VacuumParams::default() };
    assert_eq!(run(dps).0, 2 * GROUP as u64, "DISABLE_PAGE_SKIPPING: FreezeLimit");
    let wraparound = VacuumParams { is_autovacuum: true, is_wraparound: true, ..VacuumParams::default() };
    assert_eq!(run(wraparound).0, 2 * GROUP as u64, "anti-wraparound: FreezeLimit");
}
