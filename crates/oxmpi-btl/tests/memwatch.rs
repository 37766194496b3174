//! The memory watcher reports the release of watched memory (free of a
//! large block, munmap, mremap that moves it, madvise(MADV_DONTNEED)) and
//! nothing once unwatched.

use oxmpi_btl::memwatch::MemWatch;
use rustix::mm::{
    madvise, mmap_anonymous, mremap_fixed, munmap, Advice, MapFlags, MremapFlags, ProtFlags,
};

const PAGE: usize = 4096;

/// The tests map, free and watch memory of one process-wide watcher, and a
/// release is reported only once the memory is gone: a parallel test could
/// map the same addresses in between and see a stale event. So they run
/// one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}
/// Above glibc's largest mmap threshold: always its own mapping.
const BIG: usize = 64 << 20;

/// The page-aligned interior of a buffer.
fn interior(v: &[u8]) -> (usize, usize) {
    let a = (v.as_ptr() as usize + PAGE - 1) & !(PAGE - 1);
    let b = (v.as_ptr() as usize + v.len()) & !(PAGE - 1);
    (a, b - a)
}

fn released(w: &MemWatch, seen: &mut u64, start: usize, len: usize) -> bool {
    let mut hit = false;
    w.changes(seen, |a, b| hit |= a < start + len && b > start)
        .expect("no overflow");
    hit
}

fn anon(len: usize) -> usize {
    // SAFETY: a fresh private anonymous mapping at an address the kernel
    // chooses; nothing else refers to it.
    let p = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }
    .expect("mmap");
    p as usize
}

#[test]
fn free_of_a_watched_block_is_reported() {
    let _one = serial();
    let w = MemWatch::get().expect("userfaultfd works here");
    let v = vec![0u8; BIG];
    let (a, n) = interior(&v);
    assert!(w.watch(a, n));
    let mut seen = w.cursor();
    assert!(!released(&w, &mut seen, a, n), "nothing released yet");
    drop(v);
    assert!(
        released(&w, &mut seen, a, n),
        "free of a watched block not reported"
    );
    w.unwatch(a, n);
}

#[test]
fn munmap_mremap_and_madvise_are_reported() {
    let _one = serial();
    let w = MemWatch::get().expect("userfaultfd works here");
    let len = 16 * PAGE;
    let a = anon(len);
    assert!(w.watch(a, len));
    let mut seen = w.cursor();
    // SAFETY: the mapping is ours; dropping its pages only zeroes them.
    unsafe { madvise(a as *mut _, PAGE, Advice::LinuxDontNeed) }.unwrap();
    assert!(
        released(&w, &mut seen, a, PAGE),
        "madvise(DONTNEED) not reported"
    );
    // Moved elsewhere: the old range is released.
    let to = anon(len);
    // SAFETY: both mappings are ours; `to` is replaced by the moved one.
    let moved =
        unsafe { mremap_fixed(a as *mut _, len, len, MremapFlags::MAYMOVE, to as *mut _) }.unwrap();
    assert_eq!(moved as usize, to);
    assert!(
        released(&w, &mut seen, a, len),
        "mremap that moved not reported"
    );
    // The watch moves with the memory: unmapping it is reported too.
    // SAFETY: the mapping is ours and nothing refers to it.
    unsafe { munmap(to as *mut _, len) }.unwrap();
    assert!(released(&w, &mut seen, to, len), "munmap not reported");
    w.unwatch(a, len);
}

#[test]
fn unwatched_memory_is_not_reported_and_overlaps_are_counted() {
    let _one = serial();
    let w = MemWatch::get().expect("userfaultfd works here");
    let v = vec![0u8; BIG];
    let (a, n) = interior(&v);
    // Two watches of overlapping ranges: ending one keeps the other.
    assert!(w.watch(a, n));
    assert!(w.watch(a + PAGE, PAGE));
    w.unwatch(a, n);
    let mut seen = w.cursor();
    drop(v);
    let mut hits = Vec::new();
    w.changes(&mut seen, |s, e| hits.push((s, e))).unwrap();
    assert!(
        hits.iter()
            .any(|&(s, e)| s <= a + PAGE && e >= a + 2 * PAGE),
        "the still-watched page's release was not reported: {hits:x?}"
    );
    w.unwatch(a + PAGE, PAGE);

    // Watched, then unwatched: its release is not reported.
    let v = vec![0u8; BIG];
    let (a, n) = interior(&v);
    assert!(w.watch(a, n));
    w.unwatch(a, n);
    let mut seen = w.cursor();
    drop(v);
    assert!(
        !released(&w, &mut seen, a, n),
        "an unwatched block was reported"
    );
}

#[test]
fn memory_that_cannot_be_watched_says_so() {
    static TEXT: [u8; 3 * PAGE] = [7; 3 * PAGE];
    let _one = serial();
    let w = MemWatch::get().expect("userfaultfd works here");
    let (a, n) = interior(&TEXT);
    assert!(
        !w.watch(a, n),
        "read-only file-backed data cannot be watched"
    );
}

#[test]
fn a_new_mapping_where_a_counted_watch_was_is_watched_again() {
    let _one = serial();
    let w = MemWatch::get().expect("userfaultfd works here");
    let len = 8 * PAGE;
    let a = anon(len);
    // Fresh memory over `a`, replacing what is there. The range is never
    // left free until the end: other tests run in parallel threads, and
    // one of their mappings could land in a gap and be replaced here.
    let replace = || {
        // SAFETY: `a..a + len` is our own mapping, which MAP_FIXED replaces
        // in one step; nothing refers to its old pages.
        let b = unsafe {
            mmap_anonymous(
                a as *mut _,
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
            )
        }
        .unwrap() as usize;
        assert_eq!(a, b);
    };
    assert!(w.watch(a, len));
    let mut seen = w.cursor();
    // Released while its watch is still counted (a cache entry in use).
    replace();
    assert!(released(&w, &mut seen, a, len));
    // The new memory at the same address, watched again: its release must
    // be reported too (the kernel forgot the old registration).
    assert!(w.watch(a, len));
    replace();
    assert!(
        released(&w, &mut seen, a, len),
        "the new mapping's release was not reported"
    );
    w.unwatch(a, len);
    w.unwatch(a, len);
    // SAFETY: the mapping is ours and nothing refers to it.
    unsafe { munmap(a as *mut _, len) }.unwrap();
}
