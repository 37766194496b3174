//! Start-up and shut-down: [`initialize`], [`initialize_with_threading`],
//! and the [`Universe`] handle whose last drop finalizes.
//!
//! Everything that talks to other ranks borrows a universe handle, so using
//! MPI after finalize does not compile:
//!
//! ```compile_fail
//! let universe = oxmpi::initialize().unwrap();
//! let world = universe.world();
//! drop(universe); // error: `universe` is still borrowed by `world`
//! world.barrier().unwrap();
//! ```
//!
//! The thread level is part of the type. A universe initialized for
//! [`Threading::Multiple`] is `Send + Sync`, so its communicators can be
//! used from several threads at once; the others are not `Sync` (and
//! `Single`/`Funneled` not even `Send`), so the compiler refuses what the
//! level forbids:
//!
//! ```compile_fail
//! let universe = oxmpi::initialize().unwrap(); // Threading::Single
//! let world = universe.world();
//! std::thread::scope(|s| {
//!     s.spawn(|| world.rank()); // error: the communicator is not Sync
//! });
//! ```

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, Weak};

use crate::comm::Communicator;
use crate::error::{Error, ErrorClass, Result};
use crate::runtime::{Runtime, ThreadLevel, SELF_CTX, WORLD_CTX};

/// The thread levels as types: pass one to [`initialize_with_threading`]
/// (`oxmpi::initialize_with_threading(Threading::Multiple)`).
///
/// ```no_run
/// use oxmpi::{ThreadLevel, Threading};
/// let universe = oxmpi::initialize_with_threading(Threading::Serialized).unwrap();
/// assert_eq!(universe.threading(), ThreadLevel::Serialized);
/// ```
#[allow(non_snake_case)]
pub mod Threading {
    use std::cell::Cell;
    use std::marker::PhantomData;

    use crate::runtime::ThreadLevel;

    mod sealed {
        pub trait Sealed {}
    }

    /// A thread level (one of the four unit types of this module). Its
    /// `Marker` decides whether the universe and every handle borrowing it
    /// are `Send` and `Sync`.
    ///
    /// ```
    /// use oxmpi::{ThreadLevel, Threading::{self, Level}};
    /// fn level_of<L: Level>(_: L) -> ThreadLevel {
    ///     L::LEVEL
    /// }
    /// assert_eq!(level_of(Threading::Funneled), ThreadLevel::Funneled);
    /// ```
    pub trait Level: sealed::Sealed + Copy + Default + 'static {
        /// The level's value.
        ///
        /// ```
        /// use oxmpi::{ThreadLevel, Threading::{Level, Multiple}};
        /// assert_eq!(Multiple::LEVEL, ThreadLevel::Multiple);
        /// ```
        const LEVEL: ThreadLevel;
        /// Zero-sized; carries the level's `Send`/`Sync`.
        ///
        /// ```
        /// use oxmpi::Threading::{Level, OneAtATime, Serialized};
        /// let marker: <Serialized as Level>::Marker = Default::default();
        /// let _: OneAtATime = marker;
        /// assert_eq!(std::mem::size_of_val(&marker), 0);
        /// ```
        type Marker: Copy + Default + std::fmt::Debug;
    }

    /// `MPI_THREAD_SINGLE`: the handles are neither `Send` nor `Sync`.
    ///
    /// ```no_run
    /// use oxmpi::{ThreadLevel, Threading, Universe};
    /// // What `oxmpi::initialize` gives.
    /// let universe: Universe<Threading::Single> = oxmpi::initialize().unwrap();
    /// assert_eq!(universe.threading(), ThreadLevel::Single);
    /// ```
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Single;
    /// `MPI_THREAD_FUNNELED`: only the initializing thread calls MPI, so
    /// the handles are neither `Send` nor `Sync`.
    ///
    /// ```no_run
    /// use oxmpi::Threading;
    /// let universe = oxmpi::initialize_with_threading(Threading::Funneled).unwrap();
    /// // Threads compute; only this one calls MPI.
    /// let sum: u64 = std::thread::scope(|s| s.spawn(|| (1..=100u64).sum()).join().unwrap());
    /// universe.world().process_at_rank(0).send(&sum).unwrap();
    /// ```
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Funneled;
    /// `MPI_THREAD_SERIALIZED`: any one thread at a time: `Send`, not
    /// `Sync`.
    ///
    /// ```no_run
    /// use oxmpi::Threading;
    /// let universe = oxmpi::initialize_with_threading(Threading::Serialized).unwrap();
    /// // A handle can move to another thread (one thread at a time calls MPI).
    /// let handle = universe.clone();
    /// let rank = std::thread::spawn(move || handle.world().rank()).join().unwrap();
    /// assert_eq!(rank, universe.world().rank());
    /// ```
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Serialized;
    /// `MPI_THREAD_MULTIPLE`: `Send` and `Sync`.
    ///
    /// ```no_run
    /// use oxmpi::Threading;
    /// let universe = oxmpi::initialize_with_threading(Threading::Multiple).unwrap();
    /// let world = universe.world();
    /// std::thread::scope(|s| {
    ///     for t in 0..4 {
    ///         let world = &world;
    ///         s.spawn(move || {
    ///             let me = world.process_at_rank(world.rank());
    ///             let mut got = -1;
    ///             me.send_receive_into(&t, t, &me, &mut got, t).unwrap();
    ///             assert_eq!(got, t);
    ///         });
    ///     }
    /// });
    /// ```
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Multiple;

    /// Not `Send`, not `Sync`.
    ///
    /// ```
    /// use oxmpi::Threading::{Confined, Funneled, Level};
    /// let marker: <Funneled as Level>::Marker = Default::default();
    /// let _: Confined = marker;
    /// ```
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Confined(PhantomData<*const ()>);
    /// `Send`, not `Sync`.
    ///
    /// ```
    /// use oxmpi::Threading::OneAtATime;
    /// fn movable<T: Send>(_: T) {}
    /// movable(OneAtATime::default());
    /// ```
    #[derive(Clone, Copy, Debug, Default)]
    pub struct OneAtATime(PhantomData<Cell<()>>);
    /// `Send` and `Sync`.
    ///
    /// ```
    /// use oxmpi::Threading::{Level, Multiple, Shared};
    /// fn shareable<T: Send + Sync>(_: T) {}
    /// shareable(Shared);
    /// let _: Shared = <Multiple as Level>::Marker::default();
    /// ```
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Shared;

    impl sealed::Sealed for Single {}
    impl sealed::Sealed for Funneled {}
    impl sealed::Sealed for Serialized {}
    impl sealed::Sealed for Multiple {}
    impl Level for Single {
        const LEVEL: ThreadLevel = ThreadLevel::Single;
        type Marker = Confined;
    }
    impl Level for Funneled {
        const LEVEL: ThreadLevel = ThreadLevel::Funneled;
        type Marker = Confined;
    }
    impl Level for Serialized {
        const LEVEL: ThreadLevel = ThreadLevel::Serialized;
        type Marker = OneAtATime;
    }
    impl Level for Multiple {
        const LEVEL: ThreadLevel = ThreadLevel::Multiple;
        type Marker = Shared;
    }
}

use Threading::Level;

/// The process-wide state, shared by every handle.
static CURRENT: Mutex<Option<Weak<Runtime>>> = Mutex::new(None);
/// Set once MPI has been finalized (MPI cannot be initialized again).
static ENDED: Mutex<bool> = Mutex::new(false);

/// A handle on the initialized MPI library. Dropping the last handle (every
/// clone, and those [`universe`] handed out) finalizes MPI.
///
/// ```no_run
/// let universe = oxmpi::initialize().unwrap();
/// let world = universe.world();
/// println!("rank {} of {} ({:?})", world.rank(), world.size(), universe.threading());
/// drop(world);
/// universe.finalize().unwrap(); // or let the last handle drop
/// ```
pub struct Universe<L: Level = Threading::Single> {
    pub(crate) rt: Arc<Runtime>,
    _level: PhantomData<L::Marker>,
}

impl<L: Level> std::fmt::Debug for Universe<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Universe")
            .field("rank", &self.rt.rank)
            .field("size", &self.rt.size)
            .field("level", &self.rt.level)
            .finish()
    }
}

impl<L: Level> Clone for Universe<L> {
    fn clone(&self) -> Self {
        Universe {
            rt: self.rt.clone(),
            _level: PhantomData,
        }
    }
}

/// `MPI_Init`: initializes MPI for one thread.
///
/// ```no_run
/// let universe = oxmpi::initialize().expect("MPI start-up");
/// let world = universe.world();
/// println!("rank {} of {}", world.rank(), world.size());
/// ```
pub fn initialize() -> Result<Universe<Threading::Single>> {
    initialize_with_threading(Threading::Single)
}

/// `MPI_Init_thread`: initializes MPI at thread level `L`.
///
/// ```no_run
/// use oxmpi::Threading;
/// let universe = oxmpi::initialize_with_threading(Threading::Multiple).unwrap();
/// let world = universe.world();
/// std::thread::scope(|s| {
///     s.spawn(|| world.rank());
/// });
/// ```
pub fn initialize_with_threading<L: Level>(level: L) -> Result<Universe<L>> {
    let _ = level;
    let mut cur = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
    if cur.as_ref().is_some_and(|w| w.strong_count() > 0) {
        return Err(Error::new(
            ErrorClass::Other,
            "MPI is already initialized (use oxmpi::universe() to get a handle)",
        ));
    }
    if *ENDED.lock().unwrap_or_else(|p| p.into_inner()) {
        return Err(Error::new(
            ErrorClass::Other,
            "MPI was finalized and cannot be initialized again",
        ));
    }
    let rt = Arc::new(Runtime::init(L::LEVEL)?);
    *cur = Some(Arc::downgrade(&rt));
    Ok(Universe {
        rt,
        _level: PhantomData,
    })
}

/// `MPI_Initialized` and not yet finalized: whether a universe is alive.
///
/// ```
/// assert!(!oxmpi::is_initialized() || oxmpi::universe().is_some());
/// ```
pub fn is_initialized() -> bool {
    CURRENT
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(|w| w.strong_count() > 0)
}

/// `MPI_Finalized`: whether MPI has been finalized.
///
/// ```
/// let _ = oxmpi::is_finalized();
/// ```
pub fn is_finalized() -> bool {
    *ENDED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A handle on the application's universe, for a library that did not
/// initialize MPI itself; `None` when MPI is not initialized, or when it
/// was initialized at `Single` or `Funneled` and this is not the thread
/// that initialized it (at those levels no other thread may call MPI). The
/// handle is typed for a single thread (the most restrictive level),
/// whatever the application asked for.
///
/// ```no_run
/// fn library_call() -> Option<i32> {
///     let u = oxmpi::universe()?;
///     let r = u.world().rank();
///     Some(r)
/// }
/// ```
pub fn universe() -> Option<Universe<Threading::Single>> {
    let cur = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
    let rt = cur.as_ref()?.upgrade()?;
    // At `Single` and `Funneled` no other thread may call MPI; nor may one
    // while the engine is confined to another thread (`MPI_Init` of the C
    // layer, `Universe::confine_to_this_thread`).
    if (crate::confine::one_thread(rt.level) && !rt.is_main_thread()) || rt.pml.confined_elsewhere()
    {
        return None;
    }
    Some(Universe {
        rt,
        _level: PhantomData,
    })
}

impl<L: Level> Universe<L> {
    /// `MPI_COMM_WORLD`: every rank of the job.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// if world.rank() == 0 {
    ///     println!("{} ranks in the job", world.size());
    /// }
    /// ```
    pub fn world(&self) -> Communicator<'_, L> {
        Communicator::predefined(self, WORLD_CTX, (0..self.rt.size).collect(), self.rt.rank)
    }

    /// `MPI_COMM_SELF`: this rank alone.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let me = universe.self_();
    /// assert_eq!((me.rank(), me.size()), (0, 1));
    /// me.barrier().unwrap();
    /// ```
    pub fn self_(&self) -> Communicator<'_, L> {
        Communicator::predefined(self, SELF_CTX, vec![self.rt.rank], 0)
    }

    /// The thread level this universe was initialized with
    /// (`MPI_Query_thread`).
    ///
    /// ```no_run
    /// use oxmpi::{ThreadLevel, Threading};
    /// let universe = oxmpi::initialize_with_threading(Threading::Funneled).unwrap();
    /// assert!(universe.threading() >= ThreadLevel::Funneled);
    /// ```
    pub fn threading(&self) -> ThreadLevel {
        self.rt.level
    }

    /// Whether the calling thread initialized MPI (`MPI_Is_thread_main`).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize_with_threading(oxmpi::Threading::Multiple).unwrap();
    /// assert!(universe.is_thread_main());
    /// std::thread::scope(|s| {
    ///     s.spawn(|| assert!(!universe.is_thread_main()));
    /// });
    /// ```
    pub fn is_thread_main(&self) -> bool {
        self.rt.is_main_thread()
    }

    /// Promises that from now on this thread alone calls MPI (what
    /// `MPI_THREAD_SINGLE` and `MPI_THREAD_FUNNELED` promise; the C layer
    /// keeps a `Multiple` universe and calls this for them): the
    /// point-to-point engine then takes no lock per call. Checked, not
    /// trusted: a call from another thread afterwards fails (the engine
    /// panics, never races). Does nothing while a progress thread runs
    /// (`mpi_async_progress`), and a universe initialized at `Single` or
    /// `Funneled` is confined already.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize_with_threading(oxmpi::Threading::Multiple).unwrap();
    /// // This program turns out to use one thread after all.
    /// universe.confine_to_this_thread();
    /// universe.world().barrier().unwrap();
    /// ```
    pub fn confine_to_this_thread(&self) {
        self.rt.driver.confine_unless_running(&self.rt.pml);
    }

    /// `MPI_APPNUM`: which program of a multi-program launch this is.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// // Program 0 serves, the others are clients.
    /// let role = if universe.appnum() == 0 { "server" } else { "client" };
    /// println!("rank {} is a {role}", universe.world().rank());
    /// ```
    pub fn appnum(&self) -> u32 {
        self.rt.appnum
    }

    /// `MPI_UNIVERSE_SIZE`.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// assert!(universe.universe_size() >= universe.world().size() as u32);
    /// ```
    pub fn universe_size(&self) -> u32 {
        self.rt.universe_size
    }

    /// `MPI_TAG_UB`: the largest tag this job's PML carries ([`crate::TAG_UB`]
    /// under ob1; under cm, what the MTL's tag layout has room for).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// assert!(universe.tag_ub() >= 32767);
    /// ```
    pub fn tag_ub(&self) -> i32 {
        self.rt.pml.with(|o| o.max_tag()).unwrap_or(crate::TAG_UB)
    }

    /// The point-to-point engine in use (`ob1` or `cm`) and what carries
    /// its messages (the BTLs' names under ob1, the MTL's under cm).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let (pml, _) = universe.pml_name();
    /// assert!(pml == "ob1" || pml == "cm");
    /// ```
    pub fn pml_name(&self) -> (&'static str, Vec<&'static str>) {
        self.rt.pml.with(|o| (o.name(), o.btl_names()))
    }

    /// World ranks that share this node (including this one).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let local = universe.local_ranks();
    /// assert!(local.contains(&(world.rank() as u32)));
    /// println!("{} ranks on this node", local.len());
    /// ```
    pub fn local_ranks(&self) -> &[u32] {
        &self.rt.local_ranks
    }

    /// The collectives' algorithm selection (`coll_tuned_*` parameters),
    /// which the C layer's collectives follow.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// println!("allreduce: {}", universe.coll_tuned().allreduce.algorithm);
    /// ```
    pub fn coll_tuned(&self) -> &crate::CollTuned {
        &self.rt.coll_tuned
    }

    /// The protocol counters of the point-to-point engine: which protocol
    /// carried how many messages, bytes per peer.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let before = universe.counters();
    /// // ... traffic ...
    /// let after = universe.counters();
    /// println!("{} rendezvous, {} unexpected", after.rndv - before.rndv, after.unexpected - before.unexpected);
    /// ```
    pub fn counters(&self) -> oxmpi_pml::Counters {
        self.rt.pml.with(|o| o.counters())
    }

    /// What a program's own waiting loop does between two polls of its
    /// requests, the `polls`th (from 1): the same as the library's blocking
    /// waits, spin while under `pml_ob1_spin_count`, then yield the core
    /// (at once when oversubscribed). The C ABI's `MPI_Waitany` and
    /// `MPI_Waitsome` call it between their sweeps.
    ///
    /// ```no_run
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// let universe = oxmpi::initialize().unwrap();
    /// let done = AtomicBool::new(false);
    /// // ... another thread sets `done` ...
    /// let mut polls = 0;
    /// while !done.load(Ordering::Acquire) {
    ///     polls += 1;
    ///     universe.pause(polls);
    /// }
    /// ```
    #[inline]
    pub fn pause(&self, polls: u32) {
        self.rt.pml.pause(polls, false);
    }

    /// Waits until `done` holds, as the library's blocking waits do:
    /// progress passes (with the progress hook's work,
    /// [`Universe::set_progress_hook`]), spinning, then yielding the core,
    /// and past the spin acting on the launcher's failure notices (the
    /// requests that need a dead rank fail). `done` is called with the
    /// point-to-point engine locked: it must not call into this crate.
    ///
    /// ```no_run
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// let universe = oxmpi::initialize().unwrap();
    /// let done = AtomicBool::new(false);
    /// // ... work of the progress hook sets `done` ...
    /// universe.wait_for(|| done.load(Ordering::Acquire));
    /// ```
    pub fn wait_for(&self, mut done: impl FnMut() -> bool) {
        self.rt.pml.wait_until(|_| done().then_some(()));
    }

    /// One progress pass (what a test makes before it looks at its
    /// request); how many events it handled. With
    /// [`OwnedRequest::completed`](crate::request::OwnedRequest::completed),
    /// a sweep over many requests progresses once, not once per request.
    ///
    /// ```no_run
    /// use oxmpi::traits::*;
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let reqs: Vec<_> = (0..4)
    ///     .map(|t| world.any_process().immediate_receive_owned(vec![0u8; 8], t).unwrap())
    ///     .collect();
    /// universe.progress();
    /// let first = reqs.iter().position(|r| r.completed());
    /// # let _ = first;
    /// ```
    #[inline]
    pub fn progress(&self) -> usize {
        self.rt.pml.progress()
    }

    /// Work above point-to-point that must advance whenever point-to-point
    /// progresses (a layer's non-blocking collectives): while
    /// [`Universe::set_progress_hook_pending`] says some is pending, every
    /// progress pass, `test_some`/`test_all` of incomplete requests and
    /// round of a blocking wait calls `advance` (a single request's test
    /// does not: its caller pokes its own work), never nested in itself
    /// ([`oxmpi_pml::Pml::set_outside_work`]). Set once per process; later
    /// calls are ignored.
    pub fn set_progress_hook(&self, advance: Box<dyn Fn() + Send + Sync>) {
        self.rt.pml.set_outside_work(advance);
    }

    /// How many pieces of the progress hook's work are pending (zero: the
    /// hook is not called).
    #[inline]
    pub fn set_progress_hook_pending(&self, n: usize) {
        self.rt.pml.set_outside_pending(n);
    }

    /// The registration cache's counters (`mpi_leave_pinned`): hits,
    /// misses, registrations made for one transfer only, entries dropped
    /// because their memory was released, evictions.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let rc = universe.rcache_stats();
    /// println!("{} hits, {} misses, {} invalidated", rc.hits, rc.misses, rc.invalidated);
    /// ```
    pub fn rcache_stats(&self) -> oxmpi_pml::RcacheStats {
        self.rt.pml.with(|o| o.rcache_stats())
    }

    /// Names of the BTLs that carry messages to world rank `peer` (send
    /// list, RDMA list).
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let world = universe.world();
    /// let next = (world.rank() as u32 + 1) % world.size() as u32;
    /// if let Some((send, rdma)) = universe.peer_btls(next) {
    ///     println!("to rank {next}: sends over {send:?}, RDMA over {rdma:?}");
    /// }
    /// ```
    pub fn peer_btls(&self, peer: u32) -> Option<(Vec<&'static str>, Vec<&'static str>)> {
        self.rt.pml.with(|o| o.peer_btls(peer))
    }

    /// `MPI_Abort`: ends the whole job with `code`.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// let Some(input) = std::env::args().nth(1) else {
    ///     universe.abort(2, "usage: prog INPUT");
    /// };
    /// ```
    pub fn abort(&self, code: i32, msg: &str) -> ! {
        self.rt.abort(code, msg)
    }

    /// `MPI_Finalize` now, reporting its error (dropping the last handle
    /// finalizes too, but cannot report one). Other handles, if any, stay
    /// valid and see MPI finalized.
    ///
    /// ```no_run
    /// let universe = oxmpi::initialize().unwrap();
    /// universe.world().barrier().unwrap();
    /// if let Err(e) = universe.finalize() {
    ///     eprintln!("finalize: {e}");
    /// }
    /// assert!(oxmpi::is_finalized());
    /// ```
    pub fn finalize(self) -> Result<()> {
        let r = self.rt.finalize();
        *ENDED.lock().unwrap_or_else(|p| p.into_inner()) = true;
        r
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Unwinding from a panic: the other ranks are not coming to a
            // finalize (it would wait for them for ever). Close the
            // transports and let the process die of its panic; the
            // launcher reports the rank's failure.
            self.abandon();
        } else if !self.is_finalized() {
            if let Err(e) = self.finalize() {
                eprintln!("oxmpi: finalize: {e}");
            }
        }
        *ENDED.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }
}
