//! The acknowledgement log: what the workload attempted and what the engine acknowledged.
//!
//! One text line per event, appended to `DIR/acklog` (outside the data directory) with one
//! `write(2)` on a file opened `O_APPEND`:
//!
//! ```text
//! B h 4294967297 17 3 1 -2210     begun: history transaction 4294967297 (aid tid bid delta)
//! C h 4294967297                  commit() returned Ok
//! A h 4294967298                  rolled back before commit (definitely absent)
//! R1 h 4294967299                 in doubt at a kill, found present by the verifier
//! R0 o 1.3.1021.8123456789        in doubt at a kill, found absent by the verifier
//! B p 4294967301 3                begun: a transaction to be prepared (payload: its row count)
//! P p 4294967301                  prepare() returned Ok: it must be listed, its rows invisible
//! F p 4294967301 1 2              generation 2 is finishing it: 1 COMMIT PREPARED, 0 ROLLBACK
//! C p 4294967301                  commit_prepared() returned Ok (A: rollback_prepared did)
//! RP p 4294967301                 in doubt (B or F) at a kill, found still prepared
//! L l slot 23154688               the replication slot's confirmed position after a decode
//! ```
//!
//! Kinds: `h` a pgbench transaction (key: its history id), `s` one pgbench transaction's worth
//! of writes done inside a savepoint transaction (key: its history id; `A` as soon as `ROLLBACK
//! TO` a savepoint holding it returned, `C` for every write not rolled back once the whole
//! transaction's `commit` returned), `o` a TPC-C New-Order (key: `w.d.c.entry_d`, payload: its
//! line count), `x` a bulk-insert burst (key: the burst id, payload: its row count), `y` the
//! deletion of a burst (key: the burst's id), `p` a prepared transaction (key: the id of its
//! rows in the two-phase table, its GID `torture-<key>`, payload: the rows it commits), `q` the
//! rows a prepared transaction wrote inside a savepoint it rolled back to before PREPARE (key:
//! their id; they must never be visible).
//!
//! The log is not fsynced: SIGKILL ends the process, not the kernel, so every completed
//! `write` is in the page cache and the parent reads it back. A `B` line is written before the
//! transaction's first change and a `C` line only after `commit` returned, so a key whose last
//! line is `B` was in flight when the child died: either outcome is allowed, once. The parent
//! writes `R1`/`R0` after verifying, so later verifications hold the transaction to the outcome
//! recovery chose (it must never flip). A last line without its newline (a write cut short) is
//! not read; it is read whole on the next pass if it is ever completed.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use anyhow::{bail, Context, Result};

/// What one key is known to have done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Begun, never acknowledged nor rolled back: may be present or absent.
    InDoubt,
    /// Acknowledged (or resolved present): must be present.
    Committed,
    /// Rolled back (or resolved absent): must be absent.
    Aborted,
    /// Prepared (`P`, or `RP`): listed by `prepared_xacts`, its writes invisible.
    Prepared,
    /// A COMMIT PREPARED (`commit`) or ROLLBACK PREPARED began (`F`) and was not acknowledged:
    /// either still prepared, or finished the way it was asked to.
    Finishing { commit: bool },
}

/// The last word on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub state: State,
    /// What the `B` line said the transaction writes (compared with the row found).
    pub payload: String,
    /// Whether a `C` line was seen (an acknowledged commit, not merely resolved present).
    pub acknowledged: bool,
    /// A prepared transaction finished (`F`) by a later child than the one that prepared it:
    /// it stayed prepared across at least one kill.
    pub crossed_kill: bool,
}

/// Every key's state, read incrementally from the log.
#[derive(Default)]
pub struct Ledger {
    entries: HashMap<(char, String), Entry>,
    /// The largest confirmed position of the replication slot logged (`L`), as a u64 LSN.
    pub slot_confirmed: u64,
    /// Bytes of the log read so far (always at a line boundary).
    offset: u64,
}

impl Ledger {
    pub fn get(&self, kind: char, key: &str) -> Option<&Entry> {
        self.entries.get(&(kind, key.to_string()))
    }

    /// Every entry of one kind.
    pub fn of_kind(&self, kind: char) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().filter(move |((k, _), _)| *k == kind).map(|((_, key), e)| (key.as_str(), e))
    }

    /// Applies one line; an unknown or malformed line is an error (the log is ours).
    pub fn apply(&mut self, line: &str) -> Result<()> {
        let mut parts = line.splitn(4, ' ');
        let (Some(op), Some(kind), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            bail!("malformed ack log line {line:?}");
        };
        let kind = kind.chars().next().context("empty kind")?;
        let payload = parts.next().unwrap_or("").to_string();
        let slot = (kind, key.to_string());
        match op {
            "L" => {
                let lsn: u64 = payload.parse().with_context(|| format!("malformed slot line {line:?}"))?;
                self.slot_confirmed = self.slot_confirmed.max(lsn);
            }
            "B" => {
                let e = self.entries.entry(slot).or_insert(Entry {
                    state: State::InDoubt,
                    payload: payload.clone(),
                    acknowledged: false,
                    crossed_kill: false,
                });
                // A retry of the same input begins again; an acknowledged key stays so.
                if e.state != State::Committed {
                    e.state = State::InDoubt;
                    e.payload = payload;
                }
            }
            "C" | "A" | "R1" | "R0" | "P" | "RP" | "F" => {
                let Some(e) = self.entries.get_mut(&slot) else {
                    bail!("ack log line {line:?} ends a transaction that never began");
                };
                match op {
                    "C" => {
                        e.state = State::Committed;
                        e.acknowledged = true;
                    }
                    "A" | "R0" => e.state = State::Aborted,
                    "P" | "RP" => e.state = State::Prepared,
                    "F" => {
                        let mut words = payload.split(' ');
                        let commit = words.next() == Some("1");
                        let by: Option<u64> = words.next().and_then(|g| g.parse().ok());
                        let of = slot.1.parse::<u64>().ok().map(|k| k >> 32);
                        if by.is_none() || of.is_none() {
                            bail!("malformed finish line {line:?}");
                        }
                        e.state = State::Finishing { commit };
                        e.crossed_kill |= by != of;
                    }
                    _ => e.state = State::Committed,
                }
            }
            _ => bail!("unknown ack log operation in {line:?}"),
        }
        Ok(())
    }

    /// Reads the lines appended since the last call.
    pub fn catch_up(&mut self, path: &Path) -> Result<()> {
        let mut f = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
        };
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        let whole = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let text = std::str::from_utf8(&buf[..whole]).context("ack log is not UTF-8")?;
        for line in text.lines() {
            self.apply(line)?;
        }
        self.offset += whole as u64;
        Ok(())
    }
}

/// Where a workload records what it attempted and what the engine acknowledged: the file
/// ([`AckLog`], read back by the parent after a SIGKILL) or memory (the power-loss run, which
/// keeps the log outside the machine whose power it cuts).
pub trait Acks: Sync {
    /// Records `op kind key [payload]` (see the module doc).
    fn record(&self, op: &str, kind: char, key: &str, payload: &str) -> Result<()>;
}

/// One log line, as the file holds it.
pub fn line(op: &str, kind: char, key: &str, payload: &str) -> String {
    if payload.is_empty() {
        format!("{op} {kind} {key}\n")
    } else {
        format!("{op} {kind} {key} {payload}\n")
    }
}

/// The appending side, shared by the child's threads (one `write` per line).
pub struct AckLog {
    file: File,
}

impl AckLog {
    pub fn open(path: &Path) -> Result<AckLog> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok(AckLog { file })
    }

    /// Appends `op kind key [payload]` as one line, in one write.
    pub fn record(&self, op: &str, kind: char, key: &str, payload: &str) -> Result<()> {
        (&self.file).write_all(line(op, kind, key, payload).as_bytes()).context("appending to the ack log")
    }
}

impl Acks for AckLog {
    fn record(&self, op: &str, kind: char, key: &str, payload: &str) -> Result<()> {
        AckLog::record(self, op, kind, key, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_follow_the_last_word_and_acknowledgement_sticks() {
        let mut l = Ledger::default();
        for line in ["B h 1 1 1 1 5", "C h 1", "B h 2 1 1 1 5", "A h 2", "B h 3 x", "B o k 4", "R0 o k"] {
            l.apply(line).unwrap();
        }
        assert_eq!(l.get('h', "1").unwrap().state, State::Committed);
        assert!(l.get('h', "1").unwrap().acknowledged);
        assert_eq!(l.get('h', "1").unwrap().payload, "1 1 1 5");
        assert_eq!(l.get('h', "2").unwrap().state, State::Aborted);
        assert_eq!(l.get('h', "3").unwrap().state, State::InDoubt);
        assert_eq!(l.get('o', "k").unwrap().state, State::Aborted);
        assert!(l.apply("C h 99").is_err(), "a commit of a transaction never begun is an error");
        let key = (3u64 << 32 | 1).to_string();
        for line in [format!("B p {key} 2"), format!("P p {key}"), format!("F p {key} 1 3")] {
            l.apply(&line).unwrap();
        }
        let e = l.get('p', &key).unwrap();
        assert_eq!((e.state, e.crossed_kill), (State::Finishing { commit: true }, false), "finished by its own child");
        l.apply(&format!("RP p {key}")).unwrap();
        assert_eq!(l.get('p', &key).unwrap().state, State::Prepared);
        l.apply(&format!("F p {key} 0 4")).unwrap();
        let e = l.get('p', &key).unwrap();
        assert_eq!((e.state, e.crossed_kill), (State::Finishing { commit: false }, true), "finished after a kill");
        assert!(l.apply(&format!("F p {key} 1")).is_err(), "a finish names its generation");
        assert!(l.apply("Z h 1").is_err());
    }

    #[test]
    fn catch_up_reads_only_whole_lines_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acklog");
        let log = AckLog::open(&path).unwrap();
        log.record("B", 'h', "7", "1 2 3 4").unwrap();
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"C h 7").unwrap();
        let mut l = Ledger::default();
        l.catch_up(&path).unwrap();
        assert_eq!(l.get('h', "7").unwrap().state, State::InDoubt, "the cut line is not read");
        std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"\n").unwrap();
        l.catch_up(&path).unwrap();
        assert_eq!(l.get('h', "7").unwrap().state, State::Committed);
    }
}
