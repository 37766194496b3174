//! Collectives built on point-to-point (over each communicator's shadow
//! duplicate, so they never match the program's messages): linear
//! algorithms, correct for every predefined type and operation.

use std::ffi::{c_int, c_void};

use oxmpi::request::OwnedRequest;
use oxmpi::traits::*;
use oxmpi::{Error, ErrorClass, RawBuffer, SendMode, UserDatatype};

use crate::entry;
use crate::state::{state, CommObj, L};
use crate::types::{count, num_kind, Num};

/// `MPI_IN_PLACE`.
const IN_PLACE: *const c_void = 1 as *const c_void;
const TAG: i32 = 0;

/// The predefined operations of the standard ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Sum,
    Min,
    Max,
    Prod,
    Band,
    Bor,
    Bxor,
    Land,
    Lor,
    Lxor,
    MinLoc,
    MaxLoc,
}

fn op_of(h: usize) -> Result<Op, Error> {
    Ok(match h {
        0x21 => Op::Sum,
        0x22 => Op::Min,
        0x23 => Op::Max,
        0x24 => Op::Prod,
        0x28 => Op::Band,
        0x29 => Op::Bor,
        0x2a => Op::Bxor,
        0x30 => Op::Land,
        0x31 => Op::Lor,
        0x32 => Op::Lxor,
        0x38 => Op::MinLoc,
        0x39 => Op::MaxLoc,
        _ => {
            return Err(Error::new(
                ErrorClass::Op,
                format!("invalid or unsupported operation {h:#x}"),
            ))
        }
    })
}

macro_rules! int_op {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        let (x, y): ($t, $t) = ($a, $b);
        match $op {
            Op::Sum => x.wrapping_add(y),
            Op::Prod => x.wrapping_mul(y),
            Op::Min => x.min(y),
            Op::Max => x.max(y),
            Op::Band => x & y,
            Op::Bor => x | y,
            Op::Bxor => x ^ y,
            Op::Land => <$t>::from((x != 0) && (y != 0)),
            Op::Lor => <$t>::from((x != 0) || (y != 0)),
            Op::Lxor => <$t>::from((x != 0) != (y != 0)),
            Op::MinLoc | Op::MaxLoc => unreachable!("checked"),
        }
    }};
}

macro_rules! float_op {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        let (x, y): ($t, $t) = ($a, $b);
        match $op {
            Op::Sum => x + y,
            Op::Prod => x * y,
            Op::Min => x.min(y),
            Op::Max => x.max(y),
            Op::Land => <$t>::from(u8::from((x != 0.0) && (y != 0.0))),
            Op::Lor => <$t>::from(u8::from((x != 0.0) || (y != 0.0))),
            Op::Lxor => <$t>::from(u8::from((x != 0.0) != (y != 0.0))),
            _ => unreachable!("checked"),
        }
    }};
}

fn valid(op: Op, k: Num) -> bool {
    match k {
        Num::Pair(..) => matches!(op, Op::MinLoc | Op::MaxLoc),
        Num::F32 | Num::F64 => {
            !matches!(op, Op::Band | Op::Bor | Op::Bxor | Op::MinLoc | Op::MaxLoc)
        }
        Num::I(_) | Num::U(_) => !matches!(op, Op::MinLoc | Op::MaxLoc),
    }
}

fn read<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// `acc[i] = acc[i] op x[i]` for one element of kind `k` at byte `at`.
fn combine_one(op: Op, k: Num, acc: &mut [u8], x: &[u8], at: usize) {
    macro_rules! ints {
        ($t:ty, $n:expr) => {{
            let r = int_op!(
                $t,
                op,
                <$t>::from_ne_bytes(read::<$n>(acc, at)),
                <$t>::from_ne_bytes(read::<$n>(x, at))
            );
            acc[at..at + $n].copy_from_slice(&r.to_ne_bytes());
        }};
    }
    match k {
        Num::I(1) => ints!(i8, 1),
        Num::I(2) => ints!(i16, 2),
        Num::I(4) => ints!(i32, 4),
        Num::I(_) => ints!(i64, 8),
        Num::U(1) => ints!(u8, 1),
        Num::U(2) => ints!(u16, 2),
        Num::U(4) => ints!(u32, 4),
        Num::U(_) => ints!(u64, 8),
        Num::F32 => {
            let r = float_op!(
                f32,
                op,
                f32::from_ne_bytes(read::<4>(acc, at)),
                f32::from_ne_bytes(read::<4>(x, at))
            );
            acc[at..at + 4].copy_from_slice(&r.to_ne_bytes());
        }
        Num::F64 => {
            let r = float_op!(
                f64,
                op,
                f64::from_ne_bytes(read::<8>(acc, at)),
                f64::from_ne_bytes(read::<8>(x, at))
            );
            acc[at..at + 8].copy_from_slice(&r.to_ne_bytes());
        }
        Num::Pair(v, idx_at, _) => {
            let val = |b: &[u8]| -> f64 {
                match *v {
                    Num::F32 => f64::from(f32::from_ne_bytes(read::<4>(b, at))),
                    Num::F64 => f64::from_ne_bytes(read::<8>(b, at)),
                    Num::I(2) => f64::from(i16::from_ne_bytes(read::<2>(b, at))),
                    Num::I(4) => f64::from(i32::from_ne_bytes(read::<4>(b, at))),
                    _ => i64::from_ne_bytes(read::<8>(b, at)) as f64,
                }
            };
            let idx = |b: &[u8]| i32::from_ne_bytes(read::<4>(b, at + idx_at));
            let (va, vx) = (val(acc), val(x));
            let take = match op {
                Op::MinLoc => vx < va || (vx == va && idx(x) < idx(acc)),
                _ => vx > va || (vx == va && idx(x) < idx(acc)),
            };
            if take {
                let size = idx_at + 4;
                acc[at..at + size].copy_from_slice(&x[at..at + size]);
            }
        }
    }
}

fn elem_size(k: Num) -> usize {
    match k {
        Num::I(n) | Num::U(n) => n,
        Num::F32 => 4,
        Num::F64 => 8,
        Num::Pair(_, _, ext) => ext,
    }
}

/// Raw bytes of `n` elements of a predefined type at `p`.
///
/// # Safety
/// `p` valid for `len` bytes.
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: per the caller.
    unsafe { std::slice::from_raw_parts(p.cast(), len) }
}

/// Linear reduce of `len` bytes of kind `k` to `root`; the result in
/// `out` at the root.
fn reduce_bytes(
    c: &CommObj,
    mine: &[u8],
    out: Option<&mut [u8]>,
    k: Num,
    op: Op,
    root: c_int,
) -> Result<(), Error> {
    let (me, n) = (c.coll.rank(), c.coll.size());
    if root < 0 || root >= n {
        return Err(Error::new(
            ErrorClass::Root,
            format!("root {root} of a communicator of {n}"),
        ));
    }
    if me != root {
        return c.coll.process_at_rank(root).send_with_tag(mine, TAG);
    }
    let mut acc = mine.to_vec();
    let mut tmp = vec![0u8; mine.len()];
    let es = elem_size(k).max(1);
    // Rank order, so non-commutative rounding is the same on every run.
    let mut ordered: Vec<Vec<u8>> = Vec::new();
    for r in 0..n {
        if r == me {
            ordered.push(std::mem::take(&mut acc));
            continue;
        }
        c.coll
            .process_at_rank(r)
            .receive_into_with_tag(&mut tmp[..], TAG)?;
        ordered.push(tmp.clone());
    }
    let mut it = ordered.into_iter();
    let mut acc = it.next().unwrap_or_default();
    for x in it {
        for at in (0..acc.len()).step_by(es) {
            combine_one(op, k, &mut acc, &x, at);
        }
    }
    if let Some(out) = out {
        out.copy_from_slice(&acc);
    }
    Ok(())
}

fn bcast_bytes(c: &CommObj, buf: &mut [u8], root: c_int) -> Result<(), Error> {
    let (me, n) = (c.coll.rank(), c.coll.size());
    if root < 0 || root >= n {
        return Err(Error::new(
            ErrorClass::Root,
            format!("root {root} of a communicator of {n}"),
        ));
    }
    if me == root {
        for r in (0..n).filter(|&r| r != me) {
            c.coll.process_at_rank(r).send_with_tag(&buf[..], TAG)?;
        }
        Ok(())
    } else {
        c.coll
            .process_at_rank(root)
            .receive_into_with_tag(buf, TAG)
            .map(|_| ())
    }
}

/// Checks `dt` is a predefined type that `op` applies to.
fn reduction(dt: usize, op: usize) -> Result<(Num, Op), Error> {
    let op = op_of(op)?;
    let k = num_kind(dt).ok_or_else(|| {
        Error::new(
            ErrorClass::Type,
            format!("reductions need a predefined numeric type, not {dt:#x}"),
        )
    })?;
    if !valid(op, k) {
        return Err(Error::new(
            ErrorClass::Op,
            format!("{op:?} does not apply to datatype {dt:#x}"),
        ));
    }
    Ok((k, op))
}

entry! {
    /// `MPI_Barrier`.
    fn MPI_Barrier / PMPI_Barrier(comm: usize) comm = Some(comm); {
        state()?.comm(comm)?.comm.barrier()
    }

    /// `MPI_Bcast` (linear from the root).
    fn MPI_Bcast / PMPI_Bcast(buf: *mut c_void, n: c_int, dt: usize, root: c_int, comm: usize) comm = Some(comm); {
        let s = state()?;
        let c = s.comm(comm)?;
        let t = s.datatype(dt)?;
        let n = count(n)?;
        // SAFETY: the caller's buffer holds `n` elements of `dt`.
        let mut raw = unsafe { RawBuffer::new(buf.cast(), n, &t) }?;
        let size = c.coll.size();
        if root < 0 || root >= size {
            return Err(Error::new(ErrorClass::Root, format!("root {root} of a communicator of {size}")));
        }
        if c.coll.rank() == root {
            for r in (0..size).filter(|&r| r != root) {
                c.coll.process_at_rank(r).send_with_tag(&raw, TAG)?;
            }
            Ok(())
        } else {
            c.coll.process_at_rank(root).receive_into_with_tag(&mut raw, TAG).map(|_| ())
        }
    }

    /// `MPI_Reduce` on predefined types and operations.
    fn MPI_Reduce / PMPI_Reduce(
        sbuf: *const c_void, rbuf: *mut c_void, n: c_int, dt: usize, op: usize, root: c_int, comm: usize,
    ) comm = Some(comm); {
        let s = state()?;
        let c = s.comm(comm)?;
        let (k, op) = reduction(dt, op)?;
        let len = count(n)? * elem_size(k);
        let me = c.coll.rank();
        let src = if sbuf == IN_PLACE && me == root { rbuf.cast_const() } else { sbuf };
        // SAFETY: the caller's buffers hold `n` elements of `dt`.
        let mine = unsafe { bytes(src, len) }.to_vec();
        if me == root {
            let mut out = vec![0u8; len];
            reduce_bytes(&c, &mine, Some(&mut out), k, op, root)?;
            // SAFETY: the root's receive buffer holds `n` elements.
            unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), rbuf.cast::<u8>(), len) };
            Ok(())
        } else {
            reduce_bytes(&c, &mine, None, k, op, root)
        }
    }

    /// `MPI_Allreduce`: reduce to rank 0, then broadcast.
    fn MPI_Allreduce / PMPI_Allreduce(
        sbuf: *const c_void, rbuf: *mut c_void, n: c_int, dt: usize, op: usize, comm: usize,
    ) comm = Some(comm); {
        let s = state()?;
        let c = s.comm(comm)?;
        let (k, op) = reduction(dt, op)?;
        let len = count(n)? * elem_size(k);
        let src = if sbuf == IN_PLACE { rbuf.cast_const() } else { sbuf };
        // SAFETY: the caller's buffers hold `n` elements of `dt`.
        let mine = unsafe { bytes(src, len) }.to_vec();
        let mut out = vec![0u8; len];
        if c.coll.rank() == 0 {
            reduce_bytes(&c, &mine, Some(&mut out), k, op, 0)?;
        } else {
            reduce_bytes(&c, &mine, None, k, op, 0)?;
        }
        bcast_bytes(&c, &mut out, 0)?;
        // SAFETY: the receive buffer holds `n` elements.
        unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), rbuf.cast::<u8>(), len) };
        Ok(())
    }
}

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

/// Waits for every request, returning the first error.
fn wait_all(reqs: Vec<OwnedRequest<'static, RawBuffer, L>>) -> Result<(), Error> {
    let mut first = None;
    for r in reqs {
        let (_, st) = r.wait_status();
        if let (None, Some(class)) = (&first, st.error()) {
            first = Some(Error::new(class, "a collective transfer failed"));
        }
    }
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

entry! {
    /// `MPI_Gather`.
    fn MPI_Gather / PMPI_Gather(
        sbuf: *const c_void, sn: c_int, sdt: usize, rbuf: *mut c_void, rn: c_int, rdt: usize, root: c_int, comm: usize,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let is_root = c.coll.rank() == root;
        let st = dt_opt(sdt, !(is_root && sbuf == IN_PLACE))?;
        let rt = dt_opt(rdt, is_root)?;
        let (sn, rn) = (count(sn)?, if is_root { count(rn)? } else { 0 });
        // SAFETY: the caller's buffers, as MPI_Gather requires.
        unsafe { gather(&c, sbuf, sn, st.as_ref(), rbuf, rn, rt.as_ref(), root) }
    }

    /// `MPI_Scatter`.
    fn MPI_Scatter / PMPI_Scatter(
        sbuf: *const c_void, sn: c_int, sdt: usize, rbuf: *mut c_void, rn: c_int, rdt: usize, root: c_int, comm: usize,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let is_root = c.coll.rank() == root;
        let st = dt_opt(sdt, is_root)?;
        let rt = dt_opt(rdt, !(is_root && rbuf.cast_const() == IN_PLACE))?;
        let sn = if is_root { count(sn)? } else { 0 };
        let rn = if rt.is_some() { count(rn)? } else { 0 };
        // SAFETY: the caller's buffers, as MPI_Scatter requires.
        unsafe { scatter(&c, sbuf, sn, st.as_ref(), rbuf, rn, rt.as_ref(), root) }
    }

    /// `MPI_Allgather`: gather to rank 0, then broadcast the whole buffer.
    fn MPI_Allgather / PMPI_Allgather(
        sbuf: *const c_void, sn: c_int, sdt: usize, rbuf: *mut c_void, rn: c_int, rdt: usize, comm: usize,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let me = c.coll.rank();
        let rt = dt_opt(rdt, true)?.expect("used");
        let rn = count(rn)?;
        // In place: this rank's block is already in the receive buffer;
        // send it from there.
        let (sbuf, sn, st) = if sbuf == IN_PLACE {
            // SAFETY: this rank's block of the receive buffer.
            let p = (rbuf as usize).wrapping_add_signed((me as usize * rn) as isize * rt.extent());
            (p as *const c_void, rn, rt.clone())
        } else {
            (sbuf, count(sn)?, dt_opt(sdt, true)?.expect("used"))
        };
        let at_root = if me == 0 && sbuf == IN_PLACE { IN_PLACE } else { sbuf };
        // SAFETY: the caller's buffers.
        unsafe { gather(&c, if me == 0 { at_root } else { sbuf }, sn, Some(&st), rbuf, rn, Some(&rt), 0) }?;
        let whole = count(c.coll.size())? * rn;
        // SAFETY: the whole receive buffer.
        let mut b = unsafe { RawBuffer::new(rbuf.cast_const().cast(), whole, &rt) }?;
        if me == 0 {
            for r in 1..c.coll.size() {
                c.coll.process_at_rank(r).send_with_tag(&b, TAG)?;
            }
            Ok(())
        } else {
            c.coll.process_at_rank(0).receive_into_with_tag(&mut b, TAG).map(|_| ())
        }
    }

    /// `MPI_Alltoall`: every block posted at once, receives first.
    fn MPI_Alltoall / PMPI_Alltoall(
        sbuf: *const c_void, sn: c_int, sdt: usize, rbuf: *mut c_void, rn: c_int, rdt: usize, comm: usize,
    ) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let (me, n) = (c.coll.rank(), c.coll.size());
        let rt = dt_opt(rdt, true)?.expect("used");
        let rn = count(rn)?;
        // In place: send from a packed copy of the receive buffer.
        let copy: Vec<u8>;
        let bytes = UserDatatype::of::<u8>();
        let (sbuf, sn, st) = if sbuf == IN_PLACE {
            let whole = n as usize * rn;
            // SAFETY: the caller's receive buffer.
            let b = unsafe { RawBuffer::new(rbuf.cast_const().cast(), whole, &rt) }?;
            let mut v = vec![0u8; b.packed_len()];
            // SAFETY: `v` outlives the copy.
            let d = unsafe { RawBuffer::new(v.as_mut_ptr(), v.len(), &bytes) }?;
            local_copy(&c, b, d)?;
            copy = v;
            (copy.as_ptr().cast::<c_void>(), rn * rt.size(), bytes.clone())
        } else {
            (sbuf, count(sn)?, dt_opt(sdt, true)?.expect("used"))
        };
        let mut reqs = Vec::new();
        for r in 0..n {
            // SAFETY: block `r` of the receive buffer.
            let b = unsafe { block(rbuf, r as usize, rn, &rt) }?;
            reqs.push(b.receive_from(&c.coll.process_at_rank(r), TAG + 2)?);
        }
        for k in 0..n {
            let r = (me + k) % n;
            // SAFETY: block `r` of the send buffer.
            let b = unsafe { block(sbuf, r as usize, sn, &st) }?;
            reqs.push(b.send_to(&c.coll.process_at_rank(r), TAG + 2, SendMode::Standard)?);
        }
        wait_all(reqs)
    }
}
