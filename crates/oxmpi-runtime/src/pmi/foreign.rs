//! Launchers that start a process without a PMI oxmpi speaks.
//!
//! With neither `PMI_FD` nor `PMI_PORT` the client runs as a singleton
//! (rank 0 of 1). That is right for a program started from a shell, and
//! wrong when a launcher started several processes: each would run alone,
//! an allreduce would give its own value, and the job would exit 0.
//! [`ForeignLauncher::detect`] reads the variables launchers leave behind
//! and names the launcher, so that `MPI_Init` can stop with a message that
//! says what to use instead (MPICH stops too, Open MPI's singleton check
//! refuses a Slurm step without PMI):
//!
//! | variables | launcher | verdict |
//! |---|---|---|
//! | `PMIX_NAMESPACE`, `PMIX_RANK`, `PMIX_SERVER_URI*` | `srun --mpi=pmix`, Open MPI 5's `mpirun`, PRRTE | foreign unless the job shows one process |
//! | `OMPI_COMM_WORLD_SIZE` > 1 | Open MPI's `mpirun` | foreign |
//! | `PMI_SIZE` > 1 or `PMI_RANK` > 0 (or Hydra's `MPI_LOCALNRANKS` > 1) | a PMI launcher whose server variable is gone | foreign |
//! | `SLURM_STEP_ID` with `SLURM_STEP_NUM_TASKS` > 1 | `srun --mpi=none` (or `MpiDefault=none`) | foreign |
//! | `SLURM_JOB_ID` alone | a shell or batch script inside an allocation | singleton |
//! | none | a shell | singleton |
//!
//! The rule: a singleton is wrong exactly when the launcher started more
//! than one process, so a job the environment shows as one process (`srun
//! -n 1` of a serial tool linked with MPI) still runs, as a singleton. A
//! PMIx job whose size the environment does not show counts as several.
//! `pmi_foreign_launcher=singleton` runs as a singleton anyway.
//!
//! Slurm facts (22.05, checked against a real `slurmd`): a task of `srun`
//! has `SLURM_STEP_ID`, `SLURM_STEP_NUM_TASKS` and `SLURM_PROCID`; the shell
//! of `salloc` and the script of `sbatch` have `SLURM_JOB_ID` and
//! `SLURM_NTASKS` but no `SLURM_STEP_ID`.

/// Who started this process, when it was not given a PMI server oxmpi
/// speaks but the environment shows a launcher of several processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForeignLauncher {
    /// A PMIx server: `srun --mpi=pmix`, Open MPI 5's `mpirun`/`prterun`.
    Pmix {
        /// Which launcher, as far as the environment tells.
        by: PmixLauncher,
        /// The variables that showed it (`NAME=value`, comma-separated).
        evidence: String,
    },
    /// Open MPI's `mpirun` without PMIx variables (`OMPI_COMM_WORLD_*`).
    OpenMpi {
        /// `OMPI_COMM_WORLD_SIZE`.
        size: u32,
    },
    /// PMI variables naming this process's place in a larger job, but no
    /// server to talk to (`PMI_FD` and `PMI_PORT` unset or empty).
    PmiWithoutServer {
        /// The variables that showed it.
        evidence: String,
    },
    /// `srun` without a PMI plugin (`--mpi=none`, or `MpiDefault=none`).
    SlurmWithoutPmi {
        /// `SLURM_STEP_NUM_TASKS`: how many tasks the step has.
        tasks: u32,
        /// `SLURM_PROCID`, when set.
        procid: Option<u32>,
    },
}

/// Which PMIx launcher, from the variables that came with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmixLauncher {
    /// `srun --mpi=pmix` (`SLURM_STEP_ID` is set too).
    Slurm,
    /// Open MPI's `mpirun` (`OMPI_COMM_WORLD_SIZE` is set too).
    OpenMpi,
    /// Some other PMIx launcher (PRRTE's `prterun`, ...).
    Other,
}

impl ForeignLauncher {
    /// Reads the environment through `lookup` (name -> value; empty values
    /// count as unset). `None`: no launcher of several processes is shown,
    /// so a singleton is right.
    ///
    /// ```
    /// use oxmpi_runtime::pmi::ForeignLauncher;
    /// let env = |pairs: &'static [(&'static str, &'static str)]| {
    ///     move |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.to_string())
    /// };
    /// // srun --mpi=none -n 4
    /// let f = ForeignLauncher::detect(env(&[("SLURM_STEP_ID", "0"), ("SLURM_STEP_NUM_TASKS", "4")]));
    /// assert!(f.unwrap().to_string().contains("srun --mpi=pmi2"));
    /// // a shell inside `salloc`
    /// assert!(ForeignLauncher::detect(env(&[("SLURM_JOB_ID", "7"), ("SLURM_NTASKS", "4")])).is_none());
    /// ```
    pub fn detect(lookup: impl Fn(&str) -> Option<String>) -> Option<ForeignLauncher> {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let num = |k: &str| get(k).and_then(|v| v.trim().parse::<u32>().ok());
        // The job size the environment shows, from whichever launcher set it.
        let shown_size = num("SLURM_STEP_NUM_TASKS")
            .or_else(|| num("OMPI_COMM_WORLD_SIZE"))
            .or_else(|| num("PMI_SIZE"));
        let slurm_step = get("SLURM_STEP_ID").is_some() || get("SLURM_STEPID").is_some();

        let mut pmix: Vec<String> = ["PMIX_NAMESPACE", "PMIX_RANK"]
            .iter()
            .filter_map(|k| get(k).map(|v| format!("{k}={v}")))
            .collect();
        for n in ["", "2", "21", "3", "4", "41"] {
            let k = format!("PMIX_SERVER_URI{n}");
            if get(&k).is_some() {
                pmix.push(k);
                break;
            }
        }
        if !pmix.is_empty() && shown_size != Some(1) {
            let by = if slurm_step {
                PmixLauncher::Slurm
            } else if get("OMPI_COMM_WORLD_SIZE").is_some() {
                PmixLauncher::OpenMpi
            } else {
                PmixLauncher::Other
            };
            return Some(ForeignLauncher::Pmix {
                by,
                evidence: pmix.join(", "),
            });
        }
        if let Some(size) = num("OMPI_COMM_WORLD_SIZE").filter(|&s| s > 1) {
            return Some(ForeignLauncher::OpenMpi { size });
        }
        let pmi: Vec<String> = [("PMI_SIZE", 1), ("PMI_RANK", 0), ("MPI_LOCALNRANKS", 1)]
            .iter()
            .filter_map(|&(k, single)| {
                let v = get(k)?;
                // A value that does not parse is not a singleton's either.
                let shows_more = v.trim().parse::<u32>().map_or(true, |n| n > single);
                shows_more.then(|| format!("{k}={v}"))
            })
            .collect();
        if !pmi.is_empty() {
            return Some(ForeignLauncher::PmiWithoutServer {
                evidence: pmi.join(", "),
            });
        }
        if slurm_step {
            if let Some(tasks) = num("SLURM_STEP_NUM_TASKS").filter(|&t| t > 1) {
                return Some(ForeignLauncher::SlurmWithoutPmi {
                    tasks,
                    procid: num("SLURM_PROCID"),
                });
            }
        }
        None
    }
}

impl std::fmt::Display for ForeignLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForeignLauncher::Pmix { by, evidence } => {
                let (who, fix) = match by {
                    PmixLauncher::Slurm => (
                        "srun with its PMIx plugin",
                        "use `srun --mpi=pmi2` (or MpiDefault=pmi2 in slurm.conf)",
                    ),
                    PmixLauncher::OpenMpi => (
                        "Open MPI's mpirun",
                        "use oxmpirun (or MPICH's mpiexec.hydra)",
                    ),
                    PmixLauncher::Other => (
                        "a PMIx launcher",
                        "use oxmpirun, MPICH's mpiexec.hydra or `srun --mpi=pmi2`",
                    ),
                };
                write!(
                    f,
                    "this process was started by {who} ({evidence}), but oxmpi speaks PMI-1 \
                     and PMI-2, not PMIx: {fix}"
                )
            }
            ForeignLauncher::OpenMpi { size } => write!(
                f,
                "this process is one of {size} started by Open MPI's mpirun \
                 (OMPI_COMM_WORLD_SIZE={size}), which gives it no PMI oxmpi speaks: use \
                 oxmpirun (or MPICH's mpiexec.hydra)"
            ),
            ForeignLauncher::PmiWithoutServer { evidence } => write!(
                f,
                "the environment places this process in a job of several ({evidence}) but \
                 names no PMI server (PMI_FD and PMI_PORT are unset): start it with the \
                 launcher itself (oxmpirun, mpiexec.hydra, `srun --mpi=pmi2`) and keep its \
                 variables"
            ),
            ForeignLauncher::SlurmWithoutPmi { tasks, procid } => {
                let which = procid.map(|p| format!("task {p} ")).unwrap_or_default();
                write!(
                    f,
                    "this process is {which}of a Slurm job step of {tasks} tasks, but srun \
                     gave it no PMI (srun --mpi=none, or MpiDefault=none in slurm.conf): use \
                     `srun --mpi=pmi2`"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detect(pairs: &[(&str, &str)]) -> Option<ForeignLauncher> {
        ForeignLauncher::detect(|k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        })
    }

    /// What `srun --mpi=pmix -n 2` gives a task (Slurm 22.05, PMIx 4.2).
    const SRUN_PMIX: &[(&str, &str)] = &[
        ("PMIX_NAMESPACE", "slurm.pmix.2.0"),
        ("PMIX_RANK", "1"),
        (
            "PMIX_SERVER_URI41",
            "pmix-server.17509;tcp4://127.0.0.1:58299",
        ),
        ("PMIX_VERSION", "4.2.2rc2"),
        ("SLURM_JOB_ID", "3"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_STEPID", "0"),
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_STEP_NUM_TASKS", "2"),
    ];

    #[test]
    fn srun_with_pmix_is_named_with_the_fix() {
        let f = detect(SRUN_PMIX).unwrap();
        assert!(
            matches!(
                &f,
                ForeignLauncher::Pmix { by: PmixLauncher::Slurm, evidence }
                    if evidence.contains("PMIX_NAMESPACE=slurm.pmix.2.0")
                        && evidence.contains("PMIX_RANK=1")
                        && evidence.contains("PMIX_SERVER_URI41")
            ),
            "{f:?}"
        );
        let text = f.to_string();
        assert!(
            text.contains("PMIx") && text.contains("srun --mpi=pmi2"),
            "{text}"
        );
    }

    #[test]
    fn pmix_of_one_task_is_a_singleton() {
        let one: Vec<(&str, &str)> = SRUN_PMIX
            .iter()
            .map(|&(k, v)| match k {
                "SLURM_STEP_NUM_TASKS" | "SLURM_NTASKS" => (k, "1"),
                "PMIX_RANK" | "SLURM_PROCID" => (k, "0"),
                _ => (k, v),
            })
            .collect();
        assert_eq!(detect(&one), None);
    }

    #[test]
    fn open_mpi_mpirun() {
        // Open MPI 5: PMIx variables and OMPI_COMM_WORLD_*.
        let f = detect(&[
            ("PMIX_NAMESPACE", "prterun-vm-1234@1"),
            ("PMIX_RANK", "0"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_RANK", "0"),
        ])
        .unwrap();
        assert!(matches!(
            f,
            ForeignLauncher::Pmix {
                by: PmixLauncher::OpenMpi,
                ..
            }
        ));
        assert!(f.to_string().contains("use oxmpirun"), "{f}");
        // Without PMIx variables.
        let f = detect(&[("OMPI_COMM_WORLD_SIZE", "3")]).unwrap();
        assert_eq!(f, ForeignLauncher::OpenMpi { size: 3 });
        assert_eq!(detect(&[("OMPI_COMM_WORLD_SIZE", "1")]), None);
        // A PMIx launcher we cannot name, size unknown: several.
        let f = detect(&[("PMIX_RANK", "0")]).unwrap();
        assert!(matches!(
            f,
            ForeignLauncher::Pmix {
                by: PmixLauncher::Other,
                ..
            }
        ));
    }

    #[test]
    fn srun_without_pmi() {
        let f = detect(&[
            ("SLURM_JOB_ID", "4"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_NUM_TASKS", "2"),
        ])
        .unwrap();
        assert_eq!(
            f,
            ForeignLauncher::SlurmWithoutPmi {
                tasks: 2,
                procid: Some(1)
            }
        );
        let text = f.to_string();
        assert!(
            text.contains("task 1 of a Slurm job step of 2 tasks")
                && text.contains("srun --mpi=pmi2"),
            "{text}"
        );
        // One task: a singleton is the right answer.
        assert_eq!(
            detect(&[("SLURM_STEP_ID", "0"), ("SLURM_STEP_NUM_TASKS", "1")]),
            None
        );
    }

    #[test]
    fn allocations_without_a_step_are_singletons() {
        // The shell of `salloc -n 2`, the script of `sbatch -n 2`.
        assert_eq!(
            detect(&[
                ("SLURM_JOB_ID", "5"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_NODELIST", "vm")
            ]),
            None
        );
        assert_eq!(
            detect(&[
                ("SLURM_JOB_ID", "6"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_PROCID", "0")
            ]),
            None
        );
        assert_eq!(detect(&[]), None);
    }

    #[test]
    fn pmi_variables_without_a_server() {
        let f = detect(&[("PMI_RANK", "2"), ("PMI_SIZE", "4")]).unwrap();
        assert!(
            matches!(&f, ForeignLauncher::PmiWithoutServer { evidence }
                if evidence == "PMI_SIZE=4, PMI_RANK=2"),
            "{f:?}"
        );
        assert!(f.to_string().contains("PMI_FD and PMI_PORT"), "{f}");
        assert!(detect(&[("MPI_LOCALNRANKS", "2")]).is_some());
        assert!(detect(&[("PMI_SIZE", "x")]).is_some());
        // What a singleton's own variables may say.
        assert_eq!(detect(&[("PMI_RANK", "0"), ("PMI_SIZE", "1")]), None);
        assert_eq!(detect(&[("PMI_RANK", ""), ("PMI_SIZE", " ")]), None);
    }
}
