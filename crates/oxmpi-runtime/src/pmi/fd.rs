//! Turning the inherited `PMI_FD` number into a socket we own.
//!
//! Contract: [`adopt_inherited`] never takes ownership of the inherited
//! descriptor itself; it duplicates it (close-on-exec) and returns the
//! duplicate. So calling it twice, or on a number some other part of the
//! process owns, can never lead to a double close. The original is marked
//! close-on-exec so programs the rank starts do not inherit the PMI channel.
//! This is the only module of the crate that uses `unsafe`.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};

/// Duplicates the inherited descriptor `fd` and returns the duplicate.
///
/// Fails with `EBADF` if `fd` is not open.
pub(crate) fn adopt_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(
            rustix::io::Errno::BADF.raw_os_error(),
        ));
    }
    // SAFETY: `borrow_raw` requires the descriptor to stay open while the
    // borrow lives. The borrow lives only for the two fcntl calls below,
    // nothing in this function closes it, and if the number is not open at
    // all the kernel answers EBADF: the calls touch no memory either way.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let dup = rustix::io::fcntl_dupfd_cloexec(borrowed, 3)?;
    // Best effort: a failure here only means children could inherit it.
    let _ = rustix::io::fcntl_setfd(borrowed, rustix::io::FdFlags::CLOEXEC);
    Ok(dup)
}
