//! What a server's administrator and monitoring tools use, through tokio-postgres:
//! `ALTER SYSTEM` with `pg_reload_conf()` (a `sighup` parameter changes at the reload, a
//! `postmaster` one only at the next start, both kept in `postgresql.auto.conf`),
//! `pg_current_logfile()` with `pg_read_binary_file()`, `txid_current_snapshot()`,
//! `pg_stat_activity`, `pg_relation_size()` by OID; and `IN` lists and subqueries as index
//! lookups, with the same answers as a scan.

mod common;

use common::{code, connect, TestServer};

async fn one(c: &tokio_postgres::Client, sql: &str) -> String {
    let rows = c.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    for m in rows {
        if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
            return r.get(0).unwrap_or("NULL").to_string();
        }
    }
    panic!("{sql}: no row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_system_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    assert_eq!(one(&c, "show autovacuum_naptime").await, "1min");
    c.batch_execute("ALTER SYSTEM SET autovacuum_naptime = '5s'").await.unwrap();
    c.batch_execute("alter system set shared_buffers to '64MB'").await.unwrap();
    c.batch_execute("alter system set vacuum_multixact_freeze_min_age = 1000").await.unwrap();
    // Nothing changes before the reload.
    assert_eq!(one(&c, "show autovacuum_naptime").await, "1min");
    assert_eq!(one(&c, "select pg_reload_conf()").await, "t");
    assert_eq!(one(&c, "show autovacuum_naptime").await, "5s");
    assert_eq!(one(&c, "show vacuum_multixact_freeze_min_age").await, "1000");
    // shared_buffers is read when the directory is opened.
    assert_eq!(one(&c, "show shared_buffers").await, "128MB");
    let ctx = |n: &str| format!("select context from pg_settings where name = '{n}'");
    assert_eq!(one(&c, &ctx("autovacuum_naptime")).await, "sighup");
    assert_eq!(one(&c, &ctx("shared_buffers")).await, "postmaster");
    assert_eq!(one(&c, &ctx("lock_timeout")).await, "user");
    let source = |n: &str| format!("select source from pg_settings where name = '{n}'");
    assert_eq!(one(&c, &source("autovacuum_naptime")).await, "configuration file");
    assert_eq!(one(&c, &source("checkpoint_timeout")).await, "default");

    // Refusals, with PostgreSQL's SQLSTATEs.
    let e = c.batch_execute("alter system set no_such_parameter = 1").await.unwrap_err();
    assert_eq!(code(&e), "42704");
    let e = c.batch_execute("alter system set autovacuum_naptime = 'soon'").await.unwrap_err();
    assert_eq!(code(&e), "22023");
    let e = c.batch_execute("begin; alter system set autovacuum_naptime = '9s'").await.unwrap_err();
    assert_eq!(code(&e), "25001");
    c.batch_execute("rollback").await.unwrap();
    let e = c.batch_execute("set autovacuum_naptime = '9s'").await.unwrap_err();
    assert_eq!(code(&e), "55P02");

    // The log says what the reload did; a client reads it as PostgreSQL's tools do.
    let file = one(&c, "select pg_current_logfile()").await;
    let row =
        c.query_one("select pg_read_binary_file($1, $2, $3, true)", &[&file, &0i64, &(1i64 << 20)]).await.unwrap();
    let log = String::from_utf8(row.get::<_, Vec<u8>>(0)).unwrap();
    assert!(log.contains("LOG:  received SIGHUP, reloading configuration files"), "{log}");
    assert!(log.contains("LOG:  parameter \"autovacuum_naptime\" changed to \"5s\""), "{log}");
    assert!(
        log.contains("LOG:  parameter \"shared_buffers\" cannot be changed without restarting the server"),
        "{log}"
    );
    let e = c.query_one("select pg_read_binary_file('../x', 0, 10, true)", &[]).await.unwrap_err();
    assert_eq!(code(&e), "42501");
    let missing = c.query_one("select pg_read_binary_file('log/none', 0, 10, true)", &[]).await.unwrap();
    assert_eq!(missing.get::<_, Option<Vec<u8>>>(0), None);

    // RESET takes a parameter out of the file; the next start reads what is left.
    c.batch_execute("alter system reset vacuum_multixact_freeze_min_age").await.unwrap();
    let auto = std::fs::read_to_string(dir.path().join("postgresql.auto.conf")).unwrap();
    assert!(auto.contains("autovacuum_naptime = '5s'") && !auto.contains("multixact"), "{auto}");
    drop(c);
    s.stop();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    assert_eq!(one(&c, "show autovacuum_naptime").await, "5s");
    assert_eq!(one(&c, "show shared_buffers").await, "64MB");
    c.batch_execute("alter system reset all").await.unwrap();
    c.query_one("select pg_reload_conf()", &[]).await.unwrap();
    assert_eq!(one(&c, "show autovacuum_naptime").await, "1min");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitoring_functions() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    let other = connect(&s).await;
    other
        .batch_execute("create table t (id int primary key, v text); begin; insert into t values (0, 'a')")
        .await
        .unwrap();
    // A snapshot's xmax is the next XID; the open transaction is in it.
    let xid: i64 = one(&other, "select txid_current()").await.parse().unwrap();
    let snap = one(&c, "select txid_current_snapshot()").await;
    let parts: Vec<&str> = snap.split(':').collect();
    assert_eq!(parts.len(), 3, "{snap}");
    let xmax: i64 = parts[1].parse().unwrap();
    assert!(xmax > xid, "{snap} vs {xid}");
    assert!(parts[2].split(',').any(|x| x == xid.to_string()), "{snap} vs {xid}");
    let got: i64 = c.query_one("select txid_snapshot_xmax(txid_current_snapshot())", &[]).await.unwrap().get(0);
    assert!(got >= xmax);
    let e = c.query_one("select txid_snapshot_xmax('garbage')", &[]).await.unwrap_err();
    assert_eq!(code(&e), "22P02");
    // Both sessions are client backends; the other one is inside its transaction.
    let states = c
        .query("select state from pg_stat_activity where backend_type = 'client backend' order by state", &[])
        .await
        .unwrap();
    let states: Vec<String> = states.iter().map(|r| r.get(0)).collect();
    assert_eq!(states, ["idle", "idle in transaction"]);
    assert_eq!(one(&c, "select count(*) from pg_stat_activity where backend_type = 'autovacuum worker'").await, "0");
    assert_eq!(one(&c, "select current_database()").await, "postgres");
    assert_eq!(one(&c, "select count(*) from pg_stat_database where datname = current_database()").await, "1");
    other.batch_execute("insert into t select g, 'x' from generate_series(1, 2000) g; commit").await.unwrap();
    // pg_relation_size by name and by OID, for a table and its index.
    let by_name = one(&c, "select pg_relation_size('t')").await;
    let by_oid = one(&c, "select pg_relation_size(oid, 'main') from pg_class where relname = 't'").await;
    assert_eq!(by_name, by_oid);
    assert!(by_name.parse::<i64>().unwrap() > 8192);
    let ix = one(&c, "select pg_relation_size(indexrelid) from pg_index i join pg_class c on c.oid = i.indrelid where c.relname = 't'").await;
    assert_eq!(ix, one(&c, "select pg_relation_size('t_pkey')").await);
    assert_eq!(one(&c, "select pg_relation_size(999999)").await, "NULL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_lists_and_subqueries_find_the_same_rows_as_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute(
        "create table stock (w int, i int, q int, primary key (w, i));
         insert into stock select w, i, (w * 7 + i * 13) % 100 from generate_series(1, 3) w, generate_series(1, 500) i;
         create table lines (o int, item int);
         insert into lines select g, (g * 37) % 600 from generate_series(1, 200) g;
         insert into lines values (201, null);",
    )
    .await
    .unwrap();
    let count = |sql: String| {
        let c = &c;
        async move { one(c, &sql).await }
    };
    for (cond, scan) in [
        // The subquery's items, some beyond the table (500..599) and a NULL.
        (
            "i in (select item from lines where o between 10 and 150)",
            "exists (select 1 from lines where o between 10 and 150 and item = stock.i)",
        ),
        ("i in (3, 5, 5, 700, null)", "(i = 3 or i = 5 or i = 700)"),
        (
            "i not in (select item from lines where item is not null)",
            "not exists (select 1 from lines where item = stock.i)",
        ),
    ] {
        for w in 1..=3 {
            let fast =
                count(format!("select count(*), coalesce(sum(q), 0) from stock where w = {w} and q < 60 and {cond}"))
                    .await;
            let slow = count(format!(
                "select count(*), coalesce(sum(q), 0) from stock where q < 60 and w + 0 = {w} and {scan}"
            ))
            .await;
            assert_eq!(fast, slow, "{cond} at w = {w}");
        }
    }
    // Parameters in the list and in the prefix (the extended protocol).
    let rows =
        c.query("select i from stock where w = $1 and i in ($2, $3) order by i", &[&2i32, &9i32, &4i32]).await.unwrap();
    let got: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(got, [4, 9]);
    // UPDATE and DELETE with an uncorrelated IN subquery (it runs once, before the rows change).
    let n = c
        .execute("update stock set q = q + 2000 where w = 3 and i in (select item from lines where o <= 5)", &[])
        .await
        .unwrap();
    let expected: i64 = one(&c, "select count(distinct item) from lines where o <= 5 and item between 1 and 500")
        .await
        .parse()
        .unwrap();
    assert_eq!(n as i64, expected);
    assert_eq!(one(&c, "select count(*) from stock where w = 3 and q >= 2000").await, expected.to_string());
    let n = c.execute("update stock set q = (select max(o) from lines) where w = 3 and q >= 2000", &[]).await.unwrap();
    assert_eq!(n as i64, expected);
    assert_eq!(one(&c, "select count(*) from stock where w = 3 and q = 201").await, expected.to_string());
    let n =
        c.execute("delete from stock where w = 3 and i in (select item from lines where o <= 5)", &[]).await.unwrap();
    assert_eq!(n as i64, expected);
    // A correlated one is still refused.
    let e = c
        .execute("update stock set q = 0 where exists (select 1 from lines where lines.item = stock.i)", &[])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "0A000");
    // An UPDATE through the same path changes exactly those rows.
    let n = c.execute("update stock set q = q + 1000 where w = 1 and i in (3, 5, 7, 900)", &[]).await.unwrap();
    assert_eq!(n, 3);
    let rows = c.query("select i from stock where q >= 1000 order by i", &[]).await.unwrap();
    assert_eq!(rows.iter().map(|r| r.get(0)).collect::<Vec<i32>>(), [3, 5, 7]);
}

/// IN lookups over an index that covers the query read the index alone, and agree with a scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_lookups_can_be_index_only() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute(
        "create table k (a int, b int, primary key (a, b));
         insert into k select a, b from generate_series(1, 4) a, generate_series(1, 300) b;",
    )
    .await
    .unwrap();
    // VACUUM in a message of its own: in one of several statements it is refused (25001).
    c.batch_execute("vacuum k").await.unwrap();
    let rows = c.query("select b from k where a = 2 and b in (7, 3, 301, 7) order by b", &[]).await.unwrap();
    assert_eq!(rows.iter().map(|r| r.get(0)).collect::<Vec<i32>>(), [3, 7]);
    assert_eq!(
        one(&c, "select count(*) from k where a = 3 and b in (select b from k where a = 1 and b < 50)").await,
        "49"
    );
}

/// `ALTER TABLE ... RESET (...)` through the server: the named storage parameters leave
/// `pg_class.reloptions`, unknown or unset names are skipped as PostgreSQL 15 skips them,
/// `IF EXISTS` on a missing table is a NOTICE, and a missing table without it is 42P01.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_table_reset_storage_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute(
        "create table t (a int primary key) with (autovacuum_enabled = false, autovacuum_vacuum_threshold = 7);
         alter table t set (vacuum_freeze_policy = lazy)",
    )
    .await
    .unwrap();
    let opts = "select reloptions from pg_class where relname = 't'";
    assert_eq!(one(&c, opts).await, "autovacuum_enabled=off,autovacuum_vacuum_threshold=7,vacuum_freeze_policy=lazy");
    c.batch_execute("alter table t reset (autovacuum_enabled, no_such_parameter)").await.unwrap();
    assert_eq!(one(&c, opts).await, "autovacuum_vacuum_threshold=7,vacuum_freeze_policy=lazy");
    c.batch_execute("ALTER TABLE ONLY public.t RESET (vacuum_freeze_policy, autovacuum_vacuum_threshold)")
        .await
        .unwrap();
    assert_eq!(one(&c, opts).await, "");
    c.batch_execute("alter table if exists nope reset (fillfactor)").await.unwrap();
    c.batch_execute("alter table if exists nope set (vacuum_truncate = off)").await.unwrap();
    let e = c.batch_execute("alter table nope reset (fillfactor)").await.unwrap_err();
    assert_eq!(code(&e), "42P01", "{e:?}");
    let e = c.batch_execute("alter table t reset ()").await.unwrap_err();
    assert_eq!(code(&e), "42601", "{e:?}");
    let e = c.batch_execute("begin; alter table t reset (vacuum_truncate)").await.unwrap_err();
    assert_eq!(code(&e), "25001", "{e:?}");
}
