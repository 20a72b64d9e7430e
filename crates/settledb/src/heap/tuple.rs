//! Heap tuple format (contract skeleton).
use crate::error::Result;
use crate::types::{Tid, Xid};

pub const HEAP_TUPLE_HEADER_SIZE: usize = 23;
pub const MAX_HEAP_TUPLE_SIZE: usize = 8160;
pub const HEAP_HASNULL: u16 = 0x0001;
pub const HEAP_HASVARWIDTH: u16 = 0x0002;
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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Type { Int4, Int8, Float8, Bool, Text, Bytea, Timestamp }

#[derive(Clone, PartialEq, Debug)]
pub enum Value { Null, Int4(i32), Int8(i64), Float8(f64), Bool(bool), Text(String), Bytea(Vec<u8>), Timestamp(i64) }

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Column { pub name: String, pub ty: Type, pub nullable: bool }

#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Schema { pub columns: Vec<Column> }

pub struct TupleHeader<'a>(&'a [u8]);
impl<'a> TupleHeader<'a> {
    pub fn parse(_t: &'a [u8]) -> Option<TupleHeader<'a>> { todo!() }
    pub fn xmin(&self) -> Xid { todo!() }
    pub fn xmax(&self) -> Xid { todo!() }
    pub fn cid(&self) -> u32 { todo!() }
    pub fn ctid(&self) -> Tid { todo!() }
    pub fn infomask(&self) -> u16 { todo!() }
    pub fn infomask2(&self) -> u16 { todo!() }
    pub fn hoff(&self) -> u8 { todo!() }
    pub fn natts(&self) -> u16 { todo!() }
}
pub fn set_xmin(_t: &mut [u8], _x: Xid) { todo!() }
pub fn set_xmax(_t: &mut [u8], _x: Xid) { todo!() }
pub fn set_cid(_t: &mut [u8], _c: u32) { todo!() }
pub fn set_ctid(_t: &mut [u8], _c: Tid) { todo!() }
pub fn set_infomask(_t: &mut [u8], _m: u16) { todo!() }
pub fn set_infomask2(_t: &mut [u8], _m: u16) { todo!() }
pub fn form_tuple(_schema: &Schema, _values: &[Value]) -> Result<Vec<u8>> { todo!() }
pub fn deform_tuple(_schema: &Schema, _tuple: &[u8]) -> std::result::Result<Vec<Value>, String> { todo!() }
impl Schema {
    pub fn encode(&self) -> Vec<u8> { todo!() }
    pub fn decode(_b: &[u8]) -> std::result::Result<Schema, String> { todo!() }
}
