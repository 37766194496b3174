//! The shared-memory BTL (`sm`): ranks of one node talk through rings in
//! shared memory, and move large data with one copy through CMA.
//!
//! # Pieces
//!
//! * Every rank owns one [`Segment`] (a memfd, see [`super::segment`]) that
//!   holds, in its data region:
//!
//!   ```text
//!     0  control block (128 B): magic, version, local index, local count,
//!        inbox offset and length, table offset and slots (u64 each)
//!   128  its Inbox: one ring per other local rank (local_count - 1 rings;
//!        the sender of local index s writes ring s - (s > me))
//!     T  the registration table (REGISTRATION_SLOTS slots of 4 u64:
//!        id, address, length, access), T = round_up(128 + inbox, 128)
//!   ```
//!
//!   plus the segment's header page, whose state word tells peers that the
//!   owner dropped its module ([`Mapping::owner_closed`]).
//! * [`SmBtl::add_peer`] only parses the peer's card; the first operation
//!   towards the peer binds it: maps its segment, attaches the producer side
//!   of our ring in its inbox, probes CMA against the peer's probe word and
//!   opens a pidfd to watch the peer's process.
//! * `sendi`/`send` copy the message straight into the ring (records take
//!   32-byte slots, two to a cache line: up to 24 bytes with the ring's
//!   header is one slot); a full ring is
//!   `NoResource`. The data path makes no system call, takes no lock and
//!   allocates nothing (descriptor buffers come from a free list).
//! * `put`/`get` with CMA: the initiator checks the remote key against the
//!   owner's registration table (in the owner's segment: a stale, forged or
//!   out-of-range key is `Invalid` and nothing is touched), then does one
//!   `process_vm_writev`/`readv` of the whole range; its completion is
//!   reported by the next `progress`. Without CMA to that peer (the peer's or
//!   our single copy disabled, or the probe failed) the same calls are
//!   emulated by copy-in/copy-out over the rings: CONTROL records (see
//!   [`super::ring`]) carry a get request and the data back, or a put's
//!   data and its acknowledgement; the owner checks the key against its own
//!   registrations. They never fail for lack of CMA.
//!
//! # Peer loss
//!
//! A peer is lost when its segment says it was closed or its process is gone
//! (pidfd readable, or `kill(pid, 0)` = `ESRCH` where pidfds are missing).
//! This is checked only when something is stalled: when a send to the peer
//! is refused for lack of room (the state word at every refusal, the process
//! every 256th), and on one peer in turn every 4096 progress calls that found
//! nothing to do. A lost peer is reported once through
//! [`BtlSink::on_peer_lost`], its emulated operations complete with
//! [`BtlError::PeerGone`], and every later operation towards it is
//! `PeerGone`. What it sent before is still delivered.
//!
//! # Business card (72 bytes, little endian)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `"OXSM"` |
//! | 4 | 1 | version (1) |
//! | 5 | 1 | flags: bit 0 = the owner accepts single copy (CMA) |
//! | 6 | 1 | log2 of the ring capacity |
//! | 7 | 1 | zero |
//! | 8 | 4 | local index |
//! | 12 | 4 | local count |
//! | 16 | 8 | CMA probe word address |
//! | 24 | 8 | CMA probe word value |
//! | 32 | 40 | the segment card ([`SegmentCard`], holds the pid) |
//!
//! A card with another magic or version is not an sm card this build
//! understands (`add_peer` answers `None`); a card with the right magic and
//! version but a bad field is [`BtlError::Invalid`].
//!
//! # Remote keys (32 bytes)
//!
//! `id u64 | address u64 | length u64 | pid u32 | table slot u32` (slot
//! `u32::MAX`: the table was full, the key is served by copy-in/copy-out).
#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use rustix::io::Errno;

use super::ring::{self, FastTx, Inbox, InboxReceiver, Ring, RingProducer, SendError};
use super::segment::{Mapping, Segment, SegmentCard, SegmentKind, CARD_LEN, DATA_OFFSET};
use crate::btl::{
    Access, AmTag, Btl, BtlError, BtlSink, Caps, Descriptor, Endpoint, Limits, PeerInfo, RegId,
    Registration, RemoteKey, SendOutcome, SmallMatch, SmallRecv, Token,
};
use crate::cma::{self, CmaError, CmaPeer, ProbeWord};
use crate::mem::{copy_bytes, MemRegion};

/// [`SmConfig::evict_ahead`]'s default, in lines: measured on this
/// project's machine (`docs/performance.md`, "Evicting ahead").
pub const DEFAULT_EVICT_AHEAD: usize = 12;

/// Default limits of the sm BTL. `max_send_size` and `max_sendi_size` are
/// clamped at construction to what one ring record carries
/// ([`Ring::max_payload`]: 65592 bytes with the 256 KiB rings of a node of
/// up to [`BIG_RING_RANKS`] ranks, 16440 with 64 KiB rings), and the eager
/// limits to `max_send_size`. Eager up to 32 KiB of data with 256 KiB rings
/// (one-way bandwidth in windows of 64: 32 KiB 6.3 -> 19.4 GB/s; 32 KiB
/// latency 4.8 -> 2.2 us; measured here against single copy above 16 KiB).
/// Not 64 KiB: through the ring it was faster in the machine's usual state
/// (latency 5.4 -> 4.1 us) but slower in its slow cross-core state (6.6 ->
/// 9.7 us, Open MPI 7.0), where a single copy moves each line once.
///
/// The eager limit is as large as one record, up to 32 KiB: on this kind of
/// machine a single-copy (CMA) transfer costs about 1.5 us of system call
/// before the first byte moves, while copying a message in and out of a
/// ring wins up to there in every state (8 KiB latency 3.3 -> 0.8 us, 4 KiB
/// bandwidth 1.7 -> 10.5 GB/s, measured here). It counts the PML's headers,
/// so 32 KiB of data is eager with 256 KiB rings (16 KiB with 64 KiB
/// rings). The immediate
/// send takes 512 bytes with the headers, so the PML's default
/// `pml_ob1_sendi_limit` of 256 data bytes goes through it whole (256-byte
/// latency 0.227 -> 0.205 us, measured here).
pub const DEFAULT_LIMITS: Limits = Limits {
    eager_limit: 32 * 1024 + 64,
    rndv_eager_limit: 32 * 1024 + 64,
    max_send_size: 64 * 1024 + 64,
    max_sendi_size: 512,
    rdma_pipeline_send_length: 1 << 62,
    rdma_pipeline_frag_size: 1 << 62,
    min_rdma_pipeline_size: 0,
    exclusivity: 65535,
    latency: 1,
    bandwidth: 20_000,
};

/// Local ranks up to which each ring has [`BIG_RING`] bytes by default
/// (`btl_sm_ring_size` 0); more ranks get [`ring::DEFAULT_CAPACITY`]:
/// 16 ranks take 15 x 256 KiB = 3.75 MiB of rings per rank, 64 ranks 63 x
/// 64 KiB = 3.94 MiB.
pub const BIG_RING_RANKS: u32 = 16;
/// The default ring size on a node of up to [`BIG_RING_RANKS`] ranks.
pub const BIG_RING: usize = 256 * 1024;

/// The default data bytes of each ring for `local_count` local ranks (see
/// [`BIG_RING_RANKS`]).
pub fn default_ring_capacity(local_count: u32) -> usize {
    if local_count <= BIG_RING_RANKS {
        BIG_RING
    } else {
        ring::DEFAULT_CAPACITY
    }
}

/// Slots of the registration table in each segment: registrations beyond
/// this many at once are still served, by copy-in/copy-out.
pub const REGISTRATION_SLOTS: usize = 1024;

/// Progress calls that found nothing to do between two liveness checks (of
/// one peer each).
pub const SWEEP_EVERY: u32 = 4096;

/// Length of an sm business card.
pub const SM_CARD_LEN: usize = 32 + CARD_LEN;

const CARD_MAGIC: [u8; 4] = *b"OXSM";
const CARD_VERSION: u8 = 1;
const CARD_FLAG_CMA: u8 = 1;

const CONTROL_BYTES: usize = 128;
const CTL_MAGIC: u64 = u64::from_le_bytes(*b"oxmpiSMB");
/// Bumped with any change to the segment's or the rings' layout (2: ring
/// records on 32-byte slots), so that builds that disagree fail to attach
/// instead of misreading each other.
const CTL_VERSION: u64 = 2;
const CTL_WORDS: usize = 8;
const SLOT_WORDS: usize = 4;
const NO_SLOT: u32 = u32::MAX;
const KEY_LEN: usize = 32;
const ACCESS_READ: u64 = 1;
const ACCESS_WRITE: u64 = 2;

/// Checks of the process of a peer whose ring stays full, in refusals.
const REFUSALS_PER_PROCESS_CHECK: u32 = 256;
/// Spare descriptor buffers kept for reuse.
const MAX_SPARE: usize = 16;
/// Longest error text carried by a copy-in/copy-out reply.
const MAX_REPLY_TEXT: usize = 200;

// CONTROL record tags of the copy-in/copy-out RDMA emulation.
const C_GET_REQ: u8 = 1;
const C_GET_DATA: u8 = 2;
const C_GET_NAK: u8 = 3;
const C_PUT_START: u8 = 4;
const C_PUT_DATA: u8 = 5;
const C_PUT_ACK: u8 = 6;

// `sender_ep` markers.
const EP_NONE: u32 = u32::MAX;
const EP_DELETED: u32 = u32::MAX - 1;

/// The configuration of one sm module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmConfig {
    /// This rank's index among the ranks of its node.
    pub local_index: u32,
    /// How many ranks share the node.
    pub local_count: u32,
    /// Data bytes of each ring (a power of two, 256 B to 4 MiB).
    pub ring_capacity: usize,
    /// Limits (clamped at construction, see [`DEFAULT_LIMITS`]).
    pub limits: Limits,
    /// Whether to use CMA single copy for put/get (also needs CMA to work
    /// on this node and with each peer).
    pub single_copy: bool,
    /// Whether small records may go through the pair lines' fast boxes
    /// (see `ring`'s module doc); both ranks of a pair must allow it.
    pub pair_boxes: bool,
    /// How many lines ahead of its head a ring's reader evicts lines the
    /// writer has not written yet (`ring`'s module doc, "Evicting ahead");
    /// 0: never.
    pub evict_ahead: usize,
}

impl SmConfig {
    /// The defaults for local rank `local_index` of `local_count`.
    pub fn new(local_index: u32, local_count: u32) -> SmConfig {
        SmConfig {
            local_index,
            local_count,
            ring_capacity: default_ring_capacity(local_count),
            limits: DEFAULT_LIMITS,
            single_copy: true,
            pair_boxes: true,
            evict_ahead: DEFAULT_EVICT_AHEAD,
        }
    }

    /// Registers `btl_sm_*`: the limits ([`Limits::register`]),
    /// `btl_sm_ring_size`, `btl_sm_single_copy`, `btl_sm_pair_boxes` and
    /// `btl_sm_evict_ahead`.
    pub fn register_params(
        reg: &mut oxmpi_runtime::mca::Registry,
    ) -> Result<(), oxmpi_runtime::mca::McaError> {
        use oxmpi_runtime::mca::ParamSpec;
        DEFAULT_LIMITS.register(reg, "sm")?;
        reg.register(ParamSpec::size("btl", "sm", "ring_size", 0).level(4).help(
            "data bytes of each shared-memory ring (one per pair of local ranks; a \
                     power of two from 256 B to 4 MiB; a record carries up to a quarter of it); \
                     0: 256 KiB on a node of up to 16 ranks, 64 KiB beyond",
        ))?;
        reg.register(
            ParamSpec::bool("btl", "sm", "single_copy", true)
                .level(4)
                .help("use single-copy transfers (CMA) for put and get between local ranks"),
        )?;
        reg.register(
            ParamSpec::bool("btl", "sm", "pair_boxes", true)
                .level(4)
                .help(
                    "let a small message go through the cache line both ranks of a pair \
                     write (one fast box per direction) when its box is empty, instead of \
                     the ring: one line moves per message in a ping-pong",
                ),
        )?;
        reg.register(
            ParamSpec::int("btl", "sm", "evict_ahead", DEFAULT_EVICT_AHEAD as i64)
                .level(5)
                .help(
                    "as a ring's reader finishes a cache line of small records, evict \
                     (CLFLUSHOPT) the line this many lines ahead unless the writer already \
                     wrote it, so that the \
                     writer does not wait to take it back from the reader's caches \
                     (0: never; at most an eighth of the ring; ignored without CLFLUSHOPT)",
                ),
        )?;
        Ok(())
    }

    /// The configuration of a resolved registry (after
    /// [`SmConfig::register_params`]).
    pub fn from_registry(
        reg: &oxmpi_runtime::mca::Registry,
        local_index: u32,
        local_count: u32,
    ) -> Result<SmConfig, oxmpi_runtime::mca::McaError> {
        Ok(SmConfig {
            local_index,
            local_count,
            ring_capacity: match reg.get_size("btl_sm_ring_size")? {
                0 => default_ring_capacity(local_count),
                n => usize::try_from(n).unwrap_or(usize::MAX),
            },
            limits: Limits::from_registry(reg, "sm")?,
            single_copy: reg.get_bool("btl_sm_single_copy")?,
            pair_boxes: reg.get_bool("btl_sm_pair_boxes")?,
            evict_ahead: {
                let name = "btl_sm_evict_ahead";
                let v = reg.get_int(name)?;
                usize::try_from(v).map_err(|_| oxmpi_runtime::mca::McaError::InvalidValue {
                    name: name.into(),
                    value: v.to_string(),
                    source_desc: reg
                        .param(name)
                        .map_or_else(String::new, |p| p.source().describe(name)),
                    reason: "a count of cache lines, 0 or more".into(),
                })?
            },
        })
    }
}

/// Where things are in a segment's data region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    inbox_off: usize,
    inbox_len: usize,
    table_off: usize,
    table_slots: usize,
    total: usize,
}

impl Layout {
    fn new(local_count: u32, ring_capacity: usize) -> Result<Layout, BtlError> {
        let senders = (local_count as usize).saturating_sub(1);
        let inbox_len = Inbox::required_bytes(senders, ring_capacity)
            .map_err(|e| BtlError::Invalid(format!("sm: {e}")))?;
        let table_off = (CONTROL_BYTES + inbox_len).div_ceil(128) * 128;
        Ok(Layout {
            inbox_off: CONTROL_BYTES,
            inbox_len,
            table_off,
            table_slots: REGISTRATION_SLOTS,
            total: table_off + REGISTRATION_SLOTS * SLOT_WORDS * 8,
        })
    }
}

/// The ring index of sender `sender` in the inbox of `receiver`.
fn ring_index(sender: u32, receiver: u32) -> usize {
    (sender - u32::from(sender > receiver)) as usize
}

/// A peer's card, parsed.
#[derive(Clone, Copy, Debug)]
struct SmCard {
    cma: bool,
    ring_capacity: usize,
    local_index: u32,
    local_count: u32,
    probe_addr: u64,
    probe_value: u64,
    seg: SegmentCard,
}

impl SmCard {
    fn to_bytes(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SM_CARD_LEN);
        out.extend_from_slice(&CARD_MAGIC);
        out.push(CARD_VERSION);
        out.push(if self.cma { CARD_FLAG_CMA } else { 0 });
        out.push(self.ring_capacity.trailing_zeros() as u8);
        out.push(0);
        out.extend_from_slice(&self.local_index.to_le_bytes());
        out.extend_from_slice(&self.local_count.to_le_bytes());
        out.extend_from_slice(&self.probe_addr.to_le_bytes());
        out.extend_from_slice(&self.probe_value.to_le_bytes());
        out.extend_from_slice(&self.seg.to_bytes());
        out
    }

    /// `Ok(None)`: not an sm card of this version.
    fn parse(bytes: &[u8]) -> Result<Option<SmCard>, BtlError> {
        if bytes.len() < 5 || bytes[..4] != CARD_MAGIC || bytes[4] != CARD_VERSION {
            return Ok(None);
        }
        let bad = |why: &str| BtlError::Invalid(format!("malformed sm card: {why}"));
        if bytes.len() != SM_CARD_LEN {
            return Err(bad("wrong length"));
        }
        let u32_at = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let flags = bytes[5];
        if flags & !CARD_FLAG_CMA != 0 || bytes[7] != 0 {
            return Err(bad("reserved bits set"));
        }
        let log2 = u32::from(bytes[6]);
        let ring_capacity = 1usize
            .checked_shl(log2)
            .filter(|&c| Ring::check_capacity(c).is_ok())
            .ok_or_else(|| bad("ring capacity"))?;
        let local_index = u32_at(8);
        let local_count = u32_at(12);
        if local_count == 0 || local_index >= local_count {
            return Err(bad("local index out of range"));
        }
        let seg = SegmentCard::from_bytes(&bytes[32..]).map_err(|e| bad(&e.to_string()))?;
        Ok(Some(SmCard {
            cma: flags & CARD_FLAG_CMA != 0,
            ring_capacity,
            local_index,
            local_count,
            probe_addr: u64_at(16),
            probe_value: u64_at(24),
            seg,
        }))
    }
}

/// A remote key, decoded.
#[derive(Clone, Copy, Debug)]
struct Key {
    id: u64,
    addr: u64,
    len: u64,
    pid: u32,
    slot: u32,
}

impl Key {
    fn encode(self) -> RemoteKey {
        let mut b = [0u8; KEY_LEN];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..28].copy_from_slice(&self.pid.to_le_bytes());
        b[28..32].copy_from_slice(&self.slot.to_le_bytes());
        RemoteKey::new(&b).expect("32 bytes fit a key")
    }

    fn decode(bytes: &[u8]) -> Result<Key, String> {
        let b: &[u8; KEY_LEN] = bytes
            .try_into()
            .map_err(|_| format!("malformed remote key ({} bytes)", bytes.len()))?;
        let u64_at = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let key = Key {
            id: u64_at(0),
            addr: u64_at(8),
            len: u64_at(16),
            pid: u32::from_le_bytes([b[24], b[25], b[26], b[27]]),
            slot: u32::from_le_bytes([b[28], b[29], b[30], b[31]]),
        };
        if key.id == 0 {
            return Err("malformed remote key (id 0)".into());
        }
        Ok(key)
    }

    /// `offset..offset + len` inside the key's range, as an offset.
    /// Where the key's range starts inside a registration of `[addr,
    /// addr+len)` (`None`: the key's range is not inside it). A key covers
    /// the whole registration or, from [`Btl::sub_key`], a part of it.
    fn base_in(&self, addr: u64, len: u64) -> Option<usize> {
        let base = self.addr.checked_sub(addr)?;
        let end = base.checked_add(self.len)?;
        if end <= len {
            usize::try_from(base).ok()
        } else {
            None
        }
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), String> {
        let end = (offset as u64).checked_add(len as u64);
        if end.is_some_and(|e| e <= self.len) {
            Ok(())
        } else {
            Err(format!(
                "{len} bytes at offset {offset} do not fit a registration of {} bytes",
                self.len
            ))
        }
    }
}

fn access_bits(access: Access) -> u64 {
    let mut bits = 0;
    if access.contains(Access::REMOTE_READ) {
        bits |= ACCESS_READ;
    }
    if access.contains(Access::REMOTE_WRITE) {
        bits |= ACCESS_WRITE;
    }
    bits
}

/// This module's registrations (the private side; the shared table mirrors
/// those with a slot).
#[derive(Debug, Default)]
struct Regs {
    map: HashMap<u64, (MemRegion, u64, u32)>,
    next_id: u64,
    free_slots: Vec<u32>,
}

impl Regs {
    /// The registered region a key names, narrowed to `[offset, offset+len)`,
    /// if it allows `need` (checked by the owner, for copy-in/copy-out).
    fn resolve(
        &self,
        pid: u32,
        key: &[u8],
        offset: usize,
        len: usize,
        need: u64,
    ) -> Result<MemRegion, String> {
        let key = Key::decode(key)?;
        if key.pid != pid {
            return Err(format!(
                "remote key of pid {} used towards pid {pid}",
                key.pid
            ));
        }
        let &(region, access, _) = self
            .map
            .get(&key.id)
            .ok_or_else(|| format!("remote key names no registration ({})", key.id))?;
        let base = key
            .base_in(region.addr() as u64, region.len() as u64)
            .ok_or("remote key does not match its registration")?;
        if access & need != need {
            return Err("registration does not allow this access".into());
        }
        key.check_range(offset, len)?;
        region
            .slice(base + offset, len)
            .ok_or_else(|| "range outside the registration".into())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeerState {
    Unbound,
    Bound,
    Lost,
    Deleted,
}

/// What binding a peer set up.
#[derive(Debug)]
struct Link {
    /// Shared with the fast box of the peer's pair line that our receiver
    /// reads, if any (it may outlive the link).
    mapping: Arc<Mapping>,
    pidfd: Option<OwnedFd>,
    cma: bool,
    table_off: usize,
    table_slots: usize,
}

/// A reply the owner of a registration owes a copy-in/copy-out initiator.
#[derive(Debug)]
enum Reply {
    /// A put's acknowledgement, or a get's refusal (`C_PUT_ACK`/`C_GET_NAK`).
    Status {
        tag: u8,
        req: u64,
        error: Option<String>,
    },
    /// A get's data, streamed in chunks.
    Data {
        req: u64,
        region: MemRegion,
        sent: usize,
        started: bool,
    },
}

/// A put being received from a peer (copy-in/copy-out).
#[derive(Debug)]
struct IncomingPut {
    req: u64,
    target: Option<MemRegion>,
    len: usize,
    written: usize,
}

struct Peer {
    /// Our ring in the peer's inbox; dropped before `link` (field order).
    tx: Option<RingProducer>,
    link: Option<Box<Link>>,
    state: PeerState,
    rank: u32,
    card: SmCard,
    refusals: u32,
    /// Copy-in/copy-out initiator side: operations still to transmit.
    outgoing: VecDeque<u64>,
    /// Copy-in/copy-out owner side.
    replies: VecDeque<Reply>,
    incoming: Option<IncomingPut>,
}

/// A copy-in/copy-out operation of this initiator.
#[derive(Debug)]
struct Op {
    peer: u32,
    token: Token,
    local: MemRegion,
    key: RemoteKey,
    offset: usize,
    put: bool,
    started: bool,
    done: usize,
}

/// Operations by request id `generation << 32 | index`.
#[derive(Debug, Default)]
struct Ops {
    slots: Vec<(u32, Option<Op>)>,
    free: Vec<u32>,
    live: usize,
}

impl Ops {
    fn insert(&mut self, op: Op) -> u64 {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.0 = slot.0.wrapping_add(1);
        slot.1 = Some(op);
        self.live += 1;
        u64::from(slot.0) << 32 | u64::from(index)
    }

    fn get_mut(&mut self, req: u64) -> Option<&mut Op> {
        let (gen, index) = ((req >> 32) as u32, req as u32);
        match self.slots.get_mut(index as usize) {
            Some((g, Some(op))) if *g == gen => Some(op),
            _ => None,
        }
    }

    fn remove(&mut self, req: u64) -> Option<Op> {
        let (gen, index) = ((req >> 32) as u32, req as u32);
        match self.slots.get_mut(index as usize) {
            Some((g, op @ Some(_))) if *g == gen => {
                self.free.push(index);
                self.live -= 1;
                op.take()
            }
            _ => None,
        }
    }

    /// Removes every operation towards `peer`.
    fn drain_peer(&mut self, peer: u32, mut f: impl FnMut(Op)) {
        for (index, (_, slot)) in self.slots.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|op| op.peer == peer) {
                if let Some(op) = slot.take() {
                    self.free.push(index as u32);
                    self.live -= 1;
                    f(op);
                }
            }
        }
    }
}

/// The shared-memory BTL module of one rank.
pub struct SmBtl {
    // Field order matters for drop: the inbox receiver before the segment it
    // lives in, peers (with their producers and mappings) first of all.
    peers: Vec<Peer>,
    rx: InboxReceiver,
    segment: Segment,
    layout: Layout,
    /// Endpoint index by ring index of our inbox (`EP_NONE`, `EP_DELETED`).
    sender_ep: Vec<u32>,
    local_index: u32,
    local_count: u32,
    ring_capacity: usize,
    pid: u32,
    limits: Limits,
    caps: Caps,
    cma_ok: bool,
    pair_boxes: bool,
    probe: ProbeWord,
    regs: Regs,
    ops: Ops,
    completions: VecDeque<(Token, Result<(), BtlError>)>,
    lost_reports: Vec<(Endpoint, BtlError)>,
    orphans: VecDeque<(usize, u8, bool, Vec<u8>)>,
    orphan_warned: bool,
    spare: Vec<Vec<u8>>,
    /// Copy-in/copy-out work is queued on some peer.
    emu_dirty: bool,
    bound: usize,
    idle: u32,
    sweep_next: usize,
}

impl std::fmt::Debug for SmBtl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmBtl")
            .field("local_index", &self.local_index)
            .field("local_count", &self.local_count)
            .field("ring_capacity", &self.ring_capacity)
            .field("caps", &self.caps)
            .field("peers", &self.peers.len())
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

fn at(base: NonNull<u8>, offset: usize) -> NonNull<u8> {
    NonNull::new(base.as_ptr().wrapping_add(offset)).expect("offset inside a mapping")
}

fn process_gone(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return true;
    };
    rustix::process::test_kill_process(pid) == Err(Errno::SRCH)
}

/// Whether a pidfd says its process has exited (zero-timeout poll).
fn pidfd_exited(fd: &OwnedFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR)
}

fn truncate_text(s: &str) -> &str {
    let mut end = s.len().min(MAX_REPLY_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl SmBtl {
    /// Creates this rank's segment (its inbox: one ring per other local rank,
    /// and its registration table) and prepares CMA.
    pub fn new(cfg: SmConfig) -> Result<SmBtl, BtlError> {
        if cfg.local_count == 0 || cfg.local_index >= cfg.local_count {
            return Err(BtlError::Invalid(format!(
                "sm: local index {} of {} local ranks",
                cfg.local_index, cfg.local_count
            )));
        }
        Ring::check_capacity(cfg.ring_capacity)
            .map_err(|e| BtlError::Invalid(format!("sm: btl_sm_ring_size: {e}")))?;
        let layout = Layout::new(cfg.local_count, cfg.ring_capacity)?;
        let mut limits = cfg.limits;
        let max_payload = Ring::max_payload(cfg.ring_capacity);
        limits.max_send_size = limits.max_send_size.min(max_payload);
        limits.max_sendi_size = limits.max_sendi_size.min(max_payload);
        limits.eager_limit = limits.eager_limit.min(limits.max_send_size);
        limits.rndv_eager_limit = limits.rndv_eager_limit.min(limits.max_send_size);

        let segment = Segment::create(layout.total, SegmentKind::Auto)
            .map_err(|e| BtlError::Io(e.to_string()))?;
        let base = segment.as_ptr();
        // SAFETY: the inbox range lies inside the segment's zeroed data region
        // (layout.total bytes), 128-byte aligned (the region is page aligned,
        // inbox_off = 128), and no handle is attached yet: the segment was
        // just created and its card is not published.
        unsafe {
            Inbox::init(
                at(base, layout.inbox_off),
                layout.inbox_len,
                (cfg.local_count - 1) as usize,
                cfg.ring_capacity,
            )
        }
        .map_err(|e| BtlError::Invalid(format!("sm: {e}")))?;
        // SAFETY: the inbox was formatted above; the segment outlives the
        // receiver (field order of SmBtl), and this is its only receiver.
        let mut rx = unsafe { InboxReceiver::attach(at(base, layout.inbox_off), layout.inbox_len) }
            .map_err(|e| BtlError::Invalid(format!("sm: {e}")))?;
        if cfg.pair_boxes {
            // The pair line of a pair is in the lower rank's inbox, in the
            // ring the higher one writes (ring indices from ours on).
            rx.set_own_boxes_from(cfg.local_index as usize);
        }
        rx.set_evict_ahead(cfg.evict_ahead);
        let ctl = segment.words(0, CTL_WORDS).expect("control block fits");
        for (w, v) in ctl.iter().zip([
            0,
            CTL_VERSION,
            u64::from(cfg.local_index),
            u64::from(cfg.local_count),
            layout.inbox_off as u64,
            layout.inbox_len as u64,
            layout.table_off as u64,
            layout.table_slots as u64,
        ]) {
            w.store(v, Ordering::Relaxed);
        }
        ctl[0].store(CTL_MAGIC, Ordering::Release);

        let cma_ok = if cfg.single_copy {
            cma::prepare().is_possible()
        } else {
            tracing::debug!("sm: single copy disabled (btl_sm_single_copy), no put/get");
            false
        };
        let mut caps =
            Caps::SEND | Caps::SENDI | Caps::SEND_INPLACE | Caps::ORDERED | Caps::SEND_DONE;
        if cma_ok {
            caps = caps | Caps::PUT | Caps::GET;
        }
        let senders = (cfg.local_count - 1) as usize;
        Ok(SmBtl {
            peers: Vec::new(),
            rx,
            segment,
            layout,
            sender_ep: vec![EP_NONE; senders],
            local_index: cfg.local_index,
            local_count: cfg.local_count,
            ring_capacity: cfg.ring_capacity,
            pid: std::process::id(),
            limits,
            caps,
            cma_ok,
            pair_boxes: cfg.pair_boxes,
            probe: ProbeWord::new(),
            regs: Regs {
                map: HashMap::new(),
                next_id: 1,
                free_slots: (0..REGISTRATION_SLOTS as u32).rev().collect(),
            },
            ops: Ops::default(),
            completions: VecDeque::new(),
            lost_reports: Vec::new(),
            orphans: VecDeque::new(),
            orphan_warned: false,
            spare: Vec::new(),
            emu_dirty: false,
            bound: 0,
            idle: 0,
            sweep_next: 0,
        })
    }

    /// Bytes of the shared object each rank creates for `local_count` local
    /// ranks and rings of `ring_capacity` (header page, control block, inbox,
    /// registration table): the shared memory per rank.
    pub fn segment_bytes(local_count: u32, ring_capacity: usize) -> Result<usize, BtlError> {
        Ok(DATA_OFFSET + Layout::new(local_count, ring_capacity)?.total)
    }

    /// Whether put/get towards `ep` use CMA (single copy) rather than
    /// copy-in/copy-out; `None` while the endpoint is not bound yet.
    pub fn single_copy_to(&self, ep: Endpoint) -> Option<bool> {
        self.peers
            .get(ep.0 as usize)
            .and_then(|p| p.link.as_ref())
            .map(|l| l.cma)
    }

    /// This module's local index.
    pub fn local_index(&self) -> u32 {
        self.local_index
    }

    fn card(&self) -> SmCard {
        SmCard {
            cma: self.cma_ok,
            ring_capacity: self.ring_capacity,
            local_index: self.local_index,
            local_count: self.local_count,
            probe_addr: self.probe.addr() as u64,
            probe_value: self.probe.value(),
            seg: self.segment.card(),
        }
    }

    fn peer_index(&self, ep: Endpoint) -> Result<usize, BtlError> {
        let i = ep.0 as usize;
        match self.peers.get(i).map(|p| p.state) {
            Some(PeerState::Unbound | PeerState::Bound) => Ok(i),
            Some(PeerState::Lost) => Err(self.gone(ep)),
            _ => Err(BtlError::Invalid(format!("unknown endpoint {ep:?}"))),
        }
    }

    fn gone(&self, ep: Endpoint) -> BtlError {
        let rank = self.peers.get(ep.0 as usize).map_or(u32::MAX, |p| p.rank);
        BtlError::PeerGone(ep, format!("sm peer rank {rank} is gone"))
    }

    /// Binds an unbound peer (maps its segment, attaches our ring, probes
    /// CMA, opens a pidfd).
    #[cold]
    fn bind(&mut self, i: usize) -> Result<(), BtlError> {
        let ep = Endpoint(i as u32);
        match self.peers[i].state {
            PeerState::Bound => return Ok(()),
            PeerState::Lost => return Err(self.gone(ep)),
            PeerState::Deleted => {
                return Err(BtlError::Invalid(format!("unknown endpoint {ep:?}")))
            }
            PeerState::Unbound => {}
        }
        let card = self.peers[i].card;
        let pid = card.seg.pid;
        let mapping = match Segment::attach(&card.seg) {
            Ok(m) => m,
            Err(e) => {
                if process_gone(pid) {
                    self.mark_lost(i, format!("process {pid} exited"));
                    return Err(self.gone(ep));
                }
                return Err(BtlError::Io(format!(
                    "sm: attaching rank {}: {e}",
                    self.peers[i].rank
                )));
            }
        };
        if mapping.owner_closed() {
            self.mark_lost(i, "closed its segment".into());
            return Err(self.gone(ep));
        }
        let layout = Layout::new(card.local_count, card.ring_capacity)?;
        let ctl = mapping
            .words(0, CTL_WORDS)
            .ok_or_else(|| BtlError::Invalid("sm: peer segment too small".into()))?;
        let magic = ctl[0].load(Ordering::Acquire);
        let words: Vec<u64> = ctl.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        let expect = [
            CTL_MAGIC,
            CTL_VERSION,
            u64::from(card.local_index),
            u64::from(card.local_count),
            layout.inbox_off as u64,
            layout.inbox_len as u64,
            layout.table_off as u64,
            layout.table_slots as u64,
        ];
        if magic != CTL_MAGIC || words != expect || mapping.len() < layout.total {
            return Err(BtlError::Invalid(format!(
                "sm: the segment of rank {} does not match its card",
                self.peers[i].rank
            )));
        }
        let ring = ring_index(self.local_index, card.local_index);
        // SAFETY: the inbox range was checked against the mapping's length
        // and the owner's control block; it is 128-byte aligned (page-aligned
        // data region + 128); the mapping lives in `link`, which the peer
        // drops after `tx` (field order), so it outlives the producer; only
        // the ring and inbox protocols touch that memory.
        let tx = unsafe {
            Inbox::attach_sender(
                at(mapping.as_ptr(), layout.inbox_off),
                layout.inbox_len,
                ring,
            )
        }
        .map_err(|e| BtlError::Invalid(format!("sm: rank {}: {e}", self.peers[i].rank)))?;
        let mapping = Arc::new(mapping);
        let mut tx = tx;
        if self.pair_boxes {
            self.wire_pair(&mut tx, &mapping, card.local_index);
        }
        let cma = self.cma_ok
            && card.cma
            && CmaPeer::probe(pid, card.probe_addr as usize, card.probe_value).is_available();
        let pidfd = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .and_then(|p| {
                rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
            });
        let peer = &mut self.peers[i];
        peer.tx = Some(tx);
        peer.link = Some(Box::new(Link {
            mapping,
            pidfd,
            cma,
            table_off: layout.table_off,
            table_slots: layout.table_slots,
        }));
        peer.state = PeerState::Bound;
        self.bound += 1;
        Ok(())
    }

    /// Wires the fast boxes of our pair line with the peer of local index
    /// `peer` (see `ring`'s module doc): the line is in the lower rank's
    /// inbox, in the ring the higher one writes. The higher rank writes its
    /// forward box and reads its reverse box (from the peer's `mapping`,
    /// kept alive by our receiver); the lower one the other way round, in
    /// its own memory. Each side writes a box only once its reader said
    /// it reads it.
    fn wire_pair(&mut self, tx: &mut RingProducer, mapping: &Arc<Mapping>, peer: u32) {
        let from = ring_index(peer, self.local_index);
        let Some(armed) = self.rx.armed(from) else {
            return;
        };
        if self.local_index > peer {
            let line = tx.pair_line();
            tx.set_fast(Some(FastTx::forward(&line, armed)));
            let bx = line.reverse().keeping(mapping.clone());
            if self.rx.set_remote_box(from, bx).is_ok() {
                line.set_reverse_ready();
            }
        } else if let Ok(line) = self.rx.pair_line(from) {
            tx.set_fast(Some(FastTx::reverse(&line, armed)));
        }
    }

    /// The producer towards `ep`, binding it first if needed.
    #[inline]
    fn tx(&mut self, ep: Endpoint) -> Result<&mut RingProducer, BtlError> {
        let i = ep.0 as usize;
        if !matches!(self.peers.get(i), Some(p) if p.tx.is_some()) {
            self.peer_index(ep)?;
            self.bind(i)?;
        }
        Ok(self.peers[i].tx.as_mut().expect("bound"))
    }

    /// The inbox ring the peer on `ep` writes, where it may be read alone
    /// (`progress_from`, `recv_small`): `None` while records kept from
    /// before the peer was added wait (`progress` delivers them first), or
    /// for an endpoint that is not that ring's sender.
    #[inline(always)]
    fn rx_ring(&self, ep: Endpoint) -> Option<usize> {
        if !self.orphans.is_empty() {
            return None;
        }
        let p = self.peers.get(ep.0 as usize)?;
        let ring = ring_index(p.card.local_index, self.local_index);
        (self.sender_ep.get(ring) == Some(&ep.0)).then_some(ring)
    }

    /// [`Btl::sendi_hdr`] outside its common case: through [`Btl::sendi`].
    #[inline(never)]
    fn sendi_hdr_other(&mut self, ep: Endpoint, tag: AmTag, hdr: &[u8], data: &[u8]) -> bool {
        self.sendi(ep, tag, &[hdr, data]).is_ok()
    }

    /// The error of a ring's refusal of a record for `ep` in operation
    /// `what`: [`SmBtl::refused`] for a full ring, `TooLarge` for one past
    /// its largest record.
    #[cold]
    fn ring_error(&mut self, ep: Endpoint, e: SendError, what: &'static str) -> BtlError {
        match e {
            SendError::Full => self.refused(ep),
            SendError::TooLarge { len, max } => BtlError::TooLarge {
                what,
                len,
                limit: max,
            },
        }
    }

    /// A send to `ep` was refused for lack of room: is the peer still there?
    #[cold]
    fn refused(&mut self, ep: Endpoint) -> BtlError {
        let i = ep.0 as usize;
        let peer = &mut self.peers[i];
        peer.refusals = peer.refusals.wrapping_add(1);
        let check_process = peer.refusals % REFUSALS_PER_PROCESS_CHECK == 0;
        if self.check_alive(i, check_process) {
            BtlError::NoResource
        } else {
            self.gone(ep)
        }
    }

    /// Checks a peer: its segment's state word, and with `process` its
    /// process. Marks it lost and returns false when it is gone.
    fn check_alive(&mut self, i: usize, process: bool) -> bool {
        let peer = &self.peers[i];
        let why = match (peer.state, &peer.link) {
            (PeerState::Bound, Some(link)) => {
                if link.mapping.owner_closed() {
                    Some("closed its segment".to_string())
                } else if !process {
                    None
                } else if let Some(fd) = &link.pidfd {
                    pidfd_exited(fd).then(|| format!("process {} exited", peer.card.seg.pid))
                } else {
                    process_gone(peer.card.seg.pid)
                        .then(|| format!("process {} exited", peer.card.seg.pid))
                }
            }
            (PeerState::Unbound, _) if process => process_gone(peer.card.seg.pid)
                .then(|| format!("process {} exited", peer.card.seg.pid)),
            (PeerState::Lost, _) => return false,
            _ => None,
        };
        match why {
            Some(why) => {
                self.mark_lost(i, why);
                false
            }
            None => true,
        }
    }

    /// One liveness check, of the next peer in turn.
    #[cold]
    fn sweep(&mut self) {
        let n = self.peers.len();
        for _ in 0..n {
            let i = self.sweep_next % n;
            self.sweep_next = (i + 1) % n;
            if matches!(self.peers[i].state, PeerState::Unbound | PeerState::Bound) {
                self.check_alive(i, true);
                return;
            }
        }
    }

    /// Drops what binds a peer and completes what is in flight to it.
    fn unbind(&mut self, i: usize, state: PeerState, err: &BtlError) {
        let peer = &mut self.peers[i];
        if peer.state == PeerState::Bound {
            self.bound -= 1;
        }
        peer.state = state;
        peer.tx = None;
        peer.link = None;
        peer.outgoing.clear();
        peer.replies.clear();
        peer.incoming = None;
        let completions = &mut self.completions;
        self.ops.drain_peer(i as u32, |op| {
            completions.push_back((op.token, Err(err.clone())));
        });
    }

    fn mark_lost(&mut self, i: usize, why: String) {
        if matches!(self.peers[i].state, PeerState::Lost | PeerState::Deleted) {
            return;
        }
        let ep = Endpoint(i as u32);
        let err = BtlError::PeerGone(ep, format!("sm peer rank {} {why}", self.peers[i].rank));
        tracing::debug!(%err, "sm: peer lost");
        self.unbind(i, PeerState::Lost, &err);
        self.lost_reports.push((ep, err));
    }

    fn spare_buf(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.spare.len() < MAX_SPARE && buf.capacity() > 0 {
            buf.clear();
            self.spare.push(buf);
        }
    }

    /// Checks a key against the owner's shared registration table (CMA
    /// path); returns the remote address of `offset`.
    fn cma_target(
        link: &Link,
        key: &Key,
        offset: usize,
        len: usize,
        need: u64,
    ) -> Result<usize, BtlError> {
        let invalid = |why: &str| BtlError::Invalid(format!("sm: {why}"));
        if key.slot as usize >= link.table_slots {
            return Err(invalid("remote key names no registration slot"));
        }
        let words = link
            .mapping
            .words(
                link.table_off + key.slot as usize * SLOT_WORDS * 8,
                SLOT_WORDS,
            )
            .ok_or_else(|| invalid("registration slot outside the segment"))?;
        let id = words[0].load(Ordering::Acquire);
        let addr = words[1].load(Ordering::Relaxed);
        let rlen = words[2].load(Ordering::Relaxed);
        let access = words[3].load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let again = words[0].load(Ordering::Relaxed);
        if id != key.id || again != id {
            return Err(invalid(
                "remote key names no registration (stale or forged)",
            ));
        }
        if key.base_in(addr, rlen).is_none() {
            return Err(invalid("remote key does not match its registration"));
        }
        if access & need != need {
            return Err(invalid("registration does not allow this access"));
        }
        key.check_range(offset, len).map_err(|e| invalid(&e))?;
        usize::try_from(key.addr + offset as u64).map_err(|_| invalid("address overflow"))
    }

    fn rdma(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        offset: usize,
        token: Token,
        put: bool,
    ) -> Result<(), BtlError> {
        if !self.caps.contains(Caps::PUT) {
            return Err(BtlError::Unsupported(if put { "put" } else { "get" }));
        }
        let i = self.peer_index(ep)?;
        self.bind(i)?;
        let key = Key::decode(remote.as_bytes()).map_err(BtlError::Invalid)?;
        let pid = self.peers[i].card.seg.pid;
        if key.pid != pid {
            return Err(BtlError::Invalid(format!(
                "remote key of pid {} used towards pid {pid}",
                key.pid
            )));
        }
        key.check_range(offset, local.len())
            .map_err(BtlError::Invalid)?;
        let need = if put { ACCESS_WRITE } else { ACCESS_READ };
        let link = self.peers[i].link.as_deref().expect("bound");
        if link.cma && key.slot != NO_SLOT {
            let addr = Self::cma_target(link, &key, offset, local.len(), need)?;
            let r = if put {
                cma::write_region(pid, local, addr)
            } else {
                cma::read_region(pid, local, addr)
            };
            return match r {
                Ok(()) => {
                    self.completions.push_back((token, Ok(())));
                    Ok(())
                }
                Err(CmaError::PeerGone { .. }) => {
                    self.mark_lost(i, format!("process {pid} exited"));
                    Err(self.gone(ep))
                }
                Err(CmaError::BadAddress { .. }) => Err(BtlError::Invalid(format!(
                    "sm: registered range not mapped in process {pid}"
                ))),
                Err(e) => Err(BtlError::Io(e.to_string())),
            };
        }
        // Copy-in/copy-out through the rings; the owner checks the key.
        let req = self.ops.insert(Op {
            peer: i as u32,
            token,
            local,
            key: *remote,
            offset,
            put,
            started: false,
            done: 0,
        });
        self.peers[i].outgoing.push_back(req);
        self.emu_dirty = true;
        self.pump_peer(i);
        Ok(())
    }

    /// Sends what copy-in/copy-out owes every peer, as far as rings allow.
    fn pump_all(&mut self) {
        let mut again = false;
        for i in 0..self.peers.len() {
            let p = &self.peers[i];
            if !p.outgoing.is_empty() || !p.replies.is_empty() {
                again |= self.pump_peer(i);
            }
        }
        self.emu_dirty = again;
    }

    /// Sends what copy-in/copy-out owes peer `i`; true when work remains.
    fn pump_peer(&mut self, i: usize) -> bool {
        if let Err(e) = self.bind(i) {
            // Lost (already completed) or not reachable at all.
            let peer = &mut self.peers[i];
            peer.replies.clear();
            peer.outgoing.clear();
            let completions = &mut self.completions;
            self.ops.drain_peer(i as u32, |op| {
                completions.push_back((op.token, Err(e.clone())));
            });
            return false;
        }
        let peer = &mut self.peers[i];
        let tx = peer.tx.as_mut().expect("bound");
        let chunk = tx.max_payload() - 8;
        while let Some(reply) = peer.replies.front_mut() {
            match reply {
                Reply::Status { tag, req, error } => {
                    let (code, text) = match error {
                        None => ([0u8], ""),
                        Some(t) => ([1u8], truncate_text(t)),
                    };
                    if tx
                        .try_send_control(*tag, &[&req.to_le_bytes(), &code, text.as_bytes()])
                        .is_err()
                    {
                        return true;
                    }
                }
                Reply::Data {
                    req,
                    region,
                    sent,
                    started,
                } => loop {
                    let n = chunk.min(region.len() - *sent);
                    if *started && n == 0 {
                        break;
                    }
                    let Ok(mut r) = tx.try_reserve(8 + n) else {
                        return true;
                    };
                    let p = r.payload_mut();
                    p[..8].copy_from_slice(&req.to_le_bytes());
                    copy_bytes(&mut p[8..], &region.read()[*sent..*sent + n]);
                    r.commit_control(C_GET_DATA);
                    *sent += n;
                    *started = true;
                },
            }
            peer.replies.pop_front();
        }
        while let Some(&req) = peer.outgoing.front() {
            let Some(op) = self.ops.get_mut(req) else {
                peer.outgoing.pop_front();
                continue;
            };
            let len = op.local.len() as u64;
            if !op.started {
                let tag = if op.put { C_PUT_START } else { C_GET_REQ };
                let hdr = [
                    req.to_le_bytes(),
                    (op.offset as u64).to_le_bytes(),
                    len.to_le_bytes(),
                ];
                if tx
                    .try_send_control(tag, &[&hdr[0], &hdr[1], &hdr[2], op.key.as_bytes()])
                    .is_err()
                {
                    return true;
                }
                op.started = true;
            }
            if op.put {
                while op.done < op.local.len() {
                    let n = chunk.min(op.local.len() - op.done);
                    let Ok(mut r) = tx.try_reserve(8 + n) else {
                        return true;
                    };
                    let p = r.payload_mut();
                    p[..8].copy_from_slice(&req.to_le_bytes());
                    copy_bytes(&mut p[8..], &op.local.read()[op.done..op.done + n]);
                    r.commit_control(C_PUT_DATA);
                    op.done += n;
                }
            }
            peer.outgoing.pop_front();
        }
        false
    }

    /// Delivers stashed records of senders that now have an endpoint.
    #[cold]
    fn flush_orphans(&mut self, sink: &mut dyn BtlSink) -> usize {
        let mut n = 0;
        let mut keep = VecDeque::new();
        while let Some((ring, tag, control, data)) = self.orphans.pop_front() {
            let ep = self.sender_ep[ring];
            if ep == EP_NONE {
                keep.push_back((ring, tag, control, data));
            } else if ep != EP_DELETED {
                if control {
                    self.emu_dirty |= on_control(
                        &mut self.peers,
                        &mut self.ops,
                        &mut self.completions,
                        &self.regs,
                        self.pid,
                        ep as usize,
                        tag,
                        &data,
                    );
                } else {
                    sink.on_recv(Endpoint(ep), AmTag(tag), &data);
                }
                n += 1;
            }
        }
        self.orphans = keep;
        n
    }

    /// Completions and loss reports.
    #[cold]
    fn deliver_events(&mut self, sink: &mut dyn BtlSink) -> usize {
        let mut n = 0;
        for (ep, err) in std::mem::take(&mut self.lost_reports) {
            sink.on_peer_lost(ep, &err);
            n += 1;
        }
        while let Some((token, result)) = self.completions.pop_front() {
            sink.on_complete(token, result);
            n += 1;
        }
        n
    }

    #[cold]
    fn corrupt(&mut self, e: ring::PollError) {
        let ep = e.sender.map_or(EP_NONE, |s| self.sender_ep[s]);
        tracing::error!(%e, "sm: a peer wrote a corrupt ring");
        if (ep as usize) < self.peers.len() {
            self.mark_lost(ep as usize, format!("wrote a corrupt ring ({})", e.error));
        }
    }
}

/// Handles a CONTROL record from peer `i` (copy-in/copy-out RDMA). Returns
/// whether replies were queued.
#[allow(clippy::too_many_arguments)]
fn on_control(
    peers: &mut [Peer],
    ops: &mut Ops,
    completions: &mut VecDeque<(Token, Result<(), BtlError>)>,
    regs: &Regs,
    pid: u32,
    i: usize,
    tag: u8,
    p: &[u8],
) -> bool {
    let Some(peer) = peers.get_mut(i) else {
        return false;
    };
    if !matches!(peer.state, PeerState::Bound | PeerState::Unbound) {
        return false;
    }
    let u64_at = |at: usize| -> Option<u64> {
        p.get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let Some(req) = u64_at(0) else {
        tracing::debug!(tag, "sm: short control record ignored");
        return false;
    };
    match tag {
        C_GET_REQ | C_PUT_START => {
            let (Some(off), Some(len)) = (u64_at(8), u64_at(16)) else {
                tracing::debug!(tag, "sm: short control record ignored");
                return false;
            };
            let (off, len) = (
                usize::try_from(off).unwrap_or(usize::MAX),
                usize::try_from(len).unwrap_or(usize::MAX),
            );
            let key = &p[24..];
            if tag == C_GET_REQ {
                let reply = match regs.resolve(pid, key, off, len, ACCESS_READ) {
                    Ok(region) => Reply::Data {
                        req,
                        region,
                        sent: 0,
                        started: false,
                    },
                    Err(error) => Reply::Status {
                        tag: C_GET_NAK,
                        req,
                        error: Some(error),
                    },
                };
                peer.replies.push_back(reply);
                true
            } else {
                let target = regs.resolve(pid, key, off, len, ACCESS_WRITE);
                let (target, error) = match target {
                    Ok(r) => (Some(r), None),
                    Err(e) => (None, Some(e)),
                };
                let refused = error.is_some();
                if refused || len == 0 {
                    peer.replies.push_back(Reply::Status {
                        tag: C_PUT_ACK,
                        req,
                        error,
                    });
                }
                peer.incoming = (len > 0).then_some(IncomingPut {
                    req,
                    target,
                    len,
                    written: 0,
                });
                refused || len == 0
            }
        }
        C_PUT_DATA => {
            let data = &p[8..];
            let Some(inc) = peer.incoming.as_mut().filter(|inc| inc.req == req) else {
                tracing::debug!("sm: put data for no put in progress ignored");
                return false;
            };
            if inc.written + data.len() > inc.len {
                tracing::debug!("sm: put data past the announced length ignored");
                return false;
            }
            if let Some(target) = inc.target {
                target.write(inc.written, data);
            }
            inc.written += data.len();
            if inc.written == inc.len {
                let ok = inc.target.is_some();
                peer.incoming = None;
                if ok {
                    peer.replies.push_back(Reply::Status {
                        tag: C_PUT_ACK,
                        req,
                        error: None,
                    });
                    return true;
                }
            }
            false
        }
        C_GET_DATA => {
            let data = &p[8..];
            let Some(op) = ops.get_mut(req).filter(|op| op.peer == i as u32 && !op.put) else {
                tracing::debug!("sm: get data for no get in progress ignored");
                return false;
            };
            let result = if op.done + data.len() > op.local.len() {
                Some(Err(BtlError::Invalid(
                    "sm: get returned too much data".into(),
                )))
            } else {
                op.local.write(op.done, data);
                op.done += data.len();
                (op.done == op.local.len()).then_some(Ok(()))
            };
            if let Some(result) = result {
                if let Some(op) = ops.remove(req) {
                    completions.push_back((op.token, result));
                }
            }
            false
        }
        C_GET_NAK | C_PUT_ACK => {
            let Some(op) = ops.get_mut(req).filter(|op| op.peer == i as u32) else {
                tracing::debug!("sm: status for no operation in progress ignored");
                return false;
            };
            if op.put != (tag == C_PUT_ACK) {
                return false;
            }
            let result = match p.get(8) {
                Some(0) => Ok(()),
                _ => Err(BtlError::Invalid(format!(
                    "sm: {}",
                    String::from_utf8_lossy(p.get(9..).unwrap_or(&[]))
                ))),
            };
            if let Some(op) = ops.remove(req) {
                completions.push_back((op.token, result));
            }
            false
        }
        _ => {
            tracing::debug!(tag, "sm: unknown control record ignored");
            false
        }
    }
}

// SAFETY: no operation of this BTL calls anything outside this crate but
// the kernel and the sink its progress calls are given.
#[allow(unsafe_code)]
unsafe impl crate::btl::NeverReenters for SmBtl {}

impl Btl for SmBtl {
    fn no_reentry(&self) -> Option<crate::btl::NoReentry> {
        Some(crate::btl::NoReentry::of(self))
    }

    fn name(&self) -> &'static str {
        "sm"
    }

    fn caps(&self) -> Caps {
        self.caps
    }

    fn limits(&self) -> &Limits {
        &self.limits
    }

    fn business_card(&self) -> Vec<u8> {
        self.card().to_bytes()
    }

    fn add_peer(&mut self, peer: &PeerInfo<'_>) -> Result<Option<Endpoint>, BtlError> {
        if !peer.local {
            return Ok(None);
        }
        let Some(bytes) = peer.card else {
            return Ok(None);
        };
        let Some(card) = SmCard::parse(bytes)? else {
            return Ok(None);
        };
        if card.seg.pid == self.pid && card.local_index == self.local_index {
            // Ourselves: the self BTL's job.
            return Ok(None);
        }
        if card.local_count != self.local_count {
            return Err(BtlError::Invalid(format!(
                "sm: rank {} counts {} local ranks, we count {}",
                peer.rank, card.local_count, self.local_count
            )));
        }
        if card.local_index == self.local_index {
            return Err(BtlError::Invalid(format!(
                "sm: rank {} has our local index {}",
                peer.rank, self.local_index
            )));
        }
        // Both sides must decide alike: a side that accepted a peer which
        // refused it would send into a ring whose owner never reads it.
        // Each side's limits are capped by its own rings, so equal rings
        // are all it takes.
        if card.ring_capacity != self.ring_capacity {
            tracing::warn!(
                rank = peer.rank,
                "sm: the peer's rings ({} B) differ from ours ({} B) \
                 (btl_sm_ring_size set differently); not using sm for it",
                card.ring_capacity,
                self.ring_capacity
            );
            return Ok(None);
        }
        let ring = ring_index(card.local_index, self.local_index);
        if let Some(i) = self.peers.iter().position(|p| p.rank == peer.rank) {
            let p = &mut self.peers[i];
            if p.state != PeerState::Deleted {
                if p.card.local_index != card.local_index || p.card.seg != card.seg {
                    return Err(BtlError::Invalid(format!(
                        "sm: another card for rank {}",
                        peer.rank
                    )));
                }
                return Ok(Some(Endpoint(i as u32)));
            }
            // Deleted earlier: back to unbound, with the new card.
            p.card = card;
            p.state = PeerState::Unbound;
            p.refusals = 0;
            self.sender_ep[ring] = i as u32;
            return Ok(Some(Endpoint(i as u32)));
        }
        if self.sender_ep[ring] != EP_NONE && self.sender_ep[ring] != EP_DELETED {
            return Err(BtlError::Invalid(format!(
                "sm: rank {} has the local index {} of another rank",
                peer.rank, card.local_index
            )));
        }
        let i = self.peers.len();
        self.peers.push(Peer {
            tx: None,
            link: None,
            state: PeerState::Unbound,
            rank: peer.rank,
            card,
            refusals: 0,
            outgoing: VecDeque::new(),
            replies: VecDeque::new(),
            incoming: None,
        });
        self.sender_ep[ring] = i as u32;
        Ok(Some(Endpoint(i as u32)))
    }

    /// Unbinds the peer and drops what it sends. When this rank is the
    /// higher of the pair, its receiver still reads the peer's reverse box
    /// (so that no box record is stranded if the peer is added again),
    /// which keeps the peer's segment mapped until then or until the
    /// module drops.
    fn del_peer(&mut self, ep: Endpoint) {
        let i = ep.0 as usize;
        let Some(p) = self.peers.get(i) else {
            return;
        };
        if p.state == PeerState::Deleted {
            return;
        }
        let ring = ring_index(p.card.local_index, self.local_index);
        let err = BtlError::PeerGone(ep, format!("sm peer rank {} was deleted", p.rank));
        self.unbind(i, PeerState::Deleted, &err);
        self.sender_ep[ring] = EP_DELETED;
    }

    fn alloc(&mut self, ep: Endpoint, len: usize) -> Result<Descriptor, BtlError> {
        self.peer_index(ep)?;
        if len > self.limits.max_send_size {
            return Err(BtlError::TooLarge {
                what: "alloc",
                len,
                limit: self.limits.max_send_size,
            });
        }
        let mut buf = self.spare_buf();
        // Contents are unspecified: only grow (zero-filling) what is new.
        buf.resize(len, 0);
        Ok(Descriptor {
            ep,
            buf,
            inplace: None,
        })
    }

    fn free(&mut self, desc: Descriptor) {
        self.recycle(desc.buf);
    }

    fn prepare_src(
        &mut self,
        ep: Endpoint,
        reserve: usize,
        data: MemRegion,
    ) -> Result<Descriptor, BtlError> {
        self.peer_index(ep)?;
        let len = reserve.saturating_add(data.len());
        if len > self.limits.max_send_size {
            return Err(BtlError::TooLarge {
                what: "prepare_src",
                len,
                limit: self.limits.max_send_size,
            });
        }
        let mut buf = self.spare_buf();
        buf.resize(reserve, 0);
        Ok(Descriptor {
            ep,
            buf,
            inplace: Some(data),
        })
    }

    #[inline]
    fn send(
        &mut self,
        desc: Descriptor,
        tag: AmTag,
        _token: Token,
    ) -> Result<SendOutcome, (Descriptor, BtlError)> {
        let len = desc.len();
        let tx = match self.tx(desc.ep) {
            Ok(tx) => tx,
            Err(e) => return Err((desc, e)),
        };
        match tx.try_reserve(len) {
            Ok(mut r) => {
                let p = r.payload_mut();
                let (head, tail) = p.split_at_mut(desc.buf.len());
                head.copy_from_slice(&desc.buf);
                if let Some(region) = desc.inplace {
                    copy_bytes(tail, region.read());
                }
                r.commit(tag.0);
                self.recycle(desc.buf);
                Ok(SendOutcome::Done)
            }
            Err(e) => {
                let e = self.ring_error(desc.ep, e, "send");
                Err((desc, e))
            }
        }
    }

    fn send_packed(
        &mut self,
        ep: Endpoint,
        tag: AmTag,
        hdr: &[u8],
        len: usize,
        pack: &mut dyn FnMut(&mut [u8]),
    ) -> Result<bool, BtlError> {
        let total = hdr.len().saturating_add(len);
        if total > self.limits.max_send_size {
            return Err(BtlError::TooLarge {
                what: "send_packed",
                len: total,
                limit: self.limits.max_send_size,
            });
        }
        match self.tx(ep)?.try_reserve(total) {
            Ok(mut r) => {
                let (head, tail) = r.payload_mut().split_at_mut(hdr.len());
                head.copy_from_slice(hdr);
                pack(tail);
                r.commit(tag.0);
                Ok(true)
            }
            Err(e) => Err(self.ring_error(ep, e, "send_packed")),
        }
    }

    #[inline]
    fn sendi(&mut self, ep: Endpoint, tag: AmTag, parts: &[&[u8]]) -> Result<(), BtlError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.limits.max_sendi_size {
            return Err(BtlError::TooLarge {
                what: "sendi",
                len,
                limit: self.limits.max_sendi_size,
            });
        }
        match self.tx(ep)?.try_send_len(tag.0, parts, len) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.ring_error(ep, e, "sendi")),
        }
    }

    /// A small record into a bound peer's ring, written straight (see
    /// [`RingProducer::try_send_small`]); everything else (other sizes, a
    /// peer still to bind, a ring that looks full by the cached head, a
    /// record that would wrap) through [`Btl::sendi`]. Every store counts
    /// in the slow cross-core state (`docs/performance.md`): the common
    /// case makes no call, so it saves few registers.
    #[inline]
    fn sendi_hdr(&mut self, ep: Endpoint, tag: AmTag, hdr: &[u8], data: &[u8]) -> bool {
        if hdr.len() + data.len() <= self.limits.max_sendi_size {
            if let Some(tx) = self
                .peers
                .get_mut(ep.0 as usize)
                .and_then(|p| p.tx.as_mut())
            {
                if tx.try_send_small(tag.0, hdr, data) {
                    return true;
                }
            }
        }
        self.sendi_hdr_other(ep, tag, hdr, data)
    }

    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration, BtlError> {
        let id = self.regs.next_id;
        self.regs.next_id += 1;
        let bits = access_bits(access);
        let slot = self.regs.free_slots.pop().unwrap_or(NO_SLOT);
        if slot != NO_SLOT {
            let w = self
                .segment
                .words(
                    self.layout.table_off + slot as usize * SLOT_WORDS * 8,
                    SLOT_WORDS,
                )
                .expect("table slot inside the segment");
            w[1].store(region.addr() as u64, Ordering::Relaxed);
            w[2].store(region.len() as u64, Ordering::Relaxed);
            w[3].store(bits, Ordering::Relaxed);
            w[0].store(id, Ordering::Release);
        }
        self.regs.map.insert(id, (region, bits, slot));
        let key = Key {
            id,
            addr: region.addr() as u64,
            len: region.len() as u64,
            pid: self.pid,
            slot,
        };
        Ok(Registration {
            id: RegId(id),
            region,
            key: key.encode(),
        })
    }

    fn sub_key(
        &self,
        reg: &Registration,
        offset: usize,
        len: usize,
    ) -> Result<RemoteKey, BtlError> {
        let key = Key::decode(reg.key.as_bytes()).map_err(BtlError::Invalid)?;
        key.check_range(offset, len).map_err(BtlError::Invalid)?;
        Ok(Key {
            addr: key.addr + offset as u64,
            len: len as u64,
            ..key
        }
        .encode())
    }

    fn deregister_mem(&mut self, id: RegId) {
        if let Some((_, _, slot)) = self.regs.map.remove(&id.0) {
            if slot != NO_SLOT {
                let w = self
                    .segment
                    .words(
                        self.layout.table_off + slot as usize * SLOT_WORDS * 8,
                        SLOT_WORDS,
                    )
                    .expect("table slot inside the segment");
                w[0].store(0, Ordering::Release);
                self.regs.free_slots.push(slot);
            }
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
        self.rdma(ep, local, remote, remote_offset, token, true)
    }

    fn get(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        self.rdma(ep, local, remote, remote_offset, token, false)
    }

    #[inline]
    fn progress(&mut self, sink: &mut dyn BtlSink) -> usize {
        let mut n = 0;
        if !self.orphans.is_empty() {
            n += self.flush_orphans(sink);
        }
        let mut dirty = false;
        let polled = {
            let SmBtl {
                rx,
                sender_ep,
                peers,
                ops,
                completions,
                regs,
                orphans,
                pid,
                ..
            } = self;
            rx.poll_all_flagged(|ring, tag, control, payload| {
                let ep = sender_ep[ring];
                if ep < EP_DELETED {
                    if control {
                        dirty |= on_control(
                            peers,
                            ops,
                            completions,
                            regs,
                            *pid,
                            ep as usize,
                            tag,
                            payload,
                        );
                    } else {
                        sink.on_recv(Endpoint(ep), AmTag(tag), payload);
                    }
                } else if ep != EP_DELETED {
                    // From a rank not added yet: kept, in order, for when
                    // it is (progress delivers them before polling again).
                    orphans.push_back((ring, tag, control, payload.to_vec()));
                }
            })
        };
        match polled {
            Ok(k) => n += k,
            Err(e) => self.corrupt(e),
        }
        if !self.orphans.is_empty() && !self.orphan_warned {
            self.orphan_warned = true;
            tracing::warn!("sm: records from a local rank that was not added are kept for later");
        }
        if dirty || self.emu_dirty {
            self.pump_all();
        }
        if !self.completions.is_empty() || !self.lost_reports.is_empty() {
            n += self.deliver_events(sink);
        }
        if n == 0 {
            self.idle += 1;
            if self.idle >= SWEEP_EVERY {
                self.idle = 0;
                self.sweep();
                n += self.deliver_events(sink);
            }
        }
        n
    }

    fn progress_from(&mut self, ep: Endpoint, take: &mut dyn FnMut(AmTag, &[u8]) -> bool) -> usize {
        let Some(ring) = self.rx_ring(ep) else {
            return 0;
        };
        let mut dirty = false;
        let polled = {
            let SmBtl {
                rx,
                peers,
                ops,
                completions,
                regs,
                pid,
                ..
            } = self;
            rx.poll_sender(ring, |tag, control, payload| {
                if control {
                    dirty |= on_control(
                        peers,
                        ops,
                        completions,
                        regs,
                        *pid,
                        ep.0 as usize,
                        tag,
                        payload,
                    );
                    true
                } else {
                    take(AmTag(tag), payload)
                }
            })
        };
        let n = match polled {
            Ok(k) => k,
            Err(e) => {
                self.corrupt(e);
                0
            }
        };
        if dirty {
            self.pump_all();
        }
        n
    }

    fn polls_from_peer(&self) -> bool {
        true
    }

    /// The ring from the peer on `ep`, read in place (see
    /// [`ring::RingConsumer::take_small`]); anything `progress_from` would
    /// not read at once is [`SmallRecv::Other`] and left to it.
    #[inline]
    fn recv_small(&mut self, ep: Endpoint, m: &SmallMatch, dst: &mut [u8]) -> SmallRecv {
        match self.rx_ring(ep) {
            Some(ring) => self.rx.take_small(ring, m, dst),
            None => SmallRecv::Other,
        }
    }

    fn has_work(&self) -> bool {
        self.bound > 0
            || !self.completions.is_empty()
            || !self.lost_reports.is_empty()
            || !self.orphans.is_empty()
            || self.emu_dirty
            || self.ops.live > 0
    }

    fn is_drained(&self) -> bool {
        // Ring records are delivered once written; what remains is local.
        self.completions.is_empty()
            && self.lost_reports.is_empty()
            && self.orphans.is_empty()
            && !self.emu_dirty
            && self.ops.live == 0
    }
}

impl Drop for SmBtl {
    fn drop(&mut self) {
        // Producers and mappings of peers first, then (field order) our
        // receiver, then our segment, which marks itself closed.
        self.peers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_round_trip_and_malformed_cards() {
        let btl = SmBtl::new(SmConfig::new(1, 3)).unwrap();
        let bytes = btl.business_card();
        assert_eq!(bytes.len(), SM_CARD_LEN);
        let card = SmCard::parse(&bytes).unwrap().unwrap();
        assert_eq!((card.local_index, card.local_count), (1, 3));
        assert_eq!(card.ring_capacity, BIG_RING);
        assert_eq!(card.seg, btl.segment.card());
        // Not an sm card of this version: None.
        assert!(SmCard::parse(b"").unwrap().is_none());
        assert!(SmCard::parse(b"OXSC....").unwrap().is_none());
        let mut v2 = bytes.clone();
        v2[4] = 2;
        assert!(SmCard::parse(&v2).unwrap().is_none());
        // Every truncation and every corrupted reserved/range field: Invalid,
        // never a panic.
        for len in 5..bytes.len() {
            assert!(SmCard::parse(&bytes[..len]).is_err(), "length {len}");
        }
        for (at, val) in [(5, 2u8), (6, 3), (6, 40), (7, 1), (8, 3), (12, 0)] {
            let mut b = bytes.clone();
            b[at] = val;
            if at == 12 {
                b[13] = 0;
                b[14] = 0;
                b[15] = 0;
            }
            assert!(SmCard::parse(&b).is_err(), "byte {at} = {val}");
        }
        let mut b = bytes.clone();
        b[32] ^= 0xff;
        assert!(SmCard::parse(&b).is_err());
    }

    #[test]
    fn add_peer_rules() {
        let mut a = SmBtl::new(SmConfig::new(0, 2)).unwrap();
        let b = SmBtl::new(SmConfig::new(1, 2)).unwrap();
        let card_a = a.business_card();
        let card_b = b.business_card();
        let info = |rank, local, card| PeerInfo { rank, local, card };
        assert_eq!(a.add_peer(&info(1, false, Some(&card_b))).unwrap(), None);
        assert_eq!(a.add_peer(&info(1, true, None)).unwrap(), None);
        assert_eq!(a.add_peer(&info(1, true, Some(&[1, 2, 3]))).unwrap(), None);
        assert_eq!(a.add_peer(&info(0, true, Some(&card_a))).unwrap(), None);
        assert!(a.add_peer(&info(1, true, Some(&card_b[..40]))).is_err());
        let ep = a.add_peer(&info(1, true, Some(&card_b))).unwrap().unwrap();
        assert_eq!(a.add_peer(&info(1, true, Some(&card_b))).unwrap(), Some(ep));
        // Another rank claiming the same local index.
        assert!(a.add_peer(&info(2, true, Some(&card_b))).is_err());
        // Nothing attached yet.
        assert_eq!(a.single_copy_to(ep), None);
        assert!(!a.has_work());
        let c = SmBtl::new(SmConfig::new(1, 3)).unwrap();
        let card_c = c.business_card();
        assert!(a.add_peer(&info(3, true, Some(&card_c))).is_err());
        // Alone on the node: an inbox without rings.
        let mut alone = SmBtl::new(SmConfig::new(0, 1)).unwrap();
        let mut rec = crate::conformance::Recorder::default();
        assert_eq!(alone.progress(&mut rec), 0);
        let card_alone = alone.business_card();
        let me = info(0, true, Some(&card_alone));
        assert_eq!(alone.add_peer(&me).unwrap(), None);
    }

    #[test]
    fn params_register_and_read_back() {
        use oxmpi_runtime::mca::{Registry, Sources};
        let mut reg = Registry::new();
        SmConfig::register_params(&mut reg).unwrap();
        reg.apply(
            &Sources::new()
                .with_env("btl_sm_ring_size", "16K")
                .with_env("btl_sm_single_copy", "0")
                .with_env("btl_sm_eager_limit", "2K")
                .with_env("btl_sm_evict_ahead", "3"),
        )
        .unwrap();
        let cfg = SmConfig::from_registry(&reg, 2, 4).unwrap();
        assert_eq!(cfg.evict_ahead, 3);
        assert_eq!(cfg.ring_capacity, 16 * 1024);
        assert!(!cfg.single_copy);
        assert_eq!(cfg.limits.eager_limit, 2048);
        assert_eq!(cfg.limits.max_send_size, DEFAULT_LIMITS.max_send_size);
        let btl = SmBtl::new(cfg).unwrap();
        assert_eq!(btl.limits().max_send_size, Ring::max_payload(16 * 1024));
        assert!(!btl.caps().contains(Caps::PUT));
        assert!(SmBtl::new(SmConfig {
            ring_capacity: 1000,
            ..SmConfig::new(0, 2)
        })
        .is_err());
        assert!(SmBtl::new(SmConfig::new(2, 2)).is_err());
        assert_eq!(SmConfig::new(0, 2).evict_ahead, DEFAULT_EVICT_AHEAD);
    }

    #[test]
    fn a_negative_evict_ahead_is_refused_by_name() {
        use oxmpi_runtime::mca::{Registry, Sources};
        let mut reg = Registry::new();
        SmConfig::register_params(&mut reg).unwrap();
        reg.apply(&Sources::new().with_env("btl_sm_evict_ahead", "-1"))
            .unwrap();
        let e = SmConfig::from_registry(&reg, 0, 2).unwrap_err().to_string();
        assert!(e.contains("btl_sm_evict_ahead") && e.contains("-1"), "{e}");
    }

    fn pair(sc_a: bool, sc_b: bool) -> (SmBtl, Endpoint, SmBtl, Endpoint) {
        match crate::conformance::sm_pair_with(sc_a, sc_b) {
            crate::conformance::Pair::Two(a, b) => (a.btl, a.ep, b.btl, b.ep),
            _ => unreachable!(),
        }
    }

    fn region(v: &[u8]) -> MemRegion {
        // SAFETY: each test keeps its buffers alive until its operations
        // completed.
        unsafe { MemRegion::from_slice(v) }
    }

    #[test]
    fn sm_btl_is_send() {
        fn send<T: Send>() {}
        send::<SmBtl>();
    }

    /// Two sm modules of one node (local indices 0 and 1) that know each
    /// other, with pair boxes allowed or not on each side.
    fn boxed_pair(boxes_a: bool, boxes_b: bool) -> (SmBtl, Endpoint, SmBtl, Endpoint) {
        let make = |index: u32, pair_boxes: bool| {
            SmBtl::new(SmConfig {
                pair_boxes,
                ..SmConfig::new(index, 2)
            })
            .unwrap()
        };
        let (mut a, mut b) = (make(0, boxes_a), make(1, boxes_b));
        let (card_a, card_b) = (a.business_card(), b.business_card());
        let info = |rank, card| PeerInfo {
            rank,
            local: true,
            card: Some(card),
        };
        let ab = a.add_peer(&info(1, &card_b)).unwrap().unwrap();
        let ba = b.add_peer(&info(0, &card_a)).unwrap().unwrap();
        (a, ab, b, ba)
    }

    fn fast_sends(btl: &SmBtl, ep: Endpoint) -> u64 {
        btl.peers[ep.0 as usize]
            .tx
            .as_ref()
            .map_or(0, |tx| tx.fast_sends())
    }

    /// Sends message `seq` from `from` to `ep`: a 16-byte header (the
    /// sequence number, then a marker) and `len` data bytes, through
    /// `sendi_hdr` (the fast box when it is empty and the record small).
    fn send_seq(from: &mut SmBtl, ep: Endpoint, seq: u64, len: usize) {
        let mut hdr = [0u8; 16];
        hdr[..8].copy_from_slice(&seq.to_le_bytes());
        hdr[8..].copy_from_slice(&0x5eed_u64.to_le_bytes());
        let data: Vec<u8> = (0..len)
            .map(|i| (seq as u8).wrapping_add(i as u8))
            .collect();
        while !from.sendi_hdr(ep, AmTag(7), &hdr, &data) {
            from.progress(&mut crate::conformance::Recorder::default());
        }
    }

    /// Checks what `rec` got against the sequence numbers from `next` on.
    fn check_seqs(rec: &mut crate::conformance::Recorder, next: &mut u64) {
        for (_, tag, d) in rec.recvs.drain(..) {
            assert_eq!(tag, AmTag(7));
            let seq = u64::from_le_bytes(d[..8].try_into().unwrap());
            assert_eq!(seq, *next, "message {next} out of order");
            let want: Vec<u8> = (0..d.len() - 16)
                .map(|i| (seq as u8).wrapping_add(i as u8))
                .collect();
            assert_eq!(&d[16..], &want[..], "message {seq}'s data");
            *next += 1;
        }
    }

    /// `way` 0: a progress pass, recorded in `rec`; 1: takes in place
    /// ([`drain_in_place`] from `ep`); else nothing. Checks what arrived
    /// from `next` on.
    fn drain_by(
        way: u64,
        btl: &mut SmBtl,
        rec: &mut crate::conformance::Recorder,
        ep: Endpoint,
        next: &mut u64,
    ) {
        match way {
            0 => {
                btl.progress(rec);
                check_seqs(rec, next);
            }
            1 => drain_in_place(btl, ep, next),
            _ => {}
        }
    }

    /// Takes in place (`recv_small`) every message from `ep` that is
    /// there, checking sequence numbers from `next` on and their data.
    fn drain_in_place(btl: &mut SmBtl, ep: Endpoint, next: &mut u64) {
        loop {
            let m = SmallMatch {
                tag: AmTag(7),
                hdr_len: 16,
                want: [*next, 0x5eed],
                mask: [u64::MAX; 2],
            };
            let mut dst = [0u8; 128];
            match btl.recv_small(ep, &m, &mut dst) {
                SmallRecv::Taken { len, .. } => {
                    let want: Vec<u8> = (0..len)
                        .map(|i| (*next as u8).wrapping_add(i as u8))
                        .collect();
                    assert_eq!(&dst[..len], &want[..], "message {next}'s data");
                    *next += 1;
                }
                SmallRecv::Empty => return,
                SmallRecv::Other => panic!("message {next} not next"),
            }
        }
    }

    #[test]
    fn small_messages_through_the_pair_line_keep_their_order_both_ways() {
        for (boxes_a, boxes_b) in [(true, true), (true, false), (false, true), (false, false)] {
            let (mut a, ab, mut b, ba) = boxed_pair(boxes_a, boxes_b);
            let (mut ra, mut rb) = (Default::default(), Default::default());
            let (mut sent_ab, mut sent_ba, mut got_ab, mut got_ba) = (0u64, 0u64, 0u64, 0u64);
            // Ping-pong of 8-byte messages taken in place (the blocking small
            // receive's path): each finds its box empty.
            let take = |btl: &mut SmBtl, ep: Endpoint, seq: u64| {
                let m = SmallMatch {
                    tag: AmTag(7),
                    hdr_len: 16,
                    want: [seq, 0x5eed],
                    mask: [u64::MAX; 2],
                };
                let mut dst = [0u8; 8];
                loop {
                    match btl.recv_small(ep, &m, &mut dst) {
                        SmallRecv::Taken { len, .. } => {
                            assert_eq!(len, 8);
                            let want: Vec<u8> =
                                (0..8).map(|i| (seq as u8).wrapping_add(i as u8)).collect();
                            assert_eq!(&dst[..], &want[..], "message {seq}");
                            return;
                        }
                        SmallRecv::Empty => {}
                        SmallRecv::Other => panic!("message {seq} refused"),
                    }
                }
            };
            for _ in 0..50 {
                send_seq(&mut a, ab, sent_ab, 8);
                take(&mut b, ba, sent_ab);
                (sent_ab, got_ab) = (sent_ab + 1, got_ab + 1);
                send_seq(&mut b, ba, sent_ba, 8);
                take(&mut a, ab, sent_ba);
                (sent_ba, got_ba) = (sent_ba + 1, got_ba + 1);
            }
            // Each side's first send binds the pair (through the ring);
            // every later one finds its box empty.
            let both = boxes_a && boxes_b;
            let want = if both { 49 } else { 0 };
            assert_eq!((fast_sends(&a, ab), fast_sends(&b, ba)), (want, want));
            // The same through progress passes: a record handed over by a
            // progress pass marks its box late, and the answer goes by the
            // ring (the box's line would be back with the other side by
            // then); so after one box record each way, both go by the ring.
            for _ in 0..50 {
                send_seq(&mut a, ab, sent_ab, 8);
                sent_ab += 1;
                while got_ab < sent_ab {
                    b.progress(&mut rb);
                    check_seqs(&mut rb, &mut got_ab);
                }
                send_seq(&mut b, ba, sent_ba, 8);
                sent_ba += 1;
                while got_ba < sent_ba {
                    a.progress(&mut ra);
                    check_seqs(&mut ra, &mut got_ba);
                }
            }
            let want = if both { (50, 50) } else { (0, 0) };
            assert_eq!((fast_sends(&a, ab), fast_sends(&b, ba)), want);
            // Bursts both ways of box-sized and larger records, the
            // receivers draining at random points (a fixed generator).
            let mut x = 0x9e37_79b9_7f4a_7c15_u64;
            let mut rnd = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            for _ in 0..400 {
                for _ in 0..=rnd(4) {
                    let len = [0, 8, 24, 100][rnd(4) as usize];
                    send_seq(&mut a, ab, sent_ab, len);
                    sent_ab += 1;
                }
                for _ in 0..=rnd(3) {
                    let len = [8, 0, 64][rnd(3) as usize];
                    send_seq(&mut b, ba, sent_ba, len);
                    sent_ba += 1;
                }
                // Drained by a progress pass (which marks a box it takes
                // from late) or taken in place (which clears the mark).
                drain_by(rnd(4), &mut b, &mut rb, ba, &mut got_ab);
                drain_by(rnd(4), &mut a, &mut ra, ab, &mut got_ba);
            }
            while got_ab < sent_ab || got_ba < sent_ba {
                a.progress(&mut ra);
                b.progress(&mut rb);
                check_seqs(&mut ra, &mut got_ba);
                check_seqs(&mut rb, &mut got_ab);
            }
            let (fa, fb) = (fast_sends(&a, ab), fast_sends(&b, ba));
            if both {
                assert!(fa > 50 && fb > 50, "boxes used in bursts: {fa} {fb}");
            } else {
                assert_eq!((fa, fb), (0, 0), "a box with no reader");
            }
        }
    }

    #[test]
    fn records_before_add_peer_are_kept_in_order() {
        let mut a = SmBtl::new(SmConfig::new(0, 2)).unwrap();
        let mut b = SmBtl::new(SmConfig::new(1, 2)).unwrap();
        let card_a = a.business_card();
        let ep_ba = b
            .add_peer(&PeerInfo {
                rank: 0,
                local: true,
                card: Some(&card_a),
            })
            .unwrap()
            .unwrap();
        for i in 0..5u8 {
            b.sendi(ep_ba, AmTag(i), &[&[i; 3]]).unwrap();
        }
        let mut rec = crate::conformance::Recorder::default();
        a.progress(&mut rec);
        assert!(rec.recvs.is_empty(), "no endpoint yet");
        let card_b = b.business_card();
        let ep_ab = a
            .add_peer(&PeerInfo {
                rank: 1,
                local: true,
                card: Some(&card_b),
            })
            .unwrap()
            .unwrap();
        b.sendi(ep_ba, AmTag(5), &[&[5; 3]]).unwrap();
        a.progress(&mut rec);
        a.progress(&mut rec);
        let got: Vec<_> = rec.recvs.iter().map(|(e, t, d)| (*e, t.0, d[0])).collect();
        let want: Vec<_> = (0..6u8).map(|i| (ep_ab, i, i)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn del_peer_unmaps_and_a_peer_can_come_back() {
        let (mut a, ep, mut b, ep_b) = pair(true, true);
        a.sendi(ep, AmTag(1), &[b"one"]).unwrap();
        assert!(a.has_work(), "bound");
        a.del_peer(ep);
        assert!(!a.has_work());
        assert!(matches!(
            a.sendi(ep, AmTag(1), &[b"x"]),
            Err(BtlError::Invalid(_))
        ));
        // What the deleted peer sends is dropped.
        b.sendi(ep_b, AmTag(2), &[b"dropped"]).unwrap();
        let mut rec = crate::conformance::Recorder::default();
        a.progress(&mut rec);
        assert!(rec.recvs.is_empty());
        let card_b = b.business_card();
        let again = a
            .add_peer(&PeerInfo {
                rank: 1,
                local: true,
                card: Some(&card_b),
            })
            .unwrap()
            .unwrap();
        assert_eq!(again, ep);
        a.sendi(ep, AmTag(3), &[b"back"]).unwrap();
        b.sendi(ep_b, AmTag(4), &[b"hello again"]).unwrap();
        let mut rb = crate::conformance::Recorder::default();
        b.progress(&mut rb);
        a.progress(&mut rec);
        assert_eq!(rb.recvs.len(), 2, "b got both of a's messages");
        assert_eq!(rec.recvs.len(), 1);
        assert_eq!(rec.recvs[0].2, b"hello again");
    }

    #[test]
    fn registrations_beyond_the_table_use_copy_in_copy_out() {
        let (mut a, ep, mut b, _) = pair(true, true);
        if !a.caps().contains(Caps::GET) {
            return;
        }
        let bufs: Vec<Vec<u8>> = (0..=REGISTRATION_SLOTS)
            .map(|i| vec![i as u8; 100])
            .collect();
        let regs: Vec<_> = bufs
            .iter()
            .map(|v| b.register_mem(region(v), Access::REMOTE_READ).unwrap())
            .collect();
        let last = regs.last().unwrap();
        assert_eq!(Key::decode(last.key.as_bytes()).unwrap().slot, NO_SLOT);
        let local = vec![0u8; 60];
        let (mut ra, mut rb) = (
            crate::conformance::Recorder::default(),
            crate::conformance::Recorder::default(),
        );
        // One through CMA (b does nothing), one through b's progress.
        a.get(ep, region(&local), &regs[7].key, 40, Token(1))
            .unwrap();
        a.progress(&mut ra);
        assert!(ra.completions[&Token(1)][0].is_ok());
        assert!(local.iter().all(|&x| x == 7));
        a.get(ep, region(&local), &last.key, 40, Token(2)).unwrap();
        for _ in 0..10 {
            a.progress(&mut ra);
            b.progress(&mut rb);
        }
        assert!(ra.completions[&Token(2)][0].is_ok());
        assert!(local.iter().all(|&x| x == REGISTRATION_SLOTS as u8));
        // A deregistration frees its slot for the next registration.
        b.deregister_mem(regs[3].id);
        let r = b
            .register_mem(region(&bufs[0]), Access::REMOTE_READ)
            .unwrap();
        assert_eq!(Key::decode(r.key.as_bytes()).unwrap().slot, 3);
    }

    #[test]
    fn peers_with_other_ring_sizes_are_refused_by_both_sides() {
        // One side's rings set smaller (btl_sm_ring_size on one rank only):
        // neither side uses sm for the other, so neither sends into a ring
        // whose owner never reads it.
        let mut a = SmBtl::new(SmConfig::new(0, 2)).unwrap();
        let mut b = SmBtl::new(SmConfig {
            ring_capacity: ring::DEFAULT_CAPACITY,
            ..SmConfig::new(1, 2)
        })
        .unwrap();
        let (card_a, card_b) = (a.business_card(), b.business_card());
        let info = |rank, card| PeerInfo {
            rank,
            local: true,
            card: Some(card),
        };
        assert_eq!(a.add_peer(&info(1, &card_b)).unwrap(), None);
        assert_eq!(b.add_peer(&info(0, &card_a)).unwrap(), None);
        // The same sizes: both take it.
        let mut c = SmBtl::new(SmConfig::new(1, 2)).unwrap();
        let card_c = c.business_card();
        assert!(a.add_peer(&info(1, &card_c)).unwrap().is_some());
        assert!(c.add_peer(&info(0, &card_a)).unwrap().is_some());
    }

    #[test]
    fn default_rings_are_big_on_small_nodes_only() {
        assert_eq!(default_ring_capacity(2), BIG_RING);
        assert_eq!(default_ring_capacity(BIG_RING_RANKS), BIG_RING);
        assert_eq!(
            default_ring_capacity(BIG_RING_RANKS + 1),
            ring::DEFAULT_CAPACITY
        );
        // ARCHITECTURE.md's table: per rank, 256 KiB rings up to 16 ranks.
        let table = REGISTRATION_SLOTS * SLOT_WORDS * 8;
        for (n, total) in [(2u32, 299_648usize), (8, 1_874_048), (16, 3_973_248)] {
            let inbox = Inbox::required_bytes(n as usize - 1, BIG_RING).unwrap();
            assert_eq!(DATA_OFFSET + 128 + inbox + table, total, "{n} ranks");
            assert_eq!(SmBtl::segment_bytes(n, BIG_RING).unwrap(), total);
        }
        // And 32 KiB of data goes eager with them.
        let b = SmBtl::new(SmConfig::new(0, 2)).unwrap();
        assert_eq!(b.limits().eager_limit, DEFAULT_LIMITS.eager_limit);
        assert!(b.limits().eager_limit >= (32 << 10) + 16);
        assert_eq!(b.limits().max_send_size, Ring::max_payload(BIG_RING));
    }

    #[test]
    fn memory_per_rank() {
        let cap = ring::DEFAULT_CAPACITY;
        for (n, inbox) in [(2u32, 66_048usize), (8, 460_800), (64, 4_145_536)] {
            assert_eq!(Inbox::required_bytes(n as usize - 1, cap).unwrap(), inbox);
            let total = SmBtl::segment_bytes(n, cap).unwrap();
            let table = REGISTRATION_SLOTS * SLOT_WORDS * 8;
            assert_eq!(total, DATA_OFFSET + 128 + inbox + table, "{n} ranks");
        }
    }
}
