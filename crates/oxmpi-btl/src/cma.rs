//! Single-copy transfers between processes of one node through CMA
//! (cross-memory attach: `process_vm_readv` / `process_vm_writev`).
//!
//! * [`prepare`], once at start-up in every rank: where Yama's
//!   `ptrace_scope` is 1, lets any process of ours read our memory
//!   (`PR_SET_PTRACER_ANY`); scopes 2 and 3 make CMA impossible.
//! * [`CmaPeer::probe`], once per peer: same user namespace, and one 8-byte
//!   read of a word the peer published ([`ProbeWord`]) returns the published
//!   value. Any failure makes the peer [`CmaPeer::Unavailable`] with one
//!   `debug` log line; it is never an error: the caller falls back to
//!   copy-in/copy-out through the shared segment.
//! * [`read()`], [`write()`], [`readv()`], [`writev()`]: the transfers, looping over
//!   partial transfers and the kernel's `IOV_MAX` (1024) limit. A vanished
//!   peer is [`CmaError::PeerGone`], a bad remote range
//!   [`CmaError::BadAddress`].
//!
//! Remote addresses are plain numbers: the kernel checks them against the
//! peer's address space, so a wrong one is an `EFAULT`, never memory
//! corruption here. Local buffers are Rust slices, so the only `unsafe` is
//! the system call itself.
#![allow(unsafe_code)]

use std::io::{IoSlice, IoSliceMut};
use std::path::PathBuf;

use rustix::io::Errno;

use crate::mem::MemRegion;

/// The kernel's limit on iovec entries per call (`UIO_MAXIOV`).
pub const IOV_MAX: usize = 1024;

const YAMA_PTRACE_SCOPE: &str = "/proc/sys/kernel/yama/ptrace_scope";

/// Why CMA cannot be used (with this peer, or at all).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// Yama's `ptrace_scope` is 2 (admin only) or 3 (no attach).
    #[error("yama ptrace_scope is {0}")]
    YamaScope(u8),
    /// `prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)` failed under scope 1.
    #[error("prctl(PR_SET_PTRACER_ANY) failed: {0}")]
    SetPtracer(Errno),
    /// A user-namespace link could not be read.
    #[error("cannot read {path:?}: {error}")]
    Namespace {
        /// `/proc/self/ns/user` or `/proc/<pid>/ns/user`.
        path: PathBuf,
        /// What `readlink` said.
        error: String,
    },
    /// The peer lives in another user namespace.
    #[error("peer is in user namespace {peer}, we are in {ours}")]
    OtherUserNamespace {
        /// Our namespace link target.
        ours: String,
        /// The peer's.
        peer: String,
    },
    /// The probe read failed.
    #[error("probe process_vm_readv failed: {0}")]
    ProbeFailed(Errno),
    /// The probe read returned fewer than 8 bytes.
    #[error("probe process_vm_readv read {0} of 8 bytes")]
    ProbeShort(usize),
    /// The probe read returned another value than the published one.
    #[error("probe read {found:#x}, the peer published {expected:#x}")]
    ProbeMismatch {
        /// The published value.
        expected: u64,
        /// What was read.
        found: u64,
    },
}

/// What [`prepare`] found about this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmaSupport {
    /// CMA may work; each peer is still probed.
    Possible {
        /// Yama's `ptrace_scope`, if Yama is present.
        yama_scope: Option<u8>,
        /// Whether we called `PR_SET_PTRACER_ANY` (scope 1).
        ptracer_any: bool,
    },
    /// CMA cannot work on this node.
    Impossible(Unavailable),
}

impl CmaSupport {
    /// Whether probing peers is worth it.
    pub fn is_possible(&self) -> bool {
        matches!(self, CmaSupport::Possible { .. })
    }
}

/// Start-up check, in every rank: reads Yama's `ptrace_scope`; under scope 1
/// sets `PR_SET_PTRACER_ANY` so that peers (not our ancestors) may read us.
/// Never fails; an impossible CMA is logged once at `debug` level.
pub fn prepare() -> CmaSupport {
    let scope = std::fs::read_to_string(YAMA_PTRACE_SCOPE)
        .ok()
        .and_then(|s| s.trim().parse::<u8>().ok());
    let support = match scope {
        None | Some(0) => CmaSupport::Possible {
            yama_scope: scope,
            ptracer_any: false,
        },
        Some(1) => match rustix::process::set_ptracer(rustix::process::PTracer::Any) {
            Ok(()) => CmaSupport::Possible {
                yama_scope: scope,
                ptracer_any: true,
            },
            Err(errno) => CmaSupport::Impossible(Unavailable::SetPtracer(errno)),
        },
        Some(other) => CmaSupport::Impossible(Unavailable::YamaScope(other)),
    };
    if let CmaSupport::Impossible(reason) = &support {
        tracing::debug!(%reason, "CMA unavailable, using copy-in/copy-out");
    }
    support
}

/// A word whose address and value a rank publishes (in its business card)
/// so that peers can probe CMA against it. Keep it alive as long as peers may
/// probe; the value is random, so a stale or wrong address cannot match.
#[derive(Debug)]
pub struct ProbeWord(Box<u64>);

impl ProbeWord {
    /// Allocates the word with a random non-zero value.
    pub fn new() -> ProbeWord {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(t.as_nanos());
        }
        ProbeWord(Box::new(h.finish().max(1)))
    }

    /// The word's address in this process.
    pub fn addr(&self) -> usize {
        &*self.0 as *const u64 as usize
    }

    /// The word's value.
    pub fn value(&self) -> u64 {
        *self.0
    }
}

impl Default for ProbeWord {
    fn default() -> Self {
        ProbeWord::new()
    }
}

/// The result of probing one peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmaPeer {
    /// Single-copy transfers with this pid work.
    Available {
        /// The peer's pid.
        pid: u32,
    },
    /// They do not; use copy-in/copy-out.
    Unavailable(Unavailable),
}

impl CmaPeer {
    /// Checks that CMA works with `pid`: same user namespace, and reading
    /// the peer's published [`ProbeWord`] at `probe_addr` gives `expected`.
    /// A failure is logged once at `debug` level and returned as
    /// [`CmaPeer::Unavailable`], never as an error.
    pub fn probe(pid: u32, probe_addr: usize, expected: u64) -> CmaPeer {
        match probe_inner(pid, probe_addr, expected) {
            Ok(()) => CmaPeer::Available { pid },
            Err(reason) => {
                tracing::debug!(pid, %reason, "CMA unavailable with peer, using copy-in/copy-out");
                CmaPeer::Unavailable(reason)
            }
        }
    }

    /// Whether single-copy transfers may be used.
    pub fn is_available(&self) -> bool {
        matches!(self, CmaPeer::Available { .. })
    }
}

fn user_ns(path: PathBuf) -> Result<String, Unavailable> {
    match std::fs::read_link(&path) {
        Ok(target) => Ok(target.to_string_lossy().into_owned()),
        Err(error) => Err(Unavailable::Namespace {
            path,
            error: error.to_string(),
        }),
    }
}

fn probe_inner(pid: u32, probe_addr: usize, expected: u64) -> Result<(), Unavailable> {
    let ours = user_ns(PathBuf::from("/proc/self/ns/user"))?;
    let peer = user_ns(PathBuf::from(format!("/proc/{pid}/ns/user")))?;
    if ours != peer {
        return Err(Unavailable::OtherUserNamespace { ours, peer });
    }
    let mut word = [0u8; 8];
    let local = [iovec_mut(&mut word)];
    let remote = [libc::iovec {
        iov_base: probe_addr as *mut libc::c_void,
        iov_len: 8,
    }];
    let n = match syscall_rw(Direction::Read, pid, &local, &remote) {
        Ok(n) => n,
        Err(errno) => return Err(Unavailable::ProbeFailed(errno)),
    };
    if n != 8 {
        return Err(Unavailable::ProbeShort(n));
    }
    let found = u64::from_ne_bytes(word);
    if found != expected {
        return Err(Unavailable::ProbeMismatch { expected, found });
    }
    Ok(())
}

/// Why a transfer failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CmaError {
    /// The peer process no longer exists (`ESRCH`).
    #[error("CMA: peer {pid} is gone")]
    PeerGone {
        /// The peer's pid.
        pid: u32,
    },
    /// Part of the remote range is not mapped in the peer (`EFAULT`).
    #[error("CMA: bad remote address range in peer {pid} (near {addr:#x})")]
    BadAddress {
        /// The peer's pid.
        pid: u32,
        /// The first remote address not transferred.
        addr: usize,
    },
    /// The local and remote lists do not have the same total length.
    #[error("CMA: local length {local} differs from remote length {remote}")]
    LengthMismatch {
        /// Sum of the local lengths.
        local: usize,
        /// Sum of the remote lengths.
        remote: usize,
    },
    /// Any other failure (`EPERM`, `ENOSYS`, `ENOMEM`, ...).
    #[error("CMA: {call} from/to peer {pid} failed: {errno}")]
    Os {
        /// `process_vm_readv` or `process_vm_writev`.
        call: &'static str,
        /// The peer's pid.
        pid: u32,
        /// The error.
        errno: Errno,
    },
}

/// A range of the peer's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteSlice {
    /// Start address in the peer.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
}

/// Copies `local.len()` bytes from `remote_addr` in process `pid` into `local`.
/// Does not allocate.
pub fn read(pid: u32, local: &mut [u8], remote_addr: usize) -> Result<(), CmaError> {
    let len = local.len();
    transfer_one(
        Direction::Read,
        pid,
        local.as_mut_ptr() as usize,
        len,
        remote_addr,
    )
}

/// Copies `local` to `remote_addr` in process `pid`. Does not allocate.
pub fn write(pid: u32, local: &[u8], remote_addr: usize) -> Result<(), CmaError> {
    transfer_one(
        Direction::Write,
        pid,
        local.as_ptr() as usize,
        local.len(),
        remote_addr,
    )
}

/// Copies `local.len()` bytes from `remote_addr` in process `pid` into the
/// region `local` (the local side of a BTL get: its creator promised it is
/// valid and unaliased until the operation completes). Does not allocate.
pub fn read_region(pid: u32, local: MemRegion, remote_addr: usize) -> Result<(), CmaError> {
    transfer_one(Direction::Read, pid, local.addr(), local.len(), remote_addr)
}

/// Copies the region `local` to `remote_addr` in process `pid` (the local
/// side of a BTL put). Does not allocate.
pub fn write_region(pid: u32, local: MemRegion, remote_addr: usize) -> Result<(), CmaError> {
    transfer_one(
        Direction::Write,
        pid,
        local.addr(),
        local.len(),
        remote_addr,
    )
}

/// Scatter/gather read: the concatenation of the `remote` ranges of `pid`
/// goes into the concatenation of `local`. Both totals must be equal.
pub fn readv(
    pid: u32,
    local: &mut [IoSliceMut<'_>],
    remote: &[RemoteSlice],
) -> Result<(), CmaError> {
    let local: Vec<(usize, usize)> = local
        .iter_mut()
        .map(|s| (s.as_mut_ptr() as usize, s.len()))
        .collect();
    transfer(Direction::Read, pid, &local, remote)
}

/// Scatter/gather write: the concatenation of `local` goes into the
/// concatenation of the `remote` ranges of `pid`. Both totals must be equal.
pub fn writev(pid: u32, local: &[IoSlice<'_>], remote: &[RemoteSlice]) -> Result<(), CmaError> {
    let local: Vec<(usize, usize)> = local
        .iter()
        .map(|s| (s.as_ptr() as usize, s.len()))
        .collect();
    transfer(Direction::Write, pid, &local, remote)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Read,
    Write,
}

impl Direction {
    fn call(self) -> &'static str {
        match self {
            Direction::Read => "process_vm_readv",
            Direction::Write => "process_vm_writev",
        }
    }
}

fn iovec_mut(buf: &mut [u8]) -> libc::iovec {
    libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    }
}

/// A cursor over a list of (address, length) ranges.
struct Cursor<'a> {
    ranges: &'a [(usize, usize)],
    index: usize,
    offset: usize,
}

impl Cursor<'_> {
    /// Fills `out` with up to `out.len()` iovecs covering at most `budget`
    /// bytes from the current position, skipping empty ranges. Returns how
    /// many entries were filled.
    fn fill(&self, out: &mut [libc::iovec], budget: usize) -> usize {
        let mut n = 0;
        let mut left = budget;
        let mut index = self.index;
        let mut offset = self.offset;
        while n < out.len() && left > 0 && index < self.ranges.len() {
            let (addr, len) = self.ranges[index];
            let take = (len - offset).min(left);
            if take > 0 {
                out[n] = libc::iovec {
                    iov_base: (addr + offset) as *mut libc::c_void,
                    iov_len: take,
                };
                n += 1;
                left -= take;
            }
            index += 1;
            offset = 0;
        }
        n
    }

    /// Moves the position `bytes` further.
    fn advance(&mut self, mut bytes: usize) {
        while bytes > 0 {
            let (_, len) = self.ranges[self.index];
            let take = (len - self.offset).min(bytes);
            self.offset += take;
            bytes -= take;
            if self.offset == len {
                self.index += 1;
                self.offset = 0;
            }
        }
    }

    /// Address of the current position (for error reports).
    fn position(&self) -> usize {
        self.ranges
            .get(self.index)
            .map_or(0, |&(addr, _)| addr + self.offset)
    }
}

/// Maps a failed call to the caller's error; `remote_addr` is the first
/// remote byte not transferred.
fn transfer_error(direction: Direction, pid: u32, errno: Errno, remote_addr: usize) -> CmaError {
    match errno {
        Errno::SRCH => CmaError::PeerGone { pid },
        Errno::FAULT => CmaError::BadAddress {
            pid,
            addr: remote_addr,
        },
        errno => CmaError::Os {
            call: direction.call(),
            pid,
            errno,
        },
    }
}

/// One contiguous range each side; no allocation. `local_addr` comes from a
/// slice the caller holds (`&mut` for a read).
fn transfer_one(
    direction: Direction,
    pid: u32,
    local_addr: usize,
    len: usize,
    remote_addr: usize,
) -> Result<(), CmaError> {
    let mut done = 0;
    while done < len {
        let local = [libc::iovec {
            iov_base: (local_addr + done) as *mut libc::c_void,
            iov_len: len - done,
        }];
        let remote = [libc::iovec {
            iov_base: (remote_addr + done) as *mut libc::c_void,
            iov_len: len - done,
        }];
        match syscall_rw(direction, pid, &local, &remote) {
            Ok(0) => {
                return Err(CmaError::BadAddress {
                    pid,
                    addr: remote_addr + done,
                })
            }
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(errno) => return Err(transfer_error(direction, pid, errno, remote_addr + done)),
        }
    }
    Ok(())
}

/// The general case: lists of ranges on both sides, in batches of at most
/// [`IOV_MAX`] entries per side.
fn transfer(
    direction: Direction,
    pid: u32,
    local: &[(usize, usize)],
    remote: &[RemoteSlice],
) -> Result<(), CmaError> {
    let remote: Vec<(usize, usize)> = remote.iter().map(|r| (r.addr, r.len)).collect();
    let sum = |ranges: &[(usize, usize)]| {
        ranges
            .iter()
            .try_fold(0usize, |acc, &(_, len)| acc.checked_add(len))
    };
    let (local_total, remote_total) = (
        sum(local).unwrap_or(usize::MAX),
        sum(&remote).unwrap_or(usize::MAX),
    );
    if local_total != remote_total {
        return Err(CmaError::LengthMismatch {
            local: local_total,
            remote: remote_total,
        });
    }
    let mut lcur = Cursor {
        ranges: local,
        index: 0,
        offset: 0,
    };
    let mut rcur = Cursor {
        ranges: &remote,
        index: 0,
        offset: 0,
    };
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut liov = vec![empty; IOV_MAX.min(local.len().max(1))];
    let mut riov = vec![empty; IOV_MAX.min(remote.len().max(1))];
    let mut left = local_total;
    while left > 0 {
        // Fill the remote side first, then the local side with the same
        // byte budget, so that both cover exactly the same number of bytes.
        let rn = rcur.fill(&mut riov, left);
        let rbytes: usize = riov[..rn].iter().map(|v| v.iov_len).sum();
        let ln = lcur.fill(&mut liov, rbytes);
        let lbytes: usize = liov[..ln].iter().map(|v| v.iov_len).sum();
        let rn = if lbytes < rbytes {
            // The local side ran out of entries first: trim the remote side.
            let n = rcur.fill(&mut riov, lbytes);
            debug_assert_eq!(riov[..n].iter().map(|v| v.iov_len).sum::<usize>(), lbytes);
            n
        } else {
            rn
        };
        let done = match syscall_rw(direction, pid, &liov[..ln], &riov[..rn]) {
            Ok(0) => {
                return Err(CmaError::BadAddress {
                    pid,
                    addr: rcur.position(),
                })
            }
            Ok(n) => n,
            Err(Errno::INTR) => continue,
            Err(errno) => return Err(transfer_error(direction, pid, errno, rcur.position())),
        };
        lcur.advance(done);
        rcur.advance(done);
        left -= done;
    }
    Ok(())
}

/// One `process_vm_readv` / `process_vm_writev` call; at most [`IOV_MAX`]
/// entries per side. Returns the bytes transferred.
fn syscall_rw(
    direction: Direction,
    pid: u32,
    local: &[libc::iovec],
    remote: &[libc::iovec],
) -> Result<usize, Errno> {
    debug_assert!(local.len() <= IOV_MAX && remote.len() <= IOV_MAX);
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Err(Errno::SRCH);
    };
    let n = match direction {
        // SAFETY: every local iovec was built from a live Rust slice the
        // caller holds for the duration of the call (`&mut` slices for the
        // read: the kernel writes them; shared or `&mut` ones for the write:
        // the kernel only reads them), or from a `MemRegion`, whose creator
        // promised the same (valid, and unaliased when written, until the
        // operation completes). Lengths are at most IOV_MAX. Remote
        // iovecs are checked by the kernel against the peer's address space.
        Direction::Read => unsafe {
            libc::process_vm_readv(
                pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        },
        // SAFETY: as above; the kernel only reads local memory here.
        Direction::Write => unsafe {
            libc::process_vm_writev(
                pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        },
    };
    if n < 0 {
        Err(Errno::from_raw_os_error(
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ))
    } else {
        Ok(n as usize)
    }
}
