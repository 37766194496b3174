//! The MTL contract (seed 001's matching transport layer, seed 004's OFI
//! MTL): a transport that carries whole MPI messages and matches them
//! itself (seed 003's posted-receive and unexpected lists kept below the
//! MPI library). The PML `cm` maps MPI requests onto it; nothing above
//! this trait names a concrete MTL.
//!
//! A request is named by the caller's [`Token`]; each one the MTL accepts
//! ends in exactly one [`Event`] given to the [`MtlSink`] during
//! [`Mtl::progress`] (a call that fails returns the error and produces no
//! event), except a send that completed inside its call
//! ([`Posted::Done`]: a small message the provider took whole, as
//! `fi_tinject` does), which has none. Buffers are contiguous regions ([`MemRegion`]): derived
//! datatypes are packed and unpacked above. A message carries the source's
//! rank in its communicator and the MPI tag; receives match on the
//! communicator id, the source (or any) and the tag (or any), and matching
//! is non-overtaking per sender and communicator.

use oxmpi_btl::mem::MemRegion;

use crate::tag::TagError;

/// The caller's name for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u64);

/// A matched probe's message, for [`Mtl::imrecv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MessageId(pub u64);

/// MPI's send modes. An MTL completes a synchronous send only once the
/// receive has matched; the others complete once the data has left the
/// buffer (a buffered send's copy is the PML's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    /// `MPI_Send`.
    Standard,
    /// `MPI_Bsend` (the PML hands over its copy).
    Buffered,
    /// `MPI_Ssend`.
    Synchronous,
    /// `MPI_Rsend`.
    Ready,
}

/// What became of a send [`Mtl::isend`] accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Posted {
    /// It is under way: its one [`Event`] comes from a later
    /// [`Mtl::progress`].
    Pending,
    /// It completed inside the call: the provider took the bytes (the
    /// buffer may be reused at once) and no event follows. Never for a
    /// synchronous send.
    Done,
}

/// Where a receive takes its message from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `MPI_ANY_SOURCE`.
    Any,
    /// One sender: its rank in the communicator (what the message carries)
    /// and its world rank (the peer the transport addresses).
    Rank {
        /// The rank in the communicator.
        rank: u32,
        /// The world rank.
        peer: u32,
    },
}

/// The tag a receive wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagSel {
    /// `MPI_ANY_TAG`.
    Any,
    /// This tag.
    Value(i32),
}

/// What a receive or probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvInfo {
    /// The sender's rank in the communicator.
    pub source: u32,
    /// The MPI tag.
    pub tag: i32,
    /// The message's length in bytes (more than was delivered when
    /// `truncated`).
    pub len: usize,
    /// The message did not fit the buffer: its first bytes were delivered
    /// (`MPI_ERR_TRUNCATE` above).
    pub truncated: bool,
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A send completed.
    Sent,
    /// A receive completed.
    Received(RecvInfo),
    /// A receive was cancelled ([`Mtl::cancel`]).
    Cancelled,
    /// The request failed.
    Failed(MtlError),
}

/// A completion: the request `token` ended with `outcome`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The request.
    pub token: Token,
    /// How it ended.
    pub outcome: Outcome,
}

/// Receives the completions of [`Mtl::progress`].
pub trait MtlSink {
    /// One request ended.
    fn on_event(&mut self, e: Event);
}

impl MtlSink for Vec<Event> {
    fn on_event(&mut self, e: Event) {
        self.push(e);
    }
}

/// An MTL's errors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MtlError {
    /// A field does not fit the network tag.
    #[error(transparent)]
    Tag(#[from] TagError),
    /// A rank that was never added (or was removed).
    #[error("rank {0} is not a peer of this MTL")]
    UnknownPeer(u32),
    /// A communicator id that was never added (or was deleted).
    #[error("communicator id {0} is not known to this MTL")]
    UnknownComm(u32),
    /// The peer is gone: the request cannot complete.
    #[error("rank {0} is gone")]
    PeerLost(u32),
    /// A business card that does not parse.
    #[error("business card of rank {rank}: {why}")]
    BadCard {
        /// Whose card.
        rank: u32,
        /// What is wrong with it.
        why: String,
    },
    /// A matched-probe handle that names no message.
    #[error("message {0:?} is not a matched message of this MTL")]
    UnknownMessage(MessageId),
    /// The provider failed.
    #[error("{0}")]
    Provider(String),
    /// The MTL was closed ([`Mtl::close`]): it no longer communicates.
    #[error("the MTL is closed (MPI is finalized)")]
    Closed,
}

/// What fits an MTL's messages, once it is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest MPI tag (`MPI_TAG_UB`).
    pub max_tag: i32,
    /// The largest communicator id.
    pub max_cid: u32,
    /// The largest rank in a communicator.
    pub max_rank: u32,
}

/// A matching transport layer.
pub trait Mtl {
    /// The component's name (`ofi`, `sim`).
    fn name(&self) -> &'static str;

    /// What fits.
    fn limits(&self) -> Limits;

    /// This process's address for the modex.
    fn business_card(&self) -> Vec<u8>;

    /// Adds peers by world rank and business card.
    fn add_peers(&mut self, peers: &[(u32, &[u8])]) -> Result<(), MtlError>;

    /// Removes peers (their outstanding requests fail).
    fn del_peers(&mut self, ranks: &[u32]);

    /// A communicator id the PML will use (`MtlError::Tag` when it does
    /// not fit the layout).
    fn add_comm(&mut self, cid: u32) -> Result<(), MtlError>;

    /// A communicator id no longer used.
    fn del_comm(&mut self, cid: u32);

    /// Starts sending `data` on communicator `cid` to world rank `peer`,
    /// stamped with `rank` (the sender's rank in the communicator) and
    /// `tag`: [`Posted::Done`] if it completed inside the call (no event
    /// then), else [`Posted::Pending`].
    #[allow(clippy::too_many_arguments)]
    fn isend(
        &mut self,
        cid: u32,
        peer: u32,
        rank: u32,
        tag: i32,
        data: MemRegion,
        mode: SendMode,
        token: Token,
    ) -> Result<Posted, MtlError>;

    /// The longest message [`Mtl::inject`] takes (0: it takes none).
    fn inject_limit(&self) -> usize {
        0
    }

    /// Sends `data` (at most [`Mtl::inject_limit`] bytes) in standard mode,
    /// as [`Mtl::isend`] does, but only if it completes inside the call (as
    /// `fi_tinject`): no request, no token, no event. `false` has sent
    /// nothing and reports nothing (an unknown peer or communicator, a field
    /// that does not fit, no room now): the caller then sends as usual,
    /// which reports any error.
    fn inject(&mut self, cid: u32, peer: u32, rank: u32, tag: i32, data: MemRegion) -> bool {
        let _ = (cid, peer, rank, tag, data);
        false
    }

    /// Posts a receive into `buf`.
    fn irecv(
        &mut self,
        cid: u32,
        src: Source,
        tag: TagSel,
        buf: MemRegion,
        token: Token,
    ) -> Result<(), MtlError>;

    /// A matching message that has arrived, left in place
    /// (`MPI_Iprobe`).
    fn iprobe(&mut self, cid: u32, src: Source, tag: TagSel) -> Result<Option<RecvInfo>, MtlError>;

    /// A matching message that has arrived, claimed so that only
    /// [`Mtl::imrecv`] can receive it (`MPI_Improbe`).
    fn improbe(
        &mut self,
        cid: u32,
        src: Source,
        tag: TagSel,
    ) -> Result<Option<(MessageId, RecvInfo)>, MtlError>;

    /// Receives a claimed message into `buf`.
    fn imrecv(&mut self, msg: MessageId, buf: MemRegion, token: Token) -> Result<(), MtlError>;

    /// Cancels request `token` if it is a receive not yet matched (its
    /// event is then [`Outcome::Cancelled`]); whether it was.
    fn cancel(&mut self, token: Token) -> bool;

    /// Advances communication; completions go to `sink`. Returns the
    /// number of events given.
    fn progress(&mut self, sink: &mut dyn MtlSink) -> usize;

    /// Whether the MTL holds operations it accepted but has not handed to
    /// the network yet (queued for want of resources): `MPI_Finalize`
    /// progresses until there are none, so that nothing accepted is lost
    /// when the process exits.
    fn busy(&self) -> bool {
        false
    }

    /// Releases what the MTL holds in the network and the system (end of
    /// `MPI_Finalize`): endpoints, connections, shared-memory segments.
    /// Afterwards every operation fails with [`MtlError::Closed`],
    /// [`Mtl::inject`] and [`Mtl::cancel`] return `false` and
    /// [`Mtl::progress`] gives nothing. Closing twice does nothing.
    fn close(&mut self);

    /// What an idle wait sleeps on until this MTL has a completion (see
    /// [`oxmpi_btl::btl::Doorbell`]); `None`: nothing wakes a sleeper, a
    /// wait polls, sleeping a bounded time at most. None once closed.
    fn doorbell(&self) -> Option<std::sync::Arc<dyn oxmpi_btl::btl::Doorbell>> {
        None
    }
}
