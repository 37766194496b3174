//! Element types that travel in messages. `Equivalence` is an `unsafe`
//! contract (a wrong implementation would let a receive write an invalid
//! value), so this module allows `unsafe` for its declaration and impls.
#![allow(unsafe_code)]

/// A type whose values are sent as their bytes: no padding, no pointers,
/// and every byte pattern of its size is a valid value (so a receive may
/// write any bytes a peer sent).
///
/// # Safety
/// Implement it only for types that satisfy all three rules; it is
/// implemented here for the integer and floating-point types and arrays of
/// them.
///
/// ```
/// fn elements<T: oxmpi::Equivalence>(v: &[T]) -> usize { v.len() }
/// assert_eq!(elements(&[1u64, 2, 3]), 3);
/// ```
pub unsafe trait Equivalence: Copy + Send + Sync + 'static {}

macro_rules! equivalence {
    ($($t:ty),*) => {
        $(
            // SAFETY: primitive numbers: no padding, every bit pattern valid.
            unsafe impl Equivalence for $t {}
        )*
    };
}

equivalence!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64);

// SAFETY: an array of such types has no padding and no invalid pattern.
unsafe impl<T: Equivalence, const N: usize> Equivalence for [T; N] {}
