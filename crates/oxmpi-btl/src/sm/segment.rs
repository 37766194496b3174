//! A shared-memory segment that cannot leak.
//!
//! Every rank creates its own segment ([`Segment::create`]) and publishes its
//! business card ([`SegmentCard`], a fixed 40-byte record) through the modex;
//! a peer maps it lazily with [`Segment::attach`], which returns a
//! [`Mapping`]. Both expose the data region with [`Segment::as_ptr`] /
//! [`Mapping::as_ptr`]: it starts [`DATA_OFFSET`] bytes into the object, so it
//! is 4096-byte aligned (hence cache-line aligned), and it starts zeroed.
//!
//! # Backings, and why they do not leak
//!
//! * [`BackingKind::Memfd`] (preferred): an anonymous `memfd_create` object.
//!   It has no name in any filesystem; the kernel frees it once the last file
//!   descriptor and the last mapping of it are gone, which happens when every
//!   process holding it exits, however it exits (SIGKILL included). A peer
//!   attaches by opening the owner's `/proc/<pid>/fd/<fd>` (same user, needs
//!   `PTRACE_MODE_READ` on the owner; Yama does not restrict that check), maps
//!   it and closes the descriptor at once. The owner keeps its descriptor
//!   until the segment is dropped so that peers can attach lazily.
//! * [`BackingKind::ShmFile`] (fallback, when `memfd_create` or `/proc` is not
//!   usable): a file `/dev/shm/oxmpi-<uid>-<pid>-<cookie>` created with
//!   `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600, exactly what `shm_open` does.
//!   The owner unlinks it when told that every peer needing it has attached
//!   ([`Segment::unlink_name`], called after a fence) and at the latest when
//!   the segment is dropped; from then on it is as leak-proof as a memfd.
//!   **Residual leak window:** if every process holding it is killed with
//!   SIGKILL between [`Segment::create`] and [`Segment::unlink_name`], the file
//!   stays in `/dev/shm` until someone removes it. The name carries the owner's
//!   uid and pid so that [`reap_stale_shm_files`] (run by `oxmpirun` when a
//!   job ends) can remove the files of dead owners.
//!
//! # Checking a card from a peer
//!
//! Cards are untrusted bytes: [`SegmentCard::from_bytes`] checks lengths and
//! values, and [`Segment::attach`] checks that the object is a regular file of
//! exactly the announced size and that its header holds the magic number, the
//! 64-bit random cookie of the card and the length. A dead owner, a reused pid
//! or fd, a wrong cookie or a wrong size is a [`SegmentError`], never a crash.
//!
//! # Closed segments
//!
//! The header page also holds a state word, on its own cache line: the owner
//! sets it when it drops its [`Segment`] (a clean close), and a peer reads it
//! with [`Mapping::owner_closed`] without any system call. (An owner that is
//! killed never sets it: peers watch its process for that.)
//!
//! The only accesses this module makes to the shared memory are the header
//! write (by the owner, before its card is published), the header read (by
//! a peer, before its mapping is handed out) and the state word; what the
//! callers do with [`Segment::as_ptr`] is theirs to synchronise, except that
//! [`Segment::words`] / [`Mapping::words`] give a safe view of data words
//! that are only ever accessed atomically.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};

/// Offset of the data region from the start of the shared object: the header
/// lives in the first page.
pub const DATA_OFFSET: usize = 4096;

/// Length in bytes of an encoded [`SegmentCard`].
pub const CARD_LEN: usize = 40;

/// Offset in the header page of the owner's state word (its own line).
const STATE_OFFSET: usize = 64;
/// State word value once the owner has dropped its segment.
const STATE_CLOSED: u64 = 1;

/// Magic number at offset 0 of every segment ("OXMPISEG", little endian).
const HEADER_MAGIC: u64 = u64::from_le_bytes(*b"OXMPISEG");
/// Layout version of the segment header.
const HEADER_VERSION: u32 = 1;
/// First four bytes of an encoded card.
const CARD_MAGIC: [u8; 4] = *b"OXSC";
/// Layout version of the card.
const CARD_VERSION: u8 = 1;
/// Directory of POSIX shared-memory objects on Linux.
const SHM_DIR: &str = "/dev/shm";
/// Prefix of every shared-memory file we create.
const SHM_PREFIX: &str = "oxmpi-";

/// Which backing to use, as asked by the caller (the MCA parameter later).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SegmentKind {
    /// A memfd if `memfd_create` works and `/proc/<pid>/fd` can be opened,
    /// else the `/dev/shm` file.
    #[default]
    Auto,
    /// A memfd only; an error if that is not possible.
    Memfd,
    /// A `/dev/shm` file only.
    ShmFile,
}

/// Which backing a segment actually has (carried by the card).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackingKind {
    /// An anonymous memfd, attached through `/proc/<pid>/fd/<fd>`.
    Memfd,
    /// A file in `/dev/shm`, unlinked by its owner once peers have attached.
    ShmFile,
}

impl BackingKind {
    fn to_byte(self) -> u8 {
        match self {
            BackingKind::Memfd => 1,
            BackingKind::ShmFile => 2,
        }
    }

    fn from_byte(byte: u8) -> Option<BackingKind> {
        match byte {
            1 => Some(BackingKind::Memfd),
            2 => Some(BackingKind::ShmFile),
            _ => None,
        }
    }
}

/// What to do about `errno`, if it is a resource running out: descriptors
/// (the limits and how to raise them) or room in the filesystem of `path`.
fn errno_hint(errno: Errno, path: Option<&PathBuf>) -> String {
    match errno {
        Errno::MFILE | Errno::NFILE => format!(": {}", oxmpi_runtime::limits::fd_limit_hint()),
        Errno::NOSPC => {
            let dir = path
                .and_then(|p| p.parent())
                .map_or_else(|| "/dev/shm".into(), |d| d.display().to_string());
            format!(
                ": {dir} has too little room for this rank's shared segment (enlarge it, e.g. \
                 `mount -o remount,size=1G {dir}`, or lower btl_sm_ring_size)"
            )
        }
        _ => String::new(),
    }
}

/// Why a segment could not be created, attached or unlinked.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// A system call failed while creating the owner's segment.
    #[error("shared segment: {call} failed: {errno}{}", errno_hint(*.errno, None))]
    Create {
        /// The call that failed (`memfd_create`, `ftruncate`, `mmap`, ...).
        call: &'static str,
        /// Its error.
        errno: Errno,
    },
    /// Opening or creating a path failed.
    #[error("shared segment: open {path:?} failed: {errno}{}", errno_hint(*.errno, Some(path)))]
    Open {
        /// The path.
        path: PathBuf,
        /// The error of `open`.
        errno: Errno,
    },
    /// A system call on an opened path failed.
    #[error("shared segment: {call} on {path:?} failed: {errno}{}", errno_hint(*.errno, Some(path)))]
    Io {
        /// The call that failed (`fstat`, `ftruncate`, `mmap`).
        call: &'static str,
        /// The path it was applied to.
        path: PathBuf,
        /// Its error.
        errno: Errno,
    },
    /// Unlinking the `/dev/shm` file failed.
    #[error("shared segment: unlink {path:?} failed: {errno}")]
    Unlink {
        /// The path.
        path: PathBuf,
        /// The error of `unlink`.
        errno: Errno,
    },
    /// The object at the card's path is not a regular file.
    #[error("shared segment: {path:?} is not a regular file")]
    NotRegularFile {
        /// The path.
        path: PathBuf,
    },
    /// The object's size differs from the card's.
    #[error("shared segment: {path:?} has {found} bytes, the card announces {expected}")]
    Size {
        /// The path.
        path: PathBuf,
        /// Header plus the card's length.
        expected: u64,
        /// What `fstat` says.
        found: u64,
    },
    /// The object is not the segment the card describes.
    #[error("shared segment: {path:?} is not the announced segment: {reason}")]
    Header {
        /// The path.
        path: PathBuf,
        /// Which check failed.
        reason: &'static str,
    },
    /// A card's bytes are malformed.
    #[error("shared segment: malformed card: {0}")]
    BadCard(&'static str),
    /// The requested length is zero or too large for this machine.
    #[error("shared segment: invalid length {0}")]
    Length(u64),
}

/// What a peer needs to attach a segment: published through the modex.
///
/// Encoded by [`SegmentCard::to_bytes`] into [`CARD_LEN`] bytes, little
/// endian:
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 4 | magic `"OXSC"` |
/// | 4 | 1 | version (1) |
/// | 5 | 1 | kind: 1 memfd, 2 shm file |
/// | 6 | 2 | zero |
/// | 8 | 4 | owner pid (u32) |
/// | 12 | 4 | owner uid (u32) |
/// | 16 | 4 | memfd descriptor in the owner (i32; -1 for a shm file) |
/// | 20 | 4 | zero |
/// | 24 | 8 | data length (u64, without the header page) |
/// | 32 | 8 | cookie (u64, random) |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentCard {
    /// The backing.
    pub kind: BackingKind,
    /// The owner's pid.
    pub pid: u32,
    /// The owner's uid (part of the `/dev/shm` name).
    pub uid: u32,
    /// The memfd's descriptor number in the owner; -1 for a shm file.
    pub fd: i32,
    /// Length of the data region.
    pub len: u64,
    /// Random cookie, also written in the segment's header.
    pub cookie: u64,
}

impl SegmentCard {
    /// Encodes the card.
    pub fn to_bytes(&self) -> [u8; CARD_LEN] {
        let mut out = [0u8; CARD_LEN];
        out[0..4].copy_from_slice(&CARD_MAGIC);
        out[4] = CARD_VERSION;
        out[5] = self.kind.to_byte();
        out[8..12].copy_from_slice(&self.pid.to_le_bytes());
        out[12..16].copy_from_slice(&self.uid.to_le_bytes());
        out[16..20].copy_from_slice(&self.fd.to_le_bytes());
        out[24..32].copy_from_slice(&self.len.to_le_bytes());
        out[32..40].copy_from_slice(&self.cookie.to_le_bytes());
        out
    }

    /// Decodes a card from untrusted bytes, checking every field.
    pub fn from_bytes(bytes: &[u8]) -> Result<SegmentCard, SegmentError> {
        let bytes: &[u8; CARD_LEN] = bytes
            .try_into()
            .map_err(|_| SegmentError::BadCard("wrong length"))?;
        if bytes[0..4] != CARD_MAGIC {
            return Err(SegmentError::BadCard("bad magic"));
        }
        if bytes[4] != CARD_VERSION {
            return Err(SegmentError::BadCard("unknown version"));
        }
        let kind = BackingKind::from_byte(bytes[5]).ok_or(SegmentError::BadCard("unknown kind"))?;
        if bytes[6..8] != [0, 0] || bytes[20..24] != [0; 4] {
            return Err(SegmentError::BadCard("reserved bytes not zero"));
        }
        let u32_at = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let card = SegmentCard {
            kind,
            pid: u32_at(8),
            uid: u32_at(12),
            fd: u32_at(16) as i32,
            len: u64_at(24),
            cookie: u64_at(32),
        };
        if card.pid == 0 || card.pid > i32::MAX as u32 {
            return Err(SegmentError::BadCard("invalid pid"));
        }
        match card.kind {
            BackingKind::Memfd if card.fd < 0 => return Err(SegmentError::BadCard("invalid fd")),
            BackingKind::ShmFile if card.fd != -1 => {
                return Err(SegmentError::BadCard("fd given for a shm file"))
            }
            _ => {}
        }
        total_len(card.len).map_err(|_| SegmentError::BadCard("invalid length"))?;
        Ok(card)
    }

    /// The path a peer opens to attach this segment.
    pub fn path(&self) -> PathBuf {
        match self.kind {
            BackingKind::Memfd => PathBuf::from(format!("/proc/{}/fd/{}", self.pid, self.fd)),
            BackingKind::ShmFile => shm_path(self.uid, self.pid, self.cookie),
        }
    }
}

/// `/dev/shm/oxmpi-<uid>-<pid>-<cookie>`.
fn shm_path(uid: u32, pid: u32, cookie: u64) -> PathBuf {
    PathBuf::from(format!("{SHM_DIR}/{SHM_PREFIX}{uid}-{pid}-{cookie:016x}"))
}

/// Header plus data length, checked against what `mmap`/`ftruncate` accept.
fn total_len(len: u64) -> Result<usize, SegmentError> {
    if len == 0 {
        return Err(SegmentError::Length(len));
    }
    let total = len
        .checked_add(DATA_OFFSET as u64)
        .filter(|&t| t <= i64::MAX as u64)
        .ok_or(SegmentError::Length(len))?;
    usize::try_from(total).map_err(|_| SegmentError::Length(len))
}

/// A random 64-bit cookie from the kernel, with a weaker fallback that still
/// differs between processes and calls.
fn random_cookie() -> u64 {
    let mut bytes = [0u8; 8];
    let from_kernel = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    let cookie = if from_kernel {
        u64::from_le_bytes(bytes)
    } else {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(t.as_nanos());
        }
        h.finish()
    };
    // Zero is reserved so that a zero-filled object never matches.
    cookie.max(1)
}

/// One `MAP_SHARED` read/write mapping, unmapped on drop.
#[derive(Debug)]
struct RawMap {
    base: NonNull<u8>,
    total: usize,
}

impl RawMap {
    /// Maps `total` bytes of `fd` shared, read/write.
    fn new(fd: impl AsFd, total: usize) -> Result<RawMap, Errno> {
        // SAFETY: a fresh mapping at an address the kernel chooses (null hint,
        // no MAP_FIXED) cannot alias any existing Rust object; the fd is valid
        // for the duration of the call.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                total,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        let base = NonNull::new(ptr.cast::<u8>()).ok_or(Errno::NOMEM)?;
        Ok(RawMap { base, total })
    }

    /// The header words, read with volatile loads (another process may own
    /// the memory): magic, cookie, length, version.
    fn read_header(&self) -> (u64, u64, u64, u32) {
        let words = self.base.as_ptr().cast::<u64>();
        // SAFETY: the mapping is at least DATA_OFFSET (4096) bytes long and
        // page aligned, so the first 32 bytes are mapped and 8-byte aligned;
        // volatile reads of plain integers are valid for any bit pattern.
        unsafe {
            (
                words.read_volatile(),
                words.add(1).read_volatile(),
                words.add(2).read_volatile(),
                (words.add(3).read_volatile() & 0xffff_ffff) as u32,
            )
        }
    }

    /// Writes the header; done by the owner before its card is published.
    fn write_header(&self, cookie: u64, len: u64) {
        let words = self.base.as_ptr().cast::<u64>();
        // SAFETY: as in `read_header`; the segment was just created by this
        // process and no peer knows it yet, so nothing else writes there.
        unsafe {
            words.add(1).write_volatile(cookie);
            words.add(2).write_volatile(len);
            words.add(3).write_volatile(u64::from(HEADER_VERSION));
            // The magic last: a header with the magic is complete.
            words.write_volatile(HEADER_MAGIC);
        }
    }

    /// The owner's state word in the header page.
    fn state(&self) -> &AtomicU64 {
        // SAFETY: STATE_OFFSET + 8 <= DATA_OFFSET <= total, so the word is
        // mapped for as long as `self` lives, and 8-byte aligned (the mapping
        // is page aligned); AtomicU64 accepts any bit pattern, and nobody
        // accesses this word except atomically through this method.
        unsafe { &*self.base.as_ptr().add(STATE_OFFSET).cast::<AtomicU64>() }
    }

    /// `count` words of the data region from byte `offset`, as atomics.
    fn words(&self, offset: usize, count: usize) -> Option<&[AtomicU64]> {
        let len = count.checked_mul(8)?;
        let end = offset.checked_add(len)?;
        if offset % 8 != 0 || end > self.total - DATA_OFFSET {
            return None;
        }
        // SAFETY: in bounds of the data region (checked above), 8-byte
        // aligned (the data region is page aligned, `offset` a multiple of
        // 8), mapped for as long as `self` lives; AtomicU64 accepts any bit
        // pattern. Shared memory may change under us at any time: atomics
        // are the right view of it. The callers' contract (module doc) is to
        // use these words only atomically.
        Some(unsafe {
            std::slice::from_raw_parts(self.data().as_ptr().add(offset).cast::<AtomicU64>(), count)
        })
    }

    fn data(&self) -> NonNull<u8> {
        // SAFETY: `total` > DATA_OFFSET (checked by `total_len`), so the data
        // pointer is inside the mapping and non-null.
        unsafe { NonNull::new_unchecked(self.base.as_ptr().add(DATA_OFFSET)) }
    }
}

impl Drop for RawMap {
    fn drop(&mut self) {
        // SAFETY: `base`/`total` describe a mapping created by `RawMap::new`
        // and unmapped only here; the owning Segment/Mapping is being dropped,
        // and pointers derived from `as_ptr` are documented to die with it.
        let result = unsafe { rustix::mm::munmap(self.base.as_ptr().cast::<c_void>(), self.total) };
        if let Err(errno) = result {
            tracing::warn!(%errno, "munmap of a shared segment failed");
        }
    }
}

/// What keeps the owner's segment reachable by name, if anything.
#[derive(Debug)]
enum Backing {
    /// The memfd, kept open so that peers can open `/proc/<pid>/fd/<fd>`.
    Memfd(#[allow(dead_code)] OwnedFd),
    /// The `/dev/shm` file and whether it is still linked.
    ShmFile { path: PathBuf, linked: bool },
}

/// The segment a rank owns.
///
/// Memory is unmapped when the segment is dropped (and a shm file unlinked
/// if [`Segment::unlink_name`] was not called); peers' mappings stay valid.
#[derive(Debug)]
pub struct Segment {
    map: RawMap,
    card: SegmentCard,
    backing: Backing,
}

// SAFETY: a Segment is an owned mapping plus an fd or a path; nothing in it is
// tied to a thread. Accesses through `as_ptr` are the caller's to synchronise.
unsafe impl Send for Segment {}
// SAFETY: every `&self` method only reads immutable fields.
unsafe impl Sync for Segment {}

impl Segment {
    /// Creates this rank's segment with a zeroed data region of `len` bytes.
    pub fn create(len: usize, kind: SegmentKind) -> Result<Segment, SegmentError> {
        let total = total_len(len as u64)?;
        let cookie = random_cookie();
        match kind {
            SegmentKind::Memfd => Segment::create_memfd(len as u64, total, cookie),
            SegmentKind::ShmFile => Segment::create_shm_file(len as u64, total, cookie),
            SegmentKind::Auto => match Segment::create_memfd(len as u64, total, cookie) {
                Ok(segment) => match segment.check_proc_reachable() {
                    Ok(()) => Ok(segment),
                    Err(err) => {
                        tracing::debug!(%err, "memfd segment not reachable through /proc, using /dev/shm");
                        drop(segment);
                        Segment::create_shm_file(len as u64, total, cookie)
                    }
                },
                Err(err) => {
                    tracing::debug!(%err, "memfd segment unavailable, using /dev/shm");
                    Segment::create_shm_file(len as u64, total, cookie)
                }
            },
        }
    }

    fn create_memfd(len: u64, total: usize, cookie: u64) -> Result<Segment, SegmentError> {
        let pid = std::process::id();
        let name = format!("oxmpi-seg-{pid}-{cookie:016x}");
        let fd = rustix::fs::memfd_create(name.as_str(), rustix::fs::MemfdFlags::CLOEXEC).map_err(
            |errno| SegmentError::Create {
                call: "memfd_create",
                errno,
            },
        )?;
        rustix::fs::ftruncate(&fd, total as u64).map_err(|errno| SegmentError::Create {
            call: "ftruncate",
            errno,
        })?;
        let map = RawMap::new(&fd, total).map_err(|errno| SegmentError::Create {
            call: "mmap",
            errno,
        })?;
        map.write_header(cookie, len);
        let card = SegmentCard {
            kind: BackingKind::Memfd,
            pid,
            uid: rustix::process::getuid().as_raw(),
            fd: fd.as_raw_fd(),
            len,
            cookie,
        };
        Ok(Segment {
            map,
            card,
            backing: Backing::Memfd(fd),
        })
    }

    fn create_shm_file(len: u64, total: usize, cookie: u64) -> Result<Segment, SegmentError> {
        let pid = std::process::id();
        let uid = rustix::process::getuid().as_raw();
        let path = shm_path(uid, pid, cookie);
        let fd = rustix::fs::open(
            &path,
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|errno| SegmentError::Open {
            path: path.clone(),
            errno,
        })?;
        // The pages are allocated now: a file in a full tmpfs would
        // otherwise be mapped all the same, and the first write to a page
        // it cannot get would kill the rank with SIGBUS.
        let mapped = rustix::fs::ftruncate(&fd, total as u64)
            .map_err(|errno| ("ftruncate", errno))
            .and_then(|()| {
                match rustix::fs::fallocate(
                    &fd,
                    rustix::fs::FallocateFlags::empty(),
                    0,
                    total as u64,
                ) {
                    // A filesystem without fallocate: as before.
                    Err(Errno::OPNOTSUPP) | Ok(()) => Ok(()),
                    Err(errno) => Err(("fallocate", errno)),
                }
            })
            .and_then(|()| RawMap::new(&fd, total).map_err(|errno| ("mmap", errno)));
        let map = match mapped {
            Ok(map) => map,
            Err((call, errno)) => {
                let _ = rustix::fs::unlink(&path);
                return Err(SegmentError::Io { call, path, errno });
            }
        };
        drop(fd);
        map.write_header(cookie, len);
        let card = SegmentCard {
            kind: BackingKind::ShmFile,
            pid,
            uid,
            fd: -1,
            len,
            cookie,
        };
        Ok(Segment {
            map,
            card,
            backing: Backing::ShmFile { path, linked: true },
        })
    }

    /// For [`SegmentKind::Auto`]: can a peer open our memfd through `/proc`?
    /// Opens `/proc/<pid>/fd/<fd>` (not `/proc/self`) the way a peer would.
    fn check_proc_reachable(&self) -> Result<(), SegmentError> {
        let path = self.card.path();
        let fd = open_for_attach(&path)?;
        let stat = rustix::fs::fstat(&fd).map_err(|errno| SegmentError::Io {
            call: "fstat",
            path,
            errno,
        })?;
        debug_assert_eq!(stat.st_size as u64, self.card.len + DATA_OFFSET as u64);
        Ok(())
    }

    /// The card to publish through the modex.
    pub fn card(&self) -> SegmentCard {
        self.card
    }

    /// Start of the zeroed data region (4096-byte aligned).
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.map.data()
    }

    /// Length of the data region.
    pub fn len(&self) -> usize {
        self.map.total - DATA_OFFSET
    }

    /// Always false: a segment has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// `count` 8-byte words of the data region from byte `offset` (a
    /// multiple of 8), to be used only atomically (e.g. a table that peers
    /// read through [`Mapping::words`]); `None` when out of bounds.
    pub fn words(&self, offset: usize, count: usize) -> Option<&[AtomicU64]> {
        self.map.words(offset, count)
    }

    /// Removes the `/dev/shm` name of a [`BackingKind::ShmFile`] segment; call
    /// it once every peer that needs the segment has attached (after a
    /// fence). Idempotent; a no-op for a memfd.
    pub fn unlink_name(&mut self) -> Result<(), SegmentError> {
        if let Backing::ShmFile { path, linked } = &mut self.backing {
            if *linked {
                *linked = false;
                match rustix::fs::unlink(path.as_path()) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(errno) => {
                        return Err(SegmentError::Unlink {
                            path: path.clone(),
                            errno,
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Maps the segment a peer's card describes, checking that it is the
    /// announced object (regular file, size, header magic, cookie, length).
    pub fn attach(card: &SegmentCard) -> Result<Mapping, SegmentError> {
        let path = card.path();
        let total = total_len(card.len)?;
        let fd = open_for_attach(&path)?;
        let stat = rustix::fs::fstat(&fd).map_err(|errno| SegmentError::Io {
            call: "fstat",
            path: path.clone(),
            errno,
        })?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(SegmentError::NotRegularFile { path });
        }
        let found = u64::try_from(stat.st_size).unwrap_or(0);
        if found != total as u64 {
            return Err(SegmentError::Size {
                path,
                expected: total as u64,
                found,
            });
        }
        let map = RawMap::new(&fd, total).map_err(|errno| SegmentError::Io {
            call: "mmap",
            path: path.clone(),
            errno,
        })?;
        drop(fd);
        let (magic, cookie, len, version) = map.read_header();
        let reason = if magic != HEADER_MAGIC {
            Some("bad magic")
        } else if version != HEADER_VERSION {
            Some("unknown header version")
        } else if cookie != card.cookie {
            Some("cookie differs from the card's")
        } else if len != card.len {
            Some("length differs from the card's")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(SegmentError::Header { path, reason });
        }
        Ok(Mapping { map, card: *card })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // Peers still mapping the segment learn that its owner closed it.
        self.map.state().store(STATE_CLOSED, Ordering::Release);
        if let Err(err) = self.unlink_name() {
            tracing::warn!(%err, "dropping a shared segment");
        }
    }
}

/// Opens the object of a card read/write. `O_NONBLOCK` so that a reused fd
/// number that now names a FIFO cannot block us.
fn open_for_attach(path: &Path) -> Result<OwnedFd, SegmentError> {
    rustix::fs::open(
        path,
        OFlags::RDWR | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|errno| SegmentError::Open {
        path: path.to_path_buf(),
        errno,
    })
}

/// A peer's segment mapped into this process; unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    map: RawMap,
    card: SegmentCard,
}

// SAFETY: as for Segment: an owned mapping, not tied to a thread.
unsafe impl Send for Mapping {}
// SAFETY: every `&self` method only reads immutable fields.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Start of the peer's data region (4096-byte aligned).
    pub fn as_ptr(&self) -> NonNull<u8> {
        self.map.data()
    }

    /// Length of the data region.
    pub fn len(&self) -> usize {
        self.map.total - DATA_OFFSET
    }

    /// Always false: a segment has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The card this mapping was attached from.
    pub fn card(&self) -> SegmentCard {
        self.card
    }

    /// Whether the owner has dropped its segment (see the module doc). One
    /// atomic load, no system call.
    pub fn owner_closed(&self) -> bool {
        self.map.state().load(Ordering::Acquire) == STATE_CLOSED
    }

    /// As [`Segment::words`], in the peer's segment.
    pub fn words(&self, offset: usize, count: usize) -> Option<&[AtomicU64]> {
        self.map.words(offset, count)
    }
}

/// Removes `/dev/shm/oxmpi-<uid>-<pid>-*` files of this user whose owner
/// process no longer exists (the fallback's residual leak, see the module
/// doc). Returns how many were removed. A file whose pid is alive (possibly
/// reused by another process) is kept.
pub fn reap_stale_shm_files() -> usize {
    let uid = rustix::process::getuid().as_raw();
    let prefix = format!("{SHM_PREFIX}{uid}-");
    let Ok(entries) = std::fs::read_dir(SHM_DIR) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix.as_str())) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let Some(pid) = rustix::process::Pid::from_raw(pid) else {
            continue;
        };
        if rustix::process::test_kill_process(pid) == Err(Errno::SRCH)
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}
