//! oxmpi's matching transport layers (seed 001's MTL framework, seed
//! 004's OFI MTL): the contract a transport that matches MPI messages
//! itself implements ([`mtl::Mtl`]), the 64-bit network tag layouts of
//! seed 004 ([`tag`]), a simulated MTL ([`sim`]) and the conformance suite
//! every MTL passes ([`conformance`]).
//!
//! The `ofi` MTL over libfabric ([`ofi`], libfabric loaded at run time)
//! implements the contract on real providers; the PML `cm` that maps MPI
//! requests onto an MTL is issue 36's next step.
#![deny(unsafe_code)]

pub mod conformance;
pub mod mtl;
pub mod ofi;
pub mod sim;
pub mod tag;

pub use mtl::{
    Event, Limits, MessageId, Mtl, MtlError, MtlSink, Outcome, Posted, RecvInfo, SendMode, Source,
    TagSel, Token,
};
pub use tag::{Layout, Proto, TagError, TagMode};
