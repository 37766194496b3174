//! The modex: every rank publishes its business cards, then reads the others'.
//!
//! Contract:
//! * [`Modex::put`] stores bytes under a key namespaced by this rank (the
//!   PMI key is `o<rank>_<key>`), so every rank can use the same key names.
//! * [`Modex::fence`] is collective; after it [`Modex::get`] returns what
//!   any rank put before the fence. A key that rank never put is
//!   [`PmiError::Missing`], not a hang.
//! * [`Modex::local_ranks`] / [`Modex::is_local`] come from
//!   `PMI_process_mapping`, read once when the modex is built (an unknown
//!   mapping means every rank is treated as alone on its node).

use super::client::{Pmi, PmiError};
use super::value;
use crate::topology::{ProcessMapping, Topology};

/// Business-card exchange over a [`Pmi`] client.
#[derive(Debug)]
pub struct Modex {
    pmi: Pmi,
    mapping: ProcessMapping,
    topology: Topology,
}

impl Modex {
    /// Builds the modex, reading the process mapping from the server.
    pub fn new(mut pmi: Pmi) -> Result<Modex, PmiError> {
        let mapping = pmi.process_mapping()?;
        let topology = Topology::new(&mapping, pmi.rank(), pmi.size());
        Ok(Modex {
            pmi,
            mapping,
            topology,
        })
    }

    /// The underlying client.
    pub fn pmi(&self) -> &Pmi {
        &self.pmi
    }

    /// The underlying client, mutably (e.g. for `abort`).
    pub fn pmi_mut(&mut self) -> &mut Pmi {
        &mut self.pmi
    }

    /// Gives the client back (e.g. to finalize it).
    pub fn into_pmi(self) -> Pmi {
        self.pmi
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.pmi.rank()
    }

    /// Job size.
    pub fn size(&self) -> u32 {
        self.pmi.size()
    }

    /// The mapping the launcher reported.
    pub fn mapping(&self) -> &ProcessMapping {
        &self.mapping
    }

    /// Where every rank lives, seen from this rank.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Ranks on this node, ascending, including this one.
    pub fn local_ranks(&self) -> &[u32] {
        self.topology.local_ranks()
    }

    /// Whether `rank` shares this node.
    pub fn is_local(&self, rank: u32) -> bool {
        self.topology.is_local(rank)
    }

    fn pmi_key(rank: u32, key: &str) -> Result<String, PmiError> {
        value::check_user_key(key).map_err(|reason| PmiError::BadKey {
            key: key.into(),
            reason,
        })?;
        Ok(format!("o{rank}_{key}"))
    }

    /// Publishes `bytes` under `key` for this rank (visible after [`Modex::fence`]).
    pub fn put(&mut self, key: &str, bytes: &[u8]) -> Result<(), PmiError> {
        let k = Self::pmi_key(self.pmi.rank(), key)?;
        self.pmi.put(&k, bytes)
    }

    /// Collective: waits for every rank's puts.
    pub fn fence(&mut self) -> Result<(), PmiError> {
        self.pmi.fence()
    }

    /// What `rank` published under `key`; [`PmiError::Missing`] if nothing.
    pub fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, PmiError> {
        self.try_get(rank, key)?.ok_or_else(|| PmiError::Missing {
            rank,
            key: key.into(),
        })
    }

    /// Like [`Modex::get`] but `Ok(None)` when `rank` put nothing under `key`.
    pub fn try_get(&mut self, rank: u32, key: &str) -> Result<Option<Vec<u8>>, PmiError> {
        let k = Self::pmi_key(rank, key)?;
        self.pmi.get(Some(rank), &k)
    }
}
