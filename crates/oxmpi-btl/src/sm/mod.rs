//! Shared memory between the ranks of one node.
//!
//! * [`segment`]: a shared segment that cannot leak, attached by peers.
//! * [`ring`]: single-producer single-consumer rings of variable-length
//!   records in shared memory, and the per-receiver inbox of rings.
//! * [`btl`]: the sm BTL ([`SmBtl`]) built on them, with CMA single copy.

#[cfg(not(loom))]
pub mod btl;
pub mod ring;
pub mod segment;

#[cfg(not(loom))]
pub use btl::{SmBtl, SmConfig};
