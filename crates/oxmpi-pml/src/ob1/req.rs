//! Requests and the engine's records: the request slab (`Reqs`), send and
//! receive request state, unexpected messages, BTL tokens, queued actions.

use super::*;

/// One peer's endpoints (seed 001's BML endpoint): eager, send and RDMA
/// lists of (BTL index, endpoint).
#[derive(Clone, Debug, Default)]
pub(super) struct PeerEps {
    pub(super) eager: Option<(usize, Endpoint)>,
    pub(super) send: Vec<(usize, Endpoint)>,
    pub(super) rdma: Vec<(usize, Endpoint)>,
    pub(super) rr: usize,
}

#[derive(Clone, Debug)]
/// A context: `world[r]` is the world rank that rank `r` names (the
/// destination of sends, the source of receives), `me` the rank this
/// process stamps on what it sends. For an intracommunicator `world` is
/// the group and `world[me]` this process; for an intercommunicator
/// (`inter`) `world` is the remote group and `me` this process's rank in
/// the local group, which the remote side's `world` maps back to it.
pub(super) struct Comm {
    pub(super) world: Vec<u32>,
    pub(super) me: u32,
    pub(super) inter: bool,
}

/// Where the cancel of a rendezvous send stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CancelState {
    /// Not cancelled (or the receiver answered that it had matched).
    None,
    /// Cancelled before its first fragment left: a CANCEL follows it.
    Wanted,
    /// A CANCEL is out; its answer decides.
    Sent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Proto {
    Sendi,
    Eager,
    Rndv,
    Rget,
}

#[derive(Debug)]
pub(super) struct SendReq {
    pub(super) ctx: u16,
    pub(super) dst: u32,
    pub(super) peer: u32,
    pub(super) tag: i32,
    pub(super) buf: Buffer,
    pub(super) len: usize,
    pub(super) mode: SendMode,
    pub(super) proto: Proto,
    pub(super) first_len: usize,
    pub(super) first_sent: bool,
    pub(super) first_done: bool,
    pub(super) need_ack: bool,
    pub(super) acked: bool,
    pub(super) fin: bool,
    pub(super) recv_req: ReqRef,
    pub(super) sched_off: usize,
    pub(super) end_off: usize,
    pub(super) inflight: usize,
    pub(super) put_expect: usize,
    pub(super) put_done: usize,
    /// The sender's registration (RGET), boxed: only a rendezvous holds
    /// one, and inline it would widen every request (cache lines).
    pub(super) reg: Option<Box<RegRef>>,
    pub(super) bsend: Option<BsendSlot>,
    pub(super) internal: bool,
    pub(super) credit: usize,
    pub(super) seq: u16,
    /// This send's key for RGET (boxed, as `reg`).
    pub(super) rkey: Option<Box<RemoteKey>>,
    /// Counted in `State::rget_out` until completion.
    pub(super) rget_open: bool,
    /// Where a cancel of this rendezvous stands (the receiver's `true`
    /// answer shows as the request's `status.cancelled`).
    pub(super) cancel: CancelState,
    /// The receiver split this RGET (asked us to put a part): the send
    /// ends only with the receiver's FIN, even after a fallback ACK.
    pub(super) split: bool,
}

#[derive(Debug)]
pub(super) struct RecvReq {
    pub(super) ctx: u16,
    pub(super) src: Source,
    pub(super) tag: Tag,
    pub(super) buf: Buffer,
    pub(super) handle: Option<RecvHandle>,
    pub(super) matched: bool,
    pub(super) peer: u32,
    pub(super) send_req: ReqRef,
    pub(super) msg_len: usize,
    pub(super) got: usize,
    /// Registrations of the receive buffer, one per BTL the transfer's
    /// RDMA uses.
    /// A `Vec` (empty, unallocated, for every eager message) rather than
    /// inline storage, which would widen every request by two cache lines.
    pub(super) regs: Vec<RegRef>,
    /// The sender's key for RGET (boxed, as `regs`).
    pub(super) rkey: Option<Box<RemoteKey>>,
    pub(super) rflags: RndvFlags,
    /// Split transfer: the receiver gets `[0, split)` while the sender
    /// puts `[split, msg_len)` (0: not split).
    pub(super) split: usize,
    /// The sender waits for our FIN (we took the message by GET, whole or
    /// split): sent once, by `check_recv_done`, when every byte is in.
    pub(super) fin_owed: bool,
    /// A split transfer between the two of us alone: once both copies are
    /// timed (`get_ns`, ours; `put_ns`, from the sender's FIN), they
    /// rebalance the peer's next splits (`State::split_share`).
    pub(super) balance: bool,
    pub(super) get_ns: u32,
    pub(super) put_ns: u32,
}

#[derive(Debug)]
pub(super) enum Kind {
    // Inline, not boxed: the slab's slots are reused, so a request costs no
    // allocation once the slab is warm.
    Send(SendReq),
    Recv(RecvReq),
}

#[derive(Debug)]
pub(super) struct Req {
    pub(super) done: bool,
    pub(super) status: Status,
    pub(super) user_freed: bool,
    pub(super) persistent: bool,
    pub(super) active: bool,
    pub(super) kind: Kind,
}

impl SendReq {
    /// Clears what a previous start left (a persistent send restarts).
    pub(super) fn reset_for_start(&mut self) {
        self.first_sent = false;
        self.first_done = false;
        self.acked = false;
        self.fin = false;
        self.sched_off = 0;
        self.end_off = 0;
        self.inflight = 0;
        self.put_expect = 0;
        self.put_done = 0;
        self.credit = 0;
        self.split = false;
        self.cancel = CancelState::None;
    }
}

impl Req {
    /// Whether this active request can only complete once a matching call
    /// is made that may never be: a receive nothing matched, or a
    /// rendezvous or synchronous send whose first fragment went out and
    /// which no answer of its receiver has reached yet (see
    /// [`Ob1::finalize_waits_for`]). A cancel on its way is waited for.
    pub(super) fn waits_for_a_match(&self) -> bool {
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

    pub(super) fn send(&self) -> Option<&SendReq> {
        match &self.kind {
            Kind::Send(s) => Some(s),
            Kind::Recv(_) => None,
        }
    }

    pub(super) fn send_mut(&mut self) -> Option<&mut SendReq> {
        match &mut self.kind {
            Kind::Send(s) => Some(s),
            Kind::Recv(_) => None,
        }
    }

    pub(super) fn recv_mut(&mut self) -> Option<&mut RecvReq> {
        match &mut self.kind {
            Kind::Recv(rr) => Some(rr),
            Kind::Send(_) => None,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) gen: u32,
    pub(super) req: Option<Req>,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum UnexpKind {
    Eager,
    Rndv {
        hdr: RndvHdr,
        key: Option<RemoteKey>,
    },
}

#[derive(Debug)]
pub(super) struct UnexpMsg {
    pub(super) kind: UnexpKind,
    pub(super) peer: u32,
    pub(super) credit: usize,
    pub(super) data: Vec<u8>,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum TokKind {
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
pub(super) struct Tok {
    pub(super) req: ReqRef,
    pub(super) kind: TokKind,
}

/// Work that needs a BTL, queued from inside a BTL's progress call or
/// refused with NoResource and retried.
#[derive(Clone, Copy, Debug)]
pub(super) enum Action {
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
pub(super) fn names(a: &Action, r: ReqRef) -> bool {
    match a {
        Action::Rndv(x) | Action::Drive(x) | Action::Start(x) | Action::Get(x) => *x == r,
        Action::Put(ask) => ask.send_req == r,
        Action::Ctl { .. } | Action::CtlVia { .. } => false,
    }
}

/// A receiver's PUT request, to run.
#[derive(Clone, Copy, Debug)]
pub(super) struct PutAsk {
    pub(super) send_req: ReqRef,
    pub(super) recv_req: ReqRef,
    pub(super) offset: usize,
    pub(super) len: usize,
    pub(super) key: RemoteKey,
    /// The BTL the request arrived on (its key is that BTL's).
    pub(super) btl: usize,
    /// The world rank that asked.
    pub(super) peer: u32,
}

/// The request slab: slots with generations, so a stale or forged
/// reference is recognised.
#[derive(Debug, Default)]
pub(super) struct Reqs {
    pub(super) slots: Vec<Slot>,
    pub(super) free: Vec<u32>,
}

impl Reqs {
    /// Stores the request `make` builds in a free slot. (`make` runs once
    /// the slot is chosen, so the request is built in place: the slot is
    /// large, and moving a finished one in cost a copy per message.)
    #[inline(always)]
    pub(super) fn alloc(&mut self, make: impl FnOnce() -> Req) -> ReqRef {
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

    pub(super) fn free(&mut self, r: ReqRef) {
        if self.get(r).is_some() {
            self.free_live(r.index);
        }
    }

    /// Frees slot `i`, which holds a request (just looked up).
    #[inline]
    pub(super) fn free_live(&mut self, i: u32) {
        let s = &mut self.slots[i as usize];
        s.req = None;
        // Below GEN_RECEIVED (a slot's generation is never an inline
        // receive's), and never 0 (an inline send's).
        s.gen = ((s.gen + 1) & (GEN_RECEIVED - 1)).max(1);
        self.free.push(i);
    }

    pub(super) fn get(&self, r: ReqRef) -> Option<&Req> {
        let s = self.slots.get(r.index as usize)?;
        (s.gen == r.generation).then_some(())?;
        s.req.as_ref()
    }

    pub(super) fn get_mut(&mut self, r: ReqRef) -> Option<&mut Req> {
        let s = self.slots.get_mut(r.index as usize)?;
        (s.gen == r.generation).then_some(())?;
        s.req.as_mut()
    }

    /// Send request `r`.
    pub(super) fn send(&self, r: ReqRef) -> Option<&SendReq> {
        self.get(r).and_then(Req::send)
    }

    /// Send request `r`, to change.
    pub(super) fn send_mut(&mut self, r: ReqRef) -> Option<&mut SendReq> {
        self.get_mut(r).and_then(Req::send_mut)
    }

    /// Receive request `r`, to change.
    pub(super) fn recv_mut(&mut self, r: ReqRef) -> Option<&mut RecvReq> {
        self.get_mut(r).and_then(Req::recv_mut)
    }

    /// Send request `r` while it has not completed.
    pub(super) fn live_send(&self, r: ReqRef) -> Option<&SendReq> {
        self.get(r).filter(|q| !q.done).and_then(Req::send)
    }

    /// Send request `r` while it has not completed, to change.
    pub(super) fn live_send_mut(&mut self, r: ReqRef) -> Option<&mut SendReq> {
        self.get_mut(r).filter(|q| !q.done).and_then(Req::send_mut)
    }

    /// Receive request `r` while it has not completed, to change.
    pub(super) fn live_recv_mut(&mut self, r: ReqRef) -> Option<&mut RecvReq> {
        self.get_mut(r).filter(|q| !q.done).and_then(Req::recv_mut)
    }

    /// The requests started and not complete for which `hit` holds (a
    /// scan of every slot: for failures, never on a fast path).
    pub(super) fn live_where(&self, mut hit: impl FnMut(&Kind) -> bool) -> Vec<ReqRef> {
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
    pub(super) fn matched_recv(
        &mut self,
        r: ReqRef,
        env: Envelope,
        peer: u32,
    ) -> Option<&mut RecvReq> {
        self.matched(r, env, peer).and_then(Req::recv_mut)
    }

    /// As [`Reqs::matched_recv`], returning the whole request (a receive).
    #[inline(always)]
    pub(super) fn matched(&mut self, r: ReqRef, env: Envelope, peer: u32) -> Option<&mut Req> {
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

/// Completes request `q` unless it is already done: marks it done and
/// releases what it holds (registrations, its RGET count towards its peer,
/// its range of the attached buffer). Whether its slot is to be freed now
/// (the program freed it already, or it is an internal buffered send).
#[inline(always)]
pub(super) fn close_req(
    q: &mut Req,
    rcache: &mut Rcache,
    dereg: &mut Vec<(usize, RegId)>,
    rget_out: &mut [u32],
    bsend: &mut BsendPool,
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
            let slot = s.bsend.filter(|_| s.internal);
            if let Some(slot) = slot {
                bsend.release(slot);
            }
            q.user_freed || slot.is_some()
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
pub(super) fn recv_complete(
    q: &mut Req,
    rcache: &mut Rcache,
    dereg: &mut Vec<(usize, RegId)>,
) -> bool {
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

#[cfg(test)]
mod layout {
    /// Every posted receive and tracked send writes and later reads a whole
    /// request slot, so its size is paid per message (the receiver of a
    /// message-rate window touches 64 of them). The RDMA state that only a
    /// rendezvous uses is kept out of line; inline it made a slot 288
    /// bytes (4.5 cache lines).
    #[test]
    pub(super) fn a_request_slot_stays_within_four_cache_lines() {
        let slot = std::mem::size_of::<super::Slot>();
        assert!(slot <= 256, "a request slot is {slot} bytes");
    }
}
