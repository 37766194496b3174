//! This rank's segment and its peers': creating and formatting our own,
//! attaching a peer's, and watching the peer's process. The sm BTL's only
//! `unsafe` code (formatting and attaching the inbox and rings in mapped
//! memory) is here.
//!
//! # Segment layout
//!
//! Every rank owns one [`Segment`] (a memfd, see [`super::segment`]) that
//! holds, in its data region:
//!
//! ```text
//!   0  control block (128 B): magic, version, local index, local count,
//!      inbox offset and length, table offset and slots (u64 each)
//! 128  its Inbox: its doorbell, and one ring per other local rank
//!      (local_count - 1 rings; the sender of local index s writes ring
//!      s - (s > me))
//!   T  the registration table (REGISTRATION_SLOTS slots of 4 u64:
//!      id, address, length, access), T = round_up(128 + inbox, 128)
//! ```
//!
//! plus the segment's header page, whose state word tells peers that the
//! owner dropped its module ([`Mapping::owner_closed`]).
//!
//! A ring handle keeps the mapping it lies in alive (its `keeping`), so
//! no handle made here can outlive its memory, whatever its owner does.
#![allow(unsafe_code)]

use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rustix::io::Errno;

use super::card::SmCard;
use super::config::SmConfig;
use super::regs::{REGISTRATION_SLOTS, SLOT_WORDS};
use super::ring::{Inbox, InboxReceiver, RingProducer};
use super::segment::{Mapping, Segment, SegmentKind};
use crate::btl::BtlError;

const CONTROL_BYTES: usize = 128;
const CTL_MAGIC: u64 = u64::from_le_bytes(*b"oxmpiSMB");
/// Bumped with any change to the segment's or the rings' layout (2: ring
/// records on 32-byte slots; 3: the inbox's doorbell), so that builds that
/// disagree fail to attach instead of misreading each other.
const CTL_VERSION: u64 = 3;
const CTL_WORDS: usize = 8;

/// Where things are in a segment's data region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    inbox_off: usize,
    inbox_len: usize,
    /// Offset of the registration table.
    pub(super) table_off: usize,
    /// Slots of the registration table.
    pub(super) table_slots: usize,
    /// Bytes of the data region.
    pub(super) total: usize,
}

impl Layout {
    /// The layout for `local_count` local ranks and rings of
    /// `ring_capacity` bytes.
    pub(super) fn new(local_count: u32, ring_capacity: usize) -> Result<Layout, BtlError> {
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
pub(super) fn ring_index(sender: u32, receiver: u32) -> usize {
    (sender - u32::from(sender > receiver)) as usize
}

fn at(base: NonNull<u8>, offset: usize) -> NonNull<u8> {
    NonNull::new(base.as_ptr().wrapping_add(offset)).expect("offset inside a mapping")
}

/// Whether process `pid` is gone (`kill(pid, 0)` says `ESRCH`).
pub(super) fn process_gone(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return true;
    };
    rustix::process::test_kill_process(pid) == Err(Errno::SRCH)
}

/// Whether a pidfd says its process has exited (zero-timeout poll).
pub(super) fn pidfd_exited(fd: &OwnedFd) -> bool {
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

/// Opens a pidfd on process `pid` (`None` where pidfds are missing).
pub(super) fn open_pidfd(pid: u32) -> Option<OwnedFd> {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
}

/// Creates this rank's segment for `cfg` (already checked): formats its
/// inbox, attaches the inbox's receiver and writes the control block.
pub(super) fn create(
    cfg: &SmConfig,
    layout: &Layout,
) -> Result<(Arc<Segment>, InboxReceiver), BtlError> {
    let segment = Segment::create(layout.total, SegmentKind::Auto)
        .map_err(|e| BtlError::Io(e.to_string()))?;
    let segment = Arc::new(segment);
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
    // SAFETY: the inbox was formatted above; the receiver keeps the
    // segment alive (`keeping`, before anything is made from it), and this
    // is its only receiver.
    let mut rx = unsafe { InboxReceiver::attach(at(base, layout.inbox_off), layout.inbox_len) }
        .map_err(|e| BtlError::Invalid(format!("sm: {e}")))?
        .keeping(segment.clone());
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
    Ok((segment, rx))
}

/// Why a peer's segment could not be attached.
pub(super) enum Unattached {
    /// The peer is gone (its process exited, or it closed its segment).
    Gone(String),
    /// Anything else.
    Failed(BtlError),
}

impl From<BtlError> for Unattached {
    fn from(e: BtlError) -> Unattached {
        Unattached::Failed(e)
    }
}

/// Maps the segment of the peer of `card` (rank `rank`), checks it against
/// the card, and attaches the producer side of our ring in its inbox (we
/// are local index `me`). The producer keeps the mapping alive.
pub(super) fn attach_peer(
    card: &SmCard,
    me: u32,
    rank: u32,
) -> Result<(Arc<Mapping>, RingProducer, Layout), Unattached> {
    let pid = card.seg.pid;
    let mapping = match Segment::attach(&card.seg) {
        Ok(m) => m,
        Err(e) => {
            if process_gone(pid) {
                return Err(Unattached::Gone(format!("process {pid} exited")));
            }
            return Err(BtlError::Io(format!("sm: attaching rank {rank}: {e}")).into());
        }
    };
    if mapping.owner_closed() {
        return Err(Unattached::Gone("closed its segment".into()));
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
            "sm: the segment of rank {rank} does not match its card"
        ))
        .into());
    }
    let ring = ring_index(me, card.local_index);
    let mapping = Arc::new(mapping);
    // SAFETY: the inbox range was checked against the mapping's length
    // and the owner's control block; it is 128-byte aligned (page-aligned
    // data region + 128); the producer keeps the mapping alive (`keeping`,
    // before anything is made from it); only the ring and inbox protocols
    // touch that memory.
    let tx = unsafe {
        Inbox::attach_sender(
            at(mapping.as_ptr(), layout.inbox_off),
            layout.inbox_len,
            ring,
        )
    }
    .map_err(|e| BtlError::Invalid(format!("sm: rank {rank}: {e}")))?
    .keeping(mapping.clone());
    Ok((mapping, tx, layout))
}
