//! oxmpi's matching transport layers (seed 001's MTL framework, seed
//! 004's OFI MTL): the contract a transport that matches MPI messages
//! itself implements ([`mtl::Mtl`]), the 64-bit network tag layouts of
//! seed 004 ([`tag`]), a simulated MTL ([`sim`]) and the conformance suite
//! every MTL passes ([`conformance`]).
//!
//! The PML `cm` that maps MPI requests onto an MTL, and the `ofi` MTL over
//! libfabric, are issue 36's next steps; nothing in the stack uses this
//! crate yet.
#![deny(unsafe_code)]

pub mod conformance;
pub mod mtl;
pub mod sim;
pub mod tag;

pub use mtl::{
    Event, Limits, MessageId, Mtl, MtlError, MtlSink, Outcome, RecvInfo, SendMode, Source, TagSel,
    Token,
};
pub use tag::{Layout, Proto, TagError, TagMode};
