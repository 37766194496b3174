//! MPI error classes as the PML reports them.

/// The MPI error classes, with the values of the MPI 5.0 standard ABI
/// (every class of the standard); `ProcFailed` is the ULFM class (not in
/// the standard), whose value the C layer maps.
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
    /// `MPI_ERR_TOPOLOGY`: invalid topology.
    Topology = 11,
    /// `MPI_ERR_DIMS`: invalid dimension argument.
    Dims = 12,
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
    /// `MPI_ERR_ACCESS`: permission denied.
    Access = 20,
    /// `MPI_ERR_AMODE`: invalid file access mode.
    Amode = 21,
    /// `MPI_ERR_ASSERT`: invalid assertion.
    Assert = 22,
    /// `MPI_ERR_BAD_FILE`: invalid file name.
    BadFile = 23,
    /// `MPI_ERR_BASE`: invalid base address.
    Base = 24,
    /// `MPI_ERR_CONVERSION`: a data conversion function failed.
    Conversion = 25,
    /// `MPI_ERR_DISP`: invalid displacement.
    Disp = 26,
    /// `MPI_ERR_DUP_DATAREP`: the data representation is defined already.
    DupDatarep = 27,
    /// `MPI_ERR_FILE_EXISTS`: the file exists.
    FileExists = 28,
    /// `MPI_ERR_FILE_IN_USE`: the file is in use.
    FileInUse = 29,
    /// `MPI_ERR_FILE`: invalid file handle.
    File = 30,
    /// `MPI_ERR_INFO_KEY`: invalid info key.
    InfoKey = 31,
    /// `MPI_ERR_INFO_NOKEY`: the info key is not defined.
    InfoNokey = 32,
    /// `MPI_ERR_INFO_VALUE`: invalid info value.
    InfoValue = 33,
    /// `MPI_ERR_INFO`: invalid info object.
    Info = 34,
    /// `MPI_ERR_IO`: an I/O error.
    Io = 35,
    /// `MPI_ERR_KEYVAL`: invalid attribute key.
    Keyval = 36,
    /// `MPI_ERR_LOCKTYPE`: invalid lock type.
    Locktype = 37,
    /// `MPI_ERR_NAME`: the service name is not published.
    Name = 38,
    /// `MPI_ERR_NO_MEM`: `MPI_Alloc_mem` could not allocate.
    NoMem = 39,
    /// `MPI_ERR_NOT_SAME`: the processes did not make the same collective
    /// call.
    NotSame = 40,
    /// `MPI_ERR_NO_SPACE`: no space left.
    NoSpace = 41,
    /// `MPI_ERR_NO_SUCH_FILE`: the file does not exist.
    NoSuchFile = 42,
    /// `MPI_ERR_PORT`: invalid port name.
    Port = 43,
    /// `MPI_ERR_QUOTA`: quota exceeded.
    Quota = 44,
    /// `MPI_ERR_READ_ONLY`: read-only file or file system.
    ReadOnly = 45,
    /// `MPI_ERR_RMA_ATTACH`: the memory cannot be attached.
    RmaAttach = 46,
    /// `MPI_ERR_RMA_CONFLICT`: conflicting accesses to a window.
    RmaConflict = 47,
    /// `MPI_ERR_RMA_RANGE`: the target memory is outside the window.
    RmaRange = 48,
    /// `MPI_ERR_RMA_SHARED`: the memory cannot be shared.
    RmaShared = 49,
    /// `MPI_ERR_RMA_SYNC`: wrong synchronization of RMA calls.
    RmaSync = 50,
    /// `MPI_ERR_SERVICE`: invalid service name.
    Service = 51,
    /// `MPI_ERR_SIZE`: invalid size.
    Size = 52,
    /// `MPI_ERR_SPAWN`: the processes could not be spawned.
    Spawn = 53,
    /// `MPI_ERR_UNSUPPORTED_DATAREP`: unsupported data representation.
    UnsupportedDatarep = 54,
    /// `MPI_ERR_UNSUPPORTED_OPERATION`: unsupported operation.
    UnsupportedOperation = 55,
    /// `MPI_ERR_WIN`: invalid window.
    Win = 56,
    /// `MPI_ERR_RMA_FLAVOR`: wrong window flavor.
    RmaFlavor = 57,
    /// `MPI_ERR_PROC_ABORTED`: a peer process aborted.
    ProcAborted = 58,
    /// `MPI_ERR_VALUE_TOO_LARGE`: a value does not fit its output argument.
    ValueTooLarge = 59,
    /// `MPI_ERR_SESSION`: invalid session.
    Session = 60,
    /// `MPI_ERR_ERRHANDLER`: invalid error handler.
    Errhandler = 61,
    /// `MPI_ERR_ABI`: the ABI does not match.
    Abi = 62,
    /// `MPI_ERR_PROC_FAILED`: the peer process failed.
    ProcFailed = 75,
}

impl ErrClass {
    /// Every class, in the order of their values.
    const ALL: [ErrClass; 63] = [
        ErrClass::Buffer,
        ErrClass::Count,
        ErrClass::Type,
        ErrClass::Tag,
        ErrClass::Comm,
        ErrClass::Rank,
        ErrClass::Request,
        ErrClass::Root,
        ErrClass::Group,
        ErrClass::Op,
        ErrClass::Topology,
        ErrClass::Dims,
        ErrClass::Arg,
        ErrClass::Unknown,
        ErrClass::Truncate,
        ErrClass::Other,
        ErrClass::Intern,
        ErrClass::Pending,
        ErrClass::InStatus,
        ErrClass::Access,
        ErrClass::Amode,
        ErrClass::Assert,
        ErrClass::BadFile,
        ErrClass::Base,
        ErrClass::Conversion,
        ErrClass::Disp,
        ErrClass::DupDatarep,
        ErrClass::FileExists,
        ErrClass::FileInUse,
        ErrClass::File,
        ErrClass::InfoKey,
        ErrClass::InfoNokey,
        ErrClass::InfoValue,
        ErrClass::Info,
        ErrClass::Io,
        ErrClass::Keyval,
        ErrClass::Locktype,
        ErrClass::Name,
        ErrClass::NoMem,
        ErrClass::NotSame,
        ErrClass::NoSpace,
        ErrClass::NoSuchFile,
        ErrClass::Port,
        ErrClass::Quota,
        ErrClass::ReadOnly,
        ErrClass::RmaAttach,
        ErrClass::RmaConflict,
        ErrClass::RmaRange,
        ErrClass::RmaShared,
        ErrClass::RmaSync,
        ErrClass::Service,
        ErrClass::Size,
        ErrClass::Spawn,
        ErrClass::UnsupportedDatarep,
        ErrClass::UnsupportedOperation,
        ErrClass::Win,
        ErrClass::RmaFlavor,
        ErrClass::ProcAborted,
        ErrClass::ValueTooLarge,
        ErrClass::Session,
        ErrClass::Errhandler,
        ErrClass::Abi,
        ErrClass::ProcFailed,
    ];

    /// The numeric error class.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The class whose value is `code` (`None` for a value no class has,
    /// `MPI_SUCCESS` included).
    pub fn from_code(code: i32) -> Option<ErrClass> {
        match code {
            1..=62 => Some(ErrClass::ALL[code as usize - 1]),
            75 => Some(ErrClass::ProcFailed),
            _ => None,
        }
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
/// [`REASONS`](reasons::REASONS) reasons: an old number whose slot was reused finds nothing
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

#[cfg(test)]
mod tests {
    use super::ErrClass;

    #[test]
    fn every_class_has_its_value() {
        for code in -1..100 {
            match ErrClass::from_code(code) {
                Some(c) => assert_eq!(c.code(), code),
                None => assert!(
                    code < 1 || (63..100).contains(&code) && code != 75,
                    "{code}"
                ),
            }
        }
        assert_eq!(ErrClass::from_code(36), Some(ErrClass::Keyval));
        assert_eq!(ErrClass::from_code(0), None);
    }
}
