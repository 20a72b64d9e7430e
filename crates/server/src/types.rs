//! SQL types on top of the engine's value types, and PostgreSQL's text and binary I/O for them.
//!
//! The engine stores seven value types ([`settledb::Type`]); SQL needs more. Each SQL type is
//! stored as one engine type, and the SQL type itself is remembered in the server's catalog
//! ([`crate::catalog`]):
//!
//! ```text
//!  SQL type        OID   stored as            notes
//!  bool             16   Bool
//!  int2             21   Int4                 range-checked to i16 on the way in
//!  int4             23   Int4
//!  int8             20   Int8
//!  numeric(p,s)   1700   Int8 scaled by 10^s  exact; p <= 18, so ordering and indexes work
//!  float8          701   Float8
//!  text             25   Text
//!  varchar(n)     1043   Text                 length-checked
//!  char(n)        1042   Text                 blank-padded to n on the way in
//!  timestamp      1114   Timestamp            microseconds since 1970-01-01 00:00:00
//!  timestamptz    1184   Timestamp            microseconds since 1970-01-01 00:00:00 UTC;
//!                                             text in/out in the session's TimeZone
//!  interval       1186   Bytea                the 16 bytes of its binary form; no indexes
//!  date           1082   Int4                 days since 1970-01-01
//!  bytea            17   Bytea
//! ```
//!
//! Text I/O follows PostgreSQL's output functions with `DateStyle = ISO, MDY`,
//! `IntervalStyle = postgres` and `bytea_output = hex` (dates, timestamps and intervals in
//! [`crate::datetime`] and [`crate::interval`]); binary I/O follows the `*send`/`*recv` formats (big-endian integers,
//! timestamps and dates counted from 2000-01-01, numerics in base-10000 digits
//! ([`numeric_recv`])).
//!
//! Runtime values are [`Datum`]s. A string literal or a text-format parameter whose type is not
//! known yet is a `Datum::Text` and is converted when it meets a typed column (PostgreSQL's
//! `unknown` literals behave the same way).

use std::cmp::Ordering;

use settledb::{Type, Value};

use crate::error::SqlError;

/// Microseconds between 1970-01-01 and 2000-01-01 (PostgreSQL's epoch for binary I/O).
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
/// Days between 1970-01-01 and 2000-01-01.
const PG_EPOCH_DAYS: i32 = 10_957;

/// A column's SQL type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlType {
    Bool,
    Int2,
    Int4,
    Int8,
    Numeric { precision: u8, scale: u8 },
    Float8,
    Text,
    Varchar(Option<u32>),
    Char(u32),
    Timestamp,
    TimestampTz,
    Interval,
    Date,
    Bytea,
}

impl SqlType {
    /// The engine type the values are stored as.
    pub fn storage(self) -> Type {
        match self {
            SqlType::Bool => Type::Bool,
            SqlType::Int2 | SqlType::Int4 | SqlType::Date => Type::Int4,
            SqlType::Int8 | SqlType::Numeric { .. } => Type::Int8,
            SqlType::Float8 => Type::Float8,
            SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_) => Type::Text,
            SqlType::Timestamp | SqlType::TimestampTz => Type::Timestamp,
            SqlType::Bytea | SqlType::Interval => Type::Bytea,
        }
    }

    /// The SQL type a column of engine type `t` has when the server's catalog does not say.
    pub fn from_storage(t: Type) -> SqlType {
        match t {
            Type::Int4 => SqlType::Int4,
            Type::Int8 => SqlType::Int8,
            Type::Float8 => SqlType::Float8,
            Type::Bool => SqlType::Bool,
            Type::Text => SqlType::Text,
            Type::Bytea => SqlType::Bytea,
            Type::Timestamp => SqlType::Timestamp,
        }
    }

    /// The wire type (and so the OID).
    pub fn pg_type(self) -> pgwire::api::Type {
        use pgwire::api::Type as T;
        match self {
            SqlType::Bool => T::BOOL,
            SqlType::Int2 => T::INT2,
            SqlType::Int4 => T::INT4,
            SqlType::Int8 => T::INT8,
            SqlType::Numeric { .. } => T::NUMERIC,
            SqlType::Float8 => T::FLOAT8,
            SqlType::Text => T::TEXT,
            SqlType::Varchar(_) => T::VARCHAR,
            SqlType::Char(_) => T::BPCHAR,
            SqlType::Timestamp => T::TIMESTAMP,
            SqlType::TimestampTz => T::TIMESTAMPTZ,
            SqlType::Interval => T::INTERVAL,
            SqlType::Date => T::DATE,
            SqlType::Bytea => T::BYTEA,
        }
    }

    /// The SQL type for a wire type a client named (a Parse message's parameter OIDs).
    pub fn from_oid(oid: u32) -> Option<SqlType> {
        Some(match oid {
            16 => SqlType::Bool,
            21 => SqlType::Int2,
            23 => SqlType::Int4,
            20 => SqlType::Int8,
            1700 => SqlType::Numeric { precision: 18, scale: 6 },
            701 | 700 => SqlType::Float8,
            25 | 19 => SqlType::Text,
            1043 => SqlType::Varchar(None),
            1042 => SqlType::Char(1),
            1114 => SqlType::Timestamp,
            1184 => SqlType::TimestampTz,
            1186 => SqlType::Interval,
            1082 => SqlType::Date,
            17 => SqlType::Bytea,
            _ => return None,
        })
    }

    /// The type as `format_type` spells it (`character varying(20)`).
    pub fn display(self) -> String {
        match self {
            SqlType::Bool => "boolean".into(),
            SqlType::Int2 => "smallint".into(),
            SqlType::Int4 => "integer".into(),
            SqlType::Int8 => "bigint".into(),
            SqlType::Numeric { precision, scale } => format!("numeric({precision},{scale})"),
            SqlType::Float8 => "double precision".into(),
            SqlType::Text => "text".into(),
            SqlType::Varchar(None) => "character varying".into(),
            SqlType::Varchar(Some(n)) => format!("character varying({n})"),
            SqlType::Char(n) => format!("character({n})"),
            SqlType::Timestamp => "timestamp without time zone".into(),
            SqlType::TimestampTz => "timestamp with time zone".into(),
            SqlType::Interval => "interval".into(),
            SqlType::Date => "date".into(),
            SqlType::Bytea => "bytea".into(),
        }
    }

    /// The type as the engine's output plugins show it (`pgoutput`'s type OID and typmod,
    /// `test_decoding`'s `format_type` name without modifiers, and how a stored value reads).
    pub fn sql_column(self) -> settledb::decode::sqltypes::SqlColumn {
        use settledb::decode::sqltypes::{SqlColumn, ValueFormat};
        let (typmod, format, name) = match self {
            SqlType::Int2 => (-1, ValueFormat::Int2, self.display()),
            SqlType::Numeric { precision, scale } => (
                ((i32::from(precision) << 16) | i32::from(scale)) + 4,
                ValueFormat::Numeric { scale },
                "numeric".to_string(),
            ),
            SqlType::Date => (-1, ValueFormat::Date, self.display()),
            SqlType::Varchar(n) => (n.map_or(-1, |n| n as i32 + 4), ValueFormat::Stored, "character varying".into()),
            SqlType::Char(n) => (n as i32 + 4, ValueFormat::Stored, "character".into()),
            _ => (-1, ValueFormat::Stored, self.display()),
        };
        SqlColumn { type_oid: self.pg_type().oid(), typmod, type_name: name, format }
    }

    /// A compact spelling for the server's catalog file, read back by [`SqlType::decode`].
    pub fn encode(self) -> String {
        match self {
            SqlType::Numeric { precision, scale } => format!("numeric:{precision}:{scale}"),
            SqlType::Varchar(Some(n)) => format!("varchar:{n}"),
            SqlType::Varchar(None) => "varchar".into(),
            SqlType::Char(n) => format!("char:{n}"),
            other => other.short_name().into(),
        }
    }

    pub fn decode(s: &str) -> Option<SqlType> {
        let mut it = s.split(':');
        let head = it.next()?;
        let mut num = || it.next().and_then(|x| x.parse::<u32>().ok());
        Some(match head {
            "bool" => SqlType::Bool,
            "int2" => SqlType::Int2,
            "int4" => SqlType::Int4,
            "int8" => SqlType::Int8,
            "numeric" => {
                let p = num()?;
                let s = num()?;
                SqlType::Numeric { precision: u8::try_from(p).ok()?, scale: u8::try_from(s).ok()? }
            }
            "float8" => SqlType::Float8,
            "text" => SqlType::Text,
            "varchar" => SqlType::Varchar(num()),
            "char" => SqlType::Char(num()?),
            "timestamp" => SqlType::Timestamp,
            "timestamptz" => SqlType::TimestampTz,
            "interval" => SqlType::Interval,
            "date" => SqlType::Date,
            "bytea" => SqlType::Bytea,
            _ => return None,
        })
    }

    pub(crate) fn short_name(self) -> &'static str {
        match self {
            SqlType::Bool => "bool",
            SqlType::Int2 => "int2",
            SqlType::Int4 => "int4",
            SqlType::Int8 => "int8",
            SqlType::Numeric { .. } => "numeric",
            SqlType::Float8 => "float8",
            SqlType::Text => "text",
            SqlType::Varchar(_) => "varchar",
            SqlType::Char(_) => "bpchar",
            SqlType::Timestamp => "timestamp",
            SqlType::TimestampTz => "timestamptz",
            SqlType::Interval => "interval",
            SqlType::Date => "date",
            SqlType::Bytea => "bytea",
        }
    }
}

/// A numeric value: `mantissa / 10^scale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Num {
    pub mantissa: i128,
    pub scale: u8,
}

impl Num {
    pub fn rescale(self, scale: u8) -> Option<Num> {
        if scale >= self.scale {
            let f = 10i128.checked_pow(u32::from(scale - self.scale))?;
            Some(Num { mantissa: self.mantissa.checked_mul(f)?, scale })
        } else {
            // Round half away from zero, as numeric does.
            let Some(f) = 10i128.checked_pow(u32::from(self.scale - scale)) else {
                return Some(Num { mantissa: 0, scale });
            };
            let q = self.mantissa / f;
            let r = self.mantissa % f;
            let q = if r.abs() * 2 >= f { q + self.mantissa.signum() } else { q };
            Some(Num { mantissa: q, scale })
        }
    }

    pub fn to_f64(self) -> f64 {
        self.mantissa as f64 / 10f64.powi(i32::from(self.scale))
    }

    pub fn parse(s: &str) -> Option<Num> {
        let s = s.trim();
        let (neg, body) = match s.strip_prefix('-') {
            Some(b) => (true, b),
            None => (false, s.strip_prefix('+').unwrap_or(s)),
        };
        let (int, frac) = body.split_once('.').unwrap_or((body, ""));
        if (int.is_empty() && frac.is_empty())
            || !int.bytes().all(|b| b.is_ascii_digit())
            || !frac.bytes().all(|b| b.is_ascii_digit())
            || frac.len() > 30
        {
            return None;
        }
        let mut m: i128 = 0;
        for b in int.bytes().chain(frac.bytes()) {
            m = m.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
        }
        Some(Num { mantissa: if neg { -m } else { m }, scale: frac.len() as u8 })
    }

    pub fn compare(self, other: Num) -> Ordering {
        let s = self.scale.max(other.scale);
        match (self.rescale(s), other.rescale(s)) {
            (Some(a), Some(b)) => a.mantissa.cmp(&b.mantissa),
            _ => self.to_f64().total_cmp(&other.to_f64()),
        }
    }
}

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let neg = self.mantissa < 0;
        let digits = self.mantissa.unsigned_abs().to_string();
        let scale = usize::from(self.scale);
        let padded =
            if digits.len() <= scale { format!("{}{digits}", "0".repeat(scale + 1 - digits.len())) } else { digits };
        let (int, frac) = padded.split_at(padded.len() - scale);
        if neg {
            f.write_str("-")?;
        }
        f.write_str(int)?;
        if scale > 0 {
            write!(f, ".{frac}")?;
        }
        Ok(())
    }
}

/// A value while a statement runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Datum {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Num(Num),
    Text(String),
    Bytea(Vec<u8>),
    Timestamp(i64),
    /// An instant, microseconds since 1970-01-01 UTC.
    TimestampTz(i64),
    Interval(crate::interval::Interval),
    Date(i32),
}

impl Datum {
    pub fn is_null(&self) -> bool {
        matches!(self, Datum::Null)
    }

    /// The stored value of a column of type `ty` as a datum.
    pub fn from_stored(v: &Value, ty: SqlType) -> Datum {
        match (v, ty) {
            (Value::Null, _) => Datum::Null,
            (Value::Int4(d), SqlType::Date) => Datum::Date(*d),
            (Value::Timestamp(t), SqlType::TimestampTz) => Datum::TimestampTz(*t),
            (Value::Bytea(b), SqlType::Interval) => {
                crate::interval::Interval::from_bytes(b).map_or_else(|| Datum::Bytea(b.clone()), Datum::Interval)
            }
            (Value::Int8(m), SqlType::Numeric { scale, .. }) => Datum::Num(Num { mantissa: i128::from(*m), scale }),
            (Value::Int4(x), _) => Datum::Int(i64::from(*x)),
            (Value::Int8(x), _) => Datum::Int(*x),
            (Value::Float8(x), _) => Datum::Float(*x),
            (Value::Bool(b), _) => Datum::Bool(*b),
            (Value::Text(s), _) => Datum::Text(s.clone()),
            (Value::Bytea(b), _) => Datum::Bytea(b.clone()),
            (Value::Timestamp(t), _) => Datum::Timestamp(*t),
        }
    }

    /// Converts to the stored form of a column of type `ty` (assignment cast).
    pub fn to_stored(&self, ty: SqlType, column: &str) -> Result<Value, SqlError> {
        let d = self.coerce(ty)?;
        Ok(match (d, ty) {
            (Datum::Null, _) => Value::Null,
            (Datum::Bool(b), _) => Value::Bool(b),
            (Datum::Int(x), SqlType::Int2) => {
                Value::Int4(i16::try_from(x).map_err(|_| SqlError::out_of_range("smallint"))?.into())
            }
            (Datum::Int(x), SqlType::Int4) => {
                Value::Int4(i32::try_from(x).map_err(|_| SqlError::out_of_range("integer"))?)
            }
            (Datum::Int(x), _) => Value::Int8(x),
            (Datum::Num(n), SqlType::Numeric { precision, scale }) => {
                let n = n.rescale(scale).ok_or_else(|| SqlError::numeric_overflow(precision, scale))?;
                let limit = 10i128.pow(u32::from(precision));
                if n.mantissa.abs() >= limit {
                    return Err(SqlError::numeric_overflow(precision, scale));
                }
                Value::Int8(i64::try_from(n.mantissa).map_err(|_| SqlError::numeric_overflow(precision, scale))?)
            }
            (Datum::Float(f), _) => Value::Float8(f),
            (Datum::Text(s), SqlType::Varchar(Some(n))) => {
                let s = trim_to_length(s, n as usize, "character varying", column)?;
                Value::Text(s)
            }
            (Datum::Text(s), SqlType::Char(n)) => {
                let mut s = trim_to_length(s, n as usize, "character", column)?;
                let len = s.chars().count();
                s.extend(std::iter::repeat_n(' ', n as usize - len));
                Value::Text(s)
            }
            (Datum::Text(s), _) => Value::Text(s),
            (Datum::Bytea(b), _) => Value::Bytea(b),
            (Datum::Timestamp(t) | Datum::TimestampTz(t), _) => Value::Timestamp(t),
            (Datum::Interval(i), _) => Value::Bytea(i.to_bytes()),
            (Datum::Date(d), _) => Value::Int4(d),
            (d, ty) => return Err(SqlError::datatype_mismatch(column, ty, &d)),
        })
    }

    /// Converts a datum to `ty` (an implicit or assignment cast); text is parsed by the type's
    /// input function.
    pub fn coerce(&self, ty: SqlType) -> Result<Datum, SqlError> {
        if let Some(r) = crate::datetime::coerce(self, ty) {
            return r;
        }
        Ok(match (self, ty) {
            (Datum::Null, _) => Datum::Null,
            (Datum::Text(s), t) if !matches!(t, SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_)) => {
                parse_text(s, t)?
            }
            (Datum::Bool(b), SqlType::Bool) => Datum::Bool(*b),
            (Datum::Int(x), SqlType::Int2 | SqlType::Int4 | SqlType::Int8) => Datum::Int(*x),
            (Datum::Int(x), SqlType::Numeric { .. }) => Datum::Num(Num { mantissa: i128::from(*x), scale: 0 }),
            (Datum::Int(x), SqlType::Float8) => Datum::Float(*x as f64),
            (Datum::Num(n), SqlType::Numeric { .. }) => Datum::Num(*n),
            (Datum::Num(n), SqlType::Float8) => Datum::Float(n.to_f64()),
            (Datum::Num(n), SqlType::Int2 | SqlType::Int4 | SqlType::Int8) => {
                let r = n.rescale(0).ok_or_else(|| SqlError::out_of_range("bigint"))?;
                Datum::Int(i64::try_from(r.mantissa).map_err(|_| SqlError::out_of_range("bigint"))?)
            }
            (Datum::Float(f), SqlType::Float8) => Datum::Float(*f),
            (Datum::Float(f), SqlType::Int2 | SqlType::Int4 | SqlType::Int8) => {
                if !f.is_finite() || f.abs() > 9.2e18 {
                    return Err(SqlError::out_of_range("bigint"));
                }
                Datum::Int(f.round_ties_even() as i64)
            }
            (Datum::Float(f), SqlType::Numeric { .. }) => {
                Datum::Num(Num::parse(&format!("{f:.15}")).ok_or_else(|| SqlError::out_of_range("numeric"))?)
            }
            (Datum::Text(s), _) => Datum::Text(s.clone()),
            (Datum::Bytea(b), SqlType::Bytea) => Datum::Bytea(b.clone()),
            (Datum::Timestamp(t), SqlType::Timestamp) => Datum::Timestamp(*t),
            (Datum::Timestamp(t), SqlType::Date) => Datum::Date(t.div_euclid(86_400_000_000) as i32),
            (Datum::Date(d), SqlType::Date) => Datum::Date(*d),
            (Datum::Date(d), SqlType::Timestamp) => Datum::Timestamp(i64::from(*d) * 86_400_000_000),
            (d, SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_)) => Datum::Text(d.to_text().unwrap_or_default()),
            (d, ty) => return Err(SqlError::datatype_mismatch("", ty, d)),
        })
    }

    /// PostgreSQL's text output; `None` for NULL.
    pub fn to_text(&self) -> Option<String> {
        Some(match self {
            Datum::Null => return None,
            Datum::Bool(b) => if *b { "t" } else { "f" }.into(),
            Datum::Int(x) => x.to_string(),
            Datum::Float(f) => float_out(*f),
            Datum::Num(n) => n.to_string(),
            Datum::Text(s) => s.clone(),
            Datum::Bytea(b) => settledb::pgtext::bytea_out(b),
            Datum::Timestamp(t) => timestamp_out(*t),
            Datum::TimestampTz(t) => crate::datetime::timestamptz_out(*t),
            Datum::Interval(i) => i.to_string(),
            Datum::Date(d) => date_out(*d),
        })
    }

    /// PostgreSQL's binary output for a column of wire type `ty`; `None` for NULL.
    pub fn to_binary(&self, ty: SqlType) -> Result<Option<Vec<u8>>, SqlError> {
        let d = self.coerce(ty)?;
        Ok(Some(match (&d, ty) {
            (Datum::Null, _) => return Ok(None),
            (Datum::Bool(b), _) => vec![u8::from(*b)],
            (Datum::Int(x), SqlType::Int2) => (*x as i16).to_be_bytes().to_vec(),
            (Datum::Int(x), SqlType::Int4) => (*x as i32).to_be_bytes().to_vec(),
            (Datum::Int(x), _) => x.to_be_bytes().to_vec(),
            (Datum::Float(f), _) => f.to_be_bytes().to_vec(),
            (Datum::Text(s), _) => s.as_bytes().to_vec(),
            (Datum::Bytea(b), _) => b.clone(),
            (Datum::Timestamp(t) | Datum::TimestampTz(t), _) => (t - PG_EPOCH_MICROS).to_be_bytes().to_vec(),
            (Datum::Interval(i), _) => i.to_bytes(),
            (Datum::Date(x), _) => (x - PG_EPOCH_DAYS).to_be_bytes().to_vec(),
            (Datum::Num(n), _) => settledb::decode::sqltypes::numeric_send(n.mantissa, n.scale),
        }))
    }

    /// Decodes a binary-format parameter of type `ty`.
    pub fn from_binary(b: &[u8], ty: SqlType) -> Result<Datum, SqlError> {
        let bad =
            || SqlError::new("22P03", format!("incorrect binary data format in parameter of type {}", ty.display()));
        let arr = |n: usize| -> Result<&[u8], SqlError> {
            if b.len() == n {
                Ok(b)
            } else {
                Err(bad())
            }
        };
        Ok(match ty {
            SqlType::Bool => Datum::Bool(arr(1)?[0] != 0),
            SqlType::Int2 => Datum::Int(i64::from(i16::from_be_bytes(arr(2)?.try_into().map_err(|_| bad())?))),
            SqlType::Int4 => Datum::Int(i64::from(i32::from_be_bytes(arr(4)?.try_into().map_err(|_| bad())?))),
            SqlType::Int8 => Datum::Int(i64::from_be_bytes(arr(8)?.try_into().map_err(|_| bad())?)),
            SqlType::Float8 => Datum::Float(f64::from_be_bytes(arr(8)?.try_into().map_err(|_| bad())?)),
            SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_) => {
                Datum::Text(String::from_utf8(b.to_vec()).map_err(|_| SqlError::bad_utf8())?)
            }
            SqlType::Bytea => Datum::Bytea(b.to_vec()),
            SqlType::Timestamp | SqlType::TimestampTz => {
                let t = i64::from_be_bytes(arr(8)?.try_into().map_err(|_| bad())?)
                    .checked_add(PG_EPOCH_MICROS)
                    .ok_or_else(|| SqlError::new("22008", "timestamp out of range"))?;
                if ty == SqlType::TimestampTz {
                    Datum::TimestampTz(t)
                } else {
                    Datum::Timestamp(t)
                }
            }
            SqlType::Interval => Datum::Interval(crate::interval::Interval::from_bytes(b).ok_or_else(bad)?),
            SqlType::Date => Datum::Date(i32::from_be_bytes(arr(4)?.try_into().map_err(|_| bad())?) + PG_EPOCH_DAYS),
            SqlType::Numeric { .. } => Datum::Num(numeric_recv(b)?),
        })
    }

    /// The SQL type a datum has on its own (for result columns computed from expressions).
    pub fn natural_type(&self) -> SqlType {
        match self {
            Datum::Bool(_) => SqlType::Bool,
            Datum::Int(_) => SqlType::Int8,
            Datum::Float(_) => SqlType::Float8,
            Datum::Num(n) => SqlType::Numeric { precision: 38, scale: n.scale },
            Datum::Bytea(_) => SqlType::Bytea,
            Datum::Timestamp(_) => SqlType::Timestamp,
            Datum::TimestampTz(_) => SqlType::TimestampTz,
            Datum::Interval(_) => SqlType::Interval,
            Datum::Date(_) => SqlType::Date,
            Datum::Null | Datum::Text(_) => SqlType::Text,
        }
    }
}

/// PostgreSQL's `numeric_recv`: ndigits, weight, sign and dscale (16 bits each), then
/// `ndigits` base-10000 digits, the first worth 10000^weight. Digits finer than dscale are
/// cut off, as PostgreSQL cuts them. Malformed bytes are 22P03, as in PostgreSQL; values
/// beyond [`Num`]'s 38 digits are 22003, and NaN and the infinities, which it cannot hold,
/// 0A000.
pub fn numeric_recv(b: &[u8]) -> Result<Num, SqlError> {
    let invalid = |what: &str| SqlError::new("22P03", format!("invalid {what} in external \"numeric\" value"));
    let field = |i: usize| b.get(2 * i..2 * i + 2).map(|x| i16::from_be_bytes([x[0], x[1]]));
    let (Some(ndigits), Some(weight), Some(sign), Some(dscale)) = (field(0), field(1), field(2), field(3)) else {
        return Err(invalid("length"));
    };
    if ndigits < 0 || b.len() != 8 + 2 * ndigits as usize {
        return Err(invalid("length"));
    }
    let negative = match sign as u16 {
        0x0000 => false,
        0x4000 => true,
        0xC000 => return Err(SqlError::unsupported("numeric NaN")),
        0xD000 | 0xF000 => return Err(SqlError::unsupported("numeric infinity")),
        _ => return Err(invalid("sign")),
    };
    // PostgreSQL's NUMERIC_DSCALE_MAX.
    if !(0..=0x3FFF).contains(&dscale) {
        return Err(invalid("scale"));
    }
    let too_wide = || SqlError::new("22003", "value overflows numeric format");
    let scale = u8::try_from(dscale).ok().filter(|&s| s <= 38).ok_or_else(too_wide)?;
    let mut mantissa: i128 = 0;
    for (i, d) in (0..ndigits as usize).filter_map(|i| field(4 + i)).enumerate() {
        if !(0..10_000).contains(&d) {
            return Err(invalid("digit"));
        }
        // The digit's place in the mantissa, which counts units of 10^-dscale.
        let place = 4 * (i32::from(weight) - i as i32) + i32::from(dscale);
        let part = match place {
            _ if d == 0 => 0,
            p if p >= 0 => {
                10i128.checked_pow(p as u32).and_then(|f| f.checked_mul(i128::from(d))).ok_or_else(too_wide)?
            }
            p if p > -4 => i128::from(d) / 10i128.pow(p.unsigned_abs()),
            _ => 0,
        };
        mantissa = mantissa.checked_add(part).ok_or_else(too_wide)?;
    }
    Ok(Num { mantissa: if negative { -mantissa } else { mantissa }, scale })
}

fn trim_to_length(s: String, n: usize, tyname: &str, column: &str) -> Result<String, SqlError> {
    let len = s.chars().count();
    if len <= n {
        return Ok(s);
    }
    // PostgreSQL accepts an over-long value when the excess is only spaces.
    let kept: String = s.chars().take(n).collect();
    if s.chars().skip(n).all(|c| c == ' ') {
        return Ok(kept);
    }
    let _ = column;
    Err(SqlError::new("22001", format!("value too long for type {tyname}({n})")))
}

/// Compares two non-NULL datums (`None` when either is NULL or they cannot be compared).
pub fn compare(a: &Datum, b: &Datum) -> Option<Ordering> {
    use Datum as D;
    Some(match (a, b) {
        (D::Null, _) | (_, D::Null) => return None,
        (D::Int(x), D::Int(y)) => x.cmp(y),
        (D::Int(x), D::Float(y)) => (*x as f64).total_cmp(y),
        (D::Float(x), D::Int(y)) => x.total_cmp(&(*y as f64)),
        (D::Float(x), D::Float(y)) => x.total_cmp(y),
        (D::Num(x), D::Num(y)) => x.compare(*y),
        (D::Num(x), D::Int(y)) => x.compare(Num { mantissa: i128::from(*y), scale: 0 }),
        (D::Int(x), D::Num(y)) => Num { mantissa: i128::from(*x), scale: 0 }.compare(*y),
        (D::Num(x), D::Float(y)) => x.to_f64().total_cmp(y),
        (D::Float(x), D::Num(y)) => x.total_cmp(&y.to_f64()),
        (D::Bool(x), D::Bool(y)) => x.cmp(y),
        (D::Text(x), D::Text(y)) => x.trim_end_matches(' ').cmp(y.trim_end_matches(' ')),
        (D::Bytea(x), D::Bytea(y)) => x.cmp(y),
        (D::Timestamp(x), D::Timestamp(y)) => x.cmp(y),
        (D::Date(x), D::Date(y)) => x.cmp(y),
        (D::Date(x), D::Timestamp(y)) => (i64::from(*x) * 86_400_000_000).cmp(y),
        (D::Timestamp(x), D::Date(y)) => x.cmp(&(i64::from(*y) * 86_400_000_000)),
        (D::TimestampTz(_) | D::Interval(_), D::TimestampTz(_) | D::Timestamp(_) | D::Date(_) | D::Interval(_))
        | (D::Timestamp(_) | D::Date(_), D::TimestampTz(_)) => crate::datetime::compare(a, b)?,
        // An untyped string meets a typed value: read it as that type.
        (D::Text(s), other) => compare(&parse_text(s, other.natural_type()).ok()?, other)?,
        (other, D::Text(s)) => compare(other, &parse_text(s, other.natural_type()).ok()?)?,
        _ => return None,
    })
}

/// A type's input function: text to datum.
pub fn parse_text(s: &str, ty: SqlType) -> Result<Datum, SqlError> {
    let bad = || SqlError::invalid_text(ty, s);
    let t = s.trim();
    Ok(match ty {
        SqlType::Bool => match t.to_ascii_lowercase().as_str() {
            "t" | "true" | "yes" | "y" | "on" | "1" => Datum::Bool(true),
            "f" | "false" | "no" | "n" | "off" | "0" => Datum::Bool(false),
            _ => return Err(bad()),
        },
        SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => {
            let x: i64 = t.parse().map_err(|_| bad())?;
            let (lo, hi, name) = match ty {
                SqlType::Int2 => (i64::from(i16::MIN), i64::from(i16::MAX), "smallint"),
                SqlType::Int4 => (i64::from(i32::MIN), i64::from(i32::MAX), "integer"),
                _ => (i64::MIN, i64::MAX, "bigint"),
            };
            if x < lo || x > hi {
                return Err(SqlError::new("22003", format!("value \"{t}\" is out of range for type {name}")));
            }
            Datum::Int(x)
        }
        SqlType::Numeric { .. } => Datum::Num(Num::parse(t).ok_or_else(bad)?),
        SqlType::Float8 => Datum::Float(match t.to_ascii_lowercase().as_str() {
            "nan" => f64::NAN,
            "infinity" | "inf" | "+infinity" => f64::INFINITY,
            "-infinity" | "-inf" => f64::NEG_INFINITY,
            _ => t.parse().map_err(|_| bad())?,
        }),
        SqlType::Text | SqlType::Varchar(_) | SqlType::Char(_) => Datum::Text(s.to_string()),
        SqlType::Bytea => Datum::Bytea(bytea_in(s).ok_or_else(bad)?),
        SqlType::Timestamp | SqlType::TimestampTz | SqlType::Interval | SqlType::Date => {
            crate::datetime::parse_text(t, ty)?
        }
    })
}

fn bytea_in(s: &str) -> Option<Vec<u8>> {
    if let Some(hex) = s.strip_prefix("\\x") {
        let digits: Vec<u8> = hex.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        if !digits.len().is_multiple_of(2) {
            return None;
        }
        return digits
            .chunks(2)
            .map(|p| Some((char::from(p[0]).to_digit(16)? * 16 + char::from(p[1]).to_digit(16)?) as u8))
            .collect();
    }
    // Escape format: backslash followed by three octal digits or another backslash.
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
        } else if b.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else {
            let oct = b.get(i + 1..i + 4)?;
            if !oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                return None;
            }
            let v = u32::from(oct[0] - b'0') * 64 + u32::from(oct[1] - b'0') * 8 + u32::from(oct[2] - b'0');
            out.push(u8::try_from(v).ok()?);
            i += 4;
        }
    }
    Some(out)
}

// PostgreSQL's text output of the engine's types lives with the engine (logical decoding's
// output plugins print values too).
pub use settledb::pgtext::{civil_from_days, date_out, days_from_civil, float_out, timestamp_out};

#[cfg(test)]
mod tests {
    use super::*;

    /// `numeric_send`'s layout: ndigits, weight, sign, dscale, digits.
    fn numeric_bytes(weight: i16, sign: u16, dscale: i16, digits: &[i16]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(digits.len() as i16).to_be_bytes());
        v.extend_from_slice(&weight.to_be_bytes());
        v.extend_from_slice(&sign.to_be_bytes());
        v.extend_from_slice(&dscale.to_be_bytes());
        for d in digits {
            v.extend_from_slice(&d.to_be_bytes());
        }
        v
    }

    /// Binary numerics as PostgreSQL 15.18 sends them (`SELECT numeric_send(x)`), both ways.
    #[test]
    fn numeric_binary_is_postgresqls() {
        let ty = SqlType::Numeric { precision: 38, scale: 4 };
        for (text, bytes) in [
            ("300000.00", numeric_bytes(1, 0, 2, &[30])),
            ("-123.45", numeric_bytes(0, 0x4000, 2, &[123, 4500])),
            ("0.1219", numeric_bytes(-1, 0, 4, &[1219])),
            ("0.00", numeric_bytes(0, 0, 2, &[])),
            ("123456789", numeric_bytes(2, 0, 0, &[1, 2345, 6789])),
            ("0.00000005", numeric_bytes(-2, 0, 8, &[5])),
            ("99999999999999999999999999999999999999", {
                let mut d = vec![99];
                d.extend([9999; 9]);
                numeric_bytes(9, 0, 0, &d)
            }),
        ] {
            let n = Num::parse(text).unwrap();
            assert_eq!(
                Datum::Num(n).to_binary(SqlType::Numeric { precision: 38, scale: n.scale }).unwrap(),
                Some(bytes.clone()),
                "{text}"
            );
            assert_eq!(Datum::from_binary(&bytes, ty).unwrap().to_text().as_deref(), Some(text), "{text}");
        }
    }

    #[test]
    fn numeric_binary_input_is_checked() {
        let ty = SqlType::Numeric { precision: 10, scale: 2 };
        let recv = |b: &[u8]| Datum::from_binary(b, ty).map(|d| d.to_text().unwrap()).map_err(|e| e.code);
        // Digits finer than dscale are cut off (1.23456 sent with dscale 2).
        assert_eq!(recv(&numeric_bytes(0, 0, 2, &[1, 2345, 6000])), Ok("1.23".into()));
        assert_eq!(recv(&numeric_bytes(0, 0x4000, 1, &[7, 9999])).as_deref(), Ok("-7.9"));
        assert_eq!(recv(&numeric_bytes(0, 0, 0, &[10_000])).unwrap_err(), "22P03", "a digit past 9999");
        assert_eq!(recv(&numeric_bytes(0, 0x1234, 0, &[1])).unwrap_err(), "22P03", "an unknown sign");
        assert_eq!(recv(&numeric_bytes(0, 0, -1, &[1])).unwrap_err(), "22P03", "a negative scale");
        assert_eq!(recv(&numeric_bytes(0, 0, 0, &[1])[..9]).unwrap_err(), "22P03", "a short digit");
        assert_eq!(recv(&[0, 1]).unwrap_err(), "22P03", "a short header");
        assert_eq!(recv(&numeric_bytes(0, 0xC000, 0, &[])).unwrap_err(), "0A000", "NaN");
        assert_eq!(recv(&numeric_bytes(0, 0xD000, 0, &[])).unwrap_err(), "0A000", "infinity");
        assert_eq!(recv(&numeric_bytes(10, 0, 0, &[1])).unwrap_err(), "22003", "10000^10 has 41 digits");
        assert_eq!(recv(&numeric_bytes(0, 0, 39, &[1])).unwrap_err(), "22003", "39 places");
    }

    #[test]
    fn text_round_trips() {
        for (s, ty) in [
            ("2024-02-29 13:45:01.25", SqlType::Timestamp),
            ("1999-12-31", SqlType::Date),
            ("-12.50", SqlType::Numeric { precision: 10, scale: 2 }),
            ("\\x00ff10", SqlType::Bytea),
            ("t", SqlType::Bool),
        ] {
            assert_eq!(parse_text(s, ty).unwrap().to_text().unwrap(), s);
        }
        assert_eq!(float_out(1e20), "1e+20");
        assert_eq!(float_out(0.1), "0.1");
        assert_eq!(float_out(1.5e-5), "1.5e-05");
    }

    #[test]
    fn numeric_and_char_storage() {
        let v = Datum::Text("3.14159".into()).to_stored(SqlType::Numeric { precision: 5, scale: 2 }, "x").unwrap();
        assert_eq!(v, Value::Int8(314));
        let e = Datum::Text("123456".into()).to_stored(SqlType::Numeric { precision: 5, scale: 2 }, "x");
        assert!(e.is_err());
        let v = Datum::Text("ab".into()).to_stored(SqlType::Char(4), "c").unwrap();
        assert_eq!(v, Value::Text("ab  ".into()));
        assert!(Datum::Text("abcdef".into()).to_stored(SqlType::Varchar(Some(3)), "c").is_err());
        assert!(Datum::Int(70_000).to_stored(SqlType::Int2, "c").is_err());
    }

    #[test]
    fn binary_timestamps_count_from_2000() {
        let t = parse_text("2000-01-01 00:00:01", SqlType::Timestamp).unwrap();
        assert_eq!(t.to_binary(SqlType::Timestamp).unwrap().unwrap(), 1_000_000i64.to_be_bytes().to_vec());
    }
}
