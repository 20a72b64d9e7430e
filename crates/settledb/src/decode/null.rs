//! The `null` output plugin: decodes and reorders everything and writes nothing, the
//! engine's counterpart of PostgreSQL's `pgoutput` with an empty publication (the "null
//! sink" of `../shared/research/logical-decoding.md` §4.1, step 4). Every change still goes
//! through the reorder buffer and its relation is looked up; the plugin then declines it in
//! [`OutputPlugin::wants_change`], as pgoutput with no publication of the relation does before
//! it touches the tuple, so nothing is deformed and nothing is output. Benchmarks (`settle
//! bench decode`) measure the decoder with it. It takes no options and does not stream.

use super::logical::{Output, OutputPlugin, RelInfo, RowData, RowKind, TxnInfo};
use crate::error::{Error, Result};
use crate::types::Lsn;

/// The plugin; it counts the changes and transactions it was offered.
#[derive(Debug, Default)]
pub struct NullOutput {
    pub changes: u64,
    pub transactions: u64,
}

impl NullOutput {
    /// Refuses any option, as PostgreSQL's plugins refuse one they do not know.
    pub fn new(options: &[(String, Option<String>)]) -> Result<NullOutput> {
        if let Some((name, _)) = options.first() {
            return Err(Error::invalid(format!("option \"{name}\" = \"\" is unknown (the null plugin takes none)")));
        }
        Ok(NullOutput::default())
    }
}

impl OutputPlugin for NullOutput {
    fn begin(&mut self, _out: &mut Output, _txn: &TxnInfo) -> Result<()> {
        Ok(())
    }

    /// Counts the change and declines it (a hot path: once per change).
    fn wants_change(&mut self, _rel: &RelInfo, _lsn: Lsn, _kind: RowKind, _has_old: bool) -> Result<bool> {
        self.changes += 1;
        Ok(false)
    }

    fn change(&mut self, _out: &mut Output, _txn: &TxnInfo, _lsn: Lsn, _rel: &RelInfo, _row: &RowData) -> Result<()> {
        Ok(())
    }

    fn message(
        &mut self,
        _out: &mut Output,
        _txn: Option<&TxnInfo>,
        _lsn: Lsn,
        _transactional: bool,
        _prefix: &str,
        _content: &[u8],
    ) -> Result<()> {
        Ok(())
    }

    fn commit(&mut self, _out: &mut Output, _txn: &TxnInfo) -> Result<()> {
        self.transactions += 1;
        Ok(())
    }
}
