//! A simulated MTL: endpoints in one process over an in-memory fabric,
//! seeded, as `oxmpi-btl`'s simulated BTL is for BTLs. It behaves as a
//! tagged network provider does: messages carry a 64-bit network tag laid
//! out by [`crate::tag::Layout`] (so the tag modes' limits and collisions
//! show in tests) and, in `ofi_tag_full`, the source rank as CQ data;
//! each endpoint matches arrivals against its posted receives (tag and
//! ignore mask, a directed receive's peer) in posting order and keeps the
//! rest unexpected; a synchronous send is acknowledged by the receiver
//! when it matches (the protocol bits). The fabric delivers each pair's
//! messages in order but interleaves pairs in a seeded random order.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::rc::Rc;

use oxmpi_btl::mem::MemRegion;

use crate::mtl::{
    Event, Limits, MessageId, Mtl, MtlError, MtlSink, Outcome, Posted, RecvInfo, SendMode, Source,
    TagSel, Token,
};
use crate::tag::{matches, Layout, Proto, TagMode};

/// How a simulated fabric behaves.
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    /// Seeds the order in which pairs' messages are delivered.
    pub seed: u64,
    /// The tag layout.
    pub mode: TagMode,
    /// High tag bits the "provider" keeps (`mem_tag_format`).
    pub reserved: u32,
    /// Sends (not synchronous) of at most this many bytes complete inside
    /// the call, with no event, as a provider's `fi_tinject` does
    /// ([`crate::mtl::Posted::Done`]); `None`: every send has its event.
    pub inject: Option<usize>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            mode: TagMode::Tag1,
            reserved: 0,
            inject: None,
        }
    }
}

/// A message on the wire.
#[derive(Clone, Debug)]
struct Wire {
    from: u32,
    tag: u64,
    /// The source rank in `ofi_tag_full` (the CQ data).
    data: u32,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct Net {
    rng: u64,
    /// Messages in flight, per (from, to), in order.
    queues: HashMap<(u32, u32), VecDeque<Wire>>,
    /// Delivered to an endpoint, not yet taken by its progress.
    arrived: HashMap<u32, VecDeque<Wire>>,
    /// Endpoints that exist, and those that died.
    alive: HashSet<u32>,
    dead: HashSet<u32>,
}

impl Net {
    fn next(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// The fabric the endpoints of one simulated job share.
#[derive(Clone)]
pub struct SimFabric {
    net: Rc<RefCell<Net>>,
    cfg: SimConfig,
}

impl SimFabric {
    /// A fabric.
    pub fn new(cfg: SimConfig) -> SimFabric {
        let net = Net {
            rng: cfg.seed.max(1),
            ..Default::default()
        };
        SimFabric {
            net: Rc::new(RefCell::new(net)),
            cfg,
        }
    }

    /// Opens the endpoint of world rank `rank`; `Err` when the tag mode
    /// cannot work with the reserved bits.
    pub fn open(&self, rank: u32) -> Result<SimMtl, MtlError> {
        let layout = Layout::new(self.cfg.mode, self.cfg.reserved)?;
        self.net.borrow_mut().alive.insert(rank);
        Ok(SimMtl {
            net: self.net.clone(),
            me: rank,
            layout,
            inject: self.cfg.inject,
            peers: HashSet::new(),
            comms: HashSet::new(),
            posted: Vec::new(),
            unexpected: VecDeque::new(),
            claimed: HashMap::new(),
            syncs: Vec::new(),
            events: VecDeque::new(),
            next_msg: 0,
            closed: false,
        })
    }

    /// Delivers the head of one pair's queue, chosen at random; whether
    /// anything moved.
    pub fn step(&self) -> bool {
        let mut n = self.net.borrow_mut();
        let mut keys: Vec<(u32, u32)> = n
            .queues
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect();
        if keys.is_empty() {
            return false;
        }
        keys.sort_unstable();
        let k = keys[(n.next() % keys.len() as u64) as usize];
        let w = n.queues.get_mut(&k).and_then(VecDeque::pop_front);
        if let Some(w) = w {
            if !n.dead.contains(&k.1) {
                n.arrived.entry(k.1).or_default().push_back(w);
            }
        }
        true
    }

    /// Delivers everything in flight.
    pub fn flush(&self) {
        while self.step() {}
    }

    /// World rank `rank` dies: what is in flight to or from it is lost;
    /// its peers' requests that need it fail.
    pub fn kill(&self, rank: u32) {
        let mut n = self.net.borrow_mut();
        n.dead.insert(rank);
        n.queues.retain(|k, _| k.0 != rank && k.1 != rank);
        n.arrived.remove(&rank);
    }
}

/// What a receive matches: the network tag and ignore mask, a directed
/// receive's peer, and in `ofi_tag_full` the source the CQ data must name.
#[derive(Clone, Copy)]
struct Want {
    tag: (u64, u64),
    peer: Option<u32>,
    data: Option<u32>,
}

/// A posted receive.
struct PostedRecv {
    token: Token,
    want: Want,
    buf: MemRegion,
}

/// A synchronous send waiting for its acknowledgement.
struct SyncWait {
    token: Token,
    peer: u32,
    ack: u64,
}

/// One endpoint of a [`SimFabric`].
pub struct SimMtl {
    net: Rc<RefCell<Net>>,
    me: u32,
    layout: Layout,
    inject: Option<usize>,
    peers: HashSet<u32>,
    comms: HashSet<u32>,
    posted: Vec<PostedRecv>,
    unexpected: VecDeque<Wire>,
    claimed: HashMap<u64, Wire>,
    syncs: Vec<SyncWait>,
    events: VecDeque<Event>,
    next_msg: u64,
    closed: bool,
}

impl SimMtl {
    /// The tag layout in use.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    fn check_peer(&self, peer: u32) -> Result<(), MtlError> {
        if self.peers.contains(&peer) {
            Ok(())
        } else {
            Err(MtlError::UnknownPeer(peer))
        }
    }

    fn check_comm(&self, cid: u32) -> Result<(), MtlError> {
        if self.comms.contains(&cid) {
            Ok(())
        } else {
            Err(MtlError::UnknownComm(cid))
        }
    }

    fn put(&self, to: u32, w: Wire) {
        let mut n = self.net.borrow_mut();
        if n.dead.contains(&to) {
            return;
        }
        n.queues.entry((self.me, to)).or_default().push_back(w);
    }

    /// The receive criteria of `(cid, src, tag)`.
    fn criteria(&self, cid: u32, src: Source, tag: TagSel) -> Result<Want, MtlError> {
        self.check_comm(cid)?;
        let t = match tag {
            TagSel::Any => None,
            TagSel::Value(v) => Some(v),
        };
        Ok(match src {
            Source::Any => Want {
                tag: self.layout.recv_match(cid, None, t)?,
                peer: None,
                data: None,
            },
            Source::Rank { rank, peer } => {
                self.check_peer(peer)?;
                Want {
                    tag: self.layout.recv_match(cid, Some(rank), t)?,
                    peer: Some(peer),
                    data: self.layout.source_in_data().then_some(rank),
                }
            }
        })
    }

    fn fits(w: &Wire, want: Want) -> bool {
        matches(w.tag, want.tag)
            && want.peer.map_or(true, |p| p == w.from)
            && want.data.map_or(true, |d| d == w.data)
    }

    fn info(&self, w: &Wire, room: usize) -> RecvInfo {
        let f = self.layout.decode(w.tag);
        RecvInfo {
            source: f.source.unwrap_or(w.data),
            tag: f.tag,
            len: w.bytes.len(),
            truncated: w.bytes.len() > room,
        }
    }

    /// Delivers `w` into `buf` for `token` (and acknowledges a synchronous
    /// send).
    fn deliver(&mut self, w: &Wire, buf: MemRegion, token: Token) {
        let info = self.info(w, buf.len());
        let n = w.bytes.len().min(buf.len());
        buf.write(0, &w.bytes[..n]);
        if self.layout.decode(w.tag).proto == Proto::Sync {
            let ack = Wire {
                from: self.me,
                tag: self.layout.ack_tag(w.tag),
                data: 0,
                bytes: Vec::new(),
            };
            self.put(w.from, ack);
        }
        self.events.push_back(Event {
            token,
            outcome: Outcome::Received(info),
        });
    }

    /// An arrival: an acknowledgement, a match for a posted receive, or an
    /// unexpected message.
    fn arrive(&mut self, w: Wire) {
        if self.layout.decode(w.tag).proto == Proto::SyncAck {
            if let Some(i) = self
                .syncs
                .iter()
                .position(|s| s.peer == w.from && s.ack == w.tag)
            {
                let s = self.syncs.remove(i);
                self.events.push_back(Event {
                    token: s.token,
                    outcome: Outcome::Sent,
                });
            }
            return;
        }
        if let Some(i) = self.posted.iter().position(|p| Self::fits(&w, p.want)) {
            let p = self.posted.remove(i);
            self.deliver(&w, p.buf, p.token);
        } else {
            self.unexpected.push_back(w);
        }
    }

    /// Fails what needs a dead peer.
    fn reap_dead(&mut self) {
        let dead: HashSet<u32> = self.net.borrow().dead.clone();
        if dead.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.syncs.len() {
            if dead.contains(&self.syncs[i].peer) {
                let s = self.syncs.remove(i);
                self.events.push_back(Event {
                    token: s.token,
                    outcome: Outcome::Failed(MtlError::PeerLost(s.peer)),
                });
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.posted.len() {
            match self.posted[i].want.peer {
                Some(p) if dead.contains(&p) => {
                    let r = self.posted.remove(i);
                    self.events.push_back(Event {
                        token: r.token,
                        outcome: Outcome::Failed(MtlError::PeerLost(p)),
                    });
                }
                _ => i += 1,
            }
        }
    }
}

impl Mtl for SimMtl {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn limits(&self) -> Limits {
        Limits {
            max_tag: self.layout.max_tag(),
            max_cid: self.layout.max_cid(),
            max_rank: self.layout.max_source(),
        }
    }

    fn business_card(&self) -> Vec<u8> {
        self.me.to_le_bytes().to_vec()
    }

    fn add_peers(&mut self, peers: &[(u32, &[u8])]) -> Result<(), MtlError> {
        if self.closed {
            return Err(MtlError::Closed);
        }
        for &(rank, card) in peers {
            let b: [u8; 4] = card.try_into().map_err(|_| MtlError::BadCard {
                rank,
                why: format!("{} bytes, not 4", card.len()),
            })?;
            if u32::from_le_bytes(b) != rank {
                return Err(MtlError::BadCard {
                    rank,
                    why: format!("it names rank {}", u32::from_le_bytes(b)),
                });
            }
        }
        self.peers.extend(peers.iter().map(|p| p.0));
        Ok(())
    }

    fn del_peers(&mut self, ranks: &[u32]) {
        for r in ranks {
            self.peers.remove(r);
        }
    }

    fn add_comm(&mut self, cid: u32) -> Result<(), MtlError> {
        if self.closed {
            return Err(MtlError::Closed);
        }
        // The id must fit the layout's field.
        self.layout.recv_match(cid, None, None)?;
        self.comms.insert(cid);
        Ok(())
    }

    fn del_comm(&mut self, cid: u32) {
        self.comms.remove(&cid);
    }

    fn close(&mut self) {
        // What a process's exit frees: its posted receives, the messages
        // it held, its pending events.
        self.closed = true;
        self.posted.clear();
        self.unexpected.clear();
        self.claimed.clear();
        self.syncs.clear();
        self.events.clear();
    }

    fn isend(
        &mut self,
        cid: u32,
        peer: u32,
        rank: u32,
        tag: i32,
        data: MemRegion,
        mode: SendMode,
        token: Token,
    ) -> Result<Posted, MtlError> {
        if self.closed {
            return Err(MtlError::Closed);
        }
        self.check_comm(cid)?;
        self.check_peer(peer)?;
        let proto = if mode == SendMode::Synchronous {
            Proto::Sync
        } else {
            Proto::Plain
        };
        let t = self.layout.send_tag(cid, rank, tag, proto)?;
        if self.net.borrow().dead.contains(&peer) {
            self.events.push_back(Event {
                token,
                outcome: Outcome::Failed(MtlError::PeerLost(peer)),
            });
            return Ok(Posted::Pending);
        }
        self.put(
            peer,
            Wire {
                from: self.me,
                tag: t,
                data: rank,
                bytes: data.read().to_vec(),
            },
        );
        if proto == Proto::Sync {
            self.syncs.push(SyncWait {
                token,
                peer,
                ack: self.layout.ack_tag(t),
            });
        } else if self.inject.is_some_and(|n| data.len() <= n) {
            return Ok(Posted::Done);
        } else {
            self.events.push_back(Event {
                token,
                outcome: Outcome::Sent,
            });
        }
        Ok(Posted::Pending)
    }

    fn inject_limit(&self) -> usize {
        self.inject.unwrap_or(0)
    }

    fn inject(&mut self, cid: u32, peer: u32, rank: u32, tag: i32, data: MemRegion) -> bool {
        if self.closed {
            return false;
        }
        if !self.inject.is_some_and(|n| data.len() <= n)
            || self.check_comm(cid).is_err()
            || self.check_peer(peer).is_err()
            || self.net.borrow().dead.contains(&peer)
        {
            return false;
        }
        let Ok(t) = self.layout.send_tag(cid, rank, tag, Proto::Plain) else {
            return false;
        };
        self.put(
            peer,
            Wire {
                from: self.me,
                tag: t,
                data: rank,
                bytes: data.read().to_vec(),
            },
        );
        true
    }

    fn irecv(
        &mut self,
        cid: u32,
        src: Source,
        tag: TagSel,
        buf: MemRegion,
        token: Token,
    ) -> Result<(), MtlError> {
        if self.closed {
            return Err(MtlError::Closed);
        }
        let want = self.criteria(cid, src, tag)?;
        if let Some(i) = self.unexpected.iter().position(|w| Self::fits(w, want)) {
            let w = self.unexpected.remove(i).expect("found");
            self.deliver(&w, buf, token);
        } else {
            self.posted.push(PostedRecv { token, want, buf });
        }
        Ok(())
    }

    fn iprobe(&mut self, cid: u32, src: Source, tag: TagSel) -> Result<Option<RecvInfo>, MtlError> {
        if self.closed {
            return Err(MtlError::Closed);
        }
        let want = self.criteria(cid, src, tag)?;
        Ok(self
            .unexpected
            .iter()
            .find(|w| Self::fits(w, want))
            .map(|w| self.info(w, w.bytes.len())))
    }

    fn improbe(
        &mut self,
        cid: u32,
        src: Source,
        tag: TagSel,
    ) -> Result<Option<(MessageId, RecvInfo)>, MtlError> {
        if self.closed {
            return Err(MtlError::Closed);
        }
        let want = self.criteria(cid, src, tag)?;
        let Some(i) = self.unexpected.iter().position(|w| Self::fits(w, want)) else {
            return Ok(None);
        };
        let w = self.unexpected.remove(i).expect("found");
        let info = self.info(&w, w.bytes.len());
        self.next_msg += 1;
        self.claimed.insert(self.next_msg, w);
        Ok(Some((MessageId(self.next_msg), info)))
    }

    fn imrecv(&mut self, msg: MessageId, buf: MemRegion, token: Token) -> Result<(), MtlError> {
        if self.closed {
            return Err(MtlError::Closed);
        }
        let w = self
            .claimed
            .remove(&msg.0)
            .ok_or(MtlError::UnknownMessage(msg))?;
        self.deliver(&w, buf, token);
        Ok(())
    }

    fn cancel(&mut self, token: Token) -> bool {
        if self.closed {
            return false;
        }
        let Some(i) = self.posted.iter().position(|p| p.token == token) else {
            return false;
        };
        self.posted.remove(i);
        self.events.push_back(Event {
            token,
            outcome: Outcome::Cancelled,
        });
        true
    }

    fn progress(&mut self, sink: &mut dyn MtlSink) -> usize {
        if self.closed {
            return 0;
        }
        let arrived = self.net.borrow_mut().arrived.remove(&self.me);
        for w in arrived.into_iter().flatten() {
            self.arrive(w);
        }
        self.reap_dead();
        let n = self.events.len();
        while let Some(e) = self.events.pop_front() {
            sink.on_event(e);
        }
        n
    }
}
