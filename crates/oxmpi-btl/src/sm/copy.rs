//! The copy-in/copy-out emulation of put and get, for peers without CMA
//! (the peer's or our single copy disabled, or the probe failed) and for
//! keys without a slot in the owner's table.
//!
//! CONTROL records (see [`super::ring`]) carry a get request and the data
//! back, or a put's start, its data and its acknowledgement; the owner of
//! the registration checks the key against its own registrations
//! (`Regs::resolve`). Data goes in records of the ring's
//! largest payload, as far as the ring has room (`pump`); the rest waits
//! for the next progress. Operations never fail for lack of CMA.

use std::collections::VecDeque;

use super::regs::{Regs, ACCESS_READ, ACCESS_WRITE};
use super::ring::RingProducer;
use crate::btl::{BtlError, RemoteKey, Token};
use crate::mem::{copy_bytes, MemRegion};

/// Longest error text carried by a copy-in/copy-out reply.
const MAX_REPLY_TEXT: usize = 200;

// CONTROL record tags of the copy-in/copy-out RDMA emulation.
const C_GET_REQ: u8 = 1;
const C_GET_DATA: u8 = 2;
const C_GET_NAK: u8 = 3;
const C_PUT_START: u8 = 4;
const C_PUT_DATA: u8 = 5;
const C_PUT_ACK: u8 = 6;

fn truncate_text(s: &str) -> &str {
    let mut end = s.len().min(MAX_REPLY_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A reply the owner of a registration owes a copy-in/copy-out initiator.
#[derive(Debug)]
enum Reply {
    /// A put's acknowledgement, or a get's refusal (`C_PUT_ACK`/`C_GET_NAK`).
    Status {
        tag: u8,
        req: u64,
        error: Option<String>,
    },
    /// A get's data, streamed in chunks.
    Data {
        req: u64,
        region: MemRegion,
        sent: usize,
        started: bool,
    },
}

/// A put being received from a peer (copy-in/copy-out).
#[derive(Debug)]
struct IncomingPut {
    req: u64,
    target: Option<MemRegion>,
    len: usize,
    written: usize,
}

/// One peer's copy-in/copy-out work.
#[derive(Debug, Default)]
pub(super) struct PeerEmu {
    /// Initiator side: operations still to transmit.
    pub(super) outgoing: VecDeque<u64>,
    /// Owner side: replies still to send.
    replies: VecDeque<Reply>,
    /// Owner side: the put being received.
    incoming: Option<IncomingPut>,
}

impl PeerEmu {
    /// Whether something is still to send to the peer.
    pub(super) fn owes(&self) -> bool {
        !self.outgoing.is_empty() || !self.replies.is_empty()
    }

    /// Forgets what was still to send.
    pub(super) fn drop_queued(&mut self) {
        self.replies.clear();
        self.outgoing.clear();
    }

    /// Forgets everything (the peer is gone).
    pub(super) fn clear(&mut self) {
        self.outgoing.clear();
        self.replies.clear();
        self.incoming = None;
    }
}

/// A copy-in/copy-out operation of this initiator.
#[derive(Debug)]
pub(super) struct Op {
    /// The peer (its endpoint index).
    pub(super) peer: u32,
    /// Completes it.
    pub(super) token: Token,
    /// Our memory.
    pub(super) local: MemRegion,
    /// The owner's key.
    pub(super) key: RemoteKey,
    /// Where in the key's range.
    pub(super) offset: usize,
    /// A put (else a get).
    pub(super) put: bool,
    /// Its request was sent.
    pub(super) started: bool,
    /// Bytes sent (put) or received (get).
    pub(super) done: usize,
}

/// Operations by request id `generation << 32 | index`.
#[derive(Debug, Default)]
pub(super) struct Ops {
    slots: Vec<(u32, Option<Op>)>,
    free: Vec<u32>,
    /// Operations in flight.
    pub(super) live: usize,
}

impl Ops {
    /// Adds an operation; returns its request id.
    pub(super) fn insert(&mut self, op: Op) -> u64 {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.0 = slot.0.wrapping_add(1);
        slot.1 = Some(op);
        self.live += 1;
        u64::from(slot.0) << 32 | u64::from(index)
    }

    fn get_mut(&mut self, req: u64) -> Option<&mut Op> {
        let (gen, index) = ((req >> 32) as u32, req as u32);
        match self.slots.get_mut(index as usize) {
            Some((g, Some(op))) if *g == gen => Some(op),
            _ => None,
        }
    }

    fn remove(&mut self, req: u64) -> Option<Op> {
        let (gen, index) = ((req >> 32) as u32, req as u32);
        match self.slots.get_mut(index as usize) {
            Some((g, op @ Some(_))) if *g == gen => {
                self.free.push(index);
                self.live -= 1;
                op.take()
            }
            _ => None,
        }
    }

    /// Removes every operation towards `peer`.
    pub(super) fn drain_peer(&mut self, peer: u32, mut f: impl FnMut(Op)) {
        for (index, (_, slot)) in self.slots.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|op| op.peer == peer) {
                if let Some(op) = slot.take() {
                    self.free.push(index as u32);
                    self.live -= 1;
                    f(op);
                }
            }
        }
    }
}

/// Handles a CONTROL record from peer `i` (its work: `emu`). Returns
/// whether replies were queued.
#[allow(clippy::too_many_arguments)]
pub(super) fn on_control(
    emu: &mut PeerEmu,
    ops: &mut Ops,
    completions: &mut VecDeque<(Token, Result<(), BtlError>)>,
    regs: &Regs,
    pid: u32,
    i: usize,
    tag: u8,
    p: &[u8],
) -> bool {
    let u64_at = |at: usize| -> Option<u64> {
        p.get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let Some(req) = u64_at(0) else {
        tracing::debug!(tag, "sm: short control record ignored");
        return false;
    };
    match tag {
        C_GET_REQ | C_PUT_START => {
            let (Some(off), Some(len)) = (u64_at(8), u64_at(16)) else {
                tracing::debug!(tag, "sm: short control record ignored");
                return false;
            };
            let (off, len) = (
                usize::try_from(off).unwrap_or(usize::MAX),
                usize::try_from(len).unwrap_or(usize::MAX),
            );
            let key = &p[24..];
            if tag == C_GET_REQ {
                let reply = match regs.resolve(pid, key, off, len, ACCESS_READ) {
                    Ok(region) => Reply::Data {
                        req,
                        region,
                        sent: 0,
                        started: false,
                    },
                    Err(error) => Reply::Status {
                        tag: C_GET_NAK,
                        req,
                        error: Some(error),
                    },
                };
                emu.replies.push_back(reply);
                true
            } else {
                let target = regs.resolve(pid, key, off, len, ACCESS_WRITE);
                let (target, error) = match target {
                    Ok(r) => (Some(r), None),
                    Err(e) => (None, Some(e)),
                };
                let refused = error.is_some();
                if refused || len == 0 {
                    emu.replies.push_back(Reply::Status {
                        tag: C_PUT_ACK,
                        req,
                        error,
                    });
                }
                emu.incoming = (len > 0).then_some(IncomingPut {
                    req,
                    target,
                    len,
                    written: 0,
                });
                refused || len == 0
            }
        }
        C_PUT_DATA => {
            let data = &p[8..];
            let Some(inc) = emu.incoming.as_mut().filter(|inc| inc.req == req) else {
                tracing::debug!("sm: put data for no put in progress ignored");
                return false;
            };
            if inc.written + data.len() > inc.len {
                tracing::debug!("sm: put data past the announced length ignored");
                return false;
            }
            if let Some(target) = inc.target {
                target.write(inc.written, data);
            }
            inc.written += data.len();
            if inc.written == inc.len {
                let ok = inc.target.is_some();
                emu.incoming = None;
                if ok {
                    emu.replies.push_back(Reply::Status {
                        tag: C_PUT_ACK,
                        req,
                        error: None,
                    });
                    return true;
                }
            }
            false
        }
        C_GET_DATA => {
            let data = &p[8..];
            let Some(op) = ops.get_mut(req).filter(|op| op.peer == i as u32 && !op.put) else {
                tracing::debug!("sm: get data for no get in progress ignored");
                return false;
            };
            let result = if op.done + data.len() > op.local.len() {
                Some(Err(BtlError::Invalid(
                    "sm: get returned too much data".into(),
                )))
            } else {
                op.local.write(op.done, data);
                op.done += data.len();
                (op.done == op.local.len()).then_some(Ok(()))
            };
            if let Some(result) = result {
                if let Some(op) = ops.remove(req) {
                    completions.push_back((op.token, result));
                }
            }
            false
        }
        C_GET_NAK | C_PUT_ACK => {
            let Some(op) = ops.get_mut(req).filter(|op| op.peer == i as u32) else {
                tracing::debug!("sm: status for no operation in progress ignored");
                return false;
            };
            if op.put != (tag == C_PUT_ACK) {
                return false;
            }
            let result = match p.get(8) {
                Some(0) => Ok(()),
                _ => Err(BtlError::Invalid(format!(
                    "sm: {}",
                    String::from_utf8_lossy(p.get(9..).unwrap_or(&[]))
                ))),
            };
            if let Some(op) = ops.remove(req) {
                completions.push_back((op.token, result));
            }
            false
        }
        _ => {
            tracing::debug!(tag, "sm: unknown control record ignored");
            false
        }
    }
}

/// Sends what copy-in/copy-out owes a bound peer through `tx`, as far as
/// the ring has room; true when work remains.
pub(super) fn pump(tx: &mut RingProducer, emu: &mut PeerEmu, ops: &mut Ops) -> bool {
    let chunk = tx.max_payload() - 8;
    while let Some(reply) = emu.replies.front_mut() {
        match reply {
            Reply::Status { tag, req, error } => {
                let (code, text) = match error {
                    None => ([0u8], ""),
                    Some(t) => ([1u8], truncate_text(t)),
                };
                if tx
                    .try_send_control(*tag, &[&req.to_le_bytes(), &code, text.as_bytes()])
                    .is_err()
                {
                    return true;
                }
            }
            Reply::Data {
                req,
                region,
                sent,
                started,
            } => loop {
                let n = chunk.min(region.len() - *sent);
                if *started && n == 0 {
                    break;
                }
                let Ok(mut r) = tx.try_reserve(8 + n) else {
                    return true;
                };
                let p = r.payload_mut();
                p[..8].copy_from_slice(&req.to_le_bytes());
                copy_bytes(&mut p[8..], &region.read()[*sent..*sent + n]);
                r.commit_control(C_GET_DATA);
                *sent += n;
                *started = true;
            },
        }
        emu.replies.pop_front();
    }
    while let Some(&req) = emu.outgoing.front() {
        let Some(op) = ops.get_mut(req) else {
            emu.outgoing.pop_front();
            continue;
        };
        let len = op.local.len() as u64;
        if !op.started {
            let tag = if op.put { C_PUT_START } else { C_GET_REQ };
            let hdr = [
                req.to_le_bytes(),
                (op.offset as u64).to_le_bytes(),
                len.to_le_bytes(),
            ];
            if tx
                .try_send_control(tag, &[&hdr[0], &hdr[1], &hdr[2], op.key.as_bytes()])
                .is_err()
            {
                return true;
            }
            op.started = true;
        }
        if op.put {
            while op.done < op.local.len() {
                let n = chunk.min(op.local.len() - op.done);
                let Ok(mut r) = tx.try_reserve(8 + n) else {
                    return true;
                };
                let p = r.payload_mut();
                p[..8].copy_from_slice(&req.to_le_bytes());
                copy_bytes(&mut p[8..], &op.local.read()[op.done..op.done + n]);
                r.commit_control(C_PUT_DATA);
                op.done += n;
            }
        }
        emu.outgoing.pop_front();
    }
    false
}
