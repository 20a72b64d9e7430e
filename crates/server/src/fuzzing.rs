//! Entry points for the fuzz targets of the bytes a client sends (`fuzz/`, `docs/fuzzing.md`),
//! also run on seeded inputs by `tests/front_end_noise.rs`. Each takes any bytes and must
//! return; a panic is the bug.
#![doc(hidden)]

use bytes::BytesMut;
use pgwire::messages::{DecodeContext, PgWireFrontendMessage, ProtocolVersion};

use crate::frames::FrameCheck;
use crate::parse::{parse_one, split_statements, PrepareCmd, Stmt};

/// The protocol message decoder: the first byte picks the connection's state (bit 0: the
/// startup phase, where an SSLRequest, GSSENCRequest, CancelRequest or StartupMessage may
/// come; else the messages of a running session, a password exchange included; bit 1:
/// protocol 3.0 rather than 3.2; bit 2: the server demands a password), the rest is what the
/// client sent. As the server does, the bytes go through [`crate::frames::FrameCheck`] first,
/// and only the messages before the first one it refuses are decoded. Messages are decoded in a
/// loop as the connection reads them, until the decoder wants more bytes or says the bytes
/// are wrong. Each message decoded encodes to bytes that decode to the same message, and the
/// CopyData a replication client sends is read as the WAL sender reads it (standby status
/// updates).
pub fn frontend_messages(data: &[u8]) {
    let Some((&control, rest)) = data.split_first() else { return };
    let mut ctx =
        DecodeContext::new(if control & 2 != 0 { ProtocolVersion::PROTOCOL3_0 } else { ProtocolVersion::PROTOCOL3_2 });
    let startup = control & 1 != 0;
    ctx.awaiting_frontend_ssl = startup;
    ctx.awaiting_frontend_startup = startup;
    // The server checks every byte before pgwire decodes it, and closes the connection at
    // the first malformed message: only what passes is decoded.
    let scram = control & 4 != 0;
    let mut check = if startup { FrameCheck::new(scram) } else { FrameCheck::after_startup(scram) };
    // The sound messages before a malformed one are decoded; the connection ends there.
    let sound = match check.feed(rest) {
        Ok(()) => rest.len(),
        Err((sound, _)) => sound,
    };
    let mut buf = BytesMut::from(&rest[..sound]);
    for _ in 0..10_000 {
        let msg = match PgWireFrontendMessage::decode(&mut buf, &ctx) {
            Ok(Some(m)) => m,
            Ok(None) | Err(_) => return,
        };
        // Encoded again, in the state it was read in, it decodes again.
        if !matches!(msg, PgWireFrontendMessage::SslNegotiation(_)) {
            let mut again = BytesMut::new();
            if msg.encode(&mut again).is_ok() {
                let back = PgWireFrontendMessage::decode(&mut again, &ctx);
                assert!(matches!(back, Ok(Some(_))), "a decoded message {msg:?} did not decode again");
            }
        }
        // The handshake moves on as the server's does: after the SSL question, a startup
        // (or a cancel request), then the session's messages.
        match &msg {
            PgWireFrontendMessage::SslNegotiation(_) => ctx.awaiting_frontend_ssl = false,
            PgWireFrontendMessage::Startup(_) | PgWireFrontendMessage::CancelRequest(_) => {
                ctx.awaiting_frontend_startup = false
            }
            PgWireFrontendMessage::CopyData(d) => {
                let _ = crate::walsender::standby_status(&d.data);
            }
            _ => {}
        }
        if buf.is_empty() {
            return;
        }
    }
}

/// The SQL front end before execution: the bytes as text (invalid UTF-8 replaced), split
/// into statements as a simple Query message's text is, each parsed (our parsers for VACUUM,
/// ANALYZE, CHECKPOINT, COPY and the replication commands, sqlparser for the rest), and a
/// statement sqlparser accepted printed back and parsed again, a PREPARE's statement too.
pub fn sql_front_end(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for stmt in split_statements(&text) {
        let _ = crate::walsender::command::parse(stmt);
        match parse_one(stmt) {
            Ok(Stmt::Sql(s)) => {
                let _ = parse_one(&s.to_string());
            }
            Ok(Stmt::Prepare(cmd)) => {
                if let PrepareCmd::Prepare { stmt: inner, .. } = *cmd {
                    if let Stmt::Sql(s) = *inner {
                        let _ = parse_one(&s.to_string());
                    }
                }
            }
            _ => {}
        }
    }
}
