//! The date/time operators, as PostgreSQL 15 defines them:
//!
//! ```text
//!  timestamp[tz] ± interval   -> same type   months (clamped to the month's end), then days,
//!                                            then microseconds; for timestamptz the months
//!                                            and days move the session zone's wall clock
//!                                            (+ '1 day' across a DST change keeps 12:00)
//!  timestamp[tz] - timestamp[tz] -> interval  microseconds, whole 24 hours as days
//!  date ± integer -> date; date - date -> integer; date ± interval -> timestamp
//!  interval ± interval; interval * / number; number * interval
//! ```
//!
//! An untyped literal on the other side is read as what the operator needs (`ts + '1 day'`
//! is an interval, `date - '2024-01-01'` a date).

use sqlparser::ast::BinaryOperator as B;

use super::{checked_timestamp, difference, zone};
use crate::error::SqlError;
use crate::interval::{out_of_range, Interval, USECS_PER_DAY};
use crate::types::{civil_from_days, days_from_civil, Datum, SqlType};

/// `l op r` when either side is a date/time value; `None` to leave it to numeric arithmetic.
pub fn arith(op: &B, l: &Datum, r: &Datum) -> Option<Result<Datum, SqlError>> {
    use Datum as D;
    let is_dt = |d: &Datum| matches!(d, D::Date(_) | D::Timestamp(_) | D::TimestampTz(_) | D::Interval(_));
    if !is_dt(l) && !is_dt(r) {
        return None;
    }
    let (l, r) = match untyped(op, l, r) {
        Ok(p) => p,
        Err(e) => return Some(Err(e)),
    };
    Some(match (op, &l, &r) {
        (B::Plus, D::Timestamp(t), D::Interval(i)) | (B::Plus, D::Interval(i), D::Timestamp(t)) => {
            add_local(*t, *i).map(D::Timestamp)
        }
        (B::Minus, D::Timestamp(t), D::Interval(i)) => neg(*i).and_then(|i| add_local(*t, i)).map(D::Timestamp),
        (B::Plus, D::TimestampTz(t), D::Interval(i)) | (B::Plus, D::Interval(i), D::TimestampTz(t)) => {
            add_zoned(*t, *i).map(D::TimestampTz)
        }
        (B::Minus, D::TimestampTz(t), D::Interval(i)) => neg(*i).and_then(|i| add_zoned(*t, i)).map(D::TimestampTz),
        (B::Plus, D::Date(d), D::Interval(i)) | (B::Plus, D::Interval(i), D::Date(d)) => {
            add_local(i64::from(*d) * USECS_PER_DAY, *i).map(D::Timestamp)
        }
        (B::Minus, D::Date(d), D::Interval(i)) => {
            neg(*i).and_then(|i| add_local(i64::from(*d) * USECS_PER_DAY, i)).map(D::Timestamp)
        }
        (B::Minus, D::Timestamp(a), D::Timestamp(b)) => difference(*a, *b).map(D::Interval),
        (B::Minus, D::TimestampTz(_) | D::Timestamp(_) | D::Date(_), D::TimestampTz(_) | D::Timestamp(_))
        | (B::Minus, D::TimestampTz(_), D::Date(_)) => match (instant(&l), instant(&r)) {
            (Some(a), Some(b)) if matches!((&l, &r), (D::TimestampTz(_), _) | (_, D::TimestampTz(_))) => {
                difference(a, b).map(D::Interval)
            }
            // date - timestamp: both wall-clock.
            _ => difference(local(&l), local(&r)).map(D::Interval),
        },
        (B::Plus | B::Minus, D::Date(d), D::Int(n)) => date_plus(*d, if *op == B::Plus { *n } else { -*n }),
        (B::Plus, D::Int(n), D::Date(d)) => date_plus(*d, *n),
        (B::Minus, D::Date(a), D::Date(b)) => Ok(D::Int(i64::from(*a) - i64::from(*b))),
        (B::Plus, D::Interval(a), D::Interval(b)) => a.checked_add(*b).map(D::Interval).ok_or_else(out_of_range),
        (B::Minus, D::Interval(a), D::Interval(b)) => a.checked_sub(*b).map(D::Interval).ok_or_else(out_of_range),
        (B::Multiply, D::Interval(i), n) | (B::Multiply, n, D::Interval(i)) if number(n).is_some() => {
            number(n).and_then(|f| i.mul_f64(f)).map(D::Interval).ok_or_else(out_of_range)
        }
        (B::Divide, D::Interval(i), n) if number(n).is_some() => {
            i.div_f64(number(n).unwrap_or(1.0)).and_then(|r| r.map(D::Interval).ok_or_else(out_of_range))
        }
        _ => Err(SqlError::new(
            "42883",
            format!("operator does not exist: {} {op} {}", l.natural_type().display(), r.natural_type().display()),
        )),
    })
}

fn neg(i: Interval) -> Result<Interval, SqlError> {
    i.checked_neg().ok_or_else(out_of_range)
}

fn number(d: &Datum) -> Option<f64> {
    match d {
        Datum::Int(x) => Some(*x as f64),
        Datum::Float(f) => Some(*f),
        Datum::Num(n) => Some(n.to_f64()),
        _ => None,
    }
}

fn instant(d: &Datum) -> Option<i64> {
    match super::coerce(d, SqlType::TimestampTz)? {
        Ok(Datum::TimestampTz(u)) => Some(u),
        _ => None,
    }
}

fn local(d: &Datum) -> i64 {
    match d {
        Datum::Date(x) => i64::from(*x) * USECS_PER_DAY,
        Datum::Timestamp(t) => *t,
        Datum::TimestampTz(u) => zone::session().to_local(*u),
        _ => 0,
    }
}

/// Reads an untyped string operand as what the other side's operator takes.
fn untyped(op: &B, l: &Datum, r: &Datum) -> Result<(Datum, Datum), SqlError> {
    let read = |s: &str, other: &Datum| -> Result<Datum, SqlError> {
        let same = other.natural_type();
        match (op, other) {
            (B::Minus, Datum::Date(_) | Datum::Timestamp(_) | Datum::TimestampTz(_)) => {
                // `ts - 'text'`: a value of the same type if it reads as one, else an interval.
                super::parse_text(s, same).or_else(|_| crate::interval::parse(s, None).map(Datum::Interval))
            }
            (B::Plus, Datum::Date(_) | Datum::Timestamp(_) | Datum::TimestampTz(_)) | (_, Datum::Interval(_))
                if !matches!(op, B::Multiply | B::Divide) =>
            {
                crate::interval::parse(s, None).map(Datum::Interval)
            }
            _ => crate::types::parse_text(s, SqlType::Float8),
        }
    };
    Ok(match (l, r) {
        (Datum::Text(s), other) => (read(s, other)?, other.clone()),
        (other, Datum::Text(s)) => (other.clone(), read(s, other)?),
        _ => (l.clone(), r.clone()),
    })
}

/// `date + n` days (22008 `date out of range` past the type's range).
fn date_plus(d: i32, n: i64) -> Result<Datum, SqlError> {
    i64::from(d)
        .checked_add(n)
        .and_then(|x| i32::try_from(x).ok())
        .map(Datum::Date)
        .ok_or_else(|| SqlError::new("22008", "date out of range"))
}

/// Moves a wall-clock date by `months`, keeping the day unless the new month is shorter.
pub fn add_months(local: i64, months: i32) -> Option<i64> {
    if months == 0 {
        return Some(local);
    }
    let day = local.div_euclid(USECS_PER_DAY);
    let time = local.rem_euclid(USECS_PER_DAY);
    let (y, m, d) = civil_from_days(day);
    let total = y.checked_mul(12)?.checked_add(i64::from(m) - 1)?.checked_add(i64::from(months))?;
    let (ny, nm) = (total.div_euclid(12), (total.rem_euclid(12) + 1) as u32);
    let nd = d.min(super::input::days_in_month(ny, nm));
    days_from_civil(ny, nm, nd).checked_mul(USECS_PER_DAY)?.checked_add(time)
}

/// `timestamp + interval`: months, days, then microseconds on the wall clock.
pub fn add_local(t: i64, i: Interval) -> Result<i64, SqlError> {
    let t = add_months(t, i.months)
        .and_then(|t| t.checked_add(i64::from(i.days).checked_mul(USECS_PER_DAY)?))
        .and_then(|t| t.checked_add(i.micros));
    checked_timestamp(t)
}

/// `timestamptz + interval`: months and days on the session zone's wall clock (read back
/// as PostgreSQL does across DST), then microseconds on the instant.
pub fn add_zoned(u: i64, i: Interval) -> Result<i64, SqlError> {
    let z = zone::session();
    let mut u = Some(u);
    if i.months != 0 {
        u = u.and_then(|u| add_months(z.to_local(u), i.months)).map(|l| z.to_utc(l));
    }
    if i.days != 0 {
        u = u
            .and_then(|u| z.to_local(u).checked_add(i64::from(i.days).checked_mul(USECS_PER_DAY)?))
            .map(|l| z.to_utc(l));
    }
    checked_timestamp(u.and_then(|u| u.checked_add(i.micros)))
}

/// The type `a op b` has when one side is a date/time type (for RowDescription).
pub fn infer_arith(op: &B, a: SqlType, b: SqlType) -> Option<SqlType> {
    use SqlType as T;
    let dt = |t: T| matches!(t, T::Date | T::Timestamp | T::TimestampTz | T::Interval);
    if !dt(a) && !dt(b) {
        return None;
    }
    Some(match (op, a, b) {
        (B::Minus, T::Date, T::Date) => T::Int4,
        (B::Minus, T::Timestamp | T::TimestampTz | T::Date, T::Timestamp | T::TimestampTz) => T::Interval,
        (B::Minus, T::TimestampTz, T::Date) => T::Interval,
        (_, T::Date, T::Interval) | (_, T::Interval, T::Date) => T::Timestamp,
        (_, T::Date, _) | (_, _, T::Date) => T::Date,
        (_, T::TimestampTz, _) | (_, _, T::TimestampTz) => T::TimestampTz,
        (_, T::Timestamp, _) | (_, _, T::Timestamp) => T::Timestamp,
        _ => T::Interval,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datetime::parse_text;

    fn d(s: &str, ty: SqlType) -> Datum {
        parse_text(s, ty).unwrap()
    }

    #[test]
    fn month_arithmetic_clamps_to_the_month_end() {
        let t = d("2024-01-31", SqlType::Timestamp);
        let mon = Datum::Interval(crate::interval::parse("1 mon", None).unwrap());
        let r = arith(&B::Plus, &t, &mon).unwrap().unwrap();
        assert_eq!(r.to_text().unwrap(), "2024-02-29 00:00:00");
        let r = arith(&B::Minus, &d("2024-03-01", SqlType::Date), &d("2024-02-01", SqlType::Date)).unwrap().unwrap();
        assert_eq!(r, Datum::Int(29));
    }

    #[test]
    fn differences_justify_hours() {
        let a = d("2024-03-01 10:00", SqlType::Timestamp);
        let b = d("2024-02-28 09:00", SqlType::Timestamp);
        assert_eq!(arith(&B::Minus, &a, &b).unwrap().unwrap().to_text().unwrap(), "2 days 01:00:00");
        let c = d("2024-03-02 01:00", SqlType::Timestamp);
        assert_eq!(
            arith(&B::Minus, &d("2024-03-01", SqlType::Timestamp), &c).unwrap().unwrap().to_text().unwrap(),
            "-1 days -01:00:00"
        );
    }
}
