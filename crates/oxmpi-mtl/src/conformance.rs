//! The conformance suite every MTL must pass (as `oxmpi-btl`'s is for
//! BTLs): each check builds a fresh [`Job`] of connected endpoints, drives
//! it with progress, and panics with a message naming the check and the
//! MTL on any violation.
//!
//! Checked: content, source, tag and length of messages from 0 bytes to
//! 1 MiB; non-overtaking order per sender; `MPI_ANY_SOURCE` and
//! `MPI_ANY_TAG`; unexpected messages received later; communicators that
//! never match each other's messages; truncation reported with the
//! message's length; a synchronous send that completes only once the
//! receive has matched; probe (leaves the message), matched probe (claims
//! it from every other receive) and its receive; cancel of a posted
//! receive, and not of a matched one; tags, ranks and communicator ids at
//! the edges of [`Mtl::limits`] and errors one past them, at the call;
//! unknown peers and communicators refused; a dead peer failing the
//! requests that need it; exactly one event per request (a send that
//! completed inside its call counting as its event); [`Mtl::inject`]
//! delivering in order with later sends, and refusing (sending nothing)
//! what it cannot take.

use std::collections::HashMap;

use oxmpi_btl::mem::MemRegion;

use crate::mtl::{
    Event, Mtl, MtlError, Outcome, Posted, RecvInfo, SendMode, Source, TagSel, Token,
};

/// Endpoints of one job, and how to move what is in flight.
pub struct Job<M> {
    /// The endpoints, by world rank.
    pub eps: Vec<M>,
    /// Advances the network one step; whether anything moved.
    pub pump: Box<dyn FnMut() -> bool>,
    /// Kills world rank `r` (its endpoint stays but is never driven).
    pub kill: Box<dyn FnMut(u32)>,
    events: Vec<HashMap<Token, Vec<Outcome>>>,
    dead: Vec<bool>,
}

impl<M: Mtl> Job<M> {
    /// A job of `eps`, with every endpoint a peer of every other (itself
    /// included) and communicator ids `cids` added everywhere.
    pub fn new(
        mut eps: Vec<M>,
        cids: &[u32],
        pump: Box<dyn FnMut() -> bool>,
        kill: Box<dyn FnMut(u32)>,
    ) -> Job<M> {
        let cards: Vec<Vec<u8>> = eps.iter().map(|e| e.business_card()).collect();
        let peers: Vec<(u32, &[u8])> = cards
            .iter()
            .enumerate()
            .map(|(r, c)| (r as u32, c.as_slice()))
            .collect();
        for e in &mut eps {
            e.add_peers(&peers).expect("add_peers");
            for &c in cids {
                e.add_comm(c).expect("add_comm");
            }
        }
        let n = eps.len();
        Job {
            eps,
            pump,
            kill,
            events: vec![HashMap::new(); n],
            dead: vec![false; n],
        }
    }

    /// One round: every live endpoint's progress, then one network step.
    /// Whether anything happened.
    pub fn round(&mut self) -> bool {
        let mut any = false;
        for (r, e) in self.eps.iter_mut().enumerate() {
            if self.dead[r] {
                continue;
            }
            let mut got: Vec<Event> = Vec::new();
            any |= e.progress(&mut got) > 0;
            for ev in got {
                self.events[r].entry(ev.token).or_default().push(ev.outcome);
            }
        }
        any | (self.pump)()
    }

    /// Rounds until `done` holds; panics naming `what` if the job goes
    /// quiet first.
    pub fn run_until(&mut self, what: &str, mut done: impl FnMut(&Self) -> bool) {
        let mut quiet = 0;
        while !done(self) {
            if self.round() {
                quiet = 0;
            } else {
                quiet += 1;
                assert!(quiet < 100, "{what}: the job went quiet");
            }
        }
    }

    /// Rounds until nothing moves.
    pub fn settle(&mut self) {
        let mut quiet = 0;
        while quiet < 20 {
            if self.round() {
                quiet = 0;
            } else {
                quiet += 1;
            }
        }
    }

    /// How request `token` of rank `r` ended, if it did (panics if it
    /// ended twice).
    pub fn outcome(&self, r: usize, token: Token) -> Option<&Outcome> {
        let v = self.events[r].get(&token)?;
        assert_eq!(v.len(), 1, "rank {r} request {token:?}: {} events", v.len());
        v.first()
    }

    /// Waits for request `token` of rank `r`.
    pub fn wait(&mut self, what: &str, r: usize, token: Token) -> Outcome {
        self.run_until(what, |j| j.outcome(r, token).is_some());
        self.outcome(r, token).cloned().expect("done")
    }

    /// [`Mtl::isend`] on rank `r`'s endpoint; a send that completed inside
    /// the call ([`Posted::Done`]) is recorded as its event (so that a
    /// later event for it counts twice). Panics if a synchronous send
    /// completed inside the call.
    #[allow(clippy::too_many_arguments)]
    pub fn isend(
        &mut self,
        r: usize,
        cid: u32,
        peer: u32,
        rank: u32,
        tag: i32,
        data: MemRegion,
        mode: SendMode,
        token: Token,
    ) -> Result<(), MtlError> {
        let p = self.eps[r].isend(cid, peer, rank, tag, data, mode, token)?;
        if p == Posted::Done {
            assert!(
                mode != SendMode::Synchronous,
                "{}: a synchronous send completed inside its call",
                self.eps[r].name()
            );
            self.events[r].entry(token).or_default().push(Outcome::Sent);
        }
        Ok(())
    }

    /// Marks rank `r` dead and kills it in the network.
    pub fn kill_rank(&mut self, r: u32) {
        self.dead[r as usize] = true;
        (self.kill)(r);
    }
}

#[allow(unsafe_code)]
fn region(v: &[u8]) -> MemRegion {
    // SAFETY: every region made here outlives the operations given it: the
    // checks drive each operation to completion (or cancel it) before the
    // vector is dropped or read again.
    unsafe { MemRegion::from_slice(v) }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn from(rank: u32) -> Source {
    Source::Rank { rank, peer: rank }
}

fn received(o: Outcome, what: &str) -> RecvInfo {
    match o {
        Outcome::Received(i) => i,
        o => panic!("{what}: {o:?}, not a receive"),
    }
}

/// Runs every check on the MTLs `make` builds: `make(n, cids)` gives a
/// job of `n` endpoints with communicator ids `cids`.
pub fn run_all<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    sizes_and_content(make);
    order_per_sender(make);
    wildcards(make);
    communicators_isolate(make);
    truncation(make);
    synchronous_send(make);
    probes(make);
    cancel(make);
    edges_of_the_limits(make);
    unknowns(make);
    dead_peer(make);
    inject(make);
    closed(make);
}

fn sizes_and_content<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(2, &[0]);
    let name = j.eps[0].name();
    for (k, len) in [0usize, 1, 8, 100, 4096, 65_536, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let what = format!("{name}: {len}-byte message");
        let src = pattern(len, k as u8);
        let dst = vec![0u8; len];
        let (s, r) = (Token(2 * k as u64), Token(2 * k as u64 + 1));
        // Half posted first, half unexpected.
        if k % 2 == 0 {
            j.eps[1]
                .irecv(0, from(0), TagSel::Value(5), region(&dst), r)
                .unwrap();
        }
        j.isend(0, 0, 1, 0, 5, region(&src), SendMode::Standard, s)
            .unwrap();
        if k % 2 == 1 {
            j.settle();
            j.eps[1]
                .irecv(0, from(0), TagSel::Value(5), region(&dst), r)
                .unwrap();
        }
        let info = received(j.wait(&what, 1, r), &what);
        assert_eq!(
            info,
            RecvInfo {
                source: 0,
                tag: 5,
                len,
                truncated: false
            },
            "{what}"
        );
        assert_eq!(j.wait(&what, 0, s), Outcome::Sent, "{what}");
        assert!(dst == src, "{what}: content");
    }
    // A message to oneself.
    let src = pattern(10, 9);
    let dst = vec![0u8; 10];
    j.isend(0, 0, 0, 0, 1, region(&src), SendMode::Standard, Token(100))
        .unwrap();
    j.eps[0]
        .irecv(0, from(0), TagSel::Value(1), region(&dst), Token(101))
        .unwrap();
    received(j.wait("to oneself", 0, Token(101)), "to oneself");
    assert_eq!(dst, src, "{name}: to oneself");
}

fn order_per_sender<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(3, &[0]);
    let name = j.eps[0].name();
    let n = 50u64;
    let bufs: Vec<Vec<u8>> = (0..2 * n).map(|i| vec![i as u8; 4]).collect();
    for i in 0..n {
        for s in 0..2u32 {
            let b = &bufs[(i * 2 + u64::from(s)) as usize];
            j.isend(
                s as usize,
                0,
                2,
                s,
                3,
                region(b),
                SendMode::Standard,
                Token(i),
            )
            .unwrap();
        }
    }
    let dst: Vec<Vec<u8>> = (0..2 * n).map(|_| vec![0u8; 4]).collect();
    for (k, d) in dst.iter().enumerate() {
        j.eps[2]
            .irecv(
                0,
                from((k % 2) as u32),
                TagSel::Value(3),
                region(d),
                Token(k as u64),
            )
            .unwrap();
    }
    j.run_until("order", |j| {
        (0..2 * n).all(|k| j.outcome(2, Token(k)).is_some())
    });
    for (k, d) in dst.iter().enumerate() {
        let i = k as u64 / 2;
        let s = k as u64 % 2;
        assert_eq!(
            d[0],
            (i * 2 + s) as u8,
            "{name}: message {i} of rank {s} out of order"
        );
    }
}

fn wildcards<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(3, &[0]);
    let name = j.eps[0].name();
    let a = pattern(16, 1);
    let b = pattern(16, 2);
    j.isend(0, 0, 2, 0, 10, region(&a), SendMode::Standard, Token(1))
        .unwrap();
    j.isend(1, 0, 2, 1, 20, region(&b), SendMode::Standard, Token(1))
        .unwrap();
    let d1 = vec![0u8; 16];
    let d2 = vec![0u8; 16];
    j.eps[2]
        .irecv(0, Source::Any, TagSel::Value(20), region(&d1), Token(1))
        .unwrap();
    j.eps[2]
        .irecv(0, from(0), TagSel::Any, region(&d2), Token(2))
        .unwrap();
    let i1 = received(j.wait("any source", 2, Token(1)), "any source");
    let i2 = received(j.wait("any tag", 2, Token(2)), "any tag");
    assert_eq!(
        (i1.source, i1.tag, d1 == b),
        (1, 20, true),
        "{name}: ANY_SOURCE"
    );
    assert_eq!(
        (i2.source, i2.tag, d2 == a),
        (0, 10, true),
        "{name}: ANY_TAG"
    );
    // Both wildcards.
    j.isend(1, 0, 2, 1, 7, region(&b), SendMode::Standard, Token(2))
        .unwrap();
    let d3 = vec![0u8; 16];
    j.eps[2]
        .irecv(0, Source::Any, TagSel::Any, region(&d3), Token(3))
        .unwrap();
    let i3 = received(j.wait("any, any", 2, Token(3)), "any, any");
    assert_eq!((i3.source, i3.tag), (1, 7), "{name}: ANY_SOURCE, ANY_TAG");
}

fn communicators_isolate<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(2, &[0, 1]);
    let name = j.eps[0].name();
    let a = pattern(8, 1);
    j.isend(0, 1, 1, 0, 4, region(&a), SendMode::Standard, Token(1))
        .unwrap();
    let d0 = vec![0u8; 8];
    let d1 = vec![0u8; 8];
    j.eps[1]
        .irecv(0, Source::Any, TagSel::Any, region(&d0), Token(1))
        .unwrap();
    j.settle();
    assert!(
        j.outcome(1, Token(1)).is_none(),
        "{name}: comm 0 took comm 1's message"
    );
    j.eps[1]
        .irecv(1, Source::Any, TagSel::Any, region(&d1), Token(2))
        .unwrap();
    received(j.wait("comm 1", 1, Token(2)), "comm 1");
    assert_eq!(d1, a, "{name}: comm 1");
    assert!(
        j.eps[1].cancel(Token(1)),
        "{name}: cancel of the unmatched receive"
    );
    j.settle();
    assert_eq!(j.outcome(1, Token(1)), Some(&Outcome::Cancelled));
}

fn truncation<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(2, &[0]);
    let name = j.eps[0].name();
    let a = pattern(1000, 3);
    let d = vec![0u8; 100];
    j.isend(0, 0, 1, 0, 1, region(&a), SendMode::Standard, Token(1))
        .unwrap();
    j.eps[1]
        .irecv(0, from(0), TagSel::Value(1), region(&d), Token(1))
        .unwrap();
    let i = received(j.wait("truncation", 1, Token(1)), "truncation");
    assert!(
        i.truncated && i.len == 1000,
        "{name}: truncation reported as {i:?}"
    );
    assert_eq!(d[..], a[..100], "{name}: the bytes that fit");
}

fn synchronous_send<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(2, &[0]);
    let name = j.eps[0].name();
    let a = pattern(64, 4);
    let b = pattern(64, 5);
    j.isend(0, 0, 1, 0, 2, region(&a), SendMode::Synchronous, Token(1))
        .unwrap();
    j.isend(0, 0, 1, 0, 2, region(&b), SendMode::Synchronous, Token(2))
        .unwrap();
    j.settle();
    assert!(
        j.outcome(0, Token(1)).is_none(),
        "{name}: a synchronous send completed before any receive"
    );
    let d = vec![0u8; 64];
    j.eps[1]
        .irecv(0, from(0), TagSel::Any, region(&d), Token(1))
        .unwrap();
    assert_eq!(j.wait("ssend 1", 0, Token(1)), Outcome::Sent, "{name}");
    j.settle();
    assert!(
        j.outcome(0, Token(2)).is_none(),
        "{name}: the second synchronous send completed on the first's match"
    );
    let d2 = vec![0u8; 64];
    j.eps[1]
        .irecv(0, from(0), TagSel::Any, region(&d2), Token(2))
        .unwrap();
    assert_eq!(j.wait("ssend 2", 0, Token(2)), Outcome::Sent, "{name}");
    assert!(d == a && d2 == b, "{name}: synchronous content");
}

fn probes<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(2, &[0]);
    let name = j.eps[0].name();
    let a = pattern(33, 6);
    let b = pattern(44, 7);
    assert_eq!(j.eps[1].iprobe(0, Source::Any, TagSel::Any).unwrap(), None);
    j.isend(0, 0, 1, 0, 9, region(&a), SendMode::Standard, Token(1))
        .unwrap();
    j.isend(0, 0, 1, 0, 9, region(&b), SendMode::Standard, Token(2))
        .unwrap();
    let mut found = None;
    for _ in 0..1000 {
        j.round();
        found = j.eps[1].iprobe(0, from(0), TagSel::Value(9)).unwrap();
        if found.is_some() {
            break;
        }
    }
    let p = found.unwrap_or_else(|| panic!("{name}: iprobe never found the message"));
    assert_eq!((p.source, p.tag, p.len), (0, 9, 33), "{name}: iprobe");
    // Probing again finds the same message: a probe does not take it.
    let again = j.eps[1].iprobe(0, from(0), TagSel::Value(9)).unwrap();
    assert_eq!(again.map(|i| i.len), Some(33), "{name}: iprobe consumed");
    // A matched probe claims it: a receive posted now gets the second.
    let mut claimed = None;
    for _ in 0..1000 {
        claimed = j.eps[1].improbe(0, Source::Any, TagSel::Value(9)).unwrap();
        if claimed.is_some() {
            break;
        }
        j.round();
    }
    let (m, info) = claimed.unwrap_or_else(|| panic!("{name}: improbe found nothing"));
    assert_eq!(info.len, 33, "{name}: improbe claimed the wrong message");
    let d = vec![0u8; 44];
    j.eps[1]
        .irecv(0, Source::Any, TagSel::Any, region(&d), Token(1))
        .unwrap();
    let i = received(
        j.wait("receive after improbe", 1, Token(1)),
        "after improbe",
    );
    assert!(
        i.len == 44 && d == b,
        "{name}: a receive took the claimed message"
    );
    let dm = vec![0u8; 33];
    j.eps[1].imrecv(m, region(&dm), Token(2)).unwrap();
    received(j.wait("imrecv", 1, Token(2)), "imrecv");
    assert_eq!(dm, a, "{name}: imrecv");
    assert!(
        matches!(
            j.eps[1].imrecv(m, region(&dm), Token(3)),
            Err(MtlError::UnknownMessage(_))
        ),
        "{name}: a message received twice"
    );
}

fn cancel<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(2, &[0]);
    let name = j.eps[0].name();
    let d = vec![0u8; 8];
    j.eps[1]
        .irecv(0, from(0), TagSel::Value(1), region(&d), Token(1))
        .unwrap();
    assert!(
        j.eps[1].cancel(Token(1)),
        "{name}: cancel of a posted receive"
    );
    j.settle();
    assert_eq!(j.outcome(1, Token(1)), Some(&Outcome::Cancelled), "{name}");
    // A message sent now goes to the next receive, not the cancelled one.
    let a = pattern(8, 8);
    j.isend(0, 0, 1, 0, 1, region(&a), SendMode::Standard, Token(1))
        .unwrap();
    let d2 = vec![0u8; 8];
    j.eps[1]
        .irecv(0, from(0), TagSel::Value(1), region(&d2), Token(2))
        .unwrap();
    received(j.wait("after cancel", 1, Token(2)), "after cancel");
    assert_eq!(d2, a, "{name}: after cancel");
    assert!(
        !j.eps[1].cancel(Token(2)),
        "{name}: cancelled a completed receive"
    );
    assert!(
        !j.eps[1].cancel(Token(77)),
        "{name}: cancelled an unknown request"
    );
}

fn edges_of_the_limits<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let lim = make(1, &[]).eps[0].limits();
    let top = lim.max_cid;
    let mut j = make(2, &[0, top]);
    let name = j.eps[0].name();
    let rank = lim.max_rank.min(1 << 30);
    let a = pattern(8, 10);
    j.isend(
        0,
        top,
        1,
        rank,
        lim.max_tag,
        region(&a),
        SendMode::Standard,
        Token(1),
    )
    .unwrap();
    let d = vec![0u8; 8];
    j.eps[1]
        .irecv(
            top,
            Source::Rank { rank, peer: 0 },
            TagSel::Value(lim.max_tag),
            region(&d),
            Token(1),
        )
        .unwrap();
    let i = received(j.wait("edges", 1, Token(1)), "edges");
    assert_eq!(
        (i.source, i.tag),
        (rank, lim.max_tag),
        "{name}: the edges of the fields"
    );
    // One past each edge is an error at the call.
    assert!(
        matches!(j.eps[0].add_comm(top + 1), Err(MtlError::Tag(_))),
        "{name}: a communicator id past the field was accepted"
    );
    if lim.max_tag < i32::MAX {
        let r = j.isend(
            0,
            0,
            1,
            0,
            lim.max_tag + 1,
            region(&a),
            SendMode::Standard,
            Token(2),
        );
        assert!(
            matches!(r, Err(MtlError::Tag(_))),
            "{name}: a tag past the field: {r:?}"
        );
    }
    if lim.max_rank < u32::MAX {
        let r = j.isend(
            0,
            0,
            1,
            lim.max_rank + 1,
            0,
            region(&a),
            SendMode::Standard,
            Token(3),
        );
        assert!(
            matches!(r, Err(MtlError::Tag(_))),
            "{name}: a rank past the field: {r:?}"
        );
    }
    j.settle();
    assert!(j.outcome(0, Token(2)).is_none() && j.outcome(0, Token(3)).is_none());
}

fn unknowns<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(2, &[0]);
    let name = j.eps[0].name();
    let a = pattern(8, 11);
    let r = j.isend(0, 0, 5, 0, 0, region(&a), SendMode::Standard, Token(1));
    assert_eq!(r, Err(MtlError::UnknownPeer(5)), "{name}");
    let r = j.isend(0, 3, 1, 0, 0, region(&a), SendMode::Standard, Token(1));
    assert_eq!(r, Err(MtlError::UnknownComm(3)), "{name}");
    let r = j.eps[0].irecv(3, Source::Any, TagSel::Any, region(&a), Token(1));
    assert_eq!(r, Err(MtlError::UnknownComm(3)), "{name}");
    let bad = j.eps[0].add_peers(&[(9, b"not a card of anyone".as_slice())]);
    assert!(
        matches!(bad, Err(MtlError::BadCard { rank: 9, .. })),
        "{name}: {bad:?}"
    );
}

fn dead_peer<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(3, &[0]);
    let name = j.eps[0].name();
    let d = vec![0u8; 8];
    let any = vec![0u8; 8];
    let a = pattern(8, 12);
    j.eps[0]
        .irecv(0, from(2), TagSel::Any, region(&d), Token(1))
        .unwrap();
    j.eps[0]
        .irecv(0, Source::Any, TagSel::Any, region(&any), Token(2))
        .unwrap();
    j.isend(0, 0, 2, 0, 0, region(&a), SendMode::Synchronous, Token(3))
        .unwrap();
    j.kill_rank(2);
    let r = j.wait("directed receive from a dead peer", 0, Token(1));
    assert!(matches!(r, Outcome::Failed(_)), "{name}: {r:?}");
    let s = j.wait("synchronous send to a dead peer", 0, Token(3));
    assert!(matches!(s, Outcome::Failed(_)), "{name}: {s:?}");
    // Rank 1 still reaches rank 0 (the wildcard receive).
    j.isend(1, 0, 0, 1, 0, region(&a), SendMode::Standard, Token(1))
        .unwrap();
    let i = received(
        j.wait("a live peer after a death", 0, Token(2)),
        "live peer",
    );
    assert_eq!(i.source, 1, "{name}");
}

fn inject<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(2, &[0]);
    let name = j.eps[0].name();
    let lim = j.eps[0].inject_limit();
    let a = pattern(lim.min(64), 14);
    if lim == 0 {
        assert!(
            !j.eps[0].inject(0, 1, 0, 3, region(&a)),
            "{name}: an inject past a limit of 0"
        );
        return;
    }
    // No room yet (a connection being set up) is a refusal: try again.
    let mut went = false;
    for _ in 0..1000 {
        if j.eps[0].inject(0, 1, 0, 3, region(&a)) {
            went = true;
            break;
        }
        j.round();
    }
    assert!(went, "{name}: inject of {} bytes never went", a.len());
    let b = pattern(100, 15);
    j.isend(0, 0, 1, 0, 3, region(&b), SendMode::Standard, Token(1))
        .unwrap();
    let (d1, d2) = (vec![0u8; 100], vec![0u8; 100]);
    j.eps[1]
        .irecv(0, from(0), TagSel::Value(3), region(&d1), Token(1))
        .unwrap();
    j.eps[1]
        .irecv(0, from(0), TagSel::Value(3), region(&d2), Token(2))
        .unwrap();
    let i1 = received(j.wait("injected", 1, Token(1)), "injected");
    let i2 = received(j.wait("after the inject", 1, Token(2)), "after");
    assert_eq!(
        (i1.len, &d1[..a.len()], i2.len, &d2[..]),
        (a.len(), &a[..], 100, &b[..]),
        "{name}: an injected message and the send after it"
    );
    assert_eq!(j.wait("the send after", 0, Token(1)), Outcome::Sent);
    // What it cannot take it refuses, sending nothing.
    let long = pattern(lim + 1, 16);
    let lim_tag = j.eps[0].limits().max_tag;
    assert!(
        !j.eps[0].inject(0, 1, 0, 3, region(&long)),
        "{name}: too long"
    );
    assert!(
        !j.eps[0].inject(0, 7, 0, 3, region(&a)),
        "{name}: unknown peer"
    );
    assert!(
        !j.eps[0].inject(4, 1, 0, 3, region(&a)),
        "{name}: unknown comm"
    );
    if lim_tag < i32::MAX {
        assert!(
            !j.eps[0].inject(0, 1, 0, lim_tag + 1, region(&a)),
            "{name}: a tag past the field"
        );
    }
    let d3 = vec![0u8; 8];
    j.eps[1]
        .irecv(0, Source::Any, TagSel::Any, region(&d3), Token(3))
        .unwrap();
    j.settle();
    assert!(
        j.outcome(1, Token(3)).is_none(),
        "{name}: a refused inject delivered a message"
    );
    assert!(j.eps[1].cancel(Token(3)), "{name}: cancel");
    j.settle();
}

/// After `close` nothing communicates and every call says why; the other
/// endpoints of the job carry on.
fn closed<M: Mtl>(make: &mut dyn FnMut(usize, &[u32]) -> Job<M>) {
    let mut j = make(2, &[0]);
    let name = j.eps[1].name();
    let a = pattern(8, 17);
    let d = vec![0u8; 8];
    j.eps[1]
        .irecv(0, Source::Any, TagSel::Any, region(&d), Token(1))
        .unwrap();
    j.eps[1].close();
    j.eps[1].close();
    let e = &mut j.eps[1];
    assert_eq!(
        e.isend(0, 0, 1, 0, region(&a), SendMode::Standard, Token(2)),
        Err(MtlError::Closed),
        "{name}: isend after close"
    );
    assert_eq!(
        e.irecv(0, Source::Any, TagSel::Any, region(&d), Token(3)),
        Err(MtlError::Closed),
        "{name}: irecv after close"
    );
    assert_eq!(
        e.iprobe(0, Source::Any, TagSel::Any),
        Err(MtlError::Closed),
        "{name}: iprobe after close"
    );
    assert!(
        matches!(
            e.improbe(0, Source::Any, TagSel::Any),
            Err(MtlError::Closed)
        ),
        "{name}: improbe after close"
    );
    assert_eq!(e.add_comm(1), Err(MtlError::Closed), "{name}: add_comm");
    assert!(
        !e.inject(0, 0, 1, 0, region(&a)),
        "{name}: inject after close"
    );
    assert!(!e.cancel(Token(1)), "{name}: cancel after close");
    let mut got: Vec<Event> = Vec::new();
    assert_eq!(e.progress(&mut got), 0, "{name}: progress after close");
    e.del_peers(&[0]);
    // Rank 0 still talks to itself.
    let b = pattern(8, 18);
    let d0 = vec![0u8; 8];
    j.eps[0]
        .irecv(0, from(0), TagSel::Value(5), region(&d0), Token(1))
        .unwrap();
    j.isend(0, 0, 0, 0, 5, region(&b), SendMode::Standard, Token(2))
        .unwrap();
    let i = received(
        j.wait("a self send beside a closed endpoint", 0, Token(1)),
        "self",
    );
    assert_eq!((i.len, &d0[..]), (8, &b[..]), "{name}");
}
