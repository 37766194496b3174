//! The collective algorithms' selection parameters (`coll_tuned_*`), as
//! Open MPI's `coll_tuned` component has them: for each collective the
//! algorithm (`auto`: by message size and rank count) and the message size
//! at which `auto` switches from the small-message algorithm (latency: few
//! rounds) to the large-message one (bandwidth: each byte sent few times).
//! The C layer's collectives (`oxmpi-capi`) read them through
//! [`crate::Universe::coll_tuned`]; they are registered here so that the
//! launcher checks `--mca coll_tuned_...` and `oxmpi-info` lists them.
//!
//! The defaults were measured on a 2-core machine with 2 to 8 ranks
//! (`docs/perf/log/collectives.md`); the large-message algorithms pay once a
//! rank's share of the vector no longer fits in a fraction of the cache, so
//! the switch points of the reductions are expressed relative to the last
//! level cache where that is known.
//!
//! ```
//! let mut reg = oxmpi_runtime::mca::Registry::new();
//! oxmpi::framework::register_params(&mut reg).unwrap();
//! let t = oxmpi::CollTuned::from_registry(&reg).unwrap();
//! assert_eq!(t.allreduce.algorithm, "auto");
//! assert!(t.allreduce.small_msg > 0);
//! ```

use oxmpi_runtime::mca::{McaError, ParamSpec, Registry};

/// One collective's selection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollChoice {
    /// `auto`, or the algorithm every call uses (one of the collective's
    /// choices).
    pub algorithm: String,
    /// Bytes (count times the datatype's size, of the whole vector for the
    /// rooted and reducing collectives, of one rank's block for allgather
    /// and alltoall) below which `auto` takes the small-message algorithm.
    pub small_msg: usize,
}

/// The selection of every tuned collective.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollTuned {
    /// `MPI_Bcast` and its forms: `binomial` or `scatter_allgather`.
    pub bcast: CollChoice,
    /// `MPI_Reduce`: `binomial` or `reduce_scatter_gather`.
    pub reduce: CollChoice,
    /// `MPI_Allreduce`: `recursive_doubling` or `ring`.
    pub allreduce: CollChoice,
    /// `MPI_Allgather`: `bruck` or `ring`.
    pub allgather: CollChoice,
    /// `MPI_Alltoall`: `linear` (every block at once) or `pairwise`.
    pub alltoall: CollChoice,
    /// `MPI_Reduce_scatter(_block)`: `recursive_doubling` or `ring`.
    pub reduce_scatter: CollChoice,
}

/// The collectives, their algorithms (besides `auto`; small-message one
/// first) and their default switch points.
const TABLE: [(&str, [&str; 2], &str); 6] = [
    (
        "bcast",
        ["binomial", "scatter_allgather"],
        "binomial tree (small) or binomial scatter + ring allgather (large)",
    ),
    (
        "reduce",
        ["binomial", "reduce_scatter_gather"],
        "binomial tree (small, and non-commutative operations) or ring reduce-scatter + gather \
         to the root (large)",
    ),
    (
        "allreduce",
        ["recursive_doubling", "ring"],
        "recursive doubling (small, and non-commutative operations) or ring reduce-scatter + \
         ring allgather (large)",
    ),
    (
        "allgather",
        ["bruck", "ring"],
        "Bruck's (small) or ring (large)",
    ),
    (
        "alltoall",
        ["linear", "pairwise"],
        "every block posted at once (small) or pairwise exchange (large)",
    ),
    (
        "reduce_scatter",
        ["recursive_doubling", "ring"],
        "recursive doubling of the whole vector (small, and non-commutative operations) or \
         ring reduce-scatter (large)",
    ),
];

/// The last level cache's size in bytes, if the system says.
fn llc_bytes() -> Option<usize> {
    let mut best = None;
    for i in 0..8 {
        let p = format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size");
        let Ok(s) = std::fs::read_to_string(p) else {
            break;
        };
        let s = s.trim();
        let (num, mul) = match s.strip_suffix('K') {
            Some(n) => (n, 1024),
            None => match s.strip_suffix('M') {
                Some(n) => (n, 1 << 20),
                None => (s, 1),
            },
        };
        if let Ok(n) = num.parse::<usize>() {
            best = Some(best.map_or(n * mul, |b: usize| b.max(n * mul)));
        }
    }
    best
}

impl Default for CollTuned {
    fn default() -> Self {
        // Measured (docs/perf/log/collectives.md): the reductions' ring
        // beats recursive doubling from about 1/512 of a 32 MiB cache
        // (64 KiB) up; clamped for odd cache reports.
        let red = llc_bytes().map_or(64 << 10, |c| (c / 512).clamp(16 << 10, 256 << 10));
        let c = |small_msg: usize| CollChoice {
            algorithm: "auto".into(),
            small_msg,
        };
        CollTuned {
            bcast: c(red),
            reduce: c(red),
            allreduce: c(red),
            allgather: c(16 << 10),
            alltoall: c(16 << 10),
            reduce_scatter: c(red),
        }
    }
}

impl CollTuned {
    fn field(&mut self, name: &str) -> &mut CollChoice {
        match name {
            "bcast" => &mut self.bcast,
            "reduce" => &mut self.reduce,
            "allreduce" => &mut self.allreduce,
            "allgather" => &mut self.allgather,
            "alltoall" => &mut self.alltoall,
            _ => &mut self.reduce_scatter,
        }
    }

    /// Registers `coll_tuned_<collective>_algorithm` and
    /// `coll_tuned_<collective>_small_msg` for bcast, reduce, allreduce,
    /// allgather, alltoall and reduce_scatter.
    pub fn register_params(reg: &mut Registry) -> Result<(), McaError> {
        let mut d = CollTuned::default();
        for (name, algos, help) in TABLE {
            let choices = ["auto", algos[0], algos[1]];
            // `MPI_Allreduce`, ...
            let call = format!("MPI_{}{}", name[..1].to_uppercase(), &name[1..]);
            reg.register(
                ParamSpec::enumeration(
                    "coll",
                    "tuned",
                    &format!("{name}_algorithm"),
                    &choices,
                    "auto",
                )
                .level(5)
                .help(format!(
                    "{call} (blocking, non-blocking, persistent): {help}; auto chooses by \
                     coll_tuned_{name}_small_msg"
                )),
            )?;
            reg.register(
                ParamSpec::size(
                    "coll",
                    "tuned",
                    &format!("{name}_small_msg"),
                    d.field(name).small_msg as u64,
                )
                .level(5)
                .help(format!(
                    "bytes below which auto takes {} for {call}, else {}",
                    algos[0], algos[1]
                )),
            )?;
        }
        Ok(())
    }

    /// Reads the selection (the registry must hold the parameters of
    /// [`CollTuned::register_params`]).
    pub fn from_registry(reg: &Registry) -> Result<CollTuned, McaError> {
        let mut t = CollTuned::default();
        for (name, _, _) in TABLE {
            let algorithm = reg
                .get_enum(&format!("coll_tuned_{name}_algorithm"))?
                .to_string();
            let small = reg.get_size(&format!("coll_tuned_{name}_small_msg"))?;
            *t.field(name) = CollChoice {
                algorithm,
                small_msg: usize::try_from(small).unwrap_or(usize::MAX),
            };
        }
        Ok(t)
    }
}
