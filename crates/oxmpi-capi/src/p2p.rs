//! Point-to-point calls: each a translation onto the Rust API (a
//! [`RawBuffer`] for `buf, count, datatype`, the API's processes, tags and
//! requests).

use std::cell::Cell;
use std::ffi::{c_int, c_void};

use oxmpi::{AnyTag, Error, ErrorClass, RawBuffer, SendMode, Status};

use crate::entry;
use crate::env::put;
use crate::state::{
    lock, state, CommObj, Op, PairReq, ReqObj, L, REQUEST_NULL, REQUEST_SENT, SUCCESS, USER_BASE,
};
use crate::types::count;

/// `MPI_ANY_SOURCE`.
pub const ANY_SOURCE: c_int = -1;
/// `MPI_ANY_TAG`.
pub const ANY_TAG: c_int = -2;

/// `MPI_Status` of the standard ABI.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CStatus {
    /// `MPI_SOURCE`.
    pub source: c_int,
    /// `MPI_TAG`.
    pub tag: c_int,
    /// `MPI_ERROR`.
    pub error: c_int,
    /// Bytes received (low, high), cancelled flag, unused.
    pub internal: [c_int; 5],
}

impl CStatus {
    /// The C form of `s` (`MPI_ERROR` is set by the callers that set it).
    pub fn from_status(s: &Status) -> CStatus {
        if s.source_rank() == ANY_SOURCE {
            // Only an inactive request reports any source: the empty status.
            return CStatus::empty();
        }
        let b = s.bytes() as u64;
        CStatus {
            source: s.source_rank(),
            tag: s.tag(),
            error: 0,
            internal: [
                b as u32 as c_int,
                (b >> 32) as u32 as c_int,
                c_int::from(s.cancelled()),
                0,
                0,
            ],
        }
    }

    /// The empty status (MPI 3.7.3): any source, any tag, no error,
    /// nothing received. `internal[3]` marks it, so that it is written
    /// whole (error included) where other single completions leave
    /// `MPI_ERROR` alone.
    pub fn empty() -> CStatus {
        CStatus {
            source: ANY_SOURCE,
            tag: ANY_TAG,
            internal: [0, 0, 0, 1, 0],
            ..Default::default()
        }
    }

    /// Bytes received.
    pub fn bytes(&self) -> u64 {
        (self.internal[0] as u32 as u64) | ((self.internal[1] as u32 as u64) << 32)
    }
}

/// Writes `st` to `p` unless it is `MPI_STATUS_IGNORE`, leaving `MPI_ERROR`
/// as it was (single-request completions do not set it).
///
/// # Safety
/// `p` must be null or valid for one status.
pub unsafe fn put_status(p: *mut CStatus, st: &CStatus) {
    if p.is_null() {
        return;
    }
    // SAFETY: not null; valid per the caller.
    unsafe {
        let err = if st.internal[3] == 1 { 0 } else { (*p).error };
        p.write(CStatus { error: err, ..*st });
    }
}

/// The error a completed operation's status carries, if any.
fn status_error(s: &Status) -> Option<Error> {
    s.error().map(|class| {
        Error::new(
            class,
            match class {
                ErrorClass::Truncate => format!(
                    "message truncated: the receive buffer took {} bytes of a longer message",
                    s.bytes()
                ),
                _ => s
                    .error_reason()
                    .unwrap_or_else(|| format!("the request failed ({class:?})")),
            },
        )
    })
}

/// `buf, count, datatype` as a raw buffer. Callers have checked that MPI
/// is initialized (the contiguous fast path does not look again).
///
/// # Safety
/// The memory must stay valid as the MPI standard requires for the call.
#[inline(always)]
pub(crate) unsafe fn raw(
    buf: *const c_void,
    n: impl Into<i64>,
    dt: usize,
) -> Result<RawBuffer, Error> {
    let n = count64(n.into())?;
    if let Some(size) = crate::types::contiguous_size(dt) {
        // The small-message path: a predefined contiguous type is bytes,
        // with no datatype object built or shared.
        let len = n.checked_mul(size).ok_or_else(|| {
            Error::new(
                ErrorClass::Count,
                format!("{n} elements overflow the address space"),
            )
        })?;
        if buf.is_null() && len > 0 {
            // A predefined type holds no absolute address (that is what
            // MPI_BOTTOM, the null pointer, would be for).
            return Err(Error::new(
                ErrorClass::Buffer,
                format!("the buffer is a null pointer and the count is {n}"),
            ));
        }
        // SAFETY: forwarded from the caller (`len` bytes at `buf`).
        return Ok(unsafe { RawBuffer::bytes(buf.cast(), len) });
    }
    if n == 0 && dt == crate::state::DATATYPE_NULL {
        // Zero elements need no datatype (a zero-count receive with
        // MPI_DATATYPE_NULL is accepted, as MPICH does).
        // SAFETY: zero bytes are reached.
        return unsafe { RawBuffer::new(buf.cast(), 0, &oxmpi::UserDatatype::of::<u8>()) };
    }
    let dt = state()?.datatype(dt)?;
    // SAFETY: forwarded from the caller.
    unsafe { RawBuffer::new(buf.cast(), n, &dt) }
}

/// A large count (`MPI_Count`), checked non-negative.
pub fn count64(n: i64) -> Result<usize, Error> {
    usize::try_from(n).map_err(|_| Error::new(ErrorClass::Count, format!("count {n} is negative")))
}

/// Starts a send (the program keeps the buffer valid until it completes).
#[inline(always)]
fn start_send(
    c: &CommObj,
    b: RawBuffer,
    dest: c_int,
    tag: c_int,
    mode: SendMode,
) -> Result<Op, Error> {
    b.send_to(&c.comm.process_at_rank(dest), tag, mode)
}

/// The small-message path of `MPI_Isend` and `MPI_Send`: sends `buf, n,
/// dt` to `dest` at once when it is contiguous bytes of a predefined type
/// that go out complete inside the call (seed 000's immediate send), with
/// no buffer object, request or result built. False sends nothing: the
/// caller takes the general path, which also reports every error (so a
/// null buffer, a bad count or rank or tag never come here as sent).
///
/// # Safety
/// `buf` valid for the call, as the MPI standard requires.
#[inline(always)]
unsafe fn send_inline(
    c: &CommObj,
    buf: *const c_void,
    n: i64,
    dt: usize,
    dest: c_int,
    tag: c_int,
) -> bool {
    // SAFETY: forwarded from the caller.
    let Some(data) = (unsafe { contiguous_data(buf, n, dt) }) else {
        return false;
    };
    c.comm.process_at_rank(dest).try_send_inline(data, tag)
}

/// The bytes of a send buffer of `n` elements of a predefined contiguous
/// `dt` (see [`contiguous_bytes`]).
///
/// # Safety
/// `buf` valid for the call, as the MPI standard requires; the slice does
/// not outlive the call.
#[inline(always)]
unsafe fn contiguous_data<'a>(buf: *const c_void, n: i64, dt: usize) -> Option<&'a [u8]> {
    let len = contiguous_bytes(buf.is_null(), n, dt)?;
    Some(if len == 0 {
        &[]
    } else {
        // SAFETY: `len` bytes at `buf` (not null), valid for the call (the
        // caller's contract); the sends copy them before they return true.
        unsafe { std::slice::from_raw_parts(buf.cast(), len) }
    })
}

/// The bytes of `n` elements of `dt` for a small-message path: only for a
/// predefined contiguous type, a count that is not negative, and a buffer
/// that is not null (`buf_null`) unless there is nothing to move.
#[inline(always)]
fn contiguous_bytes(buf_null: bool, n: i64, dt: usize) -> Option<usize> {
    let size = crate::types::contiguous_size(dt)?;
    let len = usize::try_from(n).ok()?.checked_mul(size)?;
    (len == 0 || !buf_null).then_some(len)
}

/// `MPI_COMM_WORLD` or `MPI_COMM_SELF` for a small-message path (the
/// handles that need no lookup in the table), once initialized and until
/// finalized.
#[inline(always)]
fn predefined_comm_live(comm: usize) -> Option<&'static CommObj> {
    if crate::state::finalized() {
        return None;
    }
    crate::state::state_any()?.predefined_comm(comm)
}

/// The Rust API's source for a C `source` argument (`MPI_ANY_SOURCE`:
/// any process).
#[inline(always)]
fn peer(c: &CommObj, source: c_int) -> oxmpi::Peer<'_, 'static, L> {
    c.comm.peer((source != ANY_SOURCE).then_some(source))
}

/// The Rust API's tag for a C `tag` argument (`MPI_ANY_TAG`: `None`).
fn tag_of(tag: c_int) -> Option<i32> {
    (tag != ANY_TAG).then_some(tag)
}

/// Posts a receive from `source` (or `MPI_ANY_SOURCE`) with `tag` (or
/// `MPI_ANY_TAG`).
#[inline(always)]
fn start_recv(c: &CommObj, b: RawBuffer, source: c_int, tag: c_int) -> Result<Op, Error> {
    b.receive_from(&peer(c, source), tag_of(tag))
}

/// Waits for `r`; the status, or the error it ended with.
fn finish(r: Op) -> Outcome {
    outcome(&r.wait_status().1)
}

/// Stores a request; returns its handle.
pub(crate) fn store(r: ReqObj) -> Result<usize, Error> {
    Ok(lock(&state()?.requests).insert(r))
}

/// The communicator handle of a stored request (for its error handler).
pub fn request_comm(h: usize) -> Option<usize> {
    if h < USER_BASE {
        // `MPI_REQUEST_NULL` or `REQUEST_SENT`: no communicator, no lock.
        return None;
    }
    let s = crate::state::state_any()?;
    match lock(&s.requests).get(h)? {
        ReqObj::Op(_, c) | ReqObj::Persistent(_, c) | ReqObj::Coll(_, c) => Some(*c),
        ReqObj::Pair(p) => Some(p.comm),
        ReqObj::Greq(_) | ReqObj::Done(..) => None,
    }
}

/// The communicator whose error handler reports errors of a call on
/// `*req` (`None`: MPI_COMM_WORLD's).
///
/// # Safety
/// `req` null or valid for a read.
pub unsafe fn comm_of_request(req: *const usize) -> Option<usize> {
    if req.is_null() {
        return None;
    }
    // SAFETY: not null, valid per the caller.
    request_comm(unsafe { *req })
}

/// A generalized request: the program's callbacks, completed by
/// `MPI_Grequest_complete`.
pub struct Greq {
    query: QueryFn,
    free: FreeFn,
    cancel: CancelFn,
    extra: usize,
    complete: std::sync::atomic::AtomicBool,
    freed: std::sync::atomic::AtomicBool,
    /// For an operation of the library's own behind a generalized request
    /// (`MPI_Comm_idup`): advances it without blocking, and says whether
    /// it is complete (it is polled wherever completion is looked at).
    poll: Option<Poll>,
    /// The error a polled request completed with.
    failed: std::sync::Mutex<Option<Error>>,
}

/// What advances a polled generalized request ([`Greq::polled`]): `None`
/// while incomplete, then the outcome.
pub type Poll = Box<dyn Fn() -> Option<Result<(), Error>> + Send + Sync>;

/// `MPI_Grequest_query_function`.
pub type QueryFn = Option<unsafe extern "C" fn(*mut c_void, *mut CStatus) -> c_int>;
/// `MPI_Grequest_free_function`.
pub type FreeFn = Option<unsafe extern "C" fn(*mut c_void) -> c_int>;
/// `MPI_Grequest_cancel_function`.
pub type CancelFn = Option<unsafe extern "C" fn(*mut c_void, c_int) -> c_int>;

impl Greq {
    /// A request of the library's own, completed when `poll` says so (no
    /// callbacks; its status is the empty status).
    pub fn polled(poll: Poll) -> Greq {
        Greq {
            query: None,
            free: None,
            cancel: None,
            extra: 0,
            complete: Default::default(),
            freed: Default::default(),
            poll: Some(poll),
            failed: std::sync::Mutex::new(None),
        }
    }

    /// Whether the request is complete (a polled one is advanced first).
    fn is_complete(&self) -> bool {
        use std::sync::atomic::Ordering;
        if let (false, Some(p)) = (self.complete.load(Ordering::Acquire), &self.poll) {
            if let Some(r) = p() {
                *lock(&self.failed) = r.err();
                self.complete.store(true, Ordering::Release);
            }
        }
        self.complete.load(Ordering::Acquire)
    }

    /// Marks the request freed (`freeing`: `MPI_Request_free`) or complete
    /// (`MPI_Grequest_complete`), deciding under the request table's lock
    /// `t`: when it was already the other, takes handle `h` out of the
    /// table and runs the free function (with the table unlocked). So
    /// exactly one of the two calls frees it, and a request freed first
    /// stays in the table for `MPI_Grequest_complete` to find.
    fn settle(
        &self,
        mut t: std::sync::MutexGuard<'_, crate::state::Requests>,
        h: usize,
        freeing: bool,
    ) {
        use std::sync::atomic::Ordering;
        let (mine, other) = if freeing {
            (&self.freed, &self.complete)
        } else {
            (&self.complete, &self.freed)
        };
        mine.store(true, Ordering::Release);
        let both = other.load(Ordering::Acquire);
        if both {
            t.remove(h);
        }
        drop(t);
        if both {
            self.call_free();
        }
    }

    fn call_free(&self) -> c_int {
        match self.free {
            // SAFETY: the program's callback with its extra state, as
            // MPI_Grequest_start registered it.
            Some(f) => unsafe { f(self.extra as *mut c_void) },
            None => 0,
        }
    }
}

type Outcome = (CStatus, Option<Error>);

fn outcome(st: &Status) -> Outcome {
    (CStatus::from_status(st), status_error(st))
}

/// Completes `obj` if it can (`block`: waits until it can). Gives back
/// the outcome and, for persistent requests, the request to keep; or the
/// untouched request when it is not complete.
fn complete(obj: ReqObj, block: bool) -> Result<(Outcome, Option<ReqObj>), ReqObj> {
    match obj {
        ReqObj::Op(r, c) => {
            if block {
                Ok((finish(r), None))
            } else {
                match r.test_status() {
                    Ok((_, st)) => Ok((outcome(&st), None)),
                    Err(r) => Err(ReqObj::Op(r, c)),
                }
            }
        }
        ReqObj::Persistent(mut p, c) => {
            let st = if block {
                Some(p.wait_status())
            } else {
                p.test_status()
            };
            match st {
                None => Err(ReqObj::Persistent(p, c)),
                Some(st) => Ok((outcome(&st), Some(ReqObj::Persistent(p, c)))),
            }
        }
        ReqObj::Pair(p) => {
            let PairReq {
                send: sr,
                recv: rr,
                comm: c,
                keep,
            } = *p;
            if !(block || (sr.is_complete() && rr.is_complete())) {
                return Err(ReqObj::Pair(Box::new(PairReq {
                    send: sr,
                    recv: rr,
                    comm: c,
                    keep,
                })));
            }
            let (_, sst) = sr.wait_status();
            let (_, rst) = rr.wait_status();
            let mut o = outcome(&rst);
            o.1 = status_error(&sst).or(o.1);
            Ok((o, None))
        }
        ReqObj::Done(st, err) => Ok(((st, err.map(|e| *e)), None)),
        ReqObj::Coll(r, c) => {
            // An inactive persistent collective: the empty status.
            if r.persistent() && !r.is_active() {
                return Ok(((CStatus::empty(), None), Some(ReqObj::Coll(r, c))));
            }
            match r.complete(block) {
                None => Err(ReqObj::Coll(r, c)),
                Some(e) => {
                    let keep = r.persistent().then(|| ReqObj::Coll(r, c));
                    Ok(((CStatus::empty(), e), keep))
                }
            }
        }
        ReqObj::Greq(g) => {
            while block && !g.is_complete() {
                std::thread::yield_now();
            }
            if !g.is_complete() {
                return Err(ReqObj::Greq(g));
            }
            let mut st = CStatus::empty();
            let mut err = None;
            if let Some(q) = g.query {
                // SAFETY: the program's callback, with its extra state and a
                // status to fill, as MPI_Grequest_start registered it.
                let rc = unsafe { q(g.extra as *mut c_void, &mut st) };
                // The query's status is the request's: a single completion
                // leaves its MPI_ERROR alone, as for any other request.
                st.internal[3] = 0;
                err = callback_error(rc, "query_fn");
            }
            let rc = g.call_free();
            if err.is_none() {
                err = callback_error(rc, "free_fn");
            }
            if err.is_none() {
                err = lock(&g.failed).take();
            }
            Ok(((st, err), None))
        }
    }
}

/// The error a generalized request's callback `what` returned (`None`
/// for `MPI_SUCCESS`): the completion call returns it, as the standard
/// says, so its class is the code's (an error code is its class here); a
/// code that is no class is `MPI_ERR_OTHER`.
fn callback_error(rc: c_int, what: &str) -> Option<Error> {
    (rc != 0).then(|| {
        Error::new(
            ErrorClass::from_code(rc).unwrap_or(ErrorClass::Other),
            format!("{what} returned {rc}"),
        )
    })
}

/// Completes handle `*req` if it can (`block`: waits): the outcome, and
/// `*req` reset to `MPI_REQUEST_NULL` unless persistent; `None` while
/// incomplete.
///
/// # Safety
/// `req` valid for read and write.
pub unsafe fn progress_one(req: *mut usize, block: bool) -> Result<Option<Outcome>, Error> {
    if req.is_null() {
        return Err(crate::state::null_arg("request"));
    }
    // SAFETY: not null, valid per the caller.
    let h = unsafe { *req };
    if h == REQUEST_NULL {
        return Ok(Some((CStatus::empty(), None)));
    }
    let s = state()?;
    if let Some(e) = crate::part::armed(h) {
        // A partitioned send whose message has not started.
        return if block { Err(e) } else { Ok(None) };
    }
    let mut t = lock(&s.requests);
    // A test of a non-blocking operation tests it in place (one progress
    // pass and the test, under one PML lock): no removal and putting back
    // while it is in flight.
    if let (false, Some(ReqObj::Op(r, _))) = (block, t.get_mut(h)) {
        let Some(((), st)) = r.test_in_place() else {
            drop(t);
            // A test loop must move outstanding collectives on too (the
            // PML's own test leaves that to us: its check cost the
            // in-place test 40 instructions).
            crate::sched::poke();
            return Ok(None);
        };
        // Complete: the entry holds nothing now.
        drop(t.remove(h));
        drop(t);
        // SAFETY: as above.
        unsafe { *req = REQUEST_NULL };
        return Ok(Some(outcome(&st)));
    }
    let obj = t.remove(h).ok_or_else(|| {
        Error::new(
            ErrorClass::Request,
            format!("invalid request handle {h:#x}"),
        )
    })?;
    drop(t);
    match complete(obj, block) {
        Ok((o, keep)) => {
            match keep {
                Some(k) => lock(&s.requests).restore(h, k),
                // SAFETY: as above.
                None => unsafe { *req = REQUEST_NULL },
            }
            Ok(Some(o))
        }
        Err(obj) => {
            lock(&s.requests).restore(h, obj);
            crate::sched::poke();
            Ok(None)
        }
    }
}

/// `MPI_Wait` on handle `*req`.
///
/// # Safety
/// `req` valid for read and write.
pub unsafe fn wait_one(req: *mut usize) -> Result<Outcome, Error> {
    // SAFETY: forwarded.
    Ok(unsafe { progress_one(req, true) }?.unwrap_or((CStatus::empty(), None)))
}

/// `MPI_Test` on handle `*req`: `None` while incomplete.
///
/// # Safety
/// `req` valid for read and write.
pub unsafe fn test_one(req: *mut usize) -> Result<Option<Outcome>, Error> {
    // SAFETY: forwarded.
    unsafe { progress_one(req, false) }
}

/// Fills `statuses[i]` (unless `MPI_STATUSES_IGNORE`); `error`: the
/// `MPI_ERROR` to set (left untouched when `None`).
///
/// # Safety
/// `statuses` null or valid for index `i`.
unsafe fn put_status_at(statuses: *mut CStatus, i: usize, st: &CStatus, error: Option<c_int>) {
    if statuses.is_null() {
        return;
    }
    // SAFETY: per the caller.
    unsafe {
        let p = statuses.add(i);
        let e = error.unwrap_or((*p).error);
        p.write(CStatus { error: e, ..*st });
    }
}

/// One pass over `reqs` completing what can complete (`any`: stop at the
/// first), after one progress pass: each completed index and outcome goes
/// to `found`. Whether any request was active (neither null nor an
/// inactive persistent request).
///
/// The request table is locked once for the pass, not three times per
/// request, and non-blocking operations are only looked at
/// ([`oxmpi::request::OwnedRequest::completed`]): one progress pass per
/// sweep, as Open MPI's `ompi_request_default_wait_any` makes one
/// `opal_progress` per round, instead of one per request. Requests of
/// other kinds (persistent, paired, generalized, whose completion may run
/// a user's query function, and complete table entries) are tested with
/// the lock released, as `MPI_Test` tests them. An invalid handle fails
/// the call before anything completes; a handle twice in the array (as
/// erroneous) completes once. A module that reports no work is
/// polled on every 8th progress pass only (`Ob1::progress`), so a test
/// loop over TCP requests may now take a few more calls to see an arrival,
/// as with `MPI_Test`.
///
/// # Safety
/// `reqs` valid for `n` handles.
unsafe fn sweep(
    n: usize,
    reqs: *mut usize,
    any: bool,
    mut found: impl FnMut(usize, Outcome),
) -> Result<bool, Error> {
    let s = state()?;
    s.universe.progress();
    let mut active = false;
    let mut t = lock(&s.requests);
    // An invalid handle fails the call before anything completes (a request
    // completed and then dropped with the error would be lost to the
    // program).
    for i in 0..n {
        // SAFETY: the caller's array of `n` requests.
        let h = unsafe { *reqs.add(i) };
        if h != REQUEST_NULL && t.get(h).is_none() {
            return Err(Error::new(
                ErrorClass::Request,
                format!("invalid request handle {h:#x} at index {i}"),
            ));
        }
    }
    for i in 0..n {
        // SAFETY: the caller's array of `n` requests.
        let p = unsafe { reqs.add(i) };
        // SAFETY: as above.
        let h = unsafe { *p };
        if h == REQUEST_NULL {
            continue;
        }
        if let Some(st) = crate::state::Requests::done_untabled(h) {
            active = true;
            // SAFETY: as above.
            unsafe { *p = REQUEST_NULL };
            found(i, (st, None));
            if any {
                break;
            }
            continue;
        }
        let op_done = match t.get(h) {
            // Every handle was checked above: this one completed earlier
            // in this sweep (the same handle twice in the array, an
            // erroneous call). Passed over, so that the completion already
            // made is not lost.
            None => continue,
            Some(ReqObj::Persistent(q, _)) if !q.is_active() => {
                // An armed partitioned send is active, not complete.
                active |= crate::part::armed(h).is_some();
                continue;
            }
            Some(ReqObj::Coll(c, _)) if c.persistent() && !c.is_active() => continue,
            Some(ReqObj::Op(r, _)) => Some(r.completed()),
            Some(_) => None,
        };
        active = true;
        let outcome = match op_done {
            Some(false) => continue,
            Some(true) => {
                let Some(ReqObj::Op(r, _)) = t.remove(h) else {
                    unreachable!("looked up above");
                };
                // SAFETY: as above.
                unsafe { *p = REQUEST_NULL };
                finish(r)
            }
            None => {
                drop(t);
                // SAFETY: as above.
                let o = unsafe { progress_one(p, false) }?;
                t = lock(&s.requests);
                match o {
                    Some(o) => o,
                    None => continue,
                }
            }
        };
        found(i, outcome);
        if any {
            break;
        }
    }
    Ok(active)
}

/// `MPI_Waitsome`/`Testsome` output: indices and statuses; a failed one
/// makes the call return `MPI_ERR_IN_STATUS` with each status's error set.
///
/// # Safety
/// The caller's arrays, valid for `done.len()` entries.
unsafe fn put_some(
    func: &str,
    done: &[(usize, Outcome)],
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut CStatus,
) -> Result<(), Error> {
    let failed = done.iter().any(|(_, (_, e))| e.is_some());
    // SAFETY: the caller's out-parameters.
    unsafe {
        put(outcount, done.len() as c_int, "outcount")?;
        for (k, (i, (st, e))) in done.iter().enumerate() {
            if !indices.is_null() {
                indices.add(k).write(*i as c_int);
            }
            let code = e.as_ref().map_or(0, |e| crate::errcode::code_of(func, e));
            put_status_at(statuses, k, st, failed.then_some(code));
        }
    }
    if failed {
        return Err(Error::new(
            ErrorClass::InStatus,
            "a completed request failed: see the statuses",
        ));
    }
    Ok(())
}

/// `MPI_Waitall` (and `MPI_Testall` once all are complete) of the `n`
/// requests at `reqs`: on a failure, every status gets its own
/// `MPI_ERROR` and the call fails with `MPI_ERR_IN_STATUS`. `func` names
/// the call in the codes of the statuses.
///
/// # Safety
/// `reqs` valid for `n` handles, `statuses` null or valid for `n`.
///
/// Out of line, and so one instance of `wait_all` and its closure, inlined
/// here: inlined into both callers instead, neither instance was inlined,
/// and `MPI_Waitall` of 60 complete requests cost 47 instructions more per
/// request (callgrind).
#[inline(never)]
unsafe fn waitall(
    func: &str,
    n: usize,
    reqs: *mut usize,
    statuses: *mut CStatus,
) -> Result<(), Error> {
    // Each status is written as its request completes, MPI_ERROR left
    // alone; if any failed, every MPI_ERROR is set afterwards (the
    // failed ones' codes are made then, out of the loop: the closure
    // stays small enough to be inlined; nothing is allocated otherwise).
    let mut failed: Vec<(usize, Error)> = Vec::new();
    // SAFETY: the caller's array of `n` requests.
    unsafe {
        wait_all(n, reqs, |i, r| {
            let (st, e) = match r {
                Ok(o) => o,
                Err(e) => (CStatus::empty(), Some(e)),
            };
            if let Some(e) = e {
                note_failure(&mut failed, i, e);
            }
            if !statuses.is_null() {
                // SAFETY: the caller's array of `n` statuses; MPI_ERROR
                // is neither read nor written here.
                let p = statuses.add(i);
                (*p).source = st.source;
                (*p).tag = st.tag;
                (*p).internal = st.internal;
            }
        })
    }?;
    if !failed.is_empty() {
        if !statuses.is_null() {
            for i in 0..n {
                // SAFETY: the caller's array of `n` statuses.
                unsafe { (*statuses.add(i)).error = SUCCESS };
            }
            for (i, e) in &failed {
                let code = crate::errcode::code_of(func, e);
                // SAFETY: as above.
                unsafe { (*statuses.add(*i)).error = code };
            }
        }
        return Err(Error::new(
            ErrorClass::InStatus,
            format!("a request of {func} failed: see the statuses"),
        ));
    }
    Ok(())
}

/// Keeps request `i`'s error for `waitall` (out of line: the rare case
/// stays out of the closure run for every request).
#[cold]
#[inline(never)]
fn note_failure(failed: &mut Vec<(usize, Error)>, i: usize, e: Error) {
    failed.push((i, e));
}

/// The `n` request handles at `reqs`, after one progress pass, each
/// checked (an invalid one fails the call before any is looked at).
///
/// # Safety
/// `reqs` null or valid for `n` handles.
unsafe fn handles<'a>(n: usize, reqs: *const usize) -> Result<&'a [usize], Error> {
    if n == 0 {
        return Ok(&[]);
    }
    if reqs.is_null() {
        return Err(crate::state::null_arg("array_of_requests"));
    }
    let s = state()?;
    s.universe.progress();
    // SAFETY: the caller's array of `n` requests.
    unsafe { check_handles(&lock(&s.requests), n, reqs) }?;
    // SAFETY: as above.
    Ok(unsafe { std::slice::from_raw_parts(reqs, n) })
}

/// Whether handle `h` is an active request (neither null nor an inactive
/// persistent request).
fn is_active(h: usize) -> bool {
    if h == REQUEST_NULL {
        return false;
    }
    let Ok(s) = state() else {
        return false;
    };
    let t = lock(&s.requests);
    match t.get(h) {
        Some(ReqObj::Persistent(q, _)) => q.is_active() || crate::part::armed(h).is_some(),
        Some(ReqObj::Coll(c, _)) => !c.persistent() || c.is_active(),
        _ => true,
    }
}

/// `MPI_Request_get_status` of handle `req` without a progress pass: its
/// outcome if it is complete (the empty status for a null or inactive
/// request), the request left as it was (a completed one is kept, with its
/// outcome, for the `MPI_Wait` or `MPI_Test` that frees it).
fn peek(req: usize) -> Result<Option<Outcome>, Error> {
    if req == REQUEST_NULL {
        return Ok(Some((CStatus::empty(), None)));
    }
    let s = state()?;
    // A collective's outcome is kept in its schedule: a completed
    // persistent one stays active for the Wait or Test that ends it.
    let coll = match lock(&s.requests).get(req) {
        Some(ReqObj::Coll(c, _)) => Some(c.clone()),
        _ => None,
    };
    if let Some(c) = coll {
        return Ok(c.peek().map(|e| (CStatus::empty(), e)));
    }
    let done = match lock(&s.requests).get(req) {
        Some(ReqObj::Op(r, _)) => r.is_complete(),
        Some(ReqObj::Pair(p)) => p.send.is_complete() && p.recv.is_complete(),
        Some(ReqObj::Persistent(p, _)) => {
            (!p.is_active() && crate::part::armed(req).is_none()) || p.is_complete()
        }
        Some(ReqObj::Greq(g)) => g.is_complete(),
        Some(ReqObj::Coll(c, _)) => !c.is_active() || c.is_complete(),
        Some(ReqObj::Done(..)) => true,
        None => {
            return Err(Error::new(
                ErrorClass::Request,
                format!("invalid request handle {req:#x}"),
            ))
        }
    };
    if !done {
        return Ok(None);
    }
    // Complete it, then put back a request that reports the same outcome.
    let mut h = req;
    // SAFETY: a local copy of the handle.
    let o = unsafe { progress_one(&mut h, true) }?;
    let Some((st, err)) = o else {
        return Ok(None);
    };
    if h == REQUEST_NULL {
        lock(&s.requests).restore(req, ReqObj::Done(st, err.clone().map(Box::new)));
    }
    Ok(Some((st, err)))
}

/// `MPI_UNDEFINED`.
const UNDEFINED: c_int = -32766;

/// Largest batch `wait_all` keeps between calls (one huge wait does not
/// hold memory for the thread's life).
const WAIT_KEEP_MAX: usize = 4096;

thread_local! {
    /// `MPI_Waitsome`'s and `MPI_Testsome`'s completions, kept between
    /// calls (see [`with_done`]).
    static SOME_SCRATCH: Cell<Vec<(usize, Outcome)>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` with the thread's list of completions, empty, and keeps it
/// for the next call (up to `WAIT_KEEP_MAX` entries), so that a warm
/// `MPI_Waitsome` or `MPI_Testsome` allocates nothing. Taken, not
/// borrowed: a call from inside the call starts with an empty one.
fn with_done<T>(f: impl FnOnce(&mut Vec<(usize, Outcome)>) -> T) -> T {
    let mut done = SOME_SCRATCH.try_with(Cell::take).unwrap_or_default();
    let out = f(&mut done);
    done.clear();
    if done.capacity() <= WAIT_KEEP_MAX {
        let _ = SOME_SCRATCH.try_with(|c| c.set(done));
    }
    out
}

thread_local! {
    /// `wait_all`'s batch of operations and their indices, kept between calls.
    static WAIT_SCRATCH: Cell<(Vec<Op>, Vec<usize>)> = const { Cell::new((Vec::new(), Vec::new())) };
}

/// Waits for every request of `reqs` (`MPI_Waitall`): the non-blocking
/// operations together (one lock per pass; up to
/// [`oxmpi::request::WAIT_FEW`] requests with [`oxmpi::request::wait_all_slots`]
/// from the stack, more with [`oxmpi::request::wait_all_drain`]),
/// the others one by one; hands each entry's outcome to `put(index,
/// outcome)` (in no particular order, sometimes under the request table's
/// lock: `put` must not call MPI), handles reset as `MPI_Wait` resets them.
///
/// # Safety
/// `reqs` valid for `n` handles.
unsafe fn wait_all(
    n: usize,
    reqs: *mut usize,
    mut put: impl FnMut(usize, Result<Outcome, Error>),
) -> Result<(), Error> {
    let s = state()?;
    let mut others = Vec::new();
    let t = lock(&s.requests);
    // Every handle is checked before anything waits (MPI_ERR_REQUEST at
    // once, nothing completed or freed), as MPICH's argument checks do.
    // SAFETY: forwarded from the caller.
    unsafe { check_handles(&t, n, reqs) }?;
    if n <= oxmpi::request::WAIT_FEW {
        // A few requests (the usual exchange): their operations wait from
        // slots on the stack, with no vector kept between calls.
        let mut few: [Option<Op>; oxmpi::request::WAIT_FEW] = Default::default();
        let mut few_at = [0; oxmpi::request::WAIT_FEW];
        let mut k = 0;
        // SAFETY: forwarded from the caller.
        unsafe {
            take_requests(t, n, reqs, &mut put, &mut others, |i, r| {
                few[k] = Some(r);
                few_at[k] = i;
                k += 1;
            })
        };
        oxmpi::request::wait_all_slots(&mut few[..k], |j, _, st| put(few_at[j], Ok(outcome(&st))));
    } else {
        // The thread's vectors of its last wait, taken (not borrowed: a
        // wait from inside a wait starts with empty ones), so a warm wait
        // allocates nothing.
        let (mut batch, mut batch_at) = WAIT_SCRATCH.try_with(Cell::take).unwrap_or_default();
        // SAFETY: forwarded from the caller.
        unsafe {
            take_requests(t, n, reqs, &mut put, &mut others, |i, r| {
                if batch.is_empty() {
                    batch.reserve(n - i);
                    batch_at.reserve(n - i);
                }
                batch.push(r);
                batch_at.push(i);
            })
        };
        oxmpi::request::wait_all_drain(&mut batch, |k, _, st| put(batch_at[k], Ok(outcome(&st))));
        batch_at.clear();
        if batch.capacity() <= WAIT_KEEP_MAX {
            let _ = WAIT_SCRATCH.try_with(|c| c.set((batch, batch_at)));
        }
    }
    for (i, h, obj) in others {
        if let Some(e) = crate::part::armed(h) {
            lock(&s.requests).restore(h, obj);
            put(i, Err(e));
            continue;
        }
        put(
            i,
            match complete(obj, true) {
                Ok((o, keep)) => {
                    match keep {
                        Some(k) => lock(&s.requests).restore(h, k),
                        // SAFETY: the caller's array of `n` requests.
                        None => unsafe { *reqs.add(i) = REQUEST_NULL },
                    }
                    Ok(o)
                }
                Err(obj) => {
                    lock(&s.requests).restore(h, obj);
                    Err(Error::new(
                        ErrorClass::Intern,
                        "a blocking completion did not complete",
                    ))
                }
            },
        );
    }
    Ok(())
}

/// `MPI_ERR_REQUEST` naming the first of the `n` handles at `reqs` that is
/// neither null nor a request (an invalid handle fails a multiple
/// completion before it completes or waits for anything).
///
/// # Safety
/// `reqs` valid for `n` handles.
#[inline(always)]
unsafe fn check_handles(
    t: &crate::state::Requests,
    n: usize,
    reqs: *const usize,
) -> Result<(), Error> {
    for i in 0..n {
        // SAFETY: the caller's array of `n` requests.
        let h = unsafe { *reqs.add(i) };
        if h != REQUEST_NULL && t.get(h).is_none() {
            return Err(invalid_handle(h, i, n));
        }
    }
    Ok(())
}

/// The error of [`check_handles`], out of line (the check is on the hot
/// path of `MPI_Waitall`; the message is not).
#[cold]
#[inline(never)]
fn invalid_handle(h: usize, i: usize, n: usize) -> Error {
    Error::new(
        ErrorClass::Request,
        format!("invalid request handle {h:#x} at index {i} of {n}"),
    )
}

/// `wait_all`'s pass over the handles, under the request table's lock:
/// null and complete ones get their outcome from `put` at once (as do
/// invalid ones, an error); each non-blocking operation leaves the table
/// for `op(index, operation)`; anything else (persistent, generalized,
/// paired requests) leaves it for `others`. Handles of what left the table
/// are reset, except those in `others` (reset once complete).
///
/// # Safety
/// `reqs` valid for `n` handles.
#[inline(always)]
unsafe fn take_requests(
    mut t: std::sync::MutexGuard<'_, crate::state::Requests>,
    n: usize,
    reqs: *mut usize,
    put: &mut impl FnMut(usize, Result<Outcome, Error>),
    others: &mut Vec<(usize, usize, ReqObj)>,
    mut op: impl FnMut(usize, Op),
) {
    for i in 0..n {
        // SAFETY: the caller's array of `n` requests.
        let p = unsafe { reqs.add(i) };
        // SAFETY: as above.
        let h = unsafe { *p };
        if h == REQUEST_NULL {
            put(i, Ok((CStatus::empty(), None)));
            continue;
        }
        // A send completed inside `MPI_Isend`, or a receive inside
        // `MPI_Irecv` (the handle is its status).
        if let Some(st) = crate::state::Requests::done_untabled(h) {
            put(i, Ok((st, None)));
            // SAFETY: as above.
            unsafe { *p = REQUEST_NULL };
            continue;
        }
        match t.remove(h) {
            None => put(
                i,
                Err(Error::new(
                    ErrorClass::Request,
                    format!("invalid request handle {h:#x}"),
                )),
            ),
            Some(ReqObj::Op(r, _)) => {
                op(i, r);
                // SAFETY: as above.
                unsafe { *p = REQUEST_NULL };
            }
            // Complete already (a small `MPI_Isend`'s `REQUEST_SENT`):
            // its outcome, as `complete` gives it, with no second pass.
            Some(ReqObj::Done(st, e)) => {
                put(i, Ok((st, e.map(|e| *e))));
                // SAFETY: as above.
                unsafe { *p = REQUEST_NULL };
            }
            Some(obj) => others.push((i, h, obj)),
        }
    }
}

#[inline(always)]
fn send(
    buf: *const c_void,
    n: i64,
    dt: usize,
    dest: c_int,
    tag: c_int,
    comm: usize,
    mode: SendMode,
) -> Result<(), Error> {
    let c = state()?.comm(comm)?;
    // SAFETY: the caller's buffer, valid for the call.
    if unsafe { send_inline_general(&c, mode, buf, n, dt, dest, tag) } {
        return Ok(());
    }
    // SAFETY: the caller's buffer, valid for the call.
    let b = unsafe { raw(buf, n, dt) }?;
    let st = b.send_status(&c.comm.process_at_rank(dest), tag, mode)?;
    status_error(&st).map_or(Ok(()), Err)
}

#[inline(always)]
fn isend(
    (buf, n, dt): (*const c_void, i64, usize),
    dest: c_int,
    tag: c_int,
    comm: usize,
    mode: SendMode,
    req: *mut usize,
) -> Result<(), Error> {
    let c = state()?.comm(comm)?;
    if req.is_null() {
        // Checked before anything is sent.
        return Err(crate::state::null_arg("request"));
    }
    // SAFETY: the caller's buffer, valid for the call.
    if unsafe { send_inline_general(&c, mode, buf, n, dt, dest, tag) } {
        // SAFETY: the caller's out-parameter.
        return unsafe { put(req, REQUEST_SENT, "request") };
    }
    // SAFETY: the caller keeps the buffer valid until the request completes.
    let b = unsafe { raw(buf, n, dt) }?;
    let h = match start_send(&c, b, dest, tag, mode)?.completed_inline() {
        // Sent inside the call: no request to keep.
        Ok(_) => REQUEST_SENT,
        Err(r) => store(ReqObj::Op(r, comm))?,
    };
    // SAFETY: the caller's out-parameter.
    unsafe { put(req, h, "request") }
}

fn send_init(
    (buf, n, dt): (*const c_void, i64, usize),
    dest: c_int,
    tag: c_int,
    comm: usize,
    mode: SendMode,
    req: *mut usize,
) -> Result<(), Error> {
    let c = state()?.comm(comm)?;
    // SAFETY: the caller keeps the buffer valid until the request is freed.
    let b = unsafe { raw(buf, n, dt) }?;
    let p = b.send_init_to(&c.comm.process_at_rank(dest), tag, mode)?;
    let h = store(ReqObj::Persistent(Box::new(p), comm))?;
    // SAFETY: the caller's out-parameter.
    unsafe { put(req, h, "request") }
}

/// [`send_inline`] in a general path (`MPI_Send`'s, `MPI_Isend`'s), for a
/// standard send: the immediate send on a communicator that the
/// small-message path before it did not try (any but the predefined two,
/// which come as [`CommRef::Static`](crate::state::CommRef)), then on any
/// communicator the eager send that completes inside the call
/// ([`oxmpi::Process::try_send_eager`]) for a message the immediate send
/// did not take (above its limit, or refused).
///
/// # Safety
/// As for [`send_inline`].
#[inline(always)]
unsafe fn send_inline_general(
    c: &crate::state::CommRef,
    mode: SendMode,
    buf: *const c_void,
    n: i64,
    dt: usize,
    dest: c_int,
    tag: c_int,
) -> bool {
    if mode != SendMode::Standard {
        return false;
    }
    // SAFETY: forwarded from the caller.
    let Some(data) = (unsafe { contiguous_data(buf, n, dt) }) else {
        return false;
    };
    let p = c.comm.process_at_rank(dest);
    (matches!(c, crate::state::CommRef::Shared(_)) && p.try_send_inline(data, tag))
        || p.try_send_eager(data, tag)
}

/// [`send_inline`] on `MPI_COMM_WORLD` or `MPI_COMM_SELF` (the handles
/// that need no lookup in the table), with initialization checked:
/// whether the message went. False sends nothing and builds no error (the
/// general path reports them).
///
/// # Safety
/// `buf` valid for the call, as the MPI standard requires.
#[inline(always)]
unsafe fn send_inline_predefined(
    buf: *const c_void,
    n: c_int,
    dt: usize,
    dest: c_int,
    tag: c_int,
    comm: usize,
) -> bool {
    let Some(c) = predefined_comm_live(comm) else {
        return false;
    };
    // SAFETY: the caller's buffer, valid for the call.
    unsafe { send_inline(c, buf, n.into(), dt, dest, tag) }
}

/// [`send_inline_predefined`] for `MPI_Isend`: whether the message went
/// (then `*req` is `REQUEST_SENT`).
///
/// # Safety
/// As for [`PMPI_Isend`].
#[inline(always)]
unsafe fn isend_inline(
    buf: *const c_void,
    n: c_int,
    dt: usize,
    dest: c_int,
    tag: c_int,
    comm: usize,
    req: *mut usize,
) -> bool {
    // SAFETY: the caller's buffer, valid for the call.
    if req.is_null() || !unsafe { send_inline_predefined(buf, n, dt, dest, tag, comm) } {
        return false;
    }
    // SAFETY: not null; the caller's out-parameter.
    unsafe { req.write(REQUEST_SENT) };
    true
}

/// The small-message path of `MPI_Recv` and `MPI_Irecv` on
/// `MPI_COMM_WORLD` or `MPI_COMM_SELF` (`c`, looked up by the caller with
/// [`predefined_comm_live`]): receives into `buf, n, dt`
/// (contiguous bytes of a predefined type) from rank `source` (or from any
/// rank for `MPI_ANY_SOURCE`) at once when the message can be taken whole
/// inside the call with no request ([`oxmpi::Process::try_receive_inline`]
/// or [`oxmpi::AnyProcess::try_receive_inline`], or their spinning forms
/// for a `blocking` receive), of at most `cap` bytes: its status. `None`
/// receives nothing and builds no error: the general path then receives,
/// and reports every error (a null
/// buffer, a bad count, rank or tag, a truncated message never complete
/// here).
///
/// # Safety
/// `buf` valid for the call, as the MPI standard requires.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn recv_small(
    c: &CommObj,
    buf: *mut c_void,
    n: c_int,
    dt: usize,
    source: c_int,
    tag: c_int,
    blocking: bool,
    cap: usize,
) -> Option<oxmpi::Status> {
    // A bad source or tag is refused below.
    // No more than `cap` bytes are taken: a longer message does not fit
    // the buffer as given and stays for the general path.
    let len = contiguous_bytes(buf.is_null(), n.into(), dt)?.min(cap);
    let dst: &mut [u8] = if len == 0 {
        &mut []
    } else {
        // SAFETY: `len` bytes at `buf` (not null), the caller's receive
        // buffer, valid and not otherwise accessed for the call (the
        // caller's contract).
        unsafe { std::slice::from_raw_parts_mut(buf.cast(), len) }
    };
    if source == ANY_SOURCE {
        let p = c.comm.any_process();
        return if blocking {
            p.try_receive_inline_spinning(dst, tag_of(tag))
        } else {
            p.try_receive_inline(dst, tag_of(tag))
        };
    }
    let p = c.comm.process_at_rank(source);
    if blocking {
        p.try_receive_inline_spinning(dst, tag_of(tag))
    } else {
        p.try_receive_inline(dst, tag_of(tag))
    }
}

/// [`recv_small`] for `MPI_Recv`: whether the message was received (then
/// its status is written, `MPI_ERROR` left as it was).
///
/// # Safety
/// `buf` valid for the call and `status` null or valid, as the MPI
/// standard requires.
#[inline(always)]
unsafe fn recv_inline(
    buf: *mut c_void,
    n: c_int,
    dt: usize,
    source: c_int,
    tag: c_int,
    comm: usize,
    status: *mut CStatus,
) -> bool {
    let Some(c) = predefined_comm_live(comm) else {
        return false;
    };
    // SAFETY: forwarded from the caller.
    unsafe { recv_inline_on(c, buf, n, dt, source, tag, status) }
}

/// [`recv_inline`] on the communicator `c` already looked up.
///
/// # Safety
/// As for [`recv_inline`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn recv_inline_on(
    c: &CommObj,
    buf: *mut c_void,
    n: c_int,
    dt: usize,
    source: c_int,
    tag: c_int,
    status: *mut CStatus,
) -> bool {
    // SAFETY: forwarded from the caller.
    let Some(st) = (unsafe { recv_small(c, buf, n, dt, source, tag, true, usize::MAX) }) else {
        return false;
    };
    // SAFETY: the caller's status or MPI_STATUS_IGNORE.
    unsafe { put_status(status, &CStatus::from_status(&st)) };
    true
}

/// [`irecv_inline`] for a tag a received handle may not hold
/// (`MPI_ANY_TAG`, or 2^15 and more), on the communicator `c` it looked
/// up: the handle is a received handle when the status fits one, else a
/// table entry holding the complete receive (which cannot fail: the table
/// grows). Out of line, off `MPI_Irecv`'s usual path.
///
/// # Safety
/// As for [`PMPI_Irecv`]; `req` is not null.
#[inline(never)]
#[cold]
unsafe fn irecv_inline_any_tag(
    c: &CommObj,
    (buf, n, dt): (*mut c_void, c_int, usize),
    source: c_int,
    tag: c_int,
    req: *mut usize,
) -> bool {
    let Some(s) = crate::state::state_any() else {
        return false;
    };
    // SAFETY: forwarded from the caller.
    let Some(st) = (unsafe { recv_small(c, buf, n, dt, source, tag, false, usize::MAX) }) else {
        return false;
    };
    let h = crate::state::received_handle(st.source_rank(), st.tag(), st.bytes())
        .unwrap_or_else(|| lock(&s.requests).insert(ReqObj::Done(CStatus::from_status(&st), None)));
    // SAFETY: not null (the caller checked); the caller's out-parameter.
    unsafe { req.write(h) };
    true
}

/// [`recv_small`] for `MPI_Irecv`: whether the message was received (then
/// `*req` is its handle). A tag and source that a received handle holds
/// (for `MPI_ANY_SOURCE`, every rank of the communicator) give one, with
/// no table entry, for up to `RECEIVED_MAX_BYTES`; the rest (`MPI_ANY_TAG`,
/// a tag of 2^15 or more) go to [`irecv_inline_any_tag`].
///
/// # Safety
/// As for [`PMPI_Irecv`].
#[inline(always)]
unsafe fn irecv_inline(
    buf: *mut c_void,
    n: c_int,
    dt: usize,
    source: c_int,
    tag: c_int,
    comm: usize,
    req: *mut usize,
) -> bool {
    if req.is_null() {
        return false;
    }
    let Some(c) = predefined_comm_live(comm) else {
        return false;
    };
    // The highest source the handle may have to hold.
    let top = if source == ANY_SOURCE {
        c.comm.size() - 1
    } else {
        source
    };
    if crate::state::received_handle(top, tag, 0).is_none() {
        // SAFETY: forwarded from the caller; `req` is not null.
        return unsafe { irecv_inline_any_tag(c, (buf, n, dt), source, tag, req) };
    }
    let cap = crate::state::RECEIVED_MAX_BYTES;
    // SAFETY: forwarded from the caller.
    let Some(st) = (unsafe { recv_small(c, buf, n, dt, source, tag, false, cap) }) else {
        return false;
    };
    // Fits: the source and tag were checked above, and no more than
    // `RECEIVED_MAX_BYTES` were taken.
    let h = crate::state::received_handle(st.source_rank(), st.tag(), st.bytes())
        .expect("the status of a message taken inline fits a received handle");
    // SAFETY: not null; the caller's out-parameter.
    unsafe { req.write(h) };
    true
}

entry! {
    /// `MPI_Send`.
    fn MPI_Send / PMPI_Send(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm);
    // SAFETY: the caller's buffer, valid for the call.
    fast = unsafe { send_inline_predefined(buf, n, dt, dest, tag, comm) }; {
        send(buf, n.into(), dt, dest, tag, comm, SendMode::Standard)
    }
    /// `MPI_Bsend`.
    fn MPI_Bsend / PMPI_Bsend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm); {
        send(buf, n.into(), dt, dest, tag, comm, SendMode::Buffered)
    }
    /// `MPI_Ssend`.
    fn MPI_Ssend / PMPI_Ssend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm); {
        send(buf, n.into(), dt, dest, tag, comm, SendMode::Synchronous)
    }
    /// `MPI_Rsend`.
    fn MPI_Rsend / PMPI_Rsend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm); {
        send(buf, n.into(), dt, dest, tag, comm, SendMode::Ready)
    }

    /// `MPI_Recv`.
    fn MPI_Recv / PMPI_Recv(
        buf: *mut c_void, n: c_int, dt: usize, source: c_int, tag: c_int, comm: usize, status: *mut CStatus,
    ) comm = Some(comm);
    // SAFETY: the caller's buffer and status, valid for the call.
    fast = unsafe { recv_inline(buf, n, dt, source, tag, comm, status) }; {
        // SAFETY: the caller's buffer and status.
        unsafe { recv(buf, n.into(), dt, source, tag, comm, status) }
    }

    /// `MPI_Isend`.
    fn MPI_Isend / PMPI_Isend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm);
    // SAFETY: the caller's buffer and out-parameter, valid for the call.
    fast = unsafe { isend_inline(buf, n, dt, dest, tag, comm, req) }; {
        isend((buf, n.into(), dt), dest, tag, comm, SendMode::Standard, req)
    }
    /// `MPI_Ibsend`.
    fn MPI_Ibsend / PMPI_Ibsend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        isend((buf, n.into(), dt), dest, tag, comm, SendMode::Buffered, req)
    }
    /// `MPI_Issend`.
    fn MPI_Issend / PMPI_Issend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        isend((buf, n.into(), dt), dest, tag, comm, SendMode::Synchronous, req)
    }
    /// `MPI_Irsend`.
    fn MPI_Irsend / PMPI_Irsend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        isend((buf, n.into(), dt), dest, tag, comm, SendMode::Ready, req)
    }

    /// `MPI_Irecv`.
    fn MPI_Irecv / PMPI_Irecv(
        buf: *mut c_void, n: c_int, dt: usize, source: c_int, tag: c_int, comm: usize, req: *mut usize,
    ) comm = Some(comm);
    // SAFETY: the caller's buffer (valid until the request completes) and
    // request.
    fast = unsafe { irecv_inline(buf, n, dt, source, tag, comm, req) }; {
        // SAFETY: the caller's buffer and request.
        unsafe { irecv(buf, n.into(), dt, source, tag, comm, req) }
    }

    /// `MPI_Send_init`.
    fn MPI_Send_init / PMPI_Send_init(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n.into(), dt), dest, tag, comm, SendMode::Standard, req)
    }
    /// `MPI_Bsend_init`.
    fn MPI_Bsend_init / PMPI_Bsend_init(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n.into(), dt), dest, tag, comm, SendMode::Buffered, req)
    }
    /// `MPI_Ssend_init`.
    fn MPI_Ssend_init / PMPI_Ssend_init(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n.into(), dt), dest, tag, comm, SendMode::Synchronous, req)
    }
    /// `MPI_Rsend_init`.
    fn MPI_Rsend_init / PMPI_Rsend_init(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n.into(), dt), dest, tag, comm, SendMode::Ready, req)
    }

    /// `MPI_Recv_init`.
    fn MPI_Recv_init / PMPI_Recv_init(
        buf: *mut c_void, n: c_int, dt: usize, source: c_int, tag: c_int, comm: usize, req: *mut usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffer and request.
        unsafe { recv_init(buf, n.into(), dt, source, tag, comm, req) }
    }

    /// `MPI_Start`.
    fn MPI_Start / PMPI_Start(req: *mut usize) comm = {
        // SAFETY: the caller's request handle (null is checked).
        unsafe { comm_of_request(req) }
    }; {
        if req.is_null() {
            return Err(crate::state::null_arg("request"));
        }
        // SAFETY: not null, valid per the caller.
        let h = unsafe { *req };
        let s = state()?;
        // A partitioned send is armed: its message starts with the last
        // MPI_Pready.
        if crate::part::start(h)? == Some(true) {
            return Ok(());
        }
        let mut t = lock(&s.requests);
        match t.get_mut(h) {
            Some(ReqObj::Persistent(p, _)) => p.start(),
            Some(ReqObj::Coll(c, _)) if c.persistent() => {
                let c = c.clone();
                drop(t);
                c.start()
            }
            _ => Err(Error::new(ErrorClass::Request, format!("{h:#x} is not a persistent request"))),
        }
    }

    /// `MPI_Startall`.
    fn MPI_Startall / PMPI_Startall(n: c_int, reqs: *mut usize) comm = None; {
        let n = count(n)?;
        for i in 0..n {
            // SAFETY: the caller's array of `n` requests.
            let r = unsafe { PMPI_Start(reqs.add(i)) };
            if r != 0 {
                return Err(Error::new(ErrorClass::Request, format!("MPI_Startall: request {i} failed to start")));
            }
        }
        Ok(())
    }

    /// `MPI_Wait`.
    fn MPI_Wait / PMPI_Wait(req: *mut usize, status: *mut CStatus) comm = {
        // SAFETY: the caller's request handle (null is checked).
        unsafe { comm_of_request(req) }
    }; {
        // SAFETY: the caller's request and status.
        let (st, err) = unsafe { wait_one(req) }?;
        // SAFETY: as above.
        unsafe { put_status(status, &st) };
        err.map_or(Ok(()), Err)
    }

    /// `MPI_Test`.
    fn MPI_Test / PMPI_Test(req: *mut usize, flag: *mut c_int, status: *mut CStatus) comm = {
        // SAFETY: the caller's request handle (null is checked).
        unsafe { comm_of_request(req) }
    }; {
        // SAFETY: the caller's request.
        let r = unsafe { test_one(req) }?;
        // SAFETY: the caller's out-parameters.
        unsafe { put(flag, c_int::from(r.is_some()), "flag") }?;
        match r {
            Some((st, err)) => {
                // SAFETY: as above.
                unsafe { put_status(status, &st) };
                err.map_or(Ok(()), Err)
            }
            None => Ok(()),
        }
    }

    /// `MPI_Waitall`: waits for every request; on a failure, every status
    /// gets its own `MPI_ERROR` and the call returns `MPI_ERR_IN_STATUS`.
    fn MPI_Waitall / PMPI_Waitall(n: c_int, reqs: *mut usize, statuses: *mut CStatus) comm = None; {
        let n = count(n)?;
        // SAFETY: the caller's arrays.
        unsafe { waitall("MPI_Waitall", n, reqs, statuses) }
    }

    /// `MPI_Request_free`: an active operation still completes.
    fn MPI_Request_free / PMPI_Request_free(req: *mut usize) comm = {
        // SAFETY: the caller's request handle (null is checked).
        unsafe { comm_of_request(req) }
    }; {
        if req.is_null() {
            return Err(crate::state::null_arg("request"));
        }
        // SAFETY: not null, valid per the caller.
        let h = unsafe { *req };
        let s = state()?;
        let mut t = lock(&s.requests);
        if let Some(ReqObj::Greq(g)) = t.get(h) {
            g.clone().settle(t, h, true);
            // SAFETY: as above.
            unsafe { *req = REQUEST_NULL };
            return Ok(());
        }
        // Freeing an active collective is erroneous (MPI 4.1 §6.12):
        // refused, the request left as it was.
        if let Some(ReqObj::Coll(c, _)) = t.get(h) {
            if c.is_active() {
                return Err(Error::new(ErrorClass::Request, "MPI_Request_free of an active collective"));
            }
        }
        let obj = t
            .remove(h)
            .ok_or_else(|| Error::new(ErrorClass::Request, format!("invalid request handle {h:#x}")))?;
        drop(t);
        match obj {
            ReqObj::Op(r, _) => r.free(),
            ReqObj::Persistent(p, _) => {
                crate::part::forget(h);
                p.free()
            }
            ReqObj::Pair(p) => {
                let PairReq { send: a, recv: b, keep, .. } = *p;
                a.free();
                b.free();
                // The send may still read the copy: it must outlive it.
                std::mem::forget(keep);
            }
            ReqObj::Done(..) | ReqObj::Coll(..) => {}
            ReqObj::Greq(_) => unreachable!("generalized requests are freed above"),
        }
        // SAFETY: as above.
        unsafe { *req = REQUEST_NULL };
        Ok(())
    }

    /// `MPI_Get_count`.
    fn MPI_Get_count / PMPI_Get_count(status: *const CStatus, dt: usize, out: *mut c_int) comm = None; {
        if status.is_null() {
            return Err(crate::state::null_arg("status"));
        }
        let t = state()?.datatype(dt)?;
        // SAFETY: not null, valid per the caller.
        let bytes = unsafe { (*status).bytes() } as usize;
        let n = t
            .as_raw()
            .get_count(bytes)
            .map_or(-32766, |n| c_int::try_from(n).unwrap_or(-32766));
        // SAFETY: the caller's out-parameter.
        unsafe { put(out, n, "count") }
    }

    /// `MPI_Sendrecv`.
    fn MPI_Sendrecv / PMPI_Sendrecv(
        sbuf: *const c_void, scount: c_int, sdt: usize, dest: c_int, stag: c_int,
        rbuf: *mut c_void, rcount: c_int, rdt: usize, source: c_int, rtag: c_int,
        comm: usize, status: *mut CStatus,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers and status.
        unsafe { sendrecv((sbuf, scount.into(), sdt), dest, stag, (rbuf, rcount.into(), rdt), source, rtag, comm, status) }
    }

    /// `MPI_Probe`.
    fn MPI_Probe / PMPI_Probe(source: c_int, tag: c_int, comm: usize, status: *mut CStatus) comm = Some(comm); {
        use oxmpi::traits::*;
        let c = state()?.comm(comm)?;
        let st = peer(&c, source).probe_with_tag(tag_of(tag))?;
        // SAFETY: the caller's status.
        unsafe { put_status(status, &CStatus::from_status(&st)) };
        Ok(())
    }

    /// `MPI_Iprobe`.
    fn MPI_Iprobe / PMPI_Iprobe(source: c_int, tag: c_int, comm: usize, flag: *mut c_int, status: *mut CStatus) comm = Some(comm); {
        use oxmpi::traits::*;
        let c = state()?.comm(comm)?;
        let st = peer(&c, source).immediate_probe_with_tag(tag_of(tag))?;
        if st.is_none() {
            // A probe loop must move outstanding collectives on too.
            crate::sched::poke();
        }
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(flag, c_int::from(st.is_some()), "flag")?;
            if let Some(st) = st {
                put_status(status, &CStatus::from_status(&st));
            }
        }
        Ok(())
    }
}

/// `MPI_MESSAGE_NULL`.
const MESSAGE_NULL: usize = 0x128;
/// `MPI_MESSAGE_NO_PROC`.
const MESSAGE_NO_PROC: usize = 0x129;

fn probe_message(
    c: &CommObj,
    source: c_int,
    tag: c_int,
    block: bool,
) -> Result<Option<(oxmpi::Message<'static, L>, Status)>, Error> {
    use oxmpi::traits::*;
    let (from, tag) = (peer(c, source), tag_of(tag));
    Ok(if block {
        Some(from.matched_probe_with_tag(tag)?)
    } else {
        from.immediate_matched_probe_with_tag(tag)?
    })
}

/// Stores a matched message; `MPI_MESSAGE_NO_PROC` for `PROC_NULL`.
fn store_message(m: oxmpi::Message<'static, L>, st: &Status) -> Result<usize, Error> {
    if st.is_proc_null() {
        drop(m);
        return Ok(MESSAGE_NO_PROC);
    }
    Ok(lock(&state()?.messages).insert(m))
}

/// Takes the message of handle `*msg` (resetting it to `MPI_MESSAGE_NULL`).
///
/// # Safety
/// `msg` valid for read and write.
unsafe fn take_message(msg: *mut usize) -> Result<Option<oxmpi::Message<'static, L>>, Error> {
    if msg.is_null() {
        return Err(crate::state::null_arg("message"));
    }
    // SAFETY: not null, valid per the caller.
    let h = unsafe { *msg };
    if h == MESSAGE_NO_PROC {
        // SAFETY: as above.
        unsafe { *msg = MESSAGE_NULL };
        return Ok(None);
    }
    let m = lock(&state()?.messages).remove(h).ok_or_else(|| {
        Error::new(
            ErrorClass::Request,
            format!("invalid message handle {h:#x}"),
        )
    })?;
    // SAFETY: as above.
    unsafe { *msg = MESSAGE_NULL };
    Ok(Some(m))
}

/// `MPI_Imrecv` of handle `*msg` into `buf`: the request.
///
/// # Safety
/// As for `MPI_Imrecv`.
unsafe fn imrecv(
    buf: *mut c_void,
    n: impl Into<i64>,
    dt: usize,
    msg: *mut usize,
) -> Result<Op, Error> {
    state()?;
    // SAFETY: the caller's buffer, valid until the request completes.
    let b = unsafe { raw(buf, n, dt) }?;
    // SAFETY: the caller's message handle.
    match unsafe { take_message(msg) }? {
        Some(m) => b.receive_message(m),
        None => {
            // A message from PROC_NULL: an empty receive from PROC_NULL.
            let s = state()?;
            b.receive_from(&s.self_.comm.process_at_rank(oxmpi::PROC_NULL), AnyTag)
        }
    }
}

/// Starts `MPI_Isendrecv`: receive posted first, then the send.
fn isendrecv(
    c: &CommObj,
    sb: RawBuffer,
    dest: c_int,
    stag: c_int,
    rb: RawBuffer,
    source: c_int,
    rtag: c_int,
) -> Result<ReqObj, Error> {
    let r = start_recv(c, rb, source, rtag)?;
    match start_send(c, sb, dest, stag, SendMode::Standard) {
        Ok(sr) => Ok(ReqObj::Pair(Box::new(PairReq {
            send: sr,
            recv: r,
            comm: 0,
            keep: Vec::new(),
        }))),
        Err(e) => {
            let _ = r.cancel();
            let _ = r.wait_status();
            Err(e)
        }
    }
}

/// A private copy of `n` elements of `dt` at `buf` (packed), and a raw
/// buffer over it, for the send half of a `_replace` call.
///
/// # Safety
/// `buf` valid for `n` elements of `dt`.
unsafe fn packed_copy(
    buf: *const c_void,
    n: impl Into<i64>,
    dt: usize,
) -> Result<(Vec<u8>, usize), Error> {
    let s = state()?;
    let t = s.datatype(dt)?;
    let n = count64(n.into())?;
    let mut out = vec![0u8; t.size() * n];
    let conv = oxmpi_datatype::Convertor::new(t.as_raw(), n).map_err(Error::from)?;
    if let Some(span) = conv.span() {
        let len = (span.end - span.start) as usize;
        // SAFETY: the caller's buffer covers the span of the elements.
        let base = unsafe { std::slice::from_raw_parts(buf.cast::<u8>().offset(span.start), len) };
        conv.pack(base, -span.start, 0, &mut out)
            .map_err(Error::from)?;
    }
    Ok((out, n * t.size()))
}

entry! {
    /// `MPI_Waitany`.
    fn MPI_Waitany / PMPI_Waitany(n: c_int, reqs: *mut usize, index: *mut c_int, status: *mut CStatus) comm = None; {
        let n = count(n)?;
        let universe = state()?.universe;
        let mut polls = 0u32;
        loop {
            let mut hit = None;
            // SAFETY: the caller's array of `n` requests.
            let active = unsafe { sweep(n, reqs, true, |i, o| hit = Some((i, o))) }?;
            if let Some((i, (st, err))) = hit {
                // SAFETY: the caller's out-parameters.
                unsafe {
                    put(index, i as c_int, "index")?;
                    put_status(status, &st);
                }
                return err.map_or(Ok(()), Err);
            }
            if !active {
                // SAFETY: the caller's out-parameters.
                unsafe {
                    put(index, UNDEFINED, "index")?;
                    put_status(status, &CStatus::empty());
                }
                return Ok(());
            }
            // A sweep makes one progress pass.
            polls = polls.saturating_add(1);
            universe.pause(polls);
        }
    }

    /// `MPI_Testany`.
    fn MPI_Testany / PMPI_Testany(n: c_int, reqs: *mut usize, index: *mut c_int, flag: *mut c_int, status: *mut CStatus) comm = None; {
        let n = count(n)?;
        let mut hit = None;
        // SAFETY: the caller's array of `n` requests.
        let active = unsafe { sweep(n, reqs, true, |i, o| hit = Some((i, o))) }?;
        if !active {
            // SAFETY: the caller's out-parameters.
            unsafe {
                put(index, UNDEFINED, "index")?;
                put(flag, 1, "flag")?;
                put_status(status, &CStatus::empty());
            }
            return Ok(());
        }
        match hit {
            Some((i, (st, err))) => {
                // SAFETY: the caller's out-parameters.
                unsafe {
                    put(index, i as c_int, "index")?;
                    put(flag, 1, "flag")?;
                    put_status(status, &st);
                }
                err.map_or(Ok(()), Err)
            }
            // SAFETY: the caller's out-parameters.
            None => unsafe {
                put(index, UNDEFINED, "index")?;
                put(flag, 0, "flag")
            },
        }
    }

    /// `MPI_Waitsome`.
    fn MPI_Waitsome / PMPI_Waitsome(
        n: c_int, reqs: *mut usize, outcount: *mut c_int, indices: *mut c_int, statuses: *mut CStatus,
    ) comm = None; {
        let n = count(n)?;
        let universe = state()?.universe;
        let mut polls = 0u32;
        with_done(|done| loop {
            // SAFETY: the caller's array of `n` requests.
            let active = unsafe { sweep(n, reqs, false, |i, o| done.push((i, o))) }?;
            if !done.is_empty() {
                // SAFETY: the caller's arrays.
                return unsafe { put_some("MPI_Waitsome", done, outcount, indices, statuses) };
            }
            if !active {
                // SAFETY: the caller's out-parameter.
                return unsafe { put(outcount, UNDEFINED, "outcount") };
            }
            // A sweep makes one progress pass.
            polls = polls.saturating_add(1);
            universe.pause(polls);
        })
    }

    /// `MPI_Testsome`.
    fn MPI_Testsome / PMPI_Testsome(
        n: c_int, reqs: *mut usize, outcount: *mut c_int, indices: *mut c_int, statuses: *mut CStatus,
    ) comm = None; {
        let n = count(n)?;
        with_done(|done| {
            // SAFETY: the caller's array of `n` requests.
            let active = unsafe { sweep(n, reqs, false, |i, o| done.push((i, o))) }?;
            if !active {
                // SAFETY: the caller's out-parameter.
                return unsafe { put(outcount, UNDEFINED, "outcount") };
            }
            // SAFETY: the caller's arrays.
            unsafe { put_some("MPI_Testsome", done, outcount, indices, statuses) }
        })
    }

    /// `MPI_Testall`: completes all of them only when all have completed.
    fn MPI_Testall / PMPI_Testall(n: c_int, reqs: *mut usize, flag: *mut c_int, statuses: *mut CStatus) comm = None; {
        let n = count(n)?;
        let s = state()?;
        // One progress pass, then each request is looked at under one
        // lock of the table (as `sweep` does).
        s.universe.progress();
        let t = lock(&s.requests);
        // SAFETY: the caller's array of `n` requests.
        unsafe { check_handles(&t, n, reqs) }?;
        // Every request is looked at (a polled one advances when looked
        // at: stopping at the first incomplete one could starve the others).
        let ready = (0..n).fold(true, |all, i| {
            // SAFETY: the caller's array of `n` requests.
            let h = unsafe { *reqs.add(i) };
            let done = match t.get(h) {
                Some(ReqObj::Op(r, _)) => r.completed(),
                Some(ReqObj::Pair(p)) => p.send.is_complete() && p.recv.is_complete(),
                Some(ReqObj::Persistent(p, _)) => {
                    (!p.is_active() && crate::part::armed(h).is_none()) || p.is_complete()
                }
                Some(ReqObj::Greq(g)) => g.is_complete(),
                Some(ReqObj::Coll(c, _)) => !c.is_active() || c.is_complete(),
                Some(ReqObj::Done(..)) | None => true,
            };
            done && all
        });
        drop(t);
        // SAFETY: the caller's out-parameter.
        unsafe { put(flag, c_int::from(ready), "flag") }?;
        if !ready {
            return Ok(());
        }
        // SAFETY: forwards the caller's arrays.
        unsafe { waitall("MPI_Testall", n, reqs, statuses) }
    }

    /// `MPI_Request_get_status`: like `MPI_Test` without freeing (one
    /// progress pass, so that a loop of it completes a request).
    fn MPI_Request_get_status / PMPI_Request_get_status(req: usize, flag: *mut c_int, status: *mut CStatus) comm = request_comm(req); {
        let s = state()?;
        if req != REQUEST_NULL {
            s.universe.progress();
        }
        let o = peek(req)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(flag, c_int::from(o.is_some()), "flag") }?;
        if let Some((st, _)) = o {
            // SAFETY: the caller's status.
            unsafe { put_status(status, &st) };
        }
        Ok(())
    }

    /// `MPI_Request_get_status_all` (MPI 4.1): whether every request is
    /// complete (null and inactive requests are), and then each one's
    /// status, freeing none (`MPI_ERR_IN_STATUS` if one failed).
    fn MPI_Request_get_status_all / PMPI_Request_get_status_all(
        n: c_int, reqs: *const usize, flag: *mut c_int, statuses: *mut CStatus,
    ) comm = None; {
        let n = count(n)?;
        // SAFETY: the caller's array of `n` requests.
        let hs = unsafe { handles(n, reqs) }?;
        let mut out = Vec::with_capacity(n);
        for &h in hs {
            match peek(h)? {
                Some(o) => out.push(o),
                // SAFETY: the caller's out-parameter.
                None => return unsafe { put(flag, 0, "flag") },
            }
        }
        // SAFETY: the caller's out-parameter.
        unsafe { put(flag, 1, "flag") }?;
        let failed = out.iter().any(|(_, e)| e.is_some());
        for (i, (st, e)) in out.iter().enumerate() {
            let code = e.as_ref().map_or(0, |e| e.class().code());
            // SAFETY: the caller's array of `n` statuses (or ignore).
            unsafe { put_status_at(statuses, i, st, failed.then_some(code)) };
        }
        if failed {
            return Err(Error::new(ErrorClass::InStatus, "a completed request failed: see the statuses"));
        }
        Ok(())
    }

    /// `MPI_Request_get_status_any` (MPI 4.1): the first complete active
    /// request, freeing nothing; with no active request, `flag` true and
    /// `MPI_UNDEFINED`.
    fn MPI_Request_get_status_any / PMPI_Request_get_status_any(
        n: c_int, reqs: *const usize, index: *mut c_int, flag: *mut c_int, status: *mut CStatus,
    ) comm = None; {
        let n = count(n)?;
        // SAFETY: the caller's array of `n` requests.
        let hs = unsafe { handles(n, reqs) }?;
        let mut active = false;
        for (i, &h) in hs.iter().enumerate() {
            if !is_active(h) {
                continue;
            }
            active = true;
            if let Some((st, err)) = peek(h)? {
                // SAFETY: the caller's out-parameters.
                unsafe {
                    put(index, i as c_int, "index")?;
                    put(flag, 1, "flag")?;
                    put_status(status, &st);
                }
                return err.map_or(Ok(()), Err);
            }
        }
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(index, UNDEFINED, "index")?;
            put(flag, c_int::from(!active), "flag")?;
            if !active {
                put_status(status, &CStatus::empty());
            }
        }
        Ok(())
    }

    /// `MPI_Request_get_status_some` (MPI 4.1): every complete active
    /// request, freeing none; `MPI_UNDEFINED` with no active request.
    fn MPI_Request_get_status_some / PMPI_Request_get_status_some(
        n: c_int, reqs: *const usize, outcount: *mut c_int, indices: *mut c_int, statuses: *mut CStatus,
    ) comm = None; {
        let n = count(n)?;
        // SAFETY: the caller's array of `n` requests.
        let hs = unsafe { handles(n, reqs) }?;
        let mut active = false;
        let mut done = Vec::new();
        for (i, &h) in hs.iter().enumerate() {
            if !is_active(h) {
                continue;
            }
            active = true;
            if let Some(o) = peek(h)? {
                done.push((i, o));
            }
        }
        if !active {
            // SAFETY: the caller's out-parameter.
            return unsafe { put(outcount, UNDEFINED, "outcount") };
        }
        // SAFETY: the caller's arrays.
        unsafe { put_some("MPI_Request_get_status_some", &done, outcount, indices, statuses) }
    }

    /// `MPI_Cancel`.
    fn MPI_Cancel / PMPI_Cancel(req: *mut usize) comm = {
        // SAFETY: the caller's request handle (null is checked).
        unsafe { comm_of_request(req) }
    }; {
        if req.is_null() {
            return Err(crate::state::null_arg("request"));
        }
        // SAFETY: not null, valid per the caller.
        let h = unsafe { *req };
        let s = state()?;
        let g = match lock(&s.requests).get(h) {
            Some(ReqObj::Op(r, _)) => return r.cancel(),
            Some(ReqObj::Persistent(p, _)) => return p.cancel(),
            Some(ReqObj::Pair(p)) => return p.send.cancel().and(p.recv.cancel()),
            Some(ReqObj::Greq(g)) => g.clone(),
            Some(ReqObj::Done(..)) => return Ok(()),
            Some(ReqObj::Coll(..)) => {
                return Err(Error::new(ErrorClass::Request, "MPI_Cancel of a collective (erroneous)"))
            }
            None => return Err(Error::new(ErrorClass::Request, format!("invalid request handle {h:#x}"))),
        };
        // The program's cancel function runs with the table unlocked: it
        // may complete the request (`MPI_Grequest_complete`).
        if let Some(f) = g.cancel {
            let done = g.complete.load(std::sync::atomic::Ordering::Acquire);
            // SAFETY: the program's callback, as registered.
            let rc = unsafe { f(g.extra as *mut c_void, c_int::from(done)) };
            // MPI_Cancel returns the callback's error (MPI 4.1 §13.2).
            if let Some(e) = callback_error(rc, "cancel_fn") {
                return Err(e);
            }
        }
        Ok(())
    }

    /// `MPI_Test_cancelled`.
    fn MPI_Test_cancelled / PMPI_Test_cancelled(status: *const CStatus, flag: *mut c_int) comm = None; {
        if status.is_null() {
            return Err(crate::state::null_arg("status"));
        }
        // SAFETY: not null, valid per the caller; the out-parameter.
        unsafe { put(flag, c_int::from((*status).internal[2] != 0), "flag") }
    }

    /// `MPI_Status_set_cancelled`.
    fn MPI_Status_set_cancelled / PMPI_Status_set_cancelled(status: *mut CStatus, flag: c_int) comm = None; {
        if status.is_null() {
            return Err(crate::state::null_arg("status"));
        }
        // SAFETY: not null, valid per the caller.
        unsafe { (*status).internal[2] = c_int::from(flag != 0) };
        Ok(())
    }

    /// `MPI_Mprobe`.
    fn MPI_Mprobe / PMPI_Mprobe(source: c_int, tag: c_int, comm: usize, msg: *mut usize, status: *mut CStatus) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let (m, st) = probe_message(&c, source, tag, true)?.ok_or_else(|| Error::new(ErrorClass::Intern, "blocking probe returned nothing"))?;
        let h = store_message(m, &st)?;
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(msg, h, "message")?;
            put_status(status, &CStatus::from_status(&st));
        }
        Ok(())
    }

    /// `MPI_Improbe`.
    fn MPI_Improbe / PMPI_Improbe(
        source: c_int, tag: c_int, comm: usize, flag: *mut c_int, msg: *mut usize, status: *mut CStatus,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let found = probe_message(&c, source, tag, false)?;
        if found.is_none() {
            crate::sched::poke();
        }
        // SAFETY: the caller's out-parameter.
        unsafe { put(flag, c_int::from(found.is_some()), "flag") }?;
        if let Some((m, st)) = found {
            let h = store_message(m, &st)?;
            // SAFETY: the caller's out-parameters.
            unsafe {
                put(msg, h, "message")?;
                put_status(status, &CStatus::from_status(&st));
            }
        }
        Ok(())
    }

    /// `MPI_Mrecv`.
    fn MPI_Mrecv / PMPI_Mrecv(buf: *mut c_void, n: c_int, dt: usize, msg: *mut usize, status: *mut CStatus) comm = None; {
        // SAFETY: the caller's buffer and message.
        let r = unsafe { imrecv(buf, n, dt, msg) }?;
        let (st, err) = finish(r);
        // SAFETY: the caller's status.
        unsafe { put_status(status, &st) };
        err.map_or(Ok(()), Err)
    }

    /// `MPI_Imrecv`.
    fn MPI_Imrecv / PMPI_Imrecv(buf: *mut c_void, n: c_int, dt: usize, msg: *mut usize, req: *mut usize) comm = None; {
        // SAFETY: the caller's buffer and message.
        let r = unsafe { imrecv(buf, n, dt, msg) }?;
        let h = store(ReqObj::Op(r, 0))?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(req, h, "request") }
    }

    /// `MPI_Sendrecv_replace`.
    fn MPI_Sendrecv_replace / PMPI_Sendrecv_replace(
        buf: *mut c_void, n: c_int, dt: usize, dest: c_int, stag: c_int, source: c_int, rtag: c_int,
        comm: usize, status: *mut CStatus,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffer.
        let obj = unsafe { sendrecv_replace(buf, n.into(), dt, dest, stag, source, rtag, comm) }?;
        let (o, _) = complete(obj, true).map_err(|_| Error::new(ErrorClass::Intern, "blocking completion"))?;
        // SAFETY: the caller's status.
        unsafe { put_status(status, &o.0) };
        o.1.map_or(Ok(()), Err)
    }

    /// `MPI_Isendrecv`.
    fn MPI_Isendrecv / PMPI_Isendrecv(
        sbuf: *const c_void, scount: c_int, sdt: usize, dest: c_int, stag: c_int,
        rbuf: *mut c_void, rcount: c_int, rdt: usize, source: c_int, rtag: c_int,
        comm: usize, req: *mut usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers and request.
        unsafe { isendrecv_entry((sbuf, scount.into(), sdt), dest, stag, (rbuf, rcount.into(), rdt), source, rtag, comm, req) }
    }

    /// `MPI_Buffer_attach`: `size` bytes at `buf` (or
    /// `MPI_BUFFER_AUTOMATIC`) for buffered sends on communicators without
    /// a buffer of their own or of their session.
    fn MPI_Buffer_attach / PMPI_Buffer_attach(buf: *mut c_void, size: c_int) comm = None; {
        // SAFETY: the program lends `size` bytes until MPI_Buffer_detach.
        unsafe { crate::bsend::attach(oxmpi::BufferScope::Process, buf, size.into()) }
    }

    /// `MPI_Buffer_detach`: waits for buffered messages, then gives the
    /// buffer's address (through `buf`, a `void**`; `MPI_BUFFER_AUTOMATIC`
    /// for an automatic buffer) and size back.
    fn MPI_Buffer_detach / PMPI_Buffer_detach(buf: *mut c_void, size: *mut c_int) comm = None; {
        // SAFETY: the caller's out-parameters.
        let n = unsafe { crate::bsend::detach(oxmpi::BufferScope::Process, buf) }?;
        // SAFETY: as above.
        unsafe { put(size, crate::bsend::int_size(n)?, "size") }
    }

    /// `MPI_Buffer_flush`: waits until the buffered messages have left the
    /// process's buffer.
    fn MPI_Buffer_flush / PMPI_Buffer_flush() comm = None; {
        state()?.universe.buffer_flush_in(oxmpi::BufferScope::Process);
        Ok(())
    }

    /// `MPI_Buffer_iflush`: a request that completes once the process's
    /// buffer is empty.
    fn MPI_Buffer_iflush / PMPI_Buffer_iflush(req: *mut usize) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { crate::bsend::iflush(oxmpi::BufferScope::Process, req) }
    }

    /// `MPI_Grequest_start`.
    fn MPI_Grequest_start / PMPI_Grequest_start(
        query: QueryFn, free: FreeFn, cancel: CancelFn, extra: *mut c_void, req: *mut usize,
    ) comm = None; {
        let g = Greq {
            query,
            free,
            cancel,
            extra: extra as usize,
            complete: Default::default(),
            freed: Default::default(),
            poll: None,
            failed: std::sync::Mutex::new(None),
        };
        let h = store(ReqObj::Greq(std::sync::Arc::new(g)))?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(req, h, "request") }
    }

    /// `MPI_Grequest_complete`.
    fn MPI_Grequest_complete / PMPI_Grequest_complete(req: usize) comm = None; {
        let s = state()?;
        // When the request was freed already, this call frees it.
        let t = lock(&s.requests);
        let g = match t.get(req) {
            Some(ReqObj::Greq(g)) => g.clone(),
            _ => return Err(Error::new(ErrorClass::Request, format!("{req:#x} is not a generalized request"))),
        };
        g.settle(t, req, false);
        Ok(())
    }
}

entry! {
    /// `MPI_Send_c`.
    fn MPI_Send_c / PMPI_Send_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm); {
        send(buf, n, dt, dest, tag, comm, SendMode::Standard)
    }
    /// `MPI_Bsend_c`.
    fn MPI_Bsend_c / PMPI_Bsend_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm); {
        send(buf, n, dt, dest, tag, comm, SendMode::Buffered)
    }
    /// `MPI_Ssend_c`.
    fn MPI_Ssend_c / PMPI_Ssend_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm); {
        send(buf, n, dt, dest, tag, comm, SendMode::Synchronous)
    }
    /// `MPI_Rsend_c`.
    fn MPI_Rsend_c / PMPI_Rsend_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm); {
        send(buf, n, dt, dest, tag, comm, SendMode::Ready)
    }
    /// `MPI_Isend_c`.
    fn MPI_Isend_c / PMPI_Isend_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        isend((buf, n, dt), dest, tag, comm, SendMode::Standard, req)
    }
    /// `MPI_Ibsend_c`.
    fn MPI_Ibsend_c / PMPI_Ibsend_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        isend((buf, n, dt), dest, tag, comm, SendMode::Buffered, req)
    }
    /// `MPI_Issend_c`.
    fn MPI_Issend_c / PMPI_Issend_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        isend((buf, n, dt), dest, tag, comm, SendMode::Synchronous, req)
    }
    /// `MPI_Irsend_c`.
    fn MPI_Irsend_c / PMPI_Irsend_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        isend((buf, n, dt), dest, tag, comm, SendMode::Ready, req)
    }
    /// `MPI_Send_init_c`.
    fn MPI_Send_init_c / PMPI_Send_init_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n, dt), dest, tag, comm, SendMode::Standard, req)
    }
    /// `MPI_Bsend_init_c`.
    fn MPI_Bsend_init_c / PMPI_Bsend_init_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n, dt), dest, tag, comm, SendMode::Buffered, req)
    }
    /// `MPI_Ssend_init_c`.
    fn MPI_Ssend_init_c / PMPI_Ssend_init_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n, dt), dest, tag, comm, SendMode::Synchronous, req)
    }
    /// `MPI_Rsend_init_c`.
    fn MPI_Rsend_init_c / PMPI_Rsend_init_c(buf: *const c_void, n: i64, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n, dt), dest, tag, comm, SendMode::Ready, req)
    }

    /// `MPI_Recv_c`.
    fn MPI_Recv_c / PMPI_Recv_c(
        buf: *mut c_void, n: i64, dt: usize, source: c_int, tag: c_int, comm: usize, status: *mut CStatus,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffer and status.
        unsafe { recv(buf, n, dt, source, tag, comm, status) }
    }

    /// `MPI_Irecv_c`.
    fn MPI_Irecv_c / PMPI_Irecv_c(
        buf: *mut c_void, n: i64, dt: usize, source: c_int, tag: c_int, comm: usize, req: *mut usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffer and request.
        unsafe { irecv(buf, n, dt, source, tag, comm, req) }
    }

    /// `MPI_Recv_init_c`.
    fn MPI_Recv_init_c / PMPI_Recv_init_c(
        buf: *mut c_void, n: i64, dt: usize, source: c_int, tag: c_int, comm: usize, req: *mut usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffer and request.
        unsafe { recv_init(buf, n, dt, source, tag, comm, req) }
    }

    /// `MPI_Sendrecv_c`.
    fn MPI_Sendrecv_c / PMPI_Sendrecv_c(
        sbuf: *const c_void, scount: i64, sdt: usize, dest: c_int, stag: c_int,
        rbuf: *mut c_void, rcount: i64, rdt: usize, source: c_int, rtag: c_int,
        comm: usize, status: *mut CStatus,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers and status.
        unsafe { sendrecv((sbuf, scount, sdt), dest, stag, (rbuf, rcount, rdt), source, rtag, comm, status) }
    }

    /// `MPI_Mrecv_c`.
    fn MPI_Mrecv_c / PMPI_Mrecv_c(buf: *mut c_void, n: i64, dt: usize, msg: *mut usize, status: *mut CStatus) comm = None; {
        // SAFETY: forwarded.
        let r = unsafe { imrecv(buf, n, dt, msg) }?;
        let (st, err) = finish(r);
        // SAFETY: the caller's status.
        unsafe { put_status(status, &st) };
        err.map_or(Ok(()), Err)
    }

    /// `MPI_Buffer_attach_c`.
    fn MPI_Buffer_attach_c / PMPI_Buffer_attach_c(buf: *mut c_void, size: i64) comm = None; {
        // SAFETY: the program lends `size` bytes until MPI_Buffer_detach.
        unsafe { crate::bsend::attach(oxmpi::BufferScope::Process, buf, size) }
    }

    /// `MPI_Buffer_detach_c`.
    fn MPI_Buffer_detach_c / PMPI_Buffer_detach_c(buf: *mut c_void, size: *mut i64) comm = None; {
        // SAFETY: the caller's out-parameters (`buf` is a `void**`).
        let n = unsafe { crate::bsend::detach(oxmpi::BufferScope::Process, buf) }?;
        // SAFETY: as above.
        unsafe { put(size, n as i64, "size") }
    }
}

/// `MPI_Sendrecv_replace` with a large count: the outgoing data is packed
/// into a private copy first.
///
/// # Safety
/// As for `MPI_Sendrecv_replace`.
#[allow(clippy::too_many_arguments)]
unsafe fn sendrecv_replace(
    buf: *mut c_void,
    n: i64,
    dt: usize,
    dest: c_int,
    stag: c_int,
    source: c_int,
    rtag: c_int,
    comm: usize,
) -> Result<ReqObj, Error> {
    let c = state()?.comm(comm)?;
    // SAFETY: the caller's buffer.
    let (copy, len) = unsafe { packed_copy(buf, n, dt) }?;
    let bytes = oxmpi::UserDatatype::of::<u8>();
    // SAFETY: the copy is returned with the request and outlives it.
    let sb = unsafe { RawBuffer::new(copy.as_ptr(), len, &bytes) }?;
    // SAFETY: the caller's buffer, valid until the request completes.
    let rb = unsafe { raw(buf, n, dt) }?;
    let obj = match isendrecv(&c, sb, dest, stag, rb, source, rtag)? {
        ReqObj::Pair(mut p) => {
            p.comm = comm;
            p.keep = copy;
            ReqObj::Pair(p)
        }
        o => o,
    };
    Ok(obj)
}

entry! {
    /// `MPI_Imrecv_c`.
    fn MPI_Imrecv_c / PMPI_Imrecv_c(buf: *mut c_void, n: i64, dt: usize, msg: *mut usize, req: *mut usize) comm = None; {
        // SAFETY: the caller's buffer and message.
        let r = unsafe { imrecv(buf, n, dt, msg) }?;
        let h = store(ReqObj::Op(r, 0))?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(req, h, "request") }
    }

    /// `MPI_Isendrecv_c`.
    fn MPI_Isendrecv_c / PMPI_Isendrecv_c(
        sbuf: *const c_void, scount: i64, sdt: usize, dest: c_int, stag: c_int,
        rbuf: *mut c_void, rcount: i64, rdt: usize, source: c_int, rtag: c_int,
        comm: usize, req: *mut usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers and request.
        unsafe { isendrecv_entry((sbuf, scount, sdt), dest, stag, (rbuf, rcount, rdt), source, rtag, comm, req) }
    }

    /// `MPI_Sendrecv_replace_c`.
    fn MPI_Sendrecv_replace_c / PMPI_Sendrecv_replace_c(
        buf: *mut c_void, n: i64, dt: usize, dest: c_int, stag: c_int, source: c_int, rtag: c_int,
        comm: usize, status: *mut CStatus,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffer.
        let obj = unsafe { sendrecv_replace(buf, n, dt, dest, stag, source, rtag, comm) }?;
        let (o, _) = complete(obj, true).map_err(|_| Error::new(ErrorClass::Intern, "blocking completion"))?;
        // SAFETY: the caller's status.
        unsafe { put_status(status, &o.0) };
        o.1.map_or(Ok(()), Err)
    }

    /// `MPI_Isendrecv_replace`: the private copy of the outgoing data lives
    /// as long as the request.
    fn MPI_Isendrecv_replace / PMPI_Isendrecv_replace(
        buf: *mut c_void, n: c_int, dt: usize, dest: c_int, stag: c_int, source: c_int, rtag: c_int,
        comm: usize, req: *mut usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffer.
        let obj = unsafe { sendrecv_replace(buf, n.into(), dt, dest, stag, source, rtag, comm) }?;
        let h = store(obj)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(req, h, "request") }
    }

    /// `MPI_Isendrecv_replace_c`.
    fn MPI_Isendrecv_replace_c / PMPI_Isendrecv_replace_c(
        buf: *mut c_void, n: i64, dt: usize, dest: c_int, stag: c_int, source: c_int, rtag: c_int,
        comm: usize, req: *mut usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffer.
        let obj = unsafe { sendrecv_replace(buf, n, dt, dest, stag, source, rtag, comm) }?;
        let h = store(obj)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(req, h, "request") }
    }
}

/// `MPI_Recv` with a large count.
///
/// # Safety
/// As for `MPI_Recv`.
#[inline(always)]
unsafe fn recv(
    buf: *mut c_void,
    n: i64,
    dt: usize,
    source: c_int,
    tag: c_int,
    comm: usize,
    status: *mut CStatus,
) -> Result<(), Error> {
    let c = state()?.comm(comm)?;
    // SAFETY: the caller's buffer, valid for the call.
    let b = unsafe { raw(buf, n, dt) }?;
    let st = b.receive_status(&peer(&c, source), tag_of(tag))?;
    // SAFETY: the caller's status or MPI_STATUS_IGNORE.
    unsafe { put_status(status, &CStatus::from_status(&st)) };
    status_error(&st).map_or(Ok(()), Err)
}

/// `MPI_Irecv` with a large count.
///
/// # Safety
/// As for `MPI_Irecv`.
#[inline(always)]
unsafe fn irecv(
    buf: *mut c_void,
    n: i64,
    dt: usize,
    source: c_int,
    tag: c_int,
    comm: usize,
    req: *mut usize,
) -> Result<(), Error> {
    let c = state()?.comm(comm)?;
    // SAFETY: the caller keeps the buffer valid until the request completes.
    let b = unsafe { raw(buf, n, dt) }?;
    let r = start_recv(&c, b, source, tag)?;
    // A message already here completed it: its status goes in the handle,
    // with no table entry (or, when it does not fit, in a complete one).
    let h = match r.into_inline_status() {
        Ok(st) => match crate::state::received_handle(st.source_rank(), st.tag(), st.bytes()) {
            Some(h) => h,
            None => store(ReqObj::Done(CStatus::from_status(&st), None))?,
        },
        Err(r) => store(ReqObj::Op(r, comm))?,
    };
    // SAFETY: the caller's out-parameter.
    unsafe { put(req, h, "request") }
}

/// `MPI_Recv_init` with a large count.
///
/// # Safety
/// As for `MPI_Recv_init`.
unsafe fn recv_init(
    buf: *mut c_void,
    n: i64,
    dt: usize,
    source: c_int,
    tag: c_int,
    comm: usize,
    req: *mut usize,
) -> Result<(), Error> {
    let c = state()?.comm(comm)?;
    // SAFETY: the caller keeps the buffer valid until the request is freed.
    let b = unsafe { raw(buf, n, dt) }?;
    let p = b.receive_init_from(&peer(&c, source), tag_of(tag))?;
    let h = store(ReqObj::Persistent(Box::new(p), comm))?;
    // SAFETY: the caller's out-parameter.
    unsafe { put(req, h, "request") }
}

/// `buf, count, datatype` with a large count.
type Msg = (*const c_void, i64, usize);
/// A receive buffer with a large count.
type MsgMut = (*mut c_void, i64, usize);

/// `MPI_Sendrecv` with large counts.
///
/// # Safety
/// As for `MPI_Sendrecv`.
#[allow(clippy::too_many_arguments)]
unsafe fn sendrecv(
    (sbuf, scount, sdt): Msg,
    dest: c_int,
    stag: c_int,
    (rbuf, rcount, rdt): MsgMut,
    source: c_int,
    rtag: c_int,
    comm: usize,
    status: *mut CStatus,
) -> Result<(), Error> {
    // A small message on a predefined communicator: the send completes
    // inside the call (an eager send waits for nothing, so sending first
    // cannot deadlock), then the receive is an `MPI_Recv`, with no pair
    // request.
    // Only once the receive's arguments are known good: an erroneous call
    // must fail before anything is sent.
    let fast = predefined_comm_live(comm)
        .filter(|c| recv_args_ok(c, rbuf.is_null(), rcount, rdt, source, rtag));
    if let (Some(c), Ok(rn)) = (fast, c_int::try_from(rcount)) {
        // SAFETY: the caller's buffers and status, valid for the call.
        if unsafe { send_inline(c, sbuf, scount, sdt, dest, stag) } {
            // SAFETY: as above.
            if unsafe { recv_inline_on(c, rbuf, rn, rdt, source, rtag, status) } {
                return Ok(());
            }
            // SAFETY: as above.
            return unsafe { recv(rbuf, rcount, rdt, source, rtag, comm, status) };
        }
    }
    let c = state()?.comm(comm)?;
    // SAFETY: the caller's buffers, valid for the call.
    let (sb, rb) = unsafe { (raw(sbuf, scount, sdt)?, raw(rbuf, rcount, rdt)?) };
    let obj = isendrecv(&c, sb, dest, stag, rb, source, rtag)?;
    let (o, _) =
        complete(obj, true).map_err(|_| Error::new(ErrorClass::Intern, "blocking completion"))?;
    // SAFETY: the caller's status.
    unsafe { put_status(status, &o.0) };
    o.1.map_or(Ok(()), Err)
}

/// Whether a receive of `n` elements of `dt` into a buffer (`null` or not)
/// from `source` with `tag` on the predefined communicator `c` has
/// arguments no check would refuse: contiguous data of a predefined type,
/// a source that is a rank of it, `MPI_ANY_SOURCE` or `MPI_PROC_NULL`, a
/// tag of 0 or more or `MPI_ANY_TAG`. False for anything else (the caller
/// then takes the general path, which checks and reports).
fn recv_args_ok(c: &CommObj, null: bool, n: i64, dt: usize, source: c_int, tag: c_int) -> bool {
    contiguous_bytes(null, n, dt).is_some()
        && (tag >= 0 || tag == ANY_TAG)
        && (source == ANY_SOURCE
            || source == crate::comm::PROC_NULL
            || (0..c.comm.size()).contains(&source))
}

/// `MPI_Isendrecv` with large counts.
///
/// # Safety
/// As for `MPI_Isendrecv`.
#[allow(clippy::too_many_arguments)]
unsafe fn isendrecv_entry(
    (sbuf, scount, sdt): Msg,
    dest: c_int,
    stag: c_int,
    (rbuf, rcount, rdt): MsgMut,
    source: c_int,
    rtag: c_int,
    comm: usize,
    req: *mut usize,
) -> Result<(), Error> {
    let c = state()?.comm(comm)?;
    // SAFETY: the caller's buffers, valid until the request completes.
    let (sb, rb) = unsafe { (raw(sbuf, scount, sdt)?, raw(rbuf, rcount, rdt)?) };
    let obj = match isendrecv(&c, sb, dest, stag, rb, source, rtag)? {
        ReqObj::Pair(mut p) => {
            p.comm = comm;
            ReqObj::Pair(p)
        }
        o => o,
    };
    let h = store(obj)?;
    // SAFETY: the caller's out-parameter.
    unsafe { put(req, h, "request") }
}

entry! {
    /// `MPI_Status_get_source`.
    fn MPI_Status_get_source / PMPI_Status_get_source(status: *const CStatus, out: *mut c_int) comm = None; {
        if status.is_null() {
            return Err(crate::state::null_arg("status"));
        }
        // SAFETY: not null, valid per the caller; the out-parameter.
        unsafe { put(out, (*status).source, "source") }
    }
    /// `MPI_Status_get_tag`.
    fn MPI_Status_get_tag / PMPI_Status_get_tag(status: *const CStatus, out: *mut c_int) comm = None; {
        if status.is_null() {
            return Err(crate::state::null_arg("status"));
        }
        // SAFETY: not null, valid per the caller; the out-parameter.
        unsafe { put(out, (*status).tag, "tag") }
    }
    /// `MPI_Status_get_error`.
    fn MPI_Status_get_error / PMPI_Status_get_error(status: *const CStatus, out: *mut c_int) comm = None; {
        if status.is_null() {
            return Err(crate::state::null_arg("status"));
        }
        // SAFETY: not null, valid per the caller; the out-parameter.
        unsafe { put(out, (*status).error, "error") }
    }
    /// `MPI_Status_set_source`.
    fn MPI_Status_set_source / PMPI_Status_set_source(status: *mut CStatus, v: c_int) comm = None; {
        if status.is_null() {
            return Err(crate::state::null_arg("status"));
        }
        // SAFETY: not null, valid per the caller.
        unsafe { (*status).source = v };
        Ok(())
    }
    /// `MPI_Status_set_tag`.
    fn MPI_Status_set_tag / PMPI_Status_set_tag(status: *mut CStatus, v: c_int) comm = None; {
        if status.is_null() {
            return Err(crate::state::null_arg("status"));
        }
        // SAFETY: not null, valid per the caller.
        unsafe { (*status).tag = v };
        Ok(())
    }
    /// `MPI_Status_set_error`.
    fn MPI_Status_set_error / PMPI_Status_set_error(status: *mut CStatus, v: c_int) comm = None; {
        if status.is_null() {
            return Err(crate::state::null_arg("status"));
        }
        // SAFETY: not null, valid per the caller.
        unsafe { (*status).error = v };
        Ok(())
    }
}
