//! The collectives the communicator machinery needs, over point-to-point on
//! a communicator's internal context (`ctx + 1`), which user traffic never
//! uses: a dissemination barrier (communicator creation agrees on context
//! ids with the exchanges of [`crate::ctxid`]).
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
pub(crate) const TAG_BARRIER: i32 = 1;

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
