//! The collectives the communicator machinery needs, over point-to-point on
//! a communicator's internal context (`ctx + 1`), which user traffic never
//! uses: a dissemination barrier, and an all-gather of fixed-size
//! contributions (communicator creation agrees on context ids and colors
//! with it).

use oxmpi_match::{Source, Tag};
use oxmpi_pml::{Buffer, ReqId, SendMode};

use crate::buffer;
use crate::error::Result;
use crate::runtime::Runtime;

/// Tags of the internal collectives.
const TAG_BARRIER: i32 = 1;
const TAG_ALLGATHER: i32 = 2;

/// A barrier on internal context `ctx` among `size` ranks, this one being
/// `me`: ceil(log2(size)) rounds of zero-byte messages to `me + 2^k`.
pub(crate) fn barrier_ctx(rt: &Runtime, ctx: u16, size: u32, me: u32) -> Result<()> {
    let mut k = 1u32;
    while k < size {
        let to = (me + k) % size;
        let from = (me + size - k) % size;
        let (s, r) = rt.pml.with(|o| -> Result<(ReqId, ReqId)> {
            let r = o.irecv(
                Buffer::Contig(buffer::bytes_mut(&mut [])),
                Source::Rank(from),
                Tag::Value(TAG_BARRIER),
                ctx,
            )?;
            let s = o.isend(
                Buffer::Contig(buffer::bytes(&[])),
                to,
                TAG_BARRIER,
                ctx,
                SendMode::Standard,
            )?;
            Ok((s, r))
        })?;
        let rs = rt.pml.wait(r);
        let ss = rt.pml.wait(s);
        rs?;
        ss?;
        k *= 2;
    }
    Ok(())
}

/// Every rank's `mine` (all the same length, at least one byte), in rank
/// order.
pub(crate) fn allgather_ctx(
    rt: &Runtime,
    ctx: u16,
    size: u32,
    me: u32,
    mine: &[u8],
) -> Result<Vec<u8>> {
    let n = mine.len();
    assert!(n > 0, "allgather of empty contributions");
    let mut all = vec![0u8; n * size as usize];
    all[me as usize * n..(me as usize + 1) * n].copy_from_slice(mine);
    let mut reqs = Vec::with_capacity(2 * size as usize);
    let mut first_err = None;
    rt.pml.with(|o| {
        for (peer, chunk) in all.chunks_mut(n).enumerate() {
            let peer = peer as u32;
            if peer == me {
                continue;
            }
            let posted = o
                .irecv(
                    Buffer::Contig(buffer::bytes_mut(chunk)),
                    Source::Rank(peer),
                    Tag::Value(TAG_ALLGATHER),
                    ctx,
                )
                .and_then(|r| {
                    reqs.push(r);
                    o.isend(
                        Buffer::Contig(buffer::bytes(mine)),
                        peer,
                        TAG_ALLGATHER,
                        ctx,
                        SendMode::Standard,
                    )
                });
            match posted {
                Ok(s) => reqs.push(s),
                Err(e) => {
                    first_err = Some(e);
                    break;
                }
            }
        }
    });
    // Every posted request completes before the buffers can go away, even
    // when one failed.
    for r in reqs {
        if let Err(e) = rt.pml.wait(r) {
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        Some(e) => Err(e.into()),
        None => Ok(all),
    }
}
