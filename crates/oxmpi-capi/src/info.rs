//! Info objects: `MPI_Info_*` (create, dup, free, set, get, get_string,
//! get_valuelen, get_nkeys, get_nthkey, delete, create_env), the
//! predefined `MPI_INFO_ENV`, and the hints of communicators
//! (`MPI_Comm_set_info`, `MPI_Comm_get_info`).
//!
//! An info object is an ordered list of (key, value) strings: keys are
//! unique and case sensitive, kept in the order they were first set (the
//! order `MPI_Info_get_nthkey` counts in). Keys are at most
//! `MPI_MAX_INFO_KEY - 1` bytes, values `MPI_MAX_INFO_VAL - 1`; neither is
//! empty. Info objects need no initialization (the standard allows the
//! calls before `MPI_Init`, for `MPI_Session_init`). oxmpi uses no hint
//! yet: a communicator keeps the hints the program set (and a duplicate
//! inherits them), and gives them back in `MPI_Comm_get_info`.

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::sync::{Mutex, OnceLock};

use oxmpi::{Error, ErrorClass};

use crate::entry;
use crate::env::put;
use crate::errh::c_str;
use crate::state::{lock, null_arg, state, state_any, Table};

/// `MPI_INFO_NULL`.
pub const INFO_NULL: usize = 0x130;
/// `MPI_INFO_ENV`.
pub const INFO_ENV: usize = 0x131;
/// `MPI_MAX_INFO_KEY`.
pub const MAX_INFO_KEY: usize = 256;
/// `MPI_MAX_INFO_VAL`.
pub const MAX_INFO_VAL: usize = 1024;

/// The entries of an info object.
pub type Entries = Vec<(String, String)>;

static INFOS: Mutex<Table<Entries>> = Mutex::new(Table::new());

/// The hints of communicators, by handle.
fn comm_hints() -> &'static Mutex<HashMap<usize, Entries>> {
    static H: OnceLock<Mutex<HashMap<usize, Entries>>> = OnceLock::new();
    H.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The entries of `MPI_INFO_ENV` (or of `MPI_Info_create_env` with
/// `args`, the command line; `None`: this process's).
fn env_entries(args: Option<Vec<String>>) -> Entries {
    let args = args.unwrap_or_else(|| {
        std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    });
    let mut e = Entries::new();
    if let Some(cmd) = args.first() {
        e.push(("command".into(), cmd.clone()));
    }
    if args.len() > 1 {
        e.push(("argv".into(), args[1..].join(" ")));
    }
    if let Some(s) = state_any() {
        e.push(("maxprocs".into(), s.world.comm.size().to_string()));
    }
    let u = rustix::system::uname();
    e.push(("host".into(), u.nodename().to_string_lossy().into_owned()));
    e.push(("arch".into(), u.machine().to_string_lossy().into_owned()));
    if let Ok(d) = std::env::current_dir() {
        e.push(("wdir".into(), d.to_string_lossy().into_owned()));
    }
    let level = state_any().map_or(0, |s| s.provided);
    e.push(("thread_level".into(), thread_level_name(level).into()));
    e
}

/// The name of a thread level (`MPI_THREAD_SINGLE` ...).
pub fn thread_level_name(level: c_int) -> &'static str {
    match level {
        1024 => "MPI_THREAD_FUNNELED",
        2048 => "MPI_THREAD_SERIALIZED",
        4096 => "MPI_THREAD_MULTIPLE",
        _ => "MPI_THREAD_SINGLE",
    }
}

/// The entries of info handle `h` (`MPI_INFO_NULL` is `MPI_ERR_INFO`).
pub fn entries(h: usize) -> Result<Entries, Error> {
    match h {
        INFO_ENV => Ok(env_entries(None)),
        INFO_NULL => Err(Error::new(
            ErrorClass::Info,
            "MPI_INFO_NULL is not an info object",
        )),
        _ => lock(&INFOS).get(h).cloned().ok_or_else(|| bad_info(h)),
    }
}

/// The entries of info argument `h`, where `MPI_INFO_NULL` means none.
pub fn entries_or_none(h: usize) -> Result<Entries, Error> {
    if h == INFO_NULL {
        Ok(Entries::new())
    } else {
        entries(h)
    }
}

/// A new info object holding `e`; its handle.
pub fn new_info(e: Entries) -> usize {
    lock(&INFOS).insert(e)
}

fn bad_info(h: usize) -> Error {
    Error::new(ErrorClass::Info, format!("invalid info handle {h:#x}"))
}

/// Runs `f` on the entries of a user info object `h` (`MPI_INFO_ENV` is
/// read-only).
fn with_mut<T>(h: usize, f: impl FnOnce(&mut Entries) -> Result<T, Error>) -> Result<T, Error> {
    match h {
        INFO_ENV => Err(Error::new(
            ErrorClass::Info,
            "MPI_INFO_ENV cannot be changed",
        )),
        INFO_NULL => Err(Error::new(
            ErrorClass::Info,
            "MPI_INFO_NULL is not an info object",
        )),
        _ => f(lock(&INFOS).get_mut(h).ok_or_else(|| bad_info(h))?),
    }
}

/// A key argument, checked.
///
/// # Safety
/// `p` null or NUL-terminated.
unsafe fn key_arg(p: *const c_char) -> Result<String, Error> {
    // SAFETY: forwarded.
    let k = unsafe { c_str(p, "key") }?;
    if k.is_empty() || k.len() > MAX_INFO_KEY - 1 {
        return Err(Error::new(
            ErrorClass::InfoKey,
            format!(
                "info key of {} bytes (1 to {} allowed)",
                k.len(),
                MAX_INFO_KEY - 1
            ),
        ));
    }
    Ok(k)
}

/// Copies `v` into `buf` as a NUL-terminated string of at most `room - 1`
/// bytes (nothing if `room` is 0).
///
/// # Safety
/// `buf` valid for `room` bytes.
unsafe fn copy_out(buf: *mut c_char, room: usize, v: &str) -> Result<(), Error> {
    if room == 0 {
        return Ok(());
    }
    if buf.is_null() {
        return Err(null_arg("value"));
    }
    let n = v.len().min(room - 1);
    // SAFETY: `buf` holds `room` bytes per the caller; `n + 1 <= room`.
    unsafe {
        std::ptr::copy_nonoverlapping(v.as_ptr().cast::<c_char>(), buf, n);
        buf.add(n).write(0);
    }
    Ok(())
}

/// The value of `key` in `h`.
fn lookup(h: usize, key: &str) -> Result<Option<String>, Error> {
    Ok(entries(h)?
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v))
}

/// Sets `key` to `value` in the user's info object `h` (an info argument
/// the library writes back, as `MPI_Comm_split_type`'s).
pub fn set_entry(h: usize, key: &str, value: &str) -> Result<(), Error> {
    with_mut(h, |e| {
        match e.iter_mut().find(|(x, _)| x == key) {
            Some(slot) => slot.1 = value.to_string(),
            None => e.push((key.to_string(), value.to_string())),
        }
        Ok(())
    })
}

/// Gives communicator `to` (a duplicate of `from`) the hints of `from`.
pub fn copy_comm(from: usize, to: usize) {
    let mut g = lock(comm_hints());
    if let Some(e) = g.get(&from).cloned() {
        g.insert(to, e);
    }
}

/// Forgets the hints of a communicator being freed.
pub fn forget_comm(h: usize) {
    lock(comm_hints()).remove(&h);
}

entry! {
    /// `MPI_Info_create`: a new, empty info object.
    fn MPI_Info_create / PMPI_Info_create(info: *mut usize) comm = None; {
        if info.is_null() {
            return Err(null_arg("info"));
        }
        let h = new_info(Entries::new());
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(info, h, "info") }
    }

    /// `MPI_Info_create_env`: an info object like `MPI_INFO_ENV` for the
    /// command line `argc`, `argv` (the process's own when `argv` is null);
    /// may be called before initialization.
    fn MPI_Info_create_env / PMPI_Info_create_env(argc: c_int, argv: *const *const c_char, info: *mut usize) comm = None; {
        if info.is_null() {
            return Err(null_arg("info"));
        }
        let args = if argv.is_null() {
            None
        } else {
            let n = usize::try_from(argc).map_err(|_| Error::new(ErrorClass::Arg, format!("argc {argc} is negative")))?;
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                // SAFETY: the caller passes `argc` strings.
                let p = unsafe { argv.add(i).read() };
                if p.is_null() {
                    break;
                }
                // SAFETY: NUL-terminated, per the caller.
                v.push(unsafe { c_str(p, "argv") }?);
            }
            Some(v)
        };
        let h = new_info(env_entries(args));
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(info, h, "info") }
    }

    /// `MPI_Info_dup`: a new info object with the same entries, in order.
    fn MPI_Info_dup / PMPI_Info_dup(info: usize, newinfo: *mut usize) comm = None; {
        let e = entries(info)?;
        if newinfo.is_null() {
            return Err(null_arg("newinfo"));
        }
        let h = new_info(e);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(newinfo, h, "newinfo") }
    }

    /// `MPI_Info_free`: the handle becomes `MPI_INFO_NULL` (`MPI_INFO_ENV`
    /// and `MPI_INFO_NULL` cannot be freed: `MPI_ERR_INFO`).
    fn MPI_Info_free / PMPI_Info_free(info: *mut usize) comm = None; {
        if info.is_null() {
            return Err(null_arg("info"));
        }
        // SAFETY: not null; the caller's in/out-parameter.
        let h = unsafe { info.read() };
        match h {
            INFO_ENV => return Err(Error::new(ErrorClass::Info, "MPI_INFO_ENV cannot be freed")),
            INFO_NULL => return Err(Error::new(ErrorClass::Info, "MPI_INFO_NULL is not an info object")),
            _ => {}
        }
        lock(&INFOS).remove(h).ok_or_else(|| bad_info(h))?;
        // SAFETY: as above.
        unsafe { put(info, INFO_NULL, "info") }
    }

    /// `MPI_Info_set`: sets (or replaces) `key`. An empty or too long key
    /// is `MPI_ERR_INFO_KEY`, an empty or too long value
    /// `MPI_ERR_INFO_VALUE`.
    fn MPI_Info_set / PMPI_Info_set(info: usize, key: *const c_char, value: *const c_char) comm = None; {
        // SAFETY: the caller's strings.
        let k = unsafe { key_arg(key) }?;
        // SAFETY: as above.
        let v = unsafe { c_str(value, "value") }?;
        if v.is_empty() || v.len() > MAX_INFO_VAL - 1 {
            return Err(Error::new(
                ErrorClass::InfoValue,
                format!("info value of {} bytes for key {k:?} (1 to {} allowed)", v.len(), MAX_INFO_VAL - 1),
            ));
        }
        set_entry(info, &k, &v)
    }

    /// `MPI_Info_delete`: a key that is not set is `MPI_ERR_INFO_NOKEY`.
    fn MPI_Info_delete / PMPI_Info_delete(info: usize, key: *const c_char) comm = None; {
        // SAFETY: the caller's string.
        let k = unsafe { key_arg(key) }?;
        with_mut(info, |e| {
            let i = e.iter().position(|(x, _)| *x == k).ok_or_else(|| {
                Error::new(ErrorClass::InfoNokey, format!("info key {k:?} is not set"))
            })?;
            e.remove(i);
            Ok(())
        })
    }

    /// `MPI_Info_get` (deprecated in MPI 4.0): at most `valuelen` bytes of
    /// the value, NUL-terminated (`value` holds `valuelen + 1` bytes).
    fn MPI_Info_get / PMPI_Info_get(
        info: usize,
        key: *const c_char,
        valuelen: c_int,
        value: *mut c_char,
        flag: *mut c_int,
    ) comm = None; {
        // SAFETY: the caller's string.
        let k = unsafe { key_arg(key) }?;
        let room = usize::try_from(valuelen)
            .map_err(|_| Error::new(ErrorClass::Arg, format!("valuelen {valuelen} is negative")))?;
        if flag.is_null() {
            return Err(null_arg("flag"));
        }
        let v = lookup(info, &k)?;
        if let Some(v) = &v {
            // SAFETY: `value` holds `valuelen + 1` bytes, per the standard.
            unsafe { copy_out(value, room + 1, v) }?;
        }
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(flag, c_int::from(v.is_some()), "flag") }
    }

    /// `MPI_Info_get_string`: the value cut to `*buflen - 1` bytes and
    /// NUL-terminated; `*buflen` becomes its length plus one (left alone
    /// when the key is not set).
    fn MPI_Info_get_string / PMPI_Info_get_string(
        info: usize,
        key: *const c_char,
        buflen: *mut c_int,
        value: *mut c_char,
        flag: *mut c_int,
    ) comm = None; {
        // SAFETY: the caller's string.
        let k = unsafe { key_arg(key) }?;
        if buflen.is_null() {
            return Err(null_arg("buflen"));
        }
        if flag.is_null() {
            return Err(null_arg("flag"));
        }
        // SAFETY: not null; the caller's in/out-parameter.
        let room = unsafe { buflen.read() };
        let room = usize::try_from(room)
            .map_err(|_| Error::new(ErrorClass::Arg, format!("buflen {room} is negative")))?;
        let v = lookup(info, &k)?;
        if let Some(v) = &v {
            // SAFETY: `value` holds `*buflen` bytes, per the caller.
            unsafe { copy_out(value, room, v) }?;
            // SAFETY: not null, as above.
            unsafe { put(buflen, (v.len() + 1) as c_int, "buflen") }?;
        }
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(flag, c_int::from(v.is_some()), "flag") }
    }

    /// `MPI_Info_get_valuelen` (deprecated in MPI 4.0): the value's length
    /// without the NUL.
    fn MPI_Info_get_valuelen / PMPI_Info_get_valuelen(
        info: usize,
        key: *const c_char,
        valuelen: *mut c_int,
        flag: *mut c_int,
    ) comm = None; {
        // SAFETY: the caller's string.
        let k = unsafe { key_arg(key) }?;
        if flag.is_null() {
            return Err(null_arg("flag"));
        }
        let v = lookup(info, &k)?;
        if let Some(v) = &v {
            // SAFETY: the caller's out-parameter.
            unsafe { put(valuelen, v.len() as c_int, "valuelen") }?;
        }
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(flag, c_int::from(v.is_some()), "flag") }
    }

    /// `MPI_Info_get_nkeys`.
    fn MPI_Info_get_nkeys / PMPI_Info_get_nkeys(info: usize, nkeys: *mut c_int) comm = None; {
        let n = entries(info)?.len();
        // SAFETY: the caller's out-parameter.
        unsafe { put(nkeys, n as c_int, "nkeys") }
    }

    /// `MPI_Info_get_nthkey`: key number `n` (from 0, in the order keys
    /// were first set) into `key` (`MPI_MAX_INFO_KEY` bytes); `n` out of
    /// range is `MPI_ERR_ARG`.
    fn MPI_Info_get_nthkey / PMPI_Info_get_nthkey(info: usize, n: c_int, key: *mut c_char) comm = None; {
        let e = entries(info)?;
        let k = usize::try_from(n)
            .ok()
            .and_then(|i| e.get(i))
            .ok_or_else(|| Error::new(ErrorClass::Arg, format!("key number {n} of an info object of {} keys", e.len())))?;
        // SAFETY: the standard requires MPI_MAX_INFO_KEY bytes.
        unsafe { copy_out(key, MAX_INFO_KEY, &k.0) }
    }

    /// `MPI_Comm_set_info`: the communicator keeps the hints (oxmpi acts
    /// on none yet). `MPI_INFO_NULL` clears them.
    fn MPI_Comm_set_info / PMPI_Comm_set_info(comm: usize, info: usize) comm = Some(comm); {
        state()?.comm(comm)?;
        let e = entries_or_none(info)?;
        lock(comm_hints()).insert(comm, e);
        Ok(())
    }

    /// `MPI_Comm_get_info`: a new info object with the communicator's hints
    /// (those the program set, or a duplicate's parent's).
    fn MPI_Comm_get_info / PMPI_Comm_get_info(comm: usize, info: *mut usize) comm = Some(comm); {
        state()?.comm(comm)?;
        if info.is_null() {
            return Err(null_arg("info_used"));
        }
        let e = lock(comm_hints()).get(&comm).cloned().unwrap_or_default();
        let h = new_info(e);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(info, h, "info_used") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_names_the_command() {
        let e = env_entries(Some(vec!["prog".into(), "-x".into(), "1".into()]));
        let get = |k: &str| e.iter().find(|(x, _)| x == k).map(|(_, v)| v.clone());
        assert_eq!(get("command").as_deref(), Some("prog"));
        assert_eq!(get("argv").as_deref(), Some("-x 1"));
        assert_eq!(get("thread_level").as_deref(), Some("MPI_THREAD_SINGLE"));
        assert!(get("host").is_some());
    }
}
