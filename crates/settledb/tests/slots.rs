//! Logical replication slots end to end (issue 18, item 4): create, list, drop; durable across
//! a clean shutdown and a crash; the WAL a slot needs is kept by checkpoints and released
//! when it is dropped; `max_slot_wal_keep_size` invalidates a slot left too far behind, with
//! PostgreSQL's log line; a slot's `catalog_xmin` keeps dead catalog rows (not user rows)
//! and VACUUM VERBOSE names it; every bad input is a clear error that loses nothing. Each
//! test ends with the verifier (`check_database`). No timing: checkpoints are explicit (one
//! test waits for the background writer's running-transactions record, which comes every
//! 15 s, as PostgreSQL's does).

use std::path::Path;
use std::sync::Arc;

use settledb::io::fault::{CrashMode, FaultFs};
use settledb::io::FileSystem;
use settledb::wal::segment;
use settledb::{Column, Config, Database, Lsn, Schema, Table, TableOptions, Type, VacuumParams, Value, WalStatus};

const DIR: &str = "/data";
const SEG: u64 = 1 << 20;

fn config_with(extra: &[(&str, &str)]) -> Config {
    let mut pairs = vec![
        ("wal_segment_size", "1MB"),
        ("min_wal_size", "2MB"),
        ("checkpoint_timeout", "1d"),
        ("max_wal_size", "1TB"),
        ("wal_writer_delay", "10s"),
        ("autovacuum", "off"),
        ("wal_level", "logical"),
    ];
    pairs.extend_from_slice(extra);
    Config::from_pairs(pairs).unwrap()
}

fn open_with(fs: &Arc<FaultFs>, extra: &[(&str, &str)]) -> Database {
    Database::open_with_fs(fs.clone(), Path::new(DIR), config_with(extra)).unwrap()
}

fn open(fs: &Arc<FaultFs>) -> Database {
    open_with(fs, &[])
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "val".into(), ty: Type::Text, nullable: false },
        ],
    }
}

/// Inserts `n` rows of about 1 kB each: about `n` kB of WAL.
fn write_rows(db: &Database, t: &Table, from: i32, n: i32) {
    let mut tx = db.begin().unwrap();
    for id in from..from + n {
        tx.insert(t, &[Value::Int4(id), Value::Text("x".repeat(1000))]).unwrap();
    }
    tx.commit().unwrap();
}

fn assert_check_clean(db: &Database, what: &str) {
    let report = settledb::check::check_database(db).unwrap();
    assert!(report.is_clean(), "{what}: check found problems:\n{report}");
}

fn segment_exists(fs: &Arc<FaultFs>, lsn: Lsn) -> bool {
    let wal_dir = Path::new(DIR).join("pg_wal");
    fs.exists(&segment::segment_path(&wal_dir, segment::segment_number(lsn, SEG), SEG))
}

fn slot<'a>(list: &'a [settledb::SlotInfo], name: &str) -> &'a settledb::SlotInfo {
    list.iter().find(|s| s.slot_name == name).unwrap_or_else(|| panic!("no slot {name} in {list:?}"))
}

#[test]
fn create_list_drop() {
    let fs = FaultFs::new();
    let db = open(&fs);
    assert!(db.replication_slots().is_empty());
    let before = db.oldest_xmin();
    let info = db.create_logical_replication_slot("cdc_1", "pgoutput", true).unwrap();
    assert_eq!(info.slot_name, "cdc_1");
    assert_eq!(info.plugin, "pgoutput");
    assert_eq!(info.slot_type, "logical");
    assert_eq!((info.datoid, info.database.as_str()), (settledb::Oid(1), "settledb"));
    assert!(!info.temporary && !info.active && info.active_pid.is_none() && info.two_phase);
    assert_eq!(info.xmin, None, "a logical slot holds no xmin");
    assert_eq!(info.catalog_xmin, Some(before), "catalog_xmin is the horizon at creation");
    let restart = info.restart_lsn.unwrap();
    assert!(info.confirmed_flush_lsn.unwrap() > restart, "the running-xacts record lies between");
    assert_eq!((info.wal_status, info.safe_wal_size), (Some(WalStatus::Reserved), None));
    db.create_logical_replication_slot("cdc_2", "test_decoding", false).unwrap();
    let names: Vec<String> = db.replication_slots().into_iter().map(|s| s.slot_name).collect();
    assert_eq!(names, ["cdc_1", "cdc_2"]);
    assert!(fs.exists(&Path::new(DIR).join("pg_replslot/cdc_1/state")));
    db.drop_replication_slot("cdc_1").unwrap();
    assert!(!fs.exists(&Path::new(DIR).join("pg_replslot/cdc_1")));
    let names: Vec<String> = db.replication_slots().into_iter().map(|s| s.slot_name).collect();
    assert_eq!(names, ["cdc_2"]);
    assert_check_clean(&db, "after create and drop");
    db.close().unwrap();
    let db = open(&fs);
    assert_eq!(db.replication_slots().len(), 1, "the drop and the remaining slot survive a clean restart");
    db.close().unwrap();
}

/// Golden: a slot surviving a crash. Create, write, checkpoint (a running-transactions
/// record), advance confirmed_flush (and with it restart_lsn and catalog_xmin, to that
/// record), then crash keeping only what was fsynced; after recovery the slot is there with
/// the positions it had, the WAL from its restart_lsn is still there, and it can advance on.
#[test]
fn golden_a_slot_surviving_a_crash() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    // s1: create
    let created = db.create_logical_replication_slot("golden", "pgoutput", false).unwrap();
    // s2: write and checkpoint
    write_rows(&db, &t, 0, 100);
    db.checkpoint().unwrap();
    write_rows(&db, &t, 100, 100);
    // s3: advance confirmed_flush to the end of the WAL
    let end = db.replication_slot_advance("golden", Lsn(u64::MAX)).unwrap();
    let advanced = slot(&db.replication_slots(), "golden").clone();
    assert_eq!(advanced.confirmed_flush_lsn, Some(end));
    assert!(advanced.restart_lsn > created.restart_lsn, "restart_lsn moves to the checkpoint's record");
    assert!(
        created.catalog_xmin.unwrap().precedes(advanced.catalog_xmin.unwrap()),
        "catalog_xmin moves on with restart_lsn"
    );
    // s4: crash (nothing unsynced survives) and recover
    db.abandon();
    let fs = fs.crash(CrashMode::LoseUnsynced);
    let db = open(&fs);
    let after = db.replication_slots();
    assert_eq!(after.len(), 1);
    let s = slot(&after, "golden");
    assert_eq!(
        (s.restart_lsn, s.confirmed_flush_lsn, s.catalog_xmin, s.xmin),
        (advanced.restart_lsn, advanced.confirmed_flush_lsn, advanced.catalog_xmin, None)
    );
    assert!(segment_exists(&fs, s.restart_lsn.unwrap()), "the WAL from restart_lsn survives recovery");
    // s5: it advances on from there
    let t = db.table("t").unwrap();
    write_rows(&db, &t, 200, 10);
    assert!(db.replication_slot_advance("golden", Lsn(u64::MAX)).unwrap() > end);
    assert_check_clean(&db, "after recovery");
    // A clean shutdown keeps it as well.
    let before_close = db.replication_slots();
    db.close().unwrap();
    let db = open(&fs);
    assert_eq!(db.replication_slots(), before_close);
    db.close().unwrap();
}

#[test]
fn bad_input_is_a_clear_error_and_loses_nothing() {
    let fs = FaultFs::new();
    let db = open_with(&fs, &[("max_replication_slots", "2")]);
    for bad in ["Slot", "has-dash", "dot.ted"] {
        let e = db.create_logical_replication_slot(bad, "pgoutput", false).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "replication slot name \"{bad}\" contains invalid character; HINT: Replication slot names may only \
                 contain lower case letters, numbers, and the underscore character."
            )
        );
    }
    let long = "s".repeat(64);
    let e = db.create_logical_replication_slot(&long, "pgoutput", false).unwrap_err();
    assert_eq!(e.to_string(), format!("replication slot name \"{long}\" is too long"));
    db.create_logical_replication_slot(&"s".repeat(63), "pgoutput", false).unwrap();
    db.create_logical_replication_slot("a", "pgoutput", false).unwrap();
    let e = db.create_logical_replication_slot("a", "pgoutput", false).unwrap_err();
    assert!(matches!(e, settledb::Error::AlreadyExists(_)));
    assert_eq!(e.to_string(), "replication slot \"a\" already exists");
    let e = db.create_logical_replication_slot("b", "pgoutput", false).unwrap_err();
    assert_eq!(e.to_string(), "all replication slots are in use; HINT: Free one or increase max_replication_slots.");
    let e = db.drop_replication_slot("nope").unwrap_err();
    assert!(matches!(e, settledb::Error::NotFound(_)));
    assert_eq!(e.to_string(), "replication slot \"nope\" does not exist");
    let e = db.replication_slot_advance("nope", Lsn(1)).unwrap_err();
    assert_eq!(e.to_string(), "replication slot \"nope\" does not exist");
    let a = slot(&db.replication_slots(), "a").clone();
    let back = Lsn(a.confirmed_flush_lsn.unwrap().0 - 1);
    let e = db.replication_slot_advance("a", back).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("cannot advance replication slot to {back}, minimum is {}", a.confirmed_flush_lsn.unwrap())
    );
    assert_eq!(slot(&db.replication_slots(), "a"), &a, "a failed advance changes nothing");
    assert_eq!(db.replication_slots().len(), 2, "failed creations left nothing");
    assert_check_clean(&db, "after the errors");
    db.close().unwrap();

    // wal_level must be logical to create a logical slot, and to start with one.
    let db = open_with(&FaultFs::new(), &[("wal_level", "replica")]);
    let e = db.create_logical_replication_slot("a", "pgoutput", false).unwrap_err();
    assert_eq!(e.to_string(), "logical decoding requires wal_level >= logical");
    db.close().unwrap();
    let e = Database::open_with_fs(fs.clone(), Path::new(DIR), config_with(&[("wal_level", "replica")]))
        .err()
        .expect("opened with a logical slot under wal_level = replica");
    assert_eq!(
        e.to_string(),
        "invalid configuration: logical replication slot \"a\" exists, but wal_level < logical; \
         HINT: Change wal_level to be logical or higher."
    );
    let db = open(&fs);
    assert_eq!(slot(&db.replication_slots(), "a"), &a, "nothing lost by the refused open");
    // A damaged state file is an error naming it, not a panic.
    db.close().unwrap();
    let state = Path::new(DIR).join("pg_replslot/a/state");
    let f = fs.open(&state, false).unwrap();
    let mut b = vec![0u8; f.len().unwrap() as usize];
    f.read_exact_at(&mut b, 0).unwrap();
    b[30] ^= 0xff;
    f.write_at(&b, 0).unwrap();
    let e = Database::open_with_fs(fs.clone(), Path::new(DIR), config_with(&[])).err().expect("corrupt slot accepted");
    assert!(e.to_string().starts_with("corrupt file \"/data/pg_replslot/a/state\": checksum mismatch"), "{e}");
}

/// Checkpoints keep every segment from the one holding the slot's restart_lsn, however much
/// WAL is written; once the slot is dropped the next checkpoint removes them.
#[test]
fn checkpoints_keep_the_wal_a_slot_needs() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let restart = db.create_logical_replication_slot("keeper", "pgoutput", false).unwrap().restart_lsn.unwrap();
    for i in 0..6 {
        write_rows(&db, &t, i * 1000, 1000);
        db.checkpoint().unwrap();
    }
    let s = slot(&db.replication_slots(), "keeper").clone();
    assert_eq!(s.restart_lsn, Some(restart), "nothing advanced it");
    assert!(db.stats().wal_bytes > 5 * SEG, "several segments were written");
    assert!(segment_exists(&fs, restart), "the segment holding restart_lsn {restart} was kept");
    assert!(segment_exists(&fs, Lsn(restart.0 + SEG)), "and the ones after it");
    assert_eq!(s.wal_status, Some(WalStatus::Reserved), "within max_wal_size");
    db.drop_replication_slot("keeper").unwrap();
    db.checkpoint().unwrap();
    assert!(!segment_exists(&fs, restart), "released once the slot is dropped");
    assert_check_clean(&db, "after the checkpoints");
    db.close().unwrap();
}

/// Between checkpoints the background writer logs the running transactions while WAL is
/// written (PostgreSQL's `LogStandbySnapshot` every 15 s), so a slot whose consumer keeps up
/// moves its `restart_lsn` on without waiting for a checkpoint (there is none here: a day's
/// `checkpoint_timeout`, a terabyte's `max_wal_size`).
#[test]
fn restart_lsn_moves_between_checkpoints() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let created = db.create_logical_replication_slot("follower", "pgoutput", false).unwrap();
    let checkpoints = db.stats().checkpoints;
    let deadline = std::time::Instant::now() + 3 * settledb::db::LOG_SNAPSHOT_INTERVAL;
    let mut n = 0;
    let moved = loop {
        write_rows(&db, &t, n, 10);
        n += 10;
        db.replication_slot_advance("follower", Lsn(u64::MAX)).unwrap();
        let s = slot(&db.replication_slots(), "follower").clone();
        if s.restart_lsn > created.restart_lsn {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "restart_lsn never moved past {:?}", created.restart_lsn);
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert_eq!(db.stats().checkpoints, checkpoints, "no checkpoint moved it");
    assert!(created.catalog_xmin.unwrap().precedes(moved.catalog_xmin.unwrap()), "catalog_xmin moves on with it");
    assert_check_clean(&db, "after the advance");
    db.close().unwrap();
}

/// A slot more than `max_slot_wal_keep_size` behind is "unreserved" until the next checkpoint
/// invalidates it (PostgreSQL 15's log line), then "lost": its WAL is removed, it cannot be
/// advanced, it stays lost across a restart, and it can be dropped.
#[test]
fn max_slot_wal_keep_size_invalidates_a_slot_left_behind() {
    let fs = FaultFs::new();
    let db = open_with(&fs, &[("max_slot_wal_keep_size", "2MB")]);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let created = db.create_logical_replication_slot("laggard", "pgoutput", false).unwrap();
    let restart = created.restart_lsn.unwrap();
    assert!(created.safe_wal_size.unwrap() > 0);
    write_rows(&db, &t, 0, 5000);
    let s = slot(&db.replication_slots(), "laggard").clone();
    assert_eq!(s.wal_status, Some(WalStatus::Unreserved));
    assert!(s.safe_wal_size.unwrap() < 0, "{s:?}");
    db.take_log();
    db.checkpoint().unwrap();
    let s = slot(&db.replication_slots(), "laggard").clone();
    assert_eq!((s.wal_status, s.restart_lsn, s.safe_wal_size), (Some(WalStatus::Lost), None, None));
    let log = db.take_log().join("");
    let line =
        format!("LOG:  invalidating slot \"laggard\" because its restart_lsn {restart} exceeds max_slot_wal_keep_size");
    assert!(log.contains(&line), "{log}");
    assert!(!segment_exists(&fs, restart), "its WAL is removed");
    assert_eq!(db.oldest_xmin(), db.next_xid().xid(), "a lost slot holds nothing back");
    let e = db.replication_slot_advance("laggard", Lsn(u64::MAX)).unwrap_err();
    assert!(e.to_string().contains("cannot be advanced"), "{e}");
    db.close().unwrap();
    let db = open_with(&fs, &[("max_slot_wal_keep_size", "2MB")]);
    assert_eq!(slot(&db.replication_slots(), "laggard").wal_status, Some(WalStatus::Lost));
    db.drop_replication_slot("laggard").unwrap();
    assert_check_clean(&db, "after the invalidation");
    db.close().unwrap();
}

/// A slot's catalog_xmin keeps dead `pg_class` rows (left by CREATE and DROP TABLE) but not
/// dead rows of a user table; VACUUM VERBOSE of `pg_class` names the slot. Advancing the slot
/// past a running-transactions record, or dropping it, lets them go.
#[test]
fn catalog_xmin_holds_back_catalog_rows_only() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    write_rows(&db, &t, 0, 10);
    let catalog_xmin = db.create_logical_replication_slot("cat", "pgoutput", false).unwrap().catalog_xmin.unwrap();
    for i in 0..3 {
        db.create_table(&format!("tmp{i}"), schema(), TableOptions::default()).unwrap();
        db.drop_table(&format!("tmp{i}")).unwrap();
    }
    let mut tx = db.begin().unwrap();
    let tids: Vec<_> = tx.scan(&t).unwrap().map(|r| r.unwrap().0).collect();
    for tid in tids {
        tx.delete(&t, tid).unwrap();
    }
    tx.commit().unwrap();
    let verbose = VacuumParams { verbose: true, ..Default::default() };

    let user = db.vacuum(Some("t"), &verbose).unwrap().remove(0);
    assert_eq!((user.tuples_deleted, user.recently_dead_tuples), (10, 0), "{}", user.verbose_text());
    assert!(!user.verbose_text().contains("held back"), "{}", user.verbose_text());

    let cat = db.vacuum(Some("pg_class"), &verbose).unwrap().remove(0);
    assert!(cat.recently_dead_tuples >= 3, "{}", cat.verbose_text());
    assert_eq!(cat.oldest_xmin, catalog_xmin);
    let line = format!("removable cutoff held back by replication slot \"cat\" (catalog_xmin {catalog_xmin})");
    assert!(cat.verbose_text().contains(&line), "{}", cat.verbose_text());

    // Advancing past a checkpoint's running-transactions record lets them go.
    db.checkpoint().unwrap();
    db.replication_slot_advance("cat", Lsn(u64::MAX)).unwrap();
    let cat = db.vacuum(Some("pg_class"), &verbose).unwrap().remove(0);
    assert_eq!(cat.recently_dead_tuples, 0, "{}", cat.verbose_text());
    assert!(cat.tuples_deleted >= 3, "{}", cat.verbose_text());

    // And once dropped, the slot holds nothing.
    db.create_table("tmp9", schema(), TableOptions::default()).unwrap();
    db.drop_table("tmp9").unwrap();
    db.drop_replication_slot("cat").unwrap();
    let cat = db.vacuum(Some("pg_class"), &verbose).unwrap().remove(0);
    assert_eq!(cat.recently_dead_tuples, 0, "{}", cat.verbose_text());
    assert!(!cat.verbose_text().contains("held back"), "{}", cat.verbose_text());
    assert_check_clean(&db, "after the vacuums");
    db.close().unwrap();
}

/// The fuzz seeds of `slot_state` are real state files: a new slot, an invalidated one and
/// one advanced with two-phase decoding.
#[test]
fn fuzz_seeds_are_real_state_files() {
    use settledb::decode::slot::SlotData;
    let seeds = &settledb::fuzzing::seeds::all()["slot_state"];
    let states: Vec<SlotData> =
        seeds.iter().filter(|s| s[0] == 0).map(|s| SlotData::decode(&s[1..]).expect("a seed decodes")).collect();
    let names: Vec<&str> = states.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["fresh", "lost", "moved"]);
    assert!(states[1].invalidated && !states[0].invalidated && states[2].two_phase);
    assert!(states[2].confirmed_flush > states[0].confirmed_flush);
    for s in seeds {
        settledb::fuzzing::slot_state(s);
    }
}

/// Power cut at every changing file-system call of: create a slot, advance another past a
/// checkpoint, checkpoint, drop it. Whatever survives, the directory opens, every slot left is
/// whole (no half-created or half-dropped slot), the WAL from each valid slot's restart_lsn
/// is still there (advancing it reads that WAL), and the verifier is clean.
#[test]
fn power_cut_at_every_step_of_slot_operations() {
    let mut cuts = 0;
    for n in 1..2000u64 {
        let fs = FaultFs::new();
        let db = open(&fs);
        let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
        db.create_logical_replication_slot("keep", "pgoutput", false).unwrap();
        write_rows(&db, &t, 0, 50);
        db.checkpoint().unwrap();
        fs.arm_power_cut(n, CrashMode::LoseUnsynced);
        db.create_logical_replication_slot("new", "pgoutput", false).unwrap();
        db.replication_slot_advance("keep", Lsn(u64::MAX)).unwrap();
        db.checkpoint().unwrap();
        db.drop_replication_slot("keep").unwrap();
        db.abandon();
        let Some(image) = fs.take_power_cut() else { break };
        cuts += 1;
        let db = open(&image);
        let slots = db.replication_slots();
        for s in &slots {
            assert!(["keep", "new"].contains(&s.slot_name.as_str()), "cut {n}: {s:?}");
            assert_eq!(s.wal_status, Some(WalStatus::Reserved), "cut {n}: {s:?}");
            assert!(segment_exists(&image, s.restart_lsn.unwrap()), "cut {n}: WAL of {s:?} removed");
            db.replication_slot_advance(&s.slot_name, Lsn(u64::MAX)).unwrap();
        }
        let dirs = image.list(&Path::new(DIR).join("pg_replslot")).unwrap();
        let names: Vec<String> = slots.iter().map(|s| s.slot_name.clone()).collect();
        assert_eq!(dirs, names, "cut {n}: leftovers removed at startup");
        assert_check_clean(&db, &format!("after power cut {n}"));
        db.close().unwrap();
    }
    assert!(cuts > 20, "only {cuts} cut points");
}

/// A slot created while a transaction runs waits for it (PostgreSQL's consistent point): the
/// slot is not on disk meanwhile, and once created its `confirmed_flush_lsn` is past that
/// transaction's commit, so what it wrote belongs to the data a consumer copies at creation,
/// not to the stream (which has every later transaction).
#[test]
fn creation_waits_for_running_transactions() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let mut before = db.begin().unwrap();
    before.insert(&t, &[Value::Int4(1), Value::Text("before".into())]).unwrap();
    std::thread::scope(|s| {
        let creating = s.spawn(|| db.create_logical_replication_slot("s", "test_decoding", false).unwrap());
        // The slot shows (in memory) once it waits; its directory does not exist yet.
        while db.replication_slots().is_empty() {
            std::thread::yield_now();
        }
        assert!(!fs.exists(&Path::new(DIR).join("pg_replslot/s/state")), "an ephemeral slot was written");
        assert!(!creating.is_finished(), "creation finished while a listed transaction ran");
        before.commit().unwrap();
        // Nothing else writes WAL here: this is the end of the commit record.
        let committed = db.current_wal_insert_lsn();
        let info = creating.join().unwrap();
        assert!(info.confirmed_flush_lsn.unwrap() >= committed, "{info:?} before the commit at {committed}");
    });
    assert!(fs.exists(&Path::new(DIR).join("pg_replslot/s/state")));
    write_rows(&db, &t, 2, 1);
    let opts = vec![("include-xids".to_string(), Some("0".to_string()))];
    let r = db.logical_slot_get_changes("s", settledb::db::DecodeLimits::default(), &opts).unwrap();
    let lines: Vec<String> = r.rows.into_iter().map(|r| String::from_utf8(r.data).unwrap()).collect();
    assert_eq!(lines.len(), 3, "only the transaction after creation: {lines:?}");
    assert!(lines[1].starts_with("table public.t: INSERT: id[integer]:2 "), "{lines:?}");
    db.close().unwrap();
}

/// `pg_copy_logical_replication_slot`: the copy has the source's plugin, positions and
/// catalog_xmin, is on disk before the call returns (it survives a crash that keeps only what
/// was fsynced), decodes exactly what the source decodes, and then moves on its own: consuming
/// the copy leaves the source where it was, and dropping the source leaves the copy's WAL kept.
#[test]
fn a_copied_slot_decodes_what_its_source_would() {
    let fs = FaultFs::new();
    let db = open_with(&fs, &[("max_replication_slots", "3")]);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    db.create_logical_replication_slot("src", "test_decoding", false).unwrap();
    write_rows(&db, &t, 0, 20);
    db.checkpoint().unwrap();
    write_rows(&db, &t, 20, 5);
    let copied = db.copy_logical_replication_slot("src", "dst").unwrap();
    let src = slot(&db.replication_slots(), "src").clone();
    assert_eq!(copied.plugin, "test_decoding");
    assert_eq!(
        (copied.restart_lsn, copied.confirmed_flush_lsn, copied.catalog_xmin, copied.two_phase),
        (src.restart_lsn, src.confirmed_flush_lsn, src.catalog_xmin, src.two_phase)
    );
    // Durable at once: a crash keeping only fsynced data still has both.
    db.abandon();
    let fs = fs.crash(CrashMode::LoseUnsynced);
    let db = open_with(&fs, &[("max_replication_slots", "3")]);
    let t = db.table("t").unwrap();
    let slots = db.replication_slots();
    assert_eq!(slot(&slots, "dst").restart_lsn, src.restart_lsn);
    assert_eq!(slot(&slots, "dst").confirmed_flush_lsn, src.confirmed_flush_lsn);
    let no_limits = settledb::db::DecodeLimits::default();
    let peeked = db.logical_slot_peek_changes("src", no_limits, &[]).unwrap();
    assert_eq!(peeked.rows.len(), 2 * 2 + 25, "two transactions: BEGIN, rows, COMMIT each");
    // The copy, read through a sink, gives the same rows, then is consumed.
    let mut streamed = Vec::new();
    let s = db
        .decode_slot_into("dst", no_limits, &[], true, &mut |row| {
            streamed.push(row.clone());
            Ok(())
        })
        .unwrap();
    assert_eq!(streamed, peeked.rows);
    assert_eq!((s.rows, s.stats.total_txns), (streamed.len() as u64, 2));
    assert_eq!(slot(&db.replication_slots(), "src").confirmed_flush_lsn, src.confirmed_flush_lsn, "src unmoved");
    assert!(db.logical_slot_peek_changes("dst", no_limits, &[]).unwrap().rows.is_empty());
    // A sink's error stops the session and confirms nothing.
    db.copy_logical_replication_slot("src", "failing").unwrap();
    let e = db.decode_slot_into("failing", no_limits, &[], true, &mut |_| Err(settledb::Error::invalid("disk full")));
    assert!(e.unwrap_err().to_string().contains("disk full"));
    assert_eq!(slot(&db.replication_slots(), "failing").confirmed_flush_lsn, src.confirmed_flush_lsn);
    // Errors: no source, a used name, a bad name, no room.
    assert!(matches!(db.copy_logical_replication_slot("nope", "x"), Err(settledb::Error::NotFound(_))));
    assert!(matches!(db.copy_logical_replication_slot("src", "dst"), Err(settledb::Error::AlreadyExists(_))));
    assert!(db.copy_logical_replication_slot("src", "Bad-Name").is_err());
    let full = db.copy_logical_replication_slot("src", "fourth").unwrap_err();
    assert!(full.to_string().contains("all replication slots are in use"), "{full}");
    // Dropping the source leaves the copy's WAL kept.
    db.drop_replication_slot("src").unwrap();
    db.drop_replication_slot("failing").unwrap();
    write_rows(&db, &t, 25, 3);
    db.checkpoint().unwrap();
    let rows = db.logical_slot_get_changes("dst", no_limits, &[]).unwrap().rows;
    assert_eq!(rows.len(), 2 + 3);
    assert_check_clean(&db, "after copying slots");
    db.close().unwrap();
}

/// `CREATE_REPLICATION_SLOT … (SNAPSHOT 'use')`: the transaction created with the slot sees
/// exactly the transactions the slot will not send. Writers commit one row per transaction
/// all through the creation (one of them open when it starts, so the creation waits); each
/// row is then either in the snapshot or decoded from the slot, never both, never neither.
#[test]
fn a_slot_snapshot_sees_exactly_what_the_slot_does_not_send() {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
    let fs = FaultFs::new();
    let db = open_with(&fs, &[("max_replication_slots", "2")]);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let ids = |rows: Vec<settledb::decode::logical::OutputRow>| -> BTreeSet<i32> {
        rows.into_iter()
            .filter_map(|r| {
                let line = String::from_utf8(r.data).unwrap();
                let rest = line.strip_prefix("table public.t: INSERT: id[integer]:")?;
                Some(rest.split(' ').next().unwrap().parse().unwrap())
            })
            .collect()
    };
    let next = AtomicI32::new(0);
    for round in 0..24 {
        let stop = AtomicBool::new(false);
        let mut open_tx = db.begin().unwrap();
        let open_id = next.fetch_add(1, Ordering::Relaxed);
        open_tx.insert(&t, &[Value::Int4(open_id), Value::Text("open".into())]).unwrap();
        let name = format!("sync_{round}");
        let (seen, slot_info) = std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let mut tx = db.begin().unwrap();
                        let id = next.fetch_add(1, Ordering::Relaxed);
                        tx.insert(&t, &[Value::Int4(id), Value::Text("w".into())]).unwrap();
                        tx.commit().unwrap();
                    }
                });
            }
            let creating = s.spawn(|| {
                let (info, mut tx) = db
                    .create_logical_replication_slot_with_snapshot(&name, "test_decoding", Default::default())
                    .unwrap();
                let seen: BTreeSet<i32> = tx.scan(&t).unwrap().map(|r| id_of(&r.unwrap().1)).collect();
                tx.commit().unwrap();
                (seen, info)
            });
            while db.replication_slots().is_empty() {
                std::thread::yield_now();
            }
            open_tx.commit().unwrap();
            let r = creating.join().unwrap();
            stop.store(true, Ordering::Relaxed);
            r
        });
        let all: BTreeSet<i32> = {
            let mut tx = db.begin().unwrap();
            let all = tx.scan(&t).unwrap().map(|r| id_of(&r.unwrap().1)).collect();
            tx.commit().unwrap();
            all
        };
        let sent = ids(db.logical_slot_get_changes(&name, Default::default(), &[]).unwrap().rows);
        assert!(seen.contains(&open_id), "round {round}: the transaction the creation waited for is in the snapshot");
        let both: Vec<_> = seen.intersection(&sent).collect();
        assert!(both.is_empty(), "round {round}: rows both in the snapshot and sent: {both:?} ({slot_info:?})");
        let union: BTreeSet<i32> = seen.union(&sent).copied().collect();
        let lost: Vec<_> = all.difference(&union).collect();
        assert!(lost.is_empty(), "round {round}: rows neither in the snapshot nor sent: {lost:?} ({slot_info:?})");
        db.drop_replication_slot(&name).unwrap();
    }
    assert_check_clean(&db, "after the rounds");
    db.close().unwrap();
}

fn id_of(row: &[Value]) -> i32 {
    match row[0] {
        Value::Int4(id) => id,
        ref v => panic!("id {v:?}"),
    }
}

/// A temporary slot holds WAL and decodes like any slot, but nothing of it reaches the disk:
/// a checkpoint writes no state for it, and a clean restart or a crash forgets it.
#[test]
fn a_temporary_slot_never_reaches_the_disk() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    let options = settledb::SlotOptions { two_phase: false, temporary: true };
    let info = db.create_logical_replication_slot_with("scratch", "test_decoding", options).unwrap();
    assert!(info.temporary && !info.two_phase);
    db.create_logical_replication_slot("kept", "test_decoding", false).unwrap();
    assert!(slot(&db.replication_slots(), "scratch").temporary);
    assert!(!slot(&db.replication_slots(), "kept").temporary);
    let restart = info.restart_lsn.unwrap();
    for i in 0..3 {
        write_rows(&db, &t, i * 1000, 1000);
        db.checkpoint().unwrap();
    }
    assert!(!fs.exists(&Path::new(DIR).join("pg_replslot/scratch")), "no directory, before or after checkpoints");
    db.drop_replication_slot("kept").unwrap();
    db.checkpoint().unwrap();
    assert!(segment_exists(&fs, restart), "the temporary slot alone holds the WAL from {restart}");
    let got = db.logical_slot_get_changes("scratch", Default::default(), &[]).unwrap().rows;
    assert_eq!(got.iter().filter(|r| r.data.starts_with(b"table public.t: INSERT")).count(), 3000);
    assert_check_clean(&db, "with a temporary slot");

    // Dropping it releases the WAL and leaves nothing behind.
    db.drop_replication_slot("scratch").unwrap();
    db.checkpoint().unwrap();
    assert!(!segment_exists(&fs, restart), "released once dropped");
    assert!(matches!(db.drop_replication_slot("scratch"), Err(settledb::Error::NotFound(_))));

    // A clean shutdown and a crash both forget one.
    db.create_logical_replication_slot_with("scratch", "test_decoding", options).unwrap();
    db.create_logical_replication_slot("kept", "test_decoding", false).unwrap();
    db.close().unwrap();
    let db = open(&fs);
    let names: Vec<String> = db.replication_slots().into_iter().map(|s| s.slot_name).collect();
    assert_eq!(names, ["kept"], "after a clean restart");
    db.create_logical_replication_slot_with("scratch", "test_decoding", options).unwrap();
    db.abandon();
    let fs = fs.crash(CrashMode::LoseUnsynced);
    let db = open(&fs);
    let names: Vec<String> = db.replication_slots().into_iter().map(|s| s.slot_name).collect();
    assert_eq!(names, ["kept"], "after a crash");
    assert_check_clean(&db, "after the crash");
    db.close().unwrap();
}

/// A slot's exported snapshot, imported by another transaction, reads exactly what the
/// exporter reads, and keeps reading it after the exporter ended: rows deleted and vacuumed
/// meanwhile are still there for it. The name works only while the exporter lives, and only
/// for a REPEATABLE READ transaction before its first command.
#[test]
fn an_exported_snapshot_reads_what_the_slot_does_not_send() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    write_rows(&db, &t, 0, 100);
    let (info, mut exporter) =
        db.create_logical_replication_slot_with_snapshot("export_1", "test_decoding", Default::default()).unwrap();
    let name = exporter.export_snapshot().unwrap();
    assert_eq!(name.split('-').count(), 3, "PostgreSQL's shape: {name}");
    // Written after the slot's consistent point: sent by the slot, invisible to the snapshot.
    write_rows(&db, &t, 100, 10);
    let ids = |tx: &mut settledb::Transaction<'_>| -> Vec<i32> {
        let mut v: Vec<i32> = tx.scan(&t).unwrap().map(|r| id_of(&r.unwrap().1)).collect();
        v.sort_unstable();
        v
    };

    let mut rc = db.begin_with(settledb::IsolationLevel::ReadCommitted).unwrap();
    assert!(rc.import_snapshot(&name).unwrap_err().to_string().contains("REPEATABLE READ"));
    drop(rc);
    let mut late = db.begin_with(settledb::IsolationLevel::RepeatableRead).unwrap();
    ids(&mut late);
    assert!(late.import_snapshot(&name).unwrap_err().to_string().contains("before any query"));
    drop(late);
    let mut importer = db.begin_with(settledb::IsolationLevel::RepeatableRead).unwrap();
    importer.import_snapshot(&name).unwrap();
    let expected: Vec<i32> = (0..100).collect();
    assert_eq!(ids(&mut exporter), expected);
    assert_eq!(ids(&mut importer), expected);
    exporter.commit().unwrap();

    // The exporter is gone: its name is too, but the importer holds the snapshot's xmin.
    let mut after = db.begin_with(settledb::IsolationLevel::RepeatableRead).unwrap();
    assert_eq!(
        after.import_snapshot(&name).unwrap_err().to_string(),
        format!("invalid snapshot identifier: \"{name}\"")
    );
    drop(after);
    let mut tx = db.begin().unwrap();
    let doomed: Vec<settledb::Tid> = tx.scan(&t).unwrap().map(|r| r.unwrap().0).take(50).collect();
    for tid in doomed {
        assert!(tx.delete(&t, tid).unwrap());
    }
    tx.commit().unwrap();
    db.vacuum(Some("t"), &VacuumParams::default()).unwrap();
    assert_eq!(ids(&mut importer), expected, "rows deleted after the export are kept for the importer");
    importer.commit().unwrap();

    let sent = db.logical_slot_get_changes("export_1", Default::default(), &[]).unwrap().rows;
    let inserts = sent.iter().filter(|r| r.data.starts_with(b"table public.t: INSERT")).count();
    assert_eq!(inserts, 10, "the slot sends what the snapshot does not see ({info:?})");
    assert_check_clean(&db, "after the import");
    db.close().unwrap();
}

/// `pg_export_snapshot()` under READ COMMITTED: the export keeps its snapshot's rows for an
/// importer although the exporter's own statements have moved on to newer snapshots, until
/// the exporter ends.
#[test]
fn a_read_committed_export_holds_its_snapshot_until_its_transaction_ends() {
    let fs = FaultFs::new();
    let db = open(&fs);
    let t = db.create_table("t", schema(), TableOptions::default()).unwrap();
    write_rows(&db, &t, 0, 20);
    let count = |tx: &mut settledb::Transaction<'_>| tx.scan(&t).unwrap().count();
    let mut exporter = db.begin_with(settledb::IsolationLevel::ReadCommitted).unwrap();
    let name = exporter.export_snapshot().unwrap();
    let mut tx = db.begin().unwrap();
    let doomed: Vec<settledb::Tid> = tx.scan(&t).unwrap().map(|r| r.unwrap().0).take(10).collect();
    for tid in doomed {
        assert!(tx.delete(&t, tid).unwrap());
    }
    tx.commit().unwrap();
    // The exporter's next statement reads with a new snapshot, and advertises its xmin.
    assert_eq!(count(&mut exporter), 10);
    db.vacuum(Some("t"), &VacuumParams::default()).unwrap();
    let mut importer = db.begin_with(settledb::IsolationLevel::RepeatableRead).unwrap();
    importer.import_snapshot(&name).unwrap();
    assert_eq!(count(&mut importer), 20, "the export kept the deleted rows");
    importer.commit().unwrap();
    exporter.commit().unwrap();
    let mut late = db.begin_with(settledb::IsolationLevel::RepeatableRead).unwrap();
    assert!(matches!(late.import_snapshot(&name), Err(settledb::Error::NotFound(_))));
    drop(late);
    db.vacuum(Some("t"), &VacuumParams::default()).unwrap();
    assert_check_clean(&db, "after the export ended");
    db.close().unwrap();
}
