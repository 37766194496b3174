//! Buffers for buffered sends (MPI 4.1 §3.6): the process's
//! (`MPI_Buffer_attach` ...), a communicator's (`MPI_Comm_attach_buffer`
//! ...) and a session's (`MPI_Session_attach_buffer` ..., in
//! [`crate::session`]), each either the program's memory or
//! `MPI_BUFFER_AUTOMATIC` (the library allocates each message's copy).
//! A buffered send uses its communicator's buffer, else its session's,
//! else the process's (the PML's `bsend` module decides; this module tells
//! it which communicators derive from which session). The flushes wait
//! until the buffer's messages have left it; the non-blocking ones are
//! requests polled by progress.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use oxmpi::{BufferScope, Error, ErrorClass};

use crate::entry;
use crate::env::put;
use crate::p2p::count64;
use crate::state::{lock, state, CommObj, ReqObj};

/// `MPI_BUFFER_AUTOMATIC` (`mpi.h`).
pub const BUFFER_AUTOMATIC: *mut c_void = 2 as *mut c_void;

/// Sessions of groups made by `MPI_Group_from_session_pset` (and of the
/// groups made from those): group handle to session handle.
static GROUP_SESSION: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

/// Notes that group `h` derives from session `session`.
pub fn note_group(h: usize, session: usize) {
    lock(&GROUP_SESSION)
        .get_or_insert_with(HashMap::new)
        .insert(h, session);
}

/// The session group `h` derives from, if any.
pub fn group_session(h: usize) -> Option<usize> {
    lock(&GROUP_SESSION).as_ref()?.get(&h).copied()
}

/// Group `to`, made from group `from`, derives from `from`'s session.
pub fn inherit_group(from: usize, to: usize) {
    if let Some(sess) = group_session(from) {
        note_group(to, sess);
    }
}

/// Forgets group `h` (freed).
pub fn forget_group(h: usize) {
    if let Some(m) = lock(&GROUP_SESSION).as_mut() {
        m.remove(&h);
    }
}

/// Communicator `c` derives from session `session` (made from one of its
/// groups).
pub fn bind(c: &CommObj, session: usize) {
    if let Ok(s) = state() {
        s.universe.bind_session(&c.comm, Some(session as u64));
    }
}

/// Communicator `child`, made from `parent`, derives from `parent`'s
/// session, if it has one.
pub fn inherit(parent: &CommObj, child: usize) {
    let Ok(s) = state() else {
        return;
    };
    if let Some(sess) = s.universe.session_of(&parent.comm) {
        if let Ok(c) = s.comm(child) {
            s.universe.bind_session(&c.comm, Some(sess));
        }
    }
}

/// Before communicator `c` is freed: its buffer (if any) is flushed and
/// detached, and its session binding dropped, so that the context id,
/// when reused, starts clean.
pub fn on_free(c: &CommObj) {
    let Ok(s) = state() else {
        return;
    };
    let scope = c.comm.buffer_scope();
    let _ = s.universe.buffer_detach_raw_in(scope);
    s.universe.bind_session(&c.comm, None);
}

/// Attaches `buf` (`size` bytes, or `MPI_BUFFER_AUTOMATIC`) to `scope`.
///
/// # Safety
/// The program lends `size` bytes at `buf` until the buffer is detached.
pub unsafe fn attach(scope: BufferScope, buf: *mut c_void, size: i64) -> Result<(), Error> {
    let s = state()?;
    if buf == BUFFER_AUTOMATIC {
        return s.universe.buffer_attach_automatic(scope);
    }
    let n = count64(size)?;
    if buf.is_null() && n > 0 {
        return Err(Error::new(
            ErrorClass::Buffer,
            "a null buffer (MPI_BUFFER_AUTOMATIC lets the library allocate)",
        ));
    }
    // SAFETY: per the caller.
    unsafe { s.universe.buffer_attach_raw_in(scope, buf.cast(), n) }
}

/// Detaches `scope`'s buffer once its messages have left, writing its
/// address through `addr` (a `void**`; `MPI_BUFFER_AUTOMATIC` for an
/// automatic buffer) and giving its size (0 for an automatic buffer).
///
/// # Safety
/// `addr` null or valid for writing a pointer.
pub unsafe fn detach(scope: BufferScope, addr: *mut c_void) -> Result<usize, Error> {
    let s = state()?;
    let (p, n) = match s.universe.buffer_detach_raw_in(scope)? {
        Some((p, n)) => (p.cast::<c_void>(), n),
        None => (BUFFER_AUTOMATIC, 0),
    };
    // SAFETY: per the caller (`addr` is a `void**`).
    unsafe { put(addr.cast::<*mut c_void>(), p, "buffer_addr") }?;
    Ok(n)
}

/// A size for an `int` out-parameter.
pub fn int_size(n: usize) -> Result<c_int, Error> {
    c_int::try_from(n).map_err(|_| {
        Error::new(
            ErrorClass::ValueTooLarge,
            format!("the buffer's size {n} does not fit an int (use the _c form)"),
        )
    })
}

/// A request that completes once `scope`'s buffer is empty (the
/// non-blocking flushes), stored in `*req`.
///
/// # Safety
/// `req` null or valid for a write.
pub unsafe fn iflush(scope: BufferScope, req: *mut usize) -> Result<(), Error> {
    let s = state()?;
    let u = &s.universe;
    // Each look at the request makes one progress pass, so that waiting on
    // it moves the buffered messages along.
    let poll: crate::p2p::Poll = Box::new(move || {
        if u.buffer_busy_in(scope) {
            u.progress();
        }
        (!u.buffer_busy_in(scope)).then_some(Ok(()))
    });
    let g = crate::p2p::Greq::polled(poll);
    let h = lock(&s.requests).insert(ReqObj::Greq(Arc::new(g)));
    // SAFETY: per the caller.
    unsafe { put(req, h, "request") }
}

/// A communicator's buffer scope.
fn comm_scope(comm: usize) -> Result<BufferScope, Error> {
    Ok(state()?.comm(comm)?.comm.buffer_scope())
}

entry! {
    /// `MPI_Comm_attach_buffer`: `size` bytes at `buffer` (or
    /// `MPI_BUFFER_AUTOMATIC`) for the communicator's buffered sends.
    fn MPI_Comm_attach_buffer / PMPI_Comm_attach_buffer(comm: usize, buffer: *mut c_void, size: c_int) comm = Some(comm); {
        // SAFETY: the program lends the memory until it detaches it.
        unsafe { attach(comm_scope(comm)?, buffer, size.into()) }
    }

    /// `MPI_Comm_attach_buffer_c`.
    fn MPI_Comm_attach_buffer_c / PMPI_Comm_attach_buffer_c(comm: usize, buffer: *mut c_void, size: i64) comm = Some(comm); {
        // SAFETY: as above.
        unsafe { attach(comm_scope(comm)?, buffer, size) }
    }

    /// `MPI_Comm_detach_buffer`: waits for the communicator's buffered
    /// messages, then gives the buffer's address and size back.
    fn MPI_Comm_detach_buffer / PMPI_Comm_detach_buffer(comm: usize, buffer_addr: *mut c_void, size: *mut c_int) comm = Some(comm); {
        // SAFETY: the caller's out-parameters.
        let n = unsafe { detach(comm_scope(comm)?, buffer_addr) }?;
        // SAFETY: as above.
        unsafe { put(size, int_size(n)?, "size") }
    }

    /// `MPI_Comm_detach_buffer_c`.
    fn MPI_Comm_detach_buffer_c / PMPI_Comm_detach_buffer_c(comm: usize, buffer_addr: *mut c_void, size: *mut i64) comm = Some(comm); {
        // SAFETY: the caller's out-parameters.
        let n = unsafe { detach(comm_scope(comm)?, buffer_addr) }?;
        // SAFETY: as above.
        unsafe { put(size, n as i64, "size") }
    }

    /// `MPI_Comm_flush_buffer`: waits until the communicator's buffered
    /// messages have left its buffer.
    fn MPI_Comm_flush_buffer / PMPI_Comm_flush_buffer(comm: usize) comm = Some(comm); {
        state()?.universe.buffer_flush_in(comm_scope(comm)?);
        Ok(())
    }

    /// `MPI_Comm_iflush_buffer`.
    fn MPI_Comm_iflush_buffer / PMPI_Comm_iflush_buffer(comm: usize, req: *mut usize) comm = Some(comm); {
        // SAFETY: the caller's out-parameter.
        unsafe { iflush(comm_scope(comm)?, req) }
    }
}
