//! The lock manager: table-level ("heavyweight") locks in PostgreSQL's eight modes, and the
//! deadlock detector that sees them together with the waits for other transactions' XIDs
//! (row locks, unique-key checks). PostgreSQL's `lock.c` / `deadlock.c`, much smaller.
//!
//! # Modes and conflicts
//!
//! ```text
//!                          AS  RS  RX  SUX  S  SRX  X  AX      who takes it
//!   AccessShare            .   .   .   .    .  .    .  #       reads (scan, fetch, lookups)
//!   RowShare               .   .   .   .    .  .    #  #       (SELECT FOR UPDATE/SHARE)
//!   RowExclusive           .   .   .   .    #  #    #  #       INSERT, UPDATE, DELETE
//!   ShareUpdateExclusive   .   .   .   #    #  #    #  #       VACUUM (manual and auto)
//!   Share                  .   .   #   #    .  #    #  #       CREATE INDEX
//!   ShareRowExclusive      .   .   #   #    #  #    #  #       (LOCK TABLE only)
//!   Exclusive              .   #   #   #    #  #    #  #       (LOCK TABLE only)
//!   AccessExclusive        #   #   #   #    #  #    #  #       DROP TABLE/INDEX, ALTER TABLE,
//!                                                              VACUUM's truncation
//! ```
//!
//! # Owners
//!
//! A lock belongs to a [`LockOwner`]: a top-level transaction (its subtransactions lock on its
//! behalf), a DDL command (which writes the catalog in an internal transaction of its own but
//! holds its table lock until the in-memory catalog and the files have changed too), or a
//! VACUUM. Locks are held until the owner releases them all at once ([`LockManager::release_all`]
//! at commit, abort, COMMIT/ROLLBACK PREPARED, the end of a DDL command or VACUUM);
//! [`LockManager::release`] gives back one mode early (ROLLBACK TO, VACUUM's truncation).
//!
//! # Fast path
//!
//! The weak modes (AccessShare, RowShare, RowExclusive) never conflict with one another, so
//! an owner records them in its own slot under its own (uncontended) mutex, as long as no
//! strong lock (Share and above) is held or awaited on a relation hashing to the same one of
//! [`FAST_PATH_PARTITIONS`] counters (PostgreSQL's `FastPathStrongRelationLocks`). A strong
//! locker first bumps that counter, then moves every owner's fast-path entries for the
//! relation into the shared table, so it sees them as holders. The ordering argument is
//! PostgreSQL's: a weak locker reads the counter while holding its slot's mutex, the strong
//! locker bumps it before taking that mutex, so either the weak locker sees the bump and goes
//! to the shared table, or its entry is in the slot when the strong locker looks. The DML hot
//! path thus takes no shared lock at all; a transaction's own cache of what it holds
//! (`db/transaction.rs`) even skips the slot after the first statement on a table.
//!
//! # Waiting and fairness
//!
//! The shared table keeps, per relation, its holders (owner, bitmask of granted modes) and a
//! FIFO queue of waiters. A request is granted when no other owner holds a conflicting mode and,
//! unless the requester already holds some mode on the relation, no earlier waiter asks for a
//! conflicting one (so a stream of readers cannot starve a DROP INDEX, and a transaction that
//! already holds the table is not queued behind a waiter that waits for it: PostgreSQL's rule
//! in `ProcSleep`). Waiters sleep on one condition variable, woken at every release.
//!
//! # Deadlock detection
//!
//! The wait-for graph has an edge from each waiting owner to every owner it waits for: the
//! holders of conflicting modes and the earlier conflicting waiters of the relation it wants,
//! or the owner of the transaction whose XID it waits for (a row lock, a unique key). The
//! check runs **at once**, when a wait begins, and the waiter that would close a cycle gets
//! [`Error::Deadlock`] (PostgreSQL's victim, but without waiting `deadlock_timeout` first: the
//! graph is small and the check runs under the same mutex that records the wait). Edges are
//! computed from the live state, and a new edge appears only when an owner starts waiting
//! (granting never adds one to a cycle: a granted owner is not waiting), so checking at every
//! wait start finds every cycle. Every `deadlock_timeout` a waiter checks again anyway (cheap
//! insurance, and how a wait on a thread's own other owner is caught, below). Waiting behind
//! a conflicting *waiter* counts as an edge: PostgreSQL may instead reorder the queue
//! ("soft" edges); here such a case is reported as a deadlock.
//!
//! One more edge PostgreSQL does not need: owners are bound to the thread that last used them.
//! A thread that waits (a DDL command) for an owner that is not waiting and was last used by
//! the same thread (that thread's open transaction) would wait forever; it is reported as a
//! deadlock too.
//!
//! # Timeouts
//!
//! `lock_timeout` (0 = none) bounds every wait, table lock or XID, and fails it with
//! [`Error::LockNotAvailable`] ("canceling statement due to lock timeout", SQLSTATE 55P03).
//! A conditional request (`nowait`) fails at once instead (autovacuum, VACUUM's truncation).
//! An owner given an [`Interrupt`] ([`LockOwner::set_interrupt`]: a server session's cancel
//! and `statement_timeout`) wakes every [`Interrupt::POLL`] while it waits to call it, and
//! fails the wait with [`Error::Interrupted`] when it says stop.
//!
//! # The view
//!
//! [`LockManager::locks`] lists every lock held or awaited, `pg_locks`-style: relation locks
//! (fast-path ones included) and, per owner with an XID, its `transactionid` ExclusiveLock and
//! the ShareLock it waits for on another transaction.
//!
//! Latch order: the shared table's mutex, then an owner's slot, then a registry stripe (held
//! only to add, remove or copy out entries: nothing locks a slot while holding a stripe).
//!
//! Layering: this module knows owners, relation OIDs and XIDs, nothing of the catalog or of
//! transactions; `db` calls it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Interrupt, Result};
use crate::types::{Oid, Xid};

/// PostgreSQL's table lock modes, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum LockMode {
    AccessShare = 1,
    RowShare = 2,
    RowExclusive = 3,
    ShareUpdateExclusive = 4,
    Share = 5,
    ShareRowExclusive = 6,
    Exclusive = 7,
    AccessExclusive = 8,
}

/// A set of modes, one bit per mode (bit `mode as u8`).
pub type LockMask = u16;

const fn bit(m: LockMode) -> LockMask {
    1 << m as u8
}

const AS: LockMask = bit(LockMode::AccessShare);
const RS: LockMask = bit(LockMode::RowShare);
const RX: LockMask = bit(LockMode::RowExclusive);
const SUX: LockMask = bit(LockMode::ShareUpdateExclusive);
const S: LockMask = bit(LockMode::Share);
const SRX: LockMask = bit(LockMode::ShareRowExclusive);
const X: LockMask = bit(LockMode::Exclusive);
const AX: LockMask = bit(LockMode::AccessExclusive);

/// PostgreSQL's `LockConflicts` table, indexed by mode.
const CONFLICTS: [LockMask; 9] = [
    0,
    AX,
    X | AX,
    S | SRX | X | AX,
    SUX | S | SRX | X | AX,
    RX | SUX | SRX | X | AX,
    RX | SUX | S | SRX | X | AX,
    RS | RX | SUX | S | SRX | X | AX,
    AS | RS | RX | SUX | S | SRX | X | AX,
];

impl LockMode {
    pub const ALL: [LockMode; 8] = [
        LockMode::AccessShare,
        LockMode::RowShare,
        LockMode::RowExclusive,
        LockMode::ShareUpdateExclusive,
        LockMode::Share,
        LockMode::ShareRowExclusive,
        LockMode::Exclusive,
        LockMode::AccessExclusive,
    ];

    pub const fn mask(self) -> LockMask {
        bit(self)
    }

    /// The modes this one conflicts with.
    pub const fn conflicts(self) -> LockMask {
        CONFLICTS[self as usize]
    }

    pub const fn conflicts_with(self, other: LockMode) -> bool {
        self.conflicts() & bit(other) != 0
    }

    /// The name `pg_locks.mode` shows (`"RowExclusiveLock"`).
    pub const fn name(self) -> &'static str {
        match self {
            LockMode::AccessShare => "AccessShareLock",
            LockMode::RowShare => "RowShareLock",
            LockMode::RowExclusive => "RowExclusiveLock",
            LockMode::ShareUpdateExclusive => "ShareUpdateExclusiveLock",
            LockMode::Share => "ShareLock",
            LockMode::ShareRowExclusive => "ShareRowExclusiveLock",
            LockMode::Exclusive => "ExclusiveLock",
            LockMode::AccessExclusive => "AccessExclusiveLock",
        }
    }

    /// LOCK TABLE's spelling (`"ACCESS EXCLUSIVE"`, case-insensitive, spaces optional).
    pub fn parse(s: &str) -> Option<LockMode> {
        let k: String = s.chars().filter(|c| !c.is_whitespace() && *c != '_').collect::<String>().to_ascii_lowercase();
        let k = k.strip_suffix("lock").unwrap_or(&k);
        LockMode::ALL.into_iter().find(|m| m.name().strip_suffix("Lock").is_some_and(|n| n.eq_ignore_ascii_case(k)))
    }

    /// Weak modes may take the fast path (they conflict with none of each other).
    pub const fn is_weak(self) -> bool {
        (self as u8) <= LockMode::RowExclusive as u8
    }

    /// Strong modes conflict with some weak mode: they must see fast-path holders.
    pub const fn is_strong(self) -> bool {
        (self as u8) >= LockMode::Share as u8
    }
}

fn modes_of(mask: LockMask) -> impl Iterator<Item = LockMode> {
    LockMode::ALL.into_iter().filter(move |m| mask & m.mask() != 0)
}

/// Who holds locks: a transaction, a DDL command, a VACUUM (a `pid` in `pg_locks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(pub u64);

/// One row of [`LockManager::locks`] (`pg_locks`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// `"relation"` or `"transactionid"`.
    pub locktype: &'static str,
    /// The table's OID (relation locks).
    pub relation: Option<Oid>,
    /// The XID locked (transactionid locks).
    pub transactionid: Option<Xid>,
    /// The owner's top-level XID, if it has one (`virtualtransaction`'s role here).
    pub owner_xid: Option<Xid>,
    /// The owner (`pid`).
    pub owner: OwnerId,
    /// What the owner is (`"transaction"`, `"ddl"`, `"vacuum"`, `"autovacuum"`, `"prepared"`).
    pub owner_kind: &'static str,
    pub mode: LockMode,
    pub granted: bool,
    pub fastpath: bool,
}

/// How long a request may wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WaitPolicy {
    /// Until granted, a deadlock, or `lock_timeout` if one is set.
    #[default]
    Wait,
    /// Not at all (`ConditionalLockRelation`): [`Error::LockNotAvailable`] if not free now.
    NoWait,
}

/// Relation locks are hashed onto this many strong-lock counters.
pub const FAST_PATH_PARTITIONS: usize = 1024;
/// The registry of owners is striped to keep registration uncontended.
const STRIPES: usize = 16;

/// An owner's own slot: its fast-path locks, its XID and the thread that last used it.
struct Slot {
    id: OwnerId,
    kind: &'static str,
    fast: Mutex<SlotState>,
}

struct SlotState {
    /// Weak locks held through the fast path: (relation, modes).
    fast: Vec<(Oid, LockMask)>,
    /// Relations on which the shared table has a holder entry of this owner.
    in_main: Vec<Oid>,
    /// The owner's top-level XID (for waits on it), `INVALID` until it has one.
    xid: Xid,
    thread: ThreadId,
    registered: bool,
}

/// A lock owner's handle. Dropping it does not release its locks: call
/// [`LockManager::release_all`] (a prepared transaction's locks outlive its session).
pub struct LockOwner {
    slot: Arc<Slot>,
    /// Checked while this owner waits (see [`crate::error::Interrupt`]).
    interrupt: Option<Interrupt>,
}

impl LockOwner {
    pub fn id(&self) -> OwnerId {
        self.slot.id
    }

    /// Makes this owner's waits end with [`Error::Interrupted`] when `interrupt` says so
    /// (`None`: they end only as granted, deadlocked or timed out).
    pub fn set_interrupt(&mut self, interrupt: Option<Interrupt>) {
        self.interrupt = interrupt;
    }

    /// The owner's interrupt check, if any.
    fn check_interrupt(&self) -> Result<()> {
        self.interrupt.as_ref().map_or(Ok(()), Interrupt::check)
    }

    /// Whether the owner holds `mode` on `rel` (either path).
    pub fn holds(&self, lm: &LockManager, rel: Oid, mode: LockMode) -> bool {
        if self.slot.fast.lock().fast.iter().any(|&(o, m)| o == rel && m & mode.mask() != 0) {
            return true;
        }
        let st = lm.state.lock();
        st.locks.get(&rel).is_some_and(|e| e.holders.iter().any(|&(o, m)| o == self.slot.id && m & mode.mask() != 0))
    }
}

#[derive(Default)]
struct LockEntry {
    holders: Vec<(OwnerId, LockMask)>,
    queue: Vec<(OwnerId, LockMode)>,
}

impl LockEntry {
    fn held_by(&self, o: OwnerId) -> LockMask {
        self.holders.iter().find(|h| h.0 == o).map_or(0, |h| h.1)
    }

    /// The owners `o` must wait for to get `mode`: conflicting holders, and (unless `o`
    /// already holds the relation) conflicting waiters ahead of `o` (all of them if `o` is
    /// not queued).
    fn blockers(&self, o: OwnerId, mode: LockMode) -> Vec<OwnerId> {
        let c = mode.conflicts();
        let mut out: Vec<OwnerId> = self.holders.iter().filter(|h| h.0 != o && h.1 & c != 0).map(|h| h.0).collect();
        if self.held_by(o) == 0 {
            for &(w, m) in self.queue.iter().take_while(|q| q.0 != o) {
                if c & m.mask() != 0 && !out.contains(&w) {
                    out.push(w);
                }
            }
        }
        out
    }

    fn grant(&mut self, o: OwnerId, mask: LockMask) {
        match self.holders.iter_mut().find(|h| h.0 == o) {
            Some(h) => h.1 |= mask,
            None => self.holders.push((o, mask)),
        }
    }
}

#[derive(Clone, Copy)]
enum Waiting {
    Lock { rel: Oid, mode: LockMode },
    Xid { xid: Xid, holder: Option<OwnerId>, my_xid: Xid },
}

#[derive(Default)]
struct State {
    locks: HashMap<Oid, LockEntry>,
    waiting: HashMap<OwnerId, Waiting>,
}

/// The lock manager of one database.
pub struct LockManager {
    state: Mutex<State>,
    wake: Condvar,
    strong: Box<[AtomicU32]>,
    registry: Vec<Mutex<HashMap<OwnerId, Arc<Slot>>>>,
    next_owner: AtomicU64,
    deadlock_timeout: Duration,
    /// Deadlocks reported and lock timeouts, since open.
    pub deadlocks: AtomicU64,
    pub lock_timeouts: AtomicU64,
}

fn partition(rel: Oid) -> usize {
    (rel.0 as usize).wrapping_mul(0x9E37_79B1) % FAST_PATH_PARTITIONS
}

impl LockManager {
    /// `deadlock_timeout`: how often a waiter checks the graph again (it checks at once too).
    pub fn new(deadlock_timeout: Duration) -> LockManager {
        LockManager {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            strong: (0..FAST_PATH_PARTITIONS).map(|_| AtomicU32::new(0)).collect(),
            registry: (0..STRIPES).map(|_| Mutex::new(HashMap::new())).collect(),
            next_owner: AtomicU64::new(1),
            deadlock_timeout: deadlock_timeout.max(Duration::from_millis(1)),
            deadlocks: AtomicU64::new(0),
            lock_timeouts: AtomicU64::new(0),
        }
    }

    /// A new owner; `kind` is what [`LockInfo::owner_kind`] shows.
    pub fn new_owner(&self, kind: &'static str) -> LockOwner {
        let id = OwnerId(self.next_owner.fetch_add(1, Ordering::Relaxed));
        LockOwner {
            slot: Arc::new(Slot {
                id,
                kind,
                fast: Mutex::new(SlotState {
                    fast: Vec::new(),
                    in_main: Vec::new(),
                    xid: Xid::INVALID,
                    thread: std::thread::current().id(),
                    registered: false,
                }),
            }),
            interrupt: None,
        }
    }

    fn register(&self, slot: &Arc<Slot>, st: &mut SlotState) {
        if !st.registered {
            st.registered = true;
            self.registry[slot.id.0 as usize % STRIPES].lock().insert(slot.id, slot.clone());
        }
    }

    fn slot_of(&self, id: OwnerId) -> Option<Arc<Slot>> {
        self.registry[id.0 as usize % STRIPES].lock().get(&id).cloned()
    }

    /// Records the owner's top-level XID, so that waits for it are edges to the owner.
    pub fn set_xid(&self, owner: &LockOwner, xid: Xid) {
        let mut st = owner.slot.fast.lock();
        st.xid = xid;
        self.register(&owner.slot, &mut st);
    }

    /// Takes `mode` on relation `rel` for `owner`, waiting as `policy` and `timeout`
    /// (`lock_timeout`; `None` waits forever) allow.
    pub fn lock(
        &self,
        owner: &LockOwner,
        rel: Oid,
        mode: LockMode,
        policy: WaitPolicy,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let slot = &owner.slot;
        let p = partition(rel);
        if mode.is_weak() {
            // Fast path (hot): the owner's own mutex and one atomic load.
            let mut st = slot.fast.lock();
            st.thread = std::thread::current().id();
            if let Some(e) = st.fast.iter_mut().find(|e| e.0 == rel) {
                if self.strong[p].load(Ordering::SeqCst) == 0 {
                    e.1 |= mode.mask();
                    return Ok(());
                }
            } else if self.strong[p].load(Ordering::SeqCst) == 0 && st.fast.len() < 64 {
                st.fast.push((rel, mode.mask()));
                self.register(slot, &mut st);
                return Ok(());
            }
        } else {
            slot.fast.lock().thread = std::thread::current().id();
        }
        self.lock_slow(owner, rel, mode, policy, timeout)
    }

    fn lock_slow(
        &self,
        owner: &LockOwner,
        rel: Oid,
        mode: LockMode,
        policy: WaitPolicy,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let me = owner.id();
        let p = partition(rel);
        let mut st = self.state.lock();
        {
            let mut ss = owner.slot.fast.lock();
            self.register(&owner.slot, &mut ss);
        }
        if st.locks.get(&rel).is_some_and(|e| e.held_by(me) & mode.mask() != 0) {
            return Ok(());
        }
        if mode.is_strong() {
            self.strong[p].fetch_add(1, Ordering::SeqCst);
            self.transfer_fast_path(&mut st, rel);
        }
        let undo_strong = || {
            if mode.is_strong() {
                self.strong[p].fetch_sub(1, Ordering::SeqCst);
            }
        };
        if st.locks.entry(rel).or_default().blockers(me, mode).is_empty() {
            self.grant(&mut st, owner, rel, mode);
            return Ok(());
        }
        if policy == WaitPolicy::NoWait {
            undo_strong();
            self.forget_if_empty(&mut st, rel);
            return Err(Error::LockNotAvailable(format!("could not obtain {} on relation {rel}", mode.name())));
        }
        st.locks.entry(rel).or_default().queue.push((me, mode));
        st.waiting.insert(me, Waiting::Lock { rel, mode });
        let start = Instant::now();
        let mut next_check = start;
        loop {
            let blockers = st.locks.get(&rel).map(|e| e.blockers(me, mode)).unwrap_or_default();
            if blockers.is_empty() {
                self.dequeue(&mut st, me, rel);
                self.grant(&mut st, owner, rel, mode);
                return Ok(());
            }
            let now = Instant::now();
            let failure = if now >= next_check {
                next_check = now + self.deadlock_timeout;
                self.find_cycle(&st, me).map(|path| {
                    self.deadlocks.fetch_add(1, Ordering::Relaxed);
                    Error::Deadlock {
                        detail: format!(
                            "{} waits for {} on relation {rel}; blocked by {}",
                            self.describe(me),
                            mode.name(),
                            path.iter().map(|o| self.describe(*o)).collect::<Vec<_>>().join(", which waits for ")
                        ),
                    }
                })
            } else {
                None
            };
            let failure = failure.or_else(|| {
                timeout.filter(|t| now.duration_since(start) >= *t).map(|_| {
                    self.lock_timeouts.fetch_add(1, Ordering::Relaxed);
                    Error::LockNotAvailable("canceling statement due to lock timeout".into())
                })
            });
            let failure = failure.or_else(|| owner.check_interrupt().err());
            if let Some(e) = failure {
                self.dequeue(&mut st, me, rel);
                undo_strong();
                self.forget_if_empty(&mut st, rel);
                self.wake.notify_all();
                return Err(e);
            }
            let mut until = next_check;
            if let Some(t) = timeout {
                until = until.min(start + t);
            }
            if owner.interrupt.is_some() {
                until = until.min(Instant::now() + Interrupt::POLL);
            }
            self.wake.wait_until(&mut st, until);
        }
    }

    fn describe(&self, o: OwnerId) -> String {
        match self.slot_of(o) {
            Some(s) => {
                let x = s.fast.lock().xid;
                if x.is_normal() {
                    format!("{} {} (transaction {x})", s.kind, o.0)
                } else {
                    format!("{} {}", s.kind, o.0)
                }
            }
            None => format!("owner {}", o.0),
        }
    }

    fn dequeue(&self, st: &mut State, me: OwnerId, rel: Oid) {
        if let Some(e) = st.locks.get_mut(&rel) {
            e.queue.retain(|q| q.0 != me);
        }
        st.waiting.remove(&me);
    }

    fn forget_if_empty(&self, st: &mut State, rel: Oid) {
        if st.locks.get(&rel).is_some_and(|e| e.holders.is_empty() && e.queue.is_empty()) {
            st.locks.remove(&rel);
        }
    }

    fn grant(&self, st: &mut State, owner: &LockOwner, rel: Oid, mode: LockMode) {
        st.locks.entry(rel).or_default().grant(owner.id(), mode.mask());
        let mut ss = owner.slot.fast.lock();
        if !ss.in_main.contains(&rel) {
            ss.in_main.push(rel);
        }
    }

    /// Moves every owner's fast-path entries for `rel` into the shared table (the strong
    /// counter for `rel` is already raised, so no new ones appear).
    fn transfer_fast_path(&self, st: &mut State, rel: Oid) {
        for s in self.all_slots() {
            let mut ss = s.fast.lock();
            if let Some(i) = ss.fast.iter().position(|e| e.0 == rel) {
                let (_, mask) = ss.fast.swap_remove(i);
                st.locks.entry(rel).or_default().grant(s.id, mask);
                if !ss.in_main.contains(&rel) {
                    ss.in_main.push(rel);
                }
            }
        }
    }

    /// Gives back one mode early (ROLLBACK TO, VACUUM's truncation giving way).
    pub fn release(&self, owner: &LockOwner, rel: Oid, mode: LockMode) {
        {
            let mut ss = owner.slot.fast.lock();
            if let Some(i) = ss.fast.iter().position(|e| e.0 == rel) {
                ss.fast[i].1 &= !mode.mask();
                if ss.fast[i].1 == 0 {
                    ss.fast.swap_remove(i);
                }
            }
            if !ss.in_main.contains(&rel) {
                return;
            }
        }
        let mut st = self.state.lock();
        let me = owner.id();
        let mut now_empty = false;
        if let Some(e) = st.locks.get_mut(&rel) {
            if let Some(h) = e.holders.iter_mut().find(|h| h.0 == me) {
                if h.1 & mode.mask() != 0 {
                    h.1 &= !mode.mask();
                    if mode.is_strong() {
                        self.strong[partition(rel)].fetch_sub(1, Ordering::SeqCst);
                    }
                }
                now_empty = h.1 == 0;
            }
            if now_empty {
                e.holders.retain(|h| h.0 != me);
            }
        }
        if now_empty {
            owner.slot.fast.lock().in_main.retain(|r| *r != rel);
            self.forget_if_empty(&mut st, rel);
        }
        self.wake.notify_all();
    }

    /// Releases everything `owner` holds (transaction end), and forgets the owner.
    pub fn release_all(&self, owner: &LockOwner) {
        let (in_main, registered) = {
            let mut ss = owner.slot.fast.lock();
            ss.fast.clear();
            ss.xid = Xid::INVALID;
            let r = ss.registered;
            ss.registered = false;
            (std::mem::take(&mut ss.in_main), r)
        };
        if registered {
            self.registry[owner.id().0 as usize % STRIPES].lock().remove(&owner.id());
        }
        if in_main.is_empty() {
            return;
        }
        let me = owner.id();
        let mut st = self.state.lock();
        for rel in in_main {
            if let Some(e) = st.locks.get_mut(&rel) {
                let held = e.held_by(me);
                e.holders.retain(|h| h.0 != me);
                let strong = modes_of(held).filter(|m| m.is_strong()).count() as u32;
                if strong > 0 {
                    self.strong[partition(rel)].fetch_sub(strong, Ordering::SeqCst);
                }
            }
            self.forget_if_empty(&mut st, rel);
        }
        drop(st);
        self.wake.notify_all();
    }

    /// Waits for the transaction `other` (a top-level XID) to end on behalf of `owner`, whose
    /// own top-level XID is `my_xid`: `wait(d)` waits up to `d` and says whether it ended.
    /// Fails at once when the wait would close a cycle, or after `timeout`.
    pub fn wait_for_xid(
        &self,
        owner: &LockOwner,
        my_xid: Xid,
        other: Xid,
        timeout: Option<Duration>,
        wait: &dyn Fn(Duration) -> bool,
    ) -> Result<()> {
        let me = owner.id();
        owner.slot.fast.lock().thread = std::thread::current().id();
        let holder = self.owner_of_xid(other);
        let start = Instant::now();
        let r = loop {
            {
                let mut st = self.state.lock();
                st.waiting.insert(me, Waiting::Xid { xid: other, holder, my_xid });
                if self.find_cycle(&st, me).is_some() {
                    st.waiting.remove(&me);
                    self.deadlocks.fetch_add(1, Ordering::Relaxed);
                    break Err(Error::Deadlock {
                        detail: format!(
                            "transaction {my_xid} waits for transaction {other}, whose chain of waits leads back to {my_xid}"
                        ),
                    });
                }
            }
            let mut step = self.deadlock_timeout;
            if let Some(t) = timeout {
                let left = t.saturating_sub(start.elapsed());
                if left.is_zero() {
                    self.lock_timeouts.fetch_add(1, Ordering::Relaxed);
                    break Err(Error::LockNotAvailable("canceling statement due to lock timeout".into()));
                }
                step = step.min(left);
            }
            if let Err(e) = owner.check_interrupt() {
                break Err(e);
            }
            if owner.interrupt.is_some() {
                step = step.min(Interrupt::POLL);
            }
            if wait(step) {
                break Ok(());
            }
        };
        self.state.lock().waiting.remove(&me);
        r
    }

    fn owner_of_xid(&self, xid: Xid) -> Option<OwnerId> {
        self.all_slots().into_iter().find(|s| s.fast.lock().xid == xid).map(|s| s.id)
    }

    /// Every registered owner's slot. The stripes' guards are dropped before any slot is
    /// locked: registration locks a stripe while holding its slot's mutex.
    fn all_slots(&self) -> Vec<Arc<Slot>> {
        let mut v = Vec::new();
        for stripe in &self.registry {
            v.extend(stripe.lock().values().cloned());
        }
        v
    }

    /// The owners `o` waits for now.
    fn edges(&self, st: &State, o: OwnerId) -> Vec<OwnerId> {
        match st.waiting.get(&o) {
            Some(Waiting::Lock { rel, mode }) => st.locks.get(rel).map(|e| e.blockers(o, *mode)).unwrap_or_default(),
            Some(Waiting::Xid { holder, .. }) => holder.iter().copied().collect(),
            None => Vec::new(),
        }
    }

    /// A path of waits from `start` back to itself (the owners on it after `start`), or to an
    /// owner that is not waiting but was last used by this thread.
    fn find_cycle(&self, st: &State, start: OwnerId) -> Option<Vec<OwnerId>> {
        let me_thread = std::thread::current().id();
        let mut seen: Vec<OwnerId> = vec![start];
        let mut stack: Vec<(OwnerId, Vec<OwnerId>)> = vec![(start, Vec::new())];
        while let Some((o, path)) = stack.pop() {
            for n in self.edges(st, o) {
                let mut p = path.clone();
                p.push(n);
                if n == start {
                    return Some(p);
                }
                if seen.contains(&n) {
                    continue;
                }
                seen.push(n);
                if !st.waiting.contains_key(&n) {
                    let same_thread = self.slot_of(n).is_some_and(|s| s.fast.lock().thread == me_thread);
                    if same_thread {
                        return Some(p);
                    }
                }
                stack.push((n, p));
            }
        }
        None
    }

    /// Whether anyone waits for `rel` (VACUUM's truncation gives way then).
    pub fn has_waiters(&self, rel: Oid) -> bool {
        self.state.lock().locks.get(&rel).is_some_and(|e| !e.queue.is_empty())
    }

    /// Every lock held or awaited (`pg_locks`), sorted by owner.
    pub fn locks(&self) -> Vec<LockInfo> {
        let st = self.state.lock();
        let mut out = Vec::new();
        let mut xids: HashMap<OwnerId, (Xid, &'static str)> = HashMap::new();
        for s in self.all_slots() {
            let ss = s.fast.lock();
            xids.insert(s.id, (ss.xid, s.kind));
            for &(rel, mask) in &ss.fast {
                for m in modes_of(mask) {
                    out.push((s.id, rel, m, true, true));
                }
            }
        }
        for (&rel, e) in &st.locks {
            for &(o, mask) in &e.holders {
                for m in modes_of(mask) {
                    out.push((o, rel, m, true, false));
                }
            }
            for &(o, m) in &e.queue {
                out.push((o, rel, m, false, false));
            }
        }
        let info = |o: OwnerId| xids.get(&o).copied().unwrap_or((Xid::INVALID, "transaction"));
        let some = |x: Xid| if x.is_normal() { Some(x) } else { None };
        let mut rows: Vec<LockInfo> = out
            .into_iter()
            .map(|(o, rel, mode, granted, fastpath)| LockInfo {
                locktype: "relation",
                relation: Some(rel),
                transactionid: None,
                owner_xid: some(info(o).0),
                owner: o,
                owner_kind: info(o).1,
                mode,
                granted,
                fastpath,
            })
            .collect();
        for (&o, &(x, kind)) in &xids {
            if x.is_normal() {
                rows.push(LockInfo {
                    locktype: "transactionid",
                    relation: None,
                    transactionid: Some(x),
                    owner_xid: Some(x),
                    owner: o,
                    owner_kind: kind,
                    mode: LockMode::Exclusive,
                    granted: true,
                    fastpath: false,
                });
            }
        }
        for (&o, w) in &st.waiting {
            if let Waiting::Xid { xid, my_xid, .. } = *w {
                rows.push(LockInfo {
                    locktype: "transactionid",
                    relation: None,
                    transactionid: Some(xid),
                    owner_xid: some(my_xid),
                    owner: o,
                    owner_kind: info(o).1,
                    mode: LockMode::Share,
                    granted: false,
                    fastpath: false,
                });
            }
        }
        rows.sort_by_key(|r| (r.owner, r.locktype, r.relation, r.transactionid.map(|x| x.0), r.mode, !r.granted));
        rows
    }

    /// The XID waits in progress: (waiter's top-level XID, XID waited for).
    pub fn xid_waits(&self) -> Vec<(Xid, Xid)> {
        let st = self.state.lock();
        let mut v: Vec<(Xid, Xid)> = st
            .waiting
            .values()
            .filter_map(|w| match *w {
                Waiting::Xid { xid, my_xid, .. } => Some((my_xid, xid)),
                Waiting::Lock { .. } => None,
            })
            .collect();
        v.sort_by_key(|&(a, _)| a.0);
        v
    }

    /// Owners waiting for a relation lock: (owner, relation, mode).
    pub fn lock_waiters(&self) -> Vec<(OwnerId, Oid, LockMode)> {
        let st = self.state.lock();
        let mut v: Vec<_> = st
            .waiting
            .iter()
            .filter_map(|(&o, w)| match *w {
                Waiting::Lock { rel, mode } => Some((o, rel, mode)),
                Waiting::Xid { .. } => None,
            })
            .collect();
        v.sort();
        v
    }
}

#[cfg(test)]
mod tests;
