//! Fuzz target: the PML's wire header parser, over untrusted bytes.
//!
//! The first byte picks the active-message tag (mostly one of the PML's
//! eleven header types), the rest are the fragment. Checked:
//! * `Hdr::parse` never panics; an error is the one the bytes call for
//!   (an unknown tag, or fewer bytes than the header needs);
//! * a parsed header consumed exactly `Hdr::len` bytes, its type is the
//!   tag's, and the payload is the rest;
//! * `parse(emit(h)) == h` (with the same payload after it), and `emit`
//!   gives back the input's bytes but for the bytes the format ignores
//!   (RNDV's padding, CANCEL_ACK's flag, read as non-zero);
//! * `MatchHdr::read` (the hot path's shortcut) agrees with `Hdr::parse`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxmpi_btl::btl::AmTag;
use oxmpi_pml::hdr::{Hdr, HdrError, HdrType, MatchHdr, MAX_LEN};

/// Whether byte `i` of an emitted header of `kind` may differ from the
/// parsed input's (fields the format reads but does not keep as given).
fn ignored(kind: HdrType, i: usize) -> bool {
    match kind {
        // MATCH (12), flags (2), then 2 bytes of padding.
        HdrType::Rndv | HdrType::Rget => (14..16).contains(&i),
        // send_req (8), seq (2), then `cancelled` as a u16: any non-zero
        // value is true, emitted as 1.
        HdrType::CancelAck => (10..12).contains(&i),
        _ => false,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&t, bytes)) = data.split_first() else {
        return;
    };
    // Mostly the PML's tags (64..=74), sometimes any.
    let tag = AmTag(if t & 0xc0 == 0xc0 { t } else { 64 + t % 11 });
    let parsed = Hdr::parse(tag, bytes);

    if tag == HdrType::Match.am_tag() {
        match (MatchHdr::read(bytes), &parsed) {
            (Some((m, p)), Ok((Hdr::Match(h), q))) => {
                assert_eq!(m, *h);
                assert_eq!(p, *q);
            }
            (None, Err(HdrError::Truncated { .. })) => {}
            (read, parse) => panic!("MatchHdr::read {read:?} but Hdr::parse {parse:?}"),
        }
    }

    let (h, payload) = match parsed {
        Ok(ok) => ok,
        Err(HdrError::UnknownTag(t)) => {
            assert_eq!(t, tag.0);
            assert!(HdrType::from_am_tag(tag).is_none());
            return;
        }
        Err(HdrError::Truncated { kind, got, need }) => {
            assert_eq!(kind.am_tag(), tag);
            assert_eq!(got, bytes.len());
            assert!(got < need && need <= MAX_LEN, "{got} < {need}");
            return;
        }
        Err(HdrError::BadFlags(f)) => {
            assert!(matches!(
                HdrType::from_am_tag(tag),
                Some(HdrType::Rndv | HdrType::Rget)
            ));
            assert_eq!(u16::from_le_bytes([bytes[12], bytes[13]]), f);
            return;
        }
        Err(HdrError::BadKey(n)) => {
            assert!(n > oxmpi_btl::btl::RemoteKey::MAX);
            return;
        }
    };
    let n = h.len();
    assert_eq!(h.kind().am_tag(), tag);
    assert!(n <= MAX_LEN && n <= bytes.len());
    assert_eq!(
        payload,
        &bytes[n..],
        "the payload is what follows the header"
    );

    let mut out = vec![0u8; n];
    assert_eq!(h.emit(&mut out), n);
    for (i, (a, b)) in out.iter().zip(&bytes[..n]).enumerate() {
        assert!(
            a == b || ignored(h.kind(), i),
            "{:?}: emitted byte {i} is {a:#x}, parsed from {b:#x}",
            h.kind()
        );
    }
    let mut again = out.clone();
    again.extend_from_slice(payload);
    let (h2, p2) = Hdr::parse(tag, &again).expect("an emitted header parses");
    assert_eq!(h2, h);
    assert_eq!(p2, payload);
});
