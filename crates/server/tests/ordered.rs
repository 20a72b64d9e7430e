//! ORDER BY and LIMIT answered by an index scan (`crate::ordered`): every query is checked
//! against rows sorted here from the same data (NULLs last ascending, first descending, as
//! PostgreSQL), forward and backward, with a WHERE on a prefix of the index, a range on the
//! next column, OFFSET, a condition the index cannot answer, output names and positions, and
//! after deletes and key updates left dead entries behind. That the scan stops at the LIMIT
//! (and reads backward for DESC) is seen in `pg_stat_database.tup_returned`, which counts every
//! index entry a scan reads: a `LIMIT 3` reads 3 of the range's 28 entries, where sorting after
//! the scan read all 28. A scan stopped at the LIMIT whose recheck drops a row is read again
//! whole; text keys are sorted, not read in the index's byte order.

mod common;

use common::{connect, rows, Row, TestServer};
use tokio_postgres::Client;

/// One row of `t`: (id, w, d, o, name).
#[derive(Clone, Debug)]
struct Tup {
    id: i32,
    w: i32,
    d: Option<i32>,
    o: Option<i32>,
    name: String,
}

/// 240 rows over two `w`, four `d` (and some NULL), thirty `o` values per (w, d) with
/// duplicates and NULLs.
fn data() -> Vec<Tup> {
    (0..240)
        .map(|id| Tup {
            id,
            w: id % 2 + 1,
            d: (id % 17 != 0).then_some((id / 2) % 4 + 1),
            o: (id % 11 != 0).then_some((id * 37) % 25),
            name: format!("n{}", id % 7),
        })
        .collect()
}

/// The index entries scans have read so far (and sequential scans' rows).
async fn returned(c: &Client) -> i64 {
    c.query_one("select tup_returned from pg_stat_database where datname = 'postgres'", &[]).await.unwrap().get(0)
}

/// `sql`'s rows and how many entries and rows its scan read.
async fn run(c: &Client, sql: &str) -> (Vec<Row>, i64) {
    let before = returned(c).await;
    let r = rows(c, sql).await;
    (r, returned(c).await - before)
}

fn txt(v: Option<i32>) -> Option<String> {
    v.map(|x| x.to_string())
}

/// Ascending with NULLs last, as the index and PostgreSQL's default order.
fn asc(a: Option<i32>, b: Option<i32>) -> std::cmp::Ordering {
    a.is_none().cmp(&b.is_none()).then(a.cmp(&b))
}

/// The oracle: the rows `keep` keeps, sorted by (d, o, id) ascending or all descending, cut
/// by OFFSET and LIMIT, projected by `cols`.
fn oracle(
    data: &[Tup],
    keep: impl Fn(&Tup) -> bool,
    desc: bool,
    offset: usize,
    limit: usize,
    cols: impl Fn(&Tup) -> Row,
) -> Vec<Row> {
    let mut v: Vec<&Tup> = data.iter().filter(|t| keep(t)).collect();
    v.sort_by(|a, b| asc(a.d, b.d).then(asc(a.o, b.o)).then(a.id.cmp(&b.id)));
    if desc {
        v.reverse();
    }
    v.into_iter().skip(offset).take(limit).map(cols).collect()
}

fn id_o(t: &Tup) -> Row {
    vec![Some(t.id.to_string()), txt(t.o)]
}

async fn loaded(srv: &TestServer) -> (Client, Vec<Tup>) {
    let c = connect(srv).await;
    c.batch_execute(
        "create table t (id int primary key, w int not null, d int, o int, name text);
         create index t_wdo on t (w, d, o, id)",
    )
    .await
    .unwrap();
    let data = data();
    for t in &data {
        c.execute("insert into t values ($1, $2, $3, $4, $5)", &[&t.id, &t.w, &t.d, &t.o, &t.name]).await.unwrap();
    }
    (c, data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_by_limit_from_the_index_matches_a_sort() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let (c, data) = loaded(&srv).await;
    let w1d2 = |t: &Tup| t.w == 1 && t.d == Some(2);
    let range = data.iter().filter(|t| w1d2(t)).count() as i64;
    assert_eq!(range, 28);

    // Forward: the first three of the range's 28 entries, and no more read.
    let (r, read) = run(&c, "select id, o from t where w = 1 and d = 2 order by o, id limit 3").await;
    assert_eq!(r, oracle(&data, w1d2, false, 0, 3, id_o));
    assert!(read <= 3, "a LIMIT 3 read {read} entries");

    // Backward: NULLs first, as DESC puts them; still three entries.
    let (r, read) = run(&c, "select id, o from t where w = 1 and d = 2 order by o desc, id desc limit 3").await;
    assert_eq!(r, oracle(&data, w1d2, true, 0, 3, id_o));
    assert!(r[0][1].is_none(), "{r:?}");
    assert!(read <= 3, "a backward LIMIT 3 read {read} entries");

    // Pinned columns may appear anywhere in ORDER BY, in either direction.
    let (r, read) =
        run(&c, "select id, o from t where w = 1 and d = 2 order by w, d desc, o desc, id desc limit 4").await;
    assert_eq!(r, oracle(&data, w1d2, true, 0, 4, id_o));
    assert!(read <= 4, "{read}");

    // The whole range, no sort: every row in order.
    let r = rows(&c, "select id, o from t where w = 1 and d = 2 order by o desc, id desc").await;
    assert_eq!(r, oracle(&data, w1d2, true, 0, usize::MAX, id_o));

    // A prefix of one column: d varies, NULL d last, then first backward.
    let w2 = |t: &Tup| t.w == 2;
    let wdo = |t: &Tup| vec![Some(t.w.to_string()), txt(t.d), txt(t.o)];
    let (r, read) = run(&c, "select w, d, o from t where w = 2 order by d, o, id limit 40").await;
    assert_eq!(r, oracle(&data, w2, false, 0, 40, wdo));
    assert!(read <= 40, "{read}");
    let r = rows(&c, "select w, d, o from t where w = 2 order by d desc, o desc, id desc limit 40").await;
    assert_eq!(r, oracle(&data, w2, true, 0, 40, wdo));

    // A range on the next column, with OFFSET.
    let r = rows(&c, "select id, o from t where w = 1 and d = 2 and o >= 10 order by o, id limit 3 offset 2").await;
    assert_eq!(r, oracle(&data, |t| w1d2(t) && t.o.is_some_and(|o| o >= 10), false, 2, 3, id_o));
    let r = rows(&c, "select id, o from t where w = 1 and d = 2 and o < 10 order by o desc, id desc limit 3").await;
    assert_eq!(r, oracle(&data, |t| w1d2(t) && t.o.is_some_and(|o| o < 10), true, 0, 3, id_o));

    // A condition the index cannot answer: rows still come in index order, but the scan reads
    // the range whole (a limited scan could stop short of the rows that pass).
    let (r, read) =
        run(&c, "select id, o from t where w = 1 and d = 2 and name <> 'n1' order by o desc, id desc limit 3").await;
    assert_eq!(r, oracle(&data, |t| w1d2(t) && t.name != "n1", true, 0, 3, id_o));
    assert!(read >= range, "{read}");

    // Output positions and names.
    let r = rows(&c, "select id, o from t where w = 1 and d = 2 order by 2 desc, 1 desc limit 5").await;
    assert_eq!(r, oracle(&data, w1d2, true, 0, 5, id_o));
    let r = rows(&c, "select id as i, o as k from t where w = 1 and d = 2 order by k, i limit 5").await;
    assert_eq!(r, oracle(&data, w1d2, false, 0, 5, id_o));

    // Orders the index does not give are sorted: NULLS FIRST ascending, mixed directions, a
    // column after a varying one.
    let r = rows(&c, "select id, o from t where w = 1 and d = 2 order by o nulls first, id limit 3").await;
    let mut want: Vec<&Tup> = data.iter().filter(|t| w1d2(t)).collect();
    want.sort_by(|a, b| a.o.cmp(&b.o).then(a.id.cmp(&b.id)));
    assert_eq!(r, want.iter().take(3).map(|t| id_o(t)).collect::<Vec<_>>());
    let r = rows(&c, "select id, o from t where w = 1 and d = 2 order by o, id desc limit 3").await;
    want.sort_by(|a, b| asc(a.o, b.o).then(b.id.cmp(&a.id)));
    assert_eq!(r, want.iter().take(3).map(|t| id_o(t)).collect::<Vec<_>>());
    let r = rows(&c, "select id, o from t where w = 1 order by o, id limit 3").await;
    let mut want: Vec<&Tup> = data.iter().filter(|t| t.w == 1).collect();
    want.sort_by(|a, b| asc(a.o, b.o).then(a.id.cmp(&b.id)));
    assert_eq!(r, want.iter().take(3).map(|t| id_o(t)).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_without_order_by_stops_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let (c, data) = loaded(&srv).await;

    let (r, read) = run(&c, "select id, w, d from t where w = 1 and d = 3 limit 4").await;
    assert_eq!(r.len(), 4);
    for row in &r {
        let id: i32 = row[0].as_deref().unwrap().parse().unwrap();
        let t = &data[id as usize];
        assert_eq!((t.w, t.d), (1, Some(3)), "{row:?}");
    }
    assert!(read <= 4, "{read}");

    // A sequential scan without WHERE stops too.
    let (r, read) = run(&c, "select id from t limit 5").await;
    assert_eq!(r.len(), 5);
    assert!(read < 240, "{read}");

    // Aggregates, GROUP BY and DISTINCT see every row.
    let r = rows(&c, "select count(*) from t where w = 1 and d = 3 limit 1").await;
    let n = data.iter().filter(|t| t.w == 1 && t.d == Some(3)).count();
    assert_eq!(r, vec![vec![Some(n.to_string())]]);
    let r = rows(&c, "select distinct o from t where w = 1 and d = 3 order by o limit 3").await;
    let mut os: Vec<Option<i32>> = data.iter().filter(|t| t.w == 1 && t.d == Some(3)).map(|t| t.o).collect();
    os.sort_by(|a, b| asc(*a, *b));
    os.dedup();
    assert_eq!(r, os.iter().take(3).map(|o| vec![txt(*o)]).collect::<Vec<_>>());
    let r = rows(&c, "select o, count(*) from t where w = 1 and d = 3 group by o order by o limit 1").await;
    let first = os[0];
    let cnt = data.iter().filter(|t| t.w == 1 && t.d == Some(3) && t.o == first).count();
    assert_eq!(r, vec![vec![txt(first), Some(cnt.to_string())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_scans_see_what_their_snapshot_sees() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let (c, mut data) = loaded(&srv).await;
    let w1d2 = |t: &Tup| t.w == 1 && t.d == Some(2);
    let sql_first = "select id, o from t where w = 1 and d = 2 order by o, id limit 2";
    let sql_last = "select id, o from t where w = 1 and d = 2 order by o desc, id desc limit 2";

    // A REPEATABLE READ reader takes its snapshot before the changes below.
    let reader = connect(&srv).await;
    reader.batch_execute("begin isolation level repeatable read").await.unwrap();
    let old_first = rows(&reader, sql_first).await;
    let old_last = rows(&reader, sql_last).await;

    // Delete the range's first rows and move a NULL o to the smallest key: dead entries at
    // both ends of the range that the scans must step over.
    let firsts: Vec<i32> = oracle(&data, w1d2, false, 0, 3, |t| vec![Some(t.id.to_string())])
        .iter()
        .map(|r| r[0].as_deref().unwrap().parse().unwrap())
        .collect();
    for id in &firsts {
        c.execute("delete from t where id = $1", &[id]).await.unwrap();
    }
    data.retain(|t| !firsts.contains(&t.id));
    let moved = data.iter().find(|t| w1d2(t) && t.o.is_none()).unwrap().id;
    c.execute("update t set o = -1 where id = $1", &[&moved]).await.unwrap();
    data.iter_mut().find(|t| t.id == moved).unwrap().o = Some(-1);

    // The scans step over the dead versions' entries (the reader still needs them) and stop
    // after two visible rows: a few entries read, not the range's 28.
    let (r, read) = run(&c, sql_first).await;
    assert_eq!(r, oracle(&data, w1d2, false, 0, 2, id_o));
    assert!(read < 10, "{read}");
    let (r, read) = run(&c, sql_last).await;
    assert_eq!(r, oracle(&data, w1d2, true, 0, 2, id_o));
    assert!(read < 10, "{read}");
    // The reader still sees the rows as they were.
    assert_eq!(rows(&reader, sql_first).await, old_first);
    assert_eq!(rows(&reader, sql_last).await, old_last);
    reader.batch_execute("commit").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rounded_bound_is_not_taken_for_an_exact_one() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute(
        "create table nm (id int primary key, n numeric(6,2)); create index nm_n on nm (n);
         insert into nm values (1, 1.00), (2, 1.01), (3, 1.01), (4, 1.02)",
    )
    .await
    .unwrap();
    // The bound 1.005 becomes the column's 1.01, so the index finds the 1.01 rows, which the
    // recheck (1.01 = 1.005) drops. A rounded key answers no conjunct by itself, so the scan
    // does not stop early: it reads the two 1.01 entries once, and the answer is PostgreSQL's,
    // no row.
    let (r, read) = run(&c, "select id from nm where n = 1.005 order by n limit 1").await;
    assert!(r.is_empty(), "{r:?}");
    assert_eq!(read, 2);
    // The same for a range: the rounded bound is taken inclusive and the whole range read.
    let (r, read) = run(&c, "select n from nm where n >= 1.005 order by n limit 1").await;
    assert_eq!(r, vec![vec![Some("1.01".to_string())]]);
    assert_eq!(read, 3);
    // An exact bound stops the scan after its one row.
    let (r, read) = run(&c, "select n from nm where n >= 1.01 order by n limit 1").await;
    assert_eq!(r, vec![vec![Some("1.01".to_string())]]);
    assert_eq!(read, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_keys_are_sorted_not_read_in_byte_order() {
    let dir = tempfile::tempdir().unwrap();
    let srv = TestServer::start(dir.path());
    let c = connect(&srv).await;
    c.batch_execute("create table s (id int primary key, k text); create index s_k on s (k)").await.unwrap();
    for (id, k) in [(1, "b"), (2, "a "), (3, "a\t"), (4, "a")] {
        c.execute("insert into s values ($1, $2)", &[&id, &k]).await.unwrap();
    }
    // The index holds 'a' < E'a\t' < 'a ' (bytes); the server's text comparison ignores
    // trailing blanks, so the sort puts 'a ' beside 'a' (in either order, they are equal),
    // before E'a\t'.
    let ids: Vec<String> = rows(&c, "select id from s where k >= '' order by k")
        .await
        .into_iter()
        .map(|r| r[0].clone().unwrap())
        .collect();
    let mut ties = ids[..2].to_vec();
    ties.sort();
    assert_eq!((ties, &ids[2..]), (vec!["2".to_string(), "4".to_string()], &["3".to_string(), "1".to_string()][..]));
}

/// A bound the column cannot hold exactly is rounded into the index key (1.005 into
/// numeric(6,2) is 1.01): the scan must not lose the rows equal to the rounded key, nor take
/// it for an exact match (DELETE by a unique key skips the recheck only when it is exact).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rounded_bound_neither_loses_nor_invents_rows() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    c.batch_execute(
        "create table m (id int primary key, n numeric(6,2) not null); \
         create index m_n on m (n); \
         insert into m values (1, 1.00), (2, 1.01), (3, 1.01), (4, 1.02); \
         create table u (n numeric(6,2) primary key); \
         insert into u values (1.00), (1.01), (1.02)",
    )
    .await
    .unwrap();
    let count = |sql: &'static str| {
        let c = &c;
        async move { c.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    for (sql, want) in [
        ("select count(*) from m where n > 1.005", 3),
        ("select count(*) from m where n >= 1.005", 3),
        ("select count(*) from m where n < 1.015", 3),
        ("select count(*) from m where n <= 1.015", 3),
        ("select count(*) from m where n > 1.004 and n < 1.016", 2),
        ("select count(*) from m where n = 1.005", 0),
        ("select count(*) from m where n = 1.01", 2),
        ("select count(*) from u where n > 1.005", 2),
        ("select count(*) from u where n = 1.005", 0),
    ] {
        assert_eq!(count(sql).await, want, "{sql}");
    }
    let ids: Vec<i32> = c
        .query("select id from m where n > 1.005 order by n limit 2", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.iter().all(|&i| i == 2 || i == 3), "{ids:?}");
    assert_eq!(c.execute("delete from u where n = 1.005", &[]).await.unwrap(), 0);
    assert_eq!(c.execute("update u set n = n where n = 1.005", &[]).await.unwrap(), 0);
    assert_eq!(c.execute("delete from m where n < 1.005", &[]).await.unwrap(), 1);
    assert_eq!(count("select count(*) from u").await, 3);
}
