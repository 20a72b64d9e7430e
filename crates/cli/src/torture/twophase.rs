//! The torture child's prepared transactions (PostgreSQL's two-phase commit).
//!
//! One thread of the child, whatever the workload, alternates between preparing a transaction
//! and finishing one of those left prepared, by this child or by one killed before it (so a
//! good share of them stay prepared across a kill and are finished by a later process):
//!
//! ```text
//!   prepare:  B p K n  [B q Q 2]                  n = the rows that commit with it
//!             BEGIN; n0 rows (id K)
//!               SAVEPOINT a; row (id K or Q); SAVEPOINT b; row (id K or Q); RELEASE b
//!               ROLLBACK TO a (then A q Q) | RELEASE a
//!             PREPARE TRANSACTION 'torture-K'     then P p K
//!   finish:   F p K 1|0 G                         G: this child's generation
//!             COMMIT PREPARED 'torture-K'         then C p K
//!             ROLLBACK PREPARED 'torture-K'       then A p K
//! ```
//!
//! At most [`MAX_OPEN`] are prepared at once (`max_prepared_transactions` is
//! [`MAX_PREPARED`]). The step is marked `2pc begin`/`2pc end` around PREPARE and around the
//! finish, so the parent can aim kills inside them. `verify::twophase` holds the recovered
//! database to the log: an acknowledged PREPARE must be listed by `prepared_xacts` with its
//! rows invisible until an acknowledged COMMIT PREPARED makes them visible (ROLLBACK PREPARED:
//! absent for good); a finish in doubt is either still prepared or done the way it was asked.

use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use settledb::{Database, Error, Transaction, Value};

use super::acklog::Acks;
use super::schema::{GID_PREFIX, TWOPC};

/// Prepared transactions the child keeps open at most.
pub const MAX_OPEN: usize = 4;
/// The child's `max_prepared_transactions`.
pub const MAX_PREPARED: u32 = 8;

/// The prepared-transaction worker of one child.
pub struct TwoPhase<'a> {
    db: &'a Database,
    table: settledb::Table,
    rng: rand::rngs::StdRng,
    generation: u64,
    seq: u64,
}

/// The GID of the prepared transaction whose ack log key is `key`.
pub fn gid(key: &str) -> String {
    format!("{GID_PREFIX}{key}")
}

/// The torture run's prepared transactions now open, as ack log keys.
pub fn open_keys(db: &Database) -> Vec<String> {
    db.prepared_xacts().into_iter().filter_map(|p| p.gid.strip_prefix(GID_PREFIX).map(str::to_string)).collect()
}

impl<'a> TwoPhase<'a> {
    pub fn new(db: &'a Database, generation: u64, seed: u64) -> Result<TwoPhase<'a>> {
        Ok(TwoPhase {
            db,
            table: db.table(TWOPC)?,
            rng: rand::rngs::StdRng::seed_from_u64(seed ^ 0x0032_7063),
            generation,
            seq: 0,
        })
    }

    /// Prepares a new transaction or finishes an open one.
    pub fn step(&mut self, log: &dyn Acks, mark: &mut dyn FnMut(&str)) -> Result<()> {
        let open = open_keys(self.db);
        if open.len() < MAX_OPEN && (open.is_empty() || self.rng.gen_bool(0.5)) {
            self.prepare_one(log, mark)
        } else {
            let key = &open[self.rng.gen_range(0..open.len())];
            let commit = self.rng.gen_bool(0.6);
            self.finish(key, commit, log, mark)
        }
    }

    fn prepare_one(&mut self, log: &dyn Acks, mark: &mut dyn FnMut(&str)) -> Result<()> {
        self.seq += 1;
        let id = (self.generation << 32 | self.seq) as i64;
        let rolled_id = (self.generation << 32 | 1 << 31 | self.seq) as i64;
        let (key, rolled_key) = (id.to_string(), rolled_id.to_string());
        let top_rows = self.rng.gen_range(1..=3);
        let roll = self.rng.gen_bool(0.5);
        log.record("B", 'p', &key, &(top_rows + if roll { 0 } else { 2 }).to_string())?;
        if roll {
            log.record("B", 'q', &rolled_key, "2")?;
        }
        mark("2pc begin");
        let body = || -> Result<Transaction<'a>> {
            let mut tx = self.db.begin()?;
            for part in 0..top_rows {
                self.insert(&mut tx, id, part)?;
            }
            let sub_id = if roll { rolled_id } else { id };
            tx.savepoint("a")?;
            self.insert(&mut tx, sub_id, top_rows)?;
            tx.savepoint("b")?;
            self.insert(&mut tx, sub_id, top_rows + 1)?;
            tx.release("b")?;
            if roll {
                tx.rollback_to("a")?;
                log.record("A", 'q', &rolled_key, "")?;
            } else {
                tx.release("a")?;
            }
            Ok(tx)
        };
        match body() {
            Ok(mut tx) => {
                tx.prepare(&gid(&key)).context("PREPARE TRANSACTION")?;
                log.record("P", 'p', &key, "")?;
            }
            Err(e) if e.downcast_ref::<Error>().is_some_and(super::child::retryable) => {
                log.record("A", 'p', &key, "")?;
                if roll {
                    log.record("A", 'q', &rolled_key, "")?;
                }
            }
            Err(e) => return Err(e.context("a transaction to prepare")),
        }
        mark("2pc end");
        Ok(())
    }

    fn insert(&self, tx: &mut Transaction<'_>, id: i64, part: i32) -> settledb::Result<()> {
        let note = format!("generation {} part {part}", self.generation);
        tx.insert(&self.table, &[Value::Int8(id), Value::Int4(part), Value::Text(note)])?;
        Ok(())
    }

    /// COMMIT PREPARED (`commit`) or ROLLBACK PREPARED the transaction of `key`.
    fn finish(&mut self, key: &str, commit: bool, log: &dyn Acks, mark: &mut dyn FnMut(&str)) -> Result<()> {
        log.record("F", 'p', key, &format!("{} {}", u8::from(commit), self.generation))?;
        mark("2pc begin");
        if commit {
            self.db.commit_prepared(&gid(key)).context("COMMIT PREPARED")?;
            log.record("C", 'p', key, "")?;
        } else {
            self.db.rollback_prepared(&gid(key)).context("ROLLBACK PREPARED")?;
            log.record("A", 'p', key, "")?;
        }
        mark("2pc end");
        Ok(())
    }
}
