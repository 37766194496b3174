//! One test per matching rule, through the public API.

use oxmpi_match::{
    Arrival, Engine, Envelope, Match, MatchError, MatchEvent, MessageInfo, PostOutcome,
    ProbeOutcome, SendSequencer, Source, Tag, UnexpectedStats,
};

type E = Engine<u32, &'static str>;

const C: u32 = 1;

fn engine(n_peers: u32) -> E {
    let mut e = E::new();
    e.add_context(C, n_peers).unwrap();
    e
}

fn env(source: u32, tag: i32) -> Envelope {
    Envelope {
        context: C,
        source,
        tag,
    }
}

/// Delivers an in-sequence arrival and returns its single decision.
fn arrive(
    e: &mut E,
    src: u32,
    tag: i32,
    len: usize,
    msg: &'static str,
) -> MatchEvent<u32, &'static str> {
    let seq = e.expected_seq(C, src).unwrap();
    assert_eq!(
        e.handle_arrival(C, src, tag, seq, len, msg).unwrap(),
        Arrival::Delivered { events: 1 }
    );
    let ev = e.poll_matched().unwrap();
    assert!(e.poll_matched().is_none());
    ev
}

fn matched(
    recv: u32,
    msg: &'static str,
    src: u32,
    tag: i32,
    len: usize,
) -> Match<u32, &'static str> {
    Match {
        recv,
        msg,
        envelope: env(src, tag),
        len,
    }
}

fn posted(o: PostOutcome<u32, &'static str>) -> oxmpi_match::RecvHandle {
    match o {
        PostOutcome::Posted(h) => h,
        other => panic!("expected Posted, got {other:?}"),
    }
}

fn took(o: PostOutcome<u32, &'static str>) -> Match<u32, &'static str> {
    match o {
        PostOutcome::Matched(m) => m,
        other => panic!("expected Matched, got {other:?}"),
    }
}

#[test]
fn messages_from_one_sender_are_non_overtaking() {
    let mut e = engine(2);
    arrive(&mut e, 0, 5, 1, "first");
    arrive(&mut e, 0, 5, 2, "second");
    let a = took(e.post_recv(C, Source::Any, Tag::Any, 10).unwrap());
    let b = took(e.post_recv(C, Source::Rank(0), Tag::Value(5), 11).unwrap());
    assert_eq!(a, matched(10, "first", 0, 5, 1));
    assert_eq!(b, matched(11, "second", 0, 5, 2));
}

#[test]
fn arrival_matches_earliest_posted_receive() {
    let mut e = engine(2);
    posted(e.post_recv(C, Source::Rank(0), Tag::Value(5), 1).unwrap());
    posted(e.post_recv(C, Source::Rank(0), Tag::Value(5), 2).unwrap());
    let ev = arrive(&mut e, 0, 5, 0, "m1");
    assert_eq!(ev, MatchEvent::Matched(matched(1, "m1", 0, 5, 0)));
    let ev = arrive(&mut e, 0, 5, 0, "m2");
    assert_eq!(ev, MatchEvent::Matched(matched(2, "m2", 0, 5, 0)));
}

#[test]
fn wildcard_and_specific_receives_merge_in_posting_order() {
    let mut e = engine(2);
    // wildcard first, then specific: the wildcard wins.
    posted(e.post_recv(C, Source::Any, Tag::Value(5), 1).unwrap());
    posted(e.post_recv(C, Source::Rank(0), Tag::Value(5), 2).unwrap());
    posted(e.post_recv(C, Source::Rank(0), Tag::Any, 3).unwrap());
    let got: Vec<u32> = (0..3)
        .map(|_| match arrive(&mut e, 0, 5, 0, "m") {
            MatchEvent::Matched(m) => m.recv,
            q => panic!("{q:?}"),
        })
        .collect();
    assert_eq!(got, vec![1, 2, 3]);
    // specific first, then wildcard: the specific wins.
    posted(e.post_recv(C, Source::Rank(1), Tag::Value(7), 4).unwrap());
    posted(e.post_recv(C, Source::Any, Tag::Any, 5).unwrap());
    let MatchEvent::Matched(m) = arrive(&mut e, 1, 7, 0, "x") else {
        panic!()
    };
    assert_eq!(m.recv, 4);
    let MatchEvent::Matched(m) = arrive(&mut e, 1, 7, 0, "y") else {
        panic!()
    };
    assert_eq!(m.recv, 5);
}

#[test]
fn posted_receive_takes_earliest_arrived_message() {
    let mut e = engine(3);
    arrive(&mut e, 2, 3, 0, "from2");
    arrive(&mut e, 0, 3, 0, "from0");
    arrive(&mut e, 1, 4, 0, "from1-tag4");
    assert_eq!(
        took(e.post_recv(C, Source::Any, Tag::Value(3), 1).unwrap()).msg,
        "from2"
    );
    assert_eq!(
        took(e.post_recv(C, Source::Any, Tag::Any, 2).unwrap()).msg,
        "from0"
    );
    assert_eq!(
        took(e.post_recv(C, Source::Rank(1), Tag::Any, 3).unwrap()).msg,
        "from1-tag4"
    );
}

#[test]
fn any_tag_never_matches_negative_tags() {
    let mut e = engine(1);
    assert_eq!(
        arrive(&mut e, 0, -1, 8, "internal"),
        MatchEvent::Queued {
            envelope: env(0, -1),
            len: 8
        }
    );
    assert_eq!(e.iprobe(C, Source::Any, Tag::Any).unwrap(), None);
    assert_eq!(e.iprobe(C, Source::Rank(0), Tag::Any).unwrap(), None);
    let h = posted(e.post_recv(C, Source::Rank(0), Tag::Any, 1).unwrap());
    let h2 = posted(e.post_recv(C, Source::Any, Tag::Any, 2).unwrap());
    // An exact negative tag does match.
    assert_eq!(
        took(e.post_recv(C, Source::Rank(0), Tag::Value(-1), 3).unwrap()),
        matched(3, "internal", 0, -1, 8)
    );
    // A negative-tag arrival passes the ANY_TAG receives by.
    assert!(matches!(
        arrive(&mut e, 0, -2, 0, "x"),
        MatchEvent::Queued { .. }
    ));
    assert_eq!(e.cancel(h), Some(1));
    assert_eq!(e.cancel(h2), Some(2));
}

#[test]
fn out_of_order_arrivals_are_parked_and_drained_in_order() {
    let mut e = engine(2);
    posted(e.post_recv(C, Source::Rank(0), Tag::Any, 100).unwrap());
    assert_eq!(
        e.handle_arrival(C, 0, 1, 2, 30, "s2").unwrap(),
        Arrival::Parked
    );
    assert_eq!(
        e.handle_arrival(C, 0, 1, 1, 20, "s1").unwrap(),
        Arrival::Parked
    );
    assert_eq!(e.poll_matched(), None);
    let st = e.unexpected_stats(C, 0).unwrap();
    assert_eq!(
        (st.parked_messages, st.parked_bytes, st.messages),
        (2, 50, 0)
    );
    // Another peer is unaffected by peer 0's gap.
    assert_eq!(
        e.handle_arrival(C, 1, 1, 0, 1, "p1").unwrap(),
        Arrival::Delivered { events: 1 }
    );
    assert!(matches!(e.poll_matched(), Some(MatchEvent::Queued { .. })));
    assert_eq!(
        e.handle_arrival(C, 0, 1, 0, 10, "s0").unwrap(),
        Arrival::Delivered { events: 3 }
    );
    assert_eq!(
        e.poll_matched(),
        Some(MatchEvent::Matched(matched(100, "s0", 0, 1, 10)))
    );
    assert_eq!(
        e.poll_matched(),
        Some(MatchEvent::Queued {
            envelope: env(0, 1),
            len: 20
        })
    );
    assert_eq!(
        e.poll_matched(),
        Some(MatchEvent::Queued {
            envelope: env(0, 1),
            len: 30
        })
    );
    assert_eq!(e.poll_matched(), None);
    assert_eq!(e.expected_seq(C, 0).unwrap(), 3);
    let st = e.unexpected_stats(C, 0).unwrap();
    assert_eq!(
        st,
        UnexpectedStats {
            messages: 2,
            bytes: 50,
            parked_messages: 0,
            parked_bytes: 0
        }
    );
    // Arrival order of the drained ones is their sequence order.
    assert_eq!(
        took(e.post_recv(C, Source::Rank(0), Tag::Any, 1).unwrap()).msg,
        "s1"
    );
}

#[test]
fn sequence_numbers_wrap_around() {
    let mut e = E::new();
    e.add_context_with_first_seq(C, 1, u16::MAX - 1).unwrap();
    let mut tx = SendSequencer::new();
    tx.add_context_with_first_seq(C, 1, u16::MAX - 1).unwrap();
    let seqs: Vec<u16> = (0..4).map(|_| tx.next_seq(C, 0).unwrap()).collect();
    assert_eq!(seqs, vec![65534, 65535, 0, 1]);
    assert_eq!(
        e.handle_arrival(C, 0, 0, 1, 0, "d").unwrap(),
        Arrival::Parked
    );
    assert_eq!(
        e.handle_arrival(C, 0, 0, 0, 0, "c").unwrap(),
        Arrival::Parked
    );
    assert_eq!(
        e.handle_arrival(C, 0, 0, 65535, 0, "b").unwrap(),
        Arrival::Parked
    );
    assert_eq!(
        e.handle_arrival(C, 0, 0, 65534, 0, "a").unwrap(),
        Arrival::Delivered { events: 4 }
    );
    let order: Vec<&str> = (0..4)
        .map(|i| took(e.post_recv(C, Source::Any, Tag::Any, i).unwrap()).msg)
        .collect();
    assert_eq!(order, vec!["a", "b", "c", "d"]);
    assert_eq!(e.expected_seq(C, 0).unwrap(), 2);
}

#[test]
fn bad_sequence_numbers_are_rejected_with_payload() {
    let mut e = engine(1);
    e.handle_arrival(C, 0, 0, 0, 0, "a").unwrap();
    assert_eq!(
        e.handle_arrival(C, 0, 0, 0, 0, "again").unwrap_err(),
        (
            MatchError::StaleSequence {
                context: C,
                source: 0,
                seq: 0,
                expected: 1
            },
            "again"
        )
    );
    e.handle_arrival(C, 0, 0, 5, 0, "p").unwrap();
    assert_eq!(
        e.handle_arrival(C, 0, 0, 5, 0, "dup").unwrap_err(),
        (
            MatchError::DuplicateSequence {
                context: C,
                source: 0,
                seq: 5
            },
            "dup"
        )
    );
    assert!(matches!(
        e.handle_arrival(C, 9, 0, 0, 0, "x").unwrap_err().0,
        MatchError::RankOutOfRange { rank: 9, .. }
    ));
    assert_eq!(
        e.handle_arrival(2, 0, 0, 0, 0, "x").unwrap_err().0,
        MatchError::UnknownContext(2)
    );
}

#[test]
fn probe_does_not_remove() {
    let mut e = engine(2);
    arrive(&mut e, 1, 4, 12, "m");
    let info = ProbeOutcome::Found(MessageInfo {
        envelope: env(1, 4),
        len: 12,
    });
    assert_eq!(
        e.iprobe(C, Source::Any, Tag::Any).unwrap(),
        Some(info.clone())
    );
    assert_eq!(
        e.iprobe(C, Source::Rank(1), Tag::Value(4)).unwrap(),
        Some(info)
    );
    assert_eq!(e.iprobe(C, Source::Rank(0), Tag::Any).unwrap(), None);
    assert_eq!(e.total_stats().messages, 1);
    assert_eq!(
        took(e.post_recv(C, Source::Rank(1), Tag::Value(4), 7).unwrap()).msg,
        "m"
    );
}

#[test]
fn mprobe_removes_message_from_matching() {
    let mut e = engine(2);
    arrive(&mut e, 0, 2, 64, "m");
    let Some(ProbeOutcome::Found(h)) = e.improbe(C, Source::Any, Tag::Value(2)).unwrap() else {
        panic!()
    };
    assert_eq!((h.envelope, h.len, h.msg), (env(0, 2), 64, "m"));
    assert_eq!(e.iprobe(C, Source::Any, Tag::Any).unwrap(), None);
    assert_eq!(e.improbe(C, Source::Any, Tag::Any).unwrap(), None);
    assert_eq!(e.total_stats(), UnexpectedStats::default());
    posted(e.post_recv(C, Source::Rank(0), Tag::Value(2), 1).unwrap());
}

#[test]
fn cancel_reports_whether_still_posted() {
    let mut e = engine(1);
    let h1 = posted(e.post_recv(C, Source::Rank(0), Tag::Value(1), 1).unwrap());
    let h2 = posted(e.post_recv(C, Source::Any, Tag::Any, 2).unwrap());
    assert_eq!(e.cancel(h1), Some(1));
    assert_eq!(e.cancel(h1), None);
    assert_eq!(e.posted_count(), 1);
    // The cancelled receive no longer matches; the wildcard does.
    assert_eq!(
        arrive(&mut e, 0, 1, 0, "m"),
        MatchEvent::Matched(matched(2, "m", 0, 1, 0))
    );
    assert_eq!(e.cancel(h2), None, "already matched");
    // A reused slot does not revive an old handle.
    let h3 = posted(e.post_recv(C, Source::Rank(0), Tag::Value(1), 3).unwrap());
    assert_eq!(e.cancel(h1), None);
    assert_eq!(e.cancel(h3), Some(3));
}

#[test]
fn proc_null_completes_immediately() {
    let mut e = engine(1);
    arrive(&mut e, 0, 0, 0, "m");
    assert_eq!(
        e.post_recv(C, Source::ProcNull, Tag::Any, 5).unwrap(),
        PostOutcome::ProcNull { recv: 5 }
    );
    assert_eq!(e.posted_count(), 0);
    assert_eq!(
        e.iprobe(C, Source::ProcNull, Tag::Value(0)).unwrap(),
        Some(ProbeOutcome::ProcNull)
    );
    assert_eq!(
        e.improbe(C, Source::ProcNull, Tag::Any).unwrap(),
        Some(ProbeOutcome::ProcNull)
    );
    // The real message was untouched.
    assert_eq!(e.total_stats().messages, 1);
}

#[test]
fn accounting_per_peer_context_and_total() {
    let mut e = engine(3);
    e.add_context(2, 3).unwrap();
    arrive(&mut e, 0, 0, 100, "a");
    arrive(&mut e, 0, 1, 50, "b");
    arrive(&mut e, 2, 1, 7, "c");
    e.handle_arrival(2, 1, 0, 0, 1000, "d").unwrap();
    e.handle_arrival(2, 1, 0, 3, 9, "parked").unwrap();
    while e.poll_matched().is_some() {}
    let s = |m, b, pm, pb| UnexpectedStats {
        messages: m,
        bytes: b,
        parked_messages: pm,
        parked_bytes: pb,
    };
    assert_eq!(e.unexpected_stats(C, 0).unwrap(), s(2, 150, 0, 0));
    assert_eq!(e.unexpected_stats(C, 1).unwrap(), s(0, 0, 0, 0));
    assert_eq!(e.unexpected_stats(C, 2).unwrap(), s(1, 7, 0, 0));
    assert_eq!(e.unexpected_stats(2, 1).unwrap(), s(1, 1000, 1, 9));
    assert_eq!(e.context_stats(C).unwrap(), s(3, 157, 0, 0));
    assert_eq!(e.total_stats(), s(4, 1157, 1, 9));
    took(e.post_recv(C, Source::Rank(0), Tag::Value(1), 1).unwrap());
    assert_eq!(e.unexpected_stats(C, 0).unwrap(), s(1, 100, 0, 0));
    assert_eq!(e.total_stats(), s(3, 1107, 1, 9));
    let removed = e.remove_context(2).unwrap();
    assert_eq!(removed.unexpected.len(), 2);
    assert_eq!(e.total_stats(), s(2, 107, 0, 0));
}

#[test]
fn contexts_are_isolated() {
    let mut e = engine(2);
    e.add_context(2, 2).unwrap();
    assert_eq!(e.add_context(2, 2), Err(MatchError::ContextExists(2)));
    let h = posted(e.post_recv(2, Source::Any, Tag::Any, 1).unwrap());
    // Same (source, tag) on context C does not match the receive on 2.
    assert!(matches!(
        arrive(&mut e, 0, 0, 0, "on C"),
        MatchEvent::Queued { .. }
    ));
    assert_eq!(e.iprobe(2, Source::Any, Tag::Any).unwrap(), None);
    // Sequence numbers are per context too.
    assert_eq!(e.expected_seq(C, 0).unwrap(), 1);
    assert_eq!(e.expected_seq(2, 0).unwrap(), 0);
    let removed = e.remove_context(2).unwrap();
    assert_eq!(removed.posted, vec![1]);
    assert_eq!(e.cancel(h), None, "handle is stale after context removal");
    assert_eq!(
        e.post_recv(2, Source::Any, Tag::Any, 1).unwrap_err(),
        MatchError::UnknownContext(2)
    );
    assert!(matches!(
        e.post_recv(C, Source::Rank(2), Tag::Any, 1).unwrap_err(),
        MatchError::RankOutOfRange { .. }
    ));
    // Two engines in one process are independent.
    let mut other = engine(2);
    assert_eq!(other.iprobe(C, Source::Any, Tag::Any).unwrap(), None);
    assert!(e.iprobe(C, Source::Any, Tag::Any).unwrap().is_some());
}

#[test]
fn remove_context_returns_leftovers_in_order() {
    let mut e = engine(2);
    posted(e.post_recv(C, Source::Rank(0), Tag::Value(9), 1).unwrap());
    posted(e.post_recv(C, Source::Any, Tag::Value(8), 2).unwrap());
    posted(e.post_recv(C, Source::Rank(1), Tag::Value(9), 3).unwrap());
    arrive(&mut e, 1, 1, 0, "u1");
    arrive(&mut e, 0, 1, 0, "u0");
    e.handle_arrival(C, 0, 1, 5, 0, "parked").unwrap();
    let r = e.remove_context(C).unwrap();
    assert_eq!(r.posted, vec![1, 2, 3]);
    let msgs: Vec<_> = r.unexpected.iter().map(|m| m.msg).collect();
    assert_eq!(msgs, vec!["u1", "u0", "parked"]);
    assert_eq!(e.total_stats(), UnexpectedStats::default());
    assert_eq!(e.posted_count(), 0);
    assert!(e.remove_context(C).is_err());
}

#[test]
fn any_source_post_ignores_idle_peers() {
    // 100k idle peers: an ANY_SOURCE post touches only pending messages.
    let mut e: Engine<u32, u32> = Engine::new();
    e.add_context(C, 100_000).unwrap();
    e.handle_arrival(C, 99_999, 3, 0, 0, 1).unwrap();
    e.poll_matched();
    let m = match e.post_recv(C, Source::Any, Tag::Any, 0).unwrap() {
        PostOutcome::Matched(m) => m,
        o => panic!("{o:?}"),
    };
    assert_eq!(m.envelope.source, 99_999);
}

#[test]
fn a_cancelled_send_is_taken_out_of_the_unexpected_queue_by_payload() {
    let mut e = engine(2);
    arrive(&mut e, 1, 7, 10, "first");
    arrive(&mut e, 1, 7, 20, "second");
    arrive(&mut e, 1, 8, 30, "other tag");
    // The later of two same-envelope messages goes; order of the rest holds.
    let t = e.take_unexpected(C, 1, 7, |m| *m == "second").unwrap();
    assert_eq!((t.msg, t.len, t.envelope), ("second", 20, env(1, 7)));
    assert!(e.take_unexpected(C, 1, 7, |m| *m == "second").is_none());
    assert!(e.take_unexpected(C, 1, 8, |m| *m == "first").is_none());
    assert!(
        e.take_unexpected(C, 5, 7, |_| true).is_none(),
        "unknown rank"
    );
    let m = took(e.post_recv(C, Source::Rank(1), Tag::Any, 100).unwrap());
    assert_eq!(m, matched(100, "first", 1, 7, 10));
    let m = took(e.post_recv(C, Source::Any, Tag::Any, 101).unwrap());
    assert_eq!(m, matched(101, "other tag", 1, 8, 30));
    assert!(matches!(
        e.post_recv(C, Source::Any, Tag::Any, 102).unwrap(),
        PostOutcome::Posted(_)
    ));
}

/// A message read while a receive is about to be posted goes to an earlier
/// posted receive that fits it, else to the new receive, unless something
/// unexpected fits the new receive first (then it takes the usual path).
#[test]
fn an_arrival_before_a_post_keeps_matching_order() {
    use oxmpi_match::EarlyArrival;
    let mut e = engine(2);
    // An earlier posted receive that fits wins.
    posted(e.post_recv(C, Source::Rank(1), Tag::Value(5), 10).unwrap());
    let seq = e.expected_seq(C, 1).unwrap();
    assert_eq!(
        e.arrival_before_post(C, 1, 5, seq, C, 1, Tag::Value(5)),
        Some(EarlyArrival::Posted(10, env(1, 5)))
    );
    // Nothing posted fits: the new receive takes it, nothing is queued.
    let seq = e.expected_seq(C, 1).unwrap();
    assert_eq!(
        e.arrival_before_post(C, 1, 5, seq, C, 1, Tag::Any),
        Some(EarlyArrival::Fresh(env(1, 5)))
    );
    assert_eq!(
        e.unexpected_stats(C, 1).unwrap(),
        UnexpectedStats::default()
    );
    // A message the new receive does not fit, or one out of sequence:
    // nothing changes.
    let seq = e.expected_seq(C, 1).unwrap();
    assert_eq!(
        e.arrival_before_post(C, 1, 6, seq, C, 1, Tag::Value(5)),
        None
    );
    assert_eq!(
        e.arrival_before_post(C, 1, 5, seq.wrapping_add(1), C, 1, Tag::Value(5)),
        None
    );
    assert_eq!(e.expected_seq(C, 1).unwrap(), seq);
    // Something unexpected fits the new receive first: the usual path.
    assert!(matches!(
        arrive(&mut e, 1, 5, 8, "older"),
        MatchEvent::Queued { .. }
    ));
    let seq = e.expected_seq(C, 1).unwrap();
    assert_eq!(
        e.arrival_before_post(C, 1, 5, seq, C, 1, Tag::Value(5)),
        None
    );
}

/// A receive posted (from another sender) turns a shortcut `next` off for
/// sender 1; cancelled, it is back.
fn posted_stops_the_shortcut(e: &mut E, next: &dyn Fn(&mut E, u32) -> Option<u16>) {
    let h = posted(e.post_recv(C, Source::Rank(2), Tag::Value(9), 1).unwrap());
    assert_eq!(next(e, 1), None);
    assert!(e.cancel(h).is_some());
    assert!(next(e, 1).is_some());
}

/// A message from `src` one ahead of its next number: parked.
fn park_one_early(e: &mut E, src: u32) {
    let seq = e.expected_seq(C, src).unwrap();
    assert_eq!(
        e.handle_arrival(C, src, 4, seq.wrapping_add(1), 8, "early")
            .unwrap(),
        Arrival::Parked
    );
}

/// `fresh_seq` (the small receive's shortcut) names the next number from a
/// sender only while nothing could take that sender's next message first:
/// no receive posted anywhere, nothing of that sender unexpected with a
/// user tag, nothing of it parked. Another sender's unexpected message or
/// an internal one does not matter.
#[test]
fn fresh_seq_only_while_nothing_else_could_take_the_message() {
    let mut e = engine(3);
    let next = |e: &mut E, src| e.fresh_seq(C, src).map(|s| *s);
    assert_eq!(next(&mut e, 1), e.expected_seq(C, 1).ok());
    // A posted receive, from any sender: none.
    posted_stops_the_shortcut(&mut e, &next);
    // Sender 2's unexpected message does not stop sender 1's shortcut; its
    // own does, until received.
    assert!(matches!(
        arrive(&mut e, 2, 4, 8, "two"),
        MatchEvent::Queued { .. }
    ));
    assert_eq!(next(&mut e, 1), e.expected_seq(C, 1).ok());
    assert_eq!(next(&mut e, 2), None);
    assert!(matches!(
        arrive(&mut e, 1, 4, 8, "one"),
        MatchEvent::Queued { .. }
    ));
    assert_eq!(next(&mut e, 1), None);
    assert!(matches!(
        e.post_recv(C, Source::Rank(1), Tag::Any, 2).unwrap(),
        PostOutcome::Matched(_)
    ));
    assert_eq!(next(&mut e, 1), e.expected_seq(C, 1).ok());
    // An internal (negative-tag) unexpected message of sender 1: no user
    // receive takes it, so the shortcut stands.
    assert!(matches!(
        arrive(&mut e, 1, -4, 8, "internal"),
        MatchEvent::Queued { .. }
    ));
    assert_eq!(next(&mut e, 1), e.expected_seq(C, 1).ok());
    // Out of order: parked, so none.
    park_one_early(&mut e, 1);
    assert_eq!(next(&mut e, 1), None);
}

/// `fresh_seq_any_source` (the small receive's shortcut from any source)
/// names a sender's next number only while a receive from any source would
/// find nothing to take before that message: no receive posted anywhere,
/// nothing unexpected on the context from any sender with a user tag,
/// nothing of that sender parked. Another sender's parked message or an
/// internal unexpected one does not matter.
#[test]
fn fresh_seq_any_source_only_while_nothing_else_could_be_taken() {
    let mut e = engine(3);
    let next = |e: &mut E, src| e.fresh_seq_any_source(C, src).map(|s| *s);
    assert_eq!(next(&mut e, 1), e.expected_seq(C, 1).ok());
    assert_eq!(next(&mut e, 9), None);
    assert_eq!(e.fresh_seq_any_source(C + 1, 1), None);
    // A posted receive, from any sender: none.
    posted_stops_the_shortcut(&mut e, &next);
    // Sender 2's unexpected message stops every sender's shortcut (a
    // receive from any source would take it), until received.
    assert!(matches!(
        arrive(&mut e, 2, 4, 8, "two"),
        MatchEvent::Queued { .. }
    ));
    assert_eq!(next(&mut e, 1), None);
    assert_eq!(next(&mut e, 2), None);
    assert!(matches!(
        e.post_recv(C, Source::Any, Tag::Any, 2).unwrap(),
        PostOutcome::Matched(_)
    ));
    assert_eq!(next(&mut e, 1), e.expected_seq(C, 1).ok());
    // An internal (negative-tag) unexpected message: no user receive takes
    // it, so the shortcut stands.
    assert!(matches!(
        arrive(&mut e, 2, -4, 8, "internal"),
        MatchEvent::Queued { .. }
    ));
    assert_eq!(next(&mut e, 1), e.expected_seq(C, 1).ok());
    // Sender 1 out of order: parked, so none for sender 1; sender 2's
    // shortcut stands.
    park_one_early(&mut e, 1);
    assert_eq!(next(&mut e, 1), None);
    assert_eq!(next(&mut e, 2), e.expected_seq(C, 2).ok());
}

/// A sender's first tags are kept on hot lists (four), further ones in the
/// hash map: a tag whose receives or messages are in the map stays there
/// until that queue is empty, even when a hot list frees up, so the queue
/// of one `(source, tag)` is never split and its order holds.
#[test]
fn a_tag_in_the_map_stays_there_while_it_has_entries() {
    // Unexpected side: tags 0..4 fill the hot lists, tag 4 goes to the map.
    let mut e = engine(2);
    for (t, m) in [(0, "t0"), (1, "t1"), (2, "t2"), (3, "t3"), (4, "first 4")] {
        assert!(matches!(
            arrive(&mut e, 0, t, 1, m),
            MatchEvent::Queued { .. }
        ));
    }
    // Tag 0's list empties; another message of tag 4 arrives.
    let m = took(e.post_recv(C, Source::Rank(0), Tag::Value(0), 1).unwrap());
    assert_eq!(m.msg, "t0");
    arrive(&mut e, 0, 4, 2, "second 4");
    // And a message of a new tag, which may take the free hot list.
    arrive(&mut e, 0, 7, 3, "t7");
    let a = took(e.post_recv(C, Source::Rank(0), Tag::Value(4), 2).unwrap());
    let b = took(e.post_recv(C, Source::Rank(0), Tag::Value(4), 3).unwrap());
    assert_eq!((a.msg, b.msg), ("first 4", "second 4"));
    let c = took(e.post_recv(C, Source::Rank(0), Tag::Value(7), 4).unwrap());
    assert_eq!(c.msg, "t7");

    // Posted side: receives of tags 0..4, tag 4 in the map.
    let mut e = engine(2);
    for (t, r) in [(0, 10), (1, 11), (2, 12), (3, 13), (4, 14)] {
        posted(e.post_recv(C, Source::Rank(0), Tag::Value(t), r).unwrap());
    }
    assert!(matches!(arrive(&mut e, 0, 0, 1, "m0"), MatchEvent::Matched(m) if m.recv == 10));
    posted(e.post_recv(C, Source::Rank(0), Tag::Value(4), 15).unwrap());
    posted(e.post_recv(C, Source::Rank(0), Tag::Value(7), 16).unwrap());
    assert!(matches!(arrive(&mut e, 0, 4, 1, "m4"), MatchEvent::Matched(m) if m.recv == 14));
    assert!(matches!(arrive(&mut e, 0, 4, 1, "m4'"), MatchEvent::Matched(m) if m.recv == 15));
    assert!(matches!(arrive(&mut e, 0, 7, 1, "m7"), MatchEvent::Matched(m) if m.recv == 16));
}

/// The per-tag index of unexpected messages (for `(ANY_SOURCE, tag)`) is
/// built at the first such lookup from what is already unexpected, in
/// arrival order across senders, and kept from then on.
#[test]
fn an_any_source_lookup_sees_messages_that_came_before_it() {
    let mut e = engine(3);
    arrive(&mut e, 2, 6, 1, "from 2");
    arrive(&mut e, 0, 6, 2, "from 0");
    arrive(&mut e, 1, 9, 3, "other tag");
    let p = e.iprobe(C, Source::Any, Tag::Value(6)).unwrap();
    assert!(matches!(p, Some(ProbeOutcome::Found(i)) if i.envelope.source == 2));
    let a = took(e.post_recv(C, Source::Any, Tag::Value(6), 1).unwrap());
    assert_eq!(a.msg, "from 2");
    // Kept from then on: later arrivals, and removals by exact receives.
    arrive(&mut e, 1, 6, 4, "from 1");
    let x = took(e.post_recv(C, Source::Rank(0), Tag::Value(6), 2).unwrap());
    assert_eq!(x.msg, "from 0");
    let b = took(e.post_recv(C, Source::Any, Tag::Value(6), 3).unwrap());
    assert_eq!(b.msg, "from 1");
    posted(e.post_recv(C, Source::Any, Tag::Value(6), 4).unwrap());
    let c = took(e.post_recv(C, Source::Any, Tag::Value(9), 5).unwrap());
    assert_eq!(c.msg, "other tag");
}
