//! Wrappers that work on any BTL, as libfabric's hook providers wrap any
//! provider and smoltcp's `FaultInjector` wraps any device: [`Faulty`]
//! injects the faults the BTL contract allows, [`Traced`] reports every
//! call. Neither changes what the wrapped BTL does when it is asked.
//!
//! The faults keep the contract (a BTL is reliable: it never drops or
//! corrupts a fragment it accepted), so a correct PML must complete every
//! transfer under any of them, only later:
//! - back-pressure: any operation that may say [`BtlError::NoResource`]
//!   does, with a seeded probability;
//! - late completions: a completion is held back for a seeded number of
//!   progress calls (operations finish in another order than they were
//!   issued, as over a busy network).
//!
//! A seed replays a run exactly (with a deterministic inner BTL, such as
//! the simulated one).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::btl::{
    Access, AmTag, Btl, BtlError, BtlSink, Caps, Descriptor, Endpoint, Limits, NoReentry, PeerInfo,
    RegId, Registration, RemoteKey, SendOutcome, SmallMatch, SmallRecv, Token, Wakeup,
};
use crate::mem::MemRegion;

/// Which faults [`Faulty`] injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultConfig {
    /// The seed of every choice.
    pub seed: u64,
    /// Probability, in parts per million, that an operation answers
    /// `NoResource` (alloc, prepare_src, send, sendi, send_packed, put,
    /// get).
    pub no_resource_ppm: u32,
    /// A completion is held back for 0 to this many progress calls.
    pub max_hold: u32,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            seed: 1,
            no_resource_ppm: 50_000,
            max_hold: 3,
        }
    }
}

/// What [`Faulty`] injected (shared: read it while the BTL is in use).
#[derive(Debug, Default)]
pub struct FaultCounts {
    /// Operations refused with `NoResource`.
    pub refused: AtomicU64,
    /// Completions held back.
    pub held: AtomicU64,
}

/// A seeded SplitMix64 generator (the same on every platform).
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

/// A completion held back until progress call `due`.
#[derive(Debug)]
struct Held {
    due: u64,
    token: Token,
    result: Result<(), BtlError>,
}

/// Any BTL with faults injected ([`FaultConfig`]).
#[derive(Debug)]
pub struct Faulty<B> {
    inner: B,
    cfg: FaultConfig,
    rng: Rng,
    /// Progress calls so far.
    calls: u64,
    held: Vec<Held>,
    counts: Arc<FaultCounts>,
}

impl<B: Btl> Faulty<B> {
    /// `inner` with the faults of `cfg`.
    pub fn new(inner: B, cfg: FaultConfig) -> Faulty<B> {
        Faulty {
            inner,
            cfg,
            rng: Rng(cfg.seed),
            calls: 0,
            held: Vec::new(),
            counts: Arc::default(),
        }
    }

    /// What was injected so far, shared.
    pub fn counts(&self) -> Arc<FaultCounts> {
        Arc::clone(&self.counts)
    }

    /// Whether this operation is refused.
    fn refuse(&mut self) -> bool {
        let r = self.rng.below(1_000_000) < u64::from(self.cfg.no_resource_ppm);
        if r {
            self.counts.refused.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
}

/// The sink a [`Faulty`] BTL's inner progress reports to: completions may
/// be held back, everything else goes straight on.
struct HoldingSink<'a> {
    sink: &'a mut dyn BtlSink,
    held: &'a mut Vec<Held>,
    rng: &'a mut Rng,
    counts: &'a FaultCounts,
    now: u64,
    max_hold: u32,
}

impl BtlSink for HoldingSink<'_> {
    fn on_recv(&mut self, ep: Endpoint, tag: AmTag, data: &[u8]) {
        self.sink.on_recv(ep, tag, data);
    }
    fn on_complete(&mut self, token: Token, result: Result<(), BtlError>) {
        let hold = self.rng.below(u64::from(self.max_hold) + 1);
        if hold == 0 {
            self.sink.on_complete(token, result);
        } else {
            self.counts.held.fetch_add(1, Ordering::Relaxed);
            self.held.push(Held {
                due: self.now + hold,
                token,
                result,
            });
        }
    }
    fn on_peer_lost(&mut self, ep: Endpoint, why: &BtlError) {
        self.sink.on_peer_lost(ep, why);
    }
    fn on_local_fault(&mut self, why: &BtlError) {
        self.sink.on_local_fault(why);
    }
    fn on_put_refused(&mut self, ep: Endpoint) {
        self.sink.on_put_refused(ep);
    }
}

impl<B: Btl> Btl for Faulty<B> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn caps(&self) -> Caps {
        self.inner.caps()
    }
    fn limits(&self) -> &Limits {
        self.inner.limits()
    }
    fn business_card(&self) -> Vec<u8> {
        self.inner.business_card()
    }
    fn add_peer(&mut self, peer: &PeerInfo<'_>) -> Result<Option<Endpoint>, BtlError> {
        self.inner.add_peer(peer)
    }
    fn del_peer(&mut self, ep: Endpoint) {
        self.inner.del_peer(ep)
    }
    fn alloc(&mut self, ep: Endpoint, len: usize) -> Result<Descriptor, BtlError> {
        if self.refuse() {
            return Err(BtlError::NoResource);
        }
        self.inner.alloc(ep, len)
    }
    fn free(&mut self, desc: Descriptor) {
        self.inner.free(desc)
    }
    fn prepare_src(
        &mut self,
        ep: Endpoint,
        reserve: usize,
        data: MemRegion,
    ) -> Result<Descriptor, BtlError> {
        if self.refuse() {
            return Err(BtlError::NoResource);
        }
        self.inner.prepare_src(ep, reserve, data)
    }
    fn send(
        &mut self,
        desc: Descriptor,
        tag: AmTag,
        token: Token,
    ) -> Result<SendOutcome, (Descriptor, BtlError)> {
        if self.refuse() {
            return Err((desc, BtlError::NoResource));
        }
        self.inner.send(desc, tag, token)
    }
    fn sendi(&mut self, ep: Endpoint, tag: AmTag, parts: &[&[u8]]) -> Result<(), BtlError> {
        if self.refuse() {
            return Err(BtlError::NoResource);
        }
        self.inner.sendi(ep, tag, parts)
    }
    fn send_packed(
        &mut self,
        ep: Endpoint,
        tag: AmTag,
        hdr: &[u8],
        len: usize,
        pack: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, BtlError> {
        if self.refuse() {
            return Err(BtlError::NoResource);
        }
        self.inner.send_packed(ep, tag, hdr, len, pack)
    }
    fn no_reentry(&self) -> Option<NoReentry> {
        // The wrapper calls nothing but the inner BTL and the sink: it
        // never re-enters when the inner BTL does not.
        self.inner.no_reentry()
    }
    fn sendi_hdr(&mut self, ep: Endpoint, tag: AmTag, hdr: &[u8], data: &[u8]) -> bool {
        !self.refuse() && self.inner.sendi_hdr(ep, tag, hdr, data)
    }
    fn recv_small(&mut self, ep: Endpoint, m: &SmallMatch, dst: &mut [u8]) -> SmallRecv {
        self.inner.recv_small(ep, m, dst)
    }
    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration, BtlError> {
        self.inner.register_mem(region, access)
    }
    fn sub_key(
        &self,
        reg: &Registration,
        offset: usize,
        len: usize,
    ) -> Result<RemoteKey, BtlError> {
        self.inner.sub_key(reg, offset, len)
    }
    fn deregister_mem(&mut self, id: RegId) {
        self.inner.deregister_mem(id)
    }
    fn put(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        if self.refuse() {
            return Err(BtlError::NoResource);
        }
        self.inner.put(ep, local, remote, remote_offset, token)
    }
    fn get(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        if self.refuse() {
            return Err(BtlError::NoResource);
        }
        self.inner.get(ep, local, remote, remote_offset, token)
    }
    fn progress(&mut self, sink: &mut dyn BtlSink) -> usize {
        self.calls += 1;
        let now = self.calls;
        let mut n = 0;
        // Held completions that fell due, in the order they were held.
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].due <= now {
                let h = self.held.remove(i);
                sink.on_complete(h.token, h.result);
                n += 1;
            } else {
                i += 1;
            }
        }
        let mut hold = HoldingSink {
            sink,
            held: &mut self.held,
            rng: &mut self.rng,
            counts: &self.counts,
            now,
            max_hold: self.cfg.max_hold,
        };
        n + self.inner.progress(&mut hold)
    }
    fn progress_from(&mut self, ep: Endpoint, take: &mut dyn FnMut(AmTag, &[u8]) -> bool) -> usize {
        self.inner.progress_from(ep, take)
    }
    fn polls_from_peer(&self) -> bool {
        self.inner.polls_from_peer()
    }
    /// The inner module's, except while completions are held back: those
    /// come with later progress calls, which no peer's send rings for.
    fn wakeup(&self) -> Wakeup {
        if self.held.is_empty() {
            self.inner.wakeup()
        } else {
            Wakeup::Poll
        }
    }
    fn has_work(&self) -> bool {
        !self.held.is_empty() || self.inner.has_work()
    }
    fn is_drained(&self) -> bool {
        self.held.is_empty() && self.inner.is_drained()
    }
}

/// Calls counted by a [`Traced`] BTL, by kind (shared: read them while the
/// BTL is in use).
#[derive(Debug, Default)]
pub struct TraceCounts {
    /// `sendi`, `sendi_hdr` and `send_packed` calls.
    pub sendi: AtomicU64,
    /// `send` calls.
    pub send: AtomicU64,
    /// `put` and `get` calls.
    pub rdma: AtomicU64,
    /// Fragments delivered to the sink.
    pub recv: AtomicU64,
    /// Completions delivered to the sink.
    pub complete: AtomicU64,
    /// Calls that answered an error (any, `NoResource` included).
    pub errors: AtomicU64,
}

impl TraceCounts {
    /// One counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// Any BTL with every call reported: at `TRACE` level under the target
/// `oxmpi_btl::trace` (`OXMPI_LOG=oxmpi_btl::trace=trace`), and counted in
/// [`TraceCounts`].
#[derive(Debug)]
pub struct Traced<B> {
    inner: B,
    counts: Arc<TraceCounts>,
}

impl<B: Btl> Traced<B> {
    /// `inner`, traced.
    pub fn new(inner: B) -> Traced<B> {
        Traced {
            inner,
            counts: Arc::default(),
        }
    }

    /// The counters, shared.
    pub fn counts(&self) -> Arc<TraceCounts> {
        Arc::clone(&self.counts)
    }

    fn seen<T, E: std::fmt::Debug>(&self, op: &str, ep: Option<Endpoint>, r: &Result<T, E>) {
        if let Err(e) = r {
            self.counts.errors.fetch_add(1, Ordering::Relaxed);
            tracing::trace!(target: "oxmpi_btl::trace", btl = self.inner.name(), op, ?ep, error = ?e);
        } else {
            tracing::trace!(target: "oxmpi_btl::trace", btl = self.inner.name(), op, ?ep, "ok");
        }
    }
}

/// The sink a [`Traced`] BTL's inner progress reports to.
struct TracingSink<'a> {
    sink: &'a mut dyn BtlSink,
    counts: &'a TraceCounts,
    name: &'static str,
}

impl BtlSink for TracingSink<'_> {
    fn on_recv(&mut self, ep: Endpoint, tag: AmTag, data: &[u8]) {
        self.counts.recv.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(target: "oxmpi_btl::trace", btl = self.name, ?ep, tag = tag.0, len = data.len(), "recv");
        self.sink.on_recv(ep, tag, data);
    }
    fn on_complete(&mut self, token: Token, result: Result<(), BtlError>) {
        self.counts.complete.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(target: "oxmpi_btl::trace", btl = self.name, ?token, ?result, "complete");
        self.sink.on_complete(token, result);
    }
    fn on_peer_lost(&mut self, ep: Endpoint, why: &BtlError) {
        tracing::trace!(target: "oxmpi_btl::trace", btl = self.name, ?ep, %why, "peer lost");
        self.sink.on_peer_lost(ep, why);
    }
    fn on_local_fault(&mut self, why: &BtlError) {
        tracing::trace!(target: "oxmpi_btl::trace", btl = self.name, %why, "local fault");
        self.sink.on_local_fault(why);
    }
    fn on_put_refused(&mut self, ep: Endpoint) {
        tracing::trace!(target: "oxmpi_btl::trace", btl = self.name, ?ep, "put refused");
        self.sink.on_put_refused(ep);
    }
}

impl<B: Btl> Btl for Traced<B> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn caps(&self) -> Caps {
        self.inner.caps()
    }
    fn limits(&self) -> &Limits {
        self.inner.limits()
    }
    fn business_card(&self) -> Vec<u8> {
        self.inner.business_card()
    }
    fn add_peer(&mut self, peer: &PeerInfo<'_>) -> Result<Option<Endpoint>, BtlError> {
        let r = self.inner.add_peer(peer);
        self.seen("add_peer", None, &r);
        r
    }
    fn del_peer(&mut self, ep: Endpoint) {
        tracing::trace!(target: "oxmpi_btl::trace", btl = self.inner.name(), ?ep, "del_peer");
        self.inner.del_peer(ep)
    }
    fn alloc(&mut self, ep: Endpoint, len: usize) -> Result<Descriptor, BtlError> {
        let r = self.inner.alloc(ep, len);
        self.seen("alloc", Some(ep), &r);
        r
    }
    fn free(&mut self, desc: Descriptor) {
        self.inner.free(desc)
    }
    fn prepare_src(
        &mut self,
        ep: Endpoint,
        reserve: usize,
        data: MemRegion,
    ) -> Result<Descriptor, BtlError> {
        let r = self.inner.prepare_src(ep, reserve, data);
        self.seen("prepare_src", Some(ep), &r);
        r
    }
    fn send(
        &mut self,
        desc: Descriptor,
        tag: AmTag,
        token: Token,
    ) -> Result<SendOutcome, (Descriptor, BtlError)> {
        self.counts.send.fetch_add(1, Ordering::Relaxed);
        let ep = desc.ep;
        let r = self.inner.send(desc, tag, token);
        self.seen("send", Some(ep), &r.as_ref().map_err(|(_, e)| e));
        r
    }
    fn sendi(&mut self, ep: Endpoint, tag: AmTag, parts: &[&[u8]]) -> Result<(), BtlError> {
        self.counts.sendi.fetch_add(1, Ordering::Relaxed);
        let r = self.inner.sendi(ep, tag, parts);
        self.seen("sendi", Some(ep), &r);
        r
    }
    fn send_packed(
        &mut self,
        ep: Endpoint,
        tag: AmTag,
        hdr: &[u8],
        len: usize,
        pack: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, BtlError> {
        self.counts.sendi.fetch_add(1, Ordering::Relaxed);
        let r = self.inner.send_packed(ep, tag, hdr, len, pack);
        self.seen("send_packed", Some(ep), &r);
        r
    }
    fn no_reentry(&self) -> Option<NoReentry> {
        // Tracing calls nothing of the PML's: as the inner BTL.
        self.inner.no_reentry()
    }
    fn sendi_hdr(&mut self, ep: Endpoint, tag: AmTag, hdr: &[u8], data: &[u8]) -> bool {
        self.counts.sendi.fetch_add(1, Ordering::Relaxed);
        let sent = self.inner.sendi_hdr(ep, tag, hdr, data);
        tracing::trace!(target: "oxmpi_btl::trace", btl = self.inner.name(), ?ep, sent, "sendi_hdr");
        sent
    }
    fn recv_small(&mut self, ep: Endpoint, m: &SmallMatch, dst: &mut [u8]) -> SmallRecv {
        let r = self.inner.recv_small(ep, m, dst);
        if let SmallRecv::Taken { .. } = r {
            self.counts.recv.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration, BtlError> {
        let r = self.inner.register_mem(region, access);
        self.seen("register_mem", None, &r);
        r
    }
    fn sub_key(
        &self,
        reg: &Registration,
        offset: usize,
        len: usize,
    ) -> Result<RemoteKey, BtlError> {
        self.inner.sub_key(reg, offset, len)
    }
    fn deregister_mem(&mut self, id: RegId) {
        self.inner.deregister_mem(id)
    }
    fn put(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        self.counts.rdma.fetch_add(1, Ordering::Relaxed);
        let r = self.inner.put(ep, local, remote, remote_offset, token);
        self.seen("put", Some(ep), &r);
        r
    }
    fn get(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        self.counts.rdma.fetch_add(1, Ordering::Relaxed);
        let r = self.inner.get(ep, local, remote, remote_offset, token);
        self.seen("get", Some(ep), &r);
        r
    }
    fn progress(&mut self, sink: &mut dyn BtlSink) -> usize {
        let name = self.inner.name();
        let mut t = TracingSink {
            sink,
            counts: &self.counts,
            name,
        };
        self.inner.progress(&mut t)
    }
    fn progress_from(&mut self, ep: Endpoint, take: &mut dyn FnMut(AmTag, &[u8]) -> bool) -> usize {
        let counts = Arc::clone(&self.counts);
        let mut counted = |tag: AmTag, data: &[u8]| {
            counts.recv.fetch_add(1, Ordering::Relaxed);
            take(tag, data)
        };
        self.inner.progress_from(ep, &mut counted)
    }
    fn polls_from_peer(&self) -> bool {
        self.inner.polls_from_peer()
    }
    fn wakeup(&self) -> Wakeup {
        self.inner.wakeup()
    }
    fn has_work(&self) -> bool {
        self.inner.has_work()
    }
    fn is_drained(&self) -> bool {
        self.inner.is_drained()
    }
}
