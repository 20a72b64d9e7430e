//! Roles and passwords, as a PostgreSQL 15 user meets them (issue 20's security items):
//!
//! 1. the password given at initialization is `postgres`'s, stored: a later start needs no
//!    flag, a wrong password gets FATAL 28P01;
//! 2. CREATE ROLE ... LOGIN PASSWORD, then a login as the new role, whose `current_user` it
//!    is; ALTER ROLE with a verifier PostgreSQL 15 computed, then a login with its password;
//! 3. NOLOGIN (28000), no password or no such role (28P01, the same words), a non-superuser's
//!    CREATE ROLE (42501), DROP ROLE and its refusals, `pg_roles` as psql's `\du` reads it;
//! 4. `superuser_reserved_connections`: a non-superuser refused with 53300 while a superuser
//!    still gets in, then `max_connections` for everyone;
//! 5. a server with neither a password nor trust does not start, nor one whose reserved
//!    slots are all of them;
//! 6. psql 15 logs in with PGPASSWORD and lists the roles with `\du`.
//!
//! Every test here fails on the server before roles (one password for everyone, one fake
//! role, trust by default).

mod common;

use std::path::Path;

use common::{code, TestServer};
use tokio_postgres::{Client, NoTls};

/// What PostgreSQL 15 stored for `CREATE ROLE alice LOGIN PASSWORD 'alicepw'` (from
/// `pg_authid.rolpassword`; produced with PostgreSQL 15's `initdb` and `postgres` here).
const POSTGRES_15_VERIFIER_OF_ALICEPW: &str = "SCRAM-SHA-256$4096:DQT6IQxZ2yd8KNaRMlwvCQ==$UojsE4JfYhMWMikj7hiWQGkc3TmE7BMVk/i1ppC2kgc=:eZrmYjfanOCPfm7rtnskFbYtDGxHsZ5n3I4a6cN/o08=";

fn conn_string(s: &TestServer, user: &str, password: &str) -> String {
    format!("host=127.0.0.1 port={} user={user} password={password} dbname=postgres", s.port())
}

async fn login(s: &TestServer, user: &str, password: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(&conn_string(s, user, password), NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

/// The SQLSTATE and message of a refused login.
async fn refused(s: &TestServer, user: &str, password: &str) -> (String, String) {
    match login(s, user, password).await {
        Ok(_) => panic!("{user} logged in with {password:?}"),
        Err(e) => {
            let db = e.as_db_error().unwrap_or_else(|| panic!("no server error: {e}"));
            assert_eq!(db.severity(), "FATAL");
            (code(&e), db.message().to_string())
        }
    }
}

fn with_password(dir: &Path, password: Option<&str>) -> Result<TestServer, String> {
    let mut opts = TestServer::options(dir);
    opts.password = password.map(str::to_string);
    TestServer::start_with_options(opts)
}

async fn one_text(c: &Client, sql: &str) -> String {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_at_initialization_is_stored_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = with_password(&data, Some("s3cret")).unwrap();
    let c = login(&s, "postgres", "s3cret").await.expect("the stored password logs in");
    assert_eq!(one_text(&c, "select current_user").await, "postgres");
    let (code, message) = refused(&s, "postgres", "wrong").await;
    assert_eq!((code.as_str(), message.as_str()), ("28P01", "password authentication failed for user \"postgres\""));
    drop(c);
    s.stop();
    // Neither the password nor its salted form is in the directory: only the verifier.
    let file = std::fs::read_to_string(data.join("server_roles")).unwrap();
    assert!(!file.contains("s3cret") && file.contains("\tpostgres\tsuperuser\tlogin\tSCRAM-SHA-256$4096:"), "{file}");
    // Started again without the file's password: it was stored.
    let s = with_password(&data, None).expect("a stored password is enough to start");
    login(&s, "postgres", "s3cret").await.expect("still the password");
    s.stop();
    // Started with another password: refused, rather than silently replacing the stored one.
    let e = with_password(&data, Some("other")).err().expect("a different password is refused");
    assert!(e.contains("already has a password"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_role_then_log_in_as_it_and_alter_its_password_with_a_postgres_verifier() {
    let dir = tempfile::tempdir().unwrap();
    let s = with_password(dir.path(), Some("pw")).unwrap();
    let admin = login(&s, "postgres", "pw").await.unwrap();
    admin.batch_execute("CREATE ROLE alice LOGIN PASSWORD 'first'").await.unwrap();
    let alice = login(&s, "alice", "first").await.expect("alice logs in with her password");
    for f in ["current_user", "session_user", "user"] {
        assert_eq!(one_text(&alice, &format!("select {f}")).await, "alice", "{f}");
    }
    assert_eq!(one_text(&alice, "show is_superuser").await.len(), 2, "SHOW answers");
    // The verifier PostgreSQL 15 computed for 'alicepw' is stored as given.
    admin.batch_execute(&format!("ALTER ROLE alice PASSWORD '{POSTGRES_15_VERIFIER_OF_ALICEPW}'")).await.unwrap();
    let again = login(&s, "alice", "alicepw").await.expect("the password behind PostgreSQL's verifier");
    assert_eq!(one_text(&again, "select current_user").await, "alice");
    assert_eq!(refused(&s, "alice", "first").await.0, "28P01", "the old password is gone");
    // A role changes its own password; CREATE USER implies LOGIN.
    again.batch_execute("ALTER USER alice WITH PASSWORD 'mine'").await.unwrap();
    login(&s, "alice", "mine").await.expect("her own new password");
    admin.batch_execute("CREATE USER carol PASSWORD 'c'").await.unwrap();
    login(&s, "carol", "c").await.expect("CREATE USER can log in");
    let e = again.batch_execute("ALTER ROLE carol PASSWORD 'x'").await.unwrap_err();
    assert_eq!((code(&e), e.as_db_error().unwrap().message()), ("42501".into(), "permission denied"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_use_postgresql_15s_codes_and_words() {
    let dir = tempfile::tempdir().unwrap();
    let s = with_password(dir.path(), Some("pw")).unwrap();
    let admin = login(&s, "postgres", "pw").await.unwrap();
    admin
        .batch_execute(
            "CREATE ROLE bob NOLOGIN PASSWORD 'b'; CREATE ROLE dave LOGIN; CREATE ROLE eve LOGIN PASSWORD 'e'",
        )
        .await
        .unwrap();
    let failed = |u: &str| format!("password authentication failed for user \"{u}\"");
    assert_eq!(refused(&s, "bob", "b").await, ("28000".into(), "role \"bob\" is not permitted to log in".into()));
    assert_eq!(refused(&s, "bob", "wrong").await, ("28P01".into(), failed("bob")), "the password is checked first");
    assert_eq!(refused(&s, "dave", "").await, ("28P01".into(), failed("dave")), "a role without a password");
    assert_eq!(refused(&s, "nobody", "x").await, ("28P01".into(), failed("nobody")), "no such role: the same");

    let eve = login(&s, "eve", "e").await.unwrap();
    let e = eve.batch_execute("CREATE ROLE mallory SUPERUSER LOGIN PASSWORD 'm'").await.unwrap_err();
    assert_eq!((code(&e), e.as_db_error().unwrap().message()), ("42501".into(), "permission denied to create role"));
    let e = eve.batch_execute("ALTER ROLE eve SUPERUSER").await.unwrap_err();
    assert_eq!(code(&e), "42501");
    let e = eve.batch_execute("DROP ROLE dave").await.unwrap_err();
    assert_eq!((code(&e), e.as_db_error().unwrap().message()), ("42501".into(), "permission denied to drop role"));
    let e = admin.batch_execute("CREATE ROLE eve").await.unwrap_err();
    assert_eq!((code(&e), e.as_db_error().unwrap().message()), ("42710".into(), "role \"eve\" already exists"));
    let e = admin.batch_execute("ALTER ROLE nobody LOGIN").await.unwrap_err();
    assert_eq!((code(&e), e.as_db_error().unwrap().message()), ("42704".into(), "role \"nobody\" does not exist"));
    let e = admin.batch_execute("DROP ROLE postgres").await.unwrap_err();
    assert_eq!((code(&e), e.as_db_error().unwrap().message()), ("55006".into(), "current user cannot be dropped"));
    let e = admin.batch_execute("BEGIN; CREATE ROLE inblock").await.unwrap_err();
    assert_eq!(code(&e), "25001");
    admin.batch_execute("ROLLBACK").await.unwrap();

    // psql's \du reads pg_roles so.
    let du = "SELECT r.rolname, r.rolsuper, r.rolcanlogin, r.rolpassword FROM pg_catalog.pg_roles r \
              WHERE r.rolname !~ '^pg_' ORDER BY 1";
    let rows: Vec<(String, bool, bool, String)> =
        admin.query(du, &[]).await.unwrap().iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    let want = |n: &str, sup, can| (n.to_string(), sup, can, "********".to_string());
    assert_eq!(
        rows,
        vec![
            want("bob", false, false),
            want("dave", false, true),
            want("eve", false, true),
            want("postgres", true, true)
        ]
    );
    admin.batch_execute("DROP ROLE bob, dave").await.unwrap();
    admin.batch_execute("DROP ROLE IF EXISTS bob").await.unwrap();
    let e = admin.batch_execute("DROP ROLE bob").await.unwrap_err();
    assert_eq!(code(&e), "42704");
    let names: Vec<String> =
        admin.query("select usename from pg_user order by 1", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(names, ["eve", "postgres"]);
    // A dropped role cannot log in; an existing session keeps going.
    admin.batch_execute("DROP ROLE eve").await.unwrap();
    assert_eq!(refused(&s, "eve", "e").await.0, "28P01");
    assert_eq!(one_text(&eve, "select current_user").await, "eve");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_connections_are_kept_for_superusers() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = TestServer::options(dir.path());
    opts.password = Some("pw".into());
    opts.max_connections = 3;
    opts.superuser_reserved_connections = 1;
    let s = TestServer::start_with_options(opts).unwrap();
    let admin = login(&s, "postgres", "pw").await.unwrap();
    assert_eq!(one_text(&admin, "show superuser_reserved_connections").await, "1");
    let setting: String = admin
        .query_one("select context from pg_settings where name = 'superuser_reserved_connections'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(setting, "postmaster");
    admin.batch_execute("CREATE USER alice PASSWORD 'a'").await.unwrap();
    let alice = login(&s, "alice", "a").await.expect("the second slot is anyone's");
    let (code, message) = refused(&s, "alice", "a").await;
    assert_eq!(code, "53300");
    assert_eq!(message, "remaining connection slots are reserved for non-replication superuser connections");
    assert_eq!(refused(&s, "alice", "wrong").await.0, "28P01", "authentication comes first");
    let second_admin = login(&s, "postgres", "pw").await.expect("a superuser takes the reserved slot");
    let (code, message) = refused(&s, "postgres", "pw").await;
    assert_eq!((code.as_str(), message.as_str()), ("53300", "sorry, too many clients already"));
    for c in [&admin, &alice, &second_admin] {
        assert_eq!(one_text(c, "select 'still here'").await, "still here");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_and_no_trust_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let e = with_password(&data, None).err().expect("no password, no trust");
    assert!(e.contains("no role of") && e.contains("--password-file") && e.contains("--trust"), "{e}");
    assert!(!data.exists(), "nothing was created");
    // Trusted, the directory is made with a postgres that has no password: still no start
    // without trust afterwards.
    let mut opts = TestServer::options(&data);
    opts.trust = true;
    let s = TestServer::start_with_options(opts).unwrap();
    login(&s, "postgres", "").await.expect("trust");
    s.stop();
    assert!(with_password(&data, None).is_err());

    let mut opts = TestServer::options(&data);
    (opts.trust, opts.max_connections, opts.superuser_reserved_connections) = (true, 3, 3);
    let e = TestServer::start_with_options(opts).err().unwrap();
    assert_eq!(e, "superuser_reserved_connections (3) must be less than max_connections (3)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_roles_file_is_a_startup_error_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let s = with_password(dir.path(), Some("pw")).unwrap();
    s.stop();
    let path = dir.path().join("server_roles");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("\tsuperuser\t", "\tsuper\t")).unwrap();
    let e = with_password(dir.path(), None).err().unwrap();
    assert!(e.contains("server_roles, line 2"), "{e}");
}

#[test]
fn psql_logs_in_with_pgpassword_and_lists_roles() {
    let Some(psql) = common::require("psql") else { return };
    let dir = tempfile::tempdir().unwrap();
    let s = with_password(dir.path(), Some("pw")).unwrap();
    let run = |password: &str, sql: &str| {
        std::process::Command::new(&psql)
            .args(["-X", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-d", "postgres", "-c", sql])
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .unwrap()
    };
    let o = run("pw", "CREATE ROLE reader LOGIN");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run("pw", "\\du");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("reader") && out.contains("postgres") && out.contains("Superuser"), "{out}");
    let o = run("wrong", "select 1");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("password authentication failed for user \"postgres\""), "{err}");
}
