//! Reduction operations: the predefined operations on the types the
//! standard lists for them (element-wise kernels), and the program's
//! operations (`MPI_Op_create`, `MPI_Op_free`, `MPI_Op_commutative`).
//! The collectives (`crate::coll`) reduce through [`kernel`] and [`apply`].

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use oxmpi::{Error, ErrorClass};

use crate::entry;
use crate::env::put;
use crate::state::{lock, state, Table};
use crate::types::{num_kind, Num};

/// `MPI_REPLACE`.
pub(crate) const OP_REPLACE: usize = 0x3c;
/// `MPI_NO_OP`.
pub(crate) const OP_NO_OP: usize = 0x3d;

/// The predefined operations of the standard ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
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

pub(crate) fn op_of(h: usize) -> Result<Op, Error> {
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

pub(crate) fn valid(op: Op, k: Num) -> bool {
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

pub(crate) fn read<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// `acc[i] = acc[i] op x[i]` for one element of kind `k` at byte `at`.
pub(crate) fn combine_one(op: Op, k: Num, acc: &mut [u8], x: &[u8], at: usize) {
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
pub(crate) fn value_order(v: &Num, a: &[u8], b: &[u8], at: usize) -> Option<std::cmp::Ordering> {
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
pub(crate) fn combine_complex(op: Op, part: &Num, acc: &mut [u8], x: &[u8], at: usize) {
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

/// A reduction: a predefined operation on a predefined type, or a
/// program's function (`MPI_Op_create`) on any datatype.
pub(crate) enum Kernel {
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
pub(crate) enum UserFn {
    Int(unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut usize)),
    Count(unsafe extern "C" fn(*mut c_void, *mut c_void, *mut i64, *mut usize)),
}

/// User operations by handle.
pub(crate) static OPS: Mutex<Table<UserOp>> = Mutex::new(Table::new());

pub(crate) fn kernel(dt: usize, op: usize) -> Result<Kernel, Error> {
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
pub(crate) fn apply(k: &Kernel, x: &mut [u8], inout: &mut [u8], n: usize) -> Result<(), Error> {
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

pub(crate) fn op_create(f: UserFn, commute: c_int, op: *mut usize) -> Result<(), Error> {
    state()?;
    let h = lock(&OPS).insert(UserOp {
        f,
        commute: commute != 0,
    });
    // SAFETY: the caller's out-parameter.
    unsafe { put(op, h, "op") }
}

entry! {
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
