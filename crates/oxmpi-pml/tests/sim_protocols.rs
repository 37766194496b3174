//! Every protocol and fallback of the ob1 PML, driven deterministically in
//! one process over the simulated BTL (plus `self`), asserting the data and
//! the protocol counters.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use oxmpi_btl::btl::{
    Access, AmTag, Btl, BtlError, BtlSink, Caps, Descriptor, Endpoint, Limits, PeerInfo, RegId,
    Registration, RemoteKey, SendOutcome, SmallMatch, SmallRecv, Token,
};
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::self_btl::{SelfBtl, DEFAULT_LIMITS};
use oxmpi_btl::sim::{SimBtl, SimConfig, SimNet};
use oxmpi_match::{Source, Tag};
use oxmpi_pml::hdr::{Hdr, ReqRef};
use oxmpi_pml::{
    Buffer, BufferScope, ErrClass, Layout, Ob1, PeerDesc, PmlConfig, ReqId, SendMode, Status,
};

/// A BTL with some capabilities masked off (to force the protocols that a
/// BTL without GET, or without any RDMA, gets).
struct Masked<B: Btl> {
    inner: B,
    keep: Caps,
    extra: Caps,
    /// PUT and/or GET here fail (an I/O error from the call).
    fail: Caps,
    /// Control messages of this active-message tag are held back (sent
    /// by a later progress call once `Hold::release` is set).
    hold: Option<Rc<Hold>>,
    /// Puts go out with a forged key (the target refuses them).
    forge_keys: bool,
    /// When set, the module says a peer's fragments can be seen landing by
    /// polling `progress_from` alone (as shared memory does), and while the
    /// count is above 0 each `progress_from` call finds nothing and takes
    /// one off it (a message that lands during the polling).
    late_reads: Option<Rc<Cell<u32>>>,
    /// Each control message this module sends is followed by the frame
    /// this makes of it, if any (a forger's copy).
    forge: Option<Forger>,
}

/// Makes a forged frame from a control message this module sent.
type Forger = Rc<dyn Fn(AmTag, &[u8]) -> Option<Vec<u8>>>;

impl<B: Btl> Masked<B> {
    /// `inner` with every capability kept and nothing held, failed, forged
    /// or late.
    fn plain(inner: B) -> Self {
        Masked {
            inner,
            keep: all_caps(),
            extra: Caps::NONE,
            fail: Caps::NONE,
            hold: None,
            forge_keys: false,
            late_reads: None,
            forge: None,
        }
    }
}

/// Control messages a [`Masked`] BTL holds back.
#[derive(Default)]
struct Hold {
    tag: u8,
    frames: RefCell<Vec<(Endpoint, AmTag, Vec<u8>)>>,
    release: Cell<bool>,
}

impl<B: Btl> Btl for Masked<B> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn caps(&self) -> Caps {
        Caps::from_bits((self.inner.caps() | self.extra).bits() & self.keep.bits())
    }
    fn limits(&self) -> &Limits {
        self.inner.limits()
    }
    fn business_card(&self) -> Vec<u8> {
        self.inner.business_card()
    }
    fn add_peer(&mut self, peer: &PeerInfo<'_>) -> Result<Option<Endpoint>, BtlError> {
        self.inner.add_peer(peer)
    }
    fn del_peer(&mut self, ep: Endpoint) {
        self.inner.del_peer(ep)
    }
    fn alloc(&mut self, ep: Endpoint, len: usize) -> Result<Descriptor, BtlError> {
        self.inner.alloc(ep, len)
    }
    fn free(&mut self, desc: Descriptor) {
        self.inner.free(desc)
    }
    fn prepare_src(
        &mut self,
        ep: Endpoint,
        reserve: usize,
        data: MemRegion,
    ) -> Result<Descriptor, BtlError> {
        self.inner.prepare_src(ep, reserve, data)
    }
    fn send(
        &mut self,
        desc: Descriptor,
        tag: AmTag,
        token: Token,
    ) -> Result<SendOutcome, (Descriptor, BtlError)> {
        self.inner.send(desc, tag, token)
    }
    fn sendi(&mut self, ep: Endpoint, tag: AmTag, parts: &[&[u8]]) -> Result<(), BtlError> {
        if let Some(h) = self.hold.as_ref().filter(|h| h.tag == tag.0) {
            h.frames.borrow_mut().push((ep, tag, parts.concat()));
            return Ok(());
        }
        self.inner.sendi(ep, tag, parts)?;
        if let Some(forged) = self.forge.as_ref().and_then(|f| f(tag, &parts.concat())) {
            self.inner.sendi(ep, tag, &[&forged])?;
        }
        Ok(())
    }
    fn register_mem(
        &mut self,
        region: MemRegion,
        access: Access,
    ) -> Result<Registration, BtlError> {
        self.inner.register_mem(region, access)
    }
    fn sub_key(
        &self,
        reg: &Registration,
        offset: usize,
        len: usize,
    ) -> Result<RemoteKey, BtlError> {
        self.inner.sub_key(reg, offset, len)
    }

    fn deregister_mem(&mut self, id: RegId) {
        self.inner.deregister_mem(id)
    }
    fn put(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        assert!(self.caps().contains(Caps::PUT), "PUT on a BTL without PUT");
        if self.fail.contains(Caps::PUT) {
            return Err(BtlError::Io("injected put failure".into()));
        }
        if self.forge_keys {
            let forged = RemoteKey::new(&[0xee; 28]).expect("a key");
            return self.inner.put(ep, local, &forged, remote_offset, token);
        }
        self.inner.put(ep, local, remote, remote_offset, token)
    }
    fn get(
        &mut self,
        ep: Endpoint,
        local: MemRegion,
        remote: &RemoteKey,
        remote_offset: usize,
        token: Token,
    ) -> Result<(), BtlError> {
        assert!(self.caps().contains(Caps::GET), "GET on a BTL without GET");
        if self.fail.contains(Caps::GET) {
            return Err(BtlError::Io("injected get failure".into()));
        }
        self.inner.get(ep, local, remote, remote_offset, token)
    }
    fn progress(&mut self, sink: &mut dyn BtlSink) -> usize {
        if let Some(h) = self.hold.as_ref().filter(|h| h.release.get()) {
            for (ep, tag, bytes) in h.frames.borrow_mut().drain(..) {
                self.inner.sendi(ep, tag, &[&bytes]).unwrap();
            }
        }
        self.inner.progress(sink)
    }
    fn progress_from(&mut self, ep: Endpoint, take: &mut dyn FnMut(AmTag, &[u8]) -> bool) -> usize {
        if let Some(late) = self.late_reads.as_ref().filter(|l| l.get() > 0) {
            late.set(late.get() - 1);
            return 0;
        }
        self.inner.progress_from(ep, take)
    }
    fn recv_small(&mut self, ep: Endpoint, m: &SmallMatch, dst: &mut [u8]) -> SmallRecv {
        if let Some(late) = self.late_reads.as_ref().filter(|l| l.get() > 0) {
            late.set(late.get() - 1);
            return SmallRecv::Empty;
        }
        self.inner.recv_small(ep, m, dst)
    }
    fn polls_from_peer(&self) -> bool {
        self.late_reads.is_some()
    }
    fn has_work(&self) -> bool {
        self.inner.has_work()
    }
}

struct World {
    net: SimNet,
    /// More networks (a second BTL between the same ranks).
    extra: Vec<SimNet>,
    ranks: Vec<Ob1<dyn Btl>>,
}

const CTX: u16 = 0;

fn world_with(n: u32, sim: SimConfig, keep: Caps, pml: PmlConfig) -> World {
    world_ext(n, sim, keep, Caps::NONE, pml)
}

fn world_ext(n: u32, sim: SimConfig, keep: Caps, extra: Caps, pml: PmlConfig) -> World {
    world_failing(n, sim, keep, extra, Caps::NONE, pml)
}

fn world_failing(
    n: u32,
    sim: SimConfig,
    keep: Caps,
    extra: Caps,
    fail: Caps,
    pml: PmlConfig,
) -> World {
    world_over(vec![SimNet::new(sim)], n, pml, |_, inner| Masked {
        inner,
        keep,
        extra,
        fail,
        hold: None,
        forge_keys: false,
        late_reads: None,
        forge: None,
    })
}

/// `n` ranks joined by every network of `nets`: each has the self BTL and
/// one module per network, as `wrap(rank, module)` wraps it.
fn world_over(
    nets: Vec<SimNet>,
    n: u32,
    pml: PmlConfig,
    mut wrap: impl FnMut(u32, SimBtl) -> Masked<SimBtl>,
) -> World {
    let mut mods: Vec<Vec<SimBtl>> = (0..n)
        .map(|r| nets.iter().map(|net| net.module(r)).collect())
        .collect();
    let peers: Vec<PeerDesc> = mods
        .iter()
        .map(|row| PeerDesc {
            local: false,
            cards: std::iter::once(None)
                .chain(row.iter().map(|m| Some(m.business_card())))
                .collect(),
        })
        .collect();
    let mut ranks = Vec::new();
    for (r, row) in mods.drain(..).enumerate() {
        let r = r as u32;
        let mut btls: Vec<Box<dyn Btl>> = vec![Box::new(SelfBtl::new(r, DEFAULT_LIMITS))];
        for m in row {
            btls.push(Box::new(wrap(r, m)));
        }
        let mut o = Ob1::new(pml.clone(), r, btls, &peers).unwrap();
        o.set_clock(Arc::new(SimClock(nets[0].time())));
        o.add_comm(CTX, (0..n).collect(), r).unwrap();
        ranks.push(o);
    }
    let mut nets = nets.into_iter();
    World {
        net: nets.next().expect("a network"),
        extra: nets.collect(),
        ranks,
    }
}

/// The engine's clock in a simulated world: the network's virtual time.
struct SimClock(Arc<std::sync::atomic::AtomicU64>);

impl oxmpi_pml::clock::Clock for SimClock {
    fn now_ns(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The PML's defaults, except that split transfers keep even halves
/// (`split_transfers_stay_whole_while_the_share_moves` and
/// `the_split_share_follows_virtual_copy_times` turn balancing on).
fn sim_pml() -> PmlConfig {
    PmlConfig {
        rdma_split_balance: false,
        ..PmlConfig::default()
    }
}

/// Two ranks whose modules see a peer's fragments land by polling; while
/// the returned count is above 0, each read of a channel finds nothing and
/// takes one off it (a message that lands during the polling).
fn world_late_reads() -> (World, Rc<Cell<u32>>) {
    let late = Rc::new(Cell::new(0));
    let l = late.clone();
    let w = world_over(
        vec![SimNet::new(SimConfig::default())],
        2,
        sim_pml(),
        move |_, inner| Masked {
            late_reads: Some(l.clone()),
            ..Masked::plain(inner)
        },
    );
    (w, late)
}

/// [`world_late_reads`] with one 8-byte message of tag 5 from rank 0
/// delivered to rank 1 (its bytes returned).
fn late_world_with_one(seed: u8) -> (World, Rc<Cell<u32>>, Mem) {
    let (mut w, late) = world_late_reads();
    let mut src = Mem::pattern(8, seed);
    to_rank1(&mut w, 0, &mut src, 5);
    deliver_all(&mut w);
    (w, late, src)
}

/// A standard send of `m` with `tag` from rank `from` to rank 1 (not yet
/// delivered).
fn to_rank1(w: &mut World, from: usize, m: &mut Mem, tag: i32) {
    w.ranks[from]
        .isend(m.buf(), 1, tag, CTX, SendMode::Standard)
        .unwrap();
}

fn world(n: u32) -> World {
    world_with(n, SimConfig::default(), all_caps(), sim_pml())
}

fn all_caps() -> Caps {
    Caps::SEND | Caps::SENDI | Caps::PUT | Caps::GET | Caps::SEND_INPLACE | Caps::ORDERED
}

impl World {
    /// Progresses every rank and the network until `done` or nothing can
    /// move any more (then panics: a hang in a test is a failure).
    fn run_until(&mut self, mut done: impl FnMut(&mut World) -> bool) {
        for _ in 0..2_000_000 {
            if done(self) {
                return;
            }
            let mut moved = 0;
            for o in &mut self.ranks {
                moved += o.progress();
            }
            if moved == 0 && !self.advance() {
                // Idle rounds still poll every BTL every 8th call.
                let mut again = 0;
                for _ in 0..16 {
                    for o in &mut self.ranks {
                        again += o.progress();
                    }
                }
                if again == 0 && !self.busy() && !done(self) {
                    panic!("the world is stuck");
                }
            }
        }
        panic!(
            "no completion after 2M rounds: {:?} / {:?}",
            self.ranks[0].counters(),
            self.ranks[1].counters()
        );
    }

    /// Advances every network to its next event; whether any had one.
    fn advance(&mut self) -> bool {
        let mut any = self.net.advance_to_next();
        for n in &self.extra {
            any |= n.advance_to_next();
        }
        any
    }

    /// `n` rounds of: every rank progresses, then the network advances by
    /// `step` ns (or, `None`, to its next event).
    fn spin(&mut self, n: usize, step: Option<u64>) {
        for _ in 0..n {
            for o in &mut self.ranks {
                o.progress();
            }
            match step {
                Some(ns) => self.net.advance(ns),
                None => {
                    self.net.advance_to_next();
                }
            }
        }
    }

    fn busy(&self) -> bool {
        self.net.busy() || self.extra.iter().any(|n| n.busy())
    }

    /// Posts a receive on `rank` and waits for it.
    fn recv(&mut self, rank: usize, buf: Buffer, src: Source, tag: Tag) -> Status {
        let r = self.ranks[rank].irecv(buf, src, tag, CTX).unwrap();
        self.wait(rank, r)
    }

    fn wait(&mut self, rank: usize, id: ReqId) -> Status {
        let mut out = None;
        self.run_until(|w| {
            out = w.ranks[rank].test(id).unwrap();
            out.is_some()
        });
        out.unwrap()
    }
}

/// A heap buffer whose memory the PML may read or write while a request
/// is in flight (the test keeps it alive and untouched meanwhile).
struct Mem(Vec<u8>);

impl Mem {
    fn pattern(len: usize, seed: u8) -> Mem {
        Mem((0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect())
    }
    fn zeros(len: usize) -> Mem {
        Mem(vec![0; len])
    }
    fn region(&mut self) -> MemRegion {
        // SAFETY: every test keeps the Mem alive and does not touch it until
        // the requests given this region have completed.
        unsafe { MemRegion::new(self.0.as_mut_ptr(), self.0.len()) }
    }
    fn buf(&mut self) -> Buffer {
        Buffer::Contig(self.region())
    }
}

fn transfer(w: &mut World, len: usize, mode: SendMode) -> (Status, Status) {
    let (ss, rs, src, dst) = exchange(w, len, mode);
    assert_eq!(src.0, dst.0, "{len} bytes arrive intact");
    (ss, rs)
}

/// `len` patterned bytes from rank 0 to rank 1 (tag 5), whatever the
/// outcome: the send's and the receive's statuses and both buffers.
fn exchange(w: &mut World, len: usize, mode: SendMode) -> (Status, Status, Mem, Mem) {
    let mut src = Mem::pattern(len, 7);
    let mut dst = Mem::zeros(len);
    let s = w.ranks[0].isend(src.buf(), 1, 5, CTX, mode).unwrap();
    let rs = w.recv(1, dst.buf(), Source::Rank(0), Tag::Value(5));
    let ss = w.wait(0, s);
    (ss, rs, src, dst)
}

#[test]
fn a_small_isend_completes_at_once_with_its_status() {
    let mut w = world(2);
    let before = w.ranks[0].counters();
    let (ss, rs) = transfer(&mut w, 8, SendMode::Standard);
    let after = w.ranks[0].counters();
    assert_eq!(after.eager_sendi, before.eager_sendi + 1);
    assert_eq!((ss.bytes, ss.tag, ss.cancelled), (8, 5, false));
    assert_eq!((rs.bytes, rs.tag, rs.source), (8, 5, 0));
    // Complete without any progress, and harmless to test, free or cancel.
    let mut src = Mem::pattern(16, 1);
    let id = w.ranks[0]
        .isend(src.buf(), 1, 9, CTX, SendMode::Ready)
        .unwrap();
    assert!(id.completed_inline());
    assert!(w.ranks[0].is_complete(id).unwrap());
    w.ranks[0].cancel(id).unwrap();
    let st = w.ranks[0].test(id).unwrap().expect("complete");
    assert_eq!((st.bytes, st.tag, st.cancelled), (16, 9, false));
    w.ranks[0].request_free(id).unwrap();
    // Above the immediate-send limit, to a BTL whose send is done on return
    // (self), an eager send completes inline too: copied, no request.
    let mut big = Mem::pattern(1000, 2);
    let before = w.ranks[0].counters();
    let id = w.ranks[0]
        .isend(big.buf(), 0, 11, CTX, SendMode::Standard)
        .unwrap();
    assert!(id.completed_inline());
    let c = w.ranks[0].counters();
    assert_eq!(c.eager_copy, before.eager_copy + 1, "{c:?}");
    assert_eq!(c.eager_sendi, before.eager_sendi);
    let mut back = Mem::zeros(1000);
    let st = w.recv(0, back.buf(), Source::Rank(0), Tag::Value(11));
    assert_eq!((st.bytes, st.tag), (1000, 11));
    assert_eq!(back.0, big.0);
    // Over the network (its sends complete later) it takes a request.
    let id = w.ranks[0]
        .isend(big.buf(), 1, 12, CTX, SendMode::Standard)
        .unwrap();
    assert!(!id.completed_inline());
    w.recv(1, back.buf(), Source::Rank(0), Tag::Value(12));
    w.wait(0, id);
    // A synchronous send never completes inline.
    let sid = w.ranks[0]
        .isend(src.buf(), 1, 10, CTX, SendMode::Synchronous)
        .unwrap();
    assert!(!sid.completed_inline());
    assert!(!w.ranks[0].is_complete(sid).unwrap());
    let mut dst = Mem::zeros(16);
    for tag in [9, 10] {
        w.recv(1, dst.buf(), Source::Rank(0), Tag::Value(tag));
    }
    w.wait(0, sid);
}

/// Lets everything sent so far reach its destination's BTL, without any
/// rank's progress reading it.
fn deliver_all(w: &mut World) {
    while w.advance() {}
}

#[test]
fn a_receive_of_a_message_already_here_completes_as_it_is_posted() {
    let mut w = world(2);
    let mut src = Mem::pattern(24, 3);
    let mut dst: Vec<Mem> = (0..4).map(|_| Mem::zeros(24)).collect();
    // A receive posted before anything arrived waits as usual.
    let early = w.ranks[1]
        .irecv(dst[0].buf(), Source::Rank(0), Tag::Value(5), CTX)
        .unwrap();
    assert!(!early.completed_inline());
    for tag in [5, 5, 6] {
        w.ranks[0]
            .isend(src.buf(), 1, tag, CTX, SendMode::Standard)
            .unwrap();
    }
    deliver_all(&mut w);
    // The first message goes to the receive posted first, the second to the
    // new one, inside irecv: no request, its status in the handle.
    let id = w.ranks[1]
        .irecv(dst[1].buf(), Source::Rank(0), Tag::Value(5), CTX)
        .unwrap();
    assert!(id.completed_inline(), "the message was here");
    assert!(
        w.ranks[1].is_complete(early).unwrap(),
        "the first went to the earlier receive"
    );
    let st = w.ranks[1].test(id).unwrap().expect("complete");
    assert_eq!((st.source, st.tag, st.bytes, st.error), (0, 5, 24, None));
    assert_eq!(dst[1].0, src.0);
    let st = w.ranks[1].test(early).unwrap().expect("complete");
    assert_eq!((st.tag, st.bytes), (5, 24));
    assert_eq!(dst[0].0, src.0);
    // ANY_TAG takes the next one (tag 6) the same way.
    let id = w.ranks[1]
        .irecv(dst[2].buf(), Source::Rank(0), Tag::Any, CTX)
        .unwrap();
    assert!(id.completed_inline());
    let st = w.ranks[1].test(id).unwrap().expect("complete");
    assert_eq!((st.source, st.tag, st.bytes), (0, 6, 24));
    let c = w.ranks[1].counters();
    assert_eq!((c.recv_arrived, c.unexpected), (2, 0), "{c:?}");
    assert_eq!(c.bytes_received[0], 72);
    // Nothing left: a receive now is posted and waits.
    let id = w.ranks[1]
        .irecv(dst[3].buf(), Source::Rank(0), Tag::Value(7), CTX)
        .unwrap();
    assert!(!id.completed_inline());
    w.ranks[0]
        .isend(src.buf(), 1, 7, CTX, SendMode::Standard)
        .unwrap();
    assert_eq!(w.wait(1, id).tag, 7);
}

#[test]
fn a_message_already_here_keeps_matching_order() {
    let mut w = world(2);
    let mut a = Mem::pattern(16, 1);
    let mut b = Mem::pattern(16, 2);
    // An older message of the same tag is unexpected already: the new
    // receive takes it, not the one read while posting.
    w.ranks[0]
        .isend(a.buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    deliver_all(&mut w);
    w.ranks[1].progress();
    assert_eq!(w.ranks[1].counters().unexpected, 1);
    w.ranks[0]
        .isend(b.buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    deliver_all(&mut w);
    let mut d1 = Mem::zeros(16);
    let id = w.ranks[1]
        .irecv(d1.buf(), Source::Rank(0), Tag::Value(5), CTX)
        .unwrap();
    let st = w.wait(1, id);
    assert_eq!((st.tag, st.bytes), (5, 16));
    assert_eq!(d1.0, a.0, "the older message first");
    let mut d2 = Mem::zeros(16);
    w.recv(1, d2.buf(), Source::Rank(0), Tag::Value(5));
    assert_eq!(d2.0, b.0);
    // A message too long for the receive is truncated as usual, never
    // completed inside irecv.
    let taken_inline = w.ranks[1].counters().recv_arrived;
    w.ranks[0]
        .isend(b.buf(), 1, 8, CTX, SendMode::Standard)
        .unwrap();
    deliver_all(&mut w);
    let mut short = Mem::zeros(4);
    let id = w.ranks[1]
        .irecv(short.buf(), Source::Rank(0), Tag::Value(8), CTX)
        .unwrap();
    assert!(!id.completed_inline());
    let st = w.wait(1, id);
    assert_eq!((st.bytes, st.error), (4, Some(ErrClass::Truncate)));
    assert_eq!(short.0, b.0[..4]);
    assert_eq!(w.ranks[1].counters().recv_arrived, taken_inline);
}

#[test]
fn a_message_gone_unexpected_while_posting_is_taken_before_a_newer_one() {
    // The older message of tag 5 is a rendezvous: its RTS goes unexpected
    // during the read a receive makes before posting. The newer one, a
    // small eager message right behind it, must not go into the receive.
    let mut w = world(2);
    let mut big = Mem::pattern(600 * 1024, 1);
    let mut small = Mem::pattern(16, 2);
    let a = w.ranks[0]
        .isend(big.buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    w.ranks[0]
        .isend(small.buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    deliver_all(&mut w);
    assert_eq!(w.ranks[1].counters().unexpected, 0, "nothing read yet");
    let mut d1 = Mem::zeros(600 * 1024);
    let r1 = w.ranks[1]
        .irecv(d1.buf(), Source::Rank(0), Tag::Value(5), CTX)
        .unwrap();
    assert!(!r1.completed_inline(), "the newer message taken inline");
    assert!(
        w.ranks[1].counters().unexpected >= 1,
        "the read went through the RTS"
    );
    let mut d2 = Mem::zeros(600 * 1024);
    let st2 = w.recv(1, d2.buf(), Source::Rank(0), Tag::Value(5));
    let st1 = w.wait(1, r1);
    w.wait(0, a);
    assert_eq!((st1.bytes, st2.bytes), (600 * 1024, 16));
    assert_eq!(d1.0, big.0);
    assert_eq!(d2.0[..16], small.0[..]);
}

#[test]
fn a_blocking_receive_of_a_probed_message_does_not_poll_on() {
    // A probe left the message unexpected: the blocking receive does not
    // read the channel at all (posting takes the message at once) instead
    // of reading all of its polls first.
    let (mut w, late) = world_late_reads();
    let mut src = Mem::pattern(8, 4);
    let want = src.0.clone();
    // Rank 0 sends `tag`; rank 1 probes until the message is unexpected.
    let probed = |w: &mut World, src: &mut Mem, tag: i32| {
        to_rank1(w, 0, src, tag);
        deliver_all(w);
        while w.ranks[1]
            .iprobe(Source::Rank(0), Tag::Value(tag), CTX)
            .unwrap()
            .is_none()
        {}
    };
    // A blocking receive of `tag` into `dst` (up to 64 reads): its
    // handle, and how many reads it made before posting.
    let receive = |w: &mut World, dst: &mut Mem, tag: i32| {
        late.set(100);
        let id = w.ranks[1]
            .irecv_polling(dst.buf(), Source::Rank(0), Tag::Value(tag), CTX, 64)
            .unwrap();
        let reads = 100 - late.get();
        late.set(0);
        (id, reads)
    };
    probed(&mut w, &mut src, 5);
    let mut dst = Mem::zeros(8);
    let (id, reads) = receive(&mut w, &mut dst, 5);
    assert_eq!(reads, 0, "reads before posting");
    assert_eq!(w.wait(1, id).tag, 5);
    assert_eq!(dst.0, want);
    // With nothing unexpected that fits, it polls on as before.
    probed(&mut w, &mut src, 6);
    let mut other = Mem::zeros(8);
    let (id, reads) = receive(&mut w, &mut other, 7);
    assert_eq!(reads, 64, "64 reads for a tag nothing fits");
    let mut dst = Mem::zeros(8);
    let r6 = w.ranks[1]
        .irecv(dst.buf(), Source::Rank(0), Tag::Value(6), CTX)
        .unwrap();
    assert_eq!(w.wait(1, r6).tag, 6);
    w.ranks[1].cancel(id).unwrap();
    assert!(w.wait(1, id).cancelled);
}

#[test]
fn a_receive_posted_right_after_an_empty_small_read_does_not_read_again() {
    // `MPI_Irecv`: the small receive reads the source's channel; found
    // empty, the receive it then posts does not read the same channel a
    // moment later. Any other receive reads as before.
    let (mut w, late) = world_late_reads();
    // Reads made posting a receive of tag 5 from rank 0 with `polls`
    // (1: `irecv`, more: `irecv_polling`), after a small receive from the
    // same source (which reads once) when `small`; its handle.
    let post = |w: &mut World, small: bool, polls: u32, dst: &mut Mem| {
        late.set(100);
        if small {
            let mut b = [0u8; 8];
            let got = w.ranks[1].recv_small(&mut b, Source::Rank(0), Tag::Value(5), CTX, 1);
            assert!(got.is_none());
            assert_eq!(late.get(), 99, "the small receive reads once");
        }
        let before = late.get();
        let id = w.ranks[1]
            .irecv_polling(dst.buf(), Source::Rank(0), Tag::Value(5), CTX, polls)
            .unwrap();
        let reads = before - late.get();
        late.set(0);
        (id, reads)
    };
    let mut src = Mem::pattern(8, 3);
    let want = src.0.clone();
    let mut dst = Mem::zeros(8);
    let (id, reads) = post(&mut w, true, 1, &mut dst);
    assert_eq!(reads, 0, "no second read of the channel just found empty");
    // The message sent afterwards reaches the posted receive by progress.
    to_rank1(&mut w, 0, &mut src, 5);
    deliver_all(&mut w);
    assert_eq!(w.wait(1, id).tag, 5);
    assert_eq!(dst.0, want);
    // Without the small receive first, or for a blocking receive (which
    // polls on), the reads are as before.
    for (small, polls, want_reads) in [(false, 1, 1), (true, 64, 64)] {
        let mut dst = Mem::zeros(8);
        let (id, reads) = post(&mut w, small, polls, &mut dst);
        assert_eq!(
            reads, want_reads,
            "small receive first: {small}, polls {polls}"
        );
        w.ranks[1].cancel(id).unwrap();
        assert!(w.wait(1, id).cancelled);
    }
}

#[test]
fn a_blocking_receive_polls_its_source_before_posting() {
    // The BTL sees a peer's fragments land by polling `progress_from`; the
    // message is "in flight" for the first 3 reads.
    let (mut w, late) = world_late_reads();
    let mut src = Mem::pattern(8, 9);
    let want = src.0.clone();
    let mut send_one = |w: &mut World, tag: i32| {
        w.ranks[0]
            .isend(src.buf(), 1, tag, CTX, SendMode::Standard)
            .unwrap();
        deliver_all(w);
    };
    // Found on the 4th of 8 reads: completed without being posted.
    send_one(&mut w, 5);
    late.set(3);
    let mut dst = Mem::zeros(8);
    let id = w.ranks[1]
        .irecv_polling(dst.buf(), Source::Rank(0), Tag::Value(5), CTX, 8)
        .unwrap();
    assert!(id.completed_inline(), "taken while polling");
    assert_eq!(dst.0, want);
    assert_eq!(late.get(), 0);
    // Only 2 reads allowed: posted, and it completes as usual.
    send_one(&mut w, 6);
    late.set(3);
    let mut dst = Mem::zeros(8);
    let id = w.ranks[1]
        .irecv_polling(dst.buf(), Source::Rank(0), Tag::Value(6), CTX, 2)
        .unwrap();
    assert!(!id.completed_inline(), "posted after 2 empty reads");
    assert_eq!(late.get(), 1);
    late.set(0);
    assert_eq!(w.wait(1, id).tag, 6);
    assert_eq!(dst.0, want);
    // A message for another receive stops the polling at once (it goes
    // unexpected, in order), and the receive is posted.
    send_one(&mut w, 7);
    let mut dst = Mem::zeros(8);
    let id = w.ranks[1]
        .irecv_polling(dst.buf(), Source::Rank(0), Tag::Value(8), CTX, 8)
        .unwrap();
    assert!(!id.completed_inline());
    assert_eq!(w.ranks[1].counters().unexpected, 1);
    send_one(&mut w, 8);
    assert_eq!(w.wait(1, id).tag, 8);
    let mut seven = Mem::zeros(8);
    w.recv(1, seven.buf(), Source::Rank(0), Tag::Value(7));
    assert_eq!(seven.0, want);
    assert_eq!(w.ranks[1].counters().recv_arrived, 1);
}

/// The small-message receive (`Ob1::recv_small`, `MPI_Recv`'s fast path)
/// takes a message only where the ordinary receive would have taken it at
/// once: next from its source, fitting, its tag, nothing posted or
/// unexpected that could claim it first. Otherwise it takes nothing and the
/// ordinary receive does what it always did.
#[test]
fn the_small_receive_takes_only_what_the_receive_would_take_at_once() {
    let mut w = world(2);
    let mut src = Mem::pattern(8, 3);
    let want = src.0.clone();
    let mut send = |w: &mut World, tag: i32| {
        w.ranks[0]
            .isend(src.buf(), 1, tag, CTX, SendMode::Standard)
            .unwrap();
        deliver_all(w);
    };
    let mut dst = [0u8; 8];
    // Nothing here.
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Rank(0), Tag::Value(5), CTX, 4)
        .is_none());
    // Next, its tag: taken, with its status, counted as an arrival.
    send(&mut w, 5);
    let before = w.ranks[1].counters();
    let st = w.ranks[1]
        .recv_small(&mut dst, Source::Rank(0), Tag::Value(5), CTX, 1)
        .expect("taken");
    assert_eq!((st.source, st.tag, st.bytes, st.error), (0, 5, 8, None));
    assert_eq!(dst[..], want[..]);
    let after = w.ranks[1].counters();
    assert_eq!(after.recv_arrived, before.recv_arrived + 1);
    assert_eq!(after.bytes_received[0], before.bytes_received[0] + 8);
    // Any tag takes the next one.
    send(&mut w, 6);
    let st = w.ranks[1]
        .recv_small(&mut dst, Source::Rank(0), Tag::Any, CTX, 1)
        .expect("taken");
    assert_eq!((st.tag, st.bytes), (6, 8));
    // Another tag is next: nothing taken; the ordinary receive of that tag
    // gets it, and a later message of the first tag is taken after it.
    send(&mut w, 7);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Rank(0), Tag::Value(8), CTX, 1)
        .is_none());
    let mut m7 = Mem::zeros(8);
    assert_eq!(w.recv(1, m7.buf(), Source::Rank(0), Tag::Value(7)).tag, 7);
    send(&mut w, 8);
    assert_eq!(
        w.ranks[1]
            .recv_small(&mut dst, Source::Rank(0), Tag::Value(8), CTX, 1)
            .map(|s| s.tag),
        Some(8)
    );
    // Too long for the buffer: nothing taken; the ordinary receive
    // truncates.
    send(&mut w, 9);
    let mut short = [0u8; 4];
    assert!(w.ranks[1]
        .recv_small(&mut short, Source::Rank(0), Tag::Value(9), CTX, 1)
        .is_none());
    let mut m = Mem::zeros(4);
    let st = w.recv(1, m.buf(), Source::Rank(0), Tag::Value(9));
    assert_eq!((st.bytes, st.error), (4, Some(ErrClass::Truncate)));
    // A receive already posted claims the next message: nothing taken.
    let mut posted = Mem::zeros(8);
    let early = w.ranks[1]
        .irecv(posted.buf(), Source::Rank(0), Tag::Any, CTX)
        .unwrap();
    send(&mut w, 10);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Rank(0), Tag::Value(10), CTX, 1)
        .is_none());
    assert_eq!(w.wait(1, early).tag, 10);
    // Something unexpected: the receive must look at it first.
    send(&mut w, 11);
    let before = w.ranks[1].counters().unexpected;
    w.ranks[1].progress();
    assert_eq!(w.ranks[1].counters().unexpected, before + 1);
    send(&mut w, 12);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Rank(0), Tag::Value(12), CTX, 1)
        .is_none());
    let mut m11 = Mem::zeros(8);
    assert_eq!(w.recv(1, m11.buf(), Source::Any, Tag::Value(11)).tag, 11);
    assert_eq!(
        w.recv(1, m11.buf(), Source::Rank(0), Tag::Value(12)).tag,
        12
    );
    // An internal (negative) tag: nothing.
    send(&mut w, 13);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Rank(0), Tag::Value(-13), CTX, 1)
        .is_none());
    assert_eq!(
        w.recv(1, m11.buf(), Source::Rank(0), Tag::Value(13)).tag,
        13
    );
    // A rank outside the communicator, an unknown communicator: nothing.
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Rank(7), Tag::Any, CTX, 1)
        .is_none());
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Rank(0), Tag::Any, CTX + 9, 1)
        .is_none());
    // Turned off with the arrivals' reading.
    let pml = PmlConfig {
        recv_arrived: false,
        ..sim_pml()
    };
    let mut w = world_with(2, SimConfig::default(), all_caps(), pml);
    send(&mut w, 5);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Rank(0), Tag::Value(5), CTX, 1)
        .is_none());
}

/// What another rank left unexpected does not stop the small receive from
/// a rank with nothing unexpected; what that rank itself left does, until
/// the ordinary receive has taken it.
#[test]
fn the_small_receive_looks_only_at_its_source_unexpected_messages() {
    let mut w = world(3);
    let mut a = Mem::pattern(8, 1);
    let mut b = Mem::pattern(8, 2);
    // Rank 2's message goes unexpected at rank 1.
    w.ranks[2]
        .isend(a.buf(), 1, 4, CTX, SendMode::Standard)
        .unwrap();
    deliver_all(&mut w);
    w.ranks[1].progress();
    assert_eq!(w.ranks[1].counters().unexpected, 1);
    // Rank 0's is taken all the same, with any tag too.
    let mut dst = [0u8; 8];
    for tag in [Tag::Value(4), Tag::Any] {
        w.ranks[0]
            .isend(b.buf(), 1, 4, CTX, SendMode::Standard)
            .unwrap();
        deliver_all(&mut w);
        let st = w.ranks[1]
            .recv_small(&mut dst, Source::Rank(0), tag, CTX, 1)
            .expect("taken");
        assert_eq!((st.source, st.tag), (0, 4));
        assert_eq!(dst[..], b.0[..]);
    }
    // Rank 2's next one waits behind its first.
    w.ranks[2]
        .isend(b.buf(), 1, 4, CTX, SendMode::Standard)
        .unwrap();
    deliver_all(&mut w);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Rank(2), Tag::Any, CTX, 1)
        .is_none());
    let mut m = Mem::zeros(8);
    w.recv(1, m.buf(), Source::Rank(2), Tag::Any);
    assert_eq!(m.0, a.0, "the older message first");
    w.recv(1, m.buf(), Source::Rank(2), Tag::Any);
    assert_eq!(m.0, b.0);
    // Nothing of rank 2 unexpected now.
    w.ranks[2]
        .isend(a.buf(), 1, 6, CTX, SendMode::Standard)
        .unwrap();
    deliver_all(&mut w);
    let st = w.ranks[1]
        .recv_small(&mut dst, Source::Rank(2), Tag::Any, CTX, 1)
        .expect("taken");
    assert_eq!((st.source, st.tag), (2, 6));
    assert_eq!(dst[..], a.0[..]);
}

/// From any source the small receive takes the next small message of
/// whichever rank has one, each rank in turn from the one after the rank it
/// last took from, each sender's messages in their order. A rank whose next
/// fragment is something else (another tag, a message too long for the
/// buffer) is passed over; anything unexpected on the communicator, or a
/// posted receive, stops it, since a receive from any source would take
/// that first.
#[test]
fn the_small_receive_from_any_source_takes_each_rank_in_turn() {
    let mut w = world(3);
    let mut dst = [0u8; 8];
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Any, CTX, 4)
        .is_none());
    // Two messages from each of ranks 0 and 2, tags 0..4.
    let mut m: Vec<Mem> = (0..4).map(|i| Mem::pattern(8, 10 + i as u8)).collect();
    for (i, b) in m.iter_mut().enumerate() {
        let from = if i % 2 == 0 { 0 } else { 2 };
        w.ranks[from]
            .isend(b.buf(), 1, i as i32, CTX, SendMode::Standard)
            .unwrap();
    }
    deliver_all(&mut w);
    let before = w.ranks[1].counters();
    let mut got = Vec::new();
    for _ in 0..4 {
        let st = w.ranks[1]
            .recv_small(&mut dst, Source::Any, Tag::Any, CTX, 1)
            .expect("taken");
        assert_eq!(dst[..], m[st.tag as usize].0[..]);
        assert_eq!((st.bytes, st.error), (8, None));
        got.push((st.source, st.tag));
    }
    assert_eq!(got, [(0, 0), (2, 1), (0, 2), (2, 3)]);
    let after = w.ranks[1].counters();
    assert_eq!(after.recv_arrived, before.recv_arrived + 4);
    assert_eq!(after.bytes_received[0], before.bytes_received[0] + 16);
    assert_eq!(after.bytes_received[2], before.bytes_received[2] + 16);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Any, CTX, 1)
        .is_none());
    // Rank 0's next is another tag, rank 2's fits: rank 2's is taken, and
    // rank 0's after it by its own tag.
    let mut a = Mem::pattern(8, 1);
    let mut b = Mem::pattern(8, 2);
    to_rank1(&mut w, 0, &mut a, 5);
    to_rank1(&mut w, 2, &mut b, 6);
    deliver_all(&mut w);
    let st = w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Value(6), CTX, 1)
        .expect("taken");
    assert_eq!((st.source, st.tag, &dst[..]), (2, 6, &b.0[..]));
    let st = w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Value(5), CTX, 1)
        .expect("taken");
    assert_eq!((st.source, st.tag, &dst[..]), (0, 5, &a.0[..]));
    // Rank 0's next is too long for the buffer: passed over; the ordinary
    // receive gets it.
    let mut long = Mem::pattern(64, 3);
    to_rank1(&mut w, 0, &mut long, 7);
    to_rank1(&mut w, 2, &mut b, 7);
    deliver_all(&mut w);
    let st = w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Value(7), CTX, 1)
        .expect("taken");
    assert_eq!((st.source, &dst[..]), (2, &b.0[..]));
    let mut m64 = Mem::zeros(64);
    let st = w.recv(1, m64.buf(), Source::Any, Tag::Value(7));
    assert_eq!((st.source, st.bytes), (0, 64));
    assert_eq!(m64.0, long.0);
    // Something unexpected on the communicator (rank 0's): nothing from
    // any source, though rank 2's own receive still takes rank 2's.
    to_rank1(&mut w, 0, &mut a, 8);
    deliver_all(&mut w);
    w.ranks[1].progress();
    assert_eq!(w.ranks[1].counters().unexpected, before.unexpected + 1);
    to_rank1(&mut w, 2, &mut b, 8);
    deliver_all(&mut w);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Any, CTX, 1)
        .is_none());
    let st = w.ranks[1]
        .recv_small(&mut dst, Source::Rank(2), Tag::Any, CTX, 1)
        .expect("taken");
    assert_eq!(st.source, 2);
    let mut m8 = Mem::zeros(8);
    let st = w.recv(1, m8.buf(), Source::Any, Tag::Any);
    assert_eq!((st.source, st.tag, &m8.0[..]), (0, 8, &a.0[..]));
    // A posted receive (from rank 0) claims what comes: nothing from any
    // source, even of rank 2.
    let mut posted = Mem::zeros(8);
    let early = w.ranks[1]
        .irecv(posted.buf(), Source::Rank(0), Tag::Any, CTX)
        .unwrap();
    to_rank1(&mut w, 2, &mut b, 9);
    deliver_all(&mut w);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Any, CTX, 1)
        .is_none());
    to_rank1(&mut w, 0, &mut a, 9);
    assert_eq!(w.wait(1, early).source, 0);
    let st = w.recv(1, m8.buf(), Source::Any, Tag::Value(9));
    assert_eq!(st.source, 2);
    // Unknown communicator, internal tag, PROC_NULL: nothing.
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Any, CTX + 9, 1)
        .is_none());
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Value(-2), CTX, 1)
        .is_none());
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::ProcNull, Tag::Any, CTX, 1)
        .is_none());
}

/// From any source the small receive reads rank after rank, round after
/// round while a channel that shows arrivals by polling was empty, up to its
/// polls (or one round of up to `ANY_SOURCE_SWEEP` ranks); and after
/// `ANY_SOURCE_RUN` takes in a row it takes nothing once, leaving the
/// ordinary receive (whose progress reads every component) the next
/// message, then takes again.
#[test]
fn the_small_receive_from_any_source_polls_in_rounds_and_yields_to_progress() {
    let (mut w, late, src) = late_world_with_one(4);
    let mut dst = [0u8; 8];
    // Two ranks (itself, over the self module, and rank 0): 8 polls are 8
    // reads in 4 rounds, 4 of rank 0's channel.
    late.set(9);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Any, CTX, 8)
        .is_none());
    assert_eq!(late.get(), 5, "four reads of rank 0");
    // One poll still reads each rank once.
    late.set(2);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Any, CTX, 1)
        .is_none());
    assert_eq!(late.get(), 1, "one read of rank 0");
    late.set(3);
    let st = w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Any, CTX, 8)
        .expect("taken in the fourth round");
    assert_eq!((st.source, st.tag, &dst[..]), (0, 5, &src.0[..]));
    assert_eq!(late.get(), 0);
    // Takes in a row (counted from here: a receive that takes nothing ends
    // a run).
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Any, Tag::Any, CTX, 1)
        .is_none());
    let run = oxmpi_pml::ANY_SOURCE_RUN as usize;
    let mut m: Vec<Mem> = (0..2 * run + 2).map(|i| Mem::pattern(8, i as u8)).collect();
    let mut next = 0;
    for round in 0..2 {
        // A run and one more (the ordinary receive's progress reads whatever
        // is there, so each round sends its own).
        for (i, b) in m.iter_mut().enumerate().skip(next).take(run + 1) {
            to_rank1(&mut w, 0, b, i as i32);
        }
        deliver_all(&mut w);
        for _ in 0..run {
            let st = w.ranks[1]
                .recv_small(&mut dst, Source::Any, Tag::Any, CTX, 1)
                .unwrap_or_else(|| panic!("message {next} not taken"));
            assert_eq!((st.tag as usize, &dst[..]), (next, &m[next].0[..]));
            next += 1;
        }
        assert!(
            w.ranks[1]
                .recv_small(&mut dst, Source::Any, Tag::Any, CTX, 1)
                .is_none(),
            "round {round}: a run of {run} takes, then one for the ordinary receive"
        );
        let mut one = Mem::zeros(8);
        let st = w.recv(1, one.buf(), Source::Any, Tag::Any);
        assert_eq!((st.tag as usize, &one.0[..]), (next, &m[next].0[..]));
        next += 1;
    }
    assert_eq!(next, m.len());
}

/// Over a network that reorders, the small receive from any source takes
/// only messages next in their sender's sequence: with two senders, and
/// the ordinary receive from any source taking turns with it, each
/// sender's messages arrive in the order sent.
#[test]
fn the_small_receive_from_any_source_keeps_each_senders_order() {
    let sim = SimConfig {
        seed: 11,
        jitter_ns: 5000,
        ordered: false,
        no_resource_ppm: 100_000,
        max_in_flight: 8,
        ..SimConfig::default()
    };
    let mut w = world_with(3, sim, all_caps(), sim_pml());
    let n = 120usize;
    let mut bufs = Vec::new();
    let mut sends = Vec::new();
    for i in 0..n {
        for from in [0usize, 2] {
            // Payload: the sender and its message number.
            let mut m = Mem(vec![from as u8, i as u8, (i >> 8) as u8, 0, 0, 0, 0, 0]);
            sends.push((
                from,
                w.ranks[from]
                    .isend(m.buf(), 1, (i % 3) as i32, CTX, SendMode::Standard)
                    .unwrap(),
            ));
            bufs.push(m);
        }
    }
    let (mut fast, mut next) = (0, [0usize; 3]);
    for k in 0..2 * n {
        w.advance();
        let mut dst = Mem::zeros(8);
        let st = match (k % 3 != 2)
            .then(|| w.ranks[1].recv_small(&mut dst.0, Source::Any, Tag::Any, CTX, 1))
            .flatten()
        {
            Some(st) => {
                fast += 1;
                st
            }
            None => w.recv(1, dst.buf(), Source::Any, Tag::Any),
        };
        let from = st.source as usize;
        let i = usize::from(dst.0[1]) | usize::from(dst.0[2]) << 8;
        assert_eq!((dst.0[0] as usize, i), (from, next[from]), "receive {k}");
        assert_eq!(st.tag, (i % 3) as i32);
        next[from] += 1;
    }
    assert_eq!(next, [n, 0, n]);
    for (from, id) in sends {
        w.wait(from, id);
    }
    assert!(fast > 0, "no message was taken by the small receive");
}

/// While the module sees fragments land by polling, the small receive
/// reads up to its number of polls.
#[test]
fn the_small_receive_polls_only_where_arrivals_show_by_polling() {
    let (mut w, late, _) = late_world_with_one(5);
    let mut dst = [0u8; 8];
    late.set(3);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Rank(0), Tag::Value(5), CTX, 3)
        .is_none());
    assert_eq!(late.get(), 0, "three reads");
    late.set(3);
    assert!(w.ranks[1]
        .recv_small(&mut dst, Source::Rank(0), Tag::Value(5), CTX, 4)
        .is_some());
}

/// Over a network that reorders, the small receive takes a message only
/// when it is the next in its sender's sequence: MPI order holds when it
/// and the ordinary receive take turns.
#[test]
fn the_small_receive_keeps_mpi_order_over_a_reordering_network() {
    let sim = SimConfig {
        seed: 7,
        jitter_ns: 5000,
        ordered: false,
        no_resource_ppm: 100_000,
        max_in_flight: 8,
        ..SimConfig::default()
    };
    let mut w = world_with(2, sim, all_caps(), sim_pml());
    let n = 200;
    let mut bufs = Vec::new();
    let mut sends = Vec::new();
    for i in 0..n {
        let mut m = Mem::pattern(i % 24, i as u8);
        sends.push(
            w.ranks[0]
                .isend(m.buf(), 1, (i % 5) as i32, CTX, SendMode::Standard)
                .unwrap(),
        );
        bufs.push(m);
    }
    let mut fast = 0;
    for (i, m) in bufs.iter().enumerate() {
        w.advance();
        let mut dst = Mem::zeros(24);
        let tag = if i % 2 == 0 {
            Tag::Any
        } else {
            Tag::Value((i % 5) as i32)
        };
        let st = match w.ranks[1].recv_small(&mut dst.0, Source::Rank(0), tag, CTX, 1) {
            Some(st) => {
                fast += 1;
                st
            }
            None => w.recv(1, dst.buf(), Source::Rank(0), tag),
        };
        assert_eq!(
            (st.tag, st.bytes),
            ((i % 5) as i32, m.0.len()),
            "message {i}"
        );
        assert_eq!(dst.0[..m.0.len()], m.0[..], "message {i}");
    }
    for id in sends {
        w.wait(0, id);
    }
    assert!(fast > 0, "no message was taken by the small receive");
    assert!(fast < n, "every message came in order");
}

#[test]
fn a_module_that_cannot_see_arrivals_by_polling_is_read_once() {
    // The sim BTL as it is (polls_from_peer false): one read, then posted,
    // however many polls are allowed.
    let mut w = world(2);
    let mut dst = Mem::zeros(8);
    let id = w.ranks[1]
        .irecv_polling(dst.buf(), Source::Rank(0), Tag::Value(5), CTX, 64)
        .unwrap();
    assert!(!id.completed_inline());
    let mut src = Mem::pattern(8, 2);
    w.ranks[0]
        .isend(src.buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    assert_eq!(w.wait(1, id).tag, 5);
    assert_eq!(dst.0, src.0);
}

#[test]
fn reading_arrivals_before_posting_can_be_turned_off() {
    let pml = PmlConfig {
        recv_arrived: false,
        ..sim_pml()
    };
    let mut w = world_with(2, SimConfig::default(), all_caps(), pml);
    let mut src = Mem::pattern(8, 4);
    w.ranks[0]
        .isend(src.buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    deliver_all(&mut w);
    let mut dst = Mem::zeros(8);
    let id = w.ranks[1]
        .irecv(dst.buf(), Source::Rank(0), Tag::Value(5), CTX)
        .unwrap();
    assert!(!id.completed_inline());
    w.wait(1, id);
    assert_eq!(dst.0, src.0);
    assert_eq!(w.ranks[1].counters().recv_arrived, 0);
}

#[test]
fn after_close_a_receive_fails_at_once() {
    let mut w = world(2);
    w.ranks[1].close();
    assert!(w.ranks[1].any_dead_peer());
    let mut dst = Mem::zeros(8);
    let r = w.ranks[1]
        .irecv(dst.buf(), Source::Rank(0), Tag::Value(1), CTX)
        .unwrap();
    let st = w.ranks[1].test(r).unwrap().expect("failed at once");
    assert_eq!(st.error, Some(ErrClass::ProcFailed));
}

#[test]
fn eager_immediate_prepared_and_copied() {
    // The sim BTL copies in prepare_src; advertising in-place sends makes
    // the PML take the prepared path, which is what is counted here.
    let mut w = world_ext(
        2,
        SimConfig::default(),
        all_caps(),
        Caps::SEND_INPLACE,
        sim_pml(),
    );
    let (_, st) = transfer(&mut w, 8, SendMode::Standard);
    assert_eq!((st.source, st.tag, st.bytes, st.error), (0, 5, 8, None));
    assert_eq!(w.ranks[0].counters().eager_sendi, 1);
    transfer(&mut w, 0, SendMode::Standard);
    assert_eq!(w.ranks[0].counters().eager_sendi, 2);
    transfer(&mut w, 1000, SendMode::Standard);
    let c = w.ranks[0].counters();
    assert_eq!(c.eager_prepared, 1, "{c:?}");
    let mut w = world(2);
    transfer(&mut w, 1000, SendMode::Standard);
    assert_eq!(w.ranks[0].counters().eager_copy, 1);
}

#[test]
fn the_immediate_send_limit_counts_data_not_headers() {
    // As Open MPI's ob1 (`size * count > 256`): a message of exactly
    // `sendi_limit` data bytes goes through sendi (its header on top, within
    // the BTL's max_sendi_size); one byte more does not.
    let pml = PmlConfig {
        sendi_limit: 64,
        ..sim_pml()
    };
    let mut w = world_ext(2, SimConfig::default(), all_caps(), Caps::SEND_INPLACE, pml);
    transfer(&mut w, 64, SendMode::Standard);
    let c = w.ranks[0].counters();
    assert_eq!((c.eager_sendi, c.eager_prepared), (1, 0), "{c:?}");
    transfer(&mut w, 65, SendMode::Standard);
    let c = w.ranks[0].counters();
    assert_eq!((c.eager_sendi, c.eager_prepared), (1, 1), "{c:?}");
}

#[test]
fn rdma_direct_get() {
    let mut w = world(2);
    transfer(&mut w, 300 * 1024, SendMode::Standard);
    let (s, r) = (w.ranks[0].counters(), w.ranks[1].counters());
    assert_eq!((s.rget, r.rdma_get, s.frags), (1, 1, 0), "{s:?} {r:?}");
}

#[test]
fn rdma_split_receiver_gets_half_while_sender_puts_half() {
    // Default: a large RGET is split; the data check is in `transfer`.
    for len in [64 * 1024, 300 * 1024 + 5, 2 << 20] {
        let mut w = world(2);
        transfer(&mut w, len, SendMode::Standard);
        let (s, r) = (w.ranks[0].counters(), w.ranks[1].counters());
        assert_eq!(
            (s.rget, r.rdma_get, r.rdma_split, s.puts, s.frags),
            (1, 1, 1, 1, 0),
            "{len}: {s:?} {r:?}"
        );
        assert_eq!(r.bytes_received[0], len as u64, "{r:?}");
        // Synchronous mode completes through the same FINs.
        transfer(&mut w, len, SendMode::Synchronous);
        assert_eq!(w.ranks[1].counters().rdma_split, 2);
    }
    // Below the threshold, or with the split turned off: one get.
    let mut w = world(2);
    transfer(&mut w, 60 * 1024, SendMode::Standard);
    let (s, r) = (w.ranks[0].counters(), w.ranks[1].counters());
    assert_eq!((r.rdma_get, r.rdma_split, s.puts), (1, 0, 0), "{s:?} {r:?}");
    let cfg = PmlConfig {
        rdma_split_min: 0,
        ..sim_pml()
    };
    let mut w = world_with(2, SimConfig::default(), all_caps(), cfg);
    transfer(&mut w, 1 << 20, SendMode::Standard);
    let (s, r) = (w.ranks[0].counters(), w.ranks[1].counters());
    assert_eq!((r.rdma_get, r.rdma_split, s.puts), (1, 0, 0), "{s:?} {r:?}");
}

/// Copies take 1 us per KiB of virtual time, rank `slow`'s three times as
/// long; split balancing on.
fn timed_copies(slow: Option<u32>) -> World {
    let cfg = PmlConfig {
        rdma_split_balance: true,
        ..PmlConfig::default()
    };
    let sim = SimConfig {
        copy_ns_per_kib: 1000,
        slow_copier: slow,
        ..SimConfig::default()
    };
    world_with(2, sim, all_caps(), cfg)
}

#[test]
fn split_transfers_stay_whole_while_the_share_moves() {
    // Balancing on: each split's timed copies move the receiver's share
    // (its gets take three times as long as the sender's puts), and every
    // later split still delivers every byte once.
    let mut w = timed_copies(Some(1));
    let sizes = [4 << 20, 64 * 1024, (1 << 20) + 4093, 4 << 20, 300 * 1024];
    let mut total = 0u64;
    for (i, &len) in sizes.iter().cycle().take(15).enumerate() {
        let mode = if i % 2 == 0 {
            SendMode::Standard
        } else {
            SendMode::Synchronous
        };
        transfer(&mut w, len, mode);
        total += len as u64;
        let (s, r) = (w.ranks[0].counters(), w.ranks[1].counters());
        assert_eq!(
            (r.rdma_split, s.puts),
            (i as u64 + 1, i as u64 + 1),
            "{len}: {r:?}"
        );
        assert_eq!(r.bytes_received[0], total, "{len}: {r:?}");
    }
    // The copies were timed, and the share moved.
    assert!(w.ranks[1].counters().rdma_split_balanced >= 1);
    assert!(w.ranks[1].split_share(0).unwrap() < 512);
    // Off, nothing is timed.
    let mut w = world(2);
    transfer(&mut w, 4 << 20, SendMode::Standard);
    let r = w.ranks[1].counters();
    assert_eq!((r.rdma_split, r.rdma_split_balanced), (1, 0), "{r:?}");
}

/// The engine's time is the simulated network's, so the split balancing is
/// deterministic: the receiver's share of a GET/PUT split moves each time
/// by a quarter of the way to the share that makes both copies take as
/// long (its gets are three times slower: a quarter of the bytes), the
/// same in every run; equal copy speeds keep even halves.
#[test]
fn the_split_share_follows_virtual_copy_times() {
    let shares = |slow: Option<u32>| -> Vec<u16> {
        let mut w = timed_copies(slow);
        (0..8)
            .map(|_| {
                transfer(&mut w, 4 << 20, SendMode::Standard);
                w.ranks[1].split_share(0).unwrap()
            })
            .collect()
    };
    let slow = shares(Some(1));
    assert_eq!(slow, shares(Some(1)), "replayed exactly");
    assert!(slow.windows(2).all(|p| p[1] <= p[0]), "{slow:?}");
    assert!(slow[0] < 512 && *slow.last().unwrap() <= 300, "{slow:?}");
    assert!(slow.iter().all(|&s| s >= 256 - 8), "{slow:?}: overshot");
    let even = shares(None);
    assert!(even.iter().all(|&s| s.abs_diff(512) <= 8), "{even:?}");
}

/// 1 MiB to send each way between ranks 0 and 1, and room to receive it.
fn both_ways() -> ([Mem; 2], [Mem; 2]) {
    let len = 1 << 20;
    (
        [Mem::pattern(len, 1), Mem::pattern(len, 2)],
        [Mem::zeros(len), Mem::zeros(len)],
    )
}

/// Waits for the four requests of a [`both_ways`] exchange (rank, id),
/// checks the data, and that each rank got the other's message in one
/// unsplit get.
fn both_ways_done(w: &mut World, ids: [(usize, ReqId); 4], src: &[Mem; 2], dst: &[Mem; 2]) {
    for (rank, id) in ids {
        w.wait(rank, id);
    }
    assert_eq!(dst[1].0, src[0].0);
    assert_eq!(dst[0].0, src[1].0);
    for rank in 0..2 {
        let c = w.ranks[rank].counters();
        assert_eq!((c.rdma_get, c.rdma_split, c.puts), (1, 0, 0), "{c:?}");
    }
}

#[test]
fn no_split_while_the_peer_is_getting_from_us() {
    // Both ranks send 1 MiB to each other at once: each one's core is busy
    // getting the other's data, so neither receiver splits.
    let mut w = world(2);
    let len = 1 << 20;
    let (mut src, mut dst) = both_ways();
    let s0 = w.ranks[0]
        .isend(src[0].buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    let s1 = w.ranks[1]
        .isend(src[1].buf(), 0, 5, CTX, SendMode::Standard)
        .unwrap();
    let r0 = w.ranks[0]
        .irecv(dst[0].buf(), Source::Rank(1), Tag::Value(5), CTX)
        .unwrap();
    let r1 = w.ranks[1]
        .irecv(dst[1].buf(), Source::Rank(0), Tag::Value(5), CTX)
        .unwrap();
    both_ways_done(&mut w, [(0, s0), (1, s1), (0, r0), (1, r1)], &src, &dst);
    // Once those are done, a one-way transfer splits again.
    transfer(&mut w, len, SendMode::Standard);
    assert_eq!(w.ranks[1].counters().rdma_split, 1);
}

#[test]
fn posting_leaves_copies_for_progress_and_both_ways_nothing_splits() {
    // The bidirectional exchange of a benchmark: each rank posts its
    // receive, then its send. Rank 1 posts after rank 0's RGET came in
    // (unexpected): the receive matches it inside `irecv`, but the copy
    // (and the split decision) waits for progress, so rank 1's own send
    // goes out first and neither side asks the other, busy with its own
    // get, to put.
    let mut w = world(2);
    let (mut src, mut dst) = both_ways();
    let r0 = w.ranks[0]
        .irecv(dst[0].buf(), Source::Rank(1), Tag::Value(5), CTX)
        .unwrap();
    let s0 = w.ranks[0]
        .isend(src[0].buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    w.run_until(|w| w.ranks[1].counters().unexpected > 0);
    let r1 = w.ranks[1]
        .irecv(dst[1].buf(), Source::Rank(0), Tag::Value(5), CTX)
        .unwrap();
    let c = w.ranks[1].counters();
    assert_eq!(
        (c.rdma_get, c.bytes_received[0]),
        (0, 0),
        "copied while posting: {c:?}"
    );
    assert!(w.ranks[1].has_work(), "the get is left for progress");
    let s1 = w.ranks[1]
        .isend(src[1].buf(), 0, 5, CTX, SendMode::Standard)
        .unwrap();
    both_ways_done(&mut w, [(0, s0), (1, s1), (0, r0), (1, r1)], &src, &dst);
    // One way, the same receive after the send splits as before.
    let r1 = w.ranks[1]
        .irecv(dst[1].buf(), Source::Rank(0), Tag::Value(5), CTX)
        .unwrap();
    let s0 = w.ranks[0]
        .isend(src[0].buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    w.wait(0, s0);
    w.wait(1, r1);
    assert_eq!(dst[1].0, src[0].0);
    assert_eq!(w.ranks[1].counters().rdma_split, 1);
}

#[test]
fn a_persistent_receive_forgets_the_last_split() {
    // Round 1 is split; round 2 arrives while the receiver's own send to
    // the sender is open, so it is not: the receive must get it whole.
    let mut w = world(2);
    let len = 1 << 20;
    let mut dst = Mem::zeros(len);
    let r = w.ranks[1]
        .recv_init(dst.buf(), Source::Rank(0), Tag::Value(5), CTX)
        .unwrap();
    let mut a = Mem::pattern(len, 3);
    w.ranks[1].start(r).unwrap();
    let s = w.ranks[0]
        .isend(a.buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    w.wait(1, r);
    w.wait(0, s);
    assert_eq!(dst.0, a.0);
    assert_eq!(w.ranks[1].counters().rdma_split, 1);
    let mut back = Mem::pattern(len, 9);
    let mut back_dst = Mem::zeros(len);
    let s1 = w.ranks[1]
        .isend(back.buf(), 0, 6, CTX, SendMode::Standard)
        .unwrap();
    let mut b = Mem::pattern(len, 4);
    w.ranks[1].start(r).unwrap();
    let s0 = w.ranks[0]
        .isend(b.buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    let r0 = w.ranks[0]
        .irecv(back_dst.buf(), Source::Rank(1), Tag::Value(6), CTX)
        .unwrap();
    w.wait(1, r);
    for (rank, id) in [(0, s0), (1, s1), (0, r0)] {
        w.wait(rank, id);
    }
    assert_eq!(dst.0, b.0);
    assert_eq!(back_dst.0, back.0);
    assert_eq!(w.ranks[1].counters().rdma_split, 1, "round 2 was not split");
    w.ranks[1].request_free(r).unwrap();
}

#[test]
fn a_split_whose_get_fails_still_ends_with_all_data() {
    // The receiver asked for the put of the second half, then its get of
    // the first half fails: the first half comes by the pipeline, and the
    // send ends only once the receiver has everything.
    let mut w = world_failing(
        2,
        SimConfig::default(),
        all_caps(),
        Caps::NONE,
        Caps::GET,
        sim_pml(),
    );
    for mode in [SendMode::Standard, SendMode::Synchronous] {
        let (s, r) = transfer(&mut w, (1 << 20) + 12, mode);
        assert_eq!((s.error, r.error), (None, None));
    }
    let (s, r) = (w.ranks[0].counters(), w.ranks[1].counters());
    assert_eq!(
        (r.rdma_split, r.receiver_fallback, s.puts),
        (2, 2, 2),
        "{s:?} {r:?}"
    );
    assert!(s.frags > 0, "{s:?}");
}

#[test]
fn a_failed_put_fails_the_receive_too() {
    // Split transfer, and the sender's put fails: both requests end with
    // an error (the receiver is told), neither hangs.
    let mut w = world_failing(
        2,
        SimConfig::default(),
        all_caps(),
        Caps::NONE,
        Caps::PUT,
        sim_pml(),
    );
    let (ss, rs, _src, _dst) = exchange(&mut w, 1 << 20, SendMode::Standard);
    assert!(rs.error.is_some(), "{rs:?}");
    assert!(ss.error.is_some(), "{ss:?}");
}

#[test]
fn rdma_put_direct_and_pipeline() {
    // No GET: the sender proposes RNDV with PIN and the receiver drives PUTs.
    let keep = all_caps() - Caps::GET;
    let mut w = world_with(2, SimConfig::default(), keep, sim_pml());
    // 200 KiB: tail 200K - 4K by send/recv... (rdma_pipeline_send_length is
    // 256 KiB in the sim's limits, so the whole rest is the tail).
    transfer(&mut w, 600 * 1024, SendMode::Standard);
    let r = w.ranks[1].counters();
    let s = w.ranks[0].counters();
    assert_eq!(s.rndv, 1);
    assert!(r.rdma_pipeline == 1 || r.rdma_put == 1, "{r:?}");
    assert!(s.puts >= 1 && s.frags >= 1, "{s:?}");
    // Middle no larger than min_rdma_pipeline_size: one direct PUT.
    let mut w = world_with(2, SimConfig::default(), keep, sim_pml());
    transfer(&mut w, 400 * 1024, SendMode::Standard);
    let (s, r) = (w.ranks[0].counters(), w.ranks[1].counters());
    assert_eq!((r.rdma_put, s.puts), (1, 1), "{s:?} {r:?}");
}

/// A world whose BTL puts in order with its fragments (as tcp does) and
/// cannot get; `forge`: rank `forge`'s puts carry a forged key.
fn world_put_ordered(forge: Option<u32>) -> World {
    let sim = SimConfig {
        put_ordered: true,
        ..SimConfig::default()
    };
    let keep = (all_caps() - Caps::GET) | Caps::PUT_ORDERED;
    world_over(vec![SimNet::new(sim)], 2, sim_pml(), |r, inner| Masked {
        inner,
        keep,
        extra: Caps::NONE,
        fail: Caps::NONE,
        hold: None,
        forge_keys: forge == Some(r),
        late_reads: None,
        forge: None,
    })
}

#[test]
fn an_ordered_put_sends_its_fin_right_behind_it() {
    // RDMA pipeline (several puts) and a direct put: the FIN of each put
    // follows it at once, the data is in place when it arrives.
    for len in [600 * 1024, 400 * 1024] {
        let mut w = world_put_ordered(None);
        let (ss, rs) = transfer(&mut w, len, SendMode::Standard);
        assert_eq!((ss.bytes, rs.bytes, rs.error), (len, len, None));
        let (s, r) = (w.ranks[0].counters(), w.ranks[1].counters());
        assert!(s.puts >= 1, "{s:?}");
        assert!(r.rdma_pipeline + r.rdma_put == 1, "{r:?}");
        assert_eq!(r.bad_fragments, 0, "{r:?}");
    }
}

#[test]
fn a_refused_ordered_put_fails_the_receive_not_the_send() {
    // The target drops the data of a put with a forged key and says so
    // before the FIN behind it arrives: the receive fails (no data
    // claimed), the send completes (its data left), nothing hangs.
    let mut w = world_put_ordered(Some(0));
    let (ss, rs, _src, _dst) = exchange(&mut w, 400 * 1024, SendMode::Standard);
    assert_eq!(rs.error, Some(ErrClass::Intern), "{rs:?}");
    assert_eq!(ss.error, None, "{ss:?}");
    assert!(w.ranks[1].counters().bad_fragments >= 1);
    // The pair still works afterwards.
    let mut w2 = world_put_ordered(None);
    transfer(&mut w2, 8, SendMode::Standard);
    transfer(&mut w, 8, SendMode::Standard);
}

#[test]
fn send_receive_pipeline_without_rdma() {
    let keep = Caps::SEND | Caps::SENDI | Caps::ORDERED;
    let mut w = world_with(2, SimConfig::default(), keep, sim_pml());
    transfer(&mut w, 1 << 20, SendMode::Standard);
    let (s, r) = (w.ranks[0].counters(), w.ranks[1].counters());
    assert_eq!((s.rndv, s.rget, r.send_pipeline), (1, 0, 1), "{s:?} {r:?}");
    assert!(s.frags >= 30, "{s:?}");
}

/// Every other 8-byte block of a buffer: a strided (vector) layout.
#[derive(Debug)]
struct Strided {
    blocks: usize,
}

impl Layout for Strided {
    fn packed_len(&self) -> usize {
        self.blocks * 8
    }
    fn pack(&self, base: &MemRegion, offset: usize, out: &mut [u8]) -> usize {
        let src = base.read();
        let mut n = 0;
        while n < out.len() && offset + n < self.packed_len() {
            let p = offset + n;
            out[n] = src[(p / 8) * 16 + p % 8];
            n += 1;
        }
        n
    }
    fn unpack(&self, base: &MemRegion, offset: usize, data: &[u8]) -> usize {
        let mut n = 0;
        while n < data.len() && offset + n < self.packed_len() {
            let p = offset + n;
            base.write((p / 8) * 16 + p % 8, &data[n..n + 1]);
            n += 1;
        }
        n
    }
}

#[test]
fn receiver_decides_pipeline_for_a_non_contiguous_buffer() {
    let mut w = world(2);
    let blocks = 20_000;
    let mut src = Mem::pattern(blocks * 8, 3);
    let mut dst = Mem::zeros(blocks * 16);
    let s = w.ranks[0]
        .isend(src.buf(), 1, 1, CTX, SendMode::Standard)
        .unwrap();
    let layout = Arc::new(Strided { blocks });
    let r = w.ranks[1]
        .irecv(
            Buffer::Typed(dst.region(), layout),
            Source::Any,
            Tag::Any,
            CTX,
        )
        .unwrap();
    let st = w.wait(1, r);
    w.wait(0, s);
    assert_eq!(st.bytes, blocks * 8);
    for b in 0..blocks {
        assert_eq!(&dst.0[b * 16..b * 16 + 8], &src.0[b * 8..b * 8 + 8]);
        assert_eq!(&dst.0[b * 16 + 8..b * 16 + 16], &[0u8; 8], "gaps untouched");
    }
    let (s, r) = (w.ranks[0].counters(), w.ranks[1].counters());
    assert_eq!((s.rget, r.receiver_fallback, r.send_pipeline), (1, 1, 1));
    assert_eq!(r.rdma_get, 0);
}

#[test]
fn synchronous_send_completes_only_after_the_match() {
    for len in [8usize, 100 * 1024] {
        let mut w = world(2);
        let mut src = Mem::pattern(len, 1);
        let mut dst = Mem::zeros(len);
        let s = w.ranks[0]
            .isend(src.buf(), 1, 9, CTX, SendMode::Synchronous)
            .unwrap();
        w.spin(200, Some(1000));
        assert!(
            !w.ranks[0].is_complete(s).unwrap(),
            "ssend of {len} completed before a receive"
        );
        w.recv(1, dst.buf(), Source::Rank(0), Tag::Any);
        w.wait(0, s);
        assert_eq!(src.0, dst.0);
        assert_eq!(w.ranks[0].counters().synchronous, 1);
    }
}

#[test]
fn unordered_network_with_no_resource_keeps_mpi_order() {
    let sim = SimConfig {
        seed: 42,
        jitter_ns: 5000,
        ordered: false,
        no_resource_ppm: 100_000,
        max_in_flight: 8,
        ..SimConfig::default()
    };
    let mut w = world_with(3, sim, all_caps(), sim_pml());
    let sizes = [0usize, 8, 40, 300, 3000, 5000, 70_000, 300_000];
    let n = 64;
    let mut sends = Vec::new();
    let mut bufs = Vec::new();
    for from in [0usize, 2] {
        for i in 0..n {
            let len = sizes[i % sizes.len()];
            let mut m = Mem::pattern(len, (i + from) as u8);
            let id = w.ranks[from]
                .isend(m.buf(), 1, (i % 3) as i32, CTX, SendMode::Standard)
                .unwrap();
            sends.push((from, id));
            bufs.push(m);
        }
    }
    // Receive with ANY_SOURCE and ANY_TAG: per sender, messages must come
    // in send order.
    let mut next = [0usize; 3];
    for _ in 0..2 * n {
        let mut dst = Mem::zeros(300_000);
        let st = w.recv(1, dst.buf(), Source::Any, Tag::Any);
        let from = st.source as usize;
        let i = next[from];
        next[from] += 1;
        let len = sizes[i % sizes.len()];
        assert_eq!(st.tag, (i % 3) as i32, "message {i} from {from} in order");
        assert_eq!(st.bytes, len);
        assert_eq!(&dst.0[..len], &Mem::pattern(len, (i + from) as u8).0[..]);
    }
    for (from, id) in sends {
        w.wait(from, id);
    }
    assert!(w.ranks[0].counters().no_resource > 0 || w.ranks[2].counters().no_resource > 0);
    // The 70 KB and 300 KB messages were split transfers, reordered too.
    assert!(w.ranks[1].counters().rdma_split > 0);
}

#[test]
fn ten_thousand_unexpected_messages() {
    let mut w = world(2);
    let n = 10_000;
    let mut ids = Vec::new();
    let mut srcs = Vec::new();
    for i in 0..n {
        let mut m = Mem::pattern(16, i as u8);
        ids.push(
            w.ranks[0]
                .isend(m.buf(), 1, i, CTX, SendMode::Standard)
                .unwrap(),
        );
        srcs.push(m);
    }
    for id in ids {
        w.wait(0, id);
    }
    // All arrived before any receive: they are unexpected.
    w.run_until(|w| w.ranks[1].counters().unexpected >= n as u64);
    for i in (0..n).rev() {
        let mut d = Mem::zeros(16);
        let st = w.recv(1, d.buf(), Source::Rank(0), Tag::Value(i));
        assert_eq!(st.tag, i);
        assert_eq!(d.0, srcs[i as usize].0);
    }
}

#[test]
fn eager_credits_bound_unexpected_data() {
    let pml = PmlConfig {
        eager_credits: 64 * 1024,
        ..sim_pml()
    };
    let mut w = world_with(2, SimConfig::default(), all_caps(), pml);
    let n = 100;
    let mut ids = Vec::new();
    let mut srcs = Vec::new();
    for i in 0..n {
        let mut m = Mem::pattern(4000, i as u8);
        ids.push(
            w.ranks[0]
                .isend(m.buf(), 1, 0, CTX, SendMode::Standard)
                .unwrap(),
        );
        srcs.push(m);
    }
    w.spin(5000, None);
    let c = w.ranks[0].counters();
    assert!(c.rndv_forced_by_credits > 0, "{c:?}");
    assert!(
        c.eager_prepared + c.eager_copy + c.eager_sendi <= 17,
        "{c:?}"
    );
    for m in srcs.iter() {
        let mut d = Mem::zeros(4000);
        w.recv(1, d.buf(), Source::Rank(0), Tag::Value(0));
        assert_eq!(d.0, m.0);
    }
    for id in ids {
        w.wait(0, id);
    }
    assert!(w.ranks[1].counters().credits_returned > 0);
}

#[test]
fn a_rendezvous_that_carries_the_whole_message_still_completes() {
    // rndv_eager_limit above eager_limit (as Open MPI allows): a message
    // between the two travels whole in its RNDV, and the sender waits for
    // the receiver's ACK. Posted first and arrived first.
    let mut sim = SimConfig::default();
    sim.limits.rndv_eager_limit = 16 * 1024;
    let keep = Caps::SEND | Caps::SENDI | Caps::ORDERED;
    let mut w = world_with(2, sim, keep, sim_pml());
    let (ss, rs) = transfer(&mut w, 8000, SendMode::Standard);
    assert_eq!((ss.bytes, rs.bytes), (8000, 8000));
    let mut src = Mem::pattern(9000, 3);
    let s = w.ranks[0]
        .isend(src.buf(), 1, 6, CTX, SendMode::Standard)
        .unwrap();
    w.spin(100, None);
    assert!(!w.ranks[0].is_complete(s).unwrap(), "waits for the ACK");
    let mut dst = Mem::zeros(9000);
    w.recv(1, dst.buf(), Source::Rank(0), Tag::Value(6));
    w.wait(0, s);
    assert_eq!(src.0, dst.0);
    assert_eq!(w.ranks[0].counters().rndv, 2);

    // A zero-length send forced to rendezvous by spent credits.
    let pml = PmlConfig {
        eager_credits: 4096,
        ..sim_pml()
    };
    let mut w = world_with(2, SimConfig::default(), keep, pml);
    let mut big = Mem::pattern(4080, 1);
    let first = w.ranks[0]
        .isend(big.buf(), 1, 1, CTX, SendMode::Standard)
        .unwrap();
    let mut empty = Mem::zeros(0);
    let second = w.ranks[0]
        .isend(empty.buf(), 1, 2, CTX, SendMode::Standard)
        .unwrap();
    assert_eq!(w.ranks[0].counters().rndv_forced_by_credits, 1);
    let mut d1 = Mem::zeros(4080);
    let mut d2 = Mem::zeros(0);
    let r2 = w.ranks[1]
        .irecv(d2.buf(), Source::Rank(0), Tag::Value(2), CTX)
        .unwrap();
    let r1 = w.ranks[1]
        .irecv(d1.buf(), Source::Rank(0), Tag::Value(1), CTX)
        .unwrap();
    assert_eq!(w.wait(1, r2).bytes, 0);
    w.wait(1, r1);
    w.wait(0, first);
    w.wait(0, second);
    assert_eq!(d1.0, big.0);
}

#[test]
fn a_receive_freed_while_posted_still_takes_its_message_then_goes() {
    let mut w = world(2);
    let mut dst = Mem::zeros(16);
    let r = w.ranks[1]
        .irecv(dst.buf(), Source::Rank(0), Tag::Value(4), CTX)
        .unwrap();
    w.ranks[1].request_free(r).unwrap();
    let mut src = Mem::pattern(16, 3);
    let s = w.ranks[0]
        .isend(src.buf(), 1, 4, CTX, SendMode::Standard)
        .unwrap();
    w.wait(0, s);
    // The message lands in the freed receive's buffer; then the request is
    // gone (its handle is invalid) and the message is not left unexpected.
    w.run_until(|w| match w.ranks[1].test(r) {
        Ok(None) => false,
        Ok(Some(_)) => panic!("a freed request was handed back"),
        Err(_) => true,
    });
    assert_eq!(dst.0, src.0);
    let probe = w.ranks[1]
        .iprobe(Source::Rank(0), Tag::Value(4), CTX)
        .unwrap();
    assert!(probe.is_none());
}

#[test]
fn truncation_keeps_what_fits() {
    for len in [100usize, 50_000, 500_000] {
        let mut w = world(2);
        let mut src = Mem::pattern(len, 9);
        let mut dst = Mem::zeros(len / 2);
        let s = w.ranks[0]
            .isend(src.buf(), 1, 0, CTX, SendMode::Standard)
            .unwrap();
        let st = w.recv(1, dst.buf(), Source::Rank(0), Tag::Value(0));
        w.wait(0, s);
        assert_eq!(st.error, Some(ErrClass::Truncate));
        assert_eq!(st.bytes, len / 2);
        assert_eq!(dst.0[..], src.0[..len / 2]);
    }
}

#[test]
fn probe_matched_probe_cancel_persistent_proc_null() {
    let mut w = world(2);
    let mut a = Mem::pattern(64, 1);
    let mut b = Mem::pattern(100_000, 2);
    let s1 = w.ranks[0]
        .isend(a.buf(), 1, 3, CTX, SendMode::Standard)
        .unwrap();
    let s2 = w.ranks[0]
        .isend(b.buf(), 1, 4, CTX, SendMode::Standard)
        .unwrap();
    let mut st = None;
    w.run_until(|w| {
        st = w.ranks[1].iprobe(Source::Any, Tag::Value(4), CTX).unwrap();
        st.is_some()
    });
    assert_eq!(st.unwrap().bytes, 100_000);
    let msg = w.ranks[1]
        .improbe(Source::Rank(0), Tag::Any, CTX)
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((msg.tag(), msg.len()), (3, 64));
    // The matched message is invisible to probes now.
    let next = w.ranks[1]
        .iprobe(Source::Any, Tag::Any, CTX)
        .unwrap()
        .unwrap();
    assert_eq!(next.tag, 4);
    let mut da = Mem::zeros(64);
    let r = w.ranks[1].imrecv(da.buf(), msg).unwrap();
    assert_eq!(w.wait(1, r).bytes, 64);
    assert_eq!(da.0, a.0);
    let mut db = Mem::zeros(100_000);
    let m2 = w.ranks[1]
        .improbe(Source::Any, Tag::Any, CTX)
        .unwrap()
        .unwrap()
        .unwrap();
    let r = w.ranks[1].imrecv(db.buf(), m2).unwrap();
    w.wait(1, r);
    assert_eq!(db.0, b.0);
    w.wait(0, s1);
    w.wait(0, s2);

    // Cancel of a posted receive.
    let mut d = Mem::zeros(8);
    let r = w.ranks[1]
        .irecv(d.buf(), Source::Rank(0), Tag::Value(77), CTX)
        .unwrap();
    w.ranks[1].cancel(r).unwrap();
    let st = w.wait(1, r);
    assert!(st.cancelled);

    // PROC_NULL.
    let st = w.recv(1, d.buf(), Source::ProcNull, Tag::Any);
    assert_eq!((st.source, st.tag, st.bytes), (-3, -2, 0));

    // Persistent requests, started three times.
    let mut ps = Mem::pattern(5000, 5);
    let mut pr = Mem::zeros(5000);
    let sreq = w.ranks[0]
        .send_init(ps.buf(), 1, 8, CTX, SendMode::Standard)
        .unwrap();
    let rreq = w.ranks[1]
        .recv_init(pr.buf(), Source::Rank(0), Tag::Value(8), CTX)
        .unwrap();
    for _ in 0..3 {
        w.ranks[1].start(rreq).unwrap();
        w.ranks[0].start(sreq).unwrap();
        assert_eq!(w.wait(1, rreq).bytes, 5000);
        w.wait(0, sreq);
        assert_eq!(pr.0, ps.0);
        pr.0.fill(0);
    }
    w.ranks[0].request_free(sreq).unwrap();
    w.ranks[1].request_free(rreq).unwrap();
    assert!(w.ranks[0].test(sreq).is_err(), "a freed request is invalid");
}

#[test]
fn buffered_send_completes_at_once_and_detach_waits() {
    let mut w = world(2);
    let mut attach = Mem::zeros(1 << 20);
    w.ranks[0].buffer_attach(attach.region()).unwrap();
    let mut src = Mem::pattern(200_000, 4);
    let s = w.ranks[0]
        .isend(src.buf(), 1, 0, CTX, SendMode::Buffered)
        .unwrap();
    assert!(
        w.ranks[0].is_complete(s).unwrap(),
        "bsend is complete once packed"
    );
    w.ranks[0].test(s).unwrap().unwrap();
    // The user buffer may be reused at once.
    src.0.fill(0xEE);
    assert!(w.ranks[0].buffer_busy());
    assert_eq!(
        w.ranks[0].buffer_detach().unwrap_err().class,
        ErrClass::Pending
    );
    let mut dst = Mem::zeros(200_000);
    w.recv(1, dst.buf(), Source::Rank(0), Tag::Any);
    assert_eq!(dst.0, Mem::pattern(200_000, 4).0);
    w.run_until(|w| !w.ranks[0].buffer_busy());
    w.ranks[0].buffer_detach().unwrap();
    assert_eq!(w.ranks[0].counters().buffered, 1);
    // Too big for the attached buffer: MPI_ERR_BUFFER naming the sizes.
    let mut small = Mem::zeros(100);
    w.ranks[0].buffer_attach(small.region()).unwrap();
    let s = w.ranks[0]
        .isend(src.buf(), 1, 0, CTX, SendMode::Buffered)
        .unwrap();
    let st = w.ranks[0].test(s).unwrap().unwrap();
    assert_eq!(st.error, Some(ErrClass::Buffer));
}

/// MPI 4.1's buffers: a communicator's, then its session's, then the
/// process's serve its buffered sends; an automatic buffer never runs out.
#[test]
fn buffered_sends_use_the_communicator_then_session_then_process_buffer() {
    const CTX2: u16 = 8;
    let mut w = world(2);
    for r in 0..2 {
        w.ranks[r].add_comm(CTX2, vec![0, 1], r as u32).unwrap();
    }
    let mut src = Mem::pattern(3000, 6);
    let recv2 = |w: &mut World, dst: &mut Mem| {
        let r = w.ranks[1]
            .irecv(dst.buf(), Source::Rank(0), Tag::Any, CTX2)
            .unwrap();
        w.wait(1, r)
    };
    let bsend = |w: &mut World, ctx: u16, src: &mut Mem| {
        let s = w.ranks[0]
            .isend(src.buf(), 1, 0, ctx, SendMode::Buffered)
            .unwrap();
        w.ranks[0].test(s).unwrap().unwrap()
    };
    // Nothing attached: MPI_ERR_BUFFER.
    assert_eq!(bsend(&mut w, CTX2, &mut src).error, Some(ErrClass::Buffer));
    // The communicator's buffer serves CTX2 only.
    let mut comm_buf = Mem::zeros(4000);
    w.ranks[0]
        .buffer_attach_to(BufferScope::Comm(CTX2), Some(comm_buf.region()))
        .unwrap();
    assert_eq!(
        w.ranks[0]
            .buffer_attach_to(BufferScope::Comm(CTX2), None)
            .unwrap_err()
            .class,
        ErrClass::Buffer,
        "one buffer per communicator"
    );
    assert_eq!(bsend(&mut w, CTX2, &mut src).error, None);
    assert!(w.ranks[0].buffer_busy_in(BufferScope::Comm(CTX2)));
    assert!(!w.ranks[0].buffer_busy());
    assert_eq!(bsend(&mut w, CTX, &mut src).error, Some(ErrClass::Buffer));
    let mut dst = Mem::zeros(3000);
    recv2(&mut w, &mut dst);
    assert_eq!(dst.0, Mem::pattern(3000, 6).0);
    w.run_until(|w| !w.ranks[0].buffer_busy_in(BufferScope::Comm(CTX2)));
    let r = w.ranks[0]
        .buffer_detach_from(BufferScope::Comm(CTX2))
        .unwrap();
    assert_eq!(r.map(|r| r.addr()), Some(comm_buf.region().addr()));
    // A session's automatic buffer serves the contexts bound to it: many
    // messages, more than any one buffer holds, outstanding at once.
    w.ranks[0].bind_session(CTX2, Some(5));
    assert_eq!(w.ranks[0].session_of(CTX2), Some(5));
    w.ranks[0]
        .buffer_attach_to(BufferScope::Session(5), None)
        .unwrap();
    assert_eq!(bsend(&mut w, CTX, &mut src).error, Some(ErrClass::Buffer));
    for _ in 0..50 {
        assert_eq!(bsend(&mut w, CTX2, &mut src).error, None);
    }
    for _ in 0..50 {
        let mut dst = Mem::zeros(3000);
        recv2(&mut w, &mut dst);
        assert_eq!(dst.0, Mem::pattern(3000, 6).0);
    }
    w.run_until(|w| !w.ranks[0].buffer_busy_in(BufferScope::Session(5)));
    assert_eq!(
        w.ranks[0]
            .buffer_detach_from(BufferScope::Session(5))
            .unwrap(),
        None,
        "an automatic buffer has no region"
    );
    // Unbound, CTX2 falls back on the process's buffer.
    w.ranks[0].bind_session(CTX2, None);
    w.ranks[0]
        .buffer_attach_to(BufferScope::Process, None)
        .unwrap();
    assert_eq!(bsend(&mut w, CTX2, &mut src).error, None);
    let mut dst = Mem::zeros(3000);
    recv2(&mut w, &mut dst);
    w.run_until(|w| !w.ranks[0].buffer_busy());
    assert_eq!(
        w.ranks[0].buffer_detach().unwrap_err().class,
        ErrClass::Buffer,
        "MPI_Buffer_detach of an automatic buffer through the region API"
    );
    assert_eq!(
        w.ranks[0].buffer_detach_from(BufferScope::Process).unwrap(),
        None
    );
}

#[test]
fn a_lost_peer_fails_the_requests_that_need_it() {
    let mut w = world(3);
    let mut d = Mem::zeros(8);
    let r = w.ranks[0]
        .irecv(d.buf(), Source::Rank(1), Tag::Any, CTX)
        .unwrap();
    let mut big = Mem::pattern(1 << 20, 1);
    let s = w.ranks[0]
        .isend(big.buf(), 1, 0, CTX, SendMode::Standard)
        .unwrap();
    // Rank 2 still works.
    let mut x = Mem::pattern(8, 1);
    let mut y = Mem::zeros(8);
    let s2 = w.ranks[0]
        .isend(x.buf(), 2, 0, CTX, SendMode::Standard)
        .unwrap();
    w.net.kill(1);
    let st = w.wait(0, r);
    assert_eq!(st.error, Some(ErrClass::ProcFailed));
    let st = w.wait(0, s);
    assert_eq!(st.error, Some(ErrClass::ProcFailed));
    w.recv(2, y.buf(), Source::Rank(0), Tag::Any);
    w.wait(0, s2);
    assert_eq!(x.0, y.0);
    // Later operations on the dead peer fail at once.
    let s = w.ranks[0]
        .isend(x.buf(), 1, 0, CTX, SendMode::Standard)
        .unwrap();
    assert_eq!(
        w.ranks[0].test(s).unwrap().unwrap().error,
        Some(ErrClass::ProcFailed)
    );
}

#[test]
fn an_any_source_receive_fails_once_every_other_member_is_gone() {
    let mut w = world(3);
    let mut d = Mem::zeros(8);
    let r = w.ranks[0]
        .irecv(d.buf(), Source::Any, Tag::Any, CTX)
        .unwrap();
    // One sender left: the receive still waits for it.
    w.net.kill(1);
    w.spin(64, None);
    assert_eq!(w.ranks[0].test(r).unwrap(), None, "rank 2 may still send");
    w.net.kill(2);
    let st = w.wait(0, r);
    assert_eq!(st.error, Some(ErrClass::ProcFailed));
    // Posted afterwards: fails at once.
    let r = w.ranks[0]
        .irecv(d.buf(), Source::Any, Tag::Any, CTX)
        .unwrap();
    assert_eq!(
        w.ranks[0].test(r).unwrap().unwrap().error,
        Some(ErrClass::ProcFailed)
    );
}

/// Rank 2's ACKs and FINs for rank 0's rendezvous to it are each followed
/// by a copy naming the request before it (rank 0's rendezvous to rank 1):
/// rank 0 refuses them (they name another peer's request), counts them,
/// and both transfers complete as they should, not early.
#[test]
fn a_header_naming_another_peers_request_is_refused() {
    let forge: Forger = Rc::new(|tag, bytes| {
        let earlier = |r: ReqRef| {
            Some(ReqRef {
                index: r.index.checked_sub(1)?,
                ..r
            })
        };
        let forged = match Hdr::parse(tag, bytes).ok()?.0 {
            Hdr::Ack {
                send_req,
                recv_req,
                send_offset,
                send_len,
            } => Hdr::Ack {
                send_req: earlier(send_req)?,
                recv_req,
                send_offset,
                send_len,
            },
            Hdr::Fin {
                req,
                size,
                status,
                nanos,
            } => Hdr::Fin {
                req: earlier(req)?,
                size,
                status,
                nanos,
            },
            _ => return None,
        };
        let mut out = vec![0u8; 256];
        let n = forged.emit(&mut out);
        out.truncate(n);
        Some(out)
    });
    for keep in [
        all_caps(),
        all_caps() - Caps::GET,
        all_caps() - Caps::GET - Caps::PUT,
    ] {
        let f = forge.clone();
        let mut w = world_over(
            vec![SimNet::new(SimConfig::default())],
            3,
            sim_pml(),
            move |r, inner| Masked {
                keep,
                forge: (r == 2).then(|| f.clone()),
                ..Masked::plain(inner)
            },
        );
        let len = 1 << 20;
        let (mut a, mut b) = (Mem::pattern(len, 1), Mem::pattern(len, 2));
        let to1 = w.ranks[0]
            .isend(a.buf(), 1, 5, CTX, SendMode::Standard)
            .unwrap();
        let to2 = w.ranks[0]
            .isend(b.buf(), 2, 5, CTX, SendMode::Standard)
            .unwrap();
        let mut got2 = Mem::zeros(len);
        w.recv(2, got2.buf(), Source::Rank(0), Tag::Value(5));
        w.wait(0, to2);
        assert!(got2.0 == b.0, "{keep:?}");
        w.spin(64, None);
        assert!(
            w.ranks[0].counters().bad_fragments >= 1,
            "{keep:?}: no forged header seen"
        );
        assert_eq!(
            w.ranks[0].test(to1).unwrap(),
            None,
            "{keep:?}: the send to rank 1 completed on rank 2's word"
        );
        let mut got1 = Mem::zeros(len);
        w.recv(1, got1.buf(), Source::Rank(0), Tag::Value(5));
        let st = w.wait(0, to1);
        assert_eq!(st.error, None, "{keep:?}");
        assert!(got1.0 == a.0, "{keep:?}");
    }
}

#[test]
fn self_sends_use_the_self_btl() {
    let mut w = world(2);
    let mut a = Mem::pattern(300_000, 1);
    let mut b = Mem::zeros(300_000);
    let r = w.ranks[0]
        .irecv(b.buf(), Source::Rank(0), Tag::Any, CTX)
        .unwrap();
    let s = w.ranks[0]
        .isend(a.buf(), 0, 0, CTX, SendMode::Standard)
        .unwrap();
    w.wait(0, r);
    w.wait(0, s);
    assert_eq!(a.0, b.0);
    assert_eq!(w.ranks[0].peer_btls(0).unwrap().0, vec!["self"]);
}

/// Sends `src[at..at+len]` from rank 0 into a fresh buffer at rank 1 and
/// checks the data.
fn send_part(w: &mut World, src: &mut Mem, at: usize, len: usize) {
    let mut dst = Mem::zeros(len);
    let part = src.region().slice(at, len).unwrap();
    let s = w.ranks[0]
        .isend(Buffer::Contig(part), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    w.recv(1, dst.buf(), Source::Rank(0), Tag::Value(5));
    w.wait(0, s);
    assert!(
        src.0[at..at + len] == dst.0[..],
        "{len} bytes at {at} arrive intact"
    );
}

/// Above glibc's largest mmap threshold: its own mapping, unmapped on drop.
const BIG: usize = 64 << 20;

fn big(seed: u8) -> Mem {
    let mut m = Mem::zeros(BIG);
    for (i, b) in m.0[..4 << 20].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(13).wrapping_add(seed);
    }
    m
}

#[test]
fn leave_pinned_reuses_registrations_until_the_memory_is_released() {
    let pml = PmlConfig {
        leave_pinned: true,
        ..sim_pml()
    };
    let mut w = world_with(2, SimConfig::default(), all_caps(), pml);
    assert!(w.ranks[0].rcache_on(), "userfaultfd works here");
    let mut src = big(1);
    for _ in 0..3 {
        send_part(&mut w, &mut src, 0, 1 << 20);
    }
    let s = w.ranks[0].rcache_stats();
    assert_eq!(
        (s.misses, s.hits, s.uncached, s.entries),
        (1, 2, 0, 1),
        "{s:?}"
    );
    // A part of a cached buffer reuses its registration (a sub-key).
    send_part(&mut w, &mut src, 4096 + 8, 300 << 10);
    let s = w.ranks[0].rcache_stats();
    assert_eq!((s.misses, s.hits), (1, 3), "{s:?}");
    assert_eq!(w.ranks[0].counters().rget, 4);
    // Freed (unmapped): the entry goes; a new buffer, perhaps at the same
    // address, registers again.
    drop(src);
    let mut src = big(2);
    send_part(&mut w, &mut src, 0, 1 << 20);
    let s = w.ranks[0].rcache_stats();
    assert_eq!((s.invalidated, s.misses, s.entries), (1, 2, 1), "{s:?}");
    // The receiver's registrations (its part of split transfers) were all
    // fresh buffers: nothing released them yet, each a miss.
    let r = w.ranks[1].rcache_stats();
    assert!(r.misses >= 1 && r.uncached == 0, "{r:?}");
}

#[test]
fn leave_pinned_evicts_the_least_recently_used_past_the_limit() {
    let pml = PmlConfig {
        leave_pinned: true,
        rcache_max_entries: 2,
        ..sim_pml()
    };
    let mut w = world_with(2, SimConfig::default(), all_caps(), pml);
    let mut bufs: Vec<Mem> = (0..4).map(|i| Mem::pattern(512 << 10, i)).collect();
    for b in &mut bufs {
        send_part(&mut w, b, 0, 512 << 10);
    }
    let s = w.ranks[0].rcache_stats();
    assert_eq!((s.misses, s.evicted, s.entries), (4, 2, 2), "{s:?}");
    // The two most recent are still cached.
    send_part(&mut w, &mut bufs[3], 0, 512 << 10);
    send_part(&mut w, &mut bufs[2], 0, 512 << 10);
    assert_eq!(w.ranks[0].rcache_stats().hits, 2);
    // Off: one registration per transfer, nothing kept.
    let mut w = world(2);
    send_part(&mut w, &mut bufs[0], 0, 512 << 10);
    let s = w.ranks[0].rcache_stats();
    assert_eq!((s.uncached, s.entries, s.hits), (1, 0, 0), "{s:?}");
}

#[test]
fn leave_pinned_stays_within_its_cap_while_every_entry_is_in_flight() {
    let pml = PmlConfig {
        leave_pinned: true,
        rcache_max_entries: 2,
        ..sim_pml()
    };
    let mut w = world_with(2, SimConfig::default(), all_caps(), pml);
    let len = 512 << 10;
    let mut bufs: Vec<Mem> = (0..5).map(|i| Mem::pattern(len, i)).collect();
    // Five rendezvous sends outstanding at once, none received yet: the
    // first two are cached, the other three registered for themselves.
    let sends: Vec<_> = bufs
        .iter_mut()
        .map(|b| {
            let part = b.region().slice(0, len).unwrap();
            w.ranks[0]
                .isend(Buffer::Contig(part), 1, 5, CTX, SendMode::Standard)
                .unwrap()
        })
        .collect();
    let s = w.ranks[0].rcache_stats();
    assert!(s.entries <= 2, "the cache grew past its cap: {s:?}");
    assert_eq!((s.misses, s.uncached, s.evicted), (2, 3, 0), "{s:?}");
    let mut dst = Mem::zeros(len);
    for (i, id) in sends.into_iter().enumerate() {
        w.recv(1, dst.buf(), Source::Rank(0), Tag::Value(5));
        w.wait(0, id);
        assert!(bufs[i].0[..] == dst.0[..], "send {i} arrives intact");
    }
    // Once idle, the cached entries are reused, then the least recently
    // used one makes room for a new buffer.
    send_part(&mut w, &mut bufs[1], 0, len);
    send_part(&mut w, &mut bufs[4], 0, len);
    let s = w.ranks[0].rcache_stats();
    assert_eq!((s.hits, s.evicted, s.entries), (1, 1, 2), "{s:?}");
}

/// Two ranks joined by two simulated networks of different bandwidth
/// (two RDMA BTLs per peer, as with two TCP links or interfaces).
fn world_two_links(bw: [u32; 2], keep: Caps, pml: PmlConfig) -> World {
    world_two_links_with(SimConfig::default(), bw, keep, pml)
}

fn world_two_links_with(base: SimConfig, bw: [u32; 2], keep: Caps, pml: PmlConfig) -> World {
    let cfg = |i: usize| SimConfig {
        seed: base.seed + i as u64,
        limits: Limits {
            bandwidth: bw[i],
            ..base.limits
        },
        ..base
    };
    world_links([cfg(0), cfg(1)], keep, Caps::NONE, pml)
}

/// Two ranks joined by two simulated networks configured by `cfgs`, whose
/// modules refuse the operations in `fail`.
fn world_links(cfgs: [SimConfig; 2], keep: Caps, fail: Caps, pml: PmlConfig) -> World {
    let nets = cfgs.iter().map(|&c| SimNet::new(c)).collect();
    world_over(nets, 2, pml, |_, inner| Masked {
        inner,
        keep,
        extra: Caps::NONE,
        fail,
        hold: None,
        forge_keys: false,
        late_reads: None,
        forge: None,
    })
}

/// RDMA bytes per BTL (indices 1 and 2: the two links), both ranks.
fn rdma_bytes(w: &World) -> [u64; 2] {
    let (a, b) = (w.ranks[0].counters(), w.ranks[1].counters());
    assert_eq!(w.ranks[0].btl_names(), ["self", "sim", "sim"]);
    [
        a.rdma_bytes_by_btl[1] + b.rdma_bytes_by_btl[1],
        a.rdma_bytes_by_btl[2] + b.rdma_bytes_by_btl[2],
    ]
}

#[test]
fn rdma_is_striped_over_two_links_by_bandwidth_weight() {
    let len = 4 << 20;
    // Direct get (the receiver gets its share, the slower link's share is
    // put by the sender), then PUT only (RDMA pipeline, receiver-driven).
    for keep in [all_caps(), all_caps() - Caps::GET] {
        let mut w = world_two_links([30_000, 10_000], keep, sim_pml());
        transfer(&mut w, len, SendMode::Standard);
        let (s, r) = (w.ranks[0].counters(), w.ranks[1].counters());
        assert_eq!(r.rdma_striped, 1, "{keep:?}: {r:?}");
        let [fast, slow] = rdma_bytes(&w);
        let moved = fast + slow;
        if keep.contains(Caps::GET) {
            assert_eq!((s.rget, r.rdma_get), (1, 1), "{s:?} {r:?}");
            assert_eq!(moved, len as u64, "every byte by RDMA");
        } else {
            // The first fragment and the tail go by send/receive.
            assert_eq!(r.rdma_pipeline + r.rdma_put, 1, "{r:?}");
            assert!(moved > (len / 2) as u64, "{moved}");
        }
        // 3 : 1, to a cache line.
        let want_slow = moved / 4;
        assert!(
            slow.abs_diff(want_slow) <= 64 && fast.abs_diff(moved - want_slow) <= 64,
            "{keep:?}: fast {fast} slow {slow} of {moved}"
        );
    }
}

#[test]
fn one_rdma_btl_per_request_when_the_parameter_says_so() {
    let pml = PmlConfig {
        max_rdma_per_request: 1,
        ..sim_pml()
    };
    let mut w = world_two_links([30_000, 10_000], all_caps(), pml);
    transfer(&mut w, 4 << 20, SendMode::Standard);
    assert_eq!(w.ranks[1].counters().rdma_striped, 0);
    let [fast, slow] = rdma_bytes(&w);
    assert_eq!((fast, slow), (4 << 20, 0));
    // Equal links share equally.
    let mut w = world_two_links([10_000, 10_000], all_caps() - Caps::GET, sim_pml());
    transfer(&mut w, 4 << 20, SendMode::Standard);
    let [a, b] = rdma_bytes(&w);
    assert!(a.abs_diff(b) <= 128, "{a} {b}");
}

#[test]
fn striped_transfers_survive_reordering_and_no_resource() {
    let sim = SimConfig {
        seed: 7,
        jitter_ns: 5000,
        ordered: false,
        no_resource_ppm: 50_000,
        max_in_flight: 8,
        ..SimConfig::default()
    };
    for keep in [all_caps(), all_caps() - Caps::GET] {
        let mut w = world_two_links_with(sim, [20_000, 10_000], keep, sim_pml());
        for len in [5000, 300 * 1024 + 7, 3 << 20] {
            transfer(&mut w, len, SendMode::Standard);
            transfer(&mut w, len, SendMode::Synchronous);
        }
        let r = w.ranks[1].counters();
        assert!(r.rdma_striped >= 4, "{keep:?}: {r:?}");
        assert!(w.ranks[0].counters().no_resource > 0);
    }
}

#[test]
fn cancel_of_an_unmatched_rendezvous_drops_it_at_the_receiver() {
    for keep in [
        all_caps(),
        all_caps() - Caps::GET,
        Caps::SEND | Caps::SENDI | Caps::ORDERED,
    ] {
        let mut w = world_with(2, SimConfig::default(), keep, sim_pml());
        let len = 200 * 1024;
        let mut big = Mem::pattern(len, 3);
        let s = w.ranks[0]
            .isend(big.buf(), 1, 9, CTX, SendMode::Standard)
            .unwrap();
        // Let the RNDV arrive and wait unexpected.
        w.run_until(|w| w.ranks[1].counters().unexpected == 1);
        w.ranks[0].cancel(s).unwrap();
        let st = w.wait(0, s);
        assert!(st.cancelled, "{keep:?}: {st:?}");
        assert_eq!(w.ranks[1].counters().sends_cancelled, 1);
        // Gone at the receiver; the next message (same envelope) comes.
        let mut small = Mem::pattern(100, 4);
        let s2 = w.ranks[0]
            .isend(small.buf(), 1, 9, CTX, SendMode::Standard)
            .unwrap();
        let mut dst = Mem::zeros(len);
        let rs = w.recv(1, dst.buf(), Source::Rank(0), Tag::Value(9));
        w.wait(0, s2);
        assert_eq!(
            rs.bytes, 100,
            "{keep:?}: the cancelled message was received"
        );
        assert_eq!(dst.0[..100], small.0[..]);
        assert!(w.ranks[1]
            .iprobe(Source::Any, Tag::Any, CTX)
            .unwrap()
            .is_none());
    }
}

#[test]
fn cancel_of_a_matched_or_eager_send_does_not_cancel_it() {
    let mut w = world(2);
    // Matched before the cancel arrives: the transfer completes.
    let len = 300 * 1024;
    let mut src = Mem::pattern(len, 5);
    let mut dst = Mem::zeros(len);
    let r = w.ranks[1]
        .irecv(dst.buf(), Source::Rank(0), Tag::Value(1), CTX)
        .unwrap();
    let s = w.ranks[0]
        .isend(src.buf(), 1, 1, CTX, SendMode::Standard)
        .unwrap();
    w.ranks[0].cancel(s).unwrap();
    let ss = w.wait(0, s);
    let rs = w.wait(1, r);
    assert!(!ss.cancelled && !rs.cancelled);
    assert_eq!(src.0, dst.0);
    // An eager message cannot be recalled: it arrives.
    let mut e = Mem::pattern(64, 6);
    let s = w.ranks[0]
        .isend(e.buf(), 1, 2, CTX, SendMode::Standard)
        .unwrap();
    w.ranks[0].cancel(s).unwrap();
    assert!(!w.wait(0, s).cancelled);
    let mut d = Mem::zeros(64);
    w.recv(1, d.buf(), Source::Rank(0), Tag::Value(2));
    assert_eq!(d.0, e.0);
    assert_eq!(w.ranks[1].counters().sends_cancelled, 0);
}

/// A synchronous or rendezvous send to oneself that nothing matched is
/// cancelled inside `cancel` (as MPICH does): the request is complete and
/// cancelled at once, and the message is gone. Through a CANCEL to itself
/// the message vanished with the next progress while the request showed
/// neither complete nor cancelled, and a program that then received it
/// waited for ever (mpi4py `testProbeCancel`).
#[test]
fn cancel_of_an_unmatched_send_to_oneself_is_decided_at_once() {
    let mut w = world(2);
    for (len, mode) in [
        (0, SendMode::Synchronous),
        (64, SendMode::Synchronous),
        (300 * 1024, SendMode::Synchronous),
        (300 * 1024, SendMode::Standard),
    ] {
        let mut src = Mem::pattern(len, 7);
        let s = w.ranks[1].isend(src.buf(), 1, 3, CTX, mode).unwrap();
        let seen = w.ranks[1].iprobe(Source::Any, Tag::Any, CTX).unwrap();
        assert_eq!(seen.map(|st| (st.source, st.bytes)), Some((1, len)));
        w.ranks[1].cancel(s).unwrap();
        assert!(
            w.ranks[1].is_complete(s).unwrap(),
            "{len} {mode:?}: complete inside cancel"
        );
        let st = w.ranks[1].test(s).unwrap().expect("complete");
        assert!(st.cancelled, "{len} {mode:?}: {st:?}");
        assert!(
            w.ranks[1]
                .iprobe(Source::Any, Tag::Any, CTX)
                .unwrap()
                .is_none(),
            "{len} {mode:?}: the cancelled message is still there"
        );
        // The next message with the same envelope arrives whole.
        let mut next = Mem::pattern(40, 8);
        let s2 = w.ranks[1]
            .isend(next.buf(), 1, 3, CTX, SendMode::Standard)
            .unwrap();
        let mut dst = Mem::zeros(40);
        let rs = w.recv(1, dst.buf(), Source::Rank(1), Tag::Value(3));
        w.wait(1, s2);
        assert_eq!((rs.bytes, &dst.0), (40, &next.0));
    }
    // Matched before the cancel: the send completes, not cancelled.
    let mut src = Mem::pattern(100, 9);
    let mut dst = Mem::zeros(100);
    let r = w.ranks[0]
        .irecv(dst.buf(), Source::Rank(0), Tag::Value(4), CTX)
        .unwrap();
    let s = w.ranks[0]
        .isend(src.buf(), 0, 4, CTX, SendMode::Synchronous)
        .unwrap();
    w.ranks[0].cancel(s).unwrap();
    assert!(!w.wait(0, s).cancelled);
    assert!(!w.wait(0, r).cancelled);
    assert_eq!(src.0, dst.0);
    assert_eq!(w.ranks[0].counters().sends_cancelled, 0);
    assert_eq!(w.ranks[1].counters().sends_cancelled, 4);
}

/// What `MPI_Finalize` waits for: not a receive nothing matched, nor a
/// rendezvous or synchronous send its receiver has not answered (those may
/// never complete: finalize abandons them), but every request that can
/// still complete: a send not yet out, a rendezvous the receiver matched
/// (its data still to move), a receive that matched.
#[test]
fn finalize_waits_only_for_requests_that_can_complete() {
    let mut w = world(2);
    let len = 300 * 1024;
    let mut never = Mem::zeros(64);
    let r = w.ranks[1]
        .irecv(never.buf(), Source::Rank(0), Tag::Value(50), CTX)
        .unwrap();
    assert_eq!(w.ranks[1].active_requests(), 1);
    assert_eq!(w.ranks[1].finalize_waits_for(), 0, "an unmatched receive");
    // Synchronous and rendezvous sends nobody receives: waited for until
    // their first fragment is out, then not.
    let mut small = Mem::pattern(8, 1);
    let mut big = Mem::pattern(len, 2);
    let s1 = w.ranks[0]
        .isend(small.buf(), 1, 51, CTX, SendMode::Synchronous)
        .unwrap();
    let s2 = w.ranks[0]
        .isend(big.buf(), 1, 51, CTX, SendMode::Standard)
        .unwrap();
    w.run_until(|w| w.ranks[1].counters().unexpected == 2);
    assert_eq!(w.ranks[0].active_requests(), 2);
    assert_eq!(w.ranks[0].finalize_waits_for(), 0, "unanswered sends");
    // Once the receiver matches the rendezvous, both sides wait for it.
    let mut dst = Mem::zeros(len);
    let mut dst_small = Mem::zeros(8);
    let rs = w.ranks[1]
        .irecv(dst_small.buf(), Source::Rank(0), Tag::Value(51), CTX)
        .unwrap();
    let rb = w.ranks[1]
        .irecv(dst.buf(), Source::Rank(0), Tag::Value(51), CTX)
        .unwrap();
    assert!(w.ranks[1].finalize_waits_for() >= 1, "a matched rendezvous");
    w.wait(1, rs);
    w.wait(1, rb);
    w.wait(0, s1);
    w.wait(0, s2);
    assert_eq!(dst.0, big.0);
    assert_eq!(
        (
            w.ranks[0].active_requests(),
            w.ranks[0].finalize_waits_for()
        ),
        (0, 0)
    );
    assert_eq!(
        (
            w.ranks[1].active_requests(),
            w.ranks[1].finalize_waits_for()
        ),
        (1, 0)
    );
    w.ranks[1].cancel(r).unwrap();
    assert!(w.wait(1, r).cancelled);
}

#[test]
fn cancel_of_a_send_still_queued_leaves_no_hole_in_the_sequence() {
    // Sends queued behind a full network: cancelling them must not leave
    // a sequence number the receiver waits for forever.
    let sim = SimConfig {
        max_in_flight: 2,
        ..SimConfig::default()
    };
    let mut w = world_with(2, sim, all_caps(), sim_pml());
    let mut bufs: Vec<Mem> = (0..16).map(|i| Mem::pattern(2000, i)).collect();
    let mut big = Mem::pattern(100 * 1024, 99);
    let mut ids = Vec::new();
    for b in &mut bufs {
        ids.push(
            w.ranks[0]
                .isend(b.buf(), 1, 4, CTX, SendMode::Standard)
                .unwrap(),
        );
    }
    let big_id = w.ranks[0]
        .isend(big.buf(), 1, 4, CTX, SendMode::Standard)
        .unwrap();
    for &id in ids.iter().rev().take(4) {
        w.ranks[0].cancel(id).unwrap();
    }
    w.ranks[0].cancel(big_id).unwrap();
    // Cancelled while queued: the CANCEL follows it once it leaves.
    assert!(
        w.wait(0, big_id).cancelled,
        "the queued rendezvous was not cancelled"
    );
    let mut got = 0;
    for (i, b) in bufs.iter().enumerate() {
        let mut d = Mem::zeros(2000);
        w.recv(1, d.buf(), Source::Rank(0), Tag::Value(4));
        assert_eq!(d.0, b.0, "message {i} in order");
        got += 1;
    }
    for id in ids {
        assert!(!w.wait(0, id).cancelled, "eager sends are not recalled");
    }
    assert_eq!(got, 16);
    assert!(w.ranks[1]
        .iprobe(Source::Any, Tag::Any, CTX)
        .unwrap()
        .is_none());
    // And traffic goes on.
    transfer(&mut w, 10, SendMode::Standard);
}

#[test]
fn a_failed_get_with_a_striped_part_still_waiting_keeps_the_send_open() {
    // The receiver's get fails (it falls back to the pipeline for its own
    // part, by an ACK on the fast link) while the other link's part is
    // asked for by a PUT request on a slow link: the ACK arrives first. The
    // send must still wait for the receiver's FIN, and all bytes arrive.
    let slow = SimConfig {
        seed: 2,
        latency_ns: 5_000_000,
        ..SimConfig::default()
    };
    let pml = PmlConfig {
        rdma_split_min: 0,
        ..sim_pml()
    };
    let mut w = world_links([SimConfig::default(), slow], all_caps(), Caps::GET, pml);
    let len = 64 * 1024;
    let mut src = Mem::pattern(len, 8);
    let mut dst = Mem::zeros(len);
    let s = w.ranks[0]
        .isend(src.buf(), 1, 5, CTX, SendMode::Standard)
        .unwrap();
    let r = w.ranks[1]
        .irecv(dst.buf(), Source::Rank(0), Tag::Value(5), CTX)
        .unwrap();
    let ss = w.wait(0, s);
    assert!(ss.error.is_none(), "{ss:?}");
    let rs = w.wait(1, r);
    assert!(rs.error.is_none(), "{rs:?}");
    assert_eq!(src.0, dst.0);
    assert_eq!(w.ranks[1].counters().rdma_striped, 1);
}

#[test]
fn a_late_cancel_never_cancels_the_next_round_of_a_persistent_send() {
    // Round 1 is cancelled after the receiver matched it, and its CANCEL
    // is held back in the network until round 2's rendezvous waits
    // unexpected at the receiver: that CANCEL must not drop round 2.
    let hold = Rc::new(Hold {
        tag: 73, // CANCEL
        ..Hold::default()
    });
    let nets = vec![SimNet::new(SimConfig::default())];
    let mut w = world_over(nets, 2, sim_pml(), |r, inner| Masked {
        inner,
        keep: all_caps(),
        extra: Caps::NONE,
        fail: Caps::NONE,
        hold: (r == 0).then(|| Rc::clone(&hold)),
        forge_keys: false,
        late_reads: None,
        forge: None,
    });
    let len = 100 * 1024;
    let mut src = Mem::pattern(len, 1);
    let s = w.ranks[0]
        .send_init(src.buf(), 1, 3, CTX, SendMode::Synchronous)
        .unwrap();
    // Round 1: the rendezvous waits unexpected, the user cancels, and the
    // receiver matches before the (held) CANCEL arrives.
    w.ranks[0].start(s).unwrap();
    w.run_until(|w| w.ranks[1].counters().unexpected == 1);
    w.ranks[0].cancel(s).unwrap();
    assert_eq!(hold.frames.borrow().len(), 1, "the CANCEL is held");
    let mut dst = Mem::zeros(len);
    let r = w.ranks[1]
        .irecv(dst.buf(), Source::Rank(0), Tag::Value(3), CTX)
        .unwrap();
    assert!(!w.wait(1, r).cancelled);
    assert!(
        !w.wait(0, s).cancelled,
        "round 1 was matched: not cancelled"
    );
    assert_eq!(src.0, dst.0);
    // Round 2 waits unexpected; now round 1's CANCEL arrives.
    w.ranks[0].start(s).unwrap();
    w.run_until(|w| w.ranks[1].counters().unexpected == 2);
    hold.release.set(true);
    for _ in 0..100 {
        w.ranks[0].progress();
        w.ranks[1].progress();
        w.net.advance_to_next();
    }
    assert!(hold.frames.borrow().is_empty(), "the CANCEL was released");
    assert_eq!(
        w.ranks[1].counters().sends_cancelled,
        0,
        "round 2 was dropped"
    );
    let mut dst = Mem::zeros(len);
    let rs = w.recv(1, dst.buf(), Source::Rank(0), Tag::Value(3));
    let ss = w.wait(0, s);
    assert!(!ss.cancelled && !rs.cancelled);
    assert_eq!(src.0, dst.0);
    w.ranks[0].request_free(s).unwrap();
}

/// The small receive that marks nothing busy (`Pml::try_recv_small`) runs
/// only over `oxmpi-btl`'s own BTLs, as the immediate send does: over the
/// plain sim module it takes the message; wrapped from outside, it takes
/// nothing and the message stays for the ordinary receive.
#[test]
fn try_recv_small_runs_only_over_btls_that_never_reenter() {
    for wrapped in [false, true] {
        let net = SimNet::new(SimConfig::default());
        let mods: Vec<SimBtl> = (0..2).map(|r| net.module(r)).collect();
        let peers: Vec<PeerDesc> = mods
            .iter()
            .map(|m| PeerDesc {
                local: false,
                cards: vec![None, Some(m.business_card())],
            })
            .collect();
        let mut ranks: Vec<Ob1<dyn Btl>> = Vec::new();
        for (r, m) in mods.into_iter().enumerate() {
            let r = r as u32;
            let net_btl: Box<dyn Btl> = if wrapped {
                Box::new(Masked::plain(m))
            } else {
                Box::new(m)
            };
            let btls: Vec<Box<dyn Btl>> = vec![Box::new(SelfBtl::new(r, DEFAULT_LIMITS)), net_btl];
            let mut o = Ob1::new(sim_pml(), r, btls, &peers).unwrap();
            o.add_comm(CTX, vec![0, 1], r).unwrap();
            ranks.push(o);
        }
        let mut src = Mem::pattern(8, 1);
        ranks[0]
            .isend(src.buf(), 1, 5, CTX, SendMode::Standard)
            .unwrap();
        while net.advance_to_next() {}
        let pml = oxmpi_pml::Pml::new(ranks.remove(1), 0, false);
        assert!(pml.confine());
        let mut dst = [0u8; 8];
        let got = pml.try_recv_small(&mut dst, Source::Rank(0), Tag::Value(5), CTX, false);
        assert_eq!(got.is_none(), wrapped, "wrapped: {wrapped}");
        if wrapped {
            assert_eq!(pml.with(|o| o.counters().recv_arrived), 0);
            let mut m = Mem::zeros(8);
            let st = pml
                .recv(m.buf(), Source::Rank(0), Tag::Value(5), CTX)
                .unwrap();
            assert_eq!((st.tag, m.0), (5, src.0.clone()));
        } else {
            assert_eq!(dst[..], src.0[..]);
            assert_eq!(pml.with(|o| o.counters().recv_arrived), 1);
        }
    }
}

/// The immediate send that marks nothing busy (`Pml::try_sendi`) runs only
/// over `oxmpi-btl`'s own BTLs: one from outside (here `Masked`, which could
/// call back into the PML from its `sendi`) makes it answer false, with
/// nothing sent or counted, and the send goes the ordinary way.
#[test]
fn try_sendi_runs_only_over_btls_that_never_reenter() {
    // One rank over the self BTL alone: in tree, the message goes.
    let btls: Vec<Box<dyn Btl>> = vec![Box::new(SelfBtl::new(0, DEFAULT_LIMITS))];
    let peers = [PeerDesc {
        local: false,
        cards: vec![None],
    }];
    let mut o = Ob1::new(sim_pml(), 0, btls, &peers).unwrap();
    o.add_comm(CTX, vec![0], 0).unwrap();
    assert!(o.btls_never_reenter());
    let pml = oxmpi_pml::Pml::new(o, 0, false);
    assert!(pml.confine());
    assert!(pml.try_sendi(b"abc", 0, 5, CTX));
    assert_eq!(pml.with(|o| o.counters().eager_sendi), 1);

    // Two ranks whose sim modules are wrapped from outside `oxmpi-btl`.
    let mut w = world(2);
    assert!(!w.ranks[0].btls_never_reenter());
    let pml = oxmpi_pml::Pml::new(w.ranks.remove(0), 0, false);
    assert!(pml.confine());
    assert!(!pml.try_sendi(b"abc", 1, 5, CTX));
    assert_eq!(pml.with(|o| o.counters().eager_sendi), 0);
}

/// An intercommunicator between {0} and {1, 2}: each side's context maps
/// ranks to the remote group and stamps its local rank, so remote rank 0
/// of ranks 1 and 2 is world rank 0, and world rank 0 hears from remote
/// ranks 0 and 1 (world ranks 1 and 2), with ANY_SOURCE too; an ANY_SOURCE
/// receive fails once every remote rank is gone (this process is not in
/// the remote group, so nothing is skipped).
#[test]
fn intercommunicator_contexts_address_the_remote_group() {
    const IC: u16 = 40;
    let mut w = world(3);
    w.ranks[0].add_intercomm(IC, vec![1, 2], 0).unwrap();
    w.ranks[1].add_intercomm(IC, vec![0], 0).unwrap();
    w.ranks[2].add_intercomm(IC, vec![0], 1).unwrap();
    // This process in its own remote group, or an empty remote group.
    assert!(w.ranks[0].add_intercomm(IC + 1, vec![0, 1], 0).is_err());
    assert!(w.ranks[0].add_intercomm(IC + 1, vec![], 0).is_err());
    // Remote rank 2 does not exist on rank 0's side.
    let mut x = Mem::pattern(8, 9);
    assert!(w.ranks[0]
        .isend(x.buf(), 2, 0, IC, SendMode::Standard)
        .is_err());
    let mut a = Mem::pattern(8, 1);
    let mut b = Mem::pattern(8, 2);
    let mut from_a = Mem::zeros(8);
    let mut from_b = Mem::zeros(8);
    let sa = w.ranks[1]
        .isend(a.buf(), 0, 7, IC, SendMode::Standard)
        .unwrap();
    let sb = w.ranks[2]
        .isend(b.buf(), 0, 7, IC, SendMode::Standard)
        .unwrap();
    let r1 = w.ranks[0]
        .irecv(from_b.buf(), Source::Rank(1), Tag::Value(7), IC)
        .unwrap();
    let st = w.wait(0, r1);
    assert_eq!((st.source, st.error), (1, None));
    let r0 = w.ranks[0]
        .irecv(from_a.buf(), Source::Any, Tag::Value(7), IC)
        .unwrap();
    let st = w.wait(0, r0);
    assert_eq!((st.source, st.error), (0, None));
    w.wait(1, sa);
    w.wait(2, sb);
    assert_eq!(
        (from_a.0.clone(), from_b.0.clone()),
        (a.0.clone(), b.0.clone())
    );
    // Back the other way: remote rank 1 of rank 0 is world rank 2.
    let mut c = Mem::pattern(1 << 20, 3);
    let mut got = Mem::zeros(1 << 20);
    let s = w.ranks[0]
        .isend(c.buf(), 1, 8, IC, SendMode::Synchronous)
        .unwrap();
    let r = w.ranks[2]
        .irecv(got.buf(), Source::Rank(0), Tag::Value(8), IC)
        .unwrap();
    let st = w.wait(2, r);
    assert_eq!((st.source, st.bytes), (0, 1 << 20));
    w.wait(0, s);
    assert_eq!(c.0, got.0);
    // Rank 1's only remote rank dies: its ANY_SOURCE receive fails.
    let mut d = Mem::zeros(8);
    let r = w.ranks[1]
        .irecv(d.buf(), Source::Any, Tag::Any, IC)
        .unwrap();
    w.net.kill(0);
    let st = w.wait(1, r);
    assert_eq!(st.error, Some(ErrClass::ProcFailed));
}
