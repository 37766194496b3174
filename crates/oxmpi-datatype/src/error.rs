//! The one error type of the crate.

use thiserror::Error;

/// Why a datatype could not be built or a buffer could not be packed or
/// unpacked. Every invalid argument is reported through this type; the crate
/// never panics on user input.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DatatypeError {
    /// A count, block length or dimension was negative (`MPI_ERR_COUNT`).
    #[error("{what} is negative ({value})")]
    NegativeCount {
        /// Which argument.
        what: &'static str,
        /// The value given.
        value: isize,
    },
    /// A size, extent, bound or displacement does not fit in `isize` bytes.
    #[error("{what} overflows the address space")]
    Overflow {
        /// Which quantity overflowed.
        what: &'static str,
    },
    /// Two argument arrays that must have the same length do not.
    #[error("{what}: expected {expected} entries, got {found}")]
    LengthMismatch {
        /// Which argument array.
        what: &'static str,
        /// The length it must have.
        expected: usize,
        /// The length it has.
        found: usize,
    },
    /// Any other invalid constructor argument (`MPI_ERR_ARG`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The datatype reaches outside the user buffer: with the datatype origin
    /// at `origin` in a buffer of `len` bytes, the data of the `count`
    /// elements spans buffer positions `start..end`.
    #[error("datatype data spans buffer bytes {start}..{end} but the buffer has {len} bytes")]
    OutOfBounds {
        /// First byte touched, as a position in the buffer (may be negative).
        start: i128,
        /// One past the last byte touched.
        end: i128,
        /// Length of the buffer.
        len: usize,
    },
    /// A consistency check of the convertor failed (a bug in this crate,
    /// reported rather than panicked on).
    #[error("internal convertor error: {0}")]
    Internal(&'static str),
    /// A value has no representation in the target format (a C `long`
    /// outside the 32 bits `external32` gives it: `MPI_ERR_CONVERSION`).
    #[error("conversion: {0}")]
    Conversion(String),
    /// A packed offset beyond the end of the packed stream.
    #[error("packed offset {offset} is past the end of the {total}-byte packed stream")]
    PackedOffset {
        /// The offset asked for.
        offset: usize,
        /// Size of the packed stream.
        total: usize,
    },
}

/// Shorthand for results of this crate.
pub type Result<T> = std::result::Result<T, DatatypeError>;
