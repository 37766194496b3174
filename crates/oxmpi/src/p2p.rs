//! Point-to-point calls built from the PML's requests: persistent sends
//! (`MPI_Send_init` and the other modes) and `MPI_Sendrecv` /
//! `MPI_Sendrecv_replace`.

use oxmpi_pml::{Buffer as PBuffer, SendMode};

use crate::buffer::{Buffer, BufferMut};
use crate::comm::{check_tag, Process, Source, TagSpec};
use crate::datatype::Equivalence;
use crate::error::Result;
use crate::request::{status_result, OwnedPersistentRequest, PersistentRequest, Scope};
use crate::status::Status;
use crate::universe::Threading::Level;

impl<'u, L: Level> Process<'_, 'u, L> {
    fn init_mode<'a, 's, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a B,
        tag: i32,
        mode: SendMode,
    ) -> Result<PersistentRequest<'a, 's>>
    where
        'u: 'a,
    {
        let id = self.start_send(buf.pml_buffer()?, tag, mode, true)?;
        Ok(scope.register_persistent(self.comm.rt(), id))
    }

    /// `MPI_Send_init` of an owned vector: the request owns it, lends it
    /// out between operations and gives it back (see
    /// [`OwnedPersistentRequest`]).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let mut send = next.send_init_owned(vec![0u32; 8], 1).unwrap();
    /// for step in 0..4 {
    ///     send.buffer_mut().unwrap().fill(step);
    ///     send.start().unwrap();
    ///     world.any_process().receive_vec_with_tag::<u32>(1).unwrap();
    ///     send.wait().unwrap();
    /// }
    /// ```
    pub fn send_init_owned<T: Equivalence>(
        &self,
        buf: Vec<T>,
        tag: i32,
    ) -> Result<OwnedPersistentRequest<'u, Vec<T>, L>> {
        self.send_init_owned_mode(buf, tag, SendMode::Standard)
    }

    /// `MPI_Send_init` of an owned vector in `mode` (`Synchronous`,
    /// `Buffered`, `Ready` or `Standard`).
    ///
    /// ```no_run
    /// use oxmpi::{traits::*, SendMode};
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let mut send = next.send_init_owned_mode(vec![1u8; 64], 2, SendMode::Synchronous).unwrap();
    /// send.start().unwrap();
    /// world.any_process().receive_vec_with_tag::<u8>(2).unwrap();
    /// send.wait().unwrap(); // the next rank has matched the message
    /// let buf = send.into_buffer();
    /// ```
    pub fn send_init_owned_mode<T: Equivalence>(
        &self,
        buf: Vec<T>,
        tag: i32,
        mode: crate::SendMode,
    ) -> Result<OwnedPersistentRequest<'u, Vec<T>, L>> {
        let id = self.start_send(buf.pml_buffer()?, tag, mode, true)?;
        Ok(OwnedPersistentRequest::new(self.comm.rt(), id, buf))
    }

    /// `MPI_Send_init`: a persistent standard send of `buf` with `tag`, in
    /// `scope` (see [`PersistentRequest`]).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let out = [world.rank(); 4];
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// oxmpi::request::scope(|s| {
    ///     let mut send = next.send_init(s, &out, 3).unwrap();
    ///     for _ in 0..5 {
    ///         send.start().unwrap();
    ///         world.any_process().receive_vec_with_tag::<i32>(3).unwrap();
    ///         send.wait().unwrap();
    ///     }
    /// });
    /// ```
    pub fn send_init<'a, 's, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a B,
        tag: i32,
    ) -> Result<PersistentRequest<'a, 's>>
    where
        'u: 'a,
    {
        self.init_mode(scope, buf, tag, SendMode::Standard)
    }

    /// `MPI_Ssend_init`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let token = 1u8;
    /// oxmpi::request::scope(|s| {
    ///     let mut send = next.synchronous_send_init(s, &token, 0).unwrap();
    ///     send.start().unwrap();
    ///     world.any_process().receive::<u8>().unwrap();
    ///     send.wait().unwrap(); // the next rank has matched the message
    /// });
    /// ```
    pub fn synchronous_send_init<'a, 's, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a B,
        tag: i32,
    ) -> Result<PersistentRequest<'a, 's>>
    where
        'u: 'a,
    {
        self.init_mode(scope, buf, tag, SendMode::Synchronous)
    }

    /// `MPI_Bsend_init` (needs an attached buffer when started).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// universe.buffer_attach(vec![0u8; 1 << 16]).unwrap();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let data = [2.0f64; 32];
    /// oxmpi::request::scope(|s| {
    ///     let mut send = next.buffered_send_init(s, &data[..], 0).unwrap();
    ///     send.start().unwrap();
    ///     send.wait().unwrap(); // copied into the attached buffer
    ///     world.any_process().receive_vec::<f64>().unwrap();
    /// });
    /// universe.buffer_detach().unwrap();
    /// ```
    pub fn buffered_send_init<'a, 's, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a B,
        tag: i32,
    ) -> Result<PersistentRequest<'a, 's>>
    where
        'u: 'a,
    {
        self.init_mode(scope, buf, tag, SendMode::Buffered)
    }

    /// `MPI_Rsend_init` (the matching receive must be posted when started).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (r, n) = (world.rank(), world.size());
    /// let (next, prev) = (world.process_at_rank((r + 1) % n), world.process_at_rank((r + n - 1) % n));
    /// let mut inb = 0i32;
    /// oxmpi::request::scope(|s| {
    ///     let mut recv = prev.receive_init(s, &mut inb, 0).unwrap();
    ///     let mut send = next.ready_send_init(s, &r, 0).unwrap();
    ///     recv.start().unwrap();
    ///     world.barrier().unwrap(); // every rank's receive is posted
    ///     send.start().unwrap();
    ///     send.wait().unwrap();
    ///     recv.wait().unwrap();
    /// });
    /// ```
    pub fn ready_send_init<'a, 's, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a B,
        tag: i32,
    ) -> Result<PersistentRequest<'a, 's>>
    where
        'u: 'a,
    {
        self.init_mode(scope, buf, tag, SendMode::Ready)
    }

    /// `MPI_Isend` of `buf` (standard mode) then `MPI_Irecv` into `recv`
    /// from `source`, both completed before returning: `MPI_Sendrecv`. The
    /// status is the receive's.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (r, n) = (world.rank(), world.size());
    /// let next = world.process_at_rank((r + 1) % n);
    /// let prev = world.process_at_rank((r + n - 1) % n);
    /// let mut got = 0i32;
    /// let st = next.send_receive_into(&r, 5, &prev, &mut got, 5).unwrap();
    /// assert_eq!(got, (r + n - 1) % n);
    /// assert_eq!(st.tag(), 5);
    /// ```
    pub fn send_receive_into<S, B, R>(
        &self,
        send: &S,
        send_tag: i32,
        source: &R,
        recv: &mut B,
        recv_tag: impl TagSpec,
    ) -> Result<Status>
    where
        S: Buffer + ?Sized,
        B: BufferMut + ?Sized,
        R: Source<'u, L>,
    {
        check_tag(send_tag)?;
        let spb = send.pml_buffer()?;
        let rpb = recv.pml_buffer_mut()?;
        self.exchange(spb, send_tag, source, rpb, recv_tag)
    }

    /// `MPI_Sendrecv_replace`: sends the contents of `buf` to this process
    /// and receives into `buf` from `source` (the outgoing data is copied
    /// first, so the two may overlap in time).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (r, n) = (world.rank(), world.size());
    /// let mut v = [r; 3];
    /// world
    ///     .process_at_rank((r + 1) % n)
    ///     .send_receive_replace(&mut v[..], 0, &world.process_at_rank((r + n - 1) % n), 0)
    ///     .unwrap();
    /// assert_eq!(v, [(r + n - 1) % n; 3]);
    /// ```
    pub fn send_receive_replace<B, R>(
        &self,
        buf: &mut B,
        send_tag: i32,
        source: &R,
        recv_tag: impl TagSpec,
    ) -> Result<Status>
    where
        B: BufferMut + ?Sized,
        R: Source<'u, L>,
    {
        check_tag(send_tag)?;
        let rpb = buf.pml_buffer_mut()?;
        // The packed outgoing message, taken before the receive may write.
        let mut copy = vec![0u8; rpb.len()];
        let n = rpb.pack(0, &mut copy);
        copy.truncate(n);
        let spb = PBuffer::Contig(crate::buffer::bytes(&copy));
        let st = self.exchange(spb, send_tag, source, rpb, recv_tag);
        drop(copy);
        st
    }

    /// Posts the receive, starts the send, waits for both (the send's
    /// error first, then the receive's status).
    fn exchange<R: Source<'u, L>>(
        &self,
        spb: PBuffer,
        send_tag: i32,
        source: &R,
        rpb: PBuffer,
        recv_tag: impl TagSpec,
    ) -> Result<Status> {
        let (rt, rid) = source.post_recv(rpb, recv_tag.to_match()?, false)?;
        let sid = match self.start_send(spb, send_tag, SendMode::Standard, false) {
            Ok(id) => id,
            Err(e) => {
                // The receive buffer is borrowed only for this call.
                let _ = rt.pml.with(|o| o.cancel(rid));
                let _ = rt.pml.wait(rid);
                return Err(e);
            }
        };
        let results = rt.pml.wait_all(&[sid, rid]);
        let mut it = results.into_iter();
        let s = it.next().expect("two results");
        let r = it.next().expect("two results");
        status_result(s)?;
        status_result(r)
    }
}
