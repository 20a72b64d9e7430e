//! `settle decode --start` killed with SIGKILL while it spills: the process that had the data
//! directory open dies mid-session (a crash of the engine and of the decoder at once), leaving
//! spill files in `pg_replslot/<slot>/`. The directory then recovers, takes new commits, and
//! the next `settle decode` returns exactly the committed transactions past the slot's
//! `confirmed_flush_lsn`: nothing lost, nothing repeated, the stale spill files ignored and
//! gone. The file written before the kill holds exactly the transactions confirmed, then at
//! most a piece of the batch that was being written (pg_recvlogical's at-least-once window).
//!
//! The same with `-o stream-changes=1`, the killed run having streamed blocks of a transaction
//! still in progress.
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

/// Slots `s` and `reference`, three committed transactions (one spills), and a large
/// prepared transaction: every decoding session reads it again and spills it (or streams it)
/// until it is finished, for as long as the decoder runs. Returns the prepared one's XID.
fn set_up(dir: &Path) -> u32 {
    let db = Database::open(dir, config()).unwrap();
    db.create_table("t", schema(), TableOptions { primary_key: Some(vec!["id".into()]), ..Default::default() })
        .unwrap();
    db.create_logical_replication_slot("s", "test_decoding", false).unwrap();
    db.create_logical_replication_slot("reference", "test_decoding", false).unwrap();
    insert(&db, 0..10);
    insert(&db, 10..5_000); // spills under 64 kB
    insert(&db, 5_000..5_010);
    let t = db.table("t").unwrap();
    let mut p = db.begin().unwrap();
    for i in 100_000..110_000 {
        p.insert(&t, &[Value::Int4(i), Value::Text(format!("row {i} {}", "x".repeat(30)))]).unwrap();
    }
    p.prepare("p").unwrap();
    drop(p);
    let xid = db.prepared_xacts()[0].xid.xid().0;
    db.close().unwrap();
    xid
}

#[test]
fn sigkill_while_spilling_loses_and_repeats_nothing_past_confirmed_flush() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = dir.to_str().unwrap();
    set_up(&dir);
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
    while !wrote_all() || spill_files(&dir).is_empty() {
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

/// test_decoding's lines applied as a subscriber applies them, counting each transaction's
/// changes (streamed lines carry no row data): (XID, changes) per transaction applied, in
/// order; a streamed transaction left unfinished at the end is dropped.
fn apply_lines(text: &str) -> Vec<(u32, usize)> {
    let xid = |l: &str| l.rsplit(' ').next().unwrap().parse::<u32>().unwrap();
    let mut out = Vec::new();
    let mut cur: Option<(u32, usize)> = None;
    let mut streams: std::collections::HashMap<u32, usize> = Default::default();
    for l in text.lines() {
        if l.starts_with("BEGIN ") {
            cur = Some((xid(l), 0));
        } else if l.starts_with("COMMIT ") {
            out.push(cur.take().expect("COMMIT after BEGIN"));
        } else if l.starts_with("table ") {
            cur.as_mut().expect("a change inside a transaction").1 += 1;
        } else if l.starts_with("streaming change for TXN ") {
            *streams.entry(xid(l)).or_default() += 1;
        } else if l.starts_with("committing streamed transaction TXN ") {
            let x = xid(l);
            out.push((x, streams.remove(&x).unwrap_or(0)));
        } else if l.starts_with("aborting streamed (sub)transaction TXN ") {
            panic!("no rollback in this workload: {l}");
        }
    }
    out
}

/// A transaction streams its blocks to a `settle decode` that is then killed; the rerun
/// starts from the slot and, applied as a subscriber applies a stream, every change arrives
/// once. Each round of `settle decode --start` decodes to the end of the WAL, and nothing else
/// writes while it runs, so a round never stops inside a transaction that a later round
/// streams again.
#[test]
fn sigkill_after_a_transaction_streamed_its_blocks_applies_it_once_after_the_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let d = dir.to_str().unwrap();
    let prepared = set_up(&dir);
    let before = tmp.path().join("before.txt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_settle"))
        .args(["decode", d, "--slot", "s", "--start", "-o", "stream-changes=1", "-f", before.to_str().unwrap()])
        .args(SETS)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The prepared transaction streamed blocks without a commit; kill once they are written.
    let deadline = Instant::now() + Duration::from_secs(300);
    let closing = format!("closing a streamed block for transaction TXN {prepared}");
    let streamed =
        || std::fs::read_to_string(&before).is_ok_and(|s| s.contains(&closing) && apply_lines(&s).len() >= 3);
    while !streamed() {
        assert!(Instant::now() < deadline, "settle decode never streamed");
        assert!(child.try_wait().unwrap().is_none(), "settle decode stopped by itself");
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let db = Database::open(&dir, config()).unwrap();
    let confirmed = db.replication_slot("s").unwrap().confirmed_flush;
    db.commit_prepared("p").unwrap();
    insert(&db, 200_000..200_020);
    let r = db.logical_slot_peek_changes("reference", DecodeLimits::default(), &[]).unwrap();
    let reference: Vec<(Lsn, String)> =
        r.rows.iter().map(|r| (r.lsn, String::from_utf8(r.data.clone()).unwrap())).collect();
    let end = r.end_lsn.to_string();
    db.close().unwrap();
    let after = tmp.path().join("after.txt");
    let mut args = vec!["decode", d, "--slot", "s", "--start", "--endpos", &end, "-o", "stream-changes=1"];
    let f = after.to_str().unwrap();
    args.extend(["-f", f]);
    args.extend(SETS);
    let (ok, _, err) = settle(&args);
    assert!(ok, "{err}");

    // (XID, changes) of each transaction, and whether it was confirmed before the kill.
    let reference: Vec<((u32, usize), bool)> = transactions(&reference)
        .into_iter()
        .map(|(e, lines)| (apply_lines(&lines.join("\n"))[0], e <= confirmed))
        .collect();
    assert_eq!(reference.len(), 5);
    assert!(reference.iter().any(|((x, n), done)| *x == prepared && *n == 10_000 && !done));
    // The file written after the restart, applied as one stream: each transaction owed once.
    let owed: Vec<(u32, usize)> = reference.iter().filter(|(_, done)| !done).map(|(t, _)| *t).collect();
    let second = apply_lines(&std::fs::read_to_string(&after).unwrap());
    assert_eq!(second, owed, "the transactions owed, each once");
    // Before the kill: the confirmed ones, then perhaps the start of what was owed (the
    // prepared transaction's blocks, without a commit, count for nothing).
    let done: Vec<(u32, usize)> = reference.iter().filter(|(_, done)| *done).map(|(t, _)| *t).collect();
    let first = apply_lines(&std::fs::read_to_string(&before).unwrap());
    assert!(first.starts_with(&done) && owed.starts_with(&first[done.len()..]), "{first:?}");
}
