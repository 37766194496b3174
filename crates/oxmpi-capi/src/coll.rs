//! Collectives built on point-to-point (over each communicator's shadow
//! duplicate, so they never match the program's messages): linear
//! algorithms, correct for every predefined type and operation.

use std::ffi::{c_int, c_void};

use oxmpi::traits::*;
use oxmpi::{Error, ErrorClass, RawBuffer};

use crate::entry;
use crate::state::{state, CommObj};
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
