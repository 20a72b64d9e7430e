//! `settle decode`: `pg_recvlogical` on a data directory. A slot is created by the command,
//! rows are written through the library (the directory is closed between the two: one
//! process at a time), and `--start --endpos` prints test_decoding's lines and exits; a
//! transaction cut by `--endpos` comes back whole on the next read; `--startpos` skips what
//! committed before it; SIGTERM stops a `--start`
//! that waits for more; `--drop-slot` drops it.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::settle;
use settledb::db::DecodeLimits;
use settledb::{Column, Config, Database, Schema, TableOptions, Type, Value, WalLevel};

fn config() -> Config {
    Config { autovacuum: false, wal_level: WalLevel::Logical, ..Config::default() }
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "val".into(), ty: Type::Text, nullable: true },
        ],
    }
}

/// Writes one transaction of `ids` into `t` and returns every row's LSN the slot would
/// decode now (peeked, not consumed), with the end of the WAL read.
fn write(dir: &Path, ids: &[i32]) -> (Vec<settledb::Lsn>, settledb::Lsn) {
    let db = Database::open(dir, config()).unwrap();
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    for &i in ids {
        tx.insert(&t, &[Value::Int4(i), Value::Text(format!("v{i}"))]).unwrap();
    }
    tx.commit().unwrap();
    let r = db.logical_slot_peek_changes("s", DecodeLimits::default(), &[]).unwrap();
    db.close().unwrap();
    (r.rows.iter().map(|r| r.lsn).collect(), r.end_lsn)
}

fn insert_line(i: i32) -> String {
    format!("table public.t: INSERT: id[integer]:{i} val[text]:'v{i}'")
}

#[test]
fn decode_creates_a_slot_streams_to_endpos_and_drops_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = dir.to_str().unwrap();
    let db = Database::open(&dir, config()).unwrap();
    db.create_table("t", schema(), TableOptions { primary_key: Some(vec!["id".into()]), ..Default::default() })
        .unwrap();
    db.close().unwrap();

    let (ok, _, err) = settle(&["decode", d, "--slot", "s", "--create-slot"]);
    assert!(ok, "{err}");
    let (ok, _, err) = settle(&["decode", d, "--slot", "s", "--create-slot"]);
    assert!(!ok && err.contains("replication slot \"s\" already exists"), "{err}");
    let (ok, _, err) = settle(&["decode", d, "--slot", "s", "--create-slot", "--if-not-exists"]);
    assert!(ok, "{err}");

    write(&dir, &[1, 2]);
    let (_, end) = write(&dir, &[3]);
    let endpos = end.to_string();
    let args = ["decode", d, "--slot", "s", "--start", "--endpos", &endpos, "-o", "include-xids=0", "-f", "-"];
    let (ok, out, err) = settle(&args);
    assert!(ok, "{err}");
    let want = ["BEGIN", &insert_line(1), &insert_line(2), "COMMIT", "BEGIN", &insert_line(3), "COMMIT"];
    assert_eq!(out.lines().collect::<Vec<_>>(), want);
    assert!(err.contains(&format!("slot \"s\" confirmed up to {endpos}")), "{err}");
    // Consumed: the same command again prints nothing.
    let (ok, out, err) = settle(&args);
    assert!(ok && out.is_empty(), "{out}{err}");

    // --endpos inside a transaction: the rows up to it, and the transaction again, whole, on
    // the next read.
    let (lsns, end) = write(&dir, &[10, 11, 12]);
    let inside = lsns[2].to_string(); // BEGIN, 10, 11 | 12, COMMIT
    let file = tmp.path().join("out.txt");
    let f = file.to_str().unwrap();
    let (ok, _, err) = settle(&["decode", d, "-S", "s", "--start", "-E", &inside, "-o", "include-xids=0", "-f", f]);
    assert!(ok, "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("BEGIN\n{}\n{}\n", insert_line(10), insert_line(11)));
    let end = end.to_string();
    let (ok, _, err) = settle(&["decode", d, "-S", "s", "--start", "-E", &end, "-o", "include-xids=0", "-f", f]);
    assert!(ok, "{err}");
    let again = format!("BEGIN\n{}\n{}\n{}\nCOMMIT\n", insert_line(10), insert_line(11), insert_line(12));
    let all = std::fs::read_to_string(&file).unwrap();
    assert!(all.ends_with(&again), "the file is appended to: {all}");

    // --startpos past a transaction: it is skipped, and what follows is written.
    let (_, skip_end) = write(&dir, &[20]);
    let (_, end) = write(&dir, &[21]);
    let (start, end) = (skip_end.to_string(), end.to_string());
    let args = ["decode", d, "-S", "s", "--start", "-I", &start, "-E", &end, "-o", "include-xids=0", "-f", "-"];
    let (ok, out, err) = settle(&args);
    assert!(ok, "{err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), ["BEGIN", &insert_line(21), "COMMIT"]);
    let (ok, _, err) = settle(&["decode", d, "--slot", "s2", "--create-slot", "--startpos", "0/1"]);
    assert!(!ok && err.contains("--startpos may only be specified with --start"), "{err}");

    let (ok, _, err) = settle(&["decode", d, "--slot", "s", "--drop-slot"]);
    assert!(ok, "{err}");
    let (ok, _, err) = settle(&["decode", d, "--slot", "s", "--start"]);
    assert!(!ok && err.contains("replication slot \"s\" does not exist"), "{err}");
    let (ok, _, err) = settle(&["decode", d, "--slot", "s"]);
    assert!(!ok && err.contains("at least one action"), "{err}");
}

#[test]
fn sigterm_stops_a_start_that_waits_for_more() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = dir.to_str().unwrap();
    let db = Database::open(&dir, config()).unwrap();
    db.create_table("t", schema(), TableOptions::default()).unwrap();
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    db.close().unwrap();
    write(&dir, &[7]);

    let file = tmp.path().join("rows.txt");
    let child = Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["decode", d, "--slot", "s", "--start", "-f", file.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&file).map_or(true, |s| !s.contains("COMMIT")) {
        assert!(Instant::now() < deadline, "no rows written");
        std::thread::sleep(Duration::from_millis(50));
    }
    let term = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(term.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("slot \"s\" confirmed up to "), "{err}");
    let rows = std::fs::read_to_string(&file).unwrap();
    assert_eq!(rows.lines().nth(1), Some(insert_line(7).as_str()));
    // Stopped cleanly: the slot kept its position across the shutdown.
    let db = Database::open(&dir, config()).unwrap();
    assert!(db.logical_slot_peek_changes("s", DecodeLimits::default(), &[]).unwrap().rows.is_empty());
    db.close().unwrap();
}
