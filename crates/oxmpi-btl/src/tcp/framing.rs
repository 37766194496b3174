//! Framing: fragments to frames on the way out (gathered writes, padding,
//! bounded queues) and frames to fragments on the way in ([`FrameReader`],
//! a state machine over a byte stream, with puts landing in place). The
//! frame format is [`super::wire`]'s.
//!
//! The reader does no I/O of its own: it reads from a [`ByteSource`] (the
//! connection's socket, or bytes a test hands it in any chunks) into its
//! buffer, or straight into a put's target, and hands complete fragments
//! to a [`BtlSink`] in place.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::os::fd::OwnedFd;

use rustix::io::Errno;
use rustix::net::{self as rnet, RecvFlags, SendFlags};

use super::btl::{TcpBtl, TcpStats};
use super::config::MAX_QUEUED_FRAGS;
use super::conn::{Peer, PeerState, Phase};
use super::landing::{Landing, PutTargets};
use super::wire::{self, PutHdr, FRAME_HDR_LEN, PUT_HDR_LEN};
use crate::btl::{AmTag, BtlError, BtlSink, Descriptor, Endpoint, SendOutcome, Token};
use crate::mem::MemRegion;

/// Bytes read from one connection per progress call before moving on.
const READ_BUDGET: usize = 4 << 20;
/// Bytes asked of one read into the connection's buffer unless a partial
/// frame needs more. A put's header arrives with data after it: whatever
/// the read takes past the header is copied into place, whatever it leaves
/// lands there directly, so reads are kept short enough that a large put
/// mostly lands directly, and long enough that a stream of small frames
/// takes few system calls.
const READ_CHUNK: usize = 64 << 10;
/// Slices gathered into one sendmsg.
const MAX_IOV: usize = 64;
/// In-place data of at least this many bytes is padded on the wire to its
/// own alignment (see the `wire` module doc): below it the copies are
/// short and padding is not worth its bytes.
const PAD_MIN: usize = 4096;
/// What padding is made of.
static PAD: [u8; 64] = [0; 64];

/// The padding of a frame whose payload is `before` bytes of header then
/// `data` (see the `wire` module doc): `(lead, trail)` places the data at
/// its own address modulo 64 (counting from a frame that starts on a
/// multiple of 64 in the stream) and ends the frame on a multiple of 64.
fn pads(before: usize, data: &MemRegion) -> (usize, usize) {
    if data.len() < PAD_MIN {
        return (0, 0);
    }
    let lead = data.addr().wrapping_sub(FRAME_HDR_LEN + before) % 64;
    let end = FRAME_HDR_LEN + lead + before + data.len();
    (lead, (64 - end % 64) % 64)
}

/// The offset in `rbuf` of its first byte aligned to 64: where a frame
/// that starts on a multiple of 64 in the stream is read to.
fn home_of(rbuf: &[u8]) -> usize {
    ((64 - rbuf.as_ptr() as usize % 64) % 64).min(rbuf.len())
}
/// Capacity of small pooled buffers.
pub(super) const SMALL_BUF: usize = 4096;
/// Pooled buffers kept, per class.
const POOL_SMALL: usize = 256;
const POOL_LARGE: usize = 32;

/// A fragment waiting in a peer's send queue.
#[derive(Debug)]
pub(super) struct OutFrag {
    pub(super) hdr: [u8; FRAME_HDR_LEN],
    pub(super) buf: Vec<u8>,
    pub(super) inplace: Option<MemRegion>,
    /// Bytes of the frame already written.
    pub(super) sent: usize,
    pub(super) token: Option<Token>,
}

impl OutFrag {
    /// Padding bytes before and after the payload (from the header).
    fn pad_lens(&self) -> (usize, usize) {
        (usize::from(self.hdr[6]), usize::from(self.hdr[7]))
    }

    pub(super) fn total(&self) -> usize {
        let (lead, trail) = self.pad_lens();
        FRAME_HDR_LEN + lead + self.buf.len() + self.inplace.map_or(0, |r| r.len()) + trail
    }

    /// What it holds of memory, for the queue bound.
    pub(super) fn cost(&self) -> usize {
        FRAME_HDR_LEN + self.buf.capacity() + self.inplace.map_or(0, |r| r.len())
    }

    /// Appends the unsent parts to `iov`; returns how many slices it used
    /// (at most 5).
    fn slices<'a>(&'a self, iov: &mut [IoSlice<'a>]) -> usize {
        let (lead, trail) = self.pad_lens();
        let parts: [&'a [u8]; 5] = [
            &self.hdr,
            &PAD[..lead],
            &self.buf,
            self.inplace.as_ref().map_or(&[][..], |r| r.read()),
            &PAD[..trail],
        ];
        let mut skip = self.sent;
        let mut k = 0;
        for p in parts {
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            iov[k] = IoSlice::new(&p[skip..]);
            skip = 0;
            k += 1;
        }
        k
    }
}

/// A bounded free list of buffers in two size classes.
#[derive(Debug)]
pub(super) struct BufPool {
    pub(super) small: Vec<Vec<u8>>,
    pub(super) large: Vec<Vec<u8>>,
    pub(super) large_cap: usize,
}

impl BufPool {
    pub(super) fn get(&mut self, len: usize) -> Vec<u8> {
        let mut b = if len <= SMALL_BUF {
            self.small
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(SMALL_BUF))
        } else if len <= self.large_cap {
            self.large
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(self.large_cap))
        } else {
            Vec::with_capacity(len)
        };
        b.clear();
        b
    }

    pub(super) fn put(&mut self, b: Vec<u8>) {
        let cap = b.capacity();
        if (SMALL_BUF..2 * SMALL_BUF).contains(&cap) && self.small.len() < POOL_SMALL {
            self.small.push(b);
        } else if (self.large_cap..2 * self.large_cap).contains(&cap)
            && self.large.len() < POOL_LARGE
        {
            self.large.push(b);
        }
    }
}

/// Completions, buffers and counters shared by the module's paths.
#[derive(Debug)]
pub(super) struct Books {
    pub(super) pool: BufPool,
    pub(super) completions: VecDeque<(Token, Result<(), BtlError>)>,
    pub(super) lost: VecDeque<(Endpoint, BtlError)>,
    pub(super) stats: TcpStats,
    /// Fragments queued to all peers.
    pub(super) queued_frags: usize,
}

impl Books {
    /// Completes everything `p` owes with `err`: its queued fragments and
    /// puts (the peer is lost or deleted).
    pub(super) fn fail_all(&mut self, p: &mut Peer, err: &BtlError) {
        for f in p.queue.drain(..) {
            self.queued_frags -= 1;
            if let Some(t) = f.token {
                self.completions.push_back((t, Err(err.clone())));
            }
            self.pool.put(f.buf);
        }
        p.queued = 0;
    }

    /// A fragment fully written: recycle its buffer, complete its token.
    pub(super) fn sent(&mut self, f: OutFrag) {
        self.stats.frags_sent += 1;
        if let Some(t) = f.token {
            self.completions.push_back((t, Ok(())));
        }
        self.pool.put(f.buf);
    }
}

impl TcpBtl {
    pub(super) fn service_established(&mut self, slot: usize, sink: &mut dyn BtlSink) -> usize {
        if let Err(why) = self.flush(slot) {
            self.conn_failed(slot, why);
            return 0;
        }
        let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return 0;
        };
        let Some(ep) = c.ep else {
            return 0; // parked: leave the data in the kernel until add_peer
        };
        if !c.readable {
            return 0;
        }
        let mut delivered = 0;
        let end = c.rx.read(
            &mut Socket(&c.fd),
            &mut c.readable,
            ep,
            sink,
            &self.regs,
            &mut self.books.stats,
            &mut delivered,
        );
        match end {
            ReadEnd::Drained => {}
            ReadEnd::Budget => {
                c.in_ready = true;
                self.ready.push(slot);
            }
            ReadEnd::Failed(ref why) => {
                let why = why.clone();
                self.conn_failed(slot, why);
            }
        }
        delivered
    }

    /// Writes pending handshake bytes, then the peer's queue, until done or
    /// the socket is full.
    fn flush(&mut self, slot: usize) -> Result<(), String> {
        let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return Ok(());
        };
        if !c.writable {
            return Ok(());
        }
        if !c.flush_hs().map_err(|e| format!("write: {e}"))? {
            return Ok(());
        }
        if c.phase != Phase::Established {
            return Ok(());
        }
        let Some(ep) = c.ep else { return Ok(()) };
        let p = &mut self.peers[ep.0 as usize];
        match write_queue(&c.fd, p, &mut self.books) {
            Ok(true) => Ok(()),
            Ok(false) => {
                c.writable = false;
                Ok(())
            }
            Err(e) => Err(format!("write: {e}")),
        }
    }

    /// Queues `f` for `ep`, opening the connection if it is not there yet.
    /// A frame for a lost or deleted peer is dropped (its token, if any,
    /// completes with the loss): nothing would ever write or drain it.
    pub(super) fn enqueue(&mut self, ep: Endpoint, f: OutFrag) {
        let p = &mut self.peers[ep.0 as usize];
        if let PeerState::Gone(_) | PeerState::Removed = p.state {
            let why = match &p.state {
                PeerState::Gone(w) => w.clone(),
                _ => "endpoint deleted".into(),
            };
            if let Some(t) = f.token {
                self.books
                    .completions
                    .push_back((t, Err(BtlError::PeerGone(ep, why))));
            }
            self.books.pool.put(f.buf);
            return;
        }
        p.queued += f.cost();
        p.queue.push_back(f);
        self.books.queued_frags += 1;
        match p.state {
            PeerState::Idle => self.start_connect(ep),
            PeerState::Connected(slot) => {
                // Written now if the socket has room (no event would come
                // for a socket that never filled up).
                let writable = self.conns[slot].as_ref().is_some_and(|c| c.writable);
                if writable {
                    if let Err(why) = self.flush(slot) {
                        self.conn_failed(slot, why);
                    }
                }
            }
            _ => {}
        }
    }

    pub(super) fn queue_full(&self, ep: Endpoint, cost: usize) -> bool {
        let p = &self.peers[ep.0 as usize];
        !p.queue.is_empty()
            && (p.queued + cost > self.max_queued || p.queue.len() >= MAX_QUEUED_FRAGS)
    }

    /// Writes (or queues) one frame: `hdr`, then the descriptor's bytes
    /// and its in-place data. `token` completes when it is all written
    /// (`None`: nothing to report). A full queue refuses it with
    /// `NoResource`.
    pub(super) fn send_frame(
        &mut self,
        hdr: [u8; FRAME_HDR_LEN],
        desc: Descriptor,
        token: Option<Token>,
    ) -> Result<SendOutcome, (Descriptor, BtlError)> {
        let ep = desc.ep;
        let len = desc.len();
        let (lead, trail) = match (&desc.inplace, hdr[5]) {
            (Some(r), wire::KIND_DATA | wire::KIND_PUT) => pads(desc.buf.len(), r),
            _ => (0, 0),
        };
        let hdr = wire::with_pads(hdr, lead, trail);
        let inplace = desc.inplace.as_ref().map_or(&[][..], |r| r.read());
        let parts = [&hdr[..], &PAD[..lead], &desc.buf, inplace, &PAD[..trail]];
        let written = match self.write_now(ep, &parts) {
            Ok(w) => w,
            Err(why) => {
                let r = self.peers[ep.0 as usize].rank;
                self.lose_peer(ep, format!("connection to rank {r}: {why}"));
                let e = self.peer(ep).err().unwrap_or(BtlError::NoResource);
                return Err((desc, e));
            }
        };
        let frame_len = FRAME_HDR_LEN + lead + len + trail;
        if written == Some(frame_len) {
            self.books.stats.frags_sent += 1;
            self.books.pool.put(desc.buf);
            return Ok(SendOutcome::Done);
        }
        let f = OutFrag {
            hdr,
            buf: desc.buf,
            inplace: desc.inplace,
            sent: written.unwrap_or(0),
            token,
        };
        if written.is_none() && self.queue_full(ep, f.cost()) {
            let desc = Descriptor {
                ep,
                buf: f.buf,
                inplace: f.inplace,
            };
            return Err((desc, BtlError::NoResource));
        }
        self.enqueue(ep, f);
        if let Err(e) = self.peer(ep) {
            // The connect failed at once; the token completes with the error
            // through progress, like any queued fragment of a lost peer.
            tracing::debug!("tcp: send to a peer lost while connecting: {e}");
        }
        Ok(SendOutcome::Pending)
    }

    /// Writes a whole frame at once if `ep` is connected with nothing
    /// queued: `Ok(Some(n))` with the bytes written, `Ok(None)` if not
    /// possible now.
    pub(super) fn write_now(
        &mut self,
        ep: Endpoint,
        parts: &[&[u8]],
    ) -> Result<Option<usize>, String> {
        let p = &self.peers[ep.0 as usize];
        let PeerState::Connected(slot) = p.state else {
            return Ok(None);
        };
        if !p.queue.is_empty() {
            return Ok(None);
        }
        let Some(c) = self.conns[slot].as_mut() else {
            return Ok(None);
        };
        if c.hs_out_off < c.hs_out_len {
            return Ok(None);
        }
        let mut iov = [IoSlice::new(&[]); 12];
        let mut k = 0;
        for part in parts {
            if !part.is_empty() {
                iov[k] = IoSlice::new(part);
                k += 1;
            }
        }
        loop {
            match rnet::sendmsg(
                &c.fd,
                &iov[..k],
                &mut rnet::SendAncillaryBuffer::default(),
                SendFlags::NOSIGNAL,
            ) {
                Ok(n) => {
                    self.books.stats.bytes_sent += n as u64;
                    return Ok(Some(n));
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => {
                    c.writable = false;
                    return Ok(None);
                }
                Err(e) => return Err(format!("write: {e}")),
            }
        }
    }
}

/// Gathers the queue into `sendmsg` calls until it is empty (`Ok(true)`)
/// or the socket is full (`Ok(false)`).
fn write_queue(fd: &OwnedFd, p: &mut Peer, books: &mut Books) -> Result<bool, Errno> {
    loop {
        if p.queue.is_empty() {
            return Ok(true);
        }
        let r = {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let mut k = 0;
            for f in p.queue.iter() {
                if k + 5 > MAX_IOV {
                    break;
                }
                k += f.slices(&mut iov[k..]);
            }
            rnet::sendmsg(
                fd,
                &iov[..k],
                &mut rnet::SendAncillaryBuffer::default(),
                SendFlags::NOSIGNAL,
            )
        };
        match r {
            Ok(mut n) => {
                books.stats.bytes_sent += n as u64;
                while n > 0 {
                    let f = p
                        .queue
                        .front_mut()
                        .expect("written bytes belong to queued frames");
                    let rest = f.total() - f.sent;
                    if n >= rest {
                        n -= rest;
                        let f = p.queue.pop_front().expect("front exists");
                        p.queued -= f.cost();
                        books.queued_frags -= 1;
                        books.sent(f);
                    } else {
                        f.sent += n;
                        n = 0;
                    }
                }
                // Zero-length frames never exist (a header is 8 bytes), so
                // a front frame with everything sent was popped above.
            }
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
}

/// Where a [`FrameReader`] reads from: as `recv(2)` on a non-blocking
/// socket.
pub trait ByteSource {
    /// Reads into `buf`: the bytes read (0: the stream ended),
    /// `Errno::AGAIN` when there is nothing to read now, `Errno::INTR` to
    /// be asked again, any other error to stop.
    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Errno>;
}

/// A connection's socket.
pub(super) struct Socket<'a>(pub(super) &'a OwnedFd);

impl ByteSource for Socket<'_> {
    #[inline]
    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Errno> {
        rnet::recv(self.0, buf, RecvFlags::empty()).map(|(n, _)| n)
    }
}

/// What reading a stream ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadEnd {
    /// Nothing more to read now.
    Drained,
    /// The budget ran out with data left.
    Budget,
    /// The stream is broken (EOF, error, malformed frame).
    Failed(String),
}

/// What one `recv` on an established connection came to.
enum Recv {
    /// Bytes arrived.
    Bytes(usize),
    /// Interrupted: try again.
    Again,
    /// Stop reading: drained (the socket is marked not readable), or
    /// failed (EOF or an error).
    End(ReadEnd),
}

fn recv_outcome(r: Result<usize, Errno>, readable: &mut bool) -> Recv {
    match r {
        Ok(0) => Recv::End(ReadEnd::Failed("closed by the peer (EOF)".into())),
        Ok(n) => Recv::Bytes(n),
        Err(Errno::INTR) => Recv::Again,
        Err(Errno::AGAIN) => {
            *readable = false;
            Recv::End(ReadEnd::Drained)
        }
        Err(e) => Recv::End(ReadEnd::Failed(format!("read: {e}"))),
    }
}

/// The receive side of a connection: a buffer of the stream's bytes, the
/// frame being read and a put landing.
#[derive(Debug, Default)]
pub struct FrameReader {
    /// The largest fragment accepted (data frames; puts land in place).
    frame_max: usize,
    rbuf: Vec<u8>,
    /// Where in `rbuf` a frame starting on a multiple of 64 in the stream
    /// goes (its first 64-byte aligned byte).
    home: usize,
    rstart: usize,
    rend: usize,
    /// Bytes the partial frame at `rstart` still needs (0: none parsed).
    want: usize,
    /// Padding bytes still to skip (after a put's data).
    discard: usize,
    /// A put whose data is being received straight into its target.
    landing: Option<Landing>,
}

impl FrameReader {
    /// A reader of frames of up to `frame_max` payload bytes (data frames;
    /// puts land in their target), with a buffer of about four of them.
    pub fn new(frame_max: usize) -> FrameReader {
        let want = (4 * (frame_max + FRAME_HDR_LEN)).clamp(256 << 10, 4 << 20);
        // 64 bytes more, so that the room from `home` on is as asked.
        let rbuf = vec![0; want.max(2 * (frame_max + FRAME_HDR_LEN)) + 64];
        let home = home_of(&rbuf);
        FrameReader {
            frame_max,
            rbuf,
            home,
            rstart: home,
            rend: home,
            ..FrameReader::default()
        }
    }

    /// Reads from `src` and delivers fragments from peer `ep` to `sink`
    /// until the source is empty or the budget is spent; counts them in
    /// `stats` and `delivered`. Put data is received straight into its
    /// registered target in `targets` (what arrived with the header is
    /// copied; the rest lands with no copy); a refused put is reported to
    /// `sink` once its data was read and dropped. `readable` says the source
    /// may have bytes: a read that finds none, or a short read, clears it.
    #[allow(clippy::too_many_arguments)]
    pub fn read<S: ByteSource>(
        &mut self,
        src: &mut S,
        readable: &mut bool,
        ep: Endpoint,
        sink: &mut dyn BtlSink,
        targets: &PutTargets,
        stats: &mut TcpStats,
        delivered: &mut usize,
    ) -> ReadEnd {
        let frame_max = self.frame_max;
        let mut budget = READ_BUDGET;
        loop {
            if let Some(l) = self.landing.as_mut() {
                // Only puts look at the registrations: the lock is never taken
                // for ordinary fragments.
                if !targets.is_live(l.reg, l.nonce) {
                    l.target = None;
                }
                let want = l.total - l.got;
                let r = match l.target.and_then(|t| t.slice(l.got, want)) {
                    Some(t) => t.with_bytes_mut(|b| src.recv(b)),
                    None => {
                        // Refused: read into our buffer and drop.
                        if self.rbuf.is_empty() {
                            self.rbuf.resize(2 * (frame_max + FRAME_HDR_LEN), 0);
                            self.home = home_of(&self.rbuf);
                        }
                        let k = want.min(self.rbuf.len());
                        src.recv(&mut self.rbuf[..k])
                    }
                };
                let n = match recv_outcome(r, readable) {
                    Recv::Bytes(n) => n,
                    Recv::Again => continue,
                    Recv::End(e) => return e,
                };
                stats.bytes_received += n as u64;
                l.got += n;
                if l.got == l.total {
                    if l.target.is_none() {
                        sink.on_put_refused(ep);
                    }
                    self.discard = l.trail;
                    self.landing = None;
                    self.rewind();
                    *delivered += 1;
                }
                budget = budget.saturating_sub(n);
                if budget == 0 {
                    return ReadEnd::Budget;
                }
                continue;
            }
            // Room to read: move a partial frame to the front when the tail
            // gets short.
            let cap = self.rbuf.len();
            if self.rstart > self.home + 64 && cap - self.rend < cap / 4 {
                self.compact();
            }
            if self.rend == self.rbuf.len() {
                // Cannot happen (a full buffer holds a complete frame, delivered
                // below), but an empty read would look like EOF.
                self.rbuf.resize(self.rbuf.len() * 2 + FRAME_HDR_LEN, 0);
                self.home = home_of(&self.rbuf);
            }
            let asked = (self.rbuf.len() - self.rend).min(READ_CHUNK.max(self.want));
            let r = src.recv(&mut self.rbuf[self.rend..self.rend + asked]);
            let n = match recv_outcome(r, readable) {
                Recv::Bytes(n) => n,
                Recv::Again => continue,
                Recv::End(e) => return e,
            };
            self.rend += n;
            stats.bytes_received += n as u64;
            self.want = 0;
            // Deliver every complete frame.
            loop {
                if self.discard > 0 {
                    let d = self.discard.min(self.rend - self.rstart);
                    self.rstart += d;
                    self.discard -= d;
                    if self.discard > 0 {
                        break;
                    }
                }
                let avail = self.rend - self.rstart;
                if avail < FRAME_HDR_LEN {
                    break;
                }
                let wire::Frame {
                    len,
                    tag,
                    kind,
                    lead,
                    trail,
                } = match wire::parse_frame(&self.rbuf[self.rstart..self.rend], frame_max) {
                    Ok(h) => h,
                    Err(e) => return ReadEnd::Failed(format!("protocol error: {e}")),
                };
                // A put needs only its header here: its data lands in place
                // (and its trailing padding is skipped after it).
                let start = FRAME_HDR_LEN + lead;
                let (body_len, tail) = if kind == wire::KIND_PUT {
                    (PUT_HDR_LEN, 0)
                } else {
                    (len, trail)
                };
                let need = start + body_len + tail;
                if avail < need {
                    if self.rstart + need > self.rbuf.len() {
                        self.compact();
                        if self.rstart + need > self.rbuf.len() {
                            self.rbuf.resize(self.rstart + need, 0);
                            self.home = home_of(&self.rbuf);
                        }
                    }
                    self.want = need - avail;
                    break;
                }
                let body = self.rstart + start..self.rstart + start + body_len;
                match kind {
                    wire::KIND_PUT => {
                        let Some(h) = PutHdr::decode(&self.rbuf[body]) else {
                            return ReadEnd::Failed("protocol error: short put header".into());
                        };
                        let total = len - PUT_HDR_LEN;
                        let target = targets.target(&h, total);
                        // The data that came with the header.
                        let have = total.min(avail - need);
                        if let Some(t) = target {
                            t.write(0, &self.rbuf[self.rstart + need..self.rstart + need + have]);
                        }
                        self.rstart += need + have;
                        if have == total {
                            if target.is_none() {
                                sink.on_put_refused(ep);
                            }
                            *delivered += 1;
                            self.discard = trail;
                        } else {
                            // Everything buffered was consumed: the rest is
                            // read straight into the target.
                            self.landing = Some(Landing {
                                target,
                                reg: h.id,
                                nonce: h.nonce,
                                got: have,
                                total,
                                trail,
                            });
                            break;
                        }
                    }
                    _ => {
                        sink.on_recv(ep, AmTag(tag), &self.rbuf[body]);
                        stats.frags_received += 1;
                        *delivered += 1;
                        self.rstart += need;
                    }
                }
            }
            self.rewind();
            if n < asked && self.landing.is_none() {
                // A short read emptied the socket: skip the read that would only
                // say EAGAIN (a system call per message). Data arriving later
                // raises a new readiness event (epoll reports every arrival).
                *readable = false;
                return ReadEnd::Drained;
            }
            budget = budget.saturating_sub(n);
            if budget == 0 {
                return ReadEnd::Budget;
            }
        }
    }

    /// Starts an empty `rbuf` over where the next frame (past the padding
    /// still to skip) lands at `home`'s alignment: the next frame starts on a
    /// multiple of 64 in the stream when the last one was padded.
    fn rewind(&mut self) {
        if self.rstart == self.rend {
            let at = self.home + (64 - self.discard % 64) % 64;
            self.rstart = at;
            self.rend = at;
        }
    }

    /// Moves the unread bytes of `rbuf` to its front, keeping their address
    /// modulo 64 (so padded payloads stay aligned as they were sent).
    fn compact(&mut self) {
        let to = self.rstart % 64;
        if to < self.rstart {
            self.rbuf.copy_within(self.rstart..self.rend, to);
            self.rend -= self.rstart - to;
            self.rstart = to;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btl::Token;
    use crate::tcp::wire::{frame_header, frame_header_kind, with_pads, KIND_PUT};

    /// `bytes`, handed out up to `limit` (then EAGAIN), EOF at the end.
    struct Bytes<'a> {
        bytes: &'a [u8],
        at: usize,
        limit: usize,
    }

    impl ByteSource for Bytes<'_> {
        fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Errno> {
            if self.at == self.limit && self.limit < self.bytes.len() {
                return Err(Errno::AGAIN);
            }
            let n = buf.len().min(self.limit - self.at);
            buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    /// Fragments (tag, data) and refused puts (`None`), in order.
    #[derive(Default)]
    struct Events(Vec<Option<(u8, Vec<u8>)>>);

    impl BtlSink for Events {
        fn on_recv(&mut self, _: Endpoint, tag: AmTag, data: &[u8]) {
            self.0.push(Some((tag.0, data.to_vec())));
        }
        fn on_complete(&mut self, _: Token, _: Result<(), BtlError>) {}
        fn on_peer_lost(&mut self, _: Endpoint, _: &BtlError) {}
        fn on_put_refused(&mut self, _: Endpoint) {
            self.0.push(None);
        }
    }

    #[allow(unsafe_code)] // the one promise of the layers above
    fn region(v: &mut [u8]) -> MemRegion {
        // SAFETY: the test keeps the buffer alive and untouched while the
        // reader may write it.
        unsafe { MemRegion::new(v.as_mut_ptr(), v.len()) }
    }

    fn put_frame(id: u32, nonce: u64, offset: u64, data: &[u8], pads: (usize, usize)) -> Vec<u8> {
        let h = frame_header_kind(PUT_HDR_LEN + data.len(), 0, KIND_PUT);
        let mut f = with_pads(h, pads.0, pads.1).to_vec();
        f.resize(f.len() + pads.0, 0xaa);
        let seq = 0;
        f.extend_from_slice(
            &PutHdr {
                id,
                nonce,
                offset,
                seq,
            }
            .encode(),
        );
        f.extend_from_slice(data);
        f.resize(f.len() + pads.1, 0xbb);
        f
    }

    #[test]
    fn a_stream_read_whole_or_in_pieces_gives_the_same_fragments_and_puts() {
        let big: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
        for chunk in [usize::MAX, 1, 7, 1000] {
            let mut mem = vec![0u8; 4096];
            let targets = PutTargets::new();
            let (id, nonce) = targets.register(region(&mut mem), true).unwrap();
            let mut s = frame_header(5, 1).to_vec();
            s.extend_from_slice(b"hello");
            s.extend_from_slice(&with_pads(frame_header(3, 2), 3, 5));
            s.extend_from_slice(b"...abc.....");
            s.extend(put_frame(id, nonce, 10, &big, (4, 60)));
            s.extend(put_frame(id, nonce ^ 1, 0, b"stale", (0, 0)));
            s.extend(put_frame(id, nonce, 4090, b"too long", (0, 0)));
            s.extend_from_slice(&frame_header(1, 3));
            s.push(b'!');
            let mut reader = FrameReader::new(64);
            let mut src = Bytes {
                bytes: &s,
                at: 0,
                limit: 0,
            };
            let (mut events, mut stats, mut delivered) =
                (Events::default(), TcpStats::default(), 0);
            let end = loop {
                src.limit = s.len().min(src.limit.saturating_add(chunk));
                let mut readable = true;
                let end = reader.read(
                    &mut src,
                    &mut readable,
                    Endpoint(0),
                    &mut events,
                    &targets,
                    &mut stats,
                    &mut delivered,
                );
                if end != ReadEnd::Drained {
                    break end;
                }
                assert!(!readable);
            };
            assert_eq!(end, ReadEnd::Failed("closed by the peer (EOF)".into()));
            let want = vec![
                Some((1, b"hello".to_vec())),
                Some((2, b"abc".to_vec())),
                None,
                None,
                Some((3, b"!".to_vec())),
            ];
            assert_eq!(events.0, want, "in pieces of {chunk}");
            assert_eq!((delivered, stats.frags_received), (6, 3));
            assert_eq!(&mem[10..3010], &big[..], "in pieces of {chunk}");
            assert!(mem[..10].iter().chain(&mem[3010..]).all(|&b| b == 0));
        }
    }
}
