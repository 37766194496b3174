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
