//! What a completed receive, send or probe reports.

use crate::datatype::Equivalence;
use crate::error::ErrorClass;

/// `MPI_Status`: source, tag, size, whether the request was cancelled.
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let mut buf = [0u8; 64];
/// let status = world.any_process().receive_into(&mut buf[..]).unwrap();
/// let n = status.count::<u8>().unwrap();
/// println!("{n} bytes from rank {} with tag {}", status.source_rank(), status.tag());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Status {
    pub(crate) inner: oxmpi_pml::Status,
}

impl Status {
    pub(crate) fn from_pml(inner: oxmpi_pml::Status) -> Status {
        Status { inner }
    }

    /// The rank (in the communicator) the message came from (negative for
    /// an operation on `PROC_NULL`, see [`Status::is_proc_null`]).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// // Answer whoever asked.
    /// let (question, st) = world.any_process().receive::<u32>().unwrap();
    /// world.process_at_rank(st.source_rank()).send(&(question * 2)).unwrap();
    /// ```
    pub fn source_rank(&self) -> i32 {
        self.inner.source
    }

    /// The message's tag.
    ///
    /// ```
    /// let s = oxmpi::Status::default();
    /// assert_eq!(s.tag(), 0);
    /// ```
    pub fn tag(&self) -> i32 {
        self.inner.tag
    }

    /// Bytes received (or sent).
    ///
    /// ```
    /// let s = oxmpi::Status::default();
    /// assert_eq!(s.bytes(), 0);
    /// assert_eq!(s.count::<u8>(), Some(s.bytes()));
    /// ```
    pub fn bytes(&self) -> usize {
        self.inner.bytes
    }

    /// `MPI_Get_count`: whole elements of `T` received; `None` when the
    /// byte count is not a multiple of `T`'s size (`MPI_UNDEFINED`).
    ///
    /// ```
    /// let s = oxmpi::Status::default();
    /// assert_eq!(s.count::<u64>(), Some(0));
    /// ```
    pub fn count<T: Equivalence>(&self) -> Option<usize> {
        let sz = crate::datatype::packed_size_of::<T>();
        if sz == 0 {
            return Some(0);
        }
        (self.inner.bytes % sz == 0).then_some(self.inner.bytes / sz)
    }

    /// `MPI_Get_count` with a datatype: whole elements of `datatype`
    /// received; `None` when the bytes end inside an element.
    ///
    /// ```
    /// let t = oxmpi::UserDatatype::of::<[u8; 3]>();
    /// assert_eq!(oxmpi::Status::default().count_of(&t), Some(0));
    /// ```
    pub fn count_of(&self, datatype: &crate::UserDatatype) -> Option<usize> {
        datatype.as_raw().get_count(self.inner.bytes)
    }

    /// `MPI_Get_elements` with a datatype: basic elements received
    /// (counting those of a partly received element).
    ///
    /// ```
    /// let t = oxmpi::UserDatatype::of::<[u16; 4]>();
    /// assert_eq!(oxmpi::Status::default().elements_of(&t), Some(0));
    /// ```
    pub fn elements_of(&self, datatype: &crate::UserDatatype) -> Option<usize> {
        datatype.as_raw().get_elements(self.inner.bytes)
    }

    /// Whether the request was cancelled (`MPI_Test_cancelled`).
    ///
    /// ```
    /// assert!(!oxmpi::Status::default().cancelled());
    /// ```
    pub fn cancelled(&self) -> bool {
        self.inner.cancelled
    }

    /// The error class the request ended with, if any.
    ///
    /// ```
    /// assert_eq!(oxmpi::Status::default().error(), None);
    /// ```
    pub fn error(&self) -> Option<ErrorClass> {
        self.inner.error
    }

    /// Why the request failed, if it failed and the reason is still kept
    /// (the PML keeps the last few hundred reasons: see
    /// `oxmpi_pml::error::reasons`).
    ///
    /// ```
    /// assert_eq!(oxmpi::Status::default().error_reason(), None);
    /// ```
    pub fn error_reason(&self) -> Option<String> {
        self.inner.error?;
        oxmpi_pml::error::reasons::get(self.inner.detail)
    }

    /// Whether this is the status of an operation on `PROC_NULL`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut x = 0i32;
    /// let st = world.null_process().receive_into(&mut x).unwrap();
    /// assert!(st.is_proc_null());
    /// assert!(!oxmpi::Status::default().is_proc_null());
    /// ```
    pub fn is_proc_null(&self) -> bool {
        self.inner.source == oxmpi_pml::ob1::PROC_NULL_STATUS
    }
}
