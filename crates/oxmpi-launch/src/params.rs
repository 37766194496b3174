//! The registry of every oxmpi component's parameters, as the launcher and
//! `oxmpi-info` see them.
//!
//! `oxmpirun --mca NAME VALUE` is checked here, before any rank starts, so an
//! unknown name or a bad value is one clear error at start-up instead of N
//! identical ones from the ranks. Each crate that adds parameters exports a
//! `register_*` function; [`all_params`] calls every one of them.

use oxmpi_runtime::mca::{self, McaError, Registry, Sources};

/// A registry holding every component's parameters, with defaults (the
/// same list a rank registers at start-up: `oxmpi::framework`).
pub fn all_params() -> Result<Registry, McaError> {
    let mut reg = Registry::new();
    oxmpi::framework::register_params(&mut reg)?;
    Ok(reg)
}

/// Checks the command line's `--mca` pairs together with this process's
/// environment and parameter files, and returns the environment that carries
/// the pairs to the ranks (`OXMPI_MCA_CLI`, always set, so a value inherited
/// from an enclosing job cannot leak in) and the job's fresh secret
/// (`OXMPI_JOB_SECRET`, which the TCP BTL's handshake checks).
pub fn child_env(cli: &[(String, String)]) -> Result<Vec<(String, String)>, String> {
    let mut reg = all_params().map_err(|e| e.to_string())?;
    let mut sources = Sources::from_process().map_err(|e| e.to_string())?;
    for (name, value) in cli {
        sources = sources.with_cli(name.clone(), value.clone());
    }
    reg.apply(&sources).map_err(|e| e.to_string())?;
    let secret = oxmpi::framework::random_secret().map_err(|e| e.to_string())?;
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    Ok(vec![
        (
            mca::CLI_ENV.to_string(),
            mca::encode_cli(cli).map_err(|e| e.to_string())?,
        ),
        (oxmpi::framework::SECRET_ENV.to_string(), hex),
    ])
}
