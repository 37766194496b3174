//! Per-(context, peer) 16-bit message sequence numbers.
//!
//! Contract: the sender stamps every message to a peer on a context with
//! [`SendSequencer::next_seq`]; the receiving [`crate::Engine`] expects the
//! same sequence starting from the same first value and wrapping from
//! `u16::MAX` to 0. Both halves live in this crate so they cannot drift.

use crate::ctxmap::ContextMap;
use crate::types::MatchError;

/// The sending half of message sequencing: one wrapping `u16` counter per
/// (context, destination rank).
#[derive(Debug, Default)]
pub struct SendSequencer {
    contexts: ContextMap<Vec<u16>>,
}

impl SendSequencer {
    /// An empty sequencer with no contexts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a context with `n_peers` destinations, all starting at 0.
    pub fn add_context(&mut self, context: u32, n_peers: u32) -> Result<(), MatchError> {
        self.add_context_with_first_seq(context, n_peers, 0)
    }

    /// Registers a context whose counters all start at `first_seq` (the
    /// receiver must be created with the same value; useful to exercise
    /// wrap-around).
    pub fn add_context_with_first_seq(
        &mut self,
        context: u32,
        n_peers: u32,
        first_seq: u16,
    ) -> Result<(), MatchError> {
        if self.contexts.contains_key(&context) {
            return Err(MatchError::ContextExists(context));
        }
        self.contexts
            .insert(context, vec![first_seq; n_peers as usize]);
        Ok(())
    }

    /// Forgets a context; returns whether it existed.
    pub fn remove_context(&mut self, context: u32) -> bool {
        self.contexts.remove(&context).is_some()
    }

    /// The counter of `peer` on `context`: the next message's sequence
    /// number, for a sender that advances it (wrapping) only once the
    /// message is surely sent.
    pub fn slot(&mut self, context: u32, peer: u32) -> Option<&mut u16> {
        self.contexts.get_mut(&context)?.get_mut(peer as usize)
    }

    /// Returns the sequence number to stamp on the next message to `peer`
    /// on `context`, and advances the counter (wrapping at `u16::MAX`).
    pub fn next_seq(&mut self, context: u32, peer: u32) -> Result<u16, MatchError> {
        let peers = self
            .contexts
            .get_mut(&context)
            .ok_or(MatchError::UnknownContext(context))?;
        let n_peers = peers.len() as u32;
        let slot = peers
            .get_mut(peer as usize)
            .ok_or(MatchError::RankOutOfRange {
                context,
                rank: peer,
                n_peers,
            })?;
        let seq = *slot;
        *slot = seq.wrapping_add(1);
        Ok(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_isolates() {
        let mut s = SendSequencer::new();
        s.add_context_with_first_seq(1, 2, u16::MAX).unwrap();
        s.add_context(2, 1).unwrap();
        assert_eq!(s.next_seq(1, 0), Ok(u16::MAX));
        assert_eq!(s.next_seq(1, 0), Ok(0));
        assert_eq!(s.next_seq(1, 1), Ok(u16::MAX));
        assert_eq!(s.next_seq(2, 0), Ok(0));
        assert!(s.next_seq(2, 1).is_err());
        assert!(s.next_seq(3, 0).is_err());
        assert_eq!(s.add_context(1, 1), Err(MatchError::ContextExists(1)));
        assert!(s.remove_context(1));
        assert!(!s.remove_context(1));
    }
}
