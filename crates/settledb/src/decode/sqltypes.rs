//! Column types above the engine's storage types, for the output plugins.
//!
//! The engine stores a handful of types ([`Type`]); a layer above it may give a column a SQL
//! type stored as one of them: `numeric(12,2)` as an `int8` of hundredths, `date` as an `int4`
//! day count, `smallint` as an `int4`, `varchar(n)` as text. A consumer of the decoder's
//! output must see the SQL type: a PostgreSQL subscriber casts each value's text to its own
//! column's type, so `300000.00` must not arrive as `30000000`. That layer registers a
//! [`ColumnTypes`] with the database ([`crate::Database::set_column_types`]); `pgoutput`
//! sends its type OIDs and typmods in Relation messages and its text (or send format) in
//! TupleData, and `test_decoding` prints its type names and values. Without one (or for a
//! relation it does not describe, such as an older version of a table whose columns
//! changed) the storage types are shown.

use std::sync::Arc;

use super::logical::RelInfo;
use crate::heap::tuple::{Type, ValueRef};
use crate::pgtext;

/// What a layer above the engine knows of a relation's columns.
pub trait ColumnTypes: Send + Sync + std::fmt::Debug {
    /// The SQL types of `rel`'s columns, one per column of `rel.schema`, or `None` to show
    /// the storage types.
    fn columns(&self, rel: &RelInfo) -> Option<Vec<SqlColumn>>;
}

/// A column's SQL type as a client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlColumn {
    /// PostgreSQL's type OID (`numeric` 1700, `date` 1082, ...).
    pub type_oid: u32,
    /// PostgreSQL's typmod (`numeric(12,2)`: `((12 << 16) | 2) + 4`; -1 for none).
    pub typmod: i32,
    /// The type's name as `format_type` gives it (`test_decoding` prints it).
    pub type_name: String,
    pub format: ValueFormat,
}

/// How a stored value reads as its SQL type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueFormat {
    /// As stored.
    Stored,
    /// `smallint` stored as `int4`.
    Int2,
    /// `numeric` stored as `int8` with `scale` decimal places.
    Numeric { scale: u8 },
    /// `date` stored as `int4` days since 1970-01-01.
    Date,
}

impl SqlColumn {
    /// The storage type shown as itself.
    pub fn stored(ty: Type) -> SqlColumn {
        SqlColumn {
            type_oid: pgtext::type_oid(ty),
            typmod: -1,
            type_name: pgtext::type_name(ty).to_string(),
            format: ValueFormat::Stored,
        }
    }

    /// Whether `test_decoding` prints the value bare (numbers, booleans) or quoted.
    pub fn bare(&self) -> bool {
        matches!(self.type_oid, 16 | 20 | 21 | 23 | 26 | 700 | 701 | 1700)
    }
}

/// The columns of `rel` as `types` describes them, or its storage types.
pub fn columns_of(types: Option<&Arc<dyn ColumnTypes>>, rel: &RelInfo) -> Vec<SqlColumn> {
    types
        .and_then(|t| t.columns(rel))
        .filter(|c| c.len() == rel.schema.columns.len())
        .unwrap_or_else(|| rel.schema.columns.iter().map(|c| SqlColumn::stored(c.ty)).collect())
}

/// A scaled integer as numeric's text (`numeric_out`): `-12345` at scale 2 is `-123.45`.
pub fn numeric_text(m: i64, scale: u8) -> String {
    let mut buf = [0u8; DECIMAL_TEXT_MAX];
    let at = decimal_text_before(&mut buf, DECIMAL_TEXT_MAX, m, scale);
    String::from_utf8(buf[at..].to_vec()).expect("digits, a sign and a point are ASCII")
}

/// 10^0 to 10^19, every power of ten a u64 holds.
const POW10: [u64; 20] = {
    let mut p = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        p[i] = p[i - 1] * 10;
        i += 1;
    }
    p
};

/// The longest [`decimal_text_before`]: a sign, a zero, the point and 19 places.
pub const DECIMAL_TEXT_MAX: usize = 22;

/// Writes `m / 10^scale` as `numeric_out` writes it (`-0.05`; with `scale` 0, the integer as
/// `int4out`/`int8out` write it) so that it ends just before `end` in `buf` (with at least
/// [`DECIMAL_TEXT_MAX`] bytes before `end`), and returns where it starts.
///
/// Output plugins write every integer and numeric column of every row through it, into a
/// buffer of their own on the stack. Written from its last digit back, the text needs no
/// count of its digits first, and a caller can put its own header just before it.
#[inline]
pub fn decimal_text_before(buf: &mut [u8], end: usize, m: i64, scale: u8) -> usize {
    // 19 places at most: |i64::MIN| has 19 digits.
    let scale = usize::from(scale).min(19);
    let v = m.unsigned_abs();
    let mut start = if scale == 0 {
        pgtext::digits_before(buf, end, v)
    } else {
        let unit = POW10[scale];
        let (int, frac) = (v / unit, v % unit);
        let point = end - 1 - scale;
        // The fraction's digits, its leading zeros, the point, then the integer part.
        let first = pgtext::digits_before(buf, end, frac);
        buf[point + 1..first].fill(b'0');
        buf[point] = b'.';
        pgtext::digits_before(buf, point, int)
    };
    if m < 0 {
        start -= 1;
        buf[start] = b'-';
    }
    start
}

/// A value's text output as its SQL type (`None` for NULL).
pub fn text(v: ValueRef<'_>, format: ValueFormat) -> Option<String> {
    match (format, v) {
        (ValueFormat::Numeric { scale }, ValueRef::Int8(m)) => Some(numeric_text(m, scale)),
        (ValueFormat::Numeric { scale }, ValueRef::Int4(m)) => Some(numeric_text(i64::from(m), scale)),
        (ValueFormat::Date, ValueRef::Int4(d)) => Some(pgtext::date_out(d)),
        _ => pgtext::value_text(v),
    }
}

/// Days from 1970-01-01 to 2000-01-01, PostgreSQL's date epoch.
const PG_DATE_EPOCH_DAYS: i32 = 10_957;

/// A value's send format as its SQL type (`int2send`, `numeric_send`, `date_send`); `None`
/// where the storage type's applies.
pub fn binary(v: ValueRef<'_>, format: ValueFormat) -> Option<Vec<u8>> {
    match (format, v) {
        (ValueFormat::Int2, ValueRef::Int4(x)) => Some((x as i16).to_be_bytes().to_vec()),
        (ValueFormat::Date, ValueRef::Int4(d)) => Some((d - PG_DATE_EPOCH_DAYS).to_be_bytes().to_vec()),
        (ValueFormat::Numeric { scale }, ValueRef::Int8(m)) => Some(numeric_send(i128::from(m), scale)),
        (ValueFormat::Numeric { scale }, ValueRef::Int4(m)) => Some(numeric_send(i128::from(m), scale)),
        _ => None,
    }
}

/// `numeric_send` of `m / 10^scale`: ndigits, weight, sign, dscale, then base-10000 digits
/// (the integer part's groups counted from the decimal point, the fraction's padded to
/// whole groups; leading and trailing zero groups left out, as PostgreSQL strips them).
pub fn numeric_send(m: i128, scale: u8) -> Vec<u8> {
    let digits = m.unsigned_abs().to_string();
    let scale_n = usize::from(scale);
    let padded =
        if digits.len() <= scale_n { format!("{}{digits}", "0".repeat(scale_n + 1 - digits.len())) } else { digits };
    let (int, frac) = padded.split_at(padded.len() - scale_n);
    // Integer part in groups of four from the right, fraction in groups of four from the left.
    let int_pad = (4 - int.len() % 4) % 4;
    let int_digits = format!("{}{int}", "0".repeat(int_pad));
    let frac_pad = (4 - frac.len() % 4) % 4;
    let frac_digits = format!("{frac}{}", "0".repeat(frac_pad));
    let group = |s: &str| -> Vec<i16> {
        s.as_bytes().chunks(4).map(|c| std::str::from_utf8(c).unwrap().parse().unwrap()).collect()
    };
    let mut groups = group(&int_digits);
    let int_groups = groups.len() as i32;
    groups.extend(group(&frac_digits));
    let mut weight = int_groups - 1;
    // Strip leading zero groups (each lowers the weight) and trailing ones.
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    let mut out = Vec::with_capacity(8 + 2 * groups.len());
    out.extend_from_slice(&(groups.len() as i16).to_be_bytes());
    out.extend_from_slice(&(weight as i16).to_be_bytes());
    out.extend_from_slice(&(if m < 0 { 0x4000u16 } else { 0 }).to_be_bytes());
    out.extend_from_slice(&i16::from(scale).to_be_bytes());
    for g in groups {
        out.extend_from_slice(&g.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_text_as_numeric_out_writes_it() {
        assert_eq!(numeric_text(30000000, 2), "300000.00");
        assert_eq!(numeric_text(-12345, 2), "-123.45");
        assert_eq!(numeric_text(5, 2), "0.05");
        assert_eq!(numeric_text(-5, 4), "-0.0005");
        assert_eq!(numeric_text(1219, 4), "0.1219");
        assert_eq!(numeric_text(0, 2), "0.00");
        assert_eq!(numeric_text(i64::MIN, 0), i64::MIN.to_string());
        assert_eq!(numeric_text(i64::MIN, 4), "-922337203685477.5808");
        assert_eq!(numeric_text(7, 0), "7");
        assert_eq!(numeric_text(i64::MIN, 19), "-0.9223372036854775808");
        assert_eq!(numeric_text(-5, 19), "-0.0000000000000000005");
        // Against the arithmetic definition, for many values and scales.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let m = (x as i64) >> (x % 60);
            let scale = (x % 19) as u8;
            let p = 10i128.pow(u32::from(scale));
            let (int, frac) = (i128::from(m).abs() / p, i128::from(m).abs() % p);
            let sign = if m < 0 { "-" } else { "" };
            let want = if scale == 0 {
                m.to_string()
            } else {
                format!("{sign}{int}.{frac:0width$}", width = usize::from(scale))
            };
            assert_eq!(numeric_text(m, scale), want, "{m} scale {scale}");
        }
        assert_eq!(numeric_text(42, 0), "42");
    }

    fn send(ndigits: i16, weight: i16, neg: bool, dscale: i16, groups: &[i16]) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [ndigits, weight] {
            v.extend_from_slice(&x.to_be_bytes());
        }
        v.extend_from_slice(&(if neg { 0x4000u16 } else { 0 }).to_be_bytes());
        v.extend_from_slice(&dscale.to_be_bytes());
        for g in groups {
            v.extend_from_slice(&g.to_be_bytes());
        }
        v
    }

    /// The bytes PostgreSQL 15.18's `numeric_send` gives for the same values
    /// (`SELECT numeric_send(300000.00::numeric(12,2))`: `\x0001000100000002001e`, and so on).
    #[test]
    fn numeric_send_as_postgresql_sends_it() {
        assert_eq!(numeric_send(30000000, 2), send(1, 1, false, 2, &[30]));
        assert_eq!(numeric_send(-12345, 2), send(2, 0, true, 2, &[123, 4500]));
        assert_eq!(numeric_send(1219, 4), send(1, -1, false, 4, &[1219]));
        assert_eq!(numeric_send(5, 2), send(1, -1, false, 2, &[500]));
        assert_eq!(numeric_send(0, 2), send(0, 0, false, 2, &[]));
        assert_eq!(numeric_send(123456789, 0), send(3, 2, false, 0, &[1, 2345, 6789]));
    }
}
