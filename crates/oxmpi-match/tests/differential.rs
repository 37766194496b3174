//! Differential proptest: random interleavings of posts, sends, reordered
//! deliveries (some with a receive about to be posted), probes, matched
//! probes and cancels; every decision of the engine must equal the naive
//! model's.

mod model;

use model::{msg_tag_from, source_from, tag_from, Harness, Op, N_PEERS};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = Op> {
    let ctx = 0usize..2;
    prop_oneof![
        3 => (ctx.clone(), any::<u8>(), any::<u8>())
            .prop_map(|(ctx, s, t)| Op::Post { ctx, src: source_from(s), tag: tag_from(t) }),
        3 => (ctx.clone(), 0..N_PEERS, any::<u8>(), 0usize..4096)
            .prop_map(|(ctx, peer, t, len)| Op::Send { ctx, peer, tag: msg_tag_from(t), len }),
        4 => (ctx.clone(), 0..N_PEERS, 0usize..8)
            .prop_map(|(ctx, peer, pick)| Op::Deliver { ctx, peer, pick }),
        1 => (ctx.clone(), any::<u8>(), any::<u8>())
            .prop_map(|(ctx, s, t)| Op::Iprobe { ctx, src: source_from(s), tag: tag_from(t) }),
        1 => (ctx.clone(), any::<u8>(), any::<u8>())
            .prop_map(|(ctx, s, t)| Op::Improbe { ctx, src: source_from(s), tag: tag_from(t) }),
        1 => any::<usize>().prop_map(|pick| Op::Cancel { pick }),
        1 => (ctx.clone(), 0..N_PEERS, any::<u8>(), any::<usize>())
            .prop_map(|(ctx, peer, t, pick)| Op::CancelSend { ctx, peer, tag: msg_tag_from(t), pick }),
        3 => (ctx.clone(), 0..N_PEERS, 0usize..8, ctx.clone(), 0..N_PEERS, any::<u8>())
            .prop_map(|(ctx, peer, pick, post_ctx, post_src, t)| Op::DeliverThenPost {
                ctx, peer, pick, post_ctx, post_src, post_tag: tag_from(t),
            }),
    ]
}

fn first_seq() -> impl Strategy<Value = u16> {
    // Mostly just below the wrap so sequences cross u16::MAX -> 0.
    prop_oneof![3 => 65525u16..=65535, 1 => Just(0u16), 1 => any::<u16>()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn engine_matches_model(
        seqs in (first_seq(), first_seq()),
        window in 1usize..6,
        ops in prop::collection::vec(op(), 0..250),
    ) {
        let mut h = Harness::new([seqs.0, seqs.1], window);
        for op in &ops {
            h.apply(op);
        }
        h.finish();
    }
}
