//! The BTL conformance suite against the `self` BTL.

#[test]
fn self_btl_conforms() {
    oxmpi_btl::conformance::run_all(oxmpi_btl::conformance::self_pair);
}
