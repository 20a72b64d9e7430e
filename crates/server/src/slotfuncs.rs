//! Replication slot functions (PostgreSQL's `slotfuncs.c`) over the engine's slots:
//! `pg_create_logical_replication_slot(name, plugin [, temporary [, two_phase]])`,
//! `pg_drop_replication_slot(name)`, `pg_replication_slot_advance(name, lsn)` and
//! `pg_stat_reset_replication_slot(name)` (NULL: every slot). The record
//! results PostgreSQL returns (`slot_name, lsn` / `slot_name, end_lsn`) come back as one
//! text column in PostgreSQL's composite text form, `(name,X/Y)`, which is what
//! `SELECT pg_create_logical_replication_slot(...)` prints; `pg_drop_replication_slot`
//! returns `void` (an empty text). Errors keep PostgreSQL's SQLSTATEs, with the hint and
//! detail split out of the engine's message.
//!
//! A temporary slot (`temporary => true`) belongs to the calling session
//! ([`crate::walsender::Senders`] records it): it is active for that session only, and is
//! dropped when the session ends or hits an error. A slot another session holds (streams, or
//! owns as temporary) is refused to drop and advance with 55006.

use settledb::{Database, Lsn, SlotInfo, SlotOptions};

use crate::error::SqlError;
use crate::types::Datum;
use crate::walsender::Senders;

/// Who calls a slot function: the database, who holds which slot, and the calling session's
/// process ID.
pub struct Caller<'a> {
    pub db: &'a Database,
    pub senders: &'a Senders,
    pub pid: i32,
}

impl<'a> Caller<'a> {
    /// Session `pid` of the server `sh` as a caller.
    pub fn new(sh: &'a crate::Shared, pid: i32) -> Caller<'a> {
        Caller { db: &sh.db, senders: &sh.senders, pid }
    }

    /// Creates a logical slot; a temporary one is recorded as this session's.
    pub fn create_slot(&self, slot: &str, plugin: &str, options: SlotOptions) -> Result<SlotInfo, SqlError> {
        if !options.temporary {
            return self.db.create_logical_replication_slot_with(slot, plugin, options).map_err(slot_error);
        }
        self.temporary(slot, || self.db.create_logical_replication_slot_with(slot, plugin, options))
    }

    /// Runs `create` (which makes temporary slot `slot`) with the slot recorded as this
    /// session's: the record comes first, so no other session can take the slot meanwhile,
    /// and goes if the creation fails.
    pub fn temporary<T>(&self, slot: &str, create: impl FnOnce() -> settledb::Result<T>) -> Result<T, SqlError> {
        if !self.senders.claim_temporary(slot, self.pid) {
            return Err(SqlError::new("42710", format!("replication slot \"{slot}\" already exists")));
        }
        let made = create();
        if made.is_err() {
            self.senders.release_temporary(slot);
        }
        made.map_err(slot_error)
    }

    /// Drops a slot no other session holds.
    pub fn drop_slot(&self, slot: &str) -> Result<(), SqlError> {
        self.senders.check_free(slot, self.pid)?;
        self.db.drop_replication_slot(slot).map_err(slot_error)?;
        self.senders.release_temporary(slot);
        Ok(())
    }

    /// Drops the temporary slots this session owns (it ends, or hit an error).
    pub fn drop_temporary_slots(&self) {
        for slot in self.senders.temporary_of(self.pid) {
            let _ = self.db.drop_replication_slot(&slot);
            self.senders.release_temporary(&slot);
        }
    }
}

/// Calls `name` when it is a slot function; `None` otherwise.
pub fn call(c: &Caller<'_>, name: &str, args: &[Datum]) -> Option<Result<Datum, SqlError>> {
    let db = c.db;
    let text = |i: usize| args.get(i).and_then(Datum::to_text);
    let r = match name {
        "pg_create_logical_replication_slot" => (|| {
            let (Some(slot), Some(plugin)) = (text(0), text(1)) else {
                return Err(SqlError::new("22004", "slot name and plugin must not be null"));
            };
            let temporary = matches!(args.get(2), Some(Datum::Bool(true)));
            let two_phase = matches!(args.get(3), Some(Datum::Bool(true)));
            let info = c.create_slot(&slot, &plugin, SlotOptions { two_phase, temporary })?;
            let lsn = info.confirmed_flush_lsn.unwrap_or(Lsn::INVALID);
            Ok(Datum::Text(format!("({},{lsn})", info.slot_name)))
        })(),
        "pg_drop_replication_slot" => match text(0) {
            Some(slot) => c.drop_slot(&slot).map(|()| Datum::Text(String::new())),
            None => Err(SqlError::new("22004", "slot name must not be null")),
        },
        "pg_replication_slot_advance" => (|| {
            let (Some(slot), Some(to)) = (text(0), text(1)) else {
                return Err(SqlError::new("22004", "slot name and LSN must not be null"));
            };
            let upto = parse_lsn(&to)
                .ok_or_else(|| SqlError::new("22P02", format!("invalid input syntax for type pg_lsn: \"{to}\"")))?;
            c.senders.check_free(&slot, c.pid)?;
            let end = db.replication_slot_advance(&slot, upto).map_err(slot_error)?;
            Ok(Datum::Text(format!("({slot},{end})")))
        })(),
        "pg_stat_reset_replication_slot" => {
            db.reset_replication_slot_stats(text(0).as_deref()).map(|()| Datum::Text(String::new())).map_err(slot_error)
        }
        _ => return None,
    };
    Some(r)
}

/// The fields of the record a slot function returns (PostgreSQL's `OUT` parameters), for the
/// function called in FROM ([`crate::fromcall`]); `None` for the others.
pub fn record_fields(name: &str) -> Option<&'static [&'static str]> {
    match name {
        "pg_create_logical_replication_slot" => Some(&["slot_name", "lsn"]),
        "pg_replication_slot_advance" => Some(&["slot_name", "end_lsn"]),
        _ => None,
    }
}

/// The `n` fields of a record [`call`] returned in composite text form, `(name,X/Y)`: a slot
/// name has no comma, quote or parenthesis (`[a-z0-9_]`), nor has an LSN, so the text splits at
/// its commas.
pub fn split_record(text: &str, n: usize) -> Vec<Datum> {
    let inner = text.strip_prefix('(').and_then(|t| t.strip_suffix(')')).unwrap_or(text);
    let mut fields: Vec<Datum> = inner.splitn(n, ',').map(|f| Datum::Text(f.to_string())).collect();
    fields.resize(n, Datum::Null);
    fields
}

/// `X/Y` (hexadecimal halves) as PostgreSQL's `pg_lsn` input reads it.
pub fn parse_lsn(s: &str) -> Option<Lsn> {
    let (hi, lo) = s.trim().split_once('/')?;
    let (hi, lo) = (u32::from_str_radix(hi, 16).ok()?, u32::from_str_radix(lo, 16).ok()?);
    Some(Lsn((u64::from(hi) << 32) | u64::from(lo)))
}

/// The engine's slot error with PostgreSQL's SQLSTATE, its `HINT:` and `DETAIL:` parts split
/// out.
pub(crate) fn slot_error(e: settledb::Error) -> SqlError {
    use settledb::Error as E;
    let code = match &e {
        E::AlreadyExists(_) => "42710",
        E::NotFound(_) => "42704",
        E::InvalidInput(m) if m.starts_with("replication slot name") => "42602",
        E::InvalidInput(m) if m.starts_with("all replication slots are in use") => "53400",
        E::InvalidInput(m) if m.starts_with("logical decoding requires") || m.contains("cannot be advanced") => "55000",
        E::InvalidInput(_) => "22023",
        _ => return SqlError::from(e),
    };
    let msg = e.to_string();
    let (msg, hint) = match msg.split_once("; HINT: ") {
        Some((m, h)) => (m.to_string(), Some(h.to_string())),
        None => (msg, None),
    };
    let (msg, detail) = match msg.split_once("; DETAIL: ") {
        Some((m, d)) => (m.to_string(), Some(d.to_string())),
        None => (msg, None),
    };
    let mut err = SqlError::new(code, msg);
    if let Some(h) = hint {
        err = err.with_hint(h);
    }
    if let Some(d) = detail {
        err = err.with_detail(d);
    }
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_input() {
        assert_eq!(parse_lsn("0/16B3748"), Some(Lsn(0x16B_3748)));
        assert_eq!(parse_lsn("1/0"), Some(Lsn(1 << 32)));
        assert_eq!(parse_lsn("16B3748"), None);
        assert_eq!(parse_lsn("G/0"), None);
    }

    #[test]
    fn errors_keep_postgresql_codes_and_hints() {
        let e = slot_error(settledb::Error::invalid(
            "all replication slots are in use; HINT: Free one or increase max_replication_slots.",
        ));
        assert_eq!(e.code, "53400");
        assert_eq!(e.message, "all replication slots are in use");
        assert_eq!(e.hint.as_deref(), Some("Free one or increase max_replication_slots."));
        let e = slot_error(settledb::Error::AlreadyExists("replication slot \"s\" already exists".into()));
        assert_eq!(e.code, "42710");
    }
}
