//! The receiving side: posting (with the small-message receive and the
//! reads of a source's channel before posting), matching, eager data into
//! the user's buffer, probes and matched receives.

use super::*;

/// What one read of a source's channel before posting a receive found.
pub(super) enum Arrived {
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
pub(super) struct Fresh<'b> {
    pub(super) ctx: u16,
    /// Its source (communicator rank).
    pub(super) src: u32,
    /// The world rank of `src`.
    pub(super) peer: u32,
    pub(super) tag: Tag,
    pub(super) buf: &'b Buffer,
    /// Its status, once a message completed it.
    pub(super) got: Option<Status>,
    /// A message went unexpected: read no further.
    pub(super) stop: bool,
}

impl<B: ?Sized + Btl> Ob1<B> {
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

    /// The receive's handle when its message is found among what arrives
    /// from `src` within `polls` reads (one, more only where the BTL
    /// `polls_from_peer`; none when a fitting message is unexpected already,
    /// which posting takes, or when the small receive of the same call just
    /// found the channel empty, `State::read_empty`); `None`: post it.
    /// Inlined into both callers, so [`Ob1::irecv`]'s constant single read
    /// has no loop left.
    #[inline(always)]
    pub(super) fn take_arrived(
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
    pub(super) fn post_new_recv(
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
    pub(super) fn recv_arrived(&mut self, buf: &Buffer, src: u32, tag: Tag, ctx: u16) -> Arrived {
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

    pub(super) fn new_recv(
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
    pub(super) fn probe_source_dead(&self, ctx: u16, src: Source) -> Option<PmlError> {
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
}

impl State {
    pub(super) fn check_recv_done(&mut self, r: ReqRef) {
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

    pub(super) fn start_recv(&mut self, r: ReqRef) {
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
    pub(super) fn post_recv(&mut self, r: ReqRef, ctx: u16, src: Source, tag: Tag) {
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

    pub(super) fn alloc_unexp(&mut self, kind: UnexpKind, peer: u32, credit: usize) -> u32 {
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

    pub(super) fn free_unexp(&mut self, i: u32) -> Option<UnexpMsg> {
        let m = self.unexp.get_mut(i as usize)?.take()?;
        self.free_unexp.push(i);
        Some(m)
    }

    pub(super) fn store_unexp(&mut self, i: u32, payload: &[u8]) {
        if let Some(Some(m)) = self.unexp.get_mut(i as usize) {
            m.data.clear();
            m.data.extend_from_slice(payload);
        }
    }

    /// RNDV information of a matched receive (kept in the request while the
    /// receiver decides): the key for RGET and the flags.
    pub(super) fn unexp_rndv_info(&self, r: ReqRef) -> Option<(Option<RemoteKey>, RndvFlags)> {
        match self.reqs.get(r) {
            Some(Req {
                kind: Kind::Recv(rr),
                ..
            }) => Some((rr.rkey.as_deref().copied(), rr.rflags)),
            _ => None,
        }
    }

    /// A receive met its message (on posting, on arrival, or by mrecv).
    /// `payload` is the fragment still in the BTL's buffer when the match
    /// happens on arrival; otherwise the data waits in the unexpected slot.
    pub(super) fn matched(&mut self, r: ReqRef, slot: u32, env: Envelope, payload: Option<&[u8]>) {
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
    pub(super) fn has_queued(&self) -> bool {
        !self.actions.is_empty() || !self.pending.is_empty() || !self.dereg.is_empty()
    }

    /// An eager message (a MATCH fragment) arrived over BTL `btl`.
    #[inline]
    pub(super) fn on_match(&mut self, m: MatchHdr, payload: &[u8], btl: usize, ep: Endpoint) {
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
    pub(super) fn on_match_fresh(
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
    pub(super) fn take_eager(&mut self, r: ReqRef, env: Envelope, peer: u32, data: &[u8]) {
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
    pub(super) fn arrival_stored(&mut self, m: MatchHdr, slot: u32) {
        self.arrival(m, slot, None);
    }

    pub(super) fn arrival(&mut self, m: MatchHdr, slot: u32, payload: Option<&[u8]>) {
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
}
