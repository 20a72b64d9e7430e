//! ALTER TABLE that changes columns, through the engine's API (`Database::alter_table`, see
//! `db::alter`): ADD COLUMN without a rewrite (rows stored before read NULL or the column's
//! missing value), RENAME COLUMN / RENAME TO, SET / DROP NOT NULL, and what a restart, a crash
//! and a logical decoder see.
//!
//! * `added_columns_read_null_or_their_default_without_a_rewrite`: old rows read the new
//!   columns as NULL and as the default, no page changes (same LSNs), new rows and updated old
//!   rows hold their own values; a handle taken before the ALTER writes and reads the new
//!   shape; an index built on the added column finds old rows by their missing value; VACUUM
//!   and `check` are clean; a restart reads the same, and so does a VACUUM FULL, its rebuilt
//!   index too.
//! * `column_changes_fail_as_postgresql_words_them`: duplicate and unknown columns, NOT NULL
//!   without a default on a non-empty table, SET NOT NULL over a NULL, DROP NOT NULL of a
//!   primary-key column; IF NOT EXISTS skips; a failed ALTER changes nothing.
//! * `renames_keep_indexes_working`: RENAME COLUMN renames the key column of the primary key
//!   (its unique violation names the new column, also after a restart), RENAME TO moves the
//!   table (old name gone, indexes and rows kept).
//! * `a_crash_leaves_the_old_or_the_new_definition`: with `FaultFs`, an ALTER whose commit
//!   record may be lost (asynchronous commit) recovers to one definition or the other, never a
//!   mix, and one whose commit was flushed to the new one; `check` clean each time.
//! * `decoding_across_add_column`: pgoutput sends a second Relation message with the new
//!   column before the first change after the ALTER; an update of an old row (replica
//!   identity FULL) carries the missing value in its old row too.

use std::path::Path;

use settledb::db::{AlterTable, Altered, DecodeLimits, PublicationTarget};
use settledb::decode::pgoutput::proto::Normalizer;
use settledb::io::fault::{CrashMode, FaultFs};
use settledb::{Column, Config, Database, Error, ReplicaIdentity, Schema, TableOptions, Type, Value, WalLevel};

fn config() -> Config {
    Config { shared_buffers_bytes: 8 << 20, fsync: false, autovacuum: false, ..Config::default() }
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "v".into(), ty: Type::Text, nullable: true },
        ],
    }
}

fn col(name: &str, ty: Type, nullable: bool) -> Column {
    Column { name: name.into(), ty, nullable }
}

fn add(column: Column, missing: Value) -> AlterTable {
    AlterTable::AddColumn { column, missing, if_not_exists: false }
}

/// Table `t (id int4 primary key, v text)` with ids `0..n` (`v` = `"v<id>"` plus padding, so
/// the rows take several pages).
fn setup(db: &Database, n: i32) {
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    let t = db.create_table("t", schema(), opts).unwrap();
    let mut tx = db.begin().unwrap();
    for id in 0..n {
        tx.insert(&t, &[Value::Int4(id), Value::Text(format!("v{id} {}", "x".repeat(60)))]).unwrap();
    }
    tx.commit().unwrap();
}

/// Every row of `t`, ordered by id.
fn rows(db: &Database) -> Vec<Vec<Value>> {
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    let mut v: Vec<Vec<Value>> = tx.scan(&t).unwrap().map(|r| r.unwrap().1).collect();
    v.sort_by_key(|r| match r[0] {
        Value::Int4(i) => i,
        _ => panic!("{r:?}"),
    });
    v
}

fn assert_check_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap_or_else(|e| panic!("{what}: check failed to run: {e}"));
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

fn page_lsns(db: &Database) -> Vec<String> {
    let t = db.table("t").unwrap();
    (0..db.table_pages(&t).unwrap())
        .map(|b| db.describe_page(&t, b, true).unwrap().lines().next().unwrap().to_string())
        .collect()
}

#[test]
fn added_columns_read_null_or_their_default_without_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    setup(&db, 300);
    let before = db.table("t").unwrap();
    let pages = page_lsns(&db);
    assert!(pages.len() > 2, "several pages: {pages:?}");

    assert_eq!(db.alter_table("t", &add(col("note", Type::Text, true), Value::Null)).unwrap(), Altered::Done);
    assert_eq!(db.alter_table("t", &add(col("n", Type::Int4, false), Value::Int4(7))).unwrap(), Altered::Done);
    assert_eq!(page_lsns(&db), pages, "no page was rewritten");
    let names: Vec<String> = db.table("t").unwrap().schema().columns.iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, ["id", "v", "note", "n"]);

    let all = rows(&db);
    assert_eq!(all.len(), 300);
    assert!(all.iter().all(|r| r.len() == 4 && r[2] == Value::Null && r[3] == Value::Int4(7)), "{:?}", all[0]);

    // The handle taken before the ALTER writes and reads the new shape.
    let mut tx = db.begin().unwrap();
    tx.insert(&before, &[Value::Int4(1000), Value::Null, Value::Text("new".into()), Value::Int4(9)]).unwrap();
    let err = tx.insert(&before, &[Value::Int4(1001), Value::Null]).unwrap_err();
    assert!(err.to_string().contains("row has 2 values but the table has 4 columns"), "{err}");
    drop(tx);
    let mut tx = db.begin().unwrap();
    tx.insert(&before, &[Value::Int4(1000), Value::Null, Value::Text("new".into()), Value::Int4(9)]).unwrap();
    // An old row updated: its new version holds the missing value explicitly.
    let (tid, mut old) = tx.scan(&before).unwrap().map(Result::unwrap).find(|(_, r)| r[0] == Value::Int4(5)).unwrap();
    assert_eq!(old.len(), 4);
    old[1] = Value::Text("updated".into());
    tx.update(&before, tid, &old).unwrap();
    tx.commit().unwrap();

    // An index on the added column finds the old rows by their missing value.
    db.create_index("t_n", "t", &["n"], false).unwrap();
    let ix = db.index("t_n").unwrap();
    let mut tx = db.begin().unwrap();
    let seven = || settledb::index::KeyBound::Included(vec![Value::Int4(7)]);
    let sevens = tx.range(&ix, seven(), seven(), settledb::ScanDirection::Forward, None).unwrap().len();
    assert_eq!(sevens, 300);
    drop(tx);

    let expect = |db: &Database| {
        let all = rows(db);
        assert_eq!(all.len(), 301);
        assert_eq!(all[5], vec![Value::Int4(5), Value::Text("updated".into()), Value::Null, Value::Int4(7)]);
        assert_eq!(all[300], vec![Value::Int4(1000), Value::Null, Value::Text("new".into()), Value::Int4(9)]);
        assert!(all[..300].iter().all(|r| r[3] == Value::Int4(7)));
    };
    expect(&db);
    assert_check_clean(&db, "after the ALTERs");
    db.vacuum(Some("t"), &Default::default()).unwrap();
    expect(&db);
    assert_check_clean(&db, "after VACUUM");
    db.close().unwrap();

    let db = Database::open(dir.path(), config()).unwrap();
    expect(&db);
    assert_eq!(db.table("t").unwrap().schema().columns.len(), 4);
    assert_check_clean(&db, "after a restart");
    // VACUUM FULL copies the old rows as they are stored: they still read the missing value,
    // and the rebuilt index on the added column still finds them by it.
    db.vacuum_full("t", &Default::default()).unwrap();
    expect(&db);
    let ix = db.index("t_n").unwrap();
    let mut tx = db.begin().unwrap();
    let seven = || settledb::index::KeyBound::Included(vec![Value::Int4(7)]);
    assert_eq!(tx.range(&ix, seven(), seven(), settledb::ScanDirection::Forward, None).unwrap().len(), 300);
    drop(tx);
    assert_check_clean(&db, "after VACUUM FULL");
    db.close().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    expect(&db);
    db.close().unwrap();
}

#[test]
fn column_changes_fail_as_postgresql_words_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    setup(&db, 3);
    let msg = |r: settledb::Result<Altered>| r.unwrap_err().to_string();
    let e = db.alter_table("t", &add(col("v", Type::Int4, true), Value::Null)).unwrap_err();
    assert!(matches!(&e, Error::AlreadyExists(m) if m == "column \"v\" of relation \"t\" already exists"), "{e}");
    let skip = AlterTable::AddColumn { column: col("v", Type::Int4, true), missing: Value::Null, if_not_exists: true };
    assert_eq!(db.alter_table("t", &skip).unwrap(), Altered::Skipped);
    assert!(msg(db.alter_table("t", &add(col("c", Type::Int4, false), Value::Null)))
        .ends_with("column \"c\" of relation \"t\" contains null values"));
    let e = db.alter_table("t", &AlterTable::RenameColumn { from: "nope".into(), to: "x".into() }).unwrap_err();
    assert!(matches!(&e, Error::NotFound(m) if m == "column \"nope\" does not exist"), "{e}");
    assert!(msg(db.alter_table("t", &AlterTable::RenameColumn { from: "v".into(), to: "id".into() }))
        .ends_with("column \"id\" of relation \"t\" already exists"));
    // SET NOT NULL over a NULL, DROP NOT NULL of the primary key.
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(10), Value::Null]).unwrap();
    tx.commit().unwrap();
    let set = |column: &str, not_null| AlterTable::SetNotNull { column: column.into(), not_null };
    assert!(msg(db.alter_table("t", &set("v", true))).ends_with("column \"v\" of relation \"t\" contains null values"));
    assert!(msg(db.alter_table("t", &set("id", false))).ends_with("column \"id\" is in a primary key"));
    assert_eq!(db.table("t").unwrap().schema(), &schema(), "failed ALTERs change nothing");
    assert_eq!(rows(&db).len(), 4);
    // NOT NULL without a default on an empty table, then SET / DROP NOT NULL that hold.
    db.create_table("e", schema(), TableOptions::default()).unwrap();
    db.alter_table("e", &add(col("c", Type::Int8, false), Value::Null)).unwrap();
    assert!(!db.table("e").unwrap().schema().columns[2].nullable);
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(11), Value::Text("x".into())]).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    let (tid, _) = tx.scan(&t).unwrap().map(Result::unwrap).find(|(_, r)| r[1] == Value::Null).unwrap();
    tx.delete(&t, tid).unwrap();
    tx.commit().unwrap();
    db.alter_table("t", &set("v", true)).unwrap();
    let mut tx = db.begin().unwrap();
    assert!(tx.insert(&t, &[Value::Int4(12), Value::Null]).unwrap_err().to_string().contains("not-null"));
    drop(tx);
    db.alter_table("t", &set("v", false)).unwrap();
    assert!(db.table("t").unwrap().schema().columns[1].nullable);
    // A default of the wrong type is refused.
    assert!(msg(db.alter_table("t", &add(col("d", Type::Int4, true), Value::Text("x".into())))).contains("type int4"));
    assert_check_clean(&db, "after the errors");
    db.close().unwrap();
}

#[test]
fn renames_keep_indexes_working() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    setup(&db, 50);
    let handle = db.table("t").unwrap();
    db.alter_table("t", &AlterTable::RenameColumn { from: "id".into(), to: "key".into() }).unwrap();
    db.alter_table("t", &AlterTable::RenameTable { to: "u".into() }).unwrap();
    assert!(db.table("t").is_err(), "the old name is gone");
    let check = |db: &Database| {
        let u = db.table("u").unwrap();
        assert_eq!(u.schema().columns[0].name, "key");
        let pk = db.index("t_pkey").unwrap();
        assert_eq!(pk.columns(), ["key"]);
        let mut tx = db.begin().unwrap();
        assert!(tx.get(&pk, &[Value::Int4(7)]).unwrap().is_some());
        let e = tx.insert(&u, &[Value::Int4(7), Value::Null]).unwrap_err();
        assert!(matches!(&e, Error::UniqueViolation { index, key } if index == "t_pkey" && key == "key)=(7"), "{e:?}");
    };
    check(&db);
    // The handle from before the renames follows the table.
    let mut tx = db.begin().unwrap();
    assert_eq!(tx.scan(&handle).unwrap().count(), 50);
    tx.insert(&handle, &[Value::Int4(100), Value::Null]).unwrap();
    tx.commit().unwrap();
    assert_check_clean(&db, "after the renames");
    db.close().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    check(&db);
    assert_check_clean(&db, "after a restart");
    db.close().unwrap();
}

#[test]
fn a_crash_leaves_the_old_or_the_new_definition() {
    let dir = Path::new("/data");
    for synchronous_commit in [false, true] {
        let mut cfg = Config::from_pairs(vec![
            ("checkpoint_timeout", "1d"),
            ("max_wal_size", "1TB"),
            ("wal_writer_delay", "10s"),
        ])
        .unwrap();
        cfg.synchronous_commit = synchronous_commit;
        let fs = FaultFs::new();
        let db = Database::open_with_fs(fs.clone(), dir, cfg.clone()).unwrap();
        setup(&db, 200);
        db.checkpoint().unwrap();
        db.alter_table("t", &add(col("n", Type::Int8, false), Value::Int8(-3))).unwrap();
        for mode in [CrashMode::LoseUnsynced, CrashMode::Random { seed: 11 }] {
            let what = format!("synchronous_commit {synchronous_commit}, {mode:?}");
            let crashed = fs.crash(mode);
            let db2 = Database::open_with_fs(crashed, dir, cfg.clone()).unwrap();
            let cols = db2.table("t").unwrap().schema().columns.len();
            let all = rows(&db2);
            assert_eq!(all.len(), 200, "{what}");
            match cols {
                2 => assert!(!synchronous_commit && all.iter().all(|r| r.len() == 2), "{what}: old definition"),
                3 => assert!(all.iter().all(|r| r.len() == 3 && r[2] == Value::Int8(-3)), "{what}: new definition"),
                n => panic!("{what}: {n} columns"),
            }
            assert_check_clean(&db2, &what);
            db2.abandon();
        }
        db.abandon();
    }
}

#[test]
fn decoding_across_add_column() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), Config { wal_level: WalLevel::Logical, ..config() }).unwrap();
    db.create_publication("p", PublicationTarget::AllTables, Default::default()).unwrap();
    db.create_logical_replication_slot("s", "pgoutput", false).unwrap();
    setup(&db, 0);
    db.alter_table_replica_identity("t", ReplicaIdentity::Full).unwrap();
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    let a = tx.insert(&t, &[Value::Int4(1), Value::Text("a".into())]).unwrap();
    tx.commit().unwrap();
    db.alter_table("t", &add(col("n", Type::Int4, true), Value::Int4(7))).unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &[Value::Int4(2), Value::Text("b".into()), Value::Int4(8)]).unwrap();
    tx.update(&t, a, &[Value::Int4(1), Value::Text("a2".into()), Value::Int4(7)]).unwrap();
    tx.commit().unwrap();
    let o: Vec<(String, Option<String>)> = [("proto_version", "1"), ("publication_names", "p")]
        .iter()
        .map(|(k, v)| (k.to_string(), Some(v.to_string())))
        .collect();
    let r = db.logical_slot_peek_changes("s", DecodeLimits::default(), &o).unwrap();
    let mut n = Normalizer::default();
    let got: Vec<String> = r.rows.iter().map(|r| n.line(&r.data).unwrap()).collect();
    let want = [
        "BEGIN T0",
        "RELATION public.t f (id*:23:-1 v*:25:-1)",
        "INSERT public.t N(t'1' t'a')",
        "COMMIT flags 0",
        "BEGIN T1",
        "RELATION public.t f (id*:23:-1 v*:25:-1 n*:23:-1)",
        "INSERT public.t N(t'2' t'b' t'8')",
        "UPDATE public.t O(t'1' t'a' t'7') N(t'1' t'a2' t'7')",
        "COMMIT flags 0",
    ];
    assert_eq!(got, want);
    db.close().unwrap();
}
