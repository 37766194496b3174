//! The blocking collectives on intercommunicators (MPI-4.1 section 6.2.2):
//! every entry point of `coll` hands an intercommunicator here first.
//!
//! Traffic between the groups goes over the intercommunicator's shadow
//! (`CommObj::coll`, ranks name the remote group); traffic within one
//! group over the shadow's local group ([`oxmpi::Communicator::local_group_comm`]),
//! wrapped as a `CommObj` so that the intracommunicator algorithms of
//! `coll` run on it unchanged. Rooted collectives: the root passes
//! `MPI_ROOT`, the rest of its group `MPI_PROC_NULL`, the other group the
//! root's rank in the root's group. Data always flows from one group to
//! the other (Allreduce: each group gets the reduction of the other
//! group's data). `MPI_IN_PLACE` is not defined on intercommunicators:
//! `MPI_ERR_BUFFER`.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use oxmpi::{Error, ErrorClass, RawBuffer, SendMode};

use super::{block, dt_opt, image, wait_all, Args, IN_PLACE, TAG};
use crate::ops::kernel;
use crate::p2p::count64;
use crate::state::{state, CommObj, CommRef};

/// `MPI_PROC_NULL`.
const PROC_NULL: c_int = -3;
/// `MPI_ROOT`.
const ROOT: c_int = -4;

/// The communicator of handle `comm` if it is an intercommunicator.
pub(super) fn of(comm: usize) -> Result<Option<CommRef>, Error> {
    let c = state()?.comm(comm)?;
    Ok(c.comm.is_inter().then_some(c))
}

/// This process's part in a rooted collective.
enum Role {
    /// The root (`MPI_ROOT`).
    Root,
    /// Another member of the root's group (`MPI_PROC_NULL`).
    Idle,
    /// A member of the other group; the root's rank in its group.
    Leaf(c_int),
}

fn role(c: &CommObj, root: c_int) -> Result<Role, Error> {
    let m = c.coll.remote_size().unwrap_or(0);
    match root {
        ROOT => Ok(Role::Root),
        PROC_NULL => Ok(Role::Idle),
        r if (0..m).contains(&r) => Ok(Role::Leaf(r)),
        r => Err(Error::new(
            ErrorClass::Root,
            format!(
                "root {r} on an intercommunicator: MPI_ROOT, MPI_PROC_NULL or a rank of the \
                 remote group of {m}"
            ),
        )),
    }
}

/// The local group of intercommunicator `c`, as an intracommunicator the
/// algorithms of `coll` run on.
fn local(c: &CommObj) -> Result<CommObj, Error> {
    let g = || {
        c.coll
            .local_group_comm()
            .ok_or_else(|| Error::new(ErrorClass::Intern, "not an intercommunicator"))
    };
    Ok(CommObj {
        comm: g()?,
        coll: g()?,
        errh: Mutex::new(0),
        name: Mutex::new(String::new()),
        topo: None,
        // Only the blocking algorithms of `coll` run on it, one at a time.
        coll_seq: Default::default(),
    })
}

fn no_in_place(p: *const c_void, what: &str) -> Result<(), Error> {
    if p == IN_PLACE {
        return Err(Error::new(
            ErrorClass::Buffer,
            format!("MPI_IN_PLACE as the {what} of a collective on an intercommunicator"),
        ));
    }
    Ok(())
}

/// `MPI_Bcast`: the root sends to the remote leader, which broadcasts in
/// its group.
///
/// # Safety
/// As for `MPI_Bcast`.
pub(super) unsafe fn bcast(
    c: &CommObj,
    buf: *mut c_void,
    n: i64,
    dt: usize,
    root: c_int,
) -> Result<(), Error> {
    let role = role(c, root)?;
    if matches!(role, Role::Idle) {
        return Ok(());
    }
    let n = count64(n)?;
    let t = state()?.datatype(dt)?;
    // SAFETY: the caller's buffer holds `n` elements of `dt`.
    let b = unsafe { RawBuffer::new(buf.cast_const().cast(), n, &t) }?;
    match role {
        Role::Root => wait_all(vec![b.send_to(
            &c.coll.process_at_rank(0),
            TAG,
            SendMode::Standard,
        )?]),
        Role::Idle => Ok(()),
        Role::Leaf(r) => {
            if c.coll.rank() == 0 {
                wait_all(vec![b.receive_from(&c.coll.process_at_rank(r), TAG)?])?;
            }
            // SAFETY: forwarded.
            unsafe { super::bcast(&local(c)?, buf, n, dt, 0) }
        }
    }
}

/// Reduces the group's `sbuf`s to its leader in a buffer of its own (the
/// memory image of `n` elements of `dt`, and the origin's place in it).
///
/// # Safety
/// As for `MPI_Reduce`.
unsafe fn reduce_to_leader(
    c: &CommObj,
    sbuf: *const c_void,
    n: usize,
    dt: usize,
    op: usize,
) -> Result<(Vec<u8>, isize), Error> {
    no_in_place(sbuf, "send buffer")?;
    let t = state()?.datatype(dt)?;
    let (len, origin) = image(&t, n)?;
    let mut v = vec![0u8; len];
    let p = v.as_mut_ptr().wrapping_offset(origin).cast::<c_void>();
    // SAFETY: the caller's send buffer; `v` holds the leader's result.
    unsafe { super::reduce(&local(c)?, sbuf, p, n, dt, op, 0) }?;
    Ok((v, origin))
}

/// `MPI_Reduce`: the other group reduces to its leader, which sends the
/// result to the root.
///
/// # Safety
/// As for `MPI_Reduce`.
pub(super) unsafe fn reduce(
    c: &CommObj,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
    root: c_int,
) -> Result<(), Error> {
    let role = role(c, root)?;
    let n = count64(n)?;
    kernel(dt, op)?;
    match role {
        Role::Idle => Ok(()),
        Role::Root => {
            no_in_place(rbuf.cast_const(), "receive buffer")?;
            let t = state()?.datatype(dt)?;
            // SAFETY: the root's receive buffer holds `n` elements of `dt`.
            let b = unsafe { RawBuffer::new(rbuf.cast_const().cast(), n, &t) }?;
            wait_all(vec![b.receive_from(&c.coll.process_at_rank(0), TAG)?])
        }
        Role::Leaf(r) => {
            // SAFETY: forwarded.
            let (mut v, origin) = unsafe { reduce_to_leader(c, sbuf, n, dt, op) }?;
            if c.coll.rank() != 0 {
                return Ok(());
            }
            let t = state()?.datatype(dt)?;
            let b = super::image_buf(&mut v, origin, n, &t)?;
            wait_all(vec![b.send_to(
                &c.coll.process_at_rank(r),
                TAG,
                SendMode::Standard,
            )?])
        }
    }
}

/// `MPI_Allreduce`: each group reduces to its leader, the leaders trade
/// their results, and each broadcasts the other group's in its group.
///
/// # Safety
/// As for `MPI_Allreduce`.
pub(super) unsafe fn allreduce(
    c: &CommObj,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
) -> Result<(), Error> {
    let n = count64(n)?;
    kernel(dt, op)?;
    no_in_place(rbuf.cast_const(), "receive buffer")?;
    // SAFETY: forwarded.
    let (mut v, origin) = unsafe { reduce_to_leader(c, sbuf, n, dt, op) }?;
    if c.coll.rank() == 0 {
        let t = state()?.datatype(dt)?;
        // SAFETY: the caller's receive buffer holds `n` elements of `dt`.
        let r = unsafe { RawBuffer::new(rbuf.cast_const().cast(), n, &t) }?;
        let s = super::image_buf(&mut v, origin, n, &t)?;
        let leader = c.coll.process_at_rank(0);
        let reqs = vec![
            r.receive_from(&leader, TAG)?,
            s.send_to(&leader, TAG, SendMode::Standard)?,
        ];
        wait_all(reqs)?;
    }
    drop(v);
    // SAFETY: forwarded.
    unsafe { super::bcast(&local(c)?, rbuf, n, dt, 0) }
}

/// `MPI_Gather`: the root receives block `r` from remote rank `r`.
///
/// # Safety
/// As for `MPI_Gather`.
pub(super) unsafe fn gather(c: &CommObj, a: Args, root: c_int) -> Result<(), Error> {
    match role(c, root)? {
        Role::Idle => Ok(()),
        Role::Root => {
            no_in_place(a.rbuf.cast_const(), "receive buffer")?;
            let rt = dt_opt(a.rdt, true)?.expect("used");
            let rn = count64(a.rn)?;
            let mut reqs = Vec::new();
            for r in 0..c.coll.remote_size().unwrap_or(0) {
                // SAFETY: block `r` of the root's receive buffer.
                let b = unsafe { block(a.rbuf, r as usize, rn, &rt) }?;
                reqs.push(b.receive_from(&c.coll.process_at_rank(r), TAG)?);
            }
            wait_all(reqs)
        }
        Role::Leaf(r) => {
            no_in_place(a.sbuf, "send buffer")?;
            let st = dt_opt(a.sdt, true)?.expect("used");
            // SAFETY: the caller's send buffer.
            let b = unsafe { RawBuffer::new(a.sbuf.cast(), count64(a.sn)?, &st) }?;
            wait_all(vec![b.send_to(
                &c.coll.process_at_rank(r),
                TAG,
                SendMode::Standard,
            )?])
        }
    }
}

/// `MPI_Scatter`: the root sends block `r` to remote rank `r`.
///
/// # Safety
/// As for `MPI_Scatter`.
pub(super) unsafe fn scatter(c: &CommObj, a: Args, root: c_int) -> Result<(), Error> {
    match role(c, root)? {
        Role::Idle => Ok(()),
        Role::Root => {
            no_in_place(a.sbuf, "send buffer")?;
            let st = dt_opt(a.sdt, true)?.expect("used");
            let sn = count64(a.sn)?;
            let mut reqs = Vec::new();
            for r in 0..c.coll.remote_size().unwrap_or(0) {
                // SAFETY: block `r` of the root's send buffer.
                let b = unsafe { block(a.sbuf, r as usize, sn, &st) }?;
                reqs.push(b.send_to(&c.coll.process_at_rank(r), TAG, SendMode::Standard)?);
            }
            wait_all(reqs)
        }
        Role::Leaf(r) => {
            no_in_place(a.rbuf.cast_const(), "receive buffer")?;
            let rt = dt_opt(a.rdt, true)?.expect("used");
            // SAFETY: the caller's receive buffer.
            let b = unsafe { RawBuffer::new(a.rbuf.cast_const().cast(), count64(a.rn)?, &rt) }?;
            wait_all(vec![b.receive_from(&c.coll.process_at_rank(r), TAG)?])
        }
    }
}

/// Block `r` of `rbuf` from every remote rank `r`, and block `r` of `sbuf`
/// (`same`: all of `sbuf`) to every remote rank `r`, all at once.
///
/// # Safety
/// As for `MPI_Alltoall`.
unsafe fn exchange(c: &CommObj, a: Args, same: bool) -> Result<(), Error> {
    no_in_place(a.sbuf, "send buffer")?;
    let st = state()?.datatype(a.sdt)?;
    let rt = state()?.datatype(a.rdt)?;
    let (sn, rn) = (count64(a.sn)?, count64(a.rn)?);
    let m = c.coll.remote_size().unwrap_or(0);
    let mut reqs = Vec::new();
    for r in 0..m {
        // SAFETY: block `r` of the receive buffer.
        let b = unsafe { block(a.rbuf, r as usize, rn, &rt) }?;
        reqs.push(b.receive_from(&c.coll.process_at_rank(r), TAG + 2)?);
    }
    let me = c.coll.rank();
    for k in 0..m {
        let r = (me + k) % m;
        let i = if same { 0 } else { r as usize };
        // SAFETY: block `i` of the send buffer.
        let b = unsafe { block(a.sbuf, i, sn, &st) }?;
        reqs.push(b.send_to(&c.coll.process_at_rank(r), TAG + 2, SendMode::Standard)?);
    }
    wait_all(reqs)
}

/// `MPI_Allgather`: every process receives the other group's blocks in
/// rank order.
///
/// # Safety
/// As for `MPI_Allgather`.
pub(super) unsafe fn allgather(c: &CommObj, a: Args) -> Result<(), Error> {
    // SAFETY: forwarded.
    unsafe { exchange(c, a, true) }
}

/// `MPI_Alltoall`: block `r` to and from remote rank `r`.
///
/// # Safety
/// As for `MPI_Alltoall`.
pub(super) unsafe fn alltoall(c: &CommObj, a: Args) -> Result<(), Error> {
    // SAFETY: forwarded.
    unsafe { exchange(c, a, false) }
}
