//! The rings across two real processes: a shared anonymous mapping, then
//! fork. The child does only ring work and leaves with `_exit`.
#![cfg(not(loom))]

use oxmpi_btl::sm::ring::{Inbox, InboxReceiver};
use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};
use std::ptr::NonNull;

const RECORDS: u64 = 200_000;

#[test]
fn inbox_across_fork() {
    let cap = 16 * 1024;
    let len = Inbox::required_bytes(2, cap).unwrap();
    // SAFETY: a fresh anonymous shared mapping; nothing else refers to it.
    let base = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
        )
    }
    .expect("mmap");
    let base = NonNull::new(base.cast::<u8>()).unwrap();
    // SAFETY: the mapping is ours, page aligned, `len` bytes, zeroed.
    unsafe { Inbox::init(base, len, 2, cap) }.unwrap();

    // SAFETY: fork; the child below runs only ring code and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // Child: sender 1. Exit code 0 on success.
        // SAFETY: the inherited shared mapping stays valid in the child.
        let code = match unsafe { Inbox::attach_sender(base, len, 1) } {
            Ok(mut p) => {
                for i in 0..RECORDS {
                    let n = (i % 100) as usize;
                    while p
                        .try_send((i % 251) as u8, &[&i.to_le_bytes(), &[i as u8; 100][..n]])
                        .is_err()
                    {
                        std::hint::spin_loop();
                    }
                }
                0
            }
            Err(_) => 3,
        };
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: the mapping outlives the receiver (unmapped after it drops).
    let mut rx: InboxReceiver = unsafe { InboxReceiver::attach(base, len) }.unwrap();
    let mut next = 0u64;
    let start = std::time::Instant::now();
    while next < RECORDS {
        rx.poll_all(|sender, tag, payload| {
            assert_eq!(sender, 1);
            assert_eq!(tag, (next % 251) as u8);
            assert_eq!(payload[..8], next.to_le_bytes());
            let n = (next % 100) as usize;
            assert_eq!(payload.len(), 8 + n);
            assert!(payload[8..].iter().all(|&b| b == next as u8));
            next += 1;
        })
        .unwrap();
        assert!(start.elapsed().as_secs() < 60, "stuck at record {next}");
    }
    assert_eq!(rx.active_senders().collect::<Vec<_>>(), vec![1]);
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    drop(rx);
    // SAFETY: nothing refers to the mapping any more.
    unsafe { munmap(base.as_ptr().cast(), len) }.unwrap();
}
