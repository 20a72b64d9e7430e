//! Heap tuples: the 23-byte version header every row carries, and the row codec.
//!
//! The format follows PostgreSQL's `htup_details.h` (`HeapTupleHeaderData`) and the
//! alignment rules of `heaptuple.c` (`heap_fill_tuple` / `heap_deform_tuple`), with our own
//! little-endian byte layout, so that a row takes as many bytes here as it does in
//! PostgreSQL and page counts (hence vacuum work) are comparable.
//!
//! ```text
//!  0       4       8       12          18           20          22     23
//!  +-------+-------+-------+-----------+------------+-----------+------+
//!  | xmin  | xmax  | cid   | ctid      | infomask2  | infomask  | hoff |
//!  | u32   | u32   | u32   | blk u32 + | natts and  | HASNULL,  | u8   |
//!  |       |       |       | off u16   | HOT bits   | hint bits |      |
//!  +-------+-------+-------+-----------+------------+-----------+------+
//!  | null bitmap (only with HEAP_HASNULL): bit i set = attribute i NOT null |
//!  +-----------------------------------------------------+ zero pad to t_hoff (MAXALIGN)
//!  | data: attributes in column order, NULLs take no space, each aligned     |
//!  |       relative to t_hoff as below                                       |
//!  +--------------------------------------------------------------------------+
//! ```
//!
//! | type        | size | alignment | encoding                                    |
//! |-------------|------|-----------|---------------------------------------------|
//! | `int4`      | 4    | 4         | i32 LE                                      |
//! | `int8`      | 8    | 8         | i64 LE                                      |
//! | `float8`    | 8    | 8         | f64 LE (IEEE bits)                          |
//! | `timestamp` | 8    | 8         | i64 LE microseconds since 2000-01-01        |
//! | `bool`      | 1    | 1         | 0 or 1                                      |
//! | `text`, `bytea` | varlena | none / 4 | short: 1 byte `((len+1) << 1) | 1`, no padding, when `len + 1 <= 127`; long: 4-byte `total_len << 2` LE (low bits 00), aligned to 4 |
//!
//! Padding bytes are zero. That is what lets a reader tell a short varlena header (an odd
//! byte) from padding before a long one (a zero byte) without knowing which was written,
//! exactly the trick PostgreSQL's `att_align_pointer` uses.
//!
//! Worked example (pgbench_accounts): `(int4, int4, int4, text of 84 chars)`, no NULLs:
//! header 23 -> t_hoff 24; three int4 at data offsets 0, 4, 8; the text's 1-byte header at 12
//! and its 84 bytes at 13..97: 24 + 97 = 121 bytes, MAXALIGNed to 128 on the page, so 61
//! rows fit in a page.
//!
//! # Invariants
//!
//! * `t_hoff >= 23`, MAXALIGNed, `<= t_len`; with `HEAP_HASNULL` the bitmap
//!   (`ceil(natts / 8)` bytes) fits before `t_hoff`. [`TupleHeader::parse`] checks this.
//! * Attributes past `natts` read as NULL (columns added after the row was written), or as
//!   the column's *missing value* when the reader is given one ([`deform_tuple_with`]):
//!   `ALTER TABLE ... ADD COLUMN c DEFAULT 5` stores `5` once in the catalog (PostgreSQL's
//!   `attmissingval`) instead of rewriting every row, and rows written before read it.
//! * [`deform_tuple`] and [`Schema::decode`] run on bytes from disk: they return an error
//!   describing the damage and never panic.
//! * Hint bits: `XMIN_COMMITTED | XMIN_INVALID` together mean frozen (`HEAP_XMIN_FROZEN`).

use std::fmt::Write as _;

use crate::error::{Error, Result};
use crate::page::maxalign;
use crate::types::{Tid, Xid};

pub const HEAP_TUPLE_HEADER_SIZE: usize = 23;
pub const MAX_HEAP_TUPLE_SIZE: usize = 8160;
pub const HEAP_HASNULL: u16 = 0x0001;
pub const HEAP_HASVARWIDTH: u16 = 0x0002;
/// A row lock's strength ([`crate::heap::lock`]): KEY SHARE alone, SHARE with EXCL_LOCK (both
/// bits, PostgreSQL's `HEAP_XMAX_SHR_LOCK`), NO KEY UPDATE and UPDATE as EXCL_LOCK.
pub const HEAP_XMAX_KEYSHR_LOCK: u16 = 0x0010;
pub const HEAP_XMAX_EXCL_LOCK: u16 = 0x0040;
/// xmax only locks the row (`SELECT ... FOR UPDATE/SHARE`): it did not delete or update it.
pub const HEAP_XMAX_LOCK_ONLY: u16 = 0x0080;
pub const HEAP_XMIN_COMMITTED: u16 = 0x0100;
pub const HEAP_XMIN_INVALID: u16 = 0x0200;
pub const HEAP_XMIN_FROZEN: u16 = 0x0300;
pub const HEAP_XMAX_COMMITTED: u16 = 0x0400;
pub const HEAP_XMAX_INVALID: u16 = 0x0800;
pub const HEAP_UPDATED: u16 = 0x2000;
pub const HEAP_NATTS_MASK: u16 = 0x07FF;
pub const HEAP_KEYS_UPDATED: u16 = 0x2000;
pub const HEAP_HOT_UPDATED: u16 = 0x4000;
pub const HEAP_ONLY_TUPLE: u16 = 0x8000;
/// The most columns a table may have (PostgreSQL's `MaxHeapAttributeNumber`).
pub const MAX_HEAP_ATTRIBUTES: usize = 1600;

const OFF_XMIN: usize = 0;
const OFF_XMAX: usize = 4;
const OFF_CID: usize = 8;
const OFF_CTID: usize = 12;
const OFF_INFOMASK2: usize = 18;
const OFF_INFOMASK: usize = 20;
const OFF_HOFF: usize = 22;

const _: () = assert!(OFF_HOFF + 1 == HEAP_TUPLE_HEADER_SIZE);
const _: () = assert!(OFF_CTID + 6 == OFF_INFOMASK2);
const _: () = assert!(MAX_HEAP_TUPLE_SIZE == crate::page::BLCKSZ - maxalign(24 + 4));
const _: () = assert!(MAX_HEAP_ATTRIBUTES <= HEAP_NATTS_MASK as usize);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Type {
    Int4,
    Int8,
    Float8,
    Bool,
    Text,
    Bytea,
    Timestamp,
}

impl Type {
    pub const ALL: [Type; 7] =
        [Type::Int4, Type::Int8, Type::Float8, Type::Bool, Type::Text, Type::Bytea, Type::Timestamp];

    /// The SQL name, as error messages print it.
    pub fn name(self) -> &'static str {
        match self {
            Type::Int4 => "int4",
            Type::Int8 => "int8",
            Type::Float8 => "float8",
            Type::Bool => "bool",
            Type::Text => "text",
            Type::Bytea => "bytea",
            Type::Timestamp => "timestamp",
        }
    }

    /// The catalog tag of the type.
    pub fn to_u8(self) -> u8 {
        match self {
            Type::Int4 => 1,
            Type::Int8 => 2,
            Type::Float8 => 3,
            Type::Bool => 4,
            Type::Text => 5,
            Type::Bytea => 6,
            Type::Timestamp => 7,
        }
    }

    pub fn from_u8(v: u8) -> Option<Type> {
        Type::ALL.into_iter().find(|t| t.to_u8() == v)
    }

    /// Alignment of a fixed-width value (varlena: of the 4-byte-header form).
    fn align(self) -> usize {
        match self {
            Type::Bool => 1,
            Type::Int4 | Type::Text | Type::Bytea => 4,
            Type::Int8 | Type::Float8 | Type::Timestamp => 8,
        }
    }
}

#[derive(Clone, PartialEq, Debug)]
pub enum Value {
    Null,
    Int4(i32),
    Int8(i64),
    Float8(f64),
    Bool(bool),
    Text(String),
    Bytea(Vec<u8>),
    Timestamp(i64),
}

impl Value {
    /// The type of a non-NULL value; `None` for NULL.
    pub fn ty(&self) -> Option<Type> {
        Some(match self {
            Value::Null => return None,
            Value::Int4(_) => Type::Int4,
            Value::Int8(_) => Type::Int8,
            Value::Float8(_) => Type::Float8,
            Value::Bool(_) => Type::Bool,
            Value::Text(_) => Type::Text,
            Value::Bytea(_) => Type::Bytea,
            Value::Timestamp(_) => Type::Timestamp,
        })
    }
}

impl Value {
    /// The value borrowed.
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Int4(x) => ValueRef::Int4(*x),
            Value::Int8(x) => ValueRef::Int8(*x),
            Value::Float8(x) => ValueRef::Float8(*x),
            Value::Bool(x) => ValueRef::Bool(*x),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Bytea(b) => ValueRef::Bytea(b),
            Value::Timestamp(t) => ValueRef::Timestamp(*t),
        }
    }
}

/// A [`Value`] borrowed from the bytes it was read from: what the logical decoder hands its
/// output plugins, which write most values straight into their messages
/// ([`deform_logged_tuple_refs`]).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum ValueRef<'a> {
    Null,
    Int4(i32),
    Int8(i64),
    Float8(f64),
    Bool(bool),
    /// A text value's bytes as stored, not checked to be UTF-8 (the engine stores only valid
    /// text, and a WAL record's CRC vouches for its bytes): a reader that needs a `str` checks
    /// them ([`ValueRef::to_value`]); one that only copies them out need not.
    Text(&'a [u8]),
    Bytea(&'a [u8]),
    Timestamp(i64),
}

impl ValueRef<'_> {
    /// The owned value; a text value that is not UTF-8 is an error naming `what`.
    pub fn to_value(self, what: &dyn std::fmt::Display) -> std::result::Result<Value, String> {
        Ok(match self {
            ValueRef::Null => Value::Null,
            ValueRef::Int4(x) => Value::Int4(x),
            ValueRef::Int8(x) => Value::Int8(x),
            ValueRef::Float8(x) => Value::Float8(x),
            ValueRef::Bool(x) => Value::Bool(x),
            ValueRef::Text(b) => Value::Text(text(b, what)?.to_owned()),
            ValueRef::Bytea(b) => Value::Bytea(b.to_vec()),
            ValueRef::Timestamp(t) => Value::Timestamp(t),
        })
    }

    pub fn is_null(self) -> bool {
        matches!(self, ValueRef::Null)
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Column {
    pub name: String,
    pub ty: Type,
    pub nullable: bool,
}

#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Schema {
    pub columns: Vec<Column>,
}

#[inline]
fn rd16(t: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(t[at..at + 2].try_into().expect("two bytes"))
}

#[inline]
fn rd32(t: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(t[at..at + 4].try_into().expect("four bytes"))
}

/// Bytes of null bitmap for `natts` attributes.
pub fn null_bitmap_len(natts: usize) -> usize {
    natts.div_ceil(8)
}

/// `(xmin, xmax, infomask, infomask2)` of the tuple `t` if its header is valid (the checks of
/// [`TupleHeader::parse`]), read from one fixed-size copy of the header. Hot path: VACUUM's
/// prune pass reads every tuple's header with it.
#[inline]
pub fn header_fields(t: &[u8]) -> Option<(Xid, Xid, u16, u16)> {
    // A valid header's t_hoff is MAXALIGNed and at least 23, so at least 24 bytes exist.
    let h: &[u8; 24] = t.get(..24)?.try_into().ok()?;
    let u16_at = |at: usize| u16::from_le_bytes([h[at], h[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let (infomask, infomask2, hoff) = (u16_at(OFF_INFOMASK), u16_at(OFF_INFOMASK2), usize::from(h[OFF_HOFF]));
    let bitmap =
        if infomask & HEAP_HASNULL != 0 { null_bitmap_len(usize::from(infomask2 & HEAP_NATTS_MASK)) } else { 0 };
    let valid = hoff >= HEAP_TUPLE_HEADER_SIZE
        && hoff == maxalign(hoff)
        && hoff <= t.len()
        && HEAP_TUPLE_HEADER_SIZE + bitmap <= hoff;
    valid.then(|| (Xid(u32_at(OFF_XMIN)), Xid(u32_at(OFF_XMAX)), infomask, infomask2))
}

/// Changes the masks of the tuple `t`, whose header [`header_fields`] accepted: `t_infomask`
/// loses `clear` and gains `set`, `t_infomask2` loses `clear2`, and with `clear_xmax` the xmax
/// becomes invalid. Freezing, live and in redo. Hot path: one fixed-size view of the header.
#[inline]
pub fn change_masks(t: &mut [u8], set: u16, clear: u16, clear2: u16, clear_xmax: bool) {
    let h: &mut [u8; 24] = (&mut t[..24]).try_into().expect("a valid header spans 24 bytes");
    let m = u16::from_le_bytes([h[OFF_INFOMASK], h[OFF_INFOMASK + 1]]);
    let m2 = u16::from_le_bytes([h[OFF_INFOMASK2], h[OFF_INFOMASK2 + 1]]);
    h[OFF_INFOMASK..OFF_INFOMASK + 2].copy_from_slice(&((m & !clear) | set).to_le_bytes());
    h[OFF_INFOMASK2..OFF_INFOMASK2 + 2].copy_from_slice(&(m2 & !clear2).to_le_bytes());
    if clear_xmax {
        h[OFF_XMAX..OFF_XMAX + 4].copy_from_slice(&0u32.to_le_bytes());
    }
}

/// A validated view of a tuple's header. Holding one proves the header invariants above.
pub struct TupleHeader<'a>(&'a [u8]);

impl<'a> TupleHeader<'a> {
    /// Checks the header of `t` (the whole tuple): `None` unless it is at least 23 bytes,
    /// `t_hoff` is at least 23, MAXALIGNed and within `t`, and a null bitmap (when
    /// `HEAP_HASNULL`) fits before `t_hoff`. Never panics.
    #[inline]
    pub fn parse(t: &'a [u8]) -> Option<TupleHeader<'a>> {
        header_valid(t).then_some(TupleHeader(t))
    }

    /// The whole tuple.
    pub fn bytes(&self) -> &'a [u8] {
        self.0
    }

    pub fn xmin(&self) -> Xid {
        Xid(rd32(self.0, OFF_XMIN))
    }

    pub fn xmax(&self) -> Xid {
        Xid(rd32(self.0, OFF_XMAX))
    }

    pub fn cid(&self) -> u32 {
        rd32(self.0, OFF_CID)
    }

    pub fn ctid(&self) -> Tid {
        let mut b = [0u8; 6];
        b.copy_from_slice(&self.0[OFF_CTID..OFF_CTID + 6]);
        Tid::from_bytes(b)
    }

    pub fn infomask(&self) -> u16 {
        rd16(self.0, OFF_INFOMASK)
    }

    pub fn infomask2(&self) -> u16 {
        rd16(self.0, OFF_INFOMASK2)
    }

    pub fn hoff(&self) -> u8 {
        self.0[OFF_HOFF]
    }

    pub fn natts(&self) -> u16 {
        self.infomask2() & HEAP_NATTS_MASK
    }

    /// Attribute `i` (0-based) is NULL: beyond `natts`, or its bitmap bit is clear.
    pub fn is_null(&self, i: usize) -> bool {
        if i >= self.natts() as usize {
            return true;
        }
        self.infomask() & HEAP_HASNULL != 0 && self.0[HEAP_TUPLE_HEADER_SIZE + i / 8] & (1 << (i % 8)) == 0
    }

    /// The data area (`t_hoff..`).
    pub fn data(&self) -> &'a [u8] {
        &self.0[self.hoff() as usize..]
    }
}

/// Why `t` is not a valid tuple header, if it is not.
/// [`header_problem`] without the message: the check every tuple access makes.
#[inline]
fn header_valid(t: &[u8]) -> bool {
    if t.len() < HEAP_TUPLE_HEADER_SIZE {
        return false;
    }
    let hoff = t[OFF_HOFF] as usize;
    let natts = (rd16(t, OFF_INFOMASK2) & HEAP_NATTS_MASK) as usize;
    let bitmap = if rd16(t, OFF_INFOMASK) & HEAP_HASNULL != 0 { null_bitmap_len(natts) } else { 0 };
    hoff >= HEAP_TUPLE_HEADER_SIZE
        && hoff == maxalign(hoff)
        && hoff <= t.len()
        && HEAP_TUPLE_HEADER_SIZE + bitmap <= hoff
}

fn header_problem(t: &[u8]) -> Option<String> {
    if t.len() < HEAP_TUPLE_HEADER_SIZE {
        return Some(format!("tuple of {} bytes is shorter than its 23-byte header", t.len()));
    }
    let hoff = t[OFF_HOFF] as usize;
    let natts = (rd16(t, OFF_INFOMASK2) & HEAP_NATTS_MASK) as usize;
    let bitmap = if rd16(t, OFF_INFOMASK) & HEAP_HASNULL != 0 { null_bitmap_len(natts) } else { 0 };
    if hoff < HEAP_TUPLE_HEADER_SIZE || hoff != maxalign(hoff) {
        Some(format!("t_hoff {hoff} is not a MAXALIGNed offset >= 23"))
    } else if hoff > t.len() {
        Some(format!("t_hoff {hoff} exceeds tuple length {}", t.len()))
    } else if HEAP_TUPLE_HEADER_SIZE + bitmap > hoff {
        Some(format!("null bitmap of {natts} attributes does not fit before t_hoff {hoff}"))
    } else {
        None
    }
}

/// Sets `t_xmin`. Panics if `t` is shorter than a header (callers pass parsed tuples).
pub fn set_xmin(t: &mut [u8], x: Xid) {
    t[OFF_XMIN..OFF_XMIN + 4].copy_from_slice(&x.0.to_le_bytes());
}

pub fn set_xmax(t: &mut [u8], x: Xid) {
    t[OFF_XMAX..OFF_XMAX + 4].copy_from_slice(&x.0.to_le_bytes());
}

pub fn set_cid(t: &mut [u8], c: u32) {
    t[OFF_CID..OFF_CID + 4].copy_from_slice(&c.to_le_bytes());
}

pub fn set_ctid(t: &mut [u8], c: Tid) {
    t[OFF_CTID..OFF_CTID + 6].copy_from_slice(&c.to_bytes());
}

pub fn set_infomask(t: &mut [u8], m: u16) {
    t[OFF_INFOMASK..OFF_INFOMASK + 2].copy_from_slice(&m.to_le_bytes());
}

/// ORs `bits` into the infomask of the tuple that starts at `start` in `page` (a scan found
/// its header there and the page has not changed since). Hot path: VACUUM's pending hints.
#[inline]
pub fn add_infomask_at(page: &mut [u8], start: usize, bits: u16) {
    if let Some(b) = page.get_mut(start + OFF_INFOMASK..start + OFF_INFOMASK + 2) {
        let m = u16::from_le_bytes([b[0], b[1]]) | bits;
        b.copy_from_slice(&m.to_le_bytes());
    }
}

pub fn set_infomask2(t: &mut [u8], m: u16) {
    t[OFF_INFOMASK2..OFF_INFOMASK2 + 2].copy_from_slice(&m.to_le_bytes());
}

/// Largest payload stored with a 1-byte varlena header.
const SHORT_VARLENA_MAX: usize = 126;

fn align_to(n: usize, a: usize) -> usize {
    n.div_ceil(a) * a
}

/// Length of the data area [`put_value`] would build, without building it.
fn data_len(values: &[Value]) -> usize {
    values.iter().fold(0, |len, v| match v {
        Value::Null => len,
        Value::Bool(_) => len + 1,
        Value::Int4(_) => align_to(len, 4) + 4,
        Value::Int8(_) | Value::Float8(_) | Value::Timestamp(_) => align_to(len, 8) + 8,
        Value::Text(s) => varlena_end(len, s.len()),
        Value::Bytea(b) => varlena_end(len, b.len()),
    })
}

fn varlena_end(len: usize, payload: usize) -> usize {
    if payload <= SHORT_VARLENA_MAX {
        len + 1 + payload
    } else {
        align_to(len, 4).saturating_add(4).saturating_add(payload)
    }
}

/// Appends one non-NULL value to `data`, aligned as PostgreSQL does: by `data`'s length, which
/// is the value's offset in its tuple modulo 8 (the tuple and its data start at multiples of 8).
fn put_value(data: &mut Vec<u8>, v: &Value) {
    let fixed = |data: &mut Vec<u8>, align: usize, bytes: &[u8]| {
        data.resize(align_to(data.len(), align), 0);
        data.extend_from_slice(bytes);
    };
    match v {
        Value::Null => {}
        Value::Int4(x) => fixed(data, 4, &x.to_le_bytes()),
        Value::Int8(x) | Value::Timestamp(x) => fixed(data, 8, &x.to_le_bytes()),
        Value::Float8(x) => fixed(data, 8, &x.to_le_bytes()),
        Value::Bool(b) => data.push(u8::from(*b)),
        Value::Text(s) => put_varlena(data, s.as_bytes()),
        Value::Bytea(b) => put_varlena(data, b),
    }
}

fn put_varlena(data: &mut Vec<u8>, payload: &[u8]) {
    if payload.len() <= SHORT_VARLENA_MAX {
        data.push((((payload.len() + 1) << 1) | 1) as u8);
    } else {
        data.resize(align_to(data.len(), 4), 0);
        let total = (payload.len() + 4) as u32;
        data.extend_from_slice(&(total << 2).to_le_bytes());
    }
    data.extend_from_slice(payload);
}

/// Checks `values` against `schema`: count, types, NOT NULL.
fn check_row(schema: &Schema, values: &[Value]) -> Result<()> {
    if schema.columns.len() > MAX_HEAP_ATTRIBUTES {
        return Err(Error::invalid(format!("tables can have at most {MAX_HEAP_ATTRIBUTES} columns")));
    }
    if values.len() != schema.columns.len() {
        return Err(Error::invalid(format!(
            "row has {} values but the table has {} columns",
            values.len(),
            schema.columns.len()
        )));
    }
    for (c, v) in schema.columns.iter().zip(values) {
        match v.ty() {
            None if !c.nullable => {
                return Err(Error::invalid(format!("null value in column \"{}\" violates not-null constraint", c.name)))
            }
            Some(t) if t != c.ty => {
                return Err(Error::invalid(format!(
                    "column \"{}\" is of type {} but the value is {}",
                    c.name,
                    c.ty.name(),
                    t.name()
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Builds a complete heap tuple (`heap_form_tuple`): header with `natts` in `t_infomask2`,
/// `HEAP_HASNULL`/`HEAP_HASVARWIDTH` as needed and `HEAP_XMAX_INVALID`; xmin, xmax, cid and
/// ctid zero (the insert path sets them). Errors name the offending column.
pub fn form_tuple(schema: &Schema, values: &[Value]) -> Result<Vec<u8>> {
    check_row(schema, values)?;
    build_tuple(values)
}

/// [`form_tuple`], appending the tuple to `out` at the next multiple of 8 (MAXALIGN, so that
/// its columns are aligned within `out` as within the tuple); returns where it starts. For
/// bulk inserts, which form a batch of tuples into one buffer instead of one allocation each.
pub fn form_tuple_into(schema: &Schema, values: &[Value], out: &mut Vec<u8>) -> Result<usize> {
    check_row(schema, values)?;
    let start = maxalign(out.len());
    let layout = Layout::of(values)?;
    out.reserve(start - out.len() + layout.size);
    out.resize(start, 0);
    write_tuple(values, layout, out);
    debug_assert_eq!(out.len() - start, layout.size);
    Ok(start)
}

/// Builds a tuple of `values` as [`form_tuple`] does, without checking them against a schema:
/// for rows that are not stored, such as the old key a logical-level WAL record carries
/// (non-key columns null whatever their constraint).
pub fn build_tuple(values: &[Value]) -> Result<Vec<u8>> {
    let layout = Layout::of(values)?;
    let mut t = Vec::with_capacity(layout.size);
    write_tuple(values, layout, &mut t);
    Ok(t)
}

/// The shape of the tuple some values make.
#[derive(Clone, Copy)]
struct Layout {
    has_null: bool,
    /// Header and null bitmap, MAXALIGNed (`t_hoff`).
    hoff: usize,
    /// The whole tuple.
    size: usize,
}

impl Layout {
    fn of(values: &[Value]) -> Result<Layout> {
        let has_null = values.iter().any(|v| matches!(v, Value::Null));
        let bitmap_len = if has_null { null_bitmap_len(values.len()) } else { 0 };
        let hoff = maxalign(HEAP_TUPLE_HEADER_SIZE + bitmap_len);
        let size = hoff + data_len(values);
        if size > MAX_HEAP_TUPLE_SIZE {
            return Err(Error::invalid(format!("row is too big: size {size}, maximum size {MAX_HEAP_TUPLE_SIZE}")));
        }
        Ok(Layout { has_null, hoff, size })
    }
}

/// Appends the tuple of `values` (of `layout`) to `out`, whose length is a multiple of 8: the
/// tuple's columns are aligned by their offset in `out`, which then equals their offset in
/// the tuple modulo 8.
fn write_tuple(values: &[Value], layout: Layout, out: &mut Vec<u8>) {
    debug_assert_eq!(out.len() % 8, 0);
    let start = out.len();
    out.resize(start + layout.hoff, 0);
    let t = &mut out[start..];
    set_infomask2(t, values.len() as u16);
    let mut infomask = HEAP_XMAX_INVALID;
    if layout.has_null {
        infomask |= HEAP_HASNULL;
        for (i, v) in values.iter().enumerate() {
            if !matches!(v, Value::Null) {
                t[HEAP_TUPLE_HEADER_SIZE + i / 8] |= 1 << (i % 8);
            }
        }
    }
    if values.iter().any(|v| matches!(v, Value::Text(_) | Value::Bytea(_))) {
        infomask |= HEAP_HASVARWIDTH;
    }
    set_infomask(t, infomask);
    t[OFF_HOFF] = layout.hoff as u8;
    values.iter().for_each(|v| put_value(out, v));
}

/// How decoding errors name a column: `column "abalance" (int4)`. Formatted only when an
/// error is reported, never on the decoding path.
struct ColumnLabel<'a>(&'a Column);

impl std::fmt::Display for ColumnLabel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "column \"{}\" ({})", self.0.name, self.0.ty.name())
    }
}

/// A cursor over the data area that refuses to read past its end.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    fn take(&mut self, n: usize, what: &dyn std::fmt::Display) -> std::result::Result<&'a [u8], String> {
        match self.pos.checked_add(n).filter(|&e| e <= self.data.len()) {
            Some(end) => {
                let s = &self.data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(self.overrun(n, what)),
        }
    }

    #[cold]
    #[inline(never)]
    fn overrun(&self, n: usize, what: &dyn std::fmt::Display) -> String {
        format!("{what} of {n} bytes at data offset {} overruns {} data bytes", self.pos, self.data.len())
    }

    fn align(&mut self, a: usize) {
        self.pos = align_to(self.pos, a);
    }

    #[inline]
    fn fixed<const N: usize>(
        &mut self,
        align: usize,
        what: &dyn std::fmt::Display,
    ) -> std::result::Result<[u8; N], String> {
        self.align(align);
        let mut b = [0u8; N];
        b.copy_from_slice(self.take(N, what)?);
        Ok(b)
    }

    fn varlena(&mut self, what: &dyn std::fmt::Display) -> std::result::Result<&'a [u8], String> {
        let first = *self
            .data
            .get(self.pos)
            .ok_or_else(|| format!("{what} header at data offset {} is past the end", self.pos))?;
        if first & 1 == 1 {
            let total = (first >> 1) as usize;
            if total == 0 {
                return Err(format!("{what} at data offset {} has a 1-byte header of length 0", self.pos));
            }
            self.pos += 1;
            return self.take(total - 1, what);
        }
        if !self.pos.is_multiple_of(4) && first != 0 {
            return Err(format!(
                "{what} at data offset {}: byte {first:#04x} is neither a short header nor padding",
                self.pos
            ));
        }
        let h = u32::from_le_bytes(self.fixed::<4>(4, what)?);
        if h & 3 != 0 || ((h >> 2) as usize) < 4 {
            return Err(format!("{what} at data offset {} has an invalid 4-byte header {h:#010x}", self.pos - 4));
        }
        self.take((h >> 2) as usize - 4, what)
    }
}

/// A text value's bytes as a `str`, the error text built out of line.
#[inline]
fn text<'a>(b: &'a [u8], what: &dyn std::fmt::Display) -> std::result::Result<&'a str, String> {
    std::str::from_utf8(b).map_err(|e| not_utf8(e, what))
}

#[cold]
#[inline(never)]
fn not_utf8(e: std::str::Utf8Error, what: &dyn std::fmt::Display) -> String {
    format!("{what} is not valid UTF-8: {e}")
}

#[inline(always)]
fn get_value_ref<'a>(
    r: &mut Reader<'a>,
    ty: Type,
    what: &dyn std::fmt::Display,
) -> std::result::Result<ValueRef<'a>, String> {
    Ok(match ty {
        Type::Int4 => ValueRef::Int4(i32::from_le_bytes(r.fixed::<4>(ty.align(), what)?)),
        Type::Int8 => ValueRef::Int8(i64::from_le_bytes(r.fixed::<8>(ty.align(), what)?)),
        Type::Timestamp => ValueRef::Timestamp(i64::from_le_bytes(r.fixed::<8>(ty.align(), what)?)),
        Type::Float8 => ValueRef::Float8(f64::from_le_bytes(r.fixed::<8>(ty.align(), what)?)),
        Type::Bool => match r.take(1, what)? {
            [0] => ValueRef::Bool(false),
            [1] => ValueRef::Bool(true),
            b => return Err(format!("{what} has invalid bool byte {:#04x}", b.first().copied().unwrap_or(0))),
        },
        Type::Text => ValueRef::Text(r.varlena(what)?),
        Type::Bytea => ValueRef::Bytea(r.varlena(what)?),
    })
}

/// Decodes a tuple's attributes by `schema` (`heap_deform_tuple`). Attributes past the
/// tuple's `natts` are NULL; attributes the tuple has beyond the schema are ignored. Any
/// malformed byte is reported as an error naming the column; never panics.
pub fn deform_tuple(schema: &Schema, tuple: &[u8]) -> std::result::Result<Vec<Value>, String> {
    deform_tuple_with(schema, &[], tuple)
}

/// [`deform_tuple`] where attribute `i` past the tuple's `natts` reads as `missing[i]` (NULL
/// where `missing` is shorter): the columns' missing values (`attmissingval`), which
/// `ALTER TABLE ... ADD COLUMN ... DEFAULT` records instead of rewriting the rows.
pub fn deform_tuple_with(schema: &Schema, missing: &[Value], tuple: &[u8]) -> std::result::Result<Vec<Value>, String> {
    let (natts, nulls, data) = tuple_parts(tuple)?;
    let mut out = Vec::with_capacity(schema.columns.len());
    deform_data_into(schema, missing, natts, nulls, data, &mut out)?;
    Ok(out)
}

/// [`deform_tuple_with`] as values borrowed from `tuple` and `missing` ([`ValueRef`]), into
/// `out`: for a reader that wants a few columns of many rows (an index build) without
/// allocating the rest.
pub fn deform_tuple_refs<'a>(
    schema: &Schema,
    missing: &'a [Value],
    tuple: &'a [u8],
    out: &mut Vec<ValueRef<'a>>,
) -> std::result::Result<(), String> {
    let (natts, nulls, data) = tuple_parts(tuple)?;
    deform_data_refs(schema, missing, natts, nulls, data, out)
}

/// A whole tuple's [`TupleParts`], its header checked first ([`logged_parts`] for a logged
/// tuple).
fn tuple_parts(tuple: &[u8]) -> std::result::Result<TupleParts<'_>, String> {
    if let Some(p) = header_problem(tuple) {
        return Err(p);
    }
    let h = TupleHeader(tuple);
    let nulls = (h.infomask() & HEAP_HASNULL != 0).then(|| &tuple[HEAP_TUPLE_HEADER_SIZE..]);
    Ok((h.natts() as usize, nulls, h.data()))
}

/// Walks a tuple's attributes, given as its attribute count, its null bitmap (when it has one)
/// and its data area: `each` gets every column of `schema` in order, with what the tuple holds
/// for it (`None` past the tuple's `natts`, where the column's missing value applies), a text
/// or bytea value as the bytes it is stored as. The one walk under [`deform_data_into`] and
/// [`deform_data_refs`].
///
/// Every row a scan or a decoder reads comes through here, so the walk itself only notes that
/// bytes are malformed; the error that says what and where comes from walking them again
/// ([`describe_malformed`]).
#[inline(always)]
fn walk_data<'a>(
    schema: &Schema,
    natts: usize,
    nulls: Option<&[u8]>,
    data: &'a [u8],
    mut each: impl FnMut(usize, &Column, Option<ValueRef<'a>>) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    let mut pos = 0;
    for (i, c) in schema.columns.iter().enumerate() {
        if i >= natts {
            each(i, c, None)?;
            continue;
        }
        let v = if nulls.is_some_and(|b| b[i / 8] & (1 << (i % 8)) == 0) {
            ValueRef::Null
        } else {
            match read_value(data, &mut pos, c.ty) {
                Some(v) => v,
                None => return Err(describe_malformed(schema, natts, nulls, data)),
            }
        };
        each(i, c, Some(v))?;
    }
    if natts <= schema.columns.len() && pos != data.len() {
        return Err(describe_malformed(schema, natts, nulls, data));
    }
    Ok(())
}

/// The attribute of type `ty` at `*pos` (aligned first), `*pos` moved past it; `None` where
/// its bytes are malformed. [`get_value_ref`]'s checks, without building their messages.
#[inline(always)]
fn read_value<'a>(data: &'a [u8], pos: &mut usize, ty: Type) -> Option<ValueRef<'a>> {
    #[inline(always)]
    fn fixed<const N: usize>(data: &[u8], pos: &mut usize) -> Option<[u8; N]> {
        let at = align_to(*pos, N);
        let b = data.get(at..at + N)?.try_into().ok()?;
        *pos = at + N;
        Some(b)
    }
    Some(match ty {
        Type::Int4 => ValueRef::Int4(i32::from_le_bytes(fixed(data, pos)?)),
        Type::Int8 => ValueRef::Int8(i64::from_le_bytes(fixed(data, pos)?)),
        Type::Timestamp => ValueRef::Timestamp(i64::from_le_bytes(fixed(data, pos)?)),
        Type::Float8 => ValueRef::Float8(f64::from_le_bytes(fixed(data, pos)?)),
        Type::Bool => {
            let b = *data.get(*pos)?;
            *pos += 1;
            match b {
                0 => ValueRef::Bool(false),
                1 => ValueRef::Bool(true),
                _ => return None,
            }
        }
        Type::Text => ValueRef::Text(read_varlena(data, pos)?),
        Type::Bytea => ValueRef::Bytea(read_varlena(data, pos)?),
    })
}

/// [`Reader::varlena`]'s reading, `None` for what it refuses.
#[inline(always)]
fn read_varlena<'a>(data: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let first = *data.get(*pos)?;
    if first & 1 == 1 {
        // A 1-byte header counting itself: a length of 0 is an empty range, refused.
        let total = usize::from(first >> 1);
        let b = data.get(*pos + 1..*pos + total)?;
        *pos += total;
        return Some(b);
    }
    if !pos.is_multiple_of(4) && first != 0 {
        return None;
    }
    let at = align_to(*pos, 4);
    let h = u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?);
    let len = (h >> 2) as usize;
    if h & 3 != 0 || len < 4 {
        return None;
    }
    let b = data.get(at + 4..at + len)?;
    *pos = at + len;
    Some(b)
}

/// What is wrong with a tuple's data that [`walk_data`] found malformed, naming the column
/// and the offset.
#[cold]
#[inline(never)]
fn describe_malformed(schema: &Schema, natts: usize, nulls: Option<&[u8]>, data: &[u8]) -> String {
    checked_walk(schema, natts, nulls, data).err().unwrap_or_else(|| "malformed attribute data".to_string())
}

/// [`walk_data`]'s walk with every check's message, values unused.
fn checked_walk(schema: &Schema, natts: usize, nulls: Option<&[u8]>, data: &[u8]) -> std::result::Result<(), String> {
    let mut r = Reader { data, pos: 0 };
    for (i, c) in schema.columns.iter().enumerate().take(natts) {
        if nulls.is_some_and(|b| b[i / 8] & (1 << (i % 8)) == 0) {
            continue;
        }
        get_value_ref(&mut r, c.ty, &ColumnLabel(c))?;
    }
    if natts <= schema.columns.len() && r.pos != r.data.len() {
        return Err(format!("{} trailing bytes after the last attribute", r.data.len().saturating_sub(r.pos)));
    }
    Ok(())
}

/// The attributes of a tuple ([`walk_data`]'s arguments) into `out`, which ends with one value
/// per column: a text or bytea value lands in the buffer of the one `out` already held at its
/// place, if that was one of the same type (a reader of many rows of one table allocates once
/// per column, not once per row).
fn deform_data_into(
    schema: &Schema,
    missing: &[Value],
    natts: usize,
    nulls: Option<&[u8]>,
    data: &[u8],
    out: &mut Vec<Value>,
) -> std::result::Result<(), String> {
    out.truncate(schema.columns.len());
    walk_data(schema, natts, nulls, data, |i, c, v| {
        let Some(v) = v else {
            let v = missing.get(i).cloned().unwrap_or(Value::Null);
            match out.get_mut(i) {
                Some(slot) => *slot = v,
                None => out.push(v),
            }
            return Ok(());
        };
        match (out.get_mut(i), v) {
            (Some(Value::Text(s)), ValueRef::Text(b)) => {
                let t = text(b, &ColumnLabel(c))?;
                s.clear();
                s.push_str(t);
            }
            (Some(Value::Bytea(buf)), ValueRef::Bytea(b)) => {
                buf.clear();
                buf.extend_from_slice(b);
            }
            (Some(slot), v) => *slot = v.to_value(&ColumnLabel(c))?,
            (None, v) => out.push(v.to_value(&ColumnLabel(c))?),
        }
        Ok(())
    })
}

/// The attributes of a tuple ([`walk_data`]'s arguments) as values borrowed from its bytes
/// (and from `missing`), one per column, into `out` (cleared first). Nothing is copied and a
/// text value's bytes are not checked here (see [`ValueRef::Text`]).
fn deform_data_refs<'a>(
    schema: &Schema,
    missing: &'a [Value],
    natts: usize,
    nulls: Option<&[u8]>,
    data: &'a [u8],
    out: &mut Vec<ValueRef<'a>>,
) -> std::result::Result<(), String> {
    out.clear();
    walk_data(schema, natts, nulls, data, |i, _, v| {
        out.push(v.unwrap_or_else(|| missing.get(i).map_or(ValueRef::Null, Value::as_ref)));
        Ok(())
    })
}

/// Bytes of a logged tuple's header ([`deform_logged_tuple`]): `t_infomask2` u16,
/// `t_infomask` u16, `t_hoff` u8.
pub const LOGGED_TUPLE_HEADER: usize = 5;

/// [`deform_tuple`] for a tuple in its *logged form*, as a heap WAL record carries a row
/// (`heap::wal::encode_tuple`; PostgreSQL's `xl_heap_header` and the bytes after the fixed
/// header): `t_infomask2`, `t_infomask`, `t_hoff`, then null bitmap, padding and data, 18
/// bytes shorter than the tuple. The header is checked as a whole tuple's would be.
pub fn deform_logged_tuple(schema: &Schema, logged: &[u8]) -> std::result::Result<Vec<Value>, String> {
    let mut out = Vec::with_capacity(schema.columns.len());
    deform_logged_tuple_into(schema, logged, &mut out)?;
    Ok(out)
}

/// [`deform_logged_tuple`] into `out`, reusing its text and bytea buffers (see
/// [`deform_data_into`]): the logical decoder's path, one row after another.
pub fn deform_logged_tuple_into(
    schema: &Schema,
    logged: &[u8],
    out: &mut Vec<Value>,
) -> std::result::Result<(), String> {
    deform_logged_tuple_with_into(schema, &[], logged, out)
}

/// [`deform_logged_tuple_into`] with the columns' missing values (see [`deform_tuple_with`]).
pub fn deform_logged_tuple_with_into(
    schema: &Schema,
    missing: &[Value],
    logged: &[u8],
    out: &mut Vec<Value>,
) -> std::result::Result<(), String> {
    let (natts, nulls, data) = logged_parts(logged)?;
    deform_data_into(schema, missing, natts, nulls, data, out)
}

/// [`deform_logged_tuple_with_into`] as values borrowed from `logged` and `missing`
/// ([`ValueRef`]), into `out`: the logical decoder's path, which copies nothing.
pub fn deform_logged_tuple_refs<'a>(
    schema: &Schema,
    missing: &'a [Value],
    logged: &'a [u8],
    out: &mut Vec<ValueRef<'a>>,
) -> std::result::Result<(), String> {
    let (natts, nulls, data) = logged_parts(logged)?;
    deform_data_refs(schema, missing, natts, nulls, data, out)
}

/// A tuple's attribute count, null bitmap (if any) and data area.
type TupleParts<'a> = (usize, Option<&'a [u8]>, &'a [u8]);

/// A logged tuple's [`TupleParts`], its header checked as a whole tuple's would be.
fn logged_parts(logged: &[u8]) -> std::result::Result<TupleParts<'_>, String> {
    let Some((head, body)) = logged.split_first_chunk::<LOGGED_TUPLE_HEADER>() else {
        return Err(format!("logged tuple of {} bytes is shorter than its 5-byte header", logged.len()));
    };
    let infomask2 = u16::from_le_bytes([head[0], head[1]]);
    let infomask = u16::from_le_bytes([head[2], head[3]]);
    let hoff = usize::from(head[4]);
    let natts = usize::from(infomask2 & HEAP_NATTS_MASK);
    let bitmap = if infomask & HEAP_HASNULL != 0 { null_bitmap_len(natts) } else { 0 };
    let len = HEAP_TUPLE_HEADER_SIZE + body.len();
    if hoff < HEAP_TUPLE_HEADER_SIZE || hoff != maxalign(hoff) {
        return Err(format!("t_hoff {hoff} is not a MAXALIGNed offset >= 23"));
    } else if hoff > len {
        return Err(format!("t_hoff {hoff} exceeds tuple length {len}"));
    } else if HEAP_TUPLE_HEADER_SIZE + bitmap > hoff {
        return Err(format!("null bitmap of {natts} attributes does not fit before t_hoff {hoff}"));
    }
    let nulls = (bitmap > 0).then_some(body);
    Ok((natts, nulls, &body[hoff - HEAP_TUPLE_HEADER_SIZE..]))
}

/// The catalog form of a table's missing values (`pg_class.relmissing`): one heap tuple, in
/// the format above, of the table's columns, column `i` holding its missing value or NULL for
/// none. `None` when no column has one (the column is then NULL in `pg_class`).
pub fn encode_missing(missing: &[Value]) -> Result<Option<Vec<u8>>> {
    if missing.iter().all(|v| matches!(v, Value::Null)) {
        return Ok(None);
    }
    build_tuple(missing).map(Some)
}

/// Decodes [`encode_missing`]'s tuple against the table's `schema`: one value per column
/// (NULL for none). Bytes from disk: a malformed tuple is described, never a panic.
pub fn decode_missing(schema: &Schema, b: &[u8]) -> std::result::Result<Vec<Value>, String> {
    let cols = schema.columns.len();
    if let Some(n) = TupleHeader::parse(b).map(|h| usize::from(h.natts())).filter(|&n| n > cols) {
        return Err(format!("missing values for {n} columns, the table has {cols}"));
    }
    deform_tuple(schema, b)
}

const SCHEMA_FORMAT_VERSION: u8 = 1;

impl Schema {
    /// Catalog form: version `u8`, column count `u16` LE, then per column: type tag `u8`,
    /// flags `u8` (bit 0 = nullable), name length `u16` LE, name (UTF-8).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![SCHEMA_FORMAT_VERSION];
        b.extend_from_slice(&(self.columns.len() as u16).to_le_bytes());
        for c in &self.columns {
            b.push(c.ty.to_u8());
            b.push(u8::from(c.nullable));
            b.extend_from_slice(&(c.name.len() as u16).to_le_bytes());
            b.extend_from_slice(c.name.as_bytes());
        }
        b
    }

    /// Decodes [`Schema::encode`]'s output; describes what is wrong otherwise. Never panics.
    pub fn decode(b: &[u8]) -> std::result::Result<Schema, String> {
        let mut r = Reader { data: b, pos: 0 };
        let [version] = r.fixed::<1>(1, &"schema version")?;
        if version != SCHEMA_FORMAT_VERSION {
            return Err(format!("unknown schema format version {version}"));
        }
        let n = u16::from_le_bytes(r.fixed::<2>(1, &"column count")?) as usize;
        if n > MAX_HEAP_ATTRIBUTES {
            return Err(format!("{n} columns exceed the maximum {MAX_HEAP_ATTRIBUTES}"));
        }
        let mut columns = Vec::with_capacity(n);
        for i in 0..n {
            let [tag, flags] = r.fixed::<2>(1, &"column type")?;
            let ty = Type::from_u8(tag).ok_or_else(|| format!("column {i} has unknown type tag {tag}"))?;
            if flags & !1 != 0 {
                return Err(format!("column {i} has unknown flags {flags:#04x}"));
            }
            let len = u16::from_le_bytes(r.fixed::<2>(1, &"column name length")?) as usize;
            let name = String::from_utf8(r.take(len, &"column name")?.to_vec())
                .map_err(|_| format!("column {i} name is not valid UTF-8"))?;
            columns.push(Column { name, ty, nullable: flags & 1 != 0 });
        }
        if r.pos != b.len() {
            return Err(format!("{} trailing bytes after {n} columns", b.len() - r.pos));
        }
        Ok(Schema { columns })
    }
}

/// Names of the set infomask / infomask2 bits, `|`-separated, like pageinspect's
/// `heap_tuple_infomask_flags` without the `HEAP_` prefix. Unknown bits print in hex.
pub fn infomask_names(infomask: u16, infomask2: u16) -> String {
    const KNOWN: u16 = HEAP_HASNULL
        | HEAP_HASVARWIDTH
        | HEAP_XMAX_KEYSHR_LOCK
        | HEAP_XMAX_EXCL_LOCK
        | HEAP_XMAX_LOCK_ONLY
        | HEAP_XMIN_FROZEN
        | HEAP_XMAX_COMMITTED
        | HEAP_XMAX_INVALID
        | HEAP_UPDATED;
    let frozen = infomask & HEAP_XMIN_FROZEN == HEAP_XMIN_FROZEN;
    let mut names: Vec<String> = [
        (infomask & HEAP_HASNULL != 0, "HASNULL"),
        (infomask & HEAP_HASVARWIDTH != 0, "HASVARWIDTH"),
        (infomask & HEAP_XMAX_KEYSHR_LOCK != 0, "XMAX_KEYSHR_LOCK"),
        (infomask & HEAP_XMAX_EXCL_LOCK != 0, "XMAX_EXCL_LOCK"),
        (infomask & HEAP_XMAX_LOCK_ONLY != 0, "XMAX_LOCK_ONLY"),
        (frozen, "XMIN_FROZEN"),
        (!frozen && infomask & HEAP_XMIN_COMMITTED != 0, "XMIN_COMMITTED"),
        (!frozen && infomask & HEAP_XMIN_INVALID != 0, "XMIN_INVALID"),
        (infomask & HEAP_XMAX_COMMITTED != 0, "XMAX_COMMITTED"),
        (infomask & HEAP_XMAX_INVALID != 0, "XMAX_INVALID"),
        (infomask & HEAP_UPDATED != 0, "UPDATED"),
        (infomask2 & HEAP_KEYS_UPDATED != 0, "KEYS_UPDATED"),
        (infomask2 & HEAP_HOT_UPDATED != 0, "HOT_UPDATED"),
        (infomask2 & HEAP_ONLY_TUPLE != 0, "HEAP_ONLY"),
    ]
    .into_iter()
    .filter(|&(set, _)| set)
    .map(|(_, name)| name.to_string())
    .collect();
    let unknown = infomask & !KNOWN;
    if unknown != 0 {
        names.push(format!("{unknown:#06x}"));
    }
    if names.is_empty() {
        "-".to_string()
    } else {
        names.join("|")
    }
}

/// One line describing a tuple header for `settle inspect` / `settle waldump`:
/// `xmin: 5  xmax: 0  cid: 0  ctid: (0,1)  infomask: XMIN_COMMITTED|XMAX_INVALID  hoff: 24  natts: 4`.
/// Never panics; a damaged header is rendered with what is wrong.
pub fn describe_header(t: &[u8]) -> String {
    if t.len() < HEAP_TUPLE_HEADER_SIZE {
        return format!("invalid tuple: {} bytes, shorter than its 23-byte header", t.len());
    }
    let h = TupleHeader(t);
    let mut s = format!(
        "xmin: {}  xmax: {}  cid: {}  ctid: {}  infomask: {}  hoff: {}  natts: {}",
        h.xmin(),
        h.xmax(),
        h.cid(),
        h.ctid(),
        infomask_names(h.infomask(), h.infomask2()),
        h.hoff(),
        h.natts()
    );
    if let Some(p) = header_problem(t) {
        let _ = write!(s, "  INVALID: {p}");
    }
    s
}

#[cfg(test)]
mod tests;
