//! The C layer's state: the universe, the handle tables, error handlers,
//! and the entry-point macro.
//!
//! Handles follow the MPI 5.0 standard ABI: predefined handles are the
//! small constants of `mpi.h`; handles the library creates are integers
//! from [`USER_BASE`] up, one table per kind. A handle is never
//! dereferenced: a garbage value is looked up, not found, and reported
//! with the kind's error class.

use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use oxmpi::request::{OwnedPersistentRequest, OwnedRequest};
use oxmpi::{Communicator, Error, ErrorClass, RawBuffer, Threading, Universe, UserDatatype};

/// The thread level the universe runs at (the C program's requested
/// level is recorded separately for `MPI_Query_thread`).
pub type L = Threading::Multiple;
/// A communicator of the C layer.
pub type Comm = Communicator<'static, L>;

/// Handle values of objects the library creates start here.
pub const USER_BASE: usize = 0x10000;

/// `MPI_COMM_NULL`.
pub const COMM_NULL: usize = 0x100;
/// `MPI_COMM_WORLD`.
pub const COMM_WORLD: usize = 0x101;
/// `MPI_COMM_SELF`.
pub const COMM_SELF: usize = 0x102;
/// `MPI_REQUEST_NULL`.
pub const REQUEST_NULL: usize = 0x180;
/// The handle of every `MPI_Isend` (and `MPI_Irsend`) that completed
/// inside the call (an eager send that went at once): it needs no table entry and
/// completes at once (its status has the empty status's fields), as Open
/// MPI's `ompi_request_empty`. Below [`USER_BASE`], so never a table
/// handle.
pub const REQUEST_SENT: usize = USER_BASE - 8;
/// Handles of receives that completed inside `MPI_Irecv` (a message that
/// was already here) carry their status instead of naming a table entry:
/// the byte count in bits 1-20, the source in bits 21-40, the tag in bits
/// 41-55, and the mark `RECEIVED_MARK` in bits 0 and 56-63 (table handles,
/// `MPI_REQUEST_NULL` and [`REQUEST_SENT`] are even; a garbage handle is
/// taken for one only if it has the whole mark). A status outside those
/// fields takes a table entry.
const RECEIVED_MARK: usize = 0xa5 << 56 | 1;
/// Bits of each field of a received handle: bytes, source, tag.
const RECEIVED_BITS: (u32, u32, u32) = (20, 20, 15);
/// The bits of the mark.
const RECEIVED_MARK_BITS: usize = 0xff << 56 | 1;

/// The largest byte count a received handle holds.
pub const RECEIVED_MAX_BYTES: usize = (1 << RECEIVED_BITS.0) - 1;

/// The handle of a receive complete with this status (see
/// `RECEIVED_MARK` in this module), if its fields fit one.
pub fn received_handle(source: i32, tag: i32, bytes: usize) -> Option<usize> {
    let (b, s, t) = RECEIVED_BITS;
    let fits = usize::BITS == 64
        && bytes >> b == 0
        && (0..1 << s).contains(&source)
        && (0..1 << t).contains(&tag);
    fits.then(|| {
        RECEIVED_MARK | bytes << 1 | (source as usize) << (1 + b) | (tag as usize) << (1 + b + s)
    })
}

/// Whether `h` is a received handle.
#[inline]
fn is_received(h: usize) -> bool {
    h & RECEIVED_MARK_BITS == RECEIVED_MARK
}

/// The status a received handle carries (`None` for other handles).
#[inline]
fn received_status(h: usize) -> Option<crate::p2p::CStatus> {
    if !is_received(h) {
        return None;
    }
    let (b, s, t) = RECEIVED_BITS;
    let field = |at: u32, bits: u32| (h >> at) & ((1 << bits) - 1);
    let mut st = crate::p2p::CStatus::empty();
    st.source = field(1 + b, s) as c_int;
    st.tag = field(1 + b + s, t) as c_int;
    st.internal = [field(1, b) as c_int, 0, 0, 0, 0];
    Some(st)
}

/// Handle `h`, or for a received handle a table entry holding the same
/// complete receive (an integer a handle conversion can carry).
pub fn request_as_table_handle(h: usize) -> usize {
    match (received_status(h), state_any()) {
        (Some(st), Some(s)) => lock(&s.requests).insert(ReqObj::Done(st, None)),
        _ => h,
    }
}

/// `MPI_DATATYPE_NULL`.
pub const DATATYPE_NULL: usize = 0x200;
/// `MPI_ERRORS_ARE_FATAL`.
pub const ERRORS_ARE_FATAL: usize = 0x141;
/// `MPI_ERRORS_RETURN`.
pub const ERRORS_RETURN: usize = 0x143;
/// `MPI_ERRORS_ABORT`.
pub const ERRORS_ABORT: usize = 0x142;
/// `MPI_SUCCESS`.
pub const SUCCESS: c_int = 0;

/// A table of objects of one kind, addressed by handle.
pub struct Table<T> {
    slots: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table::new()
    }
}

impl<T> Table<T> {
    /// An empty table (usable in statics).
    pub const fn new() -> Self {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Stores `v`; returns its handle.
    pub fn insert(&mut self, v: T) -> usize {
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(v);
                i
            }
            None => {
                self.slots.push(Some(v));
                self.slots.len() - 1
            }
        };
        USER_BASE + i * 8
    }

    fn index(h: usize) -> Option<usize> {
        let off = h.checked_sub(USER_BASE)?;
        (off % 8 == 0).then_some(off / 8)
    }

    /// The object of handle `h`.
    pub fn get(&self, h: usize) -> Option<&T> {
        self.slots.get(Self::index(h)?)?.as_ref()
    }

    /// The object of handle `h`, mutably.
    pub fn get_mut(&mut self, h: usize) -> Option<&mut T> {
        self.slots.get_mut(Self::index(h)?)?.as_mut()
    }

    /// Removes and returns the object of handle `h`.
    pub fn remove(&mut self, h: usize) -> Option<T> {
        let i = Self::index(h)?;
        let v = self.slots.get_mut(i)?.take()?;
        self.free.push(i);
        Some(v)
    }

    /// Puts `v` back at handle `h` (after [`Table::remove`]).
    pub fn restore(&mut self, h: usize, v: T) {
        if let Some(i) = Self::index(h) {
            if let Some(slot) = self.slots.get_mut(i) {
                *slot = Some(v);
                // `remove` pushed `i` last, unless other handles were
                // removed since.
                if self.free.last() == Some(&i) {
                    self.free.pop();
                } else {
                    self.free.retain(|&f| f != i);
                }
            }
        }
    }
}

/// The request table: [`REQUEST_SENT`] reads as a complete send
/// (`ReqObj::Done`) that taking never uses up, and a received handle (see
/// [`received_handle`]) as a complete receive with the status it carries.
pub struct Requests {
    table: Table<ReqObj>,
    sent: ReqObj,
    /// What `get` shows of any received handle (only its kind matters
    /// there: taking one with `remove` gives its status).
    received: ReqObj,
}

impl Default for Requests {
    fn default() -> Self {
        Requests {
            table: Table::new(),
            sent: Requests::sent(),
            received: Requests::sent(),
        }
    }
}

impl Requests {
    /// A completed send: the empty status's fields (a send's status
    /// carries nothing but "not cancelled"), without the mark that has a
    /// null request's status written whole, so single completions leave
    /// `MPI_ERROR` alone as for any other request.
    fn sent() -> ReqObj {
        ReqObj::Done(Requests::sent_status(), None)
    }

    /// The status of a completed send (see [`Requests::sent`]).
    #[inline]
    fn sent_status() -> crate::p2p::CStatus {
        let mut st = crate::p2p::CStatus::empty();
        st.internal[3] = 0;
        st
    }

    /// Stores `r`; returns its handle.
    pub fn insert(&mut self, r: ReqObj) -> usize {
        self.table.insert(r)
    }

    /// The request of handle `h` (of a received handle: a complete
    /// request, whose status `remove` gives).
    pub fn get(&self, h: usize) -> Option<&ReqObj> {
        if h == REQUEST_SENT {
            return Some(&self.sent);
        }
        if is_received(h) {
            return Some(&self.received);
        }
        self.table.get(h)
    }

    /// The stored request of handle `h`, mutably ([`REQUEST_SENT`] has
    /// none: it is not there to be changed).
    pub fn get_mut(&mut self, h: usize) -> Option<&mut ReqObj> {
        self.table.get_mut(h)
    }

    /// Removes and returns the request of handle `h` ([`REQUEST_SENT`]
    /// and received handles stay: a complete request each time).
    pub fn remove(&mut self, h: usize) -> Option<ReqObj> {
        match Requests::done_untabled(h) {
            Some(st) => Some(ReqObj::Done(st, None)),
            None => self.table.remove(h),
        }
    }

    /// The status of a handle that is complete with no table entry
    /// ([`REQUEST_SENT`] or a received handle), what [`Requests::remove`]
    /// gives for it; `None` for any other handle. (`MPI_Waitall` asks it
    /// first: the status alone, without building a request object.)
    #[inline]
    pub fn done_untabled(h: usize) -> Option<crate::p2p::CStatus> {
        if h == REQUEST_SENT {
            Some(Requests::sent_status())
        } else {
            received_status(h)
        }
    }

    /// Puts `r` back at handle `h` (after [`Requests::remove`]; the table
    /// ignores [`REQUEST_SENT`] and received handles, never table handles).
    pub fn restore(&mut self, h: usize, r: ReqObj) {
        self.table.restore(h, r);
    }
}

/// A communicator and what the C layer keeps beside it.
pub struct CommObj {
    /// The communicator.
    pub comm: Comm,
    /// A duplicate for the collectives built on point-to-point, so their
    /// messages never match the program's.
    pub coll: Comm,
    /// Its error handler (`MPI_ERRORS_ARE_FATAL` by default).
    pub errh: Mutex<usize>,
    /// `MPI_Comm_set_name`.
    pub name: Mutex<String>,
    /// Its process topology (`MPI_Cart_create` and the like), if any.
    pub topo: Option<crate::topo::Topo>,
    /// Collective schedules started on it so far (`crate::sched`): each
    /// one's tag, the same on every member because collectives are called
    /// in the same order everywhere.
    pub coll_seq: std::sync::atomic::AtomicU32,
}

/// A communicator looked up by handle: the predefined ones borrowed from
/// the process state (no reference-count traffic, shared by every thread,
/// on each call), created ones shared with the handle table.
pub enum CommRef {
    /// `MPI_COMM_WORLD` or `MPI_COMM_SELF`.
    Static(&'static CommObj),
    /// A communicator the program created.
    Shared(Arc<CommObj>),
}

impl std::ops::Deref for CommRef {
    type Target = CommObj;
    fn deref(&self) -> &CommObj {
        match self {
            CommRef::Static(c) => c,
            CommRef::Shared(c) => c,
        }
    }
}

/// A non-blocking operation of the C layer: the Rust API's request, which
/// holds no buffer for a `RawBuffer` (so a request-table entry is 48 bytes,
/// not 96).
pub type Op = OwnedRequest<'static, (), L>;

/// A request of the C layer.
pub enum ReqObj {
    /// A non-blocking operation.
    Op(Op, usize),
    /// A persistent request (and its communicator's handle).
    /// (Boxed: made once and started many times; inline it tripled the
    /// size of every table entry.)
    Persistent(Box<OwnedPersistentRequest<'static, RawBuffer, L>>, usize),
    /// `MPI_Isendrecv`: the send and the receive, completed together (the
    /// receive's status).
    /// The last field keeps alive the private copy of the outgoing data of
    /// `MPI_Isendrecv_replace` (empty otherwise).
    Pair(Box<PairReq>),
    /// A generalized request (`MPI_Grequest_start`).
    Greq(Arc<crate::p2p::Greq>),
    /// A collective schedule (`crate::sched`): a non-blocking or persistent
    /// collective, and its communicator's handle.
    Coll(Arc<crate::sched::CollReq>, usize),
    /// A request already complete, with its outcome (`MPI_Buffer_iflush`,
    /// or one whose status `MPI_Request_get_status` took).
    Done(crate::p2p::CStatus, Option<Box<Error>>),
}

/// The two halves of an `MPI_Isendrecv` (boxed: rare, and large).
pub struct PairReq {
    /// The send.
    pub send: Op,
    /// The receive (its status is the request's).
    pub recv: Op,
    /// The communicator's handle.
    pub comm: usize,
    /// The private copy of the outgoing data of `MPI_Isendrecv_replace`
    /// (empty otherwise), alive as long as the send may read it.
    pub keep: Vec<u8>,
}

/// A datatype handle's object. Reference counted, as MPICH's datatypes
/// are: the program holds one reference for the handle a constructor (or
/// `MPI_Type_dup`) gave it and one for each time `MPI_Type_get_contents`
/// returned the handle; every type whose constructor took it as an
/// argument holds one (its `contents.types`). `MPI_Type_free` drops one;
/// the handle goes when the last one does (`crate::types::release_type`).
pub struct TypeObj {
    /// The datatype.
    pub dt: UserDatatype,
    /// References to this handle (at least 1 while it is in the table).
    pub refs: usize,
    /// Whether `MPI_Type_commit` was called.
    pub committed: bool,
    /// The constructor and its arguments (`MPI_Type_get_envelope`).
    pub contents: crate::dtype::Contents,
    /// `MPI_Type_set_name` (empty until set).
    pub name: String,
}

/// Everything after `MPI_Init`.
pub struct State {
    /// The universe (leaked: C handles live until finalize).
    pub universe: &'static Universe<L>,
    /// `MPI_COMM_WORLD` and `MPI_COMM_SELF`.
    pub world: Arc<CommObj>,
    /// `MPI_COMM_SELF`.
    pub self_: Arc<CommObj>,
    /// User communicators.
    pub comms: Mutex<Table<Arc<CommObj>>>,
    /// Requests.
    pub requests: Mutex<Requests>,
    /// User datatypes.
    pub types: Mutex<Table<TypeObj>>,
    /// Matched messages (`MPI_Mprobe`).
    pub messages: Mutex<Table<oxmpi::Message<'static, L>>>,
    /// Groups (`MPI_Comm_group` and the group constructors).
    pub groups: Mutex<Table<oxmpi::Group>>,
    /// The level `MPI_Init_thread` provided.
    pub provided: c_int,
}

static STATE: OnceLock<State> = OnceLock::new();
static FINALIZED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Locks `m`, ignoring poisoning (a panic in another entry point was
/// already reported).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The state, if MPI is initialized and not finalized.
pub fn state() -> Result<&'static State, Error> {
    if FINALIZED.load(std::sync::atomic::Ordering::Acquire) {
        return Err(Error::new(
            ErrorClass::Other,
            "MPI_Finalize was already called",
        ));
    }
    STATE.get().ok_or_else(|| {
        Error::new(
            ErrorClass::Other,
            "MPI is not initialized (call MPI_Init first)",
        )
    })
}

/// The state even after finalize (for `MPI_Finalized` and friends).
pub fn state_any() -> Option<&'static State> {
    STATE.get()
}

/// Whether finalize ran.
pub fn finalized() -> bool {
    FINALIZED.load(std::sync::atomic::Ordering::Acquire)
}

/// Marks MPI finalized.
pub fn set_finalized() {
    FINALIZED.store(true, std::sync::atomic::Ordering::Release);
}

/// Installs the state (`MPI_Init`); an error if it was already.
pub fn install(s: State) -> Result<(), Error> {
    STATE
        .set(s)
        .map_err(|_| Error::new(ErrorClass::Other, "MPI_Init was already called"))
}

impl State {
    /// The communicator of handle `h`.
    #[inline]
    pub fn comm(&'static self, h: usize) -> Result<CommRef, Error> {
        match self.predefined_comm(h) {
            Some(c) => Ok(CommRef::Static(c)),
            None => self.comm_other(h),
        }
    }

    /// The intracommunicator of handle `h`, for a call defined on
    /// intracommunicators only (scan, exscan, topologies): an
    /// intercommunicator is `MPI_ERR_COMM`.
    pub fn intra_comm(&'static self, h: usize) -> Result<CommRef, Error> {
        let c = self.comm(h)?;
        if c.comm.is_inter() {
            return Err(Error::new(
                ErrorClass::Comm,
                "an intercommunicator where the call needs an intracommunicator",
            ));
        }
        Ok(c)
    }

    /// `MPI_COMM_WORLD` or `MPI_COMM_SELF` for their handles (no table, no
    /// lock), else `None`.
    #[inline(always)]
    pub fn predefined_comm(&self, h: usize) -> Option<&CommObj> {
        match h {
            COMM_WORLD => Some(&self.world),
            COMM_SELF => Some(&self.self_),
            _ => None,
        }
    }

    /// [`State::comm`] of a handle other than the predefined two.
    #[inline(never)]
    fn comm_other(&'static self, h: usize) -> Result<CommRef, Error> {
        match h {
            COMM_NULL => Err(Error::new(
                ErrorClass::Comm,
                "MPI_COMM_NULL is not a communicator",
            )),
            _ => lock(&self.comms)
                .get(h)
                .cloned()
                .map(CommRef::Shared)
                .ok_or_else(|| {
                    Error::new(
                        ErrorClass::Comm,
                        format!("invalid communicator handle {h:#x}"),
                    )
                }),
        }
    }

    /// The datatype of handle `h` (predefined or committed user type).
    pub fn datatype(&self, h: usize) -> Result<UserDatatype, Error> {
        if let Some(t) = crate::types::predefined(h) {
            return Ok(t);
        }
        if h == DATATYPE_NULL {
            return Err(Error::new(
                ErrorClass::Type,
                "MPI_DATATYPE_NULL is not a datatype",
            ));
        }
        let g = lock(&self.types);
        let t = g.get(h).ok_or_else(|| {
            Error::new(ErrorClass::Type, format!("invalid datatype handle {h:#x}"))
        })?;
        if !t.committed {
            return Err(Error::new(
                ErrorClass::Type,
                format!("datatype {h:#x} is not committed (call MPI_Type_commit)"),
            ));
        }
        Ok(t.dt.clone())
    }
}

/// The error handler that reports errors of calls on `comm` (or, for calls
/// without a communicator, `MPI_COMM_WORLD`'s).
pub fn errhandler_of(comm: Option<usize>) -> usize {
    crate::errh::of_comm(comm).0
}

/// Reports `e` raised by `func` through the error handler of `comm`: the
/// error's code (`crate::errcode::code_of`: its class and a string naming
/// the call and the cause) is returned under `MPI_ERRORS_RETURN`, handed
/// to the program's handler (and then returned) if it set one, and the
/// job is aborted with a message naming the call and the cause under the
/// fatal handlers. The error path only: out of line.
#[cold]
#[inline(never)]
pub fn raise(func: &str, comm: Option<usize>, e: &Error) -> c_int {
    let code = crate::errcode::code_of(func, e);
    let (h, obj) = crate::errh::of_comm(comm);
    match h {
        ERRORS_RETURN => code,
        ERRORS_ARE_FATAL | ERRORS_ABORT => {
            crate::errh::fatal(func, e.class().code(), &e.to_string())
        }
        _ => crate::errh::invoke(h, obj, code, func, &|| e.to_string()),
    }
}

/// Defines C entry points under both their `MPI_` and `PMPI_` names. The
/// body returns `Result<(), Error>`; errors go through the error handler of
/// the communicator the body names (`comm = expr`), a panic becomes
/// `MPI_ERR_INTERN`.
#[macro_export]
macro_rules! entry {
    ($(
        $(#[$m:meta])*
        fn $name:ident / $pname:ident ($($arg:ident : $ty:ty),* $(,)?) comm = $comm:expr;
        $(fast = $fast:expr;)? $body:block
    )*) => {$(
        $crate::entry!(@pmpi [$(#[$m])*] $name $pname ($($arg: $ty),*) $comm; $body $(; $fast)?);

        $(#[$m])*
        ///
        /// # Safety
        /// As for the `PMPI_` entry point.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> ::std::ffi::c_int {
            // SAFETY: the same contract, forwarded.
            unsafe { $pname($($arg),*) }
        }
    )*};
    (@pmpi [$(#[$m:meta])*] $name:ident $pname:ident ($($arg:ident : $ty:ty),*) $comm:expr; $body:block) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The pointers must be valid as the MPI standard requires for
        /// this call.
        #[no_mangle]
        pub unsafe extern "C" fn $pname($($arg: $ty),*) -> ::std::ffi::c_int {
            let comm: Option<usize> = $comm;
            $crate::state::guard(stringify!($name), comm, || -> Result<(), ::oxmpi::Error> { $body })
        }
    };
    // With a small-message path (`fast`: whether it did the whole call) in
    // the entry point's own small frame, and the general path out of line
    // (every store on the small path counts in the slow cross-core state,
    // see `docs/performance.md`).
    (@pmpi [$(#[$m:meta])*] $name:ident $pname:ident ($($arg:ident : $ty:ty),*) $comm:expr; $body:block; $fast:expr) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The pointers must be valid as the MPI standard requires for
        /// this call.
        #[no_mangle]
        pub unsafe extern "C" fn $pname($($arg: $ty),*) -> ::std::ffi::c_int {
            /// The call past its small-message path.
            #[inline(never)]
            unsafe fn general($($arg: $ty),*) -> ::std::ffi::c_int {
                let comm: Option<usize> = $comm;
                $crate::state::guard(stringify!($name), comm, || -> Result<(), ::oxmpi::Error> { $body })
            }
            let comm: Option<usize> = $comm;
            $crate::state::fast_or(
                stringify!($name),
                comm,
                || $fast,
                // SAFETY: the same contract, forwarded.
                || unsafe { general($($arg),*) },
            )
        }
    };
}

/// Runs the body of C entry point `name`: `MPI_SUCCESS`, or its error
/// (or a panic, as `MPI_ERR_INTERN`) raised through the error handler of
/// `comm` (`None`: `MPI_COMM_WORLD`'s). No panic crosses into C.
#[inline(always)]
pub fn guard(name: &str, comm: Option<usize>, body: impl FnOnce() -> Result<(), Error>) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(e)) => raise(name, comm, &e),
        Err(_) => internal_panic(name, comm),
    }
}

/// A C entry point with a small-message path: `fast` first (whether it
/// did the whole call), in the entry point's own small frame; `general`
/// (the call's general path, which reports every error, out of line) when
/// it did not. A panic in `fast` is `MPI_ERR_INTERN`, as in [`guard`].
#[inline(always)]
pub fn fast_or(
    name: &str,
    comm: Option<usize>,
    fast: impl FnOnce() -> bool,
    general: impl FnOnce() -> c_int,
) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(fast)) {
        Ok(true) => SUCCESS,
        Ok(false) => general(),
        Err(_) => internal_panic(name, comm),
    }
}

/// `MPI_ERR_INTERN` for a panic caught in entry point `name`.
#[cold]
fn internal_panic(name: &str, comm: Option<usize>) -> c_int {
    raise(
        name,
        comm,
        &Error::new(ErrorClass::Intern, "internal panic"),
    )
}

/// An `MPI_ERR_ARG` error for a null pointer argument `what`.
pub fn null_arg(what: &str) -> Error {
    Error::new(ErrorClass::Arg, format!("{what} is a null pointer"))
}

#[cfg(test)]
mod layout {
    /// Every request-table insert and take moves an entry: keep it small
    /// (a non-blocking operation is 40 bytes; the completed outcome, 40
    /// bytes inline so that `REQUEST_SENT` allocates nothing, sets the
    /// entry at 48 with the tag). It was 96.
    #[test]
    fn request_entry_is_small() {
        assert_eq!(std::mem::size_of::<super::ReqObj>(), 48);
    }
}

#[cfg(test)]
mod received {
    use super::{
        received_handle, received_status, Requests, REQUEST_NULL, REQUEST_SENT, USER_BASE,
    };
    use crate::state::ReqObj;

    #[test]
    fn a_received_handle_carries_its_status() {
        for (src, tag, bytes) in [
            (0, 0, 0),
            (3, 7, 8),
            ((1 << 20) - 1, (1 << 15) - 1, (1 << 20) - 1),
        ] {
            let h = received_handle(src, tag, bytes).expect("fits");
            assert_eq!(h & 1, 1, "odd: never a table handle");
            let st = received_status(h).expect("decodes");
            assert_eq!((st.source, st.tag, st.bytes()), (src, tag, bytes as u64));
            assert_eq!((st.error, st.internal[2], st.internal[3]), (0, 0, 0));
            let mut r = Requests::default();
            assert!(matches!(r.get(h), Some(ReqObj::Done(..))));
            assert!(matches!(r.remove(h), Some(ReqObj::Done(s, None)) if s.tag == tag));
            assert!(r.get_mut(h).is_none(), "nothing to change");
        }
        // Fields that do not fit take a table entry.
        assert_eq!(received_handle(1 << 20, 0, 8), None);
        assert_eq!(received_handle(0, 1 << 15, 8), None);
        assert_eq!(received_handle(0, 0, 1 << 20), None);
        assert_eq!(received_handle(-1, 0, 8), None);
        // Other handles, and garbage, are not received handles.
        for h in [
            REQUEST_NULL,
            REQUEST_SENT,
            USER_BASE,
            USER_BASE + 8,
            0x7ff,
            usize::MAX,
        ] {
            assert!(received_status(h).is_none(), "{h:#x}");
        }
    }
}
