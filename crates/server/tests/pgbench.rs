//! The real `pgbench` against the server: `pgbench -i` (its DROP/CREATE TABLE, client-side COPY
//! ... WITH (FREEZE ON) inside a transaction with TRUNCATE, VACUUM, ALTER TABLE ADD PRIMARY
//! KEY), then TPC-B-like runs in each query mode and a select-only run, with pgbench's balance
//! invariant checked after them. Runs use transaction counts (`-t`), not durations.

mod common;

use common::*;

fn pgbench(bin: &std::path::Path, s: &TestServer, extra: &[&str]) -> String {
    let port = s.port();
    let mut args = vec!["-h", "127.0.0.1", "-p", port.as_str(), "-U", "postgres"];
    args.extend_from_slice(extra);
    args.push("postgres");
    let o = run(bin, &args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "pgbench {extra:?} failed:\n{out}\n{err}");
    out
}

#[test]
fn pgbench_init_runs_and_keeps_the_balance_invariant() {
    let (Some(bench), Some(psql)) = (require("pgbench"), require("psql")) else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    pgbench(&bench, &s, &["-i", "-s", "1", "-q"]);
    assert_eq!(psql_value(&psql, &s, "select count(*) from pgbench_accounts"), "100000");
    assert_eq!(psql_value(&psql, &s, "select count(*) from pgbench_tellers"), "10");
    assert_eq!(psql_value(&psql, &s, "select count(*) from pgbench_branches"), "1");
    // -n: no VACUUM and no TRUNCATE of pgbench_history before each run, so the history of
    // every run is kept and the invariant covers all of them.
    for mode in ["simple", "extended", "prepared"] {
        let out = pgbench(&bench, &s, &["-n", "-c", "2", "-j", "2", "-t", "100", "-M", mode]);
        assert!(out.contains("number of transactions actually processed: 200/200"), "{mode}:\n{out}");
        assert!(out.contains("number of failed transactions: 0"), "{mode}:\n{out}");
    }
    let out = pgbench(&bench, &s, &["-n", "-S", "-c", "2", "-j", "2", "-t", "300", "-M", "prepared"]);
    assert!(out.contains("number of transactions actually processed: 600/600"), "{out}");
    let sum = |sql: &str| psql_value(&psql, &s, sql).parse::<i64>().expect("a number");
    let accounts = sum("select sum(abalance) from pgbench_accounts");
    let branches = sum("select sum(bbalance) from pgbench_branches");
    let tellers = sum("select sum(tbalance) from pgbench_tellers");
    let history = sum("select sum(delta) from pgbench_history");
    assert_eq!(psql_value(&psql, &s, "select count(*) from pgbench_history"), "600");
    assert_eq!((accounts, branches, tellers), (history, history, history));
    // A run with pgbench's own VACUUM and TRUNCATE of the history first works too.
    pgbench(&bench, &s, &["-c", "2", "-j", "2", "-t", "20"]);
    assert_eq!(psql_value(&psql, &s, "select count(*) from pgbench_history"), "40");
}
