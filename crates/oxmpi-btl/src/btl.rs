//! The BTL contract: what every byte transfer layer offers the layers above.
//!
//! Seed 001's interface, in Rust form:
//!
//! | seed 001 | here |
//! |---|---|
//! | `btl_add_procs` / `btl_del_procs` | [`Btl::add_peer`] (from the peer's business card; binds nothing yet) / [`Btl::del_peer`] |
//! | `btl_register` (active-message callbacks) | the [`BtlSink`] given to [`Btl::progress`]: every fragment goes to `on_recv` with its [`AmTag`] |
//! | `btl_alloc` / `btl_free` | [`Btl::alloc`] / [`Btl::free`] (a [`Descriptor`] owning a BTL buffer) |
//! | `btl_prepare_src` | [`Btl::prepare_src`] (header room + the user's data, referenced in place when the BTL can) |
//! | `btl_prepare_dst` | [`Btl::register_mem`] with [`Access::REMOTE_WRITE`] (as Open MPI 2+ did) |
//! | `btl_send` / `btl_sendi` | [`Btl::send`] / [`Btl::sendi`] |
//! | `btl_put` / `btl_get` | [`Btl::put`] / [`Btl::get`] |
//! | `btl_register_mem` / `btl_deregister_mem` | [`Btl::register_mem`] / [`Btl::deregister_mem`] |
//! | `get_description` / `match_description` (seed 002) | [`Btl::business_card`] / [`Btl::add_peer`] |
//!
//! Typed tokens replace `void *cbdata`: the caller names each operation with
//! a [`Token`] and gets exactly one [`BtlSink::on_complete`] for it (unless
//! the call answered [`SendOutcome::Done`]).
//!
//! Back-pressure: a BTL without resources answers [`BtlError::NoResource`]
//! and hands the caller's descriptor back; the caller queues the operation
//! and re-drives it from progress. A BTL never grows memory to absorb load
//! and never drops a fragment.
//!
//! Ordering: fragments sent on one endpoint are delivered in order
//! (`on_recv` in send order) unless the BTL's [`Caps`] lack
//! [`Caps::ORDERED`]; RDMA completions carry no ordering with sends.

use crate::mem::MemRegion;

/// Active-message tag: which of the caller's handlers a fragment goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AmTag(pub u8);

/// A BTL's handle for one peer: an index into that BTL's endpoint table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint(pub u32);

/// The caller's name for an operation, returned in its completion (the PML
/// encodes a slab index and a generation, so a stale token is detected).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Token(pub u64);

/// What a BTL implements. Advertised flags must match exactly the
/// operations that work: a flag without a working operation is a bug the
/// conformance suite catches, and so is a working operation without its flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Caps(u32);

impl Caps {
    /// `send` of descriptors.
    pub const SEND: Caps = Caps(1);
    /// `sendi`: small sends completed on return.
    pub const SENDI: Caps = Caps(1 << 1);
    /// `put` (RDMA write).
    pub const PUT: Caps = Caps(1 << 2);
    /// `get` (RDMA read).
    pub const GET: Caps = Caps(1 << 3);
    /// `prepare_src` references user memory in place instead of copying.
    pub const SEND_INPLACE: Caps = Caps(1 << 4);
    /// Fragments on one endpoint arrive in send order.
    pub const ORDERED: Caps = Caps(1 << 5);
    /// `send` is done on return: it fails or answers
    /// [`SendOutcome::Done`], never `Pending`, so its token is never
    /// reported (the PML then completes a small eager send with no request).
    pub const SEND_DONE: Caps = Caps(1 << 6);
    /// `put` is ordered with later traffic on its endpoint: its data lands
    /// at the target before any fragment sent to that endpoint after the
    /// `put` call is delivered, and its completion is local (the source
    /// buffer may be reused). The target refuses a put (stale or forged key,
    /// range outside the registration) by reporting
    /// [`BtlSink::on_put_refused`] there, not to the initiator: the PML can
    /// send its FIN right behind the put instead of waiting a round trip.
    pub const PUT_ORDERED: Caps = Caps(1 << 7);
    /// No flag.
    pub const NONE: Caps = Caps(0);

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Caps) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets of flags.
    pub const fn union(self, other: Caps) -> Caps {
        Caps(self.0 | other.0)
    }

    /// Capabilities from their bit representation (see [`Caps::bits`]).
    pub const fn from_bits(bits: u32) -> Caps {
        Caps(bits)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }
}

impl std::ops::Sub for Caps {
    type Output = Caps;
    /// The capabilities of `self` without those of `rhs`.
    fn sub(self, rhs: Caps) -> Caps {
        Caps(self.0 & !rhs.0)
    }
}

impl std::ops::BitOr for Caps {
    type Output = Caps;
    fn bitor(self, rhs: Caps) -> Caps {
        self.union(rhs)
    }
}

/// Access rights asked of a registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// Peers may read it (the source of their get).
    pub const REMOTE_READ: Access = Access(1);
    /// Peers may write it (the target of their put).
    pub const REMOTE_WRITE: Access = Access(2);
    /// This process writes it (the local side of a get).
    pub const LOCAL_WRITE: Access = Access(4);

    /// Whether every right of `other` is included.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// The limits and weights of one BTL module, as MCA parameters
/// `btl_<name>_<limit>` (registered by [`Limits::register`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest eager message including the PML header.
    pub eager_limit: usize,
    /// Largest first fragment of a rendezvous (its header and the data sent
    /// with it), also capped by `max_send_size`.
    pub rndv_eager_limit: usize,
    /// Largest fragment of the send/receive pipeline, header included.
    pub max_send_size: usize,
    /// Largest `sendi`, header included.
    pub max_sendi_size: usize,
    /// Tail of an RDMA-pipelined message sent by send/receive.
    pub rdma_pipeline_send_length: usize,
    /// Size of each put of the RDMA pipeline.
    pub rdma_pipeline_frag_size: usize,
    /// Messages up to this size use RDMA directly, not the RDMA pipeline.
    pub min_rdma_pipeline_size: usize,
    /// Higher wins: a peer reachable by a BTL of higher exclusivity uses
    /// only the BTLs of that exclusivity for eager messages.
    pub exclusivity: u32,
    /// Relative latency (lower is better), for ordering eager BTLs.
    pub latency: u32,
    /// Bandwidth in MB/s, the weight for striping.
    pub bandwidth: u32,
}

impl Limits {
    /// The limit parameters in the order [`Limits::register`] registers
    /// them: `(suffix, is_size, help)`.
    pub const PARAMS: [(&'static str, bool, &'static str); 10] = [
        (
            "eager_limit",
            true,
            "largest eager message, PML header included",
        ),
        (
            "rndv_eager_limit",
            true,
            "data carried by a rendezvous header",
        ),
        (
            "max_send_size",
            true,
            "largest send/receive pipeline fragment",
        ),
        ("max_sendi_size", true, "largest immediate send (sendi)"),
        (
            "rdma_pipeline_send_length",
            true,
            "tail of an RDMA-pipelined message sent by send/receive",
        ),
        (
            "rdma_pipeline_frag_size",
            true,
            "size of each put of the RDMA pipeline",
        ),
        (
            "min_rdma_pipeline_size",
            true,
            "messages up to this size use RDMA directly",
        ),
        (
            "exclusivity",
            false,
            "priority among BTLs reaching the same peer (higher wins)",
        ),
        ("latency", false, "relative latency, lower is better"),
        (
            "bandwidth",
            false,
            "bandwidth in MB/s: the weight for striping",
        ),
    ];

    fn values(&self) -> [u64; 10] {
        [
            self.eager_limit as u64,
            self.rndv_eager_limit as u64,
            self.max_send_size as u64,
            self.max_sendi_size as u64,
            self.rdma_pipeline_send_length as u64,
            self.rdma_pipeline_frag_size as u64,
            self.min_rdma_pipeline_size as u64,
            u64::from(self.exclusivity),
            u64::from(self.latency),
            u64::from(self.bandwidth),
        ]
    }

    /// Registers `btl_<btl>_<limit>` for every limit, with these defaults.
    pub fn register(
        &self,
        reg: &mut oxmpi_runtime::mca::Registry,
        btl: &str,
    ) -> Result<(), oxmpi_runtime::mca::McaError> {
        use oxmpi_runtime::mca::ParamSpec;
        for ((suffix, is_size, help), default) in Self::PARAMS.iter().zip(self.values()) {
            let spec = if *is_size {
                ParamSpec::size("btl", btl, suffix, default)
            } else {
                ParamSpec::int("btl", btl, suffix, default as i64)
            };
            reg.register(spec.level(5).help(*help))?;
        }
        Ok(())
    }

    /// Reads the values of a resolved registry (after [`Limits::register`]).
    pub fn from_registry(
        reg: &oxmpi_runtime::mca::Registry,
        btl: &str,
    ) -> Result<Limits, oxmpi_runtime::mca::McaError> {
        let mut v = [0u64; 10];
        for (slot, (suffix, is_size, _)) in v.iter_mut().zip(Self::PARAMS.iter()) {
            let name = format!("btl_{btl}_{suffix}");
            *slot = if *is_size {
                reg.get_size(&name)?
            } else {
                reg.get_int(&name)?.max(0) as u64
            };
        }
        let us = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
        let u32_ = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
        Ok(Limits {
            eager_limit: us(v[0]),
            rndv_eager_limit: us(v[1]),
            max_send_size: us(v[2]),
            max_sendi_size: us(v[3]),
            rdma_pipeline_send_length: us(v[4]),
            rdma_pipeline_frag_size: us(v[5]),
            min_rdma_pipeline_size: us(v[6]),
            exclusivity: u32_(v[7]),
            latency: u32_(v[8]),
            bandwidth: u32_(v[9]),
        })
    }
}

/// What a BTL learns of a peer when asked whether it can reach it.
#[derive(Clone, Copy, Debug)]
pub struct PeerInfo<'a> {
    /// The peer's rank in the job.
    pub rank: u32,
    /// Whether the peer shares this node.
    pub local: bool,
    /// The peer's business card for this BTL, if it published one.
    pub card: Option<&'a [u8]>,
}

/// A remote key: what a peer needs to reach registered memory, small and
/// fixed-size so it travels in a PML header without allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RemoteKey {
    len: u8,
    bytes: [u8; RemoteKey::MAX],
}

impl std::fmt::Debug for RemoteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RemoteKey({:02x?})", self.as_bytes())
    }
}

impl RemoteKey {
    /// The largest key any BTL may use.
    pub const MAX: usize = 40;

    /// A key from bytes; `None` when longer than [`RemoteKey::MAX`].
    pub fn new(bytes: &[u8]) -> Option<RemoteKey> {
        if bytes.len() > Self::MAX {
            return None;
        }
        let mut k = RemoteKey {
            len: bytes.len() as u8,
            bytes: [0; Self::MAX],
        };
        k.bytes[..bytes.len()].copy_from_slice(bytes);
        Some(k)
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// A key of `id` bytes followed by the part `[base, base+len)` it
    /// covers (little-endian u64s): the layout the `self` and simulated BTLs
    /// use. `None` when it would not fit.
    pub fn with_part(id: &[u8], base: u64, len: u64) -> Option<RemoteKey> {
        let mut b = [0u8; Self::MAX];
        let n = id.len().checked_add(16).filter(|&n| n <= Self::MAX)?;
        b[..id.len()].copy_from_slice(id);
        b[id.len()..id.len() + 8].copy_from_slice(&base.to_le_bytes());
        b[id.len() + 8..n].copy_from_slice(&len.to_le_bytes());
        RemoteKey::new(&b[..n])
    }

    /// Splits a [`RemoteKey::with_part`] key whose id has `id_len` bytes:
    /// `(id, base, len)`, or `None` when malformed.
    pub fn part(&self, id_len: usize) -> Option<(&[u8], u64, u64)> {
        let b = self.as_bytes();
        if b.len() != id_len.checked_add(16)? {
            return None;
        }
        let u64_at = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        Some((&b[..id_len], u64_at(id_len), u64_at(id_len + 8)))
    }

    /// The key for `[offset, offset+len)` of a [`RemoteKey::with_part`] key
    /// (offsets relative to its part), for [`Btl::sub_key`] of BTL `btl`;
    /// an error when malformed or outside the part.
    pub fn narrow(
        &self,
        btl: &str,
        id_len: usize,
        offset: usize,
        len: usize,
    ) -> Result<RemoteKey, BtlError> {
        let narrowed = || {
            let (id, base, plen) = self.part(id_len)?;
            let end = (offset as u64).checked_add(len as u64)?;
            if end > plen {
                return None;
            }
            RemoteKey::with_part(id, base.checked_add(offset as u64)?, len as u64)
        };
        narrowed().ok_or_else(|| {
            BtlError::Invalid(format!(
                "{btl}: {len} bytes at {offset} leave the registration"
            ))
        })
    }

    /// Resolves `[offset, offset+len)` of a [`RemoteKey::with_part`] key
    /// within the registered `region`: the key's part must lie inside the
    /// region and the range inside the part.
    pub fn resolve_part(
        &self,
        id_len: usize,
        region: MemRegion,
        offset: usize,
        len: usize,
    ) -> Result<MemRegion, String> {
        let (_, base, plen) = self.part(id_len).ok_or("malformed remote key")?;
        let end = (offset as u64).checked_add(len as u64);
        if end.map_or(true, |e| e > plen) {
            return Err(format!(
                "{len} bytes at offset {offset} do not fit a registration of {plen} bytes"
            ));
        }
        let start = usize::try_from(base)
            .ok()
            .and_then(|b| b.checked_add(offset))
            .ok_or("remote key outside its registration")?;
        region
            .slice(start, len)
            .ok_or_else(|| "remote key outside its registration".into())
    }
}

/// A registration of local memory with one BTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registration {
    /// The BTL's handle, for [`Btl::deregister_mem`].
    pub id: RegId,
    /// The registered memory.
    pub region: MemRegion,
    /// What a peer needs to reach it (travels in RGET/PUT headers).
    pub key: RemoteKey,
}

/// A BTL's registration handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegId(pub u64);

/// The result of a send that was accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// Done on return: the data was copied out; no completion will follow.
    Done,
    /// In flight: [`BtlSink::on_complete`] reports it, once, later.
    Pending,
}

/// Why a BTL operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BtlError {
    /// Out of resources right now: queue the operation and re-drive it
    /// from progress.
    #[error("no resources right now (retry from progress)")]
    NoResource,
    /// The peer is gone (its process exited or its connection failed).
    #[error("peer on endpoint {0:?} is gone: {1}")]
    PeerGone(Endpoint, String),
    /// The operation exceeds a limit of this BTL.
    #[error("{what} of {len} bytes exceeds this BTL's limit of {limit}")]
    TooLarge {
        /// Which operation.
        what: &'static str,
        /// Requested length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The BTL does not implement this operation (its caps say so).
    #[error("{0} is not supported by this BTL")]
    Unsupported(&'static str),
    /// A bad argument: unknown endpoint, a remote key or offset that does
    /// not fit, a malformed business card.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A system call failed.
    #[error("{0}")]
    Io(String),
}

/// What a receive expects of the next fragment from a peer, for
/// [`Btl::recv_small`]: the handler tag, and the first 16 bytes of the
/// fragment compared under a mask (bits set in `mask` must equal those in
/// `want`; the words are little-endian, as the fragment's bytes are).
/// Seed 004's tagged receive with ignore bits, over the PML's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmallMatch {
    /// The handler the fragment must be for.
    pub tag: AmTag,
    /// Bytes of header before the data (9 to 16): the fragment must hold
    /// at least this many, and only what follows is copied out.
    pub hdr_len: usize,
    /// The header's bits as expected: bytes 0..8 and 8..16.
    pub want: [u64; 2],
    /// Which bits of `want` count; none past `hdr_len` bytes may (those
    /// bytes are data, or nothing).
    pub mask: [u64; 2],
}

impl SmallMatch {
    /// Whether a fragment for handler `tag` holding `frag` matches, and its
    /// data (past the header) fits `room` bytes: the header's second word
    /// and the data, for a module that keeps fragments as bytes. Header
    /// bytes the fragment lacks read as zero.
    pub fn accepts<'a>(&self, tag: AmTag, frag: &'a [u8], room: usize) -> Option<(u64, &'a [u8])> {
        let data = frag.get(self.hdr_len..)?;
        let mut h = [0u8; 16];
        let n = frag.len().min(16);
        h[..n].copy_from_slice(&frag[..n]);
        let w0 = u64::from_le_bytes(h[..8].try_into().expect("8 bytes"));
        let w1 = u64::from_le_bytes(h[8..].try_into().expect("8 bytes"));
        (tag == self.tag && self.matches(w0, w1) && data.len() <= room).then_some((w1, data))
    }

    /// Whether a fragment whose first 16 bytes read as the little-endian
    /// words `w0`, `w1` matches (the handler tag aside).
    #[inline(always)]
    pub fn matches(&self, w0: u64, w1: u64) -> bool {
        (w0 ^ self.want[0]) & self.mask[0] == 0 && (w1 ^ self.want[1]) & self.mask[1] == 0
    }
}

/// What [`Btl::recv_small`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmallRecv {
    /// The next fragment matched: its data (after the header) was copied
    /// to the start of the buffer, and the fragment is consumed.
    Taken {
        /// The fragment's header bytes 8..16 (those past the header's
        /// length are not the header's).
        hdr1: u64,
        /// Bytes of data copied.
        len: usize,
    },
    /// Nothing from the peer is waiting.
    Empty,
    /// Something other than a matching small fragment is next (or the
    /// module does not take fragments this way): it stays, for
    /// [`Btl::progress_from`] or [`Btl::progress`].
    Other,
}

/// What a waiting thread may sleep on so that a module's peers wake it
/// ([`Btl::wakeup`]): a word in memory they reach, armed before the sleep.
///
/// The protocol, for the waiter: [`Doorbell::arm`], then a progress pass
/// over every module (and a look at what it waits for), then, only if that
/// found nothing, [`Doorbell::sleep`]; [`Doorbell::disarm`] after, whether
/// it slept or not. Every send that makes something arrive through the
/// module, once the doorbell is armed, wakes the sleeper (a lost wake-up
/// may cost the sleep's timeout, never more: the waiter looks again then).
/// Several threads of one process may arm and sleep at once.
pub trait Doorbell: Send + Sync {
    /// Arms it: from now on, what peers make arrive wakes a sleeper.
    fn arm(&self);
    /// Sleeps until a peer rings, `timeout` passes or a signal comes;
    /// returns at once if a peer rang since [`Doorbell::arm`]. Whether a
    /// peer rang.
    fn sleep(&self, timeout: std::time::Duration) -> bool;
    /// Ends one [`Doorbell::arm`] (the bell stays armed while another
    /// thread still sleeps on it).
    fn disarm(&self);
    /// Called with the engine's lock held, after the last look at the
    /// transports and before the lock is released for
    /// [`Doorbell::sleep`]: whether sleeping is safe now (`false`:
    /// something is pending; look again instead). A bell that peers ring
    /// needs nothing here ([`Doorbell::arm`] came before the last look);
    /// libfabric's wait objects do (`fi_trywait`).
    fn prepare(&self) -> bool {
        true
    }
}

/// How a waiting thread learns that something arrived through a module
/// ([`Btl::wakeup`]).
#[derive(Clone)]
pub enum Wakeup {
    /// Nothing arrives through it but what this process's own calls put
    /// there (the self BTL): no peer needs to wake anyone.
    Local,
    /// Peers' sends ring this doorbell.
    Bell(std::sync::Arc<dyn Doorbell>),
    /// Nothing wakes a sleeper: a waiter polls (sleeping a bounded time at
    /// most).
    Poll,
}

impl std::fmt::Debug for Wakeup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Wakeup::Local => "Local",
            Wakeup::Bell(_) => "Bell",
            Wakeup::Poll => "Poll",
        })
    }
}

/// A BTL's promise that no call into it (`sendi`, `send`, `put`, `get`,
/// `progress` and the others) calls back into the PML that drives it, other
/// than through the [`BtlSink`] its progress calls are given. A PML may
/// then run an operation on it without marking itself busy first (the
/// immediate send does: the mark costs stores on the small-message path),
/// which would make such a call back alias the PML's state.
///
/// # Safety
/// An implementation whose operations, or anything they call (user
/// callbacks included), reach the PML driving it, except through the sink
/// handed to `progress`/`progress_from`, makes the PML's unmarked paths
/// unsound. This crate's BTLs (self, sm, tcp, sim) implement it; a wrapper
/// may implement it only if what it wraps does and it adds no such call.
#[allow(unsafe_code)] // the promise is the trait: implementing it is unsafe
pub unsafe trait NeverReenters: Btl {}

/// Proof, made only from a type that implements [`NeverReenters`], that a
/// BTL never re-enters its PML: what [`Btl::no_reentry`] returns.
#[derive(Debug)]
pub struct NoReentry(());

impl NoReentry {
    /// The proof for `btl`, which promised it by implementing
    /// [`NeverReenters`].
    pub fn of<T: NeverReenters + ?Sized>(btl: &T) -> NoReentry {
        let _ = btl;
        NoReentry(())
    }
}

/// Whether `btl` promised never to call back into its PML
/// ([`NeverReenters`], through [`Btl::no_reentry`]).
pub fn never_reenters<B: ?Sized + Btl>(btl: &B) -> bool {
    btl.no_reentry().is_some()
}

/// Where a BTL's progress delivers what happened: the Rust form of
/// `btl_register`'s callbacks and of descriptors' completion callbacks.
pub trait BtlSink {
    /// A fragment arrived on `ep` for handler `tag`. `data` is valid only
    /// during this call (it may live in a shared-memory ring).
    fn on_recv(&mut self, ep: Endpoint, tag: AmTag, data: &[u8]);
    /// An operation named by `token` finished (a `Pending` send, a put or
    /// a get), successfully or not. Called exactly once per such token.
    fn on_complete(&mut self, token: Token, result: Result<(), BtlError>);
    /// The peer on `ep` is lost; operations in flight to it complete with
    /// errors through `on_complete`. `why` is [`BtlError::PeerGone`] when
    /// the peer's process or its connection went away, and any other error
    /// when this process cannot reach a peer that is alive (out of
    /// descriptors or memory): that peer does not learn of it, so the
    /// caller treats it as a fault of this process (ob1 ends the job, as
    /// Open MPI's `mca_pml_ob1_error_handler` does).
    fn on_peer_lost(&mut self, ep: Endpoint, why: &BtlError);
    /// This process can no longer serve peers that are alive, none in
    /// particular (a TCP listener out of descriptors cannot accept their
    /// connections): a fault of this process, which the caller treats as
    /// [`BtlSink::on_peer_lost`] with an error other than `PeerGone`.
    fn on_local_fault(&mut self, why: &BtlError) {
        let _ = why;
    }
    /// A put from the peer on `ep` was refused here (a module with
    /// [`Caps::PUT_ORDERED`]): its data was dropped, before anything that
    /// peer sent after it is delivered.
    fn on_put_refused(&mut self, ep: Endpoint) {
        let _ = ep;
    }
}

/// A send descriptor: a BTL-owned buffer for headers and packed data, and
/// possibly a reference to the user's data sent in place after it.
#[derive(Debug)]
pub struct Descriptor {
    /// The endpoint it was prepared for.
    pub ep: Endpoint,
    /// The BTL-owned bytes (header first).
    pub buf: Vec<u8>,
    /// User data sent in place after `buf` ([`Caps::SEND_INPLACE`]).
    pub inplace: Option<MemRegion>,
}

impl Descriptor {
    /// Total bytes this descriptor sends.
    pub fn len(&self) -> usize {
        self.buf.len() + self.inplace.map_or(0, |r| r.len())
    }

    /// Whether it sends nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A byte transfer layer module: one transport instance (for example one
/// network interface, or the shared-memory transport of this rank).
///
/// Methods take `&mut self`: a BTL is driven by one thread at a time (the
/// PML serialises access). No method blocks.
pub trait Btl {
    /// The component name (`self`, `sm`, `tcp`, `sim`).
    fn name(&self) -> &'static str;

    /// What this module implements.
    fn caps(&self) -> Caps;

    /// This module's limits.
    fn limits(&self) -> &Limits;

    /// This rank's business card for the modex (seed 002's
    /// `get_description`): what peers need to reach it.
    fn business_card(&self) -> Vec<u8>;

    /// Whether this module can reach a peer (seed 002's
    /// `match_description`): `Some(endpoint)` if so. Only records what the
    /// card says; any connection is made lazily, on first use.
    fn add_peer(&mut self, peer: &PeerInfo<'_>) -> Result<Option<Endpoint>, BtlError>;

    /// Forgets a peer; operations in flight to it complete with errors.
    fn del_peer(&mut self, ep: Endpoint);

    /// A descriptor with `len` writable bytes (header and packed data).
    fn alloc(&mut self, ep: Endpoint, len: usize) -> Result<Descriptor, BtlError>;

    /// Returns an unsent descriptor's resources.
    fn free(&mut self, desc: Descriptor);

    /// A descriptor with `reserve` writable bytes for headers followed by
    /// `data`: referenced in place when [`Caps::SEND_INPLACE`], else copied.
    fn prepare_src(
        &mut self,
        ep: Endpoint,
        reserve: usize,
        data: MemRegion,
    ) -> Result<Descriptor, BtlError>;

    /// Sends a descriptor to handler `tag`. On [`BtlError::NoResource`] the
    /// descriptor comes back with the error, for the caller to retry.
    fn send(
        &mut self,
        desc: Descriptor,
        tag: AmTag,
        token: Token,
    ) -> Result<SendOutcome, (Descriptor, BtlError)>;

    /// Sends the concatenation of `parts` to handler `tag`, complete on
    /// return, or fails with [`BtlError::NoResource`] having sent nothing.
    fn sendi(&mut self, ep: Endpoint, tag: AmTag, parts: &[&[u8]]) -> Result<(), BtlError>;

    /// Sends `hdr` followed by `len` bytes that `pack` writes straight into
    /// the BTL's own memory (the packed data of a non-contiguous buffer),
    /// complete on return: `Ok(true)`. `Ok(false)` sends nothing: this BTL
    /// has no such path, and the caller packs into [`Btl::alloc`]'s
    /// descriptor and calls [`Btl::send`] (the default).
    /// [`BtlError::NoResource`] sends nothing, for the caller to retry;
    /// other errors are as [`Btl::send`]'s. `pack` is called at most once,
    /// with exactly `len` bytes. The shared-memory BTL packs into its ring,
    /// saving the copy from the descriptor (Open MPI's sm packs into its
    /// shared fragments the same way).
    fn send_packed(
        &mut self,
        ep: Endpoint,
        tag: AmTag,
        hdr: &[u8],
        len: usize,
        pack: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, BtlError> {
        let _ = (ep, tag, hdr, len, pack);
        Ok(false)
    }

    /// The proof that this BTL never calls back into its PML, for a type
    /// that implements [`NeverReenters`] (`Some(NoReentry::of(self))`); the
    /// default, `None`, makes the PML mark itself busy around every call.
    fn no_reentry(&self) -> Option<NoReentry> {
        None
    }

    /// [`Btl::sendi`] of a protocol header followed by data, the PML's
    /// small-message form: whether it was sent (complete on return). False
    /// sends nothing and says nothing of why; the caller then takes a path
    /// that calls [`Btl::sendi`] or [`Btl::send`] and meets the error
    /// there. A BTL overrides it where the general form's list of parts
    /// costs the hot path (the shared-memory BTL writes both straight into
    /// its ring).
    #[inline]
    fn sendi_hdr(&mut self, ep: Endpoint, tag: AmTag, hdr: &[u8], data: &[u8]) -> bool {
        self.sendi(ep, tag, &[hdr, data]).is_ok()
    }

    /// Takes the next fragment from the peer on `ep` if it is a small one
    /// that `m` accepts and whose data fits `dst`: the receive side of
    /// [`Btl::sendi_hdr`], with no callback. The PML's small-message
    /// receive (`MPI_Recv`, `MPI_Irecv`) reads its source this way before
    /// anything else, when nothing else could claim the message first. [`SmallRecv::Other`] leaves the
    /// fragment where it is, for [`Btl::progress_from`] and
    /// [`Btl::progress`] to deliver in order, as every module that does not
    /// override this does for every fragment (the default). A module that
    /// overrides it takes at least every matching fragment of up to 56
    /// bytes (a cache line with the shared-memory ring's record header)
    /// that is next from the peer (the shared-memory and simulated ones
    /// take any size).
    #[inline]
    fn recv_small(&mut self, ep: Endpoint, m: &SmallMatch, dst: &mut [u8]) -> SmallRecv {
        let _ = (ep, m, dst);
        SmallRecv::Other
    }

    /// Registers memory for RDMA.
    fn register_mem(&mut self, region: MemRegion, access: Access)
        -> Result<Registration, BtlError>;

    /// A key for the part `[offset, offset+len)` of registration `reg`:
    /// remote offsets used with it count from `offset`, and the BTL refuses
    /// an access outside the part as it refuses one outside a registration.
    /// The registration cache hands these out for buffers inside a larger
    /// cached registration.
    fn sub_key(&self, reg: &Registration, offset: usize, len: usize)
        -> Result<RemoteKey, BtlError>;

    /// Ends a registration.
    fn deregister_mem(&mut self, id: RegId);

    /// RDMA write of `local` into the peer's registered memory `remote`
    /// at `remote_offset`.
    fn put(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError>;

    /// RDMA read of the peer's registered memory `remote` at
    /// `remote_offset` into `local`.
    fn get(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError>;

    /// Makes progress: delivers arrived fragments and completions to `sink`.
    /// Returns how many events it delivered.
    fn progress(&mut self, sink: &mut dyn BtlSink) -> usize;

    /// Hands the fragments that arrived from the peer on `ep`, and only
    /// those, to `take(tag, data)` (as [`BtlSink::on_recv`] would get them
    /// from [`Btl::progress`]), in order, until `take` returns false (it
    /// had what it wanted) or none is left. What a later `progress`
    /// delivers from that peer follows them. Returns how many it handed
    /// over.
    ///
    /// The PML calls it when a receive from that peer is about to be posted,
    /// so a message already here goes straight into the receive. A module
    /// that keeps no per-peer order of arrivals hands over nothing (the
    /// default); the fragments then come with the next `progress`.
    fn progress_from(&mut self, ep: Endpoint, take: &mut dyn FnMut(AmTag, &[u8]) -> bool) -> usize {
        let _ = (ep, take);
        0
    }

    /// Whether polling [`Btl::progress_from`] in a loop can see a peer's
    /// fragment arrive (the peer writes straight into memory this module
    /// reads, as shared memory does): a blocking receive then polls its
    /// source's channel alone for a while before it is posted. False by
    /// default (a module that hands nothing over, or whose arrivals need
    /// [`Btl::progress`]).
    fn polls_from_peer(&self) -> bool {
        false
    }

    /// How a thread that waits for what arrives through this module may
    /// sleep: [`Wakeup::Bell`] when peers' sends wake a sleeper on a
    /// [`Doorbell`] (the shared-memory BTL), [`Wakeup::Local`] when only
    /// this process puts anything there, [`Wakeup::Poll`] (the default)
    /// when nothing wakes a sleeper (a socket: the waiter sleeps a bounded
    /// time and polls again). Asked when a wait is about to sleep.
    fn wakeup(&self) -> Wakeup {
        Wakeup::Poll
    }

    /// Whether this module has anything in flight or pending that progress
    /// must drive (the progress engine polls only modules that do, and those
    /// that can receive).
    fn has_work(&self) -> bool;

    /// Whether nothing this module accepted is still to be sent or
    /// completed: what finalize waits for before closing. A module that can
    /// merely receive (so [`Btl::has_work`] stays true) is drained.
    fn is_drained(&self) -> bool {
        !self.has_work()
    }
}
