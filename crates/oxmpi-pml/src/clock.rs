//! The time the engine sees.
//!
//! The protocol engine reads no clock of its own: it asks the [`Clock`] it
//! was given ([`crate::Ob1::set_clock`]). Only RDMA copies are timed (the
//! split balancing of a transfer shared between a GET and a PUT compares
//! the two copies' speeds), so a clock is read twice per RDMA call and
//! never on the small-message path. In a process, the clock is the wall
//! clock ([`WallClock`]); in a simulated world it is the network's virtual
//! time, which makes the balancing deterministic (a seed replays it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// A source of time, in nanoseconds from an origin of its own.
pub trait Clock: Send + Sync {
    /// Nanoseconds now.
    fn now_ns(&self) -> u64;
}

/// The wall clock (monotonic), from the first time a `WallClock` is read.
///
/// ```
/// use oxmpi_pml::clock::{Clock, WallClock};
/// let (a, b) = (WallClock.now_ns(), WallClock.now_ns());
/// assert!(b >= a);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct WallClock;

impl Clock for WallClock {
    fn now_ns(&self) -> u64 {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        let origin = *ORIGIN.get_or_init(Instant::now);
        u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock whose time is set from outside (a simulated network's virtual
/// time): a shared counter.
///
/// ```
/// use oxmpi_pml::clock::{Clock, SetClock};
/// let c = SetClock::default();
/// c.set(1500);
/// assert_eq!(c.now_ns(), 1500);
/// let shared = c.clone();
/// shared.set(2000);
/// assert_eq!(c.now_ns(), 2000);
/// ```
#[derive(Clone, Debug, Default)]
pub struct SetClock(Arc<AtomicU64>);

impl SetClock {
    /// Sets the time to `ns`.
    pub fn set(&self, ns: u64) {
        self.0.store(ns, Ordering::Relaxed);
    }
}

impl Clock for SetClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}
