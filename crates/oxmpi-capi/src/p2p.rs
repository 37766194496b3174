//! Point-to-point calls: each a translation onto the Rust API (a
//! [`RawBuffer`] for `buf, count, datatype`, the API's processes, tags and
//! requests).

use std::ffi::{c_int, c_void};

use oxmpi::request::OwnedRequest;
use oxmpi::{AnyTag, Error, ErrorClass, RawBuffer, SendMode, Status};

use crate::entry;
use crate::env::put;
use crate::state::{lock, state, CommObj, ReqObj, L, REQUEST_NULL};
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

    /// The empty status (MPI 3.7.3): any source, any tag, nothing.
    pub fn empty() -> CStatus {
        CStatus {
            source: ANY_SOURCE,
            tag: ANY_TAG,
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
        let err = (*p).error;
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
                _ => format!("the request failed ({class:?})"),
            },
        )
    })
}

/// `buf, count, datatype` as a raw buffer.
///
/// # Safety
/// The memory must stay valid as the MPI standard requires for the call.
unsafe fn raw(buf: *const c_void, n: c_int, dt: usize) -> Result<RawBuffer, Error> {
    let s = state()?;
    let n = count(n)?;
    let dt = s.datatype(dt)?;
    // SAFETY: forwarded from the caller.
    unsafe { RawBuffer::new(buf.cast(), n, &dt) }
}

fn mode_of(m: u8) -> SendMode {
    match m {
        1 => SendMode::Buffered,
        2 => SendMode::Synchronous,
        3 => SendMode::Ready,
        _ => SendMode::Standard,
    }
}

/// Starts a send; the request owns the buffer description.
fn start_send(
    c: &CommObj,
    b: RawBuffer,
    dest: c_int,
    tag: c_int,
    mode: SendMode,
) -> Result<OwnedRequest<'static, RawBuffer, L>, Error> {
    b.send_to(&c.comm.process_at_rank(dest), tag, mode)
}

/// Posts a receive from `source` (or `MPI_ANY_SOURCE`) with `tag` (or
/// `MPI_ANY_TAG`).
fn start_recv(
    c: &CommObj,
    b: RawBuffer,
    source: c_int,
    tag: c_int,
) -> Result<OwnedRequest<'static, RawBuffer, L>, Error> {
    match (source == ANY_SOURCE, tag == ANY_TAG) {
        (true, true) => b.receive_from(&c.comm.any_process(), AnyTag),
        (true, false) => b.receive_from(&c.comm.any_process(), tag),
        (false, true) => b.receive_from(&c.comm.process_at_rank(source), AnyTag),
        (false, false) => b.receive_from(&c.comm.process_at_rank(source), tag),
    }
}

/// Waits for `r`; the status, or the error it ended with.
fn finish(r: OwnedRequest<'static, RawBuffer, L>) -> (CStatus, Option<Error>) {
    let (_, st) = r.wait_status();
    (CStatus::from_status(&st), status_error(&st))
}

/// Stores a request; returns its handle.
fn store(r: ReqObj) -> Result<usize, Error> {
    Ok(lock(&state()?.requests).insert(r))
}

/// The communicator handle of a stored request (for its error handler).
pub fn request_comm(h: usize) -> Option<usize> {
    let s = crate::state::state_any()?;
    match lock(&s.requests).get(h)? {
        ReqObj::Op(_, c) | ReqObj::Persistent(_, c) => Some(*c),
    }
}

/// `MPI_Wait` on handle `*req`; resets it to `MPI_REQUEST_NULL` unless
/// persistent.
///
/// # Safety
/// `req` valid for read and write.
pub unsafe fn wait_one(req: *mut usize) -> Result<(CStatus, Option<Error>), Error> {
    if req.is_null() {
        return Err(crate::state::null_arg("request"));
    }
    // SAFETY: not null, valid per the caller.
    let h = unsafe { *req };
    if h == REQUEST_NULL {
        return Ok((CStatus::empty(), None));
    }
    let s = state()?;
    let obj = lock(&s.requests).remove(h).ok_or_else(|| {
        Error::new(
            ErrorClass::Request,
            format!("invalid request handle {h:#x}"),
        )
    })?;
    match obj {
        ReqObj::Op(r, _) => {
            // SAFETY: as above.
            unsafe { *req = REQUEST_NULL };
            Ok(finish(r))
        }
        ReqObj::Persistent(mut p, c) => {
            let st = p.wait_status();
            lock(&s.requests).restore(h, ReqObj::Persistent(p, c));
            let cs = if st.source_rank() == ANY_SOURCE && st.tag() == ANY_TAG {
                CStatus::empty()
            } else {
                CStatus::from_status(&st)
            };
            Ok((cs, status_error(&st)))
        }
    }
}

/// `MPI_Test` on handle `*req`: `None` while incomplete.
///
/// # Safety
/// `req` valid for read and write.
pub unsafe fn test_one(req: *mut usize) -> Result<Option<(CStatus, Option<Error>)>, Error> {
    if req.is_null() {
        return Err(crate::state::null_arg("request"));
    }
    // SAFETY: not null, valid per the caller.
    let h = unsafe { *req };
    if h == REQUEST_NULL {
        return Ok(Some((CStatus::empty(), None)));
    }
    let s = state()?;
    let obj = lock(&s.requests).remove(h).ok_or_else(|| {
        Error::new(
            ErrorClass::Request,
            format!("invalid request handle {h:#x}"),
        )
    })?;
    match obj {
        ReqObj::Op(r, c) => match r.test_status() {
            Ok((_, st)) => {
                // SAFETY: as above.
                unsafe { *req = REQUEST_NULL };
                Ok(Some((CStatus::from_status(&st), status_error(&st))))
            }
            Err(r) => {
                lock(&s.requests).restore(h, ReqObj::Op(r, c));
                Ok(None)
            }
        },
        ReqObj::Persistent(mut p, c) => {
            let st = p.test_status();
            lock(&s.requests).restore(h, ReqObj::Persistent(p, c));
            Ok(st.map(|st| (CStatus::from_status(&st), status_error(&st))))
        }
    }
}

fn send(
    buf: *const c_void,
    n: c_int,
    dt: usize,
    dest: c_int,
    tag: c_int,
    comm: usize,
    mode: u8,
) -> Result<(), Error> {
    let c = state()?.comm(comm)?;
    // SAFETY: the caller's buffer, valid for the call.
    let b = unsafe { raw(buf, n, dt) }?;
    let (_, err) = finish(start_send(&c, b, dest, tag, mode_of(mode))?);
    err.map_or(Ok(()), Err)
}

fn isend(
    (buf, n, dt): (*const c_void, c_int, usize),
    dest: c_int,
    tag: c_int,
    comm: usize,
    mode: u8,
    req: *mut usize,
) -> Result<(), Error> {
    let c = state()?.comm(comm)?;
    // SAFETY: the caller keeps the buffer valid until the request completes.
    let b = unsafe { raw(buf, n, dt) }?;
    let r = start_send(&c, b, dest, tag, mode_of(mode))?;
    let h = store(ReqObj::Op(r, comm))?;
    // SAFETY: the caller's out-parameter.
    unsafe { put(req, h, "request") }
}

fn send_init(
    (buf, n, dt): (*const c_void, c_int, usize),
    dest: c_int,
    tag: c_int,
    comm: usize,
    mode: u8,
    req: *mut usize,
) -> Result<(), Error> {
    let c = state()?.comm(comm)?;
    // SAFETY: the caller keeps the buffer valid until the request is freed.
    let b = unsafe { raw(buf, n, dt) }?;
    let p = b.send_init_to(&c.comm.process_at_rank(dest), tag, mode_of(mode))?;
    let h = store(ReqObj::Persistent(p, comm))?;
    // SAFETY: the caller's out-parameter.
    unsafe { put(req, h, "request") }
}

entry! {
    /// `MPI_Send`.
    fn MPI_Send / PMPI_Send(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm); {
        send(buf, n, dt, dest, tag, comm, 0)
    }
    /// `MPI_Bsend`.
    fn MPI_Bsend / PMPI_Bsend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm); {
        send(buf, n, dt, dest, tag, comm, 1)
    }
    /// `MPI_Ssend`.
    fn MPI_Ssend / PMPI_Ssend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm); {
        send(buf, n, dt, dest, tag, comm, 2)
    }
    /// `MPI_Rsend`.
    fn MPI_Rsend / PMPI_Rsend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize) comm = Some(comm); {
        send(buf, n, dt, dest, tag, comm, 3)
    }

    /// `MPI_Recv`.
    fn MPI_Recv / PMPI_Recv(
        buf: *mut c_void, n: c_int, dt: usize, source: c_int, tag: c_int, comm: usize, status: *mut CStatus,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        // SAFETY: the caller's buffer, valid for the call.
        let b = unsafe { raw(buf, n, dt) }?;
        let (st, err) = finish(start_recv(&c, b, source, tag)?);
        // SAFETY: the caller's status or MPI_STATUS_IGNORE.
        unsafe { put_status(status, &st) };
        err.map_or(Ok(()), Err)
    }

    /// `MPI_Isend`.
    fn MPI_Isend / PMPI_Isend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        isend((buf, n, dt), dest, tag, comm, 0, req)
    }
    /// `MPI_Ibsend`.
    fn MPI_Ibsend / PMPI_Ibsend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        isend((buf, n, dt), dest, tag, comm, 1, req)
    }
    /// `MPI_Issend`.
    fn MPI_Issend / PMPI_Issend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        isend((buf, n, dt), dest, tag, comm, 2, req)
    }
    /// `MPI_Irsend`.
    fn MPI_Irsend / PMPI_Irsend(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        isend((buf, n, dt), dest, tag, comm, 3, req)
    }

    /// `MPI_Irecv`.
    fn MPI_Irecv / PMPI_Irecv(
        buf: *mut c_void, n: c_int, dt: usize, source: c_int, tag: c_int, comm: usize, req: *mut usize,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        // SAFETY: the caller keeps the buffer valid until the request completes.
        let b = unsafe { raw(buf, n, dt) }?;
        let r = start_recv(&c, b, source, tag)?;
        let h = store(ReqObj::Op(r, comm))?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(req, h, "request") }
    }

    /// `MPI_Send_init`.
    fn MPI_Send_init / PMPI_Send_init(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n, dt), dest, tag, comm, 0, req)
    }
    /// `MPI_Bsend_init`.
    fn MPI_Bsend_init / PMPI_Bsend_init(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n, dt), dest, tag, comm, 1, req)
    }
    /// `MPI_Ssend_init`.
    fn MPI_Ssend_init / PMPI_Ssend_init(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n, dt), dest, tag, comm, 2, req)
    }
    /// `MPI_Rsend_init`.
    fn MPI_Rsend_init / PMPI_Rsend_init(buf: *const c_void, n: c_int, dt: usize, dest: c_int, tag: c_int, comm: usize, req: *mut usize) comm = Some(comm); {
        send_init((buf, n, dt), dest, tag, comm, 3, req)
    }

    /// `MPI_Recv_init`.
    fn MPI_Recv_init / PMPI_Recv_init(
        buf: *mut c_void, n: c_int, dt: usize, source: c_int, tag: c_int, comm: usize, req: *mut usize,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        // SAFETY: the caller keeps the buffer valid until the request is freed.
        let b = unsafe { raw(buf, n, dt) }?;
        let p = match (source == ANY_SOURCE, tag == ANY_TAG) {
            (true, true) => b.receive_init_from(&c.comm.any_process(), AnyTag),
            (true, false) => b.receive_init_from(&c.comm.any_process(), tag),
            (false, true) => b.receive_init_from(&c.comm.process_at_rank(source), AnyTag),
            (false, false) => b.receive_init_from(&c.comm.process_at_rank(source), tag),
        }?;
        let h = store(ReqObj::Persistent(p, comm))?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(req, h, "request") }
    }

    /// `MPI_Start`.
    fn MPI_Start / PMPI_Start(req: *mut usize) comm = None; {
        if req.is_null() {
            return Err(crate::state::null_arg("request"));
        }
        // SAFETY: not null, valid per the caller.
        let h = unsafe { *req };
        let s = state()?;
        match lock(&s.requests).get_mut(h) {
            Some(ReqObj::Persistent(p, _)) => p.start(),
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
    fn MPI_Wait / PMPI_Wait(req: *mut usize, status: *mut CStatus) comm = None; {
        // SAFETY: the caller's request and status.
        let (st, err) = unsafe { wait_one(req) }?;
        // SAFETY: as above.
        unsafe { put_status(status, &st) };
        err.map_or(Ok(()), Err)
    }

    /// `MPI_Test`.
    fn MPI_Test / PMPI_Test(req: *mut usize, flag: *mut c_int, status: *mut CStatus) comm = None; {
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
        let mut results = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: the caller's array of `n` requests.
            results.push(unsafe { wait_one(reqs.add(i)) });
        }
        let failed = results.iter().any(|r| !matches!(r, Ok((_, None))));
        for (i, r) in results.iter().enumerate() {
            if statuses.is_null() {
                break;
            }
            let (st, code) = match r {
                Ok((st, e)) => (*st, e.as_ref().map_or(0, |e| e.class().code())),
                Err(e) => (CStatus::empty(), e.class().code()),
            };
            // SAFETY: the caller's array of `n` statuses.
            unsafe {
                let p = statuses.add(i);
                p.write(CStatus { error: if failed { code } else { (*p).error }, ..st });
            }
        }
        if failed {
            return Err(Error::new(ErrorClass::InStatus, "a request of MPI_Waitall failed: see the statuses"));
        }
        Ok(())
    }

    /// `MPI_Request_free`: an active operation still completes.
    fn MPI_Request_free / PMPI_Request_free(req: *mut usize) comm = None; {
        if req.is_null() {
            return Err(crate::state::null_arg("request"));
        }
        // SAFETY: not null, valid per the caller.
        let h = unsafe { *req };
        let s = state()?;
        let obj = lock(&s.requests)
            .remove(h)
            .ok_or_else(|| Error::new(ErrorClass::Request, format!("invalid request handle {h:#x}")))?;
        match obj {
            ReqObj::Op(r, _) => r.free(),
            ReqObj::Persistent(p, _) => p.free(),
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
        let c = state()?.comm(comm)?;
        // SAFETY: the caller's buffers, valid for the call.
        let (sb, rb) = unsafe { (raw(sbuf, scount, sdt)?, raw(rbuf, rcount, rdt)?) };
        let r = start_recv(&c, rb, source, rtag)?;
        let sent = start_send(&c, sb, dest, stag, SendMode::Standard).map(finish);
        let (st, err) = finish(r);
        // SAFETY: the caller's status.
        unsafe { put_status(status, &st) };
        if let Some(e) = sent?.1 {
            return Err(e);
        }
        err.map_or(Ok(()), Err)
    }

    /// `MPI_Probe`.
    fn MPI_Probe / PMPI_Probe(source: c_int, tag: c_int, comm: usize, status: *mut CStatus) comm = Some(comm); {
        use oxmpi::traits::*;
        let c = state()?.comm(comm)?;
        let st = match (source == ANY_SOURCE, tag == ANY_TAG) {
            (true, true) => c.comm.any_process().probe_with_tag(AnyTag),
            (true, false) => c.comm.any_process().probe_with_tag(tag),
            (false, true) => c.comm.process_at_rank(source).probe_with_tag(AnyTag),
            (false, false) => c.comm.process_at_rank(source).probe_with_tag(tag),
        }?;
        // SAFETY: the caller's status.
        unsafe { put_status(status, &CStatus::from_status(&st)) };
        Ok(())
    }

    /// `MPI_Iprobe`.
    fn MPI_Iprobe / PMPI_Iprobe(source: c_int, tag: c_int, comm: usize, flag: *mut c_int, status: *mut CStatus) comm = Some(comm); {
        use oxmpi::traits::*;
        let c = state()?.comm(comm)?;
        let st = match (source == ANY_SOURCE, tag == ANY_TAG) {
            (true, true) => c.comm.any_process().immediate_probe_with_tag(AnyTag),
            (true, false) => c.comm.any_process().immediate_probe_with_tag(tag),
            (false, true) => c.comm.process_at_rank(source).immediate_probe_with_tag(AnyTag),
            (false, false) => c.comm.process_at_rank(source).immediate_probe_with_tag(tag),
        }?;
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
