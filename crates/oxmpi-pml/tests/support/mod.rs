//! Shared by this crate's tests and examples.

pub mod self_rank;
