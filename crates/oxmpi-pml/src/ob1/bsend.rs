//! Buffered sends (seed 000's buffered pipeline): `MPI_Bsend` copies the
//! message into an attached buffer and sends the copy as an internal
//! standard send; the user's request completes once the copy is made.
//!
//! MPI 4.1 attaches buffers to the process (`MPI_Buffer_attach`), to a
//! communicator (`MPI_Comm_attach_buffer`) or to a session
//! (`MPI_Session_attach_buffer`); a buffered send uses its communicator's
//! buffer, else that of the session the communicator derives from
//! ([`Ob1::bind_session`]), else the process's. A buffer is either the
//! program's memory, allocated first fit, or automatic
//! (`MPI_BUFFER_AUTOMATIC`): the library allocates each message's copy.

use super::*;

/// Which attached buffer: the process's, a communicator's (its context
/// id) or a session's (an identifier of the caller's choosing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferScope {
    /// `MPI_Buffer_attach`.
    Process,
    /// `MPI_Comm_attach_buffer`: the communicator's point-to-point context.
    Comm(u16),
    /// `MPI_Session_attach_buffer`.
    Session(u64),
}

/// One attached buffer.
#[derive(Debug)]
pub(super) struct Bsend {
    pub(super) scope: BufferScope,
    /// Names this buffer in the internal sends that hold part of it.
    pub(super) id: u32,
    /// The program's memory, or `None` for an automatic buffer.
    pub(super) region: Option<MemRegion>,
    /// Live allocations (offset, length), sorted by offset; for an
    /// automatic buffer, (serial number, length).
    pub(super) used: Vec<(usize, usize)>,
    /// An automatic buffer's copies, by serial number.
    pub(super) auto: Vec<(usize, Box<[u8]>)>,
    /// The next serial number of an automatic buffer.
    pub(super) serial: usize,
}

/// The part of an attached buffer an internal send holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BsendSlot {
    pub(super) buf: u32,
    pub(super) at: (usize, usize),
}

/// Releases `slot` in its buffer (an internal send completed).
pub(super) fn release(bufs: &mut [Bsend], slot: BsendSlot) {
    if let Some(b) = bufs.iter_mut().find(|b| b.id == slot.buf) {
        b.used.retain(|&u| u != slot.at);
        if b.region.is_none() {
            b.auto.retain(|(n, _)| *n != slot.at.0);
        }
    }
}

/// The region of an automatic buffer's copy.
#[allow(unsafe_code)]
fn owned_region(copy: &[u8]) -> MemRegion {
    // SAFETY: `copy` is a boxed slice that `bsend_start` moves into its
    // buffer's `auto` list: moving the box leaves its heap bytes in place,
    // and they stay allocated until `release` drops the entry, which only
    // the completion of the one internal send given this region does
    // (`close_req`); a buffer is detached only once none is left. Only that
    // send reads the bytes after `bsend_start` wrote them.
    unsafe { MemRegion::from_slice(copy) }
}

impl State {
    /// The buffer a buffered send on context `ctx` uses.
    fn bsend_buffer(&self, ctx: u16) -> Option<usize> {
        let find = |s: BufferScope| self.bsend.iter().position(|b| b.scope == s);
        find(BufferScope::Comm(ctx))
            .or_else(|| {
                let sid = self.ctx_session.iter().find(|(c, _)| *c == ctx)?.1;
                find(BufferScope::Session(sid))
            })
            .or_else(|| find(BufferScope::Process))
    }

    pub(super) fn bsend_start(&mut self, r: ReqRef) {
        let Some(s) = self.reqs.send(r) else {
            return;
        };
        let (need, ctx) = (s.len, s.ctx);
        let Some(bi) = self.bsend_buffer(ctx) else {
            self.fail(r, ErrClass::Buffer, "MPI_Bsend with no buffer attached");
            return;
        };
        let b = &mut self.bsend[bi];
        let (space, at) = match b.region {
            Some(region) => {
                // First fit between live allocations.
                let mut at = 0usize;
                let mut found = None;
                for &(off, len) in &b.used {
                    if off - at >= need {
                        found = Some(at);
                        break;
                    }
                    at = off + len;
                }
                if found.is_none() && region.len() - at >= need {
                    found = Some(at);
                }
                let Some(off) = found else {
                    let free = region.len() - b.used.iter().map(|u| u.1).sum::<usize>();
                    let msg = format!(
                        "attached buffer too small: this message needs {need} bytes, {free} are free"
                    );
                    self.fail(r, ErrClass::Buffer, &msg);
                    return;
                };
                let pos = b.used.partition_point(|u| u.0 < off);
                b.used.insert(pos, (off, need));
                let space = region.slice(off, need).expect("inside the attached buffer");
                (space, (off, need))
            }
            None => {
                let n = b.serial;
                b.serial += 1;
                let copy = vec![0u8; need].into_boxed_slice();
                let space = owned_region(&copy);
                b.auto.push((n, copy));
                b.used.push((n, need));
                (space, (n, need))
            }
        };
        let slot = BsendSlot { buf: b.id, at };
        let Some(s) = self.reqs.send(r) else {
            return;
        };
        // Pack the message into the buffer (the buffered pipeline: the
        // user's request is complete once its data is packed).
        let mut tmp = vec![0u8; need];
        s.buf.pack(0, &mut tmp);
        space.write(0, &tmp);
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
        if self.st.bsend.iter().any(|b| b.scope == scope) {
            return Err(err(ErrClass::Buffer, "a buffer is already attached"));
        }
        self.st.bsend_ids = self.st.bsend_ids.wrapping_add(1);
        self.st.bsend.push(Bsend {
            scope,
            id: self.st.bsend_ids,
            region,
            used: Vec::new(),
            auto: Vec::new(),
            serial: 0,
        });
        Ok(())
    }

    /// `MPI_Buffer_attach`.
    pub fn buffer_attach(&mut self, region: MemRegion) -> Result<(), PmlError> {
        self.buffer_attach_to(BufferScope::Process, Some(region))
    }

    /// Whether buffered sends still occupy `scope`'s buffer.
    pub fn buffer_busy_in(&self, scope: BufferScope) -> bool {
        self.st
            .bsend
            .iter()
            .any(|b| b.scope == scope && !b.used.is_empty())
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
        let Some(i) = self.st.bsend.iter().position(|b| b.scope == scope) else {
            return Err(err(ErrClass::Buffer, "no buffer is attached"));
        };
        if !self.st.bsend[i].used.is_empty() {
            return Err(err(
                ErrClass::Pending,
                "buffered messages are still in flight",
            ));
        }
        Ok(self.st.bsend.swap_remove(i).region)
    }

    /// `MPI_Buffer_detach` of the process's buffer, once
    /// [`Ob1::buffer_busy`] is false: returns the region.
    pub fn buffer_detach(&mut self) -> Result<MemRegion, PmlError> {
        match self.buffer_detach_from(BufferScope::Process)? {
            Some(r) => Ok(r),
            None => {
                // Put the automatic buffer back: the caller wants memory.
                self.buffer_attach_to(BufferScope::Process, None)?;
                Err(err(
                    ErrClass::Buffer,
                    "the attached buffer is automatic (MPI_BUFFER_AUTOMATIC)",
                ))
            }
        }
    }

    /// Binds context `ctx` to session `session` (a communicator derived
    /// from it: its buffered sends fall back on the session's buffer), or
    /// unbinds it (`None`, when the communicator is freed).
    pub fn bind_session(&mut self, ctx: u16, session: Option<u64>) {
        self.st.ctx_session.retain(|(c, _)| *c != ctx);
        if let Some(s) = session {
            self.st.ctx_session.push((ctx, s));
        }
    }

    /// The session context `ctx` was bound to ([`Ob1::bind_session`]).
    pub fn session_of(&self, ctx: u16) -> Option<u64> {
        self.st
            .ctx_session
            .iter()
            .find(|(c, _)| *c == ctx)
            .map(|x| x.1)
    }
}
