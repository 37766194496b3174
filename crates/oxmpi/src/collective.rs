//! The collectives the communicator machinery needs, over point-to-point on
//! a communicator's internal context (`ctx + 1`), which user traffic never
//! uses: a dissemination barrier, and an all-gather of fixed-size
//! contributions (communicator creation agrees on context ids and colors
//! with it).
//!
//! Both check the error each request completes with, not only the call
//! that waits for it: a receive from a dead member completes with
//! `MPI_ERR_PROC_FAILED` in its status. Neither stops at the first failed
//! round: every live member still sends what the others wait for, so the
//! live members all return, and each of them returns the failure (see
//! [`barrier_ctx`]).

use oxmpi_match::{Source, Tag};
use oxmpi_pml::{Buffer, ReqId, SendMode};

use crate::buffer;
use crate::error::{Error, Result};
use crate::request::status_result;
use crate::runtime::Runtime;

/// Tags of the internal collectives.
const TAG_BARRIER: i32 = 1;
const TAG_ALLGATHER: i32 = 2;

/// Waits for `id` and turns an error in its status into an `Err`.
fn wait_ok(rt: &Runtime, id: ReqId) -> Result<()> {
    status_result(rt.pml.wait(id)).map(|_| ())
}

/// A barrier on internal context `ctx` among `size` ranks, this one being
/// `me`: ceil(log2(size)) rounds of one-byte messages to `me + 2^k`.
///
/// Each message carries whether its sender has seen a failure so far. A
/// rank whose receive fails (its source is dead) goes on with the later
/// rounds and flags its messages, so every live rank learns of the failure
/// along the same chains by which it learns that everyone arrived, and
/// every live rank returns the error instead of succeeding or waiting for
/// ever.
pub(crate) fn barrier_ctx(rt: &Runtime, ctx: u16, size: u32, me: u32) -> Result<()> {
    let mut first_err: Option<Error> = None;
    let mut k = 1u32;
    while k < size {
        let to = (me + k) % size;
        let from = (me + size - k) % size;
        let flag = [u8::from(first_err.is_some())];
        let mut heard = [0u8; 1];
        let posted = rt.pml.with(|o| -> Result<(ReqId, Option<ReqId>)> {
            let r = o.irecv(
                Buffer::Contig(buffer::bytes_mut(&mut heard)),
                Source::Rank(from),
                Tag::Value(TAG_BARRIER),
                ctx,
            )?;
            let s = o.isend(
                Buffer::Contig(buffer::bytes(&flag)),
                to,
                TAG_BARRIER,
                ctx,
                SendMode::Standard,
            );
            Ok((r, s.ok()))
        });
        let (r, s) = match posted {
            Ok(x) => x,
            Err(e) => return Err(first_err.unwrap_or(e)),
        };
        let rs = wait_ok(rt, r);
        let ss = match s {
            Some(s) => wait_ok(rt, s),
            None => Err(Error::new(
                crate::ErrorClass::ProcFailed,
                format!("barrier: rank {to} of the communicator cannot be reached"),
            )),
        };
        if let Err(e) = rs.and(ss) {
            first_err.get_or_insert(e);
        } else if heard[0] != 0 && first_err.is_none() {
            first_err = Some(Error::new(
                crate::ErrorClass::ProcFailed,
                format!("barrier: rank {from} of the communicator saw a member fail"),
            ));
        }
        k *= 2;
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
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
            // A member that cannot be reached is an error, but the others
            // still get this rank's contribution (they wait for it).
            let r = o.irecv(
                Buffer::Contig(buffer::bytes_mut(chunk)),
                Source::Rank(peer),
                Tag::Value(TAG_ALLGATHER),
                ctx,
            );
            let s = o.isend(
                Buffer::Contig(buffer::bytes(mine)),
                peer,
                TAG_ALLGATHER,
                ctx,
                SendMode::Standard,
            );
            for posted in [r, s] {
                match posted {
                    Ok(id) => reqs.push(id),
                    Err(e) => {
                        first_err.get_or_insert(Error::from(e));
                    }
                }
            }
        }
    });
    // Every posted request completes before the buffers can go away, even
    // when one failed.
    for r in reqs {
        if let Err(e) = wait_ok(rt, r) {
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(all),
    }
}
