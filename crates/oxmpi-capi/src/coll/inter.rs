//! The blocking gather and scatter on intercommunicators (MPI-4.1 section
//! 6.2.2): `coll`'s entry points hand an intercommunicator here first, and
//! each runs the schedule of its non-blocking form (the other blocking
//! collectives run their schedules from `nbc` directly)
//! ([`crate::nbc::inter`]), so the three forms share one implementation.

use std::ffi::c_int;

use oxmpi::Error;

use super::Args;
use crate::nbc::inter as nb;
use crate::sched::run;
use crate::state::CommRef;

/// The communicator of handle `comm` if it is an intercommunicator.
pub(super) fn of(comm: usize) -> Result<Option<CommRef>, Error> {
    nb::of(comm)
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
