//! RDMA protocols: the receiver's decision on a rendezvous (seed 000,
//! receiver decides), GET and PUT issue, striping over several RDMA BTLs,
//! and the split balancing of a transfer shared between GET and PUT.

use super::*;

/// Smallest RDMA transfer striped over several BTLs.
pub(super) const STRIPE_MIN: usize = 4096;

/// The receiver's share of a split transfer (in 1024ths) before any split
/// with that peer has been timed.
pub(super) const SHARE_HALF: u16 = 512;

/// Bounds of the receiver's share: each side copies at least an eighth.
pub(super) const SHARE_MIN: u16 = 128;

/// See [`SHARE_MIN`].
pub(super) const SHARE_MAX: u16 = 896;

/// Where a split transfer of `[0, len)` divides when the receiver's share
/// is `share` 1024ths: the receiver gets `[0, h)`, the sender puts the
/// rest (`h` on a cache line). `None` when either part would be empty (a
/// short message and a small share): no split then.
pub(super) fn split_point(len: usize, share: u16) -> Option<usize> {
    let h = ((len as u128 * u128::from(share) / 1024) as usize) & !63;
    (h > 0 && h < len).then_some(h)
}

/// The receiver's next share: a quarter of the way from `old` to the share
/// at which both copies of the last split transfer (`get_bytes` in
/// `get_ns` by the receiver, `put_bytes` in `put_ns` by the sender) would
/// have taken the same time; within [`SHARE_MIN`], [`SHARE_MAX`].
pub(super) fn next_share(
    old: u16,
    get_bytes: usize,
    get_ns: u32,
    put_bytes: usize,
    put_ns: u32,
) -> u16 {
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
pub(super) const MIN_COPY_NS: u128 = 2_000;

/// How long a put or get call that began at `t0` and returned at `t1`
/// (the engine's clock, nanoseconds) took: 0 when it returned too quickly
/// to have copied anything, see [`MIN_COPY_NS`]. Timed around the call, not
/// until its completion is reported: the completions of several copies
/// issued in a row are reported together.
pub(super) fn copy_nanos(t0: u64, t1: u64) -> u32 {
    let ns = u128::from(t1.saturating_sub(t0));
    if ns < MIN_COPY_NS {
        0
    } else {
        u32::try_from(ns).unwrap_or(u32::MAX)
    }
}

/// Once both copies of split transfer `rr` are timed (whichever was timed
/// last calls this), moves its peer's share in `split_share` towards the
/// one that balances them, once.
pub(super) fn balance_split(rr: &mut RecvReq, split_share: &mut [u16], counters: &mut Counters) {
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
pub(super) fn release_regs(rr: &mut RecvReq, rcache: &mut Rcache, dereg: &mut Vec<(usize, RegId)>) {
    if !rr.regs.is_empty() {
        for x in rr.regs.drain(..) {
            rcache.release(x, dereg);
        }
    }
}

/// One entry per BTL a transfer's RDMA uses: inline up to the default
/// `pml_ob1_max_rdma_per_request` (4), so striping allocates nothing.
pub(super) type Stripes<T> = SmallVec<[T; 4]>;

/// `[lo, hi)` cut into consecutive parts proportional to `weights`
/// (cache-line aligned cuts; the last part takes the rest).
pub(super) fn weighted_shares(lo: usize, hi: usize, weights: &[u64]) -> Stripes<(usize, usize)> {
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

/// What a receive knows of the rendezvous it matched.
pub(super) struct MatchedRndv {
    pub(super) peer: u32,
    /// The sender's key (RGET), if it offered one.
    pub(super) key: Option<RemoteKey>,
    pub(super) flags: RndvFlags,
    /// The receive buffer, when contiguous.
    pub(super) region: Option<MemRegion>,
    /// Whether the whole message fits the buffer.
    pub(super) fits: bool,
    pub(super) send_req: ReqRef,
    /// Bytes that came with the rendezvous header.
    pub(super) first: usize,
    pub(super) msg_len: usize,
}

/// The receiver's protocol for a matched rendezvous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RndvPlan {
    /// GET from the sender with this RDMA BTL (RGET offered, contiguous
    /// buffer that fits, a BTL that can GET).
    Get(usize),
    /// The sender PUTs the middle with this RDMA BTL (PIN offered,
    /// contiguous buffer that fits, a BTL that can PUT, data beyond the
    /// first fragment); the send/receive pipeline if that cannot start.
    Put(usize),
    /// The send/receive pipeline: ACK the rest.
    Pipeline,
}

impl RndvPlan {
    /// Seed 000's receiver side, in one place: the first RDMA BTL to the
    /// sender decides between GET and PUT; anything else pipelines.
    pub(super) fn choose(st: &State, m: &MatchedRndv) -> RndvPlan {
        let Some(&(b, _)) = st.bml[m.peer as usize].rdma.first() else {
            return RndvPlan::Pipeline;
        };
        if m.region.is_none() || !m.fits {
            return RndvPlan::Pipeline;
        }
        if m.key.is_some() && st.caps[b].contains(Caps::GET) {
            return RndvPlan::Get(b);
        }
        if m.flags.has(RndvFlags::PIN) && st.caps[b].contains(Caps::PUT) && m.msg_len > m.first {
            return RndvPlan::Put(b);
        }
        RndvPlan::Pipeline
    }
}

impl State {
    /// What the matched receive `r` knows of its rendezvous; `None` when it
    /// is not a live receive of a rendezvous.
    pub(super) fn matched_rndv(&mut self, r: ReqRef) -> Option<MatchedRndv> {
        let peer = self.reqs.live_recv_mut(r)?.peer;
        let (key, flags) = self.unexp_rndv_info(r)?;
        let rr = self.reqs.recv_mut(r)?;
        Some(MatchedRndv {
            peer,
            key,
            flags,
            region: rr.buf.contig(),
            fits: rr.msg_len <= rr.buf.len(),
            send_req: rr.send_req,
            first: rr.got,
            msg_len: rr.msg_len,
        })
    }
}

impl<B: ?Sized + Btl> Ob1<B> {
    /// The receiver's decision on a matched RNDV or RGET (seed 000: the
    /// sender proposes, the receiver decides), made in one place
    /// ([`RndvPlan::choose`]) and carried out: a GET (RGET into a
    /// contiguous buffer that fits), the RDMA pipeline or direct put (RNDV
    /// with PIN), else the send/receive pipeline, which is also every
    /// fallback.
    pub(super) fn rndv_matched(&mut self, r: ReqRef) {
        let Some(m) = self.st.matched_rndv(r) else {
            return;
        };
        match RndvPlan::choose(&self.st, &m) {
            RndvPlan::Get(b) => return self.start_rget(r, b, &m),
            RndvPlan::Put(b) => {
                if self.start_rdma_put(r, b, &m) {
                    return;
                }
            }
            RndvPlan::Pipeline => {}
        }
        let st = &mut self.st;
        if m.key.is_some() || m.flags.has(RndvFlags::PIN) {
            st.counters.receiver_fallback += 1;
        }
        if m.msg_len > m.first {
            st.counters.send_pipeline += 1;
        }
        st.actions.push_back(Action::Ctl {
            peer: m.peer,
            hdr: Hdr::Ack {
                send_req: m.send_req,
                recv_req: r,
                send_offset: m.first as u64,
                send_len: (m.msg_len - m.first) as u64,
            },
        });
    }

    /// RGET: we get our share with our RDMA BTL `b`; the parts others copy
    /// are asked of the sender by PUT: the share of each other RDMA BTL
    /// (striping by bandwidth weight), and part of our own share when the
    /// sender has a core to spare (it is not itself getting from us), so
    /// both copy at once; the part follows the measured speed of the two
    /// copies (`split_share`, even halves until measured or when
    /// `pml_ob1_rdma_split_balance` is off).
    fn start_rget(&mut self, r: ReqRef, b: usize, m: &MatchedRndv) {
        let Self { btls, st, .. } = self;
        let (peer, msg_len) = (m.peer, m.msg_len);
        let Some(region) = m.region else {
            return;
        };
        st.counters.rdma_get += 1;
        if let Some(rr) = st.reqs.recv_mut(r) {
            rr.fin_owed = true;
        }
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
        // (With balancing off no split is timed, so the share stays at half.)
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
                            send_req: m.send_req,
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
    }

    /// RNDV with PIN into a contiguous buffer that fits, over RDMA BTL `b`:
    /// the middle of the message by PUTs the sender is asked for (one PUT
    /// per BTL when it is at most `min_rdma_pipeline_size`: RDMA direct
    /// put; else the RDMA pipeline, in each BTL's fragment size), striped
    /// over the RDMA BTLs by bandwidth weight; the tail by the send/receive
    /// pipeline (the ACK). `false` when there is no middle, or its
    /// registration failed: the caller falls back to the send/receive
    /// pipeline.
    fn start_rdma_put(&mut self, r: ReqRef, b: usize, m: &MatchedRndv) -> bool {
        let Self { btls, st, .. } = self;
        let (peer, msg_len, first) = (m.peer, m.msg_len, m.first);
        let Some(region) = m.region else {
            return false;
        };
        let lim = st.limits[b];
        let min_direct = lim.min_rdma_pipeline_size;
        let rest = msg_len - first;
        let tail = lim.rdma_pipeline_send_length.min(rest);
        let middle = rest - tail;
        if middle == 0 {
            return false;
        }
        let mut stripes = st.stripes(peer, b, Caps::PUT);
        if middle < STRIPE_MIN {
            stripes.truncate(1);
        }
        let mut parts = st.stripe_shares(&stripes, first, first + middle);
        parts.retain(|p| p.2 > p.1);
        let Some(keys) = st.register_all(btls, &parts, region, msg_len, r) else {
            return false;
        };
        st.actions.push_back(Action::Ctl {
            peer,
            hdr: Hdr::Ack {
                send_req: m.send_req,
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
                        send_req: m.send_req,
                        recv_req: r,
                        offset: off as u64,
                        len: len as u64,
                        key,
                    },
                });
                off += len;
            }
        }
        true
    }

    pub(super) fn issue_get(&mut self, r: ReqRef) {
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
        let t0 = self.clock.now_ns();
        match btls[b].get(ep, region, &key, 0, tok) {
            Ok(()) => {
                let ns = copy_nanos(t0, self.clock.now_ns());
                st.counters.rdma_bytes_by_btl[b] += region.len() as u64;
                if let Some(rr) = st.reqs.recv_mut(r) {
                    rr.get_ns = ns;
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

    pub(super) fn issue_put(&mut self, ask: PutAsk) {
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
        let t0 = self.clock.now_ns();
        match btls[b].put(ep, local, &key, offset, tok) {
            Ok(()) => {
                let ns = copy_nanos(t0, self.clock.now_ns());
                if let Some(Some(Tok {
                    kind: TokKind::Put { nanos, .. },
                    ..
                })) = st.toks.get_mut(tok.0 as usize)
                {
                    *nanos = ns;
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
}

impl State {
    /// The BTLs one RDMA transfer to `peer` stripes over: `first`, then the
    /// peer's other RDMA BTLs with `cap` (by bandwidth), at most
    /// `pml_ob1_max_rdma_per_request` in all.
    pub(super) fn stripes(&self, peer: u32, first: usize, cap: Caps) -> Stripes<usize> {
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

    /// `[lo, hi)` cut over `stripes` by their BTLs' bandwidth: one
    /// `(btl, lo, hi)` per stripe, in order (a part may be empty).
    pub(super) fn stripe_shares(
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
    pub(super) fn register_all<B: ?Sized + Btl>(
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

    pub(super) fn get_failed(&mut self, r: ReqRef) {
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
}

#[cfg(test)]
mod split_balance {
    use super::{next_share, split_point, SHARE_HALF, SHARE_MAX, SHARE_MIN};

    #[test]
    pub(super) fn the_split_point_follows_the_share_on_a_cache_line() {
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
    pub(super) fn equal_copy_rates_keep_an_even_split() {
        let half = 512 << 10;
        assert_eq!(
            next_share(SHARE_HALF, half, 50_000, half, 50_000),
            SHARE_HALF
        );
    }

    #[test]
    pub(super) fn a_slower_put_moves_bytes_to_the_receiver_until_both_take_as_long() {
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
    pub(super) fn the_share_is_bounded_and_unmeasured_copies_leave_it() {
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
