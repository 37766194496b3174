//! Fuzz target: the TCP BTL's wire decoders (`tcp::wire`), over untrusted
//! bytes: a fragment header, a handshake, a business card, a put header, a
//! remote key. The first byte picks the decoder (and the receiver's
//! largest fragment). Checked: no decoder panics, and whatever decodes
//! encodes back to exactly the bytes it came from (every reserved byte is
//! checked on the way in, so the encoding is the only one); two decoded
//! cards pair each entry at most once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxmpi_btl::tcp::wire::{
    decode_key, encode_key, frame_header_kind, pair_entries, parse_frame, with_pads, Card,
    Handshake, PutHdr, FRAME_HDR_LEN, HS_LEN, KIND_DATA, KIND_PUT, MAX_PAD, PUT_HDR_LEN,
};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, b)) = data.split_first() else {
        return;
    };
    match sel % 6 {
        0 => {
            // A frame header against a largest fragment of 0..=2^24.
            let max_len = usize::from(sel) << 16;
            let Ok(f) = parse_frame(b, max_len) else {
                return;
            };
            assert!(b.len() >= FRAME_HDR_LEN);
            assert!(f.lead <= MAX_PAD && f.trail <= MAX_PAD);
            match f.kind {
                KIND_DATA => assert!(f.len <= max_len),
                KIND_PUT => assert!(f.len >= PUT_HDR_LEN),
                k => panic!("kind {k} accepted"),
            }
            let h = with_pads(frame_header_kind(f.len, f.tag, f.kind), f.lead, f.trail);
            assert_eq!(&h[..], &b[..FRAME_HDR_LEN]);
        }
        1 => {
            let Some(raw) = b.get(..HS_LEN) else {
                return;
            };
            let raw: &[u8; HS_LEN] = raw.try_into().expect("HS_LEN bytes");
            if let Ok(hs) = Handshake::decode(raw) {
                assert_eq!(&hs.encode(), raw);
            }
        }
        2 => {
            if let Ok(card) = Card::decode(b) {
                assert_eq!(card.encode(), b);
            }
        }
        3 => {
            if let Some(h) = PutHdr::decode(b) {
                assert_eq!(&h.encode()[..], &b[..PUT_HDR_LEN]);
            }
        }
        4 => {
            if let Some((id, nonce, base, len)) = decode_key(b) {
                assert_eq!(&encode_key(id, nonce, base, len)[..], b);
            }
        }
        _ => {
            // Two cards, split where the second byte says.
            let Some((&cut, rest)) = b.split_first() else {
                return;
            };
            let cut = usize::from(cut).min(rest.len());
            let (Ok(low), Ok(high)) = (Card::decode(&rest[..cut]), Card::decode(&rest[cut..]))
            else {
                return;
            };
            for local in [false, true] {
                let pairs = pair_entries(&low, &high, local);
                let mut lows: Vec<usize> = pairs.iter().map(|p| p.0).collect();
                let mut highs: Vec<usize> = pairs.iter().map(|p| p.1).collect();
                lows.sort_unstable();
                lows.dedup();
                highs.sort_unstable();
                highs.dedup();
                assert_eq!(
                    lows.len(),
                    pairs.len(),
                    "an entry of the low card paired twice"
                );
                assert_eq!(
                    highs.len(),
                    pairs.len(),
                    "an entry of the high card paired twice"
                );
                for (l, h) in pairs {
                    let (a, b) = (low.entries[l], high.entries[h]);
                    assert_eq!(a.link, b.link, "entries of different links paired");
                    assert_eq!(a.is_loopback(), b.is_loopback());
                    assert!(local || !a.is_loopback());
                }
            }
        }
    }
});
