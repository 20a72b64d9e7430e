//! SET, SHOW and RESET: the client settings a session keeps, and the engine's parameters.
//!
//! Three kinds of parameters:
//!
//! - **Client settings** that drivers and psql set at connect time (`client_encoding`,
//!   `DateStyle`, `extra_float_digits`, `application_name`, ...). The server accepts the values
//!   its output already satisfies (UTF8, ISO dates, standard-conforming strings) and refuses the
//!   others with 0A000 instead of silently ignoring them. `extra_float_digits` is stored; float8
//!   output is always the shortest exact form (what PostgreSQL 12+ prints for values >= 1).
//!   `statement_timeout` and `idle_in_transaction_session_timeout` take PostgreSQL's time
//!   syntax (`100`, `'5s'`, `'1min'`; stored as SHOW prints them) and are enforced by the
//!   session (see [`crate::interrupt`]); so does `wal_sender_timeout`, which a replication
//!   connection's stream applies (see [`crate::walsender`]).
//! - **Engine parameters that apply per statement**: `default_transaction_isolation`, and for
//!   VACUUM `vacuum_freeze_policy`, `vacuum_cost_delay`, `vacuum_cost_limit`,
//!   `vacuum_truncate`, and `lock_timeout` for the session's lock waits (DML and reads; DDL
//!   uses the engine's). SET validates the value with the engine's own parser and the session uses it.
//! - **Other engine parameters** (`shared_buffers`, `vacuum_freeze_min_age`, ...) are read by
//!   the engine when the data directory is opened: SHOW reports them, SET fails with 55P02 and
//!   a hint to pass `--set name=value` to `settle serve`.

use std::collections::BTreeMap;

use settledb::{Config, Database};
use sqlparser::ast::{Expr, Reset, Value};

use crate::error::SqlError;

/// Client settings and their values at connect time.
const CLIENT: &[(&str, &str)] = &[
    ("application_name", ""),
    ("client_encoding", "UTF8"),
    ("client_min_messages", "notice"),
    ("datestyle", "ISO, MDY"),
    ("extra_float_digits", "1"),
    ("idle_in_transaction_session_timeout", "0"),
    ("idle_session_timeout", "0"),
    ("intervalstyle", "postgres"),
    ("search_path", "\"$user\", public"),
    ("standard_conforming_strings", "on"),
    ("statement_timeout", "0"),
    ("timezone", "UTC"),
    ("bytea_output", "hex"),
    // Read by a replication connection's stream when it starts (`crate::walsender`).
    ("wal_sender_timeout", "1min"),
];

/// Read-only settings clients ask about.
const FIXED: &[(&str, &str)] = &[
    ("server_version", crate::SERVER_VERSION),
    ("server_version_num", "150000"),
    ("server_encoding", "UTF8"),
    ("integer_datetimes", "on"),
    ("max_identifier_length", "63"),
    ("block_size", "8192"),
    ("is_superuser", "on"),
    ("lc_collate", "C"),
    ("lc_ctype", "C"),
    // The server's values, which the session keeps in its map (`settle serve --set`).
    ("max_connections", "100"),
    ("superuser_reserved_connections", "3"),
    // Role passwords are stored as SCRAM-SHA-256 verifiers (psql's \password asks).
    ("password_encryption", "scram-sha-256"),
    // Replication clients ask (pg_recvlogical, pg_receivewal): the mode `initdb` gives a data
    // directory.
    ("data_directory_mode", "0700"),
];

/// Engine parameters a session may change for its own statements.
const SESSION_ENGINE: &[&str] = &[
    "default_transaction_isolation",
    "vacuum_freeze_policy",
    "vacuum_cost_delay",
    "vacuum_cost_limit",
    "vacuum_truncate",
    "lock_timeout",
];

/// The settings a client's startup packet gives, in the order to apply them, and whether a
/// failure is fatal: first its parameters that are client settings (`application_name`,
/// `DateStyle`, ...; a value SET would refuse is skipped, so a connection that worked
/// before these were applied still does; `client_encoding` is the protocol layer's), then
/// what its `options`
/// parameter sets (`-c name=value` or `--name=value`, separated by spaces, a backslash
/// escaping the next character), which PostgreSQL applies strictly: a bad one ends the
/// connection. 42601 for `options` that are not of that form.
pub fn startup<'a>(params: impl Iterator<Item = (&'a str, &'a str)>) -> Result<Vec<(String, String, bool)>, SqlError> {
    let mut out = Vec::new();
    let mut options = None;
    for (k, v) in params {
        let k = k.to_ascii_lowercase();
        if k == "options" {
            options = Some(v);
        } else if k != "client_encoding" && CLIENT.iter().any(|(c, _)| *c == k) {
            out.push((k, v.to_string(), false));
        }
    }
    let words = split_options(options.unwrap_or(""));
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let pair = if w == "-c" {
            it.next().map(String::as_str)
        } else {
            w.strip_prefix("-c").or_else(|| w.strip_prefix("--")).filter(|p| !p.is_empty())
        };
        let Some((name, value)) = pair.and_then(|p| p.split_once('=')) else {
            return Err(SqlError::new("42601", format!("invalid command-line argument for server process: {w}"))
                .with_hint("Pass settings as -c name=value."));
        };
        out.push((name.replace('-', "_").to_ascii_lowercase(), value.to_string(), true));
    }
    Ok(out)
}

/// Checks the settings of a startup packet's `options` as [`startup`] reads them, each with
/// SET's checks, without applying them: the error that refuses the connection, if any.
pub fn check_startup<'a>(db: &Database, params: impl Iterator<Item = (&'a str, &'a str)>) -> Result<(), SqlError> {
    let mut probe = initial();
    for (name, value, strict) in startup(params)? {
        let r = set(db, &mut probe, &name, &value);
        if strict {
            r?;
        }
    }
    Ok(())
}

/// The `options` startup parameter's words: split at unescaped whitespace, `\x` meaning `x`.
fn split_options(s: &str) -> Vec<String> {
    let (mut words, mut word, mut escaped) = (Vec::new(), String::new(), false);
    for c in s.chars() {
        if escaped {
            word.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c.is_whitespace() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

pub fn initial() -> BTreeMap<String, String> {
    CLIENT.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The spelling SHOW's column heading uses.
pub fn canonical(name: &str) -> String {
    match name {
        "datestyle" => "DateStyle".into(),
        "timezone" | "time zone" => "TimeZone".into(),
        "intervalstyle" => "IntervalStyle".into(),
        "transaction isolation level" => "transaction_isolation".into(),
        other => other.to_string(),
    }
}

/// The text of a SET value (`'ISO'`, `ISO`, `3`, `on`).
pub fn value_text(e: &Expr) -> String {
    match e {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) => s.clone(),
            Value::Number(n, _) => n.clone(),
            Value::Boolean(b) => if *b { "on" } else { "off" }.into(),
            other => other.to_string(),
        },
        Expr::Identifier(i) => i.value.clone(),
        Expr::UnaryOp { op, expr } => format!("{op}{}", value_text(expr)),
        other => other.to_string(),
    }
}

pub fn set(db: &Database, s: &mut BTreeMap<String, String>, name: &str, value: &str) -> Result<(), SqlError> {
    let name = match name {
        "time zone" => "timezone",
        "transaction_isolation" => {
            return Err(SqlError::unsupported("SET transaction_isolation (use SET TRANSACTION)"))
        }
        n => n,
    };
    let lower = value.to_ascii_lowercase();
    let refuse = |why: &str| Err(SqlError::unsupported(format!("{name} = '{value}' ({why})")));
    match name {
        "client_encoding" if !matches!(lower.replace(['-', '_'], "").as_str(), "utf8" | "unicode") => {
            return refuse("the server speaks UTF8 only")
        }
        "datestyle" if !lower.contains("iso") && !lower.is_empty() => return refuse("dates are written in ISO style"),
        "standard_conforming_strings" if !matches!(lower.as_str(), "on" | "true" | "1") => {
            return refuse("backslashes in strings are always literal")
        }
        "bytea_output" if lower != "hex" => return refuse("bytea is written in hex"),
        "intervalstyle" if lower != "postgres" => return refuse("intervals are written in the postgres style"),
        "timezone" => {
            // Stored as SHOW prints it (`Europe/Paris`, `<+05:30>-05:30`); see datetime::zone.
            let (shown, _) = crate::datetime::zone::parse_setting(value)?;
            s.insert(name.to_string(), shown);
            return Ok(());
        }
        "statement_timeout" | "idle_in_transaction_session_timeout" | "idle_session_timeout" | "wal_sender_timeout" => {
            // Stored as SHOW prints it, so the session reads one spelling.
            let v = parse_ms(name, value)?;
            s.insert(name.to_string(), if v == 0 { "0".into() } else { ms(v) });
            return Ok(());
        }
        "extra_float_digits" => {
            let n: i32 = value.trim().parse().map_err(|_| {
                SqlError::new("22023", format!("invalid value for parameter \"extra_float_digits\": \"{value}\""))
            })?;
            if !(-15..=3).contains(&n) {
                return Err(SqlError::new(
                    "22023",
                    format!("{n} is outside the valid range for parameter \"extra_float_digits\" (-15 .. 3)"),
                ));
            }
        }
        _ => {}
    }
    if name == "max_connections" || name == "superuser_reserved_connections" {
        return Err(SqlError::new(
            "55P02",
            format!("parameter \"{name}\" cannot be changed without restarting the server"),
        )
        .with_hint(format!("Restart with `settle serve --set {name}=N`.")));
    }
    if FIXED.iter().any(|(k, _)| *k == name) {
        return Err(SqlError::new("55P02", format!("parameter \"{name}\" cannot be changed")));
    }
    if s.contains_key(name) {
        let v = if name == "client_encoding" { "UTF8".to_string() } else { value.to_string() };
        s.insert(name.to_string(), v);
        return Ok(());
    }
    if settledb::config::PARAMETERS.contains(&name) {
        // Validate with the engine's parser, as PostgreSQL validates before storing.
        let mut c: Config = Config::clone(&db.config());
        c.set(name, value).map_err(|e| SqlError::new("22023", e.to_string()))?;
        if SESSION_ENGINE.contains(&name) {
            s.insert(name.to_string(), value.to_string());
            return Ok(());
        }
        if !settledb::config::AT_OPEN.contains(&name) {
            return Err(SqlError::new("55P02", format!("parameter \"{name}\" cannot be changed now")).with_hint(
                format!("Change it for the server: ALTER SYSTEM SET {name} = '{value}', then SELECT pg_reload_conf()."),
            ));
        }
        return Err(SqlError::new("55P02", format!("parameter \"{name}\" cannot be changed now")).with_hint(format!(
            "settledb reads it when the data directory is opened: restart with `settle serve --set {name}={value}`."
        )));
    }
    Err(SqlError::new("42704", format!("unrecognized configuration parameter \"{name}\"")))
}

/// RESET ALL and RESET `name`: back to `start`, the session's settings as its connection
/// began (the defaults and what the startup packet set, as PostgreSQL resets to the values the
/// session started with).
pub fn reset(s: &mut BTreeMap<String, String>, start: &BTreeMap<String, String>, r: &Reset) -> Result<(), SqlError> {
    match r {
        Reset::ALL => {
            s.clone_from(start);
            Ok(())
        }
        Reset::ConfigurationParameter(n) => {
            reset_name(s, start, &n.to_string().to_ascii_lowercase());
            Ok(())
        }
        Reset::SessionAuthorization => Ok(()),
    }
}

/// RESET `name` (and `SET name TO DEFAULT`): a setting back to its value when the connection
/// began (`start`, see [`reset`]); an engine parameter the connection did not set goes back to
/// the engine's.
pub fn reset_name(s: &mut BTreeMap<String, String>, start: &BTreeMap<String, String>, name: &str) {
    match start.get(name) {
        Some(v) => {
            s.insert(name.to_string(), v.clone());
        }
        None => {
            s.remove(name);
        }
    }
}

/// Where a parameter's value comes from and when it can change (`pg_settings`' `source` and
/// `context`).
pub struct Kind {
    pub context: &'static str,
    pub source: &'static str,
}

/// `name`'s [`Kind`] for a session whose settings are `s`.
/// `auto` is `postgresql.auto.conf`'s entries ([`crate::autoconf::read`]): a value in force
/// that came from there is `configuration file`.
pub fn kind(db: &Database, s: &BTreeMap<String, String>, auto: &[(String, String)], name: &str) -> Kind {
    let name = name.to_ascii_lowercase();
    if FIXED.iter().any(|(k, _)| *k == name) {
        let postmaster = name == "max_connections" || name == "superuser_reserved_connections";
        return Kind { context: if postmaster { "postmaster" } else { "internal" }, source: "default" };
    }
    let settable = CLIENT.iter().any(|(k, _)| *k == name) || SESSION_ENGINE.contains(&name.as_str());
    let reloadable =
        settledb::config::PARAMETERS.contains(&name.as_str()) && !settledb::config::AT_OPEN.contains(&name.as_str());
    // `sighup`: ALTER SYSTEM, then pg_reload_conf() (autoconf).
    let context = if settable {
        "user"
    } else if reloadable {
        "sighup"
    } else {
        "postmaster"
    };
    let session_value = s.get(&name);
    let client_default = CLIENT.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    let source = match (session_value, client_default) {
        (Some(v), Some(d)) if v != d => "session",
        (Some(_), None) => "session",
        (_, Some(_)) => "default",
        (None, None) => {
            let now = engine_value(&db.config(), &name);
            let from_file = auto.iter().rev().find(|(k, _)| *k == name).is_some_and(|(_, v)| {
                let mut c = Config::default();
                c.set(&name, v).is_ok() && engine_value(&c, &name) == now
            });
            if from_file {
                "configuration file"
            } else if now == engine_value(&Config::default(), &name) {
                "default"
            } else {
                "command line"
            }
        }
    };
    Kind { context, source }
}

/// SHOW ALL: every parameter with its value, sorted by name.
pub fn show_all(db: &Database, s: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut names: Vec<String> = s.keys().cloned().collect();
    names.extend(FIXED.iter().map(|(k, _)| k.to_string()));
    names.extend(settledb::config::PARAMETERS.iter().map(|k| k.to_string()));
    names.sort();
    names.dedup();
    names.into_iter().filter_map(|n| show(db, s, &n).ok().map(|v| (canonical(&n), v))).collect()
}

/// SHOW and `current_setting()`.
pub fn show(db: &Database, s: &BTreeMap<String, String>, name: &str) -> Result<String, SqlError> {
    let name = name.to_ascii_lowercase();
    let name = match name.as_str() {
        "time zone" => "timezone",
        "transaction isolation level" | "transaction_isolation" => "default_transaction_isolation",
        n => n,
    };
    if let Some(v) = s.get(name) {
        return Ok(v.clone());
    }
    if let Some((_, v)) = FIXED.iter().find(|(k, _)| *k == name) {
        return Ok(v.to_string());
    }
    engine_value(&db.config(), name)
        .ok_or_else(|| SqlError::new("42704", format!("unrecognized configuration parameter \"{name}\"")))
}

/// The largest value a millisecond setting takes (PostgreSQL's `INT_MAX`).
const MS_MAX: f64 = 2_147_483_647.0;

/// A time setting whose unit is the millisecond, in PostgreSQL's syntax: a number (`100`,
/// milliseconds) or a number and a unit (`'5s'`, `'1.5min'`, `'250ms'`, `'10us'`; units `us`,
/// `ms`, `s`, `min`, `h`, `d`), rounded to the nearest millisecond. 22023 for anything else
/// or a value outside 0 .. 2147483647 ms.
pub fn parse_ms(name: &str, value: &str) -> Result<u64, SqlError> {
    let invalid = || {
        SqlError::new("22023", format!("invalid value for parameter \"{name}\": \"{value}\""))
            .with_hint("Valid units for this parameter are \"us\", \"ms\", \"s\", \"min\", \"h\", and \"d\".")
    };
    let t = value.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| invalid())?;
    let per_unit = match unit.trim() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return Err(invalid()),
    };
    let v = (n * per_unit).round();
    if !v.is_finite() || !(0.0..=MS_MAX).contains(&v) {
        return Err(SqlError::new(
            "22023",
            format!("{v} ms is outside the valid range for parameter \"{name}\" (0 .. 2147483647)"),
        ));
    }
    Ok(v as u64)
}

/// A millisecond setting of the session as a duration (`None`: 0, off).
pub fn duration_of(s: &BTreeMap<String, String>, name: &str) -> Option<std::time::Duration> {
    let v = s.get(name).and_then(|v| parse_ms(name, v).ok()).unwrap_or(0);
    (v > 0).then(|| std::time::Duration::from_millis(v))
}

fn on(b: bool) -> String {
    if b { "on" } else { "off" }.into()
}

/// Sizes as PostgreSQL prints them: the largest unit that divides evenly.
fn size(bytes: u64) -> String {
    for (unit, n) in [("TB", 1u64 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)] {
        if bytes >= n && bytes.is_multiple_of(n) {
            return format!("{}{unit}", bytes / n);
        }
    }
    format!("{bytes}B")
}

fn ms(v: u64) -> String {
    for (unit, n) in [("d", 86_400_000u64), ("h", 3_600_000), ("min", 60_000), ("s", 1000)] {
        if v >= n && v.is_multiple_of(n) {
            return format!("{}{unit}", v / n);
        }
    }
    format!("{v}ms")
}

/// An engine parameter's value in PostgreSQL's spelling.
pub(crate) fn engine_value(c: &Config, name: &str) -> Option<String> {
    Some(match name {
        "shared_buffers" => size(c.shared_buffers_bytes as u64),
        "synchronous_commit" => on(c.synchronous_commit),
        "fsync" => on(c.fsync),
        "full_page_writes" => on(c.full_page_writes),
        "mapped_reads" => on(c.mapped_reads),
        "wal_buffers" => size(c.wal_buffers_bytes as u64),
        "wal_segment_size" => size(c.wal_segment_size_bytes),
        "max_wal_size" => size(c.max_wal_size_bytes),
        "min_wal_size" => size(c.min_wal_size_bytes),
        // PostgreSQL shows 0 as "0" (no unit).
        "wal_keep_size" if c.wal_keep_size_bytes == 0 => "0".into(),
        "wal_keep_size" => size(c.wal_keep_size_bytes),
        "checkpoint_timeout" => ms(c.checkpoint_timeout_ms),
        "wal_writer_delay" => ms(c.wal_writer_delay_ms),
        "default_transaction_isolation" => match c.default_transaction_isolation {
            settledb::IsolationLevel::ReadCommitted => "read committed".into(),
            settledb::IsolationLevel::RepeatableRead => "repeatable read".into(),
        },
        "autovacuum_freeze_max_age" => c.autovacuum_freeze_max_age.to_string(),
        "vacuum_freeze_min_age" => c.vacuum_freeze_min_age.to_string(),
        "vacuum_freeze_table_age" => c.vacuum_freeze_table_age.to_string(),
        "vacuum_failsafe_age" => c.vacuum_failsafe_age.to_string(),
        "autovacuum_multixact_freeze_max_age" => c.multixact_ages[0].to_string(),
        "vacuum_multixact_freeze_min_age" => c.multixact_ages[1].to_string(),
        "vacuum_multixact_freeze_table_age" => c.multixact_ages[2].to_string(),
        "vacuum_multixact_failsafe_age" => c.multixact_ages[3].to_string(),
        "vacuum_freeze_policy" => c.vacuum_freeze_policy.name().into(),
        "vacuum_max_eager_freeze_failure_rate" => c.vacuum_max_eager_freeze_failure_rate.to_string(),
        "vacuum_fsm_settled" => c.vacuum_fsm_settled.map_or("auto".into(), on),
        "maintenance_work_mem" => size(c.maintenance_work_mem_bytes as u64),
        "max_parallel_maintenance_workers" => c.max_parallel_maintenance_workers.to_string(),
        "min_parallel_table_scan_size" => size(c.min_parallel_table_scan_size_bytes),
        "min_parallel_index_scan_size" => size(c.min_parallel_index_scan_size_bytes),
        "vacuum_truncate" => on(c.vacuum_truncate),
        "vacuum_cost_delay" => format!("{}ms", c.vacuum_cost_delay_ms),
        "vacuum_cost_limit" => c.vacuum_cost_limit.to_string(),
        "vacuum_cost_page_hit" => c.vacuum_cost_page_hit.to_string(),
        "vacuum_cost_page_miss" => c.vacuum_cost_page_miss.to_string(),
        "vacuum_cost_page_dirty" => c.vacuum_cost_page_dirty.to_string(),
        "autovacuum" => on(c.autovacuum),
        "autovacuum_max_workers" => c.autovacuum_max_workers.to_string(),
        "autovacuum_naptime" => ms(c.autovacuum_naptime_ms),
        "autovacuum_vacuum_threshold" => c.autovacuum_vacuum_threshold.to_string(),
        "autovacuum_vacuum_scale_factor" => c.autovacuum_vacuum_scale_factor.to_string(),
        "autovacuum_vacuum_insert_threshold" => c.autovacuum_vacuum_insert_threshold.to_string(),
        "autovacuum_vacuum_insert_scale_factor" => c.autovacuum_vacuum_insert_scale_factor.to_string(),
        "autovacuum_vacuum_cost_delay" => format!("{}ms", c.autovacuum_vacuum_cost_delay_ms),
        "autovacuum_vacuum_cost_limit" => c.autovacuum_vacuum_cost_limit.to_string(),
        "log_autovacuum_min_duration" => {
            if c.log_autovacuum_min_duration_ms < 0 {
                "-1".into()
            } else {
                ms(c.log_autovacuum_min_duration_ms as u64)
            }
        }
        "lock_timeout" => ms(c.lock_timeout_ms),
        "deadlock_timeout" => ms(c.deadlock_timeout_ms),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_and_times_print_like_postgresql() {
        assert_eq!(super::size(128 << 20), "128MB");
        assert_eq!(super::size(8192), "8kB");
        assert_eq!(super::ms(300_000), "5min");
        assert_eq!(super::ms(200), "200ms");
    }

    #[test]
    fn startup_options_are_read_as_postgresql_reads_them() {
        let params = [
            ("user", "u"),
            ("application_name", "sub"),
            ("client_encoding", "SQL_ASCII"),
            ("options", "-c wal_sender_timeout=5s  --statement-timeout=1min -cdatestyle=ISO,\\ MDY"),
        ];
        let got = super::startup(params.iter().copied()).unwrap();
        let want = [
            ("application_name", "sub", false),
            ("wal_sender_timeout", "5s", true),
            ("statement_timeout", "1min", true),
            ("datestyle", "ISO, MDY", true),
        ];
        let got: Vec<(&str, &str, bool)> = got.iter().map(|(k, v, f)| (k.as_str(), v.as_str(), *f)).collect();
        assert_eq!(got, want);
        for bad in ["-x y", "-c", "-c noequals", "--"] {
            let e = super::startup([("options", bad)].into_iter()).unwrap_err();
            assert_eq!(e.code, "42601", "{bad}");
        }
    }

    #[test]
    fn timeouts_take_postgresql_units() {
        use super::parse_ms;
        let t = "statement_timeout";
        assert_eq!(parse_ms(t, "100").unwrap(), 100);
        assert_eq!(parse_ms(t, "5s").unwrap(), 5000);
        assert_eq!(parse_ms(t, "1min").unwrap(), 60_000);
        assert_eq!(parse_ms(t, "1.5s").unwrap(), 1500);
        assert_eq!(parse_ms(t, " 2 h ").unwrap(), 7_200_000);
        assert_eq!(parse_ms(t, "1d").unwrap(), 86_400_000);
        assert_eq!(parse_ms(t, "1500us").unwrap(), 2);
        assert_eq!(parse_ms(t, "0").unwrap(), 0);
        assert_eq!(parse_ms(t, "5 parsecs").unwrap_err().code, "22023");
        assert_eq!(parse_ms(t, "").unwrap_err().code, "22023");
        assert_eq!(parse_ms(t, "-1").unwrap_err().code, "22023");
        assert_eq!(parse_ms(t, "30d").unwrap_err().code, "22023");
    }
}
