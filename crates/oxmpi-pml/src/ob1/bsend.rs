//! Buffered sends in ob1 (seed 000's buffered pipeline): `MPI_Bsend` packs
//! the message into the attached buffer ([`crate::bsend`]) and sends the
//! copy as an internal standard send; the user's request completes once the
//! copy is made.

use super::*;

impl State {
    pub(super) fn bsend_start(&mut self, r: ReqRef) {
        let Some(s) = self.reqs.send(r) else {
            return;
        };
        let (need, ctx) = (s.len, s.ctx);
        let (space, slot) = match self.bsend.alloc(ctx, need) {
            Ok(x) => x,
            Err(e) => {
                self.fail(r, e.class, &e.msg);
                return;
            }
        };
        let Some(s) = self.reqs.send(r) else {
            return;
        };
        // Pack the message into the buffer (the buffered pipeline: the
        // user's request is complete once its data is packed).
        space.with_bytes_mut(|out| s.buf.pack(0, out));
        let inner = SendReq {
            ctx: s.ctx,
            dst: s.dst,
            peer: s.peer,
            tag: s.tag,
            buf: Buffer::Contig(space),
            len: need,
            mode: SendMode::Standard,
            proto: Proto::Eager,
            first_len: 0,
            first_sent: false,
            first_done: false,
            need_ack: false,
            acked: false,
            fin: false,
            recv_req: ReqRef::default(),
            sched_off: 0,
            end_off: 0,
            inflight: 0,
            put_expect: 0,
            put_done: 0,
            reg: None,
            bsend: Some(slot),
            internal: true,
            credit: 0,
            seq: 0,
            rkey: None,
            rget_open: false,
            split: false,
            cancel: CancelState::None,
        };
        let ir = self.reqs.alloc(|| Req {
            done: false,
            status: Status::default(),
            user_freed: false,
            persistent: false,
            active: true,
            kind: Kind::Send(inner),
        });
        self.complete(r);
        self.actions.push_back(Action::Start(ir));
    }
}

impl<B: ?Sized + Btl> Ob1<B> {
    /// Attaches a buffer to `scope`: the program's `region`, or `None` for
    /// an automatic one. `MPI_ERR_BUFFER` if `scope` has one already.
    pub fn buffer_attach_to(
        &mut self,
        scope: BufferScope,
        region: Option<MemRegion>,
    ) -> Result<(), PmlError> {
        self.st.bsend.attach_to(scope, region)
    }

    /// `MPI_Buffer_attach`.
    pub fn buffer_attach(&mut self, region: MemRegion) -> Result<(), PmlError> {
        self.buffer_attach_to(BufferScope::Process, Some(region))
    }

    /// Whether buffered sends still occupy `scope`'s buffer.
    pub fn buffer_busy_in(&self, scope: BufferScope) -> bool {
        self.st.bsend.busy_in(scope)
    }

    /// Whether buffered sends still occupy the process's buffer.
    pub fn buffer_busy(&self) -> bool {
        self.buffer_busy_in(BufferScope::Process)
    }

    /// Detaches `scope`'s buffer once [`Ob1::buffer_busy_in`] is false:
    /// its region (`None`: it was automatic).
    pub fn buffer_detach_from(
        &mut self,
        scope: BufferScope,
    ) -> Result<Option<MemRegion>, PmlError> {
        self.st.bsend.detach_from(scope)
    }

    /// `MPI_Buffer_detach` of the process's buffer, once
    /// [`Ob1::buffer_busy`] is false: returns the region.
    pub fn buffer_detach(&mut self) -> Result<MemRegion, PmlError> {
        self.st.bsend.detach()
    }

    /// Binds context `ctx` to session `session` (a communicator derived
    /// from it: its buffered sends fall back on the session's buffer), or
    /// unbinds it (`None`, when the communicator is freed).
    pub fn bind_session(&mut self, ctx: u16, session: Option<u64>) {
        self.st.bsend.bind_session(ctx, session);
    }

    /// The session context `ctx` was bound to ([`Ob1::bind_session`]).
    pub fn session_of(&self, ctx: u16) -> Option<u64> {
        self.st.bsend.session_of(ctx)
    }
}
