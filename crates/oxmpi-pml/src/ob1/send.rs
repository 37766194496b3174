//! The sending side: protocol selection (seed 000, sender proposes), eager
//! sends (immediate, prepared, copied), the rendezvous start, the
//! send/receive pipeline, buffered sends and cancel.

use super::*;

/// A descriptor holding `hdr` and bytes `[off, off + len)` of `buf`: the
/// data referenced in place when `inplace` and contiguous, else packed in.
pub(super) fn prepare_desc<B: ?Sized + Btl>(
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
pub(super) fn frag_refused(st: &mut State, r: ReqRef, e: &BtlError) -> Option<SendOutcome> {
    if *e == BtlError::NoResource {
        st.counters.no_resource += 1;
        st.pending.push_back(Action::Drive(r));
    } else {
        st.fail_btl(r, e);
    }
    None
}

/// One fragment of a send: header `hdr` followed by message bytes
/// `[off, off + len)` of `buf`, to `ep` with active-message `tag`, its
/// completion a token of `kind`.
pub(super) struct Frag<'a> {
    pub(super) ep: Endpoint,
    pub(super) tag: AmTag,
    pub(super) kind: TokKind,
    pub(super) hdr: &'a [u8],
    pub(super) buf: &'a Buffer,
    pub(super) off: usize,
    pub(super) len: usize,
    /// Reference the data in place when the buffer is contiguous.
    pub(super) inplace: bool,
}

/// Sends fragment `f` of request `r` (its data in place when it can, else
/// packed into the BTL's memory or a descriptor). Returns the outcome;
/// `None` when the BTL refused (the request is queued for a retry from
/// progress) or failed (the request is failed): the caller then stops.
pub(super) fn send_frag<B: ?Sized + Btl>(
    btl: &mut B,
    st: &mut State,
    r: ReqRef,
    f: &Frag<'_>,
) -> Option<SendOutcome> {
    let Frag {
        ep,
        tag,
        kind,
        hdr,
        buf,
        off,
        len,
        inplace,
    } = *f;
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

impl<B: ?Sized + Btl> Ob1<B> {
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

    pub(super) fn new_send(
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

    /// Starts (or restarts, for a persistent request) send `r`: buffered
    /// sends go through the attached buffer; the others take their
    /// sequence number, the protocol [`SendPlan::choose`] proposes, and go.
    pub(super) fn start_send(&mut self, r: ReqRef) {
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
        s.reset_for_start();
        s.seq = match st.seq.next_seq(u32::from(s.ctx), s.dst) {
            Ok(q) => q,
            Err(e) => {
                let msg = format!("{e:?}");
                st.fail(r, ErrClass::Comm, &msg);
                return;
            }
        };
        st.propose(r, peer, b);
        self.drive_send(r);
    }

    /// Sends what a send request can send now: its first fragment, then
    /// pipeline fragments up to the depth. Idempotent; re-run from progress
    /// after NoResource or an ACK.
    pub(super) fn drive_send(&mut self, r: ReqRef) {
        let Some(s) = self.st.reqs.live_send(r) else {
            return;
        };
        if !s.first_sent && !self.send_first(r) {
            return;
        }
        // Cancelled before the rendezvous left: ask now that it has.
        if let Some(s) = self.st.reqs.live_send(r) {
            if s.cancel == CancelState::Wanted && s.first_sent {
                self.st.send_cancel(r);
            }
        }
        if !self.send_pipeline(r) {
            return;
        }
        self.st.check_send_done(r);
    }

    /// The first fragment's header: MATCH for an eager send, RNDV or RGET
    /// (registering the buffer for the peer's GET first) for a rendezvous.
    /// `None`: nothing to send now (the send was re-queued as a plain
    /// rendezvous after a failed registration, or failed).
    fn first_header(&mut self, r: ReqRef) -> Option<Hdr> {
        let Self { btls, st, .. } = self;
        let s = st.reqs.live_send_mut(r)?;
        let peer = s.peer as usize;
        let comm_me = st.comms[usize::from(s.ctx)].as_ref().map_or(0, |c| c.me);
        let m = MatchHdr {
            ctx: s.ctx,
            seq: s.seq,
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
        match s.proto {
            Proto::Sendi | Proto::Eager => return Some(Hdr::Match(m)),
            Proto::Rndv => return Some(Hdr::Rndv(rndv)),
            Proto::Rget => {}
        }
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
                    st.actions.push_back(Action::Drive(r));
                    return None;
                }
            }
        }
        match s.rkey.as_deref() {
            Some(&k) => Some(Hdr::Rget(rndv, k)),
            None => {
                st.fail(r, ErrClass::Intern, "registration lost");
                None
            }
        }
    }

    /// Sends the first fragment (header and the first bytes): in one
    /// immediate send when it fits, else prepared in place or copied.
    /// Whether the send goes on (`false`: it cannot now, or failed).
    fn send_first(&mut self, r: ReqRef) -> bool {
        let Some(s) = self.st.reqs.live_send(r) else {
            return false;
        };
        let peer = s.peer as usize;
        let Some((b, ep)) = self.st.bml[peer].eager else {
            return false;
        };
        let Some(hdr) = self.first_header(r) else {
            return false;
        };
        let Self { btls, st, .. } = self;
        let Some(s) = st.reqs.live_send_mut(r) else {
            return false;
        };
        let mut hb = [0u8; MAX_LEN];
        let hl = hdr.emit(&mut hb);
        let tag = hdr.kind().am_tag();
        let first = s.first_len;
        let lim = st.limits[b];
        let caps = st.caps[b];
        // Immediate send: header and data in one BTL call, no descriptor.
        let immediate = (s.proto == Proto::Sendi
            || (first <= st.cfg.sendi_limit
                && hl + first <= lim.max_sendi_size
                && caps.contains(Caps::SENDI)))
            && s.buf.contig().is_some();
        if immediate {
            let region = s.buf.contig().expect("contiguous");
            let data = region.read();
            match btls[b].sendi(ep, tag, &[&hb[..hl], &data[..first]]) {
                Ok(()) => {
                    if s.proto == Proto::Sendi {
                        st.counters.eager_sendi += 1;
                    }
                    st.counters.bytes_sent[peer] += first as u64;
                    s.first_sent = true;
                    s.first_done = true;
                    return true;
                }
                Err(BtlError::NoResource) => {}
                Err(e) => {
                    st.fail_btl(r, &e);
                    return false;
                }
            }
        }
        if s.proto == Proto::Sendi {
            s.proto = Proto::Eager;
        }
        let inplace = caps.contains(Caps::SEND_INPLACE) && first > 0;
        let is_eager = s.proto == Proto::Eager;
        let buf = s.buf.clone();
        let frag = Frag {
            ep,
            tag,
            kind: TokKind::First,
            hdr: &hb[..hl],
            buf: &buf,
            off: 0,
            len: first,
            inplace,
        };
        let Some(out) = send_frag(btls[b].as_mut(), st, r, &frag) else {
            return false;
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
        true
    }

    /// The send/receive pipeline, once acknowledged: fragments up to the
    /// pipeline depth, round-robin over the peer's send BTLs. Whether the
    /// send goes on (`false`: it is gone, or a fragment could not go).
    fn send_pipeline(&mut self, r: ReqRef) -> bool {
        let Self { btls, st, .. } = self;
        loop {
            let Some(s) = st.reqs.live_send_mut(r) else {
                return false;
            };
            if !s.acked || s.sched_off >= s.end_off || s.inflight >= st.cfg.send_pipeline_depth {
                return true;
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
            let frag = Frag {
                ep,
                tag: HdrType::Frag.am_tag(),
                kind: TokKind::Frag,
                hdr: &hb[..hl],
                buf: &buf,
                off,
                len: chunk,
                inplace,
            };
            let Some(out) = send_frag(btls[b].as_mut(), st, r, &frag) else {
                return false;
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
    }

    /// Sends a control header (ACK, FIN, NACK, CREDIT) to world rank `peer`.
    pub(super) fn send_ctl(&mut self, peer: u32, hdr: Hdr, via: Option<usize>) {
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
                st.peer_unreachable(peer, &e);
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
                        st.peer_unreachable(peer, &e);
                    }
                }
            }
            Err(BtlError::NoResource) => {
                st.counters.no_resource += 1;
                st.pending.push_back(retry(hdr));
            }
            Err(e) => st.peer_unreachable(peer, &e),
        }
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
    pub(super) fn cancel_to_self(&mut self, r: ReqRef) {
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
}

impl State {
    pub(super) fn check_send_done(&mut self, r: ReqRef) {
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

    /// The receiving side of a CANCEL: takes the rendezvous of `peer`'s
    /// send request `send_req` (round `seq`, rank `src` of `ctx`, `tag`)
    /// out of the unexpected messages if it is still there, unmatched;
    /// whether it was (the CANCEL_ACK's answer).
    pub(super) fn drop_unmatched_rndv(
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
    pub(super) fn send_cancel(&mut self, r: ReqRef) {
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

    /// Returns eager credit to a sender once its bytes left our queues.
    #[inline]
    pub(super) fn return_credit(&mut self, peer: u32, bytes: usize) {
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
    pub(super) fn queue_credit(&mut self, peer: u32) {
        let b = std::mem::take(&mut self.owed[peer as usize]);
        self.counters.credits_returned += 1;
        self.actions.push_back(Action::Ctl {
            peer,
            hdr: Hdr::Credit { bytes: b as u64 },
        });
    }
}

/// The sender's proposal for one message (seed 000: the sender proposes,
/// the receiver decides), decided in one place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SendPlan {
    /// Eager, header and data in one immediate send.
    Sendi,
    /// Eager, prepared in place or copied.
    Eager,
    /// Rendezvous offering the receiver a GET of the whole message.
    Rget,
    /// Rendezvous with the first `first_len` bytes.
    Rndv {
        /// Bytes sent with the header.
        first_len: usize,
    },
}

impl SendPlan {
    /// The protocol for a message of `len` bytes (`contig`: in one piece;
    /// `sync`: synchronous) to a peer reached first by a BTL of `lim` and
    /// `caps`, with `credits` bytes of eager credit left, when the peer's
    /// first RDMA BTL can GET (`rdma_get`):
    ///
    /// ```text
    /// if not sync and len + MATCH <= eager_limit and the credit covers it:
    ///     immediate if contiguous and small enough for sendi, else eager
    /// elif contiguous, not empty and the first RDMA BTL can GET: RGET
    /// else: RNDV with as much of rndv_eager_limit as the credit covers
    /// ```
    pub(super) fn choose(
        len: usize,
        (contig, sync): (bool, bool),
        credits: usize,
        (lim, caps): (&Limits, Caps),
        sendi_limit: usize,
        rdma_get: bool,
    ) -> SendPlan {
        let wire = len + MATCH_LEN;
        if !sync && wire <= lim.eager_limit && credits >= wire {
            return if contig
                && caps.contains(Caps::SENDI)
                && len <= sendi_limit
                && wire <= lim.max_sendi_size
            {
                SendPlan::Sendi
            } else {
                SendPlan::Eager
            };
        }
        if contig && rdma_get && len > 0 {
            return SendPlan::Rget;
        }
        let room = lim.rndv_eager_limit.saturating_sub(RNDV_LEN);
        let want = len
            .min(room)
            .min(lim.max_send_size.saturating_sub(RNDV_LEN));
        let first_len = if credits >= want + RNDV_LEN { want } else { 0 };
        SendPlan::Rndv { first_len }
    }
}

impl State {
    /// Chooses send `r`'s protocol ([`SendPlan::choose`]) to world rank
    /// `peer` whose eager BTL is `b`, and takes the eager credit it needs.
    pub(super) fn propose(&mut self, r: ReqRef, peer: usize, b: usize) {
        let rdma_get = self.bml[peer]
            .rdma
            .first()
            .is_some_and(|&(i, _)| self.caps[i].contains(Caps::GET));
        let (lim, caps) = (self.limits[b], self.caps[b]);
        let (credits, sendi_limit) = (self.credits[peer], self.cfg.sendi_limit);
        let Some(s) = self.reqs.send_mut(r) else {
            return;
        };
        let (len, contig) = (s.len, s.buf.contig().is_some());
        let sync = s.mode == SendMode::Synchronous;
        if sync {
            self.counters.synchronous += 1;
        }
        let plan = SendPlan::choose(
            len,
            (contig, sync),
            credits,
            (&lim, caps),
            sendi_limit,
            rdma_get,
        );
        let wire = len + MATCH_LEN;
        if matches!(plan, SendPlan::Rget | SendPlan::Rndv { .. })
            && !sync
            && wire <= lim.eager_limit
        {
            self.counters.rndv_forced_by_credits += 1;
        }
        match plan {
            SendPlan::Sendi | SendPlan::Eager => {
                self.credits[peer] -= wire;
                s.credit = wire;
                s.need_ack = false;
                s.first_len = len;
                s.proto = if plan == SendPlan::Sendi {
                    Proto::Sendi
                } else {
                    Proto::Eager
                };
            }
            SendPlan::Rget => {
                s.need_ack = true;
                s.proto = Proto::Rget;
                s.first_len = 0;
                self.counters.rget += 1;
                if !s.rget_open {
                    s.rget_open = true;
                    self.rget_out[peer] += 1;
                }
            }
            SendPlan::Rndv { first_len } => {
                s.need_ack = true;
                s.proto = Proto::Rndv;
                s.first_len = first_len;
                s.credit = first_len + RNDV_LEN;
                self.credits[peer] = self.credits[peer].saturating_sub(s.credit);
                self.counters.rndv += 1;
            }
        }
    }
}
