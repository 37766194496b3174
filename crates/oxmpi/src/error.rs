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
    /// The code a C program's callback returned (0: none). Beside the
    /// class it fills what was padding: the error stays 32 bytes, as do
    /// the `Result`s the small-message paths return.
    code: i32,
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
            code: 0,
        }
    }

    /// An error of `class` that carries the error code `code`: a code the
    /// program defined and one of its callbacks returned (a C program's
    /// `MPI_Add_error_code`), which the C layer passes on unchanged
    /// instead of making a code of its own. `MPI_SUCCESS` (0) is no error
    /// code: with 0 the error carries none.
    ///
    /// ```
    /// use oxmpi::{Error, ErrorClass};
    /// let e = Error::with_code(ErrorClass::Other, 0x4001, "delete_fn returned 16385");
    /// assert_eq!(e.code(), Some(0x4001));
    /// assert_eq!(Error::new(ErrorClass::Other, "x").code(), None);
    /// // No bigger than a class and a message.
    /// assert_eq!(std::mem::size_of::<Error>(), 32);
    /// ```
    pub fn with_code(class: ErrorClass, code: i32, msg: impl Into<String>) -> Error {
        Error {
            class,
            msg: msg.into(),
            code,
        }
    }

    /// The error code the error carries, if it was made with
    /// [`Error::with_code`].
    ///
    /// ```
    /// use oxmpi::{Error, ErrorClass};
    /// assert_eq!(Error::with_code(ErrorClass::Arg, 0x4002, "x").code(), Some(0x4002));
    /// ```
    pub fn code(&self) -> Option<i32> {
        (self.code != 0).then_some(self.code)
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
            code: 0,
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
