//! Reads served from a shared read-only mapping of the file instead of `pread`.
//!
//! A buffer-pool miss on a page the kernel already caches costs a `pread`: a system call, a
//! page-cache lookup per 4 kB page and a kernel copy. Through a mapping whose page-table
//! entries are already filled, the same read is one user-space copy. `settle bench pgbench -S`
//! at scale 50 with the default 128 MB of shared buffers (1.36 misses per transaction, about
//! two fifths of its profile in `pread`) ran about 1.2x faster with it, runs alternating.
//! Writes still go through `pwrite`; Linux keeps a shared mapping and the page cache the same
//! pages, so a read through the mapping sees every completed write.
//!
//! On by default; `mapped_reads = off` reads with `pread` only (`Config::mapped_reads`). It
//! was off for a while because a loaded `settle torture --workload tpcc` run lost district
//! updates with it on (one in 27 runs); the cause was a heap race in relation extension,
//! independent of how pages are read (`heap::init_if_new`), and with that fixed 123 runs in a
//! row passed with mapped reads on.
//!
//! What a mapping could do that `pread` cannot, and how each is prevented:
//!
//! * **Touching a page past the end of the file** raises SIGBUS. The mapping serves only
//!   `[0, known_len)`, the length this handle knows the file to have: raised by each completed
//!   `write_at`, lowered by `set_len` before it shrinks the file. Anything else goes to
//!   `pread`. The engine owns its data directory (one process, see `Database::open`'s lock),
//!   so nobody else shrinks the files, and it does not read the blocks it truncates away; a
//!   copy that still loses its page takes the path of the next point.
//! * **An I/O error on a page the kernel must read in** raises SIGBUS too, where `pread` would
//!   return EIO. A process-wide SIGBUS handler, installed with the first mapping, looks at the
//!   faulting thread's guard: inside one of our copies it maps a private page over the faulting
//!   page (so the copy finishes) and flags the thread; the copy is then thrown away, the
//!   mapping is retired (every later read of the file goes to `pread`) and the read is repeated
//!   with `pread`, which reports the error with the file's name. The page it maps holds 0xFF
//!   bytes, not zeros: another thread copying the same page before the retirement shows (each
//!   copy checks it after copying) reads bytes that fail a page's checksum or a WAL record's
//!   CRC, never an all-zero page, which would read as a valid empty one. A SIGBUS outside our
//!   copies is passed to the handler that was there before (the default one ends the process).
//!
//! Mappings cost address space and one of the kernel's `vm.max_map_count` slots, so only files
//! of at least [`MIN_MAPPED`] are mapped, at most [`MAX_MAPPINGS`] at once in the process; the
//! rest keep `pread`. A growing file gets a larger region (see [`Mapped`]).

use std::sync::atomic::{compiler_fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Files shorter than this are read with `pread` (small relations live in the buffer pool).
pub const MIN_MAPPED: u64 = 1 << 20;

/// The most files mapped at once in the process. Each holds up to a few regions (see
/// [`Mapped`]), and the kernel's default limit is 65,530 regions for everything: heap,
/// threads' stacks, libraries.
pub const MAX_MAPPINGS: usize = 2048;

static MAPPINGS: AtomicUsize = AtomicUsize::new(0);

/// One file's mapping.
///
/// Reads take no lock. The current region is published through an atomic pointer; when the
/// file outgrows it, a larger region is mapped (four times the file's length) and published,
/// and the old one stays mapped until the file is closed, so a copy that started in it still
/// reads mapped memory. Regions only grow fourfold, so the ones kept add at most a third to the
/// address space, and a file rarely has more than a handful.
pub(super) struct Mapped {
    /// The file's length as far as this handle knows (see the module docs).
    known_len: AtomicU64,
    /// Set once the mapping may no longer be trusted or could not be made: `pread` only.
    retired: AtomicBool,
    /// The newest region, or null before the first. Points into `regions`.
    current: AtomicPtr<Region>,
    /// Every region made, unmapped on drop. Locked only to map a new one. Boxed so that
    /// `current` stays valid when the vector grows.
    #[allow(clippy::vec_box)]
    regions: Mutex<Vec<Box<Region>>>,
}

struct Region {
    ptr: *mut u8,
    /// Bytes mapped; may run past the end of the file, which is why reads are checked
    /// against `known_len`.
    len: usize,
}

// SAFETY: a region is a read-only view of a file that stays mapped until its `Mapped` is
// dropped; threads only copy out of it.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

/// What [`Mapped::read`] did.
pub(super) enum Served {
    /// `buf` holds the bytes.
    Done,
    /// Read it with `pread`.
    Fallback,
}

impl Mapped {
    /// A file of `len` bytes; `enabled` false reads it with `pread` only.
    pub(super) fn new(len: u64, enabled: bool) -> Mapped {
        Mapped {
            known_len: AtomicU64::new(len),
            retired: AtomicBool::new(!enabled || !cfg!(target_os = "linux")),
            current: AtomicPtr::new(std::ptr::null_mut()),
            regions: Mutex::new(Vec::new()),
        }
    }

    /// A write of `[offset, end)` completed: the file is at least `end` bytes long.
    pub(super) fn wrote(&self, end: u64) {
        self.known_len.fetch_max(end, Ordering::AcqRel);
    }

    /// The file is about to be cut to `len` bytes: stop serving what lies beyond. (A copy
    /// already past this check that then touches a vanished page gets the SIGBUS treatment of
    /// the module docs; the engine does not read blocks it is truncating away.)
    pub(super) fn truncating(&self, len: u64) {
        self.known_len.fetch_min(len, Ordering::AcqRel);
    }

    /// Copies `[offset, offset + buf.len())` from the mapping, mapping a larger region first
    /// when the file has outgrown it. `fd` is the file's descriptor.
    pub(super) fn read(&self, fd: i32, buf: &mut [u8], offset: u64) -> Served {
        if self.retired.load(Ordering::Relaxed) {
            return Served::Fallback;
        }
        let Some(end) = offset.checked_add(buf.len() as u64) else { return Served::Fallback };
        let known = self.known_len.load(Ordering::Acquire);
        if end > known {
            return Served::Fallback;
        }
        let mut region = self.current.load(Ordering::Acquire);
        // SAFETY: a non-null `current` points at a boxed region in `regions`, which lives
        // until `self` is dropped.
        if region.is_null() || unsafe { (*region).len as u64 } < end {
            if known < MIN_MAPPED {
                return Served::Fallback;
            }
            match self.grow(fd, known) {
                Some(r) => region = r,
                None => return Served::Fallback,
            }
        }
        // SAFETY: as above; `region` is live and covers `end`.
        self.copy(unsafe { &*region }, buf, offset)
    }

    fn copy(&self, region: &Region, buf: &mut [u8], offset: u64) -> Served {
        let Ok(off) = usize::try_from(offset) else { return Served::Fallback };
        if off.checked_add(buf.len()).is_none_or(|e| e > region.len) {
            return Served::Fallback;
        }
        GUARD.with(|g| {
            g.start.store(region.ptr as usize, Ordering::Relaxed);
            g.end.store(region.ptr as usize + region.len, Ordering::Relaxed);
        });
        // The handler runs on this thread, between these instructions: keep the compiler from
        // moving the guard's stores and loads across the copy.
        compiler_fence(Ordering::SeqCst);
        // SAFETY: `off + buf.len() <= region.len` (checked above) and `<= known_len` (checked
        // by the caller), so the source lies inside a live mapping and inside the file; `buf`
        // is a distinct, writable slice. A SIGBUS during the copy (an I/O error, a page cut
        // away) is turned into a zero page by the handler, so the copy always completes.
        unsafe { std::ptr::copy_nonoverlapping(region.ptr.add(off), buf.as_mut_ptr(), buf.len()) };
        compiler_fence(Ordering::SeqCst);
        // Another thread's fault may have replaced a page this copy read (with the poison of
        // `on_sigbus`): a retired mapping's copy is never trusted.
        if self.retired.load(Ordering::Acquire) {
            GUARD.with(|g| {
                g.start.store(0, Ordering::Relaxed);
                g.end.store(0, Ordering::Relaxed);
                g.faulted.store(false, Ordering::Relaxed);
            });
            return Served::Fallback;
        }
        let faulted = GUARD.with(|g| {
            g.start.store(0, Ordering::Relaxed);
            g.end.store(0, Ordering::Relaxed);
            // Not `swap`: a locked instruction would wait for the copy's stores to drain.
            g.faulted.load(Ordering::Relaxed)
        });
        if faulted {
            GUARD.with(|g| g.faulted.store(false, Ordering::Relaxed));
            // The page now reads as zeros whatever the file holds: never trust it again.
            self.retired.store(true, Ordering::Release);
            return Served::Fallback;
        }
        Served::Done
    }

    /// Maps a region covering at least `want` bytes (unless another thread just did) and
    /// publishes it. `None` when it cannot: the file is then read with `pread` from now on.
    #[cfg(target_os = "linux")]
    fn grow(&self, fd: i32, want: u64) -> Option<*mut Region> {
        let mut regions = self.regions.lock();
        if let Some(r) = regions.last() {
            if r.len as u64 >= want {
                return Some(self.current.load(Ordering::Acquire));
            }
        }
        if self.retired.load(Ordering::Relaxed) {
            return None;
        }
        let retire = || {
            self.retired.store(true, Ordering::Release);
            None
        };
        let size = usize::try_from(want).ok().and_then(|w| w.checked_mul(4)).and_then(usize::checked_next_power_of_two);
        let Some(size) = size else { return retire() };
        if regions.is_empty() {
            if MAPPINGS.fetch_add(1, Ordering::AcqRel) >= MAX_MAPPINGS {
                MAPPINGS.fetch_sub(1, Ordering::AcqRel);
                return retire();
            }
            install_sigbus_handler();
        }
        // SAFETY: a new shared read-only mapping of a descriptor we own; the kernel picks the
        // address. The result is checked for MAP_FAILED.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            if regions.is_empty() {
                MAPPINGS.fetch_sub(1, Ordering::AcqRel);
            }
            return retire();
        }
        regions.push(Box::new(Region { ptr: p.cast(), len: size }));
        let newest: *mut Region = &mut **regions.last_mut()?;
        self.current.store(newest, Ordering::Release);
        Some(newest)
    }

    #[cfg(not(target_os = "linux"))]
    fn grow(&self, _fd: i32, _want: u64) -> Option<*mut Region> {
        None
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        let regions = self.regions.get_mut();
        for r in regions.iter() {
            // SAFETY: each region was mapped by `grow` with this length, and nothing else can
            // reach it (we are being dropped).
            unsafe { libc::munmap(r.ptr.cast(), r.len) };
        }
        if !regions.is_empty() {
            MAPPINGS.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The calling thread's copy in progress, for the SIGBUS handler. Const-initialised, without
/// destructors: reaching them from a signal handler allocates nothing. Atomics (used only by
/// their own thread) because the handler interrupts that thread between any two instructions.
struct Guard {
    start: AtomicUsize,
    end: AtomicUsize,
    faulted: AtomicBool,
}

thread_local! {
    static GUARD: Guard = const {
        Guard { start: AtomicUsize::new(0), end: AtomicUsize::new(0), faulted: AtomicBool::new(false) }
    };
}

#[cfg(target_os = "linux")]
static PREVIOUS: std::sync::OnceLock<libc::sigaction> = std::sync::OnceLock::new();

#[cfg(target_os = "linux")]
fn install_sigbus_handler() {
    PREVIOUS.get_or_init(|| {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; sigaction is
        // given valid pointers, and our handler is async-signal-safe (see `on_sigbus`).
        unsafe {
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = on_sigbus as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut new.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGBUS, &new, &mut old);
            old
        }
    });
}

/// The SIGBUS handler: see the module docs. Uses only `mmap` and `sigaction`, no allocation
/// and no locks.
#[cfg(target_os = "linux")]
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let ours = GUARD
        .try_with(|g| {
            if g.start.load(Ordering::Relaxed) <= addr && addr < g.end.load(Ordering::Relaxed) {
                g.faulted.store(true, Ordering::Relaxed);
                true
            } else {
                false
            }
        })
        .unwrap_or(false);
    if ours {
        let page = addr & !(4096 - 1);
        // SAFETY: `page` lies inside this thread's mapping (checked above), which stays mapped
        // while the copy runs; replacing it with an anonymous page filled with 0xFF lets the
        // faulting instruction complete. If mmap fails the signal repeats and the default
        // action ends the process, as without the handler.
        unsafe {
            let p = libc::mmap(
                page as *mut libc::c_void,
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
            if p != libc::MAP_FAILED {
                std::ptr::write_bytes(p.cast::<u8>(), 0xFF, 4096);
                libc::mprotect(p, 4096, libc::PROT_READ);
            }
        }
        return;
    }
    // Not ours: hand the signal to whoever had it before.
    let Some(prev) = PREVIOUS.get() else { return };
    if prev.sa_flags & libc::SA_SIGINFO != 0 && prev.sa_sigaction > libc::SIG_IGN {
        // SAFETY: the previous handler was installed as an SA_SIGINFO handler with this type.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig, info, ctx);
    } else if prev.sa_sigaction > libc::SIG_IGN {
        // SAFETY: a plain handler installed without SA_SIGINFO.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig);
    } else {
        // SAFETY: restoring the previous (default) disposition; returning re-executes the
        // faulting instruction, which then gets that disposition.
        unsafe { libc::sigaction(libc::SIGBUS, prev, std::ptr::null_mut()) };
    }
}

#[cfg(not(target_os = "linux"))]
fn install_sigbus_handler() {}

#[cfg(test)]
mod tests {
    use super::MIN_MAPPED;
    use crate::io::{FileSystem, RealFs};

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    #[test]
    fn reads_through_the_mapping_see_every_write_and_stop_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rel");
        let f = RealFs.open(&path, true).unwrap();
        let len = 2 * MIN_MAPPED as usize;
        f.write_at(&pattern(len, 1), 0).unwrap();
        let mut buf = vec![0u8; 8192];
        f.read_at(&mut buf, 8192 * 7).unwrap();
        assert_eq!(buf, pattern(len, 1)[8192 * 7..8192 * 8]);
        // A later write is visible through the mapping made by the read above.
        f.write_at(&[0xAB; 8192], 8192 * 7).unwrap();
        assert_eq!(f.read_at(&mut buf, 8192 * 7).unwrap(), 8192);
        assert_eq!(buf, vec![0xAB; 8192]);
        // Growth past the mapping: the mapping is enlarged (or the read falls back).
        f.write_at(&pattern(len, 2), len as u64).unwrap();
        assert_eq!(f.read_at(&mut buf, len as u64 + 8192).unwrap(), 8192);
        assert_eq!(buf, pattern(len, 2)[8192..16384]);
        // Shrinking: reads past the new end are short, as with pread.
        f.set_len(MIN_MAPPED).unwrap();
        assert_eq!(f.read_at(&mut buf, MIN_MAPPED).unwrap(), 0);
        assert_eq!(f.read_at(&mut buf, MIN_MAPPED - 4096).unwrap(), 4096);
        assert_eq!(buf[..4096], pattern(len, 1)[MIN_MAPPED as usize - 4096..MIN_MAPPED as usize]);
    }

    /// A page that vanishes under the mapping (here: the file cut short behind the handle's
    /// back, which raises the same SIGBUS as an I/O error on the page) gives the answer pread
    /// gives, not a dead process.
    #[test]
    fn a_sigbus_in_a_copy_falls_back_to_pread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rel");
        let f = RealFs.open(&path, true).unwrap();
        let len = 2 * MIN_MAPPED as usize;
        f.write_at(&pattern(len, 3), 0).unwrap();
        let mut buf = vec![0u8; 8192];
        f.read_at(&mut buf, 0).unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(8192).unwrap();
        // Past the real end: the copy faults, the handler lets it finish, pread says 0 bytes.
        assert_eq!(f.read_at(&mut buf, 65536).unwrap(), 0);
        // The mapping is retired: later reads are preads and still right.
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 8192);
        assert_eq!(buf, pattern(len, 3)[..8192]);
    }
}
