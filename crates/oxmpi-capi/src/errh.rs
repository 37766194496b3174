//! Error handlers and error codes: the predefined handlers and those the
//! program creates (`MPI_Comm_create_errhandler` and its window, file and
//! session forms), setting and calling them, `MPI_Errhandler_free`, and
//! the calls on error classes, codes and strings (`MPI_Error_class`,
//! `MPI_Error_string`, `MPI_Add_error_*`, `MPI_Remove_error_*`; the codes
//! themselves are `crate::errcode`'s).
//!
//! A handler the program created is an object in a table, with a
//! reference count: the program's handle holds one, each communicator
//! (or session) it is set on holds one, and each handle
//! `MPI_Comm_get_errhandler` returns holds one; `MPI_Errhandler_free`
//! drops the program's, and the object goes with the last. A handler is
//! called with a pointer to the handle of the object the error occurred
//! on and a pointer to the error code (the standard ABI's variadic
//! `MPI_Comm_errhandler_function`, called with no further arguments);
//! when it returns, the call that failed returns the code.

use std::ffi::{c_char, c_int, CStr};
use std::sync::Mutex;

use oxmpi::{Error, ErrorClass};

use crate::entry;
use crate::env::put;
use crate::state::{
    lock, null_arg, state, state_any, Table, COMM_WORLD, ERRORS_ABORT, ERRORS_ARE_FATAL,
    ERRORS_RETURN,
};

/// `MPI_ERRHANDLER_NULL`.
pub const ERRHANDLER_NULL: usize = 0x140;
/// `MPI_FILE_NULL`.
pub const FILE_NULL: usize = 0x118;
/// `MPI_WIN_NULL`.
pub const WIN_NULL: usize = 0x110;

/// The standard ABI's `MPI_Comm_errhandler_function` (and the window,
/// file and session forms, which differ only in the handle's type):
/// `void f(MPI_X *handle, int *error_code, ...)`.
pub type HandlerFn = unsafe extern "C" fn(*mut usize, *mut c_int, ...);

/// The kind of object an error handler is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Communicators.
    Comm,
    /// Windows.
    Win,
    /// Files.
    File,
    /// Sessions.
    Session,
}

impl Kind {
    /// The kind's name, as in its calls.
    fn name(self) -> &'static str {
        match self {
            Kind::Comm => "communicator",
            Kind::Win => "window",
            Kind::File => "file",
            Kind::Session => "session",
        }
    }
}

/// An error handler the program created.
struct Handler {
    kind: Kind,
    f: HandlerFn,
    refs: usize,
}

static HANDLERS: Mutex<Table<Handler>> = Mutex::new(Table::new());

/// `MPI_File_set_errhandler(MPI_FILE_NULL, ...)`: the handler of errors
/// of file calls (`MPI_ERRORS_RETURN` by default, as the standard says).
static FILE_NULL_HANDLER: Mutex<usize> = Mutex::new(ERRORS_RETURN);

/// Whether `h` is one of the predefined handlers.
pub fn is_predefined(h: usize) -> bool {
    matches!(h, ERRORS_ARE_FATAL | ERRORS_RETURN | ERRORS_ABORT)
}

/// Checks that `h` can be set on an object of kind `kind`: a predefined
/// handler or one created for that kind.
pub fn check(h: usize, kind: Kind) -> Result<(), Error> {
    if is_predefined(h) {
        return Ok(());
    }
    if h == ERRHANDLER_NULL {
        return Err(Error::new(
            ErrorClass::Errhandler,
            "MPI_ERRHANDLER_NULL is not an error handler",
        ));
    }
    match lock(&HANDLERS).get(h) {
        None => Err(Error::new(
            ErrorClass::Errhandler,
            format!("invalid error handler {h:#x}"),
        )),
        Some(x) if x.kind != kind => Err(Error::new(
            ErrorClass::Arg,
            format!(
                "error handler {h:#x} was created for a {}, not a {}",
                x.kind.name(),
                kind.name()
            ),
        )),
        Some(_) => Ok(()),
    }
}

/// Takes one more reference to handler `h` (predefined ones have none).
pub fn retain(h: usize) {
    if let Some(x) = lock(&HANDLERS).get_mut(h) {
        x.refs += 1;
    }
}

/// Drops one reference to handler `h`; the last removes it.
pub fn release(h: usize) {
    let mut t = lock(&HANDLERS);
    if let Some(x) = t.get_mut(h) {
        x.refs -= 1;
        if x.refs == 0 {
            t.remove(h);
        }
    }
}

/// Sets handler `h` (checked for `kind`) in `slot`, moving the references.
pub fn set(slot: &Mutex<usize>, h: usize, kind: Kind) -> Result<(), Error> {
    check(h, kind)?;
    retain(h);
    let old = std::mem::replace(&mut *lock(slot), h);
    release(old);
    Ok(())
}

/// The handler in `slot`, with a reference for the program's new handle.
pub fn get(slot: &Mutex<usize>) -> usize {
    let h = *lock(slot);
    retain(h);
    h
}

/// Ends the job for error `code` of call `func` (the fatal handlers).
#[cold]
pub fn fatal(func: &str, class: c_int, msg: &str) -> ! {
    let msg = format!("{func}: {msg}");
    eprintln!("oxmpi: fatal error in {msg}");
    match state_any() {
        Some(s) if !crate::state::finalized() => s.universe.abort(class, &msg),
        _ => std::process::exit(class.max(1)),
    }
}

/// Invokes handler `h` for error `code` on the object of handle `obj`:
/// returns the code to return (the fatal handlers do not return; `what`
/// is their message).
#[cold]
pub fn invoke(h: usize, obj: usize, code: c_int, func: &str, what: &dyn Fn() -> String) -> c_int {
    match h {
        ERRORS_RETURN => code,
        ERRORS_ARE_FATAL | ERRORS_ABORT => {
            let class = crate::errcode::class_of(code).unwrap_or(ErrorClass::Other.code());
            fatal(func, class, &what())
        }
        _ => {
            let f = lock(&HANDLERS).get(h).map(|x| x.f);
            match f {
                Some(f) => {
                    let mut handle = obj;
                    let mut c = code;
                    // SAFETY: the program's handler, called as the standard
                    // ABI's typedef says, with pointers to locals.
                    unsafe { f(&mut handle, &mut c) };
                    code
                }
                // A handler freed while set cannot be: the object holds a
                // reference. Report the error as fatal rather than drop it.
                None => fatal(func, ErrorClass::Intern.code(), &what()),
            }
        }
    }
}

/// The handler of file calls on `MPI_FILE_NULL` (every file call's, as no
/// file can be opened).
pub fn file_handler() -> usize {
    *lock(&FILE_NULL_HANDLER)
}

/// Creates a handler of `kind` calling `f` into `*out`.
///
/// # Safety
/// `out` null or valid for a write.
unsafe fn create(f: Option<HandlerFn>, out: *mut usize, kind: Kind) -> Result<(), Error> {
    let f = f.ok_or_else(|| null_arg("the error handler function"))?;
    if out.is_null() {
        return Err(null_arg("errhandler"));
    }
    let h = lock(&HANDLERS).insert(Handler { kind, f, refs: 1 });
    // SAFETY: not null; the caller's out-parameter.
    unsafe { put(out, h, "errhandler") }
}

/// A C string argument as a Rust string.
///
/// # Safety
/// `p` null or a NUL-terminated string.
pub unsafe fn c_str(p: *const c_char, what: &str) -> Result<String, Error> {
    if p.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: not null; NUL-terminated per the caller.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

entry! {
    /// `MPI_Comm_create_errhandler`: a handler for communicators calling
    /// `f` with the communicator and the error code.
    fn MPI_Comm_create_errhandler / PMPI_Comm_create_errhandler(f: Option<HandlerFn>, errh: *mut usize) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { create(f, errh, Kind::Comm) }
    }

    /// `MPI_Win_create_errhandler`: a handler for windows (which oxmpi
    /// cannot create: it can be freed, never set).
    fn MPI_Win_create_errhandler / PMPI_Win_create_errhandler(f: Option<HandlerFn>, errh: *mut usize) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { create(f, errh, Kind::Win) }
    }

    /// `MPI_File_create_errhandler`: a handler for files (which oxmpi
    /// cannot open: it can be set on `MPI_FILE_NULL`, the handler of
    /// every file call).
    fn MPI_File_create_errhandler / PMPI_File_create_errhandler(f: Option<HandlerFn>, errh: *mut usize) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { create(f, errh, Kind::File) }
    }

    /// `MPI_Session_create_errhandler`: a handler for sessions (may be
    /// called before any initialization).
    fn MPI_Session_create_errhandler / PMPI_Session_create_errhandler(f: Option<HandlerFn>, errh: *mut usize) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { create(f, errh, Kind::Session) }
    }

    /// `MPI_Comm_set_errhandler`: a predefined handler or one created for
    /// communicators.
    fn MPI_Comm_set_errhandler / PMPI_Comm_set_errhandler(comm: usize, errh: usize) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        set(&c.errh, errh, Kind::Comm)
    }

    /// `MPI_Comm_get_errhandler`: the handler of `comm` (a new reference to
    /// a created one, which the program frees).
    fn MPI_Comm_get_errhandler / PMPI_Comm_get_errhandler(comm: usize, errh: *mut usize) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        if errh.is_null() {
            return Err(null_arg("errhandler"));
        }
        let h = get(&c.errh);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(errh, h, "errhandler") }
    }

    /// `MPI_Comm_call_errhandler`: invokes `comm`'s handler with `code`;
    /// returns `MPI_SUCCESS` when the handler returns (the fatal ones end
    /// the job naming the code's string).
    fn MPI_Comm_call_errhandler / PMPI_Comm_call_errhandler(comm: usize, code: c_int) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        let h = *lock(&c.errh);
        invoke(h, comm, code, "MPI_Comm_call_errhandler", &|| describe(code));
        Ok(())
    }

    /// `MPI_File_set_errhandler`: on `MPI_FILE_NULL` (the handler of file
    /// calls); any other handle is `MPI_ERR_FILE` (oxmpi opens no files).
    fn MPI_File_set_errhandler / PMPI_File_set_errhandler(file: usize, errh: usize) comm = None; {
        if file != FILE_NULL {
            return Err(Error::new(ErrorClass::File, format!("invalid file handle {file:#x} (oxmpi opens no files: MPI-IO is not part of it)")));
        }
        set(&FILE_NULL_HANDLER, errh, Kind::File)
    }

    /// `MPI_File_get_errhandler`: of `MPI_FILE_NULL` (see
    /// `MPI_File_set_errhandler`).
    fn MPI_File_get_errhandler / PMPI_File_get_errhandler(file: usize, errh: *mut usize) comm = None; {
        if file != FILE_NULL {
            return Err(Error::new(ErrorClass::File, format!("invalid file handle {file:#x} (oxmpi opens no files: MPI-IO is not part of it)")));
        }
        if errh.is_null() {
            return Err(null_arg("errhandler"));
        }
        let h = get(&FILE_NULL_HANDLER);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(errh, h, "errhandler") }
    }

    /// `MPI_File_call_errhandler`: `MPI_ERR_FILE` (no file can be open).
    fn MPI_File_call_errhandler / PMPI_File_call_errhandler(file: usize, _code: c_int) comm = None; {
        Err(Error::new(ErrorClass::File, format!("invalid file handle {file:#x} (oxmpi opens no files: MPI-IO is not part of it)")))
    }

    /// `MPI_Win_set_errhandler`: `MPI_ERR_WIN` (no window can exist).
    fn MPI_Win_set_errhandler / PMPI_Win_set_errhandler(win: usize, _errh: usize) comm = None; {
        Err(no_window(win))
    }

    /// `MPI_Win_get_errhandler`: `MPI_ERR_WIN` (no window can exist).
    fn MPI_Win_get_errhandler / PMPI_Win_get_errhandler(win: usize, _errh: *mut usize) comm = None; {
        Err(no_window(win))
    }

    /// `MPI_Win_call_errhandler`: `MPI_ERR_WIN` (no window can exist).
    fn MPI_Win_call_errhandler / PMPI_Win_call_errhandler(win: usize, _code: c_int) comm = None; {
        Err(no_window(win))
    }

    /// `MPI_Errhandler_free`: drops the program's reference (objects it is
    /// set on keep theirs); the handle becomes `MPI_ERRHANDLER_NULL`.
    /// `MPI_ERRHANDLER_NULL` or any other value is `MPI_ERR_ERRHANDLER`, as
    /// in MPICH.
    fn MPI_Errhandler_free / PMPI_Errhandler_free(errh: *mut usize) comm = None; {
        if errh.is_null() {
            return Err(null_arg("errhandler"));
        }
        // SAFETY: not null; the caller's in/out-parameter.
        let h = unsafe { errh.read() };
        if !is_predefined(h) {
            if h == ERRHANDLER_NULL {
                return Err(Error::new(ErrorClass::Errhandler, "MPI_ERRHANDLER_NULL is not an error handler"));
            }
            if lock(&HANDLERS).get(h).is_none() {
                return Err(Error::new(ErrorClass::Errhandler, format!("invalid error handler {h:#x}")));
            }
            release(h);
        }
        // SAFETY: as above.
        unsafe { put(errh, ERRHANDLER_NULL, "errhandler") }
    }

    /// `MPI_Error_class`: the class of a code (a class is its own).
    fn MPI_Error_class / PMPI_Error_class(code: c_int, class: *mut c_int) comm = None; {
        let c = crate::errcode::class_of(code)
            .ok_or_else(|| Error::new(ErrorClass::Arg, format!("{code} is not an error code")))?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(class, c, "errorclass") }
    }

    /// `MPI_Error_string`: for a code oxmpi returned, the call and the
    /// message (while it is among the last ones kept), else the class's
    /// text; for a class or code the program added, its string.
    fn MPI_Error_string / PMPI_Error_string(code: c_int, s: *mut c_char, len: *mut c_int) comm = None; {
        let text = crate::errcode::string_of(code)
            .ok_or_else(|| Error::new(ErrorClass::Arg, format!("{code} is not an error code")))?;
        // SAFETY: the standard requires MPI_MAX_ERROR_STRING bytes.
        unsafe { crate::env::put_str(s, len, &text, crate::errcode::MAX_ERROR_STRING) }
    }

    /// `MPI_Add_error_class`: a new class (above `MPI_ERR_LASTCODE`;
    /// `MPI_LASTUSEDCODE` follows).
    fn MPI_Add_error_class / PMPI_Add_error_class(class: *mut c_int) comm = None; {
        if class.is_null() {
            return Err(null_arg("errorclass"));
        }
        let c = crate::errcode::add_class()?;
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(class, c, "errorclass") }
    }

    /// `MPI_Add_error_code`: a new code of `class`.
    fn MPI_Add_error_code / PMPI_Add_error_code(class: c_int, code: *mut c_int) comm = None; {
        if code.is_null() {
            return Err(null_arg("errorcode"));
        }
        let c = crate::errcode::add_code(class)?;
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(code, c, "errorcode") }
    }

    /// `MPI_Add_error_string`: the string of a class or code the program
    /// added (cut to `MPI_MAX_ERROR_STRING - 1` bytes).
    fn MPI_Add_error_string / PMPI_Add_error_string(code: c_int, string: *const c_char) comm = None; {
        // SAFETY: the caller's NUL-terminated string.
        let s = unsafe { c_str(string, "string") }?;
        crate::errcode::set_string(code, s)
    }

    /// `MPI_Remove_error_class`: a class the program added, none of whose
    /// codes is left.
    fn MPI_Remove_error_class / PMPI_Remove_error_class(class: c_int) comm = None; {
        crate::errcode::remove_class(class)
    }

    /// `MPI_Remove_error_code`: a code the program added.
    fn MPI_Remove_error_code / PMPI_Remove_error_code(code: c_int) comm = None; {
        crate::errcode::remove_code(code)
    }

    /// `MPI_Remove_error_string`: the string of a class or code the program
    /// added is empty again.
    fn MPI_Remove_error_string / PMPI_Remove_error_string(code: c_int) comm = None; {
        crate::errcode::remove_string(code)
    }
}

/// The message of a fatal `MPI_*_call_errhandler`: the code and its
/// string.
fn describe(code: c_int) -> String {
    match crate::errcode::string_of(code) {
        Some(s) if !s.is_empty() => format!("error code {code}: {s}"),
        _ => format!("error code {code}"),
    }
}

/// `MPI_ERR_WIN` for window handle `win` (no window can exist).
pub fn no_window(win: usize) -> Error {
    if win == WIN_NULL {
        Error::new(ErrorClass::Win, "MPI_WIN_NULL is not a window")
    } else {
        Error::new(
            ErrorClass::Win,
            format!("invalid window handle {win:#x} (oxmpi creates no windows: one-sided communication is not part of it)"),
        )
    }
}

/// The handler that reports errors of calls on `comm` (`None`, or a
/// communicator that is not valid: `MPI_COMM_WORLD`'s), and the handle it
/// belongs to.
pub fn of_comm(comm: Option<usize>) -> (usize, usize) {
    let Some(s) = state_any() else {
        return (ERRORS_ARE_FATAL, COMM_WORLD);
    };
    if let Some(h) = comm {
        if let Ok(c) = s.comm(h) {
            let e = *lock(&c.errh);
            return (e, h);
        }
    }
    let e = *lock(&s.world.errh);
    (e, COMM_WORLD)
}

/// A chapter of the standard oxmpi does not implement.
#[derive(Clone, Copy, Debug)]
pub enum Chapter {
    /// One-sided communication: windows and RMA.
    Rma,
    /// MPI-IO: files.
    Io,
    /// Process creation and management: spawn, connect/accept, ports,
    /// names.
    Dynamic,
}

/// Whose error handler reports an unsupported call.
#[derive(Clone, Copy, Debug)]
pub enum Where {
    /// The communicator argument's.
    Comm(usize),
    /// `MPI_FILE_NULL`'s (file calls).
    File,
    /// `MPI_COMM_WORLD`'s.
    World,
}

/// Fails call `func` of `chapter` with `MPI_ERR_UNSUPPORTED_OPERATION`, its
/// string naming the function and what oxmpi lacks, through the handler
/// `at` says.
#[cold]
#[inline(never)]
pub fn unsupported(func: &str, chapter: Chapter, at: Where) -> c_int {
    let what = match chapter {
        Chapter::Rma => "one-sided communication (windows and RMA)",
        Chapter::Io => "MPI-IO (files)",
        Chapter::Dynamic => "dynamic process management (spawn, connect/accept, ports, names)",
    };
    let e = Error::new(
        ErrorClass::UnsupportedOperation,
        format!("{func} is not implemented: {what} is not part of oxmpi"),
    );
    match at {
        Where::Comm(c) => crate::state::raise(func, Some(c), &e),
        Where::World => crate::state::raise(func, None, &e),
        Where::File => {
            let code = crate::errcode::code_of(func, &e);
            invoke(file_handler(), FILE_NULL, code, func, &|| e.to_string())
        }
    }
}
