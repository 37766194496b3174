//! Point-to-point semantics end to end: real jobs through `oxmpirun`, over
//! self+sm and self+tcp, 2 to 8 ranks (the `p2p_suite` example holds the
//! checks; see its doc).

mod support;

use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

fn suite(np: u32, btl: &str, args: &[&str]) {
    let out = support::run(np, btl, "p2p_suite", args, LIMIT);
    support::assert_ok(
        &out,
        "p2p_suite ok",
        &format!("p2p_suite -n {np} btl={btl} {args:?}"),
    );
}

/// [`suite`] with one more MCA parameter `(name, value)`.
fn suite_with(np: u32, btl: &str, (name, value): (&str, &str), args: &[&str]) {
    let mut cmd = std::process::Command::new(support::oxmpirun());
    cmd.args([
        "-n",
        &np.to_string(),
        "--mca",
        "btl",
        btl,
        "--mca",
        name,
        value,
    ])
    .args(["--timeout", &LIMIT.as_secs().to_string()])
    .arg(support::example("p2p_suite"))
    .args(args);
    let out = support::run_cmd(&mut cmd, LIMIT + Duration::from_secs(10));
    support::assert_ok(
        &out,
        "p2p_suite ok",
        &format!("p2p_suite -n {np} btl={btl} {name}={value} {args:?}"),
    );
}

#[test]
fn sm_two_ranks_everything() {
    suite(2, "self,sm", &[]);
}

#[test]
fn tcp_two_ranks_everything() {
    suite(2, "self,tcp", &[]);
}

#[test]
fn tcp_send_receive_pipeline_tail() {
    // A rendezvous with a send/receive tail (not the tcp default): the
    // suite's protocol check asserts the pipeline's fragments.
    let mut cmd = std::process::Command::new(support::oxmpirun());
    cmd.args(["-n", "2", "--mca", "btl", "self,tcp"])
        .env("OXMPI_MCA_btl_tcp_rdma_pipeline_send_length", "131072")
        .args(["--timeout", &LIMIT.as_secs().to_string()])
        .arg(support::example("p2p_suite"));
    let out = support::run_cmd(&mut cmd, LIMIT + Duration::from_secs(10));
    support::assert_ok(&out, "p2p_suite ok", "p2p_suite with a send/receive tail");
}

#[test]
fn sm_three_ranks_everything() {
    suite(3, "self,sm", &[]);
}

#[test]
fn tcp_three_ranks_everything() {
    suite(3, "self,tcp", &[]);
}

#[test]
fn sm_eight_ranks_on_two_cores() {
    suite(8, "self,sm", &["modes", "any", "misc", "comms"]);
}

#[test]
fn tcp_eight_ranks_on_two_cores() {
    suite(8, "self,tcp", &["modes", "any", "misc", "comms"]);
}

#[test]
fn tcp_two_links_stripe_rdma() {
    // Two tcp modules per peer: large transfers are striped over both
    // (the suite's protocol check asserts it from the counters).
    suite_with(3, "self,tcp", ("btl_tcp_links", "2"), &[]);
}

#[test]
fn sm_small_rings_as_on_big_nodes() {
    // The 64 KiB rings (and 16 KiB eager limit) that nodes of more than 16
    // ranks get, set here: the suite's sizes cross that eager threshold
    // too.
    suite_with(
        3,
        "self,sm",
        ("btl_sm_ring_size", "65536"),
        &["pairs", "modes", "any", "inline"],
    );
}

#[test]
fn sm_and_tcp_together() {
    // Both open: sm wins for local peers by exclusivity.
    suite(4, "self,sm,tcp", &["pairs", "any"]);
}

#[test]
fn unreachable_peer_is_a_clear_error() {
    let out = support::run(2, "self", "p2p_suite", &[], LIMIT);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("cannot reach rank") && out.stderr.contains("add sm or tcp"),
        "stderr: {}",
        out.stderr
    );
    // Without self a rank cannot reach itself: that is what to add.
    let out = support::run(2, "sm", "p2p_suite", &[], LIMIT);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("add self to the btl parameter"),
        "stderr: {}",
        out.stderr
    );
}

#[test]
fn singleton_without_launcher() {
    let out = support::run_cmd(
        std::process::Command::new(support::example("pingpong")).env_remove("PMI_FD"),
        LIMIT,
    );
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("needs 2 ranks"), "{out:?}");
}

/// MPICH's Hydra launches oxmpi jobs too: PMI-1 over its socket with sm,
/// PMI-2 over `-pmi-port` with tcp (whose secret then travels through the
/// key-value store). Skipped, with a note, where Hydra is not installed
/// (CI installs it).
#[test]
fn hydra_launches_real_jobs() {
    const HYDRA: &str = "/usr/bin/mpiexec.hydra";
    if !std::path::Path::new(HYDRA).exists() {
        assert!(std::env::var_os("CI").is_none(), "{HYDRA} missing in CI");
        eprintln!("note: {HYDRA} not found; skipping");
        return;
    }
    for (args, btl, pmi) in [
        (&["-n", "3"][..], "self,sm", "1"),
        (&["-pmi-port", "-n", "3"][..], "self,tcp", "2"),
    ] {
        let mut cmd = std::process::Command::new(HYDRA);
        cmd.args(args)
            .arg(support::example("p2p_suite"))
            .args(["any", "misc", "comms"])
            .env("OXMPI_MCA_btl", btl)
            .env("OXMPI_MCA_pmi_version", pmi)
            .env_remove("PMI_FD")
            .env_remove("PMI_PORT")
            .env_remove("OXMPI_JOB_SECRET");
        let out = support::run_cmd(&mut cmd, LIMIT);
        support::assert_ok(&out, "p2p_suite ok", &format!("hydra {args:?} {btl}"));
    }
}

fn api_suite(np: u32, btl: &str, args: &[&str]) {
    let out = support::run(np, btl, "api_suite", args, LIMIT);
    support::assert_ok(
        &out,
        "api_suite ok",
        &format!("api_suite -n {np} btl={btl} {args:?}"),
    );
}

/// The Rust API beyond plain sends (the `api_suite` example): derived
/// datatypes, persistent requests, sendrecv, request collections, futures
/// and threads, over each transport.
#[test]
fn api_sm_two_and_three_ranks() {
    api_suite(2, "self,sm", &[]);
    api_suite(3, "self,sm", &[]);
}

#[test]
fn api_tcp_two_and_three_ranks() {
    api_suite(2, "self,tcp", &[]);
    api_suite(3, "self,tcp", &[]);
}

#[test]
fn api_eight_ranks_on_two_cores() {
    api_suite(8, "self,sm", &[]);
    api_suite(8, "self,tcp", &[]);
}

/// The examples users start from, each a real job over each transport.
#[test]
fn examples_run_over_sm_and_tcp() {
    for (name, np, expect) in [
        ("ring", 4, "ring"),
        ("server", 4, "server: served 300 requests from 3 clients"),
        ("halo", 4, "all ghost cells checked"),
        ("threads", 3, "threads: 3 ranks x 4 threads"),
        // The receive-path measure (it checks every window's data).
        (
            "sm_recv_path",
            2,
            "ns per message (receives of a window already here)",
        ),
    ] {
        for btl in ["self,sm", "self,tcp"] {
            let out = support::run(np, btl, name, &[], LIMIT);
            support::assert_ok(&out, expect, &format!("{name} -n {np} btl={btl}"));
        }
    }
}

/// With `mpi_async_progress` (or its PML name `pml_ob1_progress_thread`)
/// a thread progresses communication from start-up: the suites give the
/// same results over both transports, and a rendezvous transfer completes
/// while the receiver only computes (the `overlap` check fails without it).
#[test]
fn async_progress_thread() {
    for (btl, param) in [
        ("self,sm", "mpi_async_progress"),
        ("self,tcp", "pml_ob1_progress_thread"),
    ] {
        for (prog, expect, args) in [
            (
                "api_suite",
                "api_suite ok",
                &["futures", "persistent", "threads", "overlap"][..],
            ),
            ("p2p_suite", "p2p_suite ok", &["pairs", "modes", "misc"][..]),
        ] {
            let mut cmd = std::process::Command::new(support::oxmpirun());
            cmd.args(["-n", "3", "--mca", "btl", btl, "--mca", param, "1"])
                .args(["--timeout", "120"])
                .arg(support::example(prog))
                .args(args)
                .env_remove("PMI_FD");
            let out = support::run_cmd(&mut cmd, LIMIT);
            support::assert_ok(&out, expect, &format!("{prog} async progress {btl}"));
        }
    }
}
