//! The small-message paths: the immediate send (header and data in one BTL
//! call, no request) and the small receive (a fragment read in place from
//! the source's channel into the user's buffer), and the eager send done
//! inside the call. Everything here is on the per-message hot path: no
//! allocation, no system call, no lock beyond the caller's.

use super::send::prepare_desc;
use super::*;

/// The pattern of a small receive's MATCH header from rank `src` of `ctx`
/// with sequence number `seq`: its first word exactly, its second
/// (`tag_word`, the tag) under a mask.
#[inline(always)]
pub(super) fn small_match(ctx: u16, seq: u16, src: u32, tag_word: [u64; 2]) -> SmallMatch {
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

impl<B: ?Sized + Btl> Ob1<B> {
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
}

impl State {
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
}

impl<B: ?Sized + Btl> Ob1<B> {
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
    pub(super) fn recv_small_from(
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
                // and answering (docs/perf/log/performance-history.md,
                // "Pair lines").
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
    pub(super) fn recv_small_any(
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
    pub(super) fn took_small(&mut self, peer: u32, src: u32, hdr1: u64, len: usize) -> Status {
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
}
