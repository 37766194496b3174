//! Reduction operations: the predefined operations on the types the
//! standard lists for them (element-wise kernels), and the program's
//! operations (`MPI_Op_create`, `MPI_Op_free`, `MPI_Op_commutative`).
//! The collectives (`crate::coll`) reduce through `kernel` and `apply`.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use oxmpi::{Error, ErrorClass, UserDatatype};
use oxmpi_datatype::Convertor;

use crate::entry;
use crate::env::put;
use crate::state::{lock, state, Table};
use crate::types::{num_kind, Num};

/// `MPI_IN_PLACE`.
const IN_PLACE: *const c_void = 1 as *const c_void;
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

impl Op {
    /// The operation's MPI name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Sum => "MPI_SUM",
            Op::Min => "MPI_MIN",
            Op::Max => "MPI_MAX",
            Op::Prod => "MPI_PROD",
            Op::Band => "MPI_BAND",
            Op::Bor => "MPI_BOR",
            Op::Bxor => "MPI_BXOR",
            Op::Land => "MPI_LAND",
            Op::Lor => "MPI_LOR",
            Op::Lxor => "MPI_LXOR",
            Op::MinLoc => "MPI_MINLOC",
            Op::MaxLoc => "MPI_MAXLOC",
        }
    }
}

/// The predefined operation of handle `h` (`MPI_ERR_OP` otherwise, and
/// for `MPI_REPLACE` and `MPI_NO_OP`, which only one-sided accumulates
/// take, as in MPICH).
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
        OP_REPLACE | OP_NO_OP => {
            return Err(Error::new(
                ErrorClass::Op,
                "MPI_REPLACE and MPI_NO_OP are operations of one-sided accumulates only",
            ))
        }
        _ => {
            return Err(Error::new(
                ErrorClass::Op,
                format!("invalid operation handle {h:#x}"),
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

/// The group of a predefined datatype for the predefined operations
/// (MPI-4.1 section 6.9.2, as MPICH 5 applies it: `MPI_CHAR` is a C
/// integer; `MPI_WCHAR`, `MPI_CHARACTER` and `MPI_PACKED` take no
/// predefined operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Group {
    /// C integers, fixed-size integers, `MPI_AINT`, `MPI_OFFSET`,
    /// `MPI_COUNT`: every operation but MINLOC/MAXLOC.
    CInt,
    /// Fortran integers: arithmetic, MIN/MAX and bitwise.
    FInt,
    /// Floating point: SUM, PROD, MIN, MAX.
    Float,
    /// `MPI_C_BOOL`, `MPI_CXX_BOOL`, Fortran `LOGICAL`s: LAND, LOR, LXOR.
    Logical,
    /// Complex: SUM and PROD.
    Complex,
    /// `MPI_BYTE`: BAND, BOR, BXOR.
    Byte,
    /// The (value, index) pairs: MINLOC and MAXLOC.
    Pair,
    /// A valid type no predefined operation applies to.
    None,
}

/// The group of predefined datatype handle `h` (`None`: not predefined).
pub(crate) const fn group(h: usize) -> Option<Group> {
    Some(match h {
        0x201..=0x203
        | 0x208..=0x20f
        | 0x240
        | 0x241
        | 0x243..=0x245
        | 0x248
        | 0x249
        | 0x250
        | 0x251
        | 0x258
        | 0x259 => Group::CInt,
        0x219 | 0x2c1 | 0x2c9 | 0x2d1 | 0x2d9 | 0x2e1 => Group::FInt,
        0x210 | 0x214 | 0x220 | 0x21a | 0x21c | 0x2ca | 0x2d2 | 0x2da | 0x2e2 => Group::Float,
        0x218 | 0x238 | 0x239 | 0x2c0 | 0x2c8 | 0x2d0 | 0x2d8 | 0x2e0 => Group::Logical,
        0x212 | 0x213 | 0x216 | 0x217 | 0x21b | 0x21d | 0x224 | 0x225 | 0x2d3 | 0x2db | 0x2e3
        | 0x2eb => Group::Complex,
        0x247 => Group::Byte,
        0x228..=0x22d | 0x230..=0x232 => Group::Pair,
        0x207 | 0x21e | 0x23c => Group::None,
        _ => return None,
    })
}

/// Whether predefined operation `op` applies to the types of group `g`.
pub(crate) fn valid(op: Op, g: Group) -> bool {
    use Op::*;
    match g {
        Group::CInt => !matches!(op, MinLoc | MaxLoc),
        Group::FInt => matches!(op, Sum | Prod | Min | Max | Band | Bor | Bxor),
        Group::Float => matches!(op, Sum | Prod | Min | Max),
        Group::Logical => matches!(op, Land | Lor | Lxor),
        Group::Complex => matches!(op, Sum | Prod),
        Group::Byte => matches!(op, Band | Bor | Bxor),
        Group::Pair => matches!(op, MinLoc | MaxLoc),
        Group::None => false,
    }
}

/// IEEE binary16 bits to `f32` (exact).
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m * 2^-24.
            let v = m as f32 * f32::from_bits(0x3380_0000);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 112) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// `f32` to IEEE binary16 bits, rounded to nearest, ties to even.
pub(crate) fn f32_to_f16(f: f32) -> u16 {
    let b = f.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign
            | 0x7c00
            | if man != 0 {
                0x200 | (man >> 13) as u16
            } else {
                0
            };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    // The significand with its implicit bit, and how far to shift it
    // right to land on binary16's 10 fraction bits (more when subnormal).
    let (m, shift) = if e <= 0 {
        if e < -10 {
            return sign;
        }
        (man | 0x80_0000, (14 - e) as u32)
    } else {
        (man | 0x80_0000, 13)
    };
    let half = 1u32 << (shift - 1);
    let rest = m & ((1u32 << shift) - 1);
    let mut r = m >> shift;
    if rest > half || (rest == half && r & 1 == 1) {
        r += 1;
    }
    // A carry out of the fraction moves into the exponent by itself.
    let r = if e <= 0 {
        r
    } else {
        ((e as u32) << 10) + (r - 0x400)
    };
    sign | r as u16
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
        Num::I(16) => ints!(i128, 16),
        Num::I(_) => ints!(i64, 8),
        Num::U(1) => ints!(u8, 1),
        Num::U(2) => ints!(u16, 2),
        Num::U(4) => ints!(u32, 4),
        Num::U(16) => ints!(u128, 16),
        Num::U(_) => ints!(u64, 8),
        Num::F16 => {
            let get = |b: &[u8]| f16_to_f32(u16::from_ne_bytes(read::<2>(b, at)));
            let r = float_op!(f32, op, get(acc), get(x));
            acc[at..at + 2].copy_from_slice(&f32_to_f16(r).to_ne_bytes());
        }
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
        Num::Pair(v, i, idx_at, _) => {
            use std::cmp::Ordering::{Equal, Greater, Less};
            let take = match (op, value_order(v, x, acc, at)) {
                (Op::MinLoc, Some(Less)) | (Op::MaxLoc, Some(Greater)) => true,
                // Equal values: the lower index.
                (_, Some(Equal)) => value_order(i, x, acc, at + idx_at) == Some(Less),
                _ => false,
            };
            if take {
                let size = idx_at + i.size();
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
        Num::I(8) => {
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
        Num::F16 => {
            // Computed in `float` and rounded once, as C evaluates
            // `_Float16` expressions on x86-64.
            let get = |b: &[u8], o: usize| f16_to_f32(u16::from_ne_bytes(read::<2>(b, at + o)));
            let (ar, ai, br, bi) = (get(acc, 0), get(acc, 2), get(x, 0), get(x, 2));
            let (re, im) = match op {
                Op::Sum => (ar + br, ai + bi),
                _ => (ar * br - ai * bi, ar * bi + ai * br),
            };
            acc[at..at + 2].copy_from_slice(&f32_to_f16(re).to_ne_bytes());
            acc[at + 2..at + 4].copy_from_slice(&f32_to_f16(im).to_ne_bytes());
        }
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

/// A reduction: a predefined operation on a predefined type or on a
/// derived type whose basic elements are all of one predefined type, or
/// a program's function (`MPI_Op_create`) on any datatype.
pub(crate) enum Kernel {
    /// On a predefined type: elements one extent apart.
    Builtin(Num, Op),
    /// On a derived type: the datatype, and the packed size of its basic
    /// element (where each element lies comes from the type map).
    Derived(Num, Op, UserDatatype, usize),
    /// A program's operation, the datatype handle it is given, and the
    /// datatype, held from the start: the program may free the handle
    /// while a non-blocking reduction still runs.
    User(UserOp, usize, UserDatatype),
}

impl Kernel {
    /// Whether the operation is commutative (every predefined one the
    /// collectives accept is; a program's says so at `MPI_Op_create`).
    pub(crate) fn commutative(&self) -> bool {
        match self {
            Kernel::User(u, ..) => u.commute,
            _ => true,
        }
    }
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

/// The name of datatype handle `h` for messages.
fn type_name(h: usize) -> String {
    crate::dtype::predefined_name(h).map_or_else(|| format!("datatype {h:#x}"), str::to_string)
}

/// The predefined handle every basic element of user datatype `dt` is
/// (one of them, when several handles of one kind and group occur, as
/// `MPI_INT` and `MPI_INT32_T`), found through the constructors'
/// arguments; `None` for a mixture, or a type whose constructor is not
/// known.
fn base_of(dt: usize) -> Result<Option<usize>, Error> {
    let s = state()?;
    let g = lock(&s.types);
    let mut todo = vec![dt];
    let mut base: Option<usize> = None;
    while let Some(h) = todo.pop() {
        if crate::types::predefined(h).is_some() {
            let same = |b: usize| num_kind(b) == num_kind(h) && group(b) == group(h);
            match base {
                None => base = Some(h),
                Some(b) if same(b) => {}
                Some(_) => return Ok(None),
            }
            continue;
        }
        let Some(t) = g.get(h) else {
            return Ok(None);
        };
        if t.contents.types.is_empty() {
            return Ok(None);
        }
        todo.extend(t.contents.types.iter().copied());
    }
    Ok(base)
}

/// The reduction of operation handle `op` on datatype handle `dt`:
/// `MPI_ERR_TYPE` for an invalid datatype, `MPI_ERR_OP` for an invalid
/// operation or a predefined one not defined on the type.
pub(crate) fn kernel(dt: usize, op: usize) -> Result<Kernel, Error> {
    if let Some(u) = lock(&OPS).get(op).copied() {
        let t = state()?.datatype(dt)?;
        return Ok(Kernel::User(u, dt, t));
    }
    let o = op_of(op)?;
    // Predefined types: no table.
    if let (Some(k), Some(g)) = (num_kind(dt), group(dt)) {
        if valid(o, g) {
            return Ok(Kernel::Builtin(k, o));
        }
    }
    let t = state()?.datatype(dt)?;
    let derived = crate::types::predefined(dt).is_none();
    let base = if derived { base_of(dt)? } else { Some(dt) };
    let Some(b) = base else {
        return Err(Error::new(
            ErrorClass::Op,
            format!(
                "{} is not defined on {}: its basic elements are not all of one predefined type",
                o.name(),
                type_name(dt)
            ),
        ));
    };
    let what = if derived {
        format!("{} (made of {})", type_name(dt), type_name(b))
    } else {
        type_name(b)
    };
    if !group(b).is_some_and(|g| valid(o, g)) {
        return Err(Error::new(
            ErrorClass::Op,
            format!("{} is not defined on {what}", o.name()),
        ));
    }
    let k = num_kind(b).ok_or_else(|| {
        Error::new(
            ErrorClass::UnsupportedOperation,
            format!(
                "{} on {what}: arithmetic on this type is not implemented",
                o.name()
            ),
        )
    })?;
    if !derived {
        return Ok(Kernel::Builtin(k, o));
    }
    let size = crate::types::predefined(b).map_or(1, |p| p.size()).max(1);
    Ok(Kernel::Derived(k, o, t, size))
}

/// Where the basic elements of `n` elements of `dt` (each of packed size
/// `size`) begin in the memory image of their span (see [`image_origin`]).
fn element_offsets(dt: &UserDatatype, n: usize, size: usize) -> Result<Vec<usize>, Error> {
    let conv = Convertor::new(dt.as_raw(), n)?;
    let origin = image_origin(dt, n)?;
    let mut out = Vec::with_capacity(conv.packed_size() / size);
    // Element `k` begins at packed byte `k * size`: find the run holding
    // it, and its place in that run.
    let mut packed = 0usize;
    conv.for_each_run(0, conv.packed_size(), |off, len| {
        let mut k = packed.div_ceil(size) * size;
        while k < packed + len {
            out.push((origin + off + (k - packed) as isize) as usize);
            k += size;
        }
        packed += len;
    })?;
    Ok(out)
}

/// The position of the origin in the memory image of `n` elements of
/// `dt` (the image begins with the lowest byte of their data).
pub(crate) fn image_origin(dt: &UserDatatype, n: usize) -> Result<isize, Error> {
    Ok(Convertor::new(dt.as_raw(), n)?
        .span()
        .map_or(0, |sp| -sp.start))
}

/// `inout = x op inout` over `n` elements in memory layout: both slices
/// are memory images of `n` elements of the kernel's datatype, beginning
/// at the lowest byte of their data.
pub(crate) fn apply(k: &Kernel, x: &mut [u8], inout: &mut [u8], n: usize) -> Result<(), Error> {
    match k {
        Kernel::Builtin(num, op) => {
            // Builtin kernels fold into the accumulator: acc op x. The
            // predefined operations are commutative, so inout = x op inout.
            if fast(*num, *op, x, inout) {
                return Ok(());
            }
            let es = num.size().max(1);
            for at in (0..inout.len()).step_by(es) {
                combine_one(*op, *num, inout, x, at);
            }
            Ok(())
        }
        Kernel::Derived(num, op, dt, size) => {
            for at in element_offsets(dt, n, *size)? {
                combine_one(*op, *num, inout, x, at);
            }
            Ok(())
        }
        Kernel::User(u, dt, t) => {
            // The function is given the datatype's origin.
            let origin = image_origin(t, n)?;
            let xp = x.as_mut_ptr().wrapping_offset(origin).cast();
            let ip = inout.as_mut_ptr().wrapping_offset(origin).cast();
            // SAFETY: both images hold the data of `n` elements of `dt`
            // around `origin`.
            unsafe { call_user(u, *dt, xp, ip, n) }
        }
    }
}

/// The common predefined reductions (sum, product, min, max and the
/// bitwise ones on 32- and 64-bit integers, sum, product, min and max on
/// `float` and `double`) as one loop per type and operation, which the
/// compiler vectorizes: `acc = acc op x` over whole images; `false` for
/// the others (done element by element, [`combine_one`]). Same results as
/// `combine_one`.
fn fast(num: Num, op: Op, x: &[u8], acc: &mut [u8]) -> bool {
    macro_rules! lanes {
        ($t:ty, $f:expr) => {{
            const N: usize = std::mem::size_of::<$t>();
            let f = $f;
            for (a, b) in acc.chunks_exact_mut(N).zip(x.chunks_exact(N)) {
                let (p, q) = (<[u8; N]>::try_from(&*a), <[u8; N]>::try_from(b));
                if let (Ok(p), Ok(q)) = (p, q) {
                    let r: $t = f(<$t>::from_ne_bytes(p), <$t>::from_ne_bytes(q));
                    a.copy_from_slice(&r.to_ne_bytes());
                }
            }
            true
        }};
    }
    macro_rules! int {
        ($t:ty) => {
            match op {
                Op::Sum => lanes!($t, |a: $t, b: $t| a.wrapping_add(b)),
                Op::Prod => lanes!($t, |a: $t, b: $t| a.wrapping_mul(b)),
                Op::Min => lanes!($t, |a: $t, b: $t| a.min(b)),
                Op::Max => lanes!($t, |a: $t, b: $t| a.max(b)),
                Op::Band => lanes!($t, |a: $t, b: $t| a & b),
                Op::Bor => lanes!($t, |a: $t, b: $t| a | b),
                Op::Bxor => lanes!($t, |a: $t, b: $t| a ^ b),
                _ => false,
            }
        };
    }
    macro_rules! float {
        ($t:ty) => {
            match op {
                Op::Sum => lanes!($t, |a: $t, b: $t| a + b),
                Op::Prod => lanes!($t, |a: $t, b: $t| a * b),
                Op::Min => lanes!($t, |a: $t, b: $t| a.min(b)),
                Op::Max => lanes!($t, |a: $t, b: $t| a.max(b)),
                _ => false,
            }
        };
    }
    if x.len() != acc.len() {
        return false;
    }
    match num {
        Num::I(4) => int!(i32),
        Num::I(8) => int!(i64),
        Num::U(4) => int!(u32),
        Num::U(8) => int!(u64),
        Num::F32 => float!(f32),
        Num::F64 => float!(f64),
        _ => false,
    }
}

/// Calls a program's operation: `inout = x op inout` over `n` elements of
/// datatype handle `dt`.
///
/// # Safety
/// `x` and `inout` must hold `n` elements of `dt` each.
unsafe fn call_user(
    u: &UserOp,
    mut dt: usize,
    x: *mut c_void,
    inout: *mut c_void,
    n: usize,
) -> Result<(), Error> {
    match u.f {
        UserFn::Int(f) => {
            let mut len = c_int::try_from(n).map_err(|_| {
                Error::new(ErrorClass::Count, "count too large for MPI_User_function")
            })?;
            // SAFETY: the program's function on two buffers of `n`
            // elements of `dt`, as MPI_Op_create registered it.
            unsafe { f(x, inout, &mut len, &mut dt) };
        }
        UserFn::Count(f) => {
            let mut len = n as i64;
            // SAFETY: as above.
            unsafe { f(x, inout, &mut len, &mut dt) };
        }
    }
    Ok(())
}

/// `MPI_Reduce_local`: `inout = x op inout` on the caller's buffers.
///
/// # Safety
/// The buffers as `MPI_Reduce_local` requires.
unsafe fn reduce_local(
    x: *const c_void,
    inout: *mut c_void,
    n: i64,
    dt: usize,
    op: usize,
) -> Result<(), Error> {
    let n = crate::p2p::count64(n)?;
    let k = kernel(dt, op)?;
    let t = state()?.datatype(dt)?;
    if n == 0 || t.size() == 0 {
        return Ok(());
    }
    if x.is_null() || inout.is_null() {
        return Err(Error::new(ErrorClass::Buffer, "null buffer"));
    }
    if x == IN_PLACE || inout.cast_const() == IN_PLACE {
        return Err(Error::new(
            ErrorClass::Buffer,
            "MPI_IN_PLACE is not allowed in MPI_Reduce_local",
        ));
    }
    if let Kernel::User(u, dt, _) = &k {
        // SAFETY: the caller's buffers, as the program's function sees them.
        return unsafe { call_user(u, *dt, x.cast_mut(), inout, n) };
    }
    let span = Convertor::new(t.as_raw(), n)?.span().unwrap_or(0..0);
    let len = (span.end - span.start) as usize;
    let mut xi = vec![0u8; len];
    // SAFETY: the caller's buffers hold the data of `n` elements of `dt`,
    // which lies in `span` around each origin; `x` is only read (copied),
    // `inout` is not the same memory (MPI_Reduce_local's rule).
    unsafe {
        std::ptr::copy_nonoverlapping(
            x.cast::<u8>().wrapping_offset(span.start),
            xi.as_mut_ptr(),
            len,
        );
        let io =
            std::slice::from_raw_parts_mut(inout.cast::<u8>().wrapping_offset(span.start), len);
        apply(&k, &mut xi, io, n)
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
    /// `MPI_Reduce_local`: `inoutbuf = inbuf op inoutbuf`.
    fn MPI_Reduce_local / PMPI_Reduce_local(
        inbuf: *const c_void, inoutbuf: *mut c_void, n: c_int, dt: usize, op: usize,
    ) comm = None; {
        // SAFETY: the caller's buffers.
        unsafe { reduce_local(inbuf, inoutbuf, n.into(), dt, op) }
    }
    /// `MPI_Reduce_local_c`.
    fn MPI_Reduce_local_c / PMPI_Reduce_local_c(
        inbuf: *const c_void, inoutbuf: *mut c_void, n: i64, dt: usize, op: usize,
    ) comm = None; {
        // SAFETY: the caller's buffers.
        unsafe { reduce_local(inbuf, inoutbuf, n, dt, op) }
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
    use super::{combine_one, f16_to_f32, f32_to_f16, group, valid, Group, Op};
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
            let g = group(h).unwrap();
            assert!(valid(Op::Sum, g) && valid(Op::Prod, g), "{h:#x}");
            assert!(!valid(Op::Max, g) && !valid(Op::Land, g), "{h:#x}");
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
        let g = group(0x220).unwrap();
        assert!(!valid(Op::Land, g) && !valid(Op::Band, g) && valid(Op::Prod, g));
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

    /// Every predefined type has a group, and every type with a kind an
    /// operation; the groups agree with what MPICH 5 accepts.
    #[test]
    fn groups_cover_the_predefined_types() {
        for h in 0x200..0x300usize {
            if crate::types::predefined(h).is_some() {
                assert!(group(h).is_some(), "{h:#x} has no group");
            }
            // Characters have a kind (for the copy paths) but no operation.
            if num_kind(h).is_some() && !matches!(h, 0x21e | 0x23c) {
                assert!(group(h).is_some_and(|g| g != Group::None), "{h:#x}");
            }
        }
        // MPI_CHAR is a C integer, MPI_INTEGER not logical, MPI_BYTE bitwise.
        assert!(valid(Op::Land, group(0x243).unwrap()));
        assert!(!valid(Op::Land, group(0x219).unwrap()));
        assert!(valid(Op::Bxor, group(0x247).unwrap()) && !valid(Op::Sum, group(0x247).unwrap()));
        assert!(!valid(Op::Sum, group(0x23c).unwrap()));
    }

    #[test]
    fn half_precision_round_trips() {
        for bits in 0..=u16::MAX {
            let f = f16_to_f32(bits);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), bits, "{bits:#x}");
            }
        }
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: to even.
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0);
        assert_eq!(f32_to_f16(2f32.powi(-24)), 1);
    }

    #[test]
    fn pairs_with_real_indices() {
        let k = num_kind(0x230).expect("MPI_2REAL");
        let p = |v: f32, i: f32| [v.to_ne_bytes(), i.to_ne_bytes()].concat();
        let mut acc = p(1.0, 3.0);
        combine_one(Op::MinLoc, k, &mut acc, &p(1.0, 2.0), 0);
        assert_eq!(acc, p(1.0, 2.0));
        combine_one(Op::MaxLoc, k, &mut acc, &p(5.0, 9.0), 0);
        assert_eq!(acc, p(5.0, 9.0));
    }
}
