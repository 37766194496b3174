//! The rest of the datatype chapter: distributed arrays
//! (`MPI_Type_create_darray`), the Fortran 90 parameterized types
//! (`MPI_Type_create_f90_*`), `MPI_Type_match_size`,
//! `MPI_Type_get_value_index`, and the portable `external32`
//! representation (`MPI_Pack_external`, `MPI_Unpack_external`,
//! `MPI_Pack_external_size`, and their `_c` forms).
//!
//! The f90 types are predefined types in the standard's sense (they cannot
//! be freed, the same arguments give the same handle) that still report
//! their constructor (`MPI_COMBINER_F90_*` and its `p`/`r`): each is a
//! permanent entry of the type table, made on first use, holding a dup of
//! the named type it stands for.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Mutex;

use oxmpi::{Error, ErrorClass, UserDatatype};
use oxmpi_datatype::{Convertor, Datatype, Distribution, Order};

use crate::dtype::{
    any_type, array, create, lcount, region, type_error, Contents, COMBINER_DARRAY,
    COMBINER_F90_COMPLEX, COMBINER_F90_INTEGER, COMBINER_F90_REAL, ORDER_C, ORDER_FORTRAN,
    UNDEFINED,
};
use crate::entry;
use crate::env::put;
use crate::state::{lock, null_arg, state, DATATYPE_NULL};
use crate::types::{new_type_with, predefined};

/// `MPI_DISTRIBUTE_BLOCK`.
pub const DISTRIBUTE_BLOCK: c_int = 17;
/// `MPI_DISTRIBUTE_CYCLIC`.
pub const DISTRIBUTE_CYCLIC: c_int = 18;
/// `MPI_DISTRIBUTE_NONE`.
pub const DISTRIBUTE_NONE: c_int = 16;
/// `MPI_DISTRIBUTE_DFLT_DARG`.
pub const DISTRIBUTE_DFLT_DARG: c_int = 19;
/// `MPIX_TYPECLASS_LOGICAL`.
pub const TYPECLASS_LOGICAL: c_int = 191;
/// `MPI_TYPECLASS_INTEGER`.
pub const TYPECLASS_INTEGER: c_int = 192;
/// `MPI_TYPECLASS_REAL`.
pub const TYPECLASS_REAL: c_int = 193;
/// `MPI_TYPECLASS_COMPLEX`.
pub const TYPECLASS_COMPLEX: c_int = 194;

// Predefined handles of the standard ABI used here.
const INT: usize = 0x209;
const SHORT: usize = 0x208;
const LONG: usize = 0x20a;
const FLOAT: usize = 0x210;
const DOUBLE: usize = 0x214;
const LONG_DOUBLE: usize = 0x220;
const INTEGER: usize = 0x219;
const REAL: usize = 0x21a;
const DOUBLE_PRECISION: usize = 0x21c;

/// The Fortran sized types by type class: `(size, handle)`
/// (`MPI_LOGICALn`, `MPI_INTEGERn`, `MPI_REALn`, `MPI_COMPLEXn`).
const SIZED: &[(c_int, &[(c_int, usize)])] = &[
    (
        TYPECLASS_LOGICAL,
        &[(1, 0x2c0), (2, 0x2c8), (4, 0x2d0), (8, 0x2d8), (16, 0x2e0)],
    ),
    (
        TYPECLASS_INTEGER,
        &[(1, 0x2c1), (2, 0x2c9), (4, 0x2d1), (8, 0x2d9), (16, 0x2e1)],
    ),
    (
        TYPECLASS_REAL,
        &[(2, 0x2ca), (4, 0x2d2), (8, 0x2da), (16, 0x2e2)],
    ),
    (
        TYPECLASS_COMPLEX,
        &[(4, 0x2d3), (8, 0x2db), (16, 0x2e3), (32, 0x2eb)],
    ),
];

/// The one data representation these calls know.
///
/// # Safety
/// `datarep` must be null or a NUL-terminated string.
unsafe fn check_datarep(datarep: *const c_char) -> Result<(), Error> {
    if datarep.is_null() {
        return Err(null_arg("datarep"));
    }
    // SAFETY: not null; the caller's NUL-terminated string.
    let rep = unsafe { CStr::from_ptr(datarep) };
    if rep.to_bytes() == b"external32" {
        Ok(())
    } else {
        Err(Error::new(
            ErrorClass::UnsupportedDatarep,
            format!(
                "data representation {:?}: only \"external32\" is defined for MPI_Pack_external",
                rep.to_string_lossy()
            ),
        ))
    }
}

/// A buffer size or position, checked non-negative.
fn nonneg<T: TryInto<usize> + std::fmt::Display + Copy>(v: T, what: &str) -> Result<usize, Error> {
    v.try_into()
        .map_err(|_| Error::new(ErrorClass::Arg, format!("{what} {v} is negative")))
}

/// `MPI_Pack_external` of `count` elements of handle `dt` at `inbuf` into
/// `outbuf` (`outsize` bytes) at `pos`; returns the new position.
///
/// # Safety
/// The buffers must be valid as `MPI_Pack_external` requires.
unsafe fn pack_external(
    (inbuf, count, dt): (*const c_void, usize, usize),
    outbuf: *mut c_void,
    outsize: usize,
    pos: usize,
) -> Result<usize, Error> {
    let t = state()?.datatype(dt)?;
    let t = t.as_raw();
    let n = t.external32_size(count)?;
    let end = pos.checked_add(n).filter(|&e| e <= outsize).ok_or_else(|| {
        Error::new(
            ErrorClass::Truncate,
            format!("packing {n} external32 bytes at position {pos} overflows the {outsize}-byte output buffer"),
        )
    })?;
    if n == 0 {
        return Ok(end);
    }
    if outbuf.is_null() {
        return Err(Error::new(ErrorClass::Buffer, "outbuf is a null pointer"));
    }
    let conv = Convertor::new(t, count)?;
    let (start, len, origin) = region(inbuf, &conv)?
        .ok_or_else(|| Error::new(ErrorClass::Intern, "data without a span"))?;
    // SAFETY: the caller promises the input elements are readable: exactly
    // this span around `inbuf`; `region` checked it is a real range.
    let base = unsafe { std::slice::from_raw_parts(start, len) };
    // SAFETY: the caller promises `outsize` writable bytes at `outbuf`, and
    // `pos + n <= outsize`.
    let out = unsafe { std::slice::from_raw_parts_mut(outbuf.cast::<u8>().add(pos), n) };
    let done = t.pack_external32(base, origin, count, out)?;
    if done != n {
        return Err(Error::new(ErrorClass::Intern, "short external32 pack"));
    }
    Ok(end)
}

/// `MPI_Unpack_external` from `inbuf` (`insize` bytes) at `pos` into
/// `count` elements of handle `dt` at `outbuf`; returns the new position.
///
/// # Safety
/// The buffers must be valid as `MPI_Unpack_external` requires.
unsafe fn unpack_external(
    inbuf: *const c_void,
    insize: usize,
    pos: usize,
    (outbuf, count, dt): (*mut c_void, usize, usize),
) -> Result<usize, Error> {
    let t = state()?.datatype(dt)?;
    let t = t.as_raw();
    let n = t.external32_size(count)?;
    let end = pos.checked_add(n).filter(|&e| e <= insize).ok_or_else(|| {
        Error::new(
            ErrorClass::Truncate,
            format!("unpacking {n} external32 bytes at position {pos} reads past the {insize}-byte input buffer"),
        )
    })?;
    if n == 0 {
        return Ok(end);
    }
    if inbuf.is_null() {
        return Err(Error::new(ErrorClass::Buffer, "inbuf is a null pointer"));
    }
    let conv = Convertor::new(t, count)?;
    let (start, len, origin) = region(outbuf, &conv)?
        .ok_or_else(|| Error::new(ErrorClass::Intern, "data without a span"))?;
    // SAFETY: the caller promises `insize` readable bytes at `inbuf`, and
    // `pos + n <= insize`.
    let input = unsafe { std::slice::from_raw_parts(inbuf.cast::<u8>().add(pos), n) };
    // SAFETY: the caller promises the output elements are writable: exactly
    // this span around `outbuf`; `region` checked it is a real range.
    let base = unsafe { std::slice::from_raw_parts_mut(start.cast_mut(), len) };
    let done = t.unpack_external32(base, origin, count, input)?;
    if done != n {
        return Err(Error::new(ErrorClass::Intern, "short external32 unpack"));
    }
    Ok(end)
}

/// Reads `*p` (a position), checked non-negative.
///
/// # Safety
/// `p` must be null or valid for a read.
unsafe fn read_pos<T: Copy + TryInto<usize> + std::fmt::Display>(
    p: *const T,
) -> Result<usize, Error> {
    if p.is_null() {
        return Err(null_arg("position"));
    }
    // SAFETY: not null; valid per the caller.
    nonneg(unsafe { p.read() }, "position")
}

/// The checked arguments of `MPI_Type_create_darray` (any width of
/// `gsizes`), and the type.
#[allow(clippy::too_many_arguments)]
fn darray(
    size: c_int,
    rank: c_int,
    gsizes: &[isize],
    distribs: &[c_int],
    dargs: &[c_int],
    psizes: &[c_int],
    order: c_int,
    oldtype: usize,
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
    let mut dist = Vec::with_capacity(distribs.len());
    for (i, (&d, &a)) in distribs.iter().zip(dargs).enumerate() {
        let darg = match a {
            DISTRIBUTE_DFLT_DARG => None,
            a if a > 0 => Some(a as isize),
            a => {
                return Err(Error::new(
                    ErrorClass::Arg,
                    format!(
                    "darg {a} of dimension {i} is neither positive nor MPI_DISTRIBUTE_DFLT_DARG"
                ),
                ))
            }
        };
        dist.push(match d {
            DISTRIBUTE_BLOCK => Distribution::Block(darg),
            DISTRIBUTE_CYCLIC => Distribution::Cyclic(darg),
            DISTRIBUTE_NONE => Distribution::None,
            d => {
                return Err(Error::new(
                    ErrorClass::Arg,
                    format!("distribution {d} of dimension {i} is not an MPI_DISTRIBUTE_ constant"),
                ))
            }
        });
    }
    let psizes: Vec<isize> = psizes.iter().map(|&p| p as isize).collect();
    let old = any_type(oldtype)?;
    Ok(Datatype::darray(
        size as isize,
        rank as isize,
        gsizes,
        &dist,
        &psizes,
        order,
        old.as_raw(),
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

/// An f90 type's constructor: `(combiner, p or r, r or 0)`.
type F90Key = (c_int, c_int, c_int);

/// The handles of the f90 types made so far.
static F90: Mutex<Option<HashMap<F90Key, usize>>> = Mutex::new(None);

/// Whether a type with these contents is one of the f90 types (predefined:
/// not freed).
pub fn is_f90(contents: &Contents) -> bool {
    matches!(
        contents.combiner,
        COMBINER_F90_INTEGER | COMBINER_F90_REAL | COMBINER_F90_COMPLEX
    )
}

/// The f90 type of `(combiner, p, r)` standing for the named type `named`:
/// the same handle for the same arguments.
///
/// # Safety
/// `newtype` must be null or valid for a write.
unsafe fn f90(
    combiner: c_int,
    ints: &[c_int],
    named: usize,
    newtype: *mut usize,
) -> Result<(), Error> {
    if newtype.is_null() {
        return Err(null_arg("newtype"));
    }
    let key = (combiner, ints[0], ints.get(1).copied().unwrap_or(0));
    let s = state()?;
    let mut cache = lock(&F90);
    let map = cache.get_or_insert_with(HashMap::new);
    let known = map
        .get(&key)
        .copied()
        .filter(|&h| lock(&s.types).get(h).is_some());
    let h = match known {
        Some(h) => h,
        None => {
            let t = predefined(named)
                .ok_or_else(|| Error::new(ErrorClass::Intern, "no such named type"))?;
            let h = new_type_with(
                UserDatatype::from_raw(t.as_raw().dup()),
                Contents::new(combiner).ints(ints.iter().copied()),
            )?;
            if let Some(t) = lock(&s.types).get_mut(h) {
                t.committed = true;
            }
            map.insert(key, h);
            h
        }
    };
    // SAFETY: not null; the caller's out-parameter.
    unsafe { put(newtype, h, "newtype") }
}

/// Whether `x` is `MPI_UNDEFINED` or at most `max`.
fn within(x: c_int, max: c_int) -> bool {
    x == UNDEFINED || (0..=max).contains(&x)
}

/// The Fortran `REAL` kind for precision `p` and exponent range `r`
/// (`MPI_UNDEFINED`: not asked for): `(p, r)` of IEEE single, double and
/// quadruple precision in turn, as `selected_real_kind` picks.
fn real_kind(p: c_int, r: c_int) -> Result<usize, Error> {
    if p == UNDEFINED && r == UNDEFINED {
        return Err(Error::new(
            ErrorClass::Arg,
            "MPI_Type_create_f90_real/complex: p and r cannot both be MPI_UNDEFINED",
        ));
    }
    for (maxp, maxr, size) in [(6, 37, 4), (15, 307, 8), (33, 4931, 16)] {
        if within(p, maxp) && within(r, maxr) {
            return Ok(size);
        }
    }
    Err(Error::new(
        ErrorClass::Arg,
        format!("no Fortran real kind has precision {p} and exponent range {r}"),
    ))
}

/// The handle of typeclass `class`'s named type of `size` bytes.
fn sized(class: c_int, size: c_int) -> Option<usize> {
    SIZED
        .iter()
        .find(|(c, _)| *c == class)?
        .1
        .iter()
        .find(|(s, _)| *s == size)
        .map(|&(_, h)| h)
}

entry! {
    /// `MPI_Pack_external`: appends the `external32` image of `incount`
    /// elements at `*position` of `outbuf` (`MPI_ERR_TRUNCATE` if it does
    /// not fit in `outsize` bytes; `MPI_ERR_CONVERSION` for a `long` outside
    /// 32 bits).
    fn MPI_Pack_external / PMPI_Pack_external(
        datarep: *const c_char, inbuf: *const c_void, incount: c_int, datatype: usize,
        outbuf: *mut c_void, outsize: isize, position: *mut isize,
    ) comm = None; {
        // SAFETY: the caller's string.
        unsafe { check_datarep(datarep) }?;
        let n = nonneg(incount, "incount").map_err(|e| Error::new(ErrorClass::Count, e.message()))?;
        let size = nonneg(outsize, "outsize")?;
        // SAFETY: the caller's in/out-parameter.
        let pos = unsafe { read_pos(position.cast_const()) }?;
        // SAFETY: the caller's buffers.
        let end = unsafe { pack_external((inbuf, n, datatype), outbuf, size, pos) }?;
        // SAFETY: checked non-null above; `end <= outsize`.
        unsafe { put(position, end as isize, "position") }
    }

    /// `MPI_Pack_external_c`.
    fn MPI_Pack_external_c / PMPI_Pack_external_c(
        datarep: *const c_char, inbuf: *const c_void, incount: i64, datatype: usize,
        outbuf: *mut c_void, outsize: i64, position: *mut i64,
    ) comm = None; {
        // SAFETY: the caller's string.
        unsafe { check_datarep(datarep) }?;
        let n = lcount(incount)?;
        let size = nonneg(outsize, "outsize")?;
        // SAFETY: the caller's in/out-parameter.
        let pos = unsafe { read_pos(position.cast_const()) }?;
        // SAFETY: the caller's buffers.
        let end = unsafe { pack_external((inbuf, n, datatype), outbuf, size, pos) }?;
        // SAFETY: checked non-null above; `end <= outsize`.
        unsafe { put(position, end as i64, "position") }
    }

    /// `MPI_Unpack_external`: reads `outcount` elements from the
    /// `external32` image at `*position` of `inbuf` (`MPI_ERR_TRUNCATE` if
    /// `insize` bytes do not hold them).
    fn MPI_Unpack_external / PMPI_Unpack_external(
        datarep: *const c_char, inbuf: *const c_void, insize: isize, position: *mut isize,
        outbuf: *mut c_void, outcount: c_int, datatype: usize,
    ) comm = None; {
        // SAFETY: the caller's string.
        unsafe { check_datarep(datarep) }?;
        let n = nonneg(outcount, "outcount").map_err(|e| Error::new(ErrorClass::Count, e.message()))?;
        let size = nonneg(insize, "insize")?;
        // SAFETY: the caller's in/out-parameter.
        let pos = unsafe { read_pos(position.cast_const()) }?;
        // SAFETY: the caller's buffers.
        let end = unsafe { unpack_external(inbuf, size, pos, (outbuf, n, datatype)) }?;
        // SAFETY: checked non-null above; `end <= insize`.
        unsafe { put(position, end as isize, "position") }
    }

    /// `MPI_Unpack_external_c`.
    fn MPI_Unpack_external_c / PMPI_Unpack_external_c(
        datarep: *const c_char, inbuf: *const c_void, insize: i64, position: *mut i64,
        outbuf: *mut c_void, outcount: i64, datatype: usize,
    ) comm = None; {
        // SAFETY: the caller's string.
        unsafe { check_datarep(datarep) }?;
        let n = lcount(outcount)?;
        let size = nonneg(insize, "insize")?;
        // SAFETY: the caller's in/out-parameter.
        let pos = unsafe { read_pos(position.cast_const()) }?;
        // SAFETY: the caller's buffers.
        let end = unsafe { unpack_external(inbuf, size, pos, (outbuf, n, datatype)) }?;
        // SAFETY: checked non-null above; `end <= insize`.
        unsafe { put(position, end as i64, "position") }
    }

    /// `MPI_Pack_external_size`: bytes of the `external32` image of
    /// `incount` elements (exact: every element has a fixed size there).
    fn MPI_Pack_external_size / PMPI_Pack_external_size(
        datarep: *const c_char, incount: c_int, datatype: usize, size: *mut isize,
    ) comm = None; {
        // SAFETY: the caller's string.
        unsafe { check_datarep(datarep) }?;
        let n = nonneg(incount, "incount").map_err(|e| Error::new(ErrorClass::Count, e.message()))?;
        let b = any_type(datatype)?.as_raw().external32_size(n)?;
        // SAFETY: the caller's out-parameter; `b <= isize::MAX`.
        unsafe { put(size, b as isize, "size") }
    }

    /// `MPI_Pack_external_size_c`.
    fn MPI_Pack_external_size_c / PMPI_Pack_external_size_c(
        datarep: *const c_char, incount: i64, datatype: usize, size: *mut i64,
    ) comm = None; {
        // SAFETY: the caller's string.
        unsafe { check_datarep(datarep) }?;
        let n = lcount(incount)?;
        let b = any_type(datatype)?.as_raw().external32_size(n)?;
        // SAFETY: the caller's out-parameter; `b <= isize::MAX`.
        unsafe { put(size, b as i64, "size") }
    }

    /// `MPI_Type_create_darray`: the part of a distributed array that
    /// process `rank` of `size` owns (see `Datatype::darray`).
    fn MPI_Type_create_darray / PMPI_Type_create_darray(
        size: c_int, rank: c_int, ndims: c_int, gsizes: *const c_int, distribs: *const c_int,
        dargs: *const c_int, psizes: *const c_int, order: c_int, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        let nd = ndims_of(ndims)?;
        // SAFETY: the caller's arrays of `ndims` entries.
        let (gs, di, da, ps) = unsafe {
            (
                array(gsizes, nd, "array_of_gsizes")?,
                array(distribs, nd, "array_of_distribs")?,
                array(dargs, nd, "array_of_dargs")?,
                array(psizes, nd, "array_of_psizes")?,
            )
        };
        let contents = Contents::new(COMBINER_DARRAY)
            .ints([size, rank, ndims])
            .ints(gs.iter().copied())
            .ints(di.iter().copied())
            .ints(da.iter().copied())
            .ints(ps.iter().copied())
            .ints([order])
            .types([oldtype]);
        let wide: Vec<isize> = gs.iter().map(|&g| g as isize).collect();
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || darray(size, rank, &wide, di, da, ps, order, oldtype)) }
    }

    /// `MPI_Type_create_darray_c`: the global sizes as `MPI_Count`s (its
    /// contents: the other arguments as integers, the sizes as large
    /// counts).
    fn MPI_Type_create_darray_c / PMPI_Type_create_darray_c(
        size: c_int, rank: c_int, ndims: c_int, gsizes: *const i64, distribs: *const c_int,
        dargs: *const c_int, psizes: *const c_int, order: c_int, oldtype: usize, newtype: *mut usize,
    ) comm = None; {
        let nd = ndims_of(ndims)?;
        // SAFETY: the caller's arrays of `ndims` entries.
        let (gs, di, da, ps) = unsafe {
            (
                array(gsizes, nd, "array_of_gsizes")?,
                array(distribs, nd, "array_of_distribs")?,
                array(dargs, nd, "array_of_dargs")?,
                array(psizes, nd, "array_of_psizes")?,
            )
        };
        let contents = Contents::new(COMBINER_DARRAY)
            .ints([size, rank, ndims])
            .ints(di.iter().copied())
            .ints(da.iter().copied())
            .ints(ps.iter().copied())
            .ints([order])
            .counts(gs.iter().copied())
            .types([oldtype]);
        let wide = gs
            .iter()
            .map(|&g| isize::try_from(g).map_err(|_| Error::new(ErrorClass::Arg, format!("global size {g} does not fit in an address"))))
            .collect::<Result<Vec<isize>, Error>>()?;
        // SAFETY: the caller's out-parameter.
        unsafe { create(newtype, contents, || darray(size, rank, &wide, di, da, ps, order, oldtype)) }
    }

    /// `MPI_Type_create_f90_integer`: the `INTEGER` kind of decimal range
    /// `r` (`MPI_INTEGER1` .. `MPI_INTEGER16` as `selected_int_kind` picks).
    fn MPI_Type_create_f90_integer / PMPI_Type_create_f90_integer(r: c_int, newtype: *mut usize) comm = None; {
        let size = [(2, 1), (4, 2), (9, 4), (18, 8), (38, 16)]
            .iter()
            .find(|&&(max, _)| (0..=max).contains(&r))
            .map(|&(_, s)| s)
            .ok_or_else(|| Error::new(ErrorClass::Arg, format!("no Fortran integer kind has decimal range {r}")))?;
        let named = sized(TYPECLASS_INTEGER, size).expect("integer kinds");
        // SAFETY: the caller's out-parameter.
        unsafe { f90(COMBINER_F90_INTEGER, &[r], named, newtype) }
    }

    /// `MPI_Type_create_f90_real`: the `REAL` kind of precision `p` and
    /// exponent range `r` (`MPI_REAL4`, `MPI_REAL8` or `MPI_REAL16`).
    fn MPI_Type_create_f90_real / PMPI_Type_create_f90_real(p: c_int, r: c_int, newtype: *mut usize) comm = None; {
        let named = sized(TYPECLASS_REAL, real_kind(p, r)? as c_int).expect("real kinds");
        // SAFETY: the caller's out-parameter.
        unsafe { f90(COMBINER_F90_REAL, &[p, r], named, newtype) }
    }

    /// `MPI_Type_create_f90_complex`: the `COMPLEX` of that `REAL` kind
    /// (`MPI_COMPLEX8`, `MPI_COMPLEX16` or `MPI_COMPLEX32`).
    fn MPI_Type_create_f90_complex / PMPI_Type_create_f90_complex(p: c_int, r: c_int, newtype: *mut usize) comm = None; {
        let named = sized(TYPECLASS_COMPLEX, 2 * real_kind(p, r)? as c_int).expect("complex kinds");
        // SAFETY: the caller's out-parameter.
        unsafe { f90(COMBINER_F90_COMPLEX, &[p, r], named, newtype) }
    }

    /// `MPI_Type_match_size`: the Fortran sized type (`MPI_INTEGERn`,
    /// `MPI_REALn`, `MPI_COMPLEXn`, `MPI_LOGICALn` for
    /// `MPIX_TYPECLASS_LOGICAL`) of `size` bytes; `MPI_ERR_ARG` if there is
    /// none.
    fn MPI_Type_match_size / PMPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut usize) comm = None; {
        if !SIZED.iter().any(|(c, _)| *c == typeclass) {
            return Err(Error::new(ErrorClass::Arg, format!("{typeclass} is not an MPI_TYPECLASS_ constant")));
        }
        let h = sized(typeclass, size).ok_or_else(|| {
            Error::new(ErrorClass::Arg, format!("no type of class {typeclass} has {size} bytes"))
        })?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(datatype, h, "datatype") }
    }

    /// `MPI_Type_get_value_index`: the predefined pair type of
    /// `MPI_MINLOC`/`MPI_MAXLOC` for that value type and index type, or
    /// `MPI_DATATYPE_NULL` if there is none (the reductions take only
    /// those).
    fn MPI_Type_get_value_index / PMPI_Type_get_value_index(
        value_type: usize, index_type: usize, pair_type: *mut usize,
    ) comm = None; {
        for h in [value_type, index_type] {
            if h == DATATYPE_NULL {
                return Err(type_error("MPI_DATATYPE_NULL is not a datatype"));
            }
            any_type(h)?;
        }
        let pair = match (value_type, index_type) {
            (FLOAT, INT) => 0x228,
            (DOUBLE, INT) => 0x229,
            (LONG, INT) => 0x22a,
            (INT, INT) => 0x22b,
            (SHORT, INT) => 0x22c,
            (LONG_DOUBLE, INT) => 0x22d,
            (REAL, REAL) => 0x230,
            (DOUBLE_PRECISION, DOUBLE_PRECISION) => 0x231,
            (INTEGER, INTEGER) => 0x232,
            _ => DATATYPE_NULL,
        };
        // SAFETY: the caller's out-parameter.
        unsafe { put(pair_type, pair, "pair_type") }
    }
}
