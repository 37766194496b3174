//! The TCP BTL: fragments over non-blocking TCP sockets, driven by the
//! progress engine (one `epoll` instance per module, through `mio`, polled
//! with a zero timeout by [`Btl::progress`]; no thread, no blocking call).
//!
//! # Modules and cards
//!
//! [`TcpBtl::open_all`] selects interfaces (policy in [`iface`]) and opens
//! one module per interface times `btl_tcp_links`, each with its own
//! listening socket bound to its interface's address. Every module of a
//! process publishes the same business card (layout in [`wire`]): the
//! addresses of all of them. Each module advertises `btl_tcp_bandwidth`, the
//! weight by which the layer above stripes over the modules.
//!
//! [`Btl::add_peer`] pairs the modules of two processes deterministically
//! ([`wire::pair_entries`]: same link number, common subnet first, loopback
//! only between processes of one node, then routed) so each module talks to
//! exactly one module of the peer, and both sides agree on which. A module
//! without a partner does not reach that peer (`Ok(None)`).
//!
//! # Connections: virtual, bound late
//!
//! `add_peer` only records the peer's address. The first send to it opens
//! the connection (non-blocking connect, `TCP_NODELAY`, the configured
//! socket buffers, source address bound to the module's interface);
//! fragments sent meanwhile are queued and go out in order once the
//! handshake completes.
//!
//! Handshake: the connector sends HELLO (the job's secret, both ranks); the
//! acceptor checks the secret and answers ACCEPT or DECLINE, with the
//! secret too. No fragment travels before the handshake completed, so a
//! declined connection carries none. A connection with a wrong or missing
//! secret, a malformed greeting, or none within the handshake timeout is
//! closed and logged at debug level; peers are never accepted or rejected
//! by source address. At most 64 accepted connections wait for their
//! HELLO: past that the oldest is closed to make room, and a HELLO that
//! came with its connection is read as it is accepted, so strangers that
//! connect and say nothing cannot keep the job's peers out. Data from an authenticated peer that this module has
//! not been told about yet (`add_peer` not called) stays in the kernel
//! (TCP flow control) until `add_peer` binds the connection.
//!
//! Simultaneous connects resolve by rank: the connection initiated by the
//! lower rank wins. A module accepts a HELLO unless it already has a
//! connection with that peer, except that a HELLO from a lower rank
//! replaces the module's own connection still awaiting its answer. A
//! declined connector waits for the peer's connection (and tries again
//! after a second, a few times, in case the peer died meanwhile).
//!
//! # Framing, flow control, memory
//!
//! Each fragment is an 8-byte header (length, tag, kind, padding) and its
//! payload ([`wire`]); the receiver checks the length against its own
//! largest fragment before buffering anything. A frame with 4 KiB or more in
//! place is padded to its data's alignment (see [`wire`]); the receiver
//! starts an empty buffer at a 64-byte aligned spot (`rewind`, past any
//! padding still to skip) and compacts it keeping addresses modulo 64
//! (`compact`). Reads go into one buffer per
//! connection and fragments are handed to [`BtlSink::on_recv`] in place;
//! writes gather queued fragments into one `sendmsg` (`MSG_NOSIGNAL`).
//! Partial reads and writes resume where they stopped.
//!
//! Each peer's send queue is bounded (`btl_tcp_max_queued` bytes of buffer
//! capacity, and a fragment count): past it sends answer
//! [`BtlError::NoResource`]. Buffers come from a bounded free list, so a
//! steady state allocates nothing. `sendi` writes the frame to the socket at
//! once when the queue is empty, else queues a copy, else NoResource.
//!
//! # Failure
//!
//! EOF or an error on a peer's connection (or a refused connect) makes the
//! peer lost: [`BtlSink::on_peer_lost`] once, every queued fragment with a
//! token completes with [`BtlError::PeerGone`], and later operations to
//! that endpoint return `PeerGone`. [`Btl::del_peer`] completes queued
//! tokens with `PeerGone` too, without reporting the peer lost.
//!
//! # Capabilities
//!
//! `SEND | SENDI | SEND_INPLACE | PUT | ORDERED | PUT_ORDERED`. `prepare_src`
//! references the user's data in place (written with `writev`). PUT is
//! emulated: the data follows a put header in a frame and the target
//! receives it straight into its registered memory, before any frame after
//! it on the connection. The put completes once written (nothing is
//! acknowledged: the PML sends its FIN right behind it); a put the target
//! refuses (stale or forged key, range outside the registration) is read
//! and dropped, and reported there (`BtlSink::on_put_refused`), in order
//! with the frames. Registrations are shared by the process's tcp modules,
//! since a put arrives on whichever module the sender's is paired with.
//! `get` is [`BtlError::Unsupported`].

pub mod iface;
pub mod wire;

use std::collections::{HashMap, VecDeque};
use std::io::IoSlice;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll};
use rustix::io::Errno;
use rustix::net::{self as rnet, sockopt, AddressFamily, RecvFlags, SendFlags, SocketFlags};

use crate::btl::{
    Access, AmTag, Btl, BtlError, BtlSink, Caps, Descriptor, Endpoint, Limits, PeerInfo, RegId,
    Registration, RemoteKey, SendOutcome, Token,
};
use crate::mem::MemRegion;

pub use iface::{IfFilter, IfSpec, Interface};
pub use wire::{Card, CardEntry};

use wire::{Handshake, HsKind, PutHdr, FRAME_HDR_LEN, HS_LEN, PUT_HDR_LEN};

/// Default limits, as Open MPI's tcp BTL (128 KiB pipeline fragments,
/// exclusivity 100, latency 100, bandwidth 100 per link) except:
/// - the eager limit: a payload of up to 256 KiB goes eagerly, headers
///   included. Open MPI's 64 KiB counts the headers, so a 64 KiB message
///   took a rendezvous round trip and a 32-byte tail fragment. Measured
///   over loopback, interleaved with MPICH 5: 64 KiB 35 -> 25 us (MPICH
///   27), 256 KiB 241 -> 179 us (MPICH 186).
/// - a rendezvous puts everything past its first 8 KiB (not 64 KiB), with
///   no send/receive tail (`rdma_pipeline_send_length` 0, not 128 KiB): the
///   emulated put lands straight in the receive buffer, where fragments are
///   read into the module's buffer and copied again. Loopback ping-pong,
///   10 interleaved rounds, medians: 1 MiB 235 -> 208 us (MPICH 215),
///   4 MiB 1141 -> 939 us (MPICH 1181); bandwidth unchanged within noise.
///
/// Unexpected eager data stays bounded by the PML's credits.
pub const DEFAULT_LIMITS: Limits = Limits {
    eager_limit: 256 * 1024 + 64,
    rndv_eager_limit: 8 * 1024,
    max_send_size: 128 * 1024,
    max_sendi_size: 64 * 1024,
    rdma_pipeline_send_length: 0,
    rdma_pipeline_frag_size: i32::MAX as usize,
    min_rdma_pipeline_size: 0,
    exclusivity: 100,
    latency: 100,
    bandwidth: 100,
};

/// Default bound of each peer's send queue, bytes (`btl_tcp_max_queued`).
pub const DEFAULT_MAX_QUEUED: usize = 4 << 20;
/// Most fragments queued to one peer, whatever their size.
pub const MAX_QUEUED_FRAGS: usize = 4096;
/// Default time an accepted connection has to authenticate.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Wait before a declined or interrupted connect is tried again.
const RETRY_WAIT: Duration = Duration::from_secs(1);
/// Connect attempts before the peer is declared unreachable.
const MAX_CONNECT_TRIES: u32 = 5;
/// Connections accepted but not yet authenticated, at most: past it the
/// oldest is closed to make room (see `TcpBtl::accept_all`).
const MAX_PENDING_HELLOS: usize = 64;
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
const SMALL_BUF: usize = 4096;
/// Pooled buffers kept, per class.
const POOL_SMALL: usize = 256;
const POOL_LARGE: usize = 32;
/// The listener's token (connections use their slot index).
const LISTENER: mio::Token = mio::Token(usize::MAX);

/// Configuration of the TCP BTL (one per process; every module shares it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConfig {
    /// This process's rank in the job.
    pub rank: u32,
    /// The per-job secret every connection must present (distributed by
    /// the launcher or the modex).
    pub secret: [u8; 16],
    /// Limits of each module (`btl_tcp_<limit>`).
    pub limits: Limits,
    /// `btl_tcp_if_include`: interface names or CIDR networks to use.
    pub if_include: Vec<String>,
    /// `btl_tcp_if_exclude`: interface names or CIDR networks not to use.
    pub if_exclude: Vec<String>,
    /// `btl_tcp_links`: modules per interface (1..=255).
    pub links: u32,
    /// `btl_tcp_port_min`: lowest listening port; 0 = ephemeral.
    pub port_min: u16,
    /// `btl_tcp_port_range`: ports tried from `port_min` on.
    pub port_range: u16,
    /// `btl_tcp_sndbuf`: `SO_SNDBUF`, 0 = the OS default.
    pub sndbuf: usize,
    /// `btl_tcp_rcvbuf`: `SO_RCVBUF`, 0 = the OS default.
    pub rcvbuf: usize,
    /// `btl_tcp_max_queued`: bytes queued per peer before `NoResource`.
    pub max_queued: usize,
    /// Time an accepted connection has to present the secret.
    pub handshake_timeout: Duration,
}

impl TcpConfig {
    /// The defaults for `rank` with `secret`.
    pub fn new(rank: u32, secret: [u8; 16]) -> TcpConfig {
        TcpConfig {
            rank,
            secret,
            limits: DEFAULT_LIMITS,
            if_include: Vec::new(),
            if_exclude: Vec::new(),
            links: 1,
            port_min: 0,
            port_range: 64511,
            sndbuf: 0,
            rcvbuf: 0,
            max_queued: DEFAULT_MAX_QUEUED,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }

    /// Registers the tcp BTL's parameters: the limits
    /// (`btl_tcp_eager_limit`...), `btl_tcp_if_include`,
    /// `btl_tcp_if_exclude`, `btl_tcp_links`, `btl_tcp_port_min`,
    /// `btl_tcp_port_range`, `btl_tcp_sndbuf`, `btl_tcp_rcvbuf`,
    /// `btl_tcp_max_queued`.
    pub fn register_params(
        reg: &mut oxmpi_runtime::mca::Registry,
    ) -> Result<(), oxmpi_runtime::mca::McaError> {
        use oxmpi_runtime::mca::ParamSpec;
        DEFAULT_LIMITS.register(reg, "tcp")?;
        reg.register(
            ParamSpec::list("btl", "tcp", "if_include", &[])
                .level(1)
                .help(
                    "Interfaces to use, by name or CIDR network (e.g. \"eth0,10.1.0.0/16\"); \
             exclusive with btl_tcp_if_exclude",
                ),
        )?;
        reg.register(
            ParamSpec::list("btl", "tcp", "if_exclude", &[])
                .level(1)
                .help(
                    "Interfaces not to use, by name or CIDR network; exclusive with \
             btl_tcp_if_include. Loopback is used only if no other interface \
             remains or it is included explicitly",
                ),
        )?;
        reg.register(
            ParamSpec::int("btl", "tcp", "links", 1)
                .level(4)
                .help("Modules (connections per peer) per interface, 1..255"),
        )?;
        reg.register(
            ParamSpec::int("btl", "tcp", "port_min", 0)
                .level(2)
                .help("Lowest listening port; 0 lets the OS choose"),
        )?;
        reg.register(
            ParamSpec::int("btl", "tcp", "port_range", 64511)
                .level(2)
                .help("Ports tried from btl_tcp_port_min on"),
        )?;
        reg.register(
            ParamSpec::size("btl", "tcp", "sndbuf", 0)
                .level(4)
                .help("Socket send buffer size (SO_SNDBUF); 0 = the OS default"),
        )?;
        reg.register(
            ParamSpec::size("btl", "tcp", "rcvbuf", 0)
                .level(4)
                .help("Socket receive buffer size (SO_RCVBUF); 0 = the OS default"),
        )?;
        reg.register(
            ParamSpec::size("btl", "tcp", "max_queued", DEFAULT_MAX_QUEUED as u64)
                .level(5)
                .help("Bytes queued per peer before sends are refused (back-pressure)"),
        )?;
        Ok(())
    }

    /// The configuration a resolved registry describes (after
    /// [`TcpConfig::register_params`] and `apply`). Fails on a value out of
    /// range, a malformed interface list, or both interface lists set.
    pub fn from_registry(
        reg: &oxmpi_runtime::mca::Registry,
        rank: u32,
        secret: [u8; 16],
    ) -> Result<TcpConfig, BtlError> {
        let mca = |e: oxmpi_runtime::mca::McaError| BtlError::Invalid(e.to_string());
        let int_in = |name: &str, lo: i64, hi: i64| -> Result<i64, BtlError> {
            let v = reg.get_int(name).map_err(mca)?;
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(BtlError::Invalid(format!(
                    "{name} = {v} is outside {lo}..={hi}"
                )))
            }
        };
        let size = |name: &str| -> Result<usize, BtlError> {
            let v = reg.get_size(name).map_err(mca)?;
            usize::try_from(v).map_err(|_| BtlError::Invalid(format!("{name} = {v} is too large")))
        };
        let cfg = TcpConfig {
            rank,
            secret,
            limits: Limits::from_registry(reg, "tcp").map_err(mca)?,
            if_include: reg.get_list("btl_tcp_if_include").map_err(mca)?.to_vec(),
            if_exclude: reg.get_list("btl_tcp_if_exclude").map_err(mca)?.to_vec(),
            links: int_in("btl_tcp_links", 1, 255)? as u32,
            port_min: int_in("btl_tcp_port_min", 0, 65535)? as u16,
            port_range: int_in("btl_tcp_port_range", 1, 65535)? as u16,
            sndbuf: size("btl_tcp_sndbuf")?,
            rcvbuf: size("btl_tcp_rcvbuf")?,
            max_queued: size("btl_tcp_max_queued")?,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        };
        cfg.filter()?;
        Ok(cfg)
    }

    /// The parsed interface lists (an error if both are set).
    pub fn filter(&self) -> Result<IfFilter, BtlError> {
        IfFilter::new(&self.if_include, &self.if_exclude)
    }

    /// The largest fragment a module sends or accepts, header of the layer
    /// above included.
    pub fn frame_max(&self) -> usize {
        let l = &self.limits;
        l.eager_limit
            .max(l.rndv_eager_limit)
            .max(l.max_send_size)
            .max(l.max_sendi_size)
    }
}

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

/// A fragment waiting in a peer's send queue.
#[derive(Debug)]
struct OutFrag {
    hdr: [u8; FRAME_HDR_LEN],
    buf: Vec<u8>,
    inplace: Option<MemRegion>,
    /// Bytes of the frame already written.
    sent: usize,
    token: Option<Token>,
}

impl OutFrag {
    /// Padding bytes before and after the payload (from the header).
    fn pad_lens(&self) -> (usize, usize) {
        (usize::from(self.hdr[6]), usize::from(self.hdr[7]))
    }

    fn total(&self) -> usize {
        let (lead, trail) = self.pad_lens();
        FRAME_HDR_LEN + lead + self.buf.len() + self.inplace.map_or(0, |r| r.len()) + trail
    }

    /// What it holds of memory, for the queue bound.
    fn cost(&self) -> usize {
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
struct BufPool {
    small: Vec<Vec<u8>>,
    large: Vec<Vec<u8>>,
    large_cap: usize,
}

impl BufPool {
    fn get(&mut self, len: usize) -> Vec<u8> {
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

    fn put(&mut self, b: Vec<u8>) {
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
struct Books {
    pool: BufPool,
    completions: VecDeque<(Token, Result<(), BtlError>)>,
    lost: VecDeque<(Endpoint, BtlError)>,
    stats: TcpStats,
    /// Fragments queued to all peers.
    queued_frags: usize,
}

impl Books {
    /// Completes everything `p` owes with `err`: its queued fragments and
    /// puts (the peer is lost or deleted).
    fn fail_all(&mut self, p: &mut Peer, err: &BtlError) {
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
    fn sent(&mut self, f: OutFrag) {
        self.stats.frags_sent += 1;
        if let Some(t) = f.token {
            self.completions.push_back((t, Ok(())));
        }
        self.pool.put(f.buf);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PeerState {
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
struct Peer {
    rank: u32,
    target: SocketAddrV4,
    /// The peer's card entry we pair with.
    entry: u8,
    state: PeerState,
    queue: VecDeque<OutFrag>,
    /// Sum of the queued fragments' costs.
    queued: usize,
    tries: u32,
    /// The next put's sequence number (in its header, for the logs).
    put_seq: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
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
struct Conn {
    fd: OwnedFd,
    phase: Phase,
    readable: bool,
    writable: bool,
    in_ready: bool,
    /// The peer's rank (known from the start for our connections).
    rank: Option<u32>,
    /// The endpoint it serves (None: accepted from a peer not added yet).
    ep: Option<Endpoint>,
    hs_out: [u8; HS_LEN],
    hs_out_off: usize,
    hs_out_len: usize,
    hs_in: [u8; HS_LEN],
    hs_in_got: usize,
    deadline: Option<Instant>,
    /// Accepted connections: the order of acceptance (`TcpBtl::hello_order`).
    accept_seq: u64,
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

/// The rest of a put's data, arriving.
#[derive(Debug)]
struct Landing {
    /// Where the data goes; `None`: refused (bad key or range), the data
    /// is read and dropped.
    target: Option<MemRegion>,
    /// The registration written to, and its nonce: checked before every
    /// read, so a deregistration (by any module) drops the rest.
    reg: u32,
    nonce: u64,
    got: usize,
    total: usize,
    /// Padding after the data, skipped once it has all landed.
    trail: usize,
}

/// A registration of ours that peers may put into.
#[derive(Debug, Clone, Copy)]
struct Reg {
    region: MemRegion,
    nonce: u64,
    writable: bool,
}

/// The registrations of every tcp module of this process: a peer's put
/// arrives on whichever of our modules its module is paired with, which
/// need not be the one that registered (several interfaces or links).
#[derive(Debug, Default)]
struct RegTable {
    regs: Vec<Option<Reg>>,
    free: Vec<u32>,
}

type SharedRegs = std::sync::Arc<std::sync::Mutex<RegTable>>;

fn lock(t: &SharedRegs) -> std::sync::MutexGuard<'_, RegTable> {
    // A panic elsewhere cannot leave the table half-updated (every update
    // is one assignment), so a poisoned lock is still usable.
    t.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Conn {
    fn new(fd: OwnedFd, phase: Phase) -> Conn {
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
            rbuf: Vec::new(),
            home: 0,
            rstart: 0,
            rend: 0,
            want: 0,
            discard: 0,
            landing: None,
        }
    }

    fn set_hs_out(&mut self, hs: &Handshake) {
        self.hs_out = hs.encode();
        self.hs_out_off = 0;
        self.hs_out_len = HS_LEN;
    }

    /// Writes the pending handshake bytes; `Ok(true)` when all are out.
    fn flush_hs(&mut self) -> Result<bool, Errno> {
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

/// What reading an established connection ended with.
enum ReadEnd {
    /// Nothing more to read now.
    Drained,
    /// The budget ran out with data left.
    Budget,
    /// The connection is broken (EOF, error, malformed stream).
    Failed(String),
}

/// One TCP BTL module: one interface, one link.
#[derive(Debug)]
pub struct TcpBtl {
    rank: u32,
    secret: [u8; 16],
    limits: Limits,
    frame_max: usize,
    card: Vec<u8>,
    entries: Vec<CardEntry>,
    my_entry: u8,
    iface: Interface,
    link: u32,
    listen_addr: SocketAddrV4,
    sndbuf: usize,
    rcvbuf: usize,
    max_queued: usize,
    handshake_timeout: Duration,
    poll: Poll,
    events: Events,
    listener: OwnedFd,
    conns: Vec<Option<Conn>>,
    free_slots: Vec<usize>,
    peers: Vec<Peer>,
    by_rank: HashMap<u32, Endpoint>,
    /// Authenticated connections from ranks not added yet.
    parked: HashMap<u32, usize>,
    /// Connections with work to do at the next progress.
    ready: Vec<usize>,
    /// The other half of `ready`'s double buffer.
    ready_spare: Vec<usize>,
    /// Connections awaiting a HELLO.
    pending_hellos: usize,
    /// Accepted connections in the order of acceptance, as (slot,
    /// `Conn::accept_seq`): the oldest still awaiting its HELLO is the one
    /// closed to make room. Entries of connections gone or authenticated
    /// are skipped (and pruned).
    hello_order: VecDeque<(usize, u64)>,
    /// The last `Conn::accept_seq` given.
    accept_seq: u64,
    /// Running out of descriptors on accept was reported.
    said_out_of_fds: bool,
    /// Our connections in `Connecting`/`AwaitAck`.
    connecting: usize,
    /// Peers in `Waiting`.
    waiting: usize,
    books: Books,
    /// Our registrations (index = id), shared by this process's modules.
    regs: SharedRegs,
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
        let regs = SharedRegs::default();
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
            let poll = Poll::new().map_err(|e| BtlError::Io(format!("epoll: {e}")))?;
            poll.registry()
                .register(&mut SourceFd(&fd.as_raw_fd()), LISTENER, Interest::READABLE)
                .map_err(|e| BtlError::Io(format!("epoll register: {e}")))?;
            let e = entries[i];
            out.push(TcpBtl {
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

    // ----- endpoints -----------------------------------------------------

    fn peer(&self, ep: Endpoint) -> Result<&Peer, BtlError> {
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
    fn lose_peer(&mut self, ep: Endpoint, why: String) {
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
        let err = BtlError::PeerGone(ep, why);
        self.books.fail_all(p, &err);
        self.books.lost.push_back((ep, err));
        if let Some(s) = slot {
            self.close_conn(s);
        }
    }

    // ----- sockets -------------------------------------------------------

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
    fn close_conn(&mut self, slot: usize) {
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
            Phase::Established => {
                let want = (4 * (self.frame_max + FRAME_HDR_LEN)).clamp(256 << 10, 4 << 20);
                // 64 bytes more, so that the room from `home` on is as asked.
                c.rbuf = vec![0; want.max(2 * (self.frame_max + FRAME_HDR_LEN)) + 64];
                c.home = home_of(&c.rbuf);
                (c.rstart, c.rend) = (c.home, c.home);
            }
        }
        c.phase = phase;
    }

    fn mark_ready(&mut self, slot: usize) {
        if let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) {
            if !c.in_ready {
                c.in_ready = true;
                self.ready.push(slot);
            }
        }
    }

    /// Opens our connection to `ep` (its state must allow it).
    fn start_connect(&mut self, ep: Endpoint) {
        let p = &self.peers[ep.0 as usize];
        let (target, rank, entry) = (p.target, p.rank, p.entry);
        let fd = match connect_socket(self.iface.addr, target, self.sndbuf, self.rcvbuf) {
            Ok(fd) => fd,
            Err(e) => {
                let hint = match e.raw_os_error() {
                    23 | 24 => format!(": {}", oxmpi_runtime::limits::fd_limit_hint()),
                    _ => String::new(),
                };
                self.lose_peer(
                    ep,
                    format!("connecting to rank {rank} at {target}: {e}{hint}"),
                );
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

    fn accept_all(&mut self) {
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
                    // progress call would say it again.
                    if !self.said_out_of_fds {
                        self.said_out_of_fds = true;
                        tracing::error!(
                            "tcp: accept on {}: {e}: {}",
                            self.listen_addr,
                            oxmpi_runtime::limits::fd_limit_hint()
                        );
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
    fn service(&mut self, slot: usize, sink: &mut dyn BtlSink) -> usize {
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

    fn service_established(&mut self, slot: usize, sink: &mut dyn BtlSink) -> usize {
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
        let end = read_frames(
            c,
            ep,
            self.frame_max,
            sink,
            &mut self.books.stats,
            &mut delivered,
            &self.regs,
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

    /// An established connection broke.
    fn conn_failed(&mut self, slot: usize, why: String) {
        match self.conns.get(slot).and_then(Option::as_ref).map(|c| c.ep) {
            Some(Some(ep)) => {
                let r = self.peers[ep.0 as usize].rank;
                self.lose_peer(ep, format!("connection to rank {r}: {why}"));
            }
            Some(None) => self.close_conn(slot),
            None => {}
        }
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

    fn check_timers(&mut self) {
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

    /// Queues `f` for `ep`, opening the connection if it is not there yet.
    /// A frame for a lost or deleted peer is dropped (its token, if any,
    /// completes with the loss): nothing would ever write or drain it.
    fn enqueue(&mut self, ep: Endpoint, f: OutFrag) {
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

    fn queue_full(&self, ep: Endpoint, cost: usize) -> bool {
        let p = &self.peers[ep.0 as usize];
        !p.queue.is_empty()
            && (p.queued + cost > self.max_queued || p.queue.len() >= MAX_QUEUED_FRAGS)
    }

    /// Writes (or queues) one frame: `hdr`, then the descriptor's bytes
    /// and its in-place data. `token` completes when it is all written
    /// (`None`: nothing to report). A full queue refuses it with
    /// `NoResource`.
    fn send_frame(
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
    fn write_now(&mut self, ep: Endpoint, parts: &[&[u8]]) -> Result<Option<usize>, String> {
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

fn recv_outcome<T>(r: Result<(usize, T), Errno>, readable: &mut bool) -> Recv {
    match r {
        Ok((0, _)) => Recv::End(ReadEnd::Failed("closed by the peer (EOF)".into())),
        Ok((n, _)) => Recv::Bytes(n),
        Err(Errno::INTR) => Recv::Again,
        Err(Errno::AGAIN) => {
            *readable = false;
            Recv::End(ReadEnd::Drained)
        }
        Err(e) => Recv::End(ReadEnd::Failed(format!("read: {e}"))),
    }
}

/// Where a put's data goes: its registration's region at the offset, or
/// `None` when the key is stale or forged, the registration is not
/// writable, or the range leaves it.
fn put_target(regs: &SharedRegs, h: &PutHdr, len: usize) -> Option<MemRegion> {
    let r = lock(regs).regs.get(h.id as usize).copied().flatten()?;
    if r.nonce != h.nonce || !r.writable {
        return None;
    }
    r.region.slice(usize::try_from(h.offset).ok()?, len)
}

/// Starts an empty `c.rbuf` over where the next frame (past the padding
/// still to skip) lands at `home`'s alignment: the next frame starts on a
/// multiple of 64 in the stream when the last one was padded.
fn rewind(c: &mut Conn) {
    if c.rstart == c.rend {
        let at = c.home + (64 - c.discard % 64) % 64;
        c.rstart = at;
        c.rend = at;
    }
}

/// Moves the unread bytes of `c.rbuf` to its front, keeping their address
/// modulo 64 (so padded payloads stay aligned as they were sent).
fn compact(c: &mut Conn) {
    let to = c.rstart % 64;
    if to < c.rstart {
        c.rbuf.copy_within(c.rstart..c.rend, to);
        c.rend -= c.rstart - to;
        c.rstart = to;
    }
}

/// Reads and delivers fragments until the socket is empty or the budget is
/// spent. Put data is received straight into its registered target (what
/// arrived with the header is copied; the rest lands with no copy); a
/// refused put is reported to `sink` once its data was read and dropped.
#[allow(clippy::too_many_arguments)]
fn read_frames(
    c: &mut Conn,
    ep: Endpoint,
    frame_max: usize,
    sink: &mut dyn BtlSink,
    stats: &mut TcpStats,
    delivered: &mut usize,
    regs: &SharedRegs,
) -> ReadEnd {
    let mut budget = READ_BUDGET;
    loop {
        if let Some(l) = c.landing.as_mut() {
            // Only puts look at the registrations: the lock is never taken
            // for ordinary fragments.
            let live = lock(regs)
                .regs
                .get(l.reg as usize)
                .copied()
                .flatten()
                .is_some_and(|r| r.nonce == l.nonce);
            if !live {
                l.target = None;
            }
            let want = l.total - l.got;
            let r = match l.target.and_then(|t| t.slice(l.got, want)) {
                Some(t) => t.with_bytes_mut(|b| rnet::recv(&c.fd, b, RecvFlags::empty())),
                None => {
                    // Refused: read into our buffer and drop.
                    if c.rbuf.is_empty() {
                        c.rbuf.resize(2 * (frame_max + FRAME_HDR_LEN), 0);
                        c.home = home_of(&c.rbuf);
                    }
                    let k = want.min(c.rbuf.len());
                    rnet::recv(&c.fd, &mut c.rbuf[..k], RecvFlags::empty())
                }
            };
            let n = match recv_outcome(r, &mut c.readable) {
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
                c.discard = l.trail;
                c.landing = None;
                rewind(c);
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
        let cap = c.rbuf.len();
        if c.rstart > c.home + 64 && cap - c.rend < cap / 4 {
            compact(c);
        }
        if c.rend == c.rbuf.len() {
            // Cannot happen (a full buffer holds a complete frame, delivered
            // below), but an empty read would look like EOF.
            c.rbuf.resize(c.rbuf.len() * 2 + FRAME_HDR_LEN, 0);
            c.home = home_of(&c.rbuf);
        }
        let asked = (c.rbuf.len() - c.rend).min(READ_CHUNK.max(c.want));
        let r = rnet::recv(
            &c.fd,
            &mut c.rbuf[c.rend..c.rend + asked],
            RecvFlags::empty(),
        );
        let n = match recv_outcome(r, &mut c.readable) {
            Recv::Bytes(n) => n,
            Recv::Again => continue,
            Recv::End(e) => return e,
        };
        c.rend += n;
        stats.bytes_received += n as u64;
        c.want = 0;
        // Deliver every complete frame.
        loop {
            if c.discard > 0 {
                let d = c.discard.min(c.rend - c.rstart);
                c.rstart += d;
                c.discard -= d;
                if c.discard > 0 {
                    break;
                }
            }
            let avail = c.rend - c.rstart;
            if avail < FRAME_HDR_LEN {
                break;
            }
            let wire::Frame {
                len,
                tag,
                kind,
                lead,
                trail,
            } = match wire::parse_frame(&c.rbuf[c.rstart..c.rend], frame_max) {
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
                if c.rstart + need > c.rbuf.len() {
                    compact(c);
                    if c.rstart + need > c.rbuf.len() {
                        c.rbuf.resize(c.rstart + need, 0);
                        c.home = home_of(&c.rbuf);
                    }
                }
                c.want = need - avail;
                break;
            }
            let body = c.rstart + start..c.rstart + start + body_len;
            match kind {
                wire::KIND_PUT => {
                    let Some(h) = PutHdr::decode(&c.rbuf[body]) else {
                        return ReadEnd::Failed("protocol error: short put header".into());
                    };
                    let total = len - PUT_HDR_LEN;
                    let target = put_target(regs, &h, total);
                    // The data that came with the header.
                    let have = total.min(avail - need);
                    if let Some(t) = target {
                        t.write(0, &c.rbuf[c.rstart + need..c.rstart + need + have]);
                    }
                    c.rstart += need + have;
                    if have == total {
                        if target.is_none() {
                            sink.on_put_refused(ep);
                        }
                        *delivered += 1;
                        c.discard = trail;
                    } else {
                        // Everything buffered was consumed: the rest is
                        // read straight into the target.
                        c.landing = Some(Landing {
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
                    sink.on_recv(ep, AmTag(tag), &c.rbuf[body]);
                    stats.frags_received += 1;
                    *delivered += 1;
                    c.rstart += need;
                }
            }
        }
        rewind(c);
        if n < asked && c.landing.is_none() {
            // A short read emptied the socket: skip the read that would only
            // say EAGAIN (a system call per message). Data arriving later
            // raises a new readiness event (epoll reports every arrival).
            c.readable = false;
            return ReadEnd::Drained;
        }
        budget = budget.saturating_sub(n);
        if budget == 0 {
            return ReadEnd::Budget;
        }
    }
}

/// A listening socket on `addr` with the configured buffers, on the first
/// free port of the configured range (or an ephemeral one).
fn listen_on(addr: Ipv4Addr, cfg: &TcpConfig) -> Result<(OwnedFd, u16), BtlError> {
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
        let mut t = lock(&self.regs);
        let id = match t.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(t.regs.len())
                    .map_err(|_| BtlError::Invalid("tcp: too many registrations".into()))?;
                t.regs.push(None);
                i
            }
        };
        // A fresh unpredictable nonce per registration: a stale or forged
        // key names the wrong one.
        let nonce = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(id);
            h.write_usize(region.addr());
            h.finish()
        };
        t.regs[id as usize] = Some(Reg {
            region,
            nonce,
            writable: access.contains(Access::REMOTE_WRITE),
        });
        drop(t);
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
        let mut t = lock(&self.regs);
        if t.regs.get(i as usize).is_some_and(Option::is_some) {
            t.regs[i as usize] = None;
            t.free.push(i);
            // A put still landing there (on any module) sees the entry gone
            // before its next read, and drops the rest.
        }
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
        while let Some((t, r)) = self.books.completions.pop_front() {
            sink.on_complete(t, r);
            n += 1;
        }
        n
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
