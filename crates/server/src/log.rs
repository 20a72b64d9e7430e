//! The server log, in PostgreSQL's format with `log_line_prefix = '%m [%p] '`:
//!
//! ```text
//! 2026-11-25 08:40:00.123 UTC [4242] LOG:  database system is ready to accept connections
//! 2026-11-25 08:40:02.456 UTC [4242] ERROR:  relation "nosuch" does not exist
//! 2026-11-25 08:40:02.456 UTC [4242] STATEMENT:  select * from nosuch
//! ```
//!
//! Lines go to stderr and are appended to `DIR/log/settledb.log`, the file the engine writes
//! its autovacuum reports to in the same format; the engine's own entries (collected with
//! [`settledb::Database::take_log`]) are copied to stderr by the server's log pump.

use std::io::Write;
use std::path::PathBuf;

use crate::error::SqlError;

pub struct Log {
    file: Option<PathBuf>,
    /// Also print to stderr (off in tests that start many servers).
    pub stderr: bool,
}

impl Log {
    pub fn new(dir: &std::path::Path, stderr: bool) -> Log {
        let d = dir.join("log");
        let file = std::fs::create_dir_all(&d).ok().map(|_| d.join("settledb.log"));
        Log { file, stderr }
    }

    /// One entry: `severity` is `LOG`, `ERROR`, `STATEMENT`, ...
    pub fn line(&self, severity: &str, message: &str) {
        let text = format!("{} [{}] {severity}:  {message}\n", timestamp(), std::process::id());
        self.raw(&text, true);
    }

    /// Text already in the log format (the engine's entries): printed, and written to the file
    /// only when `to_file`.
    pub fn raw(&self, text: &str, to_file: bool) {
        if self.stderr {
            let mut e = std::io::stderr().lock();
            let _ = e.write_all(text.as_bytes());
            if !text.ends_with('\n') {
                let _ = e.write_all(b"\n");
            }
        }
        if to_file {
            if let Some(p) = &self.file {
                if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(p) {
                    let _ = f.write_all(text.as_bytes());
                }
            }
        }
    }

    /// A failed statement: the error, then the statement (`log_min_error_statement = error`).
    pub fn statement_error(&self, e: &SqlError, sql: &str) {
        self.line("ERROR", &e.message);
        self.line("STATEMENT", sql.trim());
    }
}

/// `%m`: the time with milliseconds, in UTC.
pub fn timestamp() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (y, m, d) = crate::types::civil_from_days(secs.div_euclid(86_400));
    let rem = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_millis()
    )
}
