//! Watching memory for release: what keeps a registration cache honest.
//!
//! A cached registration (`mpi_leave_pinned`) must die with its memory:
//! when the pages are unmapped (`munmap`, `free` of a large block), moved
//! (`mremap`, `realloc`) or dropped (`madvise(MADV_DONTNEED)`, heap trim),
//! the cache must not hand out a key for them again. Open MPI and UCX hook
//! those calls by patching code; oxmpi asks the kernel instead: a
//! `userfaultfd` in write-protect mode (no page is ever protected, so no
//! fault is ever taken) with the UNMAP, REMAP and REMOVE events. The kernel
//! reports every release of a watched range, from any code path (glibc's
//! internal `munmap` included), and holds the releasing thread until the
//! event is read.
//!
//! A reader thread (blocked in `poll`, so idle costs nothing) turns events
//! into records in a fixed ring: no allocation and no lock on that path,
//! because the releasing thread may hold the allocator's lock. `pending` is
//! raised before each read and lowered once the records are published, so a
//! thread whose `munmap` has returned finds the release either in the ring
//! or announced by `pending`: [`MemWatch::changes`] waits out the second.
//! A subscriber that falls more than the ring's length behind learns that
//! records were lost and must drop everything it caches.
//!
//! One watcher serves the whole process (every PML and BTL share it); it
//! stops, and its descriptors close, when the last handle is dropped.
//! Without `userfaultfd` (old kernel, seccomp, another user of the range)
//! [`MemWatch::get`] or [`MemWatch::watch`] says so and the caller does not
//! cache.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags};
use rustix::mm::{userfaultfd, UserfaultfdFlags};

/// The system's page size (watches are whole pages).
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// Records kept for subscribers that fall behind.
const RING: usize = 1024;

const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
const UFFDIO_UNREGISTER: libc::c_ulong = 0x8010_aa01;
const UFFDIO_WRITEPROTECT: libc::c_ulong = 0xc018_aa06;
const UFFD_API: u64 = 0xaa;
const UFFD_USER_MODE_ONLY: u32 = 1;
const FEATURE_EVENT_REMAP: u64 = 1 << 2;
const FEATURE_EVENT_REMOVE: u64 = 1 << 3;
const FEATURE_EVENT_UNMAP: u64 = 1 << 6;
const MODE_WP: u64 = 1 << 1;
const EVENT_PAGEFAULT: u8 = 0x12;
const EVENT_REMAP: u8 = 0x14;
const EVENT_REMOVE: u8 = 0x15;
const EVENT_UNMAP: u8 = 0x16;

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// A `struct uffdio_*` and the one ioctl request that takes it.
trait UffdArg {
    const REQUEST: libc::c_ulong;
}

impl UffdArg for UffdioApi {
    const REQUEST: libc::c_ulong = UFFDIO_API;
}

impl UffdArg for UffdioRegister {
    const REQUEST: libc::c_ulong = UFFDIO_REGISTER;
}

impl UffdArg for UffdioRange {
    const REQUEST: libc::c_ulong = UFFDIO_UNREGISTER;
}

impl UffdArg for UffdioWriteprotect {
    const REQUEST: libc::c_ulong = UFFDIO_WRITEPROTECT;
}

/// The userfaultfd ioctl that `arg`'s type belongs to.
fn uffd_ioctl<T: UffdArg>(fd: &OwnedFd, arg: &mut T) -> std::io::Result<()> {
    // SAFETY: each request reads (and UFFDIO_API and UFFDIO_REGISTER also
    // write) exactly one struct of the repr(C) type paired with it by
    // `UffdArg`, which `arg` is, valid and exclusive for the call. None of
    // them touches other memory: registering in write-protect mode only
    // marks a range, unregistering only stops events, and write-protect
    // mode 0 removes protection.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), T::REQUEST, arg as *mut T) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// What the reader thread and the subscribers share.
struct Shared {
    uffd: OwnedFd,
    stop: OwnedFd,
    /// Records published so far (the next one goes to `head % RING`).
    head: AtomicU64,
    /// Non-zero while the reader has taken events it has not published.
    pending: AtomicU32,
    /// Released ranges: `(start, end)`.
    ring: Box<[(AtomicUsize, AtomicUsize)]>,
    /// Watched ranges `start -> (end, watchers)`, to unregister a range only
    /// when nobody watches its pages any more.
    watched: Mutex<BTreeMap<usize, (usize, u32)>>,
}

struct Inner {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The process that started it (a forked child has no reader thread
    /// and must start its own watcher).
    pid: u32,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // A forked child's copy: the reader thread is its parent's (the
            // eventfd is shared with it), so leave both alone.
            if let Some(t) = self.thread.take() {
                std::mem::forget(t);
            }
            return;
        }
        // Wake the reader; it sees `stop` readable and returns.
        let _ = rustix::io::write(&self.shared.stop, &1u64.to_ne_bytes());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A handle on the process's memory watcher (cheap to clone).
#[derive(Clone)]
pub struct MemWatch {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for MemWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemWatch")
            .field("head", &self.inner.shared.head.load(Ordering::Relaxed))
            .finish()
    }
}

/// Subscribers lost records (they fell more than the ring behind): drop
/// every cached registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow;

static PROCESS: Mutex<Weak<Inner>> = Mutex::new(Weak::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl MemWatch {
    /// The process's watcher, started on first use; `Err` names why memory
    /// cannot be watched here (then nothing may be cached).
    pub fn get() -> Result<MemWatch, String> {
        let mut slot = lock(&PROCESS);
        if let Some(inner) = slot.upgrade() {
            if inner.pid == std::process::id() {
                return Ok(MemWatch { inner });
            }
        }
        let inner = Arc::new(Self::start()?);
        *slot = Arc::downgrade(&inner);
        Ok(MemWatch { inner })
    }

    fn start() -> Result<Inner, String> {
        let flags = UserfaultfdFlags::CLOEXEC | UserfaultfdFlags::NONBLOCK;
        // SAFETY: creating a userfaultfd has no memory effect by itself;
        // this module registers ranges only in write-protect mode without
        // protecting any page, so no fault is ever routed to it.
        let uffd = unsafe {
            userfaultfd(flags | UserfaultfdFlags::from_bits_retain(UFFD_USER_MODE_ONLY))
                .or_else(|_| userfaultfd(flags))
        }
        .map_err(|e| format!("userfaultfd: {e}"))?;
        let mut api = UffdioApi {
            api: UFFD_API,
            features: FEATURE_EVENT_UNMAP | FEATURE_EVENT_REMAP | FEATURE_EVENT_REMOVE,
            ioctls: 0,
        };
        uffd_ioctl(&uffd, &mut api).map_err(|e| format!("userfaultfd events: {e}"))?;
        let stop = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| format!("eventfd: {e}"))?;
        let shared = Arc::new(Shared {
            uffd,
            stop,
            head: AtomicU64::new(0),
            pending: AtomicU32::new(0),
            ring: (0..RING)
                .map(|_| (AtomicUsize::new(0), AtomicUsize::new(0)))
                .collect(),
            watched: Mutex::new(BTreeMap::new()),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("oxmpi-memwatch".into())
            .spawn(move || reader(&s))
            .map_err(|e| format!("memory watcher thread: {e}"))?;
        Ok(Inner {
            shared,
            thread: Some(thread),
            pid: std::process::id(),
        })
    }

    /// Watches `[start, start+len)` (page-aligned) for release. `false`:
    /// the range cannot be watched (not anonymous or shared memory, or
    /// watched by someone else): do not cache it.
    pub fn watch(&self, start: usize, len: usize) -> bool {
        let s = &self.inner.shared;
        let mut w = lock(&s.watched);
        // Registered with the kernel every time, even when counted already:
        // the memory there may be a new mapping (the old one released while
        // still counted), and registering a registered range is a no-op.
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: MODE_WP,
            ioctls: 0,
        };
        // Write-protect mode: no page is protected, so no access faults.
        if let Err(e) = uffd_ioctl(&s.uffd, &mut reg) {
            tracing::debug!("memwatch: cannot watch {start:#x}+{len}: {e}");
            return false;
        }
        match w.get_mut(&start) {
            // Same start (another length: the longer one is kept; both are
            // registered, only the count decides when to unregister).
            Some((end, n)) => {
                *end = (*end).max(start + len);
                *n += 1;
            }
            None => {
                w.insert(start, (start + len, 1));
            }
        }
        true
    }

    /// Ends one [`MemWatch::watch`] of `[start, start+len)`; the pages no
    /// other watch covers are unregistered.
    pub fn unwatch(&self, start: usize, len: usize) {
        let s = &self.inner.shared;
        let mut w = lock(&s.watched);
        let Some((end, n)) = w.get_mut(&start) else {
            return;
        };
        *n -= 1;
        let end = (*end).max(start + len);
        if *n > 0 {
            return;
        }
        w.remove(&start);
        // The parts of [start, end) that no remaining watch covers.
        let mut at = start;
        let mut gaps = Vec::new();
        for (&s0, &(e0, _)) in w.range(..end) {
            if e0 <= at {
                continue;
            }
            if s0 > at {
                gaps.push((at, s0.min(end)));
            }
            at = at.max(e0);
            if at >= end {
                break;
            }
        }
        if at < end {
            gaps.push((at, end));
        }
        // Unregistered under the lock: a `watch` of the same pages between
        // the count and the ioctl would otherwise lose its registration.
        for (a, b) in gaps {
            let mut range = UffdioRange {
                start: a as u64,
                len: (b - a) as u64,
            };
            let _ = uffd_ioctl(&s.uffd, &mut range);
        }
    }

    /// Where a new subscriber starts reading.
    pub fn cursor(&self) -> u64 {
        self.inner.shared.head.load(Ordering::Acquire)
    }

    /// Releases since `*seen` (each `(start, end)` given to `f`); advances
    /// `*seen`. Waits for releases the reader has taken but not published,
    /// so a release that finished before this call is always reported.
    /// `Err(Overflow)`: some were lost; drop everything.
    pub fn changes(&self, seen: &mut u64, mut f: impl FnMut(usize, usize)) -> Result<(), Overflow> {
        let s = &self.inner.shared;
        let mut spins = 0u32;
        while s.pending.load(Ordering::Acquire) != 0 {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let head = s.head.load(Ordering::Acquire);
        if head.wrapping_sub(*seen) > RING as u64 {
            *seen = head;
            return Err(Overflow);
        }
        for i in *seen..head {
            let (a, b) = &s.ring[(i % RING as u64) as usize];
            f(a.load(Ordering::Relaxed), b.load(Ordering::Relaxed));
        }
        // A record read above may have been overwritten meanwhile (the
        // reader lapped us, or was writing the slot of `*seen` for record
        // `*seen + RING`): then what we read is unreliable. The fence keeps
        // the slot loads before this check.
        std::sync::atomic::fence(Ordering::Acquire);
        if s.head.load(Ordering::Acquire).wrapping_sub(*seen) >= RING as u64 {
            *seen = s.head.load(Ordering::Acquire);
            return Err(Overflow);
        }
        *seen = head;
        Ok(())
    }

    /// Whether there may be releases after `seen` (two atomic loads).
    pub fn dirty(&self, seen: u64) -> bool {
        let s = &self.inner.shared;
        s.pending.load(Ordering::Acquire) != 0 || s.head.load(Ordering::Acquire) != seen
    }
}

/// The reader thread: sleeps in `poll` until events or the stop signal.
fn reader(s: &Shared) {
    loop {
        let mut fds = [
            PollFd::new(&s.uffd, PollFlags::IN),
            PollFd::new(&s.stop, PollFlags::IN),
        ];
        if poll(&mut fds, None).is_err() {
            continue;
        }
        if fds[1].revents().contains(PollFlags::IN) {
            return;
        }
        if fds[0].revents().is_empty() {
            continue;
        }
        s.pending.fetch_add(1, Ordering::SeqCst);
        let mut msg = [0u8; 32];
        loop {
            match rustix::io::read(s.uffd.as_fd(), &mut msg) {
                Ok(32) => record(s, &msg),
                Err(rustix::io::Errno::INTR) => {}
                _ => break,
            }
        }
        s.pending.fetch_sub(1, Ordering::SeqCst);
    }
}

fn u64_at(m: &[u8; 32], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&m[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Publishes one event (`struct uffd_msg`: the event at byte 0, its
/// arguments from byte 8).
fn record(s: &Shared, m: &[u8; 32]) {
    let (start, end) = match m[0] {
        EVENT_UNMAP | EVENT_REMOVE => (u64_at(m, 8), u64_at(m, 16)),
        EVENT_REMAP => {
            let from = u64_at(m, 8);
            (from, from.saturating_add(u64_at(m, 24)))
        }
        EVENT_PAGEFAULT => {
            // Never expected (no page is protected); should one come, lift
            // the protection so the faulting thread goes on.
            let ps = page_size() as u64;
            let page = u64_at(m, 16) & !(ps - 1);
            let mut wp = UffdioWriteprotect {
                range: UffdioRange {
                    start: page,
                    len: ps,
                },
                mode: 0,
            };
            let _ = uffd_ioctl(&s.uffd, &mut wp);
            return;
        }
        _ => return,
    };
    let h = s.head.load(Ordering::Relaxed);
    let (a, b) = &s.ring[(h % RING as u64) as usize];
    a.store(start as usize, Ordering::Relaxed);
    b.store(end as usize, Ordering::Relaxed);
    s.head.store(h + 1, Ordering::Release);
}
