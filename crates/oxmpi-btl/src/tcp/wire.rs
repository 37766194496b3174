//! What the TCP BTL puts on the wire and in the modex: the business card,
//! the connection handshake and the fragment framing. Every decoder takes
//! untrusted bytes and checks every bound: malformed input is an error,
//! never a panic. All integers are little-endian; IPv4 addresses are their
//! four octets in network order.
//!
//! # Business card (`OXTC`, version 3)
//!
//! ```text
//! offset size  field
//!  0      4    magic "OXTC"
//!  4      1    version (3; one version number for the card, the
//!              handshake and the framing)
//!  5      1    n: number of entries (1..=255)
//!  6      2    reserved, 0
//!  8      4    rank (u32)
//! 12   12*n    entries, each:
//!               0  1  family (4 = IPv4)
//!               1  1  prefix length of the interface's network (0..=32)
//!               2  1  link number (0..btl_tcp_links)
//!               3  1  interface ordinal (index among this process's
//!                     selected interfaces)
//!               4  4  IPv4 address
//!               8  2  port (u16)
//!              10  2  reserved, 0
//! ```
//!
//! One entry per module (interface x link) of the process: every module of
//! a process publishes the same card, so the layer above may publish any
//! one of them under the key `tcp`.
//!
//! # Handshake (36 bytes each way)
//!
//! ```text
//!  0  4  magic "OXTH"
//!  4  1  version (3)
//!  5  1  kind: 1 = HELLO (connector), 2 = ACCEPT, 3 = DECLINE (acceptor)
//!  6  2  reserved, 0
//!  8 16  the job's secret
//! 24  4  sender's rank
//! 28  4  receiver's rank
//! 32  1  sender's card entry
//! 33  1  receiver's card entry
//! 34  2  reserved, 0
//! ```
//!
//! # Fragment frame
//!
//! ```text
//!  0  4  payload length (u32); for data at most the receiver's largest
//!         fragment
//!  4  1  active-message tag
//!  5  1  kind: 0 = data, 1 = PUT
//!  6  1  lead: padding bytes between this header and the payload (0..=63)
//!  7  1  trail: padding bytes after the payload (0..=63)
//!  8  .. `lead` bytes of padding, the payload, `trail` bytes of padding
//! ```
//!
//! The padding is the sender's choice and carries nothing. It places a
//! large payload at the same offset modulo 64 from the frame's start as in
//! the sender's memory, and ends the frame on a multiple of 64. A frame that
//! starts a write (the kernel starts its socket pages there) or follows
//! padded frames then has its payload at the sender's alignment in the
//! kernel's pages and in the receiver's buffer, so the copies run between
//! equally aligned addresses: a copy whose destination lies a few bytes past
//! its source modulo 4 KiB runs at a fraction of its speed here (see
//! `mem::copy_bytes`). Unpadded frames (the handshake, small ones) shift
//! the frames after them; that costs speed, never correctness.
//!
//! A PUT payload is a 24-byte put header (registration id u32, nonce u64,
//! offset u64, sequence u32) and the data. A put is not acknowledged: it is
//! done for its sender once written, its data lands before the frames that
//! follow it on the connection, and a put the target refuses is reported
//! there (wire version 3; version 2 acknowledged every put).

use std::net::Ipv4Addr;

use crate::btl::BtlError;

/// Length of a fragment header.
pub const FRAME_HDR_LEN: usize = 8;
/// Length of a handshake message.
pub const HS_LEN: usize = 36;
/// Length of the card's fixed header.
pub const CARD_HDR_LEN: usize = 12;
/// Length of one card entry.
pub const CARD_ENTRY_LEN: usize = 12;

const CARD_MAGIC: &[u8; 4] = b"OXTC";
const HS_MAGIC: &[u8; 4] = b"OXTH";
const VERSION: u8 = 3;
const FAMILY_IPV4: u8 = 4;
/// An ordinary fragment for a PML handler.
pub const KIND_DATA: u8 = 0;
/// A frame whose payload is a put header and data for registered memory.
pub const KIND_PUT: u8 = 1;
/// Bytes of a put header: registration id (u32), nonce (u64), offset (u64),
/// sequence number (u32).
pub const PUT_HDR_LEN: usize = 24;
/// Bytes of a tcp remote key: magic, id (u32), nonce (u64), base (u64),
/// length (u64).
pub const KEY_LEN: usize = 32;
const KEY_MAGIC: &[u8; 4] = b"OXTK";

/// One listening address of a process: one module (interface x link).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CardEntry {
    /// The interface's IPv4 address (the listener is bound to it).
    pub addr: Ipv4Addr,
    /// Prefix length of the interface's network.
    pub prefix_len: u8,
    /// The listener's port.
    pub port: u16,
    /// Link number, `0..btl_tcp_links`.
    pub link: u8,
    /// Interface ordinal among the process's selected interfaces.
    pub iface: u8,
}

impl CardEntry {
    /// Whether the address is a loopback address (`127.0.0.0/8`).
    pub fn is_loopback(&self) -> bool {
        self.addr.is_loopback()
    }
}

/// A decoded business card: a rank and the addresses it listens on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Card {
    /// The rank that published it.
    pub rank: u32,
    /// One entry per module of that rank.
    pub entries: Vec<CardEntry>,
}

impl Card {
    /// The wire form (see the module doc).
    ///
    /// # Panics
    /// With more than 255 entries (`open_all` refuses to build that many).
    pub fn encode(&self) -> Vec<u8> {
        let n = u8::try_from(self.entries.len()).expect("at most 255 card entries");
        let mut out = Vec::with_capacity(CARD_HDR_LEN + CARD_ENTRY_LEN * self.entries.len());
        out.extend_from_slice(CARD_MAGIC);
        out.push(VERSION);
        out.push(n);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.rank.to_le_bytes());
        for e in &self.entries {
            out.push(FAMILY_IPV4);
            out.push(e.prefix_len);
            out.push(e.link);
            out.push(e.iface);
            out.extend_from_slice(&e.addr.octets());
            out.extend_from_slice(&e.port.to_le_bytes());
            out.extend_from_slice(&[0, 0]);
        }
        out
    }

    /// Decodes a card from untrusted bytes.
    pub fn decode(b: &[u8]) -> Result<Card, BtlError> {
        let bad = |why: &str| BtlError::Invalid(format!("malformed tcp business card: {why}"));
        if b.len() < CARD_HDR_LEN {
            return Err(bad("too short"));
        }
        if &b[0..4] != CARD_MAGIC {
            return Err(bad("bad magic"));
        }
        if b[4] != VERSION {
            return Err(bad(&format!("unknown version {}", b[4])));
        }
        let n = usize::from(b[5]);
        if n == 0 {
            return Err(bad("no address"));
        }
        if b[6..8] != [0, 0] {
            return Err(bad("reserved bytes set"));
        }
        let rank = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        if b.len() != CARD_HDR_LEN + n * CARD_ENTRY_LEN {
            return Err(bad(&format!(
                "{} bytes for {n} entries (expected {})",
                b.len(),
                CARD_HDR_LEN + n * CARD_ENTRY_LEN
            )));
        }
        let mut entries = Vec::with_capacity(n);
        for e in b[CARD_HDR_LEN..].chunks_exact(CARD_ENTRY_LEN) {
            if e[0] != FAMILY_IPV4 {
                return Err(bad(&format!("unknown address family {}", e[0])));
            }
            if e[1] > 32 {
                return Err(bad(&format!("prefix length {}", e[1])));
            }
            if e[10..12] != [0, 0] {
                return Err(bad("reserved entry bytes set"));
            }
            entries.push(CardEntry {
                addr: Ipv4Addr::new(e[4], e[5], e[6], e[7]),
                prefix_len: e[1],
                port: u16::from_le_bytes([e[8], e[9]]),
                link: e[2],
                iface: e[3],
            });
        }
        Ok(Card { rank, entries })
    }
}

/// The network of `addr` with a prefix of `prefix_len` bits.
pub fn network(addr: Ipv4Addr, prefix_len: u8) -> u32 {
    let mask = if prefix_len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix_len.min(32)))
    };
    u32::from(addr) & mask
}

fn same_subnet(a: &CardEntry, b: &CardEntry) -> bool {
    let p = a.prefix_len.min(b.prefix_len);
    network(a.addr, p) == network(b.addr, p)
}

/// Which module of the lower-ranked process connects with which module of
/// the higher-ranked one: `(index in low.entries, index in high.entries)`.
///
/// Both processes compute it from the same two cards, so both agree and
/// each module has at most one partner. Per link number, in card order:
/// first pairs on a common subnet (loopback with loopback only when the
/// two processes share a node, `local`), then the remaining non-loopback
/// entries pairwise (routed). Entries left over reach nothing.
pub fn pair_entries(low: &Card, high: &Card, local: bool) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    let mut used_low = vec![false; low.entries.len()];
    let mut used_high = vec![false; high.entries.len()];
    let mut links: Vec<u8> = low.entries.iter().map(|e| e.link).collect();
    links.sort_unstable();
    links.dedup();
    for link in links {
        // Pass 1: a common subnet.
        for (i, l) in low.entries.iter().enumerate() {
            if l.link != link || used_low[i] {
                continue;
            }
            for (j, h) in high.entries.iter().enumerate() {
                if h.link != link || used_high[j] {
                    continue;
                }
                let lo_ok = match (l.is_loopback(), h.is_loopback()) {
                    (true, true) => local,
                    (false, false) => true,
                    _ => false,
                };
                if lo_ok && same_subnet(l, h) {
                    used_low[i] = true;
                    used_high[j] = true;
                    pairs.push((i, j));
                    break;
                }
            }
        }
        // Pass 2: routed, non-loopback only.
        for (i, l) in low.entries.iter().enumerate() {
            if l.link != link || used_low[i] || l.is_loopback() {
                continue;
            }
            let found = high
                .entries
                .iter()
                .enumerate()
                .find(|(j, h)| h.link == link && !used_high[*j] && !h.is_loopback());
            if let Some((j, _)) = found {
                used_low[i] = true;
                used_high[j] = true;
                pairs.push((i, j));
            }
        }
    }
    pairs
}

/// The kind of a handshake message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HsKind {
    /// The connector's greeting.
    Hello,
    /// The acceptor keeps this connection.
    Accept,
    /// The acceptor keeps another connection with this peer; this one
    /// closes without having carried any fragment.
    Decline,
}

/// A handshake message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handshake {
    /// Its kind.
    pub kind: HsKind,
    /// The job's secret.
    pub secret: [u8; 16],
    /// The sender's rank.
    pub from_rank: u32,
    /// The rank it is meant for.
    pub to_rank: u32,
    /// The sender's card entry.
    pub from_entry: u8,
    /// The receiver's card entry.
    pub to_entry: u8,
}

impl Handshake {
    /// The wire form.
    pub fn encode(&self) -> [u8; HS_LEN] {
        let mut b = [0u8; HS_LEN];
        b[0..4].copy_from_slice(HS_MAGIC);
        b[4] = VERSION;
        b[5] = match self.kind {
            HsKind::Hello => 1,
            HsKind::Accept => 2,
            HsKind::Decline => 3,
        };
        b[8..24].copy_from_slice(&self.secret);
        b[24..28].copy_from_slice(&self.from_rank.to_le_bytes());
        b[28..32].copy_from_slice(&self.to_rank.to_le_bytes());
        b[32] = self.from_entry;
        b[33] = self.to_entry;
        b
    }

    /// Decodes a handshake message (the secret is *not* checked here).
    pub fn decode(b: &[u8; HS_LEN]) -> Result<Handshake, String> {
        if &b[0..4] != HS_MAGIC {
            return Err("bad handshake magic".into());
        }
        if b[4] != VERSION {
            return Err(format!("unknown handshake version {}", b[4]));
        }
        let kind = match b[5] {
            1 => HsKind::Hello,
            2 => HsKind::Accept,
            3 => HsKind::Decline,
            k => return Err(format!("unknown handshake kind {k}")),
        };
        if b[6..8] != [0, 0] || b[34..36] != [0, 0] {
            return Err("reserved handshake bytes set".into());
        }
        let mut secret = [0u8; 16];
        secret.copy_from_slice(&b[8..24]);
        Ok(Handshake {
            kind,
            secret,
            from_rank: u32::from_le_bytes([b[24], b[25], b[26], b[27]]),
            to_rank: u32::from_le_bytes([b[28], b[29], b[30], b[31]]),
            from_entry: b[32],
            to_entry: b[33],
        })
    }
}

/// Compares two secrets in time independent of where they differ.
pub fn secret_eq(a: &[u8; 16], b: &[u8; 16]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// Most padding bytes on either side of a frame's payload.
pub const MAX_PAD: usize = 63;

/// A decoded fragment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Payload bytes (without padding).
    pub len: usize,
    /// Active-message tag.
    pub tag: u8,
    /// `KIND_DATA` or `KIND_PUT`.
    pub kind: u8,
    /// Padding bytes before the payload.
    pub lead: usize,
    /// Padding bytes after the payload.
    pub trail: usize,
}

/// `h` with `lead` and `trail` padding bytes announced (each at most
/// [`MAX_PAD`]).
pub fn with_pads(mut h: [u8; FRAME_HDR_LEN], lead: usize, trail: usize) -> [u8; FRAME_HDR_LEN] {
    debug_assert!(lead <= MAX_PAD && trail <= MAX_PAD);
    h[6] = lead as u8;
    h[7] = trail as u8;
    h
}

/// A fragment header for `len` payload bytes to handler `tag`.
pub fn frame_header(len: usize, tag: u8) -> [u8; FRAME_HDR_LEN] {
    frame_header_kind(len, tag, KIND_DATA)
}

/// A frame header of any kind (`len` fits u32: checked by the caller).
pub fn frame_header_kind(len: usize, tag: u8, kind: u8) -> [u8; FRAME_HDR_LEN] {
    let len = u32::try_from(len).expect("fragment length fits u32 (checked by the caller)");
    let l = len.to_le_bytes();
    [l[0], l[1], l[2], l[3], tag, kind, 0, 0]
}

/// Decodes a frame header of any kind from untrusted bytes. Data and
/// acknowledgement frames are bounded by `max_len`; a put frame (whose data
/// lands in registered memory, not in a buffer) only by the u32 length and
/// its header.
pub fn parse_frame(h: &[u8], max_len: usize) -> Result<Frame, String> {
    let hb: &[u8; FRAME_HDR_LEN] = h
        .get(..FRAME_HDR_LEN)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| "short fragment header".to_owned())?;
    let f = Frame {
        len: u32::from_le_bytes([hb[0], hb[1], hb[2], hb[3]]) as usize,
        tag: hb[4],
        kind: hb[5],
        lead: usize::from(hb[6]),
        trail: usize::from(hb[7]),
    };
    if f.lead > MAX_PAD || f.trail > MAX_PAD {
        return Err(format!(
            "fragment padding {}+{} past {MAX_PAD}",
            f.lead, f.trail
        ));
    }
    match f.kind {
        KIND_PUT => {
            if f.len < PUT_HDR_LEN {
                return Err(format!("put frame of {} bytes has no put header", f.len));
            }
        }
        KIND_DATA => {
            if f.len > max_len {
                return Err(format!(
                    "fragment of {} bytes exceeds this rank's largest fragment ({max_len} bytes; \
                     do the btl_tcp limits differ between ranks?)",
                    f.len
                ));
            }
        }
        k => return Err(format!("unknown fragment kind {k}")),
    }
    Ok(f)
}

/// A put header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutHdr {
    /// The target's registration.
    pub id: u32,
    /// The registration's nonce (a stale or forged key does not match).
    pub nonce: u64,
    /// Where in the registered region the data goes.
    pub offset: u64,
    /// The put's number on this connection, echoed by the acknowledgement.
    pub seq: u32,
}

impl PutHdr {
    /// Wire form.
    pub fn encode(&self) -> [u8; PUT_HDR_LEN] {
        let mut b = [0u8; PUT_HDR_LEN];
        b[0..4].copy_from_slice(&self.id.to_le_bytes());
        b[4..12].copy_from_slice(&self.nonce.to_le_bytes());
        b[12..20].copy_from_slice(&self.offset.to_le_bytes());
        b[20..24].copy_from_slice(&self.seq.to_le_bytes());
        b
    }

    /// From untrusted bytes (`None` when short).
    pub fn decode(b: &[u8]) -> Option<PutHdr> {
        let b = b.get(..PUT_HDR_LEN)?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        Some(PutHdr {
            id: u32_at(0),
            nonce: u64_at(4),
            offset: u64_at(12),
            seq: u32_at(20),
        })
    }
}

/// A tcp remote key: `(id, nonce, base, length)`: the part `[base,
/// base+length)` of registration `id` (the whole of it, or a part from
/// `sub_key`).
pub fn encode_key(id: u32, nonce: u64, base: u64, len: u64) -> [u8; KEY_LEN] {
    let mut b = [0u8; KEY_LEN];
    b[..4].copy_from_slice(KEY_MAGIC);
    b[4..8].copy_from_slice(&id.to_le_bytes());
    b[8..16].copy_from_slice(&nonce.to_le_bytes());
    b[16..24].copy_from_slice(&base.to_le_bytes());
    b[24..32].copy_from_slice(&len.to_le_bytes());
    b
}

/// Decodes a remote key given to `put` (`None`: not a tcp key):
/// `(id, nonce, base, length)`.
pub fn decode_key(b: &[u8]) -> Option<(u32, u64, u64, u64)> {
    if b.len() != KEY_LEN || &b[..4] != KEY_MAGIC {
        return None;
    }
    let u64_at = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    Some((
        u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        u64_at(8),
        u64_at(16),
        u64_at(24),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(a: [u8; 4], p: u8, link: u8, iface: u8) -> CardEntry {
        CardEntry {
            addr: Ipv4Addr::from(a),
            prefix_len: p,
            port: 1000 + u16::from(iface),
            link,
            iface,
        }
    }

    #[test]
    fn card_roundtrip_and_rejects() {
        let c = Card {
            rank: 7,
            entries: vec![
                entry([10, 0, 0, 1], 24, 0, 0),
                entry([10, 1, 0, 1], 16, 1, 1),
            ],
        };
        let b = c.encode();
        assert_eq!(b.len(), CARD_HDR_LEN + 2 * CARD_ENTRY_LEN);
        assert_eq!(Card::decode(&b).unwrap(), c);
        for cut in 0..b.len() {
            assert!(Card::decode(&b[..cut]).is_err());
        }
        let mut bad = b.clone();
        bad[CARD_HDR_LEN + 1] = 33;
        assert!(Card::decode(&bad).is_err());
        let mut bad = b.clone();
        bad[5] = 0;
        assert!(Card::decode(&bad).is_err());
        let mut bad = b;
        bad.push(0);
        assert!(Card::decode(&bad).is_err());
    }

    #[test]
    fn handshake_roundtrip_and_rejects() {
        let h = Handshake {
            kind: HsKind::Hello,
            secret: [9; 16],
            from_rank: 3,
            to_rank: 4,
            from_entry: 1,
            to_entry: 2,
        };
        let b = h.encode();
        assert_eq!(Handshake::decode(&b).unwrap(), h);
        let mut bad = b;
        bad[5] = 9;
        assert!(Handshake::decode(&bad).is_err());
        let mut bad = b;
        bad[0] = b'X';
        assert!(Handshake::decode(&bad).is_err());
        assert!(Handshake::decode(&[0; HS_LEN]).is_err());
    }

    #[test]
    fn frame_header_bounds() {
        let data = |len, tag| Frame {
            len,
            tag,
            kind: KIND_DATA,
            lead: 0,
            trail: 0,
        };
        let h = frame_header(100, 5);
        assert_eq!(parse_frame(&h, 100), Ok(data(100, 5)));
        // Put frames are not bounded by the fragment limit, but need their
        // header; kind 2 (version 2's put acknowledgement) is no kind.
        let p = frame_header_kind(1 << 30, 0, KIND_PUT);
        assert_eq!(
            parse_frame(&p, 100).map(|f| (f.len, f.kind)),
            Ok((1 << 30, KIND_PUT))
        );
        assert!(parse_frame(&frame_header_kind(PUT_HDR_LEN - 1, 0, KIND_PUT), 100).is_err());
        assert!(parse_frame(&frame_header_kind(8, 0, 2), 100).is_err());
        assert!(parse_frame(&frame_header_kind(8, 0, 7), 100).is_err());
        let ph = PutHdr {
            id: 3,
            nonce: u64::MAX - 1,
            offset: 1 << 40,
            seq: 9,
        };
        assert_eq!(PutHdr::decode(&ph.encode()), Some(ph));
        assert_eq!(PutHdr::decode(&ph.encode()[..23]), None);
        let k = encode_key(5, 77, 64, 4096);
        assert_eq!(decode_key(&k), Some((5, 77, 64, 4096)));
        assert_eq!(decode_key(&k[..31]), None);
        assert_eq!(decode_key(&[0xee; KEY_LEN]), None);
        assert!(parse_frame(&h, 99).is_err());
        assert!(parse_frame(&h[..7], 100).is_err());
        // Padding: announced, bounded.
        let padded = with_pads(h, 63, 17);
        assert_eq!(
            parse_frame(&padded, 100),
            Ok(Frame {
                lead: 63,
                trail: 17,
                ..data(100, 5)
            })
        );
        let mut bad = h;
        bad[6] = 64;
        assert!(parse_frame(&bad, 100).is_err());
        bad = h;
        bad[7] = 200;
        assert!(parse_frame(&bad, 100).is_err());
    }

    #[test]
    fn pairing_by_subnet_then_routed() {
        let low = Card {
            rank: 0,
            entries: vec![
                entry([10, 2, 0, 1], 24, 0, 0),
                entry([10, 1, 0, 1], 24, 0, 1),
            ],
        };
        let high = Card {
            rank: 1,
            entries: vec![
                entry([10, 1, 0, 2], 24, 0, 0),
                entry([10, 2, 0, 2], 24, 0, 1),
            ],
        };
        assert_eq!(pair_entries(&low, &high, false), vec![(0, 1), (1, 0)]);
        // Routed when no subnet is common.
        let far = Card {
            rank: 1,
            entries: vec![entry([192, 168, 0, 2], 24, 0, 0)],
        };
        assert_eq!(pair_entries(&low, &far, false), vec![(0, 0)]);
        // Loopback pairs only on one node, and never with a real interface.
        let lo = |r| Card {
            rank: r,
            entries: vec![entry([127, 0, 0, 1], 8, 0, 0)],
        };
        assert_eq!(pair_entries(&lo(0), &lo(1), true), vec![(0, 0)]);
        assert!(pair_entries(&lo(0), &lo(1), false).is_empty());
        assert!(pair_entries(&lo(0), &far, true).is_empty());
        // Links pair with the same link number.
        let two = |r, a: u8| Card {
            rank: r,
            entries: vec![
                entry([127, 0, 0, a], 8, 0, 0),
                entry([127, 0, 0, a], 8, 1, 0),
            ],
        };
        assert_eq!(
            pair_entries(&two(0, 1), &two(1, 1), true),
            vec![(0, 0), (1, 1)]
        );
    }
}
