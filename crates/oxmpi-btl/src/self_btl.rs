//! The `self` BTL: a rank sending to itself.
//!
//! Sends copy into a bounded queue of recycled buffers and are delivered by
//! the next progress call (never from inside `send`, so the caller's state is
//! consistent when its handler runs). Put and get are copies within this
//! process, checked against live registrations: a remote key that names no
//! registration, or an offset past its end, is an error, never a wild write.

use std::collections::{HashMap, VecDeque};

use crate::btl::{
    Access, AmTag, Btl, BtlError, BtlSink, Caps, Descriptor, Endpoint, Limits, PeerInfo, RegId,
    Registration, RemoteKey, SendOutcome, Token,
};
use crate::mem::MemRegion;

/// The only endpoint of the self BTL.
pub const SELF_EP: Endpoint = Endpoint(0);

/// Default limits of the self BTL (the highest exclusivity: a rank always
/// reaches itself through `self`).
pub const DEFAULT_LIMITS: Limits = Limits {
    eager_limit: 64 * 1024,
    rndv_eager_limit: 64 * 1024,
    max_send_size: 256 * 1024,
    max_sendi_size: 64 * 1024,
    rdma_pipeline_send_length: 1 << 62,
    rdma_pipeline_frag_size: 1 << 62,
    min_rdma_pipeline_size: 0,
    exclusivity: 65536,
    latency: 0,
    bandwidth: 100_000,
};

/// How many fragments may wait for progress before sends get NoResource.
pub const QUEUE_DEPTH: usize = 1024;

/// The self BTL module.
#[derive(Debug)]
pub struct SelfBtl {
    rank: u32,
    limits: Limits,
    queue: VecDeque<(AmTag, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
    completions: VecDeque<(Token, Result<(), BtlError>)>,
    regs: HashMap<u64, MemRegion>,
    next_reg: u64,
    peer_added: bool,
}

impl SelfBtl {
    /// A self BTL for rank `rank`.
    pub fn new(rank: u32, limits: Limits) -> SelfBtl {
        SelfBtl {
            rank,
            limits,
            queue: VecDeque::with_capacity(QUEUE_DEPTH),
            spare: Vec::new(),
            completions: VecDeque::new(),
            regs: HashMap::new(),
            next_reg: 1,
            peer_added: false,
        }
    }

    fn buffer(&mut self, len: usize) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.reserve(len);
        b
    }

    fn check_ep(&self, ep: Endpoint) -> Result<(), BtlError> {
        if ep == SELF_EP && self.peer_added {
            Ok(())
        } else {
            Err(BtlError::Invalid(format!("unknown endpoint {ep:?}")))
        }
    }

    /// The registered region a key names, narrowed to `[offset, offset+len)`.
    fn resolve(&self, key: &RemoteKey, offset: usize, len: usize) -> Result<MemRegion, BtlError> {
        let (idb, _, _) = key
            .part(8)
            .ok_or_else(|| BtlError::Invalid("malformed remote key".into()))?;
        let id = u64::from_le_bytes(idb.try_into().expect("8 bytes"));
        let region = self
            .regs
            .get(&id)
            .ok_or_else(|| BtlError::Invalid(format!("remote key names no registration ({id})")))?;
        key.resolve_part(8, *region, offset, len)
            .map_err(BtlError::Invalid)
    }
}

// SAFETY: no operation of this BTL calls anything outside this crate but
// the kernel and the sink its progress calls are given.
#[allow(unsafe_code)]
unsafe impl crate::btl::NeverReenters for SelfBtl {}

impl Btl for SelfBtl {
    fn no_reentry(&self) -> Option<crate::btl::NoReentry> {
        Some(crate::btl::NoReentry::of(self))
    }

    fn name(&self) -> &'static str {
        "self"
    }

    /// Only this process sends to itself: no peer needs to wake a waiter.
    fn wakeup(&self) -> crate::btl::Wakeup {
        crate::btl::Wakeup::Local
    }

    fn caps(&self) -> Caps {
        Caps::SEND | Caps::SENDI | Caps::PUT | Caps::GET | Caps::ORDERED | Caps::SEND_DONE
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn business_card(&self) -> Vec<u8> {
        Vec::new()
    }

    fn add_peer(&mut self, peer: &PeerInfo<'_>) -> Result<Option<Endpoint>, BtlError> {
        if peer.rank == self.rank {
            self.peer_added = true;
            Ok(Some(SELF_EP))
        } else {
            Ok(None)
        }
    }

    fn del_peer(&mut self, ep: Endpoint) {
        if ep == SELF_EP {
            self.peer_added = false;
        }
    }

    fn alloc(&mut self, ep: Endpoint, len: usize) -> Result<Descriptor, BtlError> {
        self.check_ep(ep)?;
        if len > self.limits.max_send_size {
            return Err(BtlError::TooLarge {
                what: "alloc",
                len,
                limit: self.limits.max_send_size,
            });
        }
        let mut buf = self.buffer(len);
        buf.resize(len, 0);
        Ok(Descriptor {
            ep,
            buf,
            inplace: None,
        })
    }

    fn free(&mut self, desc: Descriptor) {
        self.spare.push(desc.buf);
    }

    fn prepare_src(
        &mut self,
        ep: Endpoint,
        reserve: usize,
        data: MemRegion,
    ) -> Result<Descriptor, BtlError> {
        let len = reserve + data.len();
        if len > self.limits.max_send_size {
            return Err(BtlError::TooLarge {
                what: "prepare_src",
                len,
                limit: self.limits.max_send_size,
            });
        }
        self.check_ep(ep)?;
        let mut buf = self.buffer(len);
        buf.resize(reserve, 0);
        buf.extend_from_slice(data.read());
        Ok(Descriptor {
            ep,
            buf,
            inplace: None,
        })
    }

    fn send(
        &mut self,
        mut desc: Descriptor,
        tag: AmTag,
        _token: Token,
    ) -> Result<SendOutcome, (Descriptor, BtlError)> {
        if let Err(e) = self.check_ep(desc.ep) {
            return Err((desc, e));
        }
        if self.queue.len() >= QUEUE_DEPTH {
            return Err((desc, BtlError::NoResource));
        }
        if let Some(r) = desc.inplace.take() {
            desc.buf.extend_from_slice(r.read());
        }
        self.queue.push_back((tag, desc.buf));
        Ok(SendOutcome::Done)
    }

    fn sendi(&mut self, ep: Endpoint, tag: AmTag, parts: &[&[u8]]) -> Result<(), BtlError> {
        self.check_ep(ep)?;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.limits.max_sendi_size {
            return Err(BtlError::TooLarge {
                what: "sendi",
                len,
                limit: self.limits.max_sendi_size,
            });
        }
        if self.queue.len() >= QUEUE_DEPTH {
            return Err(BtlError::NoResource);
        }
        let mut buf = self.buffer(len);
        for p in parts {
            buf.extend_from_slice(p);
        }
        self.queue.push_back((tag, buf));
        Ok(())
    }

    fn register_mem(
        &mut self,
        region: MemRegion,
        _access: Access,
    ) -> Result<Registration, BtlError> {
        let id = self.next_reg;
        self.next_reg += 1;
        self.regs.insert(id, region);
        let key = RemoteKey::with_part(&id.to_le_bytes(), 0, region.len() as u64)
            .expect("24 bytes fit a key");
        Ok(Registration {
            id: RegId(id),
            region,
            key,
        })
    }

    fn sub_key(
        &self,
        reg: &Registration,
        offset: usize,
        len: usize,
    ) -> Result<RemoteKey, BtlError> {
        reg.key.narrow("self", 8, offset, len)
    }

    fn deregister_mem(&mut self, id: RegId) {
        self.regs.remove(&id.0);
    }

    fn put(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        self.check_ep(ep)?;
        let target = self.resolve(remote, remote_offset, local.len())?;
        target.write(0, local.read());
        self.completions.push_back((token, Ok(())));
        Ok(())
    }

    fn get(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        self.check_ep(ep)?;
        let source = self.resolve(remote, remote_offset, local.len())?;
        local.write(0, source.read());
        self.completions.push_back((token, Ok(())));
        Ok(())
    }

    fn progress(&mut self, sink: &mut dyn BtlSink) -> usize {
        let mut n = 0;
        while let Some((token, result)) = self.completions.pop_front() {
            sink.on_complete(token, result);
            n += 1;
        }
        // Deliver what was queued before this call only, so a handler that
        // sends to itself cannot keep one progress call busy forever.
        let ready = self.queue.len();
        for _ in 0..ready {
            let Some((tag, buf)) = self.queue.pop_front() else {
                break;
            };
            sink.on_recv(SELF_EP, tag, &buf);
            self.spare.push(buf);
            n += 1;
        }
        n
    }

    fn progress_from(&mut self, ep: Endpoint, take: &mut dyn FnMut(AmTag, &[u8]) -> bool) -> usize {
        if ep != SELF_EP {
            return 0;
        }
        // As `progress`: only what was queued before this call.
        let ready = self.queue.len();
        let mut n = 0;
        while n < ready {
            let Some((tag, buf)) = self.queue.pop_front() else {
                break;
            };
            let more = take(tag, &buf);
            self.spare.push(buf);
            n += 1;
            if !more {
                break;
            }
        }
        n
    }

    fn has_work(&self) -> bool {
        !self.queue.is_empty() || !self.completions.is_empty()
    }
}
