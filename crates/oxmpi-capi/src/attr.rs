//! Attributes: keyvals and the values cached on communicators and
//! datatypes (`MPI_Comm_create_keyval`, `MPI_Comm_set_attr`, ..., the
//! datatype forms, the MPI-1 names `MPI_Keyval_create`, `MPI_Attr_put`,
//! ...), the predefined communicator attributes, and window keyvals
//! (created and freed; no window exists to carry a value).
//!
//! Values are kept beside the objects, by kind and handle, in the order
//! they were set. Callbacks are the program's code and may call MPI: no
//! lock of this module is held while one runs. A keyval freed while
//! values use it stays until the last of them is deleted (its callbacks
//! still run). `MPI_Comm_dup` and `MPI_Type_dup` copy each value through
//! its keyval's copy callback ([`copy_all`]); freeing an object deletes
//! its values last set first ([`delete_all`]), and `MPI_Finalize` deletes
//! those of `MPI_COMM_SELF`, then of `MPI_COMM_WORLD`, before anything
//! else (a failing delete callback fails the call, as it may).
//!
//! None of this is on the communication path: only the calls above look
//! at it.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

use oxmpi::{Error, ErrorClass};

use crate::entry;
use crate::env::put;
use crate::state::{lock, null_arg, state, DATATYPE_NULL};

/// `MPI_KEYVAL_INVALID`.
pub const KEYVAL_INVALID: c_int = 0;
const TAG_UB_KEY: c_int = 501;
const IO_KEY: c_int = 502;
const HOST_KEY: c_int = 503;
const WTIME_IS_GLOBAL_KEY: c_int = 504;
const APPNUM_KEY: c_int = 505;
const LASTUSEDCODE_KEY: c_int = 506;
const UNIVERSE_SIZE_KEY: c_int = 507;
/// The predefined window attribute keys (`MPI_WIN_BASE` ...
/// `MPI_WIN_MODEL`).
const WIN_KEYS: std::ops::RangeInclusive<c_int> = 601..=605;

/// The copy callback of every kind (`MPI_Comm_copy_attr_function`,
/// `MPI_Type_copy_attr_function`, `MPI_Win_copy_attr_function`,
/// `MPI_Copy_function`): the object's handle, the keyval, the extra
/// state, the value in, where the value out goes, and the flag.
pub type CopyFn =
    unsafe extern "C" fn(usize, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// The delete callback of every kind: the object's handle, the keyval, the
/// value and the extra state.
pub type DeleteFn = unsafe extern "C" fn(usize, c_int, *mut c_void, *mut c_void) -> c_int;

/// The kind of object a keyval is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Communicators.
    Comm,
    /// Datatypes.
    Type,
    /// Windows.
    Win,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Comm => "communicator",
            Kind::Type => "datatype",
            Kind::Win => "window",
        }
    }
}

/// What a keyval does when its object is duplicated.
#[derive(Clone, Copy)]
enum Copy {
    /// `MPI_*_NULL_COPY_FN` (`0`): the value is not copied.
    Null,
    /// `MPI_*_DUP_FN` (`1`): the value is copied as it is.
    Dup,
    /// The program's callback.
    Fn(CopyFn),
}

/// A keyval.
struct Keyval {
    kind: Kind,
    copy: Copy,
    delete: Option<DeleteFn>,
    extra: usize,
    /// Whether the program freed it.
    freed: bool,
    /// Values that use it.
    uses: usize,
}

/// Keyvals by number.
static KEYVALS: Mutex<BTreeMap<c_int, Keyval>> = Mutex::new(BTreeMap::new());
/// The next keyval's number (above every predefined key).
static NEXT_KEYVAL: AtomicI32 = AtomicI32::new(1024);

/// Values by object (kind and handle), in the order they were set.
type Values = HashMap<(Kind, usize), Vec<(c_int, usize)>>;

fn values() -> &'static Mutex<Values> {
    static V: OnceLock<Mutex<Values>> = OnceLock::new();
    V.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A copy callback argument: `0` and `1` are the standard ABI's
/// `MPI_*_NULL_COPY_FN` and `MPI_*_DUP_FN`.
fn copy_of(f: usize) -> Copy {
    match f {
        0 => Copy::Null,
        1 => Copy::Dup,
        // SAFETY: any other value is the address of the program's
        // callback of this type, as the standard ABI's typedef says.
        f => Copy::Fn(unsafe { std::mem::transmute::<usize, CopyFn>(f) }),
    }
}

/// A new keyval of `kind`.
fn create(kind: Kind, copy: usize, delete: Option<DeleteFn>, extra: *mut c_void) -> c_int {
    let k = NEXT_KEYVAL.fetch_add(1, Ordering::Relaxed);
    lock(&KEYVALS).insert(
        k,
        Keyval {
            kind,
            copy: copy_of(copy),
            delete,
            extra: extra as usize,
            freed: false,
            uses: 0,
        },
    );
    k
}

/// `MPI_ERR_KEYVAL` for key `k`, which is not a keyval of `kind`.
fn bad_key(k: c_int, kind: Kind) -> Error {
    if k == KEYVAL_INVALID {
        return Error::new(
            ErrorClass::Keyval,
            "MPI_KEYVAL_INVALID is not an attribute key",
        );
    }
    Error::new(
        ErrorClass::Keyval,
        format!("{k} is not a {} attribute key", kind.name()),
    )
}

/// Whether `k` is a predefined key of `kind`.
fn predefined_key(k: c_int, kind: Kind) -> bool {
    match kind {
        Kind::Comm => (TAG_UB_KEY..=UNIVERSE_SIZE_KEY).contains(&k),
        Kind::Win => WIN_KEYS.contains(&k),
        Kind::Type => false,
    }
}

/// Frees keyval `*k` of `kind` (values that use it keep it until they go);
/// `*k` becomes `MPI_KEYVAL_INVALID`.
///
/// # Safety
/// `k` null or valid for reading and writing.
unsafe fn free(k: *mut c_int, kind: Kind) -> Result<(), Error> {
    if k.is_null() {
        return Err(null_arg("keyval"));
    }
    // SAFETY: not null; the caller's in/out-parameter.
    let key = unsafe { k.read() };
    if predefined_key(key, kind) {
        return Err(Error::new(
            ErrorClass::Keyval,
            format!("{key} is a predefined attribute key and cannot be freed"),
        ));
    }
    {
        let mut g = lock(&KEYVALS);
        match g.get_mut(&key) {
            Some(x) if x.kind == kind && !x.freed => {
                x.freed = true;
                if x.uses == 0 {
                    g.remove(&key);
                }
            }
            _ => return Err(bad_key(key, kind)),
        }
    }
    // SAFETY: as above.
    unsafe { put(k, KEYVAL_INVALID, "keyval") }
}

/// The keyval `k` of `kind` the program may still use.
fn live_key(k: c_int, kind: Kind) -> Result<(), Error> {
    match lock(&KEYVALS).get(&k) {
        Some(x) if x.kind == kind && !x.freed => Ok(()),
        _ => Err(bad_key(k, kind)),
    }
}

/// Drops a value's use of keyval `k` (a freed keyval goes with its last).
fn unuse(k: c_int) {
    let mut g = lock(&KEYVALS);
    if let Some(x) = g.get_mut(&k) {
        x.uses -= 1;
        if x.freed && x.uses == 0 {
            g.remove(&k);
        }
    }
}

/// The error a callback's return code `rc` makes: the code passes on
/// unchanged (its class, or `MPI_ERR_OTHER` for a class the program
/// added).
pub fn callback_error(rc: c_int, what: &str) -> Error {
    let class = crate::errcode::class_of(rc)
        .and_then(ErrorClass::from_code)
        .unwrap_or(ErrorClass::Other);
    let text = crate::errcode::string_of(rc).unwrap_or_default();
    Error::with_code(class, rc, format!("{what} returned {rc} ({text})"))
}

/// Runs the delete callback of keyval `k` for `value` on object `obj`.
fn run_delete(obj: usize, k: c_int, value: usize) -> Result<(), Error> {
    let (f, extra) = match lock(&KEYVALS).get(&k) {
        Some(x) => (x.delete, x.extra),
        None => return Ok(()),
    };
    let Some(f) = f else { return Ok(()) };
    // SAFETY: the program's delete callback with the handle, the keyval,
    // the value and the extra state it registered, as the typedef says.
    let rc = unsafe { f(obj, k, value as *mut c_void, extra as *mut c_void) };
    if rc != 0 {
        return Err(callback_error(rc, "the attribute delete callback"));
    }
    Ok(())
}

/// Sets attribute `k` of `obj` (of `kind`) to `value`; an old value is
/// deleted first (its callback runs; if it fails, nothing changes).
fn set(kind: Kind, obj: usize, k: c_int, value: usize) -> Result<(), Error> {
    if predefined_key(k, kind) {
        return Err(Error::new(
            ErrorClass::Keyval,
            format!("{k} is a predefined attribute key: its value cannot be set"),
        ));
    }
    live_key(k, kind)?;
    let old = lock(values())
        .get(&(kind, obj))
        .and_then(|v| v.iter().find(|e| e.0 == k).map(|e| e.1));
    if let Some(old) = old {
        run_delete(obj, k, old)?;
    }
    let mut g = lock(values());
    let list = g.entry((kind, obj)).or_default();
    match list.iter_mut().find(|e| e.0 == k) {
        Some(e) => e.1 = value,
        None => {
            list.push((k, value));
            drop(g);
            if let Some(x) = lock(&KEYVALS).get_mut(&k) {
                x.uses += 1;
            }
        }
    }
    Ok(())
}

/// The value of attribute `k` of `obj`, if set (`k` must be a keyval of
/// `kind`, freed or not: a freed one may still have values).
fn get(kind: Kind, obj: usize, k: c_int) -> Result<Option<usize>, Error> {
    match lock(&KEYVALS).get(&k) {
        Some(x) if x.kind == kind => {}
        _ => return Err(bad_key(k, kind)),
    }
    Ok(lock(values())
        .get(&(kind, obj))
        .and_then(|v| v.iter().find(|e| e.0 == k).map(|e| e.1)))
}

/// Deletes attribute `k` of `obj` (its callback runs first; if it fails,
/// the value stays). Not set: `MPI_ERR_KEYVAL`.
fn delete(kind: Kind, obj: usize, k: c_int) -> Result<(), Error> {
    if predefined_key(k, kind) {
        return Err(Error::new(
            ErrorClass::Keyval,
            format!("{k} is a predefined attribute key: it cannot be deleted"),
        ));
    }
    let value = get(kind, obj, k)?.ok_or_else(|| {
        Error::new(
            ErrorClass::Keyval,
            format!("attribute {k} is not set on this {}", kind.name()),
        )
    })?;
    run_delete(obj, k, value)?;
    let mut g = lock(values());
    if let Some(list) = g.get_mut(&(kind, obj)) {
        if let Some(i) = list.iter().position(|e| e.0 == k) {
            list.remove(i);
            if list.is_empty() {
                g.remove(&(kind, obj));
            }
            drop(g);
            unuse(k);
        }
    }
    Ok(())
}

/// Deletes every attribute of `obj`, last set first. On a failing
/// callback the call stops there and fails: that value and those not yet
/// deleted stay.
pub fn delete_all(kind: Kind, obj: usize) -> Result<(), Error> {
    loop {
        let last = lock(values())
            .get(&(kind, obj))
            .and_then(|v| v.last().copied());
        let Some((k, value)) = last else {
            return Ok(());
        };
        run_delete(obj, k, value)?;
        let mut g = lock(values());
        if let Some(list) = g.get_mut(&(kind, obj)) {
            if let Some(i) = list.iter().rposition(|e| e.0 == k) {
                list.remove(i);
            }
            if list.is_empty() {
                g.remove(&(kind, obj));
            }
        }
        drop(g);
        unuse(k);
    }
}

/// Gives `to` (a new duplicate of `from`) the attributes of `from`, each
/// through its keyval's copy callback. On a failing callback the values
/// copied so far are deleted again and the callback's error returned.
pub fn copy_all(kind: Kind, from: usize, to: usize) -> Result<(), Error> {
    let list = lock(values())
        .get(&(kind, from))
        .cloned()
        .unwrap_or_default();
    for (k, value) in list {
        let (copy, extra) = match lock(&KEYVALS).get(&k) {
            Some(x) => (x.copy, x.extra),
            None => continue,
        };
        let out = match copy {
            Copy::Null => None,
            Copy::Dup => Some(value),
            Copy::Fn(f) => {
                let mut out: usize = 0;
                let mut flag: c_int = 0;
                // SAFETY: the program's copy callback with the old
                // object's handle, the keyval, its extra state, the value,
                // and pointers to locals for the new value and the flag.
                let rc = unsafe {
                    f(
                        from,
                        k,
                        extra as *mut c_void,
                        value as *mut c_void,
                        (&mut out as *mut usize).cast(),
                        &mut flag,
                    )
                };
                if rc != 0 {
                    let _ = delete_all(kind, to);
                    return Err(callback_error(rc, "the attribute copy callback"));
                }
                (flag != 0).then_some(out)
            }
        };
        if let Some(v) = out {
            lock(values()).entry((kind, to)).or_default().push((k, v));
            if let Some(x) = lock(&KEYVALS).get_mut(&k) {
                x.uses += 1;
            }
        }
    }
    Ok(())
}

/// Takes the attributes of `obj` away (the object is gone): delete them
/// with [`run_deletes`].
pub fn take(kind: Kind, obj: usize) -> Vec<(c_int, usize)> {
    lock(values()).remove(&(kind, obj)).unwrap_or_default()
}

/// Runs the delete callbacks of attributes [`take`] took from `obj`, last
/// set first; every keyval's use ends whatever its callback returns. The
/// first failure is returned.
pub fn run_deletes(obj: usize, list: Vec<(c_int, usize)>) -> Result<(), Error> {
    let mut first = Ok(());
    for (k, value) in list.into_iter().rev() {
        let r = run_delete(obj, k, value);
        unuse(k);
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// Forgets the attributes of `obj` without calling anything (an object
/// whose creation failed before the program saw it).
pub fn forget(kind: Kind, obj: usize) {
    let list = lock(values()).remove(&(kind, obj)).unwrap_or_default();
    for (k, _) in list {
        unuse(k);
    }
}

/// The values of the predefined communicator attributes.
fn predefined_comm_value(s: &crate::state::State, key: c_int) -> Option<*const c_int> {
    static TAG_UB: OnceLock<c_int> = OnceLock::new();
    static HOST: c_int = -3; // MPI_PROC_NULL: no host process
    static IO: c_int = -1; // MPI_ANY_SOURCE: every process can do I/O
    static WTIME_GLOBAL: c_int = 0;
    static UNIVERSE: OnceLock<c_int> = OnceLock::new();
    static APPNUM: OnceLock<c_int> = OnceLock::new();
    Some(match key {
        TAG_UB_KEY => TAG_UB.get_or_init(|| s.universe.tag_ub()),
        HOST_KEY => &HOST,
        IO_KEY => &IO,
        WTIME_IS_GLOBAL_KEY => &WTIME_GLOBAL,
        UNIVERSE_SIZE_KEY => UNIVERSE.get_or_init(|| s.universe.universe_size() as c_int),
        APPNUM_KEY => APPNUM.get_or_init(|| s.universe.appnum() as c_int),
        // The value follows MPI_Add_error_class and MPI_Add_error_code.
        LASTUSEDCODE_KEY => crate::errcode::LASTUSEDCODE.as_ptr(),
        _ => return None,
    })
}

/// Checks that `h` is a datatype (predefined, or in the table).
fn check_type(h: usize) -> Result<(), Error> {
    if crate::types::predefined(h).is_some() {
        return Ok(());
    }
    if h == DATATYPE_NULL {
        return Err(Error::new(
            ErrorClass::Type,
            "MPI_DATATYPE_NULL is not a datatype",
        ));
    }
    let s = state()?;
    if lock(&s.types).get(h).is_none() {
        return Err(Error::new(
            ErrorClass::Type,
            format!("invalid datatype handle {h:#x}"),
        ));
    }
    Ok(())
}

/// Writes an attribute lookup's result: the value through `value` (a
/// `void **`) and the flag.
///
/// # Safety
/// `value` null or valid for a pointer, `flag` for an int.
unsafe fn put_found(
    found: Option<usize>,
    value: *mut c_void,
    flag: *mut c_int,
) -> Result<(), Error> {
    if flag.is_null() {
        return Err(null_arg("flag"));
    }
    if let Some(v) = found {
        // SAFETY: the caller's `void **` out-parameter.
        unsafe { put(value.cast::<usize>(), v, "attribute_val") }?;
    }
    // SAFETY: not null; the caller's out-parameter.
    unsafe { put(flag, c_int::from(found.is_some()), "flag") }
}

/// `MPI_Comm_get_attr` (and `MPI_Attr_get`).
///
/// # Safety
/// As `MPI_Comm_get_attr` requires.
unsafe fn comm_get(
    comm: usize,
    key: c_int,
    value: *mut c_void,
    flag: *mut c_int,
) -> Result<(), Error> {
    let s = state()?;
    s.comm(comm)?;
    if let Some(p) = predefined_comm_value(s, key) {
        // SAFETY: the caller's out-parameters; `value` receives a pointer
        // to an int that lives as long as the process, as the standard
        // specifies for these keys.
        return unsafe { put_found(Some(p as usize), value, flag) };
    }
    let v = get(Kind::Comm, comm, key)?;
    // SAFETY: the caller's out-parameters.
    unsafe { put_found(v, value, flag) }
}

/// The deletion of the attributes of `MPI_COMM_SELF` and then
/// `MPI_COMM_WORLD` that `MPI_Finalize` starts with.
pub fn finalize() -> Result<(), Error> {
    delete_all(Kind::Comm, crate::state::COMM_SELF)?;
    delete_all(Kind::Comm, crate::state::COMM_WORLD)
}

entry! {
    /// `MPI_Comm_create_keyval`: a keyval for communicators, with its copy
    /// (`MPI_COMM_NULL_COPY_FN`, `MPI_COMM_DUP_FN` or the program's) and
    /// delete callbacks.
    fn MPI_Comm_create_keyval / PMPI_Comm_create_keyval(
        copy: usize,
        delete: Option<DeleteFn>,
        keyval: *mut c_int,
        extra: *mut c_void,
    ) comm = None; {
        if keyval.is_null() {
            return Err(null_arg("comm_keyval"));
        }
        let k = create(Kind::Comm, copy, delete, extra);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(keyval, k, "comm_keyval") }
    }

    /// `MPI_Keyval_create`: the MPI-1 name of `MPI_Comm_create_keyval`.
    fn MPI_Keyval_create / PMPI_Keyval_create(
        copy: usize,
        delete: Option<DeleteFn>,
        keyval: *mut c_int,
        extra: *mut c_void,
    ) comm = None; {
        if keyval.is_null() {
            return Err(null_arg("keyval"));
        }
        let k = create(Kind::Comm, copy, delete, extra);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(keyval, k, "keyval") }
    }

    /// `MPI_Comm_free_keyval`: values that use it keep it until deleted;
    /// the handle becomes `MPI_KEYVAL_INVALID`.
    fn MPI_Comm_free_keyval / PMPI_Comm_free_keyval(keyval: *mut c_int) comm = None; {
        // SAFETY: the caller's in/out-parameter.
        unsafe { free(keyval, Kind::Comm) }
    }

    /// `MPI_Keyval_free`: the MPI-1 name of `MPI_Comm_free_keyval`.
    fn MPI_Keyval_free / PMPI_Keyval_free(keyval: *mut c_int) comm = None; {
        // SAFETY: the caller's in/out-parameter.
        unsafe { free(keyval, Kind::Comm) }
    }

    /// `MPI_Comm_set_attr`: caches `value` on `comm` under `keyval` (an
    /// old value is deleted first, through its callback).
    fn MPI_Comm_set_attr / PMPI_Comm_set_attr(comm: usize, keyval: c_int, value: *mut c_void) comm = Some(comm); {
        state()?.comm(comm)?;
        set(Kind::Comm, comm, keyval, value as usize)
    }

    /// `MPI_Attr_put`: the MPI-1 name of `MPI_Comm_set_attr`.
    fn MPI_Attr_put / PMPI_Attr_put(comm: usize, keyval: c_int, value: *mut c_void) comm = Some(comm); {
        state()?.comm(comm)?;
        set(Kind::Comm, comm, keyval, value as usize)
    }

    /// `MPI_Comm_get_attr`: the value (through `value`, a `void **`) and
    /// whether it is set; the predefined attributes (`MPI_TAG_UB`,
    /// `MPI_HOST`, `MPI_IO`, `MPI_WTIME_IS_GLOBAL`, `MPI_APPNUM`,
    /// `MPI_UNIVERSE_SIZE`, `MPI_LASTUSEDCODE`) give a pointer to their
    /// int. A key that is no communicator keyval (`MPI_KEYVAL_INVALID`
    /// included) is `MPI_ERR_KEYVAL`, as in MPICH.
    fn MPI_Comm_get_attr / PMPI_Comm_get_attr(
        comm: usize,
        keyval: c_int,
        value: *mut c_void,
        flag: *mut c_int,
    ) comm = Some(comm); {
        // SAFETY: the caller's out-parameters.
        unsafe { comm_get(comm, keyval, value, flag) }
    }

    /// `MPI_Attr_get`: the MPI-1 name of `MPI_Comm_get_attr`.
    fn MPI_Attr_get / PMPI_Attr_get(
        comm: usize,
        keyval: c_int,
        value: *mut c_void,
        flag: *mut c_int,
    ) comm = Some(comm); {
        // SAFETY: the caller's out-parameters.
        unsafe { comm_get(comm, keyval, value, flag) }
    }

    /// `MPI_Comm_delete_attr`: its delete callback runs, then the value
    /// goes (if the callback fails, the value stays and the call fails).
    fn MPI_Comm_delete_attr / PMPI_Comm_delete_attr(comm: usize, keyval: c_int) comm = Some(comm); {
        state()?.comm(comm)?;
        delete(Kind::Comm, comm, keyval)
    }

    /// `MPI_Attr_delete`: the MPI-1 name of `MPI_Comm_delete_attr`.
    fn MPI_Attr_delete / PMPI_Attr_delete(comm: usize, keyval: c_int) comm = Some(comm); {
        state()?.comm(comm)?;
        delete(Kind::Comm, comm, keyval)
    }

    /// `MPI_Type_create_keyval`: a keyval for datatypes.
    fn MPI_Type_create_keyval / PMPI_Type_create_keyval(
        copy: usize,
        delete: Option<DeleteFn>,
        keyval: *mut c_int,
        extra: *mut c_void,
    ) comm = None; {
        if keyval.is_null() {
            return Err(null_arg("type_keyval"));
        }
        let k = create(Kind::Type, copy, delete, extra);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(keyval, k, "type_keyval") }
    }

    /// `MPI_Type_free_keyval`.
    fn MPI_Type_free_keyval / PMPI_Type_free_keyval(keyval: *mut c_int) comm = None; {
        // SAFETY: the caller's in/out-parameter.
        unsafe { free(keyval, Kind::Type) }
    }

    /// `MPI_Type_set_attr` (predefined datatypes too).
    fn MPI_Type_set_attr / PMPI_Type_set_attr(datatype: usize, keyval: c_int, value: *mut c_void) comm = None; {
        check_type(datatype)?;
        set(Kind::Type, datatype, keyval, value as usize)
    }

    /// `MPI_Type_get_attr`.
    fn MPI_Type_get_attr / PMPI_Type_get_attr(
        datatype: usize,
        keyval: c_int,
        value: *mut c_void,
        flag: *mut c_int,
    ) comm = None; {
        check_type(datatype)?;
        let v = get(Kind::Type, datatype, keyval)?;
        // SAFETY: the caller's out-parameters.
        unsafe { put_found(v, value, flag) }
    }

    /// `MPI_Type_delete_attr`.
    fn MPI_Type_delete_attr / PMPI_Type_delete_attr(datatype: usize, keyval: c_int) comm = None; {
        check_type(datatype)?;
        delete(Kind::Type, datatype, keyval)
    }

    /// `MPI_Win_create_keyval`: a keyval for windows (oxmpi creates no
    /// windows, so it never carries a value; it can be freed).
    fn MPI_Win_create_keyval / PMPI_Win_create_keyval(
        copy: usize,
        delete: Option<DeleteFn>,
        keyval: *mut c_int,
        extra: *mut c_void,
    ) comm = None; {
        if keyval.is_null() {
            return Err(null_arg("win_keyval"));
        }
        let k = create(Kind::Win, copy, delete, extra);
        // SAFETY: not null; the caller's out-parameter.
        unsafe { put(keyval, k, "win_keyval") }
    }

    /// `MPI_Win_free_keyval`.
    fn MPI_Win_free_keyval / PMPI_Win_free_keyval(keyval: *mut c_int) comm = None; {
        // SAFETY: the caller's in/out-parameter.
        unsafe { free(keyval, Kind::Win) }
    }

    /// `MPI_Win_set_attr`: `MPI_ERR_WIN` (no window can exist).
    fn MPI_Win_set_attr / PMPI_Win_set_attr(win: usize, _keyval: c_int, _value: *mut c_void) comm = None; {
        Err(crate::errh::no_window(win))
    }

    /// `MPI_Win_get_attr`: `MPI_ERR_WIN` (no window can exist).
    fn MPI_Win_get_attr / PMPI_Win_get_attr(
        win: usize,
        _keyval: c_int,
        _value: *mut c_void,
        _flag: *mut c_int,
    ) comm = None; {
        Err(crate::errh::no_window(win))
    }

    /// `MPI_Win_delete_attr`: `MPI_ERR_WIN` (no window can exist).
    fn MPI_Win_delete_attr / PMPI_Win_delete_attr(win: usize, _keyval: c_int) comm = None; {
        Err(crate::errh::no_window(win))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    static DELETED: AtomicUsize = AtomicUsize::new(0);

    unsafe extern "C" fn count_delete(_: usize, _: c_int, v: *mut c_void, _: *mut c_void) -> c_int {
        DELETED.fetch_add(v as usize, Ordering::SeqCst);
        0
    }

    unsafe extern "C" fn fail_delete(_: usize, _: c_int, _: *mut c_void, _: *mut c_void) -> c_int {
        13
    }

    unsafe extern "C" fn double_copy(
        _: usize,
        _: c_int,
        _: *mut c_void,
        v: *mut c_void,
        out: *mut c_void,
        flag: *mut c_int,
    ) -> c_int {
        // SAFETY: the pointers of `copy_all`.
        unsafe {
            *out.cast::<usize>() = v as usize * 2;
            *flag = 1;
        }
        0
    }

    #[test]
    fn values_copy_delete_and_keyvals_outlive_their_free() {
        // Objects no other test uses (handles are only keys here).
        let (a, b) = (0x7770_0000, 0x7770_0008);
        let k = create(
            Kind::Comm,
            double_copy as *const () as usize,
            Some(count_delete),
            std::ptr::null_mut(),
        );
        let dup = create(Kind::Comm, 1, Some(count_delete), std::ptr::null_mut());
        let none = create(Kind::Comm, 0, None, std::ptr::null_mut());
        set(Kind::Comm, a, k, 5).unwrap();
        set(Kind::Comm, a, dup, 7).unwrap();
        set(Kind::Comm, a, none, 9).unwrap();
        assert_eq!(get(Kind::Comm, a, k).unwrap(), Some(5));
        assert!(get(Kind::Type, a, k).is_err(), "a communicator keyval");
        copy_all(Kind::Comm, a, b).unwrap();
        assert_eq!(get(Kind::Comm, b, k).unwrap(), Some(10));
        assert_eq!(get(Kind::Comm, b, dup).unwrap(), Some(7));
        assert_eq!(get(Kind::Comm, b, none).unwrap(), None);
        // Replacing a value deletes the old one.
        let before = DELETED.load(Ordering::SeqCst);
        set(Kind::Comm, a, k, 6).unwrap();
        assert_eq!(DELETED.load(Ordering::SeqCst) - before, 5);
        // A freed keyval stays for the values that use it.
        let mut kk = k;
        // SAFETY: a local.
        unsafe { free(&mut kk, Kind::Comm) }.unwrap();
        assert_eq!(kk, KEYVAL_INVALID);
        assert!(set(Kind::Comm, a, k, 1).is_err(), "freed: no new values");
        assert_eq!(get(Kind::Comm, b, k).unwrap(), Some(10));
        let before = DELETED.load(Ordering::SeqCst);
        delete_all(Kind::Comm, a).unwrap();
        delete_all(Kind::Comm, b).unwrap();
        assert_eq!(DELETED.load(Ordering::SeqCst) - before, 6 + 7 + 10 + 7);
        assert!(lock(&KEYVALS).get(&k).is_none(), "gone with its last value");
        // A failing delete keeps the value and passes the code on.
        let f = create(Kind::Comm, 0, Some(fail_delete), std::ptr::null_mut());
        set(Kind::Comm, a, f, 1).unwrap();
        let e = delete(Kind::Comm, a, f).unwrap_err();
        assert_eq!((e.class(), e.code()), (ErrorClass::Arg, Some(13)));
        assert_eq!(get(Kind::Comm, a, f).unwrap(), Some(1));
        forget(Kind::Comm, a);
        assert_eq!(get(Kind::Comm, a, f).unwrap(), None);
        assert!(set(Kind::Comm, a, TAG_UB_KEY, 1).is_err());
        assert!(set(Kind::Comm, a, KEYVAL_INVALID, 1).is_err());
    }
}
