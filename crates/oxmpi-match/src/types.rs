//! Public vocabulary of the arbiter: selectors, envelopes, outcomes, errors.
//!
//! Contract: these are plain data types. Wildcards and `MPI_PROC_NULL` are
//! spelled as enum variants ([`Source::Any`], [`Source::ProcNull`],
//! [`Tag::Any`]), never as magic integers, so a concrete envelope can never be
//! confused with a selector.

use std::fmt;

/// The source selector of a receive or probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// A specific rank of the communicator (`0..n_peers`).
    Rank(u32),
    /// `MPI_ANY_SOURCE`: any rank of the communicator.
    Any,
    /// `MPI_PROC_NULL`: completes at once with an empty status; never queued.
    ProcNull,
}

/// The tag selector of a receive or probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tag {
    /// An exact tag. Negative values are reserved for internal traffic and are
    /// only ever matched by an exact, equal tag.
    Value(i32),
    /// `MPI_ANY_TAG`: any tag `>= 0` (never an internal negative tag).
    Any,
}

/// The envelope of a concrete message: where it came from and how it is tagged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// Context id (communicator) the message was sent on.
    pub context: u32,
    /// Rank of the sender in that communicator.
    pub source: u32,
    /// The message tag.
    pub tag: i32,
}

/// Handle to a posted receive, usable with [`crate::Engine::cancel`].
///
/// Carries a generation, so a handle whose receive has completed (or been
/// cancelled) is recognised as stale rather than aliasing a newer receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvHandle {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// A receive paired with a message: the match decision handed to the PML.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match<R, M> {
    /// The receive token the PML supplied when posting.
    pub recv: R,
    /// The message payload the PML supplied on arrival.
    pub msg: M,
    /// The envelope of the matched message.
    pub envelope: Envelope,
    /// Byte length of the message as reported on arrival.
    pub len: usize,
}

/// Result of [`crate::Engine::post_recv`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PostOutcome<R, M> {
    /// The receive took the earliest fitting unexpected message.
    Matched(Match<R, M>),
    /// Nothing fitted; the receive is now posted and may be cancelled.
    Posted(RecvHandle),
    /// The source was [`Source::ProcNull`]: the receive is complete with
    /// source `MPI_PROC_NULL`, tag `MPI_ANY_TAG` and count 0.
    ProcNull {
        /// The receive token, handed straight back.
        recv: R,
    },
}

/// Where [`crate::Engine::arrival_before_post`] sent an in-sequence
/// message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarlyArrival<R> {
    /// The earliest posted receive that fits it (as
    /// [`crate::Engine::match_arrival`] finds).
    Posted(R, Envelope),
    /// No posted receive fits it, and the receive about to be posted takes
    /// it: nothing else unexpected fits that receive, so once posted it
    /// would take this message first. Nothing is queued.
    Fresh(Envelope),
}

/// Immediate result of [`crate::Engine::handle_arrival`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The message arrived ahead of sequence and was parked; no decision yet.
    Parked,
    /// The message was in sequence. It, and `events - 1` parked messages it
    /// released, each produced one [`MatchEvent`] to drain with
    /// [`crate::Engine::poll_matched`].
    Delivered {
        /// Number of match decisions this arrival queued.
        events: usize,
    },
}

/// One match decision produced by an arrival, drained with
/// [`crate::Engine::poll_matched`] in the order the decisions were taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchEvent<R, M> {
    /// The message matched the earliest fitting posted receive.
    Matched(Match<R, M>),
    /// No posted receive fitted; the message is now unexpected.
    Queued {
        /// Envelope of the message that became unexpected.
        envelope: Envelope,
        /// Its byte length.
        len: usize,
    },
}

/// Result of a probe whose source may be [`Source::ProcNull`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome<T> {
    /// A real message was found.
    Found(T),
    /// The source was `MPI_PROC_NULL`: flag is true, status has source
    /// `MPI_PROC_NULL`, tag `MPI_ANY_TAG`, count 0 (for mprobe, the message
    /// is `MPI_MESSAGE_NO_PROC`).
    ProcNull,
}

/// What [`crate::Engine::iprobe`] reports about the message it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageInfo {
    /// The message envelope.
    pub envelope: Envelope,
    /// The message byte length.
    pub len: usize,
}

/// A message taken out of matching by [`crate::Engine::improbe`]; the PML
/// completes `MPI_Mrecv`/`MPI_Imrecv` by consuming it (no other receive or
/// probe can see this message any more).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageHandle<M> {
    /// The message envelope.
    pub envelope: Envelope,
    /// The message byte length.
    pub len: usize,
    /// The payload supplied on arrival.
    pub msg: M,
}

/// Unexpected-message accounting, per peer, per context or engine-wide.
///
/// The engine only counts; the PML enforces limits (credits, forcing
/// rendezvous) from these numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnexpectedStats {
    /// Messages waiting in the unexpected queue.
    pub messages: usize,
    /// Sum of their byte lengths.
    pub bytes: usize,
    /// Out-of-sequence arrivals parked until their predecessors arrive.
    pub parked_messages: usize,
    /// Sum of the parked arrivals' byte lengths.
    pub parked_bytes: usize,
}

/// Everything still queued in a context when it was removed.
#[derive(Debug)]
pub struct RemovedContext<R, M> {
    /// Tokens of receives that were still posted, in posting order.
    pub posted: Vec<R>,
    /// Unexpected messages in arrival order, followed by parked
    /// (out-of-sequence) ones peer by peer.
    pub unexpected: Vec<MessageHandle<M>>,
}

/// Misuse or protocol errors reported by the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchError {
    /// No context with this id has been added.
    UnknownContext(u32),
    /// A context with this id already exists.
    ContextExists(u32),
    /// The rank is not below the context's peer count.
    RankOutOfRange {
        /// Context id.
        context: u32,
        /// Offending rank.
        rank: u32,
        /// Number of peers of the context.
        n_peers: u32,
    },
    /// An arrival reused a sequence number already parked.
    DuplicateSequence {
        /// Context id.
        context: u32,
        /// Sender rank.
        source: u32,
        /// Offending sequence number.
        seq: u16,
    },
    /// An arrival's sequence number is behind the expected one (already
    /// delivered) or more than half the 16-bit space ahead of it.
    StaleSequence {
        /// Context id.
        context: u32,
        /// Sender rank.
        source: u32,
        /// Offending sequence number.
        seq: u16,
        /// The sequence number the engine expected next.
        expected: u16,
    },
}

impl fmt::Display for MatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MatchError::UnknownContext(c) => write!(f, "unknown context {c}"),
            MatchError::ContextExists(c) => write!(f, "context {c} already exists"),
            MatchError::RankOutOfRange {
                context,
                rank,
                n_peers,
            } => write!(
                f,
                "rank {rank} out of range for context {context} ({n_peers} peers)"
            ),
            MatchError::DuplicateSequence {
                context,
                source,
                seq,
            } => write!(
                f,
                "duplicate sequence number {seq} from rank {source} on context {context}"
            ),
            MatchError::StaleSequence {
                context,
                source,
                seq,
                expected,
            } => write!(
                f,
                "stale sequence number {seq} (expected {expected}) from rank {source} on context {context}"
            ),
        }
    }
}

impl std::error::Error for MatchError {}
