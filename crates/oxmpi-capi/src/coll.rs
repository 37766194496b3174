//! The blocking collectives: gather and scatter linear, built on
//! point-to-point here (over each communicator's shadow duplicate, so they
//! never match the program's messages); barrier the Rust API's
//! dissemination; bcast, reduce, allreduce, allgather and alltoall run the
//! schedule of their non-blocking form ([`crate::nbc`]), whose algorithm
//! is chosen by message size and rank count (`coll_tuned_*`).

use std::ffi::{c_int, c_void};

use oxmpi::{Error, ErrorClass, RawBuffer, SendMode, UserDatatype};

use crate::entry;
use crate::nbc;
use crate::ops::{apply, kernel, Kernel};
use crate::p2p::count64;
use crate::sched;
use crate::state::{state, CommObj};

mod inter;

/// `MPI_IN_PLACE`.
const IN_PLACE: *const c_void = 1 as *const c_void;
const TAG: i32 = 0;

/// `count` elements of handle `dt` at `buf + index * count * extent`.
///
/// # Safety
/// The memory must be valid for the call.
unsafe fn block(
    buf: *const c_void,
    index: usize,
    n: usize,
    dt: &UserDatatype,
) -> Result<RawBuffer, Error> {
    let off = (index * n) as isize * dt.extent();
    let p = (buf as usize).wrapping_add_signed(off) as *const u8;
    // SAFETY: forwarded from the caller: the block lies in its buffer.
    unsafe { RawBuffer::new(p, n, dt) }
}

/// Waits for every request (together: one lock per pass), returning the
/// first error.
fn wait_all(reqs: Vec<crate::state::Op>) -> Result<(), Error> {
    let mut first = None;
    oxmpi::request::wait_all_each(reqs, |_, (), st| {
        if let (None, Some(class)) = (&first, st.error()) {
            first = Some(Error::new(class, "a collective transfer failed"));
        }
    });
    first.map_or(Ok(()), Err)
}

fn check_root(c: &CommObj, root: c_int) -> Result<(), Error> {
    let n = c.coll.size();
    if root < 0 || root >= n {
        return Err(Error::new(
            ErrorClass::Root,
            format!("root {root} of a communicator of {n}"),
        ));
    }
    Ok(())
}

/// A reduction for the collective schedules ([`crate::sched`]): the
/// kernel of a datatype and an operation, checked as `MPI_Reduce` checks
/// them.
pub(crate) struct Reduction(Kernel);

impl Reduction {
    /// The reduction of datatype handle `dt` by operation handle `op`.
    pub(crate) fn new(dt: usize, op: usize) -> Result<Reduction, Error> {
        kernel(dt, op).map(Reduction)
    }

    /// Whether the operation is commutative (the algorithms that combine
    /// out of rank order need it).
    pub(crate) fn commutative(&self) -> bool {
        self.0.commutative()
    }

    /// `inout = x op inout` over `n` elements (memory images).
    pub(crate) fn apply(&self, x: &mut [u8], inout: &mut [u8], n: usize) -> Result<(), Error> {
        apply(&self.0, x, inout, n)
    }
}

/// Copies `n` elements of `st` at `src` to `m` elements of `rt` at `dst`
/// (a local transfer through the convertor: a send to self).
fn local_copy(c: &CommObj, src: RawBuffer, dst: RawBuffer) -> Result<(), Error> {
    let me = c.coll.rank();
    let r = dst.receive_from(&c.coll.process_at_rank(me), TAG + 1)?;
    let s = src.send_to(&c.coll.process_at_rank(me), TAG + 1, SendMode::Standard)?;
    wait_all(vec![s, r])
}

/// Linear gather of `sn` `st` from every rank into `rbuf` at the root.
///
/// # Safety
/// The buffers as `MPI_Gather` requires.
#[allow(clippy::too_many_arguments)] // the arguments of MPI_Gather
unsafe fn gather(
    c: &CommObj,
    sbuf: *const c_void,
    sn: usize,
    st: Option<&UserDatatype>,
    rbuf: *mut c_void,
    rn: usize,
    rt: Option<&UserDatatype>,
    root: c_int,
) -> Result<(), Error> {
    check_root(c, root)?;
    let (me, n) = (c.coll.rank(), c.coll.size());
    if me != root {
        let st = st.ok_or_else(|| Error::new(ErrorClass::Type, "no send datatype"))?;
        // SAFETY: the caller's send buffer.
        let b = unsafe { RawBuffer::new(sbuf.cast(), sn, st) }?;
        return wait_all(vec![b.send_to(
            &c.coll.process_at_rank(root),
            TAG,
            SendMode::Standard,
        )?]);
    }
    let rt = rt.ok_or_else(|| Error::new(ErrorClass::Type, "no receive datatype"))?;
    let mut reqs = Vec::new();
    for r in (0..n).filter(|&r| r != me) {
        // SAFETY: block `r` of the root's receive buffer.
        let b = unsafe { block(rbuf, r as usize, rn, rt) }?;
        reqs.push(b.receive_from(&c.coll.process_at_rank(r), TAG)?);
    }
    if sbuf != IN_PLACE {
        let st = st.ok_or_else(|| Error::new(ErrorClass::Type, "no send datatype"))?;
        // SAFETY: the caller's buffers.
        let (s, d) = unsafe {
            (
                RawBuffer::new(sbuf.cast(), sn, st)?,
                block(rbuf, me as usize, rn, rt)?,
            )
        };
        local_copy(c, s, d)?;
    }
    wait_all(reqs)
}

/// Linear scatter from the root.
///
/// # Safety
/// The buffers as `MPI_Scatter` requires.
#[allow(clippy::too_many_arguments)] // the arguments of MPI_Scatter
unsafe fn scatter(
    c: &CommObj,
    sbuf: *const c_void,
    sn: usize,
    st: Option<&UserDatatype>,
    rbuf: *mut c_void,
    rn: usize,
    rt: Option<&UserDatatype>,
    root: c_int,
) -> Result<(), Error> {
    check_root(c, root)?;
    let (me, n) = (c.coll.rank(), c.coll.size());
    if me != root {
        let rt = rt.ok_or_else(|| Error::new(ErrorClass::Type, "no receive datatype"))?;
        // SAFETY: the caller's receive buffer.
        let b = unsafe { RawBuffer::new(rbuf.cast_const().cast(), rn, rt) }?;
        return wait_all(vec![b.receive_from(&c.coll.process_at_rank(root), TAG)?]);
    }
    let st = st.ok_or_else(|| Error::new(ErrorClass::Type, "no send datatype"))?;
    let mut reqs = Vec::new();
    for r in (0..n).filter(|&r| r != me) {
        // SAFETY: block `r` of the root's send buffer.
        let b = unsafe { block(sbuf, r as usize, sn, st) }?;
        reqs.push(b.send_to(&c.coll.process_at_rank(r), TAG, SendMode::Standard)?);
    }
    if rbuf.cast_const() != IN_PLACE {
        let rt = rt.ok_or_else(|| Error::new(ErrorClass::Type, "no receive datatype"))?;
        // SAFETY: the caller's buffers.
        let (s, d) = unsafe {
            (
                block(sbuf, me as usize, sn, st)?,
                RawBuffer::new(rbuf.cast_const().cast(), rn, rt)?,
            )
        };
        local_copy(c, s, d)?;
    }
    wait_all(reqs)
}

/// The datatype of handle `h`, or `None` where the call ignores it.
fn dt_opt(h: usize, used: bool) -> Result<Option<UserDatatype>, Error> {
    if !used {
        return Ok(None);
    }
    state()?.datatype(h).map(Some)
}

/// Collective arguments with large counts.
struct Args {
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
}

/// `MPI_Gather` with large counts.
///
/// # Safety
/// As for `MPI_Gather`.
unsafe fn gather_entry(a: Args, root: c_int, comm: usize) -> Result<(), Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::gather(c, a, root);
    }
    let c = state()?.intra_comm(comm)?;
    let is_root = c.coll.rank() == root;
    let st = dt_opt(a.sdt, !(is_root && a.sbuf == IN_PLACE))?;
    let rt = dt_opt(a.rdt, is_root)?;
    let sn = if st.is_some() { count64(a.sn)? } else { 0 };
    let rn = if is_root { count64(a.rn)? } else { 0 };
    // SAFETY: forwarded.
    unsafe { gather(&c, a.sbuf, sn, st.as_ref(), a.rbuf, rn, rt.as_ref(), root) }
}

/// `MPI_Scatter` with large counts.
///
/// # Safety
/// As for `MPI_Scatter`.
unsafe fn scatter_entry(a: Args, root: c_int, comm: usize) -> Result<(), Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::scatter(c, a, root);
    }
    let c = state()?.intra_comm(comm)?;
    let is_root = c.coll.rank() == root;
    let st = dt_opt(a.sdt, is_root)?;
    let rt = dt_opt(a.rdt, !(is_root && a.rbuf.cast_const() == IN_PLACE))?;
    let sn = if is_root { count64(a.sn)? } else { 0 };
    let rn = if rt.is_some() { count64(a.rn)? } else { 0 };
    // SAFETY: forwarded.
    unsafe { scatter(&c, a.sbuf, sn, st.as_ref(), a.rbuf, rn, rt.as_ref(), root) }
}

entry! {
    /// `MPI_Barrier`.
    fn MPI_Barrier / PMPI_Barrier(comm: usize) comm = Some(comm); {
        state()?.comm(comm)?.comm.barrier()
    }

    /// `MPI_Bcast`.
    fn MPI_Bcast / PMPI_Bcast(buf: *mut c_void, n: c_int, dt: usize, root: c_int, comm: usize) comm = Some(comm); {
        sched::run(nbc::b_bcast(buf, n.into(), dt, root, comm)?)
    }
    /// `MPI_Bcast_c`.
    fn MPI_Bcast_c / PMPI_Bcast_c(buf: *mut c_void, n: i64, dt: usize, root: c_int, comm: usize) comm = Some(comm); {
        sched::run(nbc::b_bcast(buf, n, dt, root, comm)?)
    }

    /// `MPI_Reduce`: predefined operations on predefined types, and
    /// `MPI_Op_create` operations on any datatype (non-commutative ones
    /// in rank order).
    fn MPI_Reduce / PMPI_Reduce(
        sbuf: *const c_void, rbuf: *mut c_void, n: c_int, dt: usize, op: usize, root: c_int, comm: usize,
    ) comm = Some(comm); {
        sched::run(nbc::b_reduce(sbuf, rbuf, n.into(), dt, op, root, comm)?)
    }
    /// `MPI_Reduce_c`.
    fn MPI_Reduce_c / PMPI_Reduce_c(
        sbuf: *const c_void, rbuf: *mut c_void, n: i64, dt: usize, op: usize, root: c_int, comm: usize,
    ) comm = Some(comm); {
        sched::run(nbc::b_reduce(sbuf, rbuf, n, dt, op, root, comm)?)
    }

    /// `MPI_Allreduce`.
    fn MPI_Allreduce / PMPI_Allreduce(
        sbuf: *const c_void, rbuf: *mut c_void, n: c_int, dt: usize, op: usize, comm: usize,
    ) comm = Some(comm); {
        sched::run(nbc::b_allreduce(sbuf, rbuf, n.into(), dt, op, comm)?)
    }
    /// `MPI_Allreduce_c`.
    fn MPI_Allreduce_c / PMPI_Allreduce_c(
        sbuf: *const c_void, rbuf: *mut c_void, n: i64, dt: usize, op: usize, comm: usize,
    ) comm = Some(comm); {
        sched::run(nbc::b_allreduce(sbuf, rbuf, n, dt, op, comm)?)
    }

    /// `MPI_Gather`.
    fn MPI_Gather / PMPI_Gather(
        sbuf: *const c_void, sn: c_int, sdt: usize, rbuf: *mut c_void, rn: c_int, rdt: usize, root: c_int, comm: usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers.
        unsafe { gather_entry(Args { sbuf, sn: sn.into(), sdt, rbuf, rn: rn.into(), rdt }, root, comm) }
    }
    /// `MPI_Gather_c`.
    fn MPI_Gather_c / PMPI_Gather_c(
        sbuf: *const c_void, sn: i64, sdt: usize, rbuf: *mut c_void, rn: i64, rdt: usize, root: c_int, comm: usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers.
        unsafe { gather_entry(Args { sbuf, sn, sdt, rbuf, rn, rdt }, root, comm) }
    }

    /// `MPI_Scatter`.
    fn MPI_Scatter / PMPI_Scatter(
        sbuf: *const c_void, sn: c_int, sdt: usize, rbuf: *mut c_void, rn: c_int, rdt: usize, root: c_int, comm: usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers.
        unsafe { scatter_entry(Args { sbuf, sn: sn.into(), sdt, rbuf, rn: rn.into(), rdt }, root, comm) }
    }
    /// `MPI_Scatter_c`.
    fn MPI_Scatter_c / PMPI_Scatter_c(
        sbuf: *const c_void, sn: i64, sdt: usize, rbuf: *mut c_void, rn: i64, rdt: usize, root: c_int, comm: usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers.
        unsafe { scatter_entry(Args { sbuf, sn, sdt, rbuf, rn, rdt }, root, comm) }
    }

    /// `MPI_Allgather`.
    fn MPI_Allgather / PMPI_Allgather(
        sbuf: *const c_void, sn: c_int, sdt: usize, rbuf: *mut c_void, rn: c_int, rdt: usize, comm: usize,
    ) comm = Some(comm); {
        sched::run(nbc::b_allgather(sbuf, sn.into(), sdt, rbuf, rn.into(), rdt, comm)?)
    }
    /// `MPI_Allgather_c`.
    fn MPI_Allgather_c / PMPI_Allgather_c(
        sbuf: *const c_void, sn: i64, sdt: usize, rbuf: *mut c_void, rn: i64, rdt: usize, comm: usize,
    ) comm = Some(comm); {
        sched::run(nbc::b_allgather(sbuf, sn, sdt, rbuf, rn, rdt, comm)?)
    }

    /// `MPI_Alltoall`.
    fn MPI_Alltoall / PMPI_Alltoall(
        sbuf: *const c_void, sn: c_int, sdt: usize, rbuf: *mut c_void, rn: c_int, rdt: usize, comm: usize,
    ) comm = Some(comm); {
        sched::run(nbc::b_alltoall(sbuf, sn.into(), sdt, rbuf, rn.into(), rdt, comm)?)
    }
    /// `MPI_Alltoall_c`.
    fn MPI_Alltoall_c / PMPI_Alltoall_c(
        sbuf: *const c_void, sn: i64, sdt: usize, rbuf: *mut c_void, rn: i64, rdt: usize, comm: usize,
    ) comm = Some(comm); {
        sched::run(nbc::b_alltoall(sbuf, sn, sdt, rbuf, rn, rdt, comm)?)
    }
}
