//! Memory given as an address, a count and a datatype, the way C programs
//! (and the C ABI layer) give it: [`RawBuffer`]. Creating one is the
//! `unsafe` promise that the memory outlives the operations given it; from
//! there, sends, receives and requests are the safe API's.
#![allow(unsafe_code)]

use oxmpi_btl::mem::MemRegion;
use oxmpi_datatype::Convertor;
use oxmpi_pml::{Buffer as PBuffer, BufferScope, SendMode};

use crate::buffer::{Buffer, BufferMut};
use crate::comm::Message;
use crate::comm::{Process, Source, TagSpec};
use crate::datatype::{typed_buffer_at, UserDatatype};
use crate::error::Result;
use crate::error::{Error, ErrorClass};
use crate::request::{OwnedPersistentRequest, OwnedRequest};
use crate::status::Status;
use crate::universe::Threading::Level;
use crate::universe::Universe;

/// `count` elements of a datatype at an address (`buf, count, datatype` of
/// a C call). It has no lifetime: the creator promises the memory stays
/// valid until every operation on it completes, so a request started from
/// one outlives the call without holding it (a persistent request keeps it,
/// to start again).
///
/// ```
/// use oxmpi::{RawBuffer, UserDatatype};
/// let data = [1.0f64, 2.0, 3.0, 4.0];
/// let every_other = UserDatatype::vector(2, 1, 2, &UserDatatype::of::<f64>()).unwrap();
/// // SAFETY: `data` outlives every use of `raw` below.
/// let raw = unsafe { RawBuffer::new(data.as_ptr().cast(), 1, &every_other) }.unwrap();
/// assert_eq!(raw.packed_len(), 16);
/// ```
#[derive(Debug)]
pub struct RawBuffer {
    region: MemRegion,
    origin: isize,
    /// `None`: the data is the whole region, one run (no convertor).
    datatype: Option<UserDatatype>,
    count: usize,
    packed: usize,
}

impl RawBuffer {
    /// `count` elements of `datatype` whose origin is `addr` (which may be
    /// null for `MPI_BOTTOM` with absolute displacements). Errors if the
    /// data of `count` elements does not fit the address space.
    ///
    /// ```
    /// let m = [0f32; 16];
    /// let col = oxmpi::UserDatatype::vector(4, 1, 4, &oxmpi::UserDatatype::of::<f32>()).unwrap();
    /// // SAFETY: `m` outlives `raw`.
    /// let raw = unsafe { oxmpi::RawBuffer::new(m.as_ptr().cast(), 1, &col) }.unwrap();
    /// assert_eq!(raw.packed_len(), 16);
    /// ```
    ///
    /// # Safety
    /// Every byte the data of the elements reaches must stay allocated
    /// until each operation given this buffer has completed: readable and
    /// initialized for sends, writable and not otherwise accessed for
    /// receives.
    pub unsafe fn new(addr: *const u8, count: usize, datatype: &UserDatatype) -> Result<RawBuffer> {
        let t = datatype.as_raw();
        if t.is_contiguous() && t.lb() == 0 && t.true_lb() == 0 && t.extent() == t.size() as isize {
            // The common case (a predefined type): one run from `addr`.
            let len = count.checked_mul(t.size()).ok_or_else(|| {
                Error::new(
                    ErrorClass::Count,
                    format!("{count} elements overflow the address space"),
                )
            })?;
            // SAFETY: forwarded: the caller's promise covers these bytes.
            let mut b = unsafe { RawBuffer::bytes(addr, len) };
            b.count = count;
            return Ok(b);
        }
        let conv = Convertor::new(t, count)?;
        let packed = conv.packed_size();
        let (region, origin) = match conv.span() {
            Some(span) => {
                let len = (span.end - span.start) as usize;
                let start = (addr as usize).wrapping_add_signed(span.start);
                // SAFETY: the caller promises the bytes the elements reach
                // (exactly this span around `addr`) outlive the operations.
                (
                    unsafe { MemRegion::new(start as *const u8, len) },
                    -span.start,
                )
            }
            None => (MemRegion::EMPTY, 0),
        };
        Ok(RawBuffer {
            region,
            origin,
            datatype: Some(datatype.clone()),
            count,
            packed,
        })
    }

    /// `len` contiguous bytes at `addr` (a contiguous predefined type: no
    /// datatype to keep, no convertor).
    ///
    /// ```
    /// let v = [7u8; 12];
    /// // SAFETY: `v` outlives `raw`.
    /// let raw = unsafe { oxmpi::RawBuffer::bytes(v.as_ptr(), v.len()) };
    /// assert_eq!(raw.packed_len(), 12);
    /// ```
    ///
    /// # Safety
    /// As for [`RawBuffer::new`]: the `len` bytes at `addr`.
    pub unsafe fn bytes(addr: *const u8, len: usize) -> RawBuffer {
        RawBuffer {
            // SAFETY: the caller promises these bytes outlive the operations.
            region: unsafe { MemRegion::new(addr, len) },
            origin: 0,
            datatype: None,
            count: len,
            packed: len,
        }
    }

    /// Bytes of the packed message.
    ///
    /// ```
    /// let v = [0u32; 5];
    /// // SAFETY: `v` outlives `raw`.
    /// let raw = unsafe { oxmpi::RawBuffer::new(v.as_ptr().cast(), 5, &oxmpi::UserDatatype::of::<u32>()) }.unwrap();
    /// assert_eq!(raw.packed_len(), 20);
    /// ```
    pub fn packed_len(&self) -> usize {
        self.packed
    }

    #[inline(always)]
    fn pml(&self) -> Result<PBuffer> {
        match &self.datatype {
            Some(t) if self.packed > 0 => {
                typed_buffer_at(self.region, self.origin, t.as_raw(), self.count)
            }
            Some(_) => Ok(PBuffer::Contig(MemRegion::EMPTY)),
            None => Ok(PBuffer::Contig(self.region)),
        }
    }

    /// `MPI_Isend` (in `mode`) of this buffer to `dest`.
    ///
    /// The request holds no buffer: a `RawBuffer` owns no memory (its
    /// creator keeps the memory valid until the operation completes) and the
    /// PML keeps its own view of the data. (So the request is 32 bytes, not
    /// 80: the C layer moves one on every request-table insert and take.)
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let data = vec![7u8; 64];
    /// // SAFETY: `data` outlives the request (waited for below).
    /// let raw = unsafe { oxmpi::RawBuffer::new(data.as_ptr(), 64, &oxmpi::UserDatatype::of::<u8>()) }.unwrap();
    /// let req = raw.send_to(&world.process_at_rank(1), 0, oxmpi::SendMode::Standard).unwrap();
    /// req.wait().unwrap();
    /// ```
    #[inline(always)]
    pub fn send_to<'u, L: Level>(
        self,
        dest: &Process<'_, 'u, L>,
        tag: i32,
        mode: SendMode,
    ) -> Result<OwnedRequest<'u, (), L>> {
        let id = dest.start_send(self.pml()?, tag, mode, false)?;
        Ok(OwnedRequest::new(dest.comm.rt(), id, ()))
    }

    /// `MPI_Irecv` into this buffer from `source` with `tag` (the request
    /// holds no buffer, as for [`RawBuffer::send_to`]).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut data = vec![0u8; 64];
    /// // SAFETY: `data` outlives the request and is not touched meanwhile.
    /// let raw = unsafe { oxmpi::RawBuffer::new(data.as_mut_ptr(), 64, &oxmpi::UserDatatype::of::<u8>()) }.unwrap();
    /// let (_, status) = raw.receive_from(&world.any_process(), oxmpi::AnyTag).unwrap().wait().unwrap();
    /// println!("{} bytes", status.bytes());
    /// ```
    #[inline(always)]
    pub fn receive_from<'u, L: Level, S: Source<'u, L>>(
        self,
        source: &S,
        tag: impl TagSpec,
    ) -> Result<OwnedRequest<'u, (), L>> {
        let (rt, id) = source.post_recv(self.pml()?, tag.to_match()?, false)?;
        Ok(OwnedRequest::new(rt, id, ()))
    }

    /// Blocking `MPI_Send` (in `mode`) of this buffer to `dest`; the error
    /// of a failed transfer is in the returned status (the C form).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let data = [3u32; 4];
    /// // SAFETY: `data` outlives the call.
    /// let raw = unsafe { oxmpi::RawBuffer::new(data.as_ptr().cast(), 4, &oxmpi::UserDatatype::of::<u32>()) }.unwrap();
    /// let st = raw.send_status(&world.process_at_rank(1), 0, oxmpi::SendMode::Standard).unwrap();
    /// assert!(st.error().is_none());
    /// ```
    #[inline(always)]
    pub fn send_status<L: Level>(
        &self,
        dest: &Process<'_, '_, L>,
        tag: i32,
        mode: SendMode,
    ) -> Result<Status> {
        Ok(crate::request::raw_status(dest.send_now(self, tag, mode)?))
    }

    /// Blocking `MPI_Recv` into this buffer from `source` with `tag`; the
    /// error of a failed transfer (`Truncate`) is in the returned status,
    /// which keeps its source, tag and count (the C form).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut data = [0u32; 4];
    /// // SAFETY: `data` outlives the call.
    /// let raw = unsafe { oxmpi::RawBuffer::new(data.as_mut_ptr().cast(), 4, &oxmpi::UserDatatype::of::<u32>()) }.unwrap();
    /// let st = raw.receive_status(&world.any_process(), oxmpi::AnyTag).unwrap();
    /// println!("{} bytes from {}", st.bytes(), st.source_rank());
    /// ```
    #[inline(always)]
    pub fn receive_status<'u, L: Level, S: Source<'u, L>>(
        &self,
        source: &S,
        tag: impl TagSpec,
    ) -> Result<Status> {
        let tag = tag.to_match()?;
        Ok(crate::request::raw_status(
            source.recv_now(self.pml()?, tag)?,
        ))
    }

    /// `MPI_Send_init` (in `mode`) of this buffer to `dest`.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let data = [1u64; 8];
    /// // SAFETY: `data` outlives the request.
    /// let raw = unsafe { oxmpi::RawBuffer::new(data.as_ptr().cast(), 8, &oxmpi::UserDatatype::of::<u64>()) }.unwrap();
    /// let mut p = raw.send_init_to(&world.process_at_rank(1), 3, oxmpi::SendMode::Standard).unwrap();
    /// p.start().unwrap();
    /// p.wait().unwrap();
    /// ```
    pub fn send_init_to<'u, L: Level>(
        self,
        dest: &Process<'_, 'u, L>,
        tag: i32,
        mode: SendMode,
    ) -> Result<OwnedPersistentRequest<'u, RawBuffer, L>> {
        let id = dest.start_send(self.pml()?, tag, mode, true)?;
        Ok(OwnedPersistentRequest::new(dest.comm.rt(), id, self))
    }

    /// `MPI_Recv_init` into this buffer from `source` with `tag`.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut data = [0u64; 8];
    /// // SAFETY: `data` outlives the request.
    /// let raw = unsafe { oxmpi::RawBuffer::new(data.as_mut_ptr().cast(), 8, &oxmpi::UserDatatype::of::<u64>()) }.unwrap();
    /// let mut p = raw.receive_init_from(&world.process_at_rank(0), 3).unwrap();
    /// p.start().unwrap();
    /// p.wait().unwrap();
    /// ```
    pub fn receive_init_from<'u, L: Level, S: Source<'u, L>>(
        self,
        source: &S,
        tag: impl TagSpec,
    ) -> Result<OwnedPersistentRequest<'u, RawBuffer, L>> {
        let (rt, id) = source.post_recv(self.pml()?, tag.to_match()?, true)?;
        Ok(OwnedPersistentRequest::new(rt, id, self))
    }

    /// `MPI_Imrecv`: receives the matched message `msg` into this buffer.
    /// `MPI_MESSAGE_NO_PROC` (a message from `PROC_NULL`) gives a request
    /// that completes at once with the `PROC_NULL` status.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (msg, status) = world.any_process().matched_probe().unwrap();
    /// let mut data = vec![0u8; status.bytes()];
    /// // SAFETY: `data` outlives the request.
    /// let raw = unsafe { oxmpi::RawBuffer::new(data.as_mut_ptr(), data.len(), &oxmpi::UserDatatype::of::<u8>()) }.unwrap();
    /// let req: oxmpi::request::OwnedRequest<_> = raw.receive_message(msg).unwrap();
    /// req.wait().unwrap();
    /// ```
    pub fn receive_message<'u, L: Level>(
        self,
        mut msg: Message<'u, L>,
    ) -> Result<OwnedRequest<'u, (), L>> {
        let rt = msg.rt;
        let pb = self.pml()?;
        let id = match msg.msg.take() {
            Some(m) => rt.pml.with(|o| o.imrecv(pb, m))?,
            None => rt.pml.with(|o| {
                o.irecv(
                    PBuffer::Contig(MemRegion::EMPTY),
                    oxmpi_match::Source::ProcNull,
                    oxmpi_match::Tag::Any,
                    crate::runtime::WORLD_CTX,
                )
            })?,
        };
        Ok(OwnedRequest::new(rt, id, ()))
    }
}

impl<L: Level> Universe<L> {
    /// `MPI_Buffer_attach` of memory the caller keeps (the C form of
    /// [`Universe::buffer_attach`]).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let mut space = vec![0u8; 1 << 16];
    /// // SAFETY: `space` stays alive and untouched until detached.
    /// unsafe { universe.buffer_attach_raw(space.as_mut_ptr(), space.len()) }.unwrap();
    /// let (ptr, len) = universe.buffer_detach_raw().unwrap();
    /// assert_eq!((ptr, len), (space.as_mut_ptr(), space.len()));
    /// ```
    ///
    /// # Safety
    /// `len` bytes at `addr` must stay valid, and untouched by the caller,
    /// until [`Universe::buffer_detach_raw`] returns them.
    pub unsafe fn buffer_attach_raw(&self, addr: *mut u8, len: usize) -> Result<()> {
        // SAFETY: the caller lends the memory until detach.
        let region = unsafe { MemRegion::new(addr.cast_const(), len) };
        self.rt.pml.with(|o| o.buffer_attach(region))?;
        Ok(())
    }

    /// `MPI_Buffer_detach` of memory attached by
    /// [`Universe::buffer_attach_raw`]: waits until every buffered message
    /// has left it, then gives back its address and length (see the
    /// example of [`Universe::buffer_attach_raw`]).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// assert!(universe.buffer_detach_raw().is_err()); // nothing attached
    /// ```
    pub fn buffer_detach_raw(&self) -> Result<(*mut u8, usize)> {
        if self
            .rt
            .bsend_buf
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
        {
            return Err(Error::new(
                ErrorClass::Buffer,
                "the attached buffer belongs to the Rust API: use buffer_detach",
            ));
        }
        let r = self.rt.pml.buffer_detach()?;
        Ok((r.addr() as *mut u8, r.len()))
    }

    /// `MPI_Buffer_flush`: waits until every buffered message has left the
    /// attached buffer (which stays attached).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// universe.buffer_attach(vec![0u8; 4096]).unwrap();
    /// universe.buffer_flush();
    /// ```
    pub fn buffer_flush(&self) {
        self.rt.pml.wait_until(|o| (!o.buffer_busy()).then_some(()));
    }

    /// `MPI_Comm_attach_buffer`, `MPI_Session_attach_buffer` (and
    /// `MPI_Buffer_attach` for [`BufferScope::Process`]): `len` bytes at
    /// `addr` become `scope`'s buffer. A buffered send uses its
    /// communicator's buffer ([`Communicator::buffer_scope`]), else its
    /// session's ([`Universe::bind_session`]), else the process's.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut space = vec![0u8; 1 << 16];
    /// // SAFETY: `space` stays alive and untouched until detached.
    /// unsafe { universe.buffer_attach_raw_in(world.buffer_scope(), space.as_mut_ptr(), space.len()) }
    ///     .unwrap();
    /// let got = universe.buffer_detach_raw_in(world.buffer_scope()).unwrap();
    /// assert_eq!(got, Some((space.as_mut_ptr(), space.len())));
    /// ```
    ///
    /// # Safety
    /// As for [`Universe::buffer_attach_raw`], until
    /// [`Universe::buffer_detach_raw_in`] returns the memory.
    ///
    /// [`Communicator::buffer_scope`]: crate::Communicator::buffer_scope
    pub unsafe fn buffer_attach_raw_in(
        &self,
        scope: BufferScope,
        addr: *mut u8,
        len: usize,
    ) -> Result<()> {
        // SAFETY: the caller lends the memory until detach.
        let region = unsafe { MemRegion::new(addr.cast_const(), len) };
        self.rt
            .pml
            .with(|o| o.buffer_attach_to(scope, Some(region)))?;
        Ok(())
    }

    /// `MPI_BUFFER_AUTOMATIC` attached to `scope`: the library allocates
    /// the copy of each buffered message itself, so a buffered send never
    /// fails for want of space.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// universe.buffer_attach_automatic(oxmpi::BufferScope::Process).unwrap();
    /// assert_eq!(universe.buffer_detach_raw_in(oxmpi::BufferScope::Process).unwrap(), None);
    /// ```
    pub fn buffer_attach_automatic(&self, scope: BufferScope) -> Result<()> {
        self.rt.pml.with(|o| o.buffer_attach_to(scope, None))?;
        Ok(())
    }

    /// Detaches `scope`'s buffer once every buffered message has left it:
    /// the memory attached ([`Universe::buffer_attach_raw_in`]), or `None`
    /// for an automatic buffer.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// assert!(universe.buffer_detach_raw_in(oxmpi::BufferScope::Session(1)).is_err());
    /// ```
    pub fn buffer_detach_raw_in(&self, scope: BufferScope) -> Result<Option<(*mut u8, usize)>> {
        if scope == BufferScope::Process
            && self
                .rt
                .bsend_buf
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some()
        {
            return Err(Error::new(
                ErrorClass::Buffer,
                "the attached buffer belongs to the Rust API: use buffer_detach",
            ));
        }
        let r = self.rt.pml.buffer_detach_from(scope)?;
        Ok(r.map(|r| (r.addr() as *mut u8, r.len())))
    }

    /// `MPI_Comm_flush_buffer`, `MPI_Session_flush_buffer`: waits until
    /// every buffered message has left `scope`'s buffer.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// universe.buffer_flush_in(universe.world().buffer_scope());
    /// ```
    pub fn buffer_flush_in(&self, scope: BufferScope) {
        self.rt.pml.buffer_flush_in(scope);
    }

    /// Whether buffered messages still occupy `scope`'s buffer (a
    /// non-blocking flush polls this).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// assert!(!universe.buffer_busy_in(oxmpi::BufferScope::Process));
    /// ```
    pub fn buffer_busy_in(&self, scope: BufferScope) -> bool {
        self.rt.pml.with(|o| o.buffer_busy_in(scope))
    }

    /// Marks `comm` as derived from session `session` (its buffered sends
    /// fall back on the session's buffer), or forgets that (`None`, before
    /// it is freed).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// universe.bind_session(&world, Some(7));
    /// universe.bind_session(&world, None);
    /// ```
    pub fn bind_session(&self, comm: &crate::Communicator<'_, L>, session: Option<u64>) {
        let ctx = comm.ctx;
        self.rt.pml.with(|o| o.bind_session(ctx, session));
    }

    /// The session `comm` was bound to ([`Universe::bind_session`]).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// assert_eq!(universe.session_of(&universe.world()), None);
    /// ```
    pub fn session_of(&self, comm: &crate::Communicator<'_, L>) -> Option<u64> {
        let ctx = comm.ctx;
        self.rt.pml.with(|o| o.session_of(ctx))
    }
}

// SAFETY: the region is what the creator promised valid and initialized.
unsafe impl Buffer for RawBuffer {
    fn pml_buffer(&self) -> Result<PBuffer> {
        self.pml()
    }
    fn count(&self) -> usize {
        self.count
    }
}

// SAFETY: the region is what the creator promised writable and unaliased.
unsafe impl BufferMut for RawBuffer {
    fn pml_buffer_mut(&mut self) -> Result<PBuffer> {
        self.pml()
    }
    fn count(&self) -> usize {
        self.count
    }
}
