//! The loom shim: under `--cfg loom` the atomics are loom's, so the model
//! checker sees every access the ring protocol makes; otherwise std's.
//! (Shared memory itself is the other half of the shim: `mem`.)

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicU8, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
