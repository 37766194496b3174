//! Connections: opening them lazily, the authenticated handshake, accepting,
//! simultaneous connects, timers, and a peer's loss (see the module doc of
//! [`super`] for the rules). Everything here is socket bookkeeping: frames
//! are [`super::framing`]'s.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::Interest;
use rustix::io::Errno;
use rustix::net::{self as rnet, sockopt, AddressFamily, RecvFlags, SendFlags, SocketFlags};

use super::btl::TcpBtl;
use super::config::TcpConfig;
use super::framing::{FrameReader, OutFrag};
use super::wire::{self, Handshake, HsKind, HS_LEN};
use crate::btl::{BtlError, BtlSink, Endpoint};

/// Wait before a declined or interrupted connect is tried again.
const RETRY_WAIT: Duration = Duration::from_secs(1);
/// Connect attempts before the peer is declared unreachable.
const MAX_CONNECT_TRIES: u32 = 5;
/// Connections accepted but not yet authenticated, at most: past it the
/// oldest is closed to make room (see `TcpBtl::accept_all`).
const MAX_PENDING_HELLOS: usize = 64;
/// The listener's token (connections use their slot index).
pub(super) const LISTENER: mio::Token = mio::Token(usize::MAX);

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PeerState {
    /// Known, no connection yet (bound late: on the first send).
    Idle,
    /// Our connection (slot) is connecting or awaiting its answer.
    Connecting(usize),
    /// Declined or interrupted: waiting for the peer's connection, or
    /// until the deadline to try again.
    Waiting(Instant),
    /// Connected through this slot.
    Connected(usize),
    /// Lost, for this reason.
    Gone(String),
    /// Deleted by `del_peer`.
    Removed,
}

#[derive(Debug)]
pub(super) struct Peer {
    pub(super) rank: u32,
    pub(super) target: SocketAddrV4,
    /// The peer's card entry we pair with.
    pub(super) entry: u8,
    pub(super) state: PeerState,
    pub(super) queue: VecDeque<OutFrag>,
    /// Sum of the queued fragments' costs.
    pub(super) queued: usize,
    pub(super) tries: u32,
    /// The next put's sequence number (in its header, for the logs).
    pub(super) put_seq: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Our connect is in progress.
    Connecting,
    /// Our HELLO is (being) sent; waiting for ACCEPT or DECLINE.
    AwaitAck,
    /// Accepted: waiting for the connector's HELLO.
    AwaitHello,
    /// Handshake done: fragments flow.
    Established,
}

#[derive(Debug)]
pub(super) struct Conn {
    pub(super) fd: OwnedFd,
    pub(super) phase: Phase,
    pub(super) readable: bool,
    pub(super) writable: bool,
    pub(super) in_ready: bool,
    /// The peer's rank (known from the start for our connections).
    pub(super) rank: Option<u32>,
    /// The endpoint it serves (None: accepted from a peer not added yet).
    pub(super) ep: Option<Endpoint>,
    hs_out: [u8; HS_LEN],
    pub(super) hs_out_off: usize,
    pub(super) hs_out_len: usize,
    hs_in: [u8; HS_LEN],
    hs_in_got: usize,
    deadline: Option<Instant>,
    /// Accepted connections: the order of acceptance (`TcpBtl::hello_order`).
    pub(super) accept_seq: u64,
    /// The receive side (its buffer allocated once established).
    pub(super) rx: FrameReader,
}

impl Conn {
    pub(super) fn new(fd: OwnedFd, phase: Phase) -> Conn {
        Conn {
            fd,
            phase,
            readable: false,
            writable: false,
            in_ready: false,
            rank: None,
            ep: None,
            hs_out: [0; HS_LEN],
            hs_out_off: 0,
            hs_out_len: 0,
            hs_in: [0; HS_LEN],
            hs_in_got: 0,
            deadline: None,
            accept_seq: 0,
            rx: FrameReader::default(),
        }
    }

    fn set_hs_out(&mut self, hs: &Handshake) {
        self.hs_out = hs.encode();
        self.hs_out_off = 0;
        self.hs_out_len = HS_LEN;
    }

    /// Writes the pending handshake bytes; `Ok(true)` when all are out.
    pub(super) fn flush_hs(&mut self) -> Result<bool, Errno> {
        while self.hs_out_off < self.hs_out_len {
            match rnet::send(
                &self.fd,
                &self.hs_out[self.hs_out_off..self.hs_out_len],
                SendFlags::NOSIGNAL,
            ) {
                Ok(n) => self.hs_out_off += n,
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => {
                    self.writable = false;
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Reads the rest of the peer's handshake message (exactly that: data
    /// after it stays in the socket).
    fn read_hs(&mut self) -> Result<Option<[u8; HS_LEN]>, String> {
        while self.hs_in_got < HS_LEN {
            if !self.readable {
                return Ok(None);
            }
            match rnet::recv(
                &self.fd,
                &mut self.hs_in[self.hs_in_got..],
                RecvFlags::empty(),
            ) {
                Ok((0, _)) => return Err("connection closed during the handshake".into()),
                Ok((n, _)) => self.hs_in_got += n,
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => {
                    self.readable = false;
                    return Ok(None);
                }
                Err(e) => return Err(format!("handshake read: {e}")),
            }
        }
        Ok(Some(self.hs_in))
    }
}

impl TcpBtl {
    pub(super) fn peer(&self, ep: Endpoint) -> Result<&Peer, BtlError> {
        let p = self
            .peers
            .get(ep.0 as usize)
            .ok_or_else(|| BtlError::Invalid(format!("unknown endpoint {ep:?}")))?;
        match &p.state {
            PeerState::Removed => Err(BtlError::Invalid(format!("endpoint {ep:?} was deleted"))),
            PeerState::Gone(why) => Err(BtlError::PeerGone(ep, why.clone())),
            _ => Ok(p),
        }
    }

    /// The peer is lost: report once, fail its queued fragments, close.
    pub(super) fn lose_peer(&mut self, ep: Endpoint, why: String) {
        self.lose(ep, why, false);
    }

    /// The peer cannot be reached for a reason of this process (out of
    /// descriptors or memory): lost as by [`Self::lose_peer`], but reported
    /// as [`BtlError::Io`], not `PeerGone`, because the peer is alive and
    /// will not learn of it (the PML treats that as fatal to the job).
    pub(super) fn lose_peer_local(&mut self, ep: Endpoint, why: String) {
        self.lose(ep, why, true);
    }

    fn lose(&mut self, ep: Endpoint, why: String, local: bool) {
        let Some(p) = self.peers.get_mut(ep.0 as usize) else {
            return;
        };
        let slot = match p.state {
            PeerState::Gone(_) | PeerState::Removed => return,
            PeerState::Connecting(s) | PeerState::Connected(s) => Some(s),
            PeerState::Waiting(_) => {
                self.waiting -= 1;
                None
            }
            PeerState::Idle => None,
        };
        tracing::debug!(rank = self.rank, peer = p.rank, "tcp: peer lost: {why}");
        p.state = PeerState::Gone(why.clone());
        let err = if local {
            BtlError::Io(why)
        } else {
            BtlError::PeerGone(ep, why)
        };
        self.books.fail_all(p, &err);
        self.books.lost.push_back((ep, err));
        if let Some(s) = slot {
            self.close_conn(s);
        }
    }

    fn add_conn(&mut self, conn: Conn) -> Result<usize, BtlError> {
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        self.poll
            .registry()
            .register(
                &mut SourceFd(&conn.fd.as_raw_fd()),
                mio::Token(slot),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| {
                self.free_slots.push(slot);
                BtlError::Io(format!("epoll register: {e}"))
            })?;
        match conn.phase {
            Phase::AwaitHello => self.pending_hellos += 1,
            Phase::Connecting | Phase::AwaitAck => self.connecting += 1,
            Phase::Established => {}
        }
        self.conns[slot] = Some(conn);
        Ok(slot)
    }

    /// Closes a connection (the peer's state is the caller's business).
    pub(super) fn close_conn(&mut self, slot: usize) {
        let Some(c) = self.conns.get_mut(slot).and_then(Option::take) else {
            return;
        };
        match c.phase {
            Phase::AwaitHello => self.pending_hellos -= 1,
            Phase::Connecting | Phase::AwaitAck => self.connecting -= 1,
            Phase::Established => {}
        }
        if c.ep.is_none() {
            if let Some(r) = c.rank {
                if self.parked.get(&r) == Some(&slot) {
                    self.parked.remove(&r);
                }
            }
        }
        let _ = self
            .poll
            .registry()
            .deregister(&mut SourceFd(&c.fd.as_raw_fd()));
        self.ready.retain(|&s| s != slot);
        self.free_slots.push(slot);
        drop(c);
    }

    fn set_phase(&mut self, slot: usize, phase: Phase) {
        let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        match c.phase {
            Phase::AwaitHello => self.pending_hellos -= 1,
            Phase::Connecting | Phase::AwaitAck => self.connecting -= 1,
            Phase::Established => {}
        }
        match phase {
            Phase::AwaitHello => self.pending_hellos += 1,
            Phase::Connecting | Phase::AwaitAck => self.connecting += 1,
            Phase::Established => c.rx = FrameReader::new(self.frame_max),
        }
        c.phase = phase;
    }

    pub(super) fn mark_ready(&mut self, slot: usize) {
        if let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) {
            if !c.in_ready {
                c.in_ready = true;
                self.ready.push(slot);
            }
        }
    }

    /// Opens our connection to `ep` (its state must allow it).
    pub(super) fn start_connect(&mut self, ep: Endpoint) {
        let p = &self.peers[ep.0 as usize];
        let (target, rank, entry) = (p.target, p.rank, p.entry);
        let fd = match connect_socket(self.iface.addr, target, self.sndbuf, self.rcvbuf) {
            Ok(fd) => fd,
            Err(e) => {
                let (hint, local) = match e.raw_os_error() {
                    23 | 24 => (
                        format!(": {}", oxmpi_runtime::limits::fd_limit_hint()),
                        true,
                    ),
                    12 | 105 => (String::new(), true),
                    _ => (String::new(), false),
                };
                let why = format!("connecting to rank {rank} at {target}: {e}{hint}");
                if local {
                    self.lose_peer_local(ep, why);
                } else {
                    self.lose_peer(ep, why);
                }
                return;
            }
        };
        let mut c = Conn::new(fd, Phase::Connecting);
        c.rank = Some(rank);
        c.ep = Some(ep);
        c.set_hs_out(&Handshake {
            kind: HsKind::Hello,
            secret: self.secret,
            from_rank: self.rank,
            to_rank: rank,
            from_entry: self.my_entry,
            to_entry: entry,
        });
        match self.add_conn(c) {
            Ok(slot) => {
                self.books.stats.connects += 1;
                let p = &mut self.peers[ep.0 as usize];
                if matches!(p.state, PeerState::Waiting(_)) {
                    self.waiting -= 1;
                }
                p.state = PeerState::Connecting(slot);
                p.tries += 1;
            }
            Err(e) => self.lose_peer(ep, e.to_string()),
        }
    }

    /// Our connection failed before its handshake completed.
    fn outgoing_failed(&mut self, slot: usize, why: String, fatal: bool) {
        let ep = self.conns[slot].as_ref().and_then(|c| c.ep);
        self.close_conn(slot);
        let Some(ep) = ep else { return };
        let p = &mut self.peers[ep.0 as usize];
        if p.state != PeerState::Connecting(slot) {
            return;
        }
        if fatal || p.tries >= MAX_CONNECT_TRIES {
            let why = format!("cannot connect to rank {} at {}: {why}", p.rank, p.target);
            self.lose_peer(ep, why);
        } else {
            tracing::debug!(
                rank = self.rank,
                peer = p.rank,
                "tcp: connect interrupted ({why}); retrying"
            );
            p.state = PeerState::Waiting(Instant::now() + RETRY_WAIT);
            self.waiting += 1;
        }
    }

    pub(super) fn accept_all(&mut self) {
        loop {
            let fd = match rnet::accept_with(
                &self.listener,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            ) {
                Ok(fd) => fd,
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => return,
                Err(Errno::CONNABORTED) => continue,
                Err(e @ (Errno::MFILE | Errno::NFILE)) => {
                    // Said once: the listener stays readable, and every
                    // progress call would say it again. A peer whose
                    // connection is not accepted waits for its HELLO to
                    // time out: a fault of this process, reported.
                    if !self.said_out_of_fds {
                        self.said_out_of_fds = true;
                        let why = format!(
                            "tcp: accept on {}: {e}: {}",
                            self.listen_addr,
                            oxmpi_runtime::limits::fd_limit_hint()
                        );
                        tracing::error!("{why}");
                        self.fault = Some(BtlError::Io(why));
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!("tcp: accept on {}: {e}", self.listen_addr);
                    return;
                }
            };
            // Room for one more: strangers that connect and say nothing
            // must not keep the job's own peers out, so the oldest silent
            // connection goes (a peer's HELLO comes with its connection).
            while self.pending_hellos >= MAX_PENDING_HELLOS && self.evict_oldest_hello() {}
            if self.pending_hellos >= MAX_PENDING_HELLOS {
                self.books.stats.rejected += 1;
                continue;
            }
            let _ = sockopt::set_tcp_nodelay(&fd, true);
            let mut c = Conn::new(fd, Phase::AwaitHello);
            c.deadline = Some(Instant::now() + self.handshake_timeout);
            c.readable = true;
            c.writable = true;
            self.accept_seq += 1;
            c.accept_seq = self.accept_seq;
            let Ok(slot) = self.add_conn(c) else {
                continue;
            };
            if self.hello_order.len() >= 4 * MAX_PENDING_HELLOS {
                let conns = &self.conns;
                self.hello_order.retain(|&(s, seq)| {
                    conns[s]
                        .as_ref()
                        .is_some_and(|c| c.phase == Phase::AwaitHello && c.accept_seq == seq)
                });
            }
            self.hello_order.push_back((slot, self.accept_seq));
            // Its HELLO is usually here already: taken now, a peer is
            // authenticated before later strangers could push it out.
            let first = match self.conns[slot].as_mut() {
                Some(c) => c.read_hs(),
                None => continue,
            };
            match first {
                Ok(Some(raw)) => self.on_hello(slot, raw),
                Ok(None) => {}
                Err(e) => {
                    self.reject(slot, &e);
                    continue;
                }
            }
            self.mark_ready(slot);
        }
    }

    /// Closes the oldest accepted connection still awaiting its HELLO;
    /// `false` if there is none.
    fn evict_oldest_hello(&mut self) -> bool {
        while let Some((slot, seq)) = self.hello_order.pop_front() {
            let waiting = self.conns[slot]
                .as_ref()
                .is_some_and(|c| c.phase == Phase::AwaitHello && c.accept_seq == seq);
            if waiting {
                self.reject(slot, "no HELLO yet, and a newer connection needs its place");
                return true;
            }
        }
        false
    }

    fn reject(&mut self, slot: usize, why: &str) {
        tracing::debug!(
            rank = self.rank,
            "tcp: closing an unauthenticated connection: {why}"
        );
        self.books.stats.rejected += 1;
        self.close_conn(slot);
    }

    /// A complete HELLO on accepted connection `slot`.
    fn on_hello(&mut self, slot: usize, raw: [u8; HS_LEN]) {
        let hs = match Handshake::decode(&raw) {
            Ok(h) => h,
            Err(e) => return self.reject(slot, &e),
        };
        if hs.kind != HsKind::Hello {
            return self.reject(slot, "not a HELLO");
        }
        if !wire::secret_eq(&hs.secret, &self.secret) {
            return self.reject(slot, "wrong secret");
        }
        if hs.to_rank != self.rank || hs.from_rank == self.rank {
            return self.reject(slot, "HELLO for another rank");
        }
        let r = hs.from_rank;
        let ep = self.by_rank.get(&r).copied();
        let accept = match ep.map(|ep| &self.peers[ep.0 as usize].state) {
            Some(PeerState::Connected(_)) | Some(PeerState::Gone(_)) => false,
            Some(PeerState::Connecting(_)) => r < self.rank,
            _ => !self.parked.contains_key(&r),
        };
        let reply = Handshake {
            kind: if accept {
                HsKind::Accept
            } else {
                HsKind::Decline
            },
            secret: self.secret,
            from_rank: self.rank,
            to_rank: r,
            from_entry: self.my_entry,
            to_entry: hs.from_entry,
        };
        let Some(c) = self.conns[slot].as_mut() else {
            return;
        };
        c.set_hs_out(&reply);
        c.rank = Some(r);
        c.deadline = None;
        if !accept {
            tracing::debug!(
                rank = self.rank,
                peer = r,
                "tcp: declining a second connection"
            );
            self.books.stats.declined += 1;
            let _ = c.flush_hs();
            self.close_conn(slot);
            return;
        }
        self.books.stats.accepted += 1;
        self.set_phase(slot, Phase::Established);
        match ep {
            Some(ep) => {
                let p = &mut self.peers[ep.0 as usize];
                let old = match p.state {
                    PeerState::Connecting(s) => Some(s),
                    PeerState::Waiting(_) => {
                        self.waiting -= 1;
                        None
                    }
                    _ => None,
                };
                p.state = PeerState::Connected(slot);
                p.tries = 0;
                if let Some(c) = self.conns[slot].as_mut() {
                    c.ep = Some(ep);
                }
                if let Some(old) = old {
                    self.close_conn(old);
                }
            }
            None => {
                self.parked.insert(r, slot);
            }
        }
    }

    /// A complete answer on our connection `slot`.
    fn on_answer(&mut self, slot: usize, raw: [u8; HS_LEN]) {
        let Some(c) = self.conns[slot].as_ref() else {
            return;
        };
        let (Some(ep), Some(r)) = (c.ep, c.rank) else {
            return self.close_conn(slot);
        };
        let hs = match Handshake::decode(&raw) {
            Ok(h) => h,
            Err(e) => return self.outgoing_failed(slot, e, true),
        };
        if !wire::secret_eq(&hs.secret, &self.secret)
            || hs.from_rank != r
            || hs.to_rank != self.rank
        {
            return self.outgoing_failed(
                slot,
                "the listener answered without this job's secret or for another rank".into(),
                true,
            );
        }
        match hs.kind {
            HsKind::Accept => {
                self.set_phase(slot, Phase::Established);
                let p = &mut self.peers[ep.0 as usize];
                p.state = PeerState::Connected(slot);
                p.tries = 0;
            }
            HsKind::Decline => {
                // The peer keeps its own connection to us: wait for it.
                self.close_conn(slot);
                let p = &mut self.peers[ep.0 as usize];
                if p.tries >= MAX_CONNECT_TRIES {
                    let why = format!("rank {} declined {} connections", p.rank, p.tries);
                    return self.lose_peer(ep, why);
                }
                p.state = PeerState::Waiting(Instant::now() + RETRY_WAIT);
                self.waiting += 1;
            }
            HsKind::Hello => self.outgoing_failed(slot, "answered HELLO with HELLO".into(), true),
        }
    }

    /// Does what connection `slot` can do now; returns fragments delivered.
    pub(super) fn service(&mut self, slot: usize, sink: &mut dyn BtlSink) -> usize {
        for _ in 0..4 {
            let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
                return 0;
            };
            match c.phase {
                Phase::Connecting => {
                    if !c.writable {
                        return 0;
                    }
                    match sockopt::socket_error(&c.fd) {
                        Ok(Ok(())) => {
                            self.set_phase(slot, Phase::AwaitAck);
                        }
                        Ok(Err(e)) | Err(e) => {
                            self.outgoing_failed(slot, e.to_string(), true);
                            return 0;
                        }
                    }
                }
                Phase::AwaitAck => {
                    if c.writable {
                        if let Err(e) = c.flush_hs() {
                            self.outgoing_failed(slot, format!("handshake write: {e}"), false);
                            return 0;
                        }
                    }
                    match c.read_hs() {
                        Ok(Some(raw)) => self.on_answer(slot, raw),
                        Ok(None) => return 0,
                        Err(e) => {
                            self.outgoing_failed(slot, e, false);
                            return 0;
                        }
                    }
                }
                Phase::AwaitHello => match c.read_hs() {
                    Ok(Some(raw)) => self.on_hello(slot, raw),
                    Ok(None) => return 0,
                    Err(e) => {
                        self.reject(slot, &e);
                        return 0;
                    }
                },
                Phase::Established => return self.service_established(slot, sink),
            }
        }
        0
    }

    /// An established connection broke.
    pub(super) fn conn_failed(&mut self, slot: usize, why: String) {
        match self.conns.get(slot).and_then(Option::as_ref).map(|c| c.ep) {
            Some(Some(ep)) => {
                let r = self.peers[ep.0 as usize].rank;
                self.lose_peer(ep, format!("connection to rank {r}: {why}"));
            }
            Some(None) => self.close_conn(slot),
            None => {}
        }
    }

    pub(super) fn check_timers(&mut self) {
        let now = Instant::now();
        if self.pending_hellos > 0 {
            for slot in 0..self.conns.len() {
                let late = self.conns[slot].as_ref().is_some_and(|c| {
                    c.phase == Phase::AwaitHello && c.deadline.is_some_and(|d| d <= now)
                });
                if late {
                    self.reject(slot, "no valid HELLO within the handshake timeout");
                }
            }
        }
        if self.waiting > 0 {
            for i in 0..self.peers.len() {
                if let PeerState::Waiting(d) = self.peers[i].state {
                    if d <= now {
                        self.start_connect(Endpoint(i as u32));
                    }
                }
            }
        }
    }
}

/// A listening socket on `addr` with the configured buffers, on the first
/// free port of the configured range (or an ephemeral one).
pub(super) fn listen_on(addr: Ipv4Addr, cfg: &TcpConfig) -> Result<(OwnedFd, u16), BtlError> {
    let io = |what: &str, e: Errno| BtlError::Io(format!("tcp listener on {addr}: {what}: {e}"));
    let ports: Vec<u16> = if cfg.port_min == 0 {
        vec![0]
    } else {
        let last = u32::from(cfg.port_min) + u32::from(cfg.port_range.max(1)) - 1;
        (cfg.port_min..=last.min(65535) as u16).collect()
    };
    for port in ports {
        let fd = rnet::socket_with(
            AddressFamily::INET,
            rnet::SocketType::STREAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| io("socket", e))?;
        sockopt::set_socket_reuseaddr(&fd, true).map_err(|e| io("SO_REUSEADDR", e))?;
        set_buffers(&fd, cfg.sndbuf, cfg.rcvbuf).map_err(|e| io("socket buffers", e))?;
        match rnet::bind(&fd, &SocketAddrV4::new(addr, port)) {
            Ok(()) => {}
            Err(Errno::ADDRINUSE) if port != 0 => continue,
            Err(e) => return Err(io("bind", e)),
        }
        rnet::listen(&fd, 1024).map_err(|e| io("listen", e))?;
        let local = rnet::getsockname(&fd).map_err(|e| io("getsockname", e))?;
        let local = SocketAddrV4::try_from(local)
            .map_err(|_| BtlError::Io(format!("tcp listener on {addr}: not an IPv4 socket")))?;
        return Ok((fd, local.port()));
    }
    Err(BtlError::Io(format!(
        "tcp listener on {addr}: no free port in {}..{} (btl_tcp_port_min, btl_tcp_port_range)",
        cfg.port_min,
        u32::from(cfg.port_min) + u32::from(cfg.port_range)
    )))
}

fn set_buffers(fd: &OwnedFd, sndbuf: usize, rcvbuf: usize) -> Result<(), Errno> {
    if sndbuf > 0 {
        sockopt::set_socket_send_buffer_size(fd, sndbuf)?;
    }
    if rcvbuf > 0 {
        sockopt::set_socket_recv_buffer_size(fd, rcvbuf)?;
    }
    Ok(())
}

/// A non-blocking socket from `local` connecting to `target`.
fn connect_socket(
    local: Ipv4Addr,
    target: SocketAddrV4,
    sndbuf: usize,
    rcvbuf: usize,
) -> Result<OwnedFd, Errno> {
    let fd = rnet::socket_with(
        AddressFamily::INET,
        rnet::SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    sockopt::set_tcp_nodelay(&fd, true)?;
    set_buffers(&fd, sndbuf, rcvbuf)?;
    rnet::bind(&fd, &SocketAddrV4::new(local, 0))?;
    match rnet::connect(&fd, &target) {
        Ok(()) | Err(Errno::INPROGRESS) | Err(Errno::INTR) => Ok(fd),
        Err(e) => Err(e),
    }
}
