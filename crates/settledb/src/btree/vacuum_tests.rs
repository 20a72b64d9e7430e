//! Bulk delete under concurrent splits. Every test ends with `check()` clean.

use super::page::{self as bp};
use super::tests::{assert_clean, assert_redo_matches, new_index, open_db};
use super::*;
use crate::db::Database;

type Entry = (i32, Tid);

fn insert_all(db: &Database, ix: &BtreeIndex, entries: &[Entry]) {
    let env = db.inner().env();
    for &(k, t) in entries {
        ix.insert(&env, &[Value::Int4(k)], t, None).unwrap();
    }
}

#[test]
fn splits_during_a_bulk_delete_carry_its_cycle_id_which_its_vacuum_records_clear() {
    let db = open_db();
    let env = db.inner().env();
    let start = env.wal.insert_lsn();
    let ix = new_index(&db, 91030, vec![Type::Int4], false);
    insert_all(&db, &ix, &(0..3000).map(|k| (k, Tid::new(k as u32, 1))).collect::<Vec<_>>());
    let stamped = |id: u16| -> Vec<u32> {
        (1..ix.num_pages(&env).unwrap()).filter(|&b| bp::cycle_id(&ix.read_page(&env, b).unwrap().g.0) == id).collect()
    };
    assert!(stamped(0).len() as u32 == ix.num_pages(&env).unwrap() - 1, "no bulk delete ran: no stamps");

    let guard = cycle::start(&ix).unwrap();
    let id = guard.id();
    assert_ne!(id, 0);
    assert!(cycle::start(&ix).is_err(), "one bulk delete per index at a time");
    // A burst of equal keys in the middle splits one leaf again and again: A -> C -> B -> D.
    insert_all(&db, &ix, &(0..1200).map(|i| (1500, Tid::new(100_000 + i, 2))).collect::<Vec<_>>());
    let chain = stamped(id);
    assert!(chain.len() >= 3, "both halves of every split are stamped: {chain:?}");
    // Exactly one page of the chain ends it: SPLIT_END, and its right sibling has another ID.
    let ends: Vec<u32> = chain
        .iter()
        .copied()
        .filter(|&b| bp::flags(&ix.read_page(&env, b).unwrap().g.0) & bp::BTP_SPLIT_END != 0)
        .collect();
    assert_eq!(ends.len(), 1, "{chain:?}");
    let end = ix.read_page(&env, ends[0]).unwrap();
    assert_ne!(bp::cycle_id(&ix.read_page(&env, bp::next(&end.g.0)).unwrap().g.0), id);
    drop(end);
    for &b in &chain {
        let r = ix.read_page(&env, b).unwrap();
        let p = &r.g.0;
        let last = bp::flags(p) & bp::BTP_SPLIT_END != 0;
        assert!(last || chain.contains(&bp::next(p)), "block {b}: the chain continues to the right");
    }
    drop(guard);
    assert_eq!(cycle::current(&ix), 0, "the cycle ends with its guard");

    // A VACUUM record clears the ID of its page, a DELETE (simple deletion) record does not.
    for (info, cleared) in [(wal::XLOG_BTREE_DELETE, false), (wal::XLOG_BTREE_VACUUM, true)] {
        let mut w = ix.write_page(&env, chain[0]).unwrap();
        let off = bp::first_data_offset(&w.g.0).0;
        vacuum::remove_items(&ix, &env, &mut w, info, &[off], &mut Vec::new(), "test").unwrap();
        assert_eq!(bp::cycle_id(&w.g.0) == 0, cleared, "info {info:#x}");
    }
    assert_clean(&db, &ix);
    // Redo restores the stamps and the clearing byte for byte.
    assert_redo_matches(&db, start, &[91030]);
}
