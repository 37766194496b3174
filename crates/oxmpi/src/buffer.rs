//! Typed user memory as the PML's byte regions: the one place of this crate
//! that turns references into [`MemRegion`]s (an `unsafe` promise).
//!
//! [`Buffer`] is implemented for `T`, `[T]` and `Vec<T>` when
//! `T: Equivalence` (arrays are `Equivalence` themselves); [`BufferMut`] for the same, for receives. Both are
//! contiguous, so they take the PML's zero-copy protocols.
#![allow(unsafe_code)]

use oxmpi_btl::mem::MemRegion;

use crate::datatype::Equivalence;

/// Memory a send reads.
///
/// # Safety
/// `region` must cover exactly the bytes of `self` (in place, readable for
/// as long as `self` is borrowed), and every byte of it must be
/// initialized.
pub unsafe trait Buffer {
    /// The element type.
    type Item: Equivalence;
    /// The bytes.
    fn region(&self) -> MemRegion;
    /// Number of elements.
    fn count(&self) -> usize;
}

/// Memory a receive writes.
///
/// # Safety
/// `region_mut` must cover exactly the bytes of `self`, writable for as long
/// as `self` is mutably borrowed, and any bytes written there must leave
/// `self` valid (guaranteed by `Equivalence`'s contract).
pub unsafe trait BufferMut {
    /// The element type.
    type Item: Equivalence;
    /// The bytes.
    fn region_mut(&mut self) -> MemRegion;
    /// Number of elements.
    fn count(&self) -> usize;
}

fn slice_region<T: Equivalence>(s: &[T]) -> MemRegion {
    // SAFETY: the slice is valid for reads of size_of_val(s) bytes for as
    // long as it is borrowed, and Equivalence types have no padding (their
    // contract), so every byte is initialized. The caller keeps the borrow
    // alive for as long as the region is used (blocking calls return before
    // it ends; requests hold it).
    unsafe { MemRegion::new(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

fn slice_region_mut<T: Equivalence>(s: &mut [T]) -> MemRegion {
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
    type Item = T;
    fn region(&self) -> MemRegion {
        slice_region(std::slice::from_ref(self))
    }
    fn count(&self) -> usize {
        1
    }
}

// SAFETY: the slice's bytes.
unsafe impl<T: Equivalence> Buffer for [T] {
    type Item = T;
    fn region(&self) -> MemRegion {
        slice_region(self)
    }
    fn count(&self) -> usize {
        self.len()
    }
}

// SAFETY: the vector's elements (not its spare capacity).
unsafe impl<T: Equivalence> Buffer for Vec<T> {
    type Item = T;
    fn region(&self) -> MemRegion {
        slice_region(self)
    }
    fn count(&self) -> usize {
        self.len()
    }
}

// SAFETY: one value, in place.
unsafe impl<T: Equivalence> BufferMut for T {
    type Item = T;
    fn region_mut(&mut self) -> MemRegion {
        slice_region_mut(std::slice::from_mut(self))
    }
    fn count(&self) -> usize {
        1
    }
}

// SAFETY: the slice's bytes.
unsafe impl<T: Equivalence> BufferMut for [T] {
    type Item = T;
    fn region_mut(&mut self) -> MemRegion {
        slice_region_mut(self)
    }
    fn count(&self) -> usize {
        self.len()
    }
}

// SAFETY: the vector's elements (not its spare capacity).
unsafe impl<T: Equivalence> BufferMut for Vec<T> {
    type Item = T;
    fn region_mut(&mut self) -> MemRegion {
        slice_region_mut(self)
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
