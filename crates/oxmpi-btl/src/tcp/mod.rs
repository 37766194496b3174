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
//! that endpoint return `PeerGone`. A connect that fails for want of
//! descriptors or memory here loses the peer the same way but reports
//! [`BtlError::Io`]: the peer is alive, and the fault is this process's. [`Btl::del_peer`] completes queued
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
//!
//! # Where things are
//!
//! * [`config`]: limits and the `btl_tcp_*` parameters ([`TcpConfig`]).
//! * [`iface`]: which interfaces, by name or network.
//! * [`wire`]: the card, the handshake and the frame format.
//! * [`conn`]: connections, the handshake, accepting, peer loss.
//! * [`framing`]: frames out (gathered writes, padding, bounded queues) and
//!   in ([`framing::FrameReader`], a state machine over a byte stream).
//! * [`landing`]: registrations and puts landing in them.
//! * [`btl`]: [`TcpBtl`], the [`Btl`] implementation.
//!
//! No `unsafe` code: sockets go through `rustix` and `mio`.

pub mod btl;
pub mod config;
pub mod conn;
pub mod framing;
pub mod iface;
pub mod landing;
pub mod wire;

pub use btl::{TcpBtl, TcpStats};
pub use config::{
    TcpConfig, DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_LIMITS, DEFAULT_MAX_QUEUED, MAX_QUEUED_FRAGS,
};
pub use iface::{IfFilter, IfSpec, Interface};
pub use wire::{Card, CardEntry};

#[cfg(doc)]
use crate::btl::{Btl, BtlError, BtlSink};
