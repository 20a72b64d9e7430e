//! Subtransactions end to end: more savepoints than a snapshot can list (the overflowed
//! snapshot must map XIDs through `pg_subtrans`), and a model test of random nested
//! savepoints against a trivially correct oracle, with `check` after each.
//!
//! The oracle is a stack of row maps, one per open savepoint level: SAVEPOINT pushes a copy
//! of the current rows, RELEASE drops the levels above the named one keeping the current
//! rows, ROLLBACK TO restores the rows saved when the named savepoint was set. The
//! transaction's own scan must equal the current rows after every step, another session's
//! scan must equal the committed rows, and at the end COMMIT publishes the current rows
//! (ROLLBACK the committed ones stay).

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use settledb::{Column, Config, Database, IsolationLevel, Schema, Table, TableOptions, Transaction, Type, Value};

type Rows = BTreeMap<i32, i32>;

fn config() -> Config {
    Config { shared_buffers_bytes: 8 << 20, fsync: false, autovacuum: false, ..Config::default() }
}

fn open(dir: &std::path::Path) -> (Database, Table) {
    let db = Database::open(dir, config()).unwrap();
    let schema = Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "val".into(), ty: Type::Int4, nullable: false },
        ],
    };
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", schema, opts).unwrap();
    (db, t)
}

fn rows_of(tx: &mut Transaction<'_>, t: &Table) -> Rows {
    tx.scan(t)
        .unwrap()
        .map(|r| match r.unwrap().1.as_slice() {
            [Value::Int4(id), Value::Int4(v)] => (*id, *v),
            other => panic!("unexpected row {other:?}"),
        })
        .collect()
}

fn committed_rows(db: &Database, t: &Table) -> Rows {
    let mut tx = db.begin().unwrap();
    let r = rows_of(&mut tx, t);
    tx.commit().unwrap();
    r
}

fn assert_check_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap();
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

/// 100 nested savepoints, each inserting a row (every third rolled back, the rest released),
/// seen from REPEATABLE READ snapshots taken before, during and after: a snapshot taken while
/// they ran must keep treating every surviving subtransaction as running after the commit,
/// which past the 64th is only possible through the parent map (the snapshot overflowed).
#[test]
fn more_than_64_subtransactions_stay_invisible_to_an_overflowed_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (db, t) = open(dir.path());
    let mut seed = db.begin().unwrap();
    seed.insert(&t, &[Value::Int4(0), Value::Int4(0)]).unwrap();
    seed.commit().unwrap();

    let mut before = db.begin_with(IsolationLevel::RepeatableRead).unwrap();
    assert_eq!(rows_of(&mut before, &t).len(), 1);
    let mut writer = db.begin().unwrap();
    let mut expected = Rows::from([(0, 0)]);
    for i in 1..=100 {
        writer.savepoint(&format!("s{i}")).unwrap();
        writer.insert(&t, &[Value::Int4(i), Value::Int4(i * 10)]).unwrap();
        expected.insert(i, i * 10);
    }
    // Unwind: every third level rolled back (with what is nested in it, already released).
    for i in (1..=100).rev() {
        if i % 3 == 0 {
            writer.rollback_to(&format!("s{i}")).unwrap();
            expected.retain(|&id, _| id < i);
        }
        writer.release(&format!("s{i}")).unwrap();
    }
    let mut during = db.begin_with(IsolationLevel::RepeatableRead).unwrap();
    assert_eq!(rows_of(&mut during, &t), Rows::from([(0, 0)]), "a running transaction's subtransactions are invisible");
    assert_eq!(rows_of(&mut writer, &t), expected, "the writer sees its surviving subtransactions");
    writer.commit().unwrap();

    assert_eq!(rows_of(&mut before, &t), Rows::from([(0, 0)]));
    assert_eq!(rows_of(&mut during, &t), Rows::from([(0, 0)]), "overflowed snapshot maps subxids to their top");
    before.commit().unwrap();
    during.commit().unwrap();
    assert_eq!(committed_rows(&db, &t), expected);
    // Levels 99, 96, … 3 were rolled back, each taking the deeper levels released into it.
    assert_eq!(expected.len(), 3, "{expected:?}");
    assert_check_clean(&db, "after the overflow test");
}

/// Random savepoint programs against the oracle, `check` after each transaction (the table's
/// primary key makes every insert a unique check against the transaction's own and rolled-back
/// rows, and updates HOT), VACUUM and VACUUM FREEZE between rounds, a crash at the end, and
/// the committed rows again after recovery.
#[test]
fn random_nested_savepoints_match_the_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let (db, t) = open(dir.path());
    let mut rng = StdRng::seed_from_u64(0x5a5e_9017);
    let mut committed = Rows::new();
    let mut next_id = 1;
    for round in 0..60 {
        let iso = if rng.gen_bool(0.5) { IsolationLevel::ReadCommitted } else { IsolationLevel::RepeatableRead };
        let mut tx = db.begin_with(iso).unwrap();
        // (name, rows when set)
        let mut levels: Vec<(String, Rows)> = Vec::new();
        let mut current = committed.clone();
        for step in 0..rng.gen_range(5..40) {
            let what = format!("round {round} step {step}");
            match rng.gen_range(0..10) {
                0 | 1 => {
                    let name = format!("sp{}", rng.gen_range(0..4));
                    tx.savepoint(&name).unwrap();
                    levels.push((name, current.clone()));
                }
                2 => {
                    let name = format!("sp{}", rng.gen_range(0..4));
                    match levels.iter().rposition(|(n, _)| *n == name) {
                        Some(i) => {
                            tx.release(&name).unwrap();
                            levels.truncate(i);
                        }
                        None => assert!(tx.release(&name).is_err(), "{what}: release of unknown {name}"),
                    }
                }
                3 => {
                    let name = format!("sp{}", rng.gen_range(0..4));
                    match levels.iter().rposition(|(n, _)| *n == name) {
                        Some(i) => {
                            tx.rollback_to(&name).unwrap();
                            levels.truncate(i + 1);
                            current = levels[i].1.clone();
                        }
                        None => assert!(tx.rollback_to(&name).is_err(), "{what}: rollback to unknown {name}"),
                    }
                }
                4..=6 => {
                    let v = rng.gen_range(0..1000);
                    tx.insert(&t, &[Value::Int4(next_id), Value::Int4(v)]).unwrap();
                    current.insert(next_id, v);
                    next_id += 1;
                }
                7 | 8 => {
                    if let Some(&id) = current.keys().nth(rng.gen_range(0..current.len().max(1))) {
                        let v = rng.gen_range(0..1000);
                        let tid = find(&mut tx, &t, id);
                        let new = tx.update(&t, tid, &[Value::Int4(id), Value::Int4(v)]).unwrap();
                        assert!(new.is_some(), "{what}: update of {id}");
                        current.insert(id, v);
                    }
                }
                _ => {
                    if let Some(&id) = current.keys().nth(rng.gen_range(0..current.len().max(1))) {
                        let tid = find(&mut tx, &t, id);
                        assert!(tx.delete(&t, tid).unwrap(), "{what}: delete of {id}");
                        current.remove(&id);
                    }
                }
            }
            assert_eq!(rows_of(&mut tx, &t), current, "{what}: the transaction's own view");
            assert_eq!(committed_rows(&db, &t), committed, "{what}: another session's view");
        }
        if rng.gen_bool(0.8) {
            tx.commit().unwrap();
            committed = current;
        } else {
            tx.rollback().unwrap();
        }
        assert_eq!(committed_rows(&db, &t), committed, "round {round}: after its end");
        assert_check_clean(&db, &format!("round {round}"));
        if round % 20 == 19 {
            let freeze = round == 39;
            db.vacuum(Some("t"), &settledb::VacuumParams { freeze, ..Default::default() }).unwrap();
            assert_check_clean(&db, &format!("round {round}, after VACUUM"));
        }
    }
    db.abandon();
    let db = Database::open(dir.path(), config()).unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(committed_rows(&db, &t), committed, "after a crash");
    db.vacuum(Some("t"), &Default::default()).unwrap();
    assert_eq!(committed_rows(&db, &t), committed, "after a crash and VACUUM");
    assert_check_clean(&db, "after a crash and VACUUM");
}

fn find(tx: &mut Transaction<'_>, t: &Table, id: i32) -> settledb::Tid {
    tx.scan(t)
        .unwrap()
        .map(Result::unwrap)
        .find(|(_, v)| v[0] == Value::Int4(id))
        .map(|(tid, _)| tid)
        .unwrap_or_else(|| panic!("row {id} not found"))
}

/// Thousands of subtransactions in one transaction, most released, some rolled back, one
/// savepoint name reused throughout: the commit record lists them all and recovery replays it.
#[test]
fn thousands_of_subtransactions_commit_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let (db, t) = open(dir.path());
    let mut tx = db.begin().unwrap();
    let mut expected = Rows::new();
    for i in 0..5000 {
        tx.savepoint("s").unwrap();
        tx.insert(&t, &[Value::Int4(i), Value::Int4(i)]).unwrap();
        if i % 10 == 9 {
            tx.rollback_to("s").unwrap();
        } else {
            expected.insert(i, i);
        }
        tx.release("s").unwrap();
    }
    let mut other = db.begin_with(IsolationLevel::RepeatableRead).unwrap();
    assert!(rows_of(&mut other, &t).is_empty());
    tx.commit().unwrap();
    assert!(rows_of(&mut other, &t).is_empty(), "subtransactions running at the snapshot stay invisible");
    other.commit().unwrap();
    assert_eq!(committed_rows(&db, &t), expected);
    db.abandon();
    let db = Database::open(dir.path(), config()).unwrap();
    let t = db.table("t").unwrap();
    assert_eq!(committed_rows(&db, &t), expected, "after a crash");
    assert_check_clean(&db, "after a crash");
}
