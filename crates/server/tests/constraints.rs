//! CHECK and FOREIGN KEY constraints over the wire: every error with PostgreSQL 15's
//! SQLSTATE, message and DETAIL (each checked by hand against PostgreSQL 15.18), the
//! referential actions, validation on ALTER TABLE ADD CONSTRAINT, DROP CONSTRAINT, DROP
//! TABLE and TRUNCATE of a referenced table, persistence across a restart, psql's `\d`
//! sections, and two sessions racing a child insert against its parent's delete.
//!
//! Every wait a test expects to end is bounded on the client side, so a hang fails the test
//! instead of stalling it; blocking is seen in `pg_locks`, never timed.

mod common;

use common::{bounded, connect, rows, until_waiting, TestServer};
use tokio_postgres::Client;

/// The error a statement fails with: (SQLSTATE, message, DETAIL).
async fn fails(c: &Client, sql: &str) -> (String, String, String) {
    let e = bounded(sql, c.simple_query(sql)).await.expect_err(sql);
    let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}"));
    (db.code().code().to_string(), db.message().to_string(), db.detail().unwrap_or_default().to_string())
}

async fn ok(c: &Client, sql: &str) {
    bounded(sql, c.batch_execute(sql)).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn one(c: &Client, sql: &str) -> String {
    rows(c, sql)
        .await
        .into_iter()
        .map(|r| r.into_iter().map(|v| v.unwrap_or_else(|| "null".into())).collect::<Vec<_>>().join("|"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn e(code: &str, message: &str, detail: &str) -> (String, String, String) {
    (code.into(), message.into(), detail.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_constraints_are_enforced_on_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    ok(&c, "create table c (id int primary key, qty int check (qty > 0), price int constraint price_pos check (price >= 0), \
            check (qty * price < 1000), check (id <> 99), check (qty > -5))").await;
    // PostgreSQL's default names: one column named, or none; numbered on collision.
    assert_eq!(
        one(&c, "select conname from pg_constraint where contype = 'c' order by 1").await,
        "c_check\nc_id_check\nc_qty_check\nc_qty_check1\nprice_pos"
    );
    let fail = |row: &str| format!("Failing row contains ({row}).");
    assert_eq!(
        fails(&c, "insert into c values (1, 0, 1)").await,
        e("23514", "new row for relation \"c\" violates check constraint \"c_qty_check\"", &fail("1, 0, 1"))
    );
    // NULL passes.
    ok(&c, "insert into c values (1, null, null), (2, 5, 5)").await;
    assert_eq!(fails(&c, "insert into c select 3, 1, -1").await.2, fail("3, 1, -1"));
    assert_eq!(
        fails(&c, "update c set price = 500 where id = 2").await,
        e("23514", "new row for relation \"c\" violates check constraint \"c_check\"", &fail("2, 5, 500"))
    );
    assert_eq!(
        fails(&c, "insert into c values (99, 1, 1) on conflict (id) do nothing").await.1,
        "new row for relation \"c\" violates check constraint \"c_id_check\""
    );
    assert_eq!(
        fails(&c, "insert into c values (2, 1, 1) on conflict (id) do update set qty = -1").await.2,
        fail("2, -1, 5")
    );
    let e2 = c.copy_in::<_, bytes::Bytes>("copy c from stdin").await;
    let sink = e2.unwrap();
    futures::pin_mut!(sink);
    use futures::SinkExt;
    sink.send(bytes::Bytes::from_static(b"7\t1\t1\n8\t0\t1\n")).await.unwrap();
    let err = sink.finish().await.expect_err("COPY must fail");
    assert_eq!(err.as_db_error().unwrap().code().code(), "23514");
    assert_eq!(one(&c, "select count(*) from c").await, "2");
    // ADD CONSTRAINT validates the rows there; DROP CONSTRAINT [IF EXISTS].
    assert_eq!(
        fails(&c, "alter table c add constraint big check (qty > 10)").await,
        e("23514", "check constraint \"big\" of relation \"c\" is violated by some row", "")
    );
    assert_eq!(
        fails(&c, "alter table c add check (price > 10)").await.1,
        "check constraint \"c_price_check\" of relation \"c\" is violated by some row"
    );
    ok(&c, "alter table c add check (price < 10)").await;
    assert_eq!(
        fails(&c, "insert into c values (4, 1, 10)").await.1,
        "new row for relation \"c\" violates check constraint \"c_price_check\""
    );
    ok(&c, "alter table c drop constraint c_price_check").await;
    ok(&c, "insert into c values (4, 1, 10)").await;
    assert_eq!(
        fails(&c, "alter table c drop constraint nope").await,
        e("42704", "constraint \"nope\" of relation \"c\" does not exist", "")
    );
    ok(&c, "alter table c drop constraint if exists nope").await;
    assert_eq!(fails(&c, "create table bad (a int check (a > (select 1)))").await.0, "0A000");
    assert_eq!(fails(&c, "create table bad (a int check (b > 0))").await.0, "42703");
    assert_eq!(fails(&c, "select * from bad").await.0, "42P01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_key_errors_are_postgresqls() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    ok(&c, "create table p (id int primary key, code text unique); create table c (id int primary key, p_id int references p)").await;
    assert_eq!(
        fails(&c, "insert into c values (1, 7)").await,
        e(
            "23503",
            "insert or update on table \"c\" violates foreign key constraint \"c_p_id_fkey\"",
            "Key (p_id)=(7) is not present in table \"p\"."
        )
    );
    ok(&c, "insert into p values (1, 'a'); insert into c values (1, 1), (2, null)").await;
    let still = e(
        "23503",
        "update or delete on table \"p\" violates foreign key constraint \"c_p_id_fkey\" on table \"c\"",
        "Key (id)=(1) is still referenced from table \"c\".",
    );
    assert_eq!(fails(&c, "delete from p where id = 1").await, still);
    assert_eq!(fails(&c, "update p set id = 2").await, still);
    assert_eq!(
        fails(&c, "update c set p_id = 3 where id = 1").await.2,
        "Key (p_id)=(3) is not present in table \"p\"."
    );
    assert_eq!(
        fails(&c, "create table d (x int references p(code))").await,
        e(
            "42804",
            "foreign key constraint \"d_x_fkey\" cannot be implemented",
            "Key columns \"x\" and \"code\" are of incompatible types: integer and text."
        )
    );
    assert_eq!(
        fails(&c, "create table d (a int, b text, foreign key (a, b) references p(id, code))").await,
        e("42830", "there is no unique constraint matching given keys for referenced table \"p\"", "")
    );
    assert_eq!(fails(&c, "select * from d").await.0, "42P01", "a refused CREATE TABLE leaves nothing");
    assert_eq!(fails(&c, "create table d (x int references p deferrable initially deferred)").await.0, "0A000");
    assert_eq!(
        fails(&c, "alter table p drop constraint p_pkey").await,
        e(
            "2BP01",
            "cannot drop constraint p_pkey on table p because other objects depend on it",
            "constraint c_p_id_fkey on table c depends on index p_pkey"
        )
    );
    assert_eq!(
        fails(&c, "drop table p").await,
        e(
            "2BP01",
            "cannot drop table p because other objects depend on it",
            "constraint c_p_id_fkey on table c depends on table p"
        )
    );
    assert_eq!(
        fails(&c, "truncate p").await,
        e("0A000", "cannot truncate a table referenced in a foreign key constraint", "Table \"c\" references \"p\".")
    );
    ok(&c, "truncate p, c").await;
    ok(&c, "insert into p values (1, 'a'); insert into c values (1, 1)").await;
    ok(&c, "truncate p cascade").await;
    assert_eq!(one(&c, "select count(*) from c").await, "0");
    // ADD FOREIGN KEY validates the rows there.
    ok(&c, "create table e (x int); insert into e values (1), (42)").await;
    ok(&c, "insert into p values (1, 'a')").await;
    assert_eq!(
        fails(&c, "alter table e add foreign key (x) references p").await,
        e(
            "23503",
            "insert or update on table \"e\" violates foreign key constraint \"e_x_fkey\"",
            "Key (x)=(42) is not present in table \"p\"."
        )
    );
    ok(&c, "insert into p values (42, 'b'); alter table e add constraint e_p foreign key (x) references p").await;
    assert_eq!(
        fails(&c, "insert into e values (5)").await.1,
        "insert or update on table \"e\" violates foreign key constraint \"e_p\""
    );
    ok(&c, "alter table e drop constraint e_p; insert into e values (5)").await;
    // DROP ... CASCADE drops the constraint, not the referencing table.
    ok(&c, "drop table p cascade; insert into c values (9, 9)").await;
    assert_eq!(one(&c, "select count(*) from pg_constraint where contype = 'f'").await, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn referential_actions() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    ok(&c, "create table pa (id int primary key, k int unique); \
            create table ch (id int primary key, a int references pa on delete cascade on update cascade, \
                             b int references pa(k) on delete set null, c int default 5 references pa on delete set default, \
                             r int references pa on delete restrict); \
            create index ch_a on ch(a); \
            insert into pa values (1, 10), (2, 20), (5, 50), (6, 60); \
            insert into ch values (1, 1, 10, 2, null), (2, 1, 20, 2, null), (3, 2, 10, 1, 6)").await;
    ok(&c, "delete from pa where id = 2").await;
    assert_eq!(one(&c, "select * from ch order by id").await, "1|1|10|5|null\n2|1|null|5|null");
    ok(&c, "update pa set id = 7 where id = 1").await;
    assert_eq!(one(&c, "select id, a from ch order by id").await, "1|7\n2|7");
    ok(&c, "delete from pa where k = 10").await;
    assert_eq!(one(&c, "select count(*) from ch").await, "0");
    ok(&c, "insert into pa values (1, 10); insert into ch values (4, 1, null, null, 6)").await;
    assert_eq!(
        fails(&c, "delete from pa where id = 6").await.1,
        "update or delete on table \"pa\" violates foreign key constraint \"ch_r_fkey\" on table \"ch\""
    );
    // A SET NULL that breaks NOT NULL or a CHECK fails the statement.
    ok(&c, "create table nn (id int primary key, b int not null references pa(k) on delete set null); insert into nn values (1, 10)").await;
    assert_eq!(fails(&c, "delete from pa where k = 10").await.0, "23502");
    // A self-referencing table checks at the end of the statement, as PostgreSQL does.
    ok(
        &c,
        "create table tree (id int primary key, parent int references tree on delete cascade); \
            insert into tree values (2, 1), (1, null), (3, 2)",
    )
    .await;
    ok(&c, "delete from tree where id = 1").await;
    assert_eq!(one(&c, "select count(*) from tree").await, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constraints_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    ok(&c, "create table p (id int primary key); create table c (id int, p int references p on delete cascade, check (id > 0))").await;
    // A renamed column is renamed in the CHECK's text (RENAME COLUMN is another change's:
    // without it, the text keeps `id`).
    let renamed = c.batch_execute("alter table c rename column id to n").await.is_ok();
    let column = if renamed { "n" } else { "id" };
    drop(c);
    s.stop();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    assert_eq!(fails(&c, "insert into c values (1, 1)").await.0, "23503");
    assert_eq!(fails(&c, "insert into c values (0, null)").await.2, "Failing row contains (0, null).");
    assert_eq!(
        one(&c, "select conname, pg_get_constraintdef(oid) from pg_constraint where contype = 'c'").await,
        format!("c_id_check|CHECK ({column} > 0)")
    );
    ok(&c, "insert into p values (1); insert into c values (1, 1); delete from p").await;
    assert_eq!(one(&c, "select count(*) from c").await, "0");
    // A foreign key whose column positions lie past its tables' columns (a damaged file that
    // still parses) is left out, not read past a row's end.
    drop(c);
    s.stop();
    let path = dir.path().join("server_constraints");
    let text = std::fs::read_to_string(&path).unwrap();
    let damaged: Vec<String> = text
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split('\t').collect();
            if f[0] == "fkey" {
                (f[4], f[6]) = ("9", "9");
            }
            f.join("\t")
        })
        .collect();
    assert!(damaged.iter().any(|l| l.starts_with("fkey\t")), "{text}");
    std::fs::write(&path, damaged.join("\n") + "\n").unwrap();
    let s = TestServer::start(dir.path());
    let c = connect(&s).await;
    ok(&c, "insert into c values (2, 7); delete from p").await;
    assert_eq!(one(&c, "select count(*) from c").await, "1");
    // A damaged file stops the server with the file and line named.
    drop(c);
    s.stop();
    std::fs::write(dir.path().join("server_constraints"), "fkey\t1\n").unwrap();
    let mut opts = TestServer::options(dir.path());
    opts.trust = true;
    let err = TestServer::start_with_options(opts).err().expect("must not start");
    assert!(err.contains("server_constraints line 1"), "{err}");
}

/// psql's `\d` for tables with every kind of constraint, as PostgreSQL 15.18 prints it.
#[test]
fn psql_describes_constraints_as_postgresql_does() {
    let Some(psql) = common::require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    common::psql_value(
        &psql,
        &s,
        "create table p (id int primary key, code text unique); \
         create table c (id int primary key, p_id int references p on delete cascade, qty int check (qty > 0), \
                         constraint small check (qty < 100 and id > 0), code text, check (code <> 'x'), \
                         foreign key (code) references p(code))",
    );
    let describe = |cmd: &str| {
        let o = common::run(&psql, &["-X", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-c", cmd]);
        let (out, err) = common::text(&o);
        assert!(o.status.success() && err.is_empty(), "psql -c {cmd:?}: {err}");
        out
    };
    let want = r#"                 Table "public.c"
 Column |  Type   | Collation | Nullable | Default 
--------+---------+-----------+----------+---------
 id     | integer |           | not null | 
 p_id   | integer |           |          | 
 qty    | integer |           |          | 
 code   | text    |           |          | 
Indexes:
    "c_pkey" PRIMARY KEY, btree (id)
Check constraints:
    "c_code_check" CHECK (code <> 'x'::text)
    "c_qty_check" CHECK (qty > 0)
    "small" CHECK (qty < 100 AND id > 0)
Foreign-key constraints:
    "c_code_fkey" FOREIGN KEY (code) REFERENCES p(code)
    "c_p_id_fkey" FOREIGN KEY (p_id) REFERENCES p(id) ON DELETE CASCADE

"#;
    assert_eq!(describe("\\d c"), want);
    let want = r#"                 Table "public.p"
 Column |  Type   | Collation | Nullable | Default 
--------+---------+-----------+----------+---------
 id     | integer |           | not null | 
 code   | text    |           |          | 
Indexes:
    "p_pkey" PRIMARY KEY, btree (id)
    "p_code_key" UNIQUE CONSTRAINT, btree (code)
Referenced by:
    TABLE "c" CONSTRAINT "c_code_fkey" FOREIGN KEY (code) REFERENCES p(code)
    TABLE "c" CONSTRAINT "c_p_id_fkey" FOREIGN KEY (p_id) REFERENCES p(id) ON DELETE CASCADE

"#;
    assert_eq!(describe("\\d p"), want);
}

/// A child insert racing its parent's delete, both orders: the second waits for the first
/// (the child's lock on the parent row, or the delete's), then fails; no orphan either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_insert_and_its_parents_delete_never_leave_an_orphan() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start(dir.path());
    let a = connect(&s).await;
    let b = connect(&s).await;
    let watch = connect(&s).await;
    ok(
        &a,
        "create table p (id int primary key); create table c (id int primary key, p_id int references p); \
            insert into p values (1), (2)",
    )
    .await;
    // The insert first: the delete waits for its lock on p(1), then sees the child.
    ok(&a, "begin; insert into c values (1, 1)").await;
    let w = tokio::spawn(async move {
        let r = fails(&b, "delete from p where id = 1").await;
        (b, r)
    });
    until_waiting(&watch, 1).await;
    ok(&a, "commit").await;
    let (b, r) = bounded("the delete", w).await.unwrap();
    assert_eq!(r.2, "Key (id)=(1) is still referenced from table \"c\".");
    // The delete first: the insert waits for the deleter, then finds its parent gone.
    ok(&b, "begin; delete from p where id = 2").await;
    let w = tokio::spawn(async move {
        let r = fails(&a, "insert into c values (2, 2)").await;
        (a, r)
    });
    until_waiting(&watch, 1).await;
    ok(&b, "commit").await;
    let (a, r) = bounded("the insert", w).await.unwrap();
    assert_eq!(r.2, "Key (p_id)=(2) is not present in table \"p\".");
    assert_eq!(one(&a, "select count(*) from c where p_id not in (select id from p)").await, "0");
    assert_eq!(one(&a, "select id, p_id from c").await, "1|1");
}
