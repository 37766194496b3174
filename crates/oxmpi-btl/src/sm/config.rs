//! The sm BTL's configuration: limits, ring sizes and the `btl_sm_*`
//! parameters.

use super::ring;
use crate::btl::Limits;

/// [`SmConfig::evict_ahead`]'s default, in lines: measured on this
/// project's machine (`docs/performance.md`, "Tuning parameters and switch
/// points"; `docs/perf/log/performance-history.md`, "Evicting ahead").
pub const DEFAULT_EVICT_AHEAD: usize = 12;

/// Default limits of the sm BTL. `max_send_size` and `max_sendi_size` are
/// clamped at construction to what one ring record carries
/// ([`Ring::max_payload`](ring::Ring::max_payload): 65592 bytes with the 256 KiB rings of a node of
/// up to [`BIG_RING_RANKS`] ranks, 16440 with 64 KiB rings), and the eager
/// limits to `max_send_size`.
///
/// The eager limit is as large as one record, up to 32 KiB of data: a
/// single-copy (CMA) transfer pays a system call before its first byte
/// moves, and copying a message in and out of a ring wins up to there in
/// every machine state. Not 64 KiB: through the ring it was faster in the
/// usual state but slower in the slow cross-core one, where a single copy
/// moves each line once and the ring twice. It counts the PML's headers,
/// so 32 KiB of data is eager with 256 KiB rings (16 KiB with 64 KiB
/// rings). The immediate send takes 512 bytes with the headers, so the
/// PML's default `pml_ob1_sendi_limit` of 256 data bytes goes through it
/// whole. Measurements behind these: `docs/performance.md`, "Tuning
/// parameters and switch points".
pub const DEFAULT_LIMITS: Limits = Limits {
    eager_limit: 32 * 1024 + 64,
    rndv_eager_limit: 32 * 1024 + 64,
    max_send_size: 64 * 1024 + 64,
    max_sendi_size: 512,
    rdma_pipeline_send_length: 1 << 62,
    rdma_pipeline_frag_size: 1 << 62,
    min_rdma_pipeline_size: 0,
    exclusivity: 65535,
    latency: 1,
    bandwidth: 20_000,
};

/// Local ranks up to which each ring has [`BIG_RING`] bytes by default
/// (`btl_sm_ring_size` 0); more ranks get [`ring::DEFAULT_CAPACITY`]:
/// 16 ranks take 15 x 256 KiB = 3.75 MiB of rings per rank, 64 ranks 63 x
/// 64 KiB = 3.94 MiB.
pub const BIG_RING_RANKS: u32 = 16;
/// The default ring size on a node of up to [`BIG_RING_RANKS`] ranks.
pub const BIG_RING: usize = 256 * 1024;

/// The default data bytes of each ring for `local_count` local ranks (see
/// [`BIG_RING_RANKS`]).
pub fn default_ring_capacity(local_count: u32) -> usize {
    if local_count <= BIG_RING_RANKS {
        BIG_RING
    } else {
        ring::DEFAULT_CAPACITY
    }
}

/// The configuration of one sm module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmConfig {
    /// This rank's index among the ranks of its node.
    pub local_index: u32,
    /// How many ranks share the node.
    pub local_count: u32,
    /// Data bytes of each ring (a power of two, 256 B to 4 MiB).
    pub ring_capacity: usize,
    /// Limits (clamped at construction, see [`DEFAULT_LIMITS`]).
    pub limits: Limits,
    /// Whether to use CMA single copy for put/get (also needs CMA to work
    /// on this node and with each peer).
    pub single_copy: bool,
    /// Whether small records may go through the pair lines' fast boxes
    /// (see `ring`'s module doc); both ranks of a pair must allow it.
    pub pair_boxes: bool,
    /// How many lines ahead of its head a ring's reader evicts lines the
    /// writer has not written yet (`ring`'s module doc, "Evicting ahead");
    /// 0: never.
    pub evict_ahead: usize,
}

impl SmConfig {
    /// The defaults for local rank `local_index` of `local_count`.
    pub fn new(local_index: u32, local_count: u32) -> SmConfig {
        SmConfig {
            local_index,
            local_count,
            ring_capacity: default_ring_capacity(local_count),
            limits: DEFAULT_LIMITS,
            single_copy: true,
            pair_boxes: true,
            evict_ahead: DEFAULT_EVICT_AHEAD,
        }
    }

    /// Registers `btl_sm_*`: the limits ([`Limits::register`]),
    /// `btl_sm_ring_size`, `btl_sm_single_copy`, `btl_sm_pair_boxes` and
    /// `btl_sm_evict_ahead`.
    pub fn register_params(
        reg: &mut oxmpi_runtime::mca::Registry,
    ) -> Result<(), oxmpi_runtime::mca::McaError> {
        use oxmpi_runtime::mca::ParamSpec;
        DEFAULT_LIMITS.register(reg, "sm")?;
        reg.register(ParamSpec::size("btl", "sm", "ring_size", 0).level(4).help(
            "data bytes of each shared-memory ring (one per pair of local ranks; a \
                     power of two from 256 B to 4 MiB; a record carries up to a quarter of it); \
                     0: 256 KiB on a node of up to 16 ranks, 64 KiB beyond",
        ))?;
        reg.register(
            ParamSpec::bool("btl", "sm", "single_copy", true)
                .level(4)
                .help("use single-copy transfers (CMA) for put and get between local ranks"),
        )?;
        reg.register(
            ParamSpec::bool("btl", "sm", "pair_boxes", true)
                .level(4)
                .help(
                    "let a small message go through the cache line both ranks of a pair \
                     write (one fast box per direction) when its box is empty, instead of \
                     the ring: one line moves per message in a ping-pong",
                ),
        )?;
        reg.register(
            ParamSpec::int("btl", "sm", "evict_ahead", DEFAULT_EVICT_AHEAD as i64)
                .level(5)
                .help(
                    "as a ring's reader finishes a cache line of small records, evict \
                     (CLFLUSHOPT) the line this many lines ahead unless the writer already \
                     wrote it, so that the \
                     writer does not wait to take it back from the reader's caches \
                     (0: never; at most an eighth of the ring; ignored without CLFLUSHOPT)",
                ),
        )?;
        Ok(())
    }

    /// The configuration of a resolved registry (after
    /// [`SmConfig::register_params`]).
    pub fn from_registry(
        reg: &oxmpi_runtime::mca::Registry,
        local_index: u32,
        local_count: u32,
    ) -> Result<SmConfig, oxmpi_runtime::mca::McaError> {
        Ok(SmConfig {
            local_index,
            local_count,
            ring_capacity: match reg.get_size("btl_sm_ring_size")? {
                0 => default_ring_capacity(local_count),
                n => usize::try_from(n).unwrap_or(usize::MAX),
            },
            limits: Limits::from_registry(reg, "sm")?,
            single_copy: reg.get_bool("btl_sm_single_copy")?,
            pair_boxes: reg.get_bool("btl_sm_pair_boxes")?,
            evict_ahead: {
                let name = "btl_sm_evict_ahead";
                let v = reg.get_int(name)?;
                usize::try_from(v).map_err(|_| oxmpi_runtime::mca::McaError::InvalidValue {
                    name: name.into(),
                    value: v.to_string(),
                    source_desc: reg
                        .param(name)
                        .map_or_else(String::new, |p| p.source().describe(name)),
                    reason: "a count of cache lines, 0 or more".into(),
                })?
            },
        })
    }
}
