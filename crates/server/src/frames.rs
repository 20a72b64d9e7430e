//! The client's bytes checked against the protocol's grammar before pgwire decodes them.
//!
//! pgwire 0.42 decodes a message's fields from the connection's whole read buffer without
//! bounding them by the message's length, and some of its decoders index past the end of a
//! short message (a Bind whose counts promise more than it holds panics in `get_u16`). A
//! client's bytes must never panic the server, so every message is checked here first, as it
//! arrives, the way PostgreSQL's backend reads it (`pq_getmsg*`, "invalid message format"):
//!
//! - the startup packet (no type byte): a CancelRequest (16 bytes), an SSLRequest or a
//!   GSSENCRequest (8 bytes), or a StartupMessage (protocol 3.x, then NUL-terminated name and
//!   value pairs ending with a NUL, at most 10,000 bytes, PostgreSQL's limit);
//! - then typed messages: `Q` (a string), `P` (name, query, a count and as many type OIDs),
//!   `B` (portal, statement, format codes, parameters of a length each or -1, result format
//!   codes), `E` (portal, row limit), `D` and `C` (`S` or `P`, a name), `f` (a string),
//!   `S`, `H`, `X`, `c` (empty), `d` (anything), and `p`: the first one of a connection that
//!   authenticates by SCRAM is a SASLInitialResponse (mechanism, then a length, -1 or the
//!   bytes that follow), later ones anything (SASLResponse); with no password, a string.
//!
//! A message that breaks its grammar, leaves bytes over, or has a length below 4 ends the
//! connection with an error naming what was wrong ([`FrameCheck::feed`]); the bytes before it
//! were already handled. Unknown type bytes are left to pgwire, which refuses them.

/// PostgreSQL's limit on the startup packet (`MAX_STARTUP_PACKET_LENGTH`).
const MAX_STARTUP: usize = 10_000;
/// PostgreSQL's limit on any other message body it buffers (`PQ_LARGE_MESSAGE_LIMIT`, 1 GB).
const MAX_MESSAGE: usize = (1 << 30) - 1;

/// The connection's reader state: where the current message is, and its bytes so far.
pub struct FrameCheck {
    /// Past the startup packet: messages have a type byte.
    typed: bool,
    /// The connection authenticates by SCRAM, and its SASLInitialResponse has not come yet.
    sasl_initial: bool,
    header: [u8; 5],
    header_len: usize,
    kind: u8,
    /// Body bytes still to come, and whether they are kept to be checked.
    need: usize,
    keep: bool,
    body: Vec<u8>,
}

impl FrameCheck {
    /// A connection's checker, from its first byte; `scram` when the server demands a
    /// password (the first `p` message is then a SASLInitialResponse).
    pub fn new(scram: bool) -> FrameCheck {
        FrameCheck {
            typed: false,
            sasl_initial: scram,
            header: [0; 5],
            header_len: 0,
            kind: 0,
            need: 0,
            keep: false,
            body: Vec::new(),
        }
    }

    /// A checker for a connection past its startup packet (the fuzz target starts there).
    pub fn after_startup(scram: bool) -> FrameCheck {
        FrameCheck { typed: true, ..FrameCheck::new(scram) }
    }

    /// Takes the next bytes the client sent. An error says which message is malformed and
    /// how many of these bytes come before it (the messages before it are whole and sound).
    pub fn feed(&mut self, data: &[u8]) -> Result<(), (usize, String)> {
        // Where in `data` the message being read began (0 when it began in an earlier piece).
        let mut start = 0;
        let mut rest = data;
        self.feed_from(&mut rest, &mut start, data.len()).map_err(|e| (start, e))
    }

    fn feed_from(&mut self, data: &mut &[u8], start: &mut usize, total: usize) -> Result<(), String> {
        while !data.is_empty() {
            let header = if self.typed { 5 } else { 4 };
            if self.header_len == 0 && self.need == 0 {
                *start = total - data.len();
            }
            if self.header_len < header {
                let take = (header - self.header_len).min(data.len());
                self.header[self.header_len..self.header_len + take].copy_from_slice(&data[..take]);
                self.header_len += take;
                *data = &data[take..];
                if self.header_len < header {
                    return Ok(());
                }
                let len = i32::from_be_bytes(self.header[header - 4..header].try_into().expect("4 bytes"));
                self.kind = if self.typed { self.header[0] } else { 0 };
                let what = self.what();
                let len = usize::try_from(len)
                    .ok()
                    .filter(|l| *l >= 4)
                    .ok_or_else(|| format!("invalid length {len} of {what}"))?;
                let max = if self.typed { MAX_MESSAGE } else { MAX_STARTUP };
                if len - 4 > max {
                    return Err(format!("{what} of {len} bytes is too long"));
                }
                self.need = len - 4;
                self.keep = !(self.typed && self.kind == b'd');
                self.body.clear();
                if self.need == 0 {
                    self.finish()?;
                }
                continue;
            }
            let take = self.need.min(data.len());
            if self.keep {
                self.body.extend_from_slice(&data[..take]);
            }
            self.need -= take;
            *data = &data[take..];
            if self.need == 0 {
                self.finish()?;
            }
        }
        Ok(())
    }

    fn what(&self) -> String {
        if self.typed {
            format!("message type 0x{:02x}", self.kind)
        } else {
            "the startup packet".into()
        }
    }

    /// A whole message has arrived: check it.
    fn finish(&mut self) -> Result<(), String> {
        self.header_len = 0;
        let body = std::mem::take(&mut self.body);
        let r = if self.typed { self.typed_message(&body) } else { self.startup(&body) };
        self.body = body;
        r.map_err(|e| format!("invalid {}: {e}", self.what()))
    }

    fn startup(&mut self, b: &[u8]) -> Result<(), &'static str> {
        let mut r = Reader(b);
        let code = r.i32()?;
        match code {
            // CancelRequest: process ID and key.
            80_877_102 => {
                r.i32()?;
                r.i32()?;
            }
            // SSLRequest, GSSENCRequest: nothing more.
            80_877_103 | 80_877_104 => {}
            _ if code >> 16 == 3 => {
                // Name and value pairs, then a NUL.
                loop {
                    if r.cstring()?.is_empty() {
                        break;
                    }
                    r.cstring()?;
                }
                self.typed = true;
            }
            _ => return Err("unsupported frontend protocol"),
        }
        r.end()
    }

    fn typed_message(&mut self, b: &[u8]) -> Result<(), &'static str> {
        let mut r = Reader(b);
        match self.kind {
            b'Q' | b'f' => {
                r.cstring()?;
            }
            b'P' => {
                r.cstring()?;
                r.cstring()?;
                let n = r.count()?;
                for _ in 0..n {
                    r.i32()?;
                }
            }
            b'B' => {
                r.cstring()?;
                r.cstring()?;
                for _ in 0..r.count()? {
                    r.i16()?;
                }
                for _ in 0..r.count()? {
                    let len = r.i32()?;
                    if len >= 0 {
                        r.take(len as usize)?;
                    } else if len != -1 {
                        return Err("a parameter length below -1");
                    }
                }
                for _ in 0..r.count()? {
                    r.i16()?;
                }
            }
            b'E' => {
                r.cstring()?;
                r.i32()?;
            }
            b'D' | b'C' => {
                if !matches!(r.take(1)?, [b'S' | b'P']) {
                    return Err("neither a statement (S) nor a portal (P)");
                }
                r.cstring()?;
            }
            b'S' | b'H' | b'X' | b'c' => {}
            b'p' if self.sasl_initial => {
                self.sasl_initial = false;
                r.cstring()?;
                let len = r.i32()?;
                if len >= 0 {
                    r.take(len as usize)?;
                } else if len != -1 {
                    return Err("a SASL response length below -1");
                }
            }
            // A SASLResponse (anything), or anything pgwire decodes without reading fields.
            _ => return Ok(()),
        }
        r.end()
    }
}

/// A cursor over one message's body: every read checks the bytes are there.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.0.len() {
            return Err("shorter than its fields");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16, &'static str> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }

    fn i32(&mut self) -> Result<i32, &'static str> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    /// A count (int16, not negative).
    fn count(&mut self) -> Result<usize, &'static str> {
        usize::try_from(self.i16()?).map_err(|_| "a negative count")
    }

    fn cstring(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.0.iter().position(|&c| c == 0).ok_or("a string without its NUL")?;
        let s = &self.0[..n];
        self.0 = &self.0[n + 1..];
        Ok(s)
    }

    fn end(&self) -> Result<(), &'static str> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err("bytes left over after its fields")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn startup() -> Vec<u8> {
        let body = b"\x00\x03\x00\x00user\x00postgres\x00\x00";
        let mut m = (body.len() as u32 + 4).to_be_bytes().to_vec();
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn well_formed_messages_pass_in_any_pieces() {
        let stream = [
            startup(),
            framed(b'P', b"s\0select $1\0\x00\x01\x00\x00\x00\x17"),
            framed(b'B', b"\0s\0\x00\x01\x00\x01\x00\x02\x00\x00\x00\x04\x00\x00\x00\x07\xff\xff\xff\xff\x00\x00"),
            framed(b'E', b"\0\x00\x00\x00\x00"),
            framed(b'S', b""),
            framed(b'd', b"anything at all"),
            framed(b'Q', b"select 1\0"),
        ]
        .concat();
        for piece in [1, 3, 7, stream.len()] {
            let mut c = FrameCheck::new(false);
            for chunk in stream.chunks(piece) {
                c.feed(chunk).unwrap();
            }
        }
    }

    #[test]
    fn malformed_messages_are_refused_with_what_was_wrong() {
        let bad = |m: Vec<u8>| {
            let mut c = FrameCheck::new(true);
            c.feed(&startup()).unwrap();
            let (at, e) = c.feed(&m).unwrap_err();
            assert_eq!(at, 0);
            e
        };
        // A Bind promising a parameter it does not hold (pgwire 0.42 panics on this).
        assert_eq!(bad(framed(b'B', b"\0s\0\x00\x00\x00\x01")), "invalid message type 0x42: shorter than its fields");
        assert_eq!(bad(framed(b'Q', b"no terminator")), "invalid message type 0x51: a string without its NUL");
        assert_eq!(
            bad(framed(b'E', b"\0\x00\x00\x00\x00extra")),
            "invalid message type 0x45: bytes left over after its fields"
        );
        assert_eq!(bad(framed(b'D', b"X\0")), "invalid message type 0x44: neither a statement (S) nor a portal (P)");
        assert_eq!(
            bad(framed(b'p', b"SCRAM-SHA-256\0\x00\x00\x01\x00ab")),
            "invalid message type 0x70: shorter than its fields"
        );
        assert_eq!(bad(vec![b'Q', 0, 0, 0, 2]), "invalid length 2 of message type 0x51");
        let mut c = FrameCheck::new(false);
        assert!(c.feed(&[0, 0, 0, 8, 0, 9, 0, 0]).unwrap_err().1.contains("unsupported frontend protocol"));
        let mut c = FrameCheck::new(false);
        assert!(c.feed(&[0, 1, 0, 0]).unwrap_err().1.contains("too long"));
        // The bytes before a bad message are counted, so that its sound predecessors are used.
        let mut c = FrameCheck::new(false);
        let s = startup();
        let q = framed(b'Q', b"select 1\0");
        let stream = [s.clone(), q.clone(), framed(b'E', b"")].concat();
        assert_eq!(c.feed(&stream).unwrap_err().0, s.len() + q.len());
    }
}
