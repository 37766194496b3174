//! oxmpi: MPI point-to-point communication for Rust programs.
//!
//! ```no_run
//! use oxmpi::traits::*;
//!
//! let universe = oxmpi::initialize().unwrap();
//! let world = universe.world();
//! let (rank, size) = (world.rank(), world.size());
//! if rank == 0 {
//!     for peer in 1..size {
//!         let (msg, status) = world.any_process().receive_vec::<u64>().unwrap();
//!         println!("from {}: {:?}", status.source_rank(), msg);
//!     }
//! } else {
//!     world.process_at_rank(0).send(&[rank as u64; 4][..]).unwrap();
//! }
//! ```
//!
//! * [`initialize`] / [`initialize_with_threading`] give a [`Universe`];
//!   dropping its last handle finalizes MPI. Communicators, requests and
//!   messages borrow it, so MPI cannot be used after finalize.
//! * [`Communicator`]: rank, size, dup (also non-blocking), split,
//!   create from groups, intercommunicators (create, merge), groups;
//!   point-to-point through [`Process`] (sends and receives) and
//!   [`AnyProcess`] (`MPI_ANY_SOURCE`).
//! * [`topology`]: `dims_create` and [`CartesianCommunicator`].
//! * [`UserDatatype`], [`View`], [`MutView`]: derived datatypes, and
//!   `#[derive(Equivalence)]` for `#[repr(C)]` structs.
//! * [`request`]: non-blocking operations, scoped ([`request::scope`]) or
//!   owning their buffers ([`request::OwnedRequest`]).
//! * [`framework`]: how a job's transports are opened (the launcher and
//!   `oxmpi-info` use its parameter list).
#![deny(unsafe_code)]

// Lets `#[derive(Equivalence)]` (which names `::oxmpi`) work inside this
// crate's own tests and doctests.
extern crate self as oxmpi;

mod buffer;
pub mod coll_tuned;
mod collective;
mod comm;
mod confine;
mod ctxid;
mod datatype;
pub mod environment;
mod error;
mod failure;
pub mod framework;
mod p2p;
mod progress;
mod raw;
pub mod request;
mod runtime;
mod status;
pub mod topology;
mod universe;

pub use buffer::{Buffer, BufferMut};
pub use coll_tuned::{CollChoice, CollTuned};
pub use comm::{
    AnyProcess, AnyTag, CommRequest, Communicator, Comparison, Group, Message, Peer, Process,
    Source, TagSpec, PROC_NULL, TAG_UB,
};
pub use datatype::{Equivalence, MutView, Order, UserDatatype, View};
pub use error::{Error, ErrorClass, Result};
/// `#[derive(Equivalence)]` for `#[repr(C)]` structs of `Equivalence`
/// fields (see [`Equivalence`]).
///
/// ```
/// use oxmpi::Equivalence;
///
/// #[derive(Equivalence, Clone, Copy, Default)]
/// #[repr(C)]
/// struct Point { x: f64, y: f64 }
///
/// // No padding: sent in place.
/// assert!(Point::IS_DENSE);
/// assert_eq!(Point::equivalent_datatype().size(), 16);
/// ```
pub use oxmpi_derive::Equivalence;
pub use raw::RawBuffer;
pub use runtime::ThreadLevel;
pub use status::Status;
pub use topology::{CartesianCommunicator, CartesianLayout};
pub use universe::{
    initialize, initialize_with_threading, is_finalized, is_initialized, universe, Threading,
    Universe,
};

/// Which attached buffer a buffered send uses (the process's, a
/// communicator's, a session's): see [`Universe::buffer_attach_raw_in`].
pub use oxmpi_pml::BufferScope;
/// Re-exports of the PML's protocol counters.
///
/// ```no_run
/// let universe = oxmpi::initialize().unwrap();
/// universe.world().barrier().unwrap();
/// let c: oxmpi::Counters = universe.counters();
/// let eager = c.eager_sendi + c.eager_prepared + c.eager_copy;
/// println!("{eager} eager, {} rendezvous, {} unexpected", c.rndv, c.unexpected);
/// ```
pub use oxmpi_pml::Counters;
/// The MPI send modes (standard, buffered, synchronous, ready), for the
/// calls that take a mode.
///
/// ```no_run
/// use oxmpi::{traits::*, SendMode};
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let next = world.process_at_rank((world.rank() + 1) % world.size());
/// let mut send = next.send_init_owned_mode(vec![1u8; 64], 2, SendMode::Synchronous).unwrap();
/// send.start().unwrap();
/// world.any_process().receive_vec_with_tag::<u8>(2).unwrap();
/// send.wait().unwrap();
/// ```
pub use oxmpi_pml::SendMode;

/// The traits a program needs in scope: `use oxmpi::traits::*;`.
///
/// ```
/// use oxmpi::traits::*;
///
/// // Equivalence: what travels in messages; Buffer: what a send reads;
/// // TagSpec: what a receive accepts as its tag.
/// assert!(f64::IS_DENSE);
/// assert_eq!(Buffer::count(&vec![0u8; 3]), 3);
/// assert!(5i32.to_match().is_ok());
/// ```
pub mod traits {
    pub use crate::buffer::{Buffer, BufferMut};
    pub use crate::comm::{Source, TagSpec};
    pub use crate::datatype::Equivalence;
}
