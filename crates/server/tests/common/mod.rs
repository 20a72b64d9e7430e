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

    /// A server that demands `password` (SCRAM-SHA-256) when it is given.
    pub fn start_with_password(dir: &Path, password: Option<&str>) -> TestServer {
        TestServer::start_with(dir, password, &[])
    }

    /// A server with these configuration parameters set besides the tests' defaults.
    pub fn start_with_settings(dir: &Path, settings: &[(&str, &str)]) -> TestServer {
        TestServer::start_with(dir, None, settings)
    }

    /// A server that serves at most `n` connections at once.
    pub fn start_with_max_connections(dir: &Path, n: usize) -> TestServer {
        TestServer::start_opts(dir, None, &[], n)
    }

    fn start_with(dir: &Path, password: Option<&str>, settings: &[(&str, &str)]) -> TestServer {
        TestServer::start_opts(dir, password, settings, 100)
    }

    fn start_opts(dir: &Path, password: Option<&str>, settings: &[(&str, &str)], max: usize) -> TestServer {
        let mut opts = ServeOptions::new(dir);
        opts.max_connections = max;
        opts.password = password.map(str::to_string);
        opts.port = 0;
        opts.log_to_stderr = false;
        // Tests need no durability against power loss; the autovacuum launcher stays off so
        // VACUUM output and counters depend only on what a test does.
        opts.config.set("fsync", "off").unwrap();
        opts.config.set("autovacuum", "off").unwrap();
        for (k, v) in settings {
            opts.config.set(k, v).unwrap();
        }
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
        let addr = addr_rx.recv().expect("server did not start");
        TestServer { addr, dir: dir.to_path_buf(), stop: Some(stop_tx), thread: Some(thread) }
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

/// psql -At -c SQL: the single value printed.
pub fn psql_value(psql: &Path, s: &TestServer, sql: &str) -> String {
    let o = run(psql, &["-X", "-At", "-h", "127.0.0.1", "-p", &s.port(), "-U", "postgres", "-c", sql]);
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
