//! `oxmpirun` and `oxmpi-info`: the parts of oxmpi that run outside the ranks.
//!
//! * [`args`]: the launcher's command line (`-np`, `--mca`, `-x`, ...).
//! * [`job`]: one job: spawn ranks, serve PMI (the sans-IO server core lives in
//!   `oxmpi_runtime::pmi::server`), forward stdio line by line, end the job on
//!   the first failure, leave nothing behind.
//! * [`params`]: every component's parameters; `--mca` is checked here.
//! * [`info`]: the `oxmpi-info` tool listing every parameter.
//! * `sys`: the only `unsafe` code (what a child does between fork and exec).
//!
//! Layer rule: this crate sits on top; nothing depends on it.
#![deny(unsafe_code)]

pub mod args;
pub mod info;
pub mod job;
pub mod params;
mod sys;

use std::process::ExitCode;

/// The whole `oxmpirun` program (also `mpirun` and `mpiexec`): parse the
/// command line, check `--mca` parameters, run the job, return its status.
pub fn launcher_main() -> ExitCode {
    oxmpi_runtime::log::init();
    // A few descriptors per rank: the soft limit up to the hard one (the
    // ranks inherit it).
    oxmpi_runtime::limits::raise_fd_limit();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let code = match args::parse(&argv) {
        Ok(args::Command::Help) => {
            print!("{}", args::HELP);
            0
        }
        Ok(args::Command::Version) => {
            println!("oxmpirun (oxmpi) {}", env!("CARGO_PKG_VERSION"));
            0
        }
        Ok(args::Command::Run(a)) => match params::child_env(&a.mca) {
            Ok(vars) => job::run(&a, &job::JobEnv { vars }),
            Err(e) => {
                eprintln!("oxmpirun: {e}");
                job::EXIT_LAUNCH_ERROR
            }
        },
        Err(e) => {
            eprintln!("oxmpirun: {e}");
            job::EXIT_LAUNCH_ERROR
        }
    };
    // Shared-memory files of ranks that died before unlinking them (the
    // `/dev/shm` fallback's window; memfds need nothing): their owners
    // are gone now.
    let reaped = oxmpi_btl::sm::segment::reap_stale_shm_files();
    if reaped > 0 {
        tracing::debug!("removed {reaped} stale /dev/shm segment(s)");
    }
    ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1))
}
