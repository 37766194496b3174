//! oxmpi request arbiter: MPI tag matching, generic over transports.
//!
//! Contract: [`Engine`] is the one place where incoming message envelopes
//! (context id, source rank, tag) meet posted receives. It keeps a
//! posted-receive queue and an unexpected-message queue per context, applies
//! MPI's ordering and wildcard rules, delivers arrivals in per-(context,
//! source) sequence order (parking out-of-order ones), and counts unexpected
//! bytes and messages so the PML can bound them. It does no I/O, holds no
//! global state, and does not allocate on the steady-state path.
//! [`SendSequencer`] is the matching send-side sequence counter.
//!
//! ```
//! use oxmpi_match::{Arrival, Engine, MatchEvent, PostOutcome, SendSequencer, Source, Tag};
//!
//! let mut tx = SendSequencer::new();
//! let mut rx: Engine<u32, &str> = Engine::new();
//! tx.add_context(0, 2).unwrap();
//! rx.add_context(0, 2).unwrap();
//!
//! // A receive posted before its message arrives...
//! let PostOutcome::Posted(_handle) = rx.post_recv(0, Source::Any, Tag::Value(5), 42).unwrap()
//! else { unreachable!() };
//! // ...is matched by the arrival (sequence numbers come from the sender).
//! let seq = tx.next_seq(0, 1).unwrap();
//! assert_eq!(rx.handle_arrival(0, 1, 5, seq, 8, "frag").unwrap(), Arrival::Delivered { events: 1 });
//! let Some(MatchEvent::Matched(m)) = rx.poll_matched() else { unreachable!() };
//! assert_eq!((m.recv, m.msg, m.envelope.source), (42, "frag", 1));
//! ```
//!
//! Seeds: MPICH2's request arbiter, Open MPI ob1 matching, UCX
//! `src/ucp/tag/tag_match.h`.
#![forbid(unsafe_code)]

mod ctxmap;
mod engine;
mod hash;
mod seq;
mod slab;
mod types;

pub use engine::Engine;
pub use seq::SendSequencer;
pub use types::{
    Arrival, EarlyArrival, Envelope, Match, MatchError, MatchEvent, MessageHandle, MessageInfo,
    PostOutcome, ProbeOutcome, RecvHandle, RemovedContext, Source, Tag, UnexpectedStats,
};
