//! The `pgoutput` plugin end to end: publications created, altered and dropped through the
//! API, a workload decoded through a slot, and the binary messages parsed back and rendered
//! with [`Normalizer`] (XIDs as `T0`, `T1`…, relations by name, no LSNs or times).
//!
//! What it proves: two publications filter different tables and actions (their actions
//! OR-ed per table), replica identity DEFAULT sends `K` old keys and FULL `O` old rows, a
//! relation goes out once per session, transactions that publish nothing send nothing,
//! messages need `messages true`; publications are read as of each change's position in the
//! WAL (an ALTER applies to later changes only, a publication dropped or not yet created at a
//! change is PostgreSQL 15's error, VACUUM of `pg_publication` keeps the versions a slot still
//! reads, a later restart point sees earlier publications); and publications survive a clean
//! restart and a crash.

use settledb::catalog::publication::PublishActions;
use settledb::db::{DecodeLimits, PublicationTarget};
use settledb::decode::pgoutput::proto::Normalizer;
use settledb::{Column, Config, Database, ReplicaIdentity, Schema, Table, TableOptions, Type, Value, WalLevel};

fn config() -> Config {
    Config { shared_buffers_bytes: 8 << 20, autovacuum: false, wal_level: WalLevel::Logical, ..Config::default() }
}

fn create(db: &Database, name: &str) -> Table {
    let schema = Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "val".into(), ty: Type::Text, nullable: true },
        ],
    };
    let opts = TableOptions { primary_key: Some(vec!["id".into()]), ..TableOptions::default() };
    db.create_table(name, schema, opts).unwrap()
}

fn row(id: i32, val: Option<&str>) -> [Value; 2] {
    [Value::Int4(id), val.map_or(Value::Null, |v| Value::Text(v.into()))]
}

fn actions(list: &str) -> PublishActions {
    PublishActions::parse(list).unwrap()
}

/// `peek` with pgoutput: the messages rendered, or the error.
fn peek(db: &Database, publications: &str, extra: &[(&str, &str)]) -> settledb::Result<Vec<String>> {
    let mut o = vec![("proto_version", "1"), ("publication_names", publications)];
    o.extend_from_slice(extra);
    let o: Vec<(String, Option<String>)> = o.iter().map(|(k, v)| (k.to_string(), Some(v.to_string()))).collect();
    let r = db.logical_slot_peek_changes("s", DecodeLimits::default(), &o)?;
    let mut n = Normalizer::default();
    Ok(r.rows.iter().map(|r| n.line(&r.data).unwrap()).collect())
}

fn lines(s: &str) -> Vec<String> {
    s.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect()
}

/// The workload of the first part: three tables, two publications, a slot, five transactions.
fn workload(db: &Database) {
    let t = create(db, "t");
    let full = create(db, "full");
    let other = create(db, "other");
    db.alter_table_replica_identity("full", ReplicaIdentity::Full).unwrap();
    db.create_publication("p_t", PublicationTarget::Tables(&["t"]), PublishActions::default()).unwrap();
    db.create_publication("p_full", PublicationTarget::Tables(&["full"]), actions("insert, delete")).unwrap();
    db.create_logical_replication_slot("s", "pgoutput", false).unwrap();

    let mut tx = db.begin().unwrap();
    let one = tx.insert(&t, &row(1, Some("one"))).unwrap();
    let two = tx.insert(&t, &row(2, None)).unwrap();
    let five = tx.insert(&full, &row(5, Some("x"))).unwrap();
    tx.insert(&other, &row(9, Some("in no publication"))).unwrap();
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    let one = tx.update(&t, one, &row(1, Some("uno"))).unwrap().unwrap();
    tx.update(&t, one, &row(10, Some("uno"))).unwrap();
    tx.delete(&t, two).unwrap();
    let five = tx.update(&full, five, &row(5, Some("y"))).unwrap().unwrap();
    tx.delete(&full, five).unwrap();
    tx.emit_logical_message(true, "pfx", b"hello").unwrap();
    tx.commit().unwrap();

    let mut tx = db.begin().unwrap();
    tx.insert(&other, &row(11, Some("still in none"))).unwrap();
    tx.commit().unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(30, Some("rolled back"))).unwrap();
    tx.rollback().unwrap();
    db.emit_logical_message(false, "nt", b"now").unwrap();
}

const EXPECTED: &str = "
    BEGIN T0
    RELATION public.t d (id*:23:-1 val:25:-1)
    INSERT public.t N(t'1' t'one')
    INSERT public.t N(t'2' n)
    RELATION public.full f (id*:23:-1 val*:25:-1)
    INSERT public.full N(t'5' t'x')
    COMMIT flags 0
    BEGIN T1
    UPDATE public.t N(t'1' t'uno')
    UPDATE public.t K(t'1' n) N(t'10' t'uno')
    DELETE public.t K(t'2' n)
    DELETE public.full O(t'5' t'y')
    MESSAGE transactional 1 prefix pfx content hello
    COMMIT flags 0
    MESSAGE transactional 0 prefix nt content now
";

#[test]
fn publications_filter_tables_and_actions() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    workload(&db);
    assert_eq!(peek(&db, "p_t,p_full", &[("messages", "true")]).unwrap(), lines(EXPECTED));

    // Without messages, and with one publication: only t's changes.
    let want: Vec<String> =
        lines(EXPECTED).into_iter().filter(|l| !l.contains("full") && !l.starts_with("MESSAGE")).collect();
    assert_eq!(peek(&db, "p_t", &[]).unwrap(), want);

    // FOR ALL TABLES takes `other` too (its transaction of its own is no longer empty).
    db.create_publication("p_all", PublicationTarget::AllTables, actions("insert")).unwrap();
    let all = peek_after_creation(&db, "p_all");
    assert_eq!(all.iter().filter(|l| l.starts_with("INSERT public.other")).count(), 2, "{all:?}");
    db.close().unwrap();
}

/// pgoutput reads publications as of each change: a publication created after the changes
/// does not exist for them. A second slot created after it sees it.
fn peek_after_creation(db: &Database, publication: &str) -> Vec<String> {
    let e = peek(db, publication, &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        settledb::Error::NotFound(format!("publication \"{publication}\" does not exist")).to_string()
    );
    db.drop_replication_slot("s").unwrap();
    db.create_logical_replication_slot("s", "pgoutput", false).unwrap();
    let t = db.table("other").unwrap();
    let mut tx = db.begin().unwrap();
    tx.insert(&t, &row(12, Some("a"))).unwrap();
    tx.insert(&t, &row(13, Some("b"))).unwrap();
    tx.commit().unwrap();
    peek(db, publication, &[]).unwrap()
}

#[test]
fn an_alter_publication_applies_from_its_position_in_the_wal() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    let t = create(&db, "t");
    let u = create(&db, "u");
    db.create_publication("p", PublicationTarget::Tables(&["t"]), actions("insert")).unwrap();
    db.create_logical_replication_slot("s", "pgoutput", false).unwrap();
    let insert = |table: &Table, id: i32| {
        let mut tx = db.begin().unwrap();
        let tid = tx.insert(table, &row(id, None)).unwrap();
        tx.commit().unwrap();
        tid
    };
    insert(&u, 1); // u is not in p yet
    db.alter_publication_add_tables("p", &["u"]).unwrap();
    let u2 = insert(&u, 2);
    let mut tx = db.begin().unwrap();
    tx.delete(&u, u2).unwrap(); // deletes are not published yet
    tx.commit().unwrap();
    db.alter_publication_set_publish("p", actions("insert,delete")).unwrap();
    let t3 = insert(&t, 3);
    let mut tx = db.begin().unwrap();
    tx.delete(&t, t3).unwrap();
    tx.commit().unwrap();
    db.alter_publication_drop_tables("p", &["t"]).unwrap();
    insert(&t, 4); // t left p
    let want = "
        BEGIN T0
        RELATION public.u d (id*:23:-1 val:25:-1)
        INSERT public.u N(t'2' n)
        COMMIT flags 0
        BEGIN T1
        RELATION public.t d (id*:23:-1 val:25:-1)
        INSERT public.t N(t'3' n)
        COMMIT flags 0
        BEGIN T2
        DELETE public.t K(t'3' n)
        COMMIT flags 0
    ";
    assert_eq!(peek(&db, "p", &[]).unwrap(), lines(want));

    // A publication dropped before a change is an error when decoding reaches the change.
    db.drop_publication("p").unwrap();
    insert(&t, 5);
    let e = peek(&db, "p", &[]).unwrap_err();
    assert!(e.to_string().contains("publication \"p\" does not exist"), "{e}");
    db.close().unwrap();
}

#[test]
fn publication_commands_fail_as_postgresql_words_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    create(&db, "t");
    let err = |r: settledb::Result<()>| r.unwrap_err().to_string();
    let msg = |e: settledb::Error| e.to_string();
    assert!(err(db.drop_publication("p")).contains("publication \"p\" does not exist"));
    db.create_publication("p", PublicationTarget::Tables(&["t"]), PublishActions::default()).unwrap();
    assert_eq!(
        err(db.create_publication("p", PublicationTarget::AllTables, PublishActions::default())),
        msg(settledb::Error::AlreadyExists("publication \"p\" already exists".into()))
    );
    assert!(err(db.create_publication("q", PublicationTarget::Tables(&["nope"]), PublishActions::default()))
        .contains("relation \"nope\" does not exist"));
    assert!(err(db.alter_publication_add_tables("p", &["t"]))
        .contains("relation \"t\" is already member of publication \"p\""));
    assert!(err(db.alter_publication_add_tables("p", &["nope"])).contains("relation \"nope\" does not exist"));
    assert!(err(db.alter_publication_set_publish("q", PublishActions::default()))
        .contains("publication \"q\" does not exist"));
    assert!(err(db.alter_publication_add_tables("p", &["pg_class"]))
        .contains("cannot add relation \"pg_class\" to publication"));
    assert!(err(db.drop_table("pg_publication")).contains("is a system catalog"));
    db.create_publication("a", PublicationTarget::AllTables, PublishActions::default()).unwrap();
    assert!(err(db.alter_publication_drop_tables("a", &["t"])).contains("is defined as FOR ALL TABLES"));
    // DROP TABLE takes the table out of the publications.
    db.drop_table("t").unwrap();
    let p = db.publications().unwrap().into_iter().find(|p| p.name == "p").unwrap();
    assert_eq!(p.tables, settledb::catalog::publication::PublicationTables::Some(vec![]));
    db.close().unwrap();
}

#[test]
fn publications_survive_a_restart_and_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    workload(&db);
    db.alter_publication_set_publish("p_t", actions("insert,update,delete")).unwrap();
    let before = db.publications().unwrap();
    let decoded = peek(&db, "p_t,p_full", &[("messages", "on")]).unwrap();
    db.close().unwrap();

    let db = Database::open(dir.path(), config()).unwrap();
    assert_eq!(db.publications().unwrap(), before, "after a clean restart");
    assert_eq!(peek(&db, "p_t,p_full", &[("messages", "on")]).unwrap(), decoded);
    db.create_publication("after", PublicationTarget::AllTables, actions("delete")).unwrap();
    let before = db.publications().unwrap();
    db.abandon();

    let db = Database::open(dir.path(), config()).unwrap();
    assert_eq!(db.publications().unwrap(), before, "after a crash");
    assert_eq!(peek(&db, "p_t,p_full", &[("messages", "on")]).unwrap(), decoded);
    db.close().unwrap();
}

/// VACUUM of `pg_publication` keeps the row versions a slot's historic snapshots still need
/// (its `catalog_xmin`), and a later session, from a later restart point, sees what was
/// committed before that point through CLOG.
#[test]
fn vacuum_keeps_what_a_slot_reads_and_a_later_restart_point_sees_earlier_publications() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    let t = create(&db, "t");
    db.create_publication("p", PublicationTarget::Tables(&["t"]), actions("insert")).unwrap();
    db.create_logical_replication_slot("s", "pgoutput", false).unwrap();
    let insert = |id: i32| {
        let mut tx = db.begin().unwrap();
        tx.insert(&t, &row(id, None)).unwrap();
        tx.commit().unwrap();
    };
    insert(1);
    db.alter_publication_set_publish("p", actions("delete")).unwrap();
    insert(2); // not published: p publishes only deletes now
    db.alter_publication_set_publish("p", actions("insert,delete")).unwrap();
    insert(3);
    let report = db.vacuum(Some("pg_publication"), &settledb::VacuumParams::default()).unwrap();
    assert!(!report.is_empty());
    let want = "
        BEGIN T0
        RELATION public.t d (id*:23:-1 val:25:-1)
        INSERT public.t N(t'1' n)
        COMMIT flags 0
        BEGIN T1
        INSERT public.t N(t'3' n)
        COMMIT flags 0
    ";
    assert_eq!(peek(&db, "p", &[]).unwrap(), lines(want), "after VACUUM of pg_publication");

    // Consume, checkpoint (a new running-transactions record), advance: the slot restarts
    // after every publication change, which the next session sees as committed.
    let o: Vec<(String, Option<String>)> = [("proto_version", "1"), ("publication_names", "p")]
        .iter()
        .map(|(k, v)| (k.to_string(), Some(v.to_string())))
        .collect();
    db.logical_slot_get_changes("s", DecodeLimits::default(), &o).unwrap();
    db.checkpoint().unwrap();
    db.replication_slot_advance("s", settledb::Lsn(u64::MAX)).unwrap();
    insert(4);
    let want = "
        BEGIN T0
        RELATION public.t d (id*:23:-1 val:25:-1)
        INSERT public.t N(t'4' n)
        COMMIT flags 0
    ";
    assert_eq!(peek(&db, "p", &[]).unwrap(), lines(want), "from a later restart point");
    db.close().unwrap();
}

/// A relation's Relation message goes out again when what it says changes: here its replica
/// identity (PostgreSQL resends after the relcache invalidation). The table is created after
/// the slot, so the decoder learns it, and then its new replica identity, from the WAL (a
/// table older than the slot's restart point is described as the catalog has it now; see
/// docs/logical-decoding.md).
#[test]
fn a_changed_replica_identity_sends_the_relation_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path(), config()).unwrap();
    db.create_publication("p", PublicationTarget::AllTables, PublishActions::default()).unwrap();
    db.create_logical_replication_slot("s", "pgoutput", false).unwrap();
    let t = create(&db, "t");
    let mut tx = db.begin().unwrap();
    let a = tx.insert(&t, &row(1, Some("a"))).unwrap();
    tx.commit().unwrap();
    db.alter_table_replica_identity("t", ReplicaIdentity::Full).unwrap();
    let mut tx = db.begin().unwrap();
    tx.delete(&t, a).unwrap();
    tx.commit().unwrap();
    let want = "
        BEGIN T0
        RELATION public.t d (id*:23:-1 val:25:-1)
        INSERT public.t N(t'1' t'a')
        COMMIT flags 0
        BEGIN T1
        RELATION public.t f (id*:23:-1 val*:25:-1)
        DELETE public.t O(t'1' t'a')
        COMMIT flags 0
    ";
    assert_eq!(peek(&db, "p", &[]).unwrap(), lines(want));
    db.close().unwrap();
}
