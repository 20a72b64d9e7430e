//! Time zones: the session's `TimeZone`, and local time <-> UTC in a zone.
//!
//! A zone is a fixed offset (`SET TIME ZONE -3`, `'+05:30'` numeric hours, `INTERVAL
//! '-03:00' HOUR TO MINUTE`, POSIX strings without DST rules such as `'UTC+3'`) or an IANA
//! zone from the database `jiff` bundles into the binary (`Europe/Paris`, `UTC`, `EST5EDT`).
//!
//! Sign conventions, as PostgreSQL 15 has them (checked there):
//!
//! ```text
//!  SET TIME ZONE -3                       3 hours west; SHOW says <-03>+03
//!  SET TimeZone = '-3', = 5.5             numeric hours, ISO sign: east positive (<+05:30>-05:30)
//!  SET TIME ZONE INTERVAL '-03:00' HOUR TO MINUTE     west, <-03>+03
//!  SET TimeZone = 'UTC+3'                 POSIX sign: 3 hours WEST of UTC (prints -03)
//! ```
//!
//! The session's zone lives in a thread-local ([`set_session`], read by [`session`]): each
//! session has a thread of its own (see `crate::session`), the text output of a
//! `timestamptz` runs on it, and the session sets it from its settings map whenever they
//! change, so map and zone never disagree.
//!
//! Local to UTC follows PostgreSQL's `DetermineTimeZoneOffset`: a local time skipped by a
//! spring-forward transition is read with the offset from before it (02:30 in Paris on
//! 2024-03-31 is 01:30 UTC, shown 03:30+02); one repeated by a fall-back transition with the
//! offset from after it (02:30 on 2024-10-27 is 02:30+01).

use std::cell::RefCell;

use jiff::tz::{AmbiguousOffset, TimeZone};

use crate::error::SqlError;
use crate::interval::{USECS_PER_HOUR, USECS_PER_SEC};
use crate::types::{civil_from_days, days_from_civil};

/// A zone: fixed (seconds east of UTC) or from the time-zone database.
#[derive(Clone, Debug)]
pub enum Zone {
    Fixed(i32),
    Tz(TimeZone),
}

thread_local! {
    static SESSION: RefCell<Zone> = const { RefCell::new(Zone::Fixed(0)) };
}

/// The session's zone (UTC until the session sets one).
pub fn session() -> Zone {
    SESSION.with(|z| z.borrow().clone())
}

/// Makes the zone a settings map names the session's (called when settings change).
pub fn set_session(settings: &std::collections::BTreeMap<String, String>) {
    let z = settings.get("timezone").and_then(|v| parse_setting(v).ok()).map_or(Zone::Fixed(0), |(_, z)| z);
    SESSION.with(|s| *s.borrow_mut() = z);
}

/// The severity that marks a [`crate::session::Notice`] as a ParameterStatus message (the
/// wire sends it as one, not as a notice); its message is the new `TimeZone`.
const PARAMETER_STATUS: &str = "PARAMETER STATUS";

/// After SET or RESET: a ParameterStatus for `TimeZone` when it changed (`before` is its
/// value before), as PostgreSQL reports the parameter to the client.
pub fn report(
    before: Option<String>,
    settings: &std::collections::BTreeMap<String, String>,
    notices: &mut Vec<crate::session::Notice>,
) {
    let now = settings.get("timezone");
    if now.is_some() && now != before.as_ref() {
        let message = now.cloned().unwrap_or_default();
        notices.push(crate::session::Notice { severity: PARAMETER_STATUS, code: "", message, detail: None });
    }
}

/// The ParameterStatus a notice [`report`] made stands for.
pub fn parameter_status(n: &crate::session::Notice) -> Option<(&'static str, &str)> {
    (n.severity == PARAMETER_STATUS).then_some(("TimeZone", n.message.as_str()))
}

/// 22023 `invalid value for parameter "TimeZone": "..."`.
fn bad_setting(value: &str) -> SqlError {
    SqlError::new("22023", format!("invalid value for parameter \"TimeZone\": \"{value}\""))
}

/// A fixed zone's name as PostgreSQL shows it: `<+05:30>-05:30` (the abbreviation, then the
/// POSIX offset with the opposite sign).
fn fixed_name(east: i32) -> String {
    let hm = |s: i32| {
        let a = s.unsigned_abs();
        let (h, m, sec) = (a / 3600, a / 60 % 60, a % 60);
        let sign = if s < 0 { '-' } else { '+' };
        match (m, sec) {
            (0, 0) => format!("{sign}{h:02}"),
            (_, 0) => format!("{sign}{h:02}:{m:02}"),
            _ => format!("{sign}{h:02}:{m:02}:{sec:02}"),
        }
    };
    format!("<{}>{}", hm(east), hm(-east))
}

/// Reads a `SET TimeZone` value: what SHOW will print and the zone. See the module doc for
/// the forms.
pub fn parse_setting(value: &str) -> Result<(String, Zone), SqlError> {
    let v = value.trim();
    let lower = v.to_ascii_lowercase();
    if lower == "local" || lower == "default" {
        return Ok(("UTC".into(), Zone::Fixed(0)));
    }
    // Numeric hours, east positive.
    if let Ok(h) = v.parse::<f64>() {
        let secs = (h * 3600.0).round();
        if !h.is_finite() || secs.abs() > 15.0 * 3600.0 + 59.0 * 60.0 {
            return Err(bad_setting(value));
        }
        let east = secs as i32;
        return Ok((fixed_name(east), Zone::Fixed(east)));
    }
    // What SHOW printed for a fixed offset, read back (the session re-reads its settings).
    if let Some((_, posix)) = v.strip_prefix('<').and_then(|r| r.split_once('>')) {
        let east = posix_fixed(&format!("FIX{posix}")).ok_or_else(|| bad_setting(value))?;
        return Ok((fixed_name(east), Zone::Fixed(east)));
    }
    if let Some(iv) = lower.strip_prefix("interval") {
        return interval_setting(value, iv);
    }
    if let Some(east) = posix_fixed(v) {
        return Ok((v.to_ascii_uppercase(), Zone::Fixed(east)));
    }
    let tz = named(v).ok_or_else(|| bad_setting(value))?;
    let shown = match tz.iana_name() {
        Some(n) if !n.eq_ignore_ascii_case(v) => v.to_string(),
        Some(n) => n.to_string(),
        None => v.to_string(),
    };
    Ok((shown, Zone::Tz(tz)))
}

/// `INTERVAL '-03:00' HOUR TO MINUTE` as SET TIME ZONE's value (its text as the parser
/// prints it); west of UTC is negative, as for a numeric value.
fn interval_setting(value: &str, rest: &str) -> Result<(String, Zone), SqlError> {
    let inner = rest.split('\'').nth(1).ok_or_else(|| bad_setting(value))?;
    let unit_word = rest.rsplit('\'').next().unwrap_or("").split_whitespace().next().map(str::to_string);
    let iv = crate::interval::parse(inner, unit_word.as_deref()).map_err(|_| bad_setting(value))?;
    if iv.months != 0 {
        return Err(bad_setting(value).with_detail("Cannot specify months in time zone interval."));
    }
    if iv.days != 0 {
        return Err(bad_setting(value).with_detail("Cannot specify days in time zone interval."));
    }
    let east = i32::try_from(iv.micros / USECS_PER_SEC).map_err(|_| bad_setting(value))?;
    if i64::from(east.unsigned_abs()) * USECS_PER_SEC > 15 * USECS_PER_HOUR + 59 * 60 * USECS_PER_SEC {
        return Err(bad_setting(value));
    }
    Ok((fixed_name(east), Zone::Fixed(east)))
}

/// A POSIX zone without DST rules, `ABC[+|-]h[:mm[:ss]]`: the offset is hours WEST of UTC.
fn posix_fixed(v: &str) -> Option<i32> {
    let split = v.find(|c: char| !c.is_ascii_alphabetic())?;
    let (abbr, off) = v.split_at(split);
    if abbr.len() < 3 || off.is_empty() {
        return None;
    }
    let (sign, body) = match off.as_bytes()[0] {
        b'+' => (1, &off[1..]),
        b'-' => (-1, &off[1..]),
        _ => (1, off),
    };
    let mut it = body.split(':');
    let mut secs = 0i32;
    for (i, mult) in [3600, 60, 1].into_iter().enumerate() {
        match it.next() {
            Some(p) if !p.is_empty() && p.len() <= 2 && p.bytes().all(|b| b.is_ascii_digit()) => {
                secs += p.parse::<i32>().ok()? * mult
            }
            None if i > 0 => break,
            _ => return None,
        }
    }
    if it.next().is_some() || secs > 24 * 3600 {
        return None;
    }
    Some(-sign * secs)
}

/// An IANA zone by name, any case (`europe/paris`); `UTC`, `GMT` and `Z`-less aliases come
/// from the database too.
pub fn named(name: &str) -> Option<TimeZone> {
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    TimeZone::get(name).ok()
}

/// Microseconds since 1970 (UTC) clamped into what the zone database can look up.
fn jiff_instant(utc_micros: i64) -> jiff::Timestamp {
    let lo = jiff::Timestamp::MIN.as_microsecond();
    let hi = jiff::Timestamp::MAX.as_microsecond();
    jiff::Timestamp::from_microsecond(utc_micros.clamp(lo, hi)).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

impl Zone {
    /// Seconds east of UTC at the instant `utc_micros`.
    pub fn offset_at(&self, utc_micros: i64) -> i32 {
        match self {
            Zone::Fixed(s) => *s,
            Zone::Tz(tz) => tz.to_offset(jiff_instant(utc_micros)).seconds(),
        }
    }

    /// Local wall-clock microseconds at the instant `utc_micros`.
    pub fn to_local(&self, utc_micros: i64) -> i64 {
        utc_micros.saturating_add(i64::from(self.offset_at(utc_micros)) * USECS_PER_SEC)
    }

    /// The instant of a local wall-clock time (see the module doc for gaps and folds).
    pub fn to_utc(&self, local_micros: i64) -> i64 {
        let off = match self {
            Zone::Fixed(s) => *s,
            Zone::Tz(tz) => match civil(local_micros) {
                Some(dt) => match tz.to_ambiguous_timestamp(dt).offset() {
                    AmbiguousOffset::Unambiguous { offset } => offset.seconds(),
                    AmbiguousOffset::Gap { before, .. } => before.seconds(),
                    AmbiguousOffset::Fold { after, .. } => after.seconds(),
                },
                // Outside the database's years: the offset at its edge.
                None => tz.to_offset(jiff_instant(local_micros)).seconds(),
            },
        };
        local_micros.saturating_sub(i64::from(off) * USECS_PER_SEC)
    }
}

/// A local time as jiff's civil date-time (whole seconds suffice for zone lookups).
fn civil(local_micros: i64) -> Option<jiff::civil::DateTime> {
    let day = local_micros.div_euclid(crate::interval::USECS_PER_DAY);
    let secs = local_micros.rem_euclid(crate::interval::USECS_PER_DAY) / USECS_PER_SEC;
    let (y, m, d) = civil_from_days(day);
    let y = i16::try_from(y).ok().filter(|y| (-9999..=9999).contains(y))?;
    jiff::civil::DateTime::new(y, m as i8, d as i8, (secs / 3600) as i8, (secs / 60 % 60) as i8, (secs % 60) as i8, 0)
        .ok()
}

/// `+HH`, `+HH:MM` or `+HH:MM:SS`, as PostgreSQL appends an offset to a timestamptz.
pub fn offset_text(east: i32) -> String {
    let a = east.unsigned_abs();
    let sign = if east < 0 { '-' } else { '+' };
    let (h, m, s) = (a / 3600, a / 60 % 60, a % 60);
    match (m, s) {
        (0, 0) => format!("{sign}{h:02}"),
        (_, 0) => format!("{sign}{h:02}:{m:02}"),
        _ => format!("{sign}{h:02}:{m:02}:{s:02}"),
    }
}

/// Days since 1970 of a civil date, for callers that build local times.
pub fn local_midnight(y: i64, m: u32, d: u32) -> i64 {
    days_from_civil(y, m, d) * crate::interval::USECS_PER_DAY
}

/// A zone from a timestamp's text (`UTC`, `Z`, `Europe/Paris`); `None` when unknown.
pub fn from_text(name: &str) -> Option<Zone> {
    match name.to_ascii_lowercase().as_str() {
        "z" | "utc" | "gmt" | "zulu" | "ut" => Some(Zone::Fixed(0)),
        _ => named(name).map(Zone::Tz),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_show_as_postgresql_shows_them() {
        // Each checked against PostgreSQL 15.
        let shown = |v: &str| parse_setting(v).unwrap().0;
        assert_eq!(shown("-3"), "<-03>+03");
        assert_eq!(shown("+3"), "<+03>-03");
        assert_eq!(shown("5.5"), "<+05:30>-05:30");
        assert_eq!(shown("15"), "<+15>-15");
        assert_eq!(shown("UTC+3"), "UTC+3");
        assert_eq!(shown("europe/paris"), "Europe/Paris");
        assert_eq!(shown("INTERVAL '-03:00' HOUR TO MINUTE"), "<-03>+03");
        assert_eq!(shown("<+05:30>-05:30"), "<+05:30>-05:30");
        assert_eq!(parse_setting("Mars/Olympus").unwrap_err().code, "22023");
        assert_eq!(parse_setting("INTERVAL '1 day'").unwrap_err().code, "22023");
    }

    #[test]
    fn posix_strings_count_west() {
        let Zone::Fixed(e) = parse_setting("UTC+3").unwrap().1 else { panic!("fixed") };
        assert_eq!(e, -3 * 3600);
        let Zone::Fixed(e) = parse_setting("-3").unwrap().1 else { panic!("fixed") };
        assert_eq!(e, -3 * 3600);
    }

    #[test]
    fn gaps_read_with_the_offset_before_and_folds_with_the_one_after() {
        let paris = Zone::Tz(named("Europe/Paris").unwrap());
        let h = USECS_PER_HOUR;
        let gap = local_midnight(2024, 3, 31) + 2 * h + h / 2;
        assert_eq!(paris.to_utc(gap), local_midnight(2024, 3, 31) + h + h / 2);
        let fold = local_midnight(2024, 10, 27) + 2 * h + h / 2;
        assert_eq!(paris.to_utc(fold), local_midnight(2024, 10, 27) + h + h / 2);
        assert_eq!(offset_text(-(2 * 3600 + 1800)), "-02:30");
        assert_eq!(offset_text(-(44 * 60 + 30)), "-00:44:30");
    }
}
