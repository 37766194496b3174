//! The shared-memory BTL (`sm`): ranks of one node talk through rings in
//! shared memory, and move large data with one copy through CMA.
//!
//! # Pieces
//!
//! * Every rank owns one segment (layout in [`super::attach`]): a control
//!   block, its inbox (one ring per other local rank, [`super::ring`]) and
//!   its registration table ([`super::regs`]). Its business card
//!   ([`super::card`]) tells the node's other ranks how to attach it.
//! * [`SmBtl::add_peer`] only parses the peer's card; the first operation
//!   towards the peer binds it ([`super::peer`]).
//! * `sendi`/`send` copy the message straight into the ring (records take
//!   32-byte slots, two to a cache line: up to 24 bytes with the ring's
//!   header is one slot); a full ring is
//!   `NoResource`. The data path makes no system call, takes no lock and
//!   allocates nothing (descriptor buffers come from a free list); but a
//!   receiver asleep on its inbox's doorbell is woken (`futex_wake`) by the
//!   record that arrives ([`Btl::wakeup`], `ring::bell`).
//! * `put`/`get` with CMA: the initiator checks the remote key against the
//!   owner's registration table (in the owner's segment: a stale, forged or
//!   out-of-range key is `Invalid` and nothing is touched), then does one
//!   `process_vm_writev`/`readv` of the whole range; its completion is
//!   reported by the next `progress`. Without CMA to that peer (the peer's or
//!   our single copy disabled, or the probe failed) the same calls are
//!   emulated by copy-in/copy-out over the rings ([`super::copy`]). They
//!   never fail for lack of CMA.
//! * Peer loss: see [`super::peer`].
//!
//! This module holds no `unsafe` code: formatting and attaching the rings
//! in mapped memory is [`super::attach`]'s.

use std::collections::VecDeque;
use std::sync::Arc;

use super::attach::{self, Layout};
use super::card::SmCard;
use super::copy::{self, Op, Ops};
use super::doorbell::SmDoorbell;
use super::peer::{Peer, PeerState};
use super::regs::{self, Key, Regs, ACCESS_READ, ACCESS_WRITE, NO_SLOT};
use super::ring::{self, InboxReceiver, Ring, RingProducer, SendError};
use super::segment::{Segment, DATA_OFFSET};
use crate::btl::{
    Access, AmTag, Btl, BtlError, BtlSink, Caps, Descriptor, Endpoint, Limits, PeerInfo, RegId,
    Registration, RemoteKey, SendOutcome, SmallMatch, SmallRecv, Token, Wakeup,
};
use crate::cma::{self, CmaError, ProbeWord};
use crate::mem::{copy_bytes, MemRegion};

pub use super::card::SM_CARD_LEN;
pub use super::config::{
    default_ring_capacity, SmConfig, BIG_RING, BIG_RING_RANKS, DEFAULT_EVICT_AHEAD, DEFAULT_LIMITS,
};
pub use super::peer::SWEEP_EVERY;
pub use super::regs::REGISTRATION_SLOTS;

/// Spare descriptor buffers kept for reuse.
const MAX_SPARE: usize = 16;

// `sender_ep` markers.
const EP_NONE: u32 = u32::MAX;
const EP_DELETED: u32 = u32::MAX - 1;

/// The shared-memory BTL module of one rank.
pub struct SmBtl {
    // Field order matters for drop: peers (with their producers and
    // mappings) first of all, then the inbox receiver, then the segment it
    // lives in (which marks itself closed). Every ring handle also keeps
    // the memory it lies in alive (see `attach`).
    pub(super) peers: Vec<Peer>,
    pub(super) rx: InboxReceiver,
    pub(super) segment: Arc<Segment>,
    pub(super) layout: Layout,
    /// Endpoint index by ring index of our inbox (`EP_NONE`, `EP_DELETED`).
    pub(super) sender_ep: Vec<u32>,
    pub(super) local_index: u32,
    pub(super) local_count: u32,
    pub(super) ring_capacity: usize,
    pub(super) pid: u32,
    pub(super) limits: Limits,
    pub(super) caps: Caps,
    pub(super) cma_ok: bool,
    pub(super) pair_boxes: bool,
    pub(super) probe: ProbeWord,
    pub(super) regs: Regs,
    pub(super) ops: Ops,
    pub(super) completions: VecDeque<(Token, Result<(), BtlError>)>,
    pub(super) lost_reports: Vec<(Endpoint, BtlError)>,
    pub(super) orphans: VecDeque<(usize, u8, bool, Vec<u8>)>,
    pub(super) orphan_warned: bool,
    pub(super) spare: Vec<Vec<u8>>,
    /// Copy-in/copy-out work is queued on some peer.
    pub(super) emu_dirty: bool,
    pub(super) bound: usize,
    pub(super) idle: u32,
    pub(super) sweep_next: usize,
    /// Our inbox's bell, which peers ring (a waiter sleeps on it).
    pub(super) doorbell: Arc<SmDoorbell>,
}

impl std::fmt::Debug for SmBtl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmBtl")
            .field("local_index", &self.local_index)
            .field("local_count", &self.local_count)
            .field("ring_capacity", &self.ring_capacity)
            .field("caps", &self.caps)
            .field("peers", &self.peers.len())
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

impl SmBtl {
    /// Creates this rank's segment (its inbox: one ring per other local rank,
    /// and its registration table) and prepares CMA.
    pub fn new(cfg: SmConfig) -> Result<SmBtl, BtlError> {
        if cfg.local_count == 0 || cfg.local_index >= cfg.local_count {
            return Err(BtlError::Invalid(format!(
                "sm: local index {} of {} local ranks",
                cfg.local_index, cfg.local_count
            )));
        }
        Ring::check_capacity(cfg.ring_capacity)
            .map_err(|e| BtlError::Invalid(format!("sm: btl_sm_ring_size: {e}")))?;
        let layout = Layout::new(cfg.local_count, cfg.ring_capacity)?;
        let mut limits = cfg.limits;
        let max_payload = Ring::max_payload(cfg.ring_capacity);
        limits.max_send_size = limits.max_send_size.min(max_payload);
        limits.max_sendi_size = limits.max_sendi_size.min(max_payload);
        limits.eager_limit = limits.eager_limit.min(limits.max_send_size);
        limits.rndv_eager_limit = limits.rndv_eager_limit.min(limits.max_send_size);

        let (segment, rx) = attach::create(&cfg, &layout)?;
        let doorbell = Arc::new(SmDoorbell::new(rx.bell()));

        let cma_ok = if cfg.single_copy {
            cma::prepare().is_possible()
        } else {
            tracing::debug!("sm: single copy disabled (btl_sm_single_copy), no put/get");
            false
        };
        let mut caps =
            Caps::SEND | Caps::SENDI | Caps::SEND_INPLACE | Caps::ORDERED | Caps::SEND_DONE;
        if cma_ok {
            caps = caps | Caps::PUT | Caps::GET;
        }
        let senders = (cfg.local_count - 1) as usize;
        Ok(SmBtl {
            peers: Vec::new(),
            rx,
            segment,
            layout,
            sender_ep: vec![EP_NONE; senders],
            local_index: cfg.local_index,
            local_count: cfg.local_count,
            ring_capacity: cfg.ring_capacity,
            pid: std::process::id(),
            limits,
            caps,
            cma_ok,
            pair_boxes: cfg.pair_boxes,
            probe: ProbeWord::new(),
            regs: Regs::new(),
            ops: Ops::default(),
            completions: VecDeque::new(),
            lost_reports: Vec::new(),
            orphans: VecDeque::new(),
            orphan_warned: false,
            spare: Vec::new(),
            emu_dirty: false,
            bound: 0,
            idle: 0,
            sweep_next: 0,
            doorbell,
        })
    }

    /// Bytes of the shared object each rank creates for `local_count` local
    /// ranks and rings of `ring_capacity` (header page, control block, inbox,
    /// registration table): the shared memory per rank.
    pub fn segment_bytes(local_count: u32, ring_capacity: usize) -> Result<usize, BtlError> {
        Ok(DATA_OFFSET + Layout::new(local_count, ring_capacity)?.total)
    }

    /// Whether put/get towards `ep` use CMA (single copy) rather than
    /// copy-in/copy-out; `None` while the endpoint is not bound yet.
    pub fn single_copy_to(&self, ep: Endpoint) -> Option<bool> {
        self.peers
            .get(ep.0 as usize)
            .and_then(|p| p.link.as_ref())
            .map(|l| l.cma)
    }

    /// This module's local index.
    pub fn local_index(&self) -> u32 {
        self.local_index
    }

    fn card(&self) -> SmCard {
        SmCard {
            cma: self.cma_ok,
            ring_capacity: self.ring_capacity,
            local_index: self.local_index,
            local_count: self.local_count,
            probe_addr: self.probe.addr() as u64,
            probe_value: self.probe.value(),
            seg: self.segment.card(),
        }
    }

    /// The producer towards `ep`, binding it first if needed.
    #[inline]
    fn tx(&mut self, ep: Endpoint) -> Result<&mut RingProducer, BtlError> {
        let i = ep.0 as usize;
        if !matches!(self.peers.get(i), Some(p) if p.tx.is_some()) {
            self.peer_index(ep)?;
            self.bind(i)?;
        }
        Ok(self.peers[i].tx.as_mut().expect("bound"))
    }

    /// The inbox ring the peer on `ep` writes, where it may be read alone
    /// (`progress_from`, `recv_small`): `None` while records kept from
    /// before the peer was added wait (`progress` delivers them first), or
    /// for an endpoint that is not that ring's sender.
    #[inline(always)]
    fn rx_ring(&self, ep: Endpoint) -> Option<usize> {
        if !self.orphans.is_empty() {
            return None;
        }
        let p = self.peers.get(ep.0 as usize)?;
        let ring = attach::ring_index(p.card.local_index, self.local_index);
        (self.sender_ep.get(ring) == Some(&ep.0)).then_some(ring)
    }

    /// [`Btl::sendi_hdr`] outside its common case: through [`Btl::sendi`].
    #[inline(never)]
    fn sendi_hdr_other(&mut self, ep: Endpoint, tag: AmTag, hdr: &[u8], data: &[u8]) -> bool {
        self.sendi(ep, tag, &[hdr, data]).is_ok()
    }

    /// The error of a ring's refusal of a record for `ep` in operation
    /// `what`: [`SmBtl::refused`] for a full ring, `TooLarge` for one past
    /// its largest record.
    #[cold]
    fn ring_error(&mut self, ep: Endpoint, e: SendError, what: &'static str) -> BtlError {
        match e {
            SendError::Full => self.refused(ep),
            SendError::TooLarge { len, max } => BtlError::TooLarge {
                what,
                len,
                limit: max,
            },
        }
    }

    fn spare_buf(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.spare.len() < MAX_SPARE && buf.capacity() > 0 {
            buf.clear();
            self.spare.push(buf);
        }
    }

    fn rdma(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        offset: usize,
        token: Token,
        put: bool,
    ) -> Result<(), BtlError> {
        if !self.caps.contains(Caps::PUT) {
            return Err(BtlError::Unsupported(if put { "put" } else { "get" }));
        }
        let i = self.peer_index(ep)?;
        self.bind(i)?;
        let key = Key::decode(remote.as_bytes()).map_err(BtlError::Invalid)?;
        let pid = self.peers[i].card.seg.pid;
        if key.pid != pid {
            return Err(BtlError::Invalid(format!(
                "remote key of pid {} used towards pid {pid}",
                key.pid
            )));
        }
        key.check_range(offset, local.len())
            .map_err(BtlError::Invalid)?;
        let need = if put { ACCESS_WRITE } else { ACCESS_READ };
        let link = self.peers[i].link.as_deref().expect("bound");
        if link.cma && key.slot != NO_SLOT {
            let addr = regs::cma_target(
                &link.mapping,
                link.table_off,
                link.table_slots,
                &key,
                offset,
                local.len(),
                need,
            )?;
            let r = if put {
                cma::write_region(pid, local, addr)
            } else {
                cma::read_region(pid, local, addr)
            };
            return match r {
                Ok(()) => {
                    self.completions.push_back((token, Ok(())));
                    Ok(())
                }
                Err(CmaError::PeerGone { .. }) => {
                    self.mark_lost(i, format!("process {pid} exited"));
                    Err(self.gone(ep))
                }
                Err(CmaError::BadAddress { .. }) => Err(BtlError::Invalid(format!(
                    "sm: registered range not mapped in process {pid}"
                ))),
                Err(e) => Err(BtlError::Io(e.to_string())),
            };
        }
        // Copy-in/copy-out through the rings; the owner checks the key.
        let req = self.ops.insert(Op {
            peer: i as u32,
            token,
            local,
            key: *remote,
            offset,
            put,
            started: false,
            done: 0,
        });
        self.peers[i].emu.outgoing.push_back(req);
        // Dirty only if the ring refused some of it (and a waiter then
        // polls, see `wakeup`).
        if self.pump_peer(i) {
            self.emu_dirty = true;
        }
        Ok(())
    }

    /// Sends what copy-in/copy-out owes every peer, as far as rings allow.
    fn pump_all(&mut self) {
        let mut again = false;
        for i in 0..self.peers.len() {
            if self.peers[i].emu.owes() {
                again |= self.pump_peer(i);
            }
        }
        self.emu_dirty = again;
    }

    /// Sends what copy-in/copy-out owes peer `i`; true when work remains.
    fn pump_peer(&mut self, i: usize) -> bool {
        if let Err(e) = self.bind(i) {
            // Lost (already completed) or not reachable at all.
            self.peers[i].emu.drop_queued();
            let completions = &mut self.completions;
            self.ops.drain_peer(i as u32, |op| {
                completions.push_back((op.token, Err(e.clone())));
            });
            return false;
        }
        let peer = &mut self.peers[i];
        let tx = peer.tx.as_mut().expect("bound");
        copy::pump(tx, &mut peer.emu, &mut self.ops)
    }

    /// Delivers stashed records of senders that now have an endpoint.
    #[cold]
    fn flush_orphans(&mut self, sink: &mut dyn BtlSink) -> usize {
        let mut n = 0;
        let mut keep = VecDeque::new();
        while let Some((ring, tag, control, data)) = self.orphans.pop_front() {
            let ep = self.sender_ep[ring];
            if ep == EP_NONE {
                keep.push_back((ring, tag, control, data));
            } else if ep != EP_DELETED {
                if control {
                    self.emu_dirty |= on_control(
                        &mut self.peers,
                        &mut self.ops,
                        &mut self.completions,
                        &self.regs,
                        self.pid,
                        ep as usize,
                        tag,
                        &data,
                    );
                } else {
                    sink.on_recv(Endpoint(ep), AmTag(tag), &data);
                }
                n += 1;
            }
        }
        self.orphans = keep;
        n
    }

    /// Completions and loss reports.
    #[cold]
    fn deliver_events(&mut self, sink: &mut dyn BtlSink) -> usize {
        let mut n = 0;
        for (ep, err) in std::mem::take(&mut self.lost_reports) {
            sink.on_peer_lost(ep, &err);
            n += 1;
        }
        while let Some((token, result)) = self.completions.pop_front() {
            sink.on_complete(token, result);
            n += 1;
        }
        n
    }

    #[cold]
    fn corrupt(&mut self, e: ring::PollError) {
        let ep = e.sender.map_or(EP_NONE, |s| self.sender_ep[s]);
        tracing::error!(%e, "sm: a peer wrote a corrupt ring");
        if (ep as usize) < self.peers.len() {
            self.mark_lost(ep as usize, format!("wrote a corrupt ring ({})", e.error));
        }
    }
}

/// Handles a CONTROL record from peer `i` (copy-in/copy-out RDMA), unless
/// the peer is lost or deleted. Returns whether replies were queued.
#[allow(clippy::too_many_arguments)]
fn on_control(
    peers: &mut [Peer],
    ops: &mut Ops,
    completions: &mut VecDeque<(Token, Result<(), BtlError>)>,
    regs: &Regs,
    pid: u32,
    i: usize,
    tag: u8,
    p: &[u8],
) -> bool {
    let Some(peer) = peers.get_mut(i) else {
        return false;
    };
    if !matches!(peer.state, PeerState::Bound | PeerState::Unbound) {
        return false;
    }
    copy::on_control(&mut peer.emu, ops, completions, regs, pid, i, tag, p)
}

// SAFETY: no operation of this BTL calls anything outside this crate but
// the kernel and the sink its progress calls are given.
#[allow(unsafe_code)]
unsafe impl crate::btl::NeverReenters for SmBtl {}

impl Btl for SmBtl {
    fn no_reentry(&self) -> Option<crate::btl::NoReentry> {
        Some(crate::btl::NoReentry::of(self))
    }

    fn name(&self) -> &'static str {
        "sm"
    }

    fn caps(&self) -> Caps {
        self.caps
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn business_card(&self) -> Vec<u8> {
        self.card().to_bytes()
    }

    fn add_peer(&mut self, peer: &PeerInfo<'_>) -> Result<Option<Endpoint>, BtlError> {
        if !peer.local {
            return Ok(None);
        }
        let Some(bytes) = peer.card else {
            return Ok(None);
        };
        let Some(card) = SmCard::parse(bytes)? else {
            return Ok(None);
        };
        if card.seg.pid == self.pid && card.local_index == self.local_index {
            // Ourselves: the self BTL's job.
            return Ok(None);
        }
        if card.local_count != self.local_count {
            return Err(BtlError::Invalid(format!(
                "sm: rank {} counts {} local ranks, we count {}",
                peer.rank, card.local_count, self.local_count
            )));
        }
        if card.local_index == self.local_index {
            return Err(BtlError::Invalid(format!(
                "sm: rank {} has our local index {}",
                peer.rank, self.local_index
            )));
        }
        // Both sides must decide alike: a side that accepted a peer which
        // refused it would send into a ring whose owner never reads it.
        // Each side's limits are capped by its own rings, so equal rings
        // are all it takes.
        if card.ring_capacity != self.ring_capacity {
            tracing::warn!(
                rank = peer.rank,
                "sm: the peer's rings ({} B) differ from ours ({} B) \
                 (btl_sm_ring_size set differently); not using sm for it",
                card.ring_capacity,
                self.ring_capacity
            );
            return Ok(None);
        }
        let ring = attach::ring_index(card.local_index, self.local_index);
        if let Some(i) = self.peers.iter().position(|p| p.rank == peer.rank) {
            let p = &mut self.peers[i];
            if p.state != PeerState::Deleted {
                if p.card.local_index != card.local_index || p.card.seg != card.seg {
                    return Err(BtlError::Invalid(format!(
                        "sm: another card for rank {}",
                        peer.rank
                    )));
                }
                return Ok(Some(Endpoint(i as u32)));
            }
            // Deleted earlier: back to unbound, with the new card.
            p.card = card;
            p.state = PeerState::Unbound;
            p.refusals = 0;
            self.sender_ep[ring] = i as u32;
            return Ok(Some(Endpoint(i as u32)));
        }
        if self.sender_ep[ring] != EP_NONE && self.sender_ep[ring] != EP_DELETED {
            return Err(BtlError::Invalid(format!(
                "sm: rank {} has the local index {} of another rank",
                peer.rank, card.local_index
            )));
        }
        let i = self.peers.len();
        self.peers.push(Peer::new(peer.rank, card));
        self.sender_ep[ring] = i as u32;
        Ok(Some(Endpoint(i as u32)))
    }

    /// Unbinds the peer and drops what it sends. When this rank is the
    /// higher of the pair, its receiver still reads the peer's reverse box
    /// (so that no box record is stranded if the peer is added again),
    /// which keeps the peer's segment mapped until then or until the
    /// module drops.
    fn del_peer(&mut self, ep: Endpoint) {
        let i = ep.0 as usize;
        let Some(p) = self.peers.get(i) else {
            return;
        };
        if p.state == PeerState::Deleted {
            return;
        }
        let ring = attach::ring_index(p.card.local_index, self.local_index);
        let err = BtlError::PeerGone(ep, format!("sm peer rank {} was deleted", p.rank));
        self.unbind(i, PeerState::Deleted, &err);
        self.sender_ep[ring] = EP_DELETED;
    }

    fn alloc(&mut self, ep: Endpoint, len: usize) -> Result<Descriptor, BtlError> {
        self.peer_index(ep)?;
        if len > self.limits.max_send_size {
            return Err(BtlError::TooLarge {
                what: "alloc",
                len,
                limit: self.limits.max_send_size,
            });
        }
        let mut buf = self.spare_buf();
        // Contents are unspecified: only grow (zero-filling) what is new.
        buf.resize(len, 0);
        Ok(Descriptor {
            ep,
            buf,
            inplace: None,
        })
    }

    fn free(&mut self, desc: Descriptor) {
        self.recycle(desc.buf);
    }

    fn prepare_src(
        &mut self,
        ep: Endpoint,
        reserve: usize,
        data: MemRegion,
    ) -> Result<Descriptor, BtlError> {
        self.peer_index(ep)?;
        let len = reserve.saturating_add(data.len());
        if len > self.limits.max_send_size {
            return Err(BtlError::TooLarge {
                what: "prepare_src",
                len,
                limit: self.limits.max_send_size,
            });
        }
        let mut buf = self.spare_buf();
        buf.resize(reserve, 0);
        Ok(Descriptor {
            ep,
            buf,
            inplace: Some(data),
        })
    }

    #[inline]
    fn send(
        &mut self,
        desc: Descriptor,
        tag: AmTag,
        _token: Token,
    ) -> Result<SendOutcome, (Descriptor, BtlError)> {
        let len = desc.len();
        let tx = match self.tx(desc.ep) {
            Ok(tx) => tx,
            Err(e) => return Err((desc, e)),
        };
        match tx.try_reserve(len) {
            Ok(mut r) => {
                let p = r.payload_mut();
                let (head, tail) = p.split_at_mut(desc.buf.len());
                head.copy_from_slice(&desc.buf);
                if let Some(region) = desc.inplace {
                    copy_bytes(tail, region.read());
                }
                r.commit(tag.0);
                self.recycle(desc.buf);
                Ok(SendOutcome::Done)
            }
            Err(e) => {
                let e = self.ring_error(desc.ep, e, "send");
                Err((desc, e))
            }
        }
    }

    fn send_packed(
        &mut self,
        ep: Endpoint,
        tag: AmTag,
        hdr: &[u8],
        len: usize,
        pack: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, BtlError> {
        let total = hdr.len().saturating_add(len);
        if total > self.limits.max_send_size {
            return Err(BtlError::TooLarge {
                what: "send_packed",
                len: total,
                limit: self.limits.max_send_size,
            });
        }
        match self.tx(ep)?.try_reserve(total) {
            Ok(mut r) => {
                let (head, tail) = r.payload_mut().split_at_mut(hdr.len());
                head.copy_from_slice(hdr);
                pack(tail);
                r.commit(tag.0);
                Ok(true)
            }
            Err(e) => Err(self.ring_error(ep, e, "send_packed")),
        }
    }

    #[inline]
    fn sendi(&mut self, ep: Endpoint, tag: AmTag, parts: &[&[u8]]) -> Result<(), BtlError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.limits.max_sendi_size {
            return Err(BtlError::TooLarge {
                what: "sendi",
                len,
                limit: self.limits.max_sendi_size,
            });
        }
        match self.tx(ep)?.try_send_len(tag.0, parts, len) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.ring_error(ep, e, "sendi")),
        }
    }

    /// A small record into a bound peer's ring, written straight (see
    /// [`RingProducer::try_send_small`]); everything else (other sizes, a
    /// peer still to bind, a ring that looks full by the cached head, a
    /// record that would wrap) through [`Btl::sendi`]. Every store counts
    /// in the slow cross-core state (`docs/performance.md`): the common
    /// case makes no call, so it saves few registers.
    #[inline]
    fn sendi_hdr(&mut self, ep: Endpoint, tag: AmTag, hdr: &[u8], data: &[u8]) -> bool {
        if hdr.len() + data.len() <= self.limits.max_sendi_size {
            if let Some(tx) = self
                .peers
                .get_mut(ep.0 as usize)
                .and_then(|p| p.tx.as_mut())
            {
                if tx.try_send_small(tag.0, hdr, data) {
                    return true;
                }
            }
        }
        self.sendi_hdr_other(ep, tag, hdr, data)
    }

    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration, BtlError> {
        Ok(self.regs.register(
            &self.segment,
            self.layout.table_off,
            self.pid,
            region,
            access,
        ))
    }

    fn sub_key(
        &self,
        reg: &Registration,
        offset: usize,
        len: usize,
    ) -> Result<RemoteKey, BtlError> {
        regs::sub_key(reg, offset, len)
    }

    fn deregister_mem(&mut self, id: RegId) {
        self.regs
            .deregister(&self.segment, self.layout.table_off, id);
    }

    fn put(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        self.rdma(ep, local, remote, remote_offset, token, true)
    }

    fn get(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        self.rdma(ep, local, remote, remote_offset, token, false)
    }

    #[inline]
    fn progress(&mut self, sink: &mut dyn BtlSink) -> usize {
        let mut n = 0;
        if !self.orphans.is_empty() {
            n += self.flush_orphans(sink);
        }
        let mut dirty = false;
        let polled = {
            let SmBtl {
                rx,
                sender_ep,
                peers,
                ops,
                completions,
                regs,
                orphans,
                pid,
                ..
            } = self;
            rx.poll_all_flagged(|ring, tag, control, payload| {
                let ep = sender_ep[ring];
                if ep < EP_DELETED {
                    if control {
                        dirty |= on_control(
                            peers,
                            ops,
                            completions,
                            regs,
                            *pid,
                            ep as usize,
                            tag,
                            payload,
                        );
                    } else {
                        sink.on_recv(Endpoint(ep), AmTag(tag), payload);
                    }
                } else if ep != EP_DELETED {
                    // From a rank not added yet: kept, in order, for when
                    // it is (progress delivers them before polling again).
                    orphans.push_back((ring, tag, control, payload.to_vec()));
                }
            })
        };
        match polled {
            Ok(k) => n += k,
            Err(e) => self.corrupt(e),
        }
        if !self.orphans.is_empty() && !self.orphan_warned {
            self.orphan_warned = true;
            tracing::warn!("sm: records from a local rank that was not added are kept for later");
        }
        if dirty || self.emu_dirty {
            self.pump_all();
        }
        if !self.completions.is_empty() || !self.lost_reports.is_empty() {
            n += self.deliver_events(sink);
        }
        if n == 0 {
            self.idle += 1;
            if self.idle >= SWEEP_EVERY {
                self.idle = 0;
                self.sweep();
                n += self.deliver_events(sink);
            }
        }
        n
    }

    fn progress_from(&mut self, ep: Endpoint, take: &mut dyn FnMut(AmTag, &[u8]) -> bool) -> usize {
        let Some(ring) = self.rx_ring(ep) else {
            return 0;
        };
        let mut dirty = false;
        let polled = {
            let SmBtl {
                rx,
                peers,
                ops,
                completions,
                regs,
                pid,
                ..
            } = self;
            rx.poll_sender(ring, |tag, control, payload| {
                if control {
                    dirty |= on_control(
                        peers,
                        ops,
                        completions,
                        regs,
                        *pid,
                        ep.0 as usize,
                        tag,
                        payload,
                    );
                    true
                } else {
                    take(AmTag(tag), payload)
                }
            })
        };
        let n = match polled {
            Ok(k) => k,
            Err(e) => {
                self.corrupt(e);
                0
            }
        };
        if dirty {
            self.pump_all();
        }
        n
    }

    fn polls_from_peer(&self) -> bool {
        true
    }

    /// Our inbox's bell: every record a peer publishes into the inbox (ring,
    /// fast box, CONTROL record) rings it once armed. Not while
    /// copy-in/copy-out owes a peer data that its full ring refused: room
    /// there rings nothing, progress must look again.
    fn wakeup(&self) -> Wakeup {
        if self.emu_dirty {
            Wakeup::Poll
        } else {
            Wakeup::Bell(self.doorbell.clone())
        }
    }

    /// The ring from the peer on `ep`, read in place (see
    /// [`ring::RingConsumer::take_small`]); anything `progress_from` would
    /// not read at once is [`SmallRecv::Other`] and left to it.
    #[inline]
    fn recv_small(&mut self, ep: Endpoint, m: &SmallMatch, dst: &mut [u8]) -> SmallRecv {
        match self.rx_ring(ep) {
            Some(ring) => self.rx.take_small(ring, m, dst),
            None => SmallRecv::Other,
        }
    }

    fn has_work(&self) -> bool {
        self.bound > 0
            || !self.completions.is_empty()
            || !self.lost_reports.is_empty()
            || !self.orphans.is_empty()
            || self.emu_dirty
            || self.ops.live > 0
    }

    fn is_drained(&self) -> bool {
        // Ring records are delivered once written; what remains is local.
        self.completions.is_empty()
            && self.lost_reports.is_empty()
            && self.orphans.is_empty()
            && !self.emu_dirty
            && self.ops.live == 0
    }
}

impl Drop for SmBtl {
    fn drop(&mut self) {
        // Producers and mappings of peers first, then (field order) our
        // receiver, then our segment, which marks itself closed.
        self.peers.clear();
    }
}
