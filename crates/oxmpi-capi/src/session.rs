//! Sessions (MPI 4): `MPI_Session_init` and `MPI_Session_finalize`, the
//! process sets (`mpi://WORLD` and `mpi://SELF`), their groups
//! (`MPI_Group_from_session_pset`), infos and error handlers.
//!
//! A session shares the process's one runtime with the World Model: the
//! first `MPI_Session_init` (or `MPI_Init`) starts it, and it is finalized
//! when the last session is finalized and the World Model is not active
//! (never initialized, or finalized). `MPI_Initialized` stays false for a
//! program that only uses sessions. The groups of the process sets are
//! the groups of `MPI_COMM_WORLD` and `MPI_COMM_SELF`, in the same group
//! table as `MPI_Comm_group`'s, so a communicator made from one
//! (`MPI_Comm_create_from_group`) has the ranks `MPI_COMM_WORLD` has.
//! Once finalized, the runtime does not start again: a session after the
//! last one was finalized (or after `MPI_Finalize`) fails with
//! `MPI_ERR_OTHER`.
//!
//! Errors of a session call go to the session's error handler (the one
//! `MPI_Session_init` was given, or `MPI_Session_set_errhandler`'s); of
//! `MPI_Session_init`, to the handler it was given; of a call on an
//! invalid session, to `MPI_COMM_WORLD`'s (fatal before the runtime
//! started).

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use oxmpi::{Error, ErrorClass};

use crate::env::put;
use crate::errh::{c_str, Kind};
use crate::info::Entries;
use crate::state::{lock, null_arg, state, Table, ERRORS_ARE_FATAL};

/// `MPI_SESSION_NULL`.
pub const SESSION_NULL: usize = 0x120;
/// The process sets every session has, in the order they are numbered.
const PSETS: [&str; 2] = ["mpi://WORLD", "mpi://SELF"];

/// A session.
struct SessionObj {
    /// Its error handler.
    errh: Mutex<usize>,
    /// The thread level it asked for (`mpi_thread_support_level`).
    level: c_int,
}

static SESSIONS: Mutex<Table<Arc<SessionObj>>> = Mutex::new(Table::new());
/// Sessions initialized and not finalized.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Sessions initialized and not yet finalized.
pub fn active() -> usize {
    ACTIVE.load(Ordering::Acquire)
}

/// Session `h`'s buffer scope.
fn scope(h: usize) -> oxmpi::BufferScope {
    oxmpi::BufferScope::Session(h as u64)
}

fn session(h: usize) -> Result<Arc<SessionObj>, Error> {
    if h == SESSION_NULL {
        return Err(Error::new(
            ErrorClass::Session,
            "MPI_SESSION_NULL is not a session",
        ));
    }
    lock(&SESSIONS).get(h).cloned().ok_or_else(|| {
        Error::new(
            ErrorClass::Session,
            format!("invalid session handle {h:#x}"),
        )
    })
}

/// Where the errors of a session call go.
pub enum Target {
    /// The handler of this session (or, if it is not one, the default).
    Session(usize),
    /// This handler (`MPI_Session_init`'s argument).
    Handler(usize),
}

/// Reports `e` raised by session call `func` (see the module doc).
#[cold]
pub fn raise(func: &str, target: Target, e: &Error) -> c_int {
    let code = crate::errcode::code_of(func, e);
    let (h, obj) = match target {
        Target::Handler(h) if crate::errh::check(h, Kind::Session).is_ok() => (h, SESSION_NULL),
        Target::Handler(_) => (ERRORS_ARE_FATAL, SESSION_NULL),
        Target::Session(s) => match session(s) {
            Ok(x) => (*lock(&x.errh), s),
            Err(_) if crate::state::state_any().is_some() => {
                let (h, _) = crate::errh::of_comm(None);
                // A communicator's handler is called with its handle.
                return crate::errh::invoke(h, crate::state::COMM_WORLD, code, func, &|| {
                    e.to_string()
                });
            }
            Err(_) => (ERRORS_ARE_FATAL, s),
        },
    };
    crate::errh::invoke(h, obj, code, func, &|| e.to_string())
}

/// Defines session entry points (`MPI_` and `PMPI_` names) as `entry!`
/// does, their errors going where `target` says.
macro_rules! session_entry {
    ($(
        $(#[$m:meta])*
        fn $name:ident / $pname:ident ($($arg:ident : $ty:ty),* $(,)?) target = $target:expr; $body:block
    )*) => {$(
        $(#[$m])*
        ///
        /// # Safety
        /// The pointers must be valid as the MPI standard requires for
        /// this call.
        #[no_mangle]
        pub unsafe extern "C" fn $pname($($arg: $ty),*) -> c_int {
            let target: Target = $target;
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<(), Error> { $body }));
            match r {
                Ok(Ok(())) => crate::state::SUCCESS,
                Ok(Err(e)) => raise(stringify!($name), target, &e),
                Err(_) => raise(stringify!($name), target, &Error::new(ErrorClass::Intern, "internal panic")),
            }
        }

        $(#[$m])*
        ///
        /// # Safety
        /// As for the `PMPI_` entry point.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            // SAFETY: the same contract, forwarded.
            unsafe { $pname($($arg),*) }
        }
    )*};
}

/// The thread level an info asks for (`mpi_thread_support_level`), else
/// `MPI_THREAD_SINGLE`.
fn asked_level(e: &Entries) -> Result<c_int, Error> {
    let Some((_, v)) = e.iter().find(|(k, _)| k == "mpi_thread_support_level") else {
        return Ok(0);
    };
    Ok(match v.as_str() {
        "MPI_THREAD_SINGLE" => 0,
        "MPI_THREAD_FUNNELED" => 1024,
        "MPI_THREAD_SERIALIZED" => 2048,
        "MPI_THREAD_MULTIPLE" => 4096,
        other => {
            return Err(Error::new(
                ErrorClass::InfoValue,
                format!("mpi_thread_support_level {other:?} is no thread level"),
            ))
        }
    })
}

/// The size of process set `name` (`MPI_ERR_ARG` for a name that is none).
fn pset_size(name: &str) -> Result<(usize, bool), Error> {
    let s = state()?;
    if name.eq_ignore_ascii_case(PSETS[0]) {
        Ok((s.world.comm.size() as usize, true))
    } else if name.eq_ignore_ascii_case(PSETS[1]) {
        Ok((1, false))
    } else {
        Err(Error::new(
            ErrorClass::Arg,
            format!("no process set {name:?} (there are \"mpi://WORLD\" and \"mpi://SELF\")"),
        ))
    }
}

session_entry! {
    /// `MPI_Session_init`: a new session (starting the runtime if nothing
    /// started it), whose errors go to `errhandler`; the info may ask for a
    /// thread level (`mpi_thread_support_level`: any is provided).
    fn MPI_Session_init / PMPI_Session_init(info: usize, errhandler: usize, out: *mut usize) target = Target::Handler(errhandler); {
        crate::errh::check(errhandler, Kind::Session)?;
        if out.is_null() {
            return Err(null_arg("session"));
        }
        let entries = crate::info::entries_or_none(info)?;
        let level = asked_level(&entries)?;
        crate::env::ensure_runtime(crate::env::level(level), false)?;
        crate::errh::retain(errhandler);
        ACTIVE.fetch_add(1, Ordering::AcqRel);
        let h = lock(&SESSIONS).insert(Arc::new(SessionObj { errh: Mutex::new(errhandler), level }));
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(out, h, "session") }
    }

    /// `MPI_Session_finalize`: the handle becomes `MPI_SESSION_NULL`; the
    /// last session finalizes the runtime unless the World Model uses it.
    fn MPI_Session_finalize / PMPI_Session_finalize(sess: *mut usize) target = Target::Session(if sess.is_null() { SESSION_NULL } else {
        // SAFETY: not null; the caller's in/out-parameter.
        unsafe { sess.read() }
    }); {
        if sess.is_null() {
            return Err(null_arg("session"));
        }
        // SAFETY: not null; the caller's in/out-parameter.
        let h = unsafe { sess.read() };
        session(h)?;
        let s = state()?;
        // Its buffer, if one is attached, once its messages have left.
        let _ = s.universe.buffer_detach_raw_in(oxmpi::BufferScope::Session(h as u64));
        let obj = lock(&SESSIONS).remove(h);
        if let Some(obj) = obj {
            crate::errh::release(*lock(&obj.errh));
        }
        ACTIVE.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: as above.
        unsafe { put(sess, SESSION_NULL, "session") }?;
        crate::env::finalize_if_unused(s)
    }

    /// `MPI_Session_get_info`: a new info object with the session's thread
    /// level (`mpi_thread_support_level`).
    fn MPI_Session_get_info / PMPI_Session_get_info(sess: usize, info: *mut usize) target = Target::Session(sess); {
        let x = session(sess)?;
        if info.is_null() {
            return Err(null_arg("info_used"));
        }
        let e = vec![(
            "mpi_thread_support_level".to_string(),
            crate::info::thread_level_name(x.level).to_string(),
        )];
        let h = crate::info::new_info(e);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(info, h, "info_used") }
    }

    /// `MPI_Session_get_num_psets`: 2 (`mpi://WORLD`, `mpi://SELF`).
    fn MPI_Session_get_num_psets / PMPI_Session_get_num_psets(sess: usize, info: usize, n: *mut c_int) target = Target::Session(sess); {
        session(sess)?;
        crate::info::entries_or_none(info)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(n, PSETS.len() as c_int, "npset_names") }
    }

    /// `MPI_Session_get_nth_pset`: the name of process set `n`. With
    /// `*pset_len` 0 only its length (with the NUL) is given; otherwise the
    /// name, cut to `*pset_len - 1` bytes and NUL-terminated, and
    /// `*pset_len` becomes its length with the NUL.
    fn MPI_Session_get_nth_pset / PMPI_Session_get_nth_pset(
        sess: usize,
        info: usize,
        n: c_int,
        pset_len: *mut c_int,
        pset_name: *mut c_char,
    ) target = Target::Session(sess); {
        session(sess)?;
        crate::info::entries_or_none(info)?;
        let name = usize::try_from(n).ok().and_then(|i| PSETS.get(i)).ok_or_else(|| {
            Error::new(ErrorClass::Arg, format!("process set number {n} of {}", PSETS.len()))
        })?;
        if pset_len.is_null() {
            return Err(null_arg("pset_len"));
        }
        // SAFETY: not null; the caller's in/out-parameter.
        let room = unsafe { pset_len.read() };
        if room > 0 {
            if pset_name.is_null() {
                return Err(null_arg("pset_name"));
            }
            let k = name.len().min(room as usize - 1);
            // SAFETY: the caller's buffer of `room` bytes; `k + 1 <= room`.
            unsafe {
                std::ptr::copy_nonoverlapping(name.as_ptr().cast::<c_char>(), pset_name, k);
                pset_name.add(k).write(0);
            }
        }
        // SAFETY: not null, as above.
        unsafe { put(pset_len, name.len() as c_int + 1, "pset_len") }
    }

    /// `MPI_Session_get_pset_info`: a new info object with the process
    /// set's size (`mpi_size`).
    fn MPI_Session_get_pset_info / PMPI_Session_get_pset_info(
        sess: usize,
        pset_name: *const c_char,
        info: *mut usize,
    ) target = Target::Session(sess); {
        session(sess)?;
        // SAFETY: the caller's string.
        let name = unsafe { c_str(pset_name, "pset_name") }?;
        let (size, _) = pset_size(&name)?;
        if info.is_null() {
            return Err(null_arg("info"));
        }
        let h = crate::info::new_info(vec![("mpi_size".to_string(), size.to_string())]);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(info, h, "info") }
    }

    /// `MPI_Group_from_session_pset`: the group of a process set (that of
    /// `MPI_COMM_WORLD` or `MPI_COMM_SELF`, as `MPI_Comm_group` gives it).
    fn MPI_Group_from_session_pset / PMPI_Group_from_session_pset(
        sess: usize,
        pset_name: *const c_char,
        newgroup: *mut usize,
    ) target = Target::Session(sess); {
        session(sess)?;
        // SAFETY: the caller's string.
        let name = unsafe { c_str(pset_name, "pset_name") }?;
        let (_, world) = pset_size(&name)?;
        if newgroup.is_null() {
            return Err(null_arg("newgroup"));
        }
        let s = state()?;
        let g = if world { s.world.comm.group() } else { s.self_.comm.group() };
        let h = lock(&s.groups).insert(g);
        crate::bsend::note_group(h, sess);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(newgroup, h, "newgroup") }
    }

    /// `MPI_Session_attach_buffer`: `size` bytes at `buffer` (or
    /// `MPI_BUFFER_AUTOMATIC`) for buffered sends on the communicators
    /// derived from the session that have no buffer of their own.
    fn MPI_Session_attach_buffer / PMPI_Session_attach_buffer(sess: usize, buffer: *mut c_void, size: c_int) target = Target::Session(sess); {
        session(sess)?;
        // SAFETY: the program lends the memory until it detaches it.
        unsafe { crate::bsend::attach(scope(sess), buffer, size.into()) }
    }

    /// `MPI_Session_attach_buffer_c`.
    fn MPI_Session_attach_buffer_c / PMPI_Session_attach_buffer_c(sess: usize, buffer: *mut c_void, size: i64) target = Target::Session(sess); {
        session(sess)?;
        // SAFETY: as above.
        unsafe { crate::bsend::attach(scope(sess), buffer, size) }
    }

    /// `MPI_Session_detach_buffer`: waits for the buffered messages, then
    /// gives the buffer's address and size back.
    fn MPI_Session_detach_buffer / PMPI_Session_detach_buffer(sess: usize, buffer_addr: *mut c_void, size: *mut c_int) target = Target::Session(sess); {
        session(sess)?;
        // SAFETY: the caller's out-parameters.
        let n = unsafe { crate::bsend::detach(scope(sess), buffer_addr) }?;
        // SAFETY: as above.
        unsafe { put(size, crate::bsend::int_size(n)?, "size") }
    }

    /// `MPI_Session_detach_buffer_c`.
    fn MPI_Session_detach_buffer_c / PMPI_Session_detach_buffer_c(sess: usize, buffer_addr: *mut c_void, size: *mut i64) target = Target::Session(sess); {
        session(sess)?;
        // SAFETY: the caller's out-parameters.
        let n = unsafe { crate::bsend::detach(scope(sess), buffer_addr) }?;
        // SAFETY: as above.
        unsafe { put(size, n as i64, "size") }
    }

    /// `MPI_Session_flush_buffer`.
    fn MPI_Session_flush_buffer / PMPI_Session_flush_buffer(sess: usize) target = Target::Session(sess); {
        session(sess)?;
        state()?.universe.buffer_flush_in(scope(sess));
        Ok(())
    }

    /// `MPI_Session_iflush_buffer`.
    fn MPI_Session_iflush_buffer / PMPI_Session_iflush_buffer(sess: usize, req: *mut usize) target = Target::Session(sess); {
        session(sess)?;
        // SAFETY: the caller's out-parameter.
        unsafe { crate::bsend::iflush(scope(sess), req) }
    }

    /// `MPI_Session_set_errhandler`: a predefined handler or one created
    /// for sessions.
    fn MPI_Session_set_errhandler / PMPI_Session_set_errhandler(sess: usize, errh: usize) target = Target::Session(sess); {
        let x = session(sess)?;
        crate::errh::set(&x.errh, errh, Kind::Session)
    }

    /// `MPI_Session_get_errhandler`: a new reference to the session's
    /// handler.
    fn MPI_Session_get_errhandler / PMPI_Session_get_errhandler(sess: usize, errh: *mut usize) target = Target::Session(sess); {
        let x = session(sess)?;
        if errh.is_null() {
            return Err(null_arg("errhandler"));
        }
        let h = crate::errh::get(&x.errh);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(errh, h, "errhandler") }
    }

    /// `MPI_Session_call_errhandler`: invokes the session's handler with
    /// `code`; `MPI_SUCCESS` when it returns.
    fn MPI_Session_call_errhandler / PMPI_Session_call_errhandler(sess: usize, code: c_int) target = Target::Session(sess); {
        let x = session(sess)?;
        let h = *lock(&x.errh);
        crate::errh::invoke(h, sess, code, "MPI_Session_call_errhandler", &|| match crate::errcode::string_of(code) {
            Some(s) if !s.is_empty() => format!("error code {code}: {s}"),
            _ => format!("error code {code}"),
        });
        Ok(())
    }
}
