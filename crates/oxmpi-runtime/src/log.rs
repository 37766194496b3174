//! Logging for every oxmpi crate, through `tracing`.
//!
//! Controlled by `OXMPI_LOG` in `tracing_subscriber::EnvFilter` syntax
//! (for example `OXMPI_LOG=debug` or `OXMPI_LOG=oxmpi_btl=trace`). When it is
//! unset only warnings and errors are printed, so a healthy run prints
//! nothing: programs that compare their output must not see a stray line.
//! Log lines go to standard error, never standard output.

use std::sync::Once;

/// The environment variable that sets the log filter.
pub const LOG_ENV: &str = "OXMPI_LOG";

static INIT: Once = Once::new();

/// Installs the global `tracing` subscriber once per process.
///
/// Later calls do nothing. If the application already installed its own
/// subscriber, that one is kept.
///
/// ```
/// oxmpi_runtime::log::init();
/// tracing::debug!("not printed unless OXMPI_LOG asks for it");
/// ```
pub fn init() {
    INIT.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_env(LOG_ENV)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_target(true)
            .without_time()
            .try_init();
    });
}
