//! Wire headers: exact layout, round trips, and that no input from a peer
//! can make the parser panic.

use oxmpi_btl::btl::{AmTag, RemoteKey};
use oxmpi_pml::hdr::*;
use proptest::prelude::*;

#[test]
fn match_layout_is_fixed_little_endian() {
    let h = Hdr::Match(MatchHdr {
        ctx: 0x0102,
        seq: 0x0304,
        src: 0x0506_0708,
        tag: -2,
    });
    let mut b = [0u8; 16];
    assert_eq!(h.emit(&mut b), MATCH_LEN);
    assert_eq!(
        &b[..12],
        &[0x02, 0x01, 0x04, 0x03, 0x08, 0x07, 0x06, 0x05, 0xfe, 0xff, 0xff, 0xff]
    );
    b[12..].copy_from_slice(b"data");
    let (p, payload) = Hdr::parse(HdrType::Match.am_tag(), &b).unwrap();
    assert_eq!(p, h);
    assert_eq!(payload, b"data");
}

#[test]
fn req_ref_packs_index_low_generation_high() {
    let r = ReqRef {
        index: 7,
        generation: 9,
    };
    assert_eq!(r.to_u64(), (9 << 32) | 7);
    assert_eq!(ReqRef::from_u64(r.to_u64()), r);
}

fn key() -> impl Strategy<Value = RemoteKey> {
    proptest::collection::vec(any::<u8>(), 0..=RemoteKey::MAX)
        .prop_map(|v| RemoteKey::new(&v).unwrap())
}

fn req() -> impl Strategy<Value = ReqRef> {
    any::<u64>().prop_map(ReqRef::from_u64)
}

fn match_hdr() -> impl Strategy<Value = MatchHdr> {
    (any::<u16>(), any::<u16>(), any::<u32>(), any::<i32>())
        .prop_map(|(ctx, seq, src, tag)| MatchHdr { ctx, seq, src, tag })
}

fn rndv() -> impl Strategy<Value = RndvHdr> {
    (match_hdr(), 0..=RndvFlags::ALL, any::<u64>(), req()).prop_map(|(m, f, msg_len, send_req)| {
        RndvHdr {
            m,
            flags: RndvFlags(f),
            msg_len,
            send_req,
        }
    })
}

fn hdr() -> impl Strategy<Value = Hdr> {
    prop_oneof![
        match_hdr().prop_map(Hdr::Match),
        rndv().prop_map(Hdr::Rndv),
        (rndv(), key()).prop_map(|(h, k)| Hdr::Rget(h, k)),
        (req(), req(), any::<u64>(), any::<u64>()).prop_map(
            |(send_req, recv_req, send_offset, send_len)| Hdr::Ack {
                send_req,
                recv_req,
                send_offset,
                send_len
            }
        ),
        (req(), req(), any::<i32>()).prop_map(|(send_req, recv_req, error)| Hdr::Nack {
            send_req,
            recv_req,
            error
        }),
        (req(), req(), any::<u64>()).prop_map(|(recv_req, send_req, offset)| Hdr::Frag {
            recv_req,
            send_req,
            offset
        }),
        (req(), req(), any::<u64>(), any::<u64>(), key()).prop_map(
            |(send_req, recv_req, offset, len, key)| Hdr::Put {
                send_req,
                recv_req,
                offset,
                len,
                key
            }
        ),
        (req(), any::<u64>(), any::<i32>(), any::<u32>()).prop_map(|(req, size, status, nanos)| {
            Hdr::Fin {
                req,
                size,
                status,
                nanos,
            }
        }),
        any::<u64>().prop_map(|bytes| Hdr::Credit { bytes }),
        (
            any::<u64>(),
            any::<u16>(),
            any::<u16>(),
            any::<u32>(),
            any::<i32>()
        )
            .prop_map(|(r, ctx, seq, src, tag)| Hdr::Cancel {
                send_req: ReqRef::from_u64(r),
                ctx,
                seq,
                src,
                tag,
            }),
        (any::<u64>(), any::<u16>(), any::<bool>()).prop_map(|(r, seq, cancelled)| {
            Hdr::CancelAck {
                send_req: ReqRef::from_u64(r),
                seq,
                cancelled,
            }
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn round_trip_with_payload(h in hdr(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut b = vec![0u8; h.len()];
        prop_assert_eq!(h.emit(&mut b), h.len());
        prop_assert!(h.len() <= MAX_LEN);
        b.extend_from_slice(&payload);
        let (p, rest) = Hdr::parse(h.kind().am_tag(), &b).unwrap();
        prop_assert_eq!(p, h);
        prop_assert_eq!(rest, &payload[..]);
    }

    #[test]
    fn every_truncation_is_an_error(h in hdr()) {
        let mut b = vec![0u8; h.len()];
        h.emit(&mut b);
        for n in 0..b.len() {
            let is_truncated = matches!(Hdr::parse(h.kind().am_tag(), &b[..n]), Err(HdrError::Truncated { .. }));
            prop_assert!(is_truncated, "prefix of {} bytes accepted", n);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(tag in any::<u8>(), b in proptest::collection::vec(any::<u8>(), 0..128)) {
        if let Ok((h, rest)) = Hdr::parse(AmTag(tag), &b) {
            prop_assert_eq!(h.len() + rest.len(), b.len());
        }
    }
}

#[test]
fn bad_values_are_errors() {
    assert_eq!(Hdr::parse(AmTag(3), &[0; 64]), Err(HdrError::UnknownTag(3)));
    let mut b = [0u8; RNDV_LEN];
    Hdr::Rndv(RndvHdr {
        m: MatchHdr {
            ctx: 1,
            seq: 2,
            src: 3,
            tag: 4,
        },
        flags: RndvFlags(RndvFlags::CONTIG),
        msg_len: 10,
        send_req: ReqRef::default(),
    })
    .emit(&mut b);
    b[12] = 0x80; // an undefined flag bit
    assert_eq!(
        Hdr::parse(HdrType::Rndv.am_tag(), &b),
        Err(HdrError::BadFlags(0x80))
    );
    let mut put = [0u8; PUT_FIXED_LEN + 60];
    put[PUT_FIXED_LEN - 1] = 60; // key longer than RemoteKey::MAX
    assert_eq!(
        Hdr::parse(HdrType::Put.am_tag(), &put),
        Err(HdrError::BadKey(60))
    );
}
