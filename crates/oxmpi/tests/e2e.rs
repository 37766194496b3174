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

#[test]
fn sm_two_ranks_everything() {
    suite(2, "self,sm", &[]);
}

#[test]
fn tcp_two_ranks_everything() {
    suite(2, "self,tcp", &[]);
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
fn sm_and_tcp_together() {
    // Both open: sm wins for local peers by exclusivity.
    suite(4, "self,sm,tcp", &["pairs", "any"]);
}

#[test]
fn unreachable_peer_is_a_clear_error() {
    let out = support::run(2, "self", "p2p_suite", &[], LIMIT);
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains("cannot reach rank"),
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
