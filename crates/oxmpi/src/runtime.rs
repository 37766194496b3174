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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use oxmpi_pml::{Engine, Ob1, Pml, PmlConfig};
use oxmpi_runtime::mca::{self, Registry, Sources};
use oxmpi_runtime::pmi::{Modex, Pmi, PmiConfig};
use oxmpi_runtime::topology;

use crate::ctxid::{CtxIds, NbAgree, GROUP_CTX, UNIT};
use crate::error::{Error, ErrorClass, Result};
use crate::framework::{self, DynBtl};

/// Context id of `MPI_COMM_WORLD` (its collectives use the next one).
pub(crate) const WORLD_CTX: u16 = 0;
/// Context id of `MPI_COMM_SELF` (unit 1, see [`crate::ctxid`]).
pub(crate) const SELF_CTX: u16 = crate::ctxid::UNIT;

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
    /// This process's free context id units ([`crate::ctxid`]).
    ctx_ids: Mutex<CtxIds>,
    /// Communicator creations started on each context (by its first id):
    /// what tells concurrent agreements on one parent apart.
    seqs: Mutex<HashMap<u16, u32>>,
    /// Non-blocking agreements in flight (`MPI_Comm_idup`), advanced also
    /// by blocking agreements that wait for the mask they hold.
    pending: Mutex<Vec<Weak<Mutex<NbAgree>>>>,
    finalized: AtomicBool,
    /// Context units of freed communicators with operations still
    /// pending, released by [`Runtime::release_unit`] once they are idle.
    zombies: Mutex<Vec<u16>>,
    /// The collectives' selection (`coll_tuned_*`).
    pub(crate) coll_tuned: crate::coll_tuned::CollTuned,
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

        let cfg = PmlConfig::from_registry(&reg)
            .map_err(|e| Error::new(ErrorClass::Arg, e.to_string()))?;
        let coll_tuned = crate::coll_tuned::CollTuned::from_registry(&reg)
            .map_err(|e| Error::new(ErrorClass::Arg, e.to_string()))?;
        let spin = cfg.spin_count;
        let idle_sleep_max = cfg.idle_sleep_max;
        let oversubscribed = match reg.get_enum(mca::MPI_YIELD_WHEN_IDLE).unwrap_or("auto") {
            "yes" => true,
            "no" => false,
            _ => topology::node_oversubscribed(local_ranks.len()),
        };
        let mut engine = match framework::select_pml(&reg, oversubscribed)? {
            framework::PmlPick::Ob1 => Engine::Ob1(open_ob1(&reg, &mut modex, cfg)?),
            framework::PmlPick::Cm(mtl) => Engine::Cm(framework::open_cm(mtl, &mut modex)?),
        };
        let world: Vec<u32> = (0..size).collect();
        engine.add_comm(WORLD_CTX, world.clone(), rank)?;
        engine.add_comm(WORLD_CTX + 1, world, rank)?;
        engine.add_comm(SELF_CTX, vec![rank], 0)?;
        engine.add_comm(SELF_CTX + 1, vec![rank], 0)?;
        engine.add_comm(GROUP_CTX, (0..size).collect(), rank)?;
        tracing::debug!(
            rank,
            size,
            oversubscribed,
            pml = engine.name(),
            "oxmpi initialised: {:?}",
            (0..size).map(|p| engine.peer_btls(p)).collect::<Vec<_>>()
        );
        // `pml_ob1_progress_thread` is the PML's name for the same thread.
        let async_progress = reg.get_bool(mca::MPI_ASYNC_PROGRESS).unwrap_or(false)
            || reg.get_bool("pml_ob1_progress_thread").unwrap_or(false);
        let rt = Runtime {
            // Threads share the lock (the user's, or the progress thread).
            pml: Arc::new(
                Pml::from_engine(engine, spin, oversubscribed)
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
            ctx_ids: Mutex::new(CtxIds::default()),
            seqs: Mutex::new(HashMap::new()),
            pending: Mutex::new(Vec::new()),
            finalized: AtomicBool::new(false),
            coll_tuned,
            bsend_buf: Mutex::new(None),
            zombies: Mutex::new(Vec::new()),
            main_thread: std::thread::current().id(),
        };
        if !singleton {
            crate::failure::install(&rt.pml, Arc::clone(&rt.modex));
            crate::failure::install_fault_hook(&rt.pml, Arc::clone(&rt.modex));
        }
        if async_progress {
            rt.driver.start_always(&rt.pml);
        }
        crate::confine::confine(&rt, async_progress);
        Ok(rt)
    }

    /// Releases the context unit at `base` of a freed communicator (every
    /// context of it this process added): at once if no operation on them
    /// is pending, otherwise later (each call also releases the earlier
    /// freed ones that became idle). Its unit is then free again here.
    pub(crate) fn release_unit(&self, base: u16) {
        let mut z = self.zombies.lock().unwrap_or_else(|p| p.into_inner());
        z.push(base);
        let mut freed = Vec::new();
        self.pml.with(|o| {
            z.retain(|&b| {
                if (b..b + UNIT).any(|c| o.comm_busy(c)) {
                    return true;
                }
                for c in b..b + UNIT {
                    // Not every context of a unit is in use.
                    let _ = o.remove_comm(c);
                }
                freed.push(b);
                false
            })
        });
        drop(z);
        self.seqs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&c, _| !freed.iter().any(|&b| (b..b + UNIT).contains(&c)));
        let mut ids = self.ctx_ids();
        for b in freed {
            ids.release(usize::from(b / UNIT));
        }
    }

    /// The free context id units.
    pub(crate) fn ctx_ids(&self) -> MutexGuard<'_, CtxIds> {
        self.ctx_ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The number of the next communicator creation on context `ctx`.
    pub(crate) fn next_seq(&self, ctx: u16) -> u32 {
        let mut s = self.seqs.lock().unwrap_or_else(|p| p.into_inner());
        let n = s.entry(ctx).or_insert(0);
        let v = *n;
        *n = n.wrapping_add(1);
        v
    }

    /// Records a non-blocking agreement in flight.
    pub(crate) fn add_pending(&self, a: &Arc<Mutex<NbAgree>>) {
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        p.retain(|w| w.strong_count() > 0);
        p.push(Arc::downgrade(a));
    }

    /// Between two rounds of an agreement that must try again: advances
    /// the non-blocking agreements in flight (one of them may hold the
    /// mask this one waits for), progresses, and yields.
    pub(crate) fn retry_pause(&self) {
        self.poll_pending();
        self.pml.progress();
        std::thread::yield_now();
    }

    /// Advances every non-blocking agreement in flight (one that is not
    /// being tested may hold reserved units another one needs).
    pub(crate) fn poll_pending(&self) {
        let live: Vec<Arc<Mutex<NbAgree>>> = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for a in live {
            if let Ok(mut a) = a.try_lock() {
                a.poll();
            }
        }
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

/// Opens the BTLs and ob1 over them; every peer must be reachable.
fn open_ob1(
    reg: &Registry,
    modex: &mut Modex,
    cfg: PmlConfig,
) -> Result<Ob1<crate::framework::DynBtl>> {
    let rank = modex.rank();
    let size = modex.size();
    let opened = framework::open(reg, modex)?;
    let ob1 = Ob1::new(cfg, rank, opened.btls, &opened.peers)?;
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
    Ok(ob1)
}
