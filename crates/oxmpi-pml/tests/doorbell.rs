//! Blocking waits sleep on the sm BTL's doorbell once their yields hand the
//! core to nobody, and a peer's send wakes them at once: two ranks over sm
//! in this process, one thread each (the doorbell is a shared futex, the
//! same between threads as between processes).
//!
//! One test function: tests of one binary run in parallel threads, whose
//! yields would hand the core around and keep the waits from sleeping.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oxmpi_btl::btl::Btl;
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::self_btl::{SelfBtl, DEFAULT_LIMITS};
use oxmpi_btl::sm::{SmBtl, SmConfig};
use oxmpi_match::{Source, Tag};
use oxmpi_pml::{Buffer, Ob1, PeerDesc, Pml, PmlConfig, SendMode, SleepCounts};

/// Ranks 0 and 1 of one node, each with the self and sm BTLs, as blocking
/// PMLs that never spin (oversubscribed) and sleep up to `sleep_max`.
fn two_ranks(sleep_max: Duration, multithreaded: bool) -> (Arc<Pml>, Arc<Pml>) {
    let sm: Vec<SmBtl> = (0..2)
        .map(|i| SmBtl::new(SmConfig::new(i, 2)).expect("sm module"))
        .collect();
    let peers: Vec<PeerDesc> = sm
        .iter()
        .map(|m| PeerDesc {
            local: true,
            cards: vec![None, Some(m.business_card())],
        })
        .collect();
    let mut pmls = sm.into_iter().enumerate().map(|(r, m)| {
        let r = r as u32;
        let btls: Vec<Box<dyn Btl + Send>> =
            vec![Box::new(SelfBtl::new(r, DEFAULT_LIMITS)), Box::new(m)];
        let mut o = Ob1::new(PmlConfig::default(), r, btls, &peers).expect("engine");
        o.add_comm(0, vec![0, 1], r).expect("communicator");
        Arc::new(
            Pml::new(o, 0, true)
                .idle_sleep_max(sleep_max)
                .multithreaded(multithreaded),
        )
    });
    (pmls.next().unwrap(), pmls.next().unwrap())
}

/// A blocking receive of 8 bytes from `src` with `tag`: how long it took.
fn recv(pml: &Pml, src: u32, tag: i32) -> Duration {
    let mut dst = [0u8; 8];
    // SAFETY: `dst` outlives the receive, which completes here.
    let d = unsafe { MemRegion::new(dst.as_mut_ptr(), 8) };
    let t0 = Instant::now();
    let st = pml
        .recv(Buffer::Contig(d), Source::Rank(src), Tag::Value(tag), 0)
        .unwrap();
    assert_eq!((st.bytes, dst), (8, [tag as u8; 8]));
    t0.elapsed()
}

fn send(pml: &Pml, dst: u32, tag: i32) {
    let mut src = [tag as u8; 8];
    // SAFETY: `src` outlives the send, complete on return.
    let s = unsafe { MemRegion::new(src.as_mut_ptr(), 8) };
    pml.send(Buffer::Contig(s), dst, tag, 0, SendMode::Standard)
        .unwrap();
}

fn diff(a: SleepCounts, b: SleepCounts) -> SleepCounts {
    SleepCounts {
        bell: b.bell - a.bell,
        rung: b.rung - a.rung,
        bell_skipped: b.bell_skipped - a.bell_skipped,
        timed: b.timed - a.timed,
    }
}

#[test]
fn blocked_waits_sleep_on_the_doorbell_and_sends_wake_them() {
    // The doorbell is what sm offers, self only carries local traffic:
    // the engine hands it out; with self alone, there is none.
    let (p0, p1) = two_ranks(Duration::from_secs(5), false);
    assert!(p0.with(|o| o.doorbell()).is_some());
    let btls: Vec<Box<dyn Btl + Send>> = vec![Box::new(SelfBtl::new(0, DEFAULT_LIMITS))];
    let alone = Ob1::new(PmlConfig::default(), 0, btls, &[PeerDesc::default()]).unwrap();
    assert!(alone.doorbell().is_none());

    // A receive whose message comes 300 ms later sleeps on the bell (a
    // timeout of 5 s) and the send wakes it. A round in which the waiter
    // never slept (its yields handed the core to another task of this
    // session, on a busy machine) proves nothing and is run again.
    let mut slept = 0;
    for round in 0..8 {
        let before = p1.sleep_counts();
        let waiter = {
            let p1 = Arc::clone(&p1);
            std::thread::spawn(move || recv(&p1, 0, 5 + round))
        };
        std::thread::sleep(Duration::from_millis(300));
        send(&p0, 1, 5 + round);
        let took = waiter.join().unwrap();
        let d = diff(before, p1.sleep_counts());
        assert_eq!(
            d.timed, 0,
            "round {round}: a timed sleep, with sm alone: {d:?}"
        );
        if d.bell == 0 {
            continue;
        }
        slept += 1;
        assert!(
            d.rung >= 1 && took < Duration::from_secs(2),
            "round {round}: the send did not wake the receiver ({took:?}, {d:?})"
        );
        if slept == 3 {
            break;
        }
    }
    assert!(slept >= 1, "no wait ever slept on the doorbell");

    // MPI_THREAD_MULTIPLE: a thread asleep waiting for a message that
    // another thread of its process sends to it (through self, which rings
    // no doorbell) waits no longer than the sleep's bound, and a peer's
    // send still wakes a sleeper at once.
    let (q0, q1) = two_ranks(Duration::from_millis(20), true);
    let waiter = {
        let q1 = Arc::clone(&q1);
        std::thread::spawn(move || recv(&q1, 1, 9))
    };
    std::thread::sleep(Duration::from_millis(100));
    send(&q1, 1, 9);
    let took = waiter.join().unwrap();
    assert!(
        took < Duration::from_secs(1),
        "a local send took {took:?} to be seen"
    );
    let waiter = {
        let q1 = Arc::clone(&q1);
        std::thread::spawn(move || recv(&q1, 0, 10))
    };
    std::thread::sleep(Duration::from_millis(100));
    send(&q0, 1, 10);
    let took = waiter.join().unwrap();
    assert!(
        took < Duration::from_secs(1),
        "a peer's send took {took:?} to be seen"
    );
}
