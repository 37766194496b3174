//! Local topology: which ranks share this node, and is the node oversubscribed.
//!
//! Contract:
//! * [`ProcessMapping::parse`] reads MPICH's `PMI_process_mapping` value,
//!   `(vector,(node,nnodes,ppn),...)`. Ranks are dealt out as MPICH does: for
//!   each block in turn, `ppn` consecutive ranks to each of the `nnodes`
//!   nodes starting at `node`; when the blocks are used up before every rank
//!   has a node, the list starts over (so `(vector,(0,2,1))` places ranks
//!   round-robin on two nodes). An empty value, `(vector)` or anything not
//!   understood is [`ProcessMapping::Unknown`], never an error: a launcher
//!   that gives no mapping must not stop the job.
//! * With an unknown mapping every rank is treated as alone on its node (no
//!   shared memory between ranks), which is always correct, only slower.
//! * [`oversubscribed_with`] lets the launcher's word (`OXMPI_OVERSUBSCRIBED`)
//!   win over the local guess from core counts.

use std::num::NonZeroUsize;

/// Environment variable the launcher sets to `0` or `1` to say whether this
/// node runs more ranks than it has cores.
pub const OVERSUBSCRIBED_ENV: &str = "OXMPI_OVERSUBSCRIBED";

/// One `(node,nnodes,ppn)` block of a vector mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// First node id of the block.
    pub node: u32,
    /// How many consecutive nodes the block covers.
    pub nnodes: u32,
    /// Ranks placed on each node per pass.
    pub ppn: u32,
}

/// A parsed `PMI_process_mapping`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessMapping {
    /// `(vector,(node,nnodes,ppn),...)` with at least one non-empty block.
    Vector(Vec<Block>),
    /// No mapping, or one that was not understood.
    Unknown,
}

/// Largest number of ranks [`ProcessMapping::node_ids`] will lay out (bounds
/// the work a hostile value can cause).
pub const MAX_RANKS: u32 = 1 << 24;

impl ProcessMapping {
    /// Parses a mapping value; anything unrecognised gives `Unknown`.
    pub fn parse(text: &str) -> ProcessMapping {
        Self::try_parse(text).unwrap_or(ProcessMapping::Unknown)
    }

    fn try_parse(text: &str) -> Option<ProcessMapping> {
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let inner = compact.strip_prefix('(')?.strip_suffix(')')?;
        let rest = inner.strip_prefix("vector")?;
        let mut blocks = Vec::new();
        let mut rest = rest;
        while !rest.is_empty() {
            rest = rest.strip_prefix(",(")?;
            let close = rest.find(')')?;
            let mut nums = rest[..close].split(',').map(|n| n.parse::<u32>().ok());
            let node = nums.next()??;
            let nnodes = nums.next()??;
            let ppn = nums.next()??;
            if nums.next().is_some() {
                return None;
            }
            if nnodes > 0 && ppn > 0 {
                blocks.push(Block { node, nnodes, ppn });
            }
            rest = &rest[close + 1..];
        }
        if blocks.is_empty() {
            return None;
        }
        Some(ProcessMapping::Vector(blocks))
    }

    /// The mapping for `size` ranks all on node 0 (what a single-node
    /// launcher reports).
    pub fn single_node(size: u32) -> ProcessMapping {
        ProcessMapping::Vector(vec![Block {
            node: 0,
            nnodes: 1,
            ppn: size.max(1),
        }])
    }

    /// Renders the mapping in `PMI_process_mapping` syntax (`""` when unknown).
    pub fn to_pmi_string(&self) -> String {
        match self {
            ProcessMapping::Unknown => String::new(),
            ProcessMapping::Vector(blocks) => {
                let mut s = String::from("(vector");
                for b in blocks {
                    s.push_str(&format!(",({},{},{})", b.node, b.nnodes, b.ppn));
                }
                s.push(')');
                s
            }
        }
    }

    /// Node id of every rank `0..size`, or `None` when the mapping is unknown
    /// or `size` exceeds [`MAX_RANKS`].
    pub fn node_ids(&self, size: u32) -> Option<Vec<u32>> {
        let ProcessMapping::Vector(blocks) = self else {
            return None;
        };
        if size > MAX_RANKS {
            return None;
        }
        let size = size as usize;
        let mut ids = Vec::with_capacity(size);
        // Every block is non-empty, so each pass assigns at least one rank.
        'outer: while ids.len() < size {
            for b in blocks {
                for n in 0..b.nnodes {
                    for _ in 0..b.ppn {
                        if ids.len() == size {
                            break 'outer;
                        }
                        ids.push(b.node.saturating_add(n));
                    }
                }
            }
        }
        Some(ids)
    }
}

/// Where every rank of the job lives, seen from one rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    rank: u32,
    node_of: Vec<u32>,
    local: Vec<u32>,
}

impl Topology {
    /// Builds the view of `rank` in a job of `size` ranks. With an unknown
    /// mapping each rank gets a node of its own.
    pub fn new(mapping: &ProcessMapping, rank: u32, size: u32) -> Topology {
        let size = size.max(1);
        let node_of = mapping
            .node_ids(size)
            .unwrap_or_else(|| (0..size.min(MAX_RANKS)).collect());
        let mine = node_of.get(rank as usize).copied();
        let local = match mine {
            Some(n) => node_of
                .iter()
                .enumerate()
                .filter(|(_, &m)| m == n)
                .map(|(r, _)| r as u32)
                .collect(),
            None => vec![rank],
        };
        Topology {
            rank,
            node_of,
            local,
        }
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Node id of `rank`, `None` if out of range.
    pub fn node_of(&self, rank: u32) -> Option<u32> {
        self.node_of.get(rank as usize).copied()
    }

    /// Ranks on this rank's node, ascending, including this rank.
    pub fn local_ranks(&self) -> &[u32] {
        &self.local
    }

    /// Whether `rank` is on this rank's node.
    pub fn is_local(&self, rank: u32) -> bool {
        self.local.binary_search(&rank).is_ok()
    }

    /// Position of this rank among [`Topology::local_ranks`].
    pub fn local_index(&self) -> usize {
        self.local.binary_search(&self.rank).unwrap_or(0)
    }
}

/// Cores this process may run on (its CPU affinity mask and cgroup quota,
/// as `std::thread::available_parallelism` reports them), at least 1.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// Whether `local_ranks` busy-polling ranks would exceed `cores`.
pub fn oversubscribed(local_ranks: usize, cores: usize) -> bool {
    local_ranks > cores.max(1)
}

/// Like [`oversubscribed`], but the launcher's word `env_value` (the value
/// of [`OVERSUBSCRIBED_ENV`]: `1`/`true`/`yes` or `0`/`false`/`no`) wins
/// when present and understood.
pub fn oversubscribed_with(env_value: Option<&str>, local_ranks: usize, cores: usize) -> bool {
    match env_value.map(|v| v.trim().to_ascii_lowercase()) {
        Some(v) if matches!(v.as_str(), "1" | "true" | "yes" | "on") => true,
        Some(v) if matches!(v.as_str(), "0" | "false" | "no" | "off") => false,
        _ => oversubscribed(local_ranks, cores),
    }
}

/// [`oversubscribed_with`] reading [`OVERSUBSCRIBED_ENV`] from the process
/// environment and [`available_cores`].
pub fn node_oversubscribed(local_ranks: usize) -> bool {
    let env = std::env::var(OVERSUBSCRIBED_ENV).ok();
    oversubscribed_with(env.as_deref(), local_ranks, available_cores())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_single_and_multi_block() {
        let m = ProcessMapping::parse("(vector,(0,1,4))");
        assert_eq!(m.node_ids(4).unwrap(), vec![0, 0, 0, 0]);
        let m = ProcessMapping::parse("(vector,(0,2,2),(2,1,1))");
        assert_eq!(m.node_ids(5).unwrap(), vec![0, 0, 1, 1, 2]);
        // wraps around like MPICH
        let m = ProcessMapping::parse("(vector,(0,2,1))");
        assert_eq!(m.node_ids(5).unwrap(), vec![0, 1, 0, 1, 0]);
        assert_eq!(m.to_pmi_string(), "(vector,(0,2,1))");
    }

    #[test]
    fn unknown_cases() {
        for s in [
            "",
            "(vector)",
            "(vector,(0,0,0))",
            "garbage",
            "(vector,(1,2))",
            "(vector,(a,1,1))",
        ] {
            assert_eq!(ProcessMapping::parse(s), ProcessMapping::Unknown, "{s}");
        }
        let t = Topology::new(&ProcessMapping::Unknown, 2, 4);
        assert_eq!(t.local_ranks(), &[2]);
        assert!(!t.is_local(1));
    }

    #[test]
    fn topology_local_ranks() {
        let m = ProcessMapping::parse("(vector,(0,2,2))");
        let t = Topology::new(&m, 3, 4);
        assert_eq!(t.local_ranks(), &[2, 3]);
        assert!(t.is_local(2) && !t.is_local(0));
        assert_eq!(t.local_index(), 1);
        assert_eq!(t.node_of(0), Some(0));
    }

    #[test]
    fn oversubscription() {
        assert!(oversubscribed(5, 4));
        assert!(!oversubscribed(4, 4));
        assert!(oversubscribed_with(Some("1"), 1, 64));
        assert!(!oversubscribed_with(Some("0"), 64, 1));
        assert!(oversubscribed_with(Some("junk"), 2, 1));
        assert!(available_cores() >= 1);
    }
}
