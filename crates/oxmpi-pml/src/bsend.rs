//! The attached buffers of buffered sends, shared by both PMLs (ob1's
//! buffered pipeline, cm's buffered sends): `MPI_Bsend` copies the message
//! into an attached buffer and sends the copy; the user's request completes
//! once the copy is made, and the copy's space is released when the internal
//! send completes.
//!
//! MPI 4.1 attaches buffers to the process (`MPI_Buffer_attach`), to a
//! communicator (`MPI_Comm_attach_buffer`) or to a session
//! (`MPI_Session_attach_buffer`); a buffered send uses its communicator's
//! buffer, else that of the session the communicator derives from
//! ([`BsendPool::bind_session`]), else the process's. A buffer is either the
//! program's memory, allocated first fit, or automatic
//! (`MPI_BUFFER_AUTOMATIC`): the library allocates each message's copy.

use oxmpi_btl::mem::MemRegion;

use crate::error::{ErrClass, PmlError};

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
struct Bsend {
    scope: BufferScope,
    /// Names this buffer in the slots that hold part of it.
    id: u32,
    /// The program's memory, or `None` for an automatic buffer.
    region: Option<MemRegion>,
    /// Live allocations (offset, length), sorted by offset; for an
    /// automatic buffer, (serial number, length).
    used: Vec<(usize, usize)>,
    /// An automatic buffer's copies, by serial number.
    auto: Vec<(usize, Box<[u8]>)>,
    /// The next serial number of an automatic buffer.
    serial: usize,
}

/// The part of an attached buffer one internal send holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BsendSlot {
    buf: u32,
    at: (usize, usize),
}

/// Every attached buffer of a process, and the sessions of its contexts.
#[derive(Debug, Default)]
pub struct BsendPool {
    bufs: Vec<Bsend>,
    /// The last buffer identifier given out.
    ids: u32,
    /// Contexts of communicators derived from a session, and the session.
    ctx_session: Vec<(u16, u64)>,
}

/// The region of an automatic buffer's copy.
#[allow(unsafe_code)]
fn owned_region(copy: &[u8]) -> MemRegion {
    // SAFETY: `copy` is a boxed slice that `BsendPool::alloc` moves into its
    // buffer's `auto` list: moving the box leaves its heap bytes in place,
    // and they stay allocated until `release` drops the entry, which only
    // the completion of the one internal send given this region does; a
    // buffer is detached only once none is left. Only that send reads the
    // bytes after the PML packed them.
    unsafe { MemRegion::from_slice(copy) }
}

impl BsendPool {
    /// The buffer a buffered send on context `ctx` uses.
    fn buffer_for(&self, ctx: u16) -> Option<usize> {
        let find = |s: BufferScope| self.bufs.iter().position(|b| b.scope == s);
        find(BufferScope::Comm(ctx))
            .or_else(|| find(BufferScope::Session(self.session_of(ctx)?)))
            .or_else(|| find(BufferScope::Process))
    }

    /// Space for a buffered send of `need` bytes on context `ctx`: the
    /// region to pack the message into and the slot to [`BsendPool::release`]
    /// once its internal send completes. `MPI_ERR_BUFFER` (with the reason)
    /// when no buffer is attached or it has no room.
    pub fn alloc(&mut self, ctx: u16, need: usize) -> Result<(MemRegion, BsendSlot), PmlError> {
        let Some(bi) = self.buffer_for(ctx) else {
            return Err(PmlError::new(
                ErrClass::Buffer,
                "MPI_Bsend with no buffer attached",
            ));
        };
        let b = &mut self.bufs[bi];
        // An empty message holds one byte, so that every live allocation
        // has its own offset and the list stays sorted without overlaps.
        let hold = need.max(1);
        let (space, at) = match b.region {
            Some(region) => {
                // First fit between live allocations.
                let mut at = 0usize;
                let mut found = None;
                for &(off, len) in &b.used {
                    if off - at >= hold {
                        found = Some(at);
                        break;
                    }
                    at = off + len;
                }
                if found.is_none() && region.len() - at >= hold {
                    found = Some(at);
                }
                let Some(off) = found else {
                    let free = region.len() - b.used.iter().map(|u| u.1).sum::<usize>();
                    return Err(PmlError::new(
                        ErrClass::Buffer,
                        format!(
                            "attached buffer too small: this message needs {need} bytes, {free} are free"
                        ),
                    ));
                };
                let pos = b.used.partition_point(|u| u.0 < off);
                b.used.insert(pos, (off, hold));
                let space = region.slice(off, need).expect("inside the attached buffer");
                (space, (off, hold))
            }
            None => {
                let n = b.serial;
                b.serial += 1;
                let copy = vec![0u8; need].into_boxed_slice();
                let space = owned_region(&copy);
                b.auto.push((n, copy));
                b.used.push((n, hold));
                (space, (n, hold))
            }
        };
        Ok((space, BsendSlot { buf: b.id, at }))
    }

    /// Releases `slot` (its internal send completed).
    pub fn release(&mut self, slot: BsendSlot) {
        if let Some(b) = self.bufs.iter_mut().find(|b| b.id == slot.buf) {
            b.used.retain(|&u| u != slot.at);
            if b.region.is_none() {
                b.auto.retain(|(n, _)| *n != slot.at.0);
            }
        }
    }

    /// Attaches a buffer to `scope`: the program's `region`, or `None` for
    /// an automatic one. `MPI_ERR_BUFFER` if `scope` has one already.
    pub fn attach_to(
        &mut self,
        scope: BufferScope,
        region: Option<MemRegion>,
    ) -> Result<(), PmlError> {
        if self.bufs.iter().any(|b| b.scope == scope) {
            return Err(PmlError::new(
                ErrClass::Buffer,
                "a buffer is already attached",
            ));
        }
        self.ids = self.ids.wrapping_add(1);
        self.bufs.push(Bsend {
            scope,
            id: self.ids,
            region,
            used: Vec::new(),
            auto: Vec::new(),
            serial: 0,
        });
        Ok(())
    }

    /// Whether buffered sends still occupy `scope`'s buffer.
    pub fn busy_in(&self, scope: BufferScope) -> bool {
        self.bufs
            .iter()
            .any(|b| b.scope == scope && !b.used.is_empty())
    }

    /// Detaches `scope`'s buffer once [`BsendPool::busy_in`] is false: its
    /// region (`None`: it was automatic).
    pub fn detach_from(&mut self, scope: BufferScope) -> Result<Option<MemRegion>, PmlError> {
        let Some(i) = self.bufs.iter().position(|b| b.scope == scope) else {
            return Err(PmlError::new(ErrClass::Buffer, "no buffer is attached"));
        };
        if !self.bufs[i].used.is_empty() {
            return Err(PmlError::new(
                ErrClass::Pending,
                "buffered messages are still in flight",
            ));
        }
        Ok(self.bufs.swap_remove(i).region)
    }

    /// `MPI_Buffer_detach` of the process's buffer, once not busy: returns
    /// the region; an automatic buffer stays attached (`MPI_ERR_BUFFER`).
    pub fn detach(&mut self) -> Result<MemRegion, PmlError> {
        match self.detach_from(BufferScope::Process)? {
            Some(r) => Ok(r),
            None => {
                // Put the automatic buffer back: the caller wants memory.
                self.attach_to(BufferScope::Process, None)?;
                Err(PmlError::new(
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
        self.ctx_session.retain(|(c, _)| *c != ctx);
        if let Some(s) = session {
            self.ctx_session.push((ctx, s));
        }
    }

    /// The session context `ctx` was bound to ([`BsendPool::bind_session`]).
    pub fn session_of(&self, ctx: u16) -> Option<u64> {
        self.ctx_session
            .iter()
            .find(|(c, _)| *c == ctx)
            .map(|x| x.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(unsafe_code)]
    fn region(v: &[u8]) -> MemRegion {
        // SAFETY: the tests keep `v` alive and unmoved while they use it.
        unsafe { MemRegion::from_slice(v) }
    }

    #[test]
    fn first_fit_reuses_released_space_and_reports_what_is_free() {
        let mem = vec![0u8; 100];
        let mut p = BsendPool::default();
        p.attach_to(BufferScope::Process, Some(region(&mem)))
            .unwrap();
        let (a, sa) = p.alloc(7, 40).unwrap();
        let (b, _) = p.alloc(7, 40).unwrap();
        assert_eq!(b.addr() - a.addr(), 40);
        let e = p.alloc(7, 30).unwrap_err();
        assert_eq!(e.class, ErrClass::Buffer);
        assert!(e.to_string().contains("20 are free"), "{e}");
        p.release(sa);
        let (c, _) = p.alloc(7, 30).unwrap();
        assert_eq!(c.addr(), a.addr());
        assert!(p.busy_in(BufferScope::Process));
        assert_eq!(
            p.detach_from(BufferScope::Process).unwrap_err().class,
            ErrClass::Pending
        );
    }

    #[test]
    fn empty_messages_never_share_space_with_others() {
        let mem = vec![0u8; 64];
        let mut p = BsendPool::default();
        p.attach_to(BufferScope::Process, Some(region(&mem)))
            .unwrap();
        let mut live: Vec<(usize, usize)> = Vec::new();
        for need in [0usize, 1, 0, 7, 0, 8] {
            let (r, _) = p.alloc(0, need).unwrap();
            assert_eq!(r.len(), need);
            let (a, n) = (r.addr() - mem.as_ptr() as usize, need.max(1));
            for &(b, m) in &live {
                assert!(a + n <= b || b + m <= a, "[{a}, +{n}) overlaps [{b}, +{m})");
            }
            live.push((a, n));
        }
    }

    #[test]
    fn communicator_then_session_then_process() {
        let (m1, m2, m3) = (vec![0u8; 8], vec![0u8; 8], vec![0u8; 8]);
        let mut p = BsendPool::default();
        assert_eq!(p.alloc(3, 1).unwrap_err().class, ErrClass::Buffer);
        p.attach_to(BufferScope::Process, Some(region(&m1)))
            .unwrap();
        p.attach_to(BufferScope::Session(9), Some(region(&m2)))
            .unwrap();
        p.attach_to(BufferScope::Comm(3), Some(region(&m3)))
            .unwrap();
        p.bind_session(3, Some(9));
        p.bind_session(4, Some(9));
        assert_eq!(p.alloc(3, 1).unwrap().0.addr(), m3.as_ptr() as usize);
        assert_eq!(p.alloc(4, 1).unwrap().0.addr(), m2.as_ptr() as usize);
        assert_eq!(p.alloc(5, 1).unwrap().0.addr(), m1.as_ptr() as usize);
        assert!(p.attach_to(BufferScope::Comm(3), None).is_err());
    }

    #[test]
    fn automatic_buffers_allocate_each_copy_and_stay_attached() {
        let mut p = BsendPool::default();
        p.attach_to(BufferScope::Process, None).unwrap();
        let (r, s) = p.alloc(0, 1 << 20).unwrap();
        assert_eq!(r.len(), 1 << 20);
        assert!(p.busy_in(BufferScope::Process));
        p.release(s);
        assert_eq!(p.detach().unwrap_err().class, ErrClass::Buffer);
        assert_eq!(p.detach_from(BufferScope::Process).unwrap(), None);
    }
}
