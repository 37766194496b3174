//! End-to-end tests of `oxmpirun`: exit codes, failure handling, output
//! forwarding, stdin, signals, and that nothing is left behind.
//!
//! Programs without PMI are plain `sh -c` scripts; the PMI ones use the
//! `pmi_hello` example of this crate (built by `cargo test`).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{example, oxmpirun, pid_alive, Out};

fn sh(np: u32, extra: &[&str], script: &str) -> Out {
    let mut args: Vec<String> = vec!["-n".into(), np.to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["sh".into(), "-c".into(), script.into()]);
    common::run(&args)
}

#[test]
fn all_ranks_succeed_exit_zero() {
    let out = sh(3, &[], "echo hello from $PMI_RANK of $PMI_SIZE");
    assert_eq!(out.code, 0, "{out:?}");
    let mut lines: Vec<&str> = out.stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "hello from 0 of 3",
            "hello from 1 of 3",
            "hello from 2 of 3"
        ]
    );
    assert!(
        out.stderr.is_empty(),
        "a healthy run prints nothing: {:?}",
        out.stderr
    );
}

#[test]
fn first_failing_exit_code_is_returned_and_named() {
    let out = sh(4, &[], "if [ $PMI_RANK = 2 ]; then exit 7; fi; sleep 20");
    assert_eq!(out.code, 7, "{out:?}");
    assert!(out.stderr.contains("rank 2"), "{:?}", out.stderr);
    assert!(
        out.stderr.contains("exited with status 7"),
        "{:?}",
        out.stderr
    );
    assert!(
        out.elapsed < Duration::from_secs(5),
        "took {:?}",
        out.elapsed
    );
}

#[test]
fn sigkill_of_one_rank_ends_the_job_quickly_without_orphans() {
    let dir = common::tempdir();
    let script = format!(
        "echo $$ > {dir}/pid.$PMI_RANK; if [ $PMI_RANK = 1 ]; then sleep 0.3; kill -9 $$; fi; exec sleep 30",
        dir = dir.display()
    );
    let out = sh(3, &[], &script);
    assert_eq!(out.code, 128 + 9, "{out:?}");
    assert!(out.stderr.contains("rank 1"), "{:?}", out.stderr);
    assert!(
        out.stderr.contains("signal 9 (SIGKILL)"),
        "{:?}",
        out.stderr
    );
    assert!(
        out.elapsed < Duration::from_secs(3),
        "took {:?}",
        out.elapsed
    );
    for r in 0..3 {
        let pid: i32 = std::fs::read_to_string(dir.join(format!("pid.{r}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(!pid_alive(pid), "rank {r} (pid {pid}) survived the job");
    }
}

#[test]
fn timeout_ends_the_job() {
    let out = sh(2, &["--timeout", "1"], "sleep 30");
    assert_eq!(out.code, 124, "{out:?}");
    assert!(out.stderr.contains("--timeout"), "{:?}", out.stderr);
    assert!(
        out.elapsed < Duration::from_secs(4),
        "took {:?}",
        out.elapsed
    );
}

#[test]
fn every_line_of_every_rank_arrives_unmixed() {
    let lines = 3000;
    let script = format!(
        "i=0; while [ $i -lt {lines} ]; do echo \"rank $PMI_RANK line $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"; echo \"err $PMI_RANK $i\" >&2; i=$((i+1)); done"
    );
    let out = sh(4, &[], &script);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let mut seen = vec![0usize; 4];
    for line in out.stdout.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts.len(), 5, "mixed or cut line: {line:?}");
        assert_eq!(parts[4].len(), 40, "mixed or cut line: {line:?}");
        let r: usize = parts[1].parse().unwrap();
        let i: usize = parts[3].parse().unwrap();
        assert_eq!(i, seen[r], "rank {r}'s lines out of order");
        seen[r] += 1;
    }
    assert_eq!(seen, vec![lines; 4]);
    let errs = out.stderr.lines().filter(|l| l.starts_with("err ")).count();
    assert_eq!(errs, 4 * lines);
}

#[test]
fn tag_output_prefixes_each_line() {
    let out = sh(
        2,
        &["--tag-output"],
        "echo out$PMI_RANK; echo err$PMI_RANK >&2",
    );
    assert_eq!(out.code, 0);
    for r in 0..2 {
        assert!(
            out.stdout.contains(&format!("[1,{r}]<stdout>:out{r}\n")),
            "{:?}",
            out.stdout
        );
        assert!(
            out.stderr.contains(&format!("[1,{r}]<stderr>:err{r}\n")),
            "{:?}",
            out.stderr
        );
    }
}

#[test]
fn partial_last_line_is_delivered() {
    let out = sh(1, &[], "printf 'no newline'");
    assert_eq!(out.stdout, "no newline\n");
}

#[test]
fn stdin_goes_to_rank_zero_only() {
    let mut child = Command::new(oxmpirun())
        .args(["-n", "2", "sh", "-c", "echo \"$PMI_RANK:$(cat | wc -l)\""])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"a\nb\nc\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    assert_eq!(lines, ["0:3", "1:0"]);
}

#[test]
fn export_and_environment() {
    let out = sh(
        2,
        &["-x", "OXMPI_TEST_A=x y", "--bind-to", "none"],
        "echo \"$OXMPI_TEST_A\"",
    );
    assert_eq!(out.stdout, "x y\nx y\n");
}

/// Starts `oxmpirun -n 3` on a shell loop that records its pid and the
/// signals it gets; returns the launcher and the scratch directory once every
/// rank runs.
fn start_trapping_job() -> (std::process::Child, std::path::PathBuf) {
    let dir = common::tempdir();
    let script = format!(
        "trap 'echo int > {d}/sig.$PMI_RANK; exit 3' INT; trap 'echo term > {d}/sig.$PMI_RANK; exit 3' TERM; echo $$ > {d}/pid.$PMI_RANK; while true; do sleep 0.05; done",
        d = dir.display()
    );
    let child = Command::new(oxmpirun())
        .args(["-n", "3", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while (0..3).any(|r| !dir.join(format!("pid.{r}")).exists()) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "ranks did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(50));
    (child, dir)
}

fn rank_pids(dir: &std::path::Path) -> Vec<i32> {
    (0..3)
        .map(|r| {
            std::fs::read_to_string(dir.join(format!("pid.{r}")))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn sigint_and_sigterm_to_the_launcher_reach_every_rank() {
    use rustix::process::{kill_process, Pid, Signal};
    for (sig, name) in [(Signal::INT, "int"), (Signal::TERM, "term")] {
        let (child, dir) = start_trapping_job();
        let sent = Instant::now();
        kill_process(Pid::from_child(&child), sig).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(sent.elapsed() < Duration::from_secs(3));
        assert_eq!(out.status.code(), Some(128 + sig.as_raw()), "{name}");
        for (r, pid) in rank_pids(&dir).into_iter().enumerate() {
            let got = std::fs::read_to_string(dir.join(format!("sig.{r}"))).unwrap_or_default();
            assert_eq!(got.trim(), name, "rank {r} did not get SIG{name}");
            assert!(!pid_alive(pid), "rank {r} survived");
        }
    }
}

#[test]
fn ranks_die_with_a_killed_launcher() {
    let (mut child, dir) = start_trapping_job();
    child.kill().unwrap(); // SIGKILL: the launcher cannot clean up itself
    child.wait().unwrap();
    let pids = rank_pids(&dir);
    let t0 = Instant::now();
    while pids.iter().any(|&p| pid_alive(p)) {
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "ranks outlived a SIGKILLed launcher: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_program_that_cannot_start_is_a_clear_error() {
    let out = common::run(&["-n".into(), "2".into(), "/nonexistent/oxmpi-prog".into()]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("cannot start rank 0"),
        "{:?}",
        out.stderr
    );
    assert!(
        out.stderr.contains("/nonexistent/oxmpi-prog"),
        "{:?}",
        out.stderr
    );
}

#[test]
fn bad_arguments_and_parameters_fail_at_start_up() {
    let out = common::run(&["--frobnicate".into(), "true".into()]);
    assert_eq!(out.code, 1);
    assert!(
        out.stderr.contains("unknown option \"--frobnicate\""),
        "{:?}",
        out.stderr
    );

    let out = common::run(&[
        "--mca".into(),
        "no_such_param".into(),
        "1".into(),
        "true".into(),
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("no_such_param"), "{:?}", out.stderr);

    let out = common::run(&[
        "--mca".into(),
        "btl".into(),
        "self,^tcp".into(),
        "true".into(),
    ]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("btl"), "{:?}", out.stderr);
}

#[test]
fn pmi_modex_on_eight_ranks_oversubscribed() {
    for extra in [
        &[][..],
        &["--pmi-port"][..],
        &["--mca", "pmi_version", "2"][..],
    ] {
        let mut args: Vec<String> = vec!["-n".into(), "8".into()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.push(example("pmi_hello"));
        let out = common::run(&args);
        assert_eq!(out.code, 0, "{extra:?}: {out:?}");
        let ok = out
            .stdout
            .lines()
            .filter(|l| l.contains("modex ok"))
            .count();
        assert_eq!(ok, 8, "{extra:?}: {}", out.stdout);
        for r in 0..8 {
            assert!(
                out.stdout.contains(&format!("rank {r} of 8")),
                "{}",
                out.stdout
            );
        }
    }
}

#[test]
fn abort_ends_the_job_with_its_code() {
    let out = common::run(&[
        "-n".into(),
        "3".into(),
        example("pmi_hello"),
        "--abort-rank".into(),
        "1".into(),
        "--abort-code".into(),
        "42".into(),
    ]);
    assert_eq!(out.code, 42, "{out:?}");
    // The message as sent (spaces kept), and the aborting rank is not one
    // of the ranks still to end.
    assert!(
        out.stderr
            .contains("rank 1 called abort with exit code 42: pmi_hello: abort requested"),
        "{:?}",
        out.stderr
    );
    assert!(
        out.stderr.contains("ending the 2 remaining rank(s)"),
        "{:?}",
        out.stderr
    );
    assert!(
        out.elapsed < Duration::from_secs(5),
        "took {:?}",
        out.elapsed
    );
}

#[test]
fn exiting_without_finalize_is_a_failure() {
    let out = common::run(&[
        "-n".into(),
        "2".into(),
        example("pmi_hello"),
        "--skip-finalize-rank".into(),
        "0".into(),
    ]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("rank 0"), "{:?}", out.stderr);
    assert!(
        out.stderr.contains("without calling finalize"),
        "{:?}",
        out.stderr
    );
}

#[test]
fn enable_recovery_keeps_the_others_running() {
    let out = sh(
        3,
        &["--enable-recovery"],
        "if [ $PMI_RANK = 1 ]; then exit 5; fi; sleep 0.5; echo done $PMI_RANK",
    );
    // The others finished; the job's status is the failure's.
    assert_eq!(out.code, 5, "{out:?}");
    let mut lines: Vec<&str> = out.stdout.lines().collect();
    lines.sort();
    assert_eq!(lines, ["done 0", "done 2"], "{out:?}");
    assert!(
        out.stderr.contains("rank 1")
            && out.stderr.contains("exited with status 5")
            && out.stderr.contains("goes on without it"),
        "{:?}",
        out.stderr
    );
    // Without it the first failure ends the job.
    let out = sh(
        3,
        &[],
        "if [ $PMI_RANK = 1 ]; then exit 5; fi; sleep 5; echo done $PMI_RANK",
    );
    assert_eq!(out.code, 5, "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
}

/// `--pmi-port` listens on loopback, where any local user can connect: a
/// connection that does not present the job's secret first is closed and
/// can neither end the job nor read its store; one with the secret can.
#[test]
fn the_pmi_port_serves_only_the_jobs_secret_holders() {
    use std::io::{BufRead, BufReader, Read};
    use std::net::TcpStream;
    for with_secret in [false, true] {
        let mut child = Command::new(oxmpirun())
            .args(["--pmi-port", "-n", "1", "sh", "-c"])
            .arg("echo \"$PMI_PORT|$OXMPI_PMI_AUTH\"; sleep 2; echo finished")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let (port, auth) = line.trim().split_once('|').unwrap();
        let secret = auth.split_once(' ').unwrap().1;
        assert_eq!(auth.split_once(' ').unwrap().0, port, "{line}");
        let mut s = TcpStream::connect(port).unwrap();
        if with_secret {
            s.write_all(format!("cmd=auth secret={secret}\n").as_bytes())
                .unwrap();
        }
        s.write_all(b"cmd=get kvsname=x key=PMI_process_mapping\ncmd=abort exitcode=9\n")
            .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut reply = String::new();
        let _ = s.read_to_string(&mut reply);
        let status = child.wait().unwrap();
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        if with_secret {
            assert_eq!(status.code(), Some(9), "the secret holder's abort");
            assert!(reply.contains("cmd=get_result"), "{reply:?}");
        } else {
            // Closed without an answer; the job ran to its end.
            assert_eq!(reply, "", "a stranger was answered");
            assert_eq!(status.code(), Some(0), "a stranger ended the job");
            assert!(rest.contains("finished"), "{rest:?}");
        }
    }
}

/// A soft descriptor limit too low for the launcher's few descriptors per
/// rank (it failed at 16 ranks with a soft limit of 64 before): raised to
/// the hard limit, which the ranks inherit; a hard limit too low is an
/// error that names it.
#[test]
fn the_soft_descriptor_limit_is_raised_to_the_hard_one() {
    let hard = Command::new("sh")
        .args(["-c", "ulimit -H -n"])
        .output()
        .unwrap();
    let hard = String::from_utf8_lossy(&hard.stdout).trim().to_string();
    if hard.parse::<u64>().map_or(true, |h| h < 1024) {
        eprintln!("note: hard descriptor limit {hard}: skipped");
        return;
    }
    let out = common::run_with(Command::new("sh").args([
        "-c",
        &format!(
            "ulimit -S -n 40 && exec {} -n 16 sh -c 'ulimit -S -n'",
            oxmpirun()
        ),
    ]));
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 16, "{out:?}");
    assert!(lines.iter().all(|l| *l == hard), "{out:?}");
    let out = common::run_with(Command::new("sh").args([
        "-c",
        &format!("ulimit -n 24 && exec {} -n 16 true", oxmpirun()),
    ]));
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("out of file descriptors (limit 24, hard limit 24)"),
        "{}",
        out.stderr
    );
}

/// A program started by a launcher that gives it no PMI oxmpi speaks stops
/// in initialisation with a message naming the launcher and what to use,
/// instead of running as one of several silent singletons (the
/// environments are those real launchers give; `slurm.rs` runs the real
/// `srun --mpi=pmix`). Environments that show one process still run as a
/// singleton, and so does anything with `pmi_foreign_launcher=singleton`.
#[test]
fn foreign_launcher_is_an_error_not_singletons() {
    let run = |env: &[(&str, &str)]| -> Out {
        let mut cmd = Command::new(example("transports"));
        // Whatever launcher runs the tests themselves is not the one tested.
        for (v, _) in std::env::vars_os() {
            let v = v.to_string_lossy();
            let launcher = ["PMI_", "PMIX_", "SLURM_", "OMPI_", "MPI_LOCAL"]
                .iter()
                .any(|p| v.starts_with(p));
            if launcher {
                cmd.env_remove(&*v);
            }
        }
        common::run_with(cmd.envs(env.iter().copied()))
    };
    for (env, says) in [
        (
            &[
                ("PMIX_NAMESPACE", "slurm.pmix.3.0"),
                ("PMIX_RANK", "1"),
                ("PMIX_SERVER_URI41", "pmix-server.1;tcp4://127.0.0.1:1"),
                ("SLURM_STEP_ID", "0"),
                ("SLURM_STEP_NUM_TASKS", "2"),
            ][..],
            "srun --mpi=pmi2",
        ),
        (
            &[
                ("PMIX_NAMESPACE", "prterun-vm-1@1"),
                ("PMIX_RANK", "0"),
                ("OMPI_COMM_WORLD_SIZE", "4"),
            ][..],
            "Open MPI's mpirun",
        ),
        (
            &[
                ("SLURM_STEP_ID", "0"),
                ("SLURM_STEP_NUM_TASKS", "4"),
                ("SLURM_PROCID", "2"),
            ][..],
            "task 2 of a Slurm job step of 4 tasks",
        ),
        (
            &[("PMI_RANK", "1"), ("PMI_SIZE", "2")][..],
            "PMI_FD and PMI_PORT",
        ),
    ] {
        let out = run(env);
        assert_eq!(out.code, 1, "{env:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{env:?}: {out:?}");
        assert!(
            out.stderr.contains(says) && out.stderr.contains("pmi_foreign_launcher=singleton"),
            "{env:?}: stderr does not say {says:?}: {out:?}"
        );
        let out = run(&[env, &[("OXMPI_MCA_pmi_foreign_launcher", "singleton")]].concat());
        assert_eq!(out.code, 0, "{env:?} allowed: {out:?}");
        assert_eq!(out.stdout, "rank 0 of 1: sum 0\n", "{env:?} allowed");
    }
    // A shell inside an allocation, one task of srun: singletons.
    for env in [
        &[("SLURM_JOB_ID", "7"), ("SLURM_NTASKS", "4")][..],
        &[("SLURM_STEP_ID", "0"), ("SLURM_STEP_NUM_TASKS", "1")][..],
    ] {
        let out = run(env);
        assert_eq!(out.code, 0, "{env:?}: {out:?}");
        assert_eq!(out.stdout, "rank 0 of 1: sum 0\n", "{env:?}");
    }
}
