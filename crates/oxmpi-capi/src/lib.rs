//! oxmpi's C ABI: `libmpi_abi.so.1`, the MPI 5.0 standard ABI over the
//! Rust API.
//!
//! Every entry point is exported as `MPI_X` and `PMPI_X`; it looks up its
//! handles (never dereferencing one: a garbage handle is an error of its
//! kind's class), builds a [`oxmpi::RawBuffer`] for each `buf, count,
//! datatype`, and calls the Rust API, so the semantics are the Rust API's.
//! Errors go through the communicator's error handler
//! (`MPI_ERRORS_ARE_FATAL` by default: the job is aborted with a message
//! naming the call and the cause; `MPI_ERRORS_RETURN`: an error code is
//! returned, whose class `MPI_Error_class` gives and whose string
//! `MPI_Error_string` gives, naming the call and the cause; a handler the
//! program created is called with the communicator and that code).
//! Errors of calls without a communicator use `MPI_COMM_WORLD`'s handler.
//! Collectives: the blocking ones of `coll` (linear), and every
//! non-blocking, persistent and v/w/scan collective as a schedule of
//! point-to-point rounds advanced by progress ([`sched`], [`nbc`]), the
//! neighbourhood collectives among them ([`neighbor`]).
//! One-sided communication, MPI-IO and dynamic process management are not
//! implemented: their functions fail with `MPI_ERR_UNSUPPORTED_OPERATION`
//! ([`unsupported`]).
//!
//! `include/mpi.h` is the standard ABI header; `mpicc` (in `bin/`) wraps
//! the system C compiler with its include and link flags.
#![allow(unsafe_code)]
#![allow(non_snake_case)]

pub mod attr;
pub mod bsend;
pub mod coll;
pub mod comm;
pub mod dtype;
pub mod dtype_ext;
pub mod env;
pub mod errcode;
pub mod errh;
pub mod info;
pub mod nbc;
pub mod neighbor;
pub mod ops;
pub mod p2p;
pub mod part;
pub mod sched;
pub mod session;
pub mod state;
pub mod topo;
pub mod types;
pub mod unsupported;
#[cfg(target_arch = "x86_64")]
pub mod x87;
