//! Typed user memory as the PML's buffers: the one place of this crate
//! that turns references into [`MemRegion`]s (an `unsafe` promise).
//!
//! [`Buffer`] is implemented for `T`, `[T]` and `Vec<T>` when
//! `T: Equivalence` (arrays are `Equivalence` themselves), and for
//! [`View`](crate::View); [`BufferMut`] for the same and
//! [`MutView`](crate::MutView), for receives. Dense element types are
//! contiguous and take the PML's zero-copy protocols; others are packed by
//! the convertor.
#![allow(unsafe_code)]

use oxmpi_btl::mem::MemRegion;
use oxmpi_pml::Buffer as PBuffer;

use crate::datatype::{slice_buffer, Equivalence};
use crate::error::Result;

/// Memory a send reads.
///
/// # Safety
/// The buffer [`pml_buffer`](Buffer::pml_buffer) returns must cover only
/// bytes of `self` (readable for as long as `self` is borrowed), and every
/// byte it reads must be initialized.
///
/// ```
/// use oxmpi::traits::*;
///
/// // A value, a slice or a vector of `Equivalence` elements can be sent.
/// fn elements<B: Buffer + ?Sized>(buf: &B) -> usize {
///     buf.count()
/// }
/// assert_eq!(elements(&7u64), 1);
/// assert_eq!(elements(&[1.0f32, 2.0][..]), 2);
/// assert_eq!(elements(&vec![0i16; 5]), 5);
/// ```
pub unsafe trait Buffer {
    /// The message as the PML sees it (internal).
    #[doc(hidden)]
    fn pml_buffer(&self) -> Result<PBuffer>;
    /// Number of elements.
    ///
    /// ```
    /// use oxmpi::Buffer;
    /// // An array is one value (of an array type); its slice is N elements.
    /// assert_eq!(Buffer::count(&[1u8, 2, 3]), 1);
    /// assert_eq!(Buffer::count(&[1u8, 2, 3][..]), 3);
    /// ```
    fn count(&self) -> usize;
}

/// Memory a receive writes.
///
/// # Safety
/// The buffer [`pml_buffer_mut`](BufferMut::pml_buffer_mut) returns must
/// cover only bytes of `self`, writable for as long as `self` is mutably
/// borrowed, and any bytes written there must leave `self` valid
/// (guaranteed by `Equivalence`'s contract).
///
/// ```
/// use oxmpi::traits::*;
///
/// // What a receive can write into: a value, a slice or a vector.
/// fn capacity<B: BufferMut + ?Sized>(buf: &B) -> usize {
///     buf.count()
/// }
/// let v = vec![0u32; 16];
/// assert_eq!(capacity(&v), 16);
/// assert_eq!(capacity(&v[..4]), 4);
/// ```
pub unsafe trait BufferMut {
    /// The message as the PML sees it (internal).
    #[doc(hidden)]
    fn pml_buffer_mut(&mut self) -> Result<PBuffer>;
    /// Number of elements.
    ///
    /// ```
    /// use oxmpi::BufferMut;
    /// let halo = vec![0f64; 8];
    /// assert_eq!(BufferMut::count(&halo), 8);
    /// assert_eq!(BufferMut::count(&halo[..2]), 2);
    /// ```
    fn count(&self) -> usize;
}

pub(crate) fn slice_region<T: Equivalence>(s: &[T]) -> MemRegion {
    // SAFETY: the slice is valid for reads of size_of_val(s) bytes for as
    // long as it is borrowed. Only initialized bytes are read through the
    // region: all of them for dense types (no padding), only the data runs
    // of the datatype otherwise (the convertor reads by run). The caller keeps the borrow
    // alive for as long as the region is used (blocking calls return before
    // it ends; requests hold it).
    unsafe { MemRegion::new(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

pub(crate) fn slice_region_mut<T: Equivalence>(s: &mut [T]) -> MemRegion {
    // SAFETY: as above, and the exclusive borrow means nothing else reads or
    // writes these bytes while the region is in use; any byte pattern is a
    // valid T (Equivalence's contract).
    unsafe {
        MemRegion::new(
            s.as_mut_ptr().cast::<u8>().cast_const(),
            std::mem::size_of_val(s),
        )
    }
}

// SAFETY: one value, in place.
unsafe impl<T: Equivalence> Buffer for T {
    fn pml_buffer(&self) -> Result<PBuffer> {
        slice_buffer::<T>(slice_region(std::slice::from_ref(self)), 1)
    }
    fn count(&self) -> usize {
        1
    }
}

// SAFETY: the slice's bytes.
unsafe impl<T: Equivalence> Buffer for [T] {
    fn pml_buffer(&self) -> Result<PBuffer> {
        slice_buffer::<T>(slice_region(self), self.len())
    }
    fn count(&self) -> usize {
        self.len()
    }
}

// SAFETY: the vector's elements (not its spare capacity).
unsafe impl<T: Equivalence> Buffer for Vec<T> {
    fn pml_buffer(&self) -> Result<PBuffer> {
        slice_buffer::<T>(slice_region(self), self.len())
    }
    fn count(&self) -> usize {
        self.len()
    }
}

// SAFETY: one value, in place.
unsafe impl<T: Equivalence> BufferMut for T {
    fn pml_buffer_mut(&mut self) -> Result<PBuffer> {
        slice_buffer::<T>(slice_region_mut(std::slice::from_mut(self)), 1)
    }
    fn count(&self) -> usize {
        1
    }
}

// SAFETY: the slice's bytes.
unsafe impl<T: Equivalence> BufferMut for [T] {
    fn pml_buffer_mut(&mut self) -> Result<PBuffer> {
        let n = self.len();
        slice_buffer::<T>(slice_region_mut(self), n)
    }
    fn count(&self) -> usize {
        self.len()
    }
}

// SAFETY: the vector's elements (not its spare capacity).
unsafe impl<T: Equivalence> BufferMut for Vec<T> {
    fn pml_buffer_mut(&mut self) -> Result<PBuffer> {
        let n = self.len();
        slice_buffer::<T>(slice_region_mut(self), n)
    }
    fn count(&self) -> usize {
        self.len()
    }
}

/// A region for bytes the runtime owns (internal collective messages).
pub(crate) fn bytes(s: &[u8]) -> MemRegion {
    slice_region(s)
}

/// A writable region for bytes the runtime owns.
pub(crate) fn bytes_mut(s: &mut [u8]) -> MemRegion {
    slice_region_mut(s)
}
