//! The ob1 protocol engine: requests, protocol selection (seed 000), the BML,
//! and the reaction to every header type.
//!
//! Single-threaded core: [`crate::Pml`] wraps it in a mutex. Fragments are
//! handled inside the BTL's progress call through `Sink`, which copies
//! eager data straight into a matched receive buffer (one copy) and queues
//! whatever needs a BTL (ACK, FIN, GET, PUT, CREDIT) as an `Action`, run
//! once the BTL's progress call has returned. `NoResource` puts the action on
//! the pending queue, re-driven by the next progress call: a BTL refusal is
//! never an error and never a drop.
//!
//! Protocol selection on the sending side ([`Ob1::isend`], after seed 000's
//! pseudo-code):
//!
//! ```text
//! if not synchronous and size + MATCH <= eager_limit and credits allow:
//!     if contiguous and size <= sendi_limit and size + MATCH <= max_sendi_size: immediate (sendi)
//!     elif contiguous and BTL sends in place:                         prepared (prepare_src)
//!     else:                                                           allocated (copy)
//! elif contiguous and an RDMA BTL to the peer can GET:                 RGET (RDMA direct get)
//! else: RNDV with the first rndv_eager_limit bytes, PIN when contiguous and the BTL can PUT
//! ```
//!
//! The receiver decides ([`Ob1`]'s rendezvous handling): RGET into a
//! contiguous, large-enough buffer is a GET then FIN; RNDV with PIN into a
//! contiguous buffer is the RDMA pipeline (ACK for the tail, PUT requests
//! for the middle, one single PUT when it is at most `min_rdma_pipeline_size`:
//! RDMA direct put); anything else (a non-contiguous or too small receive
//! buffer, no RDMA) is answered with an ACK and becomes the send/receive
//! pipeline.

use std::collections::VecDeque;
use std::time::Instant;

use oxmpi_btl::btl::{
    Access, AmTag, Btl, BtlError, BtlSink, Caps, Descriptor, Endpoint, Limits, PeerInfo, RegId,
    RemoteKey, SendOutcome, SmallMatch, SmallRecv, Token,
};
use oxmpi_btl::mem::MemRegion;
use oxmpi_match::{
    Arrival, EarlyArrival, Engine, Envelope, MatchEvent, PostOutcome, ProbeOutcome, RecvHandle,
    SendSequencer, Source, Tag,
};

use crate::buffer::Buffer;
use crate::config::PmlConfig;
use crate::error::{ErrClass, PmlError};
use crate::hdr::{
    Hdr, HdrType, MatchHdr, ReqRef, RndvFlags, RndvHdr, FRAG_LEN, MATCH_LEN, MAX_LEN, RNDV_LEN,
};
use crate::rcache::{Rcache, RcacheStats, RegRef};
use smallvec::SmallVec;

/// `MPI_ANY_SOURCE` as a status reports it (the standard ABI value).
pub const ANY_SOURCE_STATUS: i32 = -1;
/// `MPI_ANY_TAG` as a status reports it (the standard ABI value).
pub const ANY_TAG_STATUS: i32 = -2;
/// `MPI_PROC_NULL` as a status reports it (the standard ABI value).
pub const PROC_NULL_STATUS: i32 = -3;

/// MPI send modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    /// `MPI_Send`: eager or rendezvous, as the PML chooses.
    Standard,
    /// `MPI_Bsend`: copied into the attached buffer, complete at once.
    Buffered,
    /// `MPI_Ssend`: complete only once the receive has matched.
    Synchronous,
    /// `MPI_Rsend`: the receive is known to be posted (sent as standard).
    Ready,
}

/// A request handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReqId(pub(crate) ReqRef, i32);

/// Generations from this one up mark the handle of a receive that completed
/// inside [`Ob1::irecv`] (its low bits are the message's source); a slot's
/// generation stays below it.
const GEN_RECEIVED: u32 = 1 << 31;

impl ReqId {
    /// The handle of request `r`.
    fn of(r: ReqRef) -> ReqId {
        ReqId(r, 0)
    }

    /// A send that completed inside [`Ob1::isend`] (small, eager, written
    /// straight into the BTL): no request was made, and the handle carries
    /// its status (byte count and tag). Generation 0 is never a live
    /// slot's.
    #[inline]
    fn sent_inline(bytes: usize, tag: i32) -> ReqId {
        ReqId(
            ReqRef {
                index: u32::try_from(bytes).unwrap_or(u32::MAX),
                generation: 0,
            },
            tag,
        )
    }

    /// A receive that completed inside [`Ob1::irecv`] (a message already
    /// here, read as the receive was posted): no request was made, and the
    /// handle carries its status (source, tag and byte count; `status`
    /// has no error, and a source below 2^31).
    #[inline]
    fn received_inline(status: Status) -> ReqId {
        ReqId(
            ReqRef {
                index: status.bytes as u32,
                generation: GEN_RECEIVED | status.source as u32,
            },
            status.tag,
        )
    }

    /// Whether this is the handle of an operation that completed inside the
    /// call that started it (a send in [`Ob1::isend`], a receive in
    /// [`Ob1::irecv`]): nothing is left to wait for.
    #[inline]
    pub fn completed_inline(&self) -> bool {
        // Generation 0 (sent) or GEN_RECEIVED and up (received).
        self.0.generation.wrapping_sub(1) >= GEN_RECEIVED - 1
    }

    /// The status of an operation that completed inside the call.
    #[inline]
    pub fn inline_status(self) -> Option<Status> {
        self.completed_inline().then(|| Status {
            source: (self.0.generation & !GEN_RECEIVED) as i32,
            bytes: self.0.index as usize,
            tag: self.1,
            ..Status::default()
        })
    }
}

/// A matched-probe message (`MPI_Message`), received with [`Ob1::imrecv`].
#[derive(Debug, PartialEq, Eq)]
pub struct Message {
    ctx: u16,
    env: Envelope,
    len: usize,
    slot: u32,
}

impl Message {
    /// The matched message's source (communicator rank).
    pub fn source(&self) -> u32 {
        self.env.source
    }
    /// Its tag.
    pub fn tag(&self) -> i32 {
        self.env.tag
    }
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether it carries no data.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What a completed request reports (`MPI_Status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Status {
    /// Source rank in the communicator (receives and probes).
    pub source: i32,
    /// Tag of the message.
    pub tag: i32,
    /// Bytes received (or sent).
    pub bytes: usize,
    /// The request's error class, if it failed (`MPI_ERR_TRUNCATE` keeps the
    /// data that fitted).
    pub error: Option<ErrClass>,
    /// Whether the request was cancelled.
    pub cancelled: bool,
    /// With `error`: the number of its reason's text
    /// ([`crate::error::reasons::get`]); 0 for none.
    pub detail: u16,
}

/// Protocol counters: how many times each protocol ran, so tests can
/// assert which one carried a message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Eager, immediate send (sendi).
    pub eager_sendi: u64,
    /// Eager, prepared in place.
    pub eager_prepared: u64,
    /// Eager, allocated and copied.
    pub eager_copy: u64,
    /// Rendezvous (RNDV) started.
    pub rndv: u64,
    /// RNDV forced because the peer's eager credits were spent.
    pub rndv_forced_by_credits: u64,
    /// RGET started by a sender.
    pub rget: u64,
    /// RDMA direct gets done by a receiver.
    pub rdma_get: u64,
    /// Split transfers: the receiver gets the first part while the sender
    /// puts the rest, both copying at once (`pml_ob1_rdma_split_min`).
    pub rdma_split: u64,
    /// Split transfers whose two copies were both timed and moved the
    /// peer's share (`pml_ob1_rdma_split_balance`).
    pub rdma_split_balanced: u64,
    /// RDMA direct put (one PUT for the whole middle).
    pub rdma_put: u64,
    /// RDMA transfers striped over several BTLs by bandwidth weight
    /// (`pml_ob1_max_rdma_per_request`).
    pub rdma_striped: u64,
    /// Bytes moved by this process's puts and gets, per BTL (in the order
    /// of the PML's BTL list, see `Ob1::btl_names`).
    pub rdma_bytes_by_btl: Vec<u64>,
    /// RDMA pipeline (several PUTs).
    pub rdma_pipeline: u64,
    /// PUT operations performed by senders.
    pub puts: u64,
    /// Send/receive pipeline transfers (a rendezvous answered by an ACK
    /// with bytes to send).
    pub send_pipeline: u64,
    /// Send/receive pipeline fragments sent.
    pub frags: u64,
    /// Rendezvous that the receiver answered with the pipeline although the
    /// sender proposed RDMA (non-contiguous or short receive buffer).
    pub receiver_fallback: u64,
    /// Buffered sends packed into the attached buffer.
    pub buffered: u64,
    /// Synchronous sends.
    pub synchronous: u64,
    /// Messages that arrived before their receive was posted.
    pub unexpected: u64,
    /// Receives completed as they were posted by a message that had
    /// arrived and was read then, never queued as unexpected
    /// (`pml_ob1_recv_arrived`; not counted in `unexpected`).
    pub recv_arrived: u64,
    /// Times a BTL answered NoResource and the operation was queued.
    pub no_resource: u64,
    /// CREDIT messages sent.
    pub credits_returned: u64,
    /// Unmatched rendezvous messages dropped here because their sender
    /// cancelled them.
    pub sends_cancelled: u64,
    /// Fragments dropped because they failed validation.
    pub bad_fragments: u64,
    /// Bytes sent to each world rank.
    pub bytes_sent: Vec<u64>,
    /// Bytes received from each world rank.
    pub bytes_received: Vec<u64>,
}

/// What the caller knows about one world rank: whether it shares this node,
/// and its business card for each BTL (same order as the BTL list).
#[derive(Clone, Debug, Default)]
pub struct PeerDesc {
    /// Same node as this process.
    pub local: bool,
    /// Business card per BTL (`None`: that BTL published nothing).
    pub cards: Vec<Option<Vec<u8>>>,
}

/// One peer's endpoints (seed 001's BML endpoint): eager, send and RDMA
/// lists of (BTL index, endpoint).
#[derive(Clone, Debug, Default)]
struct PeerEps {
    eager: Option<(usize, Endpoint)>,
    send: Vec<(usize, Endpoint)>,
    rdma: Vec<(usize, Endpoint)>,
    rr: usize,
}

/// A context: `world[r]` is the world rank that rank `r` names (the
/// destination of sends, the source of receives), `me` the rank this
/// process stamps on what it sends. For an intracommunicator `world` is
/// the group and `world[me]` this process; for an intercommunicator
/// (`inter`) `world` is the remote group and `me` this process's rank in
/// the local group, which the remote side's `world` maps back to it.
#[derive(Clone, Debug)]
struct Comm {
    world: Vec<u32>,
    me: u32,
    inter: bool,
}

/// Whether no member of `comm` that could send to this rank is alive: an
/// `MPI_ANY_SOURCE` receive on it can then never match. On an
/// intracommunicator this rank itself does not count (a message from it
/// would need a send this rank has not made); on an intercommunicator
/// every rank of `world` is a remote process.
fn no_live_sender(comm: Option<&Comm>, dead: &[Option<String>]) -> bool {
    comm.is_some_and(|c| {
        (c.inter || c.world.len() > 1)
            && c.world.iter().enumerate().all(|(i, &w)| {
                (!c.inter && i == c.me as usize)
                    || dead.get(w as usize).is_some_and(Option::is_some)
            })
    })
}

/// Where the cancel of a rendezvous send stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CancelState {
    /// Not cancelled (or the receiver answered that it had matched).
    None,
    /// Cancelled before its first fragment left: a CANCEL follows it.
    Wanted,
    /// A CANCEL is out; its answer decides.
    Sent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    Sendi,
    Eager,
    Rndv,
    Rget,
}

#[derive(Debug)]
struct SendReq {
    ctx: u16,
    dst: u32,
    peer: u32,
    tag: i32,
    buf: Buffer,
    len: usize,
    mode: SendMode,
    proto: Proto,
    first_len: usize,
    first_sent: bool,
    first_done: bool,
    need_ack: bool,
    acked: bool,
    fin: bool,
    recv_req: ReqRef,
    sched_off: usize,
    end_off: usize,
    inflight: usize,
    put_expect: usize,
    put_done: usize,
    /// The sender's registration (RGET), boxed: only a rendezvous holds
    /// one, and inline it would widen every request (cache lines).
    reg: Option<Box<RegRef>>,
    bsend: Option<(usize, usize)>,
    internal: bool,
    credit: usize,
    seq: u16,
    /// This send's key for RGET (boxed, as `reg`).
    rkey: Option<Box<RemoteKey>>,
    /// Counted in `State::rget_out` until completion.
    rget_open: bool,
    /// Where a cancel of this rendezvous stands (the receiver's `true`
    /// answer shows as the request's `status.cancelled`).
    cancel: CancelState,
    /// The receiver split this RGET (asked us to put a part): the send
    /// ends only with the receiver's FIN, even after a fallback ACK.
    split: bool,
}

#[derive(Debug)]
struct RecvReq {
    ctx: u16,
    src: Source,
    tag: Tag,
    buf: Buffer,
    handle: Option<RecvHandle>,
    matched: bool,
    peer: u32,
    send_req: ReqRef,
    msg_len: usize,
    got: usize,
    /// Registrations of the receive buffer, one per BTL the transfer's
    /// RDMA uses.
    /// A `Vec` (empty, unallocated, for every eager message) rather than
    /// inline storage, which would widen every request by two cache lines.
    regs: Vec<RegRef>,
    /// The sender's key for RGET (boxed, as `regs`).
    rkey: Option<Box<RemoteKey>>,
    rflags: RndvFlags,
    /// Split transfer: the receiver gets `[0, split)` while the sender
    /// puts `[split, msg_len)` (0: not split).
    split: usize,
    /// The sender waits for our FIN (we took the message by GET, whole or
    /// split): sent once, by `check_recv_done`, when every byte is in.
    fin_owed: bool,
    /// A split transfer between the two of us alone: once both copies are
    /// timed (`get_ns`, ours; `put_ns`, from the sender's FIN), they
    /// rebalance the peer's next splits (`State::split_share`).
    balance: bool,
    get_ns: u32,
    put_ns: u32,
}

#[derive(Debug)]
enum Kind {
    // Inline, not boxed: the slab's slots are reused, so a request costs no
    // allocation once the slab is warm.
    Send(SendReq),
    Recv(RecvReq),
}

#[derive(Debug)]
struct Req {
    done: bool,
    status: Status,
    user_freed: bool,
    persistent: bool,
    active: bool,
    kind: Kind,
}

impl Req {
    /// Whether this active request can only complete once a matching call
    /// is made that may never be: a receive nothing matched, or a
    /// rendezvous or synchronous send whose first fragment went out and
    /// which no answer of its receiver has reached yet (see
    /// [`Ob1::finalize_waits_for`]). A cancel on its way is waited for.
    fn waits_for_a_match(&self) -> bool {
        match &self.kind {
            Kind::Recv(rr) => !rr.matched,
            Kind::Send(s) => {
                s.first_done
                    && s.need_ack
                    && !s.acked
                    && !s.fin
                    && !s.split
                    && s.cancel != CancelState::Sent
            }
        }
    }

    fn send(&self) -> Option<&SendReq> {
        match &self.kind {
            Kind::Send(s) => Some(s),
            Kind::Recv(_) => None,
        }
    }

    fn send_mut(&mut self) -> Option<&mut SendReq> {
        match &mut self.kind {
            Kind::Send(s) => Some(s),
            Kind::Recv(_) => None,
        }
    }

    fn recv_mut(&mut self) -> Option<&mut RecvReq> {
        match &mut self.kind {
            Kind::Recv(rr) => Some(rr),
            Kind::Send(_) => None,
        }
    }
}

#[derive(Debug, Default)]
struct Slot {
    gen: u32,
    req: Option<Req>,
}

#[derive(Clone, Copy, Debug)]
enum UnexpKind {
    Eager,
    Rndv {
        hdr: RndvHdr,
        key: Option<RemoteKey>,
    },
}

#[derive(Debug)]
struct UnexpMsg {
    kind: UnexpKind,
    peer: u32,
    credit: usize,
    data: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
enum TokKind {
    First,
    Frag,
    Get(usize),
    /// A put of `len` bytes for `recv_req`; `nanos`: how long the BTL's
    /// call took (see [`copy_nanos`]); `ordered`: its FIN left right
    /// behind it ([`Caps::PUT_ORDERED`]), none is owed on completion.
    Put {
        recv_req: ReqRef,
        len: usize,
        nanos: u32,
        ordered: bool,
    },
    Ctl,
}

#[derive(Clone, Copy, Debug)]
struct Tok {
    req: ReqRef,
    kind: TokKind,
}

/// Work that needs a BTL, queued from inside a BTL's progress call or
/// refused with NoResource and retried.
#[derive(Clone, Copy, Debug)]
enum Action {
    Ctl {
        peer: u32,
        hdr: Hdr,
    },
    /// A control header sent over a given BTL (a PUT request: the sender
    /// puts over the BTL it arrived on).
    CtlVia {
        peer: u32,
        btl: usize,
        hdr: Hdr,
    },
    Rndv(ReqRef),
    Drive(ReqRef),
    Start(ReqRef),
    Put(PutAsk),
    Get(ReqRef),
}

/// Whether queued action `a` works on request `r`.
fn names(a: &Action, r: ReqRef) -> bool {
    match a {
        Action::Rndv(x) | Action::Drive(x) | Action::Start(x) | Action::Get(x) => *x == r,
        Action::Put(ask) => ask.send_req == r,
        Action::Ctl { .. } | Action::CtlVia { .. } => false,
    }
}

/// A receiver's PUT request, to run.
#[derive(Clone, Copy, Debug)]
struct PutAsk {
    send_req: ReqRef,
    recv_req: ReqRef,
    offset: usize,
    len: usize,
    key: RemoteKey,
    /// The BTL the request arrived on (its key is that BTL's).
    btl: usize,
    /// The world rank that asked.
    peer: u32,
}

#[derive(Debug)]
struct Bsend {
    region: MemRegion,
    /// Live allocations (offset, length), sorted by offset.
    used: Vec<(usize, usize)>,
}

/// The request slab: slots with generations, so a stale or forged
/// reference is recognised.
#[derive(Debug, Default)]
struct Reqs {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Reqs {
    /// Stores the request `make` builds in a free slot. (`make` runs once
    /// the slot is chosen, so the request is built in place: the slot is
    /// large, and moving a finished one in cost a copy per message.)
    #[inline(always)]
    fn alloc(&mut self, make: impl FnOnce() -> Req) -> ReqRef {
        if let Some(i) = self.free.pop() {
            let s = &mut self.slots[i as usize];
            // A free slot holds `None`: forgetting what `replace` hands
            // back skips the drop glue's test of the old value.
            let old = s.req.replace(make());
            debug_assert!(old.is_none());
            std::mem::forget(old);
            ReqRef {
                index: i,
                generation: s.gen,
            }
        } else {
            let i = self.slots.len() as u32;
            self.slots.push(Slot {
                gen: 1,
                req: Some(make()),
            });
            ReqRef {
                index: i,
                generation: 1,
            }
        }
    }

    fn free(&mut self, r: ReqRef) {
        if self.get(r).is_some() {
            self.free_live(r.index);
        }
    }

    /// Frees slot `i`, which holds a request (just looked up).
    #[inline]
    fn free_live(&mut self, i: u32) {
        let s = &mut self.slots[i as usize];
        s.req = None;
        // Below GEN_RECEIVED (a slot's generation is never an inline
        // receive's), and never 0 (an inline send's).
        s.gen = ((s.gen + 1) & (GEN_RECEIVED - 1)).max(1);
        self.free.push(i);
    }

    fn get(&self, r: ReqRef) -> Option<&Req> {
        let s = self.slots.get(r.index as usize)?;
        (s.gen == r.generation).then_some(())?;
        s.req.as_ref()
    }

    fn get_mut(&mut self, r: ReqRef) -> Option<&mut Req> {
        let s = self.slots.get_mut(r.index as usize)?;
        (s.gen == r.generation).then_some(())?;
        s.req.as_mut()
    }

    /// Send request `r`.
    fn send(&self, r: ReqRef) -> Option<&SendReq> {
        self.get(r).and_then(Req::send)
    }

    /// Send request `r`, to change.
    fn send_mut(&mut self, r: ReqRef) -> Option<&mut SendReq> {
        self.get_mut(r).and_then(Req::send_mut)
    }

    /// Receive request `r`, to change.
    fn recv_mut(&mut self, r: ReqRef) -> Option<&mut RecvReq> {
        self.get_mut(r).and_then(Req::recv_mut)
    }

    /// Send request `r` while it has not completed.
    fn live_send(&self, r: ReqRef) -> Option<&SendReq> {
        self.get(r).filter(|q| !q.done).and_then(Req::send)
    }

    /// Send request `r` while it has not completed, to change.
    fn live_send_mut(&mut self, r: ReqRef) -> Option<&mut SendReq> {
        self.get_mut(r).filter(|q| !q.done).and_then(Req::send_mut)
    }

    /// Receive request `r` while it has not completed, to change.
    fn live_recv_mut(&mut self, r: ReqRef) -> Option<&mut RecvReq> {
        self.get_mut(r).filter(|q| !q.done).and_then(Req::recv_mut)
    }

    /// The requests started and not complete for which `hit` holds (a
    /// scan of every slot: for failures, never on a fast path).
    fn live_where(&self, mut hit: impl FnMut(&Kind) -> bool) -> Vec<ReqRef> {
        let mut out = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let Some(q) = &s.req else { continue };
            if !q.done && q.active && hit(&q.kind) {
                out.push(ReqRef {
                    index: i as u32,
                    generation: s.gen,
                });
            }
        }
        out
    }

    /// Receive `r` met a message with envelope `env` from world rank
    /// `peer`: records the match in its status and state, and returns it.
    fn matched_recv(&mut self, r: ReqRef, env: Envelope, peer: u32) -> Option<&mut RecvReq> {
        self.matched(r, env, peer).and_then(Req::recv_mut)
    }

    /// As [`Reqs::matched_recv`], returning the whole request (a receive).
    #[inline(always)]
    fn matched(&mut self, r: ReqRef, env: Envelope, peer: u32) -> Option<&mut Req> {
        let q = self.get_mut(r)?;
        let Req {
            kind: Kind::Recv(rr),
            status,
            ..
        } = q
        else {
            return None;
        };
        status.source = env.source as i32;
        status.tag = env.tag;
        rr.matched = true;
        rr.handle = None;
        rr.peer = peer;
        Some(q)
    }
}

/// The state every handler needs, apart from the BTLs themselves.
#[derive(Debug)]
pub(crate) struct State {
    cfg: PmlConfig,
    me: u32,
    limits: Vec<Limits>,
    caps: Vec<Caps>,
    bml: Vec<PeerEps>,
    comms: Vec<Option<Comm>>,
    engine: Engine<ReqRef, u32>,
    seq: SendSequencer,
    reqs: Reqs,
    unexp: Vec<Option<UnexpMsg>>,
    free_unexp: Vec<u32>,
    spare: Vec<Vec<u8>>,
    early: Vec<(MatchHdr, u32)>,
    toks: Vec<Option<Tok>>,
    free_toks: Vec<u32>,
    actions: VecDeque<Action>,
    pending: VecDeque<Action>,
    /// RDMA gets and puts, and decisions on matched RGETs, met while
    /// posting (`irecv`, `isend`, `start`, `cancel`...): left for the next
    /// progress pass (see [`Ob1::run_actions`]).
    copies: VecDeque<Action>,
    credits: Vec<usize>,
    owed: Vec<usize>,
    /// Our RGET sends not yet complete, per peer: while the peer is busy
    /// getting our data it has no core to spare for a split transfer.
    rget_out: Vec<u32>,
    /// The receiver's share of a split transfer from each peer, in 1024ths
    /// (half until one has been timed): copies into another process
    /// (`process_vm_writev`) can be slower than copies out of it, so an
    /// even split leaves the faster side idle.
    split_share: Vec<u16>,
    dead: Vec<Option<String>>,
    /// How many entries of `dead` are set (none: nothing to check).
    n_dead: usize,
    counters: Counters,
    tick: u32,
    /// The rank a small receive from any source reads first (where the
    /// last one stopped: after the rank it took from).
    any_source_next: u32,
    /// Small receives from any source taken in a row (see
    /// [`ANY_SOURCE_RUN`]).
    any_source_run: u32,
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
    read_empty: Option<(u32, u16)>,
    bsend: Option<Bsend>,
    dereg: Vec<(usize, RegId)>,
    rcache: Rcache,
}

/// The pattern of a small receive's MATCH header from rank `src` of `ctx`
/// with sequence number `seq`: its first word exactly, its second
/// (`tag_word`, the tag) under a mask.
#[inline(always)]
fn small_match(ctx: u16, seq: u16, src: u32, tag_word: [u64; 2]) -> SmallMatch {
    let want0 = MatchHdr {
        ctx,
        seq,
        src,
        tag: 0,
    }
    .first_word();
    SmallMatch {
        tag: HdrType::Match.am_tag(),
        hdr_len: MATCH_LEN,
        want: [want0, tag_word[0]],
        mask: [u64::MAX, tag_word[1]],
    }
}

/// Ranks a small receive from any source reads at least (one read each,
/// when the communicator has that many), however few polls it is allowed.
pub const ANY_SOURCE_SWEEP: u32 = 16;
/// Small receives from any source taken in a row, after which one takes
/// nothing and the ordinary receive runs (with its full progress).
pub const ANY_SOURCE_RUN: u32 = 8;

/// Smallest RDMA transfer striped over several BTLs.
const STRIPE_MIN: usize = 4096;

/// The receiver's share of a split transfer (in 1024ths) before any split
/// with that peer has been timed.
const SHARE_HALF: u16 = 512;
/// Bounds of the receiver's share: each side copies at least an eighth.
const SHARE_MIN: u16 = 128;
/// See [`SHARE_MIN`].
const SHARE_MAX: u16 = 896;

/// Where a split transfer of `[0, len)` divides when the receiver's share
/// is `share` 1024ths: the receiver gets `[0, h)`, the sender puts the
/// rest (`h` on a cache line). `None` when either part would be empty (a
/// short message and a small share): no split then.
fn split_point(len: usize, share: u16) -> Option<usize> {
    let h = ((len as u128 * u128::from(share) / 1024) as usize) & !63;
    (h > 0 && h < len).then_some(h)
}

/// The receiver's next share: a quarter of the way from `old` to the share
/// at which both copies of the last split transfer (`get_bytes` in
/// `get_ns` by the receiver, `put_bytes` in `put_ns` by the sender) would
/// have taken the same time; within [`SHARE_MIN`], [`SHARE_MAX`].
fn next_share(old: u16, get_bytes: usize, get_ns: u32, put_bytes: usize, put_ns: u32) -> u16 {
    if get_bytes == 0 || put_bytes == 0 || get_ns == 0 || put_ns == 0 {
        return old;
    }
    // Rates are bytes per ns; the balanced share is r_get / (r_get + r_put).
    let a = get_bytes as f64 * f64::from(put_ns);
    let b = put_bytes as f64 * f64::from(get_ns);
    let target = 1024.0 * a / (a + b);
    let next = (3.0 * f64::from(old) + target) / 4.0;
    (next.round() as u16).clamp(SHARE_MIN, SHARE_MAX)
}

/// Shortest BTL call that counts as a copy, nanoseconds: a BTL that copies
/// inside its put/get call (CMA) takes longer than this for the parts of
/// a default split (8 KiB at the smallest share of 64 KiB, about 1 us, is
/// the exception: no sample); one that returns at once and completes later
/// (the copy-in/copy-out emulation) takes less, and gives no sample.
const MIN_COPY_NS: u128 = 2_000;

/// How long a put or get call that began at `t0` took, nanoseconds (0 when
/// it returned too quickly to have copied anything, see [`MIN_COPY_NS`]).
/// Timed around the call, not until its completion is reported: the
/// completions of several copies issued in a row are reported together.
fn copy_nanos(t0: Instant) -> u32 {
    let ns = t0.elapsed().as_nanos();
    if ns < MIN_COPY_NS {
        0
    } else {
        u32::try_from(ns).unwrap_or(u32::MAX)
    }
}

/// Completes request `q` unless it is already done: marks it done and
/// releases what it holds (registrations, its RGET count towards its peer,
/// its range of the attached buffer). Whether its slot is to be freed now
/// (the program freed it already, or it is an internal buffered send).
#[inline(always)]
fn close_req(
    q: &mut Req,
    rcache: &mut Rcache,
    dereg: &mut Vec<(usize, RegId)>,
    rget_out: &mut [u32],
    bsend: &mut Option<Bsend>,
) -> bool {
    if q.done {
        return false;
    }
    q.done = true;
    match &mut q.kind {
        Kind::Send(s) => {
            if s.rget_open {
                s.rget_open = false;
                let n = &mut rget_out[s.peer as usize];
                *n = n.saturating_sub(1);
            }
            if let Some(x) = s.reg.take() {
                rcache.release(*x, dereg);
            }
            let range = s.bsend.filter(|_| s.internal);
            if let (Some(range), Some(b)) = (range, bsend.as_mut()) {
                b.used.retain(|&u| u != range);
            }
            q.user_freed || range.is_some()
        }
        Kind::Recv(rr) => {
            release_regs(rr, rcache, dereg);
            q.user_freed
        }
    }
}

/// Completes receive `q`, whose every byte is in, through the request in
/// hand: its status's count (and a truncation), done, its registrations
/// released, as `close_req` completes a receive. Whether to free its slot
/// (the program already freed the request).
#[inline(always)]
fn recv_complete(q: &mut Req, rcache: &mut Rcache, dereg: &mut Vec<(usize, RegId)>) -> bool {
    let Req {
        kind: Kind::Recv(rr),
        status,
        done,
        user_freed,
        ..
    } = q
    else {
        return false;
    };
    let cap = rr.buf.len();
    status.bytes = rr.msg_len.min(cap);
    if rr.msg_len > cap {
        status.error = Some(ErrClass::Truncate);
    }
    *done = true;
    release_regs(rr, rcache, dereg);
    *user_freed
}

/// Once both copies of split transfer `rr` are timed (whichever was timed
/// last calls this), moves its peer's share in `split_share` towards the
/// one that balances them, once.
fn balance_split(rr: &mut RecvReq, split_share: &mut [u16], counters: &mut Counters) {
    if !rr.balance || rr.get_ns == 0 || rr.put_ns == 0 {
        return;
    }
    rr.balance = false;
    let share = &mut split_share[rr.peer as usize];
    let put_bytes = rr.msg_len.saturating_sub(rr.split);
    *share = next_share(*share, rr.split, rr.get_ns, put_bytes, rr.put_ns);
    counters.rdma_split_balanced += 1;
}

/// Releases the registrations of receive `rr` (tested first: an empty
/// `drain` is not free, and every eager receive has nothing registered).
#[inline(always)]
fn release_regs(rr: &mut RecvReq, rcache: &mut Rcache, dereg: &mut Vec<(usize, RegId)>) {
    if !rr.regs.is_empty() {
        for x in rr.regs.drain(..) {
            rcache.release(x, dereg);
        }
    }
}

/// One entry per BTL a transfer's RDMA uses: inline up to the default
/// `pml_ob1_max_rdma_per_request` (4), so striping allocates nothing.
type Stripes<T> = SmallVec<[T; 4]>;

/// `[lo, hi)` cut into consecutive parts proportional to `weights`
/// (cache-line aligned cuts; the last part takes the rest).
fn weighted_shares(lo: usize, hi: usize, weights: &[u64]) -> Stripes<(usize, usize)> {
    let total: u128 = weights.iter().map(|&w| u128::from(w.max(1))).sum();
    let len = (hi - lo) as u128;
    let mut out = Stripes::new();
    let mut at = lo;
    let mut acc: u128 = 0;
    for (i, &w) in weights.iter().enumerate() {
        acc += u128::from(w.max(1));
        let end = if i + 1 == weights.len() {
            hi
        } else {
            let cut = lo + (len * acc / total) as usize;
            (cut & !63).clamp(at, hi)
        };
        out.push((at, end));
        at = end;
    }
    out
}

/// The ob1 PML over a list of BTLs.
pub struct Ob1<B: ?Sized + Btl> {
    btls: Vec<Box<B>>,
    /// [`Ob1::btls_in_tree`], fixed at creation (the list only shrinks).
    in_tree: bool,
    st: State,
}

impl<B: ?Sized + Btl> std::fmt::Debug for Ob1<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ob1")
            .field(
                "btls",
                &self.btls.iter().map(|b| b.name()).collect::<Vec<_>>(),
            )
            .field("me", &self.st.me)
            .finish()
    }
}

fn err(class: ErrClass, msg: impl Into<String>) -> PmlError {
    PmlError::new(class, msg)
}

fn btl_err(e: &BtlError) -> ErrClass {
    match e {
        BtlError::PeerGone(..) => ErrClass::ProcFailed,
        BtlError::Invalid(_) => ErrClass::Arg,
        _ => ErrClass::Other,
    }
}

impl<B: ?Sized + Btl> Ob1<B> {
    /// Builds the PML for world rank `me` of `peers.len()` ranks over
    /// `btls`, binding (lazily, inside each BTL) an endpoint per reachable
    /// peer and building the BML's eager, send and RDMA lists.
    pub fn new(
        cfg: PmlConfig,
        me: u32,
        mut btls: Vec<Box<B>>,
        peers: &[PeerDesc],
    ) -> Result<Ob1<B>, PmlError> {
        let n = peers.len();
        if me as usize >= n {
            return Err(err(ErrClass::Rank, format!("rank {me} of {n} ranks")));
        }
        let limits: Vec<Limits> = btls.iter().map(|b| *b.limits()).collect();
        let caps: Vec<Caps> = btls.iter().map(|b| b.caps()).collect();
        let mut bml = Vec::with_capacity(n);
        for (rank, p) in peers.iter().enumerate() {
            let mut reach = Vec::new();
            for (i, b) in btls.iter_mut().enumerate() {
                let info = PeerInfo {
                    rank: rank as u32,
                    local: p.local,
                    card: p.cards.get(i).and_then(|c| c.as_deref()),
                };
                match b.add_peer(&info) {
                    Ok(Some(ep)) => reach.push((i, ep)),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(btl = b.name(), rank, "add_peer: {e}");
                    }
                }
            }
            let mut eps = PeerEps::default();
            if let Some(best) = reach.iter().map(|&(i, _)| limits[i].exclusivity).max() {
                let mut top: Vec<(usize, Endpoint)> = reach
                    .iter()
                    .copied()
                    .filter(|&(i, _)| limits[i].exclusivity == best)
                    .collect();
                top.sort_by_key(|&(i, _)| limits[i].latency);
                eps.eager = top.first().copied();
                eps.send = top.clone();
                eps.rdma = top
                    .iter()
                    .copied()
                    .filter(|&(i, _)| caps[i].contains(Caps::PUT) || caps[i].contains(Caps::GET))
                    .collect();
                eps.rdma
                    .sort_by_key(|&(i, _)| std::cmp::Reverse(limits[i].bandwidth));
            }
            bml.push(eps);
        }
        // Modules that no peer uses are closed, as Open MPI unloads them: an
        // idle module would still be polled (for TCP, a system call).
        let used: Vec<bool> = (0..btls.len())
            .map(|i| {
                bml.iter().any(|e: &PeerEps| {
                    e.eager.is_some_and(|(b, _)| b == i)
                        || e.send.iter().chain(&e.rdma).any(|&(b, _)| b == i)
                })
            })
            .collect();
        if used.iter().any(|u| !u) {
            let mut remap = vec![usize::MAX; btls.len()];
            let mut kept = Vec::with_capacity(btls.len());
            for (i, b) in btls.into_iter().enumerate() {
                if used[i] {
                    remap[i] = kept.len();
                    kept.push(b);
                } else {
                    tracing::debug!(btl = b.name(), "closed: no peer uses it");
                }
            }
            btls = kept;
            let fix = |l: &mut Vec<(usize, Endpoint)>| {
                for (b, _) in l.iter_mut() {
                    *b = remap[*b];
                }
            };
            for e in &mut bml {
                if let Some((b, _)) = &mut e.eager {
                    *b = remap[*b];
                }
                fix(&mut e.send);
                fix(&mut e.rdma);
            }
        }
        let limits: Vec<Limits> = btls.iter().map(|b| *b.limits()).collect();
        let caps: Vec<Caps> = btls.iter().map(|b| b.caps()).collect();
        let credits = vec![cfg.eager_credits; n];
        let rcache = Rcache::new(btls.len(), cfg.leave_pinned, cfg.rcache_max_entries);
        let nbtls = btls.len();
        let in_tree = btls.iter().all(|b| oxmpi_btl::btl::in_tree(&**b));
        Ok(Ob1 {
            btls,
            in_tree,
            st: State {
                cfg,
                me,
                limits,
                caps,
                bml,
                comms: Vec::new(),
                engine: Engine::with_capacity(256, 256),
                seq: SendSequencer::new(),
                reqs: Reqs {
                    slots: Vec::with_capacity(256),
                    free: Vec::with_capacity(256),
                },
                unexp: Vec::with_capacity(256),
                free_unexp: Vec::with_capacity(256),
                spare: Vec::new(),
                early: Vec::new(),
                toks: Vec::with_capacity(256),
                free_toks: Vec::with_capacity(256),
                actions: VecDeque::with_capacity(64),
                pending: VecDeque::with_capacity(64),
                copies: VecDeque::with_capacity(64),
                credits,
                owed: vec![0; n],
                rget_out: vec![0; n],
                split_share: vec![SHARE_HALF; n],
                dead: vec![None; n],
                n_dead: 0,
                counters: Counters {
                    bytes_sent: vec![0; n],
                    bytes_received: vec![0; n],
                    rdma_bytes_by_btl: vec![0; nbtls],
                    ..Counters::default()
                },
                tick: 0,
                any_source_next: 0,
                any_source_run: 0,
                read_empty: None,
                bsend: None,
                dereg: Vec::new(),
                rcache,
            },
        })
    }

    /// This process's world rank.
    pub fn rank(&self) -> u32 {
        self.st.me
    }

    /// Number of world ranks.
    pub fn size(&self) -> u32 {
        self.st.bml.len() as u32
    }

    /// Names of the BTLs that reach world rank `peer` for eager messages,
    /// send/receive and RDMA (for tests and `oxmpi-info`-style reports).
    pub fn peer_btls(&self, peer: u32) -> Option<(Vec<&'static str>, Vec<&'static str>)> {
        let eps = self.st.bml.get(peer as usize)?;
        let names = |l: &[(usize, Endpoint)]| l.iter().map(|&(i, _)| self.btls[i].name()).collect();
        Some((names(&eps.send), names(&eps.rdma)))
    }

    /// The names of this PML's BTLs, in the order counters index them.
    pub fn btl_names(&self) -> Vec<&'static str> {
        self.btls.iter().map(|b| b.name()).collect()
    }

    /// A snapshot of the protocol counters.
    pub fn counters(&self) -> Counters {
        self.st.counters.clone()
    }

    /// The registration cache's counters (`mpi_leave_pinned`).
    pub fn rcache_stats(&self) -> RcacheStats {
        self.st.rcache.stats
    }

    /// Whether registrations are cached (`mpi_leave_pinned` on and the
    /// kernel can report released memory).
    pub fn rcache_on(&mut self) -> bool {
        self.st.rcache.caching()
    }

    /// Adds a communicator: context id `ctx`, its ranks as world ranks, and
    /// this process's rank in it. Messages that arrived for it already are
    /// matched now.
    pub fn add_comm(&mut self, ctx: u16, world: Vec<u32>, me: u32) -> Result<(), PmlError> {
        let n = world.len();
        if me as usize >= n || world[me as usize] != self.st.me {
            return Err(err(ErrClass::Comm, "this process is not the given rank"));
        }
        self.add_context(ctx, world, me, false)
    }

    /// Adds an intercommunicator's context: `remote` is the remote group
    /// as world ranks (what destination and source ranks name), `me` this
    /// process's rank in the local group (what it stamps on its sends, and
    /// what the remote side's `remote` maps back to this process). Messages
    /// that arrived for it already are matched now.
    pub fn add_intercomm(&mut self, ctx: u16, remote: Vec<u32>, me: u32) -> Result<(), PmlError> {
        if remote.is_empty() {
            return Err(err(
                ErrClass::Comm,
                "an intercommunicator needs a remote group",
            ));
        }
        if remote.contains(&self.st.me) {
            return Err(err(
                ErrClass::Comm,
                "this process is in the remote group of its own intercommunicator",
            ));
        }
        self.add_context(ctx, remote, me, true)
    }

    /// [`Ob1::add_comm`] and [`Ob1::add_intercomm`], their arguments checked.
    fn add_context(
        &mut self,
        ctx: u16,
        world: Vec<u32>,
        me: u32,
        inter: bool,
    ) -> Result<(), PmlError> {
        let n = world.len();
        if world.iter().any(|&w| w as usize >= self.st.bml.len()) {
            return Err(err(
                ErrClass::Rank,
                "communicator names a rank past the job",
            ));
        }
        let i = usize::from(ctx);
        if self.st.comms.len() <= i {
            self.st.comms.resize(i + 1, None);
        }
        if self.st.comms[i].is_some() {
            return Err(err(ErrClass::Comm, format!("context {ctx} exists")));
        }
        let np = n as u32;
        self.st
            .engine
            .add_context(u32::from(ctx), np)
            .map_err(|e| err(ErrClass::Intern, format!("{e:?}")))?;
        self.st
            .seq
            .add_context(u32::from(ctx), np)
            .map_err(|e| err(ErrClass::Intern, format!("{e:?}")))?;
        self.st.comms[i] = Some(Comm { world, me, inter });
        let early: Vec<(MatchHdr, u32)> = std::mem::take(&mut self.st.early);
        for (m, slot) in early {
            if m.ctx == ctx {
                self.st.arrival_stored(m, slot);
            } else {
                self.st.early.push((m, slot));
            }
        }
        self.run_actions();
        Ok(())
    }

    /// Removes a communicator (`MPI_Comm_free` once its traffic is done).
    pub fn remove_comm(&mut self, ctx: u16) -> Result<(), PmlError> {
        let i = usize::from(ctx);
        if self.st.comms.get(i).map_or(true, |c| c.is_none()) {
            return Err(err(ErrClass::Comm, format!("no context {ctx}")));
        }
        let removed = self
            .st
            .engine
            .remove_context(u32::from(ctx))
            .map_err(|e| err(ErrClass::Intern, format!("{e:?}")))?;
        for r in removed.posted {
            self.st.fail(
                r,
                ErrClass::Comm,
                "communicator freed with this receive posted",
            );
        }
        for m in removed.unexpected {
            self.st.free_unexp(m.msg);
        }
        self.st.seq.remove_context(u32::from(ctx));
        self.st.comms[i] = None;
        Ok(())
    }

    fn comm(&self, ctx: u16) -> Result<&Comm, PmlError> {
        self.st
            .comms
            .get(usize::from(ctx))
            .and_then(|c| c.as_ref())
            .ok_or_else(|| {
                err(
                    ErrClass::Comm,
                    format!("no communicator with context {ctx}"),
                )
            })
    }

    /// The largest message [`Ob1::sendi_bytes`] sends (`pml_ob1_sendi_limit`,
    /// fixed at creation).
    pub fn sendi_limit(&self) -> usize {
        self.st.cfg.sendi_limit
    }

    /// Whether every BTL is one of `oxmpi-btl`'s ([`oxmpi_btl::btl::in_tree`]),
    /// none of which calls back into the PML from an operation.
    #[inline]
    pub fn btls_in_tree(&self) -> bool {
        self.in_tree
    }

    /// Starts a send of `buf` to rank `dst` of communicator `ctx`.
    #[inline]
    pub fn isend(
        &mut self,
        buf: Buffer,
        dst: u32,
        tag: i32,
        ctx: u16,
        mode: SendMode,
    ) -> Result<ReqId, PmlError> {
        // Small enough to write straight into the BTL: done now, no request
        // (ob1 does the same).
        if let Some(bytes) = self.sendi(&buf, dst, tag, ctx, mode) {
            return Ok(ReqId::sent_inline(bytes, tag));
        }
        if let Some(bytes) = self.send_eager_now(&buf, dst, tag, ctx, mode) {
            return Ok(ReqId::sent_inline(bytes, tag));
        }
        let r = self.new_send(buf, dst, tag, ctx, mode, false)?;
        self.start(r)?;
        Ok(r)
    }

    /// Creates an inactive persistent send (`MPI_Send_init` and friends).
    pub fn send_init(
        &mut self,
        buf: Buffer,
        dst: u32,
        tag: i32,
        ctx: u16,
        mode: SendMode,
    ) -> Result<ReqId, PmlError> {
        self.new_send(buf, dst, tag, ctx, mode, true)
    }

    fn new_send(
        &mut self,
        buf: Buffer,
        dst: u32,
        tag: i32,
        ctx: u16,
        mode: SendMode,
        persistent: bool,
    ) -> Result<ReqId, PmlError> {
        let comm = self.comm(ctx)?;
        let peer = *comm.world.get(dst as usize).ok_or_else(|| {
            err(
                ErrClass::Rank,
                format!(
                    "destination rank {dst} of a communicator of {}",
                    comm.world.len()
                ),
            )
        })?;
        if tag < 0 && ctx < 0x8000 && tag != i32::MIN {
            // Negative tags are reserved for internal traffic; the API layer
            // rejects them for users, the PML accepts them from itself.
        }
        let len = buf.len();
        let s = SendReq {
            ctx,
            dst,
            peer,
            tag,
            buf,
            len,
            mode,
            proto: Proto::Eager,
            first_len: 0,
            first_sent: false,
            first_done: false,
            need_ack: false,
            acked: false,
            fin: false,
            recv_req: ReqRef::default(),
            sched_off: 0,
            end_off: 0,
            inflight: 0,
            put_expect: 0,
            put_done: 0,
            reg: None,
            bsend: None,
            internal: false,
            credit: 0,
            seq: 0,
            rkey: None,
            rget_open: false,
            split: false,
            cancel: CancelState::None,
        };
        let r = self.st.reqs.alloc(|| Req {
            done: persistent,
            status: if persistent {
                Status::empty()
            } else {
                Status::default()
            },
            user_freed: false,
            persistent,
            active: false,
            kind: Kind::Send(s),
        });
        Ok(ReqId::of(r))
    }

    /// A standard or ready send of a small contiguous message, straight
    /// into the eager BTL (seed 000's immediate send) with no request: the
    /// byte count when sent, `None` when the message does not qualify now
    /// (the caller takes the request path).
    #[inline(always)]
    fn sendi(
        &mut self,
        buf: &Buffer,
        dst: u32,
        tag: i32,
        ctx: u16,
        mode: SendMode,
    ) -> Option<usize> {
        if !matches!(mode, SendMode::Standard | SendMode::Ready) {
            return None;
        }
        let region = buf.contig()?;
        self.sendi_bytes(region.read(), dst, tag, ctx)
            .then_some(region.len())
    }

    /// A standard (or ready) send of `data` to rank `dst` of communicator
    /// `ctx`, straight into the eager BTL (seed 000's immediate send): whether it
    /// went, complete, with no request. False sends nothing (not small
    /// enough, no room, no such communicator or rank, protocol work
    /// waiting ahead of it): the caller takes [`Ob1::isend`], which
    /// reports any error. Its sequence number is taken only once the BTL
    /// accepted the bytes.
    #[inline(always)]
    pub fn sendi_bytes(&mut self, data: &[u8], dst: u32, tag: i32, ctx: u16) -> bool {
        let Self { btls, st, .. } = self;
        let len = data.len();
        let wire = len + MATCH_LEN;
        if len > st.cfg.sendi_limit {
            return false;
        }
        let Some((me, p, b, ep)) = st.eager_now_route(len, dst, ctx) else {
            return false;
        };
        let lim = &st.limits[b];
        if !st.caps[b].contains(Caps::SENDI) || wire > lim.max_sendi_size.min(lim.eager_limit) {
            return false;
        }
        let Some(slot) = st.seq.slot(u32::from(ctx), dst) else {
            return false;
        };
        let m = MatchHdr {
            ctx,
            seq: *slot,
            src: me,
            tag,
        };
        if !btls[b].sendi_hdr(ep, HdrType::Match.am_tag(), &m.to_bytes(), data) {
            // Out of room, or a failure the request path reports properly.
            return false;
        }
        *slot = slot.wrapping_add(1);
        st.credits[p] -= wire;
        st.counters.eager_sendi += 1;
        st.counters.bytes_sent[p] += len as u64;
        true
    }

    /// An eager send above the immediate-send limit, prepared (in place)
    /// or copied into a descriptor as `send_frag` does, on a BTL whose
    /// `send` is done on return ([`Caps::SEND_DONE`]): sent and complete
    /// inside the call, with no request (as [`Ob1::sendi`], whose
    /// conditions it shares). `None` leaves everything for the request path.
    /// (The two stay apart: one generic function for both, tried, cost the
    /// immediate path 16 instructions per message pair in `api_hot_path`.)
    #[inline(never)]
    pub(crate) fn send_eager_now(
        &mut self,
        buf: &Buffer,
        dst: u32,
        tag: i32,
        ctx: u16,
        mode: SendMode,
    ) -> Option<usize> {
        let Self { btls, st, .. } = self;
        if !matches!(mode, SendMode::Standard | SendMode::Ready) {
            return None;
        }
        let region = buf.contig()?;
        let (me, p, b, ep) = st.eager_now_route(region.len(), dst, ctx)?;
        let (len, lim, caps) = (region.len(), &st.limits[b], st.caps[b]);
        let wire = len + MATCH_LEN;
        if !caps.contains(Caps::SEND_DONE) || wire > lim.eager_limit.min(lim.max_send_size) {
            return None;
        }
        let slot = st.seq.slot(u32::from(ctx), dst)?;
        let m = MatchHdr {
            ctx,
            seq: *slot,
            src: me,
            tag,
        };
        let hb = m.to_bytes();
        let inplace = caps.contains(Caps::SEND_INPLACE);
        let Ok(desc) = prepare_desc(&mut *btls[b], ep, &hb, buf, (0, len), inplace) else {
            return None;
        };
        // The token: never reported by a SEND_DONE BTL (the conformance
        // suite checks that `send` answers Done; had it not, the bytes are
        // on their way all the same, and an unknown token is ignored).
        match btls[b].send(desc, HdrType::Match.am_tag(), Token(u64::MAX)) {
            Err((d, _)) => {
                btls[b].free(d);
                return None;
            }
            // The data were read inside the call (`Caps::SEND_DONE`, which
            // the conformance suite checks): `EngineCell::try_send_eager`
            // relies on it.
            Ok(out) => debug_assert!(matches!(out, SendOutcome::Done)),
        }
        *slot = slot.wrapping_add(1);
        st.credits[p] -= wire;
        if inplace {
            st.counters.eager_prepared += 1;
        } else {
            st.counters.eager_copy += 1;
        }
        st.counters.bytes_sent[p] += len as u64;
        Some(len)
    }

    /// Posts a receive into `buf` from `src` with `tag` on `ctx`.
    pub fn irecv(
        &mut self,
        buf: Buffer,
        src: Source,
        tag: Tag,
        ctx: u16,
    ) -> Result<ReqId, PmlError> {
        match self.take_arrived(&buf, src, tag, ctx, 1) {
            Some(id) => Ok(id),
            None => self.post_new_recv(buf, src, tag, ctx),
        }
    }

    /// [`Ob1::irecv`] for a blocking receive (`MPI_Recv`): before posting,
    /// reads what arrives from `src` on its eager BTL up to `polls` times
    /// (as [`Ob1::irecv`] does once) where that BTL can see a fragment land
    /// that way ([`Btl::polls_from_peer`]), so a message that lands
    /// meanwhile completes the receive without it ever being posted. Each
    /// read is the next progress of that one peer's channel, with the
    /// receive about to be posted taken into account; reading stops at the
    /// first fragment that is not this receive's message (which the
    /// receive may then take once posted). Other components are not
    /// progressed meanwhile; `polls` bounds that delay.
    pub fn irecv_polling(
        &mut self,
        buf: Buffer,
        src: Source,
        tag: Tag,
        ctx: u16,
        polls: u32,
    ) -> Result<ReqId, PmlError> {
        match self.take_arrived(&buf, src, tag, ctx, polls) {
            Some(id) => Ok(id),
            None => self.post_new_recv(buf, src, tag, ctx),
        }
    }

    /// The small-message receive: takes the message from rank `src` of
    /// `ctx` (or from any rank, [`Source::Any`]) with `tag` into `dst` when
    /// it is next on the sender's eager BTL, fits `dst`, and nothing else
    /// could take it first ([`Engine::fresh_seq`]: nothing posted, nothing
    /// of `src` unexpected or out of order; a user tag; from any source
    /// [`Engine::fresh_seq_any_source`]: nothing unexpected from anyone
    /// either). Reads that BTL's channel with [`Btl::recv_small`] up to
    /// `polls` times (more than once only where it
    /// [`Btl::polls_from_peer`]); from any source, each rank's in turn,
    /// from where the last such receive stopped, at most `polls` reads (or
    /// one round of up to [`ANY_SOURCE_SWEEP`] ranks if that is more), and
    /// nothing at all once [`ANY_SOURCE_RUN`] were taken in a row (so that
    /// the ordinary receive's progress serves the senders passed over). The
    /// receive's status, complete, with no
    /// request and no buffer object: what [`Ob1::irecv_polling`] would have
    /// answered, by the same rules ([`Engine::arrival_before_post`]), or
    /// from any source what posting the receive would have matched, and
    /// counted as it counts (`recv_arrived`). `None` has taken nothing:
    /// post the receive as usual, which also reports every error (a message
    /// that does not fit is truncation there).
    #[inline(always)]
    pub fn recv_small(
        &mut self,
        dst: &mut [u8],
        src: Source,
        tag: Tag,
        ctx: u16,
        polls: u32,
    ) -> Option<Status> {
        if !self.st.cfg.recv_arrived {
            return None;
        }
        let (want1, mask1) = match tag {
            // The engine's shortcuts answer for receives of user tags.
            Tag::Value(t) if t < 0 => return None,
            Tag::Value(t) => (u64::from(t as u32), 0xffff_ffff),
            // Any tag that is not negative (internal tags are).
            Tag::Any => (0, 0x8000_0000),
        };
        match src {
            Source::Rank(s) => self.recv_small_from(dst, s, [want1, mask1], ctx, polls),
            Source::Any => self.recv_small_any(dst, [want1, mask1], ctx, polls),
            Source::ProcNull => None,
        }
    }

    /// [`Ob1::recv_small`] from rank `src`, for the header's second word
    /// `tag_word` (pattern and mask).
    #[inline(always)]
    fn recv_small_from(
        &mut self,
        dst: &mut [u8],
        src: u32,
        tag_word: [u64; 2],
        ctx: u16,
        polls: u32,
    ) -> Option<Status> {
        let Self { btls, st, .. } = self;
        let (peer, b, ep) = st.eager_route(src, ctx)?;
        let seq = st.engine.fresh_seq(u32::from(ctx), src)?;
        let m = small_match(ctx, *seq, src, tag_word);
        let btl = &mut btls[b];
        let mut left = polls.max(1);
        let (hdr1, len) = loop {
            match btl.recv_small(ep, &m, dst) {
                SmallRecv::Taken { hdr1, len } => break (hdr1, len),
                // A pause between polls: with the pair lines (sm) the line
                // polled is the one the sender answers in; polling it flat
                // out takes it back while the other side is between reading
                // and answering (docs/performance.md).
                SmallRecv::Empty if left > 1 && btl.polls_from_peer() => {
                    left -= 1;
                    std::hint::spin_loop();
                }
                SmallRecv::Empty => {
                    st.read_empty = Some((src, ctx));
                    return None;
                }
                SmallRecv::Other => return None,
            }
        };
        *seq = seq.wrapping_add(1);
        Some(self.took_small(peer, src, hdr1, len))
    }

    /// [`Ob1::recv_small`] from any rank of `ctx`: each rank's eager
    /// channel in turn, from where the last such receive stopped (after the
    /// rank it took from), round after round while some rank's channel was
    /// empty and can be polled; at most `polls` reads, or one round of up to
    /// [`ANY_SOURCE_SWEEP`] ranks if that is more. After
    /// [`ANY_SOURCE_RUN`] takes in a row it takes nothing once, so that the
    /// ordinary receive's progress reads every component: the senders it
    /// passes over (a rank whose next fragment is not a small message, one
    /// over TCP or to itself) are not starved by ranks that always have a
    /// small message ready. Out of line: a receive from one rank never pays
    /// for it.
    #[inline(never)]
    fn recv_small_any(
        &mut self,
        dst: &mut [u8],
        tag_word: [u64; 2],
        ctx: u16,
        polls: u32,
    ) -> Option<Status> {
        let n = self.st.comms.get(usize::from(ctx))?.as_ref()?.world.len() as u32;
        let run = std::mem::take(&mut self.st.any_source_run);
        if n == 0 || run >= ANY_SOURCE_RUN || !self.st.engine.nothing_for_any_source(u32::from(ctx))
        {
            return None;
        }
        let mut left = polls.max(n.min(ANY_SOURCE_SWEEP));
        let (mut src, mut in_round, mut pollable) = (self.st.any_source_next % n, 0, false);
        while left > 0 {
            let Self { btls, st, .. } = self;
            let here = src;
            src = if src + 1 == n { 0 } else { src + 1 };
            (left, in_round) = (left - 1, in_round + 1);
            if let (Some((peer, b, ep)), Some(seq)) = (
                st.eager_route(here, ctx),
                st.engine.fresh_seq_any_source(u32::from(ctx), here),
            ) {
                let m = small_match(ctx, *seq, here, tag_word);
                let btl = &mut btls[b];
                match btl.recv_small(ep, &m, dst) {
                    SmallRecv::Taken { hdr1, len } => {
                        *seq = seq.wrapping_add(1);
                        st.any_source_next = src;
                        st.any_source_run = run + 1;
                        return Some(self.took_small(peer, here, hdr1, len));
                    }
                    SmallRecv::Empty => pollable |= btl.polls_from_peer(),
                    SmallRecv::Other => {}
                }
            }
            if in_round == n {
                if !pollable {
                    break;
                }
                (in_round, pollable) = (0, false);
            }
        }
        self.st.any_source_next = src;
        None
    }

    /// The bookkeeping of a small message taken from rank `src` (world
    /// rank `peer`), as `on_match_fresh` does it: credit, counters, queued
    /// actions; its status.
    #[inline(always)]
    fn took_small(&mut self, peer: u32, src: u32, hdr1: u64, len: usize) -> Status {
        let st = &mut self.st;
        st.return_credit(peer, len + MATCH_LEN);
        st.counters.bytes_received[peer as usize] += len as u64;
        st.counters.recv_arrived += 1;
        // A CREDIT for the sender, when enough was owed (and whatever else
        // waits, as after `recv_arrived`).
        if st.has_queued() {
            self.run_actions();
        }
        Status {
            source: src as i32,
            tag: hdr1 as u32 as i32,
            bytes: len,
            ..Status::default()
        }
    }

    /// The receive's handle when its message is found among what arrives
    /// from `src` within `polls` reads (one, more only where the BTL
    /// `polls_from_peer`; none when a fitting message is unexpected already,
    /// which posting takes, or when the small receive of the same call just
    /// found the channel empty, `State::read_empty`); `None`: post it.
    /// Inlined into both callers, so [`Ob1::irecv`]'s constant single read
    /// has no loop left.
    #[inline(always)]
    fn take_arrived(
        &mut self,
        buf: &Buffer,
        src: Source,
        tag: Tag,
        ctx: u16,
        polls: u32,
    ) -> Option<ReqId> {
        let (Source::Rank(s), true) = (src, self.st.cfg.recv_arrived) else {
            return None;
        };
        // The small receive of this same call just found the channel
        // empty: reading it again a moment later is all cost.
        if std::mem::take(&mut self.st.read_empty) == Some((s, ctx)) && polls <= 1 {
            return None;
        }
        // A fitting message already unexpected (left by a probe or an
        // earlier progress) is what posting takes at once (it came before
        // anything still in the channel from `s`): reading would only wait
        // for another.
        if self.st.engine.any_unexpected()
            && matches!(self.st.engine.iprobe(u32::from(ctx), src, tag), Ok(Some(_)))
        {
            return None;
        }
        let mut left = polls.max(1);
        loop {
            match self.recv_arrived(buf, s, tag, ctx) {
                Arrived::Taken(status) => return Some(ReqId::received_inline(status)),
                Arrived::Nothing(btl) => {
                    left -= 1;
                    if left == 0 || !self.btls[btl].polls_from_peer() {
                        return None;
                    }
                }
                Arrived::Stopped => return None,
            }
        }
    }

    /// Creates a receive and posts it (the end of [`Ob1::irecv`]).
    #[inline(always)]
    fn post_new_recv(
        &mut self,
        buf: Buffer,
        src: Source,
        tag: Tag,
        ctx: u16,
    ) -> Result<ReqId, PmlError> {
        let r = self.new_recv(buf, src, tag, ctx, false)?;
        // Created started, with its fields as `start_recv` would reset them.
        self.st.post_recv(r.0, ctx, src, tag);
        if self.st.has_queued() {
            self.run_actions();
        }
        Ok(r)
    }

    /// Reads what already arrived from `src` (of `ctx`) on its eager BTL
    /// before a receive `(src, tag)` into `buf` is posted: fragments go
    /// where they would have gone with the next progress, except that a
    /// message no posted receive takes, and that this receive would take
    /// once posted, completes it here (the status). Reading stops there, or
    /// once a message goes unexpected.
    fn recv_arrived(&mut self, buf: &Buffer, src: u32, tag: Tag, ctx: u16) -> Arrived {
        let Some((peer, btl, ep)) = self.st.eager_route(src, ctx) else {
            return Arrived::Stopped;
        };
        let mut fresh = Fresh {
            ctx,
            src,
            peer,
            tag,
            buf,
            got: None,
            stop: false,
        };
        let st = &mut self.st;
        let read = self.btls[btl].progress_from(ep, &mut |tag, data| {
            // Eager data for matching; anything else as progress handles it.
            if tag == HdrType::Match.am_tag() {
                if let Some((m, payload)) = MatchHdr::read(data) {
                    st.on_match_fresh(m, payload, btl, ep, &mut fresh);
                    return fresh.got.is_none() && !fresh.stop;
                }
            }
            Sink { st, btl }.on_recv(ep, tag, data);
            true
        });
        let got = fresh.got;
        if self.st.has_queued() {
            self.run_actions();
        }
        // A fragment read that was not ours (one that went unexpected
        // included): post now.
        match got {
            Some(status) => Arrived::Taken(status),
            None if read > 0 => Arrived::Stopped,
            None => Arrived::Nothing(btl),
        }
    }

    /// Creates an inactive persistent receive (`MPI_Recv_init`).
    pub fn recv_init(
        &mut self,
        buf: Buffer,
        src: Source,
        tag: Tag,
        ctx: u16,
    ) -> Result<ReqId, PmlError> {
        self.new_recv(buf, src, tag, ctx, true)
    }

    fn new_recv(
        &mut self,
        buf: Buffer,
        src: Source,
        tag: Tag,
        ctx: u16,
        persistent: bool,
    ) -> Result<ReqId, PmlError> {
        let comm = self.comm(ctx)?;
        if let Source::Rank(s) = src {
            if s as usize >= comm.world.len() {
                return Err(err(
                    ErrClass::Rank,
                    format!("source rank {s} of a communicator of {}", comm.world.len()),
                ));
            }
        }
        let r = self.st.reqs.alloc(|| Req {
            done: persistent,
            status: if persistent {
                Status::empty()
            } else {
                Status::default()
            },
            user_freed: false,
            persistent,
            // A non-persistent receive is created started.
            active: !persistent,
            kind: Kind::Recv(RecvReq {
                ctx,
                src,
                tag,
                buf,
                handle: None,
                matched: false,
                peer: 0,
                send_req: ReqRef::default(),
                msg_len: 0,
                got: 0,
                regs: Vec::new(),
                rkey: None,
                rflags: RndvFlags(0),
                split: 0,
                fin_owed: false,
                balance: false,
                get_ns: 0,
                put_ns: 0,
            }),
        });
        Ok(ReqId::of(r))
    }

    /// Starts a request (`MPI_Start`): a persistent request that is
    /// inactive, or a new one.
    pub fn start(&mut self, id: ReqId) -> Result<(), PmlError> {
        let r = id.0;
        let req = self
            .st
            .reqs
            .get_mut(r)
            .ok_or_else(|| err(ErrClass::Request, "invalid request"))?;
        if req.active {
            return Err(err(ErrClass::Request, "request is already active"));
        }
        req.active = true;
        req.done = false;
        req.status = Status::default();
        let send = matches!(req.kind, Kind::Send(_));
        // Work still queued for an earlier activation (a deferred copy, or
        // a retry, of a transfer that failed meanwhile) must not run on
        // this one: the request keeps its reference across activations.
        if !self.st.copies.is_empty() || !self.st.pending.is_empty() {
            self.st.copies.retain(|a| !names(a, r));
            self.st.pending.retain(|a| !names(a, r));
        }
        if send {
            self.start_send(r);
        } else {
            self.st.start_recv(r);
        }
        self.run_actions();
        Ok(())
    }

    fn start_send(&mut self, r: ReqRef) {
        let st = &mut self.st;
        let Some(Req {
            kind: Kind::Send(s),
            status,
            ..
        }) = st.reqs.get_mut(r)
        else {
            return;
        };
        status.bytes = s.len;
        status.tag = s.tag;
        let peer = s.peer as usize;
        if s.mode == SendMode::Buffered && !s.internal {
            st.counters.buffered += 1;
            st.bsend_start(r);
            return;
        }
        if let Some(why) = &st.dead[peer] {
            let why = why.clone();
            st.fail(r, ErrClass::ProcFailed, &why);
            return;
        }
        let Some((b, _)) = st.bml[peer].eager else {
            st.fail(r, ErrClass::Rank, "no BTL reaches this rank");
            return;
        };
        let Some(s) = st.reqs.send_mut(r) else {
            return;
        };
        // Reset for a (re)start.
        s.first_sent = false;
        s.first_done = false;
        s.acked = false;
        s.fin = false;
        s.sched_off = 0;
        s.end_off = 0;
        s.inflight = 0;
        s.put_expect = 0;
        s.put_done = 0;
        s.credit = 0;
        s.split = false;
        s.cancel = CancelState::None;
        s.seq = match st.seq.next_seq(u32::from(s.ctx), s.dst) {
            Ok(q) => q,
            Err(e) => {
                let msg = format!("{e:?}");
                st.fail(r, ErrClass::Comm, &msg);
                return;
            }
        };
        let lim = st.limits[b];
        let caps = st.caps[b];
        let len = s.len;
        let contig = s.buf.contig().is_some();
        let sync = s.mode == SendMode::Synchronous;
        let wire = len + MATCH_LEN;
        let has_credit = st.credits[peer] >= wire;
        if sync {
            st.counters.synchronous += 1;
        }
        if !sync && wire <= lim.eager_limit && has_credit {
            st.credits[peer] -= wire;
            s.credit = wire;
            s.need_ack = false;
            s.first_len = len;
            s.proto = if contig
                && caps.contains(Caps::SENDI)
                && len <= st.cfg.sendi_limit
                && wire <= lim.max_sendi_size
            {
                Proto::Sendi
            } else {
                Proto::Eager
            };
        } else {
            if !sync && wire <= lim.eager_limit && !has_credit {
                st.counters.rndv_forced_by_credits += 1;
            }
            let rdma_get = st.bml[peer]
                .rdma
                .first()
                .is_some_and(|&(i, _)| st.caps[i].contains(Caps::GET));
            s.need_ack = true;
            if contig && rdma_get && len > 0 {
                s.proto = Proto::Rget;
                s.first_len = 0;
                st.counters.rget += 1;
                if !s.rget_open {
                    s.rget_open = true;
                    st.rget_out[peer] += 1;
                }
            } else {
                s.proto = Proto::Rndv;
                let room = lim.rndv_eager_limit.saturating_sub(RNDV_LEN);
                let want = len
                    .min(room)
                    .min(lim.max_send_size.saturating_sub(RNDV_LEN));
                s.first_len = if st.credits[peer] >= want + RNDV_LEN {
                    want
                } else {
                    0
                };
                s.credit = s.first_len + RNDV_LEN;
                st.credits[peer] = st.credits[peer].saturating_sub(s.credit);
                st.counters.rndv += 1;
            }
        }
        self.drive_send(r);
    }

    /// Sends what a send request can send now: its first fragment, then
    /// pipeline fragments up to the depth. Idempotent; re-run from progress
    /// after NoResource or an ACK.
    fn drive_send(&mut self, r: ReqRef) {
        let Self { btls, st, .. } = self;
        let Some(s) = st.reqs.live_send_mut(r) else {
            return;
        };
        let peer = s.peer as usize;
        if !s.first_sent {
            let Some((b, ep)) = st.bml[peer].eager else {
                return;
            };
            let seq = s.seq;
            let comm_me = st.comms[usize::from(s.ctx)].as_ref().map_or(0, |c| c.me);
            let m = MatchHdr {
                ctx: s.ctx,
                seq,
                src: comm_me,
                tag: s.tag,
            };
            let mut flags = 0u16;
            if s.buf.contig().is_some() {
                flags |= RndvFlags::CONTIG;
                if st.bml[peer]
                    .rdma
                    .first()
                    .is_some_and(|&(i, _)| st.caps[i].contains(Caps::PUT))
                {
                    flags |= RndvFlags::PIN;
                }
            }
            if s.mode == SendMode::Synchronous {
                flags |= RndvFlags::SYNC;
            }
            let rndv = RndvHdr {
                m,
                flags: RndvFlags(flags),
                msg_len: s.len as u64,
                send_req: r,
            };
            let hdr = match s.proto {
                Proto::Sendi | Proto::Eager => Hdr::Match(m),
                Proto::Rndv => Hdr::Rndv(rndv),
                Proto::Rget => {
                    if s.reg.is_none() {
                        let (rb, _) = st.bml[peer].rdma[0];
                        let region = s.buf.contig().unwrap_or(MemRegion::EMPTY);
                        match st.rcache.acquire(
                            &mut *btls[rb],
                            rb,
                            region,
                            Access::REMOTE_READ,
                            &mut st.dereg,
                        ) {
                            Ok((reg, key)) => {
                                s.reg = Some(Box::new(reg));
                                s.rkey = Some(Box::new(key));
                            }
                            Err(e) => {
                                tracing::debug!("register for RGET failed ({e}); using RNDV");
                                s.proto = Proto::Rndv;
                                if s.rget_open {
                                    s.rget_open = false;
                                    let n = &mut st.rget_out[peer];
                                    *n = n.saturating_sub(1);
                                }
                                st.counters.rget -= 1;
                                st.counters.rndv += 1;
                                return st.actions.push_back(Action::Drive(r));
                            }
                        }
                    }
                    match s.rkey.as_deref() {
                        Some(&k) => Hdr::Rget(rndv, k),
                        None => {
                            st.fail(r, ErrClass::Intern, "registration lost");
                            return;
                        }
                    }
                }
            };
            let mut hb = [0u8; MAX_LEN];
            let hl = hdr.emit(&mut hb);
            let tag = hdr.kind().am_tag();
            let first = s.first_len;
            let lim = st.limits[b];
            let caps = st.caps[b];
            let tok_kind = TokKind::First;
            // Immediate send: header and data in one BTL call, no descriptor.
            let sent_now = if (s.proto == Proto::Sendi
                || (first <= st.cfg.sendi_limit
                    && hl + first <= lim.max_sendi_size
                    && caps.contains(Caps::SENDI)))
                && s.buf.contig().is_some()
            {
                let region = s.buf.contig().unwrap();
                let data = region.read();
                match btls[b].sendi(ep, tag, &[&hb[..hl], &data[..first]]) {
                    Ok(()) => {
                        if s.proto == Proto::Sendi {
                            st.counters.eager_sendi += 1;
                        }
                        true
                    }
                    Err(BtlError::NoResource) => false,
                    Err(e) => {
                        st.fail_btl(r, &e);
                        return;
                    }
                }
            } else {
                false
            };
            if sent_now {
                st.counters.bytes_sent[peer] += first as u64;
                if let Some(s) = st.reqs.send_mut(r) {
                    s.first_sent = true;
                    s.first_done = true;
                }
            } else {
                let Some(s) = st.reqs.send_mut(r) else {
                    return;
                };
                if s.proto == Proto::Sendi {
                    s.proto = Proto::Eager;
                }
                let inplace = caps.contains(Caps::SEND_INPLACE) && first > 0;
                let is_eager = s.proto == Proto::Eager;
                let buf = s.buf.clone();
                let Some(out) = send_frag(
                    btls[b].as_mut(),
                    st,
                    r,
                    (ep, tag, tok_kind),
                    &hb[..hl],
                    &buf,
                    (0, first),
                    inplace,
                ) else {
                    return;
                };
                if is_eager {
                    if inplace {
                        st.counters.eager_prepared += 1;
                    } else {
                        st.counters.eager_copy += 1;
                    }
                }
                st.counters.bytes_sent[peer] += first as u64;
                if let Some(s) = st.reqs.send_mut(r) {
                    s.first_sent = true;
                    if out == SendOutcome::Done {
                        s.first_done = true;
                    }
                }
            }
        }
        // Cancelled before the rendezvous left: ask now that it has.
        if let Some(s) = st.reqs.live_send(r) {
            if s.cancel == CancelState::Wanted && s.first_sent {
                st.send_cancel(r);
            }
        }
        // The send/receive pipeline, once acknowledged.
        loop {
            let Some(s) = st.reqs.live_send_mut(r) else {
                return;
            };
            if !s.acked || s.sched_off >= s.end_off || s.inflight >= st.cfg.send_pipeline_depth {
                break;
            }
            let peer = s.peer as usize;
            let eps = &mut st.bml[peer];
            let nsend = eps.send.len().min(st.cfg.max_send_per_range).max(1);
            let (b, ep) = eps.send[eps.rr % nsend];
            eps.rr = eps.rr.wrapping_add(1);
            let lim = st.limits[b];
            let chunk = (s.end_off - s.sched_off).min(lim.max_send_size.saturating_sub(FRAG_LEN));
            let off = s.sched_off;
            let hdr = Hdr::Frag {
                recv_req: s.recv_req,
                send_req: r,
                offset: off as u64,
            };
            let mut hb = [0u8; MAX_LEN];
            let hl = hdr.emit(&mut hb);
            let inplace = st.caps[b].contains(Caps::SEND_INPLACE);
            let buf = s.buf.clone();
            let Some(out) = send_frag(
                btls[b].as_mut(),
                st,
                r,
                (ep, HdrType::Frag.am_tag(), TokKind::Frag),
                &hb[..hl],
                &buf,
                (off, chunk),
                inplace,
            ) else {
                return;
            };
            st.counters.frags += 1;
            st.counters.bytes_sent[peer] += chunk as u64;
            if let Some(s) = st.reqs.send_mut(r) {
                s.sched_off += chunk;
                if out == SendOutcome::Pending {
                    s.inflight += 1;
                }
            }
        }
        self.st.check_send_done(r);
    }

    /// Runs queued actions, then retries what was refused for lack of
    /// resources (each once per call), as a call that posts or starts a
    /// request does it: an RDMA get or put (a copy of up to a whole message, by a system
    /// call of a hundred microseconds for a megabyte), and the decision on
    /// a matched RGET that leads to one, are not run here but left in
    /// `copies` for the next progress pass ([`Ob1::run_all_actions`]). So a
    /// call that posts returns at once and the next post follows: when both
    /// sides post receives and then sends (a bidirectional exchange), each
    /// side's rendezvous headers go out before either starts copying, both
    /// copy at once, and the split decision sees our own sends
    /// (`rget_out`). (Open MPI's ob1 posting calls do not read the BTLs
    /// at all; it gets inside `irecv` only for an RGET that an earlier
    /// progress left unexpected.) The cost: an `MPI_Irecv` that matches an
    /// RGET already here, followed by a long computation, holds the sender
    /// until the receiver's next MPI call.
    fn run_actions(&mut self) -> usize {
        self.run_actions_as(true)
    }

    /// Runs all the queued work: the progress pass's. Copies left by
    /// posting calls join the front of the retries, so each runs once per
    /// pass (one refused for lack of resources is not tried again in the
    /// same pass).
    fn run_all_actions(&mut self) -> usize {
        while let Some(a) = self.st.copies.pop_back() {
            self.st.pending.push_front(a);
        }
        self.run_actions_as(false)
    }

    /// Whether `a` copies data (an RDMA get or put), or decides how an RGET
    /// is copied (its split with the sender looks at our own sends to the
    /// peer, which a posting call may not have started yet): work that a
    /// posting call leaves for progress.
    fn is_copy(st: &State, a: &Action) -> bool {
        match a {
            Action::Get(_) | Action::Put(_) => true,
            Action::Rndv(r) => st.unexp_rndv_info(*r).is_some_and(|(k, _)| k.is_some()),
            _ => false,
        }
    }

    /// `a` to run now, or `None` having left it in `copies` (a posting
    /// call's copy, see [`Ob1::is_copy`]).
    fn runnable(&mut self, posting: bool, a: Action) -> Option<Action> {
        if posting && Self::is_copy(&self.st, &a) {
            self.st.copies.push_back(a);
            return None;
        }
        Some(a)
    }

    fn run_actions_as(&mut self, posting: bool) -> usize {
        let mut n = 0;
        while let Some((b, id)) = self.st.dereg.pop() {
            self.btls[b].deregister_mem(id);
        }
        while let Some(a) = self.st.actions.pop_front() {
            if let Some(a) = self.runnable(posting, a) {
                n += 1;
                self.run_action(a);
            }
        }
        // Retry what was refused, in order, until a retry is refused again
        // (the resource is still exhausted: the rest would be too).
        let retries = self.st.pending.len();
        for _ in 0..retries {
            let Some(a) = self.st.pending.pop_front() else {
                break;
            };
            let Some(a) = self.runnable(posting, a) else {
                continue;
            };
            let before = self.st.pending.len();
            self.run_action(a);
            while let Some(a) = self.st.actions.pop_front() {
                if let Some(a) = self.runnable(posting, a) {
                    self.run_action(a);
                }
            }
            if self.st.pending.len() <= before {
                // A refused operation went through: that is progress.
                n += 1;
            } else {
                // Put the refused one back in front of the untried ones.
                let refused = self.st.pending.pop_back().expect("just queued");
                self.st.pending.push_front(refused);
                break;
            }
        }
        n
    }

    fn run_action(&mut self, a: Action) {
        match a {
            Action::Ctl { peer, hdr } => self.send_ctl(peer, hdr, None),
            Action::CtlVia { peer, btl, hdr } => self.send_ctl(peer, hdr, Some(btl)),
            Action::Drive(r) => self.drive_send(r),
            Action::Start(r) => self.start_send(r),
            Action::Rndv(r) => self.rndv_matched(r),
            Action::Get(r) => self.issue_get(r),
            Action::Put(ask) => self.issue_put(ask),
        }
    }

    /// Sends a control header (ACK, FIN, NACK, CREDIT) to world rank `peer`.
    fn send_ctl(&mut self, peer: u32, hdr: Hdr, via: Option<usize>) {
        let Self { btls, st, .. } = self;
        if st.dead[peer as usize].is_some() {
            return;
        }
        let eps = &st.bml[peer as usize];
        let chosen = via.and_then(|v| {
            eps.rdma
                .iter()
                .chain(&eps.send)
                .find(|&&(i, _)| i == v)
                .copied()
        });
        let Some((b, ep)) = chosen.or(eps.eager) else {
            return;
        };
        let retry = |hdr| match via {
            Some(btl) => Action::CtlVia { peer, btl, hdr },
            None => Action::Ctl { peer, hdr },
        };
        let mut hb = [0u8; MAX_LEN];
        let hl = hdr.emit(&mut hb);
        let tag = hdr.kind().am_tag();
        let res = if st.caps[b].contains(Caps::SENDI) && hl <= st.limits[b].max_sendi_size {
            btls[b].sendi(ep, tag, &[&hb[..hl]])
        } else {
            Err(BtlError::NoResource)
        };
        match res {
            Ok(()) => return,
            Err(BtlError::NoResource) => {}
            Err(e) => {
                st.peer_failed(peer, &e.to_string());
                return;
            }
        }
        match btls[b].alloc(ep, hl) {
            Ok(mut d) => {
                d.buf[..hl].copy_from_slice(&hb[..hl]);
                let tok = st.alloc_tok(Tok {
                    req: ReqRef::default(),
                    kind: TokKind::Ctl,
                });
                match btls[b].send(d, tag, tok) {
                    Ok(SendOutcome::Done) => {
                        st.free_tok(tok);
                    }
                    Ok(SendOutcome::Pending) => {}
                    Err((d, BtlError::NoResource)) => {
                        st.free_tok(tok);
                        btls[b].free(d);
                        st.counters.no_resource += 1;
                        st.pending.push_back(retry(hdr));
                    }
                    Err((d, e)) => {
                        st.free_tok(tok);
                        btls[b].free(d);
                        st.peer_failed(peer, &e.to_string());
                    }
                }
            }
            Err(BtlError::NoResource) => {
                st.counters.no_resource += 1;
                st.pending.push_back(retry(hdr));
            }
            Err(e) => st.peer_failed(peer, &e.to_string()),
        }
    }

    /// The receiver's decision on a matched RNDV or RGET (seed 000: the
    /// sender proposes, the receiver decides).
    fn rndv_matched(&mut self, r: ReqRef) {
        let Self { btls, st, .. } = self;
        let min_direct;
        let Some(rr) = st.reqs.live_recv_mut(r) else {
            return;
        };
        let peer = rr.peer;
        let (key, flags) = match st.unexp_rndv_info(r) {
            Some(x) => x,
            None => return,
        };
        let Some(rr) = st.reqs.recv_mut(r) else {
            return;
        };
        let contig = rr.buf.contig();
        let fits = rr.msg_len <= rr.buf.len();
        let rdma = st.bml[peer as usize].rdma.first().copied();
        let send_req = rr.send_req;
        let first = rr.got;
        let msg_len = rr.msg_len;
        if let (Some(_key), Some(region), true, Some((b, _))) = (key, contig, fits, rdma) {
            if st.caps[b].contains(Caps::GET) {
                st.counters.rdma_get += 1;
                rr.fin_owed = true;
                // The parts others copy, by PUT from the sender: the share of
                // each other RDMA BTL (striping by bandwidth weight), and
                // part of our own share when the sender has a core to spare
                // (it is not itself getting from us), so both copy at once;
                // the part follows the measured speed of the two copies
                // (`split_share`, even halves until measured or when
                // `pml_ob1_rdma_split_balance` is off).
                let mut parts: Stripes<(usize, usize, usize)> = Stripes::new();
                let mut get_end = msg_len;
                let stripes = st.stripes(peer, b, Caps::PUT);
                if stripes.len() > 1 && msg_len >= STRIPE_MIN {
                    // Our BTL's share (the first, from 0) is ours to get.
                    let shares = st.stripe_shares(&stripes, 0, msg_len);
                    get_end = shares[0].2;
                    parts.extend(shares[1..].iter().copied().filter(|p| p.2 > p.1));
                }
                let split_min = st.cfg.rdma_split_min;
                // (With balancing off no split is timed, so the share stays
                // at half.)
                let at = (split_min > 0
                    && get_end >= split_min.max(128)
                    && st.caps[b].contains(Caps::PUT)
                    && st.rget_out[peer as usize] == 0)
                    .then(|| split_point(get_end, st.split_share[peer as usize]))
                    .flatten();
                let split = at.is_some();
                if let Some(h) = at {
                    parts.push((b, h, get_end));
                    get_end = h;
                }
                if !parts.is_empty() {
                    if let Some(keys) = st.register_all(btls, &parts, region, msg_len, r) {
                        if split {
                            st.counters.rdma_split += 1;
                        }
                        if parts.iter().any(|&(bi, _, _)| bi != b) {
                            st.counters.rdma_striped += 1;
                        }
                        let Some(rr) = st.reqs.recv_mut(r) else {
                            return;
                        };
                        rr.split = get_end;
                        rr.balance = split && parts.len() == 1 && st.cfg.rdma_split_balance;
                        rr.get_ns = 0;
                        rr.put_ns = 0;
                        for (&(bi, lo, hi), key) in parts.iter().zip(keys) {
                            st.actions.push_back(Action::CtlVia {
                                peer,
                                btl: bi,
                                hdr: Hdr::Put {
                                    send_req,
                                    recv_req: r,
                                    offset: lo as u64,
                                    len: (hi - lo) as u64,
                                    key,
                                },
                            });
                        }
                    }
                }
                st.actions.push_back(Action::Get(r));
                return;
            }
        }
        if let (true, Some(region), true, Some((b, _))) =
            (flags.has(RndvFlags::PIN), contig, fits, rdma)
        {
            if st.caps[b].contains(Caps::PUT) && msg_len > first {
                let lim = st.limits[b];
                min_direct = lim.min_rdma_pipeline_size;
                let rest = msg_len - first;
                let tail = lim.rdma_pipeline_send_length.min(rest);
                let middle = rest - tail;
                if middle > 0 {
                    // Striped over the RDMA BTLs by bandwidth weight; each
                    // BTL's share in its own fragment size when pipelined.
                    let mut stripes = st.stripes(peer, b, Caps::PUT);
                    if middle < STRIPE_MIN {
                        stripes.truncate(1);
                    }
                    let mut parts = st.stripe_shares(&stripes, first, first + middle);
                    parts.retain(|p| p.2 > p.1);
                    if let Some(keys) = st.register_all(btls, &parts, region, msg_len, r) {
                        st.actions.push_back(Action::Ctl {
                            peer,
                            hdr: Hdr::Ack {
                                send_req,
                                recv_req: r,
                                send_offset: (msg_len - tail) as u64,
                                send_len: tail as u64,
                            },
                        });
                        if tail > 0 {
                            st.counters.send_pipeline += 1;
                        }
                        let direct = middle <= min_direct;
                        if direct {
                            st.counters.rdma_put += 1;
                        } else {
                            st.counters.rdma_pipeline += 1;
                        }
                        if parts.len() > 1 {
                            st.counters.rdma_striped += 1;
                        }
                        for (&(bi, lo, hi), key) in parts.iter().zip(keys) {
                            let chunk = if direct {
                                hi - lo
                            } else {
                                st.limits[bi].rdma_pipeline_frag_size.max(1)
                            };
                            let mut off = lo;
                            while off < hi {
                                let len = chunk.min(hi - off);
                                st.actions.push_back(Action::CtlVia {
                                    peer,
                                    btl: bi,
                                    hdr: Hdr::Put {
                                        send_req,
                                        recv_req: r,
                                        offset: off as u64,
                                        len: len as u64,
                                        key,
                                    },
                                });
                                off += len;
                            }
                        }
                        return;
                    }
                }
            }
        }
        if key.is_some() || flags.has(RndvFlags::PIN) {
            st.counters.receiver_fallback += 1;
        }
        if msg_len > first {
            st.counters.send_pipeline += 1;
        }
        st.actions.push_back(Action::Ctl {
            peer,
            hdr: Hdr::Ack {
                send_req,
                recv_req: r,
                send_offset: first as u64,
                send_len: (msg_len - first) as u64,
            },
        });
    }

    fn issue_get(&mut self, r: ReqRef) {
        let Self { btls, st, .. } = self;
        let Some((key, _)) = st.unexp_rndv_info(r) else {
            return;
        };
        let Some(key) = key else { return };
        let Some(rr) = st.reqs.live_recv_mut(r) else {
            return;
        };
        let len = if rr.split > 0 { rr.split } else { rr.msg_len };
        let Some(region) = rr.buf.contig().and_then(|g| g.slice(0, len)) else {
            return;
        };
        let peer = rr.peer;
        let Some(&(b, ep)) = st.bml[peer as usize].rdma.first() else {
            return;
        };
        let tok = st.alloc_tok(Tok {
            req: r,
            kind: TokKind::Get(region.len()),
        });
        let t0 = Instant::now();
        match btls[b].get(ep, region, &key, 0, tok) {
            Ok(()) => {
                st.counters.rdma_bytes_by_btl[b] += region.len() as u64;
                if let Some(rr) = st.reqs.recv_mut(r) {
                    rr.get_ns = copy_nanos(t0);
                }
            }
            Err(BtlError::NoResource) => {
                st.free_tok(tok);
                st.counters.no_resource += 1;
                st.pending.push_back(Action::Get(r));
            }
            Err(e) => {
                st.free_tok(tok);
                tracing::debug!("RDMA get failed ({e}); falling back to the pipeline");
                st.get_failed(r);
            }
        }
    }

    fn issue_put(&mut self, ask: PutAsk) {
        let PutAsk {
            send_req,
            recv_req,
            offset,
            len,
            key,
            btl: via,
            peer: asker,
        } = ask;
        let Self { btls, st, .. } = self;
        let Some(s) = st.reqs.live_send_mut(send_req) else {
            // Nothing to put from (the send ended or never was): say so, or
            // the receiver would wait for these bytes forever.
            st.counters.bad_fragments += 1;
            st.actions.push_back(Action::Ctl {
                peer: asker,
                hdr: Hdr::Fin {
                    req: recv_req,
                    size: 0,
                    status: ErrClass::Intern.code(),
                    nanos: 0,
                },
            });
            return;
        };
        let Some(local) = s.buf.contig().and_then(|g| g.slice(offset, len)) else {
            st.fail(send_req, ErrClass::Intern, "PUT request past the message");
            return;
        };
        let peer = s.peer;
        // The BTL the request came over (the key is that BTL's); any RDMA
        // BTL if it cannot put.
        let rdma = &st.bml[peer as usize].rdma;
        let Some(&(b, ep)) = rdma
            .iter()
            .find(|&&(i, _)| i == via && st.caps[i].contains(Caps::PUT))
            .or(rdma.first())
        else {
            st.fail(
                send_req,
                ErrClass::Intern,
                "PUT request without an RDMA BTL",
            );
            return;
        };
        // Ordered with what follows on its endpoint: the FIN goes right
        // behind the put, over the same BTL, instead of on its completion.
        let ordered = st.caps[b].contains(Caps::PUT_ORDERED);
        let tok = st.alloc_tok(Tok {
            req: send_req,
            kind: TokKind::Put {
                recv_req,
                len,
                nanos: 0,
                ordered,
            },
        });
        let t0 = Instant::now();
        match btls[b].put(ep, local, &key, offset, tok) {
            Ok(()) => {
                if let Some(Some(Tok {
                    kind: TokKind::Put { nanos, .. },
                    ..
                })) = st.toks.get_mut(tok.0 as usize)
                {
                    *nanos = copy_nanos(t0);
                }
                if ordered {
                    st.actions.push_back(Action::CtlVia {
                        peer,
                        btl: b,
                        hdr: Hdr::Fin {
                            req: recv_req,
                            size: len as u64,
                            status: 0,
                            nanos: 0,
                        },
                    });
                }
                st.counters.puts += 1;
                st.counters.bytes_sent[peer as usize] += len as u64;
                st.counters.rdma_bytes_by_btl[b] += len as u64;
            }
            Err(BtlError::NoResource) => {
                st.free_tok(tok);
                st.counters.no_resource += 1;
                st.pending.push_back(Action::Put(ask));
            }
            Err(e) => {
                st.free_tok(tok);
                st.put_failed(send_req, recv_req, &e);
            }
        }
    }

    /// Drives every BTL once and runs the work that produced. Returns how
    /// many events happened (0: nothing to do).
    pub fn progress(&mut self) -> usize {
        let mut n = 0;
        self.st.tick = self.st.tick.wrapping_add(1);
        let idle_turn = self.st.tick % 8 == 0;
        for i in 0..self.btls.len() {
            if idle_turn || self.btls[i].has_work() {
                let mut sink = Sink {
                    st: &mut self.st,
                    btl: i,
                };
                n += self.btls[i].progress(&mut sink);
            }
        }
        if self.st.has_queued() || !self.st.copies.is_empty() {
            n += self.run_all_actions();
        }
        // Deregistrations of completed RDMA receives.
        n
    }

    /// Whether the request has completed (without consuming it).
    pub fn is_complete(&self, id: ReqId) -> Result<bool, PmlError> {
        if id.inline_status().is_some() {
            return Ok(true);
        }
        self.st
            .reqs
            .get(id.0)
            .map(|q| q.done)
            .ok_or_else(|| err(ErrClass::Request, "invalid request"))
    }

    /// `MPI_Test`: the status if the request completed, freeing a
    /// non-persistent request.
    pub fn test(&mut self, id: ReqId) -> Result<Option<Status>, PmlError> {
        if let Some(st) = id.inline_status() {
            return Ok(Some(st));
        }
        let q = self
            .st
            .reqs
            .get(id.0)
            .ok_or_else(|| err(ErrClass::Request, "invalid request"))?;
        if !q.done {
            return Ok(None);
        }
        let status = q.status;
        self.finish(id.0);
        Ok(Some(status))
    }

    fn finish(&mut self, r: ReqRef) {
        let Some(q) = self.st.reqs.get_mut(r) else {
            return;
        };
        if q.persistent {
            q.active = false;
            // Tested again while inactive, it gives the empty status.
            q.status = Status::empty();
        } else {
            // (`free`, looking the slot up again, not `free_live`: with
            // `free_live` here `test` stopped being inlined into the API's
            // waits, 53 more instructions per message in `api_hot_path`.)
            self.st.reqs.free(r);
        }
    }

    /// `MPI_Request_free`: the request is released once it completes.
    pub fn request_free(&mut self, id: ReqId) -> Result<(), PmlError> {
        if id.inline_status().is_some() {
            return Ok(());
        }
        let q = self
            .st
            .reqs
            .get_mut(id.0)
            .ok_or_else(|| err(ErrClass::Request, "invalid request"))?;
        if q.done || !q.active {
            self.st.reqs.free(id.0);
        } else {
            q.user_freed = true;
            q.persistent = false;
        }
        Ok(())
    }

    /// `MPI_Cancel`. A posted, unmatched receive is cancelled at once. A
    /// send is cancelled only while nothing of it has left this process
    /// (it is still queued for resources); otherwise it completes normally
    /// and its status says not cancelled, as MPI allows.
    pub fn cancel(&mut self, id: ReqId) -> Result<(), PmlError> {
        if id.inline_status().is_some() {
            // Eager and gone: it completes normally, not cancelled.
            return Ok(());
        }
        let r = id.0;
        let q = self
            .st
            .reqs
            .get_mut(r)
            .ok_or_else(|| err(ErrClass::Request, "invalid request"))?;
        if q.done {
            return Ok(());
        }
        match &mut q.kind {
            Kind::Recv(rr) => {
                if let (false, Some(h)) = (rr.matched, rr.handle) {
                    if self.st.engine.cancel(h).is_some() {
                        let q = self.st.reqs.get_mut(r).expect("checked");
                        q.status.cancelled = true;
                        q.status.bytes = 0;
                        self.st.complete(r);
                    }
                }
            }
            // A rendezvous the receiver has not matched can be dropped
            // there: CANCEL asks, CANCEL_ACK answers. An eager message
            // cannot be recalled (its sequence number is spoken for and its
            // data may be matched already): it completes normally.
            Kind::Send(s) => {
                let rndv = matches!(s.proto, Proto::Rndv | Proto::Rget);
                if rndv
                    && !s.internal
                    && !s.acked
                    && !s.fin
                    && !s.split
                    && s.cancel != CancelState::Sent
                {
                    if !s.first_sent {
                        s.cancel = CancelState::Wanted;
                    } else if s.peer == self.st.me {
                        self.cancel_to_self(r);
                    } else {
                        self.st.send_cancel(r);
                        self.run_actions();
                    }
                }
            }
        }
        Ok(())
    }

    /// The cancel of a rendezvous this process sent to itself, decided
    /// inside `MPI_Cancel` (as MPICH does): what the self BTL holds goes to
    /// matching first, then the rendezvous is taken out of the unexpected
    /// messages if nothing matched it, and the send completes cancelled.
    /// Through a CANCEL to itself instead, the message was gone at once
    /// (the CANCEL arrived with the next progress) while the request showed
    /// neither complete nor cancelled until the CANCEL_ACK that followed: a
    /// program that checked once, found it not cancelled and received the
    /// message waited for ever. If the rendezvous was not found (matched,
    /// or not delivered yet) the CANCEL goes as to any peer, and its answer
    /// decides.
    #[cold]
    fn cancel_to_self(&mut self, r: ReqRef) {
        self.progress();
        let Some(Req {
            done: false,
            kind: Kind::Send(s),
            ..
        }) = self.st.reqs.get(r)
        else {
            return;
        };
        if s.cancel == CancelState::Sent {
            return;
        }
        let (ctx, seq, tag) = (s.ctx, s.seq, s.tag);
        let me = self.st.me;
        let src = self.st.comms[usize::from(ctx)].as_ref().map_or(0, |c| c.me);
        if self.st.drop_unmatched_rndv(me, r, ctx, seq, src, tag) {
            if let Some(q) = self.st.reqs.get_mut(r) {
                q.status.cancelled = true;
            }
            self.st.check_send_done(r);
        } else {
            self.st.send_cancel(r);
            self.run_actions();
        }
    }

    /// `MPI_Iprobe`: a status for the earliest matching unexpected message.
    pub fn iprobe(&mut self, src: Source, tag: Tag, ctx: u16) -> Result<Option<Status>, PmlError> {
        self.comm(ctx)?;
        self.progress();
        match self.st.engine.iprobe(u32::from(ctx), src, tag) {
            Ok(None) => self.probe_source_dead(ctx, src).map_or(Ok(None), Err),
            Ok(Some(ProbeOutcome::ProcNull)) => Ok(Some(Status::proc_null())),
            Ok(Some(ProbeOutcome::Found(info))) => Ok(Some(Status {
                source: info.envelope.source as i32,
                tag: info.envelope.tag,
                bytes: info.len,
                error: None,
                cancelled: false,
                detail: 0,
            })),
            Err(e) => Err(err(ErrClass::Rank, format!("{e:?}"))),
        }
    }

    /// A probe that found nothing can never find anything: its source (or,
    /// for `MPI_ANY_SOURCE`, every other member) is dead. The error then.
    fn probe_source_dead(&self, ctx: u16, src: Source) -> Option<PmlError> {
        if self.st.n_dead == 0 {
            return None;
        }
        let comm = self.st.comms[usize::from(ctx)].as_ref()?;
        match src {
            Source::Rank(s) => {
                let peer = *comm.world.get(s as usize)?;
                let why = self.st.dead[peer as usize].as_ref()?;
                Some(err(ErrClass::ProcFailed, why.clone()))
            }
            Source::Any => no_live_sender(Some(comm), &self.st.dead).then(|| {
                err(
                    ErrClass::ProcFailed,
                    "MPI_ANY_SOURCE: every other member of the communicator is gone",
                )
            }),
            Source::ProcNull => None,
        }
    }

    /// `MPI_Improbe`: takes the earliest matching message out of matching.
    /// `Ok(Some(None))` is the `MPI_PROC_NULL` case (`MPI_MESSAGE_NO_PROC`).
    pub fn improbe(
        &mut self,
        src: Source,
        tag: Tag,
        ctx: u16,
    ) -> Result<Option<Option<Message>>, PmlError> {
        self.comm(ctx)?;
        self.progress();
        match self.st.engine.improbe(u32::from(ctx), src, tag) {
            Ok(None) => self.probe_source_dead(ctx, src).map_or(Ok(None), Err),
            Ok(Some(ProbeOutcome::ProcNull)) => Ok(Some(None)),
            Ok(Some(ProbeOutcome::Found(h))) => Ok(Some(Some(Message {
                ctx,
                env: h.envelope,
                len: h.len,
                slot: h.msg,
            }))),
            Err(e) => Err(err(ErrClass::Rank, format!("{e:?}"))),
        }
    }

    /// `MPI_Imrecv`: receives a message taken by [`Ob1::improbe`].
    pub fn imrecv(&mut self, buf: Buffer, msg: Message) -> Result<ReqId, PmlError> {
        let id = self.new_recv(
            buf,
            Source::Rank(msg.env.source),
            Tag::Value(msg.env.tag),
            msg.ctx,
            false,
        )?;
        self.st.matched(id.0, msg.slot, msg.env, None);
        self.run_actions();
        Ok(id)
    }

    /// `MPI_Buffer_attach`.
    pub fn buffer_attach(&mut self, region: MemRegion) -> Result<(), PmlError> {
        if self.st.bsend.is_some() {
            return Err(err(ErrClass::Buffer, "a buffer is already attached"));
        }
        self.st.bsend = Some(Bsend {
            region,
            used: Vec::new(),
        });
        Ok(())
    }

    /// Whether buffered sends still occupy the attached buffer.
    pub fn buffer_busy(&self) -> bool {
        self.st.bsend.as_ref().is_some_and(|b| !b.used.is_empty())
    }

    /// `MPI_Buffer_detach` once [`Ob1::buffer_busy`] is false: returns the
    /// region.
    pub fn buffer_detach(&mut self) -> Result<MemRegion, PmlError> {
        match &self.st.bsend {
            None => Err(err(ErrClass::Buffer, "no buffer is attached")),
            Some(b) if !b.used.is_empty() => Err(err(
                ErrClass::Pending,
                "buffered messages are still in flight",
            )),
            Some(b) => {
                let r = b.region;
                self.st.bsend = None;
                Ok(r)
            }
        }
    }

    /// Whether a started, not yet complete request uses context `ctx`
    /// (`MPI_Comm_free` defers the release of such a communicator).
    pub fn comm_busy(&self, ctx: u16) -> bool {
        self.st.reqs.slots.iter().any(|s| {
            s.req.as_ref().is_some_and(|q| {
                q.active
                    && !q.done
                    && match &q.kind {
                        Kind::Send(s) => s.ctx == ctx,
                        Kind::Recv(r) => r.ctx == ctx,
                    }
            })
        })
    }

    /// Requests started and not yet complete (including freed ones).
    pub fn active_requests(&self) -> usize {
        self.st
            .reqs
            .slots
            .iter()
            .filter(|s| s.req.as_ref().is_some_and(|q| q.active && !q.done))
            .count()
    }

    /// The active requests (freed ones included) that `MPI_Finalize` still
    /// waits for: every one but those that wait for a matching call that
    /// may never come, a posted receive nothing matched and a rendezvous or
    /// synchronous send whose receiver has not answered (nothing matched
    /// it there, as far as this process knows). Those are abandoned at
    /// finalize, as MPICH abandons them: waiting for them hung the program
    /// for ever. Once every process has got this far (finalize's barrier),
    /// no process can post a receive any more, and every message a peer
    /// matched before has been answered: the peer waits here for its
    /// matched receives, whose data only we can send.
    pub fn finalize_waits_for(&self) -> usize {
        self.st
            .reqs
            .slots
            .iter()
            .filter(|s| {
                s.req
                    .as_ref()
                    .is_some_and(|q| q.active && !q.done && !q.waits_for_a_match())
            })
            .count()
    }

    /// Whether any world rank has been reported lost.
    pub fn any_dead_peer(&self) -> bool {
        self.st.n_dead > 0
    }

    /// World rank `peer` is dead by word of the launcher (Hydra's
    /// `PMI_dead_processes`): as when a BTL loses it, every request that
    /// needs it fails with `MPI_ERR_PROC_FAILED` and later operations on it
    /// fail at once. Ranks out of range, and this rank, are ignored.
    pub fn peer_reported_dead(&mut self, peer: u32) {
        if peer != self.st.me && (peer as usize) < self.st.dead.len() {
            self.st
                .peer_failed(peer, "the launcher reports the process dead");
        }
    }

    /// Whether world rank `peer` is known to be dead.
    pub fn is_peer_dead(&self, peer: u32) -> bool {
        self.st.dead.get(peer as usize).is_some_and(Option::is_some)
    }

    /// Whether some BTL still holds outgoing work (queued fragments,
    /// completions) or operations wait for resources (finalize drains it).
    pub fn has_work(&self) -> bool {
        !self.st.actions.is_empty()
            || !self.st.pending.is_empty()
            || !self.st.copies.is_empty()
            || self.btls.iter().any(|b| !b.is_drained())
    }

    /// Closes every BTL (end of finalize): every peer then counts as lost,
    /// so later operations fail instead of touching a transport.
    pub fn close(&mut self) {
        self.st.rcache.close(&mut self.st.dereg);
        while let Some((b, id)) = self.st.dereg.pop() {
            if let Some(btl) = self.btls.get_mut(b) {
                btl.deregister_mem(id);
            }
        }
        self.btls.clear();
        for eps in &mut self.st.bml {
            *eps = PeerEps::default();
        }
        for d in &mut self.st.dead {
            d.get_or_insert_with(|| "MPI is finalized".to_string());
        }
        self.st.n_dead = self.st.dead.len();
    }

    /// The reason world rank `peer` is lost, if it is.
    pub fn dead_peer(&self, peer: u32) -> Option<&str> {
        self.st.dead.get(peer as usize)?.as_deref()
    }
}

/// A descriptor holding `hdr` and bytes `[off, off + len)` of `buf`: the
/// data referenced in place when `inplace` and contiguous, else packed in.
fn prepare_desc<B: ?Sized + Btl>(
    btl: &mut B,
    ep: Endpoint,
    hdr: &[u8],
    buf: &Buffer,
    (off, len): (usize, usize),
    inplace: bool,
) -> Result<Descriptor, BtlError> {
    let hl = hdr.len();
    match buf.contig() {
        Some(region) if inplace => btl
            .prepare_src(ep, hl, region.slice(off, len).unwrap_or(MemRegion::EMPTY))
            .map(|mut d| {
                d.buf[..hl].copy_from_slice(hdr);
                d
            }),
        _ => btl.alloc(ep, hl + len).map(|mut d| {
            d.buf[..hl].copy_from_slice(hdr);
            buf.pack(off, &mut d.buf[hl..hl + len]);
            d
        }),
    }
}

/// A fragment the BTL did not take: queued for a retry from progress on
/// `NoResource`, the request failed otherwise. Always `None`, for
/// [`send_frag`] to return.
fn frag_refused(st: &mut State, r: ReqRef, e: &BtlError) -> Option<SendOutcome> {
    if *e == BtlError::NoResource {
        st.counters.no_resource += 1;
        st.pending.push_back(Action::Drive(r));
    } else {
        st.fail_btl(r, e);
    }
    None
}

/// Builds a descriptor of header `hdr` followed by message bytes
/// `[off, off + len)` of `buf` (referenced in place when `inplace` and the
/// buffer is contiguous, packed otherwise) and sends it with a token for
/// request `r`. Returns the outcome; `None` when the BTL refused (the
/// request is queued for a retry from progress) or failed (the request is
/// failed): the caller then stops.
#[allow(clippy::too_many_arguments)]
fn send_frag<B: ?Sized + Btl>(
    btl: &mut B,
    st: &mut State,
    r: ReqRef,
    (ep, tag, kind): (Endpoint, AmTag, TokKind),
    hdr: &[u8],
    buf: &Buffer,
    (off, len): (usize, usize),
    inplace: bool,
) -> Option<SendOutcome> {
    if !(inplace && buf.contig().is_some()) {
        // Packed: straight into the BTL's memory where it can.
        let mut pack = |out: &mut [u8]| {
            buf.pack(off, out);
        };
        match btl.send_packed(ep, tag, hdr, len, &mut pack) {
            Ok(true) => return Some(SendOutcome::Done),
            Ok(false) => {}
            Err(e) => return frag_refused(st, r, &e),
        }
    }
    let desc = match prepare_desc(btl, ep, hdr, buf, (off, len), inplace) {
        Ok(d) => d,
        Err(e) => return frag_refused(st, r, &e),
    };
    let tok = st.alloc_tok(Tok { req: r, kind });
    match btl.send(desc, tag, tok) {
        Ok(out) => {
            if out == SendOutcome::Done {
                st.free_tok(tok);
            }
            Some(out)
        }
        Err((d, e)) => {
            st.free_tok(tok);
            btl.free(d);
            frag_refused(st, r, &e)
        }
    }
}

impl Status {
    /// The empty status (MPI 3.7.3) of an inactive persistent request:
    /// source `MPI_ANY_SOURCE`, tag `MPI_ANY_TAG`, nothing received.
    pub fn empty() -> Status {
        Status {
            source: ANY_SOURCE_STATUS,
            tag: ANY_TAG_STATUS,
            bytes: 0,
            error: None,
            cancelled: false,
            detail: 0,
        }
    }

    /// The empty status of an operation on `MPI_PROC_NULL`.
    pub fn proc_null() -> Status {
        Status {
            source: PROC_NULL_STATUS,
            tag: ANY_TAG_STATUS,
            bytes: 0,
            error: None,
            cancelled: false,
            detail: 0,
        }
    }
}

impl State {
    fn alloc_tok(&mut self, t: Tok) -> Token {
        if let Some(i) = self.free_toks.pop() {
            self.toks[i as usize] = Some(t);
            Token(u64::from(i))
        } else {
            self.toks.push(Some(t));
            Token(self.toks.len() as u64 - 1)
        }
    }

    fn free_tok(&mut self, t: Token) -> Option<Tok> {
        let slot = self.toks.get_mut(t.0 as usize)?;
        let tok = slot.take()?;
        self.free_toks.push(t.0 as u32);
        Some(tok)
    }

    /// Marks a request complete; a request freed by the user while active
    /// goes away now, and an internal (buffered-send) one releases its
    /// space in the attached buffer.
    fn complete(&mut self, r: ReqRef) {
        let State {
            reqs,
            rcache,
            dereg,
            rget_out,
            bsend,
            ..
        } = self;
        if let Some(q) = reqs.get_mut(r) {
            if close_req(q, rcache, dereg, rget_out, bsend) {
                reqs.free_live(r.index);
            }
        }
    }

    fn fail(&mut self, r: ReqRef, class: ErrClass, why: &str) {
        tracing::debug!(?r, ?class, "request failed: {why}");
        if let Some(q) = self.reqs.get_mut(r) {
            q.status.error = Some(class);
            q.status.detail = crate::error::reasons::record(why);
            if let Kind::Recv(rr) = &mut q.kind {
                if let (false, Some(h)) = (rr.matched, rr.handle.take()) {
                    self.engine.cancel(h);
                }
            }
        }
        self.complete(r);
    }

    /// A put of ours failed: fail the send, and tell the receiver, which
    /// would otherwise wait for those bytes forever.
    fn put_failed(&mut self, send_req: ReqRef, recv_req: ReqRef, e: &BtlError) {
        if let Some(s) = self.reqs.send(send_req) {
            let peer = s.peer;
            self.actions.push_back(Action::Ctl {
                peer,
                hdr: Hdr::Fin {
                    req: recv_req,
                    size: 0,
                    status: 1,
                    nanos: 0,
                },
            });
        }
        self.fail_btl(send_req, e);
    }

    fn fail_btl(&mut self, r: ReqRef, e: &BtlError) {
        if let BtlError::PeerGone(..) = e {
            if let Some(s) = self.reqs.send(r) {
                let p = s.peer;
                self.peer_failed(p, &e.to_string());
            }
        }
        self.fail(r, btl_err(e), &e.to_string());
    }

    /// A peer is gone: every request that needs it fails with
    /// `MPI_ERR_PROC_FAILED`; later operations on it fail at once.
    fn peer_failed(&mut self, peer: u32, why: &str) {
        if self.dead[peer as usize].is_some() {
            return;
        }
        tracing::debug!(peer, "peer lost: {why}");
        self.dead[peer as usize] = Some(format!("rank {peer} is gone: {why}"));
        self.n_dead += 1;
        let (comms, dead) = (&self.comms, &self.dead);
        let victims = self.reqs.live_where(|kind| match kind {
            Kind::Send(snd) => snd.peer == peer,
            Kind::Recv(rr) => {
                (rr.matched && rr.peer == peer)
                    || match rr.src {
                        Source::Rank(src) => comms[usize::from(rr.ctx)]
                            .as_ref()
                            .is_some_and(|c| c.world.get(src as usize) == Some(&peer)),
                        Source::Any => {
                            !rr.matched && no_live_sender(comms[usize::from(rr.ctx)].as_ref(), dead)
                        }
                        Source::ProcNull => false,
                    }
            }
        });
        let msg = format!("rank {peer} is gone: {why}");
        for r in victims {
            self.fail(r, ErrClass::ProcFailed, &msg);
        }
    }

    fn check_send_done(&mut self, r: ReqRef) {
        let Some(Req {
            kind: Kind::Send(s),
            done: false,
            status,
            ..
        }) = self.reqs.get(r)
        else {
            return;
        };
        // Cancelled (the receiver dropped it): done once the first
        // fragment's own send has completed.
        let done = s.first_done
            && (status.cancelled
                || match s.proto {
                    Proto::Rget => s.fin,
                    _ if s.need_ack => {
                        s.acked
                            && s.sched_off >= s.end_off
                            && s.inflight == 0
                            && s.put_done >= s.put_expect
                            && (!s.split || s.fin)
                    }
                    _ => true,
                });
        if done {
            self.complete(r);
        }
    }

    fn check_recv_done(&mut self, r: ReqRef) {
        let State {
            reqs,
            actions,
            rcache,
            dereg,
            ..
        } = self;
        let Some(q) = reqs.get_mut(r) else {
            return;
        };
        let Kind::Recv(rr) = &q.kind else {
            return;
        };
        if q.done || !(rr.matched && rr.got >= rr.msg_len) {
            return;
        }
        if rr.fin_owed {
            // Every byte is in (whichever part landed last): the sender may
            // finish.
            actions.push_back(Action::Ctl {
                peer: rr.peer,
                hdr: Hdr::Fin {
                    req: rr.send_req,
                    size: rr.msg_len as u64,
                    status: 0,
                    nanos: 0,
                },
            });
        }
        if recv_complete(q, rcache, dereg) {
            reqs.free_live(r.index);
        }
    }

    fn start_recv(&mut self, r: ReqRef) {
        let Some(rr) = self.reqs.recv_mut(r) else {
            return;
        };
        rr.matched = false;
        rr.got = 0;
        rr.msg_len = 0;
        rr.split = 0;
        rr.fin_owed = false;
        rr.balance = false;
        rr.handle = None;
        let (ctx, src, tag) = (rr.ctx, rr.src, rr.tag);
        self.post_recv(r, ctx, src, tag);
    }

    /// Posts receive `r` (fresh or reset by `start_recv`) for matching.
    fn post_recv(&mut self, r: ReqRef, ctx: u16, src: Source, tag: Tag) {
        match self.engine.post_recv(u32::from(ctx), src, tag, r) {
            Ok(PostOutcome::Posted(h)) => {
                if let Some(rr) = self.reqs.recv_mut(r) {
                    rr.handle = Some(h);
                }
                if let (Source::Rank(s), 1..) = (src, self.n_dead) {
                    let peer = self.comms[usize::from(ctx)]
                        .as_ref()
                        .map_or(0, |c| c.world[s as usize]);
                    if let Some(why) = self.dead[peer as usize].clone() {
                        self.fail(r, ErrClass::ProcFailed, &why);
                    }
                } else if let (Source::Any, 1..) = (src, self.n_dead) {
                    let comm = self.comms[usize::from(ctx)].as_ref();
                    if no_live_sender(comm, &self.dead) {
                        self.fail(
                            r,
                            ErrClass::ProcFailed,
                            "MPI_ANY_SOURCE: every other member of the communicator is gone",
                        );
                    }
                }
            }
            Ok(PostOutcome::Matched(m)) => self.matched(r, m.msg, m.envelope, None),
            Ok(PostOutcome::ProcNull { .. }) => {
                if let Some(q) = self.reqs.get_mut(r) {
                    q.status = Status::proc_null();
                }
                self.complete(r);
            }
            Err(e) => self.fail(r, ErrClass::Rank, &format!("{e:?}")),
        }
    }

    fn alloc_unexp(&mut self, kind: UnexpKind, peer: u32, credit: usize) -> u32 {
        let data = self.spare.pop().unwrap_or_default();
        let m = UnexpMsg {
            kind,
            peer,
            credit,
            data,
        };
        if let Some(i) = self.free_unexp.pop() {
            self.unexp[i as usize] = Some(m);
            i
        } else {
            self.unexp.push(Some(m));
            self.unexp.len() as u32 - 1
        }
    }

    fn free_unexp(&mut self, i: u32) -> Option<UnexpMsg> {
        let m = self.unexp.get_mut(i as usize)?.take()?;
        self.free_unexp.push(i);
        Some(m)
    }

    fn store_unexp(&mut self, i: u32, payload: &[u8]) {
        if let Some(Some(m)) = self.unexp.get_mut(i as usize) {
            m.data.clear();
            m.data.extend_from_slice(payload);
        }
    }

    /// The BTLs one RDMA transfer to `peer` stripes over: `first`, then the
    /// peer's other RDMA BTLs with `cap` (by bandwidth), at most
    /// `pml_ob1_max_rdma_per_request` in all.
    fn stripes(&self, peer: u32, first: usize, cap: Caps) -> Stripes<usize> {
        let mut v = Stripes::new();
        v.push(first);
        for &(i, _) in &self.bml[peer as usize].rdma {
            if v.len() >= self.cfg.max_rdma_per_request {
                break;
            }
            if i != first && self.caps[i].contains(cap) {
                v.push(i);
            }
        }
        v
    }

    /// The receiving side of a CANCEL: takes the rendezvous of `peer`'s
    /// send request `send_req` (round `seq`, rank `src` of `ctx`, `tag`)
    /// out of the unexpected messages if it is still there, unmatched;
    /// whether it was (the CANCEL_ACK's answer).
    fn drop_unmatched_rndv(
        &mut self,
        peer: u32,
        send_req: ReqRef,
        ctx: u16,
        seq: u16,
        src: u32,
        tag: i32,
    ) -> bool {
        // Only this sender's rendezvous for that request, and only while
        // it waits unmatched.
        let unexp = &self.unexp;
        let taken = self
            .engine
            .take_unexpected(u32::from(ctx), src, tag, |&slot| {
                matches!(
                    unexp.get(slot as usize),
                    Some(Some(UnexpMsg {
                        kind: UnexpKind::Rndv { hdr, .. },
                        peer: p,
                        ..
                    })) if *p == peer && hdr.send_req == send_req && hdr.m.seq == seq
                )
            });
        match taken.and_then(|h| self.free_unexp(h.msg)) {
            Some(m) => {
                self.return_credit(m.peer, m.credit);
                let mut d = m.data;
                d.clear();
                self.spare.push(d);
                self.counters.sends_cancelled += 1;
                true
            }
            None => false,
        }
    }

    /// Sends the CANCEL of send request `r` (its rendezvous has left).
    fn send_cancel(&mut self, r: ReqRef) {
        let Some(s) = self.reqs.send_mut(r) else {
            return;
        };
        s.cancel = CancelState::Sent;
        let hdr = Hdr::Cancel {
            send_req: r,
            ctx: s.ctx,
            seq: s.seq,
            src: self.comms[usize::from(s.ctx)].as_ref().map_or(0, |c| c.me),
            tag: s.tag,
        };
        self.actions.push_back(Action::Ctl { peer: s.peer, hdr });
    }

    /// `[lo, hi)` cut over `stripes` by their BTLs' bandwidth: one
    /// `(btl, lo, hi)` per stripe, in order (a part may be empty).
    fn stripe_shares(
        &self,
        stripes: &[usize],
        lo: usize,
        hi: usize,
    ) -> Stripes<(usize, usize, usize)> {
        let weights: Stripes<u64> = stripes
            .iter()
            .map(|&i| u64::from(self.limits[i].bandwidth))
            .collect();
        stripes
            .iter()
            .zip(weighted_shares(lo, hi, &weights))
            .map(|(&b, (l, h))| (b, l, h))
            .collect()
    }

    /// Registers receive request `r`'s buffer (`region`, the first
    /// `msg_len` bytes) for remote writes with every BTL of `parts`; the
    /// key for each part, in order. On any failure nothing stays
    /// registered and the caller takes another way.
    fn register_all<B: ?Sized + Btl>(
        &mut self,
        btls: &mut [Box<B>],
        parts: &[(usize, usize, usize)],
        region: MemRegion,
        msg_len: usize,
        r: ReqRef,
    ) -> Option<Stripes<RemoteKey>> {
        let whole = region.slice(0, msg_len)?;
        let State {
            reqs,
            rcache,
            dereg,
            ..
        } = self;
        let rr = reqs.recv_mut(r)?;
        let before = rr.regs.len();
        let mut by_btl: Stripes<(usize, RemoteKey)> = Stripes::new();
        for &(b, _, _) in parts {
            if by_btl.iter().any(|&(x, _)| x == b) {
                continue;
            }
            match rcache.acquire(&mut *btls[b], b, whole, Access::REMOTE_WRITE, dereg) {
                Ok((reg, key)) => {
                    rr.regs.push(reg);
                    by_btl.push((b, key));
                }
                Err(e) => {
                    tracing::debug!("register for RDMA over {}: {e}", btls[b].name());
                    for reg in rr.regs.drain(before..) {
                        rcache.release(reg, dereg);
                    }
                    return None;
                }
            }
        }
        Some(
            parts
                .iter()
                .map(|&(b, _, _)| {
                    by_btl
                        .iter()
                        .find(|&&(x, _)| x == b)
                        .map(|&(_, k)| k)
                        .expect("registered above")
                })
                .collect(),
        )
    }

    /// RNDV information of a matched receive (kept in the request while the
    /// receiver decides): the key for RGET and the flags.
    fn unexp_rndv_info(&self, r: ReqRef) -> Option<(Option<RemoteKey>, RndvFlags)> {
        match self.reqs.get(r) {
            Some(Req {
                kind: Kind::Recv(rr),
                ..
            }) => Some((rr.rkey.as_deref().copied(), rr.rflags)),
            _ => None,
        }
    }

    /// What [`Ob1::sendi_bytes`] and [`Ob1::send_eager_now`] both ask
    /// before a send of `len` bytes completes inside the call: our rank in
    /// `ctx`, the peer's world rank, its eager BTL and endpoint. `None` (the
    /// request path) for a queued action (it may start an earlier send, a
    /// buffered send's copy, that has no sequence number yet and must not
    /// be overtaken), an unknown or dead peer, or too little eager credit
    /// for the data and its MATCH header.
    #[inline(always)]
    fn eager_now_route(
        &self,
        len: usize,
        dst: u32,
        ctx: u16,
    ) -> Option<(u32, usize, usize, Endpoint)> {
        if !self.actions.is_empty() {
            return None;
        }
        // The lookups of `eager_route`, written out: called here they cost
        // each send 6 to 8 instructions more (callgrind,
        // `examples/sm_recv_path.rs`'s send window: 514.7 -> 520.7).
        let comm = self.comms.get(usize::from(ctx))?.as_ref()?;
        let (me, p) = (comm.me, *comm.world.get(dst as usize)? as usize);
        let (b, ep) = self.bml[p].eager?;
        if self.dead[p].is_some() || self.credits[p] < len + MATCH_LEN {
            return None;
        }
        Some((me, p, b, ep))
    }

    /// The world rank of `rank` in `ctx` and its eager BTL and endpoint
    /// (`None`: no such communicator or rank, or no eager BTL), for a
    /// receive reading what arrived before it is posted.
    #[inline(always)]
    fn eager_route(&self, rank: u32, ctx: u16) -> Option<(u32, usize, Endpoint)> {
        let comm = self.comms.get(usize::from(ctx))?.as_ref()?;
        let peer = *comm.world.get(rank as usize)?;
        let (btl, ep) = self.bml.get(peer as usize)?.eager?;
        Some((peer, btl, ep))
    }

    /// Returns eager credit to a sender once its bytes left our queues.
    #[inline]
    fn return_credit(&mut self, peer: u32, bytes: usize) {
        let Some(owed) = self.owed.get_mut(peer as usize) else {
            return;
        };
        *owed += bytes;
        if *owed >= self.cfg.eager_credits / 4 && bytes > 0 {
            self.queue_credit(peer);
        }
    }

    /// Sends what `peer` is owed back (a CREDIT header).
    #[cold]
    fn queue_credit(&mut self, peer: u32) {
        let b = std::mem::take(&mut self.owed[peer as usize]);
        self.counters.credits_returned += 1;
        self.actions.push_back(Action::Ctl {
            peer,
            hdr: Hdr::Credit { bytes: b as u64 },
        });
    }

    /// A receive met its message (on posting, on arrival, or by mrecv).
    /// `payload` is the fragment still in the BTL's buffer when the match
    /// happens on arrival; otherwise the data waits in the unexpected slot.
    fn matched(&mut self, r: ReqRef, slot: u32, env: Envelope, payload: Option<&[u8]>) {
        let Some(msg) = self.free_unexp(slot) else {
            self.fail(r, ErrClass::Intern, "matched message vanished");
            return;
        };
        self.return_credit(msg.peer, msg.credit);
        if let UnexpKind::Eager = msg.kind {
            self.take_eager(r, env, msg.peer, payload.unwrap_or(&msg.data));
            let mut data = msg.data;
            data.clear();
            self.spare.push(data);
            return;
        }
        let data: &[u8] = payload.unwrap_or(&msg.data);
        let Some(rr) = self.reqs.matched_recv(r, env, msg.peer) else {
            return;
        };
        match msg.kind {
            UnexpKind::Eager => unreachable!("handled above"),
            UnexpKind::Rndv { hdr, key } => {
                rr.buf.unpack(0, data);
                rr.msg_len = hdr.msg_len as usize;
                rr.got = data.len();
                rr.send_req = hdr.send_req;
                self.counters.bytes_received[msg.peer as usize] += data.len() as u64;
                let mut m = msg;
                m.data.clear();
                self.spare.push(m.data);
                if rr.got >= rr.msg_len {
                    // The RNDV carried everything (a synchronous send, a
                    // zero-length send forced to rendezvous by credits, or
                    // rndv_eager_limit above eager_limit): the sender still
                    // waits for our ACK, which says nothing more is wanted.
                    self.actions.push_back(Action::Ctl {
                        peer: m.peer,
                        hdr: Hdr::Ack {
                            send_req: hdr.send_req,
                            recv_req: r,
                            send_offset: hdr.msg_len,
                            send_len: 0,
                        },
                    });
                    self.check_recv_done(r);
                } else {
                    rr.rkey = key.map(Box::new);
                    rr.rflags = hdr.flags;
                    self.actions.push_back(Action::Rndv(r));
                }
            }
        }
    }

    /// Whether actions, refused operations or deregistrations wait for
    /// [`Ob1::run_actions`].
    #[inline]
    fn has_queued(&self) -> bool {
        !self.actions.is_empty() || !self.pending.is_empty() || !self.dereg.is_empty()
    }

    /// An eager message (a MATCH fragment) arrived over BTL `btl`.
    #[inline]
    fn on_match(&mut self, m: MatchHdr, payload: &[u8], btl: usize, ep: Endpoint) {
        let Some(peer) = self.peer_of(m.ctx, m.src, btl, ep) else {
            return;
        };
        let credit = payload.len() + MATCH_LEN;
        // In sequence with a receive waiting: straight into it (no
        // unexpected slot, no match event).
        if let Some((r, env)) = self
            .engine
            .match_arrival(u32::from(m.ctx), m.src, m.tag, m.seq)
        {
            self.return_credit(peer, credit);
            self.take_eager(r, env, peer, payload);
            return;
        }
        let slot = self.alloc_unexp(UnexpKind::Eager, peer, credit);
        self.arrival(m, slot, Some(payload));
    }

    /// An eager message read while receive `fresh` is about to be posted
    /// (see [`Ob1::irecv`]): to a posted receive that takes it, else into
    /// `fresh` when that one would take it, else unexpected (and `fresh`
    /// stops reading).
    #[inline(always)]
    fn on_match_fresh(
        &mut self,
        m: MatchHdr,
        payload: &[u8],
        btl: usize,
        ep: Endpoint,
        fresh: &mut Fresh<'_>,
    ) {
        // From the receive's source on its communicator (the usual case):
        // its world rank is known.
        let peer = if (m.ctx, m.src) == (fresh.ctx, fresh.src) {
            fresh.peer
        } else {
            let Some(peer) = self.peer_of(m.ctx, m.src, btl, ep) else {
                return;
            };
            peer
        };
        let credit = payload.len() + MATCH_LEN;
        let (ctx, len) = (u32::from(m.ctx), payload.len());
        // A message that does not fit is for the general path (truncation).
        let early = if len <= fresh.buf.len() && u32::try_from(len).is_ok() {
            self.engine.arrival_before_post(
                ctx,
                m.src,
                m.tag,
                m.seq,
                u32::from(fresh.ctx),
                fresh.src,
                fresh.tag,
            )
        } else {
            self.engine
                .match_arrival(ctx, m.src, m.tag, m.seq)
                .map(|(r, env)| EarlyArrival::Posted(r, env))
        };
        match early {
            Some(EarlyArrival::Posted(r, env)) => {
                self.return_credit(peer, credit);
                self.take_eager(r, env, peer, payload);
            }
            Some(EarlyArrival::Fresh(env)) => {
                self.return_credit(peer, credit);
                // It fits (checked above).
                match fresh.buf {
                    Buffer::Contig(r) => r.write(0, payload),
                    typed => {
                        typed.unpack(0, payload);
                    }
                }
                self.counters.bytes_received[peer as usize] += len as u64;
                self.counters.recv_arrived += 1;
                fresh.got = Some(Status {
                    source: env.source as i32,
                    tag: env.tag,
                    bytes: len,
                    ..Status::default()
                });
            }
            None => {
                let slot = self.alloc_unexp(UnexpKind::Eager, peer, credit);
                self.arrival(m, slot, Some(payload));
                fresh.stop = true;
            }
        }
    }

    /// Receive `r` takes a whole eager message `data` from world rank
    /// `peer`.
    ///
    /// Completed here, through the one lookup `matched` made (a receive
    /// meeting a whole eager message has nothing else to wait for; through
    /// `check_recv_done` it cost a second lookup).
    fn take_eager(&mut self, r: ReqRef, env: Envelope, peer: u32, data: &[u8]) {
        let State {
            reqs,
            rcache,
            dereg,
            counters,
            ..
        } = self;
        let Some(q) = reqs.matched(r, env, peer) else {
            return;
        };
        let Kind::Recv(rr) = &mut q.kind else {
            return;
        };
        debug_assert!(!q.done && !rr.fin_owed, "a fresh match");
        rr.buf.unpack(0, data);
        rr.msg_len = data.len();
        rr.got = data.len();
        counters.bytes_received[peer as usize] += data.len() as u64;
        if recv_complete(q, rcache, dereg) {
            reqs.free_live(r.index);
        }
    }

    /// An arrival whose data is already in its unexpected slot (early
    /// arrivals replayed when their communicator appears).
    fn arrival_stored(&mut self, m: MatchHdr, slot: u32) {
        self.arrival(m, slot, None);
    }

    fn arrival(&mut self, m: MatchHdr, slot: u32, payload: Option<&[u8]>) {
        let ctx = usize::from(m.ctx);
        if self.comms.get(ctx).map_or(true, |c| c.is_none()) {
            if let Some(p) = payload {
                self.store_unexp(slot, p);
            }
            self.early.push((m, slot));
            return;
        }
        let len = match self.unexp[slot as usize].as_ref().map(|u| u.kind) {
            Some(UnexpKind::Rndv { hdr, .. }) => hdr.msg_len as usize,
            _ => payload.map_or_else(
                || {
                    self.unexp[slot as usize]
                        .as_ref()
                        .map_or(0, |u| u.data.len())
                },
                |p| p.len(),
            ),
        };
        match self
            .engine
            .handle_arrival(u32::from(m.ctx), m.src, m.tag, m.seq, len, slot)
        {
            Err((e, slot)) => {
                tracing::warn!("dropping a fragment that breaks matching: {e:?}");
                self.counters.bad_fragments += 1;
                self.free_unexp(slot);
            }
            Ok(Arrival::Parked) => {
                if let Some(p) = payload {
                    self.store_unexp(slot, p);
                }
            }
            Ok(Arrival::Delivered { .. }) => {
                let mut first = true;
                while let Some(ev) = self.engine.poll_matched() {
                    let cur = if first { payload } else { None };
                    match ev {
                        MatchEvent::Matched(mt) => {
                            let p = if mt.msg == slot { cur } else { None };
                            self.matched(mt.recv, mt.msg, mt.envelope, p);
                        }
                        MatchEvent::Queued { .. } => {
                            self.counters.unexpected += 1;
                            if let Some(p) = cur {
                                self.store_unexp(slot, p);
                            }
                        }
                    }
                    first = false;
                }
            }
        }
    }

    fn get_failed(&mut self, r: ReqRef) {
        let Some(rr) = self.reqs.recv_mut(r) else {
            return;
        };
        // A failed get's time is no sample of the copy's speed.
        rr.balance = false;
        let (peer, send_req) = (rr.peer, rr.send_req);
        // A split transfer still gets the sender's put of the rest (and the
        // sender still waits for our FIN): only the part we failed to get
        // comes through the pipeline. Unsplit, the pipeline ends the send.
        let (offset, len) = if rr.split > 0 {
            (0, rr.split)
        } else {
            rr.fin_owed = false;
            (rr.got, rr.msg_len - rr.got)
        };
        self.counters.receiver_fallback += 1;
        self.counters.send_pipeline += 1;
        self.actions.push_back(Action::Ctl {
            peer,
            hdr: Hdr::Ack {
                send_req,
                recv_req: r,
                send_offset: offset as u64,
                send_len: len as u64,
            },
        });
    }

    fn bsend_start(&mut self, r: ReqRef) {
        let Some(s) = self.reqs.send(r) else {
            return;
        };
        let need = s.len;
        let Some(b) = self.bsend.as_mut() else {
            self.fail(r, ErrClass::Buffer, "MPI_Bsend with no buffer attached");
            return;
        };
        // First fit between live allocations.
        let mut at = 0usize;
        let mut found = None;
        for &(off, len) in &b.used {
            if off - at >= need {
                found = Some(at);
                break;
            }
            at = off + len;
        }
        if found.is_none() && b.region.len() - at >= need {
            found = Some(at);
        }
        let Some(off) = found else {
            let free = b.region.len() - b.used.iter().map(|u| u.1).sum::<usize>();
            let msg = format!(
                "attached buffer too small: this message needs {need} bytes, {free} are free"
            );
            self.fail(r, ErrClass::Buffer, &msg);
            return;
        };
        let range = (off, need);
        let pos = b.used.partition_point(|u| u.0 < off);
        b.used.insert(pos, range);
        let space = b
            .region
            .slice(off, need)
            .expect("inside the attached buffer");
        let Some(s) = self.reqs.send(r) else {
            return;
        };
        // Pack the message into the attached buffer (the buffered pipeline:
        // the user's request is complete once its data is packed).
        let mut tmp = vec![0u8; need];
        s.buf.pack(0, &mut tmp);
        space.write(0, &tmp);
        let inner = SendReq {
            ctx: s.ctx,
            dst: s.dst,
            peer: s.peer,
            tag: s.tag,
            buf: Buffer::Contig(space),
            len: need,
            mode: SendMode::Standard,
            proto: Proto::Eager,
            first_len: 0,
            first_sent: false,
            first_done: false,
            need_ack: false,
            acked: false,
            fin: false,
            recv_req: ReqRef::default(),
            sched_off: 0,
            end_off: 0,
            inflight: 0,
            put_expect: 0,
            put_done: 0,
            reg: None,
            bsend: Some(range),
            internal: true,
            credit: 0,
            seq: 0,
            rkey: None,
            rget_open: false,
            split: false,
            cancel: CancelState::None,
        };
        let ir = self.reqs.alloc(|| Req {
            done: false,
            status: Status::default(),
            user_freed: false,
            persistent: false,
            active: true,
            kind: Kind::Send(inner),
        });
        self.complete(r);
        self.actions.push_back(Action::Start(ir));
    }
}

/// The BTL callback target while one BTL progresses.
struct Sink<'a> {
    st: &'a mut State,
    btl: usize,
}

/// What one read of a source's channel before posting a receive found.
enum Arrived {
    /// The receive's message: it completed with this status.
    Taken(Status),
    /// Nothing had arrived on this BTL: reading again may find it.
    Nothing(usize),
    /// Something else was read (or the source has no eager channel): post
    /// the receive now.
    Stopped,
}

/// A receive about to be posted ([`Ob1::irecv`] reading what arrived from
/// its source first).
struct Fresh<'b> {
    ctx: u16,
    /// Its source (communicator rank).
    src: u32,
    /// The world rank of `src`.
    peer: u32,
    tag: Tag,
    buf: &'b Buffer,
    /// Its status, once a message completed it.
    got: Option<Status>,
    /// A message went unexpected: read no further.
    stop: bool,
}

impl BtlSink for Sink<'_> {
    fn on_recv(&mut self, ep: Endpoint, tag: AmTag, data: &[u8]) {
        let st = &mut *self.st;
        // Eager data first: its header has a fixed size and no field to
        // check beyond the matching ones.
        if tag == HdrType::Match.am_tag() {
            if let Some((m, payload)) = MatchHdr::read(data) {
                st.on_match(m, payload, self.btl, ep);
                return;
            }
        }
        let (hdr, payload) = match Hdr::parse(tag, data) {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(btl = self.btl, ?ep, "dropping a bad fragment: {e}");
                st.counters.bad_fragments += 1;
                return;
            }
        };
        match hdr {
            Hdr::Match(m) => st.on_match(m, payload, self.btl, ep),
            Hdr::Rndv(h) | Hdr::Rget(h, _) => {
                let key = match hdr {
                    Hdr::Rget(_, k) => Some(k),
                    _ => None,
                };
                let Some(peer) = st.peer_of(h.m.ctx, h.m.src, self.btl, ep) else {
                    return;
                };
                if payload.len() as u64 > h.msg_len {
                    st.counters.bad_fragments += 1;
                    return;
                }
                let credit = if key.is_some() {
                    0
                } else {
                    payload.len() + RNDV_LEN
                };
                let slot = st.alloc_unexp(UnexpKind::Rndv { hdr: h, key }, peer, credit);
                st.arrival(h.m, slot, Some(payload));
            }
            Hdr::Ack {
                send_req,
                recv_req,
                send_offset,
                send_len,
            } => {
                let Some(s) = st.reqs.live_send_mut(send_req) else {
                    st.counters.bad_fragments += 1;
                    return;
                };
                let (off, len) = (send_offset as usize, send_len as usize);
                if off.checked_add(len).map_or(true, |e| e > s.len) || off < s.first_len {
                    st.counters.bad_fragments += 1;
                    st.fail(send_req, ErrClass::Intern, "ACK outside the message");
                    return;
                }
                s.acked = true;
                s.recv_req = recv_req;
                s.sched_off = off;
                s.end_off = off + len;
                s.put_expect = off - s.first_len;
                if s.proto == Proto::Rget {
                    // The receiver declined the get: pipeline instead. If
                    // the ACK covers only part of the message, the rest
                    // comes by puts it asked for (a split or striped
                    // transfer, possibly over other links and not yet
                    // here): the send then ends only with the receiver's
                    // FIN.
                    if off + len < s.len {
                        s.split = true;
                    }
                    s.proto = Proto::Rndv;
                    if s.rget_open {
                        s.rget_open = false;
                        let n = &mut st.rget_out[s.peer as usize];
                        *n = n.saturating_sub(1);
                    }
                }
                st.actions.push_back(Action::Drive(send_req));
            }
            Hdr::Nack {
                send_req, error, ..
            } => {
                let class = match error {
                    15 => ErrClass::Truncate,
                    75 => ErrClass::ProcFailed,
                    _ => ErrClass::Other,
                };
                st.fail(send_req, class, "the receiver refused the message");
            }
            Hdr::Frag {
                recv_req, offset, ..
            } => {
                let Some(rr) = st.reqs.live_recv_mut(recv_req) else {
                    st.counters.bad_fragments += 1;
                    return;
                };
                let off = offset as usize;
                if !rr.matched
                    || off
                        .checked_add(payload.len())
                        .map_or(true, |e| e > rr.msg_len)
                {
                    st.counters.bad_fragments += 1;
                    return;
                }
                rr.buf.unpack(off, payload);
                rr.got += payload.len();
                let peer = rr.peer as usize;
                st.counters.bytes_received[peer] += payload.len() as u64;
                st.check_recv_done(recv_req);
            }
            Hdr::Put {
                send_req,
                recv_req,
                offset,
                len,
                key,
            } => {
                if let Some(s) = st.reqs.live_send_mut(send_req) {
                    if s.proto == Proto::Rget {
                        s.split = true;
                    }
                }
                let Some(peer) = st.peer_by_ep(self.btl, ep) else {
                    return;
                };
                st.actions.push_back(Action::Put(PutAsk {
                    send_req,
                    recv_req,
                    offset: offset as usize,
                    len: len as usize,
                    key,
                    btl: self.btl,
                    peer,
                }));
            }
            Hdr::Fin {
                req,
                size,
                status,
                nanos,
            } => match st.reqs.get_mut(req) {
                Some(Req {
                    kind: Kind::Send(s),
                    done: false,
                    ..
                }) => {
                    if status != 0 {
                        st.fail(req, ErrClass::Other, "the receiver's RDMA failed");
                        return;
                    }
                    s.fin = true;
                    st.check_send_done(req);
                }
                Some(Req {
                    kind: Kind::Recv(rr),
                    done: false,
                    ..
                }) => {
                    if status != 0 {
                        st.fail(req, ErrClass::Other, "the sender's RDMA put failed");
                        return;
                    }
                    rr.got += size as usize;
                    let peer = rr.peer as usize;
                    st.counters.bytes_received[peer] += size;
                    if nanos > 0 {
                        rr.put_ns = nanos;
                    }
                    balance_split(rr, &mut st.split_share, &mut st.counters);
                    st.check_recv_done(req);
                }
                _ => st.counters.bad_fragments += 1,
            },
            Hdr::Credit { bytes } => {
                let Some(peer) = st.peer_by_ep(self.btl, ep) else {
                    return;
                };
                let c = &mut st.credits[peer as usize];
                *c = c.saturating_add(bytes as usize).min(st.cfg.eager_credits);
            }
            Hdr::Cancel {
                send_req,
                ctx,
                seq,
                src,
                tag,
            } => {
                let Some(peer) = st.peer_by_ep(self.btl, ep) else {
                    return;
                };
                let cancelled = st.drop_unmatched_rndv(peer, send_req, ctx, seq, src, tag);
                st.actions.push_back(Action::Ctl {
                    peer,
                    hdr: Hdr::CancelAck {
                        send_req,
                        seq,
                        cancelled,
                    },
                });
            }
            Hdr::CancelAck {
                send_req,
                seq,
                cancelled,
            } => {
                let Some(q) = st.reqs.get_mut(send_req) else {
                    st.counters.bad_fragments += 1;
                    return;
                };
                // Only the answer to a CANCEL of this round counts.
                if let (false, Kind::Send(s)) = (q.done, &mut q.kind) {
                    if s.cancel != CancelState::Sent || s.seq != seq {
                        return;
                    }
                    s.cancel = CancelState::None;
                    if cancelled {
                        q.status.cancelled = true;
                        st.check_send_done(send_req);
                    }
                }
            }
        }
    }

    fn on_complete(&mut self, token: Token, result: Result<(), BtlError>) {
        let st = &mut *self.st;
        let Some(tok) = st.free_tok(token) else {
            tracing::warn!(?token, "completion for an unknown token");
            return;
        };
        if let Err(e) = &result {
            match tok.kind {
                TokKind::Ctl => return,
                TokKind::Get(_) => {
                    st.get_failed(tok.req);
                    return;
                }
                // An ordered put's FIN went behind it already: the send
                // fails, the receiver hears of the loss from its BTL.
                TokKind::Put { ordered: true, .. } => {
                    st.fail_btl(tok.req, e);
                    return;
                }
                TokKind::Put { recv_req, .. } => {
                    st.put_failed(tok.req, recv_req, e);
                    return;
                }
                _ => {
                    st.fail_btl(tok.req, e);
                    return;
                }
            }
        }
        match tok.kind {
            TokKind::Ctl => {}
            TokKind::First => {
                if let Some(s) = st.reqs.send_mut(tok.req) {
                    s.first_done = true;
                }
                st.check_send_done(tok.req);
            }
            TokKind::Frag => {
                if let Some(s) = st.reqs.send_mut(tok.req) {
                    s.inflight = s.inflight.saturating_sub(1);
                    if s.sched_off < s.end_off {
                        st.actions.push_back(Action::Drive(tok.req));
                    }
                }
                st.check_send_done(tok.req);
            }
            TokKind::Get(bytes) => {
                let Some(rr) = st.reqs.recv_mut(tok.req) else {
                    return;
                };
                rr.got += bytes;
                st.counters.bytes_received[rr.peer as usize] += bytes as u64;
                balance_split(rr, &mut st.split_share, &mut st.counters);
                st.check_recv_done(tok.req);
            }
            TokKind::Put {
                recv_req,
                len,
                nanos,
                ordered,
            } => {
                let Some(s) = st.reqs.send_mut(tok.req) else {
                    return;
                };
                s.put_done += len;
                let peer = s.peer;
                if !ordered {
                    st.actions.push_back(Action::Ctl {
                        peer,
                        hdr: Hdr::Fin {
                            req: recv_req,
                            size: len as u64,
                            status: 0,
                            nanos,
                        },
                    });
                }
                st.check_send_done(tok.req);
            }
        }
    }

    fn on_peer_lost(&mut self, ep: Endpoint, why: &BtlError) {
        if let Some(peer) = self.st.peer_by_ep(self.btl, ep) {
            self.st.peer_failed(peer, &why.to_string());
        }
    }

    fn on_put_refused(&mut self, ep: Endpoint) {
        if let Some(peer) = self.st.peer_by_ep(self.btl, ep) {
            self.st.puts_refused(peer);
        }
    }
}

impl State {
    /// World rank of the sender of a matching header: the communicator's
    /// rank table, checked against the endpoint it came in on.
    fn peer_of(&mut self, ctx: u16, src: u32, btl: usize, ep: Endpoint) -> Option<u32> {
        match self.comms.get(usize::from(ctx)).and_then(|c| c.as_ref()) {
            Some(c) => match c.world.get(src as usize) {
                Some(&w) => Some(w),
                None => {
                    self.counters.bad_fragments += 1;
                    None
                }
            },
            // Communicator not created here yet: find the peer by endpoint.
            None => {
                let p = self.peer_by_ep(btl, ep);
                if p.is_none() {
                    self.counters.bad_fragments += 1;
                }
                p
            }
        }
    }

    /// A put from `peer` was refused here (a stale or forged key: its data
    /// was dropped, and its FIN may follow). Which receive it was for is
    /// not known, so every receive from `peer` taking data by put fails
    /// (never completes with data that did not arrive). Counted as a bad
    /// fragment.
    #[cold]
    fn puts_refused(&mut self, peer: u32) {
        self.counters.bad_fragments += 1;
        let waiting = self.reqs.live_where(|kind| {
            matches!(kind, Kind::Recv(rr) if rr.matched && rr.peer == peer && !rr.regs.is_empty())
        });
        for r in waiting {
            self.fail(r, ErrClass::Intern, "a put of its data was refused here");
        }
    }

    fn peer_by_ep(&self, btl: usize, ep: Endpoint) -> Option<u32> {
        self.bml
            .iter()
            .position(|e| e.send.iter().chain(e.rdma.iter()).any(|&x| x == (btl, ep)))
            .map(|p| p as u32)
    }
}

#[cfg(test)]
mod layout {
    /// Every posted receive and tracked send writes and later reads a whole
    /// request slot, so its size is paid per message (the receiver of a
    /// message-rate window touches 64 of them). The RDMA state that only a
    /// rendezvous uses is kept out of line; inline it made a slot 288
    /// bytes (4.5 cache lines).
    #[test]
    fn a_request_slot_stays_within_four_cache_lines() {
        let slot = std::mem::size_of::<super::Slot>();
        assert!(slot <= 256, "a request slot is {slot} bytes");
    }
}

#[cfg(test)]
mod split_balance {
    use super::{next_share, split_point, SHARE_HALF, SHARE_MAX, SHARE_MIN};

    #[test]
    fn the_split_point_follows_the_share_on_a_cache_line() {
        assert_eq!(split_point(1 << 20, SHARE_HALF), Some(512 << 10));
        assert_eq!(split_point(1 << 20, 640), Some(640 << 10));
        assert_eq!(split_point(1000, 512), Some(448));
        assert!(split_point(1000, SHARE_MAX).is_some_and(|h| h < 1000));
        // Neither part may be empty: a short message at a small share is
        // not split (an empty first part would read as "not split" while
        // the sender puts the whole message).
        assert_eq!(split_point(500, SHARE_MIN), None);
        assert_eq!(split_point(64, SHARE_MAX), None);
        assert_eq!(split_point(128, SHARE_HALF), Some(64));
    }

    #[test]
    fn equal_copy_rates_keep_an_even_split() {
        let half = 512 << 10;
        assert_eq!(
            next_share(SHARE_HALF, half, 50_000, half, 50_000),
            SHARE_HALF
        );
    }

    #[test]
    fn a_slower_put_moves_bytes_to_the_receiver_until_both_take_as_long() {
        // The receiver's get runs at twice the sender's put: the balanced
        // share is 2/3 of the message.
        let (mut share, len) = (SHARE_HALF, 1usize << 20);
        let first = {
            let h = split_point(len, share).unwrap();
            next_share(share, h, (h / 20) as u32, len - h, ((len - h) / 10) as u32)
        };
        assert!(
            first > SHARE_HALF && first < 683,
            "one step moves part way: {first}"
        );
        for _ in 0..40 {
            let h = split_point(len, share).unwrap();
            share = next_share(share, h, (h / 20) as u32, len - h, ((len - h) / 10) as u32);
        }
        assert!((680..=686).contains(&share), "converged to {share}");
        // And back when the put becomes the faster copy.
        for _ in 0..40 {
            let h = split_point(len, share).unwrap();
            share = next_share(share, h, (h / 10) as u32, len - h, ((len - h) / 20) as u32);
        }
        assert!((338..=344).contains(&share), "converged to {share}");
    }

    #[test]
    fn the_share_is_bounded_and_unmeasured_copies_leave_it() {
        let half = 512 << 10;
        let mut share = SHARE_HALF;
        for _ in 0..50 {
            share = next_share(share, half, 1, half, u32::MAX);
        }
        assert_eq!(share, SHARE_MAX);
        for _ in 0..50 {
            share = next_share(share, half, u32::MAX, half, 1);
        }
        assert_eq!(share, SHARE_MIN);
        assert_eq!(next_share(700, half, 0, half, 10), 700);
        assert_eq!(next_share(700, half, 10, half, 0), 700);
        assert_eq!(next_share(700, 0, 10, half, 10), 700);
    }
}
