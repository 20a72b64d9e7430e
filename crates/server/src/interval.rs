//! The `interval` type: PostgreSQL's three-field span, its text forms, binary form and
//! arithmetic.
//!
//! An interval is `months`, `days` and `micros` kept apart, as PostgreSQL keeps them
//! (`src/backend/utils/adt/timestamp.c`, `datetime.c`): a month has no fixed number of days
//! and a day, across a DST change, no fixed number of hours, so `1 mon`, `30 days` and
//! `720:00:00` are three different values that add to a timestamp differently.
//!
//! ```text
//!  '1 year 2 mons 3 days 04:05:06.5'  ->  months 14, days 3, micros 14_706_500_000
//!  binary (interval_send)             ->  i64 micros, i32 days, i32 months, big-endian
//! ```
//!
//! **Ordering and equality** compare the span with 30-day months and 24-hour days
//! ([`Interval::span`]), so `'1 mon' = '30 days'` is true while both keep their own text.
//!
//! **Storage.** A table column of type interval is stored as the engine's `Bytea`, the 16
//! bytes of the binary form. Byte order is not the span's order and equal spans have unlike
//! bytes, so an index over an interval column would order and match wrongly: CREATE INDEX,
//! PRIMARY KEY and UNIQUE on one are refused ([`refuse_key`]). A WHERE on such a column is
//! evaluated row by row, with the right semantics.
//!
//! **Text.** Input takes PostgreSQL's "postgres" forms (`1 day 02:00:00`, `2 hours`,
//! `1 mon`, `-1 days +02:00`, `@ 1 day ago`, fractions that cascade down: `1.5 years` is
//! `1 year 6 mons`) and ISO 8601 designators (`P1Y2M3DT4H5M6.5S`, `PT0S`, weeks `P2W`).
//! Output is `IntervalStyle = postgres`: `1 year 2 mons 3 days 04:05:06.5`, `-00:00:01`,
//! `-1 days +02:00:00`.

use crate::error::SqlError;

pub const USECS_PER_SEC: i64 = 1_000_000;
pub const USECS_PER_MINUTE: i64 = 60 * USECS_PER_SEC;
pub const USECS_PER_HOUR: i64 = 60 * USECS_PER_MINUTE;
pub const USECS_PER_DAY: i64 = 24 * USECS_PER_HOUR;
/// The month length interval comparison and `justify_days` assume.
pub const DAYS_PER_MONTH: i64 = 30;

/// A PostgreSQL interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

/// 22008 `interval out of range`.
pub fn out_of_range() -> SqlError {
    SqlError::new("22008", "interval out of range")
}

impl Interval {
    pub const ZERO: Interval = Interval { months: 0, days: 0, micros: 0 };

    /// The span in microseconds with 30-day months and 24-hour days: what `<`, `=` and
    /// ORDER BY compare.
    pub fn span(self) -> i128 {
        (i128::from(self.months) * i128::from(DAYS_PER_MONTH) + i128::from(self.days)) * i128::from(USECS_PER_DAY)
            + i128::from(self.micros)
    }

    pub fn checked_add(self, o: Interval) -> Option<Interval> {
        Some(Interval {
            months: self.months.checked_add(o.months)?,
            days: self.days.checked_add(o.days)?,
            micros: self.micros.checked_add(o.micros)?,
        })
    }

    pub fn checked_neg(self) -> Option<Interval> {
        Some(Interval {
            months: self.months.checked_neg()?,
            days: self.days.checked_neg()?,
            micros: self.micros.checked_neg()?,
        })
    }

    pub fn checked_sub(self, o: Interval) -> Option<Interval> {
        self.checked_add(o.checked_neg()?)
    }

    /// `interval * factor`: each field scaled, and what a scaled field leaves below its unit
    /// carried down (a month's fraction as 30-day days, a day's as 24-hour time), rounded to
    /// the microsecond, as PostgreSQL's `interval_mul` does.
    pub fn mul_f64(self, factor: f64) -> Option<Interval> {
        if !factor.is_finite() {
            return None;
        }
        let months_f = f64::from(self.months) * factor;
        let days_f = f64::from(self.days) * factor;
        let months = f64_to_i32(months_f.trunc())?;
        let mut days = f64_to_i32(days_f.trunc())?;
        let round_us = |x: f64| (x * 1e6).round_ties_even() / 1e6;
        let month_rest_days = round_us((months_f - f64::from(months)) * DAYS_PER_MONTH as f64);
        let mut rest_secs = round_us((days_f - f64::from(days) + month_rest_days - month_rest_days.trunc()) * 86_400.0);
        if rest_secs.abs() >= 86_400.0 {
            let whole = (rest_secs / 86_400.0).trunc();
            days = days.checked_add(f64_to_i32(whole)?)?;
            rest_secs -= whole * 86_400.0;
        }
        days = days.checked_add(f64_to_i32(month_rest_days.trunc())?)?;
        let micros = (self.micros as f64 * factor + rest_secs * 1e6).round_ties_even();
        if !micros.is_finite() || micros.abs() >= 9.2e18 {
            return None;
        }
        Some(Interval { months, days, micros: micros as i64 })
    }

    /// `interval / divisor` (22012 for zero; `None` on overflow).
    pub fn div_f64(self, divisor: f64) -> Result<Option<Interval>, SqlError> {
        if divisor == 0.0 {
            return Err(SqlError::new("22012", "division by zero"));
        }
        Ok(self.mul_f64(1.0 / divisor).filter(|_| divisor.is_finite()).or_else(|| {
            // 1/divisor loses nothing PostgreSQL keeps for ordinary divisors; an infinite
            // divisor gives zero there too.
            divisor.is_infinite().then_some(Interval::ZERO)
        }))
    }

    /// `justify_hours`: whole 24-hour runs of the time become days, the signs made to agree.
    pub fn justify_hours(self) -> Option<Interval> {
        let mut days = self.days.checked_add(i32::try_from(self.micros / USECS_PER_DAY).ok()?)?;
        let mut micros = self.micros % USECS_PER_DAY;
        if days > 0 && micros < 0 {
            micros += USECS_PER_DAY;
            days -= 1;
        } else if days < 0 && micros > 0 {
            micros -= USECS_PER_DAY;
            days += 1;
        }
        Some(Interval { months: self.months, days, micros })
    }

    /// `justify_days`: whole 30-day runs become months, the signs made to agree.
    pub fn justify_days(self) -> Option<Interval> {
        let mut months = self.months.checked_add(self.days / DAYS_PER_MONTH as i32)?;
        let mut days = self.days % DAYS_PER_MONTH as i32;
        if months > 0 && days < 0 {
            days += DAYS_PER_MONTH as i32;
            months -= 1;
        } else if months < 0 && days > 0 {
            days -= DAYS_PER_MONTH as i32;
            months += 1;
        }
        Some(Interval { months, days, micros: self.micros })
    }

    /// `justify_interval`: both, with one sign across all three fields.
    pub fn justify_interval(self) -> Option<Interval> {
        let mut days = self.days.checked_add(i32::try_from(self.micros / USECS_PER_DAY).ok()?)?;
        let mut micros = self.micros % USECS_PER_DAY;
        let mut months = self.months.checked_add(days / DAYS_PER_MONTH as i32)?;
        days %= DAYS_PER_MONTH as i32;
        if months > 0 && (days < 0 || (days == 0 && micros < 0)) {
            days += DAYS_PER_MONTH as i32;
            months -= 1;
        } else if months < 0 && (days > 0 || (days == 0 && micros > 0)) {
            days -= DAYS_PER_MONTH as i32;
            months += 1;
        }
        if days > 0 && micros < 0 {
            micros += USECS_PER_DAY;
            days -= 1;
        } else if days < 0 && micros > 0 {
            micros -= USECS_PER_DAY;
            days += 1;
        }
        Some(Interval { months, days, micros })
    }

    /// `interval_send`: micros, days, months, big-endian.
    pub fn to_bytes(self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16);
        b.extend_from_slice(&self.micros.to_be_bytes());
        b.extend_from_slice(&self.days.to_be_bytes());
        b.extend_from_slice(&self.months.to_be_bytes());
        b
    }

    /// `interval_recv`; `None` unless exactly 16 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Interval> {
        let b: &[u8; 16] = b.try_into().ok()?;
        let (us, rest) = b.split_at(8);
        let (d, m) = rest.split_at(4);
        Some(Interval {
            micros: i64::from_be_bytes(us.try_into().ok()?),
            days: i32::from_be_bytes(d.try_into().ok()?),
            months: i32::from_be_bytes(m.try_into().ok()?),
        })
    }
}

fn f64_to_i32(x: f64) -> Option<i32> {
    (x.is_finite() && x >= f64::from(i32::MIN) && x <= f64::from(i32::MAX)).then_some(x as i32)
}

impl std::fmt::Display for Interval {
    /// `IntervalStyle = postgres`: nonzero year, month and day parts with their units
    /// (plural unless 1), a `+` before a positive part that follows a negative one, then the
    /// time as `[-|+]HH:MM:SS[.ffffff]` (trailing zeros of the fraction dropped) when it is
    /// nonzero or nothing else was written.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        let mut after_negative = false;
        let parts = [(self.months / 12, "year"), (self.months % 12, "mon"), (self.days, "day")];
        for (v, unit) in parts {
            if v == 0 {
                continue;
            }
            if !out.is_empty() {
                out.push(' ');
            }
            if after_negative && v > 0 {
                out.push('+');
            }
            out.push_str(&format!("{v} {unit}{}", if v == 1 { "" } else { "s" }));
            after_negative = v < 0;
        }
        if out.is_empty() || self.micros != 0 {
            if !out.is_empty() {
                out.push(' ');
            }
            let us = self.micros.unsigned_abs();
            if self.micros < 0 {
                out.push('-');
            } else if after_negative {
                out.push('+');
            }
            let hours = us / USECS_PER_HOUR as u64;
            let mins = us / USECS_PER_MINUTE as u64 % 60;
            let secs = us / USECS_PER_SEC as u64 % 60;
            let frac = us % USECS_PER_SEC as u64;
            out.push_str(&format!("{hours:02}:{mins:02}:{secs:02}"));
            if frac != 0 {
                let digits = format!("{frac:06}");
                out.push('.');
                out.push_str(digits.trim_end_matches('0'));
            }
        }
        f.write_str(&out)
    }
}

/// 22007 for text that is no interval.
fn invalid(s: &str) -> SqlError {
    SqlError::new("22007", format!("invalid input syntax for type interval: \"{s}\""))
}

/// `interval_in`: see the module doc for the forms accepted. `leading` is the unit a bare
/// number means (`INTERVAL '5' HOUR`), seconds when not given.
pub fn parse(s: &str, leading: Option<&str>) -> Result<Interval, SqlError> {
    let t = s.trim().to_ascii_lowercase();
    let mut acc = Acc::default();
    let r = if let Some(iso) = t.strip_prefix('p') {
        parse_iso(iso, &mut acc)
    } else {
        parse_postgres(t.strip_prefix('@').unwrap_or(&t), leading.unwrap_or("second"), &mut acc)
    };
    match r {
        Some(true) => {}
        Some(false) => return Err(SqlError::new("22015", format!("interval field value out of range: \"{s}\""))),
        None => return Err(invalid(s)),
    }
    let iv = Interval {
        months: i32::try_from(acc.months).map_err(|_| out_of_range())?,
        days: i32::try_from(acc.days).map_err(|_| out_of_range())?,
        micros: i64::try_from(acc.micros).map_err(|_| out_of_range())?,
    };
    Ok(if acc.ago { iv.checked_neg().ok_or_else(out_of_range)? } else { iv })
}

/// Fields as they add up while parsing (wide, checked at the end).
#[derive(Default)]
struct Acc {
    months: i128,
    days: i128,
    micros: i128,
    ago: bool,
}

/// What a unit word adds per 1.
enum Unit {
    Months(i64),
    Days(i64),
    Micros(i64),
}

fn unit(word: &str) -> Option<Unit> {
    Some(match word {
        "microsecond" | "microseconds" | "us" | "usec" | "usecs" | "usecond" | "useconds" => Unit::Micros(1),
        "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" | "msecond" | "mseconds" => Unit::Micros(1000),
        "second" | "seconds" | "s" | "sec" | "secs" => Unit::Micros(USECS_PER_SEC),
        "minute" | "minutes" | "m" | "min" | "mins" => Unit::Micros(USECS_PER_MINUTE),
        "hour" | "hours" | "h" | "hr" | "hrs" => Unit::Micros(USECS_PER_HOUR),
        "day" | "days" | "d" => Unit::Days(1),
        "week" | "weeks" | "w" => Unit::Days(7),
        "month" | "months" | "mon" | "mons" => Unit::Months(1),
        "year" | "years" | "y" | "yr" | "yrs" => Unit::Months(12),
        "decade" | "decades" | "dec" | "decs" => Unit::Months(120),
        "century" | "centuries" | "c" | "cent" => Unit::Months(1200),
        "millennium" | "millennia" | "mil" | "mils" => Unit::Months(12_000),
        _ => return None,
    })
}

/// Adds `value` of `u`, carrying a fraction down: years' to whole months (rounded), months'
/// to 30-day days, days' to time, as PostgreSQL's `AdjustFract*` do. `false` on overflow.
fn add(acc: &mut Acc, u: &Unit, value: f64) -> bool {
    if !value.is_finite() || value.abs() > 1e18 {
        return false;
    }
    let whole = value.trunc();
    let frac = value - whole;
    match *u {
        Unit::Micros(per) => acc.micros += (value * per as f64).round_ties_even() as i128,
        Unit::Days(per) => {
            acc.days += whole as i128 * i128::from(per);
            add_fraction_of_days(acc, frac * per as f64);
        }
        Unit::Months(per) if per >= 12 => {
            acc.months += whole as i128 * i128::from(per) + (frac * per as f64).round_ties_even() as i128;
        }
        Unit::Months(per) => {
            acc.months += whole as i128 * i128::from(per);
            add_fraction_of_days(acc, frac * per as f64 * DAYS_PER_MONTH as f64);
        }
    }
    true
}

fn add_fraction_of_days(acc: &mut Acc, days: f64) {
    let whole = days.trunc();
    acc.days += whole as i128;
    acc.micros += ((days - whole) * USECS_PER_DAY as f64).round_ties_even() as i128;
}

/// A signed decimal number at the start of `s`: its value and the rest.
fn number(s: &str) -> Option<(f64, &str)> {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits_from = i;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
        i += 1;
    }
    if i == digits_from || !s[digits_from..i].bytes().any(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((s[..i].parse().ok()?, &s[i..]))
}

/// `[+-]H:MM[:SS[.ffffff]]` as microseconds.
fn clock(tok: &str) -> Option<i128> {
    let (neg, body) = match tok.as_bytes().first() {
        Some(b'-') => (true, &tok[1..]),
        Some(b'+') => (false, &tok[1..]),
        _ => (false, tok),
    };
    let mut parts = body.split(':');
    let h: i128 = parts.next()?.parse().ok()?;
    let m: i128 = parts.next()?.parse().ok()?;
    let sec: f64 = match parts.next() {
        Some(x) if !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit() || c == b'.') => x.parse().ok()?,
        Some(_) => return None,
        None => 0.0,
    };
    if parts.next().is_some() || !(0..60).contains(&m) || !(0.0..60.0).contains(&sec) {
        return None;
    }
    let us = (h * 60 + m) * i128::from(USECS_PER_MINUTE) + (sec * 1e6).round_ties_even() as i128;
    Some(if neg { -us } else { us })
}

/// The postgres form: a run of `number [unit]`, clock times and `ago`.
fn parse_postgres(s: &str, bare_unit: &str, acc: &mut Acc) -> Option<bool> {
    let tokens: Vec<&str> = s.split_whitespace().collect();
    if tokens.is_empty() {
        return None;
    }
    let mut i = 0;
    while i < tokens.len() {
        let tok = tokens[i];
        i += 1;
        if tok == "ago" && i == tokens.len() {
            acc.ago = true;
            continue;
        }
        if tok.contains(':') {
            acc.micros += clock(tok)?;
            continue;
        }
        let (v, rest) = number(tok)?;
        let word = if !rest.is_empty() {
            rest
        } else if let Some(next) = tokens.get(i).filter(|t| unit(t).is_some()) {
            i += 1;
            next
        } else if tokens.get(i).is_some_and(|t| t.contains(':')) {
            // `1 2:03`: a number before a time is days.
            "day"
        } else {
            bare_unit
        };
        if !add(acc, &unit(word)?, v) {
            return Some(false);
        }
    }
    Some(true)
}

/// ISO 8601 designators after the `P`: `nY nM nW nD`, then `T` and `nH nM nS`.
fn parse_iso(s: &str, acc: &mut Acc) -> Option<bool> {
    if s.is_empty() {
        return None;
    }
    let mut in_time = false;
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('t') {
            if in_time || r.is_empty() {
                return None;
            }
            in_time = true;
            rest = r;
            continue;
        }
        let (v, r) = number(rest)?;
        let designator = r.chars().next()?;
        rest = &r[1..];
        let u = match (in_time, designator) {
            (false, 'y') => Unit::Months(12),
            (false, 'm') => Unit::Months(1),
            (false, 'w') => Unit::Days(7),
            (false, 'd') => Unit::Days(1),
            (true, 'h') => Unit::Micros(USECS_PER_HOUR),
            (true, 'm') => Unit::Micros(USECS_PER_MINUTE),
            (true, 's') => Unit::Micros(USECS_PER_SEC),
            _ => return None,
        };
        if !add(acc, &u, v) {
            return Some(false);
        }
    }
    Some(true)
}

/// 0A000 for an index or key over interval columns (see the module doc); `cols` are the
/// key's column names and `types` the table's columns by name.
pub fn refuse_key<'a>(
    cols: impl IntoIterator<Item = &'a String>,
    types: &[(String, crate::types::SqlType)],
) -> Result<(), SqlError> {
    for c in cols {
        if types.iter().any(|(n, t)| n == c && *t == crate::types::SqlType::Interval) {
            return Err(SqlError::unsupported(format!(
                "an index on the interval column \"{c}\" (intervals are stored in a form whose byte order is not their order)"
            )));
        }
    }
    Ok(())
}

/// [`refuse_key`] for an index on `table`'s columns `cols` (a table the engine does not
/// have is left to the engine's own error).
pub fn refuse_index(sh: &crate::Shared, table: &str, cols: &[String]) -> Result<(), SqlError> {
    let Ok(t) = sh.db.table(table) else { return Ok(()) };
    let named: Vec<(String, crate::types::SqlType)> =
        sh.catalog.columns(&t).into_iter().map(|c| (c.name, c.ty)).collect();
    refuse_key(cols, &named)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> String {
        parse(s, None).unwrap().to_string()
    }

    #[test]
    fn text_forms_read_and_print_as_postgresql_does() {
        // Each pair checked against PostgreSQL 15.
        for (input, out) in [
            ("1 day 02:00:00", "1 day 02:00:00"),
            ("2 hours", "02:00:00"),
            ("1 mon", "1 mon"),
            ("P1DT2H", "1 day 02:00:00"),
            ("@ 1 day", "1 day"),
            ("1 year 2 mons 3 days 04:05:06.5", "1 year 2 mons 3 days 04:05:06.5"),
            ("-1 second", "-00:00:01"),
            ("-1 day +02:00", "-1 days +02:00:00"),
            ("P1Y2M3DT4H5M6.5S", "1 year 2 mons 3 days 04:05:06.5"),
            ("PT0S", "00:00:00"),
            ("0", "00:00:00"),
            ("1.5 years", "1 year 6 mons"),
            ("1.5 months", "1 mon 15 days"),
            ("1.5 days", "1 day 12:00:00"),
            ("3.7 weeks", "25 days 21:36:00"),
            ("1 week", "7 days"),
            ("10 minutes 5 seconds", "00:10:05"),
            ("1 millisecond", "00:00:00.001"),
            ("1 microsecond", "00:00:00.000001"),
            ("5", "00:00:05"),
            ("1:30", "01:30:00"),
            ("-1:30", "-01:30:00"),
            ("100:00:00", "100:00:00"),
            ("1 2:03", "1 day 02:03:00"),
            ("1 day ago", "-1 days"),
            ("@ 1 day 2 hours ago", "-1 days -02:00:00"),
            ("-1 year -2 mons +3 days", "-1 years -2 mons +3 days"),
            ("1 mon -1 day", "1 mon -1 days"),
            ("1 day -00:00:01", "1 day -00:00:01"),
            ("-00:00:00.5", "-00:00:00.5"),
        ] {
            assert_eq!(p(input), out, "{input}");
        }
        assert_eq!(parse("garbage", None).unwrap_err().code, "22007");
        assert_eq!(parse("1 fortnight", None).unwrap_err().code, "22007");
        assert_eq!(parse("5", Some("hour")).unwrap().to_string(), "05:00:00");
    }

    #[test]
    fn comparison_uses_thirty_day_months() {
        let a = parse("1 mon", None).unwrap();
        let b = parse("30 days", None).unwrap();
        assert_eq!(a.span(), b.span());
        assert_ne!(a, b);
        assert!(parse("1 year", None).unwrap().span() > parse("360 days", None).unwrap().span() - 1);
    }

    #[test]
    fn scaling_carries_fractions_down() {
        let mon = parse("1 mon", None).unwrap();
        assert_eq!(mon.mul_f64(1.5).unwrap().to_string(), "1 mon 15 days");
        assert_eq!(parse("1 day", None).unwrap().div_f64(3.0).unwrap().unwrap().to_string(), "08:00:00");
        assert_eq!(parse("3 days", None).unwrap().div_f64(2.0).unwrap().unwrap().to_string(), "1 day 12:00:00");
        assert_eq!(parse("1 hour", None).unwrap().mul_f64(1.5).unwrap().to_string(), "01:30:00");
        assert_eq!(mon.div_f64(0.0).unwrap_err().code, "22012");
    }

    #[test]
    fn justify_matches_postgresql() {
        assert_eq!(parse("35 days", None).unwrap().justify_days().unwrap().to_string(), "1 mon 5 days");
        assert_eq!(parse("27 hours", None).unwrap().justify_hours().unwrap().to_string(), "1 day 03:00:00");
        let iv = parse("1 mon -1 hour", None).unwrap();
        assert_eq!(iv.justify_interval().unwrap().to_string(), "29 days 23:00:00");
    }

    #[test]
    fn binary_form_round_trips() {
        let iv = parse("-1 year 2 days 00:00:01.5", None).unwrap();
        assert_eq!(Interval::from_bytes(&iv.to_bytes()), Some(iv));
        assert_eq!(Interval::from_bytes(&[0; 15]), None);
    }
}
