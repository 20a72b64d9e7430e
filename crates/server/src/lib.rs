//! `settledb-server`: PostgreSQL's wire protocol and a SQL subset over the settledb engine, so
//! that `psql`, `pgbench` and PostgreSQL drivers talk to a settledb data directory.
//!
//! The engine knows nothing of SQL; this crate sits above it (imports point down only:
//! `server -> settledb`) and adds:
//!
//! ```text
//!   wire      pgwire handlers: simple + extended query, COPY; session threads
//!   auth      startup: SCRAM-SHA-256 against the role's verifier (or trust), then the role's
//!             LOGIN and superuser_reserved_connections;  roles  the roles file (DIR/server_roles),
//!             SCRAM verifiers, CREATE/ALTER/DROP ROLE
//!   conn      the message loop;  frames  the protocol's grammar checked before pgwire decodes
//!             (fuzzing: the cargo-fuzz targets' entry points)
//!   parse     statement splitting, our parser for VACUUM/ANALYZE/CHECKPOINT/COPY, sqlparser
//!   session   transaction state (autocommit, BEGIN/COMMIT/ROLLBACK, failed blocks), SET/SHOW
//!   query     SELECT and Describe (setop: UNION/INTERSECT/EXCEPT);  dml  INSERT/UPDATE/
//!             DELETE/TRUNCATE;  ddl  CREATE/DROP/ALTER;  alter  ALTER TABLE's column changes
//!   plan      index equality/range scan, index-only scan, or sequential scan for a WHERE clause;
//!             ordered  ORDER BY from index order (forward or backward), LIMIT stopping the scan
//!   join      FROM lists: joins (index nested loop, hash, nested loop; inner, left, cross)
//!             and generate_series (series); fromcall  any other function in FROM
//!   expr      expression evaluation and type inference (pattern: LIKE, ~);  types  SQL types,
//!             text/binary I/O;  datetime  timestamptz, TimeZone, date/time operators and
//!             functions;  interval  the interval type
//!   catalog   the SQL column types the engine does not keep (DIR/server_catalog)
//!   copy      COPY FROM STDIN / TO STDOUT;  utility  VACUUM;  settings  GUCs;  log  server log
//!   interrupt cancel requests, statement_timeout, the idle timeouts, max_connections:
//!             the flags and registry that reach a session from outside
//!   views     pg_stat_user_tables, pg_stat_database from the engine's counters,
//!             pg_replication_slots, pg_stat_replication_slots, pg_locks, pg_namespace, pg_am;
//!             pgcatalog  pg_attribute, pg_index, pg_type, pg_constraint & co. (psql's \d);
//!             sysviews  pg_database, pg_settings, pg_stat_wal, pg_statio_user_tables,
//!             pg_stat_progress_vacuum
//!             slotfuncs  pg_create_logical_replication_slot & co.;  slotchanges
//!             pg_logical_slot_get_changes & co. in FROM
//!   tls       TLS from PEM files (rustls)
//!   walsender replication connections (replication=database): IDENTIFY_SYSTEM,
//!             CREATE/DROP_REPLICATION_SLOT, START_REPLICATION's CopyBoth stream,
//!             pg_stat_replication
//! ```
//!
//! One connection is one pgwire task plus one session thread (the engine is synchronous and a
//! transaction borrows the database). [`Server::run`] accepts connections until its shutdown
//! future completes, then closes every session (rolling back open transactions) and closes
//! the database with a shutdown checkpoint.
//!
//! See `docs/server.md` for what is supported and what is not.

pub mod aggregate;
pub mod alter;
pub mod auth;
pub mod autoconf;
pub mod catalog;
pub mod conn;
pub mod constraints;
pub mod copy;
pub mod correlate;
pub mod cte;
pub mod datetime;
pub mod ddl;
pub mod dml;
pub mod error;
pub mod expr;
pub mod frames;
pub mod fromcall;
pub mod fuzzing;
pub mod genfile;
pub mod interrupt;
pub mod interval;
pub mod join;
pub mod log;
pub mod ordered;
pub mod parse;
pub mod pattern;
pub mod pgcatalog;
pub mod plan;
pub mod query;
pub mod relcache;
pub mod roles;
pub mod rowlock;
pub mod sequence;
pub mod series;
pub mod session;
pub mod setop;
pub mod settings;
pub mod slotchanges;
pub mod slotfuncs;
pub mod srf;
pub mod sysviews;
pub mod tls;
pub mod types;
pub mod upsert;
pub mod utility;
pub mod views;
pub mod walsender;
pub mod window;
pub mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use settledb::{Config, Database};
use tokio::net::TcpListener;

pub use error::SqlError;

/// `server_version` as clients see it: PostgreSQL 15's protocol and catalog dialect, served
/// by settledb. libpq reads the leading `15.0` (so `PQserverVersion` is 150000).
pub const SERVER_VERSION: &str = concat!("15.0 (settledb ", env!("CARGO_PKG_VERSION"), ")");

/// What `version()` returns.
pub fn version_string() -> String {
    format!(
        "PostgreSQL 15.0 (settledb {}) on {}-{}, wire protocol by pgwire 0.42",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS
    )
}

/// Starts the thread that serves one accepted connection ([`wire::serve_connection`]) and
/// registers it for the join at shutdown.
fn spawn_connection(
    sh: &Arc<Shared>,
    handler: &Arc<wire::Handler>,
    sock: tokio::net::TcpStream,
    peer: SocketAddr,
    stop: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let sock = sock.into_std()?;
    let (sh2, handler) = (sh.clone(), handler.clone());
    let thread = std::thread::Builder::new().name(wire::next_session_thread_name()).spawn(move || {
        sh2.log.line("LOG", &format!("connection received: host={} port={}", peer.ip(), peer.port()));
        let start = std::time::Instant::now();
        if let Err(e) = wire::serve_connection(sh2.clone(), &handler, sock, stop) {
            sh2.log.line("LOG", &format!("could not receive data from client: {e}"));
        }
        let t = start.elapsed();
        sh2.log.line(
            "LOG",
            &format!(
                "disconnection: session time: {}:{:02}:{:06.3} host={} port={}",
                t.as_secs() / 3600,
                t.as_secs() / 60 % 60,
                t.as_secs_f64() % 60.0,
                peer.ip(),
                peer.port()
            ),
        );
    })?;
    let mut sessions = sh.sessions.lock();
    // Threads of closed connections are done; only live ones need joining at shutdown.
    sessions.retain(|h| !h.is_finished());
    sessions.push(thread);
    Ok(())
}

/// State every session shares.
pub struct Shared {
    pub db: Database,
    pub catalog: catalog::SqlCatalog,
    /// CHECK and FOREIGN KEY constraints, UNIQUE constraints' names (`DIR/server_constraints`).
    pub constraints: constraints::Constraints,
    /// `CREATE SEQUENCE`'s sequences.
    pub sequences: sequence::Sequences,
    pub log: log::Log,
    /// Every connection is trusted (`--trust`); otherwise each proves its role's password by
    /// SCRAM-SHA-256.
    pub trust: bool,
    /// The roles (`DIR/server_roles`).
    pub roles: Arc<roles::Roles>,
    /// Session threads, joined at shutdown.
    pub sessions: parking_lot::Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Connection slots (`max_connections`) and the BackendKeyData of live sessions.
    pub registry: Arc<interrupt::Registry>,
    /// The replication streams running now (`pg_stat_replication`).
    pub senders: walsender::Senders,
    /// TLS for clients that ask for it (`--ssl-cert-file`, `--ssl-key-file`).
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Where the configuration comes from: `ALTER SYSTEM`, `pg_reload_conf()` ([`autoconf`]).
    pub config_sources: autoconf::Sources,
}

impl Shared {
    /// `pg_reload_conf()` and SIGHUP: rebuilds the configuration from its sources and hands
    /// it to the engine, logging what changed and what needs a restart, as PostgreSQL does.
    pub fn reload_config(&self) -> Result<(), SqlError> {
        let _g = self.config_sources.lock.lock();
        self.log.line("LOG", "received SIGHUP, reloading configuration files");
        let next = match self.config_sources.effective() {
            Ok(c) => c,
            Err(e) => {
                self.log.line(
                    "LOG",
                    &format!("{}; configuration file contains errors; no changes were applied", e.message),
                );
                return Ok(());
            }
        };
        let before = self.db.config();
        let reloaded = self.db.reload_config(next.clone());
        if let Some(e) = &reloaded.autovacuum_failed {
            self.log.line("LOG", &format!("could not start autovacuum: {e}"));
        }
        for name in settledb::config::PARAMETERS {
            let (old, new) = (settings::engine_value(&before, name), settings::engine_value(&next, name));
            if old == new || (*name == "autovacuum" && next.autovacuum && !self.db.autovacuum_running()) {
                continue;
            }
            if reloaded.unapplied.contains(name) {
                self.log.line("LOG", &format!("parameter \"{name}\" cannot be changed without restarting the server"));
            } else if let Some(new) = new {
                self.log.line("LOG", &format!("parameter \"{name}\" changed to \"{new}\""));
            }
        }
        Ok(())
    }
}

/// How to run a server.
pub struct ServeOptions {
    pub dir: PathBuf,
    pub listen: String,
    pub port: u16,
    /// The engine configuration before `postgresql.auto.conf` ([`autoconf`]).
    pub config: Config,
    /// `settle serve --set` pairs: applied after `postgresql.auto.conf`, so they win (as
    /// PostgreSQL's `-c` does). Already in `config` too.
    pub command_line: Vec<(String, String)>,
    /// The bootstrap superuser `postgres`'s password (`--password-file`'s first line): stored
    /// as its SCRAM verifier when it has none (at initialization, like `initdb --pwfile`);
    /// when it has one, this must be it. Dropped once hashed.
    pub password: Option<String>,
    /// Trust every connection (`--trust`). Without it the server authenticates by
    /// SCRAM-SHA-256 and refuses to start unless some role has a password (stored, or given
    /// in `password`): [`ServeError::NoPassword`].
    pub trust: bool,
    /// Print the log to stderr too.
    pub log_to_stderr: bool,
    /// Client connections served at once; one more is refused with FATAL 53300
    /// (PostgreSQL's `max_connections`, default 100).
    pub max_connections: usize,
    /// Of those, the slots only superusers may take (PostgreSQL's
    /// `superuser_reserved_connections`, default 3); must be less than `max_connections`.
    pub superuser_reserved_connections: usize,
    /// A certificate chain and its private key (PEM files): TLS for clients that ask.
    pub tls_files: Option<(PathBuf, PathBuf)>,
}

impl ServeOptions {
    pub fn new(dir: impl Into<PathBuf>) -> ServeOptions {
        ServeOptions {
            dir: dir.into(),
            listen: "127.0.0.1".into(),
            port: 5432,
            config: Config::default(),
            command_line: Vec::new(),
            password: None,
            trust: false,
            log_to_stderr: true,
            max_connections: 100,
            superuser_reserved_connections: 3,
            tls_files: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Engine(#[from] settledb::Error),
    #[error("{0}")]
    Sql(#[from] SqlError),
    #[error("could not listen on {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    /// Neither trust nor a password: every connection would have to be refused.
    #[error(
        "no role of {} has a password, so no client could log in: give role \"postgres\" a password \
         (ServeOptions::password, settle serve --password-file FILE), or trust every connection \
         (ServeOptions::trust, settle serve --trust)",
        dir.display()
    )]
    NoPassword { dir: PathBuf },
    #[error("superuser_reserved_connections ({reserved}) must be less than max_connections ({max})")]
    Reserved { reserved: usize, max: usize },
}

/// A server bound to its address, not yet accepting.
pub struct Server {
    sh: Arc<Shared>,
    listener: TcpListener,
}

impl Server {
    /// Opens (creating if needed) the data directory and binds the listening socket.
    pub async fn bind(mut opts: ServeOptions) -> Result<Server, ServeError> {
        if opts.superuser_reserved_connections >= opts.max_connections {
            return Err(ServeError::Reserved {
                reserved: opts.superuser_reserved_connections,
                max: opts.max_connections,
            });
        }
        // Before the directory is created: a server nobody could log in to does not start.
        if !opts.trust && opts.password.is_none() && !roles::any_password(&opts.dir)? {
            return Err(ServeError::NoPassword { dir: opts.dir.clone() });
        }
        let dir = opts.dir.clone();
        let config_sources = autoconf::Sources {
            dir: opts.dir.clone(),
            base: opts.config.clone(),
            command_line: opts.command_line.clone(),
            lock: Default::default(),
        };
        let config = config_sources.effective()?;
        let db = tokio::task::spawn_blocking(move || Database::open(&dir, config))
            .await
            .map_err(|e| SqlError::new("XX000", format!("opening the database panicked: {e}")))??;
        // The log directory comes after the open: a new data directory must start empty.
        let log = log::Log::new(&opts.dir, opts.log_to_stderr);
        let r = db.recovery_report();
        if r.performed {
            log.line("LOG", &format!("redo done at {}: {} WAL records replayed", r.end_lsn, r.records_replayed));
        }
        let catalog = catalog::SqlCatalog::open(&opts.dir)?;
        let constraints = constraints::Constraints::open(&opts.dir)?;
        let sequences = sequence::Sequences::open(&opts.dir)?;
        let roles = Arc::new(roles::Roles::open(&opts.dir, opts.password.take())?);
        // The output plugins show the columns' SQL types (numeric, date, smallint, ...).
        db.set_column_types(catalog.column_types());
        let addr = format!("{}:{}", opts.listen, opts.port);
        let listener =
            TcpListener::bind(&addr).await.map_err(|source| ServeError::Listen { addr: addr.clone(), source })?;
        let local = listener.local_addr().map_err(|source| ServeError::Listen { addr: addr.clone(), source })?;
        log.line(
            "LOG",
            &format!(
                "listening on IPv{} address \"{}\", port {}",
                if local.is_ipv4() { 4 } else { 6 },
                local.ip(),
                local.port()
            ),
        );
        let tls = match &opts.tls_files {
            Some((cert, key)) => Some(tls::acceptor(cert, key)?),
            None => None,
        };
        let registry = Arc::new(interrupt::Registry::new(opts.max_connections, opts.superuser_reserved_connections));
        let sh = Arc::new(Shared {
            db,
            catalog,
            constraints,
            sequences,
            log,
            trust: opts.trust,
            roles,
            sessions: Default::default(),
            registry,
            senders: Default::default(),
            tls,
            config_sources,
        });
        Ok(Server { sh, listener })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().expect("a bound listener has an address")
    }

    /// Accepts connections until `shutdown` completes; then ends every session (rolling back
    /// their transactions) and closes the database with a shutdown checkpoint.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()>) -> Result<(), ServeError> {
        let Server { sh, listener } = self;
        let handler = Arc::new(wire::Handler::new(sh.clone()));
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        sh.log.line("LOG", "database system is ready to accept connections");
        let pump = tokio::spawn(log_pump(sh.clone()));
        let hangup = tokio::spawn(reload_on_sighup(sh.clone()));
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => {
                    let (sock, peer) = match accepted {
                        Ok(x) => x,
                        Err(e) => {
                            sh.log.line("LOG", &format!("could not accept new connection: {e}"));
                            continue;
                        }
                    };
                    let _ = sock.set_nodelay(true);
                    if let Err(e) = spawn_connection(&sh, &handler, sock, peer, stop_rx.clone()) {
                        sh.log.line("LOG", &format!("could not fork new process for connection: {e}"));
                    }
                }
            }
        }
        sh.log.line("LOG", "received fast shutdown request");
        sh.log.line("LOG", "aborting any active transactions");
        drop(listener);
        let _ = stop_tx.send(true);
        // A running statement stops at its next interruption point.
        sh.registry.terminate_all();
        drop(handler);
        pump.abort();
        let _ = pump.await;
        hangup.abort();
        let _ = hangup.await;
        // Connection threads end once told to stop (a running statement stops at its next
        // interruption point; one inside a single engine call, VACUUM say, finishes first);
        // then the database is ours alone.
        let sessions: Vec<_> = std::mem::take(&mut *sh.sessions.lock());
        let sh = tokio::task::spawn_blocking(move || {
            for s in sessions {
                let _ = s.join();
            }
            let mut sh = sh;
            for _ in 0..600 {
                match Arc::try_unwrap(sh) {
                    Ok(s) => return Ok(s),
                    Err(again) => {
                        sh = again;
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
            Err(sh)
        })
        .await
        .map_err(|e| SqlError::new("XX000", format!("shutdown panicked: {e}")))?;
        match sh {
            Ok(shared) => {
                shared.log.line("LOG", "shutting down");
                for l in shared.db.take_log() {
                    shared.log.raw(&l, false);
                }
                let log = shared.log;
                shared.db.close()?;
                log.line("LOG", "database system is shut down");
                Ok(())
            }
            Err(sh) => {
                sh.log.line("WARNING", "sessions still running after 30 s; the database closes when they end");
                Ok(())
            }
        }
    }
}

/// Copies the engine's log entries (autovacuum reports) to the server's stderr.
async fn log_pump(sh: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        for l in sh.db.take_log() {
            sh.log.raw(&l, false);
        }
    }
}

/// Resolves when SIGINT or SIGTERM arrives.
/// SIGHUP rereads the configuration, as PostgreSQL's postmaster does ([`Shared::reload_config`]).
async fn reload_on_sighup(sh: Arc<Shared>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else { return };
    while hup.recv().await.is_some() {
        let sh = sh.clone();
        let _ = tokio::task::spawn_blocking(move || sh.reload_config()).await;
    }
}

pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
