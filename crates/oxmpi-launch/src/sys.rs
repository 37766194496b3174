//! The launcher's only `unsafe` code: what a rank's process does between
//! `fork` and `exec`, and turning a descriptor number into a borrowed fd.
//!
//! The closure given to `pre_exec` runs in the forked child of a possibly
//! multi-threaded parent, so it must be async-signal-safe: it only makes raw
//! system calls through rustix, allocates nothing and takes no lock.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use rustix::io::FdFlags;
use rustix::process::{Pid, Signal};
use rustix::thread::CpuSet;

/// What a rank's process sets up for itself before `exec`.
#[derive(Clone, Copy, Debug)]
pub struct ChildSetup {
    /// The launcher's pid: if the child finds another parent (the launcher
    /// died between `fork` and `prctl`), it gives up instead of running as
    /// an orphan.
    pub launcher: Pid,
    /// A descriptor the child must inherit across `exec` (its PMI socket).
    pub keep_fd: Option<RawFd>,
    /// The CPU to bind to, if any.
    pub cpu: Option<usize>,
}

/// Installs the child-side setup on `cmd`: die with the launcher
/// (`PR_SET_PDEATHSIG`), keep the PMI descriptor open across `exec`, and
/// bind to a CPU.
pub fn configure_child(cmd: &mut Command, setup: ChildSetup) {
    let child_setup = move || -> io::Result<()> {
        rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
        if rustix::process::getppid() != Some(setup.launcher) {
            // An errno, not a message: formatting one would allocate here.
            return Err(rustix::io::Errno::SRCH.into());
        }
        if let Some(fd) = setup.keep_fd {
            // SAFETY: `fd` is the child end of a socketpair that the launcher
            // keeps open until after `spawn` returns, so it is a valid open
            // descriptor in this (forked) process for the whole borrow.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            rustix::io::fcntl_setfd(fd, FdFlags::empty())?;
        }
        if let Some(cpu) = setup.cpu {
            let mut set = CpuSet::new();
            set.set(cpu);
            rustix::thread::sched_setaffinity(None, &set)?;
        }
        Ok(())
    };
    // SAFETY: `child_setup` only performs async-signal-safe raw system calls
    // (prctl, getppid, fcntl, sched_setaffinity) on values copied into the
    // closure; it allocates nothing and touches no lock or shared state, as
    // `pre_exec` requires.
    unsafe {
        cmd.pre_exec(child_setup);
    }
}
