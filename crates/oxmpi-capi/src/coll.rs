//! Collectives built on point-to-point (over each communicator's shadow
//! duplicate, so they never match the program's messages): linear
//! algorithms, correct for every predefined type and operation.

use std::ffi::{c_int, c_void};

use oxmpi::traits::*;
use oxmpi::{Error, ErrorClass, RawBuffer, SendMode, UserDatatype};

use crate::entry;
use crate::ops::{apply, kernel, Kernel};
use crate::p2p::count64;
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

/// The memory image of `n` elements of `dt`: its length, and the offset of
/// the origin in it (data may lie before the origin).
fn image(dt: &UserDatatype, n: usize) -> Result<(usize, isize), Error> {
    let conv = oxmpi_datatype::Convertor::new(dt.as_raw(), n)?;
    Ok(match conv.span() {
        Some(sp) => ((sp.end - sp.start) as usize, -sp.start),
        None => (0, 0),
    })
}

/// A raw buffer over an image buffer.
fn image_buf(v: &mut [u8], origin: isize, n: usize, dt: &UserDatatype) -> Result<RawBuffer, Error> {
    let p = (v.as_mut_ptr() as usize).wrapping_add_signed(origin) as *const u8;
    // SAFETY: the image holds the span of `n` elements around `origin`,
    // and outlives the operations (they complete before it is dropped).
    unsafe { RawBuffer::new(p, n, dt) }
}

/// Copies `n` elements of `dt` from the caller's `src` into an image.
fn to_image(
    c: &CommObj,
    src: *const c_void,
    n: usize,
    dt: &UserDatatype,
) -> Result<(Vec<u8>, isize), Error> {
    let (len, origin) = image(dt, n)?;
    let mut v = vec![0u8; len];
    // SAFETY: the caller's buffer holds `n` elements of `dt`.
    let s = unsafe { RawBuffer::new(src.cast(), n, dt) }?;
    let d = image_buf(&mut v, origin, n, dt)?;
    local_copy(c, s, d)?;
    Ok((v, origin))
}

/// Linear reduction in rank order to `root`; the result written to `rbuf`
/// there (only the bytes the datatype describes).
///
/// # Safety
/// The caller's buffers as `MPI_Reduce` requires.
#[allow(clippy::too_many_arguments)] // the arguments of MPI_Reduce
unsafe fn reduce(
    c: &CommObj,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: usize,
    dt: usize,
    op: usize,
    root: c_int,
) -> Result<(), Error> {
    check_root(c, root)?;
    let k = kernel(dt, op)?;
    let t = state()?.datatype(dt)?;
    let me = c.coll.rank();
    let src = if sbuf == IN_PLACE && me == root {
        rbuf.cast_const()
    } else {
        sbuf
    };
    let (mut mine, origin) = to_image(c, src, n, &t)?;
    if me != root {
        let b = image_buf(&mut mine, origin, n, &t)?;
        return wait_all(vec![b.send_to(
            &c.coll.process_at_rank(root),
            TAG,
            SendMode::Standard,
        )?]);
    }
    let mut parts = Vec::new();
    for r in 0..c.coll.size() {
        if r == me {
            parts.push(std::mem::take(&mut mine));
            continue;
        }
        let mut v = vec![0u8; image(&t, n)?.0];
        let b = image_buf(&mut v, origin, n, &t)?;
        wait_all(vec![b.receive_from(&c.coll.process_at_rank(r), TAG)?])?;
        parts.push(v);
    }
    // ((x0 op x1) op x2) ...: the user function computes inout = in op inout.
    let mut it = parts.into_iter();
    let mut acc = it.next().unwrap_or_default();
    for mut x in it {
        if matches!(k, Kernel::User(..)) {
            apply(&k, &mut acc, &mut x, n)?;
            acc = x;
        } else {
            apply(&k, &mut x, &mut acc, n)?;
        }
    }
    let s = image_buf(&mut acc, origin, n, &t)?;
    // SAFETY: the root's receive buffer holds `n` elements of `dt`.
    let d = unsafe { RawBuffer::new(rbuf.cast_const().cast(), n, &t) }?;
    local_copy(c, s, d)
}

/// Linear broadcast of `n` elements of `dt` at `buf` from `root`.
///
/// # Safety
/// The caller's buffer as `MPI_Bcast` requires.
unsafe fn bcast(
    c: &CommObj,
    buf: *mut c_void,
    n: usize,
    dt: usize,
    root: c_int,
) -> Result<(), Error> {
    check_root(c, root)?;
    let t = state()?.datatype(dt)?;
    // SAFETY: the caller's buffer holds `n` elements of `dt`.
    let mut b = unsafe { RawBuffer::new(buf.cast_const().cast(), n, &t) }?;
    if c.coll.rank() == root {
        for r in (0..c.coll.size()).filter(|&r| r != root) {
            c.coll.process_at_rank(r).send_with_tag(&b, TAG)?;
        }
        Ok(())
    } else {
        c.coll
            .process_at_rank(root)
            .receive_into_with_tag(&mut b, TAG)
            .map(|_| ())
    }
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

/// `MPI_Allgather` with large counts: gather to rank 0, then broadcast.
///
/// # Safety
/// As for `MPI_Allgather`.
unsafe fn allgather_entry(a: Args, comm: usize) -> Result<(), Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::allgather(c, a);
    }
    let c = state()?.intra_comm(comm)?;
    let me = c.coll.rank();
    let rt = state()?.datatype(a.rdt)?;
    let rn = count64(a.rn)?;
    let (sbuf, sn, st) = if a.sbuf == IN_PLACE {
        // This rank's block is in the receive buffer already.
        let p = (a.rbuf as usize).wrapping_add_signed((me as usize * rn) as isize * rt.extent());
        (
            if me == 0 {
                IN_PLACE
            } else {
                p as *const c_void
            },
            rn,
            rt.clone(),
        )
    } else {
        (a.sbuf, count64(a.sn)?, state()?.datatype(a.sdt)?)
    };
    // SAFETY: forwarded.
    unsafe { gather(&c, sbuf, sn, Some(&st), a.rbuf, rn, Some(&rt), 0) }?;
    let whole = c.coll.size() as usize * rn;
    // SAFETY: forwarded: the whole receive buffer.
    unsafe { bcast(&c, a.rbuf, whole, a.rdt, 0) }
}

/// `MPI_Alltoall` with large counts: every block posted at once.
///
/// # Safety
/// As for `MPI_Alltoall`.
unsafe fn alltoall_entry(a: Args, comm: usize) -> Result<(), Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::alltoall(c, a);
    }
    let c = state()?.intra_comm(comm)?;
    let (me, n) = (c.coll.rank(), c.coll.size());
    let rt = state()?.datatype(a.rdt)?;
    let rn = count64(a.rn)?;
    let bytes = UserDatatype::of::<u8>();
    // In place: send from a packed copy of the receive buffer.
    let mut copy = Vec::new();
    let (sbuf, sn, st) = if a.sbuf == IN_PLACE {
        // SAFETY: the caller's receive buffer.
        let b = unsafe { RawBuffer::new(a.rbuf.cast_const().cast(), n as usize * rn, &rt) }?;
        copy = vec![0u8; b.packed_len()];
        let len = copy.len();
        // SAFETY: `copy` outlives the transfers.
        let d = unsafe { RawBuffer::new(copy.as_mut_ptr(), len, &bytes) }?;
        local_copy(&c, b, d)?;
        (
            copy.as_ptr().cast::<c_void>(),
            rn * rt.size(),
            bytes.clone(),
        )
    } else {
        (a.sbuf, count64(a.sn)?, state()?.datatype(a.sdt)?)
    };
    let mut reqs = Vec::new();
    for r in 0..n {
        // SAFETY: block `r` of the receive buffer.
        let b = unsafe { block(a.rbuf, r as usize, rn, &rt) }?;
        reqs.push(b.receive_from(&c.coll.process_at_rank(r), TAG + 2)?);
    }
    for k in 0..n {
        let r = (me + k) % n;
        // SAFETY: block `r` of the send buffer.
        let b = unsafe { block(sbuf, r as usize, sn, &st) }?;
        reqs.push(b.send_to(&c.coll.process_at_rank(r), TAG + 2, SendMode::Standard)?);
    }
    let r = wait_all(reqs);
    drop(copy);
    r
}

/// `MPI_Allreduce` with a large count: reduce to rank 0, then broadcast.
///
/// # Safety
/// As for `MPI_Allreduce`.
unsafe fn allreduce_entry(
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
    comm: usize,
) -> Result<(), Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::allreduce(c, sbuf, rbuf, n, dt, op);
    }
    let c = state()?.intra_comm(comm)?;
    let n = count64(n)?;
    let src = if sbuf == IN_PLACE && c.coll.rank() != 0 {
        rbuf.cast_const()
    } else {
        sbuf
    };
    // SAFETY: forwarded.
    unsafe {
        reduce(&c, src, rbuf, n, dt, op, 0)?;
        bcast(&c, rbuf, n, dt, 0)
    }
}

/// `MPI_Reduce` with a large count.
///
/// # Safety
/// As for `MPI_Reduce`.
unsafe fn reduce_entry(
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
    root: c_int,
    comm: usize,
) -> Result<(), Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::reduce(c, sbuf, rbuf, n, dt, op, root);
    }
    let c = state()?.intra_comm(comm)?;
    // SAFETY: forwarded.
    unsafe { reduce(&c, sbuf, rbuf, count64(n)?, dt, op, root) }
}

/// `MPI_Bcast` with a large count.
///
/// # Safety
/// As for `MPI_Bcast`.
unsafe fn bcast_entry(
    buf: *mut c_void,
    n: i64,
    dt: usize,
    root: c_int,
    comm: usize,
) -> Result<(), Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::bcast(c, buf, n, dt, root);
    }
    let c = state()?.intra_comm(comm)?;
    // SAFETY: forwarded.
    unsafe { bcast(&c, buf, count64(n)?, dt, root) }
}

entry! {
    /// `MPI_Barrier`.
    fn MPI_Barrier / PMPI_Barrier(comm: usize) comm = Some(comm); {
        state()?.comm(comm)?.comm.barrier()
    }

    /// `MPI_Bcast` (linear from the root).
    fn MPI_Bcast / PMPI_Bcast(buf: *mut c_void, n: c_int, dt: usize, root: c_int, comm: usize) comm = Some(comm); {
        // SAFETY: the caller's buffer.
        unsafe { bcast_entry(buf, n.into(), dt, root, comm) }
    }
    /// `MPI_Bcast_c`.
    fn MPI_Bcast_c / PMPI_Bcast_c(buf: *mut c_void, n: i64, dt: usize, root: c_int, comm: usize) comm = Some(comm); {
        // SAFETY: the caller's buffer.
        unsafe { bcast_entry(buf, n, dt, root, comm) }
    }

    /// `MPI_Reduce`: predefined operations on predefined types, and
    /// `MPI_Op_create` operations on any datatype, in rank order.
    fn MPI_Reduce / PMPI_Reduce(
        sbuf: *const c_void, rbuf: *mut c_void, n: c_int, dt: usize, op: usize, root: c_int, comm: usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers.
        unsafe { reduce_entry(sbuf, rbuf, n.into(), dt, op, root, comm) }
    }
    /// `MPI_Reduce_c`.
    fn MPI_Reduce_c / PMPI_Reduce_c(
        sbuf: *const c_void, rbuf: *mut c_void, n: i64, dt: usize, op: usize, root: c_int, comm: usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers.
        unsafe { reduce_entry(sbuf, rbuf, n, dt, op, root, comm) }
    }

    /// `MPI_Allreduce`.
    fn MPI_Allreduce / PMPI_Allreduce(
        sbuf: *const c_void, rbuf: *mut c_void, n: c_int, dt: usize, op: usize, comm: usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers.
        unsafe { allreduce_entry(sbuf, rbuf, n.into(), dt, op, comm) }
    }
    /// `MPI_Allreduce_c`.
    fn MPI_Allreduce_c / PMPI_Allreduce_c(
        sbuf: *const c_void, rbuf: *mut c_void, n: i64, dt: usize, op: usize, comm: usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers.
        unsafe { allreduce_entry(sbuf, rbuf, n, dt, op, comm) }
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
        // SAFETY: the caller's buffers.
        unsafe { allgather_entry(Args { sbuf, sn: sn.into(), sdt, rbuf, rn: rn.into(), rdt }, comm) }
    }
    /// `MPI_Allgather_c`.
    fn MPI_Allgather_c / PMPI_Allgather_c(
        sbuf: *const c_void, sn: i64, sdt: usize, rbuf: *mut c_void, rn: i64, rdt: usize, comm: usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers.
        unsafe { allgather_entry(Args { sbuf, sn, sdt, rbuf, rn, rdt }, comm) }
    }

    /// `MPI_Alltoall`.
    fn MPI_Alltoall / PMPI_Alltoall(
        sbuf: *const c_void, sn: c_int, sdt: usize, rbuf: *mut c_void, rn: c_int, rdt: usize, comm: usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers.
        unsafe { alltoall_entry(Args { sbuf, sn: sn.into(), sdt, rbuf, rn: rn.into(), rdt }, comm) }
    }
    /// `MPI_Alltoall_c`.
    fn MPI_Alltoall_c / PMPI_Alltoall_c(
        sbuf: *const c_void, sn: i64, sdt: usize, rbuf: *mut c_void, rn: i64, rdt: usize, comm: usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's buffers.
        unsafe { alltoall_entry(Args { sbuf, sn, sdt, rbuf, rn, rdt }, comm) }
    }
}
