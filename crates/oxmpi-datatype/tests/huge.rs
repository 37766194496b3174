//! Huge repetitive types stay O(1) in memory: building a vector of 10^7
//! blocks, making a convertor for it and packing / unpacking a small window
//! anywhere in its stream allocate a few hundred bytes, not memory
//! proportional to the count. A counting global allocator measures it.
//!
//! This test binary is its own crate; the library itself stays
//! `#![forbid(unsafe_code)]`. The only `unsafe` here is the allocator shim.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use oxmpi_datatype::{Convertor, Datatype};

struct Counting;

static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Tests in this binary run on several threads; the byte counter is global.
static SERIAL: Mutex<()> = Mutex::new(());

/// Bytes allocated (in total, not net) while running `f`. The table of
/// predefined types is built (once per process) beforehand.
fn allocated<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let _ = Datatype::u8();
    let before = BYTES.load(Ordering::Relaxed);
    let out = f();
    (out, BYTES.load(Ordering::Relaxed) - before)
}

const N: usize = 10_000_000;

#[test]
fn vector_of_ten_million_blocks_packs_a_window_in_constant_memory() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Every other byte of a 2 * 10^7-byte buffer.
    let buf: Vec<u8> = (0..2 * N).map(|i| (i / 2) as u8 ^ (i % 2) as u8).collect();
    let mut out = [0u8; 64];
    let (conv, bytes) = allocated(|| {
        let t = Datatype::vector(N as isize, 1, 2, &Datatype::u8()).unwrap();
        assert_eq!((t.size(), t.extent()), (N, 2 * N as isize - 1));
        assert!(t.layout_units() <= 2, "{}", t.layout_units());
        let conv = Convertor::new(&t, 1).unwrap();
        for off in [0, N / 2 + 3, N - 64] {
            assert_eq!(conv.pack(&buf, 0, off, &mut out).unwrap(), 64);
            for (k, &b) in out.iter().enumerate() {
                assert_eq!(b, (off + k) as u8);
            }
        }
        conv
    });
    eprintln!("allocated {bytes} bytes");
    assert!(bytes < 4096, "allocated {bytes} bytes");

    let mut dst = vec![0u8; 2 * N];
    let ((), bytes) = allocated(|| {
        let input = [0xABu8; 64];
        assert_eq!(conv.unpack(&mut dst, 0, N - 100, &input).unwrap(), 64);
    });
    assert_eq!(bytes, 0, "unpack allocates nothing");
    assert_eq!(&dst[2 * (N - 100)..2 * (N - 100) + 4], &[0xAB, 0, 0xAB, 0]);
    assert_eq!(dst[2 * (N - 100) - 2], 0);
}

#[test]
fn nested_and_counted_repetition_stays_compact() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // 10^7 elements of a 1-byte type with a 2-byte extent, via the count.
    let buf = vec![7u8; 2 * N];
    let mut out = [0u8; 32];
    let ((), bytes) = allocated(|| {
        let t = Datatype::resized(&Datatype::u8(), 0, 2).unwrap();
        let conv = Convertor::new(&t, N).unwrap();
        assert_eq!(conv.pack(&buf, 0, N - 32, &mut out).unwrap(), 32);
    });
    eprintln!("allocated {bytes} bytes");
    assert!(bytes < 4096, "allocated {bytes} bytes");
    assert_eq!(out, [7u8; 32]);

    // A 1000 x 1000 x 10 block of a 3-D array (10^7 elements, 10^6 runs of 10
    // bytes): the layout is a few nodes.
    let ((), bytes) = allocated(|| {
        let t = Datatype::subarray(
            &[1000, 1001, 20],
            &[1000, 1000, 10],
            &[0, 1, 5],
            oxmpi_datatype::Order::C,
            &Datatype::u8(),
        )
        .unwrap();
        assert_eq!(t.size(), N);
        assert_eq!(t.run_count(), 1_000_000);
        assert!(t.layout_units() <= 8, "{}", t.layout_units());
    });
    eprintln!("allocated {bytes} bytes");
    assert!(bytes < 8192, "allocated {bytes} bytes");
}
