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
//! (`docs/perf/log/collectives.md`, [`CollTuned::default`]). With two ranks
//! the bandwidth algorithms (ring, scatter + allgather) move no less data
//! than the latency ones, so two ranks always take the latency ones (and
//! vectors of fewer elements than ranks too), whatever is forced.
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

impl Default for CollTuned {
    /// Switch points measured on a 2-core machine at 2, 4 and 8 ranks
    /// (docs/perf/log/collectives.md): recursive doubling gives way to the
    /// ring between 16 and 64 KiB (allreduce and reduce-scatter) at 4 and
    /// more ranks; reduce-scatter + gather beats the binomial reduce from
    /// 256 KiB; Bruck's allgather the ring up to 256 KiB blocks; the
    /// binomial bcast and the all-at-once alltoall won at every size
    /// measured (up to 1 MiB), so their switch is above it. Oversubscribed
    /// ranks (more than the cores) set these points more than the caches
    /// do: the ring's `p - 1` steps each wait for a rank to be scheduled.
    fn default() -> Self {
        let c = |small_msg: usize| CollChoice {
            algorithm: "auto".into(),
            small_msg,
        };
        CollTuned {
            bcast: c(2 << 20),
            reduce: c(256 << 10),
            allreduce: c(32 << 10),
            allgather: c(256 << 10),
            alltoall: c(2 << 20),
            reduce_scatter: c(32 << 10),
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
