//! The sm BTL's [`Doorbell`]: the bell of this rank's inbox
//! ([`super::ring::bell`]), which every local peer's producer looks at
//! after each record it publishes (ring, fast box or CONTROL record).
//!
//! Threads of this process that sleep at once share the one bell: it stays
//! armed until the last of them disarms it (a count under a process-local
//! lock, taken only on the way to and from a sleep).

use std::sync::Mutex;
use std::time::Duration;

use super::ring::{Bell, Slept};
use crate::btl::Doorbell;

/// This rank's inbox bell, as a [`Doorbell`].
pub(super) struct SmDoorbell {
    bell: Bell,
    /// Threads between `arm` and `disarm`.
    armed: Mutex<u32>,
}

impl SmDoorbell {
    pub(super) fn new(bell: Bell) -> SmDoorbell {
        SmDoorbell {
            bell,
            armed: Mutex::new(0),
        }
    }

    fn count(&self) -> std::sync::MutexGuard<'_, u32> {
        self.armed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Doorbell for SmDoorbell {
    fn arm(&self) {
        let mut n = self.count();
        *n += 1;
        // Armed again even when another thread had armed it: a producer
        // may have rung (cleared) it since.
        self.bell.arm();
    }

    fn sleep(&self, timeout: Duration) -> bool {
        self.bell.sleep(timeout) == Slept::Rung
    }

    fn disarm(&self) {
        let mut n = self.count();
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.bell.disarm();
        }
    }
}
