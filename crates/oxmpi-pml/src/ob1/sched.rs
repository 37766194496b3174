//! The scheduler: the actions queue (control messages, GETs, PUTs, send
//! pipeline steps), the pending queue of what a BTL refused for want of
//! resources, and the copies queue; BTL tokens and request completion.

use super::*;

impl<B: ?Sized + Btl> Ob1<B> {
    /// Runs queued actions, then retries what was refused for lack of
    /// resources (each once per call), as a call that posts or starts a
    /// request does it: an RDMA get or put (a copy of up to a whole message, by a system
    /// call of a hundred microseconds for a megabyte), and the decision on
    /// a matched RGET that leads to one, are not run here but left in
    /// `copies` for the next progress pass ([`Ob1::run_all_actions`]). So a
    /// call that posts returns at once and the next post follows: when both
    /// sides post receives and then sends (a bidirectional exchange), each
    /// side's rendezvous headers go out before either starts copying, both
    /// copy at once, and the split decision sees our own sends
    /// (`rget_out`). (Open MPI's ob1 posting calls do not read the BTLs
    /// at all; it gets inside `irecv` only for an RGET that an earlier
    /// progress left unexpected.) The cost: an `MPI_Irecv` that matches an
    /// RGET already here, followed by a long computation, holds the sender
    /// until the receiver's next MPI call.
    pub(super) fn run_actions(&mut self) -> usize {
        self.run_actions_as(true)
    }

    /// Runs all the queued work: the progress pass's. Copies left by
    /// posting calls join the front of the retries, so each runs once per
    /// pass (one refused for lack of resources is not tried again in the
    /// same pass).
    pub(super) fn run_all_actions(&mut self) -> usize {
        while let Some(a) = self.st.copies.pop_back() {
            self.st.pending.push_front(a);
        }
        self.run_actions_as(false)
    }

    /// Whether `a` copies data (an RDMA get or put), or decides how an RGET
    /// is copied (its split with the sender looks at our own sends to the
    /// peer, which a posting call may not have started yet): work that a
    /// posting call leaves for progress.
    pub(super) fn is_copy(st: &State, a: &Action) -> bool {
        match a {
            Action::Get(_) | Action::Put(_) => true,
            Action::Rndv(r) => st.unexp_rndv_info(*r).is_some_and(|(k, _)| k.is_some()),
            _ => false,
        }
    }

    /// `a` to run now, or `None` having left it in `copies` (a posting
    /// call's copy, see [`Ob1::is_copy`]).
    pub(super) fn runnable(&mut self, posting: bool, a: Action) -> Option<Action> {
        if posting && Self::is_copy(&self.st, &a) {
            self.st.copies.push_back(a);
            return None;
        }
        Some(a)
    }

    pub(super) fn run_actions_as(&mut self, posting: bool) -> usize {
        let mut n = 0;
        while let Some((b, id)) = self.st.dereg.pop() {
            self.btls[b].deregister_mem(id);
        }
        while let Some(a) = self.st.actions.pop_front() {
            if let Some(a) = self.runnable(posting, a) {
                n += 1;
                self.run_action(a);
            }
        }
        // Retry what was refused, in order, until a retry is refused again
        // (the resource is still exhausted: the rest would be too).
        let retries = self.st.pending.len();
        for _ in 0..retries {
            let Some(a) = self.st.pending.pop_front() else {
                break;
            };
            let Some(a) = self.runnable(posting, a) else {
                continue;
            };
            let before = self.st.pending.len();
            self.run_action(a);
            while let Some(a) = self.st.actions.pop_front() {
                if let Some(a) = self.runnable(posting, a) {
                    self.run_action(a);
                }
            }
            if self.st.pending.len() <= before {
                // A refused operation went through: that is progress.
                n += 1;
            } else {
                // Put the refused one back in front of the untried ones.
                let refused = self.st.pending.pop_back().expect("just queued");
                self.st.pending.push_front(refused);
                break;
            }
        }
        n
    }

    pub(super) fn run_action(&mut self, a: Action) {
        match a {
            Action::Ctl { peer, hdr } => self.send_ctl(peer, hdr, None),
            Action::CtlVia { peer, btl, hdr } => self.send_ctl(peer, hdr, Some(btl)),
            Action::Drive(r) => self.drive_send(r),
            Action::Start(r) => self.start_send(r),
            Action::Rndv(r) => self.rndv_matched(r),
            Action::Get(r) => self.issue_get(r),
            Action::Put(ask) => self.issue_put(ask),
        }
    }
}

impl State {
    pub(super) fn alloc_tok(&mut self, t: Tok) -> Token {
        if let Some(i) = self.free_toks.pop() {
            self.toks[i as usize] = Some(t);
            Token(u64::from(i))
        } else {
            self.toks.push(Some(t));
            Token(self.toks.len() as u64 - 1)
        }
    }

    pub(super) fn free_tok(&mut self, t: Token) -> Option<Tok> {
        let slot = self.toks.get_mut(t.0 as usize)?;
        let tok = slot.take()?;
        self.free_toks.push(t.0 as u32);
        Some(tok)
    }

    /// Marks a request complete; a request freed by the user while active
    /// goes away now, and an internal (buffered-send) one releases its
    /// space in the attached buffer.
    pub(super) fn complete(&mut self, r: ReqRef) {
        let State {
            reqs,
            rcache,
            dereg,
            rget_out,
            bsend,
            ..
        } = self;
        if let Some(q) = reqs.get_mut(r) {
            if close_req(q, rcache, dereg, rget_out, bsend) {
                reqs.free_live(r.index);
            }
        }
    }
}
