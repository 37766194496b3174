//! Datatype constructors, queries, and pack/unpack.
//!
//! Each constructor reads its C arguments (a negative count is
//! `MPI_ERR_COUNT`, a null array `MPI_ERR_ARG`, a bad datatype handle
//! `MPI_ERR_TYPE`), builds an [`oxmpi_datatype::Datatype`], and stores it
//! with the constructor's arguments ([`Contents`], for
//! `MPI_Type_get_envelope`) under a new handle. New types are uncommitted:
//! they serve as constructor arguments and in queries at once, in
//! communication and `MPI_Pack`/`MPI_Unpack` after `MPI_Type_commit`.
//! Freeing a type only drops its handle: types built from it and pending
//! operations keep their own reference.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Mutex;

use oxmpi::{Error, ErrorClass, UserDatatype};
use oxmpi_datatype::{Combiner, Convertor, Datatype, Order};

use crate::entry;
use crate::env::put;
use crate::p2p::CStatus;
use crate::state::{lock, null_arg, state, DATATYPE_NULL};
use crate::types::{
    arg_type, count, new_type_with, predefined, release_type_collect, retain_types,
};

/// `MPI_UNDEFINED`.
pub const UNDEFINED: c_int = -32766;
/// `MPI_ORDER_C`.
pub const ORDER_C: c_int = 12;
/// `MPI_ORDER_FORTRAN`.
pub const ORDER_FORTRAN: c_int = 15;
/// `MPI_MAX_OBJECT_NAME`.
pub const MAX_OBJECT_NAME: usize = 128;

/// `MPI_COMBINER_NAMED`.
pub const COMBINER_NAMED: c_int = 101;
/// `MPI_COMBINER_DUP`.
pub const COMBINER_DUP: c_int = 102;
/// `MPI_COMBINER_CONTIGUOUS`.
pub const COMBINER_CONTIGUOUS: c_int = 103;
/// `MPI_COMBINER_VECTOR`.
pub const COMBINER_VECTOR: c_int = 104;
/// `MPI_COMBINER_HVECTOR`.
pub const COMBINER_HVECTOR: c_int = 105;
/// `MPI_COMBINER_INDEXED`.
pub const COMBINER_INDEXED: c_int = 106;
/// `MPI_COMBINER_HINDEXED`.
pub const COMBINER_HINDEXED: c_int = 107;
/// `MPI_COMBINER_INDEXED_BLOCK`.
pub const COMBINER_INDEXED_BLOCK: c_int = 108;
/// `MPI_COMBINER_HINDEXED_BLOCK`.
pub const COMBINER_HINDEXED_BLOCK: c_int = 109;
/// `MPI_COMBINER_STRUCT`.
pub const COMBINER_STRUCT: c_int = 110;
/// `MPI_COMBINER_SUBARRAY`.
pub const COMBINER_SUBARRAY: c_int = 111;
/// `MPI_COMBINER_DARRAY`.
pub const COMBINER_DARRAY: c_int = 112;
/// `MPI_COMBINER_F90_REAL`.
pub const COMBINER_F90_REAL: c_int = 113;
/// `MPI_COMBINER_F90_COMPLEX`.
pub const COMBINER_F90_COMPLEX: c_int = 114;
/// `MPI_COMBINER_F90_INTEGER`.
pub const COMBINER_F90_INTEGER: c_int = 115;
/// `MPI_COMBINER_RESIZED`.
pub const COMBINER_RESIZED: c_int = 116;

/// The handle range of the predefined pair types (`MPI_FLOAT_INT` ..
/// `MPI_2INTEGER`): each element is two basic elements.
const PAIRS: std::ops::RangeInclusive<usize> = 0x228..=0x232;

/// What `MPI_Type_get_envelope` reports of a datatype: the combiner of the
/// constructor call that made it and that call's arguments, by kind
/// (`int`s, `MPI_Aint`s, `MPI_Count`s of the large-count constructors,
/// datatype handles).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contents {
    /// `MPI_COMBINER_*`.
    pub combiner: c_int,
    /// The `int` arguments, in the standard's order.
    pub ints: Vec<c_int>,
    /// The `MPI_Aint` arguments.
    pub addrs: Vec<isize>,
    /// The `MPI_Count` arguments (constructors with the `_c` suffix).
    pub counts: Vec<i64>,
    /// The datatype arguments.
    pub types: Vec<usize>,
}

impl Contents {
    /// A combiner without arguments (yet).
    pub fn new(combiner: c_int) -> Contents {
        Contents {
            combiner,
            ints: Vec::new(),
            addrs: Vec::new(),
            counts: Vec::new(),
            types: Vec::new(),
        }
    }

    /// The envelope of `dt` when the constructor's arguments are unknown:
    /// its combiner only.
    pub fn of(dt: &UserDatatype) -> Contents {
        Contents::new(match dt.as_raw().combiner() {
            Combiner::Primitive(_) | Combiner::Pair(_) => COMBINER_NAMED,
            Combiner::Contiguous => COMBINER_CONTIGUOUS,
            Combiner::Vector => COMBINER_VECTOR,
            Combiner::Hvector => COMBINER_HVECTOR,
            Combiner::Indexed => COMBINER_INDEXED,
            Combiner::Hindexed => COMBINER_HINDEXED,
            Combiner::IndexedBlock => COMBINER_INDEXED_BLOCK,
            Combiner::HindexedBlock => COMBINER_HINDEXED_BLOCK,
            Combiner::Struct => COMBINER_STRUCT,
            Combiner::Resized => COMBINER_RESIZED,
            Combiner::Subarray => COMBINER_SUBARRAY,
            Combiner::Dup => COMBINER_DUP,
            Combiner::Darray => COMBINER_DARRAY,
        })
    }

    pub(crate) fn ints(mut self, v: impl IntoIterator<Item = c_int>) -> Contents {
        self.ints.extend(v);
        self
    }

    pub(crate) fn addrs(mut self, v: impl IntoIterator<Item = isize>) -> Contents {
        self.addrs.extend(v);
        self
    }

    pub(crate) fn counts(mut self, v: impl IntoIterator<Item = i64>) -> Contents {
        self.counts.extend(v);
        self
    }

    pub(crate) fn types(mut self, v: impl IntoIterator<Item = usize>) -> Contents {
        self.types.extend(v);
        self
    }
}

/// The MPI names of the predefined datatypes (`MPI_Type_get_name`).
const PREDEFINED_NAMES: &[(usize, &str)] = &[
    (0x201, "MPI_AINT"),
    (0x202, "MPI_COUNT"),
    (0x203, "MPI_OFFSET"),
    (0x207, "MPI_PACKED"),
    (0x208, "MPI_SHORT"),
    (0x209, "MPI_INT"),
    (0x20a, "MPI_LONG"),
    (0x20b, "MPI_LONG_LONG"),
    (0x20c, "MPI_UNSIGNED_SHORT"),
    (0x20d, "MPI_UNSIGNED"),
    (0x20e, "MPI_UNSIGNED_LONG"),
    (0x20f, "MPI_UNSIGNED_LONG_LONG"),
    (0x210, "MPI_FLOAT"),
    (0x212, "MPI_C_FLOAT_COMPLEX"),
    (0x213, "MPI_CXX_FLOAT_COMPLEX"),
    (0x214, "MPI_DOUBLE"),
    (0x216, "MPI_C_DOUBLE_COMPLEX"),
    (0x217, "MPI_CXX_DOUBLE_COMPLEX"),
    (0x218, "MPI_LOGICAL"),
    (0x219, "MPI_INTEGER"),
    (0x21a, "MPI_REAL"),
    (0x21b, "MPI_COMPLEX"),
    (0x21c, "MPI_DOUBLE_PRECISION"),
    (0x21d, "MPI_DOUBLE_COMPLEX"),
    (0x21e, "MPI_CHARACTER"),
    (0x220, "MPI_LONG_DOUBLE"),
    (0x224, "MPI_C_LONG_DOUBLE_COMPLEX"),
    (0x225, "MPI_CXX_LONG_DOUBLE_COMPLEX"),
    (0x228, "MPI_FLOAT_INT"),
    (0x229, "MPI_DOUBLE_INT"),
    (0x22a, "MPI_LONG_INT"),
    (0x22b, "MPI_2INT"),
    (0x22c, "MPI_SHORT_INT"),
    (0x22d, "MPI_LONG_DOUBLE_INT"),
    (0x230, "MPI_2REAL"),
    (0x231, "MPI_2DOUBLE_PRECISION"),
    (0x232, "MPI_2INTEGER"),
    (0x238, "MPI_C_BOOL"),
    (0x239, "MPI_CXX_BOOL"),
    (0x23c, "MPI_WCHAR"),
    (0x240, "MPI_INT8_T"),
    (0x241, "MPI_UINT8_T"),
    (0x243, "MPI_CHAR"),
    (0x244, "MPI_SIGNED_CHAR"),
    (0x245, "MPI_UNSIGNED_CHAR"),
    (0x247, "MPI_BYTE"),
    (0x248, "MPI_INT16_T"),
    (0x249, "MPI_UINT16_T"),
    (0x250, "MPI_INT32_T"),
    (0x251, "MPI_UINT32_T"),
    (0x258, "MPI_INT64_T"),
    (0x259, "MPI_UINT64_T"),
    (0x2c0, "MPI_LOGICAL1"),
    (0x2c1, "MPI_INTEGER1"),
    (0x2c8, "MPI_LOGICAL2"),
    (0x2c9, "MPI_INTEGER2"),
    (0x2ca, "MPI_REAL2"),
    (0x2d0, "MPI_LOGICAL4"),
    (0x2d1, "MPI_INTEGER4"),
    (0x2d2, "MPI_REAL4"),
    (0x2d3, "MPI_COMPLEX4"),
    (0x2d8, "MPI_LOGICAL8"),
    (0x2d9, "MPI_INTEGER8"),
    (0x2da, "MPI_REAL8"),
    (0x2db, "MPI_COMPLEX8"),
    (0x2e0, "MPI_LOGICAL16"),
    (0x2e1, "MPI_INTEGER16"),
    (0x2e2, "MPI_REAL16"),
    (0x2e3, "MPI_COMPLEX16"),
    (0x2eb, "MPI_COMPLEX32"),
];

/// The MPI name of predefined datatype handle `h`.
pub fn predefined_name(h: usize) -> Option<&'static str> {
    PREDEFINED_NAMES
        .iter()
        .find(|(k, _)| *k == h)
        .map(|(_, n)| *n)
}

/// Names given to predefined datatypes with `MPI_Type_set_name`.
static PREDEFINED_RENAMED: Mutex<Option<HashMap<usize, String>>> = Mutex::new(None);

pub(crate) fn type_error(msg: impl Into<String>) -> Error {
    Error::new(ErrorClass::Type, msg)
}

fn bad_handle(h: usize) -> Error {
    if h == DATATYPE_NULL {
        type_error("MPI_DATATYPE_NULL is not a datatype")
    } else {
        type_error(format!(
            "invalid datatype handle {h:#x} (never created, or freed)"
        ))
    }
}

/// The datatype of handle `h`, committed or not (constructor arguments,
/// queries).
pub(crate) fn any_type(h: usize) -> Result<UserDatatype, Error> {
    if h == DATATYPE_NULL {
        return Err(bad_handle(h));
    }
    arg_type(h)
}

/// Whether predefined handle `h` is a basic element (every predefined type
/// but the pairs): `MPI_Get_elements` counts its elements as whole.
fn is_basic(h: usize) -> bool {
    predefined(h).is_some() && !PAIRS.contains(&h)
}

/// An `MPI_Count` count, checked non-negative.
pub(crate) fn lcount(n: i64) -> Result<usize, Error> {
    usize::try_from(n).map_err(|_| Error::new(ErrorClass::Count, format!("count {n} is negative")))
}

/// An `MPI_Count` displacement, stride or bound as an address-sized value.
fn laddr(n: i64) -> Result<isize, Error> {
    isize::try_from(n).map_err(|_| {
        Error::new(
            ErrorClass::Arg,
            format!("{n} does not fit in an address-sized integer"),
        )
    })
}

/// [`laddr`] of every entry.
fn laddrs(v: &[i64]) -> Result<Vec<isize>, Error> {
    v.iter().map(|&x| laddr(x)).collect()
}

/// A length as the engine's signed count.
pub(crate) fn isz(n: usize) -> Result<isize, Error> {
    isize::try_from(n).map_err(|_| Error::new(ErrorClass::Count, format!("count {n} is too large")))
}

/// The `n` values at `p` (empty when `n == 0`, whatever `p`).
///
/// # Safety
/// `p` must be null or valid for reading `n` values.
pub(crate) unsafe fn array<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], Error> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: not null; the caller promises `n` readable values.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Builds a type with `build`, stores it with `contents`, and writes its
/// handle to `*newtype`.
///
/// # Safety
/// `newtype` must be null or valid for a write.
pub(crate) unsafe fn create(
    newtype: *mut usize,
    contents: Contents,
    build: impl FnOnce() -> Result<Datatype, Error>,
) -> Result<(), Error> {
    if newtype.is_null() {
        return Err(null_arg("newtype"));
    }
    let dt = build()?;
    let h = new_type_with(UserDatatype::from_raw(dt), contents)?;
    // SAFETY: not null; the caller's out-parameter.
    unsafe { put(newtype, h, "newtype") }
}

/// The datatypes of handles `hs`.
fn types_of(hs: &[usize]) -> Result<Vec<Datatype>, Error> {
    hs.iter()
        .map(|&h| any_type(h).map(|t| t.as_raw().clone()))
        .collect()
}

/// `MPI_Type_create_subarray`'s checks and build (any count width).
fn subarray(
    sizes: &[isize],
    subsizes: &[isize],
    starts: &[isize],
    order: c_int,
    old: usize,
) -> Result<Datatype, Error> {
    let order = match order {
        ORDER_C => Order::C,
        ORDER_FORTRAN => Order::Fortran,
        o => {
            return Err(Error::new(
                ErrorClass::Arg,
                format!("order {o} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"),
            ))
        }
    };
    for (what, v) in [("size", sizes), ("subsize", subsizes), ("start", starts)] {
        if let Some((i, x)) = v.iter().enumerate().find(|(_, &x)| x < 0) {
            return Err(Error::new(
                ErrorClass::Arg,
                format!("subarray {what} of dimension {i} is negative ({x})"),
            ));
        }
    }
    let t = any_type(old)?;
    Ok(Datatype::subarray(
        sizes,
        subsizes,
        starts,
        order,
        t.as_raw(),
    )?)
}

/// `ndims` checked positive.
fn ndims_of(ndims: c_int) -> Result<usize, Error> {
    match usize::try_from(ndims) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(Error::new(
            ErrorClass::Arg,
            format!("ndims {ndims} is not positive"),
        )),
    }
}

/// The envelope counts `(integers, addresses, large counts, datatypes,
/// combiner)` of handle `h`.
fn envelope(h: usize) -> Result<(usize, usize, usize, usize, c_int), Error> {
    if predefined(h).is_some() {
        return Ok((0, 0, 0, 0, COMBINER_NAMED));
    }
    if h == DATATYPE_NULL {
        return Err(bad_handle(h));
    }
    let s = state()?;
    let g = lock(&s.types);
    let c = &g.get(h).ok_or_else(|| bad_handle(h))?.contents;
    Ok((
        c.ints.len(),
        c.addrs.len(),
        c.counts.len(),
        c.types.len(),
        c.combiner,
    ))
}

/// The name of handle `h` (`MPI_Type_get_name`).
fn name_of(h: usize) -> Result<String, Error> {
    if let Some(n) = predefined_name(h) {
        let g = lock(&PREDEFINED_RENAMED);
        return Ok(g
            .as_ref()
            .and_then(|m| m.get(&h).cloned())
            .unwrap_or_else(|| n.to_string()));
    }
    if h == DATATYPE_NULL {
        // Named after itself, as in MPICH.
        return Ok("MPI_DATATYPE_NULL".to_string());
    }
    let s = state()?;
    let g = lock(&s.types);
    Ok(g.get(h).ok_or_else(|| bad_handle(h))?.name.clone())
}

/// Copies `s` NUL-terminated into `buf` (`MPI_MAX_OBJECT_NAME` bytes) and
/// its length into `len`.
///
/// # Safety
/// `buf` must be null or valid for `MPI_MAX_OBJECT_NAME` bytes, `len` null
/// or valid for one `int`.
unsafe fn put_name(buf: *mut c_char, len: *mut c_int, s: &str) -> Result<(), Error> {
    if buf.is_null() {
        return Err(null_arg("type_name"));
    }
    if len.is_null() {
        return Err(null_arg("resultlen"));
    }
    let b = s.as_bytes();
    let n = b.len().min(MAX_OBJECT_NAME - 1);
    // SAFETY: the caller promises `MPI_MAX_OBJECT_NAME` bytes; `n + 1` fit.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr().cast::<c_char>(), buf, n);
        buf.add(n).write(0);
    }
    // SAFETY: not null; the caller's out-parameter. `n < 128` fits.
    unsafe { put(len, n as c_int, "resultlen") }
}

/// `s` cut to at most `MPI_MAX_OBJECT_NAME - 1` bytes, on a character
/// boundary.
fn truncate_name(mut s: String) -> String {
    let mut n = s.len().min(MAX_OBJECT_NAME - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    s.truncate(n);
    s
}

/// Where the data of `conv`'s elements lies around the user buffer `buf`:
/// `(first byte, length, position of buf in them)`; `None` without data.
/// The span must not wrap around the address space or start at address 0.
pub(crate) fn region<T>(
    buf: *const T,
    conv: &Convertor,
) -> Result<Option<(*const u8, usize, isize)>, Error> {
    let Some(span) = conv.span() else {
        return Ok(None);
    };
    let bad = || {
        Error::new(
            ErrorClass::Buffer,
            format!(
                "the datatype's data at {:?} around the buffer address {:p} is outside the address space",
                span, buf
            ),
        )
    };
    let len = usize::try_from(span.end - span.start).map_err(|_| bad())?;
    let start = (buf as usize)
        .checked_add_signed(span.start)
        .ok_or_else(bad)?;
    if start == 0 || start.checked_add(len).is_none() {
        return Err(bad());
    }
    Ok(Some((
        buf.cast::<u8>().wrapping_offset(span.start),
        len,
        -span.start,
    )))
}

/// `MPI_Pack` of `incount` elements of `dt` at `inbuf` into `outbuf`
/// (`outsize` bytes) at `pos`; returns the new position.
///
/// # Safety
/// The buffers must be valid as `MPI_Pack` requires.
unsafe fn pack(
    (inbuf, incount, dt): (*const c_void, usize, usize),
    outbuf: *mut c_void,
    outsize: usize,
    pos: usize,
    comm: usize,
) -> Result<usize, Error> {
    let s = state()?;
    s.comm(comm)?;
    let t = s.datatype(dt)?;
    let conv = Convertor::new(t.as_raw(), incount)?;
    let n = conv.packed_size();
    let end = pos
        .checked_add(n)
        .filter(|&e| e <= outsize)
        .ok_or_else(|| {
            Error::new(
                ErrorClass::Truncate,
                format!(
                    "packing {n} bytes at position {pos} overflows the {outsize}-byte output buffer"
                ),
            )
        })?;
    if n == 0 {
        return Ok(end);
    }
    if outbuf.is_null() {
        return Err(Error::new(ErrorClass::Buffer, "outbuf is a null pointer"));
    }
    let (start, len, origin) = region(inbuf, &conv)?
        .ok_or_else(|| Error::new(ErrorClass::Intern, "data without a span"))?;
    // SAFETY: the caller promises the input elements are readable: exactly
    // this span around `inbuf`; `region` checked it is a real range.
    let base = unsafe { std::slice::from_raw_parts(start, len) };
    // SAFETY: the caller promises `outsize` writable bytes at `outbuf`, and
    // `pos + n <= outsize`.
    let out = unsafe { std::slice::from_raw_parts_mut(outbuf.cast::<u8>().add(pos), n) };
    let done = conv.pack(base, origin, 0, out)?;
    if done != n {
        return Err(Error::new(ErrorClass::Intern, "short pack"));
    }
    Ok(end)
}

/// `MPI_Unpack` from `inbuf` (`insize` bytes) at `pos` into `outcount`
/// elements of `dt` at `outbuf`; returns the new position.
///
/// # Safety
/// The buffers must be valid as `MPI_Unpack` requires.
unsafe fn unpack(
    inbuf: *const c_void,
    insize: usize,
    pos: usize,
    (outbuf, outcount, dt): (*mut c_void, usize, usize),
    comm: usize,
) -> Result<usize, Error> {
    let s = state()?;
    s.comm(comm)?;
    let t = s.datatype(dt)?;
    let conv = Convertor::new(t.as_raw(), outcount)?;
    let n = conv.packed_size();
    let end = pos.checked_add(n).filter(|&e| e <= insize).ok_or_else(|| {
        Error::new(
            ErrorClass::Truncate,
            format!(
                "unpacking {n} bytes at position {pos} reads past the {insize}-byte input buffer"
            ),
        )
    })?;
    if n == 0 {
        return Ok(end);
    }
    if inbuf.is_null() {
        return Err(Error::new(ErrorClass::Buffer, "inbuf is a null pointer"));
    }
    let (start, len, origin) = region(outbuf, &conv)?
        .ok_or_else(|| Error::new(ErrorClass::Intern, "data without a span"))?;
    // SAFETY: the caller promises `insize` readable bytes at `inbuf`, and
    // `pos + n <= insize`.
    let input = unsafe { std::slice::from_raw_parts(inbuf.cast::<u8>().add(pos), n) };
    // SAFETY: the caller promises the output elements are writable: exactly
    // this span around `outbuf`; `region` checked it is a real range.
    let base = unsafe { std::slice::from_raw_parts_mut(start.cast_mut(), len) };
    let done = conv.unpack(base, origin, 0, input)?;
    if done != n {
        return Err(Error::new(ErrorClass::Intern, "short unpack"));
    }
    Ok(end)
}

/// Reads `*position` (an `int` or `MPI_Count`), checked non-negative.
///
/// # Safety
/// `p` must be null or valid for a read.
unsafe fn read_position<T: Copy + TryInto<usize> + std::fmt::Display>(
    p: *const T,
) -> Result<usize, Error> {
    if p.is_null() {
        return Err(null_arg("position"));
    }
    // SAFETY: not null; valid per the caller.
    let v = unsafe { p.read() };
    v.try_into()
        .map_err(|_| Error::new(ErrorClass::Arg, format!("position {v} is negative")))
}

/// A buffer size argument, checked non-negative.
fn buf_size<T: TryInto<usize> + std::fmt::Display + Copy>(
    v: T,
    what: &str,
) -> Result<usize, Error> {
    v.try_into()
        .map_err(|_| Error::new(ErrorClass::Arg, format!("{what} {v} is negative")))
}

/// Bytes received, from a status.
///
/// # Safety
/// `status` must be null or valid for a read.
unsafe fn status_bytes(status: *const CStatus) -> Result<usize, Error> {
    if status.is_null() {
        return Err(null_arg("status"));
    }
    // SAFETY: not null; valid per the caller.
    let b = unsafe { (*status).bytes() };
    usize::try_from(b).map_err(|_| Error::new(ErrorClass::Arg, "corrupt status"))
}

/// `MPI_Get_elements` of a status for handle `dt`: `None` is
/// `MPI_UNDEFINED`.
///
/// # Safety
/// `status` must be null or valid for a read.
unsafe fn elements(status: *const CStatus, dt: usize) -> Result<Option<usize>, Error> {
    // SAFETY: forwarded.
    let bytes = unsafe { status_bytes(status) }?;
    let t = state()?.datatype(dt)?;
    Ok(if is_basic(dt) {
        t.as_raw().get_count(bytes)
    } else {
        t.as_raw().get_elements(bytes)
    })
}

/// The bytes `n` basic elements of a stream of `t` (handle `h`) take.
fn element_bytes(h: usize, t: &Datatype, n: usize) -> Result<usize, Error> {
    let too_large = || {
        Error::new(
            ErrorClass::Count,
            format!("{n} elements do not fit in a status"),
        )
    };
    if is_basic(h) {
        return n.checked_mul(t.size()).ok_or_else(too_large);
    }
    let per = t.element_count();
    if per == 0 {
        return if n == 0 {
            Ok(0)
        } else {
            Err(Error::new(
                ErrorClass::Arg,
                format!("{n} elements of a datatype without data"),
            ))
        };
    }
    let mut bytes = (n / per).checked_mul(t.size()).ok_or_else(too_large)?;
    let mut rem = n % per;
    for (p, run) in t.signature() {
        if rem == 0 {
            break;
        }
        let k = rem.min(run);
        bytes = bytes.checked_add(k * p.size()).ok_or_else(too_large)?;
        rem -= k;
    }
    Ok(bytes)
}

/// `MPI_Status_set_elements` (any count width).
///
/// # Safety
/// `status` must be null or valid for a write.
unsafe fn set_elements(status: *mut CStatus, dt: usize, n: i64) -> Result<(), Error> {
    if status.is_null() {
        return Err(null_arg("status"));
    }
    let n = lcount(n)?;
    let t = state()?.datatype(dt)?;
    let b = element_bytes(dt, t.as_raw(), n)? as u64;
    // SAFETY: not null; valid per the caller. Only the received-bytes words
    // change.
    unsafe {
        (*status).internal[0] = b as u32 as c_int;
        (*status).internal[1] = (b >> 32) as u32 as c_int;
    }
    Ok(())
}

/// An `MPI_Count` output value.
fn as_count(n: usize, what: &str) -> Result<i64, Error> {
    i64::try_from(n).map_err(|_| {
        Error::new(
            ErrorClass::Count,
            format!("{what} {n} does not fit in MPI_Count"),
        )
    })
}

entry! {
    /// `MPI_Type_commit`: makes the type usable in communication
    /// (predefined types are committed already).
    fn MPI_Type_commit / PMPI_Type_commit(datatype: *mut usize) comm = None; {
        if datatype.is_null() {
            return Err(null_arg("datatype"));
        }
        // SAFETY: not null; valid per the caller.
        let h = unsafe { datatype.read() };
        if predefined(h).is_some() {
            return Ok(());
        }
        if h == DATATYPE_NULL {
            return Err(bad_handle(h));
        }
        let s = state()?;
        let mut g = lock(&s.types);
        g.get_mut(h).ok_or_else(|| bad_handle(h))?.committed = true;
        Ok(())
    }

    /// `MPI_Type_free`: drops the program's reference and sets the handle
    /// to `MPI_DATATYPE_NULL`; types built from it keep theirs (the
    /// handle lives on while they do, so `MPI_Type_get_contents` can give
    /// it back), pending operations hold the type itself. Predefined types
    /// cannot be freed (`MPI_ERR_TYPE`).
    fn MPI_Type_free / PMPI_Type_free(datatype: *mut usize) comm = None; {
        if datatype.is_null() {
            return Err(null_arg("datatype"));
        }
        // SAFETY: not null; valid per the caller.
        let h = unsafe { datatype.read() };
        if predefined(h).is_some() {
            let n = predefined_name(h).unwrap_or("a predefined datatype");
            return Err(type_error(format!("{n} is predefined and cannot be freed")));
        }
        if h == DATATYPE_NULL {
            return Err(bad_handle(h));
        }
        let s = state()?;
        {
            let g = lock(&s.types);
            if g.get(h).is_some_and(|t| crate::dtype_ext::is_f90(&t.contents)) {
                return Err(type_error(format!(
                    "{h:#x} is a predefined MPI_Type_create_f90_* type and cannot be freed"
                )));
            }
        }
        // The last reference: its attributes are deleted first (their
        // callbacks see the handle still valid; one that fails keeps the
        // type).
        let last = lock(&s.types).get(h).ok_or_else(|| bad_handle(h))?.refs == 1;
        if last {
            crate::attr::delete_all(crate::attr::Kind::Type, h)?;
        }
        let mut removed = Vec::new();
        let orphans: Vec<_> = {
            let mut g = lock(&s.types);
            release_type_collect(&mut g, h, &mut removed).ok_or_else(|| bad_handle(h))?;
            // Types the program freed before, gone only now: their
            // attributes leave with them, before the handles are reused.
            removed
                .iter()
                .filter(|&&r| r != h)
                .map(|&r| (r, crate::attr::take(crate::attr::Kind::Type, r)))
                .collect()
        };
        for (r, list) in orphans {
            // The type is gone: a failing callback has nothing left to fail.
            let _ = crate::attr::run_deletes(r, list);
        }
        // SAFETY: as above.
        unsafe { datatype.write(DATATYPE_NULL) };
        Ok(())
    }

    /// `MPI_Type_dup`: the same type under a new handle, committed if
    /// `oldtype` is.
    fn MPI_Type_dup / PMPI_Type_dup(oldtype: usize, newtype: *mut usize) comm = None; {
        let committed = if predefined(oldtype).is_some() {
            true
        } else if oldtype == DATATYPE_NULL {
            return Err(bad_handle(oldtype));
        } else {
            let s = state()?;
            let g = lock(&s.types);
            g.get(oldtype).ok_or_else(|| bad_handle(oldtype))?.committed
        };
        let contents = Contents::new(COMBINER_DUP).types([oldtype]);
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || Ok(any_type(oldtype)?.as_raw().dup())) }?;
        // SAFETY: `create` succeeded, so `newtype` holds the new handle.
        let h = unsafe { newtype.read() };
        let s = state()?;
        if committed {
            if let Some(t) = lock(&s.types).get_mut(h) {
                t.committed = true;
            }
        }
        // The attributes, through their copy callbacks; if one fails, the
        // new type goes again.
        if let Err(e) = crate::attr::copy_all(crate::attr::Kind::Type, oldtype, h) {
            crate::types::release_type(&mut lock(&s.types), h);
            // SAFETY: the caller's out-parameter.
            unsafe { newtype.write(DATATYPE_NULL) };
            return Err(e);
        }
        Ok(())
    }

    /// `MPI_Type_contiguous`.
    fn MPI_Type_contiguous / PMPI_Type_contiguous(n: c_int, oldtype: usize, newtype: *mut usize) comm = None; {
        let c = count(n)?;
        let contents = Contents::new(COMBINER_CONTIGUOUS).ints([n]).types([oldtype]);
        // SAFETY: the caller's out-parameter.
        unsafe {
            create(newtype, contents, || {
                Ok(Datatype::contiguous(isz(c)?, any_type(oldtype)?.as_raw())?)
            })
        }
    }

    /// `MPI_Type_vector`: `n` blocks of `blocklength` elements of
    /// `oldtype`, block starts `stride` extents apart.
    fn MPI_Type_vector / PMPI_Type_vector(
        n: c_int, blocklength: c_int, stride: c_int, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        count(n)?;
        count(blocklength)?;
        let contents = Contents::new(COMBINER_VECTOR).ints([n, blocklength, stride]).types([oldtype]);
        // SAFETY: the caller's out-parameter.
        unsafe {
            create(newtype, contents, || {
                Ok(Datatype::vector(n as isize, blocklength as isize, stride as isize, any_type(oldtype)?.as_raw())?)
            })
        }
    }

    /// `MPI_Type_create_hvector`: [`MPI_Type_vector`] with the stride in
    /// bytes.
    fn MPI_Type_create_hvector / PMPI_Type_create_hvector(
        n: c_int, blocklength: c_int, stride: isize, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        count(n)?;
        count(blocklength)?;
        let contents = Contents::new(COMBINER_HVECTOR).ints([n, blocklength]).addrs([stride]).types([oldtype]);
        // SAFETY: the caller's out-parameter.
        unsafe {
            create(newtype, contents, || {
                Ok(Datatype::hvector(n as isize, blocklength as isize, stride, any_type(oldtype)?.as_raw())?)
            })
        }
    }

    /// `MPI_Type_indexed`: blocks at displacements in extents of
    /// `oldtype`.
    fn MPI_Type_indexed / PMPI_Type_indexed(
        n: c_int, blocklengths: *const c_int, displacements: *const c_int, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        let c = count(n)?;
        // SAFETY: the caller's arrays of `n` entries.
        let (bl, dp) = unsafe {
            (array(blocklengths, c, "array_of_blocklengths")?, array(displacements, c, "array_of_displacements")?)
        };
        let contents = Contents::new(COMBINER_INDEXED)
            .ints([n]).ints(bl.iter().copied()).ints(dp.iter().copied()).types([oldtype]);
        let bl: Vec<isize> = bl.iter().map(|&b| b as isize).collect();
        let dp: Vec<isize> = dp.iter().map(|&d| d as isize).collect();
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || Ok(Datatype::indexed(&bl, &dp, any_type(oldtype)?.as_raw())?)) }
    }

    /// `MPI_Type_create_hindexed`: [`MPI_Type_indexed`] with displacements
    /// in bytes.
    fn MPI_Type_create_hindexed / PMPI_Type_create_hindexed(
        n: c_int, blocklengths: *const c_int, displacements: *const isize, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        let c = count(n)?;
        // SAFETY: the caller's arrays of `n` entries.
        let (bl, dp) = unsafe {
            (array(blocklengths, c, "array_of_blocklengths")?, array(displacements, c, "array_of_displacements")?)
        };
        let contents = Contents::new(COMBINER_HINDEXED)
            .ints([n]).ints(bl.iter().copied()).addrs(dp.iter().copied()).types([oldtype]);
        let bl: Vec<isize> = bl.iter().map(|&b| b as isize).collect();
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || Ok(Datatype::hindexed(&bl, dp, any_type(oldtype)?.as_raw())?)) }
    }

    /// `MPI_Type_create_indexed_block`: equal blocks at displacements in
    /// extents of `oldtype`.
    fn MPI_Type_create_indexed_block / PMPI_Type_create_indexed_block(
        n: c_int, blocklength: c_int, displacements: *const c_int, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        let c = count(n)?;
        count(blocklength)?;
        // SAFETY: the caller's array of `n` entries.
        let dp = unsafe { array(displacements, c, "array_of_displacements") }?;
        let contents = Contents::new(COMBINER_INDEXED_BLOCK)
            .ints([n, blocklength]).ints(dp.iter().copied()).types([oldtype]);
        let dp: Vec<isize> = dp.iter().map(|&d| d as isize).collect();
        // SAFETY: the caller's out-parameter.
        unsafe {
            create(newtype, contents, || {
                Ok(Datatype::indexed_block(blocklength as isize, &dp, any_type(oldtype)?.as_raw())?)
            })
        }
    }

    /// `MPI_Type_create_hindexed_block`: equal blocks at byte
    /// displacements.
    fn MPI_Type_create_hindexed_block / PMPI_Type_create_hindexed_block(
        n: c_int, blocklength: c_int, displacements: *const isize, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        let c = count(n)?;
        count(blocklength)?;
        // SAFETY: the caller's array of `n` entries.
        let dp = unsafe { array(displacements, c, "array_of_displacements") }?;
        let contents = Contents::new(COMBINER_HINDEXED_BLOCK)
            .ints([n, blocklength]).addrs(dp.iter().copied()).types([oldtype]);
        // SAFETY: the caller's out-parameter.
        unsafe {
            create(newtype, contents, || {
                Ok(Datatype::hindexed_block(blocklength as isize, dp, any_type(oldtype)?.as_raw())?)
            })
        }
    }

    /// `MPI_Type_create_struct`: blocks of their own types at byte
    /// displacements; the extent is padded like a C struct's.
    fn MPI_Type_create_struct / PMPI_Type_create_struct(
        n: c_int, blocklengths: *const c_int, displacements: *const isize, types: *const usize, newtype: *mut usize,
    ) comm = None; {
        let c = count(n)?;
        // SAFETY: the caller's arrays of `n` entries.
        let (bl, dp, ty) = unsafe {
            (
                array(blocklengths, c, "array_of_blocklengths")?,
                array(displacements, c, "array_of_displacements")?,
                array(types, c, "array_of_types")?,
            )
        };
        let contents = Contents::new(COMBINER_STRUCT)
            .ints([n]).ints(bl.iter().copied()).addrs(dp.iter().copied()).types(ty.iter().copied());
        let bl: Vec<isize> = bl.iter().map(|&b| b as isize).collect();
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || Ok(Datatype::structured(&bl, dp, &types_of(ty)?)?)) }
    }

    /// `MPI_Type_create_subarray` (`MPI_ORDER_C` or `MPI_ORDER_FORTRAN`).
    fn MPI_Type_create_subarray / PMPI_Type_create_subarray(
        ndims: c_int, sizes: *const c_int, subsizes: *const c_int, starts: *const c_int,
        order: c_int, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        let nd = ndims_of(ndims)?;
        // SAFETY: the caller's arrays of `ndims` entries.
        let (sz, sub, st) = unsafe {
            (
                array(sizes, nd, "array_of_sizes")?,
                array(subsizes, nd, "array_of_subsizes")?,
                array(starts, nd, "array_of_starts")?,
            )
        };
        let contents = Contents::new(COMBINER_SUBARRAY)
            .ints([ndims]).ints(sz.iter().copied()).ints(sub.iter().copied()).ints(st.iter().copied())
            .ints([order]).types([oldtype]);
        let wide = |v: &[c_int]| v.iter().map(|&x| x as isize).collect::<Vec<_>>();
        let (sz, sub, st) = (wide(sz), wide(sub), wide(st));
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || subarray(&sz, &sub, &st, order, oldtype)) }
    }

    /// `MPI_Type_create_resized`: `oldtype` with lower bound `lb` and
    /// extent `extent`.
    fn MPI_Type_create_resized / PMPI_Type_create_resized(
        oldtype: usize, lb: isize, extent: isize, newtype: *mut usize,
    ) comm = None; {
        let contents = Contents::new(COMBINER_RESIZED).addrs([lb, extent]).types([oldtype]);
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || Ok(Datatype::resized(any_type(oldtype)?.as_raw(), lb, extent)?)) }
    }

    /// `MPI_Type_size`: bytes of data in one element (`MPI_UNDEFINED` if
    /// more than an `int` holds).
    fn MPI_Type_size / PMPI_Type_size(datatype: usize, size: *mut c_int) comm = None; {
        let n = any_type(datatype)?.as_raw().size();
        // SAFETY: the caller's out-parameter.
        unsafe { put(size, c_int::try_from(n).unwrap_or(UNDEFINED), "size") }
    }

    /// `MPI_Type_size_x` (deprecated for `MPI_Type_size_c`).
    fn MPI_Type_size_x / PMPI_Type_size_x(datatype: usize, size: *mut i64) comm = None; {
        let n = as_count(any_type(datatype)?.as_raw().size(), "size")?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(size, n, "size") }
    }

    /// `MPI_Type_size_c`.
    fn MPI_Type_size_c / PMPI_Type_size_c(datatype: usize, size: *mut i64) comm = None; {
        let n = as_count(any_type(datatype)?.as_raw().size(), "size")?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(size, n, "size") }
    }

    /// `MPI_Type_get_extent`: lower bound and extent.
    fn MPI_Type_get_extent / PMPI_Type_get_extent(datatype: usize, lb: *mut isize, extent: *mut isize) comm = None; {
        let t = any_type(datatype)?;
        let t = t.as_raw();
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(lb, t.lb(), "lb")?;
            put(extent, t.extent(), "extent")
        }
    }

    /// `MPI_Type_get_extent_x` (deprecated for `MPI_Type_get_extent_c`).
    fn MPI_Type_get_extent_x / PMPI_Type_get_extent_x(datatype: usize, lb: *mut i64, extent: *mut i64) comm = None; {
        let t = any_type(datatype)?;
        let t = t.as_raw();
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(lb, t.lb() as i64, "lb")?;
            put(extent, t.extent() as i64, "extent")
        }
    }

    /// `MPI_Type_get_extent_c`.
    fn MPI_Type_get_extent_c / PMPI_Type_get_extent_c(datatype: usize, lb: *mut i64, extent: *mut i64) comm = None; {
        let t = any_type(datatype)?;
        let t = t.as_raw();
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(lb, t.lb() as i64, "lb")?;
            put(extent, t.extent() as i64, "extent")
        }
    }

    /// `MPI_Type_get_true_extent`: the span of the data bytes.
    fn MPI_Type_get_true_extent / PMPI_Type_get_true_extent(
        datatype: usize, true_lb: *mut isize, true_extent: *mut isize,
    ) comm = None; {
        let t = any_type(datatype)?;
        let t = t.as_raw();
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(true_lb, t.true_lb(), "true_lb")?;
            put(true_extent, t.true_extent(), "true_extent")
        }
    }

    /// `MPI_Type_get_true_extent_x` (deprecated for
    /// `MPI_Type_get_true_extent_c`).
    fn MPI_Type_get_true_extent_x / PMPI_Type_get_true_extent_x(
        datatype: usize, true_lb: *mut i64, true_extent: *mut i64,
    ) comm = None; {
        let t = any_type(datatype)?;
        let t = t.as_raw();
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(true_lb, t.true_lb() as i64, "true_lb")?;
            put(true_extent, t.true_extent() as i64, "true_extent")
        }
    }

    /// `MPI_Type_get_true_extent_c`.
    fn MPI_Type_get_true_extent_c / PMPI_Type_get_true_extent_c(
        datatype: usize, true_lb: *mut i64, true_extent: *mut i64,
    ) comm = None; {
        let t = any_type(datatype)?;
        let t = t.as_raw();
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(true_lb, t.true_lb() as i64, "true_lb")?;
            put(true_extent, t.true_extent() as i64, "true_extent")
        }
    }

    /// `MPI_Type_get_envelope`: the combiner and how many arguments of each
    /// kind its constructor took. A type made by a large-count (`_c`)
    /// constructor needs `MPI_Type_get_envelope_c` (`MPI_ERR_TYPE` here).
    fn MPI_Type_get_envelope / PMPI_Type_get_envelope(
        datatype: usize, num_integers: *mut c_int, num_addresses: *mut c_int,
        num_datatypes: *mut c_int, combiner: *mut c_int,
    ) comm = None; {
        let (ni, na, nc, nd, comb) = envelope(datatype)?;
        if nc > 0 {
            return Err(type_error(format!(
                "datatype {datatype:#x} was made by a large-count constructor: use MPI_Type_get_envelope_c"
            )));
        }
        let int = |n: usize| {
            c_int::try_from(n).map_err(|_| Error::new(ErrorClass::Count, "too many constructor arguments for an int"))
        };
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(num_integers, int(ni)?, "num_integers")?;
            put(num_addresses, int(na)?, "num_addresses")?;
            put(num_datatypes, int(nd)?, "num_datatypes")?;
            put(combiner, comb, "combiner")
        }
    }

    /// `MPI_Type_get_envelope_c`: [`MPI_Type_get_envelope`] with the count
    /// of `MPI_Count` arguments.
    fn MPI_Type_get_envelope_c / PMPI_Type_get_envelope_c(
        datatype: usize, num_integers: *mut i64, num_addresses: *mut i64,
        num_large_counts: *mut i64, num_datatypes: *mut i64, combiner: *mut c_int,
    ) comm = None; {
        let (ni, na, nc, nd, comb) = envelope(datatype)?;
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(num_integers, as_count(ni, "num_integers")?, "num_integers")?;
            put(num_addresses, as_count(na, "num_addresses")?, "num_addresses")?;
            put(num_large_counts, as_count(nc, "num_large_counts")?, "num_large_counts")?;
            put(num_datatypes, as_count(nd, "num_datatypes")?, "num_datatypes")?;
            put(combiner, comb, "combiner")
        }
    }

    /// `MPI_Type_get_name`: the name set with `MPI_Type_set_name`, the MPI
    /// name of a predefined type (`"MPI_INT"`, and `"MPI_DATATYPE_NULL"`
    /// for the null handle, as in MPICH), or an empty string.
    fn MPI_Type_get_name / PMPI_Type_get_name(datatype: usize, type_name: *mut c_char, resultlen: *mut c_int) comm = None; {
        let name = name_of(datatype)?;
        // SAFETY: the standard requires MPI_MAX_OBJECT_NAME bytes.
        unsafe { put_name(type_name, resultlen, &name) }
    }

    /// `MPI_Type_set_name` (cut to `MPI_MAX_OBJECT_NAME - 1` bytes).
    fn MPI_Type_set_name / PMPI_Type_set_name(datatype: usize, type_name: *const c_char) comm = None; {
        if type_name.is_null() {
            return Err(null_arg("type_name"));
        }
        // SAFETY: not null; the caller's NUL-terminated string.
        let name = unsafe { CStr::from_ptr(type_name) }.to_string_lossy().into_owned();
        let name = truncate_name(name);
        if predefined_name(datatype).is_some() {
            lock(&PREDEFINED_RENAMED).get_or_insert_with(HashMap::new).insert(datatype, name);
            return Ok(());
        }
        if datatype == DATATYPE_NULL {
            return Err(bad_handle(datatype));
        }
        let s = state()?;
        let mut g = lock(&s.types);
        g.get_mut(datatype).ok_or_else(|| bad_handle(datatype))?.name = name;
        Ok(())
    }

    /// `MPI_Get_address`: the address of `location` (`MPI_BOTTOM` is 0).
    fn MPI_Get_address / PMPI_Get_address(location: *const c_void, address: *mut isize) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { put(address, location as isize, "address") }
    }

    /// `MPI_Pack`: appends `incount` elements at `position` of `outbuf`
    /// (`MPI_ERR_TRUNCATE` if they do not fit in `outsize` bytes).
    fn MPI_Pack / PMPI_Pack(
        inbuf: *const c_void, incount: c_int, datatype: usize, outbuf: *mut c_void,
        outsize: c_int, position: *mut c_int, comm: usize,
    ) comm = Some(comm); {
        let n = count(incount)?;
        let size = buf_size(outsize, "outsize")?;
        // SAFETY: the caller's in/out-parameter.
        let pos = unsafe { read_position(position.cast_const()) }?;
        // SAFETY: the caller's buffers.
        let end = unsafe { pack((inbuf, n, datatype), outbuf, size, pos, comm) }?;
        // SAFETY: checked non-null above; `end <= outsize` fits an int.
        unsafe { put(position, end as c_int, "position") }
    }

    /// `MPI_Pack_c`.
    fn MPI_Pack_c / PMPI_Pack_c(
        inbuf: *const c_void, incount: i64, datatype: usize, outbuf: *mut c_void,
        outsize: i64, position: *mut i64, comm: usize,
    ) comm = Some(comm); {
        let n = lcount(incount)?;
        let size = buf_size(outsize, "outsize")?;
        // SAFETY: the caller's in/out-parameter.
        let pos = unsafe { read_position(position.cast_const()) }?;
        // SAFETY: the caller's buffers.
        let end = unsafe { pack((inbuf, n, datatype), outbuf, size, pos, comm) }?;
        // SAFETY: checked non-null above.
        unsafe { put(position, as_count(end, "position")?, "position") }
    }

    /// `MPI_Unpack`: reads `outcount` elements from `position` of `inbuf`
    /// (`MPI_ERR_TRUNCATE` if `insize` bytes do not hold them).
    fn MPI_Unpack / PMPI_Unpack(
        inbuf: *const c_void, insize: c_int, position: *mut c_int, outbuf: *mut c_void,
        outcount: c_int, datatype: usize, comm: usize,
    ) comm = Some(comm); {
        let n = count(outcount)?;
        let size = buf_size(insize, "insize")?;
        // SAFETY: the caller's in/out-parameter.
        let pos = unsafe { read_position(position.cast_const()) }?;
        // SAFETY: the caller's buffers.
        let end = unsafe { unpack(inbuf, size, pos, (outbuf, n, datatype), comm) }?;
        // SAFETY: checked non-null above; `end <= insize` fits an int.
        unsafe { put(position, end as c_int, "position") }
    }

    /// `MPI_Unpack_c`.
    fn MPI_Unpack_c / PMPI_Unpack_c(
        inbuf: *const c_void, insize: i64, position: *mut i64, outbuf: *mut c_void,
        outcount: i64, datatype: usize, comm: usize,
    ) comm = Some(comm); {
        let n = lcount(outcount)?;
        let size = buf_size(insize, "insize")?;
        // SAFETY: the caller's in/out-parameter.
        let pos = unsafe { read_position(position.cast_const()) }?;
        // SAFETY: the caller's buffers.
        let end = unsafe { unpack(inbuf, size, pos, (outbuf, n, datatype), comm) }?;
        // SAFETY: checked non-null above.
        unsafe { put(position, as_count(end, "position")?, "position") }
    }

    /// `MPI_Pack_size`: bytes `MPI_Pack` needs for `incount` elements
    /// (`MPI_ERR_COUNT` if more than an `int` holds).
    fn MPI_Pack_size / PMPI_Pack_size(incount: c_int, datatype: usize, comm: usize, size: *mut c_int) comm = Some(comm); {
        let n = count(incount)?;
        state()?.comm(comm)?;
        let b = any_type(datatype)?.as_raw().pack_size(n)?;
        let b = c_int::try_from(b).map_err(|_| {
            Error::new(ErrorClass::Count, format!("the packed size {b} does not fit in an int: use MPI_Pack_size_c"))
        })?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(size, b, "size") }
    }

    /// `MPI_Pack_size_c`.
    fn MPI_Pack_size_c / PMPI_Pack_size_c(incount: i64, datatype: usize, comm: usize, size: *mut i64) comm = Some(comm); {
        let n = lcount(incount)?;
        state()?.comm(comm)?;
        let b = any_type(datatype)?.as_raw().pack_size(n)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(size, as_count(b, "packed size")?, "size") }
    }

    /// `MPI_Get_elements`: basic elements received (`MPI_UNDEFINED` if the
    /// bytes end inside one, or if the number does not fit in an `int`).
    fn MPI_Get_elements / PMPI_Get_elements(status: *const CStatus, datatype: usize, out: *mut c_int) comm = None; {
        // SAFETY: the caller's status.
        let n = unsafe { elements(status, datatype) }?;
        let n = n.and_then(|n| c_int::try_from(n).ok()).unwrap_or(UNDEFINED);
        // SAFETY: the caller's out-parameter.
        unsafe { put(out, n, "count") }
    }

    /// `MPI_Get_elements_x` (deprecated for `MPI_Get_elements_c`).
    fn MPI_Get_elements_x / PMPI_Get_elements_x(status: *const CStatus, datatype: usize, out: *mut i64) comm = None; {
        // SAFETY: the caller's status.
        let n = unsafe { elements(status, datatype) }?;
        let n = n.and_then(|n| i64::try_from(n).ok()).unwrap_or(i64::from(UNDEFINED));
        // SAFETY: the caller's out-parameter.
        unsafe { put(out, n, "count") }
    }

    /// `MPI_Get_elements_c`.
    fn MPI_Get_elements_c / PMPI_Get_elements_c(status: *const CStatus, datatype: usize, out: *mut i64) comm = None; {
        // SAFETY: the caller's status.
        let n = unsafe { elements(status, datatype) }?;
        let n = n.and_then(|n| i64::try_from(n).ok()).unwrap_or(i64::from(UNDEFINED));
        // SAFETY: the caller's out-parameter.
        unsafe { put(out, n, "count") }
    }

    /// `MPI_Get_count_c`: whole elements of `datatype` received
    /// (`MPI_UNDEFINED` if the bytes are not a multiple of its size).
    fn MPI_Get_count_c / PMPI_Get_count_c(status: *const CStatus, datatype: usize, out: *mut i64) comm = None; {
        // SAFETY: the caller's status.
        let bytes = unsafe { status_bytes(status) }?;
        let t = state()?.datatype(datatype)?;
        let n = t
            .as_raw()
            .get_count(bytes)
            .and_then(|n| i64::try_from(n).ok())
            .unwrap_or(i64::from(UNDEFINED));
        // SAFETY: the caller's out-parameter.
        unsafe { put(out, n, "count") }
    }

    /// `MPI_Status_set_elements`: makes `MPI_Get_elements` of `status` with
    /// `datatype` return `n`.
    fn MPI_Status_set_elements / PMPI_Status_set_elements(status: *mut CStatus, datatype: usize, n: c_int) comm = None; {
        // SAFETY: the caller's status.
        unsafe { set_elements(status, datatype, i64::from(n)) }
    }

    /// `MPI_Status_set_elements_x` (deprecated for
    /// `MPI_Status_set_elements_c`).
    fn MPI_Status_set_elements_x / PMPI_Status_set_elements_x(status: *mut CStatus, datatype: usize, n: i64) comm = None; {
        // SAFETY: the caller's status.
        unsafe { set_elements(status, datatype, n) }
    }

    /// `MPI_Status_set_elements_c`.
    fn MPI_Status_set_elements_c / PMPI_Status_set_elements_c(status: *mut CStatus, datatype: usize, n: i64) comm = None; {
        // SAFETY: the caller's status.
        unsafe { set_elements(status, datatype, n) }
    }

    /// `MPI_Type_contiguous_c`.
    fn MPI_Type_contiguous_c / PMPI_Type_contiguous_c(n: i64, oldtype: usize, newtype: *mut usize) comm = None; {
        let c = lcount(n)?;
        let contents = Contents::new(COMBINER_CONTIGUOUS).counts([n]).types([oldtype]);
        // SAFETY: the caller's out-parameter.
        unsafe {
            create(newtype, contents, || {
                Ok(Datatype::contiguous(isz(c)?, any_type(oldtype)?.as_raw())?)
            })
        }
    }

    /// `MPI_Type_vector_c`.
    fn MPI_Type_vector_c / PMPI_Type_vector_c(
        n: i64, blocklength: i64, stride: i64, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        let c = isz(lcount(n)?)?;
        let b = isz(lcount(blocklength)?)?;
        let s = laddr(stride)?;
        let contents = Contents::new(COMBINER_VECTOR).counts([n, blocklength, stride]).types([oldtype]);
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || Ok(Datatype::vector(c, b, s, any_type(oldtype)?.as_raw())?)) }
    }

    /// `MPI_Type_create_hvector_c`.
    fn MPI_Type_create_hvector_c / PMPI_Type_create_hvector_c(
        n: i64, blocklength: i64, stride: i64, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        let c = isz(lcount(n)?)?;
        let b = isz(lcount(blocklength)?)?;
        let s = laddr(stride)?;
        let contents = Contents::new(COMBINER_HVECTOR).counts([n, blocklength, stride]).types([oldtype]);
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || Ok(Datatype::hvector(c, b, s, any_type(oldtype)?.as_raw())?)) }
    }

    /// `MPI_Type_indexed_c`.
    fn MPI_Type_indexed_c / PMPI_Type_indexed_c(
        n: i64, blocklengths: *const i64, displacements: *const i64, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        // SAFETY: the caller's arrays of `n` entries and out-parameter.
        unsafe { indexed_c(COMBINER_INDEXED, n, blocklengths, displacements, oldtype, newtype, Datatype::indexed) }
    }

    /// `MPI_Type_create_hindexed_c`.
    fn MPI_Type_create_hindexed_c / PMPI_Type_create_hindexed_c(
        n: i64, blocklengths: *const i64, displacements: *const i64, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        // SAFETY: the caller's arrays of `n` entries and out-parameter.
        unsafe { indexed_c(COMBINER_HINDEXED, n, blocklengths, displacements, oldtype, newtype, Datatype::hindexed) }
    }

    /// `MPI_Type_create_struct_c`.
    fn MPI_Type_create_struct_c / PMPI_Type_create_struct_c(
        n: i64, blocklengths: *const i64, displacements: *const i64, types: *const usize, newtype: *mut usize,
    ) comm = None; {
        let c = lcount(n)?;
        // SAFETY: the caller's arrays of `n` entries.
        let (bl, dp, ty) = unsafe {
            (
                array(blocklengths, c, "array_of_blocklengths")?,
                array(displacements, c, "array_of_displacements")?,
                array(types, c, "array_of_types")?,
            )
        };
        let contents = Contents::new(COMBINER_STRUCT)
            .counts([n]).counts(bl.iter().copied()).counts(dp.iter().copied()).types(ty.iter().copied());
        let (bl, dp) = (laddrs(bl)?, laddrs(dp)?);
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || Ok(Datatype::structured(&bl, &dp, &types_of(ty)?)?)) }
    }

    /// `MPI_Type_create_subarray_c`.
    fn MPI_Type_create_subarray_c / PMPI_Type_create_subarray_c(
        ndims: c_int, sizes: *const i64, subsizes: *const i64, starts: *const i64,
        order: c_int, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        let nd = ndims_of(ndims)?;
        // SAFETY: the caller's arrays of `ndims` entries.
        let (sz, sub, st) = unsafe {
            (
                array(sizes, nd, "array_of_sizes")?,
                array(subsizes, nd, "array_of_subsizes")?,
                array(starts, nd, "array_of_starts")?,
            )
        };
        let contents = Contents::new(COMBINER_SUBARRAY)
            .ints([ndims, order])
            .counts(sz.iter().copied()).counts(sub.iter().copied()).counts(st.iter().copied())
            .types([oldtype]);
        let (sz, sub, st) = (laddrs(sz)?, laddrs(sub)?, laddrs(st)?);
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || subarray(&sz, &sub, &st, order, oldtype)) }
    }

    /// `MPI_Type_create_resized_c`.
    fn MPI_Type_create_resized_c / PMPI_Type_create_resized_c(
        oldtype: usize, lb: i64, extent: i64, newtype: *mut usize,
    ) comm = None; {
        let (l, e) = (laddr(lb)?, laddr(extent)?);
        let contents = Contents::new(COMBINER_RESIZED).counts([lb, extent]).types([oldtype]);
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || Ok(Datatype::resized(any_type(oldtype)?.as_raw(), l, e)?)) }
    }
}

/// Copies `v` into the caller's array of `max` entries.
///
/// # Safety
/// `out` valid for `max` entries (or null when `v` is empty).
unsafe fn put_array<T: Copy>(out: *mut T, max: i64, v: &[T], what: &str) -> Result<(), Error> {
    if v.is_empty() {
        return Ok(());
    }
    if max < v.len() as i64 {
        return Err(Error::new(
            ErrorClass::Arg,
            format!(
                "{what}: room for {max} entries, the constructor had {}",
                v.len()
            ),
        ));
    }
    if out.is_null() {
        return Err(crate::state::null_arg(what));
    }
    // SAFETY: the caller's array holds at least `v.len()` entries.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), out, v.len()) };
    Ok(())
}

/// The constructor's arguments of `datatype`, handed to `write` (which
/// copies them to the caller's arrays) with the lock of the type table
/// held. Derived argument types are the handles themselves, each with one
/// more reference, which the program drops with `MPI_Type_free` (as MPICH
/// does: a dup of a dup decodes to the dup, whose contents give the
/// original); taken only once `write` succeeded.
fn contents_of(
    datatype: usize,
    write: impl FnOnce(&Contents) -> Result<(), Error>,
) -> Result<(), Error> {
    if predefined(datatype).is_some() {
        return Err(type_error(format!(
            "{datatype:#x} is a predefined datatype: it has no contents"
        )));
    }
    if datatype == DATATYPE_NULL {
        return Err(bad_handle(datatype));
    }
    let s = state()?;
    let mut g = lock(&s.types);
    let c = &g
        .get(datatype)
        .ok_or_else(|| bad_handle(datatype))?
        .contents;
    write(c)?;
    let types = c.types.clone();
    // Derived argument types, not the predefined ones (f90 types included:
    // those are predefined too, and never freed).
    let derived: Vec<usize> = types
        .into_iter()
        .filter(|&t| predefined(t).is_none())
        .filter(|&t| {
            !g.get(t)
                .is_some_and(|o| crate::dtype_ext::is_f90(&o.contents))
        })
        .collect();
    retain_types(&mut g, &derived);
    Ok(())
}

entry! {
    /// `MPI_Type_get_contents`: the constructor's arguments; derived
    /// datatypes among them come back as their own handles, each with a
    /// reference the program drops with `MPI_Type_free` (predefined ones
    /// must not be freed), as MPICH does.
    fn MPI_Type_get_contents / PMPI_Type_get_contents(
        datatype: usize, max_integers: c_int, max_addresses: c_int, max_datatypes: c_int,
        integers: *mut c_int, addresses: *mut isize, datatypes: *mut usize,
    ) comm = None; {
        contents_of(datatype, |c| {
            if !c.counts.is_empty() {
                return Err(type_error(format!(
                    "datatype {datatype:#x} was made by a large-count constructor: use MPI_Type_get_contents_c"
                )));
            }
            // SAFETY: the caller's arrays of the given sizes.
            unsafe {
                put_array(integers, max_integers.into(), &c.ints, "array_of_integers")?;
                put_array(addresses, max_addresses.into(), &c.addrs, "array_of_addresses")?;
                put_array(datatypes, max_datatypes.into(), &c.types, "array_of_datatypes")
            }
        })
    }

    /// `MPI_Type_get_contents_c`.
    fn MPI_Type_get_contents_c / PMPI_Type_get_contents_c(
        datatype: usize, max_integers: i64, max_addresses: i64, max_large_counts: i64, max_datatypes: i64,
        integers: *mut c_int, addresses: *mut isize, large_counts: *mut i64, datatypes: *mut usize,
    ) comm = None; {
        contents_of(datatype, |c| {
            // SAFETY: the caller's arrays of the given sizes.
            unsafe {
                put_array(integers, max_integers, &c.ints, "array_of_integers")?;
                put_array(addresses, max_addresses, &c.addrs, "array_of_addresses")?;
                put_array(large_counts, max_large_counts, &c.counts, "array_of_large_counts")?;
                put_array(datatypes, max_datatypes, &c.types, "array_of_datatypes")
            }
        })
    }

    /// `MPI_Type_create_indexed_block_c`.
    fn MPI_Type_create_indexed_block_c / PMPI_Type_create_indexed_block_c(
        n: i64, blocklength: i64, displacements: *const i64, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        // SAFETY: the caller's array of `n` entries and out-parameter.
        unsafe {
            indexed_block_c(COMBINER_INDEXED_BLOCK, n, blocklength, displacements, oldtype, newtype, Datatype::indexed_block)
        }
    }

    /// `MPI_Type_create_hindexed_block_c`.
    fn MPI_Type_create_hindexed_block_c / PMPI_Type_create_hindexed_block_c(
        n: i64, blocklength: i64, displacements: *const i64, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        // SAFETY: the caller's array of `n` entries and out-parameter.
        unsafe {
            indexed_block_c(COMBINER_HINDEXED_BLOCK, n, blocklength, displacements, oldtype, newtype, Datatype::hindexed_block)
        }
    }
}

/// Datatype constructors from per-block lengths and displacements
/// (`Datatype::indexed`, `hindexed`).
type IndexedFn = fn(&[isize], &[isize], &Datatype) -> oxmpi_datatype::Result<Datatype>;
/// Datatype constructors from one block length and displacements
/// (`Datatype::indexed_block`, `hindexed_block`).
type IndexedBlockFn = fn(isize, &[isize], &Datatype) -> oxmpi_datatype::Result<Datatype>;

/// The large-count indexed constructors (`MPI_Type_indexed_c`,
/// `MPI_Type_create_hindexed_c`): every argument is a count, so they differ
/// only in the combiner and in how `build` reads the displacements.
///
/// # Safety
/// `blocklengths` and `displacements` hold `n` entries; `newtype` is the
/// caller's out-parameter.
unsafe fn indexed_c(
    combiner: c_int,
    n: i64,
    blocklengths: *const i64,
    displacements: *const i64,
    oldtype: usize,
    newtype: *mut usize,
    build: IndexedFn,
) -> Result<(), Error> {
    let c = lcount(n)?;
    // SAFETY: the caller's arrays of `n` entries.
    let (bl, dp) = unsafe {
        (
            array(blocklengths, c, "array_of_blocklengths")?,
            array(displacements, c, "array_of_displacements")?,
        )
    };
    let contents = Contents::new(combiner)
        .counts([n])
        .counts(bl.iter().copied())
        .counts(dp.iter().copied())
        .types([oldtype]);
    let bl = laddrs(bl)?;
    let dp = laddrs(dp)?;
    // SAFETY: the caller's out-parameter.
    unsafe {
        create(newtype, contents, || {
            Ok(build(&bl, &dp, any_type(oldtype)?.as_raw())?)
        })
    }
}

/// The large-count equal-block constructors (`MPI_Type_create_indexed_block_c`,
/// `MPI_Type_create_hindexed_block_c`), as [`indexed_c`].
///
/// # Safety
/// `displacements` holds `n` entries; `newtype` is the caller's
/// out-parameter.
unsafe fn indexed_block_c(
    combiner: c_int,
    n: i64,
    blocklength: i64,
    displacements: *const i64,
    oldtype: usize,
    newtype: *mut usize,
    build: IndexedBlockFn,
) -> Result<(), Error> {
    let c = lcount(n)?;
    // SAFETY: the caller's array of `n` entries.
    let dp = unsafe { array(displacements, c, "array_of_displacements") }?;
    let contents = Contents::new(combiner)
        .counts([n, blocklength])
        .counts(dp.iter().copied())
        .types([oldtype]);
    let bl = laddr(blocklength)?;
    let dp = laddrs(dp)?;
    // SAFETY: the caller's out-parameter.
    unsafe {
        create(newtype, contents, || {
            Ok(build(bl, &dp, any_type(oldtype)?.as_raw())?)
        })
    }
}

/// `MPI_Aint_add`: `base + disp` as an address.
#[no_mangle]
pub extern "C" fn PMPI_Aint_add(base: isize, disp: isize) -> isize {
    base.wrapping_add(disp)
}

/// `MPI_Aint_add`.
#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: isize, disp: isize) -> isize {
    PMPI_Aint_add(base, disp)
}

/// `MPI_Aint_diff`: `addr1 - addr2`.
#[no_mangle]
pub extern "C" fn PMPI_Aint_diff(addr1: isize, addr2: isize) -> isize {
    addr1.wrapping_sub(addr2)
}

/// `MPI_Aint_diff`.
#[no_mangle]
pub extern "C" fn MPI_Aint_diff(addr1: isize, addr2: isize) -> isize {
    PMPI_Aint_diff(addr1, addr2)
}
