//! PostgreSQL's text output of the engine's value types (`float8out` with
//! `extra_float_digits = 1`, `timestamp_out`, `date_out`, `byteaout` in hex, `boolout`): what
//! the wire server sends and what logical decoding's output plugins print.

use std::fmt::Write as _;

use crate::heap::tuple::{Type, ValueRef};

/// float8 output with `extra_float_digits = 1`: the shortest text that reads back exactly.
pub fn float_out(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e15).contains(&a) {
        // Exponent form, as PostgreSQL writes it: 1e+20, 1.5e-05.
        let s = format!("{f:e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        return format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
    format!("{f}")
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) to days since 1970-01-01.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `date` output (ISO, with ` BC` before year 1).
pub fn date_out(d: i32) -> String {
    let mut out = Vec::with_capacity(13);
    push_date(&mut out, d);
    String::from_utf8(out).expect("digits and dashes")
}

/// `timestamp` output: microseconds since 1970-01-01 as `YYYY-MM-DD HH:MM:SS[.ffffff]`
/// (trailing zeros of the fraction left out), with ` BC` at the end before year 1, as
/// PostgreSQL writes it.
pub fn timestamp_out(t: i64) -> String {
    let mut out = Vec::with_capacity(29);
    push_timestamp(&mut out, t);
    String::from_utf8(out).expect("digits and punctuation")
}

/// [`date_out`] appended to `out`, digit by digit (a decoder writes one per date column).
pub fn push_date(out: &mut Vec<u8>, d: i32) {
    let bc = push_ymd(out, i64::from(d));
    if bc {
        out.extend_from_slice(b" BC");
    }
}

/// The longest [`timestamp_text`]: `YYYY-MM-DD HH:MM:SS.ffffff`.
pub const TIMESTAMP_TEXT_MAX: usize = 26;

/// [`timestamp_out`] appended to `out`, digit by digit.
pub fn push_timestamp(out: &mut Vec<u8>, t: i64) {
    let mut buf = [0u8; TIMESTAMP_TEXT_MAX];
    if let Some(n) = timestamp_text(&mut buf, t) {
        out.extend_from_slice(&buf[..n]);
        return;
    }
    let days = t.div_euclid(86_400_000_000);
    let rem = t.rem_euclid(86_400_000_000) as u64;
    let bc = push_ymd(out, days);
    out.push(b' ');
    push_digits(out, rem / 3_600_000_000, 2);
    out.push(b':');
    push_digits(out, rem / 60_000_000 % 60, 2);
    out.push(b':');
    push_digits(out, rem / 1_000_000 % 60, 2);
    let (us, width) = fraction(rem);
    if width > 0 {
        out.push(b'.');
        push_digits(out, us, width);
    }
    if bc {
        out.extend_from_slice(b" BC");
    }
}

/// [`timestamp_out`] of a timestamp in years 1 to 9999 (every one a program writes, in
/// practice), written at the start of `buf` (at least [`TIMESTAMP_TEXT_MAX`] bytes); its
/// length, or `None` for any other year.
pub fn timestamp_text(buf: &mut [u8], t: i64) -> Option<usize> {
    let days = t.div_euclid(86_400_000_000);
    let rem = t.rem_euclid(86_400_000_000) as u64;
    let (y, m, d) = civil_from_days(days);
    if !(1..=9999).contains(&y) {
        return None;
    }
    buf[..19].copy_from_slice(b"0000-00-00 00:00:00");
    put_ymd(buf, y as u64, m, d);
    put_pair(&mut buf[11..], rem / 3_600_000_000);
    put_pair(&mut buf[14..], rem / 60_000_000 % 60);
    put_pair(&mut buf[17..], rem / 1_000_000 % 60);
    let (us, width) = fraction(rem);
    if width == 0 {
        return Some(19);
    }
    buf[19] = b'.';
    buf[20..20 + width].fill(b'0');
    digits_before(buf, 20 + width, us);
    Some(20 + width)
}

/// The microseconds of a time of day without their trailing zeros, and how many digits they
/// then take (0 for none).
fn fraction(rem: u64) -> (u64, usize) {
    let mut us = rem % 1_000_000;
    if us == 0 {
        return (0, 0);
    }
    let mut width = 6;
    while us.is_multiple_of(10) {
        us /= 10;
        width -= 1;
    }
    (us, width)
}

/// `YYYY-MM-DD` of a day since 1970-01-01 (the year of an era before year 1 counted as
/// PostgreSQL shows it, 1 BC for year 0); whether it is BC.
fn push_ymd(out: &mut Vec<u8>, days: i64) -> bool {
    let (y, m, d) = civil_from_days(days);
    if (1..=9999).contains(&y) {
        let mut b = *b"0000-00-00";
        put_ymd(&mut b, y as u64, m, d);
        out.extend_from_slice(&b);
        return false;
    }
    let bc = y <= 0;
    push_digits(out, if bc { (1 - y) as u64 } else { y as u64 }, 4);
    out.push(b'-');
    push_digits(out, u64::from(m), 2);
    out.push(b'-');
    push_digits(out, u64::from(d), 2);
    bc
}

/// A year of four digits, a month and a day into `b`'s `YYYY-MM-DD` places.
fn put_ymd(b: &mut [u8], y: u64, m: u32, d: u32) {
    put_pair(b, y / 100);
    put_pair(&mut b[2..], y % 100);
    put_pair(&mut b[5..], u64::from(m));
    put_pair(&mut b[8..], u64::from(d));
}

/// `v` (below 100) as two digits at the start of `b`.
fn put_pair(b: &mut [u8], v: u64) {
    b[0] = b'0' + (v / 10) as u8;
    b[1] = b'0' + (v % 10) as u8;
}

/// How many decimal digits `v` has (1 for zero).
#[inline]
pub fn decimal_digits(v: u64) -> usize {
    v.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// The two-digit numbers 00 to 99, each as its two ASCII digits.
const PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Writes `v` in decimal into `buf` so that its last digit is just before `end`, two digits
/// at a time; returns where the first digit is ([`decimal_digits`] before `end`).
#[inline]
pub fn digits_before(buf: &mut [u8], mut end: usize, mut v: u64) -> usize {
    while v >= 100 {
        let p = (v % 100) as usize * 2;
        v /= 100;
        end -= 2;
        buf[end..end + 2].copy_from_slice(&PAIRS[p..p + 2]);
    }
    if v >= 10 {
        let p = v as usize * 2;
        end -= 2;
        buf[end..end + 2].copy_from_slice(&PAIRS[p..p + 2]);
    } else {
        end -= 1;
        buf[end] = b'0' + v as u8;
    }
    end
}

/// `v` in decimal, zero-padded to at least `width` digits (at most 20).
fn push_digits(out: &mut Vec<u8>, v: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let at = digits_before(&mut buf, 20, v).min(20 - width.min(20));
    out.extend_from_slice(&buf[at..]);
}

/// `bytea` output in hex (`bytea_output = hex`).
pub fn bytea_out(b: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * b.len());
    s.push_str("\\x");
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// `quote_literal`: single quotes around `s`, its quotes and backslashes doubled, and an `E`
/// before it if it has a backslash.
pub fn quote_literal(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 3);
    if s.contains('\\') {
        q.push('E');
    }
    q.push('\'');
    for c in s.chars() {
        if c == '\'' || c == '\\' {
            q.push(c);
        }
        q.push(c);
    }
    q.push('\'');
    q
}

/// A value's text output as PostgreSQL prints it (`t`/`f` for booleans); `None` for NULL. A
/// text value's bytes that are not UTF-8 are shown with U+FFFD in their place.
pub fn value_text(v: ValueRef<'_>) -> Option<String> {
    Some(match v {
        ValueRef::Null => return None,
        ValueRef::Int4(x) => x.to_string(),
        ValueRef::Int8(x) => x.to_string(),
        ValueRef::Float8(f) => float_out(f),
        ValueRef::Bool(b) => if b { "t" } else { "f" }.into(),
        ValueRef::Text(s) => String::from_utf8_lossy(s).into_owned(),
        ValueRef::Bytea(b) => bytea_out(b),
        ValueRef::Timestamp(t) => timestamp_out(t),
    })
}

/// The type's name as PostgreSQL's `format_type_be` writes it.
pub fn type_name(t: Type) -> &'static str {
    match t {
        Type::Int4 => "integer",
        Type::Int8 => "bigint",
        Type::Float8 => "double precision",
        Type::Bool => "boolean",
        Type::Text => "text",
        Type::Bytea => "bytea",
        Type::Timestamp => "timestamp without time zone",
    }
}

/// PostgreSQL's type OID of an engine type.
pub fn type_oid(t: Type) -> u32 {
    match t {
        Type::Int4 => 23,
        Type::Int8 => 20,
        Type::Float8 => 701,
        Type::Bool => 16,
        Type::Text => 25,
        Type::Bytea => 17,
        Type::Timestamp => 1114,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_as_postgresql_does() {
        assert_eq!(float_out(1e20), "1e+20");
        assert_eq!(float_out(1.5e-5), "1.5e-05");
        assert_eq!(float_out(0.1), "0.1");
        assert_eq!(timestamp_out(0), "1970-01-01 00:00:00");
        assert_eq!(timestamp_out(1_500_000), "1970-01-01 00:00:01.5");
        assert_eq!(date_out(0), "1970-01-01");
        assert_eq!(date_out(-719_163), "0001-12-31 BC");
        assert_eq!(timestamp_out(-62_135_596_800_000_000 - 1), "0001-12-31 23:59:59.999999 BC");
        assert_eq!(timestamp_out(253_402_300_800_000_000), "10000-01-01 00:00:00");
        assert_eq!(timestamp_out(1_700_000_000_120_000), "2023-11-14 22:13:20.12");
        assert_eq!(bytea_out(&[0xde, 0xad]), "\\xdead");
        assert_eq!(value_text(ValueRef::Bool(true)).as_deref(), Some("t"));
        assert_eq!(value_text(ValueRef::Null), None);
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("a\\b"), "E'a\\\\b'");
    }

    #[test]
    fn dates_and_timestamps_are_written_as_formatted() {
        let formatted = |t: i64| {
            let days = t.div_euclid(86_400_000_000);
            let rem = t.rem_euclid(86_400_000_000);
            let (y, m, d) = civil_from_days(days);
            let (h, mi, s, us) = (rem / 3_600_000_000, rem / 60_000_000 % 60, rem / 1_000_000 % 60, rem % 1_000_000);
            let mut out = if y <= 0 { format!("{:04}-{m:02}-{d:02}", 1 - y) } else { format!("{y:04}-{m:02}-{d:02}") };
            out.push_str(&format!(" {h:02}:{mi:02}:{s:02}"));
            if us != 0 {
                out.push('.');
                out.push_str(format!("{us:06}").trim_end_matches('0'));
            }
            if y <= 0 {
                out.push_str(" BC");
            }
            out
        };
        let (lo, hi) = (-210_866_803_200_000_000_i64, 9_000_000_000_000_000_000_i64);
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut t = lo + (x % (hi - lo) as u64) as i64;
            if i % 3 == 0 {
                t -= t.rem_euclid(1_000_000); // whole seconds
            }
            assert_eq!(timestamp_out(t), formatted(t), "{t}");
            let d = t.div_euclid(86_400_000_000) as i32;
            let (y, m, day) = civil_from_days(i64::from(d));
            let date =
                if y <= 0 { format!("{:04}-{m:02}-{day:02} BC", 1 - y) } else { format!("{y:04}-{m:02}-{day:02}") };
            assert_eq!(date_out(d), date, "{d}");
        }
        // Each side of the edges of years 1 and 9999, where four-digit years are written in
        // one piece.
        for edge in [-62_135_596_800_000_000_i64, 253_402_300_800_000_000] {
            for k in -4..4 {
                let t = edge + k * 43_200_000_000 - 1;
                assert_eq!(timestamp_out(t), formatted(t), "{t}");
            }
        }
    }
}
