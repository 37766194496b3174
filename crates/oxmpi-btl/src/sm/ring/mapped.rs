//! Rings and inboxes in memory the caller maps (shared memory between
//! processes): the `unsafe` entry points, each a [`Mem::from_raw`] view
//! handed to the code that [`Ring::new_heap`] and [`Inbox::new_heap`] run
//! too. Not built under loom, which cannot model memory it did not
//! allocate.

use super::inbox::{Inbox, InboxReceiver};
use super::mem::Mem;
use super::{Bell, Ring, RingConsumer, RingError, RingProducer};
use std::ptr::NonNull;

impl Ring {
    /// Formats a ring in caller memory.
    ///
    /// # Safety
    /// `base..base+len` is valid for reads and writes, 64-byte aligned (128
    /// preferred), and no handle is attached to a ring there.
    pub unsafe fn init(base: NonNull<u8>, len: usize, capacity: usize) -> Result<(), RingError> {
        // SAFETY: forwarded contract; the view lives only in this call.
        let mem = unsafe { Mem::from_raw(base, len)? };
        Self::format(&mem, capacity)
    }
}

impl RingProducer {
    /// Attaches the producer side of a formatted ring.
    ///
    /// # Safety
    /// `base..base+len` holds a ring formatted by [`Ring::init`] (possibly in
    /// another process), is valid for reads and writes and shared with the
    /// consumer's mapping, is 64-byte aligned, and stays mapped while the
    /// handle lives, and while anything it hands out lives (a
    /// [`PairLine`](super::PairLine) and the [`FastBox`](super::FastBox)es,
    /// [`FastTx`](super::FastTx) and [`FastRx`](super::FastRx) made from it,
    /// unless given an owner with [`FastBox::keeping`](super::FastBox::keeping)).
    /// Only the ring protocol touches it meanwhile.
    pub unsafe fn attach(base: NonNull<u8>, len: usize) -> Result<RingProducer, RingError> {
        // SAFETY: forwarded contract.
        let mem = unsafe { Mem::from_raw(base, len)? };
        // A ring outside any inbox: nobody arms its bell.
        Self::from_mem(mem, Bell::new_heap())
    }
}

impl RingConsumer {
    /// Attaches the consumer side of a formatted ring.
    ///
    /// # Safety
    /// As [`RingProducer::attach`].
    pub unsafe fn attach(base: NonNull<u8>, len: usize) -> Result<RingConsumer, RingError> {
        // SAFETY: forwarded contract.
        let mem = unsafe { Mem::from_raw(base, len)? };
        Self::from_mem(mem)
    }
}

impl Inbox {
    /// Formats an inbox in caller memory.
    ///
    /// # Safety
    /// `base..base+len` is valid for reads and writes, 64-byte aligned (128
    /// preferred), and no handle is attached to the inbox or its rings.
    pub unsafe fn init(
        base: NonNull<u8>,
        len: usize,
        n_senders: usize,
        ring_capacity: usize,
    ) -> Result<(), RingError> {
        // SAFETY: forwarded contract.
        let mem = unsafe { Mem::from_raw(base, len)? };
        Self::format(&mem, n_senders, ring_capacity)
    }

    /// Attaches sender `sender` (its producer handle on its ring in this
    /// inbox) and, the first time ever, adds it to the active list.
    ///
    /// # Safety
    /// `base..base+len` holds an inbox formatted by [`Inbox::init`], shared
    /// with the receiver's mapping, 64-byte aligned, mapped while the handle
    /// lives (and what it hands out: see [`RingProducer::attach`]), touched
    /// meanwhile only through the inbox and ring protocols.
    pub unsafe fn attach_sender(
        base: NonNull<u8>,
        len: usize,
        sender: usize,
    ) -> Result<RingProducer, RingError> {
        // SAFETY: forwarded contract.
        let mem = unsafe { Mem::from_raw(base, len)? };
        Self::sender_from_mem(&mem, sender)
    }
}

impl InboxReceiver {
    /// Attaches the receiver side of a formatted inbox.
    ///
    /// # Safety
    /// As [`Inbox::attach_sender`]; at most one receiver per inbox.
    pub unsafe fn attach(base: NonNull<u8>, len: usize) -> Result<InboxReceiver, RingError> {
        // SAFETY: forwarded contract.
        let mem = unsafe { Mem::from_raw(base, len)? };
        Self::from_mem(mem)
    }
}
