//! The engine's state (`State`): everything the protocol handlers change,
//! apart from the BTLs, which the driver (`Ob1`) owns.

use super::*;

/// The state every handler needs, apart from the BTLs themselves.
#[derive(Debug)]
pub(crate) struct State {
    pub(super) cfg: PmlConfig,
    pub(super) me: u32,
    pub(super) limits: Vec<Limits>,
    pub(super) caps: Vec<Caps>,
    pub(super) bml: Vec<PeerEps>,
    /// Which world rank each BTL's endpoint leads to (`[btl][ep]`,
    /// `u32::MAX` for none): who sent a fragment, in O(1).
    pub(super) ep_peer: Vec<Vec<u32>>,
    pub(super) comms: Vec<Option<Comm>>,
    pub(super) engine: Engine<ReqRef, u32>,
    pub(super) seq: SendSequencer,
    pub(super) reqs: Reqs,
    pub(super) unexp: Vec<Option<UnexpMsg>>,
    pub(super) free_unexp: Vec<u32>,
    pub(super) spare: Vec<Vec<u8>>,
    pub(super) early: Vec<(MatchHdr, u32)>,
    pub(super) toks: Vec<Option<Tok>>,
    pub(super) free_toks: Vec<u32>,
    pub(super) actions: VecDeque<Action>,
    pub(super) pending: VecDeque<Action>,
    /// RDMA gets and puts, and decisions on matched RGETs, met while
    /// posting (`irecv`, `isend`, `start`, `cancel`...): left for the next
    /// progress pass (see [`Ob1::run_actions`]).
    pub(super) copies: VecDeque<Action>,
    pub(super) credits: Vec<usize>,
    pub(super) owed: Vec<usize>,
    /// Our RGET sends not yet complete, per peer: while the peer is busy
    /// getting our data it has no core to spare for a split transfer.
    pub(super) rget_out: Vec<u32>,
    /// The receiver's share of a split transfer from each peer, in 1024ths
    /// (half until one has been timed): copies into another process
    /// (`process_vm_writev`) can be slower than copies out of it, so an
    /// even split leaves the faster side idle.
    pub(super) split_share: Vec<u16>,
    pub(super) dead: Vec<Option<String>>,
    /// How many entries of `dead` are set (none: nothing to check).
    pub(super) n_dead: usize,
    pub(super) counters: Counters,
    pub(super) tick: u32,
    /// The rank a small receive from any source reads first (where the
    /// last one stopped: after the rank it took from).
    pub(super) any_source_next: u32,
    /// Small receives from any source taken in a row (see
    /// [`ANY_SOURCE_RUN`]).
    pub(super) any_source_run: u32,
    /// The source rank and context whose eager channel a small receive
    /// ([`Ob1::recv_small`]) last read and found empty: the receive that
    /// posts next ([`Ob1::irecv`]; [`Ob1::irecv_polling`] takes the note
    /// too, but polls on), in the same call, does not read that channel
    /// again a moment later. Only a shortcut: a message that lands
    /// meanwhile goes to the posted receive with the next progress, as any
    /// later one. A note that nothing takes at once (the small receive took
    /// a message after all, or the next receive is from any source, or
    /// `recv_arrived` is off) stays until a later receive from that source
    /// takes it and skips one read (the small path does not clear it, so
    /// that it stores nothing more).
    pub(super) read_empty: Option<(u32, u16)>,
    /// The attached buffers and the sessions of contexts
    /// ([`crate::bsend`]).
    pub(super) bsend: BsendPool,
    pub(super) dereg: Vec<(usize, RegId)>,
    pub(super) rcache: Rcache,
    /// Called when this process cannot reach a live peer
    /// ([`Ob1::on_local_fault`]).
    pub(super) local_fault: failure::FaultHook,
}

/// Ranks a small receive from any source reads at least (one read each,
/// when the communicator has that many), however few polls it is allowed.
pub const ANY_SOURCE_SWEEP: u32 = 16;

/// Small receives from any source taken in a row, after which one takes
/// nothing and the ordinary receive runs (with its full progress).
pub const ANY_SOURCE_RUN: u32 = 8;
