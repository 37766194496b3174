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
///
/// ```
/// // The standard guarantees at least 32767.
/// assert!(oxmpi::TAG_UB >= 32767);
/// ```
pub const TAG_UB: i32 = i32::MAX;

/// `MPI_ANY_TAG`, as a type.
///
/// ```
/// use oxmpi::{traits::*, AnyTag};
/// // Receives and probes take `AnyTag` wherever they take a tag.
/// assert!(AnyTag.to_match().is_ok());
/// assert_eq!(AnyTag, AnyTag::default());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AnyTag;

/// What a receive or probe accepts as its tag: an `i32` (`0..=TAG_UB`) or
/// [`AnyTag`].
///
/// ```
/// use oxmpi::{AnyTag, TagSpec};
///
/// fn accepted(tag: impl TagSpec) -> bool {
///     tag.to_match().is_ok()
/// }
/// assert!(accepted(AnyTag));
/// assert!(accepted(5));
/// assert!(!accepted(-5));
/// ```
pub trait TagSpec: Copy {
    /// The matching engine's form, checked.
    ///
    /// ```
    /// use oxmpi::TagSpec;
    /// assert!(7i32.to_match().is_ok());
    /// let e = (-1i32).to_match().unwrap_err();
    /// assert_eq!(e.class(), oxmpi::ErrorClass::Tag);
    /// ```
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

/// A tag chosen at run time: `Some(tag)`, or `None` for any tag.
///
/// ```
/// use oxmpi::TagSpec;
/// assert!(Some(3).to_match().is_ok());
/// assert!(Some(-3).to_match().is_err());
/// assert!(None::<i32>.to_match().is_ok());
/// ```
impl TagSpec for Option<i32> {
    fn to_match(self) -> Result<MTag> {
        match self {
            Some(t) => t.to_match(),
            None => AnyTag.to_match(),
        }
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
///
/// ```no_run
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// use oxmpi::Comparison;
/// let copy = world.dup().unwrap();
/// assert_eq!(world.compare(&world), Comparison::Identical);
/// assert_eq!(world.compare(&copy), Comparison::Congruent);
/// ```
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
///
/// ```no_run
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let group = world.group();
/// assert_eq!(group.size(), world.size() as u32);
/// assert_eq!(group.rank(), Some(world.rank() as u32));
/// // The even ranks, as a group of their own.
/// let evens: Vec<u32> = (0..group.size()).step_by(2).collect();
/// let even_group = group.include(&evens).unwrap();
/// ```
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
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let group = world.group();
    /// let evens: Vec<u32> = (0..group.size()).step_by(2).collect();
    /// assert_eq!(group.include(&evens).unwrap().size(), (group.size() + 1) / 2);
    /// ```
    pub fn size(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// This process's rank in the group, if it belongs to it.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let root_only = world.group().include(&[0]).unwrap();
    /// assert_eq!(root_only.rank().is_some(), world.rank() == 0);
    /// ```
    pub fn rank(&self) -> Option<u32> {
        self.me
    }

    /// `MPI_Group_incl`: the processes at `ranks`, in that order.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let group = world.group();
    /// let reversed: Vec<u32> = (0..group.size()).rev().collect();
    /// let rev = group.include(&reversed).unwrap();
    /// assert_eq!(rev.rank(), Some(group.size() - 1 - world.rank() as u32));
    /// ```
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
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let workers = world.group().exclude(&[0]).unwrap();
    /// assert_eq!(workers.size(), world.size() as u32 - 1);
    /// assert_eq!(workers.rank().is_none(), world.rank() == 0);
    /// ```
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
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let group = world.group();
    /// let workers = group.exclude(&[0]).unwrap();
    /// // World rank 0 is not a worker; world rank 1 is worker 0.
    /// let t = group.translate_ranks(&[0, 1], &workers).unwrap();
    /// assert_eq!(t, [None, Some(0)]);
    /// ```
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

    /// This process's world rank, as groups record it.
    fn world_rank(&self) -> u32 {
        self.me.map_or(u32::MAX, |m| self.ranks[m as usize])
    }

    /// `MPI_Group_union`: this group's members, then those of `other` not
    /// in it, each in its group's order.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let g = universe.world().group();
    /// let a = g.include(&[0]).unwrap();
    /// let all = a.union(&g);
    /// assert_eq!(all.world_ranks()[0], g.world_ranks()[0]);
    /// assert_eq!(all.size(), g.size());
    /// ```
    pub fn union(&self, other: &Group) -> Group {
        let mut out = self.ranks.to_vec();
        out.extend(other.ranks.iter().filter(|w| !self.ranks.contains(w)));
        Group::new(out.into(), self.world_rank().min(other.world_rank()))
    }

    /// `MPI_Group_intersection`: the members of this group that are in
    /// `other`, in this group's order.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let g = universe.world().group();
    /// let a = g.include(&[0]).unwrap();
    /// assert_eq!(g.intersection(&a).world_ranks(), a.world_ranks());
    /// ```
    pub fn intersection(&self, other: &Group) -> Group {
        let out: Vec<u32> = self
            .ranks
            .iter()
            .copied()
            .filter(|w| other.ranks.contains(w))
            .collect();
        Group::new(out.into(), self.world_rank())
    }

    /// `MPI_Group_difference`: the members of this group that are not in
    /// `other`, in this group's order.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let g = universe.world().group();
    /// let a = g.include(&[0]).unwrap();
    /// assert_eq!(g.difference(&a).size(), g.size() - 1);
    /// ```
    pub fn difference(&self, other: &Group) -> Group {
        let out: Vec<u32> = self
            .ranks
            .iter()
            .copied()
            .filter(|w| !other.ranks.contains(w))
            .collect();
        Group::new(out.into(), self.world_rank())
    }

    /// World ranks of the members, in group order.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let odd_or_even = world.split(Some((world.rank() % 2) as u32), 0).unwrap().unwrap();
    /// let members = odd_or_even.group();
    /// assert!(members.world_ranks().iter().all(|&r| r % 2 == world.rank() as u32 % 2));
    /// ```
    pub fn world_ranks(&self) -> &[u32] {
        &self.ranks
    }
}

/// A communicator (`MPI_Comm`): a group of processes and a matching
/// context. Freed (`MPI_Comm_free`) when dropped, unless predefined.
///
/// ```no_run
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// // One communicator per row of a grid 4 ranks wide.
/// let row = world.split(Some((world.rank() / 4) as u32), world.rank()).unwrap().unwrap();
/// row.barrier().unwrap();
/// println!("world rank {} is rank {} of {} in its row", world.rank(), row.rank(), row.size());
/// ```
pub struct Communicator<'u, L: Level = Threading::Single> {
    u: &'u Universe<L>,
    pub(crate) ctx: u16,
    /// The (local) group, as world ranks.
    ranks: Arc<[u32]>,
    /// This process's rank in `ranks`.
    rank: u32,
    /// How many ranks point-to-point names: the size of the remote group
    /// of an intercommunicator, of the group otherwise.
    p2p_size: i32,
    /// An intercommunicator's remote group, as world ranks.
    remote: Option<Arc<[u32]>>,
    /// The context of the local group (`ctx` for an intracommunicator; an
    /// intercommunicator's local group is a context of its own, see
    /// [`crate::ctxid`]): its collectives use `local_ctx + 1`.
    local_ctx: u16,
    /// The context unit, shared with the shadow: released when the last
    /// holder goes (`None`: predefined).
    unit: Option<Arc<Unit<'u>>>,
}

/// A unit of context ids held by communicators (see [`crate::ctxid`]):
/// `MPI_Comm_free` of the last one releases it once no operation on its
/// contexts is pending.
struct Unit<'u> {
    rt: &'u Runtime,
    base: u16,
}

impl Drop for Unit<'_> {
    fn drop(&mut self) {
        if !self.rt.is_finalized() {
            self.rt.release_unit(self.base);
        }
    }
}

impl<L: Level> std::fmt::Debug for Communicator<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("ctx", &self.ctx)
            .field("rank", &self.rank)
            .field("size", &self.ranks.len())
            .field("remote_size", &self.remote.as_ref().map(|r| r.len()))
            .finish()
    }
}

impl<'u, L: Level> Communicator<'u, L> {
    /// Names this communicator's buffer for buffered sends
    /// (`MPI_Comm_attach_buffer`): see [`Universe::buffer_attach_raw_in`].
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// assert_ne!(universe.world().buffer_scope(), oxmpi::BufferScope::Process);
    /// ```
    pub fn buffer_scope(&self) -> crate::BufferScope {
        crate::BufferScope::Comm(self.ctx)
    }

    pub(crate) fn predefined(u: &'u Universe<L>, ctx: u16, ranks: Vec<u32>, rank: u32) -> Self {
        let p2p_size = ranks.len() as i32;
        Communicator {
            u,
            ctx,
            ranks: ranks.into(),
            rank,
            p2p_size,
            remote: None,
            local_ctx: ctx,
            unit: None,
        }
    }

    pub(crate) fn rt(&self) -> &'u Runtime {
        &self.u.rt
    }

    /// This process's rank (`MPI_Comm_rank`).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// if world.rank() == 0 {
    ///     println!("the root of {} ranks", world.size());
    /// }
    /// ```
    pub fn rank(&self) -> i32 {
        self.rank as i32
    }

    /// Number of processes (`MPI_Comm_size`).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (r, n) = (world.rank(), world.size());
    /// // Neighbours on a ring.
    /// let next = world.process_at_rank((r + 1) % n);
    /// let prev = world.process_at_rank((r + n - 1) % n);
    /// ```
    pub fn size(&self) -> i32 {
        self.ranks.len() as i32
    }

    /// The universe this communicator belongs to.
    ///
    /// ```no_run
    /// // A library function given only a communicator.
    /// fn prepare(comm: &oxmpi::Communicator<'_>) -> oxmpi::Result<()> {
    ///     comm.universe().buffer_attach(vec![0u8; 1 << 16])
    /// }
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// prepare(&world).unwrap();
    /// ```
    pub fn universe(&self) -> &'u Universe<L> {
        self.u
    }

    /// The process at `rank`, for sends and receives; `rank` is checked
    /// when an operation uses it (an invalid one is `MPI_ERR_RANK`).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// if world.rank() != 0 {
    ///     world.process_at_rank(0).send(&world.rank()).unwrap();
    /// } else {
    ///     for p in 1..world.size() {
    ///         let (r, _) = world.process_at_rank(p).receive::<i32>().unwrap();
    ///         assert_eq!(r, p);
    ///     }
    /// }
    /// ```
    pub fn process_at_rank(&self, rank: i32) -> Process<'_, 'u, L> {
        Process { comm: self, rank }
    }

    /// `MPI_ANY_SOURCE`: receives and probes from any process.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// if world.rank() == 0 {
    ///     // In arrival order, whoever sends first.
    ///     for _ in 1..world.size() {
    ///         let (r, st) = world.any_process().receive::<i32>().unwrap();
    ///         assert_eq!(r, st.source_rank());
    ///     }
    /// } else {
    ///     world.process_at_rank(0).send(&world.rank()).unwrap();
    /// }
    /// ```
    pub fn any_process(&self) -> AnyProcess<'_, 'u, L> {
        AnyProcess { comm: self }
    }

    /// A receive's source chosen at run time: `Some(rank)` (or
    /// `Some(PROC_NULL)`) is that process, `None` any process.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let from: Option<i32> = if world.rank() == 0 { None } else { Some(0) };
    /// let st = world.peer(from).probe().unwrap();
    /// println!("a message from {}", st.source_rank());
    /// ```
    pub fn peer(&self, rank: Option<i32>) -> Peer<'_, 'u, L> {
        match rank {
            Some(r) => Peer::Rank(self.process_at_rank(r)),
            None => Peer::Any(self.any_process()),
        }
    }

    /// `MPI_PROC_NULL`: operations complete at once and move no data.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (r, n) = (world.rank(), world.size());
    /// // A line, not a ring: the last rank has no right neighbour.
    /// let right = if r + 1 < n { world.process_at_rank(r + 1) } else { world.null_process() };
    /// let left = if r > 0 { world.process_at_rank(r - 1) } else { world.null_process() };
    /// let mut from_left = -1;
    /// right.send_receive_into(&r, 0, &left, &mut from_left, 0).unwrap();
    /// assert_eq!(from_left, if r > 0 { r - 1 } else { -1 });
    /// ```
    pub fn null_process(&self) -> Process<'_, 'u, L> {
        Process {
            comm: self,
            rank: PROC_NULL,
        }
    }

    /// `MPI_Comm_group`.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let group = world.group();
    /// assert_eq!(group.world_ranks().len(), world.size() as usize);
    /// ```
    pub fn group(&self) -> Group {
        Group::new(self.ranks.clone(), self.rt().rank)
    }

    /// `MPI_Barrier`.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// world.barrier().unwrap();
    /// if world.rank() == 0 {
    ///     println!("every rank has reached the barrier");
    /// }
    /// ```
    pub fn barrier(&self) -> Result<()> {
        let local = || {
            collective::barrier_ctx(
                self.rt(),
                self.local_ctx + 1,
                self.ranks.len() as u32,
                self.rank,
            )
        };
        local()?;
        if self.remote.is_some() {
            // Both groups arrived once both leaders heard of the other.
            if self.rank == 0 {
                let mut x = crate::ctxid::Exchange::start(
                    self.arc_rt(),
                    self.ctx + 1,
                    collective::TAG_BARRIER,
                    vec![(0, vec![0])],
                    &[0],
                    1,
                );
                x.wait();
                x.received()?;
            }
            local()?;
        }
        Ok(())
    }

    /// `MPI_Comm_compare`.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// use oxmpi::Comparison;
    /// // The same processes, in reverse order.
    /// let reversed = world.split(Some(0), -world.rank()).unwrap().unwrap();
    /// let expected = if world.size() > 1 { Comparison::Similar } else { Comparison::Congruent };
    /// assert_eq!(world.compare(&reversed), expected);
    /// ```
    pub fn compare(&self, other: &Communicator<'_, L>) -> Comparison {
        if self.ctx == other.ctx && std::ptr::eq(&*self.u.rt, &*other.u.rt) {
            Comparison::Identical
        } else if self.remote.is_some() || other.remote.is_some() {
            // Intercommunicators: both groups must compare (local with
            // local, remote with remote), and then the weaker result.
            if self.remote.is_none() || other.remote.is_none() {
                return Comparison::Unequal;
            }
            let g = |a: &[u32], b: &[u32]| {
                if a == b {
                    Comparison::Congruent
                } else {
                    let (mut a, mut b) = (a.to_vec(), b.to_vec());
                    a.sort_unstable();
                    b.sort_unstable();
                    if a == b {
                        Comparison::Similar
                    } else {
                        Comparison::Unequal
                    }
                }
            };
            let l = g(&self.ranks, &other.ranks);
            let r = g(
                self.remote.as_deref().unwrap_or(&[]),
                other.remote.as_deref().unwrap_or(&[]),
            );
            match (l, r) {
                (Comparison::Unequal, _) | (_, Comparison::Unequal) => Comparison::Unequal,
                (Comparison::Similar, _) | (_, Comparison::Similar) => Comparison::Similar,
                _ => Comparison::Congruent,
            }
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

    /// The runtime, shared (what exchanges that may outlive a call hold).
    fn arc_rt(&self) -> &'u Arc<Runtime> {
        &self.u.rt
    }

    /// Fails with `MPI_ERR_COMM` for an intercommunicator: `what` is
    /// defined on intracommunicators only here.
    fn intra_only(&self, what: &str) -> Result<()> {
        if self.remote.is_some() {
            return Err(Error::new(
                ErrorClass::Comm,
                format!("{what} on an intercommunicator is not supported"),
            ));
        }
        Ok(())
    }

    /// The priority key and the internal tag of the next communicator
    /// creation on this communicator (the same on every member: creations
    /// on one communicator are collective, so every member counts them in
    /// the same order).
    fn creation(&self) -> (crate::ctxid::Key, i32) {
        let seq = self.rt().next_seq(self.ctx);
        ((self.ctx, seq), (1 << 30) | (seq & 0x3fff_ffff) as i32)
    }

    /// Agrees with the other members on a fresh context unit: collective
    /// over this (intra)communicator; `extra` travels with the proposal
    /// (split's color and key). Returns the unit's first context id and
    /// everyone's `extra`, in rank order.
    fn agree_ctx(&self, extra: [i32; 2]) -> Result<(u16, Vec<[i32; 2]>)> {
        let (key, tag) = self.creation();
        let members: Vec<u32> = (0..self.ranks.len() as u32).collect();
        let (unit, extras) = crate::ctxid::agree_among(
            self.arc_rt(),
            key,
            self.ctx + 1,
            tag,
            &members,
            self.rank as usize,
            extra,
        )?;
        Ok((unit as u16 * crate::ctxid::UNIT, extras))
    }

    /// A communicator of `ranks` (world ranks, this process among them) on
    /// the unit at `base`, which this process took.
    fn create(&self, base: u16, ranks: Vec<u32>) -> Result<Communicator<'u, L>> {
        Communicator::build(self.u, base, ranks, None)
    }

    /// A communicator on the unit at `base` (which this process took: it
    /// is released again if this fails): an intracommunicator of `local`,
    /// or with `remote`, an intercommunicator.
    fn build(
        u: &'u Universe<L>,
        base: u16,
        local: Vec<u32>,
        remote: Option<Vec<u32>>,
    ) -> Result<Communicator<'u, L>> {
        let unit = Arc::new(Unit { rt: &u.rt, base });
        let me = u.rt.rank;
        let rank =
            local.iter().position(|&r| r == me).ok_or_else(|| {
                Error::new(ErrorClass::Intern, "not a member of the new communicator")
            })? as u32;
        let c = Communicator {
            u,
            ctx: base,
            p2p_size: remote.as_ref().map_or(local.len(), Vec::len) as i32,
            ranks: local.into(),
            rank,
            remote: remote.map(Into::into),
            local_ctx: base,
            unit: Some(unit),
        };
        let c = Communicator {
            local_ctx: if c.remote.is_some() { base + 4 } else { base },
            ..c
        };
        c.add_contexts(0)?;
        Ok(c)
    }

    /// Adds this communicator's contexts, moved by `shift` (0: its own, 2:
    /// its shadow's), to the PML.
    fn add_contexts(&self, shift: u16) -> Result<()> {
        let ranks = self.ranks.to_vec();
        self.rt().pml.with(|o| -> Result<()> {
            match &self.remote {
                None => {
                    o.add_comm(self.ctx + shift, ranks.clone(), self.rank)?;
                    o.add_comm(self.ctx + shift + 1, ranks, self.rank)?;
                }
                Some(remote) => {
                    o.add_intercomm(self.ctx + shift, remote.to_vec(), self.rank)?;
                    o.add_intercomm(self.ctx + shift + 1, remote.to_vec(), self.rank)?;
                    o.add_comm(self.local_ctx + shift, ranks.clone(), self.rank)?;
                    o.add_comm(self.local_ctx + shift + 1, ranks, self.rank)?;
                }
            }
            Ok(())
        })
    }

    /// A shadow of this communicator: the same groups on contexts of its
    /// own, taken from this communicator's context unit, so that creating
    /// it needs no agreement (the C layer runs its collectives on the
    /// shadow, so that they never match the program's messages). Local:
    /// every member makes it, in any order. Each communicator has at most
    /// one shadow, and a shadow has none.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let lib = world.dup().unwrap();
    /// let shadow = lib.shadow().unwrap();
    /// assert_eq!((shadow.rank(), shadow.size()), (lib.rank(), lib.size()));
    /// assert!(shadow.shadow().is_err());
    /// ```
    pub fn shadow(&self) -> Result<Communicator<'u, L>> {
        if self.ctx % crate::ctxid::UNIT != 0 {
            return Err(Error::new(
                ErrorClass::Comm,
                "a shadow communicator has no shadow",
            ));
        }
        self.add_contexts(2)
            .map_err(|e| Error::new(e.class(), format!("shadow communicator: {e}")))?;
        Ok(Communicator {
            u: self.u,
            ctx: self.ctx + 2,
            ranks: self.ranks.clone(),
            rank: self.rank,
            p2p_size: self.p2p_size,
            remote: self.remote.clone(),
            local_ctx: self.local_ctx + 2,
            unit: self.unit.clone(),
        })
    }

    /// `MPI_Comm_dup`: the same group (groups, for an intercommunicator)
    /// with a new context. Collective.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// // A library's own communicator: its messages never match the caller's.
    /// let lib = world.dup().unwrap();
    /// assert_eq!((lib.rank(), lib.size()), (world.rank(), world.size()));
    /// lib.barrier().unwrap();
    /// ```
    pub fn dup(&self) -> Result<Communicator<'u, L>> {
        if let Some(remote) = &self.remote {
            let (base, _) = self.agree_inter(&[])?;
            return Communicator::build(self.u, base, self.ranks.to_vec(), Some(remote.to_vec()));
        }
        let (ctx, _) = self.agree_ctx([0, 0])?;
        self.create(ctx, self.ranks.to_vec())
    }

    /// `MPI_Comm_idup`: [`Communicator::dup`] as a non-blocking operation.
    /// Collective; the request's `wait` or `test` gives the new
    /// communicator. The agreement advances when the request is tested or
    /// waited for (and when any other is tested, and while this process
    /// waits in another communicator creation); an intercommunicator's
    /// goes through the two leaders.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let pending = world.immediate_dup().unwrap();
    /// // ... other work, other communication ...
    /// let copy = pending.wait().unwrap();
    /// assert_eq!(copy.size(), world.size());
    /// ```
    pub fn immediate_dup(&self) -> Result<CommRequest<'u, L>> {
        let (key, tag) = self.creation();
        let a = match &self.remote {
            None => crate::ctxid::NbAgree::start(
                self.arc_rt(),
                key,
                self.ctx + 1,
                tag,
                self.ranks.len() as u32,
                self.rank,
            ),
            // Through the leaders, as `dup` of an intercommunicator.
            Some(_) => crate::ctxid::NbAgree::start_leaders(
                self.arc_rt(),
                key,
                crate::ctxid::Side {
                    ctx: self.local_ctx + 1,
                    tag,
                    members: (0..self.ranks.len() as u32).collect(),
                    me: self.rank as usize,
                    leader: 0,
                },
                (self.rank == 0).then_some(crate::ctxid::Link {
                    ctx: self.ctx + 1,
                    remote_leader: 0,
                    tag,
                }),
            ),
        };
        let a = Arc::new(std::sync::Mutex::new(a));
        self.rt().add_pending(&a);
        Ok(CommRequest {
            u: self.u,
            state: CommRequestState::Agreeing(
                a,
                self.ranks.to_vec(),
                self.remote.as_ref().map(|r| r.to_vec()),
            ),
        })
    }

    /// `MPI_Comm_split`: processes with the same `color` form a new
    /// communicator, ordered by `key` then by rank here; `None` as color
    /// (`MPI_UNDEFINED`) gives `None`. Collective.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (r, n) = (world.rank(), world.size());
    /// // Even and odd ranks, each in reverse order of world rank.
    /// let half = world.split(Some((r % 2) as u32), -r).unwrap().unwrap();
    /// assert_eq!(half.size(), (n + 1 - r % 2) / 2);
    /// // Without a color a process gets no communicator.
    /// assert!(world.split(None, 0).unwrap().is_none());
    /// ```
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Communicator<'u, L>>> {
        let c = match color {
            Some(c) => i32::try_from(c)
                .map_err(|_| Error::new(ErrorClass::Arg, format!("color {c} is too large")))?,
            None => -1,
        };
        if self.remote.is_some() {
            return self.split_inter(c, key);
        }
        let (ctx, extras) = self.agree_ctx([c, key])?;
        if color.is_none() {
            // The unit is free here again (the members of every color
            // share it, each color on its own ranks).
            self.rt()
                .ctx_ids()
                .release(usize::from(ctx / crate::ctxid::UNIT));
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
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let node = world.split_shared(0).unwrap();
    /// assert_eq!(node.size() as usize, universe.local_ranks().len());
    /// if node.rank() == 0 {
    ///     println!("world rank {} leads its node", world.rank());
    /// }
    /// ```
    pub fn split_shared(&self, key: i32) -> Result<Communicator<'u, L>> {
        let local = self.u.local_ranks();
        // The node's color: its lowest world rank.
        let color = local.iter().copied().min().unwrap_or(self.rt().rank);
        Ok(self.split(Some(color), key)?.expect("a color was given"))
    }

    /// `MPI_Comm_create`: a communicator of `group`'s members (a subset of
    /// this one's); `None` on processes outside it. Collective.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let evens: Vec<u32> = (0..world.size() as u32).step_by(2).collect();
    /// let group = world.group().include(&evens).unwrap();
    /// let evens_comm = world.create_from_group(&group).unwrap();
    /// match evens_comm {
    ///     Some(comm) => assert_eq!(comm.rank(), world.rank() / 2),
    ///     None => assert_eq!(world.rank() % 2, 1),
    /// }
    /// ```
    pub fn create_from_group(&self, group: &Group) -> Result<Option<Communicator<'u, L>>> {
        for w in group.world_ranks() {
            if !self.ranks.contains(w) {
                return Err(Error::new(
                    ErrorClass::Group,
                    format!("world rank {w} of the group is not in this communicator"),
                ));
            }
        }
        if self.remote.is_some() {
            // The members of `group` in its order; the remote side does
            // the same with its own group.
            let at = group.rank();
            return self.split_inter(
                if at.is_some() { 0 } else { -1 },
                at.map_or(0, |r| r as i32),
            );
        }
        let (ctx, _) = self.agree_ctx([0, 0])?;
        if group.rank().is_none() {
            self.rt()
                .ctx_ids()
                .release(usize::from(ctx / crate::ctxid::UNIT));
            return Ok(None);
        }
        self.create(ctx, group.world_ranks().to_vec()).map(Some)
    }

    /// `MPI_Comm_create_group`: a communicator of `group`'s members (a
    /// subset of this one's), collective over those members only: the
    /// other processes of this communicator take no part. `tag` (`>= 0`)
    /// keeps concurrent calls on this communicator apart (calls with
    /// overlapping groups must use different tags or be made in the same
    /// order on every member). A process outside `group` gets `None`
    /// without communicating.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let evens: Vec<u32> = (0..world.size() as u32).step_by(2).collect();
    /// let group = world.group().include(&evens).unwrap();
    /// // Only the even ranks call it; the odd ones are free to do other work.
    /// if world.rank() % 2 == 0 {
    ///     let comm = world.create_group(&group, 7).unwrap().unwrap();
    ///     assert_eq!(comm.rank(), world.rank() / 2);
    ///     comm.barrier().unwrap();
    /// }
    /// ```
    pub fn create_group(&self, group: &Group, tag: i32) -> Result<Option<Communicator<'u, L>>> {
        self.intra_only("MPI_Comm_create_group")?;
        check_tag(tag)?;
        // The parent rank of each member, in group order.
        let mut members = Vec::with_capacity(group.world_ranks().len());
        for w in group.world_ranks() {
            let p = self.ranks.iter().position(|r| r == w).ok_or_else(|| {
                Error::new(
                    ErrorClass::Group,
                    format!("world rank {w} of the group is not in this communicator"),
                )
            })?;
            members.push(p as u32);
        }
        let Some(me) = group.rank() else {
            return Ok(None);
        };
        // Internal tags of create_group are negative and even: they never
        // meet the creations' positive tags nor the intercommunicator
        // leaders' odd ones.
        let t = tag & 0x3fff_ffff;
        let (unit, _) = crate::ctxid::agree_among(
            self.arc_rt(),
            (self.ctx, 0x8000_0000 | t as u32),
            self.ctx + 1,
            -2 - 2 * t,
            &members,
            me as usize,
            [0, 0],
        )?;
        self.create(
            unit as u16 * crate::ctxid::UNIT,
            group.world_ranks().to_vec(),
        )
        .map(Some)
    }

    /// `MPI_Comm_split` (and `MPI_Comm_create`) of an intercommunicator:
    /// `color` `-1` is `MPI_UNDEFINED`. The local processes of each color,
    /// ordered by `key` then rank, and the remote processes of that color
    /// form a new intercommunicator; `None` when either side has nobody of
    /// this process's color. Collective over both groups.
    fn split_inter(&self, color: i32, key: i32) -> Result<Option<Communicator<'u, L>>> {
        let remote = self.remote.as_ref().expect("an intercommunicator");
        // Every local member's color and key.
        let (key_, tag) = self.creation();
        let n = self.ranks.len() as u32;
        let others: Vec<u32> = (0..n).filter(|&r| r != self.rank).collect();
        let mut mine = color.to_le_bytes().to_vec();
        mine.extend_from_slice(&key.to_le_bytes());
        let mut x = crate::ctxid::Exchange::start(
            self.arc_rt(),
            self.local_ctx + 1,
            tag ^ 0x2000_0000,
            others.iter().map(|&p| (p, mine.clone())).collect(),
            &others,
            8,
        );
        x.wait();
        let mut all: Vec<Vec<u8>> = x.received()?.into_iter().map(<[u8]>::to_vec).collect();
        drop(x);
        all.insert(self.rank as usize, mine);
        let word = |b: &[u8], at: usize| {
            b.get(at..at + 4)
                .map_or(-1, |w| i32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        };
        // (color, key, world rank) of each local member, in rank order:
        // what the leaders trade.
        let mut payload = Vec::with_capacity(12 * all.len());
        for (i, m) in all.iter().enumerate() {
            payload.extend_from_slice(&word(m, 0).to_le_bytes());
            payload.extend_from_slice(&word(m, 4).to_le_bytes());
            payload.extend_from_slice(&self.ranks[i].to_le_bytes());
        }
        let side = crate::ctxid::Side {
            ctx: self.local_ctx + 1,
            tag,
            members: (0..n).collect(),
            me: self.rank as usize,
            leader: 0,
        };
        let link = (self.rank == 0).then_some(Ok(crate::ctxid::Link {
            ctx: self.ctx + 1,
            remote_leader: 0,
            tag,
        }));
        let (unit, theirs) =
            crate::ctxid::agree_leaders(self.arc_rt(), key_, &side, link, &payload)?;
        let members = |b: &[u8]| -> Vec<u32> {
            let mut v: Vec<(i32, usize, u32)> = b
                .chunks_exact(12)
                .enumerate()
                .filter(|(_, t)| color >= 0 && word(t, 0) == color)
                .map(|(i, t)| (word(t, 4), i, word(t, 8) as u32))
                .collect();
            v.sort();
            v.into_iter().map(|(_, _, w)| w).collect()
        };
        let (local, far) = (members(&payload), members(&theirs));
        if local.is_empty() || far.is_empty() || far.len() > remote.len() {
            self.rt().ctx_ids().release(unit);
            return Ok(None);
        }
        Communicator::build(self.u, unit as u16 * crate::ctxid::UNIT, local, Some(far)).map(Some)
    }

    /// Whether this is an intercommunicator (`MPI_Comm_test_inter`).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// assert!(!universe.world().is_inter());
    /// ```
    pub fn is_inter(&self) -> bool {
        self.remote.is_some()
    }

    /// The size of an intercommunicator's remote group
    /// (`MPI_Comm_remote_size`; `None` for an intracommunicator).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// assert_eq!(universe.world().remote_size(), None);
    /// ```
    pub fn remote_size(&self) -> Option<i32> {
        self.remote.as_ref().map(|r| r.len() as i32)
    }

    /// An intercommunicator's local group as an intracommunicator on the
    /// local group's own context (`None` for an intracommunicator): for
    /// the intercommunicator collectives' traffic within one group (the C
    /// layer uses its shadow's). It shares its internal context with this
    /// intercommunicator's local agreements, so it must not be used to
    /// create communicators, nor while one is being created on this
    /// intercommunicator.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// assert!(universe.world().local_group_comm().is_none());
    /// ```
    pub fn local_group_comm(&self) -> Option<Communicator<'u, L>> {
        self.remote.as_ref()?;
        Some(Communicator {
            u: self.u,
            ctx: self.local_ctx,
            ranks: self.ranks.clone(),
            rank: self.rank,
            p2p_size: self.ranks.len() as i32,
            remote: None,
            local_ctx: self.local_ctx,
            unit: self.unit.clone(),
        })
    }

    /// An intercommunicator's remote group (`MPI_Comm_remote_group`;
    /// `None` for an intracommunicator).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// assert!(universe.world().remote_group().is_none());
    /// ```
    pub fn remote_group(&self) -> Option<Group> {
        self.remote
            .as_ref()
            .map(|r| Group::new(r.clone(), self.rt().rank))
    }

    /// A fresh unit agreed by both groups of this intercommunicator (the
    /// local leader is local rank 0, the remote one remote rank 0), with
    /// `payload` traded between the leaders: the unit's first context and
    /// the remote leader's payload.
    fn agree_inter(&self, payload: &[u8]) -> Result<(u16, Vec<u8>)> {
        let (key, tag) = self.creation();
        let side = crate::ctxid::Side {
            ctx: self.local_ctx + 1,
            tag,
            members: (0..self.ranks.len() as u32).collect(),
            me: self.rank as usize,
            leader: 0,
        };
        let link = (self.rank == 0).then_some(Ok(crate::ctxid::Link {
            ctx: self.ctx + 1,
            remote_leader: 0,
            tag,
        }));
        let (unit, theirs) = crate::ctxid::agree_leaders(self.arc_rt(), key, &side, link, payload)?;
        Ok((unit as u16 * crate::ctxid::UNIT, theirs))
    }

    /// `MPI_Intercomm_create`: an intercommunicator between this
    /// communicator's group (the local group; its leader is
    /// `local_leader`) and another group, disjoint from it, whose leader
    /// is rank `remote_leader` of `peer` (a communicator holding both
    /// leaders; significant at the local leader only, as `remote_leader`
    /// is). `tag` keeps concurrent creations over `peer` apart. Collective
    /// over both groups.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (r, n) = (world.rank(), world.size());
    /// // The lower and the upper half of the world, linked.
    /// let low = r < n / 2;
    /// let half = world.split(Some(low as u32), r).unwrap().unwrap();
    /// let remote_leader = if low { n / 2 } else { 0 };
    /// let inter = half.intercomm_create(0, &world, remote_leader, 9).unwrap();
    /// assert_eq!(inter.remote_size(), Some(if low { n - n / 2 } else { n / 2 }));
    /// ```
    pub fn intercomm_create(
        &self,
        local_leader: i32,
        peer: &Communicator<'u, L>,
        remote_leader: i32,
        tag: i32,
    ) -> Result<Communicator<'u, L>> {
        self.intra_only("MPI_Intercomm_create (as the local communicator)")?;
        check_tag(tag)?;
        let leader = u32::try_from(local_leader)
            .ok()
            .filter(|&l| (l as usize) < self.ranks.len())
            .ok_or_else(|| {
                Error::new(
                    ErrorClass::Rank,
                    format!(
                        "local_leader {local_leader} of a communicator of {}",
                        self.size()
                    ),
                )
            })?;
        // Checked at the local leader, the only one that knows the peer
        // communicator; a failure there fails the whole local group (the
        // leader tells the members), never leaves it waiting.
        let link = (self.rank == leader).then(|| {
            peer.intra_only("MPI_Intercomm_create (as the peer communicator)")?;
            let rl = u32::try_from(remote_leader)
                .ok()
                .filter(|&l| (l as usize) < peer.ranks.len())
                .ok_or_else(|| {
                    Error::new(
                        ErrorClass::Rank,
                        format!(
                            "remote_leader {remote_leader} of a peer communicator of {}",
                            peer.size()
                        ),
                    )
                })?;
            if self.ranks.contains(&peer.ranks[rl as usize]) {
                return Err(Error::new(
                    ErrorClass::Rank,
                    format!(
                        "remote_leader {remote_leader} of the peer communicator is in the local \
                         group (the groups must be disjoint)"
                    ),
                ));
            }
            Ok(crate::ctxid::Link {
                ctx: peer.ctx + 1,
                remote_leader: rl,
                tag: -1 - 2 * (tag & 0x3fff_ffff),
            })
        });
        let (key, ltag) = self.creation();
        let side = crate::ctxid::Side {
            ctx: self.ctx + 1,
            tag: ltag,
            members: (0..self.ranks.len() as u32).collect(),
            me: self.rank as usize,
            leader: leader as usize,
        };
        let payload = encode_ranks(&self.ranks);
        let (unit, theirs) =
            crate::ctxid::agree_leaders(self.arc_rt(), key, &side, link, &payload)?;
        let base = unit as u16 * crate::ctxid::UNIT;
        let remote = decode_ranks(&theirs);
        self.check_disjoint(base, &remote)?;
        Communicator::build(self.u, base, self.ranks.to_vec(), Some(remote))
    }

    /// Fails (releasing the unit at `base`) if `remote` overlaps this
    /// group or is empty.
    fn check_disjoint(&self, base: u16, remote: &[u32]) -> Result<()> {
        if remote.is_empty() || remote.iter().any(|w| self.ranks.contains(w)) {
            self.rt()
                .ctx_ids()
                .release(usize::from(base / crate::ctxid::UNIT));
            return Err(Error::new(
                ErrorClass::Comm,
                "the local and remote groups of an intercommunicator must be disjoint and not empty",
            ));
        }
        Ok(())
    }

    /// `MPI_Intercomm_merge`: an intracommunicator of both groups of this
    /// intercommunicator, the group whose members pass `high = false`
    /// first (when both pass the same, the group with the lower world rank
    /// first). Collective over both groups.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (r, n) = (world.rank(), world.size());
    /// let low = r < n / 2;
    /// let half = world.split(Some(low as u32), r).unwrap().unwrap();
    /// let inter = half.intercomm_create(0, &world, if low { n / 2 } else { 0 }, 9).unwrap();
    /// let all = inter.merge(!low).unwrap();
    /// assert_eq!(all.rank(), r);
    /// ```
    pub fn merge(&self, high: bool) -> Result<Communicator<'u, L>> {
        let Some(remote) = &self.remote else {
            return Err(Error::new(
                ErrorClass::Comm,
                "MPI_Intercomm_merge of an intracommunicator",
            ));
        };
        let mut payload = vec![u8::from(high)];
        payload.extend_from_slice(&encode_ranks(&self.ranks));
        let (base, theirs) = self.agree_inter(&payload)?;
        let their_high = theirs.first().is_some_and(|&h| h != 0);
        let we_first = match (high, their_high) {
            (false, true) => true,
            (true, false) => false,
            _ => self.ranks.iter().min() < remote.iter().min(),
        };
        let mut all = Vec::with_capacity(self.ranks.len() + remote.len());
        if we_first {
            all.extend_from_slice(&self.ranks);
            all.extend_from_slice(remote);
        } else {
            all.extend_from_slice(remote);
            all.extend_from_slice(&self.ranks);
        }
        Communicator::build(self.u, base, all, None)
    }
}

/// A group's world ranks as bytes (little-endian `u32`s).
fn encode_ranks(ranks: &[u32]) -> Vec<u8> {
    ranks.iter().flat_map(|r| r.to_le_bytes()).collect()
}

/// The world ranks of [`encode_ranks`]' bytes.
fn decode_ranks(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

impl<L: Level> Universe<L> {
    /// `MPI_Comm_create_from_group`: a communicator of `group`'s members,
    /// collective over them only. `stringtag` tells concurrent creations
    /// apart (the standard requires it unique among those in flight with
    /// overlapping groups). A process outside `group` gets `MPI_ERR_GROUP`.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let evens: Vec<u32> = (0..world.size() as u32).step_by(2).collect();
    /// let group = world.group().include(&evens).unwrap();
    /// if world.rank() % 2 == 0 {
    ///     let comm = universe.comm_from_group(&group, "example.evens").unwrap();
    ///     assert_eq!(comm.rank(), world.rank() / 2);
    /// }
    /// ```
    pub fn comm_from_group(&self, group: &Group, stringtag: &str) -> Result<Communicator<'_, L>> {
        let me = group.rank().ok_or_else(|| {
            Error::new(
                ErrorClass::Group,
                "MPI_Comm_create_from_group: this process is not in the group",
            )
        })?;
        let h = tag_hash(stringtag);
        let (unit, _) = crate::ctxid::agree_among(
            &self.rt,
            (crate::ctxid::GROUP_CTX, h),
            crate::ctxid::GROUP_CTX,
            (h * 4) as i32,
            group.world_ranks(),
            me as usize,
            [0, 0],
        )?;
        Communicator::build(
            self,
            unit as u16 * crate::ctxid::UNIT,
            group.world_ranks().to_vec(),
            None,
        )
    }

    /// `MPI_Intercomm_create_from_groups`: an intercommunicator between
    /// `local` (this process's group, led by its rank `local_leader`) and
    /// the disjoint `remote` (led by its rank `remote_leader`), collective
    /// over both groups; `stringtag` as for
    /// [`Universe::comm_from_group`] (both groups pass the same).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (r, n) = (world.rank() as u32, world.size() as u32);
    /// let g = world.group();
    /// let low = g.include(&(0..n / 2).collect::<Vec<_>>()).unwrap();
    /// let high = g.include(&(n / 2..n).collect::<Vec<_>>()).unwrap();
    /// let (mine, other) = if r < n / 2 { (&low, &high) } else { (&high, &low) };
    /// let inter = universe.intercomm_from_groups(mine, 0, other, 0, "example").unwrap();
    /// assert_eq!(inter.remote_size(), Some(other.size() as i32));
    /// ```
    pub fn intercomm_from_groups(
        &self,
        local: &Group,
        local_leader: i32,
        remote: &Group,
        remote_leader: i32,
        stringtag: &str,
    ) -> Result<Communicator<'_, L>> {
        let me = local.rank().ok_or_else(|| {
            Error::new(
                ErrorClass::Group,
                "MPI_Intercomm_create_from_groups: this process is not in the local group",
            )
        })?;
        let leader = u32::try_from(local_leader)
            .ok()
            .filter(|&l| l < local.size())
            .ok_or_else(|| {
                Error::new(
                    ErrorClass::Rank,
                    format!("local_leader {local_leader} of a group of {}", local.size()),
                )
            })?;
        let rl = u32::try_from(remote_leader)
            .ok()
            .filter(|&l| l < remote.size())
            .ok_or_else(|| {
                Error::new(
                    ErrorClass::Rank,
                    format!(
                        "remote_leader {remote_leader} of a group of {}",
                        remote.size()
                    ),
                )
            })?;
        if remote
            .world_ranks()
            .iter()
            .any(|w| local.world_ranks().contains(w))
        {
            return Err(Error::new(
                ErrorClass::Group,
                "MPI_Intercomm_create_from_groups: the groups overlap",
            ));
        }
        let h = tag_hash(stringtag);
        let side = crate::ctxid::Side {
            ctx: crate::ctxid::GROUP_CTX,
            tag: (h * 4 + 1) as i32,
            members: local.world_ranks().to_vec(),
            me: me as usize,
            leader: leader as usize,
        };
        let link = (me == leader).then_some(Ok(crate::ctxid::Link {
            ctx: crate::ctxid::GROUP_CTX,
            remote_leader: remote.world_ranks()[rl as usize],
            tag: (h * 4 + 2) as i32,
        }));
        let (unit, _) = crate::ctxid::agree_leaders(
            &self.rt,
            (crate::ctxid::GROUP_CTX, h | 1 << 31),
            &side,
            link,
            &[],
        )?;
        Communicator::build(
            self,
            unit as u16 * crate::ctxid::UNIT,
            local.world_ranks().to_vec(),
            Some(remote.world_ranks().to_vec()),
        )
    }
}

/// A string tag's 28-bit hash (FNV-1a): what keeps creations from groups
/// with different tags apart.
fn tag_hash(s: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h & 0x0fff_ffff
}

/// A pending [`Communicator::immediate_dup`] (`MPI_Comm_idup`): its
/// `wait` or `test` gives the new communicator. Dropping it unfinished
/// finishes the agreement (the other members wait for this one) and frees
/// the communicator.
pub struct CommRequest<'u, L: Level = Threading::Single> {
    u: &'u Universe<L>,
    state: CommRequestState<'u, L>,
}

enum CommRequestState<'u, L: Level> {
    /// The agreement, and the new communicator's group.
    Agreeing(
        Arc<std::sync::Mutex<crate::ctxid::NbAgree>>,
        Vec<u32>,
        Option<Vec<u32>>,
    ),
    /// Complete (taken by the first `test` or `wait` that sees it).
    Done(Option<Result<Communicator<'u, L>>>),
}

impl<L: Level> std::fmt::Debug for CommRequest<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommRequest")
            .field("done", &matches!(self.state, CommRequestState::Done(_)))
            .finish()
    }
}

impl<'u, L: Level> CommRequest<'u, L> {
    /// `MPI_Test`: the new communicator once the agreement is over (each
    /// outcome is given once; later calls give `None`).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut pending = world.immediate_dup().unwrap();
    /// let copy = loop {
    ///     if let Some(c) = pending.test() {
    ///         break c.unwrap();
    ///     }
    /// };
    /// copy.barrier().unwrap();
    /// ```
    pub fn test(&mut self) -> Option<Result<Communicator<'u, L>>> {
        if let CommRequestState::Agreeing(a, ranks, remote) = &self.state {
            // The others first: one not tested may hold units this one
            // needs.
            self.u.rt.poll_pending();
            let r = {
                let mut g = a.lock().unwrap_or_else(|p| p.into_inner());
                if !g.poll() {
                    return None;
                }
                match g.take() {
                    Some(r) => r,
                    None => Err(Error::new(
                        ErrorClass::Intern,
                        "the communicator of this request was already taken",
                    )),
                }
            };
            let c = r.and_then(|unit| {
                Communicator::build(
                    self.u,
                    unit as u16 * crate::ctxid::UNIT,
                    ranks.clone(),
                    remote.clone(),
                )
            });
            self.state = CommRequestState::Done(Some(c));
        }
        match &mut self.state {
            CommRequestState::Done(c) => c.take(),
            CommRequestState::Agreeing(..) => None,
        }
    }

    /// `MPI_Wait`: the new communicator.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let a = world.immediate_dup().unwrap();
    /// let b = world.immediate_dup().unwrap();
    /// let (a, b) = (a.wait().unwrap(), b.wait().unwrap());
    /// assert_eq!(a.size(), b.size());
    /// ```
    pub fn wait(mut self) -> Result<Communicator<'u, L>> {
        loop {
            if let Some(c) = self.test() {
                return c;
            }
            if matches!(self.state, CommRequestState::Done(None)) {
                return Err(Error::new(
                    ErrorClass::Request,
                    "the communicator of this request was already taken",
                ));
            }
            self.u.rt.retry_pause();
        }
    }
}

impl<L: Level> Drop for CommRequest<'_, L> {
    fn drop(&mut self) {
        if matches!(self.state, CommRequestState::Agreeing(..)) {
            while self.test().is_none() {
                self.u.rt.retry_pause();
            }
        }
    }
}

/// The `rank` given for `MPI_PROC_NULL`.
///
/// ```
/// // Never a valid rank: use it for neighbours that do not exist.
/// assert!(oxmpi::PROC_NULL < 0);
/// ```
pub const PROC_NULL: i32 = -3;

/// The small-message receive of [`Process::try_receive_inline`] and
/// [`AnyProcess::try_receive_inline`] (and their spinning forms) from `src`
/// on `comm`: `None` for a negative tag, which only the ordinary receive
/// reports.
#[inline(always)]
fn receive_inline<L: Level>(
    comm: &Communicator<'_, L>,
    src: MSource,
    buf: &mut [u8],
    tag: Option<i32>,
    blocking: bool,
) -> Option<Status> {
    let tag = match tag {
        Some(t) if t >= 0 => MTag::Value(t),
        Some(_) => return None,
        None => MTag::Any,
    };
    comm.rt()
        .pml
        .try_recv_small(buf, src, tag, comm.ctx, blocking)
        .map(Status::from_pml)
}

#[inline(always)]
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
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let root = world.process_at_rank(0);
/// if world.rank() != 0 {
///     root.send(&world.rank()).unwrap(); // the destination of a send
///     let (ack, _) = root.receive::<i32>().unwrap(); // the source of a receive
///     assert_eq!(ack, -world.rank());
/// } else {
///     for p in 1..world.size() {
///         let peer = world.process_at_rank(p);
///         let (x, _) = peer.receive::<i32>().unwrap();
///         peer.send(&-x).unwrap();
///     }
/// }
/// ```
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
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let any = world.any_process();
/// if world.rank() == 0 {
///     for _ in 1..world.size() {
///         let (v, st) = any.receive_vec::<u8>().unwrap();
///         println!("{} bytes from rank {}", v.len(), st.source_rank());
///     }
/// } else {
///     world.process_at_rank(0).send(&b"hello"[..]).unwrap();
/// }
/// ```
pub struct AnyProcess<'c, 'u, L: Level = Threading::Single> {
    comm: &'c Communicator<'u, L>,
}

impl<L: Level> std::fmt::Debug for AnyProcess<'_, '_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnyProcess").finish()
    }
}

impl<L: Level> AnyProcess<'_, '_, L> {
    /// [`Process::try_receive_inline`] from any process: receives a small
    /// message (of a tag of 0 or more, or `tag`) into `buf` at once when one
    /// is next from some process and nothing else could take it first (no
    /// receive posted, nothing unexpected on this communicator), with no
    /// request: its status, whose source says who sent it. Each process's
    /// channel is read in turn, starting where the last such receive
    /// stopped; after a run of takes in a row one call takes nothing, so
    /// that the ordinary receive's progress also serves the senders passed
    /// over (`oxmpi_pml::ANY_SOURCE_RUN`). `None` has received nothing:
    /// receive as usual then, which also reports any error. Always `None` where the library
    /// is shared between threads. The small-message path of the C ABI's
    /// `MPI_Irecv` from `MPI_ANY_SOURCE`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// if world.rank() == 0 {
    ///     let any = world.any_process();
    ///     for _ in 1..world.size() {
    ///         let mut buf = [0u8; 4];
    ///         let st = match any.try_receive_inline(&mut buf, Some(3)) {
    ///             Some(st) => st,
    ///             None => any.receive_into_with_tag(&mut buf[..], 3).unwrap(),
    ///         };
    ///         assert_eq!(buf, (st.source_rank() as u32).to_le_bytes());
    ///     }
    /// } else {
    ///     let me = (world.rank() as u32).to_le_bytes();
    ///     world.process_at_rank(0).send_with_tag(&me[..], 3).unwrap();
    /// }
    /// ```
    #[inline(always)]
    pub fn try_receive_inline(&self, buf: &mut [u8], tag: Option<i32>) -> Option<Status> {
        receive_inline(self.comm, MSource::Any, buf, tag, false)
    }

    /// [`AnyProcess::try_receive_inline`] that, while the library spins
    /// (not oversubscribed), also waits a little for such a message, as a
    /// blocking receive does before it posts. The small-message path of the
    /// C ABI's `MPI_Recv` from `MPI_ANY_SOURCE`.
    #[inline(always)]
    pub fn try_receive_inline_spinning(&self, buf: &mut [u8], tag: Option<i32>) -> Option<Status> {
        receive_inline(self.comm, MSource::Any, buf, tag, true)
    }
}

/// A message taken out of matching by a matched probe (`MPI_Message`);
/// receive it with [`Message::matched_receive_into`] or
/// [`Message::matched_receive_vec`].
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// // Take one message out of matching: no other receive can get it now.
/// let (msg, st) = world.any_process().matched_probe().unwrap();
/// let (v, _) = msg.matched_receive_vec::<u8>().unwrap();
/// assert_eq!(v.len(), st.bytes());
/// ```
///
/// It carries the thread level of the communicator it came from, as every
/// handle does: under `Single` and `Funneled` it stays on its thread.
#[must_use = "a matched message must be received"]
pub struct Message<'u, L: Level = Threading::Single> {
    pub(crate) rt: &'u Runtime,
    pub(crate) msg: Option<oxmpi_pml::Message>,
    _level: std::marker::PhantomData<L::Marker>,
}

impl<L: Level> std::fmt::Debug for Message<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message").field("msg", &self.msg).finish()
    }
}

impl<'u, L: Level> Message<'u, L> {
    fn new(rt: &'u Runtime, msg: Option<oxmpi_pml::Message>) -> Self {
        Message {
            rt,
            msg,
            _level: std::marker::PhantomData,
        }
    }

    /// `MPI_Mrecv` into `buf`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (msg, st) = world.any_process().matched_probe().unwrap();
    /// // Size the buffer from the status.
    /// let mut buf = vec![0u32; st.count::<u32>().unwrap()];
    /// msg.matched_receive_into(&mut buf[..]).unwrap();
    /// ```
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
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (msg, st) = world.any_process().matched_probe_with_tag(9).unwrap();
    /// let (v, st2) = msg.matched_receive_vec::<f64>().unwrap();
    /// assert_eq!(v.len() * 8, st.bytes());
    /// assert_eq!(st2.source_rank(), st.source_rank());
    /// ```
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

impl<L: Level> Drop for Message<'_, L> {
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

        /// Posts a receive of `pb` with `tag` from this source (inactive
        /// when `persistent`: `MPI_Recv_init`); the runtime and request.
        #[inline(always)]
        fn post_recv(
            &self,
            pb: PBuffer,
            tag: MTag,
            persistent: bool,
        ) -> Result<(&'u Runtime, ReqId)> {
            let (rt, ctx) = self.rt_ctx();
            let src = self.match_source()?;
            let id = rt.pml.with(|o| {
                if persistent {
                    o.recv_init(pb, src, tag, ctx)
                } else {
                    o.irecv(pb, src, tag, ctx)
                }
            })?;
            Ok((rt, id))
        }

        /// A blocking receive of `pb`: the PML's outcome (a failed transfer
        /// is the inner error).
        fn recv_now(
            &self,
            pb: PBuffer,
            tag: MTag,
        ) -> Result<std::result::Result<oxmpi_pml::Status, oxmpi_pml::PmlError>> {
            let (rt, ctx) = self.rt_ctx();
            let src = self.match_source()?;
            Ok(rt.pml.recv(pb, src, tag, ctx))
        }
    }
}

/// Receives and probes; implemented by [`Process`] and [`AnyProcess`].
///
/// ```no_run
/// use oxmpi::traits::*;
///
/// // Written once for a given rank or for any rank.
/// fn sum_from<'u>(from: &impl Source<'u>) -> i64 {
///     let (v, _) = from.receive_vec::<i64>().unwrap();
///     v.iter().sum()
/// }
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// if world.rank() != 0 {
///     world.process_at_rank(0).send(&[1i64, 2, 3][..]).unwrap();
/// } else if world.size() > 1 {
///     let first = sum_from(&world.process_at_rank(1));
///     let rest: i64 = (2..world.size()).map(|_| sum_from(&world.any_process())).sum();
///     println!("{}", first + rest);
/// }
/// ```
pub trait Source<'u, L: Level = Threading::Single>: sealed::Endpoint<'u> {
    /// `MPI_Recv` into `buf` with any tag.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut row = [0f64; 128];
    /// let st = world.process_at_rank(0).receive_into(&mut row[..]).unwrap();
    /// println!("{} of 128 values", st.count::<f64>().unwrap());
    /// ```
    fn receive_into<B: BufferMut + ?Sized>(&self, buf: &mut B) -> Result<Status> {
        self.receive_into_with_tag(buf, AnyTag)
    }

    /// `MPI_Recv` into `buf` with `tag`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut halo = vec![0f32; 64];
    /// let st = world.any_process().receive_into_with_tag(&mut halo[..], 7).unwrap();
    /// assert_eq!(st.tag(), 7);
    /// ```
    fn receive_into_with_tag<B: BufferMut + ?Sized>(
        &self,
        buf: &mut B,
        tag: impl TagSpec,
    ) -> Result<Status> {
        let tag = tag.to_match()?;
        status_result(self.recv_now(buf.pml_buffer_mut()?, tag)?)
    }

    /// `MPI_Recv` of one value.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (n, st) = world.process_at_rank(0).receive::<u64>().unwrap();
    /// assert_eq!(st.source_rank(), 0);
    /// println!("got {n}");
    /// ```
    fn receive<T: Equivalence + Default>(&self) -> Result<(T, Status)> {
        let mut v = T::default();
        let st = self.receive_into(&mut v)?;
        Ok((v, st))
    }

    /// Probes, then receives the whole message into a new vector.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (v, st) = world.any_process().receive_vec::<i32>().unwrap();
    /// assert_eq!(v.len(), st.count::<i32>().unwrap());
    /// ```
    fn receive_vec<T: Equivalence + Default>(&self) -> Result<(Vec<T>, Status)> {
        self.receive_vec_with_tag(AnyTag)
    }

    /// [`Source::receive_vec`] with `tag`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (name, _) = world.process_at_rank(0).receive_vec_with_tag::<u8>(2).unwrap();
    /// println!("{}", String::from_utf8_lossy(&name));
    /// ```
    fn receive_vec_with_tag<T: Equivalence + Default>(
        &self,
        tag: impl TagSpec,
    ) -> Result<(Vec<T>, Status)> {
        let (m, _) = self.matched_probe_with_tag(tag)?;
        m.matched_receive_vec()
    }

    /// `MPI_Probe` with any tag.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let st = world.any_process().probe().unwrap();
    /// // Receive exactly that message: from its source, with its tag.
    /// let mut buf = vec![0u8; st.bytes()];
    /// let from = world.process_at_rank(st.source_rank());
    /// from.receive_into_with_tag(&mut buf[..], st.tag()).unwrap();
    /// ```
    fn probe(&self) -> Result<Status> {
        self.probe_with_tag(AnyTag)
    }

    /// `MPI_Probe` with `tag`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let st = world.any_process().probe_with_tag(4).unwrap();
    /// let from = world.process_at_rank(st.source_rank());
    /// let (v, _) = from.receive_vec_with_tag::<u16>(4).unwrap();
    /// assert_eq!(v.len() * 2, st.bytes());
    /// ```
    fn probe_with_tag(&self, tag: impl TagSpec) -> Result<Status> {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        Ok(Status::from_pml(rt.pml.probe(src, tag, ctx)?))
    }

    /// `MPI_Iprobe` with `tag`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// // Work until a stop message (tag 99) is waiting.
    /// while world.any_process().immediate_probe_with_tag(99).unwrap().is_none() {
    ///     // ... one step of work ...
    /// }
    /// let (_stop, _) = world.any_process().receive_vec_with_tag::<u8>(99).unwrap();
    /// ```
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
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// match world.any_process().immediate_probe().unwrap() {
    ///     Some(st) => println!("{} bytes from rank {} are waiting", st.bytes(), st.source_rank()),
    ///     None => println!("nothing yet"),
    /// }
    /// ```
    fn immediate_probe(&self) -> Result<Option<Status>> {
        self.immediate_probe_with_tag(AnyTag)
    }

    /// `MPI_Mprobe` with any tag.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (msg, st) = world.any_process().matched_probe().unwrap();
    /// let mut buf = vec![0u8; st.bytes()];
    /// msg.matched_receive_into(&mut buf[..]).unwrap();
    /// ```
    fn matched_probe(&self) -> Result<(Message<'u, L>, Status)> {
        self.matched_probe_with_tag(AnyTag)
    }

    /// `MPI_Mprobe` with `tag`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (msg, st) = world.any_process().matched_probe_with_tag(3).unwrap();
    /// assert_eq!(st.tag(), 3);
    /// let (v, _) = msg.matched_receive_vec::<f64>().unwrap();
    /// ```
    fn matched_probe_with_tag(&self, tag: impl TagSpec) -> Result<(Message<'u, L>, Status)> {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        let m = rt.pml.mprobe(src, tag, ctx)?;
        let st = message_status(m.as_ref());
        Ok((Message::new(rt, m), st))
    }

    /// `MPI_Improbe` with `tag`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let found = world.any_process().immediate_matched_probe_with_tag(5).unwrap();
    /// if let Some((msg, st)) = found {
    ///     let (v, _) = msg.matched_receive_vec::<i64>().unwrap();
    ///     println!("{} values from rank {}", v.len(), st.source_rank());
    /// }
    /// ```
    fn immediate_matched_probe_with_tag(
        &self,
        tag: impl TagSpec,
    ) -> Result<Option<(Message<'u, L>, Status)>> {
        let (rt, ctx) = self.rt_ctx();
        let src = self.match_source()?;
        let tag = tag.to_match()?;
        Ok(rt.pml.with(|o| o.improbe(src, tag, ctx))?.map(|m| {
            let st = message_status(m.as_ref());
            (Message::new(rt, m), st)
        }))
    }

    /// `MPI_Irecv` into `buf` with any tag, in `scope`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
    /// oxmpi::request::scope(|s| {
    ///     let ra = world.process_at_rank(0).immediate_receive_into(s, &mut a).unwrap();
    ///     let rb = world.any_process().immediate_receive_into(s, &mut b).unwrap();
    ///     oxmpi::request::wait_all(vec![ra, rb]).unwrap();
    /// });
    /// ```
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
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut ghost = vec![0f64; 32];
    /// oxmpi::request::scope(|s| {
    ///     let r = world.any_process().immediate_receive_into_with_tag(s, &mut ghost[..], 1).unwrap();
    ///     // ... compute the interior while the ghost cells arrive ...
    ///     let st = r.wait().unwrap();
    ///     assert_eq!(st.tag(), 1);
    /// });
    /// ```
    fn immediate_receive_into_with_tag<'a, 's, B: BufferMut + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a mut B,
        tag: impl TagSpec,
    ) -> Result<Request<'a, 's>>
    where
        'u: 'a,
    {
        let (rt, id) = self.post_recv(buf.pml_buffer_mut()?, tag.to_match()?, false)?;
        Ok(scope.register(rt, id))
    }

    /// `MPI_Recv_init`: a persistent receive into `buf` with `tag`, in
    /// `scope` (see [`PersistentRequest`]).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut inb = [0i32; 8];
    /// oxmpi::request::scope(|s| {
    ///     let mut recv = world.any_process().receive_init(s, &mut inb, 4).unwrap();
    ///     for _ in 0..3 {
    ///         recv.start().unwrap();
    ///         recv.wait().unwrap();
    ///     }
    /// });
    /// ```
    fn receive_init<'a, 's, B: BufferMut + ?Sized>(
        &self,
        scope: &'s Scope<'a>,
        buf: &'a mut B,
        tag: impl TagSpec,
    ) -> Result<PersistentRequest<'a, 's>>
    where
        'u: 'a,
    {
        let (rt, id) = self.post_recv(buf.pml_buffer_mut()?, tag.to_match()?, true)?;
        Ok(scope.register_persistent(rt, id))
    }

    /// `MPI_Recv_init` into an owned vector (see
    /// [`OwnedPersistentRequest`](crate::request::OwnedPersistentRequest)).
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut recv = world.any_process().receive_init_owned(vec![0u8; 256], 6).unwrap();
    /// for _ in 0..3 {
    ///     recv.start().unwrap();
    ///     let st = recv.wait().unwrap();
    ///     println!("{:?}", &recv.buffer().unwrap()[..st.bytes()]);
    /// }
    /// let buf: Vec<u8> = recv.into_buffer();
    /// ```
    fn receive_init_owned<T: Equivalence>(
        &self,
        mut buf: Vec<T>,
        tag: impl TagSpec,
    ) -> Result<crate::request::OwnedPersistentRequest<'u, Vec<T>, L>> {
        let (rt, id) = self.post_recv(buf.pml_buffer_mut()?, tag.to_match()?, true)?;
        Ok(crate::request::OwnedPersistentRequest::new(rt, id, buf))
    }

    /// `MPI_Irecv` into an owned vector, given back by `wait`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let req = world.process_at_rank(0).immediate_receive_owned(vec![0u64; 32], 0).unwrap();
    /// // ... the request owns the vector until it completes ...
    /// let (buf, st) = req.wait().unwrap();
    /// assert_eq!(buf.len(), 32);
    /// ```
    fn immediate_receive_owned<T: Equivalence>(
        &self,
        mut buf: Vec<T>,
        tag: impl TagSpec,
    ) -> Result<OwnedRequest<'u, Vec<T>, L>> {
        let (rt, id) = self.post_recv(buf.pml_buffer_mut()?, tag.to_match()?, false)?;
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
            detail: 0,
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
        source_of(self.rank, self.comm.p2p_size)
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

/// A receive's source chosen at run time (see [`Communicator::peer`]).
///
/// ```no_run
/// use oxmpi::traits::*;
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// let any: oxmpi::Peer = world.peer(None);
/// let (v, _) = any.receive_vec::<u8>().unwrap();
/// # drop(v);
/// ```
#[derive(Debug)]
pub enum Peer<'c, 'u, L: Level = Threading::Single> {
    /// One process (or `PROC_NULL`).
    Rank(Process<'c, 'u, L>),
    /// Any process (`MPI_ANY_SOURCE`).
    Any(AnyProcess<'c, 'u, L>),
}

impl<'u, L: Level> Source<'u, L> for Peer<'_, 'u, L> {}

impl<'u, L: Level> sealed::Endpoint<'u> for Peer<'_, 'u, L> {
    fn rt_ctx(&self) -> (&'u Runtime, u16) {
        match self {
            Peer::Rank(p) => p.rt_ctx(),
            Peer::Any(a) => a.rt_ctx(),
        }
    }
    fn match_source(&self) -> Result<MSource> {
        match self {
            Peer::Rank(p) => p.match_source(),
            Peer::Any(a) => a.match_source(),
        }
    }
}

impl<'c, 'u, L: Level> Process<'c, 'u, L> {
    /// The process's rank in its communicator.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let last = world.process_at_rank(world.size() - 1);
    /// assert_eq!(last.rank(), world.size() - 1);
    /// assert_eq!(world.null_process().rank(), oxmpi::PROC_NULL);
    /// ```
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// Checked destination; `None` for `PROC_NULL`.
    pub(crate) fn dest(&self) -> Result<Option<u32>> {
        match source_of(self.rank, self.comm.p2p_size)? {
            MSource::Rank(r) => Ok(Some(r)),
            _ => Ok(None),
        }
    }

    fn send_mode<B: Buffer + ?Sized>(&self, buf: &B, tag: i32, mode: SendMode) -> Result<()> {
        status_result(self.send_now(buf, tag, mode)?).map(drop)
    }

    /// A blocking send of `buf` in `mode`: the PML's outcome (a failed
    /// transfer is the inner error; to `PROC_NULL`, its empty status).
    pub(crate) fn send_now<B: Buffer + ?Sized>(
        &self,
        buf: &B,
        tag: i32,
        mode: SendMode,
    ) -> Result<std::result::Result<oxmpi_pml::Status, oxmpi_pml::PmlError>> {
        check_tag(tag)?;
        let Some(dst) = self.dest()? else {
            return Ok(Ok(oxmpi_pml::Status::proc_null()));
        };
        Ok(self
            .comm
            .rt()
            .pml
            .send(buf.pml_buffer()?, dst, tag, self.comm.ctx, mode))
    }

    /// `MPI_Send` with tag 0.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// if world.rank() == 1 {
    ///     world.process_at_rank(0).send(&[1u32, 2, 3][..]).unwrap();
    /// } else if world.rank() == 0 {
    ///     let (v, _) = world.process_at_rank(1).receive_vec::<u32>().unwrap();
    ///     assert_eq!(v, [1, 2, 3]);
    /// }
    /// ```
    pub fn send<B: Buffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.send_mode(buf, 0, SendMode::Standard)
    }

    /// `MPI_Send`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// if world.rank() == 0 {
    ///     world.process_at_rank(1).send_with_tag(&3.5f64, 42).unwrap();
    /// } else if world.rank() == 1 {
    ///     let (x, st) = world.process_at_rank(0).receive::<f64>().unwrap();
    ///     assert_eq!((x, st.tag()), (3.5, 42));
    /// }
    /// ```
    pub fn send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: i32) -> Result<()> {
        self.send_mode(buf, tag, SendMode::Standard)
    }

    /// `MPI_Ssend`: returns once the receive has matched.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// if world.rank() == 0 {
    ///     // Returns only once rank 1 has matched the message.
    ///     world.process_at_rank(1).synchronous_send_with_tag(&[0u8; 1000][..], 1).unwrap();
    /// } else if world.rank() == 1 {
    ///     let (v, _) = world.process_at_rank(0).receive_vec_with_tag::<u8>(1).unwrap();
    ///     assert_eq!(v.len(), 1000);
    /// }
    /// ```
    pub fn synchronous_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: i32) -> Result<()> {
        self.send_mode(buf, tag, SendMode::Synchronous)
    }

    /// `MPI_Bsend`: copied into the attached buffer (see
    /// [`Universe::buffer_attach`]); returns at once.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// universe.buffer_attach(vec![0u8; 1 << 16]).unwrap();
    /// if world.rank() == 0 {
    ///     world.process_at_rank(1).buffered_send_with_tag(&[7i32; 100][..], 2).unwrap();
    /// } else if world.rank() == 1 {
    ///     world.process_at_rank(0).receive_vec_with_tag::<i32>(2).unwrap();
    /// }
    /// universe.buffer_detach().unwrap();
    /// ```
    pub fn buffered_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: i32) -> Result<()> {
        self.send_mode(buf, tag, SendMode::Buffered)
    }

    /// `MPI_Rsend`: the matching receive must already be posted.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut x = 0u64;
    /// oxmpi::request::scope(|s| {
    ///     let recv = match world.rank() {
    ///         1 => Some(world.process_at_rank(0).immediate_receive_into(s, &mut x).unwrap()),
    ///         _ => None,
    ///     };
    ///     world.barrier().unwrap(); // from here rank 1's receive is posted
    ///     if world.rank() == 0 {
    ///         world.process_at_rank(1).ready_send_with_tag(&5u64, 0).unwrap();
    ///     }
    ///     if let Some(r) = recv {
    ///         r.wait().unwrap();
    ///     }
    /// });
    /// ```
    pub fn ready_send_with_tag<B: Buffer + ?Sized>(&self, buf: &B, tag: i32) -> Result<()> {
        self.send_mode(buf, tag, SendMode::Ready)
    }

    /// Starts a send of `buf` in `mode` (`MPI_Isend`), or creates it
    /// inactive when `persistent` (`MPI_Send_init`); to `PROC_NULL` it is a
    /// request that completes at once (each time it is started) with the
    /// `PROC_NULL` status.
    #[inline(always)]
    pub(crate) fn start_send(
        &self,
        buf: PBuffer,
        tag: i32,
        mode: SendMode,
        persistent: bool,
    ) -> Result<ReqId> {
        check_tag(tag)?;
        let dst = self.dest()?;
        let ctx = self.comm.ctx;
        if let (Some(d), false) = (dst, persistent) {
            // The common case, kept small enough to inline: a small send
            // then runs with no call but the BTL's.
            return Ok(self
                .comm
                .rt()
                .pml
                .with(|o| o.isend(buf, d, tag, ctx, mode))?);
        }
        self.start_other(buf, dst, tag, mode, persistent)
    }

    /// Sends `data` with `tag` if it can go out complete inside this call,
    /// with no request (seed 000's immediate send: a small message in
    /// standard mode to a rank whose eager transport has room). `false`
    /// sends nothing: start an ordinary send then, which also reports any
    /// error (a negative tag, a rank outside the communicator). It is
    /// always false where the library is shared between threads
    /// (`MPI_THREAD_MULTIPLE`, or with the progress thread): the ordinary
    /// send takes the lock. The small-message path of the C ABI's
    /// `MPI_Isend` and `MPI_Send`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// if world.rank() == 0 {
    ///     let p = world.process_at_rank(1);
    ///     if !p.try_send_inline(&7u32.to_le_bytes(), 3) {
    ///         p.send_with_tag(&7u32.to_le_bytes()[..], 3).unwrap();
    ///     }
    /// } else if world.rank() == 1 {
    ///     let (v, _) = world.process_at_rank(0).receive_vec_with_tag::<u8>(3).unwrap();
    ///     assert_eq!(v, 7u32.to_le_bytes());
    /// }
    /// ```
    #[inline(always)]
    pub fn try_send_inline(&self, data: &[u8], tag: i32) -> bool {
        let Some(dst) = self.inline_dst(tag) else {
            return false;
        };
        self.comm.rt().pml.try_sendi(data, dst, tag, self.comm.ctx)
    }

    /// The rank of a send inside the call with `tag`: `None` for a negative
    /// tag or a rank outside the communicator (`PROC_NULL` too), which only
    /// the ordinary paths report.
    #[inline(always)]
    fn inline_dst(&self, tag: i32) -> Option<u32> {
        (tag >= 0 && (0..self.comm.p2p_size).contains(&self.rank)).then_some(self.rank as u32)
    }

    /// [`Process::try_send_inline`] for a message it does not take (above
    /// the immediate-send limit, or refused): sends `data` with `tag` in
    /// standard mode if the eager transport to this process completes the
    /// send inside this call (a message that fits its eager limit, prepared
    /// in place, or copied where the transport does not prepare in place,
    /// on a transport whose send is done on return, such as shared memory),
    /// with no request. `false` sends nothing: start an ordinary send then, which
    /// also reports any error. Always false where the library is shared
    /// between threads. The path `MPI_Send` and `MPI_Isend` try first for
    /// such messages.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let data = vec![7u8; 2048];
    /// if world.rank() == 0 && world.size() > 1 {
    ///     let p = world.process_at_rank(1);
    ///     if !p.try_send_eager(&data, 4) {
    ///         p.send_with_tag(&data[..], 4).unwrap();
    ///     }
    /// } else if world.rank() == 1 {
    ///     let (v, _) = world.process_at_rank(0).receive_vec_with_tag::<u8>(4).unwrap();
    ///     assert_eq!(v, data);
    /// }
    /// ```
    pub fn try_send_eager(&self, data: &[u8], tag: i32) -> bool {
        self.inline_dst(tag).is_some_and(|dst| {
            self.comm
                .rt()
                .pml
                .try_send_eager(data, dst, tag, self.comm.ctx)
        })
    }

    /// Receives into `buf` a message from this process with `tag` (`None`:
    /// any tag) if it is complete inside this call with no request: a small
    /// message over the eager transport that is already here, next from
    /// this process, fits `buf`, and that no other receive or earlier
    /// message could claim (nothing posted, nothing unexpected). Its status;
    /// `None` has received nothing: receive as usual then, which also
    /// reports any error (a negative tag, a rank outside the communicator, a
    /// message longer than `buf`). It is always `None` where the library is
    /// shared between threads, as for [`Process::try_send_inline`]. The
    /// small-message path of the C ABI's `MPI_Irecv`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// if world.rank() == 0 {
    ///     world.process_at_rank(1).send_with_tag(&7u32.to_le_bytes()[..], 3).unwrap();
    /// } else if world.rank() == 1 {
    ///     let p = world.process_at_rank(0);
    ///     let mut buf = [0u8; 4];
    ///     let st = match p.try_receive_inline(&mut buf, Some(3)) {
    ///         Some(st) => st,
    ///         None => p.receive_into_with_tag(&mut buf[..], 3).unwrap(),
    ///     };
    ///     assert_eq!((st.bytes(), buf), (4, 7u32.to_le_bytes()));
    /// }
    /// ```
    #[inline(always)]
    pub fn try_receive_inline(&self, buf: &mut [u8], tag: Option<i32>) -> Option<Status> {
        self.receive_inline(buf, tag, false)
    }

    /// [`Process::try_receive_inline`] that, while the library spins (not
    /// oversubscribed), also waits a little for such a message, as a
    /// blocking receive does before it posts. The small-message path of the
    /// C ABI's `MPI_Recv`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// // A ping-pong between ranks 0 and 1: each reply is usually here
    /// // within the wait.
    /// if world.rank() < 2 && world.size() >= 2 {
    ///     let peer = world.process_at_rank(1 - world.rank());
    ///     let mut buf = [0u8; 8];
    ///     for round in 0..100 {
    ///         if (round + world.rank()) % 2 == 0 {
    ///             peer.send_with_tag(&buf[..], 1).unwrap();
    ///         } else if peer.try_receive_inline_spinning(&mut buf, Some(1)).is_none() {
    ///             peer.receive_into_with_tag(&mut buf[..], 1).unwrap();
    ///         }
    ///     }
    /// }
    /// ```
    #[inline(always)]
    pub fn try_receive_inline_spinning(&self, buf: &mut [u8], tag: Option<i32>) -> Option<Status> {
        self.receive_inline(buf, tag, true)
    }

    #[inline(always)]
    fn receive_inline(&self, buf: &mut [u8], tag: Option<i32>, blocking: bool) -> Option<Status> {
        if !(0..self.comm.p2p_size).contains(&self.rank) {
            return None;
        }
        receive_inline(
            self.comm,
            MSource::Rank(self.rank as u32),
            buf,
            tag,
            blocking,
        )
    }

    /// [`Process::start_send`] of a persistent send, or to `PROC_NULL` (a
    /// receive from it, complete at once each time it is started).
    #[inline(never)]
    fn start_other(
        &self,
        buf: PBuffer,
        dst: Option<u32>,
        tag: i32,
        mode: SendMode,
        persistent: bool,
    ) -> Result<ReqId> {
        let ctx = self.comm.ctx;
        Ok(self.comm.rt().pml.with(|o| match dst {
            // Only a persistent send to a rank comes here.
            Some(d) => o.send_init(buf, d, tag, ctx, mode),
            None => {
                let empty = PBuffer::Contig(MemRegion::EMPTY);
                if persistent {
                    o.recv_init(empty, MSource::ProcNull, MTag::Any, ctx)
                } else {
                    o.irecv(empty, MSource::ProcNull, MTag::Any, ctx)
                }
            }
        })?)
    }

    #[inline]
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
        let id = self.start_send(buf.pml_buffer()?, tag, mode, false)?;
        Ok(scope.register(self.comm.rt(), id))
    }

    /// `MPI_Isend` with tag 0, in `scope`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (r, n) = (world.rank(), world.size());
    /// let data = [r; 16];
    /// oxmpi::request::scope(|s| {
    ///     let req = world.process_at_rank((r + 1) % n).immediate_send(s, &data).unwrap();
    ///     let (v, _) = world.process_at_rank((r + n - 1) % n).receive_vec::<i32>().unwrap();
    ///     req.wait().unwrap();
    ///     assert_eq!(v, [(r + n - 1) % n; 16]);
    /// });
    /// ```
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
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let (r, n) = (world.rank(), world.size());
    /// let (next, prev) = (world.process_at_rank((r + 1) % n), world.process_at_rank((r + n - 1) % n));
    /// let out = vec![r as f64; 8];
    /// let mut inb = vec![0f64; 8];
    /// oxmpi::request::scope(|s| {
    ///     let recv = prev.immediate_receive_into_with_tag(s, &mut inb[..], 5).unwrap();
    ///     let send = next.immediate_send_with_tag(s, &out[..], 5).unwrap();
    ///     oxmpi::request::wait_all(vec![recv, send]).unwrap();
    /// });
    /// ```
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
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// if world.rank() == 0 {
    ///     oxmpi::request::scope(|s| {
    ///         let p = world.process_at_rank(1);
    ///         let req = p.immediate_synchronous_send_with_tag(s, &1u8, 3).unwrap();
    ///         req.wait().unwrap(); // rank 1 has matched the message
    ///     });
    /// } else if world.rank() == 1 {
    ///     world.process_at_rank(0).receive::<u8>().unwrap();
    /// }
    /// ```
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
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// universe.buffer_attach(vec![0u8; 1 << 20]).unwrap();
    /// let data = vec![1u16; 1024];
    /// if world.rank() == 0 {
    ///     oxmpi::request::scope(|s| {
    ///         let p = world.process_at_rank(1);
    ///         let req = p.immediate_buffered_send_with_tag(s, &data[..], 4).unwrap();
    ///         req.wait().unwrap(); // the data was copied into the attached buffer
    ///     });
    /// } else if world.rank() == 1 {
    ///     world.process_at_rank(0).receive_vec_with_tag::<u16>(4).unwrap();
    /// }
    /// universe.buffer_detach().unwrap();
    /// ```
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
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let mut x = 0i32;
    /// oxmpi::request::scope(|s| {
    ///     let recv = match world.rank() {
    ///         1 => Some(world.process_at_rank(0).immediate_receive_into(s, &mut x).unwrap()),
    ///         _ => None,
    ///     };
    ///     world.barrier().unwrap(); // from here rank 1's receive is posted
    ///     if world.rank() == 0 {
    ///         let p = world.process_at_rank(1);
    ///         p.immediate_ready_send_with_tag(s, &7i32, 0).unwrap().wait().unwrap();
    ///     }
    ///     if let Some(r) = recv {
    ///         r.wait().unwrap();
    ///     }
    /// });
    /// ```
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
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let req = world.process_at_rank(0).immediate_send_owned(vec![world.rank(); 4]).unwrap();
    /// if world.rank() == 0 {
    ///     for _ in 0..world.size() {
    ///         world.any_process().receive_vec::<i32>().unwrap();
    ///     }
    /// }
    /// let (v, _) = req.wait().unwrap();
    /// assert_eq!(v, [world.rank(); 4]);
    /// ```
    pub fn immediate_send_owned<T: Equivalence>(
        &self,
        buf: Vec<T>,
    ) -> Result<OwnedRequest<'u, Vec<T>, L>> {
        self.immediate_send_owned_with_tag(buf, 0)
    }

    /// `MPI_Isend` of an owned vector with `tag`.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// let req = next.immediate_send_owned_with_tag(vec![0.5f32; 100], 12).unwrap();
    /// let (got, _) = world.any_process().receive_vec_with_tag::<f32>(12).unwrap();
    /// let (sent, _) = req.wait().unwrap();
    /// assert_eq!(got, sent);
    /// ```
    pub fn immediate_send_owned_with_tag<T: Equivalence>(
        &self,
        buf: Vec<T>,
        tag: i32,
    ) -> Result<OwnedRequest<'u, Vec<T>, L>> {
        let id = self.start_send(buf.pml_buffer()?, tag, SendMode::Standard, false)?;
        Ok(OwnedRequest::new(self.comm.rt(), id, buf))
    }
}

impl<L: Level> Universe<L> {
    /// `MPI_Buffer_attach`: the buffer buffered sends copy into, owned by
    /// the library until [`Universe::buffer_detach`] gives it back.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// universe.buffer_attach(vec![0u8; 1 << 20]).unwrap();
    /// let next = world.process_at_rank((world.rank() + 1) % world.size());
    /// next.buffered_send_with_tag(&[1u8; 512][..], 0).unwrap();
    /// world.any_process().receive_vec::<u8>().unwrap();
    /// let buf = universe.buffer_detach().unwrap();
    /// assert_eq!(buf.len(), 1 << 20);
    /// ```
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
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// universe.buffer_attach(vec![0u8; 4096]).unwrap();
    /// // ... buffered sends ...
    /// let buf = universe.buffer_detach().unwrap(); // once every message has left it
    /// assert_eq!(buf.len(), 4096);
    /// ```
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
