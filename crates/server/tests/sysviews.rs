//! The statistics and settings views a PostgreSQL user reads, through the real psql:
//! `pg_database` (and `\l`), `pg_settings`, `pg_stat_wal`, `pg_statio_user_tables`,
//! `pg_stat_progress_vacuum` while a throttled VACUUM runs, `pg_visibility_map_summary()`; and
//! ANALYZE, whose figures `pg_class` and `pg_stat_user_tables` show.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn num(s: &str) -> i64 {
    s.trim().parse().unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

#[test]
fn statistics_and_settings_views() {
    let Some(psql) = require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start_with_settings(dir.path(), &[("autovacuum_naptime", "7s")]);
    let q = |sql: &str| psql_value(&psql, &s, sql);
    q("create table t (id int primary key, v text)");
    q("insert into t select g, 'row ' || g from generate_series(1, 20000) g");
    q("update t set v = v || '!'");

    // A VACUUM slowed by the cost delay shows in pg_stat_progress_vacuum while it runs.
    let port = s.port();
    let psql2 = psql.clone();
    let vacuum = std::thread::spawn(move || {
        let args = ["-X", "-h", "127.0.0.1", "-p", &port, "-U", "postgres"];
        let mut a = args.to_vec();
        a.extend(["-c", "set vacuum_cost_delay = 20", "-c", "set vacuum_cost_limit = 1", "-c", "vacuum t"]);
        run(&psql2, &a)
    });
    let oid = q("select oid from pg_class where relname = 't'");
    let deadline = Instant::now() + Duration::from_secs(60);
    // Every row seen names the table and a phase of PostgreSQL's; wait for one early in the
    // heap scan, so that the VACUUM still holds the table for a while (the delay makes each
    // page cost 20 ms).
    const PHASES: [&str; 7] = [
        "initializing",
        "scanning heap",
        "vacuuming indexes",
        "vacuuming heap",
        "cleaning up indexes",
        "truncating heap",
        "performing final cleanup",
    ];
    loop {
        let r = q("select relid, datname, phase, heap_blks_scanned, heap_blks_total, autovacuum \
                   from pg_stat_progress_vacuum");
        if !r.is_empty() {
            let f: Vec<&str> = r.split('|').collect();
            assert_eq!((f[0], f[1], f[5]), (oid.as_str(), "postgres", "f"), "{r}");
            assert!(PHASES.contains(&f[2]), "{r}");
            let (scanned, total) = (num(f[3]), num(f[4]));
            if f[2] == "scanning heap" && total > 0 && scanned * 2 < total {
                break;
            }
        }
        assert!(Instant::now() < deadline, "no VACUUM early in its heap scan seen in pg_stat_progress_vacuum");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Meanwhile, SKIP_LOCKED passes over the table the VACUUM holds, with PostgreSQL's WARNING.
    for (sql, what) in [("vacuum (skip_locked) t", "vacuum"), ("analyze (skip_locked) t", "analyze")] {
        let o = psql_run(&psql, &s, sql);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{sql}: {err}");
        assert!(
            err.contains(&format!("WARNING:  skipping {what} of \"t\" --- lock not available")),
            "{sql}: {out}{err}"
        );
    }
    let o = vacuum.join().unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
    assert_eq!(q("select count(*) from pg_stat_progress_vacuum"), "0");

    // The visibility map after a VACUUM (FREEZE): every page all-visible and all-frozen.
    q("vacuum (freeze) t");
    let pages = num(&q("select pg_relation_size('t') / 8192"));
    assert_eq!(q("select all_visible, all_frozen from pg_visibility_map_summary('t')"), format!("{pages}|{pages}"));
    assert_eq!(q("select pg_visibility_map_summary('t')"), format!("({pages},{pages})"));

    // ANALYZE: the table's size into pg_class, the live and dead estimates, the counters.
    let o = run(&psql, &["-X", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-c", "analyze verbose t"]);
    let (out, err) = text(&o);
    assert!(o.status.success() && out.contains("ANALYZE"), "{out}{err}");
    assert!(err.contains("INFO:  analyzing \"public.t\""), "{err}");
    let line = format!(
        "INFO:  \"t\": scanned {pages} of {pages} pages, containing 20000 live rows and 0 dead rows; 0 rows in sample, \
         20000 estimated total rows"
    );
    assert!(err.contains(&line), "{err}");
    assert_eq!(q("select relpages, reltuples from pg_class where relname = 't'"), format!("{pages}|20000"));
    let st = "select n_live_tup, n_mod_since_analyze, analyze_count, last_analyze is not null, autoanalyze_count \
              from pg_stat_user_tables where relname = 't'";
    assert_eq!(q(st), "20000|0|1|t|0");
    q("delete from t where id <= 1000");
    q("vacuum (analyze) t");
    assert_eq!(q(st), "19000|0|2|t|0");
    let e = text(&psql_run(&psql, &s, "analyze (bogus) t")).1;
    assert!(e.contains("unrecognized ANALYZE option \"bogus\""), "{e}");
    // With nothing holding the table, SKIP_LOCKED analyzes it.
    q("analyze (skip_locked) t");
    assert_eq!(q(st), "19000|0|3|t|0");

    // pg_database: one database whose frozen XID is the oldest relfrozenxid.
    assert_eq!(
        q("select datname, encoding, datfrozenxid = (select min(relfrozenxid) from pg_class where relkind = 'r') from pg_database"),
        "postgres|6|t"
    );
    let l = text(&run(&psql, &["-X", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-c", "\\l"])).0;
    assert!(l.contains(" postgres | postgres | UTF8     | C       | C     |"), "{l}");

    // pg_statio_user_tables: the scans above found t's heap blocks in the buffer pool.
    let io = q("select heap_blks_hit > 0, idx_blks_hit is null from pg_statio_user_tables where relname = 't'");
    assert_eq!(io, "t|t");

    // pg_stat_wal counts records, bytes, writes and fsyncs, and keeps them across a restart.
    let wal = q("select wal_records, wal_bytes, wal_write, wal_sync, stats_reset is not null from pg_stat_wal");
    let w: Vec<i64> = wal.split('|').take(4).map(num).collect();
    assert!(w.iter().all(|&x| x > 0) && wal.ends_with("|t"), "{wal}");

    // pg_settings: this session's values, where they come from, when they can change.
    let port = s.port();
    let psql_session = |sqls: &[&str]| {
        let mut a = vec!["-X", "-At", "-h", "127.0.0.1", "-p", &port];
        a.extend(["-U", "postgres"]);
        for x in sqls {
            a.extend(["-c", *x]);
        }
        text(&run(&psql, &a)).0
    };
    let out = psql_session(&[
        "set statement_timeout = '5s'",
        "select name, setting, context, source from pg_settings \
         where name in ('statement_timeout', 'shared_buffers', 'autovacuum_naptime', 'server_version_num') order by name",
    ]);
    assert_eq!(
        out.trim(),
        "SET\nautovacuum_naptime|7s|sighup|command line\nserver_version_num|150000|internal|default\n\
         shared_buffers|128MB|postmaster|default\nstatement_timeout|5s|user|session"
    );
    s.stop();
    let s = TestServer::start(dir.path());
    let after = psql_value(&psql, &s, "select wal_records, wal_bytes, wal_write, wal_sync from pg_stat_wal");
    let a: Vec<i64> = after.split('|').map(num).collect();
    assert!(a.iter().zip(&w).all(|(x, y)| x >= y), "before the restart {wal}, after {after}");
}
