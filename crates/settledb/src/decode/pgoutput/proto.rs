//! The logical replication protocol's messages (PostgreSQL's `replication/logical/proto.c` and
//! the "Logical Replication Message Formats" chapter of its documentation): how pgoutput
//! writes them, and a reader that parses them back (for tests, tools and fuzzing).
//!
//! Every integer is big-endian (network order); strings end with a zero byte; LSNs are
//! `Int64`; times are `Int64` microseconds since 2000-01-01 00:00 UTC (PostgreSQL's
//! `TimestampTz`). Inside a streamed block (between `S` and `E`) the `R`, `I`, `U`, `D` and
//! `M` messages carry the (sub)transaction's XID after their tag.
//!
//! ```text
//! B  Int64 final_lsn, Int64 commit_time, Int32 xid
//! C  Int8 flags (0), Int64 commit_lsn, Int64 end_lsn, Int64 commit_time
//! R  [Int32 xid] Int32 relid, String namespace, String name, Int8 replident,
//!    Int16 natts, natts × (Int8 flags (1: part of the key), String name, Int32 type OID, Int32 typmod)
//! I  [Int32 xid] Int32 relid, 'N' TupleData
//! U  [Int32 xid] Int32 relid, ['K' | 'O' TupleData], 'N' TupleData
//! D  [Int32 xid] Int32 relid, 'K' | 'O' TupleData
//! M  [Int32 xid] Int8 flags (1: transactional), Int64 lsn, String prefix, Int32 n, n bytes
//! S  Int32 xid, Int8 first_segment
//! E  (nothing)
//! c  Int32 xid, Int8 flags (0), Int64 commit_lsn, Int64 end_lsn, Int64 commit_time
//! A  Int32 xid, Int32 subxid [, Int64 abort_lsn, Int64 abort_time: protocol 4, streaming parallel]
//! b  Int64 prepare_lsn, Int64 end_lsn, Int64 prepare_time, Int32 xid, String gid      (protocol 3)
//! P  Int8 flags (0), Int64 prepare_lsn, Int64 end_lsn, Int64 prepare_time, Int32 xid, String gid
//! K  Int8 flags (0), Int64 commit_lsn, Int64 end_lsn, Int64 commit_time, Int32 xid, String gid
//! r  Int8 flags (0), Int64 prepare_end_lsn, Int64 rollback_end_lsn, Int64 prepare_time,
//!    Int64 rollback_time, Int32 xid, String gid
//! p  as P (stream prepare)
//! TupleData: Int16 ncols, ncols × ('n' | 'u' | 't' Int32 n, n bytes of text | 'b' Int32 n, n bytes of binary)
//! ```

use crate::error::{Error, Result};

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01).
pub const PG_EPOCH_OFFSET_US: i64 = 946_684_800_000_000;

/// One column of a TupleData.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Datum {
    Null,
    /// An unchanged TOASTed value (`u`; the engine has no TOAST and never sends it).
    Unchanged,
    Text(Vec<u8>),
    Binary(Vec<u8>),
}

/// A column of a Relation message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelColumn {
    pub key: bool,
    pub name: String,
    pub type_oid: u32,
    pub typmod: i32,
}

/// A parsed message. XIDs and LSNs as the wire carries them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Begin {
        final_lsn: u64,
        commit_time: i64,
        xid: u32,
    },
    Commit {
        flags: u8,
        commit_lsn: u64,
        end_lsn: u64,
        commit_time: i64,
    },
    Relation {
        xid: Option<u32>,
        relid: u32,
        namespace: String,
        name: String,
        replident: u8,
        columns: Vec<RelColumn>,
    },
    Insert {
        xid: Option<u32>,
        relid: u32,
        new: Vec<Datum>,
    },
    /// `old` is the `K` (key) or `O` (old row) part, with its letter.
    Update {
        xid: Option<u32>,
        relid: u32,
        old: Option<(u8, Vec<Datum>)>,
        new: Vec<Datum>,
    },
    Delete {
        xid: Option<u32>,
        relid: u32,
        old: (u8, Vec<Datum>),
    },
    /// `flags`: 1 CASCADE, 2 RESTART IDENTITY.
    Truncate {
        xid: Option<u32>,
        flags: u8,
        relids: Vec<u32>,
    },
    Message {
        xid: Option<u32>,
        transactional: bool,
        lsn: u64,
        prefix: String,
        content: Vec<u8>,
    },
    StreamStart {
        xid: u32,
        first_segment: bool,
    },
    StreamStop,
    StreamCommit {
        xid: u32,
        flags: u8,
        commit_lsn: u64,
        end_lsn: u64,
        commit_time: i64,
    },
    /// `abort` is protocol 4's abort LSN and time (`streaming parallel`).
    StreamAbort {
        xid: u32,
        subxid: u32,
        abort: Option<(u64, i64)>,
    },
    BeginPrepare {
        prepare_lsn: u64,
        end_lsn: u64,
        prepare_time: i64,
        xid: u32,
        gid: String,
    },
    /// `P`, or `p` (`stream`: the PREPARE of a streamed transaction).
    Prepare {
        stream: bool,
        flags: u8,
        prepare_lsn: u64,
        end_lsn: u64,
        prepare_time: i64,
        xid: u32,
        gid: String,
    },
    CommitPrepared {
        flags: u8,
        commit_lsn: u64,
        end_lsn: u64,
        commit_time: i64,
        xid: u32,
        gid: String,
    },
    RollbackPrepared {
        flags: u8,
        prepare_end_lsn: u64,
        rollback_end_lsn: u64,
        prepare_time: i64,
        rollback_time: i64,
        xid: u32,
        gid: String,
    },
}

/// Writes messages into a buffer.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// A message of tag `tag`, with room for the fixed-size ones (BEGIN, COMMIT, …) without
    /// growing.
    pub fn new(tag: u8) -> Writer {
        Writer::with_capacity(tag, 64)
    }
    /// A message of tag `tag` with room for `bytes` in all: a change message sized up front
    /// grows at most once, where growing from one byte took half a dozen reallocations, a
    /// sixth of the decoder thread's time in `settle bench replicate`.
    pub fn with_capacity(tag: u8, bytes: usize) -> Writer {
        Writer::reusing(Vec::new(), tag, bytes)
    }
    /// [`Writer::with_capacity`] into `buf`, emptied first (a buffer an output gave back).
    pub fn reusing(mut buf: Vec<u8>, tag: u8, bytes: usize) -> Writer {
        buf.clear();
        buf.reserve(bytes.max(1));
        buf.push(tag);
        Writer(buf)
    }
    pub fn u8(&mut self, v: u8) -> &mut Writer {
        self.0.push(v);
        self
    }
    pub fn i16(&mut self, v: i16) -> &mut Writer {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Writer {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Writer {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Writer {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Writer {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    /// A zero-terminated string (PostgreSQL's `pq_sendstring`).
    pub fn string(&mut self, s: &str) -> &mut Writer {
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
        self
    }
    /// Length-prefixed bytes (`Int32 n`, then n bytes).
    pub fn counted(&mut self, b: &[u8]) -> &mut Writer {
        let n = i32::try_from(b.len()).unwrap_or(i32::MAX);
        self.i32(n);
        self.0.extend_from_slice(b);
        self
    }
    /// A TupleData.
    pub fn tuple(&mut self, cols: &[Datum]) -> &mut Writer {
        self.i16(i16::try_from(cols.len()).unwrap_or(i16::MAX));
        for c in cols {
            self.tuple_datum(c);
        }
        self
    }
    /// One column of a TupleData.
    pub fn tuple_datum(&mut self, c: &Datum) -> &mut Writer {
        match c {
            Datum::Null => self.u8(b'n'),
            Datum::Unchanged => self.u8(b'u'),
            Datum::Text(t) => self.u8(b't').counted(t),
            Datum::Binary(b) => self.u8(b'b').counted(b),
        }
    }
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0)
    }
}

/// Reads messages back. It follows `S`/`E` to know when the optional XIDs are there.
#[derive(Default)]
pub struct Reader {
    in_stream: bool,
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or_else(|| {
            Error::invalid(format!("pgoutput message truncated at byte {} (wanted {n} more)", self.at))
        })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn i16(&mut self) -> Result<i16> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().unwrap_or_default()))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().unwrap_or_default()))
    }
    fn i32(&mut self) -> Result<i32> {
        Ok(self.u32()? as i32)
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().unwrap_or_default()))
    }
    fn i64(&mut self) -> Result<i64> {
        Ok(self.u64()? as i64)
    }
    fn string(&mut self) -> Result<String> {
        let rest = &self.b[self.at..];
        let n = rest.iter().position(|&c| c == 0).ok_or_else(|| Error::invalid("pgoutput string without its end"))?;
        let s = String::from_utf8(rest[..n].to_vec()).map_err(|_| Error::invalid("pgoutput string not UTF-8"))?;
        self.at += n + 1;
        Ok(s)
    }
    fn counted(&mut self) -> Result<Vec<u8>> {
        let n = self.i32()?;
        let n = usize::try_from(n).map_err(|_| Error::invalid(format!("pgoutput negative length {n}")))?;
        Ok(self.take(n)?.to_vec())
    }
    fn tuple(&mut self) -> Result<Vec<Datum>> {
        let n = self.i16()?;
        let n = usize::try_from(n).map_err(|_| Error::invalid(format!("pgoutput negative column count {n}")))?;
        let mut cols = Vec::with_capacity(n.min(1600));
        for _ in 0..n {
            cols.push(match self.u8()? {
                b'n' => Datum::Null,
                b'u' => Datum::Unchanged,
                b't' => Datum::Text(self.counted()?),
                b'b' => Datum::Binary(self.counted()?),
                k => return Err(Error::invalid(format!("pgoutput unknown column kind {k:#04x}"))),
            });
        }
        Ok(cols)
    }
}

impl Reader {
    /// Parses one message (one output row's bytes).
    pub fn parse(&mut self, bytes: &[u8]) -> Result<Message> {
        let mut c = Cursor { b: bytes, at: 0 };
        let tag = c.u8()?;
        let xid = |c: &mut Cursor<'_>, s: bool| if s { c.u32().map(Some) } else { Ok(None) };
        let s = self.in_stream;
        let m = match tag {
            b'B' => Message::Begin { final_lsn: c.u64()?, commit_time: c.i64()?, xid: c.u32()? },
            b'C' => Message::Commit { flags: c.u8()?, commit_lsn: c.u64()?, end_lsn: c.u64()?, commit_time: c.i64()? },
            b'R' => {
                let xid = xid(&mut c, s)?;
                let (relid, namespace, name, replident) = (c.u32()?, c.string()?, c.string()?, c.u8()?);
                let n = c.i16()?;
                let mut columns = Vec::new();
                if n < 0 {
                    return Err(Error::invalid(format!("pgoutput relation with {n} columns")));
                }
                for _ in 0..n {
                    columns.push(RelColumn {
                        key: flag(c.u8()?)?,
                        name: c.string()?,
                        type_oid: c.u32()?,
                        typmod: c.i32()?,
                    });
                }
                Message::Relation { xid, relid, namespace, name, replident, columns }
            }
            b'I' => {
                let (xid, relid) = (xid(&mut c, s)?, c.u32()?);
                expect(c.u8()?, b'N')?;
                Message::Insert { xid, relid, new: c.tuple()? }
            }
            b'U' => {
                let (xid, relid) = (xid(&mut c, s)?, c.u32()?);
                let mut k = c.u8()?;
                let old = if k == b'K' || k == b'O' {
                    let old = (k, c.tuple()?);
                    k = c.u8()?;
                    Some(old)
                } else {
                    None
                };
                expect(k, b'N')?;
                Message::Update { xid, relid, old, new: c.tuple()? }
            }
            b'D' => {
                let (xid, relid) = (xid(&mut c, s)?, c.u32()?);
                let k = c.u8()?;
                if k != b'K' && k != b'O' {
                    return Err(Error::invalid(format!("pgoutput delete without K or O (found {k:#04x})")));
                }
                Message::Delete { xid, relid, old: (k, c.tuple()?) }
            }
            b'T' => {
                let xid = xid(&mut c, s)?;
                let n = c.u32()? as usize;
                if n > bytes.len() / 4 {
                    return Err(Error::invalid(format!("pgoutput truncate of {n} relations")));
                }
                let flags = c.u8()?;
                let mut relids = Vec::with_capacity(n);
                for _ in 0..n {
                    relids.push(c.u32()?);
                }
                Message::Truncate { xid, flags, relids }
            }
            b'M' => Message::Message {
                xid: xid(&mut c, s)?,
                transactional: flag(c.u8()?)?,
                lsn: c.u64()?,
                prefix: c.string()?,
                content: c.counted()?,
            },
            b'S' => {
                self.in_stream = true;
                Message::StreamStart { xid: c.u32()?, first_segment: flag(c.u8()?)? }
            }
            b'E' => {
                self.in_stream = false;
                Message::StreamStop
            }
            b'c' => Message::StreamCommit {
                xid: c.u32()?,
                flags: c.u8()?,
                commit_lsn: c.u64()?,
                end_lsn: c.u64()?,
                commit_time: c.i64()?,
            },
            b'A' => {
                let (xid, subxid) = (c.u32()?, c.u32()?);
                let abort = if c.at < bytes.len() { Some((c.u64()?, c.i64()?)) } else { None };
                Message::StreamAbort { xid, subxid, abort }
            }
            b'b' => Message::BeginPrepare {
                prepare_lsn: c.u64()?,
                end_lsn: c.u64()?,
                prepare_time: c.i64()?,
                xid: c.u32()?,
                gid: c.string()?,
            },
            b'P' | b'p' => Message::Prepare {
                stream: tag == b'p',
                flags: c.u8()?,
                prepare_lsn: c.u64()?,
                end_lsn: c.u64()?,
                prepare_time: c.i64()?,
                xid: c.u32()?,
                gid: c.string()?,
            },
            b'K' => Message::CommitPrepared {
                flags: c.u8()?,
                commit_lsn: c.u64()?,
                end_lsn: c.u64()?,
                commit_time: c.i64()?,
                xid: c.u32()?,
                gid: c.string()?,
            },
            b'r' => Message::RollbackPrepared {
                flags: c.u8()?,
                prepare_end_lsn: c.u64()?,
                rollback_end_lsn: c.u64()?,
                prepare_time: c.i64()?,
                rollback_time: c.i64()?,
                xid: c.u32()?,
                gid: c.string()?,
            },
            t => return Err(Error::invalid(format!("pgoutput unknown message type {:?}", t as char))),
        };
        if c.at != bytes.len() {
            return Err(Error::invalid(format!(
                "pgoutput message {:?}: {} bytes left over",
                tag as char,
                bytes.len() - c.at
            )));
        }
        Ok(m)
    }
}

/// A flags byte that only says yes (1) or no (0): what pgoutput writes.
fn flag(b: u8) -> Result<bool> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Error::invalid(format!("pgoutput flags {b:#04x} not understood"))),
    }
}

impl Message {
    /// The message's bytes, as pgoutput writes it (parsing them gives the message back).
    pub fn encode(&self) -> Vec<u8> {
        let xid = |w: &mut Writer, x: &Option<u32>| {
            if let Some(x) = x {
                w.u32(*x);
            }
        };
        let mut w;
        match self {
            Message::Begin { final_lsn, commit_time, xid } => {
                w = Writer::new(b'B');
                w.u64(*final_lsn).i64(*commit_time).u32(*xid);
            }
            Message::Commit { flags, commit_lsn, end_lsn, commit_time } => {
                w = Writer::new(b'C');
                w.u8(*flags).u64(*commit_lsn).u64(*end_lsn).i64(*commit_time);
            }
            Message::Relation { xid: x, relid, namespace, name, replident, columns } => {
                w = Writer::new(b'R');
                xid(&mut w, x);
                w.u32(*relid).string(namespace).string(name).u8(*replident);
                w.i16(i16::try_from(columns.len()).unwrap_or(i16::MAX));
                for c in columns {
                    w.u8(u8::from(c.key)).string(&c.name).u32(c.type_oid).i32(c.typmod);
                }
            }
            Message::Insert { xid: x, relid, new } => {
                w = Writer::new(b'I');
                xid(&mut w, x);
                w.u32(*relid).u8(b'N').tuple(new);
            }
            Message::Update { xid: x, relid, old, new } => {
                w = Writer::new(b'U');
                xid(&mut w, x);
                w.u32(*relid);
                if let Some((k, t)) = old {
                    w.u8(*k).tuple(t);
                }
                w.u8(b'N').tuple(new);
            }
            Message::Delete { xid: x, relid, old: (k, t) } => {
                w = Writer::new(b'D');
                xid(&mut w, x);
                w.u32(*relid).u8(*k).tuple(t);
            }
            Message::Truncate { xid: x, flags, relids } => {
                w = Writer::new(b'T');
                xid(&mut w, x);
                w.u32(relids.len() as u32).u8(*flags);
                for r in relids {
                    w.u32(*r);
                }
            }
            Message::Message { xid: x, transactional, lsn, prefix, content } => {
                w = Writer::new(b'M');
                xid(&mut w, x);
                w.u8(u8::from(*transactional)).u64(*lsn).string(prefix).counted(content);
            }
            Message::StreamStart { xid, first_segment } => {
                w = Writer::new(b'S');
                w.u32(*xid).u8(u8::from(*first_segment));
            }
            Message::StreamStop => w = Writer::new(b'E'),
            Message::StreamCommit { xid, flags, commit_lsn, end_lsn, commit_time } => {
                w = Writer::new(b'c');
                w.u32(*xid).u8(*flags).u64(*commit_lsn).u64(*end_lsn).i64(*commit_time);
            }
            Message::StreamAbort { xid, subxid, abort } => {
                w = Writer::new(b'A');
                w.u32(*xid).u32(*subxid);
                if let Some((lsn, time)) = abort {
                    w.u64(*lsn).i64(*time);
                }
            }
            Message::BeginPrepare { prepare_lsn, end_lsn, prepare_time, xid, gid } => {
                w = Writer::new(b'b');
                w.u64(*prepare_lsn).u64(*end_lsn).i64(*prepare_time).u32(*xid).string(gid);
            }
            Message::Prepare { stream, flags, prepare_lsn, end_lsn, prepare_time, xid, gid } => {
                w = Writer::new(if *stream { b'p' } else { b'P' });
                w.u8(*flags).u64(*prepare_lsn).u64(*end_lsn).i64(*prepare_time).u32(*xid).string(gid);
            }
            Message::CommitPrepared { flags, commit_lsn, end_lsn, commit_time, xid, gid } => {
                w = Writer::new(b'K');
                w.u8(*flags).u64(*commit_lsn).u64(*end_lsn).i64(*commit_time).u32(*xid).string(gid);
            }
            Message::RollbackPrepared {
                flags,
                prepare_end_lsn,
                rollback_end_lsn,
                prepare_time,
                rollback_time,
                xid,
                gid,
            } => {
                w = Writer::new(b'r');
                w.u8(*flags).u64(*prepare_end_lsn).u64(*rollback_end_lsn).i64(*prepare_time);
                w.i64(*rollback_time).u32(*xid).string(gid);
            }
        }
        w.finish()
    }
}

impl Reader {
    /// A reader that starts inside a streamed block (its messages carry XIDs).
    pub fn in_stream() -> Reader {
        Reader { in_stream: true }
    }
}

fn expect(found: u8, want: u8) -> Result<()> {
    if found != want {
        return Err(Error::invalid(format!("pgoutput expected {:?}, found {:?}", want as char, found as char)));
    }
    Ok(())
}

/// Renders messages as lines with what varies between runs and engines taken out: XIDs
/// become `T0`, `T1`… in order of first appearance, relation OIDs the relation's name (from
/// the Relation message), and LSNs and times are left out. Two message streams that say the
/// same thing render the same (the side-by-side tests against PostgreSQL compare these).
#[derive(Default)]
pub struct Normalizer {
    reader: Reader,
    xids: std::collections::HashMap<u32, usize>,
    relations: std::collections::HashMap<u32, String>,
}

impl Normalizer {
    /// Parses and renders one message.
    pub fn line(&mut self, bytes: &[u8]) -> Result<String> {
        let m = self.reader.parse(bytes)?;
        Ok(self.render(&m))
    }

    fn xid(&mut self, x: u32) -> String {
        let n = self.xids.len();
        format!("T{}", self.xids.entry(x).or_insert(n))
    }

    fn in_xid(&mut self, x: Option<u32>) -> String {
        x.map_or(String::new(), |x| format!(" {}", self.xid(x)))
    }

    fn rel(&self, relid: u32) -> String {
        self.relations.get(&relid).cloned().unwrap_or_else(|| "?".into())
    }

    pub fn render(&mut self, m: &Message) -> String {
        match m {
            Message::Begin { xid, .. } => format!("BEGIN {}", self.xid(*xid)),
            Message::Commit { flags, .. } => format!("COMMIT flags {flags}"),
            Message::Relation { xid, relid, namespace, name, replident, columns } => {
                self.relations.insert(*relid, format!("{namespace}.{name}"));
                let cols: Vec<String> = columns
                    .iter()
                    .map(|c| format!("{}{}:{}:{}", c.name, if c.key { "*" } else { "" }, c.type_oid, c.typmod))
                    .collect();
                format!("RELATION{} {namespace}.{name} {} ({})", self.in_xid(*xid), *replident as char, cols.join(" "))
            }
            Message::Insert { xid, relid, new } => {
                format!("INSERT{} {} N{}", self.in_xid(*xid), self.rel(*relid), tuple(new))
            }
            Message::Update { xid, relid, old, new } => {
                let old = old.as_ref().map_or(String::new(), |(k, t)| format!(" {}{}", *k as char, tuple(t)));
                format!("UPDATE{} {}{old} N{}", self.in_xid(*xid), self.rel(*relid), tuple(new))
            }
            Message::Delete { xid, relid, old: (k, t) } => {
                format!("DELETE{} {} {}{}", self.in_xid(*xid), self.rel(*relid), *k as char, tuple(t))
            }
            Message::Truncate { xid, flags, relids } => {
                let rels: Vec<String> = relids.iter().map(|r| self.rel(*r)).collect();
                format!("TRUNCATE{} flags {flags} ({})", self.in_xid(*xid), rels.join(" "))
            }
            Message::Message { xid, transactional, prefix, content, .. } => format!(
                "MESSAGE{} transactional {} prefix {prefix} content {}",
                self.in_xid(*xid),
                u8::from(*transactional),
                String::from_utf8_lossy(content)
            ),
            Message::StreamStart { xid, first_segment } => {
                format!("STREAM START {}{}", self.xid(*xid), if *first_segment { " first" } else { "" })
            }
            Message::StreamStop => "STREAM STOP".into(),
            Message::StreamCommit { xid, flags, .. } => format!("STREAM COMMIT {} flags {flags}", self.xid(*xid)),
            Message::StreamAbort { xid, subxid, abort } => format!(
                "STREAM ABORT {} {}{}",
                self.xid(*xid),
                self.xid(*subxid),
                if abort.is_some() { " with abort lsn and time" } else { "" }
            ),
            Message::BeginPrepare { xid, gid, .. } => format!("BEGIN PREPARE {} {gid}", self.xid(*xid)),
            Message::Prepare { stream, flags, xid, gid, .. } => {
                format!("{}PREPARE {} {gid} flags {flags}", if *stream { "STREAM " } else { "" }, self.xid(*xid))
            }
            Message::CommitPrepared { flags, xid, gid, .. } => {
                format!("COMMIT PREPARED {} {gid} flags {flags}", self.xid(*xid))
            }
            Message::RollbackPrepared { flags, xid, gid, .. } => {
                format!("ROLLBACK PREPARED {} {gid} flags {flags}", self.xid(*xid))
            }
        }
    }
}

/// `(t'1' n b'0000002a')`.
fn tuple(cols: &[Datum]) -> String {
    let parts: Vec<String> = cols
        .iter()
        .map(|c| match c {
            Datum::Null => "n".to_string(),
            Datum::Unchanged => "u".to_string(),
            Datum::Text(t) => format!("t'{}'", String::from_utf8_lossy(t)),
            Datum::Binary(b) => format!("b'{}'", b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        })
        .collect();
    format!("({})", parts.join(" "))
}
