//! Text input of `date`, `timestamp` and `timestamptz`: ISO dates with an optional time and
//! an optional zone.
//!
//! ```text
//!  2024-03-01                      date; a timestamp at midnight
//!  2024-03-01 10:00[:00[.123456]]  (or T between)
//!  ... +02  +0530  +05:30  -08:00:00  Z        offsets (east positive)
//!  ... UTC  GMT  Europe/Paris                   zone names, after a space
//!  epoch  now  today  tomorrow  yesterday       special words
//! ```
//!
//! A zone is read by `timestamptz` and ignored by `timestamp` and `date`, as PostgreSQL
//! does. Errors are PostgreSQL's: 22007 `invalid input syntax for type ...` when the text
//! is no date, 22008 `date/time field value out of range` for a month 13 or a February 30
//! (with its DateStyle hint), 22008 `timestamp out of range` past year 294276, 22023
//! `time zone "..." not recognized` for an unknown zone name. Years before 1 (BC) and
//! `infinity` are not read.

use super::zone::{self, Zone};
use crate::error::SqlError;
use crate::interval::{USECS_PER_DAY, USECS_PER_HOUR, USECS_PER_MINUTE};
use crate::types::{days_from_civil, SqlType};

/// A zone written in the text.
pub enum WrittenZone {
    Offset(i32),
    Named(Zone),
}

/// What the text said: local microseconds since 1970 and the zone, if any.
pub struct Parsed {
    pub local: i64,
    pub zone: Option<WrittenZone>,
}

/// The largest year PostgreSQL's timestamps reach.
const YEAR_MAX: i64 = 294_276;

fn invalid(ty: SqlType, s: &str) -> SqlError {
    SqlError::new("22007", format!("invalid input syntax for type {}: \"{s}\"", ty.display()))
}

fn field_range(s: &str) -> SqlError {
    SqlError::new("22008", format!("date/time field value out of range: \"{s}\""))
}

/// Parses `s` for a value of type `ty` (which names it in errors). `now` is the
/// transaction's start (for `now`, `today`, ...), in UTC.
pub fn parse(s: &str, ty: SqlType, now: i64) -> Result<Parsed, SqlError> {
    let t = s.trim();
    let special = |local: i64| Ok(Parsed { local, zone: None });
    let today = || zone::session().to_local(now).div_euclid(USECS_PER_DAY) * USECS_PER_DAY;
    match t.to_ascii_lowercase().as_str() {
        "epoch" => return Ok(Parsed { local: 0, zone: Some(WrittenZone::Offset(0)) }),
        "now" => return special(zone::session().to_local(now)),
        "today" => return special(today()),
        "tomorrow" => return special(today() + USECS_PER_DAY),
        "yesterday" => return special(today() - USECS_PER_DAY),
        _ => {}
    }
    let bad = || invalid(ty, s);
    let date_end = t.find([' ', 'T', 't']).unwrap_or(t.len());
    let (date, rest) = t.split_at(date_end);
    let mut it = date.split('-');
    let (Some(y), Some(m), Some(d), None) = (it.next(), it.next(), it.next(), it.next()) else { return Err(bad()) };
    let digits = |x: &str| !x.is_empty() && x.len() <= 9 && x.bytes().all(|b| b.is_ascii_digit());
    if !digits(y) || !digits(m) || !digits(d) || y.len() < 3 {
        return Err(bad());
    }
    let (y, m, d): (i64, u32, u32) =
        (y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?, d.parse().map_err(|_| bad())?);
    if y == 0 {
        return Err(bad());
    }
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return Err(field_range(s).with_hint("Perhaps you need a different \"datestyle\" setting."));
    }
    if y > YEAR_MAX {
        return Err(SqlError::new("22008", format!("{} out of range: \"{s}\"", range_name(ty))));
    }
    let rest = rest.strip_prefix(['T', 't']).unwrap_or(rest).trim_start();
    let (time, zone) = split_zone(rest).ok_or_else(bad)?;
    let micros = if time.is_empty() { 0 } else { clock(time).ok_or_else(bad)?.map_err(|()| field_range(s))? };
    let zone = match zone {
        None => None,
        Some(z) => Some(written_zone(z).ok_or_else(bad)?.map_err(|name| {
            SqlError::new("22023", format!("time zone \"{}\" not recognized", name.to_ascii_lowercase()))
        })?),
    };
    Ok(Parsed { local: days_from_civil(y, m, d) * USECS_PER_DAY + micros, zone })
}

fn range_name(ty: SqlType) -> &'static str {
    match ty {
        SqlType::Date => "date",
        _ => "timestamp",
    }
}

pub fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// Splits `10:00:00+02` / `10:00 Europe/Paris` / `+02` into the time and the zone's text.
fn split_zone(rest: &str) -> Option<(&str, Option<&str>)> {
    if rest.is_empty() {
        return Some(("", None));
    }
    if let Some(sp) = rest.find(' ') {
        let (time, zone) = (&rest[..sp], rest[sp..].trim());
        if time.starts_with(|c: char| c.is_ascii_digit()) {
            return match split_zone(time)? {
                (t, None) => Some((t, Some(zone))),
                _ => None,
            };
        }
        return None;
    }
    if rest.starts_with(|c: char| c.is_ascii_alphabetic() || c == '+' || c == '-') {
        return Some(("", Some(rest)));
    }
    match rest.find(['+', '-', 'Z', 'z']) {
        Some(i) => Some((&rest[..i], Some(&rest[i..]))),
        None => Some((rest, None)),
    }
}

/// `H:MM[:SS[.f]]` as microseconds; `Err` for a field out of range.
fn clock(time: &str) -> Option<Result<i64, ()>> {
    let mut parts = time.split(':');
    let h = parts.next()?;
    let mi = parts.next()?;
    let sec = parts.next().unwrap_or("0");
    if parts.next().is_some() {
        return None;
    }
    let int = |x: &str| {
        (!x.is_empty() && x.len() <= 2 && x.bytes().all(|b| b.is_ascii_digit()))
            .then(|| x.parse::<i64>().ok())
            .flatten()
    };
    let (h, mi) = (int(h)?, int(mi)?);
    let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
    let whole = int(whole)?;
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Fractions round to the microsecond.
    let mut f: String = frac.chars().take(7).collect();
    while f.len() < 7 {
        f.push('0');
    }
    let tenths_of_us: i64 = f.parse().ok()?;
    let us = (tenths_of_us + 5) / 10;
    let micros = h * USECS_PER_HOUR + mi * USECS_PER_MINUTE + whole * 1_000_000 + us;
    if h > 24 || mi > 59 || whole > 60 || micros > 24 * USECS_PER_HOUR {
        return Some(Err(()));
    }
    Some(Ok(micros))
}

/// A zone's text: an offset (`+02`, `+0530`, `-08:00`, `Z`) or a name. `None` for a
/// malformed offset, `Some(Err(name))` for an unknown name.
fn written_zone(z: &str) -> Option<Result<WrittenZone, &str>> {
    if let Some(body) = z.strip_prefix('+').map(|b| (1, b)).or_else(|| z.strip_prefix('-').map(|b| (-1, b))) {
        let (sign, body) = body;
        let (h, m, s) = match body.split(':').collect::<Vec<_>>().as_slice() {
            [hm] if hm.len() == 4 => (&hm[..2], &hm[2..], "0"),
            [h] => (*h, "0", "0"),
            [h, m] => (*h, *m, "0"),
            [h, m, s] => (*h, *m, *s),
            _ => return None,
        };
        let num =
            |x: &str| (x.len() <= 2 && x.bytes().all(|b| b.is_ascii_digit())).then(|| x.parse::<i32>().ok()).flatten();
        let (h, m, s) = (num(h)?, num(m)?, num(s)?);
        if h > 15 || m > 59 || s > 59 {
            return None;
        }
        return Some(Ok(WrittenZone::Offset(sign * (h * 3600 + m * 60 + s))));
    }
    Some(zone::from_text(z).map(WrittenZone::Named).ok_or(z))
}

/// The instant of parsed text read as a `timestamptz`: its zone, else the session's.
pub fn instant(p: &Parsed) -> i64 {
    match &p.zone {
        Some(WrittenZone::Offset(o)) => p.local - i64::from(*o) * 1_000_000,
        Some(WrittenZone::Named(z)) => z.to_utc(p.local),
        None => zone::session().to_utc(p.local),
    }
}
