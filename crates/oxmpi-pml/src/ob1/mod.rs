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

mod bml;
mod bsend;
mod failure;
mod handlers;
mod rdma;
mod recv;
mod req;
mod sched;
mod send;
mod small;
mod state;

pub use crate::bsend::BufferScope;
use crate::bsend::{BsendPool, BsendSlot};
use failure::*;
use handlers::*;
use rdma::*;
use req::*;
use state::*;
pub use state::{ANY_SOURCE_RUN, ANY_SOURCE_SWEEP};

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
    pub(crate) fn of(r: ReqRef) -> ReqId {
        ReqId(r, 0)
    }

    /// A send that completed inside [`Ob1::isend`] (small, eager, written
    /// straight into the BTL): no request was made, and the handle carries
    /// its status (byte count and tag). Generation 0 is never a live
    /// slot's.
    #[inline]
    pub(crate) fn sent_inline(bytes: usize, tag: i32) -> ReqId {
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
    /// A matched message of context `ctx` with envelope `env` and length
    /// `len`, named `slot` by the PML that claimed it.
    pub(crate) fn new(ctx: u16, env: Envelope, len: usize, slot: u32) -> Message {
        Message {
            ctx,
            env,
            len,
            slot,
        }
    }

    /// Its context and the claiming PML's slot.
    pub(crate) fn parts(&self) -> (u16, u32) {
        (self.ctx, self.slot)
    }

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

/// The ob1 PML over a list of BTLs.
pub struct Ob1<B: ?Sized + Btl> {
    btls: Vec<Box<B>>,
    /// [`Ob1::btls_never_reenter`], fixed at creation (the list only shrinks).
    never_reenter: bool,
    /// The time the engine sees ([`Ob1::set_clock`]).
    clock: std::sync::Arc<dyn crate::clock::Clock>,
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
        let mut bml = bml::build(&mut btls, peers);
        let btls = bml::close_unused(btls, &mut bml);
        let limits: Vec<Limits> = btls.iter().map(|b| *b.limits()).collect();
        let caps: Vec<Caps> = btls.iter().map(|b| b.caps()).collect();
        let ep_peer = bml::endpoint_owners(&bml, btls.len());
        let credits = vec![cfg.eager_credits; n];
        let rcache = Rcache::new(btls.len(), cfg.leave_pinned, cfg.rcache_max_entries);
        let nbtls = btls.len();
        let never_reenter = btls.iter().all(|b| oxmpi_btl::btl::never_reenters(&**b));
        Ok(Ob1 {
            btls,
            never_reenter,
            clock: std::sync::Arc::new(crate::clock::WallClock),
            st: State {
                cfg,
                me,
                limits,
                caps,
                bml,
                ep_peer,
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
                bsend: BsendPool::default(),
                dereg: Vec::new(),
                rcache,
                local_fault: failure::FaultHook::default(),
            },
        })
    }

    /// What to do when a BTL cannot reach a peer that is alive for a
    /// reason of this process (out of descriptors or memory, a segment
    /// that will not map): that peer is not told and would wait for this
    /// one for ever, so the runtime ends the job with `hook`'s message, as
    /// Open MPI's `mca_pml_ob1_error_handler` aborts. Without a hook (the
    /// simulated worlds), the peer only counts as lost here: requests that
    /// need it fail with `MPI_ERR_PROC_FAILED`.
    pub fn on_local_fault(&mut self, hook: failure::LocalFaultHook) {
        self.st.local_fault = failure::FaultHook(Some(hook));
    }

    /// The clock the engine reads (the wall clock unless set): a simulated
    /// world gives its virtual time, so that what the engine times (RDMA
    /// copies, for the split balancing) is replayed exactly by a seed.
    pub fn set_clock(&mut self, clock: std::sync::Arc<dyn crate::clock::Clock>) {
        self.clock = clock;
    }

    /// The share of a split transfer from world rank `peer` that this
    /// receiver gets itself, in 1024ths (the rest the sender puts): where
    /// the split balancing stands.
    pub fn split_share(&self, peer: u32) -> Option<u16> {
        self.st.split_share.get(peer as usize).copied()
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

    /// Whether every BTL promised never to call back into the PML from an
    /// operation ([`oxmpi_btl::btl::NeverReenters`], an `unsafe` trait).
    #[inline]
    pub fn btls_never_reenter(&self) -> bool {
        self.never_reenter
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

    /// [`Ob1::progress`] that polls every BTL, those with nothing in flight
    /// too (which `progress` polls only every eighth call): the last look
    /// of a wait before it sleeps.
    pub fn progress_all(&mut self) -> usize {
        // The pass `progress` makes next is one of its idle turns.
        self.st.tick |= 7;
        self.progress()
    }

    /// The doorbell a waiting thread may sleep on ([`Btl::wakeup`]): the
    /// one every BTL in use offers, when each of the others only carries
    /// this process's own traffic. `None`, for a sleep of bounded length
    /// between polls: a BTL that cannot wake a sleeper is in use (TCP), no
    /// BTL has a doorbell, or work is queued that waits for a resource
    /// (room in a ring) rather than for a message.
    pub fn doorbell(&self) -> Option<std::sync::Arc<dyn oxmpi_btl::btl::Doorbell>> {
        use oxmpi_btl::btl::Wakeup;
        if self.st.has_queued() || !self.st.copies.is_empty() {
            return None;
        }
        let mut bell = None;
        for b in &self.btls {
            match b.wakeup() {
                Wakeup::Local => {}
                Wakeup::Bell(d) if bell.is_none() => bell = Some(d),
                Wakeup::Bell(_) | Wakeup::Poll => return None,
            }
        }
        bell
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
