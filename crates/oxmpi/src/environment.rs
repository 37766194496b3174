//! The environment, as rsmpi's `mpi::environment` has it: the library's
//! version, the processor's name, the clock (`MPI_Get_library_version`,
//! `MPI_Get_processor_name`, `MPI_Get_version`, `MPI_Wtime`,
//! `MPI_Wtick`). None needs MPI to be initialized.

use std::sync::OnceLock;
use std::time::Instant;

/// The version of the MPI standard oxmpi implements (`MPI_Get_version`):
/// its C ABI is the MPI 5.0 standard ABI.
///
/// ```
/// assert_eq!(oxmpi::environment::version(), (5, 0));
/// ```
pub fn version() -> (i32, i32) {
    (5, 0)
}

/// The library's name and version (`MPI_Get_library_version`).
///
/// ```
/// assert!(oxmpi::environment::library_version().starts_with("oxmpi "));
/// ```
pub fn library_version() -> String {
    concat!(
        "oxmpi ",
        env!("CARGO_PKG_VERSION"),
        " (MPI 5.0 standard ABI)"
    )
    .to_string()
}

/// The name of the processor this process runs on
/// (`MPI_Get_processor_name`): the host name (`localhost` if the system
/// does not tell).
///
/// ```
/// assert!(!oxmpi::environment::processor_name().is_empty());
/// ```
pub fn processor_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

fn epoch() -> Instant {
    static T0: OnceLock<Instant> = OnceLock::new();
    *T0.get_or_init(Instant::now)
}

/// Seconds since an arbitrary time in this process's past (`MPI_Wtime`):
/// a monotonic clock, local to the process (`MPI_WTIME_IS_GLOBAL` is
/// false).
///
/// ```
/// let t0 = oxmpi::environment::time();
/// let t1 = oxmpi::environment::time();
/// assert!(t1 >= t0);
/// ```
pub fn time() -> f64 {
    epoch().elapsed().as_secs_f64()
}

/// The resolution of [`time`] in seconds (`MPI_Wtick`).
///
/// ```
/// assert!(oxmpi::environment::time_resolution() > 0.0);
/// ```
pub fn time_resolution() -> f64 {
    1e-9
}
