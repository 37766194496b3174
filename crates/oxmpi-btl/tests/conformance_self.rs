//! The BTL conformance suite against the `self` BTL.

#[test]
fn self_btl_conforms() {
    oxmpi_btl::conformance::run_all(oxmpi_btl::conformance::self_pair);
}

#[test]
fn self_btl_delivers_from_its_peer_alone() {
    oxmpi_btl::conformance::progress_from_delivers(oxmpi_btl::conformance::self_pair());
}
