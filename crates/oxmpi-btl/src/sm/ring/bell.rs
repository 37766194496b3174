//! The doorbell of an inbox: a word on a line of its own that the receiver
//! sets when it is about to sleep, and that every producer of the inbox
//! looks at after it published a record, waking the receiver (a futex wake)
//! only when it is set.
//!
//! # Protocol
//!
//! * The receiver [`Bell::arm`]s the bell (stores 1, then the heavy side
//!   of the fence below), looks for work once more (a progress pass that
//!   reads every ring and box), and only if it found none
//!   [`Bell::sleep`]s: `futex_wait(bell, 1, timeout)`, which returns at
//!   once if the bell no longer holds 1. It [`Bell::disarm`]s it after.
//! * A producer, after each `Release` store that publishes a record (a
//!   ring record, a fast box record, a CONTROL record), does the light side
//!   of the fence and loads the bell (`Bell::ring_if_armed`): 0, the
//!   common case, costs that load (the line stays in the producer's cache
//!   while nobody sleeps: no store, no system call); set, it swaps it to 0
//!   and, if it took the 1, calls `futex_wake` (every sleeper).
//!
//! The futex is shared (not `FUTEX_PRIVATE_FLAG`): sleeper and waker are
//! different processes mapping the same memory, and the kernel keys it by
//! the page it lies in.
//!
//! # The store-then-load race
//!
//! Each side stores (the receiver its bell, the producer its record) and
//! then loads what the other stored: Dekker's pattern. Without a full fence
//! between the store and the load on *both* sides, both loads may miss
//! (x86 lets a load pass the thread's own earlier store, still in its store
//! buffer): the receiver finds no record and sleeps, the producer finds no
//! bell and wakes nobody. A `SeqCst` fence on the producer would cost every
//! small send a drain of its store buffer, that is, in the slow cross-core
//! state (`docs/performance.md`), the wait for the line the consumer last
//! read (measured: `docs/perf/log/oversubscribed-waits.md`, "The doorbell").
//!
//! So the fence is asymmetric, as user-space RCU does it: the producer's
//! side is a compiler fence (no instruction), and the receiver, the side
//! about to make a system call anyway, calls
//! `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)`, which runs a full memory
//! barrier on every CPU that runs a thread of a process registered for it
//! ([`register_barrier`]: every process that attaches a producer does) and
//! returns after. Argument: let `B` be the point where that barrier runs in
//! the producer's thread (a thread that is not running has passed a context
//! switch, a full barrier, as good). The receiver's bell store precedes the
//! system call, so it is visible to all at `B`. If the producer's bell load
//! comes after `B` in its program order, it sees the 1. If it comes before,
//! so does its record store (program order, kept by the compiler fence),
//! which the barrier made visible before `membarrier` returned, so the
//! receiver's pass, after the call, sees the record. Either way the
//! receiver does not sleep through it.
//!
//! Where `membarrier` is missing (kernels before 4.16, a seccomp filter
//! that refuses it), the receiver uses a `SeqCst` fence alone: the race can
//! then lose a wake-up, rarely (the producer's store must still sit in its
//! store buffer through the receiver's whole pass), and the sleep's timeout
//! bounds what it costs. The same holds for a producer whose registration
//! races the receiver's barrier (its first attach).
//!
//! Under loom both sides are `SeqCst` fences, the standard model of an
//! asymmetric fence pair (`tests/ring_loom.rs` checks that a receiver that
//! found nothing always has its bell seen).

use super::mem::Mem;
use super::sync::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

#[cfg(loom)]
use super::sync::AtomicU64 as BellWord;
#[cfg(not(loom))]
use std::sync::atomic::AtomicU32 as BellWord;

/// Bytes a bell takes: a cache line of its own.
pub(crate) const BELL_BYTES: usize = super::LINE;

/// What [`Bell::sleep`] ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slept {
    /// A producer rang (or had rung before the sleep began).
    Rung,
    /// The timeout passed.
    TimedOut,
    /// A signal, or a wake-up the kernel gives no reason for.
    Interrupted,
}

/// An inbox's doorbell (see the module doc): the receiver's handle and each
/// producer's view of the same word.
pub struct Bell {
    mem: Mem,
}

// SAFETY: a `Bell` touches its memory only through `word`, an atomic, and
// the futex calls on that word's address; any thread may do that through a
// shared reference.
unsafe impl Sync for Bell {}

impl Bell {
    /// The bell on the line of `mem` at `off` (inside an inbox).
    pub(crate) fn at(mem: &Mem, off: usize) -> Bell {
        Bell {
            mem: mem.sub(off, BELL_BYTES),
        }
    }

    /// A bell of its own on the heap, that nobody arms: the producer of a
    /// ring outside any inbox ([`super::Ring::new_heap`]) rings it for
    /// nothing.
    pub(crate) fn new_heap() -> Bell {
        Bell {
            mem: Mem::new_heap(BELL_BYTES),
        }
    }

    /// The same view, keeping `owner` alive while it lives.
    pub fn keeping(mut self, owner: Arc<dyn Send + Sync>) -> Bell {
        self.mem.keep(owner);
        self
    }

    /// [`Bell::keeping`] in place.
    pub(crate) fn keeping_in_place(&mut self, owner: Arc<dyn Send + Sync>) {
        self.mem.keep(owner);
    }

    #[inline(always)]
    fn word(&self) -> &BellWord {
        #[cfg(not(loom))]
        {
            self.mem.word32(0)
        }
        #[cfg(loom)]
        {
            self.mem.word(0)
        }
    }

    /// Sets it to 0 (formatting).
    pub(crate) fn clear(&self) {
        self.word().store(0, Relaxed);
    }

    /// The producer's side, after a `Release` store that published a
    /// record: wakes the receiver if it armed the bell. No store and no
    /// system call while it did not.
    #[inline(always)]
    pub(crate) fn ring_if_armed(&self) {
        light_barrier();
        if self.word().load(Relaxed) != 0 {
            self.ring();
        }
    }

    /// Takes the bell's 1 and, if this call took it, wakes every sleeper.
    #[cold]
    #[inline(never)]
    pub fn ring(&self) {
        if self.word().swap(0, Relaxed) != 0 {
            wake(self.word());
        }
    }

    /// Whether it is armed (a sleeper is about to sleep or sleeps, and no
    /// producer rang since).
    pub fn is_armed(&self) -> bool {
        self.word().load(Relaxed) != 0
    }

    /// Arms it: from now on, a producer that publishes wakes the receiver.
    /// The caller then looks for work once more before it sleeps (module
    /// doc); the barrier here orders the 1 before that look.
    pub fn arm(&self) {
        self.word().store(1, Relaxed);
        heavy_barrier();
    }

    /// Disarms it (a producer no longer needs to wake anyone).
    pub fn disarm(&self) {
        self.word().store(0, Relaxed);
    }

    /// Sleeps until a producer rings or `timeout` passes; returns at once
    /// when the bell is no longer armed (a producer rang since
    /// [`Bell::arm`]).
    pub fn sleep(&self, timeout: Duration) -> Slept {
        wait(self.word(), timeout)
    }
}

/// The producer's side of the fence: none at run time (module doc).
#[inline(always)]
fn light_barrier() {
    #[cfg(not(loom))]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    #[cfg(loom)]
    loom::sync::atomic::fence(super::sync::Ordering::SeqCst);
}

/// The receiver's side: `membarrier` where this process registered, else a
/// `SeqCst` fence (module doc).
fn heavy_barrier() {
    #[cfg(not(loom))]
    {
        use rustix::thread::{membarrier, MembarrierCommand};
        if barrier_registered() && membarrier(MembarrierCommand::GlobalExpedited).is_ok() {
            return;
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
    #[cfg(loom)]
    loom::sync::atomic::fence(super::sync::Ordering::SeqCst);
}

#[cfg(not(loom))]
static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Registers this process for the receivers' barrier
/// (`MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED`), once; whether it is
/// registered. Every process that attaches a producer calls it first.
pub fn register_barrier() -> bool {
    #[cfg(not(loom))]
    {
        *REGISTERED.get_or_init(|| {
            use rustix::thread::{membarrier, membarrier_query, MembarrierCommand};
            let q = membarrier_query();
            let ok = q.contains_command(MembarrierCommand::GlobalExpedited)
                && q.contains_command(MembarrierCommand::RegisterGlobalExpedited)
                && membarrier(MembarrierCommand::RegisterGlobalExpedited).is_ok();
            if !ok {
                tracing::debug!(
                    "sm: membarrier unavailable; a sleeping receiver may miss a wake-up \
                     (bounded by its timeout)"
                );
            }
            ok
        })
    }
    #[cfg(loom)]
    true
}

/// Whether [`register_barrier`] succeeded in this process.
#[cfg(not(loom))]
fn barrier_registered() -> bool {
    REGISTERED.get().copied().unwrap_or(false)
}

#[cfg(not(loom))]
fn wake(word: &BellWord) {
    // Shared futex: no PRIVATE flag (the sleeper is another process).
    let _ =
        rustix::thread::futex::wake(word, rustix::thread::futex::Flags::empty(), i32::MAX as u32);
}

#[cfg(loom)]
fn wake(word: &BellWord) {
    let _ = word;
}

#[cfg(not(loom))]
fn wait(word: &BellWord, timeout: Duration) -> Slept {
    use rustix::io::Errno;
    use rustix::thread::futex;
    let ts = futex::Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    match futex::wait(word, futex::Flags::empty(), 1, Some(&ts)) {
        // Woken, or the word was no longer 1 (rung before the sleep).
        Ok(()) | Err(Errno::AGAIN) => {
            if word.load(Relaxed) == 0 {
                Slept::Rung
            } else {
                Slept::Interrupted
            }
        }
        Err(Errno::TIMEDOUT) => Slept::TimedOut,
        Err(_) => Slept::Interrupted,
    }
}

#[cfg(loom)]
fn wait(word: &BellWord, timeout: Duration) -> Slept {
    let _ = timeout;
    if word.load(Relaxed) == 0 {
        Slept::Rung
    } else {
        loom::thread::yield_now();
        Slept::TimedOut
    }
}
