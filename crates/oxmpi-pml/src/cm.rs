//! The PML cm (seed 001's second PML, seed 004): MPI requests mapped onto a
//! matching transport layer ([`oxmpi_mtl::mtl::Mtl`]), which carries whole
//! messages and matches them itself. cm keeps no protocol of its own: no
//! fragments, no rendezvous, no matching engine; a request is a slot that
//! remembers the user's buffer until the MTL's completion event for it.
//!
//! * Contiguous buffers go to the MTL in place; a derived datatype is
//!   packed into a staging copy before the send, and a receive into one is
//!   unpacked from its staging copy when the MTL completes it.
//! * Buffered sends pack into the attached buffer ([`crate::bsend`], as
//!   ob1) and hand that copy to the MTL as an internal send; synchronous
//!   sends use the MTL's protocol (the sync bits of seed 004's tag).
//! * `MPI_Cancel` of a posted receive goes to the MTL; a send cannot be
//!   cancelled once the MTL has it (it completes normally, not cancelled,
//!   which MPI allows).
//! * A dead peer: the MTL's requests to it fail ([`Mtl::del_peers`]) and
//!   later ones to it fail at the call.
//!
//! The layer rule holds as for ob1: cm never names a concrete MTL.

use oxmpi_btl::mem::MemRegion;
use oxmpi_match::{Envelope, Source, Tag};
use oxmpi_mtl::mtl::{
    Event, Mtl, MtlError, Outcome, Posted, SendMode as MtlMode, Source as MtlSource, TagSel, Token,
};

use crate::bsend::{BsendPool, BsendSlot, BufferScope};
use crate::buffer::Buffer;
use crate::error::{ErrClass, PmlError};
use crate::hdr::ReqRef;
use crate::ob1::{Counters, Message, ReqId, SendMode, Status};

/// A communicator as cm sees it: the world ranks of the ranks it sends to
/// (the remote group of an intercommunicator) and this process's rank.
#[derive(Debug)]
struct CommMap {
    peers: Vec<u32>,
    me: u32,
}

/// What a request does.
#[derive(Debug)]
enum Op {
    Send {
        dst: u32,
        tag: i32,
        mode: SendMode,
    },
    Recv {
        src: Source,
        tag: Tag,
    },
    /// The receive of a message taken by a matched probe, into staging
    /// until `MPI_Imrecv` names the user's buffer.
    Claimed,
    /// That receive once `MPI_Imrecv` gave it the user's buffer.
    Mrecv,
}

/// One request.
#[derive(Debug)]
struct Req {
    op: Op,
    ctx: u16,
    buf: Buffer,
    /// The packed copy of a derived datatype's message (sends) or the room
    /// it lands in (receives), handed to the MTL instead of `buf`.
    staging: Option<Box<[u8]>>,
    persistent: bool,
    /// Started and not yet complete.
    active: bool,
    done: bool,
    user_freed: bool,
    /// An internal buffered send: the attached buffer's space it holds.
    internal: Option<BsendSlot>,
    /// A claimed receive's completion that arrived before `MPI_Imrecv`.
    held: Option<oxmpi_mtl::mtl::RecvInfo>,
    status: Status,
}

/// A request slot: its generation goes up each time it is freed.
#[derive(Debug, Default)]
struct Slot {
    generation: u32,
    req: Option<Req>,
}

/// The cm PML over one MTL.
pub struct Cm<M: ?Sized + Mtl = dyn Mtl + Send> {
    me: u32,
    size: u32,
    comms: Vec<Option<CommMap>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The receives of matched-probe messages not yet given to
    /// `MPI_Imrecv`, by `Message` slot.
    claimed: Vec<Option<ReqRef>>,
    events: Vec<Event>,
    bsend: BsendPool,
    dead: Vec<Option<String>>,
    n_dead: usize,
    counters: Counters,
    mtl: Box<M>,
}

impl<M: ?Sized + Mtl> std::fmt::Debug for Cm<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cm")
            .field("mtl", &self.mtl.name())
            .field("me", &self.me)
            .finish()
    }
}

fn err(class: ErrClass, msg: impl Into<String>) -> PmlError {
    PmlError::new(class, msg)
}

/// The MPI error of an MTL's refusal or failure.
fn mtl_err(e: &MtlError) -> PmlError {
    let class = match e {
        MtlError::Tag(t) => match t {
            oxmpi_mtl::tag::TagError::Tag { .. } => ErrClass::Tag,
            oxmpi_mtl::tag::TagError::Source { .. } => ErrClass::Rank,
            _ => ErrClass::Intern,
        },
        MtlError::UnknownPeer(_) => ErrClass::Rank,
        MtlError::UnknownComm(_) => ErrClass::Comm,
        MtlError::PeerLost(_) => ErrClass::ProcFailed,
        MtlError::UnknownMessage(_) => ErrClass::Request,
        MtlError::BadCard { .. } | MtlError::Provider(_) | MtlError::Closed => ErrClass::Other,
    };
    err(class, e.to_string())
}

/// The region of a staging copy.
#[allow(unsafe_code)]
fn staging_region(copy: &[u8]) -> MemRegion {
    // SAFETY: `copy` is the boxed slice of a request's `staging`: the box
    // stays in the request, its heap bytes unmoved, until the MTL's event
    // for the one operation given this region has been handled (a request
    // is freed only once done, and done only by that event or by a failure
    // at the call, before the MTL had the region). Nobody else touches the
    // bytes meanwhile.
    unsafe { MemRegion::from_slice(copy) }
}

/// The region of bytes the MTL reads only inside the call it is given to
/// ([`Mtl::inject`]).
#[allow(unsafe_code)]
fn bytes_region(data: &[u8]) -> MemRegion {
    // SAFETY: the region is read only while `data` is borrowed: `inject`
    // copies the bytes (or sends nothing) before it returns and keeps
    // nothing that refers to them.
    unsafe { MemRegion::from_slice(data) }
}

fn token(r: ReqRef) -> Token {
    Token(u64::from(r.index) | (u64::from(r.generation) << 32))
}

fn from_token(t: Token) -> ReqRef {
    ReqRef {
        index: t.0 as u32,
        generation: (t.0 >> 32) as u32,
    }
}

fn tag_sel(t: Tag) -> TagSel {
    match t {
        Tag::Any => TagSel::Any,
        Tag::Value(v) => TagSel::Value(v),
    }
}

impl<M: ?Sized + Mtl> Cm<M> {
    /// cm over `mtl` for world rank `me` of `size`, whose peers' business
    /// cards (by world rank) are `cards`.
    pub fn new(mut mtl: Box<M>, me: u32, cards: &[Vec<u8>]) -> Result<Cm<M>, PmlError> {
        let size = cards.len() as u32;
        let peers: Vec<(u32, &[u8])> = cards
            .iter()
            .enumerate()
            .map(|(r, c)| (r as u32, c.as_slice()))
            .collect();
        mtl.add_peers(&peers).map_err(|e| mtl_err(&e))?;
        Ok(Cm {
            me,
            size,
            comms: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            claimed: Vec::new(),
            events: Vec::new(),
            bsend: BsendPool::default(),
            dead: vec![None; size as usize],
            n_dead: 0,
            counters: Counters {
                bytes_sent: vec![0; size as usize],
                bytes_received: vec![0; size as usize],
                ..Counters::default()
            },
            mtl,
        })
    }

    /// The MTL's name.
    pub fn mtl_name(&self) -> &'static str {
        self.mtl.name()
    }

    /// The largest tag the MTL's layout carries (`MPI_TAG_UB`).
    pub fn max_tag(&self) -> i32 {
        self.mtl.limits().max_tag
    }

    /// This process's world rank.
    pub fn rank(&self) -> u32 {
        self.me
    }

    /// The number of world ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Protocol counters (cm counts buffered and synchronous sends and the
    /// bytes per peer).
    pub fn counters(&self) -> Counters {
        self.counters.clone()
    }

    fn add(&mut self, ctx: u16, peers: Vec<u32>, me: u32) -> Result<(), PmlError> {
        if let Some(&p) = peers.iter().find(|&&p| p >= self.size) {
            return Err(err(ErrClass::Rank, format!("world rank {p} out of range")));
        }
        self.mtl.add_comm(u32::from(ctx)).map_err(|e| {
            err(
                ErrClass::Intern,
                format!(
                    "communicator context {ctx} on the {} MTL: {e}",
                    self.mtl.name()
                ),
            )
        })?;
        let i = usize::from(ctx);
        if self.comms.len() <= i {
            self.comms.resize_with(i + 1, || None);
        }
        self.comms[i] = Some(CommMap { peers, me });
        Ok(())
    }

    /// Registers an intracommunicator: context `ctx`, its members' world
    /// ranks, this process's rank in it. An MTL whose tag has no room for
    /// the context id refuses it (`MPI_ERR_INTERN`, naming the id).
    pub fn add_comm(&mut self, ctx: u16, world: Vec<u32>, me: u32) -> Result<(), PmlError> {
        self.add(ctx, world, me)
    }

    /// Registers an intercommunicator: sends go to the remote group's
    /// world ranks, and messages carry this process's local rank `me`.
    pub fn add_intercomm(&mut self, ctx: u16, remote: Vec<u32>, me: u32) -> Result<(), PmlError> {
        self.add(ctx, remote, me)
    }

    /// Forgets context `ctx`.
    pub fn remove_comm(&mut self, ctx: u16) -> Result<(), PmlError> {
        match self.comms.get_mut(usize::from(ctx)) {
            Some(c @ Some(_)) => {
                *c = None;
                self.mtl.del_comm(u32::from(ctx));
                Ok(())
            }
            _ => Err(err(
                ErrClass::Comm,
                format!("no communicator with context {ctx}"),
            )),
        }
    }

    fn comm(&self, ctx: u16) -> Result<&CommMap, PmlError> {
        self.comms
            .get(usize::from(ctx))
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                err(
                    ErrClass::Comm,
                    format!("no communicator with context {ctx}"),
                )
            })
    }

    fn get(&self, r: ReqRef) -> Option<&Req> {
        let s = self.slots.get(r.index as usize)?;
        (s.generation == r.generation).then_some(s.req.as_ref()?)
    }

    fn get_mut(&mut self, r: ReqRef) -> Option<&mut Req> {
        let s = self.slots.get_mut(r.index as usize)?;
        if s.generation != r.generation {
            return None;
        }
        s.req.as_mut()
    }

    fn alloc(&mut self, req: Req) -> ReqRef {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                // Generation 0 names an inline completion: start at 1.
                self.slots.push(Slot {
                    generation: 1,
                    req: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[index as usize];
        s.req = Some(req);
        ReqRef {
            index,
            generation: s.generation,
        }
    }

    fn release(&mut self, r: ReqRef) {
        if let Some(s) = self.slots.get_mut(r.index as usize) {
            if s.generation == r.generation && s.req.take().is_some() {
                // Stay below ob1's inline-receive generations (2^31 up).
                s.generation = (s.generation % 0x7fff_fffe) + 1;
                self.free.push(r.index);
            }
        }
    }

    fn new_req(&mut self, op: Op, ctx: u16, buf: Buffer, persistent: bool) -> ReqRef {
        self.alloc(Req {
            op,
            ctx,
            buf,
            staging: None,
            persistent,
            active: false,
            done: false,
            user_freed: false,
            internal: None,
            held: None,
            status: Status::default(),
        })
    }

    /// The world rank of rank `dst` of context `ctx`'s communicator.
    fn peer_of(&self, ctx: u16, dst: u32) -> Result<u32, PmlError> {
        let c = self.comm(ctx)?;
        c.peers.get(dst as usize).copied().ok_or_else(|| {
            err(
                ErrClass::Rank,
                format!("rank {dst} of a communicator of {}", c.peers.len()),
            )
        })
    }

    /// Starts a send (`MPI_Isend` and its modes).
    #[inline(never)]
    pub fn isend(
        &mut self,
        buf: Buffer,
        dst: u32,
        tag: i32,
        ctx: u16,
        mode: SendMode,
    ) -> Result<ReqId, PmlError> {
        let r = self.new_send(buf, dst, tag, ctx, mode, false)?;
        if let Err(e) = self.start(r) {
            self.release(r.0);
            return Err(e);
        }
        // Complete inside the call (the MTL injected it, or a buffered
        // send's copy): no request to keep, as ob1's immediate send.
        if let Some(q) = self.get(r.0) {
            if q.done && q.status.error.is_none() && q.status.bytes <= u32::MAX as usize {
                let (bytes, tag) = (q.status.bytes, q.status.tag);
                self.release(r.0);
                return Ok(ReqId::sent_inline(bytes, tag));
            }
        }
        Ok(r)
    }

    /// The longest message [`Cm::sendi_bytes`] sends: the MTL's inject
    /// limit ([`Mtl::inject_limit`]).
    pub fn sendi_limit(&self) -> usize {
        self.mtl.inject_limit()
    }

    /// A standard send of the bytes `data` to rank `dst` of context `ctx`
    /// that the MTL completes inside the call ([`Mtl::inject`]), with no
    /// request: whether it went. `false` has sent nothing and reports
    /// nothing (an unknown context or rank, a negative tag, a dead peer, a
    /// field the layout refuses, no room): the caller then sends as usual, which reports any
    /// error. The small-message path of `MPI_Send` and `MPI_Isend` under cm.
    #[inline]
    pub fn sendi_bytes(&mut self, data: &[u8], dst: u32, tag: i32, ctx: u16) -> bool {
        let Some(c) = self.comms.get(usize::from(ctx)).and_then(Option::as_ref) else {
            return false;
        };
        let (Some(&peer), me) = (c.peers.get(dst as usize), c.me) else {
            return false;
        };
        if tag < 0 || (self.n_dead > 0 && self.dead_peer(peer).is_some()) {
            return false;
        }
        if self
            .mtl
            .inject(u32::from(ctx), peer, me, tag, bytes_region(data))
        {
            self.counters.bytes_sent[peer as usize] += data.len() as u64;
            true
        } else {
            false
        }
    }

    /// Creates an inactive persistent send (`MPI_Send_init` and friends).
    #[inline(never)]
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
        self.peer_of(ctx, dst)?;
        let r = self.new_req(Op::Send { dst, tag, mode }, ctx, buf, persistent);
        Ok(ReqId::of(r))
    }

    /// Posts a receive (`MPI_Irecv`).
    #[inline(never)]
    pub fn irecv(
        &mut self,
        buf: Buffer,
        src: Source,
        tag: Tag,
        ctx: u16,
    ) -> Result<ReqId, PmlError> {
        let r = self.recv_init(buf, src, tag, ctx)?;
        self.get_mut(r.0).expect("just made").persistent = false;
        if let Err(e) = self.start(r) {
            self.release(r.0);
            return Err(e);
        }
        Ok(r)
    }

    /// Creates an inactive persistent receive (`MPI_Recv_init`).
    #[inline(never)]
    pub fn recv_init(
        &mut self,
        buf: Buffer,
        src: Source,
        tag: Tag,
        ctx: u16,
    ) -> Result<ReqId, PmlError> {
        if let Source::Rank(s) = src {
            self.peer_of(ctx, s)?;
        } else {
            self.comm(ctx)?;
        }
        let r = self.new_req(Op::Recv { src, tag }, ctx, buf, true);
        Ok(ReqId::of(r))
    }

    /// Starts an inactive request (`MPI_Start`).
    #[inline(never)]
    pub fn start(&mut self, id: ReqId) -> Result<(), PmlError> {
        let r = id.0;
        let q = self
            .get_mut(r)
            .ok_or_else(|| err(ErrClass::Request, "invalid request"))?;
        // Active until a test or wait completes it, even when already done
        // (a send the MTL completed inside its call), as in ob1.
        if q.active {
            return Err(err(ErrClass::Request, "the request is already active"));
        }
        q.active = true;
        q.done = false;
        q.status = Status::default();
        let ctx = q.ctx;
        match q.op {
            Op::Send { dst, tag, mode } => self.start_send(r, ctx, dst, tag, mode),
            Op::Recv { src, tag } => self.start_recv(r, ctx, src, tag),
            Op::Claimed | Op::Mrecv => {
                Err(err(ErrClass::Request, "a matched receive cannot restart"))
            }
        }
    }

    /// The region the MTL gets for request `r`'s buffer: the buffer itself
    /// when contiguous, else a staging copy (packed for a send).
    fn region_for(&mut self, r: ReqRef, pack: bool) -> MemRegion {
        let q = self.get_mut(r).expect("live request");
        if let Some(c) = q.buf.contig() {
            return c;
        }
        let mut copy = vec![0u8; q.buf.len()].into_boxed_slice();
        if pack {
            q.buf.pack(0, &mut copy);
        }
        let region = staging_region(&copy);
        q.staging = Some(copy);
        region
    }

    fn start_send(
        &mut self,
        r: ReqRef,
        ctx: u16,
        dst: u32,
        tag: i32,
        mode: SendMode,
    ) -> Result<(), PmlError> {
        let peer = self.peer_of(ctx, dst)?;
        if let Some(why) = self.dead_peer(peer) {
            let why = why.to_string();
            self.fail(r, ErrClass::ProcFailed, &why);
            return Ok(());
        }
        let rank = self.comm(ctx)?.me;
        let len = self.get(r).expect("live").buf.len();
        self.counters.bytes_sent[peer as usize] += len as u64;
        if mode == SendMode::Buffered {
            return self.start_bsend(r, ctx, peer, rank, tag);
        }
        let region = self.region_for(r, true);
        let mmode = match mode {
            SendMode::Standard | SendMode::Buffered => MtlMode::Standard,
            SendMode::Synchronous => {
                self.counters.synchronous += 1;
                MtlMode::Synchronous
            }
            SendMode::Ready => MtlMode::Ready,
        };
        let st = &mut self.get_mut(r).expect("live").status;
        st.bytes = len;
        st.tag = tag;
        match self
            .mtl
            .isend(u32::from(ctx), peer, rank, tag, region, mmode, token(r))
        {
            Ok(Posted::Pending) => Ok(()),
            // No event will come: complete now.
            Ok(Posted::Done) => {
                if let Some(q) = self.get_mut(r) {
                    q.staging = None;
                }
                self.complete(r);
                Ok(())
            }
            Err(e) => {
                self.get_mut(r).expect("live").active = false;
                Err(mtl_err(&e))
            }
        }
    }

    /// A buffered send: the message is packed into the attached buffer and
    /// the copy goes as an internal request; the user's completes now.
    fn start_bsend(
        &mut self,
        r: ReqRef,
        ctx: u16,
        peer: u32,
        rank: u32,
        tag: i32,
    ) -> Result<(), PmlError> {
        let len = self.get(r).expect("live").buf.len();
        let (space, slot) = match self.bsend.alloc(ctx, len) {
            Ok(x) => x,
            Err(e) => {
                self.fail(r, e.class, &e.msg);
                return Ok(());
            }
        };
        space.with_bytes_mut(|out| self.get(r).expect("live").buf.pack(0, out));
        let ir = self.alloc(Req {
            op: Op::Send {
                dst: 0,
                tag,
                mode: SendMode::Buffered,
            },
            ctx,
            buf: Buffer::Contig(space),
            staging: None,
            persistent: false,
            active: true,
            done: false,
            user_freed: false,
            internal: Some(slot),
            held: None,
            status: Status::default(),
        });
        match self.mtl.isend(
            u32::from(ctx),
            peer,
            rank,
            tag,
            space,
            MtlMode::Buffered,
            token(ir),
        ) {
            Ok(Posted::Pending) => {}
            // The copy is the provider's already: its space is free.
            Ok(Posted::Done) => self.complete(ir),
            Err(e) => {
                self.bsend.release(slot);
                self.release(ir);
                self.get_mut(r).expect("live").active = false;
                return Err(mtl_err(&e));
            }
        }
        self.counters.buffered += 1;
        let q = self.get_mut(r).expect("live");
        q.status.bytes = len;
        q.status.tag = tag;
        self.complete(r);
        Ok(())
    }

    fn start_recv(&mut self, r: ReqRef, ctx: u16, src: Source, tag: Tag) -> Result<(), PmlError> {
        let source = match src {
            Source::ProcNull => {
                let q = self.get_mut(r).expect("live");
                q.status = Status::proc_null();
                self.complete(r);
                return Ok(());
            }
            Source::Any => {
                let c = self.comm(ctx)?;
                if !c.peers.is_empty()
                    && c.peers
                        .iter()
                        .all(|&p| p != self.me && self.dead_peer(p).is_some())
                {
                    self.fail(
                        r,
                        ErrClass::ProcFailed,
                        "MPI_ANY_SOURCE: every other member of the communicator is gone",
                    );
                    return Ok(());
                }
                MtlSource::Any
            }
            Source::Rank(s) => {
                let peer = self.peer_of(ctx, s)?;
                if let Some(why) = self.dead_peer(peer) {
                    let why = why.to_string();
                    self.fail(r, ErrClass::ProcFailed, &why);
                    return Ok(());
                }
                MtlSource::Rank { rank: s, peer }
            }
        };
        let region = self.region_for(r, false);
        self.mtl
            .irecv(u32::from(ctx), source, tag_sel(tag), region, token(r))
            .map_err(|e| {
                self.get_mut(r).expect("live").active = false;
                mtl_err(&e)
            })
    }

    /// Ends request `r` with an error now (no MTL operation is pending).
    fn fail(&mut self, r: ReqRef, class: ErrClass, why: &str) {
        if let Some(q) = self.get_mut(r) {
            q.status.error = Some(class);
            q.status.detail = crate::error::reasons::record(why);
        }
        self.complete(r);
    }

    /// Marks `r` done; an internal or user-freed request goes away.
    fn complete(&mut self, r: ReqRef) {
        let Some(q) = self.get_mut(r) else {
            return;
        };
        q.done = true;
        let internal = q.internal.take();
        let gone = q.user_freed || internal.is_some();
        if let Some(slot) = internal {
            self.bsend.release(slot);
        }
        if gone {
            self.release(r);
        }
    }

    /// One progress pass: the MTL's completions end their requests.
    #[inline(never)]
    pub fn progress(&mut self) -> usize {
        let n = self.mtl.progress(&mut self.events);
        if n > 0 {
            let mut events = std::mem::take(&mut self.events);
            for e in events.drain(..) {
                self.on_event(e);
            }
            self.events = events;
        }
        n
    }

    fn on_event(&mut self, e: Event) {
        let r = from_token(e.token);
        let Some(ctx) = self.get(r).map(|q| q.ctx) else {
            return;
        };
        if let Outcome::Received(info) = &e.outcome {
            let peer = self
                .comms
                .get(usize::from(ctx))
                .and_then(Option::as_ref)
                .and_then(|c| c.peers.get(info.source as usize));
            if let Some(&p) = peer {
                self.counters.bytes_received[p as usize] += info.len as u64;
            }
        }
        let q = self.get_mut(r).expect("live");
        if matches!(q.op, Op::Claimed) {
            // No user buffer yet: keep the data in staging for MPI_Imrecv.
            match e.outcome {
                Outcome::Received(info) => q.held = Some(info),
                Outcome::Cancelled | Outcome::Sent => {}
                Outcome::Failed(ref f) => {
                    let pe = mtl_err(f);
                    q.status.error = Some(pe.class);
                    q.status.detail = crate::error::reasons::record(&pe.msg);
                    q.held = Some(oxmpi_mtl::mtl::RecvInfo {
                        source: 0,
                        tag: 0,
                        len: 0,
                        truncated: false,
                    });
                }
            }
            return;
        }
        self.finish_recv(r, e.outcome);
    }

    /// Ends request `r` with the MTL's `outcome` for it.
    fn finish_recv(&mut self, r: ReqRef, outcome: Outcome) {
        let Some(q) = self.get_mut(r) else {
            return;
        };
        match outcome {
            Outcome::Sent => {}
            Outcome::Received(info) => {
                let cap = q.buf.len();
                let got = info.len.min(cap);
                if let Some(copy) = q.staging.take() {
                    q.buf.unpack(0, &copy[..got]);
                }
                q.status.source = info.source as i32;
                q.status.tag = info.tag;
                q.status.bytes = got;
                if info.truncated || info.len > cap {
                    q.status.error = Some(ErrClass::Truncate);
                    q.status.detail = crate::error::reasons::record(&format!(
                        "a message of {} bytes for a receive buffer of {cap}",
                        info.len
                    ));
                }
            }
            Outcome::Cancelled => {
                q.status.cancelled = true;
            }
            Outcome::Failed(ref f) => {
                let pe = mtl_err(f);
                q.status.error = Some(pe.class);
                q.status.detail = crate::error::reasons::record(&pe.msg);
            }
        }
        if let Some(q) = self.get_mut(r) {
            q.staging = None;
        }
        self.complete(r);
    }

    /// Whether request `id` has completed (`MPI_Request_get_status`).
    #[inline(never)]
    pub fn is_complete(&self, id: ReqId) -> Result<bool, PmlError> {
        if id.completed_inline() {
            return Ok(true);
        }
        let q = self
            .get(id.0)
            .ok_or_else(|| err(ErrClass::Request, "invalid request"))?;
        Ok(q.done || !q.active)
    }

    /// `MPI_Test` without progress: the status once complete (a
    /// non-persistent request is then freed).
    #[inline(never)]
    pub fn test(&mut self, id: ReqId) -> Result<Option<Status>, PmlError> {
        if let Some(st) = id.inline_status() {
            return Ok(Some(st));
        }
        let q = self
            .get_mut(id.0)
            .ok_or_else(|| err(ErrClass::Request, "invalid request"))?;
        if !q.active {
            return Ok(Some(Status::empty()));
        }
        if !q.done {
            return Ok(None);
        }
        let status = q.status;
        if q.persistent {
            q.active = false;
        } else {
            self.release(id.0);
        }
        Ok(Some(status))
    }

    /// `MPI_Request_free`: the request is released once it completes.
    #[inline(never)]
    pub fn request_free(&mut self, id: ReqId) -> Result<(), PmlError> {
        if id.completed_inline() {
            return Ok(());
        }
        let q = self
            .get_mut(id.0)
            .ok_or_else(|| err(ErrClass::Request, "invalid request"))?;
        if q.done || !q.active {
            self.release(id.0);
        } else {
            q.user_freed = true;
        }
        Ok(())
    }

    /// `MPI_Cancel`: a posted receive is cancelled through the MTL (its
    /// completion then says so); a send the MTL has is not (it completes
    /// normally).
    #[inline(never)]
    pub fn cancel(&mut self, id: ReqId) -> Result<(), PmlError> {
        if id.completed_inline() {
            return Ok(());
        }
        let q = self
            .get(id.0)
            .ok_or_else(|| err(ErrClass::Request, "invalid request"))?;
        if q.active && !q.done && matches!(q.op, Op::Recv { .. }) {
            self.mtl.cancel(token(id.0));
        }
        Ok(())
    }

    fn probe_source(&self, ctx: u16, src: Source) -> Result<Option<MtlSource>, PmlError> {
        Ok(match src {
            Source::ProcNull => None,
            Source::Any => Some(MtlSource::Any),
            Source::Rank(s) => {
                let peer = self.peer_of(ctx, s)?;
                if let Some(why) = self.dead_peer(peer) {
                    return Err(err(ErrClass::ProcFailed, why.to_string()));
                }
                Some(MtlSource::Rank { rank: s, peer })
            }
        })
    }

    /// `MPI_Iprobe`.
    #[inline(never)]
    pub fn iprobe(&mut self, src: Source, tag: Tag, ctx: u16) -> Result<Option<Status>, PmlError> {
        let Some(source) = self.probe_source(ctx, src)? else {
            return Ok(Some(Status::proc_null()));
        };
        self.progress();
        let found = self
            .mtl
            .iprobe(u32::from(ctx), source, tag_sel(tag))
            .map_err(|e| mtl_err(&e))?;
        Ok(found.map(|i| Status {
            source: i.source as i32,
            tag: i.tag,
            bytes: i.len,
            ..Status::default()
        }))
    }

    /// `MPI_Improbe`: takes the earliest matching message out of matching.
    /// `Ok(Some(None))` is the `MPI_PROC_NULL` case (`MPI_MESSAGE_NO_PROC`).
    ///
    /// The message is found with the MTL's probe and taken at once by a
    /// receive of its exact source and tag into a staging copy of its
    /// length (the earliest message of that source and tag is the one the
    /// probe found: any earlier one would have matched the probe first),
    /// which `MPI_Imrecv` later hands to the user's buffer. This works on
    /// every MTL, where a provider's claim (`FI_CLAIM`) may not: libfabric
    /// 1.17's `tcp;ofi_rxm` never completes a claimed receive of a message
    /// sent by rendezvous.
    #[inline(never)]
    pub fn improbe(
        &mut self,
        src: Source,
        tag: Tag,
        ctx: u16,
    ) -> Result<Option<Option<Message>>, PmlError> {
        let Some(source) = self.probe_source(ctx, src)? else {
            return Ok(Some(None));
        };
        self.progress();
        let Some(info) = self
            .mtl
            .iprobe(u32::from(ctx), source, tag_sel(tag))
            .map_err(|e| mtl_err(&e))?
        else {
            return Ok(None);
        };
        let peer = self.peer_of(ctx, info.source)?;
        let copy = vec![0u8; info.len].into_boxed_slice();
        let region = staging_region(&copy);
        let r = self.new_req(
            Op::Claimed,
            ctx,
            Buffer::Contig(oxmpi_btl::mem::MemRegion::EMPTY),
            false,
        );
        let q = self.get_mut(r).expect("just made");
        q.staging = Some(copy);
        q.active = true;
        let exact = MtlSource::Rank {
            rank: info.source,
            peer,
        };
        if let Err(e) = self.mtl.irecv(
            u32::from(ctx),
            exact,
            TagSel::Value(info.tag),
            region,
            token(r),
        ) {
            self.release(r);
            return Err(mtl_err(&e));
        }
        let slot = match self.claimed.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.claimed.push(None);
                self.claimed.len() - 1
            }
        };
        self.claimed[slot] = Some(r);
        Ok(Some(Some(Message::new(
            ctx,
            Envelope {
                context: u32::from(ctx),
                source: info.source,
                tag: info.tag,
            },
            info.len,
            slot as u32,
        ))))
    }

    /// `MPI_Imrecv`: receives a message taken by [`Cm::improbe`] into `buf`.
    #[inline(never)]
    pub fn imrecv(&mut self, buf: Buffer, msg: Message) -> Result<ReqId, PmlError> {
        let (_, slot) = msg.parts();
        let r = self
            .claimed
            .get_mut(slot as usize)
            .and_then(Option::take)
            .ok_or_else(|| err(ErrClass::Request, "not a matched message of this process"))?;
        let q = self
            .get_mut(r)
            .ok_or_else(|| err(ErrClass::Request, "not a matched message of this process"))?;
        q.op = Op::Mrecv;
        q.buf = buf;
        if let Some(info) = q.held.take() {
            if q.status.error.is_some() {
                self.complete(r);
            } else {
                self.finish_recv(r, Outcome::Received(info));
            }
        }
        Ok(ReqId::of(r))
    }

    fn live(&self) -> impl Iterator<Item = &Req> {
        self.slots.iter().filter_map(|s| s.req.as_ref())
    }

    /// Whether a started, not yet complete request uses context `ctx`.
    pub fn comm_busy(&self, ctx: u16) -> bool {
        self.live().any(|q| q.active && !q.done && q.ctx == ctx)
    }

    /// Requests started and not yet complete (freed and internal ones
    /// included).
    pub fn active_requests(&self) -> usize {
        self.live().filter(|q| q.active && !q.done).count()
    }

    /// The active requests `MPI_Finalize` waits for before its barrier:
    /// none. An MTL cannot tell a send that waits for its match (which may
    /// never come, and is abandoned as ob1 and MPICH abandon it) from one
    /// whose data is on its way; the barrier's progress moves the latter,
    /// and [`Cm::has_work`] drains what the MTL still holds.
    pub fn finalize_waits_for(&self) -> usize {
        0
    }

    /// Whether any world rank has been reported lost.
    pub fn any_dead_peer(&self) -> bool {
        self.n_dead > 0
    }

    /// World rank `peer` is dead by word of the launcher: the MTL fails the
    /// requests that need it, later ones fail at the call.
    pub fn peer_reported_dead(&mut self, peer: u32) {
        if peer != self.me
            && (peer as usize) < self.dead.len()
            && self.dead[peer as usize].is_none()
        {
            self.dead[peer as usize] = Some("the launcher reports the process dead".into());
            self.n_dead += 1;
            self.mtl.del_peers(&[peer]);
        }
    }

    /// Whether world rank `peer` is known to be dead.
    pub fn is_peer_dead(&self, peer: u32) -> bool {
        self.dead_peer(peer).is_some()
    }

    /// The reason world rank `peer` is lost, if it is.
    pub fn dead_peer(&self, peer: u32) -> Option<&str> {
        self.dead.get(peer as usize)?.as_deref()
    }

    /// What an idle wait sleeps on until the MTL has a completion
    /// ([`Mtl::doorbell`]); `None` while the MTL holds operations it has
    /// not handed to the network yet (they need progress, not a sleep).
    pub fn doorbell(&self) -> Option<std::sync::Arc<dyn oxmpi_btl::btl::Doorbell>> {
        if self.mtl.busy() {
            return None;
        }
        self.mtl.doorbell()
    }

    /// Whether the MTL still holds operations it has not handed to the
    /// network (finalize drains them).
    pub fn has_work(&self) -> bool {
        self.mtl.busy()
    }

    /// Closes the MTL (end of finalize, [`Mtl::close`]): every peer then
    /// counts as lost, so later operations fail instead of touching the
    /// network.
    pub fn close(&mut self) {
        let all: Vec<u32> = (0..self.size).filter(|&p| p != self.me).collect();
        self.mtl.del_peers(&all);
        // The provider's endpoint, connections and shared segments go now:
        // the process may exit without dropping the PML.
        self.mtl.close();
        for d in &mut self.dead {
            d.get_or_insert_with(|| "MPI is finalized".to_string());
        }
        self.n_dead = self.dead.len();
    }

    /// Attaches a buffer to `scope` ([`BsendPool::attach_to`]).
    pub fn buffer_attach_to(
        &mut self,
        scope: BufferScope,
        region: Option<MemRegion>,
    ) -> Result<(), PmlError> {
        self.bsend.attach_to(scope, region)
    }

    /// Whether buffered sends still occupy `scope`'s buffer.
    pub fn buffer_busy_in(&self, scope: BufferScope) -> bool {
        self.bsend.busy_in(scope)
    }

    /// Detaches `scope`'s buffer once not busy ([`BsendPool::detach_from`]).
    pub fn buffer_detach_from(
        &mut self,
        scope: BufferScope,
    ) -> Result<Option<MemRegion>, PmlError> {
        self.bsend.detach_from(scope)
    }

    /// `MPI_Buffer_detach` of the process's buffer ([`BsendPool::detach`]).
    pub fn buffer_detach(&mut self) -> Result<MemRegion, PmlError> {
        self.bsend.detach()
    }

    /// Binds context `ctx` to a session ([`BsendPool::bind_session`]).
    pub fn bind_session(&mut self, ctx: u16, session: Option<u64>) {
        self.bsend.bind_session(ctx, session);
    }

    /// The session context `ctx` was bound to.
    pub fn session_of(&self, ctx: u16) -> Option<u64> {
        self.bsend.session_of(ctx)
    }
}
