//! Test harness: a server started in-process on a free loopback port, and the PostgreSQL
//! client binaries (skipped with a printed reason when they are not installed).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use settledb_server::{ServeOptions, Server};

/// A running server; dropping it shuts it down (sessions end, shutdown checkpoint).
pub struct TestServer {
    pub addr: SocketAddr,
    pub dir: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl TestServer {
    pub fn start(dir: &Path) -> TestServer {
        TestServer::start_with_password(dir, None)
    }

    /// A server whose role `postgres` has `password` (SCRAM-SHA-256) when it is given; one
    /// that trusts every connection when not.
    pub fn start_with_password(dir: &Path, password: Option<&str>) -> TestServer {
        TestServer::start_with(dir, password, &[])
    }

    /// A server with these configuration parameters set besides the tests' defaults.
    pub fn start_with_settings(dir: &Path, settings: &[(&str, &str)]) -> TestServer {
        TestServer::start_with(dir, None, settings)
    }

    /// A server that serves at most `n` connections at once, none reserved for superusers.
    pub fn start_with_max_connections(dir: &Path, n: usize) -> TestServer {
        TestServer::start_opts(dir, None, &[], n)
    }

    /// The tests' options for a server on `dir`: a free loopback port, no log on stderr, no
    /// fsync (tests need no durability against power loss), and the autovacuum launcher off
    /// (so VACUUM output and counters depend only on what a test does).
    pub fn options(dir: &Path) -> ServeOptions {
        let mut opts = ServeOptions::new(dir);
        opts.port = 0;
        opts.log_to_stderr = false;
        opts.config.set("fsync", "off").unwrap();
        opts.config.set("autovacuum", "off").unwrap();
        opts
    }

    /// A server from options the caller filled in ([`TestServer::options`] and changes);
    /// `Err` with its message when it does not start.
    pub fn start_with_options(opts: ServeOptions) -> Result<TestServer, String> {
        let dir = opts.dir.clone();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(async move {
                let server = Server::bind(opts).await.map_err(|e| e.to_string())?;
                addr_tx.send(server.local_addr()).unwrap();
                server
                    .run(async move {
                        let _ = stop_rx.await;
                    })
                    .await
                    .map_err(|e| e.to_string())
            })
        });
        match addr_rx.recv() {
            Ok(addr) => Ok(TestServer { addr, dir, stop: Some(stop_tx), thread: Some(thread) }),
            Err(_) => Err(thread.join().expect("server thread panicked").expect_err("the server stopped")),
        }
    }

    fn start_with(dir: &Path, password: Option<&str>, settings: &[(&str, &str)]) -> TestServer {
        TestServer::start_opts(dir, password, settings, 100)
    }

    fn start_opts(dir: &Path, password: Option<&str>, settings: &[(&str, &str)], max: usize) -> TestServer {
        TestServer::start_tls(dir, password, settings, max, None)
    }

    /// A server with TLS from these certificate and key files (PEM).
    pub fn start_with_tls(dir: &Path, password: Option<&str>, cert: &Path, key: &Path) -> TestServer {
        TestServer::start_tls(dir, password, &[], 100, Some((cert.to_path_buf(), key.to_path_buf())))
    }

    fn start_tls(
        dir: &Path,
        password: Option<&str>,
        settings: &[(&str, &str)],
        max: usize,
        tls: Option<(PathBuf, PathBuf)>,
    ) -> TestServer {
        let mut opts = TestServer::options(dir);
        opts.max_connections = max;
        // The slots a test counts are all anyone's (the tests log in as the superuser).
        opts.superuser_reserved_connections = 0;
        opts.tls_files = tls;
        opts.password = password.map(str::to_string);
        opts.trust = password.is_none();
        for (k, v) in settings {
            opts.config.set(k, v).unwrap();
        }
        TestServer::start_with_options(opts).expect("server did not start")
    }

    /// Stops the server and waits for its shutdown checkpoint.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread panicked").expect("server failed");
        }
    }

    /// A handle naming a running server's address only (for raw-socket helpers).
    pub fn probe(addr: SocketAddr) -> TestServer {
        TestServer { addr, dir: PathBuf::new(), stop: None, thread: None }
    }

    pub fn port(&self) -> String {
        self.addr.port().to_string()
    }

    pub fn conn_string(&self) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname=postgres", self.addr.port())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A PostgreSQL 15 client binary, from Debian's directory or PATH.
pub fn pg_binary(name: &str) -> Option<PathBuf> {
    let debian = Path::new("/usr/lib/postgresql/15/bin").join(name);
    if debian.exists() {
        return Some(debian);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.exists())
}

/// The binary, or a printed reason to skip the test.
pub fn require(name: &str) -> Option<PathBuf> {
    let b = pg_binary(name);
    if b.is_none() {
        eprintln!("skipping: {name} not found (install postgresql-15 / postgresql-client-15)");
    }
    b
}

pub fn run(bin: &Path, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env("PGCONNECT_TIMEOUT", "10")
        .env_remove("PGPASSWORD")
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()))
}

pub fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// psql -At -c SQL against `s`, whatever happens (for tests that expect an error).
pub fn psql_run(psql: &Path, s: &TestServer, sql: &str) -> Output {
    run(psql, &["-X", "-At", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-c", sql])
}

/// psql -At -c SQL: the single value printed.
pub fn psql_value(psql: &Path, s: &TestServer, sql: &str) -> String {
    let o = psql_run(psql, s, sql);
    let (out, err) = text(&o);
    assert!(o.status.success(), "psql -c {sql:?} failed: {err}");
    out.trim().to_string()
}

/// A tokio-postgres client of `s`, its connection driven on the runtime.
pub async fn connect(s: &TestServer) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&s.conn_string(), tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// An error's SQLSTATE (or why it has none).
pub fn code(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

/// A throwaway PostgreSQL 15 cluster on a loopback port (its programs run as `postgres` when
/// the tests run as root, as initdb demands); stopped and removed when dropped.
pub struct PgCluster {
    pub port: u16,
    dir: tempfile::TempDir,
    bindir: PathBuf,
}

impl PgCluster {
    /// initdb and start, with `settings` appended to postgresql.conf; `None` (with a printed
    /// reason) when PostgreSQL 15's server is not installed.
    pub fn start(settings: &[(&str, &str)]) -> Option<PgCluster> {
        let bindir = PathBuf::from("/usr/lib/postgresql/15/bin");
        if !bindir.join("postgres").exists() || !bindir.join("initdb").exists() {
            eprintln!("skipping: PostgreSQL 15's server is not installed (apt-get install postgresql-15)");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let pg = PgCluster { port, dir: tempfile::tempdir().expect("tempdir"), bindir };
        if is_root() {
            let st = Command::new("chown").args(["-R", "postgres:postgres"]).arg(pg.dir.path()).status();
            assert!(st.is_ok_and(|s| s.success()), "chown of the cluster directory to postgres");
        }
        let data = pg.dir.path().join("data");
        let data_s = data.to_string_lossy().to_string();
        let o = pg.run("initdb", &["-D", &data_s, "-A", "trust", "-U", "postgres", "--no-sync"]);
        assert!(o.status.success(), "initdb: {}", String::from_utf8_lossy(&o.stderr));
        let mut conf = String::from("\n");
        for (k, v) in settings {
            conf.push_str(&format!("{k} = '{v}'\n"));
        }
        let path = data.join("postgresql.conf");
        let mut all = std::fs::read_to_string(&path).expect("postgresql.conf");
        all.push_str(&conf);
        std::fs::write(&path, all).expect("postgresql.conf");
        let opts = format!(
            "-c port={port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={}",
            pg.dir.path().display()
        );
        let log = pg.dir.path().join("server.log").to_string_lossy().to_string();
        let o = pg.run("pg_ctl", &["-D", &data_s, "-l", &log, "-o", &opts, "-w", "start"]);
        assert!(o.status.success(), "pg_ctl start: {}", std::fs::read_to_string(&log).unwrap_or_default());
        Some(pg)
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        let path = self.bindir.join(program);
        let out = if is_root() {
            Command::new("runuser").args(["-u", "postgres", "--"]).arg(&path).args(args).output()
        } else {
            Command::new(&path).args(args).output()
        };
        out.unwrap_or_else(|e| panic!("running {program}: {e}"))
    }

    /// psql -At -c SQL against this cluster: what it printed (asserting success).
    pub fn psql(&self, sql: &str) -> String {
        let psql = self.bindir.join("psql");
        let o =
            run(&psql, &["-X", "-At", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", "-c", sql]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "psql (PostgreSQL) -c {sql:?}: {err}");
        out.trim().to_string()
    }

    /// The server log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let data = self.dir.path().join("data").to_string_lossy().to_string();
        let _ = self.run("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A row as the simple protocol returns it: each value's text, `None` for NULL.
pub type Row = Vec<Option<String>>;

/// A query's rows in text, as the simple protocol returns them.
pub async fn rows(c: &tokio_postgres::Client, sql: &str) -> Vec<Row> {
    let msgs = c.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    msgs.iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

/// Bounds a step of a concurrency test that must finish: only a hang takes this long, and it
/// fails the test instead of stalling it.
pub async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(120), f)
        .await
        .unwrap_or_else(|_| panic!("{what} never finished"))
}

/// Waits (bounded) until `pg_locks` shows at least `n` lock requests not granted: a session
/// blocked on another's lock.
pub async fn until_waiting(c: &tokio_postgres::Client, n: i64) {
    bounded("a session blocking", async {
        loop {
            let w: i64 = c.query_one("select count(*) from pg_locks where not granted", &[]).await.unwrap().get(0);
            if w >= n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    })
    .await
}
