//! Shared memory between the ranks of one node.
//!
//! * [`segment`]: a shared segment that cannot leak, attached by peers.
//! * [`ring`]: single-producer single-consumer rings of variable-length
//!   records in shared memory, and the per-receiver inbox of rings.
//! * The sm BTL ([`SmBtl`]) built on them, with CMA single copy, in modules
//!   by concern (their docs hold the formats and contracts; their items are
//!   the BTL's own):
//!   * [`config`]: limits, ring sizes and the `btl_sm_*` parameters;
//!   * [`card`]: the business card;
//!   * [`attach`]: creating this rank's segment and attaching a peer's (the
//!     segment's layout); the BTL's only `unsafe` code;
//!   * [`peer`]: binding a peer on first use, finding out it is gone;
//!   * [`regs`]: registrations, remote keys, the shared registration table;
//!   * [`copy`]: put and get by copy-in/copy-out when CMA is not available;
//!   * `doorbell`: the inbox's bell as the BTL's
//!     [`Doorbell`](crate::btl::Doorbell), which a waiting rank sleeps on;
//!   * [`btl`]: the [`Btl`](crate::btl::Btl) implementation.

#[cfg(not(loom))]
pub mod attach;
#[cfg(not(loom))]
pub mod btl;
#[cfg(not(loom))]
pub mod card;
#[cfg(not(loom))]
pub mod config;
#[cfg(not(loom))]
pub mod copy;
#[cfg(not(loom))]
mod doorbell;
#[cfg(not(loom))]
pub mod peer;
#[cfg(not(loom))]
pub mod regs;
pub mod ring;
pub mod segment;
#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(not(loom))]
pub use btl::{SmBtl, SmConfig};
