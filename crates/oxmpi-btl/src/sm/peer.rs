//! The sm BTL's peers: binding one on first use, and finding out that one
//! is gone.
//!
//! [`Btl::add_peer`](crate::btl::Btl::add_peer) only parses the peer's
//! card; the first operation towards the peer binds it
//! (`SmBtl::bind`): maps its segment, attaches the producer side of our
//! ring in its inbox, wires the pair line's fast boxes, probes CMA against
//! the peer's probe word and opens a pidfd to watch the peer's process.
//!
//! A peer is lost when its segment says it was closed or its process is
//! gone (pidfd readable, or `kill(pid, 0)` = `ESRCH` where pidfds are
//! missing). This is checked only when something is stalled: when a send to
//! the peer is refused for lack of room (the state word at every refusal,
//! the process every 256th), and on one peer in turn every
//! [`SWEEP_EVERY`] progress calls that found nothing to do. A lost peer is
//! reported once through [`BtlSink::on_peer_lost`](crate::btl::BtlSink::on_peer_lost),
//! its emulated operations complete with [`BtlError::PeerGone`], and every
//! later operation towards it is `PeerGone`. What it sent before is still
//! delivered.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::attach::{self, Unattached};
use super::btl::SmBtl;
use super::card::SmCard;
use super::copy::PeerEmu;
use super::ring::{FastTx, RingProducer};
use super::segment::Mapping;
use crate::btl::{BtlError, Endpoint};
use crate::cma::CmaPeer;

/// Progress calls that found nothing to do between two liveness checks (of
/// one peer each).
pub const SWEEP_EVERY: u32 = 4096;
/// Checks of the process of a peer whose ring stays full, in refusals.
const REFUSALS_PER_PROCESS_CHECK: u32 = 256;

/// Where a peer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PeerState {
    Unbound,
    Bound,
    Lost,
    Deleted,
}

/// What binding a peer set up.
#[derive(Debug)]
pub(super) struct Link {
    /// Shared with the fast box of the peer's pair line that our receiver
    /// reads, if any (it may outlive the link), and with our producer.
    pub(super) mapping: Arc<Mapping>,
    pidfd: Option<OwnedFd>,
    /// Put and get go by CMA.
    pub(super) cma: bool,
    /// Where the peer's registration table is.
    pub(super) table_off: usize,
    /// Its slots.
    pub(super) table_slots: usize,
}

/// A peer added with `add_peer`.
pub(super) struct Peer {
    /// Our ring in the peer's inbox.
    pub(super) tx: Option<RingProducer>,
    /// What binding it set up.
    pub(super) link: Option<Box<Link>>,
    pub(super) state: PeerState,
    /// Its rank in the job.
    pub(super) rank: u32,
    /// Its card.
    pub(super) card: SmCard,
    /// Sends refused for lack of room (every so many, its process is
    /// checked).
    pub(super) refusals: u32,
    /// Copy-in/copy-out work towards it.
    pub(super) emu: PeerEmu,
}

impl Peer {
    /// A peer not bound yet.
    pub(super) fn new(rank: u32, card: SmCard) -> Peer {
        Peer {
            tx: None,
            link: None,
            state: PeerState::Unbound,
            rank,
            card,
            refusals: 0,
            emu: PeerEmu::default(),
        }
    }
}

impl SmBtl {
    pub(super) fn peer_index(&self, ep: Endpoint) -> Result<usize, BtlError> {
        let i = ep.0 as usize;
        match self.peers.get(i).map(|p| p.state) {
            Some(PeerState::Unbound | PeerState::Bound) => Ok(i),
            Some(PeerState::Lost) => Err(self.gone(ep)),
            _ => Err(BtlError::Invalid(format!("unknown endpoint {ep:?}"))),
        }
    }

    pub(super) fn gone(&self, ep: Endpoint) -> BtlError {
        let rank = self.peers.get(ep.0 as usize).map_or(u32::MAX, |p| p.rank);
        BtlError::PeerGone(ep, format!("sm peer rank {rank} is gone"))
    }

    /// Binds an unbound peer (maps its segment, attaches our ring, probes
    /// CMA, opens a pidfd).
    #[cold]
    pub(super) fn bind(&mut self, i: usize) -> Result<(), BtlError> {
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
        let (mapping, mut tx, layout) =
            match attach::attach_peer(&card, self.local_index, self.peers[i].rank) {
                Ok(attached) => attached,
                Err(Unattached::Gone(why)) => {
                    self.mark_lost(i, why);
                    return Err(self.gone(ep));
                }
                Err(Unattached::Failed(e)) => return Err(e),
            };
        if self.pair_boxes {
            self.wire_pair(&mut tx, &mapping, card.local_index);
        }
        let cma = self.cma_ok
            && card.cma
            && CmaPeer::probe(pid, card.probe_addr as usize, card.probe_value).is_available();
        let pidfd = attach::open_pidfd(pid);
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
    pub(super) fn wire_pair(&mut self, tx: &mut RingProducer, mapping: &Arc<Mapping>, peer: u32) {
        let from = attach::ring_index(peer, self.local_index);
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

    /// A send to `ep` was refused for lack of room: is the peer still there?
    #[cold]
    pub(super) fn refused(&mut self, ep: Endpoint) -> BtlError {
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
    pub(super) fn check_alive(&mut self, i: usize, process: bool) -> bool {
        let peer = &self.peers[i];
        let why = match (peer.state, &peer.link) {
            (PeerState::Bound, Some(link)) => {
                if link.mapping.owner_closed() {
                    Some("closed its segment".to_string())
                } else if !process {
                    None
                } else if let Some(fd) = &link.pidfd {
                    attach::pidfd_exited(fd)
                        .then(|| format!("process {} exited", peer.card.seg.pid))
                } else {
                    attach::process_gone(peer.card.seg.pid)
                        .then(|| format!("process {} exited", peer.card.seg.pid))
                }
            }
            (PeerState::Unbound, _) if process => attach::process_gone(peer.card.seg.pid)
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
    pub(super) fn sweep(&mut self) {
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
    pub(super) fn unbind(&mut self, i: usize, state: PeerState, err: &BtlError) {
        let peer = &mut self.peers[i];
        if peer.state == PeerState::Bound {
            self.bound -= 1;
        }
        peer.state = state;
        peer.tx = None;
        peer.link = None;
        peer.emu.clear();
        let completions = &mut self.completions;
        self.ops.drain_peer(i as u32, |op| {
            completions.push_back((op.token, Err(err.clone())));
        });
    }

    pub(super) fn mark_lost(&mut self, i: usize, why: String) {
        if matches!(self.peers[i].state, PeerState::Lost | PeerState::Deleted) {
            return;
        }
        let ep = Endpoint(i as u32);
        let err = BtlError::PeerGone(ep, format!("sm peer rank {} {why}", self.peers[i].rank));
        tracing::debug!(%err, "sm: peer lost");
        self.unbind(i, PeerState::Lost, &err);
        self.lost_reports.push((ep, err));
    }
}
