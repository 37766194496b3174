//! Naive reference model of the arbiter plus a differential harness.
//!
//! Shared by the proptest (`tests/differential.rs`) and the fuzz target
//! (`fuzz/fuzz_targets/differential.rs`, via `#[path]`). The model is
//! deliberately dumb: plain `Vec`s in order, linear search, no hashing, no
//! sequence-distance tricks beyond "is this the next number".
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};

use oxmpi_match::{
    Arrival, EarlyArrival, Engine, Envelope, Match, MatchEvent, MessageHandle, MessageInfo,
    PostOutcome, ProbeOutcome, RecvHandle, SendSequencer, Source, Tag, UnexpectedStats,
};

/// Context ids used by the harness (one found by index, one by hash).
pub const CONTEXTS: [u32; 2] = [7, 70_000];
/// Peers per context.
pub const N_PEERS: u32 = 3;

fn fits(src: Source, tag: Tag, m_src: u32, m_tag: i32) -> bool {
    let s = match src {
        Source::Rank(r) => r == m_src,
        Source::Any => true,
        Source::ProcNull => false,
    };
    let t = match tag {
        Tag::Value(t) => t == m_tag,
        Tag::Any => m_tag >= 0,
    };
    s && t
}

#[derive(Clone, Debug)]
struct MMsg {
    src: u32,
    tag: i32,
    seq: u16,
    len: usize,
    msg: u64,
}

#[derive(Clone, Debug)]
struct MPosted {
    id: usize,
    src: Source,
    tag: Tag,
    recv: u64,
}

#[derive(Default, Debug)]
struct MCtx {
    expected: Vec<u16>,
    parked: Vec<Vec<MMsg>>,
    posted: Vec<MPosted>,
    unexpected: Vec<MMsg>,
}

/// Outcome of a model post (receive handles are model ids).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelPost {
    /// Took an unexpected message.
    Matched(Match<u64, u64>),
    /// Queued with this model id.
    Posted(usize),
    /// PROC_NULL.
    ProcNull(u64),
}

/// The reference model.
#[derive(Default, Debug)]
pub struct Model {
    contexts: BTreeMap<u32, MCtx>,
    next_id: usize,
}

impl Model {
    /// Adds a context.
    pub fn add_context(&mut self, ctx: u32, n_peers: u32, first_seq: u16) {
        self.contexts.insert(
            ctx,
            MCtx {
                expected: vec![first_seq; n_peers as usize],
                parked: vec![Vec::new(); n_peers as usize],
                ..MCtx::default()
            },
        );
    }

    /// Posts a receive.
    pub fn post(&mut self, ctx: u32, src: Source, tag: Tag, recv: u64) -> ModelPost {
        if src == Source::ProcNull {
            return ModelPost::ProcNull(recv);
        }
        let c = self.contexts.get_mut(&ctx).unwrap();
        if let Some(i) = c
            .unexpected
            .iter()
            .position(|m| fits(src, tag, m.src, m.tag))
        {
            let m = c.unexpected.remove(i);
            return ModelPost::Matched(Match {
                recv,
                msg: m.msg,
                envelope: Envelope {
                    context: ctx,
                    source: m.src,
                    tag: m.tag,
                },
                len: m.len,
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        c.posted.push(MPosted { id, src, tag, recv });
        ModelPost::Posted(id)
    }

    fn deliver(ctx: u32, c: &mut MCtx, m: MMsg, out: &mut Vec<MatchEvent<u64, u64>>) {
        let envelope = Envelope {
            context: ctx,
            source: m.src,
            tag: m.tag,
        };
        if let Some(i) = c
            .posted
            .iter()
            .position(|p| fits(p.src, p.tag, m.src, m.tag))
        {
            let p = c.posted.remove(i);
            out.push(MatchEvent::Matched(Match {
                recv: p.recv,
                msg: m.msg,
                envelope,
                len: m.len,
            }));
        } else {
            out.push(MatchEvent::Queued {
                envelope,
                len: m.len,
            });
            c.unexpected.push(m);
        }
    }

    /// An arrival; returns the immediate outcome and all decisions.
    pub fn arrival(
        &mut self,
        ctx: u32,
        src: u32,
        tag: i32,
        seq: u16,
        len: usize,
        msg: u64,
    ) -> (Arrival, Vec<MatchEvent<u64, u64>>) {
        let c = self.contexts.get_mut(&ctx).unwrap();
        let m = MMsg {
            src,
            tag,
            seq,
            len,
            msg,
        };
        if seq != c.expected[src as usize] {
            c.parked[src as usize].push(m);
            return (Arrival::Parked, Vec::new());
        }
        let mut out = Vec::new();
        Self::deliver(ctx, c, m, &mut out);
        c.expected[src as usize] = seq.wrapping_add(1);
        while let Some(i) = c.parked[src as usize]
            .iter()
            .position(|p| p.seq == c.expected[src as usize])
        {
            let p = c.parked[src as usize].remove(i);
            Self::deliver(ctx, c, p, &mut out);
            c.expected[src as usize] = c.expected[src as usize].wrapping_add(1);
        }
        (Arrival::Delivered { events: out.len() }, out)
    }

    /// Non-removing probe.
    pub fn iprobe(&self, ctx: u32, src: Source, tag: Tag) -> Option<ProbeOutcome<MessageInfo>> {
        if src == Source::ProcNull {
            return Some(ProbeOutcome::ProcNull);
        }
        let c = &self.contexts[&ctx];
        c.unexpected
            .iter()
            .find(|m| fits(src, tag, m.src, m.tag))
            .map(|m| {
                ProbeOutcome::Found(MessageInfo {
                    envelope: Envelope {
                        context: ctx,
                        source: m.src,
                        tag: m.tag,
                    },
                    len: m.len,
                })
            })
    }

    /// Removing probe.
    pub fn improbe(
        &mut self,
        ctx: u32,
        src: Source,
        tag: Tag,
    ) -> Option<ProbeOutcome<MessageHandle<u64>>> {
        if src == Source::ProcNull {
            return Some(ProbeOutcome::ProcNull);
        }
        self.take_first(ctx, |m| fits(src, tag, m.src, m.tag))
            .map(ProbeOutcome::Found)
    }

    /// Takes out the earliest-arrived unexpected message that `pred` accepts.
    fn take_first(&mut self, ctx: u32, pred: impl Fn(&MMsg) -> bool) -> Option<MessageHandle<u64>> {
        let c = self.contexts.get_mut(&ctx).unwrap();
        let i = c.unexpected.iter().position(pred)?;
        let m = c.unexpected.remove(i);
        Some(MessageHandle {
            envelope: Envelope {
                context: ctx,
                source: m.src,
                tag: m.tag,
            },
            len: m.len,
            msg: m.msg,
        })
    }

    /// The payloads of `peer`'s unexpected messages of `tag`, in arrival
    /// order.
    pub fn unexpected_of(&self, ctx: u32, peer: u32, tag: i32) -> Vec<u64> {
        self.contexts[&ctx]
            .unexpected
            .iter()
            .filter(|m| m.src == peer && m.tag == tag)
            .map(|m| m.msg)
            .collect()
    }

    /// Takes out the unexpected message with payload `msg`.
    pub fn take_unexpected(&mut self, ctx: u32, msg: u64) -> Option<MessageHandle<u64>> {
        self.take_first(ctx, |m| m.msg == msg)
    }

    /// Cancels model receive `id`.
    pub fn cancel(&mut self, id: usize) -> Option<u64> {
        for c in self.contexts.values_mut() {
            if let Some(i) = c.posted.iter().position(|p| p.id == id) {
                return Some(c.posted.remove(i).recv);
            }
        }
        None
    }

    /// Accounting for one peer.
    pub fn stats(&self, ctx: u32, peer: u32) -> UnexpectedStats {
        let c = &self.contexts[&ctx];
        let mut s = UnexpectedStats::default();
        for m in c.unexpected.iter().filter(|m| m.src == peer) {
            s.messages += 1;
            s.bytes += m.len;
        }
        for m in &c.parked[peer as usize] {
            s.parked_messages += 1;
            s.parked_bytes += m.len;
        }
        s
    }

    /// Payload ids of the unexpected messages with a user tag (0 or more)
    /// on `ctx`, in arrival order: what a receive from any source could take.
    pub fn user_unexpected(&self, ctx: u32) -> Vec<u64> {
        let c = &self.contexts[&ctx];
        c.unexpected
            .iter()
            .filter(|m| m.tag >= 0)
            .map(|m| m.msg)
            .collect()
    }

    /// Posted tokens in posting order and unexpected payload ids in arrival order.
    pub fn leftovers(&self, ctx: u32) -> (Vec<u64>, Vec<u64>) {
        let c = &self.contexts[&ctx];
        (
            c.posted.iter().map(|p| p.recv).collect(),
            c.unexpected.iter().map(|m| m.msg).collect(),
        )
    }
}

/// One step of a generated operation stream.
#[derive(Clone, Debug)]
pub enum Op {
    /// Post a receive.
    Post { ctx: usize, src: Source, tag: Tag },
    /// The sender side of `peer` sends a message (stamped, put in flight).
    Send {
        ctx: usize,
        peer: u32,
        tag: i32,
        len: usize,
    },
    /// Deliver one of the first `window` in-flight messages of `peer`.
    Deliver { ctx: usize, peer: u32, pick: usize },
    /// Non-removing probe.
    Iprobe { ctx: usize, src: Source, tag: Tag },
    /// Removing probe.
    Improbe { ctx: usize, src: Source, tag: Tag },
    /// Cancel one of the receives posted so far (maybe already done).
    Cancel { pick: usize },
    /// The sender cancels one of its unmatched sends of `tag` to this
    /// rank (`Engine::take_unexpected` with the message's payload): the
    /// `pick`th of `peer`'s unexpected messages of `tag`, or one that is
    /// not there.
    CancelSend {
        ctx: usize,
        peer: u32,
        tag: i32,
        pick: usize,
    },
    /// Deliver as `Deliver` does, through `Engine::arrival_before_post`
    /// with a receive `(post_src, post_tag)` on `post_ctx` about to be
    /// posted, then post it (the PML's receive of an arrived message).
    DeliverThenPost {
        ctx: usize,
        peer: u32,
        pick: usize,
        post_ctx: usize,
        post_src: u32,
        post_tag: Tag,
    },
}

/// Source selectors used by generators: ranks, ANY_SOURCE, PROC_NULL.
pub fn source_from(n: u8) -> Source {
    match n % (N_PEERS as u8 + 2) {
        r if (r as u32) < N_PEERS => Source::Rank(r as u32),
        r if r as u32 == N_PEERS => Source::Any,
        _ => Source::ProcNull,
    }
}

/// Tags used by generators: five user tags and two internal negative
/// ones, more than a sender has hot lists in the engine, so that receives
/// go both to hot lists and to the hash map, and tags move between them.
pub fn msg_tag_from(n: u8) -> i32 {
    [0, 1, 2, 3, 4, -1, -2][(n % 7) as usize]
}

/// Tag selectors used by generators: message tags plus ANY_TAG.
pub fn tag_from(n: u8) -> Tag {
    match n % 8 {
        7 => Tag::Any,
        k => Tag::Value(msg_tag_from(k)),
    }
}

type Flight = VecDeque<(u16, i32, usize, u64)>;

/// Runs the engine and the model side by side, panicking on divergence.
pub struct Harness {
    engine: Engine<u64, u64>,
    model: Model,
    sender: SendSequencer,
    in_flight: Vec<Vec<Flight>>,
    handles: Vec<(RecvHandle, usize)>,
    next_recv: u64,
    next_msg: u64,
    window: usize,
}

impl Harness {
    /// A harness whose contexts start their sequences at `first_seqs` and
    /// whose delivery may reorder within `window` messages per peer.
    pub fn new(first_seqs: [u16; 2], window: usize) -> Self {
        let mut engine = Engine::new();
        let mut model = Model::default();
        let mut sender = SendSequencer::new();
        for (ctx, first) in CONTEXTS.iter().zip(first_seqs) {
            engine
                .add_context_with_first_seq(*ctx, N_PEERS, first)
                .unwrap();
            sender
                .add_context_with_first_seq(*ctx, N_PEERS, first)
                .unwrap();
            model.add_context(*ctx, N_PEERS, first);
        }
        Harness {
            engine,
            model,
            sender,
            in_flight: vec![vec![VecDeque::new(); N_PEERS as usize]; CONTEXTS.len()],
            handles: Vec::new(),
            next_recv: 0,
            next_msg: 1000,
            window: window.max(1),
        }
    }

    fn drain_events(&mut self) -> Vec<MatchEvent<u64, u64>> {
        let mut out = Vec::new();
        while let Some(e) = self.engine.poll_matched() {
            out.push(e);
        }
        out
    }

    /// Posts receive `recv` on the engine and compares with the model's
    /// outcome `want` for the same post.
    fn post_engine(&mut self, op: &Op, c: u32, src: Source, tag: Tag, recv: u64, want: ModelPost) {
        let got = self.engine.post_recv(c, src, tag, recv).unwrap();
        match (got, want) {
            (PostOutcome::Posted(h), ModelPost::Posted(id)) => self.handles.push((h, id)),
            (PostOutcome::Matched(a), ModelPost::Matched(b)) => assert_eq!(a, b, "{op:?}"),
            (PostOutcome::ProcNull { recv: a }, ModelPost::ProcNull(b)) => {
                assert_eq!(a, b)
            }
            (g, w) => panic!("{op:?}: engine {g:?} model {w:?}"),
        }
    }

    /// Applies one operation to both sides and compares the results.
    pub fn apply(&mut self, op: &Op) {
        self.apply_op(op);
        self.engine.check_invariants();
    }

    fn apply_op(&mut self, op: &Op) {
        match *op {
            Op::Post { ctx, src, tag } => {
                let c = CONTEXTS[ctx];
                let recv = self.next_recv;
                self.next_recv += 1;
                let want = self.model.post(c, src, tag, recv);
                self.post_engine(op, c, src, tag, recv, want);
            }
            Op::DeliverThenPost {
                ctx,
                peer,
                pick,
                post_ctx,
                post_src,
                post_tag,
            } => {
                let (pc, src) = (CONTEXTS[post_ctx], Source::Rank(post_src));
                let q = &mut self.in_flight[ctx][peer as usize];
                if q.is_empty() {
                    return self.apply(&Op::Post {
                        ctx: post_ctx,
                        src,
                        tag: post_tag,
                    });
                }
                let i = pick % q.len().min(self.window);
                let (seq, tag, len, msg) = q.remove(i).unwrap();
                let c = CONTEXTS[ctx];
                let recv = self.next_recv;
                self.next_recv += 1;
                let (want, want_events) = self.model.arrival(c, peer, tag, seq, len, msg);
                let want_post = self.model.post(pc, src, post_tag, recv);
                // The small receive's shortcut (`fresh_seq`): where it names
                // this message's number for a user receive from its sender
                // that the message fits, the answer below must be Fresh.
                let user_fit = match post_tag {
                    Tag::Value(t) => t >= 0 && t == tag,
                    Tag::Any => tag >= 0,
                };
                let shortcut = (pc == c && post_src == peer && user_fit)
                    .then(|| self.engine.fresh_seq(c, peer).map(|s| *s))
                    .flatten()
                    == Some(seq);
                let early = self
                    .engine
                    .arrival_before_post(c, peer, tag, seq, pc, post_src, post_tag);
                assert!(
                    !shortcut || matches!(early, Some(EarlyArrival::Fresh(_))),
                    "fresh_seq named seq {seq} but the arrival went {early:?}: {op:?}"
                );
                match early {
                    Some(EarlyArrival::Posted(r, envelope)) => {
                        assert_eq!(want, Arrival::Delivered { events: 1 }, "{op:?}");
                        let m = Match {
                            recv: r,
                            msg,
                            envelope,
                            len,
                        };
                        assert_eq!(want_events, vec![MatchEvent::Matched(m)], "{op:?}");
                        self.post_engine(op, pc, src, post_tag, recv, want_post);
                    }
                    Some(EarlyArrival::Fresh(envelope)) => {
                        assert_eq!(want, Arrival::Delivered { events: 1 }, "{op:?}");
                        let queued = MatchEvent::Queued { envelope, len };
                        assert_eq!(want_events, vec![queued], "{op:?}");
                        let m = Match {
                            recv,
                            msg,
                            envelope,
                            len,
                        };
                        assert_eq!(want_post, ModelPost::Matched(m), "{op:?}");
                    }
                    None => {
                        let got = self
                            .engine
                            .handle_arrival(c, peer, tag, seq, len, msg)
                            .unwrap();
                        assert_eq!(got, want, "{op:?}");
                        assert_eq!(self.drain_events(), want_events, "{op:?}");
                        self.post_engine(op, pc, src, post_tag, recv, want_post);
                    }
                }
            }
            Op::Send {
                ctx,
                peer,
                tag,
                len,
            } => {
                let seq = self.sender.next_seq(CONTEXTS[ctx], peer).unwrap();
                let msg = self.next_msg;
                self.next_msg += 1;
                self.in_flight[ctx][peer as usize].push_back((seq, tag, len, msg));
            }
            Op::Deliver { ctx, peer, pick } => {
                let q = &mut self.in_flight[ctx][peer as usize];
                if q.is_empty() {
                    return;
                }
                let i = pick % q.len().min(self.window);
                let (seq, tag, len, msg) = q.remove(i).unwrap();
                let c = CONTEXTS[ctx];
                // The small receive's shortcut from any source
                // (`fresh_seq_any_source`): where it names this message's
                // number, the message must end up the only one a receive
                // from any source could take.
                let any_source =
                    tag >= 0 && self.engine.fresh_seq_any_source(c, peer).map(|s| *s) == Some(seq);
                // Every other message tries the PML's fast path first, as
                // the PML does for eager data.
                let fast = if msg % 2 == 0 {
                    self.engine.match_arrival(c, peer, tag, seq)
                } else {
                    None
                };
                let (got, events) = match fast {
                    Some((recv, envelope)) => (
                        Arrival::Delivered { events: 1 },
                        vec![MatchEvent::Matched(Match {
                            recv,
                            msg,
                            envelope,
                            len,
                        })],
                    ),
                    None => {
                        let got = self
                            .engine
                            .handle_arrival(c, peer, tag, seq, len, msg)
                            .unwrap();
                        (got, self.drain_events())
                    }
                };
                let (want, want_events) = self.model.arrival(c, peer, tag, seq, len, msg);
                assert_eq!(got, want, "{op:?}");
                assert_eq!(events, want_events, "{op:?}");
                if any_source {
                    assert!(
                        matches!(events[..], [MatchEvent::Queued { .. }]),
                        "fresh_seq_any_source named seq {seq}, the arrival went {events:?}: {op:?}"
                    );
                    assert_eq!(self.model.user_unexpected(c), vec![msg], "{op:?}");
                }
            }
            Op::Iprobe { ctx, src, tag } => {
                let c = CONTEXTS[ctx];
                let got = self.engine.iprobe(c, src, tag).unwrap();
                assert_eq!(got, self.model.iprobe(c, src, tag), "{op:?}");
            }
            Op::Improbe { ctx, src, tag } => {
                let c = CONTEXTS[ctx];
                let got = self.engine.improbe(c, src, tag).unwrap();
                assert_eq!(got, self.model.improbe(c, src, tag), "{op:?}");
            }
            Op::Cancel { pick } => {
                if self.handles.is_empty() {
                    return;
                }
                let (h, id) = self.handles[pick % self.handles.len()];
                assert_eq!(self.engine.cancel(h), self.model.cancel(id), "{op:?}");
            }
            Op::CancelSend {
                ctx,
                peer,
                tag,
                pick,
            } => {
                let c = CONTEXTS[ctx];
                let candidates = self.model.unexpected_of(c, peer, tag);
                // One of them, or (one time in four) a payload never sent.
                let target = if candidates.is_empty() || pick % 4 == 3 {
                    u64::MAX
                } else {
                    candidates[pick % candidates.len()]
                };
                let got = self.engine.take_unexpected(c, peer, tag, |m| *m == target);
                assert_eq!(got, self.model.take_unexpected(c, target), "{op:?}");
            }
        }
        self.check_stats();
    }

    fn check_stats(&self) {
        let mut total = UnexpectedStats::default();
        for &c in &CONTEXTS {
            let mut ctx_sum = UnexpectedStats::default();
            for p in 0..N_PEERS {
                let got = self.engine.unexpected_stats(c, p).unwrap();
                assert_eq!(got, self.model.stats(c, p), "stats ctx {c} peer {p}");
                ctx_sum.messages += got.messages;
                ctx_sum.bytes += got.bytes;
                ctx_sum.parked_messages += got.parked_messages;
                ctx_sum.parked_bytes += got.parked_bytes;
            }
            assert_eq!(self.engine.context_stats(c).unwrap(), ctx_sum);
            total.messages += ctx_sum.messages;
            total.bytes += ctx_sum.bytes;
            total.parked_messages += ctx_sum.parked_messages;
            total.parked_bytes += ctx_sum.parked_bytes;
        }
        assert_eq!(self.engine.total_stats(), total);
    }

    /// Delivers everything still in flight (in order), then removes the
    /// contexts and compares what is left on both sides.
    pub fn finish(mut self) {
        for ctx in 0..CONTEXTS.len() {
            for peer in 0..N_PEERS {
                while !self.in_flight[ctx][peer as usize].is_empty() {
                    self.apply(&Op::Deliver { ctx, peer, pick: 0 });
                }
            }
        }
        for &c in &CONTEXTS {
            for p in 0..N_PEERS {
                assert_eq!(
                    self.engine.unexpected_stats(c, p).unwrap().parked_messages,
                    0
                );
            }
            let removed = self.engine.remove_context(c).unwrap();
            let (posted, unexpected) = self.model.leftovers(c);
            assert_eq!(removed.posted, posted);
            let got: Vec<u64> = removed.unexpected.iter().map(|m| m.msg).collect();
            assert_eq!(got, unexpected);
        }
        assert_eq!(self.engine.total_stats(), UnexpectedStats::default());
        assert_eq!(self.engine.posted_count(), 0);
    }
}
