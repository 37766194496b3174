//! Context ids: the allocator, and the exchanges that agree on a fresh id.
//!
//! Ids are handed out in units of [`UNIT`] consecutive context ids (unit
//! `u` is ids `8u .. 8u + 8`), so that one agreement serves a communicator
//! and everything that travels with it:
//!
//! | id | use |
//! |---|---|
//! | `base`, `base + 1` | the communicator (user traffic, internal collectives) |
//! | `base + 2`, `base + 3` | its shadow ([`crate::Communicator::shadow`], the C layer's collectives) |
//! | `base + 4`, `base + 5` | an intercommunicator's local group (its collectives and agreements) |
//! | `base + 6`, `base + 7` | the shadow intercommunicator's local group |
//!
//! Unit 0 is `MPI_COMM_WORLD` (ids 4 and 5 serve the agreements of
//! communicators created from groups, which have no parent communicator:
//! [`GROUP_CTX`]), unit 1 `MPI_COMM_SELF`. Every process keeps a bitmask
//! of its free units ([`CtxIds`]); an agreement all-gathers the members'
//! masks (each sent only up to its last word with a unit in use: beyond it
//! every unit is free) and takes the lowest unit free on every member, as
//! MPICH's mask allreduce does. Freed units come back once their contexts
//! have no pending operation (`Runtime::release_unit`), so creation never
//! runs out while fewer than [`UNITS`] - 2 communicators are alive.
//!
//! Concurrent agreements in one process (threads, or non-blocking
//! `MPI_Comm_idup`s in flight) must not offer the same free unit twice:
//! only one agreement at a time offers the mask ([`CtxIds::offer`]); the
//! others offer nothing, which makes the round fail on every member (the
//! combined outcome says that not everyone offered), and they try again.
//! An agreement may offer only if no agreement with a lower priority key
//! (parent context, then creation number) is waiting in this process, so
//! the lowest key among all agreements in flight anywhere always succeeds
//! in its next round: no livelock (MPICH's `lowest_context_id` rule).

use std::sync::Arc;

use oxmpi_match::{Source, Tag};
use oxmpi_pml::{Buffer, ReqId, SendMode};

use crate::buffer;
use crate::error::{Error, ErrorClass, Result};
use crate::request::status_result;
use crate::runtime::Runtime;

/// Context ids per unit.
pub(crate) const UNIT: u16 = 8;
/// Units in the 16-bit context id space.
pub(crate) const UNITS: usize = (1 << 16) / UNIT as usize;
/// 64-bit words of the free mask.
const WORDS: usize = UNITS / 64;
/// Units that are never free: 0 (`MPI_COMM_WORLD`), 1 (`MPI_COMM_SELF`).
pub(crate) const RESERVED_UNITS: usize = 2;
/// The context (world ranks, in unit 0) on which the members of a group
/// agree on the context of a communicator created from that group
/// (`MPI_Comm_create_from_group`, `MPI_Intercomm_create_from_groups`).
pub(crate) const GROUP_CTX: u16 = 4;

/// Bytes of an agreement message before the mask: flags (offered,
/// restricted), two `i32` of the caller's (a split's color and key), and
/// the mask's tail word (what every word past the ones sent is).
const HEAD: usize = 17;
/// The longest agreement message.
pub(crate) const MAX_MSG: usize = HEAD + WORDS * 8;
/// Flag: the sender offered units.
const OFFERED: u8 = 1;
/// Flag: the sender left out free units (reserved by its non-blocking
/// agreements, or of another class): an empty intersection is then no
/// proof that none is free everywhere.
const RESTRICTED: u8 = 2;
/// Flag: free units the sender would have offered were reserved by its
/// other non-blocking agreements.
const REDUCED: u8 = 4;
/// Classes of units a non-blocking agreement offers from (one per round).
const CLASSES: usize = 8;

/// A priority key: the parent's context, then a number that tells
/// concurrent agreements on the same parent apart.
pub(crate) type Key = (u16, u32);

/// What one round of an agreement offers (see [`CtxIds::offer`] and
/// [`CtxIds::offer_nb`]); [`CtxIds::end_round`] takes it back.
#[derive(Debug)]
pub(crate) struct Offer {
    /// The units offered (all [`WORDS`] words), if any.
    mask: Option<Vec<u64>>,
    /// Whether free units were left out.
    restricted: bool,
    /// Whether units were left out because others reserved them.
    reduced: bool,
    /// A blocking agreement's offer (it holds the lock), or a non-blocking
    /// one's (its units are reserved).
    blocking: bool,
}

impl Offer {
    /// The round's message, with `extra`.
    pub(crate) fn encode(&self, extra: [i32; 2]) -> Vec<u8> {
        let flags = match &self.mask {
            None => 0,
            Some(_) if self.restricted => OFFERED | RESTRICTED,
            Some(_) => OFFERED,
        } | if self.reduced { REDUCED } else { 0 };
        encode_words(flags, self.mask.as_deref().unwrap_or(&[]), extra)
    }
}

/// This process's free units, and who may offer them. Blocking
/// agreements take turns holding the whole mask (`offered`; the one of
/// lowest key among those waiting goes first); a non-blocking agreement
/// never holds it, and offers instead, in each round, the free units of
/// one class (unit number modulo [`CLASSES`], chosen from its key and
/// round, so the same on every member), which it reserves until the round
/// ends: a blocking agreement offers no reserved unit. A non-blocking
/// agreement thus never makes a blocking one wait for it, whatever order
/// the processes call them in.
#[derive(Debug)]
pub(crate) struct CtxIds {
    /// Bit `u % 64` of word `u / 64`: unit `u` is free.
    free: Vec<u64>,
    /// Units reserved by non-blocking agreements' rounds in flight.
    reserved: Vec<u64>,
    /// A blocking agreement holds the mask.
    offered: bool,
    /// Blocking agreements in flight (each one's key, once per agreement).
    waiting: Vec<Key>,
}

impl Default for CtxIds {
    fn default() -> Self {
        let mut free = vec![u64::MAX; WORDS];
        for u in 0..RESERVED_UNITS {
            free[u / 64] &= !(1 << (u % 64));
        }
        CtxIds {
            free,
            reserved: vec![0; WORDS],
            offered: false,
            waiting: Vec::new(),
        }
    }
}

/// The bits of the units of class `c` in a mask word.
fn class_word(c: usize) -> u64 {
    let mut w = 0u64;
    let mut b = c % CLASSES;
    while b < 64 {
        w |= 1 << b;
        b += CLASSES;
    }
    w
}

impl CtxIds {
    /// A blocking agreement with priority `key` starts.
    pub(crate) fn register(&mut self, key: Key) {
        self.waiting.push(key);
    }

    /// The blocking agreement with priority `key` ends.
    pub(crate) fn unregister(&mut self, key: Key) {
        if let Some(i) = self.waiting.iter().position(|&k| k == key) {
            self.waiting.swap_remove(i);
        }
    }

    /// A blocking agreement's offer: the free units not reserved, if the
    /// agreement of `key` may hold the mask now (no other blocking one
    /// holds it, and none waiting has a lower key); it then holds it until
    /// [`CtxIds::end_round`]. Otherwise nothing (the round fails and every
    /// member tries again).
    pub(crate) fn offer(&mut self, key: Key) -> Offer {
        let lowest = self.waiting.iter().min().copied();
        if self.offered || lowest.is_some_and(|l| l < key) {
            return Offer {
                mask: None,
                restricted: false,
                reduced: false,
                blocking: true,
            };
        }
        self.offered = true;
        let mask: Vec<u64> = self
            .free
            .iter()
            .zip(&self.reserved)
            .map(|(f, r)| f & !r)
            .collect();
        let reduced = self.reserved.iter().any(|&r| r != 0);
        Offer {
            mask: Some(mask),
            restricted: reduced,
            reduced,
            blocking: true,
        }
    }

    /// A non-blocking agreement's offer for a round of class `class`: the
    /// free units of that class not reserved, now reserved (nothing while
    /// a blocking agreement holds the mask: the round fails and is tried
    /// again).
    pub(crate) fn offer_nb(&mut self, class: usize) -> Offer {
        if self.offered {
            return Offer {
                mask: None,
                restricted: true,
                reduced: true,
                blocking: false,
            };
        }
        let cw = class_word(class);
        let reduced = self
            .free
            .iter()
            .zip(&self.reserved)
            .any(|(f, r)| f & r & cw != 0);
        let mask: Vec<u64> = self
            .free
            .iter()
            .zip(&self.reserved)
            .map(|(f, r)| f & !r & cw)
            .collect();
        for (r, m) in self.reserved.iter_mut().zip(&mask) {
            *r |= m;
        }
        Offer {
            mask: Some(mask),
            restricted: true,
            reduced,
            blocking: false,
        }
    }

    /// The round of `offer` ended, having agreed on `unit` if `Some`
    /// (taken out of the free units): the mask or the reserved units are
    /// given back.
    pub(crate) fn end_round(&mut self, offer: &Offer, unit: Option<usize>) {
        let Some(mask) = &offer.mask else {
            return;
        };
        if offer.blocking {
            self.offered = false;
        } else {
            for (r, m) in self.reserved.iter_mut().zip(mask) {
                *r &= !m;
            }
        }
        if let Some(u) = unit {
            debug_assert!(self.is_free(u), "unit {u} was offered free");
            self.free[u / 64] &= !(1 << (u % 64));
        }
    }

    /// Unit `u` is free again.
    pub(crate) fn release(&mut self, u: usize) {
        if (RESERVED_UNITS..UNITS).contains(&u) {
            self.free[u / 64] |= 1 << (u % 64);
        }
    }

    /// Whether unit `u` is free.
    pub(crate) fn is_free(&self, u: usize) -> bool {
        u < UNITS && self.free[u / 64] & (1 << (u % 64)) != 0
    }

    /// How many units are in use (the reserved ones included).
    pub(crate) fn in_use(&self) -> usize {
        self.free.iter().map(|w| w.count_zeros() as usize).sum()
    }
}

/// An agreement message: `flags`, `extra`, and the mask `words` (all of
/// them, or none), sent as its tail word and the words before the run of
/// equal words that ends it.
fn encode_words(flags: u8, words: &[u64], extra: [i32; 2]) -> Vec<u8> {
    let tail = words.last().copied().unwrap_or(0);
    let n = words.iter().rposition(|&w| w != tail).map_or(0, |i| i + 1);
    let mut m = Vec::with_capacity(HEAD + n * 8);
    m.push(flags);
    m.extend_from_slice(&extra[0].to_le_bytes());
    m.extend_from_slice(&extra[1].to_le_bytes());
    m.extend_from_slice(&tail.to_le_bytes());
    for w in &words[..n] {
        m.extend_from_slice(&w.to_le_bytes());
    }
    m
}

/// The `extra` of an agreement message (zeros for a malformed one).
pub(crate) fn extra_of(msg: &[u8]) -> [i32; 2] {
    let word = |at: usize| {
        msg.get(at..at + 4)
            .map_or(0, |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    [word(1), word(5)]
}

/// What a round of an agreement decided (the same on every member: it is
/// computed from the same messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The lowest unit free on every member.
    Unit(usize),
    /// Someone did not offer, or left units out and none was common: try
    /// again.
    Retry,
    /// Every member offered all its free units, and none is free on all
    /// of them.
    Exhausted,
}

/// The combination of agreement messages: whether all offered, whether
/// any left units out, and the AND of their masks.
#[derive(Clone, Debug)]
pub(crate) struct Combined {
    all_offered: bool,
    restricted: bool,
    reduced: bool,
    and: Vec<u64>,
}

/// Combines agreement messages (a malformed one counts as no offer).
pub(crate) fn and_masks<'a>(msgs: impl IntoIterator<Item = &'a [u8]>) -> Combined {
    let mut c = Combined {
        all_offered: true,
        restricted: false,
        reduced: false,
        and: vec![u64::MAX; WORDS],
    };
    let word = |b: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        u64::from_le_bytes(w)
    };
    for m in msgs {
        let flags = m.first().copied().unwrap_or(0);
        c.reduced |= flags & REDUCED != 0;
        if flags & OFFERED == 0 || m.len() < HEAD || (m.len() - HEAD) % 8 != 0 {
            c.all_offered = false;
            continue;
        }
        c.restricted |= flags & RESTRICTED != 0;
        let tail = word(&m[9..17]);
        let words = &m[HEAD..];
        for (i, a) in c.and.iter_mut().enumerate() {
            *a &= words.get(i * 8..i * 8 + 8).map_or(tail, word);
        }
    }
    c
}

/// The outcome of combined messages ([`and_masks`]).
pub(crate) fn outcome_of(c: &Combined) -> Outcome {
    if !c.all_offered {
        return Outcome::Retry;
    }
    for (i, &w) in c.and.iter().enumerate() {
        if w != 0 {
            let u = i * 64 + w.trailing_zeros() as usize;
            if (RESERVED_UNITS..UNITS).contains(&u) {
                return Outcome::Unit(u);
            }
        }
    }
    if c.restricted {
        Outcome::Retry
    } else {
        Outcome::Exhausted
    }
}

/// Combined messages as an agreement message of their own (what a leader
/// passes on for its group).
pub(crate) fn encode_and(c: &Combined, extra: [i32; 2]) -> Vec<u8> {
    let flags = match (c.all_offered, c.restricted) {
        (false, _) => 0,
        (true, true) => OFFERED | RESTRICTED,
        (true, false) => OFFERED,
    } | if c.reduced { REDUCED } else { 0 };
    encode_words(flags, if c.all_offered { &c.and } else { &[] }, extra)
}

/// The error of an [`Outcome::Exhausted`] agreement.
pub(crate) fn exhausted(rt: &Runtime) -> Error {
    let in_use = rt.ctx_ids().in_use();
    Error::new(
        ErrorClass::Comm,
        format!(
            "out of communicator context ids: no id is free on every member \
             ({in_use} of {UNITS} in use here; free communicators you no longer need)"
        ),
    )
}

/// Runs `x` to completion, advancing this process's non-blocking
/// agreements meanwhile (the other members may wait in one of them for
/// this process before they join `x`); its messages (or its error).
fn finish_all(rt: &Runtime, mut x: Exchange) -> Result<Vec<Vec<u8>>> {
    let mut polls = 0u32;
    while !x.test() {
        polls += 1;
        if polls % 64 == 0 {
            rt.retry_pause();
        } else {
            std::hint::spin_loop();
        }
    }
    Ok(x.received()?.into_iter().map(<[u8]>::to_vec).collect())
}

/// A blocking agreement on a fresh unit among `members` (ranks on context
/// `ctx`, this process at index `me`), messages tagged `tag`, with
/// priority `key`; `extra` travels with each proposal. Returns the unit
/// (taken out of this process's free units) and every member's `extra`,
/// in the order of `members`.
pub(crate) fn agree_among(
    rt: &Arc<Runtime>,
    key: Key,
    ctx: u16,
    tag: i32,
    members: &[u32],
    me: usize,
    extra: [i32; 2],
) -> Result<(usize, Vec<[i32; 2]>)> {
    let others: Vec<u32> = members
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != me)
        .map(|(_, &r)| r)
        .collect();
    rt.ctx_ids().register(key);
    let r = loop {
        let offer = rt.ctx_ids().offer(key);
        let mine = offer.encode(extra);
        let to = others.iter().map(|&p| (p, mine.clone())).collect();
        let got = finish_all(rt, Exchange::start(rt, ctx, tag, to, &others, MAX_MSG));
        let mut msgs = match got {
            Ok(m) => m,
            Err(e) => {
                rt.ctx_ids().end_round(&offer, None);
                break Err(e);
            }
        };
        msgs.insert(me, mine);
        let out = outcome_of(&and_masks(msgs.iter().map(Vec::as_slice)));
        rt.ctx_ids().end_round(&offer, unit_of(out));
        match out {
            Outcome::Unit(u) => break Ok((u, msgs.iter().map(|m| extra_of(m)).collect())),
            Outcome::Exhausted => break Err(exhausted(rt)),
            Outcome::Retry => rt.retry_pause(),
        }
    };
    rt.ctx_ids().unregister(key);
    r
}

fn unit_of(out: Outcome) -> Option<usize> {
    match out {
        Outcome::Unit(u) => Some(u),
        _ => None,
    }
}

/// One side of an agreement between two groups (an intercommunicator's):
/// its members are ranks on context `ctx` (messages tagged `tag`), this
/// process at index `me`, the leader at index `leader`.
#[derive(Clone, Debug)]
pub(crate) struct Side {
    pub(crate) ctx: u16,
    pub(crate) tag: i32,
    pub(crate) members: Vec<u32>,
    pub(crate) me: usize,
    pub(crate) leader: usize,
}

/// How the two leaders reach each other: the remote leader is rank
/// `remote_leader` on context `ctx`, messages tagged `tag`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Link {
    pub(crate) ctx: u16,
    pub(crate) remote_leader: u32,
    pub(crate) tag: i32,
}

/// Bytes in front of what a leader passes on: the length of its
/// agreement message.
fn frame(agreement: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(4 + agreement.len() + payload.len());
    m.extend_from_slice(&(agreement.len() as u32).to_le_bytes());
    m.extend_from_slice(agreement);
    m.extend_from_slice(payload);
    m
}

/// The agreement message and payload of a [`frame`].
fn unframe(m: &[u8]) -> Result<(&[u8], &[u8])> {
    let bad = || Error::new(ErrorClass::Intern, "malformed context agreement message");
    let n = m.get(..4).ok_or_else(bad)?;
    let n = u32::from_le_bytes([n[0], n[1], n[2], n[3]]) as usize;
    let a = m.get(4..4 + n).ok_or_else(bad)?;
    Ok((a, &m[4 + n..]))
}

/// A blocking agreement on a fresh unit free on every member of two
/// groups: each side's members send their proposal to their leader, the
/// leaders trade their side's combined mask and `payload` over `link`
/// (given to the leader only; an error there, such as a bad remote
/// leader, fails the whole side: the leader tells its members), and each
/// leader tells its side the outcome and the other side's payload.
/// Returns the unit and the remote side's payload.
pub(crate) fn agree_leaders(
    rt: &Arc<Runtime>,
    key: Key,
    side: &Side,
    link: Option<Result<Link>>,
    payload: &[u8],
) -> Result<(usize, Vec<u8>)> {
    let max = MAX_MSG + 64 + 4 * rt.size as usize + payload.len();
    let lead = side.members[side.leader];
    let others: Vec<u32> = side
        .members
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != side.leader)
        .map(|(_, &r)| r)
        .collect();
    rt.ctx_ids().register(key);
    let r = loop {
        let offer = rt.ctx_ids().offer(key);
        let mine = offer.encode([0, 0]);
        // The outcome as the leader tells it: code, unit, remote payload.
        let told: Result<Vec<u8>> = if side.me != side.leader {
            let up = Exchange::start(rt, side.ctx, side.tag, vec![(lead, mine)], &[], 0);
            let down = Exchange::start(rt, side.ctx, side.tag, vec![], &[lead], max);
            finish_all(rt, up)
                .and(finish_all(rt, down))
                .map(|mut m| m.remove(0))
        } else {
            let r: Result<Vec<u8>> = (|| {
                let link = link.clone().unwrap_or_else(|| {
                    Err(Error::new(
                        ErrorClass::Intern,
                        "the leader has no link to the other side",
                    ))
                })?;
                let mut msgs = finish_all(
                    rt,
                    Exchange::start(rt, side.ctx, side.tag, vec![], &others, MAX_MSG),
                )?;
                msgs.push(mine);
                let ours = frame(
                    &encode_and(&and_masks(msgs.iter().map(Vec::as_slice)), [0, 0]),
                    payload,
                );
                let x = Exchange::start(
                    rt,
                    link.ctx,
                    link.tag,
                    vec![(link.remote_leader, ours.clone())],
                    &[link.remote_leader],
                    max,
                );
                let theirs = finish_all(rt, x)?.remove(0);
                let (a1, _) = unframe(&ours)?;
                let (a2, remote_payload) = unframe(&theirs)?;
                let (code, unit) = match outcome_of(&and_masks([a1, a2])) {
                    Outcome::Unit(u) => (0u8, u as u32),
                    Outcome::Retry => (1, 0),
                    Outcome::Exhausted => (2, 0),
                };
                let mut down = vec![code];
                down.extend_from_slice(&unit.to_le_bytes());
                down.extend_from_slice(remote_payload);
                Ok(down)
            })();
            // The members wait for the outcome, a failure included: code
            // 3, the error class, and the message.
            let down = match &r {
                Ok(d) => d.clone(),
                Err(e) => {
                    let mut d = vec![3u8];
                    d.extend_from_slice(&(e.class().code() as u32).to_le_bytes());
                    let msg = e.to_string();
                    d.extend_from_slice(&msg.as_bytes()[..msg.len().min(256)]);
                    d
                }
            };
            let to = others.iter().map(|&p| (p, down.clone())).collect();
            let sent = finish_all(rt, Exchange::start(rt, side.ctx, side.tag, to, &[], 0));
            r.and_then(|d| sent.map(|_| d))
        };
        let told = match told {
            Ok(t) if t.len() >= 5 => t,
            Ok(_) => {
                rt.ctx_ids().end_round(&offer, None);
                break Err(Error::new(
                    ErrorClass::Intern,
                    "malformed context agreement outcome",
                ));
            }
            Err(e) => {
                rt.ctx_ids().end_round(&offer, None);
                break Err(e);
            }
        };
        let unit = u32::from_le_bytes([told[1], told[2], told[3], told[4]]) as usize;
        match told[0] {
            0 => {
                rt.ctx_ids().end_round(&offer, Some(unit));
                break Ok((unit, told[5..].to_vec()));
            }
            1 => {
                rt.ctx_ids().end_round(&offer, None);
                rt.retry_pause();
            }
            3 => {
                rt.ctx_ids().end_round(&offer, None);
                break Err(Error::new(
                    ErrorClass::from_code(unit as i32).unwrap_or(ErrorClass::Other),
                    format!(
                        "the group's leader failed: {}",
                        String::from_utf8_lossy(&told[5..])
                    ),
                ));
            }
            _ => {
                rt.ctx_ids().end_round(&offer, None);
                break Err(exhausted(rt));
            }
        }
    };
    rt.ctx_ids().unregister(key);
    r
}

/// How the members of a non-blocking agreement reach each other.
#[derive(Debug)]
enum Shape {
    /// Every rank `0..n` of context `ctx` with every other (messages
    /// tagged `tag`; this process is `me`).
    All {
        ctx: u16,
        tag: i32,
        me: u32,
        others: Vec<u32>,
    },
    /// Two groups through their leaders (an intercommunicator's): as
    /// [`agree_leaders`], with no payload.
    Leaders { side: Side, link: Option<Link> },
}

/// Where a round of a non-blocking agreement stands.
#[derive(Debug)]
enum Stage {
    /// `All`: the all-gather, and this process's message.
    Gather(Exchange, Vec<u8>),
    /// `Leaders`, a member: its message up, the outcome down.
    Member(Exchange, Exchange),
    /// `Leaders`, the leader: collecting its members' messages (and its
    /// own).
    Up(Exchange, Vec<u8>),
    /// The leader: trading the side's combined message with the other
    /// leader (its own framed message kept).
    Link(Exchange, Vec<u8>),
    /// The leader: telling its members the outcome (kept).
    Down(Exchange, Vec<u8>),
}

/// Outcome codes of a round as a leader tells it (and as a round of
/// `Shape::All` is read): a unit; try again; out of ids; a failure (class
/// and message follow); try again, everyone having offered all it could
/// and none in common (counted towards running out).
const AGREED: u8 = 0;
const AGAIN: u8 = 1;
const EXHAUSTED: u8 = 2;
const FAILED: u8 = 3;
const AGAIN_EMPTY: u8 = 4;

/// The outcome code and unit of combined messages.
fn code_of(c: &Combined) -> (u8, u32) {
    match outcome_of(c) {
        Outcome::Unit(u) => (AGREED, u as u32),
        Outcome::Exhausted => (EXHAUSTED, 0),
        Outcome::Retry if c.all_offered && !c.reduced => (AGAIN_EMPTY, 0),
        Outcome::Retry => (AGAIN, 0),
    }
}

/// An outcome message: code, unit (or error class), text.
fn told(code: u8, unit: u32, text: &[u8]) -> Vec<u8> {
    let mut d = vec![code];
    d.extend_from_slice(&unit.to_le_bytes());
    d.extend_from_slice(text);
    d
}

/// The outcome message of a failure.
fn told_error(e: &Error) -> Vec<u8> {
    let msg = e.to_string();
    told(
        FAILED,
        e.class().code() as u32,
        &msg.as_bytes()[..msg.len().min(256)],
    )
}

/// A non-blocking agreement (`MPI_Comm_idup`), among all ranks of a
/// communicator's internal context or, for an intercommunicator, through
/// the two groups' leaders: each stage's messages are posted at once, and
/// [`NbAgree::poll`] (from a test or wait of its request, from a test of
/// any other, or while this process waits in a blocking agreement) moves
/// on when they completed, starting the next round if it must. It never
/// blocks, and never holds the mask: each round offers (and reserves) the
/// free units of one class ([`CtxIds::offer_nb`]), the class moving on
/// from round to round.
#[derive(Debug)]
pub(crate) struct NbAgree {
    rt: Arc<Runtime>,
    shape: Shape,
    /// The class of the first round (from the key: the same on every
    /// member, different for concurrent agreements on one parent).
    class0: usize,
    /// Rounds done.
    rounds: usize,
    /// Rounds in a row in which everyone offered and nothing was common.
    empty: usize,
    /// The round in flight, and this process's offer in it.
    round: Option<(Stage, Offer)>,
    /// The agreed unit, or the error, until [`NbAgree::take`] takes it.
    result: Option<Result<usize>>,
    /// Whether the agreement is over (its result may have been taken).
    over: bool,
}

impl NbAgree {
    /// Starts an agreement among ranks `0..n` of context `ctx` (this
    /// process is `me`), messages tagged `tag`, for the creation `key`.
    pub(crate) fn start(
        rt: &Arc<Runtime>,
        key: Key,
        ctx: u16,
        tag: i32,
        n: u32,
        me: u32,
    ) -> NbAgree {
        let others = (0..n).filter(|&r| r != me).collect();
        NbAgree::with_shape(
            rt,
            key,
            Shape::All {
                ctx,
                tag,
                me,
                others,
            },
        )
    }

    /// Starts an agreement of two groups through their leaders (`link`:
    /// the leader's way to the other one; `None` elsewhere).
    pub(crate) fn start_leaders(
        rt: &Arc<Runtime>,
        key: Key,
        side: Side,
        link: Option<Link>,
    ) -> NbAgree {
        NbAgree::with_shape(rt, key, Shape::Leaders { side, link })
    }

    fn with_shape(rt: &Arc<Runtime>, key: Key, shape: Shape) -> NbAgree {
        let mut a = NbAgree {
            rt: Arc::clone(rt),
            shape,
            class0: (usize::from(key.0) * 7 + key.1 as usize) % CLASSES,
            rounds: 0,
            empty: 0,
            round: None,
            result: None,
            over: false,
        };
        a.poll();
        a
    }

    /// The outcome, once the agreement is over (given once).
    pub(crate) fn take(&mut self) -> Option<Result<usize>> {
        self.result.take()
    }

    fn finish(&mut self, r: Result<usize>) {
        self.result = Some(r);
        self.over = true;
    }

    /// The largest message of a leader's exchanges.
    fn max(&self) -> usize {
        MAX_MSG + 64 + 4 * self.rt.size as usize + 300
    }

    /// Posts a round's first messages.
    fn start_round(&mut self) -> (Stage, Offer) {
        let class = (self.class0 + self.rounds) % CLASSES;
        let offer = self.rt.ctx_ids().offer_nb(class);
        let mine = offer.encode([0, 0]);
        let rt = &self.rt;
        let stage = match &self.shape {
            Shape::All {
                ctx, tag, others, ..
            } => {
                let to = others.iter().map(|&p| (p, mine.clone())).collect();
                Stage::Gather(Exchange::start(rt, *ctx, *tag, to, others, MAX_MSG), mine)
            }
            Shape::Leaders { side, .. } => {
                let lead = side.members[side.leader];
                let others: Vec<u32> = side
                    .members
                    .iter()
                    .enumerate()
                    .filter(|&(i, _)| i != side.leader)
                    .map(|(_, &r)| r)
                    .collect();
                if side.me != side.leader {
                    let up = Exchange::start(rt, side.ctx, side.tag, vec![(lead, mine)], &[], 0);
                    let down = Exchange::start(rt, side.ctx, side.tag, vec![], &[lead], self.max());
                    Stage::Member(up, down)
                } else {
                    let x = Exchange::start(rt, side.ctx, side.tag, vec![], &others, MAX_MSG);
                    Stage::Up(x, mine)
                }
            }
        };
        (stage, offer)
    }

    /// The leader tells its members `down` (and then reads it itself).
    fn tell(&self, down: Vec<u8>) -> Stage {
        let Shape::Leaders { side, .. } = &self.shape else {
            unreachable!("only a leader tells")
        };
        let to = side
            .members
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != side.leader)
            .map(|(_, &r)| (r, down.clone()))
            .collect();
        Stage::Down(
            Exchange::start(&self.rt, side.ctx, side.tag, to, &[], 0),
            down,
        )
    }

    /// Ends the round of `offer` with outcome message `t`.
    fn settle(&mut self, offer: &Offer, t: &[u8]) {
        let (code, unit) = match t {
            [c, a, b, d, e, ..] => (*c, u32::from_le_bytes([*a, *b, *d, *e])),
            _ => (FAILED, ErrorClass::Intern.code() as u32),
        };
        self.rounds += 1;
        match code {
            AGREED => {
                self.rt.ctx_ids().end_round(offer, Some(unit as usize));
                self.finish(Ok(unit as usize));
            }
            AGAIN | AGAIN_EMPTY => {
                self.rt.ctx_ids().end_round(offer, None);
                // Every class tried twice with everyone offering all its
                // free units of the class and nothing in common: out of
                // ids (the same decision on every member: it rests on the
                // same messages).
                self.empty = if code == AGAIN_EMPTY {
                    self.empty + 1
                } else {
                    0
                };
                if self.empty >= 2 * CLASSES {
                    let e = exhausted(&self.rt);
                    self.finish(Err(e));
                }
            }
            EXHAUSTED => {
                self.rt.ctx_ids().end_round(offer, None);
                let e = exhausted(&self.rt);
                self.finish(Err(e));
            }
            _ => {
                self.rt.ctx_ids().end_round(offer, None);
                let e = Error::new(
                    ErrorClass::from_code(unit as i32).unwrap_or(ErrorClass::Other),
                    format!(
                        "context agreement failed: {}",
                        String::from_utf8_lossy(t.get(5..).unwrap_or(&[]))
                    ),
                );
                self.finish(Err(e));
            }
        }
    }

    /// Advances the agreement without blocking; whether it is over.
    pub(crate) fn poll(&mut self) -> bool {
        loop {
            if self.over {
                return true;
            }
            let Some((stage, offer)) = self.round.take() else {
                self.round = Some(self.start_round());
                continue;
            };
            match stage {
                Stage::Gather(mut x, mine) => {
                    if !x.test() {
                        self.round = Some((Stage::Gather(x, mine), offer));
                        return false;
                    }
                    let t = match x.received() {
                        Ok(msgs) => {
                            let Shape::All { me, .. } = &self.shape else {
                                unreachable!("a gather is an All agreement's")
                            };
                            let mut msgs: Vec<&[u8]> = msgs;
                            msgs.insert(*me as usize, &mine);
                            let (code, unit) = code_of(&and_masks(msgs));
                            told(code, unit, &[])
                        }
                        Err(e) => told_error(&e),
                    };
                    self.settle(&offer, &t);
                }
                Stage::Member(mut up, mut down) => {
                    let (a, b) = (up.test(), down.test());
                    if !(a && b) {
                        self.round = Some((Stage::Member(up, down), offer));
                        return false;
                    }
                    let t = match up.received().and(down.received()) {
                        Ok(m) => m.first().map_or_else(Vec::new, |m| m.to_vec()),
                        Err(e) => told_error(&e),
                    };
                    self.settle(&offer, &t);
                }
                Stage::Up(mut x, mine) => {
                    if !x.test() {
                        self.round = Some((Stage::Up(x, mine), offer));
                        return false;
                    }
                    let Shape::Leaders { link, .. } = &self.shape else {
                        unreachable!("only a leader collects")
                    };
                    let next = match (x.received(), link) {
                        (Ok(msgs), Some(link)) => {
                            let mut msgs: Vec<&[u8]> = msgs;
                            msgs.push(&mine);
                            let ours = frame(&encode_and(&and_masks(msgs), [0, 0]), &[]);
                            let l = Exchange::start(
                                &self.rt,
                                link.ctx,
                                link.tag,
                                vec![(link.remote_leader, ours.clone())],
                                &[link.remote_leader],
                                self.max(),
                            );
                            Stage::Link(l, ours)
                        }
                        (Err(e), _) => self.tell(told_error(&e)),
                        (_, None) => self.tell(told_error(&Error::new(
                            ErrorClass::Intern,
                            "the leader has no link to the other side",
                        ))),
                    };
                    self.round = Some((next, offer));
                }
                Stage::Link(mut x, ours) => {
                    if !x.test() {
                        self.round = Some((Stage::Link(x, ours), offer));
                        return false;
                    }
                    let t = (|| {
                        let theirs = x.received()?;
                        let theirs = theirs.first().copied().unwrap_or(&[]);
                        let (a1, _) = unframe(&ours)?;
                        let (a2, _) = unframe(theirs)?;
                        let (code, unit) = code_of(&and_masks([a1, a2]));
                        Ok(told(code, unit, &[]))
                    })()
                    .unwrap_or_else(|e: Error| told_error(&e));
                    let next = self.tell(t);
                    self.round = Some((next, offer));
                }
                Stage::Down(mut x, t) => {
                    if !x.test() {
                        self.round = Some((Stage::Down(x, t), offer));
                        return false;
                    }
                    self.settle(&offer, &t);
                }
            }
        }
    }
}

impl Drop for NbAgree {
    fn drop(&mut self) {
        // The other members wait for this one's messages: finish; a unit
        // agreed on but never taken is free again.
        while !self.poll() {
            self.rt.retry_pause();
        }
        if let Some(Ok(u)) = self.result.take() {
            self.rt.ctx_ids().release(u);
        }
    }
}

/// Point-to-point messages posted together on one context and tag: a
/// send of its own bytes to each of some ranks, a receive of at most
/// [`MAX_MSG`] bytes from each of others. The buffers live here (on the
/// heap, so the struct may move) until every request completed; dropping
/// it waits for those still pending.
#[derive(Debug)]
pub(crate) struct Exchange {
    sends: Vec<Box<[u8]>>,
    recvs: Vec<Box<[u8]>>,
    /// Received lengths (set as receives complete).
    lens: Vec<usize>,
    /// Pending requests: (index into `recvs`, or `None` for a send).
    reqs: Vec<(Option<usize>, ReqId)>,
    err: Option<Error>,
    rt: Arc<Runtime>,
}

impl Exchange {
    /// Posts the receives (of at most `max` bytes) from `from` and the
    /// sends `to` (rank, bytes) on context `ctx` with tag `tag`.
    pub(crate) fn start(
        rt: &Arc<Runtime>,
        ctx: u16,
        tag: i32,
        to: Vec<(u32, Vec<u8>)>,
        from: &[u32],
        max: usize,
    ) -> Exchange {
        let mut x = Exchange {
            sends: Vec::with_capacity(to.len()),
            recvs: from.iter().map(|_| vec![0u8; max].into()).collect(),
            lens: vec![0; from.len()],
            reqs: Vec::with_capacity(to.len() + from.len()),
            err: None,
            rt: Arc::clone(rt),
        };
        rt.pml.with(|o| {
            for (i, (&peer, buf)) in from.iter().zip(x.recvs.iter_mut()).enumerate() {
                match o.irecv(
                    Buffer::Contig(buffer::bytes_mut(buf)),
                    Source::Rank(peer),
                    Tag::Value(tag),
                    ctx,
                ) {
                    Ok(id) => x.reqs.push((Some(i), id)),
                    Err(e) => {
                        x.err.get_or_insert(e.into());
                    }
                }
            }
            for (peer, bytes) in to {
                let b: Box<[u8]> = bytes.into();
                match o.isend(
                    Buffer::Contig(buffer::bytes(&b)),
                    peer,
                    tag,
                    ctx,
                    SendMode::Standard,
                ) {
                    Ok(id) => x.reqs.push((None, id)),
                    Err(e) => {
                        x.err.get_or_insert(e.into());
                    }
                }
                x.sends.push(b);
            }
        });
        x
    }

    fn finish(&mut self, i: Option<usize>, st: Result<crate::Status>) {
        match st {
            Ok(s) => {
                if let Some(i) = i {
                    self.lens[i] = s.bytes();
                }
            }
            Err(e) => {
                self.err.get_or_insert(e);
            }
        }
    }

    /// Whether every request completed (one progress pass, then a test of
    /// each).
    pub(crate) fn test(&mut self) -> bool {
        if self.reqs.is_empty() {
            return true;
        }
        let rt = Arc::clone(&self.rt);
        rt.pml.progress();
        let mut k = 0;
        while k < self.reqs.len() {
            let (i, id) = self.reqs[k];
            match rt.pml.with(|o| o.test(id)) {
                Ok(None) => k += 1,
                done => {
                    self.reqs.swap_remove(k);
                    self.finish(i, status_result(done.map(|s| s.expect("complete"))));
                }
            }
        }
        self.reqs.is_empty()
    }

    /// Waits for every request.
    pub(crate) fn wait(&mut self) {
        while let Some((i, id)) = self.reqs.pop() {
            let st = status_result(self.rt.pml.wait(id));
            self.finish(i, st);
        }
    }

    /// The received messages, in the order of `from` (after completion),
    /// or the first error.
    pub(crate) fn received(&self) -> Result<Vec<&[u8]>> {
        if let Some(e) = &self.err {
            return Err(e.clone());
        }
        Ok(self
            .recvs
            .iter()
            .zip(&self.lens)
            .map(|(b, &n)| &b[..n])
            .collect())
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        // Pending requests complete before their buffers go.
        self.wait();
    }
}
