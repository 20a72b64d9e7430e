//! The boundary between settledb's values and a PostgreSQL server, shared by the PostgreSQL
//! drivers ([`crate::tpcc::postgres`], [`crate::pgbench`]) and [`crate::observe::PgObserver`].
//!
//! - **Connections**: [`connect`] opens a synchronous `postgres::Client` and names the URL in
//!   its error.
//! - **Retries**: [`is_retryable`] recognizes SQLSTATE `40001` (serialization failure) and
//!   `40P01` (deadlock detected), the two errors after which a client retries the same
//!   transaction. The `postgres` crate rolls a transaction back when its handle is dropped,
//!   so by the time a caller sees the error the transaction is gone.
//! - **Loading**: [`copy_rows`] sends rows of [`Value`] with `COPY … FROM STDIN` in text
//!   format. A decimal column whose engine value is a scaled integer (cents, ten-thousandths:
//!   see [`crate::tpcc::Column::scale`]) is written as the decimal literal, so `12345` with
//!   scale 2 arrives as `123.45`.
//! - **Timestamps**: the engine's timestamp is microseconds since 2000-01-01 00:00, which is
//!   also PostgreSQL's internal representation of `timestamp`; [`timestamp`] turns it into the
//!   `SystemTime` the client library binds to a `timestamp` parameter, and COPY writes it as
//!   `YYYY-MM-DD HH:MM:SS.ffffff` (proleptic Gregorian, no time zone, from 1970 on).

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use postgres::error::SqlState;
use postgres::{Client, NoTls};
use settledb::Value;

/// Microseconds from 1970-01-01 to 2000-01-01.
const UNIX_TO_2000_MICROS: i64 = 946_684_800_000_000;
/// Days from 1970-01-01 to 2000-01-01.
const UNIX_TO_2000_DAYS: i64 = 10_957;

/// Connects to `url` (`postgres://user@host:port/db`), without TLS.
pub fn connect(url: &str) -> anyhow::Result<Client> {
    Client::connect(url, NoTls).with_context(|| format!("connecting to {url}"))
}

/// Whether `e` is (or wraps) a serialization failure or a deadlock reported by the server.
pub fn is_retryable(e: &anyhow::Error) -> bool {
    e.chain().filter_map(|c| c.downcast_ref::<postgres::Error>()).any(|pe| {
        matches!(pe.code(), Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED)
    })
}

/// The engine's timestamp (microseconds since 2000-01-01) as a `timestamp` parameter.
pub fn timestamp(micros_since_2000: i64) -> SystemTime {
    let unix = micros_since_2000 + UNIX_TO_2000_MICROS;
    if unix >= 0 {
        UNIX_EPOCH + Duration::from_micros(unix as u64)
    } else {
        UNIX_EPOCH - Duration::from_micros(unix.unsigned_abs())
    }
}

/// Writes an engine timestamp as PostgreSQL's text form of `timestamp` (from 1970 on: the
/// workloads' timestamps are all recent).
fn write_timestamp(out: &mut Vec<u8>, micros_since_2000: i64) -> anyhow::Result<()> {
    let secs = micros_since_2000.div_euclid(1_000_000);
    let micros = micros_since_2000.rem_euclid(1_000_000);
    let days = u64::try_from(secs.div_euclid(86_400) + UNIX_TO_2000_DAYS)
        .map_err(|_| anyhow::anyhow!("timestamp {micros_since_2000} is before 1970"))?;
    let (year, month, day) = settledb::stats::civil_from_days(days);
    let s = secs.rem_euclid(86_400);
    let _ = write!(out, "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{micros:06}", s / 3600, s / 60 % 60, s % 60);
    Ok(())
}

/// Writes `v / 10^scale` as a decimal literal.
fn write_scaled(out: &mut Vec<u8>, v: i64, scale: u8) {
    if scale == 0 {
        let _ = write!(out, "{v}");
        return;
    }
    let unit = 10u64.pow(u32::from(scale));
    let sign = if v < 0 { "-" } else { "" };
    let a = v.unsigned_abs();
    let _ = write!(out, "{sign}{}.{:0width$}", a / unit, a % unit, width = usize::from(scale));
}

/// Writes text with COPY's text-format escapes (backslash, tab, newline, carriage return).
fn write_escaped(out: &mut Vec<u8>, s: &str) {
    for &b in s.as_bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

/// Writes one field of COPY's text format; `scale` as in [`crate::tpcc::Column::scale`].
pub fn write_copy_field(out: &mut Vec<u8>, v: &Value, scale: u8) -> anyhow::Result<()> {
    match v {
        Value::Null => out.extend_from_slice(b"\\N"),
        Value::Int4(x) => write_scaled(out, i64::from(*x), scale),
        Value::Int8(x) => write_scaled(out, *x, scale),
        Value::Float8(x) => {
            let _ = write!(out, "{x:?}");
        }
        Value::Bool(x) => out.push(if *x { b't' } else { b'f' }),
        Value::Text(s) => write_escaped(out, s),
        Value::Bytea(bytes) => {
            // `\x` hex form; the backslash itself is escaped in COPY's text format.
            out.extend_from_slice(b"\\\\x");
            for b in bytes {
                let _ = write!(out, "{b:02x}");
            }
        }
        Value::Timestamp(t) => write_timestamp(out, *t)?,
    }
    Ok(())
}

/// Sends `rows` into `table(columns)` with one `COPY … FROM STDIN`; `scales[i]` is column
/// `i`'s decimal places (0 for a plain value). Returns the rows the server reports copied.
pub fn copy_rows(
    client: &mut Client,
    table: &str,
    columns: &[&str],
    scales: &[u8],
    rows: &[Vec<Value>],
) -> anyhow::Result<u64> {
    anyhow::ensure!(
        columns.len() == scales.len(),
        "copy into {table}: {} columns, {} scales",
        columns.len(),
        scales.len()
    );
    let mut buf = Vec::with_capacity(rows.len() * 64);
    for (n, row) in rows.iter().enumerate() {
        anyhow::ensure!(
            row.len() == columns.len(),
            "copy into {table}: row {n} has {} values for {} columns",
            row.len(),
            columns.len()
        );
        for (i, (v, &scale)) in row.iter().zip(scales).enumerate() {
            if i > 0 {
                buf.push(b'\t');
            }
            write_copy_field(&mut buf, v, scale).with_context(|| format!("copy into {table}: row {n}"))?;
        }
        buf.push(b'\n');
    }
    let sql = format!("COPY {table} ({}) FROM STDIN", columns.join(", "));
    let mut w = client.copy_in(&sql).with_context(|| format!("starting {sql}"))?;
    w.write_all(&buf).with_context(|| format!("sending rows to {table}"))?;
    w.finish().with_context(|| format!("finishing COPY into {table}"))
}

/// Quotes `s` as an SQL string literal.
pub fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Checks that `name` can be spliced into SQL as a bare identifier (a setting or table name):
/// lower-case letters, digits, `_` and `.`, not starting with a digit.
pub fn check_identifier(name: &str) -> anyhow::Result<()> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.');
    anyhow::ensure!(ok, "{name:?} is not a plain SQL identifier");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(v: Value, scale: u8) -> String {
        let mut out = Vec::new();
        write_copy_field(&mut out, &v, scale).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn copy_text_fields_round_scaled_integers_into_decimals() {
        assert_eq!(field(Value::Int8(12345), 2), "123.45");
        assert_eq!(field(Value::Int8(-1000), 2), "-10.00");
        assert_eq!(field(Value::Int8(-5), 2), "-0.05");
        assert_eq!(field(Value::Int4(7), 4), "0.0007");
        assert_eq!(field(Value::Int4(2000), 4), "0.2000");
        assert_eq!(field(Value::Int4(42), 0), "42");
        assert_eq!(field(Value::Null, 2), "\\N");
        assert_eq!(field(Value::Text("a\tb\\c\nd".into()), 0), "a\\tb\\\\c\\nd");
        assert_eq!(field(Value::Bytea(vec![0xde, 0xad]), 0), "\\\\xdead");
        assert_eq!(field(Value::Bool(true), 0), "t");
    }

    #[test]
    fn timestamps_are_microseconds_since_2000() {
        assert_eq!(field(Value::Timestamp(0), 0), "2000-01-01 00:00:00.000000");
        assert_eq!(field(Value::Timestamp(-1), 0), "1999-12-31 23:59:59.999999");
        // 2000 is a leap year: day 59 is February 29th.
        assert_eq!(field(Value::Timestamp(59 * 86_400_000_000 + 3_723_000_001), 0), "2000-02-29 01:02:03.000001");
        // 2024-03-01 is 8826 days after 2000-01-01.
        assert_eq!(field(Value::Timestamp(8826 * 86_400_000_000), 0), "2024-03-01 00:00:00.000000");
        assert_eq!(timestamp(0), UNIX_EPOCH + Duration::from_secs(946_684_800));
        assert!(write_copy_field(&mut Vec::new(), &Value::Timestamp(-UNIX_TO_2000_MICROS - 1), 0).is_err());
    }

    #[test]
    fn identifiers_refuse_anything_that_could_break_out() {
        assert!(check_identifier("vacuum_freeze_min_age").is_ok());
        assert!(check_identifier("bmsql_stock").is_ok());
        assert!(check_identifier("x; drop table y").is_err());
        assert!(check_identifier("Upper").is_err());
        assert!(check_identifier("").is_err());
        assert_eq!(literal("it's"), "'it''s'");
    }
}
