//! The request arbiter: posted-receive and unexpected-message queues.
//!
//! Contract: [`Engine`] decides, for every context (communicator), which
//! posted receive an incoming message goes to, or which unexpected message a
//! newly posted receive (or probe) takes. It does no I/O and never looks
//! inside the receive token `R` or the message payload `M`. Arrivals are
//! delivered to matching in per-(context, source) sequence order; arrivals
//! ahead of sequence are parked and released in order by their predecessors.
//!
//! Data layout (after UCX `src/ucp/tag/tag_match.h`, extended so that every
//! selector kind is O(1)): per context, every queue is an index-linked list
//! in posting/arrival order, and each selector kind has its own lists:
//!
//! | selector            | posted receives            | unexpected messages          |
//! |---------------------|----------------------------|------------------------------|
//! | `(rank, tag)`       | hot list or hash bucket \* | hot list or hash bucket \*   |
//! | `(ANY_SOURCE, tag)` | hash bucket `tag`          | hash bucket `tag` (all ranks) \*\*|
//! | `(rank, ANY_TAG)`   | per-rank list              | per-rank list, tags >= 0     |
//! | `(ANY, ANY)`        | one list                   | one list, tags >= 0          |
//!
//! \* Each sender has four (`HOT_TAGS`) hot lists of posted receives and
//! four of unexpected messages, each for one tag at a time: the first tags
//! a sender's receives (messages) use are queued and matched there, with a
//! few comparisons and no hashing. A tag goes to the hash map when all four
//! lists hold entries of other tags, and stays there while its bucket is
//! not empty (even once a hot list is free): a tag's queue is on one or the
//! other, never split. The lists cost about 100 bytes more per sender and
//! context than one list each (a `Peer` of about 170 bytes).
//!
//! \*\* Kept only from a context's first `(ANY_SOURCE, tag)` lookup made
//! while something is unexpected (built then from what is unexpected, in
//! arrival order): a program that never makes one does not pay for it on
//! every unexpected message.
//!
//! A posted receive sits on one list; an unexpected message on up to four.
//! Posted receives carry a context-wide posting sequence, so an arrival looks
//! at the (at most four) list heads that can fit it and takes the one posted
//! first. A post takes the head of the one list for its selector.
//!
//! All entries live in two engine-wide slabs and are linked through indices,
//! so once warm, posting, arriving and matching never allocate.

use std::collections::VecDeque;

use crate::ctxmap::ContextMap;
use crate::hash::{bucket_key, bucket_source, FxHashMap};
use crate::slab::{Link, List, Node, Slab, NIL};
use crate::types::{
    Arrival, EarlyArrival, Envelope, Match, MatchError, MatchEvent, MessageHandle, MessageInfo,
    PostOutcome, ProbeOutcome, RecvHandle, RemovedContext, Source, Tag, UnexpectedStats,
};

/// Link numbers of an unexpected node: exact bucket, per-tag bucket,
/// per-source list and context-wide list (the last two only for tags >= 0,
/// the only ones `ANY_TAG` can take). A parked node is only on its peer's
/// parked list, which reuses link 0.
const EXACT: usize = 0;
const BY_TAG: usize = 1;
const PEER: usize = 2;
const ALL: usize = 3;
const PARKED: usize = 0;

/// Whether a message `(source, tag)` fits a receive selector (`None` is a
/// wildcard).
///
/// MPI-4.1 §3.2.4: "The receiver may specify a wildcard MPI_ANY_SOURCE value
/// for source, and/or a wildcard MPI_ANY_TAG value for tag, indicating that
/// any source and/or tag are acceptable." Tags below zero are outside the
/// user range ("The range of valid tag values is 0,...,UB", §3.2.3) and are
/// used internally, so `ANY_TAG` never matches them.
///
/// The list layout implements this rule without calling it (each list holds
/// exactly what fits its selector kind); it is asserted in debug builds.
fn fits(sel_source: Option<u32>, sel_tag: Option<i32>, source: u32, tag: i32) -> bool {
    let source_ok = match sel_source {
        Some(s) => s == source,
        None => true,
    };
    let tag_ok = match sel_tag {
        Some(t) => t == tag,
        None => tag >= 0,
    };
    source_ok && tag_ok
}

fn tag_selector(tag: Tag) -> Option<i32> {
    match tag {
        Tag::Value(t) => Some(t),
        Tag::Any => None,
    }
}

/// Hash key of a per-tag bucket.
fn tag_key(tag: i32) -> u64 {
    u64::from(tag as u32)
}

/// A posted receive.
struct PostedNode<R> {
    context: u32,
    source: Option<u32>,
    tag: Option<i32>,
    /// Context-wide posting order; decides between the candidate lists.
    post_seq: u64,
    recv: R,
    link: Link,
}

impl<R> Node for PostedNode<R> {
    fn link(&self, _: usize) -> Link {
        self.link
    }
    fn link_mut(&mut self, _: usize) -> &mut Link {
        &mut self.link
    }
}

/// An unexpected (or parked) message.
struct UnexpNode<M> {
    source: u32,
    tag: i32,
    seq: u16,
    len: usize,
    /// Context-wide arrival order (only used to order leftovers on removal).
    arrival: u64,
    msg: M,
    links: [Link; 4],
}

impl<M> UnexpNode<M> {
    /// The message, out of the engine, as the caller sees it.
    fn into_handle(self, context: u32) -> MessageHandle<M> {
        MessageHandle {
            envelope: Envelope {
                context,
                source: self.source,
                tag: self.tag,
            },
            len: self.len,
            msg: self.msg,
        }
    }
}

impl<M> Node for UnexpNode<M> {
    fn link(&self, which: usize) -> Link {
        self.links[which]
    }
    fn link_mut(&mut self, which: usize) -> &mut Link {
        &mut self.links[which]
    }
}

/// The engine-wide node storage, split from the context map so both can be
/// borrowed mutably at once.
struct Store<R, M> {
    posted: Slab<PostedNode<R>>,
    unexp: Slab<UnexpNode<M>>,
    totals: UnexpectedStats,
}

/// Receive-side state for one sender on one context.
struct Peer {
    /// Sequence number of the next message to deliver to matching.
    expected_seq: u16,
    /// Out-of-sequence arrivals, sorted by distance ahead of `expected_seq`.
    parked: List,
    /// This sender's unexpected messages with tag >= 0, in arrival order.
    unexp: List,
    /// Posted `(this rank, ANY_TAG)` receives in posting order.
    posted_any_tag: List,
    /// Posted `(this rank, tag)` receives, in posting order per tag.
    hot: HotLists,
    /// Unexpected `(this rank, tag)` messages, in arrival order per tag.
    uhot: HotLists,
    stats: UnexpectedStats,
}

/// How many tags of one sender have a hot list ([`HotLists`]).
const HOT_TAGS: usize = 4;

/// One sender's exact `(source, tag)` queues (of posted receives, or of
/// unexpected messages): up to [`HOT_TAGS`] of them on lists kept out of
/// the context's hash map, so a program that uses a few tags at a time
/// with a peer (a halo exchange's directions, a data tag beside an
/// acknowledgement) queues and matches with no hashing; the sender's other
/// tags in the map's buckets. Invariants: the tags are distinct, and the
/// map's bucket of a hot tag is empty (an empty list takes a new tag only
/// when that tag's bucket is empty, and while a list keeps its tag, that
/// tag's entries join it), so a tag's queue is never split.
struct HotLists {
    lists: [List; HOT_TAGS],
    /// The tag of each list (an empty list keeps its last tag until
    /// another tag takes it over).
    tags: [i32; HOT_TAGS],
    /// How many of the sender's entries are in the map (when none, an
    /// empty list is taken over without looking there).
    mapped: u32,
}

impl HotLists {
    /// No entries; distinct tags, as the invariant requires (no entry uses
    /// them yet, so any distinct values do).
    fn new() -> Self {
        HotLists {
            lists: [List::EMPTY; HOT_TAGS],
            tags: std::array::from_fn(|i| i32::MIN + i as i32),
            mapped: 0,
        }
    }

    /// The list that holds tag `tag`'s entries, if one does.
    #[inline(always)]
    fn of(&self, tag: i32) -> Option<usize> {
        self.tags.iter().position(|&t| t == tag)
    }

    /// The earliest entry of `(source, tag)` (`NIL` for none), this being
    /// `source`'s lists beside `map`.
    #[inline(always)]
    fn head(&self, map: &FxHashMap<u64, List>, source: u32, tag: i32) -> u32 {
        match self.of(tag) {
            Some(i) => self.lists[i].head,
            None if self.mapped == 0 => NIL,
            None => bucket_head(map, bucket_key(source, tag)),
        }
    }

    /// Appends entry `idx` of `(source, tag)`: to the tag's list, or an
    /// empty list it takes over, or the map.
    #[inline]
    fn push<T: Node>(
        &mut self,
        map: &mut FxHashMap<u64, List>,
        slab: &mut Slab<T>,
        which: usize,
        (source, tag): (u32, i32),
        idx: u32,
    ) {
        let i = self.of(tag).or_else(|| {
            self.lists
                .iter()
                .position(List::is_empty)
                .filter(|_| self.mapped == 0 || bucket_head(map, bucket_key(source, tag)) == NIL)
        });
        match i {
            Some(i) => {
                self.tags[i] = tag;
                self.lists[i].push_back(slab, which, idx);
            }
            None => {
                self.mapped += 1;
                bucket_push(map, bucket_key(source, tag), slab, which, idx);
            }
        }
    }

    /// Unlinks entry `idx` of `(source, tag)` from wherever it is.
    #[inline]
    fn unlink<T: Node>(
        &mut self,
        map: &mut FxHashMap<u64, List>,
        slab: &mut Slab<T>,
        which: usize,
        (source, tag): (u32, i32),
        idx: u32,
    ) {
        match self.of(tag) {
            Some(i) => self.lists[i].unlink(slab, which, idx),
            None => {
                self.mapped -= 1;
                bucket_unlink(map, bucket_key(source, tag), slab, which, idx);
            }
        }
    }
}

/// Accounting change applied to a peer, its context and the engine totals.
#[derive(Clone, Copy)]
enum Delta {
    AddUnexpected(usize),
    SubUnexpected(usize),
    AddParked(usize),
    SubParked(usize),
}

impl UnexpectedStats {
    fn apply(&mut self, delta: Delta) {
        match delta {
            Delta::AddUnexpected(len) => {
                self.messages += 1;
                self.bytes += len;
            }
            Delta::SubUnexpected(len) => {
                self.messages -= 1;
                self.bytes -= len;
            }
            Delta::AddParked(len) => {
                self.parked_messages += 1;
                self.parked_bytes += len;
            }
            Delta::SubParked(len) => {
                self.parked_messages -= 1;
                self.parked_bytes -= len;
            }
        }
    }

    fn subtract(&mut self, other: &UnexpectedStats) {
        self.messages -= other.messages;
        self.bytes -= other.bytes;
        self.parked_messages -= other.parked_messages;
        self.parked_bytes -= other.parked_bytes;
    }
}

/// Appends `idx` to the bucket `key` of `map`, creating the bucket.
fn bucket_push<T: Node>(
    map: &mut FxHashMap<u64, List>,
    key: u64,
    slab: &mut Slab<T>,
    which: usize,
    idx: u32,
) {
    map.entry(key)
        .or_insert(List::EMPTY)
        .push_back(slab, which, idx);
}

/// Empty buckets a map keeps (an `(source, tag)` used over and over then
/// costs one lookup per post and per match, not an insert and a removal).
const KEEP_EMPTY_BUCKETS: usize = 64;

/// Unlinks `idx` from bucket `key`. An emptied bucket stays while the map
/// is small; past [`KEEP_EMPTY_BUCKETS`] buckets it is dropped, so distinct
/// keys cannot grow the map forever (hashbrown keeps its capacity, so
/// re-adding a bucket does not allocate).
fn bucket_unlink<T: Node>(
    map: &mut FxHashMap<u64, List>,
    key: u64,
    slab: &mut Slab<T>,
    which: usize,
    idx: u32,
) {
    let bucket = map.get_mut(&key).expect("entry without its bucket");
    bucket.unlink(slab, which, idx);
    if bucket.is_empty() && map.len() > KEEP_EMPTY_BUCKETS {
        map.remove(&key);
    }
}

fn bucket_head(map: &FxHashMap<u64, List>, key: u64) -> u32 {
    map.get(&key).map_or(NIL, |l| l.head)
}

/// Matching state of one context (communicator).
struct Context {
    id: u32,
    peers: Vec<Peer>,
    /// Posted `(rank, tag)` receives by `bucket_key`.
    posted_exact: FxHashMap<u64, List>,
    /// Posted `(ANY_SOURCE, tag)` receives by `tag_key`.
    posted_any_source: FxHashMap<u64, List>,
    /// How many receives `posted_any_source` holds (when none, a match
    /// skips looking there).
    n_any_source: usize,
    /// Posted `(ANY_SOURCE, ANY_TAG)` receives.
    posted_any: List,
    /// Unexpected messages by `bucket_key`.
    unexp_exact: FxHashMap<u64, List>,
    /// Unexpected messages by `tag_key`, kept only once `by_tag_on`.
    unexp_by_tag: FxHashMap<u64, List>,
    /// Whether `unexp_by_tag` is kept: from the context's first
    /// `(ANY_SOURCE, tag)` lookup made while something is unexpected on
    /// (built then from the messages already unexpected). A program that
    /// never asks for one pays nothing for it.
    by_tag_on: bool,
    /// Unexpected messages with tag >= 0.
    unexp_all: List,
    next_post_seq: u64,
    next_arrival: u64,
    stats: UnexpectedStats,
}

impl Context {
    fn new(id: u32, n_peers: u32, first_seq: u16) -> Self {
        let peers = (0..n_peers)
            .map(|_| Peer {
                expected_seq: first_seq,
                parked: List::EMPTY,
                unexp: List::EMPTY,
                posted_any_tag: List::EMPTY,
                hot: HotLists::new(),
                uhot: HotLists::new(),
                stats: UnexpectedStats::default(),
            })
            .collect();
        Context {
            id,
            peers,
            posted_exact: FxHashMap::default(),
            posted_any_source: FxHashMap::default(),
            n_any_source: 0,
            posted_any: List::EMPTY,
            unexp_exact: FxHashMap::default(),
            unexp_by_tag: FxHashMap::default(),
            by_tag_on: false,
            unexp_all: List::EMPTY,
            next_post_seq: 0,
            next_arrival: 0,
            stats: UnexpectedStats::default(),
        }
    }

    fn check_rank(&self, rank: u32) -> Result<(), MatchError> {
        if (rank as usize) < self.peers.len() {
            Ok(())
        } else {
            Err(MatchError::RankOutOfRange {
                context: self.id,
                rank,
                n_peers: self.peers.len() as u32,
            })
        }
    }

    /// Resolves a non-`ProcNull` source selector (`None` = wildcard).
    fn source_selector(&self, source: Source) -> Result<Option<u32>, MatchError> {
        match source {
            Source::Rank(r) => self.check_rank(r).map(|()| Some(r)),
            Source::Any | Source::ProcNull => Ok(None),
        }
    }

    fn account(&mut self, totals: &mut UnexpectedStats, peer: u32, delta: Delta) {
        totals.apply(delta);
        self.stats.apply(delta);
        self.peers[peer as usize].stats.apply(delta);
    }

    /// The earliest unexpected message fitting the selector, in O(1).
    ///
    /// MPI-4.1 §3.5: "If a sender sends two messages in succession to the
    /// same destination, and both match the same receive, then this
    /// operation cannot receive the second message if the first one is still
    /// pending." Each selector kind has its own list, in arrival (= per-sender
    /// sequence) order, holding exactly the messages that fit it (the
    /// `ANY_TAG` lists leave out negative tags), so its head is the message
    /// MPI requires. An `ANY_SOURCE` post never looks at idle peers.
    #[inline]
    fn find_unexpected<M>(
        &mut self,
        unexp: &mut Slab<UnexpNode<M>>,
        source: Option<u32>,
        tag: Option<i32>,
    ) -> Option<u32> {
        // Nothing unexpected anywhere (the usual case of a receive posted
        // in time): no list to look at.
        if unexp.len() == 0 {
            return None;
        }
        if source.is_none() && tag.is_some() && !self.by_tag_on {
            self.index_by_tag(unexp);
        }
        self.unexpected_head(unexp, source, tag)
    }

    /// Starts keeping `unexp_by_tag`: every message already unexpected on
    /// the context goes into its tag's bucket, in arrival order. Once per
    /// context, at its first `(ANY_SOURCE, tag)` lookup.
    #[cold]
    #[inline(never)]
    fn index_by_tag<M>(&mut self, unexp: &mut Slab<UnexpNode<M>>) {
        self.by_tag_on = true;
        let mut order: Vec<(u64, u32)> = Vec::new();
        self.each_unexpected(unexp, |idx, n| order.push((n.arrival, idx)));
        order.sort_unstable();
        for (_, idx) in order {
            let tag = unexp.get(idx).tag;
            bucket_push(&mut self.unexp_by_tag, tag_key(tag), unexp, BY_TAG, idx);
        }
    }

    /// Every unexpected message of the context (each is on exactly one
    /// exact list: a bucket of the map or a sender's hot list), list by
    /// list, each in arrival order: `f(index, node)`.
    fn each_unexpected<M>(
        &self,
        unexp: &Slab<UnexpNode<M>>,
        mut f: impl FnMut(u32, &UnexpNode<M>),
    ) {
        let heads = self
            .unexp_exact
            .values()
            .chain(self.peers.iter().flat_map(|p| &p.uhot.lists))
            .map(|l| l.head);
        for mut cur in heads {
            while cur != NIL {
                let node = unexp.get(cur);
                f(cur, node);
                cur = node.links[EXACT].next;
            }
        }
    }

    /// The earliest unexpected message of `(source, tag)`, exactly (a hot
    /// list's head, or the map's bucket's; `NIL` for none).
    #[inline(always)]
    fn unexp_exact_head(&self, source: u32, tag: i32) -> u32 {
        self.peers[source as usize]
            .uhot
            .head(&self.unexp_exact, source, tag)
    }

    /// [`Context::find_unexpected`] when something is unexpected.
    fn unexpected_head<M>(
        &self,
        unexp: &Slab<UnexpNode<M>>,
        source: Option<u32>,
        tag: Option<i32>,
    ) -> Option<u32> {
        let head = match (source, tag) {
            // Nothing unexpected from `s` (with a user tag): no lookup.
            (Some(s), Some(t)) if t >= 0 && self.peers[s as usize].unexp.head == NIL => NIL,
            (Some(s), Some(t)) => self.unexp_exact_head(s, t),
            (None, Some(t)) => {
                debug_assert!(self.by_tag_on, "indexed by find_unexpected");
                bucket_head(&self.unexp_by_tag, tag_key(t))
            }
            (Some(s), None) => self.peers[s as usize].unexp.head,
            (None, None) => self.unexp_all.head,
        };
        if head == NIL {
            return None;
        }
        debug_assert!(fits(
            source,
            tag,
            unexp.get(head).source,
            unexp.get(head).tag
        ));
        Some(head)
    }

    /// Takes message `idx` out of all unexpected lists and the slab.
    fn remove_unexpected<R, M>(&mut self, store: &mut Store<R, M>, idx: u32) -> UnexpNode<M> {
        let (source, tag, len) = {
            let n = store.unexp.get(idx);
            (n.source, n.tag, n.len)
        };
        let slab = &mut store.unexp;
        self.peers[source as usize].uhot.unlink(
            &mut self.unexp_exact,
            slab,
            EXACT,
            (source, tag),
            idx,
        );
        if self.by_tag_on {
            bucket_unlink(&mut self.unexp_by_tag, tag_key(tag), slab, BY_TAG, idx);
        }
        if tag >= 0 {
            self.peers[source as usize].unexp.unlink(slab, PEER, idx);
            self.unexp_all.unlink(slab, ALL, idx);
        }
        self.account(&mut store.totals, source, Delta::SubUnexpected(len));
        store.unexp.remove(idx)
    }

    /// Makes the detached node `idx` unexpected (appends to its lists).
    fn enqueue_unexpected<R, M>(&mut self, store: &mut Store<R, M>, idx: u32) {
        let (source, tag, len) = {
            let n = store.unexp.get_mut(idx);
            n.arrival = self.next_arrival;
            (n.source, n.tag, n.len)
        };
        self.next_arrival += 1;
        let slab = &mut store.unexp;
        self.peers[source as usize].uhot.push(
            &mut self.unexp_exact,
            slab,
            EXACT,
            (source, tag),
            idx,
        );
        if self.by_tag_on {
            bucket_push(&mut self.unexp_by_tag, tag_key(tag), slab, BY_TAG, idx);
        }
        if tag >= 0 {
            self.peers[source as usize].unexp.push_back(slab, PEER, idx);
            self.unexp_all.push_back(slab, ALL, idx);
        }
        self.account(&mut store.totals, source, Delta::AddUnexpected(len));
    }

    /// Queues posted receive `idx` on the list for its selector.
    fn link_posted<R>(&mut self, posted: &mut Slab<PostedNode<R>>, idx: u32) {
        let n = posted.get(idx);
        match (n.source, n.tag) {
            (Some(s), Some(t)) => {
                self.peers[s as usize]
                    .hot
                    .push(&mut self.posted_exact, posted, 0, (s, t), idx)
            }
            (None, Some(t)) => {
                self.n_any_source += 1;
                bucket_push(&mut self.posted_any_source, tag_key(t), posted, 0, idx)
            }
            (Some(s), None) => self.peers[s as usize]
                .posted_any_tag
                .push_back(posted, 0, idx),
            (None, None) => self.posted_any.push_back(posted, 0, idx),
        }
    }

    /// Removes posted receive `idx` from its list.
    fn unlink_posted<R>(&mut self, posted: &mut Slab<PostedNode<R>>, idx: u32) {
        let n = posted.get(idx);
        match (n.source, n.tag) {
            (Some(s), Some(t)) => {
                self.peers[s as usize]
                    .hot
                    .unlink(&mut self.posted_exact, posted, 0, (s, t), idx)
            }
            (None, Some(t)) => {
                self.n_any_source -= 1;
                bucket_unlink(&mut self.posted_any_source, tag_key(t), posted, 0, idx)
            }
            (Some(s), None) => self.peers[s as usize].posted_any_tag.unlink(posted, 0, idx),
            (None, None) => self.posted_any.unlink(posted, 0, idx),
        }
    }

    /// Takes the earliest-posted receive that fits an in-sequence message,
    /// in O(1).
    ///
    /// MPI-4.1 §3.5: "If a receiver posts two receives in succession, and
    /// both match the same message, then the second receive operation cannot
    /// be satisfied by this message, if the first one is still pending."
    /// Every receive on a candidate list fits the message, and each list is
    /// in posting order, so the heads are the earliest fitting receive of
    /// each kind; the lowest posting sequence among them is the earliest
    /// overall (UCX compares the exact bucket with the wildcard list the
    /// same way).
    fn take_posted<R: Copy>(
        &mut self,
        posted: &mut Slab<PostedNode<R>>,
        source: u32,
        tag: i32,
    ) -> Option<R> {
        let peer = &mut self.peers[source as usize];
        // The exact receives of a tag are on one of the sender's hot lists
        // or in the map, never both.
        let hot = peer.hot.of(tag);
        if let Some(i) = hot {
            if self.n_any_source == 0
                && (tag < 0 || (peer.posted_any_tag.is_empty() && self.posted_any.is_empty()))
            {
                // No wildcard receive could be earlier: the hot list's head
                // is the one (or there is none).
                let idx = peer.hot.lists[i].pop_front(posted, 0)?;
                return Some(posted.remove_with(idx, |n| n.recv));
            }
        }
        let peer = &self.peers[source as usize];
        let mut best = peer.hot.head(&self.posted_exact, source, tag);
        let mut best_seq = if best == NIL {
            u64::MAX
        } else {
            posted.get(best).post_seq
        };
        let mut consider = |idx: u32| {
            if idx != NIL && posted.get(idx).post_seq < best_seq {
                best = idx;
                best_seq = posted.get(idx).post_seq;
            }
        };
        if self.n_any_source > 0 {
            consider(bucket_head(&self.posted_any_source, tag_key(tag)));
        }
        if tag >= 0 {
            consider(peer.posted_any_tag.head);
            consider(self.posted_any.head);
        }
        if best == NIL {
            return None;
        }
        debug_assert!(fits(
            posted.get(best).source,
            posted.get(best).tag,
            source,
            tag
        ));
        self.unlink_posted(posted, best);
        Some(posted.remove_with(best, |n| n.recv))
    }

    /// Decides one in-sequence message: match a posted receive or queue it.
    #[allow(clippy::too_many_arguments)]
    fn deliver<R: Copy, M>(
        &mut self,
        store: &mut Store<R, M>,
        events: &mut VecDeque<MatchEvent<R, M>>,
        source: u32,
        tag: i32,
        seq: u16,
        len: usize,
        msg: M,
    ) {
        let envelope = Envelope {
            context: self.id,
            source,
            tag,
        };
        if let Some(recv) = self.take_posted(&mut store.posted, source, tag) {
            events.push_back(MatchEvent::Matched(Match {
                recv,
                msg,
                envelope,
                len,
            }));
        } else {
            let (idx, _) = store.unexp.insert(UnexpNode {
                source,
                tag,
                seq,
                len,
                arrival: 0,
                msg,
                links: [Link::DETACHED; 4],
            });
            self.enqueue_unexpected(store, idx);
            events.push_back(MatchEvent::Queued { envelope, len });
        }
    }
}

/// The request arbiter: matches message envelopes against posted receives
/// for any number of contexts.
///
/// `R` is the PML's receive token (stored per posted receive), `M` the
/// payload it parks with an unexpected message. Neither is inspected; `R`
/// is a small `Copy` token (an index), read out of its node in place.
pub struct Engine<R, M> {
    contexts: ContextMap<Context>,
    store: Store<R, M>,
    /// Match decisions not yet drained by [`Engine::poll_matched`]; keeps its
    /// capacity, so steady-state arrivals do not allocate.
    events: VecDeque<MatchEvent<R, M>>,
}

impl<R: Copy, M> Default for Engine<R, M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, M> std::fmt::Debug for Engine<R, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("contexts", &self.contexts.len())
            .field("posted", &self.store.posted.len())
            .field("totals", &self.store.totals)
            .field("pending_events", &self.events.len())
            .finish()
    }
}

impl<R: Copy, M> Engine<R, M> {
    /// An empty engine with no contexts.
    pub fn new() -> Self {
        Self::with_capacity(0, 0)
    }

    /// An empty engine whose slabs hold `posted` receives and `unexpected`
    /// messages before they first need to grow.
    pub fn with_capacity(posted: usize, unexpected: usize) -> Self {
        Engine {
            contexts: ContextMap::default(),
            store: Store {
                posted: Slab::with_capacity(posted),
                unexp: Slab::with_capacity(unexpected),
                totals: UnexpectedStats::default(),
            },
            events: VecDeque::with_capacity(16),
        }
    }

    /// Creates a context (communicator) with ranks `0..n_peers`, expecting
    /// sequence number 0 first from every peer.
    pub fn add_context(&mut self, context: u32, n_peers: u32) -> Result<(), MatchError> {
        self.add_context_with_first_seq(context, n_peers, 0)
    }

    /// Like [`Engine::add_context`], expecting `first_seq` first from every
    /// peer (must equal the senders' [`crate::SendSequencer`] start).
    pub fn add_context_with_first_seq(
        &mut self,
        context: u32,
        n_peers: u32,
        first_seq: u16,
    ) -> Result<(), MatchError> {
        if self.contexts.contains_key(&context) {
            return Err(MatchError::ContextExists(context));
        }
        self.contexts
            .insert(context, Context::new(context, n_peers, first_seq));
        Ok(())
    }

    /// Frees a context, handing back its still-posted receives and its
    /// unexpected and parked messages. Handles to its receives become stale.
    /// Match events already queued for it stay queued.
    pub fn remove_context(&mut self, context: u32) -> Result<RemovedContext<R, M>, MatchError> {
        let ctx = self
            .contexts
            .remove(&context)
            .ok_or(MatchError::UnknownContext(context))?;
        let store = &mut self.store;

        // Removal is rare, so collecting and sorting here is fine.
        let mut order: Vec<(u64, u32)> = Vec::new();
        let heads = ctx
            .posted_exact
            .values()
            .chain(ctx.posted_any_source.values())
            .chain(ctx.peers.iter().map(|p| &p.posted_any_tag))
            .chain(ctx.peers.iter().flat_map(|p| &p.hot.lists))
            .chain(std::iter::once(&ctx.posted_any))
            .map(|l| l.head);
        for mut cur in heads {
            while cur != NIL {
                let node = store.posted.get(cur);
                order.push((node.post_seq, cur));
                cur = node.link.next;
            }
        }
        order.sort_unstable();
        let posted = order
            .drain(..)
            .map(|(_, idx)| store.posted.remove_with(idx, |n| n.recv))
            .collect();

        ctx.each_unexpected(&store.unexp, |idx, n| order.push((n.arrival, idx)));
        order.sort_unstable();
        for peer in &ctx.peers {
            // Parked messages follow, peer by peer, in sequence order.
            let mut cur = peer.parked.head;
            while cur != NIL {
                order.push((u64::MAX, cur));
                cur = store.unexp.get(cur).links[PARKED].next;
            }
        }
        let unexpected = order
            .into_iter()
            .map(|(_, idx)| store.unexp.remove(idx).into_handle(context))
            .collect();
        store.totals.subtract(&ctx.stats);
        Ok(RemovedContext { posted, unexpected })
    }

    /// Posts a receive for `(source, tag)` on `context`.
    ///
    /// Takes the earliest-arrived fitting unexpected message if there is
    /// one; otherwise the receive is queued behind all earlier receives of
    /// the context. O(1) for a fully specified receive.
    pub fn post_recv(
        &mut self,
        context: u32,
        source: Source,
        tag: Tag,
        recv: R,
    ) -> Result<PostOutcome<R, M>, MatchError> {
        let ctx = self
            .contexts
            .get_mut(&context)
            .ok_or(MatchError::UnknownContext(context))?;
        if source == Source::ProcNull {
            // MPI-4.1 §3.11: "A receive from MPI_PROC_NULL succeeds and
            // returns as soon as possible with no modifications to the
            // receive buffer." Nothing is queued.
            return Ok(PostOutcome::ProcNull { recv });
        }
        let src = ctx.source_selector(source)?;
        let tag = tag_selector(tag);
        if let Some(idx) = ctx.find_unexpected(&mut self.store.unexp, src, tag) {
            let n = ctx.remove_unexpected(&mut self.store, idx);
            return Ok(PostOutcome::Matched(Match {
                recv,
                msg: n.msg,
                envelope: Envelope {
                    context,
                    source: n.source,
                    tag: n.tag,
                },
                len: n.len,
            }));
        }
        let post_seq = ctx.next_post_seq;
        ctx.next_post_seq += 1;
        let (idx, generation) = self.store.posted.insert(PostedNode {
            context,
            source: src,
            tag,
            post_seq,
            recv,
            link: Link::DETACHED,
        });
        ctx.link_posted(&mut self.store.posted, idx);
        Ok(PostOutcome::Posted(RecvHandle {
            index: idx,
            generation,
        }))
    }

    /// Feeds one arriving message envelope (with its per-(context, source)
    /// sequence number, byte length and payload) into matching.
    ///
    /// An in-sequence arrival is decided at once, then releases any parked
    /// successors; each decision is queued for [`Engine::poll_matched`]. An
    /// arrival ahead of sequence (by less than 2^15) is parked. On error the
    /// payload is handed back unchanged.
    pub fn handle_arrival(
        &mut self,
        context: u32,
        source: u32,
        tag: i32,
        seq: u16,
        len: usize,
        msg: M,
    ) -> Result<Arrival, (MatchError, M)> {
        let Some(ctx) = self.contexts.get_mut(&context) else {
            return Err((MatchError::UnknownContext(context), msg));
        };
        if let Err(e) = ctx.check_rank(source) {
            return Err((e, msg));
        }
        let store = &mut self.store;
        let expected = ctx.peers[source as usize].expected_seq;
        // Distances are taken modulo 2^16, so ordering survives the wrap
        // from u16::MAX to 0 as long as fewer than 2^15 are in flight.
        let dist = seq.wrapping_sub(expected);
        if dist != 0 {
            if dist >= 0x8000 {
                let e = MatchError::StaleSequence {
                    context,
                    source,
                    seq,
                    expected,
                };
                return Err((e, msg));
            }
            // Keep the parked list sorted by distance so draining pops heads.
            let mut cur = ctx.peers[source as usize].parked.head;
            while cur != NIL {
                let node = store.unexp.get(cur);
                let d = node.seq.wrapping_sub(expected);
                if d == dist {
                    let e = MatchError::DuplicateSequence {
                        context,
                        source,
                        seq,
                    };
                    return Err((e, msg));
                }
                if d > dist {
                    break;
                }
                cur = node.links[PARKED].next;
            }
            let (idx, _) = store.unexp.insert(UnexpNode {
                source,
                tag,
                seq,
                len,
                msg,
                arrival: 0,
                links: [Link::DETACHED; 4],
            });
            ctx.peers[source as usize]
                .parked
                .insert_before(&mut store.unexp, PARKED, idx, cur);
            ctx.account(&mut store.totals, source, Delta::AddParked(len));
            return Ok(Arrival::Parked);
        }

        ctx.deliver(store, &mut self.events, source, tag, seq, len, msg);
        let mut events = 1;
        let mut next = expected.wrapping_add(1);
        loop {
            let head = ctx.peers[source as usize].parked.head;
            if head == NIL || store.unexp.get(head).seq != next {
                break;
            }
            ctx.peers[source as usize]
                .parked
                .unlink(&mut store.unexp, PARKED, head);
            // The slot is freed and, if the message stays unexpected,
            // immediately reused from the free list: no allocation.
            let n = store.unexp.remove(head);
            ctx.account(&mut store.totals, source, Delta::SubParked(n.len));
            ctx.deliver(store, &mut self.events, source, n.tag, n.seq, n.len, n.msg);
            events += 1;
            next = next.wrapping_add(1);
        }
        ctx.peers[source as usize].expected_seq = next;
        Ok(Arrival::Delivered { events })
    }

    /// The fast path of [`Engine::handle_arrival`] for a message that is
    /// next in sequence from its sender, when nothing of that sender is
    /// parked: takes the earliest posted receive that fits and returns it
    /// with the envelope (the message never becomes unexpected, and no
    /// event is queued). `None`, with nothing changed, in every other case
    /// (no such receive, out of sequence, parked successors, unknown context
    /// or rank): the caller then goes through [`Engine::handle_arrival`].
    #[inline]
    pub fn match_arrival(
        &mut self,
        context: u32,
        source: u32,
        tag: i32,
        seq: u16,
    ) -> Option<(R, Envelope)> {
        if self.store.posted.len() == 0 {
            return None;
        }
        let ctx = self.contexts.get_mut(&context)?;
        let peer = ctx.peers.get(source as usize)?;
        if peer.expected_seq != seq || peer.parked.head != NIL {
            return None;
        }
        let recv = ctx.take_posted(&mut self.store.posted, source, tag)?;
        ctx.peers[source as usize].expected_seq = seq.wrapping_add(1);
        Some((
            recv,
            Envelope {
                context,
                source,
                tag,
            },
        ))
    }

    /// The sequence number with which the next message from `source` on
    /// `context` goes straight into a receive from `source` with a tag of 0
    /// or more (or any tag) about to be posted, whatever the message's tag,
    /// when nothing could take it first: no receive posted on any context,
    /// nothing of that sender unexpected with a tag of 0 or more (what such
    /// a receive would take first) and nothing of it parked. Then
    /// [`Engine::arrival_before_post`] would answer [`EarlyArrival::Fresh`]
    /// for it, for any such receive whose tag fits it. The number is
    /// returned in place: the caller, having delivered such a message, adds
    /// one to it (wrapping), as `arrival_before_post` would have, and
    /// changes it in no other way. `None` in every other case, or for an
    /// unknown context or source.
    #[inline(always)]
    pub fn fresh_seq(&mut self, context: u32, source: u32) -> Option<&mut u16> {
        if self.store.posted.len() > 0 {
            return None;
        }
        let peer = self.peer_mut(context, source)?;
        (peer.parked.head == NIL && peer.unexp.head == NIL).then_some(&mut peer.expected_seq)
    }

    /// Sender `source`'s state on `context` (`None` for an unknown one).
    #[inline(always)]
    fn peer_mut(&mut self, context: u32, source: u32) -> Option<&mut Peer> {
        self.contexts
            .get_mut(&context)?
            .peers
            .get_mut(source as usize)
    }

    /// [`Engine::fresh_seq`] for a receive from any source (`ANY_SOURCE`)
    /// about to be posted: the sequence number with which the next message
    /// from `source` on `context` goes straight into it, whatever that
    /// message's tag (0 or more), when nothing could take it first and
    /// nothing is there for the receive to take instead: no receive posted
    /// on any context, nothing unexpected on `context` from any sender with
    /// a tag of 0 or more (what such a receive would take first), and
    /// nothing of `source` parked. Queueing such a message as unexpected and
    /// then posting the receive would match the two (it would be the only
    /// message the receive could take); MPI-4.1 §3.5 orders messages per
    /// sender only, so taking it before another sender's later message is
    /// one of the outcomes the standard allows. Returned in place, used as
    /// for `fresh_seq`. `None` in every other case, or for an unknown
    /// context or source.
    #[inline]
    pub fn fresh_seq_any_source(&mut self, context: u32, source: u32) -> Option<&mut u16> {
        if !self.nothing_for_any_source(context) {
            return None;
        }
        let peer = self.peer_mut(context, source)?;
        (peer.parked.head == NIL).then_some(&mut peer.expected_seq)
    }

    /// Whether [`Engine::fresh_seq_any_source`] can name a number for some
    /// sender of `context`: no receive posted on any context and nothing
    /// unexpected on `context` with a tag of 0 or more (false for an
    /// unknown context).
    #[inline]
    pub fn nothing_for_any_source(&self, context: u32) -> bool {
        self.store.posted.len() == 0
            && self
                .contexts
                .get(&context)
                .is_some_and(|c| c.unexp_all.head == NIL)
    }

    /// [`Engine::match_arrival`] for a message that arrives while a receive
    /// `(fresh_source, fresh_tag)` on context `fresh_context` is about to be
    /// posted (the PML reads the fragments already arrived from a receive's
    /// source before posting it).
    ///
    /// A message next in sequence from its sender, with nothing of that
    /// sender parked, goes to the earliest posted receive that fits it;
    /// when none does and the fresh receive fits it, and nothing unexpected
    /// fits the fresh receive, it goes to the fresh receive
    /// ([`EarlyArrival::Fresh`]): exactly what queueing the message as
    /// unexpected and then posting the receive would decide (MPI-4.1 §3.5:
    /// the receive takes the earliest fitting unexpected message, and this
    /// one would be the only one), without the queueing. `None`, with
    /// nothing changed, in every other case (the caller then goes through
    /// [`Engine::handle_arrival`] and posts the receive as usual).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn arrival_before_post(
        &mut self,
        context: u32,
        source: u32,
        tag: i32,
        seq: u16,
        fresh_context: u32,
        fresh_source: u32,
        fresh_tag: Tag,
    ) -> Option<EarlyArrival<R>> {
        let ctx = self.contexts.get_mut(&context)?;
        let peer = ctx.peers.get(source as usize)?;
        if peer.expected_seq != seq || peer.parked.head != NIL {
            return None;
        }
        let envelope = Envelope {
            context,
            source,
            tag,
        };
        if self.store.posted.len() > 0 {
            if let Some(recv) = ctx.take_posted(&mut self.store.posted, source, tag) {
                ctx.peers[source as usize].expected_seq = seq.wrapping_add(1);
                return Some(EarlyArrival::Posted(recv, envelope));
            }
        }
        let fresh_tag = tag_selector(fresh_tag);
        if fresh_context != context
            || !fits(Some(fresh_source), fresh_tag, source, tag)
            || ctx
                .find_unexpected(&mut self.store.unexp, Some(fresh_source), fresh_tag)
                .is_some()
        {
            return None;
        }
        ctx.peers[source as usize].expected_seq = seq.wrapping_add(1);
        Some(EarlyArrival::Fresh(envelope))
    }

    /// Pops the oldest match decision produced by [`Engine::handle_arrival`].
    pub fn poll_matched(&mut self) -> Option<MatchEvent<R, M>> {
        self.events.pop_front()
    }

    /// `MPI_Iprobe`: the earliest unexpected message fitting `(source, tag)`,
    /// left in place.
    ///
    /// MPI-4.1 §3.8.1: a subsequent receive with the same communicator and
    /// the source and tag returned "will receive the message that was matched
    /// by the probe, if no other intervening receive occurs after the probe".
    /// Because this returns the same message `post_recv` would take, that
    /// holds by construction.
    pub fn iprobe(
        &mut self,
        context: u32,
        source: Source,
        tag: Tag,
    ) -> Result<Option<ProbeOutcome<MessageInfo>>, MatchError> {
        let ctx = self
            .contexts
            .get_mut(&context)
            .ok_or(MatchError::UnknownContext(context))?;
        if source == Source::ProcNull {
            return Ok(Some(ProbeOutcome::ProcNull));
        }
        let src = ctx.source_selector(source)?;
        Ok(ctx
            .find_unexpected(&mut self.store.unexp, src, tag_selector(tag))
            .map(|idx| {
                let n = self.store.unexp.get(idx);
                ProbeOutcome::Found(MessageInfo {
                    envelope: Envelope {
                        context,
                        source: n.source,
                        tag: n.tag,
                    },
                    len: n.len,
                })
            }))
    }

    /// `MPI_Improbe`: like [`Engine::iprobe`] but the message leaves the
    /// unexpected queue and is handed out; no other receive or probe can
    /// match it any more.
    ///
    /// MPI-4.1 §3.8.2: "Like MPI_PROBE and MPI_IPROBE, the MPI_MPROBE and
    /// MPI_IMPROBE operations allow incoming messages to be queried without
    /// actually receiving them, except that MPI_MPROBE and MPI_IMPROBE
    /// provide a mechanism to receive the specific message that was matched
    /// regardless of other intervening probe or receive operations."
    pub fn improbe(
        &mut self,
        context: u32,
        source: Source,
        tag: Tag,
    ) -> Result<Option<ProbeOutcome<MessageHandle<M>>>, MatchError> {
        let ctx = self
            .contexts
            .get_mut(&context)
            .ok_or(MatchError::UnknownContext(context))?;
        if source == Source::ProcNull {
            return Ok(Some(ProbeOutcome::ProcNull));
        }
        let src = ctx.source_selector(source)?;
        let Some(idx) = ctx.find_unexpected(&mut self.store.unexp, src, tag_selector(tag)) else {
            return Ok(None);
        };
        let n = ctx.remove_unexpected(&mut self.store, idx);
        Ok(Some(ProbeOutcome::Found(n.into_handle(context))))
    }

    /// Takes out the earliest unexpected message from `source` with `tag`
    /// whose payload satisfies `pred` (a sender cancelling a send that has
    /// not matched yet). Messages parked for sequence order are not
    /// searched: they have not entered matching. `None`: no such message
    /// (it matched already, or the context or rank is unknown).
    pub fn take_unexpected(
        &mut self,
        context: u32,
        source: u32,
        tag: i32,
        mut pred: impl FnMut(&M) -> bool,
    ) -> Option<MessageHandle<M>> {
        let ctx = self.contexts.get_mut(&context)?;
        ctx.check_rank(source).ok()?;
        let mut cur = ctx.unexp_exact_head(source, tag);
        while cur != NIL {
            let node = self.store.unexp.get(cur);
            if node.source == source && node.tag == tag && pred(&node.msg) {
                return Some(
                    ctx.remove_unexpected(&mut self.store, cur)
                        .into_handle(context),
                );
            }
            cur = node.links[EXACT].next;
        }
        None
    }

    /// `MPI_Cancel` of a posted receive: returns its token if it was still
    /// posted (it is then gone), `None` if it already matched or was
    /// cancelled.
    pub fn cancel(&mut self, handle: RecvHandle) -> Option<R> {
        let node = self
            .store
            .posted
            .get_checked(handle.index, handle.generation)?;
        let ctx = self.contexts.get_mut(&node.context)?;
        ctx.unlink_posted(&mut self.store.posted, handle.index);
        Some(self.store.posted.remove_with(handle.index, |n| n.recv))
    }

    /// Unexpected and parked accounting for one sender on one context.
    pub fn unexpected_stats(&self, context: u32, peer: u32) -> Result<UnexpectedStats, MatchError> {
        let ctx = self
            .contexts
            .get(&context)
            .ok_or(MatchError::UnknownContext(context))?;
        ctx.check_rank(peer)?;
        Ok(ctx.peers[peer as usize].stats)
    }

    /// Unexpected and parked accounting summed over a context.
    pub fn context_stats(&self, context: u32) -> Result<UnexpectedStats, MatchError> {
        self.contexts
            .get(&context)
            .map(|c| c.stats)
            .ok_or(MatchError::UnknownContext(context))
    }

    /// Unexpected and parked accounting summed over all contexts.
    pub fn total_stats(&self) -> UnexpectedStats {
        self.store.totals
    }

    /// Number of receives currently posted, over all contexts.
    pub fn posted_count(&self) -> usize {
        self.store.posted.len()
    }

    /// Checks the hot lists' and the per-tag index's invariants on every
    /// context and sender, and panics on a broken one: each sender's hot
    /// tags are distinct (posted and unexpected alike), a hot tag's map
    /// bucket is empty, each `HotLists::mapped` counts exactly the sender's
    /// entries in its map; the per-tag index of unexpected messages is
    /// empty while it is off, and once on holds each unexpected message
    /// once, in its tag's bucket, in arrival order. For tests (the
    /// differential test calls it after every operation); it walks every
    /// list, so it is not for production use.
    #[doc(hidden)]
    pub fn check_invariants(&self) {
        fn count<T: Node>(
            map: &FxHashMap<u64, List>,
            slab: &Slab<T>,
            which: usize,
            src: u32,
        ) -> u32 {
            let mut n = 0;
            for (&key, list) in map {
                if bucket_source(key) != src {
                    continue;
                }
                let mut cur = list.head;
                while cur != NIL {
                    n += 1;
                    cur = slab.get(cur).link(which).next;
                }
            }
            n
        }
        for ctx in self.contexts.values() {
            for (src, peer) in ctx.peers.iter().enumerate() {
                let src = src as u32;
                for (tags, map) in [
                    (&peer.hot.tags, &ctx.posted_exact),
                    (&peer.uhot.tags, &ctx.unexp_exact),
                ] {
                    for (i, &t) in tags.iter().enumerate() {
                        assert!(
                            !tags[..i].contains(&t),
                            "hot tag {t} twice for sender {src}"
                        );
                        assert_eq!(
                            bucket_head(map, bucket_key(src, t)),
                            NIL,
                            "hot tag {t} of sender {src} in the map"
                        );
                    }
                }
                assert_eq!(
                    count(&ctx.posted_exact, &self.store.posted, 0, src),
                    peer.hot.mapped,
                    "mapped of sender {src}"
                );
                assert_eq!(
                    count(&ctx.unexp_exact, &self.store.unexp, EXACT, src),
                    peer.uhot.mapped,
                    "uhot.mapped of sender {src}"
                );
            }
            // The per-tag index against the exact lists (every unexpected
            // message is on exactly one).
            let mut exact = 0;
            ctx.each_unexpected(&self.store.unexp, |_, _| exact += 1);
            let mut indexed = 0;
            for (&key, list) in &ctx.unexp_by_tag {
                let mut cur = list.head;
                let mut last = None;
                while cur != NIL {
                    let n = self.store.unexp.get(cur);
                    assert_eq!(tag_key(n.tag), key, "a message in another tag's bucket");
                    assert!(
                        last < Some(n.arrival),
                        "a tag's bucket out of arrival order"
                    );
                    last = Some(n.arrival);
                    indexed += 1;
                    cur = n.links[BY_TAG].next;
                }
            }
            let want = if ctx.by_tag_on { exact } else { 0 };
            assert_eq!(indexed, want, "messages in the per-tag index");
        }
    }

    /// Whether any message is unexpected or parked, on any context (a
    /// quick test before a lookup).
    #[inline(always)]
    pub fn any_unexpected(&self) -> bool {
        self.store.unexp.len() > 0
    }

    /// Number of match decisions waiting for [`Engine::poll_matched`].
    pub fn pending_events(&self) -> usize {
        self.events.len()
    }

    /// The sequence number the engine will deliver next from `peer`.
    pub fn expected_seq(&self, context: u32, peer: u32) -> Result<u16, MatchError> {
        let ctx = self
            .contexts
            .get(&context)
            .ok_or(MatchError::UnknownContext(context))?;
        ctx.check_rank(peer)?;
        Ok(ctx.peers[peer as usize].expected_seq)
    }
}
