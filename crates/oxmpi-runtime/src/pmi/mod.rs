//! PMI: how a rank learns its identity and exchanges addresses.
//!
//! * [`wire`]: PMI-1 / PMI-2 encoding, parsing and framing (untrusted input,
//!   never panics).
//! * [`value`]: how arbitrary bytes are stored in PMI values (base64url,
//!   split over several keys when long).
//! * [`client`]: [`Pmi`], the rank side (inherited `PMI_FD`, `PMI_PORT`, or
//!   singleton), PMI-1 or PMI-2 as configured.
//! * [`foreign`]: [`ForeignLauncher`], a launcher of several processes that
//!   gave this one no PMI we speak (PMIx, `srun --mpi=none`, Open MPI's
//!   `mpirun`): an error, not a silent singleton.
//! * [`server`]: [`PmiServer`], a sans-IO server core for `oxmpirun` and tests.
//! * [`modex`]: [`Modex`], per-rank namespaced business cards plus which
//!   ranks share this node.

pub mod client;
mod fd;
pub mod foreign;
pub mod modex;
pub mod server;
pub mod value;
pub mod wire;

pub use client::{Pmi, PmiConfig, PmiEnv, PmiError, PmiVersion};
pub use foreign::{ForeignLauncher, PmixLauncher};
pub use modex::Modex;
pub use server::{ConnId, JobInfo, PmiServer, ServerEvent};
