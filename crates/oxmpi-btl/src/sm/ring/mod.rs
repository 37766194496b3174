//! Single-producer single-consumer rings of variable-length records in shared
//! memory, and the per-receiver [`inbox`] of rings.
//!
//! # Contract
//!
//! * A ring lives in a region that different processes map at different
//!   addresses: it holds no pointer, only offsets from its own start. Handles
//!   take a base pointer and a length ([`RingProducer::attach`],
//!   [`RingConsumer::attach`]); [`Ring::new_heap`] runs the same code over a
//!   heap block for single-process use.
//! * One producer and one consumer per ring (enforced at attach time by a
//!   flag in the ring). Records are delivered whole, in order, exactly once.
//! * A full ring is back-pressure: [`RingProducer::try_reserve`] returns
//!   [`SendError::Full`] and the caller retries later. Nothing grows, nothing
//!   is dropped.
//! * The data path makes no system call, takes no lock and allocates nothing,
//!   except that a producer wakes (`futex_wake`) a receiver that armed its
//!   inbox's doorbell to sleep ([`bell`]): each publication looks at that
//!   word, and only a set one costs the call.
//! * Bytes written by the other side are checked before use: a malformed
//!   header is [`RingError::Corrupt`], never out-of-bounds access or a panic.
//!
//! # Layout of one ring (offsets in bytes from the ring's start)
//!
//! ```text
//!   0  producer block (128 B): magic u64 @0, capacity u64 @8,
//!      producer-attached u64 @16, saved tail u64 @24, inbox-registered u64 @32,
//!      forward-ready u64 @40, reverse-ready u64 @48;
//!      the pair line @64: forward box (32 B) @64, reverse box (32 B) @96
//! 128  consumer block (128 B): head u64 @128, consumer-attached u64 @136
//! 256  data: `capacity` bytes (a power of two, 256 B ..= 4 MiB), 32-byte slots
//! ```
//!
//! Total: [`Ring::required_bytes`]`(capacity) = capacity + 256`. The head
//! (written by the consumer) and the producer's words sit 128 bytes apart, so
//! adjacent-line prefetch never couples them. The producer's tail is private
//! to the producer (kept in its handle, saved on detach): the consumer finds
//! records by their headers, never by reading the tail.
//!
//! # Records
//!
//! A record starts on a 32-byte slot: an 8-byte header word, then the
//! payload; its size is `8 + len` rounded up to 32 ([`record_bytes`]). A
//! payload of up to [`SLOT_PAYLOAD`] (24) bytes takes one slot, so two small
//! messages share a cache line and a stream of them moves two per line
//! transfer (Open MPI's fast boxes use 32-byte slots too; measured here: an
//! 8-byte message rate 25-30% higher than with one record per line, no
//! change in latency). Records never wrap: one
//! that would cross the end of the data area is preceded by a SKIP header that
//! sends the consumer to the start. The largest record is a quarter of the
//! data area plus one cache line: a payload of `capacity / 4 + 56` bytes
//! ([`Ring::max_payload`]; 16440 B at the default 64 KiB, so a 16 KiB MPI
//! message and its headers go in one record).
//!
//! Header word (little-endian `u64`, written last with one `Release` store,
//! read by the consumer with one `Acquire` load):
//!
//! ```text
//!  bits  0..32  stamp = (position / capacity + 1) as u32 (the lap, from 1)
//!  bits 32..40  tag   (the BTL active-message tag)
//!  bits 40..44  flags (1 = RECORD, 2 = SKIP, 5 = RECORD | CONTROL; never 0)
//!  bits 44..64  payload length (20 bits)
//! ```
//!
//! CONTROL marks a record the BTL keeps for itself (its own protocol, e.g.
//! copy-in/copy-out RDMA), so that every value of the 8-bit tag stays free
//! for the layer above: [`Reservation::commit_control`] writes one,
//! [`Record::is_control`] tells it apart.
//!
//! The stamp tells a fresh header from a stale one without any zeroing on
//! the fast path. When the consumer releases a record it writes 0 over the
//! first word of each slot after the first (the record's continuation
//! slots), and over each slot a SKIP jumped over; so when it polls a slot,
//! the slot starts with 0, last lap's header (stamp one lower) or this
//! lap's: never stale payload bytes that could pass for a header. One-slot
//! records (the latency case) need no clearing at all. Anything else there
//! is `Corrupt`.
//!
//! # Positions and the lazy head
//!
//! Positions (`head`, `tail`) are byte counts since the ring was formatted
//! (`u64`, they do not wrap in practice); offset = position mod capacity.
//! The consumer publishes its head only when it has consumed at least a
//! quarter of the capacity since the last publication, when it finds the ring
//! empty, or when it detaches; the producer keeps a cached head and reads the
//! shared one only when the ring looks full. So in steady state the producer
//! never pulls the consumer's line and the consumer touches only the lines it
//! reads. A producer blocked on a full ring always gets space once the
//! consumer drains it: draining ends in an empty poll, which publishes.
//!
//! # The pair line and its fast boxes
//!
//! Between two processes on different cores, a message that one side writes
//! in its own line and the other polls in another line (a ring per
//! direction, as every shared-memory MPI has) costs two line transfers per
//! one-way trip: the writer must take back the line the poller holds, then
//! the poller fetches it. When both directions write the *same* line, and
//! each reader writes it right after reading (here: emptying the box it
//! took), the line moves once per trip. Measured here with two processes
//! and ~45 ns of work between receiving and answering: 158-173 ns one-way
//! against 262-276 ns in the slow cross-core state (cache-line round trip
//! ~330 ns), and level in the usual state (79 against 78 ns).
//!
//! So each ring's producer block carries a pair line: two 32-byte fast
//! boxes, *forward* (producer to consumer, as the ring) and *reverse*. A
//! pair of processes uses one line, the one in the ring the higher rank
//! writes (see the sm BTL); its reverse box then carries the other
//! direction, read by the other ring's consumer ([`RingConsumer::set_fast`]).
//!
//! * A box holds one record of up to [`BOX_PAYLOAD`] (24) bytes. Its word
//!   is 0 when empty, 2 (LATE, below) when empty and not to be used, else
//!   FULL (bits 0..8), tag (8..16), length (16..24) and the low 32 bits of
//!   the producer's ring position when it was written (32..64), written
//!   last with `Release`; the payload follows it.
//! * [`RingProducer::try_send_small`] puts a record in the box when the box
//!   is tried (the [`FastArm`] shared with this side's reader of the other
//!   direction) and empty. Finding it full stops trying it (a stream goes
//!   by the ring, two records per line, with no look at a line the consumer
//!   is writing) until this side's reader of the other direction takes a
//!   box record in place or finds nothing to read.
//! * The gain needs the answer written soon after the read, before the
//!   other side, polling, takes the line back. The small receive
//!   ([`RingConsumer::take_small`], the blocking receive's path) answers
//!   soon. A record handed over by a progress pass ([`RingConsumer::peek`])
//!   is answered late (after its handler, a request's completion, the
//!   return from a test or wait call): the reader then copies it out and
//!   leaves the box marked LATE (empty; its writer uses the ring until the
//!   reader takes a record in place again, which clears the mark), and its
//!   own next small send (the answer) goes by the ring too. Measured in the
//!   slow state, an `MPI_Irecv` +
//!   `MPI_Test` loop ping-pong took 0.40 µs with the box against 0.33-0.34
//!   without; with the mark, 0.33 (ring only, as before).
//! * Order: the consumer delivers the box's record when its position is
//!   the consumer's own (every ring record sent before it was taken), else
//!   the ring's next record. It reads the ring's next header *before* the
//!   box's word: a ring record seen makes visible every box record written
//!   before it (`Release`/`Acquire`), so a box record is never passed by a
//!   later ring record. A box stamped ahead of an empty-looking ring makes
//!   the consumer read the ring again (the records before it are visible
//!   now); still empty is corrupt. Taking the box's record empties it
//!   (`Release`) at once, before the record is handled (`peek` hands over a
//!   copy): the reader's write right after its read, which keeps the line
//!   moving once per trip.
//! * A box is written only after its reader said it reads it (the ready
//!   words; the lower rank sets forward-ready on its inbox's rings before
//!   publishing it, the higher rank sets reverse-ready once its receiver
//!   reads that box).
//!
//! # Evicting ahead (the slow cross-core state)
//!
//! A stream of small records is limited by the producer, not the consumer:
//! every line it writes is still in the consumer's caches (read last lap,
//! or fetched ahead by the consumer's prefetchers while it waits at the
//! head), and must be taken back before the store completes. In the slow
//! cross-core state that costs a cross-die round trip per line, and once
//! an MPI send's other stores (about 30) fill the store queue behind it
//! the producer waits for each line in turn: 64 sends took 5.3 µs (an
//! 8-byte message rate of 9.5-10.5 M/s). `PREFETCHW` or an early store to
//! the line does not help here (measured with `docs/perf/probes/evict_ahead.c`).
//!
//! So the consumer, each time it releases a one-slot record that ends a
//! line (a stream of small messages, two to a line), evicts (`CLFLUSHOPT`)
//! the line [`RingConsumer::set_evict_ahead`] lines past the next one,
//! unless the producer has already written it this lap (its first word is
//! this lap's header: that line is for the consumer to read next; a line
//! starting inside a record is evicted, harmless). The producer then finds
//! that line in no other cache. Larger records evict
//! nothing: evicting ahead of them made a ring-path ping-pong slower in the
//! usual state (1 KiB latency 0.33 against 0.29 µs), as the producer's next
//! write of an evicted line then comes from memory. Measured, 8-byte
//! message rate: 11.9-13.5 M/s in the slow state (against 9.5-10.5), and
//! 21-22 against 23-24 M/s in the usual state, at the sm BTL's default of
//! 12 lines (`btl_sm_evict_ahead`). Eviction changes no memory: the
//! protocol above is the same with it on or off.
//!
//! # Memory per rank (one inbox: one ring per other local rank)
//!
//! The table is for [`DEFAULT_CAPACITY`]; the sm BTL uses it past 16 local
//! ranks and 256 KiB rings up to 16 (its `default_ring_capacity`).
//!
//! [`Inbox::required_bytes`]`(n, cap) = 256 + round_up(8 n, 128) + n (cap + 256)`.
//! With the default 64 KiB rings ([`DEFAULT_CAPACITY`]):
//!
//! | local ranks | senders per inbox | bytes per rank | per node (all inboxes) |
//! |---|---|---|---|
//! | 2  | 1  | 66 176 (64.6 KiB)      | 129 KiB  |
//! | 8  | 7  | 460 928 (450 KiB)      | 3.52 MiB |
//! | 64 | 63 | 4 145 664 (3.95 MiB)   | 253 MiB  |
//!
//! At 64 ranks a 16 KiB ring (max payload 4088 B) brings this to 1.00 MiB
//! per rank (`tests/ring_basic.rs` checks these figures).
//!
//! # Loom
//!
//! The protocol is model-checked by `tests/ring_loom.rs` (run by
//! `scripts/test-all.sh`):
//! `RUSTFLAGS="--cfg loom" cargo test -p oxmpi-btl --test ring_loom --release`.
//! The code checked is the code that runs: under loom only the region
//! (the private `mem` module: loom atomics, payload bytes carried by
//! `Relaxed` words) and the atomics (`sync`) differ. Memory the caller maps
//! cannot be modelled, so the entry points that take it (`mapped`) exist
//! outside loom only; the heap constructors ([`Ring::new_heap`],
//! [`Inbox::new_heap`]) run the same code over a region of their own.
#![allow(unsafe_code)]

pub mod bell;
pub mod inbox;
#[cfg(not(loom))]
mod mapped;
mod mem;
mod sync;

pub use bell::{register_barrier, Bell, Slept};
pub use inbox::{HeapInbox, Inbox, InboxReceiver, PollError};

use crate::btl::{SmallMatch, SmallRecv};
use mem::Mem;
use std::sync::Arc;
use sync::Ordering::{Acquire, Relaxed, Release};
use sync::{AtomicU64, AtomicU8};

/// A cache line (the ring's memory is aligned to one).
pub const LINE: usize = 64;
/// Records start on a slot and are a whole number of them: two to a line,
/// so a stream of small messages moves two per line transfer.
pub const SLOT: usize = 32;
/// Bytes of a record header.
pub const HEADER_BYTES: usize = 8;
/// The largest payload that fits in one slot with its header.
pub const SLOT_PAYLOAD: usize = SLOT - HEADER_BYTES;
/// The largest payload that fits in one cache line with its header.
pub const INLINE_PAYLOAD: usize = LINE - HEADER_BYTES;
/// The default data capacity of a ring.
pub const DEFAULT_CAPACITY: usize = 64 * 1024;
/// The smallest capacity (eight slots; its largest record takes two).
pub const MIN_CAPACITY: usize = 256;
/// The largest capacity (its largest payload still fits the 20-bit length).
pub const MAX_CAPACITY: usize = 4 << 20;

const BLOCK: usize = 128;
// Ring control words.
const R_MAGIC: usize = 0;
const R_CAPACITY: usize = 8;
const R_PRODUCER_ATTACHED: usize = 16;
const R_TAIL_SAVED: usize = 24;
pub(crate) const R_REGISTERED: usize = 32;
/// Set once the consumer's side reads the pair line's forward box.
const R_FORWARD_READY: usize = 40;
/// Set once the producer's side reads the pair line's reverse box.
const R_REVERSE_READY: usize = 48;
/// The pair line: the producer block's second cache line.
const R_PAIR: usize = 64;
const R_HEAD: usize = BLOCK;
const R_CONSUMER_ATTACHED: usize = BLOCK + 8;
const R_DATA: usize = 2 * BLOCK;
/// Changes with the record layout ("RN2": 32-byte slots; "RN3": records of
/// a quarter of the ring and a cache line; "RN4": the pair line).
const RING_MAGIC: u64 = u64::from_le_bytes(*b"oxmpiRN4");

// Fast box word: FULL in bits 0..8, tag 8..16, length 16..24, the
// producer's ring position (low 32 bits) 32..64. Zero: empty; LATE: empty
// and not to be used.
const BOX_FULL: u64 = 1;
/// An empty box whose reader asks its writer to use the ring: it handed
/// the box's last record over in a progress pass ("late", see
/// [`RingConsumer::peek`]). The reader clears it when it takes in place.
const BOX_LATE: u64 = 2;
/// Bytes of one fast box (its word and its payload).
const BOX_BYTES: usize = 32;
/// The largest payload a fast box carries (as a one-slot record).
pub const BOX_PAYLOAD: usize = BOX_BYTES - HEADER_BYTES;

// Header word.
const TAG_SHIFT: u32 = 32;
const FLAGS_SHIFT: u32 = 40;
const LEN_SHIFT: u32 = 44;
const FLAG_RECORD: u64 = 1;
const FLAG_SKIP: u64 = 2;
const FLAG_CONTROL: u64 = 4;
/// How far ahead of the record being read the consumer prefetches.
const PREFETCH_AHEAD: usize = 128;

/// Bytes a record with `payload_len` bytes of payload occupies in the ring:
/// header plus payload rounded up to whole slots.
#[inline]
pub const fn record_bytes(payload_len: usize) -> usize {
    (HEADER_BYTES + payload_len).div_ceil(SLOT) * SLOT
}

#[inline(always)]
fn stamp_of(pos: u64, shift: u32) -> u32 {
    ((pos >> shift) as u32).wrapping_add(1)
}

#[inline(always)]
fn header(stamp: u32, tag: u8, flags: u64, len: usize) -> u64 {
    stamp as u64 | (tag as u64) << TAG_SHIFT | flags << FLAGS_SHIFT | (len as u64) << LEN_SHIFT
}

/// Why a ring (or inbox) cannot be formatted, attached or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// The capacity is not a power of two in `MIN_CAPACITY..=MAX_CAPACITY`.
    #[error("ring capacity {0} is not a power of two between 256 B and 4 MiB")]
    BadCapacity(usize),
    /// The region is smaller than the ring or inbox needs.
    #[error("region of {have} bytes is smaller than the {need} bytes needed")]
    TooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes given.
        have: usize,
    },
    /// The region's base is not 64-byte aligned.
    #[error("region base is not 64-byte aligned")]
    Misaligned,
    /// The region does not hold a formatted ring or inbox.
    #[error("region does not hold a formatted ring or inbox")]
    NotInitialized,
    /// That side of the ring already has a handle.
    #[error("the ring's {0} is already attached")]
    AlreadyAttached(&'static str),
    /// A sender index beyond the inbox's sender count.
    #[error("sender {sender} out of range (inbox has {n_senders} senders)")]
    NoSuchSender {
        /// The index asked for.
        sender: usize,
        /// Senders the inbox was formatted for.
        n_senders: usize,
    },
    /// The other side wrote a header this side cannot accept.
    #[error("corrupt ring header {header:#018x} at offset {offset}")]
    Corrupt {
        /// The header word.
        header: u64,
        /// Its offset in the data area.
        offset: usize,
    },
}

/// Why a record could not be reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No room now: retry after the consumer has made progress.
    #[error("ring full")]
    Full,
    /// The payload exceeds [`Ring::max_payload`]: it will never fit.
    #[error("payload of {len} bytes exceeds the ring's maximum of {max}")]
    TooLarge {
        /// Bytes asked for.
        len: usize,
        /// The ring's largest payload.
        max: usize,
    },
}

/// Sizes, formatting and the heap constructor of a ring.
pub struct Ring;

impl Ring {
    /// Checks a capacity.
    pub fn check_capacity(capacity: usize) -> Result<(), RingError> {
        if capacity.is_power_of_two() && (MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            Ok(())
        } else {
            Err(RingError::BadCapacity(capacity))
        }
    }

    /// Bytes a ring with `capacity` bytes of data needs (`capacity + 256`).
    pub const fn required_bytes(capacity: usize) -> usize {
        R_DATA + capacity
    }

    /// The largest payload a ring of `capacity` carries (`capacity/4 + 56`:
    /// a record of a quarter of the ring and a cache line, at most 1 MiB,
    /// what the header's length field holds).
    pub const fn max_payload(capacity: usize) -> usize {
        let record = capacity / 4 + LINE;
        (if record < 1 << 20 { record } else { 1 << 20 }) - HEADER_BYTES
    }

    /// Formats a ring in `mem` (which is exactly `required_bytes` long).
    fn format(mem: &Mem, capacity: usize) -> Result<(), RingError> {
        Self::check_capacity(capacity)?;
        if mem.len() < Self::required_bytes(capacity) {
            return Err(RingError::TooSmall {
                need: Self::required_bytes(capacity),
                have: mem.len(),
            });
        }
        for off in [
            R_MAGIC,
            R_PRODUCER_ATTACHED,
            R_TAIL_SAVED,
            R_REGISTERED,
            R_FORWARD_READY,
            R_REVERSE_READY,
            R_HEAD,
            R_CONSUMER_ATTACHED,
        ] {
            mem.word(off).store(0, Relaxed);
        }
        for off in (R_PAIR..R_PAIR + LINE).step_by(8) {
            mem.word(off).store(0, Relaxed);
        }
        for slot in (0..capacity).step_by(SLOT) {
            mem.word(R_DATA + slot).store(0, Relaxed);
        }
        mem.word(R_CAPACITY).store(capacity as u64, Relaxed);
        // Publishes the words above to whoever attaches (Acquire on magic).
        mem.word(R_MAGIC).store(RING_MAGIC, Release);
        Ok(())
    }

    /// Reads and checks the header of a formatted ring; returns its capacity.
    fn capacity_of(mem: &Mem) -> Result<usize, RingError> {
        if mem.len() < R_DATA || mem.word(R_MAGIC).load(Acquire) != RING_MAGIC {
            return Err(RingError::NotInitialized);
        }
        let capacity = mem.word(R_CAPACITY).load(Relaxed);
        let capacity = usize::try_from(capacity).map_err(|_| RingError::BadCapacity(usize::MAX))?;
        Self::check_capacity(capacity)?;
        if mem.len() < Self::required_bytes(capacity) {
            return Err(RingError::TooSmall {
                need: Self::required_bytes(capacity),
                have: mem.len(),
            });
        }
        Ok(capacity)
    }

    /// A ring on the heap, formatted, with both its handles (for tests,
    /// benches and one-process use; the same code as the shared case).
    pub fn new_heap(capacity: usize) -> Result<(RingProducer, RingConsumer), RingError> {
        Self::check_capacity(capacity)?;
        let mem = Mem::new_heap(Self::required_bytes(capacity));
        Self::format(&mem, capacity)?;
        Ok((
            RingProducer::from_mem(mem.sub(0, mem.len()), Bell::new_heap())?,
            RingConsumer::from_mem(mem)?,
        ))
    }
}

/// Claims one side of a ring: 0 -> 1 on its attached word.
fn claim(mem: &Mem, off: usize, side: &'static str) -> Result<(), RingError> {
    mem.word(off)
        .compare_exchange(0, 1, Acquire, Relaxed)
        .map(|_| ())
        .map_err(|_| RingError::AlreadyAttached(side))
}

/// One direction's fast box in a [`PairLine`]: room for one small record
/// (see the module doc).
pub struct FastBox {
    mem: Mem,
}

impl FastBox {
    #[inline(always)]
    fn word(&self) -> &AtomicU64 {
        self.mem.word(0)
    }

    /// The same box, keeping `owner` (the mapping it lies in) alive while
    /// the box lives.
    pub fn keeping(mut self, owner: Arc<dyn Send + Sync>) -> FastBox {
        self.mem.keep(owner);
        self
    }
}

/// A ring's pair line (the producer block's second cache line): the fast
/// boxes of both directions between the ring's two ends, and the ready
/// word of the reverse one (see the module doc).
pub struct PairLine {
    mem: Mem,
}

impl PairLine {
    /// The box carrying records the way the ring does (producer to
    /// consumer).
    pub fn forward(&self) -> FastBox {
        FastBox {
            mem: self.mem.sub(R_PAIR, BOX_BYTES),
        }
    }

    /// The box carrying records the other way (the ring's consumer to its
    /// producer).
    pub fn reverse(&self) -> FastBox {
        FastBox {
            mem: self.mem.sub(R_PAIR + BOX_BYTES, BOX_BYTES),
        }
    }

    /// Says that the forward box is read from now on: its writer
    /// ([`FastTx::forward`]) starts using it.
    pub fn set_forward_ready(&self) {
        self.mem.word(R_FORWARD_READY).store(1, Release);
    }

    /// Says that the reverse box is read from now on: its writer
    /// ([`FastTx::reverse`]) starts using it.
    pub fn set_reverse_ready(&self) {
        self.mem.word(R_REVERSE_READY).store(1, Release);
    }
}

/// Whether a side's fast box is tried, shared by its [`FastTx`] and the
/// [`FastRx`] of the other direction (process-local, not shared memory).
#[derive(Clone, Debug)]
pub struct FastArm(Arc<AtomicU8>);

const ARM_OFF: u8 = 0;
const ARM_ON: u8 = 1;
/// Off, and not armed by an empty poll before this side's next small send.
const ARM_LATE: u8 = 2;

impl FastArm {
    /// Tried.
    pub fn new() -> FastArm {
        FastArm(Arc::new(AtomicU8::new(ARM_ON)))
    }

    /// Whether the writer tries its box now (a late state ends here: the
    /// answer it was about goes by the ring).
    #[inline(always)]
    fn try_now(&self) -> bool {
        match self.0.load(Relaxed) {
            ARM_ON => true,
            ARM_OFF => false,
            _ => {
                self.0.store(ARM_OFF, Relaxed);
                false
            }
        }
    }

    #[inline(always)]
    fn set(&self, state: u8) {
        self.0.store(state, Relaxed);
    }

    /// Arms it unless it is late (an empty poll).
    #[inline(always)]
    fn arm_idle(&self) {
        if self.0.load(Relaxed) == ARM_OFF {
            self.0.store(ARM_ON, Relaxed);
        }
    }
}

impl Default for FastArm {
    fn default() -> FastArm {
        FastArm::new()
    }
}

/// The writing side of a fast box, given to [`RingProducer::set_fast`].
pub struct FastTx {
    bx: FastBox,
    ready: Option<Mem>,
    armed: FastArm,
    sent: u64,
}

impl FastTx {
    /// Writes `line`'s forward box once its reader said it reads it
    /// ([`PairLine::set_forward_ready`]). `armed` is shared with the
    /// [`FastRx`] of the other direction: the box is tried only while it
    /// is set.
    pub fn forward(line: &PairLine, armed: FastArm) -> FastTx {
        FastTx {
            bx: line.forward(),
            ready: Some(line.mem.sub(R_FORWARD_READY, 8)),
            armed,
            sent: 0,
        }
    }

    /// As [`FastTx::forward`], for `line`'s reverse box
    /// ([`PairLine::set_reverse_ready`]).
    pub fn reverse(line: &PairLine, armed: FastArm) -> FastTx {
        FastTx {
            bx: line.reverse(),
            ready: Some(line.mem.sub(R_REVERSE_READY, 8)),
            armed,
            sent: 0,
        }
    }

    /// Puts a record of `hdr` and `data` (`len` bytes in all, at most
    /// [`BOX_PAYLOAD`]) in the box, stamped with the ring position `tail`,
    /// if the box is tried and empty. Finding it full stops trying it
    /// until the reader side sets `armed` again: a stream goes by the ring.
    #[inline(always)]
    fn try_send(&mut self, tag: u8, hdr: &[u8], data: &[u8], len: usize, tail: u64) -> bool {
        if !self.armed.try_now() || (self.ready.is_some() && !self.check_ready()) {
            return false;
        }
        match self.bx.word().load(Acquire) {
            0 => {}
            // Empty, but its reader takes late: the ring.
            BOX_LATE => return false,
            _ => {
                self.armed.set(ARM_OFF);
                return false;
            }
        }
        {
            // SAFETY: bytes 8 .. 8 + len (<= 32) of the box, which is empty:
            // its reader does not touch the payload until the word below
            // says full, and the writer is this handle alone.
            let dst = unsafe { self.bx.mem.bytes_mut(HEADER_BYTES, len) };
            let (a, b) = dst.split_at_mut(hdr.len());
            crate::mem::copy_small(a, hdr);
            crate::mem::copy_small(b, data);
        }
        self.bx.mem.commit_bytes(HEADER_BYTES, len);
        let word = BOX_FULL | (tag as u64) << 8 | (len as u64) << 16 | (tail as u32 as u64) << 32;
        // Release: the payload above becomes visible with the word.
        self.bx.word().store(word, Release);
        self.sent += 1;
        true
    }

    #[cold]
    fn check_ready(&mut self) -> bool {
        let ready = self
            .ready
            .as_ref()
            .is_some_and(|r| r.word(0).load(Acquire) != 0);
        if ready {
            self.ready = None;
        }
        ready
    }
}

/// The reading side of a fast box, given to [`RingConsumer::set_fast`].
pub struct FastRx {
    bx: FastBox,
    armed: Option<FastArm>,
    /// A box record taken out for [`RingConsumer::peek`] (the box emptied
    /// at once) and not released yet: its tag and length, if any, and its
    /// payload. It comes before anything else.
    held: Option<(u8, u8)>,
    copy: [u8; BOX_PAYLOAD],
}

impl FastRx {
    /// Reads `bx`, updating `armed` (shared with the [`FastTx`] of the other
    /// direction, if any): on when it takes a box record in place, late
    /// (this side's next small send goes by the ring) when a progress pass
    /// takes one, on again when it finds box and ring empty.
    pub fn new(bx: FastBox, armed: Option<FastArm>) -> FastRx {
        FastRx {
            bx,
            armed,
            held: None,
            copy: [0; BOX_PAYLOAD],
        }
    }

    /// A box record was taken in place (the small receive: answered soon).
    #[inline(always)]
    fn arm(&self) {
        if let Some(a) = &self.armed {
            a.set(ARM_ON);
        }
    }

    /// Box and ring were found empty.
    #[inline(always)]
    fn arm_idle(&self) {
        if let Some(a) = &self.armed {
            a.arm_idle();
        }
    }

    /// A box record was handed over by a progress pass (answered late).
    #[inline(always)]
    fn late(&self) {
        if let Some(a) = &self.armed {
            a.set(ARM_LATE);
        }
    }
}

/// The producer side of a ring.
pub struct RingProducer {
    mem: Mem,
    capacity: u64,
    mask: u64,
    shift: u32,
    max_payload: usize,
    tail: u64,
    head_cache: u64,
    fast: Option<FastTx>,
    /// The receiver's doorbell, looked at after each record published.
    bell: Bell,
}

impl RingProducer {
    /// The producer of the ring in `mem`, ringing `bell` (its receiver's)
    /// after each record it publishes.
    pub(crate) fn from_mem(mem: Mem, bell: Bell) -> Result<RingProducer, RingError> {
        let capacity = Ring::capacity_of(&mem)?;
        claim(&mem, R_PRODUCER_ATTACHED, "producer")?;
        // Before anything is published: the receivers' barrier reaches this
        // process from now on (see `bell`).
        register_barrier();
        let tail = mem.word(R_TAIL_SAVED).load(Relaxed);
        let head_cache = mem.word(R_HEAD).load(Acquire);
        Ok(RingProducer {
            mem,
            capacity: capacity as u64,
            mask: capacity as u64 - 1,
            shift: capacity.trailing_zeros(),
            max_payload: Ring::max_payload(capacity),
            tail,
            head_cache,
            fast: None,
            bell,
        })
    }

    /// The same handle, also keeping `owner` (the mapping the ring lies
    /// in) alive while it or anything it hands out lives.
    pub fn keeping(mut self, owner: Arc<dyn Send + Sync>) -> RingProducer {
        self.mem.keep(owner.clone());
        self.bell.keeping_in_place(owner);
        self
    }

    /// Lets small records go through a fast box when it is empty (see the
    /// module doc); `None` stops it.
    pub fn set_fast(&mut self, fast: Option<FastTx>) {
        self.fast = fast;
    }

    /// Records sent through the fast box so far.
    pub fn fast_sends(&self) -> u64 {
        self.fast.as_ref().map_or(0, |f| f.sent)
    }

    /// This ring's pair line.
    pub fn pair_line(&self) -> PairLine {
        PairLine {
            mem: self.mem.sub(0, BLOCK),
        }
    }

    /// The largest payload this ring carries.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Bytes ever committed (records and skips): the producer's position.
    pub fn position(&self) -> u64 {
        self.tail
    }

    /// Reserves room for a record of `len` payload bytes, to be written in
    /// place and then [`Reservation::commit`]ted. Dropping the reservation
    /// sends nothing.
    #[inline]
    pub fn try_reserve(&mut self, len: usize) -> Result<Reservation<'_>, SendError> {
        if len > self.max_payload {
            return Err(SendError::TooLarge {
                len,
                max: self.max_payload,
            });
        }
        let size = record_bytes(len) as u64;
        let off = self.tail & self.mask;
        let to_end = self.capacity - off;
        let need = if size > to_end { to_end + size } else { size };
        if self.tail + need - self.head_cache > self.capacity {
            // Looks full: only now read the consumer's line.
            self.head_cache = self.mem.word(R_HEAD).load(Acquire);
            if self.tail + need - self.head_cache > self.capacity {
                return Err(SendError::Full);
            }
        }
        let mut off = off as usize;
        if size > to_end {
            let skip = header(stamp_of(self.tail, self.shift), 0, FLAG_SKIP, 0);
            self.mem.word(R_DATA + off).store(skip, Release);
            self.tail += to_end;
            off = 0;
        }
        Ok(Reservation {
            producer: self,
            off,
            len,
        })
    }

    /// Sends one record whose payload is the concatenation of `parts` (e.g. a
    /// protocol header and user data), copied straight into the ring.
    #[inline]
    pub fn try_send(&mut self, tag: u8, parts: &[&[u8]]) -> Result<(), SendError> {
        let len = parts.iter().map(|p| p.len()).sum();
        self.try_send_len(tag, parts, len)
    }

    /// [`RingProducer::try_send`] with the payload's length (the sum of
    /// the parts' lengths) already known.
    #[inline]
    pub fn try_send_len(&mut self, tag: u8, parts: &[&[u8]], len: usize) -> Result<(), SendError> {
        debug_assert_eq!(len, parts.iter().map(|p| p.len()).sum::<usize>());
        let mut r = self.try_reserve(len)?;
        let mut at = 0;
        let dst = r.payload_mut();
        for p in parts {
            // A small message's header and data: no call into memcpy.
            crate::mem::copy_small(&mut dst[at..at + p.len()], p);
            at += p.len();
        }
        r.commit(tag);
        Ok(())
    }

    /// The small-message path's record: a header of 8 to 16 bytes and at
    /// most 16 bytes of data, written straight with no call (so that it
    /// saves no registers: every store counts in the slow cross-core state,
    /// see `docs/performance.md`). False writes nothing, for a caller to
    /// use [`RingProducer::try_send`] instead: other sizes, a record that
    /// would wrap, or a ring that looks full by the cached head (its reload
    /// is left to the general path).
    #[inline(always)]
    pub fn try_send_small(&mut self, tag: u8, hdr: &[u8], data: &[u8]) -> bool {
        let (h, len) = (hdr.len(), hdr.len() + data.len());
        let small = (8..=16).contains(&h) && data.len() <= 16;
        if let Some(f) = &mut self.fast {
            if small && len <= BOX_PAYLOAD && f.try_send(tag, hdr, data, len, self.tail) {
                self.bell.ring_if_armed();
                return true;
            }
        }
        let size = record_bytes(len) as u64;
        let tail = self.tail;
        let off = tail & self.mask;
        if !small
            || len > self.max_payload
            || size > self.capacity - off
            || tail + size - self.head_cache > self.capacity
        {
            return false;
        }
        // The header word and the next position first, so that few values
        // stay live across the copies.
        let head = header(stamp_of(tail, self.shift), tag, FLAG_RECORD, len);
        self.tail = tail + size;
        let off = off as usize;
        {
            // SAFETY: `off + 8 .. off + 8 + len` lies inside the data area
            // (the record ends before the ring's end, checked above) in
            // space the consumer has released (the cached head, which only
            // lags the real one, leaves room): the producer alone owns it
            // until the header below publishes it.
            let dst = unsafe { self.mem.bytes_mut(R_DATA + off + HEADER_BYTES, len) };
            let (a, b) = dst.split_at_mut(h);
            crate::mem::copy_small(a, hdr);
            crate::mem::copy_small(b, data);
        }
        self.mem.commit_bytes(R_DATA + off + HEADER_BYTES, len);
        // Release: the payload above becomes visible with the header.
        self.mem.word(R_DATA + off).store(head, Release);
        self.bell.ring_if_armed();
        true
    }

    /// As [`RingProducer::try_send`], for a CONTROL record (see the module
    /// doc).
    #[inline]
    pub fn try_send_control(&mut self, tag: u8, parts: &[&[u8]]) -> Result<(), SendError> {
        let len = parts.iter().map(|p| p.len()).sum();
        let mut r = self.try_reserve(len)?;
        let mut at = 0;
        let dst = r.payload_mut();
        for p in parts {
            dst[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        r.commit_control(tag);
        Ok(())
    }
}

impl Drop for RingProducer {
    fn drop(&mut self) {
        self.mem.word(R_TAIL_SAVED).store(self.tail, Relaxed);
        self.mem.word(R_PRODUCER_ATTACHED).store(0, Release);
    }
}

/// Room for one record, reserved in the ring: fill [`payload_mut`] then
/// [`commit`].
///
/// [`payload_mut`]: Reservation::payload_mut
/// [`commit`]: Reservation::commit
pub struct Reservation<'a> {
    producer: &'a mut RingProducer,
    off: usize,
    len: usize,
}

impl Reservation<'_> {
    /// The payload, in the ring (zero copy). Its initial contents are
    /// unspecified (whatever an earlier lap left).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        // SAFETY: `off + 8 .. off + 8 + len` lies inside the data area
        // (records never wrap) in space the consumer has released and not
        // yet been told about: the producer alone owns it until commit.
        unsafe {
            self.producer
                .mem
                .bytes_mut(R_DATA + self.off + HEADER_BYTES, self.len)
        }
    }

    /// Shrinks the record to `len` payload bytes (e.g. a pack produced less
    /// than reserved). Larger values are ignored. The slots given back are
    /// cleared, so payload already written there can never pass for a
    /// header; to abandon a reservation whose payload was written, truncate
    /// it to 0 before dropping it.
    pub fn truncate(&mut self, len: usize) {
        let old = record_bytes(self.len);
        self.len = self.len.min(len);
        for slot in (self.off + record_bytes(self.len)..self.off + old).step_by(SLOT) {
            self.producer.mem.word(R_DATA + slot).store(0, Relaxed);
        }
    }

    /// Publishes the record with its BTL tag.
    #[inline]
    pub fn commit(self, tag: u8) {
        self.publish(tag, FLAG_RECORD);
    }

    /// Publishes the record as a CONTROL record (see the module doc).
    #[inline]
    pub fn commit_control(self, tag: u8) {
        self.publish(tag, FLAG_RECORD | FLAG_CONTROL);
    }

    #[inline(always)]
    fn publish(self, tag: u8, flags: u64) {
        let p = self.producer;
        p.mem
            .commit_bytes(R_DATA + self.off + HEADER_BYTES, self.len);
        let h = header(stamp_of(p.tail, p.shift), tag, flags, self.len);
        // Release: the payload above becomes visible with the header.
        p.mem.word(R_DATA + self.off).store(h, Release);
        p.tail += record_bytes(self.len) as u64;
        p.bell.ring_if_armed();
    }
}

/// The consumer side of a ring.
pub struct RingConsumer {
    mem: Mem,
    capacity: u64,
    mask: u64,
    shift: u32,
    max_payload: usize,
    head: u64,
    published: u64,
    publish_every: u64,
    fast: Option<FastRx>,
    /// Bytes ahead of the head whose line is evicted as the head enters a
    /// new line (0: none); see [`RingConsumer::set_evict_ahead`].
    evict_ahead: u64,
}

/// What comes next from a ring and its fast box.
enum Next {
    /// The box record taken out before and kept ([`FastRx`]'s `held`).
    Held,
    /// A ring record: its offset and header word.
    Ring(usize, u64),
    /// The fast box's record: its word.
    Fast(u64),
}

impl RingConsumer {
    pub(crate) fn from_mem(mem: Mem) -> Result<RingConsumer, RingError> {
        let capacity = Ring::capacity_of(&mem)?;
        claim(&mem, R_CONSUMER_ATTACHED, "consumer")?;
        let head = mem.word(R_HEAD).load(Relaxed);
        Ok(RingConsumer {
            mem,
            capacity: capacity as u64,
            mask: capacity as u64 - 1,
            shift: capacity.trailing_zeros(),
            max_payload: Ring::max_payload(capacity),
            head,
            published: head,
            publish_every: capacity as u64 / 4,
            fast: None,
            evict_ahead: 0,
        })
    }

    /// Each time a released one-slot record ends a line, evicts the line
    /// `lines` lines past the head's from every cache if the producer has
    /// not written it this lap
    /// (see "Evicting ahead" in the module doc). 0 (the default) turns it
    /// off, as does a processor without the instruction; at most an eighth
    /// of the ring. Returns the distance in force, in lines.
    pub fn set_evict_ahead(&mut self, lines: usize) -> usize {
        let lines = if mem::can_evict() {
            lines.min(self.capacity as usize / LINE / 8)
        } else {
            0
        };
        self.evict_ahead = (lines * LINE) as u64;
        lines
    }

    /// Reads a fast box along with the ring, in order (see the module
    /// doc); `None` stops it. Set it before the box's writer may use it.
    /// A box record held out of the old box ([`Record::keep`]) stays the
    /// next record: it moves to the new one, and `None` is ignored until it
    /// is released.
    pub fn set_fast(&mut self, fast: Option<FastRx>) {
        let held = self.fast.as_ref().and_then(|f| f.held.map(|h| (h, f.copy)));
        match (fast, held) {
            (Some(mut f), Some((h, copy))) => {
                f.held = Some(h);
                f.copy = copy;
                self.fast = Some(f);
            }
            (None, Some(_)) => {}
            (fast, None) => self.fast = fast,
        }
    }

    /// This ring's pair line.
    pub fn pair_line(&self) -> PairLine {
        PairLine {
            mem: self.mem.sub(0, BLOCK),
        }
    }

    /// The next record of the ring and its fast box, in the order the
    /// producer sent them: the box's record when its stamp is the
    /// consumer's position (every ring record sent before it is taken),
    /// else the ring's. At each position the ring's header is read before
    /// the box's word: a ring header seen (a record or a SKIP) makes every
    /// box record written before it visible, so a box stamped at a SKIP's
    /// position is delivered before the SKIP is passed.
    #[inline(always)]
    fn next(&mut self) -> Result<Option<Next>, RingError> {
        // Without a box its word reads as 0 below: the ring alone.
        if self.fast.as_ref().is_some_and(|f| f.held.is_some()) {
            return Ok(Some(Next::Held));
        }
        let mut looked_again = false;
        loop {
            let off = (self.head & self.mask) as usize;
            let stamp = stamp_of(self.head, self.shift);
            let h = self.mem.word(R_DATA + off).load(Acquire);
            let fresh = h as u32 == stamp && h != 0;
            if !fresh && h != 0 && h as u32 != stamp.wrapping_sub(1) {
                return Err(RingError::Corrupt {
                    header: h,
                    offset: off,
                });
            }
            let w = self.fast.as_ref().map_or(0, |f| f.bx.word().load(Acquire));
            let w = if w == BOX_LATE { 0 } else { w };
            if w != 0 {
                let len = (w >> 16) as u8 as usize;
                if w & 0xff != BOX_FULL || len > BOX_PAYLOAD {
                    return Err(RingError::Corrupt {
                        header: w,
                        offset: usize::MAX,
                    });
                }
                if (w >> 32) as u32 == self.head as u32 {
                    return Ok(Some(Next::Fast(w)));
                }
            }
            if fresh {
                if h >> FLAGS_SHIFT == FLAG_SKIP {
                    self.skip(off);
                    continue;
                }
                return Ok(Some(Next::Ring(off, h)));
            }
            if w != 0 {
                // Stamped past an empty-looking ring: the records sent
                // before it are visible now that the box was read.
                if looked_again {
                    return Err(RingError::Corrupt {
                        header: w,
                        offset: usize::MAX,
                    });
                }
                looked_again = true;
                continue;
            }
            if self.head != self.published {
                self.publish();
            }
            if let Some(f) = &self.fast {
                f.arm_idle();
            }
            return Ok(None);
        }
    }

    /// Empties the fast box (its record was taken).
    #[inline(always)]
    fn release_fast(&self) {
        if let Some(f) = &self.fast {
            // Release: the payload was read before the writer may reuse it.
            f.bx.word().store(0, Release);
            f.arm();
        }
    }

    /// Releases the box record held out of the box.
    #[inline(always)]
    fn release_held(&mut self) {
        if let Some(f) = &mut self.fast {
            f.held = None;
        }
    }

    /// Bytes consumed so far (records and skips): the consumer's position.
    pub fn position(&self) -> u64 {
        self.head
    }

    /// The position the producer was last told about.
    pub fn published_position(&self) -> u64 {
        self.published
    }

    #[inline(always)]
    fn publish(&mut self) {
        self.mem.word(R_HEAD).store(self.head, Release);
        self.published = self.head;
    }

    /// The next record, read in place; dropping the [`Record`] releases it
    /// (use [`Record::keep`] to leave it for the next call). `Ok(None)` when
    /// the ring is empty.
    #[inline]
    pub fn peek(&mut self) -> Result<Option<Record<'_>>, RingError> {
        let (off, h) = match self.next()? {
            None => return Ok(None),
            Some(Next::Ring(off, h)) => (off, h),
            Some(Next::Fast(w)) => {
                self.hold_fast(w);
                return Ok(Some(self.held_record()));
            }
            Some(Next::Held) => return Ok(Some(self.held_record())),
        };
        let flags = (h >> FLAGS_SHIFT) & 0xf;
        let len = (h >> LEN_SHIFT) as usize;
        if flags & !FLAG_CONTROL != FLAG_RECORD
            || len > self.max_payload
            || off + record_bytes(len) > self.capacity as usize
        {
            return Err(RingError::Corrupt {
                header: h,
                offset: off,
            });
        }
        self.mem
            .prefetch(R_DATA + ((off + PREFETCH_AHEAD) & self.mask as usize));
        self.mem.fetch_bytes(R_DATA + off + HEADER_BYTES, len);
        Ok(Some(Record {
            consumer: self,
            off,
            len,
            tag: (h >> TAG_SHIFT) as u8,
            control: flags & FLAG_CONTROL != 0,
            fast: false,
            release: true,
        }))
    }

    /// Takes the fast box's record (word `w`, checked) out of the box into
    /// the held copy and empties the box at once: the reader's write right
    /// after its read, before the record is handled (see the module doc).
    #[inline(always)]
    fn hold_fast(&mut self, w: u64) {
        let Some(f) = &mut self.fast else {
            return;
        };
        let len = (w >> 16) as u8 as usize;
        f.bx.mem.fetch_bytes(HEADER_BYTES, BOX_PAYLOAD);
        {
            // SAFETY: bytes 8..32 of the box, the first `len` (<= 24,
            // checked) filled before the writer's Release store of the word
            // (Acquire-loaded), the rest the box's own; the writer does not
            // touch them until the word is cleared below. All 24 are copied:
            // a fixed size, no call.
            let p = unsafe { f.bx.mem.bytes(HEADER_BYTES, BOX_PAYLOAD) };
            f.copy.copy_from_slice(p);
        }
        f.held = Some(((w >> 8) as u8, len as u8));
        // Release: the payload was read before the writer may reuse it.
        // Emptied as late: see `late` below.
        f.bx.word().store(BOX_LATE, Release);
        // A record handed over this way (a progress pass) is answered late:
        // after its handler, a request's completion and the return from a
        // test or wait call, while the other side polls the line. An answer
        // through the box would then take the line back a third time, and
        // so would the other side's next record: both go by the ring (this
        // side's next small send by the late state, the other side's
        // records by the mark until this side takes one in place).
        f.late();
    }

    /// The held box record, as a [`Record`].
    #[inline(always)]
    fn held_record(&mut self) -> Record<'_> {
        let (tag, len) = self
            .fast
            .as_ref()
            .and_then(|f| f.held)
            .map_or((0, 0), |(t, l)| (t, l as usize));
        Record {
            consumer: self,
            off: 0,
            len,
            tag,
            control: false,
            fast: true,
            release: true,
        }
    }

    /// Takes the next record at once if it is a data record for handler
    /// `m.tag` (of any size) whose first 16 payload bytes match `m`, and
    /// whose payload past `m.hdr_len` fits `dst`: that much is copied to the
    /// start of `dst` and the record is released. The receive side of [`RingProducer::try_send_small`], with
    /// no [`Record`] and no callback. [`SmallRecv::Other`] leaves the next
    /// record in place for [`RingConsumer::peek`] (which also reports a
    /// corrupt header); [`SmallRecv::Empty`] publishes the head as `peek`
    /// does on an empty ring.
    #[inline(always)]
    pub fn take_small(&mut self, m: &SmallMatch, dst: &mut [u8]) -> SmallRecv {
        debug_assert!((9..=16).contains(&m.hdr_len));
        let (off, h) = match self.next() {
            Ok(Some(Next::Ring(off, h))) => (off, h),
            Ok(Some(Next::Fast(w))) => return self.take_small_fast(w, m, dst),
            Ok(Some(Next::Held)) => return self.take_small_held(m, dst),
            Ok(None) => return SmallRecv::Empty,
            Err(_) => return SmallRecv::Other,
        };
        let len = (h >> LEN_SHIFT) as usize;
        if (h >> FLAGS_SHIFT) & 0xf != FLAG_RECORD
            || (h >> TAG_SHIFT) as u8 != m.tag.0
            || !(m.hdr_len..=self.max_payload).contains(&len)
            || off + record_bytes(len) > self.capacity as usize
        {
            return SmallRecv::Other;
        }
        // The first 16 payload bytes lie in the record's first slot (24
        // payload bytes), past `len` too: read whole, compared under the
        // mask.
        self.mem
            .fetch_bytes(R_DATA + off + HEADER_BYTES, len.max(16));
        // SAFETY: `off + 8 .. off + 8 + max(len, 16)` lies in the record's
        // slots, inside the data area (checked above), which the producer
        // published with the Acquire-loaded header and does not write again
        // until the head passes them; bytes past `len` are the slot's own,
        // written or not, and only masked off.
        let p = unsafe { self.mem.bytes(R_DATA + off + HEADER_BYTES, len.max(16)) };
        let Some((w1, n)) = match_copy(p, len, m, dst) else {
            return SmallRecv::Other;
        };
        // As far ahead of the record's last slot as `peek` looks past a
        // one-slot record.
        self.mem.prefetch(
            R_DATA + ((off + record_bytes(len) - SLOT + PREFETCH_AHEAD) & self.mask as usize),
        );
        self.release(off, len);
        self.unmark();
        SmallRecv::Taken { hdr1: w1, len: n }
    }

    /// Clears the box's late mark: this side takes in place (the small
    /// receive), so the writer may use the box again.
    #[inline(always)]
    fn unmark(&self) {
        if let Some(f) = &self.fast {
            let w = f.bx.word();
            if w.load(Relaxed) == BOX_LATE {
                w.store(0, Release);
            }
        }
    }

    /// [`RingConsumer::take_small`] of the fast box's record (word `w`,
    /// checked).
    #[inline(always)]
    fn take_small_fast(&mut self, w: u64, m: &SmallMatch, dst: &mut [u8]) -> SmallRecv {
        let Some(f) = &mut self.fast else {
            return SmallRecv::Other;
        };
        let len = (w >> 16) as u8 as usize;
        if (w >> 8) as u8 != m.tag.0 || len < m.hdr_len {
            return SmallRecv::Other;
        }
        f.bx.mem.fetch_bytes(HEADER_BYTES, BOX_PAYLOAD);
        // SAFETY: bytes 8..32 of the box (`len` <= 24 was checked): the
        // writer filled the first `len` before its Release store of the
        // word, Acquire-loaded here, and writes nothing until the word is
        // cleared; bytes past `len` are the box's own, only masked off.
        let p = unsafe { f.bx.mem.bytes(HEADER_BYTES, BOX_PAYLOAD) };
        let Some((w1, n)) = match_copy(p, len, m, dst) else {
            return SmallRecv::Other;
        };
        self.release_fast();
        SmallRecv::Taken { hdr1: w1, len: n }
    }

    /// [`RingConsumer::take_small`] of the held box record.
    #[cold]
    fn take_small_held(&mut self, m: &SmallMatch, dst: &mut [u8]) -> SmallRecv {
        let Some(f) = &mut self.fast else {
            return SmallRecv::Other;
        };
        let Some((tag, len)) = f.held else {
            return SmallRecv::Other;
        };
        let len = len as usize;
        if tag != m.tag.0 || len < m.hdr_len {
            return SmallRecv::Other;
        }
        let Some((w1, n)) = match_copy(&f.copy, len, m, dst) else {
            return SmallRecv::Other;
        };
        f.held = None;
        f.arm();
        self.unmark();
        SmallRecv::Taken { hdr1: w1, len: n }
    }

    /// Passes the SKIP record at `off` (the rest of the lap).
    #[cold]
    fn skip(&mut self, off: usize) {
        // Clear the slots jumped over so that next lap no stale word there
        // can pass for a header.
        for slot in (off + SLOT..self.capacity as usize).step_by(SLOT) {
            self.mem.word(R_DATA + slot).store(0, Relaxed);
        }
        self.head += self.capacity - off as u64;
        self.maybe_publish();
    }

    #[inline(always)]
    fn maybe_publish(&mut self) {
        if self.head - self.published >= self.publish_every {
            self.publish();
        }
    }

    /// Hands the next record, if any, to `f(tag, payload)` and releases it.
    #[inline]
    pub fn poll<R>(&mut self, f: impl FnOnce(u8, &[u8]) -> R) -> Result<Option<R>, RingError> {
        Ok(self.peek()?.map(|r| f(r.tag(), r.payload())))
    }

    #[inline(always)]
    fn release(&mut self, off: usize, len: usize) {
        let size = record_bytes(len);
        // Continuation slots held payload: zero their first word (see the
        // module doc). Ordered before the head publication (Release). A
        // one-slot record (the small-message case) has none.
        if size > SLOT {
            for slot in (off + SLOT..off + size).step_by(SLOT) {
                self.mem.word(R_DATA + slot).store(0, Relaxed);
            }
        }
        self.head += size as u64;
        // One-slot records only (a stream of small messages): the second
        // of a line's two takes the head into the next line.
        if self.evict_ahead != 0 && size == SLOT && self.head % LINE as u64 == 0 {
            self.evict_ahead_of_head();
        }
        self.maybe_publish();
    }

    /// Evicts the line `evict_ahead` past the head (at a line's start)
    /// unless the producer wrote it this lap (its first word is this lap's
    /// header).
    #[inline(always)]
    fn evict_ahead_of_head(&self) {
        let at = self.head + self.evict_ahead;
        let off = R_DATA + (at & self.mask) as usize;
        if self.mem.word(off).load(Relaxed) as u32 != stamp_of(at, self.shift) {
            // SAFETY: `evict_ahead` is not 0, so `set_evict_ahead` found
            // `can_evict()` true.
            unsafe { self.mem.evict(off) };
        }
    }
}

impl Drop for RingConsumer {
    fn drop(&mut self) {
        self.publish();
        self.mem.word(R_CONSUMER_ATTACHED).store(0, Release);
    }
}

/// The small receive's match of a record's payload `p` (at least 16
/// bytes, `len` of them the record's, `len >= m.hdr_len`): when its first
/// 16 bytes match `m` and its data (past `m.hdr_len`) fits `dst`, copies
/// the data to the start of `dst` and returns the header's second word and
/// the data's length.
#[inline(always)]
fn match_copy(p: &[u8], len: usize, m: &SmallMatch, dst: &mut [u8]) -> Option<(u64, usize)> {
    let word = |i: usize| u64::from_le_bytes(p[i..i + 8].try_into().expect("8 bytes"));
    let (w0, w1) = (word(0), word(8));
    let n = len - m.hdr_len;
    if !m.matches(w0, w1) || n > dst.len() {
        return None;
    }
    crate::mem::copy_small(&mut dst[..n], &p[m.hdr_len..len]);
    Some((w1, n))
}

/// A record read in place. Dropping it releases its space to the producer.
pub struct Record<'a> {
    consumer: &'a mut RingConsumer,
    off: usize,
    len: usize,
    tag: u8,
    control: bool,
    /// The fast box's record, not the ring's.
    fast: bool,
    release: bool,
}

impl Record<'_> {
    /// The BTL tag the producer committed with.
    #[inline]
    pub fn tag(&self) -> u8 {
        self.tag
    }

    /// Whether the producer committed it as a CONTROL record.
    #[inline]
    pub fn is_control(&self) -> bool {
        self.control
    }

    /// The payload, in the ring (a box record's: its copy, the box being
    /// emptied already).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        if self.fast {
            if let Some(f) = &self.consumer.fast {
                return &f.copy[..self.len];
            }
        }
        // SAFETY: the header was validated (`off + 8 + len` inside the
        // data area) and Acquire-loaded after the producer's Release (and
        // fetched by `peek`); the producer does not write this space again
        // until the consumer publishes a head past it, which needs `&mut`
        // of the consumer, borrowed by this record.
        unsafe {
            self.consumer
                .mem
                .bytes(R_DATA + self.off + HEADER_BYTES, self.len)
        }
    }

    /// Leaves the record (a box record: its copy) first: the next `peek`
    /// returns it again.
    pub fn keep(mut self) {
        self.release = false;
    }
}

impl Drop for Record<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.release {
            if self.fast {
                self.consumer.release_held();
            } else {
                self.consumer.release(self.off, self.len);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn header_fields_round_trip() {
        let h = header(0xdead_beef, 0xa5, FLAG_RECORD, (1 << 20) - 1);
        assert_eq!(h as u32, 0xdead_beef);
        assert_eq!((h >> TAG_SHIFT) as u8, 0xa5);
        assert_eq!((h >> FLAGS_SHIFT) & 0xf, FLAG_RECORD);
        assert_eq!((h >> LEN_SHIFT) as usize, (1 << 20) - 1);
        assert!(Ring::max_payload(MAX_CAPACITY) < 1 << 20);
    }

    #[test]
    fn stamps_start_at_one_and_count_laps() {
        assert_eq!(stamp_of(0, 8), 1);
        assert_eq!(stamp_of(255, 8), 1);
        assert_eq!(stamp_of(256, 8), 2);
    }
}
