//! [`FaultFs`]: an in-memory [`FileSystem`] for crash tests, in the spirit of redb's
//! crash-consistency backend and of the Linux behaviours PostgreSQL learned the hard way.
//!
//! Every file (an *inode*) keeps two versions of its bytes:
//!
//! ```text
//!             write_at / set_len                sync()
//!   caller ─────────────────────────▶ current ─────────▶ durable
//!                                     + log of unsynced ops since the last sync
//! ```
//!
//! Reads see `current`. [`FaultFs::crash`] returns a *new* file system holding what a power
//! loss would leave: with [`CrashMode::LoseUnsynced`] each file is exactly its `durable`
//! bytes; with [`CrashMode::Random`] the unsynced ops are replayed over `durable` in order,
//! each one independently kept or lost, and a kept write longer than one 512-byte sector may
//! be *torn*: only a prefix of whole sectors (possibly none) reaches the disk.
//!
//! # Directory entries
//!
//! The namespace (path -> inode) also has a current and a durable version. Our choice,
//! modelled on ext4:
//!
//! * `remove` and `rename` are durable only after [`FileSystem::sync_dir`] of the parent
//!   directory (of both parents for a rename across directories);
//! * a *created* file becomes durable either by `sync_dir` of its directory or by the first
//!   successful `sync` of the file itself (ext4 commits the new entry with the inode);
//! * directories made by `create_dir_all` are durable at once (tests create them up front),
//!   and so is the removal of an empty directory.
//!
//! A crash keeps the durable namespace; files no durable entry names are gone.
//!
//! # Fault switches
//!
//! * [`FaultFs::fail_sync_after`]`(Some(n))`: the n-th `sync`/`sync_dir` call from now on
//!   (n = 1: the next one) and every later one fails with EIO; a failing file `sync` drops
//!   that file's unsynced writes (its content reverts to the durable version), as Linux
//!   forgets dirty pages after reporting a writeback error.
//! * [`FaultFs::fail_syncs_of`]: every `sync` of a file, and `sync_dir` of a directory, whose
//!   path ends with the given components (`pg_wal`: the directory, not its segments;
//!   `base/16384`: that main fork, not `16384_vm`) fails with EIO (a failing file `sync` drops that file's
//!   unsynced writes, as above); other files sync normally, so a test can fail the data files'
//!   fsync at a checkpoint while the WAL keeps working.
//! * [`FaultFs::set_space_limit`]: a write or extension that would make the space taken by all
//!   files exceed the limit fails with ENOSPC ("No space left on device"); so does a
//!   [`File::allocate`] reservation that could not be honoured (as `fallocate` fails), which
//!   is how a new WAL segment or a relation's next megabyte runs out of space first. A
//!   reservation that fits is kept, so writes inside it never fail for space.
//! * [`FaultFs::fail_reads_of`]: reads of any path containing the substring fail with EIO.
//! * [`FaultFs::set_syncs_lie`]: every sync succeeds and makes nothing durable.
//! * [`FaultFs::set_allocate_unsupported`]: reservations succeed and reserve nothing.
//!
//! # Power cuts
//!
//! [`FaultFs::arm_power_cut`] takes the power-loss image at a chosen changing call (the n-th
//! write, truncation, sync, creation, remove or rename from now), from inside whatever the
//! engine is doing then; the test picks it up with [`FaultFs::take_power_cut`]. That is how
//! `settle torture --power-loss` cuts the power inside a VACUUM or a checkpoint.
//!
//! Counters: [`FaultFs::syncs`] (every `sync` and `sync_dir` call, failed ones included) and
//! [`FaultFs::bytes_written`] (bytes accepted by `write_at`).
//!
//! # Representation and limits
//!
//! File bytes are stored sparsely in 8 KB chunks, so a write at offset 512 MB allocates one
//! chunk; holes read as zeros. Paths are compared as given (no normalization). Space is
//! counted per file as its logical length or its reservation, whichever is larger (a crash
//! keeps the length, not the reservation). A handle whose file was removed and is named by neither
//! namespace fails with ENOENT (unlike Unix, which keeps unlinked files readable).
//! All state sits behind one `parking_lot::Mutex`; every call is atomic with respect to the
//! others.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{File, FileSystem};
use crate::error::{Error, Result};

const CHUNK: u64 = 8192;
const SECTOR: usize = 512;
const EIO: i32 = 5;
const ENOENT: i32 = 2;
const ENOSPC: i32 = 28;

/// What survives a simulated power loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Only synced content (and synced directory entries) survive.
    LoseUnsynced,
    /// Each unsynced write independently survives or not; a surviving write of more than 512
    /// bytes may be torn to a prefix of whole sectors. Deterministic for a given seed.
    Random { seed: u64 },
}

/// Sparse file content: 8 KB chunks plus a logical length.
#[derive(Clone, Default, Debug)]
struct Content {
    chunks: BTreeMap<u64, Box<[u8]>>,
    len: u64,
}

impl Content {
    fn read(&self, buf: &mut [u8], offset: u64) -> usize {
        if offset >= self.len {
            return 0;
        }
        let n = buf.len().min((self.len - offset) as usize);
        let mut done = 0;
        while done < n {
            let pos = offset + done as u64;
            let (idx, within) = (pos / CHUNK, (pos % CHUNK) as usize);
            let take = (n - done).min(CHUNK as usize - within);
            match self.chunks.get(&idx) {
                Some(c) => buf[done..done + take].copy_from_slice(&c[within..within + take]),
                None => buf[done..done + take].fill(0),
            }
            done += take;
        }
        n
    }

    fn write(&mut self, data: &[u8], offset: u64) {
        let mut done = 0;
        while done < data.len() {
            let pos = offset + done as u64;
            let (idx, within) = (pos / CHUNK, (pos % CHUNK) as usize);
            let take = (data.len() - done).min(CHUNK as usize - within);
            let c = self.chunks.entry(idx).or_insert_with(|| vec![0u8; CHUNK as usize].into());
            c[within..within + take].copy_from_slice(&data[done..done + take]);
            done += take;
        }
        self.len = self.len.max(offset + data.len() as u64);
    }

    fn set_len(&mut self, len: u64) {
        if len < self.len {
            let keep = len.div_ceil(CHUNK);
            self.chunks.retain(|&i, _| i < keep);
            if !len.is_multiple_of(CHUNK) {
                if let Some(c) = self.chunks.get_mut(&(len / CHUNK)) {
                    c[(len % CHUNK) as usize..].fill(0);
                }
            }
        }
        self.len = len;
    }
}

#[derive(Clone, Debug)]
enum Op {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Clone, Default, Debug)]
struct Inode {
    current: Content,
    durable: Content,
    unsynced: Vec<Op>,
    /// Bytes reserved by [`File::allocate`] (from offset 0): space counts the larger of this
    /// and the length, so writes inside a reservation never run out of space. Not kept by a
    /// crash (a reservation is metadata the crash may lose; the length is what matters).
    reserved: u64,
}

impl Inode {
    /// The space this file takes.
    fn space(&self) -> u64 {
        self.current.len.max(self.reserved)
    }
}

#[derive(Default)]
struct State {
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    names: BTreeMap<PathBuf, u64>,
    durable_names: BTreeMap<PathBuf, u64>,
    dirs: BTreeSet<PathBuf>,
    total_bytes: u64,
    space_limit: Option<u64>,
    syncs_until_failure: Option<u64>,
    fail_reads_of: Option<String>,
    fail_syncs_of: Option<PathBuf>,
    syncs: u64,
    bytes_written: u64,
    /// `sync` and `sync_dir` succeed without making anything durable (a disk that lies).
    syncs_lie: bool,
    /// `allocate` succeeds and reserves nothing (a file system without `fallocate`).
    no_allocate: bool,
    /// Changing calls so far (see [`FaultFs::arm_power_cut`]).
    ops: u64,
    /// The power cut to come: before the changing call with this `ops` number, and how.
    cut_at: Option<(u64, CrashMode)>,
    /// What the power cut left, once it came.
    cut: Option<Box<State>>,
}

fn os_err(op: &'static str, path: &Path, errno: i32) -> Error {
    Error::io(op, path, std::io::Error::from_raw_os_error(errno))
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

impl State {
    fn dir_exists(&self, dir: &Path) -> bool {
        dir.as_os_str().is_empty() || dir == Path::new("/") || self.dirs.contains(dir)
    }

    fn inode(&mut self, ino: u64, op: &'static str, path: &Path) -> Result<&mut Inode> {
        self.inodes.get_mut(&ino).ok_or_else(|| os_err(op, path, ENOENT))
    }

    /// Counts a sync call; true when it must fail.
    fn sync_fails(&mut self) -> bool {
        self.syncs += 1;
        match self.syncs_until_failure.as_mut() {
            Some(n) if *n <= 1 => {
                *n = 0;
                true
            }
            Some(n) => {
                *n -= 1;
                false
            }
            None => false,
        }
    }

    /// Whether a sync of `path` must fail because [`FaultFs::fail_syncs_of`] names it.
    fn sync_targeted(&self, path: &Path) -> bool {
        self.fail_syncs_of.as_ref().is_some_and(|s| path.ends_with(s))
    }

    /// Grows the space accounting by `new_len - old_len`, or fails with ENOSPC.
    fn account(&mut self, old_len: u64, new_len: u64, path: &Path) -> Result<()> {
        let total = self.total_bytes - old_len + new_len;
        if new_len > old_len && self.space_limit.is_some_and(|l| total > l) {
            return Err(os_err("write", path, ENOSPC));
        }
        self.total_bytes = total;
        Ok(())
    }

    /// Counts one changing call (a write, truncation, sync, create, remove or rename); when a
    /// power cut is armed for it, first takes what the cut leaves.
    fn tick(&mut self) {
        self.ops += 1;
        if let Some((at, mode)) = self.cut_at {
            if self.ops >= at {
                self.cut_at = None;
                self.cut = Some(Box::new(self.survivors(mode)));
            }
        }
    }

    /// What survives a power loss now (see [`FaultFs::crash`]).
    fn survivors(&self, mode: CrashMode) -> State {
        let mut rng = SplitMix(match mode {
            CrashMode::Random { seed } => seed,
            CrashMode::LoseUnsynced => 0,
        });
        let mut inodes = HashMap::new();
        let mut total_bytes = 0;
        let mut inos: Vec<u64> = self.durable_names.values().copied().collect();
        inos.sort_unstable();
        inos.dedup();
        for ino in inos {
            let Some(node) = self.inodes.get(&ino) else {
                continue;
            };
            let mut content = node.durable.clone();
            if let CrashMode::Random { .. } = mode {
                for op in &node.unsynced {
                    apply_maybe(&mut content, op, &mut rng);
                }
            }
            total_bytes += content.len;
            inodes.insert(ino, Inode { current: content.clone(), durable: content, unsynced: Vec::new(), reserved: 0 });
        }
        State {
            inodes,
            next_ino: self.next_ino,
            names: self.durable_names.clone(),
            durable_names: self.durable_names.clone(),
            dirs: self.dirs.clone(),
            total_bytes,
            ..State::default()
        }
    }

    /// Drops inodes that no name (current or durable) refers to.
    fn collect(&mut self, ino: u64) {
        let named = self.names.values().chain(self.durable_names.values()).any(|&i| i == ino);
        if !named {
            if let Some(node) = self.inodes.remove(&ino) {
                self.total_bytes -= node.space();
            }
        }
    }
}

/// The in-memory, fault-injecting file system. See the module documentation.
pub struct FaultFs {
    state: Arc<Mutex<State>>,
}

struct FaultFile {
    state: Arc<Mutex<State>>,
    ino: u64,
    path: PathBuf,
}

/// A small deterministic PRNG (SplitMix64), so the library needs no `rand` dependency.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

impl FaultFs {
    pub fn new() -> Arc<FaultFs> {
        Arc::new(FaultFs { state: Arc::new(Mutex::new(State { next_ino: 1, ..State::default() })) })
    }

    /// A new file system holding what survives a power loss now. `self` keeps working but
    /// no longer matters to the test. Fault switches are reset; counters start at zero.
    pub fn crash(&self, mode: CrashMode) -> Arc<FaultFs> {
        let survivors = self.state.lock().survivors(mode);
        Arc::new(FaultFs { state: Arc::new(Mutex::new(survivors)) })
    }

    /// Arms a power cut: just before the `after_ops`-th changing call from now (1: the next
    /// one; a write, truncation, sync, file creation, remove or rename, by any thread), what
    /// a power loss would leave ([`FaultFs::crash`] with `mode`) is set aside for
    /// [`FaultFs::take_power_cut`]. The calls go on working afterwards, on a machine that no
    /// longer matters: the test stops its workload when it sees [`FaultFs::power_was_cut`].
    /// Arming again replaces a cut still to come.
    pub fn arm_power_cut(&self, after_ops: u64, mode: CrashMode) {
        let mut st = self.state.lock();
        st.cut_at = Some((st.ops + after_ops.max(1), mode));
    }

    /// From now on (`true`) every `sync` and `sync_dir` reports success and makes nothing
    /// durable, as a disk with a volatile write cache that ignores flushes does: a test of
    /// the tests, which must then find acknowledged commits lost at a power cut.
    pub fn set_syncs_lie(&self, lie: bool) {
        self.state.lock().syncs_lie = lie;
    }

    /// From now on (`true`) [`File::allocate`] succeeds and reserves nothing, as on a file
    /// system without `fallocate` (where the engine allocates on write), so a write can fail
    /// for space anywhere.
    pub fn set_allocate_unsupported(&self, unsupported: bool) {
        self.state.lock().no_allocate = unsupported;
    }

    /// Whether syncs lie ([`FaultFs::set_syncs_lie`]).
    pub fn syncs_lie(&self) -> bool {
        self.state.lock().syncs_lie
    }

    /// Disarms a power cut still to come.
    pub fn disarm_power_cut(&self) {
        self.state.lock().cut_at = None;
    }

    /// Whether the armed power cut has come.
    pub fn power_was_cut(&self) -> bool {
        self.state.lock().cut.is_some()
    }

    /// The file system the power cut left (once), fault switches reset and counters at zero.
    pub fn take_power_cut(&self) -> Option<Arc<FaultFs>> {
        let cut = self.state.lock().cut.take()?;
        Some(Arc::new(FaultFs { state: Arc::new(Mutex::new(*cut)) }))
    }

    /// Copies every file this file system names now (its current bytes) under `to` on the
    /// real file system, keeping the relative paths: a crash image kept for inspection with
    /// `settle waldump`, `settle inspect` and `settle check`.
    pub fn export(&self, to: &Path) -> std::io::Result<()> {
        let st = self.state.lock();
        for dir in &st.dirs {
            std::fs::create_dir_all(to.join(dir.strip_prefix("/").unwrap_or(dir)))?;
        }
        for (path, ino) in &st.names {
            let Some(node) = st.inodes.get(ino) else { continue };
            let mut bytes = vec![0u8; node.current.len as usize];
            node.current.read(&mut bytes, 0);
            let dest = to.join(path.strip_prefix("/").unwrap_or(path));
            if let Some(parent) = dest.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(dest, bytes)?;
        }
        Ok(())
    }

    /// Changing calls so far (writes, truncations, syncs, creations, removes, renames).
    pub fn ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// From now on, the n-th sync call (`sync` or `sync_dir`; n = 1 is the next one) and every
    /// later one fail with EIO. `None` turns failures off.
    pub fn fail_sync_after(&self, n: Option<u64>) {
        self.state.lock().syncs_until_failure = n;
    }

    /// From now on every `sync` of a file, and `sync_dir` of a directory, whose path ends with
    /// the components of `path_suffix` ([`Path::ends_with`]) fails with EIO. `None` turns it off.
    pub fn fail_syncs_of(&self, path_suffix: Option<PathBuf>) {
        self.state.lock().fail_syncs_of = path_suffix;
    }

    /// Caps the sum of all file lengths; writes beyond it fail with ENOSPC. `None`: no cap.
    pub fn set_space_limit(&self, bytes: Option<u64>) {
        self.state.lock().space_limit = bytes;
    }

    /// Reads of every path containing `path_substring` fail with EIO. `None` turns it off.
    pub fn fail_reads_of(&self, path_substring: Option<String>) {
        self.state.lock().fail_reads_of = path_substring;
    }

    /// Number of `sync` and `sync_dir` calls so far (failed ones included).
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Bytes accepted by `write_at` so far.
    pub fn bytes_written(&self) -> u64 {
        self.state.lock().bytes_written
    }

    /// Space taken by all files: each file's current length, or its reservation if larger.
    pub fn total_bytes(&self) -> u64 {
        self.state.lock().total_bytes
    }
}

/// Replays one unsynced op over `content` as a power loss might: kept with probability 1/2;
/// a kept write longer than a sector is torn with probability 1/2 to a prefix of whole
/// sectors.
fn apply_maybe(content: &mut Content, op: &Op, rng: &mut SplitMix) {
    if rng.below(2) == 0 {
        return;
    }
    match op {
        Op::SetLen(len) => content.set_len(*len),
        Op::Write { offset, data } => {
            let mut keep = data.len();
            if data.len() > SECTOR && rng.below(2) == 0 {
                keep = rng.below((data.len() / SECTOR) as u64 + 1) as usize * SECTOR;
                keep = keep.min(data.len());
            }
            if keep > 0 {
                content.write(&data[..keep], *offset);
            }
        }
    }
}

impl File for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let mut st = self.state.lock();
        if let Some(s) = &st.fail_reads_of {
            if self.path.to_string_lossy().contains(s.as_str()) {
                return Err(os_err("read", &self.path, EIO));
            }
        }
        Ok(st.inode(self.ino, "read", &self.path)?.current.read(buf, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let mut st = self.state.lock();
        st.tick();
        let node = st.inode(self.ino, "write", &self.path)?;
        let (old, reserved) = (node.space(), node.reserved);
        let new = old.max(offset + buf.len() as u64).max(reserved);
        st.account(old, new, &self.path)?;
        st.bytes_written += buf.len() as u64;
        let node = st.inode(self.ino, "write", &self.path)?;
        node.current.write(buf, offset);
        node.unsynced.push(Op::Write { offset, data: buf.to_vec() });
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        let mut st = self.state.lock();
        st.tick();
        if st.syncs_lie {
            st.syncs += 1;
            return Ok(());
        }
        let fails = st.sync_fails() | st.sync_targeted(&self.path);
        let node = st.inode(self.ino, "fsync", &self.path)?;
        if fails {
            node.current = node.durable.clone();
            node.unsynced.clear();
            recount(&mut st);
            return Err(os_err("fsync", &self.path, EIO));
        }
        node.durable = node.current.clone();
        node.unsynced.clear();
        // A created file becomes durable with its first sync (ext4-like); see module docs.
        let ino = self.ino;
        let never_linked = !st.durable_names.values().any(|&i| i == ino);
        if never_linked {
            let paths: Vec<PathBuf> = st.names.iter().filter(|&(_, &i)| i == ino).map(|(p, _)| p.clone()).collect();
            for p in paths {
                st.durable_names.entry(p).or_insert(ino);
            }
        }
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        let mut st = self.state.lock();
        Ok(st.inode(self.ino, "stat", &self.path)?.current.len)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let mut st = self.state.lock();
        st.tick();
        let node = st.inode(self.ino, "truncate", &self.path)?;
        let old = node.space();
        // Truncation gives up the reservation beyond the new length (as it frees blocks).
        let reserved = node.reserved.min(len);
        st.account(old, len.max(reserved), &self.path)?;
        let node = st.inode(self.ino, "truncate", &self.path)?;
        node.reserved = reserved;
        node.current.set_len(len);
        node.unsynced.push(Op::SetLen(len));
        Ok(())
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// A reservation past the space limit fails with ENOSPC, as `fallocate` does; one that fits
    /// is counted as space taken until the file's length passes it (see the module doc).
    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        let mut st = self.state.lock();
        if st.no_allocate {
            return Ok(());
        }
        let old = st.inode(self.ino, "allocate space in", &self.path)?.space();
        let new = old.max(offset.saturating_add(len));
        let total = st.total_bytes - old + new;
        if st.space_limit.is_some_and(|l| total > l) {
            return Err(os_err("allocate space in", &self.path, ENOSPC));
        }
        st.total_bytes = total;
        let node = st.inode(self.ino, "allocate space in", &self.path)?;
        node.reserved = node.reserved.max(offset.saturating_add(len));
        Ok(())
    }
}

/// Recomputes the space accounting from scratch (after content reverted).
fn recount(st: &mut State) {
    st.total_bytes = st.inodes.values().map(Inode::space).sum();
}

impl FileSystem for FaultFs {
    fn open(&self, path: &Path, create: bool) -> Result<Arc<dyn File>> {
        let mut st = self.state.lock();
        let ino = match st.names.get(path) {
            Some(&ino) => ino,
            None if create => {
                st.tick();
                if !st.dir_exists(&parent(path)) || st.dirs.contains(path) {
                    return Err(os_err("open", path, ENOENT));
                }
                let ino = st.next_ino;
                st.next_ino += 1;
                st.inodes.insert(ino, Inode::default());
                st.names.insert(path.to_path_buf(), ino);
                ino
            }
            None => return Err(os_err("open", path, ENOENT)),
        };
        Ok(Arc::new(FaultFile { state: Arc::clone(&self.state), ino, path: path.to_path_buf() }))
    }

    fn exists(&self, path: &Path) -> bool {
        let st = self.state.lock();
        st.names.contains_key(path) || st.dirs.contains(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut st = self.state.lock();
        st.tick();
        if let Some(ino) = st.names.remove(path) {
            st.collect(ino);
        } else if st.dirs.contains(path) {
            let has_children = st.names.keys().chain(st.dirs.iter()).any(|p| p.parent() == Some(path));
            if has_children {
                return Err(os_err("remove", path, 39)); // ENOTEMPTY
            }
            st.dirs.remove(path);
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut st = self.state.lock();
        st.tick();
        if !st.dir_exists(&parent(to)) {
            return Err(os_err("rename", from, ENOENT));
        }
        let ino = st.names.remove(from).ok_or_else(|| os_err("rename", from, ENOENT))?;
        if let Some(old) = st.names.insert(to.to_path_buf(), ino) {
            st.collect(old);
        }
        Ok(())
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut st = self.state.lock();
        for dir in path.ancestors() {
            if st.dir_exists(dir) {
                break;
            }
            if st.names.contains_key(dir) {
                return Err(os_err("create directory", dir, 17)); // EEXIST: a file
            }
            st.dirs.insert(dir.to_path_buf());
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let st = self.state.lock();
        if !st.dir_exists(dir) {
            return Err(os_err("list directory", dir, ENOENT));
        }
        let mut out: Vec<String> = st
            .names
            .keys()
            .chain(st.dirs.iter())
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut st = self.state.lock();
        st.tick();
        if st.syncs_lie {
            st.syncs += 1;
            return Ok(());
        }
        if !st.dir_exists(dir) {
            return Err(os_err("open directory", dir, ENOENT));
        }
        if st.sync_fails() | st.sync_targeted(dir) {
            return Err(os_err("fsync directory", dir, EIO));
        }
        let in_dir = |p: &Path| p.parent() == Some(dir);
        let dropped: Vec<u64> = st.durable_names.iter().filter(|(p, _)| in_dir(p)).map(|(_, &i)| i).collect();
        st.durable_names.retain(|p, _| !in_dir(p));
        let current: Vec<(PathBuf, u64)> =
            st.names.iter().filter(|(p, _)| in_dir(p)).map(|(p, &i)| (p.clone(), i)).collect();
        st.durable_names.extend(current);
        for ino in dropped {
            st.collect(ino);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
