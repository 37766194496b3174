//! The collectives on intercommunicators (MPI-4.1 6.2.2) as schedules: one
//! implementation for the blocking (`coll::inter` runs them), non-blocking
//! and persistent forms, as MPICH's intercommunicator algorithms.
//!
//! Transfers between the groups go over the shadow intercommunicator
//! (ranks name the remote group), those within a group over its local
//! group ([`Sched::within`]), where the intracommunicator algorithms of
//! [`super`] run unchanged. Data always crosses from one group to the
//! other. Rooted collectives: the root passes `MPI_ROOT`, the rest of its
//! group `MPI_PROC_NULL` (nothing to do), the other group the root's rank
//! in the root's group. `MPI_IN_PLACE` is not defined on
//! intercommunicators: `MPI_ERR_BUFFER` where a buffer is used. Scan and
//! exscan are not defined on intercommunicators (`MPI_ERR_COMM`, as any
//! call that needs an intracommunicator).
//!
//! Algorithms: barrier: a barrier in each group, the leaders (local rank
//! 0) trade a message, a broadcast in each group. Bcast: the root to the
//! remote leader, which broadcasts in its group. Reduce: the other group
//! reduces to its leader in rank order, which sends to the root.
//! Allreduce and reduce-scatter: each group reduces to its leader, the
//! leaders trade results, each broadcasts (scatters) the other group's.
//! Gather, scatter (v): the root and each remote rank directly. Allgather
//! (v), alltoall (v, w): every process and every remote rank directly.

use std::ffi::{c_int, c_void};

use oxmpi::{Error, ErrorClass, UserDatatype};

use super::{
    arr, blk, blocks, check_buf, counts, nowhere, red_setup, reduce_to0, side, vblocks, wblks, Blk,
    Cnt, IN_PLACE,
};
use crate::p2p::count64;
use crate::sched::{Loc, Sched};
use crate::state::{state, CommRef};

/// `MPI_PROC_NULL`.
const PROC_NULL: c_int = -3;
/// `MPI_ROOT`.
const ROOT: c_int = -4;

/// The communicator of handle `comm` if it is an intercommunicator.
pub(crate) fn of(comm: usize) -> Result<Option<CommRef>, Error> {
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

fn role(s: &Sched, root: c_int) -> Result<Role, Error> {
    let m = remote(s);
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

/// The size of the remote group.
fn remote(s: &Sched) -> i32 {
    s.remote_size().unwrap_or(0)
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

/// `MPI_Barrier`.
pub(crate) fn barrier(c: CommRef) -> Result<Sched, Error> {
    let mut s = Sched::new(c);
    let b = UserDatatype::of::<u8>();
    s.within(true);
    super::barrier(&mut s);
    if s.rank_size().0 == 0 {
        s.within(false);
        s.send(0, nowhere(), 0, &b);
        s.recv(0, nowhere(), 0, &b);
        s.next();
        s.within(true);
    }
    let none = Blk {
        at: nowhere(),
        n: 0,
        dt: b,
    };
    super::bcast(&mut s, &none, 0);
    Ok(s)
}

/// `MPI_Bcast`.
pub(crate) fn bcast(
    c: CommRef,
    buf: *mut c_void,
    n: i64,
    dt: usize,
    root: c_int,
) -> Result<Sched, Error> {
    let mut s = Sched::new(c);
    match role(&s, root)? {
        Role::Idle => {}
        Role::Root => {
            let b = side(buf, n, dt)?;
            s.send(0, b.at, b.n, &b.dt);
        }
        Role::Leaf(r) => {
            let b = side(buf, n, dt)?;
            if s.rank_size().0 == 0 {
                s.recv(r, b.at, b.n, &b.dt);
                s.next();
            }
            s.within(true);
            super::bcast(&mut s, &b, 0);
        }
    }
    Ok(s)
}

/// `MPI_Reduce`: the root gets the reduction of the other group's data.
#[allow(clippy::too_many_arguments)] // MPI_Reduce's
pub(crate) fn reduce(
    c: CommRef,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
    root: c_int,
) -> Result<Sched, Error> {
    let mut s = Sched::new(c);
    match role(&s, root)? {
        Role::Idle => {}
        Role::Root => {
            no_in_place(rbuf.cast_const(), "receive buffer")?;
            let (n, t) = red_setup(&mut s, n, dt, op)?;
            check_buf(rbuf, n, &t)?;
            s.recv(0, Loc::user(rbuf), n, &t);
        }
        Role::Leaf(r) => {
            no_in_place(sbuf, "send buffer")?;
            let (n, t) = red_setup(&mut s, n, dt, op)?;
            check_buf(sbuf, n, &t)?;
            s.within(true);
            let acc = reduce_to0(&mut s, Loc::user(sbuf), n, &t)?;
            if s.rank_size().0 == 0 {
                s.within(false);
                s.send(r, acc, n, &t);
            }
        }
    }
    Ok(s)
}

/// `MPI_Allreduce`: each group gets the reduction of the other group's
/// data.
pub(crate) fn allreduce(
    c: CommRef,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
) -> Result<Sched, Error> {
    let mut s = Sched::new(c);
    no_in_place(sbuf, "send buffer")?;
    no_in_place(rbuf.cast_const(), "receive buffer")?;
    let (n, t) = red_setup(&mut s, n, dt, op)?;
    check_buf(sbuf, n, &t)?;
    check_buf(rbuf, n, &t)?;
    s.within(true);
    let acc = reduce_to0(&mut s, Loc::user(sbuf), n, &t)?;
    if s.rank_size().0 == 0 {
        s.within(false);
        s.send(0, acc, n, &t);
        s.recv(0, Loc::user(rbuf), n, &t);
        s.next();
        s.within(true);
    }
    super::bcast(&mut s, &blk(rbuf, 0, n, &t), 0);
    Ok(s)
}

/// Reduce-scatter: each group reduces its `sum(rc)` elements to its
/// leader, the leaders trade them, and each scatters the other group's
/// result in blocks of `rc` (this group's counts).
fn reduce_scatter_counts(
    mut s: Sched,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    rc: Vec<usize>,
    dt: usize,
    op: usize,
) -> Result<Sched, Error> {
    no_in_place(sbuf, "send buffer")?;
    no_in_place(rbuf.cast_const(), "receive buffer")?;
    let me = s.rank_size().0 as usize;
    let total: usize = rc.iter().sum();
    let (_, t) = red_setup(&mut s, total as i64, dt, op)?;
    check_buf(sbuf, total, &t)?;
    check_buf(rbuf, rc[me], &t)?;
    s.within(true);
    let acc = reduce_to0(&mut s, Loc::user(sbuf), total, &t)?;
    let mut sblks = Vec::new();
    if me == 0 {
        let other = s.tmp(&t, total)?;
        s.within(false);
        s.send(0, acc, total, &t);
        s.recv(0, other, total, &t);
        s.next();
        s.within(true);
        let mut off = 0;
        for &n in &rc {
            sblks.push(Blk {
                at: other.at(off as isize * t.extent()),
                n,
                dt: t.clone(),
            });
            off += n;
        }
    }
    super::scatterv(&mut s, &sblks, Some(blk(rbuf, 0, rc[me], &t)), 0);
    Ok(s)
}

/// `MPI_Reduce_scatter`: `rcounts` has an entry per rank of the local
/// group, whose total both groups give alike.
///
/// # Safety
/// `rcounts` valid for the local group's size.
pub(super) unsafe fn reduce_scatter<T: Cnt>(
    c: CommRef,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    rcounts: *const T,
    dt: usize,
    op: usize,
) -> Result<Sched, Error> {
    let s = Sched::new(c);
    let p = s.rank_size().1 as usize;
    // SAFETY: per the caller.
    let rc = counts(&unsafe { arr(rcounts, p, "recvcounts") }?)?;
    reduce_scatter_counts(s, sbuf, rbuf, rc, dt, op)
}

/// `MPI_Reduce_scatter_block`: `n` elements to each rank of the local
/// group.
pub(crate) fn reduce_scatter_block(
    c: CommRef,
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
) -> Result<Sched, Error> {
    let s = Sched::new(c);
    let p = s.rank_size().1 as usize;
    let rc = vec![count64(n)?; p];
    reduce_scatter_counts(s, sbuf, rbuf, rc, dt, op)
}

/// Gather: the root receives block `r` of `rblks` (made for the remote
/// group's size) from remote rank `r`; the other group sends `sblk`.
fn gather_with(
    mut s: Sched,
    root: c_int,
    sbuf: *const c_void,
    sblk: impl FnOnce() -> Result<Blk, Error>,
    rbuf: *mut c_void,
    rblks: impl FnOnce(usize) -> Result<Vec<Blk>, Error>,
) -> Result<Sched, Error> {
    match role(&s, root)? {
        Role::Idle => {}
        Role::Root => {
            no_in_place(rbuf.cast_const(), "receive buffer")?;
            for (r, b) in rblks(remote(&s) as usize)?.iter().enumerate() {
                s.recv(r as i32, b.at, b.n, &b.dt);
            }
        }
        Role::Leaf(r) => {
            no_in_place(sbuf, "send buffer")?;
            let b = sblk()?;
            s.send(r, b.at, b.n, &b.dt);
        }
    }
    Ok(s)
}

/// Scatter: the root sends block `r` of `sblks` (made for the remote
/// group's size) to remote rank `r`; the other group receives `rblk`.
fn scatter_with(
    mut s: Sched,
    root: c_int,
    sbuf: *const c_void,
    sblks: impl FnOnce(usize) -> Result<Vec<Blk>, Error>,
    rbuf: *mut c_void,
    rblk: impl FnOnce() -> Result<Blk, Error>,
) -> Result<Sched, Error> {
    match role(&s, root)? {
        Role::Idle => {}
        Role::Root => {
            no_in_place(sbuf, "send buffer")?;
            let m = remote(&s);
            let v = sblks(m as usize)?;
            let me = s.rank_size().0;
            for k in 0..m {
                let r = (me + k) % m;
                let b = &v[r as usize];
                s.send(r, b.at, b.n, &b.dt);
            }
        }
        Role::Leaf(r) => {
            no_in_place(rbuf.cast_const(), "receive buffer")?;
            let b = rblk()?;
            s.recv(r, b.at, b.n, &b.dt);
        }
    }
    Ok(s)
}

/// `MPI_Gather`.
#[allow(clippy::too_many_arguments)] // MPI_Gather's
pub(crate) fn gather(
    c: CommRef,
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
    root: c_int,
) -> Result<Sched, Error> {
    gather_with(
        Sched::new(c),
        root,
        sbuf,
        || side(sbuf, sn, sdt),
        rbuf,
        |m| blocks(rbuf, rn, rdt, m),
    )
}

/// `MPI_Gatherv`.
///
/// # Safety
/// The arrays valid for the remote group's size at the root.
#[allow(clippy::too_many_arguments)] // MPI_Gatherv's
pub(super) unsafe fn gatherv<T: Cnt, D: Cnt>(
    c: CommRef,
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rcounts: *const T,
    displs: *const D,
    rdt: usize,
    root: c_int,
) -> Result<Sched, Error> {
    gather_with(
        Sched::new(c),
        root,
        sbuf,
        || side(sbuf, sn, sdt),
        rbuf,
        // SAFETY: per the caller.
        |m| unsafe { vblocks(rbuf, rcounts, displs, rdt, m, ("recvcounts", "displs")) },
    )
}

/// `MPI_Scatter`.
#[allow(clippy::too_many_arguments)] // MPI_Scatter's
pub(crate) fn scatter(
    c: CommRef,
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
    root: c_int,
) -> Result<Sched, Error> {
    scatter_with(
        Sched::new(c),
        root,
        sbuf,
        |m| blocks(sbuf, sn, sdt, m),
        rbuf,
        || side(rbuf, rn, rdt),
    )
}

/// `MPI_Scatterv`.
///
/// # Safety
/// The arrays valid for the remote group's size at the root.
#[allow(clippy::too_many_arguments)] // MPI_Scatterv's
pub(super) unsafe fn scatterv<T: Cnt, D: Cnt>(
    c: CommRef,
    sbuf: *const c_void,
    scounts: *const T,
    displs: *const D,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
    root: c_int,
) -> Result<Sched, Error> {
    scatter_with(
        Sched::new(c),
        root,
        sbuf,
        // SAFETY: per the caller.
        |m| unsafe { vblocks(sbuf, scounts, displs, sdt, m, ("sendcounts", "displs")) },
        rbuf,
        || side(rbuf, rn, rdt),
    )
}

/// Block `r` of `rblks` from every remote rank `r`, block `r` of `sblks`
/// to it, all at once (each process starting with a different peer).
fn exchange(s: &mut Sched, sblks: &[Blk], rblks: &[Blk]) {
    let m = remote(s);
    for (r, b) in rblks.iter().enumerate() {
        s.recv(r as i32, b.at, b.n, &b.dt);
    }
    let me = s.rank_size().0;
    for k in 0..m {
        let r = (me + k) % m;
        let b = &sblks[r as usize];
        s.send(r, b.at, b.n, &b.dt);
    }
}

/// Allgather (v): `sblk` to every remote rank, `rblks` from them.
fn allgather_with(
    mut s: Sched,
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rblks: impl FnOnce(usize) -> Result<Vec<Blk>, Error>,
) -> Result<Sched, Error> {
    no_in_place(sbuf, "send buffer")?;
    let m = remote(&s) as usize;
    let b = side(sbuf, sn, sdt)?;
    let rblks = rblks(m)?;
    exchange(&mut s, &vec![b; m], &rblks);
    Ok(s)
}

/// `MPI_Allgather`: every process gets the other group's blocks.
pub(crate) fn allgather(
    c: CommRef,
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
) -> Result<Sched, Error> {
    no_in_place(rbuf.cast_const(), "receive buffer")?;
    allgather_with(Sched::new(c), sbuf, sn, sdt, |m| blocks(rbuf, rn, rdt, m))
}

/// `MPI_Allgatherv`.
///
/// # Safety
/// The arrays valid for the remote group's size.
#[allow(clippy::too_many_arguments)] // MPI_Allgatherv's
pub(super) unsafe fn allgatherv<T: Cnt, D: Cnt>(
    c: CommRef,
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rcounts: *const T,
    displs: *const D,
    rdt: usize,
) -> Result<Sched, Error> {
    no_in_place(rbuf.cast_const(), "receive buffer")?;
    allgather_with(Sched::new(c), sbuf, sn, sdt, |m| {
        // SAFETY: per the caller.
        unsafe { vblocks(rbuf, rcounts, displs, rdt, m, ("recvcounts", "displs")) }
    })
}

/// `MPI_Alltoall`: block `r` to and from remote rank `r`.
pub(crate) fn alltoall(
    c: CommRef,
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
) -> Result<Sched, Error> {
    let mut s = Sched::new(c);
    no_in_place(sbuf, "send buffer")?;
    no_in_place(rbuf.cast_const(), "receive buffer")?;
    let m = remote(&s) as usize;
    let (sblks, rblks) = (blocks(sbuf, sn, sdt, m)?, blocks(rbuf, rn, rdt, m)?);
    exchange(&mut s, &sblks, &rblks);
    Ok(s)
}

/// `MPI_Alltoallv`.
///
/// # Safety
/// The arrays valid for the remote group's size.
#[allow(clippy::too_many_arguments)] // MPI_Alltoallv's
pub(super) unsafe fn alltoallv<T: Cnt, D: Cnt>(
    c: CommRef,
    sbuf: *const c_void,
    scounts: *const T,
    sdispls: *const D,
    sdt: usize,
    rbuf: *mut c_void,
    rcounts: *const T,
    rdispls: *const D,
    rdt: usize,
) -> Result<Sched, Error> {
    let mut s = Sched::new(c);
    no_in_place(sbuf, "send buffer")?;
    no_in_place(rbuf.cast_const(), "receive buffer")?;
    let m = remote(&s) as usize;
    // SAFETY: per the caller.
    let (sblks, rblks) = unsafe {
        (
            vblocks(sbuf, scounts, sdispls, sdt, m, ("sendcounts", "sdispls"))?,
            vblocks(rbuf, rcounts, rdispls, rdt, m, ("recvcounts", "rdispls"))?,
        )
    };
    exchange(&mut s, &sblks, &rblks);
    Ok(s)
}

/// `MPI_Alltoallw`.
///
/// # Safety
/// The arrays valid for the remote group's size.
#[allow(clippy::too_many_arguments)] // MPI_Alltoallw's
pub(super) unsafe fn alltoallw<T: Cnt, D: Cnt>(
    c: CommRef,
    sbuf: *const c_void,
    scounts: *const T,
    sdispls: *const D,
    stypes: *const usize,
    rbuf: *mut c_void,
    rcounts: *const T,
    rdispls: *const D,
    rtypes: *const usize,
) -> Result<Sched, Error> {
    let mut s = Sched::new(c);
    no_in_place(sbuf, "send buffer")?;
    no_in_place(rbuf.cast_const(), "receive buffer")?;
    let m = remote(&s) as usize;
    // SAFETY: per the caller.
    let (sblks, rblks) = unsafe {
        let sc = counts(&arr(scounts, m, "sendcounts")?)?;
        let sd = arr(sdispls, m, "sdispls")?;
        let rc = counts(&arr(rcounts, m, "recvcounts")?)?;
        let rd = arr(rdispls, m, "rdispls")?;
        (
            wblks(sbuf, &sc, &sd, stypes, "sendtypes")?,
            wblks(rbuf, &rc, &rd, rtypes, "recvtypes")?,
        )
    };
    exchange(&mut s, &sblks, &rblks);
    Ok(s)
}
