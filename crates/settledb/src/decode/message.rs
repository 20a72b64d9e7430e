//! Logical messages (PostgreSQL's `pg_logical_emit_message`, `message.c`): bytes an
//! application writes into the WAL for logical decoding to hand to its consumers, either as
//! part of a transaction (decoded at its commit, dropped if it aborts) or on their own
//! (decoded as soon as the decoder reaches them, whatever becomes of the transaction around).
//!
//! Record: rmgr `LogicalMessage`, info [`XLOG_LOGICAL_MESSAGE`]; the record's XID is the
//! writing (sub)transaction's for a transactional message, invalid otherwise.
//!
//! ```text
//!   transactional u8, prefix_len u32, message_len u32, prefix bytes, message bytes
//! ```
//!
//! The prefix is text without NUL bytes (a consumer filters messages by it); the message is any
//! bytes. Redo does nothing: a message changes no page.

use crate::error::{Error, Result};
use crate::types::Lsn;
use crate::wal::DecodedRecord;

/// `LogicalMessage` info of a message record (PostgreSQL's value).
pub const XLOG_LOGICAL_MESSAGE: u8 = 0x00;

/// A decoded logical message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogicalMessage {
    pub transactional: bool,
    pub prefix: String,
    pub content: Vec<u8>,
}

impl LogicalMessage {
    /// Checks the prefix as PostgreSQL's text input would take it: no NUL bytes.
    pub fn check_prefix(prefix: &str) -> Result<()> {
        if prefix.contains('\0') {
            return Err(Error::invalid("logical message prefix must not contain a zero byte"));
        }
        Ok(())
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(9 + self.prefix.len() + self.content.len());
        v.push(u8::from(self.transactional));
        v.extend_from_slice(&(self.prefix.len() as u32).to_le_bytes());
        v.extend_from_slice(&(self.content.len() as u32).to_le_bytes());
        v.extend_from_slice(self.prefix.as_bytes());
        v.extend_from_slice(&self.content);
        v
    }

    /// Decodes a record's main data; an error naming `lsn` when malformed.
    pub fn decode(d: &[u8], lsn: Lsn) -> Result<LogicalMessage> {
        let bad = |what: String| Error::corrupt_wal(lsn, format!("logical message record: {what}"));
        let u32_at = |at: usize| d.get(at..at + 4).and_then(|b| <[u8; 4]>::try_from(b).ok()).map(u32::from_le_bytes);
        let (Some(&t), Some(plen), Some(mlen)) = (d.first(), u32_at(1), u32_at(5)) else {
            return Err(bad(format!("{} bytes are too short for its header", d.len())));
        };
        let (plen, mlen) = (plen as usize, mlen as usize);
        if t > 1 {
            return Err(bad(format!("invalid transactional flag {t}")));
        }
        if Some(d.len()) != plen.checked_add(mlen).and_then(|n| n.checked_add(9)) {
            return Err(bad(format!("{} bytes do not hold a {plen}-byte prefix and a {mlen}-byte message", d.len())));
        }
        let prefix =
            std::str::from_utf8(&d[9..9 + plen]).map_err(|_| bad("prefix is not valid UTF-8".into()))?.to_string();
        if prefix.contains('\0') {
            return Err(bad("prefix contains a zero byte".into()));
        }
        Ok(LogicalMessage { transactional: t == 1, prefix, content: d[9 + plen..].to_vec() })
    }
}

/// `settle waldump`'s text for a `LogicalMessage` record, as `pg_waldump` prints it.
pub fn describe(rec: &DecodedRecord) -> String {
    match (rec.info, LogicalMessage::decode(&rec.main_data, rec.lsn)) {
        (XLOG_LOGICAL_MESSAGE, Ok(m)) => format!(
            "MESSAGE {}, prefix \"{}\"; payload ({} bytes)",
            if m.transactional { "transactional" } else { "non-transactional" },
            m.prefix,
            m.content.len()
        ),
        (XLOG_LOGICAL_MESSAGE, Err(e)) => format!("MESSAGE (malformed: {e})"),
        (i, _) => format!("LogicalMessage unknown info {i:#04x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects_garbage() {
        let m = LogicalMessage { transactional: true, prefix: "app".into(), content: b"\x00\xffhello".to_vec() };
        assert_eq!(LogicalMessage::decode(&m.encode(), Lsn(1)).unwrap(), m);
        let enc = m.encode();
        for cut in 0..enc.len() {
            assert!(LogicalMessage::decode(&enc[..cut], Lsn(1)).is_err(), "cut at {cut}");
        }
        let mut bad = enc.clone();
        bad[0] = 7;
        assert!(LogicalMessage::decode(&bad, Lsn(1)).is_err());
        assert!(LogicalMessage::check_prefix("a\0b").is_err());
    }
}
