//! The PML cm over the ofi MTL, end to end: real jobs through `oxmpirun
//! --mca pml cm`, on libfabric's providers that pass the MTL conformance
//! suite here (`tcp;ofi_rxm`; the others are listed in `oxmpi-mtl`'s ofi
//! tests with the provider defect that keeps each out). Where libfabric is
//! not installed, each test says so and passes: oxmpi then runs on ob1
//! alone, which `pml_cm_without_libfabric_*` checks.

mod support;

use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

/// The ofi provider the suites run on (Debian's libfabric offers it with
/// FI_TAGGED and FI_EP_RDM).
const PROVIDER: &str = "tcp";

fn cm_cmd(np: u32, extra: &[&str]) -> Command {
    let mut cmd = Command::new(support::oxmpirun());
    cmd.args(["-n", &np.to_string(), "--mca", "pml", "cm"])
        .args(["--mca", "mtl_ofi_provider_include", PROVIDER])
        .args(extra)
        .args(["--timeout", &LIMIT.as_secs().to_string()]);
    cmd
}

/// Whether libfabric loads here (else the test says why and passes).
fn libfabric() -> bool {
    let mut cmd = cm_cmd(1, &[]);
    cmd.arg(support::example("ring"));
    let out = support::run_cmd(&mut cmd, LIMIT);
    if out.stderr.contains("libfabric is not available") {
        eprintln!(
            "skipped: libfabric is not installed ({})",
            out.stderr.trim()
        );
        return false;
    }
    true
}

fn run_cm(np: u32, prog: &str, args: &[&str], expect: &str) {
    let mut cmd = cm_cmd(np, &[]);
    cmd.arg(support::example(prog)).args(args);
    let out = support::run_cmd(&mut cmd, LIMIT + Duration::from_secs(10));
    support::assert_ok(&out, expect, &format!("{prog} -n {np} pml cm {args:?}"));
}

/// The point-to-point suite's sections that test MPI (the others count
/// ob1's protocols), the Rust API suite, and the examples, at 2, 3 and 8
/// ranks (8 on 2 cores: oversubscribed).
#[test]
fn suites_and_examples_run_on_pml_cm() {
    if !libfabric() {
        return;
    }
    let sections = ["pairs", "modes", "any", "unexpected", "misc", "comms"];
    for np in [2, 3, 8] {
        run_cm(np, "p2p_suite", &sections, "p2p_suite ok");
    }
    for np in [2, 3] {
        run_cm(np, "api_suite", &[], "api_suite ok");
        run_cm(np, "ring", &[], "(via ofi)");
        run_cm(np, "halo", &[], "all ghost cells checked");
    }
    // MPI_THREAD_MULTIPLE, threads sharing the PML's lock.
    run_cm(2, "threads", &[], "threads: 2 ranks");
}

/// `MPI_TAG_UB` follows the MTL's tag layout, and a tag past it is an
/// error at the call (`ofi_tag_2`: 20 bits of tag, one of them the sign);
/// the full layouts carry every tag.
#[test]
fn the_tag_layout_bounds_tags() {
    if !libfabric() {
        return;
    }
    for (mode, ub) in [("ofi_tag_2", (1 << 19) - 1), ("ofi_tag_1", i32::MAX)] {
        let mut cmd = cm_cmd(2, &["--mca", "mtl_ofi_tag_mode", mode]);
        cmd.arg(support::example("tag_bounds"));
        let out = support::run_cmd(&mut cmd, LIMIT);
        support::assert_ok(
            &out,
            &format!("tag_bounds ok: MPI_TAG_UB {ub}"),
            &format!("tag_bounds {mode}"),
        );
    }
}

/// Bad input: an include list naming no provider, an unknown tag mode, and
/// cm with the default exclusions (every provider here is one Open MPI
/// also leaves to its BTLs) each end the job with a message naming the
/// cause; a default run stays on ob1.
#[test]
fn pml_cm_refuses_what_cannot_work_with_a_reason() {
    if !libfabric() {
        return;
    }
    let check = |extra: &[&str], want: &str| {
        let mut cmd = Command::new(support::oxmpirun());
        cmd.args(["-n", "2", "--mca", "pml", "cm"])
            .args(extra)
            .arg(support::example("ring"));
        let out = support::run_cmd(&mut cmd, LIMIT);
        assert!(out.code != 0, "{extra:?} succeeded");
        assert!(
            out.stderr.contains(want),
            "{extra:?}: wanted {want:?} in {}",
            out.stderr
        );
    };
    check(
        &["--mca", "mtl_ofi_provider_include", "nosuch"],
        "mtl_ofi_provider_include=nosuch",
    );
    check(
        &["--mca", "mtl_ofi_tag_mode", "ofi_tag_9"],
        "mtl_ofi_tag_mode",
    );
    check(&[], "mtl_ofi_provider_exclude");
    // Left to choose, the job runs on ob1 (the default exclusions leave
    // no provider): the ring goes over sm.
    let out = support::run(2, "self,sm", "ring", &[], LIMIT);
    support::assert_ok(&out, "via sm", "default run");
}

/// The entries of `/dev/shm` shaped as libfabric's `shm` provider names
/// its segments (`<pid>:<endpoint>:<n>`).
fn ofi_shm_segments() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    let parts: Vec<&str> = n.split(':').collect();
                    parts.len() == 3
                        && parts
                            .iter()
                            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A job over libfabric's `shm` provider leaves no segment behind: the
/// ranks exit after `MPI_Finalize` without dropping their PML, so cm's
/// finalize must close the MTL's endpoint (`Mtl::close`). (The ping-pong
/// posts its receives before the messages come, which the provider's
/// exact-tag matching of unexpected messages in libfabric 1.17 needs.)
#[test]
fn a_job_on_the_shm_provider_leaves_no_segment() {
    if !libfabric() {
        return;
    }
    let before = ofi_shm_segments();
    let mut cmd = Command::new(support::oxmpirun());
    cmd.args(["-n", "2", "--mca", "pml", "cm"])
        .args(["--mca", "mtl_ofi_provider_include", "shm"])
        .args(["--timeout", &LIMIT.as_secs().to_string()])
        .arg(support::example("pingpong"));
    let out = support::run_cmd(&mut cmd, LIMIT + Duration::from_secs(10));
    if out.code != 0 && out.stderr.contains("no OFI provider") {
        eprintln!("skipped: no shm provider ({})", out.stderr.trim());
        return;
    }
    support::assert_ok(&out, "1048576 B", "pingpong on the shm provider");
    let left: Vec<String> = ofi_shm_segments().difference(&before).cloned().collect();
    assert!(left.is_empty(), "the job left {left:?} in /dev/shm");
}
