//! The synchronization seam: locks, condition variables, atomics, sleeping and thread-locals
//! for the modules whose protocols are tested under [shuttle] (a randomized and PCT scheduler
//! that explores thread interleavings): the buffer pool (`buffer.rs`: pins, content locks, the
//! cleanup lock, clock sweep, write-back) and the WAL (`wal/mod.rs`: insert, write-out, group
//! commit flush).
//!
//! # Two builds
//!
//! * **Normal builds** (the `shuttle` feature off, the default): plain re-exports of
//!   `parking_lot`'s `Mutex`/`RwLock`/`Condvar` and their guards, `std::sync::atomic`,
//!   `std::thread::sleep` and `std::thread_local!`. There is no wrapper and no indirection, so the
//!   modules cost exactly what they cost when they imported those crates directly.
//! * **`--features shuttle`**: the same names backed by `shuttle::sync`, `shuttle::thread` and
//!   `shuttle::thread_local!` (`sleep` yields), wrapped where shuttle's API (std's: `lock()` returns a
//!   `LockResult`, `Condvar::wait` takes the guard by value) differs from `parking_lot`'s. Every
//!   lock, atomic access and spawn is then a point where shuttle may switch threads. A build
//!   with the feature only works inside `shuttle::check_*` (its primitives panic elsewhere), so
//!   it is for `tests/shuttle.rs` and nothing else.
//!
//! # What goes through the seam
//!
//! Only the modules under test import from here (`buffer.rs`, `wal/mod.rs`, and the B-tree,
//! which names the buffer pool's guard types). Everything else keeps `parking_lot` and
//! `std::sync`: shuttle never preempts a thread inside those, which is sound as long as no
//! lock of theirs is held across a call into a module that uses the seam and blocks there
//! (the file systems' internal locks are leaves).
//!
//! A thread-local used across a lock (the WAL's record-assembly buffer is borrowed while the
//! insert lock is taken) must come from [`thread_local!`](crate::sync::thread_local): shuttle
//! runs its threads as coroutines on one OS thread, where a `std` thread-local would be shared
//! by all of them.
//!
//! [shuttle]: https://github.com/awslabs/shuttle

#[cfg(not(feature = "shuttle"))]
mod imp {
    pub use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
    pub use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
    pub use std::thread::sleep;
    pub(crate) use std::thread_local;
}

#[cfg(feature = "shuttle")]
mod imp {
    use std::ops::{Deref, DerefMut};
    use std::sync::PoisonError;
    use std::time::Duration;

    pub use shuttle::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
    pub use shuttle::sync::{RwLockReadGuard, RwLockWriteGuard};
    pub(crate) use shuttle::thread_local;

    /// A waiting loop's pause (`cleanup_lock`'s): a yield, which also lowers the thread's
    /// priority under PCT. Shuttle's own `sleep` is a bare context switch, so PCT would run a
    /// high-priority waiter forever and report the unfair schedule as a livelock.
    pub fn sleep(_: Duration) {
        shuttle::thread::yield_now();
    }

    /// `parking_lot::Mutex`'s API over `shuttle::sync::Mutex`.
    #[derive(Default)]
    pub struct Mutex<T>(shuttle::sync::Mutex<T>);

    /// `parking_lot::MutexGuard`'s API; the inner guard is `None` only inside
    /// [`Condvar::wait_for`].
    pub struct MutexGuard<'a, T> {
        inner: Option<shuttle::sync::MutexGuard<'a, T>>,
    }

    impl<T> Mutex<T> {
        pub fn new(value: T) -> Mutex<T> {
            Mutex(shuttle::sync::Mutex::new(value))
        }

        pub fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard { inner: Some(self.0.lock().unwrap_or_else(PoisonError::into_inner)) }
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.inner.as_ref().expect("mutex guard held")
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.inner.as_mut().expect("mutex guard held")
        }
    }

    /// `parking_lot::RwLock`'s API over `shuttle::sync::RwLock`.
    #[derive(Default)]
    pub struct RwLock<T>(shuttle::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub fn new(value: T) -> RwLock<T> {
            RwLock(shuttle::sync::RwLock::new(value))
        }

        pub fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(PoisonError::into_inner)
        }

        pub fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(PoisonError::into_inner)
        }

        pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
            self.0.try_write().ok()
        }
    }

    /// `parking_lot::Condvar`'s API over `shuttle::sync::Condvar`.
    #[derive(Default)]
    pub struct Condvar(shuttle::sync::Condvar);

    impl Condvar {
        pub fn new() -> Condvar {
            Condvar(shuttle::sync::Condvar::new())
        }

        /// Waits for a notification or the timeout (shuttle decides which happens); returns
        /// whether it timed out.
        pub fn wait_for<T>(&self, guard: &mut MutexGuard<'_, T>, timeout: Duration) -> bool {
            let inner = guard.inner.take().expect("mutex guard held");
            let (inner, result) = self.0.wait_timeout(inner, timeout).unwrap_or_else(PoisonError::into_inner);
            guard.inner = Some(inner);
            result.timed_out()
        }

        pub fn notify_one(&self) {
            self.0.notify_one();
        }

        pub fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}

pub use imp::*;
