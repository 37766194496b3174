//! Collectives built on point-to-point (over each communicator's shadow
//! duplicate, so they never match the program's messages): linear
//! algorithms, correct for every predefined type and operation.

use std::ffi::{c_int, c_void};

use oxmpi::traits::*;
use oxmpi::{Error, ErrorClass, RawBuffer, SendMode, UserDatatype};

use crate::entry;
use std::sync::Mutex;

use crate::env::put;
use crate::p2p::count64;
use crate::state::{lock, state, CommObj, Table};
use crate::types::{num_kind, Num};

/// `MPI_IN_PLACE`.
const IN_PLACE: *const c_void = 1 as *const c_void;
const TAG: i32 = 0;
/// `MPI_REPLACE`.
const OP_REPLACE: usize = 0x3c;
/// `MPI_NO_OP`.
const OP_NO_OP: usize = 0x3d;

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
        // The standard's floating point and complex groups (MPICH refuses
        // the logical operations on them too).
        Num::F80 => matches!(op, Op::Sum | Op::Prod | Op::Min | Op::Max),
        Num::Complex(_) => matches!(op, Op::Sum | Op::Prod),
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
            use std::cmp::Ordering::{Equal, Greater, Less};
            let idx = |b: &[u8]| i32::from_ne_bytes(read::<4>(b, at + idx_at));
            let take = match (op, value_order(v, x, acc, at)) {
                (Op::MinLoc, Some(Less)) | (Op::MaxLoc, Some(Greater)) => true,
                (_, Some(Equal)) => idx(x) < idx(acc),
                _ => false,
            };
            if take {
                let size = idx_at + 4;
                acc[at..at + size].copy_from_slice(&x[at..at + size]);
            }
        }
        #[cfg(target_arch = "x86_64")]
        Num::F80 => {
            use crate::x87;
            let (a, b) = (read::<16>(acc, at), read::<16>(x, at));
            let r = match op {
                Op::Sum => x87::add(&a, &b),
                Op::Prod => x87::mul(&a, &b),
                // C's `a < b ? a : b` and `a > b ? a : b` (MPICH's MIN and
                // MAX), the accumulator first.
                Op::Min if x87::lt(&a, &b) => a,
                Op::Max if x87::lt(&b, &a) => a,
                Op::Min | Op::Max => b,
                _ => unreachable!("checked"),
            };
            acc[at..at + 16].copy_from_slice(&r);
        }
        #[cfg(not(target_arch = "x86_64"))]
        Num::F80 => unreachable!("no type is a long double here"),
        Num::Complex(part) => combine_complex(op, part, acc, x, at),
    }
}

/// The order of the values of kind `v` at byte `at` of `a` and `b`
/// (`None`: unordered, a NaN).
fn value_order(v: &Num, a: &[u8], b: &[u8], at: usize) -> Option<std::cmp::Ordering> {
    match *v {
        Num::F32 => {
            f32::from_ne_bytes(read::<4>(a, at)).partial_cmp(&f32::from_ne_bytes(read::<4>(b, at)))
        }
        Num::F64 => {
            f64::from_ne_bytes(read::<8>(a, at)).partial_cmp(&f64::from_ne_bytes(read::<8>(b, at)))
        }
        Num::I(2) => {
            Some(i16::from_ne_bytes(read::<2>(a, at)).cmp(&i16::from_ne_bytes(read::<2>(b, at))))
        }
        Num::I(4) => {
            Some(i32::from_ne_bytes(read::<4>(a, at)).cmp(&i32::from_ne_bytes(read::<4>(b, at))))
        }
        Num::I(_) => {
            Some(i64::from_ne_bytes(read::<8>(a, at)).cmp(&i64::from_ne_bytes(read::<8>(b, at))))
        }
        #[cfg(target_arch = "x86_64")]
        Num::F80 => {
            let (x, y) = (read::<16>(a, at), read::<16>(b, at));
            if crate::x87::lt(&x, &y) {
                Some(std::cmp::Ordering::Less)
            } else if crate::x87::lt(&y, &x) {
                Some(std::cmp::Ordering::Greater)
            } else {
                crate::x87::eq(&x, &y).then_some(std::cmp::Ordering::Equal)
            }
        }
        _ => None,
    }
}

/// `acc op x` for one complex element of `part`s at byte `at` (`MPI_SUM`
/// or `MPI_PROD`): the product as MPICH computes it, `(ar br - ai bi) +
/// (ar bi + ai br) i`, each operation rounded to the part's type.
fn combine_complex(op: Op, part: &Num, acc: &mut [u8], x: &[u8], at: usize) {
    macro_rules! parts {
        ($t:ty, $n:expr) => {{
            let get = |b: &[u8], o: usize| <$t>::from_ne_bytes(read::<$n>(b, at + o));
            let (ar, ai, br, bi) = (get(acc, 0), get(acc, $n), get(x, 0), get(x, $n));
            let (re, im) = match op {
                Op::Sum => (ar + br, ai + bi),
                _ => (ar * br - ai * bi, ar * bi + ai * br),
            };
            acc[at..at + $n].copy_from_slice(&re.to_ne_bytes());
            acc[at + $n..at + 2 * $n].copy_from_slice(&im.to_ne_bytes());
        }};
    }
    match *part {
        Num::F32 => parts!(f32, 4),
        Num::F64 => parts!(f64, 8),
        #[cfg(target_arch = "x86_64")]
        Num::F80 => {
            use crate::x87::{add, mul, neg};
            let get = |b: &[u8], o: usize| read::<16>(b, at + o);
            let (ar, ai, br, bi) = (get(acc, 0), get(acc, 16), get(x, 0), get(x, 16));
            let (re, im) = match op {
                Op::Sum => (add(&ar, &br), add(&ai, &bi)),
                _ => (
                    add(&mul(&ar, &br), &neg(&mul(&ai, &bi))),
                    add(&mul(&ar, &bi), &mul(&ai, &br)),
                ),
            };
            acc[at..at + 16].copy_from_slice(&re);
            acc[at + 16..at + 32].copy_from_slice(&im);
        }
        _ => unreachable!("complex parts are floating point"),
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

/// A reduction: a predefined operation on a predefined type, or a
/// program's function (`MPI_Op_create`) on any datatype.
enum Kernel {
    Builtin(Num, Op),
    User(UserOp, usize),
}

/// A program's operation.
#[derive(Clone, Copy)]
pub struct UserOp {
    f: UserFn,
    commute: bool,
}

/// `MPI_User_function` or `MPI_User_function_c`.
#[derive(Clone, Copy)]
enum UserFn {
    Int(unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut usize)),
    Count(unsafe extern "C" fn(*mut c_void, *mut c_void, *mut i64, *mut usize)),
}

/// User operations by handle.
static OPS: Mutex<Table<UserOp>> = Mutex::new(Table::new());

fn kernel(dt: usize, op: usize) -> Result<Kernel, Error> {
    if let Some(u) = lock(&OPS).get(op).copied() {
        state()?.datatype(dt)?;
        return Ok(Kernel::User(u, dt));
    }
    let op = op_of(op)?;
    let k = num_kind(dt).ok_or_else(|| {
        Error::new(
            ErrorClass::Type,
            format!("predefined operations need a predefined numeric type, not {dt:#x}"),
        )
    })?;
    if !valid(op, k) {
        return Err(Error::new(
            ErrorClass::Op,
            format!("{op:?} does not apply to datatype {dt:#x}"),
        ));
    }
    Ok(Kernel::Builtin(k, op))
}

/// `inout = x op inout` over `n` elements in memory layout.
fn apply(k: &Kernel, x: &mut [u8], inout: &mut [u8], n: usize) -> Result<(), Error> {
    match k {
        Kernel::Builtin(num, op) => {
            // Builtin kernels fold into the accumulator: acc op x. The
            // predefined operations are commutative, so inout = x op inout.
            let es = num.size().max(1);
            for at in (0..inout.len()).step_by(es) {
                combine_one(*op, *num, inout, x, at);
            }
            Ok(())
        }
        Kernel::User(u, dt) => {
            let mut dt = *dt;
            match u.f {
                UserFn::Int(f) => {
                    let mut len = c_int::try_from(n).map_err(|_| {
                        Error::new(ErrorClass::Count, "count too large for MPI_User_function")
                    })?;
                    // SAFETY: the program's function on two buffers of `n`
                    // elements of `dt`, as MPI_Op_create registered it.
                    unsafe {
                        f(
                            x.as_mut_ptr().cast(),
                            inout.as_mut_ptr().cast(),
                            &mut len,
                            &mut dt,
                        )
                    };
                }
                UserFn::Count(f) => {
                    let mut len = n as i64;
                    // SAFETY: as above.
                    unsafe {
                        f(
                            x.as_mut_ptr().cast(),
                            inout.as_mut_ptr().cast(),
                            &mut len,
                            &mut dt,
                        )
                    };
                }
            }
            Ok(())
        }
    }
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
    let c = state()?.intra_comm(comm)?;
    // SAFETY: forwarded.
    unsafe { bcast(&c, buf, count64(n)?, dt, root) }
}

fn op_create(f: UserFn, commute: c_int, op: *mut usize) -> Result<(), Error> {
    state()?;
    let h = lock(&OPS).insert(UserOp {
        f,
        commute: commute != 0,
    });
    // SAFETY: the caller's out-parameter.
    unsafe { put(op, h, "op") }
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

    /// `MPI_Op_create`.
    fn MPI_Op_create / PMPI_Op_create(
        f: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut usize)>,
        commute: c_int,
        op: *mut usize,
    ) comm = None; {
        let f = f.ok_or_else(|| crate::state::null_arg("user_fn"))?;
        op_create(UserFn::Int(f), commute, op)
    }
    /// `MPI_Op_create_c`.
    fn MPI_Op_create_c / PMPI_Op_create_c(
        f: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut i64, *mut usize)>,
        commute: c_int,
        op: *mut usize,
    ) comm = None; {
        let f = f.ok_or_else(|| crate::state::null_arg("user_fn"))?;
        op_create(UserFn::Count(f), commute, op)
    }

    /// `MPI_Op_free` (predefined operations: `MPI_ERR_OP`).
    fn MPI_Op_free / PMPI_Op_free(op: *mut usize) comm = None; {
        if op.is_null() {
            return Err(crate::state::null_arg("op"));
        }
        // SAFETY: not null, valid per the caller.
        let h = unsafe { *op };
        lock(&OPS)
            .remove(h)
            .ok_or_else(|| Error::new(ErrorClass::Op, format!("{h:#x} is not a user operation")))?;
        // SAFETY: as above: MPI_OP_NULL.
        unsafe { *op = 0x20 };
        Ok(())
    }

    /// `MPI_Op_commutative`. `MPI_REPLACE` (`f(a, b) = b`) and `MPI_NO_OP`
    /// (`f(a, b) = a`), operations of one-sided accumulates, are not
    /// commutative (MPICH says so too).
    fn MPI_Op_commutative / PMPI_Op_commutative(op: usize, commute: *mut c_int) comm = None; {
        let c = match lock(&OPS).get(op) {
            Some(u) => u.commute,
            None if matches!(op, OP_REPLACE | OP_NO_OP) => false,
            None => {
                op_of(op)?;
                true
            }
        };
        // SAFETY: the caller's out-parameter.
        unsafe { put(commute, c_int::from(c), "commute") }
    }
}

#[cfg(test)]
mod tests {
    use super::{combine_one, valid, Op};
    use crate::types::{num_kind, Num};

    fn c64(re: f64, im: f64) -> Vec<u8> {
        [re.to_ne_bytes(), im.to_ne_bytes()].concat()
    }

    #[test]
    fn complex_sum_and_product() {
        let k = num_kind(0x216).expect("MPI_C_DOUBLE_COMPLEX");
        assert_eq!(k, Num::Complex(&Num::F64));
        let mut acc = c64(1.0, 2.0);
        combine_one(Op::Prod, k, &mut acc, &c64(3.0, -1.0), 0);
        assert_eq!(acc, c64(5.0, 5.0));
        combine_one(Op::Sum, k, &mut acc, &c64(-0.5, 1.0), 0);
        assert_eq!(acc, c64(4.5, 6.0));
        for h in [0x212, 0x213, 0x21b, 0x2db, 0x216, 0x217, 0x21d, 0x2e3] {
            let k = num_kind(h).unwrap();
            assert!(valid(Op::Sum, k) && valid(Op::Prod, k), "{h:#x}");
            assert!(!valid(Op::Max, k) && !valid(Op::Land, k), "{h:#x}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn long_double_ops() {
        // 1 + 2^-62 and 1 + 2^-61: equal as doubles.
        let ld = |frac_bit: u32| {
            let mut b = [0u8; 16];
            let m = (1u64 << 63) | (1u64 << (63 - frac_bit));
            b[..8].copy_from_slice(&m.to_le_bytes());
            b[8..10].copy_from_slice(&16383u16.to_le_bytes());
            b.to_vec()
        };
        let k = num_kind(0x220).expect("MPI_LONG_DOUBLE");
        let (small, big) = (ld(62), ld(61));
        let mut acc = big.clone();
        combine_one(Op::Min, k, &mut acc, &small, 0);
        assert_eq!(acc, small);
        combine_one(Op::Max, k, &mut acc, &big, 0);
        assert_eq!(acc, big);
        assert!(!valid(Op::Land, k) && !valid(Op::Band, k) && valid(Op::Prod, k));
        // MAXLOC on MPI_LONG_DOUBLE_INT: the larger value, ties to the
        // lower index.
        let pair = |v: &[u8], i: i32| [&v[..16], &i.to_ne_bytes()[..], &[0u8; 12][..]].concat();
        let k = num_kind(0x22d).expect("MPI_LONG_DOUBLE_INT");
        let mut acc = pair(&small, 3);
        combine_one(Op::MaxLoc, k, &mut acc, &pair(&big, 5), 0);
        assert_eq!(acc, pair(&big, 5));
        combine_one(Op::MaxLoc, k, &mut acc, &pair(&big, 1), 0);
        assert_eq!(acc, pair(&big, 1));
        combine_one(Op::MaxLoc, k, &mut acc, &pair(&small, 0), 0);
        assert_eq!(acc, pair(&big, 1));
    }
}
