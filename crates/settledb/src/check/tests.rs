//! `check` against forged visibility-map bits: each test sets a bit the way VACUUM would
//! ([`crate::vm::VisibilityMap::set`], which also sets `PD_ALL_VISIBLE`) on a page that does not
//! deserve it, and expects the problem named; the last one shows what is allowed.

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::db::Table;
use crate::io::fault::FaultFs;
use crate::vm::VmBits;
use crate::{Column, Config, Schema, TableOptions, Type, Value};

fn open() -> Database {
    let fs: Arc<FaultFs> = FaultFs::new();
    // No autovacuum: it would set or clear the bits these tests forge.
    let config = Config::from_pairs(vec![("autovacuum", "off")]).unwrap();
    Database::open_with_fs(fs, Path::new("/db"), config).unwrap()
}

/// A committed table of `n` rows of ~110 bytes (58 to a page).
fn make_table(db: &Database, n: i32) -> (Table, Vec<Tid>) {
    let schema = Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "pad".into(), ty: Type::Text, nullable: false },
        ],
    };
    let t = db.create_table("t", schema, TableOptions::default()).unwrap();
    let mut tx = db.begin().unwrap();
    let tids = (0..n).map(|i| tx.insert(&t, &[Value::Int4(i), Value::Text("p".repeat(100))]).unwrap()).collect();
    tx.commit().unwrap();
    (t, tids)
}

fn set_bits(db: &Database, t: &Table, block: u32, bits: VmBits) {
    let env = db.inner().env();
    let rel = &t.entry.rel;
    let buf = crate::heap::read_page(&env, rel, BlockNumber(block), None).unwrap();
    let mut g = buf.write();
    rel.vm.set(env.maps(), &buf, &mut g.0, bits).unwrap();
}

fn problems(db: &Database) -> Vec<String> {
    check_database(db).unwrap().problems
}

#[test]
fn a_forged_bit_over_a_dead_tuple_is_reported() {
    let db = open();
    let (t, tids) = make_table(&db, 100);
    set_bits(&db, &t, 1, VmBits::ALL_VISIBLE);
    assert_eq!(problems(&db), Vec::<String>::new(), "a page of committed rows may be all-visible");
    let mut tx = db.begin().unwrap();
    assert!(tx.delete(&t, tids[0]).unwrap());
    tx.commit().unwrap();
    // The delete cleared page 0's bit (as it must); forge it again over the dead version.
    set_bits(&db, &t, 0, VmBits::ALL_VISIBLE);
    let p = problems(&db);
    assert!(
        p.contains(&format!(
            "relation \"t\" tuple {}: visibility map says ALL_VISIBLE but this tuple is not visible to all",
            tids[0]
        )),
        "{p:#?}"
    );
    assert!(p.iter().all(|s| s.contains(&tids[0].to_string())), "only the dead tuple is named: {p:#?}");
}

#[test]
fn a_forged_bit_over_an_uncommitted_tuple_is_reported() {
    let db = open();
    let (t, _) = make_table(&db, 100);
    let mut tx = db.begin().unwrap();
    let tid = tx.insert(&t, &[Value::Int4(1000), Value::Text("new".into())]).unwrap();
    set_bits(&db, &t, tid.block.0, VmBits::ALL_VISIBLE);
    let p = problems(&db);
    assert!(
        p.contains(&format!(
            "relation \"t\" tuple {tid}: visibility map says ALL_VISIBLE but this tuple is not visible to all"
        )),
        "{p:#?}"
    );
    tx.commit().unwrap();
}

#[test]
fn all_frozen_over_unfrozen_tuples_is_reported() {
    let db = open();
    let (t, tids) = make_table(&db, 10);
    set_bits(&db, &t, 0, VmBits::VALID);
    let p = problems(&db);
    assert_eq!(p.len(), tids.len(), "one problem per tuple: {p:#?}");
    assert!(p.iter().all(|s| s.contains("visibility map says ALL_FROZEN but this tuple is not frozen")), "{p:#?}");
}

#[test]
fn a_bit_without_pd_all_visible_is_reported_the_reverse_is_allowed() {
    let db = open();
    let (t, _) = make_table(&db, 100);
    let env = db.inner().env();
    let rel = &t.entry.rel;
    // Block 0: the bit is set, the page's flag is not (a heap change that forgot the map).
    set_bits(&db, &t, 0, VmBits::ALL_VISIBLE);
    let buf = crate::heap::read_page(&env, rel, BlockNumber(0), None).unwrap();
    page::clear_flags(&mut buf.write().0, page::PD_ALL_VISIBLE);
    // Block 1: the flag is set, the bit is not (what a crash between VM_CLEAR and the heap
    // change's record leaves).
    set_bits(&db, &t, 1, VmBits::ALL_VISIBLE);
    rel.vm.clear(env.maps(), BlockNumber(1), VmBits::ALL_VISIBLE).unwrap();
    assert_eq!(
        problems(&db),
        vec!["relation \"t\" block 0: visibility map says ALL_VISIBLE but the page lacks PD_ALL_VISIBLE".to_string()]
    );
}

/// `check` against a forged CLOG: a committed subtransaction whose parent the CLOG calls
/// aborted, and a sub-committed mark left behind by no running transaction.
#[test]
fn subtransaction_statuses_that_contradict_the_parent_map_are_reported() {
    let db = open();
    let (t, _) = make_table(&db, 1);
    let mut tx = db.begin().unwrap();
    tx.savepoint("s").unwrap();
    tx.insert(&t, &[Value::Int4(7), Value::Text("x".into())]).unwrap();
    let (top, sub) = (tx.xid().unwrap(), tx.current_xid().unwrap());
    tx.release("s").unwrap();
    tx.savepoint("s2").unwrap();
    tx.insert(&t, &[Value::Int4(8), Value::Text("y".into())]).unwrap();
    let sub2 = tx.current_xid().unwrap();
    tx.commit().unwrap();
    assert!(check_database(&db).unwrap().is_clean());
    let clog = db.inner().xact.clog();
    clog.set_status(sub2, XidStatus::SubCommitted).unwrap();
    clog.set_status(top, XidStatus::Aborted).unwrap();
    let report = check_database(&db).unwrap();
    let text = report.to_string();
    assert!(text.contains(&format!("subtransaction {sub} is committed but its parent {top} is Aborted")), "{text}");
    assert!(text.contains(&format!("subtransaction {sub2} is still sub-committed in the CLOG")), "{text}");
}

/// The check waits for a VACUUM of the table it is about to read (here a held
/// ShareUpdateExclusive lock stands for one in progress): a VACUUM between the check's reading
/// of an index and of the heap made it report entries pointing to unused items.
#[test]
fn the_check_waits_for_a_vacuum_in_progress() {
    let db = open();
    let (t, _) = make_table(&db, 100);
    db.create_index("t_id", "t", &["id"], false).unwrap();
    let inner = db.inner().clone();
    let vacuum = inner.lmgr.new_owner("vacuum");
    let oid = t.entry.rel.oid;
    inner
        .lmgr
        .lock(&vacuum, oid, crate::lmgr::LockMode::ShareUpdateExclusive, crate::lmgr::WaitPolicy::Wait, None)
        .unwrap();
    std::thread::scope(|s| {
        let check = s.spawn(|| check_database(&db));
        // Either the check queues behind the lock or (without the lock) finishes.
        while !inner.lmgr.has_waiters(oid) {
            assert!(!check.is_finished(), "the check ran while a VACUUM of the table held its lock");
            std::thread::yield_now();
        }
        inner.lmgr.release_all(&vacuum);
        let report = check.join().unwrap().unwrap();
        assert!(report.is_clean(), "{report}");
    });
}
