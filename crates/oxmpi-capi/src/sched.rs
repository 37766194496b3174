//! Collective schedules advanced by progress, with no helper thread (as
//! MPICH's `MPIR_Sched` and Open MPI's libnbc): the engine under the
//! non-blocking (`MPI_Ibcast`, ...), persistent (`MPI_Bcast_init`, ...)
//! and the v/w/scan collectives ([`crate::nbc`]).
//!
//! A schedule is a sequence of rounds; a round holds point-to-point sends
//! and receives over the communicator's collective shadow (`CommObj::coll`)
//! and then local steps (a reduction `inout = in op inout` with the
//! operation's kernel). Copies are sends to oneself. A round starts when
//! the previous one has completed whole. Every message of one collective
//! carries the tag taken from the communicator's sequence of collectives
//! when it was started (for a persistent one: when it was initialized),
//! in `TAG_BASE..`: outstanding collectives on one communicator never
//! match each other's messages, nor the blocking collectives' (tags 0-2).
//! The schedule owns its temporary buffers.
//!
//! Active schedules are registered (`ACTIVE`); every test or wait of any
//! collective request, and every collective started, advances all of them
//! ([`advance_all`]), so collectives completed in any order on different
//! ranks still progress; so does the point-to-point layer's progress while
//! any is active (`oxmpi::Universe::set_progress_hook`): a
//! rank blocked in `MPI_Recv` or testing a receive in a loop still moves
//! its outstanding collectives on.
//!
//! On an intercommunicator, transfers go either to the remote group (over
//! the shadow intercommunicator, whose ranks name the remote group) or
//! within the local group (over the shadow's local group,
//! [`oxmpi::Communicator::local_group_comm`]), as [`Sched::within`] says
//! when they are added; copies are sends to oneself in the local group.
//!
//! Failures: a failed transfer (`MPI_ERR_PROC_FAILED` from a dead peer,
//! ...) does not stop the schedule: its error is kept, local steps are
//! skipped from then on, and every later send carries a poisoned message
//! instead of its data (one byte where zero are due, none where some are),
//! so that a member waiting for this one learns of the failure instead of
//! waiting for ever, and poisons its own later sends in turn. A receive
//! whose size is not the one due is such a poisoned message: the
//! collective fails with `MPI_ERR_PROC_FAILED` there too. A blocking wait
//! for a collective waits as point-to-point waits do, acting on the
//! launcher's failure notices ([`oxmpi::Universe::wait_for`]), so a member
//! that dies is noticed even by a rank that never had a connection to it.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use oxmpi::{Error, ErrorClass, RawBuffer, SendMode, UserDatatype};

use crate::coll::Reduction;
use crate::state::{lock, state, Comm, CommRef, Op};

/// Tags of collective schedules: `TAG_BASE + sequence number mod TAG_SPAN`.
const TAG_BASE: i32 = 1 << 30;
/// See [`TAG_BASE`].
const TAG_SPAN: u32 = 1 << 30;

/// Where a buffer of a step is.
#[derive(Clone, Copy, Debug)]
pub enum Loc {
    /// The program's memory, at this address.
    User(usize),
    /// Temporary buffer `.0` of the schedule, at byte offset `.1`.
    Tmp(usize, isize),
}

impl Loc {
    /// The location `off` bytes further.
    pub fn at(self, off: isize) -> Loc {
        match self {
            Loc::User(a) => Loc::User(a.wrapping_add_signed(off)),
            Loc::Tmp(i, o) => Loc::Tmp(i, o + off),
        }
    }

    /// The program's address `p`.
    pub fn user(p: *const c_void) -> Loc {
        Loc::User(p as usize)
    }
}

/// A point-to-point transfer of a round.
struct Xfer {
    send: bool,
    /// Within the local group (an intercommunicator's; on an
    /// intracommunicator the only one).
    local: bool,
    peer: i32,
    at: Loc,
    n: usize,
    dt: UserDatatype,
}

/// A local step: `inout = inb op inout` over `n` elements whose memory
/// image is `len` bytes with the origin `origin` bytes in; or (`copy`)
/// the `len` dense bytes of `inb`'s image (its origin `origin` bytes in)
/// copied over `inout`'s (its origin `to_origin` bytes in).
struct Reduce {
    inb: Loc,
    inout: Loc,
    n: usize,
    len: usize,
    origin: isize,
    to_origin: isize,
    copy: bool,
}

#[derive(Default)]
struct Round {
    xfers: Vec<Xfer>,
    local: Vec<Reduce>,
}

enum Phase {
    Inactive,
    Running,
    Done(Option<Error>),
}

/// A transfer in flight: its request, and for a receive the bytes due.
struct Pending {
    op: Op,
    due: Option<usize>,
}

/// The byte a poisoned message carries where none is due.
static POISON: [u8; 1] = [0];

/// A collective schedule.
pub struct Sched {
    c: CommRef,
    /// An intercommunicator's local group (its shadow's).
    group: Option<Comm>,
    /// Where the transfers added next go: within the local group.
    within: bool,
    tag: i32,
    rounds: Vec<Round>,
    tmp: Vec<Vec<u8>>,
    red: Option<Reduction>,
    at: usize,
    reqs: Vec<Pending>,
    /// The first failure of this run, if any (the run goes on, poisoned).
    err: Option<Error>,
    phase: Phase,
}

/// The memory image of `n` elements of `dt`: its length, and the offset of
/// the origin in it (data may lie before the origin).
pub fn image(dt: &UserDatatype, n: usize) -> Result<(usize, isize), Error> {
    let conv = oxmpi_datatype::Convertor::new(dt.as_raw(), n)?;
    Ok(match conv.span() {
        Some(sp) => ((sp.end - sp.start) as usize, -sp.start),
        None => (0, 0),
    })
}

impl Sched {
    /// An empty schedule on `c`, with the next tag of its sequence.
    pub fn new(c: CommRef) -> Sched {
        let seq = c.coll_seq.fetch_add(1, Ordering::Relaxed);
        let tag = TAG_BASE + (seq % TAG_SPAN) as i32;
        let group = c.coll.local_group_comm();
        Sched {
            c,
            group,
            within: false,
            tag,
            rounds: vec![Round::default()],
            tmp: Vec::new(),
            red: None,
            at: 0,
            reqs: Vec::new(),
            err: None,
            phase: Phase::Inactive,
        }
    }

    /// The communicator of transfers within the local group (`local`) or
    /// to the remote group (the same on an intracommunicator).
    fn comm(&self, local: bool) -> &Comm {
        match (&self.group, local) {
            (Some(g), true) => g,
            _ => &self.c.coll,
        }
    }

    /// This rank and the size of the group the next transfers go to: on an
    /// intercommunicator the local group's (the remote group's size is
    /// [`Sched::remote_size`]).
    pub fn rank_size(&self) -> (i32, i32) {
        (self.c.coll.rank(), self.c.coll.size())
    }

    /// The size of an intercommunicator's remote group (`None` on an
    /// intracommunicator).
    pub fn remote_size(&self) -> Option<i32> {
        self.c.coll.remote_size()
    }

    /// On an intercommunicator, whether the transfers added next go within
    /// the local group (ranks of the local group: the intracommunicator
    /// algorithms run there unchanged) or to the remote group (the
    /// default). No effect on an intracommunicator.
    pub fn within(&mut self, local: bool) {
        self.within = local;
    }

    /// Sets the reduction of the local steps.
    pub(crate) fn set_reduction(&mut self, r: Reduction) {
        self.red = Some(r);
    }

    /// Whether the reduction set is commutative (none set: true).
    pub(crate) fn commutative(&self) -> bool {
        self.red.as_ref().map_or(true, Reduction::commutative)
    }

    /// A temporary buffer for `n` elements of `dt` (its origin).
    pub fn tmp(&mut self, dt: &UserDatatype, n: usize) -> Result<Loc, Error> {
        let (len, origin) = image(dt, n)?;
        self.tmp.push(vec![0u8; len]);
        Ok(Loc::Tmp(self.tmp.len() - 1, origin))
    }

    /// Ends the current round (the next steps go to a new one), unless it
    /// is empty.
    pub fn next(&mut self) {
        let r = self.rounds.last().expect("a round");
        if !(r.xfers.is_empty() && r.local.is_empty()) {
            self.rounds.push(Round::default());
        }
    }

    fn round(&mut self) -> &mut Round {
        self.rounds.last_mut().expect("a round")
    }

    /// Sends `n` elements of `dt` at `at` to `peer` in the current round.
    pub fn send(&mut self, peer: i32, at: Loc, n: usize, dt: &UserDatatype) {
        let dt = dt.clone();
        let local = self.within;
        self.round().xfers.push(Xfer {
            send: true,
            local,
            peer,
            at,
            n,
            dt,
        });
    }

    /// Receives `n` elements of `dt` at `at` from `peer` in the current
    /// round.
    pub fn recv(&mut self, peer: i32, at: Loc, n: usize, dt: &UserDatatype) {
        let dt = dt.clone();
        let local = self.within;
        self.round().xfers.push(Xfer {
            send: false,
            local,
            peer,
            at,
            n,
            dt,
        });
    }

    /// Copies `sn` of `st` at `src` to `rn` of `rt` at `dst` in the current
    /// round: between two dense contiguous layouts a local step (after the
    /// round's transfers, before its reductions added later), otherwise a
    /// send to oneself (a transfer of the round).
    pub fn copy(
        &mut self,
        src: Loc,
        sn: usize,
        st: &UserDatatype,
        dst: Loc,
        rn: usize,
        rt: &UserDatatype,
    ) {
        let bytes = sn * st.size();
        if bytes == 0 && rn * rt.size() == 0 {
            return;
        }
        if bytes == rn * rt.size() && st.is_contiguous() && rt.is_contiguous() {
            if let (Ok((ls, os)), Ok((lr, or))) = (image(st, sn), image(rt, rn)) {
                if ls == bytes && lr == bytes {
                    self.round().local.push(Reduce {
                        inb: src,
                        inout: dst,
                        n: sn,
                        len: bytes,
                        origin: os,
                        to_origin: or,
                        copy: true,
                    });
                    return;
                }
            }
        }
        let (me, within) = (self.c.coll.rank(), self.within);
        self.within = true;
        self.recv(me, dst, rn, rt);
        self.send(me, src, sn, st);
        self.within = within;
    }

    /// After the current round's transfers: `inout = inb op inout` over `n`
    /// elements of `dt` (the reduction set by `Sched::set_reduction`).
    pub fn reduce(
        &mut self,
        inb: Loc,
        inout: Loc,
        n: usize,
        dt: &UserDatatype,
    ) -> Result<(), Error> {
        let (len, origin) = image(dt, n)?;
        self.round().local.push(Reduce {
            inb,
            inout,
            n,
            len,
            origin,
            to_origin: origin,
            copy: false,
        });
        Ok(())
    }

    fn ptr(&mut self, l: Loc) -> *mut u8 {
        match l {
            Loc::User(a) => a as *mut u8,
            Loc::Tmp(i, off) => self.tmp[i].as_mut_ptr().wrapping_offset(off),
        }
    }

    /// Posts round `self.at`'s transfers (receives first).
    fn post(&mut self) {
        let round = std::mem::take(&mut self.rounds[self.at]);
        self.post_round(&round);
        self.rounds[self.at] = round;
    }

    /// Posts the transfers of `round`; one that cannot be posted is a
    /// failed one (kept in `err`, the rest posted all the same).
    fn post_round(&mut self, round: &Round) {
        let recvs = round.xfers.iter().filter(|x| !x.send);
        for x in recvs.chain(round.xfers.iter().filter(|x| x.send)) {
            let r = self.post_one(x);
            match r {
                Ok(p) => self.reqs.push(p),
                Err(e) => self.failed(e),
            }
        }
    }

    fn post_one(&mut self, x: &Xfer) -> Result<Pending, Error> {
        let poisoned = x.send && self.err.is_some();
        let b = if poisoned {
            // One byte where none is due, none where some are.
            let n = usize::from(x.n == 0 || x.dt.size() == 0);
            // SAFETY: a static byte, only read.
            unsafe { RawBuffer::new(POISON.as_ptr(), n, &UserDatatype::of::<u8>()) }?
        } else {
            let p = self.ptr(x.at);
            // SAFETY: the program's buffer as the collective's arguments
            // describe it, or a temporary buffer of the schedule, which
            // lives until the schedule has completed, every transfer with
            // it.
            unsafe { RawBuffer::new(p, x.n, &x.dt) }?
        };
        let peer = self.comm(x.local).process_at_rank(x.peer);
        if x.send {
            let op = b.send_to(&peer, self.tag, SendMode::Standard)?;
            Ok(Pending { op, due: None })
        } else {
            let op = b.receive_from(&peer, self.tag)?;
            Ok(Pending {
                op,
                due: Some(x.n * x.dt.size()),
            })
        }
    }

    /// Keeps the first failure of the run.
    fn failed(&mut self, e: Error) {
        if self.err.is_none() {
            self.err = Some(e);
        }
    }

    /// Runs round `self.at`'s local steps (none once the run has failed:
    /// the data may be poison).
    fn locals(&mut self) -> Result<(), Error> {
        if self.err.is_some() {
            return Ok(());
        }
        let round = std::mem::take(&mut self.rounds[self.at]);
        let mut r = Ok(());
        for s in &round.local {
            if s.n == 0 || s.len == 0 {
                // Nothing to combine (a zero count, whose buffers may be
                // null: no slice is made of them).
                continue;
            }
            let (a, b) = (self.ptr(s.inb), self.ptr(s.inout));
            if s.copy {
                // SAFETY: `len` dense bytes of data around each origin: the
                // program's buffers as the collective's arguments describe
                // them, or temporary buffers of the schedule (`copy`
                // checked both layouts); `copy` allows overlap.
                unsafe {
                    std::ptr::copy(
                        a.wrapping_offset(-s.origin),
                        b.wrapping_offset(-s.to_origin),
                        s.len,
                    )
                };
                continue;
            }
            let red = self
                .red
                .as_ref()
                .expect("a reduction step has its reduction");
            // SAFETY: two distinct buffers holding the images of `n`
            // elements around their origins (the program's, or temporary).
            let (x, y) = unsafe {
                (
                    std::slice::from_raw_parts_mut(a.wrapping_offset(-s.origin), s.len),
                    std::slice::from_raw_parts_mut(b.wrapping_offset(-s.origin), s.len),
                )
            };
            r = red.apply(x, y, s.n);
            if r.is_err() {
                break;
            }
        }
        self.rounds[self.at] = round;
        r
    }

    /// Records the outcome of a completed transfer (`due`: the bytes a
    /// receive expects).
    fn settle(&mut self, due: Option<usize>, st: &oxmpi::Status) {
        match (st.error(), due) {
            // A poisoned message where nothing was due.
            (Some(ErrorClass::Truncate), Some(0)) => self.failed(poisoned()),
            (Some(class), _) => self.failed(Error::new(
                class,
                format!(
                    "a transfer of the collective failed: {}",
                    st.error_reason()
                        .unwrap_or_else(|| "no reason given".to_string())
                ),
            )),
            (None, Some(due)) if st.bytes() != due => self.failed(poisoned()),
            (None, _) => {}
        }
    }

    /// Starts the schedule (its first round).
    fn start(&mut self) {
        self.at = 0;
        self.err = None;
        self.phase = Phase::Running;
        self.post();
        self.advance();
    }

    /// Advances a running schedule as far as it goes without waiting
    /// (after a progress pass).
    fn advance(&mut self) {
        while let Phase::Running = self.phase {
            let mut i = 0;
            while i < self.reqs.len() {
                if !self.reqs[i].op.completed() {
                    i += 1;
                    continue;
                }
                let p = self.reqs.swap_remove(i);
                let ((), st) = p.op.wait_status();
                self.settle(p.due, &st);
            }
            if !self.reqs.is_empty() {
                return;
            }
            if let Err(e) = self.locals() {
                self.failed(e);
            }
            self.at += 1;
            if self.at == self.rounds.len() {
                self.phase = Phase::Done(self.err.take());
                return;
            }
            self.post();
        }
    }
}

/// The error of a poisoned message (or of one of another size than the
/// collective's arguments describe).
fn poisoned() -> Error {
    Error::new(
        ErrorClass::ProcFailed,
        "a member of the collective failed (its message here is poisoned), or sent another \
         amount of data than the collective's arguments describe",
    )
}

/// A collective request: its schedule, and whether it is persistent.
pub struct CollReq {
    sched: Mutex<Sched>,
    persistent: bool,
}

/// Schedules running (advanced by [`advance_all`]).
static ACTIVE: Mutex<Vec<Arc<CollReq>>> = Mutex::new(Vec::new());

/// Registers [`advance_schedules`] as the point-to-point layer's progress hook
/// (once), and says how many schedules are in [`ACTIVE`]: while not zero,
/// its progress passes, failed tests and blocking waits (an `MPI_Recv`, an
/// `MPI_Wait` on a receive) advance them, as MPI's progress rule asks.
fn hook(active: usize) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ACTIVE_N.store(active, Ordering::Relaxed);
    let Ok(s) = state() else { return };
    ONCE.call_once(|| s.universe.set_progress_hook(Box::new(advance_schedules)));
    s.universe.set_progress_hook_pending(active);
}

/// How many schedules are in [`ACTIVE`] (read without its lock).
static ACTIVE_N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Advances the running schedules, if any (`MPI_Test` of a point-to-point
/// request that is still incomplete: one load when none runs).
#[inline]
pub fn poke() {
    if ACTIVE_N.load(Ordering::Relaxed) > 0 {
        advance_schedules();
    }
}

/// One progress pass, which advances every running schedule as far as it
/// goes (through the progress hook, `advance_schedules`, while any
/// runs).
pub fn advance_all() {
    if let Ok(s) = state() {
        s.universe.progress();
    }
}

/// Every running schedule advanced as far as it goes without waiting (the
/// progress hook); finished ones leave `ACTIVE`.
fn advance_schedules() {
    let running: Vec<Arc<CollReq>> = lock(&ACTIVE).clone();
    if running.is_empty() {
        return;
    }
    let mut finished = Vec::new();
    for c in &running {
        // A schedule being advanced by another thread (or by a user
        // function it called) is left to it.
        if let Ok(mut g) = c.sched.try_lock() {
            g.advance();
            if !matches!(g.phase, Phase::Running) {
                finished.push(Arc::as_ptr(c));
            }
        }
    }
    if !finished.is_empty() {
        let mut g = lock(&ACTIVE);
        // A schedule found finished may have been completed and started
        // again by its owner meanwhile (a persistent collective, another
        // thread): it stays while it runs (its entry may then be there
        // twice, which only advances it twice).
        g.retain(|c| !finished.contains(&Arc::as_ptr(c)) || c.running_or_busy());
        hook(g.len());
    }
}

impl CollReq {
    /// A request of schedule `s`, inactive.
    pub fn new(s: Sched, persistent: bool) -> Arc<CollReq> {
        Arc::new(CollReq {
            sched: Mutex::new(s),
            persistent,
        })
    }

    /// Whether it is a persistent collective.
    pub fn persistent(&self) -> bool {
        self.persistent
    }

    /// Starts it (`MPI_Start` of a persistent one: `MPI_ERR_REQUEST` while
    /// it is active).
    pub fn start(self: &Arc<CollReq>) -> Result<(), Error> {
        {
            let mut g = lock(&self.sched);
            if matches!(g.phase, Phase::Running | Phase::Done(_)) {
                return Err(Error::new(
                    ErrorClass::Request,
                    "MPI_Start of a persistent collective that is still active",
                ));
            }
            g.start();
            if !matches!(g.phase, Phase::Running) {
                return Ok(());
            }
        }
        let mut g = lock(&ACTIVE);
        g.push(self.clone());
        hook(g.len());
        Ok(())
    }

    /// Whether it is running, or busy with another thread (then counted as
    /// running: it leaves `ACTIVE` at a later pass).
    fn running_or_busy(&self) -> bool {
        self.sched
            .try_lock()
            .map_or(true, |g| matches!(g.phase, Phase::Running))
    }

    /// Whether it is active (started and not completed by a test or wait).
    pub fn is_active(&self) -> bool {
        !matches!(lock(&self.sched).phase, Phase::Inactive)
    }

    /// Whether it has completed (after advancing every schedule).
    pub fn is_complete(&self) -> bool {
        advance_all();
        matches!(lock(&self.sched).phase, Phase::Done(_))
    }

    /// Its outcome if complete, left complete (`MPI_Request_get_status`):
    /// `None` while running, no error for an inactive one.
    pub fn peek(&self) -> Option<Option<Error>> {
        advance_all();
        match &lock(&self.sched).phase {
            Phase::Done(e) => Some(e.clone()),
            Phase::Inactive => Some(None),
            Phase::Running => None,
        }
    }

    /// Its outcome if complete (`block`: waits as a point-to-point wait
    /// does, every schedule advanced between its passes, failure notices
    /// acted on), the request left inactive; `None` while incomplete (or
    /// inactive).
    pub fn complete(&self, block: bool) -> Option<Option<Error>> {
        advance_all();
        if block {
            if let Ok(s) = state() {
                // A schedule busy in another thread counts as running.
                s.universe.wait_for(|| {
                    self.sched
                        .try_lock()
                        .is_ok_and(|g| !matches!(g.phase, Phase::Running))
                });
            }
        }
        let mut g = lock(&self.sched);
        match std::mem::replace(&mut g.phase, Phase::Inactive) {
            Phase::Done(e) => Some(e),
            Phase::Inactive => None,
            running => {
                g.phase = running;
                None
            }
        }
    }
}

/// Starts schedule `s` as a non-blocking collective; its request.
pub fn start_nb(s: Sched) -> Result<Arc<CollReq>, Error> {
    let r = CollReq::new(s, false);
    r.start()?;
    advance_all();
    Ok(r)
}

/// Runs schedule `s` to completion in this thread (a blocking
/// collective): each round's transfers posted, then waited for one by one
/// as point-to-point waits do (acting on the launcher's failure notices;
/// running schedules advance meanwhile through the progress hook), then
/// its local steps. The schedule never becomes a request nor enters
/// `ACTIVE`: that bookkeeping cost several times a short message's
/// latency (docs/perf/log/collectives.md).
pub fn run(mut s: Sched) -> Result<(), Error> {
    s.at = 0;
    s.err = None;
    s.phase = Phase::Running;
    while s.at < s.rounds.len() {
        s.post();
        for p in std::mem::take(&mut s.reqs) {
            let ((), st) = p.op.wait_status();
            s.settle(p.due, &st);
        }
        if let Err(e) = s.locals() {
            s.failed(e);
        }
        s.at += 1;
    }
    s.err.take().map_or(Ok(()), Err)
}
