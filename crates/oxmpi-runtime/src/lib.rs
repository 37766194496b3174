//! The oxmpi runtime: everything a rank needs before it can communicate.
//!
//! * [`mca`]: the MCA-style parameter registry every component registers into,
//!   with its sources (command line > environment > parameter files > default).
//! * [`pmi`]: the PMI-1 / PMI-2 wire protocols (client and a sans-IO server core
//!   shared with `oxmpirun`), singleton mode, and the modex built on top.
//! * [`topology`]: which ranks share this node, and whether this node is
//!   oversubscribed (so waits must yield).
//! * [`log`]: `tracing` set up from `OXMPI_LOG`; silent by default.
//! * [`limits`]: the descriptor limit, raised at start-up.
//!
//! Layer rule: this crate depends on no other oxmpi crate.
#![deny(unsafe_code)]

pub mod limits;
pub mod log;
pub mod mca;
pub mod pmi;
pub mod topology;
