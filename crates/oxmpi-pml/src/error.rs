//! MPI error classes as the PML reports them.

/// The MPI error classes the point-to-point layer and the API can raise,
/// with the values of the MPI 5.0 standard ABI; `ProcFailed` is the ULFM
/// class (not in the standard), whose value the C layer maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum ErrClass {
    /// `MPI_ERR_BUFFER`: invalid buffer, or the attached buffer is too small.
    Buffer = 1,
    /// `MPI_ERR_COUNT`: invalid count.
    Count = 2,
    /// `MPI_ERR_TYPE`: invalid datatype.
    Type = 3,
    /// `MPI_ERR_TAG`: invalid tag.
    Tag = 4,
    /// `MPI_ERR_COMM`: invalid communicator.
    Comm = 5,
    /// `MPI_ERR_RANK`: invalid rank.
    Rank = 6,
    /// `MPI_ERR_REQUEST`: invalid request handle.
    Request = 7,
    /// `MPI_ERR_ROOT`: invalid root.
    Root = 8,
    /// `MPI_ERR_GROUP`: invalid group.
    Group = 9,
    /// `MPI_ERR_OP`: invalid operation.
    Op = 10,
    /// `MPI_ERR_ARG`: invalid argument.
    Arg = 13,
    /// `MPI_ERR_UNKNOWN`.
    Unknown = 14,
    /// `MPI_ERR_TRUNCATE`: message truncated on receive.
    Truncate = 15,
    /// `MPI_ERR_OTHER`.
    Other = 16,
    /// `MPI_ERR_INTERN`: internal error (a protocol violation by a peer).
    Intern = 17,
    /// `MPI_ERR_PENDING`: a request of a multiple completion did not
    /// complete (not an error of its own).
    Pending = 18,
    /// `MPI_ERR_IN_STATUS`: the error of a multiple completion is in the
    /// statuses.
    InStatus = 19,
    /// `MPI_ERR_NO_MEM`: `MPI_Alloc_mem` could not allocate.
    NoMem = 39,
    /// `MPI_ERR_ERRHANDLER`: invalid error handler.
    Errhandler = 61,
    /// `MPI_ERR_PROC_FAILED`: the peer process failed.
    ProcFailed = 75,
}

impl ErrClass {
    /// The numeric error class.
    pub const fn code(self) -> i32 {
        self as i32
    }
}

/// An error raised by the PML: an MPI error class and a message naming the
/// cause.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{class:?}: {msg}")]
pub struct PmlError {
    /// The MPI error class.
    pub class: ErrClass,
    /// What went wrong, for a human.
    pub msg: String,
}

impl PmlError {
    /// An error of `class` with message `msg`.
    pub fn new(class: ErrClass, msg: impl Into<String>) -> PmlError {
        PmlError {
            class,
            msg: msg.into(),
        }
    }
}

/// The reasons of recent request failures, for the messages that report
/// them: a request that fails carries only its class and a small number
/// ([`crate::Status::detail`]) in its status, which stays `Copy` and
/// small; the reason's text waits here. A fixed ring of the last
/// [`REASONS`] reasons: an old number whose slot was reused finds nothing
/// (its message is then the class's alone).
pub mod reasons {
    use std::sync::Mutex;

    /// Reasons kept.
    pub const REASONS: usize = 256;

    struct Ring {
        next: u16,
        slots: Vec<Option<(u16, Box<str>)>>,
    }

    static RING: Mutex<Ring> = Mutex::new(Ring {
        next: 0,
        slots: Vec::new(),
    });

    /// Keeps `why` and returns its number (never 0: 0 is "no reason").
    ///
    /// ```
    /// use oxmpi_pml::error::reasons;
    /// let n = reasons::record("attaching rank 4: out of file descriptors");
    /// assert_ne!(n, 0);
    /// assert_eq!(reasons::get(n).as_deref(), Some("attaching rank 4: out of file descriptors"));
    /// assert_eq!(reasons::get(0), None);
    /// ```
    #[cold]
    pub fn record(why: &str) -> u16 {
        let mut r = RING.lock().unwrap_or_else(|p| p.into_inner());
        if r.slots.is_empty() {
            r.slots.resize_with(REASONS, || None);
        }
        r.next = r.next.checked_add(1).unwrap_or(1);
        let n = r.next;
        r.slots[usize::from(n) % REASONS] = Some((n, why.into()));
        n
    }

    /// The reason numbered `n`, if it is still kept.
    #[cold]
    pub fn get(n: u16) -> Option<String> {
        if n == 0 {
            return None;
        }
        let r = RING.lock().unwrap_or_else(|p| p.into_inner());
        match r.slots.get(usize::from(n) % REASONS)? {
            Some((m, why)) if *m == n => Some(why.to_string()),
            _ => None,
        }
    }
}
