//! Date and time: `timestamptz`, the session's `TimeZone`, the clock functions, date/time
//! arithmetic and the functions over dates, timestamps and intervals.
//!
//! Representations (engine storage in `crate::types`' table):
//!
//! ```text
//!  date         Datum::Date(i32)          days since 1970-01-01
//!  timestamp    Datum::Timestamp(i64)     local wall-clock microseconds since 1970-01-01
//!  timestamptz  Datum::TimestampTz(i64)   an instant: microseconds since 1970-01-01 UTC
//!  interval     Datum::Interval(Interval) months, days, microseconds (crate::interval)
//! ```
//!
//! A `timestamptz` carries no zone: it is printed in the session's `TimeZone`
//! (`2024-03-01 09:00:00+01`), and a text without an offset is read in it ([`zone`]).
//! Conversions follow PostgreSQL: timestamp -> timestamptz reads the wall-clock time in the
//! session zone, timestamptz -> timestamp and -> date take the session zone's wall clock.
//!
//! Submodules: [`zone`] (zones, SET TimeZone), `input` (text input), `arith` (the
//! operators), `funcs` (now(), extract, date_trunc, age, ...).
//!
//! **Clock.** `now()`, `current_timestamp` and `transaction_timestamp()` are the start of the
//! transaction (the first statement outside a block, or BEGIN), `statement_timestamp()` the
//! start of the statement, `clock_timestamp()` the time of the call. The session records the
//! first two in this thread's [`statement_started`] (a session owns its thread), so every
//! expression evaluator reads them without a handle on the session.

pub mod arith;
pub mod funcs;
mod input;
pub mod zone;

use std::cell::Cell;
use std::cmp::Ordering;

use crate::error::SqlError;
use crate::interval::{Interval, USECS_PER_DAY};
use crate::types::{timestamp_out, Datum, SqlType};

pub use arith::{arith, infer_arith};
pub use funcs::{call, extract, infer_call};

thread_local! {
    /// (transaction start, statement start), microseconds since 1970 UTC.
    static CLOCK: Cell<Option<(i64, i64)>> = const { Cell::new(None) };
}

/// The wall clock now, microseconds since 1970 UTC.
pub fn clock_now() -> i64 {
    crate::expr::now_micros()
}

/// Called by the session as each statement starts: `in_block` says whether it runs inside
/// a transaction block that already started (then the transaction's start stays).
pub fn statement_started(in_block: bool) {
    let now = clock_now();
    CLOCK.with(|c| {
        let xact = match c.get() {
            Some((x, _)) if in_block => x,
            _ => now,
        };
        c.set(Some((xact, now)));
    });
}

/// The transaction's start (`now()`).
pub fn transaction_start() -> i64 {
    CLOCK.with(|c| c.get()).map_or_else(clock_now, |(x, _)| x)
}

/// The statement's start (`statement_timestamp()`).
pub fn statement_start() -> i64 {
    CLOCK.with(|c| c.get()).map_or_else(clock_now, |(_, s)| s)
}

/// First and last microsecond PostgreSQL's timestamps hold: 4714-11-24 BC to 294276 AD.
const TIMESTAMP_MIN: i64 = -211_813_488_000_000_000;
const TIMESTAMP_END: i64 = 9_223_371_331_200_000_000;

/// 22008 `timestamp out of range` unless `t` is one PostgreSQL can hold.
pub fn checked_timestamp(t: Option<i64>) -> Result<i64, SqlError> {
    t.filter(|t| (TIMESTAMP_MIN..TIMESTAMP_END).contains(t))
        .ok_or_else(|| SqlError::new("22008", "timestamp out of range"))
}

/// The input function of `date`, `timestamp`, `timestamptz` and `interval`.
pub fn parse_text(s: &str, ty: SqlType) -> Result<Datum, SqlError> {
    if ty == SqlType::Interval {
        return crate::interval::parse(s, None).map(Datum::Interval);
    }
    let p = input::parse(s, ty, transaction_start())?;
    Ok(match ty {
        SqlType::Date => Datum::Date(
            i32::try_from(p.local.div_euclid(USECS_PER_DAY))
                .map_err(|_| SqlError::new("22008", format!("date out of range: \"{s}\"")))?,
        ),
        SqlType::TimestampTz => Datum::TimestampTz(checked_timestamp(Some(input::instant(&p)))?),
        _ => Datum::Timestamp(p.local),
    })
}

/// A `timestamptz`'s text in the session's zone: `2024-03-01 09:00:00+01`.
pub fn timestamptz_out(utc: i64) -> String {
    let z = zone::session();
    let off = z.offset_at(utc);
    let local = utc.saturating_add(i64::from(off) * 1_000_000);
    format!("{}{}", timestamp_out(local), zone::offset_text(off))
}

/// Casts among date, timestamp, timestamptz and interval; `None` when `d` and `ty` are not
/// such a pair.
pub fn coerce(d: &Datum, ty: SqlType) -> Option<Result<Datum, SqlError>> {
    let z = || zone::session();
    Some(Ok(match (d, ty) {
        (Datum::TimestampTz(u), SqlType::TimestampTz) => Datum::TimestampTz(*u),
        (Datum::Interval(i), SqlType::Interval) => Datum::Interval(*i),
        (Datum::Timestamp(t), SqlType::TimestampTz) => Datum::TimestampTz(z().to_utc(*t)),
        (Datum::Date(d), SqlType::TimestampTz) => Datum::TimestampTz(z().to_utc(i64::from(*d) * USECS_PER_DAY)),
        (Datum::TimestampTz(u), SqlType::Timestamp) => Datum::Timestamp(z().to_local(*u)),
        (Datum::TimestampTz(u), SqlType::Date) => Datum::Date(z().to_local(*u).div_euclid(USECS_PER_DAY) as i32),
        _ => return None,
    }))
}

/// Comparisons that involve a timestamptz or an interval (a timestamp or date meeting a
/// timestamptz is read in the session's zone, as PostgreSQL's cross-type operators do).
pub fn compare(a: &Datum, b: &Datum) -> Option<Ordering> {
    let as_instant = |d: &Datum| match d {
        Datum::TimestampTz(u) => Some(*u),
        Datum::Timestamp(_) | Datum::Date(_) => match coerce(d, SqlType::TimestampTz)? {
            Ok(Datum::TimestampTz(u)) => Some(u),
            _ => None,
        },
        _ => None,
    };
    match (a, b) {
        (Datum::Interval(x), Datum::Interval(y)) => Some(x.span().cmp(&y.span())),
        (Datum::TimestampTz(_), _) | (_, Datum::TimestampTz(_)) => Some(as_instant(a)?.cmp(&as_instant(b)?)),
        _ => None,
    }
}

/// The interval between two instants or wall-clock times, `a - b`, as PostgreSQL's
/// `timestamp_mi` gives it: microseconds with whole 24-hour runs as days.
pub fn difference(a: i64, b: i64) -> Result<Interval, SqlError> {
    let micros = a.checked_sub(b).ok_or_else(crate::interval::out_of_range)?;
    Interval { months: 0, days: 0, micros }.justify_hours().ok_or_else(crate::interval::out_of_range)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_zone(name: &str) {
        let mut s = std::collections::BTreeMap::new();
        s.insert("timezone".to_string(), name.to_string());
        zone::set_session(&s);
    }

    #[test]
    fn timestamptz_reads_offsets_and_prints_in_the_session_zone() {
        // Outputs checked against PostgreSQL 15.
        with_zone("UTC");
        let out = |s: &str| parse_text(s, SqlType::TimestampTz).unwrap().to_text().unwrap();
        assert_eq!(out("2024-03-01 10:00:00+02"), "2024-03-01 08:00:00+00");
        assert_eq!(out("2024-03-01 10:00:00Z"), "2024-03-01 10:00:00+00");
        assert_eq!(out("2024-03-01 10:00:00 Europe/Paris"), "2024-03-01 09:00:00+00");
        assert_eq!(out("2024-03-01 10:00:00.123456+05:30"), "2024-03-01 04:30:00.123456+00");
        with_zone("Asia/Kolkata");
        assert_eq!(out("2024-03-01 10:00:00.5"), "2024-03-01 10:00:00.5+05:30");
        with_zone("Europe/Paris");
        assert_eq!(out("2024-03-01 10:00:00"), "2024-03-01 10:00:00+01");
        assert_eq!(out("2024-03-31 02:30:00"), "2024-03-31 03:30:00+02");
        assert_eq!(out("2024-10-27 02:30:00"), "2024-10-27 02:30:00+01");
        assert_eq!(out("2024-03-01T10:00:00+0530"), "2024-03-01 05:30:00+01");
        with_zone("Africa/Monrovia");
        assert_eq!(out("1960-07-01 10:00:00+00"), "1960-07-01 09:15:30-00:44:30");
        with_zone("UTC");
    }

    #[test]
    fn bad_text_gets_postgresql_codes() {
        let code = |s: &str| parse_text(s, SqlType::TimestampTz).unwrap_err().code;
        assert_eq!(code("garbage"), "22007");
        assert_eq!(code("2024-13-01 00:00"), "22008");
        assert_eq!(code("2024-02-30"), "22008");
        assert_eq!(code("2024-03-01 10:00:00 Mars/X"), "22023");
        assert_eq!(parse_text("10000000-01-01", SqlType::Timestamp).unwrap_err().code, "22008");
    }
}
