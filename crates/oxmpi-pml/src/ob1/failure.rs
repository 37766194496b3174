//! Failures: a request that fails, a BTL error, a peer that is gone (every
//! request that needs it fails with `MPI_ERR_PROC_FAILED`).

use super::*;

/// Whether no member of `comm` that could send to this rank is alive: an
/// `MPI_ANY_SOURCE` receive on it can then never match. On an
/// intracommunicator this rank itself does not count (a message from it
/// would need a send this rank has not made); on an intercommunicator
/// every rank of `world` is a remote process.
pub(super) fn no_live_sender(comm: Option<&Comm>, dead: &[Option<String>]) -> bool {
    comm.is_some_and(|c| {
        (c.inter || c.world.len() > 1)
            && c.world.iter().enumerate().all(|(i, &w)| {
                (!c.inter && i == c.me as usize)
                    || dead.get(w as usize).is_some_and(Option::is_some)
            })
    })
}

/// What [`Ob1::on_local_fault`] is given: called with the message.
pub type LocalFaultHook = Box<dyn Fn(&str) + Send>;

/// [`Ob1::on_local_fault`]'s hook, if one was set.
#[derive(Default)]
pub(crate) struct FaultHook(pub(super) Option<LocalFaultHook>);

impl std::fmt::Debug for FaultHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "FaultHook(set)"
        } else {
            "FaultHook(none)"
        })
    }
}

impl State {
    /// A BTL lost world rank `peer` (`e` says why): a peer that is gone
    /// ([`BtlError::PeerGone`]) fails what needs it; any other error is a
    /// fault of this process towards a live peer, reported to the hook
    /// first ([`Ob1::on_local_fault`]).
    pub(super) fn peer_unreachable(&mut self, peer: u32, e: &BtlError) {
        if !matches!(e, BtlError::PeerGone(..)) {
            self.local_fault(Some(peer), e);
        }
        self.peer_failed(peer, &e.to_string());
    }

    /// This process failed towards live world rank `peer` (`None`: live
    /// peers in general), for reason `e`: tell the hook, if any
    /// ([`Ob1::on_local_fault`]).
    #[cold]
    pub(super) fn local_fault(&self, peer: Option<u32>, e: &BtlError) {
        let Some(hook) = &self.local_fault.0 else {
            tracing::debug!(?peer, "fault of this process: {e}");
            return;
        };
        match peer {
            Some(p) if self.dead[p as usize].is_none() => {
                hook(&format!("rank {} cannot reach rank {p}: {e}", self.me));
            }
            Some(_) => {}
            None => hook(&format!("rank {}: {e}", self.me)),
        }
    }

    pub(super) fn fail(&mut self, r: ReqRef, class: ErrClass, why: &str) {
        tracing::debug!(?r, ?class, "request failed: {why}");
        if let Some(q) = self.reqs.get_mut(r) {
            q.status.error = Some(class);
            q.status.detail = crate::error::reasons::record(why);
            if let Kind::Recv(rr) = &mut q.kind {
                if let (false, Some(h)) = (rr.matched, rr.handle.take()) {
                    self.engine.cancel(h);
                }
            }
        }
        self.complete(r);
    }

    /// A put of ours failed: fail the send, and tell the receiver, which
    /// would otherwise wait for those bytes forever.
    pub(super) fn put_failed(&mut self, send_req: ReqRef, recv_req: ReqRef, e: &BtlError) {
        if let Some(s) = self.reqs.send(send_req) {
            let peer = s.peer;
            self.actions.push_back(Action::Ctl {
                peer,
                hdr: Hdr::Fin {
                    req: recv_req,
                    size: 0,
                    status: 1,
                    nanos: 0,
                },
            });
        }
        self.fail_btl(send_req, e);
    }

    /// A BTL operation of request `r` failed: a peer that is gone fails
    /// everything that needs it; a send that failed for a reason of this
    /// process (a system call: [`BtlError::Io`]) leaves a live receiver
    /// waiting, a local fault.
    pub(super) fn fail_btl(&mut self, r: ReqRef, e: &BtlError) {
        if let Some(p) = self.reqs.send(r).map(|s| s.peer) {
            match e {
                BtlError::PeerGone(..) => self.peer_failed(p, &e.to_string()),
                BtlError::Io(_) => self.local_fault(Some(p), e),
                _ => {}
            }
        }
        self.fail(r, btl_err(e), &e.to_string());
    }

    /// A peer is gone: every request that needs it fails with
    /// `MPI_ERR_PROC_FAILED`; later operations on it fail at once.
    pub(super) fn peer_failed(&mut self, peer: u32, why: &str) {
        if self.dead[peer as usize].is_some() {
            return;
        }
        tracing::debug!(peer, "peer lost: {why}");
        self.dead[peer as usize] = Some(format!("rank {peer} is gone: {why}"));
        self.n_dead += 1;
        let (comms, dead) = (&self.comms, &self.dead);
        let victims = self.reqs.live_where(|kind| match kind {
            Kind::Send(snd) => snd.peer == peer,
            Kind::Recv(rr) => {
                (rr.matched && rr.peer == peer)
                    || match rr.src {
                        Source::Rank(src) => comms[usize::from(rr.ctx)]
                            .as_ref()
                            .is_some_and(|c| c.world.get(src as usize) == Some(&peer)),
                        Source::Any => {
                            !rr.matched && no_live_sender(comms[usize::from(rr.ctx)].as_ref(), dead)
                        }
                        Source::ProcNull => false,
                    }
            }
        });
        let msg = format!("rank {peer} is gone: {why}");
        for r in victims {
            self.fail(r, ErrClass::ProcFailed, &msg);
        }
    }
}
