//! oxmpi derived datatypes: MPI type maps, their flattened layouts, and the
//! convertor that packs and unpacks them.
//!
//! Contract: a [`Datatype`] is an immutable, cheaply clonable description of
//! where the bytes of one element live relative to a buffer origin, built by
//! the MPI constructors ([`Datatype::contiguous`], [`Datatype::vector`],
//! [`Datatype::hvector`], [`Datatype::indexed`], [`Datatype::hindexed`],
//! [`Datatype::indexed_block`], [`Datatype::hindexed_block`],
//! [`Datatype::structured`], [`Datatype::resized`], [`Datatype::subarray`],
//! [`Datatype::darray`], [`Datatype::dup`]) from predefined [`Primitive`]
//! and [`Pair`] types, with
//! MPI's size/extent/bound rules (see the [`datatype`] module docs). Each
//! type carries a compact flattened layout, built at construction, whose
//! memory does not grow with the repetition counts.
//!
//! A [`Convertor`] packs or unpacks any byte range of the packed stream of
//! `count` elements, starting at any packed offset, without allocating and
//! with a seek cost independent of the offset; the user buffer is a slice
//! plus the position of the datatype origin in it, and every access is
//! bounds-checked ([`DatatypeError::OutOfBounds`], never a panic).
//!
//! [`Datatype::pack_external32`] and [`Datatype::unpack_external32`]
//! convert to and from MPI's portable `external32` representation
//! (big-endian, the standard's fixed sizes; `long double` as IEEE
//! quadruple precision).
//!
//! ```
//! use oxmpi_datatype::{Convertor, Datatype};
//!
//! // Every other f64 of a 4-element array: blocks of 8 bytes, stride 16.
//! let t = Datatype::vector(2, 1, 2, &Datatype::f64()).unwrap();
//! assert_eq!((t.size(), t.extent(), t.is_contiguous()), (16, 24, false));
//!
//! let buf: Vec<u8> = (0..32).collect();
//! let conv = Convertor::new(&t, 1).unwrap();
//! // Pack the second half first, then the first: fragments are independent.
//! let mut packed = [0u8; 16];
//! assert_eq!(conv.pack(&buf, 0, 8, &mut packed[8..]).unwrap(), 8);
//! assert_eq!(conv.pack(&buf, 0, 0, &mut packed[..8]).unwrap(), 8);
//! assert_eq!(&packed[..], &[0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23]);
//!
//! let mut back = vec![0xEEu8; 32];
//! conv.unpack(&mut back, 0, 0, &packed).unwrap();
//! assert_eq!(&back[..8], &buf[..8]);
//! assert_eq!(&back[8..16], &[0xEE; 8]); // gaps untouched
//! ```
//!
//! Seeds: Open MPI `opal/datatype` (convertor, description loops), MPICH
//! `src/mpi/datatype` and yaksa (flattened type trees), the MPI 4.1
//! standard chapter 5.
#![forbid(unsafe_code)]

mod convertor;
pub mod datatype;
mod error;
mod external32;
mod layout;
mod primitive;
mod signature;

pub use convertor::{Convertor, ReceiveStatus, Unpacked};
pub use datatype::Datatype;
pub use error::{DatatypeError, Result};
pub use primitive::{Combiner, Distribution, Order, Pair, Primitive};
pub use signature::Signature;
