//! Environment calls: init, finalize, abort, time, versions, thread
//! levels, error classes and handlers, communicator rank and size.

use std::ffi::{c_char, c_double, c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use oxmpi::{Error, ErrorClass, Threading};

use crate::entry;
use crate::state::{
    install, lock, null_arg, set_finalized, state, state_any, CommObj, Requests, State, Table,
    ERRORS_ABORT, ERRORS_ARE_FATAL, ERRORS_RETURN,
};

const THREAD_SINGLE: c_int = 0;
const THREAD_FUNNELED: c_int = 1024;
const THREAD_MULTIPLE: c_int = 4096;
const TAG_UB_KEY: c_int = 501;
const IO_KEY: c_int = 502;
const HOST_KEY: c_int = 503;
const WTIME_IS_GLOBAL_KEY: c_int = 504;
const APPNUM_KEY: c_int = 505;
const LASTUSEDCODE_KEY: c_int = 506;
const UNIVERSE_SIZE_KEY: c_int = 507;
/// `MPI_KEYVAL_INVALID`.
const KEYVAL_INVALID: c_int = 0;
/// `MPI_ERR_LASTCODE`: no error code or class in use is larger (oxmpi
/// adds none: `MPI_Add_error_class` is not implemented).
const ERR_LASTCODE: c_int = 0x3fff;
/// `MPI_ERRHANDLER_NULL`.
const ERRHANDLER_NULL: usize = 0x140;
const LIBRARY_VERSION: &str = concat!(
    "oxmpi ",
    env!("CARGO_PKG_VERSION"),
    " (MPI 5.0 standard ABI)"
);

fn epoch() -> Instant {
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

/// Writes `v` through `p`, or fails with `MPI_ERR_ARG` naming `what`.
///
/// # Safety
/// `p` must be null or valid for a write of `T`.
pub unsafe fn put<T>(p: *mut T, v: T, what: &str) -> Result<(), Error> {
    if p.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: not null; the caller promises it is valid for a write.
    unsafe { p.write(v) };
    Ok(())
}

/// Copies `s` (NUL-terminated, cut to `max - 1` bytes) into `buf` and its
/// length into `len`.
///
/// # Safety
/// `buf` must be valid for `max` bytes, `len` for one `int`.
unsafe fn put_str(buf: *mut c_char, len: *mut c_int, s: &str, max: usize) -> Result<(), Error> {
    if buf.is_null() {
        return Err(null_arg("the string buffer"));
    }
    let b = s.as_bytes();
    let n = b.len().min(max - 1);
    // SAFETY: the caller promises `buf` holds `max` bytes; `n + 1 <= max`.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr().cast::<c_char>(), buf, n);
        buf.add(n).write(0);
    }
    // SAFETY: as promised by the caller.
    unsafe { put(len, n as c_int, "resultlen") }
}

fn init(required: c_int) -> Result<c_int, Error> {
    epoch();
    if state_any().is_some() {
        return Err(Error::new(ErrorClass::Other, "MPI_Init was already called"));
    }
    let provided = match required {
        THREAD_SINGLE | THREAD_FUNNELED | 2048 | THREAD_MULTIPLE => required,
        r if r > THREAD_MULTIPLE => THREAD_MULTIPLE,
        _ => THREAD_SINGLE,
    };
    let universe: &'static _ = Box::leak(Box::new(oxmpi::initialize_with_threading(
        Threading::Multiple,
    )?));
    let obj = |c: oxmpi::Communicator<'static, Threading::Multiple>,
               name: &str|
     -> Result<Arc<CommObj>, Error> {
        let coll = c.shadow()?;
        Ok(Arc::new(CommObj {
            comm: c,
            coll,
            errh: Mutex::new(ERRORS_ARE_FATAL),
            name: Mutex::new(name.to_string()),
            topo: None,
        }))
    };
    if provided == THREAD_SINGLE || provided == THREAD_FUNNELED {
        // One thread calls MPI: the engine takes no lock (checked: a call
        // from another thread is an error, never a race).
        universe.confine_to_this_thread();
    }
    let world = obj(universe.world(), "MPI_COMM_WORLD")?;
    let self_ = obj(universe.self_(), "MPI_COMM_SELF")?;
    install(State {
        universe,
        world,
        self_,
        comms: Mutex::new(Table::default()),
        requests: Mutex::new(Requests::default()),
        types: Mutex::new(Table::default()),
        groups: Mutex::new(Table::default()),
        messages: Mutex::new(Table::default()),
        provided,
    })?;
    Ok(provided)
}

entry! {
    /// `MPI_Init`.
    fn MPI_Init / PMPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) comm = None; {
        init(THREAD_SINGLE).map(|_| ())
    }

    /// `MPI_Init_thread`.
    fn MPI_Init_thread / PMPI_Init_thread(
        _argc: *mut c_int,
        _argv: *mut *mut *mut c_char,
        required: c_int,
        provided: *mut c_int,
    ) comm = None; {
        let p = init(required)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(provided, p, "provided") }
    }

    /// `MPI_Initialized`.
    fn MPI_Initialized / PMPI_Initialized(flag: *mut c_int) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { put(flag, c_int::from(state_any().is_some()), "flag") }
    }

    /// `MPI_Finalized`.
    fn MPI_Finalized / PMPI_Finalized(flag: *mut c_int) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { put(flag, c_int::from(crate::state::finalized()), "flag") }
    }

    /// `MPI_Finalize`: the runtime's finalize, which completes every
    /// request still active that can complete (freed ones included) and
    /// abandons those that wait for a matching call (an unmatched receive,
    /// a synchronous or rendezvous send nobody received).
    fn MPI_Finalize / PMPI_Finalize() comm = None; {
        let s = state()?;
        set_finalized();
        s.universe.clone().finalize()
    }

    /// `MPI_Abort`: ends the whole job with `code`.
    fn MPI_Abort / PMPI_Abort(_comm: usize, code: c_int) comm = None; {
        match state_any() {
            Some(s) => s.universe.abort(code, "MPI_Abort called"),
            None => std::process::exit(code),
        }
    }

    /// `MPI_Abi_get_fortran_info`: oxmpi has no Fortran bindings, so there
    /// is no Fortran information: `MPI_INFO_NULL`.
    fn MPI_Abi_get_fortran_info / PMPI_Abi_get_fortran_info(info: *mut usize) comm = None; {
        state()?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(info, 0x130, "info") }
    }

    /// `MPI_Get_version`: 5.0.
    fn MPI_Get_version / PMPI_Get_version(version: *mut c_int, subversion: *mut c_int) comm = None; {
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(version, 5, "version")?;
            put(subversion, 0, "subversion")
        }
    }

    /// `MPI_Get_library_version`.
    fn MPI_Get_library_version / PMPI_Get_library_version(version: *mut c_char, len: *mut c_int) comm = None; {
        // SAFETY: the standard requires MPI_MAX_LIBRARY_VERSION_STRING bytes.
        unsafe { put_str(version, len, LIBRARY_VERSION, 8192) }
    }

    /// `MPI_Get_processor_name`: the host name.
    fn MPI_Get_processor_name / PMPI_Get_processor_name(name: *mut c_char, len: *mut c_int) comm = None; {
        let u = rustix::system::uname();
        let host = u.nodename().to_string_lossy().into_owned();
        // SAFETY: the standard requires MPI_MAX_PROCESSOR_NAME bytes.
        unsafe { put_str(name, len, &host, 256) }
    }

    /// `MPI_Query_thread`.
    fn MPI_Query_thread / PMPI_Query_thread(provided: *mut c_int) comm = None; {
        let s = state()?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(provided, s.provided, "provided") }
    }

    /// `MPI_Is_thread_main`.
    fn MPI_Is_thread_main / PMPI_Is_thread_main(flag: *mut c_int) comm = None; {
        let s = state()?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(flag, c_int::from(s.universe.is_thread_main()), "flag") }
    }

    /// `MPI_Comm_rank`.
    fn MPI_Comm_rank / PMPI_Comm_rank(comm: usize, rank: *mut c_int) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(rank, c.comm.rank(), "rank") }
    }

    /// `MPI_Comm_size`.
    fn MPI_Comm_size / PMPI_Comm_size(comm: usize, size: *mut c_int) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(size, c.comm.size(), "size") }
    }

    /// `MPI_Comm_set_errhandler` (the predefined handlers).
    fn MPI_Comm_set_errhandler / PMPI_Comm_set_errhandler(comm: usize, errh: usize) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        if !matches!(errh, ERRORS_ARE_FATAL | ERRORS_RETURN | ERRORS_ABORT) {
            return Err(Error::new(ErrorClass::Errhandler, format!("invalid error handler {errh:#x}")));
        }
        *lock(&c.errh) = errh;
        Ok(())
    }

    /// `MPI_Comm_get_errhandler`.
    fn MPI_Comm_get_errhandler / PMPI_Comm_get_errhandler(comm: usize, errh: *mut usize) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let e = *lock(&c.errh);
        // SAFETY: the caller's out-parameter.
        unsafe { put(errh, e, "errhandler") }
    }

    /// `MPI_Errhandler_free` (the predefined handlers are the only ones:
    /// the handle becomes `MPI_ERRHANDLER_NULL`). `MPI_ERRHANDLER_NULL` or
    /// any other value is `MPI_ERR_ERRHANDLER`, as in MPICH.
    fn MPI_Errhandler_free / PMPI_Errhandler_free(errh: *mut usize) comm = None; {
        if errh.is_null() {
            return Err(null_arg("errhandler"));
        }
        // SAFETY: not null; the caller's in/out-parameter.
        let h = unsafe { errh.read() };
        if !matches!(h, ERRORS_ARE_FATAL | ERRORS_RETURN | ERRORS_ABORT) {
            let what = if h == ERRHANDLER_NULL {
                "MPI_ERRHANDLER_NULL is not an error handler".to_string()
            } else {
                format!("invalid error handler {h:#x}")
            };
            return Err(Error::new(ErrorClass::Errhandler, what));
        }
        // SAFETY: as above.
        unsafe { put(errh, ERRHANDLER_NULL, "errhandler") }
    }

    /// `MPI_Error_class`: error codes are their classes.
    fn MPI_Error_class / PMPI_Error_class(code: c_int, class: *mut c_int) comm = None; {
        if !(0..=62).contains(&code) && code != 75 {
            return Err(Error::new(ErrorClass::Arg, format!("unknown error code {code}")));
        }
        // SAFETY: the caller's out-parameter.
        unsafe { put(class, code, "errorclass") }
    }

    /// `MPI_Error_string`.
    fn MPI_Error_string / PMPI_Error_string(code: c_int, s: *mut c_char, len: *mut c_int) comm = None; {
        let text = error_text(code)
            .ok_or_else(|| Error::new(ErrorClass::Arg, format!("unknown error code {code}")))?;
        // SAFETY: the standard requires MPI_MAX_ERROR_STRING bytes.
        unsafe { put_str(s, len, text, 512) }
    }

    /// `MPI_Comm_get_attr` for the predefined attributes (oxmpi creates
    /// no others: `MPI_Comm_create_keyval` is not implemented, so any
    /// other key, `MPI_KEYVAL_INVALID` included, is `MPI_ERR_KEYVAL`, as in
    /// MPICH).
    fn MPI_Comm_get_attr / PMPI_Comm_get_attr(
        comm: usize,
        key: c_int,
        value: *mut c_void,
        flag: *mut c_int,
    ) comm = Some(comm); {
        let s = state()?;
        s.comm(comm)?;
        static TAG_UB: c_int = c_int::MAX;
        static HOST: c_int = -3; // MPI_PROC_NULL: no host process
        static IO: c_int = -1; // MPI_ANY_SOURCE: every process can do I/O
        static WTIME_GLOBAL: c_int = 0;
        static LASTUSEDCODE: c_int = ERR_LASTCODE;
        static UNIVERSE: OnceLock<c_int> = OnceLock::new();
        static APPNUM: OnceLock<c_int> = OnceLock::new();
        let p: &'static c_int = match key {
            TAG_UB_KEY => &TAG_UB,
            HOST_KEY => &HOST,
            IO_KEY => &IO,
            WTIME_IS_GLOBAL_KEY => &WTIME_GLOBAL,
            UNIVERSE_SIZE_KEY => UNIVERSE.get_or_init(|| s.universe.universe_size() as c_int),
            APPNUM_KEY => APPNUM.get_or_init(|| s.universe.appnum() as c_int),
            LASTUSEDCODE_KEY => &LASTUSEDCODE,
            KEYVAL_INVALID => {
                return Err(Error::new(ErrorClass::Keyval, "MPI_KEYVAL_INVALID is not an attribute key"))
            }
            k => return Err(Error::new(ErrorClass::Keyval, format!("no communicator attribute key {k}"))),
        };
        // SAFETY: the caller's out-parameters; `value` receives a pointer
        // to a static int, as the standard specifies for these keys.
        unsafe {
            put(value.cast::<*const c_int>(), p as *const c_int, "attribute_val")?;
            put(flag, 1, "flag")
        }
    }
}

/// `MPI_Wtime`: seconds since an arbitrary time in the past (monotonic).
#[no_mangle]
pub extern "C" fn PMPI_Wtime() -> c_double {
    epoch().elapsed().as_secs_f64()
}

/// `MPI_Wtime`.
#[no_mangle]
pub extern "C" fn MPI_Wtime() -> c_double {
    PMPI_Wtime()
}

/// `MPI_Wtick`: the clock's resolution (nanoseconds).
#[no_mangle]
pub extern "C" fn PMPI_Wtick() -> c_double {
    1e-9
}

/// `MPI_Wtick`.
#[no_mangle]
pub extern "C" fn MPI_Wtick() -> c_double {
    PMPI_Wtick()
}

fn error_text(code: c_int) -> Option<&'static str> {
    Some(match code {
        0 => "MPI_SUCCESS: no error",
        1 => "MPI_ERR_BUFFER: invalid buffer pointer",
        2 => "MPI_ERR_COUNT: invalid count argument",
        3 => "MPI_ERR_TYPE: invalid datatype",
        4 => "MPI_ERR_TAG: invalid tag",
        5 => "MPI_ERR_COMM: invalid communicator",
        6 => "MPI_ERR_RANK: invalid rank",
        7 => "MPI_ERR_REQUEST: invalid request",
        8 => "MPI_ERR_ROOT: invalid root",
        9 => "MPI_ERR_GROUP: invalid group",
        10 => "MPI_ERR_OP: invalid operation",
        11 => "MPI_ERR_TOPOLOGY: invalid topology",
        12 => "MPI_ERR_DIMS: invalid dimension argument",
        13 => "MPI_ERR_ARG: invalid argument",
        14 => "MPI_ERR_UNKNOWN: unknown error",
        15 => "MPI_ERR_TRUNCATE: message truncated on receive",
        16 => "MPI_ERR_OTHER: other error",
        17 => "MPI_ERR_INTERN: internal error",
        18 => "MPI_ERR_PENDING: pending request",
        19 => "MPI_ERR_IN_STATUS: error code is in status",
        36 => "MPI_ERR_KEYVAL: invalid attribute key",
        39 => "MPI_ERR_NO_MEM: out of memory",
        61 => "MPI_ERR_ERRHANDLER: invalid error handler",
        62 => "MPI_ERR_ABI: ABI mismatch",
        75 => "MPI_ERR_PROC_FAILED: a process failed",
        20..=62 => "MPI error (a class of a feature oxmpi does not implement)",
        _ => return None,
    })
}
