//! oxmpi byte transfer layers (BTLs): how bytes move between two ranks.
//!
//! * [`btl`]: the contract every BTL implements (seed 001's interface in
//!   Rust form: typed endpoints, tokens and descriptors, capability flags,
//!   limits as MCA parameters, back-pressure as `NoResource`).
//! * [`mem`]: memory regions handed to transfers (the one `unsafe` promise).
//! * [`memwatch`]: the kernel tells us when watched memory is released
//!   (what keeps the PML's registration cache honest).
//! * [`conformance`]: the suite every BTL must pass.
//! * [`self_btl`]: the `self` BTL.
//! * [`sim`]: a simulated BTL (virtual time, seeded faults) for testing the
//!   layers above in one process.
//! * [`sm`]: the shared-memory BTL ([`sm::SmBtl`]) and its building blocks
//!   (segment, lock-free rings), with [`cma`]: single-copy transfers between
//!   processes. The BTL is split by concern (configuration, card, attaching
//!   segments, peers, registrations, copy-in/copy-out, the `Btl` impl).
//! * [`tcp`]: the TCP BTL ([`tcp::TcpBtl`]), split by concern
//!   (configuration, interfaces, wire format, connections, framing, landing
//!   of puts, the `Btl` impl).
//!
//! Layer rule: this crate depends on `oxmpi-runtime` only; it knows nothing
//! of the PML, matching or MPI semantics. `unsafe` is allowed only in the
//! modules that touch shared memory or other processes' memory: [`mem`],
//! [`memwatch`], [`cma`], `sm::segment`, `sm::ring` and `sm::attach`.
//!
//! Beyond unit and integration tests: the ring's loom models
//! (`tests/ring_loom.rs`, under `--cfg loom`, on the ring's own code) and
//! fuzz targets in `fuzz/` (the TCP wire decoders and framing), both run by
//! `scripts/test-all.sh`.
#![deny(unsafe_code)]

pub mod btl;
pub mod cma;
pub mod conformance;
pub mod hook;
pub mod mem;
pub mod memwatch;
pub mod self_btl;
pub mod sim;
pub mod sm;
pub mod tcp;
