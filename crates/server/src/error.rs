//! Errors as clients see them: a SQLSTATE, a message, and optionally a detail and a hint.
//!
//! Every failure of a statement becomes one [`SqlError`]; the engine's errors are mapped onto
//! PostgreSQL's SQLSTATEs (`From<settledb::Error>`) so that drivers' retry logic works
//! (40001 serialization failure, 40P01 deadlock, 23505 unique violation, ...).

use pgwire::error::{ErrorInfo, PgWireError};

use crate::types::{Datum, SqlType};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlError {
    pub code: &'static str,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl SqlError {
    pub fn new(code: &'static str, message: impl Into<String>) -> SqlError {
        SqlError { code, message: message.into(), detail: None, hint: None }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> SqlError {
        self.hint = Some(hint.into());
        self
    }

    /// 0A000: a statement or feature the server does not implement, named.
    pub fn unsupported(what: impl std::fmt::Display) -> SqlError {
        SqlError::new("0A000", format!("{what} is not supported by settledb"))
    }

    pub fn syntax(message: impl Into<String>) -> SqlError {
        SqlError::new("42601", message)
    }

    /// 42P10: a column list (`AS name (a, b)`) naming more columns than `what` (`table "x"`,
    /// `WITH query "x"`) has.
    pub fn too_many_column_names(what: &str, available: usize, specified: usize) -> SqlError {
        SqlError::new("42P10", format!("{what} has {available} columns available but {specified} columns specified"))
    }

    pub fn undefined_table(name: &str) -> SqlError {
        SqlError::new("42P01", format!("relation \"{name}\" does not exist"))
    }

    pub fn undefined_column(name: &str) -> SqlError {
        SqlError::new("42703", format!("column \"{name}\" does not exist"))
    }

    pub fn invalid_text(ty: SqlType, s: &str) -> SqlError {
        SqlError::new("22P02", format!("invalid input syntax for type {}: \"{s}\"", ty.display()))
    }

    pub fn out_of_range(tyname: &str) -> SqlError {
        SqlError::new("22003", format!("{tyname} out of range"))
    }

    pub fn numeric_overflow(precision: u8, scale: u8) -> SqlError {
        SqlError::new("22003", "numeric field overflow").with_detail(format!(
            "A field with precision {precision}, scale {scale} must round to an absolute value less than 10^{}.",
            precision - scale.min(precision)
        ))
    }

    pub fn bad_utf8() -> SqlError {
        SqlError::new("22021", "invalid byte sequence for encoding \"UTF8\"")
    }

    pub fn datatype_mismatch(column: &str, ty: SqlType, d: &Datum) -> SqlError {
        let what = match d {
            Datum::Bool(_) => "boolean",
            Datum::Int(_) => "bigint",
            Datum::Float(_) => "double precision",
            Datum::Num(_) => "numeric",
            Datum::Text(_) => "text",
            Datum::Bytea(_) => "bytea",
            Datum::Timestamp(_) => "timestamp without time zone",
            Datum::TimestampTz(_) => "timestamp with time zone",
            Datum::Interval(_) => "interval",
            Datum::Date(_) => "date",
            Datum::Null => "unknown",
        };
        let msg = if column.is_empty() {
            format!("cannot cast type {what} to {}", ty.display())
        } else {
            format!("column \"{column}\" is of type {} but expression is of type {what}", ty.display())
        };
        SqlError::new("42804", msg)
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> SqlError {
        self.detail = Some(detail.into());
        self
    }

    pub fn in_failed_transaction() -> SqlError {
        SqlError::new("25P02", "current transaction is aborted, commands ignored until end of transaction block")
    }

    /// The engine's `; DETAIL: …` and `; HINT: …` message parts moved to their own fields.
    pub fn split_detail(mut self) -> SqlError {
        if let Some((m, h)) = self.message.split_once("; HINT: ") {
            self.hint = Some(h.to_string());
            self.message = m.to_string();
        }
        if let Some((m, d)) = self.message.split_once("; DETAIL: ") {
            self.detail = Some(d.to_string());
            self.message = m.to_string();
        }
        self
    }

    pub fn to_error_info(&self) -> ErrorInfo {
        let mut e = ErrorInfo::new("ERROR".into(), self.code.into(), self.message.clone());
        e.detail = self.detail.clone();
        e.hint = self.hint.clone();
        e
    }

    pub fn into_pgwire(self) -> PgWireError {
        PgWireError::UserError(Box::new(self.to_error_info()))
    }
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for SqlError {}

impl From<settledb::Error> for SqlError {
    fn from(e: settledb::Error) -> SqlError {
        use settledb::Error as E;
        let msg = e.to_string();
        match e {
            E::UniqueViolation { index, key } => {
                SqlError::new("23505", format!("duplicate key value violates unique constraint \"{index}\""))
                    .with_detail(format!("Key ({key}) already exists."))
            }
            E::SerializationFailure => SqlError::new("40001", msg),
            E::Deadlock { .. } => SqlError::new("40P01", msg),
            E::LockNotAvailable(_) => SqlError::new("55P03", msg),
            E::NotFound(m) if m.starts_with("relation") || m.starts_with("table") => SqlError::new("42P01", m),
            E::NotFound(m) => SqlError::new("42704", m),
            E::AlreadyExists(m) => SqlError::new("42P07", m),
            E::InvalidInput(m) => SqlError::new("22023", m),
            E::Config(m) => SqlError::new("22023", m),
            E::WraparoundStop { .. } => {
                SqlError::new("54000", msg).with_hint("Execute a database-wide VACUUM in that database.")
            }
            E::TransactionAborted(_) => SqlError::in_failed_transaction(),
            E::TransactionClosed(_) => SqlError::new("25000", msg),
            // The session's own interrupt check stopped the engine: its error, as it made it.
            E::Interrupted(e) => match e.downcast::<SqlError>() {
                Ok(e) => *e,
                Err(e) => SqlError::new("57014", e.to_string()),
            },
            E::Poisoned(_) => SqlError::new("58000", msg),
            E::Io { .. } => SqlError::new("58030", msg),
            E::Corrupted { .. } | E::CorruptWal { .. } | E::CorruptFile { .. } => SqlError::new("XX001", msg),
            E::VersionMismatch { .. } => SqlError::new("XX000", msg),
        }
    }
}
