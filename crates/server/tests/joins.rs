//! Joins and `generate_series` through tokio-postgres: every join form checked against rows
//! computed here from the same data (a nested-loop oracle over Rust vectors), with NULL keys,
//! duplicate keys on both sides and an empty side; the strategy (index nested loop when the
//! inner table has an index on the join column, hash join without one) seen through
//! `pg_stat_user_tables`' scan counters; three-table joins, aggregates over a join, and the
//! errors PostgreSQL gives (42702, 42703, 42P01, 42712, 42883, 22023).

mod common;

use common::{code, connect, rows, Row, TestServer};
use tokio_postgres::types::Type;
use tokio_postgres::Client;

async fn sorted(c: &Client, sql: &str) -> Vec<Row> {
    let mut r = rows(c, sql).await;
    r.sort();
    r
}

fn s(x: impl ToString) -> Option<String> {
    Some(x.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_series_forms() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    let one = |v: &[i64]| v.iter().map(|x| vec![s(x)]).collect::<Vec<Row>>();
    assert_eq!(rows(&c, "select i from generate_series(1, 5) as g(i)").await, one(&[1, 2, 3, 4, 5]));
    assert_eq!(rows(&c, "select g from generate_series(1, 10, 3) g").await, one(&[1, 4, 7, 10]));
    assert_eq!(rows(&c, "select g.g * 2 from generate_series(1,3) g").await, one(&[2, 4, 6]));
    assert_eq!(rows(&c, "select * from generate_series(5, 1, -2)").await, one(&[5, 3, 1]));
    assert_eq!(rows(&c, "select * from generate_series(3, 1)").await, one(&[]));
    assert_eq!(rows(&c, "select * from generate_series(1, null)").await, one(&[]));
    assert_eq!(
        rows(&c, "select count(*), sum(x) from generate_series(1, 100) s(x) where x % 2 = 0").await,
        vec![vec![s(50), s(2550)]]
    );
    // int4 stops at its end instead of overflowing, as PostgreSQL's int4 series does.
    assert_eq!(rows(&c, "select * from generate_series(2147483646, 2147483647)").await, one(&[2147483646, 2147483647]));
    // Column names and types as PostgreSQL gives them.
    let st = c.prepare("select * from generate_series(1, 3)").await.unwrap();
    assert_eq!(st.columns()[0].name(), "generate_series");
    assert_eq!(st.columns()[0].type_(), &Type::INT4);
    let st = c.prepare("select * from generate_series(1, 3::int8) g").await.unwrap();
    assert_eq!((st.columns()[0].name(), st.columns()[0].type_()), ("g", &Type::INT8));
    let r = c.query("select i from generate_series(1, 3) g(i)", &[]).await.unwrap();
    assert_eq!(r.iter().map(|r| r.get::<_, i32>(0)).collect::<Vec<_>>(), vec![1, 2, 3]);
    let e = c.simple_query("select * from generate_series(1, 3, 0)").await.unwrap_err();
    assert_eq!(code(&e), "22023");

    // INSERT ... SELECT from a series.
    c.batch_execute("create table t (id int primary key, name text)").await.unwrap();
    let n = c.execute("insert into t select g, 'x' || g from generate_series(1, 1000) g", &[]).await.unwrap();
    assert_eq!(n, 1000);
    assert_eq!(rows(&c, "select count(*), min(id), max(id) from t").await, vec![vec![s(1000), s(1), s(1000)]]);
    assert_eq!(rows(&c, "select name from t where id = 500").await, vec![vec![s("x500")]]);

    // A long series obeys statement_timeout: its loop is an interruption point.
    c.batch_execute("set statement_timeout = 20").await.unwrap();
    let e = c.simple_query("select count(*) from generate_series(1, 2000000000)").await.unwrap_err();
    assert_eq!(code(&e), "57014");
}

/// Rows of `l` and `r`: (id, k, text), with NULL keys and duplicates on both sides.
type Tup = (i32, Option<i32>, String);

fn data() -> (Vec<Tup>, Vec<Tup>) {
    let l = vec![
        (1, Some(1), "a".into()),
        (2, Some(2), "b".into()),
        (3, Some(2), "c".into()),
        (4, None, "d".into()),
        (5, Some(7), "e".into()),
    ];
    let r = vec![
        (10, Some(2), "x".into()),
        (11, Some(2), "y".into()),
        (12, Some(1), "z".into()),
        (13, None, "n".into()),
        (14, Some(9), "q".into()),
    ];
    (l, r)
}

async fn load(c: &Client, name: &str, rows: &[Tup]) {
    c.batch_execute(&format!("create table {name} (id int primary key, k int, t text)")).await.unwrap();
    for (id, k, t) in rows {
        c.execute(&format!("insert into {name} values ($1, $2, $3)"), &[id, k, t]).await.unwrap();
    }
}

/// A client of `srv` with tables `l` and `r` of [`data`] and an empty `e`.
async fn loaded(srv: &TestServer) -> (Client, Vec<Tup>, Vec<Tup>) {
    let c = connect(srv).await;
    let (l, r) = data();
    load(&c, "l", &l).await;
    load(&c, "r", &r).await;
    load(&c, "e", &[]).await;
    (c, l, r)
}

fn eq(a: &Tup, b: &Tup) -> bool {
    a.1.is_some() && a.1 == b.1
}

fn lt(a: &Tup, b: &Tup) -> bool {
    matches!((a.1, b.1), (Some(x), Some(y)) if x < y)
}

fn txt(t: &Tup) -> Row {
    vec![s(t.0), t.1.map(|k| k.to_string()), s(&t.2)]
}

/// The oracle: a nested loop over the vectors with SQL's rules (NULL matches nothing).
fn oracle(l: &[Tup], r: &[Tup], on: impl Fn(&Tup, &Tup) -> bool, left: bool) -> Vec<Row> {
    let mut out = Vec::new();
    for a in l {
        let mut hit = false;
        for b in r {
            if on(a, b) {
                hit = true;
                out.push([txt(a), txt(b)].concat());
            }
        }
        if left && !hit {
            out.push([txt(a), vec![None, None, None]].concat());
        }
    }
    out.sort();
    out
}

async fn scans(c: &Client, table: &str) -> (i64, i64) {
    let r =
        c.query_one("select seq_scan, idx_scan from pg_stat_user_tables where relname = $1", &[&table]).await.unwrap();
    (r.get(0), r.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_match_an_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let (c, l, r) = loaded(&srv).await;

    // Without an index on r.k: hash join for equalities, nested loop otherwise.
    for round in ["hash", "index"] {
        if round == "index" {
            c.batch_execute("create index r_k on r (k)").await.unwrap();
        }
        let before = scans(&c, "r").await;
        let inner = oracle(&l, &r, eq, false);
        assert_eq!(sorted(&c, "select * from l join r on l.k = r.k").await, inner, "{round}");
        let after = scans(&c, "r").await;
        if round == "hash" {
            assert_eq!((after.0 - before.0, after.1 - before.1), (1, 0), "one sequential read of r");
        } else {
            // One index range per left row with a non-NULL key (4 of 5), no sequential read.
            assert_eq!((after.0 - before.0, after.1 - before.1), (0, 4), "index nested loop on r_k");
        }
        assert_eq!(sorted(&c, "select * from l inner join r on r.k = l.k").await, inner);
        assert_eq!(sorted(&c, "select l.*, r.* from l, r where l.k = r.k").await, inner);
        assert_eq!(sorted(&c, "select a.*, b.* from l a join r b on a.k = b.k").await, inner);
        assert_eq!(sorted(&c, "select * from l left join r on l.k = r.k").await, oracle(&l, &r, eq, true));
        assert_eq!(sorted(&c, "select * from l left outer join r on l.k = r.k").await, oracle(&l, &r, eq, true));
        assert_eq!(sorted(&c, "select * from r left join l on l.k = r.k").await, {
            let mut o = oracle(&r, &l, eq, true);
            o.sort();
            o
        });
        assert_eq!(sorted(&c, "select * from l join r on l.k < r.k").await, oracle(&l, &r, lt, false));
        assert_eq!(sorted(&c, "select * from l left join r on l.k < r.k").await, oracle(&l, &r, lt, true));
        // ON conditions of a LEFT JOIN that name one side narrow the matches, never the left rows;
        // WHERE filters after the padding.
        let on_t = |a: &Tup, b: &Tup| eq(a, b) && b.2 != "x";
        assert_eq!(
            sorted(&c, "select * from l left join r on l.k = r.k and r.t <> 'x'").await,
            oracle(&l, &r, on_t, true)
        );
        let padded: Vec<Row> = oracle(&l, &r, eq, true).into_iter().filter(|row| row[3].is_none()).collect();
        assert_eq!(sorted(&c, "select * from l left join r on l.k = r.k where r.id is null").await, padded);
        assert_eq!(sorted(&c, "select * from l left join r on l.k = r.k and l.id = 1 where l.id <= 2").await, {
            let on1 = |a: &Tup, b: &Tup| eq(a, b) && a.0 == 1;
            oracle(&l[..2], &r, on1, true)
        });
        // Cross joins.
        let all = oracle(&l, &r, |_, _| true, false);
        assert_eq!(sorted(&c, "select * from l cross join r").await, all);
        assert_eq!(sorted(&c, "select * from l, r").await, all);
        // An empty side.
        assert_eq!(sorted(&c, "select * from l join e on l.k = e.k").await, Vec::<Row>::new());
        assert_eq!(sorted(&c, "select * from e join l on l.k = e.k").await, Vec::<Row>::new());
        assert_eq!(sorted(&c, "select * from l left join e on l.k = e.k").await, oracle(&l, &[], eq, true));
        assert_eq!(sorted(&c, "select * from e left join l on l.k = e.k").await, Vec::<Row>::new());
        assert_eq!(rows(&c, "select count(*) from l, e").await, vec![vec![s(0)]]);
    }
    // A join on the primary key of the inner table (a unique index) and a self join.
    let self_join = oracle(&l, &l, |a, b| a.0 == b.0, false);
    assert_eq!(sorted(&c, "select * from l a join l b on b.id = a.id").await, self_join);
    // A two-column index: the index nested loop binds both columns (one range per left row)
    // and agrees with a hash join over the same rows without the index.
    c.batch_execute(
        "create table m (a int, b int, v text); create table m2 (a int, b int, v text);
         insert into m select g % 3, g % 5, 'v' || g from generate_series(1, 60) g;
         insert into m2 select a, b, v from m;
         create index m_ab on m (a, b);",
    )
    .await
    .unwrap();
    let before = scans(&c, "m").await;
    let with_index = sorted(&c, "select l.id, m.v from l join m on m.a = l.k and m.b = l.id").await;
    let after = scans(&c, "m").await;
    assert_eq!((after.0 - before.0, after.1 - before.1), (0, 4));
    let hashed = sorted(&c, "select l.id, m2.v from l join m2 on m2.a = l.k and m2.b = l.id").await;
    assert_eq!(with_index, hashed);
    assert!(!hashed.is_empty());

    // A join's loops are interruption points: statement_timeout stops a long nested loop.
    c.batch_execute("set statement_timeout = 20").await.unwrap();
    let e = c
        .simple_query(
            "select count(*) from generate_series(1, 20000) a(x), generate_series(1, 20000) b(y) where x + y < 0",
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), "57014");
    c.batch_execute("set statement_timeout = 0").await.unwrap();

    // Column names over a join; `*` keeps equal names apart.
    let st = c.prepare("select * from l a join r b on a.k = b.k").await.unwrap();
    let names: Vec<&str> = st.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["id", "k", "t", "id", "k", "t"]);
    assert_eq!(st.columns()[0].type_(), &Type::INT4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_tables_aggregates_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute(
        "create table customers (id int primary key, name text);
         create table orders (id int primary key, customer_id int, amount int);
         create table lines (order_id int, item text, qty int);
         create index lines_order on lines (order_id);
         insert into customers select g, 'c' || g from generate_series(1, 4) g;
         insert into orders select g, g % 3 + 1, g * 10 from generate_series(1, 12) g;
         insert into lines select o, 'item' || q, q from generate_series(1, 12) o(o), generate_series(1, 2) q(q) where o % 4 <> 0;",
    )
    .await
    .unwrap();
    // The oracle: the same rows in Rust.
    let orders: Vec<(i64, i64, i64)> = (1..=12).map(|g| (g, g % 3 + 1, g * 10)).collect();
    let lines: Vec<(i64, i64)> = (1..=12).filter(|o| o % 4 != 0).flat_map(|o| [(o, 1), (o, 2)]).collect();
    let mut want: Vec<Row> = Vec::new();
    for c_id in 1..=4i64 {
        let mut n = 0;
        let mut qty = 0;
        for o in orders.iter().filter(|o| o.1 == c_id) {
            for l in lines.iter().filter(|l| l.0 == o.0) {
                n += 1;
                qty += l.1;
            }
        }
        if n > 0 {
            want.push(vec![s(format!("c{c_id}")), s(n), s(qty)]);
        }
    }
    let got = rows(
        &c,
        "select c.name, count(*), sum(l.qty) from customers c join orders o on o.customer_id = c.id \
         join lines l on l.order_id = o.id group by c.name order by c.name",
    )
    .await;
    assert_eq!(got, want);
    // A LEFT JOIN keeps customer 4, who has no orders; count(o.id) counts none for it.
    let got = rows(
        &c,
        "select c.id, count(o.id), coalesce(sum(o.amount), 0) from customers c left join orders o \
         on o.customer_id = c.id group by c.id order by c.id",
    )
    .await;
    let want: Vec<Row> = (1..=4i64)
        .map(|cid| {
            let mine: Vec<_> = orders.iter().filter(|o| o.1 == cid).collect();
            vec![s(cid), s(mine.len()), s(mine.iter().map(|o| o.2).sum::<i64>())]
        })
        .collect();
    assert_eq!(got, want);
    // ORDER BY and LIMIT over joined rows; a WHERE on a joined column.
    let got = rows(
        &c,
        "select o.id, l.item from orders o join lines l on l.order_id = o.id where o.amount > 50 \
         order by o.id desc, l.item limit 3",
    )
    .await;
    assert_eq!(got, vec![vec![s(11), s("item1")], vec![s(11), s("item2")], vec![s(10), s("item1")]]);
    // A series joined to a table.
    let got =
        rows(&c, "select g, c.name from generate_series(0, 5) g left join customers c on c.id = g order by g").await;
    let want: Vec<Row> =
        (0..=5).map(|g| vec![s(g), if (1..=4).contains(&g) { s(format!("c{g}")) } else { None }]).collect();
    assert_eq!(got, want);

    // Keys of different numeric types: numeric(6,2) and int hash alike (2.00 = 2); float8 and
    // int compare as PostgreSQL compares them (the loop decides).
    c.batch_execute(
        "create table nums (n numeric(6,2), f float8); insert into nums values (2.00, 2), (2.50, 3.5), (null, null)",
    )
    .await
    .unwrap();
    assert_eq!(
        rows(&c, "select c.name, x.n from customers c join nums x on x.n = c.id").await,
        vec![vec![s("c2"), s("2.00")]]
    );
    assert_eq!(
        rows(&c, "select c.name, x.f from customers c join nums x on c.id = x.f").await,
        vec![vec![s("c2"), s(2)]]
    );

    // Regular expression operators (psql's catalog queries use them).
    assert_eq!(
        rows(&c, "select 'pg_toast' ~ '^pg_', 'public' !~ '^pg_', 'ABC' ~* 'b', 'ABC' !~* 'b'").await,
        vec![vec![s("t"), s("t"), s("t"), s("f")]]
    );
    let e = c.simple_query("select 'a' ~ '('").await.unwrap_err();
    assert_eq!(code(&e), "2201B");

    // Errors, with PostgreSQL's SQLSTATEs.
    for (sql, want) in [
        ("select id from customers c join orders o on o.customer_id = c.id", "42702"),
        ("select c.nosuch from customers c join orders o on o.customer_id = c.id", "42703"),
        ("select * from customers c join orders o on o.customer_id = c.nosuch", "42703"),
        ("select * from customers c join nosuch n on n.id = c.id", "42P01"),
        ("select customers.id from customers c join orders o on o.customer_id = c.id", "42P01"),
        ("select * from customers join customers on true", "42712"),
        ("select * from customers c join lines l on c.name = l.order_id", "42883"),
        ("select * from customers c join orders o on o.customer_id = x.id", "42P01"),
    ] {
        let e = c.simple_query(sql).await.unwrap_err();
        assert_eq!(code(&e), want, "{sql}: {e}");
    }
}

/// The three strategies agree: over seeded random data (NULL and duplicate keys), each query is
/// run as an index nested loop (`ri` has an index on `k`), a hash join (`rp`, no index) and a
/// nested loop (the equality spelled as `<=` and `>=`), inner and left, with extra ON and WHERE
/// conditions; the sorted results must be equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategies_agree_on_random_data() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    };
    c.batch_execute(
        "create table l (id int primary key, k int, t text);
         create table ri (id int primary key, k int, t text);
         create table rp (id int primary key, k int, t text);
         create index ri_k on ri (k);",
    )
    .await
    .unwrap();
    for id in 0..30i32 {
        let key = |r: u64| if r == 0 { None } else { Some(r as i32 - 1) };
        let (lk, rk) = (key(next(6)), key(next(6)));
        let t = ["x", "y", "z"][next(3) as usize];
        c.execute("insert into l values ($1, $2, $3)", &[&id, &lk, &t]).await.unwrap();
        c.execute("insert into ri values ($1, $2, $3)", &[&id, &rk, &t]).await.unwrap();
        c.execute("insert into rp values ($1, $2, $3)", &[&id, &rk, &t]).await.unwrap();
    }
    let extras = ["", " and r.t <> 'x'", " and l.id > 3", " and r.id % 2 = 0", " and l.t = r.t"];
    let wheres = ["", " where l.id < 20", " where r.id is null", " where r.k > 1", " where l.k = 2 or r.k = 3"];
    for kind in ["join", "left join"] {
        for extra in extras {
            for w in wheres {
                let q =
                    |table: &str, on: &str| format!("select l.id, r.id, r.k from l {kind} {table} r on {on}{extra}{w}");
                let index = sorted(&c, &q("ri", "l.k = r.k")).await;
                let hash = sorted(&c, &q("rp", "r.k = l.k")).await;
                let nested = sorted(&c, &q("rp", "l.k <= r.k and l.k >= r.k")).await;
                assert_eq!(index, hash, "{kind}{extra}{w}");
                assert_eq!(index, nested, "{kind}{extra}{w}");
            }
        }
    }
}

/// The oracle for outer joins: the matches, the left rows that matched nothing when
/// `keep_left`, then the right rows no left row matched when `keep_right`.
fn oracle_outer(l: &[Tup], r: &[Tup], on: impl Fn(&Tup, &Tup) -> bool, keep_left: bool, keep_right: bool) -> Vec<Row> {
    let mut out = oracle(l, r, &on, keep_left);
    if keep_right {
        for b in r {
            if !l.iter().any(|a| on(a, b)) {
                out.push([vec![None, None, None], txt(b)].concat());
            }
        }
    }
    out.sort();
    out
}

/// RIGHT and FULL joins against the oracle: equalities (hash join, with or without an index
/// on the right), inequalities (nested loop), ON conditions naming one side (they never drop
/// a kept row), WHERE after the padding, an empty side, and a WHERE over relations a later
/// RIGHT JOIN pads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_and_full_joins_match_an_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let (c, l, r) = loaded(&srv).await;
    for round in ["no index", "index"] {
        if round == "index" {
            c.batch_execute("create index r_k on r (k)").await.unwrap();
        }
        let right = oracle_outer(&l, &r, eq, false, true);
        assert_eq!(sorted(&c, "select * from l right join r on l.k = r.k").await, right, "{round}");
        assert_eq!(sorted(&c, "select * from l right outer join r on r.k = l.k").await, right);
        let full = oracle_outer(&l, &r, eq, true, true);
        assert_eq!(sorted(&c, "select * from l full join r on l.k = r.k").await, full);
        assert_eq!(
            sorted(&c, "select * from l full outer join r on l.k < r.k").await,
            oracle_outer(&l, &r, lt, true, true)
        );
        assert_eq!(
            sorted(&c, "select * from l right join r on l.k < r.k").await,
            oracle_outer(&l, &r, lt, false, true)
        );
        // An ON condition naming the kept side alone narrows the matches, not the kept rows.
        let on_t = |a: &Tup, b: &Tup| eq(a, b) && b.2 != "x";
        assert_eq!(
            sorted(&c, "select * from l right join r on l.k = r.k and r.t <> 'x'").await,
            oracle_outer(&l, &r, on_t, false, true)
        );
        let on_l = |a: &Tup, b: &Tup| eq(a, b) && a.2 != "b";
        assert_eq!(
            sorted(&c, "select * from l full join r on l.k = r.k and l.t <> 'b'").await,
            oracle_outer(&l, &r, on_l, true, true)
        );
        // WHERE sees the padded rows.
        let padded: Vec<Row> = right.iter().filter(|row| row[0].is_none()).cloned().collect();
        assert_eq!(sorted(&c, "select * from l right join r on l.k = r.k where l.id is null").await, padded);
        let unmatched_left: Vec<Row> = full.iter().filter(|row| row[3].is_none()).cloned().collect();
        assert_eq!(sorted(&c, "select * from l full join r on l.k = r.k where r.id is null").await, unmatched_left);
        // An empty side.
        assert_eq!(sorted(&c, "select * from l right join e on l.k = e.k").await, Vec::<Row>::new());
        assert_eq!(sorted(&c, "select * from e full join r on e.k = r.k").await, oracle_outer(&[], &r, eq, true, true));
        // A WHERE over l, which the RIGHT JOIN after it pads, must not filter l early: `l.t is
        // null` holds only for the padded rows.
        let three =
            sorted(&c, "select r.id from l join e on l.k = e.k right join r on r.k = l.k where l.t is null").await;
        let mut every_r: Vec<Row> = r.iter().map(|t| vec![s(t.0)]).collect();
        every_r.sort();
        assert_eq!(three, every_r);
    }
    let e = c.simple_query("select * from l right join r").await.unwrap_err();
    assert_eq!(code(&e), "42601");
}

/// `JOIN ... USING` and NATURAL JOIN give what PostgreSQL 15.18 gives for the same tables
/// (the expected rows below are its output): one merged column first in `*`, an unqualified
/// reference meaning the merged column (R's for a RIGHT JOIN), the sides still reachable
/// qualified, and PostgreSQL's errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn using_and_natural_joins_as_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute(
        "create table ul (id int primary key, k int, t text); create table ur (id int primary key, k int, u text);
         insert into ul values (1, 1, 'a'), (2, 2, 'b'), (3, null, 'c');
         insert into ur values (10, 2, 'x'), (11, 5, 'y'), (1, 1, 'z');",
    )
    .await
    .unwrap();
    let text = |rows: Vec<Row>| {
        rows.iter()
            .map(|r| r.iter().map(|v| v.clone().unwrap_or_default()).collect::<Vec<_>>().join("|"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for (sql, want) in [
        ("select * from ul join ur using (k) order by 1, 2", "1|1|a|1|z 2|2|b|10|x"),
        ("select k, t, u from ul left join ur using (k) order by 1, 2", "1|a|z 2|b|x |c|"),
        ("select * from ul right join ur using (k) order by 1, 2", "1|1|a|1|z 2|2|b|10|x 5|||11|y"),
        ("select * from ul natural join ur order by 1", "1|1|a|z"),
        ("select id, ul.k, ur.k from ul join ur using (id) order by 1", "1|1|1"),
        ("select count(*) from ul natural join (select 1 as zzz) s", "3"),
    ] {
        assert_eq!(text(rows(&c, sql).await), want, "{sql}");
    }
    let fields = c.prepare("select * from ul join ur using (k)").await.unwrap();
    let names: Vec<&str> = fields.columns().iter().map(|f| f.name()).collect();
    assert_eq!(names, ["k", "id", "t", "id", "u"]);
    for (sql, code_want) in [
        ("select * from ul join ur using (nope)", "42703"),
        ("select * from ul join ur using (u)", "42703"),
        ("select * from ul join ur on true join ur r2 using (k)", "42702"),
        ("select * from ul full join ur using (k)", "0A000"),
    ] {
        let e = c.simple_query(sql).await.unwrap_err();
        assert_eq!(code(&e), code_want, "{sql}: {e}");
    }
}

/// An index nested loop bounded by ranges from the outer row (BenchmarkSQL's Stock-Level
/// shape: `ol_o_id >= d_next_o_id - 20 AND ol_o_id < d_next_o_id`) finds the same rows as the
/// oracle, for bounds of every orientation and strictness, a NULL bound and an empty range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_nested_loop_with_range_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute(
        "create table d (w int, id int, next int, primary key (w, id));
         insert into d values (1, 1, 30), (1, 2, 5), (2, 1, 50), (2, 2, null), (2, 3, 0);
         create table ol (w int, d int, o int, n int, item int, primary key (w, d, o, n));
         insert into ol select w, d, o, n, (w * 1000 + d * 100 + o * 7 + n) % 97
           from generate_series(1, 2) w, generate_series(1, 3) d, generate_series(1, 60) o, generate_series(1, 3) n;",
    )
    .await
    .unwrap();
    let next = |w: i64, d: i64| -> Option<i64> {
        match (w, d) {
            (1, 1) => Some(30),
            (1, 2) => Some(5),
            (2, 1) => Some(50),
            (2, 3) => Some(0),
            _ => None,
        }
    };
    let districts = [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3)];
    type Bound = fn(i64, i64) -> bool;
    let cases: [(&str, Bound); 4] = [
        ("ol.o >= d.next - 20 and ol.o < d.next", |o, nx| o >= nx - 20 && o < nx),
        ("d.next - 20 <= ol.o and d.next > ol.o", |o, nx| o >= nx - 20 && o < nx),
        ("ol.o > d.next and ol.o <= d.next + 3", |o, nx| o > nx && o <= nx + 3),
        ("ol.o < d.next", |o, nx| o < nx),
    ];
    for (cond, keep) in cases {
        let sql =
            format!("select d.w, d.id, ol.o, ol.n, ol.item from d join ol on ol.w = d.w and ol.d = d.id and {cond}");
        let got = sorted(&c, &sql).await;
        let mut want: Vec<Row> = Vec::new();
        for (w, d) in districts {
            let Some(nx) = next(w, d) else { continue };
            if d > 3 {
                continue;
            }
            for o in 1..=60 {
                if !keep(o, nx) {
                    continue;
                }
                for n in 1..=3 {
                    let item = (w * 1000 + d * 100 + o * 7 + n) % 97;
                    want.push(vec![s(w), s(d), s(o), s(n), s(item)]);
                }
            }
        }
        want.sort();
        assert_eq!(got, want, "{cond}");
    }
    // The shape Stock-Level sends, as an IN subquery with parameters.
    let r = c
        .query_one(
            "select count(*) from ol where w = $1 and item < $2 and o in (\
             select ol.o from d join ol on ol.w = d.w and ol.d = d.id and ol.o >= d.next - 20 and ol.o < d.next \
             where d.w = $3 and d.id = $4)",
            &[&1i32, &50i32, &1i32, &1i32],
        )
        .await
        .unwrap();
    let want = (1..=3i64)
        .flat_map(|d| (10..30i64).flat_map(move |o| (1..=3i64).map(move |n| (d, o, n))))
        .filter(|(d, o, n)| (1000 + d * 100 + o * 7 + n) % 97 < 50)
        .count() as i64;
    assert_eq!(r.get::<_, i64>(0), want);
}

/// Each side of a set operation, and each run of a correlated subquery, is a syntax tree of
/// its own for the statement's cache of uncorrelated subqueries: one side's rows are never
/// taken for another's (the cache is keyed by the tree's address, and a side's copy is freed
/// before the next side is built).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_operation_sides_do_not_share_their_subqueries_rows() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute("create table a (x int); insert into a values (1), (2), (3)").await.unwrap();
    let rows = |sql: &'static str| {
        let c = &c;
        async move {
            let mut v: Vec<i32> = c.query(sql, &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
            v.sort();
            v
        }
    };
    assert_eq!(
        rows(
            "select x from a where x in (select 1) union all select x from a where x in (select 2) \
              union all select x from a where x in (select 3)"
        )
        .await,
        vec![1, 2, 3]
    );
    assert_eq!(
        rows(
            "select x from a o where x = (select max(x) from a where x <= o.x and x in (select 2)) \
              union all select x from a where x in (select 3)"
        )
        .await,
        vec![2, 3]
    );
}
