//! The registry of every oxmpi component's parameters, as the launcher and
//! `oxmpi-info` see them.
//!
//! `oxmpirun --mca NAME VALUE` is checked here, before any rank starts, so an
//! unknown name or a bad value is one clear error at start-up instead of N
//! identical ones from the ranks. Each crate that adds parameters exports a
//! `register_*` function; [`all_params`] calls every one of them.

use oxmpi_runtime::mca::{self, McaError, Registry, Sources};

/// A registry holding every component's parameters, with defaults.
pub fn all_params() -> Result<Registry, McaError> {
    let mut reg = Registry::new();
    mca::register_runtime_params(&mut reg)?;
    Ok(reg)
}

/// Checks the command line's `--mca` pairs together with this process's
/// environment and parameter files, and returns the environment that carries
/// the pairs to the ranks (`OXMPI_MCA_CLI`, always set, so a value inherited
/// from an enclosing job cannot leak in).
pub fn child_env(cli: &[(String, String)]) -> Result<Vec<(String, String)>, McaError> {
    let mut reg = all_params()?;
    let mut sources = Sources::from_process()?;
    for (name, value) in cli {
        sources = sources.with_cli(name.clone(), value.clone());
    }
    reg.apply(&sources)?;
    Ok(vec![(mca::CLI_ENV.to_string(), mca::encode_cli(cli)?)])
}
