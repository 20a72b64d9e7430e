//! Row locks: `SELECT ... FOR UPDATE | FOR NO KEY UPDATE | FOR SHARE | FOR KEY SHARE`
//! (PostgreSQL's `heap_lock_tuple`, `XLOG_HEAP_LOCK`).
//!
//! A row lock lives in the locked tuple itself, as PostgreSQL's does: `xmax` := the locker's
//! XID (the innermost subtransaction's, so ROLLBACK TO releases it), with `HEAP_XMAX_LOCK_ONLY`
//! and the strength bits set, and `t_ctid` pointing at the tuple itself. Nothing else records
//! it: a lock is "held" exactly while its XID runs, and a transaction that meets it waits for
//! that XID to end, through the same `transactionid` wait a writer uses for a running updater
//! (so lock waits are edges of the deadlock detector's graph, bounded by `lock_timeout` and the
//! session's interrupt).
//!
//! ```text
//!   before:  (0,3) xmin 100 (committed)  xmax 0    infomask XMAX_INVALID
//!   T 205 locks it FOR UPDATE:
//!   after:   (0,3) xmin 100              xmax 205  infomask XMAX_EXCL_LOCK|XMAX_LOCK_ONLY
//!                                                  infomask2 KEYS_UPDATED  ctid (0,3)
//! ```
//!
//! # Modes and sharing
//!
//! The four strengths are stamped as PostgreSQL stamps them (KEY SHARE: `XMAX_KEYSHR_LOCK`;
//! SHARE: both `KEYSHR` and `EXCL` bits; NO KEY UPDATE: `EXCL`; UPDATE: `EXCL` plus
//! `HEAP_KEYS_UPDATED`), but settledb has no MultiXacts, so one tuple names one locker and
//! **every row lock is exclusive**: a second transaction that wants any lock on a row another
//! running transaction has locked (or is updating or deleting) waits for it, fails (NOWAIT)
//! or skips the row (SKIP LOCKED), whatever the two strengths. Likewise an UPDATE or DELETE of
//! a row locked by another running transaction waits for the locker, even after FOR KEY SHARE
//! (PostgreSQL lets a non-key update through). This blocks more than PostgreSQL, never less.
//! A transaction that locks a row it already holds (locked by any of its current XIDs, whose
//! lifetime covers the present subtransaction's) changes nothing, even for a stronger mode.
//!
//! # Who reads a lock-only xmax
//!
//! * MVCC visibility, unique checks, HOT chain walks, pruning and `satisfies_vacuum` treat it
//!   as no xmax at all: the row is live (see [`super::visibility`]).
//! * [`super::visibility::satisfies_update`]: a running locker other than the writer makes
//!   an updater or deleter wait; an ended one (committed, aborted, crashed) is ignored, and the
//!   writer's own xmax replaces it.
//! * VACUUM's freezing clears a finished locker's xmax, and counts a running locker's XID
//!   toward the oldest XID left on the page (`vacuum::freeze`); hint bits are never set on it.
//!
//! # Following updates (READ COMMITTED)
//!
//! When the version to lock was updated by a transaction that committed (perhaps after this
//! one waited for it), READ COMMITTED follows `t_ctid` to the newest version and locks that
//! one, returning its values so the caller re-checks its WHERE clause there (PostgreSQL's
//! `TUPLE_LOCK_FLAG_FIND_LAST_VERSION` and EvalPlanQual). A link whose target's xmin is not the
//! updater (the slot was pruned and reused) means the row is gone. REPEATABLE READ fails with
//! a serialization error instead; a deleted row is gone under both.
//!
//! # WAL
//!
//! The page change is logged as a LOCK record (heap rmgr, info 0x60: offset, locker XID, the
//! new masks) under the page's exclusive lock; redo ([`super::wal::redo_block`]) applies the
//! same [`super::wal::apply_lock`]. A page marked all-visible has its visibility-map bits
//! cleared first (a VM_CLEAR record, as a delete does): the locker's XID is unfrozen, so the
//! page cannot stay all-frozen. Logical decoding reads nothing from a LOCK record.

use super::*;

/// How strongly a row is locked (`FOR KEY SHARE` … `FOR UPDATE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowLockMode {
    KeyShare,
    Share,
    NoKeyUpdate,
    Update,
}

impl RowLockMode {
    /// The SQL spelling (`FOR UPDATE` without the `FOR`).
    pub fn name(self) -> &'static str {
        match self {
            RowLockMode::KeyShare => "KEY SHARE",
            RowLockMode::Share => "SHARE",
            RowLockMode::NoKeyUpdate => "NO KEY UPDATE",
            RowLockMode::Update => "UPDATE",
        }
    }

    /// The infomask and infomask2 bits that record the strength.
    fn bits(self) -> (u16, u16) {
        use tuple::{HEAP_KEYS_UPDATED, HEAP_XMAX_EXCL_LOCK, HEAP_XMAX_KEYSHR_LOCK};
        match self {
            RowLockMode::KeyShare => (HEAP_XMAX_KEYSHR_LOCK, 0),
            RowLockMode::Share => (HEAP_XMAX_KEYSHR_LOCK | HEAP_XMAX_EXCL_LOCK, 0),
            RowLockMode::NoKeyUpdate => (HEAP_XMAX_EXCL_LOCK, 0),
            RowLockMode::Update => (HEAP_XMAX_EXCL_LOCK, HEAP_KEYS_UPDATED),
        }
    }
}

/// What a lock request does when another transaction holds the row (PostgreSQL's
/// `LockWaitPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RowLockWait {
    /// Wait for the holder to end (bounded by `lock_timeout`, the deadlock detector and the
    /// session's interrupt).
    #[default]
    Block,
    /// `SKIP LOCKED`: give the row up.
    SkipLocked,
    /// `NOWAIT`: fail with `LockNotAvailable` (SQLSTATE 55P03).
    NoWait,
}

/// The outcome of [`lock_tuple`].
#[derive(Clone, Debug, PartialEq)]
pub enum LockResult {
    /// The row is locked (now or already by this transaction) at `tid`, whose values are
    /// `values`; `followed` says READ COMMITTED moved to a newer version than the one asked
    /// for (the caller re-checks its conditions on `values`).
    Locked { tid: Tid, values: Vec<Value>, followed: bool },
    /// SKIP LOCKED: another running transaction holds the row.
    Skipped,
    /// The row no longer exists (deleted, or changed by this transaction itself).
    Gone,
}

/// One look at the version at a TID.
enum Step {
    Done(LockResult),
    Blocked(Xid),
    Follow { next: Tid, updater: Xid },
}

/// The message of a NOWAIT failure (PostgreSQL's, SQLSTATE 55P03).
pub fn nowait_message(rel: &str) -> String {
    format!("could not obtain lock on row in relation \"{rel}\"")
}

/// Locks the row version at `tid` for the transaction `tx` (its current XID), following the
/// update chain under READ COMMITTED; `wait(x)` waits for transaction `x` to end. The caller
/// holds the relation's `write_lock` shared, as writers do.
pub fn lock_tuple(
    env: &HeapEnv<'_>,
    rel: &Relation,
    tx: &TxContext<'_>,
    tid: Tid,
    mode: RowLockMode,
    policy: RowLockWait,
    wait: &dyn Fn(Xid) -> Result<()>,
) -> Result<LockResult> {
    let mut tid = tid;
    let mut prior: Option<Xid> = None;
    loop {
        match lock_once(env, rel, tx, tid, mode, prior)? {
            Step::Done(LockResult::Locked { tid, values, .. }) => {
                return Ok(LockResult::Locked { tid, values, followed: prior.is_some() });
            }
            Step::Done(r) => return Ok(r),
            Step::Blocked(x) => match policy {
                RowLockWait::Block => wait(x)?,
                RowLockWait::SkipLocked => return Ok(LockResult::Skipped),
                RowLockWait::NoWait => return Err(Error::LockNotAvailable(nowait_message(&rel.name))),
            },
            Step::Follow { next, updater } => {
                tid = next;
                prior = Some(updater);
            }
        }
    }
}

fn lock_once(
    env: &HeapEnv<'_>,
    rel: &Relation,
    tx: &TxContext<'_>,
    tid: Tid,
    mode: RowLockMode,
    prior: Option<Xid>,
) -> Result<Step> {
    let gone = Ok(Step::Done(LockResult::Gone));
    let Some(buf) = read_page_if_exists(env, rel, tid.block)? else { return gone };
    let mut g = buf.write();
    if page::is_new(&g.0) {
        return gone;
    }
    let Some(t) = normal_item(rel, &g.0, tid)? else { return gone };
    let h = TupleHeader::parse(t).ok_or_else(|| corrupt_tuple(rel, tid, "invalid tuple header"))?;
    // A followed link must lead to the updater's version, not to a reused slot.
    if prior.is_some_and(|x| h.xmin() != x) {
        return gone;
    }
    let values = || rel.deform(t).map_err(|e| corrupt_tuple(rel, tid, &e));
    let m = h.infomask();
    let lock_only = m & tuple::HEAP_XMAX_LOCK_ONLY != 0 && m & HEAP_XMAX_INVALID == 0;
    if lock_only && tx.snapshot.is_current(h.xmax()) {
        return Ok(Step::Done(LockResult::Locked { tid, values: values()?, followed: false }));
    }
    match visibility::satisfies_update(&h, tid, tx.snapshot, env.xact)? {
        UpdateStatus::Ok => {}
        UpdateStatus::Invisible | UpdateStatus::SelfUpdated => return gone,
        UpdateStatus::BeingUpdated(x) => return Ok(Step::Blocked(x)),
        UpdateStatus::Updated { ctid, xmax } => {
            if tx.serializable_updates {
                return Err(Error::SerializationFailure);
            }
            if ctid == tid {
                return gone;
            }
            return Ok(Step::Follow { next: ctid, updater: xmax });
        }
    }
    let vals = values()?;
    let (bits, bits2) = mode.bits();
    let im = (m & !wal::XMAX_BITS) | tuple::HEAP_XMAX_LOCK_ONLY | bits;
    // A lock is no link: an aborted updater's HOT link goes (its heap-only version is dead and
    // left to pruning), and so does an old FOR UPDATE's KEYS_UPDATED.
    let im2 = (h.infomask2() & !(tuple::HEAP_HOT_UPDATED | tuple::HEAP_KEYS_UPDATED)) | bits2;
    clear_all_visible(env, rel, tid.block, &mut g.0)?;
    wal::apply_lock(&mut g.0, tid.offset, tid.block, tx.xid, im, im2);
    let mut main = Vec::with_capacity(10);
    main.extend_from_slice(&tid.offset.0.to_le_bytes());
    main.extend_from_slice(&tx.xid.0.to_le_bytes());
    main.extend_from_slice(&im.to_le_bytes());
    main.extend_from_slice(&im2.to_le_bytes());
    let lsn = log_one_block(
        env,
        Rmgr::Heap,
        wal::XLOG_HEAP_LOCK,
        Some(tx),
        rel.tag(tid.block),
        false,
        &g.0,
        Vec::new(),
        main,
    )?;
    page::set_lsn(&mut g.0, lsn);
    buf.mark_dirty();
    Ok(Step::Done(LockResult::Locked { tid, values: vals, followed: false }))
}
