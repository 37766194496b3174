//! What a blocking wait does between its progress passes once spinning has
//! not paid: give the core away, by yielding while that works and by
//! sleeping once it does not.
//!
//! `sched_yield` hands the core only to tasks of the caller's own scheduler
//! group. With autogroups (the Linux default), each session is a group:
//! ranks that `oxmpirun` or `srun` start share one, and a yield passes the
//! core from a waiting rank to a working one at once; MPICH's Hydra starts
//! every rank in a session of its own (`setsid`), so a waiting rank's yield
//! returns to itself and it keeps the core until the scheduler's tick,
//! while the rank that holds the message it waits for waits for that core.
//! 4 ranks on 2 cores next to busy processes of other sessions: a ring hop
//! took 0.6-1.2 ms (medians) under Hydra against 3-7 us under `oxmpirun`
//! and `srun`; with timed sleeps, 0.09-0.15 ms; sleeping on the doorbell,
//! about half that again (`docs/perf/log/oversubscribed-waits.md`).
//!
//! So the waiter times its yields. One that returns within [`YIELD_GAVE`]
//! gave the core to nobody; after [`FAST_YIELDS`] of those in a row the
//! waiter also sleeps after each yield that gave nothing, which takes it
//! off the run queue whatever its group ([`rest`] says when, the caller
//! sleeps):
//!
//! * On a doorbell ([`crate::Ob1::doorbell`]) when every BTL in use can
//!   wake a sleeper (sm, with self; not TCP): the waiter arms it, makes a
//!   last progress pass over every BTL and looks at what it waits for (any
//!   work found ends the pause at once), then sleeps in `futex_wait` until
//!   a peer's send rings it, for at most the wait's longest sleep
//!   (`pml_ob1_idle_sleep_max`). A message costs its receiver one wake-up,
//!   not the rest of a timed sleep. The BTL's side (who rings, and why no
//!   wake-up is lost) is `oxmpi_btl::sm::ring::bell`.
//! * Otherwise by the clock: first 1 us, doubling up to
//!   `pml_ob1_idle_sleep_max` ([`sleep`]), the thread's timer slack 1 us
//!   for the sleep and set back after it (with the default 50 us a sleep of
//!   1 to 20 us took 78-96 us here).
//!
//! A yield that took longer (another task ran), a pass that found work or a
//! new wait starts over (so does a last look that found work, [`woke`]).
//!
//! Invariant: nothing here runs while a wait is still within its spin
//! budget ([`crate::Pml::pause`] decides), so the latency of a message
//! that arrives within it is untouched; and a wait that sleeps wakes at
//! least every `idle_sleep_max` (a doorbell sleep: at the latest then), so
//! no message waits longer than that to be seen (plus the scheduler's
//! latency), whatever rings or fails to: that bound also covers a message
//! that another thread of the process (`MPI_THREAD_MULTIPLE`) makes
//! arrive for a sleeper without ringing (through self), and the liveness
//! checks that progress passes make (a dead peer is still found within the
//! same number of passes).

use std::cell::Cell;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

/// A yield that returns sooner gave the core to no other task (a switch
/// to another task and back takes longer, here 2 us and more).
pub const YIELD_GAVE: Duration = Duration::from_micros(2);
/// Fast yields in a row after which a waiter sleeps (on a doorbell too:
/// sleeping after 1 made a ring hop under Hydra with no busy process 19-36
/// us instead of 4-6, each hop then waking an idle core).
pub const FAST_YIELDS: u32 = 16;
/// The first sleep of a wait.
const FIRST_SLEEP: Duration = Duration::from_micros(1);
/// Timer slack while sleeping, in nanoseconds.
const SLEEP_SLACK_NS: u64 = 1_000;

/// One thread's waiting state, between calls of [`rest`].
#[derive(Clone, Copy, Default)]
struct State {
    /// The pass count of the last call: a smaller one is a new wait.
    polls: u32,
    /// Yields in a row that gave the core to nobody.
    fast: u32,
    /// The next sleep, in nanoseconds (0: none yet).
    sleep_ns: u64,
}

thread_local! {
    static STATE: Cell<State> = const {
        Cell::new(State {
            polls: 0,
            fast: 0,
            sleep_ns: 0,
        })
    };
}

/// Gives the core away once, `polls` passes into a wait (counting from 1,
/// growing within one wait): a yield; then, once yields have handed the
/// core to nobody, the sleep to take, of at most `sleep_max` (the caller
/// sleeps on a doorbell instead where it has one). `busy`: the last pass
/// found work (the count starts over).
pub fn rest(polls: u32, busy: bool, sleep_max: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    std::thread::yield_now();
    let gave = t0.elapsed() >= YIELD_GAVE;
    let mut s = STATE.with(Cell::get);
    let sleep_now = step(&mut s, polls, busy, gave, sleep_max);
    STATE.with(|c| c.set(s));
    sleep_now
}

/// The last look before a sleep found work: the next rest of this wait
/// counts its yields from zero again.
pub fn woke() {
    STATE.with(|c| {
        let s = c.get();
        c.set(State {
            polls: s.polls,
            ..State::default()
        });
    });
}

/// The decision of one [`rest`]: updates the thread's state `s` for a pass
/// count `polls`, a last pass that found work or not (`busy`) and a yield
/// that gave the core to another task or not (`gave`); the sleep to take.
fn step(
    s: &mut State,
    polls: u32,
    busy: bool,
    gave: bool,
    sleep_max: Duration,
) -> Option<Duration> {
    if polls <= s.polls || busy || gave {
        *s = State::default();
    }
    s.polls = polls;
    if gave {
        return None;
    }
    s.fast = s.fast.saturating_add(1);
    (s.fast >= FAST_YIELDS && !sleep_max.is_zero()).then(|| sleep_for(s, sleep_max))
}

/// The sleep to take now, and the next one (doubled, capped).
fn sleep_for(s: &mut State, max: Duration) -> Duration {
    let max_ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    let now = if s.sleep_ns == 0 {
        FIRST_SLEEP.as_nanos() as u64
    } else {
        s.sleep_ns
    }
    .min(max_ns);
    s.sleep_ns = now.saturating_mul(2).min(max_ns);
    Duration::from_nanos(now)
}

/// Sleeps for `d` with a timer slack of [`SLEEP_SLACK_NS`], the thread's
/// own slack set back afterwards.
pub fn sleep(d: Duration) {
    let before = rustix::thread::current_timer_slack().ok();
    let set = rustix::thread::set_current_timer_slack(NonZeroU64::new(SLEEP_SLACK_NS)).is_ok();
    std::thread::sleep(d);
    if set {
        let _ = rustix::thread::set_current_timer_slack(before.and_then(NonZeroU64::new));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_micros(6);

    #[test]
    fn sleeps_double_up_to_the_cap() {
        let mut s = State::default();
        let got: Vec<u64> = (0..5)
            .map(|_| sleep_for(&mut s, MAX).as_nanos() as u64)
            .collect();
        assert_eq!(got, [1_000, 2_000, 4_000, 6_000, 6_000]);
    }

    /// The sleeps of passes `from..to` of one wait whose yields are all
    /// fast, in microseconds (0: no sleep).
    fn sleeps(s: &mut State, passes: std::ops::Range<u32>) -> Vec<u64> {
        passes
            .map(|p| step(s, p, false, false, MAX).map_or(0, |d| d.as_micros() as u64))
            .collect()
    }

    #[test]
    fn fast_yields_lead_to_sleeps() {
        let mut s = State::default();
        let k = FAST_YIELDS;
        let got = sleeps(&mut s, 1..k + 4);
        let mut want = vec![0; k as usize - 1];
        want.extend([1, 2, 4, 6]);
        assert_eq!(got, want);
    }

    #[test]
    fn a_yield_that_gave_work_or_a_new_wait_starts_over() {
        let k = FAST_YIELDS;
        let mut s = State::default();
        sleeps(&mut s, 1..k + 2);
        // A yield that gave the core away: no sleep, the count from zero.
        assert_eq!(step(&mut s, k + 2, false, true, MAX), None);
        assert_eq!(sleeps(&mut s, k + 3..2 * k + 3).last(), Some(&1));
        // A pass that found work.
        assert_eq!(step(&mut s, 2 * k + 3, true, false, MAX), None);
        assert_eq!(s.fast, 1);
        // A new wait (fewer passes than the last call).
        sleeps(&mut s, 2 * k + 4..3 * k + 8);
        assert!(s.sleep_ns > 0);
        assert_eq!(step(&mut s, 1, false, false, MAX), None);
        assert_eq!((s.fast, s.sleep_ns), (1, 0));
    }

    #[test]
    fn no_sleep_when_the_cap_is_zero() {
        let mut s = State::default();
        for p in 1..4 * FAST_YIELDS {
            assert_eq!(step(&mut s, p, false, false, Duration::ZERO), None);
        }
    }

    #[test]
    fn timer_slack_is_set_back() {
        let before = rustix::thread::current_timer_slack().unwrap();
        sleep(Duration::from_micros(1));
        assert_eq!(rustix::thread::current_timer_slack().unwrap(), before);
        // And a real rest and sleep leave it too.
        for p in 1..2 * FAST_YIELDS {
            if let Some(d) = rest(p, false, MAX) {
                sleep(d);
            }
        }
        assert_eq!(rustix::thread::current_timer_slack().unwrap(), before);
    }
}
