//! oxmpi PML "ob1": MPI point-to-point semantics over the BTLs.
//!
//! * [`hdr`]: the wire headers of seed 000, fixed little-endian layouts
//!   parsed with bounds checks from untrusted bytes.
//! * [`ob1`]: the protocol engine ([`Ob1`]): protocol selection, the BML
//!   (per-peer eager, send and RDMA endpoint lists), requests, matching
//!   through `oxmpi-match`, eager credits, NoResource queueing.
//! * [`Pml`]: the thread-safe face: a mutex around [`Ob1`] (none while one
//!   thread alone may call it, see [`Pml::confine`]), blocking waits that
//!   spin briefly then yield (at once when oversubscribed), and sleep once
//!   their yields hand the core to nobody (`idle`): on the BTLs' doorbell,
//!   which the sender of a message rings, when every BTL in use has one.
//!
//! Layer rule: the PML never names a concrete BTL; it is generic over
//! `oxmpi_btl::btl::Btl` and given its BTL list by the layer above.
#![deny(unsafe_code)]

pub mod bsend;
pub mod buffer;
mod cell;
pub mod clock;
pub mod cm;
pub mod config;
pub mod engine;
pub mod error;
pub mod hdr;
mod idle;
pub mod ob1;
pub mod rcache;

use crate::cell::EngineCell;

use oxmpi_btl::btl::Btl;
use oxmpi_btl::mem::MemRegion;
use oxmpi_match::{Source, Tag};

pub use buffer::{Buffer, Layout};
pub use config::PmlConfig;
pub use engine::Engine;
pub use error::{ErrClass, PmlError};
pub use ob1::{
    BufferScope, Counters, Message, Ob1, PeerDesc, ReqId, SendMode, Status, ANY_SOURCE_RUN,
    ANY_SOURCE_SWEEP,
};
pub use rcache::RcacheStats;

/// Progress passes a spinning wait makes per lock acquisition.
const POLLS_PER_LOCK: u32 = 16;
/// Reads of its source's channel a blocking receive makes before it is
/// posted (under one lock acquisition, like a batch of polls).
const RECV_POLLS: u32 = 64;

/// The PML shared by every thread of a process (`MPI_THREAD_MULTIPLE`).
pub struct Pml<B: ?Sized + Btl = dyn Btl + Send> {
    inner: EngineCell<Engine<B>>,
    /// [`Ob1::sendi_limit`], read without entering the cell: a larger send
    /// skips [`Pml::try_sendi`]'s call at once.
    sendi_limit: usize,
    spin: u32,
    /// Progress passes per lock acquisition while spinning.
    batch: u32,
    /// Longest sleep of a wait whose yields hand the core to nobody
    /// (`pml_ob1_idle_sleep_max`; zero: never sleep).
    sleep_max: std::time::Duration,
    /// Where word of dead processes comes from, if anywhere
    /// ([`Pml::set_failure_notice`]).
    notice: std::sync::OnceLock<FailureNotice>,
    /// Work above the engine that its progress must drive too
    /// ([`Pml::set_outside_work`]).
    outside: std::sync::OnceLock<OutsideWork>,
    /// How many pieces of that work are pending (zero: nothing to call;
    /// one load on the paths that check).
    outside_pending: std::sync::atomic::AtomicUsize,
    /// What waits did once past their yields ([`Pml::sleep_counts`]).
    sleeps: SleepCounters,
}

/// How blocking waits slept ([`Pml::sleep_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SleepCounts {
    /// Sleeps on a doorbell ([`Ob1::doorbell`]).
    pub bell: u64,
    /// Of those, the ones a peer's send ended (rang), not the timeout.
    pub rung: u64,
    /// Doorbells armed, then left without sleeping: the last look found
    /// work.
    pub bell_skipped: u64,
    /// Timed sleeps (no doorbell could wake the waiter).
    pub timed: u64,
}

#[derive(Default)]
struct SleepCounters {
    bell: std::sync::atomic::AtomicU64,
    rung: std::sync::atomic::AtomicU64,
    bell_skipped: std::sync::atomic::AtomicU64,
    timed: std::sync::atomic::AtomicU64,
}

impl SleepCounters {
    fn bump(c: &std::sync::atomic::AtomicU64) {
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Work above the engine (the C layer's collective schedules) that every
/// progress pass, failed test and blocking wait advances: advances it as
/// far as it goes without waiting.
type OutsideWork = Box<dyn Fn() + Send + Sync>;

thread_local! {
    /// This thread is inside [`OutsideWork::advance`] (which progresses
    /// the engine itself): no nested call.
    static IN_OUTSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Word from outside that processes died (a launcher's signal), looked at
/// by waits that have stopped spinning.
struct FailureNotice {
    /// Set (by a signal handler) when there is news.
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The world ranks dead now; `None`: could not ask now, try later.
    dead: Box<dyn Fn() -> Option<Vec<u32>> + Send + Sync>,
}

impl<B: ?Sized + Btl> std::fmt::Debug for Pml<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pml").field("spin", &self.spin).finish()
    }
}

impl<B: ?Sized + Btl> Pml<B> {
    /// Wraps a protocol engine. `oversubscribed`: more ranks than cores,
    /// so blocking waits yield at once instead of spinning.
    pub fn new(ob1: Ob1<B>, spin_count: u32, oversubscribed: bool) -> Pml<B> {
        Pml::from_engine(Engine::Ob1(ob1), spin_count, oversubscribed)
    }

    /// Wraps the engine chosen at start-up (ob1 or cm), as [`Pml::new`].
    pub fn from_engine(engine: Engine<B>, spin_count: u32, oversubscribed: bool) -> Pml<B> {
        let spin = if oversubscribed { 0 } else { spin_count };
        Pml {
            sendi_limit: engine.sendi_limit(),
            inner: EngineCell::new(engine),
            spin,
            batch: if spin > 0 { POLLS_PER_LOCK } else { 1 },
            sleep_max: std::time::Duration::from_micros(config::IDLE_SLEEP_MAX_US),
            notice: std::sync::OnceLock::new(),
            outside: std::sync::OnceLock::new(),
            outside_pending: std::sync::atomic::AtomicUsize::new(0),
            sleeps: SleepCounters::default(),
        }
    }

    /// How blocking waits of this PML have slept so far.
    pub fn sleep_counts(&self) -> SleepCounts {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.sleeps;
        SleepCounts {
            bell: s.bell.load(Relaxed),
            rung: s.rung.load(Relaxed),
            bell_skipped: s.bell_skipped.load(Relaxed),
            timed: s.timed.load(Relaxed),
        }
    }

    /// Work above the engine that must advance whenever the engine does
    /// (MPI's progress rule: a rank blocked in `MPI_Recv`, or testing a
    /// request in a loop, still moves its non-blocking collectives on):
    /// while [`Pml::set_outside_pending`] says some is pending, every
    /// progress pass, `test_some`/`test_all` that completes nothing and
    /// round of a blocking wait calls `advance` (outside the engine's
    /// lock; never nested in itself). [`Pml::test`] does not (a check there
    /// cost its callers 40 instructions): a caller with outside work tests
    /// for it itself. Set once; later calls are ignored.
    pub fn set_outside_work(&self, advance: Box<dyn Fn() + Send + Sync>) {
        let _ = self.outside.set(advance);
    }

    /// How many pieces of the outside work are pending now (zero: the
    /// checks cost one load and call nothing).
    pub fn set_outside_pending(&self, n: usize) {
        self.outside_pending
            .store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Calls the outside work's `advance` if any is pending.
    #[inline]
    fn outside_work(&self) {
        if self
            .outside_pending
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
        {
            self.run_outside();
        }
    }

    #[cold]
    #[inline(never)]
    fn run_outside(&self) {
        let Some(w) = self.outside.get() else {
            return;
        };
        if IN_OUTSIDE.with(|f| f.replace(true)) {
            return;
        }
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                IN_OUTSIDE.with(|f| f.set(false));
            }
        }
        let _reset = Reset;
        w();
    }

    /// Where word of dead processes comes from: when `flag` is set (by a
    /// signal handler: Hydra and `oxmpirun --enable-recovery` send SIGUSR1
    /// when a rank dies), a wait that has stopped spinning clears it, calls
    /// `dead` and fails what needs those ranks
    /// ([`Ob1::peer_reported_dead`]). Without it, a wait for a process that
    /// never had a connection (TCP is connected on first use) would not
    /// learn of its death. Set once; later calls are ignored.
    pub fn set_failure_notice(
        &self,
        flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
        dead: Box<dyn Fn() -> Option<Vec<u32>> + Send + Sync>,
    ) {
        let _ = self.notice.set(FailureNotice { flag, dead });
    }

    /// Acts on a failure notice, if one came (out of line: waits past
    /// their spin only).
    #[cold]
    fn take_failure_notice(&self) {
        use std::sync::atomic::Ordering;
        let Some(n) = self.notice.get() else {
            return;
        };
        if !n.flag.swap(false, Ordering::AcqRel) {
            return;
        }
        match (n.dead)() {
            Some(ranks) => self.with(|o| {
                for r in ranks {
                    o.peer_reported_dead(r);
                }
            }),
            None => n.flag.store(true, Ordering::Release),
        }
    }

    /// The longest sleep of a blocking wait whose yields give the core to
    /// no other task (see [`Pml::pause`]); zero: never sleep, only yield.
    pub fn idle_sleep_max(mut self, max: std::time::Duration) -> Self {
        self.sleep_max = max;
        self
    }

    /// For `MPI_THREAD_MULTIPLE`: a waiting thread holds the lock for one
    /// progress pass at a time, so other threads are not kept waiting
    /// behind a batch of polls (measured: with two threads per rank,
    /// batches made 4 KiB latency 0.7 -> 1.1 us).
    pub fn multithreaded(mut self, yes: bool) -> Self {
        if yes {
            self.batch = 1;
        }
        self
    }

    /// Runs `f` with the engine locked (or, confined, alone).
    #[inline(always)]
    pub fn with<T>(&self, f: impl FnOnce(&mut Engine<B>) -> T) -> T {
        self.inner.with(f)
    }

    /// [`Ob1::sendi_bytes`]: a standard send of `data` that goes out
    /// complete inside the call, with no request, or `false` having sent
    /// nothing (the caller then starts an ordinary send, which also reports
    /// any error, such as a call from a thread the PML is not confined
    /// to). The small-message path of `MPI_Isend` and `MPI_Send` of a
    /// [`Pml::confine`]d PML; a shared one (`MPI_THREAD_MULTIPLE`) answers
    /// false, for the ordinary send, which takes the lock. So does a PML
    /// with a BTL that did not promise never to re-enter it
    /// ([`oxmpi_btl::btl::NeverReenters`]).
    #[inline(always)]
    pub fn try_sendi(&self, data: &[u8], dst: u32, tag: i32, ctx: u16) -> bool {
        data.len() <= self.sendi_limit && self.inner.try_sendi(data, dst, tag, ctx)
    }

    /// The eager send of `data` that a BTL whose `send` is done on return
    /// completes inside the call, with no request: prepared in place
    /// (`Counters::eager_prepared`) or copied, as [`Ob1::isend`] sends a
    /// message above the immediate-send limit at once. Whether it was sent;
    /// `false` has sent nothing, for the ordinary send (and as for
    /// [`Pml::try_sendi`] a shared PML answers false). Out of line: the
    /// general path of `MPI_Send` and `MPI_Isend` tries it first.
    #[inline]
    pub fn try_send_eager(&self, data: &[u8], dst: u32, tag: i32, ctx: u16) -> bool {
        self.inner.try_send_eager(data, dst, tag, ctx)
    }

    /// [`Ob1::recv_small`] on a [`Pml::confine`]d PML: the small-message
    /// path of `MPI_Recv` and `MPI_Irecv`, from rank `src` or from any
    /// rank. `None` has taken nothing (and so does a shared PML, or one
    /// with a BTL from outside `oxmpi-btl`, as for [`Pml::try_sendi`]):
    /// receive as usual then. One read, or for a `blocking` receive while
    /// spinning as many as [`Pml::recv`] makes before it posts.
    #[inline(always)]
    pub fn try_recv_small(
        &self,
        dst: &mut [u8],
        src: Source,
        tag: Tag,
        ctx: u16,
        blocking: bool,
    ) -> Option<Status> {
        let polls = if blocking && self.spin > 0 {
            RECV_POLLS
        } else {
            1
        };
        self.inner.try_recv_small(dst, src, tag, ctx, polls)
    }

    /// Takes no lock from now on: the calling thread alone calls the PML
    /// (for `MPI_THREAD_SINGLE` and `MPI_THREAD_FUNNELED`). Checked: a call
    /// from any other thread panics (one waiting for the lock meanwhile
    /// too), until this thread calls [`Pml::share`]. A `Pml` shared once
    /// stays shared. Whether it took effect. Call it outside any call into
    /// the `Pml`.
    pub fn confine(&self) -> bool {
        self.inner.confine()
    }

    /// Whether the `Pml` is confined to a thread other than the caller's
    /// (a call from here would panic).
    pub fn confined_elsewhere(&self) -> bool {
        self.inner.confined_elsewhere()
    }

    /// Locks again from now on: the confining thread calls it before
    /// another thread (a progress thread) starts using the `Pml` (see
    /// [`Pml::confine`]).
    pub fn share(&self) {
        self.inner.share();
    }

    /// Whether calls take the lock (not [`Pml::confine`]d).
    pub fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }

    /// One progress pass.
    pub fn progress(&self) -> usize {
        let n = self.with(|o| o.progress());
        self.outside_work();
        n
    }

    /// Waits until `cond` holds, progressing meanwhile: polls `spin` times,
    /// then yields the core between polls.
    pub fn wait_until<T>(&self, mut cond: impl FnMut(&mut Engine<B>) -> Option<T>) -> T {
        let mut polls = 0u32;
        // While spinning, several polls run under one lock acquisition (the
        // lock is released between batches so other threads get their turn).
        let batch = self.batch;
        loop {
            let mut busy = false;
            let out = self.with(|o| {
                if let Some(v) = cond(o) {
                    return Some(v);
                }
                for _ in 0..batch {
                    if o.progress() > 0 {
                        busy = true;
                        if let Some(v) = cond(o) {
                            return Some(v);
                        }
                    }
                }
                cond(o)
            });
            if let Some(v) = out {
                return v;
            }
            self.outside_work();
            polls = polls.saturating_add(batch);
            if self.gives_core(polls, busy) {
                if let Some(v) = self.idle(polls, busy, &mut cond) {
                    return v;
                }
            } else {
                std::hint::spin_loop();
            }
            if polls > self.spin && self.notice.get().is_some() {
                self.take_failure_notice();
            }
        }
    }

    /// What a waiting loop does between its progress passes, `polls` passes
    /// in (counting this one's): spin while under `pml_ob1_spin_count`,
    /// then give the core away with `sched_yield`, but only after a pass
    /// that found nothing to do (`busy` false), as Open MPI's
    /// `yield_when_idle`: a rank that is receiving a stream keeps its core
    /// (when oversubscribed, a yield after every pass that took a few
    /// messages made eight ranks on two cores switch tasks about once per
    /// message). A shared PML (`MPI_THREAD_MULTIPLE`) yields after every
    /// pass past the spin budget, busy or not: its lock is not fair, and a
    /// waiter that took it back at once could keep another thread, whose
    /// call it waits for, out for as long as messages stream in.
    /// Once yields hand the core to nobody (a rank alone in its scheduler
    /// group, as MPICH's Hydra starts them, cannot yield to the others),
    /// the waiter sleeps instead (`idle`'s module doc): on the doorbell
    /// of its BTLs ([`Ob1::doorbell`]), which a peer's send rings, after a
    /// last progress pass (any work it finds ends the pause at once), for
    /// up to `pml_ob1_idle_sleep_max`; where no doorbell can wake it, for
    /// up to that long by the clock.
    #[inline]
    pub fn pause(&self, polls: u32, busy: bool) {
        if self.gives_core(polls, busy) {
            self.idle(polls, busy, &mut |_| None::<()>);
        } else {
            std::hint::spin_loop();
        }
    }

    /// Whether a wait `polls` passes in, whose last pass found work or not
    /// (`busy`), gives the core away now ([`Pml::pause`]).
    #[inline(always)]
    fn gives_core(&self, polls: u32, busy: bool) -> bool {
        polls > self.spin && (!busy || self.inner.is_shared())
    }

    /// Gives the core away once (`idle`'s module doc): yields, and once
    /// yields hand it to nobody sleeps, on the doorbell if there is one.
    /// `cond` is the wait's condition, looked at in the last pass before
    /// the sleep: its value, if it holds then.
    #[inline(never)]
    fn idle<T>(
        &self,
        polls: u32,
        busy: bool,
        cond: &mut impl FnMut(&mut Engine<B>) -> Option<T>,
    ) -> Option<T> {
        let timed = idle::rest(polls, busy, self.sleep_max)?;
        // Arm, then the last look, under one lock: a message sent before the
        // bell was armed is seen by this pass, one sent after rings (see
        // `oxmpi_btl::sm::ring::bell`); so is whatever another thread did
        // under the lock before it. Work found ends the pause.
        let armed = self.with(|o| {
            let bell = o.doorbell()?;
            bell.arm();
            let found = o.progress_all();
            let out = cond(o);
            let ready = out.is_none() && found == 0 && bell.prepare();
            Some((bell, ready, out))
        });
        match armed {
            Some((bell, ready, out)) => {
                if !ready {
                    bell.disarm();
                    SleepCounters::bump(&self.sleeps.bell_skipped);
                    idle::woke();
                    return out;
                }
                SleepCounters::bump(&self.sleeps.bell);
                // The bound a lost wake-up can cost, and what another
                // thread of this process, which rings nothing, can keep a
                // sleeper waiting (`MPI_THREAD_MULTIPLE`).
                if bell.sleep(self.sleep_max) {
                    SleepCounters::bump(&self.sleeps.rung);
                }
                bell.disarm();
            }
            None => {
                SleepCounters::bump(&self.sleeps.timed);
                idle::sleep(timed);
            }
        }
        None
    }

    /// `MPI_Wait`.
    pub fn wait(&self, id: ReqId) -> Result<Status, PmlError> {
        // A send complete inside `isend` holds nothing: no lock to take.
        if let Some(st) = id.inline_status() {
            return Ok(st);
        }
        self.wait_until(|o| match o.test(id) {
            Ok(None) => None,
            Ok(Some(s)) => Some(Ok(s)),
            Err(e) => Some(Err(e)),
        })
    }

    /// `MPI_Test` after one progress pass: the status once complete (a
    /// non-persistent request is then freed).
    pub fn test(&self, id: ReqId) -> Result<Option<Status>, PmlError> {
        self.with(|o| {
            o.progress();
            o.test(id)
        })
    }

    /// `MPI_Waitany`: the index of one completed request of `ids` and its
    /// outcome (that entry becomes `None`); `None` when every entry is
    /// `None` (all inactive).
    pub fn wait_any(&self, ids: &mut [Option<ReqId>]) -> Option<(usize, Result<Status, PmlError>)> {
        if ids.iter().all(Option::is_none) {
            return None;
        }
        let (i, r) = self.wait_until(|o| {
            ids.iter().enumerate().find_map(|(i, id)| {
                let r = o.test((*id)?).transpose()?;
                Some((i, r))
            })
        });
        ids[i] = None;
        Some((i, r))
    }

    /// `MPI_Waitsome`: waits until at least one of `ids` has completed,
    /// then returns every completed one (index and outcome; those entries
    /// become `None`). Empty when every entry is `None`.
    pub fn wait_some(&self, ids: &mut [Option<ReqId>]) -> Vec<(usize, Result<Status, PmlError>)> {
        if ids.iter().all(Option::is_none) {
            return Vec::new();
        }
        let done = self.wait_until(|o| {
            let v = take_done(o, ids);
            (!v.is_empty()).then_some(v)
        });
        for (i, _) in &done {
            ids[*i] = None;
        }
        done
    }

    /// `MPI_Testsome`: after one progress pass, every completed request of
    /// `ids` (index and outcome; those entries become `None`).
    pub fn test_some(&self, ids: &mut [Option<ReqId>]) -> Vec<(usize, Result<Status, PmlError>)> {
        let done = self.with(|o| {
            o.progress();
            take_done(o, ids)
        });
        if done.is_empty() {
            self.outside_work();
        }
        for (i, _) in &done {
            ids[*i] = None;
        }
        done
    }

    /// `MPI_Testall`: after one progress pass, the outcomes of all of `ids`
    /// if every one has completed (they are then consumed), else `None`
    /// and nothing is consumed.
    pub fn test_all(&self, ids: &[ReqId]) -> Option<Vec<Result<Status, PmlError>>> {
        let r = self.with(|o| {
            o.progress();
            if !ids.iter().all(|&id| o.is_complete(id).unwrap_or(true)) {
                return None;
            }
            Some(
                ids.iter()
                    .map(|&id| o.test(id).map(|s| s.unwrap_or_default()))
                    .collect(),
            )
        });
        if r.is_none() {
            self.outside_work();
        }
        r
    }

    /// `MPI_Waitall`: every request completes (even after one failed),
    /// outcomes in order.
    pub fn wait_all(&self, ids: &[ReqId]) -> Vec<Result<Status, PmlError>> {
        let mut out: Vec<Result<Status, PmlError>> = Vec::with_capacity(ids.len());
        self.wait_all_with(ids.len(), |i| ids[i], |r| out.push(r));
        out
    }

    /// `MPI_Waitall` over `n` requests, the `i`th being `id(i)`: hands each
    /// outcome to `done`, in order, allocating nothing.
    pub fn wait_all_with(
        &self,
        n: usize,
        id: impl Fn(usize) -> ReqId,
        mut done: impl FnMut(Result<Status, PmlError>),
    ) {
        // Requests are taken in order: each pass tests from the first one
        // not taken yet and stops at one that is still incomplete (every one
        // must complete anyway, and completion never waits for a test), so a
        // pass costs one test, not one per pending request.
        let mut next = 0;
        self.wait_until(|o| {
            while next < n {
                match o.test(id(next)).transpose() {
                    Some(r) => done(r),
                    None => return None,
                }
                next += 1;
            }
            Some(())
        });
    }

    /// Starts a request with `start` and tests it under the same lock (an
    /// eager send, or a receive whose message already arrived, is complete
    /// at once); waits for it otherwise.
    fn start_then_wait(
        &self,
        start: impl FnOnce(&mut Engine<B>) -> Result<ReqId, PmlError>,
    ) -> Result<Status, PmlError> {
        let id = self.with(|o| -> Result<Result<Status, ReqId>, PmlError> {
            let id = start(o)?;
            if let Some(st) = o.test(id)? {
                return Ok(Ok(st));
            }
            // The first batch of polls under the same lock acquisition.
            if self.batch > 1 {
                for _ in 0..self.batch {
                    if o.progress() > 0 {
                        if let Some(st) = o.test(id)? {
                            return Ok(Ok(st));
                        }
                    }
                }
            }
            Ok(Err(id))
        })?;
        match id {
            Ok(st) => Ok(st),
            Err(id) => self.wait(id),
        }
    }

    /// `MPI_Send` and its modes: blocking send of a contiguous region.
    pub fn send(
        &self,
        buf: Buffer,
        dst: u32,
        tag: i32,
        ctx: u16,
        mode: SendMode,
    ) -> Result<Status, PmlError> {
        // Small and contiguous: straight into the BTL inside `isend`, no
        // request, and `test` answers at once. (Not `start_then_wait`:
        // through it a blocking send cost 17 more instructions, counted with
        // callgrind, and a send that is not done at once gains nothing from
        // its batch of polls under the same lock.)
        let r = self.with(|o| -> Result<Result<Status, ReqId>, PmlError> {
            let id = o.isend(buf, dst, tag, ctx, mode)?;
            Ok(o.test(id)?.ok_or(id))
        })?;
        match r {
            Ok(st) => Ok(st),
            Err(id) => self.wait(id),
        }
    }

    /// `MPI_Recv`. While spinning (not oversubscribed), the receive first
    /// reads its source's channel a few times before it is posted
    /// ([`Ob1::irecv_polling`]): a message that lands meanwhile completes it
    /// without the posted-receive round (8-byte ping-pong over sm: see
    /// `docs/perf/log/performance-history.md`, "The machine's states, the
    /// receive path and the blocking receive").
    pub fn recv(&self, buf: Buffer, src: Source, tag: Tag, ctx: u16) -> Result<Status, PmlError> {
        let polls = if self.spin > 0 { RECV_POLLS } else { 1 };
        self.start_then_wait(|o| o.irecv_polling(buf, src, tag, ctx, polls))
    }

    /// `MPI_Probe`.
    pub fn probe(&self, src: Source, tag: Tag, ctx: u16) -> Result<Status, PmlError> {
        self.wait_until(|o| match o.iprobe(src, tag, ctx) {
            Ok(None) => None,
            Ok(Some(s)) => Some(Ok(s)),
            Err(e) => Some(Err(e)),
        })
    }

    /// `MPI_Mprobe`.
    pub fn mprobe(&self, src: Source, tag: Tag, ctx: u16) -> Result<Option<Message>, PmlError> {
        self.wait_until(|o| match o.improbe(src, tag, ctx) {
            Ok(None) => None,
            Ok(Some(m)) => Some(Ok(m)),
            Err(e) => Some(Err(e)),
        })
    }

    /// `MPI_Buffer_detach`: waits until every buffered message has left the
    /// attached buffer, then returns it.
    pub fn buffer_detach(&self) -> Result<MemRegion, PmlError> {
        self.wait_until(|o| (!o.buffer_busy()).then_some(()));
        self.with(|o| o.buffer_detach())
    }

    /// Detaches `scope`'s buffer once every buffered message has left it:
    /// its region (`None`: an automatic buffer).
    pub fn buffer_detach_from(&self, scope: BufferScope) -> Result<Option<MemRegion>, PmlError> {
        self.wait_until(|o| (!o.buffer_busy_in(scope)).then_some(()));
        self.with(|o| o.buffer_detach_from(scope))
    }

    /// Waits until every buffered message has left `scope`'s buffer.
    pub fn buffer_flush_in(&self, scope: BufferScope) {
        self.wait_until(|o| (!o.buffer_busy_in(scope)).then_some(()));
    }
}

/// Consumes and returns every completed request of `ids` (index and
/// outcome), leaving `ids` unchanged.
fn take_done<B: ?Sized + Btl>(
    o: &mut Engine<B>,
    ids: &[Option<ReqId>],
) -> Vec<(usize, Result<Status, PmlError>)> {
    ids.iter()
        .enumerate()
        .filter_map(|(i, id)| Some((i, o.test((*id)?).transpose()?)))
        .collect()
}
