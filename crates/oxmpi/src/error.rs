//! Errors: every fallible call returns [`Result`], whose [`Error`] carries an
//! MPI error class and a message naming the cause.

use oxmpi_pml::{ErrClass, PmlError};

/// MPI error classes (the values of the MPI standard ABI for the classic
/// classes; `ProcFailed` is ULFM's `MPI_ERR_PROC_FAILED`).
///
/// ```
/// use oxmpi::ErrorClass;
/// // The numeric class, as `MPI_Error_class` gives it.
/// assert_eq!(ErrorClass::Truncate.code(), 15);
/// assert_ne!(ErrorClass::Rank, ErrorClass::Tag);
/// ```
pub use oxmpi_pml::ErrClass as ErrorClass;

/// An MPI error: its class and what went wrong.
///
/// ```
/// use oxmpi::{Error, ErrorClass};
/// let e = Error::new(ErrorClass::Rank, "rank 9 of a communicator of 4");
/// assert_eq!(e.class(), ErrorClass::Rank);
/// assert!(e.to_string().contains("rank 9"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{class:?} ({code}): {msg}", code = class.code())]
pub struct Error {
    class: ErrClass,
    msg: String,
}

impl Error {
    /// An error of `class` with message `msg`.
    ///
    /// ```
    /// use oxmpi::{Error, ErrorClass};
    /// let color = u32::MAX;
    /// let e = Error::new(ErrorClass::Arg, format!("color {color} is too large"));
    /// assert_eq!(e.message(), "color 4294967295 is too large");
    /// ```
    pub fn new(class: ErrorClass, msg: impl Into<String>) -> Error {
        Error {
            class,
            msg: msg.into(),
        }
    }

    /// The MPI error class.
    ///
    /// ```
    /// use oxmpi::{Error, ErrorClass};
    /// let e = Error::new(ErrorClass::Truncate, "message truncated");
    /// assert_eq!(e.class(), ErrorClass::Truncate);
    /// assert_eq!(e.class().code(), 15);
    /// ```
    pub fn class(&self) -> ErrorClass {
        self.class
    }

    /// The message naming the cause.
    ///
    /// ```
    /// use oxmpi::{Error, ErrorClass};
    /// let e = Error::new(ErrorClass::Rank, "rank 9 of a communicator of 4");
    /// assert_eq!(e.message(), "rank 9 of a communicator of 4");
    /// ```
    pub fn message(&self) -> &str {
        &self.msg
    }
}

impl From<PmlError> for Error {
    fn from(e: PmlError) -> Error {
        Error {
            class: e.class,
            msg: e.msg,
        }
    }
}

/// The result of an oxmpi call.
///
/// ```
/// use oxmpi::{Error, ErrorClass, Result};
///
/// fn check_rank(rank: i32, size: i32) -> Result<u32> {
///     if !(0..size).contains(&rank) {
///         return Err(Error::new(ErrorClass::Rank, format!("rank {rank} of {size}")));
///     }
///     Ok(rank as u32)
/// }
/// assert_eq!(check_rank(3, 4), Ok(3));
/// assert_eq!(check_rank(4, 4).unwrap_err().class(), ErrorClass::Rank);
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<oxmpi_datatype::DatatypeError> for Error {
    fn from(e: oxmpi_datatype::DatatypeError) -> Error {
        use oxmpi_datatype::DatatypeError as D;
        let class = match &e {
            D::NegativeCount { .. } => ErrClass::Count,
            D::Overflow { .. } => ErrClass::Count,
            D::OutOfBounds { .. } => ErrClass::Buffer,
            D::Internal(_) => ErrClass::Intern,
            D::Conversion(_) => ErrClass::Conversion,
            D::LengthMismatch { .. } | D::InvalidArgument(_) | D::PackedOffset { .. } => {
                ErrClass::Arg
            }
            _ => ErrClass::Type,
        };
        Error::new(class, e.to_string())
    }
}
