//! The blocking collectives on intercommunicators (MPI-4.1 section 6.2.2):
//! every entry point of `coll` hands an intercommunicator here first, and
//! each runs the schedule of its non-blocking form
//! ([`crate::nbc::inter`]), so the three forms share one implementation.

use std::ffi::{c_int, c_void};

use oxmpi::Error;

use super::Args;
use crate::nbc::inter as nb;
use crate::sched::run;
use crate::state::CommRef;

/// The communicator of handle `comm` if it is an intercommunicator.
pub(super) fn of(comm: usize) -> Result<Option<CommRef>, Error> {
    nb::of(comm)
}

/// `MPI_Bcast`.
pub(super) fn bcast(
    c: CommRef,
    buf: *mut c_void,
    n: i64,
    dt: usize,
    root: c_int,
) -> Result<(), Error> {
    run(nb::bcast(c, buf, n, dt, root)?)
}

/// `MPI_Reduce`.
#[allow(clippy::too_many_arguments)] // MPI_Reduce's
pub(super) fn reduce(
    c: CommRef,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
    root: c_int,
) -> Result<(), Error> {
    run(nb::reduce(c, sbuf, rbuf, n, dt, op, root)?)
}

/// `MPI_Allreduce`.
pub(super) fn allreduce(
    c: CommRef,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
) -> Result<(), Error> {
    run(nb::allreduce(c, sbuf, rbuf, n, dt, op)?)
}

/// `MPI_Gather`.
pub(super) fn gather(c: CommRef, a: Args, root: c_int) -> Result<(), Error> {
    run(nb::gather(
        c, a.sbuf, a.sn, a.sdt, a.rbuf, a.rn, a.rdt, root,
    )?)
}

/// `MPI_Scatter`.
pub(super) fn scatter(c: CommRef, a: Args, root: c_int) -> Result<(), Error> {
    run(nb::scatter(
        c, a.sbuf, a.sn, a.sdt, a.rbuf, a.rn, a.rdt, root,
    )?)
}

/// `MPI_Allgather`.
pub(super) fn allgather(c: CommRef, a: Args) -> Result<(), Error> {
    run(nb::allgather(c, a.sbuf, a.sn, a.sdt, a.rbuf, a.rn, a.rdt)?)
}

/// `MPI_Alltoall`.
pub(super) fn alltoall(c: CommRef, a: Args) -> Result<(), Error> {
    run(nb::alltoall(c, a.sbuf, a.sn, a.sdt, a.rbuf, a.rn, a.rdt)?)
}
