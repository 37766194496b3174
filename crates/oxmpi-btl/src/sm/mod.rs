//! Shared memory between the ranks of one node.
//!
//! * [`segment`]: a shared segment that cannot leak, attached by peers.
//! * [`ring`]: single-producer single-consumer rings of variable-length
//!   records in shared memory, and the per-receiver inbox of rings.

pub mod ring;
pub mod segment;
