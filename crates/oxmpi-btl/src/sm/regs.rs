//! Registrations of the sm BTL and their remote keys.
//!
//! Each module keeps its registrations privately (`Regs`) and mirrors up
//! to [`REGISTRATION_SLOTS`] of them in the registration table of its
//! segment (slots of 4 u64: id, address, length, access; the id written
//! last, `Release`, and 0 when the slot is free). An initiator with CMA
//! checks a key against the owner's table in the owner's mapped segment
//! (`cma_target`): a stale, forged or out-of-range key is `Invalid` and
//! nothing is touched. A key without a slot (the table was full) is served
//! by copy-in/copy-out, where the owner checks it against its private side
//! (`Regs::resolve`).
//!
//! # Remote keys (32 bytes)
//!
//! `id u64 | address u64 | length u64 | pid u32 | table slot u32` (slot
//! `u32::MAX`: the table was full, the key is served by copy-in/copy-out).

use std::collections::HashMap;
use std::sync::atomic::{fence, Ordering};

use super::segment::{Mapping, Segment};
use crate::btl::{Access, BtlError, RegId, Registration, RemoteKey};
use crate::mem::MemRegion;

/// Slots of the registration table in each segment: registrations beyond
/// this many at once are still served, by copy-in/copy-out.
pub const REGISTRATION_SLOTS: usize = 1024;
/// Words of one slot of the registration table.
pub(super) const SLOT_WORDS: usize = 4;
/// A key's slot when the table was full.
pub(super) const NO_SLOT: u32 = u32::MAX;
const KEY_LEN: usize = 32;
/// The registration allows remote reads (get).
pub(super) const ACCESS_READ: u64 = 1;
/// The registration allows remote writes (put).
pub(super) const ACCESS_WRITE: u64 = 2;

/// A remote key, decoded.
#[derive(Clone, Copy, Debug)]
pub(super) struct Key {
    /// The registration's id (never 0).
    pub(super) id: u64,
    /// Address of the key's range in the owner.
    pub(super) addr: u64,
    /// Bytes of the key's range.
    pub(super) len: u64,
    /// The owner's process.
    pub(super) pid: u32,
    /// The owner's table slot, or [`NO_SLOT`].
    pub(super) slot: u32,
}

impl Key {
    /// The wire form.
    pub(super) fn encode(self) -> RemoteKey {
        let mut b = [0u8; KEY_LEN];
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..28].copy_from_slice(&self.pid.to_le_bytes());
        b[28..32].copy_from_slice(&self.slot.to_le_bytes());
        RemoteKey::new(&b).expect("32 bytes fit a key")
    }

    /// Parses untrusted bytes.
    pub(super) fn decode(bytes: &[u8]) -> Result<Key, String> {
        let b: &[u8; KEY_LEN] = bytes
            .try_into()
            .map_err(|_| format!("malformed remote key ({} bytes)", bytes.len()))?;
        let u64_at = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let key = Key {
            id: u64_at(0),
            addr: u64_at(8),
            len: u64_at(16),
            pid: u32::from_le_bytes([b[24], b[25], b[26], b[27]]),
            slot: u32::from_le_bytes([b[28], b[29], b[30], b[31]]),
        };
        if key.id == 0 {
            return Err("malformed remote key (id 0)".into());
        }
        Ok(key)
    }

    /// `offset..offset + len` inside the key's range, as an offset.
    /// Where the key's range starts inside a registration of `[addr,
    /// addr+len)` (`None`: the key's range is not inside it). A key covers
    /// the whole registration or, from [`Btl::sub_key`], a part of it.
    pub(super) fn base_in(&self, addr: u64, len: u64) -> Option<usize> {
        let base = self.addr.checked_sub(addr)?;
        let end = base.checked_add(self.len)?;
        if end <= len {
            usize::try_from(base).ok()
        } else {
            None
        }
    }

    /// Whether `len` bytes at `offset` lie inside the key's range.
    pub(super) fn check_range(&self, offset: usize, len: usize) -> Result<(), String> {
        let end = (offset as u64).checked_add(len as u64);
        if end.is_some_and(|e| e <= self.len) {
            Ok(())
        } else {
            Err(format!(
                "{len} bytes at offset {offset} do not fit a registration of {} bytes",
                self.len
            ))
        }
    }
}

fn access_bits(access: Access) -> u64 {
    let mut bits = 0;
    if access.contains(Access::REMOTE_READ) {
        bits |= ACCESS_READ;
    }
    if access.contains(Access::REMOTE_WRITE) {
        bits |= ACCESS_WRITE;
    }
    bits
}

/// This module's registrations (the private side; the shared table mirrors
/// those with a slot).
#[derive(Debug)]
pub(super) struct Regs {
    map: HashMap<u64, (MemRegion, u64, u32)>,
    next_id: u64,
    free_slots: Vec<u32>,
}

impl Regs {
    /// The registered region a key names, narrowed to `[offset, offset+len)`,
    /// if it allows `need` (checked by the owner, for copy-in/copy-out).
    pub(super) fn resolve(
        &self,
        pid: u32,
        key: &[u8],
        offset: usize,
        len: usize,
        need: u64,
    ) -> Result<MemRegion, String> {
        let key = Key::decode(key)?;
        if key.pid != pid {
            return Err(format!(
                "remote key of pid {} used towards pid {pid}",
                key.pid
            ));
        }
        let &(region, access, _) = self
            .map
            .get(&key.id)
            .ok_or_else(|| format!("remote key names no registration ({})", key.id))?;
        let base = key
            .base_in(region.addr() as u64, region.len() as u64)
            .ok_or("remote key does not match its registration")?;
        if access & need != need {
            return Err("registration does not allow this access".into());
        }
        key.check_range(offset, len)?;
        region
            .slice(base + offset, len)
            .ok_or_else(|| "range outside the registration".into())
    }

    /// No registration yet, every slot of the table free.
    pub(super) fn new() -> Regs {
        Regs {
            map: HashMap::new(),
            next_id: 1,
            free_slots: (0..REGISTRATION_SLOTS as u32).rev().collect(),
        }
    }

    /// Registers `region` for a process `pid`, mirrored in the table at
    /// `table_off` of `segment` when a slot is free.
    pub(super) fn register(
        &mut self,
        segment: &Segment,
        table_off: usize,
        pid: u32,
        region: MemRegion,
        access: Access,
    ) -> Registration {
        let id = self.next_id;
        self.next_id += 1;
        let bits = access_bits(access);
        let slot = self.free_slots.pop().unwrap_or(NO_SLOT);
        if slot != NO_SLOT {
            let w = segment
                .words(table_off + slot as usize * SLOT_WORDS * 8, SLOT_WORDS)
                .expect("table slot inside the segment");
            w[1].store(region.addr() as u64, Ordering::Relaxed);
            w[2].store(region.len() as u64, Ordering::Relaxed);
            w[3].store(bits, Ordering::Relaxed);
            w[0].store(id, Ordering::Release);
        }
        self.map.insert(id, (region, bits, slot));
        let key = Key {
            id,
            addr: region.addr() as u64,
            len: region.len() as u64,
            pid,
            slot,
        };
        Registration {
            id: RegId(id),
            region,
            key: key.encode(),
        }
    }

    /// Drops registration `id`, freeing its slot in the table at
    /// `table_off` of `segment`.
    pub(super) fn deregister(&mut self, segment: &Segment, table_off: usize, id: RegId) {
        if let Some((_, _, slot)) = self.map.remove(&id.0) {
            if slot != NO_SLOT {
                let w = segment
                    .words(table_off + slot as usize * SLOT_WORDS * 8, SLOT_WORDS)
                    .expect("table slot inside the segment");
                w[0].store(0, Ordering::Release);
                self.free_slots.push(slot);
            }
        }
    }
}

/// A key for `len` bytes at `offset` of registration `reg`.
pub(super) fn sub_key(
    reg: &Registration,
    offset: usize,
    len: usize,
) -> Result<RemoteKey, BtlError> {
    let key = Key::decode(reg.key.as_bytes()).map_err(BtlError::Invalid)?;
    key.check_range(offset, len).map_err(BtlError::Invalid)?;
    Ok(Key {
        addr: key.addr + offset as u64,
        len: len as u64,
        ..key
    }
    .encode())
}

/// Checks a key against the owner's shared registration table (CMA
/// path): the table of `table_slots` slots at `table_off` in the owner's
/// `mapping`. Returns the remote address of `offset`.
pub(super) fn cma_target(
    mapping: &Mapping,
    table_off: usize,
    table_slots: usize,
    key: &Key,
    offset: usize,
    len: usize,
    need: u64,
) -> Result<usize, BtlError> {
    let invalid = |why: &str| BtlError::Invalid(format!("sm: {why}"));
    if key.slot as usize >= table_slots {
        return Err(invalid("remote key names no registration slot"));
    }
    let words = mapping
        .words(table_off + key.slot as usize * SLOT_WORDS * 8, SLOT_WORDS)
        .ok_or_else(|| invalid("registration slot outside the segment"))?;
    let id = words[0].load(Ordering::Acquire);
    let addr = words[1].load(Ordering::Relaxed);
    let rlen = words[2].load(Ordering::Relaxed);
    let access = words[3].load(Ordering::Relaxed);
    fence(Ordering::Acquire);
    let again = words[0].load(Ordering::Relaxed);
    if id != key.id || again != id {
        return Err(invalid(
            "remote key names no registration (stale or forged)",
        ));
    }
    if key.base_in(addr, rlen).is_none() {
        return Err(invalid("remote key does not match its registration"));
    }
    if access & need != need {
        return Err(invalid("registration does not allow this access"));
    }
    key.check_range(offset, len).map_err(|e| invalid(&e))?;
    usize::try_from(key.addr + offset as u64).map_err(|_| invalid("address overflow"))
}
