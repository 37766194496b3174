//! Error codes: the classes, the codes that carry the message of one
//! failed call, and the classes, codes and strings a program adds.
//!
//! As in MPICH, an error returned to the program is a *code*, not its
//! class (but for `MPI_ERR_IN_STATUS`, which MPICH too returns bare): `MPI_Error_class` gives the class, `MPI_Error_string` the
//! message that names the call and the offending value ("MPI_Send:
//! invalid rank (MPI_ERR_RANK): rank 8 of a communicator of 3"). The
//! messages wait in a bounded ring of [`RING_SLOTS`] recent ones; a code
//! is `slot << 7 | class`, so every code is at most `MPI_ERR_LASTCODE`
//! (`0x3fff`, the standard ABI's value), the class can always be read
//! back from it, and once its slot has been reused its string is the
//! class's text. (The ABI's `MPI_T_ERR_*` codes, 1001 to 1018, have low
//! bits 105 to 122, which no class has, so they are never taken for such
//! a code.)
//!
//! Classes and codes of the program (`MPI_Add_error_class`,
//! `MPI_Add_error_code`) are numbered from `MPI_ERR_LASTCODE + 1` up, one
//! counter for both, and `MPI_LASTUSEDCODE` is the largest in use (never
//! below `MPI_ERR_LASTCODE`).

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

use oxmpi::{Error, ErrorClass};

use crate::state::lock;

/// `MPI_ERR_LASTCODE` of the standard ABI.
pub const ERR_LASTCODE: c_int = 0x3fff;
/// `MPI_MAX_ERROR_STRING`.
pub const MAX_ERROR_STRING: usize = 512;
/// Bits of a code that hold its class.
const CLASS_BITS: u32 = 7;
/// Slots of the ring of messages (slot 0 would give codes that are
/// classes).
pub const RING_SLOTS: usize = ERR_LASTCODE as usize >> CLASS_BITS;

/// The ring of recent messages: each slot the code it was given to and
/// the message.
struct Ring {
    next: usize,
    slots: Vec<Option<(c_int, Box<str>)>>,
}

static RING: Mutex<Ring> = Mutex::new(Ring {
    next: 0,
    slots: Vec::new(),
});

/// A class or code the program added.
struct Dynamic {
    /// The class of a code; `None` for a class.
    class: Option<c_int>,
    /// `MPI_Add_error_string` (empty until set).
    string: String,
}

/// The program's classes and codes, by value.
static DYNAMIC: Mutex<BTreeMap<c_int, Dynamic>> = Mutex::new(BTreeMap::new());
/// The next value `MPI_Add_error_class` or `MPI_Add_error_code` gives.
static NEXT_DYNAMIC: AtomicI32 = AtomicI32::new(ERR_LASTCODE + 1);
/// `MPI_LASTUSEDCODE`: the largest class or code in use (read through a
/// pointer by `MPI_Comm_get_attr`).
pub static LASTUSEDCODE: AtomicI32 = AtomicI32::new(ERR_LASTCODE);

/// The standard name and text of predefined class `class`.
pub fn class_text(class: c_int) -> Option<(&'static str, &'static str)> {
    Some(match class {
        0 => ("MPI_SUCCESS", "no error"),
        1 => ("MPI_ERR_BUFFER", "invalid buffer pointer"),
        2 => ("MPI_ERR_COUNT", "invalid count argument"),
        3 => ("MPI_ERR_TYPE", "invalid datatype"),
        4 => ("MPI_ERR_TAG", "invalid tag"),
        5 => ("MPI_ERR_COMM", "invalid communicator"),
        6 => ("MPI_ERR_RANK", "invalid rank"),
        7 => ("MPI_ERR_REQUEST", "invalid request"),
        8 => ("MPI_ERR_ROOT", "invalid root"),
        9 => ("MPI_ERR_GROUP", "invalid group"),
        10 => ("MPI_ERR_OP", "invalid operation"),
        11 => ("MPI_ERR_TOPOLOGY", "invalid topology"),
        12 => ("MPI_ERR_DIMS", "invalid dimension argument"),
        13 => ("MPI_ERR_ARG", "invalid argument"),
        14 => ("MPI_ERR_UNKNOWN", "unknown error"),
        15 => ("MPI_ERR_TRUNCATE", "message truncated on receive"),
        16 => ("MPI_ERR_OTHER", "other error"),
        17 => ("MPI_ERR_INTERN", "internal error"),
        18 => ("MPI_ERR_PENDING", "pending request"),
        19 => ("MPI_ERR_IN_STATUS", "error code is in status"),
        20 => ("MPI_ERR_ACCESS", "permission denied"),
        21 => ("MPI_ERR_AMODE", "invalid file access mode"),
        22 => ("MPI_ERR_ASSERT", "invalid assertion"),
        23 => ("MPI_ERR_BAD_FILE", "invalid file name"),
        24 => ("MPI_ERR_BASE", "invalid base address"),
        25 => ("MPI_ERR_CONVERSION", "data conversion failed"),
        26 => ("MPI_ERR_DISP", "invalid displacement"),
        27 => ("MPI_ERR_DUP_DATAREP", "data representation already defined"),
        28 => ("MPI_ERR_FILE_EXISTS", "file exists"),
        29 => ("MPI_ERR_FILE_IN_USE", "file in use"),
        30 => ("MPI_ERR_FILE", "invalid file"),
        31 => ("MPI_ERR_INFO_KEY", "invalid info key"),
        32 => ("MPI_ERR_INFO_NOKEY", "info key not defined"),
        33 => ("MPI_ERR_INFO_VALUE", "invalid info value"),
        34 => ("MPI_ERR_INFO", "invalid info object"),
        35 => ("MPI_ERR_IO", "I/O error"),
        36 => ("MPI_ERR_KEYVAL", "invalid attribute key"),
        37 => ("MPI_ERR_LOCKTYPE", "invalid lock type"),
        38 => ("MPI_ERR_NAME", "service name not published"),
        39 => ("MPI_ERR_NO_MEM", "out of memory"),
        40 => (
            "MPI_ERR_NOT_SAME",
            "collective arguments not the same on all processes",
        ),
        41 => ("MPI_ERR_NO_SPACE", "no space left"),
        42 => ("MPI_ERR_NO_SUCH_FILE", "no such file"),
        43 => ("MPI_ERR_PORT", "invalid port name"),
        44 => ("MPI_ERR_QUOTA", "quota exceeded"),
        45 => ("MPI_ERR_READ_ONLY", "read-only file or file system"),
        46 => ("MPI_ERR_RMA_ATTACH", "memory cannot be attached"),
        47 => ("MPI_ERR_RMA_CONFLICT", "conflicting accesses to a window"),
        48 => ("MPI_ERR_RMA_RANGE", "target memory outside the window"),
        49 => ("MPI_ERR_RMA_SHARED", "memory cannot be shared"),
        50 => ("MPI_ERR_RMA_SYNC", "wrong synchronization of RMA calls"),
        51 => ("MPI_ERR_SERVICE", "invalid service name"),
        52 => ("MPI_ERR_SIZE", "invalid size"),
        53 => ("MPI_ERR_SPAWN", "processes could not be spawned"),
        54 => (
            "MPI_ERR_UNSUPPORTED_DATAREP",
            "unsupported data representation",
        ),
        55 => ("MPI_ERR_UNSUPPORTED_OPERATION", "unsupported operation"),
        56 => ("MPI_ERR_WIN", "invalid window"),
        57 => ("MPI_ERR_RMA_FLAVOR", "wrong window flavor"),
        58 => ("MPI_ERR_PROC_ABORTED", "a peer process aborted"),
        59 => (
            "MPI_ERR_VALUE_TOO_LARGE",
            "value too large for its output argument",
        ),
        60 => ("MPI_ERR_SESSION", "invalid session"),
        61 => ("MPI_ERR_ERRHANDLER", "invalid error handler"),
        62 => ("MPI_ERR_ABI", "ABI mismatch"),
        75 => ("MPI_ERR_PROC_FAILED", "a process failed"),
        _ => return None,
    })
}

/// Whether `class` is a predefined class (`MPI_SUCCESS` included).
fn is_predefined_class(class: c_int) -> bool {
    class_text(class).is_some()
}

/// `s` cut to at most `MPI_MAX_ERROR_STRING - 1` bytes, on a character
/// boundary.
fn cut(mut s: String) -> String {
    let mut n = s.len().min(MAX_ERROR_STRING - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    s.truncate(n);
    s
}

/// The code reporting `e`, raised by call `func`: the code the error
/// carries if it has one (a code a program's callback returned), else a
/// new code of its class whose string is `func` and the message.
#[cold]
#[inline(never)]
pub fn code_of(func: &str, e: &Error) -> c_int {
    if let Some(c) = e.code() {
        return c;
    }
    let class = e.class().code();
    if e.class() == ErrorClass::InStatus {
        // The class itself, as MPICH returns it: programs compare with it
        // (`rc == MPI_ERR_IN_STATUS`) to know that the statuses hold the
        // errors, which are codes with their own strings.
        return class;
    }
    let (name, text) = class_text(class).unwrap_or(("MPI_ERR_UNKNOWN", "unknown error"));
    record(class, format!("{func}: {text} ({name}): {}", e.message()))
}

/// Keeps `message` in the ring and returns its code, of class `class`.
#[cold]
fn record(class: c_int, message: String) -> c_int {
    let mut r = lock(&RING);
    if r.slots.is_empty() {
        r.slots.resize_with(RING_SLOTS + 1, || None);
    }
    r.next = r.next % RING_SLOTS + 1;
    let slot = r.next;
    let code = (slot as c_int) << CLASS_BITS | class;
    r.slots[slot] = Some((code, cut(message).into()));
    code
}

/// The ring slot and predefined class of a code of the ring.
fn ring_parts(code: c_int) -> Option<(usize, c_int)> {
    if !(1 << CLASS_BITS..=ERR_LASTCODE).contains(&code) {
        return None;
    }
    let class = code & ((1 << CLASS_BITS) - 1);
    (class != 0 && is_predefined_class(class)).then_some(((code >> CLASS_BITS) as usize, class))
}

/// The class of error code `code` (`MPI_Error_class`), `None` for a value
/// that is no code.
pub fn class_of(code: c_int) -> Option<c_int> {
    if is_predefined_class(code) {
        return Some(code);
    }
    if let Some((_, class)) = ring_parts(code) {
        return Some(class);
    }
    let d = lock(&DYNAMIC);
    d.get(&code).map(|x| x.class.unwrap_or(code))
}

/// The string of error code `code` (`MPI_Error_string`), `None` for a
/// value that is no code.
pub fn string_of(code: c_int) -> Option<String> {
    if let Some((name, text)) = class_text(code) {
        return Some(format!("{name}: {text}"));
    }
    if let Some((slot, class)) = ring_parts(code) {
        let r = lock(&RING);
        if let Some(Some((c, m))) = r.slots.get(slot) {
            if *c == code {
                return Some(m.to_string());
            }
        }
        return string_of(class);
    }
    let d = lock(&DYNAMIC);
    d.get(&code).map(|x| x.string.clone())
}

/// Recomputes `MPI_LASTUSEDCODE` from the program's classes and codes.
fn update_lastused(d: &BTreeMap<c_int, Dynamic>) {
    let last = d.keys().next_back().copied().unwrap_or(ERR_LASTCODE);
    LASTUSEDCODE.store(last.max(ERR_LASTCODE), Ordering::Release);
}

/// A new value for a class or code of the program.
fn add(class: Option<c_int>) -> Result<c_int, Error> {
    let mut d = lock(&DYNAMIC);
    let v = NEXT_DYNAMIC
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_add(1))
        .map_err(|_| Error::new(ErrorClass::Other, "no error code is left to add"))?;
    d.insert(
        v,
        Dynamic {
            class,
            string: String::new(),
        },
    );
    update_lastused(&d);
    Ok(v)
}

/// `MPI_Add_error_class`.
pub fn add_class() -> Result<c_int, Error> {
    add(None)
}

/// `MPI_Add_error_code`: a new code of `class` (a predefined class or one
/// the program added).
pub fn add_code(class: c_int) -> Result<c_int, Error> {
    let known = is_predefined_class(class) && class != 0
        || lock(&DYNAMIC)
            .get(&class)
            .is_some_and(|x| x.class.is_none());
    if !known {
        return Err(Error::new(
            ErrorClass::Arg,
            format!("{class} is not an error class"),
        ));
    }
    add(Some(class))
}

/// `MPI_Add_error_string`: the string of a class or code the program
/// added (predefined ones keep theirs: `MPI_ERR_ARG`).
pub fn set_string(code: c_int, s: String) -> Result<(), Error> {
    let mut d = lock(&DYNAMIC);
    let x = d.get_mut(&code).ok_or_else(|| {
        Error::new(
            ErrorClass::Arg,
            format!("{code} is not an error class or code added by the program"),
        )
    })?;
    x.string = cut(s);
    Ok(())
}

/// `MPI_Remove_error_class`: a class the program added, with no code of it
/// left and no string (MPI 4.1: removing a class or code that still has
/// codes or a string is an error; `MPI_Remove_error_string` first).
pub fn remove_class(class: c_int) -> Result<(), Error> {
    let mut d = lock(&DYNAMIC);
    match d.get(&class) {
        Some(x) if x.class.is_none() => still_named(class, x)?,
        _ => {
            return Err(Error::new(
                ErrorClass::Arg,
                format!("{class} is not an error class added by the program"),
            ))
        }
    }
    if let Some((c, _)) = d.iter().find(|(_, x)| x.class == Some(class)) {
        return Err(Error::new(
            ErrorClass::Arg,
            format!("error class {class} still has error code {c}"),
        ));
    }
    d.remove(&class);
    update_lastused(&d);
    Ok(())
}

/// `MPI_Remove_error_code`: a code the program added, without a string.
pub fn remove_code(code: c_int) -> Result<(), Error> {
    let mut d = lock(&DYNAMIC);
    match d.get(&code) {
        Some(x) if x.class.is_some() => still_named(code, x)?,
        _ => {
            return Err(Error::new(
                ErrorClass::Arg,
                format!("{code} is not an error code added by the program"),
            ))
        }
    }
    d.remove(&code);
    update_lastused(&d);
    Ok(())
}

/// `MPI_ERR_ARG` if the program's class or code `code` still has a string.
fn still_named(code: c_int, x: &Dynamic) -> Result<(), Error> {
    if x.string.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorClass::Arg,
        format!("error class or code {code} still has a string (MPI_Remove_error_string it first)"),
    ))
}

/// `MPI_Remove_error_string`: the string of a class or code the program
/// added is empty again.
pub fn remove_string(code: c_int) -> Result<(), Error> {
    set_string(code, String::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring and the program's codes are process-wide: one test at a
    /// time.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn a_code_gives_its_class_and_its_message() {
        let _g = lock(&SERIAL);
        let e = Error::new(ErrorClass::Rank, "rank 8 of a communicator of 3");
        let c = code_of("MPI_Send", &e);
        assert!(c > 62 && c <= ERR_LASTCODE, "{c}");
        assert_eq!(class_of(c), Some(6));
        let s = string_of(c).unwrap();
        assert!(s.contains("MPI_Send") && s.contains("rank 8"), "{s}");
        assert_eq!(class_of(6), Some(6));
        assert_eq!(class_of(0), Some(0));
        assert!(string_of(6).unwrap().contains("MPI_ERR_RANK"));
    }

    #[test]
    fn a_reused_slot_gives_the_class_text() {
        let _g = lock(&SERIAL);
        let first = code_of("MPI_Recv", &Error::new(ErrorClass::Tag, "tag -5"));
        for _ in 0..RING_SLOTS {
            code_of("MPI_Send", &Error::new(ErrorClass::Count, "count -1"));
        }
        assert_eq!(class_of(first), Some(4));
        let s = string_of(first).unwrap();
        assert!(!s.contains("tag -5"), "{s}");
    }

    #[test]
    fn the_abi_tool_codes_are_not_ring_codes() {
        for c in 1001..=1018 {
            assert_eq!(ring_parts(c), None, "{c}");
        }
        assert_eq!(class_of(-1), None);
        assert_eq!(class_of(ERR_LASTCODE + 100_000), None);
    }

    #[test]
    fn classes_and_codes_of_the_program() {
        let _g = lock(&SERIAL);
        let k = add_class().unwrap();
        assert!(k > ERR_LASTCODE);
        let c = add_code(k).unwrap();
        assert!(c > k);
        assert!(LASTUSEDCODE.load(Ordering::Acquire) >= c);
        assert_eq!(class_of(c), Some(k));
        assert_eq!(class_of(k), Some(k));
        assert_eq!(string_of(c).as_deref(), Some(""));
        set_string(c, "my code".into()).unwrap();
        assert_eq!(string_of(c).as_deref(), Some("my code"));
        assert!(set_string(6, "x".into()).is_err());
        assert!(remove_class(k).is_err(), "a code of it is left");
        remove_string(c).unwrap();
        assert_eq!(string_of(c).as_deref(), Some(""));
        remove_code(c).unwrap();
        remove_class(k).unwrap();
        assert_eq!(class_of(c), None);
        assert!(add_code(ERR_LASTCODE + 1_000_000).is_err());
        assert!(add_code(0).is_err());
    }

    #[test]
    fn in_status_is_the_class_itself() {
        let e = Error::new(ErrorClass::InStatus, "a request failed: see the statuses");
        assert_eq!(code_of("MPI_Waitall", &e), 19);
    }

    #[test]
    fn a_carried_code_passes_through() {
        let e = Error::with_code(ErrorClass::Other, 0x4321, "from a callback");
        assert_eq!(code_of("MPI_Comm_free", &e), 0x4321);
    }
}
