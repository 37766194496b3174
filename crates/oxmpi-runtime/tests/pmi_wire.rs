//! Wire format: round trips, both PMI-2 prefix alignments, and no panic on
//! arbitrary bytes.

use oxmpi_runtime::pmi::value;
use oxmpi_runtime::pmi::wire::{
    self, detect, encode_v1, encode_v2, parse_v1, parse_v2_body, Align, Decoder, Expect, Message,
    Protocol,
};
use oxmpi_runtime::topology::{ProcessMapping, Topology};
use proptest::prelude::*;

fn key() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_/-]{1,20}"
}

fn v1_value() -> impl Strategy<Value = String> {
    // anything printable but space and backslash (the PMI-1 value rules)
    "[!-\\[\\]-~]{0,40}"
}

fn v2_value() -> impl Strategy<Value = String> {
    "[ -:<-~]{0,40}"
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn decoder_never_panics(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..8),
                            mode in 0u8..3) {
        let expect = [Expect::Auto, Expect::V1, Expect::V2][mode as usize];
        let mut d = Decoder::with_max_message(256);
        for c in &chunks {
            d.push(c);
            for _ in 0..16 {
                match d.next_frame(expect) {
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }

    #[test]
    fn parsers_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_v1(&bytes);
        let _ = parse_v2_body(&bytes);
        let _ = wire::parse_v1_mcmd(&bytes);
        let _ = detect(&bytes);
        let text = String::from_utf8_lossy(&bytes);
        let _ = value::decode(&text);
        let _ = value::parse_head(&text);
        let m = ProcessMapping::parse(&text);
        let _ = Topology::new(&m, 3, 17);
    }

    #[test]
    fn text_like_input_never_panics(s in "(cmd=|mcmd=|[ 0-9]{6}cmd=)?[a-z=; \\n\\\\/_-]{0,80}") {
        let mut d = Decoder::new();
        d.push(s.as_bytes());
        while let Ok(Some(_)) = d.next_frame(Expect::Auto) {}
    }

    #[test]
    fn v1_round_trip(cmd in "[a-z_]{1,12}", args in prop::collection::vec((key(), v1_value()), 0..6)) {
        let mut m = Message::new(cmd);
        for (k, v) in args { m.push(k, v); }
        let bytes = encode_v1(&m).unwrap();
        let mut d = Decoder::new();
        d.push(&bytes);
        let f = d.next_frame(Expect::Auto).unwrap().unwrap();
        prop_assert_eq!(f.protocol, Protocol::V1);
        prop_assert_eq!(f.message.unwrap(), m);
    }

    #[test]
    fn v2_round_trip(cmd in "[a-z-]{1,12}", args in prop::collection::vec((key(), v2_value()), 0..6), left in any::<bool>()) {
        let mut m = Message::new(cmd);
        for (k, v) in args { m.push(k, v); }
        let align = if left { Align::Left } else { Align::Right };
        let bytes = encode_v2(&m, align).unwrap();
        let mut d = Decoder::new();
        // byte by byte: framing must cope with any split
        let mut got = None;
        for b in &bytes {
            d.push(std::slice::from_ref(b));
            if let Some(f) = d.next_frame(Expect::Auto).unwrap() { got = Some(f); }
        }
        let f = got.unwrap();
        prop_assert_eq!(f.protocol, Protocol::V2);
        prop_assert_eq!(f.message.unwrap(), m);
        prop_assert_eq!(d.buffered(), 0);
    }

    #[test]
    fn value_round_trip(bytes in prop::collection::vec(any::<u8>(), 0..2000), max in 8usize..900) {
        let plan = value::plan(&bytes, max);
        prop_assert!(plan.head.len() <= max || plan.chunks.is_empty() && plan.head.len() <= max + 1);
        let back = match value::parse_head(&plan.head).unwrap() {
            value::Head::Inline(b) => b,
            value::Head::Chunked(n) => {
                prop_assert_eq!(n, plan.chunks.len());
                prop_assert!(plan.chunks.iter().all(|c| c.len() <= max));
                value::decode(&plan.chunks.concat()).unwrap()
            }
        };
        prop_assert_eq!(back, bytes);
    }
}

#[test]
fn pmi2_prefix_alignments() {
    let body = b"cmd=kvs-fence;";
    for prefix in [b"    14".as_slice(), b"14    ", b"  14  ", b"000014"] {
        let mut d = Decoder::new();
        d.push(prefix);
        d.push(body);
        let f = d.next_frame(Expect::Auto).unwrap().unwrap();
        assert_eq!(f.message.unwrap().cmd, "kvs-fence");
    }
    // Slurm-style left alignment as produced by the encoder
    let m = Message::new("kvs-fence");
    assert_eq!(encode_v2(&m, Align::Left).unwrap(), b"14    cmd=kvs-fence;");
    assert_eq!(
        encode_v2(&m, Align::Right).unwrap(),
        b"    14cmd=kvs-fence;"
    );
    // garbage prefix is a framing error, not a wait
    let mut d = Decoder::new();
    d.push(b"xx");
    assert!(d.next_frame(Expect::Auto).is_err());
}

#[test]
fn hydra_replies_parse() {
    // Replies as Hydra 4.0 writes them.
    let m = parse_v1(b"cmd=barrier_out\n").unwrap();
    assert_eq!(m.rc(), None);
    let m = parse_v1(b"cmd=get_result rc=-1 msg=key_x_not_found value=unknown\n").unwrap();
    assert_eq!(m.rc(), Some(Ok(-1)));
    let m = parse_v2_body(
        b"cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=1;size=4;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;",
    )
    .unwrap();
    assert_eq!(m.get("size"), Some("4"));
    let m = parse_v2_body(b"cmd=kvs-get-response;found=FALSE;rc=0;").unwrap();
    assert_eq!(m.get("found"), Some("FALSE"));
}
