//! Fuzz target: the TCP BTL's receive side (`tcp::framing::FrameReader`)
//! fed a byte stream in arbitrary chunks.
//!
//! The input describes a stream: well-formed data and put frames (with
//! padding, to registrations that exist, are stale, read-only or too
//! short), malformed headers and raw bytes, then the sizes of the chunks
//! it arrives in (and where a read is interrupted). The stream is read by
//! a `FrameReader` chunk after chunk, then ends (EOF), and checked against
//! a plain decoder of the whole stream at once (written here from the
//! format in `tcp::wire`'s doc): the same fragments in the same order, the
//! same refused puts, the same bytes landed in registered memory, a
//! malformed frame seen as such and nothing delivered after it, and the
//! end of the stream reported as a failure. No panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxmpi_btl::btl::{AmTag, BtlError, BtlSink, Endpoint, Token};
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::tcp::framing::{ByteSource, FrameReader, ReadEnd};
use oxmpi_btl::tcp::landing::PutTargets;
use oxmpi_btl::tcp::wire::{
    frame_header_kind, parse_frame, with_pads, PutHdr, FRAME_HDR_LEN, KIND_DATA, KIND_PUT,
    PUT_HDR_LEN,
};
use oxmpi_btl::tcp::TcpStats;
use rustix::io::Errno;

/// What the receiver sees, in order.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    Recv(u8, Vec<u8>),
    Refused,
}

#[derive(Default)]
struct Sink(Vec<Event>);

impl BtlSink for Sink {
    fn on_recv(&mut self, ep: Endpoint, tag: AmTag, data: &[u8]) {
        assert_eq!(ep, Endpoint(3));
        self.0.push(Event::Recv(tag.0, data.to_vec()));
    }
    fn on_complete(&mut self, _: Token, _: Result<(), BtlError>) {
        panic!("a reader completes nothing");
    }
    fn on_peer_lost(&mut self, _: Endpoint, _: &BtlError) {
        panic!("a reader loses no peer");
    }
    fn on_put_refused(&mut self, ep: Endpoint) {
        assert_eq!(ep, Endpoint(3));
        self.0.push(Event::Refused);
    }
}

/// The stream, handed out up to `limit` (then EAGAIN), with an EINTR
/// where `intr` says, and EOF once `eof` is set and all is read.
struct Stream<'a> {
    bytes: &'a [u8],
    at: usize,
    limit: usize,
    intr: &'a [u8],
    calls: usize,
    eof: bool,
}

impl ByteSource for Stream<'_> {
    fn recv(&mut self, buf: &mut [u8]) -> Result<usize, Errno> {
        self.calls += 1;
        if self.intr.get(self.calls % 64).is_some_and(|&b| b & 7 == 0) && self.calls % 3 == 0 {
            return Err(Errno::INTR);
        }
        if self.at == self.limit {
            return if self.eof && self.at == self.bytes.len() {
                Ok(0)
            } else {
                Err(Errno::AGAIN)
            };
        }
        let n = buf.len().min(self.limit - self.at);
        buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Reads the input's bytes in order.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
}

/// A registration of the test: its memory, id and nonce, whether writable.
struct Target {
    mem: Vec<u8>,
    id: u32,
    nonce: u64,
    writable: bool,
}

/// What the plain decoder makes of a whole stream.
struct Decoded {
    events: Vec<Event>,
    /// Puts whose data all came (landed or refused).
    puts: usize,
    /// It ends at a malformed header.
    malformed: bool,
}

/// The plain decoder: what the whole `stream` holds, and the bytes it
/// lands in `mems`.
fn decode_all(
    stream: &[u8],
    frame_max: usize,
    targets: &[Target],
    mems: &mut [Vec<u8>],
) -> Decoded {
    let mut d = Decoded {
        events: Vec::new(),
        puts: 0,
        malformed: false,
    };
    let events = &mut d.events;
    let mut at = 0;
    while at + FRAME_HDR_LEN <= stream.len() {
        let Ok(f) = parse_frame(&stream[at..], frame_max) else {
            d.malformed = true;
            break;
        };
        let start = at + FRAME_HDR_LEN + f.lead;
        if f.kind == KIND_DATA {
            let end = start + f.len;
            if end + f.trail > stream.len() {
                break;
            }
            events.push(Event::Recv(f.tag, stream[start..end].to_vec()));
            at = end + f.trail;
            continue;
        }
        assert_eq!(f.kind, KIND_PUT);
        if start + PUT_HDR_LEN > stream.len() {
            break;
        }
        let h = PutHdr::decode(&stream[start..]).expect("24 bytes");
        let total = f.len - PUT_HDR_LEN;
        let data_at = start + PUT_HDR_LEN;
        let have = &stream[data_at..stream.len().min(data_at + total)];
        let target = targets.iter().position(|t| {
            t.id == h.id
                && t.nonce == h.nonce
                && t.writable
                && usize::try_from(h.offset)
                    .ok()
                    .and_then(|o| o.checked_add(total))
                    .is_some_and(|end| end <= t.mem.len())
        });
        if let Some(k) = target {
            let o = h.offset as usize;
            mems[k][o..o + have.len()].copy_from_slice(have);
        }
        if have.len() < total {
            break;
        }
        if target.is_none() {
            events.push(Event::Refused);
        }
        d.puts += 1;
        at = data_at + total + f.trail;
    }
    d
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let frame_max = 16 + 8 * usize::from(input.byte());
    let put_targets = PutTargets::new();
    let mut targets: Vec<Target> = [(64usize, true), (300, true), (100, false)]
        .into_iter()
        .map(|(len, writable)| Target {
            mem: vec![0xee; len],
            id: 0,
            nonce: 0,
            writable,
        })
        .collect();
    for t in &mut targets {
        // SAFETY: the vector lives, unmoved and not otherwise touched,
        // until the reader is done with it (the end of this call).
        let region = unsafe { MemRegion::new(t.mem.as_mut_ptr(), t.mem.len()) };
        (t.id, t.nonce) = put_targets.register(region, t.writable).expect("registers");
    }

    // The stream: ops until a 0xff byte or the input's end.
    let mut stream = Vec::new();
    let mut seq = 0u8;
    while !input.0.is_empty() {
        let op = input.byte();
        if op == 0xff {
            break;
        }
        let (lead, trail) = match input.byte() {
            p if p < 192 => (usize::from(p % 4), usize::from(p / 4 % 4)),
            p => (usize::from(p & 63), usize::from(p.rotate_left(3) & 63)),
        };
        match op % 5 {
            0 | 1 => {
                // A data frame, sometimes longer than the receiver takes.
                let len = usize::from(input.u16()) % (frame_max + frame_max / 8 + 1);
                let tag = input.byte();
                let h = with_pads(frame_header_kind(len, tag, KIND_DATA), lead, trail);
                stream.extend_from_slice(&h);
                stream.extend(std::iter::repeat(0x11).take(lead));
                stream.extend((0..len).map(|i| seq.wrapping_add(i as u8)));
                stream.extend(std::iter::repeat(0x22).take(trail));
            }
            2 | 3 => {
                // A put: to a registration, or a stale or unknown one.
                let which = input.byte();
                let t = &targets[usize::from(which % 3)];
                let (id, nonce) = match which / 3 % 4 {
                    0 => (t.id, t.nonce ^ 1),
                    1 => (t.id + 7, t.nonce),
                    _ => (t.id, t.nonce),
                };
                let offset = u64::from(input.byte()) * 4;
                let len = usize::from(input.u16()) % 320;
                let h = PutHdr {
                    id,
                    nonce,
                    offset,
                    seq: u32::from(seq),
                };
                let f = with_pads(
                    frame_header_kind(PUT_HDR_LEN + len, 0, KIND_PUT),
                    lead,
                    trail,
                );
                stream.extend_from_slice(&f);
                stream.extend(std::iter::repeat(0x33).take(lead));
                stream.extend_from_slice(&h.encode());
                stream.extend((0..len).map(|i| seq.wrapping_mul(3).wrapping_add(i as u8)));
                stream.extend(std::iter::repeat(0x44).take(trail));
            }
            _ => {
                // Raw bytes from the input: malformed frames, or whatever.
                let n = usize::from(input.byte() % 24);
                for _ in 0..n {
                    stream.push(input.byte());
                }
            }
        }
        seq = seq.wrapping_add(1);
    }
    // Chunk sizes (and interruptions): the rest of the input.
    let chunks = input.0;

    let mut want_mems: Vec<Vec<u8>> = targets.iter().map(|t| t.mem.clone()).collect();
    let Decoded {
        events: want,
        puts,
        malformed,
    } = decode_all(&stream, frame_max, &targets, &mut want_mems);

    let mut reader = FrameReader::new(frame_max);
    let mut sink = Sink::default();
    let mut stats = TcpStats::default();
    let mut delivered = 0;
    let mut src = Stream {
        bytes: &stream,
        at: 0,
        limit: 0,
        intr: chunks,
        calls: 0,
        eof: false,
    };
    let mut failed = None;
    let mut sizes = chunks
        .iter()
        .map(|&c| 1 + usize::from(c) * usize::from(c) / 8);
    'chunks: while failed.is_none() {
        if src.limit == stream.len() {
            src.eof = true;
        }
        let size = sizes.next().unwrap_or(stream.len());
        src.limit = stream.len().min(src.limit + size);
        let mut readable = true;
        loop {
            let end = reader.read(
                &mut src,
                &mut readable,
                Endpoint(3),
                &mut sink,
                &put_targets,
                &mut stats,
                &mut delivered,
            );
            match end {
                ReadEnd::Drained => {
                    assert!(!readable, "drained but still readable");
                    break;
                }
                ReadEnd::Budget => assert!(readable),
                ReadEnd::Failed(why) => {
                    failed = Some(why);
                    break 'chunks;
                }
            }
        }
        assert!(!src.eof, "the end of the stream was not reported");
    }
    let why = failed.expect("the loop ends with a failure");
    assert_eq!(
        malformed,
        why.starts_with("protocol error"),
        "malformed stream: {malformed}, the reader says {why}"
    );
    if !malformed {
        assert_eq!(why, "closed by the peer (EOF)");
        assert_eq!(src.at, stream.len());
    }
    assert_eq!(sink.0, want);
    let recvs = want.iter().filter(|e| matches!(e, Event::Recv(..))).count();
    assert_eq!(stats.frags_received, recvs as u64);
    for (t, m) in targets.iter().zip(&want_mems) {
        assert_eq!(&t.mem, m, "bytes landed in registration {}", t.id);
    }
    // Every fragment delivered and every put that ended counts.
    assert_eq!(delivered, recvs + puts);
});
