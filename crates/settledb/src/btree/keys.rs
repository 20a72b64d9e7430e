//! Order-preserving ("memcomparable") key encoding: the bytes of two encoded keys compare with
//! `memcmp` exactly as the keys compare as values, and they decode back to the values, so the
//! B-tree never needs a type-aware comparator and index-only scans can return the key.
//!
//! Per column, in index column order:
//!
//! | value        | bytes                                                                 |
//! |--------------|-----------------------------------------------------------------------|
//! | NULL         | `0x01` (sorts after every value: NULLS LAST, PostgreSQL's default)      |
//! | non-NULL     | `0x00`, then the value:                                                |
//! | int4         | 4 bytes big-endian with the sign bit flipped                           |
//! | int8, timestamp | 8 bytes big-endian with the sign bit flipped                        |
//! | float8       | IEEE bits, big-endian; negative: all bits inverted, else sign bit set  |
//! | bool         | 1 byte, 0 or 1                                                          |
//! | text, bytea  | the bytes with `0x00` written as `0x00 0xFF`, then `0x00 0x00`          |
//!
//! Every column is self-delimiting, so the encoding of the first *k* columns is a byte prefix
//! of the encoding of the whole key: a scan bound naming fewer columns than the index is just a
//! shorter byte string. float8 `-0.0` is stored as `0.0` and every NaN as one NaN that sorts
//! above `+inf` (PostgreSQL's order); decoding returns those normal forms.

use crate::heap::tuple::{Type, Value};

const NOT_NULL: u8 = 0x00;
const NULL: u8 = 0x01;

/// Appends the encoding of `values` (checked against `types`, NULL allowed) to `out`.
pub fn encode_into(out: &mut Vec<u8>, types: &[Type], values: &[Value]) -> Result<(), String> {
    if values.len() > types.len() {
        return Err(format!("key has {} columns, the index has {}", values.len(), types.len()));
    }
    for (i, (v, &ty)) in values.iter().zip(types).enumerate() {
        if *v == Value::Null {
            out.push(NULL);
            continue;
        }
        if v.ty() != Some(ty) {
            return Err(format!("index column {} is {}, got {v:?}", i + 1, ty.name()));
        }
        out.push(NOT_NULL);
        match v {
            Value::Int4(x) => out.extend_from_slice(&((*x as u32) ^ 0x8000_0000).to_be_bytes()),
            Value::Int8(x) | Value::Timestamp(x) => {
                out.extend_from_slice(&((*x as u64) ^ 0x8000_0000_0000_0000).to_be_bytes())
            }
            Value::Float8(f) => out.extend_from_slice(&float_bits(*f).to_be_bytes()),
            Value::Bool(b) => out.push(u8::from(*b)),
            Value::Text(s) => escape_bytes(out, s.as_bytes()),
            Value::Bytea(b) => escape_bytes(out, b),
            Value::Null => unreachable!("handled above"),
        }
    }
    Ok(())
}

/// The encoding of `values` (a full key or a prefix of one).
pub fn encode(types: &[Type], values: &[Value]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(8 * values.len());
    encode_into(&mut out, types, values)?;
    Ok(out)
}

fn float_bits(f: f64) -> u64 {
    let f = if f == 0.0 {
        0.0 // -0.0 == 0.0
    } else if f.is_nan() {
        f64::NAN
    } else {
        f
    };
    let bits = f.to_bits();
    if bits & (1 << 63) != 0 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

fn float_from_bits(enc: u64) -> f64 {
    if enc & (1 << 63) != 0 {
        f64::from_bits(enc & !(1 << 63))
    } else {
        f64::from_bits(!enc)
    }
}

fn escape_bytes(out: &mut Vec<u8>, b: &[u8]) {
    for &c in b {
        out.push(c);
        if c == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

/// Decodes a whole key of `types`. Never panics; `Err` describes the first malformed byte.
pub fn decode(types: &[Type], mut bytes: &[u8]) -> Result<Vec<Value>, String> {
    let mut vals = Vec::with_capacity(types.len());
    for (i, &ty) in types.iter().enumerate() {
        let (&marker, rest) = bytes.split_first().ok_or_else(|| format!("key ends before column {}", i + 1))?;
        bytes = rest;
        match marker {
            NULL => {
                vals.push(Value::Null);
                continue;
            }
            NOT_NULL => {}
            m => return Err(format!("column {} has null marker {m:#04x}", i + 1)),
        }
        let fixed = |bytes: &mut &[u8], n: usize| -> Result<Vec<u8>, String> {
            if bytes.len() < n {
                return Err(format!("column {} ({}) is truncated", i + 1, ty.name()));
            }
            let (a, b) = bytes.split_at(n);
            *bytes = b;
            Ok(a.to_vec())
        };
        let v = match ty {
            Type::Int4 => {
                let b = fixed(&mut bytes, 4)?;
                Value::Int4((u32::from_be_bytes([b[0], b[1], b[2], b[3]]) ^ 0x8000_0000) as i32)
            }
            Type::Int8 | Type::Timestamp => {
                let b = fixed(&mut bytes, 8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(&b);
                let x = (u64::from_be_bytes(a) ^ 0x8000_0000_0000_0000) as i64;
                if ty == Type::Int8 {
                    Value::Int8(x)
                } else {
                    Value::Timestamp(x)
                }
            }
            Type::Float8 => {
                let b = fixed(&mut bytes, 8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(&b);
                Value::Float8(float_from_bits(u64::from_be_bytes(a)))
            }
            Type::Bool => match fixed(&mut bytes, 1)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(format!("column {} (bool) has byte {b:#04x}", i + 1)),
            },
            Type::Text | Type::Bytea => {
                let (raw, rest) =
                    unescape(bytes).ok_or_else(|| format!("column {} ({}) is malformed", i + 1, ty.name()))?;
                bytes = rest;
                if ty == Type::Text {
                    Value::Text(String::from_utf8(raw).map_err(|_| format!("column {} (text) is not UTF-8", i + 1))?)
                } else {
                    Value::Bytea(raw)
                }
            }
        };
        vals.push(v);
    }
    if !bytes.is_empty() {
        return Err(format!("{} bytes left after the last column", bytes.len()));
    }
    Ok(vals)
}

fn unescape(bytes: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        let c = *bytes.get(i)?;
        if c != 0 {
            out.push(c);
            i += 1;
            continue;
        }
        match *bytes.get(i + 1)? {
            0xFF => {
                out.push(0);
                i += 2;
            }
            0x00 => return Some((out, &bytes[i + 2..])),
            _ => return None,
        }
    }
}

/// Renders values the way PostgreSQL's unique-violation detail prints a key: `5`, `abc`,
/// `null`, comma-separated.
pub fn render_values(values: &[Value]) -> String {
    values
        .iter()
        .map(|v| match v {
            Value::Null => "null".to_string(),
            Value::Int4(x) => x.to_string(),
            Value::Int8(x) | Value::Timestamp(x) => x.to_string(),
            Value::Float8(x) => x.to_string(),
            Value::Bool(b) => if *b { "t" } else { "f" }.to_string(),
            Value::Text(s) => s.clone(),
            Value::Bytea(b) => {
                let mut s = String::from("\\x");
                for c in b {
                    s.push_str(&format!("{c:02x}"));
                }
                s
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
