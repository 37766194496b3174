//! MCA-style run-time parameters (Open MPI's "MCA variables").
//!
//! Every component registers its tunables into a [`Registry`] under the name
//! `<framework>_<component>_<param>` (or `<framework>_<param>` for
//! framework-wide ones, whose component is [`BASE`]), with a type
//! ([`ParamType`]: bool, int, size, string, list, enum, selection), a typed
//! default, a level 1..=9 and a help text. Frameworks register their
//! components, which creates the selection parameter named just
//! `<framework>` (`btl=self,sm,tcp` or `btl=^tcp`).
//!
//! Values come from, highest precedence first:
//! 1. the command line, `oxmpirun --mca name value`, which reaches ranks
//!    through [`CLI_ENV`] (see [`encode_cli`]);
//! 2. the environment, `OXMPI_MCA_<name>` (names are case-sensitive,
//!    lowercase);
//! 3. parameter files: `$HOME/.oxmpi/mca-params.conf`, then
//!    `<dir of the executable>/../etc/oxmpi-mca-params.conf`, or exactly the
//!    colon-separated list in [`PARAM_FILES_ENV`] if set;
//! 4. the registered default.
//!
//! Contract: a bad value (unparsable, unknown component in a selection,
//! mixed include/exclude) or an unknown name on the command line makes
//! [`Registry::apply`] fail with a [`McaError`] naming the parameter and the
//! source; nothing silently falls back to a default. Unknown names in the
//! environment or a file are only warned about.
//!
//! ```
//! use oxmpi_runtime::mca::{self, Registry, Sources};
//! let mut reg = Registry::new();
//! mca::register_runtime_params(&mut reg).unwrap();
//! reg.apply(&Sources::new().with_env("mpi_leave_pinned", "no")).unwrap();
//! assert!(!reg.get_bool(mca::MPI_LEAVE_PINNED).unwrap());
//! assert_eq!(reg.get_enum(mca::PMI_VERSION).unwrap(), "1");
//! ```

mod error;
mod registry;
mod source;
mod value;

pub use error::McaError;
pub use registry::{Framework, Param, ParamSpec, Registry, BASE, LEVELS};
pub use source::{
    decode_cli, encode_cli, parse_param_file, Assignment, ParamFile, Source, Sources, CLI_ENV,
    ENV_PREFIX, HOME_PARAM_FILE, INSTALL_PARAM_FILE, PARAM_FILES_ENV,
};
pub use value::{
    parse_bool, parse_enum, parse_int, parse_list, parse_selection, parse_size, ParamType, Value,
};

/// `pmi_version` (enum `1`/`2`): the PMI wire protocol the client speaks.
pub const PMI_VERSION: &str = "pmi_version";
/// `pmi_foreign_launcher` (enum `error`/`singleton`): what a process started
/// without a PMI we speak does when its environment shows a launcher of
/// several processes (`srun --mpi=pmix`, `srun --mpi=none`, Open MPI's
/// `mpirun`): stop `MPI_Init` with a message, or run as a singleton anyway.
pub const PMI_FOREIGN_LAUNCHER: &str = "pmi_foreign_launcher";
/// `mpi_yield_when_idle` (enum `auto`/`yes`/`no`): whether blocking waits
/// yield the CPU (`auto`: when the node is oversubscribed).
pub const MPI_YIELD_WHEN_IDLE: &str = "mpi_yield_when_idle";
/// `mpi_leave_pinned` (bool): keep registered memory registered.
pub const MPI_LEAVE_PINNED: &str = "mpi_leave_pinned";
/// `mpi_async_progress` (bool): a thread progresses communication while
/// requests are active, so they advance while the program computes.
pub const MPI_ASYNC_PROGRESS: &str = "mpi_async_progress";

/// Registers the runtime's own parameters and the frameworks that exist or
/// are planned (so their selection lists validate):
///
/// * `pmi_version` — enum `1`, `2`; default `1`;
/// * `pmi_foreign_launcher` — enum `error`, `singleton`; default `error`;
/// * `mpi_yield_when_idle` — enum `auto`, `yes`, `no`; default `auto`;
/// * `mpi_leave_pinned` — bool; default `true`;
/// * `mpi_async_progress` — bool; default `false`;
/// * framework `btl` with components `self`, `sm`, `tcp`;
/// * framework `pml` with component `ob1`.
///
/// Fails only if some of these names are already registered.
pub fn register_runtime_params(reg: &mut Registry) -> Result<(), McaError> {
    reg.register(
        ParamSpec::enumeration("pmi", BASE, "version", &["1", "2"], "1")
            .level(4)
            .help("PMI wire protocol version the client speaks to the launcher (1 or 2)"),
    )?;
    reg.register(
        ParamSpec::enumeration(
            "pmi",
            BASE,
            "foreign_launcher",
            &["error", "singleton"],
            "error",
        )
        .level(4)
        .help(
            "When no PMI server oxmpi speaks is given but the environment shows a launcher \
             of several processes (srun --mpi=pmix or --mpi=none, Open MPI's mpirun): \
             error (MPI_Init fails, naming the launcher to use) or singleton (each \
             process runs alone as rank 0 of 1)",
        ),
    )?;
    reg.register(
        ParamSpec::enumeration(
            "mpi",
            BASE,
            "yield_when_idle",
            &["auto", "yes", "no"],
            "auto",
        )
        .level(3)
        .help(
            "Whether blocking waits yield the CPU: yes, no, or auto \
                 (yield when the node is oversubscribed)",
        ),
    )?;
    reg.register(
        ParamSpec::bool("mpi", BASE, "leave_pinned", true)
            .level(3)
            .help("Keep memory registered with the network after a transfer, for reuse"),
    )?;
    reg.register(
        ParamSpec::bool("mpi", BASE, "async_progress", false)
            .level(3)
            .help(
                "Run a progress thread that advances communication while requests are \
                 active (it yields between passes and sleeps when nothing is active)",
            ),
    )?;
    reg.register_framework(
        "btl",
        &["self", "sm", "tcp"],
        "Byte transfer layers to use, e.g. \"self,sm,tcp\" (in this order) \
         or \"^tcp\" (all but tcp); empty means all",
    )?;
    reg.register_framework(
        "pml",
        &["ob1", "cm"],
        "Point-to-point messaging layer to use: ob1 (protocols over the BTLs) or cm \
         (whole messages handed to an MTL, which matches them); empty means either, and \
         cm is then chosen only when an MTL opens with a usable provider",
    )?;
    reg.register_framework(
        "mtl",
        &["ofi"],
        "Matching transport layers the PML cm may use (ofi: libfabric's tagged API); \
         empty means all",
    )?;
    Ok(())
}
