//! What the decoding model and crash tests share: [`Recorder`], an output plugin recording
//! structured events, and [`Subscriber`], which applies them as a logical replication
//! subscriber does.

#![allow(dead_code)] // each test binary uses some of this

use std::collections::HashMap;

use settledb::decode::logical::{Output, OutputPlugin, RelInfo, RowData, TxnInfo};
use settledb::{Lsn, Value, ValueRef, Xid};

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Change { table: String, kind: &'static str, old: Option<Vec<Value>>, new: Option<Vec<Value>> },
    Message { prefix: String, content: Vec<u8> },
}

/// What a subscriber ends with, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Hist {
    Txn(Vec<Item>),
    NonTransactional { prefix: String, content: Vec<u8> },
}

#[derive(Clone, Debug)]
pub enum Ev {
    Begin,
    Item(Item),
    Commit,
    NonTransactional { prefix: String, content: Vec<u8> },
    StreamStart(Xid),
    StreamItem { top: Xid, xid: Xid, item: Item },
    StreamStop(Xid),
    StreamAbort { top: Xid, xid: Xid },
    StreamCommit(Xid),
}

/// An output plugin recording what it is told; each event is also a row, so that
/// `upto_nchanges` counts events.
pub struct Recorder {
    pub streaming: bool,
    pub events: Vec<Ev>,
    /// Fails (as a decoder dying would) at this many events.
    pub fail_at: Option<usize>,
}

impl Recorder {
    pub fn new(streaming: bool) -> Recorder {
        Recorder { streaming, events: Vec::new(), fail_at: None }
    }

    fn push(&mut self, out: &mut Output, xid: Xid, ev: Ev) -> settledb::Result<()> {
        if self.fail_at == Some(self.events.len()) {
            return Err(settledb::Error::InvalidInput("the consumer died".into()));
        }
        out.write(Lsn::INVALID, xid, Vec::new());
        self.events.push(ev);
        Ok(())
    }
}

fn change_item(rel: &RelInfo, row: &RowData<'_>) -> Item {
    let owned = |values: &Vec<ValueRef<'_>>| -> Vec<Value> {
        values.iter().map(|v| v.to_value(&rel.name).expect("decoded text is UTF-8")).collect()
    };
    let (kind, old, new) = match row {
        RowData::Insert { new } => ("insert", None, Some(owned(new))),
        RowData::Update { old, new, .. } => ("update", old.as_ref().map(owned), Some(owned(new))),
        RowData::Delete { old, .. } => ("delete", old.as_ref().map(owned), None),
    };
    Item::Change { table: rel.name.clone(), kind, old, new }
}

impl OutputPlugin for Recorder {
    fn begin(&mut self, out: &mut Output, txn: &TxnInfo) -> settledb::Result<()> {
        self.push(out, txn.xid, Ev::Begin)
    }
    fn change(
        &mut self,
        out: &mut Output,
        txn: &TxnInfo,
        _: Lsn,
        rel: &RelInfo,
        row: &RowData<'_>,
    ) -> settledb::Result<()> {
        self.push(out, txn.xid, Ev::Item(change_item(rel, row)))
    }
    fn message(
        &mut self,
        out: &mut Output,
        txn: Option<&TxnInfo>,
        _: Lsn,
        transactional: bool,
        prefix: &str,
        content: &[u8],
    ) -> settledb::Result<()> {
        let (prefix, content) = (prefix.to_string(), content.to_vec());
        match txn {
            Some(t) => {
                assert!(transactional);
                self.push(out, t.xid, Ev::Item(Item::Message { prefix, content }))
            }
            None => {
                assert!(!transactional);
                self.push(out, Xid::INVALID, Ev::NonTransactional { prefix, content })
            }
        }
    }
    fn commit(&mut self, out: &mut Output, txn: &TxnInfo) -> settledb::Result<()> {
        self.push(out, txn.xid, Ev::Commit)
    }
    fn streaming(&self) -> bool {
        self.streaming
    }
    fn stream_start(&mut self, out: &mut Output, top: Xid, _: Lsn) -> settledb::Result<()> {
        self.push(out, top, Ev::StreamStart(top))
    }
    fn stream_stop(&mut self, out: &mut Output, top: Xid, _: Lsn) -> settledb::Result<()> {
        self.push(out, top, Ev::StreamStop(top))
    }
    fn stream_change(
        &mut self,
        out: &mut Output,
        top: Xid,
        xid: Xid,
        _: Lsn,
        rel: &RelInfo,
        row: &RowData<'_>,
    ) -> settledb::Result<()> {
        self.push(out, top, Ev::StreamItem { top, xid, item: change_item(rel, row) })
    }
    fn stream_message(
        &mut self,
        out: &mut Output,
        top: Xid,
        xid: Xid,
        _: Lsn,
        transactional: bool,
        prefix: &str,
        content: &[u8],
    ) -> settledb::Result<()> {
        assert!(transactional);
        let item = Item::Message { prefix: prefix.to_string(), content: content.to_vec() };
        self.push(out, top, Ev::StreamItem { top, xid, item })
    }
    fn stream_abort(&mut self, out: &mut Output, top: Xid, xid: Xid, _: Lsn) -> settledb::Result<()> {
        self.push(out, top, Ev::StreamAbort { top, xid })
    }
    fn stream_commit(&mut self, out: &mut Output, txn: &TxnInfo) -> settledb::Result<()> {
        self.push(out, txn.xid, Ev::StreamCommit(txn.xid))
    }
}

/// Applies decoded events as a subscriber does.
#[derive(Default)]
pub struct Subscriber {
    pub applied: Vec<Hist>,
    cur: Option<Vec<Item>>,
    block: Option<Xid>,
    streams: HashMap<Xid, Vec<(Xid, Item)>>,
    pub stream_aborts: u64,
    pub stream_commits: u64,
    /// Spill and stream events of the sessions applied (their `ReorderStats`).
    pub spill_count: u64,
    pub stream_count: u64,
}

impl Subscriber {
    pub fn apply(&mut self, events: &[Ev]) {
        for ev in events {
            match ev.clone() {
                Ev::Begin => assert!(self.cur.replace(Vec::new()).is_none(), "BEGIN inside a transaction"),
                Ev::Item(i) => self.cur.as_mut().expect("a change outside a transaction").push(i),
                Ev::Commit => {
                    let items = self.cur.take().expect("COMMIT outside a transaction");
                    self.applied.push(Hist::Txn(items));
                }
                Ev::NonTransactional { prefix, content } => {
                    self.applied.push(Hist::NonTransactional { prefix, content })
                }
                Ev::StreamStart(top) => {
                    assert!(self.cur.is_none() && self.block.replace(top).is_none(), "a block inside a block");
                }
                Ev::StreamItem { top, xid, item } => {
                    assert_eq!(self.block, Some(top), "a streamed change outside its block");
                    self.streams.entry(top).or_default().push((xid, item));
                }
                Ev::StreamStop(top) => assert_eq!(self.block.take(), Some(top), "a block closed that was not open"),
                Ev::StreamAbort { top, xid } => {
                    assert!(self.block.is_none());
                    self.stream_aborts += 1;
                    if top == xid {
                        self.streams.remove(&top);
                    } else if let Some(s) = self.streams.get_mut(&top) {
                        s.retain(|(x, _)| *x != xid);
                    }
                }
                Ev::StreamCommit(top) => {
                    assert!(self.block.is_none());
                    self.stream_commits += 1;
                    let items = self.streams.remove(&top).unwrap_or_default();
                    self.applied.push(Hist::Txn(items.into_iter().map(|(_, i)| i).collect()));
                }
            }
        }
    }

    /// A session ended: a streamed transaction not finished is forgotten (its stream starts
    /// again next time), as a subscriber's apply worker does when it reconnects.
    pub fn end_session(&mut self) {
        assert!(self.cur.is_none() && self.block.is_none(), "a session ended inside a transaction or block");
        self.streams.clear();
    }

    /// What was applied, empty transactions left out.
    pub fn take(&mut self) -> Vec<Hist> {
        std::mem::take(&mut self.applied).into_iter().filter(|h| !matches!(h, Hist::Txn(i) if i.is_empty())).collect()
    }
}
