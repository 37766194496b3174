//! Communicator creation end to end: the `comm_suite` example (context ids
//! recycled over thousands of create/free cycles and hundreds alive at
//! once, non-blocking duplication, communicators from groups,
//! intercommunicators, Cartesian grids) through `oxmpirun`, over self+sm
//! and self+tcp, 1 to 8 ranks.

mod support;

use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(240);

fn suite(np: u32, btl: &str) {
    let out = support::run(np, btl, "comm_suite", &[], LIMIT);
    support::assert_ok(
        &out,
        "comm_suite ok",
        &format!("comm_suite -n {np} btl={btl}"),
    );
}

#[test]
fn sm_one_rank() {
    suite(1, "self,sm");
}

#[test]
fn sm_two_ranks() {
    suite(2, "self,sm");
}

#[test]
fn sm_three_ranks() {
    suite(3, "self,sm");
}

#[test]
fn sm_eight_ranks() {
    suite(8, "self,sm");
}

#[test]
fn tcp_two_ranks() {
    suite(2, "self,tcp");
}

#[test]
fn tcp_three_ranks() {
    suite(3, "self,tcp");
}
