//! The `ofi` MTL (seed 004): MPI point-to-point over libfabric's tagged
//! interface (`fi_tagged(3)`) on a reliable-datagram endpoint, the
//! provider doing the matching.
//!
//! **Loading.** libfabric is opened at run time (`dlopen` of
//! `libfabric.so.1`, parameter `mtl_ofi_library`), not linked: oxmpi then
//! builds without libfabric's headers or a `-sys` crate, installs and runs
//! where libfabric is absent ([`OpenError::NotAvailable`], on which the PML
//! falls back to ob1), and the library is opened once per process. The
//! binding (`ofi/ffi.rs`, the module's only `unsafe`) mirrors the 1.17 structs
//! and calls the `static inline` API through the objects' ops tables.
//!
//! **Opening** ([`OfiMtl::open`]): `fi_getinfo` for `FI_TAGGED` with
//! `FI_SOURCE` and `FI_DIRECTED_RECV` (again without the latter if no
//! provider has it), `FI_EP_RDM`, send-after-send ordering, `FI_CONTEXT` /
//! `FI_CONTEXT2` (every operation has its own `fi_context2`),
//! `FI_THREAD_DOMAIN`; the first provider the include / exclude lists admit
//! ([`in_list`]: an entry names a provider when it equals its name or one
//! of its `;`-separated parts, so `tcp` names `tcp;ofi_rxm`, as in Open
//! MPI). The tag mode is resolved then (`auto`: `ofi_tag_full` with CQ
//! data and directed receives), the provider's reserved high tag bits
//! (leading zeros of `mem_tag_format`) taken from the communicator id.
//!
//! **Specialised paths.** What the provider and mode fix at open — the
//! source rank in the tag or in the CQ data (`fi_tsend` or
//! `fi_tsenddata`, where a completion's source is read from), directed
//! receives or `FI_ADDR_UNSPEC` — is chosen once: [`Ops`] holds function
//! pointers to functions monomorphised over zero-sized marker types
//! ([`SourceInTag`], [`SourceInData`]), so no message branches on it.
//!
//! **Small sends.** A standard, buffered or ready send of at most the
//! provider's `inject_size` bytes, with no operation queued before it, is
//! `fi_tinject` (`fi_tinjectdata`): the provider copies it before the call
//! returns and writes no completion, so the send completes inside the call
//! ([`Posted::Done`], no event), as Open MPI's MTL does. `-FI_EAGAIN` makes
//! it an ordinary send.
//!
//! **Protocols.** A synchronous send sets the sync bit of the tag and
//! posts a 0-byte receive for the acknowledgement (the ack bit, the same
//! fields, directed at the peer); the receiver, on matching a message with
//! the sync bit, injects that acknowledgement to the sender's address (the
//! completion's `FI_SOURCE` address); the send completes when both its send
//! and that receive have. `MPI_Iprobe` is `fi_trecvmsg(FI_PEEK)`, polled
//! until its completion (found) or `FI_ENOMSG` error (not found);
//! `MPI_Improbe` adds `FI_CLAIM`, and the matched receive is
//! `fi_trecvmsg(FI_CLAIM)` on the same context; cancel is `fi_cancel`,
//! whose outcome is waited for (at most a second) so that the call can say
//! whether it cancelled.
//!
//! **Lost peers.** libfabric's RDM providers do not report that a peer
//! process died. The runtime does: [`Mtl::del_peers`], or a
//! [`PeerFailures`] handle ([`OfiMtl::peer_failures`]) that another thread
//! or the launcher's notification may use, marks a peer lost; the MTL then
//! cancels the receives directed at it (their events are
//! `Failed(PeerLost)`) and the acknowledgement receives of synchronous
//! sends to it (each such send fails once its own send completion arrives,
//! so that its buffer is no longer the provider's); later sends to it and
//! receives from it fail at once. Plain sends already handed to the
//! provider end as the provider ends them.
//!
//! **Scalable endpoints.** `mtl_ofi_enable_sep=1` opens a scalable
//! endpoint with `mtl_ofi_num_ctxts` context pairs (bounded by the
//! provider's `max_ep_tx_ctx` / `max_ep_rx_ctx`; a provider with at most
//! one is an error), each with its own completion queue; with
//! `mtl_ofi_thread_grouping=1` a communicator's traffic uses context
//! `cid % contexts`, sent to the peer's receive context of that number
//! (`fi_rx_addr`), else context 0.

mod ffi;
mod params;

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oxmpi_btl::btl::Doorbell;
use oxmpi_btl::mem::MemRegion;

use crate::mtl::{
    Event, Limits, MessageId, Mtl, MtlError, MtlSink, Outcome, Posted, RecvInfo, SendMode, Source,
    TagSel, Token,
};
use crate::tag::{Fields, Layout, Proto, TagMode};
use ffi::{CqEntry, CqError, Endpoint, Lib, ProvInfo};
pub use params::{
    in_list, params, OfiParams, OpenError, TagModeParam, DEFAULT_EXCLUDE, DEFAULT_LIBRARY,
};

const CARD_MAGIC: &[u8] = b"OXOFI1";

/// How long a call waits for a completion it needs (a probe's, a
/// cancel's outcome).
const CALL_WAIT: Duration = Duration::from_secs(1);

/// A handle through which the runtime reports peers that died (see the
/// module doc): the MTL acts on them at its next progress.
#[derive(Clone, Debug, Default)]
pub struct PeerFailures(Arc<Reports>);

#[derive(Debug, Default)]
struct Reports {
    ranks: Mutex<Vec<u32>>,
    /// Set after a report is pushed: progress looks at this flag alone
    /// (no lock) while nothing is reported.
    any: AtomicBool,
}

impl PeerFailures {
    /// World rank `rank` is gone.
    pub fn report(&self, rank: u32) {
        self.0
            .ranks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(rank);
        self.0.any.store(true, Ordering::Release);
    }

    /// The ranks reported since the last call (none without a lock when
    /// none was).
    #[inline]
    fn take(&self) -> Vec<u32> {
        // A report pushes before it sets the flag: one that set it before
        // this swap is in the list taken below, one after leaves it set.
        if !self.0.any.load(Ordering::Relaxed) || !self.0.any.swap(false, Ordering::Acquire) {
            return Vec::new();
        }
        std::mem::take(&mut *self.0.ranks.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A hasher for the MTL's own small integer keys (ranks, communicator
/// ids): one multiplication per word, where SipHash's hundred
/// instructions bought nothing (no key comes from outside the process).
#[derive(Clone, Copy, Default)]
struct IdHasher(u64);

const ID_MUL: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(ID_MUL);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(ID_MUL);
    }
}

type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

/// What a probe found.
#[derive(Clone, Debug)]
enum PeekState {
    Waiting,
    Found(RecvInfo, u64),
    NotFound,
    Failed(String),
}

/// An operation the provider had no room for (`-FI_EAGAIN`), posted again
/// at progress, in order.
#[derive(Clone, Copy, Debug)]
enum Deferred {
    Send {
        lane: usize,
        peer: u32,
        buf: MemRegion,
        dest: u64,
        rank: u32,
        tag: u64,
        ctx: usize,
    },
    Recv {
        lane: usize,
        buf: MemRegion,
        src: u64,
        tag: u64,
        ignore: u64,
        ctx: usize,
    },
}

impl Deferred {
    fn ctx(&self) -> usize {
        match *self {
            Deferred::Send { ctx, .. } | Deferred::Recv { ctx, .. } => ctx,
        }
    }
}

/// The request behind one operation context.
#[derive(Clone, Debug)]
enum Slot {
    Free,
    /// A standard, buffered or ready send.
    Send {
        token: Token,
    },
    /// A synchronous send: its send part and its acknowledgement receive
    /// (slot `ack`).
    Ssend {
        token: Token,
        peer: u32,
        sent: bool,
        acked: bool,
        ack: usize,
        failure: Option<MtlError>,
        /// The call failed: no event.
        silent: bool,
    },
    /// The acknowledgement receive of synchronous send `send`.
    Ack {
        send: usize,
        lane: usize,
        lost: bool,
    },
    /// A receive.
    Recv {
        token: Token,
        peer: Option<u32>,
        lane: usize,
        lost: bool,
        room: usize,
    },
    /// A probe waiting for its answer.
    Peek(PeekState),
    /// A message claimed by a matched probe, for `imrecv`.
    Claimed {
        serial: u32,
        src: u64,
        lane: usize,
        /// The probe's source address, tag and ignore mask (given again
        /// with `FI_CLAIM`, as some providers match the claim on them).
        want: (u64, u64, u64),
    },
    /// The receive of a claimed message.
    ClaimRecv {
        token: Token,
        src: u64,
        lane: usize,
        room: usize,
    },
}

/// Where the source rank travels: a marker type the specialised paths are
/// monomorphised over.
pub trait SourceWire: 'static {
    /// In the CQ data (`ofi_tag_full`), else in the tag.
    const IN_DATA: bool;
}

/// `ofi_tag_1` / `ofi_tag_2`: the source rank is a field of the tag.
pub struct SourceInTag;
impl SourceWire for SourceInTag {
    const IN_DATA: bool = false;
}

/// `ofi_tag_full`: the source rank is the remote CQ data.
pub struct SourceInData;
impl SourceWire for SourceInData {
    const IN_DATA: bool = true;
}

/// The paths chosen at open (see the module doc).
#[derive(Clone, Copy)]
pub struct Ops {
    /// Posts a send: endpoint, lane, buffer, destination, source rank,
    /// network tag, context.
    send: fn(&Endpoint, usize, MemRegion, u64, u32, u64, usize) -> isize,
    /// Injects a send (complete on return 0, no completion): endpoint,
    /// lane, buffer, destination, source rank, network tag.
    inject: fn(&Endpoint, usize, MemRegion, u64, u32, u64) -> isize,
    /// The source rank of a received message: its tag's fields, its CQ
    /// data.
    source: fn(&Fields, u64) -> u32,
    /// Whether a receive from a named source is directed at the peer's
    /// address (else `FI_ADDR_UNSPEC`, the tag naming the source).
    directed_named: bool,
}

fn send_path<W: SourceWire>(
    ep: &Endpoint,
    lane: usize,
    buf: MemRegion,
    dest: u64,
    rank: u32,
    tag: u64,
    ctx: usize,
) -> isize {
    if W::IN_DATA {
        ep.tsend(lane, buf, Some(u64::from(rank)), dest, tag, ctx)
    } else {
        ep.tsend(lane, buf, None, dest, tag, ctx)
    }
}

fn inject_path<W: SourceWire>(
    ep: &Endpoint,
    lane: usize,
    buf: MemRegion,
    dest: u64,
    rank: u32,
    tag: u64,
) -> isize {
    if W::IN_DATA {
        ep.tinject(lane, buf, Some(u64::from(rank)), dest, tag)
    } else {
        ep.tinject(lane, buf, None, dest, tag)
    }
}

fn source_path<W: SourceWire>(f: &Fields, data: u64) -> u32 {
    if W::IN_DATA {
        data as u32
    } else {
        f.source.unwrap_or(0)
    }
}

impl Ops {
    fn of<W: SourceWire>() -> Ops {
        let _: PhantomData<W> = PhantomData;
        Ops {
            send: send_path::<W>,
            inject: inject_path::<W>,
            source: source_path::<W>,
            directed_named: W::IN_DATA,
        }
    }
}

/// A receive's (tag, ignore), its source address, and the peer it names.
type Criteria = ((u64, u64), u64, Option<u32>);

/// The `ofi` MTL: one libfabric endpoint of this process.
pub struct OfiMtl {
    ep: Endpoint,
    prov: ProvInfo,
    layout: Layout,
    ops: Ops,
    /// The provider has `FI_DIRECTED_RECV` (acknowledgement receives are
    /// directed at the peer).
    directed: bool,
    thread_grouping: bool,
    /// Sends shorter than this are injected (the provider's
    /// `inject_size` + 1; 0 when it has none).
    inject_below: usize,
    card: Vec<u8>,
    peers: IdMap<u32, u64>,
    lost: IdSet<u32>,
    comms: IdSet<u32>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    serial: u32,
    events: VecDeque<Event>,
    /// Operations waiting for room, in posting order.
    deferred: VecDeque<Deferred>,
    /// Acknowledgements the provider had no room for: lane, address, tag.
    pending_acks: VecDeque<(usize, u64, u64)>,
    entries: Vec<CqEntry>,
    srcs: Vec<u64>,
    failures: PeerFailures,
    /// [`Mtl::close`] was called: the endpoint is closed.
    closed: bool,
    /// The queues' wait descriptors as a doorbell (`mtl_ofi_wait_fd`).
    bell: Option<Arc<OfiBell>>,
}

/// The endpoint's queues as a [`Doorbell`]: `prepare` is `fi_trywait`
/// (under the engine's lock, after the last read of the queues), `sleep`
/// polls the wait descriptors. Nothing to arm: the provider signals the
/// descriptors itself.
struct OfiBell(ffi::CqBell);

impl Doorbell for OfiBell {
    fn arm(&self) {}

    fn prepare(&self) -> bool {
        self.0.trywait()
    }

    fn sleep(&self, timeout: std::time::Duration) -> bool {
        self.0.wait(timeout)
    }

    fn disarm(&self) {}
}

fn call_err(lib: &Lib, e: ffi::CallError) -> OpenError {
    OpenError::Call {
        call: e.call.to_owned(),
        why: if e.code == 0 {
            "the provider does not implement it".to_owned()
        } else {
            lib.strerror(e.code)
        },
    }
}

/// The length of a message that did not fit a `room`-byte buffer: the
/// bytes delivered and the overflow (`olen`). Providers disagree on `len`
/// (fi_cq(3): the bytes placed; `ofi_rxm`: the message's length), hence
/// the delivered bytes are taken as at most `room`.
fn trunc_len(e: &CqError, room: usize) -> usize {
    e.len.min(room) + e.olen
}

/// The high tag bits a provider keeps: the leading zeros of its
/// `mem_tag_format` (0 when it gives none or the generic format).
fn reserved_bits(mem_tag_format: u64) -> u32 {
    if mem_tag_format == 0 {
        0
    } else {
        mem_tag_format.leading_zeros()
    }
}

impl OfiMtl {
    /// Opens the MTL: loads libfabric, chooses a provider and opens an
    /// endpoint on it (see the module doc).
    pub fn open(p: &OfiParams) -> Result<OfiMtl, OpenError> {
        p.validate()?;
        // `ofi_rxm` over `tcp` (1.17) places eager messages straight into
        // the posted buffer ("dynamic receive buffers"), and then reports a
        // message that did not fit without its length, CQ data or overflow:
        // MPI's truncation error needs the length. Its bounce buffers
        // report it. Read by libfabric when its providers initialise (the
        // first fi_getinfo), so set before; a user's setting is kept.
        if std::env::var_os("FI_OFI_RXM_ENABLE_DYN_RBUF").is_none() {
            std::env::set_var("FI_OFI_RXM_ENABLE_DYN_RBUF", "0");
        }
        let lib = Lib::load(&p.library).map_err(|why| OpenError::NotAvailable {
            library: p.library.clone(),
            why,
        })?;
        if lib.version() < ffi::MIN_VERSION {
            return Err(OpenError::TooOld {
                version: format!("{}.{}", lib.version() >> 16, lib.version() & 0xffff),
            });
        }
        let base = ffi::FI_TAGGED | ffi::FI_SOURCE;
        let mut found: Vec<String> = Vec::new();
        let mut chosen = None;
        for caps in [base | ffi::FI_DIRECTED_RECV, base] {
            let list = lib.getinfo(caps).map_err(|code| OpenError::Call {
                call: "fi_getinfo".into(),
                why: lib.strerror(code),
            })?;
            let provs = list.providers();
            for pi in &provs {
                if !found.contains(&pi.prov_name) {
                    found.push(pi.prov_name.clone());
                }
            }
            if let Some(i) = provs.iter().position(|pi| p.admits(&pi.prov_name)) {
                chosen = Some((list, i, provs[i].clone(), caps));
                break;
            }
        }
        let Some((mut list, mut index, prov, caps)) = chosen else {
            let list = if p.provider_include.is_empty() {
                format!("mtl_ofi_provider_exclude={}", p.provider_exclude)
            } else {
                format!("mtl_ofi_provider_include={}", p.provider_include)
            };
            return Err(OpenError::NoProvider { list, found });
        };
        let directed = prov.caps & ffi::FI_DIRECTED_RECV != 0;
        let mode = params::resolve_tag_mode(
            p.tag_mode,
            params::TagCaps {
                cq_data_size: prov.cq_data_size,
                directed_recv: directed,
            },
            &prov.prov_name,
        )?;
        let layout = Layout::new(mode, reserved_bits(prov.mem_tag_format))
            .map_err(|e| OpenError::Unsupported(format!("provider {}: {e}", prov.prov_name)))?;
        let sep = if p.enable_sep {
            let max = prov.max_ep_tx_ctx.min(prov.max_ep_rx_ctx);
            if max <= 1 {
                return Err(OpenError::Unsupported(format!(
                    "mtl_ofi_enable_sep=1 needs scalable endpoints, and provider {} supports \
                     {} transmit / {} receive contexts per endpoint: set mtl_ofi_enable_sep=0 \
                     or choose another provider",
                    prov.prov_name, prov.max_ep_tx_ctx, prov.max_ep_rx_ctx
                )));
            }
            // The same provider and domain, with named receive contexts
            // (`fi_rx_addr`).
            let named =
                lib.getinfo(caps | ffi::FI_NAMED_RX_CTX)
                    .map_err(|code| OpenError::Call {
                        call: "fi_getinfo".into(),
                        why: lib.strerror(code),
                    })?;
            let Some(i) = named.providers().iter().position(|pi| {
                (&pi.prov_name, &pi.fabric, &pi.domain)
                    == (&prov.prov_name, &prov.fabric, &prov.domain)
            }) else {
                return Err(OpenError::Unsupported(format!(
                    "mtl_ofi_enable_sep=1 needs FI_NAMED_RX_CTX, which provider {} does not offer",
                    prov.prov_name
                )));
            };
            (list, index) = (named, i);
            Some(p.num_ctxts.min(max))
        } else {
            None
        };
        let ep = Endpoint::open(&list, index, sep, p.wait_fd).map_err(|e| call_err(&lib, e))?;
        let bell = ep.bell().map(|b| Arc::new(OfiBell(b)));
        let addr = ep.name().map_err(|e| call_err(&lib, e))?;
        let mut card = CARD_MAGIC.to_vec();
        card.push(prov.prov_name.len().min(255) as u8);
        card.extend_from_slice(&prov.prov_name.as_bytes()[..prov.prov_name.len().min(255)]);
        card.extend_from_slice(&addr);
        tracing::info!(
            provider = %prov.prov_name,
            fabric = %prov.fabric,
            domain = %prov.domain,
            tag_mode = mode.name(),
            contexts = ep.lanes(),
            wait_fd = bell.is_some(),
            "ofi MTL open"
        );
        let ops = match mode {
            TagMode::Full => Ops::of::<SourceInData>(),
            TagMode::Tag1 | TagMode::Tag2 => Ops::of::<SourceInTag>(),
        };
        let n = p.progress_event_cnt;
        let inject_below = if prov.inject_size > 0 {
            prov.inject_size + 1
        } else {
            0
        };
        Ok(OfiMtl {
            inject_below,
            ep,
            prov,
            layout,
            ops,
            directed,
            thread_grouping: p.thread_grouping,
            card,
            peers: IdMap::default(),
            lost: IdSet::default(),
            comms: IdSet::default(),
            slots: Vec::new(),
            free: Vec::new(),
            serial: 0,
            events: VecDeque::new(),
            deferred: VecDeque::new(),
            pending_acks: VecDeque::new(),
            entries: vec![CqEntry::default(); n],
            srcs: vec![0; n],
            failures: PeerFailures::default(),
            closed: false,
            bell,
        })
    }

    /// The provider in use (`tcp;ofi_rxm`).
    pub fn provider(&self) -> &str {
        &self.prov.prov_name
    }

    /// The tag layout in use.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Contexts of the (scalable) endpoint: 1 unless `mtl_ofi_enable_sep`.
    pub fn contexts(&self) -> usize {
        self.ep.lanes()
    }

    /// The handle through which the runtime reports dead peers.
    pub fn peer_failures(&self) -> PeerFailures {
        self.failures.clone()
    }

    fn lane(&self, cid: u32) -> usize {
        if self.thread_grouping {
            cid as usize % self.ep.lanes()
        } else {
            0
        }
    }

    fn alloc(&mut self, s: Slot) -> usize {
        if self.free.is_empty() {
            let first = self.ep.grow_contexts();
            let n = self.ep.contexts();
            self.slots.resize(n, Slot::Free);
            self.free.extend((first..n).rev());
        }
        let i = self.free.pop().expect("grown");
        self.slots[i] = s;
        i
    }

    fn release(&mut self, i: usize) {
        self.slots[i] = Slot::Free;
        self.free.push(i);
    }

    fn event(&mut self, token: Token, outcome: Outcome) {
        self.events.push_back(Event { token, outcome });
    }

    fn peer_addr(&self, peer: u32) -> Result<u64, MtlError> {
        self.peers
            .get(&peer)
            .copied()
            .ok_or(MtlError::UnknownPeer(peer))
    }

    fn check_comm(&self, cid: u32) -> Result<(), MtlError> {
        if self.comms.contains(&cid) {
            Ok(())
        } else {
            Err(MtlError::UnknownComm(cid))
        }
    }

    /// A receive's (tag, ignore), source address and the named peer.
    fn criteria(&self, cid: u32, src: Source, tag: TagSel) -> Result<Criteria, MtlError> {
        self.check_comm(cid)?;
        let t = match tag {
            TagSel::Any => None,
            TagSel::Value(v) => Some(v),
        };
        let lane = self.lane(cid);
        Ok(match src {
            Source::Any => (
                self.layout.recv_match(cid, None, t)?,
                ffi::FI_ADDR_UNSPEC,
                None,
            ),
            Source::Rank { rank, peer } => {
                let m = self.layout.recv_match(cid, Some(rank), t)?;
                let a = match self.peers.get(&peer) {
                    Some(&a) => a,
                    None if self.lost.contains(&peer) => ffi::FI_ADDR_UNSPEC,
                    None => return Err(MtlError::UnknownPeer(peer)),
                };
                let addr = if self.ops.directed_named {
                    self.ep.rx_addr(a, lane)
                } else {
                    ffi::FI_ADDR_UNSPEC
                };
                (m, addr, Some(peer))
            }
        })
    }

    /// Runs `op` until the provider has room for it (progressing
    /// meanwhile): its final return code.
    fn post(&mut self, mut op: impl FnMut(&Endpoint) -> isize) -> isize {
        let start = Instant::now();
        loop {
            let rc = op(&self.ep);
            if rc != -(ffi::FI_EAGAIN as isize) || start.elapsed() > CALL_WAIT {
                return rc;
            }
            self.drain();
        }
    }

    fn issue(&self, d: Deferred) -> isize {
        match d {
            Deferred::Send {
                lane,
                buf,
                dest,
                rank,
                tag,
                ctx,
                ..
            } => (self.ops.send)(&self.ep, lane, buf, dest, rank, tag, ctx),
            Deferred::Recv {
                lane,
                buf,
                src,
                tag,
                ignore,
                ctx,
            } => self.ep.trecv(lane, buf, src, tag, ignore, ctx),
        }
    }

    /// Posts `d`, or queues it behind earlier operations waiting for room
    /// (the provider's `-FI_EAGAIN`: a connection being set up, a full
    /// queue); the error of a failed post.
    fn submit(&mut self, d: Deferred) -> Result<(), isize> {
        if self.deferred.is_empty() {
            let rc = self.issue(d);
            if rc == -(ffi::FI_EAGAIN as isize) {
                self.deferred.push_back(d);
            } else if rc < 0 {
                return Err(rc);
            }
        } else {
            self.deferred.push_back(d);
        }
        Ok(())
    }

    /// Posts the waiting operations that now fit; a failed one fails its
    /// request.
    fn retry_deferred(&mut self) {
        while let Some(&d) = self.deferred.front() {
            let rc = self.issue(d);
            if rc == -(ffi::FI_EAGAIN as isize) {
                return;
            }
            self.deferred.pop_front();
            if rc < 0 {
                let e = CqError {
                    context: 0,
                    len: 0,
                    data: 0,
                    tag: 0,
                    olen: 0,
                    err: (-rc) as i32,
                    prov_msg: String::new(),
                };
                self.fail_slot(d.ctx(), e);
            }
        }
    }

    /// Takes a not-yet-posted operation off the queue: whether it was
    /// there.
    fn undefer(&mut self, ctx: usize) -> bool {
        match self.deferred.iter().position(|d| d.ctx() == ctx) {
            Some(k) => {
                self.deferred.remove(k);
                true
            }
            None => false,
        }
    }

    fn provider_err(&self, call: &str, rc: isize) -> MtlError {
        MtlError::Provider(format!(
            "{call} on {}: {}",
            self.prov.prov_name,
            self.ep.lib().strerror(rc)
        ))
    }

    fn info(&self, tag: u64, data: u64, len: usize, truncated: bool) -> (RecvInfo, Proto) {
        let f = self.layout.decode(tag);
        (
            RecvInfo {
                source: (self.ops.source)(&f, data),
                tag: f.tag,
                len,
                truncated,
            },
            f.proto,
        )
    }

    /// Acknowledges a synchronous send with network tag `tag` to `addr`.
    fn ack(&mut self, lane: usize, addr: u64, tag: u64) {
        let t = self.layout.ack_tag(tag);
        let dest = self.ep.rx_addr(addr, lane);
        let rc = self.ep.tinject_empty(lane, dest, t);
        if rc == -(ffi::FI_EAGAIN as isize) {
            self.pending_acks.push_back((lane, dest, t));
        } else if rc < 0 {
            tracing::warn!(
                "ofi MTL: acknowledgement of a synchronous send failed: {}",
                self.ep.lib().strerror(rc)
            );
        }
    }

    fn retry_acks(&mut self) {
        for _ in 0..self.pending_acks.len() {
            let Some((lane, dest, t)) = self.pending_acks.pop_front() else {
                break;
            };
            let rc = self.ep.tinject_empty(lane, dest, t);
            if rc == -(ffi::FI_EAGAIN as isize) {
                self.pending_acks.push_back((lane, dest, t));
            }
        }
    }

    /// One half of synchronous send `i` ended (`failure`: how, if badly).
    fn ssend_part(&mut self, i: usize, send_done: bool, failure: Option<MtlError>) {
        let Slot::Ssend {
            token,
            sent,
            acked,
            failure: f,
            silent,
            ..
        } = &mut self.slots[i]
        else {
            return;
        };
        if send_done {
            *sent = true;
        } else {
            *acked = true;
        }
        if f.is_none() {
            *f = failure;
        }
        if *sent && *acked {
            let (token, outcome, silent) = (
                *token,
                f.take().map_or(Outcome::Sent, Outcome::Failed),
                *silent,
            );
            self.release(i);
            if !silent {
                self.event(token, outcome);
            }
        }
    }

    /// Reads every lane's completion queue until a read finds it empty or
    /// returns less than a full batch; the number of completions handled.
    fn drain(&mut self) -> usize {
        let mut entries = std::mem::take(&mut self.entries);
        let mut srcs = std::mem::take(&mut self.srcs);
        let mut total = 0;
        for lane in 0..self.ep.lanes() {
            loop {
                let n = self.ep.cq_readfrom(lane, &mut entries, &mut srcs);
                if n > 0 {
                    for k in 0..n as usize {
                        self.complete(lane, &entries[k], srcs[k]);
                    }
                    total += n as usize;
                    // Fewer than asked for: the queue was empty. Another
                    // read would only run the provider's progress again
                    // (a third of a pass on `shm`); the next pass reads
                    // what arrives meanwhile.
                    if (n as usize) < entries.len() {
                        break;
                    }
                } else if n == -(ffi::FI_EAVAIL as isize) {
                    match self.ep.cq_readerr(lane) {
                        Some(e) => {
                            self.complete_err(e);
                            total += 1;
                        }
                        None => break,
                    }
                } else {
                    if n != -(ffi::FI_EAGAIN as isize) {
                        tracing::warn!("ofi MTL: fi_cq_readfrom: {}", self.ep.lib().strerror(n));
                    }
                    break;
                }
            }
        }
        self.entries = entries;
        self.srcs = srcs;
        total
    }

    fn slot_of(&self, ctx: usize) -> Option<usize> {
        self.ep
            .ctx_index(ctx)
            .filter(|&i| i < self.slots.len() && !matches!(self.slots[i], Slot::Free))
    }

    fn complete(&mut self, lane: usize, e: &CqEntry, src: u64) {
        let Some(i) = self.slot_of(e.context()) else {
            tracing::warn!("ofi MTL: a completion for no request of ours");
            return;
        };
        match self.slots[i].clone() {
            Slot::Send { token } => {
                self.release(i);
                self.event(token, Outcome::Sent);
            }
            Slot::Ssend { .. } => self.ssend_part(i, true, None),
            Slot::Ack { send, .. } => {
                self.release(i);
                self.ssend_part(send, false, None);
            }
            Slot::Recv { token, .. } => {
                self.release(i);
                let (info, proto) = self.info(e.tag, e.data, e.len, false);
                if proto == Proto::Sync {
                    self.ack(lane, src, e.tag);
                }
                self.event(token, Outcome::Received(info));
            }
            Slot::ClaimRecv {
                token,
                src: from,
                lane,
                ..
            } => {
                self.release(i);
                let (info, proto) = self.info(e.tag, e.data, e.len, false);
                if proto == Proto::Sync {
                    let a = if src == ffi::FI_ADDR_UNSPEC {
                        from
                    } else {
                        src
                    };
                    self.ack(lane, a, e.tag);
                }
                self.event(token, Outcome::Received(info));
            }
            Slot::Peek(_) => {
                let (info, _) = self.info(e.tag, e.data, e.len, false);
                self.slots[i] = Slot::Peek(PeekState::Found(info, src));
            }
            Slot::Claimed { .. } | Slot::Free => {
                tracing::warn!("ofi MTL: an unexpected completion of a claimed message");
            }
        }
    }

    fn complete_err(&mut self, e: CqError) {
        let Some(i) = self.slot_of(e.context) else {
            tracing::warn!("ofi MTL: an error completion for no request of ours: {e:?}");
            return;
        };
        self.fail_slot(i, e);
    }

    /// Request `i` ended with error completion `e`.
    fn fail_slot(&mut self, i: usize, e: CqError) {
        let msg = || {
            MtlError::Provider(format!(
                "{}: {}{}",
                self.prov.prov_name,
                self.ep.lib().strerror(e.err as isize),
                if e.prov_msg.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", e.prov_msg)
                }
            ))
        };
        match self.slots[i].clone() {
            Slot::Send { token } => {
                let m = msg();
                self.release(i);
                self.event(token, Outcome::Failed(m));
            }
            Slot::Ssend { .. } => {
                let m = msg();
                self.ssend_part(i, true, Some(m));
            }
            Slot::Ack { send, lost, .. } => {
                let f = match self.slots[send] {
                    Slot::Ssend { peer, .. } if lost => MtlError::PeerLost(peer),
                    _ => msg(),
                };
                self.release(i);
                self.ssend_part(send, false, Some(f));
            }
            Slot::Recv {
                token,
                peer,
                lost,
                lane,
                room,
            } => {
                let outcome = if e.err == ffi::FI_ETRUNC {
                    let (info, proto) = self.info(e.tag, e.data, trunc_len(&e, room), true);
                    if proto == Proto::Sync {
                        match peer.and_then(|p| self.peers.get(&p).copied()) {
                            Some(a) => self.ack(lane, a, e.tag),
                            None => tracing::warn!(
                                "ofi MTL: a truncated synchronous message from an unnamed \
                                 source cannot be acknowledged (no source address in an \
                                 error completion)"
                            ),
                        }
                    }
                    Outcome::Received(info)
                } else if e.err == ffi::FI_ECANCELED {
                    match peer {
                        Some(p) if lost => Outcome::Failed(MtlError::PeerLost(p)),
                        _ => Outcome::Cancelled,
                    }
                } else {
                    Outcome::Failed(msg())
                };
                self.release(i);
                self.event(token, outcome);
            }
            Slot::ClaimRecv {
                token,
                src,
                lane,
                room,
            } => {
                let outcome = if e.err == ffi::FI_ETRUNC {
                    let (info, proto) = self.info(e.tag, e.data, trunc_len(&e, room), true);
                    if proto == Proto::Sync {
                        self.ack(lane, src, e.tag);
                    }
                    Outcome::Received(info)
                } else {
                    Outcome::Failed(msg())
                };
                self.release(i);
                self.event(token, outcome);
            }
            Slot::Peek(_) => {
                self.slots[i] = Slot::Peek(if e.err == ffi::FI_ENOMSG {
                    PeekState::NotFound
                } else if e.err == ffi::FI_ETRUNC {
                    // `shm` answers a probe (no buffer) that found a message
                    // with a truncation of it.
                    let (info, _) = self.info(e.tag, e.data, trunc_len(&e, 0), false);
                    PeekState::Found(info, ffi::FI_ADDR_UNSPEC)
                } else {
                    PeekState::Failed(msg().to_string())
                });
            }
            Slot::Claimed { .. } | Slot::Free => {
                tracing::warn!("ofi MTL: an unexpected error completion of a claimed message");
            }
        }
    }

    /// Peer `r` is gone (see the module doc).
    fn peer_lost(&mut self, r: u32) {
        self.lost.insert(r);
        self.peers.remove(&r);
        // Operations not yet posted are dropped (a send to a dead peer
        // would wait for room forever, holding up everything behind it).
        let dead: Vec<usize> = self
            .deferred
            .iter()
            .filter(|d| match **d {
                Deferred::Send { peer, .. } => peer == r,
                Deferred::Recv { ctx, .. } => match self.slots[ctx] {
                    Slot::Recv { peer, .. } => peer == Some(r),
                    Slot::Ack { send, .. } => {
                        matches!(self.slots[send], Slot::Ssend { peer, .. } if peer == r)
                    }
                    _ => false,
                },
            })
            .map(Deferred::ctx)
            .collect();
        self.deferred.retain(|d| !dead.contains(&d.ctx()));
        for i in dead {
            let lost = MtlError::PeerLost(r);
            match self.slots[i].clone() {
                Slot::Send { token } => {
                    self.release(i);
                    self.event(token, Outcome::Failed(lost));
                }
                Slot::Ssend { .. } => self.ssend_part(i, true, Some(lost)),
                Slot::Ack { send, .. } => {
                    self.release(i);
                    self.ssend_part(send, false, Some(lost));
                }
                Slot::Recv { token, .. } => {
                    self.release(i);
                    self.event(token, Outcome::Failed(lost));
                }
                _ => {}
            }
        }
        for i in 0..self.slots.len() {
            match self.slots[i] {
                Slot::Recv {
                    peer: Some(p),
                    lane,
                    ref mut lost,
                    ..
                } if p == r && !*lost => {
                    *lost = true;
                    self.ep.cancel(lane, i);
                }
                Slot::Ssend {
                    peer,
                    acked: false,
                    ack,
                    ..
                } if peer == r => {
                    if let Slot::Ack {
                        lane, ref mut lost, ..
                    } = self.slots[ack]
                    {
                        if !*lost {
                            *lost = true;
                            self.ep.cancel(lane, ack);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Posts a probe with `flags` and waits for its answer.
    fn peek(
        &mut self,
        cid: u32,
        src: Source,
        tag: TagSel,
        flags: u64,
    ) -> Result<Option<(usize, RecvInfo, u64)>, MtlError> {
        let ((t, ignore), addr, _) = self.criteria(cid, src, tag)?;
        let lane = self.lane(cid);
        self.drain();
        let i = self.alloc(Slot::Peek(PeekState::Waiting));
        let rc = self.post(|ep| ep.trecvmsg(lane, None, addr, t, ignore, i, flags));
        if rc < 0 {
            self.release(i);
            return Err(self.provider_err("fi_trecvmsg(FI_PEEK)", rc));
        }
        let start = Instant::now();
        loop {
            self.drain();
            match &self.slots[i] {
                Slot::Peek(PeekState::Waiting) if start.elapsed() < CALL_WAIT => continue,
                Slot::Peek(PeekState::Waiting) => {
                    // The context stays the provider's: leave the slot taken.
                    return Err(MtlError::Provider(format!(
                        "{}: no answer to FI_PEEK within {CALL_WAIT:?}",
                        self.prov.prov_name
                    )));
                }
                Slot::Peek(PeekState::Found(info, src)) => {
                    let r = (i, *info, *src);
                    return Ok(Some(r));
                }
                Slot::Peek(PeekState::NotFound) => {
                    self.release(i);
                    return Ok(None);
                }
                Slot::Peek(PeekState::Failed(m)) => {
                    let m = m.clone();
                    self.release(i);
                    return Err(MtlError::Provider(m));
                }
                _ => unreachable!("a probe's slot holds a probe"),
            }
        }
    }
}

impl Mtl for OfiMtl {
    fn busy(&self) -> bool {
        !self.deferred.is_empty() || !self.pending_acks.is_empty()
    }

    fn doorbell(&self) -> Option<Arc<dyn Doorbell>> {
        if self.closed {
            return None;
        }
        self.bell.clone().map(|b| b as Arc<dyn Doorbell>)
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.bell = None;
        self.deferred.clear();
        self.pending_acks.clear();
        self.ep.close();
    }

    fn name(&self) -> &'static str {
        "ofi"
    }

    fn limits(&self) -> Limits {
        Limits {
            max_tag: self.layout.max_tag(),
            max_cid: self.layout.max_cid(),
            max_rank: self.layout.max_source(),
        }
    }

    fn business_card(&self) -> Vec<u8> {
        self.card.clone()
    }

    fn add_peers(&mut self, peers: &[(u32, &[u8])]) -> Result<(), MtlError> {
        if self.closed {
            return Err(MtlError::Closed);
        }
        let mut addrs = Vec::with_capacity(peers.len());
        for &(rank, card) in peers {
            let bad = |why: String| MtlError::BadCard { rank, why };
            let rest = card
                .strip_prefix(CARD_MAGIC)
                .ok_or_else(|| bad("not an ofi MTL business card".into()))?;
            let (&n, rest) = rest.split_first().ok_or_else(|| bad("truncated".into()))?;
            if rest.len() <= n as usize {
                return Err(bad("truncated".into()));
            }
            let (prov, addr) = rest.split_at(n as usize);
            if prov != self.prov.prov_name.as_bytes() {
                return Err(bad(format!(
                    "provider {} is not ours ({})",
                    String::from_utf8_lossy(prov),
                    self.prov.prov_name
                )));
            }
            addrs.push((rank, addr));
        }
        for (rank, addr) in addrs {
            let a = self.ep.av_insert(addr).map_err(|e| MtlError::BadCard {
                rank,
                why: format!(
                    "{}: {}",
                    e.call,
                    if e.code == 0 {
                        String::new()
                    } else {
                        self.ep.lib().strerror(e.code)
                    }
                ),
            })?;
            self.peers.insert(rank, a);
            self.lost.remove(&rank);
        }
        Ok(())
    }

    fn del_peers(&mut self, ranks: &[u32]) {
        if self.closed {
            for r in ranks {
                self.peers.remove(r);
            }
            return;
        }
        for &r in ranks {
            self.peer_lost(r);
            // Removed, not lost: later use is an unknown peer.
            self.lost.remove(&r);
        }
    }

    fn add_comm(&mut self, cid: u32) -> Result<(), MtlError> {
        if self.closed {
            return Err(MtlError::Closed);
        }
        self.layout.recv_match(cid, None, None)?;
        self.comms.insert(cid);
        Ok(())
    }

    fn del_comm(&mut self, cid: u32) {
        self.comms.remove(&cid);
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
        let sync = mode == SendMode::Synchronous;
        let t = self.layout.send_tag(
            cid,
            rank,
            tag,
            if sync { Proto::Sync } else { Proto::Plain },
        )?;
        let addr = match self.peer_addr(peer) {
            Ok(a) => a,
            Err(_) if self.lost.contains(&peer) => {
                self.event(token, Outcome::Failed(MtlError::PeerLost(peer)));
                return Ok(Posted::Pending);
            }
            Err(e) => return Err(e),
        };
        let lane = self.lane(cid);
        let dest = self.ep.rx_addr(addr, lane);
        if !sync {
            // Small enough to inject, with nothing queued before it (order):
            // complete now, no completion entry.
            if data.len() < self.inject_below && self.deferred.is_empty() {
                let rc = (self.ops.inject)(&self.ep, lane, data, dest, rank, t);
                if rc == 0 {
                    return Ok(Posted::Done);
                }
                if rc != -(ffi::FI_EAGAIN as isize) {
                    return Err(self.provider_err("fi_tinject", rc));
                }
                // No room now: an ordinary send, queued if need be.
            }
            let i = self.alloc(Slot::Send { token });
            if let Err(rc) = self.submit(Deferred::Send {
                lane,
                peer,
                buf: data,
                dest,
                rank,
                tag: t,
                ctx: i,
            }) {
                self.release(i);
                return Err(self.provider_err("fi_tsend", rc));
            }
            return Ok(Posted::Pending);
        }
        // The acknowledgement's receive first, then the send.
        let ack_src = if self.directed {
            dest
        } else {
            ffi::FI_ADDR_UNSPEC
        };
        let a = self.alloc(Slot::Ack {
            send: usize::MAX,
            lane,
            lost: false,
        });
        let s = self.alloc(Slot::Ssend {
            token,
            peer,
            sent: false,
            acked: false,
            ack: a,
            failure: None,
            silent: false,
        });
        self.slots[a] = Slot::Ack {
            send: s,
            lane,
            lost: false,
        };
        let ack_tag = self.layout.ack_tag(t);
        if let Err(rc) = self.submit(Deferred::Recv {
            lane,
            buf: MemRegion::EMPTY,
            src: ack_src,
            tag: ack_tag,
            ignore: 0,
            ctx: a,
        }) {
            self.release(a);
            self.release(s);
            return Err(self.provider_err("fi_trecv (acknowledgement)", rc));
        }
        if let Err(rc) = self.submit(Deferred::Send {
            lane,
            peer,
            buf: data,
            dest,
            rank,
            tag: t,
            ctx: s,
        }) {
            // No event: the call fails. The acknowledgement's receive is
            // cancelled; its completion frees both slots.
            if let Slot::Ssend { sent, silent, .. } = &mut self.slots[s] {
                *sent = true;
                *silent = true;
            }
            self.ep.cancel(lane, a);
            return Err(self.provider_err("fi_tsend", rc));
        }
        Ok(Posted::Pending)
    }

    fn inject_limit(&self) -> usize {
        self.inject_below.saturating_sub(1)
    }

    #[inline]
    fn inject(&mut self, cid: u32, peer: u32, rank: u32, tag: i32, data: MemRegion) -> bool {
        if self.closed {
            return false;
        }
        if data.len() >= self.inject_below || !self.deferred.is_empty() {
            return false;
        }
        let Some(&addr) = self.peers.get(&peer) else {
            return false;
        };
        if !self.comms.contains(&cid) {
            return false;
        }
        let Ok(t) = self.layout.send_tag(cid, rank, tag, Proto::Plain) else {
            return false;
        };
        let lane = self.lane(cid);
        let dest = self.ep.rx_addr(addr, lane);
        (self.ops.inject)(&self.ep, lane, data, dest, rank, t) == 0
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
        let ((t, ignore), addr, peer) = self.criteria(cid, src, tag)?;
        if let Some(p) = peer.filter(|p| !self.lost.is_empty() && self.lost.contains(p)) {
            self.event(token, Outcome::Failed(MtlError::PeerLost(p)));
            return Ok(());
        }
        let lane = self.lane(cid);
        let i = self.alloc(Slot::Recv {
            token,
            peer,
            lane,
            lost: false,
            room: buf.len(),
        });
        if let Err(rc) = self.submit(Deferred::Recv {
            lane,
            buf,
            src: addr,
            tag: t,
            ignore,
            ctx: i,
        }) {
            self.release(i);
            return Err(self.provider_err("fi_trecv", rc));
        }
        Ok(())
    }

    fn iprobe(&mut self, cid: u32, src: Source, tag: TagSel) -> Result<Option<RecvInfo>, MtlError> {
        if self.closed {
            return Err(MtlError::Closed);
        }
        Ok(self.peek(cid, src, tag, ffi::FI_PEEK)?.map(|(i, info, _)| {
            self.release(i);
            info
        }))
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
        let lane = self.lane(cid);
        let ((t, ignore), addr, _) = self.criteria(cid, src, tag)?;
        let Some((i, info, from)) = self.peek(cid, src, tag, ffi::FI_PEEK | ffi::FI_CLAIM)? else {
            return Ok(None);
        };
        self.serial = self.serial.wrapping_add(1);
        self.slots[i] = Slot::Claimed {
            serial: self.serial,
            src: from,
            lane,
            want: (addr, t, ignore),
        };
        Ok(Some((
            MessageId(u64::from(self.serial) << 32 | i as u64),
            info,
        )))
    }

    fn imrecv(&mut self, msg: MessageId, buf: MemRegion, token: Token) -> Result<(), MtlError> {
        if self.closed {
            return Err(MtlError::Closed);
        }
        let i = (msg.0 & 0xffff_ffff) as usize;
        let serial = (msg.0 >> 32) as u32;
        let (src, lane, want) = match self.slots.get(i) {
            Some(&Slot::Claimed {
                serial: s,
                src,
                lane,
                want,
            }) if s == serial => (src, lane, want),
            _ => return Err(MtlError::UnknownMessage(msg)),
        };
        self.slots[i] = Slot::ClaimRecv {
            token,
            src,
            lane,
            room: buf.len(),
        };
        let (addr, t, ignore) = want;
        let rc = self.post(|ep| ep.trecvmsg(lane, Some(buf), addr, t, ignore, i, ffi::FI_CLAIM));
        if rc < 0 {
            // Still claimed: the caller may try again.
            if let Some(Slot::ClaimRecv { .. }) = self.slots.get(i) {
                self.slots[i] = Slot::Claimed {
                    serial,
                    src,
                    lane,
                    want,
                };
            }
            return Err(self.provider_err("fi_trecvmsg(FI_CLAIM)", rc));
        }
        Ok(())
    }

    fn cancel(&mut self, token: Token) -> bool {
        if self.closed {
            return false;
        }
        // A receive not completed yet holds its slot (found by a scan:
        // cancel is rare, and no map is kept per receive for it).
        let recv_of = |s: &Slot| matches!(*s, Slot::Recv { token: t, .. } if t == token);
        let Some(i) = self.slots.iter().position(recv_of) else {
            return false;
        };
        let Slot::Recv { lane, .. } = self.slots[i] else {
            return false;
        };
        if self.undefer(i) {
            self.release(i);
            self.event(token, Outcome::Cancelled);
            return true;
        }
        if self.ep.cancel(lane, i) != 0 {
            return false;
        }
        let start = Instant::now();
        while recv_of(&self.slots[i]) {
            if start.elapsed() > CALL_WAIT {
                tracing::warn!(
                    "ofi MTL: no outcome of fi_cancel within {CALL_WAIT:?}: its event will tell"
                );
                return false;
            }
            self.drain();
        }
        self.events
            .iter()
            .rev()
            .any(|e| e.token == token && e.outcome == Outcome::Cancelled)
    }

    fn progress(&mut self, sink: &mut dyn MtlSink) -> usize {
        if self.closed {
            return 0;
        }
        for r in self.failures.take() {
            self.peer_lost(r);
        }
        if !self.pending_acks.is_empty() {
            self.retry_acks();
        }
        if !self.deferred.is_empty() {
            self.retry_deferred();
        }
        self.drain();
        let n = self.events.len();
        while let Some(e) = self.events.pop_front() {
            sink.on_event(e);
        }
        n
    }
}
