//! A simulated BTL for testing the layers above in one process
//! (quinn-style: no I/O, time passed in).
//!
//! A [`SimNet`] is a small world of ranks; each rank gets a [`SimBtl`]
//! module from [`SimNet::module`]. Fragments travel with a virtual latency
//! (plus seeded jitter and a bandwidth term) and are delivered when the
//! test advances virtual time ([`SimNet::advance`] / [`SimNet::advance_to_next`]).
//! Everything random comes from one seed, so a failing run is replayed by
//! running it again with the same seed.
//!
//! Faults, each opt-in through [`SimConfig`]:
//! * reordering: with `ordered = false` the module does not advertise
//!   [`Caps::ORDERED`] and fragments of one endpoint may overtake each other
//!   (with `ordered = true` only fragments of different endpoints interleave,
//!   which the contract always allows);
//! * `NoResource`: each send, sendi, put and get fails with this
//!   probability, having done nothing;
//! * peer loss: [`SimNet::kill`] makes a rank vanish: fragments to and from
//!   it are dropped, its peers get [`BtlSink::on_peer_lost`] and their
//!   operations towards it complete with [`BtlError::PeerGone`]. Dropping a
//!   rank's [`SimBtl`] does the same (its process went away).
//!
//! The world is single-threaded (`Rc<RefCell<..>>`): one test drives every
//! rank's progress in turn.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::btl::{
    Access, AmTag, Btl, BtlError, BtlSink, Caps, Descriptor, Endpoint, Limits, PeerInfo, RegId,
    Registration, RemoteKey, SendOutcome, SmallMatch, SmallRecv, Token,
};
use crate::mem::MemRegion;

/// How the simulated network behaves.
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    /// The seed of every random choice.
    pub seed: u64,
    /// Base one-way latency, virtual nanoseconds.
    pub latency_ns: u64,
    /// Random extra latency in `[0, jitter_ns)`.
    pub jitter_ns: u64,
    /// Transfer cost, virtual nanoseconds per KiB.
    pub ns_per_kib: u64,
    /// Fragments of one endpoint arrive in order.
    pub ordered: bool,
    /// Probability in parts per million that an operation gets NoResource.
    pub no_resource_ppm: u32,
    /// Fragments in flight per sending module before NoResource.
    pub max_in_flight: usize,
    /// Puts are ordered with later fragments ([`Caps::PUT_ORDERED`]; needs
    /// `ordered`): a put completes at once and a refused one is reported
    /// to its target, in order with the fragments (as the tcp BTL does).
    pub put_ordered: bool,
    /// The module's limits.
    pub limits: Limits,
    /// Virtual time a put or get call takes to copy, nanoseconds per KiB
    /// (0: copies take no time). The engine times these calls (split
    /// balancing) with the network's clock ([`SimNet::time`]).
    pub copy_ns_per_kib: u64,
    /// This rank's copies take three times as long (a slower core).
    pub slow_copier: Option<u32>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            latency_ns: 1000,
            jitter_ns: 0,
            ns_per_kib: 100,
            ordered: true,
            no_resource_ppm: 0,
            max_in_flight: 256,
            put_ordered: false,
            limits: Limits {
                eager_limit: 4096,
                rndv_eager_limit: 4096,
                max_send_size: 32 * 1024,
                max_sendi_size: 256,
                rdma_pipeline_send_length: 256 * 1024,
                rdma_pipeline_frag_size: 128 * 1024,
                min_rdma_pipeline_size: 256 * 1024,
                exclusivity: 1000,
                latency: 10,
                bandwidth: 10_000,
            },
            copy_ns_per_kib: 0,
            slow_copier: None,
        }
    }
}

/// A seeded SplitMix64 generator: tiny, and the same on every platform.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

#[derive(Debug)]
enum Event {
    /// A fragment reaches `to` from `from`.
    Frag {
        from: u32,
        to: u32,
        tag: AmTag,
        data: Vec<u8>,
    },
    /// A put from `from` to `to` was refused at `to` (`put_ordered`).
    Refused { from: u32, to: u32 },
    /// An operation of `rank` completes.
    Done {
        rank: u32,
        token: Token,
        result: Result<(), BtlError>,
    },
}

#[derive(Debug)]
struct World {
    cfg: SimConfig,
    now: u64,
    /// `now`, for readers outside the world's thread ([`SimNet::time`]).
    time: Arc<AtomicU64>,
    rng: Rng,
    /// Events by (due time, sequence): BTreeMap keeps them in time order and
    /// the sequence makes equal times deterministic.
    events: BTreeMap<(u64, u64), Event>,
    seq: u64,
    /// Last due time per (from, to), so ordered delivery never goes back.
    last_due: HashMap<(u32, u32), u64>,
    /// Delivered events waiting for each rank's progress.
    inbox: HashMap<u32, Vec<Event>>,
    /// Registrations per (rank, id).
    regs: HashMap<(u32, u64), MemRegion>,
    next_reg: u64,
    dead: HashSet<u32>,
    in_flight: HashMap<u32, usize>,
}

impl World {
    fn set_now(&mut self, now: u64) {
        self.now = now;
        self.time.store(now, Ordering::Relaxed);
    }

    fn schedule(&mut self, from: u32, to: u32, len: usize, ev: Event) {
        let jitter = self.rng.below(self.cfg.jitter_ns);
        let mut due =
            self.now + self.cfg.latency_ns + jitter + (len as u64 * self.cfg.ns_per_kib) / 1024;
        if self.cfg.ordered {
            let last = self.last_due.entry((from, to)).or_insert(0);
            due = due.max(*last);
            *last = due;
        }
        self.seq += 1;
        self.events.insert((due, self.seq), ev);
    }

    fn inject_no_resource(&mut self) -> bool {
        self.cfg.no_resource_ppm > 0
            && self.rng.below(1_000_000) < u64::from(self.cfg.no_resource_ppm)
    }
}

/// A simulated network shared by the modules of one test world.
#[derive(Clone, Debug)]
pub struct SimNet {
    world: Rc<RefCell<World>>,
}

impl SimNet {
    /// A new, empty world.
    pub fn new(cfg: SimConfig) -> SimNet {
        SimNet {
            world: Rc::new(RefCell::new(World {
                cfg,
                now: 0,
                time: Arc::new(AtomicU64::new(0)),
                rng: Rng(cfg.seed),
                events: BTreeMap::new(),
                seq: 0,
                last_due: HashMap::new(),
                inbox: HashMap::new(),
                regs: HashMap::new(),
                next_reg: 1,
                dead: HashSet::new(),
                in_flight: HashMap::new(),
            })),
        }
    }

    /// The module of rank `rank`.
    pub fn module(&self, rank: u32) -> SimBtl {
        let limits = self.world.borrow().cfg.limits;
        SimBtl {
            net: self.clone(),
            rank,
            limits,
            peers: Vec::new(),
            reported_lost: HashSet::new(),
        }
    }

    /// Virtual time now, in nanoseconds.
    pub fn now(&self) -> u64 {
        self.world.borrow().now
    }

    /// Virtual time, in nanoseconds, readable from anywhere (for a clock
    /// the engine under test reads: [`SimConfig::copy_ns_per_kib`]).
    pub fn time(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.world.borrow().time)
    }

    /// Advances virtual time by `ns`, delivering what falls due.
    pub fn advance(&self, ns: u64) {
        let mut w = self.world.borrow_mut();
        let until = w.now + ns;
        w.set_now(until);
        Self::deliver_due(&mut w);
    }

    /// Advances to the next scheduled event (if any) and delivers it and
    /// everything else due then. Returns whether anything was scheduled.
    pub fn advance_to_next(&self) -> bool {
        let mut w = self.world.borrow_mut();
        let Some((&(due, _), _)) = w.events.iter().next() else {
            return false;
        };
        let now = w.now.max(due);
        w.set_now(now);
        Self::deliver_due(&mut w);
        true
    }

    /// Whether anything is scheduled or waiting for a progress call.
    pub fn busy(&self) -> bool {
        let w = self.world.borrow();
        !w.events.is_empty() || w.inbox.values().any(|v| !v.is_empty())
    }

    /// Makes `rank` vanish, as if its process was killed.
    pub fn kill(&self, rank: u32) {
        let mut w = self.world.borrow_mut();
        w.dead.insert(rank);
        w.inbox.remove(&rank);
        w.regs.retain(|(r, _), _| *r != rank);
    }

    fn deliver_due(w: &mut World) {
        while let Some(entry) = w.events.first_entry() {
            if entry.key().0 > w.now {
                break;
            }
            let ev = entry.remove();
            let to = match &ev {
                Event::Frag { from, to, .. } => {
                    if let Some(n) = w.in_flight.get_mut(from) {
                        *n = n.saturating_sub(1);
                    }
                    if w.dead.contains(from) {
                        continue;
                    }
                    *to
                }
                Event::Refused { from, to } => {
                    if w.dead.contains(from) {
                        continue;
                    }
                    *to
                }
                Event::Done { rank, .. } => *rank,
            };
            if !w.dead.contains(&to) {
                w.inbox.entry(to).or_default().push(ev);
            }
        }
    }
}

/// One rank's module on a [`SimNet`].
#[derive(Debug)]
pub struct SimBtl {
    net: SimNet,
    rank: u32,
    limits: Limits,
    /// Peer ranks by endpoint index.
    peers: Vec<u32>,
    reported_lost: HashSet<u32>,
}

impl SimBtl {
    fn peer(&self, ep: Endpoint) -> Result<u32, BtlError> {
        self.peers
            .get(ep.0 as usize)
            .copied()
            .ok_or_else(|| BtlError::Invalid(format!("unknown endpoint {ep:?}")))
    }

    fn endpoint_of(&self, rank: u32) -> Option<Endpoint> {
        self.peers
            .iter()
            .position(|&r| r == rank)
            .map(|i| Endpoint(i as u32))
    }

    /// Common admission for every operation towards `ep`.
    fn admit(&self, ep: Endpoint) -> Result<u32, BtlError> {
        let peer = self.peer(ep)?;
        let mut w = self.net.world.borrow_mut();
        if w.dead.contains(&peer) {
            return Err(BtlError::PeerGone(ep, format!("rank {peer} is gone")));
        }
        if w.inject_no_resource()
            || w.in_flight.get(&self.rank).copied().unwrap_or(0) >= w.cfg.max_in_flight
        {
            return Err(BtlError::NoResource);
        }
        Ok(peer)
    }

    fn send_bytes(&self, peer: u32, tag: AmTag, data: Vec<u8>) {
        let mut w = self.net.world.borrow_mut();
        *w.in_flight.entry(self.rank).or_insert(0) += 1;
        let len = data.len();
        w.schedule(
            self.rank,
            peer,
            len,
            Event::Frag {
                from: self.rank,
                to: peer,
                tag,
                data,
            },
        );
    }

    /// Decodes a remote key `(rank, id)` and narrows the registration.
    fn resolve(
        w: &World,
        peer: u32,
        key: &RemoteKey,
        offset: usize,
        len: usize,
    ) -> Result<MemRegion, BtlError> {
        let (b, _, _) = key
            .part(12)
            .ok_or_else(|| BtlError::Invalid("malformed remote key".into()))?;
        let rank = u32::from_le_bytes(b[..4].try_into().expect("4 bytes"));
        let id = u64::from_le_bytes(b[4..12].try_into().expect("8 bytes"));
        if rank != peer {
            return Err(BtlError::Invalid(format!(
                "remote key of rank {rank} used towards rank {peer}"
            )));
        }
        let region = w.regs.get(&(rank, id)).ok_or_else(|| {
            BtlError::Invalid(format!("remote key names no registration ({rank}, {id})"))
        })?;
        key.resolve_part(12, *region, offset, len)
            .map_err(BtlError::Invalid)
    }

    fn rdma(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        off: usize,
        token: Token,
        put: bool,
    ) -> Result<(), BtlError> {
        let peer = self.admit(ep)?;
        let mut w = self.net.world.borrow_mut();
        // The copy takes virtual time on this rank's core, if configured.
        let mut cost = local.len() as u64 * w.cfg.copy_ns_per_kib / 1024;
        if w.cfg.slow_copier == Some(self.rank) {
            cost *= 3;
        }
        if cost > 0 {
            let now = w.now + cost;
            w.set_now(now);
        }
        let mut result = Self::resolve(&w, peer, remote, off, local.len()).map(|target| {
            // The copy happens at once; its completion is reported after the
            // virtual transfer time.
            if put {
                target.write(0, local.read());
            } else {
                local.write(0, target.read());
            }
        });
        if put && result.is_err() && w.cfg.put_ordered && w.cfg.ordered {
            // Refused at the target, which hears of it in order with what
            // this module sends it next; the put is done here.
            let (from, to) = (self.rank, peer);
            w.schedule(from, to, 0, Event::Refused { from, to });
            result = Ok(());
        }
        w.schedule(
            self.rank,
            self.rank,
            local.len(),
            Event::Done {
                rank: self.rank,
                token,
                result,
            },
        );
        Ok(())
    }
}

impl Drop for SimBtl {
    /// A module that goes away is a rank that vanished ([`SimNet::kill`]).
    fn drop(&mut self) {
        if let Ok(mut w) = self.net.world.try_borrow_mut() {
            w.dead.insert(self.rank);
            w.inbox.remove(&self.rank);
            let rank = self.rank;
            w.regs.retain(|(r, _), _| *r != rank);
        }
    }
}

/// Where in an inbox queue the first fragment or refused-put report from
/// `peer` waits (the others from it follow, in order).
fn first_from(q: &[Event], peer: u32) -> Option<usize> {
    q.iter().position(
        |ev| matches!(ev, Event::Frag { from, .. } | Event::Refused { from, .. } if *from == peer),
    )
}

// SAFETY: no operation of this BTL calls anything outside this crate but
// the kernel and the sink its progress calls are given.
#[allow(unsafe_code)]
unsafe impl crate::btl::NeverReenters for SimBtl {}

impl Btl for SimBtl {
    fn no_reentry(&self) -> Option<crate::btl::NoReentry> {
        Some(crate::btl::NoReentry::of(self))
    }

    fn name(&self) -> &'static str {
        "sim"
    }

    fn caps(&self) -> Caps {
        let base = Caps::SEND | Caps::SENDI | Caps::PUT | Caps::GET;
        let cfg = self.net.world.borrow().cfg;
        match (cfg.ordered, cfg.put_ordered) {
            (true, true) => base | Caps::ORDERED | Caps::PUT_ORDERED,
            (true, false) => base | Caps::ORDERED,
            _ => base,
        }
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn business_card(&self) -> Vec<u8> {
        self.rank.to_le_bytes().to_vec()
    }

    fn add_peer(&mut self, peer: &PeerInfo<'_>) -> Result<Option<Endpoint>, BtlError> {
        let Some(card) = peer.card else {
            return Ok(None);
        };
        let rank = <[u8; 4]>::try_from(card)
            .map(u32::from_le_bytes)
            .map_err(|_| BtlError::Invalid(format!("malformed sim card of rank {}", peer.rank)))?;
        if rank != peer.rank {
            return Err(BtlError::Invalid(format!(
                "card of rank {rank} given for rank {}",
                peer.rank
            )));
        }
        if let Some(ep) = self.endpoint_of(rank) {
            return Ok(Some(ep));
        }
        self.peers.push(rank);
        Ok(Some(Endpoint(self.peers.len() as u32 - 1)))
    }

    fn del_peer(&mut self, ep: Endpoint) {
        if let Some(r) = self.peers.get_mut(ep.0 as usize) {
            *r = u32::MAX;
        }
    }

    fn alloc(&mut self, ep: Endpoint, len: usize) -> Result<Descriptor, BtlError> {
        self.peer(ep)?;
        if len > self.limits.max_send_size {
            return Err(BtlError::TooLarge {
                what: "alloc",
                len,
                limit: self.limits.max_send_size,
            });
        }
        Ok(Descriptor {
            ep,
            buf: vec![0; len],
            inplace: None,
        })
    }

    fn free(&mut self, _desc: Descriptor) {}

    fn prepare_src(
        &mut self,
        ep: Endpoint,
        reserve: usize,
        data: MemRegion,
    ) -> Result<Descriptor, BtlError> {
        self.peer(ep)?;
        let len = reserve + data.len();
        if len > self.limits.max_send_size {
            return Err(BtlError::TooLarge {
                what: "prepare_src",
                len,
                limit: self.limits.max_send_size,
            });
        }
        // In place: the data are read at send time (the caller must keep
        // them valid until then, as with a real zero-copy BTL).
        Ok(Descriptor {
            ep,
            buf: vec![0; reserve],
            inplace: Some(data),
        })
    }

    fn send(
        &mut self,
        mut desc: Descriptor,
        tag: AmTag,
        token: Token,
    ) -> Result<SendOutcome, (Descriptor, BtlError)> {
        let peer = match self.admit(desc.ep) {
            Ok(p) => p,
            Err(e) => return Err((desc, e)),
        };
        if let Some(r) = desc.inplace.take() {
            desc.buf.extend_from_slice(r.read());
        }
        self.send_bytes(peer, tag, desc.buf);
        // Completion is reported after the latency, like a NIC's send CQ.
        let mut w = self.net.world.borrow_mut();
        let rank = self.rank;
        w.schedule(
            rank,
            rank,
            0,
            Event::Done {
                rank,
                token,
                result: Ok(()),
            },
        );
        Ok(SendOutcome::Pending)
    }

    fn sendi(&mut self, ep: Endpoint, tag: AmTag, parts: &[&[u8]]) -> Result<(), BtlError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.limits.max_sendi_size {
            return Err(BtlError::TooLarge {
                what: "sendi",
                len,
                limit: self.limits.max_sendi_size,
            });
        }
        let peer = self.admit(ep)?;
        self.send_bytes(peer, tag, parts.concat());
        Ok(())
    }

    fn register_mem(
        &mut self,
        region: MemRegion,
        _access: Access,
    ) -> Result<Registration, BtlError> {
        let mut w = self.net.world.borrow_mut();
        let id = w.next_reg;
        w.next_reg += 1;
        w.regs.insert((self.rank, id), region);
        let mut key = [0u8; 12];
        key[..4].copy_from_slice(&self.rank.to_le_bytes());
        key[4..].copy_from_slice(&id.to_le_bytes());
        Ok(Registration {
            id: RegId(id),
            region,
            key: RemoteKey::with_part(&key, 0, region.len() as u64).expect("28 bytes fit"),
        })
    }

    fn sub_key(
        &self,
        reg: &Registration,
        offset: usize,
        len: usize,
    ) -> Result<RemoteKey, BtlError> {
        reg.key.narrow("sim", 12, offset, len)
    }

    fn deregister_mem(&mut self, id: RegId) {
        self.net.world.borrow_mut().regs.remove(&(self.rank, id.0));
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

    fn progress(&mut self, sink: &mut dyn BtlSink) -> usize {
        // Report newly dead peers first.
        let dead: Vec<u32> = {
            let w = self.net.world.borrow();
            self.peers
                .iter()
                .copied()
                .filter(|r| w.dead.contains(r) && !self.reported_lost.contains(r))
                .collect()
        };
        let mut n = 0;
        for r in dead {
            self.reported_lost.insert(r);
            if let Some(ep) = self.endpoint_of(r) {
                sink.on_peer_lost(ep, &BtlError::PeerGone(ep, format!("rank {r} is gone")));
                n += 1;
            }
        }
        let events = {
            let mut w = self.net.world.borrow_mut();
            w.inbox.remove(&self.rank).unwrap_or_default()
        };
        for ev in events {
            match ev {
                Event::Frag {
                    from, tag, data, ..
                } => {
                    if let Some(ep) = self.endpoint_of(from) {
                        sink.on_recv(ep, tag, &data);
                        n += 1;
                    }
                }
                Event::Refused { from, .. } => {
                    if let Some(ep) = self.endpoint_of(from) {
                        sink.on_put_refused(ep);
                        n += 1;
                    }
                }
                Event::Done { token, result, .. } => {
                    sink.on_complete(token, result);
                    n += 1;
                }
            }
        }
        n
    }

    fn progress_from(&mut self, ep: Endpoint, take: &mut dyn FnMut(AmTag, &[u8]) -> bool) -> usize {
        let Ok(peer) = self.peer(ep) else {
            return 0;
        };
        let mut n = 0;
        loop {
            // The first fragment from `peer` still waiting for progress
            // (the others stay, in order); a refused put's report first
            // stops here, for `progress` to deliver.
            let frag = {
                let mut w = self.net.world.borrow_mut();
                let Some(q) = w.inbox.get_mut(&self.rank) else {
                    break;
                };
                let Some(i) = first_from(q, peer) else {
                    break;
                };
                if matches!(q[i], Event::Refused { .. }) {
                    break;
                }
                q.remove(i)
            };
            if let Event::Frag { tag, data, .. } = frag {
                n += 1;
                if !take(tag, &data) {
                    break;
                }
            }
        }
        n
    }

    fn recv_small(&mut self, ep: Endpoint, m: &SmallMatch, dst: &mut [u8]) -> SmallRecv {
        let Ok(peer) = self.peer(ep) else {
            return SmallRecv::Other;
        };
        let mut w = self.net.world.borrow_mut();
        let Some(q) = w.inbox.get_mut(&self.rank) else {
            return SmallRecv::Empty;
        };
        let Some(i) = first_from(q, peer) else {
            return SmallRecv::Empty;
        };
        let Event::Frag { tag, data, .. } = &q[i] else {
            return SmallRecv::Other;
        };
        let Some((hdr1, d)) = m.accepts(*tag, data, dst.len()) else {
            return SmallRecv::Other;
        };
        let len = d.len();
        dst[..len].copy_from_slice(d);
        q.remove(i);
        SmallRecv::Taken { hdr1, len }
    }

    fn has_work(&self) -> bool {
        self.net.busy()
    }
}
