//! The TCP BTL module ([`TcpBtl`]): opening the modules of a process, and
//! the [`Btl`] implementation over [`super::conn`] (connections),
//! [`super::framing`] (frames) and [`super::landing`] (puts).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll};

use super::config::TcpConfig;
use super::conn::{listen_on, Conn, Peer, PeerState, Phase, LISTENER};
use super::framing::{Books, BufPool, OutFrag, SMALL_BUF};
use super::iface::{self, Interface};
use super::landing::PutTargets;
use super::wire::{self, Card, CardEntry, PutHdr, FRAME_HDR_LEN, PUT_HDR_LEN};
use crate::btl::{
    Access, AmTag, Btl, BtlError, BtlSink, Caps, Descriptor, Doorbell, Endpoint, Limits, PeerInfo,
    RegId, Registration, RemoteKey, SendOutcome, Token, Wakeup,
};
use crate::mem::MemRegion;

/// Counters of one module.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Fragments fully written to sockets.
    pub frags_sent: u64,
    /// Fragments delivered to `on_recv`.
    pub frags_received: u64,
    /// Bytes written to sockets (headers included, handshakes excluded).
    pub bytes_sent: u64,
    /// Bytes read from established connections (headers included).
    pub bytes_received: u64,
    /// Connections this module initiated.
    pub connects: u64,
    /// Connections accepted after a valid handshake.
    pub accepted: u64,
    /// Valid handshakes declined (a simultaneous connect lost).
    pub declined: u64,
    /// Connections closed for a missing or wrong secret, a malformed
    /// greeting or a handshake timeout.
    pub rejected: u64,
}

/// One TCP BTL module: one interface, one link.
#[derive(Debug)]
pub struct TcpBtl {
    pub(super) rank: u32,
    pub(super) secret: [u8; 16],
    pub(super) limits: Limits,
    pub(super) frame_max: usize,
    pub(super) card: Vec<u8>,
    pub(super) entries: Vec<CardEntry>,
    pub(super) my_entry: u8,
    pub(super) iface: Interface,
    pub(super) link: u32,
    pub(super) listen_addr: SocketAddrV4,
    pub(super) sndbuf: usize,
    pub(super) rcvbuf: usize,
    pub(super) max_queued: usize,
    pub(super) handshake_timeout: Duration,
    pub(super) poll: Poll,
    events: Events,
    pub(super) listener: OwnedFd,
    pub(super) conns: Vec<Option<Conn>>,
    pub(super) free_slots: Vec<usize>,
    pub(super) peers: Vec<Peer>,
    pub(super) by_rank: HashMap<u32, Endpoint>,
    /// Authenticated connections from ranks not added yet.
    pub(super) parked: HashMap<u32, usize>,
    /// Connections with work to do at the next progress.
    pub(super) ready: Vec<usize>,
    /// The other half of `ready`'s double buffer.
    ready_spare: Vec<usize>,
    /// Connections awaiting a HELLO.
    pub(super) pending_hellos: usize,
    /// Accepted connections in the order of acceptance, as (slot,
    /// `Conn::accept_seq`): the oldest still awaiting its HELLO is the one
    /// closed to make room. Entries of connections gone or authenticated
    /// are skipped (and pruned).
    pub(super) hello_order: VecDeque<(usize, u64)>,
    /// The last `Conn::accept_seq` given.
    pub(super) accept_seq: u64,
    /// Running out of descriptors on accept was reported.
    pub(super) said_out_of_fds: bool,
    /// A fault of this process for the next progress to report
    /// ([`BtlSink::on_local_fault`]).
    pub(super) fault: Option<BtlError>,
    /// Our connections in `Connecting`/`AwaitAck`.
    pub(super) connecting: usize,
    /// Peers in `Waiting`.
    pub(super) waiting: usize,
    pub(super) books: Books,
    /// Our registrations (index = id), shared by this process's modules.
    pub(super) regs: PutTargets,
    /// The epoll instance as a doorbell ([`Btl::wakeup`]).
    bell: Arc<TcpBell>,
}

/// The module's epoll instance as a [`Doorbell`]: a sleeper polls (2) a
/// duplicate of its descriptor, which is readable while the ready list
/// holds events, without taking them (mio's edge-triggered events stay
/// for the module's next `progress`). Nothing to arm: data that arrives
/// after the last look raises an edge. `prepare` refuses while the module
/// has work that no event will announce (connections still to service,
/// handshake timers, completions to report), as `progress` leaves it.
#[derive(Debug)]
pub(super) struct TcpBell {
    epfd: OwnedFd,
    busy: AtomicBool,
}

impl Doorbell for TcpBell {
    fn arm(&self) {}

    fn prepare(&self) -> bool {
        !self.busy.load(Ordering::Relaxed)
    }

    fn sleep(&self, timeout: Duration) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut fds = [PollFd::new(&self.epfd, PollFlags::IN)];
        let t = Timespec {
            tv_sec: timeout.as_secs() as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        matches!(poll(&mut fds, Some(&t)), Ok(n) if n > 0)
    }

    fn disarm(&self) {}
}

/// A duplicate of `poll`'s epoll descriptor (mio offers only the raw one).
#[allow(unsafe_code)]
fn dup_epoll(poll: &Poll) -> std::io::Result<OwnedFd> {
    // SAFETY: the descriptor is `poll`'s own, open while `poll` is, which
    // the borrow outlives; it is only duplicated here.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(poll.as_raw_fd()) };
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, 0)?)
}

impl TcpBtl {
    /// Opens one module per selected interface times `cfg.links`, each
    /// listening on its interface. Every module carries the same business
    /// card. Fails on an invalid configuration (both interface lists set,
    /// a malformed list, `links` out of 1..=255, an include list that names
    /// no interface) or when a listener cannot be opened. With no usable
    /// interface at all (and no include list) the list is empty.
    pub fn open_all(cfg: &TcpConfig) -> Result<Vec<TcpBtl>, BtlError> {
        let filter = cfg.filter()?;
        let all = iface::system_interfaces()?;
        let chosen = filter.select(&all);
        if chosen.is_empty() && !cfg.if_include.is_empty() {
            let names: Vec<String> = all
                .iter()
                .map(|i| format!("{}={}", i.name, i.addr))
                .collect();
            return Err(BtlError::Invalid(format!(
                "btl_tcp_if_include={} matches no interface that is up with an IPv4 address \
                 (available: {})",
                cfg.if_include.join(","),
                names.join(", ")
            )));
        }
        Self::open_on(cfg, &chosen)
    }

    /// Opens modules on exactly these interfaces (no selection policy):
    /// one per interface times `cfg.links`.
    pub fn open_on(cfg: &TcpConfig, interfaces: &[Interface]) -> Result<Vec<TcpBtl>, BtlError> {
        if !(1..=255).contains(&cfg.links) {
            return Err(BtlError::Invalid(format!(
                "btl_tcp_links = {} is outside 1..=255",
                cfg.links
            )));
        }
        let n = interfaces.len() * cfg.links as usize;
        if n > 255 {
            return Err(BtlError::Invalid(format!(
                "{} interfaces x {} links = {n} modules: at most 255",
                interfaces.len(),
                cfg.links
            )));
        }
        let regs = PutTargets::new();
        let mut listeners = Vec::with_capacity(n);
        let mut entries = Vec::with_capacity(n);
        for (k, ifc) in interfaces.iter().enumerate() {
            for link in 0..cfg.links {
                let (fd, port) = listen_on(ifc.addr, cfg)?;
                listeners.push((fd, k, link));
                entries.push(CardEntry {
                    addr: ifc.addr,
                    prefix_len: ifc.prefix_len,
                    port,
                    link: link as u8,
                    iface: k as u8,
                });
            }
        }
        let card = Card {
            rank: cfg.rank,
            entries: entries.clone(),
        }
        .encode();
        let frame_max = cfg.frame_max();
        let mut out = Vec::with_capacity(n);
        for (i, (fd, k, link)) in listeners.into_iter().enumerate() {
            let io = |what: &str, e: std::io::Error| {
                let hint = oxmpi_runtime::limits::errno_fd_hint(e.raw_os_error());
                BtlError::Io(format!("{what}: {e}{hint}"))
            };
            let poll = Poll::new().map_err(|e| io("epoll", e))?;
            poll.registry()
                .register(&mut SourceFd(&fd.as_raw_fd()), LISTENER, Interest::READABLE)
                .map_err(|e| io("epoll register", e))?;
            let e = entries[i];
            let bell = Arc::new(TcpBell {
                epfd: dup_epoll(&poll).map_err(|e| io("epoll dup", e))?,
                busy: AtomicBool::new(false),
            });
            out.push(TcpBtl {
                bell,
                rank: cfg.rank,
                secret: cfg.secret,
                limits: cfg.limits,
                frame_max,
                card: card.clone(),
                entries: entries.clone(),
                my_entry: i as u8,
                iface: interfaces[k].clone(),
                link,
                listen_addr: SocketAddrV4::new(e.addr, e.port),
                sndbuf: cfg.sndbuf,
                rcvbuf: cfg.rcvbuf,
                max_queued: cfg.max_queued,
                handshake_timeout: cfg.handshake_timeout,
                poll,
                events: Events::with_capacity(256),
                listener: fd,
                conns: Vec::new(),
                free_slots: Vec::new(),
                peers: Vec::new(),
                by_rank: HashMap::new(),
                parked: HashMap::new(),
                ready: Vec::new(),
                ready_spare: Vec::new(),
                pending_hellos: 0,
                hello_order: VecDeque::new(),
                accept_seq: 0,
                said_out_of_fds: false,
                fault: None,
                connecting: 0,
                waiting: 0,
                books: Books {
                    pool: BufPool {
                        small: Vec::new(),
                        large: Vec::new(),
                        // Pipeline fragments are pooled; a copied eager
                        // message larger than one (up to the 256 KiB eager
                        // limit) gets a buffer of its own size.
                        large_cap: cfg.limits.max_send_size.min(frame_max).max(SMALL_BUF + 1),
                    },
                    completions: VecDeque::new(),
                    lost: VecDeque::new(),
                    stats: TcpStats::default(),
                    queued_frags: 0,
                },
                regs: regs.clone(),
            });
        }
        Ok(out)
    }

    /// This module's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The interface this module uses.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// This module's link number on its interface.
    pub fn link(&self) -> u32 {
        self.link
    }

    /// The address this module listens on.
    pub fn listen_addr(&self) -> SocketAddrV4 {
        self.listen_addr
    }

    /// This module's counters.
    pub fn stats(&self) -> TcpStats {
        self.books.stats
    }

    /// Open sockets other than the listener (connected, connecting or in
    /// a handshake).
    pub fn open_connections(&self) -> usize {
        self.conns.iter().filter(|c| c.is_some()).count()
    }

    /// Established (authenticated) connections.
    pub fn established_connections(&self) -> usize {
        self.conns
            .iter()
            .flatten()
            .filter(|c| c.phase == Phase::Established)
            .count()
    }
}

impl TcpBtl {
    /// Whether the next `progress` has work that no epoll event will
    /// announce: connections queued for service, fragments not yet
    /// written, outcomes to report. (The
    /// handshake and reconnect timers need no polling: a wait's sleep is
    /// bounded, `pml_ob1_idle_sleep_max`, far below their periods.)
    fn needs_polling(&self) -> bool {
        !self.ready.is_empty()
            || self.books.queued_frags > 0
            || !self.books.completions.is_empty()
            || !self.books.lost.is_empty()
            || self.fault.is_some()
    }
}

// SAFETY: no operation of this BTL calls anything outside this crate but
// the kernel and the sink its progress calls are given.
#[allow(unsafe_code)]
unsafe impl crate::btl::NeverReenters for TcpBtl {}

impl Btl for TcpBtl {
    fn no_reentry(&self) -> Option<crate::btl::NoReentry> {
        Some(crate::btl::NoReentry::of(self))
    }

    fn name(&self) -> &'static str {
        "tcp"
    }

    fn caps(&self) -> Caps {
        // PUT is emulated: the data travels in a frame and is received
        // straight into the target's registered memory, before the frames
        // after it on the connection (PUT_ORDERED: done once written; a
        // refusal is the target's to report).
        Caps::SEND
            | Caps::SENDI
            | Caps::SEND_INPLACE
            | Caps::PUT
            | Caps::ORDERED
            | Caps::PUT_ORDERED
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn business_card(&self) -> Vec<u8> {
        self.card.clone()
    }

    fn add_peer(&mut self, peer: &PeerInfo<'_>) -> Result<Option<Endpoint>, BtlError> {
        if peer.rank == self.rank {
            return Ok(None);
        }
        let Some(bytes) = peer.card else {
            return Ok(None);
        };
        let card = Card::decode(bytes)?;
        if card.rank != peer.rank {
            return Err(BtlError::Invalid(format!(
                "tcp business card of rank {} given for rank {}",
                card.rank, peer.rank
            )));
        }
        if let Some(&ep) = self.by_rank.get(&peer.rank) {
            return Ok(Some(ep));
        }
        let mine = Card {
            rank: self.rank,
            entries: self.entries.clone(),
        };
        let me = usize::from(self.my_entry);
        let entry = if self.rank < peer.rank {
            wire::pair_entries(&mine, &card, peer.local)
                .into_iter()
                .find(|&(l, _)| l == me)
                .map(|(_, h)| h)
        } else {
            wire::pair_entries(&card, &mine, peer.local)
                .into_iter()
                .find(|&(_, h)| h == me)
                .map(|(l, _)| l)
        };
        let Some(entry) = entry else {
            // Not our partner: a connection from it cannot be ours to keep.
            if let Some(slot) = self.parked.remove(&peer.rank) {
                self.close_conn(slot);
            }
            return Ok(None);
        };
        let e = card.entries[entry];
        let ep = Endpoint(
            u32::try_from(self.peers.len())
                .map_err(|_| BtlError::Invalid("too many endpoints".into()))?,
        );
        let mut state = PeerState::Idle;
        if let Some(slot) = self.parked.remove(&peer.rank) {
            if let Some(c) = self.conns[slot].as_mut() {
                c.ep = Some(ep);
                c.readable = true;
                state = PeerState::Connected(slot);
            }
        }
        let bound = if let PeerState::Connected(s) = state {
            Some(s)
        } else {
            None
        };
        self.peers.push(Peer {
            rank: peer.rank,
            target: SocketAddrV4::new(e.addr, e.port),
            entry: entry as u8,
            state,
            queue: VecDeque::new(),
            queued: 0,
            tries: 0,
            put_seq: 0,
        });
        self.by_rank.insert(peer.rank, ep);
        if let Some(s) = bound {
            self.mark_ready(s);
        }
        Ok(Some(ep))
    }

    fn del_peer(&mut self, ep: Endpoint) {
        let Some(p) = self.peers.get_mut(ep.0 as usize) else {
            return;
        };
        let slot = match p.state {
            PeerState::Removed => return,
            PeerState::Connecting(s) | PeerState::Connected(s) => Some(s),
            PeerState::Waiting(_) => {
                self.waiting -= 1;
                None
            }
            PeerState::Idle | PeerState::Gone(_) => None,
        };
        p.state = PeerState::Removed;
        let err = BtlError::PeerGone(ep, "endpoint deleted".into());
        self.books.fail_all(p, &err);
        let rank = p.rank;
        if self.by_rank.get(&rank) == Some(&ep) {
            self.by_rank.remove(&rank);
        }
        if let Some(s) = slot {
            self.close_conn(s);
        }
    }

    fn alloc(&mut self, ep: Endpoint, len: usize) -> Result<Descriptor, BtlError> {
        self.peer(ep)?;
        if len > self.frame_max {
            return Err(BtlError::TooLarge {
                what: "alloc",
                len,
                limit: self.frame_max,
            });
        }
        let mut buf = self.books.pool.get(len);
        buf.resize(len, 0);
        Ok(Descriptor {
            ep,
            buf,
            inplace: None,
        })
    }

    fn free(&mut self, desc: Descriptor) {
        self.books.pool.put(desc.buf);
    }

    fn prepare_src(
        &mut self,
        ep: Endpoint,
        reserve: usize,
        data: MemRegion,
    ) -> Result<Descriptor, BtlError> {
        self.peer(ep)?;
        let len = reserve.saturating_add(data.len());
        if len > self.frame_max {
            return Err(BtlError::TooLarge {
                what: "prepare_src",
                len,
                limit: self.frame_max,
            });
        }
        // In place: the frame is written with writev straight from the
        // user's memory, which the PML keeps untouched until the send's
        // token completes (or `send` returns Done).
        let mut buf = self.books.pool.get(reserve);
        buf.resize(reserve, 0);
        Ok(Descriptor {
            ep,
            buf,
            inplace: Some(data),
        })
    }

    fn send(
        &mut self,
        desc: Descriptor,
        tag: AmTag,
        token: Token,
    ) -> Result<SendOutcome, (Descriptor, BtlError)> {
        let ep = desc.ep;
        if let Err(e) = self.peer(ep) {
            return Err((desc, e));
        }
        let len = desc.len();
        if len > self.frame_max {
            let limit = self.frame_max;
            return Err((
                desc,
                BtlError::TooLarge {
                    what: "send",
                    len,
                    limit,
                },
            ));
        }
        self.send_frame(wire::frame_header(len, tag.0), desc, Some(token))
    }

    fn sendi(&mut self, ep: Endpoint, tag: AmTag, parts: &[&[u8]]) -> Result<(), BtlError> {
        self.peer(ep)?;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.limits.max_sendi_size {
            return Err(BtlError::TooLarge {
                what: "sendi",
                len,
                limit: self.limits.max_sendi_size,
            });
        }
        let hdr = wire::frame_header(len, tag.0);
        let written = if parts.len() < 12 {
            let mut all: [&[u8]; 12] = [&[]; 12];
            all[0] = &hdr;
            all[1..=parts.len()].copy_from_slice(parts);
            match self.write_now(ep, &all[..=parts.len()]) {
                Ok(w) => w,
                Err(why) => {
                    let r = self.peers[ep.0 as usize].rank;
                    self.lose_peer(ep, format!("connection to rank {r}: {why}"));
                    return Err(self.peer(ep).err().unwrap_or(BtlError::NoResource));
                }
            }
        } else {
            None
        };
        if written == Some(FRAME_HDR_LEN + len) {
            self.books.stats.frags_sent += 1;
            return Ok(());
        }
        let mut buf = self.books.pool.get(len);
        for p in parts {
            buf.extend_from_slice(p);
        }
        let f = OutFrag {
            hdr,
            buf,
            inplace: None,
            sent: written.unwrap_or(0),
            token: None,
        };
        if written.is_none() && self.queue_full(ep, f.cost()) {
            self.books.pool.put(f.buf);
            return Err(BtlError::NoResource);
        }
        self.enqueue(ep, f);
        // A connect refused at once makes the peer lost (reported through
        // progress); the frame is then not sent: say so.
        match self.peer(ep) {
            Err(e @ BtlError::PeerGone(..)) => Err(e),
            _ => Ok(()),
        }
    }

    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration, BtlError> {
        let (id, nonce) = self
            .regs
            .register(region, access.contains(Access::REMOTE_WRITE))?;
        let key = RemoteKey::new(&wire::encode_key(id, nonce, 0, region.len() as u64))
            .ok_or_else(|| BtlError::Invalid("tcp: key too long".into()))?;
        Ok(Registration {
            id: RegId(u64::from(id)),
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
        let (id, nonce, base, reg_len) = wire::decode_key(reg.key.as_bytes())
            .ok_or_else(|| BtlError::Invalid("tcp: not a tcp remote key".into()))?;
        let end = (offset as u64).checked_add(len as u64);
        if end.map_or(true, |e| e > reg_len) {
            return Err(BtlError::Invalid(format!(
                "tcp: {len} bytes at {offset} leave the {reg_len}-byte registration"
            )));
        }
        RemoteKey::new(&wire::encode_key(
            id,
            nonce,
            base.saturating_add(offset as u64),
            len as u64,
        ))
        .ok_or_else(|| BtlError::Invalid("tcp: key too long".into()))
    }

    fn deregister_mem(&mut self, id: RegId) {
        let Ok(i) = u32::try_from(id.0) else { return };
        self.regs.deregister(i);
    }

    fn put(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        self.peer(ep)?;
        let (id, nonce, base, reg_len) = wire::decode_key(remote.as_bytes())
            .ok_or_else(|| BtlError::Invalid("tcp: not a tcp remote key".into()))?;
        let end = (remote_offset as u64).checked_add(local.len() as u64);
        if end.map_or(true, |e| e > reg_len) {
            return Err(BtlError::Invalid(format!(
                "tcp: put of {} bytes at {remote_offset} leaves the {reg_len}-byte registration",
                local.len()
            )));
        }
        let len = PUT_HDR_LEN + local.len();
        if u32::try_from(len).is_err() {
            return Err(BtlError::TooLarge {
                what: "put",
                len,
                limit: u32::MAX as usize - PUT_HDR_LEN,
            });
        }
        let p = &mut self.peers[ep.0 as usize];
        let seq = p.put_seq;
        let h = PutHdr {
            id,
            nonce,
            offset: base.saturating_add(remote_offset as u64),
            seq,
        };
        let mut buf = self.books.pool.get(PUT_HDR_LEN);
        buf.extend_from_slice(&h.encode());
        let desc = Descriptor {
            ep,
            buf,
            inplace: Some(local),
        };
        let hdr = wire::frame_header_kind(len, 0, wire::KIND_PUT);
        // Done once written (Caps::PUT_ORDERED): the target acknowledges
        // nothing, and reports a refusal on its side.
        match self.send_frame(hdr, desc, Some(token)) {
            Ok(out) => {
                let p = &mut self.peers[ep.0 as usize];
                p.put_seq = p.put_seq.wrapping_add(1);
                if out == SendOutcome::Done {
                    // Written whole now: reported with the next progress, as
                    // every completion is.
                    self.books.completions.push_back((token, Ok(())));
                }
                Ok(())
            }
            Err((desc, e)) => {
                self.books.pool.put(desc.buf);
                Err(e)
            }
        }
    }

    fn get(
        &mut self,
        _ep: Endpoint,
        _local: MemRegion,
        _remote: &RemoteKey,
        _remote_offset: usize,
        _token: Token,
    ) -> Result<(), BtlError> {
        Err(BtlError::Unsupported("get"))
    }

    fn progress(&mut self, sink: &mut dyn BtlSink) -> usize {
        let mut n = 0;
        let mut accept = false;
        {
            let TcpBtl {
                poll,
                events,
                conns,
                ready,
                ..
            } = self;
            if poll.poll(events, Some(Duration::ZERO)).is_ok() {
                for ev in events.iter() {
                    if ev.token() == LISTENER {
                        accept = true;
                        continue;
                    }
                    let Some(c) = conns.get_mut(ev.token().0).and_then(Option::as_mut) else {
                        continue;
                    };
                    if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                        c.readable = true;
                    }
                    if ev.is_writable() || ev.is_write_closed() || ev.is_error() {
                        c.writable = true;
                    }
                    if !c.in_ready {
                        c.in_ready = true;
                        ready.push(ev.token().0);
                    }
                }
            }
        }
        if accept {
            self.accept_all();
        }
        // Service this round's list while connections re-queued meanwhile
        // go to the spare one (both keep their capacity).
        let mut ready = std::mem::take(&mut self.ready);
        std::mem::swap(&mut self.ready, &mut self.ready_spare);
        for &slot in &ready {
            if let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) {
                c.in_ready = false;
            }
        }
        for &slot in &ready {
            n += self.service(slot, sink);
        }
        ready.clear();
        self.ready_spare = ready;
        if self.pending_hellos > 0 || self.waiting > 0 {
            self.check_timers();
        }
        while let Some((ep, why)) = self.books.lost.pop_front() {
            sink.on_peer_lost(ep, &why);
            n += 1;
        }
        if let Some(why) = self.fault.take() {
            sink.on_local_fault(&why);
            n += 1;
        }
        while let Some((t, r)) = self.books.completions.pop_front() {
            sink.on_complete(t, r);
            n += 1;
        }
        self.bell
            .busy
            .store(self.needs_polling(), Ordering::Relaxed);
        n
    }

    fn wakeup(&self) -> Wakeup {
        if self.needs_polling() {
            Wakeup::Poll
        } else {
            Wakeup::Bell(self.bell.clone())
        }
    }

    fn has_work(&self) -> bool {
        !self.ready.is_empty()
            || !self.books.completions.is_empty()
            || !self.books.lost.is_empty()
            || self.books.queued_frags > 0
            || self.connecting > 0
            || self.pending_hellos > 0
            || self.waiting > 0
    }

    fn is_drained(&self) -> bool {
        // Queued fragments must reach the kernel; an idle listener or a
        // handshake in progress holds nothing of ours.
        self.books.queued_frags == 0
            && self.books.completions.is_empty()
            && self.books.lost.is_empty()
    }
}
