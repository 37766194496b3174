//! The PML framework's choice (seed 001): the engine a [`crate::Pml`]
//! drives is either ob1 over BTLs or cm over an MTL, chosen once at start-up
//! (`pml` parameter). [`Engine`] forwards each call of the layer above to
//! the one in use: a match on a discriminant that never changes, so the
//! branch is always predicted, and ob1's calls inline as before. What only
//! ob1 has (BTLs, registration cache, immediate and small-message paths,
//! doorbells) answers as "nothing there" under cm, and the callers then
//! take their general paths.

use oxmpi_btl::btl::Btl;
use oxmpi_btl::mem::MemRegion;
use oxmpi_match::{Source, Tag};

use crate::bsend::BufferScope;
use crate::buffer::Buffer;
use crate::cm::Cm;
use crate::error::PmlError;
use crate::ob1::{Counters, Message, Ob1, ReqId, SendMode, Status};
use crate::rcache::RcacheStats;

/// The point-to-point engine in use.
// One per process: ob1 stays inline (boxing it would put a pointer load in
// front of every call of the small-message paths).
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Engine<B: ?Sized + Btl = dyn Btl + Send> {
    /// ob1: protocols over BTLs (seed 000).
    Ob1(Ob1<B>),
    /// cm: whole messages handed to an MTL that matches them (seed 004).
    Cm(Cm),
}

/// Forwards `$name` to whichever engine is in use.
macro_rules! forward {
    ($(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(&self $(, $arg: $ty)*) -> $ret {
            match self {
                Engine::Ob1(o) => o.$name($($arg),*),
                Engine::Cm(c) => c.$name($($arg),*),
            }
        }
    };
    ($(#[$doc:meta])* fn $name:ident(&mut self $(, $arg:ident: $ty:ty)*) -> $ret:ty) => {
        $(#[$doc])*
        #[inline(always)]
        pub fn $name(&mut self $(, $arg: $ty)*) -> $ret {
            match self {
                Engine::Ob1(o) => o.$name($($arg),*),
                Engine::Cm(c) => c.$name($($arg),*),
            }
        }
    };
}

impl<B: ?Sized + Btl> Engine<B> {
    /// The engine's name (`ob1`, `cm`).
    pub fn name(&self) -> &'static str {
        match self {
            Engine::Ob1(_) => "ob1",
            Engine::Cm(_) => "cm",
        }
    }

    /// ob1, if it is the engine in use.
    pub fn ob1(&self) -> Option<&Ob1<B>> {
        match self {
            Engine::Ob1(o) => Some(o),
            Engine::Cm(_) => None,
        }
    }

    /// ob1, if it is the engine in use, writable.
    pub fn ob1_mut(&mut self) -> Option<&mut Ob1<B>> {
        match self {
            Engine::Ob1(o) => Some(o),
            Engine::Cm(_) => None,
        }
    }

    /// cm, if it is the engine in use.
    pub fn cm(&self) -> Option<&Cm> {
        match self {
            Engine::Cm(c) => Some(c),
            Engine::Ob1(_) => None,
        }
    }

    forward!(
        /// This process's world rank.
        fn rank(&self) -> u32);
    forward!(
        /// The number of world ranks.
        fn size(&self) -> u32);
    forward!(
        /// Protocol counters.
        fn counters(&self) -> Counters);
    forward!(
        /// Registers an intracommunicator (context, members' world ranks,
        /// this process's rank in it).
        fn add_comm(&mut self, ctx: u16, world: Vec<u32>, me: u32) -> Result<(), PmlError>);
    forward!(
        /// Registers an intercommunicator (context, the remote group's world
        /// ranks, this process's local rank).
        fn add_intercomm(&mut self, ctx: u16, remote: Vec<u32>, me: u32) -> Result<(), PmlError>);
    forward!(
        /// Forgets a context.
        fn remove_comm(&mut self, ctx: u16) -> Result<(), PmlError>);
    forward!(
        /// One progress pass; the number of events handled.
        fn progress(&mut self) -> usize);
    forward!(
        /// Whether a request has completed.
        fn is_complete(&self, id: ReqId) -> Result<bool, PmlError>);
    forward!(
        /// `MPI_Test` without progress.
        fn test(&mut self, id: ReqId) -> Result<Option<Status>, PmlError>);
    forward!(
        /// `MPI_Request_free`.
        fn request_free(&mut self, id: ReqId) -> Result<(), PmlError>);
    forward!(
        /// Whether an active request uses a context.
        fn comm_busy(&self, ctx: u16) -> bool);
    forward!(
        /// Requests started and not yet complete.
        fn active_requests(&self) -> usize);
    forward!(
        /// The active requests `MPI_Finalize` still waits for.
        fn finalize_waits_for(&self) -> usize);
    forward!(
        /// Whether any world rank has been reported lost.
        fn any_dead_peer(&self) -> bool);
    forward!(
        /// A world rank is dead by word of the launcher.
        fn peer_reported_dead(&mut self, peer: u32) -> ());
    forward!(
        /// Whether a world rank is known to be dead.
        fn is_peer_dead(&self, peer: u32) -> bool);
    forward!(
        /// Whether outgoing work is still queued (finalize drains it).
        fn has_work(&self) -> bool);
    forward!(
        /// Closes the transports (end of finalize).
        fn close(&mut self) -> ());
    forward!(
        /// `MPI_Isend` and its modes.
        fn isend(&mut self, buf: Buffer, dst: u32, tag: i32, ctx: u16, mode: SendMode)
            -> Result<ReqId, PmlError>);
    forward!(
        /// `MPI_Send_init` and its modes.
        fn send_init(&mut self, buf: Buffer, dst: u32, tag: i32, ctx: u16, mode: SendMode)
            -> Result<ReqId, PmlError>);
    forward!(
        /// `MPI_Irecv`.
        fn irecv(&mut self, buf: Buffer, src: Source, tag: Tag, ctx: u16)
            -> Result<ReqId, PmlError>);
    forward!(
        /// `MPI_Recv_init`.
        fn recv_init(&mut self, buf: Buffer, src: Source, tag: Tag, ctx: u16)
            -> Result<ReqId, PmlError>);
    forward!(
        /// `MPI_Start`.
        fn start(&mut self, id: ReqId) -> Result<(), PmlError>);
    forward!(
        /// `MPI_Cancel`.
        fn cancel(&mut self, id: ReqId) -> Result<(), PmlError>);
    forward!(
        /// `MPI_Iprobe`.
        fn iprobe(&mut self, src: Source, tag: Tag, ctx: u16) -> Result<Option<Status>, PmlError>);
    forward!(
        /// `MPI_Improbe` (`Ok(Some(None))`: `MPI_MESSAGE_NO_PROC`).
        fn improbe(&mut self, src: Source, tag: Tag, ctx: u16)
            -> Result<Option<Option<Message>>, PmlError>);
    forward!(
        /// `MPI_Imrecv`.
        fn imrecv(&mut self, buf: Buffer, msg: Message) -> Result<ReqId, PmlError>);
    forward!(
        /// Attaches a buffer for buffered sends.
        fn buffer_attach_to(&mut self, scope: BufferScope, region: Option<MemRegion>)
            -> Result<(), PmlError>);
    forward!(
        /// Whether buffered sends still occupy a buffer.
        fn buffer_busy_in(&self, scope: BufferScope) -> bool);
    forward!(
        /// Detaches a buffer once it is not busy.
        fn buffer_detach_from(&mut self, scope: BufferScope)
            -> Result<Option<MemRegion>, PmlError>);
    forward!(
        /// `MPI_Buffer_detach` of the process's buffer.
        fn buffer_detach(&mut self) -> Result<MemRegion, PmlError>);
    forward!(
        /// Binds a context to a session (or unbinds it).
        fn bind_session(&mut self, ctx: u16, session: Option<u64>) -> ());
    forward!(
        /// The session a context was bound to.
        fn session_of(&self, ctx: u16) -> Option<u64>);

    /// The reason world rank `peer` is lost, if it is.
    pub fn dead_peer(&self, peer: u32) -> Option<&str> {
        match self {
            Engine::Ob1(o) => o.dead_peer(peer),
            Engine::Cm(c) => c.dead_peer(peer),
        }
    }

    /// `MPI_Buffer_attach`.
    pub fn buffer_attach(&mut self, region: MemRegion) -> Result<(), PmlError> {
        self.buffer_attach_to(BufferScope::Process, Some(region))
    }

    /// Whether buffered sends still occupy the process's buffer.
    pub fn buffer_busy(&self) -> bool {
        self.buffer_busy_in(BufferScope::Process)
    }

    /// [`Ob1::irecv_polling`]; cm posts the receive at once.
    #[inline(always)]
    pub fn irecv_polling(
        &mut self,
        buf: Buffer,
        src: Source,
        tag: Tag,
        ctx: u16,
        polls: u32,
    ) -> Result<ReqId, PmlError> {
        match self {
            Engine::Ob1(o) => o.irecv_polling(buf, src, tag, ctx, polls),
            Engine::Cm(c) => c.irecv(buf, src, tag, ctx),
        }
    }

    /// A progress pass that polls everything ([`Ob1::progress_all`]).
    pub fn progress_all(&mut self) -> usize {
        match self {
            Engine::Ob1(o) => o.progress_all(),
            Engine::Cm(c) => c.progress(),
        }
    }

    /// What an idle wait sleeps on: the BTLs' doorbell
    /// ([`Ob1::doorbell`]) or the MTL's ([`Cm::doorbell`]); `None`: waits
    /// sleep by the clock.
    pub fn doorbell(&self) -> Option<std::sync::Arc<dyn oxmpi_btl::btl::Doorbell>> {
        match self {
            Engine::Ob1(o) => o.doorbell(),
            Engine::Cm(c) => c.doorbell(),
        }
    }

    /// [`Ob1::sendi_limit`]; 0 under cm (no immediate send).
    pub fn sendi_limit(&self) -> usize {
        self.ob1().map_or(0, Ob1::sendi_limit)
    }

    /// [`Ob1::peer_btls`]; under cm, the MTL (which reaches every peer)
    /// and no RDMA.
    pub fn peer_btls(&self, peer: u32) -> Option<(Vec<&'static str>, Vec<&'static str>)> {
        match self {
            Engine::Ob1(o) => o.peer_btls(peer),
            Engine::Cm(c) => (peer < c.size()).then(|| (vec![c.mtl_name()], Vec::new())),
        }
    }

    /// [`Ob1::btl_names`]; the MTL's name under cm.
    pub fn btl_names(&self) -> Vec<&'static str> {
        match self {
            Engine::Ob1(o) => o.btl_names(),
            Engine::Cm(c) => vec![c.mtl_name()],
        }
    }

    /// [`Ob1::rcache_stats`]; empty under cm.
    pub fn rcache_stats(&self) -> RcacheStats {
        self.ob1().map(Ob1::rcache_stats).unwrap_or_default()
    }

    /// [`Ob1::rcache_on`]; false under cm.
    pub fn rcache_on(&mut self) -> bool {
        self.ob1_mut().is_some_and(Ob1::rcache_on)
    }

    /// [`Ob1::split_share`]; `None` under cm.
    pub fn split_share(&self, peer: u32) -> Option<u16> {
        self.ob1()?.split_share(peer)
    }

    /// The largest tag the engine carries: `None` for no limit of its own
    /// (ob1), the MTL's layout's under cm.
    pub fn max_tag(&self) -> Option<i32> {
        self.cm().map(Cm::max_tag)
    }
}
