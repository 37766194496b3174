//! Fuzz target: decodes arbitrary bytes into the same operation stream as
//! the proptest (posts, sends, reordered deliveries, probes, matched probes,
//! cancels) and checks the engine against the naive model.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/model/mod.rs"]
mod model;

use model::{msg_tag_from, source_from, tag_from, Harness, Op, N_PEERS};

/// First sequence number: biased to just below the 16-bit wrap.
fn first_seq(a: u8, b: u8) -> u16 {
    if a & 0x80 != 0 {
        u16::MAX - u16::from(b % 16)
    } else {
        u16::from_le_bytes([a, b])
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let (head, body) = data.split_at(5);
    let seqs = [first_seq(head[0], head[1]), first_seq(head[2], head[3])];
    let window = 1 + usize::from(head[4] % 6);
    let mut h = Harness::new(seqs, window);
    for chunk in body.chunks_exact(4).take(4096) {
        let (k, a, b, c) = (chunk[0], chunk[1], chunk[2], chunk[3]);
        let ctx = usize::from(k >> 7);
        let peer = u32::from(a) % N_PEERS;
        let op = match k % 7 {
            0 => Op::Post {
                ctx,
                src: source_from(a),
                tag: tag_from(b),
            },
            1 | 2 => Op::Send {
                ctx,
                peer,
                tag: msg_tag_from(b),
                len: usize::from(u16::from_le_bytes([c, b])),
            },
            3 | 4 => Op::Deliver {
                ctx,
                peer,
                pick: usize::from(b),
            },
            5 => match c % 3 {
                0 => Op::Iprobe {
                    ctx,
                    src: source_from(a),
                    tag: tag_from(b),
                },
                1 => Op::Improbe {
                    ctx,
                    src: source_from(a),
                    tag: tag_from(b),
                },
                _ => Op::Cancel {
                    pick: usize::from(u16::from_le_bytes([a, b])),
                },
            },
            _ if c & 1 == 1 => Op::DeliverThenPost {
                ctx,
                peer,
                pick: usize::from(b),
                post_ctx: usize::from(c >> 7),
                post_src: u32::from(c >> 1) % N_PEERS,
                post_tag: tag_from(b >> 3),
            },
            _ => Op::Post {
                ctx,
                src: source_from(a),
                tag: tag_from(c),
            },
        };
        h.apply(&op);
    }
    h.finish();
});
