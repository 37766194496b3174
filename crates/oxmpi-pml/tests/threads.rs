//! MPI_THREAD_MULTIPLE: many threads of one rank send, receive, wait and
//! progress through one `Pml` at once.

use std::sync::Arc;

use oxmpi_btl::btl::Btl;
use oxmpi_btl::mem::MemRegion;
use oxmpi_btl::self_btl::{SelfBtl, DEFAULT_LIMITS};
use oxmpi_match::{Source, Tag};
use oxmpi_pml::{Buffer, Ob1, PeerDesc, Pml, PmlConfig, SendMode};

#[test]
fn threads_send_receive_and_wait_concurrently() {
    let btls: Vec<Box<dyn Btl + Send>> = vec![Box::new(SelfBtl::new(0, DEFAULT_LIMITS))];
    let mut ob1 = Ob1::new(PmlConfig::default(), 0, btls, &[PeerDesc::default()]).unwrap();
    ob1.add_comm(0, vec![0], 0).unwrap();
    let pml = Arc::new(Pml::new(ob1, 100, true));
    let threads: Vec<_> = (0..4)
        .map(|t: i32| {
            let pml = Arc::clone(&pml);
            std::thread::spawn(move || {
                for i in 0..500usize {
                    let len = [0usize, 8, 100, 5000, 70_000][i % 5];
                    let mut src: Vec<u8> = (0..len).map(|k| (k + i) as u8 ^ t as u8).collect();
                    let mut dst = vec![0u8; len];
                    // SAFETY: both vectors outlive the requests, which are
                    // waited for below, and are not touched meanwhile.
                    let (s, d) = unsafe {
                        (
                            MemRegion::new(src.as_mut_ptr(), len),
                            MemRegion::new(dst.as_mut_ptr(), len),
                        )
                    };
                    let r = pml
                        .with(|o| o.irecv(Buffer::Contig(d), Source::Rank(0), Tag::Value(t), 0))
                        .unwrap();
                    let mode = if i % 7 == 0 {
                        SendMode::Synchronous
                    } else {
                        SendMode::Standard
                    };
                    let sr = pml
                        .with(|o| o.isend(Buffer::Contig(s), 0, t, 0, mode))
                        .unwrap();
                    let st = pml.wait(r).unwrap();
                    pml.wait(sr).unwrap();
                    assert_eq!((st.tag, st.bytes), (t, len));
                    assert_eq!(src, dst, "thread {t} message {i}");
                }
            })
        })
        .collect();
    for h in threads {
        h.join().unwrap();
    }
    assert_eq!(pml.with(|o| o.active_requests()), 0);
}

/// Pins the calling thread to `cpu`.
fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).unwrap();
}

#[test]
fn a_thread_waiting_for_the_lock_on_the_same_core_gets_it() {
    // Both threads on one core (ranks are bound to one core by default):
    // one polls for a message without ever blocking (an MPI_Test loop, the
    // lock taken and released again and again), the other must take the
    // lock to send that message. Each round must end promptly, not when the
    // poller happens to be preempted outside the lock.
    let cpu = {
        let set = rustix::thread::sched_getaffinity(None).unwrap();
        (0..rustix::thread::CpuSet::MAX_CPU)
            .find(|&c| set.is_set(c))
            .unwrap()
    };
    let btls: Vec<Box<dyn Btl + Send>> = vec![Box::new(SelfBtl::new(0, DEFAULT_LIMITS))];
    let mut ob1 = Ob1::new(PmlConfig::default(), 0, btls, &[PeerDesc::default()]).unwrap();
    ob1.add_comm(0, vec![0], 0).unwrap();
    let pml = Arc::new(Pml::new(ob1, 20_000, false));
    for round in 0..6 {
        let mut dst = [0u8; 8];
        // SAFETY: `dst` outlives the receive, which completes in this round.
        let d = unsafe { MemRegion::new(dst.as_mut_ptr(), 8) };
        let r = pml
            .with(|o| o.irecv(Buffer::Contig(d), Source::Rank(0), Tag::Value(round), 0))
            .unwrap();
        let sender = {
            let pml = Arc::clone(&pml);
            std::thread::spawn(move || {
                pin(cpu);
                std::thread::sleep(std::time::Duration::from_millis(5));
                let mut src = [round as u8; 8];
                // SAFETY: `src` outlives the send, waited for below.
                let s = unsafe { MemRegion::new(src.as_mut_ptr(), 8) };
                let t = std::time::Instant::now();
                let id = pml
                    .with(|o| o.isend(Buffer::Contig(s), 0, round, 0, SendMode::Standard))
                    .unwrap();
                let waited = t.elapsed();
                pml.wait(id).unwrap();
                waited
            })
        };
        pin(cpu);
        let t = std::time::Instant::now();
        // Even rounds poll with `test`; odd ones block in `wait`, which
        // holds the lock for several progress passes at a time.
        let st = if round % 2 == 1 {
            pml.wait(r).unwrap()
        } else {
            loop {
                if let Some(st) = pml.test(r).unwrap() {
                    break st;
                }
                assert!(
                    t.elapsed() < std::time::Duration::from_secs(10),
                    "round {round}: the sender never got the lock"
                );
            }
        };
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "round {round}: the sender got the lock only after {:?}",
            t.elapsed()
        );
        let waited = sender.join().unwrap();
        assert_eq!((st.tag, st.bytes, dst), (round, 8, [round as u8; 8]));
        eprintln!("round {round}: the sender waited {waited:?} for the lock");
    }
}
