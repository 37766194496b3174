//! The shared segment: create, card, attach (same process and another
//! process), and bad cards that must be errors, not crashes.

mod sm_cma_support;

use oxmpi_btl::sm::segment::{
    BackingKind, Segment, SegmentCard, SegmentError, SegmentKind, CARD_LEN, DATA_OFFSET,
};
use proptest::prelude::*;
use sm_cma_support::{child_mode, from_hex, next_command, say, to_hex, ChildProc};

const LEN: usize = 1 << 20;

/// Child side of `two_processes_*`.
#[test]
fn child_entry() {
    let Some(mode) = child_mode() else { return };
    match mode.as_str() {
        // Attach the parent's segment, check its pattern, write ours.
        "attach-write" => {
            let card = SegmentCard::from_bytes(&from_hex(&std::env::var("CARD").unwrap())).unwrap();
            let map = Segment::attach(&card).unwrap();
            // SAFETY: the parent does not touch the segment until we exit.
            let data = unsafe { std::slice::from_raw_parts_mut(map.as_ptr().as_ptr(), map.len()) };
            assert_eq!(&data[..4], b"PING");
            data[map.len() - 4..].copy_from_slice(b"PONG");
            say("done");
        }
        // Own a segment, let the parent attach and write, check its write.
        "own" => {
            let kind = match std::env::var("KIND").unwrap().as_str() {
                "memfd" => SegmentKind::Memfd,
                _ => SegmentKind::ShmFile,
            };
            let mut seg = Segment::create(LEN, kind).unwrap();
            // SAFETY: the parent only writes after our "card" line and we
            // only read after its "check" command.
            let data = unsafe { std::slice::from_raw_parts_mut(seg.as_ptr().as_ptr(), seg.len()) };
            data[..4].copy_from_slice(b"MINE");
            say(&format!("card={}", to_hex(&seg.card().to_bytes())));
            assert_eq!(next_command().as_deref(), Some("attached"));
            seg.unlink_name().unwrap();
            assert_eq!(next_command().as_deref(), Some("check"));
            assert_eq!(&data[LEN - 5..], b"THEIR");
            say("ok");
        }
        other => panic!("unknown child mode {other}"),
    }
    std::process::exit(0);
}

fn slice(ptr: std::ptr::NonNull<u8>, len: usize) -> &'static mut [u8] {
    // SAFETY: tests keep the segment alive while they use the slice and
    // synchronise the two views by program order (same thread) or by the
    // child's exit / pipe messages.
    unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), len) }
}

/// Volatile byte store: two mappings of one object alias behind the
/// compiler's back.
fn poke(ptr: std::ptr::NonNull<u8>, off: usize, value: u8) {
    // SAFETY: callers pass offsets inside a live mapping.
    unsafe { ptr.as_ptr().add(off).write_volatile(value) }
}

/// Volatile byte load, see [`poke`].
fn peek(ptr: std::ptr::NonNull<u8>, off: usize) -> u8 {
    // SAFETY: callers pass offsets inside a live mapping.
    unsafe { ptr.as_ptr().add(off).read_volatile() }
}

fn same_process(kind: SegmentKind, expect: BackingKind) {
    let seg = Segment::create(LEN, kind).unwrap();
    let card = seg.card();
    assert_eq!(card.kind, expect);
    assert_eq!(card.len, LEN as u64);
    assert_eq!(card.pid, std::process::id());
    assert_eq!(seg.len(), LEN);
    assert_eq!(seg.as_ptr().as_ptr() as usize % 4096, 0);
    let map = Segment::attach(&SegmentCard::from_bytes(&card.to_bytes()).unwrap()).unwrap();
    assert_eq!(map.len(), LEN);
    assert_eq!(map.card(), card);
    assert_ne!(map.as_ptr(), seg.as_ptr(), "two distinct mappings");
    let (a, b) = (seg.as_ptr(), map.as_ptr());
    assert!(
        (0..LEN).step_by(61).all(|i| peek(a, i) == 0),
        "starts zeroed"
    );
    poke(a, 0, 0xab);
    poke(a, LEN - 1, 0xcd);
    assert_eq!((peek(b, 0), peek(b, LEN - 1)), (0xab, 0xcd));
    poke(b, 12345, 7);
    assert_eq!(peek(a, 12345), 7);
    // The peer's mapping outlives the owner.
    drop(seg);
    assert_eq!(peek(b, 0), 0xab);
}

#[test]
fn same_process_memfd() {
    same_process(SegmentKind::Memfd, BackingKind::Memfd);
}

#[test]
fn same_process_shm_file() {
    same_process(SegmentKind::ShmFile, BackingKind::ShmFile);
}

#[test]
fn auto_prefers_memfd() {
    same_process(SegmentKind::Auto, BackingKind::Memfd);
}

#[test]
fn shm_file_unlink_name() {
    let mut seg = Segment::create(4096, SegmentKind::ShmFile).unwrap();
    let card = seg.card();
    let path = card.path();
    assert!(path.starts_with("/dev/shm"));
    assert!(path.exists());
    let map = Segment::attach(&card).unwrap();
    seg.unlink_name().unwrap();
    seg.unlink_name().unwrap();
    assert!(!path.exists());
    // Mapped memory still shared after the unlink.
    poke(seg.as_ptr(), 9, 9);
    assert_eq!(peek(map.as_ptr(), 9), 9);
    // A late peer cannot attach any more.
    match Segment::attach(&card) {
        Err(SegmentError::Open { errno, .. }) => assert_eq!(errno, rustix::io::Errno::NOENT),
        other => panic!("{other:?}"),
    }
}

#[test]
fn shm_file_unlinked_at_drop() {
    let seg = Segment::create(4096, SegmentKind::ShmFile).unwrap();
    let path = seg.card().path();
    assert!(path.exists());
    drop(seg);
    assert!(!path.exists());
}

#[test]
fn zero_length_is_an_error() {
    assert!(matches!(
        Segment::create(0, SegmentKind::Memfd),
        Err(SegmentError::Length(0))
    ));
}

#[test]
fn bad_cards_are_errors() {
    let seg = Segment::create(LEN, SegmentKind::Memfd).unwrap();
    let card = seg.card();

    let wrong_cookie = SegmentCard {
        cookie: card.cookie ^ 1,
        ..card
    };
    assert!(matches!(
        Segment::attach(&wrong_cookie),
        Err(SegmentError::Header { .. })
    ));

    let wrong_size = SegmentCard {
        len: card.len + 4096,
        ..card
    };
    assert!(matches!(
        Segment::attach(&wrong_size),
        Err(SegmentError::Size { .. })
    ));

    // A pid that is not running (pid_max is at most 2^22).
    let dead = SegmentCard {
        pid: (1 << 22) + 17,
        ..card
    };
    assert!(matches!(
        Segment::attach(&dead),
        Err(SegmentError::Open { .. })
    ));

    // An fd that is not open.
    let no_fd = SegmentCard {
        fd: 100_000,
        ..card
    };
    assert!(matches!(
        Segment::attach(&no_fd),
        Err(SegmentError::Open { .. })
    ));

    // An fd that is a pipe, not a segment.
    let (r, _w) = rustix::pipe::pipe().unwrap();
    use std::os::fd::AsRawFd;
    let pipe = SegmentCard {
        fd: r.as_raw_fd(),
        ..card
    };
    assert!(Segment::attach(&pipe).is_err());

    // Another memfd of the same size but another cookie.
    let other = Segment::create(LEN, SegmentKind::Memfd).unwrap();
    let swapped = SegmentCard {
        fd: other.card().fd,
        ..card
    };
    assert!(matches!(
        Segment::attach(&swapped),
        Err(SegmentError::Header { .. })
    ));

    // A shm file that does not exist.
    let missing = SegmentCard {
        kind: BackingKind::ShmFile,
        fd: -1,
        ..card
    };
    assert!(matches!(
        Segment::attach(&missing),
        Err(SegmentError::Open { .. })
    ));
}

#[test]
fn malformed_card_bytes() {
    let card = Segment::create(4096, SegmentKind::Memfd).unwrap().card();
    let good = card.to_bytes();
    assert_eq!(SegmentCard::from_bytes(&good).unwrap(), card);
    assert!(SegmentCard::from_bytes(&good[..CARD_LEN - 1]).is_err());
    assert!(SegmentCard::from_bytes(&[good.as_slice(), &[0]].concat()).is_err());
    for (at, value) in [(0, b'X'), (4, 9), (5, 0), (5, 3), (6, 1), (21, 1)] {
        let mut bad = good;
        bad[at] = value;
        assert!(
            SegmentCard::from_bytes(&bad).is_err(),
            "byte {at} = {value}"
        );
    }
    let mut zero_pid = good;
    zero_pid[8..12].fill(0);
    assert!(SegmentCard::from_bytes(&zero_pid).is_err());
    let mut zero_len = good;
    zero_len[24..32].fill(0);
    assert!(SegmentCard::from_bytes(&zero_len).is_err());
    let mut huge_len = good;
    huge_len[24..32].fill(0xff);
    assert!(SegmentCard::from_bytes(&huge_len).is_err());
    let mut shm_with_fd = good;
    shm_with_fd[5] = 2;
    assert!(SegmentCard::from_bytes(&shm_with_fd).is_err());
}

proptest! {
    #[test]
    fn card_parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = SegmentCard::from_bytes(&bytes);
    }

    #[test]
    fn card_round_trip(
        pid in 1u32..=i32::MAX as u32,
        uid in any::<u32>(),
        fd in 0i32..=i32::MAX,
        len in 1u64..(1 << 50),
        cookie in any::<u64>(),
        memfd in any::<bool>(),
    ) {
        let card = SegmentCard {
            kind: if memfd { BackingKind::Memfd } else { BackingKind::ShmFile },
            pid,
            uid,
            fd: if memfd { fd } else { -1 },
            len,
            cookie,
        };
        prop_assert_eq!(SegmentCard::from_bytes(&card.to_bytes()).unwrap(), card);
    }
}

fn two_processes(kind: SegmentKind) {
    // The parent owns, the child attaches and writes.
    let seg = Segment::create(LEN, kind).unwrap();
    slice(seg.as_ptr(), LEN)[..4].copy_from_slice(b"PING");
    let mut child = ChildProc::spawn("attach-write", &[("CARD", to_hex(&seg.card().to_bytes()))]);
    assert_eq!(child.hear(), "done");
    child.finish();
    assert_eq!(&slice(seg.as_ptr(), LEN)[LEN - 4..], b"PONG");

    // The child owns, the parent attaches and writes.
    let name = if kind == SegmentKind::Memfd {
        "memfd"
    } else {
        "shm"
    };
    let mut child = ChildProc::spawn("own", &[("KIND", name.to_string())]);
    let line = child.hear();
    let card = SegmentCard::from_bytes(&from_hex(line.strip_prefix("card=").unwrap())).unwrap();
    assert_eq!(card.pid, child.pid());
    let map = Segment::attach(&card).unwrap();
    child.tell("attached");
    let data = slice(map.as_ptr(), LEN);
    assert_eq!(&data[..4], b"MINE");
    data[LEN - 5..].copy_from_slice(b"THEIR");
    child.tell("check");
    assert_eq!(child.hear(), "ok");
    child.finish();
    // The owner is gone; our mapping is still good.
    assert_eq!(&data[..4], b"MINE");
    assert!(Segment::attach(&card).is_err(), "the owner is gone");
}

#[test]
fn two_processes_memfd() {
    two_processes(SegmentKind::Memfd);
}

#[test]
fn two_processes_shm_file() {
    two_processes(SegmentKind::ShmFile);
}

#[test]
fn data_offset_is_a_page() {
    assert_eq!(DATA_OFFSET, 4096);
}

/// The `/dev/shm` fallback in a tmpfs too small for it: creating the
/// segment fails with an error that names the directory and the parameter
/// to lower, instead of a SIGBUS at the first write to a page the tmpfs
/// cannot give. Run in a private mount namespace with a 256 KiB tmpfs on
/// `/dev/shm` (needs root and `unshare`, as in CI; elsewhere skipped).
#[test]
fn a_full_dev_shm_is_an_error_not_a_sigbus() {
    if std::env::var_os("OXMPI_SMALL_SHM_CHILD").is_some() {
        let err = Segment::create(LEN, SegmentKind::ShmFile).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("fallocate") && text.contains("/dev/shm has too little room"),
            "{text}"
        );
        assert!(text.contains("btl_sm_ring_size"), "{text}");
        // Nothing left behind.
        assert_eq!(std::fs::read_dir("/dev/shm").unwrap().count(), 0);
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "mount -t tmpfs -o size=256k tmpfs /dev/shm && exec {} --exact \
         a_full_dev_shm_is_an_error_not_a_sigbus --nocapture",
        exe.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("OXMPI_SMALL_SHM_CHILD", "1")
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("panicked") => {
            panic!("{}", String::from_utf8_lossy(&o.stderr))
        }
        Ok(o) if o.status.signal_or_code() == Some(-7) => {
            panic!("the child died of SIGBUS")
        }
        other => {
            assert!(
                std::env::var_os("CI").is_none(),
                "cannot run in a private mount namespace in CI: {other:?}"
            );
            eprintln!("note: needs root and unshare; skipped ({other:?})");
            return;
        }
    };
    assert!(out.status.success());
}

trait SignalOrCode {
    fn signal_or_code(&self) -> Option<i32>;
}

impl SignalOrCode for std::process::ExitStatus {
    /// The exit code, or minus the signal that killed it.
    fn signal_or_code(&self) -> Option<i32> {
        use std::os::unix::process::ExitStatusExt;
        self.code().or_else(|| self.signal().map(|s| -s))
    }
}
