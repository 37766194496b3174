//! A rank dies and the launcher keeps the others running
//! (`oxmpirun --enable-recovery`, Hydra's `-disable-auto-cleanup`): the
//! survivors get `MPI_ERR_PROC_FAILED` from what needs the dead rank (the
//! internal barrier, communicator creation, an `MPI_ANY_SOURCE` receive
//! that only it could satisfy), still talk among themselves, and finalize
//! (the `recovery` example holds the checks).

mod support;

use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn recovery(np: u32, btl: &str) {
    let mut cmd = std::process::Command::new(support::oxmpirun());
    cmd.args([
        "--enable-recovery",
        "-n",
        &np.to_string(),
        "--mca",
        "btl",
        btl,
    ])
    .args(["--timeout", &LIMIT.as_secs().to_string()])
    .arg(support::example("recovery"));
    let out = support::run_cmd(&mut cmd, LIMIT + Duration::from_secs(10));
    let what = format!("recovery -n {np} {btl}");
    let ok = out
        .stdout
        .lines()
        .filter(|l| l.ends_with("recovery ok"))
        .count();
    assert_eq!(ok, np as usize - 1, "{what}: {out:?}");
    // The job's status is the dead rank's, and it is named.
    assert_eq!(out.code, 128 + 9, "{what}: {out:?}");
    let victim = np - 1;
    assert!(
        out.stderr.contains(&format!("rank {victim} (pid"))
            && out.stderr.contains("signal 9 (SIGKILL)")
            && out.stderr.contains("goes on without it"),
        "{what}: {}",
        out.stderr
    );
}

#[test]
fn survivors_of_a_killed_rank_get_proc_failed_over_sm() {
    recovery(4, "self,sm");
}

#[test]
fn survivors_of_a_killed_rank_get_proc_failed_over_tcp() {
    recovery(3, "self,tcp");
}

/// Hydra sends the survivors SIGUSR1 when a rank fails: handled as a
/// failure notice (they would die of it otherwise). Hydra 4.0 kills every
/// rank when one is killed by a signal, so the victim exits instead.
#[test]
fn survivors_under_hydra_disable_auto_cleanup() {
    const HYDRA: &str = "/usr/bin/mpiexec.hydra";
    if !std::path::Path::new(HYDRA).exists() {
        assert!(std::env::var_os("CI").is_none(), "{HYDRA} missing in CI");
        eprintln!("note: {HYDRA} not found; skipping");
        return;
    }
    for btl in ["self,sm", "self,tcp"] {
        let mut cmd = std::process::Command::new(HYDRA);
        cmd.args(["-disable-auto-cleanup", "-n", "3"])
            .arg(support::example("recovery"))
            .arg("exit")
            .env("OXMPI_MCA_btl", btl)
            .env_remove("PMI_FD")
            .env_remove("PMI_PORT")
            .env_remove("OXMPI_JOB_SECRET");
        let out = support::run_cmd(&mut cmd, LIMIT);
        let ok = out
            .stdout
            .lines()
            .filter(|l| l.ends_with("recovery ok"))
            .count();
        assert_eq!(ok, 2, "hydra {btl}: {out:?}");
    }
}

/// Ranks whose descriptor limit is too low for their transport at start-up
/// (the limit set below the hard one's reach, so raising it cannot help):
/// the job ends with an error that names the limit, over each transport,
/// not a hang or a crash without a word.
#[test]
fn too_few_descriptors_is_an_error_that_names_the_limit() {
    for btl in ["self,sm", "self,tcp"] {
        let out = starved(btl, 4, "ring", &["5"]);
        assert!(out.code != 0 && out.code != 124, "{btl}: {out:?}");
        assert!(names_the_limit(&out.stderr, 4), "{btl}: {}", out.stderr);
    }
}

/// Ranks that use up their descriptors after start-up, then talk to every
/// peer (`starve`): a transport that needs one more descriptor (a segment
/// to map, a connection to open or accept) ends the job with an error that
/// names the limit, and does not leave the peer it could not reach waiting
/// for ever; one that needs none completes correctly. Either way, no hang.
#[test]
fn descriptors_running_out_mid_job_end_it_with_the_limit_named() {
    for btl in ["self,sm", "self,tcp"] {
        let out = starved(btl, 32, "starve", &[]);
        let ok = out
            .stdout
            .lines()
            .filter(|l| l.ends_with("all-pairs 1 MiB ok"))
            .count();
        if out.code == 0 {
            assert_eq!(ok, 8, "{btl}: {out:?}");
        } else {
            assert_ne!(out.code, 124, "{btl}: hung: {out:?}");
            assert!(names_the_limit(&out.stderr, 32), "{btl}: {}", out.stderr);
        }
    }
}

/// Under a limit this low the shared segments fall back to `/dev/shm`
/// files (a memfd's `/proc` path cannot be opened as well), and the ranks
/// the launcher ends are killed before unlinking theirs: `oxmpirun` removes
/// them when the job ends, so no file of a dead owner is left.
#[test]
fn starved_jobs_leave_no_shared_memory_files() {
    for limit in [4, 5] {
        let out = starved("self,sm", limit, "starve", &[]);
        assert_ne!(out.code, 124, "hung: {out:?}");
    }
    let uid = std::fs::metadata("/proc/self").map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid()
    });
    let prefix = format!("oxmpi-{}-", uid.unwrap());
    let stale: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.strip_prefix(&prefix)
                .and_then(|r| r.split('-').next())
                .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect();
    assert!(stale.is_empty(), "left in /dev/shm: {stale:?}");
}

/// Runs `example` on 8 ranks over `btl` under `ulimit -n limit`.
fn starved(btl: &str, limit: u32, example: &str, args: &[&str]) -> support::Out {
    let mut cmd = std::process::Command::new(support::oxmpirun());
    cmd.args(["-n", "8", "--mca", "btl", btl])
        .args(["--timeout", &LIMIT.as_secs().to_string()])
        .args(["sh", "-c"])
        .arg(format!(
            "ulimit -n {limit} && exec {} {}",
            support::example(example).display(),
            args.join(" ")
        ));
    support::run_cmd(&mut cmd, LIMIT + Duration::from_secs(10))
}

fn names_the_limit(stderr: &str, limit: u32) -> bool {
    stderr.contains(&format!("out of file descriptors (limit {limit}"))
        && stderr.contains("ulimit -n")
}
