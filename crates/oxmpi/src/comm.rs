//! Communicators, groups, and point-to-point operations on them.
//!
//! A [`Communicator`] borrows its [`Universe`], so it cannot outlive MPI.
//! Each communicator has its own matching context (and a second one for its
//! internal collectives). Point-to-point goes through a [`Process`] (one
//! rank: sends and receives) or [`AnyProcess`] (`MPI_ANY_SOURCE`: receives
//! and probes), as in rsmpi; tags are `i32` values `0..=TAG_UB` or
//! [`AnyTag`].

use std::sync::Arc;

use oxmpi_btl::mem::MemRegion;
use oxmpi_match::{Source as MSource, Tag as MTag};
use oxmpi_pml::{Buffer as PBuffer, ReqId, SendMode};

use crate::buffer::{Buffer, BufferMut};
use crate::collective;
use crate::datatype::Equivalence;
use crate::error::{Error, ErrorClass, Result};
use crate::request::{status_result, OwnedRequest, PersistentRequest, Request, Scope};
use crate::runtime::Runtime;
use crate::status::Status;
use crate::universe::Threading::Level;
use crate::universe::{Threading, Universe};

/// `MPI_TAG_UB`: the largest tag a program may use.
pub const TAG_UB: i32 = i32::MAX;

/// `MPI_ANY_TAG`, as a type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AnyTag;

/// What a receive or probe accepts as its tag: an `i32` (`0..=TAG_UB`) or
/// [`AnyTag`].
pub trait TagSpec: Copy {
    /// The matching engine's form, checked.
    fn to_match(self) -> Result<MTag>;
}

impl TagSpec for i32 {
    fn to_match(self) -> Result<MTag> {
        check_tag(self)?;
        Ok(MTag::Value(self))
    }
}

impl TagSpec for AnyTag {
    fn to_match(self) -> Result<MTag> {
        Ok(MTag::Any)
    }
}

pub(crate) fn check_tag(tag: i32) -> Result<()> {
    if tag < 0 {
        return Err(Error::new(
            ErrorClass::Tag,
            format!("tag {tag} is negative (tags are 0..={TAG_UB})"),
        ));
    }
    Ok(())
}

/// How a communicator compares with another (`MPI_Comm_compare`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    /// The same communicator (`MPI_IDENT`).
    Identical,
    /// Same ranks in the same order, another context (`MPI_CONGRUENT`).
    Congruent,
    /// Same ranks, another order (`MPI_SIMILAR`).
    Similar,
    /// Anything else (`MPI_UNEQUAL`).
    Unequal,
}

/// A group of processes (`MPI_Group`): world ranks in group-rank order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    ranks: Arc<[u32]>,
    me: Option<u32>,
}

impl Group {
    fn new(ranks: Arc<[u32]>, world_rank: u32) -> Group {
        let me = ranks
            .iter()
            .position(|&r| r == world_rank)
            .map(|i| i as u32);
        Group { ranks, me }
    }

    /// Number of processes.
    pub fn size(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// This process's rank in the group, if it belongs to it.
    pub fn rank(&self) -> Option<u32> {
        self.me
    }

    /// `MPI_Group_incl`: the processes at `ranks`, in that order.
    pub fn include(&self, ranks: &[u32]) -> Result<Group> {
        let mut out = Vec::with_capacity(ranks.len());
        for &r in ranks {
            let w = *self.ranks.get(r as usize).ok_or_else(|| {
                Error::new(
                    ErrorClass::Rank,
                    format!("rank {r} of a group of {}", self.size()),
                )
            })?;
            if out.contains(&w) {
                return Err(Error::new(
                    ErrorClass::Rank,
                    format!("rank {r} given twice"),
                ));
            }
            out.push(w);
        }
        let me = self.me.map(|m| self.ranks[m as usize]);
        Ok(Group::new(out.into(), me.unwrap_or(u32::MAX)))
    }

    /// `MPI_Group_excl`: every process but those at `ranks`, in order.
    pub fn exclude(&self, ranks: &[u32]) -> Result<Group> {
        for &r in ranks {
            if r >= self.size() {
                return Err(Error::new(
                    ErrorClass::Rank,
                    format!("rank {r} of a group of {}", self.size()),
                ));
            }
        }
        let keep: Vec<u32> = (0..self.size()).filter(|r| !ranks.contains(r)).collect();
        self.include(&keep)
    }

    /// `MPI_Group_translate_ranks`: the rank in `other` of each of `ranks`
    /// (`None`: `MPI_UNDEFINED`).
    pub fn translate_ranks(&self, ranks: &[u32], other: &Group) -> Result<Vec<Option<u32>>> {
        ranks
            .iter()
            .map(|&r| {
                let w = self.ranks.get(r as usize).ok_or_else(|| {
                    Error::new(
                        ErrorClass::Rank,
                        format!("rank {r} of a group of {}", self.size()),
                    )
                })?;
                Ok(other.ranks.iter().position(|x| x == w).map(|i| i as u32))
            })
            .collect()
    }

    /// World ranks of the members, in group order.
    pub fn world_ranks(&self) -> &[u32] {
        &self.ranks
    }
}

/// A communicator (`MPI_Comm`): a group of processes and a matching
/// context. Freed (`MPI_Comm_free`) when dropped, unless predefined.
pub struct Communicator<'u, L: Level = Threading::Single> {
    u: &'u Universe<L>,
    pub(crate) ctx: u16,
    ranks: Arc<[u32]>,
    rank: u32,
    owned: bool,
}

impl<L: Level> std::fmt::Debug for Communicator<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("ctx", &self.ctx)
            .field("rank", &self.rank)
            .field("size", &self.ranks.len())
            .finish()
    }
}

impl<L: Level> Drop for Communicator<'_, L> {
    fn drop(&mut self) {
        if self.owned && !self.u.rt.is_finalized() {
            self.u.rt.pml.with(|o| {
                let _ = o.remove_comm(self.ctx);
                let _ = o.remove_comm(self.ctx + 1);
            });
        }
    }
}

impl<'u, L: Level> Communicator<'u, L> {
    pub(crate) fn predefined(u: &'u Universe<L>, ctx: u16, ranks: Vec<u32>, rank: u32) -> Self {
        Communicator {
            u,
            ctx,
            ranks: ranks.into(),
            rank,
            owned: false,
        }
    }

    pub(crate) fn rt(&self) -> &'u Runtime {
        &self.u.rt
    }

    /// This process's rank (`MPI_Comm_rank`).
    pub fn rank(&self) -> i32 {
        self.rank as i32
    }

    /// Number of processes (`MPI_Comm_size`).
    pub fn size(&self) -> i32 {
        self.ranks.len() as i32
    }

    /// The universe this communicator belongs to.
    pub fn universe(&self) -> &'u Universe<L> {
        self.u
    }

    /// The process at `rank`, for sends and receives; `rank` is checked
    /// when an operation uses it (an invalid one is `MPI_ERR_RANK`).
    pub fn process_at_rank(&self, rank: i32) -> Process<'_, 'u, L> {
        Process { comm: self, rank }
    }

    /// `MPI_ANY_SOURCE`: receives and probes from any process.
    pub fn any_process(&self) -> AnyProcess<'_, 'u, L> {
        AnyProcess { comm: self }
    }

    /// `MPI_PROC_NULL`: operations complete at once and move no data.
    pub fn null_process(&self) -> Process<'_, 'u, L> {
        Process {
            comm: self,
            rank: PROC_NULL,
        }
    }

    /// `MPI_Comm_group`.
    pub fn group(&self) -> Group {
        Group::new(self.ranks.clone(), self.rt().rank)
    }

    /// `MPI_Barrier`.
    pub fn barrier(&self) -> Result<()> {
        collective::barrier_ctx(self.rt(), self.ctx + 1, self.ranks.len() as u32, self.rank)
    }

    /// `MPI_Comm_compare`.
    pub fn compare(&self, other: &Communicator<'_, L>) -> Comparison {
        if self.ctx == other.ctx && std::ptr::eq(&*self.u.rt, &*other.u.rt) {
            Comparison::Identical
        } else if self.ranks == other.ranks {
            Comparison::Congruent
        } else {
            let mut a = self.ranks.to_vec();
            let mut b = other.ranks.to_vec();
            a.sort_unstable();
            b.sort_unstable();
            if a == b {
                Comparison::Similar
            } else {
                Comparison::Unequal
            }
        }
    }

    /// Agrees with the other members on a fresh pair of context ids:
    /// collective over this communicator; `extra` travels with the
    /// proposal (split's color and key). Returns the context and everyone's
    /// `extra`.
    fn agree_ctx(&self, extra: [i32; 2]) -> Result<(u16, Vec<[i32; 2]>)> {
        let rt = self.rt();
        let mine = *rt.next_ctx.lock().unwrap_or_else(|p| p.into_inner());
        let mut msg = [0u8; 10];
        msg[..2].copy_from_slice(&mine.to_le_bytes());
        msg[2..6].copy_from_slice(&extra[0].to_le_bytes());
        msg[6..10].copy_from_slice(&extra[1].to_le_bytes());
        let all =
            collective::allgather_ctx(rt, self.ctx + 1, self.ranks.len() as u32, self.rank, &msg)?;
        let mut ctx = 0u16;
        let mut extras = Vec::with_capacity(self.ranks.len());
        for c in all.chunks_exact(10) {
            ctx = ctx.max(u16::from_le_bytes([c[0], c[1]]));
            extras.push([
                i32::from_le_bytes([c[2], c[3], c[4], c[5]]),
                i32::from_le_bytes([c[6], c[7], c[8], c[9]]),
            ]);
        }
        if ctx >= u16::MAX - 2 {
            return Err(Error::new(
                ErrorClass::Comm,
                "out of communicator context ids",
            ));
        }
        let mut next = rt.next_ctx.lock().unwrap_or_else(|p| p.into_inner());
        *next = (*next).max(ctx + 2);
        Ok((ctx, extras))
    }

    fn create(&self, ctx: u16, ranks: Vec<u32>) -> Result<Communicator<'u, L>> {
        let me = self.rt().rank;
        let rank = ranks
            .iter()
            .position(|&r| r == me)
            .expect("a member creates only communicators it belongs to") as u32;
        self.rt().pml.with(|o| -> Result<()> {
            o.add_comm(ctx, ranks.clone(), rank)?;
            o.add_comm(ctx + 1, ranks.clone(), rank)?;
            Ok(())
        })?;
        Ok(Communicator {
            u: self.u,
            ctx,
            ranks: ranks.into(),
            rank,
            owned: true,
        })
    }

    /// `MPI_Comm_dup`: the same group with a new context. Collective.
    pub fn dup(&self) -> Result<Communicator<'u, L>> {
        let (ctx, _) = self.agree_ctx([0, 0])?;
        self.create(ctx, self.ranks.to_vec())
    }

    /// `MPI_Comm_split`: processes with the same `color` form a new
    /// communicator, ordered by `key` then by rank here; `None` as color
    /// (`MPI_UNDEFINED`) gives `None`. Collective.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator<'u, L>>> {
        let c = match color {
            Some(c) => i32::try_from(c)
                .map_err(|_| Error::new(ErrorClass::Arg, format!("color {c} is too large")))?,
            None => -1,
        };
        let (ctx, extras) = self.agree_ctx([c, key])?;
        if color.is_none() {
            return Ok(None);
        }
        let mut members: Vec<(i32, usize)> = extras
            .iter()
            .enumerate()
            .filter(|(_, e)| e[0] == c)
            .map(|(i, e)| (e[1], i))
            .collect();
        members.sort();
        let ranks = members.iter().map(|&(_, i)| self.ranks[i]).collect();
        self.create(ctx, ranks).map(Some)
    }

    /// `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`: the processes of this
    /// communicator that share this node. Collective.
    pub fn split_shared(&self, key: i32) -> Result<Communicator<'u, L>> {
        let local = self.u.local_ranks();
        // The node's color: its lowest world rank.
        let color = local.iter().copied().min().unwrap_or(self.rt().rank);
        Ok(self.split(Some(color), key)?.expect("a color was given"))
    }

    /// `MPI_Comm_create`: a communicator of `group`'s members (a subset of
    /// this one's); `None` on processes outside it. Collective.
    pub fn create_from_group(&self, group: &Group) -> Result<Option<Communicator<'u, L>>> {
        for w in group.world_ranks() {
            if !self.ranks.contains(w) {
                return Err(Error::new(
                    ErrorClass::Group,
                    format!("world rank {w} of the group is not in this communicator"),
                ));
            }
        }
        let (ctx, _) = self.agree_ctx([0, 0])?;
        if group.rank().is_none() {
            return Ok(None);
        }
        self.create(ctx, group.world_ranks().to_vec()).map(Some)
    }
}

/// The `rank` given for `MPI_PROC_NULL`.
pub const PROC_NULL: i32 = -3;

pub(crate) fn source_of(rank: i32, size: i32) -> Result<MSource> {
    if rank == PROC_NULL {
        return Ok(MSource::ProcNull);
    }
    if rank < 0 || rank >= size {
        return Err(Error::new(
            ErrorClass::Rank,
            format!("rank {rank} of a communicator of {size}"),
        ));
    }
    Ok(MSource::Rank(rank as u32))
}

/// One process of a communicator: the destination of sends, the source of
/// receives.
pub struct Process<'c, 'u, L: Level = Threading::Single> {
    pub(crate) comm: &'c Communicator<'u, L>,
    pub(crate) rank: i32,
}

impl<L: Level> std::fmt::Debug for Process<'_, '_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process").field("rank", &self.rank).finish()
    }
}

/// Every process of a communicator, as the source of receives and probes
/// (`MPI_ANY_SOURCE`).
pub struct AnyProcess<'c, 'u, L: Level = Threading::Single> {
    comm: &'c Communicator<'u, L>,
}

impl<L: Level> std::fmt::Debug for AnyProcess<'_, '_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnyProcess").finish()
    }
}

/// A message taken out of matching by a matched probe (`MPI_Message`);
/// receive it with [`Message::matched_receive_into`] or
/// [`Message::matched_receive_vec`].
#[must_use = "a matched message must be received"]
pub struct Message<'u> {
    rt: &'u Runtime,
    msg: Option<oxmpi_pml::Message>,
}

impl std::fmt::Debug for Message<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message").field("msg", &self.msg).finish()
    }
}

impl Message<'_> {
    /// `MPI_Mrecv` into `buf`.
    pub fn matched_receive_into<B: BufferMut + ?Sized>(mut self, buf: &mut B) -> Result<Status> {
        let pb = buf.pml_buffer_mut()?;
        match self.msg.take() {
            None => Ok(message_status(None)),
            Some(m) => {
                let id = self.rt.pml.with(|o| o.imrecv(pb, m))?;
                status_result(self.rt.pml.wait(id))
            }
        }
    }

    /// `MPI_Mrecv` into a new vector of the message's length.
    pub fn matched_receive_vec<T: Equivalence + Default>(self) -> Result<(Vec<T>, Status)> {
        let len = self.msg.as_ref().map_or(0, |m| m.len());
        let sz = crate::datatype::packed_size_of::<T>().max(1);
        if len % sz != 0 {
            return Err(Error::new(
                ErrorClass::Truncate,
                format!("a message of {len} bytes is not a whole number of {sz}-byte elements"),
            ));
        }
        let mut v = vec![T::default(); len / sz];
        let st = self.matched_receive_into(&mut v[..])?;
        Ok((v, st))
    }
}

impl Drop for Message<'_> {
    fn drop(&mut self) {
        if let Some(m) = self.msg.take() {
            // Not received: receive it into nothing (truncating) so the
            // engine's state stays consistent.
            if let Ok(id) = self
                .rt
                .pml
                .with(|o| o.imrecv(PBuffer::Contig(MemRegion::EMPTY), m))
            {
                let _ = self.rt.pml.wait(id);
            }
        }
    }
}

pub(crate) mod sealed {
    use super::*;

    /// What [`Source`] needs of its implementors (sealed: only this
    /// crate's types are sources).
    pub trait Endpoint<'u> {
        /// The runtime and the communicator's context.
        fn rt_ctx(&self) -> (&'u Runtime, u16);
        /// The matching engine's source, checked.
        fn match_source(&self) -> Result<MSource>;
    }
}

/// Receives and probes; implemented by [`Process`] and [`AnyProcess`].
pub trait Source<'u, L: Level = Threading::Single>: sealed::Endpoint<'u> {
    /// `MPI_Recv` into `buf` with any tag.
    fn receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<Status> {
        self.receive_into_with_tag(buf, AnyTag)
    }

    /// `MPI_Recv` into `buf` with `tag`.
    fn receive_into_with_tag<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        tag: impl TagSpec,
    ) -> Result<Status> {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        status_result(rt.pml.recv(buf.pml_buffer_mut()?, src, tag, ctx))
    }

    /// `MPI_Recv` of one value.
    fn receive<T: Equivalence + Default>(&self) -> Result<(T, Status)> {
        let mut v = T::default();
        let st = self.receive_into(&mut v)?;
        Ok((v, st))
    }

    /// Probes, then receives the whole message into a new vector.
    fn receive_vec<T: Equivalence + Default>(&self) -> Result<(Vec<T>, Status)> {
        self.receive_vec_with_tag(AnyTag)
    }

    /// [`Source::receive_vec`] with `tag`.
    fn receive_vec_with_tag<T: Equivalence + Default>(
        &self,
        tag: impl TagSpec,
    ) -> Result<(Vec<T>, Status)> {
        let (m, _) = self.matched_probe_with_tag(tag)?;
        m.matched_receive_vec()
    }

    /// `MPI_Probe` with any tag.
    fn probe(&self) -> Result<Status> {
        self.probe_with_tag(AnyTag)
    }

    /// `MPI_Probe` with `tag`.
    fn probe_with_tag(&self, tag: impl TagSpec) -> Result<Status> {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        Ok(Status::from_pml(rt.pml.probe(src, tag, ctx)?))
    }

    /// `MPI_Iprobe` with `tag`.
    fn immediate_probe_with_tag(&self, tag: impl TagSpec) -> Result<Option<Status>> {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        Ok(rt
            .pml
            .with(|o| o.iprobe(src, tag, ctx))?
            .map(Status::from_pml))
    }

    /// `MPI_Iprobe` with any tag.
    fn immediate_probe(&self) -> Result<Option<Status>> {
        self.immediate_probe_with_tag(AnyTag)
    }

    /// `MPI_Mprobe` with any tag.
    fn matched_probe(&self) -> Result<(Message<'u>, Status)> {
        self.matched_probe_with_tag(AnyTag)
    }

    /// `MPI_Mprobe` with `tag`.
    fn matched_probe_with_tag(&self, tag: impl TagSpec) -> Result<(Message<'u>, Status)> {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        let m = rt.pml.mprobe(src, tag, ctx)?;
        let st = message_status(m.as_ref());
        Ok((Message { rt, msg: m }, st))
    }

    /// `MPI_Improbe` with `tag`.
    fn immediate_matched_probe_with_tag(
        &self,
        tag: impl TagSpec,
    ) -> Result<Option<(Message<'u>, Status)>> {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        Ok(rt.pml.with(|o| o.improbe(src, tag, ctx))?.map(|m| {
            let st = message_status(m.as_ref());
            (Message { rt, msg: m }, st)
        }))
    }

    /// `MPI_Irecv` into `buf` with any tag, in `scope`.
    fn immediate_receive_into<'a, 's, B: BufferMut + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a mut B,
    ) -> Result<Request<'a, 's>>
    where
        'u: 'a,
    {
        self.immediate_receive_into_with_tag(scope, buf, AnyTag)
    }

    /// `MPI_Irecv` into `buf` with `tag`, in `scope`.
    fn immediate_receive_into_with_tag<'a, 's, B: BufferMut + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a mut B,
        tag: impl TagSpec,
    ) -> Result<Request<'a, 's>>
    where
        'u: 'a,
    {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        let pb = buf.pml_buffer_mut()?;
        let id = rt.pml.with(|o| o.irecv(pb, src, tag, ctx))?;
        Ok(scope.register(rt, id))
    }

    /// `MPI_Recv_init`: a persistent receive into `buf` with `tag`, in
    /// `scope` (see [`PersistentRequest`]).
    fn receive_init<'a, 's, B: BufferMut + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a mut B,
        tag: impl TagSpec,
    ) -> Result<PersistentRequest<'a, 's>>
    where
        'u: 'a,
    {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        let pb = buf.pml_buffer_mut()?;
        let id = rt.pml.with(|o| o.recv_init(pb, src, tag, ctx))?;
        Ok(scope.register_persistent(rt, id))
    }

    /// `MPI_Recv_init` into an owned vector (see
    /// [`OwnedPersistentRequest`](crate::request::OwnedPersistentRequest)).
    fn receive_init_owned<T: Equivalence>(
        &self,
        mut buf: Vec<T>,
        tag: impl TagSpec,
    ) -> Result<crate::request::OwnedPersistentRequest<'u, Vec<T>, L>> {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        let pb = buf.pml_buffer_mut()?;
        let id = rt.pml.with(|o| o.recv_init(pb, src, tag, ctx))?;
        Ok(crate::request::OwnedPersistentRequest::new(rt, id, buf))
    }

    /// `MPI_Irecv` into an owned vector, given back by `wait`.
    fn immediate_receive_owned<T: Equivalence>(
        &self,
        mut buf: Vec<T>,
        tag: impl TagSpec,
    ) -> Result<OwnedRequest<'u, Vec<T>, L>> {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        let pb = buf.pml_buffer_mut()?;
        let id = rt.pml.with(|o| o.irecv(pb, src, tag, ctx))?;
        Ok(OwnedRequest::new(rt, id, buf))
    }
}

fn message_status(m: Option<&oxmpi_pml::Message>) -> Status {
    Status::from_pml(match m {
        Some(m) => oxmpi_pml::Status {
            source: m.source() as i32,
            tag: m.tag(),
            bytes: m.len(),
            error: None,
            cancelled: false,
        },
        None => oxmpi_pml::Status::proc_null(),
    })
}

impl<'u, L: Level> Source<'u, L> for Process<'_, 'u, L> {}

impl<'u, L: Level> sealed::Endpoint<'u> for Process<'_, 'u, L> {
    fn rt_ctx(&self) -> (&'u Runtime, u16) {
        (self.comm.rt(), self.comm.ctx)
    }
    fn match_source(&self) -> Result<MSource> {
        source_of(self.rank, self.comm.size())
    }
}

impl<'u, L: Level> Source<'u, L> for AnyProcess<'_, 'u, L> {}

impl<'u, L: Level> sealed::Endpoint<'u> for AnyProcess<'_, 'u, L> {
    fn rt_ctx(&self) -> (&'u Runtime, u16) {
        (self.comm.rt(), self.comm.ctx)
    }
    fn match_source(&self) -> Result<MSource> {
        Ok(MSource::Any)
    }
}

impl<'c, 'u, L: Level> Process<'c, 'u, L> {
    /// The process's rank in its communicator.
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// Checked destination; `None` for `PROC_NULL`.
    pub(crate) fn dest(&self) -> Result<Option<u32>> {
        match source_of(self.rank, self.comm.size())? {
            MSource::Rank(r) => Ok(Some(r)),
            _ => Ok(None),
        }
    }

    fn send_mode<B: Buffer + ?Sized>(&self, buf: &B, tag: i32, mode: SendMode) -> Result<()> {
        check_tag(tag)?;
        let Some(dst) = self.dest()? else {
            return Ok(());
        };
        let rt = self.comm.rt();
        status_result(
            rt.pml
                .send(buf.pml_buffer()?, dst, tag, self.comm.ctx, mode),
        )
        .map(|_| ())
    }

    /// `MPI_Send` with tag 0.
    pub fn send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.send_mode(buf, 0, SendMode::Standard)
    }

    /// `MPI_Send`.
    pub fn send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: i32) -> Result<()> {
        self.send_mode(buf, tag, SendMode::Standard)
    }

    /// `MPI_Ssend`: returns once the receive has matched.
    pub fn synchronous_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: i32) -> Result<()> {
        self.send_mode(buf, tag, SendMode::Synchronous)
    }

    /// `MPI_Bsend`: copied into the attached buffer (see
    /// [`Universe::buffer_attach`]); returns at once.
    pub fn buffered_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: i32) -> Result<()> {
        self.send_mode(buf, tag, SendMode::Buffered)
    }

    /// `MPI_Rsend`: the matching receive must already be posted.
    pub fn ready_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: i32) -> Result<()> {
        self.send_mode(buf, tag, SendMode::Ready)
    }

    /// Starts a send of `region` (`MPI_Isend` in `mode`); to `PROC_NULL` it
    /// is a request that completes at once with an empty status.
    pub(crate) fn start_isend(&self, buf: PBuffer, tag: i32, mode: SendMode) -> Result<ReqId> {
        check_tag(tag)?;
        let dst = self.dest()?;
        let ctx = self.comm.ctx;
        Ok(self.comm.rt().pml.with(|o| match dst {
            Some(d) => o.isend(buf, d, tag, ctx, mode),
            None => o.irecv(
                PBuffer::Contig(MemRegion::EMPTY),
                MSource::ProcNull,
                MTag::Any,
                ctx,
            ),
        })?)
    }

    fn immediate_mode<'a, 's, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a B,
        tag: i32,
        mode: SendMode,
    ) -> Result<Request<'a, 's>>
    where
        'u: 'a,
    {
        let id = self.start_isend(buf.pml_buffer()?, tag, mode)?;
        Ok(scope.register(self.comm.rt(), id))
    }

    /// `MPI_Isend` with tag 0, in `scope`.
    pub fn immediate_send<'a, 's, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a B,
    ) -> Result<Request<'a, 's>>
    where
        'u: 'a,
    {
        self.immediate_mode(scope, buf, 0, SendMode::Standard)
    }

    /// `MPI_Isend`, in `scope`.
    pub fn immediate_send_with_tag<'a, 's, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a B,
        tag: i32,
    ) -> Result<Request<'a, 's>>
    where
        'u: 'a,
    {
        self.immediate_mode(scope, buf, tag, SendMode::Standard)
    }

    /// `MPI_Issend`, in `scope`.
    pub fn immediate_synchronous_send_with_tag<'a, 's, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a B,
        tag: i32,
    ) -> Result<Request<'a, 's>>
    where
        'u: 'a,
    {
        self.immediate_mode(scope, buf, tag, SendMode::Synchronous)
    }

    /// `MPI_Ibsend`, in `scope` (copied into the attached buffer).
    pub fn immediate_buffered_send_with_tag<'a, 's, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a B,
        tag: i32,
    ) -> Result<Request<'a, 's>>
    where
        'u: 'a,
    {
        self.immediate_mode(scope, buf, tag, SendMode::Buffered)
    }

    /// `MPI_Irsend`, in `scope` (the matching receive must be posted).
    pub fn immediate_ready_send_with_tag<'a, 's, B: Buffer + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a B,
        tag: i32,
    ) -> Result<Request<'a, 's>>
    where
        'u: 'a,
    {
        self.immediate_mode(scope, buf, tag, SendMode::Ready)
    }

    /// `MPI_Isend` of an owned vector, given back by `wait`.
    pub fn immediate_send_owned<T: Equivalence>(
        &self,
        buf: Vec<T>,
    ) -> Result<OwnedRequest<'u, Vec<T>, L>> {
        self.immediate_send_owned_with_tag(buf, 0)
    }

    /// `MPI_Isend` of an owned vector with `tag`.
    pub fn immediate_send_owned_with_tag<T: Equivalence>(
        &self,
        buf: Vec<T>,
        tag: i32,
    ) -> Result<OwnedRequest<'u, Vec<T>, L>> {
        let id = self.start_isend(buf.pml_buffer()?, tag, SendMode::Standard)?;
        Ok(OwnedRequest::new(self.comm.rt(), id, buf))
    }
}

impl<L: Level> Universe<L> {
    /// `MPI_Buffer_attach`: the buffer buffered sends copy into, owned by
    /// the library until [`Universe::buffer_detach`] gives it back.
    pub fn buffer_attach(&self, buf: Vec<u8>) -> Result<()> {
        let mut buf = buf.into_boxed_slice();
        let region = crate::buffer::bytes_mut(&mut buf);
        self.rt.pml.with(|o| o.buffer_attach(region))?;
        self.rt
            .bsend_buf
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(buf);
        Ok(())
    }

    /// `MPI_Buffer_detach`: waits until every buffered message has left the
    /// buffer, then returns it.
    pub fn buffer_detach(&self) -> Result<Vec<u8>> {
        self.rt.pml.buffer_detach()?;
        let b = self
            .rt
            .bsend_buf
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| Error::new(ErrorClass::Buffer, "no buffer is attached"))?;
        Ok(b.into_vec())
    }
}
