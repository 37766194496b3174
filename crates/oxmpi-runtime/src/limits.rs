//! Process limits a job needs raised.
//!
//! A launcher holds a few descriptors per rank (its PMI socket, two output
//! pipes, a pidfd) and a rank one or more per peer (TCP connections, shared
//! segments, pidfds). Distributions often set a soft limit of 1024 (or
//! less) under a hard limit of many thousands, so, as Open MPI does, the
//! launcher and each rank raise the soft descriptor limit to the hard one
//! at start-up; a limit still too low then fails with an error that names
//! the limit ([`fd_limit_hint`]) instead of a hang.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Raises the soft `RLIMIT_NOFILE` to the hard one (no change when it is
/// there already, or when the kernel refuses). The soft limit in force
/// afterwards (`None`: unlimited).
pub fn raise_fd_limit() -> Option<u64> {
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let raised = Rlimit {
            current: lim.maximum,
            maximum: lim.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!("raising RLIMIT_NOFILE to {:?}: {e}", lim.maximum);
        }
    }
    getrlimit(Resource::Nofile).current
}

/// What to say when descriptors ran out: the limits, and what to change.
///
/// ```
/// let hint = oxmpi_runtime::limits::fd_limit_hint();
/// assert!(hint.contains("ulimit -n"));
/// ```
pub fn fd_limit_hint() -> String {
    let lim = getrlimit(Resource::Nofile);
    let show = |v: Option<u64>| v.map_or_else(|| "unlimited".to_string(), |v| v.to_string());
    format!(
        "out of file descriptors (limit {}, hard limit {}): raise the limit (`ulimit -n`, \
         or the hard limit in /etc/security/limits.conf) or run fewer ranks per node",
        show(lim.current),
        show(lim.maximum)
    )
}

/// `": "` and [`fd_limit_hint`] when the OS error `errno` says descriptors
/// ran out (`EMFILE`, `ENFILE`), else nothing: for the end of a message
/// about a failed system call.
///
/// ```
/// use oxmpi_runtime::limits::errno_fd_hint;
/// assert!(errno_fd_hint(Some(24)).contains("ulimit -n"));
/// assert_eq!(errno_fd_hint(Some(2)), "");
/// ```
pub fn errno_fd_hint(errno: Option<i32>) -> String {
    match errno {
        Some(23 | 24) => format!(": {}", fd_limit_hint()),
        _ => String::new(),
    }
}
