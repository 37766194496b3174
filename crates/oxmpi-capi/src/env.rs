//! Environment calls: init, finalize (and the start and end of the one
//! runtime the World Model and sessions share), abort, time, versions,
//! thread levels, `MPI_Pcontrol`, communicator rank and size. Error
//! handlers and classes are `crate::errh`'s, attributes `crate::attr`'s.

use std::ffi::{c_char, c_double, c_int};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};

use oxmpi::{Error, ErrorClass, Threading};

use crate::entry;
use crate::state::{
    install, lock, null_arg, set_finalized, state, state_any, CommObj, Requests, State, Table,
    ERRORS_ARE_FATAL,
};

const THREAD_SINGLE: c_int = 0;
const THREAD_FUNNELED: c_int = 1024;
const THREAD_MULTIPLE: c_int = 4096;

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
pub unsafe fn put_str(buf: *mut c_char, len: *mut c_int, s: &str, max: usize) -> Result<(), Error> {
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

/// Whether `MPI_Init` or `MPI_Init_thread` was called (the World Model;
/// sessions start the runtime without it).
static WORLD_INIT: AtomicBool = AtomicBool::new(false);
/// Whether `MPI_Finalize` was called.
static WORLD_FINI: AtomicBool = AtomicBool::new(false);
/// The thread level `MPI_Init_thread` provided.
static PROVIDED: AtomicI32 = AtomicI32::new(THREAD_SINGLE);
/// Held while the runtime starts (by `MPI_Init` or a session).
static STARTING: Mutex<()> = Mutex::new(());

/// The thread level provided for `required`: any (the engine runs at
/// `MPI_THREAD_MULTIPLE` and confines itself for the lower two).
pub fn level(required: c_int) -> c_int {
    match required {
        THREAD_SINGLE | THREAD_FUNNELED | 2048 | THREAD_MULTIPLE => required,
        r if r > THREAD_MULTIPLE => THREAD_MULTIPLE,
        _ => THREAD_SINGLE,
    }
}

/// The thread level `MPI_Query_thread` reports: `MPI_Init_thread`'s, or
/// the runtime's when only sessions started it.
pub fn provided() -> c_int {
    if WORLD_INIT.load(Ordering::Acquire) {
        PROVIDED.load(Ordering::Acquire)
    } else {
        state_any().map_or(THREAD_SINGLE, |s| s.provided)
    }
}

/// Whether the World Model is active (`MPI_Init` called, `MPI_Finalize`
/// not yet).
pub fn world_active() -> bool {
    WORLD_INIT.load(Ordering::Acquire) && !WORLD_FINI.load(Ordering::Acquire)
}

/// The process state, starting the runtime if nothing started it yet
/// (`MPI_Init`, `MPI_Init_thread`, the first `MPI_Session_init`) at
/// thread level `provided`; `confine`: a single-threaded start, which
/// confines the engine to this thread. Once finalized, the runtime does
/// not start again (`MPI_ERR_OTHER`).
pub fn ensure_runtime(provided: c_int, confine: bool) -> Result<&'static State, Error> {
    // The clock's origin: MPI_Wtime counts from here.
    oxmpi::environment::time();
    let _g = lock(&STARTING);
    if crate::state::finalized() {
        return Err(Error::new(
            ErrorClass::Other,
            "MPI was finalized in this process and oxmpi cannot start it again",
        ));
    }
    if let Some(s) = state_any() {
        return Ok(s);
    }
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
            coll_seq: Default::default(),
        }))
    };
    if confine {
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
    state()
}

/// Finalizes the runtime if neither the World Model nor a session still
/// uses it (`MPI_Finalize` and the last `MPI_Session_finalize` call it).
pub fn finalize_if_unused(s: &'static State) -> Result<(), Error> {
    if world_active() || crate::session::active() > 0 {
        return Ok(());
    }
    set_finalized();
    s.universe.clone().finalize()
}

fn init(required: c_int) -> Result<c_int, Error> {
    if WORLD_INIT.load(Ordering::Acquire) {
        return Err(Error::new(ErrorClass::Other, "MPI_Init was already called"));
    }
    let provided = level(required);
    let confine = provided == THREAD_SINGLE || provided == THREAD_FUNNELED;
    // A runtime a session started stays unconfined (its threads may call).
    ensure_runtime(provided, confine && crate::session::active() == 0)?;
    PROVIDED.store(provided, Ordering::Release);
    if WORLD_INIT.swap(true, Ordering::AcqRel) {
        return Err(Error::new(ErrorClass::Other, "MPI_Init was already called"));
    }
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
        unsafe { put(flag, c_int::from(WORLD_INIT.load(Ordering::Acquire)), "flag") }
    }

    /// `MPI_Finalized`.
    fn MPI_Finalized / PMPI_Finalized(flag: *mut c_int) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { put(flag, c_int::from(WORLD_FINI.load(Ordering::Acquire)), "flag") }
    }

    /// `MPI_Finalize`: deletes the attributes of `MPI_COMM_SELF`, then of
    /// `MPI_COMM_WORLD` (a failing delete callback fails the call), then
    /// the runtime's finalize, which completes every request still active
    /// that can complete (freed ones included) and abandons those that
    /// wait for a matching call (an unmatched receive, a synchronous or
    /// rendezvous send nobody received). While a session is still open,
    /// the runtime stays up until the last one is finalized.
    fn MPI_Finalize / PMPI_Finalize() comm = None; {
        let s = state()?;
        if !world_active() {
            return Err(Error::new(ErrorClass::Other, "MPI_Finalize without MPI_Init (or called twice)"));
        }
        crate::attr::finalize()?;
        WORLD_FINI.store(true, Ordering::Release);
        finalize_if_unused(s)
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
        let (v, sub) = oxmpi::environment::version();
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(version, v, "version")?;
            put(subversion, sub, "subversion")
        }
    }

    /// `MPI_Get_library_version`.
    fn MPI_Get_library_version / PMPI_Get_library_version(version: *mut c_char, len: *mut c_int) comm = None; {
        // SAFETY: the standard requires MPI_MAX_LIBRARY_VERSION_STRING bytes.
        unsafe { put_str(version, len, &oxmpi::environment::library_version(), 8192) }
    }

    /// `MPI_Get_hw_resource_info` (MPI 4.1): a new info object describing
    /// the hardware the calling process runs on: `mpi_hw_resource_type`,
    /// the resource types `MPI_Comm_split_type` can split by
    /// (`mpi_shared_memory`, the node); `host`; `num_cpus`, the CPUs this
    /// process may run on; `node_procs`, the job's processes on this node.
    fn MPI_Get_hw_resource_info / PMPI_Get_hw_resource_info(hw_info: *mut usize) comm = None; {
        if hw_info.is_null() {
            return Err(crate::state::null_arg("hw_info"));
        }
        let mut e = vec![("mpi_hw_resource_type".to_string(), "mpi_shared_memory".to_string())];
        e.push(("host".into(), oxmpi::environment::processor_name()));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        e.push(("num_cpus".into(), cpus.to_string()));
        if let Some(s) = crate::state::state_any() {
            e.push(("node_procs".into(), s.universe.local_ranks().len().to_string()));
        }
        let h = crate::info::new_info(e);
        // SAFETY: the caller's out-parameter (null checked).
        unsafe { put(hw_info, h, "hw_info") }
    }

    /// `MPI_Get_processor_name`: the host name.
    fn MPI_Get_processor_name / PMPI_Get_processor_name(name: *mut c_char, len: *mut c_int) comm = None; {
        // SAFETY: the standard requires MPI_MAX_PROCESSOR_NAME bytes.
        unsafe { put_str(name, len, &oxmpi::environment::processor_name(), 256) }
    }

    /// `MPI_Pcontrol`: the profiling level for a profiling library that
    /// wraps the `PMPI_` calls; oxmpi itself profiles nothing, so the call
    /// does nothing (as the standard allows). Its further arguments (it is
    /// variadic) are not read.
    fn MPI_Pcontrol / PMPI_Pcontrol(_level: c_int) comm = None; {
        Ok(())
    }

    /// `MPI_Query_thread`.
    fn MPI_Query_thread / PMPI_Query_thread(provided: *mut c_int) comm = None; {
        state()?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(provided, self::provided(), "provided") }
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
}

/// `MPI_Wtime`: seconds since an arbitrary time in the past (monotonic).
#[no_mangle]
pub extern "C" fn PMPI_Wtime() -> c_double {
    oxmpi::environment::time()
}

/// `MPI_Wtime`.
#[no_mangle]
pub extern "C" fn MPI_Wtime() -> c_double {
    PMPI_Wtime()
}

/// `MPI_Wtick`: the clock's resolution (nanoseconds).
#[no_mangle]
pub extern "C" fn PMPI_Wtick() -> c_double {
    oxmpi::environment::time_resolution()
}

/// `MPI_Wtick`.
#[no_mangle]
pub extern "C" fn MPI_Wtick() -> c_double {
    PMPI_Wtick()
}
