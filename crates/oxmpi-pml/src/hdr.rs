//! PML wire headers (seed 000): MATCH, RNDV, RGET, ACK, NACK, FRAG, PUT, FIN,
//! and CREDIT, CANCEL, CANCEL_ACK.
//!
//! Each fragment travels with the BTL active-message tag of its header type
//! ([`HdrType::am_tag`]), so the type is not repeated in the bytes. Layouts
//! are fixed and little-endian; [`Hdr::parse`] checks every length and every
//! enumerated value of bytes that come from a peer and answers an error,
//! never a panic (smoltcp's `new_checked` discipline). [`Hdr::emit`] writes
//! exactly [`Hdr::len`] bytes; the payload, if any, follows the header.
//!
//! ```text
//! MATCH (12)  ctx:u16 seq:u16 src:u32 tag:i32                      + data
//! RNDV  (32)  MATCH  flags:u16 pad:u16 msg_len:u64 send_req:u64     + first data
//! RGET  (33+k) RNDV  key_len:u8 key[key_len]                        (no data)
//! ACK   (32)  send_req:u64 recv_req:u64 send_offset:u64 send_len:u64
//! NACK  (20)  send_req:u64 recv_req:u64 error:i32
//! FRAG  (24)  recv_req:u64 send_req:u64 offset:u64                  + data
//! PUT   (33+k) send_req:u64 recv_req:u64 offset:u64 len:u64 key_len:u8 key
//! FIN   (24)  req:u64 size:u64 status:i32 nanos:u32
//! CREDIT (8)  bytes:u64
//! CANCEL (20) send_req:u64 ctx:u16 seq:u16 src:u32 tag:i32
//! CANCEL_ACK (12) send_req:u64 seq:u16 cancelled:u16
//! ```
//!
//! A MATCH header is 12 bytes so that, behind an 8-byte ring header, 44
//! bytes of user data still fit in one 64-byte cache line.
//!
//! Request references ([`ReqRef`]) are a slab index and a generation: the
//! side that issued one validates it when it comes back, so a stale or forged
//! reference is detected as an error, never used.

use oxmpi_btl::btl::{AmTag, RemoteKey};

/// Header types, one per active-message tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum HdrType {
    /// Eager message: envelope and the whole payload.
    Match = 64,
    /// Rendezvous: envelope, total length, first fragment of data.
    Rndv = 65,
    /// Rendezvous for RDMA get: envelope and the sender's remote key.
    Rget = 66,
    /// Receiver to sender: matched; send the rest from `send_offset`.
    Ack = 67,
    /// Receiver to sender: the proposed protocol failed.
    Nack = 68,
    /// A fragment of the send/receive pipeline.
    Frag = 69,
    /// Receiver to sender: put this range into my registered memory.
    Put = 70,
    /// RDMA done (or failed): completes the peer's side.
    Fin = 71,
    /// Receiver to sender: eager bytes consumed, credit returned.
    Credit = 72,
    /// Sender to receiver: drop my unmatched rendezvous if you still can.
    Cancel = 73,
    /// Receiver to sender: whether the rendezvous was dropped.
    CancelAck = 74,
}

impl HdrType {
    /// The BTL active-message tag that carries this header type.
    pub const fn am_tag(self) -> AmTag {
        AmTag(self as u8)
    }

    /// The header type of an active-message tag.
    pub fn from_am_tag(tag: AmTag) -> Option<HdrType> {
        Some(match tag.0 {
            64 => HdrType::Match,
            65 => HdrType::Rndv,
            66 => HdrType::Rget,
            67 => HdrType::Ack,
            68 => HdrType::Nack,
            69 => HdrType::Frag,
            70 => HdrType::Put,
            71 => HdrType::Fin,
            72 => HdrType::Credit,
            73 => HdrType::Cancel,
            74 => HdrType::CancelAck,
            _ => return None,
        })
    }
}

/// A reference to a request of the side that issued it: slab index and
/// generation, validated by that side when it comes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ReqRef {
    /// Slab index.
    pub index: u32,
    /// Generation of the slot when the reference was issued.
    pub generation: u32,
}

impl ReqRef {
    /// Packs into the wire form.
    pub const fn to_u64(self) -> u64 {
        (self.generation as u64) << 32 | self.index as u64
    }

    /// Unpacks the wire form.
    pub const fn from_u64(v: u64) -> ReqRef {
        ReqRef {
            index: v as u32,
            generation: (v >> 32) as u32,
        }
    }
}

/// The envelope carried by MATCH, RNDV and RGET.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatchHdr {
    /// Communicator context id.
    pub ctx: u16,
    /// Per-(context, sender) sequence number.
    pub seq: u16,
    /// Sender's rank in the communicator.
    pub src: u32,
    /// MPI tag (negative tags are internal).
    pub tag: i32,
}

impl MatchHdr {
    /// The wire form (the MATCH header: [`MATCH_LEN`] bytes).
    #[inline]
    pub fn to_bytes(&self) -> [u8; MATCH_LEN] {
        // The first three fields as one word: two stores on the hot path
        // where four field-wide ones were.
        let mut b = [0u8; MATCH_LEN];
        b[0..8].copy_from_slice(&self.first_word().to_le_bytes());
        b[8..12].copy_from_slice(&self.tag.to_le_bytes());
        b
    }

    /// The wire form's first 8 bytes (context, sequence number, source) as
    /// a little-endian word; the tag follows.
    #[inline(always)]
    pub fn first_word(&self) -> u64 {
        u64::from(self.ctx) | u64::from(self.seq) << 16 | u64::from(self.src) << 32
    }

    /// Reads the fixed part of a MATCH fragment: the header and the
    /// payload after it, or `None` when `bytes` is too short. (The hot
    /// path's shortcut for what [`Hdr::parse`] does for every type.)
    #[inline]
    pub fn read(bytes: &[u8]) -> Option<(MatchHdr, &[u8])> {
        let (h, payload) = bytes.split_first_chunk::<MATCH_LEN>()?;
        let m = MatchHdr {
            ctx: u16::from_le_bytes([h[0], h[1]]),
            seq: u16::from_le_bytes([h[2], h[3]]),
            src: u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
            tag: i32::from_le_bytes([h[8], h[9], h[10], h[11]]),
        };
        Some((m, payload))
    }
}

/// Rendezvous flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RndvFlags(pub u16);

impl RndvFlags {
    /// The send buffer is contiguous.
    pub const CONTIG: u16 = 1;
    /// The sender registered its buffer (RDMA direct).
    pub const PIN: u16 = 2;
    /// Synchronous send: completion waits for the match.
    pub const SYNC: u16 = 4;
    /// Every defined bit.
    pub const ALL: u16 = Self::CONTIG | Self::PIN | Self::SYNC;

    /// Whether `bit` is set.
    pub const fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }
}

/// A rendezvous header (RNDV, and the first part of RGET).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RndvHdr {
    /// The envelope.
    pub m: MatchHdr,
    /// Flags.
    pub flags: RndvFlags,
    /// Total message length in bytes.
    pub msg_len: u64,
    /// The sender's request.
    pub send_req: ReqRef,
}

/// One parsed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hdr {
    /// Eager message.
    Match(MatchHdr),
    /// Rendezvous.
    Rndv(RndvHdr),
    /// Rendezvous for RDMA get, with the sender's key.
    Rget(RndvHdr, RemoteKey),
    /// Matched; send from `send_offset`, `send_len` bytes by send/receive
    /// (the rest, if any, the receiver schedules by RDMA).
    Ack {
        /// The sender's request.
        send_req: ReqRef,
        /// The receiver's request.
        recv_req: ReqRef,
        /// Where the send/receive part starts.
        send_offset: u64,
        /// How many bytes go by send/receive from there.
        send_len: u64,
    },
    /// The proposed protocol failed with an MPI error class.
    Nack {
        /// The sender's request.
        send_req: ReqRef,
        /// The receiver's request.
        recv_req: ReqRef,
        /// MPI error class.
        error: i32,
    },
    /// A pipeline fragment at `offset`.
    Frag {
        /// The receiver's request.
        recv_req: ReqRef,
        /// The sender's request.
        send_req: ReqRef,
        /// Byte offset of the data in the message.
        offset: u64,
    },
    /// Put `len` bytes at message `offset` into the receiver's `key`.
    Put {
        /// The sender's request.
        send_req: ReqRef,
        /// The receiver's request.
        recv_req: ReqRef,
        /// Offset in the message.
        offset: u64,
        /// Length of this put.
        len: u64,
        /// The receiver's registered memory.
        key: RemoteKey,
    },
    /// RDMA of `size` bytes finished with `status` (0 = success).
    Fin {
        /// The request this completes, on the receiving side of the FIN.
        req: ReqRef,
        /// Bytes transferred.
        size: u64,
        /// 0, or an MPI error class.
        status: i32,
        /// How long the sender's PUT of these bytes took, nanoseconds (0:
        /// not a put, or not measured): the receiver balances the next
        /// split transfers with it.
        nanos: u32,
    },
    /// Eager credit returned to the sender: `bytes` of its eager traffic
    /// on context `ctx` have left the receiver's unexpected queue.
    Credit {
        /// Bytes of credit returned.
        bytes: u64,
    },
    /// The sender cancels its rendezvous `send_req` (envelope `ctx`, `src`,
    /// `tag`, so the receiver finds it among its unexpected messages; `seq`,
    /// so a persistent request's late CANCEL never hits its next round).
    Cancel {
        /// The sender's request.
        send_req: ReqRef,
        /// Communicator context id.
        ctx: u16,
        /// The rendezvous' sequence number.
        seq: u16,
        /// Sender's rank in the communicator.
        src: u32,
        /// MPI tag.
        tag: i32,
    },
    /// The receiver's answer to a CANCEL.
    CancelAck {
        /// The sender's request.
        send_req: ReqRef,
        /// The sequence number the CANCEL named.
        seq: u16,
        /// The message was still unmatched and is gone.
        cancelled: bool,
    },
}

/// Why bytes from a peer are not a valid header.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HdrError {
    /// The active-message tag is not a PML header type.
    #[error("unknown header tag {0}")]
    UnknownTag(u8),
    /// Fewer bytes than the header needs.
    #[error("{kind:?} header truncated: {got} bytes, need {need}")]
    Truncated {
        /// Header type.
        kind: HdrType,
        /// Bytes present.
        got: usize,
        /// Bytes needed.
        need: usize,
    },
    /// Undefined flag bits.
    #[error("undefined rendezvous flags {0:#x}")]
    BadFlags(u16),
    /// A remote key longer than any BTL uses.
    #[error("remote key of {0} bytes exceeds the maximum")]
    BadKey(usize),
}

/// Fixed header lengths.
pub const MATCH_LEN: usize = 12;
/// RNDV header length.
pub const RNDV_LEN: usize = 32;
/// ACK header length.
pub const ACK_LEN: usize = 32;
/// NACK header length.
pub const NACK_LEN: usize = 20;
/// FRAG header length.
pub const FRAG_LEN: usize = 24;
/// FIN header length.
pub const FIN_LEN: usize = 24;
/// CREDIT header length.
pub const CREDIT_LEN: usize = 8;
/// CANCEL header length.
pub const CANCEL_LEN: usize = 20;
/// CANCEL_ACK header length.
pub const CANCEL_ACK_LEN: usize = 12;
/// PUT header length without the key.
pub const PUT_FIXED_LEN: usize = 33;
/// The largest header (RGET or PUT with the largest key).
pub const MAX_LEN: usize = RNDV_LEN + 1 + RemoteKey::MAX;

/// A bounds-checked little-endian reader.
struct Rd<'a> {
    b: &'a [u8],
    at: usize,
}

impl Rd<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.b[self.at..self.at + N]);
        self.at += N;
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn req(&mut self) -> ReqRef {
        ReqRef::from_u64(self.u64())
    }
}

/// A little-endian writer into a slice of exactly the right length.
struct Wr<'a> {
    b: &'a mut [u8],
    at: usize,
}

impl Wr<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.b[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }
    fn u16(&mut self, v: u16) {
        self.put(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.put(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.put(&v.to_le_bytes());
    }
    fn req(&mut self, r: ReqRef) {
        self.u64(r.to_u64());
    }
}

fn need(kind: HdrType, b: &[u8], n: usize) -> Result<(), HdrError> {
    if b.len() < n {
        Err(HdrError::Truncated {
            kind,
            got: b.len(),
            need: n,
        })
    } else {
        Ok(())
    }
}

fn parse_match(r: &mut Rd<'_>) -> MatchHdr {
    let (m, _) = MatchHdr::read(&r.take::<MATCH_LEN>()).expect("MATCH_LEN bytes");
    m
}

fn parse_rndv(r: &mut Rd<'_>) -> Result<RndvHdr, HdrError> {
    let m = parse_match(r);
    let flags = r.u16();
    let _pad = r.u16();
    if flags & !RndvFlags::ALL != 0 {
        return Err(HdrError::BadFlags(flags));
    }
    Ok(RndvHdr {
        m,
        flags: RndvFlags(flags),
        msg_len: r.u64(),
        send_req: r.req(),
    })
}

/// Reads `key_len` and the key that follows at the reader's position.
fn parse_key(kind: HdrType, b: &[u8], r: &mut Rd<'_>) -> Result<RemoteKey, HdrError> {
    let n = usize::from(r.u8());
    if n > RemoteKey::MAX {
        return Err(HdrError::BadKey(n));
    }
    need(kind, b, r.at + n)?;
    let key = RemoteKey::new(&b[r.at..r.at + n]).ok_or(HdrError::BadKey(n))?;
    r.at += n;
    Ok(key)
}

impl Hdr {
    /// The header's type.
    pub fn kind(&self) -> HdrType {
        match self {
            Hdr::Match(_) => HdrType::Match,
            Hdr::Rndv(_) => HdrType::Rndv,
            Hdr::Rget(..) => HdrType::Rget,
            Hdr::Ack { .. } => HdrType::Ack,
            Hdr::Nack { .. } => HdrType::Nack,
            Hdr::Frag { .. } => HdrType::Frag,
            Hdr::Put { .. } => HdrType::Put,
            Hdr::Fin { .. } => HdrType::Fin,
            Hdr::Credit { .. } => HdrType::Credit,
            Hdr::Cancel { .. } => HdrType::Cancel,
            Hdr::CancelAck { .. } => HdrType::CancelAck,
        }
    }

    /// Encoded length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Hdr::Match(_) => MATCH_LEN,
            Hdr::Rndv(_) => RNDV_LEN,
            Hdr::Rget(_, k) => RNDV_LEN + 1 + k.as_bytes().len(),
            Hdr::Ack { .. } => ACK_LEN,
            Hdr::Nack { .. } => NACK_LEN,
            Hdr::Frag { .. } => FRAG_LEN,
            Hdr::Put { key, .. } => PUT_FIXED_LEN + key.as_bytes().len(),
            Hdr::Fin { .. } => FIN_LEN,
            Hdr::Credit { .. } => CREDIT_LEN,
            Hdr::Cancel { .. } => CANCEL_LEN,
            Hdr::CancelAck { .. } => CANCEL_ACK_LEN,
        }
    }

    /// Never true: every header has bytes (for clippy's `len` convention).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Parses the header at the start of `bytes`, which arrived with `tag`.
    /// Returns the header and the payload that follows it.
    pub fn parse(tag: AmTag, bytes: &[u8]) -> Result<(Hdr, &[u8]), HdrError> {
        let kind = HdrType::from_am_tag(tag).ok_or(HdrError::UnknownTag(tag.0))?;
        let fixed = match kind {
            HdrType::Match => MATCH_LEN,
            HdrType::Rndv => RNDV_LEN,
            HdrType::Rget => RNDV_LEN + 1,
            HdrType::Ack => ACK_LEN,
            HdrType::Nack => NACK_LEN,
            HdrType::Frag => FRAG_LEN,
            HdrType::Put => PUT_FIXED_LEN,
            HdrType::Fin => FIN_LEN,
            HdrType::Credit => CREDIT_LEN,
            HdrType::Cancel => CANCEL_LEN,
            HdrType::CancelAck => CANCEL_ACK_LEN,
        };
        need(kind, bytes, fixed)?;
        let mut r = Rd { b: bytes, at: 0 };
        let hdr = match kind {
            HdrType::Match => Hdr::Match(parse_match(&mut r)),
            HdrType::Rndv => Hdr::Rndv(parse_rndv(&mut r)?),
            HdrType::Rget => {
                let h = parse_rndv(&mut r)?;
                Hdr::Rget(h, parse_key(kind, bytes, &mut r)?)
            }
            HdrType::Ack => Hdr::Ack {
                send_req: r.req(),
                recv_req: r.req(),
                send_offset: r.u64(),
                send_len: r.u64(),
            },
            HdrType::Nack => Hdr::Nack {
                send_req: r.req(),
                recv_req: r.req(),
                error: r.i32(),
            },
            HdrType::Frag => Hdr::Frag {
                recv_req: r.req(),
                send_req: r.req(),
                offset: r.u64(),
            },
            HdrType::Put => {
                let (send_req, recv_req, offset, len) = (r.req(), r.req(), r.u64(), r.u64());
                let key = parse_key(kind, bytes, &mut r)?;
                Hdr::Put {
                    send_req,
                    recv_req,
                    offset,
                    len,
                    key,
                }
            }
            HdrType::Fin => Hdr::Fin {
                req: r.req(),
                size: r.u64(),
                status: r.i32(),
                nanos: r.u32(),
            },
            HdrType::Credit => Hdr::Credit { bytes: r.u64() },
            HdrType::Cancel => {
                let send_req = r.req();
                let MatchHdr { ctx, seq, src, tag } = parse_match(&mut r);
                Hdr::Cancel {
                    send_req,
                    ctx,
                    seq,
                    src,
                    tag,
                }
            }
            HdrType::CancelAck => Hdr::CancelAck {
                send_req: r.req(),
                seq: r.u16(),
                cancelled: r.u16() != 0,
            },
        };
        let at = r.at;
        Ok((hdr, &bytes[at..]))
    }

    /// Writes the header into the first [`Hdr::len`] bytes of `out` and
    /// returns that length.
    ///
    /// # Panics
    /// When `out` is shorter than [`Hdr::len`] (a caller bug).
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let n = self.len();
        let mut w = Wr {
            b: &mut out[..n],
            at: 0,
        };
        let emit_match = |w: &mut Wr<'_>, m: &MatchHdr| w.put(&m.to_bytes());
        let emit_rndv = |w: &mut Wr<'_>, h: &RndvHdr| {
            emit_match(w, &h.m);
            w.u16(h.flags.0);
            w.u16(0);
            w.u64(h.msg_len);
            w.req(h.send_req);
        };
        match self {
            Hdr::Match(m) => emit_match(&mut w, m),
            Hdr::Rndv(h) => emit_rndv(&mut w, h),
            Hdr::Rget(h, k) => {
                emit_rndv(&mut w, h);
                w.put(&[k.as_bytes().len() as u8]);
                w.put(k.as_bytes());
            }
            Hdr::Ack {
                send_req,
                recv_req,
                send_offset,
                send_len,
            } => {
                w.req(*send_req);
                w.req(*recv_req);
                w.u64(*send_offset);
                w.u64(*send_len);
            }
            Hdr::Nack {
                send_req,
                recv_req,
                error,
            } => {
                w.req(*send_req);
                w.req(*recv_req);
                w.i32(*error);
            }
            Hdr::Frag {
                recv_req,
                send_req,
                offset,
            } => {
                w.req(*recv_req);
                w.req(*send_req);
                w.u64(*offset);
            }
            Hdr::Put {
                send_req,
                recv_req,
                offset,
                len,
                key,
            } => {
                w.req(*send_req);
                w.req(*recv_req);
                w.u64(*offset);
                w.u64(*len);
                w.put(&[key.as_bytes().len() as u8]);
                w.put(key.as_bytes());
            }
            Hdr::Fin {
                req,
                size,
                status,
                nanos,
            } => {
                w.req(*req);
                w.u64(*size);
                w.i32(*status);
                w.u32(*nanos);
            }
            Hdr::Credit { bytes } => w.u64(*bytes),
            Hdr::Cancel {
                send_req,
                ctx,
                seq,
                src,
                tag,
            } => {
                w.req(*send_req);
                let m = MatchHdr {
                    ctx: *ctx,
                    seq: *seq,
                    src: *src,
                    tag: *tag,
                };
                emit_match(&mut w, &m);
            }
            Hdr::CancelAck {
                send_req,
                seq,
                cancelled,
            } => {
                w.req(*send_req);
                w.u16(*seq);
                w.u16(u16::from(*cancelled));
            }
        }
        debug_assert_eq!(w.at, n);
        n
    }
}
