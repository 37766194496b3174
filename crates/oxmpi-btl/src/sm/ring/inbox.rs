//! The inbox: one receiver's set of rings, one per possible local sender,
//! and the list of senders that have ever attached, so that the receiver
//! polls only rings that can hold something.
//!
//! # Layout (offsets in bytes from the inbox's start)
//!
//! ```text
//!   0  magic u64 @0, sender count u64 @8, ring capacity u64 @16 (read-only)
//!  64  active count u64 (its own line; senders bump it once each)
//! 128  the doorbell: a u32 futex word on a line of its own (the line after
//!      it, 192, stays empty: adjacent-line prefetch couples nothing to it)
//! 256  active slots: one u64 per sender, `sender + 1` once written, 0 before;
//!      rounded up to 128 bytes
//!  R = 256 + round_up(8 n, 128): ring i at R + i * Ring::required_bytes(cap)
//! ```
//!
//! The doorbell ([`super::bell`]): the receiver arms it before it sleeps,
//! and every sender's producer looks at it after each record it publishes.
//!
//! Registration: the first [`Inbox::attach_sender`] of sender `i` swaps the
//! ring's "registered" word from 0 to 1; the winner takes a slot with a
//! `fetch_add` on the active count and writes `i + 1` into it (`Release`).
//! The receiver reads the count and then the slots in order; a slot still 0
//! (reserved, not yet written) stops the scan until a later call. The count
//! never exceeds the sender count: each ring registers at most once.
//!
//! Fairness: [`InboxReceiver::poll_all`] visits the active rings round-robin,
//! starting one ring further each call, and takes at most `budget` records
//! from each ring per call, so one busy sender cannot starve the others and
//! a call's work is bounded by `budget * active senders`.

use super::bell::Bell;
use super::mem::Mem;
use super::sync::Ordering::{AcqRel, Acquire, Relaxed, Release};
use super::{
    FastArm, FastBox, FastRx, PairLine, Ring, RingConsumer, RingError, RingProducer, R_REGISTERED,
};
use crate::btl::{SmallMatch, SmallRecv};
use std::sync::Arc;

const I_MAGIC: usize = 0;
const I_SENDERS: usize = 8;
const I_CAPACITY: usize = 16;
const I_COUNT: usize = 64;
const I_BELL: usize = 128;
const I_SLOTS: usize = 256;
/// Changes with the layout ("IB2": the doorbell).
const INBOX_MAGIC: u64 = u64::from_le_bytes(*b"oxmpiIB2");

/// The default number of records taken from one ring per `poll_all`.
pub const DEFAULT_POLL_BUDGET: usize = 16;

/// The most records [`InboxReceiver::poll_sender`] takes per call (a
/// window of a message-rate test: the receives posted before their
/// messages came, then the one about to be posted).
pub const FROM_BUDGET: usize = 65;

/// `slot_of` marker: the sender is not polled.
const NOT_ACTIVE: u32 = u32::MAX;

/// Sizes, formatting and attachment of inboxes.
pub struct Inbox;

#[derive(Clone, Copy)]
struct Geometry {
    n_senders: usize,
    capacity: usize,
    rings: usize,
}

impl Geometry {
    fn new(n_senders: usize, capacity: usize) -> Result<Geometry, RingError> {
        Ring::check_capacity(capacity)?;
        let slots = (8 * n_senders).div_ceil(128) * 128;
        Ok(Geometry {
            n_senders,
            capacity,
            rings: I_SLOTS + slots,
        })
    }

    fn ring_bytes(&self) -> usize {
        Ring::required_bytes(self.capacity)
    }

    fn total(&self) -> usize {
        self.rings + self.n_senders * self.ring_bytes()
    }

    fn ring(&self, mem: &Mem, i: usize) -> Mem {
        mem.sub(self.rings + i * self.ring_bytes(), self.ring_bytes())
    }

    fn read(mem: &Mem) -> Result<Geometry, RingError> {
        if mem.len() < I_SLOTS || mem.word(I_MAGIC).load(Acquire) != INBOX_MAGIC {
            return Err(RingError::NotInitialized);
        }
        let n = usize::try_from(mem.word(I_SENDERS).load(Relaxed))
            .map_err(|_| RingError::NotInitialized)?;
        let cap = usize::try_from(mem.word(I_CAPACITY).load(Relaxed))
            .map_err(|_| RingError::NotInitialized)?;
        if n > u32::MAX as usize {
            return Err(RingError::NotInitialized);
        }
        let g = Geometry::new(n, cap)?;
        if mem.len() < g.total() {
            return Err(RingError::TooSmall {
                need: g.total(),
                have: mem.len(),
            });
        }
        Ok(g)
    }
}

impl Inbox {
    /// Bytes an inbox for `n_senders` rings of `ring_capacity` needs.
    pub fn required_bytes(n_senders: usize, ring_capacity: usize) -> Result<usize, RingError> {
        Ok(Geometry::new(n_senders, ring_capacity)?.total())
    }

    pub(super) fn format(
        mem: &Mem,
        n_senders: usize,
        ring_capacity: usize,
    ) -> Result<(), RingError> {
        let g = Geometry::new(n_senders, ring_capacity)?;
        if mem.len() < g.total() {
            return Err(RingError::TooSmall {
                need: g.total(),
                have: mem.len(),
            });
        }
        mem.word(I_MAGIC).store(0, Relaxed);
        mem.word(I_SENDERS).store(n_senders as u64, Relaxed);
        mem.word(I_CAPACITY).store(ring_capacity as u64, Relaxed);
        mem.word(I_COUNT).store(0, Relaxed);
        Bell::at(mem, I_BELL).clear();
        for i in 0..n_senders {
            mem.word(I_SLOTS + 8 * i).store(0, Relaxed);
            Ring::format(&g.ring(mem, i), ring_capacity)?;
        }
        mem.word(I_MAGIC).store(INBOX_MAGIC, Release);
        Ok(())
    }

    /// Sender `sender`'s producer handle on its ring in the inbox in
    /// `mem`; the first time ever, also adds it to the active list.
    pub(super) fn sender_from_mem(mem: &Mem, sender: usize) -> Result<RingProducer, RingError> {
        let g = Geometry::read(mem)?;
        if sender >= g.n_senders {
            return Err(RingError::NoSuchSender {
                sender,
                n_senders: g.n_senders,
            });
        }
        let ring = g.ring(mem, sender);
        let registered = ring.word(R_REGISTERED);
        let producer = RingProducer::from_mem(g.ring(mem, sender), Bell::at(mem, I_BELL))?;
        if registered.swap(1, AcqRel) == 0 {
            let slot = mem.word(I_COUNT).fetch_add(1, AcqRel) as usize;
            debug_assert!(slot < g.n_senders);
            mem.word(I_SLOTS + 8 * slot)
                .store(sender as u64 + 1, Release);
        }
        Ok(producer)
    }

    /// An inbox on the heap, formatted (one-process use; same code).
    pub fn new_heap(n_senders: usize, ring_capacity: usize) -> Result<HeapInbox, RingError> {
        let g = Geometry::new(n_senders, ring_capacity)?;
        let mem = Mem::new_heap(g.total());
        Self::format(&mem, n_senders, ring_capacity)?;
        Ok(HeapInbox { mem })
    }
}

/// An inbox on the heap: hands out sender handles and the receiver handle.
pub struct HeapInbox {
    mem: Mem,
}

// SAFETY: through `&HeapInbox` the region is touched only by atomic
// operations (registration) and by handles that each claim their side of a
// ring with a compare-exchange, so sharing it between threads is sound.
unsafe impl Sync for HeapInbox {}

impl HeapInbox {
    /// The producer handle of sender `sender` (registers it on first use).
    pub fn attach_sender(&self, sender: usize) -> Result<RingProducer, RingError> {
        Inbox::sender_from_mem(&self.mem, sender)
    }

    /// The receiver handle.
    pub fn receiver(&self) -> Result<InboxReceiver, RingError> {
        InboxReceiver::from_mem(self.mem.sub(0, self.mem.len()))
    }
}

/// The receiver side of an inbox: polls the rings of active senders.
pub struct InboxReceiver {
    mem: Mem,
    geometry: Geometry,
    /// Active-list entries already adopted.
    known: usize,
    /// (sender, its ring), in active-list order; capacity reserved up front.
    active: Vec<(usize, RingConsumer)>,
    /// Each sender's index in `active` (`NOT_ACTIVE` before it registers
    /// and once its ring failed).
    slot_of: Vec<u32>,
    next: usize,
    budget: usize,
    /// Rings from this index on read their own pair line's forward box.
    own_boxes_from: usize,
    /// Boxes elsewhere to read along with a sender's ring, until adopted.
    remote_box: Vec<Option<FastBox>>,
    /// Per sender: whether this side's fast box towards it is tried.
    armed: Vec<FastArm>,
    /// [`RingConsumer::set_evict_ahead`] of every ring, in lines.
    evict_ahead: usize,
}

impl InboxReceiver {
    pub(super) fn from_mem(mem: Mem) -> Result<InboxReceiver, RingError> {
        let geometry = Geometry::read(&mem)?;
        Ok(InboxReceiver {
            active: Vec::with_capacity(geometry.n_senders),
            slot_of: vec![NOT_ACTIVE; geometry.n_senders],
            mem,
            geometry,
            known: 0,
            next: 0,
            budget: super::inbox::DEFAULT_POLL_BUDGET,
            own_boxes_from: usize::MAX,
            remote_box: (0..geometry.n_senders).map(|_| None).collect(),
            armed: (0..geometry.n_senders).map(|_| FastArm::new()).collect(),
            evict_ahead: 0,
        })
    }

    /// The same handle, also keeping `owner` (the mapping the inbox lies
    /// in) alive while it or any ring or box it reads lives. Call it before
    /// reading: rings adopted earlier keep only what they kept then.
    pub fn keeping(mut self, owner: Arc<dyn Send + Sync>) -> InboxReceiver {
        self.mem.keep(owner);
        self
    }

    /// The senders from ring index `first` on own the pair lines of their
    /// pairs: their rings read their own pair line's forward box from now
    /// on (see the ring module doc). Call it before any such sender can
    /// write its box (before the inbox is published).
    pub fn set_own_boxes_from(&mut self, first: usize) {
        self.own_boxes_from = first;
        for sender in first..self.geometry.n_senders {
            if let Ok(line) = self.pair_line(sender) {
                line.set_forward_ready();
            }
        }
        for (sender, ring) in &mut self.active {
            if *sender >= first {
                let bx = ring.pair_line().forward();
                ring.set_fast(Some(FastRx::new(bx, Some(self.armed[*sender].clone()))));
            }
        }
    }

    /// `sender`'s ring reads `bx` (the reverse box of a pair line in the
    /// sender's inbox) from now on, in order with the ring. Call it before
    /// that box's writer is told to use it ([`PairLine::set_reverse_ready`]).
    pub fn set_remote_box(&mut self, sender: usize, bx: FastBox) -> Result<(), RingError> {
        let n_senders = self.geometry.n_senders;
        if sender >= n_senders {
            return Err(RingError::NoSuchSender { sender, n_senders });
        }
        match self.slot_of[sender] {
            NOT_ACTIVE => self.remote_box[sender] = Some(bx),
            i => {
                let armed = self.armed[sender].clone();
                self.active[i as usize]
                    .1
                    .set_fast(Some(FastRx::new(bx, Some(armed))));
            }
        }
        Ok(())
    }

    /// [`RingConsumer::set_evict_ahead`] for every ring of the inbox, those
    /// adopted later too.
    pub fn set_evict_ahead(&mut self, lines: usize) {
        self.evict_ahead = lines;
        for (_, ring) in &mut self.active {
            ring.set_evict_ahead(lines);
        }
    }

    /// The pair line of `sender`'s ring in this inbox.
    pub fn pair_line(&self, sender: usize) -> Result<PairLine, RingError> {
        let n_senders = self.geometry.n_senders;
        if sender >= n_senders {
            return Err(RingError::NoSuchSender { sender, n_senders });
        }
        Ok(PairLine {
            mem: self.geometry.ring(&self.mem, sender).sub(0, super::BLOCK),
        })
    }

    /// Whether this side's fast box towards `sender` is tried: set by the
    /// reading of `sender`'s ring and box, for the [`super::FastTx`] of the
    /// other direction.
    pub fn armed(&self, sender: usize) -> Option<FastArm> {
        self.armed.get(sender).cloned()
    }

    /// The inbox's doorbell (see [`super::bell`]): what the receiver arms
    /// and sleeps on. It keeps the inbox's memory alive as the receiver
    /// does.
    pub fn bell(&self) -> Bell {
        Bell::at(&self.mem, I_BELL)
    }

    /// Sets how many records `poll_all` takes from one ring per call (>= 1).
    pub fn set_budget(&mut self, budget: usize) {
        self.budget = budget.max(1);
    }

    /// Senders polled so far, in the order they registered.
    pub fn active_senders(&self) -> impl Iterator<Item = usize> + '_ {
        self.active.iter().map(|(s, _)| *s)
    }

    /// Adopts newly registered senders. Allocation-free: `active` has room
    /// for every sender.
    #[inline]
    fn refresh(&mut self) -> Result<(), RingError> {
        let count = self.mem.word(I_COUNT).load(Acquire) as usize;
        let count = count.min(self.geometry.n_senders);
        while self.known < count {
            let s = self.mem.word(I_SLOTS + 8 * self.known).load(Acquire);
            if s == 0 {
                break; // reserved, not yet written: next call
            }
            let sender = (s - 1) as usize;
            if sender >= self.geometry.n_senders {
                return Err(RingError::Corrupt {
                    header: s,
                    offset: I_SLOTS + 8 * self.known,
                });
            }
            let ring = self.geometry.ring(&self.mem, sender);
            let mut consumer = RingConsumer::from_mem(ring)?;
            consumer.set_evict_ahead(self.evict_ahead);
            let bx = match self.remote_box[sender].take() {
                Some(bx) => Some(bx),
                None if sender >= self.own_boxes_from => Some(consumer.pair_line().forward()),
                None => None,
            };
            if let Some(bx) = bx {
                let armed = self.armed[sender].clone();
                consumer.set_fast(Some(FastRx::new(bx, Some(armed))));
            }
            self.slot_of[sender] = self.active.len() as u32;
            self.active.push((sender, consumer));
            self.known += 1;
        }
        Ok(())
    }

    /// Polls the active senders' rings round-robin, at most `budget` records
    /// from each, handing each record to `f(sender, tag, payload)`. Returns
    /// how many records were handled. (CONTROL records are handed over like
    /// the others; [`InboxReceiver::poll_all_flagged`] tells them apart.)
    #[inline]
    pub fn poll_all(&mut self, mut f: impl FnMut(usize, u8, &[u8])) -> Result<usize, RingError> {
        self.poll_all_flagged(|sender, tag, _, payload| f(sender, tag, payload))
            .map_err(|e| e.error)
    }

    /// As [`InboxReceiver::poll_all`], with `f(sender, tag, control,
    /// payload)`: `control` is whether the record was committed as a CONTROL
    /// record. A ring whose producer wrote something this side cannot accept
    /// is taken out of the polled set and reported with its sender; the
    /// other rings keep working.
    #[inline]
    pub fn poll_all_flagged(
        &mut self,
        mut f: impl FnMut(usize, u8, bool, &[u8]),
    ) -> Result<usize, PollError> {
        if self.known < self.geometry.n_senders {
            self.refresh().map_err(|error| PollError {
                sender: None,
                error,
            })?;
        }
        let n = self.active.len();
        if n == 0 {
            return Ok(0);
        }
        let mut handled = 0;
        let start = self.next;
        self.next = if start + 1 >= n { 0 } else { start + 1 };
        for k in 0..n {
            let i = if start + k >= n {
                start + k - n
            } else {
                start + k
            };
            let (sender, ring) = &mut self.active[i];
            let sender = *sender;
            let mut failed = None;
            for _ in 0..self.budget {
                match ring.peek() {
                    Ok(Some(r)) => {
                        f(sender, r.tag(), r.is_control(), r.payload());
                        handled += 1;
                    }
                    Ok(None) => break,
                    Err(error) => {
                        failed = Some(error);
                        break;
                    }
                }
            }
            if let Some(error) = failed {
                return Err(self.drop_ring(i, error));
            }
        }
        Ok(handled)
    }

    /// Takes records from sender `sender`'s ring only, in order, handing
    /// each to `f(tag, control, payload)`, which says whether to go on; at
    /// most [`FROM_BUDGET`] records. Returns how many were handled (0 when
    /// the sender has not registered, or its ring failed before).
    #[inline]
    pub fn poll_sender(
        &mut self,
        sender: usize,
        mut f: impl FnMut(u8, bool, &[u8]) -> bool,
    ) -> Result<usize, PollError> {
        if self.known < self.geometry.n_senders {
            self.refresh().map_err(|error| PollError {
                sender: None,
                error,
            })?;
        }
        let Some(&i) = self.slot_of.get(sender) else {
            return Ok(0);
        };
        let Some((_, ring)) = self.active.get_mut(i as usize) else {
            return Ok(0);
        };
        let mut handled = 0;
        let mut failed = None;
        while handled < FROM_BUDGET {
            match ring.peek() {
                Ok(Some(r)) => {
                    handled += 1;
                    if !f(r.tag(), r.is_control(), r.payload()) {
                        break;
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        match failed {
            None => Ok(handled),
            Some(error) => Err(self.drop_ring(i as usize, error)),
        }
    }

    /// [`RingConsumer::take_small`] on `sender`'s ring, adopting it first
    /// if it registered since (as [`Self::poll_sender`] does):
    /// [`SmallRecv::Other`] when it has not, or failed (`poll_sender`
    /// reports that).
    #[inline(always)]
    pub fn take_small(&mut self, sender: usize, m: &SmallMatch, dst: &mut [u8]) -> SmallRecv {
        let Some(&i) = self.slot_of.get(sender) else {
            return SmallRecv::Other;
        };
        let i = if i == NOT_ACTIVE {
            self.adopt(sender)
        } else {
            i
        };
        match self.active.get_mut(i as usize) {
            Some((_, ring)) => ring.take_small(m, dst),
            None => SmallRecv::Other,
        }
    }

    /// `sender`'s index in the active list after a refresh (`NOT_ACTIVE`
    /// when it has not registered, or the refresh failed).
    #[cold]
    fn adopt(&mut self, sender: usize) -> u32 {
        if self.known < self.geometry.n_senders && self.refresh().is_err() {
            return NOT_ACTIVE;
        }
        self.slot_of[sender]
    }

    /// Stops polling the ring at `active[i]`, which failed with `error`.
    #[cold]
    fn drop_ring(&mut self, i: usize, error: RingError) -> PollError {
        let (sender, _) = self.active.remove(i);
        self.next = 0;
        self.slot_of.fill(NOT_ACTIVE);
        for (k, (s, _)) in self.active.iter().enumerate() {
            self.slot_of[*s] = k as u32;
        }
        PollError {
            sender: Some(sender),
            error,
        }
    }
}

/// A ring (or the active list) of an inbox holds something the receiver
/// cannot accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inbox of sender {sender:?}: {error}")]
pub struct PollError {
    /// The sender whose ring failed (`None`: the active list itself). That
    /// ring is no longer polled.
    pub sender: Option<usize>,
    /// What was wrong.
    pub error: RingError,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::mem::REGION_ALIGN;
    use super::*;

    #[test]
    fn geometry_is_line_aligned() {
        let g = Geometry::new(3, 1024).unwrap();
        assert_eq!(g.rings % 128, 0);
        assert_eq!(g.total(), 384 + 3 * (1024 + 256));
        assert_eq!(REGION_ALIGN, 128);
    }
}
