//! Partitioned point-to-point communication (MPI 4.0 §4): `MPI_Psend_init`,
//! `MPI_Precv_init`, `MPI_Pready`, `MPI_Pready_range`, `MPI_Pready_list`,
//! `MPI_Parrived`.
//!
//! A partitioned request is a persistent request of the whole message
//! (`partitions * count` elements) with its partition state beside it, by
//! handle (`PARTS`). Starting a partitioned send arms it; the message goes
//! when the last partition is marked ready (the standard lets an
//! implementation send partitions together). A partition of a receive has
//! arrived when the whole message has. Partitioned messages go over the
//! communicator's shadow duplicate (the one its collectives use) with the
//! tag shifted by one (the collectives use tag 0), so they never match the
//! program's other point-to-point messages, as the standard requires.
//! Completing an armed send whose partitions are not all ready, marking a
//! partition twice or out of range, and `MPI_Parrived` on a request that
//! is not an active partitioned receive are errors (`MPI_ERR_REQUEST`,
//! `MPI_ERR_ARG`), not hangs.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use oxmpi::{Error, ErrorClass, SendMode};

use crate::entry;
use crate::env::put;
use crate::p2p::{raw, store};
use crate::state::{lock, null_arg, state, ReqObj};

/// `MPI_ANY_SOURCE`.
const ANY_SOURCE: c_int = -1;
/// `MPI_ANY_TAG`.
const ANY_TAG: c_int = -2;
/// `MPI_PROC_NULL`.
const PROC_NULL: c_int = -3;

/// A partitioned request's state beside its persistent request.
struct Part {
    send: bool,
    partitions: usize,
    ready: Vec<bool>,
    nready: usize,
    /// A started send whose partitions are not all ready yet (its
    /// persistent request not started).
    armed: bool,
}

/// Partitioned requests by handle.
static PARTS: Mutex<Option<HashMap<usize, Part>>> = Mutex::new(None);
/// How many there are: the other request calls look at [`PARTS`] only when
/// there is one.
static NPARTS: AtomicUsize = AtomicUsize::new(0);

/// What `MPI_Start` must do for handle `h`: `Some(true)` when it was a
/// partitioned send, now armed (its persistent request not started);
/// `Some(false)` for a partitioned receive; `None` for any other handle.
pub fn start(h: usize) -> Result<Option<bool>, Error> {
    if NPARTS.load(Ordering::Relaxed) == 0 {
        return Ok(None);
    }
    let mut g = lock(&PARTS);
    let Some(p) = g.as_mut().and_then(|m| m.get_mut(&h)) else {
        return Ok(None);
    };
    if !p.send {
        return Ok(Some(false));
    }
    if p.armed {
        return Err(Error::new(
            ErrorClass::Request,
            "MPI_Start of a partitioned send that is still active",
        ));
    }
    p.armed = true;
    p.ready.fill(false);
    p.nready = 0;
    Ok(Some(true))
}

/// If handle `h` is a partitioned send started with partitions not marked
/// ready (active, but its message not started): the error a blocking
/// completion of it gives (waiting would never end).
pub fn armed(h: usize) -> Option<Error> {
    if NPARTS.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let g = lock(&PARTS);
    match g.as_ref().and_then(|m| m.get(&h)) {
        Some(p) if p.armed => Some(Error::new(
            ErrorClass::Request,
            format!(
                "waiting for a partitioned send with {} of its {} partitions marked ready (MPI_Pready)",
                p.nready, p.partitions
            ),
        )),
        _ => None,
    }
}

/// Forgets handle `h` (freed).
pub fn forget(h: usize) {
    if NPARTS.load(Ordering::Relaxed) == 0 {
        return;
    }
    if lock(&PARTS).as_mut().and_then(|m| m.remove(&h)).is_some() {
        NPARTS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The checked common arguments: partitions, the whole message's count.
fn whole(partitions: c_int, count: i64) -> Result<(usize, i64), Error> {
    let p = usize::try_from(partitions)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| {
            Error::new(
                ErrorClass::Arg,
                format!("{partitions} partitions: at least one is needed"),
            )
        })?;
    if count < 0 {
        return Err(Error::new(
            ErrorClass::Count,
            format!("count {count} is negative"),
        ));
    }
    let n = count.checked_mul(p as i64).ok_or_else(|| {
        Error::new(
            ErrorClass::Count,
            format!("{partitions} partitions of {count} elements overflow a count"),
        )
    })?;
    Ok((p, n))
}

/// The largest tag of a partitioned operation here: its traffic goes over
/// the communicator's collective shadow with the tag plus 3, above the
/// blocking collectives' tags 0 to 2 and below the collective schedules'
/// 2^30 and up (`crate::sched`), so none of them can match another's.
const PART_TAG_MAX: c_int = (1 << 30) - 4;

/// The tag partitioned traffic uses on the shadow communicator.
fn shifted(tag: c_int) -> Result<c_int, Error> {
    if !(0..=PART_TAG_MAX).contains(&tag) {
        return Err(Error::new(
            ErrorClass::Tag,
            format!(
                "tag {tag} of a partitioned operation: oxmpi takes 0 to {PART_TAG_MAX} \
                 (2^30 - 4) there"
            ),
        ));
    }
    Ok(tag + 3)
}

/// Records the new partitioned request `h`.
fn record(h: usize, send: bool, partitions: usize) {
    lock(&PARTS).get_or_insert_with(HashMap::new).insert(
        h,
        Part {
            send,
            partitions,
            ready: vec![false; partitions],
            nready: 0,
            armed: false,
        },
    );
    NPARTS.fetch_add(1, Ordering::Relaxed);
}

/// Marks `parts` of send `h` ready; the last one starts the message.
fn mark(h: usize, parts: impl IntoIterator<Item = c_int>) -> Result<(), Error> {
    let s = state()?;
    let mut g = lock(&PARTS);
    let p = g
        .as_mut()
        .and_then(|m| m.get_mut(&h))
        .filter(|p| p.send)
        .ok_or_else(|| {
            Error::new(
                ErrorClass::Request,
                format!("{h:#x} is not a partitioned send request"),
            )
        })?;
    if !p.armed {
        return Err(Error::new(
            ErrorClass::Request,
            "MPI_Pready on a partitioned send that is not started (or already complete)",
        ));
    }
    for i in parts {
        let k = usize::try_from(i)
            .ok()
            .filter(|&k| k < p.partitions)
            .ok_or_else(|| {
                Error::new(
                    ErrorClass::Arg,
                    format!("partition {i} of a request of {} partitions", p.partitions),
                )
            })?;
        if p.ready[k] {
            return Err(Error::new(
                ErrorClass::Arg,
                format!("partition {i} is already marked ready"),
            ));
        }
        p.ready[k] = true;
        p.nready += 1;
    }
    if p.nready == p.partitions {
        p.armed = false;
        drop(g);
        return match lock(&s.requests).get_mut(h) {
            Some(ReqObj::Persistent(q, _)) => q.start(),
            _ => Err(Error::new(
                ErrorClass::Request,
                format!("invalid request handle {h:#x}"),
            )),
        };
    }
    Ok(())
}

entry! {
    /// `MPI_Psend_init`: a partitioned send of `partitions` x `count`
    /// elements (`info` is a hint; none is used).
    fn MPI_Psend_init / PMPI_Psend_init(
        buf: *const c_void, partitions: c_int, count: i64, datatype: usize, dest: c_int,
        tag: c_int, comm: usize, info: usize, request: *mut usize,
    ) comm = Some(comm); {
        let _ = info;
        if request.is_null() {
            return Err(null_arg("request"));
        }
        let (p, n) = whole(partitions, count)?;
        let c = state()?.comm(comm)?;
        if dest == PROC_NULL || dest == ANY_SOURCE {
            return Err(Error::new(ErrorClass::Rank, format!("destination {dest} of a partitioned send")));
        }
        // SAFETY: the caller keeps the buffer valid until the request is
        // freed.
        let b = unsafe { raw(buf, n, datatype) }?;
        let q = b.send_init_to(&c.coll.process_at_rank(dest), shifted(tag)?, SendMode::Standard)?;
        let h = store(ReqObj::Persistent(Box::new(q), comm))?;
        record(h, true, p);
        // SAFETY: the caller's out-parameter.
        unsafe { put(request, h, "request") }
    }

    /// `MPI_Precv_init`: a partitioned receive of `partitions` x `count`
    /// elements from `source` (no wildcards).
    fn MPI_Precv_init / PMPI_Precv_init(
        buf: *mut c_void, partitions: c_int, count: i64, datatype: usize, source: c_int,
        tag: c_int, comm: usize, info: usize, request: *mut usize,
    ) comm = Some(comm); {
        let _ = info;
        if request.is_null() {
            return Err(null_arg("request"));
        }
        let (p, n) = whole(partitions, count)?;
        let c = state()?.comm(comm)?;
        if source == ANY_SOURCE || source == PROC_NULL {
            return Err(Error::new(ErrorClass::Rank, format!("source {source} of a partitioned receive")));
        }
        if tag == ANY_TAG {
            return Err(Error::new(ErrorClass::Tag, "MPI_ANY_TAG in a partitioned receive"));
        }
        // SAFETY: the caller keeps the buffer valid until the request is
        // freed.
        let b = unsafe { raw(buf.cast_const(), n, datatype) }?;
        let q = b.receive_init_from(&c.coll.peer(Some(source)), Some(shifted(tag)?))?;
        let h = store(ReqObj::Persistent(Box::new(q), comm))?;
        record(h, false, p);
        // SAFETY: the caller's out-parameter.
        unsafe { put(request, h, "request") }
    }

    /// `MPI_Pready`: partition `partition` of a started partitioned send
    /// is ready.
    fn MPI_Pready / PMPI_Pready(partition: c_int, request: usize) comm = crate::p2p::request_comm(request); {
        mark(request, [partition])
    }

    /// `MPI_Pready_range`: partitions `low..=high` are ready.
    fn MPI_Pready_range / PMPI_Pready_range(low: c_int, high: c_int, request: usize) comm = crate::p2p::request_comm(request); {
        if low > high {
            return Err(Error::new(ErrorClass::Arg, format!("partition range {low}..={high} is empty")));
        }
        mark(request, low..=high)
    }

    /// `MPI_Pready_list`: the `length` partitions listed are ready.
    fn MPI_Pready_list / PMPI_Pready_list(length: c_int, partitions: *const c_int, request: usize) comm = crate::p2p::request_comm(request); {
        let n = usize::try_from(length)
            .map_err(|_| Error::new(ErrorClass::Count, format!("length {length} is negative")))?;
        if n > 0 && partitions.is_null() {
            return Err(null_arg("array_of_partitions"));
        }
        let list = if n == 0 {
            &[][..]
        } else {
            // SAFETY: not null; the caller's array of `length` entries.
            unsafe { std::slice::from_raw_parts(partitions, n) }
        };
        mark(request, list.iter().copied())
    }

    /// `MPI_Parrived`: whether partition `partition` of an active
    /// partitioned receive has arrived (all of them arrive together).
    fn MPI_Parrived / PMPI_Parrived(request: usize, partition: c_int, flag: *mut c_int) comm = crate::p2p::request_comm(request); {
        let partitions = {
            let g = lock(&PARTS);
            g.as_ref()
                .and_then(|m| m.get(&request))
                .filter(|p| !p.send)
                .map(|p| p.partitions)
                .ok_or_else(|| {
                    Error::new(ErrorClass::Request, format!("{request:#x} is not a partitioned receive request"))
                })?
        };
        if usize::try_from(partition).map_or(true, |k| k >= partitions) {
            return Err(Error::new(
                ErrorClass::Arg,
                format!("partition {partition} of a request of {partitions} partitions"),
            ));
        }
        let s = state()?;
        s.universe.progress();
        let arrived = match lock(&s.requests).get(request) {
            Some(ReqObj::Persistent(q, _)) if q.is_active() => q.is_complete(),
            Some(ReqObj::Persistent(..)) => {
                return Err(Error::new(ErrorClass::Request, "MPI_Parrived on a partitioned receive that is not started"))
            }
            _ => return Err(Error::new(ErrorClass::Request, format!("invalid request handle {request:#x}"))),
        };
        // SAFETY: the caller's out-parameter.
        unsafe { put(flag, c_int::from(arrived), "flag") }
    }
}
