//! Element types that travel in messages, and derived datatypes.
//!
//! * [`Equivalence`]: a Rust type whose values can be sent. Implemented for
//!   the integer and floating-point types, arrays of them, and (with
//!   `#[derive(Equivalence)]`) `#[repr(C)]` structs of such fields.
//! * [`UserDatatype`]: an MPI derived datatype (contiguous, vector,
//!   hvector, indexed, hindexed, indexed block, struct, resized, subarray).
//! * [`View`] / [`MutView`]: a slice seen through a datatype, to send or
//!   receive non-contiguous data (a column of a matrix, a halo).
//!
//! Types whose bytes are all data ([`Equivalence::IS_DENSE`]) travel in
//! place and take the zero-copy protocols; other types go through the
//! convertor, which packs and unpacks by fragment.
//!
//! `Equivalence` is an `unsafe` contract (a wrong implementation would let
//! a receive write an invalid value), so this module allows `unsafe` for its
//! declaration and impls.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};

use oxmpi_btl::mem::MemRegion;
use oxmpi_datatype::{Convertor, Datatype, Primitive};
use oxmpi_pml::{Buffer as PBuffer, Layout};

use crate::error::{Error, ErrorClass, Result};

/// The storage order of [`UserDatatype::subarray`]'s full array.
///
/// ```
/// use oxmpi::{Order, UserDatatype};
/// // Column 1 of a 3x2 column-major (Fortran) array of f32.
/// let f32s = UserDatatype::of::<f32>();
/// let col = UserDatatype::subarray(&[3, 2], &[3, 1], &[0, 1], Order::Fortran, &f32s).unwrap();
/// assert_eq!((col.size(), col.extent()), (12, 24));
/// ```
pub use oxmpi_datatype::Order;

/// A type whose values are sent as the bytes its datatype describes.
///
/// # Safety
/// * [`equivalent_datatype`](Equivalence::equivalent_datatype) must
///   describe only bytes inside one value (from offset 0 to
///   `size_of::<Self>()`), with extent `size_of::<Self>()`;
/// * every byte pattern written at those bytes must leave a valid value
///   (no `bool`, `char`, references or enums inside);
/// * [`IS_DENSE`](Equivalence::IS_DENSE) may be `true` only if the datatype
///   covers every byte of the value (no padding), in order.
///
/// `#[derive(Equivalence)]` checks all three for `#[repr(C)]` structs.
///
/// ```
/// use oxmpi::Equivalence;
///
/// #[derive(Equivalence, Clone, Copy, Default)]
/// #[repr(C)]
/// struct Particle { pos: [f64; 3], id: u32 }
///
/// // 28 bytes of data, 32 in memory: sent through the convertor.
/// assert!(!Particle::IS_DENSE);
/// assert_eq!(Particle::equivalent_datatype().size(), 28);
/// assert_eq!(Particle::equivalent_datatype().extent(), 32);
/// assert!(u64::IS_DENSE);
/// ```
pub unsafe trait Equivalence: Copy + Send + Sync + 'static {
    /// Whether every byte of a value is data (no padding): such values are
    /// sent in place, without the convertor.
    ///
    /// ```
    /// use oxmpi::Equivalence;
    /// assert!(<[u32; 4] as Equivalence>::IS_DENSE);
    /// assert!(<f64 as Equivalence>::IS_DENSE);
    /// ```
    const IS_DENSE: bool;

    /// The datatype of one value (cheap: cached for named types).
    ///
    /// ```
    /// use oxmpi::Equivalence;
    /// let t = <[u16; 3] as Equivalence>::equivalent_datatype();
    /// assert_eq!((t.size(), t.extent()), (6, 6));
    /// assert!(t.is_contiguous());
    /// ```
    fn equivalent_datatype() -> UserDatatype;
}

macro_rules! equivalence {
    ($($t:ty => $p:expr),* $(,)?) => {
        $(
            // SAFETY: primitive numbers: no padding, every bit pattern
            // valid; the datatype is the primitive of the same size.
            unsafe impl Equivalence for $t {
                const IS_DENSE: bool = true;
                fn equivalent_datatype() -> UserDatatype {
                    UserDatatype(Datatype::predefined($p))
                }
            }
        )*
    };
}

#[cfg(target_pointer_width = "64")]
equivalence!(usize => Primitive::U64, isize => Primitive::I64);
#[cfg(target_pointer_width = "32")]
equivalence!(usize => Primitive::U32, isize => Primitive::I32);

equivalence!(
    u8 => Primitive::U8,
    u16 => Primitive::U16,
    u32 => Primitive::U32,
    u64 => Primitive::U64,
    i8 => Primitive::I8,
    i16 => Primitive::I16,
    i32 => Primitive::I32,
    i64 => Primitive::I64,
    f32 => Primitive::F32,
    f64 => Primitive::F64,
);

// SAFETY: 16 bytes, no padding, every pattern valid; described as two
// 8-byte halves (MPI has no 128-bit integer type).
unsafe impl Equivalence for u128 {
    const IS_DENSE: bool = true;
    fn equivalent_datatype() -> UserDatatype {
        static T: OnceLock<Datatype> = OnceLock::new();
        UserDatatype(
            T.get_or_init(|| {
                Datatype::contiguous(2, &Datatype::u64()).unwrap_or_else(|_| Datatype::byte())
            })
            .clone(),
        )
    }
}

// SAFETY: as for u128.
unsafe impl Equivalence for i128 {
    const IS_DENSE: bool = true;
    fn equivalent_datatype() -> UserDatatype {
        u128::equivalent_datatype()
    }
}

// SAFETY: an array has no padding between its elements, so it is dense
// exactly when its element is; its datatype is `N` copies of the element's
// (whose extent is the element's size).
unsafe impl<T: Equivalence, const N: usize> Equivalence for [T; N] {
    const IS_DENSE: bool = T::IS_DENSE;
    fn equivalent_datatype() -> UserDatatype {
        let inner = T::equivalent_datatype();
        match Datatype::contiguous(N as isize, &inner.0) {
            Ok(t) => UserDatatype(t),
            // N copies of a value that exists in memory cannot overflow.
            Err(_) => inner,
        }
    }
}

/// Bytes of data (packed size) of one value of `T`.
pub(crate) fn packed_size_of<T: Equivalence>() -> usize {
    if T::IS_DENSE {
        std::mem::size_of::<T>()
    } else {
        T::equivalent_datatype().size()
    }
}

/// An MPI datatype: a predefined one ([`UserDatatype::of`]) or one built
/// by the MPI constructors. Cheap to clone (shared).
///
/// ```
/// use oxmpi::UserDatatype;
///
/// // One column of a 4x4 row-major matrix of f64.
/// let col = UserDatatype::vector(4, 1, 4, &UserDatatype::of::<f64>()).unwrap();
/// assert_eq!(col.size(), 32);
/// assert_eq!(col.extent(), (3 * 4 + 1) * 8);
/// assert!(!col.is_contiguous());
/// ```
#[derive(Clone, Debug)]
pub struct UserDatatype(pub(crate) Datatype);

fn count(n: usize, what: &str) -> Result<isize> {
    isize::try_from(n).map_err(|_| {
        Error::new(
            ErrorClass::Count,
            format!("{what} {n} does not fit in an MPI count"),
        )
    })
}

fn counts(ns: &[usize], what: &str) -> Result<Vec<isize>> {
    ns.iter().map(|&n| count(n, what)).collect()
}

impl UserDatatype {
    /// The datatype of `T` (`MPI_INT32_T` for `i32`, the struct type of a
    /// derived struct, ...).
    ///
    /// ```
    /// assert_eq!(oxmpi::UserDatatype::of::<i32>().size(), 4);
    /// ```
    pub fn of<T: Equivalence>() -> UserDatatype {
        T::equivalent_datatype()
    }

    /// Wraps a datatype of the `oxmpi-datatype` crate.
    ///
    /// ```
    /// let t = oxmpi::UserDatatype::from_raw(oxmpi_datatype::Datatype::byte());
    /// assert_eq!(t.size(), 1);
    /// ```
    pub fn from_raw(t: Datatype) -> UserDatatype {
        UserDatatype(t)
    }

    /// The underlying `oxmpi-datatype` type.
    ///
    /// ```
    /// assert!(oxmpi::UserDatatype::of::<u8>().as_raw().is_contiguous());
    /// ```
    pub fn as_raw(&self) -> &Datatype {
        &self.0
    }

    /// `MPI_Type_contiguous`: `count` copies of `old` one after another.
    ///
    /// ```
    /// let t = oxmpi::UserDatatype::contiguous(3, &oxmpi::UserDatatype::of::<u16>()).unwrap();
    /// assert_eq!((t.size(), t.is_contiguous()), (6, true));
    /// ```
    pub fn contiguous(n: usize, old: &UserDatatype) -> Result<UserDatatype> {
        Ok(UserDatatype(Datatype::contiguous(
            count(n, "count")?,
            &old.0,
        )?))
    }

    /// `MPI_Type_vector`: `n` blocks of `blocklength` elements of `old`,
    /// block starts `stride` extents of `old` apart.
    ///
    /// ```
    /// let t = oxmpi::UserDatatype::vector(2, 1, 3, &oxmpi::UserDatatype::of::<i32>()).unwrap();
    /// assert_eq!((t.size(), t.extent()), (8, 16));
    /// ```
    pub fn vector(
        n: usize,
        blocklength: usize,
        stride: isize,
        old: &UserDatatype,
    ) -> Result<UserDatatype> {
        Ok(UserDatatype(Datatype::vector(
            count(n, "count")?,
            count(blocklength, "block length")?,
            stride,
            &old.0,
        )?))
    }

    /// `MPI_Type_create_hvector`: [`vector`](Self::vector) with the stride
    /// in bytes.
    ///
    /// ```
    /// let t = oxmpi::UserDatatype::heterogeneous_vector(2, 1, 12, &oxmpi::UserDatatype::of::<i32>()).unwrap();
    /// assert_eq!(t.extent(), 16);
    /// ```
    pub fn heterogeneous_vector(
        n: usize,
        blocklength: usize,
        stride_bytes: isize,
        old: &UserDatatype,
    ) -> Result<UserDatatype> {
        Ok(UserDatatype(Datatype::hvector(
            count(n, "count")?,
            count(blocklength, "block length")?,
            stride_bytes,
            &old.0,
        )?))
    }

    /// `MPI_Type_indexed`: blocks of `blocklengths[i]` elements of `old` at
    /// `displacements[i]` extents of `old`.
    ///
    /// ```
    /// let t = oxmpi::UserDatatype::indexed(&[1, 2], &[3, 0], &oxmpi::UserDatatype::of::<u8>()).unwrap();
    /// assert_eq!(t.size(), 3);
    /// ```
    pub fn indexed(
        blocklengths: &[usize],
        displacements: &[isize],
        old: &UserDatatype,
    ) -> Result<UserDatatype> {
        Ok(UserDatatype(Datatype::indexed(
            &counts(blocklengths, "block length")?,
            displacements,
            &old.0,
        )?))
    }

    /// `MPI_Type_create_hindexed`: [`indexed`](Self::indexed) with
    /// displacements in bytes.
    ///
    /// ```
    /// let t = oxmpi::UserDatatype::heterogeneous_indexed(&[1, 1], &[0, 10], &oxmpi::UserDatatype::of::<u16>()).unwrap();
    /// assert_eq!((t.size(), t.extent()), (4, 12));
    /// ```
    pub fn heterogeneous_indexed(
        blocklengths: &[usize],
        byte_displacements: &[isize],
        old: &UserDatatype,
    ) -> Result<UserDatatype> {
        Ok(UserDatatype(Datatype::hindexed(
            &counts(blocklengths, "block length")?,
            byte_displacements,
            &old.0,
        )?))
    }

    /// `MPI_Type_create_indexed_block`: blocks of one length at
    /// `displacements` (in extents of `old`).
    ///
    /// ```
    /// let t = oxmpi::UserDatatype::indexed_block(2, &[0, 4], &oxmpi::UserDatatype::of::<f32>()).unwrap();
    /// assert_eq!(t.size(), 16);
    /// ```
    pub fn indexed_block(
        blocklength: usize,
        displacements: &[isize],
        old: &UserDatatype,
    ) -> Result<UserDatatype> {
        Ok(UserDatatype(Datatype::indexed_block(
            count(blocklength, "block length")?,
            displacements,
            &old.0,
        )?))
    }

    /// `MPI_Type_create_hindexed_block`: [`indexed_block`](Self::indexed_block)
    /// with displacements in bytes.
    ///
    /// ```
    /// let t = oxmpi::UserDatatype::heterogeneous_indexed_block(1, &[0, 8], &oxmpi::UserDatatype::of::<u32>()).unwrap();
    /// assert_eq!(t.extent(), 12);
    /// ```
    pub fn heterogeneous_indexed_block(
        blocklength: usize,
        byte_displacements: &[isize],
        old: &UserDatatype,
    ) -> Result<UserDatatype> {
        Ok(UserDatatype(Datatype::hindexed_block(
            count(blocklength, "block length")?,
            byte_displacements,
            &old.0,
        )?))
    }

    /// `MPI_Type_create_struct`: `blocklengths[i]` elements of `types[i]`
    /// at byte `displacements[i]`; the extent is padded to the largest
    /// alignment, like a C struct.
    ///
    /// ```
    /// use oxmpi::UserDatatype;
    /// let t = UserDatatype::structured(
    ///     &[1, 1],
    ///     &[0, 8],
    ///     &[UserDatatype::of::<f64>(), UserDatatype::of::<i32>()],
    /// ).unwrap();
    /// assert_eq!((t.size(), t.extent()), (12, 16));
    /// ```
    pub fn structured(
        blocklengths: &[usize],
        displacements: &[isize],
        types: &[UserDatatype],
    ) -> Result<UserDatatype> {
        let types: Vec<Datatype> = types.iter().map(|t| t.0.clone()).collect();
        Ok(UserDatatype(Datatype::structured(
            &counts(blocklengths, "block length")?,
            displacements,
            &types,
        )?))
    }

    /// `MPI_Type_create_resized`: this type with lower bound `lb` and
    /// extent `extent` (how far apart consecutive elements are).
    ///
    /// ```
    /// let t = oxmpi::UserDatatype::of::<i32>().resized(0, 12).unwrap();
    /// assert_eq!((t.size(), t.extent()), (4, 12));
    /// ```
    pub fn resized(&self, lb: isize, extent: isize) -> Result<UserDatatype> {
        Ok(UserDatatype(Datatype::resized(&self.0, lb, extent)?))
    }

    /// `MPI_Type_create_subarray`: the block of `subsizes` starting at
    /// `starts` in an array of `sizes` elements of `old`, stored in `order`.
    ///
    /// ```
    /// use oxmpi::{Order, UserDatatype};
    /// // The 2x2 interior of a 4x4 array.
    /// let t = UserDatatype::subarray(&[4, 4], &[2, 2], &[1, 1], Order::C, &UserDatatype::of::<u8>()).unwrap();
    /// assert_eq!((t.size(), t.extent()), (4, 16));
    /// ```
    pub fn subarray(
        sizes: &[usize],
        subsizes: &[usize],
        starts: &[usize],
        order: Order,
        old: &UserDatatype,
    ) -> Result<UserDatatype> {
        Ok(UserDatatype(Datatype::subarray(
            &counts(sizes, "size")?,
            &counts(subsizes, "subsize")?,
            &counts(starts, "start")?,
            order,
            &old.0,
        )?))
    }

    /// `MPI_Type_size`: bytes of data in one element.
    ///
    /// ```
    /// assert_eq!(oxmpi::UserDatatype::of::<f32>().size(), 4);
    /// ```
    pub fn size(&self) -> usize {
        self.0.size()
    }

    /// `MPI_Type_get_extent`'s extent: the span one element occupies.
    ///
    /// ```
    /// assert_eq!(oxmpi::UserDatatype::of::<f32>().extent(), 4);
    /// ```
    pub fn extent(&self) -> isize {
        self.0.extent()
    }

    /// `MPI_Type_get_extent`'s lower bound.
    ///
    /// ```
    /// assert_eq!(oxmpi::UserDatatype::of::<f32>().lower_bound(), 0);
    /// ```
    pub fn lower_bound(&self) -> isize {
        self.0.lb()
    }

    /// Whether `count` elements are one contiguous run of bytes (then they
    /// take the zero-copy protocols).
    ///
    /// ```
    /// assert!(oxmpi::UserDatatype::of::<f32>().is_contiguous());
    /// ```
    pub fn is_contiguous(&self) -> bool {
        self.0.is_contiguous()
    }
}

/// A layout for the PML: the convertor of `count` elements, with the
/// datatype origin at `origin` in the buffer's region.
#[derive(Debug)]
struct TypedLayout {
    conv: Convertor,
    origin: isize,
}

impl Layout for TypedLayout {
    fn packed_len(&self) -> usize {
        self.conv.packed_size()
    }

    fn pack(&self, base: &MemRegion, offset: usize, out: &mut [u8]) -> usize {
        // Only the blocks the datatype covers are read (padding may be
        // uninitialized); a strided run of blocks is one gather. Bounds
        // were checked when the layout was built, and again by gather.
        let mut pos = 0;
        let mut ok = true;
        let origin = self.origin;
        let r = self
            .conv
            .for_each_block(offset, out.len(), |off, stride, n, count| {
                let bytes = n * count;
                ok &= base.gather(origin + off, stride, n, count, &mut out[pos..pos + bytes]);
                pos += bytes;
            });
        if r.is_err() || !ok {
            return 0;
        }
        pos
    }

    fn unpack(&self, base: &MemRegion, offset: usize, data: &[u8]) -> usize {
        let mut pos = 0;
        let mut ok = true;
        let origin = self.origin;
        let r = self
            .conv
            .for_each_block(offset, data.len(), |off, stride, n, count| {
                let bytes = n * count;
                ok &= base.scatter(origin + off, stride, n, count, &data[pos..pos + bytes]);
                pos += bytes;
            });
        if r.is_err() || !ok {
            return 0;
        }
        pos
    }
}

/// The PML buffer for `count` elements of `dt` in `region`, the datatype
/// origin at the region's start: the contiguous part when the layout is
/// contiguous, else a convertor.
fn typed_buffer(region: MemRegion, dt: &Datatype, count: usize) -> Result<PBuffer> {
    typed_buffer_at(region, 0, dt, count)
}

/// [`typed_buffer`] with the datatype origin at position `origin` of
/// `region` (data may lie before the origin: negative displacements).
pub(crate) fn typed_buffer_at(
    region: MemRegion,
    origin: isize,
    dt: &Datatype,
    count: usize,
) -> Result<PBuffer> {
    let conv = Convertor::new(dt, count)?;
    conv.check_buffer(region.len(), origin)?;
    if let Some(range) = conv.contiguous_range() {
        let (start, len) = (origin + range.start, (range.end - range.start) as usize);
        if let Some(r) = usize::try_from(start)
            .ok()
            .and_then(|s| region.slice(s, len))
        {
            return Ok(PBuffer::Contig(r));
        }
    }
    Ok(PBuffer::Typed(
        region,
        Arc::new(TypedLayout { conv, origin }),
    ))
}

/// The PML buffer of a slice of `T`.
pub(crate) fn slice_buffer<T: Equivalence>(region: MemRegion, len: usize) -> Result<PBuffer> {
    if T::IS_DENSE {
        return Ok(PBuffer::Contig(region));
    }
    typed_buffer(region, &T::equivalent_datatype().0, len)
}

/// Memory of a slice of `T` seen through a datatype: `count` elements of
/// `datatype` whose origin is the slice's first byte (`MPI_Send(buf,
/// count, datatype)`). Built by checking that every byte the datatype
/// reaches is inside the slice.
///
/// ```
/// use oxmpi::{UserDatatype, View};
/// let m = [0f64; 16]; // 4x4, row-major
/// let col = UserDatatype::vector(4, 1, 4, &UserDatatype::of::<f64>()).unwrap();
/// assert!(View::with_count_and_datatype(&m[..], 1, &col).is_ok());
/// // Two columns would reach past the end of the matrix.
/// assert!(View::with_count_and_datatype(&m[..], 2, &col.resized(0, 8).unwrap()).is_ok());
/// assert!(View::with_count_and_datatype(&m[..], 5, &col.resized(0, 8).unwrap()).is_err());
/// ```
#[derive(Debug)]
pub struct View<'a, T> {
    region: MemRegion,
    datatype: UserDatatype,
    count: usize,
    _buf: PhantomData<&'a [T]>,
}

/// A mutable slice seen through a datatype, for receives: only the bytes
/// the datatype describes are written.
///
/// ```
/// use oxmpi::{MutView, UserDatatype};
/// let mut m = [0i32; 8];
/// let evens = UserDatatype::vector(4, 1, 2, &UserDatatype::of::<i32>()).unwrap();
/// let v = MutView::with_count_and_datatype(&mut m[..], 1, &evens).unwrap();
/// # drop(v);
/// ```
#[derive(Debug)]
pub struct MutView<'a, T> {
    region: MemRegion,
    datatype: UserDatatype,
    count: usize,
    _buf: PhantomData<&'a mut [T]>,
}

fn check_view<T: Equivalence>(bytes: usize, count: usize, datatype: &UserDatatype) -> Result<()> {
    if !T::IS_DENSE {
        return Err(Error::new(
            ErrorClass::Type,
            "a view needs an element type without padding (its padding bytes are not data)",
        ));
    }
    Convertor::new(&datatype.0, count)?.check_buffer(bytes, 0)?;
    Ok(())
}

impl<'a, T: Equivalence> View<'a, T> {
    /// `count` elements of `datatype` in `buf`. Errors with
    /// [`ErrorClass::Buffer`] when the datatype reaches outside `buf`.
    ///
    /// ```
    /// use oxmpi::{ErrorClass, UserDatatype, View};
    /// let row = [1u8, 2, 3, 4, 5, 6];
    /// let pair = UserDatatype::contiguous(2, &UserDatatype::of::<u8>()).unwrap();
    /// assert!(View::with_count_and_datatype(&row[..], 3, &pair).is_ok());
    /// let e = View::with_count_and_datatype(&row[..], 4, &pair).unwrap_err();
    /// assert_eq!(e.class(), ErrorClass::Buffer);
    /// ```
    pub fn with_count_and_datatype(
        buf: &'a [T],
        count: usize,
        datatype: &UserDatatype,
    ) -> Result<View<'a, T>> {
        let region = crate::buffer::slice_region(buf);
        check_view::<T>(region.len(), count, datatype)?;
        Ok(View {
            region,
            datatype: datatype.clone(),
            count,
            _buf: PhantomData,
        })
    }
}

impl<'a, T: Equivalence> MutView<'a, T> {
    /// `count` elements of `datatype` in `buf`. Errors with
    /// [`ErrorClass::Buffer`] when the datatype reaches outside `buf`.
    ///
    /// ```
    /// use oxmpi::{MutView, UserDatatype};
    /// let mut grid = [0f64; 12]; // 3 rows of 4, row-major
    /// let col = UserDatatype::vector(3, 1, 4, &UserDatatype::of::<f64>()).unwrap();
    /// // Column 3: the view starts at its first element.
    /// assert!(MutView::with_count_and_datatype(&mut grid[3..], 1, &col).is_ok());
    /// // From row 1 on, three rows do not fit.
    /// assert!(MutView::with_count_and_datatype(&mut grid[4..], 1, &col).is_err());
    /// ```
    pub fn with_count_and_datatype(
        buf: &'a mut [T],
        count: usize,
        datatype: &UserDatatype,
    ) -> Result<MutView<'a, T>> {
        let region = crate::buffer::slice_region_mut(buf);
        check_view::<T>(region.len(), count, datatype)?;
        Ok(MutView {
            region,
            datatype: datatype.clone(),
            count,
            _buf: PhantomData,
        })
    }
}

// SAFETY: the region is the borrowed slice (valid and initialized for 'a;
// dense elements, checked at construction); the layout reads only inside
// it (checked at construction).
unsafe impl<T: Equivalence> crate::buffer::Buffer for View<'_, T> {
    fn pml_buffer(&self) -> Result<PBuffer> {
        typed_buffer(self.region, &self.datatype.0, self.count)
    }
    fn count(&self) -> usize {
        self.count
    }
}

// SAFETY: the region is the exclusively borrowed slice; the layout writes
// only inside it, and any bytes are a valid `T` (Equivalence).
unsafe impl<T: Equivalence> crate::buffer::BufferMut for MutView<'_, T> {
    fn pml_buffer_mut(&mut self) -> Result<PBuffer> {
        typed_buffer(self.region, &self.datatype.0, self.count)
    }
    fn count(&self) -> usize {
        self.count
    }
}
