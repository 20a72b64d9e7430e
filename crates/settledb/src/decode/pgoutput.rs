//! The `pgoutput` output plugin: PostgreSQL's logical replication protocol, versions 1 to 4
//! (PostgreSQL's `replication/pgoutput/pgoutput.c`), so that a PostgreSQL subscriber or any
//! CDC tool that speaks pgoutput can read settledb's changes.
//!
//! Each output row is one binary message ([`proto`] has their layouts):
//!
//! ```text
//! B  begin            before a transaction's first published change or message
//! R  relation         before a relation's first change in the session (again if what it
//!                     says changed, e.g. its replica identity), and first in every
//!                     streamed transaction that touches it
//! I / U / D           insert, update (with its K old key or O old row when one was logged),
//!                     delete (only when an old key or row was logged, as PostgreSQL does)
//! M  message          logical messages, with `messages true`
//! C  commit           only after a B: a transaction that published nothing sends nothing
//! S / E / c / A       streamed blocks, stream commit, stream abort (protocol 2, `streaming`)
//! b / P / K / r / p   two-phase (protocol 3, on a slot decoding two-phase): begin prepare,
//!                     prepare, commit prepared, rollback prepared, stream prepare
//! ```
//!
//! # Options (`pg_logical_slot_peek_binary_changes(…, name, value, …)`)
//!
//! As `parse_output_parameters` and `pgoutput_startup` read them: `proto_version` (1 to 4;
//! without it PostgreSQL reads 0 and says "client sent proto_version=0 but server only
//! supports protocol 1 or higher"), `publication_names` (required, a comma-separated list of
//! identifiers), `binary` (send values in binary send format), `messages`, `streaming`
//! (`on`, or `parallel` with protocol 4, whose stream aborts carry the abort LSN and time),
//! `two_phase` (protocol 3 or later: prepared transactions are sent at their PREPARE, and
//! the slot decodes two-phase from then on, as PostgreSQL 15's `CreateDecodingContext` turns
//! it on for good), `origin` (`any` or `none`: the engine has no
//! replication origins, so both send everything). A repeated option is "conflicting or
//! redundant options"; an unknown one "unrecognized pgoutput option: …".
//!
//! # Publications
//!
//! A change is sent when its relation is in one of the named publications (or one is `FOR
//! ALL TABLES`) and one of those publishes its kind of change; the actions are OR-ed over the
//! publications that include the relation, as `get_rel_sync_entry` does. Publications are read
//! through [`PublicationLookup`] with the decoder's historic snapshot *at the change's LSN*
//! ([`super::historic`]), so ALTER PUBLICATION applies to changes after it in the WAL, not to
//! those before, whenever they are decoded. A named publication that does not exist at that
//! point is PostgreSQL 15's error `publication "p" does not exist` (PostgreSQL 16 and later
//! warn and skip it instead); publications are first read at the first row change, as in
//! PostgreSQL, so messages alone do not need them.
//!
//! # Values
//!
//! Text format (`t`) is the type's output function ([`crate::pgtext`]); binary (`b`, with
//! `binary true`) is its send function: `int4`/`int8`/`float8` big-endian, `bool` one byte,
//! `text` and `bytea` their bytes, `timestamp` big-endian microseconds since 2000-01-01. Types
//! in the Relation message are PostgreSQL's OIDs ([`crate::pgtext::type_oid`]), typmod -1.
//!
//! # Not sent, and why
//!
//! `Y` (type): every engine type is a built-in
//! PostgreSQL type. `O` (origin): no replication origins. `u` (unchanged TOAST): no TOAST.
//! Without two-phase decoding a prepared transaction is sent at its COMMIT PREPARED as
//! `B` … `C`, as PostgreSQL does.

use std::collections::hash_map::Entry;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::historic::CatalogHistory;
use super::logical::{Output, OutputPlugin, RelInfo, RowData, RowKind, TxnInfo};
use super::sqltypes::{self, columns_of, ColumnTypes, SqlColumn, ValueFormat};
use super::test_decoding::parse_bool;
use crate::catalog::publication::{PublicationRow, PublishActions};
use crate::error::{Error, Result};
use crate::heap::truncate::TruncateRecord;
use crate::heap::tuple::ValueRef;
use crate::heap::ReplicaIdentity;
use crate::pgtext;
use crate::types::{Lsn, Oid, Xid};
use crate::xact::Snapshot;

pub mod proto;
#[cfg(test)]
mod tests;

use proto::{Datum, Writer, PG_EPOCH_OFFSET_US};

/// Lowest and highest protocol versions (PostgreSQL 16's `LOGICALREP_PROTO_MIN_VERSION_NUM`
/// and `LOGICALREP_PROTO_MAX_VERSION_NUM`).
pub const PROTO_MIN_VERSION: u32 = 1;
pub const PROTO_MAX_VERSION: u32 = 4;
const PROTO_STREAM_VERSION: u32 = 2;
const PROTO_TWOPHASE_VERSION: u32 = 3;
const PROTO_STREAM_PARALLEL_VERSION: u32 = 4;

/// Reads `pg_publication` rows with a given snapshot: what `db` gives pgoutput (decode sits
/// below db and does not reach into it).
pub trait PublicationLookup {
    fn publications(&self, snapshot: &Snapshot) -> Result<Vec<PublicationRow>>;
}

/// The `streaming` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Streaming {
    Off,
    On,
    Parallel,
}

/// The plugin's options, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgOutputOptions {
    pub proto_version: u32,
    pub publication_names: Vec<String>,
    pub binary: bool,
    pub messages: bool,
    pub streaming: Streaming,
    pub two_phase: bool,
}

impl PgOutputOptions {
    /// Parses and checks options as `parse_output_parameters` and `pgoutput_startup` do.
    pub fn parse(options: &[(String, Option<String>)]) -> Result<PgOutputOptions> {
        let mut o = PgOutputOptions {
            proto_version: 0,
            publication_names: Vec::new(),
            binary: false,
            messages: false,
            streaming: Streaming::Off,
            two_phase: false,
        };
        let mut given = FxHashSet::default();
        for (name, value) in options {
            if !given.insert(name.as_str()) {
                return Err(Error::invalid("conflicting or redundant options"));
            }
            let boolean = || -> Result<bool> {
                match value {
                    None => Ok(true),
                    Some(v) => parse_bool(v).ok_or_else(|| Error::invalid(format!("{name} requires a Boolean value"))),
                }
            };
            let text = || value.clone().ok_or_else(|| Error::invalid(format!("{name} requires a parameter")));
            match name.as_str() {
                "proto_version" => {
                    let v = text()?;
                    let n: u64 = v.trim().parse().map_err(|_| Error::invalid("invalid proto_version"))?;
                    o.proto_version =
                        u32::try_from(n).map_err(|_| Error::invalid(format!("proto_version \"{v}\" out of range")))?;
                }
                "publication_names" => {
                    o.publication_names = split_identifiers(&text()?)
                        .ok_or_else(|| Error::invalid("invalid publication_names syntax"))?;
                }
                "binary" => o.binary = boolean()?,
                "messages" => o.messages = boolean()?,
                "streaming" => {
                    o.streaming = match value.as_deref() {
                        Some(v) if v.eq_ignore_ascii_case("parallel") => Streaming::Parallel,
                        None => Streaming::On,
                        Some(v) => match parse_bool(v) {
                            Some(true) => Streaming::On,
                            Some(false) => Streaming::Off,
                            None => {
                                return Err(Error::invalid(format!("{name} requires a Boolean value or \"parallel\"")))
                            }
                        },
                    }
                }
                "two_phase" => o.two_phase = boolean()?,
                "origin" => {
                    let v = text()?;
                    if !v.eq_ignore_ascii_case("any") && !v.eq_ignore_ascii_case("none") {
                        return Err(Error::invalid(format!("unrecognized origin value: \"{v}\"")));
                    }
                }
                _ => return Err(Error::invalid(format!("unrecognized pgoutput option: {name}"))),
            }
        }
        o.check()?;
        Ok(o)
    }

    fn check(&self) -> Result<()> {
        let v = self.proto_version;
        if v > PROTO_MAX_VERSION {
            return Err(Error::invalid(format!(
                "client sent proto_version={v} but server only supports protocol {PROTO_MAX_VERSION} or lower"
            )));
        }
        if v < PROTO_MIN_VERSION {
            return Err(Error::invalid(format!(
                "client sent proto_version={v} but server only supports protocol {PROTO_MIN_VERSION} or higher"
            )));
        }
        if self.publication_names.is_empty() {
            return Err(Error::invalid("publication_names parameter missing"));
        }
        if self.streaming == Streaming::On && v < PROTO_STREAM_VERSION {
            return Err(Error::invalid(format!(
                "requested proto_version={v} does not support streaming, need {PROTO_STREAM_VERSION} or higher"
            )));
        }
        if self.streaming == Streaming::Parallel && v < PROTO_STREAM_PARALLEL_VERSION {
            return Err(Error::invalid(format!(
                "requested proto_version={v} does not support parallel streaming, need \
                 {PROTO_STREAM_PARALLEL_VERSION} or higher"
            )));
        }
        if self.two_phase && v < PROTO_TWOPHASE_VERSION {
            return Err(Error::invalid(format!(
                "requested proto_version={v} does not support two-phase commit, need {PROTO_TWOPHASE_VERSION} or \
                 higher"
            )));
        }
        Ok(())
    }
}

/// PostgreSQL's `SplitIdentifierString(s, ',')`: names separated by commas, spaces around
/// them ignored, unquoted ones folded to lower case, `"…"` ones kept as written (`""` is a
/// quote). `None` for a syntax error (an empty name, an unterminated quote).
pub fn split_identifiers(s: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut name = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        name.push('"');
                    }
                    '"' => break,
                    c => name.push(c),
                }
            }
            if name.is_empty() {
                return None;
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    break;
                }
                name.push(c.to_ascii_lowercase());
                chars.next();
            }
            if name.is_empty() {
                return None;
            }
        }
        out.push(name);
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.next() {
            None => return Some(out),
            Some(',') => continue,
            Some(_) => return None,
        }
    }
}

/// The plugin.
pub struct PgOutput {
    opts: PgOutputOptions,
    lookup: Box<dyn PublicationLookup>,
    history: CatalogHistory,
    /// The named publications as of a history epoch.
    publications: Option<(usize, Vec<PublicationRow>)>,
    /// Whether the current transaction sent its BEGIN (or BEGIN PREPARE, which goes out
    /// at once).
    sent_begin: bool,
    /// The Relation message last sent outside streamed transactions, per relation, and per
    /// streamed top-level transaction the ones sent in it.
    rel_sent: FxHashMap<Oid, Arc<Vec<u8>>>,
    stream_rel_sent: FxHashMap<Xid, FxHashMap<Oid, Arc<Vec<u8>>>>,
    /// Top-level transactions that had a streamed block.
    streamed: FxHashSet<Xid>,
    /// Tables truncated by each transaction being sent (by top-level XID): their Relation
    /// messages are forgotten again at its end and after each of its streamed blocks.
    truncated: Vec<(Xid, Oid)>,
    /// The SQL types of the columns, when a layer above the engine gives them.
    types: Option<Arc<dyn ColumnTypes>>,
    /// Per relation, the description's epoch they were worked out for, the columns' SQL
    /// types and the Relation message's body.
    rel_cache: FxHashMap<Oid, RelCache>,
    /// What the publications publish of the relation last asked about, as of a history
    /// epoch: a change is asked about twice (before its tuples are deformed and with them),
    /// and a transaction's changes mostly follow one another on few tables.
    last_actions: Option<(Oid, usize, PublishActions)>,
}

impl PgOutput {
    pub fn new(options: &[(String, Option<String>)], lookup: Box<dyn PublicationLookup>) -> Result<PgOutput> {
        Ok(PgOutput {
            opts: PgOutputOptions::parse(options)?,
            lookup,
            history: CatalogHistory::default(),
            publications: None,
            sent_begin: false,
            rel_sent: FxHashMap::default(),
            stream_rel_sent: FxHashMap::default(),
            streamed: FxHashSet::default(),
            truncated: Vec::new(),
            types: None,
            rel_cache: FxHashMap::default(),
            last_actions: None,
        })
    }

    /// Shows the columns with the SQL types `types` gives (see [`super::sqltypes`]).
    pub fn with_column_types(mut self, types: Option<Arc<dyn ColumnTypes>>) -> PgOutput {
        self.types = types;
        self
    }

    /// What the named publications publish of relation `rel`, as of `lsn`.
    fn actions(&mut self, rel: Oid, lsn: Lsn) -> Result<PublishActions> {
        let epoch = self.history.epoch(lsn);
        if let Some((r, e, a)) = self.last_actions {
            if (r, e) == (rel, epoch) {
                return Ok(a);
            }
        }
        if self.publications.as_ref().is_none_or(|(e, _)| *e != epoch) {
            let snap = self.history.snapshot_at(lsn).ok_or_else(|| {
                Error::invalid(format!("pgoutput: a change at {lsn} before the decoding start point"))
            })?;
            let all = self.lookup.publications(&snap)?;
            let mut named = Vec::with_capacity(self.opts.publication_names.len());
            for n in &self.opts.publication_names {
                let p = all.iter().find(|p| &p.name == n);
                named.push(p.cloned().ok_or_else(|| Error::NotFound(format!("publication \"{n}\" does not exist")))?);
            }
            self.publications = Some((epoch, named));
        }
        let mut a = PublishActions { insert: false, update: false, delete: false, truncate: false };
        for p in self.publications.iter().flat_map(|(_, v)| v).filter(|p| p.includes(rel)) {
            a.insert |= p.actions.insert;
            a.update |= p.actions.update;
            a.delete |= p.actions.delete;
            a.truncate |= p.actions.truncate;
        }
        self.last_actions = Some((rel, epoch, a));
        Ok(a)
    }

    /// Whether `row` is to be sent: its kind is published, and a delete has an old row.
    fn publishes(&mut self, rel: &RelInfo, lsn: Lsn, row: &RowData) -> Result<bool> {
        let (kind, has_old) = match row {
            RowData::Insert { .. } => (RowKind::Insert, false),
            RowData::Update { old, .. } => (RowKind::Update, old.is_some()),
            RowData::Delete { old, .. } => (RowKind::Delete, old.is_some()),
        };
        self.publishes_kind(rel, lsn, kind, has_old)
    }

    /// [`PgOutput::publishes`] from what is known before the tuples are deformed.
    fn publishes_kind(&mut self, rel: &RelInfo, lsn: Lsn, kind: RowKind, has_old: bool) -> Result<bool> {
        let a = self.actions(rel.oid, lsn)?;
        Ok(match kind {
            RowKind::Insert => a.insert,
            RowKind::Update => a.update,
            RowKind::Delete => a.delete && has_old,
        })
    }

    /// Sends the Relation message if this context has not sent it, or sent a different one.
    /// `stream` is `(top, xid)` inside a streamed block.
    fn maybe_send_relation(
        &mut self,
        out: &mut Output,
        lsn: Lsn,
        owner: Xid,
        rel: &RelInfo,
        stream: Option<(Xid, Xid)>,
    ) {
        let body = &cached(&mut self.rel_cache, self.types.as_ref(), rel).body;
        send_relation(&mut self.rel_sent, &mut self.stream_rel_sent, out, lsn, owner, rel.oid, body, stream);
    }

    /// A published change: its Relation message if not sent in this context, then the change
    /// (`xid` in it inside a streamed block, `stream` as [`PgOutput::maybe_send_relation`]'s).
    /// One look at the relation's cached description serves both.
    fn send_change(
        &mut self,
        out: &mut Output,
        lsn: Lsn,
        owner: Xid,
        rel: &RelInfo,
        row: &RowData<'_>,
        stream: Option<(Xid, Xid)>,
    ) {
        let cache = cached(&mut self.rel_cache, self.types.as_ref(), rel);
        send_relation(&mut self.rel_sent, &mut self.stream_rel_sent, out, lsn, owner, rel.oid, &cache.body, stream);
        let m = change_message(out.buffer(), rel, &cache.cols, row, stream.map(|(_, xid)| xid), self.opts.binary);
        out.write(lsn, owner, m);
    }

    /// `pgoutput_truncate` (also its stream callback, `stream` then `(top, xid)`): the
    /// relations whose publications publish truncates, each after its Relation message if
    /// not sent yet (and BEGIN first, outside a stream), then one T message naming them all.
    fn send_truncate(
        &mut self,
        out: &mut Output,
        txn: Option<&TxnInfo>,
        lsn: Lsn,
        rels: &[Arc<RelInfo>],
        flags: &TruncateRecord,
        stream: Option<(Xid, Xid)>,
    ) -> Result<()> {
        let owner = stream.map_or_else(|| txn.map_or(Xid::INVALID, |t| t.xid), |(top, _)| top);
        // The new relfilenode invalidates each table's relcache entry (PostgreSQL's decoder
        // runs the invalidation before it hands the TRUNCATE over), and
        // `rel_sync_cache_relation_cb` then forgets that its schema was sent: each table's
        // Relation message goes again before the T, published for truncates or not. The
        // decoder runs the transaction's invalidations again at its end and after each
        // streamed block ([`PgOutput::forget_truncated`]).
        for rel in rels {
            self.forget_relation(rel.oid);
            self.truncated.push((owner, rel.oid));
        }
        let mut relids = Vec::with_capacity(rels.len());
        for rel in rels {
            if !self.actions(rel.oid, lsn)?.truncate {
                continue;
            }
            relids.push(rel.oid);
            if let (Some(txn), false) = (txn, self.sent_begin) {
                self.write_begin(out, txn, lsn);
            }
            self.maybe_send_relation(out, lsn, owner, rel, stream);
        }
        if !relids.is_empty() {
            let mut w = Writer::new(b'T');
            if let Some((_, xid)) = stream {
                w.u32(xid.0);
            }
            w.u32(relids.len() as u32).u8(flags.flags);
            for r in &relids {
                w.u32(r.0);
            }
            out.write(lsn, owner, w.finish());
        }
        Ok(())
    }

    fn forget_relation(&mut self, rel: Oid) {
        self.rel_sent.remove(&rel);
        for sent in self.stream_rel_sent.values_mut() {
            sent.remove(&rel);
        }
    }

    /// Forgets the Relation messages of the tables `top` truncated; `end`: it is over
    /// (commit, prepare, their streamed forms, a stream abort), else a streamed block of it is.
    fn forget_truncated(&mut self, top: Xid, end: bool) {
        let rels: Vec<Oid> = self.truncated.iter().filter(|(x, _)| *x == top).map(|(_, r)| *r).collect();
        for rel in rels {
            self.forget_relation(rel);
        }
        if end {
            self.truncated.retain(|(x, _)| *x != top);
        }
    }

    fn write_begin(&mut self, out: &mut Output, txn: &TxnInfo, lsn: Lsn) {
        let mut w = Writer::new(b'B');
        w.u64(txn.commit_lsn.0).i64(pg_time(txn.commit_time_us)).u32(txn.xid.0);
        out.write(lsn, txn.xid, w.finish());
        self.sent_begin = true;
    }

    /// A two-phase message: `P`, `p` (prepare, stream prepare) or `K` (commit prepared), all
    /// laid out alike.
    fn two_phase_message(tag: u8, txn: &TxnInfo, gid: &str) -> Vec<u8> {
        let mut w = Writer::new(tag);
        w.u8(0).u64(txn.commit_lsn.0).u64(txn.end_lsn.0).i64(pg_time(txn.commit_time_us)).u32(txn.xid.0).string(gid);
        w.finish()
    }

    fn message_bytes(&self, xid: Option<Xid>, lsn: Lsn, transactional: bool, prefix: &str, content: &[u8]) -> Vec<u8> {
        let mut w = Writer::new(b'M');
        if let Some(x) = xid {
            w.u32(x.0);
        }
        w.u8(u8::from(transactional)).u64(lsn.0).string(prefix).counted(content);
        w.finish()
    }
}

/// The I, U or D message, in `buf` (emptied first); `binary` as the option.
fn change_message(
    buf: Vec<u8>,
    rel: &RelInfo,
    cols: &[SqlColumn],
    row: &RowData<'_>,
    xid: Option<Xid>,
    binary: bool,
) -> Vec<u8> {
    // What the WAL logged decides K or O (PostgreSQL decides by the relation's
    // relreplident as of the change, which is what the logging followed).
    let old_kind = |whole: bool| if whole { b'O' } else { b'K' };
    let tag = match row {
        RowData::Insert { .. } => b'I',
        RowData::Update { .. } => b'U',
        RowData::Delete { .. } => b'D',
    };
    let mut w = Writer::reusing(buf, tag, 16 + message_room(row));
    if let Some(x) = xid {
        w.u32(x.0);
    }
    w.u32(rel.oid.0);
    let tuple = |w: &mut Writer, values: &[ValueRef<'_>]| {
        w.i16(i16::try_from(values.len()).unwrap_or(i16::MAX));
        for (&v, c) in values.iter().zip(cols) {
            write_value(w, v, c.format, binary);
        }
    };
    match row {
        RowData::Insert { new } => {
            w.u8(b'N');
            tuple(&mut w, new);
        }
        RowData::Update { old, old_whole, new } => {
            if let Some(old) = old {
                w.u8(old_kind(*old_whole));
                tuple(&mut w, old);
            }
            w.u8(b'N');
            tuple(&mut w, new);
        }
        RowData::Delete { old, old_whole } => {
            w.u8(old_kind(*old_whole));
            tuple(&mut w, old.as_deref().unwrap_or_default());
        }
    }
    w.finish()
}

/// `rel`'s columns' SQL types and Relation message body from `cache`, worked out once per
/// description (a hot path: once per row, one lookup).
fn cached<'c>(
    cache: &'c mut FxHashMap<Oid, RelCache>,
    types: Option<&Arc<dyn ColumnTypes>>,
    rel: &RelInfo,
) -> &'c RelCache {
    let fresh = |rel: &RelInfo| {
        let cols = columns_of(types, rel);
        let body = Arc::new(relation_body(rel, &cols));
        RelCache { epoch: rel.epoch, cols, body }
    };
    match cache.entry(rel.oid) {
        Entry::Occupied(e) => {
            let c = e.into_mut();
            if c.epoch != rel.epoch {
                *c = fresh(rel);
            }
            c
        }
        Entry::Vacant(e) => e.insert(fresh(rel)),
    }
}

/// Sends a relation's Relation message (`body`) unless the context (`rel_sent`, or the
/// streamed transaction's set when `stream` is `(top, xid)`) sent the same one.
#[allow(clippy::too_many_arguments)]
fn send_relation(
    rel_sent: &mut FxHashMap<Oid, Arc<Vec<u8>>>,
    stream_rel_sent: &mut FxHashMap<Xid, FxHashMap<Oid, Arc<Vec<u8>>>>,
    out: &mut Output,
    lsn: Lsn,
    owner: Xid,
    rel: Oid,
    body: &Arc<Vec<u8>>,
    stream: Option<(Xid, Xid)>,
) {
    let sent = match stream {
        None => rel_sent,
        Some((top, _)) => stream_rel_sent.entry(top).or_default(),
    };
    if sent.get(&rel).is_some_and(|b| Arc::ptr_eq(b, body) || **b == **body) {
        return;
    }
    let mut w = Writer::new(b'R');
    if let Some((_, xid)) = stream {
        w.u32(xid.0);
    }
    w.0.extend_from_slice(body);
    out.write(lsn, owner, w.finish());
    sent.insert(rel, body.clone());
}

/// A Relation message after its tag and optional XID.
fn relation_body(rel: &RelInfo, cols: &[SqlColumn]) -> Vec<u8> {
    let mut w = Writer::default();
    w.u32(rel.oid.0).string(&rel.namespace).string(&rel.name).u8(rel.replica_identity.code() as u8);
    w.i16(i16::try_from(rel.schema.columns.len()).unwrap_or(i16::MAX));
    for (i, (c, sql)) in rel.schema.columns.iter().zip(cols).enumerate() {
        let key = match rel.replica_identity {
            ReplicaIdentity::Full => true,
            ReplicaIdentity::Default => rel.key_columns.iter().any(|&k| usize::from(k) == i),
            ReplicaIdentity::Nothing => false,
        };
        w.u8(u8::from(key)).string(&c.name).u32(sql.type_oid).i32(sql.typmod);
    }
    w.finish()
}

/// What [`PgOutput`] keeps per relation description.
struct RelCache {
    epoch: u64,
    cols: Vec<SqlColumn>,
    body: Arc<Vec<u8>>,
}

/// A TupleData column straight into the message (a hot path: once per value): integers,
/// numerics and text in their text form without an intermediate string; the rest through
/// [`datum_as`].
fn write_value(w: &mut Writer, v: ValueRef<'_>, format: ValueFormat, binary: bool) {
    match (v, format, binary) {
        (ValueRef::Null, ..) => {
            w.u8(b'n');
        }
        // As stored, as PostgreSQL's pgoutput sends a text datum's bytes.
        (ValueRef::Text(t), ValueFormat::Stored, _) if !binary => {
            w.u8(b't').counted(t);
        }
        (ValueRef::Int4(x), ValueFormat::Stored | ValueFormat::Int2, false) => write_decimal(w, i64::from(x), 0),
        (ValueRef::Int8(x), ValueFormat::Stored, false) => write_decimal(w, x, 0),
        (ValueRef::Int8(x), ValueFormat::Numeric { scale }, false) => write_decimal(w, x, scale),
        (ValueRef::Int4(x), ValueFormat::Numeric { scale }, false) => write_decimal(w, i64::from(x), scale),
        (ValueRef::Timestamp(t), ValueFormat::Stored, false) => {
            let mut field = [0u8; 5 + pgtext::TIMESTAMP_TEXT_MAX];
            match pgtext::timestamp_text(&mut field[5..], t) {
                Some(n) => write_field(w, &mut field, n),
                None => write_text(w, |out| pgtext::push_timestamp(out, t)),
            }
        }
        (ValueRef::Int4(d), ValueFormat::Date, false) => write_text(w, |out| pgtext::push_date(out, d)),
        _ => {
            w.tuple_datum(&datum_as(v, format, binary));
        }
    }
}

/// About the bytes a change's TupleData take (a text value's own length, up to 24 for any
/// other): the message's first allocation.
fn message_room(row: &RowData<'_>) -> usize {
    let tuple = |values: &[ValueRef<'_>]| -> usize {
        2 + values.iter().map(|v| 5 + if let ValueRef::Text(t) = v { t.len() } else { 20 }).sum::<usize>()
    };
    match row {
        RowData::Insert { new } => tuple(new),
        RowData::Update { old, new, .. } => 1 + old.as_deref().map_or(0, tuple) + 1 + tuple(new),
        RowData::Delete { old, .. } => 1 + old.as_deref().map_or(0, tuple),
    }
}

/// A `t` column holding `m / 10^scale` in text (an integer for scale 0).
///
/// The text is written from its end back, the kind and length just before it, and the
/// field copied into the message as a block of fixed size ([`write_field`]'s reasoning),
/// from a buffer long enough that the block never runs past it.
fn write_decimal(w: &mut Writer, m: i64, scale: u8) {
    const MAX: usize = sqltypes::DECIMAL_TEXT_MAX;
    let mut buf = [0u8; 5 + 2 * MAX];
    let end = 5 + MAX;
    let start = sqltypes::decimal_text_before(&mut buf, end, m, scale);
    let n = end - start;
    let at = start - 5;
    buf[at] = b't';
    buf[at + 1..start].copy_from_slice(&(n as u32).to_be_bytes());
    let field = buf[at..].first_chunk::<{ 5 + MAX }>().expect("the text starts MAX bytes or more before the end");
    let len = w.0.len() + 5 + n;
    w.0.extend_from_slice(field);
    w.0.truncate(len);
}

/// A `t` column of `n` bytes of text, laid out in `field` after five bytes for its kind and
/// length: the whole field is copied into the message at once (a copy of known size, where
/// a kind, a length and the text written one after the other cost a call each), then cut to
/// its length.
fn write_field<const N: usize>(w: &mut Writer, field: &mut [u8; N], n: usize) {
    field[0] = b't';
    field[1..5].copy_from_slice(&(n as u32).to_be_bytes());
    let len = w.0.len() + 5 + n;
    w.0.extend_from_slice(field);
    w.0.truncate(len);
}

/// A `t` column whose text `push` writes straight into the message, its length filled in
/// after.
fn write_text(w: &mut Writer, push: impl FnOnce(&mut Vec<u8>)) {
    w.u8(b't');
    let at = w.0.len();
    w.i32(0);
    push(&mut w.0);
    let n = i32::try_from(w.0.len() - at - 4).unwrap_or(i32::MAX);
    w.0[at..at + 4].copy_from_slice(&n.to_be_bytes());
}

/// A value as a TupleData column, shown as its SQL type (`format`).
pub fn datum_as(v: ValueRef<'_>, format: ValueFormat, binary: bool) -> Datum {
    if format == ValueFormat::Stored || v.is_null() {
        return datum(v, binary);
    }
    if binary {
        if let Some(b) = sqltypes::binary(v, format) {
            return Datum::Binary(b);
        }
        return datum(v, binary);
    }
    Datum::Text(sqltypes::text(v, format).unwrap_or_default().into_bytes())
}

/// A value as a TupleData column: its send format with `binary`, else its text output.
pub fn datum(v: ValueRef<'_>, binary: bool) -> Datum {
    if v.is_null() {
        return Datum::Null;
    }
    if !binary {
        if let ValueRef::Text(t) = v {
            return Datum::Text(t.to_vec());
        }
        return Datum::Text(pgtext::value_text(v).unwrap_or_default().into_bytes());
    }
    Datum::Binary(match v {
        ValueRef::Null => Vec::new(),
        ValueRef::Int4(x) => x.to_be_bytes().to_vec(),
        ValueRef::Int8(x) => x.to_be_bytes().to_vec(),
        ValueRef::Float8(f) => f.to_bits().to_be_bytes().to_vec(),
        ValueRef::Bool(b) => vec![u8::from(b)],
        ValueRef::Text(s) | ValueRef::Bytea(s) => s.to_vec(),
        ValueRef::Timestamp(t) => (t - PG_EPOCH_OFFSET_US).to_be_bytes().to_vec(),
    })
}

/// A Unix-epoch time in µs as PostgreSQL's `TimestampTz`.
fn pg_time(us: i64) -> i64 {
    us - PG_EPOCH_OFFSET_US
}

impl OutputPlugin for PgOutput {
    fn begin(&mut self, _out: &mut Output, _txn: &TxnInfo) -> Result<()> {
        // BEGIN waits for the first change or message sent (PostgreSQL 15).
        self.sent_begin = false;
        Ok(())
    }

    /// Publications first, before the tuple is deformed (PostgreSQL's `pgoutput_change`).
    fn wants_change(&mut self, rel: &RelInfo, lsn: Lsn, kind: RowKind, has_old: bool) -> Result<bool> {
        self.publishes_kind(rel, lsn, kind, has_old)
    }

    fn change(&mut self, out: &mut Output, txn: &TxnInfo, lsn: Lsn, rel: &RelInfo, row: &RowData) -> Result<()> {
        if !self.publishes(rel, lsn, row)? {
            return Ok(());
        }
        if !self.sent_begin {
            self.write_begin(out, txn, lsn);
        }
        self.send_change(out, lsn, txn.xid, rel, row, None);
        Ok(())
    }

    fn truncate(
        &mut self,
        out: &mut Output,
        txn: &TxnInfo,
        lsn: Lsn,
        rels: &[Arc<RelInfo>],
        flags: &TruncateRecord,
    ) -> Result<()> {
        self.send_truncate(out, Some(txn), lsn, rels, flags, None)
    }

    fn stream_truncate(
        &mut self,
        out: &mut Output,
        top: Xid,
        xid: Xid,
        lsn: Lsn,
        rels: &[Arc<RelInfo>],
        flags: &TruncateRecord,
    ) -> Result<()> {
        self.send_truncate(out, None, lsn, rels, flags, Some((top, xid)))
    }

    fn message(
        &mut self,
        out: &mut Output,
        txn: Option<&TxnInfo>,
        lsn: Lsn,
        transactional: bool,
        prefix: &str,
        content: &[u8],
    ) -> Result<()> {
        if !self.opts.messages {
            return Ok(());
        }
        if let (true, Some(txn)) = (transactional, txn) {
            if !self.sent_begin {
                self.write_begin(out, txn, lsn);
            }
        }
        let m = self.message_bytes(None, lsn, transactional, prefix, content);
        out.write(lsn, txn.map_or(Xid::INVALID, |t| t.xid), m);
        Ok(())
    }

    fn commit(&mut self, out: &mut Output, txn: &TxnInfo) -> Result<()> {
        self.forget_truncated(txn.xid, true);
        if !std::mem::take(&mut self.sent_begin) {
            return Ok(());
        }
        let mut w = Writer::new(b'C');
        w.u8(0).u64(txn.commit_lsn.0).u64(txn.end_lsn.0).i64(pg_time(txn.commit_time_us));
        out.write(txn.end_lsn, txn.xid, w.finish());
        Ok(())
    }

    fn streaming(&self) -> bool {
        self.opts.streaming != Streaming::Off
    }

    fn stream_start(&mut self, out: &mut Output, top: Xid, lsn: Lsn) -> Result<()> {
        let first = self.streamed.insert(top);
        let mut w = Writer::new(b'S');
        w.u32(top.0).u8(u8::from(first));
        out.write(lsn, top, w.finish());
        Ok(())
    }

    fn stream_stop(&mut self, out: &mut Output, top: Xid, lsn: Lsn) -> Result<()> {
        self.forget_truncated(top, false);
        out.write(lsn, top, vec![b'E']);
        Ok(())
    }

    fn stream_change(
        &mut self,
        out: &mut Output,
        top: Xid,
        xid: Xid,
        lsn: Lsn,
        rel: &RelInfo,
        row: &RowData,
    ) -> Result<()> {
        if !self.publishes(rel, lsn, row)? {
            return Ok(());
        }
        self.send_change(out, lsn, top, rel, row, Some((top, xid)));
        Ok(())
    }

    /// A streamed message names the top-level transaction, not the subtransaction that wrote
    /// it: PostgreSQL hands `stream_message` the transaction being streamed.
    fn stream_message(
        &mut self,
        out: &mut Output,
        top: Xid,
        _xid: Xid,
        lsn: Lsn,
        transactional: bool,
        prefix: &str,
        content: &[u8],
    ) -> Result<()> {
        if self.opts.messages {
            let m = self.message_bytes(Some(top), lsn, transactional, prefix, content);
            out.write(lsn, top, m);
        }
        Ok(())
    }

    fn stream_abort(&mut self, out: &mut Output, top: Xid, xid: Xid, lsn: Lsn) -> Result<()> {
        self.stream_abort_at(out, top, xid, lsn, 0)
    }

    fn stream_abort_at(&mut self, out: &mut Output, top: Xid, xid: Xid, lsn: Lsn, abort_time_us: i64) -> Result<()> {
        if xid == top {
            self.truncated.retain(|(x, _)| *x != top);
        }
        let mut w = Writer::new(b'A');
        w.u32(top.0).u32(xid.0);
        if self.opts.streaming == Streaming::Parallel {
            w.u64(lsn.0).i64(pg_time(abort_time_us));
        }
        out.write(lsn, top, w.finish());
        if xid == top {
            self.streamed.remove(&top);
            self.stream_rel_sent.remove(&top);
        }
        Ok(())
    }

    fn stream_commit(&mut self, out: &mut Output, txn: &TxnInfo) -> Result<()> {
        self.forget_truncated(txn.xid, true);
        let mut w = Writer::new(b'c');
        w.u32(txn.xid.0).u8(0).u64(txn.commit_lsn.0).u64(txn.end_lsn.0).i64(pg_time(txn.commit_time_us));
        out.write(txn.end_lsn, txn.xid, w.finish());
        self.streamed.remove(&txn.xid);
        // What the committed transaction sent counts as sent (`cleanup_rel_sync_cache`).
        if let Some(sent) = self.stream_rel_sent.remove(&txn.xid) {
            self.rel_sent.extend(sent);
        }
        Ok(())
    }

    fn two_phase(&self) -> bool {
        true
    }

    fn two_phase_requested(&self) -> bool {
        self.opts.two_phase
    }

    fn begin_prepare(&mut self, out: &mut Output, txn: &TxnInfo, gid: &str) -> Result<()> {
        let mut w = Writer::new(b'b');
        w.u64(txn.commit_lsn.0).u64(txn.end_lsn.0).i64(pg_time(txn.commit_time_us)).u32(txn.xid.0).string(gid);
        out.write(txn.first_lsn, txn.xid, w.finish());
        self.sent_begin = true;
        Ok(())
    }

    fn prepare(&mut self, out: &mut Output, txn: &TxnInfo, gid: &str) -> Result<()> {
        self.forget_truncated(txn.xid, true);
        self.sent_begin = false;
        out.write(txn.end_lsn, txn.xid, Self::two_phase_message(b'P', txn, gid));
        Ok(())
    }

    fn commit_prepared(&mut self, out: &mut Output, txn: &TxnInfo, gid: &str) -> Result<()> {
        out.write(txn.end_lsn, txn.xid, Self::two_phase_message(b'K', txn, gid));
        Ok(())
    }

    fn rollback_prepared(
        &mut self,
        out: &mut Output,
        txn: &TxnInfo,
        gid: &str,
        prepare_end_lsn: Lsn,
        prepare_time_us: i64,
    ) -> Result<()> {
        let mut w = Writer::new(b'r');
        w.u8(0).u64(prepare_end_lsn.0).u64(txn.end_lsn.0).i64(pg_time(prepare_time_us));
        w.i64(pg_time(txn.commit_time_us)).u32(txn.xid.0).string(gid);
        out.write(txn.end_lsn, txn.xid, w.finish());
        Ok(())
    }

    fn stream_prepare(&mut self, out: &mut Output, txn: &TxnInfo, gid: &str) -> Result<()> {
        self.forget_truncated(txn.xid, true);
        out.write(txn.end_lsn, txn.xid, Self::two_phase_message(b'p', txn, gid));
        self.streamed.remove(&txn.xid);
        if let Some(sent) = self.stream_rel_sent.remove(&txn.xid) {
            self.rel_sent.extend(sent);
        }
        Ok(())
    }

    fn catalog_history(&mut self, history: &CatalogHistory) -> Result<()> {
        self.history = history.clone();
        Ok(())
    }
}
