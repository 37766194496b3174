//! Fuzz target: the PMI wire (`pmi::wire`), over untrusted bytes.
//!
//! The input's first byte picks what the `Decoder` expects and its size
//! limit, the second where the rest splits into a message and the sizes of
//! the chunks the message arrives in. Checked:
//! * `parse_v1`, `parse_v1_mcmd`, `parse_v2_body` and `parse_v2_len` never
//!   panic;
//! * what parses and encodes again (PMI-1 values escaped again) parses
//!   back to the same message (PMI-1 lines, PMI-2 bodies, and whole PMI-2
//!   messages in either alignment through a `Decoder`);
//! * a `Decoder` fed the bytes in any chunks frames the same messages, in
//!   the same order, as one fed them at once, and fails (a stream that
//!   cannot be framed) where that one does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxmpi_runtime::pmi::wire::{
    encode_v1, encode_v2, encode_v2_body, parse_v1, parse_v1_mcmd, parse_v2_body, parse_v2_len,
    Align, Decoder, Expect, Frame, Protocol, WireError, V2_LEN_PREFIX, V2_MAX_BODY,
};

/// What a decoder makes of a stream: the frames, then whether it failed.
fn frames(dec: &mut Decoder, expect: Expect, out: &mut Vec<Frame>) -> Option<WireError> {
    loop {
        match dec.next_frame(expect) {
            Ok(Some(f)) => out.push(f),
            Ok(None) => return None,
            Err(e) => return Some(e),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let expect = match data[0] % 3 {
        0 => Expect::Auto,
        1 => Expect::V1,
        _ => Expect::V2,
    };
    let max_message = 16 + usize::from(data[0] / 3) * 8;
    let cut = usize::from(data[1]).min(data.len() - 2);
    let (msg, chunks) = data[2..].split_at(data.len() - 2 - cut);

    // The parsers, on the message alone.
    if let Ok(m) = parse_v1(msg) {
        assert!(!m.cmd.is_empty());
        // `parse_v1` undoes a backslash escape; `encode_v1` takes values
        // escaped (as `escape_v1` writes them): escaped again, what parsed
        // encodes back to itself.
        let mut escaped = m.clone();
        for (_, v) in &mut escaped.args {
            *v = v.replace('\\', "\\\\").replace(' ', "\\ ");
        }
        if let Ok(e) = encode_v1(&escaped) {
            assert_eq!(parse_v1(&e), Ok(m), "PMI-1 line {e:?}");
        }
    }
    let _ = parse_v1_mcmd(msg);
    if let Some(prefix) = msg.get(..V2_LEN_PREFIX) {
        if let Ok(n) = parse_v2_len(prefix) {
            assert!(n <= V2_MAX_BODY);
        }
    }
    if let Ok(m) = parse_v2_body(msg) {
        assert!(!m.cmd.is_empty());
        if let Ok(body) = encode_v2_body(&m) {
            assert_eq!(parse_v2_body(&body), Ok(m.clone()), "PMI-2 body {body:?}");
            for align in [Align::Right, Align::Left] {
                let whole = encode_v2(&m, align).expect("the body encoded");
                let mut dec = Decoder::new();
                dec.push(&whole);
                let f = dec.next_frame(Expect::V2).expect("framed").expect("whole");
                assert_eq!((f.protocol, f.message), (Protocol::V2, Ok(m.clone())));
                assert_eq!(dec.buffered(), 0);
            }
        }
    }

    // The decoder, at once and in chunks.
    let mut whole = Decoder::with_max_message(max_message);
    whole.push(msg);
    let mut want = Vec::new();
    let want_err = frames(&mut whole, expect, &mut want);

    let mut dec = Decoder::with_max_message(max_message);
    let mut got = Vec::new();
    let mut got_err = None;
    let mut at = 0;
    let mut sizes = chunks.iter().map(|&c| usize::from(c % 32) + 1);
    while at < msg.len() && got_err.is_none() {
        let n = sizes.next().unwrap_or(msg.len()).min(msg.len() - at);
        dec.push(&msg[at..at + n]);
        at += n;
        got_err = frames(&mut dec, expect, &mut got);
    }
    assert_eq!(got, want, "frames in chunks against at once");
    assert_eq!(
        got_err.is_some(),
        want_err.is_some(),
        "in chunks: {got_err:?}; at once: {want_err:?}"
    );
});
