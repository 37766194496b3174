//! Asynchronous progress: the thread that drives the progress engine while
//! futures wait on requests, and wakes each future when its request
//! completes.
//!
//! A request polled as a [`Future`](std::future::Future) that is not yet
//! complete registers its waker here. The driver thread (started on first
//! use) then polls the PML, yielding the core between passes, and wakes the
//! futures whose requests completed; with nothing registered it parks. So a
//! future makes progress on any executor, without the executor polling in a
//! loop, and without a dependency on any runtime. Finalize stops the thread
//! before the transports close.
//!
//! With `mpi_async_progress` the same thread runs from start-up and also
//! progresses whenever requests are active, so non-blocking transfers
//! advance while the program computes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::thread::JoinHandle;
use std::time::Duration;

use oxmpi_pml::{Pml, ReqId};

use crate::framework::DynBtl;

#[derive(Default)]
struct Shared {
    waiting: Mutex<Vec<(ReqId, Waker)>>,
    stop: AtomicBool,
    /// `mpi_async_progress`: progress whenever requests are active, not
    /// only while futures wait.
    always: AtomicBool,
}

/// The driver of one process (see the module doc).
#[derive(Default)]
pub(crate) struct AsyncDriver {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for AsyncDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncDriver").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AsyncDriver {
    /// Wakes `waker` once request `id` has completed (at once if it already
    /// has); starts the driver thread if it is not running.
    pub(crate) fn register(&self, pml: &Arc<Pml<DynBtl>>, id: ReqId, waker: &Waker) {
        if self.shared.stop.load(Ordering::Acquire) {
            // Finalizing: nothing will drive progress any more; let the
            // executor poll again (the poll itself progresses).
            waker.wake_by_ref();
            return;
        }
        {
            let mut w = lock(&self.shared.waiting);
            match w.iter_mut().find(|(r, _)| *r == id) {
                Some(e) => e.1.clone_from(waker),
                None => w.push((id, waker.clone())),
            }
        }
        let mut t = lock(&self.thread);
        match t.as_ref() {
            Some(h) => h.thread().unpark(),
            None => {
                // From now on two threads call the PML: it locks again
                // (this thread is outside any PML call here).
                pml.share();
                let (pml, shared) = (Arc::clone(pml), Arc::clone(&self.shared));
                match std::thread::Builder::new()
                    .name("oxmpi-progress".into())
                    .spawn(move || drive(&pml, &shared))
                {
                    Ok(h) => *t = Some(h),
                    // No thread: fall back to the executor polling again.
                    Err(_) => waker.wake_by_ref(),
                }
            }
        }
    }

    /// Starts the thread for good (`mpi_async_progress`): it progresses the
    /// PML whenever requests are active, yielding between passes, and
    /// sleeps (1 ms at a time) when none is.
    pub(crate) fn start_always(&self, pml: &Arc<Pml<DynBtl>>) {
        self.shared.always.store(true, Ordering::Release);
        let mut t = lock(&self.thread);
        if t.is_none() {
            pml.share();
            let (pml, shared) = (Arc::clone(pml), Arc::clone(&self.shared));
            if let Ok(h) = std::thread::Builder::new()
                .name("oxmpi-progress".into())
                .spawn(move || drive(&pml, &shared))
            {
                *t = Some(h);
            }
        }
    }

    /// Confines `pml` to the calling thread ([`Pml::confine`]) unless the
    /// driver thread runs, deciding under the lock that starting it takes
    /// (which shares the PML first), so the two never cross.
    pub(crate) fn confine_unless_running(&self, pml: &Pml<DynBtl>) -> bool {
        let t = lock(&self.thread);
        t.is_none() && pml.confine()
    }

    /// Forgets the waker of a request that completed by being polled.
    pub(crate) fn forget(&self, id: ReqId) {
        lock(&self.shared.waiting).retain(|(r, _)| *r != id);
    }

    /// Stops the driver thread (finalize) and wakes whatever still waits,
    /// so no future is left without a wake-up.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(h) = lock(&self.thread).take() {
            h.thread().unpark();
            let _ = h.join();
        }
        for (_, w) in lock(&self.shared.waiting).drain(..) {
            w.wake();
        }
    }
}

fn drive(pml: &Pml<DynBtl>, shared: &Shared) {
    let mut ready = Vec::new();
    while !shared.stop.load(Ordering::Acquire) {
        if lock(&shared.waiting).is_empty() {
            if !shared.always.load(Ordering::Acquire) {
                std::thread::park_timeout(Duration::from_millis(100));
                continue;
            }
            if pml.with(|o| o.active_requests()) == 0 {
                std::thread::park_timeout(Duration::from_millis(1));
                continue;
            }
        }
        pml.progress();
        {
            let mut w = lock(&shared.waiting);
            pml.with(|o| {
                w.retain(|(id, waker)| {
                    // An id that is no longer valid was completed and freed
                    // by another path: wake its future too, it will see.
                    if o.is_complete(*id).unwrap_or(true) {
                        ready.push(waker.clone());
                        false
                    } else {
                        true
                    }
                })
            });
        }
        for w in ready.drain(..) {
            w.wake();
        }
        std::thread::yield_now();
    }
}
