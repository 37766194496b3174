//! Non-blocking operations whose buffers cannot be freed while the stack
//! uses them.
//!
//! Two ways, both safe against `mem::forget` (rsmpi issue #75):
//!
//! * **Scoped borrowing**: [`scope`] gives a [`Scope`]; a request started
//!   in it borrows its buffer for the scope's lifetime, and the scope waits,
//!   when it ends, for every request that was not completed (dropped or
//!   forgotten ones included). So a buffer outlives every operation on it.
//! * **Owned buffers**: [`OwnedRequest`] owns the buffer (a `Vec<T>` moved
//!   in) and gives it back when it completes; forgetting the request leaks
//!   the buffer, never frees it under the stack.
//!
//! Dropping a [`Request`] that has not completed waits for it.
//!
//! Collections: [`wait_all`], [`wait_any`], [`wait_some`], [`test_all`],
//! [`test_any`], [`test_some`]. Persistent requests ([`PersistentRequest`],
//! [`start_all`]) live in a scope too. Every request is also a
//! [`Future`]: awaiting it on any executor lets the progress thread (see
//! `progress.rs`) drive it and wake the task.
//!
//! ```no_run
//! use oxmpi::traits::*;
//! let universe = oxmpi::initialize().unwrap();
//! let world = universe.world();
//! let next = world.process_at_rank((world.rank() + 1) % world.size());
//! // Owned: the request holds the vector until `wait` gives it back.
//! let send = next.immediate_send_owned(vec![1u8; 64]).unwrap();
//! let (got, _) = world.any_process().receive_vec::<u8>().unwrap();
//! let (sent, _) = send.wait().unwrap();
//! assert_eq!(got, sent);
//! ```

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use oxmpi_pml::ReqId;

use crate::error::{Error, ErrorClass, Result};
use crate::runtime::Runtime;
use crate::status::Status;
use crate::universe::Threading::{self, Level};

/// A request a scope answers for: its id, and whether it is persistent.
type Slot = (ReqId, bool);

thread_local! {
    /// The emptied entries of the last scope to end on this thread, for the
    /// next one: a scope per window of requests then allocates nothing once
    /// warm (each new scope's vector cost a `malloc`, two `realloc`s on the
    /// way to 64 entries and a `free`, counted with callgrind).
    static SPARE: Cell<Vec<Entry<Slot>>> = const { Cell::new(Vec::new()) };
}

/// The largest spare a thread keeps, in entries (16 bytes each); also the
/// largest vector of outcomes `wait_all_drain` keeps.
const SPARE_MAX: usize = 4096;

/// A scope's requests: a slab whose free entries form a list through
/// the vector, so entering and leaving cost one borrow and no search.
struct Slots<T> {
    entries: Vec<Entry<T>>,
    /// The first free entry (`entries.len()` when none is).
    free: usize,
}

enum Entry<T> {
    Live(T),
    /// Free; the next free entry.
    Free(usize),
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            entries: Vec::new(),
            free: 0,
        }
    }
}

impl<T> Slots<T> {
    #[inline]
    fn insert(&mut self, s: T) -> usize {
        let i = self.free;
        match self.entries.get_mut(i) {
            Some(e) => {
                let Entry::Free(next) = *e else {
                    unreachable!("the free list holds free entries")
                };
                self.free = next;
                *e = Entry::Live(s);
            }
            None => {
                if self.entries.capacity() == 0 {
                    // A window of requests is typical: skip the first
                    // doublings.
                    self.entries.reserve(16);
                }
                self.entries.push(Entry::Live(s));
                self.free = self.entries.len();
            }
        }
        i
    }

    #[inline]
    fn remove(&mut self, i: usize) {
        if let Some(e @ Entry::Live(_)) = self.entries.get_mut(i) {
            *e = Entry::Free(self.free);
            self.free = i;
        }
    }

    fn live(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().filter_map(|e| match e {
            Entry::Live(s) => Some(s),
            Entry::Free(_) => None,
        })
    }
}

/// The slot of a request the scope does not track (it completed inside
/// the call that started it).
const NO_SLOT: usize = usize::MAX;

/// The requests of a scope that are still in flight.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let mut inbox = vec![[0u8; 4]; world.size() as usize];
/// oxmpi::request::scope(|s| {
///     let reqs: Vec<_> = inbox.iter_mut().enumerate()
///         .map(|(p, b)| world.process_at_rank(p as i32).immediate_receive_into(s, b).unwrap())
///         .collect();
///     for p in 0..world.size() {
///         world.process_at_rank(p).send(&[world.rank() as u8; 4]).unwrap();
///     }
///     oxmpi::request::wait_all(reqs).unwrap();
/// });
/// // The scope has ended: every receive is complete and `inbox` is free again.
/// assert!(inbox.iter().enumerate().all(|(p, b)| *b == [p as u8; 4]));
/// ```
pub struct Scope<'a> {
    /// The runtime of the scope's requests (there is one per process: MPI
    /// is initialized once), recorded by the first.
    rt: Cell<Option<&'a Runtime>>,
    /// Requests in flight (and persistent requests not yet freed, marked
    /// `true`: the scope frees them after waiting).
    slots: RefCell<Slots<Slot>>,
    // Invariant in 'a: a scope cannot be shortened to accept buffers that
    // live less long.
    _inv: PhantomData<fn(&'a ()) -> &'a ()>,
}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let live = self.slots.borrow().live().count();
        f.debug_struct("Scope").field("in_flight", &live).finish()
    }
}

/// Runs `f` with a scope for non-blocking requests; when `f` returns, every
/// request started in the scope and not yet completed is waited for.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let peer = world.process_at_rank((world.rank() + 1) % world.size());
/// let from = world.process_at_rank((world.rank() + world.size() - 1) % world.size());
/// let out = [world.rank(); 4];
/// let mut inb = [0i32; 4];
/// oxmpi::request::scope(|s| {
///     let r = from.immediate_receive_into(s, &mut inb).unwrap();
///     let q = peer.immediate_send(s, &out).unwrap();
///     q.wait().unwrap();
///     r.wait().unwrap();
/// });
/// ```
pub fn scope<'a, R>(f: impl FnOnce(&Scope<'a>) -> R) -> R {
    let s = Scope {
        rt: Cell::new(None),
        slots: RefCell::new(Slots {
            // (Not during the thread's teardown, when the spare is gone.)
            entries: SPARE.try_with(Cell::take).unwrap_or_default(),
            free: 0,
        }),
        _inv: PhantomData,
    };
    // The guard waits even if `f` panics: the buffers are borrowed by the
    // caller's frame, which unwinding would otherwise free.
    struct Guard<'s, 'a>(&'s Scope<'a>);
    impl Drop for Guard<'_, '_> {
        fn drop(&mut self) {
            let mut slots = std::mem::take(&mut *self.0.slots.borrow_mut());
            if let Some(rt) = self.0.rt.get() {
                for &(id, persistent) in slots.live() {
                    let _ = rt.pml.wait(id);
                    if persistent {
                        let _ = rt.pml.with(|o| o.request_free(id));
                    }
                }
            }
            slots.entries.clear();
            // A scope of a few thousand requests at most leaves its vector
            // for the next (a huge one is not kept for the thread's life).
            if slots.entries.capacity() <= SPARE_MAX {
                let _ = SPARE.try_with(|c| c.set(slots.entries));
            }
        }
    }
    let g = Guard(&s);
    let out = f(g.0);
    drop(g);
    out
}

impl<'a> Scope<'a> {
    #[inline(never)]
    fn enter(&self, rt: &'a Runtime, id: ReqId, persistent: bool) -> usize {
        debug_assert!(self.rt.get().map_or(true, |r| std::ptr::eq(r, rt)));
        self.rt.set(Some(rt));
        self.slots.borrow_mut().insert((id, persistent))
    }

    fn leave(&self, i: usize) {
        if i != NO_SLOT {
            self.slots.borrow_mut().remove(i);
        }
    }

    /// Registers a started request: from here until it completes, the scope
    /// answers for its buffer.
    #[inline]
    pub(crate) fn register(&self, rt: &'a Runtime, id: ReqId) -> Request<'a, '_> {
        // An operation that completed inside the call (a small send, a
        // receive of a message already here) holds no buffer: nothing for
        // the scope to wait for.
        let slot = if id.completed_inline() {
            NO_SLOT
        } else {
            self.enter(rt, id, false)
        };
        Request {
            rt,
            id: Some(id),
            scope: self,
            slot,
        }
    }
}

/// A non-blocking operation started in a [`Scope`].
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let mut x = 0i32;
/// oxmpi::request::scope(|s| {
///     let req = world.any_process().immediate_receive_into(s, &mut x).unwrap();
///     world.process_at_rank(world.rank()).send(&7i32).unwrap();
///     let st = req.wait().unwrap();
///     assert_eq!(st.source_rank(), world.rank());
/// });
/// assert_eq!(x, 7);
/// ```
#[must_use = "a request must be waited for (dropping it waits)"]
pub struct Request<'a, 's> {
    rt: &'a Runtime,
    id: Option<ReqId>,
    scope: &'s Scope<'a>,
    slot: usize,
}

impl std::fmt::Debug for Request<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").field("id", &self.id).finish()
    }
}

impl Request<'_, '_> {
    fn done(&mut self) {
        self.id = None;
        self.scope.leave(self.slot);
    }

    /// `MPI_Wait`: blocks until the operation completes.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut buf = [0f64; 8];
    /// oxmpi::request::scope(|s| {
    ///     let req = world.any_process().immediate_receive_into(s, &mut buf[..]).unwrap();
    ///     let st = req.wait().unwrap();
    ///     println!("{} values from rank {}", st.count::<f64>().unwrap(), st.source_rank());
    /// });
    /// ```
    pub fn wait(mut self) -> Result<Status> {
        let id = self.id.expect("a live request has an id");
        let r = self.rt.pml.wait(id);
        self.done();
        status_result(r)
    }

    /// `MPI_Test`: the status if it completed, else the request back.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut x = 0u32;
    /// oxmpi::request::scope(|s| {
    ///     let mut req = world.any_process().immediate_receive_into(s, &mut x).unwrap();
    ///     let st = loop {
    ///         match req.test() {
    ///             Ok(done) => break done.unwrap(),
    ///             Err(pending) => req = pending, // ... other work, then test again ...
    ///         }
    ///     };
    ///     println!("from rank {}", st.source_rank());
    /// });
    /// ```
    pub fn test(mut self) -> std::result::Result<Result<Status>, Self> {
        let id = self.id.expect("a live request has an id");
        let r = self.rt.pml.test(id).transpose();
        match r {
            None => Err(self),
            Some(r) => {
                self.done();
                Ok(status_result(r))
            }
        }
    }

    /// `MPI_Cancel`: asks to cancel; the request must still be waited for
    /// and its status says whether the cancel took effect.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut x = 0u8;
    /// oxmpi::request::scope(|s| {
    ///     let req = world.any_process().immediate_receive_into_with_tag(s, &mut x, 77).unwrap();
    ///     req.cancel().unwrap();
    ///     let st = req.wait().unwrap();
    ///     println!("cancelled: {}", st.cancelled()); // false if a message matched first
    /// });
    /// ```
    pub fn cancel(&self) -> Result<()> {
        let id = self.id.expect("a live request has an id");
        Ok(self.rt.pml.with(|o| o.cancel(id))?)
    }
}

impl Drop for Request<'_, '_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let _ = self.rt.pml.wait(id);
            self.scope.leave(self.slot);
        }
    }
}

/// A status, or the error the request ended with (`MPI_ERR_TRUNCATE`
/// keeps the data that fitted).
pub(crate) fn status_result(
    r: std::result::Result<oxmpi_pml::Status, oxmpi_pml::PmlError>,
) -> Result<Status> {
    let s = r?;
    if let Some(class) = s.error {
        return Err(crate::Error::new(
            class,
            match class {
                crate::ErrorClass::Truncate => format!(
                    "message truncated: the receive buffer took {} bytes of a longer message",
                    s.bytes
                ),
                _ => oxmpi_pml::error::reasons::get(s.detail)
                    .unwrap_or_else(|| format!("the request failed ({class:?})")),
            },
        ));
    }
    Ok(Status::from_pml(s))
}

/// `MPI_Waitall` over scoped requests: every status in order, or the first
/// error (after every request completed).
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let (r, n) = (world.rank(), world.size());
/// let out = vec![r; 4];
/// let mut ins = vec![[0i32; 4]; n as usize];
/// oxmpi::request::scope(|s| {
///     let mut reqs = Vec::new();
///     for (p, b) in ins.iter_mut().enumerate() {
///         reqs.push(world.process_at_rank(p as i32).immediate_receive_into(s, b).unwrap());
///     }
///     for p in 0..n {
///         reqs.push(world.process_at_rank(p).immediate_send(s, &out[..]).unwrap());
///     }
///     let statuses = oxmpi::request::wait_all(reqs).unwrap();
///     assert_eq!(statuses.len(), 2 * n as usize);
/// });
/// ```
pub fn wait_all(mut reqs: Vec<Request<'_, '_>>) -> Result<Vec<Status>> {
    let Some(rt) = reqs.first().map(|r| r.rt) else {
        return Ok(Vec::new());
    };
    let mut out = Ok(Vec::with_capacity(reqs.len()));
    rt.pml.wait_all_with(
        reqs.len(),
        |i| reqs[i].id.expect("live"),
        |r| match (&mut out, status_result(r)) {
            (Ok(v), Ok(st)) => v.push(st),
            (Ok(_), Err(e)) => out = Err(e),
            (Err(_), _) => {}
        },
    );
    reqs.iter_mut().for_each(Request::done);
    out
}

/// `MPI_Waitany`: waits for one request of `reqs` to complete, removes it,
/// and returns its index and status; `None` when `reqs` is empty.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let (mut a, mut b) = (0u64, 0u64);
/// oxmpi::request::scope(|s| {
///     let mut reqs = vec![
///         world.process_at_rank(0).immediate_receive_into_with_tag(s, &mut a, 1).unwrap(),
///         world.any_process().immediate_receive_into_with_tag(s, &mut b, 2).unwrap(),
///     ];
///     // Handle each as it completes (indices are into `reqs` as it is now).
///     while let Some((i, st)) = oxmpi::request::wait_any(&mut reqs) {
///         println!("request {i} done: tag {}", st.unwrap().tag());
///     }
/// });
/// ```
pub fn wait_any(reqs: &mut Vec<Request<'_, '_>>) -> Option<(usize, Result<Status>)> {
    if reqs.is_empty() {
        return None;
    }
    let rt = reqs[0].rt;
    let mut ids: Vec<Option<ReqId>> = reqs.iter().map(|r| r.id).collect();
    let (i, r) = rt.pml.wait_any(&mut ids)?;
    let mut req = reqs.remove(i);
    req.done();
    Some((i, status_result(r)))
}

/// `MPI_Waitsome`: waits until at least one request of `reqs` completes,
/// removes every completed one, and returns their indices (in `reqs` as it
/// was) and statuses, in index order; empty when `reqs` is empty.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let mut bufs = vec![[0u8; 32]; 4];
/// oxmpi::request::scope(|s| {
///     let mut reqs: Vec<_> = bufs.iter_mut()
///         .map(|b| world.any_process().immediate_receive_into(s, b).unwrap())
///         .collect();
///     while !reqs.is_empty() {
///         for (i, st) in oxmpi::request::wait_some(&mut reqs) {
///             println!("{i}: {} bytes", st.unwrap().bytes());
///         }
///     }
/// });
/// ```
pub fn wait_some(reqs: &mut Vec<Request<'_, '_>>) -> Vec<(usize, Result<Status>)> {
    let Some(rt) = reqs.first().map(|r| r.rt) else {
        return Vec::new();
    };
    let mut ids: Vec<Option<ReqId>> = reqs.iter().map(|r| r.id).collect();
    let done = rt.pml.wait_some(&mut ids);
    remove_done(reqs, done)
}

/// `MPI_Testsome`: like [`wait_some`] but does not block: after one
/// progress pass, the completed requests (possibly none).
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let mut bufs = vec![0i32; 3];
/// oxmpi::request::scope(|s| {
///     let mut reqs: Vec<_> = bufs.iter_mut()
///         .map(|b| world.any_process().immediate_receive_into(s, b).unwrap())
///         .collect();
///     let mut received = 0;
///     while !reqs.is_empty() {
///         received += oxmpi::request::test_some(&mut reqs).len();
///         // ... other work between passes ...
///     }
///     assert_eq!(received, 3);
/// });
/// ```
pub fn test_some(reqs: &mut Vec<Request<'_, '_>>) -> Vec<(usize, Result<Status>)> {
    let Some(rt) = reqs.first().map(|r| r.rt) else {
        return Vec::new();
    };
    let mut ids: Vec<Option<ReqId>> = reqs.iter().map(|r| r.id).collect();
    let done = rt.pml.test_some(&mut ids);
    remove_done(reqs, done)
}

/// `MPI_Testany`: one completed request of `reqs` (removed), if any.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let mut bufs = [0u16; 2];
/// oxmpi::request::scope(|s| {
///     let mut reqs: Vec<_> = bufs.iter_mut()
///         .map(|b| world.any_process().immediate_receive_into(s, b).unwrap())
///         .collect();
///     while !reqs.is_empty() {
///         if let Some((i, st)) = oxmpi::request::test_any(&mut reqs) {
///             println!("request {i}: tag {}", st.unwrap().tag());
///         }
///     }
/// });
/// ```
pub fn test_any(reqs: &mut Vec<Request<'_, '_>>) -> Option<(usize, Result<Status>)> {
    // Test them all, keep the first: the others stay in `reqs`, their
    // completion recorded in the engine until tested again.
    let rt = reqs.first()?.rt;
    let i = rt.pml.with(|o| {
        o.progress();
        reqs.iter()
            .position(|r| r.id.is_some_and(|id| o.is_complete(id).unwrap_or(true)))
    })?;
    let req = reqs.remove(i);
    let r = req.test().ok()?;
    Some((i, r))
}

/// `MPI_Testall`: if every request of `reqs` has completed, all their
/// statuses in order (the first error if one failed) and `reqs` is emptied;
/// otherwise `None` and `reqs` is unchanged.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let mut bufs = [0u8; 2];
/// oxmpi::request::scope(|s| {
///     let mut reqs: Vec<_> = bufs.iter_mut()
///         .map(|b| world.any_process().immediate_receive_into(s, b).unwrap())
///         .collect();
///     let statuses = loop {
///         if let Some(all) = oxmpi::request::test_all(&mut reqs) {
///             break all.unwrap();
///         }
///     };
///     assert_eq!(statuses.len(), 2);
///     assert!(reqs.is_empty());
/// });
/// ```
pub fn test_all(reqs: &mut Vec<Request<'_, '_>>) -> Option<Result<Vec<Status>>> {
    let Some(rt) = reqs.first().map(|r| r.rt) else {
        return Some(Ok(Vec::new()));
    };
    let ids: Vec<ReqId> = reqs.iter().map(|r| r.id.expect("live")).collect();
    let results = rt.pml.test_all(&ids)?;
    for mut r in reqs.drain(..) {
        r.done();
    }
    Some(results.into_iter().map(status_result).collect())
}

fn remove_done(
    reqs: &mut Vec<Request<'_, '_>>,
    done: Vec<(
        usize,
        std::result::Result<oxmpi_pml::Status, oxmpi_pml::PmlError>,
    )>,
) -> Vec<(usize, Result<Status>)> {
    for (i, _) in &done {
        reqs[*i].done();
    }
    reqs.retain(|r| r.id.is_some());
    done.into_iter()
        .map(|(i, r)| (i, status_result(r)))
        .collect()
}

impl Future for Request<'_, '_> {
    type Output = Result<Status>;

    /// Progresses once; when not complete, the progress thread takes over
    /// and wakes the task once the request has completed.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<Status>> {
        let this = self.get_mut();
        let Some(id) = this.id else {
            return Poll::Ready(Err(Error::new(
                ErrorClass::Request,
                "the request was already completed",
            )));
        };
        match poll_request(this.rt, id, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                this.done();
                Poll::Ready(r)
            }
        }
    }
}

fn poll_request(rt: &Runtime, id: ReqId, cx: &mut Context<'_>) -> Poll<Result<Status>> {
    match rt.pml.test(id).transpose() {
        Some(r) => {
            rt.driver.forget(id);
            Poll::Ready(status_result(r))
        }
        None => {
            rt.driver.register(&rt.pml, id, cx.waker());
            Poll::Pending
        }
    }
}

/// A status carrying the error class of a failed request (see
/// [`OwnedRequest::wait_status`]).
pub(crate) fn raw_status(r: std::result::Result<oxmpi_pml::Status, oxmpi_pml::PmlError>) -> Status {
    match r {
        Ok(s) => Status::from_pml(s),
        Err(e) => Status::from_pml(oxmpi_pml::Status {
            error: Some(e.class),
            ..Default::default()
        }),
    }
}

/// `MPI_Waitall` over owned requests, in the form of
/// [`OwnedRequest::wait_status`]: every buffer and status (with the error
/// class of a failed request in it), in order. The requests are tested
/// together, one lock per pass instead of one per request.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let next = world.process_at_rank((world.rank() + 1) % world.size());
/// let reqs: Vec<_> = (0..4)
///     .map(|i| next.immediate_send_owned_with_tag(vec![i as u8; 8], i).unwrap())
///     .collect();
/// for (buf, st) in oxmpi::request::wait_all_status(reqs) {
///     assert!(st.error().is_none() && buf.len() == 8);
/// }
/// # for i in 0..4 { world.any_process().receive_vec_with_tag::<u8>(i).unwrap(); }
/// ```
pub fn wait_all_status<B, L: Level>(reqs: Vec<OwnedRequest<'_, B, L>>) -> Vec<(B, Status)> {
    let mut out = Vec::with_capacity(reqs.len());
    wait_all_each(reqs, |_, b, st| out.push((b, st)));
    out
}

/// As [`wait_all_status`], handing each buffer and status to
/// `each(index, buffer, status)` in order instead of collecting them
/// (once every request has completed; `each` may make MPI calls).
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let me = world.process_at_rank(world.rank());
/// let reqs: Vec<_> = (0..4)
///     .map(|i| me.immediate_send_owned_with_tag(vec![i as u8; 8], i).unwrap())
///     .collect();
/// for i in 0..4 {
///     world.any_process().receive_vec_with_tag::<u8>(i).unwrap();
/// }
/// oxmpi::request::wait_all_each(reqs, |i, buf, st| {
///     assert_eq!(buf, [i as u8; 8]);
///     assert!(st.error().is_none());
/// });
/// ```
pub fn wait_all_each<B, L: Level>(
    mut reqs: Vec<OwnedRequest<'_, B, L>>,
    each: impl FnMut(usize, B, Status),
) {
    wait_all_drain(&mut reqs, each);
}

type PmlOutcome = std::result::Result<oxmpi_pml::Status, oxmpi_pml::PmlError>;

/// How many requests [`wait_all_slots`] waits for with nothing but the
/// stack (the usual exchange: a few receives and sends).
pub const WAIT_FEW: usize = 8;

/// As [`wait_all_drain`], over requests in slots (each one `Some`), which
/// it empties: `each` gets every request's index, buffer and status, in
/// order. Up to [`WAIT_FEW`] requests are waited for with their outcomes
/// on the stack, without the thread-local vectors `wait_all_drain` keeps
/// (which cost a few hundred instructions per call); more go through
/// `wait_all_drain`. Panics if a slot is empty.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let me = world.process_at_rank(world.rank());
/// let mut slots: [Option<_>; 2] = Default::default();
/// for (i, s) in slots.iter_mut().enumerate() {
///     *s = Some(me.immediate_send_owned_with_tag(vec![i as u8; 8], i as i32).unwrap());
/// }
/// for i in 0..2 {
///     world.any_process().receive_vec_with_tag::<u8>(i).unwrap();
/// }
/// oxmpi::request::wait_all_slots(&mut slots, |i, buf, st| {
///     assert_eq!(buf, [i as u8; 8]);
///     assert!(st.error().is_none());
/// });
/// assert!(slots.iter().all(Option::is_none));
/// ```
pub fn wait_all_slots<B, L: Level>(
    slots: &mut [Option<OwnedRequest<'_, B, L>>],
    mut each: impl FnMut(usize, B, Status),
) {
    assert!(
        slots.iter().all(Option::is_some),
        "wait_all_slots: every slot must hold a request"
    );
    if slots.len() > WAIT_FEW {
        let mut reqs: Vec<_> = slots.iter_mut().map(|s| s.take().expect("live")).collect();
        wait_all_drain(&mut reqs, each);
        return;
    }
    let Some(rt) = slots.first().and_then(Option::as_ref).map(|r| r.rt) else {
        return;
    };
    let mut out: [Option<PmlOutcome>; WAIT_FEW] = Default::default();
    let mut k = 0;
    rt.pml.wait_all_with(
        slots.len(),
        |i| slots[i].as_ref().and_then(|r| r.id).expect("live"),
        |r| {
            out[k] = Some(r);
            k += 1;
        },
    );
    // Every request is complete and freed in the PML: none may wait on
    // its id again (a panicking `each` drops the rest).
    for r in slots.iter_mut().flatten() {
        r.id = None;
    }
    // `each` runs with the PML free again: it may call MPI itself.
    for (i, (slot, r)) in slots.iter_mut().zip(out.iter_mut()).enumerate() {
        let buf = slot
            .take()
            .and_then(|mut req| req.buf.take())
            .expect("live");
        each(i, buf, raw_status(r.take().expect("complete")));
    }
}

thread_local! {
    /// The outcomes of the thread's last [`wait_all_drain`], kept for the
    /// next (so that a warm one allocates nothing).
    static OUTCOMES: Cell<Vec<PmlOutcome>> = const { Cell::new(Vec::new()) };
}

/// As [`wait_all_each`], emptying `reqs` (which keeps its capacity): with
/// vectors reused from call to call, a warm wait allocates nothing.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let me = world.process_at_rank(world.rank());
/// let mut reqs = Vec::with_capacity(4);
/// for round in 0..3 {
///     for i in 0..4 {
///         reqs.push(me.immediate_send_owned_with_tag(vec![i as u8; 8], i).unwrap());
///     }
///     for i in 0..4 {
///         world.any_process().receive_vec_with_tag::<u8>(i).unwrap();
///     }
///     oxmpi::request::wait_all_drain(&mut reqs, |i, buf, st| {
///         assert_eq!(buf, [i as u8; 8]);
///         assert!(st.error().is_none());
///     });
///     assert!(reqs.is_empty());
/// }
/// ```
pub fn wait_all_drain<B, L: Level>(
    reqs: &mut Vec<OwnedRequest<'_, B, L>>,
    mut each: impl FnMut(usize, B, Status),
) {
    let Some(rt) = reqs.first().map(|r| r.rt) else {
        return;
    };
    // Taken, not borrowed: `each` may wait again on this thread.
    let mut results = OUTCOMES.try_with(Cell::take).unwrap_or_default();
    results.clear();
    results.reserve(reqs.len());
    rt.pml.wait_all_with(
        reqs.len(),
        |i| reqs[i].id.expect("live"),
        |r| results.push(r),
    );
    // Every request is complete and freed in the PML: none may wait on
    // its id again (a panicking `each` drops the rest).
    for r in reqs.iter_mut() {
        r.id = None;
    }
    // `each` runs with the PML free again: it may call MPI itself.
    for (k, (mut req, r)) in reqs.drain(..).zip(results.drain(..)).enumerate() {
        each(k, req.buf.take().expect("live"), raw_status(r));
    }
    // Kept for the next wait (the larger, if a nested wait left one; none
    // above `SPARE_MAX`, so one huge wait does not hold memory for good).
    let _ = OUTCOMES.try_with(|c| {
        let other = c.take();
        let keep = if other.capacity() > results.capacity() {
            other
        } else {
            results
        };
        if keep.capacity() <= SPARE_MAX {
            c.set(keep);
        }
    });
}

/// A persistent request (`MPI_Send_init`, `MPI_Recv_init` and the other
/// modes): created inactive in a [`Scope`], started any number of times
/// with [`PersistentRequest::start`] (or [`start_all`]), each start
/// completed by [`PersistentRequest::wait`] or
/// [`PersistentRequest::test`]. Dropping it waits for an active operation
/// and frees it; so does the end of its scope, even if it was forgotten.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let next = world.process_at_rank((world.rank() + 1) % world.size());
/// let prev = world.process_at_rank((world.rank() + world.size() - 1) % world.size());
/// let out = [world.rank(); 8];
/// let mut inb = [0i32; 8];
/// oxmpi::request::scope(|s| {
///     let mut recv = prev.receive_init(s, &mut inb, 7).unwrap();
///     let mut send = next.send_init(s, &out, 7).unwrap();
///     for _ in 0..10 {
///         oxmpi::request::start_all(&mut [&mut recv, &mut send]).unwrap();
///         send.wait().unwrap();
///         recv.wait().unwrap();
///     }
/// });
/// // To change the data between starts, see OwnedPersistentRequest.
/// ```
#[must_use = "a persistent request does nothing until started"]
pub struct PersistentRequest<'a, 's> {
    rt: &'a Runtime,
    id: ReqId,
    scope: &'s Scope<'a>,
    slot: usize,
    active: bool,
}

impl std::fmt::Debug for PersistentRequest<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentRequest")
            .field("id", &self.id)
            .field("active", &self.active)
            .finish()
    }
}

impl<'a> Scope<'a> {
    /// Registers an inactive persistent request; the scope frees it at the
    /// latest when it ends.
    pub(crate) fn register_persistent(
        &self,
        rt: &'a Runtime,
        id: ReqId,
    ) -> PersistentRequest<'a, '_> {
        let slot = self.enter(rt, id, true);
        PersistentRequest {
            rt,
            id,
            scope: self,
            slot,
            active: false,
        }
    }
}

impl PersistentRequest<'_, '_> {
    /// `MPI_Start`. Error ([`ErrorClass::Request`]) if it is active.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let data = [1.0f32; 16];
    /// oxmpi::request::scope(|s| {
    ///     let mut send = next.send_init(s, &data[..], 0).unwrap();
    ///     for _ in 0..3 {
    ///         send.start().unwrap();
    ///         world.any_process().receive_vec::<f32>().unwrap();
    ///         send.wait().unwrap();
    ///     }
    /// });
    /// ```
    pub fn start(&mut self) -> Result<()> {
        self.rt.pml.with(|o| o.start(self.id))?;
        self.active = true;
        Ok(())
    }

    /// Whether a started operation has not been waited for yet.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut x = 0i64;
    /// oxmpi::request::scope(|s| {
    ///     let mut recv = world.any_process().receive_init(s, &mut x, 0).unwrap();
    ///     assert!(!recv.is_active());
    ///     recv.start().unwrap();
    ///     assert!(recv.is_active());
    ///     world.process_at_rank(world.rank()).send(&5i64).unwrap();
    ///     recv.wait().unwrap();
    ///     assert!(!recv.is_active());
    /// });
    /// ```
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// `MPI_Wait`: completes the current operation (an inactive request
    /// gives an empty status at once).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut x = 0u32;
    /// oxmpi::request::scope(|s| {
    ///     let mut recv = world.any_process().receive_init(s, &mut x, 1).unwrap();
    ///     for _ in 0..3 {
    ///         recv.start().unwrap();
    ///         let st = recv.wait().unwrap();
    ///         println!("from rank {}", st.source_rank());
    ///     }
    /// });
    /// ```
    pub fn wait(&mut self) -> Result<Status> {
        let r = self.rt.pml.wait(self.id);
        self.active = false;
        status_result(r)
    }

    /// `MPI_Test`: the status once the current operation has completed.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut x = 0u32;
    /// oxmpi::request::scope(|s| {
    ///     let mut recv = world.any_process().receive_init(s, &mut x, 1).unwrap();
    ///     recv.start().unwrap();
    ///     let st = loop {
    ///         if let Some(r) = recv.test() {
    ///             break r.unwrap();
    ///         }
    ///         // ... other work ...
    ///     };
    ///     println!("from rank {}", st.source_rank());
    /// });
    /// ```
    pub fn test(&mut self) -> Option<Result<Status>> {
        let r = self.rt.pml.test(self.id).transpose()?;
        self.active = false;
        Some(status_result(r))
    }

    /// `MPI_Cancel` of the current operation.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut x = 0u8;
    /// oxmpi::request::scope(|s| {
    ///     let mut recv = world.any_process().receive_init(s, &mut x, 99).unwrap();
    ///     recv.start().unwrap();
    ///     recv.cancel().unwrap();
    ///     let st = recv.wait().unwrap();
    ///     println!("cancelled: {}", st.cancelled());
    /// });
    /// ```
    pub fn cancel(&self) -> Result<()> {
        Ok(self.rt.pml.with(|o| o.cancel(self.id))?)
    }
}

impl Drop for PersistentRequest<'_, '_> {
    fn drop(&mut self) {
        let _ = self.rt.pml.wait(self.id);
        let _ = self.rt.pml.with(|o| o.request_free(self.id));
        self.scope.leave(self.slot);
    }
}

mod sealed {
    /// What [`start_all`](super::start_all) needs of a persistent request.
    pub trait Persistent {
        /// The runtime and request id.
        fn parts(&self) -> (&crate::runtime::Runtime, oxmpi_pml::ReqId);
        /// Marks the request active (started).
        fn set_active(&mut self);
    }
}

/// A persistent request that [`start_all`] can start: a
/// [`PersistentRequest`] or an [`OwnedPersistentRequest`].
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// use oxmpi::request::Startable;
/// let (r, n) = (world.rank(), world.size());
/// let (next, prev) = (world.process_at_rank((r + 1) % n), world.process_at_rank((r + n - 1) % n));
/// let mut inb = [0u8; 8];
/// let mut send = next.send_init_owned(vec![1u8; 8], 0).unwrap();
/// oxmpi::request::scope(|s| {
///     let mut recv = prev.receive_init(s, &mut inb, 0).unwrap();
///     // Scoped and owned persistent requests, started together.
///     let mut both: [&mut dyn Startable; 2] = [&mut recv, &mut send];
///     oxmpi::request::start_all(&mut both).unwrap();
///     send.wait().unwrap();
///     recv.wait().unwrap();
/// });
/// ```
pub trait Startable: sealed::Persistent {}

impl sealed::Persistent for PersistentRequest<'_, '_> {
    fn parts(&self) -> (&Runtime, ReqId) {
        (self.rt, self.id)
    }
    fn set_active(&mut self) {
        self.active = true;
    }
}
impl Startable for PersistentRequest<'_, '_> {}

impl<B, L: Level> sealed::Persistent for OwnedPersistentRequest<'_, B, L> {
    fn parts(&self) -> (&Runtime, ReqId) {
        (self.rt, self.id)
    }
    fn set_active(&mut self) {
        self.active = true;
    }
}
impl<B, L: Level> Startable for OwnedPersistentRequest<'_, B, L> {}

/// `MPI_Startall`: starts every request, under one lock (stops at the
/// first that fails, for example because it is already active).
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let (r, n) = (world.rank(), world.size());
/// let (next, prev) = (world.process_at_rank((r + 1) % n), world.process_at_rank((r + n - 1) % n));
/// let (out, mut inb) = ([r; 2], [0i32; 2]);
/// oxmpi::request::scope(|s| {
///     let mut recv = prev.receive_init(s, &mut inb, 0).unwrap();
///     let mut send = next.send_init(s, &out, 0).unwrap();
///     oxmpi::request::start_all(&mut [&mut recv, &mut send]).unwrap();
///     send.wait().unwrap();
///     recv.wait().unwrap();
/// });
/// ```
pub fn start_all(reqs: &mut [&mut dyn Startable]) -> Result<()> {
    let Some(pml) = reqs
        .first()
        .map(|r| std::sync::Arc::clone(&r.parts().0.pml))
    else {
        return Ok(());
    };
    pml.with(|o| -> Result<()> {
        for r in reqs.iter_mut() {
            o.start(r.parts().1)?;
            r.set_active();
        }
        Ok(())
    })
}

/// A persistent request that owns its buffer (a `Vec<T>` moved in): the
/// buffer can be read and changed between operations, while the request
/// is inactive ([`buffer_mut`](Self::buffer_mut) gives `None` while an
/// operation is in flight), and is given back by
/// [`into_buffer`](Self::into_buffer). Forgetting it leaks the buffer,
/// never frees it under the stack.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let (r, n) = (world.rank(), world.size());
/// let next = world.process_at_rank((r + 1) % n);
/// let prev = world.process_at_rank((r + n - 1) % n);
/// let mut send = next.send_init_owned(vec![0i32; 16], 3).unwrap();
/// let mut recv = prev.receive_init_owned(vec![0i32; 16], 3).unwrap();
/// for step in 0..10 {
///     send.buffer_mut().unwrap().fill(r * 100 + step);
///     oxmpi::request::start_all(&mut [&mut recv, &mut send]).unwrap();
///     send.wait().unwrap();
///     recv.wait().unwrap();
///     assert_eq!(recv.buffer().unwrap()[0], ((r + n - 1) % n) * 100 + step);
/// }
/// ```
#[must_use = "a persistent request does nothing until started"]
pub struct OwnedPersistentRequest<'u, B, L: Level = Threading::Single> {
    rt: &'u Runtime,
    id: ReqId,
    active: bool,
    buf: Option<B>,
    _level: PhantomData<L::Marker>,
}

impl<B, L: Level> std::fmt::Debug for OwnedPersistentRequest<'_, B, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedPersistentRequest")
            .field("id", &self.id)
            .field("active", &self.active)
            .finish()
    }
}

impl<'u, B, L: Level> OwnedPersistentRequest<'u, B, L> {
    pub(crate) fn new(rt: &'u Runtime, id: ReqId, buf: B) -> Self {
        OwnedPersistentRequest {
            rt,
            id,
            active: false,
            buf: Some(buf),
            _level: PhantomData,
        }
    }

    /// `MPI_Start`. Error ([`ErrorClass::Request`]) if it is active.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let mut send = next.send_init_owned(vec![0u8; 32], 0).unwrap();
    /// send.start().unwrap();
    /// world.any_process().receive_vec::<u8>().unwrap();
    /// send.wait().unwrap();
    /// ```
    pub fn start(&mut self) -> Result<()> {
        self.rt.pml.with(|o| o.start(self.id))?;
        self.active = true;
        Ok(())
    }

    /// Whether a started operation has not been waited for yet.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let mut send = next.send_init_owned(vec![3i32; 4], 0).unwrap();
    /// send.start().unwrap();
    /// assert!(send.is_active() && send.buffer().is_none()); // lent out
    /// world.any_process().receive_vec::<i32>().unwrap();
    /// send.wait().unwrap();
    /// assert!(!send.is_active());
    /// ```
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// `MPI_Wait` on the current operation (an empty status when inactive).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut recv = world.any_process().receive_init_owned(vec![0u64; 4], 2).unwrap();
    /// recv.start().unwrap();
    /// let st = recv.wait().unwrap();
    /// println!("{:?} from rank {}", recv.buffer().unwrap(), st.source_rank());
    /// ```
    pub fn wait(&mut self) -> Result<Status> {
        let r = self.rt.pml.wait(self.id);
        self.active = false;
        status_result(r)
    }

    /// Whether the current operation has completed (after one progress
    /// pass); an inactive request counts as complete.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let recv = world.any_process().receive_init_owned(vec![0u8; 4], 0).unwrap();
    /// assert!(recv.is_complete()); // not started yet
    /// ```
    pub fn is_complete(&self) -> bool {
        !self.active
            || self.rt.pml.with(|o| {
                o.progress();
                o.is_complete(self.id).unwrap_or(true)
            })
    }

    /// `MPI_Wait` in the form of [`OwnedRequest::wait_status`].
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut recv = world.any_process().receive_init_owned(vec![0u8; 4], 0).unwrap();
    /// recv.start().unwrap();
    /// let st = recv.wait_status(); // never an `Err`: a failure is in the status
    /// if let Some(class) = st.error() {
    ///     eprintln!("receive from rank {} failed: {class:?}", st.source_rank());
    /// }
    /// ```
    pub fn wait_status(&mut self) -> Status {
        let r = self.rt.pml.wait(self.id);
        self.active = false;
        raw_status(r)
    }

    /// `MPI_Test` in the form of [`OwnedRequest::wait_status`].
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut recv = world.any_process().receive_init_owned(vec![0u8; 4], 0).unwrap();
    /// recv.start().unwrap();
    /// let st = loop {
    ///     if let Some(st) = recv.test_status() {
    ///         break st;
    ///     }
    /// };
    /// println!("{} bytes, error {:?}", st.bytes(), st.error());
    /// ```
    pub fn test_status(&mut self) -> Option<Status> {
        let r = self.rt.pml.test(self.id).transpose()?;
        self.active = false;
        Some(raw_status(r))
    }

    /// `MPI_Test` on the current operation.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut recv = world.any_process().receive_init_owned(vec![0f32; 8], 0).unwrap();
    /// recv.start().unwrap();
    /// let st = loop {
    ///     if let Some(r) = recv.test() {
    ///         break r.unwrap();
    ///     }
    ///     // ... other work ...
    /// };
    /// println!("{:?} from rank {}", recv.buffer().unwrap(), st.source_rank());
    /// ```
    pub fn test(&mut self) -> Option<Result<Status>> {
        let r = self.rt.pml.test(self.id).transpose()?;
        self.active = false;
        Some(status_result(r))
    }

    /// `MPI_Cancel` of the current operation.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut recv = world.any_process().receive_init_owned(vec![0u8; 8], 1234).unwrap();
    /// recv.start().unwrap();
    /// recv.cancel().unwrap();
    /// println!("cancelled: {}", recv.wait().unwrap().cancelled());
    /// ```
    pub fn cancel(&self) -> Result<()> {
        Ok(self.rt.pml.with(|o| o.cancel(self.id))?)
    }

    /// The buffer, while no operation is in flight.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut recv = world.process_at_rank(0).receive_init_owned(vec![0i32; 4], 0).unwrap();
    /// recv.start().unwrap();
    /// assert!(recv.buffer().is_none()); // lent to the operation in flight
    /// recv.wait().unwrap();
    /// let data: &Vec<i32> = recv.buffer().unwrap();
    /// println!("{data:?}");
    /// ```
    pub fn buffer(&self) -> Option<&B> {
        (!self.active).then_some(self.buf.as_ref()?)
    }

    /// The buffer to change before the next start, while no operation is
    /// in flight. A slice, so its length (what the request was built for)
    /// cannot change.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let mut send = next.send_init_owned(vec![0u16; 16], 0).unwrap();
    /// for step in 0..3u16 {
    ///     send.buffer_mut().unwrap().fill(step); // same length, new data
    ///     send.start().unwrap();
    ///     world.any_process().receive_vec::<u16>().unwrap();
    ///     send.wait().unwrap();
    /// }
    /// ```
    pub fn buffer_mut<T>(&mut self) -> Option<&mut [T]>
    where
        B: AsMut<[T]>,
    {
        if self.active {
            return None;
        }
        self.buf.as_mut().map(AsMut::as_mut)
    }

    /// `MPI_Request_free`: an active operation goes on and completes on
    /// its own; the buffer is leaked, never freed under it.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let mut send = next.send_init_owned(vec![0u8; 8], 0).unwrap();
    /// send.start().unwrap();
    /// send.free(); // the send goes on; its buffer is leaked
    /// world.any_process().receive_vec::<u8>().unwrap();
    /// ```
    pub fn free(mut self) {
        let _ = self.rt.pml.with(|o| o.request_free(self.id));
        if let Some(b) = self.buf.take() {
            std::mem::forget(b);
        }
        std::mem::forget(self);
    }

    /// Waits for an operation in flight, frees the request, and gives the
    /// buffer back.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let mut send = next.send_init_owned(vec![9u8; 100], 0).unwrap();
    /// send.start().unwrap();
    /// world.any_process().receive_vec::<u8>().unwrap();
    /// let buf: Vec<u8> = send.into_buffer(); // waits, then frees the request
    /// assert_eq!(buf.len(), 100);
    /// ```
    pub fn into_buffer(mut self) -> B {
        let _ = self.rt.pml.wait(self.id);
        self.active = false;
        self.buf.take().expect("live")
    }
}

impl<B, L: Level> Drop for OwnedPersistentRequest<'_, B, L> {
    fn drop(&mut self) {
        let _ = self.rt.pml.wait(self.id);
        let _ = self.rt.pml.with(|o| o.request_free(self.id));
    }
}

/// An operation that owns its buffer: `wait` gives the buffer back.
///
/// ```no_run
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// if world.rank() == 0 {
///     let req = world.process_at_rank(1).immediate_send_owned(vec![1u8; 1024]).unwrap();
///     let (buf, _status) = req.wait().unwrap();
///     assert_eq!(buf.len(), 1024);
/// }
/// ```
#[must_use = "an owned request must be waited for (dropping it waits)"]
pub struct OwnedRequest<'u, B, L: Level = Threading::Single> {
    rt: &'u Runtime,
    id: Option<ReqId>,
    buf: Option<B>,
    _level: PhantomData<L::Marker>,
}

impl<B, L: Level> std::fmt::Debug for OwnedRequest<'_, B, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedRequest")
            .field("id", &self.id)
            .finish()
    }
}

impl<'u, B, L: Level> OwnedRequest<'u, B, L> {
    pub(crate) fn new(rt: &'u Runtime, id: ReqId, buf: B) -> Self {
        OwnedRequest {
            rt,
            id: Some(id),
            buf: Some(buf),
            _level: PhantomData,
        }
    }

    /// Waits for completion; returns the buffer and the status (or the
    /// error, with the buffer still returned through [`OwnedRequest::wait_buf`]).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let req = world.any_process().immediate_receive_owned(vec![0u32; 16], 0).unwrap();
    /// world.process_at_rank(world.rank()).send(&[5u32; 16][..]).unwrap();
    /// let (buf, st) = req.wait().unwrap();
    /// assert_eq!(buf, [5; 16]);
    /// assert_eq!(st.count::<u32>(), Some(16));
    /// ```
    pub fn wait(self) -> Result<(B, Status)> {
        let (b, s) = self.wait_buf();
        s.map(|s| (b, s))
    }

    /// Waits; returns the buffer whatever happened, and the status or error.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let req = world.any_process().immediate_receive_owned(vec![0u8; 4], 0).unwrap();
    /// let (buf, result) = req.wait_buf();
    /// match result {
    ///     Ok(st) => println!("{:?} from rank {}", &buf[..st.bytes()], st.source_rank()),
    ///     Err(e) => eprintln!("{e} (the {} bytes of buffer are still ours)", buf.len()),
    /// }
    /// ```
    pub fn wait_buf(mut self) -> (B, Result<Status>) {
        let id = self.id.take().expect("live");
        let r = status_result(self.rt.pml.wait(id));
        (self.buf.take().expect("live"), r)
    }

    /// Waits; returns the buffer and the status as `MPI_Wait` fills it,
    /// with the error class (if the request failed) in
    /// [`Status::error`] instead of an `Err` (the C layer's form: a
    /// truncated receive still reports source, tag and count).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// use oxmpi::ErrorClass;
    /// let req = world.any_process().immediate_receive_owned(vec![0u8; 4], 0).unwrap();
    /// let (buf, st) = req.wait_status();
    /// if st.error() == Some(ErrorClass::Truncate) {
    ///     println!("rank {} sent more than {} bytes", st.source_rank(), buf.len());
    /// }
    /// ```
    pub fn wait_status(mut self) -> (B, Status) {
        let id = self.id.take().expect("live");
        let st = raw_status(self.rt.pml.wait(id));
        (self.buf.take().expect("live"), st)
    }

    /// [`OwnedRequest::test`] in the form of [`OwnedRequest::wait_status`].
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut req = world.any_process().immediate_receive_owned(vec![0i32; 8], 0).unwrap();
    /// let (buf, st) = loop {
    ///     match req.test_status() {
    ///         Ok(done) => break done,
    ///         Err(pending) => req = pending, // ... other work, then test again ...
    ///     }
    /// };
    /// println!("{buf:?} (error: {:?})", st.error());
    /// ```
    pub fn test_status(mut self) -> std::result::Result<(B, Status), Self> {
        self.test_in_place().ok_or(self)
    }

    /// [`OwnedRequest::test_status`] in place (one progress pass, then the
    /// test, under one lock of the PML): the buffer and status once the
    /// operation is complete; the request is then spent (it holds nothing,
    /// and dropping it returns at once). For a request kept in a table,
    /// which a failed test need not take out and put back.
    ///
    /// # Panics
    ///
    /// When called again after it returned the outcome (so does any other
    /// method that completes the request).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut req = world.any_process().immediate_receive_owned(vec![0i32; 8], 0).unwrap();
    /// let (buf, st) = loop {
    ///     if let Some(done) = req.test_in_place() {
    ///         break done;
    ///     }
    ///     // ... other work ...
    /// };
    /// println!("{buf:?} (error: {:?})", st.error());
    /// ```
    pub fn test_in_place(&mut self) -> Option<(B, Status)> {
        let id = self.id.expect("test_in_place on a spent request");
        let r = self.rt.pml.test(id).transpose()?;
        self.id = None;
        Some((self.buf.take().expect("live"), raw_status(r)))
    }

    /// Whether the operation has completed (after one progress pass),
    /// without consuming the request.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let req = world.any_process().immediate_receive_owned(vec![0u8; 16], 0).unwrap();
    /// while !req.is_complete() {
    ///     // ... other work ...
    /// }
    /// let (buf, _) = req.wait().unwrap(); // returns at once
    /// ```
    pub fn is_complete(&self) -> bool {
        self.id.map_or(true, |id| {
            self.rt.pml.with(|o| {
                o.progress();
                o.is_complete(id).unwrap_or(true)
            })
        })
    }

    /// [`OwnedRequest::is_complete`] without the progress pass: whether
    /// the operation had completed by the last progress (any MPI call's,
    /// or [`Universe::progress`](crate::Universe::progress)). A sweep over
    /// many requests progresses once and then asks each this.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let req = world.any_process().immediate_receive_owned(vec![0u8; 16], 0).unwrap();
    /// while !req.completed() {
    ///     universe.progress();
    /// }
    /// ```
    pub fn completed(&self) -> bool {
        self.id.map_or(true, |id| {
            self.rt.pml.with(|o| o.is_complete(id).unwrap_or(true))
        })
    }

    /// The status at once when the operation completed inside the call
    /// that started it (a small eager send, or a receive whose message was already here: no
    /// request behind it), the request
    /// consumed (it holds nothing then; a buffer it owned is dropped);
    /// otherwise the request back, unchanged.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let me = world.process_at_rank(world.rank());
    /// me.send(&[1u8; 8][..]).unwrap();
    /// let st = match me.immediate_receive_owned(vec![0u8; 8], 0).unwrap().into_inline_status() {
    ///     Ok(st) => st,
    ///     Err(req) => req.wait().unwrap().1,
    /// };
    /// assert_eq!(st.bytes(), 8);
    /// ```
    pub fn into_inline_status(mut self) -> std::result::Result<Status, Self> {
        match self.id.and_then(ReqId::inline_status) {
            Some(st) => {
                self.id = None;
                Ok(Status::from_pml(st))
            }
            None => Err(self),
        }
    }

    /// The buffer back at once when the operation completed inside the
    /// call that started it (a small eager send, or a receive of a message
    /// already here: no request behind it, nothing to wait for); otherwise
    /// the request back, unchanged. A receive's status is then dropped:
    /// [`OwnedRequest::into_inline_status`] gives it.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let me = world.process_at_rank(world.rank());
    /// let req = me.immediate_send_owned(vec![1u8; 8]).unwrap();
    /// match req.completed_inline() {
    ///     Ok(buf) => assert_eq!(buf.len(), 8), // already sent
    ///     Err(req) => drop(req.wait().unwrap()),
    /// }
    /// world.any_process().receive_vec::<u8>().unwrap();
    /// ```
    pub fn completed_inline(mut self) -> std::result::Result<B, Self> {
        match self.id {
            Some(id) if id.completed_inline() => {
                self.id = None;
                Ok(self.buf.take().expect("live"))
            }
            _ => Err(self),
        }
    }

    /// `MPI_Request_free`: the operation goes on and completes on its own
    /// (at the latest in finalize); the buffer is leaked, never freed under
    /// the operation.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let req = next.immediate_send_owned(vec![1u8; 8]).unwrap();
    /// req.free(); // fire and forget: the vector is leaked, never freed under the send
    /// world.any_process().receive_vec::<u8>().unwrap();
    /// ```
    pub fn free(mut self) {
        if let Some(id) = self.id.take() {
            let _ = self.rt.pml.with(|o| o.request_free(id));
        }
        if let Some(b) = self.buf.take() {
            std::mem::forget(b);
        }
    }

    /// `MPI_Test`: `Ok` with the buffer and status once complete.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut req = world.process_at_rank(0).immediate_receive_owned(vec![0f64; 3], 0).unwrap();
    /// let (buf, result) = loop {
    ///     match req.test() {
    ///         Ok(done) => break done,
    ///         Err(pending) => req = pending, // ... other work, then test again ...
    ///     }
    /// };
    /// println!("{buf:?} ({} bytes)", result.unwrap().bytes());
    /// ```
    pub fn test(mut self) -> std::result::Result<(B, Result<Status>), Self> {
        let id = self.id.expect("live");
        match self.rt.pml.test(id).transpose() {
            None => Err(self),
            Some(r) => {
                self.id = None;
                let b = self.buf.take().expect("live");
                Ok((b, status_result(r)))
            }
        }
    }

    /// `MPI_Cancel`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let req = world.any_process().immediate_receive_owned(vec![0u8; 8], 500).unwrap();
    /// req.cancel().unwrap();
    /// let (_buf, st) = req.wait().unwrap();
    /// println!("cancelled: {}", st.cancelled());
    /// ```
    pub fn cancel(&self) -> Result<()> {
        let id = self.id.expect("live");
        Ok(self.rt.pml.with(|o| o.cancel(id))?)
    }
}

// The level marker only carries Send/Sync; a request never relies on not
// being moved.
impl<B: Unpin, L: Level> Unpin for OwnedRequest<'_, B, L> {}

impl<B: Unpin, L: Level> Future for OwnedRequest<'_, B, L> {
    type Output = Result<(B, Status)>;

    /// As for [`Request`]'s `poll`: the buffer and status once complete.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(id) = this.id else {
            return Poll::Ready(Err(Error::new(
                ErrorClass::Request,
                "the request was already completed",
            )));
        };
        match poll_request(this.rt, id, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                this.id = None;
                let b = this.buf.take().expect("live");
                Poll::Ready(r.map(|s| (b, s)))
            }
        }
    }
}

impl<B, L: Level> Drop for OwnedRequest<'_, B, L> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let _ = self.rt.pml.wait(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Entry, Slots};

    /// The slab of a scope, with `()` standing in for a request.
    fn live(s: &Slots<()>) -> Vec<usize> {
        s.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| matches!(e, Entry::Live(_)).then_some(i))
            .collect()
    }

    #[test]
    fn a_scope_reuses_the_entries_its_requests_left() {
        let mut s = Slots::default();
        let ids: Vec<usize> = (0..4).map(|_| s.insert(())).collect();
        assert_eq!(ids, [0, 1, 2, 3]);
        s.remove(1);
        s.remove(3);
        s.remove(3); // twice: ignored
        s.remove(99); // never there: ignored
        assert_eq!(live(&s), [0, 2]);
        // Freed entries are reused, latest first, before the slab grows.
        assert_eq!(s.insert(()), 3);
        assert_eq!(s.insert(()), 1);
        assert_eq!(s.insert(()), 4);
        assert_eq!(live(&s), [0, 1, 2, 3, 4]);
        assert_eq!(s.live().count(), 5);
    }

    #[test]
    fn a_scope_that_keeps_one_request_alive_does_not_grow() {
        // Double buffering: the next receive is posted before the last one
        // is waited for, so one entry is always live.
        let mut s = Slots::default();
        let mut prev = s.insert(());
        for _ in 0..1000 {
            let next = s.insert(());
            s.remove(prev);
            prev = next;
        }
        assert_eq!(s.entries.len(), 2);
    }
}
