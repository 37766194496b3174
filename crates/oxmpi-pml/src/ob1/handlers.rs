//! What arrives: `Sink`, the BTL sink each BTL's progress call reports
//! fragments, completions and lost peers to, one handler per header kind.

use super::*;

/// The BTL callback target while one BTL progresses.
pub(super) struct Sink<'a> {
    pub(super) st: &'a mut State,
    pub(super) btl: usize,
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
        let (btl, from) = (self.btl, st.peer_by_ep(self.btl, ep));
        match hdr {
            Hdr::Match(m) => st.on_match(m, payload, btl, ep),
            Hdr::Rndv(h) => st.on_rndv(h, None, payload, btl, ep),
            Hdr::Rget(h, key) => st.on_rndv(h, Some(key), payload, btl, ep),
            Hdr::Ack {
                send_req,
                recv_req,
                send_offset,
                send_len,
            } => st.on_ack(from, send_req, recv_req, send_offset, send_len),
            Hdr::Nack {
                send_req, error, ..
            } => st.on_nack(from, send_req, error),
            Hdr::Frag {
                recv_req, offset, ..
            } => st.on_frag(from, recv_req, offset, payload),
            Hdr::Put {
                send_req,
                recv_req,
                offset,
                len,
                key,
            } => st.on_put_request(
                from,
                PutAsk {
                    send_req,
                    recv_req,
                    offset: offset as usize,
                    len: len as usize,
                    key,
                    btl,
                    peer: from.unwrap_or(u32::MAX),
                },
            ),
            Hdr::Fin {
                req,
                size,
                status,
                nanos,
            } => st.on_fin(from, req, size, status, nanos),
            Hdr::Credit { bytes } => st.on_credit(from, bytes),
            Hdr::Cancel {
                send_req,
                ctx,
                seq,
                src,
                tag,
            } => st.on_cancel(from, send_req, ctx, seq, src, tag),
            Hdr::CancelAck {
                send_req,
                seq,
                cancelled,
            } => st.on_cancel_ack(from, send_req, seq, cancelled),
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
            self.st.peer_unreachable(peer, why);
        }
    }

    fn on_local_fault(&mut self, why: &BtlError) {
        self.st.local_fault(None, why);
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
    pub(super) fn peer_of(&mut self, ctx: u16, src: u32, btl: usize, ep: Endpoint) -> Option<u32> {
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
    pub(super) fn puts_refused(&mut self, peer: u32) {
        self.counters.bad_fragments += 1;
        let waiting = self.reqs.live_where(|kind| {
            matches!(kind, Kind::Recv(rr) if rr.matched && rr.peer == peer && !rr.regs.is_empty())
        });
        for r in waiting {
            self.fail(r, ErrClass::Intern, "a put of its data was refused here");
        }
    }

    pub(super) fn peer_by_ep(&self, btl: usize, ep: Endpoint) -> Option<u32> {
        let p = *self.ep_peer.get(btl)?.get(ep.0 as usize)?;
        (p != u32::MAX).then_some(p)
    }

    /// [`State::serves`], a stale reference counted as a bad fragment too:
    /// whether the header may act on `r`.
    pub(super) fn named_by(
        &mut self,
        r: ReqRef,
        from: Option<u32>,
        send: bool,
        what: &str,
    ) -> bool {
        match self.serves(r, from, send, what) {
            Some(ok) => ok,
            None => {
                self.counters.bad_fragments += 1;
                false
            }
        }
    }

    /// Whether request `r`, named by a header from world rank `from`, is a
    /// live send to (`send`) or matched receive from that rank:
    /// `Some(true)` it is; `Some(false)` it is another peer's (a forged
    /// reference: a protocol error, counted as a bad fragment and logged
    /// naming the sender; the header must be dropped); `None` no such live
    /// request (stale: the caller decides, some answers legitimately come
    /// late).
    pub(super) fn serves(
        &mut self,
        r: ReqRef,
        from: Option<u32>,
        send: bool,
        what: &str,
    ) -> Option<bool> {
        let owner = match self.reqs.get(r) {
            Some(Req {
                kind: Kind::Send(s),
                done: false,
                ..
            }) if send => Some(s.peer),
            Some(Req {
                kind: Kind::Recv(rr),
                done: false,
                ..
            }) if !send && rr.matched => Some(rr.peer),
            _ => None,
        };
        let owner = owner?;
        if Some(owner) == from {
            return Some(true);
        }
        tracing::warn!(
            from = ?from,
            owner,
            "protocol error: {what} from rank {from:?} names a request of rank {owner}; dropped"
        );
        self.counters.bad_fragments += 1;
        Some(false)
    }
}

/// One handler per header kind (`from`: the world rank of the sender, when
/// its endpoint is known).
impl State {
    /// RNDV or RGET (`key`): a rendezvous arrives, its first bytes with it.
    fn on_rndv(
        &mut self,
        h: RndvHdr,
        key: Option<RemoteKey>,
        payload: &[u8],
        btl: usize,
        ep: Endpoint,
    ) {
        let Some(peer) = self.peer_of(h.m.ctx, h.m.src, btl, ep) else {
            return;
        };
        if payload.len() as u64 > h.msg_len {
            self.counters.bad_fragments += 1;
            return;
        }
        let credit = if key.is_some() {
            0
        } else {
            payload.len() + RNDV_LEN
        };
        let slot = self.alloc_unexp(UnexpKind::Rndv { hdr: h, key }, peer, credit);
        self.arrival(h.m, slot, Some(payload));
    }

    /// ACK: the receiver matched our rendezvous and asks for
    /// `[send_offset, send_offset + send_len)` by the send/receive pipeline.
    fn on_ack(
        &mut self,
        from: Option<u32>,
        send_req: ReqRef,
        recv_req: ReqRef,
        send_offset: u64,
        send_len: u64,
    ) {
        if !self.named_by(send_req, from, true, "an ACK") {
            return;
        }
        let Some(s) = self.reqs.live_send_mut(send_req) else {
            self.counters.bad_fragments += 1;
            return;
        };
        let (off, len) = (send_offset as usize, send_len as usize);
        if off.checked_add(len).map_or(true, |e| e > s.len) || off < s.first_len {
            self.counters.bad_fragments += 1;
            self.fail(send_req, ErrClass::Intern, "ACK outside the message");
            return;
        }
        s.acked = true;
        s.recv_req = recv_req;
        s.sched_off = off;
        s.end_off = off + len;
        s.put_expect = off - s.first_len;
        if s.proto == Proto::Rget {
            // The receiver declined the get: pipeline instead. If the ACK
            // covers only part of the message, the rest comes by puts it
            // asked for (a split or striped transfer, possibly over other
            // links and not yet here): the send then ends only with the
            // receiver's FIN.
            if off + len < s.len {
                s.split = true;
            }
            s.proto = Proto::Rndv;
            if s.rget_open {
                s.rget_open = false;
                let n = &mut self.rget_out[s.peer as usize];
                *n = n.saturating_sub(1);
            }
        }
        self.actions.push_back(Action::Drive(send_req));
    }

    /// NACK: the receiver refused our message (`error`: its class).
    fn on_nack(&mut self, from: Option<u32>, send_req: ReqRef, error: i32) {
        if !self.named_by(send_req, from, true, "a NACK") {
            return;
        }
        let class = match error {
            15 => ErrClass::Truncate,
            75 => ErrClass::ProcFailed,
            _ => ErrClass::Other,
        };
        self.fail(send_req, class, "the receiver refused the message");
    }

    /// FRAG: a piece of the send/receive pipeline, at `offset`.
    fn on_frag(&mut self, from: Option<u32>, recv_req: ReqRef, offset: u64, payload: &[u8]) {
        if !self.named_by(recv_req, from, false, "a FRAG") {
            return;
        }
        let Some(rr) = self.reqs.live_recv_mut(recv_req) else {
            self.counters.bad_fragments += 1;
            return;
        };
        let off = offset as usize;
        if !rr.matched
            || off
                .checked_add(payload.len())
                .map_or(true, |e| e > rr.msg_len)
        {
            self.counters.bad_fragments += 1;
            return;
        }
        rr.buf.unpack(off, payload);
        rr.got += payload.len();
        let peer = rr.peer as usize;
        self.counters.bytes_received[peer] += payload.len() as u64;
        self.check_recv_done(recv_req);
    }

    /// PUT: the receiver asks for a range of our send by RDMA put.
    fn on_put_request(&mut self, from: Option<u32>, ask: PutAsk) {
        if !self.named_by(ask.send_req, from, true, "a PUT request") {
            return;
        }
        if let Some(s) = self.reqs.live_send_mut(ask.send_req) {
            if s.proto == Proto::Rget {
                s.split = true;
            }
        }
        self.actions.push_back(Action::Put(ask));
    }

    /// FIN: the other side's RDMA into our buffer (a receive) or out of it
    /// (a send) is done, with `status` 0, or failed.
    fn on_fin(&mut self, from: Option<u32>, req: ReqRef, size: u64, status: i32, nanos: u32) {
        let is_send = matches!(
            self.reqs.get(req),
            Some(Req {
                kind: Kind::Send(_),
                ..
            })
        );
        if !self.named_by(req, from, is_send, "a FIN") {
            return;
        }
        match self.reqs.get_mut(req) {
            Some(Req {
                kind: Kind::Send(s),
                done: false,
                ..
            }) => {
                if status != 0 {
                    self.fail(req, ErrClass::Other, "the receiver's RDMA failed");
                    return;
                }
                s.fin = true;
                self.check_send_done(req);
            }
            Some(Req {
                kind: Kind::Recv(rr),
                done: false,
                ..
            }) => {
                if status != 0 {
                    self.fail(req, ErrClass::Other, "the sender's RDMA put failed");
                    return;
                }
                rr.got += size as usize;
                let peer = rr.peer as usize;
                self.counters.bytes_received[peer] += size;
                if nanos > 0 {
                    rr.put_ns = nanos;
                }
                balance_split(rr, &mut self.split_share, &mut self.counters);
                self.check_recv_done(req);
            }
            _ => self.counters.bad_fragments += 1,
        }
    }

    /// CREDIT: the peer consumed `bytes` of our eager sends.
    fn on_credit(&mut self, from: Option<u32>, bytes: u64) {
        let Some(peer) = from else {
            return;
        };
        let c = &mut self.credits[peer as usize];
        *c = c.saturating_add(bytes as usize).min(self.cfg.eager_credits);
    }

    /// CANCEL: the sender cancels a rendezvous it sent us; we answer
    /// whether it was still unmatched (and is now gone).
    fn on_cancel(
        &mut self,
        from: Option<u32>,
        send_req: ReqRef,
        ctx: u16,
        seq: u16,
        src: u32,
        tag: i32,
    ) {
        let Some(peer) = from else {
            return;
        };
        let cancelled = self.drop_unmatched_rndv(peer, send_req, ctx, seq, src, tag);
        self.actions.push_back(Action::Ctl {
            peer,
            hdr: Hdr::CancelAck {
                send_req,
                seq,
                cancelled,
            },
        });
    }

    /// CANCEL_ACK: the answer to our CANCEL.
    fn on_cancel_ack(&mut self, from: Option<u32>, send_req: ReqRef, seq: u16, cancelled: bool) {
        // An answer may come after the send completed (matched meanwhile):
        // only another peer's live send is an error.
        if self.serves(send_req, from, true, "a CANCEL answer") != Some(true) {
            return;
        }
        let Some(q) = self.reqs.get_mut(send_req) else {
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
                self.check_send_done(send_req);
            }
        }
    }
}
