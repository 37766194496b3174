//! Landing of puts: the registrations peers may put into, shared by the
//! process's tcp modules, and the state of a put whose data is arriving.
//!
//! A put frame's header names a registration (id and nonce) and an offset
//! ([`super::wire::PutHdr`]); its data lands straight in the registered
//! memory as it is read from the socket ([`super::framing::FrameReader`]).
//! The registration is looked up when the header arrives and checked again
//! before every read of the data, so a deregistration (by any module) drops
//! the rest. A stale or forged key (the nonce is random per registration),
//! a registration that does not allow writes or a range outside it is
//! refused: the data is read and dropped.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::wire::PutHdr;
use crate::btl::BtlError;
use crate::mem::MemRegion;

/// The rest of a put's data, arriving.
#[derive(Debug)]
pub(super) struct Landing {
    /// Where the data goes; `None`: refused (bad key or range), the data
    /// is read and dropped.
    pub(super) target: Option<MemRegion>,
    /// The registration written to, and its nonce: checked before every
    /// read, so a deregistration (by any module) drops the rest.
    pub(super) reg: u32,
    pub(super) nonce: u64,
    /// Bytes landed so far.
    pub(super) got: usize,
    /// Bytes of data in all.
    pub(super) total: usize,
    /// Padding after the data, skipped once it has all landed.
    pub(super) trail: usize,
}

/// A registration of ours that peers may put into.
#[derive(Debug, Clone, Copy)]
struct Reg {
    region: MemRegion,
    nonce: u64,
    writable: bool,
}

/// The table behind [`PutTargets`] (index = id).
#[derive(Debug, Default)]
struct RegTable {
    regs: Vec<Option<Reg>>,
    free: Vec<u32>,
}

/// The registrations of every tcp module of a process: a peer's put
/// arrives on whichever of our modules its module is paired with, which
/// need not be the one that registered (several interfaces or links).
/// Clones share the table.
#[derive(Clone, Debug, Default)]
pub struct PutTargets(Arc<Mutex<RegTable>>);

impl PutTargets {
    /// An empty table.
    pub fn new() -> PutTargets {
        PutTargets::default()
    }

    fn lock(&self) -> MutexGuard<'_, RegTable> {
        // A panic elsewhere cannot leave the table half-updated (every update
        // is one assignment), so a poisoned lock is still usable.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `region` (`writable`: peers may put into it); returns its
    /// id and its nonce, which a put must name.
    pub fn register(&self, region: MemRegion, writable: bool) -> Result<(u32, u64), BtlError> {
        let mut t = self.lock();
        let id = match t.free.pop() {
            Some(i) => i,
            None => {
                let i = u32::try_from(t.regs.len())
                    .map_err(|_| BtlError::Invalid("tcp: too many registrations".into()))?;
                t.regs.push(None);
                i
            }
        };
        // A fresh unpredictable nonce per registration: a stale or forged
        // key names the wrong one.
        let nonce = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(id);
            h.write_usize(region.addr());
            h.finish()
        };
        t.regs[id as usize] = Some(Reg {
            region,
            nonce,
            writable,
        });
        Ok((id, nonce))
    }

    /// Drops registration `id`. A put still landing there (on any module)
    /// sees the entry gone before its next read, and drops the rest.
    pub fn deregister(&self, id: u32) {
        let mut t = self.lock();
        if t.regs.get(id as usize).is_some_and(Option::is_some) {
            t.regs[id as usize] = None;
            t.free.push(id);
        }
    }

    /// Whether registration `reg` is still the one of `nonce`.
    pub(super) fn is_live(&self, reg: u32, nonce: u64) -> bool {
        self.lock()
            .regs
            .get(reg as usize)
            .copied()
            .flatten()
            .is_some_and(|r| r.nonce == nonce)
    }

    /// Where a put's data goes: its registration's region at the offset,
    /// or `None` when the key is stale or forged, the registration is not
    /// writable, or the range leaves it.
    pub(super) fn target(&self, h: &PutHdr, len: usize) -> Option<MemRegion> {
        let r = self.lock().regs.get(h.id as usize).copied().flatten()?;
        if r.nonce != h.nonce || !r.writable {
            return None;
        }
        r.region.slice(usize::try_from(h.offset).ok()?, len)
    }
}
