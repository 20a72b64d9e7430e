//! Checking a recovered database against the ledger of the ack log.
//!
//! [`check_kind`] is the whole durability rule, for any kind of logged transaction, given the
//! keys found in the database and what each row says:
//!
//! | ledger state            | found present                 | found absent                 |
//! |-------------------------|-------------------------------|------------------------------|
//! | acknowledged (or `R1`)  | ok (payload must match)       | **lost commit**              |
//! | rolled back (or `R0`)   | **aborted work visible**      | ok                           |
//! | in doubt                | ok, resolved `R1`             | ok, resolved `R0`            |
//! | never begun             | **phantom**                   | —                            |
//!
//! A burst of the bulk table is also subject to its deletion (kind `y`): deleted by an
//! acknowledged commit, it must be absent; deletion in doubt, either.
//!
//! Savepoint writes (kind `s`) follow the same table: `ROLLBACK TO` is acknowledged (`A`) the
//! moment it returns, so a rolled-back savepoint's write found present is "aborted work
//! visible"; a released one is committed with its transaction (`C`), so found missing it is a
//! lost commit. Prepared transactions (kind `p`) add two states, checked by [`twophase`]
//! against `Database::prepared_xacts` as well as their rows:
//!
//! | ledger state                 | listed, rows invisible | not listed, rows visible | not listed, invisible |
//! |------------------------------|------------------------|--------------------------|-----------------------|
//! | begun, PREPARE in doubt      | ok, resolved `RP`      | **visible uncommitted**  | ok, resolved `R0`     |
//! | prepared (`P`/`RP`)          | ok                     | **committed by nobody**  | **lost PREPARE**      |
//! | COMMIT PREPARED in doubt     | ok, resolved `RP`      | ok, resolved `R1`        | **lost**              |
//! | ROLLBACK PREPARED in doubt   | ok, resolved `RP`      | **aborted work visible** | ok, resolved `R0`     |
//! | committed (`C`/`R1`)         | **still prepared**     | ok (row count must match)| **lost commit**       |
//! | rolled back (`A`/`R0`)       | **still prepared**     | **aborted work visible** | ok                    |
//!
//! Listed but visible is always an anomaly, and so is a listed GID the log never prepared. Rows
//! a prepared transaction wrote in a savepoint it rolled back to (kind `q`) must never be seen.
//!
//! The workload checks add what the keys cannot show: pgbench's balances, each account,
//! teller and branch equal to the sum of the deltas of the history rows naming it (every
//! transaction all or nothing); TPC-C's consistency conditions 1-4, and each logged order's
//! line count.

use std::collections::{BTreeMap, HashMap, HashSet};

use anyhow::{anyhow, Context, Result};
use settledb::{Database, IsolationLevel, Value};
use workload::tpcc::{TpccConn, TpccTarget, OORDER, ORDERS, ORDER_LINE};

use super::acklog::{Entry, Ledger, State};
use super::schema::{ACCOUNTS, BRANCHES, BULK, HISTORY, SLOT, TELLERS, TWOPC};

/// Anomaly descriptions kept (the count goes on).
const KEPT: usize = 100;

/// What one verification found.
#[derive(Default, Debug)]
pub struct Findings {
    pub anomalies: Vec<String>,
    pub anomaly_count: u64,
    /// Acknowledged commits found present, by kind.
    pub acknowledged: BTreeMap<&'static str, u64>,
    /// Rolled-back (or resolved absent) transactions found absent.
    pub absent_checked: u64,
    pub in_doubt_present: u64,
    pub in_doubt_absent: u64,
    /// `(present, kind, key)`: the resolutions to append to the ack log.
    pub resolutions: Vec<(bool, char, String)>,
    /// Prepared transactions in doubt found still prepared (to append as `RP p key`).
    pub still_prepared: Vec<String>,
    /// Savepoint writes rolled back (by `ROLLBACK TO`, or with their whole transaction) and
    /// found absent.
    pub savepoint_writes_absent: u64,
    /// Prepared transactions found listed with their rows invisible.
    pub prepared_open: u64,
    /// Rolled-back prepared transactions (ROLLBACK PREPARED, or resolved absent at an earlier
    /// verification) found absent.
    pub prepared_rolled_back_absent: u64,
    /// Writes a prepared transaction rolled back to a savepoint before PREPARE, found absent.
    pub prepared_savepoint_writes_absent: u64,
    /// Finished prepared transactions that stayed prepared across a kill.
    pub prepared_finished_after_kill: u64,
    /// The replication slot's confirmed position after recovery, and the decoded rows (of a
    /// peek from it) checked against the tables.
    pub slot_confirmed: u64,
    pub slot_rows_checked: u64,
}

impl Findings {
    pub fn anomaly(&mut self, s: String) {
        self.anomaly_count += 1;
        if self.anomalies.len() < KEPT {
            self.anomalies.push(s);
        }
    }
}

fn kind_name(kind: char) -> &'static str {
    match kind {
        'h' => "pgbench transaction",
        'o' => "new order",
        'x' => "bulk burst",
        'y' => "burst deletion",
        's' => "savepoint write",
        'p' => "prepared transaction",
        'q' => "write rolled back before PREPARE",
        _ => "transaction",
    }
}

/// Checks every key of `kind` in the ledger against `present` (key → what its row says) and
/// every present key against the ledger. `deleted` gives the state of a later deletion.
pub fn check_kind(
    ledger: &Ledger,
    kind: char,
    present: &HashMap<String, String>,
    deleted: &dyn Fn(&str) -> Option<State>,
    f: &mut Findings,
) {
    let what = kind_name(kind);
    for (key, e) in ledger.of_kind(kind) {
        let here = present.get(key);
        match e.state {
            State::Committed => match deleted(key) {
                Some(State::Committed) if here.is_some() => {
                    f.anomaly(format!("{what} {key}: deleted by an acknowledged commit, but present"))
                }
                Some(State::Committed | State::InDoubt) => {}
                _ if here.is_none() && e.acknowledged => {
                    f.anomaly(format!("{what} {key}: acknowledged commit missing"))
                }
                _ if here.is_none() => {
                    f.anomaly(format!("{what} {key}: found present after an earlier crash, now missing"))
                }
                _ => {
                    if e.acknowledged {
                        *f.acknowledged.entry(what).or_default() += 1;
                    }
                }
            },
            State::Aborted if here.is_some() => {
                f.anomaly(format!("{what} {key}: rolled back (or found absent before), but present"))
            }
            State::Aborted => f.absent_checked += 1,
            State::Prepared | State::Finishing { .. } => f.anomaly(format!("{what} {key}: prepared, but not a 'p'")),
            State::InDoubt => {
                if here.is_some() {
                    f.in_doubt_present += 1;
                } else {
                    f.in_doubt_absent += 1;
                }
                f.resolutions.push((here.is_some(), kind, key.to_string()));
            }
        }
        if let Some(p) = here {
            if *p != e.payload {
                f.anomaly(format!("{what} {key}: found {p:?}, but it wrote {:?}", e.payload));
            }
        }
    }
    for key in present.keys() {
        if ledger.get(kind, key).is_none() {
            f.anomaly(format!("{what} {key}: present, but never attempted"));
        }
    }
}

fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int4(x) => Ok(i64::from(*x)),
        Value::Int8(x) | Value::Timestamp(x) => Ok(*x),
        other => Err(anyhow!("expected an integer, found {other:?}")),
    }
}

/// pgbench: history rows against the ledger, and every balance against its history.
pub fn pgbench(db: &Database, ledger: &Ledger, f: &mut Findings) -> Result<()> {
    let mut tx = db.begin_with(IsolationLevel::RepeatableRead)?;
    let mut present = HashMap::new();
    let mut sums: [HashMap<i64, i64>; 3] = Default::default();
    let mut total = 0i64;
    for row in tx.scan(&db.table(HISTORY)?)? {
        let r = row?.1;
        let (hid, tid, bid, aid, delta) = (int(&r[0])?, int(&r[1])?, int(&r[2])?, int(&r[3])?, int(&r[4])?);
        if present.insert(hid.to_string(), format!("{aid} {tid} {bid} {delta}")).is_some() {
            f.anomaly(format!("pgbench transaction {hid}: two history rows"));
        }
        for (m, k) in sums.iter_mut().zip([aid, tid, bid]) {
            *m.entry(k).or_default() += delta;
        }
        total += delta;
    }
    for ((table, balance), by_key) in [(ACCOUNTS, 2), (TELLERS, 2), (BRANCHES, 1)].into_iter().zip(&sums) {
        let mut sum = 0i64;
        for row in tx.scan(&db.table(table)?)? {
            let r = row?.1;
            let (key, b) = (int(&r[0])?, int(&r[balance])?);
            let expected = by_key.get(&key).copied().unwrap_or(0);
            if b != expected {
                f.anomaly(format!("{table} {key}: balance {b}, but its history deltas sum to {expected}"));
            }
            sum += b;
        }
        if sum != total {
            f.anomaly(format!("sum of {table} balances is {sum}, history's deltas sum to {total}"));
        }
    }
    tx.commit()?;
    // The legs of savepoint transactions are logged as their own kind.
    let (legs, plain): (HashMap<String, String>, HashMap<String, String>) =
        present.into_iter().partition(|(k, _)| ledger.get('s', k).is_some());
    check_kind(ledger, 'h', &plain, &|_| None, f);
    let absent_before = f.absent_checked;
    check_kind(ledger, 's', &legs, &|_| None, f);
    f.savepoint_writes_absent += f.absent_checked - absent_before;
    Ok(())
}

/// Prepared transactions: each logged one against `prepared_xacts` and the two-phase table
/// (the second table of the module doc), and no listed GID or row the log does not know.
pub fn twophase(db: &Database, ledger: &Ledger, f: &mut Findings) -> Result<()> {
    let listed: HashSet<String> = super::twophase::open_keys(db).into_iter().collect();
    let mut tx = db.begin_with(IsolationLevel::RepeatableRead)?;
    let mut counts: HashMap<String, i64> = HashMap::new();
    for row in tx.scan(&db.table(TWOPC)?)? {
        *counts.entry(int(&row?.1[0])?.to_string()).or_default() += 1;
    }
    tx.commit()?;
    for (key, e) in ledger.of_kind('q') {
        if counts.contains_key(key) {
            f.anomaly(format!(
                "prepared transaction's write {key}: rolled back to a savepoint before PREPARE, but present"
            ));
        } else {
            f.prepared_savepoint_writes_absent += 1;
            if e.state == State::InDoubt {
                f.resolutions.push((false, 'q', key.to_string()));
            }
        }
    }
    for (key, e) in ledger.of_kind('p') {
        check_prepared(key, e, listed.contains(key), counts.get(key).map(|n| n.to_string()), f);
    }
    for key in counts.keys() {
        if ledger.get('p', key).is_none() && ledger.get('q', key).is_none() {
            f.anomaly(format!("prepared transaction {key}: rows present, but never attempted"));
        }
    }
    for key in &listed {
        if ledger.get('p', key).is_none() {
            f.anomaly(format!("prepared transaction {key}: listed by prepared_xacts, but never attempted"));
        }
    }
    Ok(())
}

/// One prepared transaction: `open` whether it is listed, `rows` what its rows say if visible.
fn check_prepared(key: &str, e: &Entry, open: bool, rows: Option<String>, f: &mut Findings) {
    let what = format!("prepared transaction {key}");
    if open && rows.is_some() {
        return f.anomaly(format!("{what}: listed as prepared, but its rows are visible"));
    }
    if let Some(n) = &rows {
        if *n != e.payload {
            f.anomaly(format!("{what}: {n} rows visible, but it wrote {}", e.payload));
        }
    }
    let finished = matches!(e.state, State::Committed | State::Aborted);
    if finished && e.crossed_kill {
        f.prepared_finished_after_kill += 1;
    }
    match (e.state, open, rows.is_some()) {
        (State::InDoubt | State::Prepared | State::Finishing { .. }, true, _) => {
            f.prepared_open += 1;
            if e.state != State::Prepared {
                f.still_prepared.push(key.to_string());
            }
        }
        (State::InDoubt | State::Finishing { commit: false }, false, false) => {
            f.in_doubt_absent += 1;
            f.resolutions.push((false, 'p', key.to_string()));
        }
        (State::Finishing { commit: true }, false, true) => {
            f.in_doubt_present += 1;
            f.resolutions.push((true, 'p', key.to_string()));
        }
        (State::InDoubt, false, true) => f.anomaly(format!("{what}: visible, but never committed")),
        (State::Prepared, false, true) => f.anomaly(format!("{what}: committed by nobody, but visible")),
        (State::Prepared, false, false) => f.anomaly(format!("{what}: acknowledged PREPARE lost (not listed)")),
        (State::Finishing { commit: true }, false, false) => {
            f.anomaly(format!("{what}: COMMIT PREPARED in doubt, but neither prepared nor committed"))
        }
        (State::Finishing { commit: false }, false, true) => {
            f.anomaly(format!("{what}: ROLLBACK PREPARED in doubt, but its rows are visible"))
        }
        (State::Committed | State::Aborted, true, _) => f.anomaly(format!("{what}: finished, but still prepared")),
        (State::Committed, false, true) => {
            if e.acknowledged {
                *f.acknowledged.entry(kind_name('p')).or_default() += 1;
            }
        }
        (State::Committed, false, false) => f.anomaly(format!("{what}: acknowledged COMMIT PREPARED missing")),
        (State::Aborted, false, true) => f.anomaly(format!("{what}: rolled back, but visible")),
        (State::Aborted, false, false) => f.prepared_rolled_back_absent += 1,
    }
}

/// TPC-C: logged New-Orders (present with all their lines, or absent when in doubt), no order
/// beyond the loaded ones that was never attempted, and consistency conditions 1-4.
pub fn tpcc(db: &Database, ledger: &Ledger, f: &mut Findings) -> Result<()> {
    let mut tx = db.begin_with(IsolationLevel::RepeatableRead)?;
    let mut lines: HashMap<(i64, i64, i64), i64> = HashMap::new();
    for row in tx.scan(&db.table(ORDER_LINE.name)?)? {
        let r = row?.1;
        *lines.entry((int(&r[0])?, int(&r[1])?, int(&r[2])?)).or_default() += 1;
    }
    let (c_id, ol_cnt, entry_d) = (OORDER.col("o_c_id"), OORDER.col("o_ol_cnt"), OORDER.col("o_entry_d"));
    let mut present = HashMap::new();
    for row in tx.scan(&db.table(OORDER.name)?)? {
        let r = row?.1;
        let (w, d, o) = (int(&r[0])?, int(&r[1])?, int(&r[2])?);
        let n = int(&r[ol_cnt])?;
        let have = lines.get(&(w, d, o)).copied().unwrap_or(0);
        if have != n {
            f.anomaly(format!("order {w}/{d}/{o}: o_ol_cnt {n} but {have} order lines"));
        }
        if o <= i64::from(ORDERS) {
            continue;
        }
        let key = format!("{w}.{d}.{}.{}", int(&r[c_id])?, int(&r[entry_d])?);
        if present.insert(key.clone(), n.to_string()).is_some() {
            f.anomaly(format!("new order {key}: present twice"));
        }
    }
    tx.commit()?;
    check_kind(ledger, 'o', &present, &|_| None, f);
    let target = workload::tpcc::embedded::Embedded::new(db)?;
    for v in target.connect()?.consistency_facts()?.violations() {
        f.anomaly(format!("TPC-C consistency {v}"));
    }
    Ok(())
}

/// The bulk table: each burst whole or absent, as its insert and deletion allow.
pub fn bursts(db: &Database, ledger: &Ledger, f: &mut Findings) -> Result<()> {
    let mut tx = db.begin_with(IsolationLevel::RepeatableRead)?;
    let mut counts: HashMap<i64, i64> = HashMap::new();
    for row in tx.scan(&db.table(BULK)?)? {
        *counts.entry(int(&row?.1[0])?).or_default() += 1;
    }
    tx.commit()?;
    let present: HashMap<String, String> = counts.iter().map(|(b, n)| (b.to_string(), n.to_string())).collect();
    check_kind(ledger, 'x', &present, &|k| ledger.get('y', k).map(|e| e.state), f);
    for (key, e) in ledger.of_kind('y') {
        if e.state == State::InDoubt {
            f.resolutions.push((!present.contains_key(key), 'y', key.to_string()));
        }
    }
    Ok(())
}

/// The replication slot after recovery: it exists; its confirmed position is at least the
/// last one the child logged (an acknowledged advance is never lost); the WAL from its restart
/// point is still there and decodes; and every row the decoder hands out is committed in its
/// table now (a pgbench history row by its `hid`, a prepared transaction's row by its `id`), so
/// nothing rolled back (a transaction, a savepoint rolled back to, a ROLLBACK PREPARED) and
/// nothing still prepared is decoded. The peek is bounded (20,000 rows) and leaves the slot
/// where it is.
pub fn slot(db: &Database, ledger: &Ledger, f: &mut Findings) -> Result<()> {
    use settledb::db::DecodeLimits;
    let Some(d) = db.replication_slot(SLOT) else {
        f.anomaly(format!("replication slot \"{SLOT}\" is gone after recovery"));
        return Ok(());
    };
    if d.confirmed_flush.0 < ledger.slot_confirmed {
        f.anomaly(format!(
            "replication slot \"{SLOT}\": confirmed_flush {} is behind the acknowledged {}",
            d.confirmed_flush,
            settledb::Lsn(ledger.slot_confirmed)
        ));
    }
    f.slot_confirmed = d.confirmed_flush.0;
    let limits = DecodeLimits { upto_nchanges: Some(20_000), ..DecodeLimits::default() };
    let rows = match db.logical_slot_peek_changes(SLOT, limits, &[]) {
        Ok(r) => r.rows,
        Err(e) => {
            f.anomaly(format!("replication slot \"{SLOT}\": decoding after recovery failed: {e}"));
            return Ok(());
        }
    };
    let present = |table: &str, column: &str| -> Result<HashSet<i64>> {
        let Ok(t) = db.table(table) else { return Ok(HashSet::new()) };
        let i = t.schema().columns.iter().position(|c| c.name == column).context("key column")?;
        let mut tx = db.begin_with(IsolationLevel::RepeatableRead)?;
        let mut out = HashSet::new();
        for row in tx.scan(&t)? {
            out.insert(int(&row?.1[i])?);
        }
        tx.commit()?;
        Ok(out)
    };
    let hids = present(HISTORY, "hid")?;
    let ids = present(TWOPC, "id")?;
    let value = |line: &str, prefix: &str, field: &str| -> Option<i64> {
        let rest = line.strip_prefix(prefix)?;
        let at = rest.find(field)? + field.len();
        rest[at..].split(' ').next()?.parse().ok()
    };
    for r in rows {
        let line = String::from_utf8_lossy(&r.data);
        let checked = [
            ("table public.pgbench_history: INSERT:", "hid[bigint]:", &hids, "pgbench history row"),
            ("table public.torture_2pc: INSERT:", " id[bigint]:", &ids, "prepared transaction's row"),
        ];
        for (prefix, field, set, what) in checked {
            if let Some(v) = value(&line, prefix, field) {
                f.slot_rows_checked += 1;
                if !set.contains(&v) {
                    f.anomaly(format!("replication slot \"{SLOT}\" decoded {what} {v} at {}, not committed", r.lsn));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(lines: &[&str]) -> Ledger {
        let mut l = Ledger::default();
        for line in lines {
            l.apply(line).unwrap();
        }
        l
    }

    fn found(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn run(l: &Ledger, kind: char, present: &[(&str, &str)]) -> Findings {
        let mut f = Findings::default();
        check_kind(l, kind, &found(present), &|k| l.get('y', k).map(|e| e.state), &mut f);
        f
    }

    const LOG: &[&str] = &["B h 1 5 1 1 10", "C h 1", "B h 2 6 1 1 -3", "A h 2", "B h 3 7 2 1 4"];

    #[test]
    fn a_clean_database_passes_and_in_doubt_is_resolved_either_way() {
        let l = ledger(LOG);
        for present in [&[("1", "5 1 1 10")][..], &[("1", "5 1 1 10"), ("3", "7 2 1 4")]] {
            let f = run(&l, 'h', present);
            assert_eq!(f.anomalies, Vec::<String>::new());
            assert_eq!(f.acknowledged["pgbench transaction"], 1);
            assert_eq!(f.absent_checked, 1);
            assert_eq!(f.resolutions, [(present.len() == 2, 'h', "3".to_string())]);
        }
    }

    #[test]
    fn an_acknowledged_commit_missing_is_an_anomaly() {
        let f = run(&ledger(LOG), 'h', &[]);
        assert_eq!(f.anomalies, ["pgbench transaction 1: acknowledged commit missing"]);
    }

    #[test]
    fn rolled_back_phantom_and_altered_rows_are_anomalies() {
        let l = ledger(LOG);
        let f = run(&l, 'h', &[("1", "5 1 1 10"), ("2", "6 1 1 -3"), ("9", "1 1 1 1")]);
        assert_eq!(f.anomaly_count, 2, "{:?}", f.anomalies);
        assert!(f.anomalies.iter().any(|a| a.contains("2: rolled back")));
        assert!(f.anomalies.iter().any(|a| a.contains("9: present, but never attempted")));
        let f = run(&l, 'h', &[("1", "5 1 1 11")]);
        assert_eq!(f.anomalies, ["pgbench transaction 1: found \"5 1 1 11\", but it wrote \"5 1 1 10\""]);
        // Resolved absent after a crash, then back: the outcome flipped.
        let l = ledger(&[LOG, &["R0 h 3"]].concat());
        assert_eq!(run(&l, 'h', &[("1", "5 1 1 10"), ("3", "7 2 1 4")]).anomaly_count, 1);
    }

    #[test]
    fn a_burst_follows_its_deletion() {
        let base = ["B x 7 400", "C x 7"];
        let present = [("7", "400")];
        assert_eq!(run(&ledger(&base), 'x', &present).anomaly_count, 0);
        assert_eq!(run(&ledger(&base), 'x', &[]).anomaly_count, 1, "acknowledged, not deleted, missing");
        let deleted = ledger(&[&base[..], &["B y 7", "C y 7"]].concat());
        assert_eq!(run(&deleted, 'x', &[]).anomaly_count, 0);
        assert_eq!(run(&deleted, 'x', &present).anomaly_count, 1, "deleted but present");
        let doubt = ledger(&[&base[..], &["B y 7"]].concat());
        assert_eq!(run(&doubt, 'x', &[]).anomaly_count + run(&doubt, 'x', &present).anomaly_count, 0);
        assert_eq!(run(&ledger(&base), 'x', &[("7", "399")]).anomaly_count, 1, "a torn burst");
    }

    /// Every row of the prepared-transaction table in the module doc: (log lines, listed,
    /// rows visible) → anomaly or not, and the resolution written.
    #[test]
    fn prepared_transactions_follow_the_table() {
        let k = (2u64 << 32 | 5).to_string();
        let lines = |extra: &[&str]| -> Ledger {
            let mut all = vec![format!("B p {k} 3")];
            all.extend(extra.iter().map(|l| l.replace('K', &k)));
            ledger(&all.iter().map(String::as_str).collect::<Vec<_>>())
        };
        let check = |l: &Ledger, open: bool, rows: Option<&str>| {
            let mut f = Findings::default();
            check_prepared(&k, l.get('p', &k).unwrap(), open, rows.map(str::to_string), &mut f);
            f
        };
        type Case<'a> = (&'a [&'a str], bool, Option<&'a str>, bool, &'a str);
        let cases: &[Case] = &[
            // (log after B, listed, visible rows, anomaly, resolution)
            (&[], true, None, false, "RP"),
            (&[], false, None, false, "R0"),
            (&[], false, Some("3"), true, ""),
            (&["P p K"], true, None, false, ""),
            (&["P p K"], false, Some("3"), true, ""),
            (&["P p K"], false, None, true, ""),
            (&["P p K", "F p K 1 3"], true, None, false, "RP"),
            (&["P p K", "F p K 1 3"], false, Some("3"), false, "R1"),
            (&["P p K", "F p K 1 3"], false, None, true, ""),
            (&["P p K", "F p K 0 3"], true, None, false, "RP"),
            (&["P p K", "F p K 0 3"], false, None, false, "R0"),
            (&["P p K", "F p K 0 3"], false, Some("3"), true, ""),
            (&["P p K", "F p K 1 3", "C p K"], false, Some("3"), false, ""),
            (&["P p K", "F p K 1 3", "C p K"], false, Some("2"), true, ""),
            (&["P p K", "F p K 1 3", "C p K"], true, None, true, ""),
            (&["P p K", "F p K 1 3", "C p K"], false, None, true, ""),
            (&["P p K", "F p K 0 3", "A p K"], false, None, false, ""),
            (&["P p K", "F p K 0 3", "A p K"], false, Some("3"), true, ""),
            (&["P p K", "F p K 0 3", "A p K"], true, None, true, ""),
            (&["P p K"], true, Some("3"), true, ""),
        ];
        for (i, (extra, open, rows, anomaly, resolution)) in cases.iter().enumerate() {
            let f = check(&lines(extra), *open, *rows);
            assert_eq!(f.anomaly_count > 0, *anomaly, "case {i}: {:?}", f.anomalies);
            let written = match (f.resolutions.first(), f.still_prepared.first()) {
                (Some((true, ..)), None) => "R1",
                (Some((false, ..)), None) => "R0",
                (None, Some(_)) => "RP",
                _ => "",
            };
            assert_eq!(written, *resolution, "case {i}");
        }
        let crossed = check(&lines(&["P p K", "F p K 1 4", "C p K"]), false, Some("3"));
        assert_eq!(crossed.prepared_finished_after_kill, 1, "prepared by child 2, committed by child 4");
    }

    #[test]
    fn a_rolled_back_savepoint_write_present_or_a_released_one_missing_is_an_anomaly() {
        let l = ledger(&["B s 1 5 1 1 10", "B s 2 6 1 1 -3", "A s 2", "C s 1"]);
        assert_eq!(run(&l, 's', &[("1", "5 1 1 10")]).anomaly_count, 0);
        let f = run(&l, 's', &[("1", "5 1 1 10"), ("2", "6 1 1 -3")]);
        assert_eq!(f.anomalies, ["savepoint write 2: rolled back (or found absent before), but present"]);
        let f = run(&l, 's', &[]);
        assert_eq!(f.anomalies, ["savepoint write 1: acknowledged commit missing"]);
    }
}
