//! oxmpi PML "ob1": MPI point-to-point semantics over the BTLs.
//!
//! Built so far (issue 6 in progress): [`hdr`], the wire headers every
//! protocol of seed 000 exchanges, with a fixed little-endian layout parsed
//! with bounds checks from untrusted bytes.
//!
//! Layer rule: the PML never names a concrete BTL; it is generic over
//! `oxmpi_btl::btl::Btl`.
#![forbid(unsafe_code)]

pub mod hdr;
