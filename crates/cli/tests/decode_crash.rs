//! `settle decode --start` killed with SIGKILL while it spills: the process that had the data
//! directory open dies mid-session (a crash of the engine and of the decoder at once), leaving
//! spill files in `pg_replslot/<slot>/`. The directory then recovers, takes new commits, and
//! the next `settle decode` returns exactly the committed transactions past the slot's
//! `confirmed_flush_lsn`: nothing lost, nothing repeated, the stale spill files ignored and
//! gone. The file written before the kill holds exactly the transactions confirmed, then at
//! most a piece of the batch that was being written (pg_recvlogical's at-least-once window).
//!
//! The reference is a second slot created with the first and peeked at the end in one call.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::settle;
use settledb::db::DecodeLimits;
use settledb::{Column, Config, Database, Lsn, Schema, TableOptions, Type, Value, WalLevel};

fn config() -> Config {
    Config {
        autovacuum: false,
        wal_level: WalLevel::Logical,
        max_prepared_transactions: 4,
        logical_decoding_work_mem_bytes: 64 << 10,
        ..Config::default()
    }
}

const SETS: [&str; 6] =
    ["--set", "logical_decoding_work_mem=64kB", "--set", "max_prepared_transactions=4", "--set", "autovacuum=off"];

fn insert(db: &Database, ids: std::ops::Range<i32>) {
    let t = db.table("t").unwrap();
    let mut tx = db.begin().unwrap();
    for i in ids {
        tx.insert(&t, &[Value::Int4(i), Value::Text(format!("row {i} {}", "x".repeat(30)))]).unwrap();
    }
    tx.commit().unwrap();
}

/// test_decoding's lines cut into transactions: (the end LSN its COMMIT line carries, lines).
fn transactions(rows: &[(Lsn, String)]) -> Vec<(Lsn, Vec<String>)> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    for (lsn, l) in rows {
        cur.push(l.clone());
        if l.starts_with("COMMIT") {
            out.push((*lsn, std::mem::take(&mut cur)));
        }
    }
    assert!(cur.is_empty(), "a transaction without its COMMIT: {cur:?}");
    out
}

fn spill_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join("pg_replslot/s"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| n.starts_with("xid-spill")).collect()
        })
        .unwrap_or_default()
}

#[test]
fn sigkill_while_spilling_loses_and_repeats_nothing_past_confirmed_flush() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = dir.to_str().unwrap();
    let db = Database::open(&dir, config()).unwrap();
    db.create_table("t", schema(), TableOptions { primary_key: Some(vec!["id".into()]), ..Default::default() })
        .unwrap();
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    db.create_logical_replication_slot("reference", "test_decoding", false).unwrap();
    insert(&db, 0..10);
    insert(&db, 10..5_000); // spills under 64 kB
    insert(&db, 5_000..5_010);
    // A large prepared transaction: every decoding session reads and spills it again until
    // it is finished, so spill files come and go for as long as the decoder runs.
    let t = db.table("t").unwrap();
    let mut p = db.begin().unwrap();
    for i in 100_000..110_000 {
        p.insert(&t, &[Value::Int4(i), Value::Text(format!("row {i} {}", "x".repeat(30)))]).unwrap();
    }
    p.prepare("p").unwrap();
    drop(p);
    db.close().unwrap();

    let before = tmp.path().join("before.txt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["decode", d, "--slot", "s", "--start", "-f", before.to_str().unwrap()])
        .args(SETS)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Once the committed transactions are out, wait for a session spilling the prepared one.
    let deadline = Instant::now() + Duration::from_secs(300);
    let wrote_all = || std::fs::read_to_string(&before).is_ok_and(|s| s.matches("COMMIT").count() >= 3);
    while !(wrote_all() && !spill_files(&dir).is_empty()) {
        assert!(Instant::now() < deadline, "settle decode never got there");
        assert!(child.try_wait().unwrap().is_none(), "settle decode stopped by itself");
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let stale = spill_files(&dir);
    assert!(!stale.is_empty(), "the kill left spill files behind");

    // Recovery, then more work: the prepared transaction commits, and another one.
    let db = Database::open(&dir, config()).unwrap();
    let confirmed = db.replication_slot("s").unwrap().confirmed_flush;
    db.commit_prepared("p").unwrap();
    insert(&db, 200_000..200_020);
    let r = db.logical_slot_peek_changes("reference", DecodeLimits::default(), &[]).unwrap();
    let reference: Vec<(Lsn, String)> =
        r.rows.iter().map(|r| (r.lsn, String::from_utf8(r.data.clone()).unwrap())).collect();
    let end = r.end_lsn.to_string();
    db.close().unwrap();
    let reference = transactions(&reference);
    // 3 committed, the prepared one and the last one.
    assert_eq!(reference.iter().filter(|(_, l)| l.len() > 2).count(), 5);

    let after = tmp.path().join("after.txt");
    let mut args = vec!["decode", d, "--slot", "s", "--start", "--endpos", &end, "-f", after.to_str().unwrap()];
    args.extend(SETS);
    let (ok, _, err) = settle(&args);
    assert!(ok, "{err}");
    assert!(spill_files(&dir).is_empty(), "stale spill files are gone: {:?}", spill_files(&dir));

    // After the restart: exactly the transactions whose commit ends past confirmed_flush.
    let owed: Vec<String> =
        reference.iter().filter(|(e, _)| *e > confirmed).flat_map(|(_, l)| l.iter().cloned()).collect();
    let done: Vec<String> =
        reference.iter().filter(|(e, _)| *e <= confirmed).flat_map(|(_, l)| l.iter().cloned()).collect();
    assert!(owed.len() > 10_000, "the prepared transaction is owed");
    let got: Vec<String> = std::fs::read_to_string(&after).unwrap().lines().map(str::to_string).collect();
    assert_eq!(got.len(), owed.len());
    assert!(got == owed, "the restart's rows are exactly those owed");
    // Before the kill: exactly what was confirmed, then at most a piece of the next batch.
    let text = std::fs::read_to_string(&before).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= done.len(), "the confirmed rows were written");
    assert!(lines[..done.len()] == done, "the rows confirmed were written once, in order");
    let rest = &lines[done.len()..];
    let whole = rest.len().saturating_sub(usize::from(!text.ends_with('\n')));
    assert!(rest[..whole] == owed[..whole], "what follows is the start of the rows owed");
}

fn schema() -> Schema {
    Schema {
        columns: vec![
            Column { name: "id".into(), ty: Type::Int4, nullable: false },
            Column { name: "val".into(), ty: Type::Text, nullable: true },
        ],
    }
}
