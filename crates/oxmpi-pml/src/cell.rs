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

use std::cell::Cell;

// The loom shim: under `--cfg loom` the lock, the atomics and the value's
// cell are loom's, so the model checker sees every access `with`,
// `confine` and `share` make (`tests` below, `loom_models`).
#[cfg(loom)]
use loom::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
    sync::{Mutex, MutexGuard},
};
#[cfg(not(loom))]
use std::{
    cell::UnsafeCell,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
    sync::{Mutex, MutexGuard},
};

#[cfg(all(not(loom), not(all(target_arch = "x86_64", target_os = "linux"))))]
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
    #[cfg(loom)]
    {
        // Loom's threads share one OS thread: a loom thread-local of its
        // own, numbered from 1.
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
        loom::thread_local! {
            static ID: usize = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        ID.with(|id| *id)
    }
    #[cfg(all(not(loom), target_arch = "x86_64", target_os = "linux"))]
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
    #[cfg(all(not(loom), not(all(target_arch = "x86_64", target_os = "linux"))))]
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
    /// Confined: a `with` is running (a nested one would alias it). Only
    /// the owner's thread reads or writes it (every access checks `owner`
    /// first), so it is a plain `Cell`.
    busy: Cell<bool>,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through `with` (or `try_sendi`), which
// either holds the mutex (shared) or runs on the owner's thread with no
// other `with` running (confined, checked); `T: Send` because other threads
// may get it. `busy` is read and written only on the owner's thread: every
// access follows a check that the caller is the owner (`owner` is set once,
// under the lock, before `shared` is turned off).
unsafe impl<T: Send> Sync for EngineCell<T> {}

/// What a `with` holds while it runs.
enum Guard<'a> {
    /// Shared: the lock.
    Locked(#[allow(dead_code)] MutexGuard<'a, ()>),
    /// Confined: the mark that a `with` runs.
    Confined(#[allow(dead_code)] Busy<'a>),
}

/// Clears `busy` when a confined `with` ends, even by a panic.
struct Busy<'a>(&'a Cell<bool>);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl<T> EngineCell<T> {
    /// A shared cell (every `with` locks).
    pub(crate) fn new(value: T) -> Self {
        EngineCell {
            lock: Mutex::new(()),
            shared: AtomicBool::new(true),
            owner: AtomicUsize::new(0),
            busy: Cell::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Runs `f` on the value: under the lock while shared; directly while
    /// confined, on the owner's thread (any other thread, or a `with`
    /// nested in another, panics: while shared the nesting would deadlock).
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        // `f` is called from one place, so it is inlined once.
        let _guard = if self.shared.load(Ordering::Acquire) {
            let g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            // `confine` turns `shared` off under the lock: seen here, the
            // cell was confined while this thread waited for it.
            if self.shared.load(Ordering::Relaxed) {
                Guard::Locked(g)
            } else {
                drop(g);
                self.enter_confined()
            }
        } else {
            self.enter_confined()
        };
        // SAFETY: shared, the mutex is held and `shared` was still on under
        // it (`confine` turns it off only under the mutex, so no confined
        // `with` starts before this guard is dropped), and every confined
        // access happened before (`shared` was turned on with `Release` by
        // the owner outside `with` and read here with `Acquire`): this is
        // the only reference. Confined, this is the owner's thread and no
        // other `with` runs on it (`enter_confined` checked both), and no
        // other thread gets past `enter_confined` while confined.
        f(unsafe { &mut *self.value_ptr() })
    }

    /// The value's address. Under loom, reading it records a write access
    /// of this thread, which the model checks against every other thread's.
    #[inline(always)]
    fn value_ptr(&self) -> *mut T {
        #[cfg(not(loom))]
        {
            self.value.get()
        }
        #[cfg(loom)]
        {
            // SAFETY: the pointer is only dereferenced under the same
            // conditions as the `std` cell's (see `with`).
            unsafe { self.value.get_mut().deref() as *mut T }
        }
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
            !self.busy.get(),
            "the PML was re-entered from inside itself"
        );
        self.busy.set(true);
        Guard::Confined(Busy(&self.busy))
    }

    /// Stops locking: from now on the calling thread alone uses the cell
    /// (until it calls [`EngineCell::share`]); a `with` of another thread
    /// waiting for the lock meanwhile panics instead of going on. Call it
    /// outside `with`; once shared, a cell stays shared. Whether it took
    /// effect.
    pub(crate) fn confine(&self) -> bool {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.shared.load(Ordering::Relaxed) && self.owner.load(Ordering::Relaxed) == 0 {
            self.owner.store(here(), Ordering::Relaxed);
            self.shared.store(false, Ordering::Release);
            return true;
        }
        false
    }

    /// Whether the cell is confined to a thread other than the caller's
    /// (a `with` from here would panic).
    pub(crate) fn confined_elsewhere(&self) -> bool {
        !self.shared.load(Ordering::Acquire) && self.owner.load(Ordering::Relaxed) != here()
    }

    /// Locks again from now on: the owner calls it before a second thread
    /// starts using a confined cell (from any other thread, or inside
    /// `with`, it panics; on a shared cell it does nothing).
    pub(crate) fn share(&self) {
        if self.shared.load(Ordering::Acquire) {
            return;
        }
        assert!(
            self.owner.load(Ordering::Relaxed) == here() && !self.busy.get(),
            "a confined PML shared from another thread or from inside itself"
        );
        self.shared.store(true, Ordering::Release);
    }

    /// Whether `with` takes the lock.
    pub(crate) fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Acquire)
    }
}

impl<B: ?Sized + oxmpi_btl::btl::Btl> EngineCell<crate::Engine<B>> {
    /// [`crate::Ob1::sendi_bytes`] on a confined cell: `false`, having run
    /// nothing, when the cell is shared (the caller takes a path that
    /// locks) or where `with` would panic (confined to another thread, or
    /// inside a `with`; the caller's other path reports it). Written out
    /// here, with no closure and no busy mark, so that the immediate send
    /// inlines into its caller whole (marking the cell busy around it cost
    /// 11 stores per send, 2 its own and 9 spills: callgrind), and each
    /// store on this path counts in the slow cross-core state
    /// (`docs/performance.md`). Without the mark a BTL that called back
    /// into the cell from its `sendi` would alias it, so it answers false
    /// unless every BTL promised never to ([`oxmpi_btl::btl::NeverReenters`],
    /// an `unsafe` trait: [`crate::Ob1::btls_never_reenter`]).
    #[inline(always)]
    pub(crate) fn try_sendi(&self, data: &[u8], dst: u32, tag: i32, ctx: u16) -> bool {
        // SAFETY: `sendi_bytes` is the PML's own code over its BTLs, which
        // `unmarked` checked all promise never to re-enter it.
        match unsafe { self.unmarked() } {
            Some(o) => o.sendi_bytes(data, dst, tag, ctx),
            None => false,
        }
    }

    /// [`crate::Ob1::send_eager_now`] of a standard send of the bytes
    /// `data` on a confined cell, as [`EngineCell::try_sendi`] runs the
    /// immediate send: whether it was sent and is complete. The eager
    /// messages above the immediate-send limit, prepared in place (or
    /// copied) into a descriptor that a BTL whose `send` is done on return
    /// sends at once. Out of line, so that the immediate send's callers
    /// keep their registers.
    ///
    /// Under cm, [`crate::cm::Cm::sendi_bytes`]: the MTL's inject, which
    /// completes inside the call (here, not in [`EngineCell::try_sendi`],
    /// where a cm arm cost ob1's `MPI_Isend` 5 to 7 instructions:
    /// callgrind, `scripts/hotpath-counts.sh`).
    #[inline(never)]
    #[cold]
    pub(crate) fn try_send_eager(&self, data: &[u8], dst: u32, tag: i32, ctx: u16) -> bool {
        // SAFETY: `send_eager_now` is the PML's own code over its BTLs,
        // which `unmarked` checked all promise never to re-enter it.
        let Some(o) = (unsafe { self.unmarked() }) else {
            return self.try_inject_cm(data, dst, tag, ctx);
        };
        // SAFETY: the region is `data`, read only inside this call:
        // `send_eager_now` sends only on a BTL whose `send` is done on
        // return (`Caps::SEND_DONE`), frees a descriptor it could not send
        // before it returns, and keeps nothing that refers to the region.
        let buf = crate::Buffer::Contig(unsafe { oxmpi_btl::mem::MemRegion::from_slice(data) });
        o.send_eager_now(&buf, dst, tag, ctx, crate::SendMode::Standard)
            .is_some()
    }

    /// [`EngineCell::try_send_eager`] under cm: [`crate::cm::Cm::sendi_bytes`]
    /// on a confined cell (`false`, having run nothing, as there).
    fn try_inject_cm(&self, data: &[u8], dst: u32, tag: i32, ctx: u16) -> bool {
        if self.shared.load(Ordering::Acquire)
            || self.owner.load(Ordering::Relaxed) != here()
            || self.busy.get()
        {
            return false;
        }
        // SAFETY: confined, on the owner's thread, no `with` running, as
        // for `unmarked`: the only reference while it lives. Without the
        // busy mark, code that called back into the cell would alias it:
        // `sendi_bytes` is cm's own code over its MTL, which has no way to
        // reach the cell (owned by cm inside it; `oxmpi-mtl` cannot name
        // the PML, the layer rule).
        match unsafe { &mut *self.value_ptr() } {
            crate::Engine::Cm(c) => c.sendi_bytes(data, dst, tag, ctx),
            crate::Engine::Ob1(_) => false,
        }
    }

    /// [`crate::Ob1::recv_small`] on a confined cell, as
    /// [`EngineCell::try_sendi`] runs the immediate send: `None`, having
    /// run nothing, where that answers false.
    #[inline(always)]
    pub(crate) fn try_recv_small(
        &self,
        dst: &mut [u8],
        src: oxmpi_match::Source,
        tag: oxmpi_match::Tag,
        ctx: u16,
        polls: u32,
    ) -> Option<crate::Status> {
        // SAFETY: `recv_small` is the PML's own code over its BTLs, which
        // `unmarked` checked all promise never to re-enter it; that includes the
        // queued actions it may run (a CREDIT for the sender, pending sends,
        // RDMA and deregistrations): PML code and calls of those BTLs, none of
        // which enters the cell or calls user code.
        unsafe { self.unmarked() }?.recv_small(dst, src, tag, ctx, polls)
    }

    /// The PML, not marked busy: `None` when the cell is shared, confined
    /// to another thread, inside a `with`, or has a BTL that did not promise
    /// never to re-enter it ([`oxmpi_btl::btl::NeverReenters`]).
    ///
    /// # Safety
    /// The caller runs only the PML's own code with the reference, and
    /// drops it before the cell is used again: nothing it reaches enters
    /// the cell (the PML's code does not, nor do BTLs that implement
    /// [`oxmpi_btl::btl::NeverReenters`]: their `unsafe impl` is the promise).
    #[inline(always)]
    // A `&mut` from `&self`, as `UnsafeCell::get` gives it: unique by the
    // confinement checked here and the contract above.
    #[allow(clippy::mut_from_ref)]
    unsafe fn unmarked(&self) -> Option<&mut crate::Ob1<B>> {
        if self.shared.load(Ordering::Acquire)
            || self.owner.load(Ordering::Relaxed) != here()
            || self.busy.get()
        {
            return None;
        }
        // SAFETY: confined (`shared` off, read with `Acquire`), on the
        // owner's thread, and no `with` running on it (`busy` off): as in
        // `with`, this is the only reference, and the caller's contract
        // keeps it so while it lives. Without the busy mark, a BTL that
        // called back into the cell would alias it: none of `oxmpi-btl`'s
        // does (the promise of their `unsafe impl NeverReenters`), and any
        // other makes this `None` (checked before any BTL is called).
        match unsafe { &mut *self.value_ptr() } {
            crate::Engine::Ob1(o) => o.btls_never_reenter().then_some(o),
            // cm has no immediate or small-message path of its own.
            crate::Engine::Cm(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EngineCell;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Barrier;

    #[test]
    fn a_thread_waiting_for_the_lock_when_the_cell_is_confined_panics() {
        // Another thread holds the lock, a second waits for it, the owner
        // confines: the waiter must not go on under the lock while the
        // owner goes on without it.
        let c = EngineCell::new(0u64);
        let (held, release) = (Barrier::new(2), AtomicBool::new(false));
        std::thread::scope(|s| {
            let holder = s.spawn(|| {
                c.with(|v| {
                    held.wait();
                    while !release.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    *v += 1;
                })
            });
            held.wait();
            let waiter = s.spawn(|| c.with(|v| *v += 100));
            // Give the waiter time to block on the lock, then confine
            // (which waits for the holder) and release the holder.
            std::thread::sleep(std::time::Duration::from_millis(50));
            let owner = s.spawn(|| {
                let confined = c.confine();
                let mine = c.with(|v| *v);
                (confined, mine)
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            release.store(true, Ordering::Release);
            holder.join().unwrap();
            let waited = waiter.join();
            let (confined, mine) = owner.join().expect("the owner goes on");
            assert!(confined, "the cell was shared and never confined before");
            // Either the waiter got the lock before the owner confined (its
            // add is seen), or after: then it must have panicked (the
            // re-check under the lock), never used the value unlocked.
            match waited {
                Ok(()) => assert_eq!(mine, 101, "the waiter ran before the confine"),
                Err(_) => assert_eq!(mine, 1, "the waiter panicked and changed nothing"),
            }
        });
    }

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
        assert!(c.confine());
        assert!(!c.is_shared());
        assert!(!c.confined_elsewhere());
        c.with(|v| *v += 1);
        let nested = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.with(|_| c.with(|v| *v += 1))
        }));
        assert!(nested.is_err(), "a nested with must panic, never alias");
        // The panic cleared the mark: the cell is usable again.
        assert_eq!(c.with(|v| *v), 2);
        std::thread::scope(|s| {
            assert!(s.spawn(|| c.confined_elsewhere()).join().unwrap());
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
        assert!(!c.confine());
        assert!(c.is_shared());
    }
}

/// The cell under loom: `RUSTFLAGS="--cfg loom" cargo test -p oxmpi-pml
/// --lib --release loom_models` (CI runs it). A `with` that touched the
/// value without the lock while another thread held it would be a data
/// race loom reports (the value's cell is loom's: see `value_ptr`).
#[cfg(all(test, loom))]
mod loom_models {
    use super::EngineCell;
    use loom::sync::Arc;
    use loom::thread;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }

    /// Shared: two threads' `with`s exclude each other; every increment
    /// lands.
    #[test]
    fn shared_withs_exclude_each_other() {
        model(|| {
            let c = Arc::new(EngineCell::new(0u64));
            let c2 = Arc::clone(&c);
            let t = thread::spawn(move || {
                c2.with(|v| *v += 1);
                c2.with(|v| *v += 1);
            });
            c.with(|v| *v += 10);
            t.join().unwrap();
            assert_eq!(c.with(|v| *v), 12);
        });
    }

    /// Confined, then shared again by its owner before a second thread
    /// starts: the owner's unlocked writes are seen by the other thread's
    /// locked `with`, and the two then exclude each other.
    #[test]
    fn confined_then_shared_hands_over_its_writes() {
        model(|| {
            let c = Arc::new(EngineCell::new(0u64));
            assert!(c.confine());
            c.with(|v| *v += 1);
            assert!(!c.is_shared());
            c.share();
            let c2 = Arc::clone(&c);
            let t = thread::spawn(move || c2.with(|v| *v += 100));
            c.with(|v| *v += 10);
            t.join().unwrap();
            assert_eq!(c.with(|v| *v), 111);
        });
    }

    /// A thread that reaches a confined cell panics instead of touching
    /// the value: the owner's unlocked accesses stay alone.
    #[test]
    fn another_thread_on_a_confined_cell_panics_and_touches_nothing() {
        model(|| {
            let c = Arc::new(EngineCell::new(0u64));
            assert!(c.confine());
            let c2 = Arc::clone(&c);
            let t = thread::spawn(move || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c2.with(|v| *v += 100)))
                    .is_err()
            });
            c.with(|v| *v += 1);
            assert!(t.join().unwrap(), "the other thread went on");
            assert_eq!(c.with(|v| *v), 1);
        });
    }
}
