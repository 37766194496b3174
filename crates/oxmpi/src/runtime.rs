//! The process's MPI state: parameters, the PMI client and modex, the BTLs
//! and the PML, from `MPI_Init` to `MPI_Finalize`.
//!
//! Start-up ([`Runtime::init`]): parameters from every source, the PMI
//! client (or a singleton), the modex, the BTL framework
//! ([`crate::framework::open`]), the PML with the world (context 0) and
//! self (context 2) communicators. Every peer must be reachable by some BTL,
//! or start-up fails naming the first one that is not.
//!
//! Finalize ([`Runtime::finalize`], run when the last universe handle is
//! dropped): requests still active (including those the user freed) are
//! completed, a barrier over the world makes sure every rank is done with
//! its traffic, each BTL's queues are drained, one PMI fence keeps every
//! rank's transports open until all have drained, then the transports are
//! closed and the launcher is told.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oxmpi_pml::{Ob1, Pml, PmlConfig};
use oxmpi_runtime::mca::{self, Registry, Sources};
use oxmpi_runtime::pmi::{Modex, Pmi, PmiConfig};
use oxmpi_runtime::topology;

use crate::error::{Error, ErrorClass, Result};
use crate::framework::{self, DynBtl};

/// Context id of `MPI_COMM_WORLD` (its collectives use the next one).
pub(crate) const WORLD_CTX: u16 = 0;
/// Context id of `MPI_COMM_SELF`.
pub(crate) const SELF_CTX: u16 = 2;
/// First context id free for new communicators.
pub(crate) const FIRST_FREE_CTX: u16 = 4;

/// The MPI thread support levels (`MPI_THREAD_*`).
///
/// ```
/// use oxmpi::ThreadLevel;
/// // Ordered from the least to the most thread support.
/// assert!(ThreadLevel::Single < ThreadLevel::Funneled);
/// assert!(ThreadLevel::Serialized < ThreadLevel::Multiple);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ThreadLevel {
    /// `MPI_THREAD_SINGLE`: one thread.
    Single,
    /// `MPI_THREAD_FUNNELED`: only the thread that initialized calls MPI.
    Funneled,
    /// `MPI_THREAD_SERIALIZED`: any thread, one at a time.
    Serialized,
    /// `MPI_THREAD_MULTIPLE`: any thread, concurrently.
    Multiple,
}

/// The process's MPI state (public only to be named by the sealed
/// traits of this crate; its module is private).
pub struct Runtime {
    pub(crate) pml: Arc<Pml<DynBtl>>,
    /// Wakes futures of requests (see [`crate::progress`]).
    pub(crate) driver: crate::progress::AsyncDriver,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) level: ThreadLevel,
    pub(crate) local_ranks: Vec<u32>,
    pub(crate) appnum: u32,
    pub(crate) universe_size: u32,
    /// Shared with the failure-notice handler ([`crate::failure`]).
    modex: Arc<Mutex<Option<Modex>>>,
    /// Lowest context id never used by this process (communicator creation
    /// agrees on the maximum over the members).
    pub(crate) next_ctx: Mutex<u16>,
    finalized: AtomicBool,
    /// Contexts of freed communicators with operations still pending,
    /// released by [`Runtime::release_ctx`] once they are idle.
    zombies: Mutex<Vec<u16>>,
    /// The buffer attached for buffered sends (owned while attached).
    pub(crate) bsend_buf: Mutex<Option<Box<[u8]>>>,
    main_thread: std::thread::ThreadId,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

fn other(what: impl std::fmt::Display) -> Error {
    Error::new(ErrorClass::Other, what.to_string())
}

impl Runtime {
    /// `MPI_Init_thread`.
    pub(crate) fn init(level: ThreadLevel) -> Result<Runtime> {
        oxmpi_runtime::log::init();
        // Descriptors per peer (TCP connections, segments, pidfds): the soft
        // limit up to the hard one, as under oxmpirun.
        oxmpi_runtime::limits::raise_fd_limit();
        let mut reg = Registry::new();
        framework::register_params(&mut reg).map_err(other)?;
        let sources =
            Sources::from_process().map_err(|e| Error::new(ErrorClass::Arg, e.to_string()))?;
        reg.apply(&sources)
            .map_err(|e| Error::new(ErrorClass::Arg, e.to_string()))?;
        let pmi_cfg = PmiConfig::from_registry(&reg)
            .map_err(|e| Error::new(ErrorClass::Arg, e.to_string()))?;
        let pmi = Pmi::from_env(pmi_cfg).map_err(|e| other(format!("PMI start-up: {e}")))?;
        let mut modex = Modex::new(pmi).map_err(|e| other(format!("PMI start-up: {e}")))?;
        let rank = modex.rank();
        let size = modex.size();
        let appnum = modex.pmi().appnum();
        let universe_size = modex.pmi().universe_size().max(size);
        let local_ranks = modex.local_ranks().to_vec();
        let singleton = modex.pmi().is_singleton();

        let opened = framework::open(&reg, &mut modex)?;
        let cfg = PmlConfig::from_registry(&reg)
            .map_err(|e| Error::new(ErrorClass::Arg, e.to_string()))?;
        let spin = cfg.spin_count;
        let idle_sleep_max = cfg.idle_sleep_max;
        let mut ob1 = Ob1::new(cfg, rank, opened.btls, &opened.peers)?;
        for peer in 0..size {
            let reachable = ob1
                .peer_btls(peer)
                .is_some_and(|(send, _)| !send.is_empty());
            if !reachable {
                let btls = reg
                    .selection("btl")
                    .map(|s| s.join(","))
                    .unwrap_or_default();
                return Err(Error::new(
                    ErrorClass::Other,
                    format!(
                        "rank {rank} cannot reach rank {peer} with the selected BTLs ({btls}): \
                         add {} to the btl parameter",
                        if peer == rank { "self" } else { "sm or tcp" }
                    ),
                ));
            }
        }
        let world: Vec<u32> = (0..size).collect();
        ob1.add_comm(WORLD_CTX, world.clone(), rank)?;
        ob1.add_comm(WORLD_CTX + 1, world, rank)?;
        ob1.add_comm(SELF_CTX, vec![rank], 0)?;
        ob1.add_comm(SELF_CTX + 1, vec![rank], 0)?;
        let oversubscribed = match reg.get_enum(mca::MPI_YIELD_WHEN_IDLE).unwrap_or("auto") {
            "yes" => true,
            "no" => false,
            _ => topology::node_oversubscribed(local_ranks.len()),
        };
        tracing::debug!(
            rank,
            size,
            oversubscribed,
            "oxmpi initialised: {:?}",
            (0..size).map(|p| ob1.peer_btls(p)).collect::<Vec<_>>()
        );
        // `pml_ob1_progress_thread` is the PML's name for the same thread.
        let async_progress = reg.get_bool(mca::MPI_ASYNC_PROGRESS).unwrap_or(false)
            || reg.get_bool("pml_ob1_progress_thread").unwrap_or(false);
        let rt = Runtime {
            // Threads share the lock (the user's, or the progress thread).
            pml: Arc::new(
                Pml::new(ob1, spin, oversubscribed)
                    .idle_sleep_max(idle_sleep_max)
                    .multithreaded(level == ThreadLevel::Multiple || async_progress),
            ),
            driver: Default::default(),
            rank,
            size,
            level,
            local_ranks,
            appnum,
            universe_size,
            modex: Arc::new(Mutex::new(Some(modex))),
            next_ctx: Mutex::new(FIRST_FREE_CTX),
            finalized: AtomicBool::new(false),
            bsend_buf: Mutex::new(None),
            zombies: Mutex::new(Vec::new()),
            main_thread: std::thread::current().id(),
        };
        if !singleton {
            crate::failure::install(&rt.pml, Arc::clone(&rt.modex));
        }
        if async_progress {
            rt.driver.start_always(&rt.pml);
        }
        crate::confine::confine(&rt, async_progress);
        Ok(rt)
    }

    /// Releases the contexts `ctx` and `ctx + 1` of a freed communicator:
    /// at once if no operation on them is pending, otherwise later (each
    /// call also releases the earlier freed ones that became idle).
    pub(crate) fn release_ctx(&self, ctx: u16) {
        let mut z = self.zombies.lock().unwrap_or_else(|p| p.into_inner());
        z.push(ctx);
        self.pml.with(|o| {
            z.retain(|&c| {
                if o.comm_busy(c) || o.comm_busy(c + 1) {
                    return true;
                }
                let _ = o.remove_comm(c);
                let _ = o.remove_comm(c + 1);
                false
            })
        });
    }

    /// Whether the calling thread is the one that initialized MPI.
    pub(crate) fn is_main_thread(&self) -> bool {
        std::thread::current().id() == self.main_thread
    }

    /// Whether finalize has run.
    pub(crate) fn is_finalized(&self) -> bool {
        self.finalized.load(Ordering::Acquire)
    }

    /// `MPI_Finalize`. Collective over the world.
    pub(crate) fn finalize(&self) -> Result<()> {
        if self.finalized.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.driver.stop();
        // Requests that can still complete do (those the application freed
        // while active too); those that wait for a match that may never
        // come (an unmatched receive, a rendezvous or synchronous send
        // nobody received: `Ob1::finalize_waits_for`) are abandoned, as
        // MPICH abandons them. A peer's matched receive waits here for our
        // data, which we send while we wait in the barrier. Twice: a message
        // that was on its way during the first round (a receive of ours,
        // unmatched then, that it matches) is seen by the second round's
        // first progress pass, and completes before the second barrier.
        let settle = || {
            self.pml.progress();
            self.pml
                .wait_until(|o| (o.finalize_waits_for() == 0 || o.any_dead_peer()).then_some(()));
        };
        settle();
        let mut barrier = crate::collective::barrier_ctx(self, WORLD_CTX + 1, self.size, self.rank);
        if barrier.is_ok() {
            settle();
            barrier = crate::collective::barrier_ctx(self, WORLD_CTX + 1, self.size, self.rank);
        }
        let abandoned = self.pml.with(|o| o.active_requests());
        if abandoned > 0 {
            tracing::debug!(
                abandoned,
                "MPI_Finalize: requests that wait for a matching call are abandoned"
            );
        }
        // Drain what the BTLs still hold (queued fragments, CREDIT messages),
        // bounded in time: a peer that died cannot take our data any more.
        let t0 = Instant::now();
        while self.pml.with(|o| o.has_work()) && t0.elapsed() < Duration::from_secs(10) {
            self.pml.progress();
            std::thread::yield_now();
        }
        let mut modex = self.modex.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(m) = modex.as_mut() {
            if self.size > 1 && barrier.is_ok() {
                m.fence()
                    .map_err(|e| other(format!("finalize fence: {e}")))?;
            }
        }
        self.pml.with(|o| o.close());
        if let Some(m) = modex {
            m.into_pmi()
                .finalize()
                .map_err(|e| other(format!("PMI finalize: {e}")))?;
        }
        match barrier {
            // A member died (the launcher keeps survivors running): the
            // survivors still finalize, as ULFM's MPI_Finalize does.
            Err(e) if e.class() == ErrorClass::ProcFailed => {
                tracing::debug!("finalize without the dead: {e}");
                Ok(())
            }
            other => other,
        }
    }

    /// Ends this rank's MPI without the others (a panic unwinds through
    /// the last handle): no barrier, no fence; the transports are closed
    /// so that nothing is left behind, and the launcher is not told (the
    /// process exits without finalizing: a failure).
    pub(crate) fn abandon(&self) {
        if self.finalized.swap(true, Ordering::AcqRel) {
            return;
        }
        self.driver.stop();
        if !self.pml.confined_elsewhere() {
            self.pml.with(|o| o.close());
        }
    }

    /// `MPI_Abort`: tells the launcher to end the job with `code`, then
    /// exits.
    pub(crate) fn abort(&self, code: i32, msg: &str) -> ! {
        let mut g = self.modex.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = g.as_mut() {
            m.pmi_mut().abort(code, msg)
        }
        eprintln!("oxmpi: abort ({code}): {msg}");
        std::process::exit(code)
    }
}
