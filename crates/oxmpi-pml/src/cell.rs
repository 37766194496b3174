//! The cell that holds the protocol engine: a mutex while several threads
//! may use it, nothing at all while one thread alone does.
//!
//! `MPI_THREAD_SINGLE` and `MPI_THREAD_FUNNELED` promise that one thread
//! makes every MPI call. The layer above then calls [`EngineCell::confine`]
//! on that thread, and from then on [`EngineCell::with`] takes no lock, so
//! the small-message path makes no atomic read-modify-write (each one waits
//! for every earlier store to drain; a mutex per call measurably lowered
//! the message rate). The promise is checked, not trusted: a confined cell
//! reached from any other thread, or re-entered from inside a `with`,
//! panics. Before a second thread starts using the cell (a progress
//! thread), its owner calls [`EngineCell::share`], which turns the lock
//! back on for good.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
thread_local! {
    /// Its address names the running thread (cheaper than a `ThreadId`,
    /// which clones the thread's handle).
    static HERE: u8 = const { 0 };
}

/// The running thread's name for [`EngineCell`]: never 0, and distinct
/// among live threads. On x86_64 Linux, the thread pointer (the thread
/// control block's address, which it holds at `%fs:0`): one load, where a
/// thread-local in a shared library (the C ABI's `libmpi_abi.so`) costs a
/// call to `__tls_get_addr`.
#[inline(always)]
fn here() -> usize {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let tp: usize;
        // SAFETY: reads the word at `%fs:0`, the thread control block's
        // pointer to itself, which every thread of an x86_64 Linux process
        // has (the thread ABI); nothing is written.
        unsafe {
            std::arch::asm!(
                "mov {}, qword ptr fs:[0]",
                out(reg) tp,
                options(nostack, readonly, preserves_flags, pure)
            );
        }
        tp
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        HERE.with(|h| h as *const u8 as usize)
    }
}

/// A value that `with` hands out mutably: under a lock while shared, on its
/// owner's thread alone while confined.
pub(crate) struct EngineCell<T> {
    lock: Mutex<()>,
    /// Whether `with` takes the lock (true unless confined). Only the
    /// owner turns it on again, outside `with`, with `Release`: whoever
    /// sees it on (`Acquire`) sees every confined access before.
    shared: AtomicBool,
    /// The confined cell's thread ([`here`]; 0 until `confine`).
    owner: AtomicUsize,
    /// Confined: a `with` is running (a nested one would alias it).
    busy: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through `with`, which either holds the
// mutex (shared) or runs on the owner's thread with no other `with` running
// (confined, checked); `T: Send` because other threads may get it.
unsafe impl<T: Send> Sync for EngineCell<T> {}

/// What a `with` holds while it runs.
enum Guard<'a> {
    /// Shared: the lock.
    Locked(#[allow(dead_code)] std::sync::MutexGuard<'a, ()>),
    /// Confined: the mark that a `with` runs.
    Confined(#[allow(dead_code)] Busy<'a>),
}

/// Clears `busy` when a confined `with` ends, even by a panic.
struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

impl<T> EngineCell<T> {
    /// A shared cell (every `with` locks).
    pub(crate) fn new(value: T) -> Self {
        EngineCell {
            lock: Mutex::new(()),
            shared: AtomicBool::new(true),
            owner: AtomicUsize::new(0),
            busy: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Runs `f` on the value: under the lock while shared; directly while
    /// confined, on the owner's thread (any other thread, or a `with`
    /// nested in another, panics: while shared the nesting would deadlock).
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        // `f` is called from one place, so it is inlined once.
        let _guard = if self.shared.load(Ordering::Acquire) {
            Guard::Locked(self.lock.lock().unwrap_or_else(|p| p.into_inner()))
        } else {
            self.enter_confined()
        };
        // SAFETY: shared, the mutex is held, and every confined access
        // happened before (`shared` was turned on with `Release` by the
        // owner outside `with` and read here with `Acquire`), so this is
        // the only reference. Confined, this is the owner's thread and no
        // other `with` runs on it (`enter_confined` checked both), and no
        // other thread gets past `enter_confined` while confined.
        f(unsafe { &mut *self.value.get() })
    }

    /// The checks of a confined `with`: the owner's thread, not nested.
    #[inline(always)]
    fn enter_confined(&self) -> Guard<'_> {
        assert!(
            self.owner.load(Ordering::Relaxed) == here(),
            "MPI called from a thread other than the one that initialized it \
             at MPI_THREAD_SINGLE or MPI_THREAD_FUNNELED"
        );
        assert!(
            !self.busy.load(Ordering::Relaxed),
            "the PML was re-entered from inside itself"
        );
        self.busy.store(true, Ordering::Relaxed);
        Guard::Confined(Busy(&self.busy))
    }

    /// Stops locking: from now on the calling thread alone uses the cell
    /// (until it calls [`EngineCell::share`]). Call it outside `with`;
    /// once shared, a cell stays shared.
    pub(crate) fn confine(&self) {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.shared.load(Ordering::Relaxed) && self.owner.load(Ordering::Relaxed) == 0 {
            self.owner.store(here(), Ordering::Relaxed);
            self.shared.store(false, Ordering::Release);
        }
    }

    /// Locks again from now on: the owner calls it before a second thread
    /// starts using a confined cell (from any other thread, or inside
    /// `with`, it panics; on a shared cell it does nothing).
    pub(crate) fn share(&self) {
        if self.shared.load(Ordering::Acquire) {
            return;
        }
        assert!(
            self.owner.load(Ordering::Relaxed) == here() && !self.busy.load(Ordering::Relaxed),
            "a confined PML shared from another thread or from inside itself"
        );
        self.shared.store(true, Ordering::Release);
    }

    /// Whether `with` takes the lock.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::EngineCell;

    #[test]
    fn shared_cells_serialise_threads() {
        let c = EngineCell::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        c.with(|v| *v += 1);
                    }
                });
            }
        });
        assert_eq!(c.with(|v| *v), 40_000);
    }

    #[test]
    fn a_confined_cell_refuses_other_threads_and_nesting() {
        let c = EngineCell::new(1u32);
        c.confine();
        assert!(!c.is_shared());
        c.with(|v| *v += 1);
        let nested = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.with(|_| c.with(|v| *v += 1))
        }));
        assert!(nested.is_err(), "a nested with must panic, never alias");
        // The panic cleared the mark: the cell is usable again.
        assert_eq!(c.with(|v| *v), 2);
        std::thread::scope(|s| {
            let other = s.spawn(|| c.with(|v| *v += 1));
            assert!(other.join().is_err(), "another thread must panic");
            let share = s.spawn(|| c.share());
            assert!(share.join().is_err(), "only the owner shares");
        });
        assert!(!c.is_shared());
        assert_eq!(c.with(|v| *v), 2);
        c.share();
        std::thread::scope(|s| {
            s.spawn(|| c.with(|v| *v += 1));
        });
        assert_eq!(c.with(|v| *v), 3);
        // Shared for good.
        c.confine();
        assert!(c.is_shared());
    }
}
