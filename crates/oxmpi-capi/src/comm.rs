//! Communicator and group calls, the handle conversions of the standard
//! ABI (`MPI_Comm_toint`, `MPI_Comm_fromint`, ...), the ABI queries, and
//! `MPI_Alloc_mem` / `MPI_Free_mem`.
//!
//! Every communicator the library creates gets its shadow duplicate (the
//! [`CommObj::coll`] the C collectives use) right after it, in the same
//! order on every member. New communicators inherit the parent's error
//! handler and start without a name.

use std::alloc::Layout;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Arc, Mutex};

use oxmpi::{Comparison, Error, ErrorClass, Group};

use crate::entry;
use crate::env::put;
use crate::state::{lock, null_arg, state, CommObj, State, COMM_NULL, COMM_SELF, COMM_WORLD};

/// `MPI_GROUP_NULL`.
pub const GROUP_NULL: usize = 0x108;
/// `MPI_GROUP_EMPTY`: the predefined empty group.
pub const GROUP_EMPTY: usize = 0x109;
/// `MPI_INFO_NULL`.
pub const INFO_NULL: usize = 0x130;
/// `MPI_UNDEFINED`.
pub const UNDEFINED: c_int = -32766;
/// `MPI_PROC_NULL`.
pub const PROC_NULL: c_int = -3;
/// `MPI_IDENT`.
pub const IDENT: c_int = 201;
/// `MPI_CONGRUENT`.
pub const CONGRUENT: c_int = 202;
/// `MPI_SIMILAR`.
pub const SIMILAR: c_int = 203;
/// `MPI_UNEQUAL`.
pub const UNEQUAL: c_int = 204;
/// `MPI_COMM_TYPE_SHARED`.
pub const COMM_TYPE_SHARED: c_int = 221;
/// `MPI_COMM_TYPE_HW_UNGUIDED`.
pub const COMM_TYPE_HW_UNGUIDED: c_int = 222;
/// `MPI_COMM_TYPE_HW_GUIDED`.
pub const COMM_TYPE_HW_GUIDED: c_int = 223;
/// `MPI_COMM_TYPE_RESOURCE_GUIDED`.
pub const COMM_TYPE_RESOURCE_GUIDED: c_int = 224;
/// `MPI_MAX_OBJECT_NAME`.
pub const MAX_OBJECT_NAME: usize = 128;
/// The ABI version `MPI_Abi_get_version` reports (`MPI_ABI_VERSION`,
/// `MPI_ABI_SUBVERSION` of `mpi.h`).
pub const ABI_VERSION: (c_int, c_int) = (1, 0);

/// Reads the handle behind `p`, if `p` is not null (for choosing the
/// error handler of calls that take a communicator by pointer).
///
/// # Safety
/// `p` must be null or valid for a read of one handle.
unsafe fn peek(p: *const usize) -> Option<usize> {
    if p.is_null() {
        None
    } else {
        // SAFETY: not null; valid per the caller.
        Some(unsafe { p.read() })
    }
}

/// Fails with `MPI_ERR_ARG` if `p` is null (out-parameters are checked
/// before collective work, so a failure leaks nothing).
fn need<T>(p: *const T, what: &str) -> Result<(), Error> {
    if p.is_null() {
        Err(null_arg(what))
    } else {
        Ok(())
    }
}

/// Stores `c`, created from `parent`, with its shadow; returns its
/// handle. It inherits the parent's error handler (and no topology).
fn register(s: &State, parent: &CommObj, c: crate::state::Comm) -> Result<usize, Error> {
    let errh = *lock(&parent.errh);
    let h = register_with(s, errh, None, c)?;
    crate::bsend::inherit(parent, h);
    Ok(h)
}

/// Stores `c` with its shadow, error handler `errh` and topology `topo`;
/// returns its handle. Local (the shadow needs no agreement).
pub(crate) fn register_with(
    s: &State,
    errh: usize,
    topo: Option<crate::topo::Topo>,
    c: crate::state::Comm,
) -> Result<usize, Error> {
    let coll = c.shadow()?;
    // The new communicator's reference to a handler the program created.
    crate::errh::retain(errh);
    let obj = CommObj {
        comm: c,
        coll,
        errh: Mutex::new(errh),
        name: Mutex::new(String::new()),
        topo,
        coll_seq: Default::default(),
    };
    Ok(lock(&s.comms).insert(Arc::new(obj)))
}

/// Stores `c` if there is one; its handle or `MPI_COMM_NULL`.
fn register_opt(
    s: &State,
    parent: &CommObj,
    c: Option<crate::state::Comm>,
) -> Result<usize, Error> {
    match c {
        Some(c) => register(s, parent, c),
        None => Ok(COMM_NULL),
    }
}

/// The empty group.
fn empty_group(s: &State) -> Result<Group, Error> {
    s.self_.comm.group().include(&[])
}

/// The group of handle `h`.
fn group(s: &State, h: usize) -> Result<Group, Error> {
    match h {
        GROUP_EMPTY => empty_group(s),
        GROUP_NULL => Err(Error::new(
            ErrorClass::Group,
            "MPI_GROUP_NULL is not a group",
        )),
        _ => lock(&s.groups)
            .get(h)
            .cloned()
            .ok_or_else(|| Error::new(ErrorClass::Group, format!("invalid group handle {h:#x}"))),
    }
}

/// Stores `g`; its handle (`MPI_GROUP_EMPTY` for an empty group).
fn store_group(s: &State, g: Group) -> usize {
    if g.size() == 0 {
        GROUP_EMPTY
    } else {
        lock(&s.groups).insert(g)
    }
}

/// `n` as a length, or `MPI_ERR_ARG`.
fn length(n: c_int, what: &str) -> Result<usize, Error> {
    usize::try_from(n).map_err(|_| Error::new(ErrorClass::Arg, format!("{what} {n} is negative")))
}

/// The `n` values at `p` (`p` may be null when `n` is 0).
///
/// # Safety
/// `p` must be valid for `n` reads of `T` when `n > 0`.
unsafe fn slice<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], Error> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: not null; the caller promises `n` valid elements.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// `r` as a rank of a group of `size`, or `MPI_ERR_RANK`.
fn group_rank(r: c_int, size: u32) -> Result<u32, Error> {
    u32::try_from(r)
        .ok()
        .filter(|&r| r < size)
        .ok_or_else(|| Error::new(ErrorClass::Rank, format!("rank {r} of a group of {size}")))
}

/// The ranks of `ranges` (`first, last, stride` triplets) in a group of
/// `size`, in order.
fn expand_ranges(ranges: &[[c_int; 3]], size: u32) -> Result<Vec<u32>, Error> {
    let mut out = Vec::new();
    for &[first, last, stride] in ranges {
        let f = group_rank(first, size)?;
        let l = group_rank(last, size)?;
        if stride == 0 {
            return Err(Error::new(
                ErrorClass::Arg,
                format!("range ({first}, {last}, 0) has stride 0"),
            ));
        }
        let (f, l, st) = (i64::from(f), i64::from(l), i64::from(stride));
        let steps = (l - f).div_euclid(st);
        if steps < 0 {
            // The stride points away from `last`: no ranks.
            continue;
        }
        // Every rank lies between `first` and `last`, both valid; more
        // ranks than the group holds means a duplicate.
        if out.len() as i64 + steps + 1 > i64::from(size) {
            return Err(Error::new(
                ErrorClass::Rank,
                "the ranges name some rank more than once",
            ));
        }
        out.extend((0..=steps).map(|k| (f + k * st) as u32));
    }
    Ok(out)
}

/// Copies `s` (NUL-terminated, cut to `max - 1` bytes) into `buf` and its
/// length into `len`.
///
/// # Safety
/// `buf` must be valid for `max` bytes, `len` for one `int`.
unsafe fn put_str(buf: *mut c_char, len: *mut c_int, s: &str, max: usize) -> Result<(), Error> {
    need(buf, "the name buffer")?;
    need(len, "resultlen")?;
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

/// `MPI_Comm_dup`: the duplicate keeps the error handler and topology.
///
/// # Safety
/// `newcomm` must be valid for a write.
unsafe fn dup(comm: usize, newcomm: *mut usize) -> Result<(), Error> {
    let s = state()?;
    let c = s.comm(comm)?;
    need(newcomm, "newcomm")?;
    let d = c.comm.dup()?;
    let h = register_with(s, *lock(&c.errh), c.topo.clone(), d)?;
    crate::bsend::inherit(&c, h);
    on_dup(s, comm, h)?;
    // SAFETY: the caller's out-parameter.
    unsafe { put(newcomm, h, "newcomm") }
}

/// The hook of every duplication (`MPI_Comm_dup`, `_dup_with_info`,
/// `_idup`, `_idup_with_info`): called once the duplicate `new` of
/// `parent` (handles) is stored, before the program sees it: `parent`'s
/// attributes are copied (their copy callbacks run) and its info hints
/// follow. An error fails the duplication: the new communicator is freed.
fn on_dup(s: &State, parent: usize, new: usize) -> Result<(), Error> {
    if let Err(e) = crate::attr::copy_all(crate::attr::Kind::Comm, parent, new) {
        if let Some(obj) = lock(&s.comms).remove(new) {
            crate::errh::release(*lock(&obj.errh));
        }
        return Err(e);
    }
    crate::info::copy_comm(parent, new);
    Ok(())
}

/// `MPI_Comm_free` (and the end of `MPI_Comm_disconnect`) of `*comm`:
/// its attributes are deleted (a failing delete callback fails the call
/// and keeps it), then it goes and `*comm` becomes `MPI_COMM_NULL`.
///
/// # Safety
/// `comm` null or valid for reading and writing.
unsafe fn free_comm(s: &State, comm: *mut usize) -> Result<(), Error> {
    need(comm, "comm")?;
    // SAFETY: not null; the caller's in/out-parameter.
    let h = unsafe { comm.read() };
    match h {
        COMM_WORLD | COMM_SELF => {
            return Err(Error::new(
                ErrorClass::Comm,
                "a predefined communicator cannot be freed",
            ))
        }
        COMM_NULL => {
            return Err(Error::new(
                ErrorClass::Comm,
                "MPI_COMM_NULL cannot be freed",
            ))
        }
        _ => {}
    }
    if lock(&s.comms).get(h).is_none() {
        return Err(Error::new(
            ErrorClass::Comm,
            format!("invalid communicator handle {h:#x}"),
        ));
    }
    // Its attributes first, last set first (a failing delete callback
    // fails the call and keeps the communicator).
    crate::attr::delete_all(crate::attr::Kind::Comm, h)?;
    let obj = lock(&s.comms).remove(h);
    let obj = obj.ok_or_else(|| {
        Error::new(
            ErrorClass::Comm,
            format!("invalid communicator handle {h:#x}"),
        )
    })?;
    crate::errh::release(*lock(&obj.errh));
    crate::info::forget_comm(h);
    crate::bsend::on_free(&obj);
    drop(obj);
    // SAFETY: the caller's in/out-parameter.
    unsafe { put(comm, COMM_NULL, "comm") }
}

/// The string at `p` (NUL-terminated), or `MPI_ERR_ARG` for null.
///
/// # Safety
/// `p` must be null or a NUL-terminated string.
unsafe fn c_string(p: *const c_char, what: &str) -> Result<String, Error> {
    need(p, what)?;
    // SAFETY: not null; NUL-terminated per the caller.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// The error handler given to a constructor (`MPI_ERRHANDLER_NULL`:
/// `MPI_ERRORS_ARE_FATAL`).
fn errh_or_fatal(h: usize) -> usize {
    if h == ERRHANDLER_NULL {
        crate::state::ERRORS_ARE_FATAL
    } else {
        h
    }
}

/// `MPI_ERRHANDLER_NULL`.
const ERRHANDLER_NULL: usize = 0x140;

/// A group made of two others by `f`, stored in `*newgroup`.
///
/// # Safety
/// `newgroup` must be valid for a write.
unsafe fn group_op(
    group1: usize,
    group2: usize,
    newgroup: *mut usize,
    f: impl FnOnce(&Group, &Group) -> Group,
) -> Result<(), Error> {
    let s = state()?;
    let a = group(s, group1)?;
    let b = group(s, group2)?;
    need(newgroup, "newgroup")?;
    let h = store_group(s, f(&a, &b));
    crate::bsend::inherit_group(group1, h);
    crate::bsend::inherit_group(group2, h);
    // SAFETY: the caller's out-parameter.
    unsafe { put(newgroup, h, "newgroup") }
}

/// `MPI_Comm_idup`: a polled request whose completion stores the new
/// communicator (with the parent's error handler and topology) in
/// `*newcomm`.
///
/// # Safety
/// `newcomm` and `request` must be valid for writes; `newcomm` until the
/// request completes.
unsafe fn idup(comm: usize, newcomm: *mut usize, request: *mut usize) -> Result<(), Error> {
    let s = state()?;
    let c = s.comm(comm)?;
    need(newcomm, "newcomm")?;
    need(request, "request")?;
    let errh = *lock(&c.errh);
    let topo = c.topo.clone();
    let pending = Mutex::new(Some(c.comm.immediate_dup()?));
    let out = newcomm as usize;
    let poll: crate::p2p::Poll = Box::new(move || {
        let mut g = lock(&pending);
        let p = g.as_mut()?;
        let r = p.test()?;
        let r = r.and_then(|d| {
            let h = register_with(s, errh, topo.clone(), d)?;
            on_dup(s, comm, h).map(|()| h)
        });
        // SAFETY: the caller of MPI_Comm_idup keeps `newcomm` valid until
        // the request completes, which is now.
        unsafe { (out as *mut usize).write(*r.as_ref().unwrap_or(&COMM_NULL)) };
        *g = None;
        Some(r.map(drop))
    });
    let g = crate::p2p::Greq::polled(poll);
    let h = lock(&s.requests).insert(crate::state::ReqObj::Greq(Arc::new(g)));
    // SAFETY: the caller's out-parameter.
    unsafe { put(request, h, "request") }
}

fn comparison_code(c: Comparison) -> c_int {
    match c {
        Comparison::Identical => IDENT,
        Comparison::Congruent => CONGRUENT,
        Comparison::Similar => SIMILAR,
        Comparison::Unequal => UNEQUAL,
    }
}

/// Sizes of the blocks `MPI_Alloc_mem` handed out, by address.
static ALLOCATIONS: Mutex<Option<HashMap<usize, Layout>>> = Mutex::new(None);

/// Alignment of `MPI_Alloc_mem` blocks (a cache line).
const ALLOC_ALIGN: usize = 64;

entry! {
    /// `MPI_Comm_dup`: the same group, a new context; inherits the error
    /// handler. Collective.
    fn MPI_Comm_dup / PMPI_Comm_dup(comm: usize, newcomm: *mut usize) comm = Some(comm); {
        // SAFETY: the caller's out-parameter.
        unsafe { dup(comm, newcomm) }
    }

    /// `MPI_Comm_dup_with_info`: `MPI_Comm_dup`; the info hints are
    /// ignored (any info handle, `MPI_INFO_NULL` included, is accepted).
    fn MPI_Comm_dup_with_info / PMPI_Comm_dup_with_info(comm: usize, _info: usize, newcomm: *mut usize) comm = Some(comm); {
        // SAFETY: the caller's out-parameter.
        unsafe { dup(comm, newcomm) }
    }

    /// `MPI_Comm_get_parent`: `MPI_COMM_NULL` (no oxmpi process is
    /// spawned: dynamic process management is not part of oxmpi).
    fn MPI_Comm_get_parent / PMPI_Comm_get_parent(parent: *mut usize) comm = None; {
        state()?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(parent, COMM_NULL, "parent") }
    }

    /// `MPI_Comm_disconnect`: waits until every member reaches the call (so
    /// the communication on it is done), then frees the communicator as
    /// `MPI_Comm_free` does. Collective.
    fn MPI_Comm_disconnect / PMPI_Comm_disconnect(comm: *mut usize) comm = {
        // SAFETY: the caller's in/out-parameter (null is checked).
        unsafe { peek(comm) }
    }; {
        let s = state()?;
        need(comm, "comm")?;
        // SAFETY: not null; the caller's in/out-parameter.
        let h = unsafe { comm.read() };
        if matches!(h, COMM_WORLD | COMM_SELF | COMM_NULL) {
            return Err(Error::new(ErrorClass::Comm, "a predefined communicator or MPI_COMM_NULL cannot be disconnected"));
        }
        s.comm(h)?.coll.barrier()?;
        // SAFETY: the caller's in/out-parameter.
        unsafe { free_comm(s, comm) }
    }

    /// `MPI_Comm_idup`: a non-blocking `MPI_Comm_dup`. `*newcomm` is
    /// written when the request completes (`MPI_COMM_NULL` if the
    /// duplication failed); the agreement advances when the request is
    /// tested or waited for.
    fn MPI_Comm_idup / PMPI_Comm_idup(comm: usize, newcomm: *mut usize, request: *mut usize) comm = Some(comm); {
        // SAFETY: the caller's pointers, forwarded.
        unsafe { idup(comm, newcomm, request) }
    }

    /// `MPI_Comm_idup_with_info`: `MPI_Comm_idup`; the info hints are
    /// ignored.
    fn MPI_Comm_idup_with_info / PMPI_Comm_idup_with_info(
        comm: usize,
        _info: usize,
        newcomm: *mut usize,
        request: *mut usize,
    ) comm = Some(comm); {
        // SAFETY: the caller's pointers, forwarded.
        unsafe { idup(comm, newcomm, request) }
    }

    /// `MPI_Comm_create_from_group`: a communicator of `group`'s members,
    /// collective over them; `stringtag` keeps concurrent creations apart;
    /// `info` is ignored; the new communicator's error handler is
    /// `errhandler` (`MPI_ERRHANDLER_NULL`: `MPI_ERRORS_ARE_FATAL`).
    fn MPI_Comm_create_from_group / PMPI_Comm_create_from_group(
        grp: usize,
        stringtag: *const c_char,
        _info: usize,
        errhandler: usize,
        newcomm: *mut usize,
    ) comm = None; {
        let s = state()?;
        let g = group(s, grp)?;
        need(newcomm, "newcomm")?;
        // SAFETY: the caller's string (null is checked).
        let tag = unsafe { c_string(stringtag, "stringtag") }?;
        let c = s.universe.comm_from_group(&g, &tag)?;
        let h = register_with(s, errh_or_fatal(errhandler), None, c)?;
        if let Some(sess) = crate::bsend::group_session(grp) {
            crate::bsend::bind(&*s.comm(h)?, sess);
        }
        // SAFETY: the caller's out-parameter.
        unsafe { put(newcomm, h, "newcomm") }
    }

    /// `MPI_Intercomm_create`: an intercommunicator between `local_comm`'s
    /// group and the group led by rank `remote_leader` of `peer_comm`
    /// (`peer_comm` and `remote_leader` matter at the local leader only).
    /// Collective over both groups.
    fn MPI_Intercomm_create / PMPI_Intercomm_create(
        local_comm: usize,
        local_leader: c_int,
        peer_comm: usize,
        remote_leader: c_int,
        tag: c_int,
        newintercomm: *mut usize,
    ) comm = Some(local_comm); {
        let s = state()?;
        let c = s.comm(local_comm)?;
        need(newintercomm, "newintercomm")?;
        let peer = if c.comm.rank() == local_leader {
            s.comm(peer_comm)?
        } else {
            // Not looked at away from the local leader.
            s.comm(peer_comm).or_else(|_| s.comm(local_comm))?
        };
        let i = c.comm.intercomm_create(local_leader, &peer.comm, remote_leader, tag)?;
        let h = register(s, &c, i)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(newintercomm, h, "newintercomm") }
    }

    /// `MPI_Intercomm_create_from_groups`: an intercommunicator between
    /// `local_group` (this process's) and `remote_group`, collective over
    /// both; `info` is ignored.
    fn MPI_Intercomm_create_from_groups / PMPI_Intercomm_create_from_groups(
        local_group: usize,
        local_leader: c_int,
        remote_group: usize,
        remote_leader: c_int,
        stringtag: *const c_char,
        _info: usize,
        errhandler: usize,
        newintercomm: *mut usize,
    ) comm = None; {
        let s = state()?;
        let lg = group(s, local_group)?;
        let rg = group(s, remote_group)?;
        need(newintercomm, "newintercomm")?;
        // SAFETY: the caller's string (null is checked).
        let tag = unsafe { c_string(stringtag, "stringtag") }?;
        let i = s
            .universe
            .intercomm_from_groups(&lg, local_leader, &rg, remote_leader, &tag)?;
        let h = register_with(s, errh_or_fatal(errhandler), None, i)?;
        if let Some(sess) = crate::bsend::group_session(local_group) {
            crate::bsend::bind(&*s.comm(h)?, sess);
        }
        // SAFETY: the caller's out-parameter.
        unsafe { put(newintercomm, h, "newintercomm") }
    }

    /// `MPI_Intercomm_merge`: an intracommunicator of both groups, the
    /// group passing `high = false` first. Collective over both groups.
    fn MPI_Intercomm_merge / PMPI_Intercomm_merge(intercomm: usize, high: c_int, newintracomm: *mut usize) comm = Some(intercomm); {
        let s = state()?;
        let c = s.comm(intercomm)?;
        need(newintracomm, "newintracomm")?;
        let m = c.comm.merge(high != 0)?;
        let h = register(s, &c, m)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(newintracomm, h, "newintracomm") }
    }

    /// `MPI_Comm_remote_group`: a new group handle of an
    /// intercommunicator's remote group (`MPI_ERR_COMM` for an
    /// intracommunicator).
    fn MPI_Comm_remote_group / PMPI_Comm_remote_group(comm: usize, grp: *mut usize) comm = Some(comm); {
        let s = state()?;
        let c = s.comm(comm)?;
        need(grp, "group")?;
        let g = c.comm.remote_group().ok_or_else(|| {
            Error::new(ErrorClass::Comm, "MPI_Comm_remote_group of an intracommunicator")
        })?;
        let h = store_group(s, g);
        // SAFETY: the caller's out-parameter.
        unsafe { put(grp, h, "group") }
    }

    /// `MPI_Group_union`.
    fn MPI_Group_union / PMPI_Group_union(group1: usize, group2: usize, newgroup: *mut usize) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { group_op(group1, group2, newgroup, |a, b| a.union(b)) }
    }

    /// `MPI_Group_intersection`.
    fn MPI_Group_intersection / PMPI_Group_intersection(group1: usize, group2: usize, newgroup: *mut usize) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { group_op(group1, group2, newgroup, |a, b| a.intersection(b)) }
    }

    /// `MPI_Group_difference`.
    fn MPI_Group_difference / PMPI_Group_difference(group1: usize, group2: usize, newgroup: *mut usize) comm = None; {
        // SAFETY: the caller's out-parameter.
        unsafe { group_op(group1, group2, newgroup, |a, b| a.difference(b)) }
    }

    /// `MPI_Group_range_excl`: every process but those of `n` triplets
    /// `first, last, stride` (which must name each rank at most once).
    fn MPI_Group_range_excl / PMPI_Group_range_excl(
        grp: usize,
        n: c_int,
        ranges: *const [c_int; 3],
        newgroup: *mut usize,
    ) comm = None; {
        let s = state()?;
        let g = group(s, grp)?;
        need(newgroup, "newgroup")?;
        let n = length(n, "n")?;
        // SAFETY: the caller passes `n` triplets.
        let ranges = unsafe { slice(ranges, n, "ranges") }?;
        let rs = expand_ranges(ranges, g.size())?;
        let mut seen = vec![false; g.size() as usize];
        for &r in &rs {
            if std::mem::replace(&mut seen[r as usize], true) {
                return Err(Error::new(ErrorClass::Rank, format!("the ranges name rank {r} twice")));
            }
        }
        let h = store_group(s, g.exclude(&rs)?);
        crate::bsend::inherit_group(grp, h);
        // SAFETY: the caller's out-parameter.
        unsafe { put(newgroup, h, "newgroup") }
    }

    /// `MPI_Comm_split`: by `color` (`MPI_UNDEFINED`: `MPI_COMM_NULL`),
    /// ordered by `key` then rank. Collective.
    fn MPI_Comm_split / PMPI_Comm_split(
        comm: usize,
        color: c_int,
        key: c_int,
        newcomm: *mut usize,
    ) comm = Some(comm); {
        let s = state()?;
        let c = s.comm(comm)?;
        need(newcomm, "newcomm")?;
        let color = match color {
            UNDEFINED => None,
            c => Some(u32::try_from(c).map_err(|_| {
                Error::new(ErrorClass::Arg, format!("color {c} is negative (and not MPI_UNDEFINED)"))
            })?),
        };
        let n = c.comm.split(color, key)?;
        let h = register_opt(s, &c, n)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(newcomm, h, "newcomm") }
    }

    /// `MPI_Comm_split_type`: `MPI_COMM_TYPE_SHARED` (the processes on
    /// this node) or `MPI_UNDEFINED` (`MPI_COMM_NULL`).
    /// `MPI_COMM_TYPE_HW_GUIDED` and `MPI_COMM_TYPE_RESOURCE_GUIDED` split
    /// by the resource their info key names: `mpi_hw_resource_type` =
    /// `mpi_shared_memory` is `MPI_COMM_TYPE_SHARED`, as the standard
    /// reserves it; `mpi_pset_name` = `mpi://WORLD` or `mpi://SELF` (the
    /// process sets oxmpi has) splits by that set; for any other (or a
    /// missing) key, as the standard says for an unsupported one, the
    /// result is `MPI_COMM_NULL` (MPICH does the same).
    /// `MPI_COMM_TYPE_HW_UNGUIDED` gives the members of the next hardware
    /// level down that is strictly smaller than `comm`: the node, when
    /// `comm` spans several (setting `mpi_hw_resource_type` in `info` to
    /// `mpi_shared_memory`); on one node, the library knows no smaller
    /// level it would be right to name (ranks are not bound to cores),
    /// so the result is `MPI_COMM_NULL`, as the standard allows. Other
    /// types are `MPI_ERR_ARG`. Collective.
    fn MPI_Comm_split_type / PMPI_Comm_split_type(
        comm: usize,
        split_type: c_int,
        key: c_int,
        info: usize,
        newcomm: *mut usize,
    ) comm = Some(comm); {
        let s = state()?;
        let c = s.comm(comm)?;
        need(newcomm, "newcomm")?;
        let hints = crate::info::entries_or_none(info)?;
        let hint = |k: &str| hints.iter().find(|(hk, _)| hk == k).map(|(_, v)| v.as_str());
        let me = s.world.comm.rank() as u32;
        // The node's color: its lowest world rank (as
        // `Communicator::split_shared`).
        let node = || s.universe.local_ranks().iter().copied().min().unwrap_or(me);
        let color = match split_type {
            UNDEFINED => None,
            COMM_TYPE_SHARED => Some(node()),
            COMM_TYPE_HW_GUIDED | COMM_TYPE_RESOURCE_GUIDED => {
                match (hint("mpi_hw_resource_type"), hint("mpi_pset_name")) {
                    (Some("mpi_shared_memory"), _) => Some(node()),
                    (None, Some("mpi://WORLD")) if split_type == COMM_TYPE_RESOURCE_GUIDED => Some(0),
                    (None, Some("mpi://SELF")) if split_type == COMM_TYPE_RESOURCE_GUIDED => Some(me),
                    _ => None,
                }
            }
            COMM_TYPE_HW_UNGUIDED => {
                let local = s.universe.local_ranks();
                let spans = c.comm.group().world_ranks().iter().any(|r| !local.contains(r));
                if spans && info != crate::info::INFO_NULL {
                    crate::info::set_entry(info, "mpi_hw_resource_type", "mpi_shared_memory")?;
                }
                spans.then(node)
            }
            t => {
                return Err(Error::new(
                    ErrorClass::Arg,
                    format!("split_type {t} is not a split type (MPI_COMM_TYPE_SHARED, _HW_UNGUIDED, _HW_GUIDED, _RESOURCE_GUIDED or MPI_UNDEFINED)"),
                ))
            }
        };
        let n = c.comm.split(color, key)?;
        let h = register_opt(s, &c, n)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(newcomm, h, "newcomm") }
    }

    /// `MPI_Comm_free`: releases a communicator the library created; the
    /// handle becomes `MPI_COMM_NULL`. Predefined communicators are
    /// `MPI_ERR_COMM`.
    fn MPI_Comm_free / PMPI_Comm_free(comm: *mut usize) comm = {
        // SAFETY: the caller's in/out-parameter (null is checked).
        unsafe { peek(comm) }
    }; {
        let s = state()?;
        // SAFETY: the caller's in/out-parameter.
        unsafe { free_comm(s, comm) }
    }

    /// `MPI_Comm_compare`: `MPI_IDENT`, `MPI_CONGRUENT`, `MPI_SIMILAR` or
    /// `MPI_UNEQUAL`.
    fn MPI_Comm_compare / PMPI_Comm_compare(comm1: usize, comm2: usize, result: *mut c_int) comm = Some(comm1); {
        let s = state()?;
        let a = s.comm(comm1)?;
        let b = s.comm(comm2)?;
        let r = comparison_code(a.comm.compare(&b.comm));
        // SAFETY: the caller's out-parameter.
        unsafe { put(result, r, "result") }
    }

    /// `MPI_Comm_group`: a new group handle of the communicator's group.
    fn MPI_Comm_group / PMPI_Comm_group(comm: usize, grp: *mut usize) comm = Some(comm); {
        let s = state()?;
        let c = s.comm(comm)?;
        need(grp, "group")?;
        let h = store_group(s, c.comm.group());
        // SAFETY: the caller's out-parameter.
        unsafe { put(grp, h, "group") }
    }

    /// `MPI_Comm_create`: a communicator of `group` (a subset of `comm`'s
    /// group); `MPI_COMM_NULL` outside it. Collective over `comm`.
    fn MPI_Comm_create / PMPI_Comm_create(comm: usize, grp: usize, newcomm: *mut usize) comm = Some(comm); {
        let s = state()?;
        let c = s.comm(comm)?;
        let g = group(s, grp)?;
        need(newcomm, "newcomm")?;
        let n = c.comm.create_from_group(&g)?;
        let h = register_opt(s, &c, n)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(newcomm, h, "newcomm") }
    }

    /// `MPI_Comm_create_group`: a communicator of `group` (a subset of
    /// `comm`'s group), collective over the members of `group` only; `tag`
    /// keeps concurrent calls apart. A caller outside `group` gets
    /// `MPI_COMM_NULL`.
    fn MPI_Comm_create_group / PMPI_Comm_create_group(
        comm: usize,
        grp: usize,
        tag: c_int,
        newcomm: *mut usize,
    ) comm = Some(comm); {
        let s = state()?;
        let c = s.comm(comm)?;
        let g = group(s, grp)?;
        need(newcomm, "newcomm")?;
        let n = c.comm.create_group(&g, tag)?;
        let h = register_opt(s, &c, n)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(newcomm, h, "newcomm") }
    }

    /// `MPI_Comm_test_inter`: whether `comm` is an intercommunicator.
    fn MPI_Comm_test_inter / PMPI_Comm_test_inter(comm: usize, flag: *mut c_int) comm = Some(comm); {
        let inter = state()?.comm(comm)?.comm.is_inter();
        // SAFETY: the caller's out-parameter.
        unsafe { put(flag, c_int::from(inter), "flag") }
    }

    /// `MPI_Comm_remote_size`: the size of an intercommunicator's remote
    /// group; `MPI_ERR_COMM` for an intracommunicator (which has none).
    fn MPI_Comm_remote_size / PMPI_Comm_remote_size(comm: usize, size: *mut c_int) comm = Some(comm); {
        let n = state()?.comm(comm)?.comm.remote_size().ok_or_else(|| {
            Error::new(ErrorClass::Comm, "MPI_Comm_remote_size of an intracommunicator")
        })?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(size, n, "size") }
    }

    /// `MPI_Comm_get_name` (empty until set; `MPI_COMM_WORLD` and
    /// `MPI_COMM_SELF` are named after themselves, and so is
    /// `MPI_COMM_NULL`, as in MPICH).
    fn MPI_Comm_get_name / PMPI_Comm_get_name(
        comm: usize,
        comm_name: *mut c_char,
        resultlen: *mut c_int,
    ) comm = Some(comm); {
        let s = state()?;
        let name = if comm == COMM_NULL {
            "MPI_COMM_NULL".to_string()
        } else {
            lock(&s.comm(comm)?.name).clone()
        };
        // SAFETY: the standard requires MPI_MAX_OBJECT_NAME bytes.
        unsafe { put_str(comm_name, resultlen, &name, MAX_OBJECT_NAME) }
    }

    /// `MPI_Comm_set_name` (cut to `MPI_MAX_OBJECT_NAME - 1` bytes).
    fn MPI_Comm_set_name / PMPI_Comm_set_name(comm: usize, comm_name: *const c_char) comm = Some(comm); {
        let c = state()?.comm(comm)?;
        need(comm_name, "comm_name")?;
        // SAFETY: not null; the caller passes a NUL-terminated string.
        let raw = unsafe { CStr::from_ptr(comm_name) };
        let mut name = raw.to_string_lossy().into_owned();
        let mut cut = name.len().min(MAX_OBJECT_NAME - 1);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
        *lock(&c.name) = name;
        Ok(())
    }

    /// `MPI_Group_size`.
    fn MPI_Group_size / PMPI_Group_size(grp: usize, size: *mut c_int) comm = None; {
        let g = group(state()?, grp)?;
        // SAFETY: the caller's out-parameter.
        unsafe { put(size, g.size() as c_int, "size") }
    }

    /// `MPI_Group_rank` (`MPI_UNDEFINED` outside the group).
    fn MPI_Group_rank / PMPI_Group_rank(grp: usize, rank: *mut c_int) comm = None; {
        let g = group(state()?, grp)?;
        let r = g.rank().map_or(UNDEFINED, |r| r as c_int);
        // SAFETY: the caller's out-parameter.
        unsafe { put(rank, r, "rank") }
    }

    /// `MPI_Group_incl`: the processes at `ranks`, in that order.
    fn MPI_Group_incl / PMPI_Group_incl(
        grp: usize,
        n: c_int,
        ranks: *const c_int,
        newgroup: *mut usize,
    ) comm = None; {
        let s = state()?;
        let g = group(s, grp)?;
        need(newgroup, "newgroup")?;
        let n = length(n, "n")?;
        // SAFETY: the caller passes `n` ranks.
        let ranks = unsafe { slice(ranks, n, "ranks") }?;
        let rs = ranks
            .iter()
            .map(|&r| group_rank(r, g.size()))
            .collect::<Result<Vec<u32>, Error>>()?;
        let h = store_group(s, g.include(&rs)?);
        crate::bsend::inherit_group(grp, h);
        // SAFETY: the caller's out-parameter.
        unsafe { put(newgroup, h, "newgroup") }
    }

    /// `MPI_Group_excl`: every process but those at `ranks` (distinct), in
    /// order.
    fn MPI_Group_excl / PMPI_Group_excl(
        grp: usize,
        n: c_int,
        ranks: *const c_int,
        newgroup: *mut usize,
    ) comm = None; {
        let s = state()?;
        let g = group(s, grp)?;
        need(newgroup, "newgroup")?;
        let n = length(n, "n")?;
        // SAFETY: the caller passes `n` ranks.
        let ranks = unsafe { slice(ranks, n, "ranks") }?;
        let mut rs = Vec::with_capacity(n);
        for &r in ranks {
            let r = group_rank(r, g.size())?;
            if rs.contains(&r) {
                return Err(Error::new(ErrorClass::Rank, format!("rank {r} given twice")));
            }
            rs.push(r);
        }
        let h = store_group(s, g.exclude(&rs)?);
        crate::bsend::inherit_group(grp, h);
        // SAFETY: the caller's out-parameter.
        unsafe { put(newgroup, h, "newgroup") }
    }

    /// `MPI_Group_range_incl`: the ranks of `n` triplets `first, last,
    /// stride`, in order.
    fn MPI_Group_range_incl / PMPI_Group_range_incl(
        grp: usize,
        n: c_int,
        ranges: *const [c_int; 3],
        newgroup: *mut usize,
    ) comm = None; {
        let s = state()?;
        let g = group(s, grp)?;
        need(newgroup, "newgroup")?;
        let n = length(n, "n")?;
        // SAFETY: the caller passes `n` triplets.
        let ranges = unsafe { slice(ranges, n, "ranges") }?;
        let rs = expand_ranges(ranges, g.size())?;
        let h = store_group(s, g.include(&rs)?);
        crate::bsend::inherit_group(grp, h);
        // SAFETY: the caller's out-parameter.
        unsafe { put(newgroup, h, "newgroup") }
    }

    /// `MPI_Group_translate_ranks`: the rank in `group2` of each of
    /// `ranks1` (`MPI_UNDEFINED` if absent; `MPI_PROC_NULL` stays
    /// `MPI_PROC_NULL`).
    fn MPI_Group_translate_ranks / PMPI_Group_translate_ranks(
        group1: usize,
        n: c_int,
        ranks1: *const c_int,
        group2: usize,
        ranks2: *mut c_int,
    ) comm = None; {
        let s = state()?;
        let g1 = group(s, group1)?;
        let g2 = group(s, group2)?;
        let n = length(n, "n")?;
        // SAFETY: the caller passes `n` ranks.
        let ranks1 = unsafe { slice(ranks1, n, "ranks1") }?;
        let mut out = Vec::with_capacity(n);
        for &r in ranks1 {
            if r == PROC_NULL {
                out.push(PROC_NULL);
                continue;
            }
            let r = group_rank(r, g1.size())?;
            let t = g1.translate_ranks(&[r], &g2)?;
            out.push(t[0].map_or(UNDEFINED, |x| x as c_int));
        }
        if n > 0 {
            need(ranks2, "ranks2")?;
            // SAFETY: not null; the caller provides room for `n` ranks.
            unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), ranks2, n) };
        }
        Ok(())
    }

    /// `MPI_Group_compare`: `MPI_IDENT` (same processes, same order),
    /// `MPI_SIMILAR` (same processes) or `MPI_UNEQUAL`.
    fn MPI_Group_compare / PMPI_Group_compare(group1: usize, group2: usize, result: *mut c_int) comm = None; {
        let s = state()?;
        let a = group(s, group1)?;
        let b = group(s, group2)?;
        let r = if a.world_ranks() == b.world_ranks() {
            IDENT
        } else {
            let mut x = a.world_ranks().to_vec();
            let mut y = b.world_ranks().to_vec();
            x.sort_unstable();
            y.sort_unstable();
            if x == y {
                SIMILAR
            } else {
                UNEQUAL
            }
        };
        // SAFETY: the caller's out-parameter.
        unsafe { put(result, r, "result") }
    }

    /// `MPI_Group_free`: the handle becomes `MPI_GROUP_NULL` (freeing
    /// `MPI_GROUP_EMPTY` only resets the handle).
    fn MPI_Group_free / PMPI_Group_free(grp: *mut usize) comm = None; {
        let s = state()?;
        need(grp, "group")?;
        // SAFETY: not null; the caller's in/out-parameter.
        let h = unsafe { grp.read() };
        if h != GROUP_EMPTY {
            let g = lock(&s.groups).remove(h);
            g.ok_or_else(|| Error::new(ErrorClass::Group, format!("invalid group handle {h:#x}")))?;
            crate::bsend::forget_group(h);
        }
        // SAFETY: the caller's in/out-parameter.
        unsafe { put(grp, GROUP_NULL, "group") }
    }

    /// `MPI_Abi_get_version`: the standard ABI's version (`MPI_ABI_VERSION`
    /// and `MPI_ABI_SUBVERSION` of `mpi.h`).
    fn MPI_Abi_get_version / PMPI_Abi_get_version(abi_major: *mut c_int, abi_minor: *mut c_int) comm = None; {
        // SAFETY: the caller's out-parameters.
        unsafe {
            put(abi_major, ABI_VERSION.0, "abi_major")?;
            put(abi_minor, ABI_VERSION.1, "abi_minor")
        }
    }

    /// `MPI_Abi_get_info`: a new info object with the sizes of the ABI's
    /// integer types (`mpi_aint_size`, `mpi_count_size`, `mpi_offset_size`,
    /// in bytes).
    fn MPI_Abi_get_info / PMPI_Abi_get_info(info: *mut usize) comm = None; {
        need(info, "info")?;
        let e = [
            ("mpi_aint_size", std::mem::size_of::<isize>()),
            ("mpi_count_size", std::mem::size_of::<i64>()),
            ("mpi_offset_size", std::mem::size_of::<i64>()),
        ];
        let h = crate::info::new_info(e.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        // SAFETY: the caller's out-parameter.
        unsafe { put(info, h, "info") }
    }

    /// `MPI_Alloc_mem`: `size` bytes aligned to 64, stored through
    /// `baseptr` (a `void **`); `MPI_ERR_NO_MEM` if the allocation fails.
    /// `info` is ignored.
    fn MPI_Alloc_mem / PMPI_Alloc_mem(size: isize, _info: usize, baseptr: *mut c_void) comm = None; {
        need(baseptr, "baseptr")?;
        let n = usize::try_from(size)
            .map_err(|_| Error::new(ErrorClass::Arg, format!("size {size} is negative")))?;
        let layout = Layout::from_size_align(n.max(1), ALLOC_ALIGN).map_err(|_| {
            Error::new(ErrorClass::NoMem, format!("cannot allocate {size} bytes"))
        })?;
        // SAFETY: the layout's size is at least 1.
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(Error::new(ErrorClass::NoMem, format!("cannot allocate {size} bytes")));
        }
        lock(&ALLOCATIONS)
            .get_or_insert_with(HashMap::new)
            .insert(p as usize, layout);
        // SAFETY: `baseptr` is the caller's `void **` out-parameter.
        unsafe { put(baseptr.cast::<*mut c_void>(), p.cast::<c_void>(), "baseptr") }
    }

    /// `MPI_Free_mem`: releases a block of `MPI_Alloc_mem` (null does
    /// nothing; any other address is `MPI_ERR_ARG`).
    fn MPI_Free_mem / PMPI_Free_mem(base: *mut c_void) comm = None; {
        if base.is_null() {
            return Ok(());
        }
        let layout = lock(&ALLOCATIONS)
            .as_mut()
            .and_then(|m| m.remove(&(base as usize)))
            .ok_or_else(|| {
                Error::new(ErrorClass::Arg, format!("{base:p} was not allocated by MPI_Alloc_mem"))
            })?;
        // SAFETY: `base` came from `alloc` with `layout` (recorded above)
        // and is released once: its record was just removed.
        unsafe { std::alloc::dealloc(base.cast::<u8>(), layout) };
        Ok(())
    }
}

/// Defines the `MPI_X_toint` / `MPI_X_fromint` conversions (and their
/// `PMPI_` names) of a handle kind whose null handle is `$null`: handles
/// are small integers, so a conversion is a checked cast (a value that
/// does not fit becomes the null handle).
macro_rules! conversions {
    ($($kind:literal, $null:expr, $toint:ident / $ptoint:ident, $fromint:ident / $pfromint:ident;)*) => {$(
        #[doc = concat!("`MPI_", $kind, "_toint`: the handle as an `int` (the null handle's value if it does not fit).")]
        #[no_mangle]
        pub extern "C" fn $ptoint(h: usize) -> c_int {
            c_int::try_from(h).unwrap_or($null as c_int)
        }

        #[doc = concat!("`MPI_", $kind, "_toint`.")]
        #[no_mangle]
        pub extern "C" fn $toint(h: usize) -> c_int {
            $ptoint(h)
        }

        #[doc = concat!("`MPI_", $kind, "_fromint`: the handle of an `int` (a negative one gives the null handle).")]
        #[no_mangle]
        pub extern "C" fn $pfromint(i: c_int) -> usize {
            usize::try_from(i).unwrap_or($null)
        }

        #[doc = concat!("`MPI_", $kind, "_fromint`.")]
        #[no_mangle]
        pub extern "C" fn $fromint(i: c_int) -> usize {
            $pfromint(i)
        }
    )*};
}

/// `MPI_Request_toint`: the handle as an `int` (the null handle's value if
/// it does not fit). A receive complete inside `MPI_Irecv` (whose handle
/// carries its status and is no integer) gets a table entry with that
/// status, whose handle the `int` names: `MPI_Request_fromint` gives that
/// one back, which completes as the original would (the original stays
/// valid too; only one of the two may be completed).
#[no_mangle]
pub extern "C" fn PMPI_Request_toint(h: usize) -> c_int {
    let h = crate::state::request_as_table_handle(h);
    c_int::try_from(h).unwrap_or(crate::state::REQUEST_NULL as c_int)
}

/// `MPI_Request_toint`.
#[no_mangle]
pub extern "C" fn MPI_Request_toint(h: usize) -> c_int {
    PMPI_Request_toint(h)
}

/// `MPI_Request_fromint`: the handle of an `int` (a negative one gives the
/// null handle).
#[no_mangle]
pub extern "C" fn PMPI_Request_fromint(i: c_int) -> usize {
    usize::try_from(i).unwrap_or(crate::state::REQUEST_NULL)
}

/// `MPI_Request_fromint`.
#[no_mangle]
pub extern "C" fn MPI_Request_fromint(i: c_int) -> usize {
    PMPI_Request_fromint(i)
}

conversions! {
    "Comm", COMM_NULL, MPI_Comm_toint / PMPI_Comm_toint, MPI_Comm_fromint / PMPI_Comm_fromint;
    "Group", GROUP_NULL, MPI_Group_toint / PMPI_Group_toint, MPI_Group_fromint / PMPI_Group_fromint;
    "Type", crate::state::DATATYPE_NULL, MPI_Type_toint / PMPI_Type_toint, MPI_Type_fromint / PMPI_Type_fromint;
    "Op", 0x20usize, MPI_Op_toint / PMPI_Op_toint, MPI_Op_fromint / PMPI_Op_fromint;
    "Errhandler", 0x140usize, MPI_Errhandler_toint / PMPI_Errhandler_toint, MPI_Errhandler_fromint / PMPI_Errhandler_fromint;
    "Message", 0x128usize, MPI_Message_toint / PMPI_Message_toint, MPI_Message_fromint / PMPI_Message_fromint;
    "Info", INFO_NULL, MPI_Info_toint / PMPI_Info_toint, MPI_Info_fromint / PMPI_Info_fromint;
    "Win", 0x110usize, MPI_Win_toint / PMPI_Win_toint, MPI_Win_fromint / PMPI_Win_fromint;
    "File", 0x118usize, MPI_File_toint / PMPI_File_toint, MPI_File_fromint / PMPI_File_fromint;
    "Session", 0x120usize, MPI_Session_toint / PMPI_Session_toint, MPI_Session_fromint / PMPI_Session_fromint;
}
