//! User buffers as the PML sees them: contiguous memory, or memory plus a
//! layout that packs and unpacks any byte range of the message.

use std::fmt;
use std::sync::Arc;

use oxmpi_btl::mem::MemRegion;

/// How a non-contiguous buffer maps onto the packed byte stream of its
/// message. Implemented by the datatype convertor; the PML only asks for
/// byte ranges, in any order (pipeline fragments arrive out of order).
pub trait Layout: Send + Sync + fmt::Debug {
    /// Bytes of the packed message.
    fn packed_len(&self) -> usize;
    /// Packs packed bytes `[offset, offset + out.len())` of the message
    /// found in `base` into `out`; returns how many bytes it wrote (fewer
    /// only at the end of the message).
    fn pack(&self, base: &MemRegion, offset: usize, out: &mut [u8]) -> usize;
    /// Unpacks `data`, which are packed bytes starting at `offset`, into
    /// `base`; returns how many bytes it consumed (fewer only when the
    /// buffer ends first).
    fn unpack(&self, base: &MemRegion, offset: usize, data: &[u8]) -> usize;
}

/// A user buffer handed to a send or receive.
#[derive(Clone, Debug)]
pub enum Buffer {
    /// Contiguous bytes: eligible for in-place sends and RDMA.
    Contig(MemRegion),
    /// A region and a layout (a derived datatype): packed and unpacked by
    /// fragment; never RDMA'd directly.
    Typed(MemRegion, Arc<dyn Layout>),
}

impl Buffer {
    /// Bytes of the (packed) message this buffer holds or can take.
    pub fn len(&self) -> usize {
        match self {
            Buffer::Contig(r) => r.len(),
            Buffer::Typed(_, l) => l.packed_len(),
        }
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The contiguous region, if the buffer is contiguous.
    pub fn contig(&self) -> Option<MemRegion> {
        match self {
            Buffer::Contig(r) => Some(*r),
            Buffer::Typed(..) => None,
        }
    }

    /// Copies packed bytes `[offset, offset + out.len())` into `out`;
    /// returns how many it wrote (fewer only at the end of the message).
    pub fn pack(&self, offset: usize, out: &mut [u8]) -> usize {
        match self {
            Buffer::Contig(r) => {
                let src = r.read();
                let end = (offset + out.len()).min(src.len());
                let n = end.saturating_sub(offset);
                oxmpi_btl::mem::copy_bytes(&mut out[..n], &src[offset..offset + n]);
                n
            }
            Buffer::Typed(r, l) => l.pack(r, offset, out),
        }
    }

    /// Writes packed bytes starting at `offset`, clipped to the buffer;
    /// returns how many were stored.
    pub(crate) fn unpack(&self, offset: usize, data: &[u8]) -> usize {
        let cap = self.len();
        if offset >= cap {
            return 0;
        }
        let n = data.len().min(cap - offset);
        match self {
            Buffer::Contig(r) => {
                r.write(offset, &data[..n]);
                n
            }
            Buffer::Typed(r, l) => l.unpack(r, offset, &data[..n]),
        }
    }
}
