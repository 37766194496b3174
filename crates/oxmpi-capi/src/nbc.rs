//! Collectives as schedules ([`crate::sched`]): every non-blocking
//! collective of MPI-4.1 on intracommunicators (`MPI_Ibarrier` ...
//! `MPI_Iexscan`), the persistent ones (`MPI_Barrier_init` ...), and the
//! blocking v, w, reduce-scatter and scan forms (a schedule started and
//! waited for), each with its `_c` form.
//!
//! Algorithms: dissemination barrier; broadcast, reduce, allreduce,
//! allgather, alltoall and reduce-scatter chosen by message size and rank
//! count (`nbc::tuned`, the `coll_tuned_*` parameters); linear gather and
//! scatter (v); ring allgatherv; pairwise-exchange alltoallv and w; a
//! chain for scan and exscan. The blocking bcast ... alltoall
//! (`crate::coll`) run these same schedules.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use oxmpi::{Error, ErrorClass, UserDatatype};

use crate::coll::Reduction;
use crate::entry;
use crate::env::put;
use crate::p2p::{count64, store};
use crate::sched::{self, CollReq, Loc, Sched};
use crate::state::{null_arg, state, ReqObj};

pub(crate) mod inter;
mod tuned;

/// `MPI_IN_PLACE`.
pub(crate) const IN_PLACE: *const c_void = 1 as *const c_void;

/// A count or displacement argument (`int`, `MPI_Count`, `MPI_Aint`).
pub(crate) trait Cnt: Copy {
    /// The value, widened.
    fn i(self) -> i64;
}
impl Cnt for c_int {
    fn i(self) -> i64 {
        self.into()
    }
}
impl Cnt for i64 {
    fn i(self) -> i64 {
        self
    }
}
impl Cnt for isize {
    fn i(self) -> i64 {
        self as i64
    }
}

/// The `n` entries of the program's array `p`.
///
/// # Safety
/// `p` null or valid for `n` entries.
pub(crate) unsafe fn arr<T: Cnt>(p: *const T, n: usize, what: &str) -> Result<Vec<i64>, Error> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: per the caller.
    Ok(unsafe { std::slice::from_raw_parts(p, n) }
        .iter()
        .map(|v| v.i())
        .collect())
}

/// Checked counts.
pub(crate) fn counts(v: &[i64]) -> Result<Vec<usize>, Error> {
    v.iter().map(|&n| count64(n)).collect()
}

fn dtype(h: usize) -> Result<UserDatatype, Error> {
    state()?.datatype(h)
}

/// `MPI_ERR_BUFFER` for a null buffer that must hold data. `MPI_BOTTOM`
/// (null) with a datatype of absolute addresses (a lower bound other than
/// zero, as `MPI_Get_address` gives) is a buffer, as in point-to-point.
fn check_buf(p: *const c_void, n: usize, dt: &UserDatatype) -> Result<(), Error> {
    if p.is_null() && n > 0 && dt.size() > 0 && dt.lower_bound() == 0 {
        return Err(Error::new(ErrorClass::Buffer, "a null buffer for data"));
    }
    Ok(())
}

fn check_root(p: i32, root: c_int) -> Result<(), Error> {
    if root < 0 || root >= p {
        return Err(Error::new(
            ErrorClass::Root,
            format!("root {root} of a communicator of {p}"),
        ));
    }
    Ok(())
}

/// An empty buffer's address (zero-byte messages).
fn nowhere() -> Loc {
    Loc::User(std::ptr::NonNull::<u64>::dangling().as_ptr() as usize)
}

/// A block of data: where, how many, of which type.
#[derive(Clone)]
pub(crate) struct Blk {
    /// Where.
    pub(crate) at: Loc,
    /// How many elements.
    pub(crate) n: usize,
    /// Of which type.
    pub(crate) dt: UserDatatype,
}

/// Block `i` of `n` elements of `dt` from `p`.
fn blk(p: *const c_void, i: usize, n: usize, dt: &UserDatatype) -> Blk {
    Blk {
        at: Loc::user(p).at((i * n) as isize * dt.extent()),
        n,
        dt: dt.clone(),
    }
}

/// Blocks of `counts` elements of `dt` at `displs` (in elements) from `p`.
fn vblks(p: *const c_void, counts: &[usize], displs: &[i64], dt: &UserDatatype) -> Vec<Blk> {
    counts
        .iter()
        .zip(displs)
        .map(|(&n, &d)| Blk {
            at: Loc::user(p).at(d as isize * dt.extent()),
            n,
            dt: dt.clone(),
        })
        .collect()
}

/// The `p` blocks of `n` elements of handle `dt` each, back to back from
/// `buf` (the root's buffer of gather and scatter, alltoall's buffers),
/// the count, type and buffer checked.
pub(crate) fn blocks(buf: *const c_void, n: i64, dt: usize, p: usize) -> Result<Vec<Blk>, Error> {
    let (n, t) = (count64(n)?, dtype(dt)?);
    check_buf(buf, n, &t)?;
    Ok((0..p).map(|r| blk(buf, r, n, &t)).collect())
}

/// The `p` blocks of a v-form's buffer: `cnts[r]` elements of handle `dt`
/// at `displs[r]` extents from `buf`, the type, arrays (named `names`) and
/// buffer checked.
///
/// # Safety
/// `cnts` and `displs` valid for `p` entries (or null: an error).
pub(crate) unsafe fn vblocks<T: Cnt, D: Cnt>(
    buf: *const c_void,
    cnts: *const T,
    displs: *const D,
    dt: usize,
    p: usize,
    names: (&str, &str),
) -> Result<Vec<Blk>, Error> {
    let t = dtype(dt)?;
    // SAFETY: per the caller.
    let (c, d) = unsafe { (counts(&arr(cnts, p, names.0)?)?, arr(displs, p, names.1)?) };
    check_buf(buf, c.iter().sum(), &t)?;
    Ok(vblks(buf, &c, &d, &t))
}

fn new_sched(comm: usize) -> Result<Sched, Error> {
    Ok(Sched::new(state()?.intra_comm(comm)?))
}

// ---- algorithms ----

fn barrier(s: &mut Sched) {
    let (me, p) = s.rank_size();
    let b = UserDatatype::of::<u8>();
    let mut k = 1;
    while k < p {
        s.send((me + k) % p, nowhere(), 0, &b);
        s.recv((me - k + p) % p, nowhere(), 0, &b);
        s.next();
        k <<= 1;
    }
}

/// Binomial-tree broadcast of `b` from `root`.
fn bcast(s: &mut Sched, b: &Blk, root: i32) {
    let (me, p) = s.rank_size();
    let rel = (me - root + p) % p;
    let mut mask = 1;
    while mask < p {
        if rel & mask != 0 {
            s.recv((rel - mask + root) % p, b.at, b.n, &b.dt);
            s.next();
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < p {
            s.send((rel + mask + root) % p, b.at, b.n, &b.dt);
        }
        mask >>= 1;
    }
    s.next();
}

/// Binomial reduction of `n` elements of `dt` at `src` to rank 0, in rank
/// order; where the result is on rank 0.
pub(crate) fn reduce_to0(
    s: &mut Sched,
    src: Loc,
    n: usize,
    dt: &UserDatatype,
) -> Result<Loc, Error> {
    tuned::reduce_tree(s, src, n, dt, 0)
}

fn same(a: Loc, b: Loc) -> bool {
    matches!((a, b), (Loc::User(x), Loc::User(y)) if x == y)
}

/// The reduction schedule's set-up: the reduction, the datatype, the count.
fn red_setup(s: &mut Sched, n: i64, dt: usize, op: usize) -> Result<(usize, UserDatatype), Error> {
    let n = count64(n)?;
    let t = dtype(dt)?;
    s.set_reduction(Reduction::new(dt, op)?);
    Ok((n, t))
}

// ---- schedules of each collective ----

fn b_barrier(comm: usize) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::barrier(c);
    }
    let mut s = new_sched(comm)?;
    barrier(&mut s);
    Ok(s)
}

pub(crate) fn b_bcast(
    buf: *mut c_void,
    n: i64,
    dt: usize,
    root: c_int,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::bcast(c, buf, n, dt, root);
    }
    let mut s = new_sched(comm)?;
    let p = s.rank_size().1;
    check_root(p, root)?;
    let (n, t) = (count64(n)?, dtype(dt)?);
    check_buf(buf, n, &t)?;
    let b = blk(buf, 0, n, &t);
    let sel = tuned::tuned()?;
    if p > 2 && n >= p as usize && tuned::large(&sel.bcast, n * t.size(), "scatter_allgather") {
        tuned::bcast_scatter_allgather(&mut s, &b, root);
    } else {
        bcast(&mut s, &b, root);
    }
    Ok(s)
}

#[allow(clippy::too_many_arguments)] // MPI_Reduce's
pub(crate) fn b_reduce(
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
    root: c_int,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::reduce(c, sbuf, rbuf, n, dt, op, root);
    }
    let mut s = new_sched(comm)?;
    let (me, p) = s.rank_size();
    check_root(p, root)?;
    let (n, t) = red_setup(&mut s, n, dt, op)?;
    let commutative = s.commutative();
    let inplace = me == root && sbuf == IN_PLACE;
    let src = if inplace { rbuf.cast_const() } else { sbuf };
    check_buf(src, n, &t)?;
    if me == root {
        check_buf(rbuf, n, &t)?;
    }
    let (src, dst) = (Loc::user(src), Loc::user(rbuf));
    let sel = tuned::tuned()?;
    let big = tuned::large(&sel.reduce, n * t.size(), "reduce_scatter_gather");
    if commutative && big && p > 1 && n >= p as usize {
        tuned::reduce_rs_gather(&mut s, src, dst, n, &t, root)?;
        return Ok(s);
    }
    // Non-commutative operations: to rank 0 in rank order, then the root.
    let tree_root = if commutative { root } else { 0 };
    let acc = tuned::reduce_tree(&mut s, src, n, &t, tree_root)?;
    if me == tree_root {
        if root == tree_root {
            if !same(acc, dst) {
                s.copy(acc, n, &t, dst, n, &t);
            }
        } else {
            s.send(root, acc, n, &t);
        }
    } else if me == root {
        s.recv(tree_root, dst, n, &t);
    }
    Ok(s)
}

pub(crate) fn b_allreduce(
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::allreduce(c, sbuf, rbuf, n, dt, op);
    }
    let mut s = new_sched(comm)?;
    let p = s.rank_size().1;
    let (n, t) = red_setup(&mut s, n, dt, op)?;
    let commutative = s.commutative();
    let src = if sbuf == IN_PLACE {
        rbuf.cast_const()
    } else {
        sbuf
    };
    check_buf(src, n, &t)?;
    check_buf(rbuf, n, &t)?;
    let (src, dst) = (Loc::user(src), Loc::user(rbuf));
    let sel = tuned::tuned()?;
    if commutative && p > 2 && n >= p as usize && tuned::large(&sel.allreduce, n * t.size(), "ring")
    {
        tuned::allreduce_ring(&mut s, src, dst, n, &t)?;
    } else {
        tuned::allreduce_rd(&mut s, src, dst, n, &t, commutative)?;
    }
    Ok(s)
}

/// Reduce-scatter into blocks of `rc` ([`tuned::reduce_scatter`]).
fn b_reduce_scatter_counts(
    sbuf: *const c_void,
    rbuf: *mut c_void,
    rc: Vec<usize>,
    dt: usize,
    op: usize,
    mut s: Sched,
) -> Result<Sched, Error> {
    let me = s.rank_size().0;
    let total: usize = rc.iter().sum();
    let (_, t) = red_setup(&mut s, total as i64, dt, op)?;
    let commutative = s.commutative();
    let src = if sbuf == IN_PLACE {
        rbuf.cast_const()
    } else {
        sbuf
    };
    check_buf(src, total, &t)?;
    check_buf(rbuf, rc[me as usize], &t)?;
    let sel = tuned::tuned()?;
    let p = s.rank_size().1;
    let ring = p > 2 && tuned::large(&sel.reduce_scatter, total * t.size(), "ring");
    let (src, dst) = (Loc::user(src), Loc::user(rbuf));
    tuned::reduce_scatter(&mut s, src, dst, &rc, &t, commutative, ring)?;
    Ok(s)
}

/// # Safety
/// `rcounts` valid for the communicator's size.
unsafe fn b_reduce_scatter<T: Cnt>(
    sbuf: *const c_void,
    rbuf: *mut c_void,
    rcounts: *const T,
    dt: usize,
    op: usize,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        // SAFETY: per the caller.
        return unsafe { inter::reduce_scatter(c, sbuf, rbuf, rcounts, dt, op) };
    }
    let s = new_sched(comm)?;
    let p = s.rank_size().1 as usize;
    // SAFETY: per the caller.
    let rc = counts(&unsafe { arr(rcounts, p, "recvcounts") }?)?;
    b_reduce_scatter_counts(sbuf, rbuf, rc, dt, op, s)
}

pub(crate) fn b_reduce_scatter_block(
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::reduce_scatter_block(c, sbuf, rbuf, n, dt, op);
    }
    let s = new_sched(comm)?;
    let p = s.rank_size().1 as usize;
    let rc = vec![count64(n)?; p];
    b_reduce_scatter_counts(sbuf, rbuf, rc, dt, op, s)
}

/// Scan (`excl`: exscan) along the chain of ranks.
fn b_scan(
    sbuf: *const c_void,
    rbuf: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
    comm: usize,
    excl: bool,
) -> Result<Sched, Error> {
    let mut s = new_sched(comm)?;
    let (me, p) = s.rank_size();
    let (n, t) = red_setup(&mut s, n, dt, op)?;
    let inplace = sbuf == IN_PLACE;
    let src = Loc::user(if inplace { rbuf.cast_const() } else { sbuf });
    check_buf(if inplace { rbuf.cast_const() } else { sbuf }, n, &t)?;
    check_buf(rbuf, n, &t)?;
    let dst = Loc::user(rbuf);
    let last = me == p - 1;
    if me == 0 {
        if !excl && !inplace {
            s.copy(src, n, &t, dst, n, &t);
        }
        if !last {
            s.send(1, src, n, &t);
        }
        return Ok(s);
    }
    if !excl {
        let part = s.tmp(&t, n)?;
        s.recv(me - 1, part, n, &t);
        if !inplace {
            s.copy(src, n, &t, dst, n, &t);
        }
        s.reduce(part, dst, n, &t)?;
        s.next();
        if !last {
            s.send(me + 1, dst, n, &t);
        }
        return Ok(s);
    }
    if last {
        s.recv(me - 1, dst, n, &t);
        return Ok(s);
    }
    let mine = s.tmp(&t, n)?;
    s.copy(src, n, &t, mine, n, &t);
    if inplace {
        s.next();
    }
    s.recv(me - 1, dst, n, &t);
    s.reduce(dst, mine, n, &t)?;
    s.next();
    s.send(me + 1, mine, n, &t);
    Ok(s)
}

/// Linear gather into `rblks` (significant at the root) of `sblk`
/// (`None`: in place at the root).
fn gatherv(s: &mut Sched, sblk: Option<Blk>, rblks: &[Blk], root: i32) {
    let (me, p) = s.rank_size();
    if me != root {
        if let Some(b) = sblk {
            s.send(root, b.at, b.n, &b.dt);
        }
        return;
    }
    for r in (0..p).filter(|&r| r != me) {
        let b = &rblks[r as usize];
        s.recv(r, b.at, b.n, &b.dt);
    }
    if let Some(b) = sblk {
        let d = &rblks[me as usize];
        s.copy(b.at, b.n, &b.dt, d.at, d.n, &d.dt);
    }
}

/// Linear scatter of `sblks` (significant at the root) into `rblk`
/// (`None`: in place at the root).
fn scatterv(s: &mut Sched, sblks: &[Blk], rblk: Option<Blk>, root: i32) {
    let (me, p) = s.rank_size();
    if me != root {
        if let Some(b) = rblk {
            s.recv(root, b.at, b.n, &b.dt);
        }
        return;
    }
    for r in (0..p).filter(|&r| r != me) {
        let b = &sblks[r as usize];
        s.send(r, b.at, b.n, &b.dt);
    }
    if let Some(d) = rblk {
        let b = &sblks[me as usize];
        s.copy(b.at, b.n, &b.dt, d.at, d.n, &d.dt);
    }
}

/// Ring allgather of `sblk` (`None`: in place) into `rblks`.
fn allgatherv(s: &mut Sched, sblk: Option<Blk>, rblks: &[Blk]) {
    let (me, p) = s.rank_size();
    let (right, left) = ((me + 1) % p, (me - 1 + p) % p);
    let mine = &rblks[me as usize];
    let first = match sblk {
        Some(b) => {
            s.copy(b.at, b.n, &b.dt, mine.at, mine.n, &mine.dt);
            b
        }
        None => mine.clone(),
    };
    if p == 1 {
        return;
    }
    s.send(right, first.at, first.n, &first.dt);
    for k in 0..p - 1 {
        if k > 0 {
            let b = &rblks[((me - k + p) % p) as usize];
            s.send(right, b.at, b.n, &b.dt);
        }
        let b = &rblks[((me - k - 1 + 2 * p) % p) as usize];
        s.recv(left, b.at, b.n, &b.dt);
        s.next();
    }
}

/// Pairwise-exchange alltoall of `sblks` (`None`: in place) into `rblks`.
/// Alltoall(v, w): every block at once, or (`pairwise`) one peer per
/// round, the `k`-th round sending to `me + k` and receiving from `me - k`.
fn alltoallw(
    s: &mut Sched,
    sblks: Option<Vec<Blk>>,
    rblks: &[Blk],
    pairwise: bool,
) -> Result<(), Error> {
    let (me, p) = s.rank_size();
    let sblks = match sblks {
        Some(v) => {
            let (b, d) = (&v[me as usize], &rblks[me as usize]);
            s.copy(b.at, b.n, &b.dt, d.at, d.n, &d.dt);
            v
        }
        None => {
            let mut v = Vec::with_capacity(p as usize);
            for (r, b) in rblks.iter().enumerate() {
                if r as i32 == me {
                    v.push(b.clone());
                    continue;
                }
                let t = s.tmp(&b.dt, b.n)?;
                s.copy(b.at, b.n, &b.dt, t, b.n, &b.dt);
                v.push(Blk { at: t, ..b.clone() });
            }
            s.next();
            v
        }
    };
    for k in 1..p {
        let (to, from) = ((me + k) % p, (me - k + p) % p);
        let b = &sblks[to as usize];
        s.send(to, b.at, b.n, &b.dt);
        let b = &rblks[from as usize];
        s.recv(from, b.at, b.n, &b.dt);
        if pairwise {
            s.next();
        }
    }
    Ok(())
}

// ---- argument decoding ----

/// The send side of a rooted collective's non-root part (or any rank's).
pub(crate) fn side(p: *const c_void, n: i64, dt: usize) -> Result<Blk, Error> {
    let (n, t) = (count64(n)?, dtype(dt)?);
    check_buf(p, n, &t)?;
    Ok(blk(p, 0, n, &t))
}

#[allow(clippy::too_many_arguments)] // MPI_Gather's
fn b_gather(
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
    root: c_int,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::gather(c, sbuf, sn, sdt, rbuf, rn, rdt, root);
    }
    let mut s = new_sched(comm)?;
    let (me, p) = s.rank_size();
    check_root(p, root)?;
    let is_root = me == root;
    let sblk = if is_root && sbuf == IN_PLACE {
        None
    } else {
        Some(side(sbuf, sn, sdt)?)
    };
    let rblks = if is_root {
        blocks(rbuf, rn, rdt, p as usize)?
    } else {
        Vec::new()
    };
    gatherv(&mut s, sblk, &rblks, root);
    Ok(s)
}

/// # Safety
/// The arrays valid for the communicator's size at the root.
#[allow(clippy::too_many_arguments)] // MPI_Gatherv's
unsafe fn b_gatherv<T: Cnt, D: Cnt>(
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rcounts: *const T,
    displs: *const D,
    rdt: usize,
    root: c_int,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        // SAFETY: per the caller.
        return unsafe { inter::gatherv(c, sbuf, sn, sdt, rbuf, rcounts, displs, rdt, root) };
    }
    let mut s = new_sched(comm)?;
    let (me, p) = s.rank_size();
    check_root(p, root)?;
    let is_root = me == root;
    let sblk = if is_root && sbuf == IN_PLACE {
        None
    } else {
        Some(side(sbuf, sn, sdt)?)
    };
    let rblks = if is_root {
        // SAFETY: per the caller.
        unsafe {
            vblocks(
                rbuf,
                rcounts,
                displs,
                rdt,
                p as usize,
                ("recvcounts", "displs"),
            )
        }?
    } else {
        Vec::new()
    };
    gatherv(&mut s, sblk, &rblks, root);
    Ok(s)
}

#[allow(clippy::too_many_arguments)] // MPI_Scatter's
fn b_scatter(
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
    root: c_int,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::scatter(c, sbuf, sn, sdt, rbuf, rn, rdt, root);
    }
    let mut s = new_sched(comm)?;
    let (me, p) = s.rank_size();
    check_root(p, root)?;
    let is_root = me == root;
    let rblk = if is_root && rbuf.cast_const() == IN_PLACE {
        None
    } else {
        Some(side(rbuf, rn, rdt)?)
    };
    let sblks = if is_root {
        blocks(sbuf, sn, sdt, p as usize)?
    } else {
        Vec::new()
    };
    scatterv(&mut s, &sblks, rblk, root);
    Ok(s)
}

/// # Safety
/// The arrays valid for the communicator's size at the root.
#[allow(clippy::too_many_arguments)] // MPI_Scatterv's
unsafe fn b_scatterv<T: Cnt, D: Cnt>(
    sbuf: *const c_void,
    scounts: *const T,
    displs: *const D,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
    root: c_int,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        // SAFETY: per the caller.
        return unsafe { inter::scatterv(c, sbuf, scounts, displs, sdt, rbuf, rn, rdt, root) };
    }
    let mut s = new_sched(comm)?;
    let (me, p) = s.rank_size();
    check_root(p, root)?;
    let is_root = me == root;
    let rblk = if is_root && rbuf.cast_const() == IN_PLACE {
        None
    } else {
        Some(side(rbuf, rn, rdt)?)
    };
    let sblks = if is_root {
        // SAFETY: per the caller.
        unsafe {
            vblocks(
                sbuf,
                scounts,
                displs,
                sdt,
                p as usize,
                ("sendcounts", "displs"),
            )
        }?
    } else {
        Vec::new()
    };
    scatterv(&mut s, &sblks, rblk, root);
    Ok(s)
}

pub(crate) fn b_allgather(
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::allgather(c, sbuf, sn, sdt, rbuf, rn, rdt);
    }
    let mut s = new_sched(comm)?;
    let p = s.rank_size().1;
    let sblk = if sbuf == IN_PLACE {
        None
    } else {
        Some(side(sbuf, sn, sdt)?)
    };
    let (rn, rt) = (count64(rn)?, dtype(rdt)?);
    check_buf(rbuf, rn, &rt)?;
    let sel = tuned::tuned()?;
    if p > 2 && !tuned::large(&sel.allgather, rn * rt.size(), "ring") {
        tuned::allgather_bruck(&mut s, sblk, Loc::user(rbuf), rn, &rt)?;
        return Ok(s);
    }
    let rblks: Vec<Blk> = (0..p as usize).map(|r| blk(rbuf, r, rn, &rt)).collect();
    allgatherv(&mut s, sblk, &rblks);
    Ok(s)
}

/// # Safety
/// The arrays valid for the communicator's size.
#[allow(clippy::too_many_arguments)] // MPI_Allgatherv's
unsafe fn b_allgatherv<T: Cnt, D: Cnt>(
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rcounts: *const T,
    displs: *const D,
    rdt: usize,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        // SAFETY: per the caller.
        return unsafe { inter::allgatherv(c, sbuf, sn, sdt, rbuf, rcounts, displs, rdt) };
    }
    let mut s = new_sched(comm)?;
    let p = s.rank_size().1 as usize;
    let sblk = if sbuf == IN_PLACE {
        None
    } else {
        Some(side(sbuf, sn, sdt)?)
    };
    // SAFETY: per the caller.
    let rblks = unsafe { vblocks(rbuf, rcounts, displs, rdt, p, ("recvcounts", "displs")) }?;
    allgatherv(&mut s, sblk, &rblks);
    Ok(s)
}

pub(crate) fn b_alltoall(
    sbuf: *const c_void,
    sn: i64,
    sdt: usize,
    rbuf: *mut c_void,
    rn: i64,
    rdt: usize,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        return inter::alltoall(c, sbuf, sn, sdt, rbuf, rn, rdt);
    }
    let mut s = new_sched(comm)?;
    let p = s.rank_size().1 as usize;
    let rblks = blocks(rbuf, rn, rdt, p)?;
    let sblks = if sbuf == IN_PLACE {
        None
    } else {
        Some(blocks(sbuf, sn, sdt, p)?)
    };
    let sel = tuned::tuned()?;
    let bytes = rblks.first().map_or(0, |b| b.n * b.dt.size());
    let pairwise = tuned::large(&sel.alltoall, bytes, "pairwise");
    alltoallw(&mut s, sblks, &rblks, pairwise)?;
    Ok(s)
}

/// # Safety
/// The arrays valid for the communicator's size.
#[allow(clippy::too_many_arguments)] // MPI_Alltoallv's
unsafe fn b_alltoallv<T: Cnt, D: Cnt>(
    sbuf: *const c_void,
    scounts: *const T,
    sdispls: *const D,
    sdt: usize,
    rbuf: *mut c_void,
    rcounts: *const T,
    rdispls: *const D,
    rdt: usize,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        // SAFETY: per the caller.
        return unsafe {
            inter::alltoallv(c, sbuf, scounts, sdispls, sdt, rbuf, rcounts, rdispls, rdt)
        };
    }
    let mut s = new_sched(comm)?;
    let p = s.rank_size().1 as usize;
    // SAFETY: per the caller.
    let rblks = unsafe { vblocks(rbuf, rcounts, rdispls, rdt, p, ("recvcounts", "rdispls")) }?;
    let sblks = if sbuf == IN_PLACE {
        None
    } else {
        // SAFETY: per the caller.
        Some(unsafe { vblocks(sbuf, scounts, sdispls, sdt, p, ("sendcounts", "sdispls")) }?)
    };
    alltoallw(&mut s, sblks, &rblks, true)?;
    Ok(s)
}

/// Blocks of `counts` elements of `types` at byte displacements `displs`.
///
/// # Safety
/// `types` valid for `counts.len()` handles.
pub(crate) unsafe fn wblks(
    p: *const c_void,
    counts: &[usize],
    displs: &[i64],
    types: *const usize,
    what: &str,
) -> Result<Vec<Blk>, Error> {
    let n = counts.len();
    if n > 0 && types.is_null() {
        return Err(null_arg(what));
    }
    let mut v = Vec::with_capacity(n);
    for r in 0..n {
        // SAFETY: per the caller.
        let dt = dtype(unsafe { *types.add(r) })?;
        // MPI_BOTTOM with an absolute byte displacement is a buffer too.
        if displs[r] == 0 {
            check_buf(p, counts[r], &dt)?;
        }
        v.push(Blk {
            at: Loc::user(p).at(displs[r] as isize),
            n: counts[r],
            dt,
        });
    }
    Ok(v)
}

/// # Safety
/// The arrays valid for the communicator's size.
#[allow(clippy::too_many_arguments)] // MPI_Alltoallw's
unsafe fn b_alltoallw<T: Cnt, D: Cnt>(
    sbuf: *const c_void,
    scounts: *const T,
    sdispls: *const D,
    stypes: *const usize,
    rbuf: *mut c_void,
    rcounts: *const T,
    rdispls: *const D,
    rtypes: *const usize,
    comm: usize,
) -> Result<Sched, Error> {
    if let Some(c) = inter::of(comm)? {
        // SAFETY: per the caller.
        return unsafe {
            inter::alltoallw(
                c, sbuf, scounts, sdispls, stypes, rbuf, rcounts, rdispls, rtypes,
            )
        };
    }
    let mut s = new_sched(comm)?;
    let p = s.rank_size().1 as usize;
    // SAFETY: per the caller.
    let rblks = unsafe {
        let rc = counts(&arr(rcounts, p, "recvcounts")?)?;
        let rd = arr(rdispls, p, "rdispls")?;
        wblks(rbuf, &rc, &rd, rtypes, "recvtypes")?
    };
    let sblks = if sbuf == IN_PLACE {
        None
    } else {
        // SAFETY: per the caller.
        Some(unsafe {
            let sc = counts(&arr(scounts, p, "sendcounts")?)?;
            let sd = arr(sdispls, p, "sdispls")?;
            wblks(sbuf, &sc, &sd, stypes, "sendtypes")?
        })
    };
    alltoallw(&mut s, sblks, &rblks, true)?;
    Ok(s)
}

// ---- the three ways to run a schedule ----

/// A non-blocking collective: started, its request in `*req`.
///
/// # Safety
/// `req` null or valid for a write.
pub(crate) unsafe fn nb(
    comm: usize,
    s: Result<Sched, Error>,
    req: *mut usize,
) -> Result<(), Error> {
    if req.is_null() {
        return Err(null_arg("request"));
    }
    let r = sched::start_nb(s?)?;
    let h = store(ReqObj::Coll(r, comm))?;
    // SAFETY: per the caller.
    unsafe { put(req, h, "request") }
}

/// A persistent collective: an inactive request in `*req`.
///
/// # Safety
/// `req` null or valid for a write.
pub(crate) unsafe fn init(
    comm: usize,
    s: Result<Sched, Error>,
    req: *mut usize,
) -> Result<(), Error> {
    if req.is_null() {
        return Err(null_arg("request"));
    }
    let r: Arc<CollReq> = CollReq::new(s?, true);
    let h = store(ReqObj::Coll(r, comm))?;
    // SAFETY: per the caller.
    unsafe { put(req, h, "request") }
}

/// Generates the non-blocking and persistent entry points of a
/// collective (and the blocking one, unless `coll.rs` has it).
macro_rules! coll_entries {
    (@blocking [] ($($a:ident : $t:ty),*) $comm:ident => $build:expr) => {};
    (@blocking [$blk:ident / $pblk:ident] ($($a:ident : $t:ty),*) $comm:ident => $build:expr) => {
        entry! {
            #[doc = concat!("`", stringify!($blk), "` (a schedule, waited for).")]
            fn $blk / $pblk($($a: $t),*) comm = Some($comm); {
                #[allow(unused_unsafe)]
                // SAFETY: the program's arguments, as the call requires.
                let s = unsafe { $build };
                sched::run(s?)
            }
        }
    };
    ($(
        [$($bl:tt)*] $nb:ident / $pnb:ident, $init:ident / $pinit:ident
        ($($a:ident : $t:ty),*) $comm:ident => $build:expr;
    )*) => {$(
        coll_entries!(@blocking [$($bl)*] ($($a: $t),*) $comm => $build);
        entry! {
            #[doc = concat!("`", stringify!($nb), "`.")]
            fn $nb / $pnb($($a: $t,)* req: *mut usize) comm = Some($comm); {
                #[allow(unused_unsafe)]
                // SAFETY: the program's arguments, as the call requires.
                let s = unsafe { $build };
                // SAFETY: the program's request out-parameter.
                unsafe { nb($comm, s, req) }
            }
            #[doc = concat!("`", stringify!($init), "` (the info is ignored).")]
            fn $init / $pinit($($a: $t,)* _info: usize, req: *mut usize) comm = Some($comm); {
                #[allow(unused_unsafe)]
                // SAFETY: the program's arguments, as the call requires.
                let s = unsafe { $build };
                // SAFETY: the program's request out-parameter.
                unsafe { init($comm, s, req) }
            }
        }
    )*};
}
pub(crate) use coll_entries;

type P = *const c_void;
type M = *mut c_void;
type I = c_int;
type C = i64;
type A = isize;
type Pi = *const c_int;
type Pc = *const i64;
type Pa = *const A;
type Pt = *const usize;

coll_entries! {
    [] MPI_Ibarrier / PMPI_Ibarrier, MPI_Barrier_init / PMPI_Barrier_init
        (comm: usize) comm => b_barrier(comm);
    [] MPI_Ibcast / PMPI_Ibcast, MPI_Bcast_init / PMPI_Bcast_init
        (buf: M, n: I, dt: usize, root: I, comm: usize) comm => b_bcast(buf, n.into(), dt, root, comm);
    [] MPI_Ibcast_c / PMPI_Ibcast_c, MPI_Bcast_init_c / PMPI_Bcast_init_c
        (buf: M, n: C, dt: usize, root: I, comm: usize) comm => b_bcast(buf, n, dt, root, comm);
    [] MPI_Ireduce / PMPI_Ireduce, MPI_Reduce_init / PMPI_Reduce_init
        (sbuf: P, rbuf: M, n: I, dt: usize, op: usize, root: I, comm: usize) comm
        => b_reduce(sbuf, rbuf, n.into(), dt, op, root, comm);
    [] MPI_Ireduce_c / PMPI_Ireduce_c, MPI_Reduce_init_c / PMPI_Reduce_init_c
        (sbuf: P, rbuf: M, n: C, dt: usize, op: usize, root: I, comm: usize) comm
        => b_reduce(sbuf, rbuf, n, dt, op, root, comm);
    [] MPI_Iallreduce / PMPI_Iallreduce, MPI_Allreduce_init / PMPI_Allreduce_init
        (sbuf: P, rbuf: M, n: I, dt: usize, op: usize, comm: usize) comm
        => b_allreduce(sbuf, rbuf, n.into(), dt, op, comm);
    [] MPI_Iallreduce_c / PMPI_Iallreduce_c, MPI_Allreduce_init_c / PMPI_Allreduce_init_c
        (sbuf: P, rbuf: M, n: C, dt: usize, op: usize, comm: usize) comm
        => b_allreduce(sbuf, rbuf, n, dt, op, comm);
    [] MPI_Igather / PMPI_Igather, MPI_Gather_init / PMPI_Gather_init
        (sbuf: P, sn: I, sdt: usize, rbuf: M, rn: I, rdt: usize, root: I, comm: usize) comm
        => b_gather(sbuf, sn.into(), sdt, rbuf, rn.into(), rdt, root, comm);
    [] MPI_Igather_c / PMPI_Igather_c, MPI_Gather_init_c / PMPI_Gather_init_c
        (sbuf: P, sn: C, sdt: usize, rbuf: M, rn: C, rdt: usize, root: I, comm: usize) comm
        => b_gather(sbuf, sn, sdt, rbuf, rn, rdt, root, comm);
    [MPI_Gatherv / PMPI_Gatherv] MPI_Igatherv / PMPI_Igatherv, MPI_Gatherv_init / PMPI_Gatherv_init
        (sbuf: P, sn: I, sdt: usize, rbuf: M, rc: Pi, displs: Pi, rdt: usize, root: I, comm: usize) comm
        => b_gatherv(sbuf, sn.into(), sdt, rbuf, rc, displs, rdt, root, comm);
    [MPI_Gatherv_c / PMPI_Gatherv_c] MPI_Igatherv_c / PMPI_Igatherv_c, MPI_Gatherv_init_c / PMPI_Gatherv_init_c
        (sbuf: P, sn: C, sdt: usize, rbuf: M, rc: Pc, displs: Pa, rdt: usize, root: I, comm: usize) comm
        => b_gatherv(sbuf, sn, sdt, rbuf, rc, displs, rdt, root, comm);
    [] MPI_Iscatter / PMPI_Iscatter, MPI_Scatter_init / PMPI_Scatter_init
        (sbuf: P, sn: I, sdt: usize, rbuf: M, rn: I, rdt: usize, root: I, comm: usize) comm
        => b_scatter(sbuf, sn.into(), sdt, rbuf, rn.into(), rdt, root, comm);
    [] MPI_Iscatter_c / PMPI_Iscatter_c, MPI_Scatter_init_c / PMPI_Scatter_init_c
        (sbuf: P, sn: C, sdt: usize, rbuf: M, rn: C, rdt: usize, root: I, comm: usize) comm
        => b_scatter(sbuf, sn, sdt, rbuf, rn, rdt, root, comm);
    [MPI_Scatterv / PMPI_Scatterv] MPI_Iscatterv / PMPI_Iscatterv, MPI_Scatterv_init / PMPI_Scatterv_init
        (sbuf: P, sc: Pi, displs: Pi, sdt: usize, rbuf: M, rn: I, rdt: usize, root: I, comm: usize) comm
        => b_scatterv(sbuf, sc, displs, sdt, rbuf, rn.into(), rdt, root, comm);
    [MPI_Scatterv_c / PMPI_Scatterv_c] MPI_Iscatterv_c / PMPI_Iscatterv_c, MPI_Scatterv_init_c / PMPI_Scatterv_init_c
        (sbuf: P, sc: Pc, displs: Pa, sdt: usize, rbuf: M, rn: C, rdt: usize, root: I, comm: usize) comm
        => b_scatterv(sbuf, sc, displs, sdt, rbuf, rn, rdt, root, comm);
    [] MPI_Iallgather / PMPI_Iallgather, MPI_Allgather_init / PMPI_Allgather_init
        (sbuf: P, sn: I, sdt: usize, rbuf: M, rn: I, rdt: usize, comm: usize) comm
        => b_allgather(sbuf, sn.into(), sdt, rbuf, rn.into(), rdt, comm);
    [] MPI_Iallgather_c / PMPI_Iallgather_c, MPI_Allgather_init_c / PMPI_Allgather_init_c
        (sbuf: P, sn: C, sdt: usize, rbuf: M, rn: C, rdt: usize, comm: usize) comm
        => b_allgather(sbuf, sn, sdt, rbuf, rn, rdt, comm);
    [MPI_Allgatherv / PMPI_Allgatherv] MPI_Iallgatherv / PMPI_Iallgatherv, MPI_Allgatherv_init / PMPI_Allgatherv_init
        (sbuf: P, sn: I, sdt: usize, rbuf: M, rc: Pi, displs: Pi, rdt: usize, comm: usize) comm
        => b_allgatherv(sbuf, sn.into(), sdt, rbuf, rc, displs, rdt, comm);
    [MPI_Allgatherv_c / PMPI_Allgatherv_c] MPI_Iallgatherv_c / PMPI_Iallgatherv_c, MPI_Allgatherv_init_c / PMPI_Allgatherv_init_c
        (sbuf: P, sn: C, sdt: usize, rbuf: M, rc: Pc, displs: Pa, rdt: usize, comm: usize) comm
        => b_allgatherv(sbuf, sn, sdt, rbuf, rc, displs, rdt, comm);
    [] MPI_Ialltoall / PMPI_Ialltoall, MPI_Alltoall_init / PMPI_Alltoall_init
        (sbuf: P, sn: I, sdt: usize, rbuf: M, rn: I, rdt: usize, comm: usize) comm
        => b_alltoall(sbuf, sn.into(), sdt, rbuf, rn.into(), rdt, comm);
    [] MPI_Ialltoall_c / PMPI_Ialltoall_c, MPI_Alltoall_init_c / PMPI_Alltoall_init_c
        (sbuf: P, sn: C, sdt: usize, rbuf: M, rn: C, rdt: usize, comm: usize) comm
        => b_alltoall(sbuf, sn, sdt, rbuf, rn, rdt, comm);
    [MPI_Alltoallv / PMPI_Alltoallv] MPI_Ialltoallv / PMPI_Ialltoallv, MPI_Alltoallv_init / PMPI_Alltoallv_init
        (sbuf: P, sc: Pi, sd: Pi, sdt: usize, rbuf: M, rc: Pi, rd: Pi, rdt: usize, comm: usize) comm
        => b_alltoallv(sbuf, sc, sd, sdt, rbuf, rc, rd, rdt, comm);
    [MPI_Alltoallv_c / PMPI_Alltoallv_c] MPI_Ialltoallv_c / PMPI_Ialltoallv_c, MPI_Alltoallv_init_c / PMPI_Alltoallv_init_c
        (sbuf: P, sc: Pc, sd: Pa, sdt: usize, rbuf: M, rc: Pc, rd: Pa, rdt: usize, comm: usize) comm
        => b_alltoallv(sbuf, sc, sd, sdt, rbuf, rc, rd, rdt, comm);
    [MPI_Alltoallw / PMPI_Alltoallw] MPI_Ialltoallw / PMPI_Ialltoallw, MPI_Alltoallw_init / PMPI_Alltoallw_init
        (sbuf: P, sc: Pi, sd: Pi, st: Pt, rbuf: M, rc: Pi, rd: Pi, rt: Pt, comm: usize) comm
        => b_alltoallw(sbuf, sc, sd, st, rbuf, rc, rd, rt, comm);
    [MPI_Alltoallw_c / PMPI_Alltoallw_c] MPI_Ialltoallw_c / PMPI_Ialltoallw_c, MPI_Alltoallw_init_c / PMPI_Alltoallw_init_c
        (sbuf: P, sc: Pc, sd: Pa, st: Pt, rbuf: M, rc: Pc, rd: Pa, rt: Pt, comm: usize) comm
        => b_alltoallw(sbuf, sc, sd, st, rbuf, rc, rd, rt, comm);
    [MPI_Reduce_scatter / PMPI_Reduce_scatter] MPI_Ireduce_scatter / PMPI_Ireduce_scatter, MPI_Reduce_scatter_init / PMPI_Reduce_scatter_init
        (sbuf: P, rbuf: M, rc: Pi, dt: usize, op: usize, comm: usize) comm
        => b_reduce_scatter(sbuf, rbuf, rc, dt, op, comm);
    [MPI_Reduce_scatter_c / PMPI_Reduce_scatter_c] MPI_Ireduce_scatter_c / PMPI_Ireduce_scatter_c, MPI_Reduce_scatter_init_c / PMPI_Reduce_scatter_init_c
        (sbuf: P, rbuf: M, rc: Pc, dt: usize, op: usize, comm: usize) comm
        => b_reduce_scatter(sbuf, rbuf, rc, dt, op, comm);
    [MPI_Reduce_scatter_block / PMPI_Reduce_scatter_block] MPI_Ireduce_scatter_block / PMPI_Ireduce_scatter_block, MPI_Reduce_scatter_block_init / PMPI_Reduce_scatter_block_init
        (sbuf: P, rbuf: M, n: I, dt: usize, op: usize, comm: usize) comm
        => b_reduce_scatter_block(sbuf, rbuf, n.into(), dt, op, comm);
    [MPI_Reduce_scatter_block_c / PMPI_Reduce_scatter_block_c] MPI_Ireduce_scatter_block_c / PMPI_Ireduce_scatter_block_c, MPI_Reduce_scatter_block_init_c / PMPI_Reduce_scatter_block_init_c
        (sbuf: P, rbuf: M, n: C, dt: usize, op: usize, comm: usize) comm
        => b_reduce_scatter_block(sbuf, rbuf, n, dt, op, comm);
    [MPI_Scan / PMPI_Scan] MPI_Iscan / PMPI_Iscan, MPI_Scan_init / PMPI_Scan_init
        (sbuf: P, rbuf: M, n: I, dt: usize, op: usize, comm: usize) comm
        => b_scan(sbuf, rbuf, n.into(), dt, op, comm, false);
    [MPI_Scan_c / PMPI_Scan_c] MPI_Iscan_c / PMPI_Iscan_c, MPI_Scan_init_c / PMPI_Scan_init_c
        (sbuf: P, rbuf: M, n: C, dt: usize, op: usize, comm: usize) comm
        => b_scan(sbuf, rbuf, n, dt, op, comm, false);
    [MPI_Exscan / PMPI_Exscan] MPI_Iexscan / PMPI_Iexscan, MPI_Exscan_init / PMPI_Exscan_init
        (sbuf: P, rbuf: M, n: I, dt: usize, op: usize, comm: usize) comm
        => b_scan(sbuf, rbuf, n.into(), dt, op, comm, true);
    [MPI_Exscan_c / PMPI_Exscan_c] MPI_Iexscan_c / PMPI_Iexscan_c, MPI_Exscan_init_c / PMPI_Exscan_init_c
        (sbuf: P, rbuf: M, n: C, dt: usize, op: usize, comm: usize) comm
        => b_scan(sbuf, rbuf, n, dt, op, comm, true);
}
