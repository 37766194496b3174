//! The sm BTL's business card: what a rank publishes so that the ranks of
//! its node can attach its segment.
//!
//! # Layout (72 bytes, little endian)
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `"OXSM"` |
//! | 4 | 1 | version (1) |
//! | 5 | 1 | flags: bit 0 = the owner accepts single copy (CMA) |
//! | 6 | 1 | log2 of the ring capacity |
//! | 7 | 1 | zero |
//! | 8 | 4 | local index |
//! | 12 | 4 | local count |
//! | 16 | 8 | CMA probe word address |
//! | 24 | 8 | CMA probe word value |
//! | 32 | 40 | the segment card ([`SegmentCard`], holds the pid) |
//!
//! A card with another magic or version is not an sm card this build
//! understands (`add_peer` answers `None`); a card with the right magic and
//! version but a bad field is [`BtlError::Invalid`].

use super::ring::Ring;
use super::segment::{SegmentCard, CARD_LEN};
use crate::btl::BtlError;

/// Length of an sm business card.
pub const SM_CARD_LEN: usize = 32 + CARD_LEN;

const CARD_MAGIC: [u8; 4] = *b"OXSM";
const CARD_VERSION: u8 = 1;
const CARD_FLAG_CMA: u8 = 1;

/// A card, parsed.
#[derive(Clone, Copy, Debug)]
pub(super) struct SmCard {
    /// The owner accepts single copy (CMA).
    pub(super) cma: bool,
    /// Data bytes of each of the owner's rings.
    pub(super) ring_capacity: usize,
    /// The owner's index among the ranks of its node.
    pub(super) local_index: u32,
    /// How many ranks share the node.
    pub(super) local_count: u32,
    /// Address of the owner's CMA probe word.
    pub(super) probe_addr: u64,
    /// The value the probe word holds.
    pub(super) probe_value: u64,
    /// The owner's segment (with its pid).
    pub(super) seg: SegmentCard,
}

impl SmCard {
    /// The wire form.
    pub(super) fn to_bytes(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SM_CARD_LEN);
        out.extend_from_slice(&CARD_MAGIC);
        out.push(CARD_VERSION);
        out.push(if self.cma { CARD_FLAG_CMA } else { 0 });
        out.push(self.ring_capacity.trailing_zeros() as u8);
        out.push(0);
        out.extend_from_slice(&self.local_index.to_le_bytes());
        out.extend_from_slice(&self.local_count.to_le_bytes());
        out.extend_from_slice(&self.probe_addr.to_le_bytes());
        out.extend_from_slice(&self.probe_value.to_le_bytes());
        out.extend_from_slice(&self.seg.to_bytes());
        out
    }

    /// Parses untrusted bytes; `Ok(None)`: not an sm card of this version.
    pub(super) fn parse(bytes: &[u8]) -> Result<Option<SmCard>, BtlError> {
        if bytes.len() < 5 || bytes[..4] != CARD_MAGIC || bytes[4] != CARD_VERSION {
            return Ok(None);
        }
        let bad = |why: &str| BtlError::Invalid(format!("malformed sm card: {why}"));
        if bytes.len() != SM_CARD_LEN {
            return Err(bad("wrong length"));
        }
        let u32_at = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let flags = bytes[5];
        if flags & !CARD_FLAG_CMA != 0 || bytes[7] != 0 {
            return Err(bad("reserved bits set"));
        }
        let log2 = u32::from(bytes[6]);
        let ring_capacity = 1usize
            .checked_shl(log2)
            .filter(|&c| Ring::check_capacity(c).is_ok())
            .ok_or_else(|| bad("ring capacity"))?;
        let local_index = u32_at(8);
        let local_count = u32_at(12);
        if local_count == 0 || local_index >= local_count {
            return Err(bad("local index out of range"));
        }
        let seg = SegmentCard::from_bytes(&bytes[32..]).map_err(|e| bad(&e.to_string()))?;
        Ok(Some(SmCard {
            cma: flags & CARD_FLAG_CMA != 0,
            ring_capacity,
            local_index,
            local_count,
            probe_addr: u64_at(16),
            probe_value: u64_at(24),
            seg,
        }))
    }
}
