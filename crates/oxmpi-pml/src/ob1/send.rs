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

/// Builds a descriptor of header `hdr` followed by message bytes
/// `[off, off + len)` of `buf` (referenced in place when `inplace` and the
/// buffer is contiguous, packed otherwise) and sends it with a token for
/// request `r`. Returns the outcome; `None` when the BTL refused (the
/// request is queued for a retry from progress) or failed (the request is
/// failed): the caller then stops.
#[allow(clippy::too_many_arguments)]
pub(super) fn send_frag<B: ?Sized + Btl>(
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

    /// A standard or ready send of a small contiguous message, straight
    /// into the eager BTL (seed 000's immediate send) with no request: the
    /// byte count when sent, `None` when the message does not qualify now
    /// (the caller takes the request path).
    #[inline(always)]
    pub(super) fn sendi(
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
    pub(super) fn drive_send(&mut self, r: ReqRef) {
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

    /// What [`Ob1::sendi_bytes`] and [`Ob1::send_eager_now`] both ask
    /// before a send of `len` bytes completes inside the call: our rank in
    /// `ctx`, the peer's world rank, its eager BTL and endpoint. `None` (the
    /// request path) for a queued action (it may start an earlier send, a
    /// buffered send's copy, that has no sequence number yet and must not
    /// be overtaken), an unknown or dead peer, or too little eager credit
    /// for the data and its MATCH header.
    #[inline(always)]
    pub(super) fn eager_now_route(
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
    pub(super) fn eager_route(&self, rank: u32, ctx: u16) -> Option<(u32, usize, Endpoint)> {
        let comm = self.comms.get(usize::from(ctx))?.as_ref()?;
        let peer = *comm.world.get(rank as usize)?;
        let (btl, ep) = self.bml.get(peer as usize)?.eager?;
        Some((peer, btl, ep))
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

    pub(super) fn bsend_start(&mut self, r: ReqRef) {
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
